/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tools/train_data.c -- hoop-train's data: --data loaded (rank 0 first, then the others),
 * the ranks' agreement on it, this rank's shard of each epoch, and the input tensors the
 * batches are gathered into.
 *
 * Rank 0 loads first while the others wait for its verdict, so a missing or corrupt file
 * is named once, by rank 0; then the others load their own copy (no shared filesystem is
 * needed) and every rank's sample counts and checksums are compared with rank 0's, so
 * ranks given other data stop at start with a message naming the rank and both datasets
 * instead of running different numbers of steps into a collective that fails later.
 * Batches are gathered by the loader (hoop/data.h) from this rank's DistributedSampler
 * shard (hoop/sampler.h). Not thread-safe: hoop-train's main thread only.
 */
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "core/check.h"
#include "train.h"

static hoop_status load_data(trainer *t)
{
    hoop_dataset_config cfg = HOOP_DATASET_CONFIG_INIT;
    if (t->o->standardize) {
        cfg.mean = HOOP_FASHION_MNIST_MEAN;
        cfg.std = HOOP_FASHION_MNIST_STD;
    }
    HOOP_CHECK(hoop_dataset_load_mnist(&t->train, t->o->data, "train", &cfg));
    HOOP_CHECK(hoop_dataset_load_mnist(&t->test, t->o->data, "t10k", &cfg));
    t->sample = hoop_dataset_rows(t->train) * hoop_dataset_cols(t->train);
    if (hoop_dataset_rows(t->test) != hoop_dataset_rows(t->train) ||
        hoop_dataset_cols(t->test) != hoop_dataset_cols(t->train))
        return HOOP_ERROR(
            HOOP_ERR_INVALID, "%s: test images are %lldx%lld, train images %lldx%lld", t->o->data,
            (long long)hoop_dataset_rows(t->test), (long long)hoop_dataset_cols(t->test),
            (long long)hoop_dataset_rows(t->train), (long long)hoop_dataset_cols(t->train));
    return HOOP_OK;
}

/* zlib's crc32 of ds's pixels, then its labels (crc32_z: lengths beyond 4 GiB). */
static uint32_t dataset_crc(const hoop_dataset *ds)
{
    const size_t n = hoop_dataset_count(ds);
    const size_t pixels = n * (size_t)hoop_dataset_rows(ds) * (size_t)hoop_dataset_cols(ds);
    uLong crc = crc32_z(0L, hoop_dataset_pixels(ds), pixels);
    return (uint32_t)crc32_z(crc, hoop_dataset_labels(ds), n);
}

/* What this rank loaded, for the ranks' comparison: counts, image size, checksums (10 to
 * 20 ms for Fashion-MNIST's 55 MB on this build machine), and --data as given. */
static void data_id(const trainer *t, train_data_id *id)
{
    memset(id, 0, sizeof(*id));
    id->count[0] = (int64_t)hoop_dataset_count(t->train);
    id->count[1] = (int64_t)hoop_dataset_count(t->test);
    id->rows = hoop_dataset_rows(t->train);
    id->cols = hoop_dataset_cols(t->train);
    id->crc[0] = dataset_crc(t->train);
    id->crc[1] = dataset_crc(t->test);
    snprintf(id->path, sizeof(id->path), "%s", t->o->data);
}

/* Rank 0 loads the data (when root_st, its output checks, passed) while the others wait
 * for its verdict; then they load theirs (a failure on rank 0 stops everyone with rank
 * 0's message), and all compare what they loaded with rank 0's, a rank that could not
 * load its copy included: rank 0 names it, with its loader's message (before, it said
 * only that the rank closed its links, which is all a node without hooprun sees). */
hoop_status train_data_load(trainer *t, hoop_status root_st)
{
    hoop_status st = t->dist.rank == 0 && root_st == HOOP_OK ? load_data(t) : root_st;
    HOOP_CHECK(train_dist_root_status(&t->dist, st));
    if (t->dist.rank != 0) st = load_data(t);
    if (t->dist.comm) {
        train_data_id id;
        if (st == HOOP_OK) {
            data_id(t, &id);
        } else {
            memset(&id, 0, sizeof(id));
            id.code = (int32_t)st;
            snprintf(id.path, sizeof(id.path), "%s", t->o->data);
            snprintf(id.why, sizeof(id.why), "%s", hoop_last_error());
        }
        HOOP_CHECK(train_dist_same_data(&t->dist, &id));
    }
    HOOP_CHECK(st);
    size_t n = hoop_dataset_count(t->train);
    t->ntrain =
        t->o->train_limit > 0 && (size_t)t->o->train_limit < n ? (size_t)t->o->train_limit : n;
    return HOOP_OK;
}

