/* Reductions over a tuple of axes and with kept dimensions (gs_array_reduce_axes()), built
 * from the one-axis and all-axes reductions of array.c:
 *   - SUM, PROD, MIN, MAX: one axis after the other, the highest first (so the lower axes keep their
 *     numbers);
 *   - MEAN: the mean of means (every group along an axis has the same size);
 *   - VAR, STD: the law of total variance. With m_k, v_k the mean and population variance
 *     after reducing k axes: m_{k+1} = mean(m_k), v_{k+1} = mean(v_k) + var(m_k) over the next
 *     axis; the result is v * N / (N - ddof) with N the number of elements reduced (NaN when
 *     N <= ddof, as the one-axis reduction gives), std its square root;
 *   - ARGMIN, ARGMAX: one axis or all of them (NumPy has no tuple form).
 * A tuple holding every axis is the all-axes reduction (one tree). Kept axes are put back as
 * length-1 axes by gs_array_stack() of the one result. */
#include "graph/graph_internal.h"

#include <math.h>
#include <stdlib.h>

/* One reduction of @a a over @a axis (-1: all axes) with the caller's split_every (@a p, may
 * be NULL) and @a ddof. */
static gs_status_t gs__reduce_one(gs_redop_t op, gs_array_h a, int axis,
                                  const gs_reduce_params_t *p, double ddof, gs_array_h *out_p)
{
    gs_reduce_params_t q = {0};
    q.field_mask = GS_REDUCE_FIELD_DDOF;
    if (p != NULL && (p->field_mask & GS_REDUCE_FIELD_SPLIT_EVERY)) {
        q.field_mask |= GS_REDUCE_FIELD_SPLIT_EVERY;
        q.split_every = p->split_every;
    }
    q.ddof = ddof;
    if (axis >= 0) {
        q.field_mask |= GS_REDUCE_FIELD_AXIS;
        q.axis = axis;
    }
    return gs_array_reduce(op, a, &q, out_p);
}

/* Replace *x with OP(*x, y) (y borrowed), releasing the old *x. */
static gs_status_t gs__fold(gs_binop_t op, gs_array_h *x, gs_array_h y)
{
    gs_array_h r;
    gs_status_t st = gs_array_binary(op, *x, y, &r);
    if (st != GS_OK) return st;
    gs_array_release(*x);
    *x = r;
    return GS_OK;
}

/* Total variance over @a axes[0..n) (descending): the population variance in *var_p. */
static gs_status_t gs__total_var(gs_array_h a, const int *axes, int n,
                                 const gs_reduce_params_t *p, gs_array_h *var_p)
{
    gs_array_h m = NULL, v = NULL, vm = NULL, mm = NULL, vv = NULL;
    gs_status_t st;
    if ((st = gs__reduce_one(GS_RED_MEAN, a, axes[0], p, 0.0, &m)) != GS_OK) goto err_release;
    if ((st = gs__reduce_one(GS_RED_VAR, a, axes[0], p, 0.0, &v)) != GS_OK) goto err_release;
    for (int k = 1; k < n; k++) {
        if ((st = gs__reduce_one(GS_RED_MEAN, v, axes[k], p, 0.0, &vm)) != GS_OK) goto err_release;
        if ((st = gs__reduce_one(GS_RED_VAR, m, axes[k], p, 0.0, &vv)) != GS_OK) goto err_release;
        if ((st = gs__reduce_one(GS_RED_MEAN, m, axes[k], p, 0.0, &mm)) != GS_OK) goto err_release;
        if ((st = gs__fold(GS_BINARY_ADD, &vm, vv)) != GS_OK) goto err_release;
        gs_array_release(v);
        gs_array_release(m);
        gs_array_release(vv);
        v = vm;
        m = mm;
        vm = mm = vv = NULL;
    }
    gs_array_release(m);
    *var_p = v;
    return GS_OK;
err_release:
    gs_array_release(m);
    gs_array_release(v);
    gs_array_release(vm);
    gs_array_release(mm);
    gs_array_release(vv);
    return st;
}

static int gs__int_desc(const void *x, const void *y)
{
    return *(const int *)y - *(const int *)x;
}

