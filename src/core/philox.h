/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/core/philox.h -- Philox4x32-10, the counter-based random generator of Salmon, Moraes,
 * Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC 2011): ten rounds of
 * two 32 x 32 -> 64-bit multiplications over a 128-bit counter, keyed by 64 bits. Any
 * element of the stream is computed from (key, index) alone, so a host loop and a CUDA
 * kernel draw the same numbers in any order; dropout uses it this way (kern.h).
 *
 * Header-only, for C and for CUDA device code (HOOP__HD marks the functions __host__
 * __device__ under nvcc). tests/check_philox.c checks Random123's known-answer vectors.
 * Thread-safety: pure functions.
 */
#ifndef HOOP_CORE_PHILOX_H
#define HOOP_CORE_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define HOOP__HD __host__ __device__
#else
#define HOOP__HD
#endif

#define HOOP__PHILOX_M0 0xD2511F53u /* the round multipliers */
#define HOOP__PHILOX_M1 0xCD9E8D57u
#define HOOP__PHILOX_W0 0x9E3779B9u /* the key's increments between rounds (Weyl) */
#define HOOP__PHILOX_W1 0xBB67AE85u

/* out = Philox4x32-10(ctr, key). */
static inline HOOP__HD void hoop__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                                uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)HOOP__PHILOX_M0 * c0, p1 = (uint64_t)HOOP__PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += HOOP__PHILOX_W0;
        k1 += HOOP__PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Element e of the uniform stream keyed by seed, in [0, 1) with 24 random bits: word e % 4
 * of the block whose counter is e / 4 (low, high, 0, 0). */
static inline HOOP__HD float hoop__philox_uniform(uint64_t seed, uint64_t e)
{
    uint64_t b = e >> 2;
    const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0u, 0u};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    hoop__philox4x32_10(ctr, key, out);
    return (float)(out[e & 3] >> 8) * (1.0f / 16777216.0f);
}

#endif /* HOOP_CORE_PHILOX_H */
