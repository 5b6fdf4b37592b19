/**
 * The counter-based generator that defines every random array in gsched (docs/random.md).
 *
 * The value at global row-major element index i of a random array with seed s is a pure function
 * of (s, i, distribution): one Philox4x32-10 block with
 *     counter = (lo32(i), hi32(i), 0, 0),  key = (lo32(s), hi32(s))
 * gives four 32-bit words c0..c3, from which
 *     a = ((c1 << 32) | c0) >> 11,  b = ((c3 << 32) | c2) >> 11        (53 bits each)
 *     uniform(low, high) = low + (high - low) * (a * 2^-53)
 *     normal(mean, std)  = mean + std * sqrt(-2 ln((a + 1) * 2^-53)) * cos(GS_TWO_PI * (b * 2^-53))
 * Results do not depend on chunking, worker count or backend. This header is shared verbatim by
 * the CPU backend and the CUDA kernels (GS_HD marks functions for both). Version 2 of the normal
 * (gs_random_normal_v2, below; docs/random.md section 7) pairs elements 2k, 2k + 1 on one block
 * and uses no libm function, so both backends give the same bits.
 */
#ifndef GS_CHUNKOPS_RANDOM_H
#define GS_CHUNKOPS_RANDOM_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define GS_HD __host__ __device__ __forceinline__
#else
#define GS_HD static inline
#endif

#define GS_PHILOX_M0 0xD2511F53u
#define GS_PHILOX_M1 0xCD9E8D57u
#define GS_PHILOX_W0 0x9E3779B9u
#define GS_PHILOX_W1 0xBB67AE85u
#define GS_TWO_PI 6.283185307179586476925286766559
#define GS_TWO_POW_M53 (1.0 / 9007199254740992.0)

typedef struct gs_philox4 {
    uint32_t v[4];
} gs_philox4_t;

GS_HD void gs__philox_round(uint32_t *c, uint32_t k0, uint32_t k1)
{
    uint64_t p0 = (uint64_t)GS_PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)GS_PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k0;
    uint32_t n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

/** Philox4x32-10 (Salmon et al., SC'11; Random123's philox4x32_10). */
GS_HD gs_philox4_t gs_philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                    uint32_t k0, uint32_t k1)
{
    gs_philox4_t r;
    r.v[0] = c0;
    r.v[1] = c1;
    r.v[2] = c2;
    r.v[3] = c3;
    for (int i = 0; i < 10; i++) {
        gs__philox_round(r.v, k0, k1);
        k0 += GS_PHILOX_W0;
        k1 += GS_PHILOX_W1;
    }
    return r;
}

GS_HD gs_philox4_t gs_random_block(uint64_t seed, uint64_t i)
{
    return gs_philox4x32_10((uint32_t)i, (uint32_t)(i >> 32), 0u, 0u, (uint32_t)seed,
                            (uint32_t)(seed >> 32));
}

/** Uniform in [low, high) at global index @a i. */
GS_HD double gs_random_uniform(uint64_t seed, uint64_t i, double low, double high)
{
    gs_philox4_t r = gs_random_block(seed, i);
    uint64_t a = (((uint64_t)r.v[1] << 32) | r.v[0]) >> 11;
    return low + (high - low) * ((double)a * GS_TWO_POW_M53);
}

/** Normal(mean, std) at global index @a i (Box-Muller, cosine branch). */
GS_HD double gs_random_normal(uint64_t seed, uint64_t i, double mean, double std)
{
    gs_philox4_t r = gs_random_block(seed, i);
    uint64_t a = (((uint64_t)r.v[1] << 32) | r.v[0]) >> 11;
    uint64_t b = (((uint64_t)r.v[3] << 32) | r.v[2]) >> 11;
    double u1 = (double)(a + 1) * GS_TWO_POW_M53;
    double u2 = (double)b * GS_TWO_POW_M53;
    double z = sqrt(-2.0 * log(u1)) * cos(GS_TWO_PI * u2);
    return mean + std * z;
}

/* ---- version 2 (docs/random.md, "Version 2"): one Philox block per PAIR of elements ----
 *
 * Elements 2k and 2k + 1 of a version-2 normal array take the two outputs of one Box-Muller
 * transform of the block with counter (lo32(k), hi32(k), GS_RANDOM_V2_TAG, 0) and key (lo32(s),
 * hi32(s)): one log, one sqrt and one sine/cosine pair per two normals. Every function below is
 * plain IEEE double arithmetic (+ - * / and sqrt, rounded to nearest, never contracted into an
 * FMA: the CPU backend builds with -ffp-contract=off, the CUDA one with --fmad=false) and
 * integer arithmetic, with no libm call, so the CPU and the GPU give the same bits. */

