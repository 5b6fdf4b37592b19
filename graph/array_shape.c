/* Shape operations (gsched/array.h): reshape, ravel, eye, diag, tril, triu.
 *
 * reshape is Dask's: the input is rechunked so that every output block holds the elements of
 * exactly one input block in the same row-major order, then a RESHAPE node relabels each block
 * (lower_shape.c: one COPY piece per block, or none under fused consumers). The rechunk follows the axis groups of the two
 * shapes: axes of size 1 aside, the shapes split into runs of input and output axes with equal
 * products (a merge, a split, or both). Inside a group every axis but the first is taken whole,
 * so a block of the group is a contiguous range of its flat index; the ranges are the input's
 * chunk boundaries along the group's first axis times the product of the other axes, rounded
 * down to multiples of lcm(product of the other input axes, product of the other output axes)
 * so that they are whole rows on both sides. Groups are independent, and a block is the product
 * of one range per group, so it is one contiguous run of elements in the same order on both
 * sides.
 *
 * The others are compositions of validated operations that fuse into one kernel per chunk:
 * tril/triu = where(mask, x, 0), eye = astype(mask) and diag(v) = where(mask, v as a column or
 * row, 0), with mask = (col - row) OP k computed from two arange generators of shapes (M, 1)
 * and (1, N) broadcast against each other (exact: indices stay below 2^53). diag of a matrix is
 * a DIAG node: one COPY piece per run of the diagonal inside one input block (stride: the
 * block's row length + 1), so only the diagonal's elements are read (lower_shape.c). */
#include "graph/copy_int.h"

#include <stdio.h>
#include <string.h>

/* ---- reshape ---- */

gs_status_t gs__array_reshape_node(gs_array_h a, const gs_grid_t *g, gs_array_h *out_p)
{
    gs_assert(a->size > 0 && gs__grid_size(g) == a->size);
    return gs__array_grid_node(GS__NODE_RESHAPE, a, g, out_p);
}

/* "(2, 3, -1)" into @a buf. */
static const char *gs__shape_str(int nd, const int64_t *shape, char *buf, size_t cap)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "(");
    for (int a = 0; a < nd && k < cap; a++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", a ? ", " : "", (long long)shape[a]);
    if (k < cap) snprintf(buf + k, cap - k, nd == 1 ? ",)" : ")");
    return buf;
}

static int64_t gs__gcd(int64_t x, int64_t y)
{
    while (y != 0) {
        int64_t t = x % y;
        x = y;
        y = t;
    }
    return x;
}

/* Grid of @a shape with one chunk per axis (bounds allocated). */
static gs_status_t gs__grid_whole(gs_grid_t *g, int nd, const int64_t *shape)
{
    memset(g, 0, sizeof(*g));
    g->ndim = nd;
    for (int a = 0; a < nd; a++) {
        g->shape[a] = shape[a];
        g->nchunks[a] = 1;
    }
    if (gs__grid_alloc(g) != GS_OK) return GS_ERR_NO_MEMORY;
    for (int a = 0; a < nd; a++) g->bounds[a][1] = shape[a];
    return GS_OK;
}

/* Axis @a ax of @a g gets the nb chunks with boundaries B[0..nb] / div. */
static gs_status_t gs__grid_set_axis(gs_grid_t *g, int ax, const int64_t *B, int64_t nb,
                                     int64_t div)
{
    int64_t *b = gs_malloc(((size_t)nb + 1) * sizeof(int64_t), "grid bounds");
    if (b == NULL) return GS_ERR_NO_MEMORY;
    for (int64_t c = 0; c <= nb; c++) b[c] = B[c] / div;
    gs_free(g->bounds[ax]);
    g->bounds[ax] = b;
    g->nchunks[ax] = nb;
    return GS_OK;
}

/* Flat boundaries, inside a group of axes, of a chunking whose axes before axis j have chunks of
 * one element (pre positions), axis j the boundaries b[0..nc], and the axes after it (R
 * elements in all) one chunk: q * S + b[c] * R for q < pre, c < nc (S = b[nc] * R), then
 * pre * S. NULL when out of memory; *n_p entries. */
