#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tests/cuda_no_fma.sh -- the kernels whose results must equal the CPU table's bit for bit
# (tests/check_kern_cuda*.c compare them with tolerance 0; the collectives' reductions
# promise the host's bits) contain no fused multiply-add in nvcc's PTX. nvcc contracts a
# product and a sum into one FMA by default (--fmad=true): one rounding where the CPU
# rounds twice, a last-bit difference that the host execution layer (g++, no FMA on
# x86-64) can never show and a GPU run's exact comparison fails on. Checked without a
# GPU: nvcc -ptx of each source, then per kernel no fma.rn, and no unrounded mul (which
# ptxas may still fuse) whose result an add or sub in the same basic block reads (the PTX
# ISA, "add": "mul/add sequences with no rounding modifiers may be optimized to use
# fused-multiply-add").
# Skips (77) without nvcc.
set -eu
[ -n "${NVCC:-}" ] && command -v "$NVCC" >/dev/null 2>&1 || {
    echo "cuda_no_fma.sh: no nvcc: skipped"
    exit 77
}
src=${top_srcdir:-.}
bld=${top_builddir:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# FILE KERNEL-PATTERN...: the kernels of FILE (mangled names matching a pattern) to check.
check() {
    f=$1
    shift
    ptx=$tmp/$(basename "$f" .cu).ptx
    "$NVCC" -O2 -std=c++17 -arch=sm_90 -I"$bld/include" -I"$src/include" -I"$src/src" -I"$bld" \
        -ptx "$src/$f" -o "$ptx"
    for k in "$@"; do
        bad=$(awk -v want="$k" '
            /\.entry/ { name = $NF; sub(/\(.*/, "", name); on = name ~ want; split("", unr); next }
            !on { next }
            /^\$/ || /bra|ret;/ { split("", unr); next }
            { gsub(/[,;]/, " ") }
            $1 ~ /^fma\.rn\.f(32|64)$/ { print name ": " $0; next }
            $1 ~ /^(add|sub)\.f(32|64)$/ && (($3 in unr) || ($4 in unr)) { print name ": " $0 }
            $1 ~ /^mul\.f(32|64)$/ { unr[$2] = 1; next }
            { delete unr[$2] }
        ' "$ptx")
        seen=$(grep -c "\.entry.*$k" "$ptx" || true)
        if [ "$seen" = 0 ]; then
            echo "FAIL $f: no kernel matches $k (renamed? update this test)"
            fail=1
        elif [ -n "$bad" ]; then
            echo "FAIL $f: a fused or fusable multiply-add in a kernel that must match the CPU:"
            echo "$bad" | sed 's/^/  /'
            fail=1
        fi
    done
}
# elementwise.cu: axpby_kernel is left out (its FMAs multiply by 1.0f, exact: add and
# axpy_or_copy; scale has no sum).
check src/cuda/ops/elementwise.cu bcast_kernel
check src/cuda/ops/bias.cu bias_kernel
check src/cuda/ops/dropout.cu dropout_fwd_kernel
check src/cuda/ops/pool.cu pool_fwd_kernel pool_bwd_kernel
check src/cuda/ops/im2col.cu im2col_kernel col2im_kernel
check src/cuda/coll_reduce.cu coll_reduce coll_prescale
check src/cuda/coll_direct.cu direct_kernel
[ "$fail" = 0 ] && echo "PASS: cuda_no_fma.sh"
exit "$fail"
