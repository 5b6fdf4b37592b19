/*
 * Graphs inside the scheduler: submission and validation, the task state machine, placement,
 * completion, release of intermediates, failure and lineage recomputation.
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
#include "scheduler/sched_int.h"

#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GS__PROGRESS_NS (100ull * 1000 * 1000)

static gs__graph_t *gs__ptr_graph(uint64_t v)
{
    return (gs__graph_t *)(uintptr_t)v;
}

gs__graph_t *gs__graph_find(gs_sched_t *s, uint64_t id)
{
    uint64_t v;
    if (id == 0 || id >= GS_U64MAP_TOMB) return NULL;
    if (!gs_u64map_get(&s->graphs, id, &v)) return NULL;
    return gs__ptr_graph(v);
}

static uint64_t gs__ext_key(uint64_t graph, uint32_t task)
{
    return (graph << 32) | task;
}

/* ------------------------------------------------------------------------------------------ */
/* Structural validation (no cluster state).                                                  */

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
/* Small helpers.                                                                             */

static void gs__graph_free_arrays(gs__graph_t *g)
{
    gs_free(g->errmsg);
    gs_free(g->layer_blob);
    gs_free(g->layer_off);
    gs_free(g->task_layer);
    gs_free(g->task_block);
    gs_free(g->dep_off);
    gs_free(g->deps);
    gs_free(g->nbytes);
    gs_free(g->rdep_off);
    gs_free(g->rdeps);
    gs_free(g->state);
    gs_free(g->tflags);
    gs_free(g->nfail);
    gs_free(g->nretry);
    gs_free(g->ndeps_left);
    gs_free(g->nrefs);
    gs_free(g->where);
    gs_free(g->ext_graph);
    gs_free(g->ext_task);
    gs_free(g->ext_rdep_off);
    gs_free(g->ext_rdeps);
    gs_u64map_cleanup(&g->ext_index);
    if (g->replicas.len > 0) {
        gs_assert(g->s->nreplica_graphs > 0);
        g->s->nreplica_graphs--;
    }
    gs_u64map_cleanup(&g->replicas);
    gs_free(g->srcs);
    GS_VEC_FREE(&g->users);
    gs_free(g->prio);
    gs_free(g->order);
    gs_free(g->ready_tasks.bits);
    gs_free(g->ready_roots.bits);
    for (uint32_t i = 0; i < g->ngw; i++) gs_free(g->gw[i].layer_bits);
    gs_free(g->gw);
    GS_VEC_FREE(&g->parked);
}

static void gs__active_add(gs_sched_t *s, gs__graph_t *g)
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

static void gs__active_del(gs_sched_t *s, gs__graph_t *g)
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

/* ---- ready sets (see gs__rset_t) ---- */

static gs_status_t gs__rset_init(gs__rset_t *r, uint32_t nkeys)
{
    uint32_t words = nkeys / 64 + 1, total = 0, l = 0;
    for (;;) {
        gs_assert(l < GS__RSET_MAX_LEVELS);
        r->off[l++] = total;
        total += words;
        if (words == 1) break;
        words = (words + 63) / 64;
    }
    r->nlevels = l;
    r->n = 0;
    r->bits = gs_calloc(total, sizeof(uint64_t), "graph ready set");
    return r->bits != NULL ? GS_OK : GS_ERR_NO_MEMORY;
}

static void gs__rset_clear(gs__rset_t *r)
{
    if (r->bits != NULL) memset(r->bits, 0, ((size_t)r->off[r->nlevels - 1] + 1) * sizeof(uint64_t));
    r->n = 0;
}

/* @a p must not be a member. */
static inline void gs__rset_add(gs__rset_t *r, uint32_t p)
{
    for (uint32_t l = 0; l < r->nlevels; l++) {
        uint64_t *w = &r->bits[r->off[l] + (p >> 6)];
        uint64_t was = *w;
        *w = was | (1ull << (p & 63));
        if (was != 0) break;
        p >>= 6;
    }
    r->n++;
}

/* @a p must be a member. */
static inline void gs__rset_del(gs__rset_t *r, uint32_t p)
{
    gs_assert(r->n > 0);
    for (uint32_t l = 0; l < r->nlevels; l++) {
        uint64_t *w = &r->bits[r->off[l] + (p >> 6)];
        *w &= ~(1ull << (p & 63));
        if (*w != 0) break;
        p >>= 6;
    }
    r->n--;
}

/* Smallest member; the set must not be empty. */
static inline uint32_t gs__rset_min(const gs__rset_t *r)
{
    uint32_t i = 0;
    gs_assert(r->n > 0);
    for (uint32_t l = r->nlevels; l-- > 0;) i = (i << 6) | (uint32_t)__builtin_ctzll(r->bits[r->off[l] + i]);
    return i;
}

static void gs__make_ready(gs_sched_t *s, gs__graph_t *g, uint32_t t)
{
    g->state[t] = GS__TS_READY;
    if (!(g->tflags[t] & GS__TF_STACKED)) {
        gs_assert(g->prio[t] < g->ntotal);
        g->tflags[t] |= GS__TF_STACKED;
        gs__rset_add((g->tflags[t] & GS__TF_ROOT) ? &g->ready_roots : &g->ready_tasks, g->prio[t]);
        g->nready++;
    }
    gs__active_add(s, g);
}