/* Points the loader at this rank's shard of epoch, past its first skip batches (the
 * ones a resumed run has trained already); t->nbatches gets the whole shard's count. */
hoop_status train_data_shard(trainer *t, int64_t epoch, int64_t skip)
{
    const int64_t *idx;
    size_t n, bs = (size_t)t->o->batch_size;
    HOOP_CHECK(train_dist_shard(&t->dist, (uint64_t)epoch, &idx, &n));
    size_t from = (size_t)skip * bs < n ? (size_t)skip * bs : n;
    t->nbatches = (n + bs - 1) / bs;
    HOOP_CHECK(hoop_loader_set_indices(t->loader, idx + from, n - from));
    return hoop_loader_start_epoch(t->loader, (uint64_t)epoch);
}

// ----- input tensors ----------------------------------------------------------------------

/* Makes a tape tensor for n samples, shaped for the model: (n, rows*cols) for the MLP,
 * (n, 1, rows, cols) for the CNN. */
static hoop_status new_input(trainer *t, size_t n, hoop_tensor **x)
{
    int64_t rows = hoop_dataset_rows(t->train), cols = hoop_dataset_cols(t->train);
    int64_t mlp_shape[2] = {(int64_t)n, t->sample};
    int64_t cnn_shape[4] = {(int64_t)n, 1, rows, cols};
    int mlp = t->o->model == TRAIN_MODEL_MLP;
    return hoop_tape_tensor_new(t->tape, mlp ? 2 : 4, mlp ? mlp_shape : cnn_shape, x);
}

/* cuda: the long-lived device tensor for batches of n samples, shaped as new_input's. It
 * is made at the first batch of that size: a run needs at most DEVICE_INPUTS sizes (the
 * batch, the shard's short last batch, the evaluation batch and its short last one), so
 * no step allocates. */
hoop_status train_data_device_input(trainer *t, size_t n, hoop_tensor **x)
{
    int64_t rows = hoop_dataset_rows(t->train), cols = hoop_dataset_cols(t->train);
    int64_t mlp_shape[2] = {(int64_t)n, t->sample};
    int64_t cnn_shape[4] = {(int64_t)n, 1, rows, cols};
    int mlp = t->o->model == TRAIN_MODEL_MLP, i;
    for (i = 0; i < DEVICE_INPUTS && t->dev_x[i]; i++)
        if ((size_t)hoop_tensor_dim(t->dev_x[i], 0) == n) {
            *x = t->dev_x[i];
            return HOOP_OK;
        }
    if (i == DEVICE_INPUTS)
        return HOOP_ERROR(HOOP_ERR_INTERNAL, "a batch of %zu samples: all %d input sizes taken", n,
                          DEVICE_INPUTS);
    HOOP_CHECK(
        hoop_tensor_new(&t->dev_x[i], mlp ? 2 : 4, mlp ? mlp_shape : cnn_shape, t->device, 0));
    *x = t->dev_x[i];
    return HOOP_OK;
}

/* Makes the input tensor holding the first n samples gathered into t->x: a tape tensor on
 * the cpu, the device tensor of that size on cuda. */
hoop_status train_data_input(trainer *t, size_t n, hoop_tensor **x)
{
    if (t->device == HOOP_DEVICE_CPU)
        HOOP_CHECK(new_input(t, n, x));
    else
        HOOP_CHECK(train_data_device_input(t, n, x));
    return hoop_tensor_copy_from(*x, t->x, n * (size_t)t->sample);
}

/* The loader's next batch on the cpu (*n == 0: epoch over), gathered straight into a tape
 * tensor; a short last batch is moved into a tensor of its own size. */
hoop_status train_data_next(trainer *t, hoop_tensor **x, size_t *n)
{
    size_t bs = (size_t)t->o->batch_size;
    HOOP_CHECK(new_input(t, bs, x));
    HOOP_CHECK(hoop_loader_next(t->loader, hoop_tensor_data(*x), t->y, n));
    if (*n == 0 || *n == bs) return HOOP_OK;
    memcpy(t->x, hoop_tensor_data(*x), *n * (size_t)t->sample * sizeof(float));
    return train_data_input(t, *n, x);
}
