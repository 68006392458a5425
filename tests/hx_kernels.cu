/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/hx_kernels.cu -- kernels that exercise the host execution layer (src/cuda/hx.h)
 * the way hoop's own kernels will: a bounds guard, grid-stride loops, warp shuffles,
 * static and dynamic shared memory, 2-D blocks, and deliberately broken kernels
 * (a missing barrier, divergent barriers, a deadlock, a barrier in a plain launch).
 * Compiled for the host by tests/hx_kernels_host.cc in make check; the same source
 * builds with nvcc, so tests/check_hx.c can run against a real GPU as well.
 *
 * Accumulate contract: hxk_axpy and hxk_sum add into their output (+=); the others
 * write (=).
 */
#include <string.h>

#include "cuda/kern_blas.h"

/* y[i] += a * x[i], i < n. */
static __global__ void axpy_kernel(float *y, const float *x, float a, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] += a * x[i];
}

/* *out += sum of x[0..n): each thread a grid-stride partial sum, each warp a shuffle
 * tree (the lane-0 value is the warp's sum), the warps' sums through shared memory,
 * then warp 0 folds them (the usual two-level block reduction, as in llm.c's
 * blockReduce). skip_barrier drops the one barrier it needs. */
static __global__ void sum_kernel(float *out, const float *x, size_t n, int skip_barrier)
{
    __shared__ float part[32];
    float s = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += x[i];
    for (int d = 16; d > 0; d /= 2) s += __shfl_down_sync(0xffffffffu, s, d);
    unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) part[warp] = s;
    if (!skip_barrier) __syncthreads();
    if (warp != 0) return;
    s = lane < (blockDim.x + 31) / 32 ? part[lane] : 0.0f;
    for (int d = 16; d > 0; d /= 2) s += __shfl_down_sync(0xffffffffu, s, d);
    if (lane == 0) atomicAdd(out, s);
}

/* out(cols, rows) = in(rows, cols)^T through a 32 x 33 tile (the padding column keeps
 * the column reads off one shared-memory bank); blocks of 32 x 8 threads. */
static __global__ void transpose_kernel(float *out, const float *in, int rows, int cols)
{
    __shared__ float tile[32][33];
    int x = (int)(blockIdx.x * 32 + threadIdx.x), y = (int)(blockIdx.y * 32 + threadIdx.y);
    for (int j = 0; j < 32; j += 8)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
    __syncthreads();
    x = (int)(blockIdx.y * 32 + threadIdx.x);
    y = (int)(blockIdx.x * 32 + threadIdx.y);
    for (int j = 0; j < 32; j += 8)
        if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}

/* Reverses each block's stretch of x (the last one may be short) through dynamic
 * shared memory; bug = 1 reads the mirror of a full block instead (wrong, and NaN from
 * the unwritten part of the buffer, in the last block). */
static __global__ void reverse_kernel(float *x, int n, int bug)
{
    HOOP_DYN_SHARED(float, buf);
    int t = (int)threadIdx.x, base = (int)(blockIdx.x * blockDim.x);
    int m = n - base < (int)blockDim.x ? n - base : (int)blockDim.x;
    if (t < m) buf[t] = x[base + t];
    __syncthreads();
    int from = bug ? (int)blockDim.x - 1 - t : m - 1 - t;
    if (t < m) x[base + t] = buf[from];
}

/* Threads below 16 and the others wait at two different __syncthreads. */
static __global__ void divergent_kernel(float *x)
{
    if (threadIdx.x < 16) {
        __syncthreads();
        x[threadIdx.x] = 1.0f;
    } else {
        __syncthreads();
        x[threadIdx.x] = 2.0f;
    }
}

/* Lane 0 waits at __syncthreads while its warp's other lanes wait at a shuffle whose mask
 * names lane 0 too: neither can complete (a hang on a GPU). */
static __global__ void deadlock_kernel(float *x)
{
    float v = x[threadIdx.x];
    if (threadIdx.x == 0)
        __syncthreads();
    else
        v = __shfl_down_sync(0xffffffffu, v, 1);
    x[threadIdx.x] = v;
}

/* out[t] = t's neighbour's id through per-lane source lanes: lane l reads lane l + 1 of its
 * warp (a rotation), the legal use of __shfl_sync with a different srcLane per lane. */
static __global__ void rotate_kernel(int *out)
{
    int lane = (int)(threadIdx.x % 32);
    out[threadIdx.x] = __shfl_sync(0xffffffffu, (int)threadIdx.x, (lane + 1) & 31);
}

/* The low half of each warp shuffles among itself (mask 0x0000ffff, width 16) while the
 * high half goes straight to the block barrier: legal, and must not deadlock. */
