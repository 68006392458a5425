#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/launcher_train.sh -- hooprun with the main job, hoop-train, on Fashion-MNIST:
#   1. a bad --resume: rank 0 prints why and tells the others, which exit with the same
#      code, often before rank 0 does; hooprun must name rank 0 with its message (issue
#      10: it named rank 1);
#  1b. a bad flag on every rank: said by rank 0 (and at most one other), and quoted by
#      hooprun (each rank said it, after rank 0's store warned of it);
#   2. --progress bar under hooprun: the bar, redrawn with '\r' on stderr, reaches the
#      terminal during the epoch, before the epoch's line (it used to come after it).
# Skips (77) without the data set (Debian: dataset-fashion-mnist).
. "${top_srcdir:-.}/tests/launcher_lib.sh"
TRAIN=${top_builddir:-.}/tools/hoop-train
DATA=/usr/share/datasets/fashion-mnist
[ -x "$TRAIN" ] || fail "$TRAIN is not built"
if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
    echo "SKIP: no Fashion-MNIST in $DATA"
    exit 77
fi
export HOOP_TIMEOUT=60

# 1. A checkpoint that is not one: 8 bytes.
echo garbage > "$TMP/bad.ckpt"
"$HOOPRUN" --nproc-per-node 3 "$TRAIN" --data "$DATA" --checkpoint "$TMP/bad.ckpt" --resume \
    --train-limit 256 --epochs 1 > "$TMP/r.out" 2> "$TMP/r.err"
rc=$?
cat "$TMP/r.err"
[ "$rc" = 2 ] || fail "a bad --resume gave $rc, not 2"
assert_contains "$TMP/r.err" "hooprun: first failure: rank 0 (pid "
assert_contains "$TMP/r.err" "message: hoop-train: checkpoint '$TMP/bad.ckpt': truncated"

# 1b. A bad flag on every rank: said by rank 0 (each rank said it, and rank 0's store
# warned of it first), quoted by hooprun; all exit 2. (A rank whose word reaches rank 0's
# store before rank 0's own refusal is noted is the one the job heard, and says it too.)
"$HOOPRUN" --nproc-per-node 3 "$TRAIN" --bogus > "$TMP/b.out" 2> "$TMP/b.err"
rc=$?
[ "$rc" = 2 ] || { cat "$TMP/b.err"; fail "--bogus on 3 ranks gave $rc, not 2"; }
n=$(grep -c "^hoop-train: unknown option '--bogus'" "$TMP/b.err")
[ "$n" -ge 1 ] && [ "$n" -le 2 ] || { cat "$TMP/b.err"; fail "--bogus: said $n times"; }
assert_contains "$TMP/b.err" "rank 0's message: hoop-train: unknown option '--bogus'"
grep -q "its owner gave up" "$TMP/b.err" && { cat "$TMP/b.err"; fail "--bogus: rank 0's store warned too"; }

# 2. The bar (stderr) and the epoch line (stdout) through one file, in arrival order.
"$HOOPRUN" --prefix --nproc-per-node 2 "$TRAIN" --data "$DATA" --train-limit 2048 --batch-size 32 \
    --epochs 1 --progress bar > "$TMP/bar" 2>&1 || { cat "$TMP/bar"; fail "the bar run failed"; }
bar_at=$(grep -abo '\[rank 0\] epoch 1/1 \[' "$TMP/bar" | head -1 | cut -d: -f1)
line_at=$(grep -abo '\[rank 0\] epoch 1/1 loss' "$TMP/bar" | head -1 | cut -d: -f1)
[ -n "$bar_at" ] && [ -n "$line_at" ] || fail "bar or epoch line missing: $(od -c "$TMP/bar")"
[ "$bar_at" -lt "$line_at" ] ||
    fail "the bar (byte $bar_at) came after the epoch line (byte $line_at): $(od -c "$TMP/bar")"
grep -q "^\[rank 0\] hoop-train: .*, 1 epoch, " "$TMP/bar" ||
    fail "the first line does not say '1 epoch': $(head -c 400 "$TMP/bar")"
grep -q "$(printf '32/32 loss [0-9.]* [0-9]* samples/s \r')" "$TMP/bar" ||
    fail "the last bar did not end with its '\\r': $(od -c "$TMP/bar")"
echo "PASS"
