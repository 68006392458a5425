#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_env.sh -- what each worker sees (env contract, token, free port), output
# prefixing and line buffering, --dry-run, and Slurm emulation through SLURM_* variables.
. "${top_srcdir:-.}/tests/launcher_lib.sh"

show='echo "RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE NODE_RANK=$NODE_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT HOOP_TOKEN=$HOOP_TOKEN"'

# 1. One node, 4 workers: ranks 0..3, loopback master, one free port, one fresh token.
"$HOOPRUN" --no-prefix --nproc-per-node 4 bash -c "$show" | sort > "$TMP/one" ||
    fail "hooprun --nproc-per-node 4 failed"
[ "$(wc -l < "$TMP/one")" = 4 ] || fail "expected 4 lines: $(cat "$TMP/one")"
port=$(sed -n 's/.*MASTER_PORT=\([0-9]*\).*/\1/p' "$TMP/one" | sort -u)
token=$(sed -n 's/.*HOOP_TOKEN=\(.*\)$/\1/p' "$TMP/one" | sort -u)
[ "$(echo "$port" | wc -l)" = 1 ] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] ||
    fail "workers disagree on MASTER_PORT or it is bad: $port"
[ "$(echo "$token" | wc -l)" = 1 ] || fail "workers got different tokens"
echo "$token" | grep -qE '^[0-9a-f]{32}$' || fail "HOOP_TOKEN '$token' is not 32 hex digits"
for r in 0 1 2 3; do
    assert_contains "$TMP/one" "RANK=$r LOCAL_RANK=$r WORLD_SIZE=4 LOCAL_WORLD_SIZE=4 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port HOOP_TOKEN=$token"
done
token2=$("$HOOPRUN" --no-prefix --nproc-per-node 1 bash -c 'echo $HOOP_TOKEN')
[ "$token2" != "$token" ] || fail "two runs generated the same token"
# One node with HOOP_TOKEN exported: every worker gets it with this launch's 8 hex digits
# after it, another launch other digits (two jobs given one port and token must not join
# each other); a 63-character token gives way at its end.
HOOP_TOKEN=feedbeef "$HOOPRUN" --no-prefix --nproc-per-node 2 bash -c 'echo $HOOP_TOKEN' \
    > "$TMP/tok1" || fail "one node with HOOP_TOKEN failed"
t1=$(sort -u "$TMP/tok1")
echo "$t1" | grep -qxE 'feedbeef-[0-9a-f]{8}' || fail "workers got '$t1', not feedbeef-XXXXXXXX"
t2=$(HOOP_TOKEN=feedbeef "$HOOPRUN" --no-prefix --nproc-per-node 1 bash -c 'echo $HOOP_TOKEN')
[ "$t2" != "$t1" ] || fail "two launches with one HOOP_TOKEN gave their workers the same"
t3=$(HOOP_TOKEN=$(printf 'y%.0s' $(seq 63)) "$HOOPRUN" --no-prefix --nproc-per-node 1 \
    bash -c 'echo $HOOP_TOKEN')
echo "$t3" | grep -qxE 'y{54}-[0-9a-f]{8}' || fail "a 63-character token became '$t3'"

# 2. Second node of two: ranks 4..7 and the given master and token. (Node 0's hooprun
# runs too: the nodes' hoopruns meet before their workers start, tests/launcher_nodes.sh.)
HOOP_TOKEN=feedbeef "$HOOPRUN" --nnodes 2 --node-rank 0 --nproc-per-node 4 \
    --master-addr 127.0.0.1 --master-port 29555 true > /dev/null 2>&1 &
HOOP_TOKEN=feedbeef "$HOOPRUN" --no-prefix --nnodes 2 --node-rank 1 --nproc-per-node 4 \
    --master-addr 127.0.0.1 --master-port 29555 bash -c "$show" | sort > "$TMP/two" ||
    fail "hooprun --nnodes 2 --node-rank 1 failed"
wait $! || fail "node 0's hooprun failed"
for lr in 0 1 2 3; do
    assert_contains "$TMP/two" "RANK=$((4 + lr)) LOCAL_RANK=$lr WORLD_SIZE=8 LOCAL_WORLD_SIZE=4 NODE_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 HOOP_TOKEN=feedbeef"
done
[ "$(wc -l < "$TMP/two")" = 4 ] || fail "expected 4 lines for node 1"

# 3. The reserved port is free for rank 0's server (bind with SO_REUSEADDR + listen).
if command -v python3 > /dev/null; then
    "$HOOPRUN" --prefix --nproc-per-node 2 python3 -c '
