/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx_backend.cc -- the CUDA backend (context, launchers, table) compiled for the
 * host execution layer: one translation unit that includes every backend source, linked
 * into the tests that compare the CUDA table with the CPU one (tests/check_kern_cuda).
 * A new src/cuda/ops/ file gets one line here; as they share this unit, each file's
 * static functions and macros carry its op's name (EW_BLOCK, bias_launch).
 */
#include "cuda/alloc.cu"
#include "cuda/ctx.cu"
#include "cuda/graph.cu"
#include "cuda/coll_direct.cu"
#include "cuda/coll_memops.cu"
#include "cuda/coll_reduce.cu"
#include "cuda/kern_cuda.cu"
#include "cuda/ops/bias.cu"
#include "cuda/ops/dropout.cu"
#include "cuda/ops/elementwise.cu"
#include "cuda/ops/gemm.cu"
#include "cuda/ops/im2col.cu"
#include "cuda/ops/optim.cu"
#include "cuda/ops/pool.cu"
#include "cuda/ops/reduce.cu"
#include "cuda/ops/softmax.cu"
#include "cuda/ops/unary.cu"
