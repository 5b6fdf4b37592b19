/* Lowering of data-movement nodes (RECHUNK, CONCAT) to COPY layers.
 *
 * One COPY layer assembles each output block from rectangular pieces of source chunks. The
 * sources are placed one after the other along one output axis (concatenation; a rechunk has
 * one source covering everything); an "expanded" source lacks that axis and covers one position
 * of it (stack).
 *
 * CONCAT: n-ary concatenations are folds of binary nodes (array_copy.c). A CONCAT node whose only
 * consumer is a CONCAT along the same axis (taking it unexpanded) builds no layer: its consumer
 * flattens it and reads its operands directly, so every element is copied once. Output chunks of
 * a CONCAT follow its operands' chunks (array_copy.c), so each output block is one piece.
 *
 * RECHUNK: an output block needs prod_a k_a pieces, k_a = the input chunks its extent along axis
 * a overlaps. When that exceeds GS_KERNEL_MAX_PIECES (tiny chunks into huge ones), the rechunk
 * goes through intermediate grids, built greedily axis by axis with a budget of
 * GS_KERNEL_MAX_PIECES pieces per block: an axis whose k_a fits the remaining budget takes the
 * target boundaries; the first that does not is merged in groups of the remaining budget g >= 2
 * (boundaries: the target's plus every g-th current one, so no intermediate chunk spans more than
 * g current chunks); later axes keep the current boundaries. Every step shrinks the largest
 * overlap, so a few steps (about log_64 of the merge factor) reach the target, and intermediate
 * chunks stay within the union of the source and target chunk extents on every axis. */
#include "graph/copy_int.h"
#include "graph/lower_int.h"

#include <stdio.h>
#include <string.h>

typedef struct lc_src {
    const gs_grid_t *grid;
    int64_t node;           /* >= 0: a node's materialised/persisted output */
    int64_t layer;          /* node < 0: a layer of this lowering */
    int64_t off, len;       /* placement along the output axis */
    int expand;             /* the source lacks the output axis */
} lc_src_t;

#define LC_NOMEM() gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering")

static lw_ref_t lc_ref(const lw_t *w, const lc_src_t *s, uint64_t block)
{
    lw_ref_t r;
    if (s->node >= 0) return gs__lw_node_ref(w, s->node, block);
    r.layer = s->layer;
    r.block = block;
    return r;
}

/* Chunk index containing coordinate c along axis a of g (0 <= c < shape). */
static int64_t lc_find(const gs_grid_t *g, int a, int64_t c)
{
    return gs__grid_find(g, a, c);
}

/* COPY layer with output grid @a og from sources @a srcs[0..nsrc) (sorted by offset along
 * @a axis). *li_p gets its index. */