import os, socket
if os.environ["RANK"] == "0":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))); s.listen(1)
    print("bound", os.environ["MASTER_PORT"])' > "$TMP/bind" 2>&1 ||
        { cat "$TMP/bind"; fail "rank 0 could not listen on the port hooprun picked"; }
    assert_contains "$TMP/bind" "[rank 0] bound "
else
    echo "note: python3 missing; skipped the bind check of the reserved port"
fi

# 4. Prefixes: stdout and stderr stay apart, partial lines are joined and flushed at exit.
"$HOOPRUN" --prefix --nproc-per-node 2 bash -c \
    'echo out-$RANK; echo err-$RANK >&2; printf "ab"; sleep 0.2; echo "cd"; printf "tail-$RANK"' \
    > "$TMP/p.out" 2> "$TMP/p.err" || fail "prefix run failed"
for r in 0 1; do
    assert_contains "$TMP/p.out" "[rank $r] out-$r"
    assert_contains "$TMP/p.out" "[rank $r] abcd"
    assert_contains "$TMP/p.out" "[rank $r] tail-$r"
    assert_contains "$TMP/p.err" "[rank $r] err-$r"
done
grep -q err "$TMP/p.out" && fail "stderr lines leaked into stdout"
[ "$(wc -l < "$TMP/p.out")" = 6 ] || fail "expected 6 stdout lines, got: $(cat "$TMP/p.out")"
"$HOOPRUN" --no-prefix --nproc-per-node 1 bash -c 'echo plain; printf tail' > "$TMP/np" ||
    fail "--no-prefix run failed"
[ "$(cat "$TMP/np")" = "$(printf 'plain\ntail')" ] || fail "--no-prefix changed the output"

# 4b. A progress line redrawn with '\r' (hoop-train's bar) goes out as soon as its '\r'
# arrives, prefixed and still ending in '\r', while the worker runs on; "\r\n" ends a
# line without a second prefix.
: > "$TMP/cr.err"
"$HOOPRUN" --prefix --nproc-per-node 1 bash -c 'printf "step 1\r" >&2; printf "step 2\r" >&2
    for _ in $(seq 200); do [ -e '"$TMP"'/seen ] && break; sleep 0.05; done
    printf "done\r\n" >&2; printf "a\rb\n" >&2' > "$TMP/cr.out" 2> "$TMP/cr.err" &
crpid=$!
want=$(printf '[rank 0] step 1\r[rank 0] step 2\r')
for _ in $(seq 100); do [ "$(cat "$TMP/cr.err")" = "$want" ] && break; sleep 0.05; done
[ "$(cat "$TMP/cr.err")" = "$want" ] ||
    { touch "$TMP/seen"; fail "no progress line while the worker ran: $(od -c "$TMP/cr.err")"; }
touch "$TMP/seen"
wait $crpid || fail "the progress-line worker failed"
[ "$(cat "$TMP/cr.err")" = "$want$(printf '[rank 0] done\r\n[rank 0] a\r[rank 0] b')" ] ||
    fail "progress lines came out as: $(od -c "$TMP/cr.err")"

# 5. --dry-run prints what each worker gets and starts nothing.
"$HOOPRUN" --dry-run --nproc-per-node 2 --master-port 29601 touch "$TMP/ran" > "$TMP/dry" ||
    fail "--dry-run failed"
[ -e "$TMP/ran" ] && fail "--dry-run started a worker"
assert_contains "$TMP/dry" "[rank 1] RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29601 HOOP_TOKEN=(generated"
assert_contains "$TMP/dry" "command: touch $TMP/ran"

# 6. Slurm emulation: node 2 of gpu-node-[07-09]; the master is the first host.
slurm() {
    SLURM_JOB_NODELIST='gpu-node-[07-09]' SLURM_NNODES=3 SLURM_NODEID=2 HOOP_TOKEN=t "$@"
}
slurm "$HOOPRUN" --dry-run --nproc-per-node 2 prog > "$TMP/s1" || fail "Slurm dry run failed"
assert_contains "$TMP/s1" "[rank 4] RANK=4 LOCAL_RANK=0 WORLD_SIZE=6 LOCAL_WORLD_SIZE=2 NODE_RANK=2 MASTER_ADDR=gpu-node-07 MASTER_PORT=29500"
assert_contains "$TMP/s1" "[rank 5] RANK=5 LOCAL_RANK=1 WORLD_SIZE=6"
MASTER_PORT=1234 slurm "$HOOPRUN" --dry-run --nproc-per-node 2 prog > "$TMP/s2"
assert_contains "$TMP/s2" "MASTER_ADDR=gpu-node-07 MASTER_PORT=1234"
MASTER_PORT=1234 slurm "$HOOPRUN" --dry-run --nproc-per-node 2 --master-port 4321 \
    --master-addr 127.0.0.1 --nnodes 4 --node-rank 3 prog > "$TMP/s3"
