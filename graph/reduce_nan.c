/* NumPy's truth and NaN-skipping reductions (gs_array_reduce_composite()): any, all,
 * count_nonzero, nansum, nanprod, nanmean, nanmin, nanmax, nanargmin, nanargmax, nanvar,
 * nanstd.
 *
 * Each one is a composition of existing graph operations (elementwise ops fuse into the
 * reduction's kernel, so no new chunk kernel exists for them on any backend):
 *   count_nonzero  sum(astype(x, bool))                               (int64)
 *   any            count_nonzero(x) > 0                               (bool; empty: false)
 *   all            sum(logical_not(x)) == 0                           (bool; empty: true)
 *   nansum         sum(where(isnan(x), 0, x))         (nanprod: prod, NaN as 1)
 *   nanmean        sum(where(isnan(x), 0, float64(x))) / n, n the count of non-NaN elements,
 *                  rounded once to x's float dtype (0 / 0: an all-NaN slice gives NaN)
 *   nanmax         where(n == 0, NaN, max(where(isnan(x), -inf, x)))  (nanmin with +inf, min)
 *   nanargmax      i1 = argmax(where(isnan(x), -inf, x)); when the slice's nanmax is -inf, the
 *                  first -inf: argmax(x == -inf); -1 where the slice is all NaN
 *   nanvar         two passes: m = nanmean (float64), then
 *                  sum(where(isnan(x), 0, (x - m)^2)) / (n - ddof), NaN where n - ddof <= 0
 * Integer and bool arrays hold no NaN: their nan-reductions are the plain reductions. The
 * tuple of axes and split_every go to gs_array_reduce_axes(); keepdims is applied once to the
 * final result (one COPY task per kept axis). */
#include "graph/graph_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const gs__cred_names[GS_CRED_COUNT] = {
    "any",    "all",    "count_nonzero", "nansum",    "nanmean",  "nanmin",
    "nanmax", "nanargmin", "nanargmax",  "nanvar",    "nanstd",   "nanprod",
};

const char *gs_credop_name(gs_credop_t op)
{
    return (int)op >= 0 && op < GS_CRED_COUNT ? gs__cred_names[op] : "unknown";
}

static int gs__isfloat(gs_dtype_t d)
{
    return d == GS_DTYPE_FLOAT64 || d == GS_DTYPE_FLOAT32 || d == GS_DTYPE_FLOAT16;
}

