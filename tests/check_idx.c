/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_idx.c -- the IDX reader, the dataset and the loader (src/data/).
 *
 * Real Fashion-MNIST files are checked against values frozen from Python's gzip module
 * (labels of the first images, sums of pixel bytes, mean/std); small synthetic files,
 * plain and gzip, written to a temporary directory, exercise every rejection. The
 * permutation is frozen from an independent Python implementation of splitmix64 +
 * Fisher-Yates + Lemire's bounded draw. Without the dataset package the synthetic
 * tests still run, then the program exits 77 (SKIP) if they passed.
 */
#include "config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "data/idx.h"
#include "hoop/data.h"
#include "run_suite.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

static char tmpdir[256];

/* ------------------------------------------------------------------------------------ */
/* Synthetic files */

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes bytes to tmpdir/name, gzip-compressed when gz; returns the path (static buffer
 * per call site is not needed: the caller copies). */
static void write_file(char *path, size_t len, const char *name, const uint8_t *buf, size_t bytes,
                       int gz)
{
    snprintf(path, len, "%s/%s", tmpdir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        if (bytes) ck_assert_int_eq(gzwrite(f, buf, (unsigned)bytes), (int)bytes);
        ck_assert_int_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(buf, 1, bytes, f), bytes);
        ck_assert_int_eq(fclose(f), 0);
    }
}

/* Builds an image file of n images of r x c pixels, pixel k of image i = (7i + k) % 256,
 * with the given magic; extra adds that many trailing bytes, cut removes bytes. */
static size_t make_images(uint8_t *buf, uint32_t magic, uint32_t n, uint32_t r, uint32_t c,
                          int extra, int cut)
{
    size_t len = 16 + (size_t)n * r * c;
    put_be32(buf, magic);
    put_be32(buf + 4, n);
    put_be32(buf + 8, r);
    put_be32(buf + 12, c);
    for (size_t k = 16; k < len; k++) {
        size_t i = (k - 16) / (r * c), j = (k - 16) % (r * c);
        buf[k] = (uint8_t)((7 * i + j) % 256);
    }
    for (int e = 0; e < extra; e++) buf[len++] = 0xAB;
    return len - (size_t)cut;
}

static size_t make_labels(uint8_t *buf, uint32_t magic, uint32_t n, uint8_t first)
{
    put_be32(buf, magic);
    put_be32(buf + 4, n);
    for (uint32_t i = 0; i < n; i++) buf[8 + i] = (uint8_t)((first + i) % 10);
    return 8 + n;
}

/* Loads an image/label pair and expects failure with status and message fragments. */
static void expect_reject(const char *img, const char *lab, hoop_status want, const char *frag1,
                          const char *frag2)
{
    hoop_dataset *ds = (hoop_dataset *)1;
    ck_assert_int_eq(hoop_dataset_load_idx(&ds, img, lab, NULL), want);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(hoop_last_error(), frag1) != NULL, "message '%s' lacks '%s'",
                  hoop_last_error(), frag1);
    ck_assert_msg(strstr(hoop_last_error(), frag2) != NULL, "message '%s' lacks '%s'",
                  hoop_last_error(), frag2);
}

static uint8_t buf_img[16 + 5 * 4 * 3 + 8], buf_lab[8 + 5 + 8];

/* ------------------------------------------------------------------------------------ */
/* Accepts */

