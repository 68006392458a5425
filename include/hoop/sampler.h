/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/sampler.h -- DistributedSampler: a disjoint shard of a dataset for each rank.
 *
 * Semantics of PyTorch's torch.utils.data.DistributedSampler, with our own random
 * stream: every rank builds the same permutation of 0..dataset_size-1 from
 * (seed, epoch) and rank r takes every world_size-th position starting at r. What
 * happens to the tail when world_size does not divide dataset_size is the mode:
 *
 *   - padding (default): the permutation is extended cyclically to a multiple of
 *     world_size, so every rank gets ceil(n / world_size) indices and a few samples
 *     are seen twice per epoch (as PyTorch does);
 *   - drop_last: the tail is dropped, every rank gets floor(n / world_size);
 *   - exact_split (for evaluation): neither; every sample is in exactly one shard, and
 *     ranks 0 .. (n % world_size) - 1 get one index more than the others. Sums of
 *     per-sample metrics over the shards are then exactly the sums over the dataset,
 *     whatever world_size is. Ranks hold different counts, so a training loop over such
 *     shards needs hoop_ddp_join (hoop/ddp.h) when their batch counts can differ.
 *
 * Shards of different ranks are disjoint apart from the padding, and together cover the
 * dataset (its first floor(n / world_size) * world_size positions with drop_last).
 * Thread-safety: a sampler is used by one thread; distinct samplers are independent.
 */
#ifndef HOOP_SAMPLER_H
#define HOOP_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/export.h"
#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

typedef struct hoop_sampler hoop_sampler;

/* Largest dataset_size accepted: 2^40 samples (the permutation alone would take 8 TiB).
 * Anything larger is a negative number or a miscomputed size, refused as such. */
#define HOOP_SAMPLER_MAX_DATASET ((uint64_t)1 << 40)

typedef struct hoop_sampler_config {
    size_t dataset_size; /* number of samples, 0 .. HOOP_SAMPLER_MAX_DATASET */
    int rank;            /* 0 .. world_size-1 */
    int world_size;      /* >= 1 */
    uint64_t seed;       /* same on every rank */
    int shuffle;         /* 1 = permute from (seed, epoch); 0 = identity order */
    int drop_last;       /* 1 = drop the tail instead of padding */
    int exact_split;     /* 1 = every sample exactly once, no padding, no drop (evaluation);
                            excludes drop_last */
} hoop_sampler_config;

#define HOOP_SAMPLER_CONFIG_INIT                                                                \
    {                                                                                           \
        .dataset_size = 0, .rank = 0, .world_size = 1, .seed = 0, .shuffle = 1, .drop_last = 0, \
        .exact_split = 0                                                                        \
    }

/* Creates a sampler positioned at epoch 0. *out is NULL on failure.
 * Errors: HOOP_ERR_INVALID naming the argument or field (out or cfg NULL, world_size < 1,
 * rank outside 0..world_size-1, dataset_size above HOOP_SAMPLER_MAX_DATASET, shuffle,
 * drop_last or exact_split other than 0 or 1, drop_last together with exact_split);
 * HOOP_ERR_NOMEM (8 bytes per sample and 8 per index of the shard). */
HOOP_API hoop_status hoop_sampler_new(hoop_sampler **out, const hoop_sampler_config *cfg);

/* Frees the sampler. Accepts NULL. */
HOOP_API void hoop_sampler_free(hoop_sampler *s);

/* Rebuilds this rank's indices for epoch (any value): the permutation differs between
 * epochs and is identical on every rank for the same (seed, epoch). O(dataset_size).
 * Errors: HOOP_ERR_INVALID when s is NULL. */
HOOP_API hoop_status hoop_sampler_set_epoch(hoop_sampler *s, uint64_t epoch);

/* Number of indices this rank gets per epoch: ceil(n / world_size) with padding,
 * floor(n / world_size) with drop_last (the same on every rank), and with exact_split
 * floor(n / world_size) plus one on ranks below n % world_size. 0 when s is NULL. */
HOOP_API size_t hoop_sampler_num_samples(const hoop_sampler *s);

/* This rank's indices for the current epoch, hoop_sampler_num_samples() of them, each
 * in 0..dataset_size-1, in the order the rank should visit them. Valid until the next
 * set_epoch or free. NULL when s is NULL; never NULL otherwise, even for 0 indices. */
HOOP_API const size_t *hoop_sampler_indices(const hoop_sampler *s);

HOOP_EXTERN_C_END

#endif /* HOOP_SAMPLER_H */
