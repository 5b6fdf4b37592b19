/* Lowering of MAPBLOCKS nodes: one USER layer; block b reads block b of every input. With
 * inlined producers (an elementwise kernel under GS_LOWER_FUSE) the layer is a fused USER
 * layer (lower_fuse_user.c), built on the same tables. */
#include "graph/lower_int.h"
#include "graph/stencil_int.h"

#include <stdio.h>
#include <string.h>

gs_status_t gs__lw_user_layer_new(const lw_t *w, int64_t idx, gs_layer_t **l_p)
{
    const struct gs_array *n = w->nodes[idx].n;
    const int32_t nd = n->grid.ndim, nin = n->ninputs;
    const uint64_t nb = gs_grid_nblocks(&n->grid);
    const int64_t bw = 1 + 2 * (int64_t)nd;
    gs_layer_t *l = gs__layer_new(GS_LAYER_USER);
    gs_status_t st;
    if (l == NULL || gs_grid_copy(&l->grid, &n->grid) != GS_OK) goto nomem;
    l->u.ub.ioff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "user input offsets");
    l->u.ub.ibox = gs_malloc(gs_size_mul((size_t)nb * (size_t)nin * (size_t)bw + 1, sizeof(int64_t)),
                             "user input table");
    if (l->u.ub.ioff == NULL || l->u.ub.ibox == NULL) goto nomem;
    if ((st = gs__ukernel_copy(n->u.ub->library, n->u.ub->symbol, n->u.ub->arg, n->u.ub->arg_len,
                               &l->u.ub.user)) != GS_OK ||
        (st = gs__ukernel_set_cuda(l->u.ub.user, n->u.ub->cuda_src)) != GS_OK)
        goto err;
    l->u.ub.user->flags = n->u.ub->flags;
    l->u.ub.out_dtype = n->dtype;
    for (int32_t k = 0; k < nin; k++) l->u.ub.in_dtype[k] = n->in[k]->dtype;
    for (uint64_t b = 0; b <= nb; b++) l->u.ub.ioff[b] = (int64_t)(b * (uint64_t)nin);
    for (uint64_t b = 0; b < nb; b++)
        for (int32_t k = 0; k < nin; k++) {
            const gs_grid_t *ig = &n->in[k]->grid;
            int64_t *t = l->u.ub.ibox + ((int64_t)b * nin + k) * bw;
            int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
            gs_grid_block_region(ig, b, start, shape);
            t[0] = gs_region_size(nd, shape);
            for (int32_t j = 0; j < nd; j++) {
                t[1 + j] = shape[j];
                t[1 + nd + j] = start[j];
            }
        }
    *l_p = l;
    return GS_OK;
nomem:
    st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering map_blocks");
err:
    if (l != NULL) gs_layer_free(l);
    return st;
}

gs_status_t gs__lw_build_map_blocks(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const int32_t nin = e->n->ninputs;
    const uint64_t nb = gs_grid_nblocks(&e->n->grid);
    uint64_t *xoff = NULL;
    lw_ref_t *xrefs = NULL;
    gs_layer_t *l = NULL;
    gs_status_t st;
    int64_t li;
    for (int32_t k = 0; k < nin; k++)
        if (e->inl[k]) return gs__lw_build_user_fused(w, idx, NULL, idx_p);
    if ((st = gs__lw_user_layer_new(w, idx, &l)) != GS_OK) return st;
    xoff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(uint64_t)), "user xoff");
    xrefs = gs_malloc(gs_size_mul((size_t)nb * (size_t)nin + 1, sizeof(lw_ref_t)), "user refs");
    if (xoff == NULL || xrefs == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering map_blocks");
        goto err;
    }
    for (uint64_t b = 0; b <= nb; b++) xoff[b] = b * (uint64_t)nin;
    for (uint64_t b = 0; b < nb; b++)
        for (int32_t k = 0; k < nin; k++)
            xrefs[b * (uint64_t)nin + (uint64_t)k] = gs__lw_node_ref(w, e->in[k], b);
    if (gs__layer_check(l) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        st = gs_error_set(GS_ERR_INTERNAL, "lowering built a bad layer: %s", msg);
        goto err;
    }
    st = gs__lw_add_layer(w, l, &li);   /* frees l on failure */
    l = NULL;
    if (st != GS_OK) goto err;
    st = gs__lw_set_inputs(w, li, xoff, xrefs);   /* takes both */
    xoff = NULL;
    xrefs = NULL;
    if (st != GS_OK) goto err;
    *idx_p = li;
    return GS_OK;
err:
    if (l != NULL) gs_layer_free(l);
    gs_free(xoff);
    gs_free(xrefs);
    return st;
}
