#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_nodes.sh -- --max-restarts with several nodes: the nodes' hoopruns meet
# at MASTER_PORT + 1 (tools/hooprun_agent.c) and start every attempt together.
#
# Two "nodes" on this host: two hoopruns (--nnodes 2 --node-rank 0|1) of 2 shell workers
# each, on 127.0.0.1.
#   1. node 1's rank 3 fails at once in attempt 0 while the other ranks wait (as workers
#      waiting for a rendezvous do): node 0's hooprun learns it from the nodes' store and
#      stops its workers, and both nodes run attempt 1 together, which succeeds. Before,
#      node 1 used up its restarts alone in moments and node 0 waited in attempt 0;
#   2. nodes told different --max-restarts are refused (exit 2), naming the node;
#   3. node 1's hooprun killed: node 0 stops its workers within moments, naming node 1;
#   4. MASTER_PORT 65535 leaves no port for the nodes' store: exit 2.
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
        "$HOOPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 127.0.0.1 \
            --master-port $port --max-restarts "$r0" bash -c "$cmd" \
            > "$TMP/$name.0.out" 2> "$TMP/$name.0.err" &
        p0=$!
        "$HOOPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 127.0.0.1 \
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
        grep -q "Address already in use" "$TMP/$name".[01].err || break
    done
}

# 1. A start-up failure on one node: both start attempt 1 together.
rec='echo "$TORCHELASTIC_RESTART_COUNT $RANK" >> '"$TMP"'/attempts
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0
[ "$RANK" = 3 ] && exit 4
exec sleep 30'
two fail1 2 2 "$rec"
for n in 0 1; do
    [ "$(cat "$TMP/fail1.rc.$n")" = 0 ] ||
        { cat "$TMP/fail1.$n.err"; fail "node $n exited $(cat "$TMP/fail1.rc.$n"), not 0"; }
done
ms=$(cat "$TMP/fail1.ms")
echo "a start-up failure on node 1: both nodes done after attempt 1 within $ms ms"
[ "$ms" -lt 10000 ] || fail "took $ms ms (node 0 waited for workers of a lost attempt?)"
assert_contains "$TMP/fail1.0.err" "hooprun (node 0): attempt failed on node 1 ("
assert_contains "$TMP/fail1.0.err" "): rank 3 exited with code 4; stopping this node's 2 workers"
assert_contains "$TMP/fail1.1.err" "hooprun: restart 1 of 2: starting all 2 workers again"
assert_contains "$TMP/fail1.0.err" "hooprun: restart 1 of 2: starting all 2 workers again"
grep -q "restart 2 of 2" "$TMP"/fail1.[01].err && fail "a second restart: $(cat "$TMP"/fail1.[01].err)"
[ "$(sort "$TMP/attempts" | tr '\n' ,)" = "0 0,0 1,0 2,0 3,1 0,1 1,1 2,1 3," ] ||
    fail "expected attempts 0 and 1 of ranks 0-3 once each: $(sort "$TMP/attempts" | tr '\n' ,)"
# Node 0's workers were stopped for node 1's failure: no summary blames them.
grep -q "first failure" "$TMP/fail1.0.err" && fail "node 0 blamed its own workers: $(cat "$TMP/fail1.0.err")"

# 2. Different --max-restarts: refused on both nodes.
two differ 2 1 'exit 0'
for n in 0 1; do
    [ "$(cat "$TMP/differ.rc.$n")" = 2 ] ||
        { cat "$TMP/differ.$n.err"; fail "node $n exited $(cat "$TMP/differ.rc.$n"), not 2"; }
done
assert_contains "$TMP/differ.0.err" "hooprun (node 0): node 1 ("
assert_contains "$TMP/differ.0.err" ") runs --max-restarts 1 but this node 2: give every node's hooprun the same --max-restarts"
assert_contains "$TMP/differ.1.err" ") runs --max-restarts 2 but this node 1"

# 3. Node 1's hooprun dies: node 0 stops its workers at once and names it.
# (its workers, orphaned, are ended afterwards: sleep 31 alone, not the hoopruns)
TWO_HOOK='sleep 2; kill -KILL $p1'
two lost 2 2 'exec sleep 31'
unset TWO_HOOK
pkill -KILL -f '^sleep 31$' 
rc=$(cat "$TMP/lost.rc.0")
[ "$rc" != 0 ] || fail "node 0 exited 0 after node 1's hooprun died"
ms=$(cat "$TMP/lost.ms")
echo "node 1's hooprun killed 2 s in: node 0 ended within $ms ms of the start (exit $rc)"
[ "$ms" -lt 8000 ] || { cat "$TMP/lost.0.err"; fail "node 0 took $ms ms"; }
assert_contains "$TMP/lost.0.err" "hooprun (node 0): lost the nodes' rendezvous: "
assert_contains "$TMP/lost.0.err" "rank 1 ("

# 4. No port above MASTER_PORT.
"$HOOPRUN" --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 127.0.0.1 \
    --master-port 65535 --max-restarts 1 true 2> "$TMP/e"
[ $? = 2 ] || fail "MASTER_PORT 65535 with restarts on 2 nodes did not exit 2: $(cat "$TMP/e")"
assert_contains "$TMP/e" "MASTER_PORT 65535 leaves no port above it for the nodes' rendezvous"
echo "PASS"
