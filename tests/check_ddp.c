/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_ddp.c -- DDP against single-process training, as ranks in threads.
 *
 * Ranks are threads of this process meeting through an in-process rendezvous and
 * talking over loopback TCP. The reference for equivalence is one process training the
 * same model on the concatenated batch (P x B samples); the reference for no_sync is a
 * float64 average of plain (non-DDP) local gradient sums; the reference for uneven inputs
 * (hoop_ddp_join) is one process training, at each step, on the batches of the ranks that
 * still had data, with the gradients scaled as the documented divisor says.
 */
#include <cblas.h>
#include <check.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/rng.h"
#include "ddp/ddp_internal.h"
#include "hoop/autograd.h"
#include "hoop/collectives.h"
#include "hoop/comm.h"
#include "hoop/ddp.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "run_suite.h"

#define MAXP 4
#define IN 12
#define CLASSES 5
#define STEPS 20
#define B 8

static const int64_t mlp_sizes[] = {IN, 16, 10, CLASSES};

/* A fixed synthetic dataset: features in [-1, 1), labels 0..CLASSES-1. */
static float data_x[MAXP * B * STEPS * IN];
static int32_t data_y[MAXP * B * STEPS];

static void make_data(void)
{
    hoop__rng r = hoop__rng_seed(2024);
    for (size_t i = 0; i < sizeof(data_x) / sizeof(data_x[0]); i++)
        data_x[i] = 2.0f * hoop__rng_float(&r) - 1.0f;
    for (size_t i = 0; i < sizeof(data_y) / sizeof(data_y[0]); i++)
        data_y[i] = (int32_t)hoop__rng_below(&r, CLASSES);
}

/* One forward + loss on samples [first, first + n). */
static hoop_tensor *forward_loss(hoop_model *m, hoop_tape *tape, size_t first, size_t n)
{
    int64_t shape[2] = {(int64_t)n, IN};
    hoop_tensor *x, *logits, *loss;
    ck_assert_int_eq(hoop_tape_tensor_new(tape, 2, shape, &x), HOOP_OK);
    memcpy(hoop_tensor_data(x), data_x + first * IN, n * IN * sizeof(float));
    ck_assert_int_eq(hoop_model_forward(m, tape, x, &logits), HOOP_OK);
    ck_assert_int_eq(hoop_cross_entropy(tape, logits, data_y + first, 0.0f, &loss), HOOP_OK);
    return loss;
}

static hoop_optim *make_sgd(hoop_model *m)
{
    hoop_optim_config oc = HOOP_OPTIM_CONFIG_INIT;
    oc.lr = 0.1f;
    oc.momentum = 0.9f;
    hoop_optim *opt;
    ck_assert_int_eq(hoop_optim_new(&opt, &oc, hoop_model_params(m), hoop_model_param_count(m)),
                     HOOP_OK);
    return opt;
}

/* Flattens a model's parameters into out (numel floats). */
static void snapshot(hoop_model *m, float *out)
{
    for (size_t i = 0, k = 0; i < hoop_model_param_count(m); i++) {
        hoop_tensor *p = hoop_model_param(m, i);
        memcpy(out + k, hoop_tensor_data(p), hoop_tensor_count(p) * sizeof(float));
        k += hoop_tensor_count(p);
    }
}

static void snapshot_grads(hoop_model *m, float *out)
{
    for (size_t i = 0, k = 0; i < hoop_model_param_count(m); i++) {
        hoop_tensor *p = hoop_model_param(m, i);
        memcpy(out + k, hoop_tensor_grad(p), hoop_tensor_count(p) * sizeof(float));
        k += hoop_tensor_count(p);
    }
}

// ----------------------------------------------------------------- rank threads

struct join_case;

typedef struct rank_ctx {
    int rank, world_size;
    hoop_rendezvous *rv;
    int mode; /* 0 equivalence, 1 unused param, 2 no_sync, 3 trace, 4 shape mismatch, 5 join,
                 6 config mismatch, 8 plain hoop_backward on wrapped parameters */
    const struct join_case *jc; /* join */
    size_t cap, first;          /* equivalence: bucket caps (0: 512 and 256) */
    int algo;                   /* equivalence: 1 + the hoop_algo to pin, or 0 */
    float *grads0;              /* equivalence: the first step's reduced gradients, or NULL */
    hoop_status join_st;        /* join: the first failure of join (or backward) */
    int direct;                 /* equivalence: every bucket all-reduced by the direct algorithm */
    uint64_t sent_steps;        /* equivalence: bytes this rank sent during the training steps */
    int error_on_unused;
    const char *trace_path;
    hoop_status st, init_st, step_st;
    hoop_status again_st, wait_st, destroy_st; /* plain backward */
    char wait_msg[512];
    char msg[512];
    float *params; /* numel */
    double *grads; /* for no_sync */
    hoop_ddp_stats stats;
} rank_ctx;

static hoop_comm *make_comm(rank_ctx *c)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.rank = c->rank;
    cfg.world_size = c->world_size;
    cfg.rendezvous = c->rv;
    cfg.timeout_ms = 20000;
    hoop_comm *comm = NULL;
    c->st = hoop_comm_init(&comm, &cfg);
    return comm;
}

static void run_equivalence(rank_ctx *c, hoop_comm *comm)
{
    hoop_model *m;
    /* A different seed per rank: DDP's broadcast must make them equal. */
    ck_assert_int_eq(hoop_model_new_mlp(&m, mlp_sizes, 4, 7 + (uint64_t)c->rank), HOOP_OK);
    hoop_tape *tape;
    hoop_tape_init(&tape);
    hoop_optim *opt = make_sgd(m);
    hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
    dc.first_bucket_bytes = c->first ? c->first : 256; /* several buckets even for this */
    dc.bucket_cap_bytes = c->cap ? c->cap : 512;       /* small model */
    hoop_ddp *ddp;
    /* direct: the buckets are shared memory, so every bucket's all-reduce skips the links */
    if (c->direct) ck_assert_int_eq(hoop_comm_set_algo(comm, HOOP_ALGO_DIRECT), HOOP_OK);
    if (c->algo) ck_assert_int_eq(hoop_comm_set_algo(comm, (hoop_algo)(c->algo - 1)), HOOP_OK);
    c->init_st = hoop_ddp_init(&ddp, comm, hoop_model_params(m), hoop_model_param_count(m), &dc);
    ck_assert_int_eq(c->init_st, HOOP_OK);
    const char *tp = getenv("HOOP_TRANSPORT");
    int want_shared = !(tp && strcmp(tp, "tcp") == 0);
    ck_assert_int_eq(hoop_comm_is_shared(comm, hoop_tensor_grad(hoop_model_params(m)[0]), 4),
                     want_shared);
    uint64_t sent0 = hoop_comm_bytes_sent(comm);
    for (int s = 0; s < STEPS; s++) {
        size_t first = ((size_t)s * (size_t)c->world_size + (size_t)c->rank) * B;
        hoop_tensor *loss = forward_loss(m, tape, first, B);
        hoop_optim_zero_grad(opt);
        ck_assert_int_eq(hoop_ddp_backward(ddp, tape, loss), HOOP_OK);
        if (s == 0 && c->grads0) snapshot_grads(m, c->grads0);
        ck_assert_int_eq(hoop_optim_step(opt), HOOP_OK);
        hoop_tape_reset(tape);
    }
    c->sent_steps = hoop_comm_bytes_sent(comm) - sent0;
    hoop_ddp_get_stats(ddp, &c->stats);
    snapshot(m, c->params);
    ck_assert_int_eq(hoop_ddp_destroy(ddp), HOOP_OK);
    hoop_optim_free(opt);
    hoop_tape_destroy(tape);
    hoop_model_free(m);
}

