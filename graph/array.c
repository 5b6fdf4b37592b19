/* Expression nodes: creation with argument validation, reference counting, accessors,
 * persisted chunks. */
#include "graph/graph_internal.h"
#include "common/heap.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static atomic_uint_fast64_t gs__node_next_id = 1;
static pthread_mutex_t gs__persist_lock = PTHREAD_MUTEX_INITIALIZER;

static struct gs_array *gs__node_new(int32_t kind, int32_t ndim)
{
    struct gs_array *n = gs_calloc(1, sizeof(*n), "array node");
    if (n == NULL) return NULL;
    atomic_init(&n->refs, 1);
    n->id = atomic_fetch_add(&gs__node_next_id, 1);
    n->kind = kind;
    n->grid.ndim = ndim;
    return n;
}

static void gs__node_free_one(struct gs_array *n)
{
    gs_grid_cleanup(&n->grid);
    if (n->kind == GS__NODE_LITERAL) gs_free(n->u.lit.data);
    if (n->kind == GS__NODE_FILE) gs__fspec_free(n->u.file);
    if (n->kind == GS__NODE_MAPBLOCKS) gs__ukernel_free(n->u.ub);
    if (n->kind == GS__NODE_STENCIL) {
        gs_free(n->u.st.weights);
        gs__ukernel_free(n->u.st.user);
    }
    if (n->persist != NULL) {
        gs_free(n->persist->keys);
        gs_free(n->persist);
    }
    gs_free(n);
}

gs_array_h gs_array_retain(gs_array_h a)
{
    if (a != NULL) atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
    return a;
}

static struct gs_array *gs__node_like(int32_t kind, const struct gs_array *a);

/* A scalar of kind @a k taking part in an operation computed in dtype @a dp (NEP 50): an int
 * must be integral and, when it adopts an integer dtype, fit it (NumPy 2 raises otherwise);
 * a bool must be 0 or 1. */
static gs_status_t gs__scalar_check(double s, gs_scalar_kind_t k, gs_dtype_t dp)
{
    static const double lo[GS_DTYPE_COUNT] = {[GS_DTYPE_INT32] = -2147483648.0,
                                              [GS_DTYPE_INT64] = -9223372036854775808.0,
                                              [GS_DTYPE_UINT8] = 0.0, [GS_DTYPE_BOOL] = 0.0};
    static const double hi[GS_DTYPE_COUNT] = {[GS_DTYPE_INT32] = 2147483647.0,
                                              [GS_DTYPE_INT64] = 9223372036854774784.0, /* below 2^63 */
                                              [GS_DTYPE_UINT8] = 255.0, [GS_DTYPE_BOOL] = 1.0};
    if ((int)k < 0 || k >= GS_SCALAR_KIND_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown scalar kind %d", (int)k);
    if (k == GS_SCALAR_BOOL && s != 0.0 && s != 1.0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "a bool scalar must be 0 or 1, not %g", s);
    if (k != GS_SCALAR_INT) return GS_OK;
    if (!isfinite(s) || s != floor(s))
        return gs_error_set(GS_ERR_INVALID_PARAM, "an int scalar must be an integer, not %g", s);
    if (dp != GS_DTYPE_FLOAT64 && dp != GS_DTYPE_FLOAT32 && dp != GS_DTYPE_FLOAT16 &&
        (s < lo[dp] || s > hi[dp]))
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "int scalar %.17g is out of bounds for %s (NumPy 2 raises too)", s,
                            gs_dtype_name(dp));
    return GS_OK;
}

gs_status_t gs_array_where(gs_array_h cond, gs_array_h a, gs_array_h b, gs_array_h *out_p)
{
    struct gs_array *n, *t1 = NULL, *t2 = NULL;
    gs_dtype_t dt;
    gs_status_t st;
    if (cond == NULL || a == NULL || b == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "where: an operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "where: out_p is NULL");
    if ((st = gs_dtype_promote((gs_dtype_t)a->dtype, (gs_dtype_t)b->dtype, &dt)) != GS_OK)
        return st;
    /* the broadcast grid of the three operands: that of (cond == a) == b, built and dropped
     * (comparisons accept every pair of dtypes) */
    if ((st = gs_array_binary(GS_BINARY_EQ, cond, a, &t1)) != GS_OK) return st;
    if ((st = gs_array_binary(GS_BINARY_EQ, t1, b, &t2)) != GS_OK) goto out_t1;
    if ((n = gs__node_like(GS__NODE_WHERE, t2)) == NULL) {
        st = GS_ERR_NO_MEMORY;
        goto out_t2;
    }
    n->dtype = dt;
    n->ninputs = 3;
    n->in[0] = gs_array_retain(cond);
    n->in[1] = gs_array_retain(a);
    n->in[2] = gs_array_retain(b);
    *out_p = n;
out_t2:
    gs_array_release(t2);
out_t1:
    gs_array_release(t1);
    return st;
}

void gs_array_release(gs_array_h a)
{
    /* Iterative: a long chain of operations must not recurse once per node. */
    struct gs_array *work = NULL;
    if (a == NULL) return;
    long old = atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel);
    gs_assert_always(old > 0);
    if (old != 1) return;
    a->free_next = NULL;
    work = a;
    while (work != NULL) {
        struct gs_array *n = work;
        work = n->free_next;
        for (int32_t i = 0; i < n->ninputs; i++) {
            struct gs_array *in = n->in[i];
            long o = atomic_fetch_sub_explicit(&in->refs, 1, memory_order_acq_rel);
            gs_assert_always(o > 0);
            if (o == 1) {
                in->free_next = work;
                work = in;
            }
        }
        gs__node_free_one(n);
    }
}

