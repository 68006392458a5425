/*
 * tests/check_direct.c -- memory shared between the ranks of one host
 * (hoop_comm_alloc_shared / free_shared / is_shared) and the `direct` all-reduce that
 * reduces straight from the peers' copies.
 *
 * References are independent of hoop's kernels: small integers whose sums, products,
 * minima and maxima are exact in every dtype whatever the order (reference in int64,
 * converted once by this file's own f16/bf16 rounding), and pseudo-random floats checked
 * against a float64 sum within a bound on the rounding error. Every result is also
 * compared bitwise across ranks, and the elements around the buffer are checked to be
 * untouched. "Direct" is observed through hoop_comm_bytes_sent: a direct call sends only
 * 1-byte tokens (< 16 bytes), another algorithm sends at least the data.
 *
 * Suites: correctness (world sizes 2..5, dtype x op x count x offset, direct and auto),
 * races (200 back-to-back calls whose data change every iteration, several calls in
 * flight mixed with other collectives and segments), mismatches and bad arguments,
 * HOOP_TRANSPORT=tcp (memory private, data sent), failures (killed peer, thread and
 * process; a peer that never calls), leaks (/dev/shm, descriptors), world size 1.
 * main() runs under HOOP_TRANSPORT=auto (thread-ranks share one host).
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "core/clock.h"
#include "coll_harness.h"
#include "run_suite.h"

#define BIG_COUNT 1000003
#define AUTO_DIRECT_BYTES 65536 /* auto picks direct from 64 KiB */
#define TOKEN_BYTES 16          /* a direct call sends fewer bytes than this */

// ----------------------------------------------------------------- dtypes, by hand

static int is_float(hoop_dtype t)
{
    return t == HOOP_DTYPE_F32 || t == HOOP_DTYPE_F64 || t == HOOP_DTYPE_F16 ||
           t == HOOP_DTYPE_BF16;
}

/* IEEE binary16 nearest-even rounding of v (finite), written independently of hoop. */
static uint16_t to_f16(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (a == 0) return sign;
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1): exponent of the leading bit is e - 1 */
    int lead = e - 1 < -14 ? -14 : e - 1;
    double q = nearbyint(ldexp(a, 10 - lead)); /* in units of the last mantissa bit */
    if (lead == -14 && q < 1024) return (uint16_t)(sign | (uint16_t)q); /* subnormal */
    if (q >= 2048) q /= 2, lead++;
    if (lead > 15) return sign | 0x7c00;
    return (uint16_t)(sign | (uint16_t)((lead + 15) << 10) | (uint16_t)((int)q - 1024));
}

static double from_f16(uint16_t h)
{
    int ex = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = ex ? ldexp(1024 + m, ex - 25) : ldexp(m, -24);
    return h & 0x8000 ? -v : v;
}

static uint16_t to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

static double from_bf16(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static void put(hoop_dtype t, void *buf, size_t i, double v)
{
    switch (t) {
    case HOOP_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
    case HOOP_DTYPE_F64: ((double *)buf)[i] = v; break;
    case HOOP_DTYPE_F16: ((uint16_t *)buf)[i] = to_f16((float)v); break;
    case HOOP_DTYPE_BF16: ((uint16_t *)buf)[i] = to_bf16((float)v); break;
    case HOOP_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)(int64_t)v; break;
    case HOOP_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    default: ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v; break;
    }
}

static double get(hoop_dtype t, const void *buf, size_t i)
{
    switch (t) {
    case HOOP_DTYPE_F32: return ((const float *)buf)[i];
    case HOOP_DTYPE_F64: return ((const double *)buf)[i];
    case HOOP_DTYPE_F16: return from_f16(((const uint16_t *)buf)[i]);
    case HOOP_DTYPE_BF16: return from_bf16(((const uint16_t *)buf)[i]);
    case HOOP_DTYPE_I32: return ((const int32_t *)buf)[i];
    case HOOP_DTYPE_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const uint8_t *)buf)[i];
    }
}

// ----------------------------------------------------------------- exact data

/* Value rank r contributes at element i of call salt: small, so every op is exact. */
static int64_t val(hoop_op op, hoop_dtype t, int r, size_t i, unsigned salt)
{
    size_t k = i + salt;
    if (op == HOOP_OP_PROD) return 1 + (((size_t)r + k) % 3 == 0);
    int64_t v = (int64_t)(((size_t)r * 3 + k) % 5) + 1;
    return t == HOOP_DTYPE_U8 ? v : v - 2; /* -1..3 for signed and floating types */
}

static void fill(hoop_op op, hoop_dtype t, int r, void *buf, size_t count, unsigned salt)
{
    for (size_t i = 0; i < count; i++) put(t, buf, i, (double)val(op, t, r, i, salt));
}

/* Exact result of op over n ranks at element i, converted once to t. */
static void expect(hoop_op op, hoop_dtype t, int n, size_t i, unsigned salt, void *out)
{
    int64_t acc = val(op, t, 0, i, salt);
    for (int r = 1; r < n; r++) {
        int64_t v = val(op, t, r, i, salt);
        if (op == HOOP_OP_PROD)
            acc *= v;
        else if (op == HOOP_OP_MIN)
            acc = v < acc ? v : acc;
        else if (op == HOOP_OP_MAX)
            acc = v > acc ? v : acc;
        else
            acc += v;
    }
    if (op == HOOP_OP_AVG && t == HOOP_DTYPE_F64)
        put(t, out, 0, (double)acc / n);
    else if (op == HOOP_OP_AVG) /* the documented avg: the f32 sum / n, rounded once */
        put(t, out, 0, (double)((float)acc / (float)n));
    else
        put(t, out, 0, (double)(t == HOOP_DTYPE_U8 ? (acc & 0xff) : acc));
}

/* Elements of got that differ from the exact result; *first = the first of them. */
static size_t count_wrong(hoop_op op, hoop_dtype t, int n, const void *got, size_t count,
                          unsigned salt, size_t *first)
{
    size_t es = hoop_dtype_size(t), wrong = 0;
    unsigned char want[8];
    *first = SIZE_MAX;
    for (size_t i = 0; i < count; i++) {
        expect(op, t, n, i, salt, want);
        if (memcmp((const char *)got + i * es, want, es) != 0) {
            if (!wrong) *first = i;
            wrong++;
        }
    }
    return wrong;
}

// ----------------------------------------------------------------- helpers

