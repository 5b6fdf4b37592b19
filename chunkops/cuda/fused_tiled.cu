/* Fused kernels over row tiles (STORE and FULL of regions the flat walk does not take) and
 * along an axis (ROW: a warp per record, COL: a thread per record), the merge of split
 * partials, and their tables. Design and shared device code: fused_device.cuh. Compiled with
 * --fmad=false. */
#include "chunkops/cuda/fused_device.cuh"
#include "chunkops/cuda/fused_tables.cuh"

namespace {

/* ---- kernels. U: elements (flat: slots) per thread per step, V: elements per flat slot;
 * U * V > 1 only for plans without random leaves. ---- */
/* STORE over tiles (regions the flat walk does not take): out[r * L + l] for tiles of
 * tile_rows x tpr threads, grid-strided. */
template <int D, int NL, int U>
__global__ void __launch_bounds__(BLOCK, min_blocks(D, U, GS__CUDA_ACC_SUM, KTILE)) k_store(const __grid_constant__ Plan p)
{
    const int trow = threadIdx.x / p.tpr;
    const int tcol = threadIdx.x - trow * p.tpr;
    if (trow >= p.tile_rows) return;
    const int64_t step = (int64_t)gridDim.x * p.tpr;
    with_chain<D, NL, U>(p, [&](auto cc) {
        constexpr int C = decltype(cc)::value;
        for (int64_t r = (int64_t)blockIdx.y * p.tile_rows + trow; r < p.R;
             r += (int64_t)gridDim.y * p.tile_rows) {
            int64_t row[NL], idx, o[NL], ds[NL];
            row_offsets<NL, false>(p, r, row, idx);
            double *out = p.out + r * p.L;
            const int64_t l0 = (int64_t)blockIdx.x * p.tpr + tcol;
            row_walk<NL>(p, row, l0, step, o, ds);
            for (int64_t l = l0; l < p.L; l += U * step) {
                int64_t off[U][NL];
                bool ok[U];
                double v[U];
                elem_offsets<NL, U>(p, row, o, ds, l, step, p.L, off, ok);
                eval<D, NL, U, C>(p, off, ok, v);
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (ok[u]) out[l + u * step] = v[u];
            }
        }
    });
}

/* FULL over tiles: the whole region into one record. */
template <int D, int NL, int U, int ACC>
__global__ void __launch_bounds__(BLOCK, min_blocks(D, U, ACC, KTILE)) k_full(const __grid_constant__ Plan p)
{
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    Acc<ACC> a;
    a.init(p);
    const int trow = threadIdx.x / p.tpr;
    const int tcol = threadIdx.x - trow * p.tpr;
    if (trow < p.tile_rows) {
        const int64_t step = (int64_t)gridDim.x * p.tpr;
        with_chain<D, NL, U>(p, [&](auto cc) {
            constexpr int C = decltype(cc)::value;
            for (int64_t r = (int64_t)blockIdx.y * p.tile_rows + trow; r < p.R;
                 r += (int64_t)gridDim.y * p.tile_rows) {
                int64_t row[NL], idx, o[NL], ds[NL];
                row_offsets<NL, IDX>(p, r, row, idx);
                const int64_t l0 = (int64_t)blockIdx.x * p.tpr + tcol;
                row_walk<NL>(p, row, l0, step, o, ds);
                for (int64_t l = l0; l < p.L; l += U * step) {
                    int64_t off[U][NL];
                    bool ok[U];
                    double v[U];
                    elem_offsets<NL, U>(p, row, o, ds, l, step, p.L, off, ok);
                    eval<D, NL, U, C>(p, off, ok, v);
                    fold<ACC, U, IDX>(p, a, v, ok, idx, l, step);
                }
            }
        });
    }
    full_finish<ACC, merge_group(D, ACC)>(p, a);
}

/* ROW: one warp per record (lanes along the reduced axis); gridDim.x splits the axis. */
template <int D, int NL, int U, int ACC>
__global__ void __launch_bounds__(BLOCK, min_blocks(D, U, ACC, KAXIS)) k_row(const __grid_constant__ Plan p)
{
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t step = (int64_t)gridDim.x * 32;
    with_chain<D, NL, U>(p, [&](auto cc) {
        constexpr int C = decltype(cc)::value;
        for (int64_t r = (int64_t)blockIdx.y * WARPS + warp; r < p.R;
             r += (int64_t)gridDim.y * WARPS) {
            int64_t row[NL], idx, o[NL], ds[NL];
            row_offsets<NL, IDX>(p, r, row, idx);
            const int64_t l0 = (int64_t)blockIdx.x * 32 + lane;
            row_walk<NL>(p, row, l0, step, o, ds);
            Acc<ACC> a;
            a.init(p);
            for (int64_t l = l0; l < p.L; l += U * step) {
                int64_t off[U][NL];
                bool ok[U];
                double v[U];
                elem_offsets<NL, U>(p, row, o, ds, l, step, p.L, off, ok);
                eval<D, NL, U, C>(p, off, ok, v);
                fold<ACC, U, IDX>(p, a, v, ok, idx, l, step);
            }
            warp_reduce(p, a);
            if (lane == 0) {
                if (gridDim.x == 1) a.write_out(p, p.out + r * p.wout);
                else a.put(p.partials + ((int64_t)blockIdx.x * p.R + r) * Acc<ACC>::W);
            }
        }
    });
}

/* COL: one thread per (record, split); t = split * R + record. */
template <int D, int NL, int U, int ACC>
__global__ void __launch_bounds__(BLOCK, min_blocks(D, U, ACC, KAXIS)) k_col(const __grid_constant__ Plan p)
{
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    const int64_t total = p.R * p.nsplit;
    with_chain<D, NL, U>(p, [&](auto cc) {
        constexpr int C = decltype(cc)::value;
        for (int64_t t = (int64_t)blockIdx.x * BLOCK + threadIdx.x; t < total;
             t += (int64_t)gridDim.x * BLOCK) {
            int64_t s = 0, r = t;
            if (p.nsplit > 1) {
                s = t / p.R;
                r = t - s * p.R;
            }
            int64_t row[NL], idx, o[NL], ds[NL];
            row_offsets<NL, IDX>(p, r, row, idx);
            const int64_t l0 = s * p.split_len;
            const int64_t l1 = l0 + p.split_len < p.L ? l0 + p.split_len : p.L;
            row_walk<NL>(p, row, l0, 1, o, ds);
            Acc<ACC> a;
            a.init(p);
            for (int64_t l = l0; l < l1; l += U) {
                int64_t off[U][NL];
                bool ok[U];
                double v[U];
                elem_offsets<NL, U>(p, row, o, ds, l, 1, l1, off, ok);
                eval<D, NL, U, C>(p, off, ok, v);
                fold<ACC, U, IDX>(p, a, v, ok, idx, l, 1);
            }
            if (p.nsplit == 1) a.write_out(p, p.out + r * p.wout);
            else a.put(p.partials + t * Acc<ACC>::W);
        }
    });
}

/* Merge nsplit partial records per output record, in split order (nsplit 0: empty records). */
template <int ACC>
__global__ void __launch_bounds__(BLOCK) k_merge(const __grid_constant__ Plan p)
{
    for (int64_t r = (int64_t)blockIdx.x * BLOCK + threadIdx.x; r < p.R;
         r += (int64_t)gridDim.x * BLOCK) {
        Acc<ACC> a;
        a.init(p);
        for (int32_t s = 0; s < p.nsplit; s++) {
            Acc<ACC> c;
            c.get_cg(p.partials + ((int64_t)s * p.R + r) * Acc<ACC>::W);
            a.merge(p, c);
        }
        a.write_out(p, p.out + r * p.wout);
    }
}

}  // namespace

