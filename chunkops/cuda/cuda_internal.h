/**
 * Internals of the CUDA chunkops backend (chunkops/cuda/).
 *
 * Plain C that also compiles as CUDA C++: it includes no CUDA header, so the C glue, the
 * planner and the tests can use it. Three parts:
 *   - the device-memory arena (arena.c): a thread-safe sub-allocator over one cudaMalloc'ed
 *     range, pure bookkeeping on host memory (it never touches the device memory itself);
 *   - kernel plans (plan.c): a validated gs_kfused_t / gs_kcopy_t rewritten into the form the
 *     kernels run (unused leaves dropped, unit axes dropped, mergeable axes merged, launch
 *     geometry chosen), passed to the kernels by value;
 *   - launchers (fused.cu, misc.cu): plain-C entry points that enqueue kernels on a stream.
 */
#ifndef GS_CHUNKOPS_CUDA_INTERNAL_H
#define GS_CHUNKOPS_CUDA_INTERNAL_H

#include "chunkops/chunkops.h"
#include "graph/kernel.h"

#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>

#include <pthread.h>

#include "common/hashmap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Device-memory arena                                                                        */
/* ------------------------------------------------------------------------------------------ */

#define GS__ARENA_UNIT 256u     /* allocation granule and alignment, bytes */
#define GS__ARENA_NBINS 256     /* 16 exact small bins, then 4 sub-bins per power of two */

typedef struct gs__arena_blk {
    uint64_t off;               /* units from the arena base */
    uint64_t size;              /* units */
    int32_t prev, next;         /* address-order neighbours, -1 for none */
    int32_t fprev, fnext;       /* free-list links (fnext also chains recycled nodes) */
    int32_t bin;                /* free-list bin, -1 while allocated */
} gs__arena_blk_t;

typedef struct gs__cuda_arena {
    pthread_mutex_t lock;
    uintptr_t base;             /* first byte of the managed range (GS__ARENA_UNIT aligned) */
    uint64_t nunits;            /* managed size in units */
    uint64_t used_units;        /* units in allocated blocks */
    size_t nallocs;             /* live allocations */
    gs__arena_blk_t *blk;       /* block nodes, indexed by int32 */
    int32_t nblk, capblk;
    int32_t recycled;           /* head of recycled node indices (via fnext), -1 none */
    int32_t heads[GS__ARENA_NBINS];
    uint64_t bitmap[GS__ARENA_NBINS / 64];
    gs_u64map_t live;           /* allocated block offset (units) -> node index */
} gs__cuda_arena_t;

/** Manage [base, base + nbytes) (base GS__ARENA_UNIT aligned; the tail below one unit is
 *  unused). GS_ERR_NO_MEMORY when host bookkeeping cannot be allocated. */
gs_status_t gs__cuda_arena_init(gs__cuda_arena_t *a, uintptr_t base, size_t nbytes);
/** Release the bookkeeping (not the managed range). Live allocations are forgotten. */
void gs__cuda_arena_cleanup(gs__cuda_arena_t *a);
/** Allocate @a nbytes (0 allowed: one unit, a unique address) aligned to GS__ARENA_UNIT.
 *  GS_ERR_NO_DEVICE_MEMORY when no free block is large enough, GS_ERR_NO_MEMORY when host
 *  bookkeeping fails. *addr_p written only on success. Thread-safe. */
gs_status_t gs__cuda_arena_alloc(gs__cuda_arena_t *a, size_t nbytes, uintptr_t *addr_p);
/** Free an address returned by gs__cuda_arena_alloc(). GS_ERR_INVALID_PARAM for an address
 *  that is not a live allocation (nothing changes). Thread-safe. */
gs_status_t gs__cuda_arena_free(gs__cuda_arena_t *a, uintptr_t addr);
/** Bytes in allocated blocks (rounded to units), the managed size, live allocations and the
 *  largest free block. Any pointer may be NULL. Thread-safe. */
void gs__cuda_arena_stats(gs__cuda_arena_t *a, size_t *used_p, size_t *limit_p,
                          size_t *nallocs_p, size_t *largest_free_p);

/* ------------------------------------------------------------------------------------------ */
/* Kernel plans                                                                               */
/* ------------------------------------------------------------------------------------------ */

