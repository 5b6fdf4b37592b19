/* Elementwise user kernels (GS_KERNEL_ELEMENTWISE) in fused tasks, under GS_LOWER_FUSE.
 *
 * A MAPBLOCKS node whose kernel is declared elementwise has inputs of its own grid, so its
 * block b needs block b of every input and nothing else. Lowering then treats it as one more
 * step of a fused chain:
 *   - its blockwise inputs are inlined as for any fused consumer (a generator always, another
 *     node when it has one consumer): each becomes a *producer* program, a FUSED STORE layer
 *     over the kernel's grid that the task evaluates into a temporary block;
 *   - the kernel itself is inlined into its one consumer (a blockwise node or a reduction's
 *     first stage) as a leaf reading the kernel's output block (source LW_SRC_USER), and the
 *     consumer's fused program becomes the *post* program of the same task.
 * The result is one fused USER layer (graph/stencil_int.h, "fused USER layers"): one task per
 * output block, no chunk between producers, kernel and consumer. Where the consumer's program
 * would read the kernel's output through a slice, a transpose or a broadcast, or already holds
 * another user kernel, the kernel is materialised instead (gs__lw_user_limit), and a kernel
 * not declared elementwise is never fused: both give the plain USER layer of lower_map.c.
 * So does a CPU kernel whose output has fewer than GS_LOWER_USER_FUSE_TASKS_PER_THREAD blocks
 * per thread of the CPU pool the caller hints (gs_lower_hints_t): a fused task holds its
 * thread for the whole chain, so a few big tasks starve the pool that many small ones fill.
 * Slices are not pushed through user kernels (pushdown.c leaves MAPBLOCKS alone), declared
 * elementwise or not, so a kernel always sees the blocks of the output's chunks.
 */
#include "common/vec.h"
#include "graph/lower_int.h"
#include "graph/stencil_int.h"

#include <stdio.h>
#include <string.h>

/* Whether MAPBLOCKS node @a n may be fused: an elementwise kernel, and for a CPU kernel on a
 * pool of known size (gs_lower_hints_t.cpu_threads) enough blocks to keep that pool busy. */
static int lw_user_fusable(const lw_t *w, const struct gs_array *n)
{
    if (n->kind != GS__NODE_MAPBLOCKS || (n->u.ub->flags & GS_KERNEL_ELEMENTWISE) == 0) return 0;
    if (n->u.ub->cuda_src != NULL || w->cpu_threads == 0) return 1;
    return gs_grid_nblocks(&n->grid) >=
           (uint64_t)GS_LOWER_USER_FUSE_TASKS_PER_THREAD * (uint64_t)w->cpu_threads;
}

int gs__lw_user_edge(const lw_t *w, const lw_node_t *e, int k)
{
    const lw_node_t *in = &w->nodes[e->in[k]];
    if (e->n->kind == GS__NODE_MAPBLOCKS) {
        /* a producer: blockwise, computed once (or a generator/view, recomputed freely) */
        if (!lw_user_fusable(w, e->n) || !gs__lw_kind_is_blockwise(in->n->kind)) return 0;
        return in->cheap || in->uses == 1;
    }
    if (in->n->kind == GS__NODE_MAPBLOCKS) {
        if (!lw_user_fusable(w, in->n) || in->uses != 1) return 0;
        return e->n->kind == GS__NODE_REDUCE || gs__lw_kind_is_blockwise(e->n->kind);
    }
    return -1;
}

gs_status_t gs__lw_user_limit(lw_t *w)
{
    int64_t *cons = gs_malloc(gs_size_mul((size_t)w->nnodes + 1, sizeof(int64_t)), "lower consumers");
    uint8_t *taken = gs_calloc((size_t)w->nnodes + 1, 1, "lower user groups");
    if (cons == NULL || taken == NULL) {
        gs_free(cons);
        gs_free(taken);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
    }
    for (int64_t i = 0; i < w->nnodes; i++) cons[i] = -1;
    /* the node each node is inlined into (unique for every node on a user kernel's way up:
     * only views and generators are inlined into several consumers, and they hold no kernel) */
    for (int64_t i = 0; i < w->nnodes; i++) {
        const lw_node_t *e = &w->nodes[i];
        if (e->pidx >= 0) continue;
        for (int32_t k = 0; k < e->n->ninputs; k++)
            if (e->inl[k]) cons[e->in[k]] = i;
    }
    for (int64_t i = 0; i < w->nnodes; i++) {
        int64_t cur = i, c;
        int ok = 1;
        if (!lw_user_fusable(w, w->nodes[i].n) || cons[i] < 0) continue;
        while ((c = cons[cur]) >= 0) {
            const struct gs_array *cn = w->nodes[c].n;
            if (cn->kind == GS__NODE_MAPBLOCKS || cn->kind == GS__NODE_SLICE ||
                cn->kind == GS__NODE_TRANSPOSE ||
                (cn->kind != GS__NODE_REDUCE && !gs__grid_equal(&cn->grid, &w->nodes[cur].n->grid))) {
                ok = 0;
                break;
            }
            cur = c;
        }
        if (ok && !taken[cur]) {   /* cur: the program's root; one kernel per program */
            taken[cur] = 1;
            continue;
        }
        lw_node_t *ce = &w->nodes[cons[i]];
        for (int32_t k = 0; k < ce->n->ninputs; k++)
            if (ce->in[k] == i) ce->inl[k] = 0;
    }
    gs_free(cons);
    gs_free(taken);
    return GS_OK;
}

