/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx.h -- the host execution layer: the part of CUDA that hoop's kernel sources
 * use, for the host's C++ compiler. The machines that build hoop have no GPU, so every
 * kernel source (.cu) is compiled a second time, by g++ with this header instead of
 * cuda_runtime.h (src/cuda/kern_rt.h picks), and its kernels run on the CPU in
 * `make check`, under ASan in CI: an indexing, bounds or barrier bug fails there, not
 * only on the rare GPU run.
 *
 * What it models:
 *   - A launch runs the grid's blocks one after another on the calling thread, in
 *     blockIdx order (x fastest), and returns when all have finished.
 *   - A plain launch (HOOP_KLAUNCH) runs a block's threads one after another, each to
 *     its end: for kernels without barriers. A synchronising launch (HOOP_KLAUNCH_SYNC)
 *     runs each thread as a fiber (ucontext, a 256 KiB stack above a guard page: locals
 *     beyond it stop the program with SIGSEGV) that runs until it reaches a barrier or
 *     returns. Each thread in turn goes as far as it can, in increasing thread order in
 *     one block and decreasing in the next (forward when the launch's number plus the
 *     block's linear index is even), so in a grid of two blocks or more a missing
 *     barrier shows as a read of shared memory that another thread has not written
 *     yet, whichever way the dependency runs: a wrong result the test sees.
 *   - __syncthreads() releases when every thread of the block that has not returned has
 *     reached it; threads waiting at different __syncthreads (different source lines)
 *     fail the launch (CUDA leaves that undefined). A warp shuffle (__shfl_*_sync) is a
 *     barrier of the lanes its mask names (lanes of a warp: 32 consecutive linear thread
 *     ids) that have not returned; each lane may name its own source lane or delta, and
 *     reads its own value where that lane is outside its segment, its mask or has
 *     returned (undefined in CUDA). Lanes that wait at shuffles of different modes,
 *     widths or masks, or a lane its own mask leaves out, fail the launch; so does a
 *     block whose threads can neither run nor be released (a deadlock).
 *   - __shared__ variables: one copy per block (a static thread-local: blocks run one
 *     at a time), zero in the first block an OS thread runs and then as the previous
 *     block left them (CUDA leaves them undefined: a kernel must write before it reads).
 *     Dynamic shared memory (HOOP_DYN_SHARED) is filled with 0xff bytes (NaN as f32)
 *     before each block, so a read before any write shows.
 *   - CUDA's launch limits (threads per block <= 1024 and per dimension 1024, 1024, 64;
 *     grid x < 2^31, y and z <= 65535; dynamic shared memory <= 48 KiB) and its error
 *     codes and strings, through cudaGetLastError(); hoop__hx_detail() says what in
 *     particular failed, for messages. A configuration error is reported once; an
 *     execution failure (cudaErrorLaunchFailure: the barrier and shuffle faults above)
 *     stays, as CUDA's do: every later launch, copy and synchronisation returns it until
 *     cudaDeviceReset().
 *   - Device memory is host memory: cudaMalloc is malloc (filled with 0xff bytes), so
 *     ASan sees every access outside an allocation; copies are memcpy. Devices, their
 *     memory's size, streams and events: see "devices, streams, events" below.
 *   - Hardware queues, only when CUDA_DEVICE_MAX_CONNECTIONS=N (1 to 32) is set when the
 *     first stream is made: streams take the N queues round robin in the order they are
 *     made (the legacy stream none), and work issued to a stream that is not lazy waits,
 *     as on a GPU, behind a stream of its queue held by an unmet wait (work that stream
 *     issued before it), which is how a stream call's wait can hold the collective's own
 *     copies (include/hoop/collectives.h). Unset, queues are not modeled. Lazy streams are
 *     not held by their queue's others.
 * What it does not model: warps in lockstep and their timing; memory ordering between
 * threads, blocks and streams (here everything is sequentially consistent, so a missing
 * __threadfence or a race between blocks passes); blocks that run at the same time (a
 * kernel that waits for another block deadlocks on a GPU, not here); streams running at
 * the same time (work runs when it is issued, or as late as possible on lazy streams:
 * "lazy streams" below); atomics' contention; the static __shared__ bytes in the 48 KiB
 * limit; a missing barrier in a one-block launch where every read is of an earlier
 * thread's write. Those are for the GPU run under compute-sanitizer (tests/gpu/run.sh;
 * today it runs check_cuda only; check_hx_gpu and the kernel-table tests are to join it).
 *
 * Owns: per OS thread, the fibers' stacks (kept for the next launch), the last error and
 * the current device; per process, the device memory's accounting (under a mutex).
 * Thread-safety: launches on different threads are independent; memory, stream and event
 * calls are thread-safe, as CUDA's are.
 */
