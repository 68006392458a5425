/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/coll_memops.cu -- the collectives' table of the CUDA backend (coll.h): what a
 * buffer is, and the executor's memory operations on a stream (src/collectives/memops.h).
 *
 * A table instance (one per communicator that moves device buffers) owns a non-blocking
 * stream and a free list of events. Each job is issued to the stream (cudaMemcpyAsync
 * with cudaMemcpyDefault, which unified addressing lets take any pair of pointers, or the
 * reduction kernel) and followed by an event; test() asks the event (cudaEventQuery), so
 * the progress thread never blocks on the GPU. Jobs finish in the order they were issued
 * (one stream), as memops.h promises.
 *
 * Owns: the instance's stream and events. Thread-safety: an instance is used by one
 * progress thread; the other entries are thread-safe.
 */
#include "cuda/kern_rt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collectives/memops.h"
#include "core/clock.h"
#include "cuda/alloc.h"
#include "cuda/coll.h"
#include "cuda/ctx.h"

struct cuda_memop {
    cudaEvent_t ev;
    struct cuda_memop *next; /* on the free list */
};

struct cuda_memops {
    hoop__memops base; /* first: a hoop__memops * is a cuda_memops * */
    cudaStream_t stream;
    struct cuda_memop *free_ops;
};

static hoop_status cm_start(hoop__memops *m, const hoop__memjob *j, hoop__memop **out)
{
    struct cuda_memops *c = (struct cuda_memops *)m;
    *out = NULL;
    HOOP_CHECK(hoop__cuda_init());
    switch (j->kind) {
    case HOOP__MJ_COPY:
        if (j->bytes == 0) return HOOP_OK;
        HOOP_CUDA_CHECK(cudaMemcpyAsync(j->dst, j->a, j->bytes, cudaMemcpyDefault, c->stream));
        break;
    case HOOP__MJ_REDUCE:
        if (j->bytes == 0) return HOOP_OK;
        HOOP_CHECK(hoop__cuda_coll_reduce(j->dtype, j->op, j->dst, j->a, j->b, j->bytes / j->elem,
                                          j->divisor, c->stream));
        break;
    case HOOP__MJ_DIRECT:
        if (j->bytes == 0) return HOOP_OK;
        HOOP_CHECK(hoop__cuda_coll_direct(j->dtype, j->op, j->bufs, j->n, j->me, j->off, j->bytes,
                                          j->copy_out, c->stream));
        break;
    }
    struct cuda_memop *op = c->free_ops;
    if (op) {
        c->free_ops = op->next;
    } else {
        op = (struct cuda_memop *)calloc(1, sizeof(*op));
        if (!op) return HOOP_ERROR(HOOP_ERR_NOMEM, "a CUDA memory operation's record");
        cudaError_t e = cudaEventCreateWithFlags(&op->ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            free(op);
            cudaGetLastError();
            return HOOP_ERROR(HOOP_ERR_CUDA, "cudaEventCreateWithFlags failed: %s",
                              cudaGetErrorString(e));
        }
    }
    cudaError_t e = cudaEventRecord(op->ev, c->stream);
    if (e != cudaSuccess) {
        op->next = c->free_ops;
        c->free_ops = op;
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaEventRecord failed: %s", cudaGetErrorString(e));
    }
    *out = (hoop__memop *)op;
    return HOOP_OK;
}

static hoop_status cm_test(hoop__memops *m, hoop__memop *o, int *done)
{
    struct cuda_memops *c = (struct cuda_memops *)m;
    struct cuda_memop *op = (struct cuda_memop *)o;
    cudaError_t e = cudaEventQuery(op->ev);
    *done = e == cudaSuccess;
    if (e == cudaErrorNotReady) return HOOP_OK;
    op->next = c->free_ops; /* done, or failed: either way the record goes back */
    c->free_ops = op;
    if (e == cudaSuccess) return HOOP_OK;
    cudaGetLastError();
    return HOOP_ERROR(HOOP_ERR_CUDA, "a collective's copy or reduction failed: %s",
                      cudaGetErrorString(e));
}

