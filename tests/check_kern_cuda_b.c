/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_kern_cuda_b.c -- the CUDA kernel table's optimizer, convolution-lowering and
 * pooling entries (src/cuda/ops/optim.cu, im2col.cu, pool.cu) against the CPU table. In
 * make check the CUDA table is the host execution layer's build (src/cuda/hx_backend.cc),
 * so the kernels' own code runs here.
 *
 * Tolerances: sgd and adamw within a few ulps relative (OPTIM_REL) of the CPU's over
 * several steps (the same arithmetic; nvcc may fuse a multiply-add, the host build does
 * not); sqnorm within double rounding (another summation order); im2col, col2im, pool_fwd
 * (y and arg) and pool_bwd exact, as the kernels add the same terms in the CPU's order.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cuda_harness.h"
#include "run_suite.h"

#define OPTIM_REL (8.0 * FLT_EPSILON)
#define OPTIM_ABS (8.0 * FLT_EPSILON) /* values are O(1): a few ulps of 1 near zero */

static void free4(void *a, void *b, void *c, void *d)
{
    hoop__cuda_free(a);
    hoop__cuda_free(b);
    hoop__cuda_free(c);
    hoop__cuda_free(d);
}

/* Integers equal, element by element. */
static void expect_same_i32(const char *what, const int32_t *ref, const int32_t *dev, size_t n)
{
    int32_t *got = malloc((n ? n : 1) * sizeof(int32_t));
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(got, dev, n * sizeof(int32_t), 0), HOOP_OK);
    for (size_t i = 0; i < n; i++)
        EXPECT_ELEM(got[i] == ref[i], "%s: [%zu] cuda %d, cpu %d", what, i, got[i], ref[i]);
    free(got);
}

// ----- optimizers

/* A step's scalars as optim.c computes them, and their device copy (freed by the caller). */
static struct hoop__step_scalars *scalars_dev(const struct hoop__step_scalars *s)
{
    void *d = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&d, sizeof(*s)), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(d, s, sizeof(*s), 1), HOOP_OK);
    return d;
}

static struct hoop__step_scalars sgd_scalars(float lr, float mu, float damp, int first)
{
    struct hoop__step_scalars s = {.lr = lr};
    s.keep = first ? 0.0f : mu;
    s.take = first ? 1.0f : 1.0f - damp;
    return s;
}

static struct hoop__step_scalars adamw_scalars(float lr, float b1, float b2, float wd, int64_t t)
{
    struct hoop__step_scalars s = {.lr = lr};
    s.step_size = (float)(lr / (1.0 - pow(b1, (double)t)));
    s.bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)t));
    s.decay = (float)(1.0 - (double)lr * wd);
    return s;
}

/* Plain SGD (buf NULL), momentum with and without Nesterov, dampening, weight decay; four
 * steps each (the first with the first step's scalars, on a zeroed buf). */
START_TEST(test_sgd)
{
    static const struct {
        int with_buf, nesterov;
        float mu, damp, wd;
    } cfg[] = {
        {0, 0, 0.0f, 0.0f, 0.0f},  {0, 0, 0.0f, 0.0f, 0.01f},  {1, 0, 0.9f, 0.0f, 0.0f},
        {1, 0, 0.9f, 0.1f, 0.01f}, {1, 1, 0.9f, 0.0f, 0.0f},   {1, 1, 0.8f, 0.0f, 0.05f},
        {1, 0, 0.5f, 0.5f, 0.0f},  {1, 1, 0.9f, 0.25f, 0.01f},
    };
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++)
        for (size_t k = 0; k < NSIZES; k++) {
            size_t n = sizes[k];
            float *p = host_vec(n, 10), *buf = host_vec(n, 11);
            float *dp = dev_copy(p, n), *dbuf = dev_copy(buf, n);
            for (int step = 0; step < 4; step++) {
                float *g = host_vec(n, 20 + (unsigned)step), *dg = dev_copy(g, n);
                struct hoop__sgd_args a = {cfg[c].wd, cfg[c].mu, cfg[c].nesterov};
                const struct hoop__step_scalars sc =
                    sgd_scalars(0.1f, cfg[c].mu, cfg[c].damp, step == 0);
                struct hoop__step_scalars *ds = scalars_dev(&sc);
                float *b = cfg[c].with_buf ? buf : NULL, *db = cfg[c].with_buf ? dbuf : NULL;
                if (step == 0 && b) /* the first step's buffer is zero (optim.c's state) */
                    for (size_t i = 0; i < n; i++) buf[i] = 0.0f;
                if (step == 0 && b) ck_assert_int_eq(gpu->fill(dbuf, n, 0.0f), HOOP_OK);
                ck_assert_int_eq(cpu->sgd(&a, &sc, p, g, b, n), HOOP_OK);
                ck_assert_int_eq(gpu->sgd(&a, ds, dp, dg, db, n), HOOP_OK);
                hoop__cuda_free(ds);
                char what[96];
                snprintf(what, sizeof(what), "sgd cfg %zu n=%zu step %d: p", c, n, step);
                expect_close(what, p, dp, n, OPTIM_REL, OPTIM_ABS);
                snprintf(what, sizeof(what), "sgd cfg %zu n=%zu step %d: buf", c, n, step);
                if (b) expect_close(what, buf, dbuf, n, OPTIM_REL, OPTIM_ABS);
                hoop__cuda_free(dg);
                free(g);
            }
            free4(dp, dbuf, NULL, NULL);
            free(p);
            free(buf);
        }
}
END_TEST

