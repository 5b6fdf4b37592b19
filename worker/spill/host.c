/* worker/spill: the host tier of a streams-mode worker (spill.h, "Host tier"): chunks copied
 * from the backend's (device) memory to host memory and back, on streams of the tier's own
 * (one per direction, so spills and loads overlap on the two copy engines, and a third for
 * pageable copies). A host copy is a
 * piece of the host pool (hpool.c: page-locked, recycled), so each move is ONE copy_to_host /
 * copy_from_host (a cudaMemcpyAsync at full bus speed, no staging); while the pool has no free
 * piece (its growers are still page-locking), the copy is pageable memory moved with
 * ops->to_host / to_device (staged by the backend, slower). Each copy is a job whose note
 * (GS_WNOTE_TIER) comes back through the worker's completion queue once its stream has
 * finished it; the job holds a reference of its chunk and keeps the worker's stop waiting
 * (nhandles_open) until then. */
#include "worker/spill/spill_int.h"

#include "common/sysmem.h"
#include "common/time.h"

#include <stdio.h>
#include <string.h>

typedef struct gs_wtier_job {
    gs_wnote_t note;           /* first: the drain hands the note back */
    gs_wchunk_t *c;            /* referenced */
    int down;                  /* 1: device -> host (write), 0: host -> device (load) */
    void *host;                /* write: the new host copy (owned until it succeeds) */
    int pooled;                /* write: host is a pool piece */
    uint64_t t0;
} gs_wtier_job_t;

gs_status_t gs__wspill_host_init(gs_worker_t *w, const gs_worker_params_t *p)
{
    struct gs_wspill *sp = w->spill;
    uint64_t lim = p->host_limit, ahead;
    gs_status_t st;

    gs_sysmem_t mem;

    (void)gs_sysmem_query(NULL, &mem);
    if (lim == 0 && strcmp(w->ops->name, "cpu") != 0) lim = p->memory_limit;
    if (lim == 0) {
        lim = gs_sysmem_share(&mem, p->memory_share);
    } else if (lim > mem.total) {
        /* as for the memory limit: a tier the machine cannot hold would end in the OOM killer */
        GS_LOG_WARN("worker %s: host tier limit %.2f GB is more than the %.2f GB this process "
                    "may use (%s): using %.2f GB", w->name, (double)lim / 1e9,
                    (double)mem.total / 1e9, mem.source, (double)mem.total / 1e9);
        lim = mem.total;
    }
    if ((st = w->ops->stream_create(w->ctx, &sp->down)) != GS_OK) goto err;
    if ((st = w->ops->stream_create(w->ctx, &sp->up)) != GS_OK) goto err_down;
    if ((st = w->ops->stream_create(w->ctx, &sp->staged)) != GS_OK) goto err_up;
    /* the pool keeps a quarter of the device limit (at most 4 GiB) ahead of demand */
    ahead = w->mem_limit / 4;
    if (ahead > ((uint64_t)4 << 30)) ahead = (uint64_t)4 << 30;
    if ((st = gs__whpool_create(w, lim, ahead, &sp->pool)) != GS_OK) goto err_staged;
    sp->host_tier = 1;
    sp->host_limit = lim;
    w->st.host_limit = lim;
    return GS_OK;

err_staged:
    w->ops->stream_destroy(w->ctx, sp->staged);
err_up:
    w->ops->stream_destroy(w->ctx, sp->up);
err_down:
    w->ops->stream_destroy(w->ctx, sp->down);
err:
    sp->down = sp->up = sp->staged = NULL;
    sp->pool = NULL;
    return st;
}

void gs__wspill_host_cleanup(gs_worker_t *w)
{
    struct gs_wspill *sp = w->spill;
    uint64_t total, nfree, ns;
    int capped;
    if (sp->pool != NULL && sp->pageable_copies > 0) {
        /* a performance problem worth a line in every run's log: copies that missed the pool */
        gs__whpool_stats(sp->pool, &total, &nfree, &ns, &capped);
        GS_LOG_WARN("worker %s: host tier: %llu of %llu spills (%.3f GB) were pageable, staged "
                    "(the pool had no free piece%s); the pool page-locked %.3f GB in %.3f thread-s",
                    w->name, (unsigned long long)sp->pageable_copies,
                    (unsigned long long)w->st.host_spills,
                    (double)sp->pageable_bytes / 1e9,
                    capped ? ": page-locking failed" : ": its threads were behind",
                    (double)total / 1e9, (double)ns / 1e9);
    }
    /* streams first (destroy waits for their copies), then the pool's slabs */
    if (sp->down != NULL) w->ops->stream_destroy(w->ctx, sp->down);
    if (sp->up != NULL) w->ops->stream_destroy(w->ctx, sp->up);
    if (sp->staged != NULL) w->ops->stream_destroy(w->ctx, sp->staged);
    sp->down = sp->up = sp->staged = NULL;
    gs__whpool_destroy(sp->pool);
    sp->pool = NULL;
}

