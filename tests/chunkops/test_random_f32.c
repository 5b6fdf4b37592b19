/* float32 random definition and random integers (chunkops/random.h, docs/random.md "float32
 * random, version 1" and "Random integers"). Checked here: values against an independent long
 * double evaluation of the formulas (libm, true 2 pi); reference bits of a few elements; the
 * statistics of 10^7 samples; integers in range, against a plain-C evaluation of Lemire's
 * method, and uniform over small ranges. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "chunkops/random.h"

static const long double PI_L = 3.14159265358979323846264338327950288L;

static uint32_t ref_word(uint64_t seed, uint64_t i)
{
    gs_philox4_t w = gs_philox4x32_10((uint32_t)(i >> 2), (uint32_t)(i >> 34), 0x46u, 0u,
                                      (uint32_t)seed, (uint32_t)(seed >> 32));
    return w.v[i & 3];
}

/* the standard normal of element i from the definition's formulas, in 80-bit libm */
static long double ref_normal(uint64_t seed, uint64_t i)
{
    uint64_t h = i & ~(uint64_t)1;
    uint32_t wa = ref_word(seed, h), wb = ref_word(seed, h + 1);
    /* u1 as the definition rounds it: fl32(wa + 1) 2^-32 */
    long double u1 = (long double)(float)((uint64_t)wa + 1u) * 0x1p-32L;
    long double r = sqrtl(-2.0L * logl(u1));
    long double th = 2.0L * PI_L * ((long double)wb * 0x1p-32L);
    return (i & 1) ? r * sinl(th) : r * cosl(th);
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

Test(chunkops_random_f32, normal_agrees_with_an_independent_evaluation)
{
    double worst = 0;
    for (uint64_t t = 0; t < 400000; t++) {
        uint64_t seed = t % 7 == 0 ? t : 0x9e3779b97f4a7c15ull * t;
        uint64_t i = t < 1000 ? t : (t * 0x100000001b3ull) >> (t % 20);
        float z = gs_random_normal_f32(seed, i, 0.0, 1.0);
        long double r = ref_normal(seed, i);
        /* a few roundings of the radius and the angle: 4 ulp of the value, or of 1 near 0 */
        long double scale = fabsl(r) > 1.0L ? fabsl(r) : 1.0L;
        double err = (double)(fabsl((long double)z - r) / (scale * 0x1p-23L));
        if (err > worst) worst = err;
    }
    cr_expect_lt(worst, 4.0, "worst error %.2f ulp", worst);
    cr_log_info("float32 normal: worst error %.2f ulp", worst);
}

Test(chunkops_random_f32, uniform_is_exact)
{
    for (uint64_t i = 0; i < 100000; i++) {
        uint64_t seed = i * 31;
        float u = gs_random_uniform_f32(seed, i, 0.0, 1.0);
        cr_assert_eq(u, (float)((ref_word(seed, i) >> 8) * 0x1p-24), "i=%llu",
                     (unsigned long long)i);
        float v = gs_random_uniform_f32(seed, i, -2.0, 3.0);
        cr_assert_eq(v, -2.0f + 5.0f * u);
        cr_assert(v >= -2.0f && v <= 3.0f);
    }
}

/* bits of the definition (regression: any change here is a new version of the definition) */
Test(chunkops_random_f32, reference_bits)
{
    /* words of seed 0, block 0 under the float32 tag (Philox, checked independently above) */
    uint32_t w0 = ref_word(0, 0);
    cr_assert_eq(f32_bits(gs_random_uniform_f32(0, 0, 0.0, 1.0)),
                 f32_bits((float)(w0 >> 8) * 0x1p-24f));
    /* edge words: wa = 2^32 - 1 gives u1 = 1, r = 0 */
    cr_assert_eq(fabsf(gs__normal_f32(0xffffffffu, 12345u, 0)), 0.0f);
    cr_assert_eq(fabsf(gs__normal_f32(0xffffffffu, 12345u, 1)), 0.0f);
    /* wa = 0: the largest radius, sqrt(64 ln 2) = 6.660... */
    float big = gs__normal_f32(0u, 0u, 0);
    cr_assert_float_eq(big, sqrtf(64.0f * 0.69314718f), 4e-6f);
    cr_assert_eq(gs__normal_f32(0u, 0u, 1), 0.0f);
    /* quadrants: wb = 2^30 is theta = pi/2 (cos 0 (sign +0 or -0), sin 1) */
    cr_assert_float_eq(gs__normal_f32(0u, 1u << 30, 1), big, 1e-6f);
    cr_assert_float_eq(gs__normal_f32(0u, 2u << 30, 0), -big, 1e-6f);
    cr_assert_float_eq(gs__normal_f32(0u, 3u << 30, 1), -big, 1e-6f);
    /* every value finite */
    for (uint64_t i = 0; i < 1000; i++) cr_assert(isfinite(gs_random_normal_f32(7, i, 1.0, 2.0)));
}

Test(chunkops_random_f32, statistics_of_ten_million, .timeout = 600)
{
    const int64_t n = 10000000;
    double s1 = 0, s2 = 0, s4 = 0, us = 0, uv = 0;
    int64_t tail3 = 0;
    for (int64_t i = 0; i < n; i++) {
        double z = gs_random_normal_f32(2026, (uint64_t)i, 0.0, 1.0);
        s1 += z;
        s2 += z * z;
        s4 += z * z * z * z;
        if (fabs(z) > 3.0) tail3++;
        double u = gs_random_uniform_f32(2027, (uint64_t)i, 0.0, 1.0);
        us += u;
        uv += (u - 0.5) * (u - 0.5);
    }
    const double m = s1 / n, v = s2 / n, k4 = s4 / n;
    cr_expect_lt(fabs(m), 6.0 * sqrt(1.0 / n), "mean %g", m);
    cr_expect_lt(fabs(v - 1.0), 6.0 * sqrt(2.0 / n), "var %g", v);
    cr_expect_lt(fabs(k4 - 3.0), 6.0 * sqrt(96.0 / n), "4th moment %g", k4);
    const double p3 = 0.0026997960632601866;
    cr_expect_lt(fabs((double)tail3 / n - p3), 6.0 * sqrt(p3 * (1 - p3) / n), "tail %g",
                 (double)tail3 / n);
    cr_expect_lt(fabs(us / n - 0.5), 6.0 * sqrt(1.0 / 12 / n), "uniform mean %g", us / n);
    cr_expect_lt(fabs(uv / n - 1.0 / 12), 6.0 * sqrt(1.0 / 180 / n), "uniform var %g", uv / n);
}

/* Lemire's method in plain C (unsigned __int128), candidate by candidate */
static int64_t ref_integer(uint64_t seed, uint64_t i, int64_t low, int64_t high)
{
    unsigned __int128 n = (unsigned __int128)((__int128)high - (__int128)low + 1);
    for (uint32_t t = 0;; t++) {
        gs_philox4_t w = gs_philox4x32_10((uint32_t)i, (uint32_t)(i >> 32), 0x49u, t,
                                          (uint32_t)seed, (uint32_t)(seed >> 32));
        for (int h = 0; h < 4; h += 2) {
            uint64_t x = ((uint64_t)w.v[h + 1] << 32) | w.v[h];
            unsigned __int128 m = (unsigned __int128)x * n;
            uint64_t lo = (uint64_t)m;
            unsigned __int128 thr = (((unsigned __int128)1 << 64) - n) % n;
            if (n != ((unsigned __int128)1 << 64) && lo < thr) continue;
            return (int64_t)((__int128)low + (__int128)(m >> 64));
        }
    }
}

Test(chunkops_random_f32, integers_match_plain_lemire)
{
    const int64_t ranges[][2] = {{0, 9}, {-5, 5}, {0, 0}, {INT64_MIN, INT64_MAX},
                                 {0, INT64_MAX}, {-1, INT64_MAX}, {INT64_MIN, 0},
                                 {-(INT64_C(1) << 62), (INT64_C(1) << 62)}, {100, 100 + 6}};
    int rejected = 0;
    for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
        for (uint64_t i = 0; i < 20000; i++) {
            uint64_t seed = 11 + r;
            int64_t v = gs_random_integers(seed, i, ranges[r][0], ranges[r][1]);
            cr_assert(v >= ranges[r][0] && v <= ranges[r][1]);
            cr_assert_eq(v, ref_integer(seed, i, ranges[r][0], ranges[r][1]));
            /* count elements whose first candidate was rejected (large ranges reject often) */
            if (r == 4 || r == 5) {
                gs_philox4_t w = gs_philox4x32_10((uint32_t)i, 0, 0x49u, 0, (uint32_t)seed, 0);
                uint64_t x = ((uint64_t)w.v[1] << 32) | w.v[0];
                uint64_t n = (uint64_t)ranges[r][1] - (uint64_t)ranges[r][0] + 1u;
                if (x * n < (0u - n) % n) rejected++;
            }
        }
    }
    cr_expect_gt(rejected, 1000, "the rejection path was exercised %d times", rejected);
}

