/* Fused chunk kernels: the launchers and the occupancy query (host code). The kernels are in
 * fused_flat.cu (the flat walk) and fused_tiled.cu (row tiles, axis reductions, split merges),
 * over the device code of fused_device.cuh, which also describes their design. */
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/cuda/fused_tables.cuh"

#include <cuda_runtime.h>
#include <cstdlib>
#include <cstring>

namespace {

typedef gs__cuda_fplan_t Plan;
constexpr int BLOCK = GS__CUDA_BLOCK;

const void *flat_kernel(const Plan *p, int acc)
{
    const int full = p->mode == GS__CUDA_MODE_FULL;
    if (p->variant == GS__CUDA_VAR_CHAIN && p->leaves[0].kind == GS_LEAF_UNIFORM)
        return gs__cuda_k_flat_uniform[full][acc];
    return gs__cuda_k_flat[p->variant][full][acc];
}

gs_status_t launch(const void *fn, dim3 grid, void *stream, const Plan *p, const char *what)
{
    void *args[1] = {(void *)p};
    cudaError_t err = cudaLaunchKernel(fn, grid, dim3(BLOCK), args, 0, (cudaStream_t)stream);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, what);
    return GS_OK;
}

}  // namespace

extern "C" gs_status_t gs__cuda_fused_occupancy(gs__cuda_dev_t *dev)
{
    for (int v = 0; v < GS__CUDA_NVARIANTS; v++)
        for (int m = 0; m < GS__CUDA_NMODES; m++)
            for (int a = 0; a < GS__CUDA_NACC; a++) {
                const void *fn = gs__cuda_k_fused[v][m][a];
                int n = 0;
                if (fn != nullptr) {
                    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, BLOCK, 0);
                    if (err != cudaSuccess)
                        return gs__cuda_error((int)err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
                }
                dev->occ_fused[gs__cuda_fused_kid(v, m, a)] = n;
            }
    for (int v = 0; v < GS__CUDA_NVARIANTS; v++)
        for (int m = 0; m < 2; m++)
            for (int a = 0; a < GS__CUDA_NACC; a++) {
                for (int u = 0; u < (v == GS__CUDA_VAR_CHAIN ? 2 : 1); u++) { /* CHAIN: both kinds */
                    const void *fn = u ? gs__cuda_k_flat_uniform[m][a] : gs__cuda_k_flat[v][m][a];
                    int n = 0;
                    if (fn != nullptr) {
                        cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, BLOCK, 0);
                        if (err != cudaSuccess)
                            return gs__cuda_error((int)err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
                    }
                    if (u) dev->occ_flat_uniform[m * GS__CUDA_NACC + a] = n;
                    else dev->occ_flat[gs__cuda_flat_kid(v, m ? GS__CUDA_MODE_FULL : GS__CUDA_MODE_STORE, a)] = n;
                }
            }
    for (int v = 0; v < GS__CUDA_TT_VARIANTS; v++)
        for (int m = 0; m < 1 + GS__CUDA_NACC; m++) {
            int n = 0;
            cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gs__cuda_k_ttile[v][m], BLOCK, 0);
            if (err != cudaSuccess)
                return gs__cuda_error((int)err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
            dev->occ_ttile[v * (1 + GS__CUDA_NACC) + m] = n;
        }
    /* pairs per thread and step of the pair kernels: 2 (one H200: the seed's kernel 0.186 ->
     * 0.178 ms); GS_CUDA_PAIRS_U=1 at context creation for comparisons */
    /* transposed tiles of one row-major and one transposed chunk leaf: pipelined (variant 3),
     * or GS_CUDA_TT_PF=0 at context creation: unpipelined (variant 2), for comparisons */
    const char *tpf = getenv("GS_CUDA_TT_PF");
    dev->tt_pf = !(tpf != NULL && strcmp(tpf, "0") == 0);
    const char *pu = getenv("GS_CUDA_PAIRS_U");
    dev->pairs_u = pu != NULL && strcmp(pu, "1") == 0 ? 1 : 2;
    for (int u = 0; u < 2; u++)
        for (int m = 0; m < 1 + GS__CUDA_NACC; m++) {
            int n = 0;
            cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gs__cuda_k_pairs[u][m], BLOCK, 0);
            if (err != cudaSuccess)
                return gs__cuda_error((int)err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
            dev->occ_pairs[u][m] = n;
        }
    int n = 0;
    for (int a = 0; a < GS__CUDA_NACC; a++) {
        int na = 0;
        cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&na, gs__cuda_k_merge[a], BLOCK, 0);
        if (err != cudaSuccess)
            return gs__cuda_error((int)err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
        if (a == 0 || na < n) n = na;
    }
    dev->occ_merge = n;
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_launch_fused(void *stream, const gs__cuda_fplan_t *p)
{
    gs_status_t st;
    switch (p->mode) {
    case GS__CUDA_MODE_NONE: return GS_OK;
    case GS__CUDA_MODE_MERGE_ONLY:
        if (p->merge_grid == 0) return GS_OK;
        return launch(gs__cuda_k_merge[p->acc], dim3(p->merge_grid), stream, p,
                      "cudaLaunchKernel(fused empty-region merge)");
    default: break;
    }
    const int acc = p->mode == GS__CUDA_MODE_STORE ? 0 : p->acc;
    const void *fn = p->pairs ? gs__cuda_k_pairs[p->pairs - 1][p->mode == GS__CUDA_MODE_FULL ? 1 + acc : 0]
                     : p->ttile ? gs__cuda_k_ttile[p->tvariant][p->mode == GS__CUDA_MODE_FULL ? 1 + acc : 0]
                     : p->flat ? flat_kernel(p, acc)
                               : gs__cuda_k_fused[p->variant][p->mode][acc];
    if ((st = launch(fn, dim3(p->grid_x, p->grid_y), stream, p, "cudaLaunchKernel(fused)")) != GS_OK)
        return st;
    if (p->merge_grid > 0)
        return launch(gs__cuda_k_merge[p->acc], dim3(p->merge_grid), stream, p,
                      "cudaLaunchKernel(fused split merge)");
    return GS_OK;
}
