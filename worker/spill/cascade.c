/* worker/spill: the disk below the host tier of a streams-mode worker (spill.h, "Disk below
 * the host tier"): the LRU of chunks with a host copy, the policy writing those copies to
 * files when the host tier is full, and loads of such chunks back through a new host copy.
 * File operations are disk.c's (thread pool); host copies are host.c's. Loop thread only. */
#include "worker/spill/spill_int.h"

#include <stdio.h>

#define GS_WSPILL_HCHUNK(e) GS_WCONTAINER(e, gs_wchunk_t, sp)

void gs__wspill_hlru_add(gs_worker_t *w, gs_wchunk_t *c)
{
    struct gs_wspill *sp = w->spill;
    if (sp->dir == NULL || c->sp.in_hlru) return;
    c->sp.hprev = sp->hlru.hprev;
    c->sp.hnext = &sp->hlru;
    sp->hlru.hprev->hnext = &c->sp;
    sp->hlru.hprev = &c->sp;
    c->sp.in_hlru = 1;
}

void gs__wspill_host_drop(gs_worker_t *w, gs_wchunk_t *c)
{
    gs_assert(c->sp.host != NULL && c->sp.io == GS_WSPILL_IO_NONE && !c->sp.hio);
    gs__wspill_host_release(w, c);
    gs_assert(w->st.host_used >= c->nbytes);
    w->st.host_used -= c->nbytes;
    w->spill->full = 0;                 /* room on the host tier again */
    if (c->sp.tier == GS_WTIER_HOST) c->sp.tier = GS_WTIER_DISK;   /* its file is its data */
}

/* Bytes the host tier holds or will hold, less those on their way to files. */
static uint64_t gs__wspill_host_load_now(const gs_worker_t *w)
{
    const struct gs_wspill *sp = w->spill;
    return w->st.host_used + sp->writing - sp->hwriting;
}

gs_status_t gs__wspill_cascade(gs_worker_t *w, uint64_t need, uint64_t cap)
{
    struct gs_wspill *sp = w->spill;
    gs_wspill_chunk_t *e;
    uint64_t blocked = 0;
    int failed = 0;

    if (sp->dir == NULL)
        return gs_error_set(GS_ERR_NO_RESOURCE, "worker %s: the host tier cannot hold %llu "
                            "more bytes: %llu bytes are on it and its limit is %llu bytes "
                            "(no disk tier below it)", w->name, (unsigned long long)need,
                            (unsigned long long)w->st.host_used,
                            (unsigned long long)sp->host_limit);
    for (e = sp->hlru.hnext; e != &sp->hlru;) {
        gs_wchunk_t *c = GS_WSPILL_HCHUNK(e);
        gs_wspill_chunk_t *next = e->hnext;
        if (gs__wspill_host_load_now(w) + need <= cap) break;
        if (c->owned && c->in_map && c->state == GS_WCHUNK_READY && c->refs == 1 &&
            c->sp.io == GS_WSPILL_IO_NONE && !c->sp.hio) {
            if (c->sp.file != 0 || c->sp.tier == GS_WTIER_MEM) {
                gs__wspill_host_drop(w, c);      /* another valid copy: no I/O */
            } else if (sp->dfull) {
                failed = 1;                      /* until a file goes */
            } else if (sp->nhwrites >= GS_WSPILL_MAX_WRITES) {
                break;                           /* more once these finish */
            } else if (w->st.disk_used + sp->hwriting > sp->disk_limit ||
                       c->nbytes > sp->disk_limit - w->st.disk_used - sp->hwriting) {
                if (blocked == 0 || c->nbytes < blocked) blocked = c->nbytes;
            } else if (gs__wspill_host_to_file(w, c) != GS_OK) {
                snprintf(sp->derr, sizeof(sp->derr), "%s", gs_last_error());
                sp->derr_status = GS_ERR_IO;
                failed = 1;
                break;
            }
        }
        e = next;
    }
    if (gs__wspill_host_load_now(w) + need <= cap && sp->nhwrites == 0) return GS_OK;
    if (sp->nhwrites > 0) return GS_INPROGRESS;
    if (failed)
        return gs_error_set(sp->derr_status, "%s (host tier: %llu of %llu bytes in use, %llu "
                            "more needed)", sp->derr, (unsigned long long)w->st.host_used,
                            (unsigned long long)sp->host_limit, (unsigned long long)need);
    if (blocked)
        return gs_error_set(GS_ERR_NO_RESOURCE, "worker %s: the disk tier cannot hold %llu "
                            "more bytes: %llu bytes are on it in %s and its limit is %llu "
                            "bytes (host tier: %llu of %llu bytes in use, %llu more needed)",
                            w->name, (unsigned long long)blocked,
                            (unsigned long long)w->st.disk_used, sp->dir,
                            (unsigned long long)sp->disk_limit,
                            (unsigned long long)w->st.host_used,
                            (unsigned long long)sp->host_limit, (unsigned long long)need);
    return gs_error_set(GS_ERR_NO_RESOURCE, "worker %s: the host tier cannot hold %llu more "
                        "bytes: %llu of its limit of %llu bytes are held by host copies in use "
                        "(being read or copied) and none can move to the disk tier", w->name,
                        (unsigned long long)need, (unsigned long long)w->st.host_used,
                        (unsigned long long)sp->host_limit);
}

