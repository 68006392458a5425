/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_cli.c -- parsing of hoop-train's flags.
 *
 * Flags take "--name value" or "--name=value". Numbers go through the strict parsers of
 * src/core/env.c (integers, and decimals through parse_float below); choices are matched
 * exactly.
 * Learning rate and weight decay default per optimizer when not given (NaN = unset).
 * Owns nothing; not thread-safe (called once from main).
 */
#include "train_cli.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/env.h"
#include "hoop/version.h"

#define FLAG_MAX 64

static const char usage_text[] =
    "Usage: hoop-train [options]\n"
    "\n"
    "Trains an MLP (784-512-256-10, ReLU) or a small CNN on Fashion-MNIST (IDX files).\n"
    "\n"
    "  --model mlp|cnn          architecture (mlp)\n"
    "  --epochs N               passes over the training set (mlp 10, cnn 5)\n"
    "  --batch-size B           samples per step (128)\n"
    "  --optimizer sgd|adamw    optimizer (sgd)\n"
    "  --lr X                   peak learning rate (sgd 0.05, adamw 0.001)\n"
    "  --momentum M             SGD momentum (0.9); not with adamw, whose betas\n"
    "                           (0.9, 0.999) are fixed\n"
    "  --nesterov               Nesterov momentum (SGD)\n"
    "  --weight-decay W         L2 (sgd, 0) or decoupled (adamw, 0.01) weight decay\n"
    "  --schedule cosine|constant  learning-rate schedule over all steps (cosine)\n"
    "  --warmup-steps N         linear warm-up steps before the schedule (0)\n"
    "  --dropout P              dropout after the CNN's hidden layer (0)\n"
    "  --normalize standard|unit  pixels as (x-mean)/std with Fashion-MNIST's mean and\n"
    "                           std (standard, the default), or in [0,1] (unit)\n"
    "  --seed S                 seed for initialisation, shuffling and dropout (1)\n"
    "  --data DIR               directory of the IDX files\n"
    "                           (/usr/share/datasets/fashion-mnist)\n"
    "  --device cpu|cuda|auto   where to train (cpu, for now); cuda: the GPU (under hooprun\n"
    "                           each worker takes LOCAL_RANK modulo the GPUs, and DDP reduces\n"
    "                           the gradients on the device); auto: cuda when a GPU and\n"
    "                           hoop's CUDA backend can be had, else cpu, saying why.\n"
    "                           HOOP_CUDA_BACKEND names the backend's file\n"
    "  --cuda-graph on|off      cuda: after a warm-up step, capture the whole step (forward,\n"
    "                           backward, optimizer) as a CUDA graph and replay it (on);\n"
    "                           where capture fails, say so once and run eagerly\n"
    "  --threads T              OpenBLAS threads (0 = OpenBLAS's default / "
    "OPENBLAS_NUM_THREADS)\n"
    "  --metrics FILE           append one JSON line per epoch to FILE\n"
    "  --metrics-every N        also one line every N steps (mean loss since the last)\n"
    "  --progress auto|bar|plain  progress display (auto: a bar on a terminal)\n"
    "  --log-every N            plain mode: a line every N steps (100; 0 = per epoch)\n"
    "  --eval-batch-size B      batch size for evaluation (1000)\n"
    "  --bench-steps N          benchmark: time N training steps, print JSON, exit\n"
    "                           (not with --checkpoint, --metrics, --exit-after-epoch)\n"
    "  --bench-warmup N         untimed steps before a benchmark (20)\n"
    "  --checkpoint PATH        save parameters and optimizer state after every epoch\n"
    "                           (rank 0, atomically: temporary file + rename)\n"
    "  --checkpoint-every N     also save every N steps, mid-epoch\n"
    "  --resume                 continue from --checkpoint if it exists, at the epoch and\n"
    "                           step it holds (mid-epoch too), as the same run: a flag that\n"
    "                           shapes the math (model, optimizer and its settings, schedule,\n"
    "                           warm-up, seed, train limit, dropout, normalize, and the\n"
    "                           global batch: workers x batch size, so 2 x 128 may resume\n"
    "                           as 1 x 256) must be as it was written with, or exit 2 says which;\n"
    "                           --epochs may change with --schedule constant only (cosine\n"
    "                           spreads its decay over all the steps)\n"
    "  --exit-after-epoch K     stop after epoch K as if interrupted (for tests)\n"
    "  --train-limit N          train on the first N samples only (quick runs, tests)\n"
    "  --bucket-cap-kb N        DDP bucket size cap in KiB (25600)\n"
    "  --first-bucket-kb N      DDP first bucket cap in KiB (512: the MLP's last two layers\n"
    "                           are reduced while the first layer's backward runs)\n"
    "  -h, --help               print this text and exit\n"
    "  --version                print hoop-train's version and exit\n"
    "\n"
    "Distributed: start under hooprun (hooprun --nproc-per-node P hoop-train ...); each\n"
    "worker trains on its DistributedSampler shard with batch B, gradients are averaged\n"
    "by DDP, and rank 0 alone prints, writes metrics and checkpoints. Every rank must get\n"
    "the same flags (else all exit 2, naming one that differs), except --data, --metrics,\n"
    "--progress, --log-every, --threads, --cuda-graph and --checkpoint's path (only\n"
    "whether one is given must agree). --data's path may differ, not what it holds: the\n"
    "ranks compare their sample counts and crc32s (else all exit 2, naming the rank;\n"
    "a rank whose copy does not load is named too).\n"
    "\n"
    "SIGINT, SIGTERM, SIGUSR1 (Slurm's --signal): every rank finishes the current step;\n"
    "with --checkpoint rank 0 saves it with the position in the epoch and prints\n"
    "  hoop-train: preempted (SIGUSR1) at epoch 1 step 216/469; saved PATH (step 216)\n"
    "(\"after epoch E\" between epochs); without --checkpoint the line ends \"no\n"
    "--checkpoint, nothing saved (step S)\". All exit with 128 + the signal (130, 143,\n"
    "138); --resume continues from the checkpoint exactly. A second SIGINT stops at once.\n"
    "Before training starts SIGINT and SIGTERM end a rank at once; SIGUSR1 is kept and\n"
    "stops every rank after its first steps.\n"
    "\n"
    "Exit status: 0 success, 2 bad flags, data or environment (a rank that rank 0's\n"
    "store refused: WORLD_SIZE or HOOP_TOKEN differ), 1 other failures, 128+N stopped\n"
    "by signal N (the checkpoint saved when --checkpoint was given).\n";

