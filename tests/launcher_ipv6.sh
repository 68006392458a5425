#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_ipv6.sh -- whole jobs over IPv6: hooprun with --master-addr ::1 (and
# --rdzv-endpoint [::1]:PORT, MASTER_ADDR=::1, HOOP_SOCKET_IFNAME=lo) runs 3 workers of
# hoop-bench on the tcp transport; every all-reduce is checked against hoop-bench's
# reference (#wrong 0, in and out of place), and the transport's DEBUG lines show each
# rank listening on an IPv6 address. Then the same over this host's link-local address
# with its zone (MASTER_ADDR=fe80::...%IF) when it has one; over a host name that
# resolves to ::1 only (an /etc/hosts of the test's own, in a private mount namespace,
# where unshare(1) can make one); and between two "hosts" that have IPv6 addresses only
# (network namespaces joined by a veth pair, where ip(8) can make them: root), once
# through their global addresses and once through their link-local ones, whose zones
# differ on the two sides. Skips (77) without an IPv6 loopback.
. "${top_srcdir:-.}/tests/launcher_lib.sh"
BENCH=${top_builddir:-.}/bench/hoop-bench
[ -x "$BENCH" ] || fail "hoop-bench is not built"

# /proc/net/if_inet6: address (32 hex digits), ifindex, prefix length, scope, flags, name.
if ! grep -q '^00000000000000000000000000000001 .* lo$' /proc/net/if_inet6 2> /dev/null; then
    echo "SKIP: no IPv6 loopback (::1 on lo is not in /proc/net/if_inet6)"
    exit 77
fi

# run_job NAME ADDR_RE ENV... -- HOOPRUN_ARGS...: 3 tcp workers of a checked all-reduce
# sweep (8 B to 1 MiB, several streams per link), each rank's output in $TMP/NAME.
run_job() {
    local name=$1 want=$2
    shift 2
    local envs=()
    while [ "$1" != -- ]; do
        envs+=("$1")
        shift
    done
    shift
    env "${envs[@]}" HOOP_TRANSPORT=tcp HOOP_TCP_NSOCKS=2 HOOP_TIMEOUT=60 HOOP_DEBUG=DEBUG \
        HOOP_DEBUG_SUBSYS=NET "$HOOPRUN" --prefix --nproc-per-node 3 "$@" "$BENCH" allreduce \
        -b 8 -e 1M -f 32 -n 2 -w 1 -c 1 > "$TMP/$name" 2>&1 ||
        { rc=$?; cat "$TMP/$name"; fail "$name: the job exited $rc"; }
    check_job "$name" "$want"
}

# check_job NAME ADDR_RE: rank 0 printed the 4 sizes with #wrong 0 in and out of place,
# and ranks 0..2 listened on an address that ADDR_RE (grep -E) matches.
check_job() {
    check_rows "$TMP/$1" "$1"
    check_listen "$TMP/$1" "$1" "$2" 0 1 2
    echo "PASS: $1: 3 ranks over tcp on $(grep -oE "listening on $2" "$TMP/$1" |
        head -1 | cut -d' ' -f3), 8 B..1 MiB all-reduced right"
}

# check_rows FILE NAME: rank 0's 4 size rows in FILE have #wrong 0 in and out of place.
check_rows() {
    local rows
    rows=$(grep -E '^\[rank 0\] +[0-9]+ +[0-9]+ +float +sum ' "$1")
    [ "$(echo "$rows" | grep -c .)" = 4 ] || { cat "$1"; fail "$2: not 4 size rows"; }
    # $1 $2 = "[rank 0]"; #wrong out of place is $11, in place $15
    echo "$rows" | awk '$11 != 0 || $15 != 0 { bad = 1 } END { exit bad }' ||
        { echo "$rows"; fail "$2: wrong all-reduce results"; }
}

# check_listen FILE NAME ADDR_RE RANK...: each RANK's tcp listened on ADDR_RE.
check_listen() {
    local file=$1 name=$2 want=$3 r
    shift 3
    for r in "$@"; do
        grep -qE "TCP: rank $r listening on $want" "$file" ||
            { cat "$file"; fail "$name: rank $r listened elsewhere than $want"; }
    done
}

# Below Linux's ephemeral range (32768 up), where the links of tests running beside this
# one take their ports: a port from there was once found in use.
port() { echo $((20000 + RANDOM % 12000)); }

run_job master-addr "\\[::1\\]:[0-9]+$" -- --master-addr ::1 --master-port "$(port)"
run_job rdzv-endpoint "\\[::1\\]:[0-9]+$" -- --rdzv-endpoint "[::1]:$(port)"
run_job env "\\[::1\\]:[0-9]+$" MASTER_ADDR=::1 "MASTER_PORT=$(port)" --
# HOOP_SOCKET_IFNAME=lo has 127.0.0.1 and ::1: an IPv6 MASTER_ADDR takes ::1.
run_job ifname "\\[::1\\]:[0-9]+$" HOOP_SOCKET_IFNAME=lo -- --master-addr ::1 --master-port "$(port)"

