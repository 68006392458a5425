#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_smoke.sh -- the README's first job: 4 workers meet through the store under
# hooprun (on the port hooprun reserved), pass a barrier, add and all-gather. Also: bad
# env exits 2, ranks started by hand that disagree on WORLD_SIZE both exit 2 (bad
# environment; they exited 1) at once naming it (hoop-smoke, hoop-train, hoop-bench), and on HOOP_TOKEN the refused one exits
# 2 at once and rank 0 exits 1 at its timeout, two nodes given the same --node-rank all exit 1 at once naming the
# rank twice claimed, a missing rank 0 exits 1 at about HOOP_TIMEOUT.
. "${top_srcdir:-.}/tests/launcher_lib.sh"
SMOKE=${top_builddir:-.}/tools/hoop-smoke
[ -x "$SMOKE" ] || fail "$SMOKE is not built"

t0=$(now_ms)
"$HOOPRUN" --nproc-per-node 4 "$SMOKE" > "$TMP/out" 2> "$TMP/err"
rc=$?
ms=$(($(now_ms) - t0))
echo "smoke: rc=$rc, ${ms} ms"
[ "$rc" = 0 ] || { cat "$TMP/out" "$TMP/err"; fail "4-worker smoke exited $rc"; }
[ "$(cat "$TMP/out")" = "smoke: 4 ranks joined, barrier ok, add ok, allgather ok" ] ||
    { cat "$TMP/out"; fail "unexpected smoke output"; }

# Eight workers, twice in a row (a fresh port each time).
for _ in 1 2; do
    "$HOOPRUN" --prefix --nproc-per-node 8 "$SMOKE" > "$TMP/out8" 2>&1 || { cat "$TMP/out8"; fail "8 workers"; }
    assert_contains "$TMP/out8" "[rank 0] smoke: 8 ranks joined, barrier ok, add ok, allgather ok"
done

# Bad or missing env: exit 2 with a message naming the variable.
MASTER_ADDR=127.0.0.1 MASTER_PORT=abc RANK=0 WORLD_SIZE=1 "$SMOKE" 2> "$TMP/e1"
[ $? = 2 ] || fail "MASTER_PORT=abc did not give exit 2"
assert_contains "$TMP/e1" "MASTER_PORT"
"$SMOKE" 2> "$TMP/e2"
[ $? = 2 ] || fail "a missing env did not give exit 2"
assert_contains "$TMP/e2" "MASTER_ADDR"

