/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/elementwise.cu -- the element-wise entries of the kernel table: fill,
 * axpy-or-copy, add, scale, and the backward of sum/mean and of dropout.
 *
 * One thread per element, a grid-stride loop beyond CUDA's grid limit. Accumulate contract
 * (autograd_impl.h): with acc the result is added (+=), without it written (=).
 */
#include "cuda/ops/ops.h"

#define EW_BLOCK 256

static __global__ void fill_kernel(float *dst, size_t n, float v)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

/* dst (+)= a * src (+ b when b is set): axpy-or-copy (b NULL, a 1), add (acc 0), scale. */
static __global__ void axpby_kernel(float *dst, const float *src, const float *b, float a, size_t n,
                                    int acc)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = b ? a * src[i] + b[i] : a * src[i]; /* no + 0: -0 stays -0 */
        dst[i] = acc ? dst[i] + v : v;
    }
}

/* dx (+)= dy[0] * scale, or dx (+)= dy * mask. The product is rounded before the sum, as
 * the CPU's is: __fmul_rn is never contracted into an FMA, which nvcc does by default
 * (--fmad=true) with a plain dx + dy * mask, one rounding instead of two: a last-bit
 * difference from the CPU's result. */
static __global__ void bcast_kernel(float *dx, const float *dy, const float *mask, float scale,
                                    size_t n, int acc)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = mask ? __fmul_rn(dy[i], mask[i]) : __fmul_rn(dy[0], scale);
        dx[i] = acc ? dx[i] + v : v;
    }
}

extern "C" hoop_status hoop__cuda_fill(float *dst, size_t count, float value)
{
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(fill_kernel, hoop__cuda_grid(count, EW_BLOCK), EW_BLOCK, 0, hoop__cuda_stream(),
                 dst, count, value);
    return HOOP_KCHECK("fill_kernel");
}

extern "C" hoop_status hoop__cuda_axpy_or_copy(float *dst, const float *src, size_t count, int acc)
{
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(axpby_kernel, hoop__cuda_grid(count, EW_BLOCK), EW_BLOCK, 0, hoop__cuda_stream(),
                 dst, src, (const float *)NULL, 1.0f, count, acc);
    return HOOP_KCHECK("axpby_kernel (axpy_or_copy)");
}

extern "C" hoop_status hoop__cuda_add(float *y, const float *a, const float *b, size_t count)
{
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(axpby_kernel, hoop__cuda_grid(count, EW_BLOCK), EW_BLOCK, 0, hoop__cuda_stream(),
                 y, a, b, 1.0f, count, 0);
    return HOOP_KCHECK("axpby_kernel (add)");
}

extern "C" hoop_status hoop__cuda_scale(float *g, size_t count, float coef)
{
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(axpby_kernel, hoop__cuda_grid(count, EW_BLOCK), EW_BLOCK, 0, hoop__cuda_stream(),
                 g, g, (const float *)NULL, coef, count, 0);
    return HOOP_KCHECK("axpby_kernel (scale)");
}

extern "C" hoop_status hoop__cuda_reduce_bwd(float *dx, const float *dy, float scale, size_t count,
                                             int acc)
{
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(bcast_kernel, hoop__cuda_grid(count, EW_BLOCK), EW_BLOCK, 0, hoop__cuda_stream(),
                 dx, dy, (const float *)NULL, scale, count, acc);
    return HOOP_KCHECK("bcast_kernel (reduce_bwd)");
}

extern "C" hoop_status hoop__cuda_dropout_bwd(float *dx, const float *dy, const float *mask,
                                              size_t count, int acc)
{
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(bcast_kernel, hoop__cuda_grid(count, EW_BLOCK), EW_BLOCK, 0, hoop__cuda_stream(),
                 dx, dy, mask, 1.0f, count, acc);
    return HOOP_KCHECK("bcast_kernel (dropout_bwd)");
}