/* Kernel table: [variant][mode][acc]; STORE has one kernel (acc 0). Variants: (stack depth,
 * leaves, elements per step) = CHAIN (1, 1, 1), PAIR (2, 2, 1), GENERIC (8, 8, 1), for
 * programs without random leaves CHAIN_MEM (1, 1, 4), PAIR_MEM (2, 2, 4), and EXT (9, 8, 1):
 * GENERIC with the extended ops (GS__CUDA_D_EXT). */
#define GS__ACCS(K, D, NL, U)                                                                    \
    {(const void *)K<D, NL, U, GS__CUDA_ACC_SUM>, (const void *)K<D, NL, U, GS__CUDA_ACC_MIN>,    \
     (const void *)K<D, NL, U, GS__CUDA_ACC_VAR>, (const void *)K<D, NL, U, GS__CUDA_ACC_ARG>}
#define GS__VARIANT(D, NL, U)                                                                    \
    {{(const void *)k_store<D, NL, U>, nullptr, nullptr, nullptr},                               \
     GS__ACCS(k_full, D, NL, U), GS__ACCS(k_row, D, NL, U), GS__ACCS(k_col, D, NL, U)}

const void *const gs__cuda_k_fused[GS__CUDA_NVARIANTS][GS__CUDA_NMODES][GS__CUDA_NACC] = {
    GS__VARIANT(1, 1, 1),
    GS__VARIANT(2, 2, 1),
    GS__VARIANT(GS_KERNEL_MAX_STACK, GS_KERNEL_MAX_LEAVES, 1),
    GS__VARIANT(1, 1, GS__CUDA_MEM_UNROLL),
    GS__VARIANT(2, 2, GS__CUDA_MEM_UNROLL),
    GS__VARIANT(GS__CUDA_D_EXT, GS_KERNEL_MAX_LEAVES, 1),
};

const void *const gs__cuda_k_merge[GS__CUDA_NACC] = {
    (const void *)k_merge<GS__CUDA_ACC_SUM>, (const void *)k_merge<GS__CUDA_ACC_MIN>,
    (const void *)k_merge<GS__CUDA_ACC_VAR>, (const void *)k_merge<GS__CUDA_ACC_ARG>};
