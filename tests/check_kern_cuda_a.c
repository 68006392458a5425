/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_kern_cuda_a.c -- the CUDA table's activations, softmax, cross-entropy and
 * reductions (src/cuda/ops/unary.cu, softmax.cu, reduce.cu) against the CPU table: the
 * harness's sizes for element-wise entries, row shapes (1, 1), (3, 10), (7, 257),
 * (64, 1000) for the row kernels, written and accumulated, label smoothing 0 and 0.1.
 * In make check the kernels run under the host execution layer (src/cuda/hx.h).
 *
 * Tolerances (FLT_EPSILON = u): element-wise entries within 4 u relative (libm on the
 * host, CUDA's functions within 2 ulps on a GPU) plus 1e-6 absolute where a result is
 * a difference near 0; gelu's backward has its own bound (gelu_bwd_tol). A sum of n terms
 * in f32 is within (n - 1) u sum |terms| of the exact one, whatever the order: that bound
 * (a little under the n * 1e-6 * sum |x| of llm.c's tests) for bias_grad's column sums.
 * The row kernels (softmax, its backward's dot, the loss's log-sum-exp) are held tighter,
 * because a bound of C u on a row's sum exceeds what one dropped class changes (about
 * 1 / C) once C > 1 / sqrt(u) ~ 2900: each value is compared with the exact one (double,
 * computed here), the CPU's own distance from it is measured, and the kernel's distance
 * is bounded by its own reduction length, ceil(C / 32) + 5 roundings (a warp per row:
 * each lane sums every 32nd column, then five butterfly steps; row_sum_terms). So
 * |cuda - cpu| <= |cpu - exact| + that bound, which scales with the reduction length
 * but stays below 1 / C up to C ~ 16000. A sum in double (reduce_fwd, the loss over rows,
 * sqnorm) is exact to far below f32, so its results agree within 2 ulps.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cuda_harness.h"
#include "run_suite.h"

#define U ((double)FLT_EPSILON)

/* The rows x columns shapes of the row kernels. */
/* (67, 2903): C past 2900 (not a multiple of 32), and the loss over 9 blocks of 8 rows,
 * the last of 3; (1, 10007): one row of many classes. */
static const size_t row_shapes[][2] = {{1, 1},  {3, 10},   {7, 257},   {64, 1000},
                                       {5, 33}, {2, 4099}, {67, 2903}, {1, 10007}};
#define NROW_SHAPES (sizeof(row_shapes) / sizeof(row_shapes[0]))

/* dev's n floats equal ref's within tol[i] each. */
static void expect_close_each(const char *what, const float *ref, const float *dev, size_t n,
                              const double *tol)
{
    float *got = malloc((n ? n : 1) * sizeof(float));
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(got, dev, n * sizeof(float), 0), HOOP_OK);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        EXPECT_ELEM(d <= tol[i], "%s: [%zu] cuda %.9g, cpu %.9g (tolerance %.3g)", what, i, got[i],
                    ref[i], tol[i]);
    }
    free(got);
}

static float *scaled_vec(size_t n, unsigned seed, float scale)
{
    float *p = host_vec(n, seed);
    for (size_t i = 0; i < n; i++) p[i] *= scale;
    return p;
}

/* The roundings a row's sum of C terms goes through in the CUDA row kernels: ceil(C / 32)
 * in a lane, five butterfly steps across the warp. */
static double row_sum_terms(size_t C)
{
    return (double)((C + 31) / 32) + 5.0;
}

/* Row r of x (R, C) exactly (in double): its maximum *m and *s = sum exp(x - m). */
static void row_exact(const float *xr, size_t C, double *m, double *s)
{
    double mx = xr[0], sum = 0.0;
    for (size_t c = 1; c < C; c++) mx = xr[c] > mx ? xr[c] : mx;
    for (size_t c = 0; c < C; c++) sum += exp((double)xr[c] - mx);
    *m = mx;
    *s = sum;
}

/* tol[i] for softmax probs p (the CPU's) of x (R, C): |p - exact| + the kernel's own
 * bound, (row_sum_terms + 8) u relative (the sum; expf within 2 ulps in the terms and the
 * numerator; the reciprocal and the product), and 1e-42 for results in f32's subnormals. */