/* Weight decay on and off, two beta pairs, steps 1..5 (the bias corrections change). */
START_TEST(test_adamw)
{
    static const struct {
        float lr, b1, b2, eps, wd;
    } cfg[] = {
        {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f},
        {1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f},
        {5e-2f, 0.5f, 0.9f, 1e-6f, 0.1f},
    };
    for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++)
        for (size_t k = 0; k < NSIZES; k++) {
            size_t n = sizes[k];
            float *p = host_vec(n, 30), *m = calloc(n, sizeof(float)),
                  *v = calloc(n, sizeof(float));
            float *dp = dev_copy(p, n), *dm = dev_copy(m, n), *dv = dev_copy(v, n);
            for (int64_t step = 1; step <= 5; step++) {
                float *g = host_vec(n, 40 + (unsigned)step), *dg = dev_copy(g, n);
                const struct hoop__adamw_args a = {cfg[c].b1, cfg[c].b2, cfg[c].eps};
                const struct hoop__step_scalars sc =
                    adamw_scalars(cfg[c].lr, cfg[c].b1, cfg[c].b2, cfg[c].wd, step);
                struct hoop__step_scalars *ds = scalars_dev(&sc);
                ck_assert_int_eq(cpu->adamw(&a, &sc, p, g, m, v, n), HOOP_OK);
                ck_assert_int_eq(gpu->adamw(&a, ds, dp, dg, dm, dv, n), HOOP_OK);
                hoop__cuda_free(ds);
                char what[96];
                snprintf(what, sizeof(what), "adamw cfg %zu n=%zu step %lld: p", c, n,
                         (long long)step);
                expect_close(what, p, dp, n, OPTIM_REL, OPTIM_ABS);
                snprintf(what, sizeof(what), "adamw cfg %zu n=%zu step %lld: m", c, n,
                         (long long)step);
                expect_close(what, m, dm, n, OPTIM_REL, OPTIM_ABS);
                snprintf(what, sizeof(what), "adamw cfg %zu n=%zu step %lld: v", c, n,
                         (long long)step);
                expect_close(what, v, dv, n, OPTIM_REL, OPTIM_ABS);
                hoop__cuda_free(dg);
                free(g);
            }
            free4(dp, dm, dv, NULL);
            free(p);
            free(m);
            free(v);
        }
}
END_TEST

/* Two calls into one device double starting at 0.5: the second adds to the first. Pass 1
 * takes 1024 elements a block at least, so 1000 is one block and 4099 five, the last of 3.
 * Tolerance: the bound of any summation order (the terms are positive). */