Test(chunkops_random_f32, integers_are_uniform_on_small_ranges)
{
    int64_t count[7] = {0};
    const int64_t n = 700000;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = gs_random_integers(99, (uint64_t)i, 100, 106);
        count[v - 100]++;
    }
    double chi2 = 0, e = n / 7.0;
    for (int k = 0; k < 7; k++) chi2 += (count[k] - e) * (count[k] - e) / e;
    cr_expect_lt(chi2, 30.0, "chi2 %g with 6 degrees of freedom", chi2); /* p ~ 4e-5 */
}

/* bit for bit against an independent pure-Python evaluation of the definition
 * (tests/chunkops/random_f32_ref.py, which writes random_f32_ref.inc) */
#include "random_f32_ref.inc"

Test(chunkops_random_f32, bits_match_the_python_evaluation)
{
    for (size_t r = 0; r < sizeof(f32_ref) / sizeof(f32_ref[0]); r++) {
        const uint64_t s = f32_ref[r].seed, i = f32_ref[r].i;
        cr_expect_eq(f32_bits(gs_random_normal_f32(s, i, 0.0, 1.0)), f32_ref[r].n01,
                     "normal(0, 1) seed %llu i %llu", (unsigned long long)s, (unsigned long long)i);
        cr_expect_eq(f32_bits(gs_random_normal_f32(s, i, 10.0, 2.0)), f32_ref[r].n10_2,
                     "normal(10, 2) seed %llu i %llu", (unsigned long long)s, (unsigned long long)i);
        cr_expect_eq(f32_bits(gs_random_uniform_f32(s, i, 0.0, 1.0)), f32_ref[r].u01);
        cr_expect_eq(f32_bits(gs_random_uniform_f32(s, i, -3.0, 5.0)), f32_ref[r].u35);
    }
    for (size_t r = 0; r < sizeof(int_ref) / sizeof(int_ref[0]); r++)
        cr_expect_eq(gs_random_integers(int_ref[r].seed, int_ref[r].i, int_ref[r].low,
                                        int_ref[r].high),
                     int_ref[r].v, "row %zu", r);
}