void train_cli_usage(FILE *f)
{
    fputs(usage_text, f);
}

static void defaults(train_opts *o)
{
    *o = (train_opts){
        .model = TRAIN_MODEL_MLP,
        .optimizer = TRAIN_OPT_SGD,
        .schedule = TRAIN_SCHED_COSINE,
        .epochs = -1,
        .batch_size = 128,
        .eval_batch_size = 1000,
        .seed = 1,
        .threads = 0,
        .lr = NAN,
        .momentum = NAN, /* 0.9 when not given; given with adamw: refused */
        .weight_decay = NAN,
        .data = "/usr/share/datasets/fashion-mnist",
        .device = TRAIN_DEVICE_CPU,
        .cuda_graph = 1,
        .standardize = 1,
        .first_bucket_kb = 512,
        .progress = -1,
        .log_every = 100,
        .bench_warmup = 20,
    };
}

/* Strict float: the shared decimal parser's rules (whole string, no white space, finite,
 * in [min, max]), and a value that is not 0 must not round to 0 as a float. */
static hoop_status parse_float(const char *flag, const char *s, double min, double max, float *out)
{
    double v;
    HOOP_CHECK(hoop__parse_decimal(flag, s, min, max, &v));
    if (v != 0.0 && (float)v == 0.0f)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s=%s is too small: it would be 0 as a float (the smallest is %g)", flag,
                          s, (double)FLT_TRUE_MIN);
    *out = (float)v;
    return HOOP_OK;
}

