#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/ddp_train.sh -- hoop-train under hooprun: DDP training, silent workers,
# checkpoint/resume equivalence (after an epoch, and after SIGUSR1 mid-epoch sent to
# hooprun or to rank 1 alone), the Chrome trace, errors with exit code 2, and --device
# cuda (on the host execution layer's CUDA backend under make check) against the cpu,
# checkpoints crossing devices both ways.
#
# Needs the real Fashion-MNIST (Debian's dataset-fashion-mnist); skips (77) without it.
set -u
. "${top_srcdir:-.}/tests/train_lib.sh"
build=${top_builddir:-.}
train=$build/tools/hoop-train
run="$build/tools/hooprun --prefix --nproc-per-node 2 $train"
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || {
    echo "SKIP: Fashion-MNIST not installed ($data)"
    exit 77
}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
small="--train-limit 3000 --epochs 3 --threads 1 --progress plain --log-every 0"
bad() {
    echo "FAIL: $*"
    fail=1
}
# wrap: hoop-train with $RANK1_FLAGS added on rank 1 only (flags that differ per rank).
cat >"$tmp/wrap" <<EOF
#!/bin/sh
[ "\$RANK" = 1 ] && exec "$train" "\$@" \$RANK1_FLAGS
exec "$train" "\$@"
EOF
chmod +x "$tmp/wrap"

# 1. Two workers train; only rank 0 speaks; metrics carry world_size 2.
# shellcheck disable=SC2086
$run $small --log-every 5 --metrics "$tmp/m.jsonl" >"$tmp/out" 2>&1 || bad "2-worker training exited $?"
grep -q "^\[rank 1\]" "$tmp/out" && bad "rank 1 printed: $(grep '^\[rank 1\]' "$tmp/out")"
grep -q '^\[rank 0\] epoch 3/3 .*test_acc' "$tmp/out" || bad "no epoch 3 line: $(cat "$tmp/out")"
[ "$(grep -c '"world_size":2' "$tmp/m.jsonl")" = 3 ] || bad "metrics: $(cat "$tmp/m.jsonl")"
acc=$(sed -n 's/.*"test_acc":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl" | tail -1)
awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }' || bad "test accuracy $acc after 3 small epochs"
echo "ok: 2 workers, silent rank 1, final test_acc $acc"

# 2. Interrupted after epoch 1 and resumed == uninterrupted, byte for byte.
# shellcheck disable=SC2086
$run $small --checkpoint "$tmp/a.ckpt" --metrics "$tmp/a.jsonl" >/dev/null 2>&1 ||
    bad "uninterrupted run failed"
# shellcheck disable=SC2086
$run $small --checkpoint "$tmp/b.ckpt" --exit-after-epoch 1 >/dev/null 2>&1 ||
    bad "interrupted run failed"
# shellcheck disable=SC2086
$run $small --checkpoint "$tmp/b.ckpt" --resume >"$tmp/resume" 2>&1 || bad "resume failed"
grep -q "resumed from .* after epoch 1" "$tmp/resume" || bad "no resume line: $(cat "$tmp/resume")"
cmp -s "$tmp/a.ckpt" "$tmp/b.ckpt" || bad "resumed checkpoint differs from the uninterrupted one"
echo "ok: checkpoint after interrupt + resume is identical to the uninterrupted run"

# A resume on another number of ranks needs the same global batch (world_size x
# --batch-size): with --batch-size unchanged it is refused with exit 2 and the batch that
# would do; with it, 1 rank x 256 goes on from 2 x 128's epoch-1 checkpoint as the
# uninterrupted 2-rank run did (the same global batches: train_dist.c): its last epoch's
# losses agree to 1e-4 (they differ only in the order of float sums).
# shellcheck disable=SC2086
$train $small --checkpoint "$tmp/a.ckpt" --resume >"$tmp/ws" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "written with world_size 2 x --batch-size 128, a global batch of 256; this run has 1 x 128 = 128 .*; on 1 rank pass --batch-size 256)" "$tmp/ws" ||
    bad "world_size check: rc=$rc $(cat "$tmp/ws")"
# shellcheck disable=SC2086
$run $small --checkpoint "$tmp/c.ckpt" --exit-after-epoch 1 >/dev/null 2>&1 || bad "interrupted run failed"
# shellcheck disable=SC2086
$train $small --batch-size 256 --checkpoint "$tmp/c.ckpt" --resume --metrics "$tmp/c.jsonl" \
    >"$tmp/ws1" 2>&1 || bad "resume on 1 rank x 256 failed: $(cat "$tmp/ws1")"