/* Drop (lazily removed) entry @a t, of priority @a p, from ready set @a r. */
static inline void gs__ready_del(gs__graph_t *g, gs__rset_t *r, uint32_t p, uint32_t t)
{
    gs__rset_del(r, p);
    gs_assert(g->nready > 0);
    g->nready--;
    g->tflags[t] &= (uint8_t)~GS__TF_STACKED;
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
static inline void gs__root_count(gs__graph_t *g, uint32_t t, gs__worker_t *w, uint8_t flag)
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

static void gs__queue_release(gs__worker_t *w, uint64_t graph, uint64_t task)
{
    if (GS_VEC_RESERVE(&w->release_keys, w->release_keys.len + 2) != GS_OK) {
        GS_LOG_ERROR("out of memory queueing a release of chunk (%" PRIu64 ", %" PRIu64 ") on worker %s",
                     graph, task, w->name);
        return;
    }
    w->release_keys.data[w->release_keys.len++] = graph;
    w->release_keys.data[w->release_keys.len++] = task;
}

/* Replica holders of chunk @a t (0 when none). */
static inline uint64_t gs__replica_mask(const gs__graph_t *g, uint32_t t)
{
    uint64_t m;
    if (g->replicas.len == 0 || !gs_u64map_get(&g->replicas, t, &m)) return 0;
    return m;
}

static void gs__replica_set(gs_sched_t *s, gs__graph_t *g, uint32_t t, uint64_t mask)
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
    g->state[t] = GS__TS_RELEASED;
    g->where[t] = GS__NO_WORKER;
}

