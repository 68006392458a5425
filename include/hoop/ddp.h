/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/ddp.h -- distributed data parallel: gradients all-reduced bucket by bucket while
 * the backward pass is still running.
 *
 * A hoop_ddp wraps a model's parameter list and a communicator. At construction it checks
 * that every rank has the same parameter shapes and broadcasts rank 0's values. It groups
 * the parameters, in reverse registration order (roughly the order in which backward
 * finishes their gradients), into buckets: contiguous f32 buffers of at most
 * bucket_cap_bytes (the first one first_bucket_bytes), the scheme of PyTorch DDP (Li et
 * al., "PyTorch Distributed", VLDB 2020). Each parameter's gradient becomes a view into its
 * bucket, so a bucket is all-reduced in place with no copy. The buckets come from
 * hoop_comm_alloc_shared: where all ranks share a host, their all-reduces run the direct
 * algorithm, straight from the peers' buckets. When the last gradient of a
 * bucket is final (the tape's grad-ready hook), the bucket's all-reduce (average) is
 * enqueued at once and runs on the communicator's progress thread while backward goes on.
 * Buckets are launched in index order on every rank, so the collectives match even when
 * ranks finish gradients in different orders.
 *
 * Parameters on cuda (every parameter on one device). The buckets are device memory, and
 * nothing waits on the host: a grad-ready hook records an event on the compute stream
 * (after the kernels that produced the bucket's gradients) and queues, on a stream of
 * the hoop_ddp's own (the bucket stream), a wait for that event and the bucket's average
 * in the collectives' stream form (hoop_allreduce_stream: reduced and divided on the
 * device); hoop_ddp_backward then makes the compute stream wait, on the device, for the
 * last bucket, so the optimizer step queued after it reads the averages. The calling
 * thread only queues work; the overlap with backward happens on the device. Consequences:
 *   - A bucket's failure (a peer that died, a timeout: HOOP_TIMEOUT bounds every wait)
 *     releases the streams and is kept by the communicator (hoop_stream_status); it is
 *     returned, naming the culprit, by the hoop_ddp_backward that issued the call when it
 *     failed by then, else by the next one, by hoop_ddp_join or by hoop_ddp_wait.
 *   - The host waits for a round only where it must read its result: in hoop_ddp_join
 *     (each round's count of ranks with data) and in hoop_ddp_backward with
 *     divide_by_initial_world_size = 0 or error_on_uneven = 1; the statistics are read
 *     from the device's event times once the device is done with a round.
 *   - One rank per process: the compute stream is the process's, so ranks that are
 *     threads of one process would hold each other's streams (hooprun's workers are
 *     processes; several may share a GPU).
 *   - The gradients are the cpu's to float rounding (the cuda kernels sum in other
 *     orders), and bitwise identical on every rank as on the cpu. With
 *     divide_by_initial_world_size = 0 a join round's rescaling multiplies by ws / k
 *     rounded to f32 (within 1 ulp of the cpu's double arithmetic).
 *   - A step cannot be captured into a CUDA graph yet (the stream form refuses capture).
 *
 * A training step:
 *
 *     hoop_ddp *ddp;
 *     hoop_ddp_config cfg = HOOP_DDP_CONFIG_INIT;
 *     hoop_ddp_init(&ddp, comm, hoop_model_params(model), hoop_model_param_count(model), &cfg);
 *     for (each batch of this rank's shard) {
 *         hoop_model_forward(model, tape, x, &logits);
 *         hoop_cross_entropy(tape, logits, labels, 0.0f, &loss);
 *         hoop_optim_zero_grad(opt);
 *         hoop_ddp_backward(ddp, tape, loss);      // grads are now rank averages
 *         hoop_optim_step(opt);
 *         hoop_tape_reset(tape);
 *     }
 *     hoop_ddp_destroy(ddp);
 *
 * hoop_ddp_backward takes the place of hoop_backward (PyTorch's loss.backward() on a DDP
 * module reduces by itself; here the call does). A plain hoop_backward on wrapped
 * parameters reduces nothing: it warns once, leaves the gradients local, and the next
 * hoop_ddp_backward, hoop_ddp_join, hoop_ddp_wait or hoop_ddp_destroy returns
 * HOOP_ERR_USAGE naming the first such parameter (once; a backward or join only after its
 * own round, so no rank is left waiting).
 *
 * Uneven inputs (hoop_ddp_join). Every synchronising backward pass is one round of
 * bucket all-reduces, and every rank must take part in every round. A rank that has run
 * out of batches calls hoop_ddp_join: it keeps answering the other ranks' rounds with
 * zero gradients and, after each round, runs the caller's step function (the same
 * optimizer step the others take on the same reduced gradients), until every rank has
 * joined. Ranks with 10, 10 and 11 batches thus all take 11 optimizer steps and end with
 * bitwise-equal parameters and optimizer state.
 *
 *     for (each batch of this rank's shard) { ... hoop_ddp_backward ...; step(opt); }
 *     hoop_ddp_join(ddp, step, opt);          // returns when every rank has joined
 *
 * How a rank learns that others have joined: the last bucket carries one extra float,
 * 1 on a rank that ran backward and 0 on a joined one, so the reduced value tells every
 * rank how many ranks still had data in that round. This costs 4 bytes per step, not a
 * collective (PyTorch's Join runs an extra all-reduce per step for it). A join costs one
 * round of zeros more, the one in which every rank finds that all have joined.
 * In a round where only k of the world_size ranks had data, the gradient is
 *   - divide_by_initial_world_size = 1 (default, PyTorch's default): the sum of the k
 *     ranks' gradients divided by world_size, exactly what the all-reduce's average
 *     gives (a joined rank adds zeros): every sample weighs the same as in full rounds;
 *   - divide_by_initial_world_size = 0: that sum divided by k, as if the job had k ranks
 *     (the average is multiplied by world_size / k in double and rounded to f32: within
 *     2 ulp of the reduced sum divided by k); each remaining sample weighs more.
 * With error_on_uneven = 1 (PyTorch's throw_on_early_termination) the first round in
 * which some but not all ranks have joined fails instead, on every rank: the active
 * ranks' hoop_ddp_backward and the joined ranks' hoop_ddp_join return HOOP_ERR_USAGE
 * saying how many ranks ran out; every rank should then stop.
 * Only the bucket all-reduces are answered. A training loop that runs other collectives
 * between two backward passes (a per-step metric all-reduce, say) must run the same ones
 * in its step function, with neutral values, in the same order; collectives after the
 * loop (an epoch's metrics) come after hoop_ddp_join returns and need nothing.
 *
 * Reproducibility. The gradients are bitwise identical on every rank (the collectives
 * guarantee it), and bitwise identical between runs that have the same world_size,
 * parameter list, bucket layout and algorithm and chunking for each bucket. The bucket
 * layout follows from the parameter shapes and order, bucket_cap_bytes and
 * first_bucket_bytes; an element's offset inside its bucket decides which segment and
 * chunk of the all-reduce it travels in, and so the order in which the ranks' values
 * are added. Changing a cap (or the parameter list) therefore moves elements between
 * all-reduces and may change the rounding of each gradient element, and so can the
 * algorithm, since HOOP_ALGO=auto picks it per bucket from the bucket's size (pin it with
 * HOOP_ALGO or hoop_comm_set_algo to exclude that). Whether the order depends on the
 * offset at all is the algorithm's property: the ring's does (each segment's sum starts
 * at another rank), recursive doubling's does not (check_ddp's small buckets, reduced
 * that way, came out bitwise equal under any caps). How much: two summation orders of
 * the world_size f32 gradients g_r of an
 * element give averages that differ by at most 2 (world_size - 1) / world_size x 2^-24 x
 * sum_r |g_r| plus 1 ulp. On check_ddp's MLP with 4 ranks and the ring, bucket caps of
 * 512 / 256 B against 25 MiB / 1 MiB moved first-step gradients by at most 0.48 x 2^-24 x
 * sum_r |g_r| (64 ulp in an element whose sum nearly cancels), and the parameters after
 * 20 SGD steps by at most 5.5e-7 relative. A rank that joined adds +0.0, which never
 * changes a sum: with the default divisor, a join leaves the other ranks' averages as
 * they would be with those ranks alone divided by world_size.
 *
 * Thread-safety: one thread drives a hoop_ddp (the thread that runs backward).
 */
#ifndef HOOP_DDP_H
#define HOOP_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/autograd.h"
#include "hoop/comm.h"
#include "hoop/export.h"
#include "hoop/status.h"
#include "hoop/tensor.h"

HOOP_EXTERN_C_BEGIN

typedef struct hoop_ddp hoop_ddp;

typedef struct hoop_ddp_config {
    size_t bucket_cap_bytes;          /* 0 = 25 MiB (PyTorch's default) */
    size_t first_bucket_bytes;        /* 0 = 1 MiB (PyTorch's default) */
    int broadcast_params;             /* 1 (default): start from rank 0's parameter values */
    int error_on_unused;              /* 1: hoop_ddp_backward fails naming parameters that took
                                         no part in the loss (after reducing, so no rank hangs) */
    int divide_by_initial_world_size; /* join: 1 (default) rounds where some ranks joined
                                         are averaged over world_size; 0 over the ranks
                                         that had data (see above) */
    int error_on_uneven;              /* join: 1 = a round where some ranks joined fails on
                                         every rank (PyTorch's throw_on_early_termination) */
} hoop_ddp_config;

#define HOOP_DDP_CONFIG_INIT                                                          \
    {                                                                                 \
        .bucket_cap_bytes = 0, .first_bucket_bytes = 0, .broadcast_params = 1,        \
        .error_on_unused = 0, .divide_by_initial_world_size = 1, .error_on_uneven = 0 \
    }

/* Per-step timing totals since init (or hoop_ddp_reset_stats), in milliseconds. comm_ms is
 * the time during which at least one bucket all-reduce was in flight; hidden_ms the part
 * of it that overlapped the backward pass. hidden_ms / comm_ms is the share of
 * communication hidden behind backward. On the cpu these are host times (backward: the
 * pass up to its last grad-ready hook; wait: the host waiting for the buckets after it).
 * On cuda they are the device's (event times): backward is the compute stream's pass,
 * an all-reduce runs on the bucket stream from the moment its gradients are final and
 * the previous bucket is done until its result is in place, and wait is how long after
 * the pass the last bucket ended (what the optimizer step waited for on the device). */
typedef struct hoop_ddp_stats {
    int64_t steps;        /* rounds of hoop_ddp_backward (a failed pass still takes part) */
    double backward_ms;   /* inside hoop_backward */
    double comm_ms;       /* union of bucket all-reduce intervals */
    double hidden_ms;     /* part of comm_ms inside backward */
    double wait_ms;       /* waiting for buckets after backward */
    int nbuckets;         /* number of buckets */
    size_t bucket_bytes;  /* total bytes reduced per step (gradients, padding, 8 control bytes) */
    int64_t uneven_steps; /* of steps: rounds in which some rank had joined */
    int64_t joined_steps; /* rounds this rank answered inside hoop_ddp_join for ranks that
                             still had data (it ran the step function after each) */
} hoop_ddp_stats;

/* Wraps count parameters (long-lived tensors with requires_grad, the same shapes and
 * order on every rank) and comm. Collective: every rank must call it. Checks shapes and
 * the configuration across ranks (HOOP_ERR_MISMATCH naming the first parameter whose shape
 * differs and both shapes, or the first field of cfg that differs and both values),
 * broadcasts rank 0's values when cfg->broadcast_params, builds the buckets, moves each
 * gradient into its bucket (values kept) and registers grad-ready hooks. comm and the
 * parameters must outlive the hoop_ddp. cfg may be NULL (defaults). *out is NULL on
 * failure. Errors: HOOP_ERR_INVALID naming the argument (out, comm or params NULL,
 * count 0 or above INT_MAX, a NULL parameter, one without requires_grad, one listed
 * twice, one that another live hoop_ddp wraps, parameters on different devices, a cfg
 * flag other than 0 or 1),
 * HOOP_ERR_MISMATCH, HOOP_ERR_NOMEM, HOOP_ERR_UNSUPPORTED or HOOP_ERR_CUDA (cuda: the
 * backend's; HOOP_ERR_UNSUPPORTED on every rank, naming two, where ranks are threads of
 * one process: DDP on cuda needs a process per rank, as hooprun starts them), and the
 * communicator's errors (HOOP_ERR_REMOTE, HOOP_ERR_TIMEOUT); after a
 * local argument error the other ranks fail at the communicator's timeout, naming this
 * rank. */
HOOP_API hoop_status hoop_ddp_init(hoop_ddp **out, hoop_comm *comm, hoop_tensor *const *params,
                                   size_t count, const hoop_ddp_config *cfg);

/* Removes the hooks, gives each parameter back a private gradient (values kept), frees
 * the buckets. Waits for bucket all-reduces still in flight (on cuda: on the host, up to
 * HOOP_TIMEOUT each). On cuda the buckets are memory the node's ranks map into each other
 * (hoop_comm_alloc_shared_cuda), and freeing such memory is collective: every rank calls
 * hoop_ddp_destroy, in the same order among its collectives (a rank that calls another
 * collective instead fails everyone with HOOP_ERR_MISMATCH; one that never calls, at
 * HOOP_TIMEOUT). On the cpu it is local. Accepts NULL. Frees everything whatever it
 * returns: HOOP_ERR_USAGE when a plain hoop_backward ran on the parameters since the last
 * report (see the top of this file), else the first failure of a wait or a free. */
HOOP_API hoop_status hoop_ddp_destroy(hoop_ddp *ddp);

/* Runs hoop_backward(tape, loss) while all-reducing (average over ranks) each bucket as
 * soon as its gradients are final, then marks parameters that took no part in the loss
 * as ready (their accumulated gradient, zero after zero_grad, is reduced too), and waits
 * for every bucket. On return every parameter's gradient is the rank average of the
 * local gradients, bitwise identical on every rank (on cuda: in the compute stream's
 * order, for the work queued after the call; the host has not waited). Under no_sync
 * (hoop_ddp_set_sync(ddp, 0)) it only runs backward: gradients accumulate locally and
 * the next synchronising call reduces the accumulated sums. When other ranks have
 * joined (hoop_ddp_join), the average is taken as divide_by_initial_world_size says.
 * Errors: HOOP_ERR_INVALID (ddp, tape or loss NULL); those of hoop_backward and of the
 * collectives (on cuda a failure may come one call late: see the top of this file);
 * HOOP_ERR_USAGE naming unused parameters when error_on_unused is set (after the
 * reduction completed, on cuda after it was queued), saying how many ranks had joined
 * when error_on_uneven is set, or, after this call's own round, naming a parameter that
 * a plain hoop_backward reached since the last report (top of this file). A rank whose
 * pass fails still takes part in the round (its peers would wait for it) and, on the
 * cpu, says so in it: every other rank then fails too, with HOOP_ERR_REMOTE saying how
 * many ranks failed (their gradients were averaged with the failed ranks' and are not
 * valid), instead of returning HOOP_OK. It cannot say so when the failure came after
 * its last bucket went (every gradient was final), nor on cuda, where the host does not
 * wait for the round: there only the failing rank fails. */
HOOP_API hoop_status hoop_ddp_backward(hoop_ddp *ddp, hoop_tape *tape, hoop_tensor *loss);

/* What a joined rank runs after each round it answered for ranks that still had data:
 * whatever the others do between two backward passes, at least the optimizer step (with
 * the same learning-rate schedule) on the gradients hoop_ddp_join left in the parameters,
 * which are bitwise the others' reduced gradients. A status other than HOOP_OK is kept
 * and returned by hoop_ddp_join once every rank has joined; later rounds are answered
 * without calling step again. */
typedef hoop_status (*hoop_ddp_step_fn)(void *user);

/* Called by a rank that has run out of batches (after its last hoop_ddp_backward and
 * optimizer step): answers the other ranks' bucket all-reduces with zero gradients and
 * calls step(user) after each round in which some rank still had data, until a round
 * in which every rank has joined; then returns, and the hoop_ddp is ready for the next
 * epoch. Collective in that sense: every rank calls it once per epoch, at its own end of
 * data (ranks with equal batch counts all return after one round of zeros). When it
 * returns HOOP_OK every rank has taken the same number of optimizer steps, so parameters
 * and optimizer state are bitwise equal on every rank (for a deterministic step).
 * Each round waits at most the communicator's timeout. Local gradients left in the
 * parameters are overwritten.
 * Errors: HOOP_ERR_INVALID (ddp or step NULL), HOOP_ERR_USAGE (under no_sync: the
 * accumulated gradients would never be reduced; or error_on_uneven is set and another
 * rank still had data: every rank fails in that round; or, once every rank has joined, a
 * plain hoop_backward ran on the parameters: top of this file), step's error, and the
 * collectives' errors (HOOP_ERR_REMOTE, HOOP_ERR_TIMEOUT). */
HOOP_API hoop_status hoop_ddp_join(hoop_ddp *ddp, hoop_ddp_step_fn step, void *user);

/* Waits on the host until every bucket all-reduce this rank has issued has completed, and
 * returns the first failure of one (with cuda parameters: the stream form's status,
 * hoop_stream_status, naming the call and the culprit rank). With parameters on the cpu
 * nothing is in flight once hoop_ddp_backward has returned, so it returns HOOP_OK at
 * once. With cuda parameters hoop_ddp_backward returns without waiting for the device, so
 * a bucket that fails later is reported by the next hoop_ddp_backward, by hoop_ddp_join,
 * or here: call it before trusting the parameters for something that lasts (a
 * checkpoint). Each wait ends after HOOP_TIMEOUT (HOOP_ERR_TIMEOUT). Errors:
 * HOOP_ERR_INVALID (ddp NULL), HOOP_ERR_REMOTE, HOOP_ERR_TIMEOUT, HOOP_ERR_MISMATCH,
 * HOOP_ERR_CUDA, HOOP_ERR_USAGE (a plain hoop_backward ran on the parameters: top of this
 * file). */
HOOP_API hoop_status hoop_ddp_wait(hoop_ddp *ddp);

/* sync = 0 enters no_sync (gradient accumulation: backward passes do not communicate);
 * any other value leaves it, and the next hoop_ddp_backward reduces. A joined rank's
 * rounds answer only synchronising passes, so no_sync needs nothing special under join.
 * NULL ddp is ignored. */
HOOP_API void hoop_ddp_set_sync(hoop_ddp *ddp, int sync);

/* Copies the timing totals into *stats (zeroed when ddp is NULL; nothing when stats is
 * NULL); reset clears them (NULL is ignored). On cuda both first read the rounds the
 * device has not reported yet (the host waits for them, HOOP_TIMEOUT at most each;
 * rounds it cannot read are left out, with a warning). */
HOOP_API void hoop_ddp_get_stats(const hoop_ddp *ddp, hoop_ddp_stats *stats);
HOOP_API void hoop_ddp_reset_stats(hoop_ddp *ddp);

/* Records a named interval ("forward", "optimizer") of this rank for the trace, in
 * hoop_ddp_now_us() microseconds, on the training thread's row. DDP itself records
 * "backward" and one event per bucket all-reduce (see hoop_ddp_trace_flush for rows). Events are
 * kept only when tracing is on (HOOP_TRACE_FILE set, or hoop_ddp_trace_enable). Never fails: events
 * past the buffer's capacity are dropped; NULL ddp or name is ignored. */
HOOP_API void hoop_ddp_trace_event(hoop_ddp *ddp, const char *name, int64_t begin_us,
                                   int64_t end_us);

/* Microseconds on the monotonic clock used by the trace. */
HOOP_API int64_t hoop_ddp_now_us(void);

/* Turns this rank's tracing on (path != NULL; rank 0 writes the merged trace to its path,
 * other ranks' paths are ignored and may be "") or off (NULL). hoop_ddp_init turns it on
 * for every rank when rank 0 has HOOP_TRACE_FILE set. Errors: HOOP_ERR_INVALID (ddp NULL),
 * HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_ddp_trace_enable(hoop_ddp *ddp, const char *path);

/* Collective (every rank must call it, tracing or not): gathers every rank's events to
 * rank 0, which writes them as one Chrome trace JSON file (chrome://tracing, Perfetto)
 * atomically (temporary file + rename), then clears the events. pid = rank; one named
 * row (tid) per thread or stream: with cpu parameters tid 0 = the training thread
 * ("backward", "forward", "optimizer"...) and tid 1 = the bucket all-reduces ("allreduce
 * bucket N"), host times; with cuda parameters tid 0 = the training thread (what it
 * issued: "backward (host)", "forward"...), tid 2 = the compute stream ("backward": the
 * pass on the device) and tid 3 = the bucket stream ("allreduce bucket N"), device times
 * (event times placed on the host's clock by a timer recorded on the idle compute stream
 * at init; on cuda the rounds still on the device are waited for first). Writes nothing
 * when no rank recorded events.
 * Errors: HOOP_ERR_INVALID (ddp NULL; on rank 0, a path that exists but is not a regular
 * file, which the rename would replace: /dev/null, a FIFO, a directory), HOOP_ERR_SYSTEM
 * naming the file; the collectives' errors. */
HOOP_API hoop_status hoop_ddp_trace_flush(hoop_ddp *ddp);

HOOP_EXTERN_C_END

#endif /* HOOP_DDP_H */
