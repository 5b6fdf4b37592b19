/* Shared by the float32 version-3 and version-4 normal tests (test_random_f32_v3.c,
 * test_random_f32_v4.c): the definition of each version chosen by number (element form, walk
 * state, leaf kind), an 80-bit libm evaluation of its formulas with Philox called directly, and
 * the checks that are the same for both versions (accuracy, walk order, 10^7 statistics, chunk
 * invariance through the CPU fused kernel, leaf validation). */
#ifndef GS_TESTS_CHUNKOPS_RANDOM_F32_TEST_UTIL_H
#define GS_TESTS_CHUNKOPS_RANDOM_F32_TEST_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/cpu/cpu.h"
#include "chunkops/random.h"
#include "common/error.h"

static inline uint32_t f32t_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

/* the element form of float32 version @a v (3 or 4) */
static inline float f32t_normal(int v, uint64_t seed, uint64_t i, double mean, double std)
{
    return v == 4 ? gs_random_normal_f32_v4(seed, i, mean, std)
                  : gs_random_normal_f32_v3(seed, i, mean, std);
}

static inline int32_t f32t_kind(int v)
{
    return v == 4 ? GS_LEAF_NORMAL_F32_V4 : GS_LEAF_NORMAL_F32_V3;
}

/* the walk state of version @a v */
typedef struct f32t_walk {
    int v;
    gs_f32v3_walk_t w3;
    gs_f32v4_walk_t w4;
} f32t_walk_t;

static inline void f32t_walk_init(f32t_walk_t *t, int v)
{
    t->v = v;
    gs_f32v3_walk_init(&t->w3);
    gs_f32v4_walk_init(&t->w4);
}

static inline float f32t_walk_z(f32t_walk_t *t, uint64_t seed, uint64_t i)
{
    return t->v == 4 ? gs_f32v4_walk_z(&t->w4, seed, i) : gs_f32v3_walk_z(&t->w3, seed, i);
}

/* the Philox words (wa, wb) and the half (0 cosine, 1 sine) of element @a i under version @a v,
 * from the counters as docs/random.md writes them (Philox called directly) */
static inline void f32t_words(int v, uint64_t seed, uint64_t i, uint32_t *wa, uint32_t *wb,
                              unsigned *sine)
{
    gs_philox4_t w;
    unsigned h;
    if (v == 4) {
        const uint64_t g = i >> 3;
        w = gs_philox4x32_10((uint32_t)g, (uint32_t)(g >> 32), 0x4Au, (uint32_t)(i & 1u),
                             (uint32_t)seed, (uint32_t)(seed >> 32));
        h = ((unsigned)(i >> 2) & 1u) * 2u;
    } else {
        const uint64_t k = i >> 2;
        w = gs_philox4x32_10((uint32_t)k, (uint32_t)(k >> 32), 0x47u, 0u, (uint32_t)seed,
                             (uint32_t)(seed >> 32));
        h = (unsigned)(i & 1u) * 2u;
    }
    *wa = w.v[h];
    *wb = w.v[h + 1];
    *sine = (unsigned)(i >> 1) & 1u;
}

/* the standard normal of element @a i from the definition's formulas, in 80-bit libm */
static inline long double f32t_ref_normal(int v, uint64_t seed, uint64_t i)
{
    static const long double PI_L = 3.14159265358979323846264338327950288L;
    uint32_t wa, wb;
    unsigned sine;
    f32t_words(v, seed, i, &wa, &wb, &sine);
    long double u1 = (long double)(float)((uint64_t)wa + 1u) * 0x1p-32L;
    long double r = sqrtl(-2.0L * logl(u1));
    long double th = 2.0L * PI_L * ((long double)wb * 0x1p-32L);
    return sine ? r * sinl(th) : r * cosl(th);
}

/* the worst error (ulp of the value, or of 1 near 0) of 400 000 elements against
 * f32t_ref_normal: seeds and indices spread over the whole range */
static inline double f32t_worst_ulp(int v)
{
    double worst = 0;
    for (uint64_t t = 0; t < 400000; t++) {
        uint64_t seed = t % 7 == 0 ? t : 0x9e3779b97f4a7c15ull * t;
        uint64_t i = t < 1000 ? t : (t * 0x100000001b3ull) >> (t % 20);
        float z = f32t_normal(v, seed, i, 0.0, 1.0);
        long double r = f32t_ref_normal(v, seed, i);
        long double scale = fabsl(r) > 1.0L ? fabsl(r) : 1.0L;
        double err = (double)(fabsl((long double)z - r) / (scale * 0x1p-23L));
        if (err > worst) worst = err;
    }
    return worst;
}

