/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/cuda/hx_int.h -- what the host execution layer's own files share (hx.cc: launches,
 * memory, streams, lazy queues; hx_graph.cc: capture, graphs, host functions, user
 * objects). Internal to the layer; see src/cuda/hx.h for what it models.
 *
 * Thread-safety: as each function's file says (lazy queues under one recursive lock).
 */
#ifndef HOOP_CUDA_HX_INT_H
#define HOOP_CUDA_HX_INT_H

#include <functional>

#include "cuda/hx.h"

namespace hoop_hx
{

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
 * device time at which ready() became true, for event timing. See hx.cc. */
void lazy_push(hoop__hx_stream *s, std::function<void()> op, bool counted,
               std::function<bool()> ready = {}, std::function<int64_t()> since = {});
/* 1 (and cudaErrorNotPermitted set, naming call) when the calling thread runs a host
 * function or a user object's destructor, which may not call CUDA; else 0. */
int host_fn_blocks(const char *call);
/* Runs fn(data) as a host function (CUDA calls from it fail, as above). */
void run_host_fn(cudaHostFn_t fn, void *data);

} // namespace hoop_hx

#endif /* HOOP_CUDA_HX_INT_H */
