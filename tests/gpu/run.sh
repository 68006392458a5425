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
# failed (or check_cuda skipped though nvidia-smi lists a GPU: the module or CUDA's
# libraries were not found), or the failing step's.
#
# Time: every step runs under timeout(1) (its own cap, and never past the whole run's
# budget, GPU_BUDGET_S seconds, default 450: a device call allows 600, the machine's start
# and the copies included); a step the budget no longer covers is skipped and says so.
# Order: the tests first, then the benchmarks, then the tests again under
# compute-sanitizer (memcheck; racecheck and synccheck for the kernel tests), which are
# the slowest; the sanitizer runs are skipped when compute-sanitizer cannot run on this
# machine (probed on check_cuda: an exit other than --error-exitcode's). Each step's line
# (name, exit status, seconds) is appended as it ends to gpu-summary.txt beside gpu.log
# ($OUT, else /tmp), so a run stopped from outside still leaves what it did.
set -u -o pipefail
log=${OUT:-/tmp}/gpu.log
summary=${OUT:-/tmp}/gpu-summary.txt
budget=${GPU_BUDGET_S:-450}
t_start=$SECONDS
mode=build
carried=
tarball=
case ${1:-} in
--carried) mode=carried carried=${2:?--carried needs the folder pack.sh wrote} ;;
"") ;;
*) tarball=$1 ;;
esac

# Seconds the next step may take: cap, or what the budget has left (less 5 s to report),
# 0 when that is under 10 s.
left() {
    local cap=$1 rest=$((budget - (SECONDS - t_start) - 5))
    if [ "$rest" -lt 10 ]; then
        echo 0
    elif [ "$rest" -lt "$cap" ]; then
        echo "$rest"
    else
        echo "$cap"
    fi
}

# step NAME CAP CMD...: runs CMD under timeout (left CAP; SIGKILL 5 s after SIGTERM, to
# CMD's whole process group: a launcher's ranks too); writes "gpu: NAME exit R (S s)" to
# the log (fd 3, so the caller may redirect CMD's output) and to the summary. Returns R:
# 124 or 137 when it timed out, 125 when the budget left no time for it (not run).
step() {
    local name=$1 cap=$2 lim r=0 t=$SECONDS
    shift 2
    lim=$(left "$cap")
    if [ "$lim" = 0 ]; then
        echo "gpu: $name skipped: the run's budget (GPU_BUDGET_S=$budget s) is spent" >&3
        echo "$name skipped (budget)" >>"$summary"
        return 125
    fi
    timeout -k 5 "$lim" "$@" || r=$?
    if [ "$r" = 124 ] || [ "$r" = 137 ]; then
        echo "gpu: $name timed out after $lim s" >&3
    fi
    echo "gpu: $name exit $r ($((SECONDS - t)) s)" >&3
    echo "$name exit $r $((SECONDS - t))s" >>"$summary"
    return "$r"
}

