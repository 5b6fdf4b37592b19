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

template <int D, int NL, int ACC, bool STORE, bool CH>
__global__ void __launch_bounds__(BLOCK) k_ttile(const __grid_constant__ Plan p)
{
    constexpr int J = TT / TROWS; /* elements of a tile per thread */
    __shared__ double tile[GS__CUDA_TT_MAX][TT][TT + 1];
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    Acc<ACC> a;
    a.init(p);
    const int tx = threadIdx.x % TT, ty = threadIdx.x / TT;
    const int64_t tc = (p.L + TT - 1) / TT;
    const int64_t ntiles = (p.R + TT - 1) / TT * tc;
    const bool bin2 = CH && p.nprog == 3 && p.prog[0].op == GS_OP_LEAF && p.prog[1].op == GS_OP_LEAF &&
                      p.prog[2].op >= GS_OP_ADD && p.prog[2].op <= GS_OP_MAX;
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

}  // namespace

/* [variant: 0 = depth/leaves <= 2, 1 = GENERIC, 2 = 0 with chunk leaves only (CH)]
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
};
