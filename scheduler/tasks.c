/*
 * The task state machine of the scheduler: readiness, completion, release of intermediates,
 * failure, fetch retries, worker loss and lineage recomputation; the root tallies and replica
 * records that follow task states; the end of a graph's life (fail, cancel, free).
 * Submission builds the tables (submit.c); placement moves READY tasks to ASSIGNED (place.c).
 *
 * Every task of a graph lives in struct-of-arrays tables indexed by its 32-bit task id. The
 * invariants the code below maintains (checked with gs_assert in debug builds):
 *   - needed task (not CULLED): an output, or a dependency of a needed task;
 *   - nrefs[d]      = number of edges d -> u with u needed and u not done (done = MEMORY or
 *                     RELEASED); an intermediate is released when it drops to 0;
 *   - WAITING u:    ndeps_left[u] = number of input edges whose chunk is not in MEMORY;
 *   - READY / ASSIGNED / DEFERRED u: every input chunk is in MEMORY;
 *   - noutputs_missing = distinct outputs not in MEMORY.
 * Every change of a chunk into or out of MEMORY updates its waiting dependents at once
 * (gs__chunk_available / gs__chunk_unavailable, including dependents in graphs that use it as
 * an external), and every task entering WAITING recounts its inputs, so the invariants hold
 * whatever order events arrive in. Lineage walks use an explicit stack (no recursion).
 */
#include "scheduler/tasks.h"
#include "scheduler/dash/tally.h"

#include "scheduler/cost.h"
#include "scheduler/keep.h"
#include "scheduler/gather.h"
#include "scheduler/send.h"

#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GS__PROGRESS_NS (100ull * 1000 * 1000)

/* ------------------------------------------------------------------------------------------ */
/* Graph tables, the active list, ready tasks, root tallies, releases, replica records.       */

void gs__graph_free_arrays(gs__graph_t *g)
{
    /* the per-task tables may serve the next graph (keep.h) */
    gs_free(g->errmsg);
    gs__keep_put(g->s, g->layer_blob);
    gs__keep_put(g->s, g->layer_off);
    gs_free(g->layer_names);
    gs__keep_put(g->s, g->task_layer);
    gs__keep_put(g->s, g->task_block);
    gs__keep_put(g->s, g->dep_off);
    gs__keep_put(g->s, g->deps);
    gs__keep_put(g->s, g->nbytes);
    gs__keep_put(g->s, g->rdep_off);
    gs__keep_put(g->s, g->rdeps);
    gs__keep_put(g->s, g->state);
    gs__keep_put(g->s, g->tflags);
    gs__keep_put(g->s, g->nfail);
    gs__keep_put(g->s, g->nretry);
    gs__keep_put(g->s, g->t_assigned);
    gs__keep_put(g->s, g->ndeps_left);
    gs__keep_put(g->s, g->nrefs);
    gs__keep_put(g->s, g->where);
    gs__keep_put(g->s, g->ext_graph);
    gs__keep_put(g->s, g->ext_task);
    gs__keep_put(g->s, g->ext_rdep_off);
    gs__keep_put(g->s, g->ext_rdeps);
    gs_u64map_cleanup(&g->ext_index);
    if (g->replicas.len > 0) {
        gs_assert(g->s->nreplica_graphs > 0);
        g->s->nreplica_graphs--;
    }
    gs_u64map_cleanup(&g->replicas);
    gs_free(g->srcs);
    GS_VEC_FREE(&g->users);
    gs__keep_put(g->s, g->prio);
    gs__keep_put(g->s, g->order);
    gs_free(g->ready_tasks.bits);
    gs_free(g->ready_roots.bits);
    for (uint32_t i = 0; i < g->ngw; i++) gs_free(g->gw[i].layer_bits);
    gs_free(g->gw);
    GS_VEC_FREE(&g->parked);
}

void gs__graph_active_add(gs_sched_t *s, gs__graph_t *g)
{
    if (g->in_active) return;
    g->in_active = 1;
    if (s->active == NULL) {
        g->anext = g->aprev = g;
        s->active = g;
    } else {
        /* insert before the head: runs last in the current rotation */
        g->anext = s->active;
        g->aprev = s->active->aprev;
        g->aprev->anext = g;
        s->active->aprev = g;
    }
}

void gs__graph_active_del(gs_sched_t *s, gs__graph_t *g)
{
    if (!g->in_active) return;
    g->in_active = 0;
    if (g->anext == g) {
        s->active = NULL;
    } else {
        g->aprev->anext = g->anext;
        g->anext->aprev = g->aprev;
        if (s->active == g) s->active = g->anext;
    }
    g->anext = g->aprev = NULL;
}

static void gs__make_ready(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    gs__task_state_set(g, t, GS__TS_READY);
    if (!(g->tflags[t] & GS__TF_STACKED)) {
        gs_assert(g->prio[t] < g->ntotal);
        g->tflags[t] |= GS__TF_STACKED;
        gs__rset_add((g->tflags[t] & GS__TF_ROOT) ? &g->ready_roots : &g->ready_tasks, g->prio[t]);
        g->nready++;
    }
    gs__graph_active_add(s, g);
}

/* ---- root tallies (the root bound, sched.h) ---- */

static void gs__roots_add(gs__roots_t *r, uint8_t flag, uint64_t nbytes)
{
    if (flag == GS__TF_RQUEUED) {
        r->nqueued++;
    } else {
        r->nheld++;
        r->held_bytes += nbytes;
    }
    r->bytes += nbytes;
}

