/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hoop/data.h -- image-classification datasets in the IDX format (MNIST, Fashion-MNIST)
 * and the mini-batch loader that feeds training.
 *
 * A hoop_dataset holds N images of rows x cols 8-bit pixels and N labels, read from a
 * pair of IDX files (LeCun's MNIST format), gzip-compressed or plain. Everything in the
 * files is validated: magic number, dtype, dimensions, and that each file holds exactly
 * its data (a truncated file or trailing bytes are errors), that both files count the
 * same samples, and that every label lies in 0..num_classes-1. Pixels stay stored as
 * bytes (N*rows*cols bytes); batches are converted to float32 on the way out, as
 * (p / 255 - mean) / std, so [0,1] by default.
 *
 * A hoop_loader cuts an index list into mini-batches. By default the list is a
 * permutation of all samples drawn from (seed, epoch) with hoop_data_permutation, a
 * portable generator (the same on every machine and rank); a distributed sampler can
 * hand it its own shard instead with hoop_loader_set_indices.
 *
 * Example (one epoch over Fashion-MNIST):
 *
 *     hoop_dataset *train;
 *     hoop_dataset_config cfg = HOOP_DATASET_CONFIG_INIT;
 *     hoop_status st = hoop_dataset_load_mnist(&train, "/usr/share/datasets/fashion-mnist",
 *                                              "train", &cfg);
 *     hoop_loader *ld;
 *     st = hoop_loader_new(&ld, train, 128, 42);
 *     st = hoop_loader_start_epoch(ld, 0);
 *     float x[128 * 784];
 *     int32_t y[128];
 *     size_t n;
 *     while (hoop_loader_next(ld, x, y, &n) == HOOP_OK && n > 0) { ... train on n samples ... }
 *     hoop_loader_free(ld);
 *     hoop_dataset_free(train);
 */
#ifndef HOOP_DATA_H
#define HOOP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "hoop/export.h"
#include "hoop/status.h"

HOOP_EXTERN_C_BEGIN

typedef struct hoop_dataset hoop_dataset;
typedef struct hoop_loader hoop_loader;

/* Mean and standard deviation of Fashion-MNIST's 60,000 training images, pixels in [0,1]
 * (computed in float64 over all 47,040,000 pixels). Use them for mean/std normalisation. */
#define HOOP_FASHION_MNIST_MEAN 0.28604060f
#define HOOP_FASHION_MNIST_STD 0.35302424f

/* How pixels become floats: x = (p / 255 - mean) / std; std must be > 0.
 * num_classes bounds the labels (labels must be 0..num_classes-1). */
typedef struct hoop_dataset_config {
    float mean;      /* subtracted after scaling to [0,1]; default 0 */
    float std;       /* divisor after subtracting mean; default 1 */
    int num_classes; /* default 10 */
} hoop_dataset_config;

#define HOOP_DATASET_CONFIG_INIT                     \
    {                                                \
        .mean = 0.0f, .std = 1.0f, .num_classes = 10 \
    }

/* Reads an image file (IDX magic 0x00000803: unsigned bytes, 3 dimensions N x rows x cols)
 * and a label file (magic 0x00000801: unsigned bytes, 1 dimension N), each gzip or plain
 * (zlib detects which), into a new dataset. cfg may be NULL for the defaults.
 * Errors: HOOP_ERR_INVALID with a message naming the file and the fault (bad magic,
 * zero or oversized dimension, truncated data, trailing bytes, image/label count
 * mismatch, label out of range, bad cfg, a file that does not exist or that this user
 * may not read); HOOP_ERR_SYSTEM when an existing file cannot be opened or read for
 * another reason; HOOP_ERR_NOMEM. On error *out is NULL.
 * Thread-safe (no shared state). Format: Y. LeCun et al., "THE MNIST DATABASE of handwritten
 * digits", file formats. */
HOOP_API hoop_status hoop_dataset_load_idx(hoop_dataset **out, const char *images_path,
                                           const char *labels_path, const hoop_dataset_config *cfg);

/* Loads split "train" or "t10k" from dir using the MNIST file names
 * <split>-images-idx3-ubyte and <split>-labels-idx1-ubyte, taking the ".gz" file when it
 * exists and the plain one otherwise. Errors: as hoop_dataset_load_idx, plus
 * HOOP_ERR_INVALID when split is unknown, dir exists but is not a directory, or neither
 * file exists (naming the path tried). */
HOOP_API hoop_status hoop_dataset_load_mnist(hoop_dataset **out, const char *dir, const char *split,
                                             const hoop_dataset_config *cfg);

/* Frees the dataset; NULL is allowed. Loaders built on it must be freed first. */
HOOP_API void hoop_dataset_free(hoop_dataset *ds);

/* Number of samples N. The accessors below never fail and are thread-safe: a dataset
 * is read-only once loaded. */
HOOP_API size_t hoop_dataset_count(const hoop_dataset *ds);
/* Image height and width in pixels. */
HOOP_API int64_t hoop_dataset_rows(const hoop_dataset *ds);
HOOP_API int64_t hoop_dataset_cols(const hoop_dataset *ds);
/* Number of classes (cfg->num_classes). */
HOOP_API int hoop_dataset_num_classes(const hoop_dataset *ds);
/* Raw pixels, N x rows x cols bytes, row-major, as stored in the file. */
HOOP_API const uint8_t *hoop_dataset_pixels(const hoop_dataset *ds);
/* Raw labels, N bytes, each < num_classes. */
HOOP_API const uint8_t *hoop_dataset_labels(const hoop_dataset *ds);

/* Mean and standard deviation (population) of all pixels scaled to [0,1], summed in
 * float64, e.g. to derive normalisation constants for a new dataset. Never fails. */
HOOP_API void hoop_dataset_pixel_stats(const hoop_dataset *ds, double *mean, double *std);

/* Copies the samples idx[0..count-1] into x (count x rows*cols float32, row-major,
 * normalised as the config says) and y (count int32 labels); y may be NULL.
 * Errors: HOOP_ERR_INVALID naming the first index >= N (x/y then partly written).
 * Thread-safe for distinct x/y buffers. */
HOOP_API hoop_status hoop_dataset_gather(const hoop_dataset *ds, const int64_t *idx, size_t count,
                                         float *x, int32_t *y);

/* Writes into perm[0..n-1] a permutation of 0..n-1 that depends only on (seed, epoch):
 * the Fisher-Yates shuffle (Knuth, TAOCP vol. 2, algorithm 3.4.2 P) driven by
 * splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
 * OOPSLA 2014) seeded with seed ^ (epoch * 0x9E3779B97F4A7C15), with a bounded integer
 * by Lemire's multiply-shift and rejection ("Fast random integer generation in an
 * interval", 2019), so the same on every platform. Never fails. Thread-safe. */
HOOP_API void hoop_data_permutation(int64_t *perm, size_t n, uint64_t seed, uint64_t epoch);

/* Creates a loader that cuts ds into mini-batches of batch_size (> 0) samples; the last
 * batch of an epoch may be smaller. Epochs are shuffled from seed (see
 * hoop_loader_start_epoch). Errors: HOOP_ERR_INVALID (NULL ds, batch_size 0),
 * HOOP_ERR_NOMEM. The loader is not thread-safe; use one per thread. */
HOOP_API hoop_status hoop_loader_new(hoop_loader **out, const hoop_dataset *ds, size_t batch_size,
                                     uint64_t seed);

/* Frees the loader; NULL is allowed. */
HOOP_API void hoop_loader_free(hoop_loader *ld);

/* Starts an epoch over hoop_data_permutation(N, seed, epoch), unless indices were set
 * with hoop_loader_set_indices, in which case it rewinds to the first of those.
 * Never fails for a valid loader (returns HOOP_ERR_INVALID for NULL). */
HOOP_API hoop_status hoop_loader_start_epoch(hoop_loader *ld, uint64_t epoch);

/* Replaces the index list the loader walks (e.g. a rank's shard from a distributed
 * sampler), copying idx[0..count-1], and rewinds. Passing idx == NULL returns to the
 * shuffled whole dataset at the next hoop_loader_start_epoch. Errors: HOOP_ERR_INVALID
 * naming an index >= N; HOOP_ERR_NOMEM. */
HOOP_API hoop_status hoop_loader_set_indices(hoop_loader *ld, const int64_t *idx, size_t count);

/* Number of batches per epoch: ceil(list length / batch_size). */
HOOP_API size_t hoop_loader_num_batches(const hoop_loader *ld);

/* Writes the next batch into x (at least batch_size x rows*cols floats) and y (at least
 * batch_size int32; may be NULL) and its size into *count; *count == 0 means the epoch
 * is over. Errors: HOOP_ERR_INVALID for NULL arguments. */
HOOP_API hoop_status hoop_loader_next(hoop_loader *ld, float *x, int32_t *y, size_t *count);

HOOP_EXTERN_C_END

#endif /* HOOP_DATA_H */