START_TEST(test_sqnorm)
{
    for (size_t k = 0; k < NSIZES; k++) {
        size_t n = sizes[k];
        float *a = host_vec(n, 50), *b = host_vec(n, 51);
        float *da = dev_copy(a, n), *db = dev_copy(b, n);
        double sq = 0.5, *dsq = NULL, got = 0.0;
        /* any order of summing m positive terms is within m eps of their sum: both sides */
        const double tol_per_sq = 2.0 * (double)(2 * n + 1) * DBL_EPSILON;
        ck_assert_int_eq(hoop__cuda_malloc((void **)&dsq, sizeof(double)), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_copy(dsq, &sq, sizeof(double), 1), HOOP_OK);
        ck_assert_int_eq(cpu->sqnorm(&sq, a, n), HOOP_OK);
        ck_assert_int_eq(gpu->sqnorm(dsq, da, n), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_copy(&got, dsq, sizeof(double), 0), HOOP_OK);
        ck_assert_msg(fabs(got - sq) <= tol_per_sq * sq,
                      "sqnorm n=%zu first: cuda %.17g, cpu %.17g", n, got, sq);
        ck_assert_int_eq(cpu->sqnorm(&sq, b, n), HOOP_OK);
        ck_assert_int_eq(gpu->sqnorm(dsq, db, n), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_copy(&got, dsq, sizeof(double), 0), HOOP_OK);
        ck_assert_msg(fabs(got - sq) <= tol_per_sq * sq,
                      "sqnorm n=%zu second: cuda %.17g, cpu %.17g", n, got, sq);
        free4(da, db, dsq, NULL);
        free(a);
        free(b);
    }
}
END_TEST

/* 2^20 + 3 squares: pass 1 on all 1024 blocks (1025 elements each, the last 4). Twice,
 * with a shorter sum between (which rewrites the partials): the same bits, and the CPU's
 * value within double rounding. */
START_TEST(test_sqnorm_deterministic)
{
    const size_t n = (1u << 20) + 3;
    float *a = host_vec(n, 52), *da = dev_copy(a, n);
    double sq = 0.0, zero = 0.0, got[2], other = 0.0, *dsq = NULL, *dother = NULL;
    ck_assert_int_eq(hoop__cuda_malloc((void **)&dsq, 2 * sizeof(double)), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_malloc((void **)&dother, sizeof(double)), HOOP_OK);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(hoop__cuda_copy(dsq + k, &zero, sizeof(double), 1), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_copy(dother, &zero, sizeof(double), 1), HOOP_OK);
        ck_assert_int_eq(gpu->sqnorm(dsq + k, da, n), HOOP_OK);
        ck_assert_int_eq(gpu->sqnorm(dother, da + 7, 3000), HOOP_OK);
    }
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(got, dsq, 2 * sizeof(double), 0), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(&other, dother, sizeof(double), 0), HOOP_OK);
    ck_assert_msg(memcmp(&got[0], &got[1], sizeof(double)) == 0, "sqnorm twice: %.17g, then %.17g",
                  got[0], got[1]);
    ck_assert_int_eq(cpu->sqnorm(&sq, a, n), HOOP_OK);
    ck_assert_msg(fabs(got[0] - sq) <= 2.0 * (double)(2 * n + 1) * DBL_EPSILON * sq,
                  "sqnorm n=%zu: cuda %.17g, cpu %.17g", n, got[0], sq);
    sq = 0.0;
    ck_assert_int_eq(cpu->sqnorm(&sq, a + 7, 3000), HOOP_OK);
    ck_assert_msg(fabs(other - sq) <= 2.0 * 6001 * DBL_EPSILON * sq,
                  "sqnorm n=3000: cuda %.17g, cpu %.17g", other, sq);
    free4(da, dsq, dother, NULL);
    free(a);
}
END_TEST

// ----- im2col, col2im

