/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train.h -- hoop-train's trainer: the state its files share, and what each file
 * gives the others.
 *
 * hoop-train is one program in several files, each around one part of the job:
 * hoop-train.c (main, the epoch and benchmark loops, stop signals), train_setup.c (the
 * trainer's set-up and tear-down: outputs, model, optimizer, device), train_data.c (the
 * data: loading, the ranks' agreement on it, shards, input tensors), train_step.c (one
 * optimizer step, on the cpu and double buffered on cuda), train_eval.c (the test set's
 * evaluation), train_report.c (progress, epoch lines, --metrics), train_ckpt.c (saving
 * and resuming), beside train_cli.c (flags) and train_dist.c (the distributed side).
 * Not thread-safe: everything here runs on hoop-train's main thread.
 */
#ifndef HOOP_TOOLS_TRAIN_H
#define HOOP_TOOLS_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "autograd/kern.h"
#include "hoop/autograd.h"
#include "hoop/data.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "train_cli.h"
#include "train_dist.h"

#define DEVICE_INPUTS 4 /* cuda input tensors: full, short last, evaluation, its short last */
#define SLOTS 2         /* cuda: batches in flight (one uploading, one training) */

/* cuda: one buffer of the double-buffered batches (see tools/train_step.c). */
typedef struct batch_slot {
    float *x;              /* pinned: batch_size x sample floats, the gathered batch */
    int32_t *y;            /* pinned: its labels (cross-entropy uploads them; a graph re-reads) */
    float *loss;           /* pinned: the loss of the step that read the slot */
    hoop_tensor *dev_x;    /* the full batch on the device */
    hoop_tensor *in;       /* what the step reads: dev_x, or the short batch's tensor */
    hoop__event *uploaded; /* copy stream: the batch is on the device */
    hoop__event *free;     /* compute stream: the step that read the slot (and its loss) ran */
    size_t n;              /* samples gathered into it (0: the epoch is over) */
    int unread;            /* its last upload is not read by a step yet */
    int pending;           /* its step's loss is not accounted yet */
    int64_t step;          /* that step's number, for the divergence message */
    /* --cuda-graph: the slot's full-batch steps on a tape of their own, captured after one
     * eager warm-up on it and replayed from then on (graph_loss: the loss it writes) */
    hoop_tape *tape;
    hoop_graph *graph;
    hoop_tensor *graph_loss;
    int warm;
} batch_slot;

typedef struct trainer {
    const train_opts *o;
    hoop_dataset *train, *test;
    hoop_loader *loader;
    hoop_model *model;
    hoop_optim *opt;
    hoop_tape *tape;
    hoop_lr_schedule sched;
    int said_blocking;  /* rank 0 said that the bucket all-reduces block (train_report.c) */
    hoop_device device; /* where the model, its batches and its activations live */
    hoop_tensor *dev_x[DEVICE_INPUTS]; /* cuda: long-lived input tensors, one per batch size */
    batch_slot slot[SLOTS];            /* cuda: the double-buffered training batches */
    int cur;                           /* the slot of the step issued last */
    int graphs;                        /* --cuda-graph on cuda; 0 again after a failed capture */
    int replay_queued;                 /* a replay was issued since the last eager step */
    float *logits;  /* cuda: eval_batch_size x classes floats, logits read back for accuracy */
    float *x;       /* batch_size x sample floats, the gathered batch */
    int32_t *y;     /* batch_size labels */
    int64_t sample; /* floats per sample (rows x cols) */
    int64_t step;   /* optimizer steps taken so far */
    int bar;        /* 1: redraw a progress bar on stderr */
    int64_t bar_ns; /* when the bar was last drawn (see train_report_due) */
    FILE *metrics;
    int metrics_errno;   /* the first failed write of --metrics (errno), reported at once */
    train_dist dist;     /* communicator, DDP and sampler (single process: no comm) */
    int64_t start_epoch; /* first epoch to run (after --resume) */
    int64_t start_batch; /* batches of start_epoch already trained (mid-epoch resume) */
    size_t ntrain;       /* training samples used (--train-limit) */
    size_t nbatches;     /* batches per epoch of this rank's shard */
    double loss_sum;     /* this epoch: loss x samples (rank 0 starts from the saved sum) */
    size_t loss_samples; /* this epoch: samples in loss_sum */
    double win_loss;     /* --metrics-every window: loss x samples, samples, step time */
    size_t win_samples;
    int64_t win_ns;   /* ns spent in its steps (evaluation and checkpoints excluded) */
    int stop_sig;     /* the signal all ranks agreed to stop for (0: none) */
    int stop_rank;    /* the lowest rank that received it */
    int64_t agree_ns; /* time spent agreeing on stops (the per-step all-reduce) */
} trainer;

/* One epoch's figures, for its line and its --metrics record. */
typedef struct epoch_stats {
    double train_loss, test_loss, test_acc, train_s, sps;
    size_t samples;         /* global: summed over ranks */
    double comm_ms, hidden; /* per step: all-reduce time, share hidden behind backward */
} epoch_stats;

/* "mlp" or "cnn", for the lines and records. */
static inline const char *trainer_model_name(const trainer *t)
{
    return t->o->model == TRAIN_MODEL_MLP ? "mlp" : "cnn";
}

// ----- train_setup.c ----------------------------------------------------------------------

