/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_ops_grad.c -- every op's backward against central finite differences, with
 * leaf and with non-leaf inputs, on an arena poisoned with NaN.
 *
 * One checker (grad_error) serves all ops. For an op y = f(x_1..x_k) it draws fixed random
 * weights R (y's shape) and S_j (x_j's shapes) and differentiates, with respect to
 * parameters p_j, a loss L = sum(y * R) [+ sum_j sum(x_j * S_j)], in three modes:
 *   - leaf:    x_j = p_j, the parameters themselves (their gradients are accumulated);
 *   - nonleaf: x_j = p_j + 0, made by hoop_add, so x_j's gradient is an activation
 *              gradient in the arena and f's backward gives its FIRST contribution: it
 *              must write, not add;
 *   - reused:  as nonleaf, and each x_j is also consumed by a second op recorded AFTER f
 *              (the sum(x_j * S_j) term), which runs first in backward: f's backward then
 *              gives a LATER contribution and must add, not write.
 * Every tape's arena is poisoned (hoop__tape_poison: each allocation filled with NaN), so
 * a backward that adds into a gradient it should have written, or a forward that reads
 * output memory before writing it, gives NaN instead of passing on zeroed fresh memory.
 * Ops that take one tensor twice (add, matmul, linear, conv2d on themselves) are also
 * checked that way, which exercises write-then-add inside one backward.
 *
 * The analytic gradient is p_j's grad after hoop_backward(L). The numeric one is
 * (L(p + h e_i) - L(p - h e_i)) / (p_i+ - p_i-) for EVERY element i of every input, h =
 * 1e-3, with L evaluated in float64 from f's f32 output (recording off, also poisoned);
 * the ops compute in f32, so inputs are small and well conditioned, and the bound is
 * |analytic - numeric| <= 1e-2 * max(0.1, |numeric|), NaN failing (the maximum relative
 * error seen is printed per case). Inputs of kinked ops (relu, max-pool) are distinct
 * multiples of 0.05 offset from 0, so a +-h step never crosses a kink or changes an argmax.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
#include "autograd/kern.h"
#include "core/check.h"
#include "hoop/autograd.h"
#include "hoop/nn.h"
#include "run_suite.h"

#define MAX_IN 3
#define EPS 1e-3

typedef hoop_status (*op_fn)(hoop_tape *tape, hoop_tensor **in, hoop_tensor **out);

struct gcase {
    const char *name;
    op_fn fn;
    int nin;
    int ndim[MAX_IN];
    int64_t shape[MAX_IN][4];
    int spaced; /* 1: distinct, spaced values (kinked ops) */
};

// ----- the ops under test, adapted to one signature ---------------------------------------------

static const int32_t LABELS[5] = {1, 0, 3, 2, 3};