static double *probs_tol(const float *x, const float *p, size_t R, size_t C)
{
    double *tol = malloc(R * C * sizeof(double));
    for (size_t r = 0; r < R; r++) {
        double m, s;
        row_exact(x + r * C, C, &m, &s);
        for (size_t c = 0; c < C; c++) {
            const size_t i = r * C + c;
            const double exact = exp((double)x[i] - m) / s;
            tol[i] = fabs((double)p[i] - exact) + (row_sum_terms(C) + 8) * U * exact + 1e-42;
        }
    }
    return tol;
}

// ----- unary --------------------------------------------------------------------------------

static const char *const unary_names[HOOP__UNARY_COUNT] = {"relu", "gelu", "tanh", "sigmoid"};

START_TEST(test_unary_fwd)
{
    for (int kind = 0; kind < HOOP__UNARY_COUNT; kind++)
        for (size_t k = 0; k < NSIZES; k++) {
            size_t n = sizes[k];
            float *x = scaled_vec(n, 11, 3.0f), *y = host_vec(n, 12);
            float *dx = dev_copy(x, n), *dy = dev_copy(y, n);
            ck_assert_int_eq(cpu->unary_fwd((enum hoop__unary)kind, y, x, n), HOOP_OK);
            ck_assert_int_eq(gpu->unary_fwd((enum hoop__unary)kind, dy, dx, n), HOOP_OK);
            char what[64];
            snprintf(what, sizeof(what), "unary_fwd %s n=%zu", unary_names[kind], n);
            expect_close(what, y, dy, n, 4 * U, 1e-6);
            hoop__cuda_free(dx);
            hoop__cuda_free(dy);
            free(x);
            free(y);
        }
}
END_TEST

/* gelu's backward, g = dy (0.5 (1 + t) + 0.5 x (1 - t^2) du), t = tanh(a), a = K (x + c x^3),
 * du = K (1 + 3 c x^2), may differ on a GPU from the host's (the CPU's) by, per element:
 * - t: tanhf within 2 ulps on each side (CUDA's documented bound without fast math; glibc's
 *   is within it), so 4 u |t|, plus the argument: nvcc may fuse x + c x^3 and the other
 *   products into FMAs (one rounding instead of two), a within 4 u K (|x| + c |x|^3) of
 *   the host's, which moves t by (1 - t^2) times that;
 * - the bracket moves with t by |dB/dt| = |0.5 - x t du| per unit of t's difference, and
 *   its own operations (about eight, any of them fused or not) round within 4 u of the
 *   sum of the magnitudes of its parts, 0.5 (1 + |t|) + 0.5 |x| |du| (1 + t^2): near
 *   1 + t ~ 0 (x large negative) and near g ~ 0 (x ~ -0.75, where the two halves cancel)
 *   this absolute term is what holds, a relative bound on g would not;
 * - the product with dy and the accumulation round within u of the result each.
 * The host layer runs the CPU's operations in the CPU's order, so here they agree exactly;
 * the bound is for the nvcc build (check_kern_cuda_a_gpu). */
static double gelu_bwd_tol(float x, float dy, float got_ref)
{
    const double K = 0.7978845608028654, c = 0.044715, ax = fabs((double)x);
    const double t = tanh(K * (x + c * x * x * x)), du = K * (1.0 + 3.0 * c * x * x);
    const double dt = 4 * U * fabs(t) + (1.0 - t * t) * 4 * U * K * (ax + c * ax * ax * ax);
    const double parts = 0.5 * (1.0 + fabs(t)) + 0.5 * ax * du * (1.0 + t * t);
    return fabs((double)dy) * (fabs(0.5 - x * t * du) * dt + 4 * U * parts) +
           2 * U * fabs((double)got_ref) + 1e-30;
}

