/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_kern_cuda.c -- the CUDA kernel table (src/cuda/kern_cuda.cu) against the CPU
 * table, entry by entry, on random shapes: sizes around the block size, size 1, several
 * blocks with a short last one; written and accumulated. In make check the CUDA table is
 * the host execution layer's build of it (src/cuda/hx_backend.cc), so the kernels' own
 * code runs here. Tolerances: element-wise entries within a few ulps of the CPU's (the
 * same arithmetic in another order at most); GEMM within K ulps of the magnitudes' sum,
 * the bound of any summation order.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kern_cuda_harness.h"
#include "run_suite.h"

START_TEST(test_table_complete)
{
    ck_assert_int_eq(hoop__kern_validate(gpu, "the cuda kernel table"), HOOP_OK);
    ck_assert_str_eq(gpu->name, "cuda");
    float x = 0.0f;
    const uint64_t seed0 = 0;
    ck_assert_int_eq(gpu->dropout_fwd(&x, &x, &x, 1, 1.0f, &seed0, 0), HOOP_ERR_INVALID);
    assert_error_has("dropout_fwd", "p=1");
}
END_TEST

START_TEST(test_elementwise)
{
    for (size_t k = 0; k < NSIZES; k++)
        for (int acc = 0; acc < 2; acc++) {
            size_t n = sizes[k];
            float *a = host_vec(n, 1), *b = host_vec(n, 2), *y = host_vec(n, 3);
            float *da = dev_copy(a, n), *db = dev_copy(b, n), *dy = dev_copy(y, n);
            char what[64];
            snprintf(what, sizeof(what), "axpy_or_copy n=%zu acc=%d", n, acc);
            ck_assert_int_eq(cpu->axpy_or_copy(y, a, n, acc), HOOP_OK);
            ck_assert_int_eq(gpu->axpy_or_copy(dy, da, n, acc), HOOP_OK);
            expect_close(what, y, dy, n, 0, 0);
            snprintf(what, sizeof(what), "add n=%zu", n);
            ck_assert_int_eq(cpu->add(y, a, b, n), HOOP_OK);
            ck_assert_int_eq(gpu->add(dy, da, db, n), HOOP_OK);
            expect_close(what, y, dy, n, 0, 0);
            snprintf(what, sizeof(what), "scale n=%zu", n);
            ck_assert_int_eq(cpu->scale(y, n, -0.37f), HOOP_OK);
            ck_assert_int_eq(gpu->scale(dy, n, -0.37f), HOOP_OK);
            expect_close(what, y, dy, n, 0, 0);
            snprintf(what, sizeof(what), "fill n=%zu", n);
            ck_assert_int_eq(cpu->fill(y, n, 1.5f), HOOP_OK);
            ck_assert_int_eq(gpu->fill(dy, n, 1.5f), HOOP_OK);
            expect_close(what, y, dy, n, 0, 0);
            /* backward of mean (dy[0] * 1/n) and of dropout (dy * mask) */
            snprintf(what, sizeof(what), "reduce_bwd n=%zu acc=%d", n, acc);
            ck_assert_int_eq(cpu->reduce_bwd(y, b, 1.0f / (float)n, n, acc), HOOP_OK);
            ck_assert_int_eq(gpu->reduce_bwd(dy, db, 1.0f / (float)n, n, acc), HOOP_OK);
            expect_close(what, y, dy, n, 0, 0);
            snprintf(what, sizeof(what), "dropout_bwd n=%zu acc=%d", n, acc);
            ck_assert_int_eq(cpu->dropout_bwd(y, a, b, n, acc), HOOP_OK);
            ck_assert_int_eq(gpu->dropout_bwd(dy, da, db, n, acc), HOOP_OK);
            expect_close(what, y, dy, n, 0, 0);
            hoop__cuda_free(da);
            hoop__cuda_free(db);
            hoop__cuda_free(dy);
            free(a);
            free(b);
            free(y);
        }
}
END_TEST

/* A copy or a scale by a positive number keeps the sign of zero, as the CPU's memcpy and
 * *= do (a + 0 in a kernel would make -0 into +0). */