static __global__ void half_warp_kernel(int *out)
{
    int v = (int)threadIdx.x;
    if (threadIdx.x % 32 < 16) v = __shfl_down_sync(0x0000ffffu, v, 1, 16);
    __syncthreads();
    out[threadIdx.x] = v;
}

/* out[t] = s[t - 1] after every thread wrote s[t] = t: a read of an earlier thread's
 * write, which needs the barrier (dropped when skip_barrier). */
static __global__ void neighbour_kernel(int *out, int skip_barrier)
{
    __shared__ int s[256];
    int t = (int)threadIdx.x;
    s[t] = t + 1000 * (int)blockIdx.x;
    if (!skip_barrier) __syncthreads();
    out[blockIdx.x * blockDim.x + t] = t ? s[t - 1] : -1;
}

/* 80 KB of locals per thread (a GPU gives up to 512 KiB of local memory). */
static __global__ void big_locals_kernel(float *out)
{
    volatile float a[20000];
    for (int i = 0; i < 20000; i++) a[i] = (float)(i + (int)threadIdx.x);
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < 20000; i += 1000) s += a[i];
    out[threadIdx.x] = s;
}

/* Every lane shuffles with a mask that leaves lane 0 out. */
static __global__ void bad_mask_kernel(int *out)
{
    out[threadIdx.x] = __shfl_sync(0xfffffffeu, (int)threadIdx.x, 1);
}

// ----------------------------------------------------------------- launchers

extern "C" hoop_status hxk_axpy(float *y, const float *x, float a, size_t n, unsigned block)
{
    if (n == 0) return HOOP_OK;
    unsigned grid = (unsigned)((n + block - 1) / block);
    HOOP_KLAUNCH(axpy_kernel, grid, block, 0, 0, y, x, a, n);
    return HOOP_KCHECK("axpy_kernel");
}

/* how: 0 correct, 1 without its barrier, 2 launched plain (not SYNC). */
extern "C" hoop_status hxk_sum(float *out, const float *x, size_t n, unsigned grid, unsigned block,
                               int how)
{
    if (block % 32 != 0 || block == 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hxk_sum: block=%u is not a multiple of 32", block);
    if (how == 2)
        HOOP_KLAUNCH(sum_kernel, grid, block, 0, 0, out, x, n, 0);
    else
        HOOP_KLAUNCH_SYNC(sum_kernel, grid, block, 0, 0, out, x, n, how == 1);
    return HOOP_KCHECK("sum_kernel");
}

extern "C" hoop_status hxk_transpose(float *out, const float *in, int rows, int cols)
{
    dim3 grid((unsigned)(cols + 31) / 32, (unsigned)(rows + 31) / 32), block(32, 8);
    HOOP_KLAUNCH_SYNC(transpose_kernel, grid, block, 0, 0, out, in, rows, cols);
    return HOOP_KCHECK("transpose_kernel");
}

extern "C" hoop_status hxk_reverse(float *x, int n, unsigned block, size_t smem, int bug)
{
    unsigned grid = (unsigned)((n + (int)block - 1) / (int)block);
    HOOP_KLAUNCH_SYNC(reverse_kernel, grid, block, smem, 0, x, n, bug);
    return HOOP_KCHECK("reverse_kernel");
}

extern "C" hoop_status hxk_divergent(float *x)
{
    HOOP_KLAUNCH_SYNC(divergent_kernel, 1, 32, 0, 0, x);
    return HOOP_KCHECK("divergent_kernel");
}

extern "C" hoop_status hxk_deadlock(float *x)
{
    HOOP_KLAUNCH_SYNC(deadlock_kernel, 1, 32, 0, 0, x);
    return HOOP_KCHECK("deadlock_kernel");
}

/* Row-major C(M, N) = A(M, K) B(K, N) (+ C when acc) through column-major SGEMM: the
 * row-major C is the column-major C^T = B^T A^T, so B goes first (as hoop's linear will
 * call it). ldb_delta is added to B's leading dimension (a test passes -1: cuBLAS refuses). */
extern "C" hoop_status hxk_gemm_rows(float *C, const float *A, const float *B, int M, int N, int K,
                                     int acc, int ldb_delta)
{
    cublasHandle_t h;
    HOOP_CUBLAS_CHECK(cublasCreate(&h));
    const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
    cublasStatus_t s = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N + ldb_delta, A,
                                   K, &beta, C, N);
    cublasDestroy(h);
    if (s != CUBLAS_STATUS_SUCCESS)
        return HOOP_ERROR(HOOP_ERR_CUDA, "cublasSgemm failed: %s", cublasGetStatusName(s));
    return HOOP_OK;
}

/* which: 0 rotate, 1 half warp, 2 neighbour (skip_barrier = arg), 3 bad mask; on grid
 * blocks of block threads. */
