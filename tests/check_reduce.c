/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_reduce.c -- the CPU reduction kernels and the half-precision conversions.
 *
 * Conversions are checked against bit patterns worked out by hand from IEEE 754 (ties
 * to even, overflow to infinity, subnormals) and by a full round trip of every f16
 * value; kernels against plain double arithmetic on values where that is exact.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll.h"
#include "run_suite.h"

START_TEST(test_f16_bits)
{
    ck_assert_uint_eq(hoop__f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(hoop__f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(hoop__f32_to_f16(65504.0f), 0x7bff);              /* largest finite */
    ck_assert_uint_eq(hoop__f32_to_f16(65520.0f), 0x7c00);              /* rounds to inf */
    ck_assert_uint_eq(hoop__f32_to_f16(ldexpf(1, -24)), 0x0001);        /* smallest subnormal */
    ck_assert_uint_eq(hoop__f32_to_f16(ldexpf(1, -25)), 0x0000);        /* tie -> even (0) */
    ck_assert_uint_eq(hoop__f32_to_f16(ldexpf(3, -25)), 0x0002);        /* tie -> even (2) */
    ck_assert_uint_eq(hoop__f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00); /* tie -> even */
    ck_assert_uint_eq(hoop__f32_to_f16(1.0f + ldexpf(3, -11)), 0x3c02); /* tie -> even */
    ck_assert_uint_eq(hoop__f32_to_f16(1.0f + ldexpf(1, -10)), 0x3c01);
    ck_assert_uint_eq(hoop__f32_to_f16(INFINITY), 0x7c00);
    ck_assert_uint_eq(hoop__f32_to_f16(NAN) & 0x7e00, 0x7e00); /* quiet nan */
}
END_TEST

START_TEST(test_f16_round_trip)
{
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* nan payloads */
        ck_assert_uint_eq(hoop__f32_to_f16(hoop__f16_to_f32((uint16_t)h)), h);
    }
    ck_assert(hoop__f16_to_f32(0x0001) == ldexpf(1, -24));
    ck_assert(hoop__f16_to_f32(0x3555) == 0x1.554p-2f); /* 1/3 rounded */
}
END_TEST

START_TEST(test_bf16_bits)
{
    ck_assert_uint_eq(hoop__f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(hoop__f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80); /* tie -> even */
    ck_assert_uint_eq(hoop__f32_to_bf16(1.0f + ldexpf(3, -8)), 0x3f82); /* tie -> even */
    ck_assert_uint_eq(hoop__f32_to_bf16(1.0f + ldexpf(5, -9)), 0x3f81); /* above the tie */
    ck_assert(hoop__bf16_to_f32(0x4040) == 3.0f);
    ck_assert_uint_eq(hoop__f32_to_bf16(NAN) & 0x7fc0, 0x7fc0);
}
END_TEST

/* Every (dtype, op) against double arithmetic; the result may alias an operand. */
START_TEST(test_kernels)
{
    enum { N = 1031 };
    for (int t = 0; t < HOOP_DTYPE_COUNT_; t++)
        for (int op = 0; op < HOOP_OP_COUNT_; op++) {
            size_t es = hoop_dtype_size((hoop_dtype)t);
            unsigned char *a = malloc(N * es), *b = malloc(N * es);
            double x[N], y[N];
            for (int i = 0; i < N; i++) {
                x[i] = (i % 9) - (t == HOOP_DTYPE_U8 ? 0 : 4);
                y[i] = (i % 5) - (t == HOOP_DTYPE_U8 ? 0 : 2);
                float fx = (float)x[i], fy = (float)y[i];
                switch (t) {
                case HOOP_DTYPE_F32: ((float *)a)[i] = fx, ((float *)b)[i] = fy; break;
                case HOOP_DTYPE_F64: ((double *)a)[i] = x[i], ((double *)b)[i] = y[i]; break;
                case HOOP_DTYPE_F16:
                    ((uint16_t *)a)[i] = hoop__f32_to_f16(fx);
                    ((uint16_t *)b)[i] = hoop__f32_to_f16(fy);
                    break;
                case HOOP_DTYPE_BF16:
                    ((uint16_t *)a)[i] = hoop__f32_to_bf16(fx);
                    ((uint16_t *)b)[i] = hoop__f32_to_bf16(fy);
                    break;
                case HOOP_DTYPE_I32:
                    ((int32_t *)a)[i] = (int32_t)x[i], ((int32_t *)b)[i] = (int32_t)y[i];
                    break;
                case HOOP_DTYPE_I64:
                    ((int64_t *)a)[i] = (int64_t)x[i], ((int64_t *)b)[i] = (int64_t)y[i];
                    break;
                default:
                    ((uint8_t *)a)[i] = (uint8_t)x[i], ((uint8_t *)b)[i] = (uint8_t)y[i];
                    break;
                }
            }
            int div = op == HOOP_OP_AVG ? 4 : 0;
            hoop__reduce((hoop_dtype)t, (hoop_op)op, a, a, b, N, div);
            for (int i = 0; i < N; i++) {
                double want = op == HOOP_OP_PROD  ? x[i] * y[i]
                              : op == HOOP_OP_MIN ? fmin(x[i], y[i])
                              : op == HOOP_OP_MAX ? fmax(x[i], y[i])
                                                  : x[i] + y[i];
                if (op == HOOP_OP_AVG) want /= 4; /* quarters: exact in every float type */
                double got;
                switch (t) {
                case HOOP_DTYPE_F32: got = ((float *)a)[i]; break;
                case HOOP_DTYPE_F64: got = ((double *)a)[i]; break;
                case HOOP_DTYPE_F16: got = hoop__f16_to_f32(((uint16_t *)a)[i]); break;
                case HOOP_DTYPE_BF16: got = hoop__bf16_to_f32(((uint16_t *)a)[i]); break;
                case HOOP_DTYPE_I32: got = ((int32_t *)a)[i]; break;
                case HOOP_DTYPE_I64: got = (double)((int64_t *)a)[i]; break;
                default:
                    got = ((uint8_t *)a)[i];
                    want = (double)((int64_t)want & 0xff);
                    break;
                }
                if (op == HOOP_OP_AVG && t >= HOOP_DTYPE_I32) want = x[i] + y[i]; /* no divide */
                if (t == HOOP_DTYPE_U8 && op != HOOP_OP_MIN && op != HOOP_OP_MAX)
                    want =
                        (double)((int64_t)(op == HOOP_OP_PROD ? x[i] * y[i] : x[i] + y[i]) & 0xff);
                ck_assert_msg(got == want, "%s %s [%d]: got %g want %g", hoop_dtype_name(t),
                              hoop_op_name(op), i, got, want);
            }
            free(a);
            free(b);
        }
}
END_TEST

/* Integer sums wrap instead of invoking undefined behaviour. */
START_TEST(test_wrap)
{
    int32_t a = INT32_MAX, b = 1, d;
    hoop__reduce(HOOP_DTYPE_I32, HOOP_OP_SUM, &d, &a, &b, 1, 0);
    ck_assert_int_eq(d, INT32_MIN);
    uint8_t x = 200, y = 100, z;
    hoop__reduce(HOOP_DTYPE_U8, HOOP_OP_SUM, &z, &x, &y, 1, 0);
    ck_assert_uint_eq(z, 44);
}
END_TEST

/* MIN and MAX propagate NaN whichever operand holds it, in every floating dtype and in
 * place or not (the rule of collectives.h: torch.maximum's). */
START_TEST(test_nan_propagates)
{
    hoop_dtype ts[] = {HOOP_DTYPE_F32, HOOP_DTYPE_F64, HOOP_DTYPE_F16, HOOP_DTYPE_BF16};
    hoop_op ops[] = {HOOP_OP_MIN, HOOP_OP_MAX};
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t oi = 0; oi < 2; oi++)
            for (int side = 0; side < 2; side++) {
                hoop_dtype t = ts[ti];
                enum { N = 37 };
                unsigned char a[N * 8], b[N * 8], d[N * 8];
                for (size_t i = 0; i < N; i++) { /* NaN at i % 3 == 0, on side a or b */
                    double x = (double)i - 5, y = 3 - (double)i;
                    if (i % 3 == 0) *(side ? &y : &x) = NAN;
                    switch (t) {
                    case HOOP_DTYPE_F32:
                        ((float *)a)[i] = (float)x, ((float *)b)[i] = (float)y;
                        break;
                    case HOOP_DTYPE_F64: ((double *)a)[i] = x, ((double *)b)[i] = y; break;
                    case HOOP_DTYPE_F16:
                        ((uint16_t *)a)[i] = hoop__f32_to_f16((float)x);
                        ((uint16_t *)b)[i] = hoop__f32_to_f16((float)y);
                        break;
                    default:
                        ((uint16_t *)a)[i] = hoop__f32_to_bf16((float)x);
                        ((uint16_t *)b)[i] = hoop__f32_to_bf16((float)y);
                    }
                }
                for (int alias = 0; alias < 2; alias++) {
                    unsigned char *dst = alias ? a : d, keep[N * 8];
                    memcpy(keep, a, sizeof(keep));
                    hoop__reduce(t, ops[oi], dst, a, b, N, 0);
                    for (size_t i = 0; i < N; i++) {
                        double r = t == HOOP_DTYPE_F32   ? ((float *)dst)[i]
                                   : t == HOOP_DTYPE_F64 ? ((double *)dst)[i]
                                   : t == HOOP_DTYPE_F16 ? hoop__f16_to_f32(((uint16_t *)dst)[i])
                                                         : hoop__bf16_to_f32(((uint16_t *)dst)[i]);
                        double x = (double)i - 5, y = 3 - (double)i;
                        double want = ops[oi] == HOOP_OP_MIN ? fmin(x, y) : fmax(x, y);
                        if (i % 3 == 0)
                            ck_assert_msg(isnan(r), "%s %s side %d alias %d [%zu] = %g, not NaN",
                                          hoop_dtype_name(t), hoop_op_name(ops[oi]), side, alias, i,
                                          r);
                        else
                            ck_assert_msg(r == want, "%s %s [%zu] = %g, want %g",
                                          hoop_dtype_name(t), hoop_op_name(ops[oi]), i, r, want);
                    }
                    memcpy(a, keep, sizeof(keep));
                }
            }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reduce");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_f16_bits);
    tcase_add_test(tc, test_f16_round_trip);
    tcase_add_test(tc, test_bf16_bits);
    tcase_add_test(tc, test_kernels);
    tcase_add_test(tc, test_wrap);
    tcase_add_test(tc, test_nan_propagates);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