static int64_t *gs__group_flat(int64_t pre, int64_t R, const int64_t *b, int64_t nc, int64_t *n_p)
{
    const int64_t S = b[nc] * R;
    int64_t *f = gs_malloc(gs_size_mul((size_t)(pre * nc + 1), sizeof(int64_t)), "reshape bounds");
    int64_t k = 0;
    if (f == NULL) return NULL;
    for (int64_t q = 0; q < pre; q++)
        for (int64_t c = 0; c < nc; c++) f[k++] = q * S + b[c] * R;
    f[k++] = pre * S;
    *n_p = k;
    return f;
}

/* Axes ax[0..j) of @a g get chunks of one element (sizes >= 2: bounds 0, 1, ..., size). */
static gs_status_t gs__grid_unit_axes(gs_grid_t *g, const int *ax, int j)
{
    for (int t = 0; t < j; t++) {
        const int64_t len = g->shape[ax[t]];
        int64_t *b = gs_malloc(((size_t)len + 1) * sizeof(int64_t), "grid bounds");
        if (b == NULL) return GS_ERR_NO_MEMORY;
        for (int64_t c = 0; c <= len; c++) b[c] = c;
        gs_free(g->bounds[ax[t]]);
        g->bounds[ax[t]] = b;
        g->nchunks[ax[t]] = len;
    }
    return GS_OK;
}

/* One group without any rechunk, when one exists: input axes ia[0..ni) (ig's chunking: the
 * axes before some j unit-chunked, axis j as it is, the rest taken whole) and output axes
 * oa[0..no) (sizes os) chunked as the same sequence of flat ranges: unit chunks before some j',
 * the ranges' pattern on axis j', whole after. 1 when found (tin and og set), 0 when not, -1
 * when out of memory. */
static int gs__group_exact(const gs_grid_t *ig, const int *ia, int ni, const int64_t *os,
                           const int *oa, int no, gs_grid_t *tin, gs_grid_t *og)
{
    int jmax = 0, found = 0;
    while (jmax < ni - 1 && ig->nchunks[ia[jmax]] == ig->shape[ia[jmax]]) jmax++;
    for (int j = jmax; j >= 0 && !found; j--) {
        int64_t pre = 1, r = 1, nin, *bin;
        for (int t = 0; t < j; t++) pre *= ig->shape[ia[t]];
        for (int t = j + 1; t < ni; t++) r *= ig->shape[ia[t]];
        bin = gs__group_flat(pre, r, ig->bounds[ia[j]], ig->nchunks[ia[j]], &nin);
        if (bin == NULL) return -1;
        for (int jo = no - 1; jo >= 0 && !found; jo--) {
            int64_t opre = 1, orr = 1, np = 0, nout, *pat, *bout;
            for (int t = 0; t < jo; t++) opre *= os[oa[t]];
            for (int t = jo + 1; t < no; t++) orr *= os[oa[t]];
            const int64_t span = os[oa[jo]] * orr;
            int ok = 1;
            for (int64_t c = 0; c < nin && ok; c++) ok = bin[c] % orr == 0;
            if (!ok) continue;
            while (np < nin && bin[np] < span) np++;
            int64_t cnt;
            if (np == 0 || __builtin_mul_overflow(opre, np, &cnt) || cnt + 1 != nin) continue;
            pat = gs_malloc(((size_t)np + 1) * sizeof(int64_t), "reshape bounds");
            if (pat == NULL) {
                gs_free(bin);
                return -1;
            }
            for (int64_t c = 0; c < np; c++) pat[c] = bin[c] / orr;
            pat[np] = os[oa[jo]];
            bout = gs__group_flat(opre, orr, pat, np, &nout);
            if (bout == NULL) {
                gs_free(pat);
                gs_free(bin);
                return -1;
            }
            if (nout == nin && memcmp(bout, bin, (size_t)nin * sizeof(int64_t)) == 0) {
                /* tin: ia[0..j) unit chunks (they are), ia[j] as it is; og likewise */
                if (gs__grid_unit_axes(tin, ia, j) != GS_OK ||
                    gs__grid_set_axis(tin, ia[j], ig->bounds[ia[j]], ig->nchunks[ia[j]], 1) !=
                        GS_OK ||
                    gs__grid_unit_axes(og, oa, jo) != GS_OK ||
                    gs__grid_set_axis(og, oa[jo], pat, np, 1) != GS_OK)
                    found = -1;
                else
                    found = 1;
            }
            gs_free(bout);
            gs_free(pat);
        }
        gs_free(bin);
    }
    return found;
}

