/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/hoop-train.c -- the main job: trains an MLP or a small CNN on Fashion-MNIST.
 *
 * One thread drives the step (OpenBLAS may use more, see --threads). A step is: gather
 * a mini-batch of this rank's DistributedSampler shard (hoop/data.h, hoop/sampler.h),
 * forward on a tape, mean cross-entropy, zero_grad, backward (through DDP when started
 * by hooprun: buckets are all-reduced while backward runs), optimizer step with the
 * scheduled learning rate, tape reset. Rank 0 checks and loads the data first while the
 * others wait for its verdict. After each epoch the test set is evaluated (sharded
 * across ranks, sums all-reduced) and rank 0 prints one line (and one JSON line to
 * --metrics): loss, test accuracy, global samples/s and the share of all-reduce time
 * hidden behind backward; with --checkpoint rank 0 saves atomically (also every
 * --checkpoint-every steps, mid-epoch). With --bench-steps the tool instead times that
 * many steps and prints one JSON line (bench/ uses it).
 *
 * Devices (--device): on the cpu the loader gathers a batch straight into a tape tensor
 * (no copy) and the host reads losses and logits in place. On cuda the model is built on
 * the host as on the cpu (so both start from the same weights), moved to the GPU before
 * the optimizer and any checkpoint exist, and batches are double buffered: two slots, each
 * a pinned batch and labels, a device batch tensor and the step's loss in pinned memory.
 * Batch k+1 is gathered into the free slot and uploaded on the copy stream while step k
 * runs on the compute stream (which waits for the upload's event, on the device); a slot
 * is refilled only after the host has waited for the event recorded after the step that
 * read it, and the loss comes back with the step (an asynchronous copy into the slot)
 * and is read then, or when it is logged or saved: no step waits for its own loss. With
 * --cuda-graph each slot has its own tape and graph (two graphs, one per input buffer; see
 * cuda_step). The evaluation copies its batches synchronously (a tensor per batch size,
 * made once). Checkpoints are the same file on both devices. Rank 0's first line names
 * the device. Under hooprun on cuda every worker takes its GPU (several may share one)
 * and DDP reduces each bucket on the device while backward runs (no host wait per step);
 * CUDA graphs are off then (the bucket all-reduces cannot be captured yet), said once.
 *
 * Preemption: SIGINT, SIGTERM and SIGUSR1 (Slurm's --signal) only set a flag. The ranks
 * agree on it with a one-int maximum all-reduce posted after every step and collected
 * after the next one (so no step waits for it; a signal that reached only some ranks, or
 * reached them during different steps, stops all of them after the same step, one step
 * later); then rank 0 saves the checkpoint with the position inside the epoch, every
 * rank waits for that save, rank 0 prints "preempted ..." and all exit with 128 + the
 * signal's number. A second SIGINT stops at once. --resume continues from that position
 * with the same sampler order, optimizer state and dropout stream (seeded per step), so
 * the run ends with the same checkpoint as an uninterrupted one, byte for byte.
 *
 * Exit status: 0 success; 2 bad flags, a missing data directory or a corrupt data file
 * (any HOOP_ERR_INVALID before training starts), or --device cuda where no GPU can be
 * had; 1 any other failure; 128 + N after a stop by signal N (130 SIGINT, 138 SIGUSR1,
 * 143 SIGTERM) with the checkpoint saved. Every failure prints one line
 * "hoop-train: <message>" on stderr.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/checkpoint.h"
#include "autograd/kern.h"
#include "core/check.h"
#include "core/clock.h"
#include "hoop/autograd.h"
#include "hoop/data.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "train_cli.h"
#include "train_dist.h"

#define BAR_WIDTH 30
#define BAR_EVERY_NS 100000000LL
#define DEVICE_INPUTS 4 /* cuda input tensors: full, short last, evaluation, its short last */
#define SLOTS 2         /* cuda: batches in flight (one uploading, one training) */

/* cuda: one buffer of the double-buffered batches (see the top of this file). */
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
    hoop_device device;                /* where the model, its batches and its activations live */
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
    int64_t bar_ns; /* when the bar was last drawn (redrawn at most every BAR_EVERY_NS) */
    FILE *metrics;
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
    int64_t agree_ns; /* time spent agreeing on stops (the per-step all-reduce) */
} trainer;

static const char *model_name(const trainer *t)
{
    return t->o->model == TRAIN_MODEL_MLP ? "mlp" : "cnn";
}

// ----- stop signals -----------------------------------------------------------------------

/* The first stop signal received, 0 = none. Any thread may run the handler (OpenBLAS's,
 * the progress thread), so the flag is a lock-free atomic, which C11 allows in handlers. */
static atomic_int stop_requested;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the stop flag must be lock-free");

static void on_stop_signal(int sig)
{
    int none = 0;
    if (!atomic_compare_exchange_strong(&stop_requested, &none, sig) && sig == SIGINT) {
        signal(SIGINT, SIG_DFL); /* Ctrl-C twice: stop now, as the default would */
        raise(SIGINT);
    }
}

/* From here on SIGINT, SIGTERM and SIGUSR1 ask for a stop after the current step. Before,
 * they keep their default effect: there is nothing to save during start-up. */
static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

/* "SIGTERM" and friends, for the messages. */
static const char *signal_name(int sig)
{
    return sig == SIGINT    ? "SIGINT"
           : sig == SIGTERM ? "SIGTERM"
           : sig == SIGUSR1 ? "SIGUSR1"
                            : "a signal";
}

/* Do all ranks stop now? Sets t->stop_sig when any rank got a stop signal. After a step
 * (pipelined) the answer is the one agreed after the previous step, so the step never
 * waits for the slowest rank's flag: a stop comes one step after the signal. */
static hoop_status agree_stop(trainer *t, int pipelined)
{
    int32_t sig = (int32_t)atomic_load(&stop_requested);
    int64_t t0 = hoop__now_ns();
    HOOP_CHECK(train_dist_agree(&t->dist, &sig, pipelined));
    t->agree_ns += hoop__now_ns() - t0;
    t->stop_sig = (int)sig;
    return HOOP_OK;
}

// ----- set-up and tear-down ---------------------------------------------------------------

static hoop_status load_data(trainer *t)
{
    hoop_dataset_config cfg = HOOP_DATASET_CONFIG_INIT;
    if (t->o->standardize) {
        cfg.mean = HOOP_FASHION_MNIST_MEAN;
        cfg.std = HOOP_FASHION_MNIST_STD;
    }
    HOOP_CHECK(hoop_dataset_load_mnist(&t->train, t->o->data, "train", &cfg));
    HOOP_CHECK(hoop_dataset_load_mnist(&t->test, t->o->data, "t10k", &cfg));
    t->sample = hoop_dataset_rows(t->train) * hoop_dataset_cols(t->train);
    if (hoop_dataset_rows(t->test) != hoop_dataset_rows(t->train) ||
        hoop_dataset_cols(t->test) != hoop_dataset_cols(t->train))
        return HOOP_ERROR(
            HOOP_ERR_INVALID, "%s: test images are %lldx%lld, train images %lldx%lld", t->o->data,
            (long long)hoop_dataset_rows(t->test), (long long)hoop_dataset_cols(t->test),
            (long long)hoop_dataset_rows(t->train), (long long)hoop_dataset_cols(t->train));
    return HOOP_OK;
}

static hoop_status build_model(trainer *t)
{
    const train_opts *o = t->o;
    if (o->model == TRAIN_MODEL_MLP) {
        const int64_t sizes[4] = {t->sample, 512, 256, hoop_dataset_num_classes(t->train)};
        return hoop_model_new_mlp(&t->model, sizes, 4, (uint64_t)o->seed);
    }
    hoop_cnn_config cfg = HOOP_CNN_CONFIG_INIT;
    cfg.height = hoop_dataset_rows(t->train);
    cfg.width = hoop_dataset_cols(t->train);
    cfg.classes = hoop_dataset_num_classes(t->train);
    cfg.dropout = o->dropout;
    return hoop_model_new_cnn(&t->model, &cfg, (uint64_t)o->seed);
}

static hoop_status build_optim(trainer *t)
{
    const train_opts *o = t->o;
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = o->optimizer == TRAIN_OPT_SGD ? HOOP_OPTIM_SGD : HOOP_OPTIM_ADAMW;
    cfg.lr = o->lr;
    cfg.weight_decay = o->weight_decay;
    if (o->optimizer == TRAIN_OPT_SGD) {
        cfg.momentum = o->momentum;
        cfg.nesterov = o->nesterov;
    }
    HOOP_CHECK(hoop_optim_new(&t->opt, &cfg, hoop_model_params(t->model),
                              hoop_model_param_count(t->model)));
    int64_t per_epoch = (int64_t)hoop_loader_num_batches(t->loader);
    t->sched = (hoop_lr_schedule){
        .base_lr = o->lr,
        .min_lr = o->schedule == TRAIN_SCHED_COSINE ? 0.0f : o->lr,
        .warmup_steps = o->warmup_steps,
        .total_steps = per_epoch * o->epochs,
    };
    return HOOP_OK;
}

/* Is the directory that would hold path writable, and path itself no directory (the
 * save's rename over it would fail only at the end of the first epoch)? what names the
 * flag or variable. */
static hoop_status check_output_dir(const char *what, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s '%s' is a directory; give a file's path", what,
                          path);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        slash[slash == dir] = '\0';
    if (access(dir, W_OK) != 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s '%s': directory '%s' is not writable: %s", what,
                          path, dir, hoop__strerror(errno));
    return HOOP_OK;
}

