/* Version 2 of the normal definition (chunkops/random.h, docs/random.md "Version 2"): pairs of
 * elements from one Philox block, libm-free arithmetic. Checked here: the pair and per-element
 * forms and the CPU batch generator give the same bits; values against an independent long
 * double evaluation of r cos / r sin; chunk invariance through fused kernels (pairs split by
 * chunk edges); and the statistics of 10^8 samples (mean, variance, tails). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/cpu/cpu.h"
#include "chunkops/random.h"
#include "random_test_util.h"

Test(chunkops_random_v2, values_agree_with_an_independent_evaluation)
{
    double worst = 0;
    for (uint64_t t = 0; t < 200000; t++) {
        uint64_t seed = t % 7 == 0 ? t : 0x9e3779b97f4a7c15ull * t;
        uint64_t k = t < 1000 ? t : (t * 0x100000001b3ull) >> (t % 20);
        double z0, z1;
        long double r0, r1;
        gs_random_normal_pair_v2(seed, k, &z0, &z1);
        rt_ref_pair(seed, k, 0x32u, &r0, &r1); /* the definition's tag, written out */
        rt_expect_close(z0, r0, seed, k, &worst);
        rt_expect_close(z1, r1, seed, k, &worst);
    }
    cr_log_info("worst v2 difference from the long double evaluation: %.2f ulp", worst);
}

Test(chunkops_random_v2, pair_element_and_batch_forms_are_the_same_bits)
{
    enum { N = 4099 };
    static uint64_t idx[N];
    static double got[N];
    for (int rep = 0; rep < 40; rep++) {
        uint64_t seed = rep < 3 ? (uint64_t)rep : 0xd1b54a32d192ed03ull * (uint64_t)rep;
        uint64_t start = (rep % 2 ? ((uint64_t)rep << 34) : 0) + (uint64_t)(rep % 3);
        for (int i = 0; i < N; i++) idx[i] = start + (uint64_t)i * (uint64_t)(1 + rep % 4);
        gs__cpu_random_normal_v2(seed, idx, N, -0.5, 3.0, got);
        for (int i = 0; i < N; i++) {
            double z0, z1;
            gs_random_normal_pair_v2(seed, idx[i] >> 1, &z0, &z1);
            double want = -0.5 + 3.0 * ((idx[i] & 1) ? z1 : z0);
            cr_assert_eq(got[i], want, "seed %llu i %llu", (unsigned long long)seed,
                         (unsigned long long)idx[i]);
            cr_assert_eq(gs_random_normal_v2(seed, idx[i], -0.5, 3.0), want);
        }
    }
}

Test(chunkops_random_v2, extreme_words_and_the_streams_of_v1_differ)
{
    /* a = 2^53 - 1: radius 0; a = 0: the largest radius, sqrt(106 ln 2) */
    cr_assert_eq(gs__radius_v2(((uint64_t)1 << 53) - 1), 0.0);
    cr_assert(fabs(gs__radius_v2(0) - sqrt(106.0 * log(2.0))) <= 4e-15);
    unsigned n;
    double y;
    gs__angle_v2(0, &n, &y);
    cr_assert(n == 0 && y == 0.0);
    gs__angle_v2((uint64_t)1 << 51, &n, &y); /* theta = pi/2 exactly */
    cr_assert(n == 1 && y == 0.0);
    gs__angle_v2(((uint64_t)1 << 53) - 1, &n, &y); /* just below 2 pi: quadrant 0, y < 0 */
    cr_assert(n == 0 && y < 0.0 && y > -1e-14);
    /* v2 is a different stream from v1 (different counters) */
    int same = 0;
    for (uint64_t i = 0; i < 1000; i++) same += gs_random_normal_v2(5, i, 0, 1) == gs_random_normal(5, i, 0, 1);
    cr_assert(same < 5);
}

/* 37 x 53 through fused STORE kernels chunk by chunk: odd chunk widths split pairs between
 * chunks; every chunking gives the definition's bits. */
Test(chunkops_random_v2, fused_kernel_values_do_not_depend_on_chunking)
{
    static double a[37 * 53], b[37 * 53], c[37 * 53], d[37 * 53];
    rt_fill_chunked(GS_LEAF_NORMAL_V2, 77, 1, 37, 53, a);
    rt_fill_chunked(GS_LEAF_NORMAL_V2, 77, 1, 5, 7, b);
    rt_fill_chunked(GS_LEAF_NORMAL_V2, 77, 1, 1, 53, c);
    rt_fill_chunked(GS_LEAF_NORMAL_V2, 77, 1, 3, 1, d);
    for (int64_t i = 0; i < 37 * 53; i++) {
        double want = gs_random_normal_v2(77, (uint64_t)i, 3.0, 0.25);
        cr_assert(a[i] == want && b[i] == want && c[i] == want && d[i] == want,
                  "element %lld: %.17g %.17g %.17g %.17g, definition %.17g", (long long)i, a[i],
                  b[i], c[i], d[i], want);
    }
}

/* 10^8 samples: moments, tails and the correlation of the halves of a pair (i, i + 1) */
Test(chunkops_random_v2, statistics_of_a_hundred_million_samples, .timeout = 600)
{
    rt_normal_statistics("v2", gs__cpu_random_normal_v2, 1);
}