#define GS__CUDA_BLOCK 256      /* threads per block of every kernel */

/* Fused modes. STORE and FULL walk the region flat (plan.flat: one index over rows x loop,
 * offsets advanced incrementally; regions of at most 2 collapsed dims) or else rows (record
 * dims) x columns (loop dim) in tiles of tile_rows x tpr threads; ROW gives one warp per
 * record (lanes along the reduced axis);
 * COL gives one thread per record (and split). MERGE_ONLY: nothing to evaluate (empty
 * region), only the merge kernel writes empty records. */
enum {
    GS__CUDA_MODE_STORE = 0,
    GS__CUDA_MODE_FULL = 1,
    GS__CUDA_MODE_ROW = 2,
    GS__CUDA_MODE_COL = 3,
    GS__CUDA_NMODES = 4,
    GS__CUDA_MODE_MERGE_ONLY = 4,
    GS__CUDA_MODE_NONE = 5      /* empty STORE: nothing to launch */
};

/* Accumulators: SUM (also MEAN, whose count is known on the host), MIN (also MAX),
 * VAR (also STD), ARG (ARGMIN and ARGMAX). */
enum {
    GS__CUDA_ACC_SUM = 0,
    GS__CUDA_ACC_MIN = 1,
    GS__CUDA_ACC_VAR = 2,
    GS__CUDA_ACC_ARG = 3,
    GS__CUDA_NACC = 4
};

/* Program variants (template instances): stack depth and leaf count they support, and how
 * many elements a thread evaluates per step (several independent loads in flight for the
 * memory-bound plans; random leaves keep one, their registers go to the generator). The
 * memory-bound variants run only programs without random leaves and without costly ops
 * (gs__cuda_op_costly): a kernel allocates the registers of every function it calls. */
#define GS__CUDA_MEM_UNROLL 4
#define GS__CUDA_FLAT_VEC 2     /* flat walk of those plans: slots of 2 adjacent elements */
enum {
    GS__CUDA_VAR_CHAIN = 0,     /* depth 1, one random leaf: the leaf then unary ops */
    GS__CUDA_VAR_PAIR = 1,      /* depth <= 2, at most 2 leaves */
    GS__CUDA_VAR_GENERIC = 2,   /* depth <= GS_KERNEL_MAX_STACK, <= GS_KERNEL_MAX_LEAVES */
    GS__CUDA_VAR_CHAIN_MEM = 3, /* depth 1, at most 1 leaf, memory-bound: MEM_UNROLL per step */
    GS__CUDA_VAR_PAIR_MEM = 4,  /* PAIR memory-bound: GS__CUDA_MEM_UNROLL per step */
    GS__CUDA_VAR_EXT = 5,       /* GENERIC plus the extended ops (chunkops/elemwise.h) */
    GS__CUDA_NVARIANTS = 6
};

/* The EXT variant's kernels are the GENERIC ones instantiated with this stack depth, one more
 * than any program needs: a depth above GS_KERNEL_MAX_STACK is what compiles the extended ops
 * into a kernel (fused_device.cuh). Programs without extended ops never reach those kernels,
 * so the code, registers and speed of all the others stay as they were. */
#define GS__CUDA_D_EXT (GS_KERNEL_MAX_STACK + 1)

/** Ops the memory-bound variants leave to the others: divisions, square roots and the libm
 *  functions (exp, log, pow). */
static inline int gs__cuda_op_costly(int op)
{
    switch (op) {
    case GS_OP_EXP: case GS_OP_LOG: case GS_OP_SQRT: case GS_OP_DIV: case GS_OP_POW:
    case GS_OP_DIV_IMM: case GS_OP_POW_IMM: case GS_OP_RDIV_IMM: case GS_OP_RPOW_IMM: return 1;
    default: return 0;
    }
}

/* Transposed-tile kernels (fused_ttile.cu, plan.ttile): STORE/FULL over a 2-D region with up
 * to GS__CUDA_TT_MAX chunk leaves read transposed, in GS__CUDA_TT-square tiles staged through
 * shared memory. Four program variants: depth and leaves <= 2, GENERIC (no EXT), the first
 * with chunk leaves only (their loads issued before the tile's), and that one for exactly one
 * row-major and one transposed leaf, pipelined (the next tile's loads in flight). */