static hoop_status cm_wait(hoop__memops *m, hoop__memop *o, int64_t timeout_ms)
{
    int64_t deadline = hoop__deadline_ns(timeout_ms);
    for (;;) {
        int done;
        HOOP_CHECK(cm_test(m, o, &done));
        if (done) return HOOP_OK;
        if (hoop__now_ns() > deadline)
            return HOOP_ERROR(HOOP_ERR_TIMEOUT,
                              "a collective's device copy or reduction did not finish within "
                              "%lld ms",
                              (long long)timeout_ms);
        struct timespec nap = {0, 50 * 1000};
        nanosleep(&nap, NULL);
    }
}

/* Waits for the stream (nothing should be in flight; be sure), up to HOOP_TIMEOUT, then
 * frees it and its events. A stream still busy then (a copy or kernel that never ends) is
 * leaked with the instance, and the caller told (memops.h): its work may still touch them
 * and the buffers it was given. */
static hoop_status cm_close(hoop__memops *m)
{
    struct cuda_memops *c = (struct cuda_memops *)m;
    hoop_status st = hoop__cuda_stream_sync(c->stream);
    if (st == HOOP_ERR_TIMEOUT) { /* the error hoop__cuda_stream_sync left says how long */
        HOOP_WARN("cuda: a collectives' memory table's stream is still busy after HOOP_TIMEOUT: "
                  "the table (its stream and events) is leaked, not freed under the device");
        return st;
    }
    if (st != HOOP_OK) /* the device failed (the thread's last error says how): it runs no more */
        HOOP_WARN("cuda: closing a collectives' memory table, its stream failed (status %d)",
                  (int)st);
    while (c->free_ops) {
        struct cuda_memop *op = c->free_ops;
        c->free_ops = op->next;
        cudaEventDestroy(op->ev);
        free(op);
    }
    cudaStreamDestroy(c->stream);
    cudaGetLastError();
    free(c);
    return HOOP_OK;
}

static const hoop__memops_vt cuda_vt = {
    "cuda", 0, cm_start, cm_test, cm_wait, cm_close,
};

static hoop_status cm_open(void (*wake)(void *), void *wake_arg, hoop__memops **out)
{
    *out = NULL;
    HOOP_CHECK(hoop__cuda_init());
    struct cuda_memops *c = (struct cuda_memops *)calloc(1, sizeof(*c));
    if (!c) return HOOP_ERROR(HOOP_ERR_NOMEM, "a CUDA memory-operation table");
    c->base.vt = &cuda_vt;
    c->base.wake = wake; /* not called: the progress thread naps while work is in flight */
    c->base.wake_arg = wake_arg;
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(c);
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaStreamCreateWithFlags failed: %s",
                          cudaGetErrorString(e));
    }
    *out = &c->base;
    return HOOP_OK;
}

static int cm_mem_kind(const void *p)
{
    cudaPointerAttributes a;
    if (!p || hoop__cuda_init() != HOOP_OK) return HOOP__MEM_HOST;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return HOOP__MEM_HOST;
    }
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) return HOOP__MEM_CUDA;
    return a.type == cudaMemoryTypeHost ? HOOP__MEM_PINNED : HOOP__MEM_HOST;
}

static hoop_status cm_host_register(void *p, size_t bytes)
{
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
    return HOOP_OK;
}

static void cm_host_unregister(void *p)
{
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

/* The stream of the progress thread's waited-for work (a 16-bit average's
 * pre-division), made once: not the compute stream, which a user's work may hold
 * behind a stream call's wait (a user stream's, or one the compute stream waits for),
 * and which the progress thread, running the call, must not wait for. */
static cudaStream_t side_stream;
static pthread_mutex_t side_mu = PTHREAD_MUTEX_INITIALIZER;

static hoop_status side(cudaStream_t *s)
{
    HOOP_CHECK(hoop__cuda_init());
    pthread_mutex_lock(&side_mu);
    cudaError_t e =
        side_stream ? cudaSuccess : cudaStreamCreateWithFlags(&side_stream, cudaStreamNonBlocking);
    *s = side_stream;
    pthread_mutex_unlock(&side_mu);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaStreamCreateWithFlags failed: %s",
                          cudaGetErrorString(e));
    }
    return HOOP_OK;
}