START_TEST(test_unary_bwd)
{
    for (int kind = 0; kind < HOOP__UNARY_COUNT; kind++)
        for (size_t k = 0; k < NSIZES; k++)
            for (int acc = 0; acc < 2; acc++) {
                size_t n = sizes[k];
                enum hoop__unary u = (enum hoop__unary)kind;
                float *x = scaled_vec(n, 13, 3.0f), *y = host_vec(n, 14);
                float *g = host_vec(n, 15), *dxh = host_vec(n, 16), *g0 = host_vec(n, 15);
                ck_assert_int_eq(cpu->unary_fwd(u, y, x, n), HOOP_OK); /* the saved output */
                float *d_x = dev_copy(x, n), *d_y = dev_copy(y, n), *d_g = dev_copy(g, n);
                float *d_dx = dev_copy(dxh, n);
                /* the CPU uses g as scratch with acc; the device gets the original */
                ck_assert_int_eq(cpu->unary_bwd(u, dxh, g, x, y, n, acc), HOOP_OK);
                ck_assert_int_eq(gpu->unary_bwd(u, d_dx, d_g, d_x, d_y, n, acc), HOOP_OK);
                char what[64];
                snprintf(what, sizeof(what), "unary_bwd %s n=%zu acc=%d", unary_names[kind], n,
                         acc);
                if (u == HOOP__UNARY_GELU) {
                    double *tol = malloc(n * sizeof(double));
                    for (size_t i = 0; i < n; i++) tol[i] = gelu_bwd_tol(x[i], g0[i], dxh[i]);
                    expect_close_each(what, dxh, d_dx, n, tol);
                    free(tol);
                } else {
                    expect_close(what, dxh, d_dx, n, 4 * U, 2e-6);
                }
                hoop__cuda_free(d_x);
                hoop__cuda_free(d_y);
                hoop__cuda_free(d_g);
                hoop__cuda_free(d_dx);
                free(x);
                free(y);
                free(g);
                free(g0);
                free(dxh);
            }
}
END_TEST

START_TEST(test_unary_bad_kind)
{
    float v = 0.0f;
    ck_assert_int_eq(gpu->unary_fwd(HOOP__UNARY_COUNT, &v, &v, 1), HOOP_ERR_INTERNAL);
    assert_error_has("unary_fwd", "unknown");
    ck_assert_int_eq(gpu->unary_bwd(HOOP__UNARY_COUNT, &v, &v, &v, &v, 1, 0), HOOP_ERR_INTERNAL);
    assert_error_has("unary_bwd", "unknown");
}
END_TEST

// ----- softmax ------------------------------------------------------------------------------

/* logits in [-2, 2] (scale 1) and [-100, 100] (scale 50: exp overflows f32 without the
 * maximum subtracted) */
START_TEST(test_softmax_fwd)
{
    for (size_t s = 0; s < NROW_SHAPES; s++)
        for (int big = 0; big < 2; big++) {
            size_t R = row_shapes[s][0], C = row_shapes[s][1], n = R * C;
            float *x = scaled_vec(n, 21, big ? 50.0f : 1.0f), *y = host_vec(n, 22);
            float *dx = dev_copy(x, n), *dy = dev_copy(y, n);
            ck_assert_int_eq(cpu->softmax_fwd(y, x, R, C), HOOP_OK);
            ck_assert_int_eq(gpu->softmax_fwd(dy, dx, R, C), HOOP_OK);
            char what[64];
            snprintf(what, sizeof(what), "softmax_fwd %zux%zu scale=%d", R, C, big ? 50 : 1);
            double *tol = probs_tol(x, y, R, C);
            expect_close_each(what, y, dy, n, tol);
            free(tol);
            hoop__cuda_free(dx);
            hoop__cuda_free(dy);
            free(x);
            free(y);
        }
}
END_TEST

