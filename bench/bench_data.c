/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * bench/bench_data.c -- hoop-bench's layouts, input data and independent check.
 *
 * Input: rank r's send element j is v(r, j) = T(r, h(j)): h(j) is one of 16 phases,
 * a hash of the index j, and T is a table of small integers from 1 to 4 (1 or 2 for
 * prod) drawn by a hash of (rank, phase), so inputs and every partial result are small
 * integers (or powers of two) that every dtype holds exactly for world sizes up to 64;
 * the exact result of every phase is computed here in float64 or wrapping 64-bit
 * integers and rounded once to the dtype (avg: sum / world_size, compared within 2 ulps
 * since an implementation may divide in float32). The data has no period in the index:
 * with a periodic pattern (an earlier one had period 4) a chunk or segment sent or
 * received at the wrong offset carries the very values expected there, and the check
 * could not see it. Rank tables differ too, so one rank's block or contribution in the
 * place of another's is seen. Owns nothing. Thread-safe.
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

/* The phase (0..15) of element j of a buffer: the top bits of a hash of j, so that no
 * shift of the data (a chunk, a segment, a block at the wrong offset) keeps it. */
static inline unsigned phase_of(size_t j)
{
    uint64_t x = (uint64_t)j * UINT64_C(0x9e3779b97f4a7c15);
    x ^= x >> 29;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    return (unsigned)(x >> 60);
}

