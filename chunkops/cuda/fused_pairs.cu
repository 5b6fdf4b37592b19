/* Fused kernels over normals in pairs (plan.pairs): STORE and FULL of a program of one
 * version-2 normal leaf read with unit stride along the loop dim, or one version-3 leaf read with
 * stride 1 or 2, and unary ops. The two elements of a pair share one Philox block and one
 * Box-Muller transform (random.h, docs/random.md sections 7 and 10), so a thread takes a pair:
 * one block, one log, one sqrt and one sine/cosine pair give both values (the per-element
 * kernels compute one half each).
 *   version 2: pair k holds elements 2k, 2k + 1; thread j of a row takes pair k0 + j,
 *     k0 = floor(o / 2), o the global index of the row's first element;
 *   version 3, stride 1: pair k holds e = ((k >> 1) << 2) | (k & 1) and e + 2; thread j takes
 *     pair 2 floor(o / 4) + j (the two pairs of each group of four of the row);
 *   version 3, stride 2: the row holds o, o + 2, ...: thread j takes pair
 *     (2 floor(o / 4) | (o & 1)) + 2j, whose elements are adjacent positions of the row.
 * A row starting or ending inside a pair has lone halves at its ends; positions outside the row
 * are skipped. The bits are those of gs_random_normal_v2 / _v3 element by element. Rows go over
 * blockIdx.y, pairs over the x threads; FULL ends as every FULL kernel (full_finish). Compiled
 * with --fmad=false. */
#include "chunkops/cuda/fused_device.cuh"
#include "chunkops/cuda/fused_tables.cuh"

namespace {

/* Values (with mean and std applied) of the two halves of pair k (random.h's
 * gs__normal_pair_words over the block with counter word @a tag, from the plan's precomputed
 * round keys). */
__device__ __forceinline__ void pair_values(const gs__cuda_leaf_t &lf, uint64_t k, uint32_t tag,
                                            double (&v)[2])
{
    gs_philox4_t w;
    philox_dev(lf, k, w.v, tag);
    double z0, z1;
    gs__normal_pair_words(&w, &z0, &z1);
    v[0] = lf.p0 + lf.p1 * z0;
    v[1] = lf.p0 + lf.p1 * z1;
}

/* U pairs per thread and step (plan.pairs): the U transforms are independent, so their
 * instruction streams interleave (U = 2 trades registers for latency hiding). */
template <int ACC, bool STORE, int U>
__global__ void __launch_bounds__(BLOCK) k_pairs(const __grid_constant__ Plan p)
{
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    Acc<ACC> acc;
    acc.init(p);
    const gs__cuda_leaf_t &lf = p.leaves[0];
    const bool v3 = lf.kind == GS_LEAF_NORMAL_V3;
    const bool s2 = v3 && lf.lstride == 2;
    const uint32_t tag = v3 ? GS_RANDOM_V3_TAG : GS_RANDOM_V2_TAG;
    /* pairs a row of L elements can touch (the plan's ppr) */
    const int64_t ppr = !v3 ? p.L / 2 + 1 : s2 ? p.L / 2 + 2 : 2 * (p.L / 4 + 2);
    const int64_t rs = p.nr ? lf.rstride[0] : 0, irs = p.nr ? p.index.rstride[0] : 0;
    const int64_t step = (int64_t)gridDim.x * BLOCK;
    for (int64_t r = blockIdx.y; r < p.R; r += gridDim.y) {
        const int64_t o = lf.base + r * rs; /* element index of l = 0 (>= 0: validated) */
        const int64_t k0 = !v3 ? o >> 1 : ((o >> 2) << 1) | (s2 ? (o & 1) : 0);
        for (int64_t j = (int64_t)blockIdx.x * BLOCK + threadIdx.x; j < ppr; j += U * step) {
            double v[U][2];
            int64_t l0[U], l1[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t ju = j + u * step;
                const int64_t k = k0 + (s2 ? 2 * ju : ju);
                /* positions of the pair's halves in the row (the first may be -1, -2 or -3;
                 * past the row's end for a j beyond ppr: skipped below) */
                if (!v3) {
                    l0[u] = 2 * k - o;
                    l1[u] = l0[u] + 1;
                } else {
                    const int64_t e = ((k >> 1) << 2) | (k & 1);
                    l0[u] = s2 ? (e - o) >> 1 : e - o; /* e - o is even for stride 2 */
                    l1[u] = s2 ? l0[u] + 1 : l0[u] + 2;
                }
                pair_values(lf, (uint64_t)k, tag, v[u]);
            }
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t lh = h ? l1[u] : l0[u];
                    if (lh < 0 || lh >= p.L) continue;
                    double x = v[u][h];
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

/* [U - 1][0 = STORE, 1 + acc = FULL] */
#define GS__PAIRS_ROW(U)                                                                          \
    {(const void *)k_pairs<GS__CUDA_ACC_SUM, true, U>, (const void *)k_pairs<GS__CUDA_ACC_SUM, false, U>, \
     (const void *)k_pairs<GS__CUDA_ACC_MIN, false, U>, (const void *)k_pairs<GS__CUDA_ACC_VAR, false, U>, \
     (const void *)k_pairs<GS__CUDA_ACC_ARG, false, U>}
const void *const gs__cuda_k_pairs[2][1 + GS__CUDA_NACC] = {GS__PAIRS_ROW(1), GS__PAIRS_ROW(2)};
