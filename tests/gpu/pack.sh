#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# tests/gpu/pack.sh -- prepares what a GPU machine that cannot build or install anything
# needs to run tests/gpu/run.sh: the GPU test programs and tools built here (x86-64,
# sm_90) and the Debian shared libraries they load, downloaded with apt-get download and
# unpacked with dpkg -x (CUDA's own libraries and glibc are left to the GPU machine).
#
#   bash tests/gpu/pack.sh [BUILD_DIR [CARRY_DIR]]
#
# BUILD_DIR (default .) is a build configured with CUDA, where `make check` has built the
# tests; CARRY_DIR (default gpu-carry, ignored by git) receives bin/ (the GPU tests,
# hoop-train, hooprun, hoop-bench, bench/gpu_ceilings and the GPU benchmark scripts), lib/ (the module
# libhoop-cuda.so), debs/ (the unpacked packages), data/ (Fashion-MNIST's first TRAIN_N
# (20000) training images and the whole test set: the full set would not fit beside
# OpenBLAS) and env.sh, which run.sh --carried sources (and which unpacks the libraries
# over 1 MiB, carried gzipped). Prints the total size: a device call carries at most 64 MiB,
# the checkout's tracked files included.
set -eu -o pipefail
build=${1:-.}
carry=${2:-gpu-carry}
train_n=${TRAIN_N:-20000}
fmnist=${FMNIST:-/usr/share/datasets/fashion-mnist}
progs="tools/hoop-train tools/hooprun bench/hoop-bench bench/gpu_ceilings tests/check_cuda tests/check_cuda_train tests/check_cuda_ctx_gpu tests/check_hx_gpu tests/check_kern_cuda_gpu
       tests/check_kern_cuda_a_gpu tests/check_kern_cuda_b_gpu tests/check_cuda_coll_gpu tests/check_coll_device tests/check_coll_stream
       tests/check_ddp_cuda tests/check_coll_ipc"

[ -e "$build/.libs/libhoop-cuda.so" ] ||
    { echo "pack.sh: $build/.libs/libhoop-cuda.so is missing: configure with CUDA and run make" >&2; exit 2; }
make -C "$build" -j"$(nproc)" $progs >/dev/null
rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/lib" "$carry/debs" "$carry/dl"
for p in $progs; do cp "$build/$p" "$carry/bin/"; done
# Debug sections out (symbols stay, for compute-sanitizer's backtraces): the carry's limit.
strip --strip-debug "$carry"/bin/* 2>/dev/null || true
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
cp "$srcdir/bench/gpu_train.sh" "$srcdir/bench/torch_gpu.py" "$srcdir/bench/peers/gloo_allreduce.py" \
    "$carry/bin/"
cp "$build/.libs/libhoop-cuda.so" "$carry/lib/"
# A slice of Fashion-MNIST in IDX form (the header's count cut to the slice).
mkdir -p "$carry/data"
python3 - "$fmnist" "$carry/data" "$train_n" <<'PY'
import gzip, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name, keep in (("train-images-idx3-ubyte", n), ("train-labels-idx1-ubyte", n),
                   ("t10k-images-idx3-ubyte", None), ("t10k-labels-idx1-ubyte", None)):
    raw = gzip.open(f"{src}/{name}.gz").read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    count = dims[0] if keep is None else min(keep, dims[0])
    per = 1
    for d in dims[1:]:
        per *= d
    head = raw[:4] + count.to_bytes(4, "big") + raw[8:4 + 4 * ndim]
    body = raw[4 + 4 * ndim:4 + 4 * ndim + count * per]
    with gzip.open(f"{dst}/{name}.gz", "wb", compresslevel=9) as f:
        f.write(head + body)
PY

# The packages that hold every library these load, but glibc's and CUDA's.
elfs=$(for f in "$carry"/bin/* "$carry/lib/libhoop-cuda.so"; do
    case $f in *.sh | *.py) ;; *) echo "$f" ;; esac
done)
pkgs=$(for f in $elfs; do ldd "$f"; done |
    awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -v -e '/libc\.so' -e '/libm\.so' -e '/libdl\.so' -e '/libpthread\.so' -e '/librt\.so' \
        -e '/ld-linux' -e '/libcuda' -e '/libcublas' -e '/usr/local/cuda' |
    while read -r lib; do
        real=$(readlink -f "$lib") # Debian 12 registers merged-/usr files under either path
        { dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}"; } | head -1 | cut -d: -f1
    done | sort -u)
echo "pack.sh: Debian packages: $(echo $pkgs)"
(cd "$carry/dl" && apt-get download $pkgs >/dev/null)
for d in "$carry"/dl/*.deb; do dpkg -x "$d" "$carry/debs"; done
rm -rf "$carry/dl" "$carry/debs/usr/share"
# Only what the programs load: OpenBLAS's LAPACK and BLAS aliases are not.
find "$carry/debs" \( -name 'liblapack*' -o -name 'libblas*' -o -name '*.a' \) -delete

# The library folders, for LD_LIBRARY_PATH (OpenBLAS sits in a folder of its own).
dirs=$(find "$carry/debs" -name '*.so*' -printf '%h\n' | sort -u | sed "s|^$carry|\$carry|")
# Libraries over 1 MiB travel gzipped (OpenBLAS alone is 36 MB of the 64 MiB a device
# call carries, the checkout included: 10.7 MB gzipped); env.sh unpacks them in place.
find "$carry/debs" -type f -name '*.so*' -size +1M -exec gzip -9 {} +
{
    echo "# written by tests/gpu/pack.sh"
    echo 'carry=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)'
    echo 'for z in $(find "$carry/debs" -name "*.so*.gz"); do'
    echo '    [ -e "${z%.gz}" ] || { gzip -dc "$z" >"${z%.gz}.part" && mv "${z%.gz}.part" "${z%.gz}"; } ||'
    echo '        echo "env.sh: cannot unpack $z" >&2'
    echo 'done'
    echo "LD_LIBRARY_PATH=$(echo $dirs | tr ' ' ':')\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    echo 'export LD_LIBRARY_PATH HOOP_CUDA_BACKEND=$carry/lib/libhoop-cuda.so'
} >"$carry/env.sh"
# A check that the carried programs find everything but CUDA here already.
( . "$carry/env.sh" && for f in $elfs; do
    ldd "$f" | grep 'not found' | grep -v -e libcuda -e libcublas && exit 1; done; true ) ||
    { echo "pack.sh: a carried program lacks a library (above)" >&2; exit 1; }
# what that check unpacked goes again: only the .gz travel
find "$carry/debs" -name '*.so*.gz' | while read -r z; do rm -f "${z%.gz}"; done
bytes=$(du -sb "$carry" | cut -f1)
echo "pack.sh: $carry: $(du -sh "$carry" | cut -f1) ($bytes bytes; a device call carries 67108864 with the checkout)"
