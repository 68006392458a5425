/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_bench.c -- hoop-bench's own reference: half conversions against hand-worked
 * bit patterns, nccl-tests' layouts and busbw factors, and the check itself, run on
 * collectives simulated here in double arithmetic (it must count 0 on right results and
 * exactly the elements corrupted on wrong ones).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "run_suite.h"

START_TEST(test_f16_bits)
{
    ck_assert_uint_eq(bench_f16_from_double(1.0), 0x3c00);
    ck_assert_uint_eq(bench_f16_from_double(-2.0), 0xc000);
    ck_assert_uint_eq(bench_f16_from_double(65504.0), 0x7bff);
    ck_assert_uint_eq(bench_f16_from_double(65519.0), 0x7bff);
    ck_assert_uint_eq(bench_f16_from_double(65520.0), 0x7c00); /* ties to even: inf */
    ck_assert_uint_eq(bench_f16_from_double(0x1p-24), 0x0001);
    ck_assert_uint_eq(bench_f16_from_double(0x1p-14), 0x0400);
    ck_assert_uint_eq(bench_f16_from_double(1.0 + 0x1p-11), 0x3c00);     /* tie, even */
    ck_assert_uint_eq(bench_f16_from_double(1.0 + 3 * 0x1p-11), 0x3c02); /* tie, even */
    ck_assert_uint_eq(bench_f16_from_double(2047.5), 0x6800); /* 2048: tie rounds up, carry */
    ck_assert(bench_f16_to_double(0x7bff) == 65504.0);
    ck_assert(bench_f16_to_double(0x0001) == 0x1p-24);
    ck_assert(bench_f16_to_double(0xc000) == -2.0);
}
END_TEST

START_TEST(test_bf16_bits)
{
    ck_assert_uint_eq(bench_bf16_from_double(1.0), 0x3f80);
    ck_assert_uint_eq(bench_bf16_from_double(3.0), 0x4040);
    ck_assert_uint_eq(bench_bf16_from_double(256.0), 0x4380);
    ck_assert_uint_eq(bench_bf16_from_double(257.0), 0x4380);            /* tie, even */
    ck_assert_uint_eq(bench_bf16_from_double(1.0 + 3 * 0x1p-8), 0x3f82); /* tie, even */
    ck_assert(bench_bf16_to_double(0x4380) == 256.0);
    ck_assert(bench_bf16_to_double(0x3f82) == 1.0 + 0x1p-6);
}
END_TEST

START_TEST(test_layout_and_factors)
{
    bench_layout L = bench_layout_of(BENCH_ALLGATHER, 100, 4, 3);
    ck_assert_uint_eq(L.count, 8);
    ck_assert_uint_eq(L.send_elems, 8);
    ck_assert_uint_eq(L.recv_elems, 24);
    ck_assert_uint_eq(L.bytes, 96);
    L = bench_layout_of(BENCH_REDUCESCATTER, 100, 4, 3);
    ck_assert_uint_eq(L.send_elems, 24);
    ck_assert_uint_eq(L.recv_elems, 8);
    L = bench_layout_of(BENCH_ALLREDUCE, 10, 4, 3);
    ck_assert_uint_eq(L.count, 2);
    ck_assert_uint_eq(L.bytes, 8);
    ck_assert(bench_bus_factor(BENCH_ALLREDUCE, 4) == 1.5);
    ck_assert(bench_bus_factor(BENCH_ALLGATHER, 4) == 0.75);
    ck_assert(bench_bus_factor(BENCH_REDUCESCATTER, 2) == 0.5);
    ck_assert(bench_bus_factor(BENCH_BROADCAST, 8) == 1.0);
    ck_assert(bench_bus_factor(BENCH_REDUCE, 8) == 1.0);
    ck_assert_int_eq(bench_coll_from_name("reducescatter"), BENCH_REDUCESCATTER);
    ck_assert_int_eq(bench_coll_from_name("gather"), BENCH_COLL_COUNT_);
}
END_TEST

/* Simulates an f32 or i32 all-reduce / reduce-scatter over n ranks from the buffers
 * bench_prepare wrote, in double arithmetic, into out (rank `me`'s result). */
