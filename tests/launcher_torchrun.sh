#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_torchrun.sh -- hooprun with torchrun's habits: its flag spellings
# (--nproc_per_node, --rdzv-endpoint, --standalone, ...), its extra worker variables
# (GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, OMP_NUM_THREADS), --max-restarts (the whole
# group again, with a new rendezvous each time) and --log-dir with --tee.
. "${top_srcdir:-.}/tests/launcher_lib.sh"
SMOKE=${top_builddir:-.}/tools/hoop-smoke

# 1. Spellings: '_' and '-' forms mean the same; --nnodes N:N; --rdzv-endpoint.
want="[rank 5] RANK=5 LOCAL_RANK=1 WORLD_SIZE=8 LOCAL_WORLD_SIZE=4 NODE_RANK=1 MASTER_ADDR=h1 MASTER_PORT=1234"
HOOP_TOKEN=t "$HOOPRUN" --dry-run --nproc_per_node 4 --nnodes 2:2 --node_rank 1 \
    --master_addr h1 --master_port 1234 prog > "$TMP/d1" || fail "'_' spellings refused"
assert_contains "$TMP/d1" "$want"
HOOP_TOKEN=t "$HOOPRUN" --dry-run --nproc-per-node=4 --nnodes=2 --node-rank=1 \
    --master-addr=h1 --master-port=1234 prog > "$TMP/d2" || fail "'-' spellings refused"
cmp -s "$TMP/d1" "$TMP/d2" || fail "'_' and '-' spellings differ: $(diff "$TMP/d1" "$TMP/d2")"
HOOP_TOKEN=t "$HOOPRUN" --dry-run --nproc-per-node 4 --nnodes 2 --node-rank 1 \
    --rdzv-backend c10d --rdzv-id job7 --rdzv-endpoint h1:1234 prog > "$TMP/d3" ||
    fail "--rdzv-endpoint h1:1234 refused"
cmp -s "$TMP/d1" "$TMP/d3" || fail "--rdzv-endpoint differs from --master-addr/--master-port"
HOOP_TOKEN=t "$HOOPRUN" --dry-run --nproc_per_node 1 --nnodes 2 --rdzv_endpoint h2 prog \
    > "$TMP/d4" || fail "--rdzv_endpoint h2 refused"
assert_contains "$TMP/d4" "MASTER_ADDR=h2 MASTER_PORT=29400 " # torchrun's default port
"$HOOPRUN" --dry-run --nproc-per-node 1 --rdzv-endpoint '[::1]:4242' prog > "$TMP/d5" ||
    fail "--rdzv-endpoint [::1]:4242 refused"
assert_contains "$TMP/d5" "MASTER_ADDR=::1 MASTER_PORT=4242 "
# The torchrun variables of the dry run.
assert_contains "$TMP/d1" "GROUP_RANK=1 GROUP_WORLD_SIZE=2 ROLE_RANK=5 ROLE_WORLD_SIZE=8"
# ... all of them, as the workers get them (the restart variables and OMP_NUM_THREADS were
# left out): OMP_NUM_THREADS=1 only with several workers and none set.
env -u OMP_NUM_THREADS "$HOOPRUN" --dry-run --nproc-per-node 2 --max-restarts 3 prog \
    > "$TMP/d8" || fail "dry run with --max-restarts 3"
assert_contains "$TMP/d8" "ROLE_WORLD_SIZE=2 TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=3 OMP_NUM_THREADS=1 HOOP_OMP_DEFAULT=1"
OMP_NUM_THREADS=4 "$HOOPRUN" --dry-run --nproc-per-node 2 prog > "$TMP/d9" || fail "dry run, OMP set"
assert_contains "$TMP/d9" "TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0"
grep -q "OMP_NUM_THREADS\|HOOP_OMP_DEFAULT" "$TMP/d9" && fail "the dry run says hooprun sets OMP_NUM_THREADS: $(cat "$TMP/d9")"
env -u OMP_NUM_THREADS "$HOOPRUN" --dry-run --nproc-per-node 1 prog > "$TMP/d10" || fail "dry run, 1"
grep -q "OMP_NUM_THREADS" "$TMP/d10" && fail "OMP_NUM_THREADS for one worker: $(cat "$TMP/d10")"
# --nproc-per-node auto|cpu: one worker per CPU hooprun may use.
ncpu=$(taskset -c 0 nproc)
taskset -c 0 "$HOOPRUN" --dry-run --nproc-per-node auto prog > "$TMP/d6" || fail "auto refused"
[ "$(grep -c '^\[rank ' "$TMP/d6")" = "$ncpu" ] || fail "--nproc-per-node auto: $(cat "$TMP/d6")"

