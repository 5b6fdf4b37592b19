/* Lowering of SCAN nodes (gs_array_cumulative; scan_int.h): up to three SCAN layers, totals ->
 * carries -> scans, each block listing its inputs explicitly. */
#include "graph/lower_int.h"
#include "graph/scan_int.h"

#include <stdio.h>
#include <string.h>

/* A SCAN layer over @a src: @a grid its grid (copied, with axis @a ax of the TOTAL modes
 * replaced by @a nunit unit chunks). NULL when out of memory. */
static gs_layer_t *gs__lw_scan_layer(const struct gs_array *n, const gs_grid_t *src, int32_t mode,
                                     int32_t chain, int32_t in_dtype, int64_t nunit)
{
    const int32_t ax = n->u.scan.axis;
    gs_layer_t *l = gs__layer_new(GS_LAYER_SCAN);
    if (l == NULL) return NULL;
    l->u.sc.op = n->u.scan.op;
    l->u.sc.mode = mode;
    l->u.sc.axis = ax;
    l->u.sc.chain = chain;
    l->u.sc.in_dtype = in_dtype;
    l->u.sc.out_dtype = n->dtype;
    if (gs_grid_copy(&l->u.sc.src, src) != GS_OK || gs_grid_copy(&l->grid, src) != GS_OK)
        goto nomem;
    if (mode == GS_KSCAN_TOTAL) {
        int64_t *b = gs_malloc(gs_size_mul((size_t)nunit + 1, sizeof(int64_t)), "scan bounds");
        if (b == NULL) goto nomem;
        for (int64_t k = 0; k <= nunit; k++) b[k] = k;
        gs_free(l->grid.bounds[ax]);
        l->grid.bounds[ax] = b;
        l->grid.nchunks[ax] = nunit;
        l->grid.shape[ax] = nunit;
    }
    return l;
nomem:
    gs_layer_free(l);
    return NULL;
}

/* Add layer @a l (freed on failure; checked first). Block b lists block gs__scan_src_block(b)
 * of its source: of node @a src_node's output (>= 0), else of layer @a src_layer; and, past the
 * first block along the axis, the running total before it: the previous block along the axis
 * of the new layer itself (@a self_chain) or of layer @a carry_li (>= 0). *li_p the new layer. */
static gs_status_t gs__lw_scan_add(lw_t *w, gs_layer_t *l, int64_t src_node, int64_t src_layer,
                                   int self_chain, int64_t carry_li, int64_t *li_p)
{
    const uint64_t nb = gs_layer_nblocks(l);
    const int32_t ax = l->u.sc.axis;
    uint64_t *xoff = NULL;
    lw_ref_t *xrefs = NULL;
    gs_status_t st;
    int64_t li;
    if (gs__layer_check(l) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        gs_layer_free(l);
        return gs_error_set(GS_ERR_INTERNAL, "lowering built a bad layer: %s", msg);
    }
    xoff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(uint64_t)), "scan xoff");
    xrefs = gs_malloc(gs_size_mul((size_t)nb * 2 + 1, sizeof(lw_ref_t)), "scan refs");
    if (xoff == NULL || xrefs == NULL) {
        gs_layer_free(l);
        gs_free(xoff);
        gs_free(xrefs);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering a cumulative scan");
    }
    if ((st = gs__lw_add_layer(w, l, &li)) != GS_OK) {   /* frees l */
        gs_free(xoff);
        gs_free(xrefs);
        return st;
    }
    l = w->layers.data[li].l;
    xoff[0] = 0;
    for (uint64_t b = 0, x = 0; b < nb; b++) {
        int64_t c[GS_MAX_NDIM];
        const uint64_t sb = gs__scan_src_block(l, b);
        xrefs[x++] = src_node >= 0 ? gs__lw_node_ref(w, src_node, sb)
                                   : (lw_ref_t){.layer = src_layer, .block = sb};
        gs__grid_block_coords(&l->grid, b, c);
        if (c[ax] > 0 && (self_chain || carry_li >= 0)) {
            const int64_t tli = self_chain ? li : carry_li;
            c[ax]--;
            xrefs[x++] = (lw_ref_t){.layer = tli,
                                    .block = gs__grid_block_index(&w->layers.data[tli].l->grid, c)};
        }
        xoff[b + 1] = x;
    }
    if ((st = gs__lw_set_inputs(w, li, xoff, xrefs)) != GS_OK) return st;   /* takes both */
    *li_p = li;
    return GS_OK;
}

gs_status_t gs__lw_build_scan(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const struct gs_array *n = e->n, *x = n->in[0];
    const int64_t K = n->grid.nchunks[n->u.scan.axis];
    int64_t tot = -1, carry = -1, li;
    gs_layer_t *l;
    gs_status_t st;
    if (K > 1) {
        /* totals of chunks 0..K-2 along the axis, then their running totals */
        l = gs__lw_scan_layer(n, &x->grid, GS_KSCAN_TOTAL, 0, x->dtype, K - 1);
        if (l == NULL) goto nomem;
        if ((st = gs__lw_scan_add(w, l, e->in[0], -1, 0, -1, &tot)) != GS_OK) return st;
        l = gs__lw_scan_layer(n, &w->layers.data[tot].l->grid, GS_KSCAN_TOTAL, 1, n->dtype, K - 1);
        if (l == NULL) goto nomem;
        if ((st = gs__lw_scan_add(w, l, -1, tot, 1, -1, &carry)) != GS_OK) return st;
    }
    l = gs__lw_scan_layer(n, &x->grid, GS_KSCAN_SCAN, 0, x->dtype, 0);
    if (l == NULL) goto nomem;
    if ((st = gs__lw_scan_add(w, l, e->in[0], -1, 0, carry, &li)) != GS_OK) return st;
    *idx_p = li;
    return GS_OK;
nomem:
    return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering a cumulative scan");
}
