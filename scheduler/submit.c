/*
 * Submission of a graph: structural validation (no cluster state), then the task tables
 * (externals resolved, culling, dependents, priorities, initial ready sets) of a new graph.
 * The running graph belongs to the state machine (tasks.c).
 */
#include "scheduler/submit.h"
#include "scheduler/dash/tally.h"

#include "scheduler/keep.h"
#include "scheduler/tasks.h"

#include "common/heap.h"
#include "common/time.h"

#include <inttypes.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Structural validation (no cluster state).                                                  */

/* A client's layer name as shown text (GS__LAYER_NAME_CAP bytes at @a out): cut, each byte
 * outside printable ASCII shown as '?' (so JSON and HTML get text, whatever a peer sent);
 * "layer" when the client sent none. */
static void gs__layer_name_copy(char *out, const gs_str_t *name)
{
    size_t n = 0;
    if (name == NULL || name->len == 0) {
        memcpy(out, "layer", 6);
        return;
    }
    for (; n < name->len && n + 1 < GS__LAYER_NAME_CAP; n++) {
        uint8_t c = name->data[n];
        out[n] = c >= 0x20 && c <= 0x7e ? (char)c : '?';
    }
    out[n] = '\0';
}

gs_status_t gs_sched_graph_check(const gs_msg_graph_submit_t *m)
{
    uint64_t ntasks, ndeps;

    if (m == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "graph is NULL");
    ntasks = m->ntasks;
    if (m->flags & ~(uint32_t)GS_SUBMIT_PERSIST) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown submit flags 0x%x",
                            m->flags & ~(uint32_t)GS_SUBMIT_PERSIST);
    }
    if (ntasks > GS_SCHED_MAX_TASKS) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "graph has %" PRIu64 " tasks (at most %llu)",
                            ntasks, (unsigned long long)GS_SCHED_MAX_TASKS);
    }
    if (m->nexternals > GS_SCHED_MAX_TASKS) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "graph has %" PRIu64 " externals (at most %llu)",
                            m->nexternals, (unsigned long long)GS_SCHED_MAX_TASKS);
    }
    if (m->nlayers > 0 && m->layers == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "graph declares %u layers but has none", m->nlayers);
    }
    if (ntasks > 0 && (m->task_layer == NULL || m->task_block == NULL || m->dep_off == NULL ||
                       m->task_nbytes == NULL)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "graph of %" PRIu64 " tasks lacks a task table",
                            ntasks);
    }
    if (m->nexternals > 0 && m->externals == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "graph declares %" PRIu64 " externals but has none",
                            m->nexternals);
    }
    if (m->noutputs > 0 && m->outputs == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "graph declares %" PRIu64 " outputs but has none",
                            m->noutputs);
    }
    if (m->nlayer_names != 0 && (m->nlayer_names != m->nlayers || m->layer_names == NULL)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "graph has %u layer names for %u layers (0 or one per layer)",
                            m->nlayer_names, m->nlayers);
    }
    for (uint32_t l = 0; l < m->nlayer_names; l++) {
        if (m->layer_names[l].data == NULL && m->layer_names[l].len > 0) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "layer name %u has %zu bytes but no data", l,
                                m->layer_names[l].len);
        }
    }
    for (uint32_t l = 0; l < m->nlayers; l++) {
        if (m->layers[l].data == NULL && m->layers[l].len > 0) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "layer %u has %zu bytes but no data", l,
                                m->layers[l].len);
        }
    }
    ndeps = 0;
    if (ntasks > 0) {
        if (m->dep_off[0] != 0) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "dep_off[0] is %" PRIu64 ", not 0",
                                m->dep_off[0]);
        }
        ndeps = m->dep_off[ntasks];
        if (ndeps > UINT32_MAX - 1) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "graph has %" PRIu64 " dependencies (at most %u)",
                                ndeps, UINT32_MAX - 1);
        }
        if (ndeps > 0 && m->deps == NULL) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "graph declares %" PRIu64 " dependencies but has none",
                                ndeps);
        }
    }
    for (uint64_t i = 0; i < ntasks; i++) {
        uint64_t lo = m->dep_off[i], hi = m->dep_off[i + 1];
        if (hi < lo || hi > ndeps) {
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "dependency offsets of task %" PRIu64 " are inconsistent (%" PRIu64
                                "..%" PRIu64 " of %" PRIu64 ")", i, lo, hi, ndeps);
        }
        if (m->task_layer[i] >= m->nlayers) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "task %" PRIu64 " uses layer %u of %u", i,
                                m->task_layer[i], m->nlayers);
        }
        if (m->task_nbytes[i] > GS_SCHED_MAX_TASK_NBYTES) {
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "task %" PRIu64 " declares an output of %" PRIu64 " bytes (at most %llu)",
                                i, m->task_nbytes[i], (unsigned long long)GS_SCHED_MAX_TASK_NBYTES);
        }
        for (uint64_t j = lo; j < hi; j++) {
            uint64_t d = m->deps[j];
            if (d == i) {
                return gs_error_set(GS_ERR_INVALID_PARAM, "task %" PRIu64 " depends on itself (cycle)", i);
            }
            if (d > i && d < ntasks) {
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "task %" PRIu64 " depends on later task %" PRIu64
                                    " (cycle or not in topological order)", i, d);
            }
            if (d >= ntasks && d - ntasks >= m->nexternals) {
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "task %" PRIu64 " depends on %" PRIu64 ": out of range (%" PRIu64
                                    " tasks, %" PRIu64 " externals)", i, d, ntasks, m->nexternals);
            }
        }
    }
    for (uint64_t o = 0; o < m->noutputs; o++) {
        if (m->outputs[o] >= ntasks) {
            return gs_error_set(GS_ERR_INVALID_PARAM, "output %" PRIu64 " is task %" PRIu64 " of %" PRIu64,
                                o, m->outputs[o], ntasks);
        }
    }
    return GS_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Submission.                                                                                */

