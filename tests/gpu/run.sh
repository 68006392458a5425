#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/gpu/run.sh -- everything GPU-related in one call, for a machine with an NVIDIA GPU:
# the CUDA tests through the libhoop-cuda.so module (check_cuda: a tensor's round trip;
# check_cuda_train: the MLP and the CNN trained on CUDA tensors against the CPU engine,
# and a captured CUDA graph against the eager step; check_cuda_ctx_gpu: the device layer;
# check_cuda_coll_gpu: the collectives' device reduction against the host's;
# check_coll_device: the collectives on GPU buffers, 2 to 4 ranks on the one GPU;
# check_coll_stream: their stream form, ordered on each rank's stream, and captured into
# CUDA graphs and replayed; check_coll_ipc:
# device memory the ranks map through CUDA IPC and the device direct algorithm, 2 to 4
# ranks as processes and as threads on the one GPU, a killed rank; check_ddp_cuda: DDP
# with parameters on cuda, 2 and 3 ranks as processes on the one GPU, against one process on
# the combined batch, the cpu, lazy streams' absence, join, a killed rank, the trace),
# the GPU builds of the host-execution-layer tests (check_hx_gpu, check_kern_cuda*_gpu),
# each also under compute-sanitizer (memcheck, racecheck, synccheck), and the device's
# description; then the benchmarks: the device's ceilings, hoop-bench --device cuda with 2
# and 4 ranks beside Gloo on CUDA tensors, the same on buffers the ranks map through CUDA IPC
# (-R 1: the device direct algorithm), the staged TCP path against host buffers,
# hoop-bench -G (CUDA-graph launches of the stream form, replays checked),
# hoop-train on cuda against PyTorch, and DDP on the GPU (hoop-train under hooprun with 2
# ranks: samples/s and the share of all-reduce hidden behind backward, beside one process
# on the same per-rank batch). Output goes to stdout and, when OUT is set, to
# $OUT/gpu.log.
#
#   bash tests/gpu/run.sh --carried DIR   run what tests/gpu/pack.sh put in DIR (built on
#                                         a Debian 12 machine; the GPU machine needs only
#                                         the CUDA toolkit's libraries and a driver)
#   bash tests/gpu/run.sh                 configure with CUDA, build and run, from a git
#                                         checkout (needs autotools and the -dev packages)
#   bash tests/gpu/run.sh X.tar.gz        the same from a release tarball (`make dist`)
# Exit status: 0 pass, 77 skipped (no usable GPU), 1 when a GPU test or a sanitizer run
# failed, or the failing step's.
set -u -o pipefail
log=${OUT:-/tmp}/gpu.log
mode=build
carried=
tarball=
case ${1:-} in
--carried) mode=carried carried=${2:?--carried needs the folder pack.sh wrote} ;;
"") ;;
*) tarball=$1 ;;
esac