START_TEST(test_softmax_bwd)
{
    for (size_t s = 0; s < NROW_SHAPES; s++)
        for (int acc = 0; acc < 2; acc++) {
            size_t R = row_shapes[s][0], C = row_shapes[s][1], n = R * C;
            float *x = host_vec(n, 23), *y = host_vec(n, 24), *g = host_vec(n, 25);
            float *dxh = host_vec(n, 26), *d0 = host_vec(n, 26); /* d0: dx before */
            ck_assert_int_eq(cpu->softmax_fwd(y, x, R, C), HOOP_OK);
            float *d_y = dev_copy(y, n), *d_g = dev_copy(g, n), *d_dx = dev_copy(dxh, n);
            ck_assert_int_eq(cpu->softmax_bwd(dxh, y, g, R, C, acc), HOOP_OK);
            ck_assert_int_eq(gpu->softmax_bwd(d_dx, d_y, d_g, R, C, acc), HOOP_OK);
            /* dx = y (g - dot) (+ dx): the CPU's distance from the exact value (double),
             * plus the kernel's: dot within (row_sum_terms + 1) u sum |g y|, the
             * subtraction, product and addition a few u */
            double *tol = malloc(n * sizeof(double));
            for (size_t r = 0; r < R; r++) {
                double S = 0.0, dot = 0.0;
                for (size_t c = 0; c < C; c++) {
                    S += fabs((double)g[r * C + c] * y[r * C + c]);
                    dot += (double)g[r * C + c] * y[r * C + c];
                }
                for (size_t c = 0; c < C; c++) {
                    size_t i = r * C + c;
                    double exact = (double)y[i] * ((double)g[i] - dot) + (acc ? d0[i] : 0.0);
                    double v = fabs((double)y[i]) * (fabs((double)g[i]) + fabs(dot));
                    tol[i] = fabs((double)dxh[i] - exact) + y[i] * (row_sum_terms(C) + 1) * U * S +
                             2 * U * (v + fabs(exact)) + 1e-38;
                }
            }
            char what[64];
            snprintf(what, sizeof(what), "softmax_bwd %zux%zu acc=%d", R, C, acc);
            expect_close_each(what, dxh, d_dx, n, tol);
            free(tol);
            hoop__cuda_free(d_y);
            hoop__cuda_free(d_g);
            hoop__cuda_free(d_dx);
            free(x);
            free(y);
            free(g);
            free(dxh);
            free(d0);
        }
}
END_TEST

// ----- cross-entropy ------------------------------------------------------------------------

static int32_t *labels_for(size_t N, size_t C)
{
    int32_t *l = malloc((N ? N : 1) * sizeof(int32_t));
    for (size_t r = 0; r < N; r++) l[r] = (int32_t)((r * 7 + 3) % C);
    return l;
}

/* The tolerance of ce_fwd's loss (the CPU's, cpu_loss) for logits x (N, C), labels lab
 * and smoothing eps: |cpu_loss - exact| (the loss in double, computed here) plus the
 * kernel's own bound, the mean over rows of its log-sum-exp's: the sum within
 * (row_sum_terms + 2) u relative (expf's 2 ulps in the terms), logf within 1 ulp and
 * m + log s rounded (u |log s| + u |lse|), then the f32 result's rounding. The row's nll
 * and the smoothing term move with lse alone ((1 - eps) + eps = 1); the sums over classes
 * and rows are in double. */
static double ce_loss_tol(const float *x, const int32_t *lab, size_t N, size_t C, float eps,
                          float cpu_loss)
{
    double total = 0.0, bound = 0.0;
    for (size_t r = 0; r < N; r++) {
        const float *xr = x + r * C;
        double m, s, mean_x = 0.0;
        row_exact(xr, C, &m, &s);
        const double lse = m + log(s);
        for (size_t c = 0; c < C; c++) mean_x += xr[c];
        mean_x /= (double)C;
        total += (1.0 - eps) * (lse - xr[lab[r]]) + eps * (lse - mean_x);
        bound += (row_sum_terms(C) + 4) * U + U * (fabs(log(s)) + fabs(lse));
    }
    const double exact = total / (double)N;
    return fabs((double)cpu_loss - exact) + bound / (double)N + U * fabs(exact) + 1e-30;
}

START_TEST(test_ce_fwd)
{
    const float eps_list[] = {0.0f, 0.1f};
    for (size_t s = 0; s < NROW_SHAPES; s++)
        for (int e = 0; e < 2; e++)
            for (int big = 0; big < 2; big++) {
                size_t N = row_shapes[s][0], C = row_shapes[s][1], n = N * C;
                float eps = eps_list[e], scale = big ? 50.0f : 1.0f, loss = -1.0f;
                float *x = scaled_vec(n, 31, scale), *p = host_vec(n, 32);
                int32_t *lab = labels_for(N, C);
                float *d_x = dev_copy(x, n), *d_p = dev_copy(p, n), *d_loss = dev_copy(&loss, 1);
                int32_t *d_lab = dev_copy_i32(lab, N);
                ck_assert_int_eq(cpu->ce_fwd(&loss, p, x, lab, N, C, eps), HOOP_OK);
                ck_assert_int_eq(gpu->ce_fwd(d_loss, d_p, d_x, d_lab, N, C, eps), HOOP_OK);
                char what[80];
                snprintf(what, sizeof(what), "ce_fwd probs %zux%zu eps=%g scale=%g", N, C, eps,
                         scale);
                double *tol = probs_tol(x, p, N, C);
                expect_close_each(what, p, d_p, n, tol);
                free(tol);
                snprintf(what, sizeof(what), "ce_fwd loss %zux%zu eps=%g scale=%g", N, C, eps,
                         scale);
                ck_assert(isfinite(loss));
                double ltol = ce_loss_tol(x, lab, N, C, eps, loss);
                expect_close_each(what, &loss, d_loss, 1, &ltol);
                hoop__cuda_free(d_x);
                hoop__cuda_free(d_p);
                hoop__cuda_free(d_loss);
                hoop__cuda_free(d_lab);
                free(x);
                free(p);
                free(lab);
            }
}
END_TEST

