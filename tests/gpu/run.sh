#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/gpu/run.sh -- everything GPU-related in one call, for a machine with an NVIDIA GPU:
# configure with CUDA, build, run the CUDA tests (check_cuda and check_cuda_train through
# the libhoop-cuda.so module, and the GPU builds of the host-execution-layer tests: check_hx_gpu, check_kern_cuda*_gpu, each also under
# compute-sanitizer's memcheck, racecheck and synccheck), and record the device. Output goes to stdout and, when OUT is set, to
# $OUT/gpu.log.
#
#   bash tests/gpu/run.sh            from a git checkout (needs autoconf, automake, libtool)
#   bash tests/gpu/run.sh X.tar.gz   from a release tarball (`make dist`): needs only a C
#                                    compiler, nvcc and the -dev libraries configure wants
#                                    (OpenBLAS, zlib); Check is not needed for check_cuda.
# Exit status: check_cuda's (0 pass, 77 skipped: no usable GPU), 1 when a GPU test or a
# sanitizer run failed, or the failing step's. (It still builds on the GPU machine: one
# that has no -dev packages needs the carried build of issue 15.)
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
    make -j"$(nproc)" tests/check_cuda tests/check_cuda_train >/dev/null || return 1
    # The public API with the real backend module: a tensor's round trip, then whole
    # models on CUDA tensors against the CPU engine (memcheck on the second).
    export HOOP_CUDA_BACKEND=$PWD/.libs/libhoop-cuda.so
    local rc=0
    ./tests/check_cuda || rc=$?
    echo "gpu: check_cuda exit $rc"
    local r=0
    ./tests/check_cuda_train || r=$?
    echo "gpu: check_cuda_train exit $r"
    [ "$r" = 0 ] || rc=1
    if command -v compute-sanitizer >/dev/null; then
        r=0
        CK_FORK=no compute-sanitizer --tool memcheck --error-exitcode 3 ./tests/check_cuda_train \
            >/dev/null 2>&1 || r=$?
        echo "gpu: compute-sanitizer --tool memcheck check_cuda_train exit $r"
        [ "$r" = 0 ] || rc=1
    fi
    # The host-execution-layer tests' GPU builds: the same checks on the device, under
    # compute-sanitizer (memcheck, then racecheck and synccheck) where it is installed.
    local t tool
    for t in check_hx_gpu check_kern_cuda_gpu check_kern_cuda_a_gpu check_kern_cuda_b_gpu; do
        make -j"$(nproc)" "tests/$t" >/dev/null || { echo "gpu: $t: build failed"; rc=1; continue; }
        local r=0
        ./tests/$t || r=$?
        echo "gpu: $t exit $r"
        [ "$r" = 0 ] || rc=1
        command -v compute-sanitizer >/dev/null || continue
        for tool in memcheck racecheck synccheck; do
            r=0
            CK_FORK=no compute-sanitizer --tool "$tool" --error-exitcode 3 ./tests/$t >/dev/null 2>&1 || r=$?
            echo "gpu: compute-sanitizer --tool $tool $t exit $r"
            [ "$r" = 0 ] || rc=1
        done
    done
    return "$rc"
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