#ifndef HOOP_CUDA_HX_H
#define HOOP_CUDA_HX_H

#ifdef __CUDACC__
#error "src/cuda/hx.h stands in for CUDA in host builds; nvcc builds include cuda_runtime.h"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <functional>

// ----------------------------------------------------------------- types

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_)
    {
    }
};
struct uint3 {
    unsigned x, y, z;
};

/* The codes and strings are CUDA's own (cuda_runtime_api.h, cudaGetErrorString). */
enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorDeviceUninitialized = 201, /* "invalid device context" */
    cudaErrorMapBufferObjectFailed = 205,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotPermitted = 800,
    cudaErrorNotSupported = 801,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureUnmatched = 903,
};
typedef enum cudaError_t cudaError;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
/* Streams and events are handles that know their device (see "devices, streams, events"
 * below); work on any stream runs when it is issued. Stream 0 is the legacy stream. */
typedef struct hoop__hx_stream *cudaStream_t;
typedef struct hoop__hx_event *cudaEvent_t;
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
enum { cudaEventDefault = 0, cudaEventBlockingSync = 1, cudaEventDisableTiming = 2 };
/* The few fields of CUDA's cudaDeviceProp that hoop reads. */
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor, multiProcessorCount;
};

// ----------------------------------------------------------------- kernel qualifiers

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define warpSize 32

/* What a running thread sees; hoop__hx_cur points at the current thread's copy. */
struct hoop__hx_view {
    uint3 thread, block;
    dim3 bdim, gdim;
};
extern thread_local const struct hoop__hx_view *hoop__hx_cur;
#define threadIdx (hoop__hx_cur->thread)
#define blockIdx (hoop__hx_cur->block)
#define blockDim (hoop__hx_cur->bdim)
#define gridDim (hoop__hx_cur->gdim)

// ----------------------------------------------------------------- barriers, shuffles

void hoop__hx_syncthreads(int line);
#define __syncthreads() hoop__hx_syncthreads(__LINE__)

enum { HOOP__HX_SHFL_IDX, HOOP__HX_SHFL_DOWN, HOOP__HX_SHFL_UP, HOOP__HX_SHFL_XOR };
/* The warp barrier behind every shuffle: publishes *v (bytes <= 8), waits for the lanes
 * mask names (at a shuffle of the same mode, width and mask), and copies the value of
 * the lane that mode and arg name into *out (its own value where that lane is outside
 * the width segment or the mask, or has returned); the top of this file says what fails. */
void hoop__hx_shfl(int mode, unsigned mask, const void *v, void *out, size_t bytes, int arg,
                   int width);
template <class T> static inline T hoop__hx_shfl_t(int mode, unsigned mask, T v, int arg, int w)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    T out;
    hoop__hx_shfl(mode, mask, &v, &out, sizeof(T), arg, w);
    return out;
}
template <class T> static inline T __shfl_sync(unsigned m, T v, int lane, int w = 32)
{
    return hoop__hx_shfl_t(HOOP__HX_SHFL_IDX, m, v, lane, w);
}
template <class T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32)
{
    return hoop__hx_shfl_t(HOOP__HX_SHFL_DOWN, m, v, (int)d, w);
}
template <class T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32)
{
    return hoop__hx_shfl_t(HOOP__HX_SHFL_UP, m, v, (int)d, w);
}
template <class T> static inline T __shfl_xor_sync(unsigned m, T v, int lanemask, int w = 32)
{
    return hoop__hx_shfl_t(HOOP__HX_SHFL_XOR, m, v, lanemask, w);
}

// ----------------------------------------------------------------- atomics, math

