/* Data-movement expressions: rechunk, concatenate, stack (gsched/array.h).
 *
 * Concatenation of n arrays is a left fold of binary CONCAT nodes (struct gs_array has two
 * input slots, and release/lowering/pushdown walk exactly those); the lowering flattens chains of
 * single-use CONCAT nodes along one axis into one COPY layer, so data is copied once
 * (lower_copy.c). Stacking is the same fold with operands marked "expanded": an expanded operand
 * lacks the stacking axis and takes one position on it. */
#include "graph/copy_int.h"

#include <string.h>

/* ---- rechunk ---- */

/* A node of @a kind over the one input @a a with output grid @a g (copied), dtype of @a a. */
gs_status_t gs__array_grid_node(int kind, gs_array_h a, const gs_grid_t *g, gs_array_h *out_p)
{
    struct gs_array *n;
    gs_status_t st;
    n = gs__array_node_new(kind, g->ndim);
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    if (gs_grid_copy(&n->grid, g) != GS_OK) {
        gs__array_node_free(n);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
    }
    if ((st = gs__array_node_finish(n)) != GS_OK) {
        gs__array_node_free(n);
        return st;
    }
    n->dtype = a->dtype;
    n->ninputs = 1;
    n->in[0] = gs_array_retain(a);
    *out_p = n;
    return GS_OK;
}

gs_status_t gs__array_rechunk_grid(gs_array_h a, const gs_grid_t *g, gs_array_h *out_p)
{
    gs_assert(g->ndim == a->grid.ndim);
    return gs__array_grid_node(GS__NODE_RECHUNK, a, g, out_p);
}

/* Rechunk @a a to grid @a g (bounds filled, shape = a's): a's own handle when the grid is the
 * same. Takes care of the reference either way; @a g is cleaned up by the caller. */
static gs_status_t gs__rechunk_to(gs_array_h a, gs_grid_t *g, gs_array_h *out_p)
{
    if (gs__grid_equal(g, &a->grid)) {
        *out_p = gs_array_retain(a);
        return GS_OK;
    }
    return gs__array_rechunk_grid(a, g, out_p);
}

gs_status_t gs_array_rechunk(gs_array_h a, const int64_t *chunks, gs_array_h *out_p)
{
    gs_grid_t g;
    gs_status_t st;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if (chunks == NULL && a->grid.ndim > 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "chunks is NULL");
    for (int32_t ax = 0; ax < a->grid.ndim; ax++)
        if (chunks[ax] < -1)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "rechunk: chunks[%d] = %lld (use >= 1, -1 for the whole axis or 0 "
                                "to keep the axis' chunks)",
                                (int)ax, (long long)chunks[ax]);
    memset(&g, 0, sizeof(g));
    g.ndim = a->grid.ndim;
    for (int32_t ax = 0; ax < g.ndim; ax++) {
        int64_t len = a->grid.shape[ax], c = chunks[ax];
        g.shape[ax] = len;
        if (c == 0) g.nchunks[ax] = a->grid.nchunks[ax];
        else if (c == -1 || c >= len) g.nchunks[ax] = 1;
        else g.nchunks[ax] = len / c + (len % c != 0);
    }
    if (gs__grid_alloc(&g) != GS_OK) {
        gs_grid_cleanup(&g);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
    }
    for (int32_t ax = 0; ax < g.ndim; ax++) {
        int64_t len = a->grid.shape[ax], c = chunks[ax], nc = g.nchunks[ax];
        if (c == 0) {
            memcpy(g.bounds[ax], a->grid.bounds[ax], ((size_t)nc + 1) * sizeof(int64_t));
            continue;
        }
        for (int64_t k = 0; k < nc; k++) g.bounds[ax][k] = nc == 1 ? 0 : k * c;
        g.bounds[ax][nc] = len;
    }
    st = gs__rechunk_to(a, &g, out_p);
    gs_grid_cleanup(&g);
    return st;
}