/* im2col of x and col2im of a fresh col into dx = x (it adds), both exact. */
static void check_conv(struct hoop__conv_geom g)
{
    g.OH = (g.H + 2 * g.padding - g.KH) / g.stride + 1;
    g.OW = (g.W + 2 * g.padding - g.KW) / g.stride + 1;
    size_t nx = (size_t)(g.C * g.H * g.W), nc = (size_t)(g.C * g.KH * g.KW * g.OH * g.OW);
    float *x = host_vec(nx, 60), *col = host_vec(nc, 61), *c2 = host_vec(nc, 62);
    float *dx = dev_copy(x, nx), *dcol = dev_copy(col, nc), *dc2 = dev_copy(c2, nc);
    char geom[80], what[96];
    snprintf(geom, sizeof(geom), "C%lld %lldx%lld k%lldx%lld s%d p%d", (long long)g.C,
             (long long)g.H, (long long)g.W, (long long)g.KH, (long long)g.KW, g.stride, g.padding);
    snprintf(what, sizeof(what), "im2col %s", geom);
    ck_assert_int_eq(cpu->im2col(col, x, &g), HOOP_OK);
    ck_assert_int_eq(gpu->im2col(dcol, dx, &g), HOOP_OK);
    expect_close(what, col, dcol, nc, 0, 0);
    snprintf(what, sizeof(what), "col2im %s", geom);
    ck_assert_int_eq(cpu->col2im(x, c2, &g), HOOP_OK);
    ck_assert_int_eq(gpu->col2im(dx, dc2, &g), HOOP_OK);
    expect_close(what, x, dx, nx, 0, 0);
    free4(dx, dcol, dc2, NULL);
    free(x);
    free(col);
    free(c2);
}

/* C 1 and 3; H, W each in {1, 5, 28}; kernel 1, 3, 5; stride 1, 2; padding 0, 1, 2
 * (geometries with no output skipped); then kernels that are not square. */
START_TEST(test_im2col_col2im)
{
    static const int64_t Cs[] = {1, 3}, HWs[] = {1, 5, 28}, Ks[] = {1, 3, 5};
    int ran = 0;
    for (int ci = 0; ci < 2; ci++)
        for (int hi = 0; hi < 3; hi++)
            for (int wi = 0; wi < 3; wi++)
                for (int ki = 0; ki < 3; ki++)
                    for (int stride = 1; stride <= 2; stride++)
                        for (int pad = 0; pad <= 2; pad++) {
                            struct hoop__conv_geom g = {
                                1, Cs[ci], HWs[hi], HWs[wi], 4, Ks[ki], Ks[ki], 0, 0, stride, pad};
                            if (g.H + 2 * pad < g.KH || g.W + 2 * pad < g.KW) continue;
                            check_conv(g);
                            ran++;
                        }
    ck_assert_int_gt(ran, 250);
    check_conv((struct hoop__conv_geom){1, 2, 6, 9, 1, 3, 2, 0, 0, 2, 1});
    check_conv((struct hoop__conv_geom){1, 3, 7, 4, 1, 1, 3, 0, 0, 1, 0});
    check_conv((struct hoop__conv_geom){1, 1, 28, 5, 1, 5, 1, 0, 0, 2, 2});
}
END_TEST

/* conv_fwd and conv_bwd of the batch (CUDA: lowered at once, cuBLAS batched and one GEMM
 * over the batch; CPU: sample by sample) agree: y and dx within f32 rounding of the
 * K-term or O-term dot products, dw of the N*S-term ones (another summation order). */