#define GS__CUDA_TT 32
#define GS__CUDA_TT_MAX 2
#define GS__CUDA_TT_VARIANTS 4
/** Index of a transposed-tile kernel: [variant][0 = STORE, 1 + acc = FULL]. */
static inline int gs__cuda_ttile_kid(int tv, int mode, int acc)
{
    return tv * (1 + GS__CUDA_NACC) + (mode == GS__CUDA_MODE_FULL ? 1 + acc : 0);
}

#define GS__CUDA_FUSED_KERNELS (GS__CUDA_NVARIANTS * GS__CUDA_NMODES * GS__CUDA_NACC)
static inline int gs__cuda_fused_kid(int variant, int mode, int acc)
{
    return (variant * GS__CUDA_NMODES + mode) * GS__CUDA_NACC + acc;
}

/* The flat kernels (plan.flat): STORE (acc 0) and FULL per variant and accumulator. */
#define GS__CUDA_FLAT_KERNELS (GS__CUDA_NVARIANTS * 2 * GS__CUDA_NACC)
static inline int gs__cuda_flat_kid(int variant, int mode, int acc)
{
    return (variant * 2 + (mode == GS__CUDA_MODE_FULL)) * GS__CUDA_NACC + acc;
}

/** Doubles per internal partial record of accumulator @a acc (SUM/MIN 1, VAR 3, ARG 2). */
static inline int gs__cuda_acc_width(int acc)
{
    return acc == GS__CUDA_ACC_VAR ? 3 : acc == GS__CUDA_ACC_ARG ? 2 : 1;
}

/* Device facts the planner needs, filled once per context. */
typedef struct gs__cuda_dev {
    int device;
    int num_sms;
    int occ_fused[GS__CUDA_FUSED_KERNELS];   /* resident blocks per SM, 0 = no such kernel */
    int occ_flat[GS__CUDA_FLAT_KERNELS];     /* the same for the flat kernels (CHAIN: over a
                                                normal leaf) */
    int occ_flat_uniform[2 * GS__CUDA_NACC]; /* flat CHAIN over a uniform leaf [full][acc] */
    int occ_ttile[GS__CUDA_TT_VARIANTS * (1 + GS__CUDA_NACC)]; /* gs__cuda_ttile_kid */
    int occ_pairs[2][1 + GS__CUDA_NACC];      /* pair kernels (v2, v3) [U - 1][0 = STORE,
                                                 1 + acc = FULL] */
    int occ_f32pairs[2][2][2];  /* float32 pair kernels [v3, v4][stride - 1][STORE, SUM] */
    int occ_merge;
    int occ_combine;
    int occ_copy;
    int no_flat;                /* 1: STORE/FULL plans keep to the tiles (GS_CUDA_FLAT=0 in the
                                   environment at context creation, gs_cuda_set_flat_walk) */
    int no_ttile;               /* 1: no transposed-tile kernels (GS_CUDA_TTILE=0 at context
                                   creation, gs_cuda_set_transpose_tiles) */
    int pairs_u;                /* pairs per thread and step of the pair kernels: 2, or 1
                                   (GS_CUDA_PAIRS_U=1 at context creation) */
    int tt_pf;                  /* 1: x + x.T-shaped transposed tiles take the pipelined
                                   variant 3 (default; 0 with GS_CUDA_TT_PF=0 at context
                                   creation or gs_cuda_set_transpose_tiles(ctx, 2)) */
    int no_f32pairs;            /* 1: typed float32 v3 programs take the CHAIN walk, not
                                   fused_pairs_f32.cu (GS_CUDA_F32PAIRS=0 at context creation) */
    int file_path;              /* params.file_path: gs_file_path_t (cufile.c) */
} gs__cuda_dev_t;

/** gs_cuda_set_transpose_tiles: 0 off, 1 on (pipelined where it applies), 2 on, unpipelined. */
static inline void gs__cuda_dev_set_ttile(gs__cuda_dev_t *dev, int mode)
{
    dev->no_ttile = mode == 0;
    dev->tt_pf = mode != 2;
}

