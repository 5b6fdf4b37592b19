/* Fused kernels over 2-D regions that read a chunk transposed (plan.ttile): x + x.T, x.T
 * stored, (x - x.T).sum(). A leaf whose offsets have unit stride down the rows and a long one
 * along them would be read one element per 32-byte sector by a row-major walk (a warp's 32
 * lanes touch 32 sectors). Here a block takes GS__CUDA_TT x GS__CUDA_TT tiles of the region:
 * each transposed leaf's tile is loaded with the lanes running down the rows (coalesced) into
 * shared memory, then the program runs with the lanes along the row, reading the transposed
 * leaves from shared memory (a padded row: no bank conflicts) and the others directly
 * (coalesced for row-major leaves), so every byte of every input is read once. STORE writes
 * rows of the tile (coalesced); FULL folds each thread's elements in a fixed order and ends as
 * the other FULL kernels do (full_finish: deterministic). Compiled with --fmad=false.
 * CH (variant 2: depth and leaves <= 2, every leaf a chunk): each thread's values of the
 * row-major leaves are loaded into registers before the tile, so all of a tile's loads are in
 * flight together (the interpreter's leaf reads would otherwise wait one after the other); the
 * program then runs on them in the same order, so the result is the same bits. */
#include "chunkops/cuda/fused_device.cuh"
#include "chunkops/cuda/fused_tables.cuh"

namespace {

constexpr int TT = GS__CUDA_TT;
constexpr int TROWS = BLOCK / TT;

/* A thread's place in the tile (tx along a tile row, ty the first of its rows) and the tile
 * grid: tc tiles per row of tiles, ntiles in all. */
struct TtGrid {
    int tx, ty;
    int64_t tc, ntiles;
    __device__ __forceinline__ explicit TtGrid(const Plan &p)
        : tx(threadIdx.x % TT), ty(threadIdx.x / TT), tc((p.L + TT - 1) / TT),
          ntiles((p.R + TT - 1) / TT * ((p.L + TT - 1) / TT))
    {
    }
};

/* The program is two leaves and one binary op (x + x.T): evaluated without the interpreter. */
__device__ __forceinline__ bool tt_bin2(const Plan &p)
{
    return p.nprog == 3 && p.prog[0].op == GS_OP_LEAF && p.prog[1].op == GS_OP_LEAF &&
           p.prog[2].op >= GS_OP_ADD && p.prog[2].op <= GS_OP_MAX;
}


template <int D, int NL, int ACC, bool STORE, bool CH>
__global__ void __launch_bounds__(BLOCK) k_ttile(const __grid_constant__ Plan p)
{
    constexpr int J = TT / TROWS; /* elements of a tile per thread */
    __shared__ double tile[GS__CUDA_TT_MAX][TT][TT + 1];
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    Acc<ACC> a;
    a.init(p);
    const TtGrid g(p);
    const int tx = g.tx, ty = g.ty;
    const int64_t tc = g.tc, ntiles = g.ntiles;
    const bool bin2 = CH && tt_bin2(p);
    for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int64_t tr = t / tc;
        const int64_t r0 = tr * TT, l0 = (t - tr * tc) * TT;
        double lv[CH ? NL : 1][CH ? J : 1];
        if constexpr (CH) {
            const int64_t l = l0 + tx;
#pragma unroll
            for (int q = 0; q < NL; q++) {
                if (q >= p.nleaves || p.tslot[q] >= 0) continue;
                const gs__cuda_leaf_t &lf = p.leaves[q];
#pragma unroll
                for (int jj = 0; jj < J; jj++) {
                    const int64_t r = r0 + ty + jj * TROWS;
                    lv[q][jj] = r < p.R && l < p.L
                                    ? __ldg(lf.data + lf.base + r * lf.rstride[0] + l * lf.lstride)
                                    : 0.0;
                }
            }
        }
        __syncthreads(); /* the previous tile's reads are done */
        for (int k = 0; k < p.ntt; k++) {
            const gs__cuda_leaf_t &lf = p.leaves[p.tt_leaf[k]];
            const int64_t r = r0 + tx;
#pragma unroll
            for (int j = ty; j < TT; j += TROWS) {
                const int64_t l = l0 + j;
                if (r < p.R && l < p.L)
                    tile[k][j][tx] = __ldg(lf.data + lf.base + r * lf.rstride[0] + l * lf.lstride);
            }
        }
        __syncthreads();
        const int64_t l = l0 + tx;
#pragma unroll(CH ? J : 1)
        for (int jj = 0; jj < J; jj++) {
            const int j = ty + jj * TROWS;
            const int64_t r = r0 + j;
            if (r >= p.R || l >= p.L) continue;
            auto leaf = [&](int q) -> double {
                const int s = p.tslot[q];
                if (s >= 0) return tile[s][tx][j];
                if constexpr (CH) {
                    double x = lv[0][jj];
#pragma unroll
                    for (int k = 1; k < NL; k++)
                        if (q == k) x = lv[k][jj];
                    return x;
                } else {
                    const gs__cuda_leaf_t &lf = p.leaves[q];
                    return leaf_value(lf, lf.base + r * lf.rstride[0] + l * lf.lstride);
                }
            };
            double v;
            /* two leaves and one binary op (x + x.T): the interpreter's loop, stack shifts and
             * op tests left out; the same op on the same operands, so the same bits */
            if (CH && bin2) v = apply_binary1<true, false>(p.prog[2].op, leaf(p.prog[0].arg), leaf(p.prog[1].arg));
            else v = eval1_run<D, true>(p, leaf);
            if constexpr (STORE) {
                p.out[r * p.L + l] = v;
            } else {
                a.add(p, v, IDX ? p.index.base + r * p.index.rstride[0] + l * p.index.lstride : 0);
            }
        }
    }
    if constexpr (!STORE) full_finish<ACC, merge_group(D, ACC)>(p, a);
}


