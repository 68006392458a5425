/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/hx_graph_host.cc -- scenarios for the host execution layer's graphs, host
 * functions, value waits and user objects (src/cuda/hx.h, "stream capture, graphs"), as
 * the collectives' captured calls use them: each returns NULL when the layer behaved as
 * CUDA documents, or what differed. Host layer only (tests/check_hx.c calls them when no
 * GPU is in use): the value wait is the layer's stand-in for the driver's.
 */
#include <stdio.h>
#include <string.h>

#include "cuda/hx.h"

static char why[256];

#define EXPECT(cond, ...)                            \
    do {                                             \
        if (!(cond)) {                               \
            snprintf(why, sizeof(why), __VA_ARGS__); \
            return why;                              \
        }                                            \
    } while (0)

struct fired {
    int count;
    unsigned char seen; /* buf[0] when the host function ran */
    const unsigned char *buf;
    uint32_t *flag;
    cudaError_t malloc_err;
};

static void on_host(void *arg)
{
    struct fired *f = (struct fired *)arg;
    f->count++;
    f->seen = f->buf[0];
    __atomic_store_n(f->flag, 0, __ATOMIC_RELEASE); /* the next wait waits again */
    void *p = NULL;
    f->malloc_err = cudaMalloc(&p, 16); /* CUDA forbids it here */
}

/* A captured graph [memset a = k, host function, wait flag == 1, copy a -> b] launched
 * n times on a stream (lazy or not): each launch runs the host function once, after the
 * memset; the copy is held until the flag is set, and then runs. */
extern "C" const char *hxg_host_fn_and_wait(int lazy, int n)
{
    hoop__hx_set_lazy(lazy);
    cudaStream_t s;
    unsigned char *a, *b;
    uint32_t *flag;
    EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    EXPECT(cudaMalloc((void **)&a, 64) == cudaSuccess && cudaMalloc((void **)&b, 64) == 0, "mem");
    EXPECT(cudaMallocHost((void **)&flag, 64) == cudaSuccess, "flag");
    struct fired f = {0, 0, a, flag, cudaSuccess};
    cudaGraph_t g;
    cudaGraphExec_t x;
    for (int k = 1; k <= n; k++) {
        if (k == 1) {
            EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == 0, "begin");
            EXPECT(cudaMemsetAsync(a, 7, 64, s) == cudaSuccess, "memset");
            EXPECT(cudaLaunchHostFunc(s, on_host, &f) == cudaSuccess, "host func");
            EXPECT(hoop__hx_stream_wait_value32(s, flag, 1, HOOP__HX_WAIT_EQ) == 0, "wait");
            EXPECT(cudaMemcpyAsync(b, a, 64, cudaMemcpyDeviceToDevice, s) == 0, "copy");
            EXPECT(cudaStreamEndCapture(s, &g) == cudaSuccess, "end: %s", hoop__hx_detail());
            EXPECT(f.count == 0, "the host function ran at capture");
            EXPECT(cudaGraphInstantiate(&x, g, 0) == cudaSuccess, "instantiate");
        }
        memset(a, 0, 64);
        memset(b, 0, 64);
        EXPECT(cudaGraphLaunch(x, s) == cudaSuccess, "launch %d", k);
        if (lazy) EXPECT(f.count == k - 1, "launch %d ran before anyone waited", k);
        cudaEvent_t ev;
        EXPECT(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == 0, "event");
        EXPECT(cudaEventRecord(ev, s) == cudaSuccess, "record");
        EXPECT(cudaEventQuery(ev) == cudaErrorNotReady, "launch %d passed its wait", k);
        EXPECT(f.count == k, "launch %d: the host function ran %d times", k, f.count);
        EXPECT(f.seen == 7, "launch %d: the host function ran before the memset", k);
        EXPECT(b[0] == 0, "launch %d: the copy after the wait ran before it passed", k);
        EXPECT(f.malloc_err == cudaErrorNotPermitted, "cudaMalloc in a host function: %d",
               (int)f.malloc_err);
        cudaGetLastError();
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        EXPECT(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        EXPECT(b[0] == 7 && b[63] == 7, "launch %d: the copy did not run after the wait", k);
        EXPECT(cudaEventQuery(ev) == cudaSuccess, "the event after the graph");
        cudaEventDestroy(ev);
    }
    cudaGraphExecDestroy(x);
    cudaGraphDestroy(g);
    cudaFree(a);
    cudaFree(b);
    cudaFreeHost(flag);
    cudaStreamDestroy(s);
    hoop__hx_set_lazy(0);
    return NULL;
}

static void on_destroy(void *arg)
{
    ++*(int *)arg;
}

/* A user object given to a captured graph outlives the graph and its executable graph
 * while a launch of it is held by a wait, and its destructor runs once, after that
 * launch has run. */
