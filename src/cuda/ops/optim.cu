/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/optim.cu -- the optimizers' entries of the kernel table: SGD (momentum,
 * Nesterov, weight decay, dampening), AdamW, and the squared norm behind clipping by
 * global norm.
 *
 * sgd and adamw: one thread per element, a grid-stride loop, the CPU entry's arithmetic
 * in its order (kern_cpu.c); the scalars that depend on the step (the learning rate,
 * SGD's first-step factors, AdamW's bias corrections, in double as torch's Python floats)
 * are computed on the host by optim.c and read here from device memory (struct
 * hoop__step_scalars), so a captured graph uses each replay's. nvcc may contract a * b + c
 * into one FMA, so on a GPU a result may differ from the CPU's in the last places; under
 * the host layer it is the same. SGD's first step computes 0 buf + d with buf zeroed, as
 * the CPU entry.
 *
 * clip_scale: coef = max_norm / (sqrt(*sq) + 1e-6) in f32, as hoop_clip_grad_norm on the
 * host, computed by every thread from the double *sq; g *= coef when coef < 1 or NaN.
 *
 * sqnorm: *sq += sum of g^2, each square exact in double, by ops.h's two passes: pass 1
 * on up to HOOP_CUDA_PARTIALS blocks, each a contiguous slice of at least
 * OPTIM_SQNORM_CHUNK elements (each thread a strided share in double, then the block's
 * fixed tree), pass 2 one block that adds the partials in a fixed tree and the total to
 * *sq. The order differs from the CPU's index order, so the two agree to double rounding
 * (relative ~1e-15), but it is the same on every run and every rank: DDP's replicas must
 * clip alike, bit for bit (atomics across blocks would add in whatever order the blocks
 * finish).
 *
 * Accumulate contract: the optimizers update p, buf, m and v in place; sqnorm adds (+=)
 * into *sq (zeroed by the caller once per clip).
 */
#include "cuda/ops/ops.h"

#define OPTIM_BLOCK 256
#define OPTIM_SQNORM_CHUNK (4 * HOOP_CUDA_SUM_THREADS) /* sqnorm: elements per block, at least */

static __global__ void sgd_kernel(float *p, const float *g, float *buf, size_t n,
                                  const struct hoop__step_scalars *s, float wd, float mu,
                                  int nesterov)
{
    const float lr = s->lr, keep = s->keep, take = s->take;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float d = g[i] + wd * p[i];
        if (buf == NULL) {
            p[i] -= lr * d;
            continue;
        }
        const float b = keep * buf[i] + take * d;
        buf[i] = b;
        p[i] -= lr * (nesterov ? d + mu * b : b);
    }
}

static __global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                    float b1, float one_b1, float b2, float one_b2, float eps,
                                    const struct hoop__step_scalars *s)
{
    const float step_size = s->step_size, bc2_sqrt = s->bc2_sqrt, decay = s->decay;
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

/* Pass 1: part[b] = the sum in double of g^2 over block b's slice of chunk elements. */
static __global__ void sqnorm_part_kernel(double *part, const float *g, size_t n, size_t chunk)
{
    __shared__ double optim_sqnorm_shm[HOOP_CUDA_SUM_THREADS];
    const size_t lo = (size_t)blockIdx.x * chunk, hi = n - lo < chunk ? n : lo + chunk;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += HOOP_CUDA_SUM_THREADS) s += (double)g[i] * g[i];
    s = hoop__cuda_block_sum(s, optim_sqnorm_shm);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

extern "C" hoop_status hoop__cuda_sgd(const struct hoop__sgd_args *a,
                                      const struct hoop__step_scalars *s, float *p, const float *g,
                                      float *buf, size_t count)
{
    if (a == NULL || s == NULL || (count > 0 && (p == NULL || g == NULL)))
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda sgd: args, scalars, p and g must be set");
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(sgd_kernel, hoop__cuda_grid(count, OPTIM_BLOCK), OPTIM_BLOCK, 0,
                 hoop__cuda_stream(), p, g, buf, count, s, a->weight_decay, a->momentum,
                 a->nesterov);
    return HOOP_KCHECK("sgd_kernel");
}

extern "C" hoop_status hoop__cuda_adamw(const struct hoop__adamw_args *a,
                                        const struct hoop__step_scalars *s, float *p,
                                        const float *g, float *m, float *v, size_t count)
{
    if (a == NULL || s == NULL || (count > 0 && (p == NULL || g == NULL || m == NULL || v == NULL)))
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda adamw: args, scalars, p, g, m and v must be set");
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(adamw_kernel, hoop__cuda_grid(count, OPTIM_BLOCK), OPTIM_BLOCK, 0,
                 hoop__cuda_stream(), p, g, m, v, count, a->beta1, 1.0f - a->beta1, a->beta2,
                 1.0f - a->beta2, a->eps, s);
    return HOOP_KCHECK("adamw_kernel");
}

extern "C" hoop_status hoop__cuda_sqnorm(double *sq, const float *g, size_t count)
{
    if (sq == NULL || (count > 0 && g == NULL))
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda sqnorm: sq and g must be set");
    if (count == 0) return HOOP_OK;
    double *part;
    HOOP_CHECK(hoop__cuda_partials(&part));
    unsigned grid;
    size_t chunk;
    hoop__cuda_partials_shape(count, OPTIM_SQNORM_CHUNK, &grid, &chunk);
    HOOP_KLAUNCH_SYNC(sqnorm_part_kernel, grid, HOOP_CUDA_SUM_THREADS, 0, hoop__cuda_stream(), part,
                      g, count, chunk);
    HOOP_CHECK(HOOP_KCHECK("sqnorm_part_kernel"));
    return hoop__cuda_partials_finish(part, grid, NULL, 1.0, sq);
}

static __global__ void clip_scale_kernel(float *g, size_t n, const double *sq, float max_norm)
{
    const float coef = max_norm / ((float)sqrt(*sq) + 1e-6f);
    if (coef >= 1.0f) return;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        g[i] *= coef;
}

extern "C" hoop_status hoop__cuda_clip_scale(float *g, size_t count, const double *sq,
                                             float max_norm)
{
    if (sq == NULL || (count > 0 && g == NULL))
        return HOOP_ERROR(HOOP_ERR_INVALID, "cuda clip_scale: sq and g must be set");
    if (count == 0) return HOOP_OK;
    HOOP_KLAUNCH(clip_scale_kernel, hoop__cuda_grid(count, OPTIM_BLOCK), OPTIM_BLOCK, 0,
                 hoop__cuda_stream(), g, count, sq, max_norm);
    return HOOP_KCHECK("clip_scale_kernel");
}