/* Per-stream device scratch: partial records of split reductions and the ticket counter of
 * the last-block merge. Work on one stream runs in order, so one scratch per stream. */
typedef struct gs__cuda_scratch {
    unsigned int *counter;      /* device word, 0 between kernels */
    double *partials;
    size_t npartials;           /* doubles available at partials */
} gs__cuda_scratch_t;

/* An affine addressing term over the plan's coordinates (r decomposed over rshape, l):
 *   off(r, l) = base + sum_j p_j(r) * rstride[j] + l * lstride
 * FLAT plans (below) also walk it incrementally over the flat index e = wr * lw + wl:
 *   off = base + wr * frs + wl * lstride; a step of fvec * T elements adds fstep, plus fwrap
 *   when wl wraps past lw. */
typedef struct gs__cuda_leaf {
    int32_t kind;               /* gs_leaf_kind_t */
    int64_t base;
    int64_t lstride;
    int64_t rstride[GS_MAX_NDIM];
    int64_t frs;                /* FLAT: offset change per wrap row (rstride[0], or lw * lstride) */
    int64_t fstep;              /* FLAT: offset change per step while wl does not wrap */
    int64_t fwrap;              /* FLAT: further change when it wraps: frs - lw * lstride */
    const double *data;
    uint64_t seed;
    double p0, p1;
    uint32_t rk[20];            /* random leaves: Philox round keys (k0, k1) of rounds 0..9 */
} gs__cuda_leaf_t;

typedef struct gs__cuda_fplan {
    int32_t mode;               /* GS__CUDA_MODE_* */
    int32_t variant;            /* GS__CUDA_VAR_* */
    int32_t acc;                /* GS__CUDA_ACC_* (REDUCE) */
    int32_t redop;              /* gs_redop_t (REDUCE) */
    int32_t is_max;             /* MAX / ARGMAX */
    int32_t is_prod;            /* PROD: the width-1 accumulator (ACC_MIN) multiplies */
    int32_t is_mean;            /* MEAN: final records get [sum, count] */
    int32_t wout;               /* doubles per output record (gs_redop_width) */
    int32_t nr;                 /* record (row) dims */
    int64_t rshape[GS_MAX_NDIM];
    int64_t R;                  /* records (STORE/FULL: rows) */
    int64_t L;                  /* loop length (STORE/FULL: columns; axis modes: axis) */
    double count;               /* elements per output record (MEAN) */
    int32_t nleaves;
    int32_t nprog;
    gs__cuda_leaf_t leaves[GS_KERNEL_MAX_LEAVES];
    gs__cuda_leaf_t index;      /* ARG: flat index of the element (data/seed unused) */
    gs_kinstr_t prog[GS_KERNEL_MAX_PROG];
    int32_t tail_ma;            /* CHAIN, CHAIN_MEM whose prog[0] is the leaf: prog[1..] is at
                                   most MUL_IMM then ADD_IMM/SUB_IMM, */
    double tail_m, tail_a;      /* evaluated as x * tail_m + tail_a (identities 1.0 and -0.0) */
    double *out;
    /* geometry */
    int32_t flat;               /* STORE/FULL: 1 = the flat walk (k_flat_*), 0 = tiles */
    int32_t tpr;                /* threads per row of a tile (STORE/FULL/ROW) */
    int32_t tile_rows;          /* rows per tile (tpr * tile_rows <= GS__CUDA_BLOCK) */
    int32_t nsplit;             /* partial records per output record (1 = write out direct) */
    int64_t split_len;          /* COL: axis elements per split */
    uint32_t grid_x, grid_y;    /* fused kernel grid */
    uint32_t merge_grid;        /* merge kernel grid (0: no merge kernel) */
    /* FLAT walk (STORE/FULL with nr <= 1): the N = R * L elements in row-major order as slots
     * of fvec adjacent elements; thread t of T = grid_x * GS__CUDA_BLOCK takes slots t, t + T,
     * ...: fq + (t < fr) of them. The walk wraps its loop index at lw (L, or 2^30 for a 1-D
     * region) and advances it by fdl = (fvec * T) % lw per step. */
    int32_t fvec;               /* elements per slot: 1, or 2 (memory-bound variants) */
    uint32_t lw, fdl;
    uint32_t fq, fr;
    int32_t fodd;               /* fvec 2 and N odd: the slot N / 2 holds one element ... */
    uint32_t fodd_t;            /* ... and is the last slot of thread fodd_t */
    uint32_t fload2;            /* fvec 2: bit k = leaf k's pairs are one aligned 16-byte load */
    int32_t fstore2;            /* fvec 2, STORE: pairs are written as one 16-byte store */
    /* TTILE (STORE/FULL, nr == 1): tiles of GS__CUDA_TT x GS__CUDA_TT, block t of grid_x takes
     * tiles t, t + grid_x, ... (row-major over the tile grid); chunk leaves tt_leaf[0..ntt)
     * (tslot[leaf] = their index, -1 for the others) go through shared memory. */
    int32_t ttile;              /* 1: the transposed-tile kernels (k_ttile) */
    int32_t tvariant;           /* their variant: 0 (depth, leaves <= 2), 1 (GENERIC), 2 (0, chunks),
                                   3 (2 for one row-major and one transposed leaf, with the next
                                   tile's loads in flight during this one's work) */
    int32_t ntt;
    int32_t tt_leaf[GS__CUDA_TT_MAX];
    int8_t tslot[GS_KERNEL_MAX_LEAVES];
    /* PAIRS (STORE/FULL, nr <= 1, one GS_LEAF_NORMAL_V2 leaf with lstride 1 or one
     * GS_LEAF_NORMAL_V3 leaf with lstride 1 or 2, unary ops after it): thread j of row r (rows
     * over blockIdx.y, tpr = GS__CUDA_BLOCK) takes the row's j-th pair and gives both of its
     * elements that the row holds (fused_pairs.cu). */
    int32_t pairs;              /* U > 0: the pair kernels (k_pairs), U pairs per thread and
                                   step (dev.pairs_u); tail_* as for CHAIN */
    unsigned int *counter;      /* FULL: last-block ticket (from the scratch) */
    double *partials;           /* nsplit > 1 or FULL with > 1 block */
} gs__cuda_fplan_t;

