/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ctx.h -- the CUDA backend's context: one per process (one worker = one process
 * = one GPU), on the device this worker is given, with a compute stream (every kernel of
 * the backend runs there), a copy stream (uploads that overlap the compute), events to
 * order the two without a device-wide synchronisation, and each thread's cuBLAS handle
 * (internal; C and C++). Device memory is src/cuda/alloc.h's caching allocator.
 *
 * The device: HOOP_CUDA_DEVICE when it is set (an index among the devices this process
 * sees, which CUDA_VISIBLE_DEVICES decides), else the worker's local rank modulo the device
 * count (src/core/env.h's contract: LOCAL_RANK, or SLURM_LOCALID in an srun step; 0 outside
 * a distributed job). libhoop reads these variables and HOOP_TIMEOUT, HOOP_CUDA_TF32
 * (hoop__backend_settings, src/core/backend.h): the backend parses none itself. More
 * workers than GPUs is allowed: they share the GPUs round-robin, and one INFO line says so
 * (NCCL refuses this; a one-GPU machine running several workers needs it).
 *
 * Both streams are non-blocking (cudaStreamNonBlocking): they do not wait for CUDA's
 * legacy default stream, and nothing here uses it. Work on one stream that must follow
 * work on the other is ordered with hoop__cuda_stream_wait (an event the second stream
 * waits for, on the device); the host waits for a stream or an event with a deadline
 * (HOOP_TIMEOUT), never with cudaDeviceSynchronize.
 *
 * Thread-safety: every call is thread-safe. The context is made once, by the first call
 * that needs it, from whichever thread; every thread that uses it is bound to its device
 * (cudaSetDevice) on its first call. The cuBLAS handle is per thread.
 */
#ifndef HOOP_CUDA_CTX_H
#define HOOP_CUDA_CTX_H

#include <stddef.h>

#include "cuda/alloc.h"
#include "hoop/status.h"

#ifdef __cplusplus
#include "cuda/kern_blas.h"
typedef cudaStream_t hoop__cuda_stream_t;
typedef cudaEvent_t hoop__cuda_event_t;
/* The thread's cuBLAS handle on the compute stream, made on first use (TF32 off unless
 * HOOP_CUDA_TF32=1) with a workspace of its own (32 MiB on Hopper, 4 MiB before: cuBLAS's
 * recommendation), bound again at each call, so that a GEMM captured into a graph uses it
 * too; HOOP_ERR_CUDA naming the call when cuBLAS cannot start, the allocator's error for
 * the workspace, or the context's error. */
hoop_status hoop__cuda_blas(cublasHandle_t *h);

/* For a call that returns cudaError_t: HOOP_ERR_CUDA naming the call and CUDA's message
 * on failure, after clearing CUDA's last error (so the next launch check does not blame
 * its kernel for it). */
#define HOOP_CUDA_CHECK(call)                                        \
    do {                                                             \
        cudaError_t hoop_ce_ = (call);                               \
        if (hoop_ce_ != cudaSuccess) {                               \
            cudaGetLastError();                                      \
            return HOOP_ERROR(HOOP_ERR_CUDA, "%s failed: %s", #call, \
                              cudaGetErrorString(hoop_ce_));         \
        }                                                            \
    } while (0)
