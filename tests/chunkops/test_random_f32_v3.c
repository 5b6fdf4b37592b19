/* float32 version 3 of the normal (chunkops/random.h, docs/random.md "float32 version 3"):
 * elements 4k, 4k + 2 share the Box-Muller pair of words (w0, w1) of the block with counter
 * (lo32(k), hi32(k), 0x47, 0), elements 4k + 1, 4k + 3 the pair (w2, w3). Checked here: reference
 * bits against an independent pure-Python evaluation (random_f32_ref.py --v3); values against a
 * long double evaluation of the formulas; the per-element, pair and walk forms give the same
 * bits in any access order; the statistics of 10^7 samples; chunk invariance through the CPU
 * fused kernel under several chunkings and strided reads; validation of the leaf kind. The
 * checks shared with version 4 are in random_f32_test_util.h. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "random_f32_test_util.h"

#include "random_f32_v3_ref.inc"

Test(chunkops_random_f32_v3, bits_match_the_python_evaluation)
{
    for (size_t r = 0; r < sizeof(f32v3_ref) / sizeof(f32v3_ref[0]); r++) {
        const uint64_t s = f32v3_ref[r].seed, i = f32v3_ref[r].i;
        cr_expect_eq(f32t_bits(gs_random_normal_f32_v3(s, i, 0.0, 1.0)), f32v3_ref[r].n01,
                     "normal(0, 1) seed %llu i %llu", (unsigned long long)s, (unsigned long long)i);
        cr_expect_eq(f32t_bits(gs_random_normal_f32_v3(s, i, 10.0, 2.0)), f32v3_ref[r].n10_2,
                     "normal(10, 2) seed %llu i %llu", (unsigned long long)s, (unsigned long long)i);
        cr_expect_eq(f32t_bits(gs_random_normal_f32_v3(s, i, -1.5, 0.25)), f32v3_ref[r].nm,
                     "normal(-1.5, 0.25) seed %llu i %llu", (unsigned long long)s,
                     (unsigned long long)i);
    }
}

Test(chunkops_random_f32_v3, normal_agrees_with_an_independent_evaluation)
{
    /* a few roundings of the radius and the angle: 4 ulp of the value, or of 1 near 0 */
    const double worst = f32t_worst_ulp(3);
    cr_expect_lt(worst, 4.0, "worst error %.2f ulp", worst);
    cr_log_info("float32 v3 normal: worst error %.2f ulp", worst);
}

/* the pair form and the walk give the bits of the per-element form, whatever the order of
 * the reads (forward, backward, stride 2, random), and the pair form is gs__normal_f32's two
 * halves for every quadrant */
Test(chunkops_random_f32_v3, element_pair_and_walk_forms_are_the_same_bits)
{
    for (uint64_t k = 0; k < 20000; k++) {
        const uint64_t seed = 0x5eed + (k % 3), kb = k * 0x10001ull;
        gs_philox4_t w = gs_random_block_f32_v3(seed, kb);
        for (unsigned h = 0; h < 2; h++) {
            float zc, zs;
            gs_random_normal_pair_f32_v3(&w, h, &zc, &zs);
            cr_assert_eq(f32t_bits(zc), f32t_bits(gs_random_normal_f32_v3(seed, 4 * kb + h, 0, 1)));
            cr_assert_eq(f32t_bits(zs),
                         f32t_bits(gs_random_normal_f32_v3(seed, 4 * kb + 2 + h, 0, 1)));
            cr_assert_eq(f32t_bits(zc), f32t_bits(gs__normal_f32(w.v[2 * h], w.v[2 * h + 1], 0)));
            cr_assert_eq(f32t_bits(zs), f32t_bits(gs__normal_f32(w.v[2 * h], w.v[2 * h + 1], 1)));
        }
    }
    /* every quadrant of the angle, and the extreme radius words */
    static const uint32_t was[] = {0u, 1u, 12345u, 0x80000000u, 0xfffffffeu, 0xffffffffu};
    for (size_t a = 0; a < sizeof(was) / sizeof(was[0]); a++)
        for (uint64_t b = 0; b < (1ull << 32); b += 0x0fff1u) {
            float zc, zs;
            gs__normal_pair_f32(was[a], (uint32_t)b, &zc, &zs);
            cr_assert_eq(f32t_bits(zc), f32t_bits(gs__normal_f32(was[a], (uint32_t)b, 0)));
            cr_assert_eq(f32t_bits(zs), f32t_bits(gs__normal_f32(was[a], (uint32_t)b, 1)));
        }
    f32t_check_walk_orders(3);
}

/* version 3 is a stream of its own: no element equals version 1's at the same index (but for
 * rare coincidences), and the tag separates the blocks */
Test(chunkops_random_f32_v3, differs_from_version_1)
{
    int same = 0;
    for (uint64_t i = 0; i < 100000; i++)
        same += gs_random_normal_f32_v3(3, i, 0, 1) == gs_random_normal_f32(3, i, 0, 1);
    cr_expect_lt(same, 5, "%d equal elements", same);
    gs_philox4_t a = gs_random_block_f32(3, 7), b = gs_random_block_f32_v3(3, 7);
    cr_assert(memcmp(&a, &b, sizeof(a)) != 0);
}

/* 10^7 standard normals (seed 2026): random_f32_test_util.h's moments, tails and correlations */
Test(chunkops_random_f32_v3, statistics_of_ten_million, .timeout = 600)
{
    f32t_check_statistics(3);
}

Test(chunkops_random_f32_v3, fused_kernel_values_do_not_depend_on_chunking)
{
    f32t_check_chunk_invariance(3);
}

/* the leaf kind is validated and evaluated (random_f32_test_util.h) */
Test(chunkops_random_f32_v3, leaf_validation)
{
    f32t_check_leaf_validation(3);
    cr_assert(gs_leaf_kind_valid(GS_LEAF_NORMAL_V3));
}
