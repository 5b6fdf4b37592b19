/* Shared by the random tests (test_random.c, test_random_v2.c, test_random_v3.c): a
 * 37 x 53 random array of one leaf kind filled through the CPU backend's fused STORE kernels
 * chunk by chunk, the statistics of 10^8 samples of a batch generator, and the independent long
 * double evaluation of a Box-Muller pair with the check of a value against it. */
#ifndef GS_TESTS_CHUNKOPS_RANDOM_TEST_UTIL_H
#define GS_TESTS_CHUNKOPS_RANDOM_TEST_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/random.h"

enum { RT_R = 37, RT_C = 53 };

/* Fill @a out (RT_R x W, W = ceil(RT_C / step)) with columns 0, step, 2 step, ... of the RT_R x
 * RT_C random array of leaf @a kind, @a seed and parameters @a p0, @a p1 (mean and std, or low
 * and high), computed in chunks of c0 x c1 elements of the view: odd chunk widths split pairs
 * between chunks. */
static inline void rt_fill_chunked_with(int kind, uint64_t seed, int64_t step, double p0,
                                        double p1, int64_t c0, int64_t c1, double *out)
{
    const int64_t R = RT_R, C = RT_C, W = (C + step - 1) / step;
    static double buf[RT_R * RT_C];
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    for (int64_t r0 = 0; r0 < R; r0 += c0) {
        for (int64_t q0 = 0; q0 < W; q0 += c1) {
            int64_t nr = r0 + c0 > R ? R - r0 : c0, nc = q0 + c1 > W ? W - q0 : c1;
            gs_kfused_t k;
            memset(&k, 0, sizeof(k));
            k.ndim = 2;
            k.shape[0] = nr;
            k.shape[1] = nc;
            k.nleaves = 1;
            k.leaves[0].kind = kind;
            k.leaves[0].base = r0 * C + q0 * step;
            k.leaves[0].stride[0] = C;
            k.leaves[0].stride[1] = step;
            k.leaves[0].seed = seed;
            k.leaves[0].p0 = p0;
            k.leaves[0].p1 = p1;
            k.nprog = 1;
            k.prog[0].op = GS_OP_LEAF;
            k.terminal = GS_TERM_STORE;
            k.out = buf;
            cr_assert_eq(gs_chunkops_cpu_ops.fused(ctx, NULL, &k), GS_OK, "%s", gs_last_error());
            for (int64_t a = 0; a < nr; a++)
                for (int64_t b = 0; b < nc; b++) out[(r0 + a) * W + q0 + b] = buf[a * nc + b];
        }
    }
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

/* rt_fill_chunked_with for a normal array of mean 3 and std 0.25. */
static inline void rt_fill_chunked(int kind, uint64_t seed, int64_t step, int64_t c0, int64_t c1,
                                   double *out)
{
    rt_fill_chunked_with(kind, seed, step, 3.0, 0.25, c0, c1, out);
}

typedef void (*rt_batch_fn)(uint64_t seed, const uint64_t *idx, int n, double mean, double std,
                            double *out);

/* 10^8 standard normals of @a gen (seed 2026, indices 0..10^8-1): mean and variance within 6
 * standard errors, the fourth moment, the tail fractions beyond 1..5 sigma against the exact
 * normal tails within 6 binomial standard errors, and, with @a pair_gap > 0, the correlation of
 * the elements i and i + pair_gap of each group of 2 pair_gap (the two halves of a Box-Muller
 * pair: uncorrelated) within 6 standard errors. */
static inline void rt_normal_statistics(const char *name, rt_batch_fn gen, int pair_gap)
{
    enum { B = 1 << 16 };
    const int64_t N = 100000000;
    static uint64_t idx[B];
    static double z[B];
    long double s1 = 0, s2 = 0, s4 = 0, sc = 0;
    int64_t tail[6] = {0}, npairs = 0;
    for (int64_t i0 = 0; i0 < N; i0 += B) {
        int n = (int)(N - i0 < B ? N - i0 : B);
        for (int i = 0; i < n; i++) idx[i] = (uint64_t)(i0 + i);
        gen(2026, idx, n, 0.0, 1.0, z);
        double p1 = 0, p2 = 0, p4 = 0, pc = 0;
        for (int i = 0; i < n; i++) {
            double v = z[i], q = v * v;
            p1 += v;
            p2 += q;
            p4 += q * q;
            double av = fabs(v);
            for (int t = 1; t <= 5; t++) tail[t] += av > (double)t;
        }
        if (pair_gap > 0) /* B is a multiple of 2 pair_gap: whole groups */
            for (int i = 0; i + 2 * pair_gap <= n; i += 2 * pair_gap)
                for (int j = 0; j < pair_gap; j++, npairs++) pc += z[i + j] * z[i + j + pair_gap];
        s1 += p1;
        s2 += p2;
        s4 += p4;
        sc += pc;
    }
    double mean = (double)(s1 / N), m2 = (double)(s2 / N), m4 = (double)(s4 / N);
    double var = m2 - mean * mean, corr = npairs ? (double)(sc / npairs) : 0.0;
    cr_assert(fabs(mean) <= 6.0 / sqrt((double)N), "%s: mean %.3g", name, mean);
    cr_assert(fabs(var - 1.0) <= 6.0 * sqrt(2.0 / (double)N), "%s: variance %.9f", name, var);
    cr_assert(fabs(m4 - 3.0) <= 6.0 * sqrt(96.0 / (double)N), "%s: fourth moment %.6f", name, m4);
    if (npairs)
        cr_assert(fabs(corr) <= 6.0 / sqrt((double)npairs), "%s: pair correlation %.3g", name, corr);
    for (int t = 1; t <= 5; t++) {
        double p = erfc((double)t / sqrt(2.0));
        double se = sqrt(p * (1 - p) / (double)N);
        double got = (double)tail[t] / (double)N;
        cr_assert(fabs(got - p) <= 6.0 * se + 1.0 / (double)N,
                  "%s: P(|z| > %d): %.4g, exact %.4g (se %.2g)", name, t, got, p, se);
    }
    cr_log_info("%s over 1e8: mean %.3g var %.9f m4 %.6f corr %.3g; tails %lld %lld %lld %lld %lld",
                name, mean, var, m4, corr, (long long)tail[1], (long long)tail[2],
                (long long)tail[3], (long long)tail[4], (long long)tail[5]);
}

/* The definition's Box-Muller pair evaluated independently of random.h's arithmetic: the
 * Philox block of counter (lo32(k), hi32(k), @a tag, 0), key @a seed, then 80-bit libm with the
 * angle 2 pi b 2^-53: *z0 = r cos(theta), *z1 = r sin(theta). */
static inline void rt_ref_pair(uint64_t seed, uint64_t k, uint32_t tag, long double *z0,
                               long double *z1)
{
    gs_philox4_t w = gs_philox4x32_10((uint32_t)k, (uint32_t)(k >> 32), tag, 0u,
                                      (uint32_t)seed, (uint32_t)(seed >> 32));
    uint64_t a = (((uint64_t)w.v[1] << 32) | w.v[0]) >> 11;
    uint64_t b = (((uint64_t)w.v[3] << 32) | w.v[2]) >> 11;
    long double u1 = ((long double)a + 1.0L) * 0x1p-53L;
    long double r = sqrtl(-2.0L * logl(u1));
    long double th = 2.0L * 3.14159265358979323846264338327950288L * ((long double)b * 0x1p-53L);
    *z0 = r * cosl(th);
    *z1 = r * sinl(th);
}

/* A standard normal @a z of versions 2 and 3 against its independent evaluation @a r: within 4
 * ulp of the value, or of 1 near 0 (a few roundings of the radius and the angle), finite and
 * |z| <= 8.5719 (the largest radius); *worst keeps the largest difference in ulp. @a seed and
 * @a at (pair or index) name the value in a failure. */
static inline void rt_expect_close(double z, long double r, uint64_t seed, uint64_t at,
                                   double *worst)
{
    double e = (double)fabsl((long double)z - r) / (fabs(z) * 0x1p-52 + 0x1p-52);
    if (e > *worst) *worst = e;
    cr_assert(e <= 4.0, "seed %llu at %llu: %.17g vs %.17Lg", (unsigned long long)seed,
              (unsigned long long)at, z, r);
    cr_assert(isfinite(z) && fabs(z) <= 8.5719);
}

#endif
