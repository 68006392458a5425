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
    size_t num_samples; /* per rank */
    size_t *perm;       /* dataset_size entries */
    size_t *mine;       /* num_samples entries */
};

HOOP_API hoop_status hoop_sampler_new(hoop_sampler **out, const hoop_sampler_config *cfg)
{
    if (out == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_sampler_new: out is NULL");
    *out = NULL;
    if (cfg == NULL) return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_sampler_new: cfg is NULL");
    if (cfg->world_size < 1)
        return HOOP_ERROR(HOOP_ERR_INVALID, "sampler world_size=%d must be >= 1", cfg->world_size);
    if (cfg->rank < 0 || cfg->rank >= cfg->world_size)
        return HOOP_ERROR(HOOP_ERR_INVALID, "sampler rank=%d is outside 0..%d", cfg->rank,
                          cfg->world_size - 1);
    hoop_sampler *s;
    HOOP_CHECK(hoop__calloc(&s, 1));
    s->cfg = *cfg;
    size_t n = cfg->dataset_size, ws = (size_t)cfg->world_size;
    s->num_samples = cfg->drop_last ? n / ws : (n + ws - 1) / ws;
    hoop_status st = hoop__calloc(&s->perm, n);
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
     * PyTorch's repeat-then-truncate produces, also when world_size > n. */
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
