/* Batched random generation for the CPU fused kernel: the definition of chunkops/random.h
 * (docs/random.md) evaluated for a tile of element indices, written so the compiler
 * vectorises it (no calls, no branches in the element loops):
 *   - Philox4x32-10 exactly as gs_philox4x32_10 (integer arithmetic: bit-identical), with
 *     AVX-512F or AVX2 intrinsics when the CPU has them;
 *   - 53-bit words to double exactly (a < 2^53 is representable);
 *   - log and cos by branch-free ports of fdlibm's __ieee754_log and __kernel_cos/sin
 *     (with Cody-Waite reduction of x = fl(2 pi u2) in [0, 2 pi)), each within 1 ulp, so a
 *     value differs from libm-based gs_random_normal() by a few ulps at most (about 1e-15
 *     relative, absolute near 0); sqrt is IEEE (correctly rounded) as in the definition.
 * The arithmetic is the same IEEE sequence in every code path (no contraction into FMA:
 * ISO C mode), so every CPU gives bit-identical results; on x86-64 the loops are cloned for
 * AVX-512 and AVX2 and the best clone is picked at load time (not under ASan or TSan: an
 * instrumented resolver runs before the sanitizer runtime is up).
 * Version 2 and 3 normals (gs__cpu_random_normal_v2/_v3) differ only in how they group elements
 * into pairs; one batch routine (gs__pairs_scatter) does the vectorised Philox (counter
 * word c2 = GS_RANDOM_V2_TAG / GS_RANDOM_V3_TAG, one block per pair), random.h's libm-free
 * arithmetic (the scalar bits) and the stores of both. */
#include "chunkops/cpu/cpu.h"
#include "chunkops/random.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && !defined(__OPTIMIZE_SIZE__)
#define GS__CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GS__CLONES
#endif

#define GS__RBLOCK 256

static inline uint64_t gs__dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

static inline double gs__bitsd(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof(d));
    return d;
}

/* Exact conversion of a < 2^53 to double without a 64-bit integer conversion instruction:
 * both 32-bit halves through the 2^52 magic number, then one exact addition. */
static inline double gs__u53_to_double(uint64_t a)
{
    const uint64_t magic = 0x4330000000000000ull; /* 2^52 */
    double hi = gs__bitsd(magic | (a >> 32)) - 4503599627370496.0;
    double lo = gs__bitsd(magic | (a & 0xffffffffull)) - 4503599627370496.0;
    return hi * 4294967296.0 + lo;
}

/* log(x) for x in [2^-53, 1] (fdlibm e_log.c, both accuracy paths computed and selected). */
static inline double gs__log_unit(double x)
{
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01,
                 Lg3 = 2.857142874366239149e-01, Lg4 = 2.222219843214978396e-01,
                 Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
                 Lg7 = 1.479819860511658591e-01;
    uint64_t ix = gs__dbits(x);
    uint64_t mant = ix & 0x000fffffffffffffull;
    int64_t k = (int64_t)(ix >> 52) - 1023;
    /* m = 1.mant, halved when >= sqrt(2): carry into bit 52 iff mant >= 0x6a09e667f3bcd */
    uint64_t i = (mant + 0x95f619980c433ull) & 0x0010000000000000ull;
    double m = gs__bitsd(mant | (i ^ 0x3ff0000000000000ull));
    k += (int64_t)(i >> 52);
    double f = m - 1.0;
    uint64_t hx = (gs__dbits(m) >> 32) & 0x000fffffull; /* fdlibm's high mantissa word */
    double s = f / (2.0 + f);
    double dk = (double)(int32_t)k;
    double z = s * s;
    double w = z * z;
    double t1 = w * (Lg2 + w * (Lg4 + w * Lg6));
    double t2 = z * (Lg1 + w * (Lg3 + w * (Lg5 + w * Lg7)));
    double R = t2 + t1;
    double hfsq = 0.5 * f * f;
    double r_big = dk * ln2_hi - ((hfsq - (s * (hfsq + R) + dk * ln2_lo)) - f);
    double r_small = dk * ln2_hi - ((s * (f - R) - dk * ln2_lo) - f);
    /* branch-free select: big = 0x6147a < hx < 0x6b851 (hx < 2^20: the differences are
     * negative exactly when the comparisons fail) */
    uint64_t big = ((0x6147aull - hx) & (hx - 0x6b851ull)) >> 63;
    uint64_t mask = (uint64_t)0 - big;
    return gs__bitsd((gs__dbits(r_big) & mask) | (gs__dbits(r_small) & ~mask));
}

