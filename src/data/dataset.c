/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * src/data/dataset.c -- hoop_dataset: an image/label pair of IDX files held in memory.
 *
 * Owns the raw pixel bytes (N x rows x cols) and labels (N); batches are converted to
 * float on the way out, which keeps the dataset 4x smaller than float storage would be
 * and costs a vectorised loop per sample. Read-only after load, hence thread-safe for
 * any number of readers.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "data/idx.h"
#include "hoop/data.h"

/* The conversion loop must vectorise: GCC does so for this loop only from -O3 (its -O2
 * cost model is "very cheap"); clang vectorises at -O2 already. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif

struct hoop_dataset {
    size_t count;
    int64_t rows, cols;
    int num_classes;
    uint8_t *pixels; /* count x rows x cols */
    uint8_t *labels; /* count */
    float mean, std; /* x = (p / 255 - mean) / std */
    float lut[256];  /* that x for every byte value p, computed once */
};

static hoop_status dataset_check_config(const hoop_dataset_config *cfg)
{
    if (!(cfg->std > 0.0f) || !isfinite(cfg->std) || !isfinite(cfg->mean))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "dataset config: std must be finite and > 0 and mean finite "
                          "(got mean=%g std=%g)",
                          (double)cfg->mean, (double)cfg->std);
    if (cfg->num_classes < 1 || cfg->num_classes > 256)
        return HOOP_ERROR(HOOP_ERR_INVALID, "dataset config: num_classes=%d is not in 1..256",
                          cfg->num_classes);
    return HOOP_OK;
}

/* Cross-checks the two files: same count, labels in range. */
static hoop_status dataset_check_pair(const hoop__idx *img, const hoop__idx *lab,
                                      const char *images_path, const char *labels_path,
                                      int num_classes)
{
    if (img->dims[0] != lab->dims[0])
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s holds %lld images but %s holds %lld labels",
                          images_path, (long long)img->dims[0], labels_path,
                          (long long)lab->dims[0]);
    for (size_t i = 0; i < lab->bytes; i++)
        if (lab->data[i] >= num_classes)
            return HOOP_ERROR(HOOP_ERR_INVALID, "%s: label %u of sample %zu is not in 0..%d",
                              labels_path, lab->data[i], i, num_classes - 1);
    return HOOP_OK;
}

/* Takes ownership of the two files' data. */
static hoop_status dataset_build(hoop_dataset **out, hoop__idx *img, hoop__idx *lab,
                                 const hoop_dataset_config *cfg)
{
    hoop_dataset *ds;
    HOOP_CHECK(hoop__calloc(&ds, 1));
    ds->count = (size_t)img->dims[0];
    ds->rows = img->dims[1];
    ds->cols = img->dims[2];
    ds->num_classes = cfg->num_classes;
    ds->pixels = img->data;
    ds->labels = lab->data;
    img->data = lab->data = NULL;
    ds->mean = cfg->mean;
    ds->std = cfg->std;
    for (int v = 0; v < 256; v++) ds->lut[v] = ((float)v / 255.0f - ds->mean) / ds->std;
    *out = ds;
    return HOOP_OK;
}

hoop_status hoop_dataset_load_idx(hoop_dataset **out, const char *images_path,
                                  const char *labels_path, const hoop_dataset_config *cfg)
{
    hoop_dataset_config defaults = HOOP_DATASET_CONFIG_INIT;
    hoop__idx img = {0}, lab = {0};
    hoop_status st = HOOP_OK;
    if (out) *out = NULL;
    if (!out || !images_path || !labels_path)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_dataset_load_idx: %s is NULL",
                          !out           ? "out"
                          : !images_path ? "images_path"
                                         : "labels_path");
    *out = NULL;
    if (!cfg) cfg = &defaults;
    HOOP_CHECK(dataset_check_config(cfg));
    HOOP_CHECK_GOTO(hoop__idx_read(images_path, 3, &img), st, done);
    HOOP_CHECK_GOTO(hoop__idx_read(labels_path, 1, &lab), st, done);
    HOOP_CHECK_GOTO(dataset_check_pair(&img, &lab, images_path, labels_path, cfg->num_classes), st,
                    done);
    HOOP_CHECK_GOTO(dataset_build(out, &img, &lab, cfg), st, done);
done:
    hoop__idx_free(&img);
    hoop__idx_free(&lab);
    return st;
}

/* Writes dir/base(.gz) into buf, preferring the gzip file when it exists. */
static hoop_status dataset_path(char *buf, size_t len, const char *dir, const char *base)
{
    struct stat sb;
    int n = snprintf(buf, len, "%s/%s.gz", dir, base);
    if (n < 0 || (size_t)n >= len)
        return HOOP_ERROR(HOOP_ERR_INVALID, "data directory path '%s' is too long", dir);
    if (stat(buf, &sb) == 0) return HOOP_OK;
    buf[n - 3] = '\0';
    if (stat(buf, &sb) == 0) return HOOP_OK;
    if (errno == EACCES) /* the directory (or one above it) may not be searched */
        return HOOP_ERROR(HOOP_ERR_INVALID, "%s: cannot look for %s(.gz) in it: %s", dir, base,
                          hoop__strerror(errno));
    return HOOP_ERROR(HOOP_ERR_INVALID, "%s: neither %s.gz nor %s exists in directory '%s'", dir,
                      base, base, dir);
}

