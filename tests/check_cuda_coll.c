/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_cuda_coll.c -- the collectives' device reduction (src/cuda/coll.h) against
 * the host's (hoop__reduce, src/collectives/reduce.c, itself checked against float64 and
 * integer references by check_reduce and check_collectives): every dtype x op, the
 * executor's saturating sum for f16 / bf16, an average's divisor, sizes around the block
 * and grid-stride bounds, out of place and in place on either operand, on data full of
 * special values (NaN, infinities, signed zeros, subnormals, values whose sum overflows
 * the type). Results must be bitwise the host's; on a GPU a NaN result need only be a
 * NaN (which NaN the hardware makes is unspecified).
 *
 * check_cuda_coll runs the kernels on the host execution layer (src/cuda/hx.h);
 * check_cuda_coll_gpu runs them on a GPU (77 without one), in one process (no fork).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "cuda/coll.h"
#include "cuda/ctx.h"
#include "run_suite.h"

#ifdef HOOP_KERN_CUDA_GPU
#include <cuda_runtime_api.h>
#define HX 0
#else
#define HX 1
#endif

/* splitmix64 (Steele, Lea & Flood 2014): consecutive outputs are independent enough that
 * both operands of an element are special values together as often as chance says
 * (xorshift's low bits are not: its a[i] and b[i] never were both 60000 here). */
static uint64_t rng = 1;
static uint64_t next_u64(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* One element of dtype t: mostly ordinary values, often special ones. */
static void fill_elem(hoop_dtype t, void *p)
{
    uint64_t r = next_u64();
    int special = (int)(r % 8) == 0;
    unsigned pick = (unsigned)(r >> 8) % 6;
    switch (t) {
    case HOOP_DTYPE_F32: {
        static const float sp[] = {NAN, INFINITY, -INFINITY, -0.0f, 1e-45f, 3e38f};
        float v = special ? sp[pick] : (float)((int64_t)(r >> 20) % 2001 - 1000) / 7.0f;
        memcpy(p, &v, 4);
        break;
    }
    case HOOP_DTYPE_F64: {
        static const double sp[] = {NAN, INFINITY, -INFINITY, -0.0, 5e-324, 1.7e308};
        double v = special ? sp[pick] : (double)((int64_t)(r >> 20) % 2001 - 1000) / 7.0;
        memcpy(p, &v, 8);
        break;
    }
    case HOOP_DTYPE_F16: {
        /* NaN, inf, -inf, -0, a subnormal, 60000 (two of them overflow) */
        static const uint16_t sp[] = {0x7e00, 0x7c00, 0xfc00, 0x8000, 0x0001, 0x7b53};
        uint16_t v =
            special ? sp[pick] : hoop__f32_to_f16((float)((int)(r >> 20) % 2001 - 1000) / 7.0f);
        memcpy(p, &v, 2);
        break;
    }
    case HOOP_DTYPE_BF16: {
        static const uint16_t sp[] = {0x7fc0, 0x7f80, 0xff80, 0x8000, 0x0001, 0x7f7f};
        uint16_t v =
            special ? sp[pick] : hoop__f32_to_bf16((float)((int)(r >> 20) % 2001 - 1000) / 7.0f);
        memcpy(p, &v, 2);
        break;
    }
    case HOOP_DTYPE_I32: {
        int32_t v = special ? (pick % 2 ? INT32_MAX : INT32_MIN) : (int32_t)(r >> 16);
        memcpy(p, &v, 4);
        break;
    }
    case HOOP_DTYPE_I64: {
        int64_t v = special ? (pick % 2 ? INT64_MAX : INT64_MIN) : (int64_t)r;
        memcpy(p, &v, 8);
        break;
    }
    default: {
        uint8_t v = (uint8_t)(r >> 24);
        memcpy(p, &v, 1);
        break;
    }
    }
}

static int is_nan(hoop_dtype t, const char *p)
{
    if (t == HOOP_DTYPE_F32) {
        float v;
        memcpy(&v, p, 4);
        return isnan(v);
    }
    if (t == HOOP_DTYPE_F64) {
        double v;
        memcpy(&v, p, 8);
        return isnan(v);
    }
    if (t == HOOP_DTYPE_F16 || t == HOOP_DTYPE_BF16) {
        uint16_t v;
        memcpy(&v, p, 2);
        return t == HOOP_DTYPE_F16 ? (v & 0x7c00) == 0x7c00 && (v & 0x3ff)
                                   : (v & 0x7f80) == 0x7f80 && (v & 0x7f);
    }
    return 0;
}

/* The device's dst = a (op) b against hoop__reduce on the same bytes; where: 0 out of
 * place, 1 in place on a, 2 in place on b. */
static void check_one(hoop_dtype t, hoop_op op, size_t count, int divisor, int where)
{
    size_t elem = hoop_dtype_size(t), bytes = count * elem;
    char *a = malloc(bytes + 1), *b = malloc(bytes + 1), *want = malloc(bytes + 1),
         *got = malloc(bytes + 1);
    ck_assert(a && b && want && got);
    for (size_t i = 0; i < count; i++) fill_elem(t, a + i * elem), fill_elem(t, b + i * elem);
    hoop__reduce(t, op, want, a, b, count, divisor);
    void *da = NULL, *db = NULL, *dd = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&da, bytes + 1), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_malloc(&db, bytes + 1), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_malloc(&dd, bytes + 1), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(da, a, bytes, 1), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(db, b, bytes, 1), HOOP_OK);
    memset(got, 0x5a, bytes + 1);
    ck_assert_int_eq(hoop__cuda_copy(dd, got, bytes + 1, 1), HOOP_OK); /* a guard byte past */
    void *dst = where == 1 ? da : where == 2 ? db : dd;
    hoop_status st =
        hoop__cuda_coll_reduce(t, op, dst, da, db, count, divisor, hoop__cuda_stream());
    ck_assert_msg(st == HOOP_OK, "%s", hoop_last_error());
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    ck_assert_int_eq(hoop__cuda_copy(got, dst, bytes + (where == 0), 0), HOOP_OK);
    if (where == 0) ck_assert_msg((unsigned char)got[bytes] == 0x5a, "wrote past the end");
    for (size_t i = 0; i < count; i++) {
        const char *w = want + i * elem, *g = got + i * elem;
        if (!HX && is_nan(t, w) && is_nan(t, g)) continue;
        if (memcmp(w, g, elem) != 0) {
            uint64_t wv = 0, gv = 0;
            memcpy(&wv, w, elem);
            memcpy(&gv, g, elem);
            ck_abort_msg("%s %s count %zu divisor %d (%s): element %zu is 0x%llx, host 0x%llx",
                         hoop_dtype_name(t), op == HOOP__OP_SUM_SAT ? "sum_sat" : hoop_op_name(op),
                         count, divisor,
                         where == 0   ? "out of place"
                         : where == 1 ? "dst = a"
                                      : "dst = b",
                         i, (unsigned long long)gv, (unsigned long long)wv);
        }
    }
    hoop__cuda_free(da);
    hoop__cuda_free(db);
    hoop__cuda_free(dd);
    free(a), free(b), free(want), free(got);
}