/* cos(x) for x in [0, 2 pi + 1): Cody-Waite reduction by pi/2 to y0 + y1 (two rounds, about
 * 118 bits), then fdlibm's __kernel_cos / __kernel_sin with the tail. */
static inline double gs__cos_small(double x)
{
    const double invpio2 = 6.36619772367581382433e-01;
    const double pio2_1 = 1.57079632673412561417e+00, pio2_2 = 6.07710050630396597660e-11,
                 pio2_2t = 2.02226624879595063154e-21;
    const double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                 C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                 C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
    const double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                 S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                 S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
    const double magic = 6755399441055744.0; /* 1.5 * 2^52: round to nearest integer */

    double tn = x * invpio2 + magic;
    uint64_t n = gs__dbits(tn) & 3u;
    double fn = tn - magic;
    double r = x - fn * pio2_1; /* exact */
    double w = fn * pio2_2;     /* exact */
    double t = r;
    r = t - w;
    w = fn * pio2_2t - ((t - r) - w);
    double y0 = r - w;
    double y1 = (r - y0) - w;

    double z = y0 * y0;
    /* __kernel_cos(y0, y1) */
    double rc = z * (C1 + z * (C2 + z * (C3 + z * (C4 + z * (C5 + z * C6)))));
    double ax = gs__bitsd(gs__dbits(y0) & 0x7fffffffffffffffull);
    double qx = gs__bitsd((gs__dbits(ax) - 0x0020000000000000ull) & 0xffffffff00000000ull);
    {
        uint64_t lo = (uint64_t)0 - (uint64_t)(ax < 0.3), hi = (uint64_t)0 - (uint64_t)(ax > 0.78125);
        uint64_t q = (gs__dbits(qx) & ~hi) | (gs__dbits(0.28125) & hi);
        qx = gs__bitsd(q & ~lo); /* +0.0 below 0.3 */
    }
    double hz = 0.5 * z - qx;
    double a = 1.0 - qx;
    double c = a - (hz - (z * rc - y0 * y1));
    /* __kernel_sin(y0, y1, 1) */
    double v = z * y0;
    double rs = S2 + z * (S3 + z * (S4 + z * (S5 + z * S6)));
    double sn = y0 - ((z * (0.5 * y1 - v * rs) - y1) - v * S1);
    /* cos(x) = cos y, -sin y, -cos y, sin y for n = 0, 1, 2, 3 */
    uint64_t odd = (uint64_t)0 - (n & 1u);
    uint64_t res = (gs__dbits(sn) & odd) | (gs__dbits(c) & ~odd);
    return gs__bitsd(res ^ (((n + 1u) & 2u) << 62));
}

/* Philox4x32-10 of counters (idx, 0), key (seed): the two 53-bit words of each block.
 * Portable version, one block per iteration. */
static void gs__philox_words_scalar(uint64_t seed, const uint64_t *restrict idx, int n,
                                    uint64_t *restrict wa, uint64_t *restrict wb, uint32_t tag)
{
    for (int i = 0; i < n; i++) {
        gs_philox4_t r = gs_philox4x32_10((uint32_t)idx[i], (uint32_t)(idx[i] >> 32), tag, 0u,
                                          (uint32_t)seed, (uint32_t)(seed >> 32));
        wa[i] = (((uint64_t)r.v[1] << 32) | r.v[0]) >> 11;
        wb[i] = (((uint64_t)r.v[3] << 32) | r.v[2]) >> 11;
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GS__HAVE_PHILOX_AVX2 1

/* AVX2: four blocks per iteration, each 32-bit word in a 64-bit lane, which is exactly what
 * vpmuludq (32 x 32 -> 64 bit products of the lanes' low halves) consumes. */
__attribute__((target("avx2"))) static void
gs__philox_words_avx2(uint64_t seed, const uint64_t *restrict idx, int n, uint64_t *restrict wa,
                      uint64_t *restrict wb, uint32_t tag)
{
    const __m256i lo32 = _mm256_set1_epi64x(0xffffffffll);
    const __m256i m0 = _mm256_set1_epi64x(GS_PHILOX_M0), m1 = _mm256_set1_epi64x(GS_PHILOX_M1);
    __m256i k0[10], k1[10];
    uint32_t a0 = (uint32_t)seed, a1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        k0[r] = _mm256_set1_epi64x(a0);
        k1[r] = _mm256_set1_epi64x(a1);
        a0 += GS_PHILOX_W0;
        a1 += GS_PHILOX_W1;
    }
    /* GS__PV vectors per iteration: the rounds are a dependency chain, interleaving
     * independent vectors keeps the multipliers busy */
#define GS__PV 4
    int i = 0;
    for (; i + 4 * GS__PV <= n; i += 4 * GS__PV) {
        __m256i c0[GS__PV], c1[GS__PV], c2[GS__PV], c3[GS__PV];
        for (int v = 0; v < GS__PV; v++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(idx + i + 4 * v));
            c0[v] = _mm256_and_si256(x, lo32);
            c1[v] = _mm256_srli_epi64(x, 32);
            c2[v] = _mm256_set1_epi64x(tag);
            c3[v] = _mm256_setzero_si256();
        }
        for (int r = 0; r < 10; r++) {
            for (int v = 0; v < GS__PV; v++) {
                __m256i p0 = _mm256_mul_epu32(c0[v], m0);
                __m256i p1 = _mm256_mul_epu32(c2[v], m1);
                c0[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[v]), k0[r]);
                c2[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[v]), k1[r]);
                c1[v] = _mm256_and_si256(p1, lo32);
                c3[v] = _mm256_and_si256(p0, lo32);
            }
        }
        for (int v = 0; v < GS__PV; v++) {
            __m256i a = _mm256_srli_epi64(_mm256_or_si256(_mm256_slli_epi64(c1[v], 32), c0[v]), 11);
            __m256i b = _mm256_srli_epi64(_mm256_or_si256(_mm256_slli_epi64(c3[v], 32), c2[v]), 11);
            _mm256_storeu_si256((__m256i *)(wa + i + 4 * v), a);
            _mm256_storeu_si256((__m256i *)(wb + i + 4 * v), b);
        }
    }