/* Rank `rank`'s input at phase ph: 1..4 (prod: 1 or 2), from a hash of (rank, ph). */
static uint64_t input_value(hoop_op op, int rank, unsigned ph)
{
    uint64_t x = ((uint64_t)(unsigned)rank << 4 | ph) * UINT64_C(0xd6e8feb86659fd93) + 0x5851f42d;
    x ^= x >> 32;
    x *= UINT64_C(0xd6e8feb86659fd93);
    x ^= x >> 32;
    return op == HOOP_OP_PROD ? 1 + (x & 1) : 1 + (x & 3);
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

/* The exact reduction over all ranks of the inputs at phase ph. */
static bench_ref reduce_ref(const bench_case *bc, unsigned ph)
{
    bench_ref r = {0, 0};
    for (int q = 0; q < bc->world_size; q++) {
        uint64_t v = input_value(bc->op, q, ph);
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

/* The value of every phase (16 elements) for one source: src_rank >= 0: that rank's
 * inputs; src_rank < 0: the reduction over all ranks. */
static void pattern(const bench_case *bc, int src_rank, unsigned char *out)
{
    size_t elt = hoop_dtype_size(bc->dtype);
    for (unsigned ph = 0; ph < 16; ph++) {
        bench_ref r;
        if (src_rank >= 0)
            r.u = input_value(bc->op, src_rank, ph), r.f = (double)r.u;
        else
            r = reduce_ref(bc, ph);
        store_ref(bc->dtype, r, out + ph * elt);
    }
}

/* buf[j] = pat[phase_of(base + j)] for j < n; elt a constant where inlined. */
static inline void fill_elts(unsigned char *buf, size_t n, size_t elt, const unsigned char *pat,
                             size_t base)
{
    for (size_t j = 0; j < n; j++) memcpy(buf + j * elt, pat + phase_of(base + j) * elt, elt);
}

/* Fills the n elements at buf with the pattern, element j taking phase_of(base + j). */
static void fill_run(unsigned char *buf, size_t n, size_t elt, const unsigned char *pat,
                     size_t base)
{
    switch (elt) {
    case 1: fill_elts(buf, n, 1, pat, base); break;
    case 2: fill_elts(buf, n, 2, pat, base); break;
    case 4: fill_elts(buf, n, 4, pat, base); break;
    default: fill_elts(buf, n, 8, pat, base); break;
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

static inline size_t wrong_elts(const bench_case *bc, const unsigned char *buf, size_t n,
                                size_t elt, const unsigned char *pat, size_t base)
{
    size_t wrong = 0;
    for (size_t j = 0; j < n; j++) {
        const unsigned char *want = pat + phase_of(base + j) * elt;
        if (memcmp(buf + j * elt, want, elt) != 0) wrong += !element_ok(bc, buf + j * elt, want);
    }
    return wrong;
}

/* Counts elements of buf[0..n) that differ from the pattern, element j being expected
 * at phase_of(base + j). */
static size_t wrong_run(const bench_case *bc, const unsigned char *buf, size_t n,
                        const unsigned char *pat, size_t base)
{
    switch (hoop_dtype_size(bc->dtype)) {
    case 1: return wrong_elts(bc, buf, n, 1, pat, base);
    case 2: return wrong_elts(bc, buf, n, 2, pat, base);
    case 4: return wrong_elts(bc, buf, n, 4, pat, base);
    default: return wrong_elts(bc, buf, n, 8, pat, base);
    }
}

/* Elements of buf[0..n) (of elt bytes) whose bits differ from the pattern's, element j
 * expected at phase_of(j); elt a constant where inlined. */
static inline size_t bits_differ(const void *buf, size_t n, size_t elt, const unsigned char *pat)
{
    const unsigned char *b = buf;
    size_t wrong = 0;
    for (size_t j = 0; j < n; j++) wrong += memcmp(b + j * elt, pat + phase_of(j) * elt, elt) != 0;
    return wrong;
}

/* The guard's byte i: no run of equal bytes, unlike zeros or a fill pattern. */
static inline unsigned char guard_byte(size_t i)
{
    return (unsigned char)(0xA7u ^ (i * 29u));
}

static void put_guard(unsigned char *at)
{
    for (size_t i = 0; i < BENCH_GUARD_BYTES; i++) at[i] = guard_byte(i);
}

static size_t guard_damage(const unsigned char *at)
{
    size_t n = 0;
    for (size_t i = 0; i < BENCH_GUARD_BYTES; i++) n += at[i] != guard_byte(i);
    return n;
}

void bench_count_damage(const bench_case *bc, const bench_layout *L, int in_place, const void *send,
                        const void *recv, size_t *guard, size_t *sent)
{
    size_t elt = hoop_dtype_size(bc->dtype);
    unsigned char pat[16 * 8];
    *guard = guard_damage((const unsigned char *)send + L->send_elems * elt) +
             guard_damage((const unsigned char *)recv + L->recv_elems * elt);
    *sent = 0;
    if (in_place) return;
    pattern(bc, bc->rank, pat);
    switch (elt) { /* exact: the input must be untouched, bit for bit */
    case 1: *sent = bits_differ(send, L->send_elems, 1, pat); break;
    case 2: *sent = bits_differ(send, L->send_elems, 2, pat); break;
    case 4: *sent = bits_differ(send, L->send_elems, 4, pat); break;
    default: *sent = bits_differ(send, L->send_elems, 8, pat); break;
    }
}

void bench_prepare(const bench_case *bc, const bench_layout *L, int in_place, void *send,
                   void *recv, void **call_send, void **call_recv)
{
    size_t elt = hoop_dtype_size(bc->dtype), me = (size_t)bc->rank * L->count * elt;
    unsigned char pat[16 * 8], *s = send, *r = recv;
    pattern(bc, bc->rank, pat);
    *call_send = send;
    *call_recv = recv;
    put_guard(s + L->send_elems * elt);
    put_guard(r + L->recv_elems * elt);
    if (!in_place) {
        fill_run(s, L->send_elems, elt, pat, 0);
        memset(r, 0, L->recv_elems * elt);
        return;
    }
    switch (bc->coll) {
    case BENCH_ALLGATHER:
        memset(r, 0, L->recv_elems * elt);
        fill_run(r + me, L->count, elt, pat, 0);
        *call_send = r + me;
        return;
    case BENCH_REDUCESCATTER:
        fill_run(s, L->send_elems, elt, pat, 0);
        *call_recv = s + me;
        return;
    case BENCH_BROADCAST:
        if (bc->rank == bc->root)
            fill_run(s, L->send_elems, elt, pat, 0);
        else
            memset(s, 0, L->send_elems * elt);
        break;
    default: fill_run(s, L->send_elems, elt, pat, 0); break;
    }
    *call_recv = send;
}

size_t bench_count_wrong(const bench_case *bc, const bench_layout *L, const void *recv)
{
    size_t elt = hoop_dtype_size(bc->dtype), wrong = 0;
    const unsigned char *r = recv;
    unsigned char pat[16 * 8];
    switch (bc->coll) {
    case BENCH_REDUCE:
        if (bc->rank != bc->root) return 0;
        /* fall through */
    case BENCH_ALLREDUCE: pattern(bc, -1, pat); return wrong_run(bc, r, L->recv_elems, pat, 0);
    case BENCH_BROADCAST:
        pattern(bc, bc->root, pat);
        return wrong_run(bc, r, L->recv_elems, pat, 0);
    case BENCH_ALLGATHER:
        for (int q = 0; q < bc->world_size; q++) {
            pattern(bc, q, pat);
            wrong += wrong_run(bc, r + (size_t)q * L->count * elt, L->count, pat, 0);
        }
        return wrong;
    default:
        pattern(bc, -1, pat);
        return wrong_run(bc, r, L->recv_elems, pat, (size_t)bc->rank * L->count);
    }
}
