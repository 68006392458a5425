/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/unary.cu -- the element-wise activations of the kernel table: unary_fwd and
 * unary_bwd for relu, gelu (tanh approximation, Hendrycks & Gimpel 2016), tanh and sigmoid.
 *
 * One thread per element, a grid-stride loop beyond CUDA's grid limit, one kernel per
 * activation (a template on the kind, chosen by the launcher). The formulas are the CPU
 * table's (src/autograd/kern_cpu.c), operation for operation: sigmoid takes exp of a
 * non-positive argument only; the backward reads the saved output y (relu, tanh, sigmoid)
 * or the input x (gelu).
 *
 * Accumulate contract (autograd_impl.h): unary_bwd with acc adds dy * f' into dx (+=),
 * without it writes it (=), in the same pass, and leaves dy as it was (the output's
 * gradient, which hoop_tensor_grad returns).
 */
#include "cuda/ops/ops.h"

#define UNARY_BLOCK 256
#define UNARY_GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define UNARY_GELU_C 0.044715f

template <int K> static __device__ __forceinline__ float unary_f(float v)
{
    if (K == HOOP__UNARY_RELU) return v <= 0.0f ? 0.0f : v; /* NaN stays NaN */
    if (K == HOOP__UNARY_GELU)
        return 0.5f * v * (1.0f + tanhf(UNARY_GELU_K * (v + UNARY_GELU_C * v * v * v)));
    if (K == HOOP__UNARY_TANH) return tanhf(v);
    float e = expf(-fabsf(v)); /* sigmoid */
    return v >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}

/* dy * f'(x), from x (gelu) or the saved output y (the others). */
template <int K> static __device__ __forceinline__ float unary_df(float d, float x, float y)
{
    if (K == HOOP__UNARY_RELU) return y <= 0.0f ? 0.0f : d;
    if (K == HOOP__UNARY_GELU) {
        float t = tanhf(UNARY_GELU_K * (x + UNARY_GELU_C * x * x * x));
        float du = UNARY_GELU_K * (1.0f + 3.0f * UNARY_GELU_C * x * x);
        return d * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
    if (K == HOOP__UNARY_TANH) return d * (1.0f - y * y);
    return d * y * (1.0f - y); /* sigmoid */
}

template <int K> static __global__ void unary_fwd_kernel(float *y, const float *x, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = unary_f<K>(x[i]);
}

/* x or y may be NULL where the kind does not read it. */
template <int K>
static __global__ void unary_bwd_kernel(float *dx, const float *dy, const float *x, const float *y,
                                        size_t n, int acc)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = unary_df<K>(dy[i], K == HOOP__UNARY_GELU ? x[i] : 0.0f,
                              K == HOOP__UNARY_GELU ? 0.0f : y[i]);
        dx[i] = acc ? dx[i] + g : g;
    }
}

static hoop_status unary_check(enum hoop__unary kind, const char *entry)
{
    if ((unsigned)kind >= HOOP__UNARY_COUNT)
        return HOOP_ERROR(HOOP_ERR_INTERNAL, "cuda kernels: %s: unary kind %d is unknown", entry,
                          (int)kind);
    return HOOP_OK;
}

template <int K> static hoop_status unary_fwd_launch(float *y, const float *x, size_t n)
{
    HOOP_KLAUNCH(unary_fwd_kernel<K>, hoop__cuda_grid(n, UNARY_BLOCK), UNARY_BLOCK, 0,
                 hoop__cuda_stream(), y, x, n);
    return HOOP_KCHECK("unary_fwd_kernel");
}

template <int K>
static hoop_status unary_bwd_launch(float *dx, const float *dy, const float *x, const float *y,
                                    size_t n, int acc)
{
    HOOP_KLAUNCH(unary_bwd_kernel<K>, hoop__cuda_grid(n, UNARY_BLOCK), UNARY_BLOCK, 0,
                 hoop__cuda_stream(), dx, dy, x, y, n, acc);
    return HOOP_KCHECK("unary_bwd_kernel");
}

extern "C" hoop_status hoop__cuda_unary_fwd(enum hoop__unary kind, float *y, const float *x,
                                            size_t count)
{
    HOOP_CHECK(unary_check(kind, "unary_fwd"));
    if (count == 0) return HOOP_OK;
    switch (kind) {
    case HOOP__UNARY_RELU: return unary_fwd_launch<HOOP__UNARY_RELU>(y, x, count);
    case HOOP__UNARY_GELU: return unary_fwd_launch<HOOP__UNARY_GELU>(y, x, count);
    case HOOP__UNARY_TANH: return unary_fwd_launch<HOOP__UNARY_TANH>(y, x, count);
    default: return unary_fwd_launch<HOOP__UNARY_SIGMOID>(y, x, count);
    }
}

extern "C" hoop_status hoop__cuda_unary_bwd(enum hoop__unary kind, float *dx, const float *dy,
                                            const float *x, const float *y, size_t count, int acc)
{
    HOOP_CHECK(unary_check(kind, "unary_bwd"));
    if (count == 0) return HOOP_OK;
    switch (kind) {
    case HOOP__UNARY_RELU: return unary_bwd_launch<HOOP__UNARY_RELU>(dx, dy, x, y, count, acc);
    case HOOP__UNARY_GELU: return unary_bwd_launch<HOOP__UNARY_GELU>(dx, dy, x, y, count, acc);
    case HOOP__UNARY_TANH: return unary_bwd_launch<HOOP__UNARY_TANH>(dx, dy, x, y, count, acc);
    default: return unary_bwd_launch<HOOP__UNARY_SIGMOID>(dx, dy, x, y, count, acc);
    }
}