/* --checkpoint: can a save write there? Makes and removes the temporary file a save makes
 * (access() passes for root where no file can be made, in /proc for one), so that a path
 * a save would fail on fails now, not after an epoch of work. */
static hoop_status check_checkpoint_path(const char *path)
{
    char why[1024];
    HOOP_CHECK(check_output_dir("--checkpoint", path));
    if (hoop__checkpoint_probe(path) == HOOP_OK) return HOOP_OK;
    snprintf(why, sizeof why, "%s", hoop_last_error()); /* "checkpoint: cannot create ..." */
    return HOOP_ERROR(HOOP_ERR_INVALID, "--%s (a save would fail there)", why);
}

/* Rank 0's preparation: the data, and every output path, checked before any work. */
static hoop_status prepare_rank0(trainer *t)
{
    const train_opts *o = t->o;
    const char *trace = getenv("HOOP_TRACE_FILE");
    if (o->checkpoint) HOOP_CHECK(check_checkpoint_path(o->checkpoint));
    if (trace && *trace) HOOP_CHECK(check_output_dir("HOOP_TRACE_FILE", trace));
    if (o->metrics && !(t->metrics = fopen(o->metrics, "a")))
        return HOOP_ERROR(HOOP_ERR_INVALID, "--metrics: cannot open '%s': %s", o->metrics,
                          hoop__strerror(errno));
    return load_data(t);
}

/* Rank 0 checks and loads the data while the others wait for its verdict; then they
 * load theirs (a failure on rank 0 stops everyone with rank 0's message). */
static hoop_status load_data_rank0_first(trainer *t)
{
    hoop_status st = t->dist.rank == 0 ? prepare_rank0(t) : HOOP_OK;
    HOOP_CHECK(train_dist_root_status(&t->dist, st));
    if (t->dist.rank != 0) HOOP_CHECK(load_data(t));
    size_t n = hoop_dataset_count(t->train);
    t->ntrain =
        t->o->train_limit > 0 && (size_t)t->o->train_limit < n ? (size_t)t->o->train_limit : n;
    return HOOP_OK;
}

/* Points the loader at this rank's shard of epoch, past its first skip batches (the
 * ones a resumed run has trained already); t->nbatches gets the whole shard's count. */
static hoop_status select_shard(trainer *t, int64_t epoch, int64_t skip)
{
    const int64_t *idx;
    size_t n, bs = (size_t)t->o->batch_size;
    HOOP_CHECK(train_dist_shard(&t->dist, (uint64_t)epoch, &idx, &n));
    size_t from = (size_t)skip * bs < n ? (size_t)skip * bs : n;
    t->nbatches = (n + bs - 1) / bs;
    HOOP_CHECK(hoop_loader_set_indices(t->loader, idx + from, n - from));
    return hoop_loader_start_epoch(t->loader, (uint64_t)epoch);
}

/* What a checkpoint of this run records about it (and what a resumed file must match). */
static hoop_status run_identity(const trainer *t, train_ckpt_extra *ex)
{
    *ex = (train_ckpt_extra){
        .magic = TRAIN_CKPT_MAGIC,
        .seed = t->o->seed,
        .world_size = t->dist.world_size,
        .batch_size = t->o->batch_size,
        .ntrain = (int64_t)t->ntrain,
        .model = t->o->model == TRAIN_MODEL_MLP ? TRAIN_CKPT_MODEL_MLP : TRAIN_CKPT_MODEL_CNN,
    };
    return train_cli_settings(t->o, TRAIN_SAME_RESUME, ex->settings, sizeof ex->settings);
}

/* --resume: continue from the checkpoint (shared from rank 0) when there is one, at the
 * epoch and batch it records. */
static hoop_status maybe_resume(trainer *t)
{
    const train_opts *o = t->o;
    train_ckpt_extra ex, want;
    int found = 0;
    if (!o->resume) return HOOP_OK;
    HOOP_CHECK(run_identity(t, &want));
    HOOP_CHECK(train_dist_load(&t->dist, o->checkpoint, hoop_model_params(t->model),
                               hoop_model_param_count(t->model), t->opt, &want,
                               hoop_model_numel(t->model), &ex, &found));
    if (!found) {
        if (t->dist.rank == 0)
            printf("hoop-train: no checkpoint at %s yet; starting afresh\n", o->checkpoint);
        return HOOP_OK;
    }
    t->start_epoch = ex.epochs_done;
    t->start_batch = ex.batches_done;
    t->step = ex.step;
    if (t->dist.rank == 0) { /* the others add their own part of the epoch to it */
        t->loss_sum = ex.loss_sum;
        t->loss_samples = (size_t)ex.loss_samples;
    }
    if (t->dist.rank != 0) return HOOP_OK;
    if (ex.batches_done > 0)
        printf("hoop-train: resumed from %s in epoch %lld after batch %lld (step %lld)\n",
               o->checkpoint, (long long)ex.epochs_done + 1, (long long)ex.batches_done,
               (long long)ex.step);
    else
        printf("hoop-train: resumed from %s after epoch %lld (step %lld)%s\n", o->checkpoint,
               (long long)ex.epochs_done, (long long)ex.step,
               ex.epochs_done >= o->epochs ? "; it already has --epochs, nothing to do" : "");
    return HOOP_OK;
}

/* Several workers on one node share its cores: unless --threads or OPENBLAS_NUM_THREADS
 * says otherwise, each gets cores / LOCAL_WORLD_SIZE OpenBLAS threads (at least 1), as
 * torchrun sets OMP_NUM_THREADS, instead of every worker starting one per core. */
static void share_cores(const trainer *t)
{
    const char *env = getenv("OPENBLAS_NUM_THREADS"), *lws = getenv("LOCAL_WORLD_SIZE");
    const char *bound = getenv("HOOP_CPU_BIND");
    cpu_set_t mine;
    if (t->o->threads > 0 || (env && *env) || !lws || atoi(lws) <= 1) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof(mine), &mine) == 0) cores = CPU_COUNT(&mine);
    long per = bound && *bound ? cores : cores / atoi(lws); /* bound: the block is ours */
    openblas_set_num_threads(per >= 1 ? (int)per : 1);
}

// ----- the device -------------------------------------------------------------------------

/* What rank 0's first line says about the device: "cpu" or "cuda".
 * DEVICE LAYER: the GPU's name and memory (e.g. "cuda (NVIDIA H200, 139.8 GiB)") go here
 * once src/cuda reports them; until then this names the device's kind only. */
/* "cpu", or "cuda" and the GPU's name and memory ("cuda (cuda:0 NVIDIA H200, 139.8
 * GiB)"), for the first line. */
