/* Fused kernels over float32 version-3 normals in pairs (docs/random.md section 11) and
 * version-4 normals in whole blocks (section 12): typed programs whose first instruction is a
 * GS_LEAF_NORMAL_F32_V3 or GS_LEAF_NORMAL_F32_V4 leaf read with stride 1 or 2
 * along the last axis of an at most 2-D region, followed by the float32 chain that
 * chain_f32_of accepts (+ - * by binary32 immediates, then at most a cast to float64), with a
 * STORE terminal (any output dtype, gs_store_elem) or a whole-region SUM (the float32 seed's
 * chunk kernel). gs__cuda_f32pairs_fits decides; the typed launchers of fused_typed.cu ask it
 * before they pick a CHAIN kernel.
 *
 * Block k of the leaf (k = i >> 2, one Philox4x32-10 call) holds the pairs (4k, 4k + 2), words
 * (w0, w1), and (4k + 1, 4k + 3), words (w2, w3). Thread j of a row takes blocks
 * k0 + j, k0 + j + step, ... (U of them per step, interleaved for latency hiding as k_pairs),
 * k0 = o >> 2 with o the global index of the row's first element:
 *   stride 1: both pairs of the block: four elements, two logs and two square roots;
 *   stride 2: the row holds o, o + 2, ..., all of parity p = o & 1, so of block k it holds
 *     4k + p and 4k + p + 2, ONE pair (words (w2p, w2p+1)): two elements from one Philox
 *     block, one log and one square root.
 * Version 4 (V = 4): block (g, p) (counter (g, 0x4A, p)) holds elements 8g + p + 2m, m = 0..3
 * (gs_random_normal_quad_f32_v4). Thread j of a row takes groups g0 + j, g0 + j + step, ...,
 * g0 = o >> 3:
 *   stride 1: both blocks of the group: eight elements, two Philox calls, four logs;
 *   stride 2: the row's parity p = o & 1: block (g, p) only, all four of its elements at row
 *     positions lb .. lb + 3, lb = (8g + p - o) / 2: one Philox block per four elements
 *     (version 3: per two).
 * Positions before the row's first or past its last element (lone halves at the row's ends)
 * are skipped. The values are gs__normal_pair_f32, gs_random_scale_f32 and the chain in
 * binary32, exactly as gs_random_normal_f32_v3 element by element and the CHAIN walk
 * (fused_typed.cu), so the bits are the CPU backend's. Rows go over blockIdx.y, blocks of a
 * row over the x threads; a SUM adds each thread's values in float64 in its fixed order, then
 * block_sum_merge (fused_typed.cuh) with the grid's blocks numbered y * gridDim.x + x: the
 * same sum on every run. Compiled with --fmad=false. */
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/cuda/fused_typed.cuh"
#include "chunkops/elem_dtype.h"
#include "chunkops/random.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int BLOCK = GS__CUDA_BLOCK;
constexpr int U = 2; /* Philox blocks (v4 stride 1: groups of two blocks) per thread and step */

/* V: the version (3 or 4); S: the leaf's stride along the row (1 or 2); SUM: a whole-region sum
 * into k.out[0] (else STORE into the row-major output). */