# Two ranks started by hand (no hooprun) that disagree on WORLD_SIZE: both fail at once,
# not at HOOP_TIMEOUT=30 s, each naming the disagreement and who said what, with exit 2
# (a bad environment, as --help says; it was 1). On HOOP_TOKEN (HOOP_TIMEOUT=3 s): rank 1
# is refused at once (exit 2); rank 0 fails at its timeout (exit 1: a wrong token must not
# let any process that reaches the port end the job), naming the refused client as the
# likely reason; neither shows a token.
hand_pair() { # TIMEOUT WS0 TOKEN0 WS1 TOKEN1: rc0, rc1, ms, ms1; stderr in $TMP/h0, $TMP/h1
    local port t0 pid0
    for _ in 1 2 3; do # a random port may be taken (another test's): try another
        port=$((20000 + RANDOM % 12000))
        t0=$(now_ms)
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=0 WORLD_SIZE=$2 HOOP_TOKEN=$3 \
            HOOP_TIMEOUT=$1 "${PROG[@]}" 2> "$TMP/h0" > /dev/null &
        pid0=$!
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=1 WORLD_SIZE=$4 HOOP_TOKEN=$5 \
            HOOP_TIMEOUT=$1 "${PROG[@]}" 2> "$TMP/h1" > /dev/null
        rc1=$?
        ms1=$(($(now_ms) - t0))
        wait $pid0
        rc0=$?
        ms=$(($(now_ms) - t0))
        grep -q "is already in use" "$TMP/h0" || break
    done
}
PROG=("$SMOKE")
hand_pair 30 2 s3cret-zero 3 s3cret-zero
echo "WORLD_SIZE 2 vs 3: rc=$rc0,$rc1, ${ms} ms"
[ "$rc0,$rc1" = 2,2 ] || { cat "$TMP/h0" "$TMP/h1"; fail "WORLD_SIZE 2 vs 3 gave $rc0,$rc1"; }
[ "$ms" -lt 10000 ] || fail "WORLD_SIZE 2 vs 3 took $ms ms to fail (HOOP_TIMEOUT=30)"
assert_contains "$TMP/h0" "rank 0's store refused rank 1 (127.0.0.1:"
assert_contains "$TMP/h0" "WORLD_SIZE=3 on rank 1 but WORLD_SIZE=2 on rank 0"
assert_contains "$TMP/h1" "refused this client: WORLD_SIZE=3 on rank 1 but WORLD_SIZE=2 on rank 0 (with hooprun: give every node the same --nnodes and --nproc-per-node)"
hand_pair 3 2 s3cret-zero 2 s3cret-one
echo "HOOP_TOKEN differs: rc=$rc0,$rc1, rank 1 ${ms1} ms, rank 0 ${ms} ms"
[ "$rc0,$rc1" = 1,2 ] || { cat "$TMP/h0" "$TMP/h1"; fail "a wrong HOOP_TOKEN gave $rc0,$rc1"; }
[ "$ms1" -lt 2500 ] || fail "the rank with a wrong HOOP_TOKEN took $ms1 ms to fail"
assert_contains "$TMP/h1" "refused this client: wrong or missing HOOP_TOKEN"
assert_contains "$TMP/h0" "rank 1 of 2 never arrived"
assert_contains "$TMP/h0" "meanwhile its store refused a client at 127.0.0.1:"
assert_contains "$TMP/h0" "claiming rank 1: wrong or missing HOOP_TOKEN"
grep -q s3cret "$TMP/h0" "$TMP/h1" && fail "a token was printed: $(cat "$TMP/h0" "$TMP/h1")"
# The same disagreement under hoop-train and hoop-bench: exit 2 on both ranks too (the
# refused rank 1 exited 1 there: it took the refusal for an outage), and at once: rank 0
# does not keep its store for rank 1, which came and was told.
for prog in train bench; do
    case $prog in
    train) PROG=("${top_builddir:-.}/tools/hoop-train" --epochs 1) ;;
    bench) PROG=("${top_builddir:-.}/bench/hoop-bench" allreduce -b 8 -e 8) ;;
    esac
    hand_pair 30 2 s3cret-zero 3 s3cret-zero
    echo "hoop-$prog, WORLD_SIZE 2 vs 3: rc=$rc0,$rc1, ${ms} ms"
    [ "$rc0,$rc1" = 2,2 ] || { cat "$TMP/h0" "$TMP/h1"; fail "hoop-$prog: WORLD_SIZE 2 vs 3 gave $rc0,$rc1"; }
    [ "$ms" -lt 10000 ] || fail "hoop-$prog: WORLD_SIZE 2 vs 3 took $ms ms (HOOP_TIMEOUT is 30 s)"
    assert_contains "$TMP/h1" "refused this client: WORLD_SIZE=3 on rank 1 but WORLD_SIZE=2 on rank 0"
done