/* Append @a r to the growing table *refs (*n used of *cap). */
static gs_status_t lw_refs_push(lw_ref_t **refs, size_t *n, size_t *cap, lw_ref_t r)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        lw_ref_t *g = gs_realloc(*refs, gs_size_mul(nc, sizeof(lw_ref_t)), "user refs");
        if (g == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
        *refs = g;
        *cap = nc;
    }
    (*refs)[(*n)++] = r;
    return GS_OK;
}

/* Push the task inputs of block @a b of embedded FUSED layer @a p (sources @a src_ref),
 * without source @a skip, in gs__fused_resolve's order (layer_map_fuse.c reads them so). */
static gs_status_t lw_user_part_refs(const gs_layer_t *p, const int64_t *src_ref, uint64_t b,
                                     int32_t skip, lw_ref_t **refs, size_t *n, size_t *cap)
{
    gs__fres_t r;
    gs_status_t st;
    if (!gs__fused_reads_chunks(p)) return GS_OK;
    if (gs__fused_resolve(p, b, &r) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        return gs_error_set(GS_ERR_INTERNAL, "lowering cannot resolve its own layer: %s", msg);
    }
    for (int32_t i = 0; i < r.ninputs; i++) {
        lw_ref_t ref;
        if (r.in_src[i] == skip) continue;
        ref.layer = src_ref[r.in_src[i]];
        ref.block = r.in_block[i];
        if ((st = lw_refs_push(refs, n, cap, ref)) != GS_OK) return st;
    }
    return GS_OK;
}

gs_status_t gs__lw_build_user_fused(lw_t *w, int64_t unode, lw_layer_t *post, int64_t *idx_p)
{
    const lw_node_t *e = &w->nodes[unode];
    const int32_t nin = e->n->ninputs;
    const uint64_t nb = gs_grid_nblocks(&e->n->grid);
    int64_t pre_ref[GS_KERNEL_MAX_USER_IN][GS_KERNEL_MAX_LEAVES], post_ref[GS_KERNEL_MAX_LEAVES];
    gs_layer_t *l = NULL;
    gs__ufuse_t *f;
    uint64_t *xoff = NULL;
    lw_ref_t *refs = NULL;
    size_t nrefs = 0, cap = 0;
    gs_status_t st;
    int64_t li;
    if (post != NULL) memcpy(post_ref, post->src_ref, sizeof(post_ref));
    if ((st = gs__lw_user_layer_new(w, unode, &l)) != GS_OK) goto err;
    if ((f = gs_calloc(1, sizeof(*f), "fused user layer")) == NULL) goto nomem;
    l->u.ub.fuse = f;
    f->usrc = -1;
    if (post != NULL) {
        f->post = post->l;   /* owned by l from here on */
        post->l = NULL;
        for (int32_t s = 0; s < f->post->u.f.nsrc; s++)
            if (post_ref[s] == LW_SRC_USER) f->usrc = s;
        gs_assert_always(f->usrc >= 0);
    }
    for (int32_t k = 0; k < nin; k++) {
        lw_layer_t pl;
        if (!e->inl[k]) continue;
        if ((st = gs__lw_fused_make(w, &e->n->grid, e->in[k], 1, GS_TERM_STORE, 0, -1, &pl)) !=
            GS_OK)
            goto err;
        f->pre[k] = pl.l;
        memcpy(pre_ref[k], pl.src_ref, sizeof(pre_ref[k]));
        gs_assert_always(pl.user_node < 0);   /* gs__lw_user_limit: no kernel in a producer */
    }
    if (gs__layer_check(l) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        st = gs_error_set(GS_ERR_INTERNAL, "lowering built a bad layer: %s", msg);
        goto err;
    }
    if ((xoff = gs_malloc(gs_size_mul((size_t)nb + 1, sizeof(uint64_t)), "user xoff")) == NULL)
        goto nomem;
    for (uint64_t b = 0; b < nb; b++) {
        xoff[b] = nrefs;
        for (int32_t k = 0; k < nin; k++) {
            if (f->pre[k] != NULL)
                st = lw_user_part_refs(f->pre[k], pre_ref[k], b, -1, &refs, &nrefs, &cap);
            else
                st = lw_refs_push(&refs, &nrefs, &cap, gs__lw_node_ref(w, e->in[k], b));
            if (st != GS_OK) goto err;
        }
        if (f->post != NULL &&
            (st = lw_user_part_refs(f->post, post_ref, b, f->usrc, &refs, &nrefs, &cap)) != GS_OK)
            goto err;
    }
    xoff[nb] = nrefs;
    if (refs == NULL && (refs = gs_malloc(sizeof(lw_ref_t), "user refs")) == NULL) goto nomem;
    st = gs__lw_add_layer(w, l, &li);   /* frees l on failure */
    l = NULL;
    if (st != GS_OK) goto err;
    st = gs__lw_set_inputs(w, li, xoff, refs);   /* takes both */
    xoff = NULL;
    refs = NULL;
    if (st != GS_OK) goto err;
    *idx_p = li;
    return GS_OK;
nomem:
    st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering map_blocks");
err:
    if (post != NULL && post->l != NULL) {
        gs_layer_free(post->l);
        post->l = NULL;
    }
    gs_layer_free(l);
    gs_free(xoff);
    gs_free(refs);
    return st;
}
