/* Internal definitions of the graph module: expression nodes, layers, index maps.
 * Not installed; shared by array.c, dtype.c, grid.c, layer.c, layer_codec.c, lower.c,
 * taskgraph.c. */
#ifndef GS_GRAPH_INTERNAL_H
#define GS_GRAPH_INTERNAL_H

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "graph/kernel.h"
#include "graph/taskgraph.h"

#include <stdatomic.h>
#include <stdint.h>

/* Largest element count of an array: byte counts of partial records (up to
 * GS_KERNEL_MAX_RECORD doubles per element) stay far from overflowing 64 bits. */
#define GS__MAX_ELEMENTS (INT64_MAX / 32)

/* ---- expression nodes ---- */

/* A user kernel (gs_user_kernel_t) owned by a node or a layer: NUL-terminated copies. */
typedef struct gs__ukernel {
    char *library;
    char *symbol;
    uint8_t *arg;
    uint32_t arg_len;
    char *cuda_src;     /* a CUDA C++ kernel (NULL: the CPU kernel library/symbol) */
    uint32_t flags;     /* GS_KERNEL_* (gs__ukernel_copy leaves 0) */
} gs__ukernel_t;

/* Copy / free (NULL is fine). GS_ERR_INVALID_PARAM for NULL or empty names or arg over
 * GS__UKERNEL_MAX_ARG, GS_ERR_NO_MEMORY. */
#define GS__UKERNEL_MAX_ARG 65536u
gs_status_t gs__ukernel_copy(const char *library, const char *symbol, const void *arg,
                             size_t arg_len, gs__ukernel_t **uk_p);
void gs__ukernel_free(gs__ukernel_t *uk);
/* Make @a uk a CUDA kernel of source @a src (copied; NULL: leave it a CPU kernel).
 * GS_ERR_INVALID_PARAM for an empty source or one over GS__UKERNEL_MAX_SRC bytes,
 * GS_ERR_NO_MEMORY. */
#define GS__UKERNEL_MAX_SRC (1u << 20)
#define GS__UKERNEL_CUDA_LIB "<cuda>"   /* library field of CUDA kernels (unused) */
gs_status_t gs__ukernel_set_cuda(gs__ukernel_t *uk, const char *src);

#define GS__MAX_INPUTS 3           /* where(c, a, b) */

typedef enum gs__node_kind {
    GS__NODE_NORMAL = 0,
    GS__NODE_UNIFORM,
    GS__NODE_FULL,
    GS__NODE_ARANGE,
    GS__NODE_LITERAL,
    GS__NODE_UNARY,
    GS__NODE_BINARY,
    GS__NODE_BINARY_SCALAR,   /* a OP scalar */
    GS__NODE_SCALAR_BINARY,   /* scalar OP a */
    GS__NODE_SLICE,
    GS__NODE_TRANSPOSE,
    GS__NODE_REDUCE,
    GS__NODE_RECHUNK,         /* in[0] with another chunk grid (lower_copy.c) */
    GS__NODE_CONCAT,          /* in[0] ++ in[1] along u.cat.axis (lower_copy.c) */
    GS__NODE_MATMUL,          /* in[0] @ in[1] (linalg.c, lower_linalg.c) */
    GS__NODE_FACTOR,          /* one part of the QR / SVD of in[0] (linalg.c, lower_linalg.c) */
    GS__NODE_FILE,            /* array file: read, or write/commit of in[0] (array_file.c) */
    GS__NODE_STENCIL,         /* weighted neighbourhood of in[0] (stencil_int.h) */
    GS__NODE_MAPBLOCKS,       /* a user kernel per block of in[0..ninputs) (stencil_int.h) */
    GS__NODE_ASTYPE,          /* in[0] converted to this node's dtype (dtype.c) */
    GS__NODE_WHERE,           /* in[1] where in[0] else in[2], broadcast (array.c) */
    GS__NODE_RESHAPE,         /* in[0]'s elements in this grid's shape, block for block
                                 (array_shape.c, lower_shape.c) */
    GS__NODE_DIAG,            /* diagonal u.dg.k of the matrix in[0] (array_shape.c,
                                 lower_shape.c) */
    GS__NODE_SCAN             /* cumulative u.scan.op of in[0] along u.scan.axis, in this
                                 node's dtype (scan_int.h) */
} gs__node_kind_t;