static const char *device_description(const trainer *t)
{
    static char line[320];
    char d[256];
    if (t->device != HOOP_DEVICE_CUDA) return "cpu";
    if (hoop_device_describe(t->device, d, sizeof(d)) != HOOP_OK) return "cuda";
    snprintf(line, sizeof(line), "cuda (%s)", d);
    return line;
}

/* The loader's reason without the function and device it names ("hoop_device_check:
 * device cuda: "), which --device's own messages say already. */
static const char *skip_prefix(const char *msg)
{
    static const char *const prefixes[] = {"hoop_device_check: ", "device cuda: "};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(msg, prefixes[i], strlen(prefixes[i])) == 0) msg += strlen(prefixes[i]);
    return msg;
}

/* Resolves --device into t->device. cuda is refused where it cannot be had, with the
 * CUDA backend's loader's reason (no module, no GPU; HOOP_ERR_UNSUPPORTED); auto takes
 * cpu then instead and copies the reason to why ("" when it took cuda). Under hooprun
 * each worker takes its GPU (the device layer's choice: LOCAL_RANK modulo the GPUs, so
 * several workers may share one) and DDP reduces the gradients on the device. */
static hoop_status resolve_device(trainer *t, char *why, size_t len)
{
    hoop_status st;
    t->device = HOOP_DEVICE_CPU;
    why[0] = '\0';
    if (t->o->device == TRAIN_DEVICE_CPU) return HOOP_OK;
    if ((st = hoop_device_check(HOOP_DEVICE_CUDA)) == HOOP_OK) {
        t->device = HOOP_DEVICE_CUDA;
        return HOOP_OK;
    }
    if (t->o->device == TRAIN_DEVICE_CUDA)
        return HOOP_ERROR(st, "--device cuda: %s", skip_prefix(hoop_last_error()));
    snprintf(why, len, "%s", skip_prefix(hoop_last_error()));
    return HOOP_OK;
}

/* Every rank resolves its device; rank 0's refusal stops everyone with its one message.
 * Rank 0's first line names the device ("hoop-train: device cpu"), and why auto did not
 * take cuda. */
static hoop_status pick_device(trainer *t)
{
    char why[1200];
    hoop_status st = resolve_device(t, why, sizeof why);
    HOOP_CHECK(train_dist_root_status(&t->dist, st));
    HOOP_CHECK(st); /* this rank's own failure, where rank 0's device was fine */
    if (t->dist.rank != 0) return HOOP_OK;
    if (why[0])
        printf("hoop-train: device %s (--device auto: %s)\n", device_description(t), why);
    else
        printf("hoop-train: device %s\n", device_description(t));
    fflush(stdout);
    return HOOP_OK;
}

/* cuda: the double-buffered slots (pinned batches, device batch tensors, events, with
 * --cuda-graph a tape each). Their free events are recorded once made, so the first
 * upload into a slot's tensor follows what the compute stream did to its memory before. */
static hoop_status slots_init(trainer *t)
{
    const size_t bs = (size_t)t->o->batch_size;
    const int mlp = t->o->model == TRAIN_MODEL_MLP;
    int64_t mlp_shape[2] = {(int64_t)bs, t->sample};
    int64_t cnn_shape[4] = {(int64_t)bs, 1, hoop_dataset_rows(t->train),
                            hoop_dataset_cols(t->train)};
    t->graphs = t->o->cuda_graph && t->dist.ddp == NULL;
    /* The bucket all-reduces are the collectives' stream form, which refuses capture. */
    if (t->o->cuda_graph && t->dist.ddp && t->dist.rank == 0)
        printf("hoop-train: cuda graph: off under DDP (the bucket all-reduces, ordered on "
               "the device, cannot be captured yet); training eagerly\n");
    for (int i = 0; i < SLOTS; i++) {
        batch_slot *b = &t->slot[i];
        HOOP_CHECK(
            hoop_host_alloc(t->device, bs * (size_t)t->sample * sizeof(float), (void **)&b->x));
        HOOP_CHECK(hoop_host_alloc(t->device, bs * sizeof(int32_t), (void **)&b->y));
        HOOP_CHECK(hoop_host_alloc(t->device, sizeof(float), (void **)&b->loss));
        HOOP_CHECK(
            hoop_tensor_new(&b->dev_x, mlp ? 2 : 4, mlp ? mlp_shape : cnn_shape, t->device, 0));
        HOOP_CHECK(hoop__event_new(t->device, &b->uploaded));
        HOOP_CHECK(hoop__event_new(t->device, &b->free));
        HOOP_CHECK(hoop__event_record(b->free));
        if (t->graphs) HOOP_CHECK(hoop_tape_init(&b->tape));
    }
    return HOOP_OK;
}

/* Waits for what the slots' buffers are still used by (an upload in flight, a step), then
 * frees them; keeps the first error in *st. */
static void slots_destroy(trainer *t, hoop_status *st)
{
    /* A step that failed after it was issued but before its slot's events were recorded
     * may still read the slot's pinned buffers: wait for all the device's work first. */
    if (t->device == HOOP_DEVICE_CUDA) HOOP_CHECK_KEEP(hoop_device_sync(t->device), *st);
    for (int i = 0; i < SLOTS; i++) {
        batch_slot *b = &t->slot[i];
        if (b->uploaded) HOOP_CHECK_KEEP(hoop__event_sync(b->uploaded), *st);
        if (b->free) HOOP_CHECK_KEEP(hoop__event_sync(b->free), *st);
        hoop_graph_free(b->graph);
        HOOP_CHECK_KEEP(hoop_tape_destroy(b->tape), *st);
        hoop__event_free(b->uploaded);
        hoop__event_free(b->free);
        hoop_tensor_free(b->dev_x);
        hoop_host_free(t->device, b->x);
        hoop_host_free(t->device, b->y);
        hoop_host_free(t->device, b->loss);
    }
}

static hoop_status trainer_init(trainer *t, const train_opts *o)
{
    memset(t, 0, sizeof *t);
    t->o = o;
    char settings[TRAIN_SETTINGS_BYTES];
    HOOP_CHECK(train_dist_init(&t->dist));
    /* Flags that differ between ranks would diverge the models, overlap the shards or
     * mismatch a collective much later: refused first, naming the flag. */
    HOOP_CHECK(train_cli_settings(o, TRAIN_SAME_RANKS, settings, sizeof settings));
    HOOP_CHECK(train_dist_same_settings(&t->dist, settings));
    share_cores(t);
    HOOP_CHECK(pick_device(t));
    HOOP_CHECK(load_data_rank0_first(t));
    HOOP_CHECK(build_model(t));
    /* Built and initialised on the host, moved before the optimizer makes its state and
     * before a checkpoint is loaded into it. */
    if (t->device != HOOP_DEVICE_CPU) HOOP_CHECK(hoop_model_to_device(t->model, t->device));
    HOOP_CHECK(hoop_loader_new(&t->loader, t->train, (size_t)o->batch_size, (uint64_t)o->seed));
    HOOP_CHECK(train_dist_sampler(&t->dist, t->ntrain, (uint64_t)o->seed));
    HOOP_CHECK(select_shard(t, 0, 0));
    HOOP_CHECK(build_optim(t));
    HOOP_CHECK(maybe_resume(t));
    HOOP_CHECK(train_dist_wrap(&t->dist, hoop_model_params(t->model),
                               hoop_model_param_count(t->model), o->bucket_cap_kb,
                               o->first_bucket_kb));
    HOOP_CHECK(hoop_tape_init(&t->tape));
    int64_t cap = o->batch_size > o->eval_batch_size ? o->batch_size : o->eval_batch_size;
    HOOP_CHECK(hoop__calloc(&t->x, (size_t)(cap * t->sample)));
    /* cuda: the labels in pinned memory (a captured step reads them at each replay) */
    if (t->device == HOOP_DEVICE_CPU)
        HOOP_CHECK(hoop__calloc(&t->y, (size_t)cap));
    else
        HOOP_CHECK(hoop_host_alloc(t->device, (size_t)cap * sizeof(int32_t), (void **)&t->y));
    if (t->device == HOOP_DEVICE_CUDA) HOOP_CHECK(slots_init(t));
    if (t->device != HOOP_DEVICE_CPU)
        HOOP_CHECK(hoop__calloc(&t->logits, (size_t)o->eval_batch_size *
                                                (size_t)hoop_dataset_num_classes(t->train)));
    t->bar =
        t->dist.rank == 0 && (o->progress == 1 || (o->progress == -1 && isatty(STDERR_FILENO)));
    return HOOP_OK;
}