START_TEST(test_signed_zero)
{
    float h[2] = {-0.0f, 1.0f}, got[2];
    float *src = dev_copy(h, 2), *dst = dev_copy(h + 1, 1);
    void *d2 = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&d2, 2 * sizeof(float)), HOOP_OK);
    ck_assert_int_eq(gpu->axpy_or_copy(d2, src, 2, 0), HOOP_OK);
    ck_assert_int_eq(gpu->scale(src, 2, 2.0f), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(got, d2, 2 * sizeof(float), 0), HOOP_OK);
    ck_assert_msg(signbit(got[0]), "copy: -0 became %g", got[0]);
    ck_assert_int_eq(hoop__cuda_copy(got, src, 2 * sizeof(float), 0), HOOP_OK);
    ck_assert_msg(signbit(got[0]), "scale: -0 x 2 became %g", got[0]);
    hoop__cuda_free(src);
    hoop__cuda_free(dst);
    hoop__cuda_free(d2);
}
END_TEST

START_TEST(test_bias)
{
    const size_t shapes[][3] = {{1, 1, 1}, {3, 10, 1}, {7, 257, 1}, {2, 3, 25}, {5, 16, 169}};
    for (size_t s = 0; s < 5; s++)
        for (int with = 0; with < 2; with++) {
            size_t N = shapes[s][0], C = shapes[s][1], in = shapes[s][2], n = N * C * in;
            float *x = host_vec(n, 4), *bias = host_vec(C, 5), *y = host_vec(n, 6);
            float *dx = dev_copy(x, n), *dbias = dev_copy(bias, C), *dy = dev_copy(y, n);
            char what[64];
            snprintf(what, sizeof(what), "bias_fill %zux%zux%zu bias=%d", N, C, in, with);
            ck_assert_int_eq(cpu->bias_fill(y, with ? bias : NULL, N, C, in), HOOP_OK);
            ck_assert_int_eq(gpu->bias_fill(dy, with ? dbias : NULL, N, C, in), HOOP_OK);
            expect_close(what, y, dy, n, 0, 0);
            snprintf(what, sizeof(what), "bias_add %zux%zux%zu", N, C, in);
            ck_assert_int_eq(cpu->bias_add(y, x, bias, N, C, in), HOOP_OK);
            ck_assert_int_eq(gpu->bias_add(dy, dx, dbias, N, C, in), HOOP_OK);
            expect_close(what, y, dy, n, 0, 0);
            hoop__cuda_free(dx);
            hoop__cuda_free(dbias);
            hoop__cuda_free(dy);
            free(x);
            free(bias);
            free(y);
        }
}
END_TEST

/* Dropout draws the same mask on both devices from the same (seed, offset) -- bitwise --,
 * at offsets inside a Philox block as well, and drops about p of the elements. */
START_TEST(test_dropout_same_mask)
{
    const float ps[] = {0.1f, 0.5f, 0.9f};
    const uint64_t offsets[] = {0, 3, 123457};
    for (size_t k = 0; k < NSIZES; k++)
        for (int pi = 0; pi < 3; pi++)
            for (int oi = 0; oi < 3; oi++) {
                size_t n = sizes[k];
                float *x = host_vec(n, 11), *y = host_vec(n, 12), *m = host_vec(n, 13);
                float *dx = dev_copy(x, n), *dy = dev_copy(y, n), *dm = dev_copy(m, n);
                uint64_t seed = 0xfeedu + (uint64_t)k, *dseed = NULL;
                ck_assert_int_eq(hoop__cuda_malloc((void **)&dseed, sizeof(seed)), HOOP_OK);
                ck_assert_int_eq(hoop__cuda_copy(dseed, &seed, sizeof(seed), 1), HOOP_OK);
                ck_assert_int_eq(cpu->dropout_fwd(y, m, x, n, ps[pi], &seed, offsets[oi]), HOOP_OK);
                ck_assert_int_eq(gpu->dropout_fwd(dy, dm, dx, n, ps[pi], dseed, offsets[oi]),
                                 HOOP_OK);
                hoop__cuda_free(dseed);
                char what[64];
                snprintf(what, sizeof(what), "dropout mask n=%zu p=%g offset=%llu", n,
                         (double)ps[pi], (unsigned long long)offsets[oi]);
                expect_close(what, m, dm, n, 0, 0);
                expect_close(what, y, dy, n, 0, 0);
                if (n >= 4099) {
                    size_t zeros = 0;
                    for (size_t i = 0; i < n; i++) zeros += m[i] == 0.0f;
                    double rate = (double)zeros / (double)n, se = sqrt(ps[pi] * (1 - ps[pi]) / n);
                    ck_assert_msg(fabs(rate - ps[pi]) < 5 * se, "p=%g: dropped %g", (double)ps[pi],
                                  rate);
                }
                hoop__cuda_free(dx);
                hoop__cuda_free(dy);
                hoop__cuda_free(dm);
                free(x);
                free(y);
                free(m);
            }
}
END_TEST