# Two nodes started with the same --node-rank (1 of 3): node 1 is claimed twice. The store
# refuses the second claimant and the job ends at once (HOOP_TIMEOUT=30 s), every node
# naming the node, both claimants' addresses and the flag, and exiting 2 (bad flags: it
# said "rank 1" and exited 1).
port=$((20000 + RANDOM % 12000))
node() { # NODE_RANK NAME [NNODES]: hooprun for that node, stderr in $TMP/n$2
    HOOP_TOKEN=dup HOOP_TIMEOUT=30 "$HOOPRUN" --nnodes "${3:-3}" --node-rank "$1" \
        --nproc-per-node 1 --master-addr 127.0.0.1 --master-port $port "$SMOKE" \
        > /dev/null 2> "$TMP/n$2"
}
t0=$(now_ms)
node 0 a & pa=$!
node 1 b & pb=$!
node 1 c
rcc=$?
wait $pa; rca=$?
wait $pb; rcb=$?
ms=$(($(now_ms) - t0))
echo "--node-rank 1 twice: rc=$rca,$rcb,$rcc, ${ms} ms"
[ "$rca,$rcb,$rcc" = 2,2,2 ] || { cat "$TMP"/n?; fail "--node-rank 1 twice gave $rca,$rcb,$rcc"; }
[ "$ms" -lt 10000 ] || fail "--node-rank 1 twice took $ms ms to fail (HOOP_TIMEOUT=30)"
for n in a b c; do
    assert_contains "$TMP/n$n" "node 1 claimed twice: by 127.0.0.1:"
    assert_contains "$TMP/n$n" "; give each node's hooprun its own --node-rank, 0..2"
done
grep -q "refused this client: node 1 claimed twice" "$TMP/nb" "$TMP/nc" ||
    fail "neither node 1 was told it was refused: $(cat "$TMP/nb" "$TMP/nc")"
# Nodes told different --nnodes: both exit 2 at once, naming the flag and both values.
port=$((20000 + RANDOM % 12000))
node 0 d 2 &
pd=$!
node 1 e 3
rce=$?
wait $pd
rcd=$?
echo "--nnodes 2 vs 3: rc=$rcd,$rce"
[ "$rcd,$rce" = 2,2 ] || { cat "$TMP"/n[de]; fail "--nnodes 2 vs 3 gave $rcd,$rce"; }
for n in d e; do
    assert_contains "$TMP/n$n" "--nnodes 3 on node 1 but --nnodes 2 on node 0: give every node's hooprun the same --nnodes"
done
# A second --node-rank 0 finds MASTER_PORT + 1 taken by the first: exit 2, as for any
# --node-rank claimed twice (it exited 1), and the first node 0 is left alone.
port=$((20000 + RANDOM % 12000))
node 0 f 2 &
pf=$!
for _ in $(seq 100); do # node 0's hooprun serves the nodes' store
    ss -ltn "sport = :$((port + 1))" | grep -q LISTEN && break
    sleep 0.05
done
node 0 g 2
rcg=$?
kill -TERM $pf
wait $pf
echo "--node-rank 0 twice: the second exited $rcg"
[ "$rcg" = 2 ] || { cat "$TMP/ng"; fail "a second --node-rank 0 exited $rcg, not 2"; }
assert_contains "$TMP/ng" "127.0.0.1:$((port + 1)) is already in use (another job on this port, or a second rank 0: two nodes given --node-rank 0"

# -h is --help (exit 0, the usage); --help with a value is refused like any bad argument.
"$SMOKE" -h > "$TMP/h" 2>&1 || fail "hoop-smoke -h exited $?"
assert_contains "$TMP/h" "Usage: hooprun --nproc-per-node N hoop-smoke"
"$SMOKE" --help=foo > "$TMP/h2" 2>&1
[ $? = 2 ] || fail "hoop-smoke --help=foo did not give exit 2"
assert_contains "$TMP/h2" "unexpected argument '--help=foo'"

# Rank 1 of 2 with nobody hosting the store: fails (exit 1) near HOOP_TIMEOUT=2 s.
t0=$(now_ms)
MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 12000)) RANK=1 WORLD_SIZE=2 \
    HOOP_TOKEN=x HOOP_TIMEOUT=2 "$SMOKE" 2> "$TMP/e3"
rc=$?
ms=$(($(now_ms) - t0))
echo "missing rank 0: rc=$rc, ${ms} ms"
[ "$rc" = 1 ] || { cat "$TMP/e3"; fail "a missing rank 0 gave $rc, not 1"; }
[ "$ms" -lt 10000 ] || fail "a missing rank 0 took $ms ms with HOOP_TIMEOUT=2"