/* A frozen value: logits (2, 3) = {{1, 2, 3}, {0, 0, 0}}, labels {2, 1}, eps 0.1:
 * row 0: lse = 3.40760596, nll = 0.40760596, mean_c(lse - x) = 1.40760596;
 * row 1: lse = log 3, nll = mean = 1.09861229; loss = (0.9 * 0.40760596 + 0.1 * 1.40760596 +
 * 1.09861229) / 2 = 0.80310912. A label outside 0..C-1 gives NaN, no read outside x. */
START_TEST(test_ce_fwd_value)
{
    const float x[6] = {1, 2, 3, 0, 0, 0};
    int32_t lab[2] = {2, 1};
    float loss = 0.0f, *d_x = dev_copy(x, 6), *d_p = dev_copy(x, 6), *d_loss = dev_copy(&loss, 1);
    int32_t *d_lab = dev_copy_i32(lab, 2);
    ck_assert_int_eq(gpu->ce_fwd(d_loss, d_p, d_x, d_lab, 2, 3, 0.1f), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(&loss, d_loss, sizeof(float), 0), HOOP_OK);
    ck_assert_float_eq_tol(loss, 0.80310912f, 1e-6f);
    lab[1] = 3;
    hoop__cuda_free(d_lab);
    d_lab = dev_copy_i32(lab, 2);
    ck_assert_int_eq(gpu->ce_fwd(d_loss, d_p, d_x, d_lab, 2, 3, 0.1f), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(&loss, d_loss, sizeof(float), 0), HOOP_OK);
    ck_assert(isnan(loss));
    ck_assert_int_eq(gpu->ce_fwd(d_loss, d_p, d_x, d_lab, 0, 3, 0.1f), HOOP_ERR_INVALID);
    assert_error_has("ce_fwd", "no entries");
    hoop__cuda_free(d_x);
    hoop__cuda_free(d_p);
    hoop__cuda_free(d_loss);
    hoop__cuda_free(d_lab);
}
END_TEST

/* Many rows: the loss's pass 1 on all 1024 blocks (9 rows each, so warp 0 takes two, and
 * the last block 1); run twice with another loss between (which rewrites the partials),
 * the same bits both times. Few classes: the host layer's cost is the threads'. */
