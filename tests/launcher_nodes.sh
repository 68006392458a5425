#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_nodes.sh -- several nodes: the nodes' hoopruns meet at MASTER_PORT + 1
# (tools/hooprun_agent.c) and start every attempt together.
#
# Two "nodes" on this host: two hoopruns (--nnodes 2 --node-rank 0|1) of 2 shell workers
# each, on 127.0.0.1.
#   1. node 1's rank 3 fails at once in attempt 0 while the other ranks wait (as workers
#      waiting for a rendezvous do): node 0's hooprun learns it from the nodes' store and
#      stops its workers, and both nodes run attempt 1 together, which succeeds. Before,
#      node 1 used up its restarts alone in moments and node 0 waited in attempt 0;
#   2. nodes told different --max-restarts (one left at the default) are refused (exit
#      2), naming the node;
#   3. node 1's hooprun killed: node 0 stops its workers within moments, naming node 1;
#   4. node 1's hooprun interrupted (SIGINT): node 0 exits 130 at once, naming it;
#   5. node 1 cannot run its program: node 0 is told at once;
#   6. node 0's hooprun stalled for 1.5 s: tolerated;
#   7. MASTER_PORT 65535 leaves no port for the nodes' store: exit 2 (--dry-run too);
#   8. node 0's only worker fails with no restart left: node 0's hooprun ends at once, yet
#      node 1 names the worker's failure, not only node 0's hooprun leaving;
#   9. node 1's workers all exit 0 before node 0's fails: node 1 waits for the others
#      and restarts with them (it left, and node 0 waited HOOP_TIMEOUT for it);
#  10. SIGTERM to a hooprun waiting at a restart's meeting: it exits 143 at once, and
#      the other node mirrors it; no attempt starts (it was ignored until the meeting
#      ended, and both then started restart 1);
#  11. node 0 cannot run its program while node 1 still retries connecting: node 1 is
#      told when it connects (it waited HOOP_TIMEOUT);
#  12. SIGUSR1 to both nodes (Slurm's --signal before a preemption), workers saving at
#      different speeds: both exit 138 (the first to stop stopped the other's save);
#  13. SIGTERM to a hooprun at the first meeting (of 3 nodes, one late): it and node 0
#      exit 143 (it died of the signal, and node 0 exited 1);
#  14. node 0's hooprun stopped (SIGSTOP) and SIGTERM to node 1's: node 1 stops its
#      workers and leaves within HOOPRUN_AGENT_QUIET_MS (2 s) and a little (it waited
#      HOOP_TIMEOUT, 20 s, for node 0's answer to its look, neither reaping nor reading
#      signals), posting its notes; node 0, continued, reads them and mirrors 143 (it
#      found node 1 only gone, and exited 1);
#  15. node 1's worker fails while node 0's hooprun is stopped: the failure note waits
#      until node 0 answers, and node 0 then names the worker's failure;
#  16. SIGUSR1 to node 1 while node 0's hooprun is stopped (for less than HOOP_TIMEOUT):
#      node 1's workers save and stop as asked; node 0's go on and end well (node 0
#      stopped them for node 1's hang-up);
#  17. SIGTERM to node 1's hooprun while it connects to a stopped node 0: it says so and
#      exits 143 (it died silently);
#  18. node 1's worker fails while node 0's hooprun is stopped, and SIGTERM to node 1's
#      hooprun as it goes to the restart's meeting: it leaves at once, posting its notes,
#      and node 0, continued, mirrors 143 (it waited for node 0's answer to its first
#      request there, reading no signal, up to HOOP_TIMEOUT);
#  19. node 0's hooprun stopped for longer than HOOP_TIMEOUT while node 1's worker fails:
#      node 1 gives up on it, saying so, and posts its notes on the connection it gave
#      up, so that node 0, continued, names the worker's failure (it said only that node
#      1 hung up);
#  20. a bad setting on one node (HOOP_TRANSPORT=bogus): both exit 2 at once, the other
#      naming it and why (it waited HOOP_TIMEOUT for a node that never came, exit 1),
#      also a node 1 that comes 3 s after the bad node 0;
#  21. SIGUSR1 (a preemption's notice) to node 0's hooprun while it waits at the first
#      meeting for node 1: its workers get it once they catch it and stop as asked, exit
#      138 (it was dropped, and they ran on unsaved; then it was sent as they started,
#      before a worker's handler was in place, and killed it);
#  22. node 1's hooprun and worker killed (SIGKILL; hoop-train's worker ends with its
#      hooprun) while node 0's worker fails the moment node 1's dies (as a DDP rank whose
#      link closes): node 0 names node 1's hooprun lost, before its own worker's failure
#      (it named only its own worker).
. "${top_srcdir:-.}/tests/launcher_lib.sh"
export HOOP_TOKEN=nodes-test HOOP_TIMEOUT=20