static void check_conv_batch(struct hoop__conv_geom g, int acc_x, int acc_w)
{
    g.OH = (g.H + 2 * g.padding - g.KH) / g.stride + 1;
    g.OW = (g.W + 2 * g.padding - g.KW) / g.stride + 1;
    const size_t nx = (size_t)(g.N * g.C * g.H * g.W), nw = (size_t)(g.O * g.C * g.KH * g.KW);
    const size_t ny = (size_t)(g.N * g.O * g.OH * g.OW);
    size_t sc, sg;
    ck_assert_int_eq(cpu->conv_scratch(&g, &sc), HOOP_OK);
    ck_assert_int_eq(gpu->conv_scratch(&g, &sg), HOOP_OK);
    ck_assert_uint_eq(sg, (size_t)(g.C * g.KH * g.KW + g.O) * (size_t)(g.N * g.OH * g.OW));
    float *x = host_vec(nx, 70), *w = host_vec(nw, 71), *y = host_vec(ny, 72);
    float *dy = host_vec(ny, 73), *dx = host_vec(nx, 74), *dw = host_vec(nw, 75);
    float *scr = malloc(sc * sizeof(float));
    float *gx = dev_copy(x, nx), *gw = dev_copy(w, nw), *gy = dev_copy(y, ny);
    float *gdy = dev_copy(dy, ny), *gdx = dev_copy(dx, nx), *gdw = dev_copy(dw, nw);
    void *gscr;
    ck_assert_int_eq(hoop__cuda_malloc(&gscr, sg * sizeof(float)), HOOP_OK);
    char what[128];
    snprintf(what, sizeof(what), "conv N%lld C%lld %lldx%lld O%lld k%lldx%lld s%d p%d acc %d%d",
             (long long)g.N, (long long)g.C, (long long)g.H, (long long)g.W, (long long)g.O,
             (long long)g.KH, (long long)g.KW, g.stride, g.padding, acc_x, acc_w);
    ck_assert_int_eq(cpu->conv_fwd(y, x, w, scr, &g), HOOP_OK);
    ck_assert_int_eq(gpu->conv_fwd(gy, gx, gw, gscr, &g), HOOP_OK);
    const double K = (double)(g.C * g.KH * g.KW), NS = (double)(g.N * g.OH * g.OW);
    expect_close(what, y, gy, ny, 4e-7 * K, 4e-7 * K * 4.0);
    ck_assert_int_eq(cpu->conv_bwd(dx, dw, dy, x, w, scr, &g, acc_x, acc_w), HOOP_OK);
    ck_assert_int_eq(gpu->conv_bwd(gdx, gdw, gdy, gx, gw, gscr, &g, acc_x, acc_w), HOOP_OK);
    expect_close(what, dx, gdx, nx, 4e-7 * (double)g.O * K, 4e-7 * (double)g.O * K * 4.0);
    expect_close(what, dw, gdw, nw, 4e-7 * NS, 4e-7 * NS * 4.0);
    /* either gradient alone */
    ck_assert_int_eq(gpu->conv_bwd(NULL, gdw, gdy, gx, gw, gscr, &g, acc_x, 0), HOOP_OK);
    ck_assert_int_eq(cpu->conv_bwd(NULL, dw, dy, x, w, scr, &g, acc_x, 0), HOOP_OK);
    expect_close(what, dw, gdw, nw, 4e-7 * NS, 4e-7 * NS * 4.0);
    hoop__cuda_free(gscr);
    free4(gx, gw, gy, gdy);
    free4(gdx, gdw, NULL, NULL);
    free(x), free(w), free(y), free(dy), free(dx), free(dw), free(scr);
}

START_TEST(test_conv_batch)
{
    /* N 1 and 3, odd planes, stride 2 with padding, a kernel that is not square, O 1 */
    check_conv_batch((struct hoop__conv_geom){1, 1, 5, 5, 2, 3, 3, 0, 0, 1, 0}, 0, 0);
    check_conv_batch((struct hoop__conv_geom){3, 2, 7, 6, 4, 3, 3, 0, 0, 2, 1}, 0, 1);
    check_conv_batch((struct hoop__conv_geom){3, 3, 9, 8, 1, 2, 3, 0, 0, 1, 2}, 1, 0);
    check_conv_batch((struct hoop__conv_geom){2, 4, 12, 12, 5, 5, 5, 0, 0, 1, 2}, 1, 1);
    check_conv_batch((struct hoop__conv_geom){5, 1, 28, 28, 3, 3, 3, 0, 0, 1, 1}, 0, 0);
}
END_TEST

START_TEST(test_im2col_errors)
{
    float f = 0.0f;
    struct hoop__conv_geom g = {1, 1, 3, 3, 1, 3, 3, 1, 1, 0, 0};
    ck_assert_int_eq(gpu->im2col(&f, &f, &g), HOOP_ERR_INVALID);
    assert_error_has("im2col", "stride 0");
    g.stride = 1;
    g.padding = -1;
    ck_assert_int_eq(gpu->col2im(&f, &f, &g), HOOP_ERR_INVALID);
    assert_error_has("col2im", "padding -1");
    ck_assert_int_eq(gpu->im2col(&f, &f, NULL), HOOP_ERR_INVALID);
    assert_error_has("im2col", "geometry");
}
END_TEST

// ----- pooling

/* Values in {-2, -1, 0, 1}: most windows hold a tie for their maximum. */
static float *tied_vec(size_t n, unsigned seed)
{
    float *p = host_vec(n, seed);
    for (size_t i = 0; i < n; i++) p[i] = floorf(p[i]);
    return p;
}

