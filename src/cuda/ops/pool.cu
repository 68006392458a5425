/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/pool.cu -- max pooling over planes (H, W) -> (OH, OW), a kernel x kernel
 * window, the stride given, no padding.
 *
 * pool_fwd: one thread per output element; it walks its window in row-major order and
 * keeps the first maximum (strict >), so y and arg (the maximum's offset in the input
 * plane) are the CPU's bit for bit, ties included.
 *
 * pool_bwd: dx (planes, in_plane) (+)= dy scattered to arg. Overlapping windows (stride <
 * kernel) send several outputs to one input, and the entry does not know the window, so a
 * gather cannot find them cheaply; atomics would add in a different order each run. So:
 * without acc a first kernel zeroes dx (one thread per element), then one thread per
 * plane adds its plane's outputs in index order, as the CPU does: deterministic and equal
 * to the CPU's bit for bit. The parallelism is the number of planes (N * C), enough for a
 * CNN's batch; a plane's outputs are few (OH * OW).
 *
 * Accumulate contract: pool_fwd writes (=) y and arg; pool_bwd adds (+=) with acc (an
 * activation's later contribution) and writes (=) without.
 */
#include "cuda/ops/ops.h"

#define POOL_BLOCK 256

static __global__ void pool_fwd_kernel(float *y, int32_t *arg, const float *x, size_t n, int64_t H,
                                       int64_t W, int64_t OH, int64_t OW, int kernel, int stride)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int64_t ow = (int64_t)(i % (size_t)OW), r = (int64_t)(i / (size_t)OW);
        const int64_t oh = r % OH, p = r / OH;
        const float *xp = x + p * H * W;
        int64_t best = oh * stride * W + ow * stride;
        float m = xp[best];
        for (int kh = 0; kh < kernel; kh++)
            for (int kw = 0; kw < kernel; kw++) {
                const int64_t at = (oh * stride + kh) * W + ow * stride + kw;
                const float v = xp[at];
                if (v > m) {
                    m = v;
                    best = at;
                }
            }
        y[i] = m;
        arg[i] = (int32_t)best;
    }
}

static __global__ void pool_zero_kernel(float *dx, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dx[i] = 0.0f;
}

/* One thread per plane: dx[p][arg[p][k]] += dy[p][k] for k in order. */
static __global__ void pool_bwd_kernel(float *dx, const float *dy, const int32_t *arg,
                                       size_t planes, size_t in_plane, size_t out_plane)
{
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < planes;
         p += (size_t)gridDim.x * blockDim.x) {
        float *dxp = dx + p * in_plane;
        const float *dyp = dy + p * out_plane;
        const int32_t *ap = arg + p * out_plane;
        for (size_t k = 0; k < out_plane; k++) dxp[ap[k]] += dyp[k];
    }
}

extern "C" hoop_status hoop__cuda_pool_fwd(float *y, int32_t *arg, const float *x, size_t planes,
                                           int64_t H, int64_t W, int64_t OH, int64_t OW, int kernel,
                                           int stride)
{
    if (kernel < 1 || stride < 1 || OH < 0 || OW < 0 ||
        (OH > 0 && (OH - 1) * stride + kernel > H) || (OW > 0 && (OW - 1) * stride + kernel > W))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "cuda pool_fwd: kernel %d, stride %d, output %lldx%lld does not fit "
                          "the input %lldx%lld",
                          kernel, stride, (long long)OH, (long long)OW, (long long)H, (long long)W);
    const size_t n = planes * (size_t)OH * (size_t)OW;
    if (n == 0) return HOOP_OK;
    HOOP_KLAUNCH(pool_fwd_kernel, hoop__cuda_grid(n, POOL_BLOCK), POOL_BLOCK, 0,
                 hoop__cuda_stream(), y, arg, x, n, H, W, OH, OW, kernel, stride);
    return HOOP_KCHECK("pool_fwd_kernel");
}

extern "C" hoop_status hoop__cuda_pool_bwd(float *dx, const float *dy, const int32_t *arg,
                                           size_t planes, size_t in_plane, size_t out_plane,
                                           int acc)
{
    if (!acc && planes * in_plane > 0) {
        HOOP_KLAUNCH(pool_zero_kernel, hoop__cuda_grid(planes * in_plane, POOL_BLOCK), POOL_BLOCK,
                     0, hoop__cuda_stream(), dx, planes * in_plane);
        HOOP_CHECK(HOOP_KCHECK("pool_zero_kernel"));
    }
    if (planes == 0 || out_plane == 0) return HOOP_OK;
    if (in_plane == 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda pool_bwd: %zu outputs per plane but no inputs",
                          out_plane);
    HOOP_KLAUNCH(pool_bwd_kernel, hoop__cuda_grid(planes, POOL_BLOCK), POOL_BLOCK, 0,
                 hoop__cuda_stream(), dx, dy, arg, planes, in_plane, out_plane);
    return HOOP_KCHECK("pool_bwd_kernel");
}