# two NAME R0 R1 CMD: node 0 with --max-restarts R0, node 1 with R1, both running CMD;
# outputs in $TMP/NAME.{0,1}.{out,err}, exit codes in $TMP/NAME.rc.{0,1}, the
# milliseconds until both ended in $TMP/NAME.ms.
two() {
    local name=$1 r0=$2 r1=$3 cmd=$4 t0 p0 p1
    for _ in 1 2 3; do # a random port may be taken: try another
        local port=$((20000 + RANDOM % 12000))
        t0=$(now_ms)
        "$HOOPRUN" --nnodes 2 --node-rank 0 --nproc-per-node "${NPROC:-2}" --master-addr 127.0.0.1 \
            --master-port $port --max-restarts "$r0" bash -c "$cmd" \
            > "$TMP/$name.0.out" 2> "$TMP/$name.0.err" &
        p0=$!
        "$HOOPRUN" --nnodes 2 --node-rank 1 --nproc-per-node "${NPROC:-2}" --master-addr 127.0.0.1 \
            --master-port $port --max-restarts "$r1" bash -c "$cmd" \
            > "$TMP/$name.1.out" 2> "$TMP/$name.1.err" &
        p1=$!
        echo "$p0 $p1" > "$TMP/$name.pids"
        [ -z "${TWO_HOOK:-}" ] || eval "$TWO_HOOK"
        wait $p0
        echo $? > "$TMP/$name.rc.0"
        wait $p1
        echo $? > "$TMP/$name.rc.1"
        echo $(($(now_ms) - t0)) > "$TMP/$name.ms"
        now_ms > "$TMP/$name.end"
        grep -q "Address already in use" "$TMP/$name".[01].err || break
    done
}

# both_rc NAME WANT WHAT: both nodes of run NAME exited WANT, else fail naming WHAT.
both_rc() {
    local n
    for n in 0 1; do
        [ "$(cat "$TMP/$1.rc.$n")" = "$2" ] ||
            { cat "$TMP/$1.$n.err"; fail "$3: node $n exited $(cat "$TMP/$1.rc.$n"), not $2"; }
    done
}

# wait_blocked PID...: once connected to the nodes' store, hooprun blocks its signals
# (read between a meeting's slices, forwarded while workers run); before, SIGTERM or
# SIGUSR1 would simply kill it. Waits (at most 10 s: a sanitizer is slow) for that.
wait_blocked() {
    local pid blk
    for pid in "$@"; do
        # Also its signalfd, made just after the block: a thread's creation blocks every
        # signal for a moment too (glibc's pthread_create; long under TSan), and a SIGTERM
        # then came while hooprun was still connecting (it exits 143 untold to node 0).
        for _ in $(seq 200); do
            blk=$(awk '/^SigBlk/ { print $2 }' "/proc/$pid/status" 2> /dev/null)
            [ -n "$blk" ] && [ $((0x$blk & 0x4200)) = $((0x4200)) ] && # TERM, USR1
                find "/proc/$pid/fd" -lname 'anon_inode:*signalfd*' 2> /dev/null | grep -q . &&
                break
            sleep 0.05
        done
    done
}

# within NAME LIMIT_MS WHAT: says how long run NAME took; fails past LIMIT_MS.
within() {
    local ms
    ms=$(cat "$TMP/$1.ms")
    echo "$3: both nodes ended within $ms ms of the start"
    [ "$ms" -lt "$2" ] || { cat "$TMP/$1".[01].err; fail "$3: took $ms ms"; }
}

# wait_file PATH: waits (at most 20 s) until PATH exists: a worker's sign that it runs
# (its node's hooprun is past the meeting), or a hook's that node 0's hooprun is stopped.
# 1 when it never does.
wait_file() {
    for _ in $(seq 400); do
        [ -e "$1" ] && return 0
        sleep 0.05
    done
    return 1
}
# give_up WHY: a hook's failure: both hoopruns ($p0, $p1) and their workers killed.
give_up() {
    kill -KILL "$p0" "$p1" 2> /dev/null
    pkill -KILL -f '^sleep 3[0-9]$'
    fail "$1"
}
# Worker code: UP marks rank 0 running; GATE waits (at most 20 s) for the hook's gate file.
UP='[ "$RANK" = 0 ] && : > '"$TMP"'/up
'
GATE='for _ in $(seq 400); do [ -e '"$TMP"'/gate ] && break; sleep 0.05; done
'
# stop_node0: once node 0's rank 0 runs, stops node 0's hooprun ($p0) and opens the gate.
stop_node0() {
    wait_file "$TMP/up" || give_up "node 0's rank 0 never started"
    kill -STOP "$p0"
    : > "$TMP/gate"
}
# wait_text FILE TEXT: waits (at most 20 s) until FILE holds TEXT.
wait_text() {
    for _ in $(seq 400); do
        grep -qF "$2" "$1" 2> /dev/null && return 0
        sleep 0.05
    done
    give_up "$1 never said '$2'"
}
# fresh: no marks of the previous run.
fresh() { rm -f "$TMP/up" "$TMP/gate"; }

# wait_workers SECONDS N: waits (at most 20 s) until N workers 'sleep SECONDS' run: every
# node is past its meeting and started its workers.
wait_workers() {
    for _ in $(seq 400); do
        [ "$(pgrep -fc "^sleep $1\$")" = "$2" ] && return 0
        sleep 0.05
    done
    give_up "$2 workers 'sleep $1' never ran"
}

# 1. A start-up failure on one node: both start attempt 1 together. Rank 3 fails once
# every rank of attempt 0 has written its line (a worker stopped before its shell ran
# its first command writes none).
rec='echo "$TORCHELASTIC_RESTART_COUNT $RANK" >> '"$TMP"'/attempts
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0
[ "$RANK" = 3 ] || exec sleep 30
for _ in $(seq 200); do
    [ "$(grep -c "^0 " '"$TMP"'/attempts)" -ge 4 ] && break
    sleep 0.05