/** Plan a validated fused spec for @a dev, using at most @a scratch->npartials doubles of
 *  partials. Pure host computation; never fails on a valid spec. */
void gs__cuda_fplan_build(const gs__cuda_dev_t *dev, const gs__cuda_scratch_t *scratch,
                          const gs_kfused_t *k, gs__cuda_fplan_t *p);

/* Copy pieces, collapsed: element q of a piece (rows decomposed over rshape, column c) moves
 * from src[src_base + sum_j q_j src_rstride[j] + c * src_cstride] to
 * out[dst_base + sum_j q_j dst_rstride[j] + c * dst_cstride]. */
#define GS__CUDA_COPY_GROUP 8   /* pieces per launch (keeps parameters under 4 KB) */
#define GS__CUDA_COPY_UNROLL 4  /* columns per thread per unit */
typedef struct gs__cuda_cpiece {
    const double *src;          /* elements of the plan's esize bytes */
    int64_t src_base, dst_base;
    int64_t src_cstride, dst_cstride;
    int64_t rows, cols;
    int64_t colchunks, units;   /* units = ceil(rows / tile_rows) * colchunks */
    int32_t nr, tpr, tile_rows, pad_;
    int64_t rshape[GS_MAX_NDIM - 1];
    int64_t src_rstride[GS_MAX_NDIM - 1];
    int64_t dst_rstride[GS_MAX_NDIM - 1];
} gs__cuda_cpiece_t;

typedef struct gs__cuda_cplan {
    int32_t npieces;
    uint32_t grid_x;
    double *out;                /* elements of esize bytes (the copy's elem_size) */
    int32_t esize;              /* 1, 2, 4 or 8 */
    gs__cuda_cpiece_t pieces[GS__CUDA_COPY_GROUP];
} gs__cuda_cplan_t;

/** Collapse piece @a i of a validated copy spec. Returns 0 when the piece is empty. */
int gs__cuda_cpiece_build(const gs_kcopy_t *k, int32_t i, gs__cuda_cpiece_t *pc);
/** Pick tpr / tile_rows for rows of @a cols elements (tpr * tile_rows <= GS__CUDA_BLOCK). */
void gs__cuda_tile_shape(int64_t cols, int32_t *tpr_p, int32_t *tile_rows_p);

