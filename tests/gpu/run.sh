#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/gpu/run.sh -- everything GPU-related in one call, for a machine with an NVIDIA GPU:
# configure with CUDA, build, run the CUDA tests (check_cuda, which skips without a GPU
# elsewhere), and record the device. Output goes to stdout and, when OUT is set, to
# $OUT/gpu.log.
#
#   bash tests/gpu/run.sh            from a git checkout (needs autoconf, automake, libtool)
#   bash tests/gpu/run.sh X.tar.gz   from a release tarball (`make dist`): needs only a C
#                                    compiler, nvcc and the -dev libraries configure wants
#                                    (OpenBLAS, zlib); Check is not needed for check_cuda.
# Exit status: check_cuda's (0 pass, 77 skipped: no usable GPU), or the failing step's.
set -u -o pipefail
log=${OUT:-/tmp}/gpu.log
tarball=${1:-}

main() {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    nvcc --version | tail -2 || return 1
    local src=..
    if [ -n "$tarball" ]; then
        rm -rf build-gpu && mkdir -p build-gpu && tar -xzf "$tarball" -C build-gpu || return 1
        cd build-gpu/hoop-* || return 1
        src=.
    else
        ./autogen.sh >/dev/null || return 1
        mkdir -p build-gpu && cd build-gpu || return 1
    fi
    $src/configure --with-cuda | tail -14 || return 1
    make -j"$(nproc)" >/dev/null || return 1
    make -j"$(nproc)" tests/check_cuda >/dev/null || return 1
    local rc=0
    ./tests/check_cuda || rc=$?
    echo "gpu: check_cuda exit $rc"
    return "$rc"
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
