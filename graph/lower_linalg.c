/* Lowering of MATMUL and FACTOR nodes to LINALG layers (linalg_int.h).
 *
 * MATMUL: output block (i, j) = sum over t of A(i, t) @ B(t, j). The contracted chunks are cut
 * into balanced groups of at most GS__MM_GROUP; one GEMM task per (i, j, group) multiplies the
 * group's chunk pairs (views of the input chunks, transposed in place for folded transposes),
 * and when there are several groups SUM layers add the partial products in a tree of fan-in at
 * most GS__MM_GROUP. A GEMM task reads exactly the chunks it multiplies, so the scheduler places
 * it by their bytes.
 *
 * FACTOR (TSQR, Demmel et al.): the input (M x N, one column chunk) is factorised bottom-up:
 *   level 0: one QR per group of consecutive row chunks (a chunk alone when it has >= N rows;
 *            smaller chunks are stacked with their successors until the group has >= N rows);
 *   level l: one QR per group of at most F stacked R factors of level l - 1 (F from the size of
 *            an N x N factor, at most GS_KERNEL_MAX_TERMS), until one group is left: the top.
 * For an SVD the top is an SVD of the stacked R factors instead of a QR. Q (or U) is assembled
 * top-down: the multiplier of a group is the slice of its parent's Q belonging to it times the
 * parent's multiplier (one GEMM per group below the top's children; the top's children use a
 * view of the top output directly), and each Q chunk is its rows of the level-0 Q times its
 * group's multiplier. R, S and Vt are views of the top output, copied out.
 *
 * The factorisation of one input is built once per lowering: the first FACTOR node of an
 * (input, op) pair builds the tree, the Q chain if any Q/U part is used, and one layer per used
 * part, in part order; the other parts of the same pair find their layer from the first one. */
#include "graph/linalg_int.h"
#include "graph/lower_int.h"

#include <stdio.h>
#include <string.h>

#define GS__MM_GROUP 8
/* Elements of a stacked block of R factors above which the fan-in stops growing (>= 2). */
#define GS__TSQR_STACK_ELEMS (INT64_C(1) << 25)
#define TS_MAXLEV 64

/* ---- building LINALG layers ---- */

typedef struct lb {
    lw_t *w;
    GS_VEC(gs__lablk_t) blk;
    GS_VEC(int64_t) lens;
    GS_VEC(gs__laview_t) views;
    GS_VEC(lw_ref_t) refs;          /* parallel to lens */
    gs_status_t st;
} lb_t;

static void lb_init(lb_t *b, lw_t *w)
{
    memset(b, 0, sizeof(*b));
    b->w = w;
}

static void lb_cleanup(lb_t *b)
{
    GS_VEC_FREE(&b->blk);
    GS_VEC_FREE(&b->lens);
    GS_VEC_FREE(&b->views);
    GS_VEC_FREE(&b->refs);
}

static void lb_nomem(lb_t *b)
{
    if (b->st == GS_OK) b->st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
}

static void lb_block(lb_t *b, int32_t op, int64_t m, int64_t n)
{
    gs__lablk_t k;
    if (b->st != GS_OK) return;
    memset(&k, 0, sizeof(k));
    k.op = op;
    k.m = m;
    k.n = n;
    k.alpha = 1.0;
    k.in_first = b->lens.len;
    k.view_first = b->views.len;
    if (GS_VEC_PUSH(&b->blk, k) != GS_OK) lb_nomem(b);
}

/* Slot of input @a r (of @a len elements) in the current block, added if new. */
static int32_t lb_input(lb_t *b, lw_ref_t r, int64_t len)
{
    gs__lablk_t *k;
    if (b->st != GS_OK) return 0;
    k = &b->blk.data[b->blk.len - 1];
    for (int32_t i = 0; i < k->nin; i++) {
        const lw_ref_t *o = &b->refs.data[k->in_first + (uint64_t)i];
        if (o->layer == r.layer && o->block == r.block) return i;
    }
    if (GS_VEC_PUSH(&b->lens, len) != GS_OK || GS_VEC_PUSH(&b->refs, r) != GS_OK) {
        lb_nomem(b);
        return 0;
    }
    return k->nin++;
}

