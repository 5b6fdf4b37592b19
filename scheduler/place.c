/*
 * Placement: once per loop iteration (and on housekeeping) every active graph in turn places
 * its READY tasks, lowest priority number first, on workers chosen by the cost model (sched.h:
 * queue room, the root bound, transfer cost of missing inputs), and each touched worker gets
 * one TASK_ASSIGN batch per graph.
 */
#include "scheduler/place.h"
#include "scheduler/dash/tally.h"

#include "scheduler/cost.h"
#include "scheduler/send.h"
#include "scheduler/tasks.h"

#include "common/time.h"

#include <inttypes.h>
#include <string.h>

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

/* A suspect worker (a task of it timed out, sched.h) gets nothing while some worker is not. */
static inline int gs__shunned(const gs__worker_t *w)
{
    return w->suspect && w->s->nsuspect < w->s->nworkers;
}

static int gs__has_room(const gs__worker_t *w)
{
    if (gs__shunned(w)) return 0;
    return w->outstanding < w->cap;
}

/* Room for load-balanced placement: a worker is refilled once it has `refill` free slots, and
 * then up to its bound within the same placement pass. */
static int gs__has_refill_room(gs_sched_t *s, gs__worker_t *w)
{
    if (gs__shunned(w)) return 0;
    if (w->fill_tick == s->tick) return w->outstanding < w->cap;
    if (w->outstanding + w->refill > w->cap) return 0;
    w->fill_tick = s->tick;
    return 1;
}

/* Refill room without marking the worker as being filled (see gs__has_refill_room). */
static inline int gs__refill_ok(const gs_sched_t *s, const gs__worker_t *w)
{
    if (gs__shunned(w)) return 0;
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

/* Pick a worker for ready task t by the transfer-cost model (sched.h): for every live worker W,
 *   cost(W) = queue(W) + sum over the inputs W lacks of (latency + bytes / bw(best holder -> W)
 *                                                         + bytes x disk_ns_per_byte(holder))
 *             + sum over the inputs W holds of bytes x disk_ns_per_byte(W)
 * (the disk terms: reading back what a worker spilled, from its heartbeats; a holder likely to
 * have an input in memory is preferred to one likely to have it on disk; a device worker's
 * inputs in its host memory add bytes x host_ns_per_byte(W) to the inputs W holds only, since
 * peers are served from host memory directly: a task moves off a holder whose inputs would
 * come back to its device more slowly than they cross the link),
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
            uint32_t src;
            for (uint32_t j = 0; j < n; j++) {
                double bw;
                if (in[j].slot == ws || (in[j].mask & bit)) {
                    holds = 1;
                    xbw += (double)in[j].nbytes * (w->disk_ns_per_byte + w->host_ns_per_byte);
                    continue;
                }
                if ((src = gs__best_source(s, &in[j], ws, &bw)) == GS__NO_WORKER) continue;
                xbw += (double)in[j].nbytes / bw + (double)in[j].nbytes * s->slots[src]->disk_ns_per_byte;
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
    gs__task_state_set(g, t, GS__TS_ASSIGNED);
    g->where[t] = w->slot;
    if (g->t_assigned != NULL) g->t_assigned[t] = s->tick_ns;   /* the tick's clock: one read per tick */
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
    uint32_t hint = 0;   /* members are only deleted in this loop: none below the last minimum */
    s->touched_slots.len = 0;
    s->scratch_defer.len = 0;
    while (g->ready_tasks.n > 0) {
        uint32_t p = hint = gs__rset_min_from(&g->ready_tasks, hint), t = g->order[p];
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
        uint32_t rhint = 0;   /* as hint above: roots are only deleted in this loop */
        while (g->ready_roots.n > 0) {
            uint32_t p = rhint = gs__rset_min_from(&g->ready_roots, rhint), t = g->order[p];
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
    if (g->nready == 0) gs__graph_active_del(s, g);
    return room;
}

void gs__sched_tick(gs_sched_t *s)
{
    uint64_t n;
    gs__graph_t *g;

    /* releases first: a chunk released and recomputed in one iteration must be dropped by the
     * worker before the new assignment arrives */
    gs__sched_flush_releases(s);
#ifdef GS_SCHED_CHECK_INVARIANTS
    gs__sched_check_invariants(s);
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
    s->tick_ns = gs_now_ns();
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
    gs__sched_check_invariants(s);
#endif
}
