#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/hoop_train.sh -- hoop-train's exit codes and messages, and that it learns.
#
# Bad flags, a missing data directory and corrupt data files must each give exit 2 and
# one message naming the culprit. With the real Fashion-MNIST installed, 200 MLP steps
# (and 60 CNN steps) must bring the training loss well below its starting value ln 10.
set -u
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
    echo "note: Fashion-MNIST not installed; learning checks skipped"
fi
exit $fail