# Messages write an IPv6 rendezvous in brackets: hooprun's restart line, and a second
# rank 0 on a port whose store is up (rank 0 of a 2-rank job started by hand, waiting).
p=$(port)
"$HOOPRUN" --nproc-per-node 1 --max-restarts 1 --master-addr ::1 --master-port "$p" false \
    2> "$TMP/restart"
assert_contains "$TMP/restart" "(rendezvous [::1]:$p, restart count 1 in the token)"
SMOKE=${top_builddir:-.}/tools/hoop-smoke
MASTER_ADDR=::1 MASTER_PORT=$p RANK=0 WORLD_SIZE=2 HOOP_TOKEN=t HOOP_TIMEOUT=120 "$SMOKE" \
    > /dev/null 2> "$TMP/first" &
first=$!
hexport=$(printf '%04X' "$p")
t0=$(now_ms)
# Until /proc/net/tcp6 lists port p listening (state 0A; its addresses are words in
# host order, so the port alone is matched), for 60 s at most.
until grep -qE "^ *[0-9]+: [0-9A-F]+:$hexport [0-9A-F]+:0000 0A" /proc/net/tcp6; do
    kill -0 "$first" 2> /dev/null || { cat "$TMP/first"; fail "the first rank 0 on [::1]:$p exited"; }
    [ $(($(now_ms) - t0)) -lt 60000 ] || fail "nothing listens on [::1]:$p after 60 s"
    sleep 0.1
done
MASTER_ADDR=::1 MASTER_PORT=$p RANK=0 WORLD_SIZE=2 HOOP_TOKEN=t HOOP_TIMEOUT=20 "$SMOKE" \
    > /dev/null 2> "$TMP/inuse"
rc=$?
kill "$first" 2> /dev/null
wait "$first"
# 2, a configuration error (as hooprun's second --node-rank 0): it was 1.
[ "$rc" = 2 ] || { cat "$TMP/inuse"; fail "a second rank 0 on [::1]:$p exited $rc, not 2"; }
assert_contains "$TMP/inuse" "store: [::1]:$p is already in use"
echo "PASS: messages name [::1]:$p"

# Link-local: the first fe80:: address of an interface (scope 20 in /proc/net/if_inet6),
# written in full (inet_pton reads it; inet_ntop prints it compressed) with its zone.
read -r hex ifname < <(awk '$4 == "20" && $1 ~ /^fe80/ { print $1, $6; exit }' \
    /proc/net/if_inet6)
if [ -n "$hex" ]; then
    addr=$(echo "$hex" | sed -E 's/(....)/\1:/g; s/:$//')
    run_job link-local "\[fe80:[0-9a-f:]+%$ifname\]:[0-9]+$" -- --master-addr "$addr%$ifname" \
        --master-port "$(port)"
else
    echo "NOTE: link-local case skipped: no interface here has an fe80:: address"
fi

# A host name that resolves to ::1 only: /etc/hosts replaced in a mount namespace of
# the test's own (unshare -m as root, unshare -rm through a user namespace otherwise).
printf '::1 hoop-v6only.test\n' > "$TMP/hosts"
ns=()
for u in -m -rm; do
    unshare "$u" sh -c "mount --bind '$TMP/hosts' /etc/hosts" 2> /dev/null &&
        { ns=(unshare "$u" sh -c); break; }
