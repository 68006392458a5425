/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/bias.cu -- bias over rows, x viewed as (N, C, inner): the GEMM's starting
 * value (bias_fill) and the bias add. One thread per element; c = (i / inner) % C.
 * Both write (=) their output.
 */
#include "cuda/ops/ops.h"

#define BIAS_BLOCK 256

static __global__ void bias_kernel(float *y, const float *x, const float *bias, size_t n, size_t C,
                                   size_t inner)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float b = bias ? bias[(i / inner) % C] : 0.0f;
        y[i] = x ? x[i] + b : b;
    }
}

static hoop_status bias_launch(float *y, const float *x, const float *bias, size_t N, size_t C,
                               size_t inner, const char *what)
{
    size_t n = N * C * inner;
    if (n == 0) return HOOP_OK;
    HOOP_KLAUNCH(bias_kernel, hoop__cuda_grid(n, BIAS_BLOCK), BIAS_BLOCK, 0, hoop__cuda_stream(), y,
                 x, bias, n, C, inner);
    return HOOP_KCHECK(what);
}

extern "C" hoop_status hoop__cuda_bias_fill(float *y, const float *bias, size_t N, size_t C,
                                            size_t inner)
{
    return bias_launch(y, NULL, bias, N, C, inner, "bias_kernel (bias_fill)");
}

extern "C" hoop_status hoop__cuda_bias_add(float *y, const float *x, const float *bias, size_t N,
                                           size_t C, size_t inner)
{
    return bias_launch(y, x, bias, N, C, inner, "bias_kernel (bias_add)");
}