START_TEST(test_synthetic_ok)
{
    /* _i: 0 plain, 1 gzip */
    char img[512], lab[512];
    size_t ni = make_images(buf_img, 0x00000803, 5, 4, 3, 0, 0);
    size_t nl = make_labels(buf_lab, 0x00000801, 5, 8);
    write_file(img, sizeof img, "ok-img", buf_img, ni, _i);
    write_file(lab, sizeof lab, "ok-lab", buf_lab, nl, _i);
    hoop_dataset *ds;
    ck_assert_int_eq(hoop_dataset_load_idx(&ds, img, lab, NULL), HOOP_OK);
    ck_assert_uint_eq(hoop_dataset_count(ds), 5);
    ck_assert_int_eq(hoop_dataset_rows(ds), 4);
    ck_assert_int_eq(hoop_dataset_cols(ds), 3);
    ck_assert_int_eq(hoop_dataset_num_classes(ds), 10);
    ck_assert_mem_eq(hoop_dataset_pixels(ds), buf_img + 16, 60);
    ck_assert_mem_eq(hoop_dataset_labels(ds), buf_lab + 8, 5);

    int64_t idx[2] = {4, 1};
    float x[2 * 12];
    int32_t y[2];
    ck_assert_int_eq(hoop_dataset_gather(ds, idx, 2, x, y), HOOP_OK);
    ck_assert_int_eq(y[0], 2); /* (8 + 4) % 10 */
    ck_assert_int_eq(y[1], 9);
    for (int k = 0; k < 12; k++) {
        ck_assert_float_eq(x[k], (float)((28 + k) % 256) / 255.0f);
        ck_assert_float_eq(x[12 + k], (float)((7 + k) % 256) / 255.0f);
    }
    idx[1] = 5;
    ck_assert_int_eq(hoop_dataset_gather(ds, idx, 2, x, y), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "index 5 (position 1)"));
    hoop_dataset_free(ds);
}
END_TEST

START_TEST(test_normalise)
{
    char img[512], lab[512];
    write_file(img, sizeof img, "n-img", buf_img, make_images(buf_img, 0x803, 5, 4, 3, 0, 0), 0);
    write_file(lab, sizeof lab, "n-lab", buf_lab, make_labels(buf_lab, 0x801, 5, 0), 0);
    hoop_dataset_config cfg = HOOP_DATASET_CONFIG_INIT;
    cfg.mean = 0.5f;
    cfg.std = 0.25f;
    hoop_dataset *ds;
    ck_assert_int_eq(hoop_dataset_load_idx(&ds, img, lab, &cfg), HOOP_OK);
    int64_t idx = 0;
    float x[12];
    ck_assert_int_eq(hoop_dataset_gather(ds, &idx, 1, x, NULL), HOOP_OK);
    for (int k = 0; k < 12; k++) ck_assert_float_eq_tol(x[k], (k / 255.0f - 0.5f) / 0.25f, 1e-6);
    hoop_dataset_free(ds);

    cfg.std = 0.0f;
    ck_assert_int_eq(hoop_dataset_load_idx(&ds, img, lab, &cfg), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "std must be"));
    cfg = (hoop_dataset_config)HOOP_DATASET_CONFIG_INIT;
    cfg.num_classes = 5; /* labels 0..4: still fine */
    ck_assert_int_eq(hoop_dataset_load_idx(&ds, img, lab, &cfg), HOOP_OK);
    hoop_dataset_free(ds);
    cfg.num_classes = 4; /* label 4 of sample 4 is out of range */
    ck_assert_int_eq(hoop_dataset_load_idx(&ds, img, lab, &cfg), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "label 4 of sample 4 is not in 0..3"));
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Rejects: each case builds a broken image or label file, plain (_i even) or gzip. */