/* ---- accessors ---- */

/* Accessors tolerate NULL handles and bad axes: -1 / 0 / NULL, shape_p untouched. */
int gs_array_ndim(gs_array_h a)
{
    return a != NULL ? a->grid.ndim : -1;
}

void gs_array_shape(gs_array_h a, int64_t *shape_p)
{
    if (a == NULL || shape_p == NULL) return;
    for (int32_t i = 0; i < a->grid.ndim; i++) shape_p[i] = a->grid.shape[i];
}

int64_t gs_array_size(gs_array_h a)
{
    return a != NULL ? a->size : 0;
}

int64_t gs_array_nchunks(gs_array_h a, int axis)
{
    if (a == NULL || axis < 0 || axis >= a->grid.ndim) return 0;
    return a->grid.nchunks[axis];
}

const int64_t *gs_array_chunk_bounds(gs_array_h a, int axis)
{
    if (a == NULL || axis < 0 || axis >= a->grid.ndim) return NULL;
    return a->grid.bounds[axis];
}

/* ---- helpers ---- */

/* Element count and block count must fit; sets n->size. */
static gs_status_t gs__node_finish_grid(struct gs_array *n)
{
    int64_t size = 1, nblocks = 1;
    for (int32_t a = 0; a < n->grid.ndim; a++) {
        if (__builtin_mul_overflow(size, n->grid.shape[a], &size) || size > GS__MAX_ELEMENTS)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "total element count of the shape overflows (axis %d)", (int)a);
        if (__builtin_mul_overflow(nblocks, n->grid.nchunks[a], &nblocks))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "total number of chunks overflows (axis %d)", (int)a);
    }
    n->size = size;
    return GS_OK;
}

static gs_status_t gs__check_shape(int ndim, const int64_t *shape, const int64_t *chunks)
{
    int64_t size = 1;
    if (ndim < 1 || ndim > GS_MAX_NDIM)
        return gs_error_set(GS_ERR_INVALID_PARAM, "ndim %d out of range 1..%d", ndim, GS_MAX_NDIM);
    if (shape == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "shape is NULL");
    if (chunks == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "chunks is NULL");
    for (int a = 0; a < ndim; a++) {
        if (shape[a] < 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "shape[%d] = %lld is negative", a,
                                (long long)shape[a]);
        if (chunks[a] <= 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "chunks[%d] = %lld must be >= 1", a,
                                (long long)chunks[a]);
        if (__builtin_mul_overflow(size, shape[a], &size) || size > GS__MAX_ELEMENTS)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "total element count of the shape overflows (axis %d)", a);
    }
    return GS_OK;
}

/* Regular chunking: chunk length chunks[a], last chunk shorter; an empty axis has one empty
 * chunk. */
static gs_status_t gs__node_regular(int32_t kind, int ndim, const int64_t *shape,
                                    const int64_t *chunks, struct gs_array **n_p)
{
    gs_status_t st = gs__check_shape(ndim, shape, chunks);
    struct gs_array *n;
    if (st != GS_OK) return st;
    n = gs__node_new(kind, ndim);
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    for (int a = 0; a < ndim; a++) {
        int64_t nc = shape[a] / chunks[a] + (shape[a] % chunks[a] != 0);
        if (nc == 0) nc = 1;
        n->grid.shape[a] = shape[a];
        n->grid.nchunks[a] = nc;
    }
    if ((st = gs__node_finish_grid(n)) != GS_OK) goto err_free;
    if ((st = gs__grid_alloc(&n->grid)) != GS_OK) goto err_free;
    for (int a = 0; a < ndim; a++) {
        int64_t nc = n->grid.nchunks[a];
        for (int64_t k = 0; k < nc; k++) n->grid.bounds[a][k] = k * chunks[a];
        n->grid.bounds[a][nc] = shape[a];
    }
    *n_p = n;
    return GS_OK;
err_free:
    gs__node_free_one(n);
    return st;
}

/* ---- creation ---- */

