/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_dist.h -- hoop-train's distributed side: communicator, DDP, sampler shards,
 * global sums, the ranks' agreement on flags and data, and checkpoints shared from rank 0.
 *
 * Without WORLD_SIZE in the environment hoop-train is one process: no communicator, and
 * every call here degrades to its local meaning (sums are identities, rank 0 of 1).
 * Not thread-safe: used by hoop-train's main thread only.
 */
#ifndef HOOP_TOOLS_TRAIN_DIST_H
#define HOOP_TOOLS_TRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "train_cli.h"

#include "hoop/comm.h"
#include "hoop/ddp.h"
#include "hoop/optim.h"
#include "hoop/sampler.h"

typedef struct train_dist {
    hoop_comm *comm; /* NULL: single process */
    hoop_ddp *ddp;   /* NULL until train_dist_wrap, and when single */
    hoop_sampler *sampler;
    hoop_sampler *eval_sampler; /* the test set's exact split, built at the first evaluation */
    int64_t *shard;             /* this rank's indices for the epoch, int64 for the loader */
    int rank, world_size;
    hoop_request *agree_req; /* the stop agreement in flight (train_dist_agree) */
    int32_t agree_sig;       /* its buffer */
    int root_failed; /* rank 0 reported a failure (it explains): set on the ranks that follow it
                      * out silently, all but rank 0 and each other node's first */
    int reported;    /* rank 0 already printed its failure (before telling the others) */
} train_dist;

/* What a checkpoint carries besides parameters and optimizer state: where training
 * stands and what it needs to continue exactly. Files written before mid-epoch
 * checkpoints end after batch_size (TRAIN_CKPT_EXTRA_V1_BYTES); they read as epoch
 * boundaries of an unknown model. Files written before the settings were recorded end
 * after loss_sum (TRAIN_CKPT_EXTRA_V2_BYTES); their settings read as "" (unchecked). */
#define TRAIN_CKPT_SETTINGS_BYTES 512

typedef struct train_ckpt_extra {
    uint64_t magic; /* TRAIN_CKPT_MAGIC */
    int64_t epochs_done, step;
    int64_t seed, world_size, batch_size;
    int64_t batches_done; /* batches of epoch epochs_done already trained (0: a boundary) */
    int64_t ntrain;       /* training samples the sampler shuffles (--train-limit) */
    int64_t model;        /* TRAIN_CKPT_MODEL_*; 0 = not recorded (older files) */
    int64_t loss_samples; /* samples of those batches, summed over ranks */
    double loss_sum;      /* their loss x samples, summed over ranks (for the epoch's mean) */
    /* train_cli_settings(TRAIN_SAME_RESUME) of the run that wrote it, NUL-terminated */
    char settings[TRAIN_CKPT_SETTINGS_BYTES];
} train_ckpt_extra;

#define TRAIN_CKPT_MAGIC 0x6e69617274706f68ULL /* "hooptrain" */
#define TRAIN_CKPT_EXTRA_V1_BYTES (6 * sizeof(int64_t))
#define TRAIN_CKPT_EXTRA_V2_BYTES offsetof(train_ckpt_extra, settings)
#define TRAIN_CKPT_MODEL_MLP 1
#define TRAIN_CKPT_MODEL_CNN 2

/* "mlp", "cnn" or "unknown" for a TRAIN_CKPT_MODEL_* value. */
const char *train_ckpt_model_name(int64_t model);

/* Joins the job described by the env:// contract when WORLD_SIZE is set. */
hoop_status train_dist_init(train_dist *d);
hoop_status train_dist_destroy(train_dist *d);

/* Every rank's settings (text: TRAIN_SETTINGS_BYTES of train_cli_settings with
 * TRAIN_SAME_RANKS) are gathered and compared with rank 0's (a collective when
 * distributed; nothing when single). A difference is HOOP_ERR_INVALID on every rank, the
 * same message everywhere: "ranks disagree on --lr: rank 0 has 0.1, rank 1 has 0.5 (every
 * rank must get the same flags)", naming the lowest rank that differs and the first flag in
 * the text's order; rank 0 prints it, and the first rank of each other node (the others
 * are marked root_failed). */
hoop_status train_dist_same_settings(train_dist *d, const char *text);