/* The input grid @a tin (a rechunk of @a ig) and the output grid @a og (shape @a os) whose
 * blocks correspond one to one (see the file comment). Both are cleaned up on failure.
 * Requires a nonzero element count. Per group, a chunking that needs no rechunk is used when
 * there is one (gs__group_exact: e.g. (B, M, N) chunked (1, m, N) to (B * M, N)); otherwise
 * the group's first input axis keeps its boundaries rounded to whole rows of both sides. */
static gs_status_t gs__reshape_plan(const gs_grid_t *ig, int ond, const int64_t *os,
                                    gs_grid_t *tin, gs_grid_t *og)
{
    int ia[GS_MAX_NDIM], oa[GS_MAX_NDIM], ni = 0, no = 0, p = 0, q = 0;
    int64_t *B = NULL;
    if (gs__grid_whole(tin, ig->ndim, ig->shape) != GS_OK) return GS_ERR_NO_MEMORY;
    if (gs__grid_whole(og, ond, os) != GS_OK) goto nomem;
    for (int a = 0; a < ig->ndim; a++)
        if (ig->shape[a] != 1) ia[ni++] = a;
    for (int a = 0; a < ond; a++)
        if (os[a] != 1) oa[no++] = a;
    while (p < ni) {
        int p1 = p + 1, q1 = q + 1, i0 = ia[p], o0 = oa[q], ex;
        int64_t pi = ig->shape[i0], po = os[o0], rin, rout, l, nb = 0;
        const int64_t nc = ig->nchunks[i0];
        gs_assert_always(q < no);
        while (pi != po) {
            if (pi < po) {
                gs_assert_always(p1 < ni);
                pi *= ig->shape[ia[p1++]];
            } else {
                gs_assert_always(q1 < no);
                po *= os[oa[q1++]];
            }
        }
        ex = gs__group_exact(ig, ia + p, p1 - p, os, oa + q, q1 - q, tin, og);
        if (ex < 0) goto nomem;
        if (ex == 0) {
            rin = pi / ig->shape[i0];
            rout = po / os[o0];
            l = rin / gs__gcd(rin, rout) * rout;   /* divides pi */
            B = gs_malloc(((size_t)nc + 1) * sizeof(int64_t), "reshape bounds");
            if (B == NULL) goto nomem;
            for (int64_t c = 0; c <= nc; c++) {
                int64_t v = ig->bounds[i0][c] * rin / l * l;
                if (nb == 0 || v != B[nb - 1]) B[nb++] = v;
            }
            gs_assert_always(nb >= 2 && B[0] == 0 && B[nb - 1] == pi);
            for (int64_t c = 0; c < nb; c++) B[c] /= rin;
            if (gs__grid_set_axis(tin, i0, B, nb - 1, 1) != GS_OK) goto nomem;
            for (int64_t c = 0; c < nb; c++) B[c] = B[c] * rin / rout;
            if (gs__grid_set_axis(og, o0, B, nb - 1, 1) != GS_OK) goto nomem;
            gs_free(B);
            B = NULL;
        }
        p = p1;
        q = q1;
    }
    gs_assert_always(q == no);
    return GS_OK;
nomem:
    gs_free(B);
    gs_grid_cleanup(tin);
    gs_grid_cleanup(og);
    return GS_ERR_NO_MEMORY;
}

