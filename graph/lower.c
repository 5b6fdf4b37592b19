/* Lowering an expression DAG to a task graph.
 *
 * 0. With GS_LOWER_SLICE_PUSHDOWN, rewrite the expression so slices and transposes sit below
 *    elementwise nodes (pushdown.c): a slice above `x + 1` then slices x, so a generator under it
 *    produces only the kept elements even when nothing is fused.
 * 1. Collect the nodes reachable from the result (iterative DFS, post-order = topological order),
 *    not descending into persisted nodes, and count each node's consumers.
 * 2. Decide, per edge (consumer, input), whether the input is inlined into the consumer's
 *    kernel or read as a materialised chunk:
 *      fused:   inline unless the input is persisted, a reduction, host data, or a blockwise node
 *               with several consumers (generators, and slices/transposes of generators or of
 *               materialised chunks, are always inlined: they only address their input);
 *      unfused: inline only a generator (or a pushed-down slice/transpose of one) into a
 *               slice/transpose when GS_LOWER_SLICE_PUSHDOWN is set.
 *    Kernel limits (program length, leaves, stack) are checked bottom-up; an edge that would
 *    exceed them is materialised instead. Fused, a user kernel declared elementwise inlines
 *    its blockwise producers and is inlined into its one consumer (lower_fuse_user.c).
 * 3. Build layers in topological order for every materialised node: FUSED STORE for blockwise
 *    groups, FUSED REDUCE + COMBINE tree for reductions, LITERAL for host data. Leaves carry an
 *    affine map from the group's output coordinates to the leaf array's coordinates.
 *    A FUSED program that reads a user kernel's output becomes a fused USER layer (producers,
 *    kernel, this program: one task per block; lower_fuse_user.c).
 * 4. (lower_tasks.c) Mark needed blocks from the result backwards (GS_LOWER_CULL; otherwise all blocks), drop
 *    layers without tasks, number tasks layer by layer (topological) and emit dependencies.
 */
#include "common/hashmap.h"
#include "common/vec.h"
#include "graph/lower_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- 1. collect ---- */

/* Persisted-key snapshots taken while walking: the snapshot, not a later look, decides that
 * a node is a leaf, so a concurrent persist/unpersist on another thread cannot leave a node
 * whose inputs were skipped. */
typedef struct lw_snap {
    gs_u64map_t by_id;      /* node id -> index + 1 in keys */
    GS_VEC(lw_persist_t) keys;
} lw_snap_t;

static gs_status_t lw_leaf(struct gs_array *n, void *arg, int *is_leaf_p)
{
    lw_snap_t *sn = arg;
    lw_persist_t p;
    gs_status_t st;
    memset(&p, 0, sizeof(p));
    if ((st = gs__array_persist_snapshot(n, &p.nblocks, &p.keys)) != GS_OK) return st;
    *is_leaf_p = p.keys != NULL;
    if (p.keys == NULL) return GS_OK;
    if (GS_VEC_PUSH(&sn->keys, p) != GS_OK ||
        gs_u64map_put(&sn->by_id, n->id, sn->keys.len) != GS_OK) {
        if (sn->keys.len == 0 || sn->keys.data[sn->keys.len - 1].keys != p.keys) gs_free(p.keys);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    }
    return GS_OK;
}

static gs_status_t lw_collect(lw_t *w, size_t nroots, struct gs_array *const *roots)
{
    gs__expr_topo_t t;
    lw_snap_t sn;
    gs_status_t st;

    memset(&sn, 0, sizeof(sn));
    gs_u64map_init(&sn.by_id);
    if ((st = gs__expr_topo_many(nroots, roots, lw_leaf, &sn, &t, w->roots)) != GS_OK) goto out;
    w->nnodes = t.nnodes;
    w->nodes = gs_calloc((size_t)t.nnodes, sizeof(lw_node_t), "lower nodes");
    w->pers = gs_calloc(sn.keys.len + 1, sizeof(lw_persist_t), "lower persisted");
    if (w->nodes == NULL || w->pers == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
        goto out;
    }
    w->npers = 0;
    for (int64_t i = 0; i < t.nnodes; i++) {
        lw_node_t *e = &w->nodes[i];
        uint64_t v;
        e->n = t.nodes[i];
        e->layer = -1;
        e->pidx = -1;
        e->in[0] = t.in[i][0];
        e->in[1] = t.in[i][1];
        e->in[2] = t.in[i][2];
        if (!t.leaf[i]) continue;
        gs_assert_always(gs_u64map_get(&sn.by_id, e->n->id, &v) && v >= 1);
        w->pers[w->npers] = sn.keys.data[v - 1];
        sn.keys.data[v - 1].keys = NULL;          /* moved */
        w->pers[w->npers].node = i;
        e->pidx = w->npers++;
    }
    for (size_t r = 0; r < nroots; r++) w->nodes[w->roots[r]].root = 1;
out:
    for (size_t i = 0; i < sn.keys.len; i++) gs_free(sn.keys.data[i].keys);
    GS_VEC_FREE(&sn.keys);
    gs_u64map_cleanup(&sn.by_id);
    gs__expr_topo_cleanup(&t);
    return st;
}

/* ---- 2. decisions ---- */

static int lw_is_layout(const struct gs_array *n)
{
    return n->kind == GS__NODE_SLICE || n->kind == GS__NODE_TRANSPOSE;
}

