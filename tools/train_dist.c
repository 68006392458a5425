/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_dist.c -- hoop-train's distributed side (see train_dist.h).
 *
 * Owns the communicator, the DDP wrapper, the sampler and the shard buffer. The file
 * broadcast of a checkpoint goes through a private temporary file on each rank other
 * than 0, removed right after loading.
 */
#include "train_dist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/env.h"
#include "hoop/collectives.h"

hoop_status train_dist_init(train_dist *d)
{
    memset(d, 0, sizeof(*d));
    d->world_size = 1;
    /* Alone (no part of env:// set, not an srun task): the HOOP_* settings are still
     * checked, as hoop_comm_init_env would, so a typo is refused instead of ignored. */
    if (!hoop__env_dist_wanted()) return hoop__env_check_all();
    HOOP_CHECK(hoop_comm_init_env(&d->comm));
    d->rank = hoop_comm_rank(d->comm);
    d->world_size = hoop_comm_world_size(d->comm);
    hoop_log_set_rank(d->rank);
    return HOOP_OK;
}

hoop_status train_dist_destroy(train_dist *d)
{
    hoop_status st = HOOP_OK;
    /* A stop agreement still in flight ends with the others' (or fails when they left). */
    if (d->agree_req) HOOP_CHECK_KEEP(hoop_wait(d->agree_req, -1), st);
    HOOP_CHECK_KEEP(hoop_ddp_destroy(d->ddp), st);
    HOOP_CHECK_KEEP(hoop_comm_destroy(d->comm), st);
    hoop_sampler_free(d->sampler);
    hoop_sampler_free(d->eval_sampler);
    free(d->shard);
    memset(d, 0, sizeof(*d));
    return st;
}

/* 1 when d's rank follows rank 0 out of a failure that rank 0 explains, silently: every
 * rank but 0 and the first of each other node (local rank 0), whose node's output would
 * otherwise hold no reason (a node's hooprun said only "exited with code 2"). */
static int follows_quietly(const train_dist *d)
{
    return d->rank != 0 && hoop_comm_local_rank(d->comm) != 0;
}

hoop_status train_dist_same_settings(train_dist *d, const char *text)
{
    char *all = NULL, flag[64], va[128], vb[128];
    hoop_status st = HOOP_OK;
    if (!d->comm) return HOOP_OK;
    HOOP_CHECK(hoop__calloc(&all, (size_t)d->world_size * TRAIN_SETTINGS_BYTES));
    HOOP_CHECK_GOTO(hoop_allgather(d->comm, text, all, TRAIN_SETTINGS_BYTES, HOOP_DTYPE_U8, NULL),
                    st, out);
    for (int r = 1; r < d->world_size; r++) {
        char *theirs = all + (size_t)r * TRAIN_SETTINGS_BYTES;
        theirs[TRAIN_SETTINGS_BYTES - 1] = '\0'; /* whatever another build sent */
        if (!hoop__settings_diff(all, theirs, flag, va, vb, sizeof va)) continue;
        st = HOOP_ERROR(HOOP_ERR_INVALID,
                        "ranks disagree on %s: rank 0 has %s, rank %d has %s (every rank must "
                        "get the same flags)",
                        flag, va, r, vb);
        d->root_failed = follows_quietly(d); /* rank 0 says it, for all (on its node) */
        break;
    }
out:
    free(all);
    return st;
}

/* How theirs (rank r's) differs from rank 0's: the message, or HOOP_OK when it does not. */
static hoop_status data_diff(const train_data_id *root, const train_data_id *theirs, int r)
{
    static const char *const set[2] = {"training", "test"};
    if (theirs->code != HOOP_OK)
        return HOOP_ERROR((hoop_status)theirs->code, "rank %d could not load its --data: %s", r,
                          theirs->why);
    if (theirs->rows != root->rows || theirs->cols != root->cols)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "rank %d's --data %s has %lldx%lld images; rank 0's %s has %lldx%lld "
                          "(every rank must load the same data)",
                          r, theirs->path, (long long)theirs->rows, (long long)theirs->cols,
                          root->path, (long long)root->rows, (long long)root->cols);
    for (int k = 0; k < 2; k++) {
        if (theirs->count[k] == root->count[k] && theirs->crc[k] == root->crc[k]) continue;
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "rank %d's --data %s has %lld %s samples (crc32 %08x); rank 0's %s has "
                          "%lld (crc32 %08x) (every rank must load the same data)",
                          r, theirs->path, (long long)theirs->count[k], set[k],
                          (unsigned)theirs->crc[k], root->path, (long long)root->count[k],
                          (unsigned)root->crc[k]);
    }
    return HOOP_OK;
}

