/* The fused kernels' tables (chunkops/cuda internal): host pointers to the kernel instances,
 * defined next to the kernels (fused_flat.cu, fused_tiled.cu) and used by the launchers and the
 * occupancy query (fused.cu). A nullptr entry has no kernel (STORE has only acc 0). */
#ifndef GS_CHUNKOPS_CUDA_FUSED_TABLES_CUH
#define GS_CHUNKOPS_CUDA_FUSED_TABLES_CUH

#include "chunkops/cuda/cuda_internal.h"

/* Tiled and axis kernels [variant][mode][acc] (fused_tiled.cu). */
extern const void *const gs__cuda_k_fused[GS__CUDA_NVARIANTS][GS__CUDA_NMODES][GS__CUDA_NACC];
/* The split / empty-region merge kernel per accumulator (fused_tiled.cu). */
extern const void *const gs__cuda_k_merge[GS__CUDA_NACC];
/* Flat kernels [variant][STORE, FULL][acc]; CHAIN's entry is its normal-leaf kernel
 * (fused_flat.cu). */
extern const void *const gs__cuda_k_flat[GS__CUDA_NVARIANTS][2][GS__CUDA_NACC];
/* Flat CHAIN over a uniform leaf [STORE, FULL][acc] (fused_flat.cu). */
extern const void *const gs__cuda_k_flat_uniform[2][GS__CUDA_NACC];

/* Transposed-tile kernels [variant][0 = STORE, 1 + acc = FULL] (fused_ttile.cu). */
extern const void *const gs__cuda_k_ttile[GS__CUDA_TT_VARIANTS][1 + GS__CUDA_NACC];

/* Normal pair kernels (versions 2 and 3) [U - 1][0 = STORE, 1 + acc = FULL] (fused_pairs.cu). */
extern const void *const gs__cuda_k_pairs[2][1 + GS__CUDA_NACC];

#endif