static int lw_decide_edge(const lw_t *w, const lw_node_t *e, int k)
{
    const lw_node_t *in = &w->nodes[e->in[k]];
    int u;
    if (in->pidx >= 0) return 0;
    /* an elementwise user kernel: its producers and consumers (lower_fuse_user.c) */
    if ((w->flags & GS_LOWER_FUSE) && (u = gs__lw_user_edge(w, e, k)) >= 0) return u;
    /* only fused kernels inline: a reduction's partial kernel and blockwise nodes */
    if (e->n->kind != GS__NODE_REDUCE && !gs__lw_kind_is_blockwise(e->n->kind)) return 0;
    if (w->flags & GS_LOWER_FUSE) {
        if (!gs__lw_kind_is_blockwise(in->n->kind)) return 0;
        return in->cheap || in->uses == 1;
    }
    return (w->flags & GS_LOWER_SLICE_PUSHDOWN) && lw_is_layout(e->n) && in->genlike;
}

static void lw_stats(const lw_t *w, lw_node_t *e)
{
    int32_t p[GS__MAX_INPUTS] = {1, 1, 1}, s[GS__MAX_INPUTS] = {1, 1, 1};
    int32_t l[GS__MAX_INPUTS] = {1, 1, 1};
    for (int32_t k = 0; k < e->n->ninputs; k++) {
        if (e->inl[k]) {
            const lw_node_t *in = &w->nodes[e->in[k]];
            p[k] = in->prog;
            s[k] = in->stack;
            l[k] = in->leaves;
        }
    }
    /* casts the emission adds (lw_cast): to the compute dtype per input, from float64 after
     * a generator */
    const int32_t c = gs__node_compute_dtype(e->n);
    const int32_t gc = e->n->dtype != GS_DTYPE_FLOAT64;
    int32_t ic[GS__MAX_INPUTS] = {0, 0, 0};
    for (int32_t k = 0; k < e->n->ninputs; k++) {
        /* where's condition is read as bool */
        int32_t want = e->n->kind == GS__NODE_WHERE && k == 0 ? GS_DTYPE_BOOL : c;
        ic[k] = e->n->in[k] != NULL && e->n->in[k]->dtype != want;
    }
    switch (e->n->kind) {
    case GS__NODE_NORMAL: case GS__NODE_UNIFORM:
        e->prog = 1 + gc, e->stack = 1, e->leaves = 1;
        break;
    case GS__NODE_FULL:
        e->prog = 1, e->stack = 1, e->leaves = 0;
        break;
    case GS__NODE_ARANGE:
        e->prog = 3 + gc, e->stack = 1, e->leaves = 1;
        break;
    case GS__NODE_UNARY: case GS__NODE_BINARY_SCALAR: case GS__NODE_SCALAR_BINARY:
        e->prog = p[0] + ic[0] + 1, e->stack = s[0], e->leaves = l[0];
        break;
    case GS__NODE_ASTYPE:
        e->prog = p[0] + ic[0], e->stack = s[0], e->leaves = l[0];
        break;
    case GS__NODE_SLICE: case GS__NODE_TRANSPOSE:
        e->prog = p[0], e->stack = s[0], e->leaves = l[0];
        break;
    case GS__NODE_WHERE: {
        int32_t s1 = s[1] + 1, s2 = s[2] + 2;
        e->prog = p[0] + p[1] + p[2] + ic[0] + ic[1] + ic[2] + 1;
        e->stack = s[0] > s1 ? (s[0] > s2 ? s[0] : s2) : (s1 > s2 ? s1 : s2);
        e->leaves = l[0] + l[1] + l[2];
        break;
    }
    case GS__NODE_BINARY:
        e->prog = p[0] + p[1] + ic[0] + ic[1] + 1;
        e->stack = s[0] > s[1] + 1 ? s[0] : s[1] + 1;
        e->leaves = l[0] + l[1];
        break;
    default:   /* literal, reduce: never inlined */
        e->prog = 1, e->stack = 1, e->leaves = 1;
        break;
    }
}

static int lw_over_limits(const lw_node_t *e)
{
    /* a node of another dtype keeps room for the cast to float64 before a reduction */
    return e->prog + (e->n->dtype != GS_DTYPE_FLOAT64) > GS_KERNEL_MAX_PROG || e->stack > GS_KERNEL_MAX_STACK ||
           e->leaves > GS_KERNEL_MAX_LEAVES;
}