/* Kernel 2 and 3, stride 1 and 2, odd and even planes, tied inputs; the backward
 * written and accumulated from the forward's arg. */
START_TEST(test_pool)
{
    static const int64_t HWs[][2] = {{2, 2}, {3, 3}, {5, 7}, {7, 5}, {9, 9}, {28, 28}};
    static const size_t planes_of[] = {1, 3, 20};
    for (size_t s = 0; s < sizeof(HWs) / sizeof(HWs[0]); s++)
        for (int kernel = 2; kernel <= 3; kernel++)
            for (int stride = 1; stride <= 2; stride++)
                for (size_t pi = 0; pi < 3; pi++) {
                    int64_t H = HWs[s][0], W = HWs[s][1];
                    if (H < kernel || W < kernel) continue;
                    int64_t OH = (H - kernel) / stride + 1, OW = (W - kernel) / stride + 1;
                    size_t P = planes_of[pi], ni = P * (size_t)(H * W), no = P * (size_t)(OH * OW);
                    float *x = tied_vec(ni, 70 + (unsigned)s), *y = host_vec(no, 71);
                    int32_t *arg = calloc(no, sizeof(int32_t));
                    float *dxv = dev_copy(x, ni), *dy = dev_copy(y, no);
                    int32_t *darg = dev_copy_i32(arg, no);
                    char what[96];
                    snprintf(what, sizeof(what), "pool_fwd %zux%lldx%lld k%d s%d", P, (long long)H,
                             (long long)W, kernel, stride);
                    ck_assert_int_eq(cpu->pool_fwd(y, arg, x, P, H, W, OH, OW, kernel, stride),
                                     HOOP_OK);
                    ck_assert_int_eq(gpu->pool_fwd(dy, darg, dxv, P, H, W, OH, OW, kernel, stride),
                                     HOOP_OK);
                    expect_close(what, y, dy, no, 0, 0);
                    expect_same_i32(what, arg, darg, no);
                    for (int acc = 0; acc < 2; acc++) {
                        float *g = host_vec(no, 72), *dx = host_vec(ni, 73);
                        float *dg = dev_copy(g, no), *ddx = dev_copy(dx, ni);
                        snprintf(what, sizeof(what), "pool_bwd %zux%lldx%lld k%d s%d acc=%d", P,
                                 (long long)H, (long long)W, kernel, stride, acc);
                        ck_assert_int_eq(
                            cpu->pool_bwd(dx, g, arg, P, H, W, OH, OW, kernel, stride, acc),
                            HOOP_OK);
                        ck_assert_int_eq(
                            gpu->pool_bwd(ddx, dg, darg, P, H, W, OH, OW, kernel, stride, acc),
                            HOOP_OK);
                        expect_close(what, dx, ddx, ni, 0, 0);
                        free4(dg, ddx, NULL, NULL);
                        free(g);
                        free(dx);
                    }
                    free4(dxv, dy, darg, NULL);
                    free(x);
                    free(y);
                    free(arg);
                }
}
END_TEST

/* A CNN-sized batch (256 planes of 28x28: 200,704 inputs, 784 blocks), overlapping windows
 * (kernel 3, stride 2) and the usual 2x2, tied inputs: the CPU's bits, and the same bits
 * when run twice. */