static void gs__roots_sub(gs__roots_t *r, uint8_t flag, uint64_t nbytes)
{
    uint32_t *n = flag == GS__TF_RQUEUED ? &r->nqueued : &r->nheld;
    gs_assert(*n > 0 && r->bytes >= nbytes);
    if (*n > 0) (*n)--;
    r->bytes = r->bytes >= nbytes ? r->bytes - nbytes : 0;
    if (flag == GS__TF_RHELD) {
        gs_assert(r->held_bytes >= nbytes);
        r->held_bytes = r->held_bytes >= nbytes ? r->held_bytes - nbytes : 0;
    }
}

/* Count root task @a t in the tallies of worker @a w = where[t] (@a flag: GS__TF_RQUEUED or
 * GS__TF_RHELD). nbytes[t] must not change while it is counted. Every counted task is
 * uncounted (gs__root_uncount) before where[t] changes, except when its worker is removed
 * (the tallies go with the worker; gs__sched_worker_removed clears the flags). */
void gs__root_count(gs__graph_t *g, uint32_t t, gs__worker_t *w, uint8_t flag)
{
    gs_assert(!(g->tflags[t] & (GS__TF_RQUEUED | GS__TF_RHELD)) && g->where[t] == w->slot);
    g->tflags[t] |= flag;
    if (flag == GS__TF_RQUEUED) g->nroots_queued++;
    gs__roots_add(&w->roots, flag, g->nbytes[t]);
}

static void gs__root_uncount_slow(gs_sched_t *s, gs__graph_t *g, uint32_t t, uint8_t flag)
{
    uint32_t slot = g->where[t];
    gs__worker_t *w = slot < s->nslots ? s->slots[slot] : NULL;
    g->tflags[t] &= (uint8_t)~flag;
    if (flag == GS__TF_RQUEUED) {
        gs_assert(g->nroots_queued > 0);
        if (g->nroots_queued > 0) g->nroots_queued--;
    }
    gs_assert(w != NULL);
    if (w != NULL) gs__roots_sub(&w->roots, flag, g->nbytes[t]);
}

/* Take task @a t out of the root tallies, if counted. Call before where[t] changes. */
static inline void gs__root_uncount(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    uint8_t flag = g->tflags[t] & (GS__TF_RQUEUED | GS__TF_RHELD);
    if (flag != 0) gs__root_uncount_slow(s, g, t, flag);
}

/* A root chunk counts as held while it is stored and some needed dependent has not run. */
static inline void gs__root_sync_held(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    uint8_t f = g->tflags[t];
    if (!(f & (GS__TF_ROOT | GS__TF_RHELD))) return;
    if ((f & GS__TF_ROOT) && g->state[t] == GS__TS_MEMORY && g->nrefs[t] > 0) {
        if (!(f & GS__TF_RHELD)) {
            uint32_t slot = g->where[t];
            if (slot < s->nslots && s->slots[slot] != NULL) gs__root_count(g, t, s->slots[slot], GS__TF_RHELD);
        }
    } else if (f & GS__TF_RHELD) {
        gs__root_uncount_slow(s, g, t, GS__TF_RHELD);
    }
}

void gs__queue_release(gs__worker_t *w, uint64_t graph, uint64_t task)
{
    if (GS_VEC_RESERVE(&w->release_keys, w->release_keys.len + 2) != GS_OK) {
        GS_LOG_ERROR("out of memory queueing a release of chunk (%" PRIu64 ", %" PRIu64 ") on worker %s",
                     graph, task, w->name);
        return;
    }
    w->release_keys.data[w->release_keys.len++] = graph;
    w->release_keys.data[w->release_keys.len++] = task;
}

void gs__replica_set(gs_sched_t *s, gs__graph_t *g, uint32_t t, uint64_t mask)
{
    size_t before = g->replicas.len;
    if (mask == 0) {
        gs_u64map_del(&g->replicas, t);
    } else if (gs_u64map_put(&g->replicas, t, mask) != GS_OK) {
        GS_LOG_ERROR("out of memory recording a replica of chunk (%" PRIu64 ", %u)", g->id, t);
    }
    if (before == 0 && g->replicas.len > 0) s->nreplica_graphs++;
    if (before > 0 && g->replicas.len == 0) s->nreplica_graphs--;
}

static void gs__release_chunk(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    uint32_t slot = g->where[t];
    uint64_t mask = gs__replica_mask(g, t);
    gs_assert(g->state[t] == GS__TS_MEMORY);
    gs__root_uncount(s, g, t);
    if (slot < s->nslots && s->slots[slot] != NULL) gs__queue_release(s->slots[slot], g->id, t);
    if (mask != 0) {
        for (uint64_t m = mask; m != 0; m &= m - 1) {
            uint32_t r = (uint32_t)__builtin_ctzll(m);
            if (r < s->nslots && s->slots[r] != NULL) gs__queue_release(s->slots[r], g->id, t);
        }
        gs__replica_set(s, g, t, 0);
    }
    if (slot < g->ngw && g->gw[slot].nheld > 0) g->gw[slot].nheld--;
    gs__task_state_set(g, t, GS__TS_RELEASED);
    g->where[t] = GS__NO_WORKER;
}