grep -q "c.ckpt was written by 2 ranks x --batch-size 128; this run has 1 x 256, the same global batch of 256" "$tmp/ws1" ||
    bad "no line about the new split: $(cat "$tmp/ws1")"
loss_of() { sed -n 's/.*"epoch":3,.*"train_loss":\([0-9.]*\),"test_loss":\([0-9.]*\).*/\1 \2/p' "$1"; }
a=$(loss_of "$tmp/a.jsonl")
c=$(loss_of "$tmp/c.jsonl")
echo "$a $c" | awk '{ for (i = 1; i <= 2; i++) { d = $i - $(i + 2); if (d < 0) d = -d; if (d > 1e-4 * $i || $i == "") exit 1 } }' &&
    [ -n "$c" ] || bad "epoch 3 after a resume on 1 rank: train/test loss $c, uninterrupted 2 ranks $a"
echo "ok: a 2 x 128 run resumed on 1 x 256: epoch-3 losses $c, uninterrupted $a"
# So is one with another --train-limit, at an epoch boundary too (its steps per epoch, and
# the learning-rate schedule with them, would change: lr 0 for the rest of the run).
# shellcheck disable=SC2086
$run $small --train-limit 2000 --epochs 4 --checkpoint "$tmp/a.ckpt" --resume >"$tmp/tl" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "trained on 3000 samples per epoch; this run has 2000 (--train-limit)" "$tmp/tl" ||
    bad "train-limit check: rc=$rc $(cat "$tmp/tl")"

# 2b. Preempted mid-epoch by SIGUSR1 (Slurm's --signal), resumed == uninterrupted. First
# sent to hooprun, which forwards it to every worker; then to rank 1 alone: rank 0 never
# sees a signal and still stops after the same step and saves (the ranks agree).
small_data "$tmp/data" || exit 1
pre="--data $tmp/data --train-limit 12000 --epochs 2 --threads 1 --progress plain --log-every 8"
# What may differ between ranks (where they write, how they show progress) does.
# shellcheck disable=SC2086
RANK1_FLAGS="--progress bar --log-every 3 --threads 1 --cuda-graph off --metrics $tmp/r1.jsonl" \
    $build/tools/hooprun --nproc-per-node 2 "$tmp/wrap" --data "$tmp/data" --threads 1 \
    --train-limit 1024 --epochs 1 >"$tmp/ag" 2>&1 ||
    bad "rank 1 with output flags of its own: exit $?: $(cat "$tmp/ag")"
