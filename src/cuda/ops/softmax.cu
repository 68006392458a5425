/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/softmax.cu -- softmax over rows and softmax cross-entropy with label
 * smoothing (Szegedy et al. 2016, as PyTorch's label_smoothing): softmax_fwd, softmax_bwd,
 * ce_fwd, ce_bwd of the kernel table.
 *
 * Rows: one warp per row (SOFTMAX_WARPS rows per block, a grid-stride loop over rows), for
 * rows of any length: each lane walks the columns lane, lane + 32, ..., and the warp
 * combines its lanes with butterfly shuffles. softmax_fwd is the CPU's stable form: the
 * row's maximum m first, then s = sum exp(x - m), then y = exp(x - m) * (1 / s).
 * softmax_bwd: dot = sum dy y per row, dx = y (dy - dot).
 *
 * The loss of ce_fwd is one float in device memory: the mean over rows of (1 - eps) nll +
 * eps mean_c(-log p_c), nll = lse - x[label] with lse = m + log s, each row's loss and
 * their sum in double, as the CPU does. One kernel writes probs and the rows' losses, on
 * many blocks: block b of grid G takes the contiguous rows [b * chunk, (b + 1) * chunk)
 * (chunk >= SOFTMAX_CE_WARPS, so each warp has a row; G <= HOOP_CUDA_PARTIALS), a warp per
 * row as above, each warp's rows in order, then the block's warps in a fixed tree into
 * partial b; pass 2 (ops.h, hoop__cuda_partials_finish) adds the partials in a fixed tree
 * and divides by N. No atomics, G from N alone: the same bits on every run, and probs
 * the same as softmax_fwd's. A label outside 0..C-1 (the op checks them) gives a NaN
 * loss, never a read outside x.
 *
 * Accumulate contract (autograd_impl.h): softmax_bwd and ce_bwd with acc add into dx
 * (+=), without it write (=); softmax_fwd and ce_fwd write.
 */
#include "cuda/ops/ops.h"

#define SOFTMAX_WARPS 4                               /* rows per block of the row kernels */
#define SOFTMAX_CE_WARPS (HOOP_CUDA_SUM_THREADS / 32) /* ce_fwd: warps per block */
#define SOFTMAX_CE_BLOCK 256                          /* ce_bwd: one thread per element */
#define SOFTMAX_FULL_MASK 0xffffffffu

static __device__ __forceinline__ float softmax_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(SOFTMAX_FULL_MASK, v, o);
        v = w > v ? w : v;
    }
    return v;
}

template <class T> static __device__ __forceinline__ T softmax_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(SOFTMAX_FULL_MASK, v, o);
    return v;
}

/* The row's maximum m and s = sum exp(x - m), the same in every lane of the warp. */
static __device__ __forceinline__ void softmax_row_stats(const float *xr, size_t C, unsigned lane,
                                                         float *m_out, float *s_out)
{
    float m = -INFINITY;
    for (size_t c = lane; c < C; c += 32) m = xr[c] > m ? xr[c] : m;
    m = softmax_warp_max(m);
    float s = 0.0f;
    for (size_t c = lane; c < C; c += 32) s += expf(xr[c] - m);
    *m_out = m;
    *s_out = softmax_warp_sum(s);
}

static __global__ void softmax_fwd_kernel(float *y, const float *x, size_t rows, size_t C)
{
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (size_t r = (size_t)blockIdx.x * SOFTMAX_WARPS + warp; r < rows;
         r += (size_t)gridDim.x * SOFTMAX_WARPS) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        float m, s;
        softmax_row_stats(xr, C, lane, &m, &s);
        const float inv = 1.0f / s;
        for (size_t c = lane; c < C; c += 32) yr[c] = expf(xr[c] - m) * inv;
    }
}

static __global__ void softmax_bwd_kernel(float *dx, const float *y, const float *dy, size_t rows,
                                          size_t C, int acc)
{
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (size_t r = (size_t)blockIdx.x * SOFTMAX_WARPS + warp; r < rows;
         r += (size_t)gridDim.x * SOFTMAX_WARPS) {
        const float *yr = y + r * C, *gr = dy + r * C;
        float *dr = dx + r * C;
        float dot = 0.0f;
        for (size_t c = lane; c < C; c += 32) dot += gr[c] * yr[c];
        dot = softmax_warp_sum(dot);
        for (size_t c = lane; c < C; c += 32) {
            float v = yr[c] * (gr[c] - dot);
            dr[c] = acc ? dr[c] + v : v;
        }
    }
}

/* Pass 1 of ce_fwd: probs of block b's chunk rows (as softmax_fwd_kernel), and part[b] =
 * the sum of their smoothed nll (see the top). */
