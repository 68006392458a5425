/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx_blas.h -- the host execution layer's stand-in for the few cuBLAS calls hoop
 * makes (src/cuda/hx.h has the rest of the layer). Same conventions as cuBLAS: column-major
 * matrices, cublasOperation_t transposes, leading dimensions, alpha and beta by pointer
 * (host pointer mode), the same argument checks (CUBLAS_STATUS_INVALID_VALUE for a negative
 * size or a leading dimension smaller than its matrix's rows, and nothing computed), and the
 * same status codes (cublas_api.h's values). The product is computed by OpenBLAS
 * (cblas_sgemm, column-major), so an operand-order or leading-dimension mistake in a
 * launcher gives the same wrong answer or error here as on the GPU.
 * Not modelled: TF32 rounding (the math mode is kept and read back, the product is plain
 * f32), streams (the product runs at once), workspace and handle limits.
 *
 * Thread-safety: a handle is used by one thread at a time, as cuBLAS asks.
 */
#ifndef HOOP_CUDA_HX_BLAS_H
#define HOOP_CUDA_HX_BLAS_H

#include "cuda/hx.h"

enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
};
typedef struct hoop__hx_blas *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
/* As cuBLAS's: also puts the handle back on its default workspace pool (cublasSetWorkspace
 * must follow it for a workspace of the caller's). */
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
/* The caller's workspace for the handle's later calls: CUBLAS_STATUS_INVALID_VALUE when it
 * is not 256-byte aligned, or NULL with a size (cuBLAS's checks). Kept, not used here. */
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *workspace, size_t bytes);
/* Accepts cuBLAS's modes (default, tensor op, pedantic, TF32), optionally with the
 * disallow-reduced-precision flag; anything else is CUBLAS_STATUS_INVALID_VALUE. */
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *mode);
/* The status's name, "CUBLAS_STATUS_INVALID_VALUE" (cuBLAS's cublasGetStatusName). */
const char *cublasGetStatusName(cublasStatus_t st);
/* For tests (C linkage): the workspace the calling thread's last SGEMM ran with (its
 * handle's cublasSetWorkspace since the last cublasSetStream), NULL and 0 for cuBLAS's
 * default pool. */
extern "C" void hoop__hx_blas_last_workspace(void **workspace, size_t *bytes);
/* C(m, n) = alpha op(A) op(B) + beta C, column-major; op(A) is m x k, op(B) k x n. */
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc);

/* batch GEMMs C_i = alpha op(A_i) op(B_i) + beta C_i, X_i = X + i * strideX (elements; a
 * stride 0 shares the matrix), one after another, as cublasSgemmStridedBatched. */
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long strideA, const float *B, int ldb,
                                         long long strideB, const float *beta, float *C, int ldc,
                                         long long strideC, int batch);

#endif /* HOOP_CUDA_HX_BLAS_H */
