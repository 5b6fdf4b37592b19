/* Task execution of gworker: task structs, memory admission (FIFO), input resolution,
 * dispatch to kernel threads (pool mode) or backend streams (streams mode; both in launch.c),
 * completion and TASK_DONE batching, the memory watchdog. Intake: intake.c. */
#include "worker/spill/spill.h"
#include "worker/worker_int.h"
#include "worker/xfer/xfer.h"

#include "chunkops/eval.h"
#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GS_W_TASK_SLAB 256

/* ---------------------------------------------------------------- task structs (free list) */

gs_wtask_t *gs__wtask_alloc(gs_worker_t *w)
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
    /* all but the inline dependencies, which intake fills for the task's inputs */
    memset(t, 0, offsetof(gs_wtask_t, deps_inline));
    memset(&t->out, 0, sizeof(*t) - offsetof(gs_wtask_t, out));
    t->stream = -1;
    gs__wlist_init(&t->link);
    return t;
}

void gs__wtask_recycle(gs_worker_t *w, gs_wtask_t *t)
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

void gs__wdone_push(gs_worker_t *w, uint64_t graph, uint64_t task, gs_status_t status,
                    uint64_t nbytes, uint64_t run_ns, uint64_t fetch_ns, uint64_t start_ns, char *err)
{
    /* Reserve every column first so a failure leaves the batch consistent. */
    size_t n = w->d_task.len + 1;
    if (GS_VEC_RESERVE(&w->d_graph, n) != GS_OK || GS_VEC_RESERVE(&w->d_task, n) != GS_OK ||
        GS_VEC_RESERVE(&w->d_status, n) != GS_OK || GS_VEC_RESERVE(&w->d_nbytes, n) != GS_OK ||
        GS_VEC_RESERVE(&w->d_run, n) != GS_OK || GS_VEC_RESERVE(&w->d_fetch, n) != GS_OK ||
        GS_VEC_RESERVE(&w->d_start, n) != GS_OK || GS_VEC_RESERVE(&w->d_end, n) != GS_OK ||
        (status != GS_OK && GS_VEC_RESERVE(&w->d_err, w->d_err.len + 1) != GS_OK)) {
        GS_LOG_ERROR("out of memory queueing the completion of task %llu of graph %llu; "
                     "it will not be reported", (unsigned long long)task,
                     (unsigned long long)graph);
        gs_free(err);
        return;
    }
    if (w->d_task.len == 0) w->d_first_ns = gs_now_ns();
    w->d_graph.data[w->d_graph.len++] = graph;
    w->d_task.data[w->d_task.len++] = task;
    w->d_status.data[w->d_status.len++] = (int32_t)status;
    w->d_nbytes.data[w->d_nbytes.len++] = nbytes;
    w->d_run.data[w->d_run.len++] = run_ns;
    w->d_fetch.data[w->d_fetch.len++] = fetch_ns;
    if (start_ns == 0) start_ns = gs_now_ns();   /* never ran: a point at the report */
    w->d_start.data[w->d_start.len++] = start_ns;
    w->d_end.data[w->d_end.len++] = start_ns + run_ns;
    if (status != GS_OK) {
        w->d_err.data[w->d_err.len++] = err;
        w->st.tasks_failed++;
    } else {
        gs_free(err);
        w->st.tasks_done++;
    }
    if (w->d_task.len >= GS_W_DONE_FLUSH) gs__wexec_flush_done(w);
}

void gs__wexec_flush_done_due(gs_worker_t *w)
{
    if (w->d_task.len == 0) return;
    if (w->d_task.len >= GS_W_DONE_BATCH || gs_now_ns() - w->d_first_ns >= GS_W_DONE_DELAY_NS)
        gs__wexec_flush_done(w);
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
    m.u.task_done.now_ns = gs_now_ns();
    m.u.task_done.start_ns = w->d_start.data;
    m.u.task_done.end_ns = w->d_end.data;
    gs__wsend_msg(w, &m);
    gs_free(errs);
reset:
    for (i = 0; i < w->d_err.len; i++) gs_free(w->d_err.data[i]);
    w->d_graph.len = w->d_task.len = w->d_status.len = w->d_nbytes.len = 0;
    w->d_run.len = w->d_fetch.len = w->d_err.len = 0;
    w->d_start.len = w->d_end.len = 0;
}

