/* Task execution of gworker: TASK_ASSIGN intake, memory admission (FIFO), input resolution,
 * dispatch on kernel threads (pool mode) or backend streams (streams mode), completion and
 * TASK_DONE batching. */
#include "worker/worker_int.h"
#include "worker/xfer/xfer.h"

#include "chunkops/eval.h"
#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GS_W_TASK_SLAB 256

/* ---------------------------------------------------------------- task structs (free list) */

static gs_wtask_t *gs__wtask_alloc(gs_worker_t *w)
{
    gs_wtask_t *t;
    if (w->task_free.len == 0) {
        gs_wtask_t *slab;
        if (GS_VEC_RESERVE(&w->task_slabs, w->task_slabs.len + 1) != GS_OK) return NULL;
        /* room for every task of every slab, so recycling never allocates */
        if (GS_VEC_RESERVE(&w->task_free, (w->task_slabs.len + 1) * GS_W_TASK_SLAB) != GS_OK)
            return NULL;
        slab = gs_malloc(sizeof(gs_wtask_t) * GS_W_TASK_SLAB, "worker task slab");
        if (slab == NULL) return NULL;
        w->task_slabs.data[w->task_slabs.len++] = slab;
        for (int i = GS_W_TASK_SLAB - 1; i >= 0; i--)
            w->task_free.data[w->task_free.len++] = &slab[i];
    }
    t = w->task_free.data[--w->task_free.len];
    memset(t, 0, sizeof(*t));
    t->stream = -1;
    gs__wlist_init(&t->link);
    return t;
}

static void gs__wtask_recycle(gs_worker_t *w, gs_wtask_t *t)
{
    if (t->deps != t->deps_inline) gs_free(t->deps);
    gs_free(t->err);
    t->deps = NULL;
    t->err = NULL;
    /* capacity for every task of every slab was reserved when the slab was made */
    gs_assert_always(w->task_free.len < w->task_free.cap);
    w->task_free.data[w->task_free.len++] = t;
}

/* ---------------------------------------------------------------- TASK_DONE batch */

static const char *gs__wtask_layer_name(const gs_wtask_t *t)
{
    return t->layer ? gs_layer_name(t->layer) : "?";
}

static void gs__wdone_push(gs_worker_t *w, uint64_t graph, uint64_t task, gs_status_t status,
                           uint64_t nbytes, uint64_t run_ns, uint64_t fetch_ns, char *err)
{
    /* Reserve every column first so a failure leaves the batch consistent. */
    size_t n = w->d_task.len + 1;
    if (GS_VEC_RESERVE(&w->d_graph, n) != GS_OK || GS_VEC_RESERVE(&w->d_task, n) != GS_OK ||
        GS_VEC_RESERVE(&w->d_status, n) != GS_OK || GS_VEC_RESERVE(&w->d_nbytes, n) != GS_OK ||
        GS_VEC_RESERVE(&w->d_run, n) != GS_OK || GS_VEC_RESERVE(&w->d_fetch, n) != GS_OK ||
        (status != GS_OK && GS_VEC_RESERVE(&w->d_err, w->d_err.len + 1) != GS_OK)) {
        GS_LOG_ERROR("out of memory queueing the completion of task %llu of graph %llu; "
                     "it will not be reported", (unsigned long long)task,
                     (unsigned long long)graph);
        gs_free(err);
        return;
    }
    w->d_graph.data[w->d_graph.len++] = graph;
    w->d_task.data[w->d_task.len++] = task;
    w->d_status.data[w->d_status.len++] = (int32_t)status;
    w->d_nbytes.data[w->d_nbytes.len++] = nbytes;
    w->d_run.data[w->d_run.len++] = run_ns;
    w->d_fetch.data[w->d_fetch.len++] = fetch_ns;
    if (status != GS_OK) {
        w->d_err.data[w->d_err.len++] = err;
        w->st.tasks_failed++;
    } else {
        gs_free(err);
        w->st.tasks_done++;
    }
    if (w->d_task.len >= GS_W_DONE_FLUSH) gs__wexec_flush_done(w);
}

void gs__wexec_flush_done(gs_worker_t *w)
{
    gs_msg_t m;
    gs_str_t *errs = NULL;
    size_t i;

    if (w->d_task.len == 0) return;
    if (w->d_err.len) {
        errs = gs_calloc(w->d_err.len, sizeof(*errs), "task done errors");
        if (errs == NULL) {
            GS_LOG_ERROR("out of memory sending %zu task completions", w->d_task.len);
            goto reset;
        }
        for (i = 0; i < w->d_err.len; i++) {
            const char *s = w->d_err.data[i] ? w->d_err.data[i] : "task failed";
            errs[i].data = (const uint8_t *)s;
            errs[i].len = strlen(s);
        }
    }
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_TASK_DONE;
    m.u.task_done.n = w->d_task.len;
    m.u.task_done.graph_id = w->d_graph.data;
    m.u.task_done.task_id = w->d_task.data;
    m.u.task_done.status = w->d_status.data;
    m.u.task_done.nbytes = w->d_nbytes.data;
    m.u.task_done.run_ns = w->d_run.data;
    m.u.task_done.fetch_ns = w->d_fetch.data;
    m.u.task_done.nerrors = (uint32_t)w->d_err.len;
    m.u.task_done.errors = errs;
    gs__wsend_msg(w, &m);
    gs_free(errs);
reset:
    for (i = 0; i < w->d_err.len; i++) gs_free(w->d_err.data[i]);
    w->d_graph.len = w->d_task.len = w->d_status.len = w->d_nbytes.len = 0;
    w->d_run.len = w->d_fetch.len = w->d_err.len = 0;
}

/* ---------------------------------------------------------------- task lifetime */

/* Give back everything a task holds (inputs, output, queue and map membership), return the
 * struct to the free list. */
static void gs__wtask_release(gs_worker_t *w, gs_wtask_t *t)
{
    gs_wgraph_t *g = t->graph;
    uint32_t i;

    if (t->state == GS_WTASK_QUEUED) {
        gs__wlist_del(&t->link);
        w->nqueued--;
    } else {
        if (t->state == GS_WTASK_READY) gs__wlist_del(&t->link);
        if (t->state == GS_WTASK_RUNNING) w->nrunning--;
        w->nadmitted--;
    }
    for (i = 0; i < t->ndeps; i++) {
        gs_wchunk_t *c = t->deps[i].chunk;
        if (c == NULL) continue;
        if (c->state == GS_WCHUNK_PENDING) {
            for (size_t k = 0; k < c->waiters.len; k++) {
                if (c->waiters.data[k] == t) {
                    c->waiters.data[k] = c->waiters.data[--c->waiters.len];
                    break;
                }
            }
        }
        t->deps[i].chunk = NULL;
        gs__wchunk_unref(w, c);
    }
    if (t->out) {
        gs__wchunk_unref(w, t->out);
        t->out = NULL;
    }
    if (g) {
        uint64_t v;
        if (gs_u64map_get(&g->tasks, t->id, &v) && (gs_wtask_t *)(uintptr_t)v == t)
            gs_u64map_del(&g->tasks, t->id);
    }
    gs__wtask_recycle(w, t);
    if (g) gs__wgraph_maybe_free(w, g, 0);
}