template <int V, int S, bool SUM>
__global__ void __launch_bounds__(BLOCK) k_pairs_f32(const __grid_constant__ gs_kfused_t k,
                                                     double *partials, unsigned int *counter)
{
    const gs_kleaf_t &lf = k.leaves[k.prog[0].arg];
    f32_chain c;
    (void)chain_f32_of(k, c); /* gs__cuda_f32pairs_fits checked it holds */
    /* elements of a unit (v3: a block of four elements, v4: a group of eight) the row holds */
    constexpr int E = V == 4 ? (S == 2 ? 4 : 8) : (S == 2 ? 2 : 4);
    constexpr int SH = V == 4 ? 3 : 2;
    const int nd = k.ndim;
    const int64_t R = nd == 2 ? k.shape[0] : 1, L = k.shape[nd - 1];
    const int64_t rs = nd == 2 ? lf.stride[0] : 0;
    const int64_t step = (int64_t)gridDim.x * BLOCK;
    double acc = 0.0;
    for (int64_t r = blockIdx.y; r < R; r += gridDim.y) {
        const int64_t o = lf.base + r * rs; /* >= 0: random leaves are validated so */
        const int64_t k0 = o >> SH;
        const int64_t nb = ((o + S * (L - 1)) >> SH) - k0 + 1; /* units the row touches */
        const unsigned p = S == 2 ? (unsigned)(o & 1) : 0u;
        for (int64_t j = (int64_t)blockIdx.x * BLOCK + threadIdx.x; j < nb; j += U * step) {
            float z[U][E];
            int64_t lb[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t kb = k0 + j + u * step;
                if constexpr (V == 4 && S == 2) {
                    /* elements 8kb + p + 2m, m = 0..3: row positions lb + m (8kb + p - o is
                     * even, -3 at most below 0) */
                    const gs_philox4_t w = gs_random_block_f32_v4(lf.seed, (uint64_t)kb, p);
                    gs_random_normal_quad_f32_v4(&w, &z[u][0], &z[u][1], &z[u][2], &z[u][3]);
                    lb[u] = (8 * kb + (int64_t)p - o) >> 1;
                } else if constexpr (V == 4) {
                    /* elements 8kb + t at row positions lb + t: even t from block (kb, 0), odd
                     * t from block (kb, 1) */
                    const gs_philox4_t w0 = gs_random_block_f32_v4(lf.seed, (uint64_t)kb, 0u);
                    const gs_philox4_t w1 = gs_random_block_f32_v4(lf.seed, (uint64_t)kb, 1u);
                    gs_random_normal_quad_f32_v4(&w0, &z[u][0], &z[u][2], &z[u][4], &z[u][6]);
                    gs_random_normal_quad_f32_v4(&w1, &z[u][1], &z[u][3], &z[u][5], &z[u][7]);
                    lb[u] = 8 * kb - o;
                } else if constexpr (S == 2) {
                    /* elements 4kb + p (cosine) and 4kb + p + 2 (sine): row positions
                     * lb, lb + 1 (4kb + p - o is even, -2 at most below 0) */
                    const gs_philox4_t w = gs_random_block_f32_v3(lf.seed, (uint64_t)kb);
                    gs__normal_pair_f32(w.v[2 * p], w.v[2 * p + 1], &z[u][0], &z[u][1]);
                    lb[u] = (4 * kb + (int64_t)p - o) >> 1;
                } else {
                    /* elements 4kb + t at row positions lb + t: t = 0, 2 from (w0, w1),
                     * t = 1, 3 from (w2, w3) */
                    const gs_philox4_t w = gs_random_block_f32_v3(lf.seed, (uint64_t)kb);
                    gs__normal_pair_f32(w.v[0], w.v[1], &z[u][0], &z[u][2]);
                    gs__normal_pair_f32(w.v[2], w.v[3], &z[u][1], &z[u][3]);
                    lb[u] = 4 * kb - o;
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int t = 0; t < E; t++) {
                    const int64_t l = lb[u] + t;
                    if (l < 0 || l >= L) continue;
                    const float x = gs_random_scale_f32(z[u][t], lf.p0, lf.p1);
                    const double v = gs_f32_to_f64(f32_chain_apply(c, x));
                    if constexpr (SUM) acc += v;
                    else gs_store_elem(k.out_dtype, k.out, r * L + l, v);
                }
        }
    }
    if constexpr (SUM)
        block_sum_merge(acc, blockIdx.y * gridDim.x + blockIdx.x, gridDim.x * gridDim.y,
                        partials, counter, k.out);
}

/* [version - 3][stride - 1][0 = STORE, 1 = SUM] */
const void *const k_pairs_f32_fn[2][2][2] = {
    {{(const void *)k_pairs_f32<3, 1, false>, (const void *)k_pairs_f32<3, 1, true>},
     {(const void *)k_pairs_f32<3, 2, false>, (const void *)k_pairs_f32<3, 2, true>}},
    {{(const void *)k_pairs_f32<4, 1, false>, (const void *)k_pairs_f32<4, 1, true>},
     {(const void *)k_pairs_f32<4, 2, false>, (const void *)k_pairs_f32<4, 2, true>}}};

}  // namespace

