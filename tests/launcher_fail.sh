#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_fail.sh -- a failing worker stops the job: hooprun names the rank whose
# failure came first (not merely the first to exit) with its message, prints a summary,
# exits with its code within 5 s and leaves no worker or grandchild behind, also when
# another worker ignores SIGTERM; SIGINT to hooprun ends every worker; workers ending on
# SIGUSR2 are no failure, and hooprun tells those that exited with its code from those it
# killed (case 12); a rank whose message points at another rank's (see rank N's message)
# yields to it (case 6b).
. "${top_srcdir:-.}/tests/launcher_lib.sh"

# The worker: records its pid, its group and two grandchildren (one in its group, one
# that left it with setsid), says it is ready, then does what $1 asks.
cat > "$TMP/worker.sh" <<'W'
#!/bin/bash
d=$1 mode=$2
[ "$mode" = ignore ] && [ "$RANK" = 2 ] && trap '' TERM
sleep 60 &
echo $! >> "$d/pids"
setsid sleep 60 < /dev/null > /dev/null 2>&1 &
echo $! >> "$d/pids"
echo $$ >> "$d/pids"
echo $$ > "$d/pgid.$RANK"
touch "$d/ready.$RANK"
if [ "$RANK" = 1 ] && [ "$mode" != sigint ]; then
    for _ in $(seq 100); do   # wait (at most 10 s) until every worker is up
        [ "$(ls "$d" | grep -c '^ready\.')" = "$WORLD_SIZE" ] && break
        sleep 0.1
    done
    echo "rank 1 fails now"
    date +%s%N > "$d/failed_at"
    exit 3
fi
while :; do sleep 1; done
W
chmod +x "$TMP/worker.sh"

# run_case NAME MODE: runs 4 workers; writes hooprun's exit code (rc) and the ms from the
# failure (rank 1's exit) to hooprun's end (ms; from hooprun's start where none failed):
# the workers' start, slow on a loaded machine, is not what is timed.
run_case() {
    local dir="$TMP/$1"
    mkdir -p "$dir"
    local t0 t1
    t0=$(now_ms)
    "$HOOPRUN" --prefix --nproc-per-node 4 "$TMP/worker.sh" "$dir" "$2" > "$dir/out" 2> "$dir/err"
    echo $? > "$dir/rc"
    t1=$(now_ms)
    [ -s "$dir/failed_at" ] && t0=$(($(cat "$dir/failed_at") / 1000000))
    echo $((t1 - t0)) > "$dir/ms"
}

# 1. Rank 1 exits 3; everyone else is SIGTERMed at once.
run_case plain plain
rc=$(cat "$TMP/plain/rc") ms=$(cat "$TMP/plain/ms")
echo "plain: rc=$rc, ${ms} ms"
[ "$rc" = 3 ] || fail "hooprun exited $rc, not 3"
[ "$ms" -lt 5000 ] || fail "hooprun took $ms ms after the failure (limit 5000)"
assert_contains "$TMP/plain/err" "hooprun: first failure: rank 1 (pid "
assert_contains "$TMP/plain/err" ") exited with code 3"
assert_contains "$TMP/plain/err" "ended by hooprun's SIGTERM"
assert_contains "$TMP/plain/out" "[rank 1] rank 1 fails now"
TMP_SAVE=$TMP; TMP=$TMP/plain; assert_no_survivors "$TMP/pids"; TMP=$TMP_SAVE
[ "$(wc -l < "$TMP/plain/pids")" = 12 ] || fail "expected 12 recorded pids"

# 2. Rank 2 (and its children) ignore SIGTERM: SIGKILL after the 3 s grace period, which
# starts when SIGTERM goes out, 1 s after the failure.
run_case ignore ignore
rc=$(cat "$TMP/ignore/rc") ms=$(cat "$TMP/ignore/ms")
echo "ignore: rc=$rc, ${ms} ms"
[ "$rc" = 3 ] || fail "hooprun exited $rc, not 3"
[ "$ms" -lt 6000 ] || fail "hooprun took $ms ms after the failure (limit 6000)"
[ "$ms" -ge 3900 ] || fail "hooprun took $ms ms after the failure: it cannot have waited 1 s + the 3 s grace period"
assert_contains "$TMP/ignore/err" "rank 2 (pid "
assert_contains "$TMP/ignore/err" "sending SIGKILL"
# Its summary row says what ended it: hooprun's SIGKILL, not "after hooprun's SIGTERM".
grep -qE "^hooprun:   2 +\S+ +[0-9]+ +- +9 \(SIGKILL\) +[0-9:.]+ +killed by hooprun's SIGKILL \(still running --grace after SIGTERM\)\$" \
    "$TMP/ignore/err" || { cat "$TMP/ignore/err"; fail "rank 2's row does not name hooprun's SIGKILL"; }
