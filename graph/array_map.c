/* gs_array_map_blocks (gsched/array.h; stencil_int.h): one MAPBLOCKS node over 1..2 inputs
 * whose blocks line up with the output's. The node's dtype is the output's (the caller's);
 * every input keeps its own. */
#include "graph/stencil_int.h"

#include <string.h>

static gs_status_t gs__map_node(const gs__ukernel_t *uk, int nin, gs_array_h const *inputs,
                                int32_t dtype, const gs_grid_t *g, gs_array_h *out_p)
{
    struct gs_array *n;
    gs_status_t st;
    for (int k = 0; k < nin; k++) {
        if (inputs[k] == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "map_blocks: input %d is NULL", k);
        if (inputs[k]->grid.ndim != g->ndim)
            return gs_error_set(GS_ERR_INVALID_PARAM, "map_blocks: input %d has %d axes, the "
                                "output %d", k, (int)inputs[k]->grid.ndim, (int)g->ndim);
        for (int32_t j = 0; j < g->ndim; j++)
            if (inputs[k]->grid.nchunks[j] != g->nchunks[j])
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "map_blocks: input %d has %lld chunks on axis %d, the output "
                                    "%lld (rechunk it so that its blocks line up)", k,
                                    (long long)inputs[k]->grid.nchunks[j], (int)j,
                                    (long long)g->nchunks[j]);
        if ((uk->flags & GS_KERNEL_ELEMENTWISE) && !gs__grid_equal(&inputs[k]->grid, g))
            return gs_error_set(GS_ERR_INVALID_PARAM, "map_blocks: input %d of an elementwise "
                                "kernel must have the output's shape and chunks", k);
    }
    if (uk->flags & ~GS_KERNEL_ELEMENTWISE)
        return gs_error_set(GS_ERR_INVALID_PARAM, "map_blocks: unknown kernel flags 0x%x",
                            (unsigned)uk->flags);
    n = gs__array_node_new(GS__NODE_MAPBLOCKS, g->ndim);
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    if (gs_grid_copy(&n->grid, g) != GS_OK) {
        gs__array_node_free(n);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a map_blocks node");
    }
    if ((st = gs__ukernel_copy(uk->library, uk->symbol, uk->arg, uk->arg_len, &n->u.ub)) != GS_OK ||
        (st = gs__ukernel_set_cuda(n->u.ub, uk->cuda_src)) != GS_OK ||
        (st = gs__array_node_finish(n)) != GS_OK) {
        gs__array_node_free(n);
        return st;
    }
    n->u.ub->flags = uk->flags;
    n->dtype = dtype;
    n->ninputs = nin;
    for (int k = 0; k < nin; k++) n->in[k] = gs_array_retain(inputs[k]);
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_map_blocks(const gs_user_kernel_t *kernel, int nin, const gs_array_h *inputs,
                                int ndim, const int64_t *shape, const int64_t *chunks,
                                gs_array_h *out_p)
{
    return gs_array_map_blocks_dtype(kernel, nin, inputs, GS_DTYPE_FLOAT64, ndim, shape, chunks,
                                     out_p);
}

gs_status_t gs_array_map_blocks_dtype(const gs_user_kernel_t *kernel, int nin,
                                      const gs_array_h *inputs, gs_dtype_t dtype, int ndim,
                                      const int64_t *shape, const int64_t *chunks,
                                      gs_array_h *out_p)
{
    gs_array_h tmp = NULL;
    gs__ukernel_t uk;
    gs_status_t st;
    if (kernel == NULL || inputs == NULL || out_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "map_blocks: NULL argument");
    if (nin < 1 || nin > GS_KERNEL_MAX_USER_IN)
        return gs_error_set(GS_ERR_INVALID_PARAM, "map_blocks: %d inputs (1 to %d)", nin,
                            GS_KERNEL_MAX_USER_IN);
    if ((int)dtype < 0 || dtype >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "map_blocks: output dtype %d is no gs_dtype_t "
                            "(0..%d)", (int)dtype, (int)GS_DTYPE_COUNT - 1);
    if ((st = gs__ukernel_check(kernel)) != GS_OK) return st;
    /* the output grid, checked as every constructor checks it */
    if ((st = gs_array_zeros(ndim, shape, chunks, &tmp)) != GS_OK) return st;
    uk.library = (char *)(kernel->cuda_source != NULL ? GS__UKERNEL_CUDA_LIB : kernel->library);
    uk.cuda_src = (char *)kernel->cuda_source;
    uk.symbol = (char *)kernel->symbol;
    uk.arg = (uint8_t *)kernel->arg;
    if (kernel->arg_len > GS__UKERNEL_MAX_ARG) {
        gs_array_release(tmp);
        return gs_error_set(GS_ERR_INVALID_PARAM, "map_blocks: arg of %zu bytes (at most %u)",
                            kernel->arg_len, GS__UKERNEL_MAX_ARG);
    }
    uk.arg_len = (uint32_t)kernel->arg_len;
    uk.flags = kernel->flags;
    st = gs__map_node(&uk, nin, inputs, (int32_t)dtype, &tmp->grid, out_p);
    gs_array_release(tmp);
    return st;
}

gs_status_t gs__map_rebuild(const struct gs_array *n, gs_array_h a, gs_array_h b, gs_array_h *out_p)
{
    gs_array_h ins[2] = {a, b};
    return gs__map_node(n->u.ub, n->ninputs, ins, n->dtype, &n->grid, out_p);
}
