#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# bench/gpu_train.sh -- issue 12's GPU training benchmark, in one run: hoop-train
# --device cuda (CUDA graphs on, then off) against PyTorch eager on the same GPU, same
# model, batch and optimizer, data already on the device for both (bench/torch_gpu.py;
# hoop-train's --bench-steps keeps its batch resident on cuda): the MLP at batch 128 and
# 1024, the CNN at batch 128; ROUNDS alternating rounds, the median of each and the
# ratio (targets: MLP 128 >= 2x, MLP 1024 >= 1x, CNN 128 >= 1.5x). JSON lines and a table
# on stdout. Usage: bench/gpu_train.sh HOOP_TRAIN [PYTHON]; env STEPS (500), ROUNDS (3),
# DATA (Fashion-MNIST's directory, for hoop-train's loader). A benchmark, not a test.
set -eu
train=${1:?usage: gpu_train.sh HOOP_TRAIN [PYTHON]}
python=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
steps=${STEPS:-500}
rounds=${ROUNDS:-3}
data=${DATA:-/usr/share/datasets/fashion-mnist}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for cfg in "mlp 128" "mlp 1024" "cnn 128"; do
    set -- $cfg
    r=0
    while [ "$r" -lt "$rounds" ]; do
        for g in on off; do
            "$train" --device cuda --cuda-graph "$g" --model "$1" --batch-size "$2" \
                --bench-steps "$steps" --data "$data" --progress plain 2>/dev/null |
                tail -1 | sed "s/^{/{\"graph\":\"$g\",/" | tee -a "$out"
        done
        "$python" "$here/torch_gpu.py" --model "$1" --batch-size "$2" --steps "$steps" |
            tee -a "$out"
        r=$((r + 1))
    done
done
"$python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
target = {("mlp", 128): 2.0, ("mlp", 1024): 1.0, ("cnn", 128): 1.5}
print("| model | batch | hoop graph on | hoop graph off | torch eager | ratio (on) | target |")
print("|---|---:|---:|---:|---:|---:|---:|")
for (m, b), t in target.items():
    def med(f):
        v = [r["samples_per_s"] for r in rows if r.get("model") == m and
             r.get("batch_size") == b and f(r)]
        return statistics.median(v) if v else float("nan")
    on = med(lambda r: r["bench"] == "hoop_train" and r.get("graph") == "on")
    off = med(lambda r: r["bench"] == "hoop_train" and r.get("graph") == "off")
    tor = med(lambda r: r["bench"] == "torch_gpu")
    print(f"| {m} | {b} | {on:.0f} | {off:.0f} | {tor:.0f} | {on / tor:.2f} | {t} |")
PY
