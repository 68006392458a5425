#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/rdma/suite.sh -- the steps of `make check-rdma`, run inside the guest of
# tests/rdma/vm.sh with the build tree as the current directory.
#
#   suite.sh [--list] [--skip-hoop] [STEP|GROUP]...
#
# Runs the steps of STEPS (below) in order, each in its own process under its own
# timeout, and prints one PASS, FAIL or SKIP line per step with its time; a failed
# step's last output lines follow its line, and a summary ends the run. Exit 0 when no
# step failed. Choose steps by name or group, as arguments or in HOOP_RDMA_STEPS
# (comma or space separated); --skip-hoop = the smoke group alone. Groups: smoke (the
# verbs stack itself: devices, ibv_rc_pingpong, hoop's programs load), hoop (hoop
# over HOOP_TRANSPORT=ib: transport tests, collectives on 2, 3 and 4 ranks, DDP,
# faults). Every step's whole output is in $HOOP_RDMA_LOGDIR (default
# tests/rdma-logs in the build tree), NAME.log.
#
# Adding a step: write a function step_NAME (exit 0 = pass, 77 = skip with the reason
# as its last line, anything else = fail; bad "..." prints a reason and fails), and add
# a line "NAME GROUP TIMEOUT-SECONDS what it checks" to STEPS. A step runs with the
# guest's RDMA_* variables (tests/rdma/vm.sh), in a fresh temporary folder $tmp,
# with $build (the build tree), $src (the source tree), $hooprun, $bench and $wrap
# (tests/rdma/rank_hca.sh: HOOP_IB_HCA = rxe0 for even local ranks, rxe1 for odd).
# The whole suite must stay within about 10 minutes of guest time.
#
# HOOP_RDMA_TRANSPORT=tcp runs the hoop steps over tcp instead of ib (the steps about
# verbs alone skip): a check of the rig itself, and a reference for timings.
# HOOP_RDMA_KILL_MS (default 3000) bounds the kill step's wait; HOOP_RDMA_FAULTS (a
# regular expression) picks the faults step's cells, HOOP_RDMA_FAULTS_TIMEOUT (default
# 10) sets its HOOP_TIMEOUT in seconds.
set -u

# The suite's own settings, then out of the environment: hoop warns about every HOOP_*
# variable it does not know. The steps (child processes) read the RDMA_SUITE_* copies.
export RDMA_SUITE_TP=${HOOP_RDMA_TRANSPORT:-${RDMA_SUITE_TP:-ib}}
export RDMA_SUITE_KILL_MS=${HOOP_RDMA_KILL_MS:-${RDMA_SUITE_KILL_MS:-3000}}
export RDMA_SUITE_LOGDIR=${HOOP_RDMA_LOGDIR:-${RDMA_SUITE_LOGDIR:-}}
export RDMA_SUITE_FAULTS=${HOOP_RDMA_FAULTS:-${RDMA_SUITE_FAULTS:-}}
export RDMA_SUITE_FAULTS_TIMEOUT=${HOOP_RDMA_FAULTS_TIMEOUT:-${RDMA_SUITE_FAULTS_TIMEOUT:-}}
steps_env=${HOOP_RDMA_STEPS:-}
for v in ${!HOOP_RDMA_@}; do unset "$v"; done
tp=$RDMA_SUITE_TP