static hoop_status trainer_destroy(trainer *t)
{
    hoop_status st = HOOP_OK;
    if (t->metrics && fclose(t->metrics) != 0)
        st = HOOP_ERROR(HOOP_ERR_SYSTEM, "--metrics: writing '%s' failed: %s", t->o->metrics,
                        hoop__strerror(errno));
    if (t->device == HOOP_DEVICE_CUDA) slots_destroy(t, &st);
    HOOP_CHECK_KEEP(hoop_tape_destroy(t->tape), st);
    /* DDP first: it hands the gradients back to the parameters the model owns. */
    HOOP_CHECK_KEEP(train_dist_destroy(&t->dist), st);
    hoop_optim_free(t->opt);
    hoop_model_free(t->model);
    for (int i = 0; i < DEVICE_INPUTS; i++) hoop_tensor_free(t->dev_x[i]);
    free(t->logits);
    hoop_loader_free(t->loader);
    hoop_dataset_free(t->train);
    hoop_dataset_free(t->test);
    free(t->x);
    if (t->device == HOOP_DEVICE_CPU)
        free(t->y);
    else
        hoop_host_free(t->device, t->y);
    return st;
}

// ----- one step ---------------------------------------------------------------------------

/* Makes a tape tensor for n samples, shaped for the model: (n, rows*cols) for the MLP,
 * (n, 1, rows, cols) for the CNN. */
static hoop_status new_input(trainer *t, size_t n, hoop_tensor **x)
{
    int64_t rows = hoop_dataset_rows(t->train), cols = hoop_dataset_cols(t->train);
    int64_t mlp_shape[2] = {(int64_t)n, t->sample};
    int64_t cnn_shape[4] = {(int64_t)n, 1, rows, cols};
    int mlp = t->o->model == TRAIN_MODEL_MLP;
    return hoop_tape_tensor_new(t->tape, mlp ? 2 : 4, mlp ? mlp_shape : cnn_shape, x);
}

/* cuda: the long-lived device tensor for batches of n samples, shaped as new_input's. It
 * is made at the first batch of that size: a run needs at most DEVICE_INPUTS sizes (the
 * batch, the shard's short last batch, the evaluation batch and its short last one), so
 * no step allocates. */
static hoop_status device_input(trainer *t, size_t n, hoop_tensor **x)
{
    int64_t rows = hoop_dataset_rows(t->train), cols = hoop_dataset_cols(t->train);
    int64_t mlp_shape[2] = {(int64_t)n, t->sample};
    int64_t cnn_shape[4] = {(int64_t)n, 1, rows, cols};
    int mlp = t->o->model == TRAIN_MODEL_MLP, i;
    for (i = 0; i < DEVICE_INPUTS && t->dev_x[i]; i++)
        if ((size_t)hoop_tensor_dim(t->dev_x[i], 0) == n) {
            *x = t->dev_x[i];
            return HOOP_OK;
        }
    if (i == DEVICE_INPUTS)
        return HOOP_ERROR(HOOP_ERR_INTERNAL, "a batch of %zu samples: all %d input sizes taken", n,
                          DEVICE_INPUTS);
    HOOP_CHECK(
        hoop_tensor_new(&t->dev_x[i], mlp ? 2 : 4, mlp ? mlp_shape : cnn_shape, t->device, 0));
    *x = t->dev_x[i];
    return HOOP_OK;
}

/* Makes the input tensor holding the first n samples gathered into t->x: a tape tensor on
 * the cpu, the device tensor of that size on cuda. */
static hoop_status make_input(trainer *t, size_t n, hoop_tensor **x)
{
    if (t->device == HOOP_DEVICE_CPU)
        HOOP_CHECK(new_input(t, n, x));
    else
        HOOP_CHECK(device_input(t, n, x));
    return hoop_tensor_copy_from(*x, t->x, n * (size_t)t->sample);
}

/* The loader's next batch on the cpu (*n == 0: epoch over), gathered straight into a tape
 * tensor; a short last batch is moved into a tensor of its own size. */
static hoop_status next_batch(trainer *t, hoop_tensor **x, size_t *n)
{
    size_t bs = (size_t)t->o->batch_size;
    HOOP_CHECK(new_input(t, bs, x));
    HOOP_CHECK(hoop_loader_next(t->loader, hoop_tensor_data(*x), t->y, n));
    if (*n == 0 || *n == bs) return HOOP_OK;
    memcpy(t->x, hoop_tensor_data(*x), *n * (size_t)t->sample * sizeof(float));
    return make_input(t, *n, x);
}

/* The optimizer step on the gradients in the parameters, at the scheduled rate. Also what
 * a rank that ran out of batches runs for the others' steps (hoop_ddp_join). */
static hoop_status optimizer_step(void *user)
{
    trainer *t = user;
    int64_t o0 = hoop_ddp_now_us();
    hoop_optim_set_lr(t->opt, hoop_lr_at(&t->sched, t->step));
    HOOP_CHECK(hoop_optim_step(t->opt));
    if (t->dist.ddp) hoop_ddp_trace_event(t->dist.ddp, "optimizer", o0, hoop_ddp_now_us());
    t->step++;
    return HOOP_OK;
}

/* The dropout stream of a step: a function of (seed, step, rank) alone (splitmix64's
 * finaliser over them), so a run resumed at any step draws the same masks. */
static uint64_t step_seed(const trainer *t)
{
    uint64_t z = (uint64_t)t->o->seed * 0x9E3779B97F4A7C15ULL ^ (uint64_t)t->step;
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL) ^ ((uint64_t)t->dist.rank << 48);
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* The diverged-loss check of step. */
static hoop_status check_loss(float loss, int64_t step)
{
    if (isfinite(loss)) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "loss is %g at step %lld: training diverged "
                      "(try a smaller --lr)",
                      (double)loss, (long long)step);
}

/* A step's forward, loss (into *l), zero_grad and backward (DDP's when wrapped) on tape,
 * for the batch x with labels y: what an eager step and a captured one share. */
static hoop_status forward_backward(trainer *t, hoop_tape *tape, hoop_tensor *x, const int32_t *y,
                                    hoop_tensor **l)
{
    hoop_tensor *logits;
    hoop_ddp *ddp = t->dist.ddp;
    int64_t f0 = hoop_ddp_now_us();
    HOOP_CHECK(hoop_model_forward(t->model, tape, x, &logits));
    HOOP_CHECK(hoop_cross_entropy(tape, logits, y, 0.0f, l));
    HOOP_CHECK(hoop_optim_zero_grad(t->opt));
    if (ddp) hoop_ddp_trace_event(ddp, "forward", f0, hoop_ddp_now_us());
    return ddp ? hoop_ddp_backward(ddp, tape, *l) : hoop_backward(tape, *l);
}

/* One optimizer step on the cpu on the batch x (labels in t->y); *loss gets its mean
 * loss. */
static hoop_status train_step(trainer *t, hoop_tensor *x, float *loss)
{
    hoop_tensor *l;
    hoop_tape_seed(t->tape, step_seed(t));
    HOOP_CHECK(forward_backward(t, t->tape, x, t->y, &l));
    HOOP_CHECK(optimizer_step(t));
    HOOP_CHECK(hoop_tensor_copy_to_host(l, loss, 1));
    hoop_tape_reset(t->tape);
    return check_loss(*loss, t->step);
}

// ----- cuda: double-buffered batches ------------------------------------------------------

/* The step that read slot b, which has run: its loss into the epoch's and the window's
 * sums (a no-op when no step read the slot since). */
