/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ctx.cu -- the CUDA backend's per-thread context (see ctx.h): stream, cuBLAS
 * handle, device memory and synchronisation.
 *
 * Owns: the thread's cuBLAS handle. Thread-safety: per thread.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/ctx.h"

static thread_local cublasHandle_t blas;

cudaStream_t hoop__cuda_stream(void)
{
    return 0;
}

hoop_status hoop__cuda_blas(cublasHandle_t *h)
{
    if (!blas) {
        HOOP_CUBLAS_CHECK(cublasCreate(&blas));
        const char *tf32 = getenv("HOOP_CUDA_TF32");
        int on = tf32 && strcmp(tf32, "1") == 0;
        HOOP_CUBLAS_CHECK(
            cublasSetMathMode(blas, on ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    }
    HOOP_CUBLAS_CHECK(cublasSetStream(blas, hoop__cuda_stream()));
    *h = blas;
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_malloc(void **p, size_t bytes)
{
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_NOMEM, "cudaMalloc: no device memory for %zu bytes", bytes);
    }
    if (e != cudaSuccess) {
        cudaGetLastError(); /* or the next launch check would blame its kernel */
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaMalloc(%zu bytes) failed: %s", bytes,
                          cudaGetErrorString(e));
    }
    return HOOP_OK;
}

extern "C" void hoop__cuda_free(void *p)
{
    if (p) cudaFree(p);
}

extern "C" hoop_status hoop__cuda_copy(void *dst, const void *src, size_t bytes, int to_device)
{
    if (bytes == 0) return HOOP_OK;
    cudaError_t e =
        cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaMemcpy (%zu bytes, %s) failed: %s", bytes,
                          to_device ? "to the device" : "to the host", cudaGetErrorString(e));
    }
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_sync(void)
{
    cudaError_t e = cudaStreamSynchronize(hoop__cuda_stream());
    if (e != cudaSuccess)
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaStreamSynchronize failed: %s", cudaGetErrorString(e));
    return HOOP_OK;
}
