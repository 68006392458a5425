#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/fd_limit.sh -- a communicator that cannot fit RLIMIT_NOFILE fails at once, on
# every rank, naming the limit; one that fits the hard limit raises the soft one.
#
# Four hoop-bench ranks over tcp with HOOP_TCP_NSOCKS=16: each rank links to the three
# others (ring and recursive doubling) plus the control ring, 8 link ends of 16 sockets,
# about 129 descriptors. HOOP_TIMEOUT is 20 s; every failing case must end within 5 s.
#   1. rank 2 alone under ulimit -n 64 (soft and hard): rank 2 says "too many open files
#      ahead" with the limit and the ulimit -n that would do; the other three fail too,
#      naming rank 2's reason (they used to wait for its links until the timeout, and
#      it spun, accept failing with EMFILE on a connection that stayed queued);
#   2. every rank under ulimit -n 64: each says so itself;
#   3. every rank with a soft limit of 64 under a hard limit of 4096: the soft limit is
#      raised (an INFO line says so) and the all-reduce is exact (#wrong 0);
#   4. rank 0 alone under ulimit -n 12 (its store's connections): it fails at once;
#   5. 8 ranks, rank 5 alone under ulimit -n 64: rank 0 has no link to rank 5 (ring
#      neighbours 1 and 7, doubling partners 1, 2, 4), so its own links may all come up;
#      it must still fail, naming rank 5 and its reason (the start-up's verdict: it used
#      to return a communicator whose first call then blamed another rank).
. "${top_srcdir:-.}/tests/launcher_lib.sh"
BENCH=${top_builddir:-.}/bench/hoop-bench
[ -x "$BENCH" ] || fail "hoop-bench is not built"
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge 4096 ] ||
    { echo "SKIP: the hard RLIMIT_NOFILE ($(ulimit -Hn)) is below 4096"; exit 77; }

# run_case NAME LIMITED SOFT HARD [N]: starts N ranks (default 4), those in LIMITED
# ("0 1 2 3", or "2") under ulimit -Sn SOFT -Hn HARD; outputs in $TMP/NAME.R, exit codes
# in $TMP/NAME.rc.R, the milliseconds the slowest took in $TMP/NAME.ms.
run_case() {
    local name=$1 limited=$2 soft=$3 hard=$4 n=${5:-4} t0 t1 pids r
    for _ in 1 2 3; do # a random port may be taken: try another
        local port=$((20000 + RANDOM % 12000))
        t0=$(now_ms)
        pids=""
        for r in $(seq 0 $((n - 1))); do
            (
                case " $limited " in *" $r "*) ulimit -Sn "$soft" && ulimit -Hn "$hard" || exit 9 ;; esac
                HOOP_TRANSPORT=tcp HOOP_TCP_NSOCKS=16 HOOP_TIMEOUT=20 HOOP_DEBUG=INFO \
                    HOOP_DEBUG_SUBSYS=INIT MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r \
                    WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n \
                    exec "$BENCH" allreduce -b 8K -e 8K -n 2 -w 1
            ) > "$TMP/$name.$r" 2>&1 &
            pids="$pids $!"
        done
        r=0
        for p in $pids; do
            wait "$p"
            echo $? > "$TMP/$name.rc.$r"
            r=$((r + 1))
        done
        t1=$(now_ms)
        echo $((t1 - t0)) > "$TMP/$name.ms"
        grep -q "Address already in use" "$TMP/$name".[0-9] || break
    done
}

# 1. One rank short of descriptors.
run_case one 2 64 64
ms=$(cat "$TMP/one.ms")
echo "one rank limited: every rank ended within $ms ms"
for r in 0 1 2 3; do
    [ "$(cat "$TMP/one.rc.$r")" = 1 ] || { cat "$TMP/one.$r"; fail "rank $r exited $(cat "$TMP/one.rc.$r"), not 1"; }
    assert_contains "$TMP/one.$r" "too many open files ahead: rank 2's links to 3 peers and the control ring"
    assert_contains "$TMP/one.$r" "RLIMIT_NOFILE allows 64 (hard limit 64); raise it with ulimit -n"