static const struct {
    const char *what;
    uint32_t img_magic, lab_magic, n_img, n_lab, rows;
    int extra, cut, label_first, bad_is_label;
    const char *frag;
} bad[] = {
    {"truncated data", 0x803, 0x801, 5, 5, 4, 0, 1, 0, 0, "truncated: holds 59 of the 60"},
    {"truncated header", 0x803, 0x801, 5, 5, 4, 0, 16 + 60 - 10, 0, 0, "truncated header"},
    {"short magic", 0x803, 0x801, 5, 5, 4, 0, 16 + 60 - 2, 0, 0, "2 of 4 magic bytes"},
    {"corrupt magic", 0x12340803, 0x801, 5, 5, 4, 0, 0, 0, 0, "bad magic number 0x12340803"},
    {"float dtype", 0x0D03, 0x801, 5, 5, 4, 0, 0, 0, 0, "dtype 0x0d"},
    {"label magic on images", 0x801, 0x801, 5, 5, 4, 0, 0, 0, 0, "says 1 dimensions, expected 3"},
    {"zero rows", 0x803, 0x801, 5, 5, 0, 0, 0, 0, 0, "dimension 1 is 0"},
    {"trailing bytes", 0x803, 0x801, 5, 5, 4, 3, 0, 0, 0, "trailing bytes after the 60"},
    {"count mismatch", 0x803, 0x801, 5, 4, 4, 0, 0, 0, 1, "holds 5 images but"},
    {"label range", 0x803, 0x801, 5, 5, 4, 0, 0, 7, 1, "label 10 of sample 3"},
    {"label file magic", 0x803, 0x803, 5, 5, 4, 0, 0, 0, 1, "says 3 dimensions, expected 1"},
};

START_TEST(test_rejects)
{
    int c = _i / 2, gz = _i % 2;
    char img[512], lab[512];
    size_t ni =
        make_images(buf_img, bad[c].img_magic, bad[c].n_img, bad[c].rows, 3, bad[c].extra, 0);
    /* a zero dimension makes an empty body; cut from the full length otherwise */
    if (bad[c].rows == 0) ni = 16;
    ni -= (size_t)bad[c].cut;
    size_t nl = make_labels(buf_lab, bad[c].lab_magic, bad[c].n_lab, (uint8_t)bad[c].label_first);
    if (bad[c].label_first) buf_lab[8 + 3] = 10; /* a label outside 0..9 */
    write_file(img, sizeof img, "bad-img", buf_img, ni, gz);
    write_file(lab, sizeof lab, "bad-lab", buf_lab, nl, gz);
    expect_reject(img, lab, HOOP_ERR_INVALID, bad[c].bad_is_label ? lab : img, bad[c].frag);
}
END_TEST

START_TEST(test_corrupt_gzip)
{
    /* A valid gzip file whose deflate stream is overwritten in the middle. */
    char img[512], lab[512];
    uint8_t big[16 + 200 * 28 * 28];
    size_t ni = make_images(big, 0x803, 200, 28, 28, 0, 0);
    uint32_t lcg = 12345; /* pixels in 0..15 from an LCG: compressible, but not trivially */
    for (size_t k = 16; k < ni; k++) big[k] = (uint8_t)((lcg = lcg * 1103515245u + 12345u) >> 28);
    write_file(img, sizeof img, "gz-img", big, ni, 1);
    write_file(lab, sizeof lab, "gz-lab", buf_lab, make_labels(buf_lab, 0x801, 5, 0), 1);
    FILE *f = fopen(img, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 40, SEEK_SET), 0);
    for (int k = 0; k < 64; k++) fputc(0xFF, f);
    ck_assert_int_eq(fclose(f), 0);
    expect_reject(img, lab, HOOP_ERR_INVALID, img, "corrupt gzip stream (zlib: ");
    /* the path once: zlib's own message repeats it */
    const char *again = strstr(hoop_last_error(), img);
    ck_assert_msg(again && !strstr(again + strlen(img), img), "%s", hoop_last_error());

    /* Only the trailer's CRC-32 wrong: every byte inflates, the check fails at the end. */
    write_file(img, sizeof img, "gz-img", big, ni, 1);
    f = fopen(img, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, -8, SEEK_END), 0);
    int c0 = fgetc(f);
    ck_assert_int_eq(fseek(f, -8, SEEK_END), 0);
    fputc(c0 ^ 0x5a, f);
    ck_assert_int_eq(fclose(f), 0);
    expect_reject(img, lab, HOOP_ERR_INVALID, img,
                  "corrupt gzip stream (zlib: incorrect data check)");

    /* The same gzip file cut in half: truncation, not corruption. */
    write_file(img, sizeof img, "gz-img", big, ni, 1);
    struct stat sb;
    ck_assert_int_eq(stat(img, &sb), 0);
    ck_assert_int_eq(truncate(img, sb.st_size / 2), 0);
    expect_reject(img, lab, HOOP_ERR_INVALID, img, "truncated");
}
END_TEST