static void *rank_main(void *arg);

static void spawn(rank_ctx *ctx, int ws, int mode, int direct)
{
    pthread_t t[MAXP];
    hoop_rendezvous *rv;
    ck_assert_int_eq(hoop_rendezvous_new(&rv, ws), HOOP_OK);
    for (int r = 0; r < ws; r++) {
        ctx[r].rank = r;
        ctx[r].world_size = ws;
        ctx[r].rv = rv;
        ctx[r].mode = mode;
        ctx[r].direct = direct;
        ck_assert_int_eq(pthread_create(&t[r], NULL, rank_main, &ctx[r]), 0);
    }
    for (int r = 0; r < ws; r++) pthread_join(t[r], NULL);
    hoop_rendezvous_free(rv);
}

/* Reference: one process, batch ws x B, same data order. */
static void reference(int ws, float *out)
{
    hoop_model *m;
    ck_assert_int_eq(hoop_model_new_mlp(&m, mlp_sizes, 4, 7), HOOP_OK);
    hoop_tape *tape;
    hoop_tape_init(&tape);
    hoop_optim *opt = make_sgd(m);
    for (int s = 0; s < STEPS; s++) {
        hoop_tensor *loss = forward_loss(m, tape, (size_t)s * (size_t)ws * B, (size_t)ws * B);
        hoop_optim_zero_grad(opt);
        ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
        ck_assert_int_eq(hoop_optim_step(opt), HOOP_OK);
        hoop_tape_reset(tape);
    }
    snapshot(m, out);
    hoop_optim_free(opt);
    hoop_tape_destroy(tape);
    hoop_model_free(m);
}

static size_t mlp_numel(void)
{
    size_t n = 0;
    for (int i = 0; i < 3; i++) n += (size_t)(mlp_sizes[i] * mlp_sizes[i + 1] + mlp_sizes[i + 1]);
    return n;
}

START_TEST(test_equivalence)
{
    int ws = _i % 2 == 0 ? 2 : 4; /* _i >= 2: the direct all-reduce */
    size_t n = mlp_numel();
    rank_ctx ctx[MAXP];
    memset(ctx, 0, sizeof(ctx));
    for (int r = 0; r < ws; r++) ctx[r].params = calloc(n, sizeof(float));
    spawn(ctx, ws, 0, _i >= 2);
    float *ref = calloc(n, sizeof(float));
    reference(ws, ref);
    double maxdiff = 0;
    for (size_t i = 0; i < n; i++) maxdiff = fmax(maxdiff, fabs((double)ctx[0].params[i] - ref[i]));
    ck_assert_msg(maxdiff <= 1e-5, "world_size %d: max |ddp - single| = %g", ws, maxdiff);
    for (int r = 1; r < ws; r++)
        ck_assert_msg(memcmp(ctx[r].params, ctx[0].params, n * sizeof(float)) == 0,
                      "rank %d's parameters differ from rank 0's", r);
    ck_assert_int_ge(ctx[0].stats.nbuckets, 3);
    ck_assert_int_eq(ctx[0].stats.steps, STEPS);
    /* Through the links every step moves at least (n-1)/n of the gradients per rank;
     * direct sends only tokens, a few bytes per bucket and step. */
    uint64_t grads = (uint64_t)ctx[0].stats.bucket_bytes * STEPS;
    const char *tp = getenv("HOOP_TRANSPORT");
    if (_i >= 2 && !(tp && strcmp(tp, "tcp") == 0))
        ck_assert_msg(ctx[0].sent_steps < 16u * (uint64_t)ctx[0].stats.nbuckets * STEPS,
                      "direct sent %llu bytes", (unsigned long long)ctx[0].sent_steps);
    else
        ck_assert_msg(ctx[0].sent_steps >= grads * (uint64_t)(ws - 1) / (uint64_t)ws,
                      "sent %llu bytes", (unsigned long long)ctx[0].sent_steps);
    for (int r = 0; r < ws; r++) free(ctx[r].params);
    free(ref);
}
END_TEST

// ----------------------------------------------------------------- unused parameters

/* Rank 0 uses w2 in its loss, the others do not (error_on_unused: 0 off, 1 on, 2 off and
 * rank 1 passes a non-scalar loss at step 1). */
static void run_unused(rank_ctx *c, hoop_comm *comm)
{
    hoop_model *m;
    hoop_model_new(&m);
    int64_t ws_[2] = {CLASSES, IN}, bs[1] = {CLASSES};
    hoop_tensor *w1, *b1, *w2;
    hoop_model_add_param(m, "w1", 2, ws_, &w1);
    hoop_model_add_param(m, "b1", 1, bs, &b1);
    hoop_model_add_param(m, "w2", 2, ws_, &w2);
    hoop__rng r = hoop__rng_seed(99);
    for (size_t i = 0; i < hoop_tensor_count(w1); i++) {
        hoop_tensor_data(w1)[i] = hoop__rng_float(&r) - 0.5f;
        hoop_tensor_data(w2)[i] = hoop__rng_float(&r) - 0.5f;
    }
    hoop_tape *tape;
    hoop_tape_init(&tape);
    hoop_optim *opt = make_sgd(m);
    hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
    dc.error_on_unused = c->error_on_unused == 1;
    hoop_ddp *ddp;
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, hoop_model_params(m), 3, &dc), HOOP_OK);
    c->step_st = HOOP_OK;
    for (int s = 0; s < 3; s++) {
        int64_t shape[2] = {B, IN};
        hoop_tensor *x, *y, *y2, *loss;
        hoop_tape_tensor_new(tape, 2, shape, &x);
        memcpy(hoop_tensor_data(x), data_x + (size_t)(s * 8 + c->rank) * B * IN,
               B * IN * sizeof(float));
        ck_assert_int_eq(hoop_linear(tape, x, w1, b1, &y), HOOP_OK);
        if (c->rank == 0) {
            ck_assert_int_eq(hoop_linear(tape, x, w2, NULL, &y2), HOOP_OK);
            ck_assert_int_eq(hoop_add(tape, y, y2, &y), HOOP_OK);
        }
        hoop_cross_entropy(tape, y, data_y, 0.0f, &loss);
        hoop_optim_zero_grad(opt);
        /* error_on_unused 2: rank 1 passes a non-scalar loss at step 1 (its own error) */
        if (c->error_on_unused == 2 && c->rank == 1 && s == 1) loss = y;
        hoop_status st = hoop_ddp_backward(ddp, tape, loss);
        if (st != HOOP_OK && c->step_st == HOOP_OK) {
            c->step_st = st;
            snprintf(c->msg, sizeof(c->msg), "%s", hoop_last_error());
        }
        hoop_optim_step(opt);
        hoop_tape_reset(tape);
    }
    snapshot(m, c->params);
    ck_assert_int_eq(hoop_ddp_destroy(ddp), HOOP_OK);
    hoop_optim_free(opt);
    hoop_tape_destroy(tape);
    hoop_model_free(m);
}