grep -qE "^hooprun:   2 .*after hooprun's SIGTERM\$" "$TMP/ignore/err" &&
    fail "rank 2, killed by SIGKILL, is said to have ended after SIGTERM"
TMP_SAVE=$TMP; TMP=$TMP/ignore; assert_no_survivors "$TMP/pids"; TMP=$TMP_SAVE

# sigint_when_ready PID N: once N workers have touched $dir/ready.*, sends SIGINT to
# hooprun (PID) and waits for it; sets rc (its exit code) and ms (how long it took).
sigint_when_ready() {
    for _ in $(seq 100); do
        [ "$(ls "$dir" | grep -c '^ready\.')" = "$2" ] && break
        sleep 0.1
    done
    t0=$(now_ms)
    kill -INT "$1"
    wait "$1"
    rc=$?
    ms=$(($(now_ms) - t0))
}

# 3. SIGINT to hooprun ends every worker (which die of it: exit 130).
dir="$TMP/sigint"
mkdir -p "$dir"
"$HOOPRUN" --nproc-per-node 4 "$TMP/worker.sh" "$dir" sigint > "$dir/out" 2> "$dir/err" &
sigint_when_ready $! 4
echo "sigint: rc=$rc, ${ms} ms after SIGINT"
[ "$rc" = 130 ] || fail "hooprun exited $rc after SIGINT, not 130"
[ "$ms" -lt 5000 ] || fail "hooprun took $ms ms after SIGINT"
assert_contains "$dir/err" "forwarded it to the workers"
TMP_SAVE=$TMP; TMP=$dir; assert_no_survivors "$TMP/pids"; TMP=$TMP_SAVE

# 4. SIGINT when rank 0 ignores it: SIGKILL after the grace period (--grace 1); exit 130.
dir="$TMP/sigint2"
mkdir -p "$dir"
"$HOOPRUN" --grace 1 --nproc-per-node 2 bash -c \
    'trap "" INT; echo $$ >> '"$dir"'/pids; touch '"$dir"'/ready.$RANK; while :; do sleep 0.2; done' \
    > "$dir/out" 2> "$dir/err" &
sigint_when_ready $! 2
echo "sigint, INT ignored: rc=$rc, ${ms} ms after SIGINT"
[ "$rc" = 130 ] || fail "hooprun exited $rc after SIGINT, not 130"
[ "$ms" -lt 4000 ] || fail "hooprun took $ms ms after SIGINT with --grace 1"
assert_contains "$dir/err" "sending SIGKILL"
TMP_SAVE=$TMP; TMP=$dir; assert_no_survivors "$TMP/pids"; TMP=$TMP_SAVE

# 4b. SIGINT when every worker catches it, finishes and exits 0: hooprun exits 0 too (a
#     run that completed is no failure, whatever signal came in).
dir="$TMP/sigint3"
mkdir -p "$dir"
"$HOOPRUN" --nproc-per-node 2 bash -c \
    'trap "sleep 0.3; exit 0" INT; touch '"$dir"'/ready.$RANK; sleep 5 & wait' \
    > "$dir/out" 2> "$dir/err" &
sigint_when_ready $! 2
[ "$rc" = 0 ] || { cat "$dir/err"; fail "hooprun exited $rc after SIGINT, every worker exiting 0"; }
assert_contains "$dir/err" "every worker exited 0 after the Interrupt; exiting 0"

# 5. A worker killed by a signal is named with the signal.
"$HOOPRUN" --nproc-per-node 2 bash -c '[ $RANK = 0 ] && kill -9 $$; sleep 30' \
    > "$TMP/k.out" 2> "$TMP/k.err"
rc=$?
[ "$rc" = 137 ] || fail "a worker killed by SIGKILL gave $rc, not 137"
assert_contains "$TMP/k.err" "hooprun: first failure: rank 0 (pid "
assert_contains "$TMP/k.err" "was killed by signal 9 (Killed)"
assert_contains "$TMP/k.err" "9 (SIGKILL)"

