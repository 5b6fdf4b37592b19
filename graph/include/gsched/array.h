/**
 * @file gsched/array.h
 * @brief Building lazy, chunked n-dimensional arrays (the expression graph).
 *
 * An array handle (gs_array_h) names a node of an immutable expression DAG: a random generator,
 * host data, an elementwise operation, a slice, a transpose or a reduction. Nothing is computed
 * when a handle is built; gs_client_compute() & co. (gsched/client.h) lower the expression to a
 * task graph and run it on a cluster.
 *
 * Semantics follow NumPy/Dask: elementwise binary operations broadcast; slices take
 * start/stop/step per axis with negative indices and negative steps; reductions run over all
 * axes or one axis, combined in a tree of fan-in `split_every`.
 *
 * Ownership: every function that returns a handle through @a *out_p gives the caller one
 * reference, released with gs_array_release(). Operands are borrowed: the new node keeps its
 * own references, so operands may be released at once. Handles are immutable and may be shared
 * between threads for reading; reference counting is atomic.
 *
 * Errors: GS_ERR_INVALID_PARAM for bad arguments (shapes/chunks that do not fit, step 0, axis
 * out of range, operands that do not broadcast, zero-size min/max/arg reductions), with
 * gs_last_error() naming the problem; GS_ERR_NO_MEMORY. On error *out_p is not written.
 * Only float64 is supported for now.
 */
#ifndef GSCHED_ARRAY_H
#define GSCHED_ARRAY_H

#include <gsched/status.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GS_MAX_NDIM 8

typedef struct gs_array *gs_array_h;

typedef enum gs_dtype {
    GS_DTYPE_FLOAT64 = 0
} gs_dtype_t;

typedef enum gs_unop {
    GS_UNARY_NEG = 0,
    GS_UNARY_ABS,
    GS_UNARY_EXP,
    GS_UNARY_LOG,
    GS_UNARY_SQRT,
    GS_UNARY_COUNT
} gs_unop_t;

typedef enum gs_binop {
    GS_BINARY_ADD = 0,
    GS_BINARY_SUB,
    GS_BINARY_MUL,
    GS_BINARY_DIV,
    GS_BINARY_POW,
    GS_BINARY_LT,
    GS_BINARY_LE,
    GS_BINARY_GT,
    GS_BINARY_GE,
    GS_BINARY_EQ,
    GS_BINARY_NE,
    GS_BINARY_MINIMUM,
    GS_BINARY_MAXIMUM,
    GS_BINARY_COUNT
} gs_binop_t;

typedef enum gs_redop {
    GS_RED_SUM = 0,
    GS_RED_MIN = 1,
    GS_RED_MAX = 2,
    GS_RED_MEAN = 3,
    GS_RED_VAR = 4,
    GS_RED_STD = 5,
    GS_RED_ARGMIN = 6,
    GS_RED_ARGMAX = 7,
    GS_RED_COUNT
} gs_redop_t;

/* ---- creation ---- */

/** Normal(mean, std) random array of @a ndim (1..GS_MAX_NDIM) axes. @a chunks[a] is the chunk
 *  length along axis a (the last chunk may be shorter); shape[a] >= 0, chunks[a] >= 1.
 *  Values follow docs/random.md: a pure function of (seed, global index). std >= 0. */
gs_status_t gs_array_random_normal(uint64_t seed, double mean, double std, int ndim,
                                   const int64_t *shape, const int64_t *chunks, gs_array_h *out_p);

/** Uniform [low, high) random array; as gs_array_random_normal(). */
gs_status_t gs_array_random_uniform(uint64_t seed, double low, double high, int ndim,
                                    const int64_t *shape, const int64_t *chunks,
                                    gs_array_h *out_p);

/** Array filled with @a value. */
gs_status_t gs_array_full(double value, int ndim, const int64_t *shape, const int64_t *chunks,
                          gs_array_h *out_p);

/** Array whose element at row-major flat index i is start + i * step (like
 *  np.arange(start, ..., step).reshape(shape)). */
gs_status_t gs_array_arange(double start, double step, int ndim, const int64_t *shape,
                            const int64_t *chunks, gs_array_h *out_p);