START_TEST(test_unused_parameter)
{
    size_t n = 3 * CLASSES * IN;
    rank_ctx ctx[MAXP];
    memset(ctx, 0, sizeof(ctx));
    for (int r = 0; r < 2; r++) {
        ctx[r].params = calloc(n, sizeof(float));
        ctx[r].error_on_unused = _i;
    }
    spawn(ctx, 2, 1, 0);
    if (_i == 0) {
        ck_assert_int_eq(ctx[0].step_st, HOOP_OK);
        ck_assert_int_eq(ctx[1].step_st, HOOP_OK);
    } else {
        /* The failing rank's own error; its peer fails too, where it returned HOOP_OK with
         * gradients averaged with the failed rank's. */
        ck_assert_int_eq(ctx[1].step_st, _i == 1 ? HOOP_ERR_USAGE : HOOP_ERR_INVALID);
        ck_assert_msg(strstr(ctx[1].msg, _i == 1 ? "'w2'" : "scalar") != NULL, "message: %s",
                      ctx[1].msg);
        ck_assert_int_eq(ctx[0].step_st, HOOP_ERR_REMOTE);
        ck_assert_msg(strstr(ctx[0].msg, "the backward pass failed on 1 of 2 ranks") != NULL,
                      "message: %s", ctx[0].msg);
    }
    ck_assert(memcmp(ctx[0].params, ctx[1].params, n * sizeof(float)) == 0);
    for (int r = 0; r < 2; r++) free(ctx[r].params);
}
END_TEST

// ----------------------------------------------------------------- no_sync

#define MICRO 3

/* K micro-batches: K-1 under no_sync, the K-th reduces. Saves the final gradients. */
static void run_no_sync(rank_ctx *c, hoop_comm *comm)
{
    hoop_model *m;
    hoop_model_new_mlp(&m, mlp_sizes, 4, 7);
    hoop_tape *tape;
    hoop_tape_init(&tape);
    hoop_ddp *ddp;
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, hoop_model_params(m), 6, NULL), HOOP_OK);
    hoop_model_zero_grad(m);
    for (int k = 0; k < MICRO; k++) {
        hoop_ddp_set_sync(ddp, k == MICRO - 1);
        size_t first = ((size_t)c->rank * MICRO + (size_t)k) * B;
        hoop_tensor *loss = forward_loss(m, tape, first, B);
        ck_assert_int_eq(hoop_ddp_backward(ddp, tape, loss), HOOP_OK);
        hoop_tape_reset(tape);
    }
    for (size_t i = 0, o = 0; i < 6; i++) {
        hoop_tensor *p = hoop_model_param(m, i);
        for (size_t j = 0; j < hoop_tensor_count(p); j++) c->grads[o++] = hoop_tensor_grad(p)[j];
    }
    hoop_ddp_destroy(ddp);
    hoop_tape_destroy(tape);
    hoop_model_free(m);
}

START_TEST(test_no_sync_accumulation)
{
    int ws = 2;
    size_t n = mlp_numel();
    rank_ctx ctx[MAXP];
    memset(ctx, 0, sizeof(ctx));
    for (int r = 0; r < ws; r++) ctx[r].grads = calloc(n, sizeof(double));
    spawn(ctx, ws, 2, 0);
    /* Reference: plain local sums over the micro-batches, averaged over ranks in f64. */
    double *want = calloc(n, sizeof(double));
    for (int r = 0; r < ws; r++) {
        hoop_model *m;
        hoop_model_new_mlp(&m, mlp_sizes, 4, 7);
        hoop_tape *tape;
        hoop_tape_init(&tape);
        hoop_model_zero_grad(m);
        for (int k = 0; k < MICRO; k++) {
            hoop_tensor *loss = forward_loss(m, tape, ((size_t)r * MICRO + (size_t)k) * B, B);
            ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
            hoop_tape_reset(tape);
        }
        for (size_t i = 0, o = 0; i < 6; i++) {
            hoop_tensor *p = hoop_model_param(m, i);
            for (size_t j = 0; j < hoop_tensor_count(p); j++)
                want[o++] += hoop_tensor_grad(p)[j] / ws;
        }
        hoop_tape_destroy(tape);
        hoop_model_free(m);
    }
    double maxdiff = 0, maxabs = 0;
    for (size_t i = 0; i < n; i++) {
        maxdiff = fmax(maxdiff, fabs(ctx[0].grads[i] - want[i]));
        maxabs = fmax(maxabs, fabs(want[i]));
        ck_assert(ctx[0].grads[i] == ctx[1].grads[i]);
    }
    ck_assert_double_gt(maxabs, 1e-3); /* the reference is not trivially zero */
    ck_assert_msg(maxdiff <= 1e-6, "no_sync grads differ from the averaged sums by %g", maxdiff);
    for (int r = 0; r < ws; r++) free(ctx[r].grads);
    free(want);
}
END_TEST

// ----------------------------------------------------------------- trace

static const int64_t big_sizes[] = {256, 512, 512, 10};

static void run_trace(rank_ctx *c, hoop_comm *comm)
{
    hoop_model *m;
    hoop_model_new_mlp(&m, big_sizes, 4, 3);
    hoop_tape *tape;
    hoop_tape_init(&tape);
    hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
    dc.first_bucket_bytes = 64 << 10;
    hoop_ddp *ddp;
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, hoop_model_params(m), 6, &dc), HOOP_OK);
    ck_assert_int_eq(hoop_ddp_trace_enable(ddp, c->trace_path), HOOP_OK);
    int64_t shape[2] = {64, 256};
    hoop_tensor *x, *logits, *loss;
    int64_t f0 = hoop_ddp_now_us();
    hoop_tape_tensor_new(tape, 2, shape, &x);
    for (size_t i = 0; i < hoop_tensor_count(x); i++)
        hoop_tensor_data(x)[i] = data_x[i % (sizeof(data_x) / sizeof(float))];
    hoop_model_forward(m, tape, x, &logits);
    hoop_cross_entropy(tape, logits, data_y, 0.0f, &loss);
    hoop_ddp_trace_event(ddp, "forward", f0, hoop_ddp_now_us());
    ck_assert_int_eq(hoop_ddp_backward(ddp, tape, loss), HOOP_OK);
    hoop_ddp_get_stats(ddp, &c->stats);
    c->st = hoop_ddp_trace_flush(ddp);
    snprintf(c->msg, sizeof(c->msg), "%s", hoop_last_error());
    hoop_ddp_destroy(ddp);
    hoop_tape_destroy(tape);
    hoop_model_free(m);
}