/* The checks of a reshape of @a a to @a ndim sizes @a shape (one may be -1) and the shape it
 * asks for in @a os (the -1 inferred). GS_ERR_INVALID_PARAM naming the fault. */
static gs_status_t gs__reshape_shape(gs_array_h a, int ndim, const int64_t *shape,
                                     gs_array_h *out_p, int64_t *os)
{
    int64_t known = 1;
    int infer = -1;
    char sbuf[256];
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "reshape: operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "reshape: out_p is NULL");
    if (ndim < 0 || ndim > GS_MAX_NDIM)
        return gs_error_set(GS_ERR_INVALID_PARAM, "reshape: ndim %d out of range 0..%d", ndim,
                            GS_MAX_NDIM);
    if (shape == NULL && ndim > 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "reshape: shape is NULL");
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == -1) {
            if (infer >= 0)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "reshape: the new shape %s has more than one -1 (axes %d "
                                    "and %d): only one size can be inferred",
                                    gs__shape_str(ndim, shape, sbuf, sizeof(sbuf)), infer, i);
            infer = i;
            continue;
        }
        if (shape[i] < 0)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "reshape: the new shape %s has a negative size on axis %d (only "
                                "-1, once, infers a size)",
                                gs__shape_str(ndim, shape, sbuf, sizeof(sbuf)), i);
        if (__builtin_mul_overflow(known, shape[i], &known))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "reshape: the element count of the new shape %s overflows",
                                gs__shape_str(ndim, shape, sbuf, sizeof(sbuf)));
        os[i] = shape[i];
    }
    if (infer >= 0) {
        if (known == 0)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "reshape: cannot infer the -1 of the new shape %s: the other "
                                "axes hold no elements",
                                gs__shape_str(ndim, shape, sbuf, sizeof(sbuf)));
        if (a->size % known != 0)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "reshape: cannot reshape an array of size %lld into shape %s",
                                (long long)a->size, gs__shape_str(ndim, shape, sbuf, sizeof(sbuf)));
        os[infer] = a->size / known;
    } else if (known != a->size) {
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "reshape: cannot reshape an array of size %lld into shape %s",
                            (long long)a->size, gs__shape_str(ndim, shape, sbuf, sizeof(sbuf)));
    }
    return GS_OK;
}

gs_status_t gs_array_reshape(gs_array_h a, int ndim, const int64_t *shape, gs_array_h *out_p)
{
    int64_t os[GS_MAX_NDIM];
    int same;
    gs_grid_t tin, og;
    gs_array_h aligned;
    gs_status_t st;
    if ((st = gs__reshape_shape(a, ndim, shape, out_p, os)) != GS_OK) return st;
    same = ndim == a->grid.ndim;
    for (int i = 0; same && i < ndim; i++) same = os[i] == a->grid.shape[i];
    if (same) {
        *out_p = gs_array_retain(a);
        return GS_OK;
    }
    if (a->size == 0) {
        /* every empty array of a shape and dtype is the same array */
        int64_t ch[GS_MAX_NDIM];
        for (int i = 0; i < ndim; i++) ch[i] = os[i] > 0 ? os[i] : 1;
        return gs_array_zeros_dtype((gs_dtype_t)a->dtype, ndim, os, ch, out_p);
    }
    if (gs__reshape_plan(&a->grid, ndim, os, &tin, &og) != GS_OK)
        return gs_error_set(GS_ERR_NO_MEMORY, "reshape: out of memory for chunk bounds");
    st = gs_array_rechunk_bounds(a, tin.nchunks, (const int64_t *const *)tin.bounds, &aligned);
    if (st == GS_OK) {
        st = gs__array_reshape_node(aligned, &og, out_p);
        gs_array_release(aligned);
    }
    gs_grid_cleanup(&tin);
    gs_grid_cleanup(&og);
    return st;
}