# Builds (or finds the carried build); sets bin to the folder of the test programs.
prepare() {
    if [ "$mode" = carried ]; then
        carried=$(cd "$carried" && pwd) || return 1
        . "$carried/env.sh" || return 1
        # CUDA's libraries come from the machine: the toolkit beside nvcc.
        local cudalib
        cudalib=$(dirname "$(dirname "$(command -v nvcc)")")/lib64
        [ -d "$cudalib" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$cudalib
        export LD_LIBRARY_PATH
        bin=$carried/bin
        return 0
    fi
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
    make -j"$(nproc)" tests/check_cuda tests/check_cuda_train tests/check_cuda_ctx_gpu tests/check_cuda_coll_gpu tests/check_coll_device tests/check_coll_stream tests/check_ddp_cuda tests/check_coll_ipc tests/check_hx_gpu \
        tests/check_kern_cuda_gpu tests/check_kern_cuda_a_gpu tests/check_kern_cuda_b_gpu \
        >/dev/null || return 1
    export HOOP_CUDA_BACKEND=$PWD/.libs/libhoop-cuda.so
    bin=$PWD/tests
}

# Runs one test program, then (sanitizers: the tools to use) under compute-sanitizer.
run_one() {
    local t=$1 tools=$2 r=0 tool
    "$bin/$t" || r=$?
    echo "gpu: $t exit $r"
    [ "$r" = 0 ] || status=1
    command -v compute-sanitizer >/dev/null || return 0
    for tool in $tools; do
        r=0
        CK_FORK=no compute-sanitizer --tool "$tool" --error-exitcode 3 "$bin/$t" >/dev/null 2>&1 || r=$?
        echo "gpu: compute-sanitizer --tool $tool $t exit $r"
        [ "$r" = 0 ] || status=1
    done
}

main() {
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    fi
    nvcc --version | tail -2 || true
    local bin status=0 r=0
    prepare || return 1
    "$bin/check_cuda" || r=$?
    echo "gpu: check_cuda exit $r"
    [ "$r" = 77 ] && return 77 # no usable GPU: its line says why
    [ "$r" = 0 ] || status=1
    run_one check_cuda_train memcheck
    run_one check_cuda_ctx_gpu memcheck
    run_one check_cuda_coll_gpu memcheck
    run_one check_coll_device memcheck
    run_one check_coll_stream memcheck
    run_one check_ddp_cuda memcheck
    run_one check_coll_ipc memcheck
    local t
    for t in check_hx_gpu check_kern_cuda_gpu check_kern_cuda_a_gpu check_kern_cuda_b_gpu; do
        run_one "$t" "memcheck racecheck synccheck"
    done
    # The benchmarks (carried build): the device's ceilings, then hoop-train on cuda
    # against PyTorch eager (bench/gpu_train.sh), all in this one run.
    if [ -x "$bin/gpu_ceilings" ]; then
        "$bin/gpu_ceilings" || echo "gpu: gpu_ceilings exit $?"
    fi
    # Collectives on device buffers (issue 13): all-reduce busbw from 1 MiB to 1 GiB with
    # 2 and 4 ranks on the one GPU, beside PyTorch's Gloo on CUDA tensors with the same
    # ranks and sizes; then the staged TCP path against host buffers (2 ranks). Each
    # hoop-bench row carries the pinned h2d / d2h copy rates of its size.
    if [ -x "$bin/hoop-bench" ] && [ -x "$bin/hooprun" ]; then
        local n sz="-b 1M -e 1G -f 4"
        for n in 2 4; do
            "$bin/hooprun" --nproc-per-node $n "$bin/hoop-bench" allreduce --device cuda $sz \
                -n 5 -w 2 -c 1 || { echo "gpu: hoop-bench --device cuda, $n ranks, exit $?"; status=1; }
            python3 "$bin/gloo_allreduce.py" --launch $n --device cuda $sz -r 3 -w 1 -T 50 \
                -l "gloo-cuda-$n" || echo "gpu: gloo_allreduce.py --device cuda, $n ranks, exit $?"
        done
        # The device direct algorithm (issue 13, "between processes on one node"): the
        # buffers from hoop_comm_alloc_shared_cuda (-R 1), mapped through CUDA IPC, so the
        # in-place column is direct on the GPU (no staging, no transport); compare its busbw
        # with gpu_ceilings' d2d_copy above (bytes read plus written per second).
        for n in 2 4; do
            "$bin/hooprun" --nproc-per-node $n "$bin/hoop-bench" allreduce --device cuda -R 1 $sz \
                -n 5 -w 2 -c 1 --show-algo ||
                { echo "gpu: hoop-bench --device cuda -R 1, $n ranks, exit $?"; status=1; }
        done
        for dev in cpu cuda; do
            HOOP_TRANSPORT=tcp "$bin/hooprun" --nproc-per-node 2 "$bin/hoop-bench" allreduce \
                --device $dev $sz -n 5 -w 2 -c 1 ||
                { echo "gpu: hoop-bench tcp --device $dev exit $?"; status=1; }
        done
        # -G (nccl-tests' CUDA-graph launches): the timed calls captured, in their stream
        # form, into a graph launched 5 times; the checks are replays (3 per size), so a
        # wrong replay fails it. Small sizes first (where a graph's launch saves most).
        "$bin/hooprun" --nproc-per-node 2 "$bin/hoop-bench" allreduce --device cuda -G 5 \
            -b 8 -e 1M -f 8 -n 10 -w 2 -c 3 ||
            { echo "gpu: hoop-bench --device cuda -G 5 exit $?"; status=1; }
        "$bin/hooprun" --nproc-per-node 4 "$bin/hoop-bench" allreduce --device cuda -G 5 \
            -b 1M -e 64M -f 4 -n 5 -w 2 -c 3 ||
            { echo "gpu: hoop-bench --device cuda -G 5, 4 ranks, exit $?"; status=1; }
    fi
    if [ -x "$bin/hoop-train" ] && [ -d "${carried:-/nonexistent}/data" ]; then
        DATA=$carried/data STEPS=${STEPS:-300} ROUNDS=${ROUNDS:-1} \
            sh "$bin/gpu_train.sh" "$bin/hoop-train" python3 || echo "gpu: gpu_train.sh exit $?"
    fi
    # DDP on the GPU (issue 13): 2 ranks on the one GPU, each with its batch resident
    # (--bench-steps), the buckets reduced on the device while backward runs: samples/s of
    # both ranks together, the all-reduce time per step and the share of it hidden behind
    # backward (device event times); beside it one process on the same per-rank batch
    # (graphs off, as under DDP). One JSON line each, "ddp_ranks" added.
    if [ -x "$bin/hoop-train" ] && [ -x "$bin/hooprun" ] && [ -d "${carried:-/nonexistent}/data" ]; then
        local cfg m b
        for cfg in "mlp 128" "mlp 1024" "cnn 128"; do
            m=${cfg% *} b=${cfg#* }
            "$bin/hoop-train" --device cuda --cuda-graph off --model "$m" --batch-size "$b" \
                --bench-steps "${STEPS:-300}" --data "$carried/data" --progress plain 2>&1 |
                grep '^{' | sed 's/^{/{"ddp_ranks":1,/' || echo "gpu: hoop-train $cfg exit $?"
            "$bin/hooprun" --nproc-per-node 2 "$bin/hoop-train" --device cuda --model "$m" \
                --batch-size "$b" --bench-steps "${STEPS:-300}" --data "$carried/data" \
                --progress plain 2>&1 | grep '^{' | sed 's/^{/{"ddp_ranks":2,/' ||
                { echo "gpu: DDP hoop-train $cfg, 2 ranks, exit $?"; status=1; }
        done
    fi
    return "$status"
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
