#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/hoop_train.sh -- hoop-train's exit codes and messages, that it learns, and that
# a stopped run resumes exactly (one process; tests/ddp_train.sh does it under hooprun).
#
# Bad flags, a missing data directory and corrupt data files must each give exit 2 and
# one message naming the culprit. With the real Fashion-MNIST installed, 200 MLP steps
# (and 60 CNN steps) must bring the training loss well below its starting value ln 10;
# a CNN with dropout stopped by SIGUSR1 mid-epoch, and an MLP killed (SIGKILL) after a
# --checkpoint-every save, must resume to the uninterrupted run's final checkpoint, byte
# for byte; a checkpoint of the other model is refused naming the model it holds.
set -u
. "${top_srcdir:-.}/tests/train_lib.sh"
bin=${top_builddir:-.}/tools/hoop-train
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect CODE FRAGMENT ARGS...: runs hoop-train ARGS, checks exit code and stderr fragment.
expect() {
    code=$1 frag=$2
    shift 2
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -ne "$code" ] || ! grep -qF -- "$frag" "$tmp/err" "$tmp/out"; then
        echo "FAIL: hoop-train $* -> exit $rc (want $code), output lacks '$frag':"
        cat "$tmp/out" "$tmp/err"
        fail=1
    else
        echo "ok: hoop-train $* -> $rc"
    fi
}

expect 0 "usage: hoop-train" --help
expect 2 "unknown option '--bogus'" --bogus 1
expect 2 "--epochs='abc' is not an integer" --epochs abc
expect 2 "--epochs=0 is out of range" --epochs=0
expect 2 "--model='rnn' is not one of mlp|cnn" --model rnn
expect 2 "--lr needs a value" --lr
expect 2 "--lr='x' is not a number" --lr x
expect 2 "only cpu is implemented" --device cuda
expect 2 "--dropout applies to --model cnn only" --dropout 0.5
expect 2 "neither train-images-idx3-ubyte.gz nor" --data "$tmp/none"
expect 2 "--checkpoint-every needs --checkpoint PATH" --checkpoint-every 10
expect 2 "--checkpoint-every=0 is out of range" --checkpoint-every 0 --checkpoint "$tmp/x.ckpt"
expect 2 "--metrics-every needs --metrics FILE" --metrics-every 10

# A data directory whose image file has a corrupt magic number, then a truncated one.
mkdir "$tmp/bad"
printf '\000\000\010\004\000\000\000\001' >"$tmp/bad/train-images-idx3-ubyte"
printf '\000\000\010\001\000\000\000\001\003' >"$tmp/bad/train-labels-idx1-ubyte"
expect 2 "train-images-idx3-ubyte: magic 0x00000804 says 4 dimensions, expected 3" \
    --data "$tmp/bad"
printf '\000\000\010\003\000\000\000\001\000\000\000\034\000\000\000\034\001\002' \
    >"$tmp/bad/train-images-idx3-ubyte"
expect 2 "truncated: holds 2 of the 784 data bytes" --data "$tmp/bad"

# Learning, on the real data when installed.
if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    for args in "--model mlp --bench-steps 200 --lr 0.05" \
        "--model cnn --bench-steps 60 --lr 0.05"; do
        # shellcheck disable=SC2086
        out=$("$bin" $args --bench-warmup 0 --threads 1) || {
            echo "FAIL: hoop-train $args exited $?"
            fail=1
            continue
        }
        loss=$(echo "$out" | sed -n 's/.*"last_loss":\([0-9.eE+-]*\).*/\1/p')
        if awk -v l="$loss" 'BEGIN { exit !(l != "" && l < 1.2) }'; then
            echo "ok: hoop-train $args: last loss $loss < 1.2 (ln 10 = 2.30 at start)"
        else
            echo "FAIL: hoop-train $args: last loss '$loss' not < 1.2: $out"
            fail=1
        fi
    done
else
    echo "note: Fashion-MNIST not installed; learning and resume checks skipped"
    exit $fail
fi

small_data "$tmp/data" || exit 1
data="--data $tmp/data --threads 1 --progress plain"