static gs_status_t lw_decide(lw_t *w)
{
    gs_status_t st;
    for (int64_t i = 0; i < w->nnodes; i++) {
        lw_node_t *e = &w->nodes[i];
        if (e->pidx >= 0) {
            e->prog = e->stack = e->leaves = 1;
            continue;
        }
        for (int32_t k = 0; k < e->n->ninputs; k++) w->nodes[e->in[k]].uses++;
    }
    /* several roots: each is one more use, so a root another root reads is not inlined there */
    for (size_t r = 0; w->nroots > 1 && r < w->nroots; r++) w->nodes[w->roots[r]].uses++;
    for (int64_t i = 0; i < w->nnodes; i++) {
        lw_node_t *e = &w->nodes[i];
        if (e->pidx >= 0) continue;
        for (int32_t k = 0; k < e->n->ninputs; k++) e->inl[k] = (uint8_t)lw_decide_edge(w, e, k);
        lw_stats(w, e);
        while (lw_over_limits(e)) {
            /* materialise the inlined input with the longest program */
            int best = -1;
            for (int32_t k = 0; k < e->n->ninputs; k++)
                if (e->inl[k] && (best < 0 || w->nodes[e->in[k]].prog > w->nodes[e->in[best]].prog))
                    best = k;
            gs_assert_always(best >= 0);
            e->inl[best] = 0;
            lw_stats(w, e);
        }
        e->genlike = (uint8_t)(gs__node_is_generator(e->n) ||
                               (lw_is_layout(e->n) && e->inl[0] && w->nodes[e->in[0]].genlike));
        e->cheap = (uint8_t)(e->genlike ||
                             (lw_is_layout(e->n) && (!e->inl[0] || w->nodes[e->in[0]].cheap)));
    }
    if ((w->flags & GS_LOWER_FUSE) && (st = gs__lw_user_limit(w)) != GS_OK) return st;
    for (size_t r = 0; r < w->nroots; r++) w->nodes[w->roots[r]].materialised = 1;
    for (int64_t i = 0; i < w->nnodes; i++) {
        lw_node_t *e = &w->nodes[i];
        if (e->pidx >= 0) continue;
        for (int32_t k = 0; k < e->n->ninputs; k++) {
            lw_node_t *in = &w->nodes[e->in[k]];
            if (!e->inl[k] && in->pidx < 0) in->materialised = 1;
        }
    }
    return GS_OK;
}

/* ---- 3. layers ---- */

typedef struct lw_emit {
    lw_t *w;
    gs_layer_t *l;
    lw_layer_t *lw;
    gs_status_t st;
} lw_emit_t;

static void lw_map_identity(gs__lmap_t *m, int32_t nd)
{
    memset(m, 0, sizeof(*m));
    m->ndim = nd;
    for (int32_t a = 0; a < nd; a++) {
        m->step[a] = 1;
        m->perm[a] = a;
    }
}

static int lw_map_eq(const gs__lmap_t *x, const gs__lmap_t *y)
{
    if (x->ndim != y->ndim) return 0;
    for (int32_t a = 0; a < x->ndim; a++)
        if (x->perm[a] != y->perm[a] || x->off[a] != y->off[a] || x->step[a] != y->step[a])
            return 0;
    return 1;
}

/* Append instruction @a op computing in dtype @a dt (graph/kernel.h, "Dtypes"). */
static void lw_push(lw_emit_t *em, int32_t op, int32_t arg, double imm, int32_t dt)
{
    gs_layer_t *l = em->l;
    gs_assert_always(l->u.f.nprog < GS_KERNEL_MAX_PROG);
    l->u.f.prog[l->u.f.nprog].op = op;
    l->u.f.prog[l->u.f.nprog].arg = arg;
    l->u.f.prog[l->u.f.nprog].imm = imm;
    l->u.f.prog[l->u.f.nprog].dtype = dt;
    l->u.f.nprog++;
}

/* Convert the top of the stack from dtype @a from to dtype @a to (nothing when equal). */
static void lw_cast(lw_emit_t *em, int32_t from, int32_t to)
{
    if (from != to) lw_push(em, GS_OP_CAST, to, 0.0, from);
}

static int32_t lw_add_leaf(lw_emit_t *em, const gs__fleaf_t *lf)
{
    gs_layer_t *l = em->l;
    for (int32_t k = 0; k < l->u.f.nleaves; k++) {
        const gs__fleaf_t *o = &l->u.f.leaves[k];
        if (o->kind != lf->kind || o->dtype != lf->dtype || !lw_map_eq(&o->map, &lf->map))
            continue;
        if (lf->kind == GS_LEAF_CHUNK) {
            if (o->src == lf->src) return k;
        } else if (o->seed == lf->seed &&
                   (lf->kind == GS_LEAF_INTEGERS /* p0, p1: int64 bit patterns */
                        ? memcmp(&o->p0, &lf->p0, sizeof(double)) == 0 &&
                              memcmp(&o->p1, &lf->p1, sizeof(double)) == 0
                        : o->p0 == lf->p0 && o->p1 == lf->p1) &&
                   memcmp(o->shape, lf->shape, sizeof(o->shape)) == 0) {
            return k;
        }
    }
    gs_assert_always(l->u.f.nleaves < GS_KERNEL_MAX_LEAVES);
    l->u.f.leaves[l->u.f.nleaves] = *lf;
    return l->u.f.nleaves++;
}

static void lw_chunk_leaf(lw_emit_t *em, int64_t node, const gs__lmap_t *m)
{
    gs_layer_t *l = em->l;
    lw_node_t *e = &em->w->nodes[node];
    gs__fleaf_t lf;
    int32_t s = -1;
    if (em->st != GS_OK) return;
    for (int32_t i = 0; i < l->u.f.nsrc; i++)
        if (em->lw->src_node[i] == node) s = i;
    if (s < 0) {
        gs_assert_always(l->u.f.nsrc < GS_KERNEL_MAX_LEAVES);
        s = l->u.f.nsrc;
        if ((em->st = gs_grid_copy(&l->u.f.srcs[s], &e->n->grid)) != GS_OK) {
            em->st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
            return;
        }
        l->u.f.nsrc++;
        em->lw->src_node[s] = node;
        if (e->pidx >= 0) {
            em->lw->src_ref[s] = -e->pidx - 1;
        } else if (em->lw->user_node == node) {
            em->lw->src_ref[s] = LW_SRC_USER;
        } else {
            gs_assert_always(e->layer >= 0);
            em->lw->src_ref[s] = e->layer;
        }
    }
    memset(&lf, 0, sizeof(lf));
    lf.kind = GS_LEAF_CHUNK;
    lf.src = s;
    lf.map = *m;
    lf.dtype = e->n->dtype;
    lw_push(em, GS_OP_LEAF, lw_add_leaf(em, &lf), 0.0, lf.dtype);
}

