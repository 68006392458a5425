#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# bench/ddp_scaling.sh -- DDP training throughput: 1 worker vs 2 workers on this machine,
# hoop vs PyTorch 1.13 DDP (Gloo), the MLP 784-512-256-10, batch 128 per worker, one
# OpenBLAS / intra-op thread per worker, SGD momentum. hoop runs with its defaults (shared
# memory between the workers, DDP's buckets all-reduced by the direct algorithm, each
# worker bound to its own CPU) and, as controls, over loopback TCP and unbound; PyTorch as it comes and with each rank bound to its own CPU. Rounds
# alternate all runs so machine noise hits them alike; the table gives medians over ROUNDS.
#
# Run from the build directory: ../bench/ddp_scaling.sh   (ROUNDS=5 STEPS=300 by default)
# Needs /usr/bin/python3 with Debian's python3-torch for the PyTorch rows.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-300}
export OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sps() { sed -n 's/.*"samples_per_s": *\([0-9.]*\).*/\1/p' | tail -1; }
hidden() { sed -n 's/.*"hidden_share":\([0-9.]*\).*/\1/p' | tail -1; }

for r in $(seq 1 "$ROUNDS"); do
    tools/hoop-train --bench-steps "$STEPS" --threads 1 | sps >>"$tmp/hoop1"
    taskset -c 0 tools/hoop-train --bench-steps "$STEPS" --threads 1 | sps >>"$tmp/hoop1b"
    tools/hooprun --nproc-per-node 2 tools/hoop-train --bench-steps "$STEPS" --threads 1 \
        >"$tmp/out2"
    sps <"$tmp/out2" >>"$tmp/hoop2"
    hidden <"$tmp/out2" >>"$tmp/hidden2"
    HOOP_TRANSPORT=tcp tools/hooprun --nproc-per-node 2 tools/hoop-train --bench-steps "$STEPS" \
        --threads 1 | sps >>"$tmp/hoop2tcp"
    tools/hooprun --nproc-per-node 2 --bind none tools/hoop-train --bench-steps "$STEPS" \
        --threads 1 | sps >>"$tmp/hoop2nb"
    if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
        /usr/bin/python3 "$here/torch_mlp.py" --steps "$STEPS" | sps >>"$tmp/torch1"
        /usr/bin/python3 "$here/torch_ddp.py" --nproc 2 --steps "$STEPS" \
            --port $((29700 + r)) | sps >>"$tmp/torch2"
        /usr/bin/python3 "$here/torch_ddp.py" --nproc 2 --steps "$STEPS" --bind \
            --port $((29800 + r)) | sps >>"$tmp/torch2b"
    fi
    echo "round $r done" >&2
done

median() { sort -n "$1" 2>/dev/null | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "n/a"}'; }
h1=$(median "$tmp/hoop1") h1b=$(median "$tmp/hoop1b") h2=$(median "$tmp/hoop2")
t1=$(median "$tmp/torch1") t2=$(median "$tmp/torch2") t2b=$(median "$tmp/torch2b")
echo "| run | median samples/s (global) |"
echo "|---|---:|"
echo "| hoop, 1 worker | $h1 |"
echo "| hoop, 1 worker bound to CPU 0 (taskset) | $h1b |"
echo "| hoop DDP, 2 workers (defaults: shared memory, --bind core) | $h2 |"
echo "| hoop DDP, 2 workers, HOOP_TRANSPORT=tcp (loopback TCP) | $(median "$tmp/hoop2tcp") |"
echo "| hoop DDP, 2 workers, --bind none | $(median "$tmp/hoop2nb") |"
echo "| PyTorch 1.13, 1 process | $t1 |"
echo "| PyTorch 1.13 DDP (Gloo), 2 workers | $t2 |"
echo "| PyTorch 1.13 DDP (Gloo), 2 workers, rank r bound to CPU r | $t2b |"
awk -v a="$h2" -v b="$h1" -v bb="$h1b" -v c="$t2" -v cb="$t2b" -v h="$(median "$tmp/hidden2")" 'BEGIN {
    m = bb > b ? bb : b
    printf "\nhoop scaling 2 vs 1 worker: %.2fx (efficiency %.0f%%); vs the faster 1-worker run: %.2fx\n", a / b, 50 * a / b, a / m
    if (c > 0) printf "hoop DDP vs PyTorch DDP (Gloo), 2 workers: %.2fx (vs PyTorch bound: %.2fx)\n", a / c, a / cb
    printf "share of all-reduce time hidden behind backward (hoop, 2 workers): %.0f%%\n", 100 * h
}'
