/* Slice pushdown: rewrite an expression so that slices and transposes sit below elementwise
 * nodes, before lowering (GS_LOWER_SLICE_PUSHDOWN).
 *
 *   slice(unary(x))          -> unary(slice(x))            (also a OP s, s OP a)
 *   slice(binary(x, y))      -> binary(slice'(x), slice''(y))
 *   slice(slice(x)), slice(transpose(x)), transpose(...)    compose into one view
 *
 * A "view" is a slice followed by a permutation of the remaining axes; every chain of slices
 * and transposes is one view. Views move down through single-consumer elementwise nodes and stop
 * at generators, host data, reductions, persisted arrays and nodes with several consumers (there
 * pushing would compute the node twice): there the view becomes a plain slice (+ transpose) node
 * over the (rewritten) node. Over a generator that node is lowered as a generator with a composed
 * index map, so only the kept elements are generated.
 *
 * Through a broadcasting binary node each operand gets the view mapped through broadcasting: an
 * operand axis of size 1 broadcast against a longer one keeps its whole (size-1) extent (or
 * index 0 where the view indexes the axis), axes an operand lacks are dropped. A view that
 * permutes a lacking axis into a non-leading position cannot be expressed on that operand (there
 * is no reshape): the view then stays above the binary node.
 *
 * Values and shape are unchanged, and so is the chunk grid: slice, transpose and elementwise
 * grids all follow the chunk boundaries of the inputs (a binary node's grid is the union of its
 * operands'), and a slice of a union of boundaries is the union of the slices. gs__pushdown
 * checks this on the result and keeps the original expression otherwise.
 *
 * Algorithm (no recursion: expressions may be thousands of nodes deep):
 *   A. collect the nodes reachable from the root in topological order (persisted nodes are
 *      leaves) and count each node's consumers, edge by edge;
 *   B. from the root down (reverse topological order), resolve "requests" (node, view): the
 *      node seen through the view. Each request says how it is built and which requests on
 *      inputs (or on the node itself, for a view kept above it) it needs. Requests on one node
 *      are deduplicated, so shared subexpressions stay shared;
 *   C. from the leaves up, build each request's node; unchanged subexpressions reuse the
 *      original nodes.
 */
#include "common/hashmap.h"
#include "common/vec.h"
#include "graph/graph_internal.h"
#include "graph/stencil_int.h"
#include "graph/scan_int.h"
#include "graph/copy_int.h"
#include "graph/linalg_int.h"
#include "graph/file_int.h"

#include <string.h>

/* View over a base array of nin axes, giving nout axes. Per base axis a: if perm[a] >= 0, output
 * axis perm[a] takes the count[a] base coordinates off[a] + step[a] * t; if perm[a] == -1 the
 * base axis is fixed at off[a] (an index). Normalised: index axes have step 0 and count 1; axes
 * with count <= 1 have step 1; empty axes have off 0. */
typedef struct pd_view {
    int32_t nin, nout;
    int64_t off[GS_MAX_NDIM];
    int64_t step[GS_MAX_NDIM];
    int64_t count[GS_MAX_NDIM];
    int32_t perm[GS_MAX_NDIM];
} pd_view_t;

enum {
    PD_KEEP = 0,   /* the node itself */
    PD_FORWARD,    /* the result of child[0] (a view node folded into the view on its input) */
    PD_REBUILD,    /* identity view: the node over its inputs' identity results */
    PD_PUSH,       /* the node's operation over child results (the view pushed into inputs) */
    PD_VIEW        /* slice/transpose node over child[0], the identity request on this node */
};

typedef struct pd_req {
    int64_t node;
    int64_t next;          /* next request on the same node, -1 */
    int32_t how;
    int64_t child[GS__MAX_INPUTS];
    pd_view_t v;
    struct gs_array *res;  /* built node (one reference), NULL until built */
} pd_req_t;

typedef struct pd_node {
    struct gs_array *n;
    int64_t in[GS__MAX_INPUTS];
    uint32_t uses;
    uint8_t persisted;
    int64_t head;          /* first request on this node, -1 */
} pd_node_t;

