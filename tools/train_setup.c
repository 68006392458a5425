/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_setup.c -- hoop-train's set-up and tear-down: the job joined, the flags
 * agreed, the device picked, the output paths checked, then the data, model, loader,
 * sampler, optimizer, checkpoint and DDP in that order (trainer_init), and everything
 * freed again (trainer_destroy).
 *
 * On cuda the model is built on the host as on the cpu (so both start from the same
 * weights) and moved to the GPU before the optimizer and any checkpoint exist; the
 * double-buffered slots (tools/train_step.c) are made here. Under hooprun on cuda every
 * worker takes its GPU (several may share one). Not thread-safe: hoop-train's main thread
 * only.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/check.h"
#include "data/idx.h"
#include "ddp/ddp_internal.h"
#include "train.h"

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
    if (o->warmup_steps > t->sched.total_steps && o->bench_steps == 0 && t->dist.rank == 0)
        printf("hoop-train: warning: --warmup-steps %lld is more than the run's %lld steps "
               "(%lld epoch%s of %lld): the learning rate never reaches --lr %g\n",
               (long long)o->warmup_steps, (long long)t->sched.total_steps, (long long)o->epochs,
               o->epochs == 1 ? "" : "s", (long long)per_epoch, (double)o->lr);
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
        return errno == ENOENT
                   ? HOOP_ERROR(HOOP_ERR_INVALID, "%s '%s': directory '%s' does not exist", what,
                                path, dir)
                   : HOOP_ERROR(HOOP_ERR_INVALID, "%s '%s': directory '%s' is not writable: %s",
                                what, path, dir, hoop__strerror(errno));
    return HOOP_OK;
}

/* --checkpoint and HOOP_TRACE_FILE (label), files replaced whole: can they be written?
 * Makes and removes the temporary file a write makes (access() passes for root where no
 * file can be made, in /proc for one), so that a path the write would fail on fails now,
 * not after an epoch of work. HOOP_ERR_INVALID with the write's message. */
static hoop_status check_replaced_output(const char *label, const char *path)
{
    char why[1024];
    HOOP_CHECK(check_output_dir(label, path));
    hoop_status st = hoop__atomic_probe(label, path);
    if (st == HOOP_OK) return HOOP_OK;
    snprintf(why, sizeof why, "%s", hoop_last_error()); /* "--checkpoint: cannot create ..." */
    return HOOP_ERROR(HOOP_ERR_INVALID, "%s%s", why,
                      st == HOOP_ERR_INVALID ? "" : " (writing it would fail there)");
}

/* A --metrics file whose last record was cut off (a run killed while writing it) gets a
 * newline first, so that this run's records start on lines of their own. A file that
 * holds something else is refused (HOOP_ERR_INVALID): one whose first line is not a
 * one-line JSON object ('{' ... '}'), such as a checkpoint given by mistake, or
 * hoop-bench's -J JSON (a '{' alone on its first line), which the appended lines made
 * unreadable. A first line without its newline (the first record cut off, or longer
 * than FIRST_MAX) needs only its '{'. */
static hoop_status end_line(FILE *f, const char *path)
{
    enum { FIRST_MAX = 65536 };
    char last = '\n';
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) return HOOP_OK;
    char *head = malloc(FIRST_MAX);
    if (!head) return HOOP_ERROR(HOOP_ERR_NOMEM, "--metrics: out of memory");
    ssize_t n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) n = pread(fd, head, FIRST_MAX, 0);
    if (fd >= 0 && pread(fd, &last, 1, sb.st_size - 1) != 1) last = '\n';
    if (fd >= 0) close(fd);
    int bad = 0;
    if (n > 0) {
        char *nl = memchr(head, '\n', (size_t)n);
        size_t len = nl ? (size_t)(nl - head) : (size_t)n;
        while (len > 0 && (head[len - 1] == ' ' || head[len - 1] == '\r' || head[len - 1] == '\t'))
            len--;
        /* without its newline: the one record, cut off, or longer than FIRST_MAX */
        bad = head[0] != '{' || (nl && (len < 2 || head[len - 1] != '}'));
    }
    unsigned char first = n > 0 ? (unsigned char)head[0] : 0;
    free(head);
    if (bad)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--metrics: '%s' holds something other than JSON lines (%lld bytes, "
                          "the first 0x%02x): its first line is not a one-line JSON object, "
                          "and appending would damage it; give a new file or one an earlier "
                          "--metrics wrote",
                          path, (long long)sb.st_size, first);
    if (last != '\n') fputc('\n', f);
    return HOOP_OK;
}