/* Every transpose pair, alpha and beta, and leading dimensions wider than the rows. */
START_TEST(test_gemm)
{
    const int shapes[][3] = {{1, 1, 1},     {3, 5, 7},   {17, 2, 33},
                             {64, 10, 128}, {5, 1, 300}, {4, 6, 0}};
    for (size_t s = 0; s < 6; s++)
        for (int t = 0; t < 4; t++)
            for (int pad = 0; pad < 2; pad++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = t & 1, tb = t >> 1;
                int lda = (ta ? M : K) + 3 * pad, ldb = (tb ? K : N) + 2 * pad, ldc = N + pad;
                if (lda < 1) lda = 1; /* K = 0: a leading dimension is still >= 1 */
                if (ldb < 1) ldb = 1;
                size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
                size_t nc = (size_t)M * ldc;
                float *a = host_vec(na, 7), *b = host_vec(nb, 8), *c = host_vec(nc, 9);
                float beta = pad ? 0.5f : 0.0f;
                if (beta == 0.0f) /* beta 0 writes C: its old contents (NaN) are not read */
                    for (size_t i = 0; i < nc; i++) c[i] = NAN;
                float *da = dev_copy(a, na), *db = dev_copy(b, nb), *dc = dev_copy(c, nc);
                ck_assert_int_eq(cpu->gemm(ta, tb, M, N, K, 1.25f, a, lda, b, ldb, beta, c, ldc),
                                 HOOP_OK);
                ck_assert_int_eq(gpu->gemm(ta, tb, M, N, K, 1.25f, da, lda, db, ldb, beta, dc, ldc),
                                 HOOP_OK);
                char what[80];
                snprintf(what, sizeof(what), "gemm %dx%dx%d ta=%d tb=%d pad=%d", M, N, K, ta, tb,
                         pad);
                /* 2 = |val| bound: each product <= 4 x 1.25, K of them, plus beta |c| */
                expect_close(what, c, dc, nc, 0, 1e-6 * K * 5.0 * 4.0 + 1e-6);
                hoop__cuda_free(da);
                hoop__cuda_free(db);
                hoop__cuda_free(dc);
                free(a);
                free(b);
                free(c);
            }
}
END_TEST

#ifndef HOOP_KERN_CUDA_GPU
void hoop__hx_blas_last_workspace(void **workspace, size_t *bytes); /* src/cuda/hx_blas.h */

/* Every GEMM runs on the thread's own cuBLAS workspace, bound again after each
 * cublasSetStream (which puts the handle back on cuBLAS's default pool): so a GEMM
 * captured into a graph allocates nothing there and picks the eager one's algorithm. */
START_TEST(test_gemm_workspace)
{
    float *d = dev_copy((const float[4]){1, 2, 3, 4}, 4), *dc = NULL;
    ck_assert_int_eq(hoop__cuda_malloc((void **)&dc, 4 * sizeof(float)), HOOP_OK);
    for (int r = 0; r < 2; r++) {
        void *ws = NULL;
        size_t bytes = 0;
        ck_assert_int_eq(gpu->gemm(0, 0, 2, 2, 1, 1.0f, d, 1, d, 2, 0.0f, dc, 2), HOOP_OK);
        hoop__hx_blas_last_workspace(&ws, &bytes);
        ck_assert_msg(ws != NULL && bytes >= (4u << 20),
                      "GEMM %d ran on cuBLAS's default workspace (%p, %zu bytes)", r, ws, bytes);
    }
    hoop__cuda_free(d);
    hoop__cuda_free(dc);
}
END_TEST
#endif

int main(void)
{
    kern_cuda_needs_device("check_kern_cuda");
    Suite *s = suite_create("kern_cuda");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_table_complete);
    tcase_add_test(tc, test_elementwise);
    tcase_add_test(tc, test_bias);
    tcase_add_test(tc, test_signed_zero);
    tcase_add_test(tc, test_gemm);
#ifndef HOOP_KERN_CUDA_GPU
    tcase_add_test(tc, test_gemm_workspace);
#endif
    tcase_add_test(tc, test_dropout_same_mask);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
