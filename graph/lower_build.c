/* The builders of node kinds with layers of their own (matrix and data-movement kinds; the
 * lower_*.c files), by node kind: lower.c calls this for every materialised node that is not
 * blockwise, a reduction, a literal or a file. New kinds add their builder here. */
#include "graph/lower_int.h"

gs_status_t gs__lw_build_own(lw_t *w, int64_t idx, int64_t *idx_p)
{
    switch (w->nodes[idx].n->kind) {
    case GS__NODE_RECHUNK:
        return gs__lw_build_rechunk(w, idx, idx_p);
    case GS__NODE_CONCAT:
        return gs__lw_build_concat(w, idx, idx_p);
    case GS__NODE_MATMUL:
        return gs__lw_build_matmul(w, idx, idx_p);
    case GS__NODE_FACTOR:
        return gs__lw_build_factor(w, idx, idx_p);
    case GS__NODE_STENCIL:
        return gs__lw_build_stencil(w, idx, idx_p);
    case GS__NODE_MAPBLOCKS:
        return gs__lw_build_map_blocks(w, idx, idx_p);
    case GS__NODE_RESHAPE:
        return gs__lw_build_reshape(w, idx, idx_p);
    case GS__NODE_DIAG:
        return gs__lw_build_diag(w, idx, idx_p);
    case GS__NODE_SCAN:
        return gs__lw_build_scan(w, idx, idx_p);
    default:
        return gs_error_set(GS_ERR_INTERNAL, "lowering has no builder for node kind %d",
                            (int)w->nodes[idx].n->kind);
    }
}
