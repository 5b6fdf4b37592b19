/**
 * Task graphs: what an array expression lowers to, what the client submits, what the scheduler
 * tracks and what workers execute.
 *
 * A task graph is a list of *layers* plus a columnar table of *tasks*. A layer is a template
 * shared by many tasks (one blockwise fused kernel, one level of a reduction tree, host data);
 * each task is (layer, block) where block is the row-major index of the task's output chunk in
 * the layer's output grid. Layers are serialised once (gs_layer_encode) and are opaque bytes to
 * the scheduler; the scheduler only reads the task table: dependencies, output sizes, outputs.
 *
 * Task ids are dense 0..ntasks-1 in topological order (every dependency id is smaller than the
 * dependent's id). A dependency id >= ntasks refers to externals[id - ntasks]: a chunk kept on
 * the cluster by an earlier graph (gs_client_persist).
 *
 * Dependencies of a task are listed in the order its layer expects its inputs
 * (gs_layer_instantiate's @a inputs).
 */
#ifndef GS_GRAPH_TASKGRAPH_H
#define GS_GRAPH_TASKGRAPH_H

#include "common/buf.h"
#include "graph/kernel.h"

#include <gsched/array.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_layer gs_layer_t;

/** A chunk kept on the cluster: (graph id assigned by the scheduler, task id in that graph). */
typedef struct gs_key {
    uint64_t graph;
    uint64_t task;
} gs_key_t;

/** Chunk grid of an array: shape and chunk boundaries (bounds[a][0..nchunks[a]]). */
typedef struct gs_grid {
    int32_t ndim;
    int64_t shape[GS_MAX_NDIM];
    int64_t nchunks[GS_MAX_NDIM];
    int64_t *bounds[GS_MAX_NDIM];   /* owned; nchunks[a] + 1 entries, 0 .. shape[a] */
} gs_grid_t;

typedef struct gs_taskgraph {
    uint32_t nlayers;
    gs_layer_t **layers;            /* owned */
    uint64_t ntasks;
    uint32_t *task_layer;           /* [ntasks] */
    uint64_t *task_block;           /* [ntasks] block index within the layer's grid */
    uint64_t *dep_off;              /* [ntasks + 1] CSR offsets into deps */
    uint64_t *deps;                 /* [dep_off[ntasks]] */
    uint64_t *task_nbytes;          /* [ntasks] output bytes */
    uint64_t nexternals;
    gs_key_t *externals;            /* [nexternals] */
    gs_grid_t out_grid;             /* grid of the result array */
    uint64_t noutputs;              /* = number of blocks of out_grid */
    uint64_t *outputs;              /* [noutputs] task ids, row-major over out_grid blocks */
    int32_t out_dtype;              /* gs_dtype_t of the result array's elements */
} gs_taskgraph_t;


/** Lower the expression @a out to a new task graph (*tg_p, free with gs_taskgraph_free).
 *  @a flags: GS_LOWER_*. Errors: GS_ERR_INVALID_PARAM (message names the problem),
 *  GS_ERR_NO_MEMORY. Linear in the number of tasks. */
gs_status_t gs_graph_lower(gs_array_h out, unsigned flags, gs_taskgraph_t **tg_p);

/** Facts about the cluster a graph will run on that pick between plans of equal values (never
 *  the values themselves). Zeroed: nothing known, the plan gs_graph_lower makes. */
typedef struct gs_lower_hints {
    /** Kernel threads of the CPU workers together (their gs_client_worker_info_t.nthreads
     *  summed; 0: unknown). With GS_LOWER_FUSE, an elementwise CPU user kernel (library and
     *  symbol, no cuda_source) is fused with its producers and consumers only when its output
     *  has at least GS_LOWER_USER_FUSE_TASKS_PER_THREAD blocks per thread: a fused task holds
     *  one thread for its whole chain (producers, the kernel's forked call, the consumer), so
     *  with fewer blocks than that the last wave of fused tasks leaves most threads idle while
     *  the unfused graph (a task per step and block) keeps them busy. CUDA kernels are fused
     *  regardless (a GPU worker runs tasks on streams, not a thread pool). */
    uint32_t cpu_threads;
} gs_lower_hints_t;

#define GS_LOWER_USER_FUSE_TASKS_PER_THREAD 4

/** gs_graph_lower with @a hints (NULL: none, as gs_graph_lower). Errors as gs_graph_lower(). */
gs_status_t gs_graph_lower_hinted(gs_array_h out, unsigned flags, const gs_lower_hints_t *hints,
                                  gs_taskgraph_t **tg_p);

/** One result of gs_graph_lower_many(): its blocks (row-major over @a grid) are the graph's
 *  outputs[out_off .. out_off + noutputs); its elements are of gs_dtype_t @a dtype. */
typedef struct gs_lower_result {
    gs_grid_t grid;                 /* owned (gs_graph_lower_results_free) */
    int32_t dtype;
    uint64_t out_off;
    uint64_t noutputs;
} gs_lower_result_t;

