#!/bin/bash
# tests/gpu/run.sh -- everything GPU-related in one call, for a machine with an NVIDIA GPU:
# configure with CUDA, build, run the CUDA tests (check_cuda, which skips without a GPU
# elsewhere), and record the device. Output goes to stdout and, when OUT is set, to
# $OUT/gpu.log. Run from the repository root: bash tests/gpu/run.sh
# Needs what a build needs (autoconf, automake, libtool, Check, OpenBLAS, zlib: see
# scripts/install-deps.sh) plus nvcc. Exit status: check_cuda's (0 pass, 77 skipped:
# no usable GPU), or the failing build step's.
set -u -o pipefail
log=${OUT:-/tmp}/gpu.log

main() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    nvcc --version | tail -2 || return 1
    ./autogen.sh >/dev/null || return 1
    mkdir -p build-gpu && cd build-gpu || return 1
    ../configure --with-cuda | tail -12 || return 1
    make -j"$(nproc)" >/dev/null || return 1
    make -j"$(nproc)" tests/check_cuda >/dev/null || return 1
    local rc=0
    ./tests/check_cuda || rc=$?
    echo "gpu: check_cuda exit $rc"
    return "$rc"
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
