/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/ctx.cu -- the CUDA backend's context (see ctx.h): the device choice, the
 * compute and copy streams, events, host waits with a deadline, copies, and each
 * thread's cuBLAS handle.
 *
 * Owns: the process's context (made once under ctx_mu, published through ctx_ready; its
 * streams and events live until the process ends) and, per thread, the cuBLAS handle and
 * the event a host wait records (released when the thread exits; the main thread's at
 * the process's end, by CUDA), and the handle's workspace (from the caching allocator,
 * kept for the process's life: a graph captured with it may outlive the thread). Thread-safety: see
 * ctx.h.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>

#include "core/backend.h"
#include "cuda/alloc.h"
#include "cuda/ctx.h"

struct cuda_ctx {
    int device, count;
    cudaStream_t compute, copy;
    cudaEvent_t marks[2]; /* recorded on compute, copy by hoop__cuda_stream_wait */
    char name[256];
    size_t total_bytes;
    size_t blas_ws_bytes; /* each thread's cuBLAS workspace (hoop__cuda_blas) */
    int64_t timeout_ms;   /* HOOP_TIMEOUT: how long a host wait may take */
    int tf32;             /* HOOP_CUDA_TF32 */
};

static struct cuda_ctx ctx;
static std::atomic<int> ctx_ready;
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static thread_local int ctx_bound; /* this thread's current device is ctx.device */
/* What a thread makes for itself, released when it exits (a pthread key's destructor). */
struct ctx_thread {
    cublasHandle_t blas;
    void *blas_ws;         /* its workspace: kept for the process's life (a graph refers to it) */
    cudaEvent_t sync_mark; /* what this thread's host waits record */
};
static thread_local struct ctx_thread *ctx_me;
static pthread_key_t ctx_key;
static pthread_once_t ctx_key_once = PTHREAD_ONCE_INIT;
static int ctx_key_err;

static void ctx_thread_end(void *arg)
{
    struct ctx_thread *t = (struct ctx_thread *)arg;
    if (t->sync_mark) cudaEventDestroy(t->sync_mark);
    if (t->blas) cublasDestroy(t->blas);
    free(t);
}

static void ctx_key_make(void)
{
    ctx_key_err = pthread_key_create(&ctx_key, ctx_thread_end);
}

static hoop_status ctx_thread(struct ctx_thread **out)
{
    if (!ctx_me) {
        pthread_once(&ctx_key_once, ctx_key_make);
        if (ctx_key_err)
            return HOOP_ERROR(HOOP_ERR_SYSTEM, "cuda: pthread_key_create failed (error %d)",
                              ctx_key_err);
        struct ctx_thread *t = (struct ctx_thread *)calloc(1, sizeof(*t));
        if (!t) return HOOP_ERROR(HOOP_ERR_NOMEM, "cuda: no memory for a thread's state");
        int rc = pthread_setspecific(ctx_key, t);
        if (rc != 0) {
            free(t);
            return HOOP_ERROR(HOOP_ERR_SYSTEM, "cuda: pthread_setspecific failed (error %d)", rc);
        }
        ctx_me = t;
    }
    *out = ctx_me;
    return HOOP_OK;
}

// ----------------------------------------------------------------- the device

/* The device: HOOP_CUDA_DEVICE's (an index libhoop read, which must name one of the
 * count devices), else the local rank modulo count (ctx.h). */
static hoop_status ctx_pick(const struct hoop__backend_settings *set, int count, int *dev)
{
    if (set->device >= 0) {
        if (set->device >= count) {
            const char *vis = getenv("CUDA_VISIBLE_DEVICES");
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "HOOP_CUDA_DEVICE=%d is not a device of this process: it sees %d "
                              "CUDA device%s (0..%d)%s%s%s",
                              set->device, count, count == 1 ? "" : "s", count - 1,
                              vis ? ", CUDA_VISIBLE_DEVICES='" : "", vis ? vis : "",
                              vis ? "'" : "");
        }
        *dev = set->device;
        HOOP_INFO(INIT, "cuda: HOOP_CUDA_DEVICE=%d chooses cuda:%d of %d", *dev, *dev, count);
        return HOOP_OK;
    }
    *dev = set->local_rank % count;
    if (set->local_rank >= count)
        HOOP_INFO(INIT,
                  "cuda: local rank %d but this process sees %d CUDA device%s: workers share "
                  "GPUs round-robin (local rank mod %d), this one cuda:%d",
                  set->local_rank, count, count == 1 ? "" : "s", count, *dev);
    return HOOP_OK;
}

/* Destroys what ctx_make made (any part of it) and clears c. */
static void ctx_close(struct cuda_ctx *c)
{
    for (int i = 0; i < 2; i++)
        if (c->marks[i]) cudaEventDestroy(c->marks[i]);
    if (c->copy) cudaStreamDestroy(c->copy);
    if (c->compute) cudaStreamDestroy(c->compute);
    cudaGetLastError();
    memset(c, 0, sizeof(*c));
}

static hoop_status ctx_count(int *count)
{
    cudaError_t e = cudaGetDeviceCount(count);
    if (e == cudaErrorInsufficientDriver) {
        /* The runtime says so too when there is no driver at all, which reads as "upgrade
         * your driver": tell the two apart by whether the driver's library loads. */
        void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (drv == NULL) {
            const char *why = dlerror();
            cudaGetLastError();
            return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                              "no CUDA device: no NVIDIA driver on this machine (libcuda.so.1 "
                              "cannot be loaded: %s)",
                              why ? why : "not found");
        }
        dlclose(drv);
    }
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
        (e == cudaSuccess && *count <= 0)) {
        cudaGetLastError();
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount: %s%s%s%s",
                          e == cudaSuccess ? "found none" : cudaGetErrorString(e),
                          vis ? " (CUDA_VISIBLE_DEVICES='" : "", vis ? vis : "", vis ? "')" : "");
    }
    HOOP_CUDA_CHECK(e);
    return HOOP_OK;
}