/* A file or directory name: anything but empty (an empty --checkpoint would only fail at
 * the first save, after a whole epoch of work). */
static hoop_status parse_path(const char *flag, const char *s, const char **out)
{
    if (*s == '\0') return HOOP_ERROR(HOOP_ERR_INVALID, "%s is empty; give a path", flag);
    /* "--checkpoint --resume" (the path forgotten) would make a file named --resume */
    if (*s == '-')
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s '%s' looks like a flag, not a path (the path forgotten?); a file "
                          "whose name starts with '-' is given as ./%s",
                          flag, s, s);
    *out = s;
    return HOOP_OK;
}

/* Index of s in the NULL-terminated list, or an error naming flag and the choices. */
static hoop_status parse_choice(const char *flag, const char *s, const char *const *choices,
                                int *out)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(s, choices[i]) == 0) {
            *out = i;
            return HOOP_OK;
        }
    char list[128] = "";
    for (int i = 0; choices[i]; i++) {
        strncat(list, i ? "|" : "", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
    }
    return HOOP_ERROR(HOOP_ERR_INVALID, "%s='%s' is not one of %s", flag, s, list);
}

/* Applies one flag with value v (NULL for switches). */
static hoop_status apply_flag(train_opts *o, const char *f, const char *v)
{
    static const char *const models[] = {"mlp", "cnn", NULL};
    static const char *const opts[] = {"sgd", "adamw", NULL};
    static const char *const scheds[] = {"cosine", "constant", NULL};
    static const char *const norms[] = {"unit", "standard", NULL};
    static const char *const progress[] = {"plain", "bar", "auto", NULL};
    static const char *const devices[] = {"cpu", "cuda", "auto", NULL};
    static const char *const on_off[] = {"off", "on", NULL};
    int c;
    if (!strcmp(f, "--model")) {
        HOOP_CHECK(parse_choice(f, v, models, &c));
        o->model = (train_model)c;
    } else if (!strcmp(f, "--optimizer")) {
        HOOP_CHECK(parse_choice(f, v, opts, &c));
        o->optimizer = (train_optimizer)c;
    } else if (!strcmp(f, "--schedule")) {
        HOOP_CHECK(parse_choice(f, v, scheds, &c));
        o->schedule = (train_schedule)c;
    } else if (!strcmp(f, "--normalize")) {
        HOOP_CHECK(parse_choice(f, v, norms, &o->standardize));
    } else if (!strcmp(f, "--progress")) {
        HOOP_CHECK(parse_choice(f, v, progress, &c));
        o->progress = c == 2 ? -1 : c;
    } else if (!strcmp(f, "--epochs")) {
        return hoop__parse_int(f, v, 1, 100000, &o->epochs);
    } else if (!strcmp(f, "--batch-size")) {
        return hoop__parse_int(f, v, 1, 1 << 16, &o->batch_size);
    } else if (!strcmp(f, "--eval-batch-size")) {
        return hoop__parse_int(f, v, 1, 1 << 16, &o->eval_batch_size);
    } else if (!strcmp(f, "--seed")) {
        return hoop__parse_int(f, v, 0, INT64_MAX, &o->seed);
    } else if (!strcmp(f, "--threads")) {
        return hoop__parse_int(f, v, 0, 1024, &o->threads);
    } else if (!strcmp(f, "--warmup-steps")) {
        return hoop__parse_int(f, v, 0, INT32_MAX, &o->warmup_steps);
    } else if (!strcmp(f, "--log-every")) {
        return hoop__parse_int(f, v, 0, INT32_MAX, &o->log_every);
    } else if (!strcmp(f, "--bench-steps")) {
        return hoop__parse_int(f, v, 1, INT32_MAX, &o->bench_steps);
    } else if (!strcmp(f, "--bench-warmup")) {
        return hoop__parse_int(f, v, 0, INT32_MAX, &o->bench_warmup);
    } else if (!strcmp(f, "--exit-after-epoch")) {
        return hoop__parse_int(f, v, 1, 100000, &o->exit_after_epoch);
    } else if (!strcmp(f, "--train-limit")) {
        return hoop__parse_int(f, v, 1, INT64_MAX, &o->train_limit);
    } else if (!strcmp(f, "--bucket-cap-kb")) {
        return hoop__parse_int(f, v, 1, 1 << 22, &o->bucket_cap_kb);
    } else if (!strcmp(f, "--first-bucket-kb")) {
        return hoop__parse_int(f, v, 1, 1 << 22, &o->first_bucket_kb);
    } else if (!strcmp(f, "--checkpoint-every")) {
        return hoop__parse_int(f, v, 1, INT64_MAX, &o->checkpoint_every);
    } else if (!strcmp(f, "--metrics-every")) {
        return hoop__parse_int(f, v, 1, INT64_MAX, &o->metrics_every);
    } else if (!strcmp(f, "--checkpoint")) {
        HOOP_CHECK(parse_path(f, v, &o->checkpoint));
    } else if (!strcmp(f, "--lr")) {
        return parse_float(f, v, 0.0, 100.0, &o->lr);
    } else if (!strcmp(f, "--momentum")) {
        return parse_float(f, v, 0.0, 1.0, &o->momentum);
    } else if (!strcmp(f, "--weight-decay")) {
        return parse_float(f, v, 0.0, 10.0, &o->weight_decay);
    } else if (!strcmp(f, "--dropout")) {
        return parse_float(f, v, 0.0, 0.99, &o->dropout);
    } else if (!strcmp(f, "--data")) {
        HOOP_CHECK(parse_path(f, v, &o->data));
    } else if (!strcmp(f, "--device")) {
        HOOP_CHECK(parse_choice(f, v, devices, &c));
        o->device = (train_device)c;
    } else if (!strcmp(f, "--cuda-graph")) {
        HOOP_CHECK(parse_choice(f, v, on_off, &c));
        o->cuda_graph = c;
    } else if (!strcmp(f, "--metrics")) {
        HOOP_CHECK(parse_path(f, v, &o->metrics));
    } else {
        return HOOP_ERROR(HOOP_ERR_INVALID, "unknown option '%s' (see --help)", f);
    }
    return HOOP_OK;
}

