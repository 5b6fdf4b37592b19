/* Internal state of the lowering (lower.c), shared with the builders of layers that list their
 * inputs explicitly per block (matrix and data-movement layers). Not installed. */
#ifndef GS_GRAPH_LOWER_INT_H
#define GS_GRAPH_LOWER_INT_H

#include "common/vec.h"
#include "graph/graph_internal.h"

#define LW_EXT_TAG (UINT64_C(1) << 63)
#define LW_NONE UINT64_MAX
#define LW_SRC_USER INT64_MIN   /* lw_layer_t.src_ref: the user kernel's output in the task */

typedef struct lw_node {
    struct gs_array *n;
    int64_t in[GS__MAX_INPUTS];   /* node indices of inputs */
    uint32_t uses;
    uint8_t inl[GS__MAX_INPUTS];  /* edge inlined into this node's kernel */
    uint8_t genlike;        /* generator, or slices/transposes of one, all inlined */
    uint8_t cheap;          /* genlike, or slices/transposes of a chunk read: no compute */
    uint8_t materialised;
    uint8_t root;           /* one of the lowering's results */
    int32_t prog, stack, leaves;   /* kernel cost when inlined */
    int64_t layer;          /* lowering layer holding the node's output, -1 none */
    int64_t pidx;           /* index into persisted table, -1 none */
} lw_node_t;

typedef struct lw_persist {
    int64_t node;
    uint64_t nblocks;
    gs_key_t *keys;
    uint64_t *ext;          /* per block: external index + 1 (0 = unused) */
} lw_persist_t;

typedef struct lw_ref {
    int64_t layer;          /* >= 0 layer, < 0: -(persist idx) - 1 */
    uint64_t block;
} lw_ref_t;

typedef struct lw_layer {
    gs_layer_t *l;
    int64_t src_ref[GS_KERNEL_MAX_LEAVES];   /* FUSED: >= 0 layer, < 0: -(persist idx) - 1 */
    int64_t src_node[GS_KERNEL_MAX_LEAVES];  /* FUSED: node index of each source */
    int32_t comb_first;     /* COMBINE: previous layer is the partial over the input grid */
    int32_t comb_axis;      /* COMBINE level 1: reduced axis of the input grid, -1 all */
    int64_t prev;           /* COMBINE: previous layer */
    int64_t user_node;      /* FUSED being built: the elementwise user kernel node whose output
                               block a leaf reads (src_ref LW_SRC_USER), -1 none */
    uint64_t *xoff;         /* explicit inputs (LINALG, COPY layers): block b's inputs are
                               xrefs[xoff[b] .. xoff[b + 1]); NULL for FUSED/COMBINE */
    lw_ref_t *xrefs;
    uint8_t *need;
    uint64_t *task;         /* block -> task id */
    int64_t newidx;         /* index in the task graph, -1 dropped */
} lw_layer_t;

typedef struct lw {
    unsigned flags;
    uint32_t cpu_threads;   /* gs_lower_hints_t.cpu_threads (0: unknown) */
    lw_node_t *nodes;
    int64_t nnodes;
    lw_persist_t *pers;
    int64_t npers;
    GS_VEC(lw_layer_t) layers;
    size_t nroots;          /* results (gs__graph_lower_roots): their node indices */
    int64_t *roots;
} lw_t;

/* Lower the @a n expressions @a arrays (n >= 1, none NULL) into one task graph (*tg_p): nodes
 * they share are computed once. The outputs are each root's blocks in turn, root r's at
 * outputs[out_off[r] .. out_off[r + 1]) (@a out_off: caller's, n + 1 entries, or NULL);
 * out_grid and out_dtype are the first root's. @a hints: NULL or the caller's
 * (gs_graph_lower_hinted). Errors as gs_graph_lower(). */
gs_status_t gs__graph_lower_roots(size_t n, gs_array_h const *arrays, unsigned flags,
                                  const gs_lower_hints_t *hints,
                                  gs_taskgraph_t **tg_p, uint64_t *out_off);

/* Step 4 (lower_tasks.c): needed blocks, task numbering and dependencies of the built layers
 * into @a tg (outputs: the roots' blocks in turn, root r's from out_off[r] when out_off is
 * not NULL); the kept layers move to @a tg. GS_ERR_NO_MEMORY, GS_ERR_INTERNAL. */
gs_status_t gs__lw_tasks(lw_t *w, gs_taskgraph_t *tg, uint64_t *out_off);

/* Most inputs one task of any layer may list. */
#define LW_MAX_INPUTS 256

/* Append layer @a l (ownership moves, freed on failure) to the lowering; *idx_p its index.
 * The entry's pointer may move when later layers are added: index w->layers.data each time. */
gs_status_t gs__lw_add_layer(lw_t *w, gs_layer_t *l, int64_t *idx_p);

/* Reference to block @a block of the materialised output of node @a node (its layer, or its
 * persisted chunk). The node must be materialised or persisted. */
lw_ref_t gs__lw_node_ref(const lw_t *w, int64_t node, uint64_t block);

/* Give layer @a li explicit per-block inputs: xoff ([nblocks + 1], CSR offsets) and xrefs
 * (ownership of both moves to the lowering, also on failure). GS_ERR_INVALID_PARAM when a block
 * lists more than LW_MAX_INPUTS inputs. */
gs_status_t gs__lw_set_inputs(lw_t *w, int64_t li, uint64_t *xoff, lw_ref_t *xrefs);

