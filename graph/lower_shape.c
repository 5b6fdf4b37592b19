/* Lowering of RESHAPE and DIAG nodes (array_shape.c) to COPY layers with one input and one
 * piece per output block.
 *
 * RESHAPE: gs_array_reshape() rechunks its input first (as Dask does) so that every output
 * block holds exactly the elements of one input block, in the same row-major order: the
 * block's bytes are already what the output block needs, only its shape differs. The piece
 * reads the input block with the contiguous strides of the output block's own shape (offset =
 * the element's row-major position in the block = its position in the input block). The
 * lowering finds the input block from the output block's first element and checks that it has
 * the same element count and starts at the same flat index (GS_ERR_INTERNAL otherwise: the
 * node's grids were built wrong). Both grids list the same flat ranges in ascending order, so
 * output block b is input block b; when every consumer of the node reads it through a fused
 * kernel (which addresses a chunk through the node's own grid), no layer is built: the node's blocks are its input's blocks (ls_alias), copied by no one.
 *
 * DIAG: output block b is the diagonal's run [t0, t1), which lies inside one input block (the
 * node's grid cuts the diagonal at every row and column chunk boundary): one 1-D piece starting
 * at (t0 + roff, t0 + coff) with stride (the block's row length + 1). */
#include "graph/copy_int.h"
#include "graph/lower_int.h"

#include <stdio.h>
#include <string.h>

/* Per-block tables of a COPY layer with one input and one piece per block. */
typedef struct ls_tabs {
    uint64_t nb;
    uint64_t *xoff;
    lw_ref_t *xrefs;
    int64_t *ioff, *poff, *lens;
    gs__cpiece_t *pieces;
} ls_tabs_t;

static void ls_free(ls_tabs_t *t)
{
    gs_free(t->xoff);
    gs_free(t->xrefs);
    gs_free(t->ioff);
    gs_free(t->poff);
    gs_free(t->lens);
    gs_free(t->pieces);
    memset(t, 0, sizeof(*t));
}

static gs_status_t ls_alloc(ls_tabs_t *t, uint64_t nb)
{
    const size_t n = (size_t)nb + 1;
    memset(t, 0, sizeof(*t));
    t->nb = nb;
    t->xoff = gs_malloc(gs_size_mul(n, sizeof(uint64_t)), "copy xoff");
    t->xrefs = gs_malloc(gs_size_mul(n, sizeof(lw_ref_t)), "copy inputs");
    t->ioff = gs_malloc(gs_size_mul(n, sizeof(int64_t)), "copy input offsets");
    t->poff = gs_malloc(gs_size_mul(n, sizeof(int64_t)), "copy piece offsets");
    t->lens = gs_malloc(gs_size_mul(n, sizeof(int64_t)), "copy input lengths");
    t->pieces = gs_calloc(n, sizeof(gs__cpiece_t), "copy pieces");
    if (t->xoff == NULL || t->xrefs == NULL || t->ioff == NULL || t->poff == NULL ||
        t->lens == NULL || t->pieces == NULL) {
        ls_free(t);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    }
    for (uint64_t b = 0; b <= nb; b++) {
        t->xoff[b] = b;
        t->ioff[b] = t->poff[b] = (int64_t)b;
    }
    return GS_OK;
}

/* The COPY layer of grid @a og and element dtype @a dtype from @a t (filled; taken, also on
 * failure): checked, added, its inputs set. *idx_p its index. */
