/* Chunks between CUDA workers of one host through CUDA IPC.
 *
 * Every CUDA worker exports its device arena once (gs_chunkops_ops_t.ipc_export: one
 * cudaIpcMemHandle for the single cudaMalloc that holds all its chunks). A fetch from a peer
 * is sent as GS_AM_IPC_REQ: the usual FETCH_REQ header plus the requester's host key as
 * payload. An owner with IPC on and the same host key *lends* the chunk instead of sending it:
 *
 *   requester -> owner   GS_AM_IPC_REQ    FETCH_REQ header, payload = host key
 *   owner -> requester   GS_AM_IPC_GRANT  raw header (below): arena handle, chunk offset, size,
 *                                         lease id; the owner holds a chunk reference per lease
 *   requester            maps the owner's arena once (ipc_open, cached for the worker's life),
 *                        copies the chunk device-to-device on one of its streams (NVLink/PCIe
 *                        peer copy), and when the copy has finished:
 *   requester -> owner   GS_AM_IPC_RELEASE raw header: lease id, requester id
 *
 * An owner that cannot lend (another host, no IPC, chunk missing) answers with plain DATA, so
 * the request degrades to the staged UCX path; a requester that cannot map the grant gives the
 * lease back, turns IPC off for that peer and asks again with a plain FETCH_REQ. Leases of a
 * peer that leaves PEERS are dropped, and a lease not given back within
 * max(2 x fetch_timeout, 60 s) is dropped with a warning, so a dead requester pins nothing.
 *
 * The host key is "<hostname>/<boot id>": two processes with the same key can open each
 * other's handles (the CUDA driver still checks; a failed open falls back as above).
 */
#include "worker/xfer/xfer_int.h"

#include "common/time.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* GRANT: req_id, graph, task (u64); status (i32), pad (u32); offset, nbytes, lease (u64);
 * handle (GS_IPC_HANDLE_BYTES). RELEASE: lease, from_worker (u64). Host byte order: both ends
 * run on one host. */
#define GS__GRANT_LEN (3 * 8 + 8 + 3 * 8 + GS_IPC_HANDLE_BYTES)
#define GS__RELEASE_LEN 16
#define GS__IPC_SPLIT_BYTES ((size_t)32 << 20)   /* copied as two halves on two streams */

typedef struct gs_wlease {
    uint64_t id;
    uint64_t peer;
    uint64_t deadline;
    gs_wchunk_t *chunk;     /* one reference */
} gs_wlease_t;

struct gs_wipc_map {
    gs_ipc_handle_t handle;
    void *base;
    struct gs_wipc_map *next;
};

static void gs__wipc_host_key(unsigned char *key)
{
    char host[256] = "", boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (fgets(boot, sizeof(boot), f) == NULL) boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
    memset(key, 0, GS_WIPC_KEY_BYTES);
    snprintf((char *)key, GS_WIPC_KEY_BYTES, "%.26s/%.36s", host, boot);
}

void gs__wipc_init(gs_worker_t *w)
{
    gs_u64map_init(&w->xfer->ipc_leases);
    w->xfer->ipc_on = 0;
    if (w->xfer->no_ipc || !w->streams_mode || w->ops->ipc_export == NULL ||
        w->ops->ipc_open == NULL || w->ops->copy_device == NULL)
        return;
    if (w->ops->ipc_export(w->ctx, &w->xfer->ipc_handle, &w->xfer->ipc_base, &w->xfer->ipc_size) != GS_OK) {
        GS_LOG_WARN("CUDA IPC off: exporting the device arena failed: %s", gs_last_error());
        return;
    }
    gs__wipc_host_key(w->xfer->host_key);
    w->xfer->ipc_on = 1;
    GS_LOG_INFO("CUDA IPC on: arena of %zu bytes lent to workers of host %s", w->xfer->ipc_size,
                (const char *)w->xfer->host_key);
}

int gs__wipc_want(gs_worker_t *w, const gs_wpeer_t *p)
{
    return w->xfer->ipc_on && !p->ipc_off;
}

int gs__wipc_same_host(gs_worker_t *w, const void *key, size_t len)
{
    return w->xfer->ipc_on && len == GS_WIPC_KEY_BYTES && key != NULL &&
           memcmp(key, w->xfer->host_key, GS_WIPC_KEY_BYTES) == 0;
}

static void gs__put64(unsigned char **p, uint64_t v)
{
    memcpy(*p, &v, 8);
    *p += 8;
}