# same A B WHAT: the two checkpoints are identical, byte for byte.
same() {
    if cmp -s "$1" "$2"; then
        echo "ok: $3: the final checkpoint is identical to the uninterrupted run's"
    else
        echo "FAIL: $3: the final checkpoint differs from the uninterrupted run's"
        fail=1
    fi
}

# A CNN with dropout, stopped by SIGUSR1 mid-epoch (after step 4 of 20), resumed. The
# stop needs: the position in the epoch, momentum, the schedule's step and the dropout
# stream of the remaining steps.
cnn="$data --model cnn --dropout 0.3 --batch-size 32 --train-limit 640 --epochs 1 --log-every 4"
# shellcheck disable=SC2086
"$bin" $cnn --checkpoint "$tmp/u.ckpt" >"$tmp/u.out" 2>&1 || {
    echo "FAIL: the uninterrupted CNN run exited $?: $(cat "$tmp/u.out")"
    fail=1
}
# shellcheck disable=SC2086
"$bin" $cnn --checkpoint "$tmp/p.ckpt" >"$tmp/p.out" 2>&1 &
pid=$!
wait_for "$tmp/p.out" "step 4/20" $pid
kill -USR1 $pid
wait $pid
rc=$?
line=$(grep "preempted" "$tmp/p.out")
step=$(echo "$line" | sed -n 's|.*at epoch 1 step \([0-9]*\)/20; saved .*p.ckpt (step \([0-9]*\))$|\1 \2|p')
if [ $rc = 138 ] && [ -n "$step" ] && [ "${step% *}" = "${step#* }" ] && [ "${step% *}" -lt 20 ] &&
    [ "$(grep -c . "$tmp/p.out")" = "$(($(grep -c 'step [0-9]*/20 loss' "$tmp/p.out") + 2))" ]; then
    echo "ok: SIGUSR1 -> exit 138 after step ${step% *} of 20: $line"
else
    echo "FAIL: SIGUSR1 mid-epoch: exit $rc (want 138), step '$step': $(cat "$tmp/p.out")"
    fail=1
fi
# shellcheck disable=SC2086
"$bin" $cnn --checkpoint "$tmp/p.ckpt" --resume >"$tmp/r.out" 2>&1 || {
    echo "FAIL: the resumed CNN run exited $?: $(cat "$tmp/r.out")"
    fail=1
}
grep -q "resumed from .*p.ckpt in epoch 1 after batch ${step% *} (step ${step% *})" "$tmp/r.out" ||
    { echo "FAIL: no mid-epoch resume line: $(cat "$tmp/r.out")"; fail=1; }
same "$tmp/u.ckpt" "$tmp/p.ckpt" "CNN + dropout, SIGUSR1 mid-epoch, resumed"
# The epoch's line reports the whole epoch's training loss, not only the resumed part.
want=$(sed -n 's/^epoch 1\/1 loss \([0-9.]*\) .*/\1/p' "$tmp/u.out")
got=$(sed -n 's/^epoch 1\/1 loss \([0-9.]*\) .*/\1/p' "$tmp/r.out")
[ -n "$want" ] && [ "$want" = "$got" ] ||
    { echo "FAIL: epoch loss after resume '$got', uninterrupted '$want'"; fail=1; }

# The other model's checkpoint is refused, naming what it holds (exit 2).
expect 2 "--resume: $tmp/u.ckpt holds a cnn checkpoint (421642 parameters), not mlp" \
    $data --checkpoint "$tmp/u.ckpt" --resume

# An MLP saving every 10 steps, killed (SIGKILL: no chance to save) after its save at
# step 20, resumes from that save to the same end; metrics every 10 steps.
mlp="$data --epochs 1 --log-every 0 --checkpoint-every 10"
# shellcheck disable=SC2086
"$bin" $mlp --checkpoint "$tmp/mu.ckpt" --metrics "$tmp/m.jsonl" --metrics-every 10 \
    >"$tmp/mu.out" 2>&1 || { echo "FAIL: MLP run exited $?: $(cat "$tmp/mu.out")"; fail=1; }