/* ---- index maps: from a group's output coordinates to a leaf array's coordinates ----
 * src[a] = off[a] + step[a] * out[perm[a]], or off[a] when perm[a] == -1. */
typedef struct gs__lmap {
    int32_t ndim;                       /* leaf array ndim */
    int64_t off[GS_MAX_NDIM];
    int64_t step[GS_MAX_NDIM];
    int32_t perm[GS_MAX_NDIM];
} gs__lmap_t;

/* An array file and what a FILE node or layer does with it (array_file.c, layer_file.c).
 * Array coordinates map to file coordinates through `map` (file axis a reads
 * map.off[a] + map.step[a] * x[map.perm[a]], or map.off[a] when perm[a] is -1), so slices and
 * transposes of a file source become file sources reading only what they keep. */
typedef enum gs__file_op {
    GS__FILE_READ = 0,        /* chunks of the array from the file */
    GS__FILE_WRITE = 1,       /* in[0]'s chunks into `tmp`; one double (bytes written) per chunk */
    GS__FILE_COMMIT = 2,      /* in[0] (total bytes) checked; header, fsync, rename tmp -> path */
    GS__FILE_OP_COUNT
} gs__file_op_t;

typedef struct gs__fspec {
    int32_t op;               /* gs__file_op_t */
    char *path;               /* owned, NUL-terminated */
    char *tmp;                /* WRITE, COMMIT: owned temporary name; else NULL */
    int32_t fdtype;           /* gs_dtype_t stored in the file */
    int32_t swap;             /* stored in the other byte order */
    int32_t forder;           /* Fortran order */
    int64_t offset;           /* byte offset of element 0 */
    int32_t fndim;
    int64_t fshape[GS_MAX_NDIM];
    gs__lmap_t map;           /* READ, WRITE: array -> file coordinates (see above) */
    uint8_t *hdr;             /* COMMIT: owned header bytes */
    int64_t hdr_len;
    double expect;            /* COMMIT: bytes (raw) or chunks (zarr) the writes total */
    int32_t fmt;              /* GS_KFILE_RAW (raw, .npy) or GS_KFILE_ZARR */
    int32_t zver;             /* zarr: 2 or 3 */
    int32_t zcodec;           /* zarr: GS_ZCODEC_* */
    int32_t zlevel;
    int32_t zsep;             /* zarr: '.' or '/' */
    int64_t zchunk[GS_MAX_NDIM];
    double fill;              /* zarr fill_value: the value for floating fdtypes; for integer
                               * fdtypes and bool the int64 whose bit pattern this holds */
} gs__fspec_t;

/* Deep copy / free of a file spec (NULL is fine for free). NULL when out of memory. */
gs__fspec_t *gs__fspec_dup(const gs__fspec_t *f);
void gs__fspec_free(gs__fspec_t *f);
/* Elements of the file (product of fshape). */
int64_t gs__fspec_nelems(const gs__fspec_t *f);

/* Persisted chunks of a node (guarded by the module's persist lock). */
typedef struct gs__persist {
    uint64_t nblocks;
    gs_key_t *keys;
} gs__persist_t;