static gs_status_t lc_build(lw_t *w, const gs_grid_t *og, int axis, const lc_src_t *srcs,
                            int64_t nsrc, int32_t dtype, int64_t *li_p)
{
    const int32_t nd = og->ndim;
    const uint64_t nb = gs_grid_nblocks(og);
    GS_VEC(lw_ref_t) refs = {0};
    GS_VEC(int64_t) lens = {0};
    GS_VEC(gs__cpiece_t) pieces = {0};
    uint64_t *xoff = NULL;
    int64_t *ioff = NULL, *poff = NULL;
    gs_layer_t *l = NULL;
    gs_status_t st;
    int64_t li;

    xoff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(uint64_t)), "copy xoff");
    ioff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "copy input offsets");
    poff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "copy piece offsets");
    if (xoff == NULL || ioff == NULL || poff == NULL) goto nomem;
    xoff[0] = 0;
    ioff[0] = poff[0] = 0;
    for (uint64_t b = 0; b < nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], end_ax;
        const size_t r0 = refs.len, p0 = pieces.len;
        int empty = 0;
        gs_grid_block_region(og, b, start, shape);
        for (int32_t j = 0; j < nd; j++)
            if (shape[j] == 0) empty = 1;
        end_ax = start[axis] + shape[axis];
        /* first source ending after the block's start along the axis */
        int64_t s = 0, hi = nsrc;
        while (s < hi) {
            int64_t mid = s + (hi - s) / 2;
            if (srcs[mid].off + srcs[mid].len <= start[axis]) s = mid + 1;
            else hi = mid;
        }
        for (; !empty && s < nsrc && srcs[s].off < end_ax; s++) {
            const lc_src_t *src = &srcs[s];
            const gs_grid_t *sg = src->grid;
            int64_t slo[GS_MAX_NDIM], shi[GS_MAX_NDIM], c0[GS_MAX_NDIM], c1[GS_MAX_NDIM];
            int64_t cc[GS_MAX_NDIM];
            int32_t smap[GS_MAX_NDIM];   /* output axis -> source axis, -1 */
            int32_t snd = sg->ndim;
            if (src->len == 0) continue;
            for (int32_t j = 0, a = 0; j < nd; j++) {
                int64_t lo = start[j], h = start[j] + shape[j];
                if (j == axis) {
                    if (lo < src->off) lo = src->off;
                    if (h > src->off + src->len) h = src->off + src->len;
                    lo -= src->off;
                    h -= src->off;
                    if (src->expand) {
                        smap[j] = -1;
                        continue;
                    }
                }
                smap[j] = a;
                slo[a] = lo;
                shi[a] = h;
                a++;
            }
            for (int32_t a = 0; a < snd; a++) {
                c0[a] = lc_find(sg, (int)a, slo[a]);
                c1[a] = lc_find(sg, (int)a, shi[a] - 1);
                cc[a] = c0[a];
            }
            for (;;) {
                gs__cpiece_t p;
                int64_t rs[GS_MAX_NDIM], ext = 1;
                uint64_t sb = gs__grid_block_index(sg, cc);
                lw_ref_t r = lc_ref(w, src, sb);
                int32_t slot = -1;
                memset(&p, 0, sizeof(p));
                for (int32_t a = snd - 1; a >= 0; a--) {
                    rs[a] = ext;
                    ext *= sg->bounds[a][cc[a] + 1] - sg->bounds[a][cc[a]];
                }
                for (size_t i = r0; i < refs.len; i++)
                    if (refs.data[i].layer == r.layer && refs.data[i].block == r.block)
                        slot = (int32_t)(i - r0);
                if (slot < 0) {
                    slot = (int32_t)(refs.len - r0);
                    if (GS_VEC_PUSH(&refs, r) != GS_OK || GS_VEC_PUSH(&lens, ext) != GS_OK)
                        goto nomem;
                }
                p.slot = slot;
                for (int32_t j = 0; j < nd; j++) {
                    int32_t a = smap[j];
                    if (a < 0) {   /* expanded axis: one position */
                        p.dst[j] = src->off - start[j];
                        p.size[j] = 1;
                        p.stride[j] = 0;
                        continue;
                    }
                    int64_t cb0 = sg->bounds[a][cc[a]], cb1 = sg->bounds[a][cc[a] + 1];
                    int64_t lo = slo[a] > cb0 ? slo[a] : cb0, h = shi[a] < cb1 ? shi[a] : cb1;
                    p.base += (lo - cb0) * rs[a];
                    p.stride[j] = rs[a];
                    p.dst[j] = lo + (j == axis ? src->off : 0) - start[j];
                    p.size[j] = h - lo;
                }
                if (GS_VEC_PUSH(&pieces, p) != GS_OK) goto nomem;
                if (pieces.len - p0 > GS_KERNEL_MAX_PIECES) {
                    st = gs_error_set(GS_ERR_INTERNAL,
                                      "copy lowering: a block needs more than %d pieces",
                                      GS_KERNEL_MAX_PIECES);
                    goto err;
                }
                int32_t a = snd - 1;
                while (a >= 0 && ++cc[a] > c1[a]) {
                    cc[a] = c0[a];
                    a--;
                }
                if (a < 0) break;
            }
        }
        xoff[b + 1] = refs.len;
        ioff[b + 1] = (int64_t)lens.len;
        poff[b + 1] = (int64_t)pieces.len;
    }
    if (GS_VEC_RESERVE(&refs, 1) != GS_OK || GS_VEC_RESERVE(&lens, 1) != GS_OK ||
        GS_VEC_RESERVE(&pieces, 1) != GS_OK)
        goto nomem;
    l = gs__layer_new(GS_LAYER_COPY);
    if (l == NULL || gs_grid_copy(&l->grid, og) != GS_OK) goto nomem;
    l->u.cp.dtype = dtype;
    l->u.cp.ioff = ioff;
    l->u.cp.poff = poff;
    l->u.cp.in_len = lens.data;
    l->u.cp.pieces = pieces.data;
    ioff = poff = NULL;
    lens.data = NULL;
    pieces.data = NULL;
    if (gs__layer_check(l) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        gs_layer_free(l);
        l = NULL;
        st = gs_error_set(GS_ERR_INTERNAL, "lowering built a bad layer: %s", msg);
        goto err;
    }
    st = gs__lw_add_layer(w, l, &li);   /* frees l on failure */
    l = NULL;
    if (st != GS_OK) goto err;
    st = gs__lw_set_inputs(w, li, xoff, refs.data);   /* takes both, also on failure */
    xoff = NULL;
    refs.data = NULL;
    if (st != GS_OK) goto err;
    *li_p = li;
    return GS_OK;