extern "C" hoop_status hxk_shuffles(int *out, int which, unsigned grid, unsigned block, int arg)
{
    switch (which) {
    case 0: HOOP_KLAUNCH_SYNC(rotate_kernel, grid, block, 0, 0, out); break;
    case 1: HOOP_KLAUNCH_SYNC(half_warp_kernel, grid, block, 0, 0, out); break;
    case 2: HOOP_KLAUNCH_SYNC(neighbour_kernel, grid, block, 0, 0, out, arg); break;
    default: HOOP_KLAUNCH_SYNC(bad_mask_kernel, grid, block, 0, 0, out); break;
    }
    return HOOP_KCHECK("shuffle test kernel");
}

extern "C" hoop_status hxk_big_locals(float *out, unsigned block)
{
    HOOP_KLAUNCH_SYNC(big_locals_kernel, 1, block, 0, 0, out);
    return HOOP_KCHECK("big_locals_kernel");
}

/* cudaDeviceSynchronize as a status (where an execution failure shows on a GPU). */
extern "C" hoop_status hxk_sync(void)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaDeviceSynchronize: %s", cudaGetErrorString(e));
    return HOOP_OK;
}

extern "C" void hxk_reset(void)
{
    cudaDeviceReset();
    cudaGetLastError();
}

/* cublasSetMathMode with a mode cuBLAS does not have. */
extern "C" hoop_status hxk_bogus_math_mode(void)
{
    cublasHandle_t h;
    HOOP_CUBLAS_CHECK(cublasCreate(&h));
    cublasStatus_t s = cublasSetMathMode(h, (cublasMath_t)12345);
    cublasDestroy(h);
    if (s != CUBLAS_STATUS_SUCCESS)
        return HOOP_ERROR(HOOP_ERR_CUDA, "cublasSetMathMode failed: %s", cublasGetStatusName(s));
    return HOOP_OK;
}

// ----------------------------------------------------------------- memory

extern "C" hoop_status hxk_alloc(float **p, size_t count)
{
    cudaError_t e = cudaMalloc(p, count * sizeof(float));
    if (e != cudaSuccess)
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaMalloc(%zu floats): %s", count,
                          cudaGetErrorString(e));
    return HOOP_OK;
}

extern "C" hoop_status hxk_copy(float *dst, const float *src, size_t count, int to_device)
{
    cudaError_t e = cudaMemcpy(dst, src, count * sizeof(float),
                               to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return HOOP_ERROR(HOOP_ERR_CUDA, "cudaMemcpy: %s", cudaGetErrorString(e));
    return HOOP_OK;
}

extern "C" void hxk_free(float *p)
{
    cudaFree(p);
}

/* -1 on the host execution layer; on CUDA, the number of usable GPUs (0 when none). */
extern "C" int hxk_gpu_count(void)
{
#ifdef __CUDACC__
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    cudaGetLastError();
    return n;
#else
    return -1;
#endif
}

// ----------------------------------------------------------------- interprocess memory

/* x[i] += v, i < n (a peer's kernel writing memory it opened from a handle). */
static __global__ void add_kernel(float *x, float v, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] += v;
}

extern "C" hoop_status hxk_add(float *x, float v, size_t n)
{
    if (n == 0) return HOOP_OK;
    size_t blocks = (n + 255) / 256;
    HOOP_KLAUNCH(add_kernel, (unsigned)(blocks < 1024 ? blocks : 1024), 256, 0, 0, x, v, n);
    return HOOP_KCHECK("add_kernel");
}

/* CUDA IPC's three calls, their cudaError_t as an int (0: success); handle is the 64
 * bytes of a cudaIpcMemHandle_t. */
extern "C" int hxk_ipc_get(void *handle, void *p)
{
    cudaIpcMemHandle_t h;
    int e = (int)cudaIpcGetMemHandle(&h, p);
    memcpy(handle, &h, sizeof(h));
    cudaGetLastError();
    return e;
}

extern "C" int hxk_ipc_open(void **p, const void *handle)
{
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof(h));
    int e = (int)cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess);
    cudaGetLastError();
    return e;
}

/* cudaFree's cudaError_t as an int. */
extern "C" int hxk_free_rc(void *p)
{
    int e = (int)cudaFree(p);
    cudaGetLastError();
    return e;
}

extern "C" int hxk_ipc_close(void *p)
{
    int e = (int)cudaIpcCloseMemHandle(p);
    cudaGetLastError();
    return e;
}

/* What cudaPointerGetAttributes says p is: 2 device memory, 1 pinned host memory, 0
 * anything else (or an error). */
extern "C" int hxk_mem_type(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice ? 2 : a.type == cudaMemoryTypeHost ? 1 : 0;
}
