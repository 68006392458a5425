/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_cuda_coll.c -- the collectives' device reduction (src/cuda/coll.h) against
 * the host's (hoop__reduce, src/collectives/reduce.c, itself checked against float64 and
 * integer references by check_reduce and check_collectives): every dtype x op, the
 * executor's saturating sum for f16 / bf16, an average's divisor, sizes around the block
 * and grid-stride bounds, out of place and in place on either operand, on data full of
 * special values (NaN, infinities, signed zeros, subnormals, values whose sum overflows
 * the type). Results must be bitwise the host's; on a GPU a NaN result need only be a
 * NaN (which NaN the hardware makes is unspecified). The same for the direct algorithm's
 * reduction over 1 to 5 (and 64) copies against the host's (hoop__direct_reduce), at
 * offsets and counts around its 16-byte packs, written into every copy or one.
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
#include "collectives/memops.h"
#include "core/clock.h"
#include "cuda/coll.h"
#include "cuda/ctx.h"
#include "hoop/log.h"
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

/* The direct algorithm's device reduction (hoop__cuda_coll_direct) over n copies against
 * the host's (hoop__direct_reduce) on the same bytes: every copy, the elements outside
 * [off, off + count) included, must come out bitwise the same, but that a NaN need only
 * be a NaN, also here: which NaN inf - inf, 0 x inf or two NaNs make depends on the order
 * of the operands, which the host's compiler may swap in its vectorised loops (the result
 * is still one element computed once and copied, so the same NaN on every rank). The
 * copies are separate allocations here, as IPC-mapped peers' copies are. */
static void check_direct(hoop_dtype t, hoop_op op, int n, int me, size_t off, size_t count,
                         int copy_out)
{
    size_t elem = hoop_dtype_size(t), len = (off + count + 5) * elem;
    char *host[HOOP__CUDA_DIRECT_MAX_RANKS], *dev[HOOP__CUDA_DIRECT_MAX_RANKS];
    char *got = malloc(len);
    ck_assert(got != NULL);
    for (int q = 0; q < n; q++) {
        host[q] = malloc(len);
        ck_assert(host[q] != NULL);
        for (size_t i = 0; i < len / elem; i++) fill_elem(t, host[q] + i * elem);
        ck_assert_int_eq(hoop__cuda_malloc((void **)&dev[q], len), HOOP_OK);
        ck_assert_int_eq(hoop__cuda_copy(dev[q], host[q], len, 1), HOOP_OK);
    }
    hoop__direct_reduce(t, op, host, n, me, off * elem, count * elem, elem, copy_out);
    hoop_status st = hoop__cuda_coll_direct(t, op, dev, n, me, off * elem, count * elem, copy_out,
                                            hoop__cuda_stream());
    ck_assert_msg(st == HOOP_OK, "%s", hoop_last_error());
    ck_assert_int_eq(hoop__cuda_sync(), HOOP_OK);
    for (int q = 0; q < n; q++) {
        ck_assert_int_eq(hoop__cuda_copy(got, dev[q], len, 0), HOOP_OK);
        for (size_t i = 0; i < len / elem; i++) {
            const char *w = host[q] + i * elem, *g = got + i * elem;
            if ((is_nan(t, w) && is_nan(t, g)) || memcmp(w, g, elem) == 0) continue;
            uint64_t wv = 0, gv = 0;
            memcpy(&wv, w, elem);
            memcpy(&gv, g, elem);
            ck_abort_msg("direct %s %s, rank %d of %d, %zu elements at %zu, copy_out %d: copy %d "
                         "element %zu is 0x%llx, host 0x%llx",
                         hoop_dtype_name(t), hoop_op_name(op), me, n, count, off, copy_out, q, i,
                         (unsigned long long)gv, (unsigned long long)wv);
        }
        hoop__cuda_free(dev[q]);
        free(host[q]);
    }
    free(got);
}