static void lb_view(lb_t *b, int32_t slot, int64_t off, int64_t rows, int64_t cols, int64_t ld,
                    int32_t trans)
{
    gs__laview_t v;
    if (b->st != GS_OK) return;
    v.slot = slot;
    v.trans = trans;
    v.off = off;
    v.rows = rows;
    v.cols = cols;
    v.ld = ld;
    if (GS_VEC_PUSH(&b->views, v) != GS_OK) {
        lb_nomem(b);
        return;
    }
    b->blk.data[b->blk.len - 1].nview++;
}

static gs_status_t lb_unit_grid(gs_grid_t *g, uint64_t nb)
{
    memset(g, 0, sizeof(*g));
    g->ndim = 1;
    g->shape[0] = (int64_t)nb;
    g->nchunks[0] = (int64_t)nb;
    if (gs__grid_alloc(g) != GS_OK) return GS_ERR_NO_MEMORY;
    for (uint64_t i = 0; i <= nb; i++) g->bounds[0][i] = (int64_t)i;
    return GS_OK;
}

/* Turn the blocks gathered in @a b into a layer over @a grid (NULL: a 1-D grid of unit chunks,
 * one per block); *li_p its index. @a b is emptied. */
static gs_status_t lb_finish(lb_t *b, const gs_grid_t *grid, int64_t *li_p)
{
    gs_layer_t *l;
    uint64_t nb = b->blk.len, *xoff = NULL;
    lw_ref_t *xrefs = NULL;
    const char *why = NULL;
    gs_status_t st;
    int64_t li;
    if (b->st != GS_OK) return b->st;
    l = gs__layer_new(GS_LAYER_LINALG);
    if (l == NULL) goto nomem;
    st = grid != NULL ? gs_grid_copy(&l->grid, grid) : lb_unit_grid(&l->grid, nb);
    if (st != GS_OK) {
        gs_layer_free(l);
        goto nomem;
    }
    l->u.la.blk = b->blk.data;
    l->u.la.nblk = nb;
    l->u.la.in_len = b->lens.data;
    l->u.la.nin = b->lens.len;
    l->u.la.views = b->views.data;
    l->u.la.nview = b->views.len;
    memset(&b->blk, 0, sizeof(b->blk));
    memset(&b->lens, 0, sizeof(b->lens));
    memset(&b->views, 0, sizeof(b->views));
    gs__la_settle(l);
    if (!gs__grid_check(&l->grid, &why) || !gs__la_check(l, &why)) {
        gs_layer_free(l);
        GS_VEC_FREE(&b->refs);
        return gs_error_set(GS_ERR_INTERNAL, "lowering built a bad linalg layer: %s", why);
    }
    xoff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(uint64_t)), "linalg xoff");
    if (xoff == NULL) {
        gs_layer_free(l);
        goto nomem;
    }
    for (uint64_t i = 0; i < nb; i++) xoff[i] = l->u.la.blk[i].in_first;
    xoff[nb] = l->u.la.nin;
    xrefs = b->refs.data;
    if (xrefs == NULL) xrefs = gs_malloc(sizeof(lw_ref_t), "linalg xrefs");
    memset(&b->refs, 0, sizeof(b->refs));
    if (xrefs == NULL) {
        gs_free(xoff);
        gs_layer_free(l);
        goto nomem;
    }
    if ((st = gs__lw_add_layer(b->w, l, &li)) != GS_OK) {
        gs_free(xoff);
        gs_free(xrefs);
        return st;
    }
    if ((st = gs__lw_set_inputs(b->w, li, xoff, xrefs)) != GS_OK) return st;
    *li_p = li;
    return GS_OK;
nomem:
    lb_cleanup(b);
    return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
}

static lw_ref_t lb_ref(int64_t layer, uint64_t block)
{
    lw_ref_t r;
    r.layer = layer;
    r.block = block;
    return r;
}

static int64_t lb_chunk_len(const gs_grid_t *g, uint64_t block)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    gs_grid_block_region(g, block, start, shape);
    return gs_region_size(g->ndim, shape);
}

/* ---- matmul ---- */

/* Operand k of a MATMUL node as a logical 2-D matrix (a 1-D a is 1 x K, a 1-D b is K x 1). */
typedef struct mm_opnd {
    const struct gs_array *x;
    int64_t node;
    int trans, nd, k;
    int64_t nr, nc;                 /* logical chunk counts */
    const int64_t *rb, *cb;         /* logical chunk bounds */
} mm_opnd_t;

static const int64_t mm_unit_bounds[2] = {0, 1};