/* A random or index leaf of @a kind read by a GS_OP_LEAF of dtype @a dtype (float64 but for the
 * float32 and integer random leaves, graph/kernel.h). */
static void lw_gen_leaf_typed(lw_emit_t *em, int32_t kind, const struct gs_array *n,
                              const gs__lmap_t *m, int32_t dtype)
{
    gs__fleaf_t lf;
    memset(&lf, 0, sizeof(lf));
    lf.kind = kind;
    lf.src = -1;
    for (int32_t a = 0; a < n->grid.ndim; a++) lf.shape[a] = n->grid.shape[a];
    lf.map = *m;
    if (kind != GS_LEAF_INDEX) {
        lf.seed = n->u.gen.seed;
        lf.p0 = n->u.gen.p0;
        lf.p1 = n->u.gen.p1;
    }
    lw_push(em, GS_OP_LEAF, lw_add_leaf(em, &lf), 0.0, dtype);
}

static void lw_gen_leaf(lw_emit_t *em, int32_t kind, const struct gs_array *n, const gs__lmap_t *m)
{
    lw_gen_leaf_typed(em, kind, n, m, GS_DTYPE_FLOAT64);
}

static const int32_t lw_unop[GS_UNARY_COUNT] = {
    GS_OP_NEG,    GS_OP_ABS,    GS_OP_EXP,   GS_OP_LOG,      GS_OP_SQRT,   GS_OP_SIN,
    GS_OP_COS,    GS_OP_TAN,    GS_OP_ARCSIN, GS_OP_ARCCOS,  GS_OP_ARCTAN, GS_OP_SINH,
    GS_OP_COSH,   GS_OP_TANH,   GS_OP_EXP2,  GS_OP_LOG2,     GS_OP_LOG10,  GS_OP_LOG1P,
    GS_OP_EXPM1,  GS_OP_FLOOR,  GS_OP_CEIL,  GS_OP_RINT,     GS_OP_TRUNC,  GS_OP_SIGN,
    GS_OP_SQUARE, GS_OP_RECIP,  GS_OP_ISNAN, GS_OP_ISINF,    GS_OP_ISFINITE, GS_OP_LNOT};
static const int32_t lw_binop[GS_BINARY_COUNT] = {
    GS_OP_ADD, GS_OP_SUB, GS_OP_MUL, GS_OP_DIV, GS_OP_POW,      GS_OP_LT,   GS_OP_LE,
    GS_OP_GT,  GS_OP_GE,  GS_OP_EQ,  GS_OP_NE,  GS_OP_MIN,      GS_OP_MAX,  GS_OP_MOD,
    GS_OP_FLOORDIV,       GS_OP_LAND, GS_OP_LOR, GS_OP_LXOR};
static const int32_t lw_binop_imm[GS_BINARY_COUNT] = {
    GS_OP_ADD_IMM, GS_OP_SUB_IMM, GS_OP_MUL_IMM, GS_OP_DIV_IMM, GS_OP_POW_IMM,
    GS_OP_LT_IMM,  GS_OP_LE_IMM,  GS_OP_GT_IMM,  GS_OP_GE_IMM,  GS_OP_EQ_IMM,
    GS_OP_NE_IMM,  GS_OP_MIN_IMM, GS_OP_MAX_IMM, GS_OP_MOD_IMM, GS_OP_FLOORDIV_IMM,
    GS_OP_LAND_IMM, GS_OP_LOR_IMM, GS_OP_LXOR_IMM};
/* scalar OP x expressed on x */
static const int32_t lw_binop_rimm[GS_BINARY_COUNT] = {
    GS_OP_ADD_IMM, GS_OP_RSUB_IMM, GS_OP_MUL_IMM, GS_OP_RDIV_IMM, GS_OP_RPOW_IMM,
    GS_OP_GT_IMM,  GS_OP_GE_IMM,   GS_OP_LT_IMM,  GS_OP_LE_IMM,   GS_OP_EQ_IMM,
    GS_OP_NE_IMM,  GS_OP_MIN_IMM,  GS_OP_MAX_IMM, GS_OP_RMOD_IMM, GS_OP_RFLOORDIV_IMM,
    GS_OP_LAND_IMM, GS_OP_LOR_IMM, GS_OP_LXOR_IMM};

static void lw_emit_node(lw_emit_t *em, int64_t idx, const gs__lmap_t *m);

/* Input @a k of node @a idx, converted to dtype @a dt. */
static void lw_emit_input(lw_emit_t *em, int64_t idx, int k, const gs__lmap_t *m, int32_t dt)
{
    const lw_node_t *e = &em->w->nodes[idx];
    if (e->inl[k]) lw_emit_node(em, e->in[k], m);
    else lw_chunk_leaf(em, e->in[k], m);
    lw_cast(em, e->n->in[k]->dtype, dt);
}