/** Lower the @a n expressions @a arrays (borrowed; n >= 1, none NULL, the same handle twice is
 *  fine) into ONE task graph (*tg_p, free with gs_taskgraph_free) in which nodes they share are
 *  computed once (Dask's dask.compute(a, b, c)): the graph's outputs are the results' blocks in
 *  turn, described by (*res_p)[r] (n entries, free with gs_graph_lower_results_free); out_grid and
 *  out_dtype are the first result's. @a flags: GS_LOWER_*. Outputs written only on success.
 *  Errors: GS_ERR_INVALID_PARAM (n == 0, a NULL array or pointer, unknown flags, what
 *  gs_graph_lower() refuses), GS_ERR_NO_MEMORY. (graph/lower_many.c) */
gs_status_t gs_graph_lower_many(size_t n, const gs_array_h *arrays, unsigned flags,
                                gs_taskgraph_t **tg_p, gs_lower_result_t **res_p);
/** gs_graph_lower_many with @a hints (gs_lower_hints_t; NULL: none). */
gs_status_t gs_graph_lower_many_hinted(size_t n, const gs_array_h *arrays, unsigned flags,
                                       const gs_lower_hints_t *hints, gs_taskgraph_t **tg_p,
                                       gs_lower_result_t **res_p);
/** Free @a n results of gs_graph_lower_many(). NULL is fine. */
void gs_graph_lower_results_free(size_t n, gs_lower_result_t *res);

/** The TSQR fallback of the tall SVD (docs/ARCHITECTURE.md "Tall SVD"): after a graph lowered
 *  with @a flags failed with status @a st and message @a msg (gs_last_error(); NULL is fine),
 *  returns 1 and the flags to lower the same array with again in *@a flags_p (@a flags without
 *  GS_LOWER_GRAM_SVD) when the failure is the Gram path refusing its input (GS_ERR_NUMERIC
 *  locally, GS_ERR_TASK_FAILED through a cluster, the message carrying GS_LA_GRAM_REFUSED:
 *  numerically rank-deficient or too ill-conditioned); else returns 0 and leaves *@a flags_p
 *  alone. No other failure is retried (NaN/Inf input, memory, I/O): TSQR would fail the same
 *  way or the cause is not the method. Pure; @a flags_p must not be NULL. */
int gs_graph_lower_retry_flags(unsigned flags, gs_status_t st, const char *msg,
                               unsigned *flags_p);

/** Free a task graph and its layers. NULL is fine. */
void gs_taskgraph_free(gs_taskgraph_t *tg);

/** Check a task graph's structure: ids in range, topological order, layer ids valid, block
 *  indices inside their layer's grid, dependency counts as each layer expects, outputs valid.
 *  GS_ERR_INVALID_PARAM with a message. Used on graphs decoded from the wire. */
gs_status_t gs_taskgraph_validate(const gs_taskgraph_t *tg);

/** Record that @a a has been persisted: block b of its grid lives at keys[b] (nblocks entries,
 *  copied). Later lowerings of expressions using @a a read those chunks instead of recomputing.
 *  GS_ERR_INVALID_PARAM if nblocks does not match the array's grid. */
gs_status_t gs_array_set_persisted(gs_array_h a, uint64_t nblocks, const gs_key_t *keys);
/** Forget the persisted chunks of @a a (later lowerings recompute it). NULL is fine. */
void gs_array_clear_persisted(gs_array_h a);
/** Copy of the persisted keys of @a a: *keys_p (nblocks entries, caller frees with gs_free).
 *  GS_ERR_NOT_FOUND when @a a is not persisted. */
gs_status_t gs_array_get_persisted(gs_array_h a, uint64_t *nblocks_p, gs_key_t **keys_p);

/* ---- grids ---- */

/** Total number of blocks in @a g. */
uint64_t gs_grid_nblocks(const gs_grid_t *g);
/** Start and shape of block @a block (row-major block index). */
void gs_grid_block_region(const gs_grid_t *g, uint64_t block, int64_t *start_p, int64_t *shape_p);
void gs_grid_cleanup(gs_grid_t *g);
gs_status_t gs_grid_copy(gs_grid_t *dst, const gs_grid_t *src);

/* ---- layers ---- */

typedef enum gs_layer_kind {
    GS_LAYER_FUSED = 0,      /* blockwise fused kernel (gs_kfused_t); STORE or REDUCE partials */
    GS_LAYER_COMBINE = 1,    /* one level of a reduction tree (gs_kcombine_t) */
    GS_LAYER_LITERAL = 2,    /* host data carried in the layer */
    GS_LAYER_COPY = 3,       /* rechunk / concatenate (gs_kcopy_t) */
    GS_LAYER_LINALG = 4,     /* dense linear algebra: per-block GEMM/QR/SVD on chunk views,
                                view copies and partial sums (gs_klinalg_t, gs_kcopy_t,
                                gs_kcombine_t) */
    GS_LAYER_FILE = 5,       /* read, write or commit an array file (gs_kfile_t; layer_file.c) */
    GS_LAYER_SLAB = 6,       /* per block one box of one input chunk, made dense (gs_kcopy_t):
                                the edge slabs a stencil's halo needs from a neighbour */
    GS_LAYER_STENCIL = 7,    /* weighted neighbourhood over a padded block (gs_kstencil_t) */
    GS_LAYER_USER = 8,       /* a user kernel per block over its inputs' blocks (gs_kuser_t) */
    GS_LAYER_SCAN = 9,       /* cumulative sum/product: chunk scans, totals, carries (gs_kscan_t;
                                graph/scan_int.h) */
    GS_LAYER_KIND_COUNT
} gs_layer_kind_t;

