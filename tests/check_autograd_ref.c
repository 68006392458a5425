/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_autograd_ref.c -- end-to-end values against PyTorch 1.13.
 *
 * tests/ref/make_ref.py computed, with torch, the logits, loss and gradients of a fixed
 * 2-layer MLP (with and without label smoothing), of a conv2d + gelu + max-pool +
 * tanh + sigmoid + mean chain, and 10 steps of SGD (momentum + Nesterov + weight decay;
 * momentum + dampening) and AdamW on the MLP. The values are frozen in tests/ref/autograd_ref.h.
 * Inputs are closed-form (fill()), identical in both programs.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "hoop/autograd.h"
#include "hoop/nn.h"
#include "hoop/optim.h"
#include "ref/autograd_ref.h"
#include "run_suite.h"

static const int32_t LABELS[4] = {0, 2, 1, 2};

/* t[i] = float(a * sin(b * i + c)), as make_ref.py's fill(). */
static void fill(hoop_tensor *t, double a, double b, double c)
{
    float *p = hoop_tensor_data(t);
    for (size_t i = 0; i < hoop_tensor_count(t); i++) p[i] = (float)(a * sin(b * (double)i + c));
}

/* |got - want| <= tol * max(1e-3, |want|) elementwise; reports the first failure. */
static void expect_close(const char *what, const float *got, const float *want, size_t n,
                         double tol)
{
    for (size_t i = 0; i < n; i++) {
        const double scale = fabs(want[i]) > 1e-3 ? fabs(want[i]) : 1e-3;
        ck_assert_msg(fabs((double)got[i] - want[i]) <= tol * scale,
                      "%s[%zu]: got %.9g, PyTorch %.9g", what, i, (double)got[i], (double)want[i]);
    }
}

struct mlp {
    hoop_model *m;
    hoop_tensor *x;
};

static void mlp_make(struct mlp *n)
{
    const int64_t w1[2] = {5, 6}, w2[2] = {3, 5}, b1 = 5, b2 = 3, xs[2] = {4, 6};
    hoop_tensor *p;
    ck_assert_int_eq(hoop_model_new(&n->m), HOOP_OK);
    ck_assert_int_eq(hoop_model_add_param(n->m, "fc1.weight", 2, w1, &p), HOOP_OK);
    fill(p, 0.3, 0.23, 0.5);
    ck_assert_int_eq(hoop_model_add_param(n->m, "fc1.bias", 1, &b1, &p), HOOP_OK);
    fill(p, 0.1, 1.3, 0.0);
    ck_assert_int_eq(hoop_model_add_param(n->m, "fc2.weight", 2, w2, &p), HOOP_OK);
    fill(p, 0.4, 0.71, 0.2);
    ck_assert_int_eq(hoop_model_add_param(n->m, "fc2.bias", 1, &b2, &p), HOOP_OK);
    fill(p, 0.05, 0.9, 1.0);
    ck_assert_int_eq(hoop_tensor_new(&n->x, 2, xs, HOOP_DEVICE_CPU, 0), HOOP_OK);
    fill(n->x, 1.0, 0.37, 0.1);
}

static void mlp_free(struct mlp *n)
{
    hoop_model_free(n->m);
    hoop_tensor_free(n->x);
}

/* relu(x W1^T + b1) W2^T + b2 with bias-add as a separate op for the first layer, so both
 * linear-with-bias and bias_add are covered. */
static hoop_tensor *mlp_forward_loss(struct mlp *n, hoop_tape *tape, float smoothing,
                                     hoop_tensor **lg)
{
    hoop_tensor *h, *logits, *loss, *const *p = hoop_model_params(n->m);
    ck_assert_int_eq(hoop_linear(tape, n->x, p[0], NULL, &h), HOOP_OK);
    ck_assert_int_eq(hoop_bias_add(tape, h, p[1], &h), HOOP_OK);
    ck_assert_int_eq(hoop_relu(tape, h, &h), HOOP_OK);
    ck_assert_int_eq(hoop_linear(tape, h, p[2], p[3], &logits), HOOP_OK);
    ck_assert_int_eq(hoop_cross_entropy(tape, logits, LABELS, smoothing, &loss), HOOP_OK);
    if (lg) *lg = logits;
    return loss;
}

static void check_mlp(float smoothing, const float *logits_ref, const float *loss_ref,
                      const float *const grads_ref[4])
{
    struct mlp n;
    hoop_tape *tape;
    mlp_make(&n);
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    hoop_tensor *logits, *loss = mlp_forward_loss(&n, tape, smoothing, &logits);
    ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
    expect_close("logits", hoop_tensor_data(logits), logits_ref, 12, 1e-5);
    expect_close("loss", hoop_tensor_data(loss), loss_ref, 1, 1e-5);
    static const char *names[4] = {"grad w1", "grad b1", "grad w2", "grad b2"};
    for (size_t i = 0; i < 4; i++) {
        hoop_tensor *p = hoop_model_param(n.m, i);
        expect_close(names[i], hoop_tensor_grad(p), grads_ref[i], hoop_tensor_count(p), 1e-4);
    }
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
    mlp_free(&n);
}

START_TEST(test_mlp_matches_torch)
{
    const float *const g[4] = {mlp_grad_w1, mlp_grad_b1, mlp_grad_w2, mlp_grad_b2};
    check_mlp(0.0f, mlp_logits, mlp_lossval, g);
}
END_TEST

START_TEST(test_mlp_label_smoothing_matches_torch)
{
    const float *const g[4] = {mlp_ls_grad_w1, mlp_ls_grad_b1, mlp_ls_grad_w2, mlp_ls_grad_b2};
    check_mlp(0.1f, mlp_ls_logits, mlp_ls_lossval, g);
}
END_TEST