done
echo "rank 3: cannot open the data" >&2
exit 4'
two fail1 2 2 "$rec"
both_rc fail1 0 "a start-up failure on node 1"
within fail1 10000 "a start-up failure on node 1, then attempt 1"
assert_contains "$TMP/fail1.0.err" "hooprun (node 0): attempt failed on node 1 ("
# The other node quotes the failed worker's message (its last stderr line).
assert_contains "$TMP/fail1.0.err" "): rank 3 exited with code 4 (its message: rank 3: cannot open the data); stopping this node's 2 workers"
assert_contains "$TMP/fail1.1.err" "hooprun: restart 1 of 2: starting all 2 workers again"
assert_contains "$TMP/fail1.0.err" "hooprun: restart 1 of 2: starting all 2 workers again"
grep -q "restart 2 of 2" "$TMP"/fail1.[01].err && fail "a second restart: $(cat "$TMP"/fail1.[01].err)"
[ "$(sort "$TMP/attempts" | tr '\n' ,)" = "0 0,0 1,0 2,0 3,1 0,1 1,1 2,1 3," ] ||
    fail "expected attempts 0 and 1 of ranks 0-3 once each: $(sort "$TMP/attempts" | tr '\n' ,)"
# Node 0's workers were stopped for node 1's failure: no summary blames them.
grep -q "first failure" "$TMP/fail1.0.err" && fail "node 0 blamed its own workers: $(cat "$TMP/fail1.0.err")"

# 2. Different --max-restarts (one node left at the default 0): refused on both nodes.
two differ 1 0 'exit 0'
both_rc differ 2 "different --max-restarts"
assert_contains "$TMP/differ.0.err" "hooprun (node 0): node 1 ("
assert_contains "$TMP/differ.0.err" ") runs --max-restarts 0 but this node runs 1: give every node's hooprun the same --max-restarts"
assert_contains "$TMP/differ.1.err" ") runs --max-restarts 1 but this node runs 0"

# 3. Node 1's hooprun dies: node 0 stops its workers at once and names it.
# (its workers, orphaned, are ended afterwards: sleep 31 alone, not the hoopruns)
TWO_HOOK='wait_workers 31 4; sleep 0.5; kill -KILL $p1; now_ms > "$TMP/lost.kt"'
two lost 2 2 'exec sleep 31'
unset TWO_HOOK
pkill -KILL -f '^sleep 31$' 
rc=$(cat "$TMP/lost.rc.0")
[ "$rc" != 0 ] || fail "node 0 exited 0 after node 1's hooprun died"
ms=$(($(cat "$TMP/lost.end") - $(cat "$TMP/lost.kt")))
echo "node 1's hooprun killed once the workers ran: node 0 ended within $ms ms of it (exit $rc)"
[ "$ms" -lt 6000 ] || { cat "$TMP/lost.0.err"; fail "node 0 took $ms ms"; }
assert_contains "$TMP/lost.0.err" "hooprun (node 0): lost the nodes' rendezvous (its ranks are node ranks): "
assert_contains "$TMP/lost.0.err" "node 1 (127.0.0.1:"
assert_contains "$TMP/lost.0.err" ") hung up on the store without closing it (its hooprun died"

# 4. SIGINT to node 1's hooprun: node 0 stops its workers and exits 130 at once, not
# after waiting HOOP_TIMEOUT for node 1 at the next attempt's meeting.
TWO_HOOK='wait_workers 32 4; sleep 0.5; kill -INT $p1; now_ms > "$TMP/int.kt"'
two int 2 2 'exec sleep 32'
unset TWO_HOOK
both_rc int 130 "SIGINT to node 1"
ms=$(($(cat "$TMP/int.end") - $(cat "$TMP/int.kt")))
echo "SIGINT to node 1's hooprun once the workers ran: both ended within $ms ms of it"
[ "$ms" -lt 4000 ] || fail "took $ms ms"
assert_contains "$TMP/int.0.err" "hooprun (node 0): attempt failed on node 1 ("
assert_contains "$TMP/int.0.err" "): its hooprun exited with 130 (it got SIGINT: 128 + 2); stopping this node's 2 workers"
grep -q "starting all 2 workers again" "$TMP/int.0.err" && fail "node 0 restarted: $(cat "$TMP/int.0.err")"

# 5. Node 1 cannot run its program: node 0 is told at once.
rm -f "$TMP/prog0"
printf '#!/bin/sh\nexec sleep 30\n' > "$TMP/prog0" && chmod +x "$TMP/prog0"