gs_status_t gs_array_reduce_axes(gs_redop_t op, gs_array_h a, int naxes, const int *axes_in,
                                 int keepdims, const gs_reduce_params_t *p, gs_array_h *out_p)
{
    int nd, n = 0, axes[GS_MAX_NDIM];
    uint32_t seen = 0;
    double ddof = 0.0;
    gs_array_h r = NULL;
    gs_status_t st;

    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "reduce_axes: operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "reduce_axes: out_p is NULL");
    if ((int)op < 0 || op >= GS_RED_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown reduction %d", (int)op);
    nd = a->grid.ndim;
    if (p != NULL) {
        if (p->field_mask & GS_REDUCE_FIELD_AXIS)
            return gs_error_set(GS_ERR_INVALID_PARAM, "reduce_axes: the axes come in "
                                                      "naxes/axes; GS_REDUCE_FIELD_AXIS must "
                                                      "not be set");
        if (p->field_mask & GS_REDUCE_FIELD_DDOF) ddof = p->ddof;
        if (!isfinite(ddof)) return gs_error_set(GS_ERR_INVALID_PARAM, "ddof is not finite");
    }
    if (naxes < 0 || naxes > nd)
        return gs_error_set(GS_ERR_INVALID_PARAM, "reduce_axes: naxes %d outside 0..%d (the "
                                                  "array's ndim)", naxes, nd);
    if (naxes > 0 && axes_in == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "reduce_axes: axes is NULL");
    if (naxes == 0 && axes_in != NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "reduce_axes: naxes 0 (every axis) takes axes "
                                                  "NULL");
    for (int i = 0; i < naxes; i++) {
        int ax = axes_in[i];
        if (ax < -nd || ax >= nd)
            return gs_error_set(GS_ERR_INVALID_PARAM, "reduce_axes: axes[%d] = %d out of range "
                                                      "for ndim %d", i, ax, nd);
        if (ax < 0) ax += nd;
        if (seen & (1u << ax))
            return gs_error_set(GS_ERR_INVALID_PARAM, "reduce_axes: axis %d repeated", ax);
        seen |= 1u << ax;
        axes[n++] = ax;
    }
    if (naxes == 0) {
        for (int ax = 0; ax < nd; ax++) axes[n++] = ax;
        seen = nd > 0 ? (1u << nd) - 1 : 0;
    }
    qsort(axes, (size_t)n, sizeof(int), gs__int_desc);

    if (n == nd || n == 1) {
        st = gs__reduce_one(op, a, n == nd ? -1 : axes[0], p, ddof, &r);
    } else if (op == GS_RED_ARGMIN || op == GS_RED_ARGMAX) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s over %d of %d axes: it takes one axis or "
                                                  "all of them, as in NumPy",
                            op == GS_RED_ARGMIN ? "argmin" : "argmax", n, nd);
    } else if (op == GS_RED_VAR || op == GS_RED_STD) {
        double cnt = 1.0;
        for (int k = 0; k < n; k++) cnt *= (double)a->grid.shape[axes[k]];
        st = gs__total_var(a, axes, n, p, &r);
        if (st == GS_OK) {
            gs_array_h s;
            double f = cnt > ddof ? cnt / (cnt - ddof) : NAN;
            if (cnt == 0.0) f = NAN;
            st = gs_array_binary_array_scalar(GS_BINARY_MUL, r, f, &s);
            gs_array_release(r);
            r = st == GS_OK ? s : NULL;
        }
        if (st == GS_OK && op == GS_RED_STD) {
            gs_array_h s;
            st = gs_array_unary(GS_UNARY_SQRT, r, &s);
            gs_array_release(r);
            r = st == GS_OK ? s : NULL;
        }
    } else {
        st = gs__reduce_one(op, a, axes[0], p, ddof, &r);
        for (int k = 1; k < n && st == GS_OK; k++) {
            gs_array_h s;
            st = gs__reduce_one(op, r, axes[k], p, ddof, &s);
            gs_array_release(r);
            r = st == GS_OK ? s : NULL;
        }
    }
    if (st != GS_OK) {
        gs_array_release(r);
        return st;
    }
    for (int ax = 0; keepdims && ax < nd; ax++) {   /* put the reduced axes back, lowest first */
        gs_array_h s;
        if (!(seen & (1u << ax))) continue;
        if ((st = gs_array_stack(1, &r, ax, &s)) != GS_OK) {
            gs_array_release(r);
            return st;
        }
        gs_array_release(r);
        r = s;
    }
    *out_p = r;
    return GS_OK;
}