struct gs_array {
    atomic_long refs;
    uint64_t id;                 /* unique per process, for hashing during lowering */
    int32_t kind;                /* gs__node_kind_t */
    int32_t dtype;               /* gs_dtype_t of the elements (0: float64) */
    gs_grid_t grid;              /* shape and chunk bounds */
    int64_t size;                /* number of elements */
    int32_t ninputs;
    struct gs_array *in[GS__MAX_INPUTS];
    struct gs_array *free_next;  /* release worklist */
    gs__persist_t *persist;      /* NULL unless persisted; under the persist lock */
    union {
        struct {                 /* NORMAL: mean/std; UNIFORM: low/high; FULL: p0 value;
                                    ARANGE: p0 start, p1 step */
            uint64_t seed;
            double p0, p1;
            int32_t version;     /* NORMAL: V1, V2 or V3, default V3 (float32: V1, V3 or V4, default V4) */
            /* The node's dtype picks the definition: NORMAL/UNIFORM of dtype float32 use the
             * float32 definition (not a cast of float64 values); UNIFORM of dtype int64 is
             * random_integers, p0/p1 holding the int64 bit patterns of low/high (inclusive). */
        } gen;
        struct {
            double *data;        /* chunk order: block 0 row-major, block 1, ... */
        } lit;
        struct {
            int32_t op;          /* gs_unop_t or gs_binop_t */
            double scalar;
            int32_t skind;       /* gs_scalar_kind_t of the scalar (0: a Python float) */
        } op;
        struct {                 /* per input axis; src = start + step * out (or start if index) */
            int64_t start[GS_MAX_NDIM];
            int64_t step[GS_MAX_NDIM];
            int32_t index[GS_MAX_NDIM];
        } slice;
        struct {
            int32_t perm[GS_MAX_NDIM];   /* out axis i = input axis perm[i] */
        } tr;
        struct {
            int32_t op;          /* gs_redop_t */
            int32_t axis;        /* -1: all axes */
            int32_t split_every;
            double ddof;
        } red;
        struct {                 /* CONCAT: the inputs one after the other along output axis
                                    `axis`; expand[k]: input k lacks that axis and takes one
                                    position on it (stack). ninputs 1 or 2 */
            int32_t axis;
            uint8_t expand[2];
        } cat;
        struct {                 /* MATMUL: operand k is in[k], transposed when trans[k] (a
                                    folded x.T); nd[k] its ndim as an operand (1: a vector) */
            int32_t trans[2];
            int32_t nd[2];
        } mm;
        struct gs__fspec *file;  /* FILE: owned (gs__fspec_free) */
        struct {                 /* FACTOR: part `part` (GS__FAC_*) of the factorisation `op`
                                    (GS_LA_QR or GS_LA_SVD) of in[0] */
            int32_t op;
            int32_t part;
        } fac;
        struct {                 /* STENCIL: radius per axis, boundary, weights (owned);
                                    map_overlap: nweights 0 and a user kernel (owned) */
            int32_t radius[GS_MAX_NDIM];
            int32_t boundary;    /* gs_boundary_t */
            int32_t nweights;
            double cval;
            double *weights;
            struct gs__ukernel *user;
        } st;
        struct gs__ukernel *ub;  /* MAPBLOCKS: the kernel (owned) */
        struct {                 /* DIAG: in[0][i, i + k] (k >= 0) or in[0][i - k, i]; output
                                    chunks: one per piece of the diagonal inside one block */
            int64_t k;
        } dg;
        struct {                 /* SCAN: gs_scan_op_t, axis 0..ndim-1 */
            int32_t op;
            int32_t axis;
        } scan;
    } u;
};

/* The dtype node @a n's operation computes in (dtype.c): its operands are cast to it by the
 * lowering. Comparisons and logical ops: the promoted operand type (the result is bool);
 * isnan & co.: the operand's; otherwise the node's own dtype. */
int32_t gs__node_compute_dtype(const struct gs_array *n);

static inline int gs__node_is_generator(const struct gs_array *n)
{
    return n->kind == GS__NODE_NORMAL || n->kind == GS__NODE_UNIFORM ||
           n->kind == GS__NODE_FULL || n->kind == GS__NODE_ARANGE;
}

/* Copy the persisted keys of @a n (NULL *keys_p when not persisted). */
gs_status_t gs__array_persist_snapshot(const struct gs_array *n, uint64_t *nblocks_p,
                                       gs_key_t **keys_p);