static gs_status_t ls_finish(lw_t *w, const gs_grid_t *og, int32_t dtype, ls_tabs_t *t,
                             const char *what, int64_t *idx_p)
{
    gs_layer_t *l = gs__layer_new(GS_LAYER_COPY);
    gs_status_t st;
    int64_t li;
    uint64_t *xoff;
    lw_ref_t *xrefs;
    if (l == NULL || gs_grid_copy(&l->grid, og) != GS_OK) {
        if (l != NULL) gs_layer_free(l);
        ls_free(t);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    }
    l->u.cp.dtype = dtype;
    l->u.cp.ioff = t->ioff;
    l->u.cp.poff = t->poff;
    l->u.cp.in_len = t->lens;
    l->u.cp.pieces = t->pieces;
    xoff = t->xoff;
    xrefs = t->xrefs;
    memset(t, 0, sizeof(*t));   /* the layer owns the rest */
    if (gs__layer_check(l) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        gs_layer_free(l);
        gs_free(xoff);
        gs_free(xrefs);
        return gs_error_set(GS_ERR_INTERNAL, "lowering built a bad %s layer: %s", what, msg);
    }
    if ((st = gs__lw_add_layer(w, l, &li)) != GS_OK) {   /* frees l on failure */
        gs_free(xoff);
        gs_free(xrefs);
        return st;
    }
    if ((st = gs__lw_set_inputs(w, li, xoff, xrefs)) != GS_OK) return st;   /* takes both */
    *idx_p = li;
    return GS_OK;
}

/* Row-major flat index of coordinates @a c in an array of @a shape. */
static int64_t ls_flat(int32_t nd, const int64_t *shape, const int64_t *c)
{
    int64_t f = 0;
    for (int32_t a = 0; a < nd; a++) f = f * shape[a] + c[a];
    return f;
}

/* Whether output block b of RESHAPE node @a e is block b of its input (same element count and
 * first flat index) for every b: what the grids gs_array_reshape() builds give, since both
 * list the same flat ranges in ascending order. */
static int ls_same_blocks(const gs_grid_t *og, const gs_grid_t *ig)
{
    const uint64_t nb = gs_grid_nblocks(og);
    if (gs_grid_nblocks(ig) != nb) return 0;
    for (uint64_t b = 0; b < nb; b++) {
        int64_t os[GS_MAX_NDIM], osh[GS_MAX_NDIM], is[GS_MAX_NDIM], ish[GS_MAX_NDIM];
        gs_grid_block_region(og, b, os, osh);
        gs_grid_block_region(ig, b, is, ish);
        if (gs_region_size(og->ndim, osh) != gs_region_size(ig->ndim, ish) ||
            ls_flat(og->ndim, og->shape, os) != ls_flat(ig->ndim, ig->shape, is))
            return 0;
    }
    return 1;
}

/* Whether RESHAPE node @a idx can share its input's blocks instead of copying them: its input
 * has a layer of this lowering or persisted chunks, it is neither the root nor persisted,
 * every consumer reads it through a fused kernel (blockwise nodes and reductions address a
 * chunk through the node's own grid: the same bytes in the reshaped block's shape), and block
 * b is input block b. */
static int ls_alias(const lw_t *w, int64_t idx)
{
    const lw_node_t *e = &w->nodes[idx], *in = &w->nodes[e->in[0]];
    if (e->pidx >= 0 || idx == w->nnodes - 1 || (in->pidx < 0 && in->layer < 0)) return 0;
    for (int64_t j = idx + 1; j < w->nnodes; j++) {
        const lw_node_t *c = &w->nodes[j];
        if (c->pidx >= 0) continue;
        for (int32_t k = 0; k < c->n->ninputs; k++)
            if (c->in[k] == idx && c->n->kind != GS__NODE_REDUCE &&
                !gs__lw_kind_is_blockwise(c->n->kind))
                return 0;
    }
    return ls_same_blocks(&e->n->grid, &e->n->in[0]->grid);
}