# Builds (or finds the carried build); sets bin to the folder of the test programs.
prepare() {
    if [ "$mode" = carried ]; then
        carried=$(cd "$carried" && pwd) || return 1
        # PyTorch (the peers' benchmarks) runs with the machine's own libraries, not the
        # carried Debian ones (an older libstdc++ first on the path): py, a python3 with
        # the path as it was.
        local was=${LD_LIBRARY_PATH-}
        printf '#!/bin/sh\nLD_LIBRARY_PATH=%s\nexport LD_LIBRARY_PATH\nexec python3 "$@"\n' \
            "'$was'" >"$tmpd/py" && chmod +x "$tmpd/py" || return 1
        py=$tmpd/py
        . "$carried/env.sh" || return 1
        # CUDA's libraries come from the machine: the toolkit beside nvcc, else the usual
        # places; then what the module still lacks is named here, not as a bare skip.
        local d nvcc_dir=
        command -v nvcc >/dev/null && nvcc_dir=$(dirname "$(dirname "$(command -v nvcc)")")/lib64
        for d in "$nvcc_dir" "${CUDA_HOME:-}/lib64" /usr/local/cuda/lib64 \
            /usr/local/cuda/targets/x86_64-linux/lib; do
            if [ -n "$d" ] && [ -e "$d/libcudart.so.13" ]; then
                LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
                break
            fi
        done
        export LD_LIBRARY_PATH
        echo "gpu: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
        ldd "$HOOP_CUDA_BACKEND" | grep 'not found' | sed 's/^/gpu: the module lacks: /'
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

# The GPU tests and, for each, the sanitizer tools it runs under.
gpu_tests="check_cuda_train:memcheck check_cuda_ctx_gpu:memcheck check_cuda_coll_gpu:memcheck
    check_coll_device:memcheck check_coll_stream:memcheck check_ddp_cuda:memcheck
    check_coll_ipc:memcheck check_hx_gpu:memcheck,racecheck,synccheck
    check_kern_cuda_gpu:memcheck,racecheck,synccheck check_kern_cuda_a_gpu:memcheck,racecheck,synccheck
    check_kern_cuda_b_gpu:memcheck,racecheck,synccheck"

# A test program; a failure (or a timeout) makes the run's status 1. The stream form's
# tests failing are run once more with 32 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS,
# default 8), a diagnostic that leaves the status alone: a stream held by a
# cuStreamWaitValue32 also holds every stream that shares its queue (the driver API's
# warning on it), and the progress thread's copy stream among them would never run.
run_test() {
    if [ "$1" = check_coll_stream ]; then # every stream on one queue: the calls block instead
        step "$1 (CUDA_DEVICE_MAX_CONNECTIONS=1)" 90 env CUDA_DEVICE_MAX_CONNECTIONS=1 "$bin/$1" ||
            status=1
    fi
    step "$1" 150 "$bin/$1" && return 0
    status=1
    case $1 in
    check_coll_stream | check_ddp_cuda)
        step "$1 (diagnostic: CUDA_DEVICE_MAX_CONNECTIONS=32)" 90 \
            env CUDA_DEVICE_MAX_CONNECTIONS=32 "$bin/$1"
        ;;
    esac
    return 0
}

# A test program under a compute-sanitizer tool (Check's fork off: the tool follows one
# process); --error-exitcode 3 tells the tool's findings from the program's own failures.
run_sanitized() {
    step "compute-sanitizer --tool $2 $1" 120 env CK_FORK=no compute-sanitizer --tool "$2" \
        --error-exitcode 3 "$bin/$1" >"$tmpd/san.out" 2>&1 || {
        status=1
        tail -30 "$tmpd/san.out"
    }
}

