#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# bench/train_throughput.sh -- single-core training throughput: hoop-train vs PyTorch.
#
# Runs, in the same invocation and alternating ROUNDS times (so machine noise hits both):
#   hoop-train --model mlp --bench-steps STEPS   (MLP 784-512-256-10, batch 128, SGD m=0.9)
#   bench/torch_mlp.py                           (the same in PyTorch, torch.set_num_threads(1))
# with OPENBLAS_NUM_THREADS=1, then bench/sgemm_rate at the MLP's GEMM shapes, and prints
# the median samples/s of each, the ratio, and the achieved GFLOP/s of hoop's and
# PyTorch's steps against OpenBLAS's single-core sgemm rate at those shapes.
# Usage (from a build directory): ../bench/train_throughput.sh [--data DIR]
# Env: STEPS (400), ROUNDS (3), BUILDDIR (.), PYTHON (/usr/bin/python3).
# A benchmark, not a test: it asserts nothing and is never run by make check.
set -eu
srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${BUILDDIR:-.}
python=${PYTHON:-/usr/bin/python3}
steps=${STEPS:-400}
rounds=${ROUNDS:-3}
data=/usr/share/datasets/fashion-mnist
if [ "${1:-}" = "--data" ]; then data=$2; fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

for f in "$builddir/tools/hoop-train" "$builddir/bench/sgemm_rate"; do
    [ -x "$f" ] || { echo "train_throughput: $f not built (run make first)" >&2; exit 2; }
done
"$python" -c 'import torch' 2>/dev/null ||
    { echo "train_throughput: PyTorch missing (apt-get install python3-torch)" >&2; exit 2; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
r=1
while [ "$r" -le "$rounds" ]; do
    "$builddir/tools/hoop-train" --model mlp --batch-size 128 --optimizer sgd --lr 0.05 \
        --momentum 0.9 --threads 1 --data "$data" --bench-steps "$steps" | tee -a "$out"
    "$python" "$srcdir/bench/torch_mlp.py" --batch-size 128 --lr 0.05 --momentum 0.9 \
        --threads 1 --data "$data" --steps "$steps" | tee -a "$out"
    "$python" "$srcdir/bench/torch_mlp.py" --batch-size 128 --lr 0.05 --momentum 0.9 \
        --threads 1 --data "$data" --steps "$steps" --loader dataloader | tee -a "$out"
    r=$((r + 1))
done
"$builddir/bench/sgemm_rate" --threads 1 --batch 128 --json | tee -a "$out"

"$python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
hoop = [r for r in rows if r["bench"] == "hoop_train"]
torch_t = [r for r in rows if r["bench"] == "torch_mlp" and r["loader"] == "tensor"]
torch_d = [r for r in rows if r["bench"] == "torch_mlp" and r["loader"] == "dataloader"]
gemm = [r for r in rows if r["bench"] == "sgemm_rate"][0]
med = lambda rs: statistics.median(r["samples_per_s"] for r in rs)
best = lambda rs: max(r["samples_per_s"] for r in rs)
mflop = hoop[0]["step_mflop"]
gf = lambda s: s / 128 * mflop * 1e-3
print("\n# single core, MLP 784-512-256-10, batch 128, SGD momentum 0.9, %d rounds" % len(hoop))
print("%-38s %10s %10s %9s %9s" % ("run", "median/s", "best/s", "GFLOP/s", "of sgemm"))
for name, rs in (("hoop-train", hoop), ("pytorch (tensor batches)", torch_t),
                 ("pytorch (DataLoader)", torch_d)):
    print("%-38s %10.0f %10.0f %9.2f %8.0f%%" % (name, med(rs), best(rs), gf(med(rs)),
                                                  100 * gf(med(rs)) / gemm["gflops"]))
print("%-38s %10.0f %10s %9.2f %8.0f%%" % ("sgemm ceiling (OpenBLAS, same shapes)",
      gemm["ceiling_samples_per_s"], "", gemm["gflops"], 100))
print("hoop / pytorch, medians: %.2fx (tensor batches), %.2fx (DataLoader); best runs: %.2fx, %.2fx"
      % (med(hoop) / med(torch_t), med(hoop) / med(torch_d),
         best(hoop) / best(torch_t), best(hoop) / best(torch_d)))
PY