/* ---------------------------------------------------------------- task lifetime */

/* Take @a t off @a c's waiters (once: a task listing an input twice waits on it twice). */
static void gs__wchunk_unwait(gs_wchunk_t *c, const gs_wtask_t *t)
{
    if (!gs__wchunk_waiting(c)) return;
    for (size_t k = 0; k < c->waiters.len; k++) {
        if (c->waiters.data[k] == t) {
            c->waiters.data[k] = c->waiters.data[--c->waiters.len];
            break;
        }
    }
}

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
        if (t->ndeps > 0) {
            w->nadmitted_consumers--;
            /* the clock only where an admission may come to wait for gsched's releases */
            if (w->spill_defer_since || w->mem_used > w->mem_limit / 2)
                w->t_consumer_done = gs_now_ns();
            if (w->spill_defer_since) w->admit_epoch++;   /* the wait is re-judged */
        }
    }
    for (i = 0; i < t->ndeps; i++) {
        gs_wchunk_t *c = t->deps[i].chunk;
        if (c == NULL) continue;
        gs__wchunk_unwait(c, t);
        t->deps[i].chunk = NULL;
        gs__wchunk_unref(w, c);
    }
    if (t->out) {
        gs__wchunk_unref(w, t->out);
        t->out = NULL;
    }
    if (g) (void)gs_idtab_del_if(&g->tasks, t->id, t);
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

static char *gs__wtask_msg(const gs_wtask_t *t, uint64_t graph, const char *fmt, ...)
{
    va_list ap;
    char *msg;
    va_start(ap, fmt);
    msg = gs__wtask_msgv(t, graph, fmt, ap);
    va_end(ap);
    return msg;
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
    gs__wdone_push(w, graph, t->id, status, 0, t->run_ns, t->fetch_ns, t->t_launch, msg);
    gs__wtask_release(w, t);
}

/* ---------------------------------------------------------------- admission */

/* @a now: the clock, or 0 to read it (a task ready within its admission passes its t_admit: one
 * clock read less per tiny task) */
static void gs__wtask_become_ready(gs_worker_t *w, gs_wtask_t *t, uint64_t now)
{
    t->state = GS_WTASK_READY;
    t->t_ready = now != 0 ? now : gs_now_ns();
    t->fetch_ns = t->t_ready - t->t_admit;
    gs__wlist_push(&w->ready_q, &t->link);
}

/* Undo a partial admission of @a t (its first @a ndone inputs referenced, its output
 * allocated): back to its place after @a qprev in the admission queue. */
static void gs__wtask_unadmit(gs_worker_t *w, gs_wtask_t *t, uint32_t ndone, gs_wlink_t *qprev)
{
    for (uint32_t k = 0; k < ndone; k++) {
        gs_wchunk_t *h = t->deps[k].chunk;
        if (h == NULL) continue;
        gs__wchunk_unwait(h, t);
        t->deps[k].chunk = NULL;
        gs__wchunk_unref(w, h);
    }
    t->nwait = 0;
    gs__wchunk_unref(w, t->out);
    t->out = NULL;
    w->nadmitted--;
    if (t->ndeps > 0) w->nadmitted_consumers--;
    w->nqueued++;
    t->state = GS_WTASK_QUEUED;
    t->link.next = qprev->next;
    t->link.prev = qprev;
    qprev->next->prev = &t->link;
    qprev->next = &t->link;
}

/* The bytes of @a t's inputs stored here but on disk (each key once, those already being
 * read back not counted): they need memory at admission. */
static uint64_t gs__wtask_unspill_bytes(gs_worker_t *w, const gs_wtask_t *t)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < t->ndeps; i++) {
        const gs_wdep_t *d = &t->deps[i];
        gs_wchunk_t *c = gs__wstore_find(w, d->graph, d->task);
        uint32_t k;
        if (c == NULL || c->state != GS_WCHUNK_READY || gs__wchunk_resident(c) ||
            c->sp.io == GS_WSPILL_IO_READ)
            continue;
        for (k = 0; k < i; k++)
            if (t->deps[k].graph == d->graph && t->deps[k].task == d->task) break;
        if (k == i) bytes += c->nbytes;
    }
    return bytes;
}