START_TEST(test_conv_chain_matches_torch)
{
    const int64_t xs[4] = {2, 2, 5, 5}, ws[4] = {3, 2, 3, 3}, bs = 3;
    hoop_tensor *x, *w, *b, *y, *loss;
    hoop_tape *tape;
    ck_assert_int_eq(hoop_tensor_new(&x, 4, xs, HOOP_DEVICE_CPU, 1), HOOP_OK);
    ck_assert_int_eq(hoop_tensor_new(&w, 4, ws, HOOP_DEVICE_CPU, 1), HOOP_OK);
    ck_assert_int_eq(hoop_tensor_new(&b, 1, &bs, HOOP_DEVICE_CPU, 1), HOOP_OK);
    fill(x, 1.0, 0.53, 0.3);
    fill(w, 0.5, 0.29, 0.7);
    fill(b, 0.2, 1.7, 0.4);
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    ck_assert_int_eq(hoop_conv2d(tape, x, w, b, 2, 1, &y), HOOP_OK);
    ck_assert_int_eq(hoop_gelu(tape, y, &y), HOOP_OK);
    ck_assert_int_eq(hoop_max_pool2d(tape, y, 2, 1, &y), HOOP_OK);
    hoop_tensor *pooled = y;
    ck_assert_int_eq(hoop_tanh(tape, y, &y), HOOP_OK);
    ck_assert_int_eq(hoop_sigmoid(tape, y, &y), HOOP_OK);
    ck_assert_int_eq(hoop_mean(tape, y, &loss), HOOP_OK);
    ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
    ck_assert_uint_eq(hoop_tensor_count(pooled), sizeof(conv_out) / sizeof(float));
    expect_close("conv out", hoop_tensor_data(pooled), conv_out, hoop_tensor_count(pooled), 1e-5);
    expect_close("conv loss", hoop_tensor_data(loss), conv_loss, 1, 1e-5);
    expect_close("conv grad x", hoop_tensor_grad(x), conv_grad_x, hoop_tensor_count(x), 1e-4);
    expect_close("conv grad w", hoop_tensor_grad(w), conv_grad_w, hoop_tensor_count(w), 1e-4);
    expect_close("conv grad b", hoop_tensor_grad(b), conv_grad_b, hoop_tensor_count(b), 1e-4);
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
    hoop_tensor_free(x);
    hoop_tensor_free(w);
    hoop_tensor_free(b);
}
END_TEST

/* 10 steps on the same batch; per-step loss and final parameters against torch. */
static void run_optim(const hoop_optim_config *cfg, const float *losses_ref,
                      const float *const params_ref[4])
{
    struct mlp n;
    hoop_tape *tape;
    hoop_optim *opt;
    mlp_make(&n);
    ck_assert_int_eq(hoop_tape_init(&tape), HOOP_OK);
    ck_assert_int_eq(hoop_optim_new(&opt, cfg, hoop_model_params(n.m), 4), HOOP_OK);
    for (int s = 0; s < 10; s++) {
        hoop_optim_zero_grad(opt);
        hoop_tensor *loss = mlp_forward_loss(&n, tape, 0.0f, NULL);
        char what[32];
        snprintf(what, sizeof(what), "loss at step %d", s);
        expect_close(what, hoop_tensor_data(loss), &losses_ref[s], 1, 1e-5);
        ck_assert_int_eq(hoop_backward(tape, loss), HOOP_OK);
        ck_assert_int_eq(hoop_optim_step(opt), HOOP_OK);
        hoop_tape_reset(tape);
    }
    ck_assert_int_eq(hoop_optim_step_count(opt), 10);
    static const char *names[4] = {"w1", "b1", "w2", "b2"};
    for (size_t i = 0; i < 4; i++) {
        hoop_tensor *p = hoop_model_param(n.m, i);
        expect_close(names[i], hoop_tensor_data(p), params_ref[i], hoop_tensor_count(p), 1e-5);
    }
    hoop_optim_free(opt);
    ck_assert_int_eq(hoop_tape_destroy(tape), HOOP_OK);
    mlp_free(&n);
}

START_TEST(test_sgd_nesterov_matches_torch)
{
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.lr = 0.1f;
    cfg.momentum = 0.9f;
    cfg.nesterov = 1;
    cfg.weight_decay = 0.01f;
    const float *const ref[4] = {sgd_w1, sgd_b1, sgd_w2, sgd_b2};
    run_optim(&cfg, sgd_losses, ref);
}
END_TEST

START_TEST(test_sgd_dampening_matches_torch)
{
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.lr = 0.05f;
    cfg.momentum = 0.8f;
    cfg.dampening = 0.3f;
    const float *const ref[4] = {sgd_damp_w1, sgd_damp_b1, sgd_damp_w2, sgd_damp_b2};
    run_optim(&cfg, sgd_damp_losses, ref);
}
END_TEST

START_TEST(test_adamw_matches_torch)
{
    hoop_optim_config cfg = HOOP_OPTIM_CONFIG_INIT;
    cfg.kind = HOOP_OPTIM_ADAMW;
    cfg.lr = 0.01f;
    cfg.weight_decay = 0.1f;
    const float *const ref[4] = {adamw_w1, adamw_b1, adamw_w2, adamw_b2};
    run_optim(&cfg, adamw_losses, ref);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("autograd_ref");
    TCase *tc = tcase_create("torch");
    tcase_add_test(tc, test_mlp_matches_torch);
    tcase_add_test(tc, test_mlp_label_smoothing_matches_torch);
    tcase_add_test(tc, test_conv_chain_matches_torch);
    tcase_add_test(tc, test_sgd_nesterov_matches_torch);
    tcase_add_test(tc, test_sgd_dampening_matches_torch);
    tcase_add_test(tc, test_adamw_matches_torch);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