/* Every rank's copy of len bytes at its own p agrees bitwise with rank 0's. */
static void same_on_all(h_rank *h, void *p, size_t len, const char *what)
{
    h->shared[h->rank] = p;
    pthread_barrier_wait(h->bar);
    if (memcmp(h->shared[0], p, len) != 0)
        h_fail(h, "%s: result differs bitwise from rank 0's", what);
    pthread_barrier_wait(h->bar);
}

static hoop_status alloc_seg(h_rank *h, size_t bytes, void **p)
{
    *p = NULL;
    hoop_status st = hoop_comm_alloc_shared(h->comm, bytes, p);
    if (st != HOOP_OK)
        h_fail(h, "alloc_shared(%zu): %s: %s", bytes, hoop_status_name(st), hoop_last_error());
    return st;
}

static void free_seg(h_rank *h, void *p)
{
    hoop_status st = hoop_comm_free_shared(h->comm, p);
    if (st != HOOP_OK) h_fail(h, "free_shared: %s: %s", hoop_status_name(st), hoop_last_error());
}

/* The number of times s occurs in text. */
static int occurrences(const char *text, const char *s)
{
    int k = 0;
    for (const char *p = strstr(text, s); p; p = strstr(p + 1, s)) k++;
    return k;
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* Files /dev/shm/hoop* that exist now, as one string of names separated by '/'. */
static void shm_names(char *out, size_t cap)
{
    size_t k = 0;
    out[0] = '\0';
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, "hoop", 4) == 0 && k + strlen(e->d_name) + 2 < cap)
            k += (size_t)snprintf(out + k, cap - k, "/%s/", e->d_name);
    closedir(d);
}

/* A /dev/shm/hoop* file that is not in before and is still there after 200 ms (a file of
 * a concurrent process would have been unlinked by then); NULL when none. */
static const char *new_shm_file(const char *before)
{
    static char now[8192], again[8192], name[300];
    shm_names(now, sizeof(now));
    usleep(200 * 1000);
    shm_names(again, sizeof(again));
    for (char *p = strtok(now, "/"); p; p = strtok(NULL, "/")) {
        snprintf(name, sizeof(name), "/%s/", p);
        if (!strstr(before, name) && strstr(again, name)) return name;
    }
    return NULL;
}

/* A mapping of this process backed by a /dev/shm file that still has a name. */
static int maps_named_shm(char *line, size_t cap)
{
    FILE *f = fopen("/proc/self/maps", "r");
    int found = 0;
    if (!f) return 0;
    while (!found && fgets(line, (int)cap, f))
        found = strstr(line, "/dev/shm/") && !strstr(line, "(deleted)");
    fclose(f);
    return found;
}

// ----------------------------------------------------------------- one exact case

typedef struct dcase {
    hoop_dtype t;
    hoop_op op;
    size_t count, off; /* elements; the buffer starts off elements into the segment */
    hoop_algo algo;
    unsigned salt;
} dcase;

static void describe(const dcase *c, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s %s count=%zu off=%zu algo=%s", hoop_dtype_name(c->t),
             hoop_op_name(c->op), c->count, c->off, hoop_algo_name(c->algo));
}

/* Whether the spec makes this call direct (in place inside a segment of a shared comm). */
static int want_direct(const dcase *c)
{
    return c->algo == HOOP_ALGO_DIRECT ||
           (c->algo == HOOP_ALGO_AUTO && c->count * hoop_dtype_size(c->t) >= AUTO_DIRECT_BYTES);
}

static void check_sent(h_rank *h, const dcase *c, uint64_t sent, int direct, const char *desc)
{
    size_t bytes = c->count * hoop_dtype_size(c->t);
    if (h->n < 2) {
        if (sent != 0)
            h_fail(h, "%s: world size 1 sent %llu bytes", desc, (unsigned long long)sent);
    } else if (direct && sent >= TOKEN_BYTES) {
        h_fail(h, "%s: not direct: sent %llu bytes", desc, (unsigned long long)sent);
    } else if (!direct && bytes >= 64 && sent < bytes / 2) {
        h_fail(h, "%s: sent only %llu bytes: direct where it must not be", desc,
               (unsigned long long)sent);
    }
}

/* Runs one in-place all-reduce on seg (seg_bytes) and checks it against the exact
 * reference, the guard elements around it, the bytes sent, and the other ranks. */
static void run_dcase(h_rank *h, char *seg, size_t seg_bytes, const dcase *c, int direct)
{
    size_t es = hoop_dtype_size(c->t), end = (c->off + c->count) * es, wrong, first;
    char *buf = seg + c->off * es, desc[160];
    describe(c, desc, sizeof(desc));
    int tail = end + es <= seg_bytes; /* room for a guard element after the buffer */
    if (end > seg_bytes) {
        h_fail(h, "%s: segment too small", desc);
        return;
    }
    memset(seg, 0xA5, c->off * es); /* guards: must survive */
    if (tail) memset(seg + end, 0x5A, es);
    fill(c->op, c->t, h->rank, buf, c->count, c->salt);
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    hoop_comm_set_algo(h->comm, c->algo);
    hoop_status st = hoop_allreduce(h->comm, buf, buf, c->count, c->t, c->op, NULL);
    uint64_t sent = hoop_comm_bytes_sent(h->comm) - b0;
    if (st != HOOP_OK) {
        h_fail(h, "%s: %s: %s", desc, hoop_status_name(st), hoop_last_error());
        return;
    }
    wrong = count_wrong(c->op, c->t, h->n, buf, c->count, c->salt, &first);
    if (wrong) h_fail(h, "%s: %zu wrong, first at %zu", desc, wrong, first);
    for (size_t i = 0; i < c->off * es; i++)
        if ((unsigned char)seg[i] != 0xA5)
            h_fail(h, "%s: byte %zu before the buffer written", desc, i);
    for (size_t i = 0; tail && i < es; i++)
        if ((unsigned char)seg[end + i] != 0x5A)
            h_fail(h, "%s: byte after the buffer written", desc);
    check_sent(h, c, sent, direct, desc);
    same_on_all(h, buf, c->count * es, desc);
}

// ----------------------------------------------------------------- correctness

static size_t small_counts(int n, size_t c[4])
{
    size_t m = 0;
    c[m++] = 0;
    c[m++] = 1;
    if (n > 2) c[m++] = (size_t)n - 1;
    c[m++] = 16411; /* a prime: >= 64 KiB for 4- and 8-byte types, below for u8 and halves */
    return m;
}