nomem:
    st = LC_NOMEM();
err:
    if (l != NULL) gs_layer_free(l);
    gs_free(xoff);
    gs_free(ioff);
    gs_free(poff);
    GS_VEC_FREE(&refs);
    GS_VEC_FREE(&lens);
    GS_VEC_FREE(&pieces);
    return st;
}

/* ---- rechunk ---- */

/* Largest number of chunks of @a cur (nc chunks) one chunk of @a tgt (nt chunks) overlaps. */
static int64_t lc_overlap(const int64_t *cur, int64_t nc, const int64_t *tgt, int64_t nt)
{
    int64_t best = 1, i = 0;
    for (int64_t t = 0; t < nt; t++) {
        int64_t lo = tgt[t], hi = tgt[t + 1], k = 0;
        if (hi <= lo) continue;
        while (i < nc && cur[i + 1] <= lo) i++;
        for (int64_t c = i; c < nc && cur[c] < hi; c++)
            if (cur[c + 1] > cur[c]) k++;
        if (k > best) best = k;
    }
    return best;
}

/* Bounds of the target (nt chunks) plus every g-th bound of cur (nc chunks), sorted, unique. */
static int64_t *lc_merge(const int64_t *cur, int64_t nc, const int64_t *tgt, int64_t nt, int64_t g,
                         int64_t *n_p)
{
    int64_t *u = gs_malloc(gs_size_mul((size_t)(nt + nc / g + 3), sizeof(int64_t)), "grid bounds");
    int64_t i = 0, k = 0, c = 0;
    if (u == NULL) return NULL;
    while (i <= nt || c <= nc) {
        int64_t v;
        if (c > nc || (i <= nt && tgt[i] <= cur[c])) {
            v = tgt[i++];
        } else {
            v = cur[c];
            c = c == nc ? nc + 1 : (c + g < nc ? c + g : nc);
        }
        if (k == 0 || u[k - 1] != v) u[k++] = v;
    }
    if (k == 1) u[k++] = u[0];
    *n_p = k - 1;
    return u;
}

gs_status_t gs__lw_build_rechunk(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const gs_grid_t *tg = &e->n->grid;
    const int32_t nd = tg->ndim;
    gs_grid_t cur, next;
    lc_src_t src;
    gs_status_t st;
    int64_t li;
    memset(&cur, 0, sizeof(cur));
    memset(&next, 0, sizeof(next));
    if (gs_grid_copy(&cur, &e->n->in[0]->grid) != GS_OK) return LC_NOMEM();
    memset(&src, 0, sizeof(src));
    src.node = e->in[0];
    src.layer = -1;
    for (;;) {
        int64_t k[GS_MAX_NDIM], prod = 1, budget = GS_KERNEL_MAX_PIECES;
        int fits;
        for (int32_t a = 0; a < nd; a++) {
            k[a] = lc_overlap(cur.bounds[a], cur.nchunks[a], tg->bounds[a], tg->nchunks[a]);
            if (prod <= GS_KERNEL_MAX_PIECES) prod *= k[a];
        }
        fits = prod <= GS_KERNEL_MAX_PIECES;
        src.grid = &cur;
        src.off = 0;
        src.len = nd > 0 ? cur.shape[0] : 1;
        if (fits) {
            st = lc_build(w, tg, 0, &src, 1, e->n->dtype, &li);
            break;
        }
        /* one intermediate step */
        next.ndim = nd;
        for (int32_t a = 0; a < nd; a++) {
            const int64_t *nbnd;
            int64_t nn;
            next.shape[a] = tg->shape[a];
            if (k[a] <= budget) {
                nbnd = tg->bounds[a];
                nn = tg->nchunks[a];
                budget /= k[a];
            } else if (budget >= 2) {
                next.bounds[a] = lc_merge(cur.bounds[a], cur.nchunks[a], tg->bounds[a],
                                          tg->nchunks[a], budget, &next.nchunks[a]);
                if (next.bounds[a] == NULL) goto nomem;
                budget = 1;
                continue;
            } else {
                nbnd = cur.bounds[a];
                nn = cur.nchunks[a];
            }
            next.nchunks[a] = nn;
            next.bounds[a] = gs_malloc(((size_t)nn + 1) * sizeof(int64_t), "grid bounds");
            if (next.bounds[a] == NULL) goto nomem;
            memcpy(next.bounds[a], nbnd, ((size_t)nn + 1) * sizeof(int64_t));
        }
        if ((st = lc_build(w, &next, 0, &src, 1, e->n->dtype, &li)) != GS_OK) break;
        gs_grid_cleanup(&cur);
        cur = next;
        memset(&next, 0, sizeof(next));
        src.node = -1;
        src.layer = li;
    }
    gs_grid_cleanup(&cur);
    gs_grid_cleanup(&next);
    if (st == GS_OK) *idx_p = li;
    return st;
nomem:
    gs_grid_cleanup(&cur);
    gs_grid_cleanup(&next);
    return LC_NOMEM();
}