static hoop_status cm_half_prescale(hoop_dtype dtype, void *dst, const void *src, size_t count,
                                    int divisor)
{
    cudaStream_t s;
    HOOP_CHECK(side(&s));
    HOOP_CHECK(hoop__cuda_coll_prescale(dtype, dst, src, count, divisor, s));
    return hoop__cuda_stream_sync(s);
}

static hoop_status cm_copy(void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = hoop__cuda_stream();
    if (bytes == 0) return HOOP_OK;
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    return hoop__cuda_stream_sync(s);
}

// ----------------------------------------------------------------- the stream form
/*
 * A collective ordered on a user's stream (hoop_*_stream): at the call, an event on the
 * stream marks the work before it (the progress thread starts the collective once the
 * event has completed, polling it), and a wait for a value of a flag in page-locked host
 * memory holds the work after it; the progress thread stores the value at completion,
 * success or failure. The wait is the driver's cuStreamWaitValue32, found through
 * cudaGetDriverEntryPoint so the module needs no -lcuda; the device polls the host's
 * memory (no kernel, no SM used); the host layer models it (hx.h, "stream memory
 * operations").
 */

#ifdef __CUDACC__
/* cuStreamWaitValue32's type (cuda.h), without cuda.h: CUstream is cudaStream_t's
 * struct, CUdeviceptr an unsigned long long, CUresult an int (0: success). */
typedef int (*wait_value32_fn)(cudaStream_t s, unsigned long long addr, unsigned value,
                               unsigned flags);
#define WAIT_VALUE_GEQ 0x0          /* CU_STREAM_WAIT_VALUE_GEQ */
#define WAIT_VALUE_EQ 0x1           /* CU_STREAM_WAIT_VALUE_EQ */
#define DRV_NOT_SUPPORTED 801       /* CUDA_ERROR_NOT_SUPPORTED */
#define DRV_CAPTURE_UNSUPPORTED 900 /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
#define DRV_CAPTURE_INVALIDATED 901 /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED */

static wait_value32_fn wait_value32;
static cudaError_t wait_value32_err = cudaSuccess;
static pthread_once_t wait_value32_once = PTHREAD_ONCE_INIT;

/* The version-12 symbol (cuStreamWaitValue32_v2: stream memory operations on by default)
 * where the runtime can ask for it; CUDA 11's runtime gets the driver's default. */
static void find_wait_value32(void)
{
    void *fn = NULL;
    int found = 1;
#if CUDART_VERSION >= 12050
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    wait_value32_err =
        cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q);
    found = q == cudaDriverEntryPointSuccess;
#elif CUDART_VERSION >= 12000
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    wait_value32_err = cudaGetDriverEntryPoint("cuStreamWaitValue32", &fn, cudaEnableDefault, &q);
    found = q == cudaDriverEntryPointSuccess;
#else
    wait_value32_err = cudaGetDriverEntryPoint("cuStreamWaitValue32", &fn, cudaEnableDefault);
#endif
    if (wait_value32_err == cudaSuccess && found && fn) wait_value32 = (wait_value32_fn)fn;
    cudaGetLastError();
}