assert_contains "$TMP/s3" "[rank 6] RANK=6 LOCAL_RANK=0 WORLD_SIZE=8 LOCAL_WORLD_SIZE=2 NODE_RANK=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=4321"
SLURM_JOB_NODELIST='n[3-1]' SLURM_NNODES=2 SLURM_NODEID=0 HOOP_TOKEN=t \
    "$HOOPRUN" --dry-run --nproc-per-node 1 prog 2> "$TMP/s4"
[ $? = 2 ] || fail "a malformed SLURM_JOB_NODELIST did not give exit 2"
assert_contains "$TMP/s4" "SLURM_JOB_NODELIST: node list 'n[3-1]' is malformed"
SLURM_JOB_NODELIST='n1' SLURM_NNODES=1 SLURM_NODEID=x "$HOOPRUN" --dry-run --nproc-per-node 1 \
    prog 2> "$TMP/s5"
[ $? = 2 ] || fail "SLURM_NODEID=x did not give exit 2"
assert_contains "$TMP/s5" "SLURM_NODEID='x' is not an integer"
# A value Slurm gave is named as Slurm's, not as a flag nobody typed; a flag as a flag.
SLURM_JOB_NODELIST='n[1-2]' SLURM_NNODES=2 SLURM_NODEID=3 HOOP_TOKEN=t expect_bad \
    "hooprun: SLURM_NODEID=3 is not in [0, 1] (SLURM_NNODES=2)" --dry-run --nproc-per-node 1 prog
grep -q -- "--node-rank" "$TMP/err" && fail "SLURM_NODEID was called --node-rank: $(cat "$TMP/err")"
SLURM_JOB_NODELIST='n[1-2]' SLURM_NNODES=2 SLURM_NODEID=0 HOOP_TOKEN=t expect_bad \
    "hooprun: --node-rank 5 is not in [0, 1] (SLURM_NNODES=2)" --dry-run --node-rank 5 \
    --nproc-per-node 1 prog
SLURM_JOB_NODELIST='n[1-2]' SLURM_NNODES=2 SLURM_NODEID=0 expect_bad \
    "HOOP_TOKEN must be exported with SLURM_NNODES=2" --nproc-per-node 1 prog
# A several-host node list without SLURM_NODEID (hooprun started outside srun) would make
# every node node 0: refused, unless --node-rank says which node this is.
(unset SLURM_NODEID
SLURM_JOB_NODELIST='n[1-2]' SLURM_NNODES=2 HOOP_TOKEN=t expect_bad \
    "hooprun: SLURM_JOB_NODELIST names 2 hosts but SLURM_NODEID is not set" --dry-run \
    --nproc-per-node 1 prog
SLURM_JOB_NODELIST='n[1-2]' SLURM_NNODES=2 SLURM_NODEID= HOOP_TOKEN=t expect_bad \
    "but SLURM_NODEID is empty, so this node's index is unknown" --dry-run --nproc-per-node 1 prog
SLURM_JOB_NODELIST='n[1-2]' SLURM_NNODES=2 HOOP_TOKEN=t "$HOOPRUN" --dry-run --node-rank 1 \
    --nproc-per-node 1 prog > "$TMP/s6" 2>&1 ||
    fail "--node-rank without SLURM_NODEID was refused: $(cat "$TMP/s6")") || exit 1
# SLURM_NNODES that disagrees with the node list is refused, naming both; inside an srun
# step the step's list is the one counted (and gives the master).
SLURM_JOB_NODELIST='n[1-2]' SLURM_NNODES=3 SLURM_NODEID=0 HOOP_TOKEN=t expect_bad \
    "hooprun: SLURM_NNODES=3 but SLURM_JOB_NODELIST='n[1-2]' names 2 hosts" --dry-run \
    --nproc-per-node 1 prog
SLURM_JOB_NODELIST='n1' SLURM_NNODES=2 SLURM_NODEID=0 HOOP_TOKEN=t expect_bad \
    "hooprun: SLURM_NNODES=2 but SLURM_JOB_NODELIST='n1' names 1 host;" --dry-run \
    --nproc-per-node 1 prog