#define GS_RANDOM_V2_TAG 0x32u                      /* counter word c2 of every v2 block */
#define GS_PI_2M52 6.975736996017264e-16           /* fl(pi) * 2^-52 (exact scaling of fl(pi)) */

GS_HD double gs__u64_as_double(uint64_t u)
{
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)u);
#else
    double d;
    __builtin_memcpy(&d, &u, sizeof(d));
    return d;
#endif
}

GS_HD uint64_t gs__double_as_u64(double d)
{
#if defined(__CUDA_ARCH__)
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t u;
    __builtin_memcpy(&u, &d, sizeof(u));
    return u;
#endif
}

/** v2: ln(x) for a double x >= 2^-1022, x finite (fdlibm e_log.c's general path: the reduction
 *  x = 2^k m with m in [sqrt(2)/2, sqrt(2)), then log(m) = f - (hfsq - s (hfsq + R))). */
GS_HD double gs__log_v2(double x)
{
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double Lg1 = 6.666666666666735130e-01, Lg2 = 3.999999999940941908e-01,
                 Lg3 = 2.857142874366239149e-01, Lg4 = 2.222219843214978396e-01,
                 Lg5 = 1.818357216161805012e-01, Lg6 = 1.531383769920937332e-01,
                 Lg7 = 1.479819860511658591e-01;
    const uint64_t ix = gs__double_as_u64(x);
    const uint64_t mant = ix & 0x000fffffffffffffull;
    int64_t k = (int64_t)(ix >> 52) - 1023;
    /* carry into bit 52 iff 1.mant >= sqrt(2): then m = 1.mant / 2 */
    const uint64_t i = (mant + 0x95f619980c433ull) & 0x0010000000000000ull;
    const double m = gs__u64_as_double(mant | (i ^ 0x3ff0000000000000ull));
    k += (int64_t)(i >> 52);
    const double f = m - 1.0;
    const double s = f / (2.0 + f);
    const double dk = (double)(int32_t)k; /* |k| <= 1076: exact (and vectorisable) */
    const double z = s * s;
    const double w = z * z;
    const double t1 = w * (Lg2 + w * (Lg4 + w * Lg6));
    const double t2 = z * (Lg1 + w * (Lg3 + w * (Lg5 + w * Lg7)));
    const double R = t2 + t1;
    const double hfsq = 0.5 * f * f;
    return dk * ln2_hi - ((hfsq - (s * (hfsq + R) + dk * ln2_lo)) - f);
}

/** v2: cos(y) for |y| <= pi/4 (FreeBSD k_cos.c with a zero tail). */
GS_HD double gs__kcos_v2(double y)
{
    const double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                 C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                 C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
    const double z = y * y;
    const double w = z * z;
    const double r = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
    const double hz = 0.5 * z;
    const double v = 1.0 - hz;
    return v + (((1.0 - v) - hz) + z * r);
}

/** v2: sin(y) for |y| <= pi/4 (FreeBSD k_sin.c with a zero tail). */
GS_HD double gs__ksin_v2(double y)
{
    const double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                 S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                 S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
    const double z = y * y;
    const double w = z * z;
    const double r = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
    const double v = z * y;
    return y + v * (S1 + z * r);
}

/** v2 radius sqrt(-2 ln u1), u1 = (a + 1) 2^-53, from the 53-bit word a: ln u1 is
 *  ln(a + 1) - 53 ln 2, taken as gs__log_v2 of the double a + 1 with the exponent lowered by 53
 *  (exact: a + 1 <= 2^53 is representable). a = 2^53 - 1 gives 0. */
GS_HD double gs__radius_v2(uint64_t a)
{
    const double x = gs__u64_as_double(gs__double_as_u64((double)(a + 1)) - ((uint64_t)53 << 52));
    return sqrt(-2.0 * gs__log_v2(x));
}

/** v2 angle theta = 2 pi b 2^-53 from the 53-bit word b, reduced exactly: theta = n pi/2 + y with
 *  n = round(b / 2^51) mod 4 and y = d * fl(pi) 2^-52, d = b - round(b / 2^51) 2^51 in
 *  [-2^50, 2^50) (an integer, exact in a double; y is one rounded product, |y| <= pi/4). */
GS_HD void gs__angle_v2(uint64_t b, unsigned *n_p, double *y_p)
{
    const uint64_t q = (b + ((uint64_t)1 << 50)) >> 51;
    *n_p = (unsigned)(q & 3u);
    *y_p = (double)((int64_t)b - (int64_t)(q << 51)) * GS_PI_2M52;
}