STEPS="
devices   smoke 60  ibv_devices lists the rxe devices, each port active
pingpong  smoke 90  ibv_rc_pingpong between rxe0 and rxe1, across the veth pair
libs      smoke 60  hoop's programs find their libraries and start in the guest
check_ib  hoop  180 tests/check_ib (the verbs transport's tests) on rxe0 and rxe1
coll2     hoop  150 collectives over ib, 2 ranks on rxe0/rxe1: every algorithm, a 32 MiB all-reduce in 16 MiB chunks
coll3     hoop  120 collectives over ib, 3 ranks: every algorithm
coll4     hoop  120 collectives over ib, 4 ranks: every algorithm
ddp       hoop  150 hoop-train, 2 ranks: a checkpoint trained over ib equals one trained over tcp
kill      hoop  60  SIGKILL of rank 2 of 4: the others fail with HOOP_ERR_REMOTE naming it within 2 s
faults    hoop  300 the fault matrix's cells over ib (tests/faults/cells.sh): kills, a stop, a cut
bad_gid   hoop  45  HOOP_IB_GID_INDEX of an empty GID entry: a clear error naming it
bad_hca   hoop  45  HOOP_IB_HCA naming no device, forced ib: an error naming it
auto      hoop  150 ranks in two network namespaces (two hosts): auto picks ib; with a bogus HCA, tcp; over IPv4 and IPv6
"

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The fault matrix's cells (step faults) and its Fashion-MNIST cut (faults_data).
. "$src/tests/faults/cells.sh"
build=$(pwd)
hooprun=$build/tools/hooprun
bench=$build/bench/hoop-bench
wrap=$src/tests/rdma/rank_hca.sh

bad() {
    echo "FAIL: $*"
    exit 1
}
skip() {
    echo "SKIP: $*"
    exit 77
}
need_guest() {
    [ -n "${RDMA_GUEST:-}" ] || skip "not inside the guest of tests/rdma/vm.sh"
}

# ---------------------------------------------------------------- smoke

step_devices() {
    need_guest
    local out d
    out=$(ibv_devices) || bad "ibv_devices failed: $out"
    echo "$out"
    for d in $RDMA_DEVS; do
        echo "$out" | grep -qw "$d" || bad "ibv_devices does not list $d"
        ibv_devinfo -d "$d" | grep -q 'state:.*PORT_ACTIVE' || bad "$d: port 1 is not active: $(ibv_devinfo -d "$d")"
    done
}

# RX packets of a network interface.
rx_packets() { cat "/sys/class/net/$1/statistics/rx_packets"; }

step_pingpong() {
    need_guest
    local n=200 before after
    before=$(rx_packets "$RDMA_NETDEV0")
    ibv_rc_pingpong -d "$RDMA_DEV0" -g "$RDMA_GID0" -n $n > "$tmp/server" 2>&1 &
    local server=$!
    # The client retries until the server listens (its start takes a while under TCG).
    for _ in $(seq 40); do
        ibv_rc_pingpong -d "$RDMA_DEV1" -g "$RDMA_GID1" -n $n "$RDMA_ADDR0" \
            > "$tmp/client" 2>&1 && break
        grep -q "Couldn't connect" "$tmp/client" || break
        sleep 0.25
    done
    wait $server || bad "server (on $RDMA_DEV0) failed: $(cat "$tmp/server")"
    cat "$tmp/server" "$tmp/client"
    grep -q "^$n iters in" "$tmp/client" || bad "client (on $RDMA_DEV1) did not finish"
    grep -q "remote address: .*GID ::ffff:$RDMA_ADDR1" "$tmp/server" ||
        bad "the server's peer is not rxe1's address"
    after=$(rx_packets "$RDMA_NETDEV0")
    [ $((after - before)) -ge $n ] ||
        bad "only $((after - before)) packets came in on $RDMA_NETDEV0: the traffic did not cross the veth pair"
    echo "ok: $n round trips, $((after - before)) packets in on $RDMA_NETDEV0"
}

step_libs() {
    local f missing=""
    # The programs the steps run (ldd is slow under emulation: not every test).
    for f in "$hooprun" "$bench" "$build"/tools/hoop-train "$build"/tests/check_ib; do
        [ -f "$f" ] || continue
        head -c 4 "$f" | grep -q ELF || continue
        if ldd "$f" | grep -q 'not found'; then
            missing="$missing $f: $(ldd "$f" | grep 'not found' | tr -s ' \t\n' ' ')"
        fi
    done
    [ -z "$missing" ] || bad "libraries missing in the guest:$missing"
    for f in "$hooprun" "$bench" "$build"/tools/hoop-train; do
        "$f" --version || bad "$f does not start in the guest (built with -march=native?)"
    done
}

# ---------------------------------------------------------------- hoop over verbs

ib_env() {
    export HOOP_TRANSPORT=$tp HOOP_TIMEOUT=${HOOP_TIMEOUT:-60}
    export HOOP_DEBUG=INFO HOOP_DEBUG_SUBSYS=INIT
}

# Every "links to rank R T, ..." INFO line of LOG names transport T alone.
links_are() { # LOG T
    local lines
    lines=$(grep -o 'links to[^;]*' "$1") || bad "no 'links to' INFO line in the output"
    if echo "$lines" | sed 's/^links to//' | tr ',' '\n' | grep -v " $2\$" | grep -q .; then
        bad "links that are not $2: $(echo "$lines" | tr '\n' ' ')"
    fi
}

# One hoop-bench run under hooprun over ib with its correctness check (-c 1, exit 1
# on a wrong value): N COLLECTIVE ARGS...
hb() {
    local n=$1 what="hoop-bench $*"
    shift
    echo "== $what"
    if ! "$hooprun" --nproc-per-node "$n" --bind none "$wrap" "$bench" "$@" -c 1 > "$tmp/hb" 2>&1; then
        tail -n 30 "$tmp/hb"
        bad "$what failed"
    fi
    grep -v 'hoop INFO' "$tmp/hb" | grep -E '^ +[0-9]+ ' || true
    links_are "$tmp/hb" "$tp"
    grep -q '# Out of bounds values : 0 OK' "$tmp/hb" || bad "$what: wrong values"
}

coll_world() {
    local n=$1 algo c
    need_guest
    ib_env
    for algo in ring rd rhd; do
        hb "$n" allreduce --algo $algo -b 8 -e 2M -f 8 -n 2 -w 1
    done
    for c in broadcast reduce allgather reducescatter; do
        hb "$n" $c -b 8 -e 1M -f 32 -n 2 -w 1
    done
}

step_check_ib() {
    need_guest
    need_ib
    [ -x "$build/tests/check_ib" ] || skip "tests/check_ib is not built (make check-rdma builds it)"
    "$build/tests/check_ib"
}

step_coll2() {
    coll_world 2
    # Messages above the port's 8 MiB limit: 16 MiB chunks of a 32 MiB all-reduce
    # (ring), and rd's whole-buffer exchange.
    HOOP_CHUNK_BYTES=16M hb 2 allreduce --algo ring -b 32M -e 32M -n 1 -w 0
    HOOP_CHUNK_BYTES=16M hb 2 allreduce --algo rd -b 32M -e 32M -n 1 -w 0
}
step_coll3() { coll_world 3; }
step_coll4() { coll_world 4; }

# The first N images and labels of an installed Fashion-MNIST split, uncompressed.
step_ddp() {
    need_guest
    local d t
    faults_data "$tmp/data" 2048 500 ||
        skip "Fashion-MNIST not installed on the host (/usr/share/datasets/fashion-mnist)"
    # Two ranks sum in one addition, so the result is the same whatever the transport.
    for t in "$tp" tcp; do
        echo "== hoop-train over $t"
        HOOP_TRANSPORT=$t HOOP_ALGO=ring HOOP_TIMEOUT=60 HOOP_DEBUG=INFO HOOP_DEBUG_SUBSYS=INIT \
            "$hooprun" --nproc-per-node 2 --bind none "$wrap" "$build/tools/hoop-train" \
            --data "$tmp/data" --train-limit 1024 --epochs 1 --batch-size 64 --threads 1 \
            --progress plain --log-every 0 --checkpoint "$tmp/$t.ckpt" > "$tmp/train.$t" 2>&1 || {
            tail -n 20 "$tmp/train.$t"
            bad "hoop-train over $t failed"
        }
        grep -v 'hoop INFO' "$tmp/train.$t"
        links_are "$tmp/train.$t" $t
    done
    cmp "$tmp/$tp.ckpt" "$tmp/tcp.ckpt" || bad "the checkpoint trained over $tp differs from the one over tcp"
    echo "ok: 2 x 8 DDP steps over $tp, checkpoint identical to tcp's"
}

# Starts rank R of N by hand (env://, no hooprun, so nobody stops the others when one
# dies): out in $tmp/rank.R, pid in pid[R].
declare -a pid
start_rank() { # R N PORT PROGRAM ARGS...
    local r=$1 n=$2 port=$3
    shift 3
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port HOOP_TOKEN=check-rdma "$wrap" "$@" > "$tmp/rank.$r" 2>&1 &
    pid[r]=$!
}

step_kill() {
    need_guest
    ib_env
    local n=4 r t0 t1 ms limit=$RDMA_SUITE_KILL_MS slow=""
    for r in 0 1 2 3; do
        start_rank $r $n 29471 "$bench" allreduce -b 1M -e 1M -n 5 -N 0 -c 0
    done
    # Once rank 0 has printed a result row, collectives are flowing: kill rank 2.
    for _ in $(seq 600); do
        grep -qE '^ +1048576 ' "$tmp/rank.0" && break
        kill -0 "${pid[0]}" 2> /dev/null || break
        sleep 0.1
    done
    grep -qE '^ +1048576 ' "$tmp/rank.0" || bad "no all-reduce finished before the kill: $(tail -n 5 "$tmp/rank.0")"
    kill -KILL "${pid[2]}"
    t0=$(date +%s%N)
    # The others must notice within 2 s; the limit adds 1 s for the exit itself and the
    # polling, slow under emulation. Each time is measured from the kill.
    for r in 0 1 3; do
        for _ in $(seq 200); do
            kill -0 "${pid[r]}" 2> /dev/null || break
            sleep 0.05
        done
        t1=$(date +%s%N)
        ms=$(((t1 - t0) / 1000000))
        if kill -0 "${pid[r]}" 2> /dev/null; then
            kill -KILL "${pid[r]}"
            echo "rank $r: still running ${ms} ms after the kill"
        else
            echo "rank $r: exited within ${ms} ms of the kill"
        fi
        [ $ms -le "$limit" ] || slow="$slow $r"
    done
    wait 2> /dev/null
    for r in 0 1 3; do
        grep -v 'hoop INFO' "$tmp/rank.$r" | tail -n 2
        grep -q 'HOOP_ERR_REMOTE' "$tmp/rank.$r" && grep -q 'rank 2' "$tmp/rank.$r" ||
            bad "rank $r did not fail with HOOP_ERR_REMOTE naming rank 2: $(tail -n 3 "$tmp/rank.$r")"
    done
    [ -z "$slow" ] || bad "ranks$slow took longer than $limit ms to fail after rank 2 was killed"
}

# The fault matrix's cells (tests/faults/cells.sh, as tests/faults/matrix.sh runs them
# over shm and tcp) over the transport under test: rank 2 killed during the rendezvous
# (and rank 0, whose store it is) and the connection set-up, in a
# reduce-scatter and an all-gather phase, in DDP's backward and (rank 0) while writing a
# checkpoint; stopped inside a collective; and the link between the two devices cut
# in the middle of a large all-reduce. HOOP_TIMEOUT is 10 s here
# (RDMA_SUITE_FAULTS_TIMEOUT): a rank's start-up under emulation takes seconds.
# RDMA_SUITE_FAULTS picks cells by name.
step_faults() {
    need_guest
    FW=$build/tests/faults/fault_worker HOOPRUN=$hooprun TRAIN=$build/tools/hoop-train
    [ -x "$FW" ] || skip "tests/faults/fault_worker is not built (make check-rdma builds it)"
    T_S=${RDMA_SUITE_FAULTS_TIMEOUT:-10} WORK=$tmp TP=$tp LABEL=$tp DATA=$tmp/data
    local next=29600
    faults_data "$DATA" 2048 256 || DATA=""
    TRAIN_WRAP=$wrap
    # hooprun sends SIGTERM 1 s after the first failure; under emulation a survivor may
    # take longer to notice (its own error still counts: exit 1 naming the victim).
    FAULTS_SETTLE_STRICT=0
    faults_prefix() { echo "$wrap"; } # HCA by LOCAL_RANK: even ranks rxe0, odd rxe1
    faults_hooprun_prefix() { :; }    # hooprun runs each worker through TRAIN_WRAP
    faults_master() { echo 127.0.0.1; }
    faults_port() {
        next=$((next + 1))
        echo $next
    }
    # The guest runs nothing else: every TCP socket (the store, ib's set-up and liveness
    # sockets) and every Unix socket is the cells'.
    faults_sockets_left() { { ss -Htan; ss -Hxa; } | grep -v -e TIME-WAIT -e '^$' || true; }
    # The cut: the veth pair stops carrying frames between rxe0 (even ranks) and rxe1
    # (odd ranks), both ways, while a large call is in flight: each side's neighbour
    # entry for the other's address gets a MAC nobody has, so the frames leave and the
    # other end drops them (not for its address), as on a pulled cable. Not `ip link set
    # down`: taking veth1 down under queue pairs in flight locks the guest's CPUs up
    # inside rdma_rxe (Debian's 6.1 kernel: "soft lockup ... [fault_worker]" until the
    # guest is killed). The control and store sockets are on loopback, so the ranks
    # learn of the cut from their calls' timeouts, and each must name a rank across it.
    # Emulated rxe is slow enough that a 64 MiB all-reduce is long without a rate limit.
    faults_side() { echo $(($1 % 2)); }
    faults_link_slow() { :; }
    faults_link_cut() { rdma_neigh 02:00:00:00:00:01 02:00:00:00:00:02; }
    faults_link_mend() {
        rdma_neigh "$(cat "/sys/class/net/$RDMA_NETDEV1/address")" \
            "$(cat "/sys/class/net/$RDMA_NETDEV0/address")"
    }
    rdma_neigh() { # MAC-FOR-ADDR1-ON-NETDEV0 MAC-FOR-ADDR0-ON-NETDEV1
        ip neigh replace "$RDMA_ADDR1" lladdr "$1" dev "$RDMA_NETDEV0" nud permanent &&
            ip neigh replace "$RDMA_ADDR0" lladdr "$2" dev "$RDMA_NETDEV1" nud permanent
    }
    # Under emulation a cell takes 5-16 s (a timeout cell HOOP_TIMEOUT and more; starting
    # 4 ranks and their verbs devices takes seconds). RDMA_SUITE_FAULTS picks cells.
    local FAULTS_CELLS=${RDMA_SUITE_FAULTS:-.}
    echo "fault matrix over $tp: 4 ranks, HOOP_TIMEOUT=$T_S s; time to error from the fault, each survivor"
    faults_want kill@rendezvous && faults_coll kill@rendezvous 2 2:rendezvous:0:KILL 4096 2
    faults_want kill@rendezvous-r0 &&
        faults_coll kill@rendezvous-r0 0 0:rendezvous:0:KILL 4096 2
    faults_want kill@connect && faults_coll kill@connect 2 2:connect:0:KILL 4096 2
    faults_want fail@verdict && faults_coll fail@verdict 2 2:verdict:0:FAIL 4096 2
    faults_want kill@reduce-scatter &&
        faults_coll kill@reduce-scatter 2 2:reduce_scatter:1:KILL 262144 3
    faults_want kill@all-gather && faults_coll kill@all-gather 2 2:all_gather:1:KILL 262144 3
    faults_want stop@collective &&
        faults_coll stop@collective 2 2:reduce_scatter:1:STOP 262144 3 stop
    faults_want kill@ddp-backward && faults_train kill@ddp-backward 2 2:backward:3:KILL
    faults_want kill@checkpoint && faults_train kill@checkpoint 0 0:checkpoint:1:KILL
    faults_want cut@link && faults_coll cut@link 2 "" 16777216 2 cut
    echo "fault matrix over $tp: $FAULTS_PASS passed, $FAULTS_FAIL failed${FAULTS_FAILED:+; failed:$FAULTS_FAILED}"
    [ "$FAULTS_FAIL" = 0 ]
}

# A forced-ib run that must fail with a message naming WORD: ENV... -- expect_error WORD
expect_error() { # WORD (the environment is set by the caller)
    local rc=0
    timeout 40 "$hooprun" --nproc-per-node 2 --bind none "$bench" allreduce -b 8 -e 8 -n 1 \
        > "$tmp/err" 2>&1 || rc=$?
    cat "$tmp/err"
    [ $rc != 0 ] || bad "the run succeeded"
    [ $rc != 124 ] || bad "the run hung (killed after 40 s)"
    grep -v 'hoop INFO' "$tmp/err" | grep -q -- "$1" || bad "no message naming $1"
}

need_ib() {
    [ "$tp" = ib ] || skip "a verbs step (HOOP_RDMA_TRANSPORT=$tp)"
}

step_bad_gid() {
    need_guest
    need_ib
    ib_env
    HOOP_IB_HCA=$RDMA_DEV0 HOOP_IB_GID_INDEX=200 expect_error HOOP_IB_GID_INDEX
}

step_bad_hca() {
    need_guest
    need_ib
    ib_env
    HOOP_IB_HCA=nosuchhca0 expect_error nosuchhca0
}

# Two "hosts": network namespaces hA (10.78.0.1, fd78::1) and hB (10.78.0.2, fd78::2)
# joined by a veth pair; hoop tells hosts apart by boot id and network namespace. The
# rxe devices, shared by every namespace, carry the verbs traffic. Each case runs with
# MASTER_ADDR IPv4, then IPv6 (the store, tcp's links and ib's set-up sockets on fd78::).
step_auto() {
    need_guest
    ip netns add hA && ip netns add hB || skip "no network namespaces (ip netns add failed)"
    on_exit='ip netns del hA; ip netns del hB'
    ip link add vA type veth peer name vB && ip link set vA netns hA && ip link set vB netns hB &&
        ip -n hA addr add 10.78.0.1/24 dev vA && ip -n hB addr add 10.78.0.2/24 dev vB &&
        ip -n hA addr add fd78::1/64 dev vA nodad && ip -n hB addr add fd78::2/64 dev vB nodad &&
        ip -n hA link set vA up && ip -n hB link set vB up &&
        ip -n hA link set lo up && ip -n hB link set lo up || bad "cannot set up the namespaces"
    local hca0 hca1 want port=29472 r master
    export HOOP_TRANSPORT=auto HOOP_TIMEOUT=60 HOOP_DEBUG=INFO HOOP_DEBUG_SUBSYS=INIT
    local cases="$RDMA_DEV0 nosuchhca0"
    [ "$tp" = ib ] || cases=nosuchhca0
    for hca0 in $cases; do
        if [ "$hca0" = nosuchhca0 ]; then hca1=nosuchhca1 want=tcp; else hca1=$RDMA_DEV1 want=ib; fi
        for master in 10.78.0.1 fd78::1; do
            echo "== auto, MASTER_ADDR $master, HOOP_IB_HCA $hca0 / $hca1: expect $want"
            for r in 0 1; do
                local ns=hA hca=$hca0
                [ $r = 1 ] && ns=hB hca=$hca1
                ip netns exec $ns env RANK=$r LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 \
                    MASTER_ADDR=$master MASTER_PORT=$port HOOP_TOKEN=check-rdma HOOP_IB_HCA=$hca \
                    "$bench" allreduce -b 8 -e 64K -f 64 -n 2 -c 1 > "$tmp/rank.$r" 2>&1 &
                pid[r]=$!
            done
            for r in 0 1; do
                wait "${pid[r]}" ||
                    { tail -n 20 "$tmp/rank.$r"; bad "rank $r failed (auto, $want expected)"; }
            done
            grep -v 'hoop INFO' "$tmp/rank.0" | grep -E '^ +[0-9]+ ' || true
            links_are "$tmp/rank.0" $want
            links_are "$tmp/rank.1" $want
            # A filter matching none of the host's ports is a typo, most likely: a WARN
            # naming what the host has, not a quiet INFO.
            [ "$hca0" != nosuchhca0 ] ||
                grep -q "hoop WARN .*HOOP_IB_HCA=nosuchhca0 matches none of this host's RDMA ports (it has .*$RDMA_DEV0:1" "$tmp/rank.0" ||
                { grep HOOP_IB_HCA "$tmp/rank.0"; bad "no WARN naming HOOP_IB_HCA=nosuchhca0 and the host's ports"; }
            port=$((port + 1))
        done
    done
}

# ---------------------------------------------------------------- the runner

if [ "${1-}" = --run-step ]; then
    tmp=$(mktemp -d)
    on_exit=:
    # Whatever a step started in the background goes with it.
    trap 'eval "$on_exit"; kill $(jobs -p) 2> /dev/null; rm -rf "$tmp"' EXIT
    "step_$2"
    exit $?
fi

want=()
list=0
for a in "$@"; do
    case $a in
    --list) list=1 ;;
    --skip-hoop) want+=(smoke) ;;
    -h | --help)
        awk 'NR > 2 && !/^#/ { exit } NR > 2 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
        exit 0
        ;;
    -*) echo "suite.sh: unknown option '$a'" >&2; exit 2 ;;
    *) want+=("$a") ;;
    esac