/* A wait on s for *flag to reach value (how: WAIT_VALUE_GEQ) or equal it (WAIT_VALUE_EQ). */
static hoop_status issue_wait(cudaStream_t s, uint32_t *flag, uint32_t value, unsigned how)
{
    void *dev = NULL;
    pthread_once(&wait_value32_once, find_wait_value32);
    if (!wait_value32)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "the CUDA driver has no cuStreamWaitValue32 (%s): the collectives' "
                          "stream form needs stream memory operations (CUDA 12 or later drivers)",
                          cudaGetErrorString(wait_value32_err));
    HOOP_CUDA_CHECK(cudaHostGetDevicePointer(&dev, flag, 0));
    int r = wait_value32(s, (unsigned long long)(uintptr_t)dev, value, how);
    if (r == DRV_NOT_SUPPORTED)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "cuStreamWaitValue32 is not supported on this device or driver "
                          "(CUDA_ERROR_NOT_SUPPORTED): the collectives' stream form needs it");
    if (r == DRV_CAPTURE_UNSUPPORTED || r == DRV_CAPTURE_INVALIDATED)
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "cuStreamWaitValue32 could not be captured into a CUDA graph (CUresult "
                          "%d): this driver cannot capture stream memory operations, which a "
                          "captured collective needs",
                          r);
    if (r != 0) return HOOP_ERROR(HOOP_ERR_CUDA, "cuStreamWaitValue32 failed: CUresult %d", r);
    return HOOP_OK;
}
#else
#define WAIT_VALUE_GEQ HOOP__HX_WAIT_GEQ
#define WAIT_VALUE_EQ HOOP__HX_WAIT_EQ
static hoop_status issue_wait(cudaStream_t s, uint32_t *flag, uint32_t value, unsigned how)
{
    cudaError_t e = hoop__hx_stream_wait_value32(s, flag, value, how);
    if (e == cudaSuccess) return HOOP_OK;
    cudaGetLastError();
    if (e == cudaErrorNotSupported) /* TEST_HX_NO_STREAM_MEMOPS: the CUDA build's message */
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "cuStreamWaitValue32 is not supported on this device or driver "
                          "(CUDA_ERROR_NOT_SUPPORTED): the collectives' stream form needs it");
    return HOOP_ERROR(HOOP_ERR_CUDA, "hoop__hx_stream_wait_value32 failed: %s",
                      cudaGetErrorString(e));
}
#endif

static hoop_status cm_flag_alloc(uint32_t **flag)
{
    void *p = NULL;
    *flag = NULL;
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaMallocHost(&p, 64)); /* a cache line of its own */
    memset(p, 0, 64);
    *flag = (uint32_t *)p;
    return HOOP_OK;
}

static void cm_flag_free(uint32_t *flag)
{
    if (flag && cudaFreeHost(flag) != cudaSuccess) cudaGetLastError();
}

static hoop_status cm_stream_enter(void *stream, uint32_t *flag, uint32_t value, void **start)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaEvent_t ev;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    *start = NULL;
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaStreamIsCapturing(s, &cap));
    if (cap != cudaStreamCaptureStatusNone) /* captured calls go through stream_capture */
        return HOOP_ERROR(HOOP_ERR_USAGE,
                          "stream %p is being captured into a CUDA graph, though it was not when "
                          "the call began (a capture begun by another thread meanwhile?)",
                          stream);
    HOOP_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, s);
    if (e != cudaSuccess) {
        cudaEventDestroy(ev);
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_CUDA,
                          "cudaEventRecord on the caller's stream %p failed: %s (is it a "
                          "stream of this rank's device?)",
                          stream, cudaGetErrorString(e));
    }
    hoop_status st = issue_wait(s, flag, value, WAIT_VALUE_GEQ);
    if (st != HOOP_OK) {
        cudaEventDestroy(ev);
        return st;
    }
    *start = ev;
    return HOOP_OK;
}

static int cm_stream_started(void *start, hoop_status *st)
{
    cudaEvent_t ev = (cudaEvent_t)start;
    *st = HOOP_OK;
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady) return 0;
    cudaEventDestroy(ev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *st = HOOP_ERROR(HOOP_ERR_CUDA,
                         "the work queued on the stream before the collective "
                         "failed: %s",
                         cudaGetErrorString(e));
    }
    return 1;
}

static void cm_start_free(void *start)
{
    if (start && cudaEventDestroy((cudaEvent_t)start) != cudaSuccess) cudaGetLastError();
}