# --standalone: one node on 127.0.0.1 with a free port, whatever the environment says.
MASTER_ADDR=elsewhere MASTER_PORT=1111 SLURM_JOB_NODELIST='n[1-2]' SLURM_NNODES=2 \
    SLURM_NODEID=1 "$HOOPRUN" --dry-run --standalone --nproc-per-node 2 prog > "$TMP/d7" ||
    fail "--standalone failed"
assert_contains "$TMP/d7" "[rank 1] RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="
grep -q "MASTER_PORT=1111" "$TMP/d7" && fail "--standalone took MASTER_PORT from the environment"

expect_bad "hooprun is not elastic; give one node count" --nnodes 1:4 --nproc-per-node 1 prog
expect_bad "--standalone picks 127.0.0.1 and a free port itself" --standalone \
    --master-port 1234 --nproc-per-node 1 prog
expect_bad "--standalone runs one node" --standalone --nnodes 2 --nproc-per-node 1 prog
expect_bad "--rdzv-endpoint and --master-addr/--master-port say the same thing" \
    --rdzv-endpoint a:1 --master-addr b --nproc-per-node 1 prog
expect_bad "--rdzv-endpoint 'a:b:c': write an IPv6 address as [ADDR]:PORT" \
    --rdzv-endpoint a:b:c --nproc-per-node 1 prog
expect_bad "--rdzv-endpoint's port='x' is not an integer" --rdzv-endpoint a:x \
    --nproc-per-node 1 prog
expect_bad "--rdzv-backend 'etcd'" --rdzv-backend etcd --nproc-per-node 1 prog
expect_bad "--tee copies what --log-dir writes" --tee --nproc-per-node 1 prog
expect_bad "--tee '0:1' is not 0, 1, 2 or 3" --log-dir "$TMP/l0" --tee=0:1 --nproc-per-node 1 prog
expect_bad "--max-restarts=-1 is out of range" --max-restarts -1 --nproc-per-node 1 prog
expect_bad "--nproc-per-node gpu: hooprun does not count GPUs yet" --nproc-per-node gpu prog
# torchrun's --no-python is what hooprun always does: accepted, the same plan. Its flags
# that hooprun lacks are named as such, with the way out (they were "unknown flag").
"$HOOPRUN" --dry-run --no-python --nproc-per-node 1 --master-port 1234 prog > "$TMP/np1" &&
    "$HOOPRUN" --dry-run --nproc-per-node 1 --master-port 1234 prog > "$TMP/np2" ||
    fail "--no-python refused"
cmp -s "$TMP/np1" "$TMP/np2" || fail "--no-python changed the plan: $(diff "$TMP/np1" "$TMP/np2")"
expect_bad "-m is a torchrun flag that hooprun lacks: hooprun runs PROG directly, as torchrun --no-python does: for a module, give python3 -m MODULE ARGS... as PROG" \
    --nproc-per-node 1 -m mod
expect_bad "--run_path is a torchrun flag that hooprun lacks: hooprun runs PROG directly" \
    --nproc-per-node 1 --run_path=x.py prog
expect_bad "--redirects is a torchrun flag that hooprun lacks: --log-dir DIR" --redirects 3 \
    --nproc-per-node 1 prog
expect_bad "-r is a torchrun flag that hooprun lacks: torchrun's -r is --redirects" -r 3 \
    --nproc-per-node 1 prog
expect_bad "--nnodes '1:': give MIN:MAX with both numbers" --nnodes 1: --nproc-per-node 1 prog
expect_bad "--local_ranks_filter is a torchrun flag that hooprun lacks" \
    --local_ranks_filter=0 --nproc-per-node 1 prog
expect_bad "unknown flag '--bogus'" --bogus --nproc-per-node 1 prog

# 2. torchrun's worker variables; OMP_NUM_THREADS=1 with several workers unless set.
show='echo "$RANK g=$GROUP_RANK/$GROUP_WORLD_SIZE r=$ROLE_RANK/$ROLE_WORLD_SIZE restarts=$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS omp=${OMP_NUM_THREADS-unset}"'
# (node 0's hooprun runs too: the nodes' hoopruns meet before their workers start)
HOOP_TOKEN=t "$HOOPRUN" --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 \
    --nproc-per-node 2 true > /dev/null 2>&1 &