/* Blocks and threads run one at a time, so an atomic is its plain read-modify-write. */
template <class T> static inline T atomicAdd(T *p, T v)
{
    T old = *p;
    *p = old + v;
    return old;
}
template <class T> static inline T atomicMax(T *p, T v)
{
    T old = *p;
    if (v > old) *p = v;
    return old;
}
template <class T> static inline T atomicCAS(T *p, T cmp, T v)
{
    T old = *p;
    if (old == cmp) *p = v;
    return old;
}
template <class A, class B> static inline auto min(A a, B b) -> decltype(a + b)
{
    return b < a ? b : a;
}
template <class A, class B> static inline auto max(A a, B b) -> decltype(a + b)
{
    return a < b ? b : a;
}
#define __expf(x) expf(x) /* glibc declares __expf and __logf itself */
#define __logf(x) logf(x)
static inline float __fdividef(float a, float b)
{
    return a / b;
}
static inline float rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}
/* A product rounded on its own (CUDA never fuses it with an add into an FMA; the host's
 * compiler, for x86-64 without -mfma, does not fuse at all). */
static inline float __fmul_rn(float a, float b)
{
    return a * b;
}

// ----------------------------------------------------------------- launches

/* Runs fn(arg) as every thread of grid x block (see the top of this file); sync = 1 for a
 * launch whose kernel uses barriers or shuffles. A bad configuration runs nothing. The
 * outcome is read with cudaGetLastError(). */
void hoop__hx_launch(const char *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                     int sync, void (*fn)(void *), void *arg);
/* Stream capture (hx_graph.cc): 1 when s is being captured; a launch on it is then
 * checked (its configuration, as CUDA checks it at capture) and kept by
 * hoop__hx_record_launch instead of run. */
int hoop__hx_capturing(cudaStream_t s);
/* 1 when work issued to s is not run at once: s is being captured, or s is a lazy stream
 * (see "lazy streams" below); hoop__hx_record keeps or queues it. */
int hoop__hx_deferred(cudaStream_t s);
void hoop__hx_record_launch(const char *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                            std::function<void()> op);
template <class F>
static inline void hoop__hx_run(const char *kernel, dim3 grid, dim3 block, size_t smem,
                                cudaStream_t s, int sync, F f)
{
    if (hoop__hx_deferred(s)) {
        hoop__hx_record_launch(kernel, grid, block, smem, s, [=]() {
            F g = f;
            hoop__hx_launch(
                kernel, grid, block, smem, s, sync, [](void *p) { (*(F *)p)(); }, &g);
        });
        return;
    }
    hoop__hx_launch(
        kernel, grid, block, smem, s, sync, [](void *p) { (*(F *)p)(); }, &f);
}
/* The current block's dynamic shared memory (the launch's smem bytes). */
void *hoop__hx_dyn_shared(void);
/* What the last failure was, in words ("block_sum: 1025 threads per block, more than
 * 1024"), or "" when none has happened on this thread since the last cudaGetLastError. */
const char *hoop__hx_detail(void);

// ----------------------------------------------------------------- runtime stand-ins

cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaMalloc(void **p, size_t bytes);
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t bytes)
{
    return cudaMalloc((void **)p, bytes);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void); /* clears an execution failure (and nothing else here) */