gs_layer_kind_t gs_layer_kind(const gs_layer_t *l);
/** Human-readable name for logs and task reports ("fused", "combine-sum", ...). Static. */
const char *gs_layer_name(const gs_layer_t *l);
/** Readable operation name of @a l for people ("normal+add", "slice", "sum", "combine-sum",
 *  "gram", "literal"): a fused layer's random/index leaves, operations (without "_imm") and
 *  reduction joined by '+', other kinds' gs_layer_name(). Written into @a out (@a cap bytes,
 *  caller-owned, always NUL-terminated when cap > 0; cut with "+..." when long). Allocates
 *  nothing. The client sends these names in GRAPH_SUBMIT (gsched shows them, never decodes). */
void gs_layer_display_name(const gs_layer_t *l, char *out, size_t cap);
/** The kernel a task of @a l runs, for error reports: a user kernel's symbol (map_blocks,
 *  map_overlap), else gs_layer_name(). Owned by @a l (or static). */
const char *gs_layer_kernel_name(const gs_layer_t *l);
/** Number of blocks (tasks) the layer defines. */
uint64_t gs_layer_nblocks(const gs_layer_t *l);
/** Number of inputs (dependencies) block @a block expects. */
int gs_layer_ninputs(const gs_layer_t *l, uint64_t block);
/** Output size in bytes of block @a block. */
uint64_t gs_layer_out_nbytes(const gs_layer_t *l, uint64_t block);

/** Serialise (msgpack) and append to @a out. */
gs_status_t gs_layer_encode(const gs_layer_t *l, gs_buf_t *out);
/** Decode a layer. Total: any byte string yields a layer or GS_ERR_PROTO (never a crash or a
 *  leak); semantic checks (grids, programs) give GS_ERR_PROTO too. *l_p owned by caller. */
gs_status_t gs_layer_decode(const void *data, size_t len, gs_layer_t **l_p);
void gs_layer_free(gs_layer_t *l);

/** One input chunk of a task, in backend memory: @a data holds @a len doubles. */
typedef struct gs_chunk_ref {
    const double *data;
    int64_t len;        /* float64 elements (bytes / 8) */
    uint64_t nbytes;    /* bytes of data; read for inputs of other dtypes (fused leaves) */
} gs_chunk_ref_t;

typedef enum gs_ktask_kind {
    GS_KTASK_FUSED = 0,
    GS_KTASK_COMBINE = 1,
    GS_KTASK_COPY = 2,
    GS_KTASK_HOST_DATA = 3,  /* copy host.data (len doubles, owned by the layer) to out */
    GS_KTASK_LINALG = 4,
    GS_KTASK_FILE_READ = 5,  /* gs_kfile_t: the worker reads the region from the file */
    GS_KTASK_FILE_WRITE = 6, /* gs_kfile_t: the worker writes its input chunk to the file */
    GS_KTASK_FILE_COMMIT = 7, /* gs_kfile_t: header, size check, fsync, rename */
    GS_KTASK_STENCIL = 8,
    GS_KTASK_USER = 9,
    GS_KTASK_SCAN = 10,
    GS_KTASK_MAPFUSED = 11   /* gs_kmapfused_t: an elementwise user kernel fused in a chain */
} gs_ktask_kind_t;

typedef struct gs_ktask {
    int32_t kind;            /* gs_ktask_kind_t */
    union {
        gs_kfused_t fused;
        gs_kcombine_t combine;
        gs_kcopy_t copy;
        gs_klinalg_t linalg;
        gs_kfile_t file;
        gs_kstencil_t stencil;
        gs_kuser_t user;
        gs_kscan_t scan;
        gs_kmapfused_t mapfused;
        struct {
            const double *data;
            int64_t len;
            double *out;     /* destination: instantiate's @a out (backend memory, len doubles) */
        } host;
    } u;
} gs_ktask_t;

/** Build the concrete kernel for task @a block of @a l, reading @a inputs (ninputs entries, in
 *  dependency order, backend memory) and writing @a out (backend memory of
 *  gs_layer_out_nbytes(l, block) bytes). Checks the number and sizes of inputs: a wrong task
 *  table gives GS_ERR_INVALID_PARAM, never an out-of-bounds access. Pointers in *task_p borrow
 *  from @a l, @a inputs and @a out. For a fused layer only kind and u.fused are written (the
 *  rest of the union is left as it was: the linear algebra member alone is ~12 KB). */
gs_status_t gs_layer_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_ktask_t *task_p);

#ifdef __cplusplus
}
#endif
#endif
