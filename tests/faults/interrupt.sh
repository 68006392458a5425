#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/faults/interrupt.sh -- tests/faults/matrix.sh stopped by SIGTERM in the middle of
# a cell (a CI time limit, ^C) leaves none of the cell's processes behind. Without
# network namespaces (FAULTS_NETNS=0, or not root) the cell's ranks run in this
# namespace, and the victim of stop@collective, SIGSTOPped by its hook, stayed stopped
# forever. Runs the shm stop@collective cell until its victim is stopped (a few
# seconds), then sends the matrix SIGTERM and checks that every rank it started is gone.
set -u
matrix=${top_srcdir:-.}/tests/faults/matrix.sh
. "${top_srcdir:-.}/tests/faults/cells.sh" # faults_state
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
FAULTS_NETNS=0 FAULTS_CELLS='^stop@collective$' TMPDIR=$scratch bash "$matrix" \
    > "$scratch/out" 2>&1 &
m=$!
# The victim is rank 2: wait (up to 60 s) until its pid is known and it is stopped.
pids="" stopped=0
for _ in $(seq 1200); do
    d=$(ls -d "$scratch"/hoop-faults.*/shm.stop@collective 2> /dev/null | head -n 1)
    if [ -n "$d" ] && [ -s "$d/pid.3" ] && [ -s "$d/pid.2" ] &&
        [ "$(faults_state "$(cat "$d/pid.2")")" = T ]; then
        pids=$(cat "$d"/pid.*)
        stopped=1
        break
    fi
    kill -0 $m 2> /dev/null || break
    sleep 0.05
done
kill -TERM $m 2> /dev/null
wait $m
rc=$?
if [ $stopped = 0 ]; then
    echo "FAIL: the victim of shm stop@collective was never seen stopped; matrix.sh said:"
    cat "$scratch/out"
    exit 1
fi
echo "matrix.sh got SIGTERM with rank 2 stopped; it exited $rc"
fail=0
for p in $pids; do
    s=$(faults_state "$p")
    if [ -n "$s" ] && [ "$s" != Z ]; then
        echo "FAIL: rank pid $p is left (state $s): $(tr '\0' ' ' < "/proc/$p/cmdline")"
        kill -CONT "$p" 2> /dev/null
        kill -KILL "$p" 2> /dev/null
        fail=1
    fi
done
[ $fail = 1 ] || echo "ok: none of its 4 ranks ($(echo $pids)) is left"
[ "$rc" = 130 ] || { echo "FAIL: matrix.sh exited $rc, not 130" && fail=1; }
exit $fail