/* A graph's per-task tables come from blocks kept from earlier graphs where one fits (keep.h),
 * else fresh and filled right away: large ones on huge pages where the kernel
 * allows (common/heap.h), one page fault per 2 MiB (1 M tasks: ~40 k faults fewer). */
#define GS__ALLOC(ptr, n, what)                                                               \
    do {                                                                                      \
        size_t gs__sz_ = gs_size_mul((size_t)(n) ? (size_t)(n) : 1, sizeof(*(ptr)));          \
        (ptr) = gs__keep_take(s, gs__sz_, 0, what);                                           \
        if ((ptr) == NULL) goto err_nomem;                                                    \
        (void)gs_heap_advise_huge((ptr), gs__sz_);                                            \
    } while (0)
#define GS__CALLOC(ptr, n, what)                                                              \
    do {                                                                                      \
        (ptr) = gs__keep_take(s, gs_size_mul((size_t)(n) ? (size_t)(n) : 1, sizeof(*(ptr))), \
                              1, what);                                                       \
        if ((ptr) == NULL) goto err_nomem;                                                    \
        (void)gs_heap_advise_huge((ptr), gs_size_mul((size_t)(n) ? (size_t)(n) : 1,           \
                                                     sizeof(*(ptr))));                        \
    } while (0)

static gs_status_t gs__resolve_external(gs_sched_t *s, gs__peer_t *client, const gs_msg_graph_submit_t *m,
                                        uint64_t k, gs__graph_t **src_p, uint32_t *task_p)
{
    uint64_t gid = m->externals[2 * k], tid = m->externals[2 * k + 1];
    gs__graph_t *src = gs__graph_find(s, gid);
    const char *why = NULL;
    if (src == NULL || src->client != client) why = "no such graph of this client";
    else if (!(src->flags & GS_SUBMIT_PERSIST)) why = "that graph was not persisted";
    else if (src->client_released) why = "that graph was released";
    else if (src->phase == GS__GRAPH_FAILED) why = "that graph failed";
    else if (tid >= src->ntasks) why = "no such task in that graph";
    else if (!(src->tflags[tid] & GS__TF_OUTPUT)) why = "that task is not an output of its graph";
    if (why != NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "external %" PRIu64 " (graph %" PRIu64 ", task %" PRIu64
                            ") is not a kept chunk of a live persisted graph of this client: %s",
                            k, gid, tid, why);
    }
    *src_p = src;
    *task_p = (uint32_t)tid;
    return GS_OK;
}

/* Priorities: a depth-first post-order of the needed tasks from the outputs (in their listed
 * order), visiting each task's inputs in their listed order. All the inputs of a task are
 * numbered before it, and the subtree of one input is finished before the next is started, so
 * that running ready tasks lowest number first completes one branch (and frees its
 * intermediates) before the next branch's generators run (like dask.order). Iterative, O(ntasks
 * + ndeps), no allocation: while a task is on the walk's stack (GS__TF_STACKED) prio[t] holds
 * its next input index; the stack grows down from the end of order[] while finished tasks fill
 * it from the start (together at most ntotal entries). */