# missing NAME GOOD BAD DELAY LIMIT_MS: node GOOD's hooprun runs prog0 and, DELAY s
# later, node BAD's hooprun a program that does not exist; BAD must exit 127 and GOOD 1,
# both within LIMIT_MS; stderr in $TMP/NAME.{0,1}.err.
missing() {
    local name=$1 good=$2 bad=$3 delay=$4 limit=$5 pid t0 port ms rc0 rc1
    for _ in 1 2 3; do
        port=$((20000 + RANDOM % 12000))
        t0=$(now_ms)
        "$HOOPRUN" --nnodes 2 --node-rank "$good" --nproc-per-node 1 --master-addr 127.0.0.1 \
            --master-port $port "$TMP/prog0" 2> "$TMP/$name.$good.err" &
        pid=$!
        sleep "$delay"
        "$HOOPRUN" --nnodes 2 --node-rank "$bad" --nproc-per-node 1 --master-addr 127.0.0.1 \
            --master-port $port "$TMP/nonexistent" 2> "$TMP/$name.$bad.err"
        eval "rc$bad=\$?"
        wait $pid
        eval "rc$good=\$?"
        ms=$(($(now_ms) - t0))
        grep -q "Address already in use" "$TMP/$name".[01].err || break
    done
    local rcb=rc$bad rcg=rc$good
    [ "${!rcb}" = 127 ] || fail "node $bad without its program exited ${!rcb}: $(cat "$TMP/$name.$bad.err")"
    [ "${!rcg}" = 1 ] || fail "node $good exited ${!rcg}: $(cat "$TMP/$name.$good.err")"
    echo "node $bad cannot run its program (${delay} s after node $good started): both ended within $ms ms"
    [ "$ms" -lt "$limit" ] || fail "node $good took $ms ms"
}
missing np 0 1 0 5000
assert_contains "$TMP/np.0.err" ")'s hooprun exited with 127"

# 6. Node 0's hooprun stalled for 1.5 s (SIGSTOP, then SIGCONT) while the workers run:
# no node gives the meeting up (they did after 1 s) and the job ends well.
TWO_HOOK='sleep 1; kill -STOP $p0; sleep 1.5; kill -CONT $p0'
two stall 1 1 'exec sleep 4'
unset TWO_HOOK
both_rc stall 0 "a 1.5 s stall of node 0's hooprun"

# 7. No port above MASTER_PORT, with --dry-run too.
for dry in "" --dry-run; do
    "$HOOPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \
        --master-port 65535 $dry true > "$TMP/o" 2> "$TMP/e"
    [ $? = 2 ] || fail "MASTER_PORT 65535 on 2 nodes ($dry) did not exit 2: $(cat "$TMP/o" "$TMP/e")"
    assert_contains "$TMP/e" "MASTER_PORT 65535 leaves no port above it for the nodes' rendezvous"
done
# 8. Node 0's one worker fails, no restarts: node 0 waits (at most 1 s) until node 1 has
# read the failure before its store says GOODBYE. Before, node 1 was told only "node 0's
# hooprun exited with 4", the CI failure of the fault matrix's netns kill@checkpoint.
NPROC=1 two last 0 0 '[ "$RANK" = 0 ] && exit 4; exec sleep 34'
[ "$(cat "$TMP/last.rc.0")" = 4 ] || fail "node 0 exited $(cat "$TMP/last.rc.0"), not its worker's 4"
[ "$(cat "$TMP/last.rc.1")" = 1 ] || fail "node 1 exited $(cat "$TMP/last.rc.1"), not 1"
within last 6000 "node 0's only worker failed"
assert_contains "$TMP/last.1.err" "hooprun (node 1): attempt failed on node 0 ("
assert_contains "$TMP/last.1.err" "): rank 0 exited with code 4; stopping this node's 1 worker"

# 9. Node 1 finishes well while node 0's attempt 0 fails a second later.
NPROC=1 two ended 1 1 '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0
[ "$RANK" = 0 ] && { sleep 1; exit 9; }
exit 0'
both_rc ended 0 "node 0 failing after node 1 had finished"
within ended 8000 "node 0 failed after node 1 had finished, then attempt 1"
assert_contains "$TMP/ended.1.err" "hooprun (node 1): attempt failed on node 0 ("
assert_contains "$TMP/ended.1.err" "): rank 0 exited with code 9 (every worker here had exited 0)"
assert_contains "$TMP/ended.1.err" "hooprun: restart 1 of 1: starting the 1 worker again"

# 10. SIGTERM to node 1's hooprun while it waits at the restart's meeting for node 0,
# whose worker takes 3 s to stop.
fresh
TWO_HOOK='wait_text "$TMP/meetsig.1.err" "first failure"; sleep 0.3; kill -TERM $p1'
NPROC=1 two meetsig 2 2 '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0
if [ "$RANK" = 1 ]; then
    for _ in $(seq 400); do [ -e '"$TMP"'/up ] && break; sleep 0.05; done
    exit 3
fi
trap "sleep 3; exit 1" TERM
: > '"$TMP"'/up
sleep 30 & wait'
unset TWO_HOOK
both_rc meetsig 143 "SIGTERM to node 1 at the restart's meeting"
assert_contains "$TMP/meetsig.1.err" "hooprun (node 1): got Terminated before restart 1, waiting for node 0; not starting another attempt"
assert_contains "$TMP/meetsig.0.err" "(it got SIGTERM: 128 + 15)"
grep -q "restart 1 of 2" "$TMP"/meetsig.[01].err && fail "a restart started: $(cat "$TMP"/meetsig.[01].err)"
# 11. Node 1 first; node 0, 1 s later, cannot run its program.
missing np0 1 0 1 6000
assert_contains "$TMP/np0.1.err" "hooprun (node 1): "
assert_contains "$TMP/np0.1.err" "node 0 ("
assert_contains "$TMP/np0.1.err" ")'s hooprun exited with 127" # by its GOODBYE, or the exit note
# 12. A preemption: SIGUSR1 to both hoopruns; rank 0 takes 1 s longer to save.
fresh
TWO_HOOK='wait_blocked $p0 $p1; wait_file "$TMP/up" || give_up "rank 0 never ran"
sleep 1; kill -USR1 $p0 $p1'
NPROC=1 two usr 1 1 "$UP"'trap "[ \$RANK = 0 ] && sleep 1; exit 138" USR1
sleep 20 & wait'
unset TWO_HOOK
both_rc usr 138 "SIGUSR1 to both nodes"
grep -q "attempt failed" "$TMP"/usr.[01].err && fail "a preemption taken for a failure: $(cat "$TMP"/usr.[01].err)"