static hoop_status f_matmul(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_matmul(t, in[0], in[1], o);
}
static hoop_status f_linear(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_linear(t, in[0], in[1], in[2], o);
}
static hoop_status f_linear_nobias(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_linear(t, in[0], in[1], NULL, o);
}
static hoop_status f_add(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_add(t, in[0], in[1], o);
}
static hoop_status f_add_self(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_add(t, in[0], in[0], o);
}
static hoop_status f_bias_add(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_bias_add(t, in[0], in[1], o);
}
static hoop_status f_relu(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_relu(t, in[0], o);
}
static hoop_status f_gelu(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_gelu(t, in[0], o);
}
static hoop_status f_tanh(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_tanh(t, in[0], o);
}
static hoop_status f_sigmoid(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_sigmoid(t, in[0], o);
}
static hoop_status f_softmax(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_softmax(t, in[0], o);
}
static hoop_status f_ce(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_cross_entropy(t, in[0], LABELS, 0.0f, o);
}
static hoop_status f_ce_smooth(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_cross_entropy(t, in[0], LABELS, 0.2f, o);
}
static hoop_status f_mean(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_mean(t, in[0], o);
}
static hoop_status f_sum(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_sum(t, in[0], o);
}
static hoop_status f_reshape(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    const int64_t shape[3] = {3, -1, 2};
    hoop_tensor *y;
    hoop_status st = hoop_reshape(t, in[0], 3, shape, &y);
    return st ? st : hoop_tanh(t, y, o); /* a non-linear consumer of the view */
}
static hoop_status f_flatten(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    hoop_tensor *y;
    hoop_status st = hoop_flatten(t, in[0], &y);
    return st ? st : hoop_sigmoid(t, y, o);
}
/* x used three times (through a view, an activation and directly): accumulation paths. */
static hoop_status f_reuse(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    hoop_tensor *a, *b, *v, *vb;
    const int64_t shape[2] = {4, 3};
    hoop_status st = hoop_tanh(t, in[0], &a);
    if (!st) st = hoop_add(t, a, in[0], &b);
    if (!st) st = hoop_reshape(t, b, 2, shape, &v);
    if (!st) st = hoop_reshape(t, in[0], 2, shape, &vb);
    if (!st) st = hoop_add(t, v, vb, &v);
    return st ? st : hoop_gelu(t, v, o);
}
static hoop_status f_conv(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_conv2d(t, in[0], in[1], in[2], 1, 0, o);
}
static hoop_status f_conv_s1p1(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_conv2d(t, in[0], in[1], in[2], 1, 1, o);
}
static hoop_status f_conv_s2p1(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_conv2d(t, in[0], in[1], in[2], 2, 1, o);
}
static hoop_status f_conv_nobias_p2(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_conv2d(t, in[0], in[1], NULL, 3, 2, o);
}
static hoop_status f_pool(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_max_pool2d(t, in[0], 2, 2, o);
}
static hoop_status f_pool_overlap(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_max_pool2d(t, in[0], 3, 1, o);
}
/* One tensor in two argument slots: the second contribution adds to the first. */
static hoop_status f_matmul_self(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_matmul(t, in[0], in[0], o);
}
static hoop_status f_linear_self(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_linear(t, in[0], in[0], NULL, o); /* x @ x^T */
}
static hoop_status f_conv_self(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return hoop_conv2d(t, in[0], in[0], NULL, 1, 1, o); /* x as its own (N, C, H, W) kernel */
}
static hoop_status f_dropout(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    hoop_tape_seed(t, 1234); /* the same mask for every evaluation */
    return hoop_dropout(t, in[0], 0.4f, o);
}

/* clang-format off */
static const struct gcase CASES[] = {
    {"matmul", f_matmul, 2, {2, 2}, {{3, 4}, {4, 5}}, 0},
    {"linear", f_linear, 3, {2, 2, 1}, {{3, 4}, {5, 4}, {5}}, 0},
    {"linear_nobias", f_linear_nobias, 2, {2, 2}, {{2, 3}, {4, 3}}, 0},
    {"add", f_add, 2, {3, 3}, {{2, 3, 2}, {2, 3, 2}}, 0},
    {"add_self", f_add_self, 1, {2}, {{3, 3}}, 0},
    {"matmul_self", f_matmul_self, 1, {2}, {{3, 3}}, 0},
    {"linear_self", f_linear_self, 1, {2}, {{3, 4}}, 0},
    {"conv2d_self", f_conv_self, 1, {4}, {{2, 2, 3, 3}}, 0},
    {"bias_add_2d", f_bias_add, 2, {2, 1}, {{3, 4}, {4}}, 0},
    {"bias_add_4d", f_bias_add, 2, {4, 1}, {{2, 3, 2, 2}, {3}}, 0},
    {"relu", f_relu, 1, {2}, {{4, 5}}, 1},
    {"gelu", f_gelu, 1, {2}, {{4, 5}}, 0},
    {"tanh", f_tanh, 1, {2}, {{4, 5}}, 0},
    {"sigmoid", f_sigmoid, 1, {2}, {{4, 5}}, 0},
    {"softmax", f_softmax, 1, {3}, {{2, 3, 5}}, 0},
    {"cross_entropy", f_ce, 1, {2}, {{5, 4}}, 0},
    {"cross_entropy_smooth", f_ce_smooth, 1, {2}, {{5, 4}}, 0},
    {"mean", f_mean, 1, {3}, {{2, 3, 4}}, 0},
    {"sum", f_sum, 1, {2}, {{3, 4}}, 0},
    {"reshape", f_reshape, 1, {2}, {{4, 3}}, 0},
    {"flatten", f_flatten, 1, {4}, {{2, 2, 3, 2}}, 0},
    {"reuse", f_reuse, 1, {2}, {{3, 4}}, 0},
    {"conv2d", f_conv, 3, {4, 4, 1}, {{2, 2, 4, 5}, {3, 2, 3, 2}, {3}}, 0},
    {"conv2d_s1p1", f_conv_s1p1, 3, {4, 4, 1}, {{2, 3, 4, 4}, {2, 3, 3, 3}, {2}}, 0},
    {"conv2d_s2p1", f_conv_s2p1, 3, {4, 4, 1}, {{2, 2, 5, 5}, {3, 2, 3, 3}, {3}}, 0},
    {"conv2d_nobias_s3p2", f_conv_nobias_p2, 2, {4, 4}, {{1, 2, 6, 5}, {2, 2, 2, 3}}, 0},
    {"max_pool2d", f_pool, 1, {4}, {{2, 2, 4, 6}}, 1},
    {"max_pool2d_overlap", f_pool_overlap, 1, {4}, {{1, 2, 5, 5}}, 1},
    {"dropout", f_dropout, 1, {2}, {{6, 7}}, 0},
};
/* clang-format on */

