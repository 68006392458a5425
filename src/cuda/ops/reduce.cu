/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/reduce.cu -- reductions of the kernel table: reduce_fwd (the sum or mean of
 * count floats into y[0], accumulated in double) and bias_grad (the bias's gradient, the
 * column sums of dy viewed as (N, C, inner)).
 *
 * reduce_fwd runs in one block of REDUCE_THREADS threads: the table's entries allocate
 * nothing, so there is no scratch to combine blocks in, and one block gives the same
 * value on every run. Each thread sums its strided share in double, then a tree over
 * shared memory (a fixed order) combines the threads.
 *
 * bias_grad, inner == 1 (a linear layer's bias): blocks of 32 columns x REDUCE_BG_ROWS
 * row groups; thread (tx, ty) sums rows ty, ty + REDUCE_BG_ROWS, ... of its column
 * (coalesced reads across tx), then the groups are added in order. inner > 1 (a conv's
 * bias over NCHW): a block per channel; each thread sums its share of every (n, c) plane,
 * then a tree over shared memory. Sums in f32, within count * eps * sum |dy| of the
 * CPU's order.
 *
 * Accumulate contract (autograd_impl.h): bias_grad is a parameter gradient, added (+=)
 * with acc, written (=) without; reduce_fwd writes y[0].
 */
#include "cuda/ops/ops.h"

#define REDUCE_THREADS 1024 /* reduce_fwd's one block; a power of two */
#define REDUCE_BG_ROWS 8    /* bias_grad, inner == 1: row groups per block */
#define REDUCE_BG_PLANE 256 /* bias_grad, inner > 1: threads per channel; a power of two */

static __global__ void reduce_fwd_kernel(float *y, const float *x, size_t n, int mean)
{
    __shared__ double part[REDUCE_THREADS];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += REDUCE_THREADS) s += x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned h = REDUCE_THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[0] = (float)(mean ? part[0] / (double)n : part[0]);
}

static __global__ void reduce_bias_grad_rows_kernel(float *db, const float *dy, size_t N, size_t C,
                                                    int acc)
{
    __shared__ float part[REDUCE_BG_ROWS][33];
    for (size_t c0 = (size_t)blockIdx.x * 32; c0 < C; c0 += (size_t)gridDim.x * 32) {
        const size_t c = c0 + threadIdx.x;
        float s = 0.0f;
        if (c < C)
            for (size_t r = threadIdx.y; r < N; r += REDUCE_BG_ROWS) s += dy[r * C + c];
        part[threadIdx.y][threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.y == 0 && c < C) {
            float t = part[0][threadIdx.x];
            for (int g = 1; g < REDUCE_BG_ROWS; g++) t += part[g][threadIdx.x];
            db[c] = acc ? db[c] + t : t;
        }
        __syncthreads(); /* part is rewritten for the next columns */
    }
}

static __global__ void reduce_bias_grad_planes_kernel(float *db, const float *dy, size_t N,
                                                      size_t C, size_t inner, int acc)
{
    __shared__ float part[REDUCE_BG_PLANE];
    for (size_t c = blockIdx.x; c < C; c += gridDim.x) {
        float s = 0.0f;
        for (size_t n = 0; n < N; n++) {
            const float *plane = dy + (n * C + c) * inner;
            for (size_t k = threadIdx.x; k < inner; k += REDUCE_BG_PLANE) s += plane[k];
        }
        part[threadIdx.x] = s;
        __syncthreads();
        for (unsigned h = REDUCE_BG_PLANE / 2; h > 0; h >>= 1) {
            if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
            __syncthreads();
        }
        if (threadIdx.x == 0) db[c] = acc ? db[c] + part[0] : part[0];
        __syncthreads(); /* part is rewritten for the next channel */
    }
}

extern "C" hoop_status hoop__cuda_reduce_fwd(float *y, const float *x, size_t count, int mean)
{
    /* count 0 writes 0 (sum) or NaN (mean), as the CPU does */
    HOOP_KLAUNCH_SYNC(reduce_fwd_kernel, 1, REDUCE_THREADS, 0, hoop__cuda_stream(), y, x, count,
                      mean);
    return HOOP_KCHECK("reduce_fwd_kernel");
}

extern "C" hoop_status hoop__cuda_bias_grad(float *db, const float *dy, size_t N, size_t C,
                                            size_t inner, int acc)
{
    if (C == 0) return HOOP_OK;
    if (N == 0 || inner == 0) /* empty sums: db = 0, or unchanged with acc */
        return acc ? HOOP_OK : hoop__cuda_fill(db, C, 0.0f);
    if (inner == 1) {
        HOOP_KLAUNCH_SYNC(reduce_bias_grad_rows_kernel, hoop__cuda_grid(C, 32),
                          dim3(32, REDUCE_BG_ROWS), 0, hoop__cuda_stream(), db, dy, N, C, acc);
        return HOOP_KCHECK("reduce_bias_grad_rows_kernel");
    }
    HOOP_KLAUNCH_SYNC(reduce_bias_grad_planes_kernel, hoop__cuda_grid(C, 1), REDUCE_BG_PLANE, 0,
                      hoop__cuda_stream(), db, dy, N, C, inner, acc);
    return HOOP_KCHECK("reduce_bias_grad_planes_kernel");
}