/* Every dtype x op x small count x offset {0, 3}, under DIRECT and AUTO. */
static void sweep(h_rank *h)
{
    size_t counts[4], nc = small_counts(h->n, counts), seg_bytes = (16411 + 8) * 8;
    void *seg;
    if (alloc_seg(h, seg_bytes, &seg) != HOOP_OK) return;
    for (int t = 0; t < HOOP_DTYPE_COUNT_; t++)
        for (int op = 0; op < HOOP_OP_COUNT_; op++)
            for (size_t ci = 0; ci < nc; ci++)
                for (int k = 0; k < 4 && !h->err[0]; k++) {
                    if (op == HOOP_OP_AVG && !is_float((hoop_dtype)t)) continue;
                    dcase c = {.t = (hoop_dtype)t,
                               .op = (hoop_op)op,
                               .count = counts[ci],
                               .off = k & 1 ? 3 : 0,
                               .algo = k & 2 ? HOOP_ALGO_AUTO : HOOP_ALGO_DIRECT,
                               .salt = (unsigned)(t * 7 + op + k)};
                    run_dcase(h, seg, seg_bytes, &c, want_direct(&c));
                }
    free_seg(h, seg);
}

START_TEST(test_sweep)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.timeout_ms = 20000; /* a hang fails the test instead of stalling it */
    run_ranks(_i, &cfg, sweep, NULL);
}
END_TEST

/* 1000003 elements of every dtype (sum) and every op of f32, at an odd offset. */
static void big(h_rank *h)
{
    size_t seg_bytes = ((size_t)BIG_COUNT + 16) * 8;
    void *seg;
    if (alloc_seg(h, seg_bytes, &seg) != HOOP_OK) return;
    for (int t = 0; t < HOOP_DTYPE_COUNT_ && !h->err[0]; t++) {
        dcase c = {.t = (hoop_dtype)t, .op = HOOP_OP_SUM, .count = BIG_COUNT, .off = 5};
        c.algo = t % 2 ? HOOP_ALGO_AUTO : HOOP_ALGO_DIRECT;
        run_dcase(h, seg, seg_bytes, &c, 1);
    }
    for (int op = 1; op < HOOP_OP_COUNT_ && !h->err[0]; op++) {
        dcase c = {.t = HOOP_DTYPE_F32, .op = (hoop_op)op, .count = BIG_COUNT, .off = 1};
        c.algo = HOOP_ALGO_AUTO;
        run_dcase(h, seg, seg_bytes, &c, 1);
    }
    free_seg(h, seg);
}

START_TEST(test_big)
{
    run_ranks(_i, NULL, big, NULL);
}
END_TEST

/* Pseudo-random value in [-1, 1) for rank r, element i, call salt. */
static double rnd(int r, size_t i, unsigned salt)
{
    uint64_t s = ((uint64_t)r * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)i * 0xBF58476D1CE4E5B9ull) ^
                 ((uint64_t)salt << 40);
    s ^= s >> 31;
    s *= 0x94D049BB133111EBull;
    s ^= s >> 29;
    return (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* Unit roundoff of t. */
static double unit(hoop_dtype t)
{
    return t == HOOP_DTYPE_F64   ? 0x1p-53
           : t == HOOP_DTYPE_F32 ? 0x1p-24
           : t == HOOP_DTYPE_F16 ? 0x1p-11
                                 : 0x1p-8;
}

/* Random floats: within the float64 reference's error bound, bitwise equal everywhere. */
static void random_case(h_rank *h, char *seg, hoop_dtype t, hoop_op op, size_t count, size_t off)
{
    size_t es = hoop_dtype_size(t), bad = 0, first = 0;
    char *buf = seg + off * es;
    unsigned salt = (unsigned)(t * 10 + op);
    for (size_t i = 0; i < count; i++) put(t, buf, i, rnd(h->rank, i, salt));
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    hoop_status st = hoop_allreduce(h->comm, buf, buf, count, t, op, NULL);
    if (st != HOOP_OK) {
        h_fail(h, "random %s: %s", hoop_dtype_name(t), hoop_last_error());
        return;
    }
    if (hoop_comm_bytes_sent(h->comm) - b0 >= TOKEN_BYTES)
        h_fail(h, "random %s %zu: not direct", hoop_dtype_name(t), count);
    for (size_t i = 0; i < count; i++) {
        double ref = 0, mag = 0, got = get(t, buf, i);
        unsigned char tmp[8];
        for (int r = 0; r < h->n; r++) {
            put(t, tmp, 0, rnd(r, i, salt)); /* the value rank r really contributed */
            ref += get(t, tmp, 0);
            mag += fabs(get(t, tmp, 0));
        }
        if (op == HOOP_OP_AVG) ref /= h->n, mag /= h->n;
        if (!(fabs(got - ref) <= (h->n + 1) * unit(t) * mag + 0x1p-24)) {
            if (!bad) first = i;
            bad++;
        }
    }
    if (bad)
        h_fail(h, "random %s %s count %zu: %zu beyond the error bound, first %zu",
               hoop_dtype_name(t), hoop_op_name(op), count, bad, first);
    same_on_all(h, buf, count * es, "random floats");
}

static void random_floats(h_rank *h)
{
    size_t big = (size_t)5 << 19; /* 2.5 Mi f32 = 10 MiB */
    void *seg;
    if (alloc_seg(h, big * 4 + 64, &seg) != HOOP_OK) return;
    random_case(h, seg, HOOP_DTYPE_F32, HOOP_OP_SUM, big, 0);
    static const hoop_dtype ts[] = {HOOP_DTYPE_F32, HOOP_DTYPE_F64, HOOP_DTYPE_F16,
                                    HOOP_DTYPE_BF16};
    for (int k = 0; k < 4; k++) {
        random_case(h, seg, ts[k], HOOP_OP_SUM, 40009, 7);
        random_case(h, seg, ts[k], HOOP_OP_AVG, 40009, 0);
    }
    free_seg(h, seg);
}

START_TEST(test_random_floats)
{
    run_ranks(_i, NULL, random_floats, NULL);
}
END_TEST

/* AUTO's threshold, out-of-place calls, RING forced, plain memory: none of them direct;
 * HOOP_ALGO=direct in the environment is honoured. */
static void choice(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 1 << 20, &seg) != HOOP_OK) return;
    char *s = seg;
    dcase at = {.t = HOOP_DTYPE_F32, .op = HOOP_OP_SUM, .count = 16384, .algo = HOOP_ALGO_AUTO};
    run_dcase(h, seg, 1 << 20, &at, 1); /* exactly 64 KiB: direct */
    at.count = 16383;
    run_dcase(h, seg, 1 << 20, &at, 0); /* one element less: not direct */
    dcase u8 = {.t = HOOP_DTYPE_U8, .op = HOOP_OP_MAX, .count = 65536, .off = 1};
    run_dcase(h, seg, 1 << 20, &u8, 1);
    dcase ring = {.t = HOOP_DTYPE_I32, .op = HOOP_OP_SUM, .count = 100000, .algo = HOOP_ALGO_RING};
    run_dcase(h, seg, 1 << 20, &ring, 0);
    /* Out of place, both buffers in the segment, under DIRECT: runs another algorithm. */
    size_t count = 50000, wrong, first;
    fill(HOOP_OP_SUM, HOOP_DTYPE_I32, h->rank, s, count, 9);
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    if (hoop_allreduce(h->comm, s, s + 4 * count, count, HOOP_DTYPE_I32, HOOP_OP_SUM, NULL) !=
        HOOP_OK)
        h_fail(h, "out of place: %s", hoop_last_error());
    if (hoop_comm_bytes_sent(h->comm) - b0 < 4 * count)
        h_fail(h, "out of place: only %llu bytes sent",
               (unsigned long long)(hoop_comm_bytes_sent(h->comm) - b0));
    if ((wrong = count_wrong(HOOP_OP_SUM, HOOP_DTYPE_I32, h->n, s + 4 * count, count, 9, &first)))
        h_fail(h, "out of place: %zu wrong, first %zu", wrong, first);
    /* Plain memory under DIRECT: falls back, correct. */
    int32_t *plain = malloc(4 * count);
    fill(HOOP_OP_SUM, HOOP_DTYPE_I32, h->rank, plain, count, 3);
    b0 = hoop_comm_bytes_sent(h->comm);
    if (hoop_allreduce(h->comm, plain, plain, count, HOOP_DTYPE_I32, HOOP_OP_SUM, NULL) != HOOP_OK)
        h_fail(h, "plain: %s", hoop_last_error());
    if (hoop_comm_bytes_sent(h->comm) - b0 < 4 * count) h_fail(h, "plain: too few bytes sent");
    if ((wrong = count_wrong(HOOP_OP_SUM, HOOP_DTYPE_I32, h->n, plain, count, 3, &first)))
        h_fail(h, "plain: %zu wrong, first %zu", wrong, first);
    free(plain);
    free_seg(h, seg);
}