/* Reads "ts" and "dur" of the first event of rank pid whose name starts with name. */
static int find_event(const char *json, const char *name, int pid, long long *ts, long long *dur)
{
    char key[64];
    snprintf(key, sizeof(key), "{\"name\":\"%s", name);
    for (const char *p = strstr(json, key); p; p = strstr(p + 1, key)) {
        int epid;
        const char *t = strstr(p, "\"ts\":");
        if (t && sscanf(t, "\"ts\":%lld,\"dur\":%lld,\"pid\":%d", ts, dur, &epid) == 3 &&
            epid == pid)
            return 1;
    }
    return 0;
}

START_TEST(test_trace_shows_overlap)
{
    char path[] = "/tmp/hoop-trace-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    rank_ctx ctx[MAXP];
    memset(ctx, 0, sizeof(ctx));
    for (int r = 0; r < 2; r++) ctx[r].trace_path = path;
    spawn(ctx, 2, 3, 0);
    for (int r = 0; r < 2; r++) ck_assert_msg(ctx[r].st == HOOP_OK, "rank %d: %s", r, ctx[r].msg);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char json[1 << 16];
    size_t len = fread(json, 1, sizeof(json) - 1, f);
    json[len] = '\0';
    fclose(f);
    unlink(path);
    for (int r = 0; r < 2; r++) {
        long long bts, bdur, ats, adur, fts, fdur;
        ck_assert_msg(find_event(json, "backward", r, &bts, &bdur), "no backward for rank %d", r);
        ck_assert(find_event(json, "forward", r, &fts, &fdur));
        ck_assert_msg(find_event(json, "allreduce bucket 0", r, &ats, &adur), "no bucket 0");
        /* The first bucket's all-reduce starts while backward is still running. */
        ck_assert_msg(ats < bts + bdur, "rank %d: bucket 0 at %lld, backward ends %lld", r, ats,
                      bts + bdur);
        ck_assert_int_ge(ats, bts);
    }
    ck_assert_int_ge(ctx[0].stats.nbuckets, 2);
}
END_TEST

/* A trace path that is not a regular file (a FIFO here; /dev/null as root) is refused
 * by rank 0's flush, naming it, and left as it was: the rename over it replaced it. */
START_TEST(test_trace_not_a_file)
{
    char dir[] = "/tmp/hoop-trace-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/fifo", dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    rank_ctx ctx[MAXP];
    memset(ctx, 0, sizeof(ctx));
    for (int r = 0; r < 2; r++) ctx[r].trace_path = path;
    spawn(ctx, 2, 3, 0);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_msg(S_ISFIFO(sb.st_mode), "the FIFO was replaced");
    ck_assert_msg(
        ctx[0].st == HOOP_ERR_INVALID && strstr(ctx[0].msg, path) &&
            strstr(ctx[0].msg, "is not a regular file (a FIFO): writing it would replace it"),
        "rank 0: %s: %s", hoop_status_name(ctx[0].st), ctx[0].msg);
    ck_assert_msg(hoop__atomic_probe("HOOP_TRACE_FILE", path) == HOOP_ERR_INVALID,
                  "the probe took the FIFO");
    unlink(path);
    ck_assert_int_eq(hoop__atomic_probe("HOOP_TRACE_FILE", path),
                     HOOP_OK);               /* absent: a file can be made */
    ck_assert_int_ne(access(path, F_OK), 0); /* ... and none is left */
    rmdir(dir);
}
END_TEST

// ----------------------------------------------------------------- shape mismatch

static void run_mismatch(rank_ctx *c, hoop_comm *comm)
{
    int64_t sizes[4] = {IN, c->rank == 1 ? 17 : 16, 10, CLASSES};
    hoop_model *m;
    hoop_model_new_mlp(&m, sizes, 4, 7);
    hoop_ddp *ddp = NULL;
    c->init_st = hoop_ddp_init(&ddp, comm, hoop_model_params(m), 6, NULL);
    snprintf(c->msg, sizeof(c->msg), "%s", hoop_last_error());
    ck_assert_ptr_null(ddp);
    hoop_model_free(m);
}

START_TEST(test_shape_mismatch)
{
    rank_ctx ctx[MAXP];
    memset(ctx, 0, sizeof(ctx));
    spawn(ctx, 2, 4, 0);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(ctx[r].init_st, HOOP_ERR_MISMATCH);
        /* the shapes as they are written everywhere else: (16, 12), not a padded signature */
        ck_assert_msg(strstr(ctx[r].msg, "parameter 0 ('fc1.weight' on this rank) has shape "
                                         "(16, 12) on rank 0 but (17, 12) on rank 1"),
                      "message: %s", ctx[r].msg);
    }
}
END_TEST

// ----------------------------------------------------------------- plain hoop_backward

/* A PyTorch user's habit: loss.backward() is hoop_backward, which on wrapped parameters
 * would leave the gradients local (the ranks drift apart) and, right after init, start
 * bucket all-reduces nobody waits for. Nothing may be sent, and the next hoop_ddp_backward
 * (after its own round), hoop_ddp_wait and hoop_ddp_destroy each report it once. */
static void run_plain_backward(rank_ctx *c, hoop_comm *comm)
{
    hoop_model *m;
    ck_assert_int_eq(hoop_model_new_mlp(&m, mlp_sizes, 4, 7), HOOP_OK);
    hoop_tape *tape;
    hoop_tape_init(&tape);
    hoop_optim *opt = make_sgd(m);
    hoop_ddp *ddp;
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, hoop_model_params(m), 6, NULL), HOOP_OK);
    size_t first = (size_t)c->rank * B;
    uint64_t sent0 = hoop_comm_bytes_sent(comm);
    hoop_tensor *loss = forward_loss(m, tape, first, B);
    ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
    c->sent_steps = hoop_comm_bytes_sent(comm) - sent0;
    hoop_tape_reset(tape);
    loss = forward_loss(m, tape, first, B);
    hoop_optim_zero_grad(opt);
    c->step_st = hoop_ddp_backward(ddp, tape, loss);
    snprintf(c->msg, sizeof(c->msg), "%s", hoop_last_error());
    hoop_tape_reset(tape);
    loss = forward_loss(m, tape, first, B);
    c->again_st = hoop_ddp_backward(ddp, tape, loss); /* reported once: this one is fine */
    hoop_tape_reset(tape);
    loss = forward_loss(m, tape, first, B);
    ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
    c->wait_st = hoop_ddp_wait(ddp);
    snprintf(c->wait_msg, sizeof(c->wait_msg), "%s", hoop_last_error());
    hoop_tape_reset(tape);
    loss = forward_loss(m, tape, first, B);
    ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
    c->destroy_st = hoop_ddp_destroy(ddp);
    hoop_optim_free(opt);
    hoop_tape_destroy(tape);
    hoop_model_free(m);
}

START_TEST(test_plain_backward_is_refused)
{
    rank_ctx ctx[MAXP];
    memset(ctx, 0, sizeof(ctx));
    spawn(ctx, 2, 8, 0);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(ctx[r].sent_steps == 0, "rank %d: the plain pass sent %llu bytes", r,
                      (unsigned long long)ctx[r].sent_steps);
        ck_assert_int_eq(ctx[r].step_st, HOOP_ERR_USAGE);
        ck_assert_msg(strstr(ctx[r].msg, "hoop_ddp_backward: hoop_backward ran on parameters "
                                         "this hoop_ddp wraps ('fc3.bias' first)"),
                      "rank %d: %s", r, ctx[r].msg);
        ck_assert_int_eq(ctx[r].again_st, HOOP_OK);
        ck_assert_int_eq(ctx[r].wait_st, HOOP_ERR_USAGE);
        ck_assert_msg(strstr(ctx[r].wait_msg, "hoop_ddp_wait: hoop_backward ran"), "rank %d: %s", r,
                      ctx[r].wait_msg);
        ck_assert_int_eq(ctx[r].destroy_st, HOOP_ERR_USAGE);
    }
}
END_TEST