void gs__wspill_host_release(gs_worker_t *w, gs_wchunk_t *c)
{
    if (c->sp.in_hlru) {
        c->sp.hprev->hnext = c->sp.hnext;
        c->sp.hnext->hprev = c->sp.hprev;
        c->sp.hprev = c->sp.hnext = NULL;
        c->sp.in_hlru = 0;
    }
    gs_assert(c->sp.host_pooled || w->spill->pageable >= c->nbytes);
    gs__wspill_host_free(w, c->sp.host, c->sp.host_pooled, c->nbytes);
    c->sp.host = NULL;
    c->sp.host_pooled = 0;
}

void gs__wspill_host_hint(gs_worker_t *w, const gs_wchunk_t *c)
{
    if (w->spill->pool != NULL) gs__whpool_hint(w->spill->pool, c->nbytes);
}

void gs__wspill_host_stats(const gs_worker_t *w, gs_worker_stats_t *st)
{
    uint64_t total, nfree, ns;
    int capped;
    if (w->spill == NULL || w->spill->pool == NULL) return;
    gs__whpool_stats(w->spill->pool, &total, &nfree, &ns, &capped);
    st->host_pool_bytes = total;
    st->host_pool_free = nfree;
    st->host_pool_ns = ns;
    st->host_pageable = w->spill->pageable;
}

static gs_status_t gs__wtier_start(gs_worker_t *w, gs_wchunk_t *c, int down, void *host,
                                   int pooled)
{
    struct gs_wspill *sp = w->spill;
    /* pageable copies go through the backend's staging on a stream of their own, so that
     * they never hold up the DMA of page-locked ones */
    gs_chunkops_stream_h s = !(down ? pooled : c->sp.host_pooled) ? sp->staged
                             : down                               ? sp->down
                                                                  : sp->up;
    gs_wtier_job_t *j = gs_calloc(1, sizeof(*j), "host tier job");
    gs_status_t st;

    if (j == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "worker %s: out of memory for a host-tier copy",
                            w->name);
    j->c = c;
    j->down = down;
    j->host = host;
    j->pooled = pooled;
    j->t0 = gs_now_ns();
    /* page-locked: one DMA straight into / out of the host copy; pageable: staged */
    if (down)
        st = pooled ? w->ops->copy_to_host(w->ctx, s, host, c->ptr, (size_t)c->nbytes)
                    : w->ops->to_host(w->ctx, s, host, c->ptr, (size_t)c->nbytes);
    else
        st = c->sp.host_pooled
                 ? w->ops->copy_from_host(w->ctx, s, c->ptr, c->sp.host, (size_t)c->nbytes)
                 : w->ops->to_device(w->ctx, s, c->ptr, c->sp.host, (size_t)c->nbytes);
    if (st != GS_OK) {
        char why[GS_W_ERRLEN];
        snprintf(why, sizeof(why), "%s", gs_last_error());
        /* part of it may be enqueued: let the stream finish before the buffers go (rare) */
        (void)w->ops->sync(w->ctx, s);
        gs_free(j);
        return gs_error_set(st, "worker %s: host tier: copying %llu bytes %s: %s", w->name,
                            (unsigned long long)c->nbytes,
                            down ? "from the device" : "back to the device", why);
    }
    gs__wchunk_ref(c);
    sp->nio++;
    gs__worker_hold(w);
    j->note.kind = GS_WNOTE_TIER;
    j->note.obj = j;
    gs__wnote_arm(w, s, &j->note);
    return GS_OK;
}

void gs__wspill_host_free(gs_worker_t *w, void *host, int pooled, uint64_t nbytes)
{
    struct gs_wspill *sp = w->spill;
    if (pooled) {
        gs__whpool_give(sp->pool, host, nbytes);
    } else {
        sp->pageable -= nbytes;
        gs__whpool_set_pageable(sp->pool, sp->pageable);
        gs_free(host);
    }
}