gs_status_t gs__lw_build_reshape(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const gs_grid_t *og = &e->n->grid, *ig = &e->n->in[0]->grid;
    ls_tabs_t t;
    gs_status_t st;
    if ((w->flags & GS_LOWER_FUSE) && ls_alias(w, idx)) {
        /* its consumers read the input's blocks: its layer, or its persisted chunks (the
         * node then refers to the same persisted table entry, block for block) */
        w->nodes[idx].pidx = w->nodes[e->in[0]].pidx;
        *idx_p = w->nodes[e->in[0]].layer;
        return GS_OK;
    }
    if ((st = ls_alloc(&t, gs_grid_nblocks(og))) != GS_OK) return st;
    for (uint64_t b = 0; b < t.nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], ic[GS_MAX_NDIM], ib[GS_MAX_NDIM];
        int64_t istart[GS_MAX_NDIM], ishape[GS_MAX_NDIM], n, f, s = 1;
        gs__cpiece_t *p = &t.pieces[b];
        gs_grid_block_region(og, b, start, shape);
        n = gs_region_size(og->ndim, shape);
        gs_assert_always(n > 0);   /* empty reshapes are built without a RESHAPE node */
        f = ls_flat(og->ndim, og->shape, start);
        for (int32_t a = ig->ndim - 1; a >= 0; a--) {
            ic[a] = f % ig->shape[a];
            f /= ig->shape[a];
        }
        for (int32_t a = 0; a < ig->ndim; a++) ib[a] = gs__grid_find(ig, (int)a, ic[a]);
        uint64_t iblk = gs__grid_block_index(ig, ib);
        gs_grid_block_region(ig, iblk, istart, ishape);
        if (gs_region_size(ig->ndim, ishape) != n ||
            ls_flat(ig->ndim, ig->shape, istart) != ls_flat(og->ndim, og->shape, start)) {
            ls_free(&t);
            return gs_error_set(GS_ERR_INTERNAL,
                                "reshape lowering: output block %llu is not one input block",
                                (unsigned long long)b);
        }
        t.xrefs[b] = gs__lw_node_ref(w, e->in[0], iblk);
        t.lens[b] = n;
        p->slot = 0;
        p->base = 0;
        for (int32_t a = og->ndim - 1; a >= 0; a--) {
            p->stride[a] = s;
            p->size[a] = shape[a];
            s *= shape[a];
        }
    }
    return ls_finish(w, og, e->n->dtype, &t, "reshape", idx_p);
}

gs_status_t gs__lw_build_diag(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const gs_grid_t *og = &e->n->grid, *ig = &e->n->in[0]->grid;
    const int64_t k = e->n->u.dg.k, roff = k < 0 ? -k : 0, coff = k > 0 ? k : 0;
    ls_tabs_t t;
    gs_status_t st;
    gs_assert_always(ig->ndim == 2 && og->ndim == 1);
    if ((st = ls_alloc(&t, gs_grid_nblocks(og))) != GS_OK) return st;
    for (uint64_t b = 0; b < t.nb; b++) {
        const int64_t t0 = og->bounds[0][b], len = og->bounds[0][b + 1] - t0;
        const int64_t r = t0 + roff, c = t0 + coff;
        int64_t ib[2], istart[2], ishape[2];
        gs__cpiece_t *p = &t.pieces[b];
        ib[0] = gs__grid_find(ig, 0, r);
        ib[1] = gs__grid_find(ig, 1, c);
        uint64_t iblk = gs__grid_block_index(ig, ib);
        gs_grid_block_region(ig, iblk, istart, ishape);
        if (r + len > istart[0] + ishape[0] || c + len > istart[1] + ishape[1]) {
            ls_free(&t);
            return gs_error_set(GS_ERR_INTERNAL,
                                "diag lowering: output block %llu leaves its input block",
                                (unsigned long long)b);
        }
        t.xrefs[b] = gs__lw_node_ref(w, e->in[0], iblk);
        t.lens[b] = ishape[0] * ishape[1];
        p->slot = 0;
        p->base = (r - istart[0]) * ishape[1] + (c - istart[1]);
        p->stride[0] = ishape[1] + 1;
        p->size[0] = len;
    }
    return ls_finish(w, og, e->n->dtype, &t, "diag", idx_p);
}
