/* The random definition (chunkops/random.h, docs/random.md): Philox4x32-10 known answers,
 * bit extraction, edge values, moments, and the fused kernel reproducing the definition
 * independently of how the array is chunked. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/cpu/cpu.h"
#include "chunkops/random.h"
#include "random_test_util.h"

static void check_kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                      uint32_t k1, uint32_t e0, uint32_t e1, uint32_t e2, uint32_t e3)
{
    gs_philox4_t r = gs_philox4x32_10(c0, c1, c2, c3, k0, k1);
    cr_assert(r.v[0] == e0 && r.v[1] == e1 && r.v[2] == e2 && r.v[3] == e3,
              "philox4x32_10 gave %08x %08x %08x %08x, expected %08x %08x %08x %08x", r.v[0],
              r.v[1], r.v[2], r.v[3], e0, e1, e2, e3);
}

/* Random123 kat_vectors: philox4x32_10 */
Test(chunkops_random, philox_matches_random123_zero_vector)
{
    check_kat(0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
}

Test(chunkops_random, philox_matches_random123_ones_vector)
{
    check_kat(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu,
              0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
}

Test(chunkops_random, philox_matches_random123_pi_vector)
{
    check_kat(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u,
              0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

Test(chunkops_random, block_counter_is_index_and_key_is_seed)
{
    uint64_t seed = 0x0123456789abcdefull, i = 0xfedcba9876543210ull;
    gs_philox4_t a = gs_random_block(seed, i);
    gs_philox4_t b = gs_philox4x32_10(0x76543210u, 0xfedcba98u, 0, 0, 0x89abcdefu, 0x01234567u);
    cr_assert(memcmp(&a, &b, sizeof(a)) == 0);
}

/* The documented extraction: a = ((c1 << 32) | c0) >> 11, b = ((c3 << 32) | c2) >> 11. */
Test(chunkops_random, uniform_and_normal_follow_the_documented_formulas)
{
    for (uint64_t i = 0; i < 64; i++) {
        uint64_t seed = 42 + i * 977;
        gs_philox4_t r = gs_random_block(seed, i * 1000003u);
        uint64_t a = (((uint64_t)r.v[1] << 32) | r.v[0]) >> 11;
        uint64_t b = (((uint64_t)r.v[3] << 32) | r.v[2]) >> 11;
        double u = ldexp((double)a, -53);
        cr_assert_eq(gs_random_uniform(seed, i * 1000003u, 2.0, 5.0), 2.0 + 3.0 * u);
        double z = sqrt(-2.0 * log(ldexp((double)(a + 1), -53))) *
                   cos(6.283185307179586 * ldexp((double)b, -53));
        cr_assert_eq(gs_random_normal(seed, i * 1000003u, -1.0, 0.5), -1.0 + 0.5 * z);
    }
}

/* Reference values published in docs/random.md. */
Test(chunkops_random, reference_values_of_docs_random_md)
{
    static const struct {
        uint64_t seed, i;
        double normal, uniform;
    } ref[] = {
#include "random_ref.inc"
    };
    for (size_t j = 0; j < sizeof(ref) / sizeof(ref[0]); j++) {
        double n = gs_random_normal(ref[j].seed, ref[j].i, 0.0, 1.0);
        double u = gs_random_uniform(ref[j].seed, ref[j].i, 0.0, 1.0);
        cr_assert(fabs(n - ref[j].normal) <= 1e-15 * fabs(ref[j].normal) + 1e-300,
                  "normal(seed %llu, i %llu) = %.17g, documented %.17g",
                  (unsigned long long)ref[j].seed, (unsigned long long)ref[j].i, n,
                  ref[j].normal);
        cr_assert_eq(u, ref[j].uniform, "uniform(seed %llu, i %llu) = %.17g, documented %.17g",
                     (unsigned long long)ref[j].seed, (unsigned long long)ref[j].i, u,
                     ref[j].uniform);
    }
}

Test(chunkops_random, extreme_words_give_finite_values_in_range)
{
    /* a = 0 gives u1 = 2^-53 (the largest |z|), a = 2^53-1 gives u1 = 1 (z = 0) */
    double zmax = sqrt(-2.0 * log(ldexp(1.0, -53)));
    cr_assert(zmax > 8.57 && zmax < 8.58, "largest |normal| %.17g", zmax);
    cr_assert_eq(sqrt(-2.0 * log(ldexp((double)((1ull << 53) - 1 + 1), -53))), 0.0);
    cr_assert(ldexp((double)((1ull << 53) - 1), -53) < 1.0);
    for (uint64_t i = 0; i < 100000; i++) {
        double u = gs_random_uniform(7, i, 0.0, 1.0);
        double z = gs_random_normal(7, i, 0.0, 1.0);
        cr_assert(u >= 0.0 && u < 1.0);
        cr_assert(isfinite(z) && fabs(z) <= zmax);
    }
}

static void moments(int normal, double *m1, double *m2, double *m3, double *m4)
{
    const int n = 1000000;
    double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
    for (int i = 0; i < n; i++) {
        double x = normal ? gs_random_normal(1234, (uint64_t)i, 0.0, 1.0)
                          : gs_random_uniform(1234, (uint64_t)i, 0.0, 1.0) - 0.5;
        double x2 = x * x;
        s1 += x;
        s2 += x2;
        s3 += x2 * x;
        s4 += x2 * x2;
    }
    *m1 = s1 / n;
    *m2 = s2 / n;
    *m3 = s3 / n;
    *m4 = s4 / n;
}

Test(chunkops_random, normal_moments_over_a_million_samples)
{
    double m1, m2, m3, m4;
    moments(1, &m1, &m2, &m3, &m4);
    /* standard errors: mean 1e-3, E[x^2] 1.4e-3, E[x^3] 3.9e-3, E[x^4] 9.8e-3; allow 5 sigma */
    cr_assert(fabs(m1) < 5e-3, "mean %g", m1);
    cr_assert(fabs(m2 - 1.0) < 7e-3, "variance %g", m2);
    cr_assert(fabs(m3) < 2e-2, "third moment %g", m3);
    cr_assert(fabs(m4 - 3.0) < 5e-2, "fourth moment %g", m4);
}

Test(chunkops_random, uniform_moments_over_a_million_samples)
{
    double m1, m2, m3, m4;
    moments(0, &m1, &m2, &m3, &m4);
    /* centred uniform on [-1/2, 1/2): E x = 0, E x^2 = 1/12, E x^3 = 0, E x^4 = 1/80 */
    cr_assert(fabs(m1) < 1.5e-3, "mean %g", m1);
    cr_assert(fabs(m2 - 1.0 / 12) < 5e-4, "second moment %g", m2);
    cr_assert(fabs(m3) < 2e-4, "third moment %g", m3);
    cr_assert(fabs(m4 - 1.0 / 80) < 1.5e-4, "fourth moment %g", m4);
}

Test(chunkops_random, neighbouring_seeds_and_indices_are_uncorrelated)
{
    const int n = 200000;
    double sxy = 0, sxz = 0;
    for (int i = 0; i < n; i++) {
        double x = gs_random_normal(5, (uint64_t)i, 0, 1);
        double y = gs_random_normal(6, (uint64_t)i, 0, 1);
        double z = gs_random_normal(5, (uint64_t)i + 1, 0, 1);
        sxy += x * y;
        sxz += x * z;
    }
    cr_assert(fabs(sxy / n) < 0.012, "seed correlation %g", sxy / n);
    cr_assert(fabs(sxz / n) < 0.012, "lag-1 correlation %g", sxz / n);
}

/* A random array of shape 37 x 53 generated through fused kernels chunk by chunk, with three
 * different chunkings, equals the definition at every global index. */
static void fill_chunked(uint64_t seed, int normal, int64_t c0, int64_t c1, double *out)
{
    rt_fill_chunked_with(normal ? GS_LEAF_NORMAL : GS_LEAF_UNIFORM, seed, 1, normal ? 3.0 : -2.0,
                         normal ? 0.25 : 7.0, c0, c1, out);
}

Test(chunkops_random, fused_kernel_values_do_not_depend_on_chunking)
{
    static double a[37 * 53], b[37 * 53], c[37 * 53];
    for (int normal = 0; normal <= 1; normal++) {
        fill_chunked(99, normal, 37, 53, a);
        fill_chunked(99, normal, 5, 7, b);
        fill_chunked(99, normal, 1, 53, c);
        for (int64_t i = 0; i < 37 * 53; i++) {
            double want = normal ? gs_random_normal(99, (uint64_t)i, 3.0, 0.25)
                                 : gs_random_uniform(99, (uint64_t)i, -2.0, 7.0);
            double tol = 1e-15 * (fabs(want) + 1.0);
            cr_assert(fabs(a[i] - want) <= tol && fabs(b[i] - want) <= tol &&
                          fabs(c[i] - want) <= tol,
                      "element %lld: %.17g %.17g %.17g, definition %.17g", (long long)i, a[i],
                      b[i], c[i], want);
            cr_assert(a[i] == b[i] && b[i] == c[i], "element %lld differs between chunkings",
                      (long long)i);
        }
    }
}

/* The CPU backend's vectorised batch generator against the scalar definition: uniform is
 * bit-exact; normal uses its own log/cos (each within 1 ulp), so allow a few ulps. */
Test(chunkops_random, cpu_batch_generator_matches_the_definition)
{
    enum { N = 4096 };
    static uint64_t idx[N];
    static double got[N];
    double worst = 0;
    for (int rep = 0; rep < 64; rep++) {
        uint64_t seed = rep < 4 ? (uint64_t)rep : 0x9e3779b97f4a7c15ull * (uint64_t)rep;
        for (int i = 0; i < N; i++)
            idx[i] = (rep % 2 ? ((uint64_t)rep << 33) : 0) + (uint64_t)i * (1 + (uint64_t)rep);
        gs__cpu_random_normal(seed, idx, N - rep, 0.5, 2.0, got);
        for (int i = 0; i < N - rep; i++) {
            double want = gs_random_normal(seed, idx[i], 0.5, 2.0);
            double err = fabs(got[i] - want) / (fabs(want) * 0x1p-52 + 2.0 * 0x1p-53);
            if (err > worst) worst = err;
            cr_assert(err <= 4.0, "normal(seed %llu, i %llu): batch %.17g, definition %.17g",
                      (unsigned long long)seed, (unsigned long long)idx[i], got[i], want);
        }
        gs__cpu_random_uniform(seed, idx, N - rep, -1.0, 3.0, got);
        for (int i = 0; i < N - rep; i++)
            cr_assert_eq(got[i], gs_random_uniform(seed, idx[i], -1.0, 3.0));
    }
    cr_log_info("worst normal difference: %.2f ulp", worst);
}