# 13. SIGTERM to node 1 while nodes 0 and 1 wait for node 2 at the first meeting.
for _ in 1 2 3; do
    port=$((20000 + RANDOM % 12000))
    for n in 0 1; do
        "$HOOPRUN" --nnodes 3 --node-rank $n --nproc-per-node 1 --master-addr 127.0.0.1 \
            --master-port $port true 2> "$TMP/first.$n.err" &
        eval "p$n=\$!"
    done
    wait_blocked "$p1"
    kill -TERM "$p1"
    wait "$p1"
    rc1=$?
    wait "$p0"
    rc0=$?
    grep -q "Address already in use" "$TMP"/first.[01].err || break
done
[ "$rc1" = 143 ] || fail "node 1 exited $rc1 on SIGTERM at the first meeting: $(cat "$TMP/first.1.err")"
[ "$rc0" = 143 ] || fail "node 0 exited $rc0, not mirroring node 1's 143: $(cat "$TMP/first.0.err")"
assert_contains "$TMP/first.1.err" "hooprun (node 1): got Terminated before attempt 0, waiting for node 2; not starting the workers"
assert_contains "$TMP/first.0.err" "(it got SIGTERM: 128 + 15); not starting the workers"

# ended_within PID MS: waits (at most MS ms) until PID has ended (a zombie counts); 1 when
# it still runs.
ended_within() {
    local end=$(($(now_ms) + $2))
    while [ -e "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2> /dev/null; do
        [ "$(now_ms)" -lt "$end" ] || return 1
        sleep 0.05
    done
}

# node_rc NAME NODE WANT: node NODE of run NAME exited WANT, else fail with its stderr.
node_rc() {
    [ "$(cat "$TMP/$1.rc.$2")" = "$3" ] ||
        fail "$1: node $2 exited $(cat "$TMP/$1.rc.$2"), not $3: $(cat "$TMP/$1.$2.err")"
}
# no_worker_left SECONDS: no worker 'sleep SECONDS' is left running (else kills it, fails).
no_worker_left() {
    pgrep -f "^sleep $1\$" > /dev/null || return 0
    pkill -KILL -f "^sleep $1\$"
    fail "a worker (sleep $1) was left running"
}

# 14. Node 0's hooprun stopped; SIGTERM to node 1's hooprun 0.5 s later.
fresh
TWO_HOOK='wait_blocked $p0 $p1; stop_node0; sleep 0.5; t=$(now_ms); kill -TERM $p1
ended_within $p1 15000; echo $(($(now_ms) - t)) > "$TMP/silent.t"; kill -CONT $p0'
NPROC=1 two silent 0 0 "$UP"'exec sleep 35'
unset TWO_HOOK
t=$(cat "$TMP/silent.t")
echo "node 0's hooprun stopped, SIGTERM to node 1's: node 1 left in $t ms"
node_rc silent 1 143
[ "$t" -lt 5000 ] || fail "node 1 took $t ms to leave while node 0 was stopped: $(cat "$TMP/silent.1.err")"
assert_contains "$TMP/silent.1.err" "hooprun (node 1): node 0's hooprun has not answered for 2.0 s (stopped, in a debugger, or cut off by the network?); leaving this node's notes for it to read when it runs again"
node_rc silent 0 143
assert_contains "$TMP/silent.0.err" "hooprun (node 0): attempt failed on node 1 ("
assert_contains "$TMP/silent.0.err" "): its hooprun exited with 143 (it got SIGTERM: 128 + 15); stopping this node's 1 worker"
no_worker_left 35

# 15. Node 1's worker fails 1.5 s after node 0's hooprun was stopped (for 4 s).
fresh
TWO_HOOK='wait_blocked $p0 $p1; stop_node0; sleep 4; kill -CONT $p0'
NPROC=1 two quiet 0 0 "$UP$GATE"'[ "$RANK" = 1 ] && { sleep 1.5; exit 5; }; exec sleep 36'
unset TWO_HOOK
node_rc quiet 1 5
node_rc quiet 0 1
within quiet 12000 "node 1's worker failed while node 0's hooprun was stopped"
assert_contains "$TMP/quiet.0.err" "hooprun (node 0): attempt failed on node 1 ("
assert_contains "$TMP/quiet.0.err" "): rank 1 exited with code 5; stopping this node's 1 worker"
# 16. Node 0's hooprun stopped for 3.5 s; SIGUSR1 to node 1's 0.5 s in.
fresh
TWO_HOOK='wait_blocked $p0 $p1; stop_node0; sleep 0.5; kill -USR1 $p1; sleep 3; kill -CONT $p0'
NPROC=1 two usr1 0 0 "$UP"'trap "exit 138" USR1
[ "$RANK" = 0 ] && { sleep 6 & wait; exit 0; }
sleep 30 & wait'
unset TWO_HOOK
node_rc usr1 1 138
node_rc usr1 0 0

# 17. SIGTERM to node 1's hooprun while it connects to node 0's, stopped.
for _ in 1 2 3; do
    port=$((20000 + RANDOM % 12000))
    "$HOOPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 127.0.0.1 \
        --master-port $port true 2> "$TMP/conn.0.err" &
    p0=$!
    wait_blocked "$p0"
    kill -STOP "$p0"
    "$HOOPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \
        --master-port $port true 2> "$TMP/conn.1.err" &
    p1=$!
    sleep 1
    kill -TERM "$p1"
    wait "$p1"
    rc1=$?
    kill -CONT "$p0"
    wait "$p0"
    grep -q "Address already in use" "$TMP"/conn.[01].err || break
done
[ "$rc1" = 143 ] || fail "node 1 exited $rc1 on SIGTERM while connecting: $(cat "$TMP/conn.1.err")"
assert_contains "$TMP/conn.1.err" "hooprun (node 1): got Terminated while connecting to the nodes' rendezvous; exiting 143"

# 18. Node 0's hooprun stopped; node 1's worker fails 0.5 s later (a restart is left);
# SIGTERM to node 1's hooprun 1 s after that, while it goes to restart 1's meeting.
fresh
TWO_HOOK='wait_blocked $p0 $p1; stop_node0; wait_text "$TMP/restop.1.err" "first failure"
sleep 1; t=$(now_ms); kill -TERM $p1
ended_within $p1 15000; echo $(($(now_ms) - t)) > "$TMP/restop.t"; kill -CONT $p0'
NPROC=1 two restop 1 1 '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0
'"$UP$GATE"'[ "$RANK" = 1 ] && { sleep 0.5; exit 3; }; exec sleep 37'
unset TWO_HOOK
t=$(cat "$TMP/restop.t")
echo "node 0's hooprun stopped, SIGTERM to node 1's before its restart: node 1 left in $t ms"
node_rc restop 1 143
[ "$t" -lt 5000 ] || fail "node 1 took $t ms to leave while node 0 was stopped: $(cat "$TMP/restop.1.err")"
assert_contains "$TMP/restop.1.err" "hooprun (node 1): got Terminated before restart 1, while node 0's hooprun did not answer; not starting another attempt"
node_rc restop 0 143
assert_contains "$TMP/restop.0.err" "): rank 1 exited with code 3"
assert_contains "$TMP/restop.0.err" "'s hooprun exited with 143 (it got SIGTERM: 128 + 15); not starting another attempt"
grep -q "restart 1 of 1" "$TMP"/restop.[01].err && fail "a restart started: $(cat "$TMP"/restop.[01].err)"
no_worker_left 37

# 19. Node 0's hooprun stopped for 6 s (HOOP_TIMEOUT 3 s); node 1's worker fails 0.5 s in.
fresh
TWO_HOOK='wait_blocked $p0 $p1; stop_node0; sleep 6; kill -CONT $p0'
HOOP_TIMEOUT=3 NPROC=1 two long 1 1 '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0
'"$UP$GATE"'[ "$RANK" = 1 ] && { sleep 0.5; exit 7; }; exec sleep 38'
unset TWO_HOOK
node_rc long 1 7
assert_contains "$TMP/long.1.err" "hooprun (node 1): node 0's hooprun did not answer before restart 1 within HOOP_TIMEOUT (3000 ms; stopped, in a debugger, or cut off by the network?); not starting another attempt"
assert_contains "$TMP/long.1.err" "hooprun (node 1): node 0's hooprun has not answered within HOOP_TIMEOUT (stopped, in a debugger, or cut off by the network?); leaving this node's notes for it to read when it runs again"
node_rc long 0 1
assert_contains "$TMP/long.0.err" "hooprun (node 0): attempt failed on node 1 ("
assert_contains "$TMP/long.0.err" "): rank 1 exited with code 7; stopping this node's 1 worker"
no_worker_left 38

# 20. A bad setting on one node (HOOP_TRANSPORT=bogus): that node exits 2 at once, and so
# does the other, naming it and why (it waited HOOP_TIMEOUT for a node that "never
# came", then exited 1); node 1's, then node 0's.
for bad in 1 0; do
    port=$((20000 + RANDOM % 12000))
    t0=$(now_ms)
    for n in 0 1; do
        v=tcp
        [ $n = $bad ] && v=bogus
        HOOP_TRANSPORT=$v "$HOOPRUN" --nnodes 2 --node-rank $n --nproc-per-node 1 \
            --master-addr 127.0.0.1 --master-port $port sleep 39 2> "$TMP/env$bad.$n.err" &
        eval "p$n=\$!"
    done
    wait "$p0"
    rc0=$?
    wait "$p1"
    rc1=$?
    ms=$(($(now_ms) - t0))
    echo "HOOP_TRANSPORT=bogus on node $bad: both ended within $ms ms (exit $rc0, $rc1)"
    [ "$rc0$rc1" = 22 ] || fail "node $bad's bad setting: exits $rc0 and $rc1, not 2: $(cat "$TMP"/env$bad.[01].err)"
    [ "$ms" -lt 10000 ] || fail "node $bad's bad setting: took $ms ms: $(cat "$TMP"/env$bad.[01].err)"
    assert_contains "$TMP/env$bad.$bad.err" "hooprun: HOOP_TRANSPORT='bogus' is not one of"
    assert_contains "$TMP/env$bad.$((1 - bad)).err" "node $bad ("
    assert_contains "$TMP/env$bad.$((1 - bad)).err" "'s hooprun exited with 2 (bad flags or environment: HOOP_TRANSPORT='bogus' is not one of"
done
# ... and a node that comes 3 s after the bad node 0 is told too (node 0 told latecomers
# for 2 s, then node 1 waited HOOP_TIMEOUT for a store nobody served, exit 1).
port=$((20000 + RANDOM % 12000))
HOOP_TRANSPORT=bogus "$HOOPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 \
    --master-addr 127.0.0.1 --master-port $port sleep 39 2> "$TMP/envlate.0.err" &
p0=$!
sleep 3
t0=$(now_ms)
"$HOOPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \
    --master-port $port sleep 39 2> "$TMP/envlate.1.err"
rc1=$?
ms=$(($(now_ms) - t0))
wait "$p0"
rc0=$?
echo "HOOP_TRANSPORT=bogus on node 0, node 1 3 s later: node 1 ended within $ms ms (exit $rc0, $rc1)"
[ "$rc0$rc1" = 22 ] && [ "$ms" -lt 5000 ] ||
    fail "a late node 1: exits $rc0 and $rc1 after $ms ms: $(cat "$TMP"/envlate.[01].err)"
assert_contains "$TMP/envlate.1.err" "'s hooprun exited with 2 (bad flags or environment: HOOP_TRANSPORT='bogus' is not one of"
no_worker_left 39

# 21. SIGUSR1 to node 0's hooprun while it waits for node 1 at the first meeting.
port=$((20000 + RANDOM % 12000))
"$HOOPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 127.0.0.1 \
    --master-port $port bash -c 'sleep 0.3; trap "touch '"$TMP"'/saved21; exit 138" USR1; sleep 38 & wait' \
    2> "$TMP/notice.0.err" &
p0=$!
wait_blocked $p0
kill -USR1 $p0
sleep 0.5
"$HOOPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \
    --master-port $port sleep 1 2> "$TMP/notice.1.err"
rc1=$?
wait "$p0"
rc0=$?
[ "$rc0$rc1" = 1380 ] ||
    fail "SIGUSR1 at the first meeting: exits $rc0 and $rc1, not 138 and 0: $(cat "$TMP"/notice.[01].err)"
assert_contains "$TMP/notice.0.err" "hooprun: got User defined signal 1 while the nodes met; forwarded it to the workers as they started"
# The worker sets its trap 0.3 s after it starts (as hoop-train, whose handler is in place
# only once the dynamic loader is done): hooprun holds the signal until the worker catches
# it (it was sent as the worker started, and killed it before its trap was set).
assert_contains "$TMP/notice.0.err" "hooprun: the workers stopped on User defined signal 1 as asked (exit 138)"
[ -e "$TMP/saved21" ] || fail "SIGUSR1 at the first meeting: the worker's trap did not run"
no_worker_left 38

# 22. Node 1's hooprun killed; node 0's worker fails as node 1's worker dies with it.
rm -f "$TMP/w1.pid" "$TMP/h1.pid"
TWO_HOOK='wait_file "$TMP/w1.pid" || give_up "node 1'"'"'s worker never ran"; sleep 0.5; echo $p1 > "$TMP/h1.pid"; kill -KILL $p1 "$(cat "$TMP/w1.pid")"'
NPROC=1 two dead 0 0 'if [ "$RANK" = 1 ]; then echo $$ > '"$TMP"'/w1.pid; exec sleep 37; fi
for _ in $(seq 400); do [ -s '"$TMP"'/w1.pid ] && [ -s '"$TMP"'/h1.pid ] && break; sleep 0.05; done
# (until both are zombies or gone: nobody may reap the worker for a while once its
# hooprun is gone; and the hooprun, killed at the same moment, may have closed its
# link to node 0'"'"'s store only after the worker died: node 0 must find it lost)
for w in $(cat '"$TMP"'/w1.pid '"$TMP"'/h1.pid); do
    while read -r _ _ st _ < /proc/$w/stat && [ "$st" != Z ]; do sleep 0.01; done 2> /dev/null
done
exit 3'
unset TWO_HOOK
# 3: node 0's worker failed first; 1: node 0's look found node 1 lost first
case $(cat "$TMP/dead.rc.0") in 1 | 3) ;; *) node_rc dead 0 3 ;; esac
assert_contains "$TMP/dead.0.err" "hooprun (node 0): lost the nodes' rendezvous (its ranks are node ranks): node 1 (127.0.0.1:"
assert_contains "$TMP/dead.0.err" ") hung up on the store without closing it (its hooprun died"
no_worker_left 37