# shellcheck disable=SC2086
$run $pre --checkpoint "$tmp/u.ckpt" >"$tmp/u.out" 2>&1 || bad "uninterrupted run failed: $(cat "$tmp/u.out")"
# rank_pid HOOPRUN_PID RANK: the worker of that rank (from its environment).
rank_pid() {
    for p in $(pgrep -P "$1"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" && echo "$p"
    done
}
for target in hooprun rank1; do
    was=$fail
    fail=0
    # shellcheck disable=SC2086
    $run $pre --checkpoint "$tmp/$target.ckpt" >"$tmp/$target.out" 2>&1 &
    pid=$!
    wait_for "$tmp/$target.out" "step 8/47" $pid
    if [ $target = hooprun ]; then kill -USR1 $pid; else kill -USR1 "$(rank_pid $pid 1)"; fi
    wait $pid
    rc=$?
    line=$(grep "preempted" "$tmp/$target.out")
    # The stop lands at the first step boundary the ranks agree on after the signal: an
    # epoch here lasts a fraction of a second, so under load that may be in epoch 2 (the
    # saved step then counts epoch 1's 47 too), or, once in 47, on epoch 1's last step
    # (an epoch-end resume); what must hold is the stop, once, and the same checkpoint.
    # (sent to rank 1 alone, the line names it: rank 0 got no signal)
    who=""
    [ $target = rank1 ] && who=" to rank 1"
    at=$(echo "$line" | sed -n "s|^\[rank 0\] hoop-train: preempted (SIGUSR1$who) at epoch [12] step \([0-9]*\)/47; saved .*$target.ckpt (step [0-9]*)$|\1|p")
    [ -n "$at" ] && [ "$at" -le 47 ] && [ $rc = 138 ] && [ "$(grep -c preempted "$tmp/$target.out")" = 1 ] ||
        bad "SIGUSR1 to $target: exit $rc (want 138): $(cat "$tmp/$target.out")"
    # Forwarded by hooprun, or sent to a worker, the workers' 138 is a stop, not a failure.
    grep -q "hooprun: the workers stopped on User defined signal 1 as asked (exit 138)" \
        "$tmp/$target.out" && ! grep -q "first failure\|stopping the other" "$tmp/$target.out" ||
        bad "hooprun reported the SIGUSR1 stop ($target) as a failure: $(cat "$tmp/$target.out")"
    # shellcheck disable=SC2086
    $run $pre --checkpoint "$tmp/$target.ckpt" --resume >"$tmp/$target.res" 2>&1 ||
        bad "resume after SIGUSR1 to $target failed: $(cat "$tmp/$target.res")"
    grep -Eq "resumed from .* (in epoch [12] after batch [0-9]+ |after epoch 1)" "$tmp/$target.res" ||
        bad "no mid-epoch resume line: $(cat "$tmp/$target.res")"
    cmp -s "$tmp/u.ckpt" "$tmp/$target.ckpt" ||
        bad "SIGUSR1 to $target: the resumed checkpoint differs from the uninterrupted one"
    [ $fail = 0 ] && echo "ok: SIGUSR1 to $target mid-epoch: ${line#*] }; resumed to the same checkpoint"
    [ $was = 0 ] || fail=1
done

# 3. The trace: both ranks, a bucket all-reduce starting before backward ends.
# shellcheck disable=SC2086
HOOP_TRACE_FILE="$tmp/trace.json" $run $small --epochs 1 --first-bucket-kb 256 >/dev/null 2>&1 ||
    bad "traced run failed"
python3 - "$tmp/trace.json" <<'PY' || fail=1
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
for rank in (0, 1):
    mine = [e for e in ev if e.get("pid") == rank and e.get("ph") == "X"]
    bwd = [e for e in mine if e["name"] == "backward"]
    ar = [e for e in mine if e["name"].startswith("allreduce bucket")]
    fwd = [e for e in mine if e["name"] == "forward"]
    assert bwd and ar and fwd, f"rank {rank}: events missing"
    early = sum(1 for b in bwd for a in ar
                if b["ts"] <= a["ts"] < b["ts"] + b["dur"])
    assert early > 0, f"rank {rank}: no all-reduce starts inside a backward"
print(f"ok: trace has {len(ev)} events; all-reduces start inside backward on both ranks")
PY

# 4. Errors: bad flag and missing data give exit 2 and one message, from rank 0 only.
$run --epochs x >"$tmp/e1" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "epochs='x' is not an integer" "$tmp/e1" || bad "bad flag: rc=$rc $(cat "$tmp/e1")"
$run --data "$tmp/nowhere" >"$tmp/e2" 2>&1
rc=$?
[ $rc = 2 ] || bad "missing data: rc=$rc $(cat "$tmp/e2")"
# (by the workers: hooprun's failure summary quotes rank 0's message once more)
[ "$(grep -c '^\[rank [0-9]*\] .*nowhere' "$tmp/e2")" = 1 ] ||
    bad "missing data should be named once: $(cat "$tmp/e2")"
grep -q '^\[rank 1\] hoop-train' "$tmp/e2" && bad "rank 1 spoke about rank 0's failure"
# Output paths are checked before any work; an empty checkpoint is not "no checkpoint".
$run --checkpoint "$tmp/no/such/dir/x.ckpt" >"$tmp/e3" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "directory .*no/such/dir. does not exist" "$tmp/e3" || bad "bad checkpoint dir: rc=$rc $(cat "$tmp/e3")"
# HOOP_TRACE_FILE too, before any work: a FIFO (or /dev/null, as root) that the trace's
# rename would have replaced, and a path under a file (refused only after the training).
mkfifo "$tmp/fifo"
: >"$tmp/plain"
for t in "$tmp/fifo|is not a regular file (a FIFO): writing it would replace it" \
    "$tmp/plain/t.json|cannot create a temporary file beside"; do
    HOOP_TRACE_FILE=${t%%|*} $run --data "$tmp/nowhere" >"$tmp/e3t" 2>&1
    rc=$?
    [ $rc = 2 ] && grep -q "${t#*|}" "$tmp/e3t" && ! grep -q nowhere "$tmp/e3t" ||
        bad "HOOP_TRACE_FILE=${t%%|*}: rc=$rc $(cat "$tmp/e3t")"
done
[ -p "$tmp/fifo" ] || bad "HOOP_TRACE_FILE replaced a FIFO"
# Outputs that are one file, or one of --data's files, are refused before any work: the
# trace replaced the checkpoint, metrics were appended to a dataset file.
mkdir "$tmp/dd"
ln -s same3.x "$tmp/lnk" # a link to a file not made yet: the write would make it
for t in "--checkpoint $tmp/same.x --metrics $tmp/same.x|are the same file" \
    "--checkpoint $tmp/same3.x --metrics $tmp/lnk|are the same file" \
    "--data $tmp/dd --metrics $tmp/dd/../dd/train-labels-idx1-ubyte.gz|is --data's file"; do
    # shellcheck disable=SC2086
    HOOP_TRACE_FILE="$tmp/tr.x" $run ${t%%|*} >"$tmp/e3c" 2>&1
    rc=$?
    [ $rc = 2 ] && grep -q "${t#*|}" "$tmp/e3c" || bad "${t%%|*}: rc=$rc $(cat "$tmp/e3c")"
done
HOOP_TRACE_FILE="$tmp/tr.x" $run --checkpoint "$tmp/tr.x" >"$tmp/e3c" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "HOOP_TRACE_FILE '$tmp/tr.x' are the same file" "$tmp/e3c" ||
    bad "HOOP_TRACE_FILE = --checkpoint: rc=$rc $(cat "$tmp/e3c")"
[ -z "$(ls "$tmp/dd")" ] || bad "a refused run wrote into --data: $(ls "$tmp/dd")"
# A process started alone has no DDP to trace: it says so (it wrote nothing, silently).
env -u RANK -u WORLD_SIZE HOOP_TRACE_FILE="$tmp/lone.json" $train --data "$tmp/nowhere" \
    >"$tmp/e3l" 2>&1
grep -q "HOOP_TRACE_FILE='$tmp/lone.json' is ignored: a process started alone" "$tmp/e3l" ||
    bad "a lone process's HOOP_TRACE_FILE: $(cat "$tmp/e3l")"
: >"$tmp/empty.ckpt"
# shellcheck disable=SC2086
$run $small --checkpoint "$tmp/empty.ckpt" --resume >"$tmp/e4" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "truncated" "$tmp/e4" || bad "empty checkpoint: rc=$rc $(cat "$tmp/e4")"
# HOOP_TRANSPORT=ib on a host without an RDMA device: every link must be ib, so each
# worker's init fails, passing on what the transport found missing.
if [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
    HOOP_TRANSPORT=ib $run $small >"$tmp/e5" 2>&1
    rc=$?
    # (whichever rank fails first tells the job: each finds the same)
    [ $rc = 2 ] && grep -qE "HOOP_TRANSPORT=ib, but rank [01] cannot use it: " "$tmp/e5" ||
        bad "HOOP_TRANSPORT=ib without a device: rc=$rc $(cat "$tmp/e5")"
fi
echo "ok: errors exit 2, named once"

# Every rank must get the same flags: a wrapper adds flags on rank 1 only. Refused before
# any data is read (a missing --data here), with exit 2, rank 0 naming the flag and both
# values, rank 1 silent; before, --lr and --seed trained silently diverged models or
# overlapping shards, and --epochs failed later at a collective mismatch naming no flag.
for case in "--lr 0.5|--lr: rank 0 has 0.05, rank 1 has 0.5" \
    "--seed 7|--seed: rank 0 has 1, rank 1 has 7" "--epochs 2|--epochs: rank 0 has 3, rank 1 has 2" \
    "--metrics-every 5 --metrics $tmp/r1.jsonl|--metrics-every: rank 0 has (none), rank 1 has 5"; do
    # shellcheck disable=SC2086
    RANK1_FLAGS=${case%%|*} $build/tools/hooprun --prefix --nproc-per-node 2 "$tmp/wrap" $small \
        --data "$tmp/nowhere" >"$tmp/ag" 2>&1
    rc=$?
    want="[rank 0] hoop-train: ranks disagree on ${case#*|} (every rank must get the same flags)"
    [ $rc = 2 ] && grep -qF -- "$want" "$tmp/ag" && ! grep -q '^\[rank 1\] hoop-train' "$tmp/ag" ||
        bad "rank 1 with ${case%%|*}: rc=$rc (want 2, '$want'): $(cat "$tmp/ag")"
done
echo "ok: flags that differ between ranks: exit 2, the flag and both values named"
# On two nodes, the first rank of node 1 says it too (its node's output held no reason:
# its hooprun said only "exited with code 2"); each node's other rank stays silent.
port=$((20000 + RANDOM % 12000))
for n in 0 1; do
    [ $n = 1 ] && extra="--lr 0.5" || extra=
    # shellcheck disable=SC2086
    HOOP_TOKEN=flags-$port $build/tools/hooprun --prefix --nnodes 2 --node-rank $n \
        --nproc-per-node 2 --master-addr 127.0.0.1 --master-port $port $train $small $extra \
        --data "$tmp/nowhere" >"$tmp/an$n" 2>&1 &
done
wait
for n in 0 1; do
    said=$(grep -c "^\[rank $((2 * n))\] hoop-train: ranks disagree on --lr: rank 0 has 0.05, rank 2 has 0.5" "$tmp/an$n")
    [ "$said" = 1 ] &&
        ! grep -q "^\[rank $((2 * n + 1))\] hoop-train" "$tmp/an$n" ||
        bad "node $n of two, node 1 given --lr 0.5: its first rank does not say why (once): $(cat "$tmp/an$n")"
done
echo "ok: two nodes: each node's first rank names the flag that differs"

# 5. --device cuda under hooprun, on the CUDA backend built on the host execution layer
# (TEST_CUDA_HX_BACKEND, exported by make check; its kernels run on the CPU): 2 workers on
# the one "GPU", DDP reducing each bucket on the device. 544 samples (4 full batches of 64
# and a short one per worker), 500 test samples. The cpu DDP run (dd) is the reference;
# cuda for epoch 1 resumed on the cpu (dc), cpu for epoch 1 resumed on cuda (de): every
# step's and epoch's losses within 1e-4 relative of dd's (the accuracy within 1.5 test
# samples: a near-tie between two logits may fall either way). The checkpoints are not
# compared byte for byte: the CUDA kernels add in other orders than the CPU engine.
if [ -r "${TEST_CUDA_HX_BACKEND:-}" ]; then
    tiny="--data $tmp/data --train-limit 544 --batch-size 64 --eval-batch-size 200 --epochs 2"
    tiny="$tiny --threads 1 --progress plain --log-every 0 --metrics-every 1"
    hx="env HOOP_CUDA_BACKEND=$TEST_CUDA_HX_BACKEND $run"
    drun() { # NAME LAUNCH ARGS...: one part of a run, appending to NAME's metrics and output
        _name=$1 _launch=$2
        shift 2
        # shellcheck disable=SC2086
        $_launch $tiny --checkpoint "$tmp/$_name.ckpt" --metrics "$tmp/$_name.jsonl" "$@" \
            >>"$tmp/$_name.out" 2>&1 || bad "run $_name ($*) exited $?: $(cat "$tmp/$_name.out")"
    }
    drun dd "$run"
    drun dc "$hx" --device cuda --exit-after-epoch 1
    drun dc "$run" --device cpu --resume
    drun de "$run" --exit-after-epoch 1
    drun de "env HOOP_TRACE_FILE=$tmp/cuda-trace.json $hx" --device cuda --resume
    # fewer hardware queues than CUDA's 8 (3: a wait on the bucket stream held hoop's own
    # copies, and the run timed out), and a driver without stream memory operations: the
    # bucket all-reduces block backward's thread, same losses, said once by rank 0 (why),
    # and none of the all-reduce counted as hidden
    drun dq "env CUDA_DEVICE_MAX_CONNECTIONS=3 $hx" --device cuda
    drun dm "env TEST_HX_NO_STREAM_MEMOPS=1 $hx" --device cuda
    for r in "dq|CUDA_DEVICE_MAX_CONNECTIONS=3, under CUDA's default 8" \
        "dm|this CUDA driver has no stream memory operations"; do
        n=$(grep -c "^\[rank 0\] hoop-train: ${r#*|}: each bucket's all-reduce blocked" \
            "$tmp/${r%%|*}.out")
        [ "$n" = 1 ] && ! grep -q '^\[rank 1\]' "$tmp/${r%%|*}.out" ||
            bad "${r%%|*}: not one line from rank 0 alone on the blocking all-reduces: $(cat "$tmp/${r%%|*}.out")"
    done
    for r in dc de; do
        grep -q '^\[rank 0\] hoop-train: device cuda (cuda:0 ' "$tmp/$r.out" &&
            grep -q '^\[rank 0\] hoop-train: cuda graph: off under DDP' "$tmp/$r.out" &&
            ! grep -q '^\[rank 1\]' "$tmp/$r.out" ||
            bad "$r: no 'device cuda' or graphs-off line from rank 0 alone: $(cat "$tmp/$r.out")"
    done
    # the cuda epochs' lines give the all-reduce time and the share hidden (device times)
    grep -Eq '^\[rank 0\] epoch 1/2 .*all-reduce [0-9.]+ ms/step, [0-9]+% hidden' "$tmp/dc.out" ||
        bad "dc: no all-reduce figures in the cuda epoch's line: $(cat "$tmp/dc.out")"
    python3 - "$tmp" <<'PY' || fail=1
import json, sys
tmp = sys.argv[1]
def recs(name):
    return [json.loads(l) for l in open(f"{tmp}/{name}.jsonl")]
def close(a, b):
    return abs(a - b) <= 1e-4 * max(abs(a), abs(b))
u, bad = recs("dd"), 0
for name, cuda_epoch in (("dc", 1), ("de", 2), ("dq", 1), ("dm", 1)):
    g = recs(name)
    if [(r["type"], r["step"]) for r in g] != [(r["type"], r["step"]) for r in u]:
        print(f"FAIL: {name}: other records than the cpu DDP run's: {g}")
        bad = 1
        continue
    worst = 0.0
    for a, b in zip(u, g):
        keys = ["train_loss"] + (["test_loss"] if a["type"] == "epoch" else [])
        off = [k for k in keys if not close(a[k], b[k])]
        worst = max([worst] + [abs(a[k] - b[k]) / max(abs(a[k]), abs(b[k])) for k in keys])
        if a["type"] == "epoch" and abs(a["test_acc"] - b["test_acc"]) > 1.5 / 500:
            off.append("test_acc")
        if off:
            print(f"FAIL: {name} step {a['step']} {a['type']}: {off}: cpu {a} vs {b}")
            bad = 1
    ep = [r for r in g if r["type"] == "epoch"]
    if ep[cuda_epoch - 1]["world_size"] != 2 or ep[cuda_epoch - 1]["allreduce_ms_per_step"] <= 0:
        print(f"FAIL: {name}: epoch {cuda_epoch} on cuda: {ep[cuda_epoch - 1]}")
        bad = 1
    if name in ("dq", "dm") and any(r["hidden_share"] != 0 for r in ep):
        print(f"FAIL: {name}: blocking all-reduces counted as hidden: {ep}")
        bad = 1
    if not bad:
        e = ep[cuda_epoch - 1]
        print(f"ok: {name}: 2 workers, epoch {cuda_epoch} on cuda (all-reduce "
              f"{e['allreduce_ms_per_step']:.2f} ms/step, {100 * e['hidden_share']:.0f}% "
              f"hidden, host layer), {'so is the other' if name in ('dq', 'dm') else 'the other on the cpu'}: "
              f"every loss within {worst:.2g} relative "
              f"of the cpu DDP run's (the metrics carry 6 decimals)")
sys.exit(bad)
PY
    # The cuda epoch's trace: per rank the compute and bucket streams as named rows with
    # device times, bucket all-reduces starting inside the device's backward passes.
    python3 - "$tmp/cuda-trace.json" <<'PY' || fail=1
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
for rank in (0, 1):
    rows = {e["tid"]: e["args"]["name"] for e in ev
            if e.get("ph") == "M" and e.get("name") == "thread_name" and e["pid"] == rank}
    assert rows.get(2) == "compute stream (device)" and rows.get(3) == "bucket stream (device)", \
        f"rank {rank}: rows {rows}"
    mine = [e for e in ev if e.get("pid") == rank and e.get("ph") == "X"]
    bwd = [e for e in mine if e["tid"] == 2 and e["name"] == "backward"]
    ar = [e for e in mine if e["tid"] == 3 and e["name"].startswith("allreduce bucket")]
    assert bwd and ar, f"rank {rank}: no device events"
    early = sum(1 for b in bwd for a in ar if b["ts"] <= a["ts"] < b["ts"] + b["dur"])
    assert early > 0, f"rank {rank}: no all-reduce starts inside a backward on the device"
print(f"ok: cuda trace: compute and bucket stream rows on both ranks, {len(ev)} events")
PY
else
    echo "note: no TEST_CUDA_HX_BACKEND (run under make check); --device cuda runs skipped"
fi
exit $fail