HOOP_TOKEN=t "$HOOPRUN" --no-prefix --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 \
    --nproc-per-node 2 bash -c "$show" | sort > "$TMP/v1" || fail "variables run failed"
wait $! || fail "node 0's hooprun failed"
assert_contains "$TMP/v1" "2 g=1/2 r=2/4 restarts=0/0 omp=1"
assert_contains "$TMP/v1" "3 g=1/2 r=3/4 restarts=0/0 omp=1"
OMP_NUM_THREADS=3 "$HOOPRUN" --no-prefix --nproc-per-node 2 bash -c "$show" > "$TMP/v2"
assert_contains "$TMP/v2" "omp=3"
env -u OMP_NUM_THREADS "$HOOPRUN" --no-prefix --nproc-per-node 1 bash -c "$show" > "$TMP/v3"
assert_contains "$TMP/v3" "0 g=0/1 r=0/1 restarts=0/0 omp=unset"

# 3. --max-restarts: attempts 0 and 1 fail (rank 1 exits 4), attempt 2 succeeds. Each
# attempt has its own port (hooprun picked it) and token (carrying the restart count).
# Rank 1 fails once both ranks of its attempt have written their line.
rec='echo "$TORCHELASTIC_RESTART_COUNT $RANK $MASTER_PORT $HOOP_TOKEN" >> '"$TMP"'/attempts
[ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ] || exit 0
for _ in $(seq 200); do
    [ "$(grep -c "^$TORCHELASTIC_RESTART_COUNT " '"$TMP"'/attempts)" -ge 2 ] && break
    sleep 0.05
done
exit 4'
"$HOOPRUN" --max-restarts 3 --nproc-per-node 2 bash -c "$rec" > "$TMP/r.out" 2> "$TMP/r.err"
rc=$?
cat "$TMP/r.err"
[ "$rc" = 0 ] || fail "a run that succeeds on its third attempt gave $rc"
assert_contains "$TMP/r.err" "hooprun: restart 1 of 3: starting all 2 workers again"
assert_contains "$TMP/r.err" "hooprun: restart 2 of 3: starting all 2 workers again"
grep -q "restart 3 of 3" "$TMP/r.err" && fail "a third restart after a success"
[ "$(wc -l < "$TMP/attempts")" = 6 ] || fail "expected 6 worker starts: $(cat "$TMP/attempts")"
[ "$(cut -d' ' -f1,3 "$TMP/attempts" | sort -u | cut -d' ' -f2 | sort -u | wc -l)" = 3 ] ||
    fail "the attempts did not get 3 different ports: $(cat "$TMP/attempts")"
base=$(awk '$1 == 0 {print $4}' "$TMP/attempts" | sort -u)
[ "$(echo "$base" | wc -l)" = 1 ] || fail "attempt 0's workers got different tokens"
for k in 1 2; do
    [ "$(awk -v k=$k '$1 == k {print $4}' "$TMP/attempts" | sort -u)" = "$base-r$k" ] ||
        fail "attempt $k's token is not $base-r$k: $(cat "$TMP/attempts")"
done
# Restarts used up: the failure's code, each attempt's summary, and one last line.
"$HOOPRUN" --max-restarts 1 --nproc-per-node 2 bash -c '[ $RANK = 0 ] && exit 5; sleep 5' \
    > /dev/null 2> "$TMP/r2.err"
rc=$?
[ "$rc" = 5 ] || fail "restarts used up gave $rc, not 5"
[ "$(grep -c 'first failure: rank 0' "$TMP/r2.err")" = 2 ] || fail "expected 2 summaries"
assert_contains "$TMP/r2.err" "hooprun: no restarts left (--max-restarts 1); exiting with 5"
# A real rendezvous on the second attempt, after rank 1 failed before joining the first.
if [ -x "$SMOKE" ]; then
    HOOP_TIMEOUT=20 "$HOOPRUN" --prefix --max-restarts 1 --nproc-per-node 2 bash -c \
        '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ] && exit 1; exec '"$SMOKE" \
        > "$TMP/r3.out" 2> "$TMP/r3.err" || { cat "$TMP/r3.err"; fail "smoke after a restart"; }
    assert_contains "$TMP/r3.out" "[rank 0] smoke: 2 ranks joined, barrier ok, add ok, allgather ok"
fi
# A user's token and port: the port stays, the token carries the count and then, whole,
# this launch's 8 hex digits (one node), within 63 bytes.
long=$(printf 'k%.0s' $(seq 63))
HOOP_TOKEN=$long "$HOOPRUN" --max-restarts 1 --master-port 29777 --nproc-per-node 1 bash -c \
    'echo "$MASTER_PORT $HOOP_TOKEN" >> '"$TMP"'/tok; exit 1' 2> "$TMP/tok.err"
