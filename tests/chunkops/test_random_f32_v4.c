/* float32 version 4 of the normal (chunkops/random.h, docs/random.md "float32 version 4"):
 * element i (g = i >> 3, p = i & 1, m = (i >> 1) & 3) takes the block with counter (lo32(g),
 * hi32(g), 0x4A, p): m = 0, 1 the cosine and sine of words (w0, w1), m = 2, 3 those of (w2, w3).
 * Checked here: reference bits against an independent pure-Python evaluation
 * (random_f32_ref.py --v4); the pairing (8g + p and 8g + p + 2 share the radius); values against
 * a long double evaluation of the formulas; element, quad and walk forms give the same bits in
 * any access order; the statistics of 10^7 samples; chunk invariance through the CPU fused
 * kernel; the leaf kind's validation (shared checks: random_f32_test_util.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "random_f32_test_util.h"

#include "random_f32_v4_ref.inc"

Test(chunkops_random_f32_v4, bits_match_the_python_evaluation)
{
    for (size_t r = 0; r < sizeof(f32v4_ref) / sizeof(f32v4_ref[0]); r++) {
        const uint64_t s = f32v4_ref[r].seed, i = f32v4_ref[r].i;
        cr_expect_eq(f32t_bits(gs_random_normal_f32_v4(s, i, 0.0, 1.0)), f32v4_ref[r].n01,
                     "normal(0, 1) seed %llu i %llu", (unsigned long long)s, (unsigned long long)i);
        cr_expect_eq(f32t_bits(gs_random_normal_f32_v4(s, i, 10.0, 2.0)), f32v4_ref[r].n10_2,
                     "normal(10, 2) seed %llu i %llu", (unsigned long long)s, (unsigned long long)i);
        cr_expect_eq(f32t_bits(gs_random_normal_f32_v4(s, i, -1.5, 0.25)), f32v4_ref[r].nm,
                     "normal(-1.5, 0.25) seed %llu i %llu", (unsigned long long)s,
                     (unsigned long long)i);
    }
}

/* elements 8g + p and 8g + p + 2 are the cosine and sine of one radius (r^2 = a^2 + b^2, r from
 * the block's word w0 or w2 in long double), as are 8g + p + 4 and 8g + p + 6; elements of the
 * two pairs of a block, or of the two parities, have different radii but for coincidences */
Test(chunkops_random_f32_v4, elements_two_apart_share_a_radius)
{
    int same_r = 0;
    for (uint64_t t = 0; t < 50000; t++) {
        const uint64_t seed = 7 + (t % 5), g = t * 0x9e3779b1ull >> (t % 13);
        for (unsigned p = 0; p < 2; p++) {
            const gs_philox4_t w = gs_random_block_f32_v4(seed, g, p);
            for (unsigned h = 0; h < 2; h++) {
                const uint64_t i = 8 * g + p + 4 * h;
                const long double a = gs_random_normal_f32_v4(seed, i, 0, 1),
                                  b = gs_random_normal_f32_v4(seed, i + 2, 0, 1);
                const long double u1 = (long double)(float)((uint64_t)w.v[2 * h] + 1u) * 0x1p-32L;
                const long double r2 = -2.0L * logl(u1);
                cr_assert_leq(fabsl(a * a + b * b - r2), 1e-5L * (r2 > 1 ? r2 : 1),
                              "g %llu p %u h %u: %Lg + %Lg vs %Lg", (unsigned long long)g, p, h,
                              a * a, b * b, r2);
            }
            const float c0 = gs_random_normal_f32_v4(seed, 8 * g + p, 0, 1),
                        s0 = gs_random_normal_f32_v4(seed, 8 * g + p + 2, 0, 1),
                        c1 = gs_random_normal_f32_v4(seed, 8 * g + p + 4, 0, 1),
                        s1 = gs_random_normal_f32_v4(seed, 8 * g + p + 6, 0, 1);
            same_r += c0 * c0 + s0 * s0 == c1 * c1 + s1 * s1;
        }
    }
    cr_expect_lt(same_r, 5, "%d blocks whose two pairs have one radius", same_r);
}

Test(chunkops_random_f32_v4, normal_agrees_with_an_independent_evaluation)
{
    /* the same bound as version 3: 4 ulp of the value, or of 1 near 0 */
    const double worst = f32t_worst_ulp(4);
    cr_expect_lt(worst, 4.0, "worst error %.2f ulp", worst);
    cr_log_info("float32 v4 normal: worst error %.2f ulp", worst);
}

/* the quad form is the element form of 8g + p + 2m, m = 0..3, and version 3's pair arithmetic
 * of words (w0, w1), (w2, w3); the walk gives the element form's bits in any read order */
Test(chunkops_random_f32_v4, element_quad_and_walk_forms_are_the_same_bits)
{
    for (uint64_t t = 0; t < 20000; t++) {
        const uint64_t seed = 0x5eed + (t % 3), g = t * 0x10001ull;
        for (unsigned p = 0; p < 2; p++) {
            const gs_philox4_t w = gs_random_block_f32_v4(seed, g, p);
            float z[4], pc, ps;
            gs_random_normal_quad_f32_v4(&w, &z[0], &z[1], &z[2], &z[3]);
            for (unsigned m = 0; m < 4; m++) {
                const uint64_t i = 8 * g + p + 2 * m;
                cr_assert_eq(f32t_bits(z[m]), f32t_bits(gs_random_normal_f32_v4(seed, i, 0, 1)),
                             "g %llu p %u m %u", (unsigned long long)g, p, m);
                cr_assert_eq(f32t_bits(z[m]),
                             f32t_bits(gs__normal_f32(w.v[2 * (m >> 1)], w.v[2 * (m >> 1) + 1],
                                                      m & 1u)));
            }
            gs__normal_pair_f32(w.v[2], w.v[3], &pc, &ps);
            cr_assert_eq(f32t_bits(pc), f32t_bits(z[2]));
            cr_assert_eq(f32t_bits(ps), f32t_bits(z[3]));
        }
    }
    f32t_check_walk_orders(4);
}

/* version 4 is a stream of its own: no element equals version 1's or 3's at the same index (but
 * for rare coincidences); the tag and the parity word separate the blocks */
Test(chunkops_random_f32_v4, differs_from_versions_1_and_3)
{
    int same1 = 0, same3 = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        const float z = gs_random_normal_f32_v4(3, i, 0, 1);
        same1 += z == gs_random_normal_f32(3, i, 0, 1);
        same3 += z == gs_random_normal_f32_v3(3, i, 0, 1);
    }
    cr_expect_lt(same1, 5, "%d elements equal to version 1", same1);
    cr_expect_lt(same3, 5, "%d elements equal to version 3", same3);
    const gs_philox4_t a = gs_random_block_f32_v3(3, 7), b = gs_random_block_f32_v4(3, 7, 0),
                       c = gs_random_block_f32_v4(3, 7, 1);
    cr_assert(memcmp(&a, &b, sizeof(a)) != 0);
    cr_assert(memcmp(&b, &c, sizeof(b)) != 0);
}

Test(chunkops_random_f32_v4, statistics_of_ten_million, .timeout = 600)
{
    f32t_check_statistics(4);
}

Test(chunkops_random_f32_v4, fused_kernel_values_do_not_depend_on_chunking)
{
    f32t_check_chunk_invariance(4);
}

Test(chunkops_random_f32_v4, leaf_validation)
{
    f32t_check_leaf_validation(4);
    cr_assert_eq(GS_LEAF_NORMAL_F32_V4, 10);
}