/** Array holding a copy of @a data (row-major, prod(shape) doubles, caller-owned; it may be
 *  freed when this returns). The data travels inside the task graph: meant for small and
 *  medium inputs. */
gs_status_t gs_array_from_host(const double *data, int ndim, const int64_t *shape,
                               const int64_t *chunks, gs_array_h *out_p);

/* ---- elementwise ---- */

gs_status_t gs_array_unary(gs_unop_t op, gs_array_h a, gs_array_h *out_p);
/** a OP b with NumPy broadcasting. Chunks are unified: where the operands' chunk boundaries
 *  differ along an axis, the result is chunked at the union of the boundaries. */
gs_status_t gs_array_binary(gs_binop_t op, gs_array_h a, gs_array_h b, gs_array_h *out_p);
/** a OP scalar. */
gs_status_t gs_array_binary_scalar(gs_binop_t op, gs_array_h a, double scalar, gs_array_h *out_p);
/** scalar OP a. */
gs_status_t gs_array_scalar_binary(gs_binop_t op, double scalar, gs_array_h a, gs_array_h *out_p);

/* ---- slicing and layout ---- */

#define GS_SLICE_HAS_START 0x1u
#define GS_SLICE_HAS_STOP 0x2u
#define GS_SLICE_INDEX 0x4u   /* take the single element `start` and drop the axis */

/** One axis of a slice, NumPy semantics: start/stop are used only when their flag is set
 *  (otherwise they default by the sign of step); negative values count from the end; out of
 *  range values clip. step != 0. With GS_SLICE_INDEX the axis is indexed by `start` (must be in
 *  range) and removed. */
typedef struct gs_slice {
    int64_t start;
    int64_t stop;
    int64_t step;
    uint32_t flags;
} gs_slice_t;

/** a[s[0], s[1], ..., s[n-1]]; axes past @a n are taken whole. n <= ndim(a). Output chunks
 *  follow the input chunks (each output chunk comes from one input chunk; empty ones drop). */
gs_status_t gs_array_slice(gs_array_h a, int n, const gs_slice_t *s, gs_array_h *out_p);

/** Permute axes: out axis i is input axis perm[i]; @a perm NULL reverses the axes. */
gs_status_t gs_array_transpose(gs_array_h a, const int *perm, gs_array_h *out_p);

/* ---- moving data between chunks ----
 * These build nodes whose chunks are assembled from pieces of other chunks (COPY tasks on the
 * workers). Transposes and slices need none of this: they read their input chunks in place,
 * inside the consumer's fused kernel (x + x.T reads chunks (i, j) and (j, i)). */

/** @a a with a new chunking. chunks[ax] per axis: >= 1 regular chunks of that length (the last
 *  one shorter; a length >= the axis gives one chunk), -1 one chunk for the whole axis, 0 keep
 *  @a a's chunks on that axis. NULL only for ndim 0. Returns a new reference to @a a itself when
 *  nothing changes. Output blocks that would gather more than GS_KERNEL_MAX_PIECES input pieces
 *  (tiny chunks into huge ones) are built through intermediate chunkings.
 *  Errors: GS_ERR_INVALID_PARAM (NULL arguments, chunks[ax] < -1), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_rechunk(gs_array_h a, const int64_t *chunks, gs_array_h *out_p);

/** @a a with explicit chunk boundaries: for each axis either bounds[ax] = NULL (keep @a a's
 *  chunks) or nchunks[ax] chunks with boundaries bounds[ax][0..nchunks[ax]], strictly
 *  increasing from 0 to the axis length (an empty axis: nchunks 1, bounds {0, 0}). Both arrays
 *  are borrowed (copied). Otherwise as gs_array_rechunk(). */
gs_status_t gs_array_rechunk_bounds(gs_array_h a, const int64_t *nchunks,
                                    const int64_t *const *bounds, gs_array_h *out_p);