static void gs__graph_order(gs__graph_t *g, const gs_msg_graph_submit_t *m)
{
    uint32_t ntasks = g->ntasks, ntotal = (uint32_t)g->ntotal, next = 0, sp = ntotal;
    uint32_t *prio = g->prio, *stk = g->order;

    for (uint32_t t = 0; t < ntasks; t++) prio[t] = UINT32_MAX;
    for (uint64_t o = 0; o < m->noutputs; o++) {
        uint32_t out = (uint32_t)m->outputs[o];
        if (prio[out] != UINT32_MAX || (g->tflags[out] & GS__TF_STACKED)) continue;
        g->tflags[out] |= GS__TF_STACKED;
        prio[out] = g->dep_off[out];
        stk[--sp] = out;
        while (sp < ntotal) {
            uint32_t t = stk[sp], c = prio[t];
            if (c < g->dep_off[t + 1]) {
                uint32_t d = g->deps[c];
                prio[t] = c + 1;
                if (d < ntasks && prio[d] == UINT32_MAX && !(g->tflags[d] & GS__TF_STACKED)) {
                    gs_assert(sp > next);
                    g->tflags[d] |= GS__TF_STACKED;
                    prio[d] = g->dep_off[d];
                    stk[--sp] = d;
                }
            } else {
                sp++;
                g->tflags[t] &= (uint8_t)~GS__TF_STACKED;
                prio[t] = next;
                stk[next++] = t;
            }
        }
    }
    gs_assert(next == ntotal);
}