static void mm_opnd_init(const lw_t *w, const lw_node_t *e, int k, mm_opnd_t *o)
{
    const struct gs_array *n = e->n;
    o->x = n->in[k];
    o->node = e->in[k];
    o->trans = n->u.mm.trans[k];
    o->nd = n->u.mm.nd[k];
    o->k = k;
    (void)w;
    if (o->nd == 1) {
        if (k == 0) {
            o->nr = 1, o->rb = mm_unit_bounds;
            o->nc = o->x->grid.nchunks[0], o->cb = o->x->grid.bounds[0];
        } else {
            o->nr = o->x->grid.nchunks[0], o->rb = o->x->grid.bounds[0];
            o->nc = 1, o->cb = mm_unit_bounds;
        }
    } else {
        int r = o->trans ? 1 : 0, c = o->trans ? 0 : 1;
        o->nr = o->x->grid.nchunks[r], o->rb = o->x->grid.bounds[r];
        o->nc = o->x->grid.nchunks[c], o->cb = o->x->grid.bounds[c];
    }
}

/* Add logical chunk (i, t) of operand @a o to the current block as a view. */
static void mm_add_view(lb_t *b, const mm_opnd_t *o, int64_t i, int64_t t)
{
    uint64_t blk;
    int64_t rows, cols;
    int32_t slot;
    if (o->nd == 1) {
        blk = (uint64_t)(o->k == 0 ? t : i);
        rows = o->k == 0 ? 1 : o->rb[i + 1] - o->rb[i];
        cols = o->k == 0 ? o->cb[t + 1] - o->cb[t] : 1;
    } else if (!o->trans) {
        blk = (uint64_t)(i * o->nc + t);
        rows = o->rb[i + 1] - o->rb[i];
        cols = o->cb[t + 1] - o->cb[t];
    } else {
        /* logical (i, t) is chunk (t, i) of x, read transposed */
        blk = (uint64_t)(t * o->nr + i);
        rows = o->cb[t + 1] - o->cb[t];
        cols = o->rb[i + 1] - o->rb[i];
    }
    slot = lb_input(b, gs__lw_node_ref(b->w, o->node, blk), lb_chunk_len(&o->x->grid, blk));
    lb_view(b, slot, 0, rows, cols, cols, o->trans);
}

gs_status_t gs__lw_build_matmul(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const struct gs_array *n = e->n;
    mm_opnd_t A, B;
    lb_t b;
    int64_t nI, nJ, nK, ng, prev, li;
    uint64_t nout;
    gs_status_t st;
    mm_opnd_init(w, e, 0, &A);
    mm_opnd_init(w, e, 1, &B);
    nI = A.nr, nJ = B.nc, nK = A.nc;
    gs_assert_always(B.nr == nK);
    nout = (uint64_t)(nI * nJ);
    gs_assert_always(nout == gs_grid_nblocks(&n->grid));
    ng = (nK + GS__MM_GROUP - 1) / GS__MM_GROUP;
    lb_init(&b, w);
    for (int64_t i = 0; i < nI; i++) {
        for (int64_t j = 0; j < nJ; j++) {
            int64_t m = A.rb[i + 1] - A.rb[i], nn = B.cb[j + 1] - B.cb[j];
            for (int64_t g = 0; g < ng; g++) {
                lb_block(&b, GS__LA_GEMM, m, nn);
                if (m == 0 || nn == 0) continue;
                for (int64_t t = g * nK / ng; t < (g + 1) * nK / ng; t++) {
                    if (A.cb[t + 1] == A.cb[t]) continue;   /* empty contraction: adds 0 */
                    mm_add_view(&b, &A, i, t);
                    mm_add_view(&b, &B, t, j);
                }
            }
        }
    }
    if ((st = lb_finish(&b, ng == 1 ? &n->grid : NULL, &prev)) != GS_OK) goto out;
    /* sum tree over the groups of each output block */
    while (ng > 1) {
        int64_t ng2 = (ng + GS__MM_GROUP - 1) / GS__MM_GROUP;
        for (uint64_t o = 0; o < nout; o++) {
            int64_t i = (int64_t)o / nJ, j = (int64_t)o % nJ;
            int64_t m = A.rb[i + 1] - A.rb[i], nn = B.cb[j + 1] - B.cb[j];
            for (int64_t g = 0; g < ng2; g++) {
                lb_block(&b, GS__LA_SUM, m, nn);
                for (int64_t c = g * ng / ng2; c < (g + 1) * ng / ng2; c++)
                    lb_input(&b, lb_ref(prev, o * (uint64_t)ng + (uint64_t)c), m * nn);
            }
        }
        if ((st = lb_finish(&b, ng2 == 1 ? &n->grid : NULL, &li)) != GS_OK) goto out;
        prev = li;
        ng = ng2;
    }
    *idx_p = prev;
out:
    lb_cleanup(&b);
    return st;
}