/* Variant 3: variant 2 for two chunk leaves, one read transposed and one row-major (x + x.T,
 * x - x.T), pipelined. Each thread holds its values of the next tile in registers (four of
 * the row-major leaf, four of the transposed one): they are loaded before this tile's program
 * runs, so a block's loads stay in flight while it computes, and the only wait per tile is for
 * values that were requested a whole tile earlier. Elements are visited, evaluated and
 * accumulated in the same order as variant 2 (the same bits for the same grid). Four blocks
 * per SM (64 registers; unbounded it takes 72 and three blocks). One H200, one 10000^2 chunk
 * pair of (x + x.T).sum(): 0.753 ms unpipelined, 0.545 ms pipelined at three or four blocks
 * per SM; gs-bench transpose-sum 40000^2: 12.2-12.4 ms -> 8.6-8.8 ms (four), 8.8-9.7 (three). */
template <int D, int ACC, bool STORE>
__global__ void __launch_bounds__(BLOCK, 4) k_ttile_pf(const __grid_constant__ Plan p)
{
    constexpr int J = TT / TROWS;
    __shared__ double tile[TT][TT + 1];
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    Acc<ACC> a;
    a.init(p);
    const TtGrid g(p);
    const int tx = g.tx, ty = g.ty;
    const int64_t tc = g.tc, ntiles = g.ntiles;
    const bool bin2 = tt_bin2(p);
    const int tq = p.tt_leaf[0], rq = 1 - tq; /* the transposed leaf and the row-major one */
    const gs__cuda_leaf_t &lr = p.leaves[rq], &lt = p.leaves[tq];
    double lv[J], tv[J];
    auto fetch = [&](int64_t t) {
        const int64_t tr = t / tc;
        const int64_t r0 = tr * TT, l0 = (t - tr * tc) * TT;
        const int64_t l = l0 + tx, rt = r0 + tx;
#pragma unroll
        for (int jj = 0; jj < J; jj++) {
            const int64_t r = r0 + ty + jj * TROWS;
            lv[jj] = r < p.R && l < p.L ? __ldg(lr.data + lr.base + r * lr.rstride[0] + l * lr.lstride) : 0.0;
            const int64_t lt_ = l0 + ty + jj * TROWS;
            tv[jj] = rt < p.R && lt_ < p.L ? __ldg(lt.data + lt.base + rt * lt.rstride[0] + lt_ * lt.lstride)
                                           : 0.0;
        }
    };
    int64_t t = blockIdx.x;
    if (t < ntiles) fetch(t);
    for (; t < ntiles; t += gridDim.x) {
        const int64_t tr = t / tc;
        const int64_t r0 = tr * TT, l0 = (t - tr * tc) * TT;
        __syncthreads(); /* the previous tile's reads of shared memory are done */
        double cv[J];
#pragma unroll
        for (int jj = 0; jj < J; jj++) {
            tile[ty + jj * TROWS][tx] = tv[jj];
            cv[jj] = lv[jj];
        }
        __syncthreads();
        if (t + gridDim.x < ntiles) fetch(t + gridDim.x);
        const int64_t l = l0 + tx;
#pragma unroll
        for (int jj = 0; jj < J; jj++) {
            const int j = ty + jj * TROWS;
            const int64_t r = r0 + j;
            if (r >= p.R || l >= p.L) continue;
            auto leaf = [&](int q) -> double { return q == tq ? tile[tx][j] : cv[jj]; };
            const double v = bin2 ? apply_binary1<true, false>(p.prog[2].op, leaf(p.prog[0].arg), leaf(p.prog[1].arg))
                                  : eval1_run<D, true>(p, leaf);
            if constexpr (STORE) {
                p.out[r * p.L + l] = v;
            } else {
                a.add(p, v, IDX ? p.index.base + r * p.index.rstride[0] + l * p.index.lstride : 0);
            }
        }
    }
    if constexpr (!STORE) full_finish<ACC, merge_group(D, ACC)>(p, a);
}

}  // namespace

/* [variant: 0 = depth/leaves <= 2, 1 = GENERIC, 2 = 0 with chunk leaves only (CH), 3 = 2
 * pipelined (k_ttile_pf)]
 * [0 = STORE, 1 + acc = FULL]. */
#define GS__TT_ROW(D, NL, CH)                                                                   \
    {(const void *)k_ttile<D, NL, GS__CUDA_ACC_SUM, true, CH>,                                  \
     (const void *)k_ttile<D, NL, GS__CUDA_ACC_SUM, false, CH>,                                 \
     (const void *)k_ttile<D, NL, GS__CUDA_ACC_MIN, false, CH>,                                 \
     (const void *)k_ttile<D, NL, GS__CUDA_ACC_VAR, false, CH>,                                 \
     (const void *)k_ttile<D, NL, GS__CUDA_ACC_ARG, false, CH>}

const void *const gs__cuda_k_ttile[GS__CUDA_TT_VARIANTS][1 + GS__CUDA_NACC] = {
    GS__TT_ROW(2, 2, false),
    GS__TT_ROW(GS_KERNEL_MAX_STACK, GS_KERNEL_MAX_LEAVES, false),
    GS__TT_ROW(2, 2, true),
    {(const void *)k_ttile_pf<2, GS__CUDA_ACC_SUM, true>,
     (const void *)k_ttile_pf<2, GS__CUDA_ACC_SUM, false>,
     (const void *)k_ttile_pf<2, GS__CUDA_ACC_MIN, false>,
     (const void *)k_ttile_pf<2, GS__CUDA_ACC_VAR, false>,
     (const void *)k_ttile_pf<2, GS__CUDA_ACC_ARG, false>},
};
