/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/device.cu -- CUDA device queries and a launch smoke test.
 *
 * Accumulate contract: hoop__cuda_smoke writes x[i] = x[i] + 1 (in place).
 * Every CUDA call is checked and mapped to HOOP_ERR_CUDA naming the call.
 */
#include <cuda_runtime.h>

#include "config.h"
#include "core/check.h"
#include "cuda/device.h"

#define HOOP_CUDA_CHECK(call)                                                                 \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess)                                                                \
            return HOOP_ERROR(HOOP_ERR_CUDA, "%s failed: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

extern "C" hoop_status hoop__cuda_device_count(int *count)
{
    *count = 0;
    cudaError_t e = cudaGetDeviceCount(count);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        *count = 0;
        cudaGetLastError();
        return HOOP_OK;
    }
    HOOP_CUDA_CHECK(e);
    return HOOP_OK;
}

static __global__ void add_one(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    x[i] += 1.0f;
}

extern "C" hoop_status hoop__cuda_smoke(float *x, int count)
{
    if (count <= 0) return HOOP_ERROR(HOOP_ERR_INVALID, "count=%d must be positive", count);
    float *d = NULL;
    size_t bytes = (size_t)count * sizeof(float);
    HOOP_CUDA_CHECK(cudaMalloc(&d, bytes));
    hoop_status st = HOOP_OK;
    cudaError_t e = cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        add_one<<<(count + 255) / 256, 256>>>(d, count);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(x, d, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) st = HOOP_ERROR(HOOP_ERR_CUDA, "smoke kernel: %s", cudaGetErrorString(e));
    cudaFree(d);
    return st;
}