/* ---- TSQR ---- */

typedef struct ts_plan {
    int64_t n;                       /* columns */
    int64_t nblk;                    /* input row chunks */
    const int64_t *rb;               /* input row bounds */
    int nlev;
    int64_t ng[TS_MAXLEV];           /* groups per level */
    int64_t *first[TS_MAXLEV];       /* [ng + 1]: children of group g: [first[g], first[g + 1]) */
    int64_t *m[TS_MAXLEV];           /* [ng]: stacked rows */
    int64_t *grp;                    /* [nblk]: level-0 group of each input chunk */
    int64_t *lo;                     /* [nblk]: its first row inside the group */
} ts_plan_t;

static void ts_plan_free(ts_plan_t *p)
{
    for (int l = 0; l < p->nlev; l++) {
        gs_free(p->first[l]);
        gs_free(p->m[l]);
    }
    gs_free(p->grp);
    gs_free(p->lo);
    memset(p, 0, sizeof(*p));
}

/* Plan the TSQR tree of an M x N grid with one column chunk (M >= N >= 1 checked by the caller).
 * GS_ERR_INVALID_PARAM when row chunks are so small that a level-0 group would stack more than
 * GS_KERNEL_MAX_TERMS chunks. */
static gs_status_t ts_plan(const gs_grid_t *g, ts_plan_t *p)
{
    const int64_t nb = g->nchunks[0], n = g->shape[1];
    int64_t ng = 0, rows = 0, cnt, f;
    memset(p, 0, sizeof(*p));
    p->n = n;
    p->nblk = nb;
    p->rb = g->bounds[0];
    p->nlev = 1;
    p->first[0] = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "tsqr plan");
    p->grp = gs_malloc(gs_size_mul((size_t)nb, sizeof(int64_t)), "tsqr plan");
    p->lo = gs_malloc(gs_size_mul((size_t)nb, sizeof(int64_t)), "tsqr plan");
    if (p->first[0] == NULL || p->grp == NULL || p->lo == NULL) goto nomem;
    p->first[0][0] = 0;
    for (int64_t i = 0; i < nb; i++) {
        rows += p->rb[i + 1] - p->rb[i];
        if (rows >= n) {
            p->first[0][++ng] = i + 1;
            rows = 0;
        }
    }
    if (rows > 0 || ng == 0) {
        if (ng == 0) ng = 1;         /* M < N: the caller rejects it first */
        p->first[0][ng] = nb;        /* short tail joins the last group */
    }
    p->ng[0] = ng;
    p->m[0] = gs_malloc(gs_size_mul((size_t)ng, sizeof(int64_t)), "tsqr plan");
    if (p->m[0] == NULL) goto nomem;
    for (int64_t k = 0; k < ng; k++) {
        int64_t a = p->first[0][k], z = p->first[0][k + 1];
        if (z - a > GS_KERNEL_MAX_TERMS) {
            gs_status_t st = gs_error_set(
                GS_ERR_INVALID_PARAM,
                "tsqr: row chunks of %lld rows are too small for %lld columns (a QR would stack "
                "%lld of them, at most %d); rechunk the rows to at least %lld rows per chunk",
                (long long)(p->rb[a + 1] - p->rb[a]), (long long)n, (long long)(z - a),
                GS_KERNEL_MAX_TERMS, (long long)n);
            ts_plan_free(p);
            return st;
        }
        p->m[0][k] = p->rb[z] - p->rb[a];
        for (int64_t i = a; i < z; i++) {
            p->grp[i] = k;
            p->lo[i] = p->rb[i] - p->rb[a];
        }
    }
    /* fan-in of the upper levels */
    f = GS__TSQR_STACK_ELEMS / n / n;
    if (f < 2) f = 2;
    if (f > GS_KERNEL_MAX_TERMS) f = GS_KERNEL_MAX_TERMS;
    cnt = ng;
    while (cnt > 1) {
        int l = p->nlev;
        int64_t ng2 = (cnt + f - 1) / f;
        gs_assert_always(l < TS_MAXLEV);
        p->first[l] = gs_malloc(gs_size_mul((size_t)ng2 + 1, sizeof(int64_t)), "tsqr plan");
        p->m[l] = gs_malloc(gs_size_mul((size_t)ng2, sizeof(int64_t)), "tsqr plan");
        p->nlev++;
        if (p->first[l] == NULL || p->m[l] == NULL) goto nomem;
        for (int64_t k = 0; k <= ng2; k++) p->first[l][k] = k * cnt / ng2;
        for (int64_t k = 0; k < ng2; k++) p->m[l][k] = (p->first[l][k + 1] - p->first[l][k]) * n;
        p->ng[l] = ng2;
        cnt = ng2;
    }
    return GS_OK;