/* Fills what the user left unset and checks combinations. */
static hoop_status finish(train_opts *o)
{
    if (o->epochs < 0) o->epochs = o->model == TRAIN_MODEL_MLP ? 10 : 5;
    if (isnan(o->lr)) o->lr = o->optimizer == TRAIN_OPT_SGD ? 0.05f : 0.001f;
    if (isnan(o->weight_decay)) o->weight_decay = o->optimizer == TRAIN_OPT_SGD ? 0.0f : 0.01f;
    /* AdamW's momentum is its betas: a --momentum would be silently unused. */
    if (o->optimizer != TRAIN_OPT_SGD && !isnan(o->momentum))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--momentum applies to --optimizer sgd only; AdamW's momentum is its "
                          "betas (0.9, 0.999: PyTorch's defaults, which hoop-train has no flag "
                          "to change): drop --momentum, or use --optimizer sgd");
    if (isnan(o->momentum)) o->momentum = 0.9f;
    if (o->nesterov && (o->optimizer != TRAIN_OPT_SGD || o->momentum == 0.0f))
        return HOOP_ERROR(HOOP_ERR_INVALID, "--nesterov needs --optimizer sgd and --momentum > 0");
    if (o->resume && !o->checkpoint)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--resume needs --checkpoint PATH");
    if (o->checkpoint_every && !o->checkpoint)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--checkpoint-every needs --checkpoint PATH");
    if (o->metrics_every && !o->metrics)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--metrics-every needs --metrics FILE");
    if (o->dropout > 0.0f && o->model != TRAIN_MODEL_CNN)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--dropout applies to --model cnn only");
    /* A benchmark times steps and prints one JSON line: these were silently unused. */
    const char *unused = o->checkpoint             ? "--checkpoint"
                         : o->metrics              ? "--metrics"
                         : o->exit_after_epoch > 0 ? "--exit-after-epoch"
                                                   : NULL;
    if (o->bench_steps > 0 && unused)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "%s does not apply to --bench-steps (a benchmark saves, logs and "
                          "stops nothing: it times steps and prints one JSON line)",
                          unused);
    return HOOP_OK;
}

