/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/kern_cuda.cu -- the CUDA kernel table (struct hoop__kern, src/autograd/kern.h):
 * one launcher per entry (src/cuda/ops/), every entry a CUDA kernel or cuBLAS.
 *
 * Built twice: by nvcc for the GPU, and by the host's C++ compiler under the host
 * execution layer (src/cuda/hx_backend.cc) for make check, where tests/check_kern_cuda
 * compares every entry with the CPU table.
 */
#include "cuda/alloc.h"
#include "cuda/ctx.h"
#include "cuda/ops/ops.h"

/* In kern.h's order, one entry a line (positional: nvcc's C++17 has no designated
 * initializers; each slot's type still checks its launcher). */
// clang-format off
extern "C" const struct hoop__kern hoop__kern_cuda = {
    sizeof(struct hoop__kern),
    "cuda",
    HOOP_DEVICE_CUDA,
    hoop__cuda_describe,
    hoop__cuda_malloc,
    hoop__cuda_free,
    hoop__cuda_copy,
    hoop__cuda_sync,
    hoop__cuda_table_mem_stats,
    hoop__cuda_table_event_new,
    hoop__cuda_table_event_free,
    hoop__cuda_upload_async,
    hoop__cuda_download_async,
    hoop__cuda_compute_wait,
    hoop__cuda_compute_record,
    hoop__cuda_table_event_sync,
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
    hoop__cuda_dropout_fwd,
    hoop__cuda_dropout_bwd,
    hoop__cuda_im2col,
    hoop__cuda_col2im,
    hoop__cuda_conv_scratch,
    hoop__cuda_conv_fwd,
    hoop__cuda_conv_bwd,
    hoop__cuda_pool_fwd,
    hoop__cuda_pool_bwd,
    hoop__cuda_sgd,
    hoop__cuda_adamw,
    hoop__cuda_sqnorm,
    hoop__cuda_scale,
    hoop__cuda_clip_scale,
    hoop__cuda_host_alloc,
    hoop__cuda_host_free,
    hoop__cuda_upload,
    hoop__cuda_graph_begin,
    hoop__cuda_graph_end,
    hoop__cuda_graph_launch,
    hoop__cuda_graph_sync,
    hoop__cuda_graph_free,
    hoop__cuda_table_stream_new,
    hoop__cuda_table_stream_free,
    hoop__cuda_table_stream_record,
    hoop__cuda_table_stream_wait,
    hoop__cuda_table_timer_new,
    hoop__cuda_table_event_query,
    hoop__cuda_table_event_elapsed,
};
// clang-format on