// ----------------------------------------------------------------- uneven inputs (join)

#define JOIN_STRIDE 12 /* steps reserved per epoch in the data layout (> any count) */

/* A join scenario: per-rank batch counts of epoch 0 (epoch 1 has one batch each). */
typedef struct join_case {
    int ws;
    int counts[MAXP];
    int divide_initial; /* cfg.divide_by_initial_world_size */
    int direct;         /* every bucket all-reduced by the direct algorithm */
    int error_on_uneven;
    int fail_step; /* rank 0's step function fails at this call (0: never) */
} join_case;

static const join_case join_cases[] = {
    {3, {10, 10, 11}, 1, 0, 0, 0}, /* the case */
    {3, {10, 10, 11}, 0, 0, 0, 0},
    {4, {3, 5, 4, 5}, 1, 1, 0, 0}, /* ranks join at different steps; direct */
    {4, {3, 5, 4, 5}, 0, 0, 0, 0},
    {2, {4, 4}, 1, 0, 0, 0}, /* even: one round of zeros, nothing answered */
    {2, {0, 3}, 0, 0, 0, 0}, /* a rank without any data */
};

static int join_batches(const join_case *jc, int epoch, int rank)
{
    return epoch == 0 ? jc->counts[rank] : 1;
}

static int join_max(const join_case *jc, int epoch)
{
    int m = 0;
    for (int r = 0; r < jc->ws; r++)
        m = join_batches(jc, epoch, r) > m ? join_batches(jc, epoch, r) : m;
    return m;
}

/* First sample of rank r's batch k in epoch e. */
static size_t join_first(const join_case *jc, int e, int k, int r)
{
    return ((size_t)(e * JOIN_STRIDE + k) * (size_t)jc->ws + (size_t)r) * B;
}

/* Forward + loss over the batches of nb ranks, concatenated (B samples each); y holds
 * nb * B labels and must live until backward has run (the loss keeps it). */
static hoop_tensor *forward_batches(hoop_model *m, hoop_tape *tape, const size_t *firsts, int nb,
                                    int32_t *y)
{
    int64_t shape[2] = {(int64_t)nb * B, IN};
    hoop_tensor *x, *logits, *loss;
    ck_assert_int_eq(hoop_tape_tensor_new(tape, 2, shape, &x), HOOP_OK);
    for (int i = 0; i < nb; i++) {
        memcpy(hoop_tensor_data(x) + (size_t)i * B * IN, data_x + firsts[i] * IN,
               B * IN * sizeof(float));
        memcpy(y + (size_t)i * B, data_y + firsts[i], B * sizeof(int32_t));
    }
    ck_assert_int_eq(hoop_model_forward(m, tape, x, &logits), HOOP_OK);
    ck_assert_int_eq(hoop_cross_entropy(tape, logits, y, 0.0f, &loss), HOOP_OK);
    return loss;
}

typedef struct join_step {
    hoop_optim *opt;
    int calls, fail_at;
} join_step;

static hoop_status join_step_fn(void *user)
{
    join_step *j = user;
    if (++j->calls == j->fail_at)
        return HOOP_ERROR(HOOP_ERR_SYSTEM, "test step function refuses call %d", j->calls);
    return hoop_optim_step(j->opt);
}

static void keep_first(rank_ctx *c, hoop_status st)
{
    if (st == HOOP_OK || c->join_st != HOOP_OK) return;
    c->join_st = st;
    snprintf(c->msg, sizeof(c->msg), "%s", hoop_last_error());
}

static void run_join(rank_ctx *c, hoop_comm *comm)
{
    const join_case *jc = c->jc;
    hoop_model *m;
    ck_assert_int_eq(hoop_model_new_mlp(&m, mlp_sizes, 4, 7 + (uint64_t)c->rank), HOOP_OK);
    hoop_tape *tape;
    hoop_tape_init(&tape);
    join_step js = {.opt = make_sgd(m), .fail_at = c->rank == 0 ? jc->fail_step : 0};
    hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
    dc.first_bucket_bytes = 256;
    dc.bucket_cap_bytes = 512;
    dc.divide_by_initial_world_size = jc->divide_initial;
    dc.error_on_uneven = jc->error_on_uneven;
    if (jc->direct) ck_assert_int_eq(hoop_comm_set_algo(comm, HOOP_ALGO_DIRECT), HOOP_OK);
    hoop_ddp *ddp;
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, hoop_model_params(m), 6, &dc), HOOP_OK);
    c->join_st = HOOP_OK;
    hoop_status st = HOOP_OK;
    for (int e = 0; e < 2 && st == HOOP_OK; e++) {
        for (int k = 0; k < join_batches(jc, e, c->rank) && st == HOOP_OK; k++) {
            size_t first = join_first(jc, e, k, c->rank);
            int32_t y[B];
            hoop_tensor *loss = forward_batches(m, tape, &first, 1, y);
            hoop_optim_zero_grad(js.opt);
            st = hoop_ddp_backward(ddp, tape, loss);
            hoop_tape_reset(tape);
            keep_first(c, st);
            if (st == HOOP_OK) ck_assert_int_eq(hoop_optim_step(js.opt), HOOP_OK);
        }
        if (st != HOOP_OK) break; /* error_on_uneven: every rank stops in this round */
        st = hoop_ddp_join(ddp, join_step_fn, &js);
        keep_first(c, st);
        if (st == HOOP_ERR_SYSTEM) st = HOOP_OK; /* the test's step failure: all joined */
    }
    hoop_ddp_get_stats(ddp, &c->stats);
    snapshot(m, c->params);
    ck_assert_int_eq(hoop_ddp_destroy(ddp), HOOP_OK);
    hoop_optim_free(js.opt);
    hoop_tape_destroy(tape);
    hoop_model_free(m);
}

/* One process: at each step the ranks that still have data contribute their batch; the
 * mean loss over those k batches gives sum / k, scaled by k / ws for divide_initial. */