nomem:
    ts_plan_free(p);
    return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
}

gs_status_t gs__tsqr_check(const gs_grid_t *g)
{
    ts_plan_t p;
    gs_status_t st = ts_plan(g, &p);
    if (st == GS_OK) ts_plan_free(&p);
    return st;
}

/* Parent of group @a g of level @a l (l + 1 < nlev) and its position among the parent's
 * children. */
static void ts_parent(const ts_plan_t *p, int l, int64_t g, int64_t *par_p, int64_t *pos_p)
{
    const int64_t *f = p->first[l + 1];
    int64_t lo = 0, hi = p->ng[l + 1] - 1;
    while (lo < hi) {   /* last parent with first <= g */
        int64_t mid = (lo + hi + 1) / 2;
        if (f[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    *par_p = lo;
    *pos_p = g - f[lo];
}

/* Add the multiplier (n x n) of group @a g of level @a l to the current block as a view. */
static void ts_add_mult(lb_t *b, const ts_plan_t *p, const int64_t *L, int64_t top_len,
                        const int64_t *D, int l, int64_t g)
{
    const int64_t n = p->n;
    int64_t par, pos;
    int32_t slot;
    ts_parent(p, l, g, &par, &pos);
    if (l + 1 == p->nlev - 1) {
        slot = lb_input(b, lb_ref(L[p->nlev - 1], 0), top_len);
        lb_view(b, slot, pos * n * n, n, n, n, 0);
    } else {
        slot = lb_input(b, lb_ref(D[l], (uint64_t)g), n * n);
        lb_view(b, slot, 0, n, n, n, 0);
    }
}

static int64_t ts_qr_len(int64_t m, int64_t n)
{
    return gs_klinalg_out_len(GS_LA_QR, m, n);
}

/* Finish the layer of part @a part: its grid is the part node's grid. */
static gs_status_t ts_finish_part(lb_t *b, const struct gs_array *x, int32_t op, int part,
                                  int64_t *li_p)
{
    gs_grid_t g;
    gs_status_t st;
    memset(&g, 0, sizeof(g));
    if (gs__factor_grid(x, op, part, &g) != GS_OK) {
        lb_cleanup(b);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    }
    st = lb_finish(b, &g, li_p);
    gs_grid_cleanup(&g);
    return st;
}

/* ---- the Gram-based SVD ---- */

/* Whether the SVD of grid @a g (M x N, one column chunk) takes the Gram path: tall (M >= 2N).
 * Square-ish inputs keep the TSQR (one SVD kernel for a single chunk). */
static int gs__gram_svd_wanted(const gs_grid_t *g)
{
    return g->shape[0] >= 2 * g->shape[1] && g->shape[1] >= 1;
}

/* Rows from which a GRAM task takes one row chunk alone: a task per chunk keeps the work where
 * the chunk lives; smaller chunks are grouped (up to GS_KERNEL_MAX_TERMS) until they reach it. */
#define GS__GRAM_GROUP_ROWS 65536

/* Sum the @a ng blocks (each n x n) of layer @a prev down to at most GS_KERNEL_MAX_TERMS, which
 * the GSTEP task adds itself (no SUM task, and no barrier, when there are no more), fan-in
 * GS_KERNEL_MAX_COMBINE; the layer holding the partial sums in *li_p (blocks 0 .. *ng_p). */
static gs_status_t gs__gram_sum(lb_t *b, int64_t prev, int64_t ng, int64_t n, int64_t *li_p,
                                int64_t *ng_p)
{
    gs_status_t st;
    while (ng > GS_KERNEL_MAX_TERMS) {
        int64_t ng2 = (ng + GS_KERNEL_MAX_COMBINE - 1) / GS_KERNEL_MAX_COMBINE, li;
        for (int64_t g = 0; g < ng2; g++) {
            lb_block(b, GS__LA_SUM, n, n);
            for (int64_t c = g * ng / ng2; c < (g + 1) * ng / ng2; c++)
                lb_input(b, lb_ref(prev, (uint64_t)c), n * n);
        }
        if ((st = lb_finish(b, NULL, &li)) != GS_OK) return st;
        prev = li;
        ng = ng2;
    }
    *li_p = prev;
    *ng_p = ng;
    return GS_OK;
}

/* Add the state (block 0 of layer @a layer) as the block's last view. */
static void gs__gram_state_view(lb_t *b, int64_t layer, int64_t n)
{
    const int64_t slen = GS_LA_STATE_LEN(n);
    int32_t slot = lb_input(b, lb_ref(layer, 0), slen);
    lb_view(b, slot, 0, 1, slen, slen, 0);
}

/* Add row chunk @a i of the pass source (the input node when @a src < 0, else block i of layer
 * @a src) as a piece. */
static void gs__gram_piece(lb_t *b, int64_t in_node, int64_t src, const gs_grid_t *g, int64_t i)
{
    const int64_t n = g->shape[1], r = g->bounds[0][i + 1] - g->bounds[0][i];
    lw_ref_t ref = src < 0 ? gs__lw_node_ref(b->w, in_node, (uint64_t)i) : lb_ref(src, (uint64_t)i);
    int32_t slot = lb_input(b, ref, r * n);
    lb_view(b, slot, 0, r, n, n, 0);
}

/* The SVD of x (M x N, M >= 2N, one column chunk) in three Gram passes (graph/kernel.h
 * GS_LA_GSTEP; docs/ARCHITECTURE.md "Tall SVD"): per pass p, GRAM tasks over the row chunks of
 * the pass source (x, then Y_1, Y_2; one chunk per task, small ones grouped), a sum down to at
 * most GS_KERNEL_MAX_TERMS partial Grams (none for up to that many GRAM tasks), one GSTEP task
 * (state S_p), and per row chunk an APPLY task Y_p = source T_p. Y_3 is U; S and Vt are views
 * of S_3. On the fast path the Grams of passes 2 and 3 are skipped, the APPLY tasks of passes 1
 * and 2 do nothing, and pass 3 multiplies x (its APPLY tasks read x beside Y_2). Layers are built
 * in the order the TSQR uses (one per used part, in part order, last). */
static gs_status_t gs__lw_build_svd_gram(lw_t *w, const struct gs_array *x, int64_t in_node,
                                         const int *need, int part, int64_t *idx_p)
{
    const gs_grid_t *g = &x->grid;
    const int64_t nb = g->nchunks[0], n = g->shape[1], M = g->shape[0];
    int64_t src = -1, state = -1, part_layer[3] = {-1, -1, -1}, ng = 0, rows = 0;
    int64_t *gb = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(int64_t)), "gram groups");
    gs_status_t st = GS_OK;
    lb_t b;
    lb_init(&b, w);
    if (gb == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    /* GRAM groups: [gb[k], gb[k + 1]) */
    gb[0] = 0;
    for (int64_t i = 0; i < nb; i++) {
        rows += g->bounds[0][i + 1] - g->bounds[0][i];
        if (rows >= GS__GRAM_GROUP_ROWS || i + 1 - gb[ng] == GS_KERNEL_MAX_TERMS || i + 1 == nb) {
            gb[++ng] = i + 1;
            rows = 0;
        }
    }
    for (int p = 1; p <= 3; p++) {
        int64_t gl, gsum, nsum, y = -1;
        for (int64_t k = 0; k < ng; k++) {
            int64_t lo = gb[k], hi = gb[k + 1];
            lb_block(&b, GS__LA_GRAM, g->bounds[0][hi] - g->bounds[0][lo], n);
            if (b.st == GS_OK) b.blk.data[b.blk.len - 1].alpha = p > 1 ? 1.0 : 0.0;
            for (int64_t i = lo; i < hi; i++) gs__gram_piece(&b, in_node, src, g, i);
            if (p > 1) gs__gram_state_view(&b, state, n);
        }
        if ((st = lb_finish(&b, NULL, &gl)) != GS_OK) goto out;
        if ((st = gs__gram_sum(&b, gl, ng, n, &gsum, &nsum)) != GS_OK) goto out;
        lb_block(&b, GS__LA_GSTEP, M, n);
        if (b.st == GS_OK) b.blk.data[b.blk.len - 1].alpha = (double)p;
        for (int64_t c = 0; c < nsum; c++)
            lb_view(&b, lb_input(&b, lb_ref(gsum, (uint64_t)c), n * n), 0, n, n, n, 0);
        if (p > 1) gs__gram_state_view(&b, state, n);
        if ((st = lb_finish(&b, NULL, &state)) != GS_OK) goto out;
        if (p == 3 && !need[GS__FAC_U]) break;
        for (int64_t i = 0; i < nb; i++) {
            lb_block(&b, GS__LA_APPLY, g->bounds[0][i + 1] - g->bounds[0][i], n);
            gs__gram_piece(&b, in_node, src, g, i);
            /* alpha 1: x as the alternative stack (the fast path's GEMM reads x itself) */
            if (b.st == GS_OK) b.blk.data[b.blk.len - 1].alpha = p == 3 ? 1.0 : 0.0;
            if (p == 3) gs__gram_piece(&b, in_node, -1, g, i);
            gs__gram_state_view(&b, state, n);
        }
        if (p < 3) st = lb_finish(&b, NULL, &y);
        else st = ts_finish_part(&b, x, GS_LA_SVD, GS__FAC_U, &part_layer[GS__FAC_U]);
        if (st != GS_OK) goto out;
        src = y;
    }
    for (int k = GS__FAC_S; k <= GS__FAC_VT; k++) {
        int32_t slot;
        if (!need[k]) continue;
        lb_block(&b, GS__LA_COPY, k == GS__FAC_S ? 1 : n, n);
        slot = lb_input(&b, lb_ref(state, 0), GS_LA_STATE_LEN(n));
        lb_view(&b, slot, k == GS__FAC_S ? GS_LA_STATE_S(n) : GS_LA_STATE_VT(n),
                k == GS__FAC_S ? 1 : n, n, n, 0);
        if ((st = ts_finish_part(&b, x, GS_LA_SVD, k, &part_layer[k])) != GS_OK) goto out;
    }
    *idx_p = part_layer[part];
out:
    gs_free(gb);
    lb_cleanup(&b);
    return st;
}

gs_status_t gs__lw_build_factor(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const struct gs_array *n = e->n, *x = n->in[0];
    const int64_t in_node = e->in[0];
    const int32_t op = n->u.fac.op;
    int need[3] = {0, 0, 0}, rank[3];
    int64_t first = -1, L[TS_MAXLEV], D[TS_MAXLEV], part_layer[3] = {-1, -1, -1};
    int64_t top_len, mtop, nn;
    ts_plan_t p;
    lb_t b;
    gs_status_t st;
    int top;

    for (int i = 0; i < TS_MAXLEV; i++) L[i] = D[i] = -1;   /* levels are filled bottom-up */

    for (int64_t j = 0; j < w->nnodes; j++) {
        const lw_node_t *o = &w->nodes[j];
        if (o->pidx >= 0 || !o->materialised || o->n->kind != GS__NODE_FACTOR ||
            o->in[0] != in_node || o->n->u.fac.op != op)
            continue;
        need[o->n->u.fac.part] = 1;
        if (first < 0) first = j;
    }
    gs_assert_always(first >= 0 && first <= idx && need[n->u.fac.part]);
    for (int k = 0, r = 0; k < 3; k++) rank[k] = need[k] ? r++ : -1;
    if (first < idx) {
        /* built with the first part of this factorisation */
        const lw_node_t *f = &w->nodes[first];
        gs_assert_always(f->layer >= 0);
        *idx_p = f->layer - rank[f->n->u.fac.part] + rank[n->u.fac.part];
        return GS_OK;
    }

    if (op == GS_LA_SVD && (w->flags & GS_LOWER_GRAM_SVD) && gs__gram_svd_wanted(&x->grid))
        return gs__lw_build_svd_gram(w, x, in_node, need, n->u.fac.part, idx_p);
    if ((st = ts_plan(&x->grid, &p)) != GS_OK) return st;
    nn = p.n;
    top = p.nlev - 1;
    mtop = p.m[top][0];
    top_len = gs_klinalg_out_len(op == GS_LA_SVD ? GS_LA_SVD : GS_LA_QR, mtop, nn);
    lb_init(&b, w);
    /* bottom-up factorisation levels */
    for (int l = 0; l < p.nlev; l++) {
        int32_t lop = l == top && op == GS_LA_SVD ? GS__LA_SVD : GS__LA_QR;
        for (int64_t g = 0; g < p.ng[l]; g++) {
            lb_block(&b, lop, p.m[l][g], nn);
            for (int64_t c = p.first[l][g]; c < p.first[l][g + 1]; c++) {
                int32_t slot;
                if (l == 0) {
                    int64_t r = p.rb[c + 1] - p.rb[c];
                    slot = lb_input(&b, gs__lw_node_ref(w, in_node, (uint64_t)c), r * nn);
                    lb_view(&b, slot, 0, r, nn, nn, 0);
                } else {
                    int64_t mc = p.m[l - 1][c];
                    slot = lb_input(&b, lb_ref(L[l - 1], (uint64_t)c), ts_qr_len(mc, nn));
                    lb_view(&b, slot, mc * nn, nn, nn, nn, 0);
                }
            }
        }
        if ((st = lb_finish(&b, NULL, &L[l])) != GS_OK) goto out;
    }
    if (need[GS__FAC_Q]) {
        /* multipliers of the groups below the top's children, top-down */
        for (int l = p.nlev - 3; l >= 0; l--) {
            for (int64_t g = 0; g < p.ng[l]; g++) {
                int64_t par, pos;
                int32_t slot;
                ts_parent(&p, l, g, &par, &pos);
                lb_block(&b, GS__LA_GEMM, nn, nn);
                slot = lb_input(&b, lb_ref(L[l + 1], (uint64_t)par), ts_qr_len(p.m[l + 1][par], nn));
                lb_view(&b, slot, pos * nn * nn, nn, nn, nn, 0);
                ts_add_mult(&b, &p, L, top_len, D, l + 1, par);
            }
            if ((st = lb_finish(&b, NULL, &D[l])) != GS_OK) goto out;
        }
        /* Q (U) chunks */
        for (int64_t i = 0; i < p.nblk; i++) {
            int64_t r = p.rb[i + 1] - p.rb[i], g = p.grp[i];
            int64_t len = top == 0 ? top_len : ts_qr_len(p.m[0][g], nn);
            int32_t slot;
            lb_block(&b, top == 0 ? GS__LA_COPY : GS__LA_GEMM, r, nn);
            slot = lb_input(&b, lb_ref(L[0], (uint64_t)g), len);
            lb_view(&b, slot, p.lo[i] * nn, r, nn, nn, 0);
            if (top > 0) ts_add_mult(&b, &p, L, top_len, D, 0, g);
        }
        if ((st = ts_finish_part(&b, x, op, GS__FAC_Q, &part_layer[0])) != GS_OK) goto out;
    }
    for (int k = 1; k < 3; k++) {
        int32_t slot;
        if (!need[k]) continue;
        if (k == GS__FAC_S) {
            lb_block(&b, GS__LA_COPY, op == GS_LA_SVD ? 1 : nn, nn);   /* S, or R */
        } else {
            lb_block(&b, GS__LA_COPY, nn, nn);                         /* Vt */
        }
        slot = lb_input(&b, lb_ref(L[top], 0), top_len);
        lb_view(&b, slot, mtop * nn + (k == GS__FAC_VT ? nn : 0), op == GS_LA_SVD && k == 1 ? 1 : nn,
                nn, nn, 0);
        if ((st = ts_finish_part(&b, x, op, k, &part_layer[k])) != GS_OK) goto out;
    }
    *idx_p = part_layer[n->u.fac.part];
    st = GS_OK;
out:
    lb_cleanup(&b);
    ts_plan_free(&p);
    return st;
}

int gs_graph_lower_retry_flags(unsigned flags, gs_status_t st, const char *msg,
                               unsigned *flags_p)
{
    if (!(flags & GS_LOWER_GRAM_SVD) || msg == NULL) return 0;
    if (st != GS_ERR_NUMERIC && st != GS_ERR_TASK_FAILED) return 0;
    if (strstr(msg, GS_LA_GRAM_REFUSED) == NULL) return 0;
    *flags_p = flags & ~GS_LOWER_GRAM_SVD;
    return 1;
}
