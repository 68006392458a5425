/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_bench.c -- hoop-bench's own reference: half conversions against hand-worked
 * bit patterns, nccl-tests' layouts and busbw factors, and the check itself, run on
 * collectives simulated here in double arithmetic (it must count 0 on right results and
 * exactly the elements corrupted on wrong ones); the command line (nccl-tests' flags,
 * defaults and size sequences, and every refusal) and the report's text, read back with
 * the sscanf pattern nccl-tests' own JSON writer uses on its rank table.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_cli.h"
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
    void *s = malloc(ne * elt + BENCH_GUARD_BYTES),
         *r = malloc(L->recv_elems * elt + BENCH_GUARD_BYTES), *cs, *cr;
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
        uint16_t *all = calloc(L.recv_elems + BENCH_GUARD_BYTES, 2),
                 *s = malloc(L.count * 2 + BENCH_GUARD_BYTES), *r = malloc(L.recv_elems * 2);
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
    float buf[10 + BENCH_GUARD_BYTES / 4], zero[10] = {0};
    void *cs, *cr;
    bench_prepare(&bb, &L, 1, buf, buf, &cs, &cr); /* rank 0, in place: zeroed */
    ck_assert_uint_eq(bench_count_wrong(&bb, &L, buf), 10);
    bb.rank = 1;
    bench_prepare(&bb, &L, 1, buf, buf, &cs, &cr); /* the root's data */
    ck_assert_uint_eq(bench_count_wrong(&bb, &L, buf), 0);
    ck_assert_uint_eq(bench_count_wrong(&bb, &L, zero), 10);
}
END_TEST

/* Counts the elements of n (elt bytes each) where a and b differ bitwise. */
static size_t differing(const void *a, const void *b, size_t n, size_t elt)
{
    size_t d = 0;
    for (size_t j = 0; j < n; j++)
        d += memcmp((const char *)a + j * elt, (const char *)b + j * elt, elt) != 0;
    return d;
}

/* Right values at the wrong place: a chunk of a correct all-reduce result copied over the
 * next chunk (a send or receive at a stale offset), and two ranks' blocks of an
 * all-gather swapped. The check must count exactly the elements that differ from what
 * belongs there, and there must be some: data with a period in the index (or ranks with
 * the same inputs) would make the misplaced values equal to the right ones. */
START_TEST(test_check_sees_misplaced_data)
{
    const size_t chunk = 64;
    bench_case bc = {BENCH_ALLREDUCE, HOOP_DTYPE_F32, HOOP_OP_SUM, -1, 1, 3};
    bench_layout L = bench_layout_of(BENCH_ALLREDUCE, 4 * 4 * chunk, 4, 3);
    float *out = malloc(L.recv_elems * 4), *good = malloc(L.recv_elems * 4);
    simulate_reduce(bc, &L, 1, good);
    memcpy(out, good, L.recv_elems * 4);
    ck_assert_uint_eq(bench_count_wrong(&bc, &L, out), 0);
    memcpy(out + 2 * chunk, out + chunk, chunk * 4);
    size_t want = differing(good + 2 * chunk, good + chunk, chunk, 4);
    ck_assert_uint_gt(want, chunk / 2);
    ck_assert_uint_eq(bench_count_wrong(&bc, &L, out), want);
    free(out), free(good);

    int n = 8;
    bench_case bg = {BENCH_ALLGATHER, HOOP_DTYPE_F16, HOOP_OP_SUM, -1, 0, n};
    L = bench_layout_of(BENCH_ALLGATHER, 2 * 16 * (size_t)n, 2, n);
    uint16_t *all = calloc(L.recv_elems + BENCH_GUARD_BYTES, 2),
             *s = malloc(L.count * 2 + BENCH_GUARD_BYTES), *r = malloc(L.recv_elems * 2);
    void *cs, *cr;
    for (int q = 0; q < n; q++) {
        bg.rank = q;
        bench_prepare(&bg, &L, 0, s, all, &cs, &cr);
        memcpy(r + (size_t)q * L.count, s, L.count * 2);
    }
    ck_assert_uint_eq(bench_count_wrong(&bg, &L, r), 0);
    memcpy(all, r, L.recv_elems * 2);
    memcpy(r, all + 4 * L.count, L.count * 2); /* rank 4's block where rank 0's belongs */
    memcpy(r + 4 * L.count, all, L.count * 2);
    want = 2 * differing(all, all + 4 * L.count, L.count, 2);
    ck_assert_uint_gt(want, 0);
    ck_assert_uint_eq(bench_count_wrong(&bg, &L, r), want);
    free(all), free(s), free(r);
}
END_TEST