void gs__wtask_drop(gs_worker_t *w, gs_wtask_t *t)
{
    gs_assert(t->state != GS_WTASK_RUNNING);
    gs__wtask_release(w, t);
}

static char *gs__wtask_msgv(const gs_wtask_t *t, uint64_t graph, const char *fmt, va_list ap)
{
    char detail[GS_W_ERRLEN];
    char buf[GS_W_ERRLEN + 160];
    vsnprintf(detail, sizeof(detail), fmt, ap);
    snprintf(buf, sizeof(buf), "task %llu (layer %s, block %llu) of graph %llu failed: %s",
             (unsigned long long)t->id, gs__wtask_layer_name(t), (unsigned long long)t->block,
             (unsigned long long)graph, detail);
    return gs_strdup(buf, "task error");
}

void gs__wtask_fail(gs_worker_t *w, gs_wtask_t *t, gs_status_t status, const char *fmt, ...)
{
    va_list ap;
    char *msg;
    uint64_t graph = t->graph ? t->graph->id : 0;

    va_start(ap, fmt);
    msg = gs__wtask_msgv(t, graph, fmt, ap);
    va_end(ap);
    GS_LOG_WARN("%s", msg ? msg : "task failed (no memory for the message)");
    gs__wdone_push(w, graph, t->id, status, 0, t->run_ns, t->fetch_ns, msg);
    gs__wtask_release(w, t);
}

/* ---------------------------------------------------------------- intake */

typedef struct gs__wbadlayer {
    uint32_t id;
    gs_status_t status;
    char msg[256];
} gs__wbadlayer_t;

void gs__wexec_assign(gs_worker_t *w, const gs_msg_task_assign_t *m)
{
    gs_wgraph_t *g;
    gs_status_t status;
    GS_VEC(gs__wbadlayer_t) bad = {0};
    uint64_t i, ndeps_total;
    uint32_t li;

    if (w->state != GS_WSTATE_RUNNING) return;
    ndeps_total = m->ntasks ? m->dep_off[m->ntasks] : 0;
    if (m->ntasks && m->dep_off[0] != 0) {
        GS_LOG_ERROR("task-assign for graph %llu: dependency offsets do not start at 0; "
                     "batch ignored", (unsigned long long)m->graph_id);
        return;
    }
    for (i = 0; i < m->ntasks; i++) {
        if (m->dep_off[i + 1] < m->dep_off[i] || m->dep_off[i + 1] > ndeps_total) {
            GS_LOG_ERROR("task-assign for graph %llu: dependency offsets are not monotonic; "
                         "batch ignored", (unsigned long long)m->graph_id);
            return;
        }
    }
    status = gs__wgraph_get(w, m->graph_id, 1, &g);
    if (status != GS_OK) {
        /* cannot even track the graph: report every task failed */
        for (i = 0; i < m->ntasks; i++) {
            char buf[GS_W_ERRLEN];
            snprintf(buf, sizeof(buf), "task %llu (layer ?, block %llu) of graph %llu failed: %s",
                     (unsigned long long)m->task_id[i], (unsigned long long)m->task_block[i],
                     (unsigned long long)m->graph_id, gs_last_error());
            gs__wdone_push(w, m->graph_id, m->task_id[i], status, 0, 0, 0,
                           gs_strdup(buf, "task error"));
        }
        return;
    }
    g->nowned++;   /* pin while building */
    gs__wgraph_unidle(w, g);

    /* Decode the layers that came along (once per (graph, layer id)). */
    for (li = 0; li < m->nlayers; li++) {
        gs_layer_t *l = NULL;
        uint64_t v;
        if (gs_u64map_get(&g->layers, m->layer_ids[li], &v)) continue;
        status = gs_layer_decode(m->layers[li].data, m->layers[li].len, &l);
        if (status == GS_OK) {
            status = gs_u64map_put(&g->layers, m->layer_ids[li], (uint64_t)(uintptr_t)l);
            if (status != GS_OK) {
                gs_layer_free(l);
                gs_error_set(status, "out of memory caching the layer");
            } else {
                g->layer_bytes += m->layers[li].len;
            }
        }
        if (status != GS_OK) {
            gs__wbadlayer_t b;
            b.id = m->layer_ids[li];
            b.status = status;
            snprintf(b.msg, sizeof(b.msg), "%s", gs_last_error());
            GS_LOG_WARN("graph %llu: layer %u could not be decoded: %s",
                        (unsigned long long)m->graph_id, b.id, b.msg);
            (void)GS_VEC_PUSH(&bad, b);
        }
    }

    for (i = 0; i < m->ntasks; i++) {
        gs_wtask_t *t = gs__wtask_alloc(w);
        uint64_t d0 = m->dep_off[i], nd = m->dep_off[i + 1] - m->dep_off[i];
        uint64_t v;
        size_t b;
        int nin;

        if (t == NULL) {
            char buf[GS_W_ERRLEN];
            snprintf(buf, sizeof(buf), "task %llu (layer ?, block %llu) of graph %llu failed: "
                     "out of memory for the task", (unsigned long long)m->task_id[i],
                     (unsigned long long)m->task_block[i], (unsigned long long)m->graph_id);
            gs__wdone_push(w, m->graph_id, m->task_id[i], GS_ERR_NO_MEMORY, 0, 0, 0,
                           gs_strdup(buf, "task error"));
            continue;
        }
        t->graph = g;
        t->id = m->task_id[i];
        t->block = m->task_block[i];
        t->layer_id = m->task_layer[i];
        t->state = GS_WTASK_QUEUED;
        /* Not yet counted anywhere: account it as queued so gs__wtask_fail balances. */
        gs__wlist_push(&w->admit_q, &t->link);
        w->nqueued++;

        if (t->id >= GS_U64MAP_TOMB) {
            gs__wtask_fail(w, t, GS_ERR_INVALID_PARAM, "task id is reserved");
            continue;
        }
        if (gs_u64map_get(&g->tasks, t->id, &v)) {
            GS_LOG_WARN("task %llu of graph %llu assigned again while queued or running; "
                        "ignored", (unsigned long long)t->id, (unsigned long long)g->id);
            gs__wlist_del(&t->link);
            w->nqueued--;
            t->graph = NULL;
            gs__wtask_recycle(w, t);
            continue;
        }
        if (gs_u64map_put(&g->tasks, t->id, (uint64_t)(uintptr_t)t) != GS_OK) {
            gs__wtask_fail(w, t, GS_ERR_NO_MEMORY, "out of memory for the task table");
            continue;
        }
        for (b = 0; b < bad.len; b++) if (bad.data[b].id == t->layer_id) break;
        if (b < bad.len) {
            gs__wtask_fail(w, t, bad.data[b].status, "layer %u could not be decoded: %s",
                           t->layer_id, bad.data[b].msg);
            continue;
        }
        if (!gs_u64map_get(&g->layers, t->layer_id, &v)) {
            gs__wtask_fail(w, t, GS_ERR_NOT_FOUND,
                           "layer %u of graph %llu is unknown to this worker (never sent, or "
                           "dropped after the graph's last key was released)",
                           t->layer_id, (unsigned long long)g->id);
            continue;
        }
        t->layer = (const gs_layer_t *)(uintptr_t)v;
        if (t->block >= gs_layer_nblocks(t->layer)) {
            gs__wtask_fail(w, t, GS_ERR_INVALID_PARAM, "block %llu is outside the layer's %llu "
                           "blocks", (unsigned long long)t->block,
                           (unsigned long long)gs_layer_nblocks(t->layer));
            continue;
        }
        nin = gs_layer_ninputs(t->layer, t->block);
        if (nin < 0 || (uint64_t)nin != nd) {
            gs__wtask_fail(w, t, GS_ERR_INVALID_PARAM,
                           "the layer expects %d inputs but the task lists %llu dependencies",
                           nin, (unsigned long long)nd);
            continue;
        }
        if (nd > GS_W_INLINE_DEPS) {
            t->deps = gs_calloc(nd, sizeof(gs_wdep_t), "task deps");
            if (t->deps == NULL) {
                t->deps = t->deps_inline;
                gs__wtask_fail(w, t, GS_ERR_NO_MEMORY, "out of memory for %llu dependencies",
                               (unsigned long long)nd);
                continue;
            }
        } else {
            t->deps = t->deps_inline;
            memset(t->deps_inline, 0, sizeof(t->deps_inline));
        }
        t->ndeps = (uint32_t)nd;
        {
            int badkey = 0;
            uint64_t in_bytes = 0;
            for (uint64_t k = 0; k < nd; k++) {
                gs_wdep_t *d = &t->deps[k];
                d->graph = m->dep_keys[2 * (d0 + k)];
                d->task = m->dep_keys[2 * (d0 + k) + 1];
                d->worker = m->dep_worker[d0 + k];
                d->nbytes = m->dep_nbytes[d0 + k];
                if (d->graph >= GS_U64MAP_TOMB || d->task >= GS_U64MAP_TOMB) badkey = 1;
                in_bytes += d->nbytes < GS_W_SMALL_TASK_BYTES ? d->nbytes : GS_W_SMALL_TASK_BYTES;
            }
            t->small = in_bytes < GS_W_SMALL_TASK_BYTES;
            if (badkey) {
                gs__wtask_fail(w, t, GS_ERR_INVALID_PARAM, "a dependency key is reserved");
                continue;
            }
        }
        t->out_nbytes = gs_layer_out_nbytes(t->layer, t->block);
        t->small = t->small && t->out_nbytes <= GS_W_SMALL_TASK_BYTES;
    }
    GS_VEC_FREE(&bad);
    g->nowned--;
    w->admit_epoch++;                  /* new tasks may fit where the head does not */
    gs__wgraph_maybe_free(w, g, 0);
    gs__wexec_pump(w);
}

