#!/bin/sh
# tests/gpu/run.sh -- everything GPU-related in one call, for a machine with an NVIDIA GPU:
# configure with CUDA, build, run the CUDA tests (check_cuda, which skip without a GPU
# elsewhere), and record the device. Output goes to stdout and, when OUT is set, to
# $OUT/gpu.log. Run from the repository root: sh tests/gpu/run.sh
set -eu
log=${OUT:-/tmp}/gpu.log
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    nvcc --version | tail -2
    ./autogen.sh >/dev/null
    mkdir -p build-gpu
    cd build-gpu
    ../configure --with-cuda | tail -12
    make -j"$(nproc)" >/dev/null
    make -j"$(nproc)" tests/check_cuda >/dev/null
    ./tests/check_cuda
    echo "gpu: check_cuda exit $?"
} 2>&1 | tee "$log"
