/* Dense linear algebra on chunked arrays: matmul, QR and SVD of tall-and-skinny arrays (TSQR),
 * randomized SVD (Halko, Martinsson & Tropp 2011). Nodes and validation here; lowering in
 * lower_linalg.c. */
#include "graph/linalg_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers ---- */

/* "[0, 3, 6, 7]" (elided in the middle when long) into @a buf. */
static const char *gs__bounds_str(const int64_t *b, int64_t nc, char *buf, size_t len)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int64_t k = 0; k <= nc && o < len; k++) {
        if (nc > 8 && k == 4) {
            o += (size_t)snprintf(buf + o, len - o, "..., ");
            k = nc - 3;
        }
        o += (size_t)snprintf(buf + o, len - o, "%" PRId64 "%s", b[k], k < nc ? ", " : "");
    }
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

static gs_status_t gs__set_bounds(gs_grid_t *g, int axis, const int64_t *b, int64_t nc)
{
    g->nchunks[axis] = nc;
    g->bounds[axis] = gs_malloc(((size_t)nc + 1) * sizeof(int64_t), "grid bounds");
    if (g->bounds[axis] == NULL) return GS_ERR_NO_MEMORY;
    memcpy(g->bounds[axis], b, ((size_t)nc + 1) * sizeof(int64_t));
    g->shape[axis] = b[nc];
    return GS_OK;
}

static int gs__is_plain_transpose(const struct gs_array *a)
{
    return a->kind == GS__NODE_TRANSPOSE && a->grid.ndim == 2 && a->u.tr.perm[0] == 1 &&
           a->u.tr.perm[1] == 0 && !gs__array_is_persisted(a);
}

/* ---- matmul ---- */

/* Logical matrix view of operand @a k (0: a, 1: b): rows/cols chunk bounds. A 1-D a is 1 x K,
 * a 1-D b is K x 1. */
static void gs__mm_logical(const struct gs_array *x, int trans, int nd, int k, int64_t *nr,
                           const int64_t **rb, int64_t *nc, const int64_t **cb)
{
    static const int64_t unit[2] = {0, 1};
    if (nd == 1) {
        if (k == 0) {
            *nr = 1, *rb = unit;
            *nc = x->grid.nchunks[0], *cb = x->grid.bounds[0];
        } else {
            *nr = x->grid.nchunks[0], *rb = x->grid.bounds[0];
            *nc = 1, *cb = unit;
        }
        return;
    }
    *nr = x->grid.nchunks[trans ? 1 : 0], *rb = x->grid.bounds[trans ? 1 : 0];
    *nc = x->grid.nchunks[trans ? 0 : 1], *cb = x->grid.bounds[trans ? 0 : 1];
}

static gs_status_t gs__matmul_node(struct gs_array *x, int tx, int ndx, struct gs_array *y, int ty,
                                   int ndy, gs_array_h *out_p)
{
    int64_t anr, anc, bnr, bnc;
    const int64_t *arb, *acb, *brb, *bcb;
    struct gs_array *n;
    gs_status_t st;
    int nd = 0;
    gs__mm_logical(x, tx, ndx, 0, &anr, &arb, &anc, &acb);
    gs__mm_logical(y, ty, ndy, 1, &bnr, &brb, &bnc, &bcb);
    if (acb[anc] != brb[bnr])
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "matmul: shapes do not align: a has %" PRId64 " columns (its last "
                            "axis), b has %" PRId64 " rows (its first axis)",
                            acb[anc], brb[bnr]);
    if (anc != bnr || memcmp(acb, brb, ((size_t)anc + 1) * sizeof(int64_t)) != 0) {
        char s1[160], s2[160];
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "matmul: the contracted axis is chunked differently: a's last axis "
                            "at %s, b's first axis at %s; rechunk one of them to match",
                            gs__bounds_str(acb, anc, s1, sizeof(s1)),
                            gs__bounds_str(brb, bnr, s2, sizeof(s2)));
    }
    if (x->dtype != GS_DTYPE_FLOAT64 || y->dtype != GS_DTYPE_FLOAT64)
        return gs_error_set(GS_ERR_INVALID_PARAM, "matmul of %s and %s arrays: only float64 for now",
                            gs_dtype_name((gs_dtype_t)x->dtype), gs_dtype_name((gs_dtype_t)y->dtype));
    n = gs__array_node_new(GS__NODE_MATMUL, (ndx == 2) + (ndy == 2));
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    if (ndx == 2 && gs__set_bounds(&n->grid, nd++, arb, anr) != GS_OK) goto nomem;
    if (ndy == 2 && gs__set_bounds(&n->grid, nd++, bcb, bnc) != GS_OK) goto nomem;
    if ((st = gs__array_node_finish(n)) != GS_OK) {
        gs__array_node_free(n);
        return st;
    }
    n->u.mm.trans[0] = tx;
    n->u.mm.trans[1] = ty;
    n->u.mm.nd[0] = ndx;
    n->u.mm.nd[1] = ndy;
    n->ninputs = 2;
    n->in[0] = gs_array_retain(x);
    n->in[1] = gs_array_retain(y);
    *out_p = n;
    return GS_OK;