/* Flags that take a value, for telling "unknown" from "needs a value". */
static const char *const valued_flags[] = {"--model",
                                           "--optimizer",
                                           "--schedule",
                                           "--normalize",
                                           "--progress",
                                           "--epochs",
                                           "--batch-size",
                                           "--eval-batch-size",
                                           "--seed",
                                           "--threads",
                                           "--warmup-steps",
                                           "--log-every",
                                           "--bench-steps",
                                           "--bench-warmup",
                                           "--lr",
                                           "--momentum",
                                           "--weight-decay",
                                           "--dropout",
                                           "--data",
                                           "--device",
                                           "--cuda-graph",
                                           "--metrics",
                                           "--checkpoint",
                                           "--exit-after-epoch",
                                           "--train-limit",
                                           "--bucket-cap-kb",
                                           "--first-bucket-kb",
                                           "--checkpoint-every",
                                           "--metrics-every",
                                           NULL};

static int is_valued(const char *f)
{
    for (int i = 0; valued_flags[i]; i++)
        if (!strcmp(f, valued_flags[i])) return 1;
    return 0;
}

/* Switches: flags that take no value. */
static int is_switch(const char *f)
{
    return !strcmp(f, "--nesterov") || !strcmp(f, "--resume") || !strcmp(f, "--help") ||
           !strcmp(f, "--version");
}

hoop_status train_cli_parse(train_opts *o, int argc, char **argv)
{
    defaults(o);
    for (int i = 1; i < argc; i++) {
        char flag[FLAG_MAX];
        const char *a = argv[i], *eq = strchr(a, '='), *v;
        if (!strcmp(a, "-h")) a = "--help"; /* the one short option, as users expect */
        if (strncmp(a, "--", 2) != 0)
            return HOOP_ERROR(HOOP_ERR_INVALID, "unexpected argument '%s' (see --help)", a);
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= FLAG_MAX) return HOOP_ERROR(HOOP_ERR_INVALID, "unknown option '%s'", a);
        memcpy(flag, a, len);
        flag[len] = '\0';
        if (is_switch(flag)) {
            if (eq) return HOOP_ERROR(HOOP_ERR_INVALID, "%s takes no value ('%s')", flag, a);
            if (!strcmp(flag, "--help")) {
                train_cli_usage(stdout);
                return HOOP_ERR_USAGE;
            }
            if (!strcmp(flag, "--version")) {
                printf("hoop-train (hoop) %s\n", hoop_version_string());
                return HOOP_ERR_USAGE;
            }
            if (!strcmp(flag, "--resume"))
                o->resume = 1;
            else
                o->nesterov = 1;
            continue;
        }
        if (!is_valued(flag))
            return HOOP_ERROR(HOOP_ERR_INVALID, "unknown option '%s' (see --help)", flag);
        v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) return HOOP_ERROR(HOOP_ERR_INVALID, "%s needs a value", flag);
        HOOP_CHECK(apply_flag(o, flag, v));
    }
    return finish(o);
}

// ----- settings that must be equal -------------------------------------------------------

/* The text being written by train_cli_settings. */
typedef struct settings_out {
    char *buf;
    size_t len, pos;
    int scope, full;
} settings_out;

/* Appends "flag value\n" when the setting's scopes (TRAIN_SAME_*) include the text's. */
static void put(settings_out *s, int scopes, const char *flag, const char *fmt, ...)
{
    va_list ap;
    if (!(scopes & s->scope)) return;
    va_start(ap, fmt);
    if (hoop__settings_vput(s->buf, s->len, &s->pos, flag, fmt, ap) != 0) s->full = 1;
    va_end(ap);
}

/* The shortest %g text that reads back as v (0.1f gives "0.1", not "0.100000001"). */
static const char *float_text(float v, char *out, size_t len)
{
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(out, len, "%.*g", digits, (double)v);
        if (strtof(out, NULL) == v) break;
    }
    return out;
}