// ----- the checker ------------------------------------------------------------------------------

/* Spaced, distinct values: a shuffled ladder k * 0.05 + 0.025 around 0. */
static void fill_input(hoop_tensor *t, hoop_rng *rng, int spaced)
{
    float *p = hoop_tensor_data(t);
    const size_t n = hoop_tensor_count(t);
    if (!spaced) {
        hoop_init_uniform(t, -1.0f, 1.0f, rng);
        return;
    }
    for (size_t i = 0; i < n; i++) p[i] = ((float)i - (float)n / 2) * 0.05f + 0.025f;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(hoop_rng_next(rng) % (i + 1));
        float tmp = p[i];
        p[i] = p[j];
        p[j] = tmp;
    }
}

enum mode { LEAF, NONLEAF, REUSED, NMODES };
static const char *const MODE_NAME[NMODES] = {"leaf", "nonleaf", "reused"};

/* The fixed weights of one check: R for y, S[j] for input j. */
struct weights {
    float *R, *S[MAX_IN];
};

/* A test-only scalar op: sum(x * w) (w not differentiated), with the accumulate contract
 * of autograd_impl.h. It is the second consumer of the inputs in REUSED mode. */
static hoop_status wsum_backward(hoop_tape *tape, struct hoop_node *n)
{
    int acc;
    float *dx;
    HOOP_CHECK(hoop__grad_for(tape, n->in[0], &dx, &acc));
    if (dx == NULL) return HOOP_OK;
    const float g = n->out->grad[0], *w = n->saved;
    for (size_t i = 0; i < n->in[0]->count; i++) dx[i] = (acc ? dx[i] : 0.0f) + g * w[i];
    return HOOP_OK;
}

static hoop_status wsum(hoop_tape *t, hoop_tensor *x, const float *w, hoop_tensor **o)
{
    struct hoop_node *n;
    HOOP_CHECK(hoop__tensor_arena(t, HOOP_DEVICE_CPU, 0, NULL, o));
    double acc = 0.0;
    for (size_t i = 0; i < x->count; i++) acc += (double)x->data[i] * w[i];
    (*o)->data[0] = (float)acc;
    HOOP_CHECK(hoop__tape_record(t, "wsum", wsum_backward, &hoop__kern_cpu, &x, 1, *o, &n));
    if (n) n->saved = (void *)w;
    return HOOP_OK;
}

/* A poisoned tape, recording or not. */
static hoop_tape *new_tape(int record)
{
    hoop_tape *tape;
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    hoop__tape_poison(tape, 1);
    hoop_tape_set_grad_enabled(tape, record);
    return tape;
}

/* L in float64 from the forward pass alone (recording off): x_j = p_j in every mode. */
static double eval_loss(const struct gcase *c, hoop_tensor **p, const struct weights *w, int mode)
{
    hoop_tape *tape = new_tape(0);
    hoop_tensor *y;
    ck_assert_int_eq(c->fn(tape, p, &y), HOOP_OK);
    double L = 0.0;
    for (size_t i = 0; i < hoop_tensor_count(y); i++) L += (double)hoop_tensor_data(y)[i] * w->R[i];
    for (int k = 0; mode == REUSED && k < c->nin; k++)
        for (size_t i = 0; i < hoop_tensor_count(p[k]); i++)
            L += (double)hoop_tensor_data(p[k])[i] * w->S[k][i];
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
    return L;
}

