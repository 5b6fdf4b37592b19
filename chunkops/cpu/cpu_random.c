/* Batched random generation for the CPU fused kernel: the exact definition of
 * chunkops/random.h, evaluated for a tile of element indices. */
#include "chunkops/cpu/cpu.h"
#include "chunkops/random.h"

void gs__cpu_random_normal(uint64_t seed, const uint64_t *idx, int n, double mean, double std,
                           double *out)
{
    for (int i = 0; i < n; i++) out[i] = gs_random_normal(seed, idx[i], mean, std);
}

void gs__cpu_random_uniform(uint64_t seed, const uint64_t *idx, int n, double low, double high,
                            double *out)
{
    for (int i = 0; i < n; i++) out[i] = gs_random_uniform(seed, idx[i], low, high);
}