done
[ ${#want[@]} -gt 0 ] || read -r -a want <<< "${steps_env//,/ }"
known=" $(echo "$STEPS" | awk 'NF { printf "%s %s ", $1, $2 }')"
for w in ${want[@]+"${want[@]}"}; do
    case $known in *" $w "*) ;; *)
        echo "suite.sh: no step or group '$w' (--list shows them)" >&2
        exit 2
        ;;
    esac
done
if [ $list = 1 ]; then
    echo "$STEPS" | awk 'NF { printf "%-10s %-6s %4s s  ", $1, $2, $3; $1 = $2 = $3 = ""; print substr($0, 4) }'
    exit 0
fi

logdir=${RDMA_SUITE_LOGDIR:-$build/tests/rdma-logs}
mkdir -p "$logdir"
npass=0 nfail=0 nskip=0 failed=""
t_all=$(date +%s)
while read -r name group limit what; do
    [ -n "$name" ] || continue
    if [ ${#want[@]} -gt 0 ]; then
        case " ${want[*]} " in *" $name "* | *" $group "*) ;; *) continue ;; esac
    fi
    t0=$(date +%s)
    rc=0
    timeout -k 5 "$limit" bash "${BASH_SOURCE[0]}" --run-step "$name" > "$logdir/$name.log" 2>&1 || rc=$?
    secs=$(($(date +%s) - t0))
    case $rc in
    0)
        printf 'PASS: %-9s %4d s  %s\n' "$name" "$secs" "$what"
        npass=$((npass + 1))
        ;;
    77)
        printf 'SKIP: %-9s %4d s  %s\n' "$name" "$secs" "$(grep -v '^ *$' "$logdir/$name.log" | tail -n 1 | sed 's/^SKIP: //')"
        nskip=$((nskip + 1))
        ;;
    *)
        [ $rc = 124 ] && echo "TIMEOUT: step $name did not finish within $limit s" >> "$logdir/$name.log"
        printf 'FAIL: %-9s %4d s  %s\n' "$name" "$secs" "$what"
        tail -n 15 "$logdir/$name.log" | sed 's/^/    | /'
        nfail=$((nfail + 1))
        failed="$failed $name"
        ;;
    esac
done <<< "$STEPS"
echo "check-rdma: $npass passed, $nfail failed, $nskip skipped in $(($(date +%s) - t_all)) s" \
    "(logs: $logdir)${failed:+; failed:$failed}"
[ $nfail = 0 ]
