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
    size_t bucket_cap_bytes;   /* 0 = 25 MiB (PyTorch's default) */
    size_t first_bucket_bytes; /* 0 = 1 MiB (PyTorch's default) */
    int broadcast_params;      /* 1 (default): start from rank 0's parameter values */
    int error_on_unused;       /* 1: hoop_ddp_backward fails naming parameters that took
                                  no part in the loss (after reducing, so no rank hangs) */
} hoop_ddp_config;

#define HOOP_DDP_CONFIG_INIT                                                   \
    {                                                                          \
        .bucket_cap_bytes = 0, .first_bucket_bytes = 0, .broadcast_params = 1, \
        .error_on_unused = 0                                                   \
    }

/* Per-step timing totals since init (or hoop_ddp_reset_stats), in milliseconds. comm_ms is
 * the time during which at least one bucket all-reduce was in flight; hidden_ms the part
 * of it that overlapped the backward pass. hidden_ms / comm_ms is the share of
 * communication hidden behind backward. */
typedef struct hoop_ddp_stats {
    int64_t steps;       /* synchronising backward passes */
    double backward_ms;  /* inside hoop_backward */
    double comm_ms;      /* union of bucket all-reduce intervals */
    double hidden_ms;    /* part of comm_ms inside backward */
    double wait_ms;      /* waiting for buckets after backward */
    int nbuckets;        /* number of buckets */
    size_t bucket_bytes; /* total bytes reduced per step */
} hoop_ddp_stats;

/* Wraps count parameters (long-lived tensors with requires_grad, the same shapes and
 * order on every rank) and comm. Collective: every rank must call it. Checks shapes
 * across ranks (HOOP_ERR_MISMATCH naming the first parameter whose shape differs and both
 * shapes), broadcasts rank 0's values when cfg->broadcast_params, builds the buckets,
 * moves each gradient into its bucket (values kept) and registers grad-ready hooks.
 * comm and the parameters must outlive the hoop_ddp. cfg may be NULL (defaults).
 * Errors: HOOP_ERR_INVALID (NULL, count 0, a parameter without requires_grad),
 * HOOP_ERR_MISMATCH, HOOP_ERR_NOMEM, and the communicator's errors (HOOP_ERR_REMOTE,
 * HOOP_ERR_TIMEOUT). */
HOOP_API hoop_status hoop_ddp_init(hoop_ddp **out, hoop_comm *comm, hoop_tensor *const *params,
                                   size_t count, const hoop_ddp_config *cfg);

/* Removes the hooks, gives each parameter back a private gradient (values kept), frees
 * the buckets. Waits for bucket all-reduces still in flight. Accepts NULL. */
HOOP_API hoop_status hoop_ddp_destroy(hoop_ddp *ddp);

/* Runs hoop_backward(tape, loss) while all-reducing (average over ranks) each bucket as
 * soon as its gradients are final, then marks parameters that took no part in the loss
 * as ready (their accumulated gradient, zero after zero_grad, is reduced too), and waits
 * for every bucket. On return every parameter's gradient is the rank average of the
 * local gradients, bitwise identical on every rank. Under no_sync
 * (hoop_ddp_set_sync(ddp, 0)) it only runs backward: gradients accumulate locally and
 * the next synchronising call reduces the accumulated sums.
 * Errors: those of hoop_backward and of the collectives; HOOP_ERR_USAGE naming unused
 * parameters when error_on_unused is set (after the reduction completed). */
HOOP_API hoop_status hoop_ddp_backward(hoop_ddp *ddp, hoop_tape *tape, hoop_tensor *loss);

/* sync = 0 enters no_sync (gradient accumulation: backward passes do not communicate);
 * sync = 1 leaves it, and the next hoop_ddp_backward reduces. */
HOOP_API void hoop_ddp_set_sync(hoop_ddp *ddp, int sync);

/* Copies the timing totals into *stats; reset clears them. */
HOOP_API void hoop_ddp_get_stats(const hoop_ddp *ddp, hoop_ddp_stats *stats);
HOOP_API void hoop_ddp_reset_stats(hoop_ddp *ddp);

/* Records a named interval ("forward", "optimizer") of this rank for the trace, in
 * hoop_ddp_now_us() microseconds. DDP itself records "backward" and one event per bucket
 * all-reduce. Events are kept only when tracing is on (HOOP_TRACE_FILE set, or
 * hoop_ddp_trace_enable). Never fails: events past the buffer's capacity are dropped. */
HOOP_API void hoop_ddp_trace_event(hoop_ddp *ddp, const char *name, int64_t begin_us,
                                   int64_t end_us);

/* Microseconds on the monotonic clock used by the trace. */
HOOP_API int64_t hoop_ddp_now_us(void);

/* Turns this rank's tracing on (path != NULL; rank 0 writes the merged trace to its path,
 * other ranks' paths are ignored and may be "") or off (NULL). hoop_ddp_init turns it on
 * for every rank when rank 0 has HOOP_TRACE_FILE set. */
HOOP_API hoop_status hoop_ddp_trace_enable(hoop_ddp *ddp, const char *path);

/* Collective (every rank must call it, tracing or not): gathers every rank's events to
 * rank 0, which writes them as one Chrome trace JSON file (chrome://tracing, Perfetto;
 * pid = rank, tid 0 = compute, 1 = all-reduce) atomically (temporary file + rename),
 * then clears the events. Writes nothing when no rank recorded events.
 * Errors: HOOP_ERR_SYSTEM naming the file; the collectives' errors. */
HOOP_API hoop_status hoop_ddp_trace_flush(hoop_ddp *ddp);

HOOP_EXTERN_C_END

#endif /* HOOP_DDP_H */