static gs_status_t gs__random(int32_t kind, uint64_t seed, double p0, double p1, int ndim,
                              const int64_t *shape, const int64_t *chunks, gs_array_h *out_p)
{
    struct gs_array *n;
    gs_status_t st;
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if ((st = gs__node_regular(kind, ndim, shape, chunks, &n)) != GS_OK) return st;
    n->u.gen.seed = seed;
    n->u.gen.p0 = p0;
    n->u.gen.p1 = p1;
    n->u.gen.version = kind == GS__NODE_NORMAL ? GS_RANDOM_DEFAULT_FLOAT64 : GS_RANDOM_V1;
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_random_normal(uint64_t seed, double mean, double std, int ndim,
                                   const int64_t *shape, const int64_t *chunks, gs_array_h *out_p)
{
    if (!isfinite(mean)) return gs_error_set(GS_ERR_INVALID_PARAM, "normal mean is not finite");
    if (!(std >= 0) || !isfinite(std))
        return gs_error_set(GS_ERR_INVALID_PARAM, "normal std must be finite and >= 0");
    return gs__random(GS__NODE_NORMAL, seed, mean, std, ndim, shape, chunks, out_p);
}

gs_status_t gs_array_random_normal_version(uint64_t seed, double mean, double std, int version,
                                           int ndim, const int64_t *shape, const int64_t *chunks,
                                           gs_array_h *out_p)
{
    gs_array_h a;
    gs_status_t st;
    if (version == GS_RANDOM_DEFAULT) version = GS_RANDOM_DEFAULT_FLOAT64;
    if (version == GS_RANDOM_V4)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "normal: random definition version 4 is float32 only (float64 "
                            "versions 1, 2 and 3)");
    if (version != GS_RANDOM_V1 && version != GS_RANDOM_V2 && version != GS_RANDOM_V3)
        return gs_error_set(GS_ERR_INVALID_PARAM, "normal: unknown random definition version %d",
                            version);
    if ((st = gs_array_random_normal(seed, mean, std, ndim, shape, chunks, &a)) != GS_OK) return st;
    a->u.gen.version = version;
    *out_p = a;
    return GS_OK;
}

gs_status_t gs_array_random_uniform(uint64_t seed, double low, double high, int ndim,
                                    const int64_t *shape, const int64_t *chunks,
                                    gs_array_h *out_p)
{
    if (!isfinite(low) || !isfinite(high))
        return gs_error_set(GS_ERR_INVALID_PARAM, "uniform bounds must be finite");
    return gs__random(GS__NODE_UNIFORM, seed, low, high, ndim, shape, chunks, out_p);
}

gs_status_t gs_array_full(double value, int ndim, const int64_t *shape, const int64_t *chunks,
                          gs_array_h *out_p)
{
    return gs__random(GS__NODE_FULL, 0, value, 0.0, ndim, shape, chunks, out_p);
}

gs_status_t gs_array_arange(double start, double step, int ndim, const int64_t *shape,
                            const int64_t *chunks, gs_array_h *out_p)
{
    return gs__random(GS__NODE_ARANGE, 0, start, step, ndim, shape, chunks, out_p);
}

gs_status_t gs_array_from_host(const double *data, int ndim, const int64_t *shape,
                               const int64_t *chunks, gs_array_h *out_p)
{
    struct gs_array *n;
    gs_status_t st;
    uint64_t nblocks;
    double *dst;
    int64_t rs[GS_MAX_NDIM];
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if ((st = gs__node_regular(GS__NODE_LITERAL, ndim, shape, chunks, &n)) != GS_OK) return st;
    if (data == NULL && n->size > 0) {
        gs__node_free_one(n);
        return gs_error_set(GS_ERR_INVALID_PARAM, "data is NULL");
    }
    n->u.lit.data = gs_malloc((size_t)n->size * sizeof(double), "literal data");
    if (n->u.lit.data == NULL) {
        int64_t size = n->size;
        gs__node_free_one(n);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for %lld literal elements",
                            (long long)size);
    }
    /* Reorder into chunk order so lowering copies blocks contiguously. */
    rs[ndim - 1] = 1;
    for (int a = ndim - 2; a >= 0; a--) rs[a] = rs[a + 1] * shape[a + 1];
    nblocks = gs_grid_nblocks(&n->grid);
    dst = n->u.lit.data;
    for (uint64_t b = 0; b < nblocks; b++) {
        int64_t start[GS_MAX_NDIM], sh[GS_MAX_NDIM], p[GS_MAX_NDIM];
        int64_t cnt;
        gs_grid_block_region(&n->grid, b, start, sh);
        cnt = gs_region_size(ndim, sh);
        if (cnt == 0) continue;
        /* iterate rows of the last axis */
        for (int a = 0; a < ndim; a++) p[a] = 0;
        for (;;) {
            int64_t off = 0;
            for (int a = 0; a < ndim; a++) off += (start[a] + p[a]) * rs[a];
            memcpy(dst, data + off, (size_t)sh[ndim - 1] * sizeof(double));
            dst += sh[ndim - 1];
            int a = ndim - 2;
            while (a >= 0 && ++p[a] == sh[a]) p[a--] = 0;
            if (a < 0) break;
        }
    }
    *out_p = n;
    return GS_OK;
}

/* ---- elementwise ---- */

gs_status_t gs_array_zeros(int ndim, const int64_t *shape, const int64_t *chunks,
                           gs_array_h *out_p)
{
    return gs_array_full(0.0, ndim, shape, chunks, out_p);
}

gs_status_t gs_array_ones(int ndim, const int64_t *shape, const int64_t *chunks,
                          gs_array_h *out_p)
{
    return gs_array_full(1.0, ndim, shape, chunks, out_p);
}

/* A node of @a kind with @a a's grid, size and dtype (no inputs); NULL with the error set. */
static struct gs_array *gs__node_like(int32_t kind, const struct gs_array *a)
{
    struct gs_array *n = gs__node_new(kind, a->grid.ndim);
    if (n == NULL) {
        gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
        return NULL;
    }
    if (gs_grid_copy(&n->grid, &a->grid) != GS_OK) {
        gs__node_free_one(n);
        gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
        return NULL;
    }
    n->size = a->size;
    n->dtype = a->dtype;
    return n;
}

