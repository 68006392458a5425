/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/collectives.h -- all-reduce, broadcast, reduce, all-gather, reduce-scatter, barrier.
 *
 * Every collective is enqueued on the communicator's progress thread in call order and
 * returns at once. With req != NULL the caller gets a hoop_request to hoop_test or
 * hoop_wait (include/hoop/comm.h) and the call runs in the background: it starts at once,
 * or within 2 ms when a caller was driving progress a moment before (the thread then
 * naps rather than compete with a wait that usually follows at once); with req == NULL
 * the call blocks until done (async + wait with the comm's timeout, run on the caller's
 * thread while it makes progress). Buffers must stay valid and untouched until the
 * request completes.
 *
 * Common rules:
 *   - count is in elements of dtype (size_t); 0 is allowed and moves no data.
 *   - In-place when sendbuf == recvbuf (all-gather: sendbuf == recvbuf + rank * count
 *     elements; reduce-scatter: recvbuf == sendbuf + rank * count elements). Otherwise
 *     the two buffers must not overlap: a partial overlap (recvbuf == sendbuf + 1, say)
 *     cannot be honoured (ranks would read elements already overwritten and end with
 *     different results) and is refused with HOOP_ERR_INVALID naming both buffers, for
 *     GPU buffers (pointers into one allocation) as for host ones. Broadcast and reduce
 *     check it on the root only, the one rank that uses both buffers.
 *   - A call refused for its arguments on some ranks only does not leave the others
 *     waiting: the refusing rank returns HOOP_ERR_INVALID, and its refusal still takes
 *     the call's turn (a barrier carrying the call, marked refused), so every other
 *     rank fails that call promptly with HOOP_ERR_MISMATCH naming the refusing rank
 *     ("refused by that rank as invalid"); the comm then stays failed. When every rank
 *     refuses the same call, every rank gets HOOP_ERR_INVALID and the comm goes on. A
 *     blocking call (req == NULL) that is refused returns once that barrier is over, so
 *     the others have heard of it before this rank goes on or exits. Not on a one-rank
 *     comm, nor for a NULL comm, nor for a stream call while its stream is captured
 *     (that rank alone refuses it).
 *   - Every rank must call the same collectives in the same order. Before any rank
 *     completes a call, every rank learns that every rank called the same collective
 *     with the same count, dtype, op, root and algorithm (the vote: lg world_size rounds
 *     of one 128-byte record over recursive-doubling partners, run alongside the data;
 *     src/collectives/vote.c). A call that differs on any rank fails on EVERY rank with
 *     HOOP_ERR_MISMATCH naming two of the different calls; the comm then stays failed.
 *     The calls before it still complete on every rank, also on a rank that is still
 *     finishing one when the others, done with it, find the mismatch.
 *     Output buffers of a failed call are unspecified (a rank may have received data
 *     before the vote finished), and so is an in-place buffer's content.
 *   - Sums and products of integers wrap (two's complement); HOOP_OP_AVG is only
 *     defined for floating types (f32, f64, f16, bf16) and is rejected with
 *     HOOP_ERR_INVALID for integers: use HOOP_OP_SUM and divide.
 *   - f16 and bf16 are combined in f32 and each combination is rounded once to the
 *     destination type (round to nearest even), so a SUM whose partial sums exceed the
 *     type's range is inf, the same inf on every rank. AVG never overflows where the
 *     average itself fits: through the links (ring, rd, rhd, the reduce chain) each
 *     rank's input is divided by world_size first (in f32, rounded once) and the
 *     quotients are summed, saturating at the largest finite value (no partial sum of
 *     x / n exceeds max |x| but by rounding), so |result - mean| <= world_size x u x
 *     mean(|x|), with u = 2^-11 for f16 and 2^-8 for bf16; the direct algorithm
 *     combines in f64 and rounds once (the mean rounded to the type). f32 and f64 AVG
 *     sum, then divide once.
 *   - MIN and MAX propagate NaN: an element where any rank holds NaN is NaN on every
 *     rank, whichever rank and position holds it (as torch.minimum / torch.maximum and
 *     IEEE 754-2019 minimum / maximum); SUM and PROD propagate it by IEEE arithmetic.
 *     Which NaN (sign, payload) comes out is unspecified, and so is which zero MIN and
 *     MAX give for -0 and +0 (they compare equal); either is the same on every rank.
 *   - Results are bitwise identical on every rank (each element is reduced once and
 *     copied). They are also identical from run to run for the same world size,
 *     algorithm (AUTO chooses by size), HOOP_CHUNK_BYTES and data at the same offsets.
 *     The order in which an element's contributions are combined depends on the
 *     algorithm and, for ring and direct, on the element's position in the buffer (the
 *     segment or share it falls in), so the same data all-reduced as one fused buffer
 *     or as several separate ones may differ by rounding: each result of an f32 SUM is
 *     within (n - 1) x 2^-24 x sum(|x_r|) of the exact sum (n = world_size; Higham,
 *     "Accuracy and Stability of Numerical Algorithms", 2002, ch. 4), so two such
 *     results differ by at most twice that (f64: 2^-53; AVG: divided by n).
 *   - Buffers that are reduced (all-reduce, reduce, reduce-scatter) must be aligned to
 *     their elements (as any typed access in C); others may lie at any byte.
 *   - Errors: HOOP_ERR_INVALID (bad argument, named), HOOP_ERR_MISMATCH (above),
 *     HOOP_ERR_REMOTE (a peer died or closed; named), HOOP_ERR_TIMEOUT (naming the rank
 *     this rank was still waiting for), HOOP_ERR_NOMEM, HOOP_ERR_INTERNAL.
 *   - Thread-safety: one thread issues collectives on a given comm at a time. A thread
 *     that enters a call while another thread is inside one on the same comm fails the
 *     comm with HOOP_ERR_USAGE naming both calls (its peers fail naming this rank):
 *     two threads' calls would be numbered in a different order on different ranks,
 *     and calls of one signature would pair one thread's data with the other's. Calls
 *     of several threads that never overlap in time cannot be told from one thread's:
 *     their order, the same on every rank, is the program's to keep (as NCCL's).
 */
