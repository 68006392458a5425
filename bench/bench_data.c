/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/bench_data.c -- hoop-bench's layouts, input data and independent check.
 *
 * Input: rank r's send element j is v(r, j) = 1 + ((3r + j) mod 4) (1 or 2 for prod:
 * 1 + ((r + j) mod 2)), so inputs and every partial result are small integers (or
 * powers of two) that every dtype holds exactly for world sizes up to 64; the exact
 * result is computed here in float64 or wrapping 64-bit integers and rounded once to the
 * dtype (avg: sum / world_size, compared within 2 ulps since an implementation may
 * divide in float32). Everything has period 4 in the element index, so buffers are
 * filled and compared 4 elements at a time. Owns nothing. Thread-safe.
 */
#include <math.h>
#include <string.h>

#include "bench/bench.h"

typedef struct bench_ref {
    double f;   /* value for floating dtypes */
    uint64_t u; /* value for integer dtypes, wrapping */
} bench_ref;

static const char *const coll_names[BENCH_COLL_COUNT_] = {"allreduce", "broadcast", "reduce",
                                                          "allgather", "reducescatter"};

const char *bench_coll_name(bench_coll c)
{
    return (unsigned)c < BENCH_COLL_COUNT_ ? coll_names[c] : NULL;
}

bench_coll bench_coll_from_name(const char *s)
{
    for (int c = 0; c < BENCH_COLL_COUNT_; c++)
        if (strcmp(s, coll_names[c]) == 0) return (bench_coll)c;
    return BENCH_COLL_COUNT_;
}

