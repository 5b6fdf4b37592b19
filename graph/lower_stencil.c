/* Lowering of STENCIL nodes: halo exchange through edge slabs.
 *
 * Output block b (the input's block b: a stencil keeps the chunking) needs the padded region
 * [start - r, start + shape + r) of the input on every axis. Per axis that region is cut into
 * runs, each inside one input chunk: the part inside the array (ascending), and the parts past
 * its edges as the boundary maps them (periodic: the far end, ascending; reflect: the near end,
 * descending, edge element repeated; none/constant: nothing, the kernel's constant fills it).
 * The product of the axes' runs gives the pieces of the padded block. A piece in block b's own
 * chunk reads it directly; one covering a whole neighbour chunk (a chunk thinner than the
 * radius) reads that chunk; any other piece reads an edge *slab*: a SLAB task cuts just that
 * box out of the neighbour's chunk, so it runs where the chunk is and only the slab travels
 * (a 10000^2 chunk's 3x3 halo is 4 slabs of 10000 and 4 of 1 elements, not 8 chunks).
 * Slabs are not shared between output blocks (each block's slab is its own box). */
#include "graph/copy_int.h"
#include "graph/lower_int.h"
#include "graph/stencil_int.h"

#include <stdio.h>
#include <string.h>

#define LS_NOMEM() gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering a stencil")
#define LS_MAX_RUNS GS_KERNEL_MAX_PIECES

typedef struct ls_run {
    int64_t dst, len;       /* in the padded block */
    int64_t src;            /* first source position (global), then src + dir, ... */
    int64_t chunk;          /* input chunk holding it */
    int32_t dir;            /* +1 or -1 */
} ls_run_t;

/* Append the run (dst, len, s, dir), split at the input's chunk bounds. 0 when more than
 * LS_MAX_RUNS runs. */
static int ls_emit(const gs_grid_t *g, int a, int64_t dst, int64_t len, int64_t s, int32_t dir,
                   ls_run_t *runs, int *n)
{
    while (len > 0) {
        int64_t c = gs__grid_find(g, a, s);
        int64_t cb0 = g->bounds[a][c], cb1 = g->bounds[a][c + 1];
        int64_t take = dir > 0 ? cb1 - s : s - cb0 + 1;
        if (take > len) take = len;
        if (*n >= LS_MAX_RUNS) return 0;
        runs[(*n)++] = (ls_run_t){dst, take, s, c, dir};
        dst += take;
        len -= take;
        s += dir * take;
    }
    return 1;
}

/* Runs of axis @a a for a block [start, start + shape) with radius r. 0 when too many. */
static int ls_axis(const gs_grid_t *g, int a, int64_t start, int64_t shape, int64_t r, int bnd,
                   ls_run_t *runs, int *n)
{
    const int64_t N = g->shape[a], lo = start - r, hi = start + shape + r;
    const int64_t mlo = lo > 0 ? lo : 0, mhi = hi < N ? hi : N;
    *n = 0;
    if (lo < 0 && bnd == GS_BOUNDARY_PERIODIC && !ls_emit(g, a, 0, -lo, lo + N, 1, runs, n))
        return 0;
    if (lo < 0 && bnd == GS_BOUNDARY_REFLECT && !ls_emit(g, a, 0, -lo, -lo - 1, -1, runs, n))
        return 0;
    if (mhi > mlo && !ls_emit(g, a, mlo - lo, mhi - mlo, mlo, 1, runs, n)) return 0;
    if (hi > N) {
        const int64_t u = lo > N ? lo : N;
        if (bnd == GS_BOUNDARY_PERIODIC && !ls_emit(g, a, u - lo, hi - u, u - N, 1, runs, n))
            return 0;
        if (bnd == GS_BOUNDARY_REFLECT &&
            !ls_emit(g, a, u - lo, hi - u, 2 * N - u - 1, -1, runs, n))
            return 0;
    }
    return 1;
}