void gs__sched_flush_releases(gs_sched_t *s)
{
    for (uint32_t i = 0; i < s->nworkers; i++) {
        gs__worker_t *w = s->live[i];
        gs_msg_t msg;
        if (w->release_keys.len == 0) continue;
        memset(&msg, 0, sizeof msg);
        msg.type = GS_MSG_RELEASE;
        msg.u.release.n = w->release_keys.len / 2;
        msg.u.release.keys = w->release_keys.data;
        gs__sched_send(s, w->peer, &msg);
        w->release_keys.len = 0;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Client notifications.                                                                      */

static void gs__send_progress(gs_sched_t *s, gs__graph_t *g, uint64_t now)
{
    gs_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_PROGRESS;
    msg.u.progress.graph_id = g->id;
    msg.u.progress.done = g->ndone;
    msg.u.progress.total = g->ntotal;
    gs__sched_send(s, g->client, &msg);
    g->progress_sent = g->ndone;
    g->progress_last_ns = now;
}

void gs__sched_progress(gs_sched_t *s, uint64_t now, int force)
{
    for (gs__graph_t *g = s->ghead; g != NULL; g = g->next) {
        if (g->phase != GS__GRAPH_RUNNING || g->progress_sent == g->ndone) continue;
        if (force || now - g->progress_last_ns >= GS__PROGRESS_NS) gs__send_progress(s, g, now);
    }
}

static void gs__send_graph_done(gs_sched_t *s, gs__graph_t *g)
{
    gs_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_GRAPH_DONE;
    msg.u.graph_done.graph_id = g->id;
    msg.u.graph_done.status = g->status;
    if (g->errmsg != NULL) {
        msg.u.graph_done.message.data = (const uint8_t *)g->errmsg;
        msg.u.graph_done.message.len = strlen(g->errmsg);
    }
    msg.u.graph_done.ntasks = g->ntasks;
    msg.u.graph_done.run_ns_total = g->run_ns_total;
    msg.u.graph_done.wall_ns = g->t_done_ns - g->t_accept_ns;
    gs__sched_send(s, g->client, &msg);
}

static void gs__outputs_complete(gs_sched_t *s, gs__graph_t *g)
{
    uint64_t now = gs_now_ns();
    if (g->phase == GS__GRAPH_RUNNING) {
        g->phase = GS__GRAPH_DONE;
        g->t_done_ns = now;
        s->ngraphs_active--;
        gs__send_progress(s, g, now);
        g->status = GS_OK;
        gs__send_graph_done(s, g);
        GS_LOG_DEBUG("graph %" PRIu64 " done: %" PRIu64 " tasks in %.3f ms", g->id, g->ntotal,
                     (double)(now - g->t_accept_ns) * 1e-6);
    }
    gs__graph_flush_parked(s, g);
}

/* Called after GRAPH_ACCEPTED went out. */
void gs__graph_accepted(gs_sched_t *s, gs__graph_t *g)
{
    if (g->noutputs_missing == 0) gs__outputs_complete(s, g);
    else if (s->nworkers == 0) {
        GS_LOG_WARN("graph %" PRIu64 " (%" PRIu64 " tasks) waits: no workers are registered", g->id,
                    g->ntotal);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Stopping and failing graphs.                                                               */

/* End @a g on the workers: CANCEL to every worker that received tasks of it (drop queued tasks
 * and layers of the graph; sent once per worker at the end of the graph's life: failure,
 * cancel or release), RELEASE of its chunks (batched, sent at the next tick). */
static void gs__graph_stop_workers(gs_sched_t *s, gs__graph_t *g)
{
    gs_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_CANCEL;
    msg.u.cancel.graph_id = g->id;
    if (s->stopping) return;
    for (uint32_t slot = 0; slot < g->ngw; slot++) {
        gs__gw_t *gw = &g->gw[slot];
        gs__worker_t *w = slot < s->nslots ? s->slots[slot] : NULL;
        if (w != NULL && gw->layer_bits != NULL) gs__sched_send(s, w->peer, &msg);
        /* room for the releases below at once (one per chunk held there; a failure here only
         * leaves each release to grow the vector itself) */
        if (w != NULL && gw->nheld > 0) {
            (void)GS_VEC_RESERVE(&w->release_keys, w->release_keys.len + 2 * (size_t)gw->nheld);
        }
        if (w != NULL && gw->outstanding > 0) {
            gs_assert(w->outstanding >= gw->outstanding);
            w->outstanding -= gw->outstanding;
        }
        gw->outstanding = 0;
        gw->nheld = 0;
        gs_free(gw->layer_bits);
        gw->layer_bits = NULL;
    }
    for (uint32_t t = 0; t < g->ntasks; t++) {
        gs__root_uncount(s, g, t);
        if (g->state[t] == GS__TS_MEMORY) gs__release_chunk(s, g, t);   /* into the reserved room */
    }
    gs_assert(g->nroots_queued == 0);
}

static void gs__graph_failv(gs__graph_t *g, gs_status_t status, const char *fmt, va_list ap)
{
    gs_sched_t *s = g->s;
    char text[1024];
    int was_running;

    if (g->phase == GS__GRAPH_FAILED) return;
    vsnprintf(text, sizeof text, fmt, ap);
    was_running = g->phase == GS__GRAPH_RUNNING;
    g->phase = GS__GRAPH_FAILED;
    g->status = status;
    gs_free(g->errmsg);
    g->errmsg = gs_strdup(text, "graph error");
    g->t_done_ns = gs_now_ns();
    if (status != GS_ERR_CANCELED) GS_LOG_WARN("graph %" PRIu64 " failed: %s", g->id, text);
    else GS_LOG_INFO("graph %" PRIu64 ": %s", g->id, text);

    gs__graph_stop_workers(s, g);
    for (uint32_t t = 0; t < g->ntasks; t++) {
        uint8_t st = g->state[t];
        g->tflags[t] &= (uint8_t)~GS__TF_STACKED;
        if (st != GS__TS_RELEASED && st != GS__TS_CULLED) gs__task_state_set(g, t, GS__TS_ERRED);
        g->where[t] = GS__NO_WORKER;
    }
    gs__rset_clear(&g->ready_tasks);
    gs__rset_clear(&g->ready_roots);
    g->nready = 0;
    gs__graph_active_del(s, g);
    if (was_running) {
        s->ngraphs_active--;
        if (!g->client_released) gs__send_graph_done(s, g);
    }
    gs__graph_flush_parked(s, g);

    /* Graphs reading our outputs that still need them fail too. */
    for (size_t i = 0; i < g->users.len; i++) {
        gs__graph_t *u = g->users.data[i];
        if (u->phase == GS__GRAPH_FAILED) continue;
        if (u->phase == GS__GRAPH_RUNNING || u->noutputs_missing > 0) {
            gs__graph_cancel(u, status == GS_ERR_CANCELED ? GS_ERR_TASK_FAILED : status,
                             "input graph %" PRIu64 " failed: %s", g->id, text);
        }
    }
}

void gs__graph_cancel(gs__graph_t *g, gs_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gs__graph_failv(g, status, fmt, ap);
    va_end(ap);
}

/* Free a graph. With @a cascade, sources released by their client whose last user this was
 * are freed too. */
static void gs__graph_free(gs_sched_t *s, gs__graph_t *g, int cascade)
{
    gs__dash_graph_gone(s->dash, g);
    if (g->phase != GS__GRAPH_FAILED) {
        if (g->phase == GS__GRAPH_RUNNING) s->ngraphs_active--;
        gs__graph_stop_workers(s, g);
    }
    gs__graph_active_del(s, g);
    gs_u64map_del(&s->graphs, g->id);
    if (g->prev) g->prev->next = g->next;
    else s->ghead = g->next;
    if (g->next) g->next->prev = g->prev;
    else s->gtail = g->prev;
    s->ngraphs--;
    for (uint32_t i = 0; i < g->nsrcs; i++) {
        gs__graph_t *src = g->srcs[i];
        for (size_t j = 0; j < src->users.len; j++) {
            if (src->users.data[j] == g) {
                src->users.data[j] = src->users.data[--src->users.len];
                break;
            }
        }
        src->nusing--;
        if (cascade && src->client_released && src->nusing == 0) gs__graph_free(s, src, 1);
    }
    for (size_t i = 0; i < g->users.len; i++) {
        /* only on a forced drop (users are freed first, in descending id order) */
        gs__graph_t *u = g->users.data[i];
        for (uint32_t j = 0; j < u->nsrcs; j++) {
            if (u->srcs[j] == g) u->srcs[j] = u->srcs[--u->nsrcs];
        }
    }
    gs__graph_free_arrays(g);
    gs_free(g);
}

void gs__graph_release(gs__graph_t *g)
{
    gs_sched_t *s = g->s;
    if (g->client_released) return;
    g->client_released = 1;
    if (g->phase == GS__GRAPH_RUNNING) {
        gs__graph_cancel(g, GS_ERR_CANCELED, "graph %" PRIu64 " released while running", g->id);
    }
    if (g->nusing == 0) gs__graph_free(s, g, 1);
}

void gs__graph_drop_client(gs_sched_t *s, gs__peer_t *client)
{
    gs__graph_t *g = s->gtail;
    while (g != NULL) {
        gs__graph_t *prev = g->prev;
        if (g->client == client) {
            if (g->phase == GS__GRAPH_RUNNING) {
                g->client_released = 1;   /* no GRAPH_DONE to a client that is gone */
                gs__graph_cancel(g, GS_ERR_CANCELED, "client of graph %" PRIu64 " disconnected", g->id);
            }
            gs__graph_free(s, g, 0);
        }
        g = prev;
    }
}

void gs__graph_free_all(gs_sched_t *s)
{
    while (s->gtail != NULL) gs__graph_free(s, s->gtail, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Chunk availability and lineage.                                                            */

static void gs__dep_available(gs_sched_t *s, gs__graph_t *g, uint32_t u)
{
    if (g->state[u] != GS__TS_WAITING) return;
    gs_assert(g->ndeps_left[u] > 0);
    if (g->ndeps_left[u] > 0 && --g->ndeps_left[u] == 0) gs__make_ready(s, g, u);
}

static void gs__dep_unavailable(gs__graph_t *g, uint32_t u)
{
    switch (g->state[u]) {
    case GS__TS_WAITING:
        g->ndeps_left[u]++;
        break;
    case GS__TS_READY:
    case GS__TS_DEFERRED:
    case GS__TS_ASSIGNED:
        /* An assigned task stays counted as outstanding on its worker; whatever that worker
         * reports for it later is ignored (and an OK result released there). */
        gs__root_uncount(g->s, g, u);   /* roots have no inputs: never counted here */
        gs__task_state_set(g, u, GS__TS_WAITING);
        g->ndeps_left[u] = 1;
        g->where[u] = GS__NO_WORKER;
        break;
    default:
        break;
    }
}

/* Call @a fn for every user-graph task reading output @a t of @a g as an external. */
#define GS__FOR_EXT_USERS(g, t, U, UT, BODY)                                                 \
    do {                                                                                     \
        for (size_t ui_ = 0; ui_ < (g)->users.len; ui_++) {                                 \
            gs__graph_t *U = (g)->users.data[ui_];                                          \
            uint64_t k_;                                                                     \
            if (U->phase == GS__GRAPH_FAILED) continue;                                     \
            if (!gs_u64map_get(&U->ext_index, gs__ext_key((g)->id, (t)), &k_)) continue;     \
            for (uint32_t j_ = U->ext_rdep_off[k_]; j_ < U->ext_rdep_off[k_ + 1]; j_++) {    \
                uint32_t UT = U->ext_rdeps[j_];                                              \
                BODY;                                                                        \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* Wake the dependents of chunk @a t (placement order comes from their priorities). */
static void gs__chunk_available(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    for (uint32_t j = g->rdep_off[t + 1]; j-- > g->rdep_off[t];) gs__dep_available(s, g, g->rdeps[j]);
    if ((g->tflags[t] & GS__TF_OUTPUT) && g->users.len > 0) {
        for (size_t ui = 0; ui < g->users.len; ui++) {
            gs__graph_t *u = g->users.data[ui];
            uint64_t k;
            if (u->phase == GS__GRAPH_FAILED) continue;
            if (!gs_u64map_get(&u->ext_index, gs__ext_key(g->id, t), &k)) continue;
            for (uint32_t j = u->ext_rdep_off[k + 1]; j-- > u->ext_rdep_off[k];) gs__dep_available(s, u, u->ext_rdeps[j]);
        }
    }
}

static void gs__chunk_unavailable(gs__graph_t *g, uint32_t t)
{
    for (uint32_t j = g->rdep_off[t]; j < g->rdep_off[t + 1]; j++) gs__dep_unavailable(g, g->rdeps[j]);
    if ((g->tflags[t] & GS__TF_OUTPUT) && g->users.len > 0) {
        GS__FOR_EXT_USERS(g, t, ug, ut, gs__dep_unavailable(ug, ut));
    }
}

static int gs__stack_push(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    if (GS_VEC_RESERVE(&s->stack, s->stack.len + 2) != GS_OK) return 0;
    s->stack.data[s->stack.len++] = (uint64_t)(uintptr_t)g;
    s->stack.data[s->stack.len++] = t;
    return 1;
}

/* Count the inputs of @a t (which just entered WAITING) not in memory; chunks that were
 * released or lost are queued on the lineage stack for recomputation; @a add_refs adds t's
 * reference to each internal input (t was done before). Returns 0 when the graph failed. */
static int gs__recount(gs_sched_t *s, gs__graph_t *g, uint32_t t, int add_refs)
{
    uint32_t n = 0;
    for (uint32_t j = g->dep_off[t]; j < g->dep_off[t + 1]; j++) {
        uint32_t d = g->deps[j];
        gs__graph_t *dg = g;
        uint32_t dt = d;
        uint8_t st;
        if (d >= g->ntasks) {
            dg = g->ext_graph[d - g->ntasks];
            dt = g->ext_task[d - g->ntasks];
            if (dg->phase == GS__GRAPH_FAILED) {
                gs__graph_cancel(g, GS_ERR_TASK_FAILED,
                                 "input graph %" PRIu64 " of task %u (layer %u) of graph %" PRIu64
                                 " failed: %s", dg->id, t, g->task_layer[t], g->id,
                                 dg->errmsg ? dg->errmsg : "unknown error");
                return 0;
            }
        } else if (add_refs) {
            g->nrefs[d]++;
            if (g->nrefs[d] == 1) gs__root_sync_held(s, g, d);   /* a stored root is needed again */
        }
        st = dg->state[dt];
        if (st != GS__TS_MEMORY) {
            n++;
            if (st == GS__TS_RELEASED || st == GS__TS_LOST) {
                if (!gs__stack_push(s, dg, dt)) {
                    gs__graph_cancel(g, GS_ERR_NO_MEMORY, "out of memory planning the recomputation "
                                     "of task %u of graph %" PRIu64, dt, dg->id);
                    return 0;
                }
            }
        }
    }
    g->ndeps_left[t] = n;
    if (n == 0) gs__make_ready(s, g, t);
    return 1;
}

/* Process the lineage stack: every (graph, task) on it whose chunk is gone is reset to WAITING
 * (recomputed), recursively through released ancestors. */
static void gs__lineage_run(gs_sched_t *s)
{
    while (s->stack.len >= 2) {
        uint32_t t = (uint32_t)s->stack.data[--s->stack.len];
        gs__graph_t *g = gs__ptr_graph(s->stack.data[--s->stack.len]);
        uint8_t st = g->state[t];
        if (g->phase == GS__GRAPH_FAILED) continue;
        if (st != GS__TS_RELEASED && st != GS__TS_LOST) continue;
        gs_assert(g->ndone > 0);
        if (g->ndone > 0) g->ndone--;
        gs__task_state_set(g, t, GS__TS_WAITING);
        g->where[t] = GS__NO_WORKER;
        s->st.tasks_recomputed_total++;
        if (g->phase == GS__GRAPH_DONE || g->client_released) {
            GS_LOG_DEBUG("recomputing task %u of finished graph %" PRIu64, t, g->id);
        }
        gs__recount(s, g, t, 1);
    }
    s->stack.len = 0;
}

/* Make sure chunk (g, t) will exist again. */
static void gs__need(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    if (!gs__stack_push(s, g, t)) {
        gs__graph_cancel(g, GS_ERR_NO_MEMORY, "out of memory planning the recomputation of task %u", t);
        return;
    }
    gs__lineage_run(s);
}

/* A pending task (assigned to a removed worker, or deferred) goes back to waiting/ready. */
static void gs__reset_pending(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    gs__task_state_set(g, t, GS__TS_WAITING);
    g->where[t] = GS__NO_WORKER;
    if (gs__recount(s, g, t, 0)) gs__lineage_run(s);
    s->stack.len = 0;
}

#ifdef GS_SCHED_CHECK_INVARIANTS
/* Test builds (-DGS_SCHED_CHECK_INVARIANTS): recount the root tallies and the ready sets from
 * the task tables and abort on any difference. O(tasks of all graphs) per call. */
void gs__sched_check_invariants(gs_sched_t *s)
{
    gs__roots_t *sum = gs_calloc(s->nslots ? s->nslots : 1, sizeof *sum, "invariant check");
    gs_assert_always(sum != NULL);
    for (gs__graph_t *g = s->ghead; g != NULL; g = g->next) {
        uint32_t nq = 0, nstacked = 0;
        if (g->phase == GS__GRAPH_FAILED) {
            gs_assert_always(g->nready == 0 && g->nroots_queued == 0);
            continue;
        }
        for (uint32_t t = 0; t < g->ntasks; t++) {
            uint8_t f = g->tflags[t];
            int root = (f & GS__TF_ROOT) != 0;
            int q = root && g->state[t] == GS__TS_ASSIGNED;
            int h = root && g->state[t] == GS__TS_MEMORY && g->nrefs[t] > 0;
            gs_assert_always(q == ((f & GS__TF_RQUEUED) != 0));
            gs_assert_always(h == ((f & GS__TF_RHELD) != 0));
            if (q || h) {
                gs_assert_always(g->where[t] < s->nslots && s->slots[g->where[t]] != NULL);
                if (q) sum[g->where[t]].nqueued++;
                else sum[g->where[t]].nheld++;
                if (h) sum[g->where[t]].held_bytes += g->nbytes[t];
                sum[g->where[t]].bytes += g->nbytes[t];
            }
            nq += (uint32_t)q;
            if (f & GS__TF_STACKED) {
                const gs__rset_t *r = root ? &g->ready_roots : &g->ready_tasks;
                uint32_t p = g->prio[t];
                nstacked++;
                gs_assert_always(p < g->ntotal && g->order[p] == t);
                gs_assert_always(r->bits[r->off[0] + (p >> 6)] & (1ull << (p & 63)));
            }
            if (g->state[t] == GS__TS_READY) gs_assert_always(f & GS__TF_STACKED);
        }
        gs_assert_always(nq == g->nroots_queued);
        gs_assert_always(nstacked == g->nready && g->nready == g->ready_tasks.n + g->ready_roots.n);
    }
    for (uint32_t i = 0; i < s->nworkers; i++) {
        gs__worker_t *w = s->live[i];
        gs_assert_always(w->roots.nqueued == sum[w->slot].nqueued);
        gs_assert_always(w->roots.nheld == sum[w->slot].nheld);
        gs_assert_always(w->roots.bytes == sum[w->slot].bytes);
        gs_assert_always(w->roots.held_bytes == sum[w->slot].held_bytes);
    }
    gs_free(sum);
}
#endif

/* ------------------------------------------------------------------------------------------ */
/* Completion.                                                                                */

static void gs__complete(gs_sched_t *s, gs__graph_t *g, uint32_t t, gs__worker_t *w, uint64_t nbytes,
                         uint64_t run_ns)
{
    gs__root_uncount(s, g, t);   /* before nbytes changes */
    gs__task_state_set(g, t, GS__TS_MEMORY);
    g->where[t] = w->slot;
    g->nbytes[t] = nbytes;
    if (w->slot < g->ngw) g->gw[w->slot].nheld++;
    g->ndone++;
    g->run_ns_total += run_ns;
    s->st.tasks_done_total++;
    gs__root_sync_held(s, g, t);
    for (uint32_t j = g->dep_off[t]; j < g->dep_off[t + 1]; j++) {
        uint32_t d = g->deps[j];
        if (d >= g->ntasks) continue;
        gs_assert(g->nrefs[d] > 0);
        if (g->nrefs[d] > 0 && --g->nrefs[d] == 0) {
            gs__root_sync_held(s, g, d);   /* a root chunk consumed by all its dependents */
            if (!(g->tflags[d] & GS__TF_OUTPUT) && g->state[d] == GS__TS_MEMORY) gs__release_chunk(s, g, d);
        }
    }
    gs__chunk_available(s, g, t);
    if (g->tflags[t] & GS__TF_OUTPUT) {
        gs_assert(g->noutputs_missing > 0);
        if (g->noutputs_missing > 0 && --g->noutputs_missing == 0) gs__outputs_complete(s, g);
    } else if (g->nrefs[t] == 0) {
        gs__release_chunk(s, g, t);   /* recomputed for a need that has gone */
    }
}

static void gs__retry_later(gs_sched_t *s, gs__graph_t *g, uint32_t t, const char *msg)
{
    gs__retry_t r;
    uint32_t n = ++g->nretry[t];
    if (n > GS_SCHED_FETCH_RETRIES) {
        gs__graph_cancel(g, GS_ERR_WORKER_LOST,
                         "task %u (layer %u, block %" PRIu64 ") of graph %" PRIu64
                         " could not fetch its inputs %u times: %s", t, g->task_layer[t],
                         g->task_block[t], g->id, n, msg);
        return;
    }
    gs__root_uncount(s, g, t);
    gs__task_state_set(g, t, GS__TS_DEFERRED);
    g->where[t] = GS__NO_WORKER;
    r.graph = g->id;
    r.task = t;
    /* back-off: 10 ms doubling, at most a third of the heartbeat timeout (so the retries
     * outlast the detection of a dead input holder) */
    {
        uint64_t cap_ms = s->heartbeat_timeout_ms / 3 > 10 ? s->heartbeat_timeout_ms / 3 : 10;
        uint64_t d_ms = n < 20 ? 10ull << (n - 1) : cap_ms;
        r.at_ns = gs_now_ns() + (d_ms < cap_ms ? d_ms : cap_ms) * 1000000ull;
    }
    if (GS_VEC_PUSH(&s->retries, r) != GS_OK) gs__reset_pending(s, g, t);
}

void gs__sched_retries(gs_sched_t *s, uint64_t now)
{
    size_t i = 0;
    while (i < s->retries.len) {
        gs__retry_t r = s->retries.data[i];
        gs__graph_t *g;
        if (r.at_ns > now) {
            i++;
            continue;
        }
        s->retries.data[i] = s->retries.data[--s->retries.len];
        g = gs__graph_find(s, r.graph);
        if (g == NULL || g->phase == GS__GRAPH_FAILED || r.task >= g->ntasks) continue;
        if (g->state[r.task] == GS__TS_DEFERRED) gs__reset_pending(s, g, r.task);
    }
}

/* Task @a t, assigned to worker slot where[t], was not reported within the task timeout: it
 * counts one failure and goes back to waiting/ready (its late result is released like any
 * result nobody waits for); past allowed_failures its graph fails. */
static void gs__task_expired(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    uint32_t slot = g->where[t];
    gs__worker_t *w = slot < s->nslots ? s->slots[slot] : NULL;
    const char *wname = w != NULL ? w->name : "?";

    s->st.tasks_timed_out_total++;
    if (w != NULL && !w->suspect) {
        w->suspect = 1;
        s->nsuspect++;
    }
    gs__root_uncount(s, g, t);
    if (++g->nfail[t] > s->allowed_failures) {
        gs__task_state_set(g, t, GS__TS_ERRED);
        gs__graph_cancel(g, GS_ERR_TIMED_OUT,
                         "task %u (layer %u, block %" PRIu64 ") of graph %" PRIu64 " timed out on worker %s:"
                         " not reported within the task timeout of %u ms (failures: %u, allowed: %u)", t,
                         g->task_layer[t], g->task_block[t], g->id, wname, s->task_timeout_ms,
                         (unsigned)g->nfail[t], s->allowed_failures);
        return;
    }
    GS_LOG_WARN("task %u (layer %u, block %" PRIu64 ") of graph %" PRIu64 " not reported by worker %s within"
                " %u ms: retried", t, g->task_layer[t], g->task_block[t], g->id, wname, s->task_timeout_ms);
    gs__reset_pending(s, g, t);
}

/* Expire tasks assigned longer than the task timeout ago. @a stall_ns: time gsched's own loop
 * stood still just before (not counted: the workers' reports wait unread meanwhile). */
void gs__sched_task_timeouts(gs_sched_t *s, uint64_t now, uint64_t stall_ns)
{
    uint64_t limit = (uint64_t)s->task_timeout_ms * 1000000ull;

    if (limit == 0) return;
    for (gs__graph_t *g = s->ghead; g != NULL && stall_ns > 0; g = g->next) {
        if (g->t_assigned == NULL) continue;
        for (uint32_t t = 0; t < g->ntasks; t++) {
            if (g->state[t] == GS__TS_ASSIGNED) g->t_assigned[t] += stall_ns;
        }
    }
    /* a scan costs O(tasks held): look every eighth of the limit (expiry within 1.125 x it) */
    if (now < s->timeout_scan_ns) return;
    s->timeout_scan_ns = now + limit / 8;
    for (gs__graph_t *g = s->ghead; g != NULL; g = g->next) {
        if (g->t_assigned == NULL) continue;
        for (uint32_t t = 0; t < g->ntasks && g->phase != GS__GRAPH_FAILED; t++) {
            if (g->state[t] == GS__TS_ASSIGNED && now > g->t_assigned[t] && now - g->t_assigned[t] > limit) {
                gs__task_expired(s, g, t);
            }
        }
    }
}

void gs__sched_task_done(gs_sched_t *s, gs__worker_t *w, const gs_msg_task_done_t *m)
{
    gs__graph_t *g = NULL;
    uint64_t cached = 0, run_sum = 0, nrun = 0;
    uint32_t kerr = 0, slot = w->slot;

    gs__dash_batch(s->dash, w, m->now_ns);
    if (w->suspect && m->n > 0) {   /* it reports again: placement may use it */
        w->suspect = 0;
        s->nsuspect--;
    }
    for (uint64_t i = 0; i < m->n; i++) {
        int32_t status = m->status[i];
        const char *emsg = "";
        uint64_t gid = m->graph_id[i], tid = m->task_id[i];
        uint32_t t;
        if (status != GS_OK) {
            if (kerr < m->nerrors && m->errors[kerr].data != NULL) emsg = (const char *)m->errors[kerr].data;
            kerr++;
        }
        if (g == NULL || gid != cached) {
            g = gs__graph_find(s, gid);
            cached = gid;
        }
        if (g == NULL || g->phase == GS__GRAPH_FAILED || tid >= g->ntasks) {
            if (g == NULL || g->phase == GS__GRAPH_FAILED) {
                if (status == GS_OK) gs__queue_release(w, gid, tid);
            } else {
                GS_LOG_WARN("worker %s reported task %" PRIu64 " of graph %" PRIu64 " which has %u tasks",
                            w->name, tid, gid, g->ntasks);
            }
            continue;
        }
        t = (uint32_t)tid;
        gs__dash_task(s->dash, g, t, w, status, m->run_ns[i], m->fetch_ns[i], m->start_ns[i], m->end_ns[i]);
        if (slot < g->ngw && g->gw[slot].outstanding > 0) {
            g->gw[slot].outstanding--;
            if (w->outstanding > 0) w->outstanding--;
        }
        if (g->state[t] == GS__TS_ASSIGNED && g->where[t] == slot) {
            if (status == GS_OK) {
                gs__complete(s, g, t, w, m->nbytes[i], m->run_ns[i]);
                run_sum += m->run_ns[i];
                nrun++;
            } else if (status == GS_ERR_WORKER_LOST) {
                GS_LOG_INFO("task %u of graph %" PRIu64 " could not fetch an input on worker %s: %s", t,
                            g->id, w->name, emsg);
                gs__retry_later(s, g, t, emsg);
            } else {
                gs__task_state_set(g, t, GS__TS_ERRED);
                gs__graph_cancel(g, GS_ERR_TASK_FAILED,
                                 "task %u (layer %u, block %" PRIu64 ") of graph %" PRIu64
                                 " failed on worker %s: %s: %s", t, g->task_layer[t], g->task_block[t],
                                 g->id, w->name, gs_status_name((gs_status_t)status), emsg);
            }
        } else if (status == GS_OK && !(g->state[t] == GS__TS_MEMORY && g->where[t] == slot)) {
            gs__queue_release(w, g->id, t);   /* a result nobody waits for any more */
        }
    }
    if (nrun > 0) {
        double sample = (double)run_sum / (double)nrun;
        w->ns_per_task = 0.5 * w->ns_per_task + 0.5 * sample;
        gs__sched_worker_capacity(w);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Worker removal.                                                                            */

void gs__sched_worker_removed(gs_sched_t *s, gs__worker_t *w)
{
    uint32_t slot = w->slot;

    if (w->suspect) {
        w->suspect = 0;
        s->nsuspect--;
    }
    /* pass 1a: tasks that were assigned there (before any input loss re-plans them, so that
     * each counts the failure) */
    for (gs__graph_t *g = s->ghead; g != NULL; g = g->next) {
        if (g->phase == GS__GRAPH_FAILED) continue;
        if (slot < g->ngw) {
            gs_free(g->gw[slot].layer_bits);
            g->gw[slot].layer_bits = NULL;
            g->gw[slot].outstanding = 0;
            g->gw[slot].nheld = 0;
        }
        for (uint32_t t = 0; t < g->ntasks; t++) {
            if (g->where[t] == slot && (g->tflags[t] & (GS__TF_RQUEUED | GS__TF_RHELD))) {
                /* the tallies go with the worker */
                if ((g->tflags[t] & GS__TF_RQUEUED) && g->nroots_queued > 0) g->nroots_queued--;
                g->tflags[t] &= (uint8_t)~(GS__TF_RQUEUED | GS__TF_RHELD);
            }
            if (g->where[t] == slot && g->state[t] == GS__TS_ASSIGNED) {
                gs__task_state_set(g, t, GS__TS_LOST_RUNNING);
                g->where[t] = GS__NO_WORKER;
            }
        }
    }
    /* pass 1b: chunks that were held there (a chunk with a copy elsewhere survives: its first
     * replica becomes the primary holder) */
    for (gs__graph_t *g = s->ghead; g != NULL; g = g->next) {
        if (g->phase == GS__GRAPH_FAILED) continue;
        for (uint32_t t = 0; t < g->ntasks; t++) {
            if (g->replicas.len > 0 && g->state[t] == GS__TS_MEMORY) {
                uint64_t mask = gs__replica_mask(g, t), bit = slot < 64 ? 1ull << slot : 0;
                if (mask & bit) {
                    mask &= ~bit;
                    gs__replica_set(s, g, t, mask);
                }
                if (mask != 0 && g->where[t] == slot) {
                    uint32_t r = (uint32_t)__builtin_ctzll(mask);
                    gs__replica_set(s, g, t, mask & (mask - 1));
                    g->where[t] = r;
                    if (r < g->ngw) g->gw[r].nheld++;
                    gs__root_sync_held(s, g, t);
                    GS_LOG_INFO("chunk (%" PRIu64 ", %u) lost with worker %s survives on worker %s", g->id, t,
                                w->name, s->slots[r] != NULL ? s->slots[r]->name : "?");
                    continue;
                }
            }
            if (g->where[t] == slot && g->state[t] == GS__TS_MEMORY) {
                gs__task_state_set(g, t, GS__TS_LOST);
                g->where[t] = GS__NO_WORKER;
                if (g->tflags[t] & GS__TF_OUTPUT) g->noutputs_missing++;
                gs__chunk_unavailable(g, t);
            }
        }
    }
    /* pass 2: recompute what is still needed, re-plan what was running */
    for (gs__graph_t *g = s->ghead; g != NULL; g = g->next) {
        for (uint32_t t = 0; t < g->ntasks && g->phase != GS__GRAPH_FAILED; t++) {
            uint8_t st = g->state[t];
            if (st == GS__TS_LOST) {
                if ((g->tflags[t] & GS__TF_OUTPUT) || g->nrefs[t] > 0) gs__need(s, g, t);
                else gs__task_state_set(g, t, GS__TS_RELEASED);
            } else if (st == GS__TS_LOST_RUNNING) {
                if (++g->nfail[t] > s->allowed_failures) {
                    gs__task_state_set(g, t, GS__TS_ERRED);
                    gs__graph_cancel(g, GS_ERR_WORKER_LOST,
                                     "task %u (layer %u, block %" PRIu64 ") of graph %" PRIu64
                                     " failed: %u workers died while running it (allowed failures: %u);"
                                     " the last was %s", t, g->task_layer[t], g->task_block[t], g->id,
                                     (unsigned)g->nfail[t], s->allowed_failures, w->name);
                    break;
                }
                gs__reset_pending(s, g, t);
            }
        }
    }
}
