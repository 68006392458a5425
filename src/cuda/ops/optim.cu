/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/optim.cu -- the optimizers' entries of the kernel table: SGD (momentum,
 * Nesterov, weight decay, dampening), AdamW, and the squared norm behind clipping by
 * global norm.
 *
 * sgd and adamw: one thread per element, a grid-stride loop, the CPU entry's arithmetic
 * in its order (kern_cpu.c); the scalars that depend only on the step (AdamW's bias
 * corrections, in double as torch's Python floats) are computed once on the host, as the
 * CPU entry does. nvcc may contract a * b + c into one FMA, so on a GPU a result may
 * differ from the CPU's in the last places; under the host layer it is the same. SGD's
 * first step sets buf = d without reading buf (torch clones d), where the CPU entry
 * computes 0 buf + d: the same for every finite buf.
 *
 * sqnorm: *sq += sum of g^2, each square exact in double, in ONE block of
 * OPTIM_SQNORM_BLOCK threads: each thread sums a strided slice in double, the block
 * reduces them in shared memory (a tree) and thread 0 adds the total. The order differs
 * from the CPU's index order, so the two agree to double rounding (relative ~1e-15), but
 * it is the same on every run and every rank: DDP's replicas must clip alike, bit for bit
 * (atomics across blocks would add in whatever order the blocks finish). One block is
 * enough for a parameter's worth of squares; a multi-block version in fixed order needs
 * scratch memory from the device layer.
 *
 * Accumulate contract: the optimizers update p, buf, m and v in place; sqnorm adds (+=)
 * into *sq (zeroed by the caller once per clip).
 */
#include "cuda/ops/ops.h"

#define OPTIM_BLOCK 256
#define OPTIM_SQNORM_BLOCK 1024 /* sqnorm's one block (a power of two) */

static __global__ void sgd_kernel(float *p, const float *g, float *buf, size_t n, float lr,
                                  float wd, float mu, float take, int first, int nesterov)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float d = g[i] + wd * p[i];
        if (buf == NULL) {
            p[i] -= lr * d;
            continue;
        }
        const float b = first ? d : mu * buf[i] + take * d;
        buf[i] = b;
        p[i] -= lr * (nesterov ? d + mu * b : b);
    }
}

static __global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                    float b1, float one_b1, float b2, float one_b2, float eps,
                                    float step_size, float bc2_sqrt, float decay)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float gi = g[i];
        const float pi = p[i] * decay;
        const float mi = m[i] * b1 + one_b1 * gi;
        const float vi = v[i] * b2 + one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi + -step_size * (mi / denom);
    }
}

/* One block of OPTIM_SQNORM_BLOCK threads, HOOP_KLAUNCH_SYNC. */
static __global__ void sqnorm_kernel(double *sq, const float *g, size_t n)
{
    __shared__ double optim_part[OPTIM_SQNORM_BLOCK];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)g[i] * g[i];
    optim_part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned h = OPTIM_SQNORM_BLOCK / 2; h > 0; h /= 2) {
        if (threadIdx.x < h) optim_part[threadIdx.x] += optim_part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) *sq += optim_part[0];
}

extern "C" hoop_status hoop__cuda_sgd(const struct hoop__sgd_args *a, float *p, const float *g,
                                      float *buf, size_t count)
{
    if (a == NULL || (count > 0 && (p == NULL || g == NULL)))
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda sgd: args, p and g must be set");
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(sgd_kernel, hoop__cuda_grid(count, OPTIM_BLOCK), OPTIM_BLOCK, 0,
                 hoop__cuda_stream(), p, g, buf, count, a->lr, a->weight_decay, a->momentum,
                 1.0f - a->dampening, a->first, a->nesterov);
    return HOOP_KCHECK("sgd_kernel");
}

extern "C" hoop_status hoop__cuda_adamw(const struct hoop__adamw_args *a, float *p, const float *g,
                                        float *m, float *v, size_t count)
{
    if (a == NULL || (count > 0 && (p == NULL || g == NULL || m == NULL || v == NULL)))
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda adamw: args, p, g, m and v must be set");
    if (a->step < 1)
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda adamw: step %lld, must be >= 1",
                          (long long)a->step);
    if (count == 0) return HOOP_OK;
    /* as the CPU entry: the bias corrections in double, used as f32 scalars */
    const double bc1 = 1.0 - pow(a->beta1, (double)a->step);
    const double bc2 = 1.0 - pow(a->beta2, (double)a->step);
    const float step_size = (float)(a->lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    const float decay = (float)(1.0 - (double)a->lr * a->weight_decay);
    HOOP_KLAUNCH(adamw_kernel, hoop__cuda_grid(count, OPTIM_BLOCK), OPTIM_BLOCK, 0,
                 hoop__cuda_stream(), p, g, m, v, count, a->beta1, 1.0f - a->beta1, a->beta2,
                 1.0f - a->beta2, a->eps, step_size, bc2_sqrt, decay);
    return HOOP_KCHECK("adamw_kernel");
}

extern "C" hoop_status hoop__cuda_sqnorm(double *sq, const float *g, size_t count)
{
    if (sq == NULL || (count > 0 && g == NULL))
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda sqnorm: sq and g must be set");
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH_SYNC(sqnorm_kernel, 1, OPTIM_SQNORM_BLOCK, 0, hoop__cuda_stream(), sq, g, count);
    return HOOP_KCHECK("sqnorm_kernel");
}
