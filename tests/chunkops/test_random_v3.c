/* Version 3 of the normal definition (chunkops/random.h, docs/random.md "Version 3"): elements
 * 4q + j and 4q + j + 2 (j = 0, 1) share one Philox block and one Box-Muller transform. Checked
 * here: the pairing against an independent formula (division and remainder instead of shifts)
 * and the values against an independent long double evaluation; the pair, per-element and CPU
 * batch forms give the same bits for every stride and offset (the batch form shares pairs for
 * unit stride and stride 2); reference values; chunk invariance through fused kernels, with
 * unit stride and stride 2 along the row; and the statistics of 10^8 samples. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/cpu/cpu.h"
#include "chunkops/random.h"
#include "random_test_util.h"

/* the definition's formulas evaluated independently: pair k = 2 (i div 4) + (i mod 2), half
 * (i mod 4) div 2, counter word 0x33; rt_ref_pair's 80-bit libm */
static long double ref_v3(uint64_t seed, uint64_t i)
{
    long double z0, z1;
    rt_ref_pair(seed, 2 * (i / 4) + i % 2, 0x33u, &z0, &z1);
    return (i % 4) / 2 == 0 ? z0 : z1;
}

Test(chunkops_random_v3, pairing_and_values_agree_with_an_independent_evaluation)
{
    double worst = 0;
    for (uint64_t t = 0; t < 400000; t++) {
        uint64_t seed = t % 7 == 0 ? t : 0x9e3779b97f4a7c15ull * t;
        uint64_t i = t < 4000 ? t : (t * 0x100000001b3ull) >> (t % 24);
        if (t % 1000 == 999) i = UINT64_MAX - t % 4; /* the last indices */
        cr_assert_eq(gs_random_v3_pair(i), 2 * (i / 4) + i % 2);
        cr_assert_eq(gs_random_v3_half(i), (unsigned)((i % 4) / 2));
        cr_assert_eq(gs_random_v3_first(gs_random_v3_pair(i)) + 2 * gs_random_v3_half(i), i);
        double z = gs_random_normal_v3(seed, i, 0.0, 1.0);
        rt_expect_close(z, ref_v3(seed, i), seed, i, &worst); /* version 2's bound */
    }
    cr_log_info("worst v3 difference from the long double evaluation: %.2f ulp", worst);
}

Test(chunkops_random_v3, pair_element_and_batch_forms_are_the_same_bits)
{
    enum { N = 4099 };
    static uint64_t idx[N];
    static double got[N];
    for (int rep = 0; rep < 64; rep++) {
        uint64_t seed = rep < 3 ? (uint64_t)rep : 0xd1b54a32d192ed03ull * (uint64_t)rep;
        /* strides 1..4 from every offset mod 4, low and high counters; rep 60+: runs of unit
         * stride and stride 2 broken up at random (partners split between batch calls) */
        uint64_t start = (rep % 2 ? ((uint64_t)rep << 34) : 0) + (uint64_t)(rep % 4);
        uint64_t step = 1 + (uint64_t)(rep / 4) % 4, e = start;
        for (int i = 0; i < N; i++) {
            idx[i] = e;
            e += rep >= 60 ? 1 + (uint64_t)(rand() % 3) : step;
        }
        int split = rep >= 60 ? 1 + rand() % (N - 1) : N;
        gs__cpu_random_normal_v3(seed, idx, split, -0.5, 3.0, got);
        gs__cpu_random_normal_v3(seed, idx + split, N - split, -0.5, 3.0, got + split);
        for (int i = 0; i < N; i++) {
            double z0, z1;
            gs_random_normal_pair_v3(seed, gs_random_v3_pair(idx[i]), &z0, &z1);
            double want = -0.5 + 3.0 * (gs_random_v3_half(idx[i]) ? z1 : z0);
            cr_assert_eq(got[i], want, "rep %d seed %llu i %llu", rep, (unsigned long long)seed,
                         (unsigned long long)idx[i]);
            cr_assert_eq(gs_random_normal_v3(seed, idx[i], -0.5, 3.0), want);
        }
    }
}

/* Reference values of docs/random.md section 10 (seed, index, standard normal), bit for bit. */
Test(chunkops_random_v3, reference_values)
{
    static const struct {
        uint64_t seed, i;
        uint64_t bits;
    } ref[] = {
#include "random_v3_ref.inc"
    };
    for (size_t t = 0; t < sizeof(ref) / sizeof(ref[0]); t++) {
        double z = gs_random_normal_v3(ref[t].seed, ref[t].i, 0.0, 1.0);
        uint64_t u;
        memcpy(&u, &z, sizeof(u));
        cr_assert_eq(u, ref[t].bits, "seed %llu i %llu: %.17g (0x%016llx), want 0x%016llx",
                     (unsigned long long)ref[t].seed, (unsigned long long)ref[t].i, z,
                     (unsigned long long)u, (unsigned long long)ref[t].bits);
        double e = (double)fabsl((long double)z - ref_v3(ref[t].seed, ref[t].i));
        cr_assert(e <= 4.0 * 0x1p-52 * (fabs(z) + 1.0));
    }
}

Test(chunkops_random_v3, its_stream_differs_from_versions_1_and_2)
{
    int same1 = 0, same2 = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        double v3 = gs_random_normal_v3(5, i, 0, 1);
        same1 += v3 == gs_random_normal(5, i, 0, 1);
        same2 += v3 == gs_random_normal_v2(5, i, 0, 1);
    }
    cr_assert(same1 < 5 && same2 < 5, "%d %d", same1, same2);
    /* elements 4q and 4q + 2 are r cos and r sin of one angle: z0^2 + z1^2 = r^2 for both
     * elements of a pair, as computed by the pair form */
    double z0, z1;
    gs_random_normal_pair_v3(5, 6, &z0, &z1); /* pair 6 = elements 12 and 14 */
    cr_assert_eq(gs_random_normal_v3(5, 12, 0, 1), z0);
    cr_assert_eq(gs_random_normal_v3(5, 14, 0, 1), z1);
}

/* 37 x 53 (rows of odd width: the groups of four straddle rows) through fused STORE kernels
 * chunk by chunk, reading every column (step 1), every second one (step 2, as x[:, ::2]) or every
 * third; every chunking gives the definition's bits. */
Test(chunkops_random_v3, fused_kernel_values_do_not_depend_on_chunking)
{
    static double v[4][37 * 53];
    static const int64_t ch[4][2] = {{37, 53}, {5, 7}, {1, 53}, {3, 1}};
    for (int64_t step = 1; step <= 3; step++) {
        const int64_t W = (53 + step - 1) / step;
        for (int c = 0; c < 4; c++) rt_fill_chunked(GS_LEAF_NORMAL_V3, 77, step, ch[c][0], ch[c][1], v[c]);
        for (int64_t r = 0; r < 37; r++)
            for (int64_t q = 0; q < W; q++) {
                double want = gs_random_normal_v3(77, (uint64_t)(r * 53 + q * step), 3.0, 0.25);
                for (int c = 0; c < 4; c++)
                    cr_assert(v[c][r * W + q] == want, "step %lld chunking %d (%lld, %lld): %.17g, definition %.17g",
                              (long long)step, c, (long long)r, (long long)q, v[c][r * W + q], want);
            }
    }
}

/* 10^8 samples: moments, tails and the correlation of the halves of a pair (i, i + 2) */
Test(chunkops_random_v3, statistics_of_a_hundred_million_samples, .timeout = 600)
{
    rt_normal_statistics("v3", gs__cpu_random_normal_v3, 2);
}
