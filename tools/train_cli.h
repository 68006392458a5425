/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_cli.h -- hoop-train's command line: the options and their parser.
 *
 * Every flag is parsed strictly (whole string, range-checked); a bad one yields
 * HOOP_ERR_INVALID with a message naming the flag, which main turns into exit code 2.
 * Defaults depend on the model and optimizer (see train_cli_defaults) and are chosen to
 * reach the accuracy targets: MLP >= 88 %, CNN >= 90 % test accuracy on Fashion-MNIST.
 * Not thread-safe (used once, from main).
 */
#ifndef HOOP_TOOLS_TRAIN_CLI_H
#define HOOP_TOOLS_TRAIN_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "hoop/status.h"

typedef enum train_model { TRAIN_MODEL_MLP, TRAIN_MODEL_CNN } train_model;
typedef enum train_optimizer { TRAIN_OPT_SGD, TRAIN_OPT_ADAMW } train_optimizer;
typedef enum train_schedule { TRAIN_SCHED_COSINE, TRAIN_SCHED_CONSTANT } train_schedule;
/* --device: auto is resolved by hoop-train (cuda when hoop_device_check finds one). */
typedef enum train_device { TRAIN_DEVICE_CPU, TRAIN_DEVICE_CUDA, TRAIN_DEVICE_AUTO } train_device;

typedef struct train_opts {
    train_model model;
    train_optimizer optimizer;
    train_schedule schedule;
    train_device device;
    int64_t epochs, batch_size, eval_batch_size, seed, threads, warmup_steps;
    float lr, momentum, weight_decay, dropout;
    int nesterov, standardize; /* standardize: mean/std normalisation of pixels */
    int cuda_graph;            /* cuda: capture the step once and replay it (--cuda-graph) */
    const char *data, *metrics;
    int progress;      /* 1 bar, 0 plain lines, -1 auto (a bar when stderr is a terminal) */
    int64_t log_every; /* plain mode: a line every this many steps (0 = per epoch only) */
    int64_t bench_steps, bench_warmup;      /* bench_steps > 0: time steps, print JSON, exit */
    const char *checkpoint;                 /* save here (rank 0, atomically) after every epoch */
    int64_t checkpoint_every;               /* > 0: also every this many steps, mid-epoch */
    int64_t metrics_every;                  /* > 0: a --metrics line every this many steps */
    int resume;                             /* continue from --checkpoint when it exists */
    int64_t exit_after_epoch;               /* > 0: stop after this epoch (simulates a crash) */
    int64_t train_limit;                    /* > 0: use only the first N training samples */
    int64_t bucket_cap_kb, first_bucket_kb; /* DDP buckets; 0 = library defaults */
} train_opts;

/* Parses argv into o (defaults first). Returns HOOP_OK, HOOP_ERR_INVALID with a message
 * naming the bad flag, or HOOP_ERR_USAGE after printing --help to stdout (exit 0). */
hoop_status train_cli_parse(train_opts *o, int argc, char **argv);

/* Prints the usage text. */
void train_cli_usage(FILE *f);

/* Which settings must be equal. TRAIN_SAME_RANKS: across the ranks of one job (everything
 * that shapes the math, the data order or the collectives each rank calls; not what only
 * says where a rank reads or writes, or how it shows progress: --data, --metrics FILE,
 * --checkpoint PATH (only whether one is given), --progress, --log-every, --threads,
 * --cuda-graph). TRAIN_SAME_RESUME: between a checkpoint and the run resuming it
 * (everything that shapes the remaining steps' math; --epochs only under --schedule
 * cosine, whose learning rate depends on the total step count; not --device, since a
 * checkpoint crosses devices). */
#define TRAIN_SAME_RANKS 1
#define TRAIN_SAME_RESUME 2
#define TRAIN_SETTINGS_BYTES 1024 /* room for every setting's line, with a margin */

/* Writes o's settings of scope (TRAIN_SAME_*) into buf (len bytes, zero-filled first) as
 * lines "--flag value", in a fixed order, with defaults resolved and numbers in one
 * canonical form (a float as the shortest decimal that reads back as the same float), so
 * that equal settings give equal text. Returns HOOP_OK, or HOOP_ERR_INTERNAL when len is
 * too small. */
hoop_status train_cli_settings(const train_opts *o, int scope, char *buf, size_t len);

/* Two texts of train_cli_settings are compared with hoop__settings_diff (core/env.h). */

#endif /* HOOP_TOOLS_TRAIN_CLI_H */
