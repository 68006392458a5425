/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_ddp.c -- DDP against single-process training, as ranks in threads.
 *
 * Ranks are threads of this process meeting through an in-process rendezvous and
 * talking over loopback TCP. The reference for equivalence is one process training the
 * same model on the concatenated batch (P x B samples); the reference for no_sync is a
 * float64 average of plain (non-DDP) local gradient sums.
 */
#include <cblas.h>
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
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

// ----------------------------------------------------------------- rank threads

typedef struct rank_ctx {
    int rank, world_size;
    hoop_rendezvous *rv;
    int mode;            /* 0 equivalence, 1 unused param, 2 no_sync, 3 trace, 4 shape mismatch */
    int direct;          /* equivalence: every bucket all-reduced by the direct algorithm */
    uint64_t sent_steps; /* equivalence: bytes this rank sent during the training steps */
    int error_on_unused;
    const char *trace_path;
    hoop_status st, init_st, step_st;
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
    dc.first_bucket_bytes = 256; /* several buckets even for this small model */
    dc.bucket_cap_bytes = 512;
    hoop_ddp *ddp;
    /* direct: the buckets are shared memory, so every bucket's all-reduce skips the links */
    if (c->direct) ck_assert_int_eq(hoop_comm_set_algo(comm, HOOP_ALGO_DIRECT), HOOP_OK);
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

/* Rank 0 uses w2 in its loss, the others do not. */
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
    dc.error_on_unused = c->error_on_unused;
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
    ck_assert_int_eq(ctx[0].step_st, HOOP_OK);
    if (_i) {
        ck_assert_int_eq(ctx[1].step_st, HOOP_ERR_USAGE);
        ck_assert_msg(strstr(ctx[1].msg, "'w2'") != NULL, "message: %s", ctx[1].msg);
    } else {
        ck_assert_int_eq(ctx[1].step_st, HOOP_OK);
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
    ck_assert_int_eq(hoop_ddp_trace_flush(ddp), HOOP_OK);
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
        ck_assert_msg(strstr(ctx[r].msg, "fc1.weight") && strstr(ctx[r].msg, "rank 1"),
                      "message: %s", ctx[r].msg);
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
    default: run_mismatch(c, comm); break;
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
    tcase_add_loop_test(tc, test_unused_parameter, 0, 2);
    tcase_add_test(tc, test_no_sync_accumulation);
    tcase_add_test(tc, test_trace_shows_overlap);
    tcase_add_test(tc, test_shape_mismatch);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
