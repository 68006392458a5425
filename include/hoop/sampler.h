/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/sampler.h -- DistributedSampler: a disjoint shard of a dataset for each rank.
 *
 * Semantics of PyTorch's torch.utils.data.DistributedSampler, with our own random
 * stream: every rank builds the same permutation of 0..dataset_size-1 from
 * (seed, epoch), pads it cyclically to a multiple of world_size (or drops the tail
 * with drop_last), and rank r takes every world_size-th index starting at r. Shards of
 * different ranks are disjoint apart from the padding, and together cover the dataset.
 */
#ifndef HOOP_SAMPLER_H
#define HOOP_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/export.h"
#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

typedef struct hoop_sampler hoop_sampler;

typedef struct hoop_sampler_config {
    size_t dataset_size; /* number of samples, >= 0 */
    int rank;            /* 0 .. world_size-1 */
    int world_size;      /* >= 1 */
    uint64_t seed;       /* same on every rank */
    int shuffle;         /* 1 = permute from (seed, epoch); 0 = identity order */
    int drop_last;       /* 1 = drop the tail instead of padding */
} hoop_sampler_config;

#define HOOP_SAMPLER_CONFIG_INIT                                                               \
    {                                                                                          \
        .dataset_size = 0, .rank = 0, .world_size = 1, .seed = 0, .shuffle = 1, .drop_last = 0 \
    }

/* Creates a sampler positioned at epoch 0. Errors: HOOP_ERR_INVALID naming the field
 * (world_size < 1, rank outside 0..world_size-1); HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_sampler_new(hoop_sampler **out, const hoop_sampler_config *cfg);

/* Frees the sampler. Accepts NULL. */
HOOP_API void hoop_sampler_free(hoop_sampler *s);

/* Rebuilds this rank's indices for epoch: the permutation differs between epochs and
 * is identical on every rank for the same (seed, epoch). O(dataset_size).
 * Errors: HOOP_ERR_INVALID (s NULL). */
HOOP_API hoop_status hoop_sampler_set_epoch(hoop_sampler *s, uint64_t epoch);

/* Number of indices this rank gets per epoch: ceil(n / world_size), or
 * floor(n / world_size) with drop_last. The same on every rank. */
HOOP_API size_t hoop_sampler_num_samples(const hoop_sampler *s);

/* This rank's indices for the current epoch, hoop_sampler_num_samples() of them, each
 * in 0..dataset_size-1. Valid until the next set_epoch or free. */
HOOP_API const size_t *hoop_sampler_indices(const hoop_sampler *s);

HOOP_EXTERN_C_END

#endif /* HOOP_SAMPLER_H */