/* A short file whose header announces 3 GB (1000 x 1000 x 3000 images) fails as
 * truncated, also where the address space is limited to what the process has plus
 * 512 MiB (a cluster's ulimit -v): the reader must not reserve what the header claims
 * before the data is there (once it did, and failed as out of memory; found by
 * tests/fuzz/fuzz_idx). Not under ASan, whose shadow memory needs the address space. */
START_TEST(test_huge_header)
{
    uint8_t head[16 + 10] = {0};
    char img[512];
    put_be32(head, 0x803);
    put_be32(head + 4, 3000), put_be32(head + 8, 1000), put_be32(head + 12, 1000);
    for (int gz = 0; gz < 2; gz++) {
        write_file(img, sizeof img, "huge", head, sizeof head, gz);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
#ifndef HOOP_SANITIZERS
            struct rlimit rl;
            long vm = 0;
            char line[256];
            FILE *f = fopen("/proc/self/status", "r");
            while (f && fgets(line, sizeof line, f))
                if (strncmp(line, "VmSize:", 7) == 0) vm = strtol(line + 7, NULL, 10);
            if (f) fclose(f);
            rl.rlim_cur = rl.rlim_max = (rlim_t)vm * 1024 + (512u << 20);
            if (vm <= 0 || setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
#endif
            hoop__idx idx;
            hoop_status st = hoop__idx_read(img, 3, &idx);
            if (st != HOOP_ERR_INVALID || !strstr(hoop_last_error(), "truncated")) {
                fprintf(stderr, "%s: %s\n", hoop_status_name(st), hoop_last_error());
                _exit(1);
            }
            _exit(0);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                      "gz %d: a 26-byte file announcing 3 GB did not fail as truncated", gz);
    }
}
END_TEST

START_TEST(test_missing)
{
    char img[512];
    snprintf(img, sizeof img, "%s/no-such-file", tmpdir);
    expect_reject(img, img, HOOP_ERR_INVALID, img, "cannot open");
    hoop_dataset *ds = (hoop_dataset *)1;
    ck_assert_int_eq(hoop_dataset_load_mnist(&ds, tmpdir, "train", NULL), HOOP_ERR_INVALID);
    ck_assert_ptr_null(ds);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "train-images-idx3-ubyte.gz nor"));
    /* A file given for the directory is named as such, not as a directory lacking files. */
    snprintf(img, sizeof img, "%s/plain-file", tmpdir);
    FILE *f = fopen(img, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(hoop_dataset_load_mnist(&ds, img, "train", NULL), HOOP_ERR_INVALID);
    ck_assert_ptr_null(ds);
    ck_assert_msg(strstr(hoop_last_error(), "plain-file' is not a directory") != NULL, "%s",
                  hoop_last_error());
    unlink(img);
    ck_assert_int_eq(hoop_dataset_load_mnist(&ds, tmpdir, "valid", NULL), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "unknown split 'valid'"));
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* Permutation and loader */

