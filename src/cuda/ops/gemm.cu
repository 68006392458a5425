/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ops/gemm.cu -- the table's row-major GEMM through cuBLAS's column-major SGEMM.
 *
 * A row-major matrix with row stride ld is, read column-major, its transpose with leading
 * dimension ld. So the row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T:
 * cuBLAS gets B first and A second, each with its own transpose flag, and the sizes N, M, K.
 * TF32 is off unless HOOP_CUDA_TF32=1 (ctx.cu), so results stay within f32 tolerance of
 * OpenBLAS's.
 */
#include "cuda/ops/ops.h"

extern "C" hoop_status hoop__cuda_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha,
                                       const float *A, int lda, const float *B, int ldb, float beta,
                                       float *C, int ldc)
{
    if (M == 0 || N == 0) return HOOP_OK;
    cublasHandle_t h;
    HOOP_CHECK(hoop__cuda_blas(&h));
    HOOP_CUBLAS_CHECK(cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A,
                                  lda, &beta, C, ldc));
    return HOOP_OK;
}