/* --metrics opened for appending, write-only: a FIFO nobody reads is refused at once
 * (ENXIO: opened read-write it would block the run, SIGTERM included, once full). */
static hoop_status open_metrics(trainer *t, const char *path)
{
    int fd = hoop__open_output(path, O_APPEND);
    if (fd < 0 && errno == ENXIO)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--metrics: '%s' is a FIFO that no process reads; start its reader "
                          "first, or give a file",
                          path);
    if (fd < 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--metrics: cannot open '%s': %s", path,
                          hoop__strerror(errno));
    if (!(t->metrics = fdopen(fd, "a"))) {
        close(fd);
        return HOOP_ERROR(HOOP_ERR_NOMEM, "--metrics: fdopen: out of memory");
    }
    hoop_status st = end_line(t->metrics, path);
    if (st != HOOP_OK) {
        fclose(t->metrics);
        t->metrics = NULL;
    }
    return st;
}

/* Where path is, for comparing paths that may not exist yet: the real path of its
 * directory, '/', its last component ("" when the directory cannot be resolved: its own
 * check names that). A symbolic link whose target does not exist yet stands for that
 * target (a write creates it), followed up to 40 links deep. */
static void canonical(const char *path, char *out, size_t cap)
{
    char p[PATH_MAX], link[PATH_MAX], dir[PATH_MAX], real[PATH_MAX];
    struct stat sb;
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) goto none;
    for (int depth = 0; depth < 40 && lstat(p, &sb) == 0 && S_ISLNK(sb.st_mode); depth++) {
        ssize_t n = readlink(p, link, sizeof link - 1);
        if (n <= 0) break;
        link[n] = '\0';
        char *slash = strrchr(p, '/');
        if (link[0] == '/' || !slash) { /* absolute, or relative to "." */
            memcpy(p, link, (size_t)n + 1);
        } else { /* relative to the link's directory */
            size_t keep = (size_t)(slash - p) + 1;
            if (keep + (size_t)n >= sizeof p) goto none;
            memcpy(p + keep, link, (size_t)n + 1);
        }
    }
    char *slash = strrchr(p, '/');
    const char *base = slash ? slash + 1 : p;
    if (!slash)
        memcpy(dir, ".", 2);
    else if (slash == p)
        memcpy(dir, "/", 2);
    else {
        memcpy(dir, p, (size_t)(slash - p));
        dir[slash - p] = '\0';
    }
    if (!realpath(dir, real)) goto none;
    if (snprintf(out, cap, "%s/%s", real, base) < (int)cap) return;
none:
    out[0] = '\0';
}

/* 1 when a and b are one file: the same place, or (both existing) the same inode. */
static int same_file(const char *a, const char *b)
{
    char ca[PATH_MAX + 256], cb[PATH_MAX + 256];
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    canonical(a, ca, sizeof ca);
    canonical(b, cb, sizeof cb);
    return ca[0] && strcmp(ca, cb) == 0;
}

/* The outputs (--checkpoint, --metrics, HOOP_TRACE_FILE) must be three files, none of them
 * one of --data's: the trace's rename replaced a checkpoint of the same name, metrics
 * went into a dataset file. HOOP_ERR_INVALID naming both. */
static hoop_status check_collisions(const train_opts *o, const char *trace)
{
    const char *name[3] = {"--checkpoint", "--metrics", "HOOP_TRACE_FILE"};
    const char *path[3] = {o->checkpoint, o->metrics, trace && *trace ? trace : NULL};
    for (int i = 0; i < 3; i++) {
        if (!path[i]) continue;
        for (int j = i + 1; j < 3; j++)
            if (path[j] && same_file(path[i], path[j]))
                return HOOP_ERROR(HOOP_ERR_INVALID,
                                  "%s '%s' and %s '%s' are the same file: each would overwrite "
                                  "the other; give two paths",
                                  name[i], path[i], name[j], path[j]);
        for (size_t k = 0; o->data && k < 2 * HOOP__MNIST_FILES; k++) {
            char data[4096];
            snprintf(data, sizeof data, "%s/%s%s", o->data, hoop__mnist_files[k / 2],
                     k % 2 ? ".gz" : "");
            if (same_file(path[i], data))
                return HOOP_ERROR(HOOP_ERR_INVALID,
                                  "%s '%s' is --data's file '%s': writing it would destroy the "
                                  "dataset; give another path",
                                  name[i], path[i], data);
        }
    }
    return HOOP_OK;
}