sed -n 1p "$TMP/tok" | grep -qxE '29777 k{54}-[0-9a-f]{8}' ||
    fail "attempt 0: $(sed -n 1p "$TMP/tok")"
launch=$(sed -n 1p "$TMP/tok" | cut -c61-)
[ "$(sed -n 2p "$TMP/tok")" = "29777 $(printf 'k%.0s' $(seq 51))-r1$launch" ] ||
    fail "attempt 1: $(sed -n 2p "$TMP/tok") (the launch's bits must stay whole: $launch)"

# 4. --log-dir: each rank's output, as written, in DIR/rank_N.log; nothing on the terminal
# unless --tee; restarts get their own files; a failure points to its file.
talk='echo "out $RANK"; echo "err $RANK" >&2; printf "bar\r" >&2; echo "done $RANK"'
"$HOOPRUN" --log-dir "$TMP/logs/a/b" --nproc-per-node 2 bash -c "$talk" > "$TMP/l.out" \
    2> "$TMP/l.err" || fail "--log-dir run failed"
[ -s "$TMP/l.out" ] || [ -s "$TMP/l.err" ] && fail "--log-dir without --tee printed: $(cat "$TMP/l.out" "$TMP/l.err")"
for r in 0 1; do
    f="$TMP/logs/a/b/rank_$r.log"
    # Both streams, no prefix; their order is not defined, so compare the pieces.
    [ "$(tr '\r' '\n' < "$f" | sort | tr '\n' ,)" = "bar,done $r,err $r,out $r," ] ||
        fail "$f holds: $(od -c "$f")"
    grep -q "$(printf 'bar\r')" "$f" || fail "$f lost the '\\r' of 'bar'"
done
"$HOOPRUN" --prefix --log-dir "$TMP/logs/t" --tee --nproc-per-node 2 bash -c "$talk" > "$TMP/t.out" \
    2> "$TMP/t.err" || fail "--tee run failed"
assert_contains "$TMP/t.out" "[rank 1] out 1"
assert_contains "$TMP/t.err" "[rank 0] err 0"
assert_contains "$TMP/logs/t/rank_1.log" "out 1"
"$HOOPRUN" --prefix --log-dir "$TMP/logs/t1" --tee 1 --nproc-per-node 1 bash -c "$talk" > "$TMP/t1.out" \
    2> "$TMP/t1.err" || fail "--tee 1 run failed"
assert_contains "$TMP/t1.out" "[rank 0] out 0"
[ -s "$TMP/t1.err" ] && fail "--tee 1 showed stderr: $(cat "$TMP/t1.err")"
# torchrun's -t is --tee (it said "unknown flag '-t'")
"$HOOPRUN" --prefix --log-dir "$TMP/logs/t2" -t 2 --nproc-per-node 1 bash -c "$talk" > "$TMP/t2.out" \
    2> "$TMP/t2.err" || fail "-t 2 run failed: $(cat "$TMP/t2.err")"
assert_contains "$TMP/t2.err" "[rank 0] err 0"
[ -s "$TMP/t2.out" ] && fail "-t 2 showed stdout: $(cat "$TMP/t2.out")"
"$HOOPRUN" --log-dir "$TMP/logs/r" --max-restarts 1 --nproc-per-node 1 bash -c \
    'echo "attempt $TORCHELASTIC_RESTART_COUNT"; echo "gives up" >&2; exit 3' 2> "$TMP/lr.err"
# (stdout and stderr lines that hooprun reads in one go are written stderr first)
[ "$(sort "$TMP/logs/r/rank_0.log" | tr '\n' ,)" = "attempt 0,gives up," ] ||
    fail "rank_0.log: $(cat "$TMP/logs/r/rank_0.log")"
[ "$(sort "$TMP/logs/r/rank_0.restart_1.log" | tr '\n' ,)" = "attempt 1,gives up," ] ||
    fail "rank_0.restart_1.log: $(cat "$TMP/logs/r/rank_0.restart_1.log")"
assert_contains "$TMP/lr.err" "message: gives up" # the summary still has the message
assert_contains "$TMP/lr.err" "its output: $TMP/logs/r/rank_0.restart_1.log"
touch "$TMP/notadir"
expect_bad "--log-dir $TMP/notadir/x: cannot create $TMP/notadir/x" --log-dir "$TMP/notadir/x" \
    --nproc-per-node 1 true
echo "PASS"