START_TEST(test_choice)
{
    hoop_algo a;
    ck_assert_str_eq(hoop_algo_name(HOOP_ALGO_DIRECT), "direct");
    ck_assert_int_eq(hoop_algo_from_name("direct", &a), HOOP_OK);
    ck_assert_int_eq(a, HOOP_ALGO_DIRECT);
    run_ranks(3, NULL, choice, NULL);
}
END_TEST

/* HOOP_ALGO=direct: a 3-element call on a segment goes direct without set_algo. */
static void env_algo(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 4096, &seg) != HOOP_OK) return;
    double *x = seg;
    for (int i = 0; i < 3; i++) x[i] = h->rank * 10 + i;
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    if (hoop_allreduce(h->comm, x, x, 3, HOOP_DTYPE_F64, HOOP_OP_MAX, NULL) != HOOP_OK)
        h_fail(h, "allreduce: %s", hoop_last_error());
    if (hoop_comm_bytes_sent(h->comm) - b0 >= TOKEN_BYTES) h_fail(h, "HOOP_ALGO=direct ignored");
    for (int i = 0; i < 3; i++)
        if (x[i] != (h->n - 1) * 10 + i) h_fail(h, "max[%d] = %g", i, x[i]);
    free_seg(h, seg);
}

START_TEST(test_env_algo)
{
    setenv("HOOP_ALGO", "direct", 1);
    run_ranks(4, NULL, env_algo, NULL);
}
END_TEST

// ----------------------------------------------------------------- races

/* 200 in-place all-reduces on one segment. Each rank snapshots its result the moment the
 * call returns and at once writes the next iteration's data: a rank leaving while a peer
 * still reads or writes its copy shows up as a wrong snapshot or a wrong peer result. */
static void iterations(h_rank *h)
{
    enum { ITERS = 200 };
    size_t count = 12289;
    void *seg;
    if (alloc_seg(h, count * 4 + 4096, &seg) != HOOP_OK) return;
    int32_t *x = (int32_t *)seg + 1, *snap = malloc(count * 4);
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    for (size_t i = 0; i < count; i++) x[i] = (int32_t)(h->rank * 1000 + i);
    uint64_t b0 = hoop_comm_bytes_sent(h->comm);
    for (int it = 0; it < ITERS && !h->err[0]; it++) {
        if (it % h->n == h->rank && it % 3) usleep((useconds_t)(it % 7) * 50); /* arrive late */
        hoop_status st = hoop_allreduce(h->comm, x, x, count, HOOP_DTYPE_I32, HOOP_OP_SUM, NULL);
        memcpy(snap, x, count * 4);
        for (size_t i = 0; i < count; i++) x[i] = (int32_t)(h->rank * 1000 + i + (size_t)it + 1);
        if (st != HOOP_OK) {
            h_fail(h, "iteration %d: %s", it, hoop_last_error());
            break;
        }
        int64_t n = h->n;
        for (size_t i = 0; i < count; i++) {
            int64_t want = 1000 * n * (n - 1) / 2 + n * (int64_t)(i + (size_t)it);
            if (snap[i] != want) {
                h_fail(h, "iteration %d: element %zu = %d, want %lld", it, i, snap[i],
                       (long long)want);
                break;
            }
        }
    }
    uint64_t sent = hoop_comm_bytes_sent(h->comm) - b0;
    if (sent >= (uint64_t)TOKEN_BYTES * ITERS)
        h_fail(h, "%llu bytes sent in %d direct calls", (unsigned long long)sent, ITERS);
    free(snap);
    free_seg(h, seg);
}

START_TEST(test_iterations)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.timeout_ms = 20000;
    run_ranks(_i, &cfg, iterations, NULL);
}
END_TEST