#undef GS__PV
    gs__philox_words_scalar(seed, idx + i, n - i, wa + i, wb + i, tag);
}

/* AVX-512F: the same with eight blocks per vector. */
__attribute__((target("avx512f"))) static void
gs__philox_words_avx512(uint64_t seed, const uint64_t *restrict idx, int n,
                        uint64_t *restrict wa, uint64_t *restrict wb, uint32_t tag)
{
    const __m512i lo32 = _mm512_set1_epi64(0xffffffffll);
    const __m512i m0 = _mm512_set1_epi64(GS_PHILOX_M0), m1 = _mm512_set1_epi64(GS_PHILOX_M1);
    __m512i k0[10], k1[10];
    uint32_t a0 = (uint32_t)seed, a1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        k0[r] = _mm512_set1_epi64(a0);
        k1[r] = _mm512_set1_epi64(a1);
        a0 += GS_PHILOX_W0;
        a1 += GS_PHILOX_W1;
    }
    /* GS__PV vectors per iteration: the rounds are a dependency chain, interleaving
     * independent vectors keeps the multipliers busy */
#define GS__PV 4
    int i = 0;
    for (; i + 8 * GS__PV <= n; i += 8 * GS__PV) {
        __m512i c0[GS__PV], c1[GS__PV], c2[GS__PV], c3[GS__PV];
        for (int v = 0; v < GS__PV; v++) {
            __m512i x = _mm512_loadu_si512((const void *)(idx + i + 8 * v));
            c0[v] = _mm512_and_si512(x, lo32);
            c1[v] = _mm512_srli_epi64(x, 32);
            c2[v] = _mm512_set1_epi64(tag);
            c3[v] = _mm512_setzero_si512();
        }
        for (int r = 0; r < 10; r++) {
            for (int v = 0; v < GS__PV; v++) {
                __m512i p0 = _mm512_mul_epu32(c0[v], m0);
                __m512i p1 = _mm512_mul_epu32(c2[v], m1);
                c0[v] = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p1, 32), c1[v]), k0[r]);
                c2[v] = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p0, 32), c3[v]), k1[r]);
                c1[v] = _mm512_and_si512(p1, lo32);
                c3[v] = _mm512_and_si512(p0, lo32);
            }
        }
        for (int v = 0; v < GS__PV; v++) {
            __m512i a = _mm512_srli_epi64(_mm512_or_si512(_mm512_slli_epi64(c1[v], 32), c0[v]), 11);
            __m512i b = _mm512_srli_epi64(_mm512_or_si512(_mm512_slli_epi64(c3[v], 32), c2[v]), 11);
            _mm512_storeu_si512((void *)(wa + i + 8 * v), a);
            _mm512_storeu_si512((void *)(wb + i + 8 * v), b);
        }
    }
#undef GS__PV
    gs__philox_words_avx2(seed, idx + i, n - i, wa + i, wb + i, tag);
}
#endif