/* Fortran order: reading and writing in column-major index order is the C-order reshape of
 * the axes reversed, x.reshape(s, order='F') == x.T.reshape(s[::-1]).T (NumPy's definition:
 * its flat index runs the first axis fastest). The transposes are index maps, not copies:
 * fused consumers read through them, and the reshape's rechunking and copy tasks are the
 * C-order ones of x.T. */
gs_status_t gs_array_reshape_order(gs_array_h a, int ndim, const int64_t *shape,
                                   gs_order_t order, gs_array_h *out_p)
{
    int64_t os[GS_MAX_NDIM], rs[GS_MAX_NDIM];
    gs_array_h at = NULL, r = NULL;
    gs_status_t st;
    if (order == GS_ORDER_C) return gs_array_reshape(a, ndim, shape, out_p);
    if (order != GS_ORDER_F)
        return gs_error_set(GS_ERR_INVALID_PARAM, "reshape: unknown order %d (GS_ORDER_C %d or "
                            "GS_ORDER_F %d)", (int)order, (int)GS_ORDER_C, (int)GS_ORDER_F);
    if ((st = gs__reshape_shape(a, ndim, shape, out_p, os)) != GS_OK) return st;
    /* one axis or fewer on both sides, or the same shape: both orders give the same array */
    if ((ndim <= 1 && a->grid.ndim <= 1) ||
        (ndim == a->grid.ndim && memcmp(os, a->grid.shape, (size_t)ndim * sizeof(int64_t)) == 0))
        return gs_array_reshape(a, ndim, os, out_p);
    for (int i = 0; i < ndim; i++) rs[i] = os[ndim - 1 - i];
    if ((st = gs_array_transpose(a, NULL, &at)) != GS_OK) goto out;
    if ((st = gs_array_reshape(at, ndim, rs, &r)) != GS_OK) goto out;
    st = gs_array_transpose(r, NULL, out_p);
out:
    gs_array_release(r);
    gs_array_release(at);
    return st;
}

gs_status_t gs_array_ravel(gs_array_h a, gs_array_h *out_p)
{
    const int64_t m1 = -1;
    return gs_array_reshape(a, 1, &m1, out_p);
}

/* ---- triangles and diagonals ---- */

/* bool array of shape (m, n): (col - row) OP k, from aranges chunked by @a chunks (NULL: one
 * chunk per axis, so that broadcasting against another operand keeps its chunks). */
static gs_status_t gs__tri_mask(int64_t m, int64_t n, const int64_t *chunks, gs_binop_t op,
                                int64_t k, gs_array_h *out_p)
{
    const int64_t rs[2] = {m, 1}, cs[2] = {1, n};
    const int64_t rc[2] = {chunks ? chunks[0] : (m > 0 ? m : 1), 1};
    const int64_t cc[2] = {1, chunks ? chunks[1] : (n > 0 ? n : 1)};
    gs_array_h rows = NULL, cols = NULL, d = NULL;
    gs_status_t st;
    if (m > (INT64_C(1) << 53) || n > (INT64_C(1) << 53))
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "a %lld x %lld mask: axes longer than 2^53 are not supported (the "
                            "mask's indices are exact in float64 up to 2^53)",
                            (long long)m, (long long)n);
    /* col - row lies in [-(m - 1), n - 1]: clamping k to [-m, n] changes no comparison and keeps
     * it exact as a double */
    if (k > n) k = n;
    if (k < -m) k = -m;
    if ((st = gs_array_arange(0.0, 1.0, 2, rs, rc, &rows)) != GS_OK) goto out;
    if ((st = gs_array_arange(0.0, 1.0, 2, cs, cc, &cols)) != GS_OK) goto out;
    if ((st = gs_array_binary(GS_BINARY_SUB, cols, rows, &d)) != GS_OK) goto out;
    st = gs_array_binary_array_scalar(op, d, (double)k, out_p);
out:
    gs_array_release(d);
    gs_array_release(cols);
    gs_array_release(rows);
    return st;
}