/* Several calls in flight: direct on two regions of segment A, ring on plain memory, a
 * broadcast, auto (direct) on segment B, a barrier; then waited in reverse order. */
static void interleave(h_rank *h)
{
    enum { ROUNDS = 20, K = 5 };
    size_t ca = 3001, cp = 5000, cb = 70000;
    void *a, *b;
    if (alloc_seg(h, 2 * ca * 8, &a) != HOOP_OK || alloc_seg(h, cb * 4, &b) != HOOP_OK) return;
    double *a0 = a, *a1 = (double *)a + ca;
    int32_t *plain = malloc(cp * 4), *bb = b;
    float bc[64];
    hoop_request *req[K + 1];
    for (int round = 0; round < ROUNDS && !h->err[0]; round++) {
        unsigned s = (unsigned)round;
        fill(HOOP_OP_SUM, HOOP_DTYPE_F64, h->rank, a0, ca, s);
        fill(HOOP_OP_MAX, HOOP_DTYPE_F64, h->rank, a1, ca, s + 1);
        fill(HOOP_OP_SUM, HOOP_DTYPE_I32, h->rank, plain, cp, s + 2);
        fill(HOOP_OP_PROD, HOOP_DTYPE_I32, h->rank, bb, cb, s + 3);
        for (int i = 0; i < 64; i++) bc[i] = h->rank == 1 ? (float)(round * 64 + i) : -1.0f;
        int st = HOOP_OK;
        hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
        st |= hoop_allreduce(h->comm, a0, a0, ca, HOOP_DTYPE_F64, HOOP_OP_SUM, &req[0]);
        hoop_comm_set_algo(h->comm, HOOP_ALGO_RING);
        st |= hoop_allreduce(h->comm, plain, plain, cp, HOOP_DTYPE_I32, HOOP_OP_SUM, &req[1]);
        hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
        st |= hoop_allreduce(h->comm, a1, a1, ca, HOOP_DTYPE_F64, HOOP_OP_MAX, &req[2]);
        st |= hoop_broadcast(h->comm, bc, bc, 64, HOOP_DTYPE_F32, 1, &req[3]);
        hoop_comm_set_algo(h->comm, HOOP_ALGO_AUTO);
        st |= hoop_allreduce(h->comm, bb, bb, cb, HOOP_DTYPE_I32, HOOP_OP_PROD, &req[4]);
        st |= hoop_barrier(h->comm, &req[5]);
        if (st != HOOP_OK) {
            h_fail(h, "round %d: enqueue: %s", round, hoop_last_error());
            break;
        }
        for (int k = K; k >= 0; k--)
            if (hoop_wait(req[k], -1) != HOOP_OK)
                h_fail(h, "round %d call %d: %s", round, k, hoop_last_error());
        size_t first, w;
        if ((w = count_wrong(HOOP_OP_SUM, HOOP_DTYPE_F64, h->n, a0, ca, s, &first)))
            h_fail(h, "round %d: direct sum: %zu wrong, first %zu", round, w, first);
        if ((w = count_wrong(HOOP_OP_MAX, HOOP_DTYPE_F64, h->n, a1, ca, s + 1, &first)))
            h_fail(h, "round %d: direct max: %zu wrong, first %zu", round, w, first);
        if ((w = count_wrong(HOOP_OP_SUM, HOOP_DTYPE_I32, h->n, plain, cp, s + 2, &first)))
            h_fail(h, "round %d: ring: %zu wrong, first %zu", round, w, first);
        if ((w = count_wrong(HOOP_OP_PROD, HOOP_DTYPE_I32, h->n, bb, cb, s + 3, &first)))
            h_fail(h, "round %d: auto on B: %zu wrong, first %zu", round, w, first);
        for (int i = 0; i < 64; i++)
            if (bc[i] != (float)(round * 64 + i)) h_fail(h, "round %d: broadcast[%d]", round, i);
    }
    free(plain);
    free_seg(h, a);
    free_seg(h, b);
}

START_TEST(test_interleave)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.timeout_ms = 20000;
    run_ranks(_i, &cfg, interleave, NULL);
}
END_TEST

/* Segments freed and allocated between calls keep their numbers in step; direct runs
 * right up to the last byte of a segment. */
static void churn(h_rank *h)
{
    void *s[3];
    for (int k = 0; k < 3; k++)
        if (alloc_seg(h, (size_t)(k + 1) * 5000, &s[k]) != HOOP_OK) return;
    free_seg(h, s[1]);
    void *d;
    if (alloc_seg(h, 12288, &d) != HOOP_OK) return;
    dcase c = {.t = HOOP_DTYPE_I64, .op = HOOP_OP_SUM, .algo = HOOP_ALGO_DIRECT};
    c.count = 15000 / 8 - 1, c.off = 1; /* ends exactly at byte 15000 of s[2] */
    run_dcase(h, s[2], 15000, &c, 1);
    c.count = 1535, c.off = 0;
    run_dcase(h, d, 12288, &c, 1);
    c.count = 600, c.off = 0;
    run_dcase(h, s[0], 5000, &c, 1);
    free_seg(h, s[0]);
    free_seg(h, d);
    /* s[2] is left for destroy to free. */
}

START_TEST(test_churn)
{
    run_ranks(3, NULL, churn, NULL);
}
END_TEST

// ----------------------------------------------------------------- mismatches

/* Asserts st is HOOP_ERR_MISMATCH and the message names both calls (and a, b). */
static void want_mismatch(h_rank *h, hoop_status st, const char *what, const char *a, const char *b)
{
    const char *msg = hoop_last_error();
    if (st != HOOP_ERR_MISMATCH)
        h_fail(h, "%s: want HOOP_ERR_MISMATCH, got %s: %s", what, hoop_status_name(st), msg);
    else if (occurrences(msg, "allreduce") < 2 && occurrences(msg, "alloc") < 2)
        h_fail(h, "%s: the message does not name both calls: %s", what, msg);
    else if ((a && !strstr(msg, a)) || (b && !strstr(msg, b)))
        h_fail(h, "%s: the message does not name '%s' and '%s': %s", what, a, b ? b : "", msg);
}