// ----------------------------------------------------------------- devices, streams, events
/*
 * What these model: a number of devices (1 unless a test says otherwise), the calling
 * thread's current device (0 until cudaSetDevice, per OS thread as in CUDA), and device
 * memory of a fixed size (the host's physical memory unless a test says otherwise):
 * cudaMalloc refuses what would exceed it (cudaErrorMemoryAllocation, nothing allocated)
 * and cudaMemGetInfo reports what is left. cudaMalloc's memory is 256-byte aligned (an
 * allocation of a page or more: page aligned, whole pages of its own, the bytes past the
 * request poisoned under ASan), cudaMallocHost's page aligned, and freeing what was not allocated
 * (or twice) is cudaErrorInvalidValue. Streams and events record their device: CUDA's rules that a
 * kernel launch fails on a stream of another device than the current one, and that
 * cudaEventRecord fails when event and stream belong to different devices, hold
 * (cudaErrorInvalidResourceHandle); memcpys and waits across devices succeed, as in CUDA.
 * Each stream counts the work issued to it, an event records that count, and
 * cudaStreamWaitEvent makes the waiting stream "ordered after" that much of the
 * recording stream's work: hoop__hx_stream_ordered reads it back, so a test can see a
 * missing or misplaced wait although the work itself ran at once.
 * Event timing (cudaEventElapsedTime, for events made without cudaEventDisableTiming) is
 * the layer's model of device time: each stream keeps the time (CLOCK_MONOTONIC) at
 * which the work it has run finished. Work that runs when it is issued finishes then; a
 * piece queued behind a wait (lazy or held streams, below) starts when the stream
 * finished the piece before, it was issued, and its wait passed, whichever is last (a
 * wait for an event passes at that record's time, a wait for a value at the store that
 * met it: hoop__hx_write_value32), and lasts as long as it takes when it runs. A record
 * gets the stream's time when the work before it has run (or the time it was issued, if
 * later). So a record behind a held wait reads when the wait's condition became true, not
 * when the host later asked, as on a GPU that runs every stream at once.
 * Not modelled: devices' separate memories (one memory of that size serves them all, and
 * a pointer works on every device), peer
 * access, a stream's flags (kept, without effect), concurrency between
 * streams (there is none here: everything is ordered; lazy streams, below, run work as
 * late as possible instead, which is what a missing wait needs to show).
 */
cudaError_t cudaGetDeviceCount(int *count); /* cudaErrorNoDevice (count 0) when none */
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
/* What a pointer is (cudaPointerGetAttributes): device memory from cudaMalloc, host
 * memory from cudaMallocHost or cudaHostRegister (pinned), or anything else
 * (unregistered), found by the range it falls in; only the type field is filled in. */
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
    cudaMemoryType type;
    int device;
};
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *attr, const void *p);
enum { cudaHostRegisterDefault = 0 };
/* Records the range as pinned (cudaErrorHostMemoryAlreadyRegistered for a range already
 * recorded; cudaHostUnregister of one that is not: cudaErrorInvalidValue). */
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void *p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventQuery(cudaEvent_t e); /* cudaSuccess: work ran when it was issued */
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
/* *ms = device time from start's record to end's (the model above): cudaErrorNotReady
 * while either has not completed, cudaErrorInvalidResourceHandle for an event never
 * recorded or made with cudaEventDisableTiming. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

// ----------------------------------------------------------------- stream capture, graphs
/*
 * What these model (hx_graph.cc; CUDA C++ Programming Guide, "CUDA Graphs", stream
 * capture in cudaStreamCaptureModeThreadLocal): between cudaStreamBeginCapture and
 * cudaStreamEndCapture on a stream, the kernels (their configuration checked at once),
 * cuBLAS GEMMs, async copies and memsets, host functions (cudaLaunchHostFunc) and value
 * waits (hoop__hx_stream_wait_value32) issued to it are kept, not run; a copy between
 * the host and the device from or to memory not from cudaMallocHost breaks the capture
 * (a graph must not read pageable memory it cannot see), and so does any call of the
 * capturing thread that waits (cudaFree, cudaFreeHost, cudaMemcpy, cudaMemset,
 * cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize) or, unless the
 * thread's mode is cudaStreamCaptureModeRelaxed (cudaThreadExchangeStreamCaptureMode;
 * a capture begun in that mode counts too), allocates or pins (cudaMalloc,
 * cudaMallocHost, cudaHostRegister): it returns cudaErrorStreamCaptureUnsupported and
 * cudaStreamEndCapture then returns cudaErrorStreamCaptureInvalidated and no graph.
 * cudaStreamGetCaptureInfo names the graph being captured. cudaGraphLaunch issues the
 * kept work to the stream in capture order, each piece as if issued then (reading
 * memory as it is when it runs: a kept host-to-device copy reads its host buffer at each
 * launch), so a kept value wait whose condition is false holds the rest of the launch,
 * and what follows it on the stream, as a wait issued directly does (stream memory
 * operations below). User objects (cudaUserObjectCreate) are counted references whose
 * destructor runs when the last is released: a graph owns those given to it
 * (cudaGraphRetainUserObject), an executable graph takes its own at instantiation, and
 * an executable graph destroyed while launches of it are queued keeps its work, and its
 * references, until they have run (CUDA defers the release the same way). A destructor
 * runs on whichever thread drops the last reference, as a host function does; both may
 * not call CUDA: a call from one fails with cudaErrorNotPermitted (CUDA says the result
 * is undefined). Not modelled: graphs as DAGs (work is a list: the order of capture),
 * capture across several streams, event record/wait nodes (ordering is trivially kept),
 * global mode's reach into other threads (the restrictions above apply to the capturing
 * thread only), graph updates, a host function's own thread (it runs on the thread that
 * runs the stream's work: the issuing thread, or one that waits for the stream).
 */
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
};
typedef struct hoop__hx_graph *cudaGraph_t;
typedef struct hoop__hx_graph_exec *cudaGraphExec_t;
typedef struct hoop__hx_user_object *cudaUserObject_t;
typedef void (*cudaHostFn_t)(void *data);
enum { cudaUserObjectNoDestructorSync = 0x1 }; /* the values are CUDA's */
enum { cudaGraphUserObjectMove = 0x1 };
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status);
/* status as cudaStreamIsCapturing; *id a number per capture; *graph the graph being
 * captured (NULL when none). id and graph may be NULL. */
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus *status,
                                     unsigned long long *id = NULL, cudaGraph_t *graph = NULL);
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode *mode);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
/* fn(data) in s's order: at once on a stream that runs work when issued, when the
 * stream's queue reaches it on a lazy or held one, at each launch when captured. */
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data);
cudaError_t cudaUserObjectCreate(cudaUserObject_t *obj, void *ptr, cudaHostFn_t destroy,
                                 unsigned initial_refs, unsigned flags);
