/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/ddp/sampler.c -- DistributedSampler (see include/hoop/sampler.h).
 *
 * Owns the full permutation (dataset_size entries) and this rank's shard. Not
 * thread-safe: one sampler per rank, used by its training loop.
 */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "hoop/sampler.h"

struct hoop_sampler {
    hoop_sampler_config cfg;
    size_t num_samples; /* this rank's */
    size_t *perm;       /* dataset_size entries */
    size_t *mine;       /* num_samples entries (at least one allocated) */
};

static hoop_status check_flag(const char *name, int v)
{
    if (v == 0 || v == 1) return HOOP_OK;
    return HOOP_ERROR(HOOP_ERR_INVALID, "sampler %s=%d must be 0 or 1", name, v);
}

static hoop_status check_config(const hoop_sampler_config *cfg)
{
    if (cfg->world_size < 1)
        return HOOP_ERROR(HOOP_ERR_INVALID, "sampler world_size=%d must be >= 1", cfg->world_size);
    if (cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return HOOP_ERROR(HOOP_ERR_INVALID, "sampler rank=%d is outside 0..%d", cfg->rank,
                          cfg->world_size - 1);
    if ((uint64_t)cfg->dataset_size > HOOP_SAMPLER_MAX_DATASET)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "sampler dataset_size=%zu is above the limit of 2^40 samples "
                          "(a negative or miscomputed size?)",
                          cfg->dataset_size);
    HOOP_CHECK(check_flag("shuffle", cfg->shuffle));
    HOOP_CHECK(check_flag("drop_last", cfg->drop_last));
    HOOP_CHECK(check_flag("exact_split", cfg->exact_split));
    if (cfg->drop_last && cfg->exact_split)
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "sampler drop_last=1 and exact_split=1 exclude each other (exact_split "
                          "keeps every sample)");
    return HOOP_OK;
}

/* This rank's share of n positions dealt round-robin over ws ranks. */
static size_t shard_size(const hoop_sampler_config *cfg)
{
    size_t n = cfg->dataset_size, ws = (size_t)cfg->world_size, r = (size_t)cfg->rank;
    if (cfg->drop_last) return n / ws;
    if (cfg->exact_split) return n > r ? (n - r - 1) / ws + 1 : 0;
    return n / ws + (n % ws != 0); /* padded; written so that it cannot overflow */
}

HOOP_API hoop_status hoop_sampler_new(hoop_sampler **out, const hoop_sampler_config *cfg)
{
    if (!out) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_sampler_new: out is NULL");
    *out = NULL;
    if (!cfg) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_sampler_new: cfg is NULL");
    HOOP_CHECK(check_config(cfg));
    hoop_sampler *s;
    HOOP_CHECK(hoop__calloc(&s, 1));
    s->cfg = *cfg;
    s->num_samples = shard_size(cfg);
    hoop_status st = hoop__calloc(&s->perm, cfg->dataset_size);
    if (st == HOOP_OK) st = hoop__calloc(&s->mine, s->num_samples);
    if (st == HOOP_OK) st = hoop_sampler_set_epoch(s, 0);
    if (st != HOOP_OK) {
        hoop_sampler_free(s);
        return st;
    }
    *out = s;
    return HOOP_OK;
}

HOOP_API void hoop_sampler_free(hoop_sampler *s)
{
    if (s == NULL) return;
    free(s->perm);
    free(s->mine);
    free(s);
}

HOOP_API hoop_status hoop_sampler_set_epoch(hoop_sampler *s, uint64_t epoch)
{
    if (s == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_sampler_set_epoch: s is NULL");
    size_t n = s->cfg.dataset_size, ws = (size_t)s->cfg.world_size;
    for (size_t i = 0; i < n; i++) s->perm[i] = i;
    if (s->cfg.shuffle) {
        /* One stream per (seed, epoch): mix the epoch in through a splitmix step so
         * that consecutive epochs give unrelated permutations. */
        hoop__rng mix = hoop__rng_seed(epoch);
        hoop__rng r = hoop__rng_seed(s->cfg.seed ^ hoop__rng_next(&mix));
        hoop__rng_shuffle(&r, s->perm, n);
    }
    /* Position j of the padded sequence is perm[j % n]: cyclic padding, which is what
     * PyTorch's repeat-then-truncate produces, also when world_size > n. Without
     * padding (drop_last, exact_split) every j used is below n already. */
    for (size_t k = 0; k < s->num_samples; k++) {
        size_t j = k * ws + (size_t)s->cfg.rank;
        s->mine[k] = s->perm[j % n];
    }
    return HOOP_OK;
}

HOOP_API size_t hoop_sampler_num_samples(const hoop_sampler *s)
{
    return s ? s->num_samples : 0;
}

HOOP_API const size_t *hoop_sampler_indices(const hoop_sampler *s)
{
    return s ? s->mine : NULL;
}