/* Records L on tape for mode and runs backward: afterwards p_j's grad is dL/dp_j. */
static void analytic(const struct gcase *c, hoop_tensor **p, const struct weights *w, int mode)
{
    hoop_tape *tape = new_tape(1);
    hoop_tensor *x[MAX_IN], *zero[MAX_IN] = {NULL}, *y, *L, *t;
    for (int k = 0; k < c->nin; k++) {
        x[k] = p[k];
        if (mode == LEAF) continue;
        ck_assert_int_eq(hoop_tensor_new(&zero[k], c->ndim[k], c->shape[k], HOOP_DEVICE_CPU, 0),
                         HOOP_OK);
        ck_assert_int_eq(hoop_add(tape, p[k], zero[k], &x[k]), HOOP_OK); /* p + 0, in the arena */
    }
    ck_assert_int_eq(c->fn(tape, x, &y), HOOP_OK);
    ck_assert_int_eq(wsum(tape, y, w->R, &L), HOOP_OK);
    for (int k = 0; mode == REUSED && k < c->nin; k++) { /* recorded after f: runs first */
        ck_assert_int_eq(wsum(tape, x[k], w->S[k], &t), HOOP_OK);
        ck_assert_int_eq(hoop_add(tape, L, t, &L), HOOP_OK);
    }
    ck_assert_int_eq(hoop_backward(tape, L), HOOP_OK);
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
    for (int k = 0; k < c->nin; k++) hoop_tensor_free(zero[k]);
}

static double compare_input(const struct gcase *c, hoop_tensor **p, int k, const struct weights *w,
                            int mode)
{
    double worst = 0.0;
    float *x = hoop_tensor_data(p[k]);
    const float *g = hoop_tensor_grad(p[k]);
    for (size_t i = 0; i < hoop_tensor_count(p[k]); i++) {
        const float saved = x[i], xp = saved + (float)EPS, xm = saved - (float)EPS;
        x[i] = xp;
        const double lp = eval_loss(c, p, w, mode);
        x[i] = xm;
        const double lm = eval_loss(c, p, w, mode);
        x[i] = saved;
        const double num = (lp - lm) / ((double)xp - (double)xm), ana = g[i];
        const double err = fabs(ana - num) / fmax(0.1, fabs(num));
        if (!(err <= 1e-2) && worst <= 1e-2)
            printf("%s (%s): input %d element %zu: analytic %.7g, numeric %.7g\n", c->name,
                   MODE_NAME[mode], k, i, ana, num);
        worst = err <= worst ? worst : isnan(err) ? INFINITY : err; /* NaN fails */
    }
    return worst;
}

/* Returns the largest relative error over every element of every input. */
static double grad_error(const struct gcase *c, int mode)
{
    hoop_rng rng;
    hoop_rng_seed(&rng, 17);
    hoop_tensor *p[MAX_IN] = {NULL};
    struct weights w = {NULL, {NULL}};
    for (int k = 0; k < c->nin; k++) {
        ck_assert_int_eq(hoop_tensor_new(&p[k], c->ndim[k], c->shape[k], HOOP_DEVICE_CPU, 1),
                         HOOP_OK);
        fill_input(p[k], &rng, c->spaced);
        w.S[k] = malloc(hoop_tensor_count(p[k]) * sizeof(float));
        for (size_t i = 0; i < hoop_tensor_count(p[k]); i++)
            w.S[k][i] = 2.0f * hoop_rng_uniform(&rng) - 1.0f;
    }
    hoop_tape *tape = new_tape(0);
    hoop_tensor *y;
    ck_assert_int_eq(c->fn(tape, p, &y), HOOP_OK); /* y's size, for R */
    w.R = malloc(hoop_tensor_count(y) * sizeof(float));
    for (size_t i = 0; i < hoop_tensor_count(y); i++) w.R[i] = 2.0f * hoop_rng_uniform(&rng) - 1.0f;
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
    analytic(c, p, &w, mode);
    double worst = 0.0;
    for (int k = 0; k < c->nin; k++) worst = fmax(worst, compare_input(c, p, k, &w, mode));
    printf("grad_check %-22s %-8s max relative error %.2e\n", c->name, MODE_NAME[mode], worst);
    free(w.R);
    for (int k = 0; k < c->nin; k++) {
        free(w.S[k]);
        hoop_tensor_free(p[k]);
    }
    return worst;
}

#define NCASES ((int)(sizeof(CASES) / sizeof(CASES[0])))

START_TEST(test_grad)
{
    const struct gcase *c = &CASES[_i / NMODES];
    const int mode = _i % NMODES;
    const double worst = grad_error(c, mode);
    ck_assert_msg(worst <= 1e-2, "%s (%s inputs): max relative error %.3g > 1e-2", c->name,
                  MODE_NAME[mode], worst);
}
END_TEST

// ----- the checker must be able to fail -----------------------------------------------------

/* Deliberately wrong ops, y = x forward; in[0]->ndim etc. as any op. */
enum bad_kind { BAD_DOUBLE, BAD_ALWAYS_ADD, BAD_ALWAYS_WRITE };