/* ---------------------------------------------------------------- admission */

static void gs__wtask_become_ready(gs_worker_t *w, gs_wtask_t *t)
{
    t->state = GS_WTASK_READY;
    t->t_ready = gs_now_ns();
    t->fetch_ns = t->t_ready - t->t_admit;
    gs__wlist_push(&w->ready_q, &t->link);
}

/* GS_OK: admitted; GS_INPROGRESS: blocked on memory (nothing changed); otherwise the task has
 * been failed and released. */
static gs_status_t gs__wtask_admit(gs_worker_t *w, gs_wtask_t *t)
{
    uint64_t need = t->out_nbytes, fetch_bytes = 0;
    gs_status_t status;
    gs_wlink_t *qprev;
    uint32_t i, k;

    for (i = 0; i < t->ndeps; i++) {
        gs_wdep_t *d = &t->deps[i];
        gs_wchunk_t *c = gs__wstore_find(w, d->graph, d->task);
        if (c != NULL && c->state == GS_WCHUNK_FAILED) c = NULL;
        if (d->worker == w->id) {
            if (c == NULL) {
                gs__wtask_fail(w, t, GS_ERR_NOT_FOUND, "input (%llu, %llu) is not on this "
                               "worker", (unsigned long long)d->graph,
                               (unsigned long long)d->task);
                return GS_ERR_NOT_FOUND;
            }
        } else if (c == NULL) {
            /* count each missing key once */
            for (k = 0; k < i; k++)
                if (t->deps[k].graph == d->graph && t->deps[k].task == d->task) break;
            if (k == i) fetch_bytes += d->nbytes;
        }
    }
    need += fetch_bytes;
    if (need < fetch_bytes || need > w->mem_limit) {
        gs__wtask_fail(w, t, w->streams_mode ? GS_ERR_NO_DEVICE_MEMORY : GS_ERR_NO_MEMORY,
                       "it needs %llu bytes (output %llu, inputs to fetch %llu) but the memory "
                       "limit is %llu bytes", (unsigned long long)need,
                       (unsigned long long)t->out_nbytes, (unsigned long long)fetch_bytes,
                       (unsigned long long)w->mem_limit);
        return GS_ERR_NO_MEMORY;
    }
    {
        /* Tasks without inputs (generators) may fill only GS_W_PRODUCER_SHARE of the memory:
         * the rest stays for tasks that consume stored chunks, whose completion lets gsched
         * release memory. Without this reserve a deep queue of generators can fill the memory
         * with chunks whose consumers then never fit. Lifted (reserve_off) when nothing else
         * can make progress. */
        uint64_t cap = w->mem_limit;
        if (t->ndeps == 0 && !w->reserve_off) cap = w->mem_limit / 4 * GS_W_PRODUCER_QUARTERS;
        if (need > cap || w->mem_used > cap - need) return GS_INPROGRESS;
    }

    status = gs__wchunk_new(w, t->graph, t->id, t->out_nbytes, &t->out);
    if (status == GS_ERR_NO_MEMORY || status == GS_ERR_NO_DEVICE_MEMORY) return GS_INPROGRESS;
    if (status != GS_OK) {
        gs__wtask_fail(w, t, status, "allocating the %llu-byte output: %s",
                       (unsigned long long)t->out_nbytes, gs_last_error());
        return status;
    }
    /* From here on the task holds resources: account it as admitted. */
    qprev = t->link.prev;             /* its place in the queue, should it have to go back */
    gs__wlist_del(&t->link);
    w->nqueued--;
    w->nadmitted++;
    t->state = GS_WTASK_FETCHING;
    t->t_admit = gs_now_ns();
    for (i = 0; i < t->ndeps; i++) {
        gs_wdep_t *d = &t->deps[i];
        gs_wchunk_t *c = gs__wstore_find(w, d->graph, d->task);
        if (c != NULL && c->state == GS_WCHUNK_FAILED) c = NULL;
        if (c != NULL) {
            gs__wchunk_ref(c);
        } else {
            status = gs__xfer_fetch(w, d->graph, d->task, d->worker, d->nbytes, &c);
            if (status == GS_ERR_NO_MEMORY || status == GS_ERR_NO_DEVICE_MEMORY) {
                /* backend refused despite our accounting: undo and wait */
                for (k = 0; k < i; k++) {
                    gs_wchunk_t *h = t->deps[k].chunk;
                    if (h == NULL) continue;
                    if (h->state == GS_WCHUNK_PENDING) {
                        for (size_t j = 0; j < h->waiters.len; j++)
                            if (h->waiters.data[j] == t) {
                                h->waiters.data[j] = h->waiters.data[--h->waiters.len];
                                break;
                            }
                    }
                    t->deps[k].chunk = NULL;
                    gs__wchunk_unref(w, h);
                }
                gs__wchunk_unref(w, t->out);
                t->out = NULL;
                w->nadmitted--;
                w->nqueued++;
                t->state = GS_WTASK_QUEUED;
                /* back to its place in the queue */
                t->link.next = qprev->next;
                t->link.prev = qprev;
                qprev->next->prev = &t->link;
                qprev->next = &t->link;
                return GS_INPROGRESS;
            }
            if (status != GS_OK) {
                gs__wtask_fail(w, t, status, "fetching input (%llu, %llu) from worker %llu: %s",
                               (unsigned long long)d->graph, (unsigned long long)d->task,
                               (unsigned long long)d->worker, gs_last_error());
                return status;
            }
        }
        d->chunk = c;
        if (c->state == GS_WCHUNK_PENDING) {
            if (GS_VEC_PUSH(&c->waiters, t) != GS_OK) {
                gs__wtask_fail(w, t, GS_ERR_NO_MEMORY, "out of memory waiting for an input");
                return GS_ERR_NO_MEMORY;
            }
            t->nwait++;
        }
    }
    if (t->nwait == 0) gs__wtask_become_ready(w, t);
    return GS_OK;
}

