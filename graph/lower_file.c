/* Lowering of FILE nodes (graph/file_int.h): READ to a FILE layer over the node's grid (no
 * inputs); WRITE to a FILE layer over the written array's grid whose block b reads that
 * array's block b; COMMIT to a one-block FILE layer reading the byte total. */
#include "graph/file_int.h"
#include "graph/lower_int.h"

#include <stdio.h>

gs_status_t gs__lw_build_file(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const struct gs_array *n = e->n;
    const gs_grid_t *grid = n->u.file->op == GS__FILE_WRITE ? &n->in[0]->grid : &n->grid;
    gs_layer_t *l = gs__layer_new(GS_LAYER_FILE);
    uint64_t nb, *xoff = NULL;
    lw_ref_t *refs = NULL;
    gs_status_t st;
    int64_t li;
    if (l == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    l->u.file.spec = gs__fspec_dup(n->u.file);
    if (l->u.file.spec == NULL || gs_grid_copy(&l->grid, grid) != GS_OK) {
        gs_layer_free(l);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    }
    if (gs__layer_check(l) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        gs_layer_free(l);
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s", msg);
    }
    if ((st = gs__lw_add_layer(w, l, &li)) != GS_OK) return st;
    if (n->u.file->op != GS__FILE_READ) {
        nb = gs_grid_nblocks(grid);
        xoff = gs_malloc((size_t)(nb + 1) * sizeof(*xoff), "file inputs");
        refs = gs_malloc((size_t)(nb ? nb : 1) * sizeof(*refs), "file inputs");
        if (xoff == NULL || refs == NULL) {
            gs_free(xoff);
            gs_free(refs);
            return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
        }
        for (uint64_t b = 0; b < nb; b++) {
            xoff[b] = b;
            refs[b] = gs__lw_node_ref(w, e->in[0], b);
        }
        xoff[nb] = nb;
        if ((st = gs__lw_set_inputs(w, li, xoff, refs)) != GS_OK) return st;
    }
    *idx_p = li;
    return GS_OK;
}