cudaError_t cudaUserObjectRetain(cudaUserObject_t obj, unsigned count = 1);
cudaError_t cudaUserObjectRelease(cudaUserObject_t obj, unsigned count = 1);
cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t obj, unsigned count = 1,
                                      unsigned flags = 0);
/* For the layer itself: when the calling thread is capturing, breaks the capture and
 * returns 1 (the caller then fails with cudaErrorStreamCaptureUnsupported), naming call;
 * else 0. hoop__hx_capture_blocks_unsafe does so only outside relaxed mode (an
 * allocation). hoop__hx_record keeps op for the capture on s, or queues it on a lazy s
 * (one piece of work issued to s); hoop__hx_record_wait keeps a wait (the rest of a
 * launch waits until ready() is true). hoop__hx_pinned says whether [p, p + bytes) lies
 * in one cudaMallocHost allocation. */
int hoop__hx_capture_blocks(const char *call);
int hoop__hx_capture_blocks_unsafe(const char *call);
void hoop__hx_record(cudaStream_t s, std::function<void()> op);
void hoop__hx_record_wait(cudaStream_t s, std::function<bool()> ready);
int hoop__hx_pinned(const void *p, size_t bytes);
/* Checks a launch's configuration as hoop__hx_launch does (1: good; else the error is
 * set). */
int hoop__hx_check_launch(const char *kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t s);

// ----------------------------------------------------------------- lazy streams
/*
 * A test switch for code that uses several streams: with TEST_HX_LAZY=1 in the
 * environment when the first stream is made (or after hoop__hx_set_lazy(1)), every stream
 * made from then on is lazy: what is issued to it (kernels, cuBLAS GEMMs, async copies and
 * memsets, graph launches, host functions, cudaStreamWaitEvent) is queued in order and runs
 * only when the host needs it, as late as CUDA's ordering rules allow: cudaStreamSynchronize runs
 * the stream's queue, cudaEventSynchronize and cudaEventQuery run the recording stream up to the
 * event, cudaDeviceSynchronize, cudaFree, cudaFreeHost and cudaStreamDestroy run every queue; a
 * queued cudaStreamWaitEvent runs the producer up to the event when the waiter reaches it (a waiter
 * that is not lazy makes it run at once). So a missing cross-stream wait leaves the consumer
 * reading the old bytes, and host memory rewritten before the copy that reads it has been waited
 * for is copied with its new contents: both change results a test sees, where the eager layer
 * (everything runs when issued) hides them. A copy from pageable host memory reads it when issued
 * (as CUDA stages it) and one to pageable memory runs the stream first and returns done; cudaMemcpy
 * (the legacy stream, which non-blocking streams do not wait for) runs at once. What shows depends
 * on the host's waits: a wait for one stream's event runs that stream (and what it waited for) and
 * nothing else, so a test should wait only as the code under test does (a wait for every step hides
 * what a later wait would have shown). Queued work runs on the thread that needs it, under one
 * lock. hoop__hx_stream_op runs op in s's order without counting it as work (the allocator's reuse
 * fill and ASan poisoning under the layer: a block's next user is queued behind the last one): at
 * once unless s is lazy.
 */