# 23. Node 1 given another HOOP_TOKEN: it is refused and exits 2 at once; node 0, whose
# meeting times out, names the client its store refused (it said only "node 1 never
# came").
port=$((20000 + RANDOM % 12000))
HOOP_TIMEOUT=3 "$HOOPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 127.0.0.1 \
    --master-port $port true > /dev/null 2> "$TMP/tok.0.err" &
p0=$!
sleep 0.5
HOOP_TOKEN=another HOOP_TIMEOUT=3 "$HOOPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 1 \
    --master-addr 127.0.0.1 --master-port $port true > /dev/null 2> "$TMP/tok.1.err"
rc1=$?
wait $p0
rc0=$?
[ "$rc1" = 2 ] || fail "node 1 with another token exited $rc1, not 2: $(cat "$TMP/tok.1.err")"
[ "$rc0" = 1 ] || fail "node 0, whose node 1 was refused, exited $rc0, not 1: $(cat "$TMP/tok.0.err")"
assert_contains "$TMP/tok.1.err" "the server refused this client: wrong or missing HOOP_TOKEN"
assert_contains "$TMP/tok.0.err" "node 1 never came within HOOP_TIMEOUT (3000 ms); meanwhile its store refused a client at 127.0.0.1:"
assert_contains "$TMP/tok.0.err" "claiming node 1: wrong or missing HOOP_TOKEN"
# 24. Node 0's hooprun stopped (SIGSTOP) from before its worker ends until node 1's,
# whose worker exited 0, gave up on it at the end (HOOP_TIMEOUT): a finished job, both
# exit 0, as a timeout at that exit barrier does (node 1 exited 1, and node 0, continued,
# then blamed node 1's exit).
port=$((20000 + RANDOM % 12000))
HOOP_TIMEOUT=4 "$HOOPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 127.0.0.1 \
    --master-port $port sleep 2 > /dev/null 2> "$TMP/endstop.0.err" &