/* the walk gives the bits of the element form whatever the order of the reads: forward,
 * backward, odd elements (stride 2), even elements, stride 3, random */
static inline void f32t_check_walk_orders(int v)
{
    enum { N = 4096, NO = 6 * 4096 };
    const uint64_t seed = 99;
    static uint64_t order[NO];
    size_t no = 0;
    for (uint64_t i = 0; i < N; i++) order[no++] = i;
    for (uint64_t i = N; i-- > 0;) order[no++] = i;
    for (uint64_t i = 1; i < N; i += 2) order[no++] = i;
    for (uint64_t i = 0; i < N; i += 2) order[no++] = i;
    for (uint64_t i = 5; i < N; i += 3) order[no++] = i;
    for (uint64_t x = 12345; no < NO;) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        order[no++] = (x >> 33) % N;
    }
    f32t_walk_t t;
    f32t_walk_init(&t, v);
    for (size_t j = 0; j < no; j++)
        cr_assert_eq(f32t_bits(gs_random_scale_f32(f32t_walk_z(&t, seed, order[j]), 2.0, 3.0)),
                     f32t_bits(f32t_normal(v, seed, order[j], 2.0, 3.0)), "v%d read %zu", v, j);
}

/* 10^7 standard normals (seed 2026) of version @a v: mean, variance and 4th moment within 6
 * standard errors, the tails beyond 1..4 sigma, and no correlation between the two halves of a
 * pair (i, i + 2 for i & 2 = 0: both versions pair them), between neighbours (i, i + 1) nor
 * between elements four apart (v4: the two pairs of one block; v3: two blocks) */
static inline void f32t_check_statistics(int v)
{
    const int64_t n = 10000000;
    static const double ptail[5] = {0, 0.31731050786291410, 0.045500263896358417,
                                    0.0026997960632601866, 6.3342483666239957e-05};
    double s1 = 0, s2 = 0, s4 = 0, cpair = 0, cnext = 0, cfour = 0;
    int64_t tails[5] = {0};
    f32t_walk_t t;
    f32t_walk_init(&t, v);
    for (int64_t q = 0; q < n / 8; q++) {
        float z[8];
        for (int j = 0; j < 8; j++) z[j] = f32t_walk_z(&t, 2026, (uint64_t)(8 * q + j));
        for (int j = 0; j < 8; j++) {
            const double x = z[j];
            s1 += x;
            s2 += x * x;
            s4 += x * x * x * x;
            for (int s = 1; s <= 4; s++) tails[s] += fabs(x) > s;
        }
        for (int j = 0; j < 8; j++) {
            if (!(j & 2)) cpair += (double)z[j] * z[j + 2];
            if (!(j & 1)) cnext += (double)z[j] * z[j + 1];
            if (j < 4) cfour += (double)z[j] * z[j + 4];
        }
    }
    const double m = s1 / n, var = s2 / n, k4 = s4 / n, np = (double)(n / 2);
    cr_expect_lt(fabs(m), 6.0 * sqrt(1.0 / n), "v%d mean %g", v, m);
    cr_expect_lt(fabs(var - 1.0), 6.0 * sqrt(2.0 / n), "v%d var %g", v, var);
    cr_expect_lt(fabs(k4 - 3.0), 6.0 * sqrt(96.0 / n), "v%d 4th moment %g", v, k4);
    for (int s = 1; s <= 4; s++) {
        const double f = (double)tails[s] / n, p = ptail[s];
        cr_expect_lt(fabs(f - p), 6.0 * sqrt(p * (1 - p) / n), "v%d tail beyond %d sigma: %g (%g)",
                     v, s, f, p);
    }
    cr_expect_lt(fabs(cpair / np), 6.0 * sqrt(1.0 / np), "v%d pair correlation %g", v, cpair / np);
    cr_expect_lt(fabs(cnext / np), 6.0 * sqrt(1.0 / np), "v%d neighbour correlation %g", v,
                 cnext / np);
    cr_expect_lt(fabs(cfour / np), 6.0 * sqrt(1.0 / np), "v%d distance-4 correlation %g", v,
                 cfour / np);
    cr_log_info("float32 v%d, 10^7 normals: mean %.3g var %.6f 4th %.4f; correlation pair %.2g "
                "neighbour %.2g distance 4 %.2g", v, m, var, k4, cpair / np, cnext / np,
                cfour / np);
}