static void cm_flag_write(uint32_t *flag, uint32_t value)
{
#ifdef __CUDACC__
    __atomic_store_n(flag, value, __ATOMIC_RELEASE);
#else
    hoop__hx_write_value32(flag, value); /* the same store, timed for the layer's events */
#endif
}

// ----------------------------------------------------------------- memory ranks map (IPC)

static hoop_status cm_shared_alloc(void **p, size_t bytes)
{
    *p = NULL;
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return HOOP_ERROR(e == cudaErrorMemoryAllocation ? HOOP_ERR_NOMEM : HOOP_ERR_CUDA,
                          "cudaMalloc of %zu bytes of device memory the ranks share: %s", bytes,
                          cudaGetErrorString(e));
    }
    cudaStream_t s = hoop__cuda_stream();
    e = cudaMemsetAsync(*p, 0, bytes, s);
    hoop_status st = e == cudaSuccess ? hoop__cuda_stream_sync(s)
                                      : HOOP_ERROR(HOOP_ERR_CUDA, "cudaMemsetAsync failed: %s",
                                                   cudaGetErrorString(e));
    if (st != HOOP_OK) {
        cudaGetLastError();
        cudaFree(*p);
        *p = NULL;
    }
    return st;
}

static hoop_status cm_shared_free(void *p)
{
    if (p) HOOP_CUDA_CHECK(cudaFree(p));
    return HOOP_OK;
}

static_assert(sizeof(cudaIpcMemHandle_t) == HOOP__CUDA_IPC_HANDLE_BYTES,
              "coll.h's handle size is CUDA's");

static hoop_status cm_ipc_export(void *p, void *handle)
{
    cudaIpcMemHandle_t h;
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaIpcGetMemHandle(&h, p));
    memcpy(handle, &h, sizeof(h));
    return HOOP_OK;
}

static hoop_status cm_ipc_open(const void *handle, void **p)
{
    cudaIpcMemHandle_t h;
    *p = NULL;
    HOOP_CHECK(hoop__cuda_init());
    memcpy(&h, handle, sizeof(h));
    HOOP_CUDA_CHECK(cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess));
    return HOOP_OK;
}

static void cm_ipc_close(void *p)
{
    if (p && cudaIpcCloseMemHandle(p) != cudaSuccess) cudaGetLastError();
}

// ----------------------------------------------------------------- captured calls
/*
 * A collective captured into a CUDA graph (src/collectives/capture.c) is a host node that
 * queues a new call at each replay, then a wait node on a flag of the call's own, which
 * the call's completion sets to 1 and the next replay's host node resets to 0 (so no
 * write node is needed: the host node runs only after the previous replay's wait has
 * passed). The record behind them belongs to the graph through a user object (CUDA C++
 * Programming Guide, "Graph Memory Nodes" and "User Objects": the graph's references are
 * released once it and its executable graphs are destroyed, after their launches).
 */

static hoop_status cm_stream_capturing(void *stream, int *on)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    *on = 0;
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaStreamIsCapturing((cudaStream_t)stream, &cs));
    if (cs == cudaStreamCaptureStatusInvalidated)
        return HOOP_ERROR(HOOP_ERR_CUDA,
                          "stream %p: its capture into a CUDA graph was invalidated by an "
                          "earlier error",
                          stream);
    *on = cs == cudaStreamCaptureStatusActive;
    return HOOP_OK;
}

/* The graph being captured on s (cudaStreamGetCaptureInfo: the graph is its fourth
 * output from CUDA 12 on, _v2's in CUDA 11.3 to 11.8). */
static cudaError_t capture_graph(cudaStream_t s, cudaGraph_t *g)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    *g = NULL;
#if !defined(__CUDACC__) || CUDART_VERSION >= 12000
    cudaError_t e = cudaStreamGetCaptureInfo(s, &cs, &id, g);
#else
    cudaError_t e = cudaStreamGetCaptureInfo_v2(s, &cs, &id, g, NULL, NULL);
#endif
    if (e == cudaSuccess && (cs != cudaStreamCaptureStatusActive || !*g))
        e = cudaErrorStreamCaptureInvalidated;
    return e;
}

