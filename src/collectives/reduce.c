/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/reduce.c -- elementwise reduction kernels on the CPU.
 *
 * Plain loops over contiguous arrays that the compiler vectorises. GCC's -O2 only
 * vectorises loops that need no run-time alias check, and dst may alias an operand
 * here, so this file asks for the dynamic cost model (checked with -fopt-info-vec:
 * every kernel loop is vectorised). Integer sums and products are computed in the unsigned type of
 * the same width so they wrap without undefined behaviour. f16 and bf16 are widened to f32,
 * combined, optionally divided (the last step of an average) and rounded once to nearest even.
 *
 * Owns nothing. Thread-safe (pure functions).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#include <math.h>
#include <string.h>

#include "collectives/coll.h"
#include "collectives/reduce_elem.h"

// ----------------------------------------------------------------- half conversions

/* The out-of-line forms of reduce_elem.h's conversions (shared with the device). */
float hoop__f16_to_f32(uint16_t h)
{
    return hoop__f16_to_f32_inl(h);
}

uint16_t hoop__f32_to_f16(float f)
{
    return hoop__f32_to_f16_inl(f);
}

float hoop__bf16_to_f32(uint16_t h)
{
    return hoop__bf16_to_f32_inl(h);
}

uint16_t hoop__f32_to_bf16(float f)
{
    return hoop__f32_to_bf16_inl(f);
}

// ----------------------------------------------------------------- kernels

#define COMBINE HOOP__COMBINE /* reduce_elem.h: the device computes the same */

/* One loop per (type, op) so each one vectorises without a branch inside. */
#define DEF_KERNEL(NAME, T)                                                            \
    static void NAME(hoop_op op, T *dst, const T *a, const T *b, size_t n)             \
    {                                                                                  \
        switch (op) {                                                                  \
        case HOOP_OP_PROD:                                                             \
            for (size_t i = 0; i < n; i++) dst[i] = COMBINE(HOOP_OP_PROD, a[i], b[i]); \
            break;                                                                     \
        case HOOP_OP_MIN:                                                              \
            for (size_t i = 0; i < n; i++) dst[i] = COMBINE(HOOP_OP_MIN, a[i], b[i]);  \
            break;                                                                     \
        case HOOP_OP_MAX:                                                              \
            for (size_t i = 0; i < n; i++) dst[i] = COMBINE(HOOP_OP_MAX, a[i], b[i]);  \
            break;                                                                     \
        default:                                                                       \
            for (size_t i = 0; i < n; i++) dst[i] = COMBINE(HOOP_OP_SUM, a[i], b[i]);  \
            break;                                                                     \
        }                                                                              \
    }

DEF_KERNEL(k_f32, float)
DEF_KERNEL(k_f64, double)
DEF_KERNEL(k_i32, int32_t)
DEF_KERNEL(k_i64, int64_t)
DEF_KERNEL(k_u8, uint8_t)

/* Wrapping arithmetic for signed integers: sum and product in the unsigned type. */
#define DEF_WRAP(NAME, T, U)                                                \
    static void NAME(hoop_op op, T *dst, const T *a, const T *b, size_t n)  \
    {                                                                       \
        if (op == HOOP_OP_SUM || op == HOOP_OP_AVG) {                       \
            for (size_t i = 0; i < n; i++) dst[i] = (T)((U)a[i] + (U)b[i]); \
        } else if (op == HOOP_OP_PROD) {                                    \
            for (size_t i = 0; i < n; i++) dst[i] = (T)((U)a[i] * (U)b[i]); \
        } else {                                                            \
            k_##T(op, dst, a, b, n);                                        \
        }                                                                   \
    }
#define k_int32_t k_i32
#define k_int64_t k_i64
DEF_WRAP(w_i32, int32_t, uint32_t)
DEF_WRAP(w_i64, int64_t, uint64_t)

static void k_u8w(hoop_op op, uint8_t *dst, const uint8_t *a, const uint8_t *b, size_t n)
{
    if (op == HOOP_OP_PROD) {
        for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)((unsigned)a[i] * b[i]);
    } else if (op == HOOP_OP_SUM || op == HOOP_OP_AVG) {
        for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)(a[i] + b[i]);
    } else {
        k_u8(op, dst, a, b, n);
    }
}

/* Half types: widen, combine, (divide), round once (reduce_elem.h). */
static void k_half(int bf, hoop_op op, uint16_t *dst, const uint16_t *a, const uint16_t *b,
                   size_t n, int divisor)
{
    int sat = op == HOOP__OP_SUM_SAT;
    for (size_t i = 0; i < n; i++)
        dst[i] = hoop__half_combine(bf, (int)op, sat, a[i], b[i], divisor);
}

static float half_at(int bf, const uint16_t *p, size_t i)
{
    return bf ? hoop__bf16_to_f32(p[i]) : hoop__f16_to_f32(p[i]);
}

void hoop__half_to_acc(hoop_dtype dtype, hoop_op op, double *acc, const void *src, size_t count,
                       int first)
{
    int bf = dtype == HOOP_DTYPE_BF16;
    const uint16_t *h = src;
    if (first) {
        for (size_t i = 0; i < count; i++) acc[i] = half_at(bf, h, i);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        double y = half_at(bf, h, i);
        acc[i] = COMBINE(op, acc[i], y);
    }
}

void hoop__acc_to_half(hoop_dtype dtype, void *dst, const double *acc, size_t count, int divisor)
{
    uint16_t *h = dst;
    for (size_t i = 0; i < count; i++) {
        /* f64 -> f32 -> 16 bits: the first rounding is innocuous (53 >= 2 x 24 + 2), so
         * this equals the f32 quotient rounded once to the type. */
        float r = (float)(divisor > 0 ? acc[i] / divisor : acc[i]);
        h[i] = dtype == HOOP_DTYPE_BF16 ? hoop__f32_to_bf16(r) : hoop__f32_to_f16(r);
    }
}

void hoop__half_prescale(hoop_dtype dtype, void *dst, const void *src, size_t count, int divisor)
{
    int bf = dtype == HOOP_DTYPE_BF16;
    const uint16_t *s = src;
    uint16_t *d = dst;
    for (size_t i = 0; i < count; i++) {
        float r = half_at(bf, s, i) / (float)divisor;
        d[i] = bf ? hoop__f32_to_bf16(r) : hoop__f32_to_f16(r);
    }
}

void hoop__reduce(hoop_dtype dtype, hoop_op op, void *dst, const void *a, const void *b,
                  size_t count, int divisor)
{
    if (op != HOOP_OP_AVG) divisor = 0;
    switch (dtype) {
    case HOOP_DTYPE_F32:
        k_f32(op, dst, a, b, count);
        if (divisor > 0) {
            float *d = dst;
            for (size_t i = 0; i < count; i++) d[i] /= (float)divisor;
        }
        break;
    case HOOP_DTYPE_F64:
        k_f64(op, dst, a, b, count);
        if (divisor > 0) {
            double *d = dst;
            for (size_t i = 0; i < count; i++) d[i] /= (double)divisor;
        }
        break;
    case HOOP_DTYPE_F16: k_half(0, op, dst, a, b, count, divisor); break;
    case HOOP_DTYPE_BF16: k_half(1, op, dst, a, b, count, divisor); break;
    case HOOP_DTYPE_I32: w_i32(op, dst, a, b, count); break;
    case HOOP_DTYPE_I64: w_i64(op, dst, a, b, count); break;
    case HOOP_DTYPE_U8: k_u8w(op, dst, a, b, count); break;
    default: break;
    }
}