void gs__wexec_input_ready(gs_worker_t *w, gs_wchunk_t *c)
{
    /* c went PENDING -> READY or FAILED: wake (or fail) its waiters */
    while (c->waiters.len) {
        gs_wtask_t *t = c->waiters.data[--c->waiters.len];
        if (c->state == GS_WCHUNK_READY) {
            gs_assert(t->nwait > 0);
            if (--t->nwait == 0 && t->state == GS_WTASK_FETCHING) gs__wtask_become_ready(w, t);
        }
    }
}

/* ---------------------------------------------------------------- dispatch */

/* Pool threads: take tasks, instantiate, run, hand back. */
static void gs__wpool_main(void *arg)
{
    gs_worker_t *w = arg;
    gs_chunkops_stream_h stream;
    int idx;

    uv_mutex_lock(&w->job_lock);
    idx = w->nthreads_started++;
    uv_mutex_unlock(&w->job_lock);
    stream = w->thread_streams[idx];

    for (;;) {
        gs_wtask_t *t;
        gs_chunk_ref_t small[16];
        gs_chunk_ref_t *in = small;
        gs_ktask_t kt;
        gs_status_t status;
        uint64_t t0;

        uv_mutex_lock(&w->job_lock);
        while (w->job_head == NULL && !w->job_quit) uv_cond_wait(&w->job_cond, &w->job_lock);
        if (w->job_quit) {
            uv_mutex_unlock(&w->job_lock);
            return;
        }
        t = w->job_head;
        w->job_head = t->job_next;
        if (w->job_head == NULL) w->job_tail = NULL;
        uv_mutex_unlock(&w->job_lock);

        t0 = gs_now_ns();
        if (t->ndeps > 16) in = gs_malloc(sizeof(*in) * t->ndeps, "task inputs");
        if (in == NULL) {
            status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for %u input references",
                                  t->ndeps);
        } else {
            for (uint32_t i = 0; i < t->ndeps; i++) {
                in[i].data = t->deps[i].chunk->ptr;
                in[i].len = (int64_t)(t->deps[i].chunk->nbytes / sizeof(double));
            }
            status = gs_layer_instantiate(t->layer, t->block, (int)t->ndeps, in, t->out->ptr,
                                          &kt);
            if (status == GS_OK) status = gs_chunkops_run_ktask(w->ops, w->ctx, stream, &kt);
            if (in != small) gs_free(in);
        }
        t->run_ns = gs_now_ns() - t0;
        t->status = status;
        if (status != GS_OK) {
            const char *e = gs_last_error();
            t->err = gs_strdup(e[0] ? e : gs_status_string(status), "task error");
        }
        t->job_next = NULL;
        uv_mutex_lock(&w->done_lock);
        if (w->done_tail) w->done_tail->job_next = t;
        else w->done_head = t;
        w->done_tail = t;
        uv_mutex_unlock(&w->done_lock);
        uv_async_send(&w->async);
    }
}

int gs__wexec_pick_stream(gs_worker_t *w)
{
    int best = 0;
    for (int s = 1; s < w->nstreams; s++)
        if (w->stream_inflight[s] < w->stream_inflight[best]) best = s;
    return best;
}

static void gs__wtask_complete(gs_worker_t *w, gs_wtask_t *t, gs_status_t status,
                               uint64_t t_done);

/* ---------------------------------------------------------------- launcher thread */

/* Streams mode: some backend calls block their caller for the whole computation (cuSOLVER's
 * geqrf/orgqr/gesvd(j) synchronise on the host: a 1000 x 1000 SVD holds the calling thread
 * ~90 ms on an H100, a 250000 x 1000 QR ~47 of its 96 ms). Made from the loop they would stop
 * fetches, serving, dispatch and heartbeats meanwhile, so QR and SVD tasks go to a launcher
 * thread instead. The loop instantiates the task (gs_ktask_t borrows only the task's input
 * and output chunk memory, held by the task's refs until its completion is drained, and its
 * layer, kept while the task is in its graph's task map) and queues a job; the thread runs the
 * kernel and asks for a notification on its own stream. That stream is used by no other
 * thread, so the per-stream cuBLAS/cuSOLVER handles of the backend are never shared; the
 * loop touches it only at stop, after joining the thread. The job's first member is the note
 * through which the completion (or the failure to enqueue, or the cancelation of a job that
 * never ran) comes back to the loop; the thread never touches the task itself. */

typedef struct gs_wlaunch_job {
    gs_wnote_t note;               /* first: the drain frees the job through it */
    struct gs_wlaunch_job *next;   /* launcher queue (under its lock) */
    gs_wtask_t *task;              /* loop only */
    uint64_t t_start;              /* launcher: when the kernel was handed to the backend */
    char *err;                     /* launcher: failure message (gs_malloc'd) */
    gs_ktask_t kt;
} gs_wlaunch_job_t;