gs_status_t gs__lw_build_stencil(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const struct gs_array *n = e->n;
    const gs_grid_t *g = &n->in[0]->grid;
    const int32_t nd = g->ndim;
    const uint64_t nb = gs_grid_nblocks(g);
    const int bnd = n->u.st.boundary;
    GS_VEC(lw_ref_t) refs = {0};
    GS_VEC(uint8_t) isslab = {0};
    GS_VEC(int64_t) lens = {0};
    GS_VEC(gs__cpiece_t) pieces = {0};
    GS_VEC(int64_t) keep = {0};
    GS_VEC(int64_t) stab = {0};      /* slab table (GS__SLAB_W(nd) per slab) */
    GS_VEC(lw_ref_t) srefs = {0};    /* each slab's input */
    uint64_t *xoff = NULL, *sxoff = NULL;
    int64_t *ioff = NULL, *poff = NULL;
    gs_layer_t *l = NULL;
    gs__stencil_hdr_t *h = NULL;
    ls_run_t (*runs)[LS_MAX_RUNS] = NULL;
    gs_status_t st;
    int64_t li, sli = -1;

    runs = gs_malloc(sizeof(*runs) * GS_MAX_NDIM, "stencil runs");
    xoff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(uint64_t)), "stencil xoff");
    ioff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "stencil input offsets");
    poff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "stencil piece offsets");
    if (runs == NULL || xoff == NULL || ioff == NULL || poff == NULL) goto nomem;
    xoff[0] = 0;
    ioff[0] = poff[0] = 0;
    for (uint64_t b = 0; b < nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], cc[GS_MAX_NDIM];
        int nr[GS_MAX_NDIM], ri[GS_MAX_NDIM];
        const size_t r0 = refs.len, p0 = pieces.len, s0 = srefs.len;
        int empty = 0;
        gs_grid_block_region(g, b, start, shape);
        gs__grid_block_coords(g, b, cc);
        for (int32_t j = 0; j < nd; j++) {
            int64_t r = n->u.st.radius[j], N = g->shape[j];
            int64_t klo = 0, khi = 0;
            if (shape[j] == 0) empty = 1;
            if (bnd == GS_BOUNDARY_NONE) {
                klo = r - start[j];
                khi = start[j] + shape[j] - (N - r);
                klo = klo < 0 ? 0 : klo > shape[j] ? shape[j] : klo;
                khi = khi < 0 ? 0 : khi > shape[j] ? shape[j] : khi;
            }
            if (GS_VEC_PUSH(&keep, klo) != GS_OK) goto nomem;
        }
        for (int32_t j = 0; j < nd; j++) {
            int64_t r = n->u.st.radius[j], N = g->shape[j];
            int64_t khi = 0;
            if (bnd == GS_BOUNDARY_NONE) {
                khi = start[j] + shape[j] - (N - r);
                khi = khi < 0 ? 0 : khi > shape[j] ? shape[j] : khi;
            }
            if (GS_VEC_PUSH(&keep, khi) != GS_OK) goto nomem;
        }
        for (int32_t j = 0; j < nd && !empty; j++) {
            if (!ls_axis(g, (int)j, start[j], shape[j], n->u.st.radius[j], bnd, runs[j], &nr[j]))
                goto too_many;
            if (nr[j] == 0) empty = 1;
            ri[j] = 0;
        }
        while (!empty) {
            gs__cpiece_t p;
            int64_t sc[GS_MAX_NDIM], cs[GS_MAX_NDIM], blo[GS_MAX_NDIM], rs[GS_MAX_NDIM];
            int whole = 1, slab = 0;
            uint64_t sb;
            lw_ref_t ref;
            int32_t slot = -1;
            int64_t ext = 1, len;
            memset(&p, 0, sizeof(p));
            for (int32_t j = nd - 1; j >= 0; j--) {
                const ls_run_t *u = &runs[j][ri[j]];
                int64_t cb0 = g->bounds[j][u->chunk];
                sc[j] = u->chunk;
                cs[j] = g->bounds[j][u->chunk + 1] - cb0;
                blo[j] = (u->dir > 0 ? u->src : u->src - u->len + 1) - cb0;
                if (blo[j] != 0 || u->len != cs[j]) whole = 0;
                rs[j] = ext;
                ext *= cs[j];
            }
            sb = gs__grid_block_index(g, sc);
            if (sb != b && !whole) slab = 1;
            if (slab) {
                /* the piece reads a dense slab of its box: strides of the box */
                int64_t sext = 1;
                for (int32_t j = nd - 1; j >= 0; j--) {
                    const ls_run_t *u = &runs[j][ri[j]];
                    p.stride[j] = u->dir * sext;
                    p.base += (u->dir > 0 ? 0 : u->len - 1) * sext;
                    sext *= u->len;
                }
                len = sext;
                /* one slab per box per block */
                for (size_t s = s0; s < srefs.len && slot < 0; s++) {
                    const int64_t *t = stab.data + s * (size_t)GS__SLAB_W(nd);
                    int same = srefs.data[s].block == sb;
                    for (int32_t j = 0; j < nd && same; j++)
                        same = t[1 + nd + j] == blo[j] && t[1 + 2 * nd + j] == runs[j][ri[j]].len;
                    if (!same) continue;
                    for (size_t i = r0; i < refs.len; i++)
                        if (isslab.data[i] && refs.data[i].block == s) slot = (int32_t)(i - r0);
                }
                if (slot < 0) {
                    lw_ref_t sr = gs__lw_node_ref(w, e->in[0], sb);
                    ref.layer = 0;
                    ref.block = srefs.len;
                    if (GS_VEC_PUSH(&srefs, sr) != GS_OK || GS_VEC_PUSH(&stab, ext) != GS_OK)
                        goto nomem;
                    for (int32_t j = 0; j < nd; j++)
                        if (GS_VEC_PUSH(&stab, cs[j]) != GS_OK) goto nomem;
                    for (int32_t j = 0; j < nd; j++)
                        if (GS_VEC_PUSH(&stab, blo[j]) != GS_OK) goto nomem;
                    for (int32_t j = 0; j < nd; j++)
                        if (GS_VEC_PUSH(&stab, runs[j][ri[j]].len) != GS_OK) goto nomem;
                }
            } else {
                ref = gs__lw_node_ref(w, e->in[0], sb);
                len = ext;
                for (int32_t j = 0; j < nd; j++) {
                    const ls_run_t *u = &runs[j][ri[j]];
                    p.stride[j] = u->dir * rs[j];
                    p.base += (u->src - g->bounds[j][u->chunk]) * rs[j];
                }
                for (size_t i = r0; i < refs.len && slot < 0; i++)
                    if (!isslab.data[i] && refs.data[i].layer == ref.layer &&
                        refs.data[i].block == ref.block)
                        slot = (int32_t)(i - r0);
            }
            if (slot < 0) {
                slot = (int32_t)(refs.len - r0);
                if (GS_VEC_PUSH(&refs, ref) != GS_OK || GS_VEC_PUSH(&isslab, (uint8_t)slab) != GS_OK ||
                    GS_VEC_PUSH(&lens, len) != GS_OK)
                    goto nomem;
            }
            p.slot = slot;
            for (int32_t j = 0; j < nd; j++) {
                p.dst[j] = runs[j][ri[j]].dst;
                p.size[j] = runs[j][ri[j]].len;
            }
            if (GS_VEC_PUSH(&pieces, p) != GS_OK) goto nomem;
            if (pieces.len - p0 > GS_KERNEL_MAX_PIECES || refs.len - r0 > GS_KERNEL_MAX_PIECES)
                goto too_many;
            int32_t j = nd - 1;
            while (j >= 0 && ++ri[j] == nr[j]) ri[j--] = 0;
            if (j < 0) break;
        }
        xoff[b + 1] = refs.len;
        ioff[b + 1] = (int64_t)lens.len;
        poff[b + 1] = (int64_t)pieces.len;
    }
    if (GS_VEC_RESERVE(&refs, 1) != GS_OK || GS_VEC_RESERVE(&lens, 1) != GS_OK ||
        GS_VEC_RESERVE(&pieces, 1) != GS_OK)
        goto nomem;

    /* the slab layer first: the stencil's tasks depend on it */
    if (srefs.len > 0) {
        const uint64_t ns = srefs.len;
        sxoff = gs_malloc(gs_size_mul((size_t)ns + 1, sizeof(uint64_t)), "slab xoff");
        l = gs__layer_new(GS_LAYER_SLAB);
        if (sxoff == NULL || l == NULL) goto nomem;
        l->grid.ndim = 1;
        l->grid.shape[0] = 0;
        l->grid.nchunks[0] = (int64_t)ns;
        if (gs__grid_alloc(&l->grid) != GS_OK) goto nomem;
        for (uint64_t s = 0; s < ns; s++) {
            const int64_t *t = stab.data + s * (size_t)GS__SLAB_W(nd);
            int64_t vol = 1;
            for (int32_t j = 0; j < nd; j++) vol *= t[1 + 2 * nd + j];
            sxoff[s] = s;
            l->grid.bounds[0][s + 1] = l->grid.bounds[0][s] + vol;
        }
        sxoff[ns] = ns;
        l->grid.shape[0] = l->grid.bounds[0][ns];
        l->u.sl.nd = nd;
        l->u.sl.tab = stab.data;
        stab.data = NULL;
        if (gs__layer_check(l) != GS_OK) goto bad_layer;
        st = gs__lw_add_layer(w, l, &sli);   /* frees l on failure */
        l = NULL;
        if (st != GS_OK) goto err;
        st = gs__lw_set_inputs(w, sli, sxoff, srefs.data);   /* takes both */
        sxoff = NULL;
        srefs.data = NULL;
        if (st != GS_OK) goto err;
        for (size_t i = 0; i < refs.len; i++)
            if (isslab.data[i]) refs.data[i].layer = sli;
    }

    h = gs_calloc(1, sizeof(*h), "stencil header");
    if (h == NULL) goto nomem;
    memcpy(h->radius, n->u.st.radius, sizeof(h->radius));
    h->cval = n->u.st.cval;
    h->nweights = n->u.st.nweights;
    h->weights = gs_malloc((size_t)h->nweights * sizeof(double) + 8, "stencil weights");
    if (h->weights == NULL) goto nomem;
    if (h->nweights > 0)
        memcpy(h->weights, n->u.st.weights, (size_t)h->nweights * sizeof(double));
    if (n->u.st.user != NULL) {
        const gs__ukernel_t *u = n->u.st.user;
        if ((st = gs__ukernel_copy(u->library, u->symbol, u->arg, u->arg_len, &h->user)) != GS_OK ||
            (st = gs__ukernel_set_cuda(h->user, u->cuda_src)) != GS_OK)
            goto err;
    }
    h->keep = keep.data;
    keep.data = NULL;
    l = gs__layer_new(GS_LAYER_STENCIL);
    if (l == NULL || gs_grid_copy(&l->grid, &n->grid) != GS_OK) goto nomem;
    l->st = h;
    h = NULL;
    l->u.cp.ioff = ioff;
    l->u.cp.poff = poff;
    l->u.cp.in_len = lens.data;
    l->u.cp.pieces = pieces.data;
    ioff = poff = NULL;
    lens.data = NULL;
    pieces.data = NULL;
    if (gs__layer_check(l) != GS_OK) goto bad_layer;
    st = gs__lw_add_layer(w, l, &li);
    l = NULL;
    if (st != GS_OK) goto err;
    st = gs__lw_set_inputs(w, li, xoff, refs.data);
    xoff = NULL;
    refs.data = NULL;
    if (st != GS_OK) goto err;
    *idx_p = li;
    st = GS_OK;
    goto out;
too_many:
    st = gs_error_set(GS_ERR_INVALID_PARAM,
                      "stencil: a chunk's halo needs more than %d pieces (neighbouring chunks "
                      "much thinner than the radius): rechunk to larger chunks first",
                      GS_KERNEL_MAX_PIECES);
    goto err;
bad_layer: {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        st = gs_error_set(GS_ERR_INTERNAL, "lowering built a bad layer: %s", msg);
        goto err;
    }
nomem:
    st = LS_NOMEM();
err:
out:
    if (l != NULL) gs_layer_free(l);
    if (h != NULL) {
        gs_free(h->weights);
        gs__ukernel_free(h->user);
        gs_free(h);
    }
    gs_free(runs);
    gs_free(xoff);
    gs_free(sxoff);
    gs_free(ioff);
    gs_free(poff);
    GS_VEC_FREE(&refs);
    GS_VEC_FREE(&isslab);
    GS_VEC_FREE(&lens);
    GS_VEC_FREE(&pieces);
    GS_VEC_FREE(&keep);
    GS_VEC_FREE(&stab);
    GS_VEC_FREE(&srefs);
    return st;
}