saves=$(grep -c "^hoop-train: saved $tmp/mu.ckpt (step [0-9]*)$" "$tmp/mu.out")
steps=$(grep '"type":"step"' "$tmp/m.jsonl" | sed 's/.*"step":\([0-9]*\),.*/\1/' | tr '\n' ' ')
# 157 steps: saves at 10..150 and at the epoch's end; a step record every 10 steps.
if [ "$saves" = 16 ] && [ "$steps" = "10 20 30 40 50 60 70 80 90 100 110 120 130 140 150 " ] &&
    [ "$(grep -c '"type":"epoch".*"step":157,' "$tmp/m.jsonl")" = 1 ]; then
    echo "ok: --checkpoint-every 10: 16 'saved' lines; --metrics-every 10: steps $steps"
else
    echo "FAIL: $saves saves (want 16), step records '$steps': $(cat "$tmp/mu.out" "$tmp/m.jsonl")"
    fail=1
fi
# shellcheck disable=SC2086
"$bin" $mlp --checkpoint "$tmp/mk.ckpt" >"$tmp/mk.out" 2>&1 &
pid=$!
wait_for "$tmp/mk.out" "saved .*(step 20)" $pid
kill -KILL $pid
wait $pid
rc=$?
grep -q "^epoch 1/1 loss" "$tmp/mk.out" && echo "note: the killed run had finished before SIGKILL"
cp "$tmp/mk.ckpt" "$tmp/mid.ckpt"
# shellcheck disable=SC2086
"$bin" $mlp --checkpoint "$tmp/mk.ckpt" --resume >"$tmp/mr.out" 2>&1 || fail=1
if [ $rc = 137 ] && grep -q "resumed from .* in epoch 1 after batch [1-9][0-9]* " "$tmp/mr.out"; then
    same "$tmp/mu.ckpt" "$tmp/mk.ckpt" "MLP killed after a periodic save, resumed"
else
    echo "FAIL: SIGKILL exit $rc (want 137) or no mid-epoch resume: $(cat "$tmp/mr.out")"
    fail=1
fi
# The same checkpoint with another --train-limit: its position means nothing there.
expect 2 "stopped inside epoch 1 of 20000 training samples; this run has 10000" \
    $data --checkpoint "$tmp/mid.ckpt" --resume --train-limit 10000

# A benchmark stopped by SIGTERM says so and exits 143.
# shellcheck disable=SC2086
"$bin" $data --bench-steps 1000000 --bench-warmup 0 >"$tmp/b.out" 2>&1 &
pid=$!
sleep 0.5
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 143 ] && grep -q "stopped (SIGTERM) after [0-9]* of 1000000 benchmark steps" "$tmp/b.out" ||
    { echo "FAIL: benchmark under SIGTERM: exit $rc: $(cat "$tmp/b.out")"; fail=1; }

# A second SIGINT stops at once, without waiting for the step (one step of 16384 samples
# takes seconds on one thread): no "preempted" line, killed by SIGINT. ThreadSanitizer
# delays a handler until the thread enters a function it intercepts, and a thread inside
# OpenBLAS does not: there the step ends first, so the check cannot hold.
if grep -q '^#define HOOP_SANITIZERS.*thread' "${top_builddir:-.}/config.h" 2>/dev/null; then
    echo "skip: two SIGINTs under ThreadSanitizer (handlers wait for an intercepted call)"
    exit $fail
fi
# shellcheck disable=SC2086
"$bin" $data --batch-size 16384 --epochs 1 >"$tmp/i.out" 2>&1 &
pid=$!
wait_for "$tmp/i.out" "^hoop-train: mlp" $pid
kill -INT $pid
sleep 0.3
alive=0
kill -0 $pid 2>/dev/null && alive=1 # the first one only asked for a stop
kill -INT $pid
wait $pid
rc=$?
if [ $alive = 1 ] && [ $rc = 130 ] && ! grep -q "preempted" "$tmp/i.out"; then
    echo "ok: a second SIGINT stops at once (exit $rc)"
else
    echo "FAIL: two SIGINTs: alive after one $alive, exit $rc (want 130): $(cat "$tmp/i.out")"
    fail=1
fi
exit $fail
