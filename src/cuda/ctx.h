/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ctx.h -- the CUDA backend's per-thread context: the stream its kernels run on,
 * its cuBLAS handle, and device memory helpers (internal; C and C++).
 *
 * This step keeps one context per OS thread on the current device and the default stream;
 * the device layer (one context per worker on cuda:{local_rank}, a compute and a copy
 * stream, a caching allocator) replaces it without changing these calls.
 *
 * Thread-safety: everything is per calling thread.
 */
#ifndef HOOP_CUDA_CTX_H
#define HOOP_CUDA_CTX_H

#include <stddef.h>

#include "hoop/status.h"

#ifdef __cplusplus
#include "cuda/kern_blas.h"
/* The stream the backend's kernels run on. */
cudaStream_t hoop__cuda_stream(void);
/* The thread's cuBLAS handle on that stream, made on first use (TF32 off unless
 * HOOP_CUDA_TF32=1); HOOP_ERR_CUDA naming the call when cuBLAS cannot start. */
hoop_status hoop__cuda_blas(cublasHandle_t *h);
extern "C" {
#endif

/* Device memory: bytes on the current device (HOOP_ERR_NOMEM naming the size when there
 * is none), freed by hoop__cuda_free (NULL is a no-op). */
hoop_status hoop__cuda_malloc(void **p, size_t bytes);
void hoop__cuda_free(void *p);
/* Copies bytes host -> device (to_device 1) or device -> host (0) and waits for it. */
hoop_status hoop__cuda_copy(void *dst, const void *src, size_t bytes, int to_device);
/* Waits for the backend's stream; HOOP_ERR_CUDA with CUDA's message on an execution failure. */
hoop_status hoop__cuda_sync(void);

#ifdef __cplusplus
}
#endif

#endif /* HOOP_CUDA_CTX_H */