p0=$!
HOOP_TIMEOUT=4 "$HOOPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \
    --master-port $port sleep 2 > /dev/null 2> "$TMP/endstop.1.err" &
p1=$!
sleep 1
kill -STOP $p0
wait $p1
rc1=$?
kill -CONT $p0
wait $p0
rc0=$?
[ "$rc1" = 0 ] && [ "$rc0" = 0 ] ||
    fail "node 0 stopped at the end: exit codes $rc0/$rc1, not 0/0: $(cat "$TMP/endstop.0.err" "$TMP/endstop.1.err")"
assert_contains "$TMP/endstop.1.err" "node 0's hooprun did not answer at the end of the first attempt within HOOP_TIMEOUT (4000 ms; stopped, in a debugger, or cut off by the network?); every worker here exited 0; leaving"
# 25. Node 0 given a MASTER_ADDR that is not its host's (here a multicast address, to
# which no connection goes): its store listens on every address of this host, so its own
# connection failing there says so at once, exit 2 (it retried for HOOP_TIMEOUT and then
# said that node 0's hooprun never opened its store); the workers' rank 0 alike.
t0=$(now_ms)
HOOP_TIMEOUT=20 "$HOOPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 224.0.0.1 \
    --master-port $((20000 + RANDOM % 12000)) true > /dev/null 2> "$TMP/notme.err"
