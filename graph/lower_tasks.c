/* Lowering, step 4 (lower.c's opening comment): mark the needed blocks from the results
 * backwards, drop layers without tasks, number tasks layer by layer and emit dependencies. */
#include "graph/lower_int.h"
#include "common/heap.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Inputs of block @a b of layer @a li, in dependency order. */
static gs_status_t lw_inputs(const lw_t *w, int64_t li, uint64_t b, lw_ref_t *refs, int *n_p)
{
    const lw_layer_t *ll = &w->layers.data[li];
    const gs_layer_t *l = ll->l;
    int n = 0;
    if (ll->xoff != NULL) {
        for (uint64_t i = ll->xoff[b]; i < ll->xoff[b + 1]; i++) refs[n++] = ll->xrefs[i];
    } else if (l->kind == GS_LAYER_FUSED && !gs__fused_reads_chunks(l)) {
        /* generators only: no inputs (saves a block resolution per task) */
    } else if (l->kind == GS_LAYER_FUSED) {
        gs__fres_t r;
        if (gs__fused_resolve(l, b, &r) != GS_OK) {
            char msg[256];
            snprintf(msg, sizeof(msg), "%s", gs_last_error());
            return gs_error_set(GS_ERR_INTERNAL, "lowering cannot resolve its own layer: %s", msg);
        }
        for (int32_t i = 0; i < r.ninputs; i++) {
            refs[n].layer = ll->src_ref[r.in_src[i]];
            refs[n].block = r.in_block[i];
            n++;
        }
    } else if (l->kind == GS_LAYER_COMBINE) {
        uint64_t ng = (uint64_t)l->u.c.ngroups, o = b / ng, g = b % ng;
        int64_t lo = (int64_t)g * l->u.c.split_every, hi = lo + l->u.c.split_every;
        const gs_grid_t *pg = &w->layers.data[ll->prev].l->grid;
        int64_t oc[GS_MAX_NDIM], gc[GS_MAX_NDIM];
        if (hi > l->u.c.nprev) hi = l->u.c.nprev;
        if (ll->comb_first && ll->comb_axis >= 0) gs__grid_block_coords(&l->grid, o, oc);
        for (int64_t i = lo; i < hi; i++) {
            uint64_t pb;
            if (!ll->comb_first) {
                pb = o * (uint64_t)l->u.c.nprev + (uint64_t)i;
            } else if (ll->comb_axis < 0) {
                pb = (uint64_t)i;
            } else {
                for (int32_t a = 0, j = 0; a < pg->ndim; a++)
                    gc[a] = a == ll->comb_axis ? i : oc[j++];
                pb = gs__grid_block_index(pg, gc);
            }
            refs[n].layer = ll->prev;
            refs[n].block = pb;
            n++;
        }
    }
    *n_p = n;
    return GS_OK;
}

/* Whether no block of @a ll has inputs (a fused layer of generators only): lw_inputs would
 * return none for every block, so the per-task loops skip it. */
static int lw_no_inputs(const lw_layer_t *ll)
{
    return ll->xoff == NULL && ll->l->kind == GS_LAYER_FUSED && !gs__fused_reads_chunks(ll->l);
}

