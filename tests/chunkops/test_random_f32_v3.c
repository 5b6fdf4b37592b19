/* float32 version 3 of the normal (chunkops/random.h, docs/random.md "float32 version 3"):
 * elements 4k, 4k + 2 share the Box-Muller pair of words (w0, w1) of the block with counter
 * (lo32(k), hi32(k), 0x47, 0), elements 4k + 1, 4k + 3 the pair (w2, w3). Checked here: reference
 * bits against an independent pure-Python evaluation (random_f32_ref.py --v3); values against a
 * long double evaluation of the formulas; the per-element, pair and walk forms give the same
 * bits in any access order; the statistics of 10^7 samples; chunk invariance through the CPU
 * fused kernel under several chunkings and strided reads; validation of the leaf kind. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/cpu/cpu.h"
#include "chunkops/random.h"
#include "common/error.h"

static const long double PI_L = 3.14159265358979323846264338327950288L;

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* the standard normal of element i from the definition's formulas, in 80-bit libm: Philox
 * called directly with the v3 counter (k, 0x47), words of pair i & 1, cosine for i & 2 = 0 */
static long double ref_normal_v3(uint64_t seed, uint64_t i)
{
    const uint64_t k = i >> 2;
    gs_philox4_t w = gs_philox4x32_10((uint32_t)k, (uint32_t)(k >> 32), 0x47u, 0u,
                                      (uint32_t)seed, (uint32_t)(seed >> 32));
    const unsigned h = (unsigned)(i & 1u) * 2u;
    const uint32_t wa = w.v[h], wb = w.v[h + 1];
    long double u1 = (long double)(float)((uint64_t)wa + 1u) * 0x1p-32L;
    long double r = sqrtl(-2.0L * logl(u1));
    long double th = 2.0L * PI_L * ((long double)wb * 0x1p-32L);
    return (i & 2u) ? r * sinl(th) : r * cosl(th);
}

#include "random_f32_v3_ref.inc"

Test(chunkops_random_f32_v3, bits_match_the_python_evaluation)
{
    for (size_t r = 0; r < sizeof(f32v3_ref) / sizeof(f32v3_ref[0]); r++) {
        const uint64_t s = f32v3_ref[r].seed, i = f32v3_ref[r].i;
        cr_expect_eq(f32_bits(gs_random_normal_f32_v3(s, i, 0.0, 1.0)), f32v3_ref[r].n01,
                     "normal(0, 1) seed %llu i %llu", (unsigned long long)s, (unsigned long long)i);
        cr_expect_eq(f32_bits(gs_random_normal_f32_v3(s, i, 10.0, 2.0)), f32v3_ref[r].n10_2,
                     "normal(10, 2) seed %llu i %llu", (unsigned long long)s, (unsigned long long)i);
        cr_expect_eq(f32_bits(gs_random_normal_f32_v3(s, i, -1.5, 0.25)), f32v3_ref[r].nm,
                     "normal(-1.5, 0.25) seed %llu i %llu", (unsigned long long)s,
                     (unsigned long long)i);
    }
}

Test(chunkops_random_f32_v3, normal_agrees_with_an_independent_evaluation)
{
    double worst = 0;
    for (uint64_t t = 0; t < 400000; t++) {
        uint64_t seed = t % 7 == 0 ? t : 0x9e3779b97f4a7c15ull * t;
        uint64_t i = t < 1000 ? t : (t * 0x100000001b3ull) >> (t % 20);
        float z = gs_random_normal_f32_v3(seed, i, 0.0, 1.0);
        long double r = ref_normal_v3(seed, i);
        /* a few roundings of the radius and the angle: 4 ulp of the value, or of 1 near 0 */
        long double scale = fabsl(r) > 1.0L ? fabsl(r) : 1.0L;
        double err = (double)(fabsl((long double)z - r) / (scale * 0x1p-23L));
        if (err > worst) worst = err;
    }
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
            cr_assert_eq(f32_bits(zc), f32_bits(gs_random_normal_f32_v3(seed, 4 * kb + h, 0, 1)));
            cr_assert_eq(f32_bits(zs),
                         f32_bits(gs_random_normal_f32_v3(seed, 4 * kb + 2 + h, 0, 1)));
            cr_assert_eq(f32_bits(zc), f32_bits(gs__normal_f32(w.v[2 * h], w.v[2 * h + 1], 0)));
            cr_assert_eq(f32_bits(zs), f32_bits(gs__normal_f32(w.v[2 * h], w.v[2 * h + 1], 1)));
        }
    }
    /* every quadrant of the angle, and the extreme radius words */
    static const uint32_t was[] = {0u, 1u, 12345u, 0x80000000u, 0xfffffffeu, 0xffffffffu};
    for (size_t a = 0; a < sizeof(was) / sizeof(was[0]); a++)
        for (uint64_t b = 0; b < (1ull << 32); b += 0x0fff1u) {
            float zc, zs;
            gs__normal_pair_f32(was[a], (uint32_t)b, &zc, &zs);
            cr_assert_eq(f32_bits(zc), f32_bits(gs__normal_f32(was[a], (uint32_t)b, 0)));
            cr_assert_eq(f32_bits(zs), f32_bits(gs__normal_f32(was[a], (uint32_t)b, 1)));
        }
    const uint64_t seed = 99, n = 4096;
    uint64_t order[4 * 4096];
    size_t no = 0;
    for (uint64_t i = 0; i < n; i++) order[no++] = i;
    for (uint64_t i = n; i-- > 0;) order[no++] = i;
    for (uint64_t i = 1; i < n; i += 2) order[no++] = i;
    for (uint64_t x = 12345; no < sizeof(order) / sizeof(order[0]);) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        order[no++] = (x >> 33) % n;
    }
    gs_f32v3_walk_t t;
    gs_f32v3_walk_init(&t);
    for (size_t j = 0; j < no; j++)
        cr_assert_eq(f32_bits(gs_random_scale_f32(gs_f32v3_walk_z(&t, seed, order[j]), 2.0, 3.0)),
                     f32_bits(gs_random_normal_f32_v3(seed, order[j], 2.0, 3.0)), "read %zu", j);
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

