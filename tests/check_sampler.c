/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_sampler.c -- DistributedSampler shards are disjoint, cover the dataset,
 * pad cyclically, and follow the frozen reference permutation; the exact split covers
 * every sample once; every public function refuses NULL and out-of-range arguments.
 *
 * The frozen permutations come from an independent Python implementation of the same
 * documented stream (splitmix64, Lemire's bounded integers, Fisher-Yates).
 */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hoop/sampler.h"
#include "run_suite.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* mode: 0 padding, 1 drop_last, 2 exact_split. */
static hoop_sampler *make(size_t n, int rank, int ws, uint64_t seed, int mode)
{
    hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
    cfg.dataset_size = n;
    cfg.rank = rank;
    cfg.world_size = ws;
    cfg.seed = seed;
    cfg.drop_last = mode == 1;
    cfg.exact_split = mode == 2;
    hoop_sampler *s = NULL;
    ck_assert_int_eq(hoop_sampler_new(&s, &cfg), HOOP_OK);
    return s;
}

START_TEST(test_frozen_permutation)
{
    static const size_t e0[] = {0, 6, 9, 1, 5, 7, 8, 2, 4, 3};
    static const size_t e1[] = {3, 8, 7, 1, 9, 0, 2, 6, 5, 4};
    static const size_t s7e3[] = {3, 7, 2, 8, 12, 6, 0, 1, 5, 9, 4, 10, 11};
    hoop_sampler *s = make(10, 0, 1, 42, 0);
    ck_assert_uint_eq(hoop_sampler_num_samples(s), 10);
    ck_assert_mem_eq(hoop_sampler_indices(s), e0, sizeof(e0));
    ck_assert_int_eq(hoop_sampler_set_epoch(s, 1), HOOP_OK);
    ck_assert_mem_eq(hoop_sampler_indices(s), e1, sizeof(e1));
    hoop_sampler_free(s);
    s = make(13, 0, 1, 7, 0);
    hoop_sampler_set_epoch(s, 3);
    ck_assert_mem_eq(hoop_sampler_indices(s), s7e3, sizeof(s7e3));
    hoop_sampler_free(s);
    /* Rank r of 3 takes positions r, r+3, ...; padding wraps to the start (e0[0]). */
    static const size_t r1of3[] = {6, 5, 2, 0};
    s = make(10, 1, 3, 42, 0);
    ck_assert_uint_eq(hoop_sampler_num_samples(s), 4);
    ck_assert_mem_eq(hoop_sampler_indices(s), r1of3, sizeof(r1of3));
    hoop_sampler_free(s);
}
END_TEST

static const size_t sizes[] = {0, 1, 3, 7, 10, 100, 101};
static const int worlds[] = {1, 2, 3, 4, 7, 8, 16};

/* For every (n, world_size, drop_last): shards equal-sized, union covers the dataset
 * (or its first floor part with drop_last), duplicates only from padding. */
START_TEST(test_shards_cover_and_disjoint)
{
    size_t n = sizes[_i % 7];
    int ws = worlds[_i / 7 % 7];
    int drop_last = _i / 49;
    size_t per = drop_last ? n / (size_t)ws : (n + (size_t)ws - 1) / (size_t)ws;
    int *count = calloc(n + 1, sizeof(int));
    for (int r = 0; r < ws; r++) {
        hoop_sampler *s = make(n, r, ws, 1234, drop_last);
        ck_assert_int_eq(hoop_sampler_set_epoch(s, 5), HOOP_OK);
        ck_assert_uint_eq(hoop_sampler_num_samples(s), per);
        const size_t *idx = hoop_sampler_indices(s);
        for (size_t k = 0; k < per; k++) {
            ck_assert_uint_lt(idx[k], n);
            count[idx[k]]++;
        }
        hoop_sampler_free(s);
    }
    size_t total = per * (size_t)ws, seen = 0, dups = 0;
    for (size_t i = 0; i < n; i++) {
        if (count[i] > 0) seen++;
        if (count[i] > 1) dups += (size_t)count[i] - 1;
        if (drop_last) ck_assert_int_le(count[i], 1);
    }
    if (drop_last) {
        ck_assert_uint_eq(seen, total);
    } else {
        ck_assert_uint_eq(seen, n);         /* covers the whole dataset */
        ck_assert_uint_eq(dups, total - n); /* only the padding repeats */
    }
    free(count);
}
END_TEST

START_TEST(test_epochs_differ_ranks_agree)
{
    hoop_sampler *a = make(100, 0, 1, 9, 0), *b = make(100, 0, 1, 9, 0);
    size_t first[100];
    memcpy(first, hoop_sampler_indices(a), sizeof(first));
    ck_assert_mem_eq(hoop_sampler_indices(b), first, sizeof(first));
    hoop_sampler_set_epoch(a, 1);
    ck_assert_int_ne(memcmp(hoop_sampler_indices(a), first, sizeof(first)), 0);
    hoop_sampler_set_epoch(a, 0);
    ck_assert_mem_eq(hoop_sampler_indices(a), first, sizeof(first));
    hoop_sampler_free(a);
    hoop_sampler_free(b);
}
END_TEST

START_TEST(test_no_shuffle_and_bad_config)
{
    hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
    cfg.dataset_size = 5;
    cfg.world_size = 2;
    cfg.rank = 1;
    cfg.shuffle = 0;
    hoop_sampler *s = NULL;
    ck_assert_int_eq(hoop_sampler_new(&s, &cfg), HOOP_OK);
    static const size_t want[] = {1, 3, 0};
    ck_assert_mem_eq(hoop_sampler_indices(s), want, sizeof(want));
    hoop_sampler_free(s);
    cfg.rank = 2;
    ck_assert_int_eq(hoop_sampler_new(&s, &cfg), HOOP_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "rank=2"));
    cfg.world_size = 0;
    ck_assert_int_eq(hoop_sampler_new(&s, &cfg), HOOP_ERR_INVALID);
    ck_assert_ptr_null(s);
    hoop_sampler_free(NULL);
}
END_TEST