gs_status_t gs__lw_tasks(lw_t *w, gs_taskgraph_t *tg, uint64_t *out_off)
{
    const int cull = (w->flags & GS_LOWER_CULL) != 0;
    const int64_t nl = (int64_t)w->layers.len;
    lw_ref_t refs[LW_MAX_INPUTS];
    GS_VEC(uint64_t) deps = {0};
    GS_VEC(gs_key_t) ext = {0};
    gs_status_t st;
    uint64_t ntasks = 0, t;
    int n;

    /* needed blocks */
    for (int64_t li = 0; li < nl; li++) {
        lw_layer_t *ll = &w->layers.data[li];
        uint64_t nb = gs_layer_nblocks(ll->l);
        ll->need = gs_calloc((size_t)nb, 1, "lower need");
        ll->task = gs_malloc(gs_size_mul((size_t)nb, sizeof(uint64_t)), "lower task ids");
        if (ll->need == NULL || ll->task == NULL) goto nomem;
        (void)gs_heap_advise_huge(ll->need, (size_t)nb);
        (void)gs_heap_advise_huge(ll->task, (size_t)nb * sizeof(uint64_t));
        if (!cull) memset(ll->need, 1, (size_t)nb);
    }
    for (size_t r = 0; r < w->nroots; r++) {   /* every block of every result */
        lw_layer_t *fl = &w->layers.data[w->nodes[w->roots[r]].layer];
        memset(fl->need, 1, (size_t)gs_layer_nblocks(fl->l));
    }
    if (cull) {
        for (int64_t li = nl - 1; li >= 0; li--) {
            lw_layer_t *ll = &w->layers.data[li];
            uint64_t nb = gs_layer_nblocks(ll->l);
            if (lw_no_inputs(ll)) continue;   /* nothing to mark below a generator */
            for (uint64_t b = nb; b-- > 0;) {   /* descending: a block may read an earlier
                                                   one of its own layer (scan carries) */
                if (!ll->need[b]) continue;
                if ((st = lw_inputs(w, li, b, refs, &n)) != GS_OK) goto err;
                for (int i = 0; i < n; i++)
                    if (refs[i].layer >= 0) w->layers.data[refs[i].layer].need[refs[i].block] = 1;
            }
        }
    }
    /* number tasks, drop empty layers */
    tg->nlayers = 0;
    for (int64_t li = 0; li < nl; li++) {
        lw_layer_t *ll = &w->layers.data[li];
        uint64_t nb = gs_layer_nblocks(ll->l), before = ntasks;
        for (uint64_t b = 0; b < nb; b++) ll->task[b] = ll->need[b] ? ntasks++ : LW_NONE;
        ll->newidx = ntasks > before ? (int64_t)tg->nlayers++ : -1;
    }
    tg->ntasks = ntasks;
    tg->layers = gs_calloc(tg->nlayers ? tg->nlayers : 1, sizeof(gs_layer_t *), "taskgraph layers");
    tg->task_layer = gs_malloc(gs_size_mul(ntasks ? ntasks : 1, sizeof(uint32_t)), "task layer");
    tg->task_block = gs_malloc(gs_size_mul(ntasks ? ntasks : 1, sizeof(uint64_t)), "task block");
    tg->task_nbytes = gs_malloc(gs_size_mul(ntasks ? ntasks : 1, sizeof(uint64_t)), "task nbytes");
    tg->dep_off = gs_malloc(gs_size_mul(ntasks + 1, sizeof(uint64_t)), "task dep offsets");
    if (tg->layers == NULL || tg->task_layer == NULL || tg->task_block == NULL ||
        tg->task_nbytes == NULL || tg->dep_off == NULL)
        goto nomem;
    /* a million tasks fill 36 MB here: huge pages save most of the page faults */
    (void)gs_heap_advise_huge(tg->task_layer, (size_t)ntasks * sizeof(uint32_t));
    (void)gs_heap_advise_huge(tg->task_block, (size_t)ntasks * sizeof(uint64_t));
    (void)gs_heap_advise_huge(tg->task_nbytes, (size_t)ntasks * sizeof(uint64_t));
    (void)gs_heap_advise_huge(tg->dep_off, (size_t)(ntasks + 1) * sizeof(uint64_t));
    /* emit */
    t = 0;
    tg->dep_off[0] = 0;
    for (int64_t li = 0; li < nl; li++) {
        lw_layer_t *ll = &w->layers.data[li];
        uint64_t nb = gs_layer_nblocks(ll->l);
        const int no_inputs = lw_no_inputs(ll);
        if (ll->newidx < 0) continue;
        for (uint64_t b = 0; b < nb; b++) {
            if (ll->task[b] == LW_NONE) continue;
            gs_assert_always(ll->task[b] == t);
            tg->task_layer[t] = (uint32_t)ll->newidx;
            tg->task_block[t] = b;
            tg->task_nbytes[t] = gs_layer_out_nbytes(ll->l, b);
            n = 0;
            if (!no_inputs && (st = lw_inputs(w, li, b, refs, &n)) != GS_OK) goto err;
            for (int i = 0; i < n; i++) {
                uint64_t d;
                if (refs[i].layer >= 0) {
                    d = w->layers.data[refs[i].layer].task[refs[i].block];
                    gs_assert_always(d < t);
                } else {
                    lw_persist_t *p = &w->pers[-refs[i].layer - 1];
                    if (p->ext == NULL) {
                        p->ext = gs_calloc((size_t)p->nblocks, sizeof(uint64_t), "lower ext");
                        if (p->ext == NULL) goto nomem;
                    }
                    if (p->ext[refs[i].block] == 0) {
                        if (GS_VEC_PUSH(&ext, p->keys[refs[i].block]) != GS_OK) goto nomem;
                        p->ext[refs[i].block] = ext.len;
                    }
                    d = LW_EXT_TAG | (p->ext[refs[i].block] - 1);
                }
                if (GS_VEC_PUSH(&deps, d) != GS_OK) goto nomem;
            }
            tg->dep_off[++t] = deps.len;
        }
    }
    for (size_t i = 0; i < deps.len; i++)
        if (deps.data[i] & LW_EXT_TAG) deps.data[i] = ntasks + (deps.data[i] & ~LW_EXT_TAG);
    if (deps.len == 0 && GS_VEC_RESERVE(&deps, 1) != GS_OK) goto nomem;
    tg->deps = deps.data;
    deps.data = NULL;
    deps.len = deps.cap = 0;
    tg->nexternals = ext.len;
    tg->externals = ext.data;
    ext.data = NULL;
    ext.len = ext.cap = 0;
    /* outputs */
    tg->noutputs = 0;
    for (size_t r = 0; r < w->nroots; r++) {
        if (out_off != NULL) out_off[r] = tg->noutputs;
        tg->noutputs += gs_layer_nblocks(w->layers.data[w->nodes[w->roots[r]].layer].l);
    }
    if (out_off != NULL) out_off[w->nroots] = tg->noutputs;
    tg->outputs = gs_malloc(gs_size_mul(tg->noutputs ? tg->noutputs : 1, sizeof(uint64_t)),
                            "task outputs");
    if (tg->outputs == NULL) goto nomem;
    (void)gs_heap_advise_huge(tg->outputs, (size_t)tg->noutputs * sizeof(uint64_t));
    for (size_t r = 0, o = 0; r < w->nroots; r++) {
        lw_layer_t *fl = &w->layers.data[w->nodes[w->roots[r]].layer];
        for (uint64_t b = 0; b < gs_layer_nblocks(fl->l); b++) tg->outputs[o++] = fl->task[b];
    }
    if (gs_grid_copy(&tg->out_grid, &w->nodes[w->roots[0]].n->grid) != GS_OK) goto nomem;
    tg->out_dtype = w->nodes[w->roots[0]].n->dtype;
    /* hand the kept layers over */
    for (int64_t li = 0; li < nl; li++) {
        lw_layer_t *ll = &w->layers.data[li];
        if (ll->newidx >= 0) {
            tg->layers[ll->newidx] = ll->l;
            ll->l = NULL;
        }
    }
    return GS_OK;
nomem:
    st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
err:
    GS_VEC_FREE(&deps);
    GS_VEC_FREE(&ext);
    return st;
}