static hoop_status ctx_make(struct cuda_ctx *c)
{
    HOOP_CHECK(ctx_count(&c->count));
    /* read by libhoop (core/backend.h), when the context is made: a bad value fails the
     * first CUDA call, naming the variable */
    struct hoop__backend_settings set;
    HOOP_CHECK(hoop__backend_settings(&set, sizeof(set)));
    c->timeout_ms = set.timeout_ms;
    c->tf32 = set.tf32;
    HOOP_CHECK(ctx_pick(&set, c->count, &c->device));
    HOOP_CUDA_CHECK(cudaSetDevice(c->device));
    cudaDeviceProp prop;
    HOOP_CUDA_CHECK(cudaGetDeviceProperties(&prop, c->device));
    snprintf(c->name, sizeof(c->name), "%s", prop.name);
    c->total_bytes = prop.totalGlobalMem;
    /* cuBLAS's recommended workspace (cublasSetWorkspace): 32 MiB on Hopper and later, 4 MiB
     * before */
    c->blas_ws_bytes = (size_t)(prop.major >= 9 ? 32 : 4) << 20;
    HOOP_CUDA_CHECK(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
    HOOP_CUDA_CHECK(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++)
        HOOP_CUDA_CHECK(cudaEventCreateWithFlags(&c->marks[i], cudaEventDisableTiming));
    HOOP_INFO(INIT, "cuda: using cuda:%d (%s, %.1f GiB) of the %d device%s this process sees",
              c->device, c->name, (double)c->total_bytes / (1024.0 * 1024.0 * 1024.0), c->count,
              c->count == 1 ? "" : "s");
    return HOOP_OK;
}

static hoop_status ctx_bind(void)
{
    if (ctx_bound) return HOOP_OK;
    HOOP_CUDA_CHECK(cudaSetDevice(ctx.device));
    ctx_bound = 1;
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_init(void)
{
    if (ctx_bound) return HOOP_OK;
    if (!ctx_ready.load(std::memory_order_acquire)) {
        hoop_status st = HOOP_OK;
        pthread_mutex_lock(&ctx_mu);
        if (!ctx_ready.load(std::memory_order_relaxed)) {
            st = ctx_make(&ctx);
            if (st == HOOP_OK)
                ctx_ready.store(1, std::memory_order_release);
            else
                ctx_close(&ctx);
        }
        pthread_mutex_unlock(&ctx_mu);
        if (st != HOOP_OK) return st;
    }
    return ctx_bind();
}

extern "C" hoop_status hoop__cuda_device_info(int *dev, char *name, size_t name_len,
                                              size_t *total_bytes)
{
    HOOP_CHECK(hoop__cuda_init());
    if (dev) *dev = ctx.device;
    if (name && name_len) snprintf(name, name_len, "%s", ctx.name);
    if (total_bytes) *total_bytes = ctx.total_bytes;
    return HOOP_OK;
}

// ----------------------------------------------------------------- streams and events

extern "C" hoop__cuda_stream_t hoop__cuda_stream(void)
{
    if (!ctx_bound && hoop__cuda_init() != HOOP_OK) return 0;
    return ctx.compute;
}

extern "C" hoop__cuda_stream_t hoop__cuda_copy_stream(void)
{
    if (!ctx_bound && hoop__cuda_init() != HOOP_OK) return 0;
    return ctx.copy;
}

/* Which of the context's streams s is (0 compute, 1 copy), or -1. */
static int ctx_which(cudaStream_t s)
{
    if (s && s == ctx.compute) return 0;
    if (s && s == ctx.copy) return 1;
    return -1;
}

extern "C" hoop_status hoop__cuda_stream_wait(hoop__cuda_stream_t waiter,
                                              hoop__cuda_stream_t producer)
{
    HOOP_CHECK(hoop__cuda_init());
    int w = ctx_which(waiter), p = ctx_which(producer);
    if (w < 0 || p < 0 || w == p)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "hoop__cuda_stream_wait: waiter and producer must be the context's "
                          "compute and copy streams, one each (got %p and %p)",
                          (void *)waiter, (void *)producer);
    /* One event per producer: a record by another thread in between only marks more of
     * the producer's work (a stream runs its work in order), never less. */
    HOOP_CUDA_CHECK(cudaEventRecord(ctx.marks[p], producer));
    HOOP_CUDA_CHECK(cudaStreamWaitEvent(waiter, ctx.marks[p], 0));
    return HOOP_OK;
}

static int64_t ctx_ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    /* whole ms, truncated from the nanoseconds (per field, a negative tv_nsec difference
     * rounded toward zero would count up to 1 ms that has not passed) */
    return ((int64_t)(t.tv_sec - t0->tv_sec) * 1000000000 + (t.tv_nsec - t0->tv_nsec)) / 1000000;
}