struct gs_wlauncher {
    gs_worker_t *w;
    uv_thread_t thread;
    uv_mutex_t lock;
    uv_cond_t cond;
    gs_wlaunch_job_t *head, *tail; /* under lock */
    int quit;                      /* under lock */
    int running;                   /* the thread exists (loop only) */
    gs_chunkops_stream_h stream;   /* the launcher's own stream */
};

static void gs__wlaunch_main(void *arg)
{
    struct gs_wlauncher *L = arg;
    gs_worker_t *w = L->w;

    for (;;) {
        gs_wlaunch_job_t *j;
        gs_status_t status;

        uv_mutex_lock(&L->lock);
        while (L->head == NULL && !L->quit) uv_cond_wait(&L->cond, &L->lock);
        if (L->quit) {                 /* jobs still queued go back at stop */
            uv_mutex_unlock(&L->lock);
            return;
        }
        j = L->head;
        L->head = j->next;
        if (L->head == NULL) L->tail = NULL;
        uv_mutex_unlock(&L->lock);

        j->t_start = gs_now_ns();
        status = gs_chunkops_run_ktask(w->ops, w->ctx, L->stream, &j->kt);
        if (status == GS_OK) {
            gs__wnote_arm(w, L->stream, &j->note);
            continue;                          /* j belongs to the note now */
        } else {
            /* keep the message; then wait for whatever the failed call enqueued (it may still
             * write the output) and clear the stream's record of the failure, which would
             * otherwise fail the next task's notification */
            const char *e = gs_last_error();
            j->err = gs_strdup(e[0] ? e : gs_status_string(status), "task error");
            (void)w->ops->sync(w->ctx, L->stream);
        }
        if (status != GS_OK && j->err == NULL) {
            const char *e = gs_last_error();
            j->err = gs_strdup(e[0] ? e : gs_status_string(status), "task error");
        }
        j->note.status = status;
        j->note.t_done = gs_now_ns();
        gs__wnote_push(w, &j->note);
    }
}

/* Whether task kernel @a kt goes to the launcher. */
static int gs__wlaunch_wants(const gs_worker_t *w, const gs_ktask_t *kt)
{
    if (w->launcher_off || kt->kind != GS_KTASK_LINALG) return 0;
    return kt->u.linalg.op == GS_LA_QR || kt->u.linalg.op == GS_LA_SVD;
}

/* Create the launcher (its stream and thread). On failure the worker launches such tasks from
 * the loop from then on (they still run, blocking the loop meanwhile). */
static gs_status_t gs__wlaunch_start(gs_worker_t *w)
{
    struct gs_wlauncher *L;
    gs_status_t status;
    int rc;

    L = gs_calloc(1, sizeof(*L), "worker launcher");
    if (L == NULL) {
        status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the launcher");
        goto fail;
    }
    L->w = w;
    if (uv_mutex_init(&L->lock) != 0) {
        gs_free(L);
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot create the launcher's mutex");
        goto fail;
    }
    if (uv_cond_init(&L->cond) != 0) {
        uv_mutex_destroy(&L->lock);
        gs_free(L);
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot create the launcher's condition");
        goto fail;
    }
    status = w->ops->stream_create(w->ctx, &L->stream);
    if (status != GS_OK) goto fail_sync;
    rc = uv_thread_create(&L->thread, gs__wlaunch_main, L);
    if (rc != 0) {
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot start the launcher thread: %s",
                              uv_strerror(rc));
        w->ops->stream_destroy(w->ctx, L->stream);
        goto fail_sync;
    }
    L->running = 1;
    w->launcher = L;
    GS_LOG_DEBUG("worker %s: launcher thread started (QR and SVD tasks)", w->name);
    return GS_OK;

fail_sync:
    uv_cond_destroy(&L->cond);
    uv_mutex_destroy(&L->lock);
    gs_free(L);
fail:
    GS_LOG_WARN("worker %s: %s; QR and SVD tasks are launched from the event loop, which they "
                "block while the backend computes", w->name, gs_last_error());
    w->launcher_off = 1;
    return status;
}

/* Hand @a t (RUNNING, kernel @a kt) to the launcher. 0: no launcher (launch inline); 1: taken
 * (its completion, successful or not, arrives as a GS_WNOTE_LAUNCH note or already happened). */
static int gs__wlaunch_submit(gs_worker_t *w, gs_wtask_t *t, const gs_ktask_t *kt)
{
    struct gs_wlauncher *L;
    gs_wlaunch_job_t *j;

    if (w->launcher == NULL && gs__wlaunch_start(w) != GS_OK) return 0;
    L = w->launcher;
    t->stream = w->nstreams;
    w->stream_inflight[w->nstreams]++;
    t->t_launch = gs_now_ns();
    j = gs_malloc(sizeof(*j), "launcher job");
    if (j == NULL) {
        gs__wtask_complete(w, t, gs_error_set(GS_ERR_NO_MEMORY, "out of memory launching"),
                           gs_now_ns());
        return 1;
    }
    memset(&j->note, 0, sizeof(j->note));
    j->note.w = w;
    j->note.kind = GS_WNOTE_LAUNCH;
    j->note.obj = t;
    j->next = NULL;
    j->task = t;
    j->t_start = 0;
    j->err = NULL;
    j->kt = *kt;
    w->st.tasks_launcher++;
    uv_mutex_lock(&L->lock);
    if (L->tail) L->tail->next = j;
    else L->head = j;
    L->tail = j;
    uv_cond_signal(&L->cond);
    uv_mutex_unlock(&L->lock);
    return 1;
}

/* Loop: a launcher job came back. */
static void gs__wlaunch_done(gs_worker_t *w, gs_wlaunch_job_t *j)
{
    gs_wtask_t *t = j->task;
    if (j->t_start) t->t_launch = j->t_start;
    gs_free(t->err);
    t->err = j->err;
    j->err = NULL;
    if (j->note.status != GS_OK && t->err == NULL) {
        char buf[GS_W_ERRLEN];
        snprintf(buf, sizeof(buf), "the backend reported %s on the launcher stream",
                 gs_status_string(j->note.status));
        t->err = gs_strdup(buf, "task error");
    }
    gs__wtask_complete(w, t, j->note.status, j->note.t_done);
    gs_free(j);
}

/* Stop the launcher thread (after the job it is running, if any, has been handed to the
 * backend), return the jobs it never started as canceled completions and wait for its
 * stream, so that every job has come back as a note before this returns. */