/* Counters (idx, tag, 0): tag 0 is version 1's block of element idx, GS_RANDOM_V2_TAG version
 * 2's block of pair idx. */
static void gs__philox_words(uint64_t seed, const uint64_t *restrict idx, int n,
                             uint64_t *restrict wa, uint64_t *restrict wb, uint32_t tag)
{
#ifdef GS__HAVE_PHILOX_AVX2
    if (__builtin_cpu_supports("avx512f")) {
        gs__philox_words_avx512(seed, idx, n, wa, wb, tag);
        return;
    }
    if (__builtin_cpu_supports("avx2")) {
        gs__philox_words_avx2(seed, idx, n, wa, wb, tag);
        return;
    }
#endif
    gs__philox_words_scalar(seed, idx, n, wa, wb, tag);
}

GS__CLONES static void gs__normal_from_words(const uint64_t *restrict wa,
                                             const uint64_t *restrict wb, int n, double mean,
                                             double std, double *restrict out)
{
    for (int i = 0; i < n; i++) {
        double u1 = gs__u53_to_double(wa[i] + 1) * GS_TWO_POW_M53;
        double u2 = gs__u53_to_double(wb[i]) * GS_TWO_POW_M53;
        double z = __builtin_sqrt(-2.0 * gs__log_unit(u1)) * gs__cos_small(GS_TWO_PI * u2);
        out[i] = mean + std * z;
    }
}

GS__CLONES static void gs__uniform_from_words(const uint64_t *restrict wa, int n, double low,
                                              double high, double *restrict out)
{
    double span = high - low;
    for (int i = 0; i < n; i++) out[i] = low + span * (gs__u53_to_double(wa[i]) * GS_TWO_POW_M53);
}

void gs__cpu_random_normal(uint64_t seed, const uint64_t *idx, int n, double mean, double std,
                           double *out)
{
    uint64_t wa[GS__RBLOCK], wb[GS__RBLOCK];
    for (int i = 0; i < n; i += GS__RBLOCK) {
        int m = n - i < GS__RBLOCK ? n - i : GS__RBLOCK;
        gs__philox_words(seed, idx + i, m, wa, wb, 0u);
        gs__normal_from_words(wa, wb, m, mean, std, out + i);
    }
}

void gs__cpu_random_uniform(uint64_t seed, const uint64_t *idx, int n, double low, double high,
                            double *out)
{
    uint64_t wa[GS__RBLOCK], wb[GS__RBLOCK];
    for (int i = 0; i < n; i += GS__RBLOCK) {
        int m = n - i < GS__RBLOCK ? n - i : GS__RBLOCK;
        gs__philox_words(seed, idx + i, m, wa, wb, 0u);
        gs__uniform_from_words(wa, m, low, high, out + i);
    }
}

/* Version 2: the standard normals z0, z1 of n pairs from their words, the arithmetic of
 * random.h's gs_random_normal_pair_v2 written without branches or 64-bit integer conversions
 * (so it vectorises): (double)(a + 1) as gs__u53_to_double (exact either way), the angle's
 * integer d as a double through the 1.5 * 2^52 magic number (exact: |d| <= 2^50), quadrant
 * signs as sign-bit flips (what unary minus does). The same bits as the scalar definition. */
GS__CLONES static void gs__pairs_from_words(const uint64_t *restrict wa,
                                            const uint64_t *restrict wb, int n,
                                            double *restrict z0, double *restrict z1)
{
    for (int i = 0; i < n; i++) {
        double x = gs__bitsd(gs__dbits(gs__u53_to_double(wa[i] + 1)) - ((uint64_t)53 << 52));
        double r = __builtin_sqrt(-2.0 * gs__log_v2(x));
        uint64_t b = wb[i];
        uint64_t q = (b + ((uint64_t)1 << 50)) >> 51;
        uint64_t nq = q & 3u;
        uint64_t d = b - (q << 51); /* two's complement of the signed d */
        double dd = gs__bitsd(0x4338000000000000ull + d) - 6755399441055744.0;
        double y = dd * GS_PI_2M52;
        double C = gs__kcos_v2(y), S = gs__ksin_v2(y);
        uint64_t odd = (uint64_t)0 - (nq & 1u);
        uint64_t cb = (gs__dbits(S) & odd) | (gs__dbits(C) & ~odd);   /* |cos theta| */
        uint64_t sb = (gs__dbits(C) & odd) | (gs__dbits(S) & ~odd);   /* |sin theta| */
        double c = gs__bitsd(cb ^ (((nq + 1u) & 2u) << 62));
        double s = gs__bitsd(sb ^ ((nq & 2u) << 62));
        z0[i] = r * c;
        z1[i] = r * s;
    }
}