/* Polls e until its work is done: spinning for the first 2 ms (a step's wait is often
 * shorter than a sleep's granularity), then in 50 us sleeps, up to HOOP_TIMEOUT. */
static hoop_status ctx_wait_event(cudaEvent_t e, const char *what)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        cudaError_t r = cudaEventQuery(e);
        if (r == cudaSuccess) return HOOP_OK;
        if (r != cudaErrorNotReady) {
            cudaGetLastError();
            return HOOP_ERROR(HOOP_ERR_CUDA, "cuda:%d: waiting for %s: %s", ctx.device, what,
                              cudaGetErrorString(r));
        }
        int64_t ms = ctx_ms_since(&t0);
        if (ms >= ctx.timeout_ms)
            return HOOP_ERROR(HOOP_ERR_TIMEOUT,
                              "cuda:%d: %s did not finish within %" PRId64
                              " ms (HOOP_TIMEOUT); a kernel may be stuck",
                              ctx.device, what, ctx.timeout_ms);
        if (ms >= 2) {
            struct timespec nap = {0, 50 * 1000};
            nanosleep(&nap, NULL);
        }
    }
}

extern "C" hoop_status hoop__cuda_stream_sync(hoop__cuda_stream_t s)
{
    HOOP_CHECK(hoop__cuda_init());
    struct ctx_thread *t;
    HOOP_CHECK(ctx_thread(&t));
    if (!t->sync_mark)
        HOOP_CUDA_CHECK(cudaEventCreateWithFlags(&t->sync_mark, cudaEventDisableTiming));
    HOOP_CUDA_CHECK(cudaEventRecord(t->sync_mark, s));
    int w = ctx_which(s);
    return ctx_wait_event(t->sync_mark, w == 0   ? "the compute stream"
                                        : w == 1 ? "the copy stream"
                                                 : "a stream");
}

extern "C" hoop_status hoop__cuda_sync(void)
{
    HOOP_CHECK(hoop__cuda_init());
    return hoop__cuda_stream_sync(ctx.compute);
}

extern "C" hoop_status hoop__cuda_event_new(hoop__cuda_event_t *e)
{
    *e = NULL;
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    return HOOP_OK;
}