static void join_reference(const join_case *jc, int divide_initial, float *out)
{
    hoop_model *m;
    ck_assert_int_eq(hoop_model_new_mlp(&m, mlp_sizes, 4, 7), HOOP_OK);
    hoop_tape *tape;
    hoop_tape_init(&tape);
    hoop_optim *opt = make_sgd(m);
    for (int e = 0; e < 2; e++) {
        for (int k = 0; k < join_max(jc, e); k++) {
            size_t firsts[MAXP];
            int nb = 0;
            for (int r = 0; r < jc->ws; r++)
                if (k < join_batches(jc, e, r)) firsts[nb++] = join_first(jc, e, k, r);
            int32_t y[MAXP * B];
            hoop_tensor *loss = forward_batches(m, tape, firsts, nb, y);
            hoop_optim_zero_grad(opt);
            ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
            float scale = divide_initial ? (float)nb / (float)jc->ws : 1.0f;
            for (size_t i = 0; i < hoop_model_param_count(m); i++) {
                hoop_tensor *p = hoop_model_param(m, i);
                for (size_t j = 0; j < hoop_tensor_count(p); j++) hoop_tensor_grad(p)[j] *= scale;
            }
            ck_assert_int_eq(hoop_optim_step(opt), HOOP_OK);
            hoop_tape_reset(tape);
        }
    }
    snapshot(m, out);
    hoop_optim_free(opt);
    hoop_tape_destroy(tape);
    hoop_model_free(m);
}

static void spawn_join(rank_ctx *ctx, const join_case *jc, size_t n)
{
    memset(ctx, 0, sizeof(*ctx) * MAXP);
    for (int r = 0; r < jc->ws; r++) {
        ctx[r].params = calloc(n, sizeof(float));
        ctx[r].jc = jc;
    }
    spawn(ctx, jc->ws, 5, jc->direct);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

/* Ranks with uneven batch counts finish together, bitwise equal, equal to the reference
 * of the configured divisor (and measurably different from the other divisor's). */
START_TEST(test_join_uneven)
{
    const join_case *jc = &join_cases[_i];
    size_t n = mlp_numel();
    rank_ctx ctx[MAXP];
    spawn_join(ctx, jc, n);
    float *ref = calloc(n, sizeof(float)), *other = calloc(n, sizeof(float));
    join_reference(jc, jc->divide_initial, ref);
    join_reference(jc, !jc->divide_initial, other);
    int maxc = join_max(jc, 0);
    for (int r = 0; r < jc->ws; r++) {
        ck_assert_msg(ctx[r].join_st == HOOP_OK, "rank %d: %s", r, ctx[r].msg);
        ck_assert_msg(memcmp(ctx[r].params, ctx[0].params, n * sizeof(float)) == 0,
                      "rank %d's parameters differ from rank 0's", r);
        /* Rounds answered inside join, and own steps in which some rank had joined. */
        ck_assert_int_eq(ctx[r].stats.joined_steps, maxc - jc->counts[r]);
        int uneven = 0;
        for (int k = 0; k < jc->counts[r]; k++) {
            int active = 0;
            for (int q = 0; q < jc->ws; q++) active += k < jc->counts[q];
            uneven += active < jc->ws;
        }
        ck_assert_int_eq(ctx[r].stats.uneven_steps, uneven);
        ck_assert_int_eq(ctx[r].stats.steps, jc->counts[r] + 1);
    }
    double d = max_abs_diff(ctx[0].params, ref, n);
    ck_assert_msg(d <= 1e-5, "case %d: max |join - reference| = %g", _i, d);
    int even = 1;
    for (int r = 1; r < jc->ws; r++) even &= jc->counts[r] == jc->counts[0];
    if (!even) /* the divisor matters, and the comparison can tell */
        ck_assert_msg(max_abs_diff(ref, other, n) > 1e-3, "the two divisors agree: %g",
                      max_abs_diff(ref, other, n));
    for (int r = 0; r < jc->ws; r++) free(ctx[r].params);
    free(ref);
    free(other);
}
END_TEST

/* error_on_uneven: the first uneven round fails on every rank, the joined one included. */
START_TEST(test_join_error_on_uneven)
{
    static const join_case uneven = {2, {2, 3}, 1, 0, 1, 0}, even = {2, {2, 2}, 1, 0, 1, 0};
    size_t n = mlp_numel();
    rank_ctx ctx[MAXP];
    spawn_join(ctx, &uneven, n);
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(ctx[r].join_st, HOOP_ERR_USAGE);
        ck_assert_msg(strstr(ctx[r].msg, "1 of 2 ranks ran out of data") &&
                          strstr(ctx[r].msg, "error_on_uneven"),
                      "rank %d: %s", r, ctx[r].msg);
        free(ctx[r].params);
    }
    ck_assert_int_eq(ctx[1].stats.steps, 3); /* its third backward was the failing round */
    spawn_join(ctx, &even, n);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(ctx[r].join_st == HOOP_OK, "rank %d: %s", r, ctx[r].msg);
        free(ctx[r].params);
    }
}
END_TEST

/* A failing step function: join still answers every round (nobody hangs) and reports
 * the failure at the end, on its rank only. */
START_TEST(test_join_step_fails)
{
    static const join_case jc = {3, {1, 4, 4}, 1, 0, 0, 2};
    size_t n = mlp_numel();
    rank_ctx ctx[MAXP];
    spawn_join(ctx, &jc, n);
    ck_assert_int_eq(ctx[0].join_st, HOOP_ERR_SYSTEM);
    ck_assert_msg(strstr(ctx[0].msg, "step function failed") && strstr(ctx[0].msg, "call 2"), "%s",
                  ctx[0].msg);
    ck_assert_int_eq(ctx[0].stats.joined_steps, 3);
    for (int r = 1; r < 3; r++)
        ck_assert_msg(ctx[r].join_st == HOOP_OK, "rank %d: %s", r, ctx[r].msg);
    ck_assert(memcmp(ctx[1].params, ctx[2].params, n * sizeof(float)) == 0);
    for (int r = 0; r < 3; r++) free(ctx[r].params);
}
END_TEST

// ----------------------------------------------------------------- reproducibility

/* Two runs with the same layout are bitwise equal; other bucket caps change the rounding
 * of the reduced gradients by at most the bound ddp.h documents. */