gs_status_t gs__graph_submit(gs_sched_t *s, gs__peer_t *client, const gs_msg_graph_submit_t *m,
                             uint64_t *graph_id_p)
{
    gs_status_t status;
    gs__graph_t *g = NULL;
    uint32_t *remap = NULL;
    uint32_t ntasks, next;
    uint64_t ndeps, layer_bytes = 0;

    if ((status = gs_sched_graph_check(m)) != GS_OK) return status;
    ntasks = (uint32_t)m->ntasks;
    ndeps = ntasks ? m->dep_off[ntasks] : 0;

    g = gs_calloc(1, sizeof *g, "graph");
    if (g == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a graph");
    g->s = s;
    g->client = client;
    g->client_ref = m->client_ref;
    g->flags = m->flags;
    g->ntasks = ntasks;
    g->nlayers = m->nlayers;
    g->progress_sent = UINT64_MAX;
    gs_u64map_init(&g->ext_index);
    gs_u64map_init(&g->replicas);

    /* externals: resolve, de-duplicate */
    if (m->nexternals > 0) {
        GS__ALLOC(remap, m->nexternals, "graph ext remap");
        GS__ALLOC(g->ext_graph, m->nexternals, "graph ext graph");
        GS__ALLOC(g->ext_task, m->nexternals, "graph ext task");
        if (gs_u64map_reserve(&g->ext_index, (size_t)m->nexternals) != GS_OK) goto err_nomem;
        GS__ALLOC(g->srcs, 4, "graph srcs");
        uint32_t srcs_cap = 4;
        next = 0;
        for (uint64_t k = 0; k < m->nexternals; k++) {
            gs__graph_t *src = NULL;
            uint32_t tid = 0;
            uint64_t key, first;
            if ((status = gs__resolve_external(s, client, m, k, &src, &tid)) != GS_OK) goto err;
            key = gs__ext_key(src->id, tid);
            if (gs_u64map_get(&g->ext_index, key, &first)) {
                remap[k] = (uint32_t)first;
                continue;
            }
            if (gs_u64map_put(&g->ext_index, key, next) != GS_OK) goto err_nomem;
            g->ext_graph[next] = src;
            g->ext_task[next] = tid;
            remap[k] = next++;
            uint32_t i;
            for (i = 0; i < g->nsrcs && g->srcs[i] != src; i++) {}
            if (i == g->nsrcs) {
                if (g->nsrcs == srcs_cap) {
                    gs__graph_t **ns = gs_realloc(g->srcs, gs_size_mul(srcs_cap * 2, sizeof *ns), "graph srcs");
                    if (ns == NULL) goto err_nomem;
                    g->srcs = ns;
                    srcs_cap *= 2;
                }
                g->srcs[g->nsrcs++] = src;
            }
        }
        g->nexternals = next;
    }

    /* layers: one blob */
    GS__ALLOC(g->layer_off, (size_t)g->nlayers + 1, "graph layer offsets");
    for (uint32_t l = 0; l < g->nlayers; l++) {
        g->layer_off[l] = layer_bytes;
        layer_bytes += m->layers[l].len;
    }
    g->layer_off[g->nlayers] = layer_bytes;
    GS__ALLOC(g->layer_blob, layer_bytes, "graph layers");
    for (uint32_t l = 0; l < g->nlayers; l++) {
        if (m->layers[l].len) memcpy(g->layer_blob + g->layer_off[l], m->layers[l].data, m->layers[l].len);
    }
    g->layer_names = gs_malloc(gs_size_mul(g->nlayers ? g->nlayers : 1, GS__LAYER_NAME_CAP), "graph layer names");
    if (g->layer_names == NULL) goto err_nomem;
    for (uint32_t l = 0; l < g->nlayers; l++) {
        gs__layer_name_copy(g->layer_names + (size_t)l * GS__LAYER_NAME_CAP,
                            l < m->nlayer_names ? &m->layer_names[l] : NULL);
    }

    /* task table */
    GS__ALLOC(g->task_layer, ntasks, "graph task_layer");
    GS__ALLOC(g->task_block, ntasks, "graph task_block");
    GS__ALLOC(g->dep_off, (size_t)ntasks + 1, "graph dep_off");
    GS__ALLOC(g->deps, ndeps, "graph deps");
    GS__ALLOC(g->nbytes, ntasks, "graph nbytes");
    GS__CALLOC(g->rdep_off, (size_t)ntasks + 2, "graph rdep_off");
    GS__ALLOC(g->state, ntasks, "graph state");
    GS__CALLOC(g->tflags, ntasks, "graph tflags");
    GS__CALLOC(g->nfail, ntasks, "graph nfail");
    GS__CALLOC(g->nretry, ntasks, "graph nretry");
    if (s->task_timeout_ms != 0) GS__CALLOC(g->t_assigned, ntasks, "graph t_assigned");
    GS__CALLOC(g->ndeps_left, ntasks, "graph ndeps_left");
    GS__CALLOC(g->nrefs, ntasks, "graph nrefs");
    GS__ALLOC(g->where, ntasks, "graph where");
    GS__ALLOC(g->prio, ntasks, "graph priorities");
    GS__CALLOC(g->ext_rdep_off, (size_t)g->nexternals + 2, "graph ext_rdep_off");

    if (ntasks) {
        memcpy(g->task_layer, m->task_layer, (size_t)ntasks * sizeof(uint32_t));
        memcpy(g->task_block, m->task_block, (size_t)ntasks * sizeof(uint64_t));
        memcpy(g->nbytes, m->task_nbytes, (size_t)ntasks * sizeof(uint64_t));
    }
    for (uint32_t t = 0; t <= ntasks; t++) g->dep_off[t] = ntasks ? (uint32_t)m->dep_off[t] : 0;
    for (uint64_t j = 0; j < ndeps; j++) {
        uint64_t d = m->deps[j];
        g->deps[j] = d < ntasks ? (uint32_t)d : ntasks + remap[d - ntasks];
    }
    for (uint32_t t = 0; t < ntasks; t++) g->where[t] = GS__NO_WORKER;

    /* outputs and culling: a task is needed if it is an output or feeds a needed task */
    memset(g->state, GS__TS_CULLED, ntasks);
    for (uint64_t o = 0; o < m->noutputs; o++) {
        uint32_t t = (uint32_t)m->outputs[o];
        if (!(g->tflags[t] & GS__TF_OUTPUT)) {
            g->tflags[t] |= GS__TF_OUTPUT;
            g->noutputs++;
        }
        gs__task_state_set(g, t, GS__TS_WAITING);
    }
    for (uint32_t t = ntasks; t-- > 0;) {
        if (g->state[t] == GS__TS_CULLED) continue;
        g->ntotal++;
        for (uint32_t j = g->dep_off[t]; j < g->dep_off[t + 1]; j++) {
            uint32_t d = g->deps[j];
            if (d < ntasks) {
                gs__task_state_set(g, d, GS__TS_WAITING);
                g->nrefs[d]++;
                g->rdep_off[d + 2]++;
            } else {
                g->ext_rdep_off[d - ntasks + 2]++;
            }
        }
    }
    /* dependents CSR (needed dependents only), counting-sort style */
    for (uint32_t t = 0; t < ntasks; t++) g->rdep_off[t + 2] += g->rdep_off[t + 1];
    for (uint32_t k = 0; k < g->nexternals; k++) g->ext_rdep_off[k + 2] += g->ext_rdep_off[k + 1];
    GS__ALLOC(g->rdeps, g->rdep_off[ntasks + 1], "graph rdeps");
    GS__ALLOC(g->ext_rdeps, g->ext_rdep_off[g->nexternals + 1], "graph ext_rdeps");
    for (uint32_t t = 0; t < ntasks; t++) {
        if (g->state[t] == GS__TS_CULLED) continue;
        for (uint32_t j = g->dep_off[t]; j < g->dep_off[t + 1]; j++) {
            uint32_t d = g->deps[j];
            if (d < ntasks) g->rdeps[g->rdep_off[d + 1]++] = t;
            else g->ext_rdeps[g->ext_rdep_off[d - ntasks + 1]++] = t;
        }
    }
    /* now rdep_off[d] .. rdep_off[d + 1] is d's range */

    /* priorities and ready sets */
    GS__ALLOC(g->order, g->ntotal, "graph order");
    if (gs__rset_init(&g->ready_tasks, (uint32_t)g->ntotal) != GS_OK ||
        gs__rset_init(&g->ready_roots, (uint32_t)g->ntotal) != GS_OK) {
        goto err_nomem;
    }
    gs__graph_order(g, m);

    /* users of our sources */
    for (uint32_t i = 0; i < g->nsrcs; i++) {
        if (GS_VEC_RESERVE(&g->srcs[i]->users, g->srcs[i]->users.len + 1) != GS_OK) goto err_nomem;
    }
    for (uint32_t i = 0; i < g->nsrcs; i++) {
        gs__graph_t *src = g->srcs[i];
        src->users.data[src->users.len++] = g;
        src->nusing++;
    }

    /* initial counts and ready tasks; roots: no inputs and a needed dependent */
    for (uint32_t t = 0; t < ntasks; t++) {
        uint32_t n = 0;
        if (g->state[t] == GS__TS_CULLED) continue;
        if (g->dep_off[t] == g->dep_off[t + 1] && g->rdep_off[t] < g->rdep_off[t + 1]) {
            g->tflags[t] |= GS__TF_ROOT;
        }
        for (uint32_t j = g->dep_off[t]; j < g->dep_off[t + 1]; j++) {
            uint32_t d = g->deps[j];
            if (d < ntasks) n++;
            else if (g->ext_graph[d - ntasks]->state[g->ext_task[d - ntasks]] != GS__TS_MEMORY) n++;
        }
        g->ndeps_left[t] = n;
        if (n == 0) {
            gs__task_state_set(g, t, GS__TS_READY);
            g->tflags[t] |= GS__TF_STACKED;
            gs__rset_put((g->tflags[t] & GS__TF_ROOT) ? &g->ready_roots : &g->ready_tasks, g->prio[t]);
            g->nready++;
        }
    }
    gs__rset_seal(&g->ready_roots);   /* leaves filled in task order: summaries in one pass */
    gs__rset_seal(&g->ready_tasks);
    g->noutputs_missing = g->noutputs;

    g->id = s->next_graph_id++;
    if (gs_u64map_put(&s->graphs, g->id, (uint64_t)(uintptr_t)g) != GS_OK) {
        s->next_graph_id--;
        for (uint32_t i = 0; i < g->nsrcs; i++) {
            g->srcs[i]->users.len--;
            g->srcs[i]->nusing--;
        }
        goto err_nomem;
    }
    g->prev = s->gtail;
    if (s->gtail) s->gtail->next = g;
    else s->ghead = g;
    s->gtail = g;
    s->ngraphs++;
    s->ngraphs_active++;
    g->t_accept_ns = gs_now_ns();
    g->progress_last_ns = g->t_accept_ns;
    if (g->nready > 0) gs__graph_active_add(s, g);
    gs_free(remap);
    *graph_id_p = g->id;
    return GS_OK;

err_nomem:
    status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a graph of %u tasks", ntasks);
err:
    gs_free(remap);
    gs__graph_free_arrays(g);
    gs_free(g);
    return status;
}