/* Map for operand @a in of a broadcasting binary node of ndim @a dc. */
static void lw_map_broadcast(const gs__lmap_t *m, int32_t dc, const struct gs_array *in,
                             gs__lmap_t *o)
{
    int32_t di = in->grid.ndim;
    memset(o, 0, sizeof(*o));
    o->ndim = di;
    for (int32_t a = 0; a < di; a++) {
        int32_t ca = a + (dc - di);
        if (in->grid.shape[a] == 1) {
            o->perm[a] = -1;   /* broadcast (or length-1) axis: always coordinate 0 */
        } else {
            o->off[a] = m->off[ca];
            o->step[a] = m->step[ca];
            o->perm[a] = m->perm[ca];
        }
    }
}

static int lw_map_slice(const gs__lmap_t *m, const struct gs_array *sl, gs__lmap_t *o)
{
    const struct gs_array *in = sl->in[0];
    int32_t j = 0;
    memset(o, 0, sizeof(*o));
    o->ndim = in->grid.ndim;
    for (int32_t a = 0; a < in->grid.ndim; a++) {
        int64_t st = sl->u.slice.step[a], t;
        if (sl->u.slice.index[a]) {
            o->off[a] = sl->u.slice.start[a];
            o->perm[a] = -1;
            continue;
        }
        if (__builtin_mul_overflow(st, m->off[j], &t) ||
            __builtin_add_overflow(sl->u.slice.start[a], t, &o->off[a]))
            return 0;
        if (m->perm[j] < 0) {
            o->perm[a] = -1;
        } else {
            if (__builtin_mul_overflow(st, m->step[j], &o->step[a])) return 0;
            o->perm[a] = m->perm[j];
        }
        j++;
    }
    return 1;
}

static void lw_map_transpose(const gs__lmap_t *m, const struct gs_array *tr, gs__lmap_t *o)
{
    memset(o, 0, sizeof(*o));
    o->ndim = tr->grid.ndim;
    for (int32_t i = 0; i < tr->grid.ndim; i++) {
        int32_t a = tr->u.tr.perm[i];
        o->off[a] = m->off[i];
        o->step[a] = m->step[i];
        o->perm[a] = m->perm[i];
    }
}

static void lw_emit_node(lw_emit_t *em, int64_t idx, const gs__lmap_t *m)
{
    const lw_node_t *e = &em->w->nodes[idx];
    const struct gs_array *n = e->n;
    gs__lmap_t mi, mj;
    if (em->st != GS_OK) return;
    const int32_t c = gs__node_compute_dtype(n);
    switch (n->kind) {
    case GS__NODE_NORMAL:
        if (n->dtype == GS_DTYPE_FLOAT32) { /* float32 definition: pushes float32 values */
            lw_gen_leaf_typed(em, n->u.gen.version == GS_RANDOM_V3   ? GS_LEAF_NORMAL_F32_V3
                                  : n->u.gen.version == GS_RANDOM_V4 ? GS_LEAF_NORMAL_F32_V4
                                                                     : GS_LEAF_NORMAL_F32,
                              n, m, GS_DTYPE_FLOAT32);
            break;
        }
        lw_gen_leaf(em,
                    n->u.gen.version == GS_RANDOM_V2   ? GS_LEAF_NORMAL_V2
                    : n->u.gen.version == GS_RANDOM_V3 ? GS_LEAF_NORMAL_V3
                                                       : GS_LEAF_NORMAL,
                    n, m);
        lw_cast(em, GS_DTYPE_FLOAT64, n->dtype);
        break;
    case GS__NODE_UNIFORM:
        if (n->dtype == GS_DTYPE_FLOAT32 || n->dtype == GS_DTYPE_INT64) {
            lw_gen_leaf_typed(em, n->dtype == GS_DTYPE_INT64 ? GS_LEAF_INTEGERS : GS_LEAF_UNIFORM_F32,
                              n, m, n->dtype);
            break;
        }
        lw_gen_leaf(em, GS_LEAF_UNIFORM, n, m);
        lw_cast(em, GS_DTYPE_FLOAT64, n->dtype);
        break;
    case GS__NODE_FULL:
        lw_push(em, GS_OP_CONST, 0, n->u.gen.p0, n->dtype);
        break;
    case GS__NODE_ARANGE:
        lw_gen_leaf(em, GS_LEAF_INDEX, n, m);
        lw_push(em, GS_OP_MUL_IMM, 0, n->u.gen.p1, GS_DTYPE_FLOAT64);
        lw_push(em, GS_OP_ADD_IMM, 0, n->u.gen.p0, GS_DTYPE_FLOAT64);
        lw_cast(em, GS_DTYPE_FLOAT64, n->dtype);
        break;
    case GS__NODE_ASTYPE:
        lw_emit_input(em, idx, 0, m, n->dtype);
        break;
    case GS__NODE_UNARY:
        lw_emit_input(em, idx, 0, m, c);
        lw_push(em, lw_unop[n->u.op.op], 0, 0.0, c);
        break;
    case GS__NODE_BINARY_SCALAR:
        lw_emit_input(em, idx, 0, m, c);
        lw_push(em, lw_binop_imm[n->u.op.op], 0, n->u.op.scalar, c);
        break;
    case GS__NODE_SCALAR_BINARY:
        lw_emit_input(em, idx, 0, m, c);
        lw_push(em, lw_binop_rimm[n->u.op.op], 0, n->u.op.scalar, c);
        break;
    case GS__NODE_WHERE: {
        gs__lmap_t mk;
        lw_map_broadcast(m, n->grid.ndim, n->in[0], &mi);
        lw_map_broadcast(m, n->grid.ndim, n->in[1], &mj);
        lw_map_broadcast(m, n->grid.ndim, n->in[2], &mk);
        lw_emit_input(em, idx, 0, &mi, GS_DTYPE_BOOL);
        lw_emit_input(em, idx, 1, &mj, n->dtype);
        lw_emit_input(em, idx, 2, &mk, n->dtype);
        lw_push(em, GS_OP_WHERE, 0, 0.0, n->dtype);
        break;
    }
    case GS__NODE_BINARY:
        lw_map_broadcast(m, n->grid.ndim, n->in[0], &mi);
        lw_map_broadcast(m, n->grid.ndim, n->in[1], &mj);
        lw_emit_input(em, idx, 0, &mi, c);
        lw_emit_input(em, idx, 1, &mj, c);
        lw_push(em, lw_binop[n->u.op.op], 0, 0.0, c);
        break;
    case GS__NODE_SLICE:
        if (!lw_map_slice(m, n, &mi)) {
            em->st = gs_error_set(GS_ERR_INVALID_PARAM, "slice index arithmetic overflows");
            return;
        }
        lw_emit_input(em, idx, 0, &mi, n->dtype);
        break;
    case GS__NODE_TRANSPOSE:
        lw_map_transpose(m, n, &mi);
        lw_emit_input(em, idx, 0, &mi, n->dtype);
        break;
    case GS__NODE_MAPBLOCKS:   /* an elementwise user kernel: its output block, in the task */
        em->lw->user_node = idx;
        lw_chunk_leaf(em, idx, m);
        break;
    default:
        /* literals, reductions and persisted nodes are never inlined */
        em->st = gs_error_set(GS_ERR_INTERNAL, "lowering tried to inline a %d node", (int)n->kind);
        break;
    }
}

