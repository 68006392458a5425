/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/kern_cuda.cu -- the CUDA kernel table (struct hoop__kern, src/autograd/kern.h):
 * one launcher per entry (src/cuda/ops/). Entries whose kernel is not written yet return
 * HOOP_ERR_UNSUPPORTED naming the entry, so the table is complete (hoop__kern_validate)
 * while the backend grows.
 *
 * Built twice: by nvcc for the GPU, and by the host's C++ compiler under the host
 * execution layer (src/cuda/hx_backend.cc) for make check, where tests/check_kern_cuda
 * compares every entry with the CPU table.
 */
#include "cuda/ops/ops.h"

#define TODO(entry) \
    HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "the cuda kernel table has no %s kernel yet", entry)

static hoop_status todo_dropout_fwd(float *, float *, const float *, size_t, float,
                                    struct hoop_rng *)
{
    return TODO("dropout_fwd");
}
static hoop_status todo_im2col(float *, const float *, const struct hoop__conv_geom *)
{
    return TODO("im2col");
}
static hoop_status todo_col2im(float *, const float *, const struct hoop__conv_geom *)
{
    return TODO("col2im");
}
static hoop_status todo_pool_fwd(float *, int32_t *, const float *, size_t, int64_t, int64_t,
                                 int64_t, int64_t, int, int)
{
    return TODO("pool_fwd");
}
static hoop_status todo_pool_bwd(float *, const float *, const int32_t *, size_t, size_t, size_t,
                                 int)
{
    return TODO("pool_bwd");
}
static hoop_status todo_sgd(const struct hoop__sgd_args *, float *, const float *, float *, size_t)
{
    return TODO("sgd");
}
static hoop_status todo_adamw(const struct hoop__adamw_args *, float *, const float *, float *,
                              float *, size_t)
{
    return TODO("adamw");
}
static hoop_status todo_sqnorm(double *, const float *, size_t)
{
    return TODO("sqnorm");
}

extern "C" const struct hoop__kern hoop__kern_cuda = {
    sizeof(struct hoop__kern),
    "cuda",
    hoop__cuda_gemm,
    hoop__cuda_fill,
    hoop__cuda_axpy_or_copy,
    hoop__cuda_add,
    hoop__cuda_bias_fill,
    hoop__cuda_bias_add,
    hoop__cuda_bias_grad,
    hoop__cuda_unary_fwd,
    hoop__cuda_unary_bwd,
    hoop__cuda_softmax_fwd,
    hoop__cuda_softmax_bwd,
    hoop__cuda_ce_fwd,
    hoop__cuda_ce_bwd,
    hoop__cuda_reduce_fwd,
    hoop__cuda_reduce_bwd,
    todo_dropout_fwd,
    hoop__cuda_dropout_bwd,
    todo_im2col,
    todo_col2im,
    todo_pool_fwd,
    todo_pool_bwd,
    todo_sgd,
    todo_adamw,
    todo_sqnorm,
    hoop__cuda_scale,
};
