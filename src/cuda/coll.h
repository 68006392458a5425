/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/coll.h -- the collectives' work on the device (internal; C and C++): the
 * reduction of two buffers for every dtype and op, which the GPU path of the executor
 * (issue 13) runs after a chunk lands, and which gives the same bits as the host's
 * (src/collectives/reduce.c; both compute each element with reduce_elem.h).
 *
 * Thread-safety: as any launch on a stream (src/cuda/ctx.h).
 */
#ifndef HOOP_CUDA_COLL_H
#define HOOP_CUDA_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/ctx.h"
#include "hoop/collectives.h"
#include "hoop/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct hoop__memops;

/* The collectives' table of the backend module (HOOP__BACKEND_COLL, src/core/backend.h),
 * which the collectives find through hoop__cuda_backend: the module's code is reached
 * only through it (libhoop does not link CUDA). Every entry binds the calling thread to
 * the worker's device first (src/cuda/ctx.h). */
struct hoop__cuda_coll {
    size_t size; /* sizeof(struct hoop__cuda_coll) of the module's build */
    /* Where p points (cudaPointerGetAttributes): HOOP__MEM_CUDA (device or managed
     * memory), HOOP__MEM_PINNED (page-locked host memory: cudaMallocHost or
     * cudaHostRegister), HOOP__MEM_HOST (anything else). Never fails: an error reads as
     * host memory (CUDA's own answer for a pointer it does not know). */
    int (*mem_kind)(const void *p);
    /* A memory-operation table (src/collectives/memops.h) on a stream of its own: copies
     * (cudaMemcpyAsync, any direction), the reduction of coll_reduce.cu, each followed by
     * an event the test polls (cudaEventQuery); DIRECT jobs run hoop__cuda_coll_direct
     * over copies the device reaches (shared_alloc's memory, mapped by ipc_open). */
    hoop_status (*memops_open)(void (*wake)(void *), void *wake_arg, struct hoop__memops **out);
    /* Page-locks [p, p + bytes) so kernels can read it and copies run asynchronously
     * (cudaHostRegister); unregister undoes it. HOOP_ERR_CUDA naming the call. */
    hoop_status (*host_register)(void *p, size_t bytes);
    void (*host_unregister)(void *p);
    /* Device memory from the caching allocator (src/cuda/alloc.h): its errors. */
    hoop_status (*dev_alloc)(void **p, size_t bytes);
    void (*dev_free)(void *p);
    /* dst[i] = src[i] / divisor for count 16-bit values, rounded once, on the device, and
     * waits for it (an average's pre-division, as hoop__half_prescale on the host), on a
     * stream of the module's own that no user's work can hold (the progress thread's). */
    hoop_status (*half_prescale)(hoop_dtype dtype, void *dst, const void *src, size_t count,
                                 int divisor);
    /* dst = src (bytes, any memory kinds) on the compute stream, after the work queued
     * there, and waits for it. Not for the progress thread (a user's work on the compute
     * stream may wait for the very call it runs): it copies through memops_open's table. */
    hoop_status (*copy)(void *dst, const void *src, size_t bytes);

    /* The stream form of the collectives (hoop_*_stream, include/hoop/collectives.h);
     * these entries exist where size covers them (HOOP__CUDA_COLL_HAS). */
    /* A 32-bit flag in page-locked host memory that the device reads (*flag: its host
     * address), 0 at first, for stream_enter's waits; flag_free(NULL) does nothing.
     * HOOP_ERR_CUDA naming the call. */
    hoop_status (*flag_alloc)(uint32_t **flag);
    void (*flag_free)(uint32_t *flag);
    /* On the caller's thread, at the call: issues to stream (a cudaStream_t; NULL is the
     * legacy stream) an event after the work queued so far (*start, for stream_started),
     * then a wait that holds the work issued after it until *flag reaches value (the
     * driver's cuStreamWaitValue32, GEQ: a cyclic comparison, so the counter may wrap).
     * The thread does not wait. HOOP_ERR_UNSUPPORTED when the driver has no stream
     * memory operations (named; the collectives then run their stream calls as blocking
     * ones), HOOP_ERR_USAGE when stream is being captured (a captured call goes through
     * stream_capture: another thread began a capture meanwhile); HOOP_ERR_CUDA naming the
     * call (nothing is then left to free; an event already issued is harmless). */
    hoop_status (*stream_enter)(void *stream, uint32_t *flag, uint32_t value, void **start);
    /* Polls start (cudaEventQuery; never blocks): 1 when the work issued before it has
     * finished, 0 while it has not; an execution failure is 1 with *st = HOOP_ERR_CUDA
     * (message set), else *st = HOOP_OK. start is freed when it returns 1. */
    int (*stream_started)(void *start, hoop_status *st);
    /* Frees a start that stream_started has not finished (the call failed first). */
    void (*start_free)(void *start);
    /* *flag = value with release order: every wait up to value passes. Any thread. */
    void (*flag_write)(uint32_t *flag, uint32_t value);