# 6. Failed first versus exited first (issue 10: a bad --resume named rank 1). Rank 0
# prints why it fails, then exits 0.2 s after rank 1; rank 1 learns of it (here: a file) and
# exits at once with the same code, having printed only a hoop log line before (which is
# no failure message). Rank 1 exits first, rank 0 failed first.
cat > "$TMP/echo.sh" <<'W'
#!/bin/bash
d=$1
case $RANK in
0)
    sleep 0.3
    echo "rank 0: checkpoint is truncated" >&2
    touch "$d/said"
    for _ in $(seq 100); do [ -e "$d/gone.1" ] && break; sleep 0.02; done
    sleep 0.2 # after rank 1's exit, well before hooprun's SIGTERM (1 s after it)
    exit 2
    ;;
1)
    echo "vm:123:456 [1] hoop WARN INIT: only a warning" >&2
    for _ in $(seq 100); do [ -e "$d/said" ] && { touch "$d/gone.1"; exit 2; }; sleep 0.02; done
    exit 9
    ;;
*) sleep 30 ;;
esac
W
chmod +x "$TMP/echo.sh"
mkdir -p "$TMP/echo"
"$HOOPRUN" --nproc-per-node 3 "$TMP/echo.sh" "$TMP/echo" > "$TMP/echo/out" 2> "$TMP/echo/err"
rc=$?
cat "$TMP/echo/err"
[ "$rc" = 2 ] || fail "rank 0's failure gave $rc, not 2"
assert_contains "$TMP/echo/err" "hooprun: first failure: rank 0 (pid "
assert_contains "$TMP/echo/err" "message: rank 0: checkpoint is truncated"
grep -q "first failure: rank [12]" "$TMP/echo/err" && fail "the echo or the bystander was named"
# The summary: one row per rank with its host, pid, exit code or signal, time and role.
host=$(hostname)
grep -qE "^hooprun:   0 +$host +[0-9]+ +2 +- +[0-9:.]+ +first failure\$" "$TMP/echo/err" ||
    fail "no summary row for rank 0"
grep -qE "^hooprun:   1 +$host +[0-9]+ +2 +- +[0-9:.]+ +failed too\$" "$TMP/echo/err" ||
    fail "no summary row for rank 1"
grep -qE "^hooprun:   2 +$host +[0-9]+ +- +15 \(SIGTERM\) +[0-9:.]+ +ended by hooprun's SIGTERM\$" "$TMP/echo/err" ||
    fail "no summary row for rank 2"

# 6b. A rank that heard of rank 2's failure through the communicator, and printed it
# first ("rank 2 failed: HOOP_ERR_INTERNAL during ... (see rank 2's message)"), yields to
# rank 2, which printed its own reason a moment later (rank 1 was named).
cat > "$TMP/heard.sh" <<'W'
#!/bin/bash
d=$1
case $RANK in
1)
    echo "bench: rank 1: allreduce failed: rank 2 failed: HOOP_ERR_INTERNAL during allreduce(count=9, f32, sum, algo=star) #4 (see rank 2's message)" >&2
    touch "$d/heard"
    exit 1
    ;;
2)
    for _ in $(seq 100); do [ -e "$d/heard" ] && break; sleep 0.02; done
    sleep 0.2
    echo "bench: rank 2: allreduce failed: internal error: step 7 writes past the end" >&2
    exit 1
    ;;
*) sleep 30 ;;
esac
W
chmod +x "$TMP/heard.sh"
mkdir -p "$TMP/heard"
"$HOOPRUN" --nproc-per-node 3 "$TMP/heard.sh" "$TMP/heard" > "$TMP/heard/out" 2> "$TMP/heard/err"
rc=$?
[ "$rc" = 1 ] || { cat "$TMP/heard/err"; fail "rank 2's failure gave $rc, not 1"; }
assert_contains "$TMP/heard/err" "hooprun: first failure: rank 2 (pid "
assert_contains "$TMP/heard/err" "message: bench: rank 2: allreduce failed: internal error"