/* Versions 2 and 3: a batch of pairs to compute, pair p with counter k[p] and the positions
 * at0[p] (half 0, the cosine) and at1[p] (half 1, the sine) its halves go to, -1 for a half not
 * asked for. */
typedef struct {
    uint64_t k[GS__RBLOCK];
    int32_t at0[GS__RBLOCK], at1[GS__RBLOCK];
    int n;
} gs__pairs_t;

static inline void gs__pairs_add(gs__pairs_t *b, uint64_t k, int32_t at0, int32_t at1)
{
    b->k[b->n] = k;
    b->at0[b->n] = at0;
    b->at1[b->n++] = at1;
}

/* An element alone in the batch: position @a at takes half @a half of pair @a k. */
static inline void gs__pairs_add_alone(gs__pairs_t *b, uint64_t k, unsigned half, int32_t at)
{
    gs__pairs_add(b, k, half ? -1 : at, half ? at : -1);
}

/* The normals of the batch @a b, the blocks with counters (k[p], tag, 0): mean + std * z0 of
 * pair p goes to out[at0[p]] and mean + std * z1 to out[at1[p]]. Empties the batch. */
static void gs__pairs_scatter(gs__pairs_t *restrict b, uint64_t seed, uint32_t tag, double mean,
                              double std, double *restrict out)
{
    uint64_t wa[GS__RBLOCK], wb[GS__RBLOCK];
    double z0[GS__RBLOCK], z1[GS__RBLOCK];
    if (b->n <= 0) return;
    gs__philox_words(seed, b->k, b->n, wa, wb, tag);
    gs__pairs_from_words(wa, wb, b->n, z0, z1);
    for (int p = 0; p < b->n; p++) {
        if (b->at0[p] >= 0) out[b->at0[p]] = mean + std * z0[p];
        if (b->at1[p] >= 0) out[b->at1[p]] = mean + std * z1[p];
    }
    b->n = 0;
}

/* Version 2: pair k holds elements 2k (half 0) and 2k + 1 (half 1). An even element followed
 * by its partner is one pair; any other element is alone and takes its own half. */
void gs__cpu_random_normal_v2(uint64_t seed, const uint64_t *idx, int n, double mean, double std,
                              double *out)
{
    gs__pairs_t b;
    b.n = 0;
    int i = 0;
    while (i < n) {
        while (i < n && b.n < GS__RBLOCK) {
            const uint64_t e = idx[i];
            if ((e & 1u) == 0 && i + 1 < n && idx[i + 1] == e + 1) {
                gs__pairs_add(&b, e >> 1, i, i + 1);
                i += 2;
            } else {
                gs__pairs_add_alone(&b, e >> 1, (unsigned)(e & 1u), i);
                i++;
            }
        }
        gs__pairs_scatter(&b, seed, GS_RANDOM_V2_TAG, mean, std, out);
    }
}

/* Version 3: pair k = ((i >> 2) << 1) | (i & 1) holds elements i0 = ((k >> 1) << 2) | (k & 1)
 * (half 0, the cosine) and i0 + 2 (half 1). A whole aligned group of four (unit stride) is two
 * pairs, an element followed by its partner (stride 2) one; any other element is alone and
 * takes its own half. */
void gs__cpu_random_normal_v3(uint64_t seed, const uint64_t *idx, int n, double mean, double std,
                              double *out)
{
    gs__pairs_t b;
    b.n = 0;
    int i = 0;
    while (i < n) {
        while (i < n && b.n + 2 <= GS__RBLOCK) {
            const uint64_t e = idx[i];
            if ((e & 3u) == 0 && i + 3 < n && idx[i + 1] == e + 1 && idx[i + 2] == e + 2 &&
                idx[i + 3] == e + 3) {
                gs__pairs_add(&b, gs_random_v3_pair(e), i, i + 2);
                gs__pairs_add(&b, gs_random_v3_pair(e + 1), i + 1, i + 3);
                i += 4;
            } else if (gs_random_v3_half(e) == 0 && i + 1 < n && idx[i + 1] == e + 2) {
                gs__pairs_add(&b, gs_random_v3_pair(e), i, i + 1);
                i += 2;
            } else {
                gs__pairs_add_alone(&b, gs_random_v3_pair(e), gs_random_v3_half(e), i);
                i++;
            }
        }
        gs__pairs_scatter(&b, seed, GS_RANDOM_V3_TAG, mean, std, out);
    }
}
