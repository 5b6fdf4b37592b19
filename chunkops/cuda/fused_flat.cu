/* Fused kernels, flat walk: STORE and FULL over regions of at most two collapsed dims (nearly
 * every chunk task), one instance per variant, accumulator and (CHAIN) leaf kind, and their
 * table. Design and shared device code: fused_device.cuh. Compiled with --fmad=false. */
#include "chunkops/cuda/fused_device.cuh"
#include "chunkops/cuda/fused_tables.cuh"

namespace {

/* ---- kernels. U: elements (flat: slots) per thread per step, V: elements per flat slot;
 * U * V > 1 only for plans without random leaves. ---- */
/* Flat STORE: element e to out[e]. */
template <int D, int NL, int U, int V, int KIND = KIND_ANY>
__global__ void __launch_bounds__(BLOCK, min_blocks(D, U * V, GS__CUDA_ACC_SUM, KFLAT, KIND)) k_flat_store(const __grid_constant__ Plan p)
{
    const uint32_t t = blockIdx.x * BLOCK + threadIdx.x;
    const uint32_t n = p.fq + (t < p.fr ? 1u : 0u);
    if (n == 0) return;
    uint32_t wl;
    int64_t off[NL], idx;
    flat_start<NL, false>(p, t * V, wl, off, idx);
    double *o = p.out + (size_t)t * V;
    const size_t ostep = (size_t)V * gridDim.x * BLOCK;
    with_chain<D, NL, U * V, KIND>(p, [&](auto cc) {
        constexpr int C = decltype(cc)::value;
        if constexpr (U * V == 1) {
            for (uint32_t m = n; m > 0; m--) {
                *o = eval1<D, NL, C>(p, off);
                o += ostep;
                flat_advance<NL, false>(p, wl, off, idx);
            }
        } else {
            const bool half = p.fodd && t == p.fodd_t;
            for (uint32_t m = n; m > 0; m = m > U ? m - U : 0) {
                int64_t eo[U * V][NL], ix[U * V];
                bool ok[U * V];
                double v[U * V];
                flat_gather<NL, false, U, V>(p, m, half, wl, off, idx, eo, ix, ok);
                eval<D, NL, U * V, C, V>(p, eo, ok, v);
#pragma unroll
                for (int u = 0; u < U; u++) {
                    double *q = o + u * ostep;
                    if (V == 2 && p.fstore2 && ok[u * V + V - 1]) {
                        *reinterpret_cast<double2 *>(q) = make_double2(v[u * V], v[u * V + V - 1]);
                    } else {
#pragma unroll
                        for (int w = 0; w < V; w++)
                            if (ok[u * V + w]) q[w] = v[u * V + w];
                    }
                }
                o += U * ostep;
            }
        }
    });
}

/* Flat FULL: the whole region into one record. */
template <int D, int NL, int U, int V, int ACC, int KIND = KIND_ANY>
__global__ void __launch_bounds__(BLOCK, min_blocks(D, U * V, ACC, KFLAT, KIND)) k_flat_full(const __grid_constant__ Plan p)
{
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    Acc<ACC> a;
    a.init(p);
    const uint32_t t = blockIdx.x * BLOCK + threadIdx.x;
    const uint32_t n = p.fq + (t < p.fr ? 1u : 0u);
    if (n > 0) {
        uint32_t wl;
        int64_t off[NL], idx;
        flat_start<NL, IDX>(p, t * V, wl, off, idx);
        with_chain<D, NL, U * V, KIND>(p, [&](auto cc) {
            constexpr int C = decltype(cc)::value;
            if constexpr (U * V == 1) {
                for (uint32_t m = n; m > 0; m--) {
                    a.add(p, eval1<D, NL, C>(p, off), idx);
                    flat_advance<NL, IDX>(p, wl, off, idx);
                }
            } else {
                const bool half = p.fodd && t == p.fodd_t;
                for (uint32_t m = n; m > 0; m = m > U ? m - U : 0) {
                    int64_t eo[U * V][NL], ix[U * V];
                    bool ok[U * V];
                    double v[U * V];
                    flat_gather<NL, IDX, U, V>(p, m, half, wl, off, idx, eo, ix, ok);
                    eval<D, NL, U * V, C, V>(p, eo, ok, v);
#pragma unroll
                    for (int j = 0; j < U * V; j++)
                        if (ok[j]) a.add(p, v[j], ix[j]);
                }
            }
        });
    }
    full_finish<ACC, merge_group(D, ACC)>(p, a);
}

}  // namespace

/* Flat kernels: [variant][STORE, FULL][acc]; (stack depth, leaves, slots per step, elements
 * per slot): CHAIN, PAIR, GENERIC, EXT (., ., 1, 1), CHAIN_MEM, PAIR_MEM (., ., MEM_UNROLL / 2,
 * 2). */
#define GS__FLAT_ACCS(D, NL, U, V, K)                                                            \
    {(const void *)k_flat_full<D, NL, U, V, GS__CUDA_ACC_SUM, K>,                                \
     (const void *)k_flat_full<D, NL, U, V, GS__CUDA_ACC_MIN, K>,                                \
     (const void *)k_flat_full<D, NL, U, V, GS__CUDA_ACC_VAR, K>,                                \
     (const void *)k_flat_full<D, NL, U, V, GS__CUDA_ACC_ARG, K>}
#define GS__FLAT_VARIANT(D, NL, U, V, K)                                                         \
    {{(const void *)k_flat_store<D, NL, U, V, K>, nullptr, nullptr, nullptr},                    \
     GS__FLAT_ACCS(D, NL, U, V, K)}

/* CHAIN's entry is its normal-leaf kernel; gs__cuda_k_flat_uniform holds the uniform-leaf ones. */
const void *const gs__cuda_k_flat[GS__CUDA_NVARIANTS][2][GS__CUDA_NACC] = {
    GS__FLAT_VARIANT(1, 1, 1, 1, GS_LEAF_NORMAL),
    GS__FLAT_VARIANT(2, 2, 1, 1, KIND_ANY),
    GS__FLAT_VARIANT(GS_KERNEL_MAX_STACK, GS_KERNEL_MAX_LEAVES, 1, 1, KIND_ANY),
    GS__FLAT_VARIANT(1, 1, GS__CUDA_MEM_UNROLL / GS__CUDA_FLAT_VEC, GS__CUDA_FLAT_VEC, KIND_ANY),
    GS__FLAT_VARIANT(2, 2, GS__CUDA_MEM_UNROLL / GS__CUDA_FLAT_VEC, GS__CUDA_FLAT_VEC, KIND_ANY),
    GS__FLAT_VARIANT(GS__CUDA_D_EXT, GS_KERNEL_MAX_LEAVES, 1, 1, KIND_ANY),
};

const void *const gs__cuda_k_flat_uniform[2][GS__CUDA_NACC] = GS__FLAT_VARIANT(1, 1, 1, 1, GS_LEAF_UNIFORM);