START_TEST(test_direct_every_dtype_op)
{
    hoop_dtype t = (hoop_dtype)_i;
    int fl =
        t == HOOP_DTYPE_F32 || t == HOOP_DTYPE_F64 || t == HOOP_DTYPE_F16 || t == HOOP_DTYPE_BF16;
    /* offsets (elements) around the 16-byte packs, counts around a pack and a block */
    static const size_t offs[] = {0, 1, 3, 8}, counts[] = {1, 7, 17, 4099};
    for (int op = 0; op < HOOP_OP_COUNT_; op++) {
        if (op == HOOP_OP_AVG && !fl) continue;
        for (int n = 1; n <= 5; n++)
            for (size_t k = 0; k < 4; k++)
                check_direct(t, (hoop_op)op, n, (int)k % n, offs[k], counts[(k + (size_t)n) % 4],
                             (int)(k + (size_t)op) % 2);
    }
    check_direct(t, HOOP_OP_SUM, HOOP__CUDA_DIRECT_MAX_RANKS, 5, 3, 4096 * 256 + 3, 1);
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
    char *bufs[2] = {d, NULL};
    ck_assert_int_eq(hoop__cuda_coll_direct(HOOP_DTYPE_F32, HOOP_OP_SUM, bufs, 2, 0, 0, 8, 1,
                                            hoop__cuda_stream()),
                     HOOP_ERR_INVALID); /* a NULL copy */
    bufs[1] = d;
    ck_assert_int_eq(hoop__cuda_coll_direct(HOOP_DTYPE_F32, HOOP_OP_SUM, bufs, 2, 2, 0, 8, 1,
                                            hoop__cuda_stream()),
                     HOOP_ERR_INVALID); /* rank 2 of 2 */
    ck_assert_int_eq(hoop__cuda_coll_direct(HOOP_DTYPE_F64, HOOP_OP_SUM, bufs, 2, 0, 4, 8, 1,
                                            hoop__cuda_stream()),
                     HOOP_ERR_INVALID); /* not at an element */
    ck_assert_int_eq(hoop__cuda_coll_direct(HOOP_DTYPE_F32, HOOP_OP_SUM, bufs,
                                            HOOP__CUDA_DIRECT_MAX_RANKS + 1, 0, 0, 8, 1,
                                            hoop__cuda_stream()),
                     HOOP_ERR_INVALID); /* too many copies */
    hoop__cuda_free(d);
}
END_TEST

#if HX
/* A memory table's close keeps HOOP_TIMEOUT: its stream waits for a flag nobody sets, so
 * the close gives up at the deadline (HOOP_ERR_TIMEOUT naming it, one WARN line saying the
 * table is leaked) instead of waiting for ever; once the flag is set the stream runs on,
 * nothing of it freed. Host layer only: the deadline must be set before the context is
 * made, which this forked test can do (a GPU test runs in one process). */
static hoop__memops *leaked_table; /* still reachable: the leak is meant */
static int leak_warnings;

static void count_leak_warnings(hoop_log_level level, const char *line, void *user)
{
    (void)user;
    if (level == HOOP_LOG_WARN && strstr(line, "leaked")) leak_warnings++;
}

START_TEST(test_close_deadline)
{
    const struct hoop__cuda_coll *cc = &hoop__cuda_coll_table;
    const struct hoop__cuda_test_rt *rt = &hoop__cuda_test_rt_table;
    setenv("HOOP_TIMEOUT", "0.3", 1); /* libhoop reads it when the context is made: now */
    hoop_log_set(count_leak_warnings, NULL);
    ck_assert_int_eq(cc->memops_open(NULL, NULL, &leaked_table), HOOP_OK);
    uint32_t *flag = NULL;
    ck_assert_int_eq(cc->flag_alloc(&flag), HOOP_OK);
    void *s = rt->memops_stream(leaked_table);
    ck_assert_int_eq(rt->wait_value(s, flag, 1), HOOP_OK);
    int64_t t0 = hoop__now_ns();
    hoop_status st = leaked_table->vt->close(leaked_table);
    double ms = (double)(hoop__now_ns() - t0) / 1e6;
    ck_assert_int_eq(st, HOOP_ERR_TIMEOUT);
    ck_assert_msg(strstr(hoop_last_error(), "within 300 ms (HOOP_TIMEOUT)"), "%s",
                  hoop_last_error());
    ck_assert_msg(ms >= 299 && ms < 20000, "the close took %.0f ms", ms);
    ck_assert_int_eq(leak_warnings, 1);
    cc->flag_write(flag, 1);
    ck_assert_int_eq(hoop__cuda_stream_sync(s), HOOP_OK); /* the stream runs on */
    hoop_log_set(NULL, NULL);
}
END_TEST
#endif

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
    tcase_add_loop_test(tc, test_direct_every_dtype_op, 0, HOOP_DTYPE_COUNT_);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
#if HX
    tc = tcase_create("close");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_close_deadline);
    suite_add_tcase(s, tc);
#endif
    SRunner *sr = srunner_create(s);
#ifdef HOOP_KERN_CUDA_GPU
    srunner_set_fork_status(sr, CK_NOFORK);
#endif
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
