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

/** v2: the standard normals z0 = r cos(theta) (element 2k) and z1 = r sin(theta) (element
 *  2k + 1) of pair k. cos and sin of theta = n pi/2 + y are (C, S), (-S, C), (-C, -S), (S, -C)
 *  for n = 0..3 with C = gs__kcos_v2(y), S = gs__ksin_v2(y). */
GS_HD void gs_random_normal_pair_v2(uint64_t seed, uint64_t k, double *z0_p, double *z1_p)
{
    const gs_philox4_t w = gs_random_block_v2(seed, k);
    const uint64_t a = (((uint64_t)w.v[1] << 32) | w.v[0]) >> 11;
    const uint64_t b = (((uint64_t)w.v[3] << 32) | w.v[2]) >> 11;
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

/** v2: Normal(mean, std) at global index @a i: mean + std * z, z the pair's z0 (i even) or z1
 *  (i odd). Computes only the half it needs (the same bits as the pair). */
GS_HD double gs_random_normal_v2(uint64_t seed, uint64_t i, double mean, double std)
{
    const gs_philox4_t w = gs_random_block_v2(seed, i >> 1);
    const uint64_t a = (((uint64_t)w.v[1] << 32) | w.v[0]) >> 11;
    const uint64_t b = (((uint64_t)w.v[3] << 32) | w.v[2]) >> 11;
    unsigned n;
    double y;
    gs__angle_v2(b, &n, &y);
    n += (unsigned)(i & 1u) * 3u; /* sin(theta) = cos(theta - pi/2): quadrant n - 1 */
    const double t = (n & 1u) ? gs__ksin_v2(y) : gs__kcos_v2(y);
    const double z = gs__radius_v2(a) * (((n + 1u) & 2u) ? -t : t);
    return mean + std * z;
}

#endif