nomem:
    gs__array_node_free(n);
    return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
}

gs_status_t gs_array_matmul(gs_array_h a, gs_array_h b, gs_array_h *out_p)
{
    struct gs_array *x, *y;
    int tx = 0, ty = 0;
    if (a == NULL || b == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "out_p is NULL");
    if (a->grid.ndim < 1 || a->grid.ndim > 2 || b->grid.ndim < 1 || b->grid.ndim > 2)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "matmul takes 1-D and 2-D operands, got ndim %d and %d",
                            (int)a->grid.ndim, (int)b->grid.ndim);
    /* x.T of a 2-D x is read in place, transposed by the GEMM */
    x = a, y = b;
    if (gs__is_plain_transpose(a)) x = a->in[0], tx = 1;
    if (gs__is_plain_transpose(b)) y = b->in[0], ty = 1;
    return gs__matmul_node(x, tx, a->grid.ndim, y, ty, b->grid.ndim, out_p);
}

/* ---- factorisations ---- */

gs_status_t gs__factor_grid(const struct gs_array *x, int32_t op, int part, gs_grid_t *g)
{
    const int64_t ncol = x->grid.shape[1];
    const int64_t one[2] = {0, ncol};
    memset(g, 0, sizeof(*g));
    if (part == GS__FAC_Q) return gs_grid_copy(g, &x->grid);
    if (op == GS_LA_SVD && part == GS__FAC_S) {
        g->ndim = 1;
        if (gs__set_bounds(g, 0, one, 1) != GS_OK) goto nomem;
        return GS_OK;
    }
    g->ndim = 2;
    if (gs__set_bounds(g, 0, one, 1) != GS_OK || gs__set_bounds(g, 1, one, 1) != GS_OK)
        goto nomem;
    return GS_OK;
nomem:
    gs_grid_cleanup(g);
    return GS_ERR_NO_MEMORY;
}

/* Check that @a x can be factorised by TSQR (what = "qr" / "svd" for messages). */
static gs_status_t gs__tsqr_input_check(const struct gs_array *x, const char *what)
{
    if (x->dtype != GS_DTYPE_FLOAT64)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s of a %s array: only float64 for now", what,
                            gs_dtype_name((gs_dtype_t)x->dtype));
    if (x->grid.ndim != 2)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s needs a 2-D array, got ndim %d", what,
                            (int)x->grid.ndim);
    if (x->grid.shape[1] < 1 || x->grid.shape[0] < x->grid.shape[1])
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "%s: a %" PRId64 " x %" PRId64 " array is not tall-and-skinny "
                            "(TSQR needs rows >= columns >= 1)",
                            what, x->grid.shape[0], x->grid.shape[1]);
    if (x->grid.nchunks[1] != 1)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "%s: a tall-and-skinny array must be chunked along rows only; this "
                            "one has %" PRId64 " column chunks: rechunk it to one column chunk "
                            "of %" PRId64,
                            what, x->grid.nchunks[1], x->grid.shape[1]);
    return gs__tsqr_check(&x->grid);
}