double bench_bus_factor(bench_coll c, int n)
{
    switch (c) {
    case BENCH_ALLREDUCE: return 2.0 * (n - 1) / n;
    case BENCH_ALLGATHER:
    case BENCH_REDUCESCATTER: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

bench_layout bench_layout_of(bench_coll c, size_t size_bytes, size_t elt, int world_size)
{
    size_t n = (size_t)world_size, total = size_bytes / elt;
    bench_layout L = {total, total, total, total * elt};
    if (c == BENCH_ALLGATHER || c == BENCH_REDUCESCATTER) {
        L.count = total / n;
        L.send_elems = c == BENCH_ALLGATHER ? L.count : L.count * n;
        L.recv_elems = c == BENCH_ALLGATHER ? L.count * n : L.count;
        L.bytes = L.count * n * elt;
    }
    return L;
}

/* ---- our own half-precision conversions ---- */

/* Rounds |x| (finite, >= 0) to a binary format with mbits stored mantissa bits and
 * exponent bias `bias`; returns the bits without the sign. */
static uint32_t round_binary(double a, int mbits, int bias)
{
    int emax = bias, emin = 1 - bias, e;
    double overflow = ldexp(2.0 - ldexp(1.0, -(mbits + 1)), emax);
    if (a >= overflow) return (uint32_t)(2 * bias + 1) << mbits;             /* infinity */
    if (a < ldexp(1.0, emin)) return (uint32_t)rint(ldexp(a, mbits - emin)); /* subnormal */
    frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
    double q = rint(ldexp(a, mbits - e));
    if (q == ldexp(1.0, mbits + 1)) q /= 2, e += 1;
    return ((uint32_t)(e + bias) << mbits) | (uint32_t)(q - ldexp(1.0, mbits));
}

static double unround_binary(uint32_t bits, int mbits, int bias, int ebits)
{
    uint32_t e = (bits >> mbits) & ((1u << ebits) - 1), m = bits & ((1u << mbits) - 1);
    double sign = (bits >> (mbits + ebits)) & 1 ? -1.0 : 1.0;
    if (e == 0) return sign * ldexp((double)m, 1 - bias - mbits);
    if (e == (1u << ebits) - 1) return m ? NAN : sign * INFINITY;
    return sign * ldexp((double)(m | (1u << mbits)), (int)e - bias - mbits);
}

uint16_t bench_f16_from_double(double x)
{
    if (isnan(x)) return 0x7e00;
    return (uint16_t)((signbit(x) ? 0x8000u : 0u) | round_binary(fabs(x), 10, 15));
}

double bench_f16_to_double(uint16_t h)
{
    return unround_binary(h, 10, 15, 5);
}

uint16_t bench_bf16_from_double(double x)
{
    if (isnan(x)) return 0x7fc0;
    return (uint16_t)((signbit(x) ? 0x8000u : 0u) | round_binary(fabs(x), 7, 127));
}

double bench_bf16_to_double(uint16_t b)
{
    return unround_binary(b, 7, 127, 8);
}

/* ---- element values ---- */

static int is_float(hoop_dtype dt)
{
    return dt == HOOP_DTYPE_F32 || dt == HOOP_DTYPE_F64 || dt == HOOP_DTYPE_F16 ||
           dt == HOOP_DTYPE_BF16;
}

static uint64_t input_value(hoop_op op, int rank, size_t j)
{
    if (op == HOOP_OP_PROD) return 1 + (((size_t)rank + j) & 1);
    return 1 + ((3 * (size_t)rank + j) & 3);
}

static void store_ref(hoop_dtype dt, bench_ref r, unsigned char *p)
{
    float f = (float)r.f;
    uint16_t h;
    uint32_t u32 = (uint32_t)r.u;
    switch (dt) {
    case HOOP_DTYPE_F32: memcpy(p, &f, 4); break;
    case HOOP_DTYPE_F64: memcpy(p, &r.f, 8); break;
    case HOOP_DTYPE_F16: h = bench_f16_from_double(r.f), memcpy(p, &h, 2); break;
    case HOOP_DTYPE_BF16: h = bench_bf16_from_double(r.f), memcpy(p, &h, 2); break;
    case HOOP_DTYPE_I32: memcpy(p, &u32, 4); break;
    case HOOP_DTYPE_I64: memcpy(p, &r.u, 8); break;
    default: *p = (unsigned char)r.u; break;
    }
}

static double load_float(hoop_dtype dt, const unsigned char *p)
{
    float f;
    double d;
    uint16_t h;
    switch (dt) {
    case HOOP_DTYPE_F32: memcpy(&f, p, 4); return f;
    case HOOP_DTYPE_F64: memcpy(&d, p, 8); return d;
    case HOOP_DTYPE_F16: memcpy(&h, p, 2); return bench_f16_to_double(h);
    default: memcpy(&h, p, 2); return bench_bf16_to_double(h);
    }
}

/* The exact reduction over all ranks of input element phase (mod 4). */
static bench_ref reduce_ref(const bench_case *bc, size_t phase)
{
    bench_ref r = {0, 0};
    for (int q = 0; q < bc->world_size; q++) {
        uint64_t v = input_value(bc->op, q, phase);
        if (q == 0)
            r.f = (double)v, r.u = v;
        else if (bc->op == HOOP_OP_PROD)
            r.f *= (double)v, r.u *= v;
        else if (bc->op == HOOP_OP_MIN)
            r.f = fmin(r.f, (double)v), r.u = r.u < v ? r.u : v;
        else if (bc->op == HOOP_OP_MAX)
            r.f = fmax(r.f, (double)v), r.u = r.u > v ? r.u : v;
        else
            r.f += (double)v, r.u += v;
    }
    if (bc->op == HOOP_OP_AVG) r.f /= bc->world_size;
    return r;
}

/* Writes the 4-element pattern starting at index `phase` for one source:
 * src_rank >= 0: that rank's inputs; src_rank < 0: the reduction over all ranks. */
static void pattern(const bench_case *bc, int src_rank, size_t phase, unsigned char *out)
{
    size_t elt = hoop_dtype_size(bc->dtype);
    for (size_t k = 0; k < 4; k++) {
        size_t j = (phase + k) & 3;
        bench_ref r;
        if (src_rank >= 0)
            r.u = input_value(bc->op, src_rank, j), r.f = (double)r.u;
        else
            r = reduce_ref(bc, j);
        store_ref(bc->dtype, r, out + k * elt);
    }
}

/* Fills n elements at buf with the pattern (period 4), by doubling copies. */
static void fill_run(unsigned char *buf, size_t n, size_t elt, const unsigned char *pat)
{
    size_t total = n * elt, have = total < 4 * elt ? total : 4 * elt;
    memcpy(buf, pat, have);
    while (have < total) {
        size_t step = have < total - have ? have : total - have;
        memcpy(buf + have, buf, step);
        have += step;
    }
}

static int element_ok(const bench_case *bc, const unsigned char *got, const unsigned char *want)
{
    size_t elt = hoop_dtype_size(bc->dtype);
    if (memcmp(got, want, elt) == 0) return 1;
    if (bc->op != HOOP_OP_AVG || !is_float(bc->dtype)) return 0;
    int mbits = bc->dtype == HOOP_DTYPE_F32   ? 23
                : bc->dtype == HOOP_DTYPE_F64 ? 52
                : bc->dtype == HOOP_DTYPE_F16 ? 10
                                              : 7;
    double g = load_float(bc->dtype, got), w = load_float(bc->dtype, want);
    return fabs(g - w) <= ldexp(fabs(w), 1 - mbits);
}

/* Counts elements of buf[0..n) that differ from the pattern (period 4, aligned so that
 * buf[0] is pattern element 0). */
static size_t wrong_run(const bench_case *bc, const unsigned char *buf, size_t n,
                        const unsigned char *pat)
{
    size_t elt = hoop_dtype_size(bc->dtype), wrong = 0, j = 0;
    for (; j + 4 <= n; j += 4) {
        if (memcmp(buf + j * elt, pat, 4 * elt) == 0) continue;
        for (size_t k = 0; k < 4; k++) wrong += !element_ok(bc, buf + (j + k) * elt, pat + k * elt);
    }
    for (; j < n; j++) wrong += !element_ok(bc, buf + j * elt, pat + (j & 3) * elt);
    return wrong;
}

void bench_prepare(const bench_case *bc, const bench_layout *L, int in_place, void *send,
                   void *recv, void **call_send, void **call_recv)
{
    size_t elt = hoop_dtype_size(bc->dtype), me = (size_t)bc->rank * L->count * elt;
    unsigned char pat[32], *s = send, *r = recv;
    pattern(bc, bc->rank, 0, pat);
    *call_send = send;
    *call_recv = recv;
    if (!in_place) {
        fill_run(s, L->send_elems, elt, pat);
        memset(r, 0, L->recv_elems * elt);
        return;
    }
    switch (bc->coll) {
    case BENCH_ALLGATHER:
        memset(r, 0, L->recv_elems * elt);
        fill_run(r + me, L->count, elt, pat);
        *call_send = r + me;
        return;
    case BENCH_REDUCESCATTER:
        fill_run(s, L->send_elems, elt, pat);
        *call_recv = s + me;
        return;
    case BENCH_BROADCAST:
        if (bc->rank == bc->root)
            fill_run(s, L->send_elems, elt, pat);
        else
            memset(s, 0, L->send_elems * elt);
        break;
    default: fill_run(s, L->send_elems, elt, pat); break;
    }
    *call_recv = send;
}

size_t bench_count_wrong(const bench_case *bc, const bench_layout *L, const void *recv)
{
    size_t elt = hoop_dtype_size(bc->dtype), wrong = 0;
    const unsigned char *r = recv;
    unsigned char pat[32];
    switch (bc->coll) {
    case BENCH_REDUCE:
        if (bc->rank != bc->root) return 0;
        /* fall through */
    case BENCH_ALLREDUCE: pattern(bc, -1, 0, pat); return wrong_run(bc, r, L->recv_elems, pat);
    case BENCH_BROADCAST:
        pattern(bc, bc->root, 0, pat);
        return wrong_run(bc, r, L->recv_elems, pat);
    case BENCH_ALLGATHER:
        for (int q = 0; q < bc->world_size; q++) {
            pattern(bc, q, 0, pat);
            wrong += wrong_run(bc, r + (size_t)q * L->count * elt, L->count, pat);
        }
        return wrong;
    default:
        pattern(bc, -1, ((size_t)bc->rank * L->count) & 3, pat);
        return wrong_run(bc, r, L->recv_elems, pat);
    }
}