extern "C" {
#else
/* Opaque in C: CUDA's cudaStream_t and cudaEvent_t (pointers), so C code needs no CUDA
 * header. */
typedef struct hoop__cuda_stream_opaque *hoop__cuda_stream_t;
typedef struct hoop__cuda_event_opaque *hoop__cuda_event_t;
#endif

/* The values are cudaMemcpyKind's. */
typedef enum hoop__cuda_copy_kind {
    HOOP_CUDA_HOST_TO_DEVICE = 1,
    HOOP_CUDA_DEVICE_TO_HOST = 2,
    HOOP_CUDA_DEVICE_TO_DEVICE = 3,
} hoop__cuda_copy_kind;

/* Makes the process's context if there is none yet (the rule at the top of this file
 * picks the device) and binds the calling thread to its device. Idempotent and cheap
 * once made. Errors: HOOP_ERR_UNSUPPORTED "no CUDA device ..." with CUDA's message when
 * the process sees none (or the driver is missing or too old); HOOP_ERR_INVALID naming
 * HOOP_CUDA_DEVICE and the device count when it names no device, or libhoop's message
 * (hoop__backend_settings) for a malformed HOOP_TIMEOUT, HOOP_CUDA_DEVICE, HOOP_CUDA_TF32
 * or env:// contract; HOOP_ERR_CUDA naming the call for the rest. A failed call leaves nothing
 * made, and the next call tries again. */
hoop_status hoop__cuda_init(void);

/* The context's device (*dev, its index in this process), its name (NUL-terminated,
 * truncated to name_len) and its memory in bytes (*total_bytes); any output may be NULL.
 * Makes the context when needed: hoop__cuda_init's errors. */
hoop_status hoop__cuda_device_info(int *dev, char *name, size_t name_len, size_t *total_bytes);

/* The compute stream and the copy stream, making the context when needed; NULL (CUDA's
 * legacy stream) when it cannot be made, hoop__cuda_init's error then being the thread's
 * last error. A launcher may call hoop__cuda_stream without checking: its kernel's device
 * memory came from hoop__cuda_malloc, which made the context or failed. */
hoop__cuda_stream_t hoop__cuda_stream(void);
hoop__cuda_stream_t hoop__cuda_copy_stream(void);

/* Work issued to waiter after this call waits, on the device, for the work issued to
 * producer before it (an event recorded on producer that waiter waits for; the host does
 * not wait). waiter and producer are the context's two streams. HOOP_ERR_INVALID for
 * another stream or waiter == producer; HOOP_ERR_CUDA naming the call. */
hoop_status hoop__cuda_stream_wait(hoop__cuda_stream_t waiter, hoop__cuda_stream_t producer);

/* The host waits until the work issued to s so far has finished, polling (a few ms of
 * spinning, then short sleeps) up to HOOP_TIMEOUT. HOOP_ERR_TIMEOUT naming the stream
 * and the deadline when it has not; HOOP_ERR_CUDA with CUDA's message on an execution
 * failure (which CUDA reports here, not at the launch). */
hoop_status hoop__cuda_stream_sync(hoop__cuda_stream_t s);
/* hoop__cuda_stream_sync of the compute stream. */
hoop_status hoop__cuda_sync(void);

/* Events (timing disabled): made on the context's device; free accepts NULL. record
 * marks the work issued to s so far; wait makes s's later work wait for it on the device;
 * sync waits on the host, as hoop__cuda_stream_sync does; done sets *done to 1 when the
 * marked work has finished (0 when not; 1 for an event never recorded). Errors:
 * HOOP_ERR_CUDA naming the call; HOOP_ERR_TIMEOUT from sync. */
hoop_status hoop__cuda_event_new(hoop__cuda_event_t *e);
void hoop__cuda_event_free(hoop__cuda_event_t e);
hoop_status hoop__cuda_event_record(hoop__cuda_event_t e, hoop__cuda_stream_t s);
hoop_status hoop__cuda_event_wait(hoop__cuda_stream_t s, hoop__cuda_event_t e);
hoop_status hoop__cuda_event_sync(hoop__cuda_event_t e);
hoop_status hoop__cuda_event_done(hoop__cuda_event_t e, int *done);

/* Copies bytes host -> device (to_device 1) or device -> host (0) on the compute stream,
 * after the work issued there before, and waits for it (hoop__cuda_sync's errors). */
hoop_status hoop__cuda_copy(void *dst, const void *src, size_t bytes, int to_device);
/* Issues a copy of bytes of the given kind to stream s and returns: the host must not
 * touch src or dst until it has waited for s (or an event recorded after the copy). A
 * copy from or to pinned memory (hoop__cuda_host_alloc) runs asynchronously and may
 * overlap kernels on the other stream; one from pageable memory is staged by CUDA and
 * may return only once the copy is done. HOOP_ERR_INVALID for a kind outside the enum;
 * HOOP_ERR_CUDA naming the call. */
hoop_status hoop__cuda_copy_async(void *dst, const void *src, size_t bytes,
                                  hoop__cuda_copy_kind kind, hoop__cuda_stream_t s);

/* The kernel table's asynchronous-upload entries (src/autograd/kern.h: event_new ..
 * event_sync; an event is a cudaEvent_t as void *): events as hoop__cuda_event_new /
 * _free; upload_async on the copy stream (a wait for after when not NULL, the copy, a
 * record of done when not NULL); download_async on the compute stream; compute_wait and
 * compute_record on the compute stream; event_sync as hoop__cuda_event_sync (HOOP_TIMEOUT).
 * Errors: HOOP_ERR_CUDA naming the call and CUDA's message; hoop__cuda_init's. */
hoop_status hoop__cuda_table_event_new(void **ev);
void hoop__cuda_table_event_free(void *ev);
hoop_status hoop__cuda_upload_async(void *dst, const void *src, size_t bytes, void *after,
                                    void *done);
hoop_status hoop__cuda_download_async(void *dst, const void *src, size_t bytes);
hoop_status hoop__cuda_compute_wait(void *ev);
hoop_status hoop__cuda_compute_record(void *ev);
hoop_status hoop__cuda_table_event_sync(void *ev);

/* The kernel table's stream and timer entries (src/autograd/kern.h: stream_new ..
 * event_elapsed): a non-blocking stream of the context's device; records and waits on it
 * (NULL: the compute stream); events with timing (cudaEventDefault); cudaEventQuery;
 * cudaEventElapsedTime. Errors: HOOP_ERR_CUDA naming the call and CUDA's message,
 * HOOP_ERR_USAGE from event_elapsed while an event has not completed, hoop__cuda_init's. */
hoop_status hoop__cuda_table_stream_new(void **s);
void hoop__cuda_table_stream_free(void *s);
hoop_status hoop__cuda_table_stream_record(void *s, void *ev);
hoop_status hoop__cuda_table_stream_wait(void *s, void *ev);
hoop_status hoop__cuda_table_timer_new(void **ev);
hoop_status hoop__cuda_table_event_query(void *ev, int *done);
hoop_status hoop__cuda_table_event_elapsed(void *a, void *b, double *ms);

#ifdef __cplusplus
}
#endif

#endif /* HOOP_CUDA_CTX_H */