/* where(mask, x, 0) over the last two axes of x: keep = (col - row) OP k. */
static gs_status_t gs__tri(const char *what, gs_array_h x, int64_t k, gs_binop_t op,
                           gs_array_h *out_p)
{
    gs_array_h mask = NULL, zero = NULL;
    gs_status_t st;
    int32_t nd;
    if (x == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: operand is NULL", what);
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: out_p is NULL", what);
    nd = x->grid.ndim;
    if (nd < 2)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "%s: the input must have at least 2 axes (a matrix or a stack of "
                            "matrices), it has %d",
                            what, (int)nd);
    if ((st = gs__tri_mask(x->grid.shape[nd - 2], x->grid.shape[nd - 1], NULL, op, k, &mask)) !=
        GS_OK)
        goto out;
    if ((st = gs_array_zeros_like(x, &zero)) != GS_OK) goto out;
    st = gs_array_where(mask, x, zero, out_p);
out:
    gs_array_release(zero);
    gs_array_release(mask);
    return st;
}

gs_status_t gs_array_tril(gs_array_h x, int64_t k, gs_array_h *out_p)
{
    return gs__tri("tril", x, k, GS_BINARY_LE, out_p);
}

gs_status_t gs_array_triu(gs_array_h x, int64_t k, gs_array_h *out_p)
{
    return gs__tri("triu", x, k, GS_BINARY_GE, out_p);
}

gs_status_t gs_array_eye(int64_t n, int64_t m, int64_t k, gs_dtype_t dtype, const int64_t *chunks,
                         gs_array_h *out_p)
{
    gs_array_h mask;
    gs_status_t st;
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "eye: out_p is NULL");
    if (n < 0) return gs_error_set(GS_ERR_INVALID_PARAM, "eye: n = %lld is negative", (long long)n);
    if (m < -1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "eye: m = %lld is negative (-1 means m = n)",
                            (long long)m);
    if (gs_dtype_size(dtype) == 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "eye: unknown dtype %d", (int)dtype);
    if (chunks == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "eye: chunks is NULL");
    if (chunks[0] < 1 || chunks[1] < 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "eye: chunks (%lld, %lld) must be >= 1",
                            (long long)chunks[0], (long long)chunks[1]);
    if (m == -1) m = n;
    if ((st = gs__tri_mask(n, m, chunks, GS_BINARY_EQ, k, &mask)) != GS_OK) return st;
    if (dtype == GS_DTYPE_BOOL) {
        *out_p = mask;
        return GS_OK;
    }
    st = gs_array_astype(mask, dtype, out_p);
    gs_array_release(mask);
    return st;
}

/* diag of a vector @a v (n > 0 elements): (n + |k|)^2 with v on diagonal k. */
static gs_status_t gs__diag_build(gs_array_h v, int64_t k, int64_t big, gs_array_h *out_p)
{
    const int64_t absk = k < 0 ? -k : k;
    const int64_t col[2] = {big, 1}, row[2] = {1, big};
    gs_array_h pad = NULL, vp = NULL, vv = NULL, vt = NULL, zero = NULL, mask = NULL;
    gs_status_t st;
    /* vp[i] = v[i], zero past n: row i of the result reads vp[i] (k >= 0), column j reads vp[j]
     * (k < 0) */
    if (k == 0) {
        vp = gs_array_retain(v);
    } else {
        gs_array_h parts[2];
        if ((st = gs_array_zeros_dtype((gs_dtype_t)v->dtype, 1, &absk, &absk, &pad)) != GS_OK)
            goto out;
        parts[0] = v;
        parts[1] = pad;
        if ((st = gs_array_concatenate(2, parts, 0, &vp)) != GS_OK) goto out;
    }
    if ((st = gs_array_reshape(vp, 2, k >= 0 ? col : row, &vv)) != GS_OK) goto out;
    /* the other operand: zeros chunked like vp along the other axis */
    if ((st = gs_array_transpose(vv, NULL, &vt)) != GS_OK) goto out;
    if ((st = gs_array_zeros_like(vt, &zero)) != GS_OK) goto out;
    if ((st = gs__tri_mask(big, big, NULL, GS_BINARY_EQ, k, &mask)) != GS_OK) goto out;
    st = gs_array_where(mask, vv, zero, out_p);
out:
    gs_array_release(mask);
    gs_array_release(zero);
    gs_array_release(vt);
    gs_array_release(vv);
    gs_array_release(vp);
    gs_array_release(pad);
    return st;
}

