/* STENCIL on the CUDA backend (graph/kernel.h gs_kstencil_t): plan (stencil.c, plain C) and
 * kernel (stencil.cu). Plain C that compiles as CUDA C++; includes no CUDA header.
 *
 * The kernel sees every array as (Z, Y, X): ndim 1 is (1, 1, n), 2 is (1, n0, n1), 3 itself;
 * ndim > 3 is GS_ERR_UNSUPPORTED here (the CPU backend takes any ndim). A thread block of
 * GS__CUDA_BLOCK threads computes a tile of th x tw outputs of one z-plane: for each plane
 * offset dz it loads the padded tile ((th + 2 ry) x (tw + 2 rx)) into shared memory, from
 * the block's home piece directly when the tile lies inside it (every tile but those at a
 * chunk's edges), else element by element from whichever piece holds it (or the constant),
 * then accumulates the weights in row-major order, as the CPU backend does (bit-identical with
 * --fmad=false). The plan travels by value as a __grid_constant__ parameter (about 8.6 KB:
 * CUDA 12.1+ allows 32 KB on every architecture CUDA 13 supports).
 * 2-D stencils (no radius along z; (ry, rx) one of (1, 1), (2, 2), (0, 1), (1, 0)) take a
 * second kernel instead (k_stencil2d): a thread per column walks 16 rows down it with the
 * window of values in registers, no shared memory or barrier (1.66x the tiled kernel's rate
 * on an H100: 0.73 vs 1.21 ms per 10000^2 chunk); the same order of sums, the same bits.
 * GS_CUDA_STENCIL2D=0 in the environment keeps the tiled kernel (comparisons). */
#ifndef GS_CHUNKOPS_CUDA_STENCIL_H
#define GS_CHUNKOPS_CUDA_STENCIL_H

#include "graph/kernel.h"

#include <gsched/status.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GS__CUDA_STENCIL_OUTS 4   /* outputs per thread per tile: th * tw = OUTS * block */

typedef struct gs__cuda_spiece {
    const double *src;
    int64_t base;
    int64_t stride[3];
    int64_t lo[3], hi[3];          /* box in the padded block (z, y, x): [lo, hi) */
} gs__cuda_spiece_t;

typedef struct gs__cuda_splan {
    double *out;
    int64_t shape[3];              /* output (Z, Y, X) */
    int32_t r[3];
    int32_t tw, th;                /* tile of outputs */
    int32_t home;                  /* piece tried first (the largest), -1 when none */
    int32_t npieces, nweights;
    int64_t keep_lo[3], keep_hi[3];
    uint32_t grid[3];
    uint32_t smem;                 /* dynamic shared memory, bytes */
    double cval;
    gs__cuda_spiece_t pieces[GS_KERNEL_MAX_PIECES];
    double weights[GS_KERNEL_MAX_WEIGHTS];
} gs__cuda_splan_t;

/** Plan a validated spec. GS_ERR_UNSUPPORTED for ndim > 3 or a grid beyond CUDA's limits. */
gs_status_t gs__cuda_splan_build(const gs_kstencil_t *k, gs__cuda_splan_t *p);
/** Enqueue the stencil of plan @a p on @a stream (a cudaStream_t); nothing for an empty
 *  output. GS_ERR_UNSUPPORTED when its shared memory exceeds the device's per-block opt-in
 *  limit, GS_ERR_CUDA otherwise. */
gs_status_t gs__cuda_launch_stencil(void *stream, const gs__cuda_splan_t *p);

#ifdef __cplusplus
}
#endif
#endif