/** v2 words: the block of pair k. */
GS_HD gs_philox4_t gs_random_block_v2(uint64_t seed, uint64_t k)
{
    return gs_philox4x32_10((uint32_t)k, (uint32_t)(k >> 32), GS_RANDOM_V2_TAG, 0u,
                            (uint32_t)seed, (uint32_t)(seed >> 32));
}

/** v2 (and v3): the standard normals z0 = r cos(theta), z1 = r sin(theta) of the words @a w.
 *  cos and sin of theta = n pi/2 + y are (C, S), (-S, C), (-C, -S), (S, -C) for n = 0..3 with
 *  C = gs__kcos_v2(y), S = gs__ksin_v2(y). */
GS_HD void gs__normal_pair_words(const gs_philox4_t *w, double *z0_p, double *z1_p)
{
    const uint64_t a = (((uint64_t)w->v[1] << 32) | w->v[0]) >> 11;
    const uint64_t b = (((uint64_t)w->v[3] << 32) | w->v[2]) >> 11;
    const double r = gs__radius_v2(a);
    unsigned n;
    double y;
    gs__angle_v2(b, &n, &y);
    const double C = gs__kcos_v2(y), S = gs__ksin_v2(y);
    const double c = n == 0 ? C : n == 1 ? -S : n == 2 ? -C : S;
    const double sn = n == 0 ? S : n == 1 ? C : n == 2 ? -S : -C;
    *z0_p = r * c;
    *z1_p = r * sn;
}

/** Half @a h (0: r cos theta, 1: r sin theta) of the words @a w alone, the same bits as that
 *  half of gs__normal_pair_words. */
GS_HD double gs__normal_half_words(const gs_philox4_t *w, unsigned h)
{
    const uint64_t a = (((uint64_t)w->v[1] << 32) | w->v[0]) >> 11;
    const uint64_t b = (((uint64_t)w->v[3] << 32) | w->v[2]) >> 11;
    unsigned n;
    double y;
    gs__angle_v2(b, &n, &y);
    n += h * 3u; /* sin(theta) = cos(theta - pi/2): quadrant n - 1 */
    const double t = (n & 1u) ? gs__ksin_v2(y) : gs__kcos_v2(y);
    return gs__radius_v2(a) * (((n + 1u) & 2u) ? -t : t);
}

/** v2: the standard normals z0 (element 2k) and z1 (element 2k + 1) of pair k. */
GS_HD void gs_random_normal_pair_v2(uint64_t seed, uint64_t k, double *z0_p, double *z1_p)
{
    const gs_philox4_t w = gs_random_block_v2(seed, k);
    gs__normal_pair_words(&w, z0_p, z1_p);
}

/** v2: Normal(mean, std) at global index @a i: mean + std * z, z the pair's z0 (i even) or z1
 *  (i odd). Computes only the half it needs (the same bits as the pair). */
GS_HD double gs_random_normal_v2(uint64_t seed, uint64_t i, double mean, double std)
{
    const gs_philox4_t w = gs_random_block_v2(seed, i >> 1);
    return mean + std * gs__normal_half_words(&w, (unsigned)(i & 1u));
}

/* ---- version 3 (docs/random.md, "Version 3"): pairs at distance 2 ----
 *
 * Elements 4q + j and 4q + j + 2 (j = 0, 1) form pair k = 2q + j and take the two outputs of
 * one Box-Muller transform (version 2's arithmetic, gs__normal_pair_words above) of the block with counter (lo32(k),
 * hi32(k), GS_RANDOM_V3_TAG, 0): 4q + j the cosine (half 0), 4q + j + 2 the sine (half 1). A
 * read with unit stride and a read with stride 2 (x[::2]) both meet both halves of every pair
 * they touch, so both use one log, one sqrt and one sine/cosine pair per two normals. */

#define GS_RANDOM_V3_TAG 0x33u /* counter word c2 of every v3 block */

/** v3: the pair of global index @a i. */
GS_HD uint64_t gs_random_v3_pair(uint64_t i)
{
    return ((i >> 2) << 1) | (i & 1u);
}

/** v3: the half of @a i in its pair (0: the cosine, 1: the sine). */
GS_HD unsigned gs_random_v3_half(uint64_t i)
{
    return (unsigned)(i >> 1) & 1u;
}

/** v3: the global index of half 0 of pair @a k (half 1 is this + 2). */
GS_HD uint64_t gs_random_v3_first(uint64_t k)
{
    return ((k >> 1) << 2) | (k & 1u);
}