gs_status_t gs__array_diag_node(gs_array_h a, int64_t k, gs_array_h *out_p)
{
    const gs_grid_t *g = &a->grid;
    const int64_t m = g->shape[0], n = g->shape[1];
    const int64_t roff = k < 0 ? -k : 0, coff = k > 0 ? k : 0;
    int64_t len, i = 1, j = 1, nb = 0, *b;
    struct gs_array *d;
    gs_status_t st;
    gs_assert(g->ndim == 2 && k < n && k > -m);
    len = m - roff < n - coff ? m - roff : n - coff;
    gs_assert(len > 0);
    /* the diagonal's cuts: row boundaries - roff and column boundaries - coff inside (0, len) */
    b = gs_malloc(gs_size_mul((size_t)(g->nchunks[0] + g->nchunks[1] + 2), sizeof(int64_t)),
                  "grid bounds");
    if (b == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
    b[nb++] = 0;
    while (i < g->nchunks[0] || j < g->nchunks[1]) {
        int64_t r = i < g->nchunks[0] ? g->bounds[0][i] - roff : INT64_MAX;
        int64_t c = j < g->nchunks[1] ? g->bounds[1][j] - coff : INT64_MAX;
        int64_t v = r < c ? r : c;
        if (r == v) i++;
        if (c == v) j++;
        if (v > 0 && v < len && v != b[nb - 1]) b[nb++] = v;
    }
    b[nb++] = len;
    d = gs__array_node_new(GS__NODE_DIAG, 1);
    if (d == NULL) {
        gs_free(b);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    }
    d->grid.shape[0] = len;
    d->grid.nchunks[0] = nb - 1;
    d->grid.bounds[0] = b;
    if ((st = gs__array_node_finish(d)) != GS_OK) {
        gs__array_node_free(d);
        return st;
    }
    d->dtype = a->dtype;
    d->u.dg.k = k;
    d->ninputs = 1;
    d->in[0] = gs_array_retain(a);
    *out_p = d;
    return GS_OK;
}

gs_status_t gs_array_diag(gs_array_h x, int64_t k, gs_array_h *out_p)
{
    if (x == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "diag: operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "diag: out_p is NULL");
    if (x->grid.ndim == 1) {
        const int64_t n = x->grid.shape[0];
        int64_t big, ch[2];
        if (k < -GS__MAX_ELEMENTS || k > GS__MAX_ELEMENTS ||
            __builtin_add_overflow(n, k < 0 ? -k : k, &big))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "diag: the result of offset %lld is too large", (long long)k);
        if (n > 0) return gs__diag_build(x, k, big, out_p);
        const int64_t sh[2] = {big, big};
        ch[0] = ch[1] = big > 0 ? big : 1;
        return gs_array_zeros_dtype((gs_dtype_t)x->dtype, 2, sh, ch, out_p);
    }
    if (x->grid.ndim == 2) {
        const int64_t m = x->grid.shape[0], n = x->grid.shape[1];
        int64_t len;
        if (k >= 0) len = k >= n ? 0 : (m < n - k ? m : n - k);
        else len = k <= -m ? 0 : (m + k < n ? m + k : n);
        if (len > 0) return gs__array_diag_node(x, k, out_p);
        const int64_t zs = 0, zc = 1;
        return gs_array_zeros_dtype((gs_dtype_t)x->dtype, 1, &zs, &zc, out_p);
    }
    return gs_error_set(GS_ERR_INVALID_PARAM, "diag: the input must be 1-D or 2-D, it has %d axes",
                        (int)x->grid.ndim);
}