void hoop__hx_stream_op(cudaStream_t s, std::function<void()> op);

// ----------------------------------------------------------------- stream memory operations
/*
 * The driver's cuStreamWaitValue32 with CU_STREAM_WAIT_VALUE_GEQ or _EQ (what the CUDA
 * build reaches through cudaGetDriverEntryPoint): work issued to s after this call runs
 * only once (int32_t)(*addr - value) >= 0 (GEQ: a cyclic comparison) or *addr == value
 * (EQ), where *addr is host memory that another thread stores to (with release order;
 * the wait reads with acquire). The calling thread does not wait: a stream whose wait
 * cannot pass when it is issued holds what is issued to it after (queued, as on a lazy
 * stream, even on a stream that is not lazy) until the condition is true and someone
 * needs the work: cudaStreamSynchronize and the other host waits of "lazy streams" above
 * wait for the condition (without a deadline, as CUDA's), cudaEventQuery of an event
 * recorded after the wait returns cudaErrorNotReady while it holds, and
 * cudaStreamWaitEvent on such an event holds the waiter in turn. In a capture it is kept
 * as a wait node (see "stream capture, graphs"). flags: HOOP__HX_WAIT_GEQ or _EQ
 * (CU_STREAM_WAIT_VALUE_GEQ's and _EQ's values); another is cudaErrorInvalidValue.
 * TEST_HX_NO_STREAM_MEMOPS=1 (read once) models a driver without stream memory
 * operations: every call returns cudaErrorNotSupported and queues nothing.
 */
enum { HOOP__HX_WAIT_GEQ = 0x0, HOOP__HX_WAIT_EQ = 0x1 };
cudaError_t hoop__hx_stream_wait_value32(cudaStream_t s, const uint32_t *addr, uint32_t value,
                                         unsigned flags);
/* *addr = value with release order, as a host thread meeting such a wait stores it; the
 * layer notes when (the last 256 stores), so a queued wait that this store lets pass
 * starts its stream's later work then in device time (event timing, above). */
void hoop__hx_write_value32(uint32_t *addr, uint32_t value);

// ----------------------------------------------------------------- interprocess memory
/*
 * CUDA IPC (hx_ipc.cc; CUDA Runtime API, "Device Management": cudaIpcGetMemHandle,
 * cudaIpcOpenMemHandle, cudaIpcCloseMemHandle), modelled with memory files so that the
 * tests run it between real processes:
 *   - cudaIpcGetMemHandle(&h, p): p lies in an allocation of cudaMalloc; the handle names
 *     that whole allocation (as CUDA's does), whatever p's offset in it. The first export
 *     moves the allocation's pages into a memfd (same address, same contents: the memory
 *     becomes a shared mapping of the file) and keeps the file open until cudaFree; the
 *     handle holds (magic, pid, fd, st_dev, st_ino, length). An allocation below one page
 *     is refused (cudaErrorInvalidValue; cudaMalloc gives every allocation of a page or
 *     more whole pages of its own, smaller ones share pages with the host's heap).
 *   - cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) in another process opens
 *     /proc/<pid>/fd/<fd>, checks that it is the same file (st_dev, st_ino, length: a
 *     reused fd number or pid is refused) and maps it whole; q is the allocation's base.
 *     Opened in the exporting process itself: cudaErrorDeviceUninitialized ("invalid
 *     device context"), as CUDA refuses it. Opened again in the same process: the same q,
 *     counted (CUDA's reference count). A handle that names nothing (an exporter gone or
 *     that freed it, a forged handle): cudaErrorMapBufferObjectFailed; flags other than
 *     cudaIpcMemLazyEnablePeerAccess: cudaErrorInvalidValue. q reads as device memory
 *     (cudaPointerGetAttributes); cudaFree(q) is cudaErrorInvalidValue.
 *   - cudaIpcCloseMemHandle(q) drops one count and unmaps at the last (another pointer:
 *     cudaErrorInvalidValue).
 *   - cudaFree of an exported allocation: CUDA leaves a peer that still has it open
 *     undefined; here it fails (cudaErrorInvalidValue, naming that process, found in
 *     /proc/<pid>/maps) after freeing it anyway, its bytes made 0xff (NaN as f32) first
 *     so that such a peer reads garbage it can see; the pages go back to private memory
 *     and the file is closed.
 * Not modelled: contexts (CUDA lets one context per device and process open a given
 * handle; here a process is one context), devices and peer access (lazy peer access
 * always succeeds: there is one memory), CUDA's allocation granularity (a handle of a
 * small allocation that shares a 2 MiB page with others maps them too on a GPU), IPC
 * event handles (cudaIpcGetEventHandle), and a fork after an export: the child shares
 * the exported pages instead of getting a copy (CUDA is unusable in such a child anyway).
 */
