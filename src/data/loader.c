/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/data/loader.c -- seeded permutations and the mini-batch loader.
 *
 * hoop_data_permutation is the one shuffle of hoop: splitmix64 (Steele, Lea & Flood,
 * OOPSLA 2014) drives a Fisher-Yates shuffle (Knuth TAOCP vol. 2, 3.4.2 algorithm P),
 * each bounded draw made unbiased by Lemire's multiply-and-reject (ACM TOMACS 2019).
 * Only 64-bit integer arithmetic is used, so every platform and every rank computes the
 * same permutation from (seed, epoch); tests freeze its output from an independent
 * Python implementation. A hoop_loader owns its index list and walks it batch by batch;
 * it is not thread-safe (one loader per thread).
 */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "hoop/data.h"

struct hoop_loader {
    const hoop_dataset *ds;
    size_t batch_size;
    uint64_t seed;
    int64_t *idx; /* the list walked this epoch */
    size_t count; /* its length */
    size_t cap;   /* allocated entries of idx */
    size_t pos;   /* next position in idx */
    int custom;   /* 1: idx was set by hoop_loader_set_indices */
};

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ULL

void hoop_data_permutation(int64_t *perm, size_t n, uint64_t seed, uint64_t epoch)
{
    if (!perm) return;
    hoop__rng r = hoop__rng_seed(seed ^ (epoch * GOLDEN_GAMMA));
    for (size_t i = 0; i < n; i++) perm[i] = (int64_t)i;
    for (size_t i = n; i > 1; i--) { /* Fisher-Yates over the shared bounded draw */
        size_t j = (size_t)hoop__rng_below(&r, i);
        int64_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

hoop_status hoop_loader_new(hoop_loader **out, const hoop_dataset *ds, size_t batch_size,
                            uint64_t seed)
{
    hoop_loader *ld;
    if (out) *out = NULL;
    if (!out || !ds || batch_size == 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_loader_new: %s",
                          !out  ? "out is NULL"
                          : !ds ? "ds is NULL"
                                : "batch_size must be > 0");
    *out = NULL;
    HOOP_CHECK(hoop__calloc(&ld, 1));
    ld->ds = ds;
    ld->batch_size = batch_size;
    ld->seed = seed;
    ld->count = hoop_dataset_count(ds);
    ld->cap = ld->count ? ld->count : 1;
    if (hoop__calloc(&ld->idx, ld->cap) != HOOP_OK) {
        free(ld);
        return HOOP_ERR_NOMEM;
    }
    hoop_data_permutation(ld->idx, ld->count, seed, 0);
    *out = ld;
    return HOOP_OK;
}

void hoop_loader_free(hoop_loader *ld)
{
    if (!ld) return;
    free(ld->idx);
    free(ld);
}

hoop_status hoop_loader_start_epoch(hoop_loader *ld, uint64_t epoch)
{
    if (!ld) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_loader_start_epoch: ld is NULL");
    if (!ld->custom) {
        ld->count = hoop_dataset_count(ld->ds);
        hoop_data_permutation(ld->idx, ld->count, ld->seed, epoch);
    }
    ld->pos = 0;
    return HOOP_OK;
}

hoop_status hoop_loader_set_indices(hoop_loader *ld, const int64_t *idx, size_t count)
{
    size_t n;
    if (!ld) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_loader_set_indices: ld is NULL");
    n = hoop_dataset_count(ld->ds);
    if (!idx) {
        ld->custom = 0;
        return hoop_loader_start_epoch(ld, 0);
    }
    for (size_t i = 0; i < count; i++)
        if (idx[i] < 0 || (uint64_t)idx[i] >= n)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_loader_set_indices: index %lld (position %zu) is not in "
                              "0..%zu",
                              (long long)idx[i], i, n - 1);
    if (count > ld->cap) {
        HOOP_CHECK(hoop__realloc(&ld->idx, count));
        ld->cap = count;
    }
    memcpy(ld->idx, idx, count * sizeof *idx);
    ld->count = count;
    ld->pos = 0;
    ld->custom = 1;
    return HOOP_OK;
}

size_t hoop_loader_num_batches(const hoop_loader *ld)
{
    if (!ld) return 0;
    return ld->count / ld->batch_size + (ld->count % ld->batch_size != 0); /* no overflow */
}

hoop_status hoop_loader_next(hoop_loader *ld, float *x, int32_t *y, size_t *count)
{
    size_t n;
    if (!ld || !x || !count)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_loader_next: %s is NULL",
                          !ld  ? "ld"
                          : !x ? "x"
                               : "count");
    n = ld->count - ld->pos;
    if (n > ld->batch_size) n = ld->batch_size;
    *count = 0;
    HOOP_CHECK(hoop_dataset_gather(ld->ds, ld->idx + ld->pos, n, x, y));
    ld->pos += n;
    *count = n;
    return HOOP_OK;
}