/* What a rank loaded from --data, compared across the ranks by train_dist_same_data. */
#define TRAIN_DATA_PATH_BYTES 256 /* two fit in one message (HOOP_ERRMSG_MAX) */
typedef struct train_data_id {
    int64_t count[2];   /* samples: [0] the training set, [1] the test set */
    int64_t rows, cols; /* image size in pixels, both sets */
    uint32_t crc[2];    /* zlib crc32 of a set's pixels, then its labels, as in the files */
    char path[TRAIN_DATA_PATH_BYTES]; /* --data as given, NUL-terminated (cut if longer) */
    int32_t code;                     /* HOOP_OK, or why this rank could not load it: */
    char why[TRAIN_DATA_PATH_BYTES];  /* the loader's message (cut if longer) */
} train_data_id;

/* Every rank's id (mine) is gathered and compared with rank 0's (a collective when
 * distributed; nothing when single): ranks given other data would run other numbers of
 * steps per epoch, or train one model on several datasets, and fail much later at a
 * collective naming no file. A difference is HOOP_ERR_INVALID on every rank, the same
 * message everywhere, naming the lowest rank that differs, its path and what it loaded
 * against rank 0's: "rank 1's --data /x has 59000 training samples (crc32 1a2b3c4d);
 * rank 0's /y has 60000 (crc32 5e6f7a8b) (every rank must load the same data)", or their
 * image sizes; or, for a rank that could not load its --data (code set), rank 0 names
 * it with the loader's message and status: "rank 1 could not load its --data: /x: ..."
 * (the ranks other than 0 load after rank 0 did, so theirs is the failure only they
 * see). Rank 0 prints it, and the first rank of each other node (the others are marked
 * root_failed). */
hoop_status train_dist_same_data(train_dist *d, const train_data_id *mine);

/* Rank 0 shares its status st with everyone (a collective when distributed): returns st
 * on rank 0 and, on the others, HOOP_OK or rank 0's status. A failing rank 0 prints its
 * message first, so it is on the terminal before any other worker exits and the
 * launcher stops the job. */
hoop_status train_dist_root_status(train_dist *d, hoop_status st);

/* Builds the sampler over n samples (shuffled from seed). */
hoop_status train_dist_sampler(train_dist *d, size_t n, uint64_t seed);

/* This rank's shard for epoch: *idx (count entries) valid until the next call. */
hoop_status train_dist_shard(train_dist *d, uint64_t epoch, const int64_t **idx, size_t *count);

/* This rank's share of an n-sample evaluation set: every sample on exactly one rank, in
 * order (hoop_sampler's exact_split); *idx (count entries) lives as long as d. */
hoop_status train_dist_eval_shard(train_dist *d, size_t n, const size_t **idx, size_t *count);

/* After this rank's last batch of an epoch: answers the others' gradient all-reduces,
 * running step(user) after each, until every rank has run out (hoop_ddp_join). */
hoop_status train_dist_join(train_dist *d, hoop_ddp_step_fn step, void *user);

/* Wraps the parameters in DDP (rank 0's values are broadcast). */
hoop_status train_dist_wrap(train_dist *d, hoop_tensor *const *params, size_t count,
                            int64_t bucket_cap_kb, int64_t first_bucket_kb);

/* In-place global sum of n doubles (identity when single). */
hoop_status train_dist_sum(train_dist *d, double *v, size_t n);

/* Stop agreement: *sig (this rank's stop signal, 0 = none) becomes the maximum over the
 * ranks, so every rank sees the same value whichever ranks a signal reached (identity when
 * single). pipelined (once per step): the all-reduce posted by the previous call is
 * collected and a new one is posted without waiting for it, so the step never waits for
 * it and *sig is the agreement of one call ago (0 on the first call); a stop found there
 * posts nothing new. Otherwise (between epochs) the pending one is collected and, unless
 * it says stop, a fresh one is run to completion. Every rank must make the same calls. */
hoop_status train_dist_agree(train_dist *d, int32_t *sig, int pipelined);

/* Loads the checkpoint at path on every rank from rank 0's copy of the file: rank 0
 * inspects it first and refuses, with a message naming the difference (HOOP_ERR_INVALID),
 * a file of another model (want->model; numel = this model's parameters), world_size,
 * batch size or seed, another number of training samples, or other settings (want->
 * settings: the first flag whose value differs, both values); then it loads, validates and
 * broadcasts the bytes, so other nodes need no shared filesystem (they load from an unlinked
 * private copy). *found = 0 (and nothing loaded) when rank 0 has no file there; an empty or damaged
 * file is an error. */
hoop_status train_dist_load(train_dist *d, const char *path, hoop_tensor *const *params,
                            size_t count, hoop_optim *opt, const train_ckpt_extra *want,
                            size_t numel, train_ckpt_extra *extra, int *found);

#endif /* HOOP_TOOLS_TRAIN_DIST_H */