START_TEST(test_pool_bwd_large)
{
    const size_t P = 256;
    const int64_t H = 28, W = 28;
    for (int kernel = 2; kernel <= 3; kernel++) {
        const int stride = 2;
        const int64_t OH = (H - kernel) / stride + 1, OW = (W - kernel) / stride + 1;
        const size_t ni = P * (size_t)(H * W), no = P * (size_t)(OH * OW);
        float *x = tied_vec(ni, 74), *y = host_vec(no, 75), *g = host_vec(no, 76);
        float *dx = host_vec(ni, 77);
        int32_t *arg = calloc(no, sizeof(int32_t));
        ck_assert_int_eq(cpu->pool_fwd(y, arg, x, P, H, W, OH, OW, kernel, stride), HOOP_OK);
        float *dg = dev_copy(g, no), *ddx = dev_copy(dx, ni), *ddx2 = dev_copy(dx, ni);
        int32_t *darg = dev_copy_i32(arg, no);
        ck_assert_int_eq(cpu->pool_bwd(dx, g, arg, P, H, W, OH, OW, kernel, stride, 1), HOOP_OK);
        ck_assert_int_eq(gpu->pool_bwd(ddx, dg, darg, P, H, W, OH, OW, kernel, stride, 1), HOOP_OK);
        ck_assert_int_eq(gpu->pool_bwd(ddx2, dg, darg, P, H, W, OH, OW, kernel, stride, 1),
                         HOOP_OK);
        char what[64];
        snprintf(what, sizeof(what), "pool_bwd %zux28x28 k%d s2 acc", P, kernel);
        expect_close(what, dx, ddx, ni, 0, 0);
        expect_same_bits(what, ddx, ddx2, ni);
        free4(dg, ddx, ddx2, darg);
        free(x);
        free(y);
        free(g);
        free(dx);
        free(arg);
    }
}
END_TEST

/* The first-maximum rule, frozen: a 3x3 plane of ties and one later maximum. */
START_TEST(test_pool_first_max)
{
    const float x[9] = {1, 1, 0, 1, 1, 2, 0, 2, 2};
    const int32_t want_arg[4] = {0, 5, 7, 5};
    const float want_y[4] = {1, 2, 2, 2};
    float *dx = dev_copy(x, 9), *dy = dev_copy(x, 4);
    int32_t *darg = dev_copy_i32(want_arg, 4);
    ck_assert_int_eq(gpu->pool_fwd(dy, darg, dx, 1, 3, 3, 2, 2, 2, 1), HOOP_OK);
    expect_close("pool_fwd ties", want_y, dy, 4, 0, 0);
    expect_same_i32("pool_fwd ties", want_arg, darg, 4);
    /* backward: offset 5 receives two outputs */
    const float g[4] = {1, 2, 4, 8};
    const float want_dx[9] = {1, 0, 0, 0, 0, 10, 0, 4, 0};
    float *dg = dev_copy(g, 4);
    ck_assert_int_eq(gpu->pool_bwd(dx, dg, darg, 1, 3, 3, 2, 2, 2, 1, 0), HOOP_OK);
    expect_close("pool_bwd ties", want_dx, dx, 9, 0, 0);
    free4(dx, dy, darg, dg);
}
END_TEST

/* NaN in a window, frozen from PyTorch's rule (a value replaces the maximum when greater
 * or NaN: the window gives NaN, its gradient going to the last NaN in row-major order):
 * the CPU's 2x2 fast path (kernel 2, stride 2), its general loop (stride 1) and the
 * device's kernel. A 2x6 plane, 1 2 N 3 4 7 over N 5 N 0 7 1. */
START_TEST(test_pool_nan)
{
    const float N = NAN, x[12] = {1, 2, N, 3, 4, 7, N, 5, N, 0, 7, 1};
    static const struct {
        int stride, OW;
        int32_t arg[5];
    } cases[] = {{2, 3, {6, 8, 5}}, {1, 5, {6, 8, 8, 10, 5}}};
    for (int c = 0; c < 2; c++) {
        const int OW = cases[c].OW, stride = cases[c].stride;
        float y[5], got[5];
        int32_t arg[5], gotarg[5];
        float *dx = dev_copy(x, 12), *dy = dev_copy(x, (size_t)OW);
        int32_t *darg = dev_copy_i32(cases[c].arg, (size_t)OW);
        ck_assert_int_eq(cpu->pool_fwd(y, arg, x, 1, 2, 6, 1, OW, 2, stride), HOOP_OK);
        ck_assert_int_eq(gpu->pool_fwd(dy, darg, dx, 1, 2, 6, 1, OW, 2, stride), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_copy(got, dy, (size_t)OW * sizeof(float), 0), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_copy(gotarg, darg, (size_t)OW * sizeof(int32_t), 0), HOOP_OK);
        for (int k = 0; k < OW; k++) {
            const int32_t want = cases[c].arg[k];
            ck_assert_msg(arg[k] == want && gotarg[k] == want,
                          "stride %d window %d: arg cpu %d, cuda %d, want %d", stride, k, arg[k],
                          gotarg[k], want);
            const int nan = !!isnan(x[want]);
            ck_assert_msg((!!isnan(y[k])) == nan && (!!isnan(got[k])) == nan &&
                              (nan || (y[k] == x[want] && got[k] == x[want])),
                          "stride %d window %d: y cpu %g, cuda %g, want %g", stride, k, y[k],
                          got[k], x[want]);
        }
        free4(dx, dy, darg, NULL);
    }
}
END_TEST