/* 10^7 standard normals (seed 2026): mean, variance and 4th moment within 6 standard errors,
 * the tails beyond 1..4 sigma, and no correlation between the two halves of a pair (4k, 4k + 2)
 * nor between neighbours (4k, 4k + 1) */
Test(chunkops_random_f32_v3, statistics_of_ten_million, .timeout = 600)
{
    const int64_t n = 10000000;
    static const double ptail[5] = {0, 0.31731050786291410, 0.045500263896358417,
                                    0.0026997960632601866, 6.3342483666239957e-05};
    double s1 = 0, s2 = 0, s4 = 0, cpair = 0, cnext = 0;
    int64_t tails[5] = {0};
    gs_f32v3_walk_t t;
    gs_f32v3_walk_init(&t);
    for (int64_t q = 0; q < n / 4; q++) {
        float z[4];
        for (int j = 0; j < 4; j++) z[j] = gs_f32v3_walk_z(&t, 2026, (uint64_t)(4 * q + j));
        for (int j = 0; j < 4; j++) {
            const double v = z[j];
            s1 += v;
            s2 += v * v;
            s4 += v * v * v * v;
            for (int s = 1; s <= 4; s++) tails[s] += fabs(v) > s;
        }
        cpair += (double)z[0] * z[2] + (double)z[1] * z[3];
        cnext += (double)z[0] * z[1] + (double)z[2] * z[3];
    }
    const double m = s1 / n, v = s2 / n, k4 = s4 / n;
    cr_expect_lt(fabs(m), 6.0 * sqrt(1.0 / n), "mean %g", m);
    cr_expect_lt(fabs(v - 1.0), 6.0 * sqrt(2.0 / n), "var %g", v);
    cr_expect_lt(fabs(k4 - 3.0), 6.0 * sqrt(96.0 / n), "4th moment %g", k4);
    for (int s = 1; s <= 4; s++) {
        const double f = (double)tails[s] / n, p = ptail[s];
        cr_expect_lt(fabs(f - p), 6.0 * sqrt(p * (1 - p) / n), "tail beyond %d sigma: %g (%g)",
                     s, f, p);
    }
    cr_expect_lt(fabs(cpair / (n / 2)), 6.0 * sqrt(1.0 / (n / 2)), "pair correlation %g",
                 cpair / (n / 2));
    cr_expect_lt(fabs(cnext / (n / 2)), 6.0 * sqrt(1.0 / (n / 2)), "neighbour correlation %g",
                 cnext / (n / 2));
}

/* An R x C float32 v3 array (seed, mean 3, std 0.25) evaluated through the CPU fused kernel,
 * chunk by chunk (c0 x c1 chunks), each chunk read through view (r0 + a*rs, q0 + b*cs) of the
 * global C-wide index space: with rs = 1, cs = 1 the plain array, otherwise a strided read */
enum { R = 37, C = 54 };