gs_status_t gs_array_rechunk_bounds(gs_array_h a, const int64_t *nchunks,
                                    const int64_t *const *bounds, gs_array_h *out_p)
{
    gs_grid_t g;
    gs_status_t st;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if ((nchunks == NULL || bounds == NULL) && a->grid.ndim > 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "nchunks or bounds is NULL");
    memset(&g, 0, sizeof(g));
    g.ndim = a->grid.ndim;
    for (int32_t ax = 0; ax < g.ndim; ax++) {
        int64_t len = a->grid.shape[ax];
        const int64_t *b = bounds[ax];
        g.shape[ax] = len;
        if (b == NULL) {
            g.nchunks[ax] = a->grid.nchunks[ax];
            continue;
        }
        if (nchunks[ax] < 1 || (uint64_t)nchunks[ax] > (uint64_t)(len > 0 ? len : 1))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "rechunk: nchunks[%d] = %lld out of range 1..%lld", (int)ax,
                                (long long)nchunks[ax], (long long)(len > 0 ? len : 1));
        if (b[0] != 0 || b[nchunks[ax]] != len)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "rechunk: bounds of axis %d must run from 0 to %lld", (int)ax,
                                (long long)len);
        for (int64_t k = 0; k < nchunks[ax] && len > 0; k++)
            if (b[k + 1] <= b[k])
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "rechunk: bounds of axis %d are not increasing at %lld",
                                    (int)ax, (long long)k + 1);
        g.nchunks[ax] = nchunks[ax];
    }
    if (gs__grid_alloc(&g) != GS_OK) {
        gs_grid_cleanup(&g);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
    }
    for (int32_t ax = 0; ax < g.ndim; ax++) {
        const int64_t *b = bounds[ax] != NULL ? bounds[ax] : a->grid.bounds[ax];
        memcpy(g.bounds[ax], b, ((size_t)g.nchunks[ax] + 1) * sizeof(int64_t));
    }
    st = gs__rechunk_to(a, &g, out_p);
    gs_grid_cleanup(&g);
    return st;
}

/* ---- concatenate / stack ---- */

/* Sorted union of boundary lists x (nx chunks) and y (ny chunks), both 0..len. */
static int64_t *gs__union(const int64_t *x, int64_t nx, const int64_t *y, int64_t ny, int64_t *n_p)
{
    int64_t *u = gs_calloc((size_t)(nx + ny + 2), sizeof(int64_t), "grid bounds");
    int64_t i = 0, j = 0, k = 0;
    if (u == NULL) return NULL;
    while (i <= nx || j <= ny) {
        int64_t v;
        if (j > ny || (i <= nx && x[i] <= y[j])) v = x[i++];
        else v = y[j++];
        if (k == 0 || u[k - 1] != v) u[k++] = v;
    }
    if (k == 1) u[k++] = u[0];   /* empty axis: one empty chunk */
    *n_p = k - 1;
    return u;
}

gs_status_t gs__array_concat_node(gs_array_h a, gs_array_h b, int axis, int ea, int eb,
                                  gs_array_h *out_p)
{
    const gs_array_h ops[2] = {a, b};
    const int ex[2] = {ea, eb};
    const int nops = b != NULL ? 2 : 1;
    const int32_t nd = a->grid.ndim + (ea ? 1 : 0);
    struct gs_array *n;
    gs_status_t st = GS_OK;
    gs_assert(nd >= 1 && nd <= GS_MAX_NDIM && axis >= 0 && axis < nd);
    gs_assert(b == NULL || b->grid.ndim + (eb ? 1 : 0) == nd);
    /* shapes off the axis must agree */
    for (int32_t j = 0; j < nd && b != NULL; j++) {
        int32_t ja = j - (ea && j > axis), jb = j - (eb && j > axis);
        if (j == axis) continue;
        if (a->grid.shape[ja] != b->grid.shape[jb])
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "%s: sizes %lld and %lld differ on axis %d",
                                ea ? "stack" : "concatenate", (long long)a->grid.shape[ja],
                                (long long)b->grid.shape[jb], (int)j);
    }
    if (b != NULL && b->dtype != a->dtype)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "%s of %s and %s arrays: the dtypes must be equal (astype one)",
                            ea ? "stack" : "concatenate", gs_dtype_name((gs_dtype_t)a->dtype),
                            gs_dtype_name((gs_dtype_t)(b != NULL ? b->dtype : a->dtype)));
    n = gs__array_node_new(GS__NODE_CONCAT, nd);
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    for (int32_t j = 0; j < nd; j++) {
        if (j == axis) {
            /* the operands' chunks one after the other */
            int64_t total = 0, cap = 2, k = 0, *ob;
            for (int i = 0; i < nops; i++) cap += ex[i] ? 1 : ops[i]->grid.nchunks[axis];
            ob = gs_calloc((size_t)cap, sizeof(int64_t), "grid bounds");
            if (ob == NULL) goto nomem;
            n->grid.bounds[j] = ob;
            ob[k++] = 0;
            for (int i = 0; i < nops; i++) {
                if (ex[i]) {
                    ob[k++] = ++total;
                    continue;
                }
                const int64_t *ib = ops[i]->grid.bounds[axis];
                for (int64_t c = 1; c <= ops[i]->grid.nchunks[axis]; c++)
                    if (total + ib[c] != ob[k - 1]) ob[k++] = total + ib[c];
                total += ops[i]->grid.shape[axis];
            }
            if (k == 1) ob[k++] = 0;
            n->grid.shape[j] = total;
            n->grid.nchunks[j] = k - 1;
        } else {
            int32_t ja = j - (ea && j > axis), jb = j - (eb && j > axis);
            const gs_grid_t *ga = &a->grid, *gb = b != NULL ? &b->grid : &a->grid;
            if (b == NULL) jb = ja;
            n->grid.shape[j] = ga->shape[ja];
            n->grid.bounds[j] = gs__union(ga->bounds[ja], ga->nchunks[ja], gb->bounds[jb],
                                          gb->nchunks[jb], &n->grid.nchunks[j]);
            if (n->grid.bounds[j] == NULL) goto nomem;
        }
    }
    if ((st = gs__array_node_finish(n)) != GS_OK) goto err_free;
    n->u.cat.axis = axis;
    n->u.cat.expand[0] = (uint8_t)(ea != 0);
    n->u.cat.expand[1] = (uint8_t)(eb != 0);
    n->dtype = a->dtype;
    n->ninputs = nops;
    n->in[0] = gs_array_retain(a);
    if (b != NULL) n->in[1] = gs_array_retain(b);
    *out_p = n;
    return GS_OK;
