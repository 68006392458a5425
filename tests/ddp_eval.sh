#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/ddp_eval.sh -- hoop-train's test-set evaluation covers the 10000 test samples
# exactly once for any world size (DistributedSampler's exact split).
#
# With --lr 0 the parameters stay at their (seeded) initial values, so the evaluation of
# 1, 3 and 7 workers (3 and 7 do not divide 10000) must report the same test accuracy,
# to the sample, and the same test loss up to float summation order.
# Needs the real Fashion-MNIST (Debian's dataset-fashion-mnist); skips (77) without it.
set -u
build=${top_builddir:-.}
data=/usr/share/datasets/fashion-mnist
[ -r "$data/t10k-images-idx3-ubyte.gz" ] || {
    echo "SKIP: Fashion-MNIST not installed ($data)"
    exit 77
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
args="--lr 0 --epochs 1 --train-limit 70 --batch-size 10 --threads 1 --progress plain"
for ws in 1 3 7; do
    run=""
    [ "$ws" = 1 ] || run="$build/tools/hooprun --nproc-per-node $ws"
    # shellcheck disable=SC2086
    $run "$build/tools/hoop-train" $args --log-every 0 --metrics "$tmp/m$ws.jsonl" \
        >"$tmp/out$ws" 2>&1 || {
        echo "FAIL: $ws worker(s) exited $?: $(cat "$tmp/out$ws")"
        fail=1
        continue
    }
    sed -n 's/.*"test_loss":\([0-9.]*\),"test_acc":\([0-9.]*\).*/\1 \2/p' "$tmp/m$ws.jsonl" \
        >"$tmp/v$ws"
    echo "world_size $ws: test_loss test_acc = $(cat "$tmp/v$ws")"
done
[ "$fail" = 0 ] || exit 1
read -r loss1 acc1 <"$tmp/v1"
# The accuracy is a count of 10000: a whole number of samples.
awk -v a="$acc1" 'BEGIN { c = a * 10000; exit !(c == int(c) && a > 0) }' ||
    { echo "FAIL: accuracy $acc1 is not a count of 10000 samples"; fail=1; }
for ws in 3 7; do
    read -r loss acc <"$tmp/v$ws"
    [ "$acc" = "$acc1" ] || { echo "FAIL: world_size $ws: test_acc $acc, 1 worker $acc1"; fail=1; }
    awk -v a="$loss" -v b="$loss1" 'BEGIN { d = a - b; exit !(d < 2e-6 && d > -2e-6) }' ||
        { echo "FAIL: world_size $ws: test_loss $loss, 1 worker $loss1"; fail=1; }
done
[ "$fail" = 0 ] && echo "ok: the same test metrics over 10000 samples with 1, 3 and 7 workers"
exit $fail