START_TEST(test_bucket_layout_rounding)
{
    const int ws = 4;
    size_t n = mlp_numel();
    static const size_t caps[3][2] = {{512, 256}, {512, 256}, {25u << 20, 1u << 20}};
    float *params[3], *grads[3];
    for (int v = 0; v < 3; v++) {
        rank_ctx ctx[MAXP];
        memset(ctx, 0, sizeof(ctx));
        for (int r = 0; r < ws; r++) {
            ctx[r].params = calloc(n, sizeof(float));
            ctx[r].grads0 = calloc(n, sizeof(float));
            ctx[r].cap = caps[v][0];
            ctx[r].first = caps[v][1];
            ctx[r].algo = 1 + HOOP_ALGO_RING; /* its order depends on an element's offset */
        }
        spawn(ctx, ws, 0, 0);
        params[v] = ctx[0].params;
        grads[v] = ctx[0].grads0;
        for (int r = 1; r < ws; r++) {
            free(ctx[r].params);
            free(ctx[r].grads0);
        }
    }
    ck_assert(memcmp(params[0], params[1], n * sizeof(float)) == 0);
    ck_assert(memcmp(grads[0], grads[1], n * sizeof(float)) == 0);
    /* The bound needs each rank's local first-step gradient: sum_r |g_r|. */
    double *abs_sum = calloc(n, sizeof(double));
    float *g = calloc(n, sizeof(float));
    for (int r = 0; r < ws; r++) {
        hoop_model *m;
        hoop_model_new_mlp(&m, mlp_sizes, 4, 7);
        hoop_tape *tape;
        hoop_tape_init(&tape);
        hoop_tensor *loss = forward_loss(m, tape, (size_t)r * B, B);
        hoop_model_zero_grad(m);
        ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
        snapshot_grads(m, g);
        for (size_t i = 0; i < n; i++) abs_sum[i] += fabs((double)g[i]);
        hoop_tape_destroy(tape);
        hoop_model_free(m);
    }
    int maxulp = 0;
    double maxrel = 0, maxk = 0; /* maxk: largest |a - b| / (2^-24 sum_r |g_r|) */
    for (size_t i = 0; i < n; i++) {
        double a = grads[0][i], b = grads[2][i];
        double bound = 2.0 * (ws - 1) * ldexp(1.0, -24) * abs_sum[i] / ws + ldexp(fabs(a), -23);
        ck_assert_msg(fabs(a - b) <= bound, "gradient %zu: %.9g vs %.9g, bound %g", i, a, b, bound);
        if (abs_sum[i] > 0) maxk = fmax(maxk, fabs(a - b) / (ldexp(1.0, -24) * abs_sum[i]));
        int32_t ia, ib;
        float fa = grads[0][i], fb = grads[2][i];
        memcpy(&ia, &fa, 4);
        memcpy(&ib, &fb, 4);
        if (abs(ia - ib) > maxulp && (ia ^ ib) >= 0) maxulp = abs(ia - ib);
        if (params[0][i] != 0)
            maxrel = fmax(maxrel, fabs((double)params[0][i] - params[2][i]) / fabs(params[0][i]));
    }
    printf("bucket caps 512/256 B vs 25 MiB/1 MiB, ring, %d ranks: first-step gradients differ "
           "by <= %.3f x 2^-24 sum_r |g_r| (%d ulp), parameters after %d steps by <= %.2g "
           "relative\n",
           ws, maxk, maxulp, STEPS, maxrel);
    for (int v = 0; v < 3; v++) {
        free(params[v]);
        free(grads[v]);
    }
    free(abs_sum);
    free(g);
}
END_TEST

// ----------------------------------------------------------------- bad arguments

static hoop_status noop_step(void *user)
{
    (void)user;
    return HOOP_OK;
}

/* Every public function of ddp.h with NULL and out-of-range arguments, on one rank. */
/* A gradient hook that destroys its hoop_ddp: what it returned, and its message. */
static hoop_status destroy_in_hook_st;
static char destroy_in_hook_msg[256];
static void destroy_in_hook(hoop_tensor *param, void *user)
{
    (void)param;
    destroy_in_hook_st = hoop_ddp_destroy(user);
    snprintf(destroy_in_hook_msg, sizeof(destroy_in_hook_msg), "%s", hoop_last_error());
}

static void run_bad_args(rank_ctx *c, hoop_comm *comm)
{
    (void)c;
    hoop_model *m;
    hoop_model_new_mlp(&m, mlp_sizes, 4, 7);
    hoop_tensor *const *p = hoop_model_params(m);
    hoop_ddp *ddp = (hoop_ddp *)m; /* must be reset to NULL on failure */
    ck_assert_int_eq(hoop_ddp_init(NULL, comm, p, 6, NULL), HOOP_ERR_INVALID);
    assert_error_has("out is NULL", NULL);
    ck_assert_int_eq(hoop_ddp_init(&ddp, NULL, p, 6, NULL), HOOP_ERR_INVALID);
    ck_assert_ptr_null(ddp);
    assert_error_has("comm is NULL", NULL);
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, NULL, 6, NULL), HOOP_ERR_INVALID);
    assert_error_has("params is NULL", NULL);
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, p, 0, NULL), HOOP_ERR_INVALID);
    assert_error_has("no parameters", NULL);
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, p, (size_t)INT_MAX + 1, NULL), HOOP_ERR_INVALID);
    assert_error_has("count=2147483648", NULL);
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, p, SIZE_MAX, NULL), HOOP_ERR_INVALID);
    hoop_tensor *list[3] = {p[0], NULL, p[1]};
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, list, 3, NULL), HOOP_ERR_INVALID);
    assert_error_has("parameter 1 (NULL)", NULL);
    int64_t shape[1] = {3};
    hoop_tensor *plain;
    ck_assert_int_eq(hoop_tensor_new(&plain, 1, shape, HOOP_DEVICE_CPU, 0), HOOP_OK);
    list[1] = plain;
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, list, 3, NULL), HOOP_ERR_INVALID);
    assert_error_has("parameter 1 (unnamed) is not a tensor with requires_grad", NULL);
    list[1] = p[2];
    list[2] = p[0];
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, list, 3, NULL), HOOP_ERR_INVALID);
    assert_error_has("listed twice (at 0 and 2)", "fc1.weight");
    static const char *const flags[] = {"broadcast_params", "error_on_unused",
                                        "divide_by_initial_world_size", "error_on_uneven"};
    for (int f = 0; f < 4; f++) {
        for (int v = -1; v <= 2; v += 3) {
            hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
            int *field[4] = {&dc.broadcast_params, &dc.error_on_unused,
                             &dc.divide_by_initial_world_size, &dc.error_on_uneven};
            *field[f] = v;
            ck_assert_int_eq(hoop_ddp_init(&ddp, comm, p, 6, &dc), HOOP_ERR_INVALID);
            ck_assert_ptr_null(ddp);
            assert_error_has(flags[f], v < 0 ? "=-1" : "=2");
        }
    }
    /* Huge bucket caps are valid: everything in one bucket (plus the 8 control bytes). */
    hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
    dc.bucket_cap_bytes = dc.first_bucket_bytes = SIZE_MAX;
    ck_assert_int_eq(hoop_ddp_init(&ddp, comm, p, 6, &dc), HOOP_OK);
    /* The same parameters wrapped twice: the second would steal the first's gradients. */
    hoop_ddp *twice = (hoop_ddp *)1;
    ck_assert_int_eq(hoop_ddp_init(&twice, comm, p + 2, 4, NULL), HOOP_ERR_INVALID);
    ck_assert_ptr_null(twice);
    assert_error_has("parameter 0 ('fc2.weight') is already wrapped by another hoop_ddp", NULL);
    hoop_ddp_stats st;
    hoop_ddp_get_stats(ddp, &st);
    ck_assert_int_eq(st.nbuckets, 1);
    ck_assert_uint_eq(st.bucket_bytes % 64, 8);
    hoop_tape *tape;
    hoop_tape_init(&tape);
    hoop_tensor *loss = forward_loss(m, tape, 0, B);
    ck_assert_int_eq(hoop_ddp_backward(NULL, tape, loss), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop_ddp_backward(ddp, NULL, loss), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop_ddp_backward(ddp, tape, NULL), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop_ddp_join(NULL, noop_step, NULL), HOOP_ERR_INVALID);
    assert_error_has("ddp is NULL", NULL);
    ck_assert_int_eq(hoop_ddp_join(ddp, NULL, NULL), HOOP_ERR_INVALID);
    assert_error_has("step is NULL", NULL);
    hoop_ddp_set_sync(ddp, 0);
    ck_assert_int_eq(hoop_ddp_join(ddp, noop_step, NULL), HOOP_ERR_USAGE);
    assert_error_has("no_sync", NULL);
    hoop_ddp_set_sync(ddp, 7); /* any non-zero value leaves no_sync */
    ck_assert_int_eq(hoop_ddp_backward(ddp, tape, loss), HOOP_OK);
    ck_assert_int_eq(hoop_ddp_join(ddp, noop_step, NULL), HOOP_OK); /* alone: one round */
    hoop_ddp_set_sync(NULL, 1);
    memset(&st, 0xff, sizeof(st));
    hoop_ddp_get_stats(NULL, &st);
    ck_assert_int_eq(st.steps, 0);
    ck_assert_int_eq(st.nbuckets, 0);
    hoop_ddp_get_stats(ddp, NULL);
    hoop_ddp_reset_stats(NULL);
    hoop_ddp_trace_event(NULL, "x", 0, 1);
    hoop_ddp_trace_event(ddp, NULL, 0, 1);
    hoop_ddp_trace_event(ddp, "backwards in time", 10, 1);
    ck_assert_int_eq(hoop_ddp_trace_enable(NULL, "/tmp/x"), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop_ddp_trace_flush(NULL), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop_ddp_trace_flush(ddp), HOOP_OK);
    ck_assert_int_eq(hoop_ddp_destroy(NULL), HOOP_OK);
    /* hoop_ddp_destroy from a gradient hook, inside hoop_ddp_backward: refused (it freed
     * the buckets the pass was using: a double free). */
    hoop_tape_reset(tape);
    loss = forward_loss(m, tape, 0, B);
    destroy_in_hook_st = HOOP_OK;
    ck_assert_int_eq(hoop_tensor_set_grad_hook(p[0], destroy_in_hook, ddp), HOOP_OK);
    ck_assert_int_eq(hoop_ddp_backward(ddp, tape, loss), HOOP_OK);
    ck_assert_int_eq(destroy_in_hook_st, HOOP_ERR_USAGE);
    ck_assert_msg(strstr(destroy_in_hook_msg, "inside hoop_ddp_backward") != NULL, "%s",
                  destroy_in_hook_msg);
    /* under no_sync too (that pass skipped the guard) */
    hoop_tape_reset(tape);
    loss = forward_loss(m, tape, 0, B);
    destroy_in_hook_st = HOOP_OK;
    hoop_ddp_set_sync(ddp, 0);
    ck_assert_int_eq(hoop_tensor_set_grad_hook(p[0], destroy_in_hook, ddp), HOOP_OK);
    ck_assert_int_eq(hoop_ddp_backward(ddp, tape, loss), HOOP_OK);
    ck_assert_int_eq(destroy_in_hook_st, HOOP_ERR_USAGE);
    hoop_ddp_set_sync(ddp, 1);
    /* The comm first, while the hoop_ddp lives: refused, nothing destroyed (its buckets
     * live in the comm's shared memory); the comm still works after. */
    ck_assert_int_eq(hoop_comm_destroy(comm), HOOP_ERR_USAGE);
    assert_error_has("1 hoop_ddp still uses this communicator", "call hoop_ddp_destroy first");
    float one = 1;
    ck_assert_int_eq(hoop_allreduce(comm, &one, &one, 1, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL),
                     HOOP_OK);
    ck_assert_int_eq(hoop_ddp_destroy(ddp), HOOP_OK);
    /* once that one is gone, the parameters may be wrapped again */
    ck_assert_int_eq(hoop_ddp_init(&twice, comm, p + 2, 4, NULL), HOOP_OK);
    ck_assert_int_eq(hoop_ddp_destroy(twice), HOOP_OK);
    hoop_tape_destroy(tape);
    hoop_tensor_free(plain);
    hoop_model_free(m);
}