hoop_status train_dist_same_data(train_dist *d, const train_data_id *mine)
{
    train_data_id *all = NULL;
    hoop_status st = HOOP_OK;
    if (!d->comm) return HOOP_OK;
    HOOP_CHECK(hoop__calloc(&all, (size_t)d->world_size));
    HOOP_CHECK_GOTO(hoop_allgather(d->comm, mine, all, sizeof(*mine), HOOP_DTYPE_U8, NULL), st,
                    out);
    for (int r = 0; r < d->world_size; r++) { /* whatever another build sent */
        all[r].path[TRAIN_DATA_PATH_BYTES - 1] = '\0';
        all[r].why[TRAIN_DATA_PATH_BYTES - 1] = '\0';
        if (all[r].code != HOOP_OK &&
            !strcmp(hoop_status_name((hoop_status)all[r].code), "HOOP_UNKNOWN"))
            all[r].code = HOOP_ERR_REMOTE;
    }
    for (int r = 1; r < d->world_size && st == HOOP_OK; r++) st = data_diff(&all[0], &all[r], r);
    d->root_failed = st != HOOP_OK && follows_quietly(d); /* rank 0 says it (on its node) */
out:
    free(all);
    return st;
}

hoop_status train_dist_root_status(train_dist *d, hoop_status st)
{
    if (!d->comm) return st;
    if (d->rank == 0 && st != HOOP_OK) {
        fprintf(stderr, "hoop-train: %s\n", hoop_last_error());
        fflush(stderr);
        d->reported = 1;
    }
    int32_t code = (int32_t)st;
    HOOP_CHECK(hoop_broadcast(d->comm, &code, &code, 1, HOOP_DTYPE_I32, 0, NULL));
    if (d->rank == 0 || code == HOOP_OK) return d->rank == 0 ? st : HOOP_OK;
    d->root_failed = follows_quietly(d);
    return HOOP_ERROR((hoop_status)code, "rank 0 failed (%s); see its message on its node",
                      hoop_status_str((hoop_status)code));
}

hoop_status train_dist_sampler(train_dist *d, size_t n, uint64_t seed)
{
    hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
    cfg.dataset_size = n;
    cfg.rank = d->rank;
    cfg.world_size = d->world_size;
    cfg.seed = seed;
    HOOP_CHECK(hoop_sampler_new(&d->sampler, &cfg));
    return hoop__calloc(&d->shard, hoop_sampler_num_samples(d->sampler));
}

hoop_status train_dist_shard(train_dist *d, uint64_t epoch, const int64_t **idx, size_t *count)
{
    HOOP_CHECK(hoop_sampler_set_epoch(d->sampler, epoch));
    size_t n = hoop_sampler_num_samples(d->sampler);
    const size_t *src = hoop_sampler_indices(d->sampler);
    for (size_t i = 0; i < n; i++) d->shard[i] = (int64_t)src[i];
    *idx = d->shard;
    *count = n;
    return HOOP_OK;
}

hoop_status train_dist_eval_shard(train_dist *d, size_t n, const size_t **idx, size_t *count)
{
    if (!d->eval_sampler) {
        hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
        cfg.dataset_size = n;
        cfg.rank = d->rank;
        cfg.world_size = d->world_size;
        cfg.shuffle = 0;
        cfg.exact_split = 1;
        HOOP_CHECK(hoop_sampler_new(&d->eval_sampler, &cfg));
    }
    *idx = hoop_sampler_indices(d->eval_sampler);
    *count = hoop_sampler_num_samples(d->eval_sampler);
    return HOOP_OK;
}

hoop_status train_dist_join(train_dist *d, hoop_ddp_step_fn step, void *user)
{
    return d->ddp ? hoop_ddp_join(d->ddp, step, user) : HOOP_OK;
}

hoop_status train_dist_wrap(train_dist *d, hoop_tensor *const *params, size_t count,
                            int64_t bucket_cap_kb, int64_t first_bucket_kb)
{
    if (!d->comm) return HOOP_OK;
    hoop_ddp_config cfg = HOOP_DDP_CONFIG_INIT;
    cfg.bucket_cap_bytes = (size_t)bucket_cap_kb << 10;
    cfg.first_bucket_bytes = (size_t)first_bucket_kb << 10;
    return hoop_ddp_init(&d->ddp, d->comm, params, count, &cfg);
}

hoop_status train_dist_sum(train_dist *d, double *v, size_t n)
{
    if (!d->comm) return HOOP_OK;
    return hoop_allreduce(d->comm, v, v, n, HOOP_DTYPE_F64, HOOP_OP_SUM, NULL);
}

