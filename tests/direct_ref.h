/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/direct_ref.h -- the references of tests/check_direct.c, independent of hoop's
 * kernels: f16/bf16 rounding written by hand, exact small-integer data and their int64
 * results, pseudo-random floats and unit roundoffs for float64-bounded checks, and the
 * leak probes (open descriptors, /dev/shm names, named shared mappings).
 */
#ifndef HOOP_TESTS_DIRECT_REF_H
#define HOOP_TESTS_DIRECT_REF_H

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hoop/collectives.h"

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

static double unit(hoop_dtype t);

/* 1 when a 16-bit average through the links is within its documented bound: each rank's
 * x / n is rounded to the type and the n terms are summed with a rounding per hop, so
 * |got - mean| <= n u mean(|x|) (u = the type's unit roundoff). Set ref_exact16 for calls
 * that must equal the f32 sum / n rounded once (direct, and world size 1). */
static _Thread_local int ref_exact16; /* each rank thread sets its own */
static int avg16_ok(hoop_dtype t, int n, const void *got, size_t i, unsigned salt)
{
    double sum = 0, mag = 0;
    for (int r = 0; r < n; r++) {
        double v = (double)val(HOOP_OP_AVG, t, r, i, salt);
        sum += v;
        mag += v < 0 ? -v : v;
    }
    double err = get(t, got, i) - sum / n;
    return (err < 0 ? -err : err) <= 1.01 * n * unit(t) * mag / n + 1e-7;
}

/* Elements of got that differ from the exact result; *first = the first of them. */
static size_t count_wrong(hoop_op op, hoop_dtype t, int n, const void *got, size_t count,
                          unsigned salt, size_t *first)
{
    size_t es = hoop_dtype_size(t), wrong = 0;
    unsigned char want[8];
    int half = t == HOOP_DTYPE_F16 || t == HOOP_DTYPE_BF16;
    *first = SIZE_MAX;
    for (size_t i = 0; i < count; i++) {
        expect(op, t, n, i, salt, want);
        if (memcmp((const char *)got + i * es, want, es) != 0 &&
            !(op == HOOP_OP_AVG && half && !ref_exact16 && avg16_ok(t, n, got, i, salt))) {
            if (!wrong) *first = i;
            wrong++;
        }
    }
    return wrong;
}

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

// ----------------------------------------------------------------- leaks

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

#endif /* HOOP_TESTS_DIRECT_REF_H */