/* Whether node kind @a kind is computed elementwise from its inputs (generators, elementwise
 * ops, slices, transposes) and so can be inlined into a fused kernel. Other kinds (reductions,
 * host data, matrix and data-movement ops) build their own layers. */
int gs__lw_kind_is_blockwise(int32_t kind);
/** The record dtype of reduction @a redop over values of @a dtype: GS_DTYPE_INT64 (integer
 *  records, graph/kernel.h) for SUM, PROD, MIN and MAX of int32, int64 and uint8, else
 *  GS_DTYPE_FLOAT64. */
int32_t gs__lw_rec_dtype(int32_t redop, int32_t dtype);

/* lower_build.c: the builder of node kind w->nodes[idx].n->kind (one of those below);
 * GS_ERR_INTERNAL for a kind without one. */
gs_status_t gs__lw_build_own(lw_t *w, int64_t idx, int64_t *idx_p);

/* Builders of node kinds with their own layers (lower_*.c): the layer holding the node's output
 * chunks (grid = the node's grid) in *idx_p. Inputs are w->nodes[idx].in[k], all materialised
 * or persisted (use gs__lw_node_ref). */

/* lower_file.c: FILE nodes (read, write, commit) to FILE layers. */
gs_status_t gs__lw_build_file(lw_t *w, int64_t idx, int64_t *idx_p);

/* lower_copy.c: RECHUNK (through intermediate grids when a block would need more than
 * GS_KERNEL_MAX_PIECES pieces) and CONCAT (a CONCAT flattened into its only consumer, a CONCAT
 * along the same axis, builds no layer: *idx_p = -1). */
gs_status_t gs__lw_build_rechunk(lw_t *w, int64_t idx, int64_t *idx_p);
gs_status_t gs__lw_build_concat(lw_t *w, int64_t idx, int64_t *idx_p);

/* lower_shape.c: RESHAPE (one COPY layer, one piece per block: block b is one input block
 * with another shape). */
gs_status_t gs__lw_build_reshape(lw_t *w, int64_t idx, int64_t *idx_p);
/* lower_shape.c: DIAG (one COPY layer: block b is one strided piece of one input block). */
gs_status_t gs__lw_build_diag(lw_t *w, int64_t idx, int64_t *idx_p);

/* lower_linalg.c: MATMUL (grouped GEMMs + a sum tree) and FACTOR (TSQR; the parts of one
 * factorisation of one input share its layers). */
gs_status_t gs__lw_build_matmul(lw_t *w, int64_t idx, int64_t *idx_p);
gs_status_t gs__lw_build_factor(lw_t *w, int64_t idx, int64_t *idx_p);

/* lower_stencil.c: STENCIL (a SLAB layer of the neighbours' edge slabs, when any, then the
 * STENCIL layer). GS_ERR_INVALID_PARAM when a block's halo needs more than
 * GS_KERNEL_MAX_PIECES pieces or inputs (neighbouring chunks much thinner than the radius). */
gs_status_t gs__lw_build_stencil(lw_t *w, int64_t idx, int64_t *idx_p);
/* lower_map.c: MAPBLOCKS (one USER layer; block b reads block b of each input; with inlined
 * producers a fused USER layer, lower_fuse_user.c). */
gs_status_t gs__lw_build_map_blocks(lw_t *w, int64_t idx, int64_t *idx_p);
/* lower_scan.c: SCAN (totals, carries and scans: up to three SCAN layers; scan_int.h). */
gs_status_t gs__lw_build_scan(lw_t *w, int64_t idx, int64_t *idx_p);

/* lower_map.c: the USER layer of MAPBLOCKS node @a idx (tables, kernel; no inputs set) in
 * *l_p (caller-owned). GS_ERR_NO_MEMORY. */
gs_status_t gs__lw_user_layer_new(const lw_t *w, int64_t idx, gs_layer_t **l_p);

/* An empty lowering entry for layer @a l (not yet added). */
void gs__lw_layer_init(lw_layer_t *ll, gs_layer_t *l);
/* Build (not add) a FUSED layer over @a grid computing node @a node (inlined, or one chunk
 * leaf reading it) into *ll (gs__lw_layer_init'ed here; ll->l owned by the caller on success,
 * ll->src_ref/src_node its sources, ll->user_node the user kernel whose output it reads). */
gs_status_t gs__lw_fused_make(lw_t *w, const gs_grid_t *grid, int64_t node, int inline_node,
                              int32_t terminal, int32_t redop, int32_t red_axis, lw_layer_t *ll);

/* ---- elementwise user kernels in fused tasks (lower_fuse_user.c) ---- */
/* Edge (e, input k) where either end is a MAPBLOCKS node (fusion on): 1 inline, 0 not; -1
 * when neither end is one (the ordinary rules decide). */
int gs__lw_user_edge(const lw_t *w, const lw_node_t *e, int k);
/* After the edge decisions: a user kernel stays inlined only where its fused program reads its
 * output block as is (no slice, transpose or broadcast on the way up) and is the only user
 * kernel of that program; others are materialised. GS_ERR_NO_MEMORY. */
gs_status_t gs__lw_user_limit(lw_t *w);
/* The fused USER layer of user node @a unode: its inlined inputs as producers, @a post (a
 * FUSED layer reading its output, ownership of post->l moves here, also on failure; NULL:
 * none) as consumer; explicit per-block inputs. *idx_p the layer. */
gs_status_t gs__lw_build_user_fused(lw_t *w, int64_t unode, lw_layer_t *post, int64_t *idx_p);

#endif