void *gs__wspill_host_alloc(gs_worker_t *w, uint64_t nbytes, int *pooled_p)
{
    struct gs_wspill *sp = w->spill;
    void *host = gs__whpool_take(sp->pool, nbytes);
    uint64_t total, nfree, ns;
    int capped;

    *pooled_p = host != NULL;
    if (host != NULL) return host;
    /* no free piece yet (the growers are page-locking more) or the pool is at its limit:
     * a pageable copy (the caller checked the tier's limit: host copies and writes in
     * flight; the pool grows only into what pageable copies leave) */
    gs__whpool_stats(sp->pool, &total, &nfree, &ns, &capped);
    if (capped && !sp->pool_warned) {
        sp->pool_warned = 1;
        GS_LOG_WARN("worker %s: host tier: no more page-locked memory after %llu bytes; "
                    "further host copies are pageable (slower)", w->name,
                    (unsigned long long)total);
    }
    if ((host = gs_malloc((size_t)nbytes, "host tier copy")) == NULL) {
        gs_error_set(GS_ERR_NO_MEMORY, "worker %s: host tier: no host memory for a "
                     "%llu-byte copy (%llu of %llu bytes of the tier in use)",
                     w->name, (unsigned long long)nbytes,
                     (unsigned long long)w->st.host_used, (unsigned long long)sp->host_limit);
        return NULL;
    }
    sp->pageable += nbytes;
    sp->pageable_copies++;
    sp->pageable_bytes += nbytes;
    gs__whpool_set_pageable(sp->pool, sp->pageable);
    return host;
}

gs_status_t gs__wspill_host_write(gs_worker_t *w, gs_wchunk_t *c)
{
    struct gs_wspill *sp = w->spill;
    int pooled;
    void *host = gs__wspill_host_alloc(w, c->nbytes, &pooled);
    gs_status_t st;

    if (host == NULL) return GS_ERR_NO_MEMORY;
    if ((st = gs__wtier_start(w, c, 1, host, pooled)) != GS_OK) {
        gs__wspill_host_free(w, host, pooled, c->nbytes);
        return st;
    }
    c->sp.io = GS_WSPILL_IO_WRITE;
    sp->writing += c->nbytes;
    sp->nwrites++;
    return GS_OK;
}

gs_status_t gs__wspill_host_load(gs_worker_t *w, gs_wchunk_t *c)
{
    return gs__wtier_start(w, c, 0, NULL, 0);
}

void gs__wspill_note(gs_worker_t *w, gs_wnote_t *n)
{
    gs_wtier_job_t *j = n->obj;
    gs_wchunk_t *c = j->c;
    gs_status_t status = n->status;
    uint64_t ns = n->t_done > j->t0 ? n->t_done - j->t0 : 0;

    w->spill->nio--;
    if (status != GS_OK)
        gs_error_set(status, "worker %s: host tier: copying chunk (%llu, %llu) of %llu bytes %s "
                     "failed: %s", w->name, (unsigned long long)c->graph->id,
                     (unsigned long long)c->task, (unsigned long long)c->nbytes,
                     j->down ? "from the device" : "back to the device",
                     gs_status_string(status));
    if (j->down) {
        if (status == GS_OK) {
            c->sp.host = j->host;
            c->sp.host_pooled = (uint8_t)j->pooled;
            w->st.host_used += c->nbytes;
            w->st.host_spilled_bytes += c->nbytes;
            w->st.host_spilled_ns += ns;
            w->st.host_spills++;
            gs__wspill_hlru_add(w, c);
        } else {
            gs__wspill_host_free(w, j->host, j->pooled, c->nbytes);
        }
        gs__wspill_written(w, c, status, ns);
    } else {
        if (status == GS_OK) {
            w->st.host_unspilled_bytes += c->nbytes;
            w->st.host_unspilled_ns += ns;
            w->st.host_unspills++;
        }
        gs__wspill_loaded(w, c, status, ns);
    }
    gs__wchunk_unref(w, c);
    gs_free(j);
    if (w->state == GS_WSTATE_RUNNING) gs__wexec_pump(w);
    gs__worker_unhold(w);      /* last: ending a stop may destroy the worker (stop_cb) */
}