static void gs__wexec_defer_cb(uv_timer_t *h)
{
    gs_worker_t *w = h->data;
    w->admit_epoch++;
    gs__wexec_pump(w);
}

/* 1 when the blocked head should wait instead of spilling (GS_W_RELEASE_GRACE_NS): admitted
 * tasks with inputs, or one that completed a moment ago, may let gsched release memory. A
 * spill started while the data would fit anyway costs the device→host copy and, when the chunk
 * is needed again, the copy back (a tall SVD near the device limit: 0.29 s became 1.8–7.9 s). */
static int gs__wtask_spill_defer(gs_worker_t *w)
{
    uint64_t now;
    if (w->spill == NULL || w->spill_defer_misses >= GS_W_DEFER_MISSES) return 0;
    if (w->spill_defer_since == 0 && gs__wspill_busy(w)) return 0;   /* spilling already */
    now = gs_now_ns();
    if (w->spill_defer_since == 0) w->spill_defer_since = now;
    if (now - w->spill_defer_since < GS_W_DEFER_MAX_NS) {
        if (w->nadmitted_consumers > 0) {
            /* re-judged when one of them ends (admit_epoch), at the latest at the wait's end */
            uint64_t left = GS_W_DEFER_MAX_NS - (now - w->spill_defer_since);
            if (!uv_is_active((uv_handle_t *)&w->defer_timer))
                uv_timer_start(&w->defer_timer, gs__wexec_defer_cb, left / 1000000u + 1u, 0);
            return 1;
        }
        if (now - w->t_consumer_done < GS_W_RELEASE_GRACE_NS) {
            uint64_t left = GS_W_RELEASE_GRACE_NS - (now - w->t_consumer_done);
            uv_timer_start(&w->defer_timer, gs__wexec_defer_cb, left / 1000000u + 1u, 0);
            return 1;
        }
    }
    /* waiting did not free enough: spill (and wait less readily next time) */
    w->spill_defer_misses++;
    w->spill_defer_since = 0;
    return 0;
}

/* GS_OK: admitted; GS_INPROGRESS: blocked on memory (nothing changed); otherwise the task has
 * been failed and released. @a head: the first task of the queue, for which memory is made
 * by moving stored chunks to disk. @a now_p: the admission pass's clock, read at the first
 * admission of the pass (0 until then), so a pass over many tiny tasks reads it once. */