#ifndef HOOP_COLLECTIVES_H
#define HOOP_COLLECTIVES_H

#include <stddef.h>

#include "hoop/comm.h"
#include "hoop/export.h"
#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

typedef enum hoop_dtype {
    HOOP_DTYPE_F32 = 0,
    HOOP_DTYPE_F64 = 1,
    HOOP_DTYPE_F16 = 2,  /* IEEE binary16, stored as uint16_t */
    HOOP_DTYPE_BF16 = 3, /* bfloat16, stored as uint16_t */
    HOOP_DTYPE_I32 = 4,
    HOOP_DTYPE_I64 = 5,
    HOOP_DTYPE_U8 = 6,
    HOOP_DTYPE_COUNT_ = 7
} hoop_dtype;

typedef enum hoop_op {
    HOOP_OP_SUM = 0,
    HOOP_OP_PROD = 1,
    HOOP_OP_MIN = 2,
    HOOP_OP_MAX = 3,
    HOOP_OP_AVG = 4, /* sum / world_size; floating types only */
    HOOP_OP_COUNT_ = 5
} hoop_op;

/* Size of one element in bytes; 0 for an unknown dtype. */
HOOP_API size_t hoop_dtype_size(hoop_dtype dtype);
/* "f32", "f64", "f16", "bf16", "i32", "i64", "u8"; "?" when unknown. */
HOOP_API const char *hoop_dtype_name(hoop_dtype dtype);
/* "sum", "prod", "min", "max", "avg"; "?" when unknown. */
HOOP_API const char *hoop_op_name(hoop_op op);