static uint64_t gs__get64(const unsigned char **p)
{
    uint64_t v;
    memcpy(&v, *p, 8);
    *p += 8;
    return v;
}

static void gs__wlease_drop(gs_worker_t *w, gs_wlease_t *l)
{
    gs_u64map_del(&w->xfer->ipc_leases, l->id);
    gs__wchunk_unref(w, l->chunk);
    gs_free(l);
}

int gs__wipc_serve(gs_worker_t *w, gs_wdefer_t *d, gs_wchunk_t *c, ucp_ep_h ep)
{
    uintptr_t ptr = (uintptr_t)c->ptr, base = (uintptr_t)w->xfer->ipc_base;
    unsigned char *p;
    gs_wlease_t *l;
    gs_wsend_t *s;
    ucs_status_t st;
    int32_t status = GS_OK;
    uint32_t pad = 0;

    if (!w->xfer->ipc_on || ep == NULL || ptr < base || ptr - base > w->xfer->ipc_size ||
        c->nbytes > w->xfer->ipc_size - (ptr - base))
        return 0;
    l = gs_calloc(1, sizeof(*l), "ipc lease");
    s = gs__wsend_new(w);
    if (l == NULL || s == NULL || gs_buf_reserve(&s->header, GS_PROTO_FRAME_HEADER + GS__GRANT_LEN)
                                      != GS_OK) {
        gs_free(l);
        if (s) gs__wsend_free(w, s);
        return 0;
    }
    l->id = ++w->xfer->next_lease;
    l->peer = d->from_worker;
    l->deadline = gs_now_ns() + (uint64_t)(2ull * w->fetch_timeout_ms > 60000 ?
                                           2ull * w->fetch_timeout_ms : 60000) * 1000000ull;
    l->chunk = c;
    if (gs_u64map_put(&w->xfer->ipc_leases, l->id, (uint64_t)(uintptr_t)l) != GS_OK) {
        gs_free(l);
        gs__wsend_free(w, s);
        return 0;
    }
    gs__wchunk_ref(c);
    /* the AM header starts after the (unused) frame header, as for encoded messages */
    p = (unsigned char *)s->header.data;
    memset(p, 0, GS_PROTO_FRAME_HEADER);
    p += GS_PROTO_FRAME_HEADER;
    gs__put64(&p, d->req_id);
    gs__put64(&p, d->graph);
    gs__put64(&p, d->task);
    memcpy(p, &status, 4);
    memcpy(p + 4, &pad, 4);
    p += 8;
    gs__put64(&p, (uint64_t)(ptr - base));
    gs__put64(&p, c->nbytes);
    gs__put64(&p, l->id);
    memcpy(p, w->xfer->ipc_handle.bytes, GS_IPC_HANDLE_BYTES);
    s->header.len = GS_PROTO_FRAME_HEADER + GS__GRANT_LEN;
    s->req_id = d->req_id;
    s->graph = d->graph;
    s->task = d->task;
    s->from_worker = d->from_worker;
    st = gs__wsend_post(w, s, ep, GS_AM_IPC_GRANT, NULL, 0, 0);
    if (st != UCS_INPROGRESS) gs__wsend_done(w, s, st);
    if (st != UCS_OK && st != UCS_INPROGRESS) {
        /* the requester never hears of the lease: take it back now */
        gs__wlease_drop(w, l);
    }
    return 1;
}