extern "C" void hoop__cuda_event_free(hoop__cuda_event_t e)
{
    if (!e) return;
    if (cudaEventDestroy(e) != cudaSuccess) cudaGetLastError();
}

extern "C" hoop_status hoop__cuda_event_record(hoop__cuda_event_t e, hoop__cuda_stream_t s)
{
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaEventRecord(e, s));
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_event_wait(hoop__cuda_stream_t s, hoop__cuda_event_t e)
{
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaStreamWaitEvent(s, e, 0));
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_event_sync(hoop__cuda_event_t e)
{
    HOOP_CHECK(hoop__cuda_init());
    return ctx_wait_event(e, "an event");
}

extern "C" hoop_status hoop__cuda_event_done(hoop__cuda_event_t e, int *done)
{
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t r = cudaEventQuery(e);
    *done = r == cudaSuccess;
    if (r == cudaSuccess || r == cudaErrorNotReady) return HOOP_OK;
    HOOP_CUDA_CHECK(r);
    return HOOP_OK;
}

// ----------------------------------------------------------------- copies, cuBLAS

extern "C" hoop_status hoop__cuda_copy(void *dst, const void *src, size_t bytes, int to_device)
{
    if (bytes == 0) return HOOP_OK;
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t e = cudaMemcpyAsync(
        dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, ctx.compute);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaMemcpyAsync (%zu bytes, %s) failed: %s", bytes,
                          to_device ? "to the device" : "to the host", cudaGetErrorString(e));
    }
    return hoop__cuda_sync();
}

extern "C" hoop_status hoop__cuda_copy_async(void *dst, const void *src, size_t bytes,
                                             hoop__cuda_copy_kind kind, hoop__cuda_stream_t s)
{
    if (kind != HOOP_CUDA_HOST_TO_DEVICE && kind != HOOP_CUDA_DEVICE_TO_HOST &&
        kind != HOOP_CUDA_DEVICE_TO_DEVICE)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop__cuda_copy_async: kind=%d is not a copy kind",
                          (int)kind);
    if (bytes == 0) return HOOP_OK;
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, (cudaMemcpyKind)kind, s);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaMemcpyAsync (%zu bytes, kind %d) failed: %s", bytes,
                          (int)kind, cudaGetErrorString(e));
    }
    return HOOP_OK;
}

// ----------------------------------------------------------------- the table's async uploads

extern "C" hoop_status hoop__cuda_table_event_new(void **ev)
{
    return hoop__cuda_event_new((cudaEvent_t *)ev);
}

extern "C" void hoop__cuda_table_event_free(void *ev)
{
    hoop__cuda_event_free((cudaEvent_t)ev);
}

/* HOOP_ERR_CUDA naming the entry, the call and what it moved. */
static hoop_status ctx_async_fail(const char *entry, const char *call, size_t bytes, cudaError_t e)
{
    cudaGetLastError();
    char what[48] = "";
    if (bytes) snprintf(what, sizeof(what), " of %zu bytes", bytes);
    return HOOP_ERROR(HOOP_ERR_CUDA, "%s: %s%s failed on cuda:%d: %s", entry, call, what,
                      ctx.device, cudaGetErrorString(e));
}