static void gs__wlaunch_stop(gs_worker_t *w)
{
    struct gs_wlauncher *L = w->launcher;
    gs_wlaunch_job_t *j;

    if (L == NULL || !L->running) return;
    uv_mutex_lock(&L->lock);
    L->quit = 1;
    uv_cond_signal(&L->cond);
    uv_mutex_unlock(&L->lock);
    uv_thread_join(&L->thread);
    L->running = 0;
    j = L->head;
    L->head = L->tail = NULL;
    while (j) {
        gs_wlaunch_job_t *next = j->next;
        j->note.status = GS_ERR_CANCELED;
        j->note.t_done = gs_now_ns();
        gs__wnote_push(w, &j->note);
        j = next;
    }
    (void)w->ops->sync(w->ctx, L->stream);   /* its notification callbacks have run */
}

static void gs__wlaunch_destroy(gs_worker_t *w)
{
    struct gs_wlauncher *L = w->launcher;
    if (L == NULL) return;
    gs__wlaunch_stop(w);
    gs_assert(L->head == NULL);
    w->ops->stream_destroy(w->ctx, L->stream);
    uv_cond_destroy(&L->cond);
    uv_mutex_destroy(&L->lock);
    gs_free(L);
    w->launcher = NULL;
}

/* ---------------------------------------------------------------- streams mode launch */

/* Streams mode: enqueue one task (or hand it to the launcher); completion arrives as a note. */
static void gs__wtask_launch_stream(gs_worker_t *w, gs_wtask_t *t)
{
    gs_chunk_ref_t small[16] = {{0}};   /* (GCC cannot see that only ndeps entries are read) */
    gs_chunk_ref_t *in = small;
    gs_ktask_t kt;
    gs_status_t status;
    gs_wnote_t *n;
    int s;

    if (t->ndeps > 16) in = gs_malloc(sizeof(*in) * t->ndeps, "task inputs");
    if (in == NULL) {
        status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory launching");
    } else {
        for (uint32_t i = 0; i < t->ndeps; i++) {
            in[i].data = t->deps[i].chunk->ptr;
            in[i].len = (int64_t)(t->deps[i].chunk->nbytes / sizeof(double));
        }
        status = gs_layer_instantiate(t->layer, t->block, (int)t->ndeps, in, t->out->ptr, &kt);
        if (in != small) gs_free(in);
        if (status == GS_OK && gs__wlaunch_wants(w, &kt) && gs__wlaunch_submit(w, t, &kt))
            return;
    }
    s = gs__wexec_pick_stream(w);
    t->stream = s;
    w->stream_inflight[s]++;
    t->t_launch = gs_now_ns();
    if (status != GS_OK) {
        gs__wtask_complete(w, t, status, gs_now_ns());
        return;
    }
    n = gs_calloc(1, sizeof(*n), "task note");
    if (n == NULL) {
        gs__wtask_complete(w, t, gs_error_set(GS_ERR_NO_MEMORY, "out of memory launching"),
                           gs_now_ns());
        return;
    }
    status = gs_chunkops_run_ktask(w->ops, w->ctx, w->streams[s], &kt);
    if (status != GS_OK) {
        /* Part of the task may have been enqueued before the failure, and the backend keeps
         * the stream's error for its next notify: drain the stream (rare) so that neither
         * this task's output is freed under running work nor a later task inherits the
         * error. */
        (void)w->ops->sync(w->ctx, w->streams[s]);
        gs_free(n);
        gs__wtask_complete(w, t, status, gs_now_ns());
        return;
    }
    n->kind = GS_WNOTE_TASK;
    n->obj = t;
    gs__wnote_arm(w, w->streams[s], n);
}

static void gs__wexec_dispatch(gs_worker_t *w)
{
    gs_wtask_t *head = NULL, *tail = NULL;
    int n = 0;

    while (!gs__wlist_empty(&w->ready_q) && w->nrunning < (uint64_t)w->small_slots) {
        gs_wtask_t *t = GS_WCONTAINER(w->ready_q.next, gs_wtask_t, link);
        if (!t->small && w->nrunning >= (uint64_t)w->slots) break;   /* FIFO: no overtaking */
        gs__wlist_del(&t->link);
        t->state = GS_WTASK_RUNNING;
        w->nrunning++;
        if (w->streams_mode) {
            gs__wtask_launch_stream(w, t);
        } else {
            t->job_next = NULL;
            if (tail) tail->job_next = t;
            else head = t;
            tail = t;
            n++;
        }
    }
    if (head) {
        uv_mutex_lock(&w->job_lock);
        if (w->job_tail) w->job_tail->job_next = head;
        else w->job_head = head;
        w->job_tail = tail;
        if (n == 1) uv_cond_signal(&w->job_cond);
        else uv_cond_broadcast(&w->job_cond);
        uv_mutex_unlock(&w->job_lock);
    }
}

/* Admission. Tasks are admitted in assignment order while memory allows. When the task at
 * the head of the queue does not fit, the later queued tasks (up to GS_W_SKIP_AHEAD) are tried:
 * those that fit (typically consumers with small outputs, whose completion lets gsched release
 * their inputs) run meanwhile, so a big head task does not stall a worker whose memory only
 * its successors can free. The head keeps its place and is retried first. While blocked, the
 * queue is rescanned only after memory was freed or tasks arrived (admit_epoch), so the scan
 * costs O(queue) per such event, not per loop iteration. */
void gs__wexec_pump(gs_worker_t *w)
{
    gs_wlink_t *e;
    int scanned = 0, head = 1;

    if (w->state != GS_WSTATE_RUNNING) return;
    /* blocked on memory and nothing freed or queued since the last scan: nothing to try */
    if (w->mem_blocked_since && w->blocked_epoch == w->admit_epoch) goto dispatch;
    e = w->admit_q.next;
    while (e != &w->admit_q && w->nadmitted < w->max_admitted_small) {
        gs_wtask_t *t = GS_WCONTAINER(e, gs_wtask_t, link);
        gs_wlink_t *next = e->next;   /* admitting or failing t touches no other queued task */
        if (!t->small && w->nadmitted >= w->max_admitted) break;
        if (gs__wtask_admit(w, t) == GS_INPROGRESS) {
            if (head) {
                if (w->mem_blocked_task != t || w->mem_blocked_since == 0) {
                    w->mem_blocked_task = t;
                    w->mem_blocked_since = gs_now_ns();
                    GS_LOG_DEBUG("task %llu of graph %llu waits for memory (%llu of %llu bytes "
                                 "in use)", (unsigned long long)t->id,
                                 (unsigned long long)t->graph->id,
                                 (unsigned long long)w->mem_used,
                                 (unsigned long long)w->mem_limit);
                }
                head = 0;
            }
            if (++scanned >= GS_W_SKIP_AHEAD) break;
        }
        e = next;
    }
    if (head) {
        w->mem_blocked_since = 0;      /* the head was admitted (or the window is full) */
        w->mem_blocked_task = NULL;
        w->reserve_off = 0;
    } else {
        w->blocked_epoch = w->admit_epoch;
    }
dispatch:
    gs__wexec_dispatch(w);
}