/* The guards after both buffers and an out-of-place call's send buffer: untouched after
 * bench_prepare, and every byte written past a buffer's end or element of the send
 * buffer changed is counted, for every collective, placement and element size. */
START_TEST(test_check_damage)
{
    const hoop_dtype dts[3] = {HOOP_DTYPE_U8, HOOP_DTYPE_F16, HOOP_DTYPE_F64};
    for (int c = 0; c < BENCH_COLL_COUNT_; c++)
        for (int d = 0; d < 3; d++)
            for (int ip = 0; ip < 2; ip++) {
                size_t elt = hoop_dtype_size(dts[d]), guard, sent;
                bench_case bc = {(bench_coll)c, dts[d], HOOP_OP_SUM, 0, 1, 3};
                bench_layout L = bench_layout_of((bench_coll)c, 3 * 8 * 13, elt, 3);
                size_t sb = L.send_elems * elt, rb = L.recv_elems * elt;
                unsigned char *s = malloc(sb + BENCH_GUARD_BYTES),
                              *r = malloc(rb + BENCH_GUARD_BYTES);
                void *cs, *cr;
                bench_prepare(&bc, &L, ip, s, r, &cs, &cr);
                bench_count_damage(&bc, &L, ip, s, r, &guard, &sent);
                ck_assert_uint_eq(guard, 0);
                ck_assert_uint_eq(sent, 0);
                s[sb] ^= 1, r[rb + BENCH_GUARD_BYTES - 1] ^= 0x80, r[rb + 7] = 0;
                s[sb / 2] ^= 4; /* an element of the send buffer */
                bench_count_damage(&bc, &L, ip, s, r, &guard, &sent);
                ck_assert_uint_eq(guard, 3); /* no guard byte is 0 */
                ck_assert_uint_eq(sent, ip ? 0 : 1);
                free(s), free(r);
            }
}
END_TEST

// ----- the command line ------------------------------------------------------------

