/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_ops_grad.c -- every op's backward against central finite differences.
 *
 * One checker (grad_check) serves all ops. For an op y = f(x_1..x_k) it draws a fixed
 * random weight R of y's shape and sets L = sum(y * R), accumulated in float64. The
 * analytic gradient comes from a backward pass seeded with dL/dy = R. The numeric one is
 * (L(x + eps e_i) - L(x - eps e_i)) / (2 eps) for EVERY element i of every input, with
 * eps = 1e-3; the ops compute in f32, so inputs are small and well conditioned, and the
 * bound is |analytic - numeric| <= 1e-2 * max(0.1, |numeric|) (the maximum relative error
 * seen is printed per case). Inputs of kinked ops (relu, max-pool) are distinct multiples
 * of 0.05 offset from 0, so a +-eps step never crosses a kink or changes an argmax.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd_impl.h"
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

/* L = sum(y * R) in double, with recording off. */
static double eval_loss(const struct gcase *c, hoop_tensor **in, const float *R)
{
    hoop_tape *tape;
    hoop_tensor *y;
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    hoop_tape_set_grad_enabled(tape, 0);
    ck_assert_int_eq(c->fn(tape, in, &y), HOOP_OK);
    double L = 0.0;
    for (size_t i = 0; i < hoop_tensor_count(y); i++) L += (double)hoop_tensor_data(y)[i] * R[i];
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
    return L;
}

static double compare_input(const struct gcase *c, hoop_tensor **in, int k, const float *R)
{
    double worst = 0.0;
    float *x = hoop_tensor_data(in[k]);
    const float *g = hoop_tensor_grad(in[k]);
    for (size_t i = 0; i < hoop_tensor_count(in[k]); i++) {
        const float saved = x[i];
        x[i] = saved + (float)EPS;
        const double lp = eval_loss(c, in, R);
        x[i] = saved - (float)EPS;
        const double lm = eval_loss(c, in, R);
        x[i] = saved;
        const double num = (lp - lm) / (2 * EPS), ana = g[i];
        const double err = fabs(ana - num) / fmax(0.1, fabs(num));
        if (err > 1e-2 && worst <= 1e-2)
            printf("%s: input %d element %zu: analytic %.7g, numeric %.7g\n", c->name, k, i, ana,
                   num);
        worst = fmax(worst, err);
    }
    return worst;
}

/* Returns the largest relative error over every element of every input. */
static double grad_error(const struct gcase *c)
{
    hoop_rng rng;
    hoop_rng_seed(&rng, 17);
    hoop_tensor *in[MAX_IN] = {NULL};
    for (int k = 0; k < c->nin; k++) {
        ck_assert_int_eq(hoop_tensor_new(&in[k], c->ndim[k], c->shape[k], HOOP_DEVICE_CPU, 1),
                         HOOP_OK);
        fill_input(in[k], &rng, c->spaced);
    }
    hoop_tape *tape;
    hoop_tensor *y;
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    ck_assert_int_eq(c->fn(tape, in, &y), HOOP_OK);
    float *R = malloc(hoop_tensor_count(y) * sizeof(float));
    for (size_t i = 0; i < hoop_tensor_count(y); i++) R[i] = 2.0f * hoop_rng_uniform(&rng) - 1.0f;
    ck_assert_int_eq(hoop__backward_from(tape, y, R), HOOP_OK);
    double worst = 0.0;
    for (int k = 0; k < c->nin; k++) worst = fmax(worst, compare_input(c, in, k, R));
    printf("grad_check %-22s max relative error %.2e\n", c->name, worst);
    free(R);
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
    for (int k = 0; k < c->nin; k++) hoop_tensor_free(in[k]);
    return worst;
}

START_TEST(test_grad)
{
    const double worst = grad_error(&CASES[_i]);
    ck_assert_msg(worst <= 1e-2, "%s: max relative error %.3g > 1e-2", CASES[_i].name, worst);
}
END_TEST

/* A deliberately wrong op: y = x forward, dx = 2 dy backward. */
static void bad_backward(hoop_tape *tape, struct hoop_node *n)
{
    int acc;
    float *dx = hoop__grad_for(tape, n->in[0], &acc);
    for (size_t i = 0; i < n->out->count; i++)
        dx[i] = (acc ? dx[i] : 0.0f) + 2.0f * n->out->grad[i];
}

static hoop_status f_bad(hoop_tape *t, hoop_tensor **in, hoop_tensor **o)
{
    HOOP_CHECK(hoop__tensor_arena(t, in[0]->ndim, in[0]->shape, o));
    memcpy((*o)->data, in[0]->data, in[0]->count * sizeof(float));
    return hoop__tape_record(t, "bad", bad_backward, in, 1, *o, NULL);
}

/* The checker itself must be able to fail: the wrong gradient above is caught. */
START_TEST(test_checker_detects_wrong_gradient)
{
    const struct gcase bad = {"bad", f_bad, 1, {2}, {{3, 3}}, 0};
    ck_assert_double_gt(grad_error(&bad), 0.5);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ops_grad");
    TCase *tc = tcase_create("finite_differences");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_grad, 0, (int)(sizeof(CASES) / sizeof(CASES[0])));
    tcase_add_test(tc, test_checker_detects_wrong_gradient);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
