/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/rng.h -- small portable random numbers (internal).
 *
 * splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
 * OOPSLA 2014; constants as published by Vigna) gives the same stream on every
 * platform and compiler, so a seed reproduces a shuffle anywhere. Not cryptographic.
 */
#ifndef HOOP_CORE_RNG_H
#define HOOP_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct hoop__rng {
    uint64_t state;
} hoop__rng;

static inline hoop__rng hoop__rng_seed(uint64_t seed)
{
    hoop__rng r = {.state = seed};
    return r;
}

/* Next 64 random bits. */
static inline uint64_t hoop__rng_next(hoop__rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, n), n > 0, without modulo bias (Lemire's multiply-shift with
 * rejection, "Fast random integer generation in an interval", TOMACS 2019). */
static inline uint64_t hoop__rng_below(hoop__rng *r, uint64_t n)
{
    for (;;) {
        unsigned __int128 m = (unsigned __int128)hoop__rng_next(r) * n;
        uint64_t lo = (uint64_t)m;
        if (lo >= n || lo >= (uint64_t)(-n) % n) return (uint64_t)(m >> 64);
    }
}

/* Uniform float in [0, 1) with 24 random bits. */
static inline float hoop__rng_float(hoop__rng *r)
{
    return (float)(hoop__rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Fisher-Yates shuffle of idx[0..n) (Knuth, TAOCP vol. 2, Algorithm P). */
static inline void hoop__rng_shuffle(hoop__rng *r, size_t *idx, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)hoop__rng_below(r, i);
        size_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

#endif /* HOOP_CORE_RNG_H */
