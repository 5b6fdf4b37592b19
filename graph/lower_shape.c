/* Lowering of RESHAPE nodes (array_shape.c) to COPY layers.
 *
 * gs_array_reshape() rechunks its input first (as Dask does) so that every output block holds
 * exactly the elements of one input block, in the same row-major order: the block's bytes are
 * already what the output block needs, only its shape differs. Each output block is therefore
 * one COPY piece reading its input block with the contiguous strides of the output block's own
 * shape (offset = the element's row-major position in the block = its position in the input
 * block). The lowering finds the input block from the output block's first element and checks
 * that it has the same element count and starts at the same flat index (GS_ERR_INTERNAL
 * otherwise: the node's grids were built wrong). */
#include "graph/copy_int.h"
#include "graph/lower_int.h"

#include <stdio.h>
#include <string.h>

#define LS_NOMEM() gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering")

/* Row-major flat index of coordinates @a c in an array of @a shape. */
static int64_t ls_flat(int32_t nd, const int64_t *shape, const int64_t *c)
{
    int64_t f = 0;
    for (int32_t a = 0; a < nd; a++) f = f * shape[a] + c[a];
    return f;
}

gs_status_t gs__lw_build_reshape(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const gs_grid_t *og = &e->n->grid, *ig = &e->n->in[0]->grid;
    const uint64_t nb = gs_grid_nblocks(og);
    uint64_t *xoff = NULL;
    lw_ref_t *xrefs = NULL;
    int64_t *ioff = NULL, *poff = NULL, *lens = NULL;
    gs__cpiece_t *pieces = NULL;
    gs_layer_t *l = NULL;
    gs_status_t st;
    int64_t li;

    xoff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(uint64_t)), "reshape xoff");
    xrefs = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(lw_ref_t)), "reshape inputs");
    ioff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "reshape input offsets");
    poff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "reshape piece offsets");
    lens = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "reshape input lengths");
    pieces = gs_calloc((size_t)nb + 1, sizeof(gs__cpiece_t), "reshape pieces");
    if (xoff == NULL || xrefs == NULL || ioff == NULL || poff == NULL || lens == NULL ||
        pieces == NULL)
        goto nomem;
    xoff[0] = 0;
    ioff[0] = poff[0] = 0;
    for (uint64_t b = 0; b < nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], ic[GS_MAX_NDIM], ib[GS_MAX_NDIM];
        int64_t istart[GS_MAX_NDIM], ishape[GS_MAX_NDIM], n, f, s = 1;
        gs__cpiece_t *p = &pieces[b];
        gs_grid_block_region(og, b, start, shape);
        n = gs_region_size(og->ndim, shape);
        gs_assert_always(n > 0);   /* empty reshapes are built without a RESHAPE node */
        f = ls_flat(og->ndim, og->shape, start);
        for (int32_t a = ig->ndim - 1; a >= 0; a--) {
            ic[a] = ig->shape[a] > 0 ? f % ig->shape[a] : 0;
            f = ig->shape[a] > 0 ? f / ig->shape[a] : 0;
        }
        for (int32_t a = 0; a < ig->ndim; a++) ib[a] = gs__grid_find(ig, (int)a, ic[a]);
        uint64_t iblk = gs__grid_block_index(ig, ib);
        gs_grid_block_region(ig, iblk, istart, ishape);
        if (gs_region_size(ig->ndim, ishape) != n ||
            ls_flat(ig->ndim, ig->shape, istart) != ls_flat(og->ndim, og->shape, start))
        {
            st = gs_error_set(GS_ERR_INTERNAL,
                              "reshape lowering: output block %llu is not one input block",
                              (unsigned long long)b);
            goto err;
        }
        xrefs[b] = gs__lw_node_ref(w, e->in[0], iblk);
        lens[b] = n;
        p->slot = 0;
        p->base = 0;
        for (int32_t a = og->ndim - 1; a >= 0; a--) {
            p->stride[a] = s;
            p->size[a] = shape[a];
            s *= shape[a];
        }
        xoff[b + 1] = b + 1;
        ioff[b + 1] = (int64_t)b + 1;
        poff[b + 1] = (int64_t)b + 1;
    }
    l = gs__layer_new(GS_LAYER_COPY);
    if (l == NULL || gs_grid_copy(&l->grid, og) != GS_OK) goto nomem;
    l->u.cp.dtype = e->n->dtype;
    l->u.cp.ioff = ioff;
    l->u.cp.poff = poff;
    l->u.cp.in_len = lens;
    l->u.cp.pieces = pieces;
    ioff = poff = lens = NULL;
    pieces = NULL;
    if (gs__layer_check(l) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        gs_layer_free(l);
        l = NULL;
        st = gs_error_set(GS_ERR_INTERNAL, "lowering built a bad reshape layer: %s", msg);
        goto err;
    }
    st = gs__lw_add_layer(w, l, &li);   /* frees l on failure */
    l = NULL;
    if (st != GS_OK) goto err;
    st = gs__lw_set_inputs(w, li, xoff, xrefs);   /* takes both, also on failure */
    xoff = NULL;
    xrefs = NULL;
    if (st != GS_OK) goto err;
    *idx_p = li;
    return GS_OK;
nomem:
    st = LS_NOMEM();
err:
    if (l != NULL) gs_layer_free(l);
    gs_free(xoff);
    gs_free(xrefs);
    gs_free(ioff);
    gs_free(poff);
    gs_free(lens);
    gs_free(pieces);
    return st;
}