/* Rank 0's preparation before the data: every output path checked, --metrics opened, so
 * that none fails after an epoch of work. */
static hoop_status check_outputs(trainer *t)
{
    const train_opts *o = t->o;
    const char *trace = getenv("HOOP_TRACE_FILE");
    HOOP_CHECK(check_collisions(o, t->dist.comm ? trace : NULL));
    if (o->checkpoint) HOOP_CHECK(check_replaced_output("--checkpoint", o->checkpoint));
    /* One that --resume cannot read: bad input (exit 2), said now, not as an I/O error */
    struct stat sb;
    if (o->checkpoint && o->resume && stat(o->checkpoint, &sb) == 0 &&
        access(o->checkpoint, R_OK) != 0 && (errno == EACCES || errno == EPERM))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--checkpoint '%s' is not readable by this user (mode %04o), so "
                          "--resume cannot read it; make it readable or give another path",
                          o->checkpoint, (unsigned)(sb.st_mode & 07777));
    if (trace && *trace && !t->dist.comm) /* it traces DDP, which a lone process lacks */
        fprintf(stderr,
                "hoop-train: HOOP_TRACE_FILE='%s' is ignored: a process started alone runs "
                "no DDP to trace (start it under hooprun --nproc-per-node 1)\n",
                trace);
    else if (trace && *trace)
        HOOP_CHECK(check_replaced_output("HOOP_TRACE_FILE", trace));
    if (o->metrics) HOOP_CHECK(open_metrics(t, o->metrics));
    return HOOP_OK;
}

/* Several workers on one node share its cores: unless --threads, OPENBLAS_NUM_THREADS or
 * the user's OMP_NUM_THREADS says otherwise (not the 1 hooprun sets when none is:
 * HOOP_OMP_DEFAULT=1; OpenBLAS reads OMP_NUM_THREADS too), each gets cores /
 * LOCAL_WORLD_SIZE OpenBLAS threads (at least 1), as torchrun sets OMP_NUM_THREADS,
 * instead of every worker starting one per core. */
const char *train_users_omp(void)
{
    const char *omp = getenv("OMP_NUM_THREADS"), *mark = getenv("HOOP_OMP_DEFAULT");
    const char *blas = getenv("OPENBLAS_NUM_THREADS");
    if (!omp || !*omp || (blas && *blas) || (mark && !strcmp(mark, "1"))) return NULL;
    return omp;
}

static void share_cores(const trainer *t)
{
    const char *env = getenv("OPENBLAS_NUM_THREADS"), *lws = getenv("LOCAL_WORLD_SIZE");
    const char *bound = getenv("HOOP_CPU_BIND");
    cpu_set_t mine;
    if (t->o->threads > 0 || (env && *env) || train_users_omp() || !lws || atoi(lws) <= 1) return;
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

// ----- the trainer ------------------------------------------------------------------------

hoop_status trainer_init(trainer *t, const train_opts *o)
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
    HOOP_CHECK(train_data_load(t, t->dist.rank == 0 ? check_outputs(t) : HOOP_OK));
    HOOP_CHECK(build_model(t));
    /* Built and initialised on the host, moved before the optimizer makes its state and
     * before a checkpoint is loaded into it. */
    if (t->device != HOOP_DEVICE_CPU) HOOP_CHECK(hoop_model_to_device(t->model, t->device));
    HOOP_CHECK(hoop_loader_new(&t->loader, t->train, (size_t)o->batch_size, (uint64_t)o->seed));
    HOOP_CHECK(train_dist_sampler(&t->dist, t->ntrain, (uint64_t)o->seed));
    HOOP_CHECK(train_data_shard(t, 0, 0));
    HOOP_CHECK(build_optim(t));
    HOOP_CHECK(train_ckpt_resume(t));
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

hoop_status trainer_destroy(trainer *t)
{
    hoop_status st = HOOP_OK;
    if (t->metrics) {
        int bad = t->metrics_errno; /* every record's flush kept the first failure */
        if (fclose(t->metrics) != 0 && !bad) bad = errno;
        if (bad)
            st = HOOP_ERROR(HOOP_ERR_SYSTEM, "--metrics: writing '%s' failed: %s", t->o->metrics,
                            hoop__strerror(bad));
    }
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