typedef struct pd {
    pd_node_t *nodes;
    int64_t nnodes;
    int nviews;            /* slice/transpose nodes found */
    GS_VEC(pd_req_t) reqs;
} pd_t;

#define PD_NOMEM() gs_error_set(GS_ERR_NO_MEMORY, "out of memory during slice pushdown")

/* ---- A. collect ---- */

static gs_status_t pd_leaf(struct gs_array *n, void *arg, int *is_leaf_p)
{
    (void)arg;
    *is_leaf_p = gs__array_is_persisted(n);   /* its inputs are not part of the expression */
    return GS_OK;
}

static gs_status_t pd_collect(pd_t *p, size_t nroots, struct gs_array *const *roots,
                              int64_t *root_idx)
{
    gs__expr_topo_t t;
    gs_status_t st = gs__expr_topo_many(nroots, roots, pd_leaf, NULL, &t, root_idx);
    if (st != GS_OK) return st == GS_ERR_NO_MEMORY ? PD_NOMEM() : st;
    p->nnodes = t.nnodes;
    p->nodes = gs_calloc((size_t)t.nnodes, sizeof(pd_node_t), "pushdown nodes");
    if (p->nodes == NULL) {
        gs__expr_topo_cleanup(&t);
        return PD_NOMEM();
    }
    for (int64_t i = 0; i < t.nnodes; i++) {
        pd_node_t *e = &p->nodes[i];
        e->n = t.nodes[i];
        e->persisted = t.leaf[i];
        e->in[0] = t.in[i][0];
        e->in[1] = t.in[i][1];
        e->in[2] = t.in[i][2];
        e->head = -1;
        if (!e->persisted && (e->n->kind == GS__NODE_SLICE || e->n->kind == GS__NODE_TRANSPOSE))
            p->nviews++;
    }
    for (int64_t i = 0; i < t.nnodes; i++)
        for (int32_t k = 0; k < GS__MAX_INPUTS; k++)
            if (p->nodes[i].in[k] >= 0) p->nodes[p->nodes[i].in[k]].uses++;
    /* a root of several is one more use: a view is not pushed through a node another root
     * needs as it is (one root: only the last node, which no node reads) */
    for (size_t r = 0; nroots > 1 && r < nroots; r++) p->nodes[root_idx[r]].uses++;
    gs__expr_topo_cleanup(&t);
    return GS_OK;
}

/* ---- views ---- */

static void pd_view_norm(pd_view_t *v)
{
    for (int32_t a = 0; a < v->nin; a++) {
        if (v->perm[a] < 0) {
            v->step[a] = 0;
            v->count[a] = 1;
        } else {
            if (v->count[a] <= 1) v->step[a] = 1;
            if (v->count[a] == 0) v->off[a] = 0;
        }
    }
}

static void pd_view_identity(pd_view_t *v, const struct gs_array *n)
{
    memset(v, 0, sizeof(*v));
    v->nin = v->nout = n->grid.ndim;
    for (int32_t a = 0; a < v->nin; a++) {
        v->step[a] = 1;
        v->count[a] = n->grid.shape[a];
        v->perm[a] = a;
    }
    pd_view_norm(v);
}

static int pd_view_is_identity(const pd_view_t *v, const struct gs_array *n)
{
    if (v->nout != n->grid.ndim) return 0;
    for (int32_t a = 0; a < v->nin; a++)
        if (v->perm[a] != a || v->off[a] != 0 || v->count[a] != n->grid.shape[a] ||
            (v->count[a] > 1 && v->step[a] != 1))
            return 0;
    return 1;
}

static int pd_view_eq(const pd_view_t *x, const pd_view_t *y)
{
    if (x->nin != y->nin || x->nout != y->nout) return 0;
    for (int32_t a = 0; a < x->nin; a++)
        if (x->off[a] != y->off[a] || x->step[a] != y->step[a] || x->count[a] != y->count[a] ||
            x->perm[a] != y->perm[a])
            return 0;
    return 1;
}

/* @a v over the output of slice node @a s, as a view over the slice's input. 0 on overflow
 * (cannot happen for in-range views; checked anyway). */
