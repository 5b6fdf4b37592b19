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
 * the CPU backend and the CUDA kernels (GS_HD marks functions for both).
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

#endif