ucs_status_t gs__wam_ipc_grant(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param)
{
    gs_worker_t *w = arg;
    const unsigned char *p = header;
    uint64_t req_id, graph, task, off, nbytes, lease, v;
    int32_t status;
    gs_wfetch_t *f;
    gs_wdefer_t *d;
    uint64_t sender;

    (void)data;
    (void)len;
    (void)param;
    if (!gs__wseal_open(w, GS_AM_IPC_GRANT, header, &header_len, &sender)) return UCS_OK;
    if (header == NULL || header_len != GS__GRANT_LEN) {
        GS_LOG_WARN("malformed CUDA IPC grant from a peer (%zu header bytes)", header_len);
        return UCS_OK;
    }
    req_id = gs__get64(&p);
    graph = gs__get64(&p);
    task = gs__get64(&p);
    memcpy(&status, p, 4);
    p += 8;
    off = gs__get64(&p);
    nbytes = gs__get64(&p);
    lease = gs__get64(&p);
    d = gs_calloc(1, sizeof(*d), "ucx deferred");
    if (d == NULL) {
        GS_LOG_ERROR("out of memory handling CUDA IPC grant for fetch %" PRIu64, req_id);
        return UCS_OK;   /* the owner's lease expires */
    }
    d->kind = GS_WDEFER_IPC_COPY;
    d->req_id = req_id;
    d->graph = graph;
    d->task = task;
    d->status = (gs_status_t)status;
    d->ipc_off = off;
    d->ipc_nbytes = nbytes;
    d->ipc_lease = lease;
    memcpy(d->ipc_handle.bytes, p, GS_IPC_HANDLE_BYTES);
    d->from_worker = 0;
    if (gs_u64map_get(&w->xfer->fetches, req_id, &v)) {
        f = (gs_wfetch_t *)(uintptr_t)v;
        if (f->peer) d->from_worker = f->peer->id;
    }
    if (d->from_worker != sender) {
        gs__wseal_mismatch(w, GS_AM_IPC_GRANT, sender, "a grant for a fetch addressed to another worker");
        gs_free(d);
        return UCS_OK;
    }
    gs__wdefer_push(w, d);
    return UCS_OK;
}

static void gs__wipc_send_release(gs_worker_t *w, uint64_t owner, uint64_t lease)
{
    ucp_ep_h ep = gs__wpeer_ep_by_id(w, owner);
    gs_wsend_t *s;
    unsigned char *p;
    ucs_status_t st;

    if (ep == NULL) return;   /* the owner is gone: nothing to give back */
    s = gs__wsend_new(w);
    if (s == NULL ||
        gs_buf_reserve(&s->header, GS_PROTO_FRAME_HEADER + GS__RELEASE_LEN) != GS_OK) {
        GS_LOG_WARN("out of memory giving CUDA IPC lease %" PRIu64 " back; it expires", lease);
        if (s) gs__wsend_free(w, s);
        return;
    }
    p = (unsigned char *)s->header.data;
    memset(p, 0, GS_PROTO_FRAME_HEADER);
    p += GS_PROTO_FRAME_HEADER;
    gs__put64(&p, lease);
    gs__put64(&p, w->id);
    s->header.len = GS_PROTO_FRAME_HEADER + GS__RELEASE_LEN;
    s->status = GS_ERR_CANCELED;   /* not a served chunk in the stats */
    s->from_worker = owner;
    st = gs__wsend_post(w, s, ep, GS_AM_IPC_RELEASE, NULL, 0, 0);
    if (st != UCS_INPROGRESS) gs__wsend_free(w, s);
}

void gs__wipc_give_back(gs_worker_t *w, gs_wfetch_t *f)
{
    if (f->ipc_lease == 0) return;
    gs__wipc_send_release(w, f->ipc_owner, f->ipc_lease);
    f->ipc_lease = 0;
}

ucs_status_t gs__wam_ipc_release(void *arg, const void *header, size_t header_len, void *data,
                                 size_t len, const ucp_am_recv_param_t *param)
{
    gs_worker_t *w = arg;
    const unsigned char *p = header;
    uint64_t lease, from, v, sender;
    gs_wlease_t *l;

    (void)data;
    (void)len;
    (void)param;
    if (!gs__wseal_open(w, GS_AM_IPC_RELEASE, header, &header_len, &sender)) return UCS_OK;
    if (header == NULL || header_len != GS__RELEASE_LEN) {
        GS_LOG_WARN("malformed CUDA IPC release from a peer (%zu header bytes)", header_len);
        return UCS_OK;
    }
    lease = gs__get64(&p);
    from = gs__get64(&p);
    if (from != sender) {
        gs__wseal_mismatch(w, GS_AM_IPC_RELEASE, sender, "a release naming another worker");
        return UCS_OK;
    }
    if (!gs_u64map_get(&w->xfer->ipc_leases, lease, &v)) {
        GS_LOG_DEBUG("release of unknown CUDA IPC lease %" PRIu64 " by worker %" PRIu64, lease,
                     from);
        return UCS_OK;
    }
    l = (gs_wlease_t *)(uintptr_t)v;
    if (l->peer != from) {
        GS_LOG_WARN("worker %" PRIu64 " released CUDA IPC lease %" PRIu64 " of worker %" PRIu64
                    "; ignored", from, lease, l->peer);
        return UCS_OK;
    }
    /* dropping the reference may free device memory: fine here (no UCX call) */
    gs__wlease_drop(w, l);
    return UCS_OK;
}