static int pd_view_through_slice(const pd_view_t *v, const struct gs_array *s, pd_view_t *w)
{
    const struct gs_array *in = s->in[0];
    int32_t j = 0;
    memset(w, 0, sizeof(*w));
    w->nin = in->grid.ndim;
    w->nout = v->nout;
    for (int32_t a = 0; a < w->nin; a++) {
        int64_t t;
        if (s->u.slice.index[a]) {
            w->off[a] = s->u.slice.start[a];
            w->perm[a] = -1;
            continue;
        }
        if (__builtin_mul_overflow(s->u.slice.step[a], v->off[j], &t) ||
            __builtin_add_overflow(s->u.slice.start[a], t, &w->off[a]))
            return 0;
        if (v->perm[j] < 0) {
            w->perm[a] = -1;
        } else {
            if (__builtin_mul_overflow(s->u.slice.step[a], v->step[j], &w->step[a])) return 0;
            w->perm[a] = v->perm[j];
            w->count[a] = v->count[j];
        }
        j++;
    }
    gs_assert(j == v->nin);
    pd_view_norm(w);
    return 1;
}

/* @a v over the output of transpose node @a t, as a view over the transpose's input. */
static void pd_view_through_transpose(const pd_view_t *v, const struct gs_array *t, pd_view_t *w)
{
    memset(w, 0, sizeof(*w));
    w->nin = t->grid.ndim;
    w->nout = v->nout;
    for (int32_t i = 0; i < t->grid.ndim; i++) {
        int32_t a = t->u.tr.perm[i];
        w->off[a] = v->off[i];
        w->step[a] = v->step[i];
        w->count[a] = v->count[i];
        w->perm[a] = v->perm[i];
    }
}

/* @a v over the output of broadcasting binary node @a b, as a view over operand @a x. 0 when the
 * operand cannot take it: an axis the operand lacks would land after one it has. */
static int pd_view_through_broadcast(const pd_view_t *v, const struct gs_array *b,
                                     const struct gs_array *x, pd_view_t *o)
{
    int32_t dx = x->grid.ndim, sh = b->grid.ndim - dx, k = 0;
    memset(o, 0, sizeof(*o));
    o->nin = dx;
    for (int32_t ja = 0; ja < dx; ja++) {
        int32_t a = ja + sh;
        if (x->grid.shape[ja] == 1 && b->grid.shape[a] != 1) {
            /* broadcast axis: its single element serves every output coordinate */
            o->off[ja] = 0;
            o->perm[ja] = v->perm[a];
            o->count[ja] = 1;
        } else {
            o->off[ja] = v->off[a];
            o->step[ja] = v->step[a];
            o->count[ja] = v->count[a];
            o->perm[ja] = v->perm[a];
        }
        if (o->perm[ja] >= 0) k++;
    }
    /* right alignment: the output axes the operand covers must be the last k */
    for (int32_t ja = 0; ja < dx; ja++) {
        if (o->perm[ja] < 0) continue;
        if (o->perm[ja] < v->nout - k) return 0;
        o->perm[ja] -= v->nout - k;
    }
    o->nout = k;
    pd_view_norm(o);
    return 1;
}