/** Join @a n >= 1 arrays (borrowed handles in @a arrays[0..n)) along existing @a axis
 *  (negative counts from the end), like np.concatenate. All must have the same ndim (>= 1) and
 *  the same size on every other axis. Output chunks: each operand's chunks along @a axis one
 *  after the other; on the other axes the union of the operands' boundaries. n = 1 returns a
 *  new reference to arrays[0]. Errors: GS_ERR_INVALID_PARAM (n < 1, NULL arrays, ndim or shape
 *  mismatch naming the array and axis, axis out of range), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_concatenate(int n, const gs_array_h *arrays, int axis, gs_array_h *out_p);

/** Join @a n >= 1 arrays of identical shape along a new axis @a axis of the result
 *  (-(ndim+1) <= axis <= ndim), like np.stack: result ndim = ndim + 1 <= GS_MAX_NDIM, one chunk
 *  per operand along the new axis, the union of the operands' boundaries elsewhere. Errors as
 *  gs_array_concatenate(). */
gs_status_t gs_array_stack(int n, const gs_array_h *arrays, int axis, gs_array_h *out_p);

/* ---- reductions ---- */

#define GS_REDUCE_FIELD_AXIS 0x1u
#define GS_REDUCE_FIELD_SPLIT_EVERY 0x2u
#define GS_REDUCE_FIELD_DDOF 0x4u

/** Extensible reduction parameters: fields are read only when their bit is in field_mask.
 *  Defaults: all axes, split_every 16, ddof 0. axis may be negative (counts from the end). */
typedef struct gs_reduce_params {
    uint32_t field_mask;
    int axis;
    int split_every;   /* >= 2 */
    double ddof;
} gs_reduce_params_t;

/** Reduce @a a with @a op. Over all axes the result has ndim 0 (a scalar); over one axis the
 *  axis is removed. ARGMIN/ARGMAX give indices as exact doubles (flat row-major index when
 *  reducing all axes). @a params may be NULL. */
gs_status_t gs_array_reduce(gs_redop_t op, gs_array_h a, const gs_reduce_params_t *params,
                            gs_array_h *out_p);

/* ---- linear algebra ---- */

/** Matrix product a @ b with NumPy matmul semantics for 1-D and 2-D operands: 2-D @ 2-D is
 *  (M x K) @ (K x N) -> M x N; a 1-D a is a row vector (K) -> (N), a 1-D b a column vector
 *  (K) -> (M); 1-D @ 1-D is the dot product (ndim 0). The output is chunked like a's rows and
 *  b's columns. The contracted axis must be chunked identically in both operands (a's last
 *  axis, b's first): otherwise GS_ERR_INVALID_PARAM naming both chunkings (rechunk one of
 *  them). Each output chunk sums the products of its chunk pairs: up to 8 pairs per task, the
 *  partial products added in a tree. An operand that is the transpose of a 2-D array
 *  (gs_array_transpose) is read in place, transposed by the product, never materialised.
 *  Errors: GS_ERR_INVALID_PARAM (ndim not 1 or 2, shapes not aligned, chunks differ),
 *  GS_ERR_NO_MEMORY. Ownership as for every constructor (file comment). */
gs_status_t gs_array_matmul(gs_array_h a, gs_array_h b, gs_array_h *out_p);

/** QR factorisation of a tall-and-skinny 2-D array a (M x N, M >= N >= 1) chunked along rows
 *  only (one column chunk), by TSQR: a = q @ r with q (M x N, orthonormal columns, chunked like
 *  a) and r (N x N, upper triangular with a non-negative diagonal, one chunk). Row chunks
 *  smaller than N are stacked with their neighbours (at most 32 per QR). Either of @a q_p and
 *  @a r_p may be NULL (that part is not built); q and r of one array, used in one computation,
 *  share one factorisation. Errors: GS_ERR_INVALID_PARAM (not 2-D, M < N, N = 0, several
 *  column chunks: "rechunk", row chunks too small to group), GS_ERR_NO_MEMORY; nothing is
 *  written on error. */
gs_status_t gs_array_qr(gs_array_h a, gs_array_h *q_p, gs_array_h *r_p);

/** Thin SVD a = u @ diag(s) @ vt of a tall-and-skinny (M >= N, one column chunk) or
 *  short-and-fat (M < N, one row chunk) 2-D array, K = min(M, N): u (M x K), s (K, descending,
 *  one chunk), vt (K x N). Tall: TSQR, then the SVD of the stacked R factors at the top of the
 *  tree; u chunked like a's rows, vt one chunk. Short-and-fat: through the transpose; vt is
 *  chunked like a's columns, u one chunk. Signs of singular vectors are those LAPACK gives.
 *  Any of the outputs may be NULL. Errors and ownership as gs_array_qr(). */
