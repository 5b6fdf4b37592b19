/* Fused kernels over version-2 normals in pairs (plan.pairs): STORE and FULL of a program of one
 * GS_LEAF_NORMAL_V2 leaf and unary ops, read with unit stride along the loop dim. Elements 2k
 * and 2k + 1 of the array share one Philox block and one Box-Muller transform (random.h,
 * docs/random.md section 7), so a thread takes pair k: one block, one log, one sqrt and one
 * sine/cosine pair give both values (the per-element kernels compute one half each). Thread j of
 * a row takes pair k0 + j, k0 = floor(offset of the row's first element / 2): a row whose first
 * element is odd starts with a lone second half, a row ending inside a pair ends with a lone
 * first half. The bits are those of gs_random_normal_v2 element by element. Rows go over
 * blockIdx.y, pairs over the x threads; FULL ends as every FULL kernel (full_finish). Compiled
 * with --fmad=false. */
#include "chunkops/cuda/fused_device.cuh"
#include "chunkops/cuda/fused_tables.cuh"

namespace {

/* Values (with mean and std applied) of elements 2k and 2k + 1: random.h's
 * gs_random_normal_pair_v2 over the plan's precomputed round keys. */
__device__ __forceinline__ void pair_values_v2(const gs__cuda_leaf_t &lf, uint64_t k, double (&v)[2])
{
    uint32_t w[4];
    philox_dev(lf, k, w, GS_RANDOM_V2_TAG);
    const uint64_t a = (((uint64_t)w[1] << 32) | w[0]) >> 11;
    const uint64_t b = (((uint64_t)w[3] << 32) | w[2]) >> 11;
    const double r = gs__radius_v2(a);
    unsigned n;
    double y;
    gs__angle_v2(b, &n, &y);
    const double C = gs__kcos_v2(y), S = gs__ksin_v2(y);
    const double c = n == 0 ? C : n == 1 ? -S : n == 2 ? -C : S;
    const double s = n == 0 ? S : n == 1 ? C : n == 2 ? -S : -C;
    v[0] = lf.p0 + lf.p1 * (r * c);
    v[1] = lf.p0 + lf.p1 * (r * s);
}

template <int ACC, bool STORE>
__global__ void __launch_bounds__(BLOCK) k_pairs(const __grid_constant__ Plan p)
{
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    Acc<ACC> acc;
    acc.init(p);
    const gs__cuda_leaf_t &lf = p.leaves[0];
    const int64_t ppr = p.L / 2 + 1; /* pairs a row of L elements can touch */
    const int64_t rs = p.nr ? lf.rstride[0] : 0, irs = p.nr ? p.index.rstride[0] : 0;
    for (int64_t r = blockIdx.y; r < p.R; r += gridDim.y) {
        const int64_t o = lf.base + r * rs; /* element index of l = 0 (>= 0: validated) */
        const int64_t k0 = o >> 1;
        for (int64_t j = (int64_t)blockIdx.x * BLOCK + threadIdx.x; j < ppr;
             j += (int64_t)gridDim.x * BLOCK) {
            const int64_t l = 2 * (k0 + j) - o; /* position of element 2k: -1, 0, 1, ... */
            if (l >= p.L) break;
            double v[2];
            pair_values_v2(lf, (uint64_t)(k0 + j), v);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int64_t lh = l + h;
                if (lh < 0 || lh >= p.L) continue;
                double x = v[h];
                if (p.tail_ma) {
                    x = x * p.tail_m + p.tail_a; /* two roundings, as the ops they stand for */
                } else {
#pragma unroll 1
                    for (int i = 1; i < p.nprog; i++) x = apply_unary_chain(p.prog[i].op, x, p.prog[i].imm);
                }
                if constexpr (STORE) p.out[r * p.L + lh] = x;
                else acc.add(p, x, IDX ? p.index.base + r * irs + lh * p.index.lstride : 0);
            }
        }
    }
    if constexpr (!STORE) full_finish<ACC, merge_group(1, ACC)>(p, acc);
}

}  // namespace

/* [0 = STORE, 1 + acc = FULL] */
const void *const gs__cuda_k_pairs[1 + GS__CUDA_NACC] = {
    (const void *)k_pairs<GS__CUDA_ACC_SUM, true>, (const void *)k_pairs<GS__CUDA_ACC_SUM, false>,
    (const void *)k_pairs<GS__CUDA_ACC_MIN, false>, (const void *)k_pairs<GS__CUDA_ACC_VAR, false>,
    (const void *)k_pairs<GS__CUDA_ACC_ARG, false>};
