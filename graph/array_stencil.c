/* Neighbourhood expressions: gs_array_stencil (gsched/array.h; stencil_int.h). */
#include "graph/stencil_int.h"

#include <string.h>

gs_status_t gs_array_stencil(gs_array_h x, const double *weights, const int *radius,
                             gs_boundary_t boundary, double cval, gs_array_h *out_p)
{
    struct gs_array *n;
    gs_status_t st;
    int64_t nw = 1;
    if (x == NULL || weights == NULL || radius == NULL || out_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stencil: NULL argument");
    if (x->grid.ndim < 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stencil: needs an array of at least one axis");
    if ((int)boundary < 0 || boundary >= GS_BOUNDARY_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stencil: unknown boundary %d", (int)boundary);
    for (int32_t j = 0; j < x->grid.ndim; j++) {
        if (radius[j] < 0 || radius[j] > GS_KERNEL_MAX_WEIGHTS)
            return gs_error_set(GS_ERR_INVALID_PARAM, "stencil: radius %d of axis %d out of range",
                                radius[j], (int)j);
        nw *= 2 * (int64_t)radius[j] + 1;
        if (nw > GS_KERNEL_MAX_WEIGHTS)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "stencil: more than %d weights (prod(2 radius + 1))",
                                GS_KERNEL_MAX_WEIGHTS);
        if ((boundary == GS_BOUNDARY_REFLECT || boundary == GS_BOUNDARY_PERIODIC) &&
            radius[j] > x->grid.shape[j])
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "stencil: radius %d exceeds axis %d of length %lld (%s boundary)",
                                radius[j], (int)j, (long long)x->grid.shape[j],
                                boundary == GS_BOUNDARY_REFLECT ? "reflect" : "periodic");
    }
    n = gs__array_node_new(GS__NODE_STENCIL, x->grid.ndim);
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    n->u.st.weights = gs_malloc((size_t)nw * sizeof(double), "stencil weights");
    if (n->u.st.weights == NULL || gs_grid_copy(&n->grid, &x->grid) != GS_OK) {
        gs__array_node_free(n);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a stencil node");
    }
    memcpy(n->u.st.weights, weights, (size_t)nw * sizeof(double));
    n->u.st.nweights = (int32_t)nw;
    for (int32_t j = 0; j < x->grid.ndim; j++) n->u.st.radius[j] = radius[j];
    n->u.st.boundary = (int32_t)boundary;
    n->u.st.cval = boundary == GS_BOUNDARY_CONSTANT ? cval : 0.0;
    if ((st = gs__array_node_finish(n)) != GS_OK) {
        gs__array_node_free(n);
        return st;
    }
    n->ninputs = 1;
    n->in[0] = gs_array_retain(x);
    *out_p = n;
    return GS_OK;
}

gs_status_t gs__stencil_rebuild(const struct gs_array *n, gs_array_h a, gs_array_h *out_p)
{
    int radius[GS_MAX_NDIM];
    for (int32_t j = 0; j < n->grid.ndim; j++) radius[j] = n->u.st.radius[j];
    return gs_array_stencil(a, n->u.st.weights, radius, (gs_boundary_t)n->u.st.boundary,
                            n->u.st.cval, out_p);
}