# Relayed lines (--prefix) go out whole, however hooprun's stdout and stderr are
# shared: two ranks write 20,000 stdout lines each and a stderr line every 100, into one
# pipe (2>&1 | cat), one file, and to a reader asleep for 2 s. A piece written in three
# writes, or a queue written out at arbitrary bytes, put one line inside another. (Without
# --prefix a worker writes its stdout itself, in its own pieces: README, Launching.)
gen='awk -v r="$RANK" '"'"'BEGIN { for (i = 0; i < 20000; i++) {
    printf "r%s out %d xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", r, i
    if (i % 100 == 0) { fflush(); printf "r%s err %d\n", r, i > "/dev/stderr"; fflush("/dev/stderr") }
} }'"'"
for mode in pipe file slow; do
    case $mode in
    pipe) "$HOOPRUN" --prefix --nproc-per-node 2 bash -c "$gen" 2>&1 | cat > "$TMP/mix" ;;
    file) "$HOOPRUN" --prefix --nproc-per-node 2 bash -c "$gen" > "$TMP/mix" 2>&1 ;;
    slow) "$HOOPRUN" --prefix --nproc-per-node 2 bash -c "$gen" 2>&1 | (sleep 2 && cat) > "$TMP/mix" ;;
    esac
    n=$(wc -l < "$TMP/mix")
    bad=$(grep -vc '^\[rank [01]\] r[01] \(out [0-9]* x*\|err [0-9]*\)$' "$TMP/mix")
    [ "$n" = 40400 ] && [ "$bad" = 0 ] ||
        fail "$mode: $n lines of 40400, $bad not whole: $(grep -v '^\[rank [01]\] r[01] \(out [0-9]* x*\|err [0-9]*\)$' "$TMP/mix" | head -n 3)"
done
# hooprun's own lines keep their place among the relayed ones (one file, one queue): the
# failure report comes after the lines the failed rank wrote before it failed, also for
# a slow reader (stdout and stderr had a queue each, and the report came out first).
"$HOOPRUN" --prefix --nproc-per-node 2 bash -c \
    'if [ "$RANK" = 1 ]; then seq 20000; echo LAST; exit 3; fi; exec sleep 30' 2>&1 |
    (sleep 2 && cat) > "$TMP/mix"
last=$(grep -n '^\[rank 1\] LAST$' "$TMP/mix" | cut -d: -f1)
report=$(grep -n '^hooprun: first failure' "$TMP/mix" | cut -d: -f1)
[ -n "$last" ] && [ -n "$report" ] && [ "$last" -lt "$report" ] ||
    fail "the failure report (line ${report:-none}) came before rank 1's last line (${last:-none})"
# Without --prefix a worker writes its stdout itself; lines it writes whole (one write
# each, here) stay whole beside hooprun's relayed stderr, also when a slow reader makes
# hooprun queue: the queue goes out a line per write. Each rank first writes 3000 long
# stderr lines (more than the pipe holds, so hooprun queues the rest while the reader
# sleeps), then its stdout lines, which block on the full pipe: once the reader wakes, a
# queue written out in one write goes in part, cut at the pipe's free room, and a rank's
# stdout line lands inside a stderr line (it did, 4 to 6 lines in each of 3 runs).
gen1='awk -v r="$RANK" '"'"'BEGIN {
    for (j = 0; j < 3000; j++)
        printf "r%s err %d yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\n", r, j > "/dev/stderr"
    fflush("/dev/stderr")
    for (i = 0; i < 3000; i++) {
        printf "r%s out %d xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", r, i; fflush()
    }
}'"'"
"$HOOPRUN" --nproc-per-node 2 bash -c "$gen1" 2>&1 | (sleep 2 && cat) > "$TMP/mix"
n=$(wc -l < "$TMP/mix")
bad=$(grep -vc '^r[01] \(out [0-9]* x*\|err [0-9]* y*\)$' "$TMP/mix")
[ "$n" = 12000 ] && [ "$bad" = 0 ] ||
    fail "shared stdout, slow reader: $n lines of 12000, $bad not whole: $(grep -v '^r[01] \(out [0-9]* x*\|err [0-9]* y*\)$' "$TMP/mix" | head -n 3)"
echo "PASS"