/* Slice node (and transpose node) giving @a v over @a base. New reference in *out_p. */
static gs_status_t pd_view_apply(const pd_view_t *v, struct gs_array *base,
                                 struct gs_array **out_p)
{
    int64_t start[GS_MAX_NDIM], step[GS_MAX_NDIM], count[GS_MAX_NDIM];
    int32_t index[GS_MAX_NDIM];
    int tperm[GS_MAX_NDIM];
    int need_slice = 0, need_tr = 0;
    int32_t j = 0;
    struct gs_array *cur = base, *next;
    gs_status_t st;
    gs_assert(v->nin == base->grid.ndim);
    for (int32_t a = 0; a < v->nin; a++) {
        index[a] = v->perm[a] < 0;
        start[a] = v->off[a];
        step[a] = index[a] ? 0 : v->step[a];
        count[a] = index[a] ? 1 : v->count[a];
        if (index[a] || start[a] != 0 || count[a] != base->grid.shape[a] ||
            (count[a] > 1 && step[a] != 1))
            need_slice = 1;
        if (!index[a]) tperm[v->perm[a]] = (int)j++;
    }
    gs_assert(j == v->nout);
    for (int32_t i = 0; i < v->nout; i++)
        if (tperm[i] != i) need_tr = 1;
    gs_array_retain(cur);
    if (need_slice) {
        st = gs__array_slice_canonical(cur, start, step, count, index, &next);
        gs_array_release(cur);
        if (st != GS_OK) return st;
        cur = next;
    }
    if (need_tr) {
        st = gs_array_transpose(cur, tperm, &next);
        gs_array_release(cur);
        if (st != GS_OK) return st == GS_ERR_NO_MEMORY ? PD_NOMEM() : st;
        cur = next;
    }
    *out_p = cur;
    return GS_OK;
}

/* ---- B. requests ---- */

/* Index of the request (node, v), added if new. */
static gs_status_t pd_request(pd_t *p, int64_t node, const pd_view_t *v, int64_t *idx_p)
{
    pd_req_t r;
    for (int64_t i = p->nodes[node].head; i >= 0; i = p->reqs.data[i].next) {
        if (pd_view_eq(&p->reqs.data[i].v, v)) {
            *idx_p = i;
            return GS_OK;
        }
    }
    memset(&r, 0, sizeof(r));
    r.node = node;
    r.next = p->nodes[node].head;
    r.how = -1;
    r.child[0] = r.child[1] = r.child[2] = -1;
    r.v = *v;
    if (GS_VEC_PUSH(&p->reqs, r) != GS_OK) return PD_NOMEM();
    p->nodes[node].head = (int64_t)p->reqs.len - 1;
    *idx_p = (int64_t)p->reqs.len - 1;
    return GS_OK;
}

static gs_status_t pd_request_identity(pd_t *p, int64_t node, int64_t *idx_p)
{
    pd_view_t id;
    pd_view_identity(&id, p->nodes[node].n);
    return pd_request(p, node, &id, idx_p);
}

static int pd_is_elementwise1(const struct gs_array *n)
{
    return n->kind == GS__NODE_UNARY || n->kind == GS__NODE_BINARY_SCALAR ||
           n->kind == GS__NODE_SCALAR_BINARY || n->kind == GS__NODE_ASTYPE;
}

/* Decide how request @a ri is built, adding the requests it needs. */
static gs_status_t pd_decide(pd_t *p, int64_t ri)
{
    const int64_t ni = p->reqs.data[ri].node;
    const pd_node_t *e = &p->nodes[ni];
    const struct gs_array *n = e->n;
    pd_view_t v = p->reqs.data[ri].v, w, w1;
    int64_t c0 = -1, c1 = -1, c2 = -1;
    int32_t how;
    gs_status_t st;
    const int ident = pd_view_is_identity(&v, n);
    const int leaf = e->persisted || gs__node_is_generator(n) || n->kind == GS__NODE_LITERAL ||
                     n->kind == GS__NODE_FILE;

    if (leaf) {
        /* generator, host data or persisted array: a view stays above it */
        how = ident ? PD_KEEP : PD_VIEW;
        if (!ident && (st = pd_request_identity(p, ni, &c0)) != GS_OK) return st;
    } else if (n->kind == GS__NODE_SLICE && (ident || e->uses == 1)) {
        if (!pd_view_through_slice(&v, n, &w))
            return gs_error_set(GS_ERR_INTERNAL, "slice pushdown: index arithmetic overflows");
        how = PD_FORWARD;
        if ((st = pd_request(p, e->in[0], &w, &c0)) != GS_OK) return st;
    } else if (n->kind == GS__NODE_TRANSPOSE && (ident || e->uses == 1)) {
        pd_view_through_transpose(&v, n, &w);
        how = PD_FORWARD;
        if ((st = pd_request(p, e->in[0], &w, &c0)) != GS_OK) return st;
    } else if (ident) {
        /* reduction or elementwise node: rebuilt over its inputs' rewrites */
        how = PD_REBUILD;
        if ((st = pd_request_identity(p, e->in[0], &c0)) != GS_OK) return st;
        if (n->ninputs > 1 && (st = pd_request_identity(p, e->in[1], &c1)) != GS_OK) return st;
        if (n->ninputs > 2 && (st = pd_request_identity(p, e->in[2], &c2)) != GS_OK) return st;
    } else if (e->uses == 1 && pd_is_elementwise1(n)) {
        how = PD_PUSH;
        if ((st = pd_request(p, e->in[0], &v, &c0)) != GS_OK) return st;
    } else if (e->uses == 1 && n->kind == GS__NODE_BINARY &&
               pd_view_through_broadcast(&v, n, n->in[0], &w) &&
               pd_view_through_broadcast(&v, n, n->in[1], &w1)) {
        how = PD_PUSH;
        if ((st = pd_request(p, e->in[0], &w, &c0)) != GS_OK) return st;
        if ((st = pd_request(p, e->in[1], &w1, &c1)) != GS_OK) return st;
    } else {
        /* reduction, shared node, or a binary node whose operand cannot take the view: the
         * view stays above it */
        how = PD_VIEW;
        if ((st = pd_request_identity(p, ni, &c0)) != GS_OK) return st;
    }
    p->reqs.data[ri].how = how;
    p->reqs.data[ri].child[0] = c0;
    p->reqs.data[ri].child[1] = c1;
    p->reqs.data[ri].child[2] = c2;
    return GS_OK;
}

