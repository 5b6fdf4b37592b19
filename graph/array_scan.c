/* gs_array_cumulative (gsched/array.h; scan_int.h): the SCAN node, its result dtype, and its
 * rebuild for slice pushdown. */
#include "graph/scan_int.h"

#include <string.h>

gs_status_t gs_dtype_scan_result(gs_scan_op_t op, gs_dtype_t a, gs_dtype_t dtype,
                                 gs_dtype_t *out_p)
{
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "scan result: out_p is NULL");
    if ((int)op < 0 || op >= GS_SCAN_OP_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "scan: unknown operation %d", (int)op);
    if ((int)a < 0 || a >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unknown input dtype %d",
                            op == GS_SCAN_SUM ? "cumsum" : "cumprod", (int)a);
    if (dtype != GS_DTYPE_AUTO) {
        if ((int)dtype < 0 || dtype >= GS_DTYPE_COUNT)
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s of %s: unknown dtype %d (a gs_dtype_t "
                                "or GS_DTYPE_AUTO)", op == GS_SCAN_SUM ? "cumsum" : "cumprod",
                                gs_dtype_name(a), (int)dtype);
        *out_p = dtype;
        return GS_OK;
    }
    switch (a) {
    case GS_DTYPE_BOOL: case GS_DTYPE_UINT8: case GS_DTYPE_INT32: case GS_DTYPE_INT64:
        *out_p = GS_DTYPE_INT64;
        break;
    default:
        *out_p = a;
        break;
    }
    return GS_OK;
}

/* The SCAN node over @a x (ndim >= 1, axis in range), of dtype @a dt. */
static gs_status_t gs__scan_node(gs_array_h x, int32_t op, int32_t axis, gs_dtype_t dt,
                                 gs_array_h *out_p)
{
    struct gs_array *n = gs__array_node_new(GS__NODE_SCAN, x->grid.ndim);
    gs_status_t st;
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    if (gs_grid_copy(&n->grid, &x->grid) != GS_OK) {
        gs__array_node_free(n);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a scan node");
    }
    if ((st = gs__array_node_finish(n)) != GS_OK) {
        gs__array_node_free(n);
        return st;
    }
    n->dtype = (int32_t)dt;
    n->u.scan.op = op;
    n->u.scan.axis = axis;
    n->ninputs = 1;
    n->in[0] = gs_array_retain(x);
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_cumulative(gs_array_h x, gs_scan_op_t op, int axis, gs_dtype_t dtype,
                                gs_array_h *out_p)
{
    const char *name = op == GS_SCAN_PROD ? "cumprod" : "cumsum";
    gs_array_h flat = NULL;
    gs_dtype_t dt;
    gs_status_t st;
    int nd;
    if (x == NULL || out_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: NULL argument", name);
    if ((st = gs_dtype_scan_result(op, (gs_dtype_t)x->dtype, dtype, &dt)) != GS_OK) return st;
    nd = x->grid.ndim;
    /* NumPy: a 0-d array with an axis is scanned as the 1-d array of its element */
    if (axis < -(nd > 0 ? nd : 1) || axis >= (nd > 0 ? nd : 1))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: axis %d is out of bounds for an array "
                            "of %d dimension%s", name, axis, nd, nd == 1 ? "" : "s");
    if (axis < 0) axis += nd > 0 ? nd : 1;
    if (nd == 0) {
        const int64_t one = 1;
        if ((st = gs_array_reshape(x, 1, &one, &flat)) != GS_OK) return st;
        x = flat;
    }
    st = gs__scan_node(x, (int32_t)op, (int32_t)axis, dt, out_p);
    gs_array_release(flat);
    return st;
}

gs_status_t gs_array_cumsum(gs_array_h x, int axis, gs_array_h *out_p)
{
    return gs_array_cumulative(x, GS_SCAN_SUM, axis, GS_DTYPE_AUTO, out_p);
}

gs_status_t gs_array_cumprod(gs_array_h x, int axis, gs_array_h *out_p)
{
    return gs_array_cumulative(x, GS_SCAN_PROD, axis, GS_DTYPE_AUTO, out_p);
}

gs_status_t gs__scan_rebuild(const struct gs_array *n, gs_array_h a, gs_array_h *out_p)
{
    return gs__scan_node(a, n->u.scan.op, n->u.scan.axis, (gs_dtype_t)n->dtype, out_p);
}