const char *train_ckpt_model_name(int64_t model)
{
    return model == TRAIN_CKPT_MODEL_MLP   ? "mlp"
           : model == TRAIN_CKPT_MODEL_CNN ? "cnn"
                                           : "unknown";
}

/* Rank 0: were have's settings (a checkpoint's, "" when it has none) those of this run,
 * want? A resumed run continues the run it was written by, bit for bit; --epochs may
 * change only where the schedule does not depend on it (train_cli_settings). */
static hoop_status check_settings(const char *path, const char *have, const char *want)
{
    char flag[64], va[128], vb[128];
    if (!hoop__settings_diff(have, want, flag, va, vb, sizeof va)) return HOOP_OK;
    if (!strcmp(flag, "--epochs"))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--resume: %s was written with --epochs %s; this run has --epochs %s "
                          "(under --schedule cosine every step's learning rate depends on the "
                          "total steps; only a --schedule constant run may change --epochs)",
                          path, va, vb);
    return HOOP_ERROR(HOOP_ERR_INVALID,
                      "--resume: %s was written with %s %s; this run has %s %s (a resumed run "
                      "goes on as the run that wrote it: pass the flags it was written with, or "
                      "another --checkpoint)",
                      path, flag, va, flag, vb);
}

/* Rank 0: is the file at path one this run can continue from? have is what it holds. */
static hoop_status check_resumable(const char *path, const hoop_checkpoint_info *info,
                                   const train_ckpt_extra *have, const train_ckpt_extra *want,
                                   size_t numel)
{
    if ((info->extra_bytes != sizeof(*have) && info->extra_bytes != TRAIN_CKPT_EXTRA_V2_BYTES &&
         info->extra_bytes != TRAIN_CKPT_EXTRA_V1_BYTES) ||
        have->magic != TRAIN_CKPT_MAGIC)
        return HOOP_ERROR(HOOP_ERR_INVALID, "--checkpoint '%s' was not written by hoop-train",
                          path);
    if (have->model != 0 && have->model != want->model)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--resume: %s holds %s %s checkpoint (%zu parameters), not %s "
                          "(pass --model %s, or another --checkpoint)",
                          path, have->model == TRAIN_CKPT_MODEL_MLP ? "an" : "a",
                          train_ckpt_model_name(have->model), info->numel,
                          train_ckpt_model_name(want->model), train_ckpt_model_name(have->model));
    if (info->numel != numel)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--resume: %s holds a checkpoint of %zu parameters (%zu tensors), "
                          "not of this %s (%zu parameters)",
                          path, info->numel, info->param_count, train_ckpt_model_name(want->model),
                          numel);
    if (have->seed != want->seed)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--resume: %s was written with --seed %lld; this run has --seed %lld "
                          "(a resumed run goes on as the run that wrote it: pass the flags it "
                          "was written with, or another --checkpoint)",
                          path, (long long)have->seed, (long long)want->seed);
    /* Another number of ranks with the same global batch is the same run: global batch i
     * is positions i*G..(i+1)*G-1 of the epoch's permutation whatever the split (the
     * sampler deals position p to rank p % world_size; each rank takes its batch_size
     * next ones), so the steps per epoch, the learning-rate schedule, a mid-epoch
     * position and DDP's averaged gradient all carry over (up to the order of float
     * sums; dropout masks, drawn per rank-local sample, differ). */
    int64_t g_have = have->world_size * have->batch_size,
            g_want = want->world_size * want->batch_size;
    if (g_have != g_want) {
        char hint[200] = "";
        if (want->world_size != have->world_size && g_have % want->world_size == 0)
            snprintf(hint, sizeof(hint), "; on %lld rank%s pass --batch-size %lld",
                     (long long)want->world_size, want->world_size == 1 ? "" : "s",
                     (long long)(g_have / want->world_size));
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--resume: %s was written with world_size %lld x --batch-size %lld, a "
                          "global batch of %lld; this run has %lld x %lld = %lld (a resumed run "
                          "needs the same global batch: its steps per epoch and learning-rate "
                          "schedule depend on it%s)",
                          path, (long long)have->world_size, (long long)have->batch_size,
                          (long long)g_have, (long long)want->world_size,
                          (long long)want->batch_size, (long long)g_want, hint);
    }
    if (have->batches_done > 0 && have->ntrain != want->ntrain)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--resume: %s stopped inside epoch %lld of %lld training samples; this "
                          "run has %lld (--train-limit), so its position means nothing here",
                          path, (long long)have->epochs_done + 1, (long long)have->ntrain,
                          (long long)want->ntrain);
    /* At an epoch boundary too: the learning-rate schedule counts steps per epoch, so a
     * run at step 16 of a schedule recomputed for 10 steps in all would train with lr 0. */
    if (have->ntrain > 0 && have->ntrain != want->ntrain)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "--resume: %s was trained on %lld samples per epoch; this run has %lld "
                          "(--train-limit), so its steps per epoch, and the learning-rate "
                          "schedule, would not carry over (pass the --train-limit it was "
                          "written with, or another --checkpoint)",
                          path, (long long)have->ntrain, (long long)want->ntrain);
    return check_settings(path, have->settings, want->settings);
}