/* recvbuf[i] = op over ranks of sendbuf[i], i < count, on every rank. The algorithm is
 * the comm's (hoop_comm_set_algo / HOOP_ALGO / cost model): ring = reduce-scatter then
 * all-gather in pipelined chunks (Patarasuk & Yuan 2009), bandwidth-optimal, sending
 * 2(n-1)/n x count x size bytes per rank; rd and rhd from Thakur, Rabenseifner & Gropp
 * 2005. */
HOOP_API hoop_status hoop_allreduce(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, hoop_dtype dtype, hoop_op op, hoop_request **req);

/* Copies root's sendbuf (count elements) into every rank's recvbuf; sendbuf is only read
 * on root (in-place when equal). Pipelined chain along the ring starting at root. */
HOOP_API hoop_status hoop_broadcast(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, hoop_dtype dtype, int root, hoop_request **req);

/* root's recvbuf[i] = op over ranks of sendbuf[i]; recvbuf is ignored on other ranks
 * (may be NULL). Pipelined chain along the ring ending at root. */
HOOP_API hoop_status hoop_reduce(hoop_comm *comm, const void *sendbuf, void *recvbuf, size_t count,
                                 hoop_dtype dtype, hoop_op op, int root, hoop_request **req);

/* recvbuf (world_size x count elements) receives rank r's sendbuf (count elements) at
 * offset r x count, on every rank. Ring, (n-1)/n x total bytes per rank; in place on
 * memory from hoop_comm_alloc_shared, direct (each rank copies the others' blocks from
 * their copies). */
HOOP_API hoop_status hoop_allgather(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, hoop_dtype dtype, hoop_request **req);

/* sendbuf holds world_size x count elements; rank r's recvbuf (count elements) receives
 * op over ranks of block r. Ring, (n-1)/n x total bytes per rank; in place on memory
 * from hoop_comm_alloc_shared, direct (rank r reduces block r over every rank's copy). */
HOOP_API hoop_status hoop_reduce_scatter(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                         size_t count, hoop_dtype dtype, hoop_op op,
                                         hoop_request **req);

/* Returns on each rank only after every rank has entered it: the barrier is the vote
 * that opens every call (lg world_size rounds of one message each, recursive doubling
 * with the fold of Thakur, Rabenseifner & Gropp 2005 for other world sizes). */
HOOP_API hoop_status hoop_barrier(hoop_comm *comm, hoop_request **req);