done
assert_contains "$TMP/one.0" "rank 2 had failed first"
[ "$ms" -lt 10000 ] || fail "the ranks took $ms ms to fail (HOOP_TIMEOUT is 20 s)"

# 2. Every rank short of descriptors.
run_case all "0 1 2 3" 64 64
ms=$(cat "$TMP/all.ms")
echo "every rank limited: every rank ended within $ms ms"
for r in 0 1 2 3; do
    [ "$(cat "$TMP/all.rc.$r")" = 1 ] || { cat "$TMP/all.$r"; fail "rank $r exited $(cat "$TMP/all.rc.$r"), not 1"; }
    assert_contains "$TMP/all.$r" "descriptors (plus 16 spare)"
    assert_contains "$TMP/all.$r" "16 descriptors each, one per HOOP_TCP_NSOCKS stream"
done
[ "$ms" -lt 10000 ] || fail "the ranks took $ms ms to fail (HOOP_TIMEOUT is 20 s)"

# 3. The hard limit suffices: the soft one is raised.
run_case raise "0 1 2 3" 64 4096
for r in 0 1 2 3; do
    [ "$(cat "$TMP/raise.rc.$r")" = 0 ] || { cat "$TMP/raise.$r"; fail "rank $r exited $(cat "$TMP/raise.rc.$r")"; }
    assert_contains "$TMP/raise.$r" "raised the RLIMIT_NOFILE soft limit from 64 to "
done
line=$(grep -E '^ +8192 ' "$TMP/raise.0")
[ -n "$line" ] || { cat "$TMP/raise.0"; fail "no 8 KiB row"; }
# shellcheck disable=SC2086 # the row, split into its columns
set -- $line
[ "${9}" = 0 ] && [ "${13}" = 0 ] || fail "wrong values: $line"
# 4. Rank 0 alone under ulimit -n 12: its store could not take the 4 ranks'
# connections (it used to refuse them one accept at a time until HOOP_TIMEOUT, blaming
# ranks 1 and 3); it fails at once naming the limit.
t0=$(now_ms)
(ulimit -Sn 12 && ulimit -Hn 12 && HOOP_TRANSPORT=tcp HOOP_TIMEOUT=20 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$((20000 + RANDOM % 12000)) RANK=0 WORLD_SIZE=4 LOCAL_RANK=0 \
    LOCAL_WORLD_SIZE=4 exec "$BENCH" allreduce -b 8K -e 8K -n 2 -w 1) > "$TMP/r0" 2>&1
rc=$?
ms=$(($(now_ms) - t0))
echo "rank 0 limited to 12 descriptors: exit $rc after $ms ms"
[ $rc = 1 ] || { cat "$TMP/r0"; fail "rank 0 under ulimit -n 12 exited $rc, not 1"; }
assert_contains "$TMP/r0" "too many open files ahead: rank 0's store (one connection per rank of WORLD_SIZE 4, and its own)"
assert_contains "$TMP/r0" "RLIMIT_NOFILE allows 12 (hard limit 12); raise it with ulimit -n"
[ "$ms" -lt 10000 ] || fail "rank 0 took $ms ms to fail"

# 5. A rank whose own links are all up still fails with the start-up.
run_case far 5 64 64 8
ms=$(cat "$TMP/far.ms")
echo "rank 5 of 8 limited: every rank ended within $ms ms"
for r in 0 1 2 3 4 5 6 7; do
    [ "$(cat "$TMP/far.rc.$r")" = 1 ] || { cat "$TMP/far.$r"; fail "rank $r exited $(cat "$TMP/far.rc.$r"), not 1"; }
    assert_contains "$TMP/far.$r" "too many open files ahead: rank 5's links"
done
[ "$ms" -lt 10000 ] || fail "the ranks took $ms ms to fail (HOOP_TIMEOUT is 20 s)"
echo "PASS: out of descriptors fails at once on every rank; a soft limit below the need is raised"