static hoop_status account(trainer *t, batch_slot *b)
{
    if (!b->pending) return HOOP_OK;
    b->pending = 0;
    const float loss = *b->loss;
    t->loss_sum += (double)loss * (double)b->n;
    t->loss_samples += b->n;
    t->win_loss += (double)loss * (double)b->n;
    t->win_samples += b->n;
    return check_loss(loss, b->step);
}

/* Every step's loss accounted, oldest first, each once the host has waited for its step
 * (before the sums are logged or saved). A no-op on the cpu, whose steps account their
 * own. */
static hoop_status drain(trainer *t)
{
    if (t->device == HOOP_DEVICE_CPU) return HOOP_OK;
    for (int k = 0; k < SLOTS; k++) {
        batch_slot *b = &t->slot[(t->cur + 1 + k) % SLOTS];
        if (!b->pending) continue;
        HOOP_CHECK(hoop__event_sync(b->free));
        HOOP_CHECK(account(t, b));
    }
    return HOOP_OK;
}

/* The host waits until slot b may be refilled: the step that read it has run (and with
 * it the upload that step waited for and the copy of its loss), or, when no step has read
 * its last upload yet, that upload has. */
static hoop_status slot_wait(batch_slot *b)
{
    HOOP_CHECK(hoop__event_sync(b->free));
    return b->unread ? hoop__event_sync(b->uploaded) : HOOP_OK;
}

/* Gathers the loader's next batch into slot i (n 0: the epoch is over) and queues its
 * upload: once the slot's last step has run (slot_wait; its loss is accounted then), the
 * batch goes into the pinned buffers and the copy stream copies it into the device
 * tensor, after that step on the device too. A short batch goes to the tensor of its size,
 * which the evaluation may have used: its upload waits for all the compute stream's work. */
static hoop_status prefetch(trainer *t, int i)
{
    batch_slot *b = &t->slot[i];
    HOOP_CHECK(slot_wait(b));
    HOOP_CHECK(account(t, b));
    HOOP_CHECK(hoop_loader_next(t->loader, b->x, b->y, &b->n));
    if (b->n == 0) return HOOP_OK;
    b->in = b->dev_x;
    if (b->n < (size_t)t->o->batch_size) {
        HOOP_CHECK(device_input(t, b->n, &b->in));
        HOOP_CHECK(hoop__event_record(b->free));
    }
    b->unread = 1;
    return hoop__tensor_upload_async(b->in, b->x, b->n * (size_t)t->sample, b->free, b->uploaded);
}

/* Captures slot b's step into b->graph (recorded, not run). A failed capture turns graphs
 * off with one line saying why; the library has then taken back what the capture
 * advanced, so the caller runs the step eagerly. */
static hoop_status capture_step(trainer *t, batch_slot *b)
{
    hoop_tensor *l = NULL;
    hoop_tape_seed(b->tape, step_seed(t));
    hoop_optim_set_lr(t->opt, hoop_lr_at(&t->sched, t->step));
    HOOP_CHECK(hoop_graph_begin(t->device));
    hoop_status st = forward_backward(t, b->tape, b->in, b->y, &l);
    if (st == HOOP_OK) st = hoop_optim_step(t->opt);
    const hoop_status end = hoop_graph_end(&b->graph);
    if (st == HOOP_OK) st = end;
    if (st != HOOP_OK) {
        if (t->dist.rank == 0)
            printf("hoop-train: cuda graph: capture failed (%s); training eagerly\n",
                   hoop_last_error());
        hoop_graph_free(b->graph);
        b->graph = NULL;
        t->graphs = 0;
        hoop_tape_reset(b->tape);
        return HOOP_OK;
    }
    b->graph_loss = l;
    if (t->dist.rank == 0)
        printf("hoop-train: cuda graph: step %lld captured for input buffer %d of %d; its "
               "full-batch steps replay it\n",
               (long long)t->step + 1, (int)(b - t->slot) + 1, SLOTS);
    return HOOP_OK;
}

/* Slot b's step as a graph replay (capturing it first, on its second full batch); *l the
 * loss it writes. *l NULL: the capture failed, run the step eagerly. */
static hoop_status replay_step(trainer *t, batch_slot *b, hoop_tensor **l)
{
    *l = NULL;
    if (b->graph == NULL) {
        HOOP_CHECK(capture_step(t, b));
        if (b->graph == NULL) return HOOP_OK;
        /* the captured step itself: its host side ran during the capture */
    } else {
        hoop_tape_seed(b->tape, step_seed(t));
        hoop_optim_set_lr(t->opt, hoop_lr_at(&t->sched, t->step));
    }
    HOOP_CHECK(hoop_graph_replay(b->graph));
    t->replay_queued = 1;
    t->step++;
    *l = b->graph_loss;
    return HOOP_OK;
}

/* Issues the optimizer step on slot i's batch, without waiting for it: the compute stream
 * waits for the batch's upload, runs the step (eagerly, or with --cuda-graph on a full
 * batch as the slot's graph after one eager warm-up on its tape and the capture), copies
 * the loss into the slot (want_loss) and records the slot's free event. Two graphs, one
 * per slot, rather than one graph fed by a device-to-device copy: the labels are read by
 * the graph from the slot's pinned memory (cross-entropy checks them on the host and
 * uploads them itself), and a fixed source would have to be rewritten on the host after
 * the previous replay; one graph per slot needs no copy and no host wait beyond the one a
 * replay makes (hoop_graph_replay). */
static hoop_status cuda_step(trainer *t, int i, int want_loss)
{
    batch_slot *b = &t->slot[i];
    hoop_tensor *l = NULL;
    hoop_tape *tape = t->tape;
    HOOP_CHECK(hoop__event_wait(b->uploaded));
    b->unread = 0;
    if (t->graphs && b->n == (size_t)t->o->batch_size) {
        tape = b->tape;
        if (b->warm++ > 0) HOOP_CHECK(replay_step(t, b, &l));
    }
    const int replayed = l != NULL;
    if (!replayed) {
        /* An eager optimizer step rewrites the optimizer's scalars in pinned memory, which
         * a replay still queued reads when it runs: wait for it (a short batch's step,
         * once an epoch). */
        if (t->replay_queued) HOOP_CHECK(hoop_device_sync(t->device));
        t->replay_queued = 0;
        hoop_tape_seed(tape, step_seed(t));
        HOOP_CHECK(forward_backward(t, tape, b->in, b->y, &l));
        HOOP_CHECK(optimizer_step(t));
    }
    if (want_loss) HOOP_CHECK(hoop__tensor_download_async(l, b->loss, 1));
    HOOP_CHECK(hoop__event_record(b->free));
    /* eager: the arena's memory is reused in the compute stream's order, after the copy */
    if (!replayed) hoop_tape_reset(tape);
    b->pending = want_loss;
    b->step = t->step;
    t->cur = i;
    return HOOP_OK;
}

// ----- evaluation -------------------------------------------------------------------------

/* The logits' values on the host: in place on the cpu, copied into t->logits on cuda. */
static hoop_status host_logits(trainer *t, hoop_tensor *logits, const float **z)
{
    if (t->device == HOOP_DEVICE_CPU) {
        *z = hoop_tensor_data(logits);
        return HOOP_OK;
    }
    *z = t->logits;
    return hoop_tensor_copy_to_host(logits, t->logits, hoop_tensor_count(logits));
}

/* Rows of z (n x c logits) whose largest entry is at the label y (the first one on ties). */
static size_t count_correct(const float *z, int64_t c, const int32_t *y, size_t n)
{
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t best = 0;
        for (int64_t k = 1; k < c; k++)
            if (z[i * (size_t)c + (size_t)k] > z[i * (size_t)c + (size_t)best]) best = k;
        ok += best == y[i];
    }
    return ok;
}

