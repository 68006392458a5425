/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/pool.cu -- max pooling over planes (H, W) -> (OH, OW), a kernel x kernel
 * window, the stride given, no padding.
 *
 * pool_fwd: one thread per output element; it walks its window in row-major order and
 * keeps the first maximum (strict >) or the last NaN (as PyTorch), so y and arg (the
 * maximum's offset in the input plane) are the CPU's bit for bit, ties and NaN included.
 *
 * pool_bwd: dx (planes, H*W) (+)= dy scattered to arg, as a gather: one thread per input
 * element (h, w) of every plane visits the outputs whose windows hold it, oh from
 * ceil((h - kernel + 1) / stride) to floor(h / stride) (clamped to 0..OH-1) and ow
 * likewise, in row-major output order, and adds dy of those whose arg is (h, w). So each
 * input receives its terms in output order, starting from 0 (or its old value with acc),
 * which is exactly the CPU's scatter order: equal to it bit for bit, with no atomics and
 * the same bits on every run. Every element is written, so no zeroing pass; all planes *
 * H * W elements run in parallel, each visiting ceil(kernel / stride)^2 windows at most
 * (one for the usual kernel 2, stride 2). The alternatives were worse: a scatter per
 * output needs float atomics where windows overlap (stride < kernel), which add in a
 * different order each run; one thread per plane (before) has only N * C threads, each
 * walking its plane serially.
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
                if (v > m || v != v) {
                    m = v;
                    best = at;
                }
            }
        y[i] = m;
        arg[i] = (int32_t)best;
    }
}

/* The first output index (row or column) whose window, kernel wide at stride, holds
 * input index h: ceil((h - kernel + 1) / stride), at least 0. */
static __device__ __forceinline__ int64_t pool_first_window(int64_t h, int kernel, int stride)
{
    const int64_t d = h - kernel + 1;
    return d <= 0 ? 0 : (d + stride - 1) / stride;
}

/* One thread per input element: dx (+)= dy of the windows that chose it, in output order. */
static __global__ void pool_bwd_kernel(float *dx, const float *dy, const int32_t *arg, size_t n,
                                       int64_t H, int64_t W, int64_t OH, int64_t OW, int kernel,
                                       int stride, int acc)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int64_t w = (int64_t)(i % (size_t)W), r = (int64_t)(i / (size_t)W);
        const int64_t h = r % H, p = r / H, at = h * W + w;
        const float *dyp = dy + p * OH * OW;
        const int32_t *ap = arg + p * OH * OW;
        const int64_t oh_end = h / stride + 1 < OH ? h / stride + 1 : OH;
        const int64_t ow_end = w / stride + 1 < OW ? w / stride + 1 : OW;
        const int64_t ow0 = pool_first_window(w, kernel, stride);
        float v = acc ? dx[i] : 0.0f;
        for (int64_t oh = pool_first_window(h, kernel, stride); oh < oh_end; oh++)
            for (int64_t ow = ow0; ow < ow_end; ow++)
                if (ap[oh * OW + ow] == at) v += dyp[oh * OW + ow];
        dx[i] = v;
    }
}

/* HOOP_ERR_INVALID naming entry when the windows do not fit the planes. */
static hoop_status pool_check(const char *entry, int64_t H, int64_t W, int64_t OH, int64_t OW,
                              int kernel, int stride)
{
    if (kernel < 1 || stride < 1 || OH < 0 || OW < 0 || H < 0 || W < 0 ||
        (OH > 0 && (OH - 1) * stride + kernel > H) || (OW > 0 && (OW - 1) * stride + kernel > W))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "cuda %s: kernel %d, stride %d, output %lldx%lld does not fit "
                          "the input %lldx%lld",
                          entry, kernel, stride, (long long)OH, (long long)OW, (long long)H,
                          (long long)W);
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_pool_fwd(float *y, int32_t *arg, const float *x, size_t planes,
                                           int64_t H, int64_t W, int64_t OH, int64_t OW, int kernel,
                                           int stride)
{
    HOOP_CHECK(pool_check("pool_fwd", H, W, OH, OW, kernel, stride));
    const size_t n = planes * (size_t)OH * (size_t)OW;
    if (n == 0) return HOOP_OK;
    HOOP_KLAUNCH(pool_fwd_kernel, hoop__cuda_grid(n, POOL_BLOCK), POOL_BLOCK, 0,
                 hoop__cuda_stream(), y, arg, x, n, H, W, OH, OW, kernel, stride);
    return HOOP_KCHECK("pool_fwd_kernel");
}

extern "C" hoop_status hoop__cuda_pool_bwd(float *dx, const float *dy, const int32_t *arg,
                                           size_t planes, int64_t H, int64_t W, int64_t OH,
                                           int64_t OW, int kernel, int stride, int acc)
{
    HOOP_CHECK(pool_check("pool_bwd", H, W, OH, OW, kernel, stride));
    const size_t n = planes * (size_t)H * (size_t)W;
    if (n == 0) return HOOP_OK;
    HOOP_KLAUNCH(pool_bwd_kernel, hoop__cuda_grid(n, POOL_BLOCK), POOL_BLOCK, 0,
                 hoop__cuda_stream(), dx, dy, arg, n, H, W, OH, OW, kernel, stride, acc);
    return HOOP_KCHECK("pool_bwd_kernel");
}