extern "C" const char *hxg_user_object_deferred(void)
{
    cudaStream_t s;
    uint32_t *flag;
    int destroyed = 0;
    EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    EXPECT(cudaMallocHost((void **)&flag, 64) == cudaSuccess, "flag");
    *flag = 0;
    cudaGraph_t g, seen = NULL;
    cudaGraphExec_t x;
    cudaUserObject_t o;
    cudaStreamCaptureStatus cs;
    EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == 0, "begin");
    EXPECT(cudaStreamGetCaptureInfo(s, &cs, NULL, &seen) == 0 && seen, "capture info");
    EXPECT(cudaUserObjectCreate(&o, &destroyed, on_destroy, 1, cudaUserObjectNoDestructorSync) ==
               cudaSuccess,
           "user object");
    EXPECT(cudaGraphRetainUserObject(seen, o, 1, cudaGraphUserObjectMove) == 0, "retain");
    EXPECT(hoop__hx_stream_wait_value32(s, flag, 1, HOOP__HX_WAIT_EQ) == 0, "wait");
    EXPECT(cudaStreamEndCapture(s, &g) == cudaSuccess && g == seen, "end");
    EXPECT(cudaGraphInstantiate(&x, g, 0) == cudaSuccess, "instantiate");
    EXPECT(cudaGraphDestroy(g) == cudaSuccess && destroyed == 0,
           "the executable graph's reference");
    EXPECT(cudaGraphLaunch(x, s) == cudaSuccess, "launch");
    EXPECT(cudaGraphExecDestroy(x) == cudaSuccess, "exec destroy");
    EXPECT(destroyed == 0, "the destructor ran while a launch was held");
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    EXPECT(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    EXPECT(destroyed == 1, "the destructor ran %d times after the launch", destroyed);
    cudaFreeHost(flag);
    cudaStreamDestroy(s);
    return NULL;
}

/* An allocation inside a capture breaks it, unless the thread's mode is relaxed. */
extern "C" const char *hxg_relaxed_alloc(void)
{
    cudaStream_t s;
    cudaGraph_t g;
    void *p = NULL;
    EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == 0, "begin");
    cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    EXPECT(cudaThreadExchangeStreamCaptureMode(&m) == 0, "exchange");
    EXPECT(cudaMalloc(&p, 64) == cudaSuccess, "cudaMalloc in relaxed mode: %s", hoop__hx_detail());
    EXPECT(cudaThreadExchangeStreamCaptureMode(&m) == 0 && m == cudaStreamCaptureModeRelaxed,
           "exchange back");
    EXPECT(cudaStreamEndCapture(s, &g) == cudaSuccess, "end after a relaxed allocation");
    cudaGraphDestroy(g);
    cudaFree(p);
    EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == 0, "begin");
    EXPECT(cudaMalloc(&p, 64) == cudaErrorStreamCaptureUnsupported, "cudaMalloc in a capture");
    EXPECT(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated, "end");
    cudaGetLastError();
    cudaStreamDestroy(s);
    return NULL;
}

/* Hardware queues (hx.h; CUDA_DEVICE_MAX_CONNECTIONS=2, set by the caller before the
 * first stream): streams a, b, c made in that order take queues 0, 1, 0. A value wait on
 * a that cannot pass holds c's memset (a's queue) but not b's; once the flag is set, a
 * wait for c runs a's queue and then c's memset. */
extern "C" const char *hxg_shared_queue(void)
{
    cudaStream_t a, b, c;
    unsigned char *p, *q;
    uint32_t *flag;
    hoop__hx_set_lazy(0);
    EXPECT(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess &&
               cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess &&
               cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking) == cudaSuccess,
           "streams");
    EXPECT(cudaMallocHost((void **)&p, 64) == 0 && cudaMallocHost((void **)&q, 64) == 0 &&
               cudaMallocHost((void **)&flag, 64) == 0,
           "memory");
    memset(p, 0, 64);
    memset(q, 0, 64);
    *flag = 0;
    EXPECT(hoop__hx_stream_wait_value32(a, flag, 1, HOOP__HX_WAIT_GEQ) == cudaSuccess, "wait");
    EXPECT(cudaMemsetAsync(q, 5, 64, b) == cudaSuccess && q[0] == 5,
           "b's memset (another queue) did not run at once: %d", q[0]);
    EXPECT(cudaMemsetAsync(p, 3, 64, c) == cudaSuccess, "c's memset");
    EXPECT(p[0] == 0, "c's memset ran beside a's unmet wait on their shared queue");
    cudaEvent_t e;
    EXPECT(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == 0 && cudaEventRecord(e, c) == 0,
           "event");
    EXPECT(cudaEventQuery(e) == cudaErrorNotReady, "c is not done while a's wait holds");
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    EXPECT(cudaStreamSynchronize(c) == cudaSuccess && p[0] == 3,
           "c's memset after the wait passed: %d", p[0]);
    EXPECT(cudaEventQuery(e) == cudaSuccess && cudaStreamSynchronize(a) == cudaSuccess, "a");
    cudaEventDestroy(e);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaStreamDestroy(c);
    cudaFreeHost(p);
    cudaFreeHost(q);
    cudaFreeHost(flag);
    return NULL;
}