/* ----------------------------------------------------------------- ordered on a CUDA stream
 *
 * The _stream forms below run the same collectives in the order of a CUDA stream, as
 * NCCL's calls do: the collective starts once the work queued on the stream before the
 * call has finished, and work queued on the stream after the call waits until the
 * collective has finished, on the device; the calling thread is not blocked (it queues
 * an event and a wait on the stream, and returns). Pass a cudaStream_t cast to
 * hoop_stream * (this header does not include CUDA's); NULL is the legacy default
 * stream. Everything else is as in the forms above: shapes, in-place rules, results,
 * algorithms; buffers may be GPU memory or host memory (which the collective reads and
 * writes from the host, in the same order).
 *
 *     cudaStream_t s;  ... a kernel on s writes grad ...
 *     hoop_allreduce_stream(comm, grad, grad, n, HOOP_DTYPE_F32, HOOP_OP_AVG,
 *                           (hoop_stream *)s);
 *     ... a kernel on s reads grad: it runs after the all-reduce ...
 *
 * Rules:
 *   - Buffers must stay valid and untouched by other streams until the stream has
 *     passed the call (cudaStreamSynchronize, or an event recorded after it).
 *   - The stream must belong to the rank's device (the worker's: HOOP_CUDA_DEVICE, else
 *     LOCAL_RANK modulo the device count; the call makes it the thread's current device,
 *     as every CUDA use of hoop does); recording on another device's stream fails with
 *     HOOP_ERR_CUDA. A stream being captured into a CUDA graph captures the call (below).
 *   - Ordering is per communicator too: the comm runs its calls, stream or not, in call
 *     order, so a stream call waits for the calls issued before it, and a host call
 *     issued after a stream call waits (hoop_wait, or blocking) for the stream to reach it.
 *   - Errors found at the call (bad arguments as in the forms above; HOOP_ERR_UNSUPPORTED
 *     when CUDA is not available; HOOP_ERR_CUDA naming the CUDA call) return at once and
 *     queue nothing. A driver without stream memory operations (cuStreamWaitValue32, on
 *     by default from CUDA 12's drivers) cannot queue the wait: the calls then block (see
 *     "Hardware queues" below), after one INFO line saying why. A collective
 *     that fails later (a peer that died or never called: HOOP_ERR_REMOTE or
 *     HOOP_ERR_TIMEOUT naming it, after HOOP_TIMEOUT at most; a mismatch; work queued on
 *     the stream before the call that failed on the device: HOOP_ERR_CUDA) never leaves
 *     the stream waiting: it is released as at completion (output buffers unspecified),
 *     and the error is kept by the comm. hoop_stream_status reports it, and every later
 *     _stream call on the comm returns it at once and queues nothing (the comm has
 *     failed: see the common rules). A start that waits longer than HOOP_TIMEOUT for the
 *     work before it fails the call with HOOP_ERR_TIMEOUT.
 *   - Ranks in one process (threads) need streams of their own: on a shared stream (the
 *     legacy one included) one rank's wait would hold another's start, and both calls
 *     would fail after HOOP_TIMEOUT.
 *   - Hardware queues: CUDA runs a process's streams on CUDA_DEVICE_MAX_CONNECTIONS
 *     hardware queues (8 unless set, at most 32), shared round robin by streams as they
 *     are made, and a queue runs its work in the order it was issued, whatever the
 *     stream. The wait a call queues on the stream holds everything behind it in its
 *     queue, the collective's own copies and kernels too when hoop's stream for them
 *     (one per comm, made at its first GPU call) shares the queue: the call would never
 *     finish (it fails after HOOP_TIMEOUT, naming its unfinished copies and this rule;
 *     the copies held may still run once the stream's wait has passed: destroy the comm,
 *     or wait for the whole device, before freeing the call's buffers).
 *     Keep the process's streams, yours and hoop's (a compute, a copy and a side stream
 *     per process, one per comm, DDP's one per model), within that number. With
 *     CUDA_DEVICE_MAX_CONNECTIONS set below CUDA's default of 8 (1 puts every stream on
 *     one queue), or a driver without stream memory operations (cuStreamWaitValue32), each
 *     _stream call runs as a blocking one instead: the calling thread waits (up to
 *     HOOP_TIMEOUT) for the work queued on the stream before the call, runs the
 *     collective and returns once it has finished, queuing nothing on the stream; a
 *     failure returns from the call and is also kept as above. A call on a stream being
 *     captured is then refused (HOOP_ERR_UNSUPPORTED, naming the variable).
 *   - Do not make the device wait for the whole device (cudaDeviceSynchronize,
 *     cudaFree, which synchronises it) from a thread whose progress a pending stream
 *     call needs, e.g. one rank's thread while another rank of the same process is
 *     still to call: the stream's wait holds the device until the collective finishes
 *     (NCCL has the same rule). hoop keeps to it: the device memory and page-locked host
 *     memory a call on GPU buffers needs are made on the calling thread, at the call,
 *     before its wait is queued, never by the progress thread. On a nearly full GPU that
 *     may give the allocator's cache back to CUDA there (cudaFree): with ranks as threads
 *     of one process on one GPU, let no other rank's stream call be pending then.
 *   - Thread-safety: as the forms above (one issuing thread per comm); hoop_stream_status
 *     from any thread.
 *
 * Captured into a CUDA graph: a _stream call on a stream being captured
 * (cudaStreamBeginCapture; any mode) queues nothing. It checks its arguments and makes
 * what the call will need (device scratch, page-locked slots) as at any call, and adds
 * to the capture a host node and a wait: each replay of the graph (cudaGraphLaunch)
 * makes a new collective with these arguments when the replay reaches it in stream order
 * (a new call on the comm: sequence number, vote, as if issued then), and the work after
 * it in the graph waits, on the device, until that collective has finished. So every
 * rank's replays must come in the same order as its other calls on the comm, as all
 * calls must: a replay's calls join the comm's order when the replay reaches them, not
 * when the graph is launched.
 *   - Between a graph's launch and the end of its replay, make no other call on the
 *     comm unless every rank orders it the same way against the replay: a host call
 *     issued meanwhile may come before or after the replay's calls, and a stream call
 *     queued on the same stream after the launch comes before them on the comm while its
 *     stream puts it after (it then fails after HOOP_TIMEOUT). Waiting for the stream
 *     (cudaStreamSynchronize, or an event recorded after the launch) orders them.
 *   - Buffers and arguments are fixed at capture: every replay reads and writes the
 *     same buffers, which must stay valid while the graph exists. Memory from
 *     hoop_comm_alloc_shared run direct is refused (HOOP_ERR_UNSUPPORTED): it could be
 *     freed between replays.
 *   - Errors: those found at capture return at once (as a _stream call's, plus
 *     HOOP_ERR_UNSUPPORTED when the driver cannot capture stream memory operations;
 *     the capture should then be abandoned). A replay whose collective fails still lets
 *     the stream go (output buffers unspecified) and the failure is kept, as for a
 *     _stream call: hoop_stream_status reports it, and later replays run nothing and
 *     let their streams go at once. Two executable graphs of one capture replayed at the
 *     same time share the call's completion: the second replay runs nothing and is
 *     reported (HOOP_ERR_USAGE).
 *   - Lifetimes: destroying a graph (or its executable graphs) while a replay runs is
 *     allowed: CUDA keeps what the replay uses until it has finished. Destroying the
 *     comm while graphs holding its calls exist is allowed too: from then on their
 *     replays run nothing and let their streams go at once (the graph's results are
 *     unspecified); destroy it after the replays in flight have finished (their calls
 *     would fail). What a captured call keeps (a few hundred bytes and a flag word) is
 *     freed with the last of its graph and its comm.
 */
