/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx_graph.cc -- the host execution layer's stream capture and CUDA graphs, host
 * functions and user objects (see src/cuda/hx.h, "stream capture, graphs", for what is
 * modelled).
 *
 * A capture keeps a list of nodes: work (a kernel, a copy, a host function) or a wait
 * (its condition). A launch issues each node to the stream through the lazy queues
 * (hx_stream.cc's lazy_push), so a wait that cannot pass holds the rest, as a wait issued
 * directly does; the nodes hold the executable graph's body by a shared pointer, so a
 * graph destroyed while a launch is queued lives until that launch has run, and its user
 * objects' references with it.
 *
 * Owns: per OS thread, its capture (the graph being built); graphs, executable graphs and
 * user objects are the caller's. Thread-safety: a capture belongs to its thread; user
 * objects' counts are atomic; launches go through the lazy queues' lock.
 */
#include <atomic>
#include <memory>
#include <new>
#include <vector>

#include "cuda/hx_int.h"

using namespace hoop_hx;

struct hoop__hx_user_object {
    std::atomic<unsigned long> refs;
    void *ptr;
    cudaHostFn_t destroy;
};

namespace
{
/* A node of a graph: work (op), or a wait (ready, op empty). */
struct hx_node {
    std::function<void()> op;
    std::function<bool()> ready;
};

/* References to user objects (one per count). */
typedef std::vector<cudaUserObject_t> refs_t;

void refs_release(refs_t &refs)
{
    for (cudaUserObject_t o : refs) cudaUserObjectRelease(o, 1);
    refs.clear();
}

/* An executable graph's work and references: shared by the graph and its queued
 * launches, released when the last of them goes. */
struct exec_body {
    std::vector<hx_node> nodes;
    refs_t refs;
    ~exec_body()
    {
        refs_release(refs);
    }
};
} // namespace

struct hoop__hx_graph {
    std::vector<hx_node> nodes;
    refs_t refs;
};
struct hoop__hx_graph_exec {
    std::shared_ptr<exec_body> body;
};

namespace
{
/* The calling thread's capture (cudaStreamCaptureModeThreadLocal): its stream, the work
 * kept so far, whether a forbidden call broke it, and its mode and number. */
struct capture {
    cudaStream_t stream;
    hoop__hx_graph *graph;
    bool broken;
    cudaStreamCaptureMode mode;
    unsigned long long id;
};
thread_local capture cap;
thread_local bool cap_on;
/* The thread's capture interaction mode (cudaThreadExchangeStreamCaptureMode). */
thread_local cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;
std::atomic<unsigned long long> capture_ids{0};

void record_node(cudaStream_t s, hx_node n, bool counted)
{
    try {
        cap.graph->nodes.push_back(std::move(n));
    } catch (...) {
        cap.broken = true;
        fail(cudaErrorMemoryAllocation, "capture: no memory to keep an operation");
    }
    if (counted) issue(s);
}
} // namespace

int hoop__hx_capturing(cudaStream_t s)
{
    return cap_on && s == cap.stream;
}

int hoop__hx_capture_blocks(const char *call)
{
    if (!cap_on) return 0;
    cap.broken = true;
    fail(cudaErrorStreamCaptureUnsupported,
         "%s: not permitted while this thread captures a stream (it waits or allocates)", call);
    return 1;
}

int hoop__hx_capture_blocks_unsafe(const char *call)
{
    if (!cap_on || thread_mode == cudaStreamCaptureModeRelaxed ||
        cap.mode == cudaStreamCaptureModeRelaxed)
        return 0;
    return hoop__hx_capture_blocks(call);
}

int hoop__hx_deferred(cudaStream_t s)
{
    return hoop__hx_capturing(s) || is_lazy(s);
}

void hoop__hx_stream_op(cudaStream_t s, std::function<void()> op)
{
    if (is_lazy(s) && !hoop__hx_capturing(s))
        lazy_push(stream_of(s), std::move(op), false);
    else
        op();
}

void hoop__hx_record(cudaStream_t s, std::function<void()> op)
{
    if (!hoop__hx_capturing(s)) {
        if (is_lazy(s)) lazy_push(stream_of(s), std::move(op), true);
        return;
    }
    record_node(s, hx_node{std::move(op), {}}, true);
}

void hoop__hx_record_wait(cudaStream_t s, std::function<bool()> ready)
{
    if (hoop__hx_capturing(s)) record_node(s, hx_node{[] {}, std::move(ready)}, true);
}

void hoop__hx_record_launch(const char *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                            std::function<void()> op)
{
    if (!hoop__hx_check_launch(kernel, grid, block, smem, s)) return;
    hoop__hx_record(s, std::move(op));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode)
{
    if (sticky != cudaSuccess) return sticky;
    if (cap_on) {
        fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture: already capturing");
        return cudaErrorStreamCaptureUnsupported;
    }
    if (!s) { /* CUDA: the legacy stream cannot be captured */
        fail(cudaErrorStreamCaptureUnsupported, "cudaStreamBeginCapture: the legacy stream");
        return cudaErrorStreamCaptureUnsupported;
    }
    hoop__hx_graph *g = new (std::nothrow) hoop__hx_graph;
    if (!g) {
        fail(cudaErrorMemoryAllocation, "cudaStreamBeginCapture: no memory");
        return cudaErrorMemoryAllocation;
    }
    cap = capture{s, g, false, mode, ++capture_ids};
    cap_on = true;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    *graph = NULL;
    if (!cap_on || s != cap.stream) {
        fail(cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture: not capturing this stream");
        return cudaErrorStreamCaptureUnmatched;
    }
    cap_on = false;
    if (cap.broken) {
        cudaGraphDestroy(cap.graph); /* its user objects' references go with it */
        fail(cudaErrorStreamCaptureInvalidated,
             "cudaStreamEndCapture: a call inside the capture was not permitted");
        return cudaErrorStreamCaptureInvalidated;
    }
    *graph = cap.graph;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status)
{
    *status = !hoop__hx_capturing(s) ? cudaStreamCaptureStatusNone
              : cap.broken           ? cudaStreamCaptureStatusInvalidated
                                     : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus *status,
                                     unsigned long long *id, cudaGraph_t *graph)
{
    cudaStreamIsCapturing(s, status);
    if (id) *id = *status == cudaStreamCaptureStatusNone ? 0 : cap.id;
    if (graph) *graph = *status == cudaStreamCaptureStatusNone ? NULL : cap.graph;
    return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > cudaStreamCaptureModeRelaxed) {
        fail(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: bad mode");
        return cudaErrorInvalidValue;
    }
    cudaStreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    (void)flags;
    *exec = NULL;
    if (!graph) {
        fail(cudaErrorInvalidValue, "cudaGraphInstantiate: NULL graph");
        return cudaErrorInvalidValue;
    }
    hoop__hx_graph_exec *x = new (std::nothrow) hoop__hx_graph_exec;
    if (!x) {
        fail(cudaErrorMemoryAllocation, "cudaGraphInstantiate: no memory");
        return cudaErrorMemoryAllocation;
    }
    try {
        x->body = std::make_shared<exec_body>();
        x->body->nodes = graph->nodes;
        x->body->refs.reserve(graph->refs.size());
        for (cudaUserObject_t o : graph->refs) { /* the executable graph's own references */
            cudaUserObjectRetain(o, 1);
            x->body->refs.push_back(o);
        }
    } catch (...) {
        delete x;
        fail(cudaErrorMemoryAllocation, "cudaGraphInstantiate: no memory");
        return cudaErrorMemoryAllocation;
    }
    *exec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s)
{
    if (host_fn_blocks("cudaGraphLaunch")) return cudaErrorNotPermitted;
    if (!exec) {
        fail(cudaErrorInvalidValue, "cudaGraphLaunch: NULL graph");
        return cudaErrorInvalidValue;
    }
    if (sticky != cudaSuccess) return sticky;
    std::shared_ptr<exec_body> body = exec->body;
    size_t n = body->nodes.size();
    if (hoop__hx_capturing(s)) { /* a graph launched into a capture: its nodes, kept */
        for (size_t i = 0; i < n; i++) {
            const hx_node &node = body->nodes[i];
            std::function<void()> op = [body, i]() { body->nodes[i].op(); };
            record_node(s, hx_node{op, node.ready}, i + 1 == n);
        }
        return cudaSuccess;
    }
    /* Each node is issued in turn, as if issued now: it runs at once unless the stream is
     * lazy or held, and a wait that cannot pass holds the nodes after it. */
    if (n == 0)
        lazy_push(
            stream_of(s), [] {}, true);
    for (size_t i = 0; i < n; i++)
        lazy_push(
            stream_of(s),
            [body, i]() {
                if (sticky == cudaSuccess) body->nodes[i].op();
            },
            i + 1 == n, body->nodes[i].ready);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    if (!graph) return cudaSuccess;
    refs_release(graph->refs);
    delete graph;
    return cudaSuccess;
}

/* CUDA defers the release of what queued launches still use: the body goes with the last
 * of them (see exec_body). */
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete exec;
    return cudaSuccess;
}

// ----------------------------------------------------------------- host functions

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data)
{
    if (host_fn_blocks("cudaLaunchHostFunc")) return cudaErrorNotPermitted;
    if (sticky != cudaSuccess) return sticky;
    if (!fn) {
        fail(cudaErrorInvalidValue, "cudaLaunchHostFunc: NULL function");
        return cudaErrorInvalidValue;
    }
    std::function<void()> op = [fn, data]() { run_host_fn(fn, data); };
    if (hoop__hx_capturing(s))
        record_node(s, hx_node{op, {}}, true);
    else
        lazy_push(stream_of(s), op, true);
    return cudaSuccess;
}