rc=$?
ms=$(($(now_ms) - t0))
[ "$rc" = 2 ] && [ "$ms" -lt 5000 ] ||
    fail "node 0 with another host's MASTER_ADDR: exit $rc after $ms ms, not 2 at once: $(cat "$TMP/notme.err")"
assert_contains "$TMP/notme.err" "node 0's hooprun serves its store on port"
assert_contains "$TMP/notme.err" "MASTER_ADDR must name this host, where node 0's hooprun runs"
MASTER_ADDR=224.0.0.1 MASTER_PORT=$((20000 + RANDOM % 12000)) RANK=0 WORLD_SIZE=2 HOOP_TIMEOUT=20 \
    "${top_builddir:-.}/tools/hoop-smoke" > /dev/null 2> "$TMP/notme0.err"
rc=$?
[ "$rc" = 2 ] || fail "rank 0 with another host's MASTER_ADDR: exit $rc, not 2: $(cat "$TMP/notme0.err")"
assert_contains "$TMP/notme0.err" "MASTER_ADDR must name this host, where rank 0 runs"
# 26. Four nodes, node 2 never started: every node names node 2. The first to time out
# (any of them) exits 1, and the others, reading its exit note first, blamed that node
# ("node 0 (vm)'s hooprun exited with 1; not starting another attempt", wrong for attempt
# 0 as well): the note now carries why it gave up.
port=$((20000 + RANDOM % 12000))
for i in 0 1 3; do
    HOOP_TIMEOUT=3 "$HOOPRUN" --nnodes 4 --node-rank $i --nproc-per-node 1 --master-addr 127.0.0.1 \
        --master-port $port true > /dev/null 2> "$TMP/nocome.$i.err" &
    eval "pn$i=\$!"
done
for i in 0 1 3; do
    eval "wait \$pn$i"
    rc=$?
    [ "$rc" = 1 ] || fail "node $i, whose node 2 never came, exited $rc: $(cat "$TMP/nocome.$i.err")"
    assert_contains "$TMP/nocome.$i.err" "node 2 never came within HOOP_TIMEOUT (3000 ms)"
    assert_contains "$TMP/nocome.$i.err" "not starting the workers"
done
echo "PASS"