main() {
    exec 3>&1
    : >"$summary"
    if command -v nvidia-smi >/dev/null; then
        timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    fi
    timeout 30 nvcc --version | tail -2 || true
    local bin status=0 r=0 t tools tool sanitize=0 tmpd py=python3
    tmpd=$(mktemp -d) || return 1
    prepare || { echo "prepare failed" >>"$summary"; return 1; }
    step check_cuda 60 "$bin/check_cuda" || r=$?
    if [ "$r" = 77 ]; then # no usable GPU: its line says why
        if timeout 30 nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
            echo "gpu: nvidia-smi lists a GPU, but check_cuda skipped: the module or CUDA's libraries were not found (above)"
            return 1
        fi
        return 77
    fi
    [ "$r" = 0 ] || status=1
    # compute-sanitizer, if it can run here at all (not every machine's runtime lets it).
    if command -v compute-sanitizer >/dev/null; then
        r=0
        step "compute-sanitizer probe (memcheck check_cuda)" 60 compute-sanitizer --tool memcheck \
            --error-exitcode 3 "$bin/check_cuda" >"$tmpd/san.out" 2>&1 || r=$?
        if [ "$r" = 0 ] || [ "$r" = 3 ]; then
            sanitize=1
            [ "$r" = 0 ] || { status=1; tail -30 "$tmpd/san.out"; }
        else
            tail -5 "$tmpd/san.out"
            echo "gpu: compute-sanitizer cannot run here (exit $r): the sanitizer runs are skipped"
        fi
    fi
    for t in $gpu_tests; do
        run_test "${t%%:*}"
    done
    # The benchmarks (carried build): the device's ceilings, then hoop-train on cuda
    # against PyTorch eager (bench/gpu_train.sh), all in this one run.
    if [ -x "$bin/gpu_ceilings" ]; then
        step gpu_ceilings 60 "$bin/gpu_ceilings"
    fi
    # Collectives on device buffers (issue 13): all-reduce busbw from 1 MiB to 1 GiB with
    # 2 and 4 ranks on the one GPU, beside PyTorch's Gloo on CUDA tensors with the same
    # ranks and sizes; then the staged TCP path against host buffers (2 ranks). Each
    # hoop-bench row carries the pinned h2d / d2h copy rates of its size.
    if [ -x "$bin/hoop-bench" ] && [ -x "$bin/hooprun" ]; then
        local n sz="-b 1M -e 1G -f 4"
        for n in 2 4; do
            step "hoop-bench --device cuda, $n ranks" 60 "$bin/hooprun" --nproc-per-node $n \
                "$bin/hoop-bench" allreduce --device cuda $sz -n 5 -w 2 -c 1 || status=1
            step "gloo_allreduce.py --device cuda, $n ranks" 60 "$py" "$bin/gloo_allreduce.py" \
                --launch $n --device cuda $sz -r 3 -w 1 -T 50 -l "gloo-cuda-$n"
        done
        # The device direct algorithm (issue 13, "between processes on one node"): the
        # buffers from hoop_comm_alloc_shared_cuda (-R 1), mapped through CUDA IPC, so the
        # in-place column is direct on the GPU (no staging, no transport); compare its busbw
        # with gpu_ceilings' d2d_copy above (bytes read plus written per second).
        for n in 2 4; do
            step "hoop-bench --device cuda -R 1, $n ranks" 60 "$bin/hooprun" --nproc-per-node $n \
                "$bin/hoop-bench" allreduce --device cuda -R 1 $sz -n 5 -w 2 -c 1 --show-algo ||
                status=1
        done
        for dev in cpu cuda; do
            step "hoop-bench tcp --device $dev" 60 env HOOP_TRANSPORT=tcp "$bin/hooprun" \
                --nproc-per-node 2 "$bin/hoop-bench" allreduce --device $dev $sz -n 5 -w 2 -c 1 ||
                status=1
        done
        # -G (nccl-tests' CUDA-graph launches): the timed calls captured, in their stream
        # form, into a graph launched 5 times; the checks are replays (3 per size), so a
        # wrong replay fails it. Small sizes first (where a graph's launch saves most).
        step "hoop-bench --device cuda -G 5, 2 ranks" 60 "$bin/hooprun" --nproc-per-node 2 \
            "$bin/hoop-bench" allreduce --device cuda -G 5 -b 8 -e 1M -f 8 -n 10 -w 2 -c 3 || status=1
        step "hoop-bench --device cuda -G 5, 4 ranks" 60 "$bin/hooprun" --nproc-per-node 4 \
            "$bin/hoop-bench" allreduce --device cuda -G 5 -b 1M -e 64M -f 4 -n 5 -w 2 -c 3 ||
            status=1
    fi
    if [ -x "$bin/hoop-train" ] && [ -d "${carried:-/nonexistent}/data" ]; then
        step gpu_train.sh 120 env DATA="$carried/data" STEPS="${STEPS:-300}" ROUNDS="${ROUNDS:-1}" \
            sh "$bin/gpu_train.sh" "$bin/hoop-train" "$py"
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
            step "hoop-train $cfg" 60 "$bin/hoop-train" --device cuda --cuda-graph off --model "$m" \
                --batch-size "$b" --bench-steps "${STEPS:-300}" --data "$carried/data" \
                --progress plain >"$tmpd/train.out" 2>&1
            grep '^{' "$tmpd/train.out" | sed 's/^{/{"ddp_ranks":1,/'
            step "DDP hoop-train $cfg, 2 ranks" 60 "$bin/hooprun" --nproc-per-node 2 \
                "$bin/hoop-train" --device cuda --model "$m" --batch-size "$b" \
                --bench-steps "${STEPS:-300}" --data "$carried/data" --progress plain \
                >"$tmpd/train.out" 2>&1 || { status=1; tail -20 "$tmpd/train.out"; }
            grep '^{' "$tmpd/train.out" | sed 's/^{/{"ddp_ranks":2,/'
        done
    fi
    # Last, the slowest: every test again under its sanitizer tools, while the budget lasts.
    if [ "$sanitize" = 1 ]; then
        for t in $gpu_tests; do
            tools=${t#*:}
            for tool in ${tools//,/ }; do
                run_sanitized "${t%%:*}" "$tool"
            done
        done
    fi
    rm -rf "$tmpd"
    echo "gpu: summary ($summary):"
    sed 's/^/gpu:   /' "$summary"
    return "$status"
}

main 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
