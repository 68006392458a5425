/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/graph.cu -- the CUDA table's staging and graph entries (kern.h): page-locked
 * host memory, the asynchronous upload, and stream capture into CUDA graphs (CUDA C++
 * Programming Guide, "CUDA Graphs": cudaStreamBeginCapture, cudaStreamEndCapture,
 * cudaGraphInstantiate, cudaGraphLaunch).
 *
 * Capture is on the backend's compute stream in thread-local mode: work other threads
 * issue is not captured, and a call of this thread that may not be captured (a
 * synchronous copy, a synchronisation, an allocation) breaks the capture, which
 * graph_end reports.
 *
 * upload: captured, the copy reads the caller's (pinned) buffer at each launch; not
 * captured, the bytes (up to 4 KiB: the step's scalars, a seed, a batch's labels) are
 * copied at once into a pinned slot of a per-thread ring and copied to the device from
 * there, so the caller may reuse its buffer when upload returns; a slot is reused only
 * after the copy from it has run (an event per slot). Larger uploads wait.
 *
 * Owns: the thread's staging ring (kept for the thread's life); a graph is the caller's.
 * Thread-safety: per thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/alloc.h"
#include "cuda/ops/ops.h"

/* upload's staging when not capturing: a ring of pinned slots per thread, each reused only
 * after the copy from it has run (its event), so the caller's buffer is free at return. */
#define GRAPH_SLOTS 64
#define GRAPH_SLOT_BYTES 4096

struct graph_ring {
    unsigned char *buf; /* GRAPH_SLOTS * GRAPH_SLOT_BYTES, pinned */
    cudaEvent_t ev[GRAPH_SLOTS];
    int used[GRAPH_SLOTS];
    unsigned next;
};

static thread_local struct graph_ring graph_ring_of_thread;