static gs_status_t gs__factor_node(struct gs_array *x, int32_t op, int part, gs_array_h *out_p)
{
    struct gs_array *n = gs__array_node_new(GS__NODE_FACTOR, 0);
    gs_status_t st;
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    if (gs__factor_grid(x, op, part, &n->grid) != GS_OK) {
        gs__array_node_free(n);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
    }
    if ((st = gs__array_node_finish(n)) != GS_OK) {
        gs__array_node_free(n);
        return st;
    }
    n->u.fac.op = op;
    n->u.fac.part = part;
    n->ninputs = 1;
    n->in[0] = gs_array_retain(x);
    *out_p = n;
    return GS_OK;
}

/* Parts @a parts[k] (NULL: not wanted) of factorisation @a op of @a x; all or nothing. */
static gs_status_t gs__factor_parts(struct gs_array *x, int32_t op, int nparts,
                                    gs_array_h **parts)
{
    gs_array_h made[3] = {NULL, NULL, NULL};
    gs_status_t st;
    for (int k = 0; k < nparts; k++) {
        if (parts[k] == NULL) continue;
        if ((st = gs__factor_node(x, op, k, &made[k])) != GS_OK) {
            for (int j = 0; j < k; j++) gs_array_release(made[j]);
            return st;
        }
    }
    for (int k = 0; k < nparts; k++)
        if (parts[k] != NULL) *parts[k] = made[k];
    return GS_OK;
}

gs_status_t gs_array_qr(gs_array_h a, gs_array_h *q_p, gs_array_h *r_p)
{
    gs_array_h *parts[2] = {q_p, r_p};
    gs_status_t st;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (q_p == NULL && r_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "qr: q_p and r_p are both NULL");
    if ((st = gs__tsqr_input_check(a, "qr")) != GS_OK) return st;
    return gs__factor_parts(a, GS_LA_QR, 2, parts);
}

gs_status_t gs_array_svd(gs_array_h a, gs_array_h *u_p, gs_array_h *s_p, gs_array_h *vt_p)
{
    gs_array_h t = NULL, ut = NULL, vtt = NULL, s = NULL, u = NULL, vt = NULL;
    gs_array_h *parts[3];
    gs_status_t st;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (u_p == NULL && s_p == NULL && vt_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "svd: u_p, s_p and vt_p are all NULL");
    if (a->grid.ndim != 2)
        return gs_error_set(GS_ERR_INVALID_PARAM, "svd needs a 2-D array, got ndim %d",
                            (int)a->grid.ndim);
    if (a->grid.shape[0] >= a->grid.shape[1]) {
        parts[0] = u_p, parts[1] = s_p, parts[2] = vt_p;
        if ((st = gs__tsqr_input_check(a, "svd")) != GS_OK) return st;
        return gs__factor_parts(a, GS_LA_SVD, 3, parts);
    }
    /* short-and-fat: a = (a^T)^T = (U' S Vt')^T = Vt'^T S U'^T */
    if (a->grid.nchunks[0] != 1)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "svd: a short-and-fat array must be chunked along columns only; "
                            "this one has %" PRId64 " row chunks: rechunk it to one row chunk of "
                            "%" PRId64,
                            a->grid.nchunks[0], a->grid.shape[0]);
    if ((st = gs_array_transpose(a, NULL, &t)) != GS_OK) return st;
    if ((st = gs__tsqr_input_check(t, "svd")) != GS_OK) goto out;
    parts[0] = vt_p ? &ut : NULL, parts[1] = s_p ? &s : NULL, parts[2] = u_p ? &vtt : NULL;
    if ((st = gs__factor_parts(t, GS_LA_SVD, 3, parts)) != GS_OK) goto out;
    if (vtt != NULL && (st = gs_array_transpose(vtt, NULL, &u)) != GS_OK) goto out;
    if (ut != NULL && (st = gs_array_transpose(ut, NULL, &vt)) != GS_OK) goto out;
    if (u_p) *u_p = u, u = NULL;
    if (s_p) *s_p = s, s = NULL;
    if (vt_p) *vt_p = vt, vt = NULL;