/* Sizes: 1, around one block (256), and past the grid's 4096 blocks (grid-stride). */
static const size_t sizes[] = {1, 255, 257, 4096 * 256 + 3};

START_TEST(test_every_dtype_op)
{
    hoop_dtype t = (hoop_dtype)_i;
    for (int op = 0; op < HOOP_OP_COUNT_; op++) {
        int fl = t == HOOP_DTYPE_F32 || t == HOOP_DTYPE_F64 || t == HOOP_DTYPE_F16 ||
                 t == HOOP_DTYPE_BF16;
        if (op == HOOP_OP_AVG && !fl) continue; /* the API refuses it */
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            for (int where = 0; where < 3; where++)
                check_one(t, (hoop_op)op, sizes[k] > 300 && where ? 300 : sizes[k],
                          op == HOOP_OP_AVG && where != 1 ? 3 : 0, where);
    }
    if (t == HOOP_DTYPE_F16 || t == HOOP_DTYPE_BF16)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            check_one(t, HOOP__OP_SUM_SAT, sizes[k], 0, 0);
}
END_TEST

START_TEST(test_errors)
{
    void *d = NULL;
    ck_assert_int_eq(hoop__cuda_malloc(&d, 64), HOOP_OK);
    ck_assert_int_eq(
        hoop__cuda_coll_reduce((hoop_dtype)99, HOOP_OP_SUM, d, d, d, 1, 0, hoop__cuda_stream()),
        HOOP_ERR_INVALID);
    ck_assert_int_eq(
        hoop__cuda_coll_reduce(HOOP_DTYPE_F32, (hoop_op)77, d, d, d, 1, 0, hoop__cuda_stream()),
        HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__cuda_coll_reduce(HOOP_DTYPE_I32, HOOP__OP_SUM_SAT, d, d, d, 1, 0,
                                            hoop__cuda_stream()),
                     HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__cuda_coll_reduce(HOOP_DTYPE_F64, HOOP_OP_SUM, d, d, d, SIZE_MAX / 4, 0,
                                            hoop__cuda_stream()),
                     HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop__cuda_coll_reduce(HOOP_DTYPE_F32, HOOP_OP_SUM, NULL, NULL, NULL, 0, 0,
                                            hoop__cuda_stream()),
                     HOOP_OK); /* nothing to do: nothing launched */
    hoop__cuda_free(d);
}
END_TEST

#ifdef HOOP_KERN_CUDA_GPU
/* 1 when CUDA sees a device (run in a child: the parent must not initialise CUDA). */
static int gpu_present(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#endif

int main(void)
{
#ifdef HOOP_KERN_CUDA_GPU
    if (in_child(gpu_present) != 1) {
        puts("check_cuda_coll_gpu: no usable GPU here: skipped (check_cuda_coll runs the same "
             "checks on the host execution layer)");
        return 77;
    }
#endif
    Suite *s = suite_create(HX ? "cuda_coll (host execution layer)" : "cuda_coll (GPU)");
    TCase *tc = tcase_create("reduce");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_every_dtype_op, 0, HOOP_DTYPE_COUNT_);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
#ifdef HOOP_KERN_CUDA_GPU
    srunner_set_fork_status(sr, CK_NOFORK);
#endif
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