static __global__ void softmax_ce_part_kernel(double *part, float *probs, const float *x,
                                              const int32_t *labels, size_t N, size_t C, float eps,
                                              size_t chunk)
{
    __shared__ double softmax_ce_shm[HOOP_CUDA_SUM_THREADS];
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const size_t lo = (size_t)blockIdx.x * chunk, hi = N - lo < chunk ? N : lo + chunk;
    double total = 0.0; /* this warp's rows, in lane 0 */
    for (size_t r = lo + warp; r < hi; r += SOFTMAX_CE_WARPS) {
        const float *xr = x + r * C;
        float *pr = probs + r * C;
        float m, s;
        softmax_row_stats(xr, C, lane, &m, &s);
        const float inv = 1.0f / s, lse = m + logf(s);
        double mean_nll = 0.0; /* - sum over classes of log p_c */
        for (size_t c = lane; c < C; c += 32) {
            pr[c] = expf(xr[c] - m) * inv;
            if (eps > 0.0f) mean_nll += (double)lse - xr[c];
        }
        if (eps > 0.0f) mean_nll = softmax_warp_sum(mean_nll);
        if (lane == 0) {
            const int32_t y = labels[r];
            double nll = (y >= 0 && (size_t)y < C) ? (double)lse - xr[y] : (double)NAN;
            if (eps > 0.0f) nll = (1.0 - eps) * nll + eps * mean_nll / (double)C;
            total += nll;
        }
    }
    total = hoop__cuda_block_sum(total, softmax_ce_shm);
    if (threadIdx.x == 0) part[blockIdx.x] = total;
}

/* dx (+)= scale (probs - off), less scale (on - off) in the label's column. */
static __global__ void softmax_ce_bwd_kernel(float *dx, const float *probs, const int32_t *labels,
                                             const float *dloss, size_t N, size_t C, float off,
                                             float on, int acc)
{
    const size_t n = N * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float scale = dloss[0] / (float)N;
        const size_t r = i / C, c = i - r * C;
        float v = scale * (probs[i] - off);
        v = acc ? dx[i] + v : v;
        if ((int64_t)c == (int64_t)labels[r]) v -= scale * (on - off);
        dx[i] = v;
    }
}

static unsigned softmax_row_grid(size_t rows)
{
    return hoop__cuda_grid(rows, SOFTMAX_WARPS);
}

extern "C" hoop_status hoop__cuda_softmax_fwd(float *y, const float *x, size_t rows, size_t C)
{
    if (rows == 0 || C == 0) return HOOP_OK;
    HOOP_KLAUNCH_SYNC(softmax_fwd_kernel, softmax_row_grid(rows), SOFTMAX_WARPS * 32, 0,
                      hoop__cuda_stream(), y, x, rows, C);
    return HOOP_KCHECK("softmax_fwd_kernel");
}

extern "C" hoop_status hoop__cuda_softmax_bwd(float *dx, const float *y, const float *dy,
                                              size_t rows, size_t C, int acc)
{
    if (rows == 0 || C == 0) return HOOP_OK;
    HOOP_KLAUNCH_SYNC(softmax_bwd_kernel, softmax_row_grid(rows), SOFTMAX_WARPS * 32, 0,
                      hoop__cuda_stream(), dx, y, dy, rows, C, acc);
    return HOOP_KCHECK("softmax_bwd_kernel");
}

extern "C" hoop_status hoop__cuda_ce_fwd(float *loss, float *probs, const float *x,
                                         const int32_t *labels, size_t N, size_t C, float eps)
{
    if (N == 0 || C == 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda ce_fwd: logits (%zu, %zu) have no entries", N, C);
    double *part;
    HOOP_CHECK(hoop__cuda_partials(&part));
    unsigned grid;
    size_t chunk;
    hoop__cuda_partials_shape(N, SOFTMAX_CE_WARPS, &grid, &chunk);
    HOOP_KLAUNCH_SYNC(softmax_ce_part_kernel, grid, HOOP_CUDA_SUM_THREADS, 0, hoop__cuda_stream(),
                      part, probs, x, labels, N, C, eps, chunk);
    HOOP_CHECK(HOOP_KCHECK("softmax_ce_part_kernel"));
    return hoop__cuda_partials_finish(part, grid, loss, (double)N, NULL);
}

extern "C" hoop_status hoop__cuda_ce_bwd(float *dx, const float *probs, const int32_t *labels,
                                         const float *dloss, size_t N, size_t C, float eps, int acc)
{
    if (N == 0 || C == 0) return HOOP_OK;
    const float off = eps / (float)C, on = 1.0f - eps + off;
    HOOP_KLAUNCH(softmax_ce_bwd_kernel, hoop__cuda_grid(N * C, SOFTMAX_CE_BLOCK), SOFTMAX_CE_BLOCK,
                 0, hoop__cuda_stream(), dx, probs, labels, dloss, N, C, off, on, acc);
    return HOOP_KCHECK("softmax_ce_bwd_kernel");
}