/* ---------------------------------------------------------------- completion */

static void gs__wtask_complete(gs_worker_t *w, gs_wtask_t *t, gs_status_t status,
                               uint64_t t_done)
{
    if (t->stream >= 0) {
        /* Kernel time on a device shared by several streams: the time since this task was
         * launched or since the device last completed anything, whichever is later. The
         * tasks' run_ns then add up to the device's busy time instead of counting overlapping
         * kernels several times. */
        uint64_t start = t->t_launch;
        if (w->dev_last_done > start) start = w->dev_last_done;
        t->run_ns = t_done > start ? t_done - start : 0;
        if (t_done > w->dev_last_done) w->dev_last_done = t_done;
        w->stream_inflight[t->stream]--;
        t->stream = -1;
    }
    if (t->canceled || w->state != GS_WSTATE_RUNNING) {
        gs__wtask_release(w, t);
        return;
    }
    if (status != GS_OK) {
        char detail[GS_W_ERRLEN];
        snprintf(detail, sizeof(detail), "%s",
                 t->err ? t->err : (gs_last_error()[0] ? gs_last_error()
                                                          : gs_status_string(status)));
        gs__wtask_fail(w, t, status, "%s", detail);
        return;
    }
    /* Success: the output becomes an owned key (its creation reference is the store's). */
    t->out->state = GS_WCHUNK_READY;
    t->out->owned = 1;
    if (gs__wstore_insert(w, t->out) != GS_OK) {
        t->out->owned = 0;
        gs__wtask_fail(w, t, GS_ERR_NO_MEMORY, "out of memory storing the output");
        return;
    }
    t->out = NULL;
    gs__wdone_push(w, t->graph->id, t->id, GS_OK, t->out_nbytes, t->run_ns, t->fetch_ns, NULL);
    gs__wtask_release(w, t);
}

void gs__wexec_drain(gs_worker_t *w)
{
    gs_wtask_t *t;
    gs_wnote_t *n;

    gs__wnote_unpark(w);
    uv_mutex_lock(&w->done_lock);
    t = w->done_head;
    n = w->note_head;
    w->done_head = w->done_tail = NULL;
    w->note_head = w->note_tail = NULL;
    uv_mutex_unlock(&w->done_lock);

    while (t) {
        gs_wtask_t *next = t->job_next;
        gs_status_t st = t->status;
        gs__wtask_complete(w, t, st, 0);
        t = next;
    }
    while (n) {
        gs_wnote_t *next = n->next;
        switch (n->kind) {
        case GS_WNOTE_TASK: {
            gs_wtask_t *task = n->obj;
            gs_free(task->err);
            task->err = NULL;
            if (n->status != GS_OK) {
                char buf[GS_W_ERRLEN];
                snprintf(buf, sizeof(buf), "the backend reported %s on stream %d",
                         gs_status_string(n->status), task->stream);
                task->err = gs_strdup(buf, "task error");
            }
            gs__wtask_complete(w, task, n->status, n->t_done);
            gs_free(n);
            break;
        }
        case GS_WNOTE_FETCH_STAGED:
        case GS_WNOTE_SEND_STAGED:
            gs__xfer_note(w, n);
            gs_free(n);
            break;
        case GS_WNOTE_LAUNCH:
            gs__wlaunch_done(w, (gs_wlaunch_job_t *)n);
            break;
        default:
            gs_free(n);
            break;
        }
        n = next;
    }
    gs__wexec_pump(w);
}

/* ---------------------------------------------------------------- memory watchdog */

void gs__wexec_tick(gs_worker_t *w)
{
    uint64_t now, since;
    gs_wtask_t *t;

    if (w->state != GS_WSTATE_RUNNING || w->mem_blocked_since == 0) return;
    if (gs__wlist_empty(&w->admit_q)) {
        w->mem_blocked_since = 0;
        w->mem_blocked_task = NULL;
        return;
    }
    /* Something could still free memory: running tasks, fetches, outgoing transfers. */
    if (w->nrunning || gs__xfer_busy(w)) return;
    now = gs_now_ns();
    since = w->mem_blocked_since > w->last_mem_free ? w->mem_blocked_since : w->last_mem_free;
    if (!w->reserve_off) {
        /* idle and blocked: let generators use the reserve before giving up on anything */
        if (now - since >= GS_W_RESERVE_IDLE_NS) {
            GS_LOG_DEBUG("admission blocked with nothing running: lifting the consumer reserve");
            w->reserve_off = 1;
            w->last_mem_free = now;      /* restart the wait */
            w->admit_epoch++;
            gs__wexec_pump(w);
        }
        return;
    }
    if (now - since < (uint64_t)w->memory_wait_ms * 1000000ull) return;
    t = GS_WCONTAINER(w->admit_q.next, gs_wtask_t, link);
    if (GS_LOG_LEVEL_INFO <= gs__log_level) {
        /* what is waiting, for the log: how many queued tasks, how many with inputs here */
        uint64_t nq = 0, nwith = 0, minout = UINT64_MAX;
        for (gs_wlink_t *e = w->admit_q.next; e != &w->admit_q; e = e->next) {
            gs_wtask_t *q = GS_WCONTAINER(e, gs_wtask_t, link);
            nq++;
            if (q->ndeps) nwith++;
            if (q->out_nbytes < minout) minout = q->out_nbytes;
        }
        GS_LOG_INFO("memory deadlock: %llu tasks queued (%llu with inputs), smallest output "
                    "%llu bytes; %llu bytes in %llu stored chunks", (unsigned long long)nq,
                    (unsigned long long)nwith, (unsigned long long)minout,
                    (unsigned long long)w->mem_used, (unsigned long long)w->st.chunks);
    }
    gs__wtask_fail(w, t, w->streams_mode ? GS_ERR_NO_DEVICE_MEMORY : GS_ERR_NO_MEMORY,
                   "cannot get memory for its output (%llu bytes) and inputs: %llu of the "
                   "%llu-byte memory limit are held by %llu stored chunks%s and nothing "
                   "running, fetching or released freed memory for %u ms",
                   (unsigned long long)t->out_nbytes, (unsigned long long)w->mem_used,
                   (unsigned long long)w->mem_limit, (unsigned long long)w->st.chunks,
                   w->mem_used + t->out_nbytes <= w->mem_limit
                       ? " (the backend could not place the output in the free memory: "
                         "fragmentation)" : "",
                   w->memory_wait_ms);
    w->mem_blocked_since = 0;
    w->mem_blocked_task = NULL;
    gs__wexec_pump(w);
}

/* ---------------------------------------------------------------- setup / teardown */