/* Node construction for node kinds built outside array.c (one reference, unique id, the given
 * kind and grid ndim, everything else zero; NULL when out of memory). Free an unfinished node
 * (no references handed out yet) with gs__array_node_free(): it releases the grid bounds and
 * whatever array.c's own kinds own, but not the inputs. gs__array_node_finish() checks the element
 * and chunk counts of the node's grid (bounds set) and sets n->size; GS_ERR_INVALID_PARAM. */
struct gs_array *gs__array_node_new(int32_t kind, int32_t ndim);
void gs__array_node_free(struct gs_array *n);
gs_status_t gs__array_node_finish(struct gs_array *n);

/* Whether @a n is persisted now (it may change at any time). */
int gs__array_is_persisted(const struct gs_array *n);

/* Slice node over @a a from canonical per-axis parameters (one entry per axis of @a a):
 * index[ax] != 0 takes element start[ax] (in range) and drops the axis; otherwise the axis keeps
 * count[ax] elements start[ax] + step[ax] * t, all in range, with step 1 when count <= 1 and
 * start 0 when count is 0 (what gs_array_slice() computes from NumPy slices). Output chunks
 * follow the input chunks. New reference in *out_p; GS_ERR_NO_MEMORY or GS_ERR_INVALID_PARAM
 * (element/chunk count overflow). */
gs_status_t gs__array_slice_canonical(gs_array_h a, const int64_t *start, const int64_t *step,
                                      const int64_t *count, const int32_t *index,
                                      gs_array_h *out_p);

/* Slice pushdown (GS_LOWER_SLICE_PUSHDOWN, pushdown.c): an expression equal to @a root (same
 * values, shape and chunk grid) in which slices and transposes sit below elementwise nodes
 * wherever that is possible without duplicating work; see pushdown.c. *out_p gets a new
 * reference (possibly @a root itself). GS_ERR_NO_MEMORY; GS_ERR_INTERNAL if a rebuilt node is
 * rejected (a bug). */
gs_status_t gs__pushdown(struct gs_array *root, struct gs_array **out_p);
/* The same for several roots at once (@a nroots >= 1): a node two roots share stays one node,
 * and a root is not rewritten into another root's nodes. @a outs (caller's, nroots entries)
 * gets a new reference per root, all or none. */
gs_status_t gs__pushdown_many(size_t nroots, struct gs_array *const *roots,
                              struct gs_array **outs);

/* ---- the expression DAG in topological order (topo.c) ---- */

/* Called once per node when the walk first reaches it: *is_leaf_p = 1 keeps its inputs out of
 * the walk (persisted nodes). An error stops the walk and is returned. */
typedef gs_status_t (*gs__expr_leaf_fn)(struct gs_array *n, void *arg, int *is_leaf_p);

typedef struct gs__expr_topo {
    int64_t nnodes;
    struct gs_array **nodes;     /* [nnodes] topological order, the root last (borrowed refs) */
    int64_t (*in)[GS__MAX_INPUTS]; /* [nnodes] topological index of each input, -1 none/leaf */
    uint8_t *leaf;               /* [nnodes] the leaf callback said leaf */
} gs__expr_topo_t;

/* Nodes reachable from @a root, each once, inputs before consumers (iterative post-order DFS:
 * linear, no recursion). GS_ERR_NO_MEMORY or the callback's error; *t empty then. Free with
 * gs__expr_topo_cleanup. */
gs_status_t gs__expr_topo(struct gs_array *root, gs__expr_leaf_fn leaf_fn, void *arg,
                          gs__expr_topo_t *t);
/* The same over several roots (@a nroots >= 1, none NULL; duplicates and roots reachable from
 * other roots are fine): every node reachable from any root once, inputs before consumers.
 * @a root_idx (caller's, nroots entries, or NULL) gets each root's topological index. */
gs_status_t gs__expr_topo_many(size_t nroots, struct gs_array *const *roots,
                               gs__expr_leaf_fn leaf_fn, void *arg, gs__expr_topo_t *t,
                               int64_t *root_idx);
void gs__expr_topo_cleanup(gs__expr_topo_t *t);

/* ---- grids ---- */

