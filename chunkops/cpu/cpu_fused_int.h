/* Internal to chunkops/cpu/cpu_fused*.c: the fused kernel's state (tile, simplified space,
 * scratch, reduction accumulators) shared by the walk (cpu_fused.c) and the REDUCE terminal
 * (cpu_fused_reduce.c). See cpu_fused.c's opening comment for the shape of the computation. */
#ifndef GS_CHUNKOPS_CPU_FUSED_INT_H
#define GS_CHUNKOPS_CPU_FUSED_INT_H

#include "chunkops/cpu/cpu.h"

#include <stdint.h>

#define GS__TILE 256
#define GS__NCOL (GS_KERNEL_MAX_LEAVES + 2)
#define GS__COL_REC GS_KERNEL_MAX_LEAVES        /* record index (axis reductions) */
#define GS__COL_AIDX (GS_KERNEL_MAX_LEAVES + 1) /* arg index */

typedef enum gs__fmode {
    GS__MODE_STORE = 0,
    GS__MODE_ALL,   /* reduce the whole region to one record */
    GS__MODE_INNER, /* reduce along the innermost (simplified) axis: one record per row */
    GS__MODE_OUTER  /* reduce along another axis: records updated elementwise along rows */
} gs__fmode_t;

typedef struct gs__seg {
    int32_t pos, len;
    int64_t off[GS__NCOL];
} gs__seg_t;

/* Simplified iteration space. */
typedef struct gs__space {
    int nd;                          /* >= 1 */
    int red;                         /* reduction axis in the simplified space, or -1 */
    int64_t shape[GS_MAX_NDIM];
    int64_t base[GS__NCOL];
    int64_t stride[GS__NCOL][GS_MAX_NDIM];
} gs__space_t;

/* Pairwise (cascade) summation of tile sums: O(log n) error growth. */
typedef struct gs__pairsum {
    int top;
    uint8_t lvl[64];
    double v[64];
} gs__pairsum_t;

typedef struct gs__scratch {
    double slot[GS_KERNEL_MAX_STACK][GS__TILE];
    double leaf[GS_KERNEL_MAX_LEAVES][GS__TILE];
    uint64_t idx[GS__TILE];
    gs__seg_t segs[GS__TILE];
} gs__scratch_t;

/* Set member by member per call, not cleared whole: sp is written by gs__space_build for the
 * axes in use and ps is read only below ps.top, so their ~1.5 KB need no clearing (for a
 * one-element task the clearing was most of gs__cpu_fused_run's time in `gs-bench tasks`). */
typedef struct gs__fused {
    const gs_kfused_t *k;
    gs__fmode_t mode;
    int redop, width;
    int typed;        /* some dtype is not float64: the typed rules of graph/kernel.h */
    int irec;         /* integer records (graph/kernel.h): int64 values, wrapping */
    gs__scratch_t *s;
    /* tile state */
    int nseg, n;
    const double *leafptr[GS_KERNEL_MAX_LEAVES]; /* materialised leaf for this tile or NULL */
    /* reduction state (ALL and INNER modes) */
    int64_t cur_rec;
    int64_t count;
    double acc[GS_KERNEL_MAX_RECORD];
    double *comp; /* OUTER sum/mean: Neumaier compensation per record */
    /* written before they are read (see above) */
    gs__space_t sp;
    gs__pairsum_t ps;
} gs__fused_t;

/* cpu_fused_reduce.c */
/* Reset the running accumulator (ALL and INNER modes). */
void gs__fused_acc_reset(gs__fused_t *f);
/* Write the running accumulator as record @a r. */
void gs__fused_acc_flush(gs__fused_t *f, int64_t r);
/* Fold the tile's values @a v (the program's result) into the records, by f->mode. */
void gs__fused_terminal(gs__fused_t *f, const double *v);

#endif