# 7. A worker dies of a signal; the others notice, print an error and exit 1 right after
# it: the dead one failed first, not the first to speak.
cat > "$TMP/crash.sh" <<'W'
#!/bin/bash
d=$1
echo $$ > "$d/pid.$RANK.tmp" && mv "$d/pid.$RANK.tmp" "$d/pid.$RANK"
if [ "$RANK" = 2 ]; then sleep 0.3; kill -SEGV $$; fi
for _ in $(seq 100); do [ -e "$d/pid.2" ] && break; sleep 0.02; done
while kill -0 "$(cat "$d/pid.2")" 2>/dev/null; do sleep 0.001; done
echo "rank $RANK: rank 2 closed the connection" >&2
exit 1
W
chmod +x "$TMP/crash.sh"
mkdir -p "$TMP/crash"
"$HOOPRUN" --nproc-per-node 3 "$TMP/crash.sh" "$TMP/crash" > /dev/null 2> "$TMP/crash/err"
rc=$?
[ "$rc" = 139 ] || { cat "$TMP/crash/err"; fail "a SIGSEGV first gave $rc, not 139"; }
assert_contains "$TMP/crash/err" "first failure: rank 2 (pid "
assert_contains "$TMP/crash/err" "was killed by signal 11"

# 8. A stopped worker (SIGSTOP: a frozen rank, issue 14's fault matrix) fails nobody by
# itself; a peer that waits for it times out and exits first. hooprun names the stopped
# one first with the peer's message, exits with the peer's code, and its SIGTERM is
# followed by SIGCONT, so the stopped worker ends at once (no SIGKILL after the grace).
cat > "$TMP/stop.sh" <<'W'
#!/bin/bash
d=$1
echo $$ > "$d/pid.$RANK.tmp" && mv "$d/pid.$RANK.tmp" "$d/pid.$RANK"
if [ "$RANK" = 1 ]; then sleep 0.3; kill -STOP $$; sleep 30; exit 0; fi
if [ "$RANK" = 2 ]; then
    for _ in $(seq 200); do
        [ -e "$d/pid.1" ] && [ "$(sed 's/.*) //' "/proc/$(cat "$d/pid.1")/stat" | cut -c1)" = T ] && break
        sleep 0.02
    done
    sleep 0.2
    echo "rank 2: timed out waiting for data from rank 1" >&2
    date +%s%N > "$d/failed_at"
    exit 4
fi
sleep 30
W
chmod +x "$TMP/stop.sh"
mkdir -p "$TMP/stop"
"$HOOPRUN" --nproc-per-node 3 "$TMP/stop.sh" "$TMP/stop" > /dev/null 2> "$TMP/stop/err"
rc=$?
ms=$(($(now_ms) - $(cat "$TMP/stop/failed_at") / 1000000)) # since rank 2's failure
cat "$TMP/stop/err"
[ "$rc" = 4 ] || fail "a stopped rank 1 gave $rc, not rank 2's 4"
assert_contains "$TMP/stop/err" "hooprun: rank 1 (pid $(cat "$TMP/stop/pid.1")) is stopped"
assert_contains "$TMP/stop/err" "hooprun: first failure: rank 1 (pid "
assert_contains "$TMP/stop/err" "is stopped (SIGSTOP or job control) while rank 2 fails: rank 2 may have failed waiting for it"
assert_contains "$TMP/stop/err" "when rank 2 failed, which it may have done waiting for it"
assert_contains "$TMP/stop/err" "rank 2's message: rank 2: timed out waiting for data from rank 1"
grep -qE "^hooprun:   1 +\S+ +[0-9]+ +- +15 \(SIGTERM\) +[0-9:.]+ +first failure: it was stopped \(SIGSTOP\); ended by hooprun's SIGTERM\$" \
    "$TMP/stop/err" || fail "no summary row for the stopped rank 1"
grep -q "did not stop within" "$TMP/stop/err" && fail "the stopped rank waited for SIGKILL"
[ "$ms" -lt 3000 ] || fail "hooprun took $ms ms after rank 2's failure with a stopped worker (SIGCONT after SIGTERM: < 3000)"