static void mismatch(h_rank *h)
{
    int kind = *(int *)h->user;
    size_t count = kind == 1 ? 20000 : 100;
    void *s1, *s2;
    if (alloc_seg(h, 1 << 18, &s1) != HOOP_OK || alloc_seg(h, 1 << 18, &s2) != HOOP_OK) return;
    float *plain = malloc(count * 4 + 64), *x = s1;
    if (kind <= 1 && h->rank == h->n - 1) x = plain;
    if (kind == 2 && h->rank == 1) x += 1;
    if (kind == 3 && h->rank == 0) x = s2;
    for (size_t i = 0; i < count; i++) x[i] = 1.0f;
    hoop_comm_set_algo(h->comm, kind == 1 ? HOOP_ALGO_AUTO : HOOP_ALGO_DIRECT);
    int64_t t0 = hoop__now_ns();
    hoop_status st = hoop_allreduce(h->comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    static const char *names[] = {"shared vs plain (direct)", "shared vs plain (auto)",
                                  "offsets 0 vs 1", "segments differ"};
    want_mismatch(h, st, names[kind], kind <= 1 ? "direct" : NULL, NULL);
    if (secs > 5) h_fail(h, "%s: took %.1f s", names[kind], secs);
    /* Never wrong data: whatever was written, no rank holds a sum of n. */
    for (size_t i = 0; i < count; i++)
        if (x[i] == (float)h->n) h_fail(h, "%s: element %zu was reduced", names[kind], i);
    st = hoop_barrier(h->comm, NULL);
    if (st == HOOP_OK) h_fail(h, "%s: the comm still works after a mismatch", names[kind]);
    free(plain);
    free_seg(h, s1);
    free_seg(h, s2);
}

START_TEST(test_mismatch)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.timeout_ms = 10000; /* a hang fails as a timeout, not a mismatch */
    for (int n = 2; n <= 4; n += 2) run_ranks(n, &cfg, mismatch, &_i);
}
END_TEST

static void alloc_mismatch(h_rank *h)
{
    void *p = NULL;
    int64_t t0 = hoop__now_ns();
    hoop_status st = hoop_comm_alloc_shared(h->comm, h->rank == 1 ? 12288 : 8192, &p);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    if (st != HOOP_ERR_MISMATCH)
        h_fail(h, "want HOOP_ERR_MISMATCH, got %s: %s", hoop_status_name(st), hoop_last_error());
    else if (!strstr(hoop_last_error(), "12288") || !strstr(hoop_last_error(), "8192"))
        h_fail(h, "the message does not name both sizes: %s", hoop_last_error());
    if (secs > 5) h_fail(h, "took %.1f s", secs);
    if (st != HOOP_OK && p) h_fail(h, "a failed alloc_shared returned a pointer");
}

START_TEST(test_alloc_mismatch)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.timeout_ms = 10000;
    int before = open_fds();
    run_ranks(3, &cfg, alloc_mismatch, NULL);
    ck_assert_int_eq(open_fds(), before);
}
END_TEST

// ----------------------------------------------------------------- arguments

static void bad_args(h_rank *h)
{
    hoop_comm *c = h->comm;
    void *p = (void *)1, *q = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (hoop_comm_alloc_shared(NULL, 4096, &p) != HOOP_ERR_INVALID) h_fail(h, "NULL comm accepted");
    if (hoop_comm_alloc_shared(c, 0, &p) != HOOP_ERR_INVALID) h_fail(h, "0 bytes accepted");
    if (hoop_comm_alloc_shared(c, 4096, NULL) != HOOP_ERR_INVALID) h_fail(h, "NULL ptr accepted");
    if (alloc_seg(h, 100000, &q) != HOOP_OK) return;
    /* Zeroed, page-aligned; a direct call on it works after the rejected ones. */
    if ((uintptr_t)q % (uintptr_t)page) h_fail(h, "segment %p not page-aligned", q);
    for (size_t i = 0; i < 100000; i++)
        if (((unsigned char *)q)[i]) {
            h_fail(h, "byte %zu of a new segment is not zero", i);
            break;
        }
    char *b = q, *m = malloc(4096);
    if (!hoop_comm_is_shared(c, q, 100000)) h_fail(h, "is_shared(whole segment) = 0");
    if (!hoop_comm_is_shared(c, b + 99992, 8)) h_fail(h, "is_shared(last 8 bytes) = 0");
    if (hoop_comm_is_shared(c, b + 100000 - 8, 16 + (size_t)page * 64))
        h_fail(h, "is_shared(range crossing the end) = 1");
    if (hoop_comm_is_shared(c, b - 8, 16)) h_fail(h, "is_shared(range crossing the start) = 1");
    if (hoop_comm_is_shared(c, m, 4096)) h_fail(h, "is_shared(malloc) = 1");
    h->shared[h->rank] = q;
    pthread_barrier_wait(h->bar);
    void *peer = h->shared[(h->rank + 1) % h->n];
    if (hoop_comm_is_shared(c, peer, 64)) h_fail(h, "is_shared(another rank's segment) = 1");
    if (hoop_comm_free_shared(c, peer) != HOOP_ERR_INVALID) h_fail(h, "freed a peer's segment");
    pthread_barrier_wait(h->bar);
    if (hoop_comm_free_shared(c, m) != HOOP_ERR_INVALID) h_fail(h, "freed malloc memory");
    if (hoop_comm_free_shared(c, b + 4096) != HOOP_ERR_INVALID) h_fail(h, "freed an inner pointer");
    if (hoop_comm_free_shared(c, NULL) != HOOP_OK) h_fail(h, "free(NULL) refused");
    dcase dc = {.t = HOOP_DTYPE_U8, .op = HOOP_OP_SUM, .count = 99, .algo = HOOP_ALGO_DIRECT};
    run_dcase(h, q, 100000, &dc, 1);
    free_seg(h, q);
    if (hoop_comm_is_shared(c, q, 64)) h_fail(h, "is_shared after free = 1");
    if (hoop_comm_free_shared(c, q) != HOOP_ERR_INVALID) h_fail(h, "double free accepted");
    free(m);
}

START_TEST(test_bad_args)
{
    run_ranks(3, NULL, bad_args, NULL);
}
END_TEST

// ----------------------------------------------------------------- tcp, world size 1