typedef struct hoop_stream hoop_stream;

/* hoop_allreduce, ordered on stream (above). */
HOOP_API hoop_status hoop_allreduce_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                           size_t count, hoop_dtype dtype, hoop_op op,
                                           hoop_stream *stream);
/* hoop_broadcast, ordered on stream (above). */
HOOP_API hoop_status hoop_broadcast_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                           size_t count, hoop_dtype dtype, int root,
                                           hoop_stream *stream);
/* hoop_reduce, ordered on stream (above). */
HOOP_API hoop_status hoop_reduce_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                        size_t count, hoop_dtype dtype, hoop_op op, int root,
                                        hoop_stream *stream);
/* hoop_allgather, ordered on stream (above). */
HOOP_API hoop_status hoop_allgather_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                           size_t count, hoop_dtype dtype, hoop_stream *stream);
/* hoop_reduce_scatter, ordered on stream (above). */
HOOP_API hoop_status hoop_reduce_scatter_stream(hoop_comm *comm, const void *sendbuf, void *recvbuf,
                                                size_t count, hoop_dtype dtype, hoop_op op,
                                                hoop_stream *stream);
/* hoop_barrier, ordered on stream (above): work queued after it runs once every rank has
 * reached the barrier in its own stream's order. */
HOOP_API hoop_status hoop_barrier_stream(hoop_comm *comm, hoop_stream *stream);

/* HOOP_OK while every _stream call on comm has succeeded or is still running; else the
 * first failure's status, with its message (naming the call and the culprit rank) in
 * hoop_last_error. It does not wait: to know that the calls so far succeeded, wait for
 * the stream first (cudaStreamSynchronize), then ask. The error stays (the comm has
 * failed). HOOP_ERR_INVALID for a NULL comm. Thread-safe. */
HOOP_API hoop_status hoop_stream_status(hoop_comm *comm);

HOOP_EXTERN_C_END

#endif /* HOOP_COLLECTIVES_H */