START_TEST(test_permutation_frozen)
{
    static const int64_t p42_0[10] = {8, 3, 6, 5, 4, 0, 9, 2, 1, 7};
    static const int64_t p42_3[10] = {5, 8, 9, 4, 1, 0, 2, 6, 7, 3};
    static const int64_t p1_2[6] = {17841, 45443, 12207, 32065, 16367, 47959};
    int64_t p[10];
    hoop_data_permutation(p, 10, 42, 0);
    ck_assert_mem_eq(p, p42_0, sizeof p42_0);
    hoop_data_permutation(p, 10, 42, 3);
    ck_assert_mem_eq(p, p42_3, sizeof p42_3);
    int64_t *big = malloc(60000 * sizeof *big);
    char *seen = calloc(60000, 1);
    ck_assert_ptr_nonnull(big);
    ck_assert_ptr_nonnull(seen);
    hoop_data_permutation(big, 60000, 1, 2);
    ck_assert_mem_eq(big, p1_2, sizeof p1_2);
    for (int i = 0; i < 60000; i++) {
        ck_assert(big[i] >= 0 && big[i] < 60000 && !seen[big[i]]);
        seen[big[i]] = 1;
    }
    free(big);
    free(seen);
}
END_TEST

START_TEST(test_loader)
{
    char img[512], lab[512];
    write_file(img, sizeof img, "l-img", buf_img, make_images(buf_img, 0x803, 5, 4, 3, 0, 0), 1);
    write_file(lab, sizeof lab, "l-lab", buf_lab, make_labels(buf_lab, 0x801, 5, 0), 1);
    hoop_dataset *ds;
    hoop_loader *ld;
    ck_assert_int_eq(hoop_dataset_load_idx(&ds, img, lab, NULL), HOOP_OK);
    ck_assert_int_eq(hoop_loader_new(&ld, ds, 0, 1), HOOP_ERR_INVALID);
    ck_assert_int_eq(hoop_loader_new(&ld, ds, 2, 42), HOOP_OK);
    ck_assert_uint_eq(hoop_loader_num_batches(ld), 3);

    /* Epoch 1 of seed 42 visits labels in the order of hoop_data_permutation(5, 42, 1). */
    int64_t perm[5];
    hoop_data_permutation(perm, 5, 42, 1);
    float x[2 * 12];
    int32_t y[2];
    size_t n, seen = 0, sizes[4];
    ck_assert_int_eq(hoop_loader_start_epoch(ld, 1), HOOP_OK);
    for (int b = 0; b < 4; b++) {
        ck_assert_int_eq(hoop_loader_next(ld, x, y, &n), HOOP_OK);
        sizes[b] = n;
        for (size_t k = 0; k < n; k++, seen++) {
            ck_assert_int_eq(y[k], (int32_t)perm[seen]); /* label i == i here */
            ck_assert_float_eq(x[k * 12], (float)(7 * perm[seen] % 256) / 255.0f);
        }
    }
    ck_assert_uint_eq(sizes[0], 2);
    ck_assert_uint_eq(sizes[1], 2);
    ck_assert_uint_eq(sizes[2], 1);
    ck_assert_uint_eq(sizes[3], 0);

    /* A shard with a repeated index (as a padded distributed sampler makes). */
    const int64_t shard[3] = {4, 0, 4};
    ck_assert_int_eq(hoop_loader_set_indices(ld, shard, 3), HOOP_OK);
    ck_assert_uint_eq(hoop_loader_num_batches(ld), 2);
    ck_assert_int_eq(hoop_loader_next(ld, x, y, &n), HOOP_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(y[0], 4);
    ck_assert_int_eq(y[1], 0);
    ck_assert_int_eq(hoop_loader_start_epoch(ld, 7), HOOP_OK); /* rewinds the shard */
    ck_assert_int_eq(hoop_loader_next(ld, x, y, &n), HOOP_OK);
    ck_assert_int_eq(y[0], 4);
    const int64_t badshard[2] = {0, 5};
    ck_assert_int_eq(hoop_loader_set_indices(ld, badshard, 2), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "index 5 (position 1)"));
    ck_assert_int_eq(hoop_loader_set_indices(ld, NULL, 0), HOOP_OK);
    ck_assert_uint_eq(hoop_loader_num_batches(ld), 3);
    hoop_loader_free(ld);
    hoop_dataset_free(ds);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* The real Fashion-MNIST files (values frozen from Python's gzip module) */

START_TEST(test_fashion_mnist)
{
    static const uint8_t first_train[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
    static const uint8_t first_test[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    hoop_dataset *tr, *te;
    ck_assert_int_eq(hoop_dataset_load_mnist(&tr, FMNIST_DIR, "train", NULL), HOOP_OK);
    ck_assert_int_eq(hoop_dataset_load_mnist(&te, FMNIST_DIR, "t10k", NULL), HOOP_OK);
    ck_assert_uint_eq(hoop_dataset_count(tr), 60000);
    ck_assert_uint_eq(hoop_dataset_count(te), 10000);
    ck_assert_int_eq(hoop_dataset_rows(tr), 28);
    ck_assert_int_eq(hoop_dataset_cols(te), 28);
    ck_assert_mem_eq(hoop_dataset_labels(tr), first_train, 10);
    ck_assert_mem_eq(hoop_dataset_labels(te), first_test, 10);
    ck_assert_int_eq(hoop_dataset_labels(tr)[59999], 5);

    const uint8_t *px = hoop_dataset_pixels(tr);
    uint64_t s0 = 0, slast = 0, all = 0;
    for (int k = 0; k < 784; k++) s0 += px[k], slast += px[59999 * 784 + k];
    for (size_t k = 0; k < 60000 * 784; k++) all += px[k];
    ck_assert_uint_eq(s0, 76247);
    ck_assert_uint_eq(slast, 16684);
    ck_assert_uint_eq(all, 3431114169ULL);
    uint64_t t0 = 0;
    for (int k = 0; k < 784; k++) t0 += hoop_dataset_pixels(te)[k];
    ck_assert_uint_eq(t0, 33456);

    double mean, std;
    hoop_dataset_pixel_stats(tr, &mean, &std);
    ck_assert_double_eq_tol(mean, 0.2860405969887955, 1e-12);
    ck_assert_double_eq_tol(std, 0.3530242445149226, 1e-12);
    ck_assert_float_eq_tol(HOOP_FASHION_MNIST_MEAN, mean, 1e-7);
    ck_assert_float_eq_tol(HOOP_FASHION_MNIST_STD, std, 1e-7);

    /* A gathered float batch: image 0's floats sum to its byte sum / 255. */
    int64_t idx = 0;
    float x[784];
    int32_t y;
    double fs = 0.0;
    ck_assert_int_eq(hoop_dataset_gather(tr, &idx, 1, x, &y), HOOP_OK);
    for (int k = 0; k < 784; k++) fs += x[k];
    ck_assert_double_eq_tol(fs, 76247.0 / 255.0, 1e-3);
    ck_assert_int_eq(y, 9);
    hoop_dataset_free(tr);
    hoop_dataset_free(te);
}
END_TEST

static int run(Suite *s)
{
    return run_suite(s);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s/check_idx.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) return EXIT_FAILURE;

    Suite *s = suite_create("idx");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_synthetic_ok, 0, 2);
    tcase_add_test(tc, test_normalise);
    tcase_add_test(tc, test_permutation_frozen);
    tcase_add_test(tc, test_loader);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("errors");
    tcase_add_loop_test(te, test_rejects, 0, (int)(2 * sizeof bad / sizeof bad[0]));
    tcase_add_test(te, test_corrupt_gzip);
    tcase_add_test(te, test_missing);
    tcase_add_test(te, test_huge_header);
    suite_add_tcase(s, te);
    int failed = run(s);

    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) failed++;
    if (failed) return EXIT_FAILURE;

    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("SKIP: %s not found (install dataset-fashion-mnist)\n", FMNIST_DIR);
        return 77;
    }
    Suite *r = suite_create("fashion-mnist");
    TCase *tr = tcase_create("real");
    tcase_set_timeout(tr, 60);
    tcase_add_test(tr, test_fashion_mnist);
    suite_add_tcase(r, tr);
    return run(r) ? EXIT_FAILURE : EXIT_SUCCESS;
}