    /* Device memory that the ranks of a node map (hoop_comm_alloc_shared_cuda,
     * src/collectives/shared_cuda.c); these entries exist where size covers them
     * (HOOP__CUDA_COLL_HAS). shared_alloc: *p = bytes of zeroed device memory from
     * cudaMalloc itself, not the caching allocator (a CUDA IPC handle names a whole
     * allocation, and this one must go back to CUDA when freed, not to a cache that
     * would hand it out while peers still map it); HOOP_ERR_NOMEM when the device is
     * full, HOOP_ERR_CUDA naming the call. shared_free: cudaFree (which waits for the
     * device; NULL does nothing); HOOP_ERR_CUDA naming it when it fails (the memory is
     * then given up all the same). */
    hoop_status (*shared_alloc)(void **p, size_t bytes);
    hoop_status (*shared_free)(void *p);
    /* CUDA IPC: ipc_export fills handle (HOOP__CUDA_IPC_HANDLE_BYTES) for the allocation
     * holding p (cudaIpcGetMemHandle); ipc_open maps, in this process, the allocation a
     * handle from another process names and sets *p to its base
     * (cudaIpcOpenMemHandle with lazy peer access: the same pointer again, counted, for a
     * handle already open here); ipc_close undoes one ipc_open (cudaIpcCloseMemHandle).
     * HOOP_ERR_CUDA naming the call (a handle of this process cannot be opened in it:
     * its ranks use the pointers themselves). */
    hoop_status (*ipc_export)(void *p, void *handle);
    hoop_status (*ipc_open)(const void *handle, void **p);
    void (*ipc_close)(void *p);

    /* Capture of the stream form into CUDA graphs (src/collectives/capture.c). */
    /* *on = 1 when stream is being captured (cudaStreamIsCapturing), else 0.
     * HOOP_ERR_CUDA naming the stream when its capture was invalidated by an earlier
     * error, or the call failed. */
    hoop_status (*stream_capturing)(void *stream, int *on);
    /* On the capturing thread: adds to stream's capture a host node that runs fire(arg)
     * at each replay (on a CUDA thread: fire may not call CUDA), then a wait node that
     * holds the rest of the replay until *flag == 1 (the driver's cuStreamWaitValue32,
     * EQ); and gives the graph being captured a reference to arg (a user object) whose
     * release calls drop(arg) once the graph and every executable graph made from it are
     * destroyed and their launches have run (on a CUDA thread: no CUDA either). *taken = 1
     * once the graph holds that reference (drop will then be called, even after a later
     * failure here), else 0 and the caller keeps it. Errors: HOOP_ERR_UNSUPPORTED when the
     * driver has no stream memory operations or cannot capture them, HOOP_ERR_CUDA naming
     * the call. */
    hoop_status (*stream_capture)(void *stream, uint32_t *flag, void (*fire)(void *),
                                  void (*drop)(void *), void *arg, int *taken);
    /* A captured call's flag: a 32-bit word of page-locked memory (its own cache line),
     * from a process-wide pool of pages that are kept for the process's life; flag_put
     * returns one to the pool without calling CUDA (any thread, a CUDA thread's callback
     * too). *flag is 0 when handed out. HOOP_ERR_CUDA naming cudaMallocHost. */
    hoop_status (*gflag_get)(uint32_t **flag);
    void (*gflag_put)(uint32_t *flag);
    /* Sets the calling thread's stream-capture mode (cudaThreadExchangeStreamCaptureMode;
     * the values are cudaStreamCaptureMode's: 2 relaxed lets a capturing thread allocate)
     * and returns the one it replaces, or -1 when the call failed. */
    int (*capture_mode)(int mode);

    /* Streams and graphs for a program of the collectives' (hoop-bench -G; tests). */
    /* A non-blocking stream on the rank's device; stream_free accepts NULL; stream_sync
     * waits for the work issued so far, up to HOOP_TIMEOUT (HOOP_ERR_TIMEOUT naming the
     * stream; HOOP_ERR_CUDA on an execution failure). */
    hoop_status (*stream_new)(void **stream);
    void (*stream_free)(void *stream);
    hoop_status (*stream_sync)(void *stream);
    /* Capture (cudaStreamBeginCapture, thread-local mode) of what the calling thread
     * issues to stream; graph_end ends it and instantiates the graph (*graph, an
     * executable graph); graph_launch issues it to stream; graph_free destroys it (NULL
     * accepted; launches still queued run first, as CUDA defers). Errors: HOOP_ERR_CUDA
     * naming the call; graph_end's HOOP_ERR_UNSUPPORTED when the capture broke. */
    hoop_status (*graph_begin)(void *stream);
    hoop_status (*graph_end)(void *stream, void **graph);
    hoop_status (*graph_launch)(void *graph, void *stream);
    void (*graph_free)(void *graph);
};

/* Bytes of a CUDA IPC memory handle (cudaIpcMemHandle_t). */
#define HOOP__CUDA_IPC_HANDLE_BYTES 64
/* The most copies the device direct reduction combines (its pointers are kernel
 * parameters: 512 bytes); more ranks on a node get no IPC mapping (the memory stays
 * plain device memory, and collectives on it are staged). */
#define HOOP__CUDA_DIRECT_MAX_RANKS 64