/* ------------------------------------------------------------------------------------------ */
/* Launchers (fused.cu, misc.cu). @a stream is a cudaStream_t. They set nothing but the       */
/* launch; errors come back as GS_ERR_CUDA with gs_last_error() naming the call.              */
/* ------------------------------------------------------------------------------------------ */

/** Fill the occupancy table of @a dev (dev->device must be current). misc.cu. */
gs_status_t gs__cuda_kernels_init(gs__cuda_dev_t *dev);
/** The fused part of the table (fused.cu). */
gs_status_t gs__cuda_fused_occupancy(gs__cuda_dev_t *dev);
/** Enqueue the kernels of plan @a p (built by gs__cuda_fplan_build). */
gs_status_t gs__cuda_launch_fused(void *stream, const gs__cuda_fplan_t *p);
/** Enqueue a validated STORE fused spec that uses dtypes other than float64 (fused_typed.cu). */
gs_status_t gs__cuda_launch_typed(const gs__cuda_dev_t *dev, void *stream, const gs_kfused_t *k);
/** A validated typed REDUCE spec that is a whole-region SUM (red_axis -1, ndim >= 1, not
 *  empty): enqueue k_typed_sum (fused_typed.cu) with @a partials (>= one double per block) and
 *  the stream's ticket @a counter, set *st_p and return 1; return 0 (nothing enqueued) for any
 *  other spec, which the staging path handles. */
int gs__cuda_launch_typed_sum(const gs__cuda_dev_t *dev, void *stream, const gs_kfused_t *k,
                              double *partials, size_t npartials, unsigned int *counter,
                              gs_status_t *st_p);
/** 1 when the float32 version-3 / version-4 pair kernels (fused_pairs_f32.cu) take the
 *  validated typed spec @a k on @a dev: a GS_LEAF_NORMAL_F32_V3 or _V4 leaf first, read with stride 1 or 2 along the
 *  last axis of a non-empty 1-D or 2-D region, then float32 + - * by binary32 immediates and at
 *  most a final cast to float64, with a STORE terminal or a whole-region SUM into float64;
 *  0 for any other spec and when dev->no_f32pairs. Host only, no CUDA call (tests ask it). */
int gs__cuda_f32pairs_fits(const gs__cuda_dev_t *dev, const gs_kfused_t *k);
/** The float32 pair kernels' part of @a dev, at context creation (misc.cu's
 *  gs__cuda_kernels_init calls it): their occupancy entries, and dev->no_f32pairs from the
 *  environment (GS_CUDA_F32PAIRS=0: the CHAIN walk, for comparisons). */
gs_status_t gs__cuda_f32pairs_init(gs__cuda_dev_t *dev);
/** Enqueue the pair kernel for @a k (gs__cuda_f32pairs_fits holds): STORE (@a partials and
 *  @a counter unused), or the SUM with @a partials (>= one double per block) and the stream's
 *  ticket @a counter. Sets *st_p and returns 1; returns 0 (nothing enqueued) when a SUM's grid
 *  needs more than @a npartials partials. */
int gs__cuda_launch_f32pairs(const gs__cuda_dev_t *dev, void *stream, const gs_kfused_t *k,
                             double *partials, size_t npartials, unsigned int *counter,
                             gs_status_t *st_p);
/** A validated REDUCE spec with integer records (out_dtype GS_DTYPE_INT64, graph/kernel.h):
 *  enqueue the record initialisation and k_typed_ireduce (fused_typed.cu). */
gs_status_t gs__cuda_launch_typed_ireduce(const gs__cuda_dev_t *dev, void *stream,
                                          const gs_kfused_t *k);
/** Enqueue a validated combine. */
gs_status_t gs__cuda_launch_combine(const gs__cuda_dev_t *dev, void *stream,
                                    const gs_kcombine_t *k);
/** Enqueue one group of copy pieces. */
gs_status_t gs__cuda_launch_copy(void *stream, const gs__cuda_cplan_t *p);

/** Turn a cudaError_t (as int) from @a call into GS_ERR_CUDA with a message; a sticky error
 *  (gs__cuda_sticky) into GS_ERR_DEVICE_LOST, recorded for the device current on this thread
 *  (the context's health() names it from then on). */