out:
    gs_array_release(t);
    gs_array_release(ut);
    gs_array_release(vtt);
    gs_array_release(s);
    gs_array_release(u);
    gs_array_release(vt);
    return st;
}

/* ---- randomized SVD ---- */

/* Q of the TSQR of @a y (new reference). */
static gs_status_t gs__q_of(gs_array_h y, gs_array_h *q_p)
{
    gs_status_t st = gs__tsqr_input_check(y, "svd_compressed");
    if (st != GS_OK) return st;
    return gs__factor_node(y, GS_LA_QR, GS__FAC_Q, q_p);
}

/* Standard normal (rows x l) test matrix whose row chunks are @a rb (values depend only on the
 * seed and the element index, never on the chunking). */
static gs_status_t gs__test_matrix(uint64_t seed, const int64_t *rb, int64_t nrc, int64_t l,
                                   gs_array_h *out_p)
{
    int64_t shape[2] = {rb[nrc], l}, chunks[2] = {rb[1] > 0 ? rb[1] : 1, l > 0 ? l : 1};
    gs_array_h o;
    gs_status_t st = gs_array_random_normal(seed, 0.0, 1.0, 2, shape, chunks, &o);
    if (st != GS_OK) return st;
    /* the handle is ours alone: give it the row chunks of the array it multiplies */
    gs_free(o->grid.bounds[0]);
    o->grid.bounds[0] = NULL;
    if (gs__set_bounds(&o->grid, 0, rb, nrc) != GS_OK) {
        gs_array_release(o);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
    }
    *out_p = o;
    return GS_OK;
}