/* Our mapping of the region named by @a h, opened on first use. NULL with an error set. */
static void *gs__wipc_map(gs_worker_t *w, const gs_ipc_handle_t *h)
{
    struct gs_wipc_map *m;
    void *base = NULL;
    for (m = w->xfer->ipc_maps; m; m = m->next)
        if (memcmp(m->handle.bytes, h->bytes, GS_IPC_HANDLE_BYTES) == 0) return m->base;
    m = gs_calloc(1, sizeof(*m), "ipc map");
    if (m == NULL) {
        gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an IPC mapping");
        return NULL;
    }
    if (w->ops->ipc_open(w->ctx, h, &base) != GS_OK) {
        gs_free(m);
        return NULL;
    }
    m->handle = *h;
    m->base = base;
    m->next = w->xfer->ipc_maps;
    w->xfer->ipc_maps = m;
    return base;
}

void gs__wipc_copy(gs_worker_t *w, gs_wdefer_t *d)
{
    gs_wfetch_t *f = NULL;
    gs_wnote_t *n;
    gs_status_t status;
    uint64_t v;
    char *base;
    int s;

    if (gs_u64map_get(&w->xfer->fetches, d->req_id, &v)) f = (gs_wfetch_t *)(uintptr_t)v;
    if (f == NULL || f->dead || f->peer == NULL || w->state != GS_WSTATE_RUNNING) {
        if (d->status == GS_OK) gs__wipc_send_release(w, d->from_worker, d->ipc_lease);
        return;
    }
    if (f->state != GS_WFETCH_REQUESTED || f->chunk->graph->id != d->graph ||
        f->chunk->task != d->task) {
        if (d->status == GS_OK) gs__wipc_send_release(w, f->peer->id, d->ipc_lease);
        gs__wfetch_fail(w, f, GS_ERR_PROTO, "worker %llu granted fetch %llu for key (%llu, %llu)",
                        (unsigned long long)f->peer->id, (unsigned long long)f->req_id,
                        (unsigned long long)d->graph, (unsigned long long)d->task);
        return;
    }
    if (d->status != GS_OK) {
        gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "worker %llu (%s) does not have it (%s)",
                        (unsigned long long)f->peer->id, f->peer->name,
                        gs_status_string(d->status));
        return;
    }
    f->ipc_lease = d->ipc_lease;
    f->ipc_owner = f->peer->id;
    if (d->ipc_nbytes != f->chunk->nbytes) {
        gs__wipc_give_back(w, f);
        gs__wfetch_fail(w, f, GS_ERR_PROTO, "worker %llu lent %llu bytes, expected %llu",
                        (unsigned long long)f->peer->id, (unsigned long long)d->ipc_nbytes,
                        (unsigned long long)f->chunk->nbytes);
        return;
    }
    base = gs__wipc_map(w, &d->ipc_handle);
    if (base == NULL) {
        GS_LOG_WARN("CUDA IPC with worker %llu (%s) off: mapping its arena failed (%s); "
                    "fetching over UCX", (unsigned long long)f->peer->id, f->peer->name,
                    gs_last_error());
        f->peer->ipc_off = 1;
        gs__wipc_give_back(w, f);
        if ((status = gs__wfetch_post_req(w, f, 0)) != GS_OK)
            gs__wfetch_fail(w, f, status, "asking again over UCX: %s", gs_last_error());
        return;
    }
    /* A big chunk is copied as two halves on two streams, so that two copy engines pull over
     * NVLink at once; the fetch completes when both notes have arrived. */
    {
        const size_t total = (size_t)d->ipc_nbytes;
        const int nparts = total >= GS__IPC_SPLIT_BYTES && w->nstreams >= 2 ? 2 : 1;
        const size_t half = nparts == 2 ? (total / 2 + 255) & ~(size_t)255 : total;
        s = gs__wexec_pick_stream(w);
        f->path = GS_WPATH_CUDA_IPC;
        f->parts = 0;
        f->part_status = GS_OK;
        status = GS_OK;
        for (int p = 0; p < nparts; p++) {
            const size_t off = p == 0 ? 0 : half, len = p == 0 ? half : total - half;
            const int sp = (s + p) % w->nstreams;
            n = gs_calloc(1, sizeof(*n), "fetch note");
            if (n == NULL) {
                status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory copying the lent chunk");
                break;
            }
            status = w->ops->copy_device(w->ctx, w->streams[sp], (char *)f->chunk->ptr + off,
                                         base + d->ipc_off + off, len);
            if (status != GS_OK) {
                gs_free(n);
                (void)w->ops->sync(w->ctx, w->streams[sp]);   /* nothing of it left running */
                break;
            }
            n->kind = GS_WNOTE_FETCH_STAGED;
            n->obj = f;
            f->parts++;
            gs__wnote_arm(w, w->streams[sp], n);
        }
        if (f->parts > 0) {
            /* a failed part fails the fetch when the enqueued ones have finished */
            if (status != GS_OK) f->part_status = status;
            f->state = GS_WFETCH_STAGING;
            f->stream = s;
            return;
        }
    }
    gs__wipc_give_back(w, f);
    gs__wfetch_fail(w, f, status, "peer copy of the lent chunk failed: %s", gs_last_error());
}

