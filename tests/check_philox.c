/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_philox.c -- Philox4x32-10 (src/core/philox.h) against the known-answer
 * vectors published with Random123, the reference implementation of Salmon et al. 2011
 * (its kat_vectors: a zero counter and key, all ones, and the digits of pi), and the
 * uniform stream built on it: the range, an element's independence of the order it is
 * drawn in, and the mean and the dropout rate of a long run.
 */
#include <check.h>
#include <stdint.h>

#include "core/philox.h"
#include "run_suite.h"

START_TEST(test_known_answers)
{
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x408f276du,
         0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u, 0xd16cfe09u,
         0x94fdccebu, 0x5001e420u, 0x24126ea1u},
    };
    for (int k = 0; k < 3; k++) {
        uint32_t out[4];
        hoop__philox4x32_10(kat[k], kat[k] + 4, out);
        for (int j = 0; j < 4; j++)
            ck_assert_msg(out[j] == kat[k][6 + j], "vector %d word %d: %08x, want %08x", k, j,
                          out[j], kat[k][6 + j]);
    }
}
END_TEST

START_TEST(test_uniform_stream)
{
    const uint64_t seed = 0x0123456789abcdefull;
    double sum = 0.0;
    size_t below = 0, n = 200000;
    for (size_t e = 0; e < n; e++) {
        float u = hoop__philox_uniform(seed, e);
        ck_assert(u >= 0.0f && u < 1.0f);
        sum += u;
        below += u < 0.3f;
    }
    /* mean 1/2 and rate 0.3, each within 5 standard errors */
    ck_assert_msg(sum / (double)n > 0.5 - 5 * 0.2887 / 447.2 && sum / (double)n < 0.5 + 0.00323,
                  "mean %g", sum / (double)n);
    double rate = (double)below / (double)n;
    ck_assert_msg(rate > 0.3 - 0.00513 && rate < 0.3 + 0.00513, "rate %g", rate);
    /* an element is the same whatever was drawn before it; another seed gives another one */
    ck_assert(hoop__philox_uniform(seed, 123457) == hoop__philox_uniform(seed, 123457));
    int same = 0;
    for (uint64_t e = 0; e < 64; e++)
        same += hoop__philox_uniform(seed, e) == hoop__philox_uniform(seed + 1, e);
    ck_assert_int_lt(same, 4);
    /* the four words of one block are four different elements */
    ck_assert(hoop__philox_uniform(seed, 8) != hoop__philox_uniform(seed, 9));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("philox");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_known_answers);
    tcase_add_test(tc, test_uniform_stream);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
