/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx_int.h -- what the host execution layer's own files share (hx.cc: the last
 * error, devices, memory; hx_fiber.cc: launches and their fiber scheduler; hx_stream.cc:
 * streams, events, lazy queues; hx_graph.cc: capture, graphs, host functions, user
 * objects). Internal to the layer; see src/cuda/hx.h for what it models.
 *
 * Thread-safety: as each function's file says (lazy queues under one recursive lock).
 */
#ifndef HOOP_CUDA_HX_INT_H
#define HOOP_CUDA_HX_INT_H

#include <atomic>
#include <functional>
#include <mutex>

#include "cuda/hx.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define HX_ASAN 1
#else
#define HX_ASAN 0
#endif

namespace hoop_hx
{

struct fiber;
/* A launch while its blocks run (hx_fiber.cc). */
struct launch {
    const char *kernel;
    void (*fn)(void *);
    void *arg;
    int sync;
    fiber *cur; /* the running fiber (sync), or NULL */
    int failed;
};
/* The launch this OS thread runs, or NULL (fail() marks it failed). */
extern thread_local launch *running;
/* > 0 while this thread runs queued work (hx_stream.cc; issue() counts none). */
extern thread_local int draining;
/* hx.cc: the lock of the per-process state, this thread's current device, and the count
 * of cudaStreamWaitEvent calls (hoop__hx_count). */
extern std::mutex mem_mu;
extern thread_local int cur_dev;
extern std::atomic<unsigned long> n_wait;
/* 1 when device is one of the devices (else fails, naming call, and returns 0). */
int valid_device(const char *call, int device);
/* 1 when a kernel may be launched on s from this thread (else fails, naming kernel). */
int stream_on_current_device(const char *kernel, cudaStream_t s);
/* Runs s's queue up to its at-th piece of work (all: ~0ul), waiting for its waits. */
void lazy_wait(hoop__hx_stream *s, unsigned long at);
/* Runs every lazy or held stream's queue (a device-wide synchronisation). */
void lazy_run_all(void);
/* An execution failure that stays (cudaErrorLaunchFailure), per OS thread. */
extern thread_local cudaError_t sticky;
/* Sets the thread's last error (the first one is kept) and its detail. */
void fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Counts one piece of work issued to s (not while queued work runs). */
void issue(cudaStream_t s);
/* Whether work issued to s queues (a lazy stream, or one held behind a wait). */
int is_lazy(cudaStream_t s);
/* The stream behind s (NULL: the legacy stream). */
hoop__hx_stream *stream_of(cudaStream_t s);
/* Queues op on s (or runs it at once on a stream that neither is lazy nor held, when
 * ready() is true or absent); counted: one more piece of work; since (may be absent): the
 * device time at which ready() became true, for event timing. See hx_stream.cc. */
void lazy_push(hoop__hx_stream *s, std::function<void()> op, bool counted,
               std::function<bool()> ready = {}, std::function<int64_t()> since = {});
/* 1 (and cudaErrorNotPermitted set, naming call) when the calling thread runs a host
 * function or a user object's destructor, which may not call CUDA; else 0. */
int host_fn_blocks(const char *call);
/* Runs fn(data) as a host function (CUDA calls from it fail, as above). */
void run_host_fn(cudaHostFn_t fn, void *data);

} // namespace hoop_hx

#endif /* HOOP_CUDA_HX_INT_H */
