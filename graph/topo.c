/* The expression DAG in topological order (see gs__expr_topo in graph_internal.h): an iterative
 * depth-first walk, post-order, so deep expressions cannot overflow the C stack. Shared by the
 * lowering (lower.c) and slice pushdown (pushdown.c). */
#include "common/hashmap.h"
#include "common/vec.h"
#include "graph/graph_internal.h"

typedef struct gs__tdisc {
    struct gs_array *n;
    int32_t state;          /* 0 new, 1 expanded, 2 finished */
    uint8_t leaf;
    int64_t topo;
} gs__tdisc_t;

void gs__expr_topo_cleanup(gs__expr_topo_t *t)
{
    gs_free(t->nodes);
    gs_free(t->in);
    gs_free(t->leaf);
    t->nodes = NULL;
    t->in = NULL;
    t->leaf = NULL;
    t->nnodes = 0;
}

gs_status_t gs__expr_topo(struct gs_array *root, gs__expr_leaf_fn leaf_fn, void *arg,
                          gs__expr_topo_t *t)
{
    return gs__expr_topo_many(1, &root, leaf_fn, arg, t, NULL);
}

gs_status_t gs__expr_topo_many(size_t nroots, struct gs_array *const *roots,
                               gs__expr_leaf_fn leaf_fn, void *arg, gs__expr_topo_t *t,
                               int64_t *root_idx)
{
    GS_VEC(gs__tdisc_t) disc = {0};
    GS_VEC(int64_t) stack = {0};
    gs_u64map_t map;
    gs_status_t st = GS_OK;
    int64_t ntopo = 0;

    t->nodes = NULL;
    t->in = NULL;
    t->leaf = NULL;
    t->nnodes = 0;
    gs_u64map_init(&map);
    /* the roots go on the stack last first, so the first root's nodes come first; a root
     * reached again (a duplicate, or an input of an earlier root) is walked once */
    for (size_t r = nroots; r-- > 0;) {
        uint64_t v;
        if (!gs_u64map_get(&map, roots[r]->id, &v)) {
            gs__tdisc_t d0 = {roots[r], 0, 0, -1};
            if (GS_VEC_PUSH(&disc, d0) != GS_OK ||
                gs_u64map_put(&map, roots[r]->id, disc.len - 1) != GS_OK)
                goto nomem;
            v = disc.len - 1;
        }
        if (GS_VEC_PUSH(&stack, (int64_t)v) != GS_OK) goto nomem;
    }
    while (stack.len > 0) {
        int64_t di = stack.data[stack.len - 1];
        gs__tdisc_t *d = &disc.data[di];
        if (d->state == 0) {
            struct gs_array *n = d->n;
            int is_leaf = 0;
            d->state = 1;
            if ((st = leaf_fn(n, arg, &is_leaf)) != GS_OK) goto out;
            d = &disc.data[di];
            d->leaf = (uint8_t)(is_leaf != 0);
            if (d->leaf) continue;   /* its inputs are not part of the walk */
            /* every input not finished yet goes on the stack, even one already waiting deeper:
             * it must finish before this node */
            for (int32_t k = n->ninputs - 1; k >= 0; k--) {
                uint64_t v;
                if (gs_u64map_get(&map, n->in[k]->id, &v)) {
                    gs_assert_always(disc.data[v].state != 1);   /* the DAG has no cycles */
                    if (disc.data[v].state == 2) continue;
                } else {
                    gs__tdisc_t dn = {n->in[k], 0, 0, -1};
                    if (GS_VEC_PUSH(&disc, dn) != GS_OK ||
                        gs_u64map_put(&map, n->in[k]->id, disc.len - 1) != GS_OK)
                        goto nomem;
                    v = disc.len - 1;
                }
                if (GS_VEC_PUSH(&stack, (int64_t)v) != GS_OK) goto nomem;
            }
        } else {
            stack.len--;
            if (d->state == 2) continue;   /* a duplicate entry of a finished node */
            d->state = 2;
            d->topo = ntopo++;
        }
    }
    t->nodes = gs_malloc((size_t)ntopo * sizeof(*t->nodes), "expression nodes");
    t->in = gs_malloc((size_t)ntopo * sizeof(*t->in), "expression inputs");
    t->leaf = gs_calloc((size_t)ntopo, 1, "expression leaves");
    if (t->nodes == NULL || t->in == NULL || t->leaf == NULL) goto nomem;
    t->nnodes = ntopo;
    for (size_t i = 0; i < disc.len; i++) {
        const gs__tdisc_t *d = &disc.data[i];
        int64_t e = d->topo;
        t->nodes[e] = d->n;
        t->in[e][0] = t->in[e][1] = t->in[e][2] = -1;
        t->leaf[e] = d->leaf;
        if (d->leaf) continue;
        for (int32_t k = 0; k < d->n->ninputs; k++) {
            uint64_t v;
            int found = gs_u64map_get(&map, d->n->in[k]->id, &v);
            gs_assert(found);
            (void)found;
            t->in[e][k] = disc.data[v].topo;
        }
    }
    for (size_t r = 0; root_idx != NULL && r < nroots; r++) {
        uint64_t v;
        int found = gs_u64map_get(&map, roots[r]->id, &v);
        gs_assert_always(found);
        root_idx[r] = disc.data[v].topo;
    }
    goto out;
nomem:
    st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory walking the expression");
    gs__expr_topo_cleanup(t);
out:
    GS_VEC_FREE(&disc);
    GS_VEC_FREE(&stack);
    gs_u64map_cleanup(&map);
    return st;
}