gs_status_t gs__lw_add_layer(lw_t *w, gs_layer_t *l, int64_t *idx_p)
{
    lw_layer_t ll;
    gs__lw_layer_init(&ll, l);
    if (GS_VEC_PUSH(&w->layers, ll) != GS_OK) {
        gs_layer_free(l);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    }
    *idx_p = (int64_t)w->layers.len - 1;
    return GS_OK;
}

lw_ref_t gs__lw_node_ref(const lw_t *w, int64_t node, uint64_t block)
{
    const lw_node_t *e = &w->nodes[node];
    lw_ref_t r;
    gs_assert_always(e->pidx >= 0 || e->layer >= 0);
    r.layer = e->pidx >= 0 ? -e->pidx - 1 : e->layer;
    r.block = block;
    return r;
}

gs_status_t gs__lw_set_inputs(lw_t *w, int64_t li, uint64_t *xoff, lw_ref_t *xrefs)
{
    lw_layer_t *ll = &w->layers.data[li];
    uint64_t nb = gs_layer_nblocks(ll->l);
    gs_free(ll->xoff);
    gs_free(ll->xrefs);
    ll->xoff = xoff;
    ll->xrefs = xrefs;
    for (uint64_t b = 0; b < nb; b++)
        if (xoff[b + 1] - xoff[b] > LW_MAX_INPUTS)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "a task of a %s layer would read %" PRIu64 " chunks (at most %d)",
                                gs_layer_name(ll->l), xoff[b + 1] - xoff[b], LW_MAX_INPUTS);
    return GS_OK;
}

int32_t gs__lw_rec_dtype(int32_t redop, int32_t dtype)
{
    /* integer records (graph/kernel.h) for sum, prod, min and max of int32, int64 and uint8:
     * exact and wrapping as NumPy's; bool keeps float64 records (exact below 2^53 elements,
     * and the tuned float64 kernels run `(x > 0).sum()`) */
    if (!gs_redop_int_records(redop)) return GS_DTYPE_FLOAT64;
    switch (dtype) {
    case GS_DTYPE_INT32: case GS_DTYPE_INT64: case GS_DTYPE_UINT8: return GS_DTYPE_INT64;
    default: return GS_DTYPE_FLOAT64;
    }
}

int gs__lw_kind_is_blockwise(int32_t kind)
{
    switch (kind) {
    case GS__NODE_NORMAL: case GS__NODE_UNIFORM: case GS__NODE_FULL: case GS__NODE_ARANGE:
    case GS__NODE_UNARY: case GS__NODE_BINARY: case GS__NODE_BINARY_SCALAR:
    case GS__NODE_SCALAR_BINARY: case GS__NODE_SLICE: case GS__NODE_TRANSPOSE:
    case GS__NODE_ASTYPE: case GS__NODE_WHERE:
        return 1;
    default:
        return 0;
    }
}

void gs__lw_layer_init(lw_layer_t *ll, gs_layer_t *l)
{
    memset(ll, 0, sizeof(*ll));
    ll->l = l;
    ll->prev = -1;
    ll->comb_axis = -1;
    ll->user_node = -1;
    for (int i = 0; i < GS_KERNEL_MAX_LEAVES; i++) ll->src_node[i] = -1;
}

