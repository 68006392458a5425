/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_sampler.c -- DistributedSampler shards are disjoint, cover the dataset,
 * pad cyclically, and follow the frozen reference permutation.
 *
 * The frozen permutations come from an independent Python implementation of the same
 * documented stream (splitmix64, Lemire's bounded integers, Fisher-Yates).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "hoop/sampler.h"
#include "run_suite.h"

static hoop_sampler *make(size_t n, int rank, int ws, uint64_t seed, int drop_last)
{
    hoop_sampler_config cfg = HOOP_SAMPLER_CONFIG_INIT;
    cfg.dataset_size = n;
    cfg.rank = rank;
    cfg.world_size = ws;
    cfg.seed = seed;
    cfg.drop_last = drop_last;
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

int main(void)
{
    Suite *su = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_frozen_permutation);
    tcase_add_loop_test(tc, test_shards_cover_and_disjoint, 0, 98);
    tcase_add_test(tc, test_epochs_differ_ranks_agree);
    tcase_add_test(tc, test_no_shuffle_and_bad_config);
    suite_add_tcase(su, tc);
    return run_suite(su);
}