static uint64_t gs__slot_id(gs_sched_t *s, uint32_t slot)
{
    if (slot < s->nslots && s->slots[slot] != NULL) return s->slots[slot]->id;
    return 0;
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

static void gs__flush_parked(gs_sched_t *s, gs__graph_t *g)
{
    for (size_t i = 0; i < g->parked.len; i++) {
        gs__parked_t *p = &g->parked.data[i];
        if (g->phase == GS__GRAPH_FAILED) {
            gs__sched_send_data_error(s, g->client, p->client_req, g->id, p->task, g->status);
        } else {
            gs__sched_relay_gather(s, g->client, p->client_req, g, p->task);
        }
    }
    g->parked.len = 0;
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
    gs__flush_parked(s, g);
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
        if (g->state[t] == GS__TS_MEMORY) gs__release_chunk(s, g, t);
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
        if (st != GS__TS_RELEASED && st != GS__TS_CULLED) g->state[t] = GS__TS_ERRED;
        g->where[t] = GS__NO_WORKER;
    }
    gs__rset_clear(&g->ready_tasks);
    gs__rset_clear(&g->ready_roots);
    g->nready = 0;
    gs__active_del(s, g);
    if (was_running) {
        s->ngraphs_active--;
        if (!g->client_released) gs__send_graph_done(s, g);
    }
    gs__flush_parked(s, g);

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
    if (g->phase != GS__GRAPH_FAILED) {
        if (g->phase == GS__GRAPH_RUNNING) s->ngraphs_active--;
        gs__graph_stop_workers(s, g);
    }
    gs__active_del(s, g);
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
        g->state[u] = GS__TS_WAITING;
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
        g->state[t] = GS__TS_WAITING;
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
    g->state[t] = GS__TS_WAITING;
    g->where[t] = GS__NO_WORKER;
    if (gs__recount(s, g, t, 0)) gs__lineage_run(s);
    s->stack.len = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Submission.                                                                                */

#define GS__ALLOC(ptr, n, what)                                                               \
    do {                                                                                      \
        (ptr) = gs_malloc(gs_size_mul((size_t)(n) ? (size_t)(n) : 1, sizeof(*(ptr))), what);  \
        if ((ptr) == NULL) goto err_nomem;                                                    \
    } while (0)
#define GS__CALLOC(ptr, n, what)                                                              \
    do {                                                                                      \
        (ptr) = gs_calloc((size_t)(n) ? (size_t)(n) : 1, sizeof(*(ptr)), what);               \
        if ((ptr) == NULL) goto err_nomem;                                                    \
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
        g->state[t] = GS__TS_WAITING;
    }
    for (uint32_t t = ntasks; t-- > 0;) {
        if (g->state[t] == GS__TS_CULLED) continue;
        g->ntotal++;
        for (uint32_t j = g->dep_off[t]; j < g->dep_off[t + 1]; j++) {
            uint32_t d = g->deps[j];
            if (d < ntasks) {
                g->state[d] = GS__TS_WAITING;
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
            g->state[t] = GS__TS_READY;
            g->tflags[t] |= GS__TF_STACKED;
            gs__rset_add((g->tflags[t] & GS__TF_ROOT) ? &g->ready_roots : &g->ready_tasks, g->prio[t]);
            g->nready++;
        }
    }
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
    if (g->nready > 0) gs__active_add(s, g);
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
/* Gathers.                                                                                   */

void gs__graph_gather(gs__graph_t *g, uint64_t client_req, uint32_t task)
{
    gs_sched_t *s = g->s;
    gs__parked_t p;
    if (g->phase == GS__GRAPH_FAILED) {
        gs__sched_send_data_error(s, g->client, client_req, g->id, task, g->status);
        return;
    }
    if (g->state[task] == GS__TS_MEMORY) {
        gs__sched_relay_gather(s, g->client, client_req, g, task);
        return;
    }
    p.client_req = client_req;
    p.task = task;
    if (GS_VEC_PUSH(&g->parked, p) != GS_OK) {
        gs__sched_send_data_error(s, g->client, client_req, g->id, task, GS_ERR_NO_MEMORY);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Placement.                                                                                 */

static gs__gw_t *gs__graph_gw(gs_sched_t *s, gs__graph_t *g, uint32_t slot)
{
    gs__gw_t *gw;
    if (slot >= g->ngw) {
        uint32_t n = s->nslots > slot ? s->nslots : slot + 1;
        gs__gw_t *ngw = gs_realloc(g->gw, gs_size_mul(n, sizeof *ngw), "graph per-worker");
        if (ngw == NULL) return NULL;
        memset(ngw + g->ngw, 0, (size_t)(n - g->ngw) * sizeof *ngw);
        g->gw = ngw;
        g->ngw = n;
    }
    gw = &g->gw[slot];
    if (gw->layer_bits == NULL) {
        gw->layer_bits = gs_calloc(((size_t)g->nlayers + 63) / 64 + 1, sizeof(uint64_t), "graph layer bits");
        if (gw->layer_bits == NULL) return NULL;
    }
    return gw;
}

static int gs__has_room(const gs__worker_t *w)
{
    return w->outstanding < w->cap;
}

/* Room for load-balanced placement: a worker is refilled once it has `refill` free slots, and
 * then up to its bound within the same placement pass. */
static int gs__has_refill_room(gs_sched_t *s, gs__worker_t *w)
{
    if (w->fill_tick == s->tick) return w->outstanding < w->cap;
    if (w->outstanding + w->refill > w->cap) return 0;
    w->fill_tick = s->tick;
    return 1;
}

/* Refill room without marking the worker as being filled (see gs__has_refill_room). */
static inline int gs__refill_ok(const gs_sched_t *s, const gs__worker_t *w)
{
    if (w->fill_tick == s->tick) return w->outstanding < w->cap;
    return w->outstanding + w->refill <= w->cap;
}

/* Queued work of @a w in ns: tasks sent and not reported, per thread, at its measured kernel time. */
static inline double gs__queue_ns(const gs__worker_t *w)
{
    return (double)w->outstanding * w->ns_per_task / (double)w->nthreads;
}

/* Input @a j of task @a t: primary holder, replica holders, size. */
static inline void gs__input_of(const gs__graph_t *g, uint32_t d, gs__input_t *in)
{
    const gs__graph_t *eg = g;
    uint32_t et = d;
    if (d >= g->ntasks) {
        eg = g->ext_graph[d - g->ntasks];
        et = g->ext_task[d - g->ntasks];
    }
    in->slot = eg->where[et];
    in->nbytes = eg->nbytes[et];
    in->mask = gs__replica_mask(eg, et);
}

/* Best source for moving an input to slot @a to: the holder with the highest estimated
 * bandwidth (its estimate in *bw_p). Returns GS__NO_WORKER when no live holder exists. */
static inline uint32_t gs__best_source(const gs_sched_t *s, const gs__input_t *in, uint32_t to, double *bw_p)
{
    uint32_t best = GS__NO_WORKER;
    double bw = 0.0;
    if (in->slot < s->nslots && s->slots[in->slot] != NULL) {
        best = in->slot;
        bw = s->bw[(size_t)in->slot * s->nslots + to];
    }
    for (uint64_t m = in->mask; m != 0; m &= m - 1) {
        uint32_t r = (uint32_t)__builtin_ctzll(m);
        double b;
        if (r >= s->nslots || s->slots[r] == NULL) continue;
        b = s->bw[(size_t)r * s->nslots + to];
        if (best == GS__NO_WORKER || b > bw) {
            best = r;
            bw = b;
        }
    }
    *bw_p = bw;
    return best;
}

/* Pick a worker for ready task t by the transfer-cost model (sched.h): for every live worker W,
 *   cost(W) = queue(W) + sum over the inputs W lacks of (latency + bytes / bw(best holder -> W)),
 * queue(W) = tasks queued on W x its measured kernel time / its threads. The cheapest worker
 * with room (queue room for an input holder; refill room for others) is chosen. A task waits
 * (NULL with *wait_p set) when some input holder without room would still finish it sooner
 * counting the bandwidth term only, i.e. when moving its bytes costs more than waiting for a
 * queue slot there; the latency term is left out of that comparison so that tiny inputs never
 * pin a task. Tasks without inputs go to the least loaded worker with refill room. NULL
 * without *wait_p when no worker has room. O(workers x inputs), no allocation once the input
 * scratch has grown to the largest fan-in. */
static gs__worker_t *gs__choose(gs_sched_t *s, gs__graph_t *g, uint32_t t, int *wait_p)
{
    uint32_t lo = g->dep_off[t], hi = g->dep_off[t + 1];
    gs__worker_t *best = NULL;

    *wait_p = 0;
    if (hi > lo && GS_VEC_RESERVE(&s->scratch_in, hi - lo) == GS_OK) {
        gs__input_t *in = s->scratch_in.data;
        uint32_t n = hi - lo;
        double best_cost = 0.0, best_pin = 0.0, busy_pin = -1.0;
        for (uint32_t j = 0; j < n; j++) gs__input_of(g, g->deps[lo + j], &in[j]);
        for (uint32_t i = 0; i < s->nworkers; i++) {
            gs__worker_t *w = s->live[i];
            uint32_t ws = w->slot;
            uint64_t bit = ws < 64 ? 1ull << ws : 0;
            int holds = 0;
            double xbw = 0.0, xlat = 0.0, q;
            for (uint32_t j = 0; j < n; j++) {
                double bw;
                if (in[j].slot == ws || (in[j].mask & bit)) {
                    holds = 1;
                    continue;
                }
                if (gs__best_source(s, &in[j], ws, &bw) == GS__NO_WORKER) continue;
                xbw += (double)in[j].nbytes / bw;
                xlat += s->xfer_latency_ns;
            }
            q = gs__queue_ns(w);
            if (gs__has_room(w) && (holds || gs__refill_ok(s, w))) {
                double cost = q + xbw + xlat;
                if (best == NULL || cost < best_cost ||
                    (cost == best_cost &&
                     (uint64_t)w->outstanding * best->cap < (uint64_t)best->outstanding * w->cap)) {
                    best = w;
                    best_cost = cost;
                    best_pin = q + xbw;
                }
            } else if (holds && !gs__has_room(w)) {
                double pin = q + xbw;
                if (busy_pin < 0.0 || pin < busy_pin) busy_pin = pin;
            }
        }
        if (busy_pin >= 0.0 && best != NULL && busy_pin < best_pin) {
            *wait_p = 1;
            return NULL;
        }
        if (best != NULL && best->fill_tick != s->tick) gs__has_refill_room(s, best);  /* mark filling */
        return best;
    }
    for (uint32_t i = 0; i < s->nworkers; i++) {
        gs__worker_t *w = s->live[i];
        if (!gs__has_refill_room(s, w)) continue;
        /* w->outstanding / w->cap < best->outstanding / best->cap */
        if (best == NULL || (uint64_t)w->outstanding * best->cap < (uint64_t)best->outstanding * w->cap) {
            best = w;
        }
    }
    return best;
}

/* The root bound (sched.h) without the stall exception: may @a w take one more root task whose
 * output is declared as @a nbytes? */
static int gs__root_under_bound(const gs__worker_t *w, uint64_t nbytes)
{
    uint32_t n = w->roots.nqueued + w->roots.nheld;
    if (n < w->nthreads) return 1;
    if (n >= 2 * w->nthreads + w->cap) return 0;
    if (w->memory_limit > 0) {
        uint64_t half = w->memory_limit / 2;
        uint64_t budget = w->mem_other < half ? half - w->mem_other : 0;
        if (w->roots.bytes > budget || nbytes > budget - w->roots.bytes) return 0;
    }
    return 1;
}

/* A graph is stalled on the root bound when none of its other tasks is ready or on a worker:
 * then only more roots can let it progress (e.g. a consumer needs more roots than the bound). */
static int gs__graph_stalled(const gs__graph_t *g)
{
    uint64_t outstanding = 0;
    if (g->ready_tasks.n > 0) return 0;
    for (uint32_t i = 0; i < g->ngw; i++) outstanding += g->gw[i].outstanding;
    return outstanding <= g->nroots_queued;
}

/* Pick a worker for root task t: the least loaded one with refill room that the root bound
 * allows (for a stalled graph: any with fewer root tasks queued than threads). NULL if none;
 * *room_p is set when some worker has queue room, *withheld_p when the bound refused one.
 * *stalled_p caches gs__graph_stalled() (-1: not computed yet). */
static gs__worker_t *gs__choose_root(gs_sched_t *s, gs__graph_t *g, uint32_t t, int *stalled_p,
                                     int *room_p, int *withheld_p)
{
    gs__worker_t *best = NULL;
    for (uint32_t i = 0; i < s->nworkers; i++) {
        gs__worker_t *w = s->live[i];
        if (!gs__has_room(w)) continue;
        *room_p = 1;
        if (!gs__root_under_bound(w, g->nbytes[t])) {
            if (*stalled_p < 0) *stalled_p = gs__graph_stalled(g);
            if (!*stalled_p || w->roots.nqueued >= w->nthreads) {
                *withheld_p = 1;
                continue;
            }
        }
        if (!gs__has_refill_room(s, w)) continue;
        if (best == NULL || (uint64_t)w->outstanding * best->cap < (uint64_t)best->outstanding * w->cap) {
            best = w;
        }
    }
    return best;
}

static void gs__batch_begin(gs_sched_t *s, gs__worker_t *w)
{
    w->touched = 1;
    w->b_task_id.len = 0;
    w->b_task_layer.len = 0;
    w->b_task_block.len = 0;
    w->b_dep_off.len = 0;
    w->b_dep_keys.len = 0;
    w->b_dep_worker.len = 0;
    w->b_dep_nbytes.len = 0;
    w->b_layer_ids.len = 0;
    w->b_layers.len = 0;
    w->b_dep_off.data[w->b_dep_off.len++] = 0;   /* reserved by the caller */
}

static gs_status_t gs__batch_reserve(gs__worker_t *w, uint32_t ndeps)
{
    if (GS_VEC_RESERVE(&w->b_task_id, w->b_task_id.len + 1) != GS_OK ||
        GS_VEC_RESERVE(&w->b_task_layer, w->b_task_layer.len + 1) != GS_OK ||
        GS_VEC_RESERVE(&w->b_task_block, w->b_task_block.len + 1) != GS_OK ||
        GS_VEC_RESERVE(&w->b_dep_off, w->b_dep_off.len + 2) != GS_OK ||
        GS_VEC_RESERVE(&w->b_dep_keys, w->b_dep_keys.len + 2 * (size_t)ndeps) != GS_OK ||
        GS_VEC_RESERVE(&w->b_dep_worker, w->b_dep_worker.len + ndeps) != GS_OK ||
        GS_VEC_RESERVE(&w->b_dep_nbytes, w->b_dep_nbytes.len + ndeps) != GS_OK ||
        GS_VEC_RESERVE(&w->b_layer_ids, w->b_layer_ids.len + 1) != GS_OK ||
        GS_VEC_RESERVE(&w->b_layers, w->b_layers.len + 1) != GS_OK) {
        return GS_ERR_NO_MEMORY;
    }
    return GS_OK;
}

static gs_status_t gs__assign(gs_sched_t *s, gs__graph_t *g, uint32_t t, gs__worker_t *w)
{
    uint32_t lo = g->dep_off[t], hi = g->dep_off[t + 1], layer = g->task_layer[t];
    gs__gw_t *gw = gs__graph_gw(s, g, w->slot);

    if (gw == NULL || gs__batch_reserve(w, hi - lo) != GS_OK) return GS_ERR_NO_MEMORY;
    /* A worker with no task and no chunk of the graph may evict its layers (gworker keeps
     * idle graphs' layers in a bounded cache): send them again. */
    if (gw->outstanding == 0 && gw->nheld == 0) {
        memset(gw->layer_bits, 0, (((size_t)g->nlayers + 63) / 64 + 1) * sizeof(uint64_t));
    }
    if (!w->touched) {
        gs__batch_begin(s, w);
        if (GS_VEC_PUSH(&s->touched_slots, w->slot) != GS_OK) {
            w->touched = 0;
            return GS_ERR_NO_MEMORY;
        }
    }
    g->state[t] = GS__TS_ASSIGNED;
    g->where[t] = w->slot;
    w->outstanding++;
    gw->outstanding++;
    s->st.tasks_assigned_total++;
    if (g->tflags[t] & GS__TF_ROOT) gs__root_count(g, t, w, GS__TF_RQUEUED);

    w->b_task_id.data[w->b_task_id.len++] = t;
    w->b_task_layer.data[w->b_task_layer.len++] = layer;
    w->b_task_block.data[w->b_task_block.len++] = g->task_block[t];
    if (!(gw->layer_bits[layer >> 6] & (1ull << (layer & 63)))) {
        gw->layer_bits[layer >> 6] |= 1ull << (layer & 63);
        w->b_layer_ids.data[w->b_layer_ids.len++] = layer;
        w->b_layers.data[w->b_layers.len].data = g->layer_blob + g->layer_off[layer];
        w->b_layers.data[w->b_layers.len].len = (size_t)(g->layer_off[layer + 1] - g->layer_off[layer]);
        w->b_layers.len++;
    }
    for (uint32_t j = lo; j < hi; j++) {
        uint32_t d = g->deps[j];
        uint64_t kg = g->id, kt = d, nb;
        uint32_t slot;
        if (d < g->ntasks) {
            slot = g->where[d];
            nb = g->nbytes[d];
        } else {
            gs__graph_t *eg = g->ext_graph[d - g->ntasks];
            kg = eg->id;
            kt = g->ext_task[d - g->ntasks];
            slot = eg->where[kt];
            nb = eg->nbytes[kt];
        }
        if (s->nreplica_graphs > 0) {
            /* with copies: the receiving worker's own copy, else the fastest holder */
            gs__input_t in;
            double bw;
            gs__input_of(g, d, &in);
            if (in.mask != 0) {
                slot = (w->slot < 64 && (in.mask & (1ull << w->slot))) ? w->slot : gs__best_source(s, &in, w->slot, &bw);
            }
        }
        w->b_dep_keys.data[w->b_dep_keys.len++] = kg;
        w->b_dep_keys.data[w->b_dep_keys.len++] = kt;
        w->b_dep_worker.data[w->b_dep_worker.len++] = gs__slot_id(s, slot);
        w->b_dep_nbytes.data[w->b_dep_nbytes.len++] = nb;
    }
    w->b_dep_off.data[w->b_dep_off.len++] = w->b_dep_keys.len / 2;
    return GS_OK;
}

static void gs__flush_batches(gs_sched_t *s, gs__graph_t *g)
{
    for (size_t i = 0; i < s->touched_slots.len; i++) {
        gs__worker_t *w = s->slots[s->touched_slots.data[i]];
        gs_msg_t msg;
        if (w == NULL || !w->touched) continue;
        w->touched = 0;
        memset(&msg, 0, sizeof msg);
        msg.type = GS_MSG_TASK_ASSIGN;
        msg.u.task_assign.graph_id = g->id;
        msg.u.task_assign.nlayers = (uint32_t)w->b_layer_ids.len;
        msg.u.task_assign.layer_ids = w->b_layer_ids.data;
        msg.u.task_assign.layers = w->b_layers.data;
        msg.u.task_assign.ntasks = w->b_task_id.len;
        msg.u.task_assign.task_id = w->b_task_id.data;
        msg.u.task_assign.task_layer = w->b_task_layer.data;
        msg.u.task_assign.task_block = w->b_task_block.data;
        msg.u.task_assign.dep_off = w->b_dep_off.data;
        msg.u.task_assign.dep_keys = w->b_dep_keys.data;
        msg.u.task_assign.dep_worker = w->b_dep_worker.data;
        msg.u.task_assign.dep_nbytes = w->b_dep_nbytes.data;
        gs__sched_send(s, w->peer, &msg);
    }
    s->touched_slots.len = 0;
}

/* Place ready tasks of @a g, lowest priority number first: every other ready task before any
 * root, roots only as the root bound allows. Returns 0 when no worker has room left. */
static int gs__place_graph(gs_sched_t *s, gs__graph_t *g)
{
    int room = 1, wait;
    s->touched_slots.len = 0;
    s->scratch_defer.len = 0;
    while (g->ready_tasks.n > 0) {
        uint32_t p = gs__rset_min(&g->ready_tasks), t = g->order[p];
        gs__worker_t *w;
        if (g->state[t] != GS__TS_READY) {
            gs__ready_del(g, &g->ready_tasks, p, t);
            continue;
        }
        w = gs__choose(s, g, t, &wait);
        if (w == NULL && wait && GS_VEC_PUSH(&s->scratch_defer, p) == GS_OK) {
            /* set aside for this pass (it stays counted as ready); put back below */
            gs__rset_del(&g->ready_tasks, p);
            continue;
        }
        if (w == NULL) {
            room = 0;
            break;
        }
        if (gs__assign(s, g, t, w) != GS_OK) {
            GS_LOG_ERROR("out of memory assigning task %u of graph %" PRIu64 "; retrying later", t, g->id);
            room = 0;
            break;
        }
        gs__ready_del(g, &g->ready_tasks, p, t);
    }
    for (size_t i = 0; i < s->scratch_defer.len; i++) gs__rset_add(&g->ready_tasks, s->scratch_defer.data[i]);
    if (room) {
        int stalled = -1, any_room = 0, withheld = 0;
        while (g->ready_roots.n > 0) {
            uint32_t p = gs__rset_min(&g->ready_roots), t = g->order[p];
            gs__worker_t *w;
            if (g->state[t] != GS__TS_READY) {
                gs__ready_del(g, &g->ready_roots, p, t);
                continue;
            }
            any_room = withheld = 0;
            w = gs__choose_root(s, g, t, &stalled, &any_room, &withheld);
            if (w == NULL) {
                if (withheld) s->st.roots_withheld_total++;
                room = any_room;
                break;
            }
            if (gs__assign(s, g, t, w) != GS_OK) {
                GS_LOG_ERROR("out of memory assigning task %u of graph %" PRIu64 "; retrying later", t, g->id);
                room = 0;
                break;
            }
            gs__ready_del(g, &g->ready_roots, p, t);
        }
    }
    gs__flush_batches(s, g);
    if (g->nready == 0) gs__active_del(s, g);
    return room;
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

#ifdef GS_SCHED_CHECK_INVARIANTS
/* Test builds (-DGS_SCHED_CHECK_INVARIANTS): recount the root tallies and the ready sets from
 * the task tables and abort on any difference. O(tasks of all graphs) per call. */
static void gs__check_invariants(gs_sched_t *s)
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

void gs__sched_tick(gs_sched_t *s)
{
    uint64_t n;
    gs__graph_t *g;

    /* releases first: a chunk released and recomputed in one iteration must be dropped by the
     * worker before the new assignment arrives */
    gs__sched_flush_releases(s);
#ifdef GS_SCHED_CHECK_INVARIANTS
    gs__check_invariants(s);
#endif
    if (s->active == NULL) return;
    if (s->nworkers == 0) {
        if (!s->warned_no_workers) {
            GS_LOG_WARN("tasks are ready but no workers are registered; waiting for workers");
            s->warned_no_workers = 1;
        }
        return;
    }
    s->tick++;
    /* visit each active graph once, starting after the last one served */
    n = 0;
    for (g = s->active; g != NULL; g = g->anext) {
        n++;
        if (g->anext == s->active) break;
    }
    g = s->active;
    while (n-- > 0) {
        gs__graph_t *next = g->anext;   /* stays valid: placing g can only unlink g */
        if (!gs__place_graph(s, g) || s->active == NULL) break;
        g = next;
    }
    if (s->active != NULL) s->active = s->active->anext;   /* rotate for fairness */
#ifdef GS_SCHED_CHECK_INVARIANTS
    gs__check_invariants(s);
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Completion.                                                                                */

static void gs__complete(gs_sched_t *s, gs__graph_t *g, uint32_t t, gs__worker_t *w, uint64_t nbytes,
                         uint64_t run_ns)
{
    gs__root_uncount(s, g, t);   /* before nbytes changes */
    g->state[t] = GS__TS_MEMORY;
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
    g->state[t] = GS__TS_DEFERRED;
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

void gs__sched_task_done(gs_sched_t *s, gs__worker_t *w, const gs_msg_task_done_t *m)
{
    gs__graph_t *g = NULL;
    uint64_t cached = 0, run_sum = 0, nrun = 0;
    uint32_t kerr = 0, slot = w->slot;

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
                g->state[t] = GS__TS_ERRED;
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
                g->state[t] = GS__TS_LOST_RUNNING;
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
                g->state[t] = GS__TS_LOST;
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
                else g->state[t] = GS__TS_RELEASED;
            } else if (st == GS__TS_LOST_RUNNING) {
                if (++g->nfail[t] > s->allowed_failures) {
                    g->state[t] = GS__TS_ERRED;
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

/* ------------------------------------------------------------------------------------------ */
/* Transfer model: bandwidth estimates per worker pair.                                       */

#define GS__BW_EWMA 0.3                  /* weight of a new measurement */
#define GS__BW_MIN_SAMPLE (256u * 1024u)  /* mean transfer size below which a report says more
                                            about latency than bandwidth: ignored */

static double gs__bw_prior(const gs_sched_t *s, const gs__worker_t *a, const gs__worker_t *b)
{
    int gpu = strcmp(a->backend, "cpu") != 0 && strcmp(b->backend, "cpu") != 0;
    int local = strcmp(a->host, b->host) == 0;
    return s->bw_prior[gpu ? (local ? GS__BW_GPU_LOCAL : GS__BW_GPU_REMOTE)
                           : (local ? GS__BW_CPU_LOCAL : GS__BW_CPU_REMOTE)];
}

/* A worker took @a slot: every pair with it starts again from the priors. */
void gs__bw_reset_slot(gs_sched_t *s, uint32_t slot)
{
    gs__worker_t *w = s->slots[slot];
    for (uint32_t i = 0; i < s->nslots; i++) {
        gs__worker_t *o = s->slots[i];
        double prior = o != NULL ? gs__bw_prior(s, o, w) : s->bw_prior[GS__BW_CPU_REMOTE];
        s->bw[(size_t)i * s->nslots + slot] = prior;
        s->bw[(size_t)slot * s->nslots + i] = prior;
        s->bw_measured[(size_t)i * s->nslots + slot] = 0;
        s->bw_measured[(size_t)slot * s->nslots + i] = 0;
    }
}

void gs__sched_bandwidth(gs_sched_t *s, gs__worker_t *w, const gs_msg_bandwidth_t *m)
{
    for (uint32_t k = 0; k < m->n; k++) {
        gs__worker_t *src = NULL;
        double sample;
        size_t idx;
        for (uint32_t i = 0; i < s->nworkers; i++) {
            if (s->live[i]->id == m->peer[k]) src = s->live[i];
        }
        if (src == NULL || src == w || m->ns[k] == 0 || m->count[k] == 0) continue;   /* gone or meaningless */
        if (m->bytes[k] / m->count[k] < GS__BW_MIN_SAMPLE) continue;
        sample = (double)m->bytes[k] / (double)m->ns[k];
        idx = (size_t)src->slot * s->nslots + w->slot;
        s->st.bw_reports_total++;
        if (!s->bw_measured[idx]) {
            s->bw[idx] = sample;
            s->bw_measured[idx] = 1;
            GS_LOG_INFO("transfer %s -> %s: %.1f GB/s (%s)", src->name, w->name, sample,
                        m->path[k].len > 0 ? (const char *)m->path[k].data : "unknown path");
        } else {
            s->bw[idx] = (1.0 - GS__BW_EWMA) * s->bw[idx] + GS__BW_EWMA * sample;
            GS_LOG_DEBUG("transfer %s -> %s: %.1f GB/s measured, estimate %.1f GB/s", src->name, w->name, sample,
                         s->bw[idx]);
        }
        if (s->bw[idx] < 1e-6) s->bw[idx] = 1e-6;   /* 1 kB/s floor: costs stay finite */
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Replicas (REPLICATE).                                                                      */

static void gs__send_repl_done(gs_sched_t *s, gs__peer_t *client, uint64_t req, gs_status_t status,
                               const char *text, uint64_t n, const uint64_t *keys, const uint64_t *nbytes)
{
    gs_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_REPLICATE_DONE;
    msg.u.replicate_done.req_id = req;
    msg.u.replicate_done.status = status;
    msg.u.replicate_done.message.data = (const uint8_t *)text;
    msg.u.replicate_done.message.len = text != NULL ? strlen(text) : 0;
    msg.u.replicate_done.n = n;
    msg.u.replicate_done.keys = keys;
    msg.u.replicate_done.nbytes = nbytes;
    gs__sched_send(s, client, &msg);
}

/* Client asks for copies of chunks on one worker. Every key must be a stored output chunk of a
 * live persisted graph of this client ((G, GS_REPLICATE_ALL_OUTPUTS) = all of G's outputs).
 * Chunks already on the target count as done; the others go to the target in one REPLICATE
 * naming a holder of each; REPLICATE_DONE from the worker completes the request. */
void gs__sched_replicate(gs_sched_t *s, gs__peer_t *client, const gs_msg_replicate_t *m)
{
    gs__worker_t *target = NULL;
    GS_VEC(uint64_t) keys = {0};
    GS_VEC(uint64_t) from = {0};
    GS_VEC(uint64_t) nb = {0};
    char text[512];
    gs_status_t st = GS_OK;
    uint64_t nalready = 0;
    gs__repl_t r;
    gs_msg_t msg;

    text[0] = '\0';
    for (uint32_t i = 0; i < s->nworkers; i++) {
        gs__worker_t *w = s->live[i];
        if (m->worker_id != 0 ? w->id == m->worker_id
                              : (m->worker_name.len > 0 && strcmp(w->name, (const char *)m->worker_name.data) == 0)) {
            target = w;
        }
    }
    if (target == NULL) {
        st = GS_ERR_NOT_FOUND;
        if (m->worker_id != 0) snprintf(text, sizeof text, "replicate: no live worker with id %" PRIu64, m->worker_id);
        else snprintf(text, sizeof text, "replicate: no live worker named '%s'",
                      m->worker_name.len ? (const char *)m->worker_name.data : "");
        goto reply;
    }
    if (target->slot >= 64) {
        st = GS_ERR_UNSUPPORTED;
        snprintf(text, sizeof text, "replicate: worker %s is in slot %u; copies are kept only on the first 64 "
                 "worker slots", target->name, target->slot);
        goto reply;
    }
    for (uint64_t i = 0; i < m->n && st == GS_OK; i++) {
        uint64_t gid = m->keys[2 * i], tid = m->keys[2 * i + 1];
        gs__graph_t *g = gs__graph_find(s, gid);
        uint32_t tlo, thi;
        if (g == NULL || g->client != client || g->client_released || !(g->flags & GS_SUBMIT_PERSIST)) {
            st = GS_ERR_NOT_FOUND;
            snprintf(text, sizeof text, "replicate: graph %" PRIu64 " is not a live persisted graph of this client",
                     gid);
            break;
        }
        if (g->phase != GS__GRAPH_DONE) {
            st = g->phase == GS__GRAPH_FAILED ? GS_ERR_TASK_FAILED : GS_ERR_BUSY;
            snprintf(text, sizeof text, "replicate: graph %" PRIu64 " %s", gid,
                     g->phase == GS__GRAPH_FAILED ? "failed" : "has not finished");
            break;
        }
        if (tid == GS_REPLICATE_ALL_OUTPUTS) {
            tlo = 0;
            thi = g->ntasks;
        } else if (tid < g->ntasks && (g->tflags[tid] & GS__TF_OUTPUT)) {
            tlo = (uint32_t)tid;
            thi = tlo + 1;
        } else {
            st = GS_ERR_NOT_FOUND;
            snprintf(text, sizeof text, "replicate: task %" PRIu64 " is not an output of graph %" PRIu64, tid, gid);
            break;
        }
        for (uint32_t t = tlo; t < thi; t++) {
            uint64_t mask;
            if (!(g->tflags[t] & GS__TF_OUTPUT)) continue;
            if (g->state[t] != GS__TS_MEMORY) {
                st = GS_ERR_BUSY;
                snprintf(text, sizeof text, "replicate: chunk (%" PRIu64 ", %u) is being recomputed; try again",
                         gid, t);
                break;
            }
            mask = gs__replica_mask(g, t);
            if (g->where[t] == target->slot || (mask & (1ull << target->slot))) {
                nalready++;
                continue;
            }
            if (GS_VEC_PUSH(&keys, g->id) != GS_OK || GS_VEC_PUSH(&keys, (uint64_t)t) != GS_OK ||
                GS_VEC_PUSH(&from, gs__slot_id(s, g->where[t])) != GS_OK || GS_VEC_PUSH(&nb, g->nbytes[t]) != GS_OK) {
                st = GS_ERR_NO_MEMORY;
                snprintf(text, sizeof text, "replicate: scheduler out of memory");
                break;
            }
        }
    }
    if (st != GS_OK || from.len == 0) goto reply;
    memset(&r, 0, sizeof r);
    r.sreq = s->next_sreq++;
    r.client_id = client->id;
    r.client_req = m->req_id;
    r.slot = target->slot;
    r.nasked = from.len;
    r.nalready = nalready;
    if (GS_VEC_PUSH(&s->repls, r) != GS_OK) {
        st = GS_ERR_NO_MEMORY;
        snprintf(text, sizeof text, "replicate: scheduler out of memory");
        goto reply;
    }
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_REPLICATE;
    msg.u.replicate.req_id = r.sreq;
    msg.u.replicate.worker_id = target->id;
    msg.u.replicate.n = from.len;
    msg.u.replicate.keys = keys.data;
    msg.u.replicate.nsrc = from.len;
    msg.u.replicate.from = from.data;
    msg.u.replicate.nbytes = nb.data;
    gs__sched_send(s, target->peer, &msg);
    GS_LOG_DEBUG("replicate request %" PRIu64 ": %zu chunks to worker %s (%" PRIu64 " there already)",
                 m->req_id, from.len, target->name, nalready);
    goto out;
reply:
    if (st != GS_OK) GS_LOG_INFO("%s: %s", client->name, text);
    gs__send_repl_done(s, client, m->req_id, st, text, 0, NULL, NULL);
out:
    GS_VEC_FREE(&keys);
    GS_VEC_FREE(&from);
    GS_VEC_FREE(&nb);
}

void gs__sched_replicate_done(gs_sched_t *s, gs__worker_t *w, const gs_msg_replicate_done_t *m)
{
    gs__repl_t r;
    gs__peer_t *client = NULL;
    uint64_t v, nrec = 0;
    size_t i;
    for (i = 0; i < s->repls.len; i++) {
        if (s->repls.data[i].sreq == m->req_id && s->repls.data[i].slot == w->slot) break;
    }
    /* record what the worker holds now, whether or not anyone waits for the answer */
    for (uint64_t k = 0; k < m->n; k++) {
        uint64_t gid = m->keys[2 * k], tid = m->keys[2 * k + 1];
        gs__graph_t *g = gs__graph_find(s, gid);
        if (g == NULL || g->phase == GS__GRAPH_FAILED || tid >= g->ntasks || g->state[tid] != GS__TS_MEMORY ||
            w->slot >= 64) {
            gs__queue_release(w, gid, tid);   /* nobody needs that copy any more */
            continue;
        }
        if (g->where[tid] != w->slot) {
            uint64_t mask = gs__replica_mask(g, (uint32_t)tid);
            if (!(mask & (1ull << w->slot))) {
                gs__replica_set(s, g, (uint32_t)tid, mask | (1ull << w->slot));
                s->st.replicas_total++;
            }
        }
        nrec++;
    }
    if (i == s->repls.len) {
        GS_LOG_DEBUG("replicate-done for unknown request %" PRIu64 " from worker %s", m->req_id, w->name);
        return;
    }
    r = s->repls.data[i];
    s->repls.data[i] = s->repls.data[--s->repls.len];
    if (gs_u64map_get(&s->clients, r.client_id, &v)) client = (gs__peer_t *)(uintptr_t)v;
    if (client == NULL) return;
    if (m->status == GS_OK && nrec < r.nasked) {
        char text[256];
        snprintf(text, sizeof text, "replicate: worker %s copied %" PRIu64 " of %" PRIu64 " chunks (the others were "
                 "released meanwhile)", w->name, nrec, r.nasked);
        gs__send_repl_done(s, client, r.client_req, GS_ERR_NOT_FOUND, text, m->n, m->keys, m->nbytes);
        return;
    }
    if (m->status != GS_OK) {
        char text[700];
        snprintf(text, sizeof text, "replicate to worker %s: %s", w->name,
                 m->message.len ? (const char *)m->message.data : gs_status_string((gs_status_t)m->status));
        gs__send_repl_done(s, client, r.client_req, (gs_status_t)m->status, text, m->n, m->keys, m->nbytes);
        return;
    }
    gs__send_repl_done(s, client, r.client_req, GS_OK, NULL, m->n, m->keys, m->nbytes);
}

/* The target of pending REPLICATEs is gone: their clients get an error. */
void gs__sched_repls_worker_gone(gs_sched_t *s, gs__worker_t *w)
{
    size_t i = 0;
    while (i < s->repls.len) {
        gs__repl_t r = s->repls.data[i];
        uint64_t v;
        if (r.slot != w->slot) {
            i++;
            continue;
        }
        s->repls.data[i] = s->repls.data[--s->repls.len];
        if (gs_u64map_get(&s->clients, r.client_id, &v)) {
            char text[256];
            snprintf(text, sizeof text, "replicate: worker %s was removed before the copies completed", w->name);
            gs__send_repl_done(s, (gs__peer_t *)(uintptr_t)v, r.client_req, GS_ERR_WORKER_LOST, text, 0, NULL, NULL);
        }
    }
}