gs_status_t gs__lw_fused_make(lw_t *w, const gs_grid_t *grid, int64_t node, int inline_node,
                              int32_t terminal, int32_t redop, int32_t red_axis, lw_layer_t *ll)
{
    gs_layer_t *l = gs__layer_new(GS_LAYER_FUSED);
    lw_emit_t em;
    gs__lmap_t m;
    gs_status_t st;
    if (l == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    l->u.f.srcs = gs_calloc(GS_KERNEL_MAX_LEAVES, sizeof(gs_grid_t), "layer sources");
    if (l->u.f.srcs == NULL || gs_grid_copy(&l->grid, grid) != GS_OK) {
        gs_layer_free(l);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    }
    l->u.f.terminal = terminal;
    l->u.f.redop = redop;
    l->u.f.red_axis = red_axis;
    gs__lw_layer_init(ll, l);
    em.w = w;
    em.l = l;
    em.lw = ll;
    em.st = GS_OK;
    lw_map_identity(&m, w->nodes[node].n->grid.ndim);
    if (inline_node) lw_emit_node(&em, node, &m);
    else lw_chunk_leaf(&em, node, &m);
    if ((st = em.st) != GS_OK) goto err_free;
    /* reductions take float64 values into float64 records, or int64 values into integer
     * records (gs__lw_rec_dtype); stores write the node's dtype */
    if (terminal == GS_TERM_REDUCE) {
        l->u.f.out_dtype = gs__lw_rec_dtype(redop, w->nodes[node].n->dtype);
        lw_cast(&em, w->nodes[node].n->dtype, l->u.f.out_dtype);
    } else {
        l->u.f.out_dtype = w->nodes[node].n->dtype;
    }
    if (gs__layer_check(l) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        st = gs_error_set(GS_ERR_INTERNAL, "lowering built a bad layer: %s", msg);
        goto err_free;
    }
    return GS_OK;
err_free:
    gs_layer_free(l);
    ll->l = NULL;
    return st;
}

/* FUSED layer over @a grid whose program is node @a node (inline) or a chunk leaf reading it;
 * a program that reads an elementwise user kernel's output becomes a fused USER layer. */
static gs_status_t lw_build_fused(lw_t *w, const gs_grid_t *grid, int64_t node, int inline_node,
                                  int32_t terminal, int32_t redop, int32_t red_axis,
                                  int64_t *idx_p)
{
    lw_layer_t ll;
    gs_status_t st;
    int64_t li;
    if ((st = gs__lw_fused_make(w, grid, node, inline_node, terminal, redop, red_axis, &ll)) !=
        GS_OK)
        return st;
    if (ll.user_node >= 0) return gs__lw_build_user_fused(w, ll.user_node, &ll, idx_p);
    if ((st = gs__lw_add_layer(w, ll.l, &li)) != GS_OK) return st;
    memcpy(w->layers.data[li].src_ref, ll.src_ref, sizeof(ll.src_ref));
    memcpy(w->layers.data[li].src_node, ll.src_node, sizeof(ll.src_node));
    *idx_p = li;
    return GS_OK;
}

static gs_status_t lw_build_literal(lw_t *w, const struct gs_array *n, int64_t *idx_p)
{
    gs_layer_t *l = gs__layer_new(GS_LAYER_LITERAL);
    uint64_t nb = gs_grid_nblocks(&n->grid);
    int64_t total = 0;
    if (l == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    l->u.lit.data = gs_malloc((size_t)n->size * sizeof(double), "literal data");
    l->u.lit.off = gs_malloc((size_t)(nb + 1) * sizeof(int64_t), "literal offsets");
    if (l->u.lit.data == NULL || l->u.lit.off == NULL || gs_grid_copy(&l->grid, &n->grid) != GS_OK) {
        gs_layer_free(l);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    }
    memcpy(l->u.lit.data, n->u.lit.data, (size_t)n->size * sizeof(double));
    for (uint64_t b = 0; b < nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
        gs_grid_block_region(&n->grid, b, start, shape);
        l->u.lit.off[b] = total;
        total += gs_region_size(n->grid.ndim, shape);
    }
    l->u.lit.off[nb] = total;
    return gs__lw_add_layer(w, l, idx_p);
}

static gs_status_t lw_build_reduce(lw_t *w, int64_t idx, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[idx];
    const struct gs_array *n = e->n, *in = n->in[0];
    int32_t axis = n->u.red.axis, se = n->u.red.split_every;
    int64_t prev, nprev;
    gs_status_t st;
    int first = 1;
    if ((st = lw_build_fused(w, &in->grid, e->in[0], e->inl[0], GS_TERM_REDUCE, n->u.red.op,
                             axis, &prev)) != GS_OK)
        return st;
    nprev = axis < 0 ? (int64_t)gs_grid_nblocks(&in->grid) : in->grid.nchunks[axis];
    for (;;) {
        gs_layer_t *l = gs__layer_new(GS_LAYER_COMBINE);
        int64_t li, ng = (nprev + se - 1) / se;
        if (l == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
        if (gs_grid_copy(&l->grid, &n->grid) != GS_OK) {
            gs_layer_free(l);
            return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
        }
        l->u.c.redop = n->u.red.op;
        l->u.c.finalize = ng == 1;
        l->u.c.out_dtype = ng == 1 ? n->dtype : GS_DTYPE_FLOAT64;
        l->u.c.rec_dtype = gs__lw_rec_dtype(n->u.red.op, in->dtype);
        l->u.c.ddof = n->u.red.ddof;
        l->u.c.nprev = nprev;
        l->u.c.split_every = se;
        l->u.c.ngroups = ng;
        if ((st = gs__lw_add_layer(w, l, &li)) != GS_OK) return st;
        w->layers.data[li].prev = prev;
        w->layers.data[li].comb_first = first;
        w->layers.data[li].comb_axis = axis;
        first = 0;
        prev = li;
        nprev = ng;
        if (ng == 1) break;
    }
    *idx_p = prev;
    return GS_OK;
}

static gs_status_t lw_build_layers(lw_t *w)
{
    gs_status_t st;
    for (int64_t i = 0; i < w->nnodes; i++) {
        lw_node_t *e = &w->nodes[i];
        int64_t li = -1;
        if (!e->materialised) continue;
        if (e->pidx >= 0) {
            gs_assert_always(e->root);
            st = lw_build_fused(w, &e->n->grid, i, 0, GS_TERM_STORE, 0, -1, &li);
        } else if (e->n->kind == GS__NODE_LITERAL) {
            st = lw_build_literal(w, e->n, &li);
        } else if (e->n->kind == GS__NODE_REDUCE) {
            st = lw_build_reduce(w, i, &li);
        } else if (e->n->kind == GS__NODE_FILE) {
            st = gs__lw_build_file(w, i, &li);
        } else if (gs__lw_kind_is_blockwise(e->n->kind)) {
            st = lw_build_fused(w, &e->n->grid, i, 1, GS_TERM_STORE, 0, -1, &li);
        } else {
            st = gs__lw_build_own(w, i, &li);   /* matrix and data-movement kinds */
        }
        if (st != GS_OK) return st;
        e->layer = li;
    }
    return GS_OK;
}

/* ---- 4. tasks (lower_tasks.c) ---- */

static void lw_cleanup(lw_t *w)
{
    for (size_t i = 0; i < w->layers.len; i++) {
        gs_layer_free(w->layers.data[i].l);
        gs_free(w->layers.data[i].need);
        gs_free(w->layers.data[i].xoff);
        gs_free(w->layers.data[i].xrefs);
        gs_free(w->layers.data[i].task);
    }
    GS_VEC_FREE(&w->layers);
    for (int64_t i = 0; i < w->npers; i++) {
        gs_free(w->pers[i].keys);
        gs_free(w->pers[i].ext);
    }
    gs_free(w->pers);
    gs_free(w->nodes);
    gs_free(w->roots);
}

gs_status_t gs_graph_lower(gs_array_h out, unsigned flags, gs_taskgraph_t **tg_p)
{
    if (out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "array is NULL");
    return gs__graph_lower_roots(1, &out, flags, NULL, tg_p, NULL);
}

gs_status_t gs_graph_lower_hinted(gs_array_h out, unsigned flags, const gs_lower_hints_t *hints,
                                  gs_taskgraph_t **tg_p)
{
    if (out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "array is NULL");
    return gs__graph_lower_roots(1, &out, flags, hints, tg_p, NULL);
}

gs_status_t gs__graph_lower_roots(size_t n, gs_array_h const *arrays, unsigned flags,
                                  const gs_lower_hints_t *hints, gs_taskgraph_t **tg_p,
                                  uint64_t *out_off)
{
    lw_t w;
    gs_taskgraph_t *tg = NULL;
    struct gs_array **expr = NULL;
    gs_status_t st;
    if (n == 0 || arrays == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "no arrays to lower");
    for (size_t r = 0; r < n; r++)
        if (arrays[r] == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "array %zu is NULL", r);
    if (tg_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "tg_p is NULL");
    if (flags & ~(unsigned)GS_LOWER_DEFAULT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown lowering flags 0x%x", flags);
    memset(&w, 0, sizeof(w));
    w.flags = flags;
    w.cpu_threads = hints != NULL ? hints->cpu_threads : 0;
    w.nroots = n;
    w.roots = gs_calloc(n, sizeof(int64_t), "lower roots");
    expr = gs_calloc(n, sizeof(*expr), "lower root expressions");
    if (w.roots == NULL || expr == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
        goto err;
    }
    if (flags & GS_LOWER_SLICE_PUSHDOWN) {
        if ((st = gs__pushdown_many(n, (struct gs_array *const *)arrays, expr)) != GS_OK) goto err;
    } else {
        for (size_t r = 0; r < n; r++) expr[r] = gs_array_retain(arrays[r]);
    }
    if ((st = lw_collect(&w, n, expr)) != GS_OK) goto err;
    if ((st = lw_decide(&w)) != GS_OK) goto err;
    if ((st = lw_build_layers(&w)) != GS_OK) goto err;
    tg = gs_calloc(1, sizeof(*tg), "taskgraph");
    if (tg == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
        goto err;
    }
    if ((st = gs__lw_tasks(&w, tg, out_off)) != GS_OK) goto err;
    *tg_p = tg;
    tg = NULL;
err:
    gs_taskgraph_free(tg);
    lw_cleanup(&w);
    for (size_t r = 0; expr != NULL && r < n; r++) gs_array_release(expr[r]);
    gs_free(expr);
    return st;
}