static void over_tcp(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 1 << 20, &seg) != HOOP_OK) return;
    if ((uintptr_t)seg % 4096) h_fail(h, "not page-aligned");
    if (hoop_comm_is_shared(h->comm, seg, 1 << 20)) h_fail(h, "is_shared = 1 over tcp");
    dcase c = {.t = HOOP_DTYPE_F32, .op = HOOP_OP_AVG, .count = 100003, .off = 3};
    c.algo = HOOP_ALGO_DIRECT;
    run_dcase(h, seg, 1 << 20, &c, 0);
    c.algo = HOOP_ALGO_AUTO, c.t = HOOP_DTYPE_I64, c.op = HOOP_OP_SUM, c.count = 30011;
    run_dcase(h, seg, 1 << 20, &c, 0);
    free_seg(h, seg);
}

START_TEST(test_tcp)
{
    setenv("HOOP_TRANSPORT", "tcp", 1);
    run_ranks(3, NULL, over_tcp, NULL);
}
END_TEST

static void single(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 40000, &seg) != HOOP_OK) return;
    dcase c = {.t = HOOP_DTYPE_BF16, .op = HOOP_OP_AVG, .count = 19000, .off = 1};
    for (int algo = HOOP_ALGO_AUTO; algo <= (int)HOOP_ALGO_DIRECT; algo++) {
        c.algo = (hoop_algo)algo;
        run_dcase(h, seg, 40000, &c, 1);
    }
    int32_t a[5] = {1, -2, 3, -4, 5}, b[5] = {0};
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    if (hoop_allreduce(h->comm, a, b, 5, HOOP_DTYPE_I32, HOOP_OP_PROD, NULL) != HOOP_OK ||
        memcmp(a, b, sizeof(a)) != 0)
        h_fail(h, "out-of-place copy: %s", hoop_last_error());
    free_seg(h, seg);
}

START_TEST(test_single)
{
    run_ranks(1, NULL, single, NULL);
}
END_TEST

// ----------------------------------------------------------------- failures

/* Rank 2 is killed (0), or issues its call and is killed at once (1), while the others
 * are in a direct all-reduce: they fail with HOOP_ERR_REMOTE within 3 s (in case 1 the
 * call may also complete, with the right sums). */