#define CUDA_IPC_HANDLE_SIZE 64
typedef struct cudaIpcMemHandle_st {
    char reserved[CUDA_IPC_HANDLE_SIZE];
} cudaIpcMemHandle_t;
enum { cudaIpcMemLazyEnablePeerAccess = 1 };
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *p);
cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t handle, unsigned flags);
cudaError_t cudaIpcCloseMemHandle(void *p);
/* For the layer itself (hx.cc <-> hx_ipc.cc): the cudaMalloc allocation holding p (its
 * base and its bytes as asked; 0 when none); the length cudaMalloc gives an allocation of
 * bytes (whole pages from one page up); whether p lies in memory opened from a handle;
 * what cudaFree does to an exported allocation before the heap gets it back (returning
 * cudaFree's verdict); the thread's last error set to e with a detail. */
int hoop__hx_dev_find(const void *p, void **base, size_t *bytes);
size_t hoop__hx_dev_len(size_t bytes);
int hoop__hx_ipc_imported(const void *p);
cudaError_t hoop__hx_ipc_release(void *base, size_t bytes);
void hoop__hx_set_error(cudaError_t e, const char *detail);

/* Test hooks, with C linkage (tests in C declare them themselves). */
extern "C" {
/* Pretends count devices (0: none; < 0: no driver, cudaGetDeviceCount failing with
 * cudaErrorInsufficientDriver) of bytes each (0: the host's physical memory); for a
 * test, before anything else touches the layer. */
void hoop__hx_set_devices(int count, size_t bytes);
/* After n more successful cudaMalloc calls, every later one fails with error e (and
 * allocates nothing), until this hook is called again; n < 0 turns the failure off. */
void hoop__hx_fail_malloc_after(long n, int e);
/* How many times call ("cudaMalloc", "cudaFree", "cudaMallocHost", "cudaFreeHost",
 * "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaStreamWaitEvent") has succeeded
 * in this process; 0 for another name. */
unsigned long hoop__hx_count(const char *call);
/* 1 when waiter has waited (cudaStreamWaitEvent) for an event recorded on producer after
 * every piece of work issued to producer so far, else 0. */
int hoop__hx_stream_ordered(cudaStream_t waiter, cudaStream_t producer);
/* Streams made from now on are lazy (on != 0) or run work when it is issued (0); see
 * "lazy streams" above. */
void hoop__hx_set_lazy(int on);
/* Streams made from now on share n hardware queues (1 to 32; 0: not modeled), as with
 * CUDA_DEVICE_MAX_CONNECTIONS=n; see "Hardware queues" above. */
void hoop__hx_set_queues(int n);
/* How many pieces of work are queued on s and have not run (0 for a stream that is not
 * lazy). */
unsigned long hoop__hx_queued(cudaStream_t s);
}

#endif /* HOOP_CUDA_HX_H */