gs_status_t gs_array_full_like(gs_array_h a, double value, gs_array_h *out_p)
{
    struct gs_array *n;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "full_like: operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "full_like: out_p is NULL");
    if ((n = gs__node_like(GS__NODE_FULL, a)) == NULL) return GS_ERR_NO_MEMORY;
    n->u.gen.p0 = value;
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_zeros_like(gs_array_h a, gs_array_h *out_p)
{
    return gs_array_full_like(a, 0.0, out_p);
}

gs_status_t gs_array_ones_like(gs_array_h a, gs_array_h *out_p)
{
    return gs_array_full_like(a, 1.0, out_p);
}

gs_status_t gs_array_clip(gs_array_h a, double lo, double hi, gs_array_h *out_p)
{
    gs_array_h m;
    gs_status_t st;
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "clip: out_p is NULL");
    if (isnan(lo) || isnan(hi))
        return gs_error_set(GS_ERR_INVALID_PARAM, "clip: bound %s is NaN",
                            isnan(lo) ? "lo" : "hi");
    if ((st = gs_array_binary_array_scalar(GS_BINARY_MAXIMUM, a, lo, &m)) != GS_OK) return st;
    st = gs_array_binary_array_scalar(GS_BINARY_MINIMUM, m, hi, out_p);
    gs_array_release(m);
    return st;
}