static hoop_status bad_backward(hoop_tape *tape, struct hoop_node *n)
{
    int acc;
    float *dx;
    HOOP_CHECK(hoop__grad_for(tape, n->in[0], &dx, &acc));
    if (dx == NULL) return HOOP_OK;
    const enum bad_kind kind = (enum bad_kind)(intptr_t)n->saved;
    if (kind == BAD_ALWAYS_ADD) acc = 1;   /* adds into memory it should have written */
    if (kind == BAD_ALWAYS_WRITE) acc = 0; /* overwrites an earlier contribution */
    const float scale = kind == BAD_DOUBLE ? 2.0f : 1.0f;
    for (size_t i = 0; i < n->out->count; i++)
        dx[i] = (acc ? dx[i] : 0.0f) + scale * n->out->grad[i];
    return HOOP_OK;
}

static hoop_status f_bad(hoop_tape *t, hoop_tensor **in, hoop_tensor **o, enum bad_kind kind)
{
    struct hoop_node *n;
    HOOP_CHECK(hoop__tensor_arena(t, HOOP_DEVICE_CPU, in[0]->ndim, in[0]->shape, o));
    memcpy((*o)->data, in[0]->data, in[0]->count * sizeof(float));
    HOOP_CHECK(hoop__tape_record(t, "bad", bad_backward, &hoop__kern_cpu, in, 1, *o, &n));
    if (n) n->saved = (void *)(intptr_t)kind;
    return HOOP_OK;
}
static hoop_status f_bad_double(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return f_bad(t, in, o, BAD_DOUBLE);
}
static hoop_status f_bad_add(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return f_bad(t, in, o, BAD_ALWAYS_ADD);
}
static hoop_status f_bad_write(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    return f_bad(t, in, o, BAD_ALWAYS_WRITE);
}

/* A wrong gradient is caught in every mode. */
START_TEST(test_checker_detects_wrong_gradient)
{
    const struct gcase bad = {"bad_double", f_bad_double, 1, {2}, {{3, 3}}, 0};
    for (int mode = 0; mode < NMODES; mode++) ck_assert_double_gt(grad_error(&bad, mode), 0.5);
}
END_TEST

/* A backward that adds where it must write passes with leaf inputs (a parameter's gradient
 * is accumulated) and fails with non-leaf ones on the poisoned arena: the defect that the
 * leaf-only check, on zeroed fresh memory, could not see. */
START_TEST(test_checker_detects_add_instead_of_write)
{
    const struct gcase bad = {"bad_always_add", f_bad_add, 1, {2}, {{3, 3}}, 0};
    ck_assert_double_le(grad_error(&bad, LEAF), 1e-2);
    ck_assert_double_gt(grad_error(&bad, NONLEAF), 0.5);
}
END_TEST

/* A backward that writes where it must add passes with leaf inputs (their gradient starts
 * at zero) and with a sole consumer, and fails when the input is used again. */
START_TEST(test_checker_detects_write_instead_of_add)
{
    const struct gcase bad = {"bad_always_write", f_bad_write, 1, {2}, {{3, 3}}, 0};
    ck_assert_double_le(grad_error(&bad, LEAF), 1e-2);
    ck_assert_double_le(grad_error(&bad, NONLEAF), 1e-2);
    ck_assert_double_gt(grad_error(&bad, REUSED), 0.5);
}
END_TEST

/* The poison itself: arena memory handed out is NaN, not zero. */
START_TEST(test_arena_poison)
{
    hoop_tape *tape = new_tape(1);
    const int64_t shape[1] = {1000};
    hoop_tensor *t;
    ck_assert_int_eq(hoop_tape_tensor_new(tape, 1, shape, &t), HOOP_OK);
    for (size_t i = 0; i < 1000; i++) ck_assert(isnan(hoop_tensor_data(t)[i]));
    hoop_tape_reset(tape); /* reused memory is poisoned again */
    hoop_tensor_fill(t, 0.0f);
    ck_assert_int_eq(hoop_tape_tensor_new(tape, 1, shape, &t), HOOP_OK);
    ck_assert(isnan(hoop_tensor_data(t)[999]));
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ops_grad");
    TCase *tc = tcase_create("finite_differences");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_grad, 0, NCASES * NMODES);
    tcase_add_test(tc, test_checker_detects_wrong_gradient);
    tcase_add_test(tc, test_checker_detects_add_instead_of_write);
    tcase_add_test(tc, test_checker_detects_write_instead_of_add);
    tcase_add_test(tc, test_arena_poison);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