/* Check a grid's structure (ndim, shape >= 0, nchunks >= 1, bounds 0..shape nondecreasing,
 * element and block counts fit in int64). Returns 1 when valid, 0 otherwise with *why_p set. */
int gs__grid_check(const gs_grid_t *g, const char **why_p);
/* Chunk index along @a axis containing coordinate @a c (0 <= c < shape), by bisection. */
int64_t gs__grid_find(const gs_grid_t *g, int axis, int64_t c);
/* Row-major block index from per-axis chunk indices. */
uint64_t gs__grid_block_index(const gs_grid_t *g, const int64_t *idx);
/* Whether @a x and @a y have the same shape and chunk bounds. */
int gs__grid_equal(const gs_grid_t *x, const gs_grid_t *y);
/* Per-axis chunk indices of block @a block. */
void gs__grid_block_coords(const gs_grid_t *g, uint64_t block, int64_t *idx_p);
/* Allocate bounds for @a ndim axes with nchunks already set (bounds zeroed). */
gs_status_t gs__grid_alloc(gs_grid_t *g);
/* Number of elements of the grid's array. */
int64_t gs__grid_size(const gs_grid_t *g);


/* ---- layers ---- */

typedef struct gs__fleaf {
    int32_t kind;                       /* gs_leaf_kind_t */
    int32_t src;                        /* GS_LEAF_CHUNK: index into sources */
    int64_t shape[GS_MAX_NDIM];         /* random/index leaves: the leaf array's shape */
    gs__lmap_t map;
    uint64_t seed;
    double p0, p1;
    int32_t dtype;                      /* gs_dtype_t: CHUNK leaves the source's, others 0 */
} gs__fleaf_t;

struct gs_layer {
    int32_t kind;                       /* gs_layer_kind_t */
    gs_grid_t grid;                     /* FUSED, LITERAL: output grid; COMBINE: outer grid */
    union {
        struct {
            int32_t terminal;
            int32_t redop;
            int32_t red_axis;
            int32_t nsrc;
            gs_grid_t *srcs;            /* [nsrc] grids of the chunk sources */
            int32_t nleaves;
            gs__fleaf_t leaves[GS_KERNEL_MAX_LEAVES];
            int32_t nprog;
            gs_kinstr_t prog[GS_KERNEL_MAX_PROG];
            int32_t out_dtype;          /* gs_dtype_t of STORE outputs; of REDUCE records
                                           (FLOAT64 or INT64, graph/kernel.h) */
        } f;
        struct {
            int32_t redop;
            int32_t finalize;
            double ddof;
            int64_t nprev;              /* partial groups per outer block in the previous level */
            int32_t split_every;
            int64_t ngroups;            /* ceil(nprev / split_every) */
            int32_t out_dtype;          /* gs_dtype_t of finalized outputs */
            int32_t rec_dtype;          /* of the records: FLOAT64 or INT64 (graph/kernel.h) */
        } c;
        struct {
            double *data;               /* chunk order */
            int64_t *off;               /* [nblocks + 1] offsets of each block in data */
        } lit;
        struct {                        /* COPY (layer_copy.c): explicit inputs and pieces */
            int64_t *ioff;              /* [nblocks + 1]: block b's inputs in_len[ioff[b]..) */
            int64_t *in_len;            /* expected elements of each input */
            int64_t *poff;              /* [nblocks + 1]: block b's pieces pieces[poff[b]..) */
            struct gs__cpiece *pieces;
            int32_t dtype;              /* gs_dtype_t of the elements moved */
        } cp;
        struct {                        /* LINALG (layer_linalg.c, linalg_int.h): per block */
            struct gs__lablk *blk;      /* [nblk] ops, shapes, table slices */
            uint64_t nblk;
            int64_t *in_len;            /* [nin] expected input lengths */
            uint64_t nin;
            struct gs__laview *views;   /* [nview] */
            uint64_t nview;
            int32_t op_all;             /* the op of every block, -1 mixed (set by the check) */
        } la;
        struct {                        /* FILE (layer_file.c); grid: READ the array's, WRITE
                                           the written array's (one 8-byte output per block),
                                           COMMIT ndim 0 */
            gs__fspec_t *spec;          /* owned */
        } file;
        struct {                        /* SLAB (layer_stencil.c): per block one input, a box */
            int64_t *tab;               /* [nblocks][1 + 3 ndim]: in_len, in_shape, lo, size */
            int32_t nd;                 /* ndim of the boxes (the grid is 1-D) */
        } sl;
        struct {                        /* USER (layer_map.c): per block its inputs */
            int64_t *ioff;              /* [nblocks + 1]: block b's inputs [ioff[b], ioff[b+1]) */
            int64_t *ibox;              /* [ninputs][1 + 2 ndim]: len, shape, global start */
            struct gs__ukernel *user;
            struct gs__ufuse *fuse;     /* fused producers/consumers (layer_map_fuse.c), or NULL */
            int32_t out_dtype;          /* gs_dtype_t of the kernel's output blocks */
            int32_t in_dtype[GS_KERNEL_MAX_USER_IN];   /* of the kernel's input k (every block) */
        } ub;
        struct {                        /* SCAN (layer_scan.c, scan_int.h): block b's input is
                                           block b of grid `src` (same axes; along `axis` the
                                           first grid.nchunks[axis] chunks) */
            int32_t op;                 /* gs_scan_op_t */
            int32_t mode;               /* GS_KSCAN_SCAN or GS_KSCAN_TOTAL */
            int32_t axis;
            int32_t chain;              /* TOTAL: blocks past the first along the axis also
                                           read the previous block of this layer (init) */
            int32_t in_dtype, out_dtype;
            gs_grid_t src;
        } sc;
    } u;
    /* STENCIL layers (layer_stencil.c): u.cp holds the per-block inputs and pieces (relative
     * to the padded block); this the rest. NULL for every other kind. */
    struct gs__stencil_hdr *st;
};