static void simulate_reduce(bench_case bc, const bench_layout *L, int me, void *out)
{
    size_t elt = hoop_dtype_size(bc.dtype), ne = L->send_elems;
    double *acc = calloc(ne, sizeof(double));
    void *s = malloc(ne * elt), *r = malloc(L->recv_elems * elt), *cs, *cr;
    for (int q = 0; q < bc.world_size; q++) {
        bc.rank = q;
        bench_prepare(&bc, L, 0, s, r, &cs, &cr);
        for (size_t j = 0; j < ne; j++) {
            double v = bc.dtype == HOOP_DTYPE_F32 ? ((float *)s)[j] : ((int32_t *)s)[j];
            acc[j] = q == 0 ? v : bc.op == HOOP_OP_MAX ? (v > acc[j] ? v : acc[j]) : acc[j] + v;
        }
    }
    size_t off = bc.coll == BENCH_REDUCESCATTER ? (size_t)me * L->count : 0;
    for (size_t j = 0; j < L->recv_elems; j++) {
        double v = acc[off + j] / (bc.op == HOOP_OP_AVG ? bc.world_size : 1);
        if (bc.dtype == HOOP_DTYPE_F32)
            ((float *)out)[j] = (float)v;
        else
            ((int32_t *)out)[j] = (int32_t)v;
    }
    free(acc), free(s), free(r);
}

START_TEST(test_check_counts_corruption)
{
    const bench_coll colls[2] = {BENCH_ALLREDUCE, BENCH_REDUCESCATTER};
    const hoop_op ops[3] = {HOOP_OP_SUM, HOOP_OP_MAX, HOOP_OP_AVG};
    for (int ci = 0; ci < 2; ci++)
        for (int oi = 0; oi < 3; oi++)
            for (int n = 1; n <= 5; n++) {
                hoop_dtype dt = oi == 1 ? HOOP_DTYPE_I32 : HOOP_DTYPE_F32;
                bench_case bc = {colls[ci], dt, ops[oi], -1, n - 1, n};
                bench_layout L = bench_layout_of(colls[ci], 4 * (37 * n + 3), 4, n);
                unsigned char *out = malloc(L.recv_elems * 4 + 4);
                simulate_reduce(bc, &L, n - 1, out);
                ck_assert_uint_eq(bench_count_wrong(&bc, &L, out), 0);
                out[5] ^= 0x40, out[4 * (L.recv_elems - 1) + 2] ^= 0x01;
                ck_assert_uint_eq(bench_count_wrong(&bc, &L, out), 2);
                free(out);
            }
}
END_TEST

START_TEST(test_check_gather_broadcast)
{
    for (int n = 1; n <= 4; n++) {
        bench_case bc = {BENCH_ALLGATHER, HOOP_DTYPE_F16, HOOP_OP_SUM, -1, 0, n};
        bench_layout L = bench_layout_of(BENCH_ALLGATHER, 2 * 11 * n, 2, n);
        uint16_t *all = calloc(L.recv_elems, 2), *s = malloc(L.count * 2),
                 *r = malloc(L.recv_elems * 2);
        void *cs, *cr;
        for (int q = 0; q < n; q++) { /* rank q's contribution lands at block q */
            bc.rank = q;
            bench_prepare(&bc, &L, 0, s, all, &cs, &cr);
            memcpy(r + (size_t)q * L.count, s, L.count * 2);
        }
        ck_assert_uint_eq(bench_count_wrong(&bc, &L, r), 0);
        r[L.recv_elems - 1] ^= 0x0400;
        ck_assert_uint_eq(bench_count_wrong(&bc, &L, r), 1);
        free(all), free(s), free(r);
    }
    bench_case bb = {BENCH_BROADCAST, HOOP_DTYPE_F32, HOOP_OP_SUM, 1, 0, 3};
    bench_layout L = bench_layout_of(BENCH_BROADCAST, 40, 4, 3);
    float buf[10], zero[10] = {0};
    void *cs, *cr;
    bench_prepare(&bb, &L, 1, buf, buf, &cs, &cr); /* rank 0, in place: zeroed */
    ck_assert_uint_eq(bench_count_wrong(&bb, &L, buf), 10);
    bb.rank = 1;
    bench_prepare(&bb, &L, 1, buf, buf, &cs, &cr); /* the root's data */
    ck_assert_uint_eq(bench_count_wrong(&bb, &L, buf), 0);
    ck_assert_uint_eq(bench_count_wrong(&bb, &L, zero), 10);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench");
    TCase *tc = tcase_create("reference");
    tcase_add_test(tc, test_f16_bits);
    tcase_add_test(tc, test_bf16_bits);
    tcase_add_test(tc, test_layout_and_factors);
    tcase_add_test(tc, test_check_counts_corruption);
    tcase_add_test(tc, test_check_gather_broadcast);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
