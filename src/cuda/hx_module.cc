/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx_module.cc -- the CUDA backend as a loadable module built on the host
 * execution layer (libhoop-cuda-hx.so, for make check): the same sources as
 * libhoop-cuda.so, compiled by the host's C++ compiler, so that tests load it through
 * HOOP_CUDA_BACKEND and run whole models with CUDA tensors on a machine without a GPU.
 */
#include "cuda/hx_backend.cc"
#include "cuda/module.cu"