/* Mean loss and accuracy (fraction) over the whole test set, in evaluation mode. */
static hoop_status evaluate(trainer *t, double *loss, double *acc)
{
    size_t n_test = hoop_dataset_count(t->test), eb = (size_t)t->o->eval_batch_size;
    size_t mine, correct = 0;
    const size_t *shard; /* every test sample on exactly one rank */
    double sum = 0.0;
    hoop_status st = HOOP_OK;
    int64_t *idx;
    HOOP_CHECK(train_dist_eval_shard(&t->dist, n_test, &shard, &mine));
    HOOP_CHECK(hoop__calloc(&idx, eb));
    hoop_tape_set_train(t->tape, 0);
    hoop_tape_set_grad_enabled(t->tape, 0);
    for (size_t s = 0; s < mine; s += eb) {
        size_t n = mine - s < eb ? mine - s : eb;
        hoop_tensor *x, *logits, *l;
        const float *z;
        float lv;
        for (size_t i = 0; i < n; i++) idx[i] = (int64_t)shard[s + i];
        HOOP_CHECK_GOTO(hoop_dataset_gather(t->test, idx, n, t->x, t->y), st, done);
        HOOP_CHECK_GOTO(make_input(t, n, &x), st, done);
        HOOP_CHECK_GOTO(hoop_model_forward(t->model, t->tape, x, &logits), st, done);
        HOOP_CHECK_GOTO(hoop_cross_entropy(t->tape, logits, t->y, 0.0f, &l), st, done);
        HOOP_CHECK_GOTO(hoop_tensor_copy_to_host(l, &lv, 1), st, done);
        HOOP_CHECK_GOTO(host_logits(t, logits, &z), st, done);
        sum += (double)lv * (double)n;
        correct += count_correct(z, hoop_tensor_dim(logits, 1), t->y, n);
        hoop_tape_reset(t->tape);
    }
    double g[2] = {sum, (double)correct};
    HOOP_CHECK_GOTO(train_dist_sum(&t->dist, g, 2), st, done);
    *loss = g[0] / (double)n_test;
    *acc = g[1] / (double)n_test;
done:
    hoop_tape_reset(t->tape);
    hoop_tape_set_grad_enabled(t->tape, 1);
    hoop_tape_set_train(t->tape, 1);
    free(idx);
    return st;
}

// ----- progress and metrics ---------------------------------------------------------------

static void clear_bar(const trainer *t)
{
    if (t->bar) fprintf(stderr, "\r%*s\r", BAR_WIDTH + 60, "");
}

/* Is the progress due after batch b of nb (the bar at most every BAR_EVERY_NS, a line
 * every --log-every batches)? A bar that is due counts as drawn now. */
static int progress_due(trainer *t, size_t b, size_t nb)
{
    if (t->dist.rank != 0) return 0; /* the other workers work silently */
    if (t->bar) {
        int64_t now = hoop__now_ns();
        if (b < nb && now - t->bar_ns < BAR_EVERY_NS) return 0;
        t->bar_ns = now;
        return 1;
    }
    return t->o->log_every > 0 && b % (size_t)t->o->log_every == 0 && b < nb;
}