static hoop_status cm_stream_capture(void *stream, uint32_t *flag, void (*fire)(void *),
                                     void (*drop)(void *), void *arg, int *taken)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaGraph_t g;
    cudaUserObject_t obj;
    *taken = 0;
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(capture_graph(s, &g));
    /* the graph's reference first: the nodes below may be in the graph even if a later
     * step fails, and they must never outlive arg */
    HOOP_CUDA_CHECK(cudaUserObjectCreate(&obj, arg, drop, 1, cudaUserObjectNoDestructorSync));
    *taken = 1; /* from here on the object's release calls drop(arg) */
    cudaError_t e = cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cudaUserObjectRelease(obj, 1); /* drop(arg), now */
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaGraphRetainUserObject failed: %s",
                          cudaGetErrorString(e));
    }
    HOOP_CUDA_CHECK(cudaLaunchHostFunc(s, fire, arg));
    return issue_wait(s, flag, 1, WAIT_VALUE_EQ);
}

/* The flags of captured calls: 64-byte words of page-locked pages, kept for the process's
 * life (a graph may outlive its comm, and its wait reads the flag at every replay); free
 * words in a list whose capacity always covers every word made, so a put (from a CUDA
 * thread's callback) never allocates. */
#define GFLAG_PAGE 4096
#define GFLAG_STRIDE 64
static pthread_mutex_t gflag_mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t **gflag_free;
static size_t gflag_n, gflag_cap;

static hoop_status cm_gflag_get(uint32_t **flag)
{
    *flag = NULL;
    pthread_mutex_lock(&gflag_mu);
    if (gflag_n > 0) *flag = gflag_free[--gflag_n];
    pthread_mutex_unlock(&gflag_mu);
    if (!*flag) { /* a new page, allocated outside the lock */
        void *p = NULL;
        HOOP_CHECK(hoop__cuda_init());
        HOOP_CUDA_CHECK(cudaMallocHost(&p, GFLAG_PAGE));
        memset(p, 0, GFLAG_PAGE);
        const size_t per = GFLAG_PAGE / GFLAG_STRIDE;
        pthread_mutex_lock(&gflag_mu);
        uint32_t **list = (uint32_t **)realloc(gflag_free, (gflag_cap + per) * sizeof(*list));
        if (list) {
            gflag_free = list;
            gflag_cap += per;
            for (size_t i = 1; i < per; i++)
                gflag_free[gflag_n++] = (uint32_t *)((char *)p + i * GFLAG_STRIDE);
        }
        pthread_mutex_unlock(&gflag_mu);
        if (!list) {
            if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
            return HOOP_ERROR(HOOP_ERR_NOMEM, "no host memory for the captured calls' flags");
        }
        *flag = (uint32_t *)p;
    }
    __atomic_store_n(*flag, 0, __ATOMIC_RELAXED);
    return HOOP_OK;
}

static void cm_gflag_put(uint32_t *flag)
{
    if (!flag) return;
    pthread_mutex_lock(&gflag_mu);
    gflag_free[gflag_n++] = flag; /* gflag_cap counts every word made: room is certain */
    pthread_mutex_unlock(&gflag_mu);
}

static int cm_capture_mode(int mode)
{
    cudaStreamCaptureMode m = (cudaStreamCaptureMode)mode;
    if (hoop__cuda_init() != HOOP_OK || cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return (int)m;
}

// ----------------------------------------------------------------- streams and graphs

static hoop_status cm_stream_new(void **stream)
{
    cudaStream_t s = NULL;
    *stream = NULL;
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return HOOP_OK;
}

static void cm_stream_free(void *stream)
{
    if (stream && cudaStreamDestroy((cudaStream_t)stream) != cudaSuccess) cudaGetLastError();
}

static hoop_status cm_stream_sync(void *stream)
{
    return hoop__cuda_stream_sync((cudaStream_t)stream);
}

static hoop_status cm_graph_begin(void *stream)
{
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal));
    return HOOP_OK;
}