/** v3 words: the block of pair k. */
GS_HD gs_philox4_t gs_random_block_v3(uint64_t seed, uint64_t k)
{
    return gs_philox4x32_10((uint32_t)k, (uint32_t)(k >> 32), GS_RANDOM_V3_TAG, 0u,
                            (uint32_t)seed, (uint32_t)(seed >> 32));
}

/** v3: the standard normals z0 (element gs_random_v3_first(k)) and z1 (that + 2) of pair k. */
GS_HD void gs_random_normal_pair_v3(uint64_t seed, uint64_t k, double *z0_p, double *z1_p)
{
    const gs_philox4_t w = gs_random_block_v3(seed, k);
    gs__normal_pair_words(&w, z0_p, z1_p);
}

/** v3: Normal(mean, std) at global index @a i: mean + std * z, z the half of pair
 *  gs_random_v3_pair(i) that @a i is. Computes only that half (the same bits as the pair). */
GS_HD double gs_random_normal_v3(uint64_t seed, uint64_t i, double mean, double std)
{
    const gs_philox4_t w = gs_random_block_v3(seed, gs_random_v3_pair(i));
    return mean + std * gs__normal_half_words(&w, gs_random_v3_half(i));
}

/* ---- float32 version 1 (docs/random.md, "float32 random, version 1") ----
 *
 * Element i of a float32 random array takes word j = i & 3 of the Philox4x32-10 block with
 * counter (lo32(k), hi32(k), GS_RANDOM_F32_TAG, 0), k = i >> 2, key (lo32(s), hi32(s)): one
 * block serves four elements. Uniform: (w_j >> 8) 2^-24. Normal: elements 4k, 4k+1 are
 * r cos(theta), r sin(theta) of the Box-Muller transform of (w0, w1); 4k+2, 4k+3 the same of
 * (w2, w3). Every step is IEEE binary32 arithmetic (+ - * / and sqrtf, rounded to nearest, never
 * contracted into an FMA) or integer arithmetic, with no libm call, so the CPU and the GPU give
 * the same bits. */

#define GS_RANDOM_F32_TAG 0x46u                     /* counter word c2 of every float32 block */
#define GS_RANDOM_INT_TAG 0x49u                     /* counter word c2 of every integer block */