gs_status_t gs_array_svd_compressed(gs_array_h a, int64_t k,
                                    const gs_svd_compressed_params_t *params, gs_array_h *u_p,
                                    gs_array_h *s_p, gs_array_h *vt_p)
{
    int power = 0;
    int64_t over = 10, m, n, mn, l;
    uint64_t seed = 0;
    gs_array_h at = NULL, om = NULL, y = NULL, q = NULL, z = NULL, bt = NULL, ub = NULL,
               sb = NULL, vtb = NULL, vtbt = NULL, ufull = NULL, u = NULL, s = NULL, vt = NULL,
               ubk = NULL;
    gs_slice_t sl[2];
    gs_array_h *parts[3];
    gs_status_t st;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "operand is NULL");
    if (u_p == NULL && s_p == NULL && vt_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "svd_compressed: u_p, s_p and vt_p are all NULL");
    if (a->grid.ndim != 2)
        return gs_error_set(GS_ERR_INVALID_PARAM, "svd_compressed needs a 2-D array, got ndim %d",
                            (int)a->grid.ndim);
    if (params != NULL) {
        if (params->field_mask & ~(GS_SVDC_FIELD_POWER_ITER | GS_SVDC_FIELD_OVERSAMPLES |
                                   GS_SVDC_FIELD_SEED))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "svd_compressed: unknown field_mask bits 0x%x", params->field_mask);
        if (params->field_mask & GS_SVDC_FIELD_POWER_ITER) power = params->n_power_iter;
        if (params->field_mask & GS_SVDC_FIELD_OVERSAMPLES) over = params->n_oversamples;
        if (params->field_mask & GS_SVDC_FIELD_SEED) seed = params->seed;
    }
    if (power < 0 || power > 100)
        return gs_error_set(GS_ERR_INVALID_PARAM, "svd_compressed: n_power_iter %d out of range 0..100",
                            power);
    if (over < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "svd_compressed: n_oversamples %" PRId64
                            " is negative", over);
    m = a->grid.shape[0], n = a->grid.shape[1];
    mn = m < n ? m : n;
    if (k < 1 || k > mn)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "svd_compressed: k = %" PRId64 " is out of range: a %" PRId64 " x %" PRId64
                            " array has at most %" PRId64 " singular values (need 1 <= k <= %" PRId64
                            ")",
                            k, m, n, mn, mn);
    l = over > mn - k ? mn : k + over;

    /* Y = A @ Omega; power iterations Y = A (A^T Q(Y)) with re-orthonormalisation */
    if ((st = gs_array_transpose(a, NULL, &at)) != GS_OK) goto out;
    if ((st = gs__test_matrix(seed, a->grid.bounds[1], a->grid.nchunks[1], l, &om)) != GS_OK)
        goto out;
    if ((st = gs_array_matmul(a, om, &y)) != GS_OK) goto out;
    for (int it = 0; it < power; it++) {
        if ((st = gs__q_of(y, &q)) != GS_OK) goto out;
        if ((st = gs_array_matmul(at, q, &z)) != GS_OK) goto out;
        gs_array_release(q), q = NULL;
        if ((st = gs__q_of(z, &q)) != GS_OK) goto out;
        gs_array_release(y), y = NULL;
        if ((st = gs_array_matmul(a, q, &y)) != GS_OK) goto out;
        gs_array_release(q), q = NULL;
        gs_array_release(z), z = NULL;
    }
    if ((st = gs__q_of(y, &q)) != GS_OK) goto out;
    /* B = Q^T A (l x n), factorised through its transpose B^T = A^T Q = Ub Sb Vtb, so
     * A ~ Q B = (Q Vtb^T) Sb Ub^T */
    if ((st = gs_array_matmul(at, q, &bt)) != GS_OK) goto out;
    if ((st = gs__tsqr_input_check(bt, "svd_compressed")) != GS_OK) goto out;
    parts[0] = vt_p ? &ub : NULL, parts[1] = s_p ? &sb : NULL, parts[2] = u_p ? &vtb : NULL;
    if ((st = gs__factor_parts(bt, GS_LA_SVD, 3, parts)) != GS_OK) goto out;
    memset(sl, 0, sizeof(sl));
    sl[0].step = sl[1].step = 1;
    if (u_p != NULL) {
        if ((st = gs_array_transpose(vtb, NULL, &vtbt)) != GS_OK) goto out;
        if ((st = gs_array_matmul(q, vtbt, &ufull)) != GS_OK) goto out;
        sl[1].stop = k, sl[1].flags = GS_SLICE_HAS_STOP;
        if ((st = gs_array_slice(ufull, 2, sl, &u)) != GS_OK) goto out;
    }
    if (s_p != NULL) {
        sl[0].stop = k, sl[0].flags = GS_SLICE_HAS_STOP;
        if ((st = gs_array_slice(sb, 1, sl, &s)) != GS_OK) goto out;
    }
    if (vt_p != NULL) {
        sl[0].stop = 0, sl[0].flags = 0;
        sl[1].stop = k, sl[1].flags = GS_SLICE_HAS_STOP;
        if ((st = gs_array_slice(ub, 2, sl, &ubk)) != GS_OK) goto out;
        if ((st = gs_array_transpose(ubk, NULL, &vt)) != GS_OK) goto out;
    }
    if (u_p) *u_p = u, u = NULL;
    if (s_p) *s_p = s, s = NULL;
    if (vt_p) *vt_p = vt, vt = NULL;
out:
    gs_array_release(at);
    gs_array_release(om);
    gs_array_release(y);
    gs_array_release(q);
    gs_array_release(z);
    gs_array_release(bt);
    gs_array_release(ub);
    gs_array_release(sb);
    gs_array_release(vtb);
    gs_array_release(vtbt);
    gs_array_release(ufull);
    gs_array_release(u);
    gs_array_release(s);
    gs_array_release(vt);
    gs_array_release(ubk);
    return st;
}

/* ---- slice pushdown ---- */

gs_status_t gs__linalg_rebuild(const struct gs_array *n, struct gs_array *a, struct gs_array *b,
                               struct gs_array **out_p)
{
    switch (n->kind) {
    case GS__NODE_MATMUL:
        return gs__matmul_node(a, n->u.mm.trans[0], n->u.mm.nd[0], b, n->u.mm.trans[1],
                               n->u.mm.nd[1], out_p);
    case GS__NODE_FACTOR:
        return gs__factor_node(a, n->u.fac.op, n->u.fac.part, out_p);
    default:
        return gs_error_set(GS_ERR_INTERNAL, "not a linear algebra node (kind %d)", (int)n->kind);
    }
}
