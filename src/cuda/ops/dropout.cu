/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/dropout.cu -- inverted dropout's forward: each thread computes its element's
 * uniform from the Philox4x32-10 stream (src/core/philox.h) at (seed, offset + i), exactly
 * as the CPU table does, so both devices draw the same mask. Writes (=) y and the mask.
 * (One Philox block serves four elements; computing it once per element costs four times
 * the arithmetic and keeps the kernel a plain map -- dropout is memory-bound.)
 */
#include "core/philox.h"
#include "cuda/ops/ops.h"

#define DROPOUT_BLOCK 256

static __global__ void dropout_fwd_kernel(float *y, float *mask, const float *x, size_t n, float p,
                                          float scale, const uint64_t *seed_p, uint64_t offset)
{
    const uint64_t seed = *seed_p;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float m = hoop__philox_uniform(seed, offset + i) < p ? 0.0f : scale;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

extern "C" hoop_status hoop__cuda_dropout_fwd(float *y, float *mask, const float *x, size_t count,
                                              float p, const uint64_t *seed, uint64_t offset)
{
    if (seed == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "cuda dropout_fwd: seed is NULL");
    if (!(p > 0.0f && p < 1.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda dropout_fwd: p=%g is outside (0, 1)", (double)p);
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(dropout_fwd_kernel, hoop__cuda_grid(count, DROPOUT_BLOCK), DROPOUT_BLOCK, 0,
                 hoop__cuda_stream(), y, mask, x, count, p, 1.0f / (1.0f - p), seed, offset);
    return HOOP_KCHECK("dropout_fwd_kernel");
}