void gs__wipc_tick(gs_worker_t *w)
{
    uint64_t now = gs_now_ns();
    if (w->xfer->ipc_leases.len == 0) return;
    for (size_t i = 0; i < w->xfer->ipc_leases.cap; i++) {
        gs_wlease_t *l;
        if (w->xfer->ipc_leases.keys[i] >= GS_U64MAP_TOMB) continue;
        l = (gs_wlease_t *)(uintptr_t)w->xfer->ipc_leases.vals[i];
        if (l->deadline > now) continue;
        GS_LOG_WARN("CUDA IPC lease %" PRIu64 " of (%" PRIu64 ", %" PRIu64 ") to worker %" PRIu64
                    " never given back; dropped", l->id, l->chunk->graph->id, l->chunk->task,
                    l->peer);
        gs__wlease_drop(w, l);
    }
}

void gs__wipc_peer_gone(gs_worker_t *w, uint64_t peer)
{
    if (w->xfer->ipc_leases.len == 0) return;
    for (size_t i = 0; i < w->xfer->ipc_leases.cap; i++) {
        gs_wlease_t *l;
        if (w->xfer->ipc_leases.keys[i] >= GS_U64MAP_TOMB) continue;
        l = (gs_wlease_t *)(uintptr_t)w->xfer->ipc_leases.vals[i];
        if (l->peer == peer) gs__wlease_drop(w, l);
    }
}

void gs__wipc_cleanup(gs_worker_t *w)
{
    for (size_t i = 0; i < w->xfer->ipc_leases.cap; i++) {
        if (w->xfer->ipc_leases.keys[i] >= GS_U64MAP_TOMB) continue;
        gs__wlease_drop(w, (gs_wlease_t *)(uintptr_t)w->xfer->ipc_leases.vals[i]);
    }
    gs_u64map_cleanup(&w->xfer->ipc_leases);
    if (w->xfer->ipc_maps != NULL && w->streams != NULL) {
        /* no copy may still read a mapping we close */
        for (int s = 0; s < w->nstreams; s++)
            if (w->streams[s]) (void)w->ops->sync(w->ctx, w->streams[s]);
    }
    while (w->xfer->ipc_maps) {
        struct gs_wipc_map *m = w->xfer->ipc_maps;
        w->xfer->ipc_maps = m->next;
        w->ops->ipc_close(w->ctx, m->base);
        gs_free(m);
    }
}

void gs__wfetch_log_path(gs_worker_t *w, gs_wfetch_t *f)
{
    static const char *const names[] = {"ucx", "cuda-ipc"};
    gs_wpeer_t *p = f->peer;
    double s = (double)(gs_now_ns() - f->t_start) * 1e-9;
    (void)w;
    if (p == NULL || f->path > GS_WPATH_CUDA_IPC || p->logged_path[f->path]) return;
    if (f->chunk->nbytes < ((uint64_t)1 << 20)) return;   /* too small to say anything */
    p->logged_path[f->path] = 1;
    GS_LOG_INFO("transfer from worker %llu (%s) over %s%s: %.1f MB in %.3f ms = %.2f GB/s "
                "(first transfer of >= 1 MB from it on this path)",
                (unsigned long long)p->id, p->name, names[f->path],
                f->path == GS_WPATH_UCX && w->streams_mode ? " (host-staged)" : "",
                (double)f->chunk->nbytes * 1e-6, s * 1e3,
                s > 0 ? (double)f->chunk->nbytes / s * 1e-9 : 0.0);
}