gs_status_t gs_array_unary(gs_unop_t op, gs_array_h a, gs_array_h *out_p)
{
    struct gs_array *n;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    gs_dtype_t dt;
    gs_status_t st;
    if ((int)op < 0 || op >= GS_UNARY_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown unary op %d", (int)op);
    if ((st = gs_dtype_unary_result(op, (gs_dtype_t)a->dtype, &dt)) != GS_OK) return st;
    if ((n = gs__node_like(GS__NODE_UNARY, a)) == NULL) return GS_ERR_NO_MEMORY;
    n->dtype = dt;
    n->u.op.op = op;
    n->ninputs = 1;
    n->in[0] = gs_array_retain(a);
    *out_p = n;
    return GS_OK;
}

static gs_status_t gs__scalar(int32_t kind, gs_binop_t op, gs_array_h a, double s,
                              gs_scalar_kind_t skind, gs_array_h *out_p)
{
    struct gs_array *n;
    gs_dtype_t dp, dt;
    gs_status_t st;
    /* op validated by the callers; the scalar is a Python float (NEP 50 weak scalar) */
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if ((st = gs_dtype_promote_scalar((gs_dtype_t)a->dtype, skind, &dp)) != GS_OK ||
        (st = gs_dtype_binary_result(op, dp, dp, &dt)) != GS_OK)
        return st;
    if ((st = gs__scalar_check(s, skind, dp)) != GS_OK) return st;
    if ((n = gs__node_like(kind, a)) == NULL) return GS_ERR_NO_MEMORY;
    n->dtype = dt;
    n->ninputs = 1;
    n->in[0] = gs_array_retain(a);
    n->u.op.op = op;
    n->u.op.scalar = s;
    n->u.op.skind = skind;
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_binary_array_scalar(gs_binop_t op, gs_array_h a, double scalar,
                                         gs_array_h *out_p)
{
    if ((int)op < 0 || op >= GS_BINARY_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown binary op %d", (int)op);
    return gs__scalar(GS__NODE_BINARY_SCALAR, op, a, scalar, GS_SCALAR_FLOAT, out_p);
}

gs_status_t gs_array_binary_scalar_array(gs_binop_t op, double scalar, gs_array_h a,
                                         gs_array_h *out_p)
{
    if ((int)op < 0 || op >= GS_BINARY_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown binary op %d", (int)op);
    return gs__scalar(GS__NODE_SCALAR_BINARY, op, a, scalar, GS_SCALAR_FLOAT, out_p);
}

gs_status_t gs_array_binary_array_scalar_kind(gs_binop_t op, gs_array_h a, double scalar,
                                              gs_scalar_kind_t kind, gs_array_h *out_p)
{
    if ((int)op < 0 || op >= GS_BINARY_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown binary op %d", (int)op);
    return gs__scalar(GS__NODE_BINARY_SCALAR, op, a, scalar, kind, out_p);
}

gs_status_t gs_array_binary_scalar_array_kind(gs_binop_t op, double scalar,
                                              gs_scalar_kind_t kind, gs_array_h a,
                                              gs_array_h *out_p)
{
    if ((int)op < 0 || op >= GS_BINARY_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown binary op %d", (int)op);
    return gs__scalar(GS__NODE_SCALAR_BINARY, op, a, scalar, kind, out_p);
}

gs_status_t gs_array_binary_scalar(gs_binop_t op, gs_array_h a, double scalar, gs_array_h *out_p)
{
    return gs_array_binary_array_scalar(op, a, scalar, out_p);
}

gs_status_t gs_array_scalar_binary(gs_binop_t op, double scalar, gs_array_h a, gs_array_h *out_p)
{
    return gs_array_binary_scalar_array(op, scalar, a, out_p);
}

/* Union of two sorted boundary lists (both 0..len) into a freshly allocated array. */
static gs_status_t gs__bounds_union(const int64_t *x, int64_t nx, const int64_t *y, int64_t ny,
                                    int64_t **out_p, int64_t *n_p)
{
    int64_t *u = gs_calloc((size_t)(nx + ny + 2), sizeof(int64_t), "grid bounds");
    int64_t i = 0, j = 0, k = 0;
    if (u == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
    while (i <= nx || j <= ny) {
        int64_t v;
        if (j > ny || (i <= nx && x[i] <= y[j])) v = x[i++];
        else v = y[j++];
        if (k == 0 || u[k - 1] != v) u[k++] = v;
    }
    if (k == 1) u[k++] = u[0];   /* empty axis: one empty chunk [0, 0] */
    *out_p = u;
    *n_p = k - 1;
    return GS_OK;
}

gs_status_t gs_array_binary(gs_binop_t op, gs_array_h a, gs_array_h b, gs_array_h *out_p)
{
    struct gs_array *n;
    gs_status_t st;
    int32_t nd;
    if (a == NULL || b == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if ((int)op < 0 || op >= GS_BINARY_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown binary op %d", (int)op);
    nd = a->grid.ndim > b->grid.ndim ? a->grid.ndim : b->grid.ndim;
    /* NumPy broadcasting: align on the right; sizes equal or one of them 1. */
    for (int32_t j = 0; j < nd; j++) {
        int32_t ja = j - (nd - a->grid.ndim), jb = j - (nd - b->grid.ndim);
        int64_t sa = ja >= 0 ? a->grid.shape[ja] : 1, sb = jb >= 0 ? b->grid.shape[jb] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "operands do not broadcast: size %lld vs %lld on output axis %d",
                                (long long)sa, (long long)sb, (int)j);
    }
    {
        gs_dtype_t dt;
        if ((st = gs_dtype_binary_result(op, (gs_dtype_t)a->dtype, (gs_dtype_t)b->dtype, &dt)) !=
            GS_OK)
            return st;
        n = gs__node_new(GS__NODE_BINARY, nd);
        if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
        n->dtype = dt;
    }
    for (int32_t j = 0; j < nd; j++) {
        int32_t ja = j - (nd - a->grid.ndim), jb = j - (nd - b->grid.ndim);
        int64_t sa = ja >= 0 ? a->grid.shape[ja] : 1, sb = jb >= 0 ? b->grid.shape[jb] : 1;
        int use_a = ja >= 0 && (sa != 1 || sb == 1);
        int use_b = jb >= 0 && (sb != 1 || sa == 1);
        n->grid.shape[j] = sa == 1 ? sb : sa;
        if (use_a && use_b) {
            st = gs__bounds_union(a->grid.bounds[ja], a->grid.nchunks[ja], b->grid.bounds[jb],
                                  b->grid.nchunks[jb], &n->grid.bounds[j], &n->grid.nchunks[j]);
        } else {
            const gs_grid_t *g = use_a ? &a->grid : &b->grid;
            int32_t ax = use_a ? ja : jb;
            /* neither: both sides absent/size 1 on this axis cannot happen (nd = max ndim) */
            st = gs__bounds_union(g->bounds[ax], g->nchunks[ax], g->bounds[ax], g->nchunks[ax],
                                  &n->grid.bounds[j], &n->grid.nchunks[j]);
        }
        if (st != GS_OK) goto err_free;
    }
    if ((st = gs__node_finish_grid(n)) != GS_OK) goto err_free;
    n->u.op.op = op;
    n->ninputs = 2;
    n->in[0] = gs_array_retain(a);
    n->in[1] = gs_array_retain(b);
    *out_p = n;
    return GS_OK;
err_free:
    gs__node_free_one(n);
    return st;
}

/* ---- slicing and layout ---- */

gs_status_t gs_array_slice(gs_array_h a, int nsl, const gs_slice_t *s, gs_array_h *out_p)
{
    int64_t start[GS_MAX_NDIM], step[GS_MAX_NDIM], count[GS_MAX_NDIM];
    int32_t index[GS_MAX_NDIM];
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if (nsl < 0 || nsl > a->grid.ndim)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%d slices for an array of ndim %d", nsl,
                            (int)a->grid.ndim);
    if (nsl > 0 && s == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "slices are NULL");
    for (int32_t ax = 0; ax < a->grid.ndim; ax++) {
        int64_t len = a->grid.shape[ax];
        index[ax] = 0;
        if (ax >= nsl) {
            start[ax] = 0;
            step[ax] = 1;
            count[ax] = len;
            continue;
        }
        if (s[ax].flags & ~(GS_SLICE_HAS_START | GS_SLICE_HAS_STOP | GS_SLICE_INDEX))
            return gs_error_set(GS_ERR_INVALID_PARAM, "unknown slice flags 0x%x on axis %d",
                                s[ax].flags, (int)ax);
        if (s[ax].flags & GS_SLICE_INDEX) {
            int64_t i = s[ax].start;
            if (i < 0) i += len;
            if (i < 0 || i >= len)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "index %lld out of range for axis %d of size %lld",
                                    (long long)s[ax].start, (int)ax, (long long)len);
            index[ax] = 1;
            start[ax] = i;
            step[ax] = 0;
            count[ax] = 1;
            continue;
        }
        int64_t st_ = s[ax].step, b, e, c;
        if (st_ == 0) return gs_error_set(GS_ERR_INVALID_PARAM, "slice step is 0 on axis %d "
                                                          "(a zeroed gs_slice_t? use GS_SLICE_ALL, "
                                                          "GS_SLICE(start, stop, step), ...)",
                                          (int)ax);
        if (st_ < -INT64_MAX) st_ = -INT64_MAX;
        if (s[ax].flags & GS_SLICE_HAS_START) {
            b = s[ax].start;
            if (b < 0) {
                b += len;
                if (b < 0) b = st_ < 0 ? -1 : 0;
            } else if (b >= len) {
                b = st_ < 0 ? len - 1 : len;
            }
        } else {
            b = st_ < 0 ? len - 1 : 0;
        }
        if (s[ax].flags & GS_SLICE_HAS_STOP) {
            e = s[ax].stop;
            if (e < 0) {
                e += len;
                if (e < 0) e = st_ < 0 ? -1 : 0;
            } else if (e >= len) {
                e = st_ < 0 ? len - 1 : len;
            }
        } else {
            e = st_ < 0 ? -1 : len;
        }
        if (st_ < 0) c = e < b ? (b - e - 1) / (-st_) + 1 : 0;
        else c = b < e ? (e - b - 1) / st_ + 1 : 0;
        if (c <= 1) st_ = 1;   /* any step selects the same element */
        if (c == 0) b = 0;
        start[ax] = b;
        step[ax] = st_;
        count[ax] = c;
    }
    return gs__array_slice_canonical(a, start, step, count, index, out_p);
}

gs_status_t gs__array_slice_canonical(gs_array_h a, const int64_t *start, const int64_t *step,
                                      const int64_t *count, const int32_t *index,
                                      gs_array_h *out_p)
{
    struct gs_array *n;
    gs_status_t st;
    int32_t nd = 0, j;
    for (int32_t ax = 0; ax < a->grid.ndim; ax++) {
        gs_assert(index[ax] ? (start[ax] >= 0 && start[ax] < a->grid.shape[ax])
                            : (count[ax] >= 0 && count[ax] <= a->grid.shape[ax]));
        if (!index[ax]) nd++;
    }
    n = gs__node_new(GS__NODE_SLICE, nd);
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    n->dtype = a->dtype;
    j = 0;
    for (int32_t ax = 0; ax < a->grid.ndim; ax++) {
        const int64_t *ib = a->grid.bounds[ax];
        int64_t inc = a->grid.nchunks[ax], c = count[ax], k, m = 0;
        int64_t *ob;
        n->u.slice.start[ax] = start[ax];
        n->u.slice.step[ax] = step[ax];
        n->u.slice.index[ax] = index[ax];
        if (index[ax]) continue;
        n->grid.shape[j] = c;
        /* one output chunk per non-empty intersection of an input chunk with the selection,
         * in output order; at most min(inc, c) chunks */
        ob = gs_calloc((size_t)(inc < c ? inc : c) + 2, sizeof(int64_t), "grid bounds");
        if (ob == NULL) {
            st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
            goto err_free;
        }
        n->grid.bounds[j] = ob;
        ob[0] = 0;
        if (c > 0) {
            int64_t t = 0;   /* next output index to place */
            int64_t stp = step[ax];
            while (t < c) {
                int64_t src = start[ax] + stp * t;   /* in range */
                int64_t lo, hi, t_end;
                k = gs__grid_find(&a->grid, (int)ax, src);
                lo = ib[k];
                hi = ib[k + 1];
                /* last t' with src' still inside [lo, hi) */
                if (stp > 0) t_end = t + (hi - 1 - src) / stp + 1;
                else t_end = t + (src - lo) / (-stp) + 1;
                if (t_end > c) t_end = c;
                ob[++m] = t_end;
                t = t_end;
            }
        } else {
            ob[++m] = 0;
        }
        n->grid.nchunks[j] = m;
        j++;
    }
    if ((st = gs__node_finish_grid(n)) != GS_OK) goto err_free;
    n->ninputs = 1;
    n->in[0] = gs_array_retain(a);
    *out_p = n;
    return GS_OK;
err_free:
    gs__node_free_one(n);
    return st;
}

gs_status_t gs_array_transpose(gs_array_h a, const int *perm, gs_array_h *out_p)
{
    struct gs_array *n;
    int32_t p[GS_MAX_NDIM];
    int seen[GS_MAX_NDIM] = {0};
    int32_t nd;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    nd = a->grid.ndim;
    for (int32_t i = 0; i < nd; i++) {
        p[i] = perm ? perm[i] : nd - 1 - i;
        if (p[i] < 0 || p[i] >= nd)
            return gs_error_set(GS_ERR_INVALID_PARAM, "transpose axis %d out of range for ndim %d",
                                (int)p[i], (int)nd);
        if (seen[p[i]]++)
            return gs_error_set(GS_ERR_INVALID_PARAM, "transpose repeats axis %d", (int)p[i]);
    }
    n = gs__node_new(GS__NODE_TRANSPOSE, nd);
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    n->dtype = a->dtype;
    for (int32_t i = 0; i < nd; i++) {
        n->grid.shape[i] = a->grid.shape[p[i]];
        n->grid.nchunks[i] = a->grid.nchunks[p[i]];
        n->u.tr.perm[i] = p[i];
    }
    if (gs__grid_alloc(&n->grid) != GS_OK) {
        gs__node_free_one(n);
        return GS_ERR_NO_MEMORY;
    }
    for (int32_t i = 0; i < nd; i++)
        memcpy(n->grid.bounds[i], a->grid.bounds[p[i]],
               ((size_t)n->grid.nchunks[i] + 1) * sizeof(int64_t));
    n->size = a->size;
    n->ninputs = 1;
    n->in[0] = gs_array_retain(a);
    *out_p = n;
    return GS_OK;
}

/* ---- reductions ---- */

gs_status_t gs_unravel_index(int64_t flat, int ndim, const int64_t *shape, int64_t *idx_p)
{
    int64_t idx[GS_MAX_NDIM], size = 1;
    if (ndim < 0 || ndim > GS_MAX_NDIM)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unravel_index: ndim %d outside 0..%d", ndim,
                            GS_MAX_NDIM);
    if (ndim > 0 && (shape == NULL || idx_p == NULL))
        return gs_error_set(GS_ERR_INVALID_PARAM, "unravel_index: shape and idx_p must not be "
                                                  "NULL");
    for (int a = 0; a < ndim; a++) {
        if (shape[a] < 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "unravel_index: extent %lld on axis %d",
                                (long long)shape[a], a);
        if (shape[a] == 0) size = 0;
        else if (size > INT64_MAX / shape[a]) size = INT64_MAX;
        else size *= shape[a];
    }
    if (flat < 0 || flat >= size)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unravel_index: flat index %lld outside an "
                                                  "array of %lld elements", (long long)flat,
                            (long long)size);
    for (int a = ndim - 1; a >= 0; a--) {
        idx[a] = flat % shape[a];
        flat /= shape[a];
    }
    for (int a = 0; a < ndim; a++) idx_p[a] = idx[a];
    return GS_OK;
}

gs_status_t gs_array_reduce(gs_redop_t op, gs_array_h a, const gs_reduce_params_t *params,
                            gs_array_h *out_p)
{
    struct gs_array *n;
    int32_t axis = -1, se = 16, nd;
    double ddof = 0.0;
    int64_t red_extent, out_size;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if ((int)op < 0 || op >= GS_RED_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown reduction %d", (int)op);
    if (params != NULL) {
        if (params->field_mask &
            ~(GS_REDUCE_FIELD_AXIS | GS_REDUCE_FIELD_SPLIT_EVERY | GS_REDUCE_FIELD_DDOF))
            return gs_error_set(GS_ERR_INVALID_PARAM, "unknown reduce field_mask bits 0x%x",
                                params->field_mask);
        if (!(params->field_mask & GS_REDUCE_FIELD_AXIS) && params->axis != 0)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "reduce axis is %d but GS_REDUCE_FIELD_AXIS is not in field_mask "
                                "(it would reduce over all axes)", params->axis);
        if (!(params->field_mask & GS_REDUCE_FIELD_SPLIT_EVERY) && params->split_every != 0)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "reduce split_every is %d but GS_REDUCE_FIELD_SPLIT_EVERY is not "
                                "in field_mask", params->split_every);
        if (!(params->field_mask & GS_REDUCE_FIELD_DDOF) && params->ddof != 0.0)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "reduce ddof is %g but GS_REDUCE_FIELD_DDOF is not in field_mask",
                                params->ddof);
        if (params->field_mask & GS_REDUCE_FIELD_AXIS) {
            axis = params->axis;
            if (axis < -a->grid.ndim || axis >= a->grid.ndim)
                return gs_error_set(GS_ERR_INVALID_PARAM, "reduce axis %d out of range for ndim %d",
                                    params->axis, (int)a->grid.ndim);
            if (axis < 0) axis += a->grid.ndim;
        }
        if (params->field_mask & GS_REDUCE_FIELD_SPLIT_EVERY) {
            se = params->split_every;
            if (se < 2 || se > GS_KERNEL_MAX_COMBINE)
                return gs_error_set(GS_ERR_INVALID_PARAM, "split_every %d out of range 2..%d", se,
                                    GS_KERNEL_MAX_COMBINE);
        }
        if (params->field_mask & GS_REDUCE_FIELD_DDOF) {
            ddof = params->ddof;
            if (!isfinite(ddof)) return gs_error_set(GS_ERR_INVALID_PARAM, "ddof is not finite");
        }
    }
    red_extent = axis < 0 ? a->size : a->grid.shape[axis];
    out_size = 1;
    for (int32_t i = 0; i < a->grid.ndim && axis >= 0; i++)
        if (i != axis) out_size *= a->grid.shape[i];
    if (red_extent == 0 && (axis < 0 || out_size > 0) &&
        (op == GS_RED_MIN || op == GS_RED_MAX || op == GS_RED_ARGMIN || op == GS_RED_ARGMAX))
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "%s of a zero-size array (no identity)",
                            op == GS_RED_MIN ? "min" : op == GS_RED_MAX ? "max"
                            : op == GS_RED_ARGMIN ? "argmin" : "argmax");
    nd = axis < 0 ? 0 : a->grid.ndim - 1;
    {
        gs_dtype_t dt;
        gs_status_t dst = gs_dtype_reduce_result(op, (gs_dtype_t)a->dtype, &dt);
        if (dst != GS_OK) return dst;
        n = gs__node_new(GS__NODE_REDUCE, nd);
        if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
        n->dtype = dt;
    }
    for (int32_t i = 0, j = 0; i < a->grid.ndim && axis >= 0; i++) {
        if (i == axis) continue;
        n->grid.shape[j] = a->grid.shape[i];
        n->grid.nchunks[j] = a->grid.nchunks[i];
        j++;
    }
    if (gs__grid_alloc(&n->grid) != GS_OK) {
        gs__node_free_one(n);
        return GS_ERR_NO_MEMORY;
    }
    for (int32_t i = 0, j = 0; i < a->grid.ndim && axis >= 0; i++) {
        if (i == axis) continue;
        memcpy(n->grid.bounds[j], a->grid.bounds[i],
               ((size_t)n->grid.nchunks[j] + 1) * sizeof(int64_t));
        j++;
    }
    n->size = gs__grid_size(&n->grid);
    n->u.red.op = op;
    n->u.red.axis = axis;
    n->u.red.split_every = se;
    n->u.red.ddof = ddof;
    n->ninputs = 1;
    n->in[0] = gs_array_retain(a);
    *out_p = n;
    return GS_OK;
}

/* ---- persisted chunks ---- */

gs_status_t gs_array_set_persisted(gs_array_h a, uint64_t nblocks, const gs_key_t *keys)
{
    gs__persist_t *p, *old;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "array is NULL");
    if (nblocks != gs_grid_nblocks(&a->grid))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%llu persisted blocks for an array of %llu",
                            (unsigned long long)nblocks,
                            (unsigned long long)gs_grid_nblocks(&a->grid));
    if (keys == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "keys are NULL");
    p = gs_malloc(sizeof(*p), "persist");
    if (p == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for persisted keys");
    p->keys = gs_malloc(gs_size_mul(nblocks, sizeof(gs_key_t)), "persist keys");
    if (p->keys == NULL) {
        gs_free(p);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for persisted keys");
    }
    (void)gs_heap_advise_huge(p->keys, nblocks * sizeof(gs_key_t));
    memcpy(p->keys, keys, nblocks * sizeof(gs_key_t));
    p->nblocks = nblocks;
    pthread_mutex_lock(&gs__persist_lock);
    old = a->persist;
    a->persist = p;
    pthread_mutex_unlock(&gs__persist_lock);
    if (old != NULL) {
        gs_free(old->keys);
        gs_free(old);
    }
    return GS_OK;
}