static hoop_status graph_ring_get(struct graph_ring **out)
{
    struct graph_ring *r = &graph_ring_of_thread;
    if (r->buf == NULL) {
        void *buf;
        HOOP_CHECK(hoop__cuda_host_alloc(&buf, (size_t)GRAPH_SLOTS * GRAPH_SLOT_BYTES));
        for (int i = 0; i < GRAPH_SLOTS; i++) {
            cudaError_t e = cudaEventCreateWithFlags(&r->ev[i], cudaEventDisableTiming);
            if (e != cudaSuccess) {
                cudaGetLastError();
                while (i-- > 0) cudaEventDestroy(r->ev[i]);
                hoop__cuda_host_free(buf);
                return HOOP_ERROR(HOOP_ERR_CUDA, "cudaEventCreateWithFlags failed: %s",
                                  cudaGetErrorString(e));
            }
        }
        r->buf = (unsigned char *)buf;
    }
    *out = r;
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_upload(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) return HOOP_OK;
    cudaStream_t s = hoop__cuda_stream();
    if (s == NULL) return HOOP_ERR_CUDA; /* the context could not be made: message set */
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(s, &cs);
    const void *from = src;
    struct graph_ring *r = NULL;
    unsigned slot = 0;
    if (cs == cudaStreamCaptureStatusNone) {
        if (bytes > GRAPH_SLOT_BYTES) return hoop__cuda_copy(dst, src, bytes, 1); /* waits */
        HOOP_CHECK(graph_ring_get(&r));
        slot = r->next++ % GRAPH_SLOTS;
        if (r->used[slot]) HOOP_CHECK(hoop__cuda_event_sync(r->ev[slot])); /* HOOP_TIMEOUT */
        unsigned char *p = r->buf + (size_t)slot * GRAPH_SLOT_BYTES;
        memcpy(p, src, bytes);
        from = p;
    }
    /* capturing: the graph reads src itself, at every launch */
    cudaError_t e = cudaMemcpyAsync(dst, from, bytes, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && r != NULL) {
        e = cudaEventRecord(r->ev[slot], s);
        r->used[slot] = e == cudaSuccess;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return HOOP_ERROR(cs == cudaStreamCaptureStatusNone ? HOOP_ERR_CUDA : HOOP_ERR_UNSUPPORTED,
                          "upload: cudaMemcpyAsync (%zu bytes to the device%s) failed: %s", bytes,
                          cs == cudaStreamCaptureStatusNone ? "" : ", captured",
                          cudaGetErrorString(e));
    }
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_table_mem_stats(struct hoop__mem_stats *st)
{
    struct hoop__cuda_mem_stats c;
    hoop__cuda_mem_stats(&c);
    st->device_mallocs = c.device_mallocs;
    st->device_frees = c.device_frees;
    st->bytes_in_use = c.bytes_in_use;
    st->bytes_cached = c.bytes_cached;
    st->peak_bytes = c.peak_bytes;
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_describe(char *buf, size_t len)
{
    int dev = 0;
    char name[256] = "";
    size_t total = 0;
    HOOP_CHECK(hoop__cuda_device_info(&dev, name, sizeof(name), &total));
    snprintf(buf, len, "cuda:%d %s, %.1f GiB", dev, name, (double)total / (1024.0 * 1024 * 1024));
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_graph_begin(void)
{
    cudaStream_t s = hoop__cuda_stream();
    if (s == NULL) return HOOP_ERR_CUDA; /* the context could not be made: message set */
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "cuda: cudaStreamBeginCapture failed: %s",
                          cudaGetErrorString(e));
    }
    return HOOP_OK;
}

/* A graph as the table hands it out: the executable graph and an event recorded after
 * its last launch (graph_sync waits for it). */
struct graph_exec {
    cudaGraphExec_t exec;
    cudaEvent_t done;
    int launched;
};

extern "C" hoop_status hoop__cuda_graph_end(void **graph)
{
    *graph = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(hoop__cuda_stream(), &g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (g) cudaGraphDestroy(g);
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED,
                          "cuda: the capture broke (cudaStreamEndCapture: %s): a call inside it "
                          "waited for the device or allocated",
                          cudaGetErrorString(e));
    }
    struct graph_exec *x = (struct graph_exec *)calloc(1, sizeof(*x));
    if (x == NULL) {
        cudaGraphDestroy(g);
        return HOOP_ERROR(HOOP_ERR_NOMEM, "cuda: no memory for a graph");
    }
    e = cudaGraphInstantiate(&x->exec, g, 0);
    cudaGraphDestroy(g);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&x->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (x->exec) cudaGraphExecDestroy(x->exec);
        free(x);
        return HOOP_ERROR(HOOP_ERR_UNSUPPORTED, "cuda: cudaGraphInstantiate failed: %s",
                          cudaGetErrorString(e));
    }
    *graph = (void *)x;
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_graph_launch(void *graph)
{
    struct graph_exec *x = (struct graph_exec *)graph;
    cudaError_t e = cudaGraphLaunch(x->exec, hoop__cuda_stream());
    if (e == cudaSuccess) e = cudaEventRecord(x->done, hoop__cuda_stream());
    x->launched = e == cudaSuccess;
    if (e != cudaSuccess) {
        cudaGetLastError();
        return HOOP_ERROR(HOOP_ERR_CUDA, "cudaGraphLaunch failed: %s", cudaGetErrorString(e));
    }
    return HOOP_OK;
}

extern "C" hoop_status hoop__cuda_graph_sync(void *graph)
{
    struct graph_exec *x = (struct graph_exec *)graph;
    if (!x->launched) return HOOP_OK;
    /* polled up to HOOP_TIMEOUT (a replay held by a captured collective's wait would
     * otherwise hold this thread for good) */
    return hoop__cuda_event_sync(x->done);
}

extern "C" void hoop__cuda_graph_free(void *graph)
{
    struct graph_exec *x = (struct graph_exec *)graph;
    if (x == NULL) return;
    cudaGraphExecDestroy(x->exec);
    cudaEventDestroy(x->done);
    free(x);
}