static void dead_peer(h_rank *h)
{
    int mode = *(int *)h->user;
    size_t count = (size_t)4 << 20;
    void *seg;
    if (alloc_seg(h, count * 4, &seg) != HOOP_OK) return;
    float *x = seg;
    for (size_t i = 0; i < count; i++) x[i] = (float)(i % 3);
    hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
    if (h->rank == 2) {
        hoop_request *req = NULL;
        if (mode == 1)
            hoop_allreduce(h->comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, &req);
        else
            usleep(100 * 1000);
        hoop__comm_kill(h->comm);
        if (req) hoop_wait(req, -1);
        return; /* the harness destroys the comm, which frees the segment */
    }
    int64_t t0 = hoop__now_ns();
    hoop_status st = hoop_allreduce(h->comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    if (mode == 1 && st == HOOP_OK) {
        for (size_t i = 0; i < count; i++)
            if (x[i] != (float)(h->n * (int)(i % 3))) {
                h_fail(h, "completed with a wrong sum at %zu", i);
                break;
            }
    } else if (st != HOOP_ERR_REMOTE) {
        h_fail(h, "want HOOP_ERR_REMOTE, got %s: %s", hoop_status_name(st), hoop_last_error());
    } else if (!strstr(hoop_last_error(), "rank 2")) {
        h_fail(h, "the message does not name rank 2: %s", hoop_last_error());
    }
    if (secs > 3.0) h_fail(h, "took %.2f s to notice the dead peer", secs);
    free_seg(h, seg);
}

START_TEST(test_dead_peer)
{
    int mode = _i;
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.timeout_ms = 20000;
    run_ranks(4, &cfg, dead_peer, &mode);
}
END_TEST

/* Rank 2 never calls: the others time out after the comm's (short) deadline. */
static void never_calls(h_rank *h)
{
    void *seg;
    if (alloc_seg(h, 1 << 20, &seg) != HOOP_OK) return;
    if (h->rank != 2) {
        hoop_comm_set_algo(h->comm, HOOP_ALGO_DIRECT);
        int64_t t0 = hoop__now_ns();
        hoop_status st = hoop_allreduce(h->comm, seg, seg, 1000, HOOP_DTYPE_F32, HOOP_OP_SUM, NULL);
        double secs = (double)(hoop__now_ns() - t0) / 1e9;
        if (st != HOOP_ERR_TIMEOUT)
            h_fail(h, "want HOOP_ERR_TIMEOUT, got %s: %s", hoop_status_name(st), hoop_last_error());
        if (secs < 0.45 || secs > 3) h_fail(h, "timed out after %.2f s (deadline 0.5 s)", secs);
    }
    pthread_barrier_wait(h->bar);
    free_seg(h, seg);
}

START_TEST(test_never_calls)
{
    hoop_comm_config cfg = HOOP_COMM_CONFIG_INIT;
    cfg.timeout_ms = 500;
    run_ranks(3, &cfg, never_calls, NULL);
}
END_TEST

// ----------------------------------------------------------------- leaks

static void leaks(h_rank *h)
{
    char line[512];
    void *a, *b;
    if (alloc_seg(h, 3 << 20, &a) != HOOP_OK || alloc_seg(h, 5000, &b) != HOOP_OK) return;
    pthread_barrier_wait(h->bar);
    if (h->rank == 0) {
        const char *f = new_shm_file(h->user);
        if (f) h_fail(h, "%s is still in /dev/shm after alloc_shared returned", f);
        if (maps_named_shm(line, sizeof(line))) h_fail(h, "mapped and still named: %s", line);
    }
    pthread_barrier_wait(h->bar);
    dcase c = {.t = HOOP_DTYPE_I32, .op = HOOP_OP_SUM, .count = 700000, .algo = HOOP_ALGO_AUTO};
    run_dcase(h, a, 3 << 20, &c, 1);
    free_seg(h, b); /* a is left for destroy */
}

START_TEST(test_leaks)
{
    static char before[8192];
    char line[512];
    shm_names(before, sizeof(before));
    int fds = open_fds();
    for (int k = 0; k < 3; k++) run_ranks(2 + k, NULL, leaks, before);
    ck_assert_int_eq(open_fds(), fds);
    const char *f = new_shm_file(before);
    ck_assert_msg(f == NULL, "%s left in /dev/shm after destroy", f);
    ck_assert_msg(!maps_named_shm(line, sizeof(line)), "still mapped: %s", line);
}
END_TEST

// ----------------------------------------------------------------- processes

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void set_env(int rank, int n, int port)
{
    char buf[32];
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(buf, sizeof(buf), "%d", port);
    setenv("MASTER_PORT", buf, 1);
    snprintf(buf, sizeof(buf), "%d", rank);
    setenv("RANK", buf, 1);
    snprintf(buf, sizeof(buf), "%d", n);
    setenv("WORLD_SIZE", buf, 1);
    setenv("HOOP_TOKEN", "check-direct", 1);
    setenv("HOOP_TIMEOUT", "20", 1);
}

/* The exact sum of iteration it at element i (rank r contributes r + i % 5 + it). */
static float proc_sum(int n, size_t i, int it)
{
    return (float)((size_t)n * (size_t)(n - 1) / 2 + (size_t)n * (i % 5 + (size_t)it));
}

/* One direct all-reduce of iteration it in a worker process; rank victim raises SIGKILL
 * before its call (early) or right after issuing it (iteration 1). Returns 0 when the
 * call passed, 1 when it failed as the victim's death allows, -1 on a real failure. */
static int proc_call(hoop_comm *comm, float *x, size_t count, int it, int victim, int early)
{
    int rank = hoop_comm_rank(comm), n = hoop_comm_world_size(comm);
    hoop_request *req;
    for (size_t i = 0; i < count; i++) x[i] = (float)((size_t)rank + i % 5 + (size_t)it);
    if (rank == victim && early) raise(SIGKILL);
    uint64_t b0 = hoop_comm_bytes_sent(comm);
    int64_t t0 = hoop__now_ns();
    hoop_status st = hoop_allreduce(comm, x, x, count, HOOP_DTYPE_F32, HOOP_OP_SUM, &req);
    if (rank == victim && it == 1) raise(SIGKILL);
    if (st == HOOP_OK) st = hoop_wait(req, -1);
    double secs = (double)(hoop__now_ns() - t0) / 1e9;
    uint64_t sent = hoop_comm_bytes_sent(comm) - b0;
    if (st == HOOP_ERR_REMOTE && victim >= 0 && (early || it >= 1) && secs < 3.0 &&
        strstr(hoop_last_error(), "rank 2"))
        return 1;
    if (st != HOOP_OK || sent >= TOKEN_BYTES) {
        fprintf(stderr, "rank %d iteration %d: %s after %.2f s, %llu bytes sent: %s\n", rank, it,
                hoop_status_name(st), secs, (unsigned long long)sent, hoop_last_error());
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        if (x[i] != proc_sum(n, i, it)) {
            fprintf(stderr, "rank %d iteration %d: x[%zu] = %g, want %g\n", rank, it, i, x[i],
                    proc_sum(n, i, it));
            return -1;
        }
    return 0;
}

/* One worker process of test_processes; returns its exit code (0 = every check passed). */
static int worker(int rank, int n, int port, int victim, int early)
{
    hoop_comm *comm;
    size_t count = (size_t)1 << 20;
    void *seg = NULL;
    char line[512];
    set_env(rank, n, port);
    if (hoop_comm_init_env(&comm) != HOOP_OK || hoop_comm_alloc_shared(comm, count * 4, &seg)) {
        fprintf(stderr, "rank %d: %s\n", rank, hoop_last_error());
        return 2;
    }
    int ok = hoop_comm_is_shared(comm, seg, count * 4), failed = 0;
    if (!ok) fprintf(stderr, "rank %d: is_shared = 0 between processes\n", rank);
    if (maps_named_shm(line, sizeof(line)))
        fprintf(stderr, "rank %d: mapped and still named: %s", rank, line), ok = 0;
    hoop_comm_set_algo(comm, HOOP_ALGO_DIRECT);
    for (int it = 0; it < 3 && ok && !failed; it++) {
        int r = proc_call(comm, seg, count, it, victim, early);
        ok = r >= 0, failed = r == 1;
    }
    if (ok && victim >= 0 && !failed) {
        fprintf(stderr, "rank %d: never saw rank %d die\n", rank, victim);
        ok = 0;
    }
    ok = hoop_comm_free_shared(comm, seg) == HOOP_OK && ok;
    return (hoop_comm_destroy(comm) == HOOP_OK && ok) ? 0 : 1;
}

/* _i = 0: 3 healthy processes; 1: rank 2 of 4 killed before its call; 2: killed in it. */
START_TEST(test_processes)
{
    int n = _i ? 4 : 3, port = free_port(), victim = _i ? 2 : -1;
    pid_t pid[4];
    for (int r = 0; r < n; r++) {
        pid[r] = fork();
        ck_assert_int_ge(pid[r], 0);
        if (pid[r] == 0) _exit(worker(r, n, port, victim, _i == 1));
    }
    for (int r = 0; r < n; r++) {
        int status;
        ck_assert_int_eq(waitpid(pid[r], &status, 0), pid[r]);
        if (r == victim)
            ck_assert(WIFSIGNALED(status));
        else
            ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d failed", r);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("direct");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 120);
    tcase_add_loop_test(core, test_sweep, 2, 6);
    tcase_add_loop_test(core, test_big, 2, 6);
    tcase_add_loop_test(core, test_random_floats, 3, 6);
    tcase_add_test(core, test_choice);
    tcase_add_test(core, test_env_algo);
    tcase_add_test(core, test_single);
    tcase_add_test(core, test_tcp);
    suite_add_tcase(s, core);
    TCase *races = tcase_create("races");
    tcase_set_timeout(races, 120);
    tcase_add_loop_test(races, test_iterations, 2, 6);
    tcase_add_loop_test(races, test_interleave, 2, 5);
    tcase_add_test(races, test_churn);
    suite_add_tcase(s, races);
    TCase *errors = tcase_create("errors");
    tcase_set_timeout(errors, 60);
    tcase_add_loop_test(errors, test_mismatch, 0, 4);
    tcase_add_test(errors, test_alloc_mismatch);
    tcase_add_test(errors, test_bad_args);
    tcase_add_loop_test(errors, test_dead_peer, 0, 2);
    tcase_add_test(errors, test_never_calls);
    tcase_add_test(errors, test_leaks);
    tcase_add_loop_test(errors, test_processes, 0, 3);
    suite_add_tcase(s, errors);
    return s;
}

int main(void)
{
    setenv("HOOP_TRANSPORT", "auto", 1);
    unsetenv("HOOP_ALGO");
    return run_suite(suite());
}