static void fill_chunked(uint64_t seed, int64_t c0, int64_t c1, int64_t base, int64_t rs,
                         int64_t cs, int64_t gcols, float *out, int add)
{
    static float buf[R * C];
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    for (int64_t r0 = 0; r0 < R; r0 += c0) {
        for (int64_t q0 = 0; q0 < C; q0 += c1) {
            int64_t nr = r0 + c0 > R ? R - r0 : c0, nc = q0 + c1 > C ? C - q0 : c1;
            gs_kfused_t k;
            memset(&k, 0, sizeof(k));
            k.ndim = 2;
            k.shape[0] = nr;
            k.shape[1] = nc;
            k.nleaves = 1;
            k.leaves[0].kind = GS_LEAF_NORMAL_F32_V3;
            k.leaves[0].base = base + r0 * rs * gcols + q0 * cs;
            k.leaves[0].stride[0] = rs * gcols;
            k.leaves[0].stride[1] = cs;
            k.leaves[0].seed = seed;
            k.leaves[0].p0 = 3.0;
            k.leaves[0].p1 = 0.25;
            k.nprog = 1;
            k.prog[0].op = GS_OP_LEAF;
            k.prog[0].dtype = GS_DTYPE_FLOAT32;
            if (add) {
                k.prog[1].op = GS_OP_ADD_IMM;
                k.prog[1].imm = 1.0;
                k.prog[1].dtype = GS_DTYPE_FLOAT32;
                k.nprog = 2;
            }
            k.terminal = GS_TERM_STORE;
            k.out_dtype = GS_DTYPE_FLOAT32;
            k.out = (double *)buf;
            cr_assert_eq(gs_chunkops_cpu_ops.fused(ctx, NULL, &k), GS_OK, "%s", gs_last_error());
            for (int64_t a = 0; a < nr; a++)
                for (int64_t b = 0; b < nc; b++) out[(r0 + a) * C + q0 + b] = buf[a * nc + b];
        }
    }
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

Test(chunkops_random_f32_v3, fused_kernel_values_do_not_depend_on_chunking)
{
    static float got[R * C];
    static const int64_t chunkings[][2] = {{R, C}, {5, 7}, {1, C}, {3, 1}};
    /* views: plain (C columns), x[::2, ::2] of a 2C-wide array, the same from an odd column,
     * x[:, ::-1] (stride -1), stride 3 with an odd row width, stride -2 */
    static const struct { int64_t base, rs, cs, gcols; } views[] = {
        {0, 1, 1, C}, {0, 2, 2, 2 * C}, {1, 2, 2, 2 * C + 1}, {C - 1, 1, -1, C},
        {5, 1, 3, 3 * C + 1}, {(INT64_C(1) << 40) + 2 * C + 1, 1, -2, 2 * C + 3}};
    for (size_t v = 0; v < sizeof(views) / sizeof(views[0]); v++)
        for (size_t c = 0; c < sizeof(chunkings) / sizeof(chunkings[0]); c++)
            for (int add = 0; add < 2; add++) {
                memset(got, 0, sizeof(got));
                fill_chunked(77 + v, chunkings[c][0], chunkings[c][1], views[v].base,
                             views[v].rs, views[v].cs, views[v].gcols, got, add);
                for (int64_t i = 0; i < R; i++)
                    for (int64_t j = 0; j < C; j++) {
                        const uint64_t g = (uint64_t)(views[v].base + i * views[v].rs *
                                                      views[v].gcols + j * views[v].cs);
                        float want = gs_random_normal_f32_v3(77 + v, g, 3.0, 0.25);
                        if (add) want = want + 1.0f;
                        cr_assert_eq(f32_bits(got[i * C + j]), f32_bits(want),
                                     "view %zu chunking %zu add %d: element (%lld, %lld) %.9g, "
                                     "definition %.9g", v, c, add, (long long)i, (long long)j,
                                     (double)got[i * C + j], (double)want);
                    }
            }
}

/* the leaf kind is validated: read as float32 only; kinds past the last and negative ones are
 * unknown */
Test(chunkops_random_f32_v3, leaf_validation)
{
    float out[4];
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = 4;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_NORMAL_F32_V3;
    k.leaves[0].stride[0] = 1;
    k.leaves[0].p1 = 1.0;
    k.nprog = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[0].dtype = GS_DTYPE_FLOAT64;
    k.out = (double *)out;
    cr_assert_eq(gs_kfused_validate(&k), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "float32") != NULL, "%s", gs_last_error());
    k.prog[0].dtype = GS_DTYPE_FLOAT32;
    k.out_dtype = GS_DTYPE_FLOAT32;
    cr_assert_eq(gs_kfused_validate(&k), GS_OK, "%s", gs_last_error());
    k.leaves[0].base = -1;
    cr_assert_eq(gs_kfused_validate(&k), GS_ERR_INVALID_PARAM);
    k.leaves[0].base = 0;
    cr_assert(gs_leaf_kind_valid(GS_LEAF_NORMAL_F32_V3));
    cr_assert(gs_leaf_kind_valid(GS_LEAF_NORMAL_V3));
    cr_assert(!gs_leaf_kind_valid(GS_LEAF_KIND_COUNT));
    cr_assert(!gs_leaf_kind_valid(-1));
    static const int32_t bads[] = {GS_LEAF_KIND_COUNT + 7, GS_LEAF_KIND_COUNT, -1};
    for (size_t b = 0; b < sizeof(bads) / sizeof(bads[0]); b++) {
        const int32_t bad = bads[b];
        k.leaves[0].kind = bad;
        cr_assert_eq(gs_kfused_validate(&k), GS_ERR_INVALID_PARAM, "kind %d", (int)bad);
        cr_assert(strstr(gs_last_error(), "unknown kind") != NULL, "%s", gs_last_error());
    }
    /* the CPU backend evaluates it */
    k.leaves[0].kind = GS_LEAF_NORMAL_F32_V3;
    k.leaves[0].seed = 5;
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    cr_assert_eq(gs_chunkops_cpu_ops.fused(ctx, NULL, &k), GS_OK, "%s", gs_last_error());
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(f32_bits(out[i]), f32_bits(gs_random_normal_f32_v3(5, (uint64_t)i, 0, 1)));
}