void gs_array_clear_persisted(gs_array_h a)
{
    gs__persist_t *old;
    if (a == NULL) return;
    pthread_mutex_lock(&gs__persist_lock);
    old = a->persist;
    a->persist = NULL;
    pthread_mutex_unlock(&gs__persist_lock);
    if (old != NULL) {
        gs_free(old->keys);
        gs_free(old);
    }
}

gs_status_t gs__array_persist_snapshot(const struct gs_array *n, uint64_t *nblocks_p,
                                       gs_key_t **keys_p)
{
    gs_status_t st = GS_OK;
    gs_key_t *k = NULL;
    uint64_t nb = 0;
    pthread_mutex_lock(&gs__persist_lock);
    if (n->persist != NULL) {
        nb = n->persist->nblocks;
        k = gs_malloc(gs_size_mul(nb, sizeof(gs_key_t)), "persist keys");
        if (k == NULL) st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for persisted keys");
        else memcpy(k, n->persist->keys, nb * sizeof(gs_key_t));
    }
    pthread_mutex_unlock(&gs__persist_lock);
    if (st != GS_OK) return st;
    *nblocks_p = nb;
    *keys_p = k;
    return GS_OK;
}

int gs__array_is_persisted(const struct gs_array *n)
{
    int p;
    pthread_mutex_lock(&gs__persist_lock);
    p = n->persist != NULL;
    pthread_mutex_unlock(&gs__persist_lock);
    return p;
}

gs_status_t gs_array_get_persisted(gs_array_h a, uint64_t *nblocks_p, gs_key_t **keys_p)
{
    uint64_t nb;
    gs_key_t *k;
    gs_status_t st;
    if (a == NULL || nblocks_p == NULL || keys_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "NULL argument");
    if ((st = gs__array_persist_snapshot(a, &nb, &k)) != GS_OK) return st;
    if (k == NULL) return gs_error_set(GS_ERR_NOT_FOUND, "array is not persisted");
    *nblocks_p = nb;
    *keys_p = k;
    return GS_OK;
}

/* ---- node construction for the other graph files (graph_internal.h) ---- */

struct gs_array *gs__array_node_new(int32_t kind, int32_t ndim)
{
    return gs__node_new(kind, ndim);
}

void gs__array_node_free(struct gs_array *n)
{
    gs__node_free_one(n);
}

gs_status_t gs__array_node_finish(struct gs_array *n)
{
    return gs__node_finish_grid(n);
}
