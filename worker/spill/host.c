/* worker/spill: the host tier of a streams-mode worker (spill.h, "Host tier"): chunks copied
 * from the backend's (device) memory to host memory and back with ops->to_host / to_device on
 * a stream of the tier's own. Each copy is a job whose note (GS_WNOTE_TIER) comes back through
 * the worker's completion queue once the stream has finished it; the job holds a reference of
 * its chunk and keeps the worker's stop waiting (nhandles_open) until then. */
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
    uint64_t t0;
} gs_wtier_job_t;

gs_status_t gs__wspill_host_init(gs_worker_t *w, const gs_worker_params_t *p)
{
    struct gs_wspill *sp = w->spill;
    uint64_t lim = p->host_limit;
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
    st = w->ops->stream_create(w->ctx, &sp->stream);
    if (st != GS_OK) {
        sp->stream = NULL;
        return st;
    }
    sp->host_tier = 1;
    sp->host_limit = lim;
    w->st.host_limit = lim;
    return GS_OK;
}

void gs__wspill_host_cleanup(gs_worker_t *w)
{
    struct gs_wspill *sp = w->spill;
    if (sp->stream != NULL) w->ops->stream_destroy(w->ctx, sp->stream);   /* waits for it */
    sp->stream = NULL;
}

static gs_status_t gs__wtier_start(gs_worker_t *w, gs_wchunk_t *c, int down, void *host)
{
    struct gs_wspill *sp = w->spill;
    gs_wtier_job_t *j = gs_calloc(1, sizeof(*j), "host tier job");
    gs_status_t st;

    if (j == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "worker %s: out of memory for a host-tier copy",
                            w->name);
    j->c = c;
    j->down = down;
    j->host = host;
    j->t0 = gs_now_ns();
    st = down ? w->ops->to_host(w->ctx, sp->stream, host, c->ptr, (size_t)c->nbytes)
              : w->ops->to_device(w->ctx, sp->stream, c->ptr, c->sp.host, (size_t)c->nbytes);
    if (st != GS_OK) {
        char why[GS_W_ERRLEN];
        snprintf(why, sizeof(why), "%s", gs_last_error());
        /* part of it may be enqueued: let the stream finish before the buffers go (rare) */
        (void)w->ops->sync(w->ctx, sp->stream);
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
    gs__wnote_arm(w, sp->stream, &j->note);
    return GS_OK;
}

gs_status_t gs__wspill_host_write(gs_worker_t *w, gs_wchunk_t *c)
{
    struct gs_wspill *sp = w->spill;
    void *host = gs_malloc((size_t)c->nbytes, "host tier copy");
    gs_status_t st;

    if (host == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "worker %s: host tier: no host memory for a "
                            "%llu-byte copy (%llu of %llu bytes of the tier in use)", w->name,
                            (unsigned long long)c->nbytes, (unsigned long long)w->st.host_used,
                            (unsigned long long)sp->host_limit);
    if ((st = gs__wtier_start(w, c, 1, host)) != GS_OK) {
        gs_free(host);
        return st;
    }
    c->sp.io = GS_WSPILL_IO_WRITE;
    sp->writing += c->nbytes;
    sp->nwrites++;
    return GS_OK;
}

gs_status_t gs__wspill_host_load(gs_worker_t *w, gs_wchunk_t *c)
{
    return gs__wtier_start(w, c, 0, NULL);
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
            w->st.host_used += c->nbytes;
            w->st.host_spilled_bytes += c->nbytes;
            w->st.host_spilled_ns += ns;
            w->st.host_spills++;
        } else {
            gs_free(j->host);
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