/* Allocate an empty layer of @a kind (grid ndim 0, no bounds). */
gs_layer_t *gs__layer_new(int32_t kind);

/* Resolution of one block of a FUSED layer: its region, its deduplicated inputs and, per leaf,
 * the input slot and addressing. */
typedef struct gs__fres {
    int64_t start[GS_MAX_NDIM];
    int64_t shape[GS_MAX_NDIM];
    int empty;
    int32_t ninputs;
    int32_t in_src[GS_KERNEL_MAX_LEAVES];     /* source index */
    uint64_t in_block[GS_KERNEL_MAX_LEAVES];  /* block of that source */
    int64_t in_len[GS_KERNEL_MAX_LEAVES];     /* elements of that block */
    int32_t leaf_slot[GS_KERNEL_MAX_LEAVES];  /* chunk leaves: input slot; others -1 */
    int64_t leaf_base[GS_KERNEL_MAX_LEAVES];
    int64_t leaf_stride[GS_KERNEL_MAX_LEAVES][GS_MAX_NDIM];
} gs__fres_t;

/* Resolve block @a block of FUSED layer @a l. GS_ERR_INVALID_PARAM (with a message) when the
 * block is out of range or a leaf's map leaves its array or crosses a chunk boundary. */
gs_status_t gs__fused_resolve(const gs_layer_t *l, uint64_t block, gs__fres_t *r);
/* 1 when fused layer @a l reads input chunks (has a GS_LEAF_CHUNK leaf); 0: every block has no
 * inputs (generators only), which needs no gs__fused_resolve. */
int gs__fused_reads_chunks(const gs_layer_t *l);
/* The FUSED kernel of block @a block of FUSED layer @a l (layer.c; as gs_layer_instantiate). */
gs_status_t gs__fused_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                  const gs_chunk_ref_t *inputs, double *out, gs_kfused_t *k);

/* Structural check of a layer built by the lowering or decoded from the wire. */
gs_status_t gs__layer_check(const gs_layer_t *l);

/* Number of records of a REDUCE-terminal block of region @a shape. */
int64_t gs__reduce_nrec(int32_t ndim, const int64_t *shape, int32_t red_axis);

#endif