extern "C" gs_status_t gs__cuda_f32pairs_init(gs__cuda_dev_t *dev)
{
    const char *fp = getenv("GS_CUDA_F32PAIRS"); /* "0": the CHAIN walk (comparisons) */
    dev->no_f32pairs = fp != NULL && strcmp(fp, "0") == 0;
    for (int v = 0; v < 2; v++)
        for (int s = 0; s < 2; s++)
            for (int m = 0; m < 2; m++) {
                const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                    &dev->occ_f32pairs[v][s][m], k_pairs_f32_fn[v][s][m], BLOCK, 0);
                if (err != cudaSuccess)
                    return gs__cuda_error(
                        (int)err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor(f32 pairs)");
            }
    return GS_OK;
}

extern "C" int gs__cuda_f32pairs_fits(const gs__cuda_dev_t *dev, const gs_kfused_t *k)
{
    if (dev->no_f32pairs || k->nprog < 1 || k->prog[0].op != GS_OP_LEAF) return 0;
    if (k->prog[0].arg < 0 || k->prog[0].arg >= k->nleaves) return 0;
    const gs_kleaf_t &lf = k->leaves[k->prog[0].arg];
    f32_chain c;
    if ((lf.kind != GS_LEAF_NORMAL_F32_V3 && lf.kind != GS_LEAF_NORMAL_F32_V4) ||
        !chain_f32_of(*k, c))
        return 0;
    if (k->ndim < 1 || k->ndim > 2) return 0;
    for (int j = 0; j < k->ndim; j++)
        if (k->shape[j] <= 0) return 0;
    const int64_t s = lf.stride[k->ndim - 1];
    if (s != 1 && s != 2) return 0;
    if (k->terminal == GS_TERM_STORE) return 1;
    return k->terminal == GS_TERM_REDUCE && k->redop == GS_RED_SUM && k->red_axis == -1 &&
           k->out_dtype == GS_DTYPE_FLOAT64;
}

extern "C" int gs__cuda_launch_f32pairs(const gs__cuda_dev_t *dev, void *stream,
                                        const gs_kfused_t *k, double *partials,
                                        size_t npartials, unsigned int *counter,
                                        gs_status_t *st_p)
{
    const int nd = k->ndim;
    const gs_kleaf_t &lf = k->leaves[k->prog[0].arg];
    const int s2 = lf.stride[nd - 1] == 2, v4 = lf.kind == GS_LEAF_NORMAL_F32_V4;
    const bool sum = k->terminal != GS_TERM_STORE;
    const int64_t R = nd == 2 ? k->shape[0] : 1, L = k->shape[nd - 1];
    /* units a row can touch: ((o & 3) + s (L - 1)) / 4 + 1 blocks (v3) or
     * ((o & 7) + s (L - 1)) / 8 + 1 groups (v4) at most */
    const int64_t ppr = ((s2 ? 2 : 1) * (L - 1)) / (v4 ? 8 : 4) + 2;
    /* one wave of resident blocks (as k_pairs): the x blocks cover a row, the y blocks walk
     * the rows */
    const int occ = dev->occ_f32pairs[v4][s2][sum];
    const int64_t cap = (int64_t)(dev->num_sms > 0 ? dev->num_sms : 1) * (occ > 0 ? occ : 16);
    int64_t gx = (ppr + U * BLOCK - 1) / (U * BLOCK);
    if (gx > cap) gx = cap;
    int64_t gy = cap / gx;
    if (gy < 1) gy = 1;
    if (gy > R) gy = R;
    if (gy > 65535) gy = 65535;
    if (sum && (size_t)(gx * gy) > npartials) return 0;
    void *args[3] = {(void *)k, (void *)&partials, (void *)&counter};
    cudaError_t err = cudaLaunchKernel(k_pairs_f32_fn[v4][s2][sum], dim3((unsigned)gx, (unsigned)gy),
                                       dim3(BLOCK), args, 0, (cudaStream_t)stream);
    if (err == cudaSuccess) err = cudaGetLastError();
    *st_p = err != cudaSuccess ? gs__cuda_error((int)err, v4 ? "cudaLaunchKernel(f32 v4 blocks)" : "cudaLaunchKernel(f32 v3 pairs)") : GS_OK;
    return 1;
}