// ----------------------------------------------------------------- user objects

cudaError_t cudaUserObjectCreate(cudaUserObject_t *obj, void *ptr, cudaHostFn_t destroy,
                                 unsigned initial_refs, unsigned flags)
{
    *obj = NULL;
    if (host_fn_blocks("cudaUserObjectCreate")) return cudaErrorNotPermitted;
    if (!destroy || initial_refs == 0 || flags != cudaUserObjectNoDestructorSync) {
        fail(cudaErrorInvalidValue, "cudaUserObjectCreate: %s",
             !destroy            ? "no destructor"
             : initial_refs == 0 ? "no reference"
                                 : "flags");
        return cudaErrorInvalidValue;
    }
    hoop__hx_user_object *o = new (std::nothrow) hoop__hx_user_object;
    if (!o) {
        fail(cudaErrorMemoryAllocation, "cudaUserObjectCreate: no memory");
        return cudaErrorMemoryAllocation;
    }
    o->refs.store(initial_refs);
    o->ptr = ptr;
    o->destroy = destroy;
    *obj = o;
    return cudaSuccess;
}

cudaError_t cudaUserObjectRetain(cudaUserObject_t obj, unsigned count)
{
    if (!obj || count == 0) {
        fail(cudaErrorInvalidValue, "cudaUserObjectRetain: %s", obj ? "count 0" : "NULL object");
        return cudaErrorInvalidValue;
    }
    obj->refs.fetch_add(count);
    return cudaSuccess;
}

