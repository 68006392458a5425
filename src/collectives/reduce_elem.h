/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/collectives/reduce_elem.h -- one element of a reduction: the combination rule and
 * the 16-bit float conversions, written once for the host (reduce.c) and the device
 * (src/cuda/coll_reduce.cu), so both compute the same bits.
 *
 * Conversions: IEEE binary16 and bfloat16 to and from f32, rounding to nearest even,
 * NaN kept quiet (IEEE 754-2019, 4.3.1 and 6.2). Plain C99 (memcpy bit casts, rintf),
 * which nvcc also compiles for the device.
 *
 * Thread-safe (pure functions).
 */
#ifndef HOOP_COLLECTIVES_REDUCE_ELEM_H
#define HOOP_COLLECTIVES_REDUCE_ELEM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "hoop/collectives.h"

#ifdef __CUDACC__
#define HOOP_HD __host__ __device__
#else
#define HOOP_HD
#endif

/* MIN and MAX propagate NaN: when either operand is NaN the result is NaN (y != y
 * holds only for a NaN y; a NaN x loses every comparison and is kept), as torch.minimum
 * / torch.maximum and IEEE 754-2019 minimum / maximum do, so the result never depends
 * on which rank or position holds the NaN. (For integers y != y is never true.) op is a
 * hoop_op; every other value (SUM, AVG, the internal SUM_SAT) adds. */
#define HOOP__COMBINE(op, x, y)                                    \
    ((op) == HOOP_OP_PROD  ? (x) * (y)                             \
     : (op) == HOOP_OP_MIN ? ((y) < (x) || (y) != (y) ? (y) : (x)) \
     : (op) == HOOP_OP_MAX ? ((y) > (x) || (y) != (y) ? (y) : (x)) \
                           : (x) + (y))

static inline HOOP_HD float hoop__f16_to_f32_inl(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13); /* inf / nan */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while ((man & 0x400) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline HOOP_HD uint16_t hoop__f32_to_f16_inl(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan (keep a quiet nan) */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (ax < 0x38800000u) { /* result is subnormal or zero: scale and round */
        float a;
        memcpy(&a, &ax, 4);
        /* a * 2^24 is the subnormal mantissa; rintf rounds to nearest even. */
        return (uint16_t)(sign | (uint32_t)rintf(a * 16777216.0f));
    }
    uint32_t mant = ax + 0xc8000fffu + ((ax >> 13) & 1); /* rebias 127->15, round half even */
    return (uint16_t)(sign | (mant >> 13));
}

static inline HOOP_HD float hoop__bf16_to_f32_inl(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline HOOP_HD uint16_t hoop__f32_to_bf16_inl(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* One element of a 16-bit reduction (bf = 1: bfloat16, 0: binary16): widen, combine,
 * divide by divisor when > 0 (an average's last step), round once. sat (the internal
 * SUM_SAT op: the pre-divided terms of an average) saturates a combination of two
 * finite values at the largest finite value instead of rounding it to inf: every
 * partial sum of x_r / n is at most max(|x|) in exact arithmetic, so only the terms'
 * rounding can push it past the type's range. */
static inline HOOP_HD uint16_t hoop__half_combine(int bf, int op, int sat, uint16_t a, uint16_t b,
                                                  int divisor)
{
    const float top = bf ? 0x1.fep127f : 65504.0f; /* largest finite bf16 / f16 */
    float x = bf ? hoop__bf16_to_f32_inl(a) : hoop__f16_to_f32_inl(a);
    float y = bf ? hoop__bf16_to_f32_inl(b) : hoop__f16_to_f32_inl(b);
    float r = HOOP__COMBINE(op, x, y);
    if (divisor > 0) r /= (float)divisor;
    if (sat && isfinite(x) && isfinite(y) && !(fabsf(r) <= top)) r = r > 0 ? top : -top;
    return bf ? hoop__f32_to_bf16_inl(r) : hoop__f32_to_f16_inl(r);
}

#endif /* HOOP_COLLECTIVES_REDUCE_ELEM_H */