static gs_status_t pd_plan(pd_t *p, size_t nroots, const int64_t *root_idx, int64_t *root_req)
{
    gs_status_t st;
    for (size_t r = 0; r < nroots; r++)
        if ((st = pd_request_identity(p, root_idx[r], &root_req[r])) != GS_OK) return st;
    for (int64_t i = p->nnodes - 1; i >= 0; i--) {
        int64_t idr = -1;
        /* views first: a view kept above the node asks for the node's identity request, which
         * is decided last */
        for (int64_t r = p->nodes[i].head; r >= 0; r = p->reqs.data[r].next) {
            if (pd_view_is_identity(&p->reqs.data[r].v, p->nodes[i].n)) {
                idr = r;
                continue;
            }
            if ((st = pd_decide(p, r)) != GS_OK) return st;
        }
        if (idr < 0) {
            for (int64_t r = p->nodes[i].head; r >= 0; r = p->reqs.data[r].next)
                if (p->reqs.data[r].how < 0) idr = r;
        }
        if (idr >= 0 && (st = pd_decide(p, idr)) != GS_OK) return st;
    }
    return GS_OK;
}

/* ---- C. build ---- */

/* Node @a n's operation over new operands @a a (and @a b). */
static gs_status_t pd_rebuild(const struct gs_array *n, struct gs_array *a, struct gs_array *b,
                              struct gs_array *c, struct gs_array **out_p)
{
    gs_status_t st;
    switch (n->kind) {
    case GS__NODE_UNARY:
        st = gs_array_unary((gs_unop_t)n->u.op.op, a, out_p);
        break;
    case GS__NODE_ASTYPE:
        st = gs_array_astype(a, (gs_dtype_t)n->dtype, out_p);
        break;
    case GS__NODE_WHERE:
        st = gs_array_where(a, b, c, out_p);
        break;
    case GS__NODE_BINARY_SCALAR:
        st = gs_array_binary_array_scalar_kind((gs_binop_t)n->u.op.op, a, n->u.op.scalar,
                                               (gs_scalar_kind_t)n->u.op.skind, out_p);
        break;
    case GS__NODE_SCALAR_BINARY:
        st = gs_array_binary_scalar_array_kind((gs_binop_t)n->u.op.op, n->u.op.scalar,
                                               (gs_scalar_kind_t)n->u.op.skind, a, out_p);
        break;
    case GS__NODE_BINARY:
        st = gs_array_binary((gs_binop_t)n->u.op.op, a, b, out_p);
        break;
    case GS__NODE_REDUCE: {
        gs_reduce_params_t rp;
        memset(&rp, 0, sizeof(rp));
        rp.field_mask = GS_REDUCE_FIELD_SPLIT_EVERY | GS_REDUCE_FIELD_DDOF;
        rp.split_every = n->u.red.split_every;
        rp.ddof = n->u.red.ddof;
        if (n->u.red.axis >= 0) {
            rp.field_mask |= GS_REDUCE_FIELD_AXIS;
            rp.axis = n->u.red.axis;
        }
        st = gs_array_reduce((gs_redop_t)n->u.red.op, a, &rp, out_p);
        break;
    }
    case GS__NODE_RECHUNK:
        st = gs__array_rechunk_grid(a, &n->grid, out_p);
        break;
    case GS__NODE_CONCAT:
        st = gs__array_concat_node(a, b, n->u.cat.axis, n->u.cat.expand[0], n->u.cat.expand[1],
                                   out_p);
        break;
    case GS__NODE_MATMUL: case GS__NODE_FACTOR:
        st = gs__linalg_rebuild(n, a, b, out_p);
        break;
    case GS__NODE_STENCIL:
        st = gs__stencil_rebuild(n, a, out_p);
        break;
    case GS__NODE_MAPBLOCKS:
        st = gs__map_rebuild(n, a, b, out_p);
        break;
    case GS__NODE_RESHAPE:
        st = gs__array_reshape_node(a, &n->grid, out_p);
        break;
    case GS__NODE_DIAG:
        st = gs__array_diag_node(a, n->u.dg.k, out_p);
        break;
    case GS__NODE_SCAN:
        st = gs__scan_rebuild(n, a, out_p);
        break;
    default:
        return gs_error_set(GS_ERR_INTERNAL, "slice pushdown cannot rebuild a %d node",
                            (int)n->kind);
    }
    if (st == GS_OK || st == GS_ERR_NO_MEMORY) return st;
    return gs_error_set(GS_ERR_INTERNAL, "slice pushdown built a node that was rejected: %s",
                        gs_last_error());
}