/* cufile.c: the backend's file_read (chunkops.h), for the file path the context asked for
 * (gs__cuda_dev_t.file_path). gs__cuda_cufile_state: this process's cuFile (0: none, 1:
 * compatibility mode, 2: GPUDirect Storage), detected on the first call, and in *why_p
 * (static) why GDS is unavailable or what it runs on. */
gs_status_t gs__cuda_file_read(gs_chunkops_ctx_h ctx, const char *path,
                               const gs_chunkops_fspan_t *spans, size_t n, int *how_p);
int gs__cuda_cufile_state(const char **why_p);
/* ctx.c: the context's device description (lives as long as @a ctx). */
const gs__cuda_dev_t *gs__cuda_ctx_dev(gs_chunkops_ctx_h ctx);
gs_status_t gs__cuda_error(int err, const char *call);
/** Whether cudaError_t @a err (as int) leaves the context unusable (an illegal address, a
 *  launch failure, ...: chunkops.h GS_ERR_DEVICE_LOST). */
int gs__cuda_sticky(int err);
/** Record the first sticky error @a err of @a device, seen by @a where (lost.c). */
void gs__cuda_note_lost(int device, int err, const char *where);
/** GS_OK, or GS_ERR_DEVICE_LOST naming the recorded cause once @a device had a sticky error. */
gs_status_t gs__cuda_lost(int device);
/** The cudaStream_t of a "cuda" chunkops stream, and its context's device (ctx.c). */
void *gs__cuda_stream_raw(gs_chunkops_stream_h stream, int *device_p);
/** SCAN (scan.cu): the vtable entry. Validates @a k, enqueues the scan on @a stream. */
gs_status_t gs__cuda_scan(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_kscan_t *k);
/** The cuda_user op (rtc_launch.c): a user's CUDA C++ kernel, compiled and loaded once per
 *  process and device (up to GS__CUDA_RTC_MAX_LOADED kernels; then GS_ERR_NO_RESOURCE). */
#define GS__CUDA_RTC_MAX_LOADED 256
gs_status_t gs__cuda_rtc_user(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                              const gs_kuser_t *k);

#ifdef __cplusplus
}
#endif
/* ---- page-locked host buffers (pinned.c): host_alloc / host_free with a small cache ---- */

/* 32 slots: the worker's file threads (up to its running slots, 8 by default) each hold two
 * 16 MiB staging buffers of a file read at once (chunkops/fileio.c) */
#define GS__CUDA_PIN_SLOTS 32
#define GS__CUDA_PIN_CACHE_BYTES ((size_t)512 << 20)

typedef struct gs__cuda_pincache {
    pthread_mutex_t lock;
    void *ptr[GS__CUDA_PIN_SLOTS];      /* buffers given back, kept for reuse */
    size_t size[GS__CUDA_PIN_SLOTS];
    int n;
    size_t bytes;                       /* sum of size[0..n) */
    unsigned long long hits;            /* allocations served from the cache */
} gs__cuda_pincache_t;

/** An empty cache. GS_ERR_NO_RESOURCE when its mutex cannot be made. */
gs_status_t gs__cuda_pincache_init(gs__cuda_pincache_t *c);
/** @a nbytes of page-locked, page-aligned host memory in *ptr_p (a cached buffer that fits, or
 *  a new cudaHostAlloc; the caller has made the context's device current). Errors:
 *  GS_ERR_NO_MEMORY, GS_ERR_CUDA. Give it back with gs__cuda_pinned_free only. */
gs_status_t gs__cuda_pinned_alloc(gs__cuda_pincache_t *c, size_t nbytes, void **ptr_p);
/** Give back @a ptr (NULL: nothing): kept for reuse while the cache has room, else freed
 *  (cudaFreeHost, which waits for the device). The caller must not touch it afterwards. */
void gs__cuda_pinned_free(gs__cuda_pincache_t *c, void *ptr);
/** Free every cached buffer and the mutex (buffers still held by callers stay valid until
 *  their gs__cuda_pinned_free, which must come before the context goes). */
void gs__cuda_pincache_destroy(gs__cuda_pincache_t *c);

#endif