/* clip_scale reads the norm from the device's double: scales when max_norm / (norm +
 * 1e-6) < 1, leaves g alone otherwise; the CPU's and the CUDA's agree bit for bit (one
 * product per element). */
START_TEST(test_clip_scale)
{
    const double sqs[] = {0.0, 0.25, 4.0, 1e6};
    const float maxes[] = {0.1f, 1.0f, 3.0f};
    for (size_t k = 0; k < NSIZES; k++)
        for (int si = 0; si < 4; si++)
            for (int mi = 0; mi < 3; mi++) {
                size_t n = sizes[k];
                float *g = host_vec(n, 90), *dg = dev_copy(g, n), *orig = host_vec(n, 90);
                void *dsq;
                ck_assert_int_eq(hoop__cuda_malloc(&dsq, sizeof(double)), HOOP_OK);
                ck_assert_int_eq(hoop__cuda_copy(dsq, &sqs[si], sizeof(double), 1), HOOP_OK);
                ck_assert_int_eq(cpu->clip_scale(g, n, &sqs[si], maxes[mi]), HOOP_OK);
                ck_assert_int_eq(gpu->clip_scale(dg, n, dsq, maxes[mi]), HOOP_OK);
                char what[64];
                snprintf(what, sizeof(what), "clip_scale n=%zu sq=%g max=%g", n, sqs[si],
                         (double)maxes[mi]);
                expect_close(what, g, dg, n, 0, 0);
                const float coef = maxes[mi] / ((float)sqrt(sqs[si]) + 1e-6f);
                ck_assert_msg(coef < 1.0f ? g[0] == orig[0] * coef : g[0] == orig[0],
                              "%s: g[0] %g from %g", what, (double)g[0], (double)orig[0]);
                hoop__cuda_free(dsq);
                hoop__cuda_free(dg);
                free(g);
                free(orig);
            }
}
END_TEST

START_TEST(test_optim_pool_errors)
{
    float f = 0.0f;
    int32_t i = 0;
    struct hoop__adamw_args a = {0.9f, 0.999f, 1e-8f};
    ck_assert_int_eq(gpu->adamw(&a, NULL, &f, &f, &f, &f, 1), HOOP_ERR_INVALID);
    assert_error_has("adamw", "scalars");
    ck_assert_int_eq(gpu->clip_scale(&f, 1, NULL, 1.0f), HOOP_ERR_INVALID);
    assert_error_has("clip_scale", NULL);
    ck_assert_int_eq(gpu->pool_fwd(&f, &i, &f, 1, 3, 3, 2, 2, 3, 1), HOOP_ERR_INVALID);
    assert_error_has("pool_fwd", "does not fit");
    ck_assert_int_eq(gpu->pool_bwd(&f, &f, &i, 1, 3, 3, 2, 2, 2, 0, 0), HOOP_ERR_INVALID);
    assert_error_has("pool_bwd", "stride 0");
    ck_assert_int_eq(gpu->sqnorm(NULL, &f, 1), HOOP_ERR_INVALID);
    assert_error_has("sqnorm", NULL);
}
END_TEST

int main(void)
{
    kern_cuda_needs_device("check_kern_cuda_b");
    Suite *s = suite_create("kern_cuda_b");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_sqnorm);
    tcase_add_test(tc, test_sqnorm_deterministic);
    tcase_add_test(tc, test_clip_scale);
    tcase_add_test(tc, test_im2col_col2im);
    tcase_add_test(tc, test_conv_batch);
    tcase_add_test(tc, test_im2col_errors);
    tcase_add_test(tc, test_pool);
    tcase_add_test(tc, test_pool_bwd_large);
    tcase_add_test(tc, test_pool_first_max);
    tcase_add_test(tc, test_pool_nan);
    tcase_add_test(tc, test_optim_pool_errors);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
