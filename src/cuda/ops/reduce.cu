/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/reduce.cu -- reductions of the kernel table: reduce_fwd (the sum or mean of
 * count floats into y[0], accumulated in double) and bias_grad (the bias's gradient, the
 * column sums of dy viewed as (N, C, inner)).
 *
 * reduce_fwd: the two passes of ops.h's deterministic sum, in double: pass 1 on up to
 * HOOP_CUDA_PARTIALS blocks of HOOP_CUDA_SUM_THREADS threads, each block a contiguous
 * slice of at least REDUCE_MIN_CHUNK floats (so a small tensor is one block, a large one
 * fills the device); pass 2 one block. The order differs from the CPU's index order, so
 * the two agree to double rounding, well below f32's; it is the same on every run. This
 * file also owns the partials' scratch (hoop__cuda_partials) and pass 2
 * (hoop__cuda_partials_finish), which softmax.cu's loss and optim.cu's sqnorm share.
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

#define REDUCE_MIN_CHUNK (4 * HOOP_CUDA_SUM_THREADS) /* reduce_fwd: floats per block, at least */
#define REDUCE_BG_ROWS 8    /* bias_grad, inner == 1: row groups per block */
#define REDUCE_BG_PLANE 256 /* bias_grad, inner > 1: threads per channel; a power of two */

// ----- the partials' scratch and pass 2 (ops.h)

hoop_status hoop__cuda_partials(double **part)
{
    static thread_local double *mine;
    if (mine == NULL)
        HOOP_CHECK(hoop__cuda_malloc((void **)&mine, HOOP_CUDA_PARTIALS * sizeof(double)));
    *part = mine;
    return HOOP_OK;
}

/* One block: the partials in a fixed order (each thread a strided share, then the tree). */
static __global__ void reduce_finish_kernel(const double *part, unsigned nparts, float *yf,
                                            double div, double *yd)
{
    __shared__ double reduce_fin_shm[HOOP_CUDA_SUM_THREADS];
    double s = 0.0;
    for (unsigned i = threadIdx.x; i < nparts; i += HOOP_CUDA_SUM_THREADS) s += part[i];
    s = hoop__cuda_block_sum(s, reduce_fin_shm);
    if (threadIdx.x != 0) return;
    if (yf != NULL)
        *yf = (float)(s / div);
    else
        *yd += s;
}

hoop_status hoop__cuda_partials_finish(const double *part, unsigned nparts, float *yf, double div,
                                       double *yd)
{
    HOOP_KLAUNCH_SYNC(reduce_finish_kernel, 1, HOOP_CUDA_SUM_THREADS, 0, hoop__cuda_stream(), part,
                      nparts, yf, div, yd);
    return HOOP_KCHECK("reduce_finish_kernel");
}

// ----- reduce_fwd

/* Pass 1: part[b] = the sum in double of x over block b's slice of chunk floats. */
static __global__ void reduce_part_kernel(double *part, const float *x, size_t n, size_t chunk)
{
    __shared__ double reduce_part_shm[HOOP_CUDA_SUM_THREADS];
    const size_t lo = (size_t)blockIdx.x * chunk, hi = n - lo < chunk ? n : lo + chunk;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += HOOP_CUDA_SUM_THREADS) s += x[i];
    s = hoop__cuda_block_sum(s, reduce_part_shm);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
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
    double *part;
    HOOP_CHECK(hoop__cuda_partials(&part));
    unsigned grid;
    size_t chunk;
    hoop__cuda_partials_shape(count, REDUCE_MIN_CHUNK, &grid, &chunk);
    /* count 0: one block writes a partial 0, so y is 0 (sum) or NaN (mean), as the CPU's */
    HOOP_KLAUNCH_SYNC(reduce_part_kernel, grid, HOOP_CUDA_SUM_THREADS, 0, hoop__cuda_stream(), part,
                      x, count, chunk);
    HOOP_CHECK(HOOP_KCHECK("reduce_part_kernel"));
    return hoop__cuda_partials_finish(part, grid, y, mean ? (double)count : 1.0, NULL);
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