# 10. hooprun killed with SIGKILL (the OOM killer): its workers die with it
# (PR_SET_PDEATHSIG), and what they started in their groups is killed by hooprun's guard
# within moments (it ran on, re-parented to init, holding what the job held); the guard,
# killed by hand first, was replaced.
cat > "$TMP/hold.sh" << 'W'
#!/bin/bash
sleep 61 &
echo $! > "$1/child.$RANK"
touch "$1/ready.$RANK"
wait
W
chmod +x "$TMP/hold.sh"
# alive PID: it runs (a zombie, dead and not yet reaped by init, does not count).
alive() { [ -e "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2> /dev/null; }
mkdir -p "$TMP/kill9"
"$HOOPRUN" --nproc-per-node 2 "$TMP/hold.sh" "$TMP/kill9" > /dev/null 2> "$TMP/kill9/err" &
hp=$!
for _ in $(seq 200); do
    [ -e "$TMP/kill9/ready.0" ] && [ -e "$TMP/kill9/ready.1" ] && break
    sleep 0.05
done
# A guard killed by hand is replaced (it was not: a break test).
g1=$(pgrep -f "^hooprun --guard-of $hp\$")
[ -n "$g1" ] || fail "no guard runs beside hooprun $hp"
kill -KILL "$g1"
for _ in $(seq 100); do
    g2=$(pgrep -f "^hooprun --guard-of $hp\$")
    [ -n "$g2" ] && [ "$g2" != "$g1" ] && break
    sleep 0.02
done
[ -n "$g2" ] && [ "$g2" != "$g1" ] || fail "the killed guard $g1 was not replaced"
kill -KILL "$hp"
wait "$hp" 2> /dev/null
t0=$(now_ms)
left=""
for r in 0 1; do
    c=$(cat "$TMP/kill9/child.$r")
    while alive "$c" && [ $(($(now_ms) - t0)) -lt 10000 ]; do sleep 0.05; done
    alive "$c" && { left="$left $c"; kill -KILL "$c"; }
done
echo "hooprun killed with SIGKILL: its workers' children ended within $(($(now_ms) - t0)) ms"
[ -z "$left" ] || fail "a worker's child outlived a SIGKILLed hooprun by 10 s:$left"
# The guard says so once it has sent SIGKILL and looked again; then it ends.
for _ in $(seq 200); do
    grep -q "ended without stopping its workers" "$TMP/kill9/err" && break
    sleep 0.05
done
for _ in $(seq 200); do
    pgrep -f "^hooprun --guard-of $hp\$" > /dev/null || break
    sleep 0.05
done
assert_contains "$TMP/kill9/err" ") ended without stopping its workers (killed, or it crashed): its guard sent SIGKILL to the "
assert_contains "$TMP/kill9/err" "hooprun: the guard of the workers' process groups (pid $g1) ended (killed?); started another (pid $g2)"
pgrep -f "^hooprun --guard-of $hp\$" > /dev/null && fail "the guard of hooprun $hp still runs"

# 11. The guard forgets a group once it is empty: rank 1 exits at once, and its pid (its
# group's id) is taken by another process of this session leading its own group; hooprun
# killed with SIGKILL then must not take that process along (it did: found by a break
# test). The pid is steered through ns_last_pid (root only; else this case is skipped).
mkdir -p "$TMP/reuse"
"$HOOPRUN" --nproc-per-node 2 bash -c '[ "$RANK" = 1 ] && { echo $$ > "$0/pid.1"; exit 0; }
echo $$ > "$0/pid.0"; exec sleep 62' "$TMP/reuse" > /dev/null 2> "$TMP/reuse/err" &
hp=$!
for _ in $(seq 200); do [ -s "$TMP/reuse/pid.0" ] && [ -s "$TMP/reuse/pid.1" ] && break; sleep 0.05; done
old=$(cat "$TMP/reuse/pid.1")
for _ in $(seq 200); do [ -e "/proc/$old" ] || break; sleep 0.05; done # reaped by hooprun
sleep 0.5 # ... which found its group empty and told the guard
victim=
if echo $((old - 1)) 2> /dev/null > /proc/sys/kernel/ns_last_pid; then
    set -m
    sleep 63 &
    victim=$!
    set +m
fi
kill -KILL "$hp"
wait "$hp" 2> /dev/null
if [ "$victim" = "$old" ]; then
    sleep 0.5
    alive "$victim" || fail "hooprun's guard killed process $victim, which took rank 1's group id after rank 1 had exited"
    echo "a process given rank 1's old group id outlived the SIGKILLed hooprun, as it should"
else
    echo "SKIP: case 11 (rank 1's pid could not be given to another process here)"
fi
[ -z "$victim" ] || kill -KILL "$victim" 2> /dev/null
pkill -KILL -f '^sleep 62$'

# 12. Workers that end with 128 + SIGUSR2 stopped as asked; workers killed by it (its
# default action: they do not catch it) are said to have saved nothing on it (hooprun
# said "stopped ... as asked" of both). Exit 140 either way, no failure report.
"$HOOPRUN" --nproc-per-node 2 bash -c 'exit 140' 2> "$TMP/usr.err"
rc=$?
[ $rc = 140 ] || fail "workers exiting 140: hooprun exited $rc: $(cat "$TMP/usr.err")"
assert_contains "$TMP/usr.err" "hooprun: the workers stopped on User defined signal 2 as asked (exit 140)"
"$HOOPRUN" --nproc-per-node 2 bash -c 'kill -USR2 $$; sleep 5' 2> "$TMP/usr.err"
rc=$?
[ $rc = 140 ] || fail "workers killed by SIGUSR2: hooprun exited $rc: $(cat "$TMP/usr.err")"
assert_contains "$TMP/usr.err" "hooprun: the workers ended on User defined signal 2 (exit 140), some killed by it: they do not catch it"
grep -q "as asked\|first failure" "$TMP/usr.err" && fail "workers killed by SIGUSR2: $(cat "$TMP/usr.err")"

# 13. Every worker left is stopped and none failed: nothing moves until a SIGCONT.
# hooprun says so once (it waited without a word) and waits on; a SIGTERM to hooprun is
# forwarded with a SIGCONT, so the stopped worker takes it at once (no SIGKILL after the
# grace period).
mkdir -p "$TMP/halt"
"$HOOPRUN" --grace 30 --nproc-per-node 2 bash -c '[ "$RANK" = 1 ] && kill -STOP $$; exit 0' \
    > /dev/null 2> "$TMP/halt/err" &
hp=$!
wait_line "$TMP/halt/err" "every worker left is stopped" 15
assert_contains "$TMP/halt/err" "hooprun: every worker left is stopped (SIGSTOP or job control): rank 1 (pid "
sleep 2.5 # a halt is said once, not once per look
t0=$(now_ms)
kill -TERM $hp
wait $hp
rc=$? ms=$(($(now_ms) - t0))
cat "$TMP/halt/err"
[ "$(grep -c "every worker left is stopped" "$TMP/halt/err")" = 1 ] || fail "the halt was said more than once"
grep -q "did not stop within" "$TMP/halt/err" && fail "the stopped rank waited for SIGKILL"
[ "$rc" = 143 ] || fail "SIGTERM to hooprun with a stopped worker: exit $rc, not 143"
[ "$ms" -lt 10000 ] || fail "hooprun took $ms ms after its SIGTERM with a stopped worker (its SIGKILL comes after --grace 30 s; limit 10000)"

# 14. A reader that stops reading hooprun's output (a pager, a stopped terminal) stops
# the workers' output, not hooprun's watch over them: rank 0 fills the pipe to a reader
# asleep for 12 s, rank 1 fails after 1 s, and hooprun stops rank 0 and says so while
# the reader still sleeps (it froze in its write until the reader woke). What it read
# of rank 0 (rank 0 blocks once the queue is full, until its SIGTERM) reaches the
# reader whole, in order.
cat > "$TMP/spew.sh" <<'W'
#!/bin/bash
if [ "$RANK" = 0 ]; then
    for i in $(seq 100000); do echo "rank 0 line $i, padded to make the pipe fill up soon"; done
    exec sleep 60
fi
sleep 1
echo "rank 1: cannot go on" >&2
exit 5
W
chmod +x "$TMP/spew.sh"
mkdir -p "$TMP/spew"
t0=$(now_ms)
({
    "$HOOPRUN" --prefix --nproc-per-node 2 "$TMP/spew.sh" 2> "$TMP/spew/err"
    echo $? > "$TMP/spew/rc"
} | {
    sleep 12
    cat > "$TMP/spew/out"
}) &
sp=$!
wait_line "$TMP/spew/err" "first failure" 10
ms=$(($(now_ms) - t0))
grep -q "first failure: rank 1" "$TMP/spew/err" ||
    fail "hooprun had not acted on rank 1's failure after $ms ms, its stdout's reader asleep: $(cat "$TMP/spew/err")"
[ -e "$TMP/spew/rc" ] && fail "hooprun ended before its reader read its output"
wait $sp
[ "$(cat "$TMP/spew/rc")" = 5 ] || fail "a stalled reader: hooprun exited $(cat "$TMP/spew/rc"), not 5"
n=$(wc -l < "$TMP/spew/out")
[ "$n" -ge 1000 ] && [ "$(sed -n "${n}p" "$TMP/spew/out")" = "[rank 0] rank 0 line $n, padded to make the pipe fill up soon" ] ||
    fail "a stalled reader: $n lines came through, the last: $(tail -n 1 "$TMP/spew/out")"
echo "stalled reader: rank 1's failure acted on after $ms ms; $n of rank 0's lines came through"

# 15. Under `stty tostop` a background process group that writes to the terminal is
# stopped (SIGTTOU): workers, each in its own group, stopped at their first line and
# hooprun waited for ever. A terminal's stdout is relayed, as stderr always is.
if python3 -c 'import pty' 2> /dev/null; then
    cat > "$TMP/tostop.py" <<'W'
import os, pty, select, signal, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execvp("bash", ["bash", "-c", sys.argv[1]])
out, t0, ended = b"", time.time(), False
while time.time() - t0 < 20:  # read until the terminal closes (EIO) once bash ended
    if select.select([fd], [], [], 0.2)[0]:
        try:
            d = os.read(fd, 4096)
        except OSError:
            break
        if not d:
            break
        out += d
    elif ended:
        break
    ended = ended or os.waitpid(pid, os.WNOHANG)[0] != 0
else:
    os.kill(pid, signal.SIGKILL)
    out += b"TIMEOUT"
sys.stdout.write(out.decode(errors="replace"))
W
    python3 "$TMP/tostop.py" "stty tostop; \"$HOOPRUN\" --nproc-per-node 2 bash -c 'echo hi from \$RANK'; echo rc=\$?" > "$TMP/tostop.out" 2>&1
    grep -q "TIMEOUT" "$TMP/tostop.out" && fail "stty tostop: hooprun hung: $(cat "$TMP/tostop.out")"
    [ "$(grep -c "^hi from [01]" "$TMP/tostop.out")" = 2 ] && grep -q "^rc=0" "$TMP/tostop.out" ||
        fail "stty tostop: $(cat "$TMP/tostop.out")"
else
    echo "no python3 pty: the stty tostop case did not run"
fi

# 16. Workers that exit 0 leaving a background job: it is stopped with them (SIGTERM), in
# one line (it went without a word); hooprun still exits 0, at once.
t0=$(now_ms)
"$HOOPRUN" --grace 30 --nproc-per-node 2 bash -c 'sleep 61 & exit 0' > /dev/null 2> "$TMP/left.err" ||
    fail "workers leaving a background job: hooprun failed: $(cat "$TMP/left.err")"
ms=$(($(now_ms) - t0))
assert_contains "$TMP/left.err" "hooprun: every worker has ended; stopping what they left running (in their process groups"
[ "$ms" -lt 10000 ] || fail "hooprun took $ms ms to stop what the workers left (SIGTERM at once, SIGKILL after --grace 30 s)"
pgrep -f "^sleep 61\$" > /dev/null && fail "a background 'sleep 61' outlived hooprun"

# 17. A Ctrl-C after a worker failed (here during --max-restarts' settling): hooprun
# exits 130 with no restart, and still reports the failure (it said only "got
# Interrupt").
mkdir -p "$TMP/intr"
"$HOOPRUN" --max-restarts 3 --nproc-per-node 2 bash -c \
    '[ "$RANK" = 1 ] && { echo "rank 1: bad data" >&2; exit 4; }; exec sleep 30' \
    > /dev/null 2> "$TMP/intr/err" &
hp=$!
wait_line "$TMP/intr/err" "stopping the other workers" 10
kill -INT $hp
wait $hp
rc=$?
[ "$rc" = 130 ] || fail "SIGINT after a failure: hooprun exited $rc, not 130: $(cat "$TMP/intr/err")"
assert_contains "$TMP/intr/err" "hooprun: first failure: rank 1 (pid "
assert_contains "$TMP/intr/err" "rank 1's message: rank 1: bad data"
assert_contains "$TMP/intr/err" "ended by the SIGINT hooprun forwarded"
grep -q "restart 1" "$TMP/intr/err" && fail "SIGINT after a failure: hooprun restarted: $(cat "$TMP/intr/err")"

# 18. SIGQUIT (a terminal's Ctrl+\, which reaches hooprun's group, not the workers') is
# forwarded as SIGINT is: the workers die of it, hooprun exits 131 saying so. It was not
# forwarded: hooprun died with a core (its guard then killed the workers), or, started
# in the background by a shell (which ignores SIGQUIT there), did nothing.
mkdir -p "$TMP/quit"
(
    ulimit -c 0
    exec "$HOOPRUN" --nproc-per-node 2 bash -c 'touch '"$TMP"'/quit/ready.$RANK; exec sleep 30' \
        > /dev/null 2> "$TMP/quit/err"
) &
hp=$!
dir="$TMP/quit"
for _ in $(seq 100); do
    [ "$(ls "$dir" | grep -c '^ready\.')" = 2 ] && break
    sleep 0.1
done
t0=$(now_ms)
kill -QUIT $hp
wait $hp
rc=$?
ms=$(($(now_ms) - t0))
[ "$rc" = 131 ] || fail "SIGQUIT: hooprun exited $rc, not 131: $(cat "$TMP/quit/err")"
[ "$ms" -lt 5000 ] || fail "hooprun took $ms ms after SIGQUIT"
assert_contains "$TMP/quit/err" "hooprun: got Quit; forwarded it to the workers"

# 19. A SIGTERM to hooprun that workers take 4 s to act on (hoop-train saving its
# checkpoint on preemption): they get 30 s by default, finish and exit 0, so hooprun exits
# 0 (it sent SIGKILL after --grace's 3 s, the save was lost, and it exited 143 all the
# same); with --grace 1 the SIGKILL comes after 1 s and says what it cut.
mkdir -p "$TMP/save"
for g in default 1; do
    rm -f "$TMP"/save/ready.*
    grace=()
    [ $g = 1 ] && grace=(--grace 1)
    "$HOOPRUN" "${grace[@]}" --nproc-per-node 2 bash -c \
        'trap "sleep 4; exit 0" TERM; touch '"$TMP"'/save/ready.$RANK; sleep 30 & wait' \
        > /dev/null 2> "$TMP/save/err.$g" &
    hp=$!
    for _ in $(seq 100); do
        [ "$(ls "$TMP/save" | grep -c '^ready\.')" = 2 ] && break
        sleep 0.1
    done
    kill -TERM $hp
    wait $hp
    rc=$?
    if [ $g = default ]; then
        [ "$rc" = 0 ] || fail "SIGTERM, workers saving for 4 s: hooprun exited $rc, not 0: $(cat "$TMP/save/err.$g")"
    else
        [ "$rc" = 143 ] || fail "SIGTERM, --grace 1: hooprun exited $rc, not 143: $(cat "$TMP/save/err.$g")"
        assert_contains "$TMP/save/err.$g" "of the signal hooprun forwarded; sending SIGKILL (a save it was making, if any, is lost"
    fi
done

# 20. A worker that ignores SIGINT: a second Ctrl-C 1 s after the first cuts hooprun's
# 30 s to --grace's 3 s, said in one line (it only forwarded it again, and waited 30 s).
mkdir -p "$TMP/again"
"$HOOPRUN" --nproc-per-node 1 bash -c 'trap "" INT TERM; touch '"$TMP"'/again/ready; while :; do sleep 0.2; done' \
    > /dev/null 2> "$TMP/again/err" &
hp=$!
for _ in $(seq 100); do [ -e "$TMP/again/ready" ] && break; sleep 0.1; done
t0=$(now_ms)
kill -INT $hp
sleep 1
kill -INT $hp
wait $hp
rc=$?
ms=$(($(now_ms) - t0))
[ "$rc" = 130 ] || fail "a second SIGINT: hooprun exited $rc, not 130: $(cat "$TMP/again/err")"
[ "$ms" -lt 8000 ] || fail "a second SIGINT: hooprun took $ms ms (the first's 30 s?): $(cat "$TMP/again/err")"
assert_contains "$TMP/again/err" "send it again to make that 3.0 s"
assert_contains "$TMP/again/err" "hooprun: got Interrupt again; forwarded it; SIGKILL to any worker still running in 3.0 s"

# 9. All workers exit 0: hooprun exits 0 and says nothing.
"$HOOPRUN" --nproc-per-node 3 true > "$TMP/ok.out" 2> "$TMP/ok.err" || fail "3 x true failed"
[ -s "$TMP/ok.err" ] && fail "hooprun printed on success: $(cat "$TMP/ok.err")"
echo "PASS"