START_TEST(test_ce_fwd_deterministic)
{
    const size_t N = 8200, C = 3, n = N * C;
    float loss = -1.0f, *x = scaled_vec(n, 36, 4.0f), *p = host_vec(n, 37);
    int32_t *lab = labels_for(N, C);
    float *d_x = dev_copy(x, n), *d_p = dev_copy(p, n), *d_p2 = dev_copy(p, n);
    float *d_loss = dev_copy(&loss, 1), *d_loss2 = dev_copy(&loss, 1);
    int32_t *d_lab = dev_copy_i32(lab, N);
    ck_assert_int_eq(cpu->ce_fwd(&loss, p, x, lab, N, C, 0.1f), HOOP_OK);
    ck_assert_int_eq(gpu->ce_fwd(d_loss, d_p, d_x, d_lab, N, C, 0.1f), HOOP_OK);
    ck_assert_int_eq(gpu->ce_fwd(d_loss2, d_p2, d_x, d_lab, 100, C, 0.0f), HOOP_OK);
    ck_assert_int_eq(gpu->ce_fwd(d_loss2, d_p2, d_x, d_lab, N, C, 0.1f), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    expect_same_bits("ce_fwd twice: loss", d_loss, d_loss2, 1);
    expect_same_bits("ce_fwd twice: probs", d_p, d_p2, n);
    double ltol = ce_loss_tol(x, lab, N, C, 0.1f, loss);
    expect_close_each("ce_fwd 8200x3 loss", &loss, d_loss, 1, &ltol);
    double *tol = probs_tol(x, p, N, C);
    expect_close_each("ce_fwd 8200x3 probs", p, d_p, n, tol);
    free(tol);
    hoop__cuda_free(d_x);
    hoop__cuda_free(d_p);
    hoop__cuda_free(d_p2);
    hoop__cuda_free(d_loss);
    hoop__cuda_free(d_loss2);
    hoop__cuda_free(d_lab);
    free(x);
    free(p);
    free(lab);
}
END_TEST

START_TEST(test_ce_bwd)
{
    const float eps_list[] = {0.0f, 0.1f};
    for (size_t s = 0; s < NROW_SHAPES; s++)
        for (int e = 0; e < 2; e++)
            for (int acc = 0; acc < 2; acc++) {
                size_t N = row_shapes[s][0], C = row_shapes[s][1], n = N * C;
                float eps = eps_list[e], dloss = 0.7f;
                float *x = host_vec(n, 33), *p = host_vec(n, 34), *dxh = host_vec(n, 35);
                int32_t *lab = labels_for(N, C);
                ck_assert_int_eq(cpu->softmax_fwd(p, x, N, C), HOOP_OK);
                float *d_p = dev_copy(p, n), *d_dx = dev_copy(dxh, n);
                float *d_dloss = dev_copy(&dloss, 1);
                int32_t *d_lab = dev_copy_i32(lab, N);
                ck_assert_int_eq(cpu->ce_bwd(dxh, p, lab, &dloss, N, C, eps, acc), HOOP_OK);
                ck_assert_int_eq(gpu->ce_bwd(d_dx, d_p, d_lab, d_dloss, N, C, eps, acc), HOOP_OK);
                char what[80];
                snprintf(what, sizeof(what), "ce_bwd %zux%zu eps=%g acc=%d", N, C, eps, acc);
                expect_close(what, dxh, d_dx, n, 4 * U, 4 * U * dloss / (float)N);
                hoop__cuda_free(d_p);
                hoop__cuda_free(d_dx);
                hoop__cuda_free(d_dloss);
                hoop__cuda_free(d_lab);
                free(x);
                free(p);
                free(dxh);
                free(lab);
            }
}
END_TEST

// ----- reductions ---------------------------------------------------------------------------

START_TEST(test_reduce_fwd)
{
    for (size_t k = 0; k <= NSIZES; k++)
        for (int mean = 0; mean < 2; mean++) {
            size_t n = k < NSIZES ? sizes[k] : 100003;
            float *x = host_vec(n, 41), y = 0.0f, *d_x = dev_copy(x, n), *d_y = dev_copy(&y, 1);
            ck_assert_int_eq(cpu->reduce_fwd(&y, x, n, mean), HOOP_OK);
            ck_assert_int_eq(gpu->reduce_fwd(d_y, d_x, n, mean), HOOP_OK);
            double sabs = 0.0;
            for (size_t i = 0; i < n; i++) sabs += fabs((double)x[i]);
            char what[64];
            snprintf(what, sizeof(what), "reduce_fwd n=%zu mean=%d", n, mean);
            /* double sums: 2 ulps of the result, and n 2^-52 sum |x| for the order */
            expect_close(what, &y, d_y, 1, 2 * U, (double)n * 0x1p-52 * sabs);
            hoop__cuda_free(d_x);
            hoop__cuda_free(d_y);
            free(x);
        }
}
END_TEST

/* 2^20 + 3 floats: pass 1 on all 1024 blocks (1025 floats each, the last 4). Run twice
 * with a shorter sum between (which rewrites the partials): the same bits both times, and
 * the CPU's value. */
START_TEST(test_reduce_fwd_deterministic)
{
    const size_t n = (1u << 20) + 3;
    float *x = host_vec(n, 42), y = 0.0f, *d_x = dev_copy(x, n);
    float *d_y = dev_copy(&y, 1), *d_y2 = dev_copy(&y, 1);
    ck_assert_int_eq(cpu->reduce_fwd(&y, x, n, 1), HOOP_OK);
    ck_assert_int_eq(gpu->reduce_fwd(d_y, d_x, n, 1), HOOP_OK);
    ck_assert_int_eq(gpu->reduce_fwd(d_y2, d_x + 1, 5000, 0), HOOP_OK);
    ck_assert_int_eq(gpu->reduce_fwd(d_y2, d_x, n, 1), HOOP_OK);
    expect_same_bits("reduce_fwd twice", d_y, d_y2, 1);
    double sabs = 0.0;
    for (size_t i = 0; i < n; i++) sabs += fabs((double)x[i]);
    expect_close("reduce_fwd n=2^20+3 mean", &y, d_y, 1, 2 * U, 0x1p-52 * sabs);
    hoop__cuda_free(d_x);
    hoop__cuda_free(d_y);
    hoop__cuda_free(d_y2);
    free(x);
}
END_TEST

/* The frozen sum of 1..1000 and its mean, exactly representable. */
START_TEST(test_reduce_fwd_value)
{
    float x[1000], y = 0.0f;
    for (int i = 0; i < 1000; i++) x[i] = (float)(i + 1);
    float *d_x = dev_copy(x, 1000), *d_y = dev_copy(&y, 1);
    ck_assert_int_eq(gpu->reduce_fwd(d_y, d_x, 1000, 0), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(&y, d_y, sizeof(float), 0), HOOP_OK);
    ck_assert_float_eq(y, 500500.0f);
    ck_assert_int_eq(gpu->reduce_fwd(d_y, d_x, 1000, 1), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(&y, d_y, sizeof(float), 0), HOOP_OK);
    ck_assert_float_eq(y, 500.5f);
    hoop__cuda_free(d_x);
    hoop__cuda_free(d_y);
}
END_TEST

START_TEST(test_bias_grad)
{
    /* inner 1: columns around the 32-wide block and rows past the 8 row groups; inner > 1:
     * planes shorter and longer than the 256 threads per channel */
    const size_t shapes[][3] = {{1, 1, 1},    {3, 10, 1}, {7, 257, 1},  {64, 1000, 1},
                                {1030, 5, 1}, {2, 3, 25}, {5, 16, 169}, {3, 2, 300}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int acc = 0; acc < 2; acc++) {
            size_t N = shapes[s][0], C = shapes[s][1], in = shapes[s][2], n = N * C * in;
            float *g = host_vec(n, 51), *db = host_vec(C, 52);
            float *d_g = dev_copy(g, n), *d_db = dev_copy(db, C);
            double *tol = calloc(C, sizeof(double));
            for (size_t i = 0; i < N; i++)
                for (size_t c = 0; c < C; c++)
                    for (size_t k = 0; k < in; k++) tol[c] += fabs((double)g[(i * C + c) * in + k]);
            for (size_t c = 0; c < C; c++)
                tol[c] = (double)(N * in + 2) * U * (tol[c] + fabs((double)db[c]));
            ck_assert_int_eq(cpu->bias_grad(db, g, N, C, in, acc), HOOP_OK);
            ck_assert_int_eq(gpu->bias_grad(d_db, d_g, N, C, in, acc), HOOP_OK);
            char what[64];
            snprintf(what, sizeof(what), "bias_grad %zux%zux%zu acc=%d", N, C, in, acc);
            expect_close_each(what, db, d_db, C, tol);
            free(tol);
            hoop__cuda_free(d_g);
            hoop__cuda_free(d_db);
            free(g);
            free(db);
        }
}
END_TEST

int main(void)
{
    kern_cuda_needs_device("check_kern_cuda_a");
    Suite *s = suite_create("kern_cuda_a");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_unary_fwd);
    tcase_add_test(tc, test_unary_bwd);
    tcase_add_test(tc, test_unary_bad_kind);
    tcase_add_test(tc, test_softmax_fwd);
    tcase_add_test(tc, test_softmax_bwd);
    tcase_add_test(tc, test_ce_fwd);
    tcase_add_test(tc, test_ce_fwd_value);
    tcase_add_test(tc, test_ce_fwd_deterministic);
    tcase_add_test(tc, test_ce_bwd);
    tcase_add_test(tc, test_reduce_fwd);
    tcase_add_test(tc, test_reduce_fwd_value);
    tcase_add_test(tc, test_reduce_fwd_deterministic);
    tcase_add_test(tc, test_bias_grad);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