// ----------------------------------------------------------------- exact split

START_TEST(test_exact_split_frozen)
{
    /* Positions r, r+3, ... of the frozen epoch-0 permutation e0 (see above), no padding. */
    static const size_t want0[] = {0, 1, 8, 3}, want1[] = {6, 5, 2}, want2[] = {9, 7, 4};
    const size_t *want[3] = {want0, want1, want2};
    size_t counts[3] = {4, 3, 3};
    for (int r = 0; r < 3; r++) {
        hoop_sampler *s = make(10, r, 3, 42, 2);
        ck_assert_uint_eq(hoop_sampler_num_samples(s), counts[r]);
        ck_assert_mem_eq(hoop_sampler_indices(s), want[r], counts[r] * sizeof(size_t));
        hoop_sampler_free(s);
    }
}
END_TEST

static const size_t exact_sizes[] = {0, 1, 2, 7, 10, 101, 10000};
static const int exact_worlds[] = {1, 2, 3, 4, 7, 8, 13, 16};

/* Every sample exactly once across ranks; shard sizes floor(n/ws) + (rank < n % ws);
 * each shard is the padded shard without its padding (the same permutation). */
START_TEST(test_exact_split_covers_once)
{
    size_t n = exact_sizes[_i % 7];
    int ws = exact_worlds[_i / 7];
    size_t q = n / (size_t)ws, m = n % (size_t)ws, total = 0;
    int *count = calloc(n + 1, sizeof(int));
    for (int r = 0; r < ws; r++) {
        hoop_sampler *s = make(n, r, ws, 77, 2), *p = make(n, r, ws, 77, 0);
        ck_assert_int_eq(hoop_sampler_set_epoch(s, 3), HOOP_OK);
        ck_assert_int_eq(hoop_sampler_set_epoch(p, 3), HOOP_OK);
        size_t k = hoop_sampler_num_samples(s);
        ck_assert_uint_eq(k, q + ((size_t)r < m));
        ck_assert_ptr_nonnull(hoop_sampler_indices(s));
        if (k)
            ck_assert_mem_eq(hoop_sampler_indices(s), hoop_sampler_indices(p), k * sizeof(size_t));
        for (size_t j = 0; j < k; j++) {
            ck_assert_uint_lt(hoop_sampler_indices(s)[j], n);
            count[hoop_sampler_indices(s)[j]]++;
        }
        total += k;
        hoop_sampler_free(s);
        hoop_sampler_free(p);
    }
    ck_assert_uint_eq(total, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(count[i] == 1, "sample %zu seen %d times", i, count[i]);
    free(count);
}
END_TEST

/* A per-sample metric summed over the exact shards of 10000 samples equals its sum over
 * the dataset for world sizes that do not divide 10000; padding would count extra. */
START_TEST(test_exact_split_metric_sum)
{
    static const int worlds[] = {3, 7};
    const size_t n = 10000;
    uint64_t want = 0;
    for (size_t i = 0; i < n; i++) want += (i * 2654435761u) % 1000; /* any fixed metric */
    for (int w = 0; w < 2; w++) {
        uint64_t exact = 0, padded = 0;
        for (int r = 0; r < worlds[w]; r++) {
            hoop_sampler *s = make(n, r, worlds[w], 5, 2), *p = make(n, r, worlds[w], 5, 0);
            for (size_t j = 0; j < hoop_sampler_num_samples(s); j++)
                exact += (hoop_sampler_indices(s)[j] * 2654435761u) % 1000;
            for (size_t j = 0; j < hoop_sampler_num_samples(p); j++)
                padded += (hoop_sampler_indices(p)[j] * 2654435761u) % 1000;
            hoop_sampler_free(s);
            hoop_sampler_free(p);
        }
        ck_assert_uint_eq(exact, want);
        ck_assert_uint_ne(padded, want); /* the padded shards repeat some samples */
    }
}
END_TEST

// ----------------------------------------------------------------- bad arguments

/* hoop_sampler_new with cfg must fail with HOOP_ERR_INVALID, leave out NULL and name what. */
static void expect_invalid(const hoop_sampler_config *cfg, const char *what)
{
    hoop_sampler *s = (hoop_sampler *)cfg; /* any non-NULL value: must be reset */
    ck_assert_int_eq(hoop_sampler_new(&s, cfg), HOOP_ERR_INVALID);
    ck_assert_ptr_null(s);
    assert_error_has(what, NULL);
}

START_TEST(test_null_arguments)
{
    hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
    cfg.dataset_size = 10;
    hoop_sampler *s = (hoop_sampler *)&cfg;
    ck_assert_int_eq(hoop_sampler_new(NULL, &cfg), HOOP_ERR_INVALID);
    assert_error_has("out is NULL", NULL);
    ck_assert_int_eq(hoop_sampler_new(&s, NULL), HOOP_ERR_INVALID);
    ck_assert_ptr_null(s);
    assert_error_has("cfg is NULL", NULL);
    ck_assert_int_eq(hoop_sampler_set_epoch(NULL, 1), HOOP_ERR_INVALID);
    assert_error_has("s is NULL", NULL);
    ck_assert_uint_eq(hoop_sampler_num_samples(NULL), 0);
    ck_assert_ptr_null(hoop_sampler_indices(NULL));
    hoop_sampler_free(NULL);
}
END_TEST

START_TEST(test_out_of_range)
{
    static const struct {
        int ws, rank;
        const char *what;
    } bad_rank[] = {
        {0, 0, "world_size=0"},
        {-1, 0, "world_size=-1"},
        {INT_MIN, 0, "world_size=-2147483648"},
        {1, 1, "rank=1"},
        {3, -1, "rank=-1"},
        {3, 3, "rank=3"},
        {3, INT_MAX, "rank=2147483647"},
        {INT_MAX, INT_MIN, "rank=-2147483648"},
    };
    for (size_t i = 0; i < NELEM(bad_rank); i++) {
        hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
        cfg.dataset_size = 10;
        cfg.world_size = bad_rank[i].ws;
        cfg.rank = bad_rank[i].rank;
        expect_invalid(&cfg, bad_rank[i].what);
    }
    /* Sizes: a negative int converted, SIZE_MAX, one past the limit. */
    static const size_t bad_n[] = {(size_t)-5, SIZE_MAX, (size_t)HOOP_SAMPLER_MAX_DATASET + 1};
    for (size_t i = 0; i < NELEM(bad_n); i++) {
        hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
        cfg.dataset_size = bad_n[i];
        expect_invalid(&cfg, "dataset_size=");
        for (int mode = 1; mode <= 2; mode++) {
            cfg.drop_last = mode == 1;
            cfg.exact_split = mode == 2;
            expect_invalid(&cfg, "dataset_size=");
        }
    }
    hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
    cfg.dataset_size = 10;
    cfg.shuffle = 2;
    expect_invalid(&cfg, "shuffle=2");
    cfg.shuffle = 1;
    cfg.drop_last = -1;
    expect_invalid(&cfg, "drop_last=-1");
    cfg.drop_last = 0;
    cfg.exact_split = 7;
    expect_invalid(&cfg, "exact_split=7");
    cfg.drop_last = cfg.exact_split = 1;
    expect_invalid(&cfg, "exclude each other");
}
END_TEST

/* The largest world sizes and ranks that are valid work, with at most one index. */
START_TEST(test_extreme_valid)
{
    for (int mode = 0; mode < 3; mode++) {
        hoop_sampler *s = make(10, INT_MAX - 1, INT_MAX, 3, mode);
        ck_assert_uint_eq(hoop_sampler_num_samples(s), (mode == 0 ? 1u : 0u));
        ck_assert_ptr_nonnull(hoop_sampler_indices(s));
        if (mode == 0) ck_assert_uint_lt(hoop_sampler_indices(s)[0], 10);
        ck_assert_int_eq(hoop_sampler_set_epoch(s, UINT64_MAX), HOOP_OK);
        hoop_sampler_free(s);
        s = make(0, 0, 3, 3, mode); /* an empty dataset */
        ck_assert_uint_eq(hoop_sampler_num_samples(s), 0);
        ck_assert_ptr_nonnull(hoop_sampler_indices(s));
        hoop_sampler_free(s);
    }
}
END_TEST

int main(void)
{
    Suite *su = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_frozen_permutation);
    tcase_add_loop_test(tc, test_shards_cover_and_disjoint, 0, 98);
    tcase_add_test(tc, test_epochs_differ_ranks_agree);
    tcase_add_test(tc, test_no_shuffle_and_bad_config);
    suite_add_tcase(su, tc);
    tc = tcase_create("exact");
    tcase_add_test(tc, test_exact_split_frozen);
    tcase_add_loop_test(tc, test_exact_split_covers_once, 0, 56);
    tcase_add_test(tc, test_exact_split_metric_sum);
    suite_add_tcase(su, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_null_arguments);
    tcase_add_test(tc, test_out_of_range);
    tcase_add_test(tc, test_extreme_valid);
    suite_add_tcase(su, tc);
    return run_suite(su);
}