GS_HD float gs__u32_as_float(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    __builtin_memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

GS_HD uint32_t gs__float_as_u32(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    __builtin_memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

/** f32: the block of elements 4k .. 4k+3. */
GS_HD gs_philox4_t gs_random_block_f32(uint64_t seed, uint64_t k)
{
    return gs_philox4x32_10((uint32_t)k, (uint32_t)(k >> 32), GS_RANDOM_F32_TAG, 0u,
                            (uint32_t)seed, (uint32_t)(seed >> 32));
}

/** f32: ln(x) for a normal binary32 x > 0 (FreeBSD e_logf.c's general path, without its
 *  shortcuts near 1: x = 2^k m, m in [sqrt(2)/2, sqrt(2)), f = m - 1, s = f / (2 + f)). */
GS_HD float gs__logf_f32(float x)
{
    const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f;
    const float Lg1 = 0.66666662693f, Lg2 = 0.40000972152f, Lg3 = 0.28498786688f,
                Lg4 = 0.24279078841f;
    uint32_t ix = gs__float_as_u32(x);
    int32_t k = (int32_t)(ix >> 23) - 127;
    ix &= 0x007fffffu;
    const uint32_t i = (ix + (0x95f64u << 3)) & 0x00800000u; /* 1.m >= sqrt(2): halve */
    const float m = gs__u32_as_float(ix | (i ^ 0x3f800000u));
    k += (int32_t)(i >> 23);
    const float f = m - 1.0f;
    const float s = f / (2.0f + f);
    const float dk = (float)k; /* |k| <= 150: exact */
    const float z = s * s;
    const float w = z * z;
    const float t1 = w * (Lg2 + w * Lg4);
    const float t2 = z * (Lg1 + w * Lg3);
    const float R = t2 + t1;
    const float hfsq = 0.5f * f * f;
    return dk * ln2_hi - ((hfsq - (s * (hfsq + R) + dk * ln2_lo)) - f);
}

/** f32: cos(y), |y| <= pi/4 (Cephes cosf.c polynomial). */
GS_HD float gs__kcosf_f32(float y)
{
    const float z = y * y;
    return ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) *
               z * z - 0.5f * z + 1.0f;
}

/** f32: sin(y), |y| <= pi/4 (Cephes sinf.c polynomial). */
GS_HD float gs__ksinf_f32(float y)
{
    const float z = y * y;
    return ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * y + y;
}

/** f32 uniform on [low, high) at global index @a i (the _w form: from the block @a w of
 *  i >> 2, for callers that reuse one block for its four elements): lowf + (highf - lowf) * u with lowf, highf
 *  the binary32 roundings of @a low, @a high and u = (w >> 8) 2^-24 (each step rounded to
 *  binary32; the largest values may round up to highf, as in NumPy). */
GS_HD float gs_random_uniform_f32_w(const gs_philox4_t *w, uint64_t i, double low, double high)
{
    const float u = (float)(w->v[i & 3u] >> 8) * 5.9604644775390625e-08f; /* 2^-24, exact */
    const float lo = (float)low, hi = (float)high;
    const float span = hi - lo;
    return lo + span * u;
}

GS_HD float gs_random_uniform_f32(uint64_t seed, uint64_t i, double low, double high)
{
    const gs_philox4_t w = gs_random_block_f32(seed, i >> 2);
    return gs_random_uniform_f32_w(&w, i, low, high);
}

/** f32 standard normal from the words (wa, wb): r = sqrt(-2 ln u1), u1 = fl32(wa + 1) 2^-32 in
 *  [2^-32, 1]; theta = 2 pi wb 2^-32 = n pi/2 + y, n = round(wb / 2^30) mod 4, y = d fl32(pi)
 *  2^-31 with d = wb - round(wb / 2^30) 2^30 (an integer of at most 2^29 in magnitude; rounded
 *  once to binary32, then one rounded product). Returns r cos(theta) (@a sine 0) or
 *  r sin(theta) (@a sine 1). */
GS_HD float gs__normal_f32(uint32_t wa, uint32_t wb, unsigned sine)
{
    const float x = (float)((uint64_t)wa + 1u) * 2.3283064365386963e-10f; /* 2^-32, exact */
    const float r = sqrtf(-2.0f * gs__logf_f32(x));
    const uint32_t q = (uint32_t)(((uint64_t)wb + (1u << 29)) >> 30);
    const int32_t d = (int32_t)((int64_t)wb - ((int64_t)q << 30));
    const float y = (float)d * 1.4629180792671596e-09f; /* fl32(pi) * 2^-31 */
    const unsigned n = (q + sine * 3u) & 3u;            /* sin(theta) = cos(theta - pi/2) */
    const float t = (n & 1u) ? gs__ksinf_f32(y) : gs__kcosf_f32(y);
    return r * (((n + 1u) & 2u) ? -t : t);
}

/** f32 Normal(mean, std) at global index @a i (the _w form: from the block @a w of i >> 2): fl32(meanf + fl32(stdf * z)) with meanf, stdf
 *  the binary32 roundings of @a mean and @a std, z = gs__normal_f32 of words (w0, w1) (i & 3 in
 *  {0, 1}) or (w2, w3) (i & 3 in {2, 3}), cosine for even i, sine for odd i. */
GS_HD float gs_random_normal_f32_w(const gs_philox4_t *w, uint64_t i, double mean, double std)
{
    const unsigned h = (unsigned)(i & 2u);
    const float z = gs__normal_f32(w->v[h], w->v[h + 1u], (unsigned)(i & 1u));
    return (float)mean + (float)std * z;
}

GS_HD float gs_random_normal_f32(uint64_t seed, uint64_t i, double mean, double std)
{
    const gs_philox4_t w = gs_random_block_f32(seed, i >> 2);
    return gs_random_normal_f32_w(&w, i, mean, std);
}

/* ---- float32 version 3 (docs/random.md, "float32 version 3") ----
 *
 * The normal of float32 version 3 takes the same binary32 Box-Muller transform as version 1
 * (gs__normal_f32) from the block with counter (lo32(k), hi32(k), GS_RANDOM_F32_V3_TAG, 0),
 * k = i >> 2, but pairs elements at distance 2: elements 4k (cosine) and 4k + 2 (sine) take
 * words (w0, w1), elements 4k + 1 (cosine) and 4k + 3 (sine) words (w2, w3). A read with unit
 * stride or with stride 2 along a row uses both halves of each pair it touches, so one log and
 * one sqrt serve two elements (gs_random_normal_pair_f32_v3, gs_f32v3_walk_z). Uniform float32
 * values have no version 3. */

#define GS_RANDOM_F32_V3_TAG 0x47u                  /* counter word c2 of every f32 v3 block */

/** f32 v3: the block of elements 4k .. 4k+3. */
GS_HD gs_philox4_t gs_random_block_f32_v3(uint64_t seed, uint64_t k)
{
    return gs_philox4x32_10((uint32_t)k, (uint32_t)(k >> 32), GS_RANDOM_F32_V3_TAG, 0u,
                            (uint32_t)seed, (uint32_t)(seed >> 32));
}

/** f32: both halves of gs__normal_f32(wa, wb, .): *zc_p = its cosine value (sine 0), *zs_p its
 *  sine value (sine 1), the same bits, from one log, one sqrt and one sine/cosine pair. */
GS_HD void gs__normal_pair_f32(uint32_t wa, uint32_t wb, float *zc_p, float *zs_p)
{
    const float x = (float)((uint64_t)wa + 1u) * 2.3283064365386963e-10f; /* 2^-32, exact */
    const float r = sqrtf(-2.0f * gs__logf_f32(x));
    const uint32_t q = (uint32_t)(((uint64_t)wb + (1u << 29)) >> 30);
    const int32_t d = (int32_t)((int64_t)wb - ((int64_t)q << 30));
    const float y = (float)d * 1.4629180792671596e-09f; /* fl32(pi) * 2^-31 */
    const float C = gs__kcosf_f32(y), S = gs__ksinf_f32(y);
    const unsigned n = q & 3u;
    /* cos, sin of n pi/2 + y: (C, S), (-S, C), (-C, -S), (S, -C) for n = 0..3 */
    const float c = (n & 1u) ? S : C, s = (n & 1u) ? C : S;
    *zc_p = r * (((n + 1u) & 2u) ? -c : c);
    *zs_p = r * ((n & 2u) ? -s : s);
}

/** f32 v3: the standard normals of pair @a h (0: elements 4k, 4k + 2 from words (w0, w1);
 *  1: elements 4k + 1, 4k + 3 from (w2, w3)) of the block @a w of k: *zc_p for the first
 *  element (cosine), *zs_p for the second (sine). */
GS_HD void gs_random_normal_pair_f32_v3(const gs_philox4_t *w, unsigned h, float *zc_p,
                                        float *zs_p)
{
    gs__normal_pair_f32(h ? w->v[2] : w->v[0], h ? w->v[3] : w->v[1], zc_p, zs_p);
}

/** f32: fl32(meanf + fl32(stdf * z)), meanf and stdf the binary32 roundings of @a mean, @a std
 *  (the scaling of every float32 normal). */
GS_HD float gs_random_scale_f32(float z, double mean, double std)
{
    return (float)mean + (float)std * z;
}

/** f32 v3 Normal(mean, std) at global index @a i (the _w form: from the block @a w of
 *  i >> 2): gs_random_scale_f32 of z = gs__normal_f32 of words (w0, w1) (i & 1 = 0) or
 *  (w2, w3) (i & 1 = 1), cosine for i & 2 = 0, sine for i & 2 = 2. */
GS_HD float gs_random_normal_f32_v3_w(const gs_philox4_t *w, uint64_t i, double mean, double std)
{
    const unsigned h = (unsigned)(i & 1u) * 2u;
    const float z = gs__normal_f32(w->v[h], w->v[h + 1u], (unsigned)(i >> 1) & 1u);
    return gs_random_scale_f32(z, mean, std);
}

GS_HD float gs_random_normal_f32_v3(uint64_t seed, uint64_t i, double mean, double std)
{
    const gs_philox4_t w = gs_random_block_f32_v3(seed, i >> 2);
    return gs_random_normal_f32_v3_w(&w, i, mean, std);
}

/** f32 v3 walk state: the block last used and the pairs of it evaluated so far, for a caller
 *  that reads elements in any order but mostly within a block (the CPU fused kernel, the CUDA
 *  chain kernels): a pair is evaluated once however many of its two elements are read. */
typedef struct gs_f32v3_walk {
    uint64_t k;        /* block index held; ~0 (no block index reaches it): none */
    unsigned have;     /* bit h: pair h evaluated into (c_h, s_h) */
    gs_philox4_t w;
    float c0, s0, c1, s1;
} gs_f32v3_walk_t;

GS_HD void gs_f32v3_walk_init(gs_f32v3_walk_t *t)
{
    t->k = ~(uint64_t)0;
    t->have = 0;
    t->w.v[0] = t->w.v[1] = t->w.v[2] = t->w.v[3] = 0u;
    t->c0 = t->s0 = t->c1 = t->s1 = 0.0f;
}

/** f32 v3: the standard normal z of element @a i (gs_random_normal_f32_v3(seed, i, 0, 1) is
 *  gs_random_scale_f32(z, 0, 1)), through the walk state @a t of @a seed. */
GS_HD float gs_f32v3_walk_z(gs_f32v3_walk_t *t, uint64_t seed, uint64_t i)
{
    const uint64_t kb = i >> 2;
    const unsigned h = (unsigned)(i & 1u), s = (unsigned)(i >> 1) & 1u;
    if (kb != t->k) {
        t->w = gs_random_block_f32_v3(seed, kb);
        t->k = kb;
        t->have = 0;
    }
    if (!((t->have >> h) & 1u)) {
        float a, b;
        gs_random_normal_pair_f32_v3(&t->w, h, &a, &b);
        if (h) {
            t->c1 = a;
            t->s1 = b;
        } else {
            t->c0 = a;
            t->s0 = b;
        }
        t->have |= 1u << h;
    }
    return h ? (s ? t->s1 : t->c1) : (s ? t->s0 : t->c0);
}

/* ---- float32 version 4 (docs/random.md, "float32 version 4") ----
 *
 * Element i of a float32 version-4 normal array (group g = i >> 3, parity p = i & 1,
 * m = (i >> 1) & 3) takes the block with counter (lo32(g), hi32(g), GS_RANDOM_F32_V4_TAG, p)
 * and key (lo32(s), hi32(s)): m = 0 the cosine and m = 1 the sine of words (w0, w1), m = 2 the
 * cosine and m = 3 the sine of (w2, w3), with float32 version 3's binary32 arithmetic
 * (gs__normal_f32, gs_random_normal_pair_f32_v3). So elements 8g + p, 8g + p + 2, 8g + p + 4,
 * 8g + p + 6 are the four normals of one block: a read with stride 2 along a row uses whole
 * blocks (one block per four elements), a read with unit stride both blocks of a group. */

#define GS_RANDOM_F32_V4_TAG 0x4Au                  /* counter word c2 of every f32 v4 block */

/** f32 v4: the block of parity @a p (0 or 1) of group @a g (elements 8g + p + 2m, m = 0..3). */
GS_HD gs_philox4_t gs_random_block_f32_v4(uint64_t seed, uint64_t g, unsigned p)
{
    return gs_philox4x32_10((uint32_t)g, (uint32_t)(g >> 32), GS_RANDOM_F32_V4_TAG, p,
                            (uint32_t)seed, (uint32_t)(seed >> 32));
}

/** f32 v4: the four standard normals of the block @a w of (g, p): *z0_p .. *z3_p those of
 *  elements 8g + p, 8g + p + 2, 8g + p + 4, 8g + p + 6 (two log/sqrt/sine-cosine pairs, version
 *  3's per-pair arithmetic: the same bits as gs_random_normal_f32_v4 element by element). */
GS_HD void gs_random_normal_quad_f32_v4(const gs_philox4_t *w, float *z0_p, float *z1_p,
                                        float *z2_p, float *z3_p)
{
    gs_random_normal_pair_f32_v3(w, 0u, z0_p, z1_p);
    gs_random_normal_pair_f32_v3(w, 1u, z2_p, z3_p);
}

/** f32 v4 Normal(mean, std) at global index @a i (the _w form: from the block @a w of
 *  (i >> 3, i & 1)): gs_random_scale_f32 of z = gs__normal_f32 of words (w0, w1) (i & 4 = 0) or
 *  (w2, w3) (i & 4 = 4), cosine for i & 2 = 0, sine for i & 2 = 2. */
GS_HD float gs_random_normal_f32_v4_w(const gs_philox4_t *w, uint64_t i, double mean, double std)
{
    const unsigned h = (unsigned)(i >> 1) & 2u;
    const float z = gs__normal_f32(w->v[h], w->v[h + 1u], (unsigned)(i >> 1) & 1u);
    return gs_random_scale_f32(z, mean, std);
}

GS_HD float gs_random_normal_f32_v4(uint64_t seed, uint64_t i, double mean, double std)
{
    const gs_philox4_t w = gs_random_block_f32_v4(seed, i >> 3, (unsigned)(i & 1u));
    return gs_random_normal_f32_v4_w(&w, i, mean, std);
}

/** f32 v4 walk state: the group last used, its blocks evaluated so far (both parities) and
 *  their Box-Muller pairs evaluated so far, for a caller that reads elements in any order but
 *  mostly within a group (the CPU fused kernel, the CUDA chain kernels): each block is
 *  evaluated once and each pair once however many of its elements are read. Plain fields, no
 *  arrays, so a CUDA thread keeps it in registers. */
typedef struct gs_f32v4_walk {
    uint64_t g;        /* group index held; ~0 (no group index reaches it): none */
    unsigned have;     /* bit 4 + p: block p in w<p>; bit 2p + h: pair h of block p evaluated */
    gs_philox4_t w0, w1;
    float c00, s00, c01, s01, c10, s10, c11, s11; /* c<p><h>, s<p><h>: cosine, sine of pair h */
} gs_f32v4_walk_t;

GS_HD void gs_f32v4_walk_init(gs_f32v4_walk_t *t)
{
    t->g = ~(uint64_t)0;
    t->have = 0;
    for (int j = 0; j < 4; j++) t->w0.v[j] = t->w1.v[j] = 0u;
    t->c00 = t->s00 = t->c01 = t->s01 = t->c10 = t->s10 = t->c11 = t->s11 = 0.0f;
}

/** f32 v4: the standard normal z of element @a i (gs_random_normal_f32_v4(seed, i, 0, 1) is
 *  gs_random_scale_f32(z, 0, 1)), through the walk state @a t of @a seed. */
GS_HD float gs_f32v4_walk_z(gs_f32v4_walk_t *t, uint64_t seed, uint64_t i)
{
    const uint64_t g = i >> 3;
    const unsigned p = (unsigned)(i & 1u), h = (unsigned)(i >> 2) & 1u,
                   s = (unsigned)(i >> 1) & 1u;
    if (g != t->g) {
        t->g = g;
        t->have = 0;
    }
    if (!((t->have >> (4u + p)) & 1u)) {
        const gs_philox4_t w = gs_random_block_f32_v4(seed, g, p);
        if (p)
            t->w1 = w;
        else
            t->w0 = w;
        t->have |= 1u << (4u + p);
    }
    const unsigned bit = 2u * p + h;
    if (!((t->have >> bit) & 1u)) {
        float a, b;
        const gs_philox4_t w = p ? t->w1 : t->w0;
        gs_random_normal_pair_f32_v3(&w, h, &a, &b);
        switch (bit) {
        case 0: t->c00 = a; t->s00 = b; break;
        case 1: t->c01 = a; t->s01 = b; break;
        case 2: t->c10 = a; t->s10 = b; break;
        default: t->c11 = a; t->s11 = b; break;
        }
        t->have |= 1u << bit;
    }
    const float c = p ? (h ? t->c11 : t->c10) : (h ? t->c01 : t->c00);
    const float sn = p ? (h ? t->s11 : t->s10) : (h ? t->s01 : t->s00);
    return s ? sn : c;
}

/** The high 64 bits of the 128-bit product x * y. */
GS_HD uint64_t gs__mulhi_u64(uint64_t x, uint64_t y)
{
#if defined(__CUDA_ARCH__)
    return __umul64hi(x, y);
#else
    return (uint64_t)(((unsigned __int128)x * y) >> 64);
#endif
}

/** Integer uniform on [low, high] (both ends included, as NumPy's random_integers; low <= high)
 *  at global index @a i, by Lemire's nearly-divisionless method: with n = high - low + 1
 *  (mod 2^64; 0 means all 2^64 values) candidate t = 0, 1, 2, ... is the 64-bit word
 *  x = (w1 << 32) | w0 (t even) or (w3 << 32) | w2 (t odd) of the block with counter
 *  (lo32(i), hi32(i), GS_RANDOM_INT_TAG, t >> 1); m = x n (128 bits); the candidate is taken
 *  unless lo64(m) < (2^64 - n) mod n; the value is low + hi64(m). Each candidate is rejected with
 *  probability < n / 2^64 (at most 1/2), independently. */
GS_HD int64_t gs_random_integers(uint64_t seed, uint64_t i, int64_t low, int64_t high)
{
    const uint64_t n = (uint64_t)high - (uint64_t)low + 1u;
    for (uint32_t t = 0;; t++) {
        const gs_philox4_t w = gs_philox4x32_10((uint32_t)i, (uint32_t)(i >> 32),
                                                GS_RANDOM_INT_TAG, t, (uint32_t)seed,
                                                (uint32_t)(seed >> 32));
        for (unsigned h = 0; h < 4u; h += 2u) {
            const uint64_t x = ((uint64_t)w.v[h + 1u] << 32) | w.v[h];
            if (n == 0) return (int64_t)((uint64_t)low + x);
            const uint64_t lo = x * n;
            if (lo < n && lo < (0u - n) % n) continue;
            return (int64_t)((uint64_t)low + gs__mulhi_u64(x, n));
        }
    }
}

#endif