/* A view over a file source read straight from the file: the source with the view composed
 * into its map, over the grid of the view node *res_p (replaced). Only the kept elements are
 * read (pushdown for files; the byte ranges follow from the map). */
static gs_status_t pd_view_file(const pd_view_t *v, const struct gs_array *src,
                                struct gs_array **res_p)
{
    const gs__fspec_t *f = src->u.file;
    gs__fspec_t *g = gs__fspec_dup(f);
    struct gs_array *out;
    gs_status_t st;
    if (g == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory in slice pushdown");
    for (int32_t a = 0; a < f->map.ndim; a++) {
        int32_t b = f->map.perm[a];
        if (b < 0) continue;
        g->map.off[a] = f->map.off[a] + f->map.step[a] * v->off[b];
        if (v->perm[b] >= 0) {
            g->map.step[a] = f->map.step[a] * v->step[b];
            g->map.perm[a] = v->perm[b];
        } else {
            g->map.step[a] = 1;
            g->map.perm[a] = -1;
        }
    }
    if ((st = gs__array_file_node(g, &(*res_p)->grid, NULL, &out)) != GS_OK) {
        if (st == GS_ERR_NO_MEMORY) return st;
        return gs_error_set(GS_ERR_INTERNAL, "slice pushdown built a bad file source: %s",
                            gs_last_error());
    }
    gs_array_release(*res_p);
    *res_p = out;
    return GS_OK;
}

static gs_status_t pd_build_one(pd_t *p, int64_t ri)
{
    pd_req_t *r = &p->reqs.data[ri];
    const pd_node_t *e = &p->nodes[r->node];
    struct gs_array *n = e->n;
    struct gs_array *a = r->child[0] >= 0 ? p->reqs.data[r->child[0]].res : NULL;
    struct gs_array *b = r->child[1] >= 0 ? p->reqs.data[r->child[1]].res : NULL;
    struct gs_array *c2 = r->child[2] >= 0 ? p->reqs.data[r->child[2]].res : NULL;
    gs_assert(r->child[0] < 0 || a != NULL);
    gs_assert(r->child[1] < 0 || b != NULL);
    switch (r->how) {
    case PD_KEEP:
        r->res = gs_array_retain(n);
        return GS_OK;
    case PD_FORWARD: {
        /* a view node whose view stays right above its unchanged input is kept as it is
         * (unless the view was folded into a file source: then the file source reading only
         * what the view keeps replaces it) */
        const pd_req_t *c = &p->reqs.data[r->child[0]];
        if (pd_view_is_identity(&r->v, n) && c->how == PD_VIEW && a->kind != GS__NODE_FILE &&
            p->reqs.data[c->child[0]].res == n->in[0])
            r->res = gs_array_retain(n);
        else
            r->res = gs_array_retain(a);
        return GS_OK;
    }
    case PD_REBUILD:
        if (a == n->in[0] && (n->ninputs < 2 || b == n->in[1]) &&
            (n->ninputs < 3 || c2 == n->in[2])) {
            r->res = gs_array_retain(n);
            return GS_OK;
        }
        return pd_rebuild(n, a, b, c2, &r->res);
    case PD_PUSH:
        return pd_rebuild(n, a, b, c2, &r->res);
    case PD_VIEW: {
        gs_status_t st = pd_view_apply(&r->v, a, &r->res);
        if (st == GS_OK && a->kind == GS__NODE_FILE && a->u.file->op == GS__FILE_READ &&
            !gs__array_is_persisted(a))
            st = pd_view_file(&r->v, a, &r->res);
        return st;
    }
    default:
        return gs_error_set(GS_ERR_INTERNAL, "slice pushdown left a request undecided");
    }
}

static gs_status_t pd_build(pd_t *p)
{
    gs_status_t st;
    for (int64_t i = 0; i < p->nnodes; i++) {
        /* views kept above the node need its identity request built first */
        for (int pass = 0; pass < 2; pass++) {
            for (int64_t r = p->nodes[i].head; r >= 0; r = p->reqs.data[r].next) {
                if ((p->reqs.data[r].how == PD_VIEW) != pass) continue;
                if ((st = pd_build_one(p, r)) != GS_OK) return st;
            }
        }
    }
    return GS_OK;
}

gs_status_t gs__pushdown(struct gs_array *root, struct gs_array **out_p)
{
    return gs__pushdown_many(1, &root, out_p);
}

gs_status_t gs__pushdown_many(size_t nroots, struct gs_array *const *roots,
                              struct gs_array **outs)
{
    pd_t p;
    gs_status_t st;
    int64_t *ri = gs_calloc(nroots, 2 * sizeof(int64_t), "pushdown roots"), *rr;
    memset(&p, 0, sizeof(p));
    if (ri == NULL) return PD_NOMEM();
    rr = ri + nroots;
    if ((st = pd_collect(&p, nroots, roots, ri)) != GS_OK) goto out;
    if (p.nviews == 0) {   /* nothing to push */
        for (size_t r = 0; r < nroots; r++) outs[r] = gs_array_retain(roots[r]);
        goto out;
    }
    if ((st = pd_plan(&p, nroots, ri, rr)) != GS_OK || (st = pd_build(&p)) != GS_OK) goto out;
    for (size_t r = 0; r < nroots; r++) {
        struct gs_array *res = gs_array_retain(p.reqs.data[rr[r]].res);
        if (!gs__grid_equal(&res->grid, &roots[r]->grid)) {
            /* cannot happen (see the top of this file); the result must keep the handle's
             * grid, which persisting and gathering rely on */
            GS_LOG_WARN("slice pushdown changed the chunk grid; lowering the expression as "
                        "written");
            gs_assert(0);
            gs_array_release(res);
            res = gs_array_retain(roots[r]);
        }
        outs[r] = res;
    }
out:
    for (size_t i = 0; i < p.reqs.len; i++) gs_array_release(p.reqs.data[i].res);
    GS_VEC_FREE(&p.reqs);
    gs_free(p.nodes);
    gs_free(ri);
    return st;
}