const char *const hoop__mnist_files[HOOP__MNIST_FILES] = {
    "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte"};

hoop_status hoop_dataset_load_mnist(hoop_dataset **out, const char *dir, const char *split,
                                    const hoop_dataset_config *cfg)
{
    char images[4096], labels[4096];
    if (out) *out = NULL;
    if (!out || !dir || !split)
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_dataset_load_mnist: %s is NULL",
                          !out   ? "out"
                          : !dir ? "dir"
                                 : "split");
    *out = NULL;
    if (strcmp(split, "train") != 0 && strcmp(split, "t10k") != 0)
        return HOOP_ERROR(HOOP_ERR_INVALID, "unknown split '%s' (expected train or t10k)", split);
    struct stat sb; /* a file given for the directory would read as "no such file in it" */
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return HOOP_ERROR(HOOP_ERR_INVALID,
                          "'%s' is not a directory; give the directory that holds the IDX files "
                          "(%s-images-idx3-ubyte[.gz], ...)",
                          dir, split);
    const char *const *files = &hoop__mnist_files[strcmp(split, "t10k") == 0 ? 2 : 0];
    HOOP_CHECK(dataset_path(images, sizeof images, dir, files[0]));
    HOOP_CHECK(dataset_path(labels, sizeof labels, dir, files[1]));
    return hoop_dataset_load_idx(out, images, labels, cfg);
}

void hoop_dataset_free(hoop_dataset *ds)
{
    if (!ds) return;
    free(ds->pixels);
    free(ds->labels);
    free(ds);
}

size_t hoop_dataset_count(const hoop_dataset *ds)
{
    return ds ? ds->count : 0;
}
int64_t hoop_dataset_rows(const hoop_dataset *ds)
{
    return ds ? ds->rows : 0;
}
int64_t hoop_dataset_cols(const hoop_dataset *ds)
{
    return ds ? ds->cols : 0;
}
int hoop_dataset_num_classes(const hoop_dataset *ds)
{
    return ds ? ds->num_classes : 0;
}
const uint8_t *hoop_dataset_pixels(const hoop_dataset *ds)
{
    return ds ? ds->pixels : NULL;
}
const uint8_t *hoop_dataset_labels(const hoop_dataset *ds)
{
    return ds ? ds->labels : NULL;
}

void hoop_dataset_pixel_stats(const hoop_dataset *ds, double *mean, double *std)
{
    /* Integer histogram first: exact, and independent of summation order. */
    uint64_t hist[256] = {0};
    size_t n = ds ? ds->count * (size_t)(ds->rows * ds->cols) : 0;
    double s = 0.0, ss = 0.0;
    for (size_t i = 0; i < n; i++) hist[ds->pixels[i]]++;
    for (int p = 0; p < 256; p++) {
        double v = p / 255.0;
        s += (double)hist[p] * v;
        ss += (double)hist[p] * v * v;
    }
    double m = n ? s / (double)n : 0.0;
    double var = n ? ss / (double)n - m * m : 0.0;
    if (mean) *mean = m;
    if (std) *std = var > 0.0 ? sqrt(var) : 0.0;
}

/* dst[k] = (src[k] / 255 - mean) / std, in float: a lookup in the table of the 256 values
 * (the same float as computing it, without two divisions per pixel on the step's path). */
static void convert(float *restrict dst, const uint8_t *restrict src, size_t n,
                    const float *restrict lut)
{
    for (size_t k = 0; k < n; k++) dst[k] = lut[src[k]];
}

hoop_status hoop_dataset_gather(const hoop_dataset *ds, const int64_t *idx, size_t count, float *x,
                                int32_t *y)
{
    if (!ds || (count && (!idx || !x)))
        return HOOP_ERROR(HOOP_ERR_INVALID, "hoop_dataset_gather: %s is NULL",
                          !ds    ? "ds"
                          : !idx ? "idx"
                                 : "x");
    size_t sample = (size_t)(ds->rows * ds->cols);
    for (size_t b = 0; b < count; b++)
        if (idx[b] < 0 || (uint64_t)idx[b] >= ds->count)
            return HOOP_ERROR(HOOP_ERR_INVALID,
                              "hoop_dataset_gather: index %lld (position %zu) is not in 0..%zu",
                              (long long)idx[b], b, ds->count - 1);
    for (size_t b = 0; b < count; b++) {
        /* Rows are scattered over tens of MB: ask for the next one while this one converts. */
        if (b + 1 < count)
            for (size_t k = 0; k < sample; k += 64)
                __builtin_prefetch(ds->pixels + (size_t)idx[b + 1] * sample + k);
        convert(x + b * sample, ds->pixels + (size_t)idx[b] * sample, sample, ds->lut);
        if (y) y[b] = ds->labels[idx[b]];
    }
    return HOOP_OK;
}