/* Rank 0: reads the file once, then checks and loads those bytes (the ones it sends the
 * others: a file replaced meanwhile cannot make rank 0 load another checkpoint than
 * theirs); *exists says whether there is one. */
static hoop_status load_root(const char *path, char **buf, int64_t *bytes, int *exists,
                             hoop_tensor *const *params, size_t count, hoop_optim *opt,
                             const train_ckpt_extra *want, size_t numel, train_ckpt_extra *extra)
{
    hoop_checkpoint_info info;
    struct stat sb;
    *exists = !(stat(path, &sb) != 0 && errno == ENOENT); /* else the read says what is wrong */
    if (!*exists) return HOOP_OK;
    size_t len = 0;
    HOOP_CHECK(hoop_checkpoint_read(path, (void **)buf, &len));
    *bytes = (int64_t)len;
    HOOP_CHECK(
        hoop_checkpoint_inspect_mem(path, *buf, (size_t)*bytes, &info, extra, sizeof(*extra)));
    extra->settings[sizeof(extra->settings) - 1] = '\0'; /* whatever the file holds */
    HOOP_CHECK(check_resumable(path, &info, extra, want, numel));
    memset(extra, 0, sizeof(*extra));
    return hoop_checkpoint_load_mem(path, *buf, (size_t)*bytes, params, count, opt, extra,
                                    sizeof(*extra), NULL);
}

hoop_status train_dist_agree(train_dist *d, int32_t *sig, int pipelined)
{
    int32_t mine = *sig;
    if (!d->comm) return HOOP_OK;
    *sig = 0;
    if (d->agree_req) {
        hoop_request *req = d->agree_req;
        d->agree_req = NULL;
        HOOP_CHECK(hoop_wait(req, -1));
        if ((*sig = d->agree_sig) != 0) return HOOP_OK;
    }
    d->agree_sig = mine;
    if (!pipelined) {
        HOOP_CHECK(hoop_allreduce(d->comm, &d->agree_sig, &d->agree_sig, 1, HOOP_DTYPE_I32,
                                  HOOP_OP_MAX, NULL));
        *sig = d->agree_sig;
        return HOOP_OK;
    }
    return hoop_allreduce(d->comm, &d->agree_sig, &d->agree_sig, 1, HOOP_DTYPE_I32, HOOP_OP_MAX,
                          &d->agree_req);
}

hoop_status train_dist_load(train_dist *d, const char *path, hoop_tensor *const *params,
                            size_t count, hoop_optim *opt, const train_ckpt_extra *want,
                            size_t numel, train_ckpt_extra *extra, int *found)
{
    char *buf = NULL;
    int64_t meta[2] = {0, 0}; /* exists, bytes */
    int exists = 0;
    size_t got = 0;
    hoop_status st = HOOP_OK;
    memset(extra, 0, sizeof(*extra)); /* an older file leaves the newer fields 0 */
    if (d->rank == 0)
        st = load_root(path, &buf, &meta[1], &exists, params, count, opt, want, numel, extra);
    meta[0] = exists;
    if (d->comm) {
        HOOP_CHECK_GOTO(train_dist_root_status(d, st), st, out);
        HOOP_CHECK_GOTO(hoop_broadcast(d->comm, meta, meta, 2, HOOP_DTYPE_I64, 0, NULL), st, out);
        if (meta[0] && d->rank != 0)
            HOOP_CHECK_GOTO(hoop__calloc(&buf, (size_t)meta[1] + 1), st, out);
        if (meta[0])
            HOOP_CHECK_GOTO(
                hoop_broadcast(d->comm, buf, buf, (size_t)meta[1], HOOP_DTYPE_U8, 0, NULL), st,
                out);
        if (meta[0] && d->rank != 0)
            st = hoop_checkpoint_load_mem(path, buf, (size_t)meta[1], params, count, opt, extra,
                                          sizeof(*extra), &got);
    }
    *found = meta[0] != 0;
out:
    free(buf);
    return st;
}