/* ---- concatenate / stack ---- */

/* Whether CONCAT node @a idx is flattened into its only consumer. */
static int lc_absorbed(const lw_t *w, int64_t idx)
{
    const lw_node_t *e = &w->nodes[idx];
    if (e->pidx >= 0 || e->uses != 1 || e->root) return 0;
    for (int64_t j = idx + 1; j < w->nnodes; j++) {
        const lw_node_t *c = &w->nodes[j];
        if (c->pidx >= 0) continue;
        for (int32_t k = 0; k < c->n->ninputs; k++) {
            if (c->in[k] != idx) continue;
            return c->n->kind == GS__NODE_CONCAT && c->n->u.cat.axis == e->n->u.cat.axis &&
                   !c->n->u.cat.expand[k];
        }
    }
    return 0;
}

gs_status_t gs__lw_build_concat(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const int axis = e->n->u.cat.axis;
    GS_VEC(lc_src_t) srcs = {0};
    GS_VEC(int64_t) stack = {0};   /* node * 2 + expand, operands in reverse order */
    gs_status_t st;
    int64_t off = 0;
    if (lc_absorbed(w, idx)) {
        *idx_p = -1;   /* its consumer reads its operands */
        return GS_OK;
    }
    for (int32_t k = e->n->ninputs - 1; k >= 0; k--)
        if (GS_VEC_PUSH(&stack, e->in[k] * 2 + e->n->u.cat.expand[k]) != GS_OK) goto nomem;
    while (stack.len > 0) {
        int64_t v = stack.data[--stack.len], ni = v / 2;
        int ex = (int)(v % 2);
        const lw_node_t *c = &w->nodes[ni];
        lc_src_t s;
        if (!ex && c->n->kind == GS__NODE_CONCAT && c->pidx < 0 && c->n->u.cat.axis == axis &&
            lc_absorbed(w, ni)) {
            for (int32_t k = c->n->ninputs - 1; k >= 0; k--)
                if (GS_VEC_PUSH(&stack, c->in[k] * 2 + c->n->u.cat.expand[k]) != GS_OK)
                    goto nomem;
            continue;
        }
        memset(&s, 0, sizeof(s));
        s.grid = &c->n->grid;
        s.node = ni;
        s.layer = -1;
        s.expand = ex;
        s.off = off;
        s.len = ex ? 1 : c->n->grid.shape[axis];
        off += s.len;
        if (GS_VEC_PUSH(&srcs, s) != GS_OK) goto nomem;
    }
    gs_assert_always(off == e->n->grid.shape[axis]);
    st = lc_build(w, &e->n->grid, axis, srcs.data, (int64_t)srcs.len, e->n->dtype, idx_p);
    GS_VEC_FREE(&srcs);
    GS_VEC_FREE(&stack);
    return st;
nomem:
    GS_VEC_FREE(&srcs);
    GS_VEC_FREE(&stack);
    return LC_NOMEM();
}