gs_status_t gs__wexec_init(gs_worker_t *w)
{
    gs_status_t status;
    int i;

    gs__wlist_init(&w->admit_q);
    gs__wlist_init(&w->ready_q);
    if (w->streams_mode) {
        w->streams = gs_calloc((size_t)w->nstreams, sizeof(*w->streams), "worker streams");
        /* one more: the launcher's stream */
        w->stream_inflight = gs_calloc((size_t)w->nstreams + 1, sizeof(int), "stream inflight");
        if (!w->streams || !w->stream_inflight)
            return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for %d streams", w->nstreams);
        for (i = 0; i < w->nstreams; i++) {
            status = w->ops->stream_create(w->ctx, &w->streams[i]);
            if (status != GS_OK) return status;
        }
        w->slots = w->nstreams * w->stream_depth;
        {
            const char *e = getenv("GS_WORKER_LAUNCHER");
            if (e != NULL && (strcmp(e, "off") == 0 || strcmp(e, "0") == 0)) {
                w->launcher_off = 1;
                GS_LOG_INFO("GS_WORKER_LAUNCHER=%s: QR and SVD tasks are launched from the "
                            "event loop", e);
            } else if (e != NULL && e[0] != '\0' && strcmp(e, "on") != 0 && strcmp(e, "1") != 0) {
                GS_LOG_WARN("GS_WORKER_LAUNCHER=%s is not on or off: using the launcher", e);
            }
        }
    } else {
        w->thread_streams = gs_calloc((size_t)w->nthreads, sizeof(*w->thread_streams),
                                      "thread streams");
        w->threads = gs_calloc((size_t)w->nthreads, sizeof(*w->threads), "worker threads");
        if (!w->thread_streams || !w->threads)
            return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for %d threads", w->nthreads);
        for (i = 0; i < w->nthreads; i++) {
            status = w->ops->stream_create(w->ctx, &w->thread_streams[i]);
            if (status != GS_OK) return status;
        }
        for (i = 0; i < w->nthreads; i++) {
            int rc = uv_thread_create(&w->threads[i], gs__wpool_main, w);
            if (rc != 0) {
                gs__wexec_stop_threads(w);
                return gs_error_set(GS_ERR_NO_RESOURCE, "cannot start kernel thread %d: %s",
                                    i, uv_strerror(rc));
            }
            w->threads_created = i + 1;
        }
        /* a few jobs queued per thread so no thread waits for the loop between tasks */
        w->slots = w->nthreads * 4;
    }
    /* Admit a little ahead of execution so inputs are fetched while kernels run. */
    w->max_admitted = (uint64_t)w->slots * 2 + 4;
    /* Tiny tasks (inputs and output under GS_W_SMALL_TASK_BYTES) run in microseconds: with only
     * a few queued per thread, threads idle while the loop turns around completions. They may
     * run GS_W_SMALL_DEPTH deep per thread (in streams mode: per stream); they hold little
     * memory, and the FIFO order is kept (a big task waits for a normal slot and blocks the
     * tiny ones behind it). */
    w->small_slots = (w->streams_mode ? w->nstreams : w->nthreads) * GS_W_SMALL_DEPTH;
    if (w->small_slots < w->slots) w->small_slots = w->slots;
    w->max_admitted_small = (uint64_t)w->small_slots * 2 + 4;
    return GS_OK;
}

void gs__wexec_stop_threads(gs_worker_t *w)
{
    int i;
    gs__wlaunch_stop(w);
    if (w->threads == NULL) return;
    uv_mutex_lock(&w->job_lock);
    w->job_quit = 1;
    uv_cond_broadcast(&w->job_cond);
    uv_mutex_unlock(&w->job_lock);
    for (i = 0; i < w->threads_created; i++) uv_thread_join(&w->threads[i]);
    w->threads_created = 0;
    /* jobs never started go back as "completed" so their tasks are released normally */
    uv_mutex_lock(&w->job_lock);
    while (w->job_head) {
        gs_wtask_t *t = w->job_head;
        w->job_head = t->job_next;
        t->status = GS_ERR_CANCELED;
        uv_mutex_lock(&w->done_lock);
        t->job_next = NULL;
        if (w->done_tail) w->done_tail->job_next = t;
        else w->done_head = t;
        w->done_tail = t;
        uv_mutex_unlock(&w->done_lock);
    }
    w->job_tail = NULL;
    uv_mutex_unlock(&w->job_lock);
}

void gs__wexec_cleanup_tasks(gs_worker_t *w)
{
    size_t i;

    /* every live task is in its graph's task map */
    for (i = 0; i < w->graphs.cap; i++) {
        gs_wgraph_t *g;
        if (w->graphs.keys[i] >= GS_U64MAP_TOMB) continue;
        g = (gs_wgraph_t *)(uintptr_t)w->graphs.vals[i];
        g->nowned++;
        /* one pass: releasing deletes (tombstones) and never inserts into this map; graphs
         * freed meanwhile only turn later slots of w->graphs into tombstones */
        for (size_t k = 0; k < g->tasks.cap; k++) {
            if (g->tasks.keys[k] >= GS_U64MAP_TOMB) continue;
            gs__wtask_release(w, (gs_wtask_t *)(uintptr_t)g->tasks.vals[k]);
        }
        g->nowned--;
    }
    /* graphs left with nothing but layers */
    for (i = 0; i < w->graphs.cap; i++) {
        gs_wgraph_t *g;
        if (w->graphs.keys[i] >= GS_U64MAP_TOMB) continue;
        g = (gs_wgraph_t *)(uintptr_t)w->graphs.vals[i];
        if (g->tasks.len == 0 && g->nowned == 0 && g->nchunks_alive == 0)
            gs__wgraph_maybe_free(w, g, 1);
    }
}

void gs__wexec_cleanup(gs_worker_t *w)
{
    size_t i;

    gs__wlaunch_destroy(w);     /* stopped already: every job came back (drained) */
    gs__wexec_cleanup_tasks(w);
    if (w->streams) {
        for (int s = 0; s < w->nstreams; s++)
            if (w->streams[s]) w->ops->stream_destroy(w->ctx, w->streams[s]);
    }
    if (w->thread_streams) {
        for (int s = 0; s < w->nthreads; s++)
            if (w->thread_streams[s]) w->ops->stream_destroy(w->ctx, w->thread_streams[s]);
    }
    gs_free(w->streams);
    gs_free(w->stream_inflight);
    gs_free(w->thread_streams);
    gs_free(w->threads);
    w->streams = NULL;
    w->thread_streams = NULL;
    w->threads = NULL;
    for (i = 0; i < w->d_err.len; i++) gs_free(w->d_err.data[i]);
    GS_VEC_FREE(&w->d_graph);
    GS_VEC_FREE(&w->d_task);
    GS_VEC_FREE(&w->d_status);
    GS_VEC_FREE(&w->d_nbytes);
    GS_VEC_FREE(&w->d_run);
    GS_VEC_FREE(&w->d_fetch);
    GS_VEC_FREE(&w->d_err);
    for (i = 0; i < w->task_slabs.len; i++) gs_free(w->task_slabs.data[i]);
    GS_VEC_FREE(&w->task_slabs);
    GS_VEC_FREE(&w->task_free);
}