void gs__wspill_cascaded(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, uint64_t ns)
{
    struct gs_wspill *sp = w->spill;

    gs_assert(sp->hwriting >= c->nbytes && sp->nhwrites > 0);
    sp->hwriting -= c->nbytes;
    sp->nhwrites--;
    c->sp.hio = 0;
    if (status != GS_OK) {
        snprintf(sp->derr, sizeof(sp->derr), "%s", gs_last_error());
        sp->derr_status = status;
        GS_LOG_WARN("%s; the chunk stays in host memory", sp->derr);
        c->sp.file = 0;                 /* the partial file was deleted */
        w->st.spill_failures++;
        sp->dfull = 1;                  /* retrying every chunk would fail the same way */
        gs__wmem_freed(w);              /* let a blocked admission see the failure */
        return;
    }
    w->st.disk_used += c->nbytes;
    w->st.spilled_bytes += c->nbytes;
    w->st.spilled_ns += ns;
    w->st.spills++;
    /* the write's reference and the store's: nothing reads the host copy, free it; otherwise
     * it stays, clean (dropping it later costs no I/O) */
    if (c->refs == 2 && c->owned && c->in_map && c->sp.io == GS_WSPILL_IO_NONE)
        gs__wspill_host_drop(w, c);
    gs__wmem_freed(w);
}

gs_status_t gs__wspill_disk_load(gs_worker_t *w, gs_wchunk_t *c)
{
    int pooled;
    void *host;
    gs_status_t st;

    gs_assert(c->sp.tier == GS_WTIER_DISK && c->sp.host == NULL && c->sp.file != 0);
    if ((host = gs__wspill_host_alloc(w, c->nbytes, &pooled)) == NULL) return GS_ERR_NO_MEMORY;
    c->sp.host = host;
    c->sp.host_pooled = (uint8_t)pooled;
    if ((st = gs__wspill_file_to_host(w, c)) != GS_OK) {
        gs__wspill_host_free(w, host, pooled, c->nbytes);
        c->sp.host = NULL;
        c->sp.host_pooled = 0;
        return st;
    }
    w->st.host_used += c->nbytes;       /* above the limit while in flight: clean, goes first */
    return GS_OK;
}

void gs__wspill_disk_loaded(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, uint64_t ns)
{
    gs_status_t st;

    if (status != GS_OK) {
        c->sp.io = GS_WSPILL_IO_NONE;
        gs__wspill_host_drop(w, c);
        c->sp.io = GS_WSPILL_IO_READ;
        gs__wspill_loaded(w, c, status, ns);   /* frees its device memory, fails its tasks */
        return;
    }
    w->st.unspilled_bytes += c->nbytes;
    w->st.unspilled_ns += ns;
    w->st.unspills++;
    c->sp.tier = GS_WTIER_HOST;         /* clean host copy (its file stays) */
    gs__wspill_hlru_add(w, c);
    if ((st = gs__wspill_host_load(w, c)) != GS_OK) gs__wspill_loaded(w, c, st, 0);
}