/* Whether table t (of t->size bytes) has entry e (for a module older than this build). */
#define HOOP__CUDA_COLL_HAS(t, e) \
    ((t)->size >= offsetof(struct hoop__cuda_coll, e) + sizeof((t)->e) && (t)->e != NULL)

/* dst[i] = a[i] (op) b[i] for i < count, on stream s (returns once queued). dst may
 * alias a or b exactly (not partially); all three are device memory (or memory the
 * device can reach: pinned host). divisor > 0 with HOOP_OP_AVG divides each result
 * before its one rounding, as hoop__reduce does; op may also be the executor's internal
 * saturating sum (HOOP_OP_COUNT_, for 16-bit types). Integers wrap; f16 / bf16 combine
 * in f32, rounded once to nearest even; MIN / MAX propagate NaN. On the same inputs the
 * result is bitwise the host's, except which NaN a NaN-producing operation makes (the
 * hardware's default NaN: unspecified, as include/hoop/collectives.h says).
 * Errors: HOOP_ERR_INVALID for an unknown dtype or op, or count * size overflowing;
 * HOOP_ERR_CUDA naming the kernel when the launch fails. count 0 launches nothing. */
hoop_status hoop__cuda_coll_reduce(hoop_dtype dtype, hoop_op op, void *dst, const void *a,
                                   const void *b, size_t count, int divisor, hoop__cuda_stream_t s);

/* dst[i] = src[i] / divisor for count f16 / bf16 values, each computed in f32 and rounded
 * once (hoop__half_prescale's rule), on stream s. HOOP_ERR_INVALID for another dtype or
 * divisor <= 0; HOOP_ERR_CUDA naming the kernel. */
hoop_status hoop__cuda_coll_prescale(hoop_dtype dtype, void *dst, const void *src, size_t count,
                                     int divisor, hoop__cuda_stream_t s);

/* The direct algorithm's reduction (src/collectives/direct.c) of bytes [off, off + bytes)
 * of the n copies bufs[q] of a buffer (device memory this device reaches: its own, or
 * mapped through CUDA IPC), on stream s (returns once queued): each element combined from
 * bufs[me] on in ring order, f16 / bf16 through an f64 accumulator, an average divided
 * once, as hoop__direct_reduce does on the host (the same bits), written into bufs[me]
 * and, when copy_out, into every other copy. off and bytes are multiples of the element
 * size. HOOP_ERR_INVALID for an unknown dtype or op, n outside [1,
 * HOOP__CUDA_DIRECT_MAX_RANKS], a NULL copy or a misaligned range; HOOP_ERR_CUDA naming
 * the kernel when the launch fails. bytes 0 launches nothing. */
hoop_status hoop__cuda_coll_direct(hoop_dtype dtype, hoop_op op, char *const *bufs, int n, int me,
                                   size_t off, size_t bytes, int copy_out, hoop__cuda_stream_t s);

/* The table above, filled in (coll_memops.cu). */
extern const struct hoop__cuda_coll hoop__cuda_coll_table;

/* For tests of the stream form (tests/check_coll_stream.c): the few CUDA runtime calls a
 * test makes on streams of its own, in the module's CUDA (under make check, the host
 * layer's instance inside the module, which a test cannot otherwise reach). The module
 * exports it as HOOP__BACKEND_TEST_RT. Each returns the cudaError_t as an int (0:
 * success); the streams are non-blocking; memcpy is cudaMemcpyDefault. set_lazy and
 * queued are the host layer's hooks (hx.h), NULL in a real CUDA build. */
struct hoop__cuda_test_rt {
    size_t size; /* sizeof(struct hoop__cuda_test_rt) of the module's build */
    int (*stream_create)(void **s);
    int (*stream_destroy)(void *s);
    int (*stream_sync)(void *s);
    int (*memset_async)(void *p, int value, size_t bytes, void *s);
    int (*memcpy_async)(void *dst, const void *src, size_t bytes, void *s);
    void (*set_lazy)(int on);
    unsigned long (*queued)(void *s);
    /* stream_enter's wait alone: work issued to s after it waits until *flag (from
     * flag_alloc) reaches value; an int status (HOOP_OK, or stream_enter's errors). */
    int (*wait_value)(void *s, uint32_t *flag, uint32_t value);
    /* The host layer's hoop__hx_set_devices (count devices of bytes each: a nearly full
     * device); NULL in a real CUDA build. */
    void (*set_devices)(int count, size_t bytes);
    /* The stream of a table memops_open made (a test makes it wait, wait_value, and sees
     * its close keep its deadline). */
    void *(*memops_stream)(struct hoop__memops *m);
    /* The host layer's hoop__hx_set_queues (streams made from now on share n hardware
     * queues); NULL in a real CUDA build. */
    void (*set_queues)(int n);
};
typedef const struct hoop__cuda_test_rt *(*hoop__backend_test_rt_fn)(void);
#define HOOP__BACKEND_TEST_RT "hoop_backend_test_rt"
extern const struct hoop__cuda_test_rt hoop__cuda_test_rt_table;

#ifdef __cplusplus
}
#endif

#endif /* HOOP_CUDA_COLL_H */