extern "C" hoop_status hoop__cuda_upload_async(void *dst, const void *src, size_t bytes,
                                               void *after, void *done)
{
    static const char fn[] = "upload_async";
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t e;
    if (after && (e = cudaStreamWaitEvent(ctx.copy, (cudaEvent_t)after, 0)) != cudaSuccess)
        return ctx_async_fail(fn, "cudaStreamWaitEvent (the copy stream)", bytes, e);
    if (bytes &&
        (e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.copy)) != cudaSuccess)
        return ctx_async_fail(fn, "cudaMemcpyAsync (to the device, the copy stream)", bytes, e);
    if (done && (e = cudaEventRecord((cudaEvent_t)done, ctx.copy)) != cudaSuccess)
        return ctx_async_fail(fn, "cudaEventRecord (the copy stream)", bytes, e);
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_download_async(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) return HOOP_OK;
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.compute);
    if (e != cudaSuccess)
        return ctx_async_fail("download_async", "cudaMemcpyAsync (to the host, the compute stream)",
                              bytes, e);
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_compute_wait(void *ev)
{
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t e = cudaStreamWaitEvent(ctx.compute, (cudaEvent_t)ev, 0);
    if (e != cudaSuccess)
        return ctx_async_fail("compute_wait", "cudaStreamWaitEvent (the compute stream)", 0, e);
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_compute_record(void *ev)
{
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t e = cudaEventRecord((cudaEvent_t)ev, ctx.compute);
    if (e != cudaSuccess)
        return ctx_async_fail("compute_record", "cudaEventRecord (the compute stream)", 0, e);
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_table_event_sync(void *ev)
{
    HOOP_CHECK(hoop__cuda_init());
    return ctx_wait_event((cudaEvent_t)ev, "an upload's event");
}

// ----------------------------------------------------------------- the table's streams, timers

extern "C" hoop_status hoop__cuda_table_stream_new(void **s)
{
    *s = NULL;
    HOOP_CHECK(hoop__cuda_init());
    cudaStream_t st = NULL;
    HOOP_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    *s = st;
    return HOOP_OK;
}

extern "C" void hoop__cuda_table_stream_free(void *s)
{
    if (s && cudaStreamDestroy((cudaStream_t)s) != cudaSuccess) cudaGetLastError();
}

extern "C" hoop_status hoop__cuda_table_stream_record(void *s, void *ev)
{
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t e = cudaEventRecord((cudaEvent_t)ev, s ? (cudaStream_t)s : ctx.compute);
    if (e != cudaSuccess)
        return ctx_async_fail("stream_record",
                              s ? "cudaEventRecord" : "cudaEventRecord (the compute stream)", 0, e);
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_table_stream_wait(void *s, void *ev)
{
    HOOP_CHECK(hoop__cuda_init());
    cudaError_t e = cudaStreamWaitEvent(s ? (cudaStream_t)s : ctx.compute, (cudaEvent_t)ev, 0);
    if (e != cudaSuccess)
        return ctx_async_fail(
            "stream_wait", s ? "cudaStreamWaitEvent" : "cudaStreamWaitEvent (the compute stream)",
            0, e);
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_table_timer_new(void **ev)
{
    *ev = NULL;
    HOOP_CHECK(hoop__cuda_init());
    HOOP_CUDA_CHECK(cudaEventCreateWithFlags((cudaEvent_t *)ev, cudaEventDefault));
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_table_event_query(void *ev, int *done)
{
    return hoop__cuda_event_done((cudaEvent_t)ev, done);
}

extern "C" hoop_status hoop__cuda_table_event_elapsed(void *a, void *b, double *ms)
{
    HOOP_CHECK(hoop__cuda_init());
    float f = 0.0f;
    cudaError_t e = cudaEventElapsedTime(&f, (cudaEvent_t)a, (cudaEvent_t)b);
    if (e == cudaErrorNotReady || e == cudaErrorInvalidResourceHandle) {
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_USAGE,
                          "event_elapsed on cuda:%d: an event has not completed, or was never "
                          "recorded (%s)",
                          ctx.device, cudaGetErrorString(e));
    }
    HOOP_CUDA_CHECK(e);
    *ms = (double)f;
    return HOOP_OK;
}

hoop_status hoop__cuda_blas(cublasHandle_t *h)
{
    HOOP_CHECK(hoop__cuda_init());
    struct ctx_thread *t;
    HOOP_CHECK(ctx_thread(&t));
    if (!t->blas) {
        if (!t->blas_ws) HOOP_CHECK(hoop__cuda_malloc(&t->blas_ws, ctx.blas_ws_bytes));
        HOOP_CUBLAS_CHECK(cublasCreate(&t->blas));
        HOOP_CUBLAS_CHECK(cublasSetMathMode(t->blas, ctx.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                              : CUBLAS_DEFAULT_MATH));
    }
    /* cublasSetStream puts the handle back on cuBLAS's default workspace pool, which a
     * GEMM captured into a graph would then allocate from inside the graph (cuBLAS 12.2
     * on: stream-ordered allocation nodes), or run without (another algorithm than the
     * eager step's): the workspace is ours, the same eager and captured (the cuBLAS
     * library guide, cublasSetWorkspace and "CUDA Graphs Support"). */
    HOOP_CUBLAS_CHECK(cublasSetStream(t->blas, ctx.compute));
    HOOP_CUBLAS_CHECK(cublasSetWorkspace(t->blas, t->blas_ws, ctx.blas_ws_bytes));
    *h = t->blas;
    return HOOP_OK;
}