/* The destructor runs where the last reference goes, as a host function (no CUDA). */
cudaError_t cudaUserObjectRelease(cudaUserObject_t obj, unsigned count)
{
    if (!obj || count == 0) {
        fail(cudaErrorInvalidValue, "cudaUserObjectRelease: %s", obj ? "count 0" : "NULL object");
        return cudaErrorInvalidValue;
    }
    if (obj->refs.fetch_sub(count) != count) return cudaSuccess;
    run_host_fn(obj->destroy, obj->ptr);
    delete obj;
    return cudaSuccess;
}

cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t obj, unsigned count,
                                      unsigned flags)
{
    if (!graph || !obj || count == 0 || (flags & ~(unsigned)cudaGraphUserObjectMove)) {
        fail(cudaErrorInvalidValue, "cudaGraphRetainUserObject: bad arguments");
        return cudaErrorInvalidValue;
    }
    try {
        graph->refs.reserve(graph->refs.size() + count);
    } catch (...) {
        fail(cudaErrorMemoryAllocation, "cudaGraphRetainUserObject: no memory");
        return cudaErrorMemoryAllocation;
    }
    if (!(flags & cudaGraphUserObjectMove)) obj->refs.fetch_add(count); /* else the caller's */
    for (unsigned i = 0; i < count; i++) graph->refs.push_back(obj);
    return cudaSuccess;
}