/* A count whose 0 means "not asked for": "(none)" then. */
static const char *count_text(int64_t v, char *out, size_t len)
{
    if (v == 0) return "(none)";
    snprintf(out, len, "%lld", (long long)v);
    return out;
}

hoop_status train_cli_settings(const train_opts *o, int scope, char *buf, size_t len)
{
    static const char *const models[] = {"mlp", "cnn"}, *const optims[] = {"sgd", "adamw"};
    static const char *const scheds[] = {"cosine", "constant"};
    static const char *const devices[] = {"cpu", "cuda", "auto"};
    const int both = TRAIN_SAME_RANKS | TRAIN_SAME_RESUME, ranks = TRAIN_SAME_RANKS;
    const int sgd = o->optimizer == TRAIN_OPT_SGD;
    settings_out s = {.buf = buf, .len = len, .scope = scope};
    char f[32];
    memset(buf, 0, len);
    put(&s, both, "--model", "%s", models[o->model]);
    put(&s, both, "--optimizer", "%s", optims[o->optimizer]);
    put(&s, both, "--lr", "%s", float_text(o->lr, f, sizeof f));
    if (sgd) put(&s, both, "--momentum", "%s", float_text(o->momentum, f, sizeof f));
    if (sgd) put(&s, both, "--nesterov", "%s", o->nesterov ? "on" : "off");
    put(&s, both, "--weight-decay", "%s", float_text(o->weight_decay, f, sizeof f));
    put(&s, both, "--schedule", "%s", scheds[o->schedule]);
    put(&s, both, "--warmup-steps", "%lld", (long long)o->warmup_steps);
    /* A constant schedule's learning rate does not depend on the total steps: such a run
     * may be resumed with more (or fewer) epochs. */
    put(&s, o->schedule == TRAIN_SCHED_COSINE ? both : ranks, "--epochs", "%lld",
        (long long)o->epochs);
    /* A resume checks the global batch (world_size x --batch-size) instead: the same one
     * on another number of ranks is the same run (train_dist.c, check_identity). */
    put(&s, ranks, "--batch-size", "%lld", (long long)o->batch_size);
    put(&s, both, "--seed", "%lld", (long long)o->seed);
    put(&s, both, "--dropout", "%s", float_text(o->dropout, f, sizeof f));
    put(&s, both, "--normalize", "%s", o->standardize ? "standard" : "unit");
    /* --train-limit: a resume checks the samples it amounts to (train_dist.c). */
    put(&s, ranks, "--train-limit", "%s", count_text(o->train_limit, f, sizeof f));
    put(&s, ranks, "--eval-batch-size", "%lld", (long long)o->eval_batch_size);
    put(&s, ranks, "--device", "%s", devices[o->device]);
    put(&s, ranks, "--checkpoint", "%s", o->checkpoint ? "(a path)" : "(none)");
    put(&s, ranks, "--checkpoint-every", "%s", count_text(o->checkpoint_every, f, sizeof f));
    put(&s, ranks, "--resume", "%s", o->resume ? "on" : "off");
    put(&s, ranks, "--exit-after-epoch", "%s", count_text(o->exit_after_epoch, f, sizeof f));
    put(&s, ranks, "--metrics-every", "%s", count_text(o->metrics_every, f, sizeof f));
    put(&s, ranks, "--bench-steps", "%s", count_text(o->bench_steps, f, sizeof f));
    put(&s, ranks, "--bench-warmup", "%lld", (long long)o->bench_warmup);
    put(&s, ranks, "--bucket-cap-kb", "%lld", /* unset: DDP's default, as --help says */
        (long long)(o->bucket_cap_kb ? o->bucket_cap_kb : 25600));
    put(&s, ranks, "--first-bucket-kb", "%lld", (long long)o->first_bucket_kb);
    if (s.full)
        return HOOP_ERROR(HOOP_ERR_INTERNAL, "%s:%d: the settings need more than %zu bytes",
                          __FILE__, __LINE__, len);
    return HOOP_OK;
}