SLURM_JOB_NODELIST='n[1-4]' SLURM_STEP_NODELIST='n[3-4]' SLURM_NNODES=2 SLURM_NODEID=1 \
    HOOP_TOKEN=t "$HOOPRUN" --dry-run --nproc-per-node 1 prog > "$TMP/s7" 2>&1 ||
    fail "a 2-node step of a 4-node job was refused: $(cat "$TMP/s7")"
assert_contains "$TMP/s7" "[rank 1] RANK=1 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 NODE_RANK=1 MASTER_ADDR=n3 "
# Slurm's node count or node id without a node list (a wrapper that kept only some of
# Slurm's variables) is refused: ignored, it would make every node a one-node job on
# 127.0.0.1. Flags that override them, and a one-node count, still run.
(unset SLURM_JOB_NODELIST SLURM_STEP_NODELIST
SLURM_NNODES=2 SLURM_NODEID=1 HOOP_TOKEN=t expect_bad \
    "hooprun: SLURM_NNODES=2 is set but neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is" \
    --dry-run --nproc-per-node 1 prog
SLURM_NODEID=1 HOOP_TOKEN=t expect_bad "hooprun: SLURM_NODEID=1 is set but neither" \
    --dry-run --nproc-per-node 1 prog
SLURM_NNODES=2 SLURM_NODEID=1 HOOP_TOKEN=t "$HOOPRUN" --dry-run --nnodes 2 --node-rank 1 \
    --master-addr n1 --nproc-per-node 1 prog > "$TMP/s8" 2>&1 ||
    fail "flags over a partial Slurm environment were refused: $(cat "$TMP/s8")"
assert_contains "$TMP/s8" "[rank 1] RANK=1 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1 NODE_RANK=1 MASTER_ADDR=n1 "
SLURM_NNODES=1 SLURM_NODEID=0 "$HOOPRUN" --dry-run --nproc-per-node 1 prog > "$TMP/s9" 2>&1 ||
    fail "SLURM_NNODES=1 without a node list was refused: $(cat "$TMP/s9")") || exit 1

# 6. --bind core (the default): each worker runs on its own block of hooprun's CPUs and
# is told which (HOOP_CPU_BIND = its Cpus_allowed_list); --bind none and more workers
# than CPUs leave everyone on all of them.
ncpu=$(nproc)
mine=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
cpus='echo "$LOCAL_RANK ${HOOP_CPU_BIND:-none} $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"'
if [ "$ncpu" -ge 2 ]; then
    "$HOOPRUN" --no-prefix --nproc-per-node 2 bash -c "$cpus" | sort > "$TMP/b1" ||
        fail "hooprun --nproc-per-node 2 (bound) failed"
    while read -r lr said allowed; do
        [ "$said" = "$allowed" ] || fail "rank $lr: HOOP_CPU_BIND=$said but allowed $allowed"
        [ "$allowed" != "$mine" ] || fail "rank $lr was not bound ($allowed)"
    done < "$TMP/b1"
    [ "$(cut -d' ' -f3 "$TMP/b1" | sort -u | wc -l)" = 2 ] || fail "workers share CPUs: $(cat "$TMP/b1")"
fi
"$HOOPRUN" --no-prefix --bind none --nproc-per-node 2 bash -c "$cpus" | sort > "$TMP/b2"
assert_contains "$TMP/b2" "0 none $mine"
"$HOOPRUN" --no-prefix --nproc-per-node $((ncpu + 1)) bash -c "$cpus" | sort > "$TMP/b3"
assert_contains "$TMP/b3" "0 none $mine"
# Binding stays inside hooprun's own CPUs (taskset, Slurm), and a HOOP_CPU_BIND from
# outside never reaches a worker that hooprun did not bind.
last=$(echo "$mine" | tr ',' '\n' | tail -1 | sed 's/.*-//')
taskset -c "$last" "$HOOPRUN" --no-prefix --nproc-per-node 1 bash -c "$cpus" > "$TMP/b5"
assert_contains "$TMP/b5" "0 $last $last"
if [ "$ncpu" -ge 2 ]; then
    taskset -c "$last" "$HOOPRUN" --no-prefix --nproc-per-node 2 bash -c "$cpus" | sort > "$TMP/b6"
    assert_contains "$TMP/b6" "1 none $last"
fi
HOOP_CPU_BIND=0-99 "$HOOPRUN" --no-prefix --bind none --nproc-per-node 1 bash -c "$cpus" > "$TMP/b7"
assert_contains "$TMP/b7" "0 none $mine"
"$HOOPRUN" --bind sockets --nproc-per-node 1 true 2> "$TMP/b4"
[ $? = 2 ] || fail "--bind sockets did not give exit 2"
assert_contains "$TMP/b4" "--bind 'sockets' is not core or none"