START_TEST(test_bad_arguments)
{
    rank_ctx ctx[MAXP];
    memset(ctx, 0, sizeof(ctx));
    spawn(ctx, 1, 7, 0);
}
END_TEST

/* Ranks whose configurations differ fail together, naming the field and both values. */
static void run_config_mismatch(rank_ctx *c, hoop_comm *comm)
{
    hoop_model *m;
    hoop_model_new_mlp(&m, mlp_sizes, 4, 7);
    hoop_ddp_config dc = HOOP_DDP_CONFIG_INIT;
    if (c->rank == 1 && c->cap == 0) dc.divide_by_initial_world_size = 0;
    if (c->rank == 1 && c->cap) dc.bucket_cap_bytes = c->cap;
    hoop_ddp *ddp = NULL;
    c->init_st = hoop_ddp_init(&ddp, comm, hoop_model_params(m), 6, &dc);
    snprintf(c->msg, sizeof(c->msg), "%s", hoop_last_error());
    ck_assert_ptr_null(ddp);
    hoop_model_free(m);
}

START_TEST(test_config_mismatch)
{
    rank_ctx ctx[MAXP];
    memset(ctx, 0, sizeof(ctx));
    ctx[0].cap = ctx[1].cap = _i ? 4096 : 0;
    spawn(ctx, 2, 6, 0);
    const char *want = _i ? "rank 0 has bucket_cap_bytes=26214400 but rank 1 has 4096"
                          : "rank 0 has divide_by_initial_world_size=1 but rank 1 has 0";
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(ctx[r].init_st, HOOP_ERR_MISMATCH);
        ck_assert_msg(strstr(ctx[r].msg, want), "rank %d: %s", r, ctx[r].msg);
    }
}
END_TEST

static void *rank_main(void *arg)
{
    rank_ctx *c = arg;
    hoop_comm *comm = make_comm(c);
    ck_assert_msg(c->st == HOOP_OK, "comm init: %s", hoop_last_error());
    switch (c->mode) {
    case 0: run_equivalence(c, comm); break;
    case 1: run_unused(c, comm); break;
    case 2: run_no_sync(c, comm); break;
    case 3: run_trace(c, comm); break;
    case 4: run_mismatch(c, comm); break;
    case 5: run_join(c, comm); break;
    case 6: run_config_mismatch(c, comm); break;
    case 8: run_plain_backward(c, comm); break;
    default: run_bad_args(c, comm); break;
    }
    ck_assert_int_eq(hoop_comm_destroy(comm), HOOP_OK);
    return NULL;
}

int main(void)
{
    openblas_set_num_threads(1);
    make_data();
    Suite *s = suite_create("ddp");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_equivalence, 0, 4);
    tcase_add_loop_test(tc, test_unused_parameter, 0, 3);
    tcase_add_test(tc, test_no_sync_accumulation);
    tcase_add_test(tc, test_trace_shows_overlap);
    tcase_add_test(tc, test_trace_not_a_file);
    tcase_add_test(tc, test_shape_mismatch);
    tcase_add_test(tc, test_plain_backward_is_refused);
    tcase_add_test(tc, test_bucket_layout_rounding);
    suite_add_tcase(s, tc);
    tc = tcase_create("join");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_join_uneven, 0, (int)(sizeof(join_cases) / sizeof(join_cases[0])));
    tcase_add_test(tc, test_join_error_on_uneven);
    tcase_add_test(tc, test_join_step_fails);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_loop_test(tc, test_config_mismatch, 0, 2);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