gs_status_t gs_array_svd(gs_array_h a, gs_array_h *u_p, gs_array_h *s_p, gs_array_h *vt_p);

#define GS_SVDC_FIELD_POWER_ITER 0x1u
#define GS_SVDC_FIELD_OVERSAMPLES 0x2u
#define GS_SVDC_FIELD_SEED 0x4u

/** Parameters of gs_array_svd_compressed(), read only when their bit is in field_mask.
 *  Defaults: n_power_iter 0 (as Dask; 1-2 sharpen slowly decaying spectra at two more passes
 *  over a each), n_oversamples 10, seed 0. */
typedef struct gs_svd_compressed_params {
    uint32_t field_mask;
    int n_power_iter;       /* 0..100 */
    int64_t n_oversamples;  /* >= 0 */
    uint64_t seed;          /* of the Gaussian test matrix (gs_array_random_normal) */
} gs_svd_compressed_params_t;

/** Randomized truncated SVD (Halko, Martinsson & Tropp 2011) of a 2-D array chunked in any
 *  way: u (M x k), s (k), vt (k x N) approximating the k leading singular triplets. With
 *  l = min(k + n_oversamples, min(M, N)) and Omega an N x l standard normal test matrix from
 *  @a seed: Y = a @ Omega, n_power_iter times Y = a @ Q(a^T @ Q(Y)), Q = Q(Y) (TSQR), then the
 *  SVD of B = Q^T a through its tall transpose a^T @ Q. The result depends on the seed only,
 *  never on the cluster. u is chunked like a's rows, vt like a's columns, s one chunk.
 *  @a params may be NULL. Each output is a separate expression over the same subexpressions:
 *  compute them in one call (or persist a) to avoid recomputation. Any output may be NULL.
 *  Errors: GS_ERR_INVALID_PARAM (not 2-D, k < 1 or k > min(M, N), bad params, row chunks of a
 *  too small for l columns), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_svd_compressed(gs_array_h a, int64_t k,
                                    const gs_svd_compressed_params_t *params, gs_array_h *u_p,
                                    gs_array_h *s_p, gs_array_h *vt_p);

/** Optimisation switches for lowering. All on by default (GS_LOWER_DEFAULT). Turning any off
 *  gives the same values. */
#define GS_LOWER_CULL 0x1u            /* drop tasks whose outputs the result does not need */
#define GS_LOWER_FUSE 0x2u            /* one task per output chunk for blockwise chains */
#define GS_LOWER_SLICE_PUSHDOWN 0x4u  /* generate only the elements a slice keeps */
/* the SVD of a tall array (rows >= 2 columns) by Gram passes: one pass when well conditioned,
 * shifted CholeskyQR3 otherwise (docs/api.md "Accuracy of the tall SVD"); off: TSQR. Needs
 * full column rank: a numerically rank-deficient input fails with GS_ERR_NUMERIC, where TSQR
 * (this flag off) still factors it. */
#define GS_LOWER_GRAM_SVD 0x8u
#define GS_LOWER_DEFAULT \
    (GS_LOWER_CULL | GS_LOWER_FUSE | GS_LOWER_SLICE_PUSHDOWN | GS_LOWER_GRAM_SVD)

/* ---- handles ---- */

/** Add a reference (returns @a a). */
gs_array_h gs_array_retain(gs_array_h a);
/** Drop a reference; NULL is fine. */
void gs_array_release(gs_array_h a);

int gs_array_ndim(gs_array_h a);
/** Copy the shape into @a shape_p (ndim entries). */
void gs_array_shape(gs_array_h a, int64_t *shape_p);
/** Number of elements. */
int64_t gs_array_size(gs_array_h a);
/** Number of chunks along @a axis (0 <= axis < ndim). */
int64_t gs_array_nchunks(gs_array_h a, int axis);
/** Chunk boundaries along @a axis: nchunks + 1 offsets from 0 to shape[axis]. The array is
 *  owned by the handle and lives as long as it. */
const int64_t *gs_array_chunk_bounds(gs_array_h a, int axis);

#ifdef __cplusplus
}
#endif
#endif