/* An F32T_R x F32T_C float32 array of version @a v (seed, mean 3, std 0.25) evaluated through the
 * CPU fused kernel, chunk by chunk (c0 x c1 chunks), each chunk read through view (r0 + a*rs,
 * q0 + b*cs) of the global gcols-wide index space; with @a add the program adds 1 in float32 */
enum { F32T_R = 37, F32T_C = 54 };

static inline void f32t_fill_chunked(int v, uint64_t seed, int64_t c0, int64_t c1, int64_t base,
                                     int64_t rs, int64_t cs, int64_t gcols, float *out, int add)
{
    const int64_t R = F32T_R, C = F32T_C;
    static float buf[F32T_R * F32T_C];
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
            k.leaves[0].kind = f32t_kind(v);
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

/* chunk invariance through the CPU fused kernel: views plain (C columns), x[::2, ::2] of a
 * 2C-wide array, the same from an odd column with an odd row width, x[:, ::-1] (stride -1),
 * stride 3 with an odd row width, stride -2 near 2^40, stride 2 from offset 2^40 + 3 */
static inline void f32t_check_chunk_invariance(int v)
{
    const int64_t R = F32T_R, C = F32T_C;
    static float got[F32T_R * F32T_C];
    static const int64_t chunkings[][2] = {{F32T_R, F32T_C}, {5, 7}, {1, F32T_C}, {3, 1}};
    static const struct { int64_t base, rs, cs, gcols; } views[] = {
        {0, 1, 1, F32T_C}, {0, 2, 2, 2 * F32T_C}, {1, 2, 2, 2 * F32T_C + 1},
        {F32T_C - 1, 1, -1, F32T_C}, {5, 1, 3, 3 * F32T_C + 1},
        {(INT64_C(1) << 40) + 2 * F32T_C + 1, 1, -2, 2 * F32T_C + 3},
        {(INT64_C(1) << 40) + 3, 2, 2, 2 * F32T_C + 6}};
    for (size_t w = 0; w < sizeof(views) / sizeof(views[0]); w++)
        for (size_t c = 0; c < sizeof(chunkings) / sizeof(chunkings[0]); c++)
            for (int add = 0; add < 2; add++) {
                memset(got, 0, sizeof(got));
                f32t_fill_chunked(v, 77 + w, chunkings[c][0], chunkings[c][1], views[w].base,
                                  views[w].rs, views[w].cs, views[w].gcols, got, add);
                for (int64_t i = 0; i < R; i++)
                    for (int64_t j = 0; j < C; j++) {
                        const uint64_t g = (uint64_t)(views[w].base + i * views[w].rs *
                                                      views[w].gcols + j * views[w].cs);
                        float want = f32t_normal(v, 77 + w, g, 3.0, 0.25);
                        if (add) want = want + 1.0f;
                        cr_assert_eq(f32t_bits(got[i * C + j]), f32t_bits(want),
                                     "v%d view %zu chunking %zu add %d: element (%lld, %lld) "
                                     "%.9g, definition %.9g", v, w, c, add, (long long)i,
                                     (long long)j, (double)got[i * C + j], (double)want);
                    }
            }
}

/* the leaf kind of version @a v is validated (read as float32 only, indices >= 0; kinds past
 * the last and negative ones are unknown) and evaluated by the CPU backend */
static inline void f32t_check_leaf_validation(int v)
{
    float out[4];
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = 4;
    k.nleaves = 1;
    k.leaves[0].kind = f32t_kind(v);
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
    cr_assert(gs_leaf_kind_valid(f32t_kind(v)));
    cr_assert(!gs_leaf_kind_valid(GS_LEAF_KIND_COUNT));
    cr_assert(!gs_leaf_kind_valid(-1));
    static const int32_t bads[] = {GS_LEAF_KIND_COUNT + 7, GS_LEAF_KIND_COUNT, -1};
    for (size_t b = 0; b < sizeof(bads) / sizeof(bads[0]); b++) {
        k.leaves[0].kind = bads[b];
        cr_assert_eq(gs_kfused_validate(&k), GS_ERR_INVALID_PARAM, "kind %d", (int)bads[b]);
        cr_assert(strstr(gs_last_error(), "unknown kind") != NULL, "%s", gs_last_error());
    }
    k.leaves[0].kind = f32t_kind(v);
    k.leaves[0].seed = 5;
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    cr_assert_eq(gs_chunkops_cpu_ops.fused(ctx, NULL, &k), GS_OK, "%s", gs_last_error());
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(f32t_bits(out[i]), f32t_bits(f32t_normal(v, 5, (uint64_t)i, 0, 1)));
}

#endif