static hoop_status cm_graph_end(void *stream, void **graph)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    *graph = NULL;
    cudaError_t e = cudaStreamEndCapture((cudaStream_t)stream, &g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (g) cudaGraphDestroy(g);
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "the capture broke (cudaStreamEndCapture: %s): a call inside it "
                          "waited for the device or allocated",
                          cudaGetErrorString(e));
    }
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g); /* the executable graph has what it needs, references included */
    if (e != cudaSuccess) {
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaGraphInstantiate failed: %s", cudaGetErrorString(e));
    }
    *graph = x;
    return HOOP_OK;
}

static hoop_status cm_graph_launch(void *graph, void *stream)
{
    HOOP_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, (cudaStream_t)stream));
    return HOOP_OK;
}

static void cm_graph_free(void *graph)
{
    if (graph && cudaGraphExecDestroy((cudaGraphExec_t)graph) != cudaSuccess) cudaGetLastError();
}

extern "C" const struct hoop__cuda_coll hoop__cuda_coll_table = {
    sizeof(struct hoop__cuda_coll),
    cm_mem_kind,
    cm_open,
    cm_host_register,
    cm_host_unregister,
    hoop__cuda_malloc,
    hoop__cuda_free,
    cm_half_prescale,
    cm_copy,
    cm_flag_alloc,
    cm_flag_free,
    cm_stream_enter,
    cm_stream_started,
    cm_start_free,
    cm_flag_write,
    cm_shared_alloc,
    cm_shared_free,
    cm_ipc_export,
    cm_ipc_open,
    cm_ipc_close,
    cm_stream_capturing,
    cm_stream_capture,
    cm_gflag_get,
    cm_gflag_put,
    cm_capture_mode,
    cm_stream_new,
    cm_stream_free,
    cm_stream_sync,
    cm_graph_begin,
    cm_graph_end,
    cm_graph_launch,
    cm_graph_free,
};

// ----------------------------------------------------------------- for tests (coll.h)

static int tr_stream_create(void **s)
{
    cudaStream_t st = NULL;
    if (hoop__cuda_init() != HOOP_OK) return (int)cudaErrorNoDevice;
    int e = (int)cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    *s = st;
    return e;
}

static int tr_stream_destroy(void *s)
{
    return (int)cudaStreamDestroy((cudaStream_t)s);
}

static int tr_stream_sync(void *s)
{
    return (int)cudaStreamSynchronize((cudaStream_t)s);
}

static int tr_memset_async(void *p, int value, size_t bytes, void *s)
{
    return (int)cudaMemsetAsync(p, value, bytes, (cudaStream_t)s);
}

static int tr_memcpy_async(void *dst, const void *src, size_t bytes, void *s)
{
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)s);
}

static int tr_wait_value(void *s, uint32_t *flag, uint32_t value)
{
    if (hoop__cuda_init() != HOOP_OK) return (int)HOOP_ERR_UNSUPPORTED;
    return (int)issue_wait((cudaStream_t)s, flag, value, WAIT_VALUE_GEQ);
}

#ifndef __CUDACC__
static unsigned long tr_queued(void *s)
{
    return hoop__hx_queued((cudaStream_t)s);
}
#endif

static void *tr_memops_stream(hoop__memops *m)
{
    return ((struct cuda_memops *)m)->stream;
}

extern "C" const struct hoop__cuda_test_rt hoop__cuda_test_rt_table = {
    sizeof(struct hoop__cuda_test_rt),
    tr_stream_create,
    tr_stream_destroy,
    tr_stream_sync,
    tr_memset_async,
    tr_memcpy_async,
#ifdef __CUDACC__
    NULL,
    NULL,
#else
    hoop__hx_set_lazy,
    tr_queued,
#endif
    tr_wait_value,
#ifdef __CUDACC__
    NULL,
#else
    hoop__hx_set_devices,
#endif
    tr_memops_stream,
#ifdef __CUDACC__
    NULL,
#else
    hoop__hx_set_queues,
#endif
};