nomem:
    st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
err_free:
    gs__array_node_free(n);
    return st;
}

/* Left fold over arrays[0..n) (checked), stack = operands lack the axis. */
static gs_status_t gs__concat_fold(int n, const gs_array_h *arrays, int axis, int stack,
                                   gs_array_h *out_p)
{
    const char *what = stack ? "stack" : "concatenate";
    gs_array_h acc;
    int32_t nd;
    gs_status_t st;
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if (n < 1) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: needs at least one array", what);
    if (arrays == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: arrays is NULL", what);
    for (int i = 0; i < n; i++)
        if (arrays[i] == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: array %d is NULL", what, i);
    nd = arrays[0]->grid.ndim + (stack ? 1 : 0);
    if (!stack && nd == 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "concatenate: zero-dimensional arrays cannot be "
                                                  "concatenated");
    if (nd > GS_MAX_NDIM)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stack: the result would have %d axes (at most %d)",
                            (int)nd, GS_MAX_NDIM);
    if (axis < -nd || axis >= nd)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: axis %d out of range for a result of ndim %d",
                            what, axis, (int)nd);
    if (axis < 0) axis += nd;
    for (int i = 1; i < n; i++) {
        if (arrays[i]->grid.ndim != arrays[0]->grid.ndim)
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: array %d has ndim %d, array 0 has %d",
                                what, i, (int)arrays[i]->grid.ndim, (int)arrays[0]->grid.ndim);
        for (int32_t j = 0; j < arrays[0]->grid.ndim; j++)
            if ((stack || j != axis) && arrays[i]->grid.shape[j] != arrays[0]->grid.shape[j])
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "%s: array %d has size %lld on axis %d, array 0 has %lld", what,
                                    i, (long long)arrays[i]->grid.shape[j], (int)j,
                                    (long long)arrays[0]->grid.shape[j]);
    }
    if (n == 1 && !stack) {
        *out_p = gs_array_retain(arrays[0]);   /* arrays are immutable: no copy needed */
        return GS_OK;
    }
    if (n == 1) return gs__array_concat_node(arrays[0], NULL, axis, 1, 0, out_p);
    if ((st = gs__array_concat_node(arrays[0], arrays[1], axis, stack, stack, &acc)) != GS_OK)
        return st;
    for (int i = 2; i < n; i++) {
        gs_array_h next;
        st = gs__array_concat_node(acc, arrays[i], axis, 0, stack, &next);
        gs_array_release(acc);
        if (st != GS_OK) return st;
        acc = next;
    }
    *out_p = acc;
    return GS_OK;
}

gs_status_t gs_array_concatenate(int n, const gs_array_h *arrays, int axis, gs_array_h *out_p)
{
    return gs__concat_fold(n, arrays, axis, 0, out_p);
}

gs_status_t gs_array_stack(int n, const gs_array_h *arrays, int axis, gs_array_h *out_p)
{
    return gs__concat_fold(n, arrays, axis, 1, out_p);
}