/* Joins the job (when under hooprun), checks that the ranks agree on the flags, picks the
 * device, has rank 0 check every output path, loads the data (rank 0 first), builds the
 * model, loader, sampler and optimizer, resumes (--resume) and wraps the parameters in
 * DDP. A failure leaves t for trainer_destroy. Errors: HOOP_ERR_INVALID for bad flags,
 * paths, data or checkpoints (exit 2), HOOP_ERR_UNSUPPORTED for --device cuda without a
 * GPU, others as the library returns them. */
hoop_status trainer_init(trainer *t, const train_opts *o);

/* Frees everything trainer_init made, also after its failure; closes --metrics (an error
 * writing it is HOOP_ERR_SYSTEM). Returns the first error and goes on past it. */
hoop_status trainer_destroy(trainer *t);

// ----- train_data.c -----------------------------------------------------------------------

/* Loads --data: rank 0 first, while the others wait for its verdict (root_st is rank 0's
 * status from before, its output checks: when not HOOP_OK it loads nothing), then the
 * others; then every rank's datasets are compared with rank 0's (train_dist_same_data).
 * Sets t->train, t->test, t->sample and t->ntrain. A collective when distributed. */
/* The user's OMP_NUM_THREADS (OpenBLAS reads it) when one is set and OPENBLAS_NUM_THREADS
 * is not, else NULL: not the 1 hooprun sets when none was (it marks that one with
 * HOOP_OMP_DEFAULT=1). */
const char *train_users_omp(void);

hoop_status train_data_load(trainer *t, hoop_status root_st);

/* Points the loader at this rank's shard of epoch, past its first skip batches (the ones
 * a resumed run has trained already); t->nbatches gets the whole shard's count. */
hoop_status train_data_shard(trainer *t, int64_t epoch, int64_t skip);

/* The loader's next batch on the cpu (*n == 0: epoch over), gathered straight into a tape
 * tensor; a short last batch is moved into a tensor of its own size. */
hoop_status train_data_next(trainer *t, hoop_tensor **x, size_t *n);

/* The input tensor holding the first n samples gathered into t->x: a tape tensor on the
 * cpu, the device tensor of that size on cuda. */
hoop_status train_data_input(trainer *t, size_t n, hoop_tensor **x);

/* cuda: the long-lived device tensor for batches of n samples (made at the first batch of
 * that size; at most DEVICE_INPUTS sizes, else HOOP_ERR_INTERNAL). */
hoop_status train_data_device_input(trainer *t, size_t n, hoop_tensor **x);

// ----- train_step.c -----------------------------------------------------------------------

/* The optimizer step on the gradients in the parameters, at the scheduled rate (user: the
 * trainer). Also what a rank that ran out of batches runs for the others' steps
 * (hoop_ddp_join). */
hoop_status train_step_optimizer(void *user);

/* One optimizer step on the cpu on the batch x (labels in t->y); *loss gets its mean
 * loss. HOOP_ERR_INVALID when the loss is not finite (training diverged). */
hoop_status train_step_cpu(trainer *t, hoop_tensor *x, float *loss);

/* cuda: gathers the loader's next batch into slot i (its n 0: the epoch is over) and
 * queues its upload, once the step that read the slot last has run. */
hoop_status train_step_prefetch(trainer *t, int i);

/* cuda: issues the optimizer step on slot i's batch without waiting for it; with
 * want_loss its loss comes back into the slot, accounted later. */
hoop_status train_step_cuda(trainer *t, int i, int want_loss);

/* Every issued step's loss accounted into the sums, oldest first (a no-op on the cpu). */
hoop_status train_step_drain(trainer *t);

// ----- train_eval.c -----------------------------------------------------------------------

/* Mean loss and accuracy (fraction) over the whole test set, in evaluation mode, sharded
 * across the ranks and summed (a collective when distributed). */
hoop_status train_eval(trainer *t, double *loss, double *acc);

// ----- train_report.c ---------------------------------------------------------------------

/* Erases the progress bar, if any, before a line is printed. */
void train_report_clear_bar(const trainer *t);

/* Is the progress due after batch b of nb (rank 0 only)? A bar that is due counts as
 * drawn now. */
int train_report_due(trainer *t, size_t b, size_t nb);

/* Draws the bar or prints the line for batch b of nb of epoch: the mean loss so far and
 * the global samples/s. */
void train_report_progress(const trainer *t, int64_t epoch, size_t b, size_t nb, double loss,
                           double sps);

/* Rank 0: epoch's line on stdout and its record in --metrics. */
void train_report_epoch(trainer *t, int64_t epoch, const epoch_stats *e);

/* --metrics-every: after batch b of epoch, the window's record when the step count is due
 * (a collective on every rank then). */
hoop_status train_report_step_metrics(trainer *t, int64_t epoch, size_t b);

// ----- train_ckpt.c -----------------------------------------------------------------------

/* --resume: continues from --checkpoint (shared from rank 0) when there is one, at the
 * epoch and batch it records; errors name what differs (HOOP_ERR_INVALID). */
hoop_status train_ckpt_resume(trainer *t);

/* Saves the run after epochs_done epochs and batches_done batches of the next one (rank 0
 * writes; a collective when batches_done > 0); say: print "saved PATH (step S)". Nothing
 * without --checkpoint. */
hoop_status train_ckpt_save(trainer *t, int64_t epochs_done, int64_t batches_done, int say);

#endif /* HOOP_TOOLS_TRAIN_H */