gs_status_t gs_dtype_composite_result(gs_credop_t op, gs_dtype_t a, gs_dtype_t *out_p)
{
    if (out_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "composite reduction dtype: out_p is NULL");
    if ((int)op < 0 || op >= GS_CRED_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown composite reduction %d", (int)op);
    if ((int)a < 0 || a >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unknown dtype %d", gs__cred_names[op],
                            (int)a);
    switch (op) {
    case GS_CRED_ANY:
    case GS_CRED_ALL: *out_p = GS_DTYPE_BOOL; return GS_OK;
    case GS_CRED_COUNT_NONZERO:
    case GS_CRED_NANARGMIN:
    case GS_CRED_NANARGMAX: *out_p = GS_DTYPE_INT64; return GS_OK;
    case GS_CRED_NANSUM: return gs_dtype_reduce_result(GS_RED_SUM, a, out_p);
    case GS_CRED_NANPROD: return gs_dtype_reduce_result(GS_RED_PROD, a, out_p);
    case GS_CRED_NANMIN:
    case GS_CRED_NANMAX: *out_p = a; return GS_OK;
    default: return gs_dtype_reduce_result(GS_RED_MEAN, a, out_p); /* nanmean, nanvar, nanstd */
    }
}

/* ---- a pool of the intermediate handles, released together ---- */

enum { GS__POOL = 32 };

typedef struct {
    gs_array_h h[GS__POOL];
    int n;
    int naxes;
    const int *axes;
    const gs_reduce_params_t *p;   /* split_every and ddof, as the caller gave them */
} gs__cx_t;

/* Keep @a st's new handle *h_p in the pool (it stays borrowed by the caller). */
static gs_status_t gs__keep(gs__cx_t *c, gs_status_t st, gs_array_h h, gs_array_h *h_p)
{
    if (st != GS_OK) return st;
    if (c->n == GS__POOL) { /* cannot happen: every composition below builds fewer */
        gs_array_release(h);
        return gs_error_set(GS_ERR_INTERNAL, "composite reduction: too many intermediates");
    }
    c->h[c->n++] = h;
    *h_p = h;
    return GS_OK;
}

static gs_status_t gs__un(gs__cx_t *c, gs_unop_t op, gs_array_h x, gs_array_h *r)
{
    gs_array_h h = NULL;
    gs_status_t st = gs_array_unary(op, x, &h);
    return gs__keep(c, st, h, r);
}

static gs_status_t gs__bin(gs__cx_t *c, gs_binop_t op, gs_array_h x, gs_array_h y, gs_array_h *r)
{
    gs_array_h h = NULL;
    gs_status_t st = gs_array_binary(op, x, y, &h);
    return gs__keep(c, st, h, r);
}

/* x OP s with a float scalar (comparisons give bool whatever x's dtype). */
static gs_status_t gs__bins(gs__cx_t *c, gs_binop_t op, gs_array_h x, double s, gs_array_h *r)
{
    gs_array_h h = NULL;
    gs_status_t st = gs_array_binary_array_scalar(op, x, s, &h);
    return gs__keep(c, st, h, r);
}

static gs_status_t gs__cast(gs__cx_t *c, gs_array_h x, gs_dtype_t d, gs_array_h *r)
{
    gs_array_h h = NULL;
    gs_status_t st = gs_array_astype(x, d, &h);
    return gs__keep(c, st, h, r);
}

/* where(cond, v, x) with v filling an array shaped and typed as x. */
static gs_status_t gs__where_fill(gs__cx_t *c, gs_array_h cond, double v, gs_array_h x,
                                  gs_array_h *r)
{
    gs_array_h f = NULL, h = NULL;
    gs_status_t st = gs_array_full_like(x, v, &f);
    if ((st = gs__keep(c, st, f, &f)) != GS_OK) return st;
    st = gs_array_where(cond, f, x, &h);
    return gs__keep(c, st, h, r);
}

/* x with its NaN replaced by @a v. */
static gs_status_t gs__nan_to(gs__cx_t *c, gs_array_h x, double v, gs_array_h *r)
{
    gs_array_h m = NULL;
    gs_status_t st = gs__un(c, GS_UNARY_ISNAN, x, &m);
    if (st != GS_OK) return st;
    return gs__where_fill(c, m, v, x, r);
}

/* @a op over the caller's axes, without keepdims. */
static gs_status_t gs__red(gs__cx_t *c, gs_redop_t op, gs_array_h x, gs_array_h *r)
{
    gs_array_h h = NULL;
    gs_status_t st = gs_array_reduce_axes(op, x, c->naxes, c->axes, 0, c->p, &h);
    return gs__keep(c, st, h, r);
}

/* The number of non-NaN elements of each slice (int64). */
static gs_status_t gs__count_nonnan(gs__cx_t *c, gs_array_h x, gs_array_h *r)
{
    gs_array_h m = NULL, k = NULL;
    gs_status_t st = gs__un(c, GS_UNARY_ISNAN, x, &m);
    if (st == GS_OK) st = gs__un(c, GS_UNARY_LOGICAL_NOT, m, &k);
    if (st == GS_OK) st = gs__red(c, GS_RED_SUM, k, r);
    return st;
}

/* nanmin/nanmax (is_max) of a float array. */
static gs_status_t gs__nanext(gs__cx_t *c, int is_max, gs_array_h x, gs_array_h *r)
{
    gs_array_h y = NULL, m = NULL, n = NULL, z = NULL;
    gs_status_t st = gs__nan_to(c, x, is_max ? -INFINITY : INFINITY, &y);
    if (st == GS_OK) st = gs__red(c, is_max ? GS_RED_MAX : GS_RED_MIN, y, &m);
    if (st == GS_OK) st = gs__count_nonnan(c, x, &n);
    if (st == GS_OK) st = gs__bins(c, GS_BINARY_EQ, n, 0.0, &z);
    if (st == GS_OK) st = gs__where_fill(c, z, NAN, m, r);
    return st;
}

/* nanargmin/nanargmax of a float array: -1 for an all-NaN slice. */
static gs_status_t gs__nanarg(gs__cx_t *c, int is_max, gs_array_h x, gs_array_h *r)
{
    const double edge = is_max ? -INFINITY : INFINITY;
    gs_array_h y = NULL, i1 = NULL, m = NULL, e = NULL;
    gs_array_h i2 = NULL, me = NULL, sel = NULL, n = NULL, z = NULL;
    gs_status_t st = gs__nan_to(c, x, edge, &y);
    if (st == GS_OK) st = gs__red(c, is_max ? GS_RED_ARGMAX : GS_RED_ARGMIN, y, &i1);
    if (st == GS_OK) st = gs__red(c, is_max ? GS_RED_MAX : GS_RED_MIN, y, &m);
    /* when every non-NaN element of a slice is the edge value, i1 may point at a NaN: the
     * answer is the first element equal to the edge (NaN compares unequal) */
    if (st == GS_OK) st = gs__bins(c, GS_BINARY_EQ, x, edge, &e);
    if (st == GS_OK) st = gs__red(c, GS_RED_ARGMAX, e, &i2);
    if (st == GS_OK) st = gs__bins(c, GS_BINARY_EQ, m, edge, &me);
    if (st == GS_OK) {
        gs_array_h h = NULL;
        st = gs_array_where(me, i2, i1, &h);
        st = gs__keep(c, st, h, &sel);
    }
    if (st == GS_OK) st = gs__count_nonnan(c, x, &n);
    if (st == GS_OK) st = gs__bins(c, GS_BINARY_EQ, n, 0.0, &z);
    if (st == GS_OK) st = gs__where_fill(c, z, -1.0, sel, r);
    return st;
}

/* Reduced axes of an ndim-@a nd operand as a bit mask. Called after a reduction over the same
 * axes succeeded, so they are valid. */
static uint32_t gs__mask(const gs__cx_t *c, int nd)
{
    uint32_t seen = 0;
    if (c->naxes == 0) seen = nd > 0 ? (1u << nd) - 1 : 0;
    for (int i = 0; i < c->naxes; i++)
        seen |= 1u << (c->axes[i] < 0 ? c->axes[i] + nd : c->axes[i]);
    return seen;
}

/* Elements in each slice of @a a the reduction sees (after a successful reduction). */
static double gs__nreduced(const gs__cx_t *c, gs_array_h a)
{
    int64_t shape[GS_MAX_NDIM];
    const int nd = gs_array_ndim(a);
    const uint32_t m = gs__mask(c, nd);
    double n = 1.0;
    gs_array_shape(a, shape);
    for (int ax = 0; ax < nd; ax++)
        if (m & (1u << ax)) n *= (double)shape[ax];
    return n;
}

/* Put the reduced axes of an ndim-@a nd operand back as length-1 axes. */
static gs_status_t gs__keepdims(gs__cx_t *c, int nd, gs_array_h x, gs_array_h *r)
{
    const uint32_t seen = gs__mask(c, nd);
    *r = x;
    for (int ax = 0; ax < nd; ax++) {   /* lowest first, as gs_array_reduce_axes() */
        gs_array_h h = NULL;
        gs_status_t st;
        if (!(seen & (1u << ax))) continue;
        st = gs_array_stack(1, r, ax, &h);
        if ((st = gs__keep(c, st, h, r)) != GS_OK) return st;
    }
    return GS_OK;
}

/* sum over the slices divided by their non-NaN counts, in float64 (nanmean); the counts in
 * *n_p. */
static gs_status_t gs__nanmean64(gs__cx_t *c, gs_array_h x, gs_array_h *r, gs_array_h *n_p)
{
    gs_array_h xf = NULL, y = NULL, s = NULL;
    gs_status_t st = gs__cast(c, x, GS_DTYPE_FLOAT64, &xf);
    if (st == GS_OK) st = gs__nan_to(c, xf, 0.0, &y);
    if (st == GS_OK) st = gs__red(c, GS_RED_SUM, y, &s);
    if (st == GS_OK) st = gs__count_nonnan(c, x, n_p);
    if (st == GS_OK) st = gs__bin(c, GS_BINARY_DIV, s, *n_p, r);
    return st;
}

/* nanvar (population variance scaled by n / (n - ddof)) of a float array, in float64. */
static gs_status_t gs__nanvar64(gs__cx_t *c, gs_array_h x, double ddof, gs_array_h *r)
{
    const int nd = gs_array_ndim(x);
    gs_array_h m = NULL, n = NULL, mk = NULL, xf = NULL, d = NULL, d2 = NULL;
    gs_array_h nm = NULL, q = NULL, ss = NULL, den = NULL, bad = NULL, v = NULL;
    gs_status_t st = gs__nanmean64(c, x, &m, &n);
    if (st == GS_OK) st = gs__keepdims(c, nd, m, &mk);
    if (st == GS_OK) st = gs__cast(c, x, GS_DTYPE_FLOAT64, &xf);
    if (st == GS_OK) st = gs__bin(c, GS_BINARY_SUB, xf, mk, &d);
    if (st == GS_OK) st = gs__bin(c, GS_BINARY_MUL, d, d, &d2);
    if (st == GS_OK) st = gs__un(c, GS_UNARY_ISNAN, x, &nm);
    if (st == GS_OK) st = gs__where_fill(c, nm, 0.0, d2, &q);
    if (st == GS_OK) st = gs__red(c, GS_RED_SUM, q, &ss);
    if (st == GS_OK) st = gs__bins(c, GS_BINARY_SUB, n, ddof, &den);
    if (st == GS_OK) st = gs__bins(c, GS_BINARY_LE, den, 0.0, &bad);
    if (st == GS_OK) st = gs__bin(c, GS_BINARY_DIV, ss, den, &v);
    if (st == GS_OK) st = gs__where_fill(c, bad, NAN, v, r);
    return st;
}

static gs_status_t gs__build(gs__cx_t *c, gs_credop_t op, gs_array_h a, double ddof,
                             gs_array_h *r)
{
    const gs_dtype_t dt = (gs_dtype_t)gs_array_dtype(a);
    const int fl = gs__isfloat(dt);
    gs_array_h b = NULL, k = NULL, y = NULL;
    gs_status_t st;

    switch (op) {
    case GS_CRED_COUNT_NONZERO:
    case GS_CRED_ANY:
        st = gs__cast(c, a, GS_DTYPE_BOOL, &b);
        if (st == GS_OK) st = gs__red(c, GS_RED_SUM, b, op == GS_CRED_ANY ? &k : r);
        if (st == GS_OK && op == GS_CRED_ANY) st = gs__bins(c, GS_BINARY_GT, k, 0.0, r);
        return st;
    case GS_CRED_ALL:
        st = gs__un(c, GS_UNARY_LOGICAL_NOT, a, &b);
        if (st == GS_OK) st = gs__red(c, GS_RED_SUM, b, &k);
        if (st == GS_OK) st = gs__bins(c, GS_BINARY_EQ, k, 0.0, r);
        return st;
    case GS_CRED_NANSUM:
    case GS_CRED_NANPROD: {
        const gs_redop_t ro = op == GS_CRED_NANSUM ? GS_RED_SUM : GS_RED_PROD;
        if (!fl) return gs__red(c, ro, a, r);
        st = gs__nan_to(c, a, op == GS_CRED_NANSUM ? 0.0 : 1.0, &y);
        return st == GS_OK ? gs__red(c, ro, y, r) : st;
    }
    case GS_CRED_NANMIN:
    case GS_CRED_NANMAX:
        if (!fl) return gs__red(c, op == GS_CRED_NANMAX ? GS_RED_MAX : GS_RED_MIN, a, r);
        return gs__nanext(c, op == GS_CRED_NANMAX, a, r);
    case GS_CRED_NANARGMIN:
    case GS_CRED_NANARGMAX:
        if (!fl) return gs__red(c, op == GS_CRED_NANARGMAX ? GS_RED_ARGMAX : GS_RED_ARGMIN, a, r);
        return gs__nanarg(c, op == GS_CRED_NANARGMAX, a, r);
    case GS_CRED_NANMEAN:
        if (!fl) { /* sum / N: exact over a tuple of axes too (MEAN there is a mean of means) */
            st = gs__red(c, GS_RED_SUM, a, &k);
            if (st == GS_OK) st = gs__cast(c, k, GS_DTYPE_FLOAT64, &y);
            if (st == GS_OK) st = gs__bins(c, GS_BINARY_DIV, y, gs__nreduced(c, a), r);
            return st;
        }
        st = gs__nanmean64(c, a, &y, &k);
        break;
    default: /* NANVAR, NANSTD */
        if (!fl) return gs__red(c, op == GS_CRED_NANSTD ? GS_RED_STD : GS_RED_VAR, a, r);
        st = gs__nanvar64(c, a, ddof, &y);
        if (st == GS_OK && op == GS_CRED_NANSTD) st = gs__un(c, GS_UNARY_SQRT, y, &y);
        break;
    }
    /* float64 results of nanmean, nanvar, nanstd: rounded once to the input's float dtype */
    if (st == GS_OK && dt != GS_DTYPE_FLOAT64) return gs__cast(c, y, dt, r);
    if (st == GS_OK) *r = y;
    return st;
}

gs_status_t gs_array_reduce_composite(gs_credop_t op, gs_array_h a, int naxes, const int *axes,
                                      int keepdims, const gs_reduce_params_t *params,
                                      gs_array_h *out_p)
{
    gs__cx_t c;
    gs_array_h r = NULL;
    gs_dtype_t want;
    double ddof = 0.0;
    gs_status_t st;

    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: operand is NULL",
                                       gs_credop_name(op));
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: out_p is NULL",
                                           gs_credop_name(op));
    if ((st = gs_dtype_composite_result(op, (gs_dtype_t)gs_array_dtype(a), &want)) != GS_OK)
        return st;
    if (params != NULL && (params->field_mask & GS_REDUCE_FIELD_DDOF)) {
        if (op != GS_CRED_NANVAR && op != GS_CRED_NANSTD)
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s takes no ddof (only nanvar and "
                                "nanstd do)", gs_credop_name(op));
        ddof = params->ddof;
    }
    memset(&c, 0, sizeof(c));
    c.naxes = naxes;
    c.axes = axes;
    c.p = params;
    st = gs__build(&c, op, a, ddof, &r);
    if (st == GS_OK && keepdims) st = gs__keepdims(&c, gs_array_ndim(a), r, &r);
    if (st == GS_OK && gs_array_dtype(r) != (int)want) /* the tables above and the graph agree */
        st = gs_error_set(GS_ERR_INTERNAL, "%s of %s gave %s, not %s", gs_credop_name(op),
                          gs_dtype_name((gs_dtype_t)gs_array_dtype(a)),
                          gs_dtype_name((gs_dtype_t)gs_array_dtype(r)), gs_dtype_name(want));
    if (st == GS_OK) r = gs_array_retain(r);
    for (int i = 0; i < c.n; i++) gs_array_release(c.h[i]);
    if (st != GS_OK) {
        if (st == GS_ERR_INVALID_PARAM) { /* name the operation in front of the cause */
            char why[256];
            snprintf(why, sizeof(why), "%s", gs_last_error());
            return gs_error_set(st, "%s of %s: %s", gs_credop_name(op),
                                gs_dtype_name((gs_dtype_t)gs_array_dtype(a)), why);
        }
        return st;
    }
    *out_p = r;
    return GS_OK;
}