static gs_status_t gs__wtask_admit(gs_worker_t *w, gs_wtask_t *t, int head, uint64_t *now_p)
{
    uint64_t need = t->out_nbytes, fetch_bytes = 0, unspill_bytes;
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
    unspill_bytes = gs__wtask_unspill_bytes(w, t);
    need += fetch_bytes;
    if (need >= fetch_bytes) need += unspill_bytes;
    if (need < fetch_bytes + unspill_bytes || need > w->mem_limit) {
        gs__wtask_fail(w, t, w->streams_mode ? GS_ERR_NO_DEVICE_MEMORY : GS_ERR_NO_MEMORY,
                       "worker %s: it needs %llu bytes at once in the %s memory tier (output "
                       "%llu, inputs to fetch %llu, inputs to bring back from the %s tier "
                       "%llu) but the memory limit is %llu bytes", w->name,
                       (unsigned long long)need, w->streams_mode ? "device" : "host",
                       (unsigned long long)t->out_nbytes, (unsigned long long)fetch_bytes,
                       gs__wspill_lower_name(w), (unsigned long long)unspill_bytes,
                       (unsigned long long)w->mem_limit);
        return GS_ERR_NO_MEMORY;
    }
    {
        /* Tasks without inputs (generators) may fill only the pause fraction of the memory
         * (spill.h): the rest stays for tasks that consume stored chunks, whose completion
         * lets gsched release memory. Without this reserve a deep queue of generators can fill
         * the memory with chunks whose consumers then never fit. Lifted (reserve_off) when
         * nothing else can make progress. */
        uint64_t cap = w->mem_limit;
        if (t->ndeps == 0 && !w->reserve_off) cap = gs__wspill_pause_cap(w);
        if (need > cap || w->mem_used > cap - need) {
            if (!head || gs__wtask_spill_defer(w)) return GS_INPROGRESS;
            status = gs__wspill_make_room(w, need, cap);
            if (status == GS_OK) {
                /* room made at once (chunks already on disk left memory) */
            } else if ((status != GS_ERR_NO_RESOURCE && status != GS_ERR_IO) || w->nrunning ||
                       gs__xfer_busy(w) || gs__wspill_busy(w)) {
                /* in progress, or something else may still free memory (the watchdog
                 * fails the task when nothing does) */
                return GS_INPROGRESS;
            } else {
                char why[GS_W_ERRLEN];
                snprintf(why, sizeof(why), "%s", gs_last_error());
                gs__wtask_fail(w, t, status, "cannot get %llu bytes of memory for it: %s",
                               (unsigned long long)need, why);
                return status;
            }
        }
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
    if (t->ndeps > 0) w->nadmitted_consumers++;
    t->state = GS_WTASK_FETCHING;
    if (*now_p == 0) *now_p = gs_now_ns();
    t->t_admit = *now_p;
    for (i = 0; i < t->ndeps; i++) {
        gs_wdep_t *d = &t->deps[i];
        gs_wchunk_t *c = gs__wstore_find(w, d->graph, d->task);
        if (c != NULL && c->state == GS_WCHUNK_FAILED) c = NULL;
        if (c != NULL) {
            gs__wchunk_ref(c);
            gs__wspill_touch(w, c);
            if (c->state == GS_WCHUNK_READY && !gs__wchunk_resident(c) &&
                c->sp.io == GS_WSPILL_IO_NONE) {
                status = gs__wspill_load(w, c);
                if (status != GS_OK) {
                    gs__wchunk_unref(w, c);
                    if (status == GS_ERR_NO_MEMORY || status == GS_ERR_NO_DEVICE_MEMORY) {
                        gs__wtask_unadmit(w, t, i, qprev);   /* backend refused: wait */
                        return GS_INPROGRESS;
                    }
                    gs__wtask_fail(w, t, status, "bringing input (%llu, %llu) back from the "
                                   "%s tier: %s", (unsigned long long)d->graph,
                                   (unsigned long long)d->task, gs__wspill_lower_name(w),
                                   gs_last_error());
                    return status;
                }
            }
        } else {
            status = gs__xfer_fetch(w, d->graph, d->task, d->worker, d->nbytes, &c);
            if (status == GS_ERR_NO_MEMORY || status == GS_ERR_NO_DEVICE_MEMORY) {
                /* backend refused despite our accounting: undo and wait */
                gs__wtask_unadmit(w, t, i, qprev);
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
        if (gs__wchunk_waiting(c)) {
            if (GS_VEC_PUSH(&c->waiters, t) != GS_OK) {
                gs__wtask_fail(w, t, GS_ERR_NO_MEMORY, "out of memory waiting for an input");
                return GS_ERR_NO_MEMORY;
            }
            t->nwait++;
        }
    }
    if (t->nwait == 0) gs__wtask_become_ready(w, t, t->t_admit);   /* inputs here: no fetch time */
    return GS_OK;
}

void gs__wexec_input_ready(gs_worker_t *w, gs_wchunk_t *c)
{
    /* c went PENDING -> READY or FAILED: wake (or fail) its waiters */
    while (c->waiters.len) {
        gs_wtask_t *t = c->waiters.data[--c->waiters.len];
        if (c->state == GS_WCHUNK_READY && gs__wchunk_resident(c)) {
            gs_assert(t->nwait > 0);
            if (--t->nwait == 0 && t->state == GS_WTASK_FETCHING) gs__wtask_become_ready(w, t, 0);
        }
    }
}

void gs__wexec_input_failed(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, const char *why,
                            int damaged)
{
    gs__wchunk_ref(c);                 /* failing waiters may drop their references */
    while (c->waiters.len) {
        gs_wtask_t *t = c->waiters.data[--c->waiters.len];
        /* a task listing this input twice waits on it twice: fail it once */
        for (size_t k = 0; k < c->waiters.len;) {
            if (c->waiters.data[k] == t) c->waiters.data[k] = c->waiters.data[--c->waiters.len];
            else k++;
        }
        if (damaged && t->state == GS_WTASK_FETCHING && t->refetches < GS_W_MAX_REFETCHES &&
            w->state == GS_WSTATE_RUNNING) {
            /* the chunk left the map (not owned) or is FAILED: admission fetches it anew */
            t->refetches++;
            w->st.refetches++;
            GS_LOG_WARN("task %llu of graph %llu: input (%llu, %llu): %s; fetching it again "
                        "(%u of %u)", (unsigned long long)t->id,
                        (unsigned long long)t->graph->id, (unsigned long long)c->graph->id,
                        (unsigned long long)c->task, why, (unsigned)t->refetches,
                        (unsigned)GS_W_MAX_REFETCHES);
            gs__wtask_unadmit(w, t, t->ndeps, &w->admit_q);
            w->admit_epoch++;
            continue;
        }
        gs__wtask_fail(w, t, status, "fetching input (%llu, %llu): %s",
                       (unsigned long long)c->graph->id, (unsigned long long)c->task, why);
    }
    gs__wchunk_unref(w, c);
}

static void gs__wexec_dispatch(gs_worker_t *w)
{
    uint64_t wr = w->job_wr, n = 0;   /* job_wr: written by this thread only */

    while (!gs__wlist_empty(&w->ready_q) && w->nrunning < (uint64_t)w->small_slots) {
        gs_wtask_t *t = GS_WCONTAINER(w->ready_q.next, gs_wtask_t, link);
        if (!t->small && w->nrunning >= (uint64_t)w->slots) break;   /* FIFO: no overtaking */
        __builtin_prefetch(t->link.next);   /* the next ready task, likely cold */
        gs__wlist_del(&t->link);
        t->state = GS_WTASK_RUNNING;
        w->nrunning++;
        if (w->streams_mode) {
            gs__wtask_launch_stream(w, t);
        } else {
            /* slots past job_wr are no thread's until published: nrunning (which counts every
             * task in the ring) stays under small_slots <= the ring's size */
            w->job_ring[(wr + n) & w->job_mask] = (uintptr_t)t | (t->small ? GS_W_JOB_SMALL : 0);
            n++;
        }
    }
    if (n) {
        uv_mutex_lock(&w->job_lock);
        w->job_wr = wr + n;
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
    uint64_t now = 0, npass = 0;

    if (w->state != GS_WSTATE_RUNNING || w->dev_lost) return;
    gs__wspill_maybe(w);
    /* blocked on memory and nothing freed or queued since the last scan: nothing to try */
    if (w->mem_blocked_since && w->blocked_epoch == w->admit_epoch) goto dispatch;
    e = w->admit_q.next;
    while (e != &w->admit_q && w->nadmitted < w->max_admitted_small) {
        gs_wtask_t *t = GS_WCONTAINER(e, gs_wtask_t, link);
        gs_wlink_t *next = e->next;   /* admitting or failing t touches no other queued task */
        __builtin_prefetch(next);     /* queued tasks are cold: load the next one meanwhile */
        if (!t->small && w->nadmitted >= w->max_admitted) break;
        /* pool mode: hand the tasks made ready so far to the threads every GS_W_PUMP_BATCH
         * tasks, while they are still in cache (and the threads start sooner); dispatch
         * touches only the ready queue and the job ring */
        if (++npass % GS_W_PUMP_BATCH == 0 && !w->streams_mode) gs__wexec_dispatch(w);
        if (gs__wtask_admit(w, t, head, &now) == GS_INPROGRESS) {
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
        if (w->spill_defer_since) {    /* the wait paid off: memory came back without a spill */
            w->spill_defer_since = 0;
            w->spill_defer_misses = 0;
            w->st.spill_waits++;
            uv_timer_stop(&w->defer_timer);
        }
        w->mem_blocked_since = 0;      /* the head was admitted (or the window is full) */
        w->mem_blocked_task = NULL;
        w->reserve_off = 0;
    } else {
        w->blocked_epoch = w->admit_epoch;
    }
    /* inputs of the tasks still queued come up from the lower tier meanwhile (not while
     * admission waits for memory: what they took, it would move down again) */
    if (!w->mem_blocked_since) gs__wspill_prefetch(w);
dispatch:
    gs__wexec_dispatch(w);
}

/* ---------------------------------------------------------------- completion */

/* Whether @a t runs a user's kernel (map_blocks, map_overlap). */
static int gs__wtask_is_user(const gs_wtask_t *t)
{
    return t->layer != NULL && gs_layer_kernel_name(t->layer) != gs_layer_name(t->layer);
}

/* A running task with a user's kernel, or NULL. A sticky CUDA error reaches every stream's
 * completions, in no particular order: the user kernel in flight is the likelier culprit. */
static gs_wtask_t *gs__wtask_running_user(gs_worker_t *w)
{
    const gs_u64map_t *gm = &w->graphs;
    for (size_t i = 0; i < gm->cap; i++) {
        const gs_wgraph_t *g;
        if (gm->keys[i] >= GS_U64MAP_TOMB) continue;
        g = (const gs_wgraph_t *)(uintptr_t)gm->vals[i];
        gs_idtab_iter_t it = GS_IDTAB_ITER_INIT;
        void *p;
        while (gs_idtab_next(&g->tasks, &it, NULL, &p)) {
            gs_wtask_t *t = p;
            if (t->state == GS_WTASK_RUNNING && !t->canceled && gs__wtask_is_user(t)) return t;
        }
    }
    return NULL;
}

/* The first task to report GS_ERR_DEVICE_LOST (worker.h "Device loss"): fail it -- or, when
 * it is a built-in kernel and a user's kernel is still running, that one -- with the kernel and
 * the backend's cause, tell gsched the worker is leaving, and stop from the loop's async
 * callback (not from inside this completion, which may be one of a batch being drained). */
static void gs__wtask_device_lost(gs_worker_t *w, gs_wtask_t *t)
{
    char cause[GS_W_ERRLEN], text[GS_W_ERRLEN + 128];
    gs_wtask_t *blame = t;
    gs_msg_t m;
    if (!gs__wtask_is_user(t) && (blame = gs__wtask_running_user(w)) == NULL) blame = t;
    if (w->ops->health != NULL && w->ops->health(w->ctx) == GS_ERR_DEVICE_LOST)
        snprintf(cause, sizeof(cause), "%s", gs_last_error());
    else
        snprintf(cause, sizeof(cause), "%s", t->err ? t->err : gs_status_string(GS_ERR_DEVICE_LOST));
    w->dev_lost = 1;
    snprintf(text, sizeof(text), "kernel %s lost the device: %s", gs_layer_kernel_name(blame->layer), cause);
    GS_LOG_ERROR("worker %s: %s (task %llu of graph %llu); leaving the cluster, exit status %d "
                 "asks the launcher for a restart", w->name, text, (unsigned long long)blame->id,
                 (unsigned long long)(blame->graph ? blame->graph->id : 0),
                 GS_WORKER_EXIT_DEVICE_LOST);
    if (blame == t) {
        gs__wtask_fail(w, t, GS_ERR_DEVICE_LOST, "%s", text);
    } else {
        /* the running one is reported now and released when its completion comes (dropped,
         * as everything after the loss); this one goes unreported, reassigned by gsched */
        uint64_t graph = blame->graph ? blame->graph->id : 0;
        gs__wdone_push(w, graph, blame->id, GS_ERR_DEVICE_LOST, 0, 0, blame->fetch_ns,
                       blame->t_launch, gs__wtask_msg(blame, graph, "%s", text));
        gs__wtask_release(w, t);
    }
    gs__wexec_flush_done(w);
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_ERROR;
    m.u.error.status = GS_ERR_DEVICE_LOST;
    m.u.error.message.data = (const uint8_t *)text;
    m.u.error.message.len = strlen(text);
    gs__wsend_msg(w, &m);
    uv_async_send(&w->async);
}

void gs__wtask_complete(gs_worker_t *w, gs_wtask_t *t, gs_status_t status,
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
        t->t_launch = start;   /* the task stream shows the device's busy interval */
        if (t_done > w->dev_last_done) w->dev_last_done = t_done;
        w->stream_inflight[t->stream]--;
        t->stream = -1;
    }
    /* after a device loss nothing more is reported: gsched reassigns what was here */
    if (t->canceled || w->state != GS_WSTATE_RUNNING || w->dev_lost) {
        gs__wtask_release(w, t);
        return;
    }
    if (status == GS_ERR_DEVICE_LOST) {
        gs__wtask_device_lost(w, t);
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
    gs__wdone_push(w, t->graph->id, t->id, GS_OK, t->out_nbytes, t->run_ns, t->fetch_ns, t->t_launch, NULL);
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
        if (next != NULL) {            /* written by a kernel thread: cold here; load meanwhile */
            __builtin_prefetch(next);
            __builtin_prefetch(&next->out);
        }
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
            gs__wlaunch_done(w, n);
            break;
        case GS_WNOTE_TIER:
            gs__wspill_note(w, n);
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
    if (w->nrunning || gs__xfer_busy(w) || gs__wspill_busy(w)) return;
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
                   "worker %s: cannot get memory for its output (%llu bytes) and inputs: "
                   "%llu of the %llu-byte memory limit (%s memory tier) are held by %llu "
                   "stored chunks%s and nothing running, fetching, spilling or released freed memory "
                   "for %u ms%s%s", w->name,
                   (unsigned long long)t->out_nbytes, (unsigned long long)w->mem_used,
                   (unsigned long long)w->mem_limit, w->streams_mode ? "device" : "host",
                   (unsigned long long)w->st.chunks,
                   w->mem_used + t->out_nbytes <= w->mem_limit
                       ? " (the backend could not place the output in the free memory: "
                         "fragmentation)" : "",
                   w->memory_wait_ms, gs__wspill_last_error(w)[0] ? "; last disk-tier "
                   "failure: " : "", gs__wspill_last_error(w));
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
        {
            /* the job ring: room for every task dispatch may have running (small_slots below) */
            uint64_t need = (uint64_t)w->nthreads * GS_W_SMALL_DEPTH, size = 64;
            if (need < (uint64_t)w->nthreads * 4) need = (uint64_t)w->nthreads * 4;
            while (size < need) size *= 2;
            w->job_ring = gs_calloc(size, sizeof(*w->job_ring), "worker job ring");
            if (w->job_ring == NULL)
                return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the job queue");
            w->job_mask = size - 1;
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
    while (w->job_rd != w->job_wr) {
        gs_wtask_t *t = (gs_wtask_t *)(w->job_ring[w->job_rd++ & w->job_mask] & ~GS_W_JOB_SMALL);
        t->status = GS_ERR_CANCELED;
        uv_mutex_lock(&w->done_lock);
        t->job_next = NULL;
        if (w->done_tail) w->done_tail->job_next = t;
        else w->done_head = t;
        w->done_tail = t;
        uv_mutex_unlock(&w->done_lock);
    }
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
        /* one pass: releasing deletes and never inserts into this table; graphs freed
         * meanwhile only turn later slots of w->graphs into tombstones */
        {
            gs_idtab_iter_t it = GS_IDTAB_ITER_INIT;
            void *p;
            while (gs_idtab_next(&g->tasks, &it, NULL, &p)) gs__wtask_release(w, p);
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
    gs_free(w->job_ring);
    w->job_ring = NULL;
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
    GS_VEC_FREE(&w->d_start);
    GS_VEC_FREE(&w->d_end);
    GS_VEC_FREE(&w->d_err);
    for (i = 0; i < w->task_slabs.len; i++) gs_free(w->task_slabs.data[i]);
    GS_VEC_FREE(&w->task_slabs);
    GS_VEC_FREE(&w->task_free);
}