done
if [ ${#ns[@]} -gt 0 ]; then
    [ "$("${ns[@]}" "mount --bind '$TMP/hosts' /etc/hosts && getent ahosts \
        hoop-v6only.test" | awk '{ print $1 }' | sort -u)" = ::1 ] ||
        fail "hoop-v6only.test does not resolve to ::1 only inside the namespace"
    "${ns[@]}" "mount --bind '$TMP/hosts' /etc/hosts && exec env HOOP_TRANSPORT=tcp \
        HOOP_TIMEOUT=60 HOOP_DEBUG=DEBUG HOOP_DEBUG_SUBSYS=NET '$HOOPRUN' --prefix \
        --nproc-per-node 3 --master-addr hoop-v6only.test --master-port $(port) '$BENCH' \
        allreduce -b 8 -e 1M -f 32 -n 2 -w 1 -c 1" > "$TMP/hostname" 2>&1 ||
        { rc=$?; cat "$TMP/hostname"; fail "hostname: the job exited $rc"; }
    check_job hostname "\\[::1\\]:[0-9]+$"
else
    echo "NOTE: IPv6-only host name case skipped: unshare cannot bind-mount /etc/hosts here"
fi

# Two hosts with IPv6 addresses only: namespaces A (fd7e::1, fe80::a on veth vA) and B
# (fd7e::2, fe80::b on vB), no IPv4 but their loopback, no DAD (addresses usable at
# once), no automatic link-local address. 2 nodes x 2 workers, tcp between all ranks.
na=hoop6a$$ nb=hoop6b$$ va=h6a$$ vb=h6b$$
two_hosts() {
    ip netns add $na 2> /dev/null || return 1
    trap 'ip netns del $na 2> /dev/null; ip netns del $nb 2> /dev/null; [ -n "$KEEP" ] ||
        rm -rf "$TMP"' EXIT
    if ! { ip netns add $nb && ip link add $va type veth peer name $vb &&
        ip link set $va netns $na && ip link set $vb netns $nb &&
        ip -n $na link set $va addrgenmode none && ip -n $nb link set $vb addrgenmode none &&
        ip -n $na addr add fd7e::1/64 dev $va nodad && ip -n $na addr add fe80::a/64 dev $va nodad &&
        ip -n $nb addr add fd7e::2/64 dev $vb nodad && ip -n $nb addr add fe80::b/64 dev $vb nodad &&
        ip -n $na link set lo up && ip -n $nb link set lo up &&
        ip -n $na link set $va up && ip -n $nb link set $vb up; }; then
        fail "cannot set up the two namespaces"
    fi
}

# two_node_job NAME MASTER_ON_A MASTER_ON_B ADDR_RE_A ADDR_RE_B
two_node_job() {
    local name=$1 p pid0 rc0 rc1
    p=$(port)
    ip netns exec $na env HOOP_TOKEN=ipv6-two-hosts HOOP_TRANSPORT=tcp HOOP_TIMEOUT=60 \
        HOOP_DEBUG=DEBUG HOOP_DEBUG_SUBSYS=NET "$HOOPRUN" --prefix --nnodes 2 --node-rank 0 \
        --nproc-per-node 2 --master-addr "$2" --master-port "$p" "$BENCH" allreduce -b 8 \
        -e 1M -f 32 -n 2 -w 1 -c 1 > "$TMP/$name.a" 2>&1 &
    pid0=$!
    ip netns exec $nb env HOOP_TOKEN=ipv6-two-hosts HOOP_TRANSPORT=tcp HOOP_TIMEOUT=60 \
        HOOP_DEBUG=DEBUG HOOP_DEBUG_SUBSYS=NET "$HOOPRUN" --prefix --nnodes 2 --node-rank 1 \
        --nproc-per-node 2 --master-addr "$3" --master-port "$p" "$BENCH" allreduce -b 8 \
        -e 1M -f 32 -n 2 -w 1 -c 1 > "$TMP/$name.b" 2>&1
    rc1=$?
    wait $pid0
    rc0=$?
    [ "$rc0,$rc1" = 0,0 ] || { cat "$TMP/$name.a" "$TMP/$name.b"; fail "$name: exited $rc0,$rc1"; }
    check_rows "$TMP/$name.a" "$name"
    check_listen "$TMP/$name.a" "$name" "$4" 0 1
    check_listen "$TMP/$name.b" "$name" "$5" 2 3
    echo "PASS: $name: 2 hosts x 2 ranks over tcp on $(grep -ohE "listening on $4" \
        "$TMP/$name.a" | head -1 | cut -d' ' -f3) and $(grep -ohE "listening on $5" \
        "$TMP/$name.b" | head -1 | cut -d' ' -f3), 8 B..1 MiB all-reduced right"
}

if two_hosts; then
    two_node_job two-hosts fd7e::1 fd7e::1 "\\[fd7e::1\\]:[0-9]+$" "\\[fd7e::2\\]:[0-9]+$"
    # Each side names the master through its own interface; rank 2 dials rank 0's
    # fe80::a through vB, not through the vA index rank 0 published.
    two_node_job two-hosts-link-local "fe80::a%$va" "fe80::a%$vb" "\\[fe80::a%$va\\]:[0-9]+$" \
        "\\[fe80::b%$vb\\]:[0-9]+$"
    # Node 0's link (and MASTER_ADDR with it) deleted under a running job: node 0's
    # hooprun, whose own connection to its store goes through MASTER_ADDR, says that its
    # own store stopped answering there (it blamed "node 0's hooprun", itself, and left
    # notes "for it to read when it runs again").
    p=$(port)
    ip netns exec $na env HOOP_TOKEN=ipv6-gone HOOP_TIMEOUT=4 "$HOOPRUN" --nnodes 2 --node-rank 0 \
        --nproc-per-node 1 --master-addr fd7e::1 --master-port "$p" sleep 30 > "$TMP/gone.a" 2>&1 &
    pid0=$!
    ip netns exec $nb env HOOP_TOKEN=ipv6-gone HOOP_TIMEOUT=4 "$HOOPRUN" --nnodes 2 --node-rank 1 \
        --nproc-per-node 1 --master-addr fd7e::1 --master-port "$p" sleep 30 > "$TMP/gone.b" 2>&1 &
    pid1=$!
    sleep 2
    ip -n $na link del $va
    wait $pid0
    rc0=$?
    wait $pid1
    [ "$rc0" = 1 ] || fail "node 0 whose MASTER_ADDR vanished exited $rc0, not 1: $(cat "$TMP/gone.a")"
    assert_contains "$TMP/gone.a" "this hooprun's own store did not answer it through MASTER_ADDR fd7e::1 within HOOP_TIMEOUT"
    grep -q "node 0's hooprun" "$TMP/gone.a" && fail "node 0 blames node 0's hooprun: $(cat "$TMP/gone.a")"
    echo "PASS: node 0 whose link went names its own store's silence"
else
    echo "NOTE: two-host case skipped: ip netns add failed (it needs root)"
fi
exit 0