# 7. Settings a worker would refuse are refused by hooprun first: exit 2, one line.
HOOP_SHM_BYTES=100000 "$HOOPRUN" --nproc-per-node 1 true 2> "$TMP/e1"
[ $? = 2 ] || fail "HOOP_SHM_BYTES=100000 did not give exit 2"
assert_contains "$TMP/e1" "HOOP_SHM_BYTES=100000 is not a power of two"
[ "$(wc -l < "$TMP/e1")" = 1 ] || fail "more than one line: $(cat "$TMP/e1")"
HOOP_IB_TIMEOUT=40 "$HOOPRUN" --nproc-per-node 1 true 2> "$TMP/e3"
[ $? = 2 ] || fail "HOOP_IB_TIMEOUT=40 did not give exit 2"
assert_contains "$TMP/e3" "HOOP_IB_TIMEOUT=40 is out of range [1, 31]"
HOOP_IB_HCA="mlx5_0:x" "$HOOPRUN" --nproc-per-node 1 true 2> "$TMP/e4"
[ $? = 2 ] || fail "HOOP_IB_HCA=mlx5_0:x did not give exit 2"
assert_contains "$TMP/e4" "HOOP_IB_HCA='mlx5_0:x': entry 'mlx5_0:x' has a bad port 'x'"
[ "$(wc -l < "$TMP/e4")" = 1 ] || fail "more than one line: $(cat "$TMP/e4")"
# A message that starts with the setting keeps it (hooprun once cut it as a file:line).
HOOP_DEBUG_SUBSYS=BOGUS "$HOOPRUN" --nproc-per-node 1 true 2> "$TMP/e5"
[ $? = 2 ] || fail "HOOP_DEBUG_SUBSYS=BOGUS did not give exit 2"
assert_contains "$TMP/e5" "HOOP_DEBUG_SUBSYS='BOGUS': 'BOGUS' is not a subsystem"
# A HOOP_TEST_FAULT rank outside the job would never fire: refused (rank 1 of 2 is in).
HOOP_TEST_FAULT=2:connect:0:KILL "$HOOPRUN" --nproc-per-node 2 true 2> "$TMP/e6"
[ $? = 2 ] || fail "HOOP_TEST_FAULT for rank 2 of 2 did not give exit 2"
assert_contains "$TMP/e6" "HOOP_TEST_FAULT='2:connect:0:KILL': rank 2 is outside the job (world_size 2, ranks 0..1)"
HOOP_TEST_FAULT=1:connect:0:KILL "$HOOPRUN" --nproc-per-node 2 true 2> "$TMP/e7" ||
    fail "HOOP_TEST_FAULT for rank 1 of 2 was refused: $(cat "$TMP/e7")"
# HOOP_TRANSPORT=ib is a valid setting (whether this host can run it is the worker's
# communicator's business): hooprun lets it through.
HOOP_TRANSPORT=ib "$HOOPRUN" --nproc-per-node 1 true 2> "$TMP/e2" ||
    fail "HOOP_TRANSPORT=ib was refused: $(cat "$TMP/e2")"

# A worker holds no descriptor of hooprun's beyond stdin, stdout and stderr: only what
# hooprun itself inherited (a /dev/null that hooprun opened for the worker's stdin was
# left open in it, at another number).
mine=" $(ls /proc/$$/fd | tr '\n' ' ')"
for prefix in "" --prefix; do
    theirs=$("$HOOPRUN" --nproc-per-node 1 $prefix ls /proc/self/fd | sed 's/^\[rank 0\] //')
    for fd in $theirs; do
        case "$mine" in *" $fd "*) continue ;; esac
        [ "$fd" = 3 ] && continue # ls's own, reading the directory
        fail "a worker ${prefix:+($prefix) }holds fd $fd ($(readlink "/proc/$$/fd/$fd" 2> /dev/null)), which hooprun was not given: $(echo $theirs)"
    done
done
# hooprun started with stdin and stdout closed: its guard's pipe took fd 0 and the guard,
# given /dev/null there, refused to start ("--guard-of is hooprun's own ...").
"$HOOPRUN" --nproc-per-node 1 sh -c 'echo hi >&2' 0<&- >&- 2> "$TMP/closed.err" ||
    fail "hooprun with stdin and stdout closed failed: $(cat "$TMP/closed.err")"
[ "$(cat "$TMP/closed.err")" = hi ] || fail "hooprun with stdin and stdout closed: $(cat "$TMP/closed.err")"
echo "PASS"
