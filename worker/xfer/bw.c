/* Transfer measurements of gworker: every completed peer fetch is timed (bytes, request to data
 * in place, source worker, path) and summed per (source, path); the sums go to gsched as one
 * BANDWIDTH message with each heartbeat (when there is something to report) and start again.
 * gsched turns them into per-pair bandwidth estimates for placement (scheduler/sched.h). */
#include "worker/xfer/xfer_int.h"

#include "common/time.h"

#include <string.h>

#define GS_WBW_PATHLEN 16

typedef struct gs_wbw_entry {
    uint64_t peer, bytes, ns;
    uint32_t count;
    char path[GS_WBW_PATHLEN];
} gs_wbw_entry_t;

struct gs_wbw {
    GS_VEC(gs_wbw_entry_t) e;
};

void gs__wbw_record(gs_worker_t *w, uint64_t peer, uint64_t nbytes, uint64_t ns, const char *path)
{
    gs_wbw_entry_t *e = NULL;
    if (path == NULL) path = "";
    if (w->xfer->bw == NULL) {
        w->xfer->bw = gs_calloc(1, sizeof(*w->xfer->bw), "worker bandwidth");
        if (w->xfer->bw == NULL) return;   /* a measurement lost; nothing else depends on it */
    }
    for (size_t i = 0; i < w->xfer->bw->e.len; i++) {
        gs_wbw_entry_t *x = &w->xfer->bw->e.data[i];
        if (x->peer == peer && strncmp(x->path, path, GS_WBW_PATHLEN - 1) == 0) {
            e = x;
            break;
        }
    }
    if (e == NULL) {
        gs_wbw_entry_t blank;
        memset(&blank, 0, sizeof(blank));
        blank.peer = peer;
        strncpy(blank.path, path, GS_WBW_PATHLEN - 1);
        if (GS_VEC_PUSH(&w->xfer->bw->e, blank) != GS_OK) return;
        e = &w->xfer->bw->e.data[w->xfer->bw->e.len - 1];
    }
    e->bytes += nbytes;
    e->ns += ns ? ns : 1;
    e->count++;
}

void gs__wbw_fetch_done(gs_worker_t *w, const gs_wfetch_t *f)
{
    const char *path;
    uint64_t peer = f->peer != NULL ? f->peer->id : f->ipc_owner;
    if (f->path == GS_WPATH_CUDA_IPC) path = "cuda-ipc";
    else if (f->host_owned) path = w->xfer->ucx_shm ? "ucx-shm+staged" : "ucx+staged";
    else path = w->xfer->ucx_shm ? "ucx-shm" : "ucx";
    gs__wbw_record(w, peer, f->chunk->nbytes, gs_now_ns() - f->t_start, path);
}

void gs__xfer_report(gs_worker_t *w)
{
    uint64_t *tab;
    gs_str_t *paths;
    uint32_t *count;
    size_t n;
    gs_msg_t m;

    if (w->xfer->bw == NULL || w->xfer->bw->e.len == 0) return;
    n = w->xfer->bw->e.len;
    tab = gs_malloc(3 * n * sizeof(uint64_t), "bandwidth report");
    count = gs_malloc(n * sizeof(uint32_t), "bandwidth report counts");
    paths = gs_malloc(n * sizeof(gs_str_t), "bandwidth report paths");
    if (tab != NULL && count != NULL && paths != NULL) {
        for (size_t i = 0; i < n; i++) {
            const gs_wbw_entry_t *e = &w->xfer->bw->e.data[i];
            tab[i] = e->peer;
            tab[n + i] = e->bytes;
            tab[2 * n + i] = e->ns;
            count[i] = e->count;
            paths[i].data = (const uint8_t *)e->path;
            paths[i].len = strlen(e->path);
        }
        memset(&m, 0, sizeof(m));
        m.type = GS_MSG_BANDWIDTH;
        m.u.bandwidth = (gs_msg_bandwidth_t){.n = (uint32_t)n, .peer = tab, .bytes = tab + n, .ns = tab + 2 * n,
                                             .count = count, .npaths = (uint32_t)n, .path = paths};
        gs__wsend_msg(w, &m);
        w->xfer->bw->e.len = 0;
    }
    gs_free(tab);
    gs_free(count);
    gs_free(paths);
}

void gs__wbw_cleanup(gs_worker_t *w)
{
    if (w->xfer->bw == NULL) return;
    GS_VEC_FREE(&w->xfer->bw->e);
    gs_free(w->xfer->bw);
    w->xfer->bw = NULL;
}
