/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/kern_blas.h -- what a kernel source that calls cuBLAS includes: cublas_v2.h under
 * nvcc, the host execution layer's stand-in (src/cuda/hx_blas.h) otherwise, and
 * HOOP_CUBLAS_CHECK, which maps a failed call to HOOP_ERR_CUDA naming the call and
 * cuBLAS's status by name (cublasGetStatusName).
 */
#ifndef HOOP_CUDA_KERN_BLAS_H
#define HOOP_CUDA_KERN_BLAS_H

#include "cuda/kern_rt.h"

#ifdef __CUDACC__
#include <cublas_v2.h>
#else
#include "cuda/hx_blas.h"
#endif

#define HOOP_CUBLAS_CHECK(call)                                                                \
    do {                                                                                       \
        cublasStatus_t s_ = (call);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return HOOP_ERROR(HOOP_ERR_CUDA, "%s failed: %s", #call, cublasGetStatusName(s_)); \
    } while (0)

#endif /* HOOP_CUDA_KERN_BLAS_H */