/* Parses the words of line (space-separated) after "hoop-bench"; returns the code. */
static int parse_line(const char *line, bench_opts *o, char *err, size_t errlen)
{
    static char buf[512];
    char *argv[64], *save = NULL;
    int argc = 0;
    snprintf(buf, sizeof(buf), "hoop-bench %s", line);
    for (char *w = strtok_r(buf, " ", &save); w && argc < 63; w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    argv[argc] = NULL;
    return bench_parse_args(argc, argv, o, err, errlen);
}

START_TEST(test_parse_defaults)
{
    bench_opts o;
    char err[256];
    ck_assert_int_eq(parse_line("allreduce", &o, err, sizeof(err)), 0);
    /* nccl-tests 2.18's: 32M..32M in steps of 1M, 20 iterations, 1 warm-up, -c 1, -a 1 */
    ck_assert_int_eq(o.coll, BENCH_ALLREDUCE);
    ck_assert_int_eq(o.minb, 32 << 20);
    ck_assert_int_eq(o.maxb, 32 << 20);
    ck_assert_int_eq(o.stepb, 1 << 20);
    ck_assert_int_eq(o.factor, 1);
    ck_assert_int_eq(o.iters, 20);
    ck_assert_int_eq(o.warmup, 1);
    ck_assert_int_eq(o.agg, 1);
    ck_assert_int_eq(o.cycles, 1);
    ck_assert_int_eq(o.check, 1);
    ck_assert_int_eq(o.average, BENCH_AVG_MEAN);
    ck_assert_int_eq(o.blocking, BENCH_Z_ASYNC);
    ck_assert_int_eq(o.reg, 0);
    ck_assert_int_eq(o.ndtypes, 1);
    ck_assert_int_eq(o.dtypes[0], HOOP_DTYPE_F32);
    ck_assert_int_eq(o.nops, 1);
    ck_assert_int_eq(o.ops[0], HOOP_OP_SUM);
    ck_assert_ptr_null(o.json);
    ck_assert_int_eq(parse_line("--help", &o, err, sizeof(err)), 3);
}
END_TEST

START_TEST(test_parse_nccl_flags)
{
    bench_opts o;
    char err[256];
    ck_assert_int_eq(parse_line("-b 8 -e 128M -f 2 -i 4K -n 5 -w 3 -m 2 -N 0 -c 3 -d bfloat16 "
                                "-o max -r 1 -a 3 -z 1 -R 2 -g 1 -t 1 -G 0 -p 1 -J x.json "
                                "--algo ring --csv y.csv --show-algo broadcast_perf",
                                &o, err, sizeof(err)),
                     0);
    ck_assert_int_eq(o.coll, BENCH_BROADCAST);
    ck_assert_int_eq(o.minb, 8);
    ck_assert_int_eq(o.maxb, 128 << 20);
    ck_assert_int_eq(o.factor, 2);
    ck_assert_int_eq(o.stepb, 4096);
    ck_assert_int_eq(o.iters, 5);
    ck_assert_int_eq(o.warmup, 3);
    ck_assert_int_eq(o.agg, 2);
    ck_assert_int_eq(o.cycles, 0);
    ck_assert_int_eq(o.check, 3);
    ck_assert_int_eq(o.dtypes[0], HOOP_DTYPE_BF16);
    ck_assert_int_eq(o.ops[0], HOOP_OP_MAX);
    ck_assert_int_eq(o.root, 1);
    ck_assert_int_eq(o.average, BENCH_AVG_MAX);
    ck_assert_int_eq(o.blocking, BENCH_Z_BARRIER);
    ck_assert_int_eq(o.reg, 2);
    ck_assert_int_eq(o.parallel_init, 1);
    ck_assert_str_eq(o.json, "x.json");
    ck_assert_str_eq(o.csv, "y.csv");
    ck_assert_int_eq(o.algo_set, 1);
    ck_assert_int_eq(o.algo, HOOP_ALGO_RING);
    ck_assert_int_eq(o.show_algo, 1);
    /* nccl-tests' long names; hoop's type names; the collective anywhere */
    ck_assert_int_eq(parse_line("--minbytes=1K --maxbytes 2K --stepfactor 2 --datatype i64 "
                                "reducescatter --op=avg --average 0 --json=r.json",
                                &o, err, sizeof(err)),
                     2); /* avg on int64 */
    ck_assert_msg(strstr(err, "-o avg") && strstr(err, "int64"), "%s", err);
    ck_assert_int_eq(parse_line("--minbytes=1K --maxbytes 2K --datatype all reduce_scatter "
                                "--op=all --average 0 --output_file=r.json",
                                &o, err, sizeof(err)),
                     0);
    ck_assert_int_eq(o.coll, BENCH_REDUCESCATTER);
    ck_assert_int_eq(o.minb, 1024);
    ck_assert_int_eq(o.average, BENCH_AVG_RANK0);
    ck_assert_int_eq(o.ndtypes, 7);
    ck_assert_int_eq(o.nops, 5);
    /* nccl-tests' order: uint8 int32 int64 half float double bfloat16; sum prod max min avg */
    ck_assert_int_eq(o.dtypes[0], HOOP_DTYPE_U8);
    ck_assert_int_eq(o.dtypes[3], HOOP_DTYPE_F16);
    ck_assert_int_eq(o.dtypes[6], HOOP_DTYPE_BF16);
    ck_assert_int_eq(o.ops[2], HOOP_OP_MAX);
    ck_assert_int_eq(o.ops[4], HOOP_OP_AVG);
    ck_assert_str_eq(o.json, "r.json");
    /* nccl-tests' newer flags: -T seconds; -C, -S, -M, -y at their default 0; -r all */
    ck_assert_int_eq(parse_line("-T 7 -C 0 -S 0 -M 0 -y 0 -r all broadcast", &o, err, sizeof(err)),
                     0);
    ck_assert_int_eq(o.timeout, 7);
    ck_assert_int_eq(o.all_roots, 1);
    ck_assert_int_eq(o.root, 0);
    ck_assert_int_eq(parse_line("--timeout=0 --report_cputime 0 --report_timestamps=0 "
                                "--memory_report 0 --stream_null 0 --root 2 reduce",
                                &o, err, sizeof(err)),
                     0);
    ck_assert_int_eq(o.timeout, 0);
    ck_assert_int_eq(o.all_roots, 0);
    ck_assert_int_eq(o.root, 2);
    /* -G: CUDA-graph launches, with device buffers */
    ck_assert_int_eq(parse_line("allreduce --device cuda --cudagraph 3", &o, err, sizeof(err)), 0);
    ck_assert_int_eq(o.graphs, 3);
    ck_assert_int_eq(o.device, 1);
}
END_TEST

/* Every refusal: exit code 2 and a message naming the culprit (and the way out). */
START_TEST(test_parse_refusals)
{
    static const struct {
        const char *line, *want, *also;
    } cases[] = {
        {"allreduce -g 2", "-g 2", "hooprun --nproc-per-node"},
        {"allreduce -t 4", "-t 4", "one thread per process"},
        {"allreduce -t f32", "-t f32", "the datatype is -d"},
        {"allreduce -a ring", "-a ring", "--algo ring"},
        {"allreduce -a 4", "-a", "4"},
        {"allreduce -G 1", "-G 1", "--device cuda"},
        {"allreduce --device cuda -G 2 -z 2", "-G 2 -z 2", "-z 0 with -G"},
        {"allreduce -d int8", "hoop has no int8", "uint8"},
        {"allreduce -d f99", "unknown type 'f99'", NULL},
        {"allreduce -o mulsum", "mulsum", NULL},
        {"allreduce -o xor", "unknown op 'xor'", NULL},
        {"allreduce -z 3", "-z", "3"},
        {"allreduce -R 3", "-R", "3"},
        {"allreduce -J out.txt", "-J out.txt", ".json"},
        {"allreduce --csv -n 2", "--csv '-n' looks like a flag, not a path", "./-n"},
        {"allreduce -J -x.json", "-J '-x.json' looks like a flag", NULL},
        {"allreduce -i 0", "-i", "0"},
        {"allreduce -f 0", "-f", "0"},
        {"allreduce -n 0", "-n", "0"},
        {"allreduce -b 12Q", "-b", "12Q"},
        {"allreduce -b 1M -e 1K", "-e 1024 is below -b 1048576", NULL},
        {"allreduce -d int32 -o avg", "-o avg", "int32"},
        {"allreduce --algo tree", "--algo", "tree"},
        {"allreduce --algo direct", "--algo direct", "-R 1"},
        {"allreduce -b 1T -e 2T", "-e=2T is out of range", NULL},
        {"allreduce --bogus", "--bogus", NULL},
        {"allreduce --show-algo=1", "--show-algo takes no value ('--show-algo=1')", NULL},
        {"allreduce -n", "-n needs a value", NULL},
        /* nccl-tests' collectives hoop lacks: named as such, as a type hoop lacks (they
         * were an "unknown collective") */
        {"gather", "hoop has no gather (nccl-tests' gather_perf)", "allgather"},
        {"alltoall", "hoop has no alltoall (nccl-tests' alltoall_perf)",
         "hoop-bench runs allreduce, broadcast, reduce, allgather, reducescatter"},
        {"alltoall_perf", "hoop has no alltoall", NULL},
        {"sendrecv_perf", "hoop has no sendrecv (nccl-tests' sendrecv_perf)", NULL},
        {"scatter", "hoop has no scatter", NULL},
        {"hypercube_perf", "hoop has no hypercube", NULL},
        {"gatherx", "unknown collective 'gatherx'", NULL},
        {"bogus", "unknown collective 'bogus'", NULL},
        {"allreduce reduce", "unexpected argument 'reduce'", NULL},
        {"-b 8", "missing the collective", NULL},
        /* nccl-tests' newer flags that hoop cannot honour: what to do instead (they were
         * refused as unknown options) */
        {"allreduce -C 1", "-C 1: hoop-bench reports the time until the calls complete", "-z 2"},
        {"allreduce --report_cputime=1", "-C 1", "-C 0"},
        {"allreduce -C 2", "-C", "2"},
        {"allreduce -S 1", "-S 1: hoop-bench puts no timestamp", "start_time"},
        {"allreduce -M 1", "-M 1: hoop-bench has no memory report", "sized for -e"},
        {"allreduce -y 1", "-y 1", "drop -y"},
        {"allreduce -x 1", "-x 1: the CTA policy", "run no NCCL kernels"},
        {"allreduce --device_implementation 1", "-D 1", "drop it"},
        {"allreduce -V 16", "-V 16: the device CTA count", "drop it"},
        {"allreduce -T -1", "-T", "-1"},
        {"allreduce -T x", "-T", "'x'"},
        {"broadcast -r x", "-r", "a root rank, or all"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bench_opts o;
        char err[256];
        ck_assert_msg(parse_line(cases[i].line, &o, err, sizeof(err)) == 2, "'%s' accepted",
                      cases[i].line);
        ck_assert_msg(strstr(err, cases[i].want) != NULL, "'%s': '%s' not in: %s", cases[i].line,
                      cases[i].want, err);
        if (cases[i].also)
            ck_assert_msg(strstr(err, cases[i].also) != NULL, "'%s': '%s' not in: %s",
                          cases[i].line, cases[i].also, err);
        ck_assert_ptr_null(strchr(err, '\n'));
    }
    /* --algo's default from the environment is held to --algo's rule; -R 1 lifts it, and
     * --algo on the line wins over it. */
    bench_opts o;
    char err[256];
    setenv("HOOP_ALGO", "direct", 1);
    ck_assert_int_eq(parse_line("allreduce", &o, err, sizeof(err)), 2);
    ck_assert_msg(strstr(err, "HOOP_ALGO=direct") && strstr(err, "-R 1"), "%s", err);
    ck_assert_int_eq(parse_line("allreduce -R 1", &o, err, sizeof(err)), 0);
    ck_assert_int_eq(parse_line("allreduce --algo ring", &o, err, sizeof(err)), 0);
    ck_assert_int_eq(parse_line("broadcast", &o, err, sizeof(err)), 0); /* direct: no effect */
    unsetenv("HOOP_ALGO");
    /* -T within HOOP_TIMEOUT's range, refused as -T beyond it */
    ck_assert_int_eq(parse_line("allreduce -T 1000000001", &o, err, sizeof(err)), 2);
    ck_assert_msg(strstr(err, "-T") != NULL, "%s", err);
}
END_TEST

/* The sizes of a sweep, as nccl-tests' loop makes them (x factor when > 1, else + step). */
static int sweep_sizes(const char *line, uint64_t *out, int max)
{
    bench_opts o;
    char err[256];
    int n = 0;
    ck_assert_int_eq(parse_line(line, &o, err, sizeof(err)), 0);
    uint64_t s = (uint64_t)o.minb;
    do out[n++] = s;
    while (n < max && bench_next_size(&o, s, &s));
    return n;
}

START_TEST(test_sizes)
{
    uint64_t s[16];
    ck_assert_int_eq(sweep_sizes("allreduce -b 8 -e 100 -f 3", s, 16), 3);
    ck_assert(s[0] == 8 && s[1] == 24 && s[2] == 72);
    ck_assert_int_eq(sweep_sizes("allreduce -b 1M -e 3M", s, 16), 3); /* -i 1M by default */
    ck_assert(s[0] == 1 << 20 && s[1] == 2 << 20 && s[2] == 3 << 20);
    ck_assert_int_eq(sweep_sizes("allreduce -b 10 -e 35 -i 10", s, 16), 3);
    ck_assert(s[2] == 30);
    ck_assert_int_eq(sweep_sizes("allreduce -b 8 -e 64K -f 4", s, 16), 7);
    ck_assert(s[6] == 32768);
    ck_assert_int_eq(sweep_sizes("allreduce", s, 16), 1);
    ck_assert(s[0] == 32 << 20);
    /* at the top of the range, no overflow */
    ck_assert_int_eq(sweep_sizes("allreduce -b 1024G -e 1024G -f 1024", s, 16), 1);
    ck_assert_int_eq(sweep_sizes("allreduce -b 1023G -e 1024G -i 1024G", s, 16), 1);
}
END_TEST

START_TEST(test_format_float)
{
    char b[24];
    static const struct {
        double v;
        int width;
        const char *want;
    } cases[] = {{2.046, 7, "   2.05"},    {123456.7, 7, " 123457"},    {9999.994, 7, "9999.99"},
                 {99999.96, 7, " 100000"}, {12345678.0, 7, "12345678"}, {0.119437, 6, "  0.12"},
                 {1234.56, 6, "1234.6"},   {123456.0, 6, "123456"},     {1234567.0, 6, "1234567"},
                 {0.0, 6, "  0.00"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bench_format_float(cases[i].v, cases[i].width, b);
        ck_assert_msg(strcmp(b, cases[i].want) == 0, "%g in %d: '%s', not '%s'", cases[i].v,
                      cases[i].width, b, cases[i].want);
    }
    static const struct {
        double us;
        const char *want;
    } times[] = {{8.431, "   8.43"},     {99.994, "  99.99"},     {99.996, " 100.00"},
                 {135.24, "  135.2"},    {9999.94, " 9999.9"},    {12345.6, "  12346"},
                 {9876543.2, "9876543"}, {12345678.0, "12345678"}};
    for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
        bench_format_time(times[i].us, b);
        ck_assert_msg(strcmp(b, times[i].want) == 0, "%g us: '%s', not '%s'", times[i].us, b,
                      times[i].want);
    }
    ck_assert_str_eq(bench_nccl_type_name(HOOP_DTYPE_BF16), "bfloat16");
    ck_assert_str_eq(bench_test_name(BENCH_REDUCESCATTER), "reduce_scatter_perf");
}
END_TEST

// ----- the report ------------------------------------------------------------------

/* A report of two rows on 3 ranks, read back as a nccl-tests user's script would. */
START_TEST(test_report_text)
{
    bench_opts o;
    char err[256], *text = NULL, line[512];
    size_t len = 0;
    ck_assert_int_eq(parse_line("allreduce -b 64 -e 128 -f 2 -c 1", &o, err, sizeof(err)), 0);
    FILE *f = open_memstream(&text, &len);
    bench_report r = {.o = &o,
                      .env = {3, "auto", "HOOP_X=1", "9.9.9", NULL},
                      .out = f,
                      .device_info = "host memory"};
    bench_rank_info ranks[3] = {{0, 0, 4242, -1, "alpha", "", 0, "", -1, "shm"},
                                {1, 1, 4343, -1, "alpha", "", 0, "", -1, "shm"},
                                {2, 0, 99, -1, "beta", "", 0, "", -1, "shm"}};
    bench_report_begin(&r, ranks, 3);
    bench_result rows[2] = {{64,
                             16,
                             HOOP_DTYPE_F32,
                             HOOP_OP_SUM,
                             {10, 12},
                             {0.0064, 0.00533},
                             {0.5, 0.25},
                             {0, 0},
                             {0, 0},
                             NULL,
                             0,
                             0,
                             -1},
                            {128,
                             32,
                             HOOP_DTYPE_F32,
                             HOOP_OP_SUM,
                             {20, 22},
                             {0.0064, 0.0058},
                             {1.0, 2.25},
                             {0, 7},
                             {0, 2},
                             NULL,
                             0,
                             0,
                             -1}};
    bench_report_row(&r, &rows[0]);
    bench_report_row(&r, &rows[1]);
    ck_assert_int_eq(bench_report_end(&r), 2); /* 2 ranks saw wrong elements */
    fclose(f);
    /* the rank table, through nccl-tests' parseRankInfo pattern */
    int nrank = 0, nrows = 0;
    for (char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        char host[64], hex[32], info[128], *nl = strchr(p, '\n');
        int rank, group, pid, dev, n;
        snprintf(line, sizeof(line), "%.*s", nl ? (int)(nl - p) : (int)strlen(p), p);
        if (sscanf(line, "#  Rank %d Group %d Pid %d on %63s device %d [%31[^]]] %127[^\n]", &rank,
                   &group, &pid, host, &dev, hex, info) == 7) {
            ck_assert_int_eq(rank, nrank);
            ck_assert_int_eq(pid, ranks[nrank].pid);
            ck_assert_str_eq(host, ranks[nrank].host);
            ck_assert_int_eq(dev, -1);
            ck_assert_str_eq(hex, "host");
            ck_assert_ptr_nonnull(strstr(info, "host memory, local_rank"));
            nrank++;
        }
        char c1[32], c2[32];
        if (line[0] != '#' &&
            sscanf(line, "%*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %31s %31s", c1, c2) ==
                1) {
            nrows++;
            n = 0;
            for (char *t = strtok_r(line, " ", &nl); t; t = strtok_r(NULL, " ", &nl)) n++;
            ck_assert_int_eq(n, 13);
        }
    }
    ck_assert_int_eq(nrank, 3);
    ck_assert_int_eq(nrows, 2);
    /* the mean of the four busbw values: (0.5 + 0.25 + 1 + 2.25) / 4 = 1 */
    ck_assert_ptr_nonnull(strstr(text, "\n# Out of bounds values : 2 FAILED\n"));
    ck_assert_ptr_nonnull(strstr(text, "\n# Avg bus bandwidth    : 1 \n"));
    ck_assert_ptr_nonnull(strstr(text, "\n# Collective test concluded: all_reduce_perf\n"));
    ck_assert_ptr_nonnull(strstr(text, "\n         128            32     float     sum      -1"
                                       "    20.00    0.01    1.00       0    22.00    0.01    2.25"
                                       "       7\n"));
    ck_assert_ptr_nonnull(strstr(text, "# nThread 1 nGpus 1 minBytes 64 maxBytes 128 step: "
                                       "2(factor) warmup iters: 1 iters: 20 agg iters: 1 "
                                       "validation: 1 graph: 0\n"));
    free(text);
}
END_TEST

/* NCCL_TESTS_MIN_BW (o.min_bw) as nccl-tests applies it: the average busbw below 0.9 x
 * the value is FAILED and adds 1 to what bench_report_end returns; OK at or above; no
 * word without it. A stop note comes before the footer and in the JSON's errors. */
static char *report_one_row(double min_bw, const char *note, int64_t *ret, char **json)
{
    bench_opts o;
    char err[256], *text = NULL, *jtext = NULL;
    size_t len = 0, jlen = 0;
    ck_assert_int_eq(parse_line("allreduce -b 64 -e 64", &o, err, sizeof(err)), 0);
    o.min_bw = min_bw;
    FILE *f = open_memstream(&text, &len), *j = open_memstream(&jtext, &jlen);
    bench_report r = {.o = &o,
                      .env = {2, "auto", "HOOP_X=1", "9.9.9", NULL},
                      .out = f,
                      .json = j,
                      .device_info = "host memory",
                      .stop_note = note};
    bench_rank_info ranks[2] = {{0, 0, 1, -1, "alpha", "", 0, "", -1, "shm"},
                                {1, 1, 2, -1, "alpha", "", 0, "", -1, "shm"}};
    bench_report_begin(&r, ranks, 2);
    bench_result row = {.bytes = 64,
                        .count = 16,
                        .dtype = HOOP_DTYPE_F32,
                        .op = HOOP_OP_SUM,
                        .time_us = {10, 10},
                        .algbw = {1, 1},
                        .busbw = {9, 11}, /* average 10 */
                        .root = -1};
    bench_report_row(&r, &row);
    *ret = bench_report_end(&r);
    fclose(f), fclose(j);
    *json = jtext;
    return text;
}

START_TEST(test_report_min_bw_and_stop)
{
    int64_t ret;
    char *json, *text = report_one_row(-1, NULL, &ret, &json);
    ck_assert_int_eq(ret, 0);
    ck_assert_ptr_nonnull(strstr(text, "\n# Avg bus bandwidth    : 10 \n"));
    ck_assert_ptr_null(strstr(text, "# hoop: stopped"));
    ck_assert_ptr_nonnull(strstr(json, "\"okay\":\"unchecked\""));
    free(text), free(json);
    text = report_one_row(11.1, NULL, &ret, &json); /* 10 >= 0.9 x 11.1 = 9.99 */
    ck_assert_int_eq(ret, 0);
    ck_assert_ptr_nonnull(strstr(text, "\n# Avg bus bandwidth    : 10 OK\n"));
    free(text), free(json);
    text = report_one_row(11.2, "stopped by SIGINT after 1 rows", &ret, &json); /* 10.08 */
    ck_assert_int_eq(ret, 1);
    ck_assert_ptr_nonnull(strstr(text, "\n# Avg bus bandwidth    : 10 FAILED\n"));
    ck_assert_ptr_nonnull(strstr(text, "\n# hoop: stopped by SIGINT after 1 rows\n# Out of"));
    ck_assert_ptr_nonnull(strstr(json, "\"stopped by SIGINT after 1 rows\""));
    ck_assert_ptr_nonnull(strstr(json, "\"okay\":\"false\""));
    free(text), free(json);
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
    tcase_add_test(tc, test_check_sees_misplaced_data);
    tcase_add_test(tc, test_check_damage);
    suite_add_tcase(s, tc);
    TCase *cli = tcase_create("cli");
    tcase_add_test(cli, test_parse_defaults);
    tcase_add_test(cli, test_parse_nccl_flags);
    tcase_add_test(cli, test_parse_refusals);
    tcase_add_test(cli, test_sizes);
    tcase_add_test(cli, test_format_float);
    tcase_add_test(cli, test_report_text);
    tcase_add_test(cli, test_report_min_bw_and_stop);
    suite_add_tcase(s, cli);
    return run_suite(s);
}