/* Draws the bar or prints the line for batch b of nb (when progress_due said so). */
static void print_progress(const trainer *t, int64_t epoch, size_t b, size_t nb, double loss,
                           double sps)
{
    const train_opts *o = t->o;
    if (t->bar) {
        char bar[BAR_WIDTH + 1];
        size_t fill = nb ? b * BAR_WIDTH / nb : BAR_WIDTH;
        for (size_t i = 0; i < BAR_WIDTH; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[BAR_WIDTH] = '\0';
        fprintf(stderr, "\repoch %lld/%lld [%s] %zu/%zu loss %.4f %.0f samples/s ",
                (long long)epoch + 1, (long long)o->epochs, bar, b, nb, loss, sps);
        fflush(stderr);
    } else {
        printf("epoch %lld/%lld step %zu/%zu loss %.4f %.0f samples/s\n", (long long)epoch + 1,
               (long long)o->epochs, b, nb, loss, sps);
        fflush(stdout);
    }
}

typedef struct epoch_stats {
    double train_loss, test_loss, test_acc, train_s, sps;
    size_t samples;         /* global: summed over ranks */
    double comm_ms, hidden; /* per step: all-reduce time, share hidden behind backward */
} epoch_stats;

static void report_epoch(trainer *t, int64_t epoch, const epoch_stats *e)
{
    if (t->dist.rank != 0) return;
    clear_bar(t);
    char comm[96] = "";
    if (t->dist.ddp)
        snprintf(comm, sizeof comm, ", all-reduce %.2f ms/step, %.0f%% hidden", e->comm_ms,
                 100.0 * e->hidden);
    printf("epoch %lld/%lld loss %.4f test_loss %.4f test_acc %.2f%% %.0f samples/s "
           "(%.1f s%s)\n",
           (long long)epoch + 1, (long long)t->o->epochs, e->train_loss, e->test_loss,
           100.0 * e->test_acc, e->sps, e->train_s, comm);
    fflush(stdout);
    if (!t->metrics) return;
    fprintf(t->metrics,
            "{\"type\":\"epoch\",\"epoch\":%lld,\"epochs\":%lld,\"step\":%lld,\"model\":\"%s\","
            "\"lr\":%.6g,\"train_loss\":%.6f,\"test_loss\":%.6f,\"test_acc\":%.6f,"
            "\"samples\":%zu,\"train_s\":%.3f,\"samples_per_s\":%.1f,\"world_size\":%d,"
            "\"allreduce_ms_per_step\":%.3f,\"hidden_share\":%.4f}\n",
            (long long)epoch + 1, (long long)t->o->epochs, (long long)t->step, model_name(t),
            (double)hoop_optim_lr(t->opt), e->train_loss, e->test_loss, e->test_acc, e->samples,
            e->train_s, e->sps, t->dist.world_size, e->comm_ms, e->hidden);
    fflush(t->metrics);
}

/* --metrics-every N: after every N-th step (counted over the whole run, so a resumed run
 * logs at the same steps), one JSON line with the mean training loss of the steps since
 * the last one, over all ranks (a collective), and their throughput. */
static hoop_status log_step_metrics(trainer *t, int64_t epoch, size_t b)
{
    const train_opts *o = t->o;
    if (o->metrics_every <= 0 || t->step % o->metrics_every != 0) return HOOP_OK;
    HOOP_CHECK(drain(t));
    double g[2] = {t->win_loss, (double)t->win_samples};
    HOOP_CHECK(train_dist_sum(&t->dist, g, 2));
    double secs = (double)t->win_ns * 1e-9;
    if (t->metrics && g[1] > 0) {
        fprintf(t->metrics,
                "{\"type\":\"step\",\"epoch\":%lld,\"epochs\":%lld,\"epoch_step\":%zu,"
                "\"epoch_steps\":%zu,\"step\":%lld,\"model\":\"%s\",\"lr\":%.6g,"
                "\"train_loss\":%.6f,\"samples\":%.0f,\"samples_per_s\":%.1f,\"world_size\":%d}\n",
                (long long)epoch + 1, (long long)o->epochs, b, t->nbatches, (long long)t->step,
                model_name(t), (double)hoop_optim_lr(t->opt), g[0] / g[1], g[1],
                secs > 0 ? g[1] / secs : 0.0, t->dist.world_size);
        fflush(t->metrics);
    }
    t->win_loss = 0.0;
    t->win_samples = 0;
    t->win_ns = 0;
    return HOOP_OK;
}

// ----- checkpoints and stops --------------------------------------------------------------

/* Saves parameters, optimizer state and the position: epochs_done whole epochs, then
 * batches_done batches of the next one, with that epoch's loss so far summed over the
 * ranks (a collective, when batches_done > 0). Rank 0 writes (atomically) and, when say,
 * prints "saved PATH (step S)". Nothing without --checkpoint. */
static hoop_status save_checkpoint(trainer *t, int64_t epochs_done, int64_t batches_done, int say)
{
    const train_opts *o = t->o;
    if (!o->checkpoint) return HOOP_OK;
    /* cuda: the last steps' bucket all-reduces have run, or their failure stops the save */
    if (t->dist.ddp) HOOP_CHECK(hoop_ddp_wait(t->dist.ddp));
    train_ckpt_extra ex;
    HOOP_CHECK(run_identity(t, &ex));
    ex.epochs_done = epochs_done;
    ex.batches_done = batches_done;
    ex.step = t->step;
    if (batches_done > 0) {
        HOOP_CHECK(drain(t));
        double g[2] = {t->loss_sum, (double)t->loss_samples};
        HOOP_CHECK(train_dist_sum(&t->dist, g, 2));
        ex.loss_sum = g[0];
        ex.loss_samples = (int64_t)g[1];
    }
    if (t->dist.rank != 0) return HOOP_OK;
    HOOP_CHECK(hoop_checkpoint_save(o->checkpoint, hoop_model_params(t->model),
                                    hoop_model_param_count(t->model), t->opt, &ex, sizeof ex));
    if (say) {
        clear_bar(t);
        printf("hoop-train: saved %s (step %lld)\n", o->checkpoint, (long long)t->step);
        fflush(stdout);
    }
    return HOOP_OK;
}

/* The stop all ranks agreed on, after batch b of epoch: rank 0 saves the position, every
 * rank waits for its verdict (nobody leaves before the file is on disk, and a failed save
 * fails everyone), and rank 0 prints the one line that says where it stopped. */
static hoop_status stop_in_epoch(trainer *t, int64_t epoch, size_t b)
{
    const train_opts *o = t->o;
    hoop_status st = save_checkpoint(t, epoch, (int64_t)b, 0);
    HOOP_CHECK(train_dist_root_status(&t->dist, st));
    if (t->dist.rank != 0) return HOOP_OK;
    clear_bar(t);
    printf("hoop-train: preempted (%s) at epoch %lld step %zu/%zu; ", signal_name(t->stop_sig),
           (long long)epoch + 1, b, t->nbatches);
    if (o->checkpoint)
        printf("saved %s (step %lld)\n", o->checkpoint, (long long)t->step);
    else
        printf("no --checkpoint, nothing saved (step %lld)\n", (long long)t->step);
    fflush(stdout);
    return HOOP_OK;
}

/* After batch b (1-based) of epoch, the per-step collectives, in the same order on every
 * rank: step metrics, the stop agreement (a stop saves and ends the epoch), the periodic
 * checkpoint (not after an epoch's last batch: the epoch's own checkpoint follows). */
static hoop_status after_step(trainer *t, int64_t epoch, size_t b)
{
    const train_opts *o = t->o;
    HOOP_CHECK(log_step_metrics(t, epoch, b));
    HOOP_CHECK(agree_stop(t, 1));
    if (t->stop_sig) return stop_in_epoch(t, epoch, b);
    if (o->checkpoint_every > 0 && t->step % o->checkpoint_every == 0 && b < t->nbatches)
        HOOP_CHECK(save_checkpoint(t, epoch, (int64_t)b, 1));
    return HOOP_OK;
}

// ----- loops ------------------------------------------------------------------------------

/* Global loss over loss_samples, throughput of e->samples (this process's timed samples)
 * and this epoch's DDP timings (rank 0's view). */
static hoop_status finish_epoch(trainer *t, epoch_stats *e, double loss_sum, size_t loss_samples)
{
    double g[3] = {loss_sum, (double)loss_samples, (double)e->samples};
    HOOP_CHECK(train_dist_sum(&t->dist, g, 3));
    e->train_loss = g[1] > 0 ? g[0] / g[1] : 0.0;
    e->samples = (size_t)g[1];
    e->sps = e->train_s > 0 ? g[2] / e->train_s : 0.0;
    if (t->dist.ddp) {
        hoop_ddp_stats ds;
        hoop_ddp_get_stats(t->dist.ddp, &ds);
        e->comm_ms = ds.steps ? ds.comm_ms / (double)ds.steps : 0.0;
        e->hidden = ds.comm_ms > 0 ? ds.hidden_ms / ds.comm_ms : 0.0;
        hoop_ddp_reset_stats(t->dist.ddp);
    }
    return HOOP_OK;
}

/* The cpu's batches of epoch from batch b on (t0: the epoch's start), each step after the
 * last. */
static hoop_status train_cpu(trainer *t, int64_t epoch, epoch_stats *e, size_t b, int64_t t0)
{
    size_t n;
    float loss;
    for (;;) {
        hoop_tensor *x;
        int64_t s0 = hoop__now_ns();
        HOOP_CHECK(next_batch(t, &x, &n));
        if (n == 0) return HOOP_OK;
        HOOP_CHECK(train_step(t, x, &loss));
        t->loss_sum += (double)loss * (double)n;
        t->loss_samples += n;
        t->win_loss += (double)loss * (double)n;
        t->win_samples += n;
        t->win_ns += hoop__now_ns() - s0;
        e->samples += n;
        e->train_s = (double)(hoop__now_ns() - t0) * 1e-9;
        if (progress_due(t, ++b, t->nbatches))
            print_progress(t, epoch, b, t->nbatches, t->loss_sum / (double)t->loss_samples,
                           (double)e->samples * t->dist.world_size / e->train_s);
        HOOP_CHECK(after_step(t, epoch, b));
        if (t->stop_sig) return HOOP_OK;
    }
}

/* The same on cuda, double buffered: step k is issued, then batch k+1 is gathered and its
 * upload queued (which accounts step k-1's loss, having waited for it), while step k runs;
 * the losses are accounted in step order, and all of them before they are printed,
 * logged or saved. */
static hoop_status train_cuda(trainer *t, int64_t epoch, epoch_stats *e, size_t b, int64_t t0)
{
    int i = t->cur;
    HOOP_CHECK(prefetch(t, i));
    while (t->slot[i].n > 0) {
        const size_t n = t->slot[i].n;
        int64_t s0 = hoop__now_ns();
        HOOP_CHECK(cuda_step(t, i, 1));
        i = 1 - i;
        HOOP_CHECK(prefetch(t, i));
        t->win_ns += hoop__now_ns() - s0;
        e->samples += n;
        e->train_s = (double)(hoop__now_ns() - t0) * 1e-9;
        if (progress_due(t, ++b, t->nbatches)) {
            HOOP_CHECK(drain(t));
            print_progress(t, epoch, b, t->nbatches, t->loss_sum / (double)t->loss_samples,
                           (double)e->samples * t->dist.world_size / e->train_s);
        }
        HOOP_CHECK(after_step(t, epoch, b));
        if (t->stop_sig) return HOOP_OK;
    }
    return drain(t);
}

/* Trains the rest of epoch (all of it, or what a resumed run has left), then evaluates;
 * returns early, with t->stop_sig set, when the ranks agreed to stop. */
static hoop_status run_epoch(trainer *t, int64_t epoch, epoch_stats *e)
{
    int64_t first = epoch == t->start_epoch ? t->start_batch : 0;
    int64_t t0 = hoop__now_ns();
    memset(e, 0, sizeof *e);
    HOOP_CHECK(select_shard(t, epoch, first));
    if (t->device == HOOP_DEVICE_CPU)
        HOOP_CHECK(train_cpu(t, epoch, e, (size_t)first, t0));
    else
        HOOP_CHECK(train_cuda(t, epoch, e, (size_t)first, t0));
    if (t->stop_sig) return HOOP_OK;
    /* Out of batches: answer the steps of ranks that still have some (shards may differ). */
    HOOP_CHECK(train_dist_join(&t->dist, optimizer_step, t));
    HOOP_CHECK(finish_epoch(t, e, t->loss_sum, t->loss_samples));
    return evaluate(t, &e->test_loss, &e->test_acc);
}

/* Floating-point operations of one MLP step of batch b through the GEMMs: forward,
 * weight gradient, and input gradient for every layer but the first. 0 for the CNN. */
static double mlp_step_flops(const trainer *t, size_t b)
{
    double f = 0.0;
    int first = 1;
    if (t->o->model != TRAIN_MODEL_MLP) return 0.0;
    for (size_t i = 0; i < hoop_model_param_count(t->model); i++) {
        hoop_tensor *p = hoop_model_param(t->model, i);
        if (hoop_tensor_ndim(p) != 2) continue;
        double mac = (double)b * (double)hoop_tensor_count(p);
        f += 2.0 * mac * (first ? 2.0 : 3.0);
        first = 0;
    }
    return f;
}

/* Benchmark mode: bench_warmup untimed steps, then bench_steps timed ones; one JSON line.
 * Each step ends with the stop agreement, as in training, so the figure includes it; a
 * stop ends the benchmark without its line. */
static hoop_status run_bench(trainer *t)
{
    const train_opts *o = t->o;
    int64_t total = o->bench_warmup + o->bench_steps, t0 = 0, epoch = 0, samples = 0;
    float loss = 0.0f;
    size_t n;
    HOOP_CHECK(select_shard(t, 0, 0));
    /* On cuda the data stays on the device (the batch is uploaded once and every step
     * trains on it) and the loss is read back after the last step only, as a GPU
     * benchmark of the step itself asks; the cpu gathers a batch per step. */
    const int resident = t->device != HOOP_DEVICE_CPU;
    hoop_tensor *x = NULL;
    if (resident) { /* one batch in slot 0, full-sized when the shard has one */
        HOOP_CHECK(prefetch(t, 0));
        if (t->slot[0].n < (size_t)o->batch_size) {
            HOOP_CHECK(select_shard(t, ++epoch, 0));
            HOOP_CHECK(prefetch(t, 0));
        }
        n = t->slot[0].n;
    }
    for (int64_t s = 0; s < total; s++) {
        if (s == o->bench_warmup) {
            if (resident) HOOP_CHECK(hoop_device_sync(t->device));
            if (t->dist.ddp) hoop_ddp_reset_stats(t->dist.ddp); /* the timed steps' only */
            t0 = hoop__now_ns();
            t->agree_ns = 0;
        }
        if (resident) {
            HOOP_CHECK(cuda_step(t, 0, s + 1 == total));
        } else {
            HOOP_CHECK(next_batch(t, &x, &n));
            if (n < (size_t)o->batch_size) { /* keep every timed batch full-sized */
                hoop_tape_reset(t->tape);
                HOOP_CHECK(select_shard(t, ++epoch, 0));
                HOOP_CHECK(next_batch(t, &x, &n));
            }
            HOOP_CHECK(train_step(t, x, &loss));
        }
        if (s >= o->bench_warmup) samples += (int64_t)n;
        HOOP_CHECK(agree_stop(t, 1));
        if (!t->stop_sig) continue;
        if (t->dist.rank == 0)
            printf("hoop-train: stopped (%s) after %lld of %lld benchmark steps\n",
                   signal_name(t->stop_sig), (long long)s + 1, (long long)total);
        return HOOP_OK;
    }
    if (resident) { /* the last step's loss, waited for only now */
        HOOP_CHECK(drain(t));
        loss = *t->slot[0].loss;
    }
    double secs = (double)(hoop__now_ns() - t0) * 1e-9;
    double flops = mlp_step_flops(t, (size_t)o->batch_size);
    epoch_stats e = {.samples = (size_t)samples, .train_s = secs};
    HOOP_CHECK(finish_epoch(t, &e, 0.0, 0));
    if (t->dist.rank != 0) return HOOP_OK;
    printf(
        "{\"bench\":\"hoop_train\",\"model\":\"%s\",\"device\":\"%s\",\"resident\":%s,"
        "\"world_size\":%d,"
        "\"threads\":%d,\"batch_size\":%lld,\"steps\":%lld,\"seconds\":%.4f,\"samples_per_s\":%.1f,"
        "\"step_mflop\":%.3f,\"gflops_per_rank\":%.3f,\"allreduce_ms_per_step\":%.3f,"
        "\"hidden_share\":%.4f,\"stop_check_us_per_step\":%.2f,\"last_loss\":%.4f}\n",
        model_name(t), t->device == HOOP_DEVICE_CUDA ? "cuda" : "cpu", resident ? "true" : "false",
        t->dist.world_size, openblas_get_num_threads(), (long long)o->batch_size,
        (long long)o->bench_steps, secs, e.sps, flops * 1e-6,
        flops * (double)o->bench_steps / secs * 1e-9, e.comm_ms, e.hidden,
        (double)t->agree_ns * 1e-3 / (double)o->bench_steps, (double)loss);
    return HOOP_OK;
}

/* Between epochs: stop here when asked (the epoch's checkpoint is already written).
 * Returns 1 when training ends now. */
static int stop_between_epochs(trainer *t, int64_t epoch, hoop_status *st)
{
    const train_opts *o = t->o;
    if (o->exit_after_epoch > 0 && epoch + 1 >= o->exit_after_epoch) {
        if (t->dist.rank == 0)
            printf("hoop-train: stopping after epoch %lld (--exit-after-epoch)\n",
                   (long long)epoch + 1);
        return 1;
    }
    if (epoch + 1 >= o->epochs) return 1; /* done: nothing is left to preempt */
    *st = agree_stop(t, 0);
    if (*st != HOOP_OK || !t->stop_sig) return *st != HOOP_OK;
    if (t->dist.rank == 0) {
        printf("hoop-train: preempted (%s) after epoch %lld; ", signal_name(t->stop_sig),
               (long long)epoch + 1);
        if (o->checkpoint)
            printf("saved %s (step %lld)\n", o->checkpoint, (long long)t->step);
        else
            printf("no --checkpoint, nothing saved (step %lld)\n", (long long)t->step);
    }
    return 1;
}

static hoop_status run(trainer *t)
{
    const train_opts *o = t->o;
    hoop_status st = HOOP_OK;
    catch_stop_signals();
    if (o->bench_steps > 0) {
        HOOP_CHECK(run_bench(t));
        return t->dist.ddp ? hoop_ddp_trace_flush(t->dist.ddp) : HOOP_OK;
    }
    if (t->dist.rank == 0 && t->start_epoch < o->epochs) { /* else resumed, nothing to do */
        printf("hoop-train: %s, %zu parameters, %zu train / %zu test samples, %d worker(s) x "
               "batch %lld, %s lr %g, %lld epoch%s, %d OpenBLAS thread(s)\n",
               model_name(t), hoop_model_numel(t->model), t->ntrain, hoop_dataset_count(t->test),
               t->dist.world_size, (long long)o->batch_size,
               o->optimizer == TRAIN_OPT_SGD ? "sgd" : "adamw", (double)o->lr, (long long)o->epochs,
               o->epochs == 1 ? "" : "s", openblas_get_num_threads());
        fflush(stdout);
    }
    for (int64_t epoch = t->start_epoch; epoch < o->epochs; epoch++) {
        epoch_stats e;
        HOOP_CHECK(run_epoch(t, epoch, &e));
        if (t->stop_sig) break; /* saved and said by run_epoch */
        report_epoch(t, epoch, &e);
        HOOP_CHECK(save_checkpoint(t, epoch + 1, 0, 1));
        t->loss_sum = 0.0;
        t->loss_samples = 0;
        if (stop_between_epochs(t, epoch, &st)) break;
    }
    HOOP_CHECK(st);
    if (t->dist.ddp) HOOP_CHECK(hoop_ddp_trace_flush(t->dist.ddp));
    return HOOP_OK;
}

int main(int argc, char **argv)
{
    train_opts o;
    trainer t;
    hoop_status st = train_cli_parse(&o, argc, argv);
    if (st == HOOP_ERR_USAGE) return 0; /* --help, --version */
    if (st != HOOP_OK) {
        fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
        return 2;
    }
    if (o.threads > 0) openblas_set_num_threads((int)o.threads);
    st = trainer_init(&t, &o);
    if (st != HOOP_OK) {
        /* Rank 0 explains its own failures; the others only follow it out. */
        if (!t.dist.root_failed && !t.dist.reported)
            fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
        trainer_destroy(&t);
        return st == HOOP_ERR_INVALID || st == HOOP_ERR_MISMATCH || st == HOOP_ERR_UNSUPPORTED ? 2
                                                                                               : 1;
    }
    st = run(&t);
    if (st != HOOP_OK && !t.dist.root_failed && !t.dist.reported)
        fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
    int stop_sig = t.stop_sig;
    hoop_status dst = trainer_destroy(&t);
    if (st == HOOP_OK && dst != HOOP_OK) {
        fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
        st = dst;
    }
    if (st != HOOP_OK) return 1;
    return stop_sig ? 128 + stop_sig : 0; /* stopped by a signal, checkpoint saved */
}
