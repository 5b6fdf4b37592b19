/* Peer transfers of gworker over UCX (ucp active messages).
 *
 * One ucp context (AM + WAKEUP; transports left to UCX's defaults) and one ucp worker whose
 * event fd is polled by the uv loop: progress until idle, then ucp_worker_arm (UCS_ERR_BUSY:
 * progress again). Endpoints are created lazily per peer from the PEERS addresses, with
 * UCP_ERR_HANDLING_MODE_PEER so a peer that dies fails its endpoint instead of hanging it.
 * UCX 1.13 has no peer-failure support on its shared-memory transports (sysv, posix, cma), so
 * in that mode two workers on one host talk over tcp (loopback). With ucx_shm the endpoints use
 * UCP_ERR_HANDLING_MODE_NONE and UCX picks sysv/posix + cma on one host; a dead peer is then
 * noticed only through PEERS and the fetch timeout.
 *
 * Protocol (proto/msg.h encodings without the 4-byte frame header as the AM header):
 *   requester -> owner   AM GS_AM_FETCH_REQ, header FETCH_REQ(req_id, graph, task, from)
 *   owner -> requester   AM GS_AM_DATA, header DATA(req_id, graph, task, status, empty),
 *                        payload = the chunk bytes (UCX picks eager or rendezvous by size)
 * The owner answers on its own endpoint to `from` (PEERS) or, failing that, on the reply
 * endpoint UCX passes with the request. A fetch fails on: an endpoint error, the peer leaving
 * PEERS, a DATA with an error status, a size mismatch, or no answer within fetch_timeout_ms.
 *
 * Nothing here runs inside a UCX callback that must not: callbacks only record work (deferred
 * list, flags) or copy eager bytes; sends, rendezvous receives and endpoint closes happen right
 * after ucp_worker_progress() returns.
 */
#include "worker/worker_int.h"

#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucs/memory/memory_type.h>

#define GS_AM_FETCH_REQ 17
#define GS_AM_DATA 18

static gs_status_t gs__ucs_err(gs_status_t status, ucs_status_t st, const char *what)
{
    return gs_error_set(status, "%s: %s", what, ucs_status_string(st));
}

/* ---------------------------------------------------------------- transfer checksums */

/* With transfer_checksum, the AM header of DATA is the encoded message followed by a trailer:
 * the checksum (8 bytes) and 1 when it is present (0 for bytes UCX moves between device
 * buffers, which this worker never sees). */
#define GS__CSUM_TRAILER 9

/* 64-bit checksum of @a len bytes: a multiply-xor over 8-byte words (several GB/s), then the
 * tail and the length. Not cryptographic: it catches corrupted or misplaced bytes. */
uint64_t gs__wchecksum(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)len, w;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    for (; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* ---------------------------------------------------------------- deferred work */

static void gs__wdefer_push(gs_worker_t *w, gs_wdefer_t *d)
{
    d->next = NULL;
    if (w->defer_tail) w->defer_tail->next = d;
    else w->defer_head = d;
    w->defer_tail = d;
}

/* ---------------------------------------------------------------- endpoints */

static void gs__wep_close_cb(void *req, ucs_status_t st, void *arg)
{
    gs_wep_t *epc = arg;
    ucp_request_free(req);
    epc->w->ucp_outstanding--;
    gs__wlist_del(&epc->link);
    gs_free(epc);
}

/* FORCE for peers that are gone or failed; a flushing close at our own shutdown when the
 * endpoints run without peer-failure handling (shared-memory mode), where UCX documents a
 * forced close as undefined for the still-running remote side. */
static void gs__wep_close(gs_worker_t *w, gs_wep_t *epc, int flush)
{
    ucp_request_param_t p;
    void *r;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                     UCP_OP_ATTR_FIELD_USER_DATA;
    p.flags = flush ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    p.cb.send = gs__wep_close_cb;
    p.user_data = epc;
    epc->peer_id = UINT64_MAX;     /* no longer any peer's */
    r = ucp_ep_close_nbx(epc->ep, &p);
    if (r == NULL || UCS_PTR_IS_ERR(r)) {
        gs_free(epc);
        return;
    }
    w->ucp_outstanding++;
    gs__wlist_push(&w->closing, &epc->link);
}

static void gs__wep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    gs_wep_t *epc = arg;
    gs_worker_t *w = epc->w;
    uint64_t v;
    gs_wpeer_t *p;

    if (epc->peer_id == UINT64_MAX || !gs_u64map_get(&w->peers, epc->peer_id, &v)) return;
    p = (gs_wpeer_t *)(uintptr_t)v;
    if (p->epc != epc) return;
    /* a peer that exits (a cluster shutting down) fails its endpoint too: only worth a
     * warning when fetches were waiting on it */
    if (!gs__wlist_empty(&p->fetches))
        GS_LOG_WARN("endpoint to worker %llu (%s) failed: %s", (unsigned long long)p->id,
                    p->name, ucs_status_string(st));
    else
        GS_LOG_DEBUG("endpoint to worker %llu (%s) failed: %s", (unsigned long long)p->id,
                     p->name, ucs_status_string(st));
    p->failed = 1;
    p->fail_status = st;
    w->ep_fail_pending = 1;
}

static void gs__wucx_log_ep(gs_worker_t *w, gs_wpeer_t *p, ucp_ep_h ep)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    if (GS_LOG_LEVEL_DEBUG > gs__log_level) return;
    f = open_memstream(&buf, &len);
    if (f == NULL) return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    for (char *line = buf, *nl; line && *line; line = nl) {
        nl = strchr(line, '\n');
        if (nl) *nl++ = '\0';
        if (strstr(line, "lane[") || strstr(line, "am_send") || strstr(line, "rma_bw")) {
            while (*line == '#' || *line == ' ') line++;
            GS_LOG_DEBUG("ucx to worker %llu (%s): %s", (unsigned long long)p->id, p->name,
                         line);
        }
    }
    free(buf);   /* allocated by open_memstream (libc), not by gs_malloc */
}

static gs_status_t gs__wpeer_ep(gs_worker_t *w, gs_wpeer_t *p, gs_wep_t **epc_p)
{
    ucp_ep_params_t ep;
    ucs_status_t st;
    gs_wep_t *epc;

    if (p->epc && !p->failed) {
        *epc_p = p->epc;
        return GS_OK;
    }
    if (p->epc) {
        gs__wep_close(w, p->epc, 0);
        p->epc = NULL;
        p->failed = 0;
    }
    epc = gs_calloc(1, sizeof(*epc), "ucx endpoint");
    if (epc == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an endpoint");
    epc->w = w;
    epc->peer_id = p->id;
    gs__wlist_init(&epc->link);
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = (const ucp_address_t *)p->addr;
    ep.err_mode = w->ucx_shm ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = gs__wep_err_cb;
    ep.err_handler.arg = epc;
    st = ucp_ep_create(w->ucp_worker, &ep, &epc->ep);
    if (st != UCS_OK) {
        gs_free(epc);
        return gs_error_set(GS_ERR_WORKER_LOST, "cannot connect to worker %llu (%s): %s",
                            (unsigned long long)p->id, p->name, ucs_status_string(st));
    }
    p->epc = epc;
    gs__wucx_log_ep(w, p, epc->ep);
    *epc_p = epc;
    return GS_OK;
}

/* ---------------------------------------------------------------- fetch (requester side) */

static void gs__wfetch_free(gs_worker_t *w, gs_wfetch_t *f)
{
    gs__wlist_del(&f->peer_link);     /* w->dead_fetches, if there */
    if (f->host_owned) gs_free(f->host);
    gs__wchunk_unref(w, f->chunk);
    gs_free(f);
}

/* Detach from the map and the peer; the caller completes or fails the chunk. */
static void gs__wfetch_detach(gs_worker_t *w, gs_wfetch_t *f)
{
    gs_u64map_del(&w->fetches, f->req_id);
    gs__wlist_del(&f->peer_link);
    f->peer = NULL;
}

void gs__wfetch_fail(gs_worker_t *w, gs_wfetch_t *f, gs_status_t status, const char *fmt,
                     ...)
{
    char msg[GS_W_ERRLEN];
    gs_wchunk_t *c = f->chunk;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (f->dead) return;
    GS_LOG_DEBUG("fetch %llu failed: %s", (unsigned long long)f->req_id, msg);
    f->dead = 1;
    w->st.fetch_failures++;
    gs__wfetch_detach(w, f);
    c->state = GS_WCHUNK_FAILED;
    if (c->in_map && !c->owned) {
        gs_u64map_del(&c->graph->chunks, c->task);
        c->in_map = 0;
    }
    gs__wchunk_ref(c);                 /* failing waiters may drop their references */
    while (c->waiters.len) {
        gs_wtask_t *t = c->waiters.data[--c->waiters.len];
        /* a task listing this input twice waits on it twice: fail it once */
        for (size_t k = 0; k < c->waiters.len;) {
            if (c->waiters.data[k] == t) c->waiters.data[k] = c->waiters.data[--c->waiters.len];
            else k++;
        }
        gs__wtask_fail(w, t, status, "fetching input (%llu, %llu): %s",
                       (unsigned long long)c->graph->id, (unsigned long long)c->task, msg);
    }
    gs__wchunk_unref(w, c);
    if (f->pipe_guard) {               /* slices: no more are waited for */
        f->pipe_guard = 0;
        if (f->parts > 1) {
            f->parts--;
        } else {
            f->parts = 0;              /* nothing of it in flight */
            gs__wfetch_free(w, f);
            return;
        }
    }
    if (f->recv_req || f->state == GS_WFETCH_STAGING) {
        /* freed when its receive or copy returns */
        gs__wlist_push(&w->dead_fetches, &f->peer_link);
        if (f->recv_req) ucp_request_cancel(w->ucp_worker, f->recv_req);
    } else {
        gs__wfetch_free(w, f);
    }
}

static void gs__wfetch_complete(gs_worker_t *w, gs_wfetch_t *f)
{
    gs_wchunk_t *c = f->chunk;
    w->st.fetches++;
    w->st.fetch_bytes += c->nbytes;
    GS_LOG_TRACE("fetched (%llu, %llu), %llu bytes in %.3f ms", (unsigned long long)c->graph->id,
                 (unsigned long long)c->task, (unsigned long long)c->nbytes,
                 (double)(gs_now_ns() - f->t_start) * 1e-6);
    gs__wfetch_log_path(w, f);
    gs__wbw_fetch_done(w, f);
    gs__wfetch_detach(w, f);
    c->state = GS_WCHUNK_READY;
    gs__wexec_input_ready(w, c);
    gs__wfetch_free(w, f);
}

/* The bytes are in f->host: done, or stage them into backend memory. */
gs_status_t gs__wfetch_copy_in(gs_worker_t *w, gs_wfetch_t *f, int sp, size_t off,
                               const void *src, size_t len)
{
    gs_wnote_t *n = gs_calloc(1, sizeof(*n), "fetch note");
    gs_status_t st;
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a copy's note");
    st = w->ops->copy_from_host(w->ctx, w->streams[sp], (char *)f->chunk->ptr + off, src, len);
    if (st == GS_OK) {
        n->w = w;
        n->kind = GS_WNOTE_FETCH_STAGED;
        n->obj = f;
        if ((st = w->ops->notify(w->ctx, w->streams[sp], gs__wnote_cb, n)) == GS_OK) {
            f->parts++;
            return GS_OK;
        }
        /* cannot learn completion asynchronously: the copy is done once the stream is */
        gs_free(n);
        return w->ops->sync(w->ctx, w->streams[sp]);
    }
    gs_free(n);
    return st;
}

static void gs__wfetch_received(gs_worker_t *w, gs_wfetch_t *f)
{
    gs_status_t status;
    int s;

    if (f->csum_on && !f->dev_recv) {
        uint64_t got = gs__wchecksum(f->host, (size_t)f->chunk->nbytes);
        if (got != f->csum) {
            gs__wfetch_fail(w, f, GS_ERR_PROTO, "chunk (%llu, %llu) from worker %llu arrived "
                            "corrupted: checksum %016llx, sent %016llx",
                            (unsigned long long)f->chunk->graph->id,
                            (unsigned long long)f->chunk->task,
                            (unsigned long long)(f->peer ? f->peer->id : 0),
                            (unsigned long long)got, (unsigned long long)f->csum);
            return;
        }
    }
    if (!f->host_owned) {
        gs__wfetch_complete(w, f);
        return;
    }
    s = gs__wexec_pick_stream(w);
    f->parts = 0;
    status = gs__wfetch_copy_in(w, f, s, 0, f->host, (size_t)f->chunk->nbytes);
    if (status != GS_OK) {
        gs__wfetch_fail(w, f, status, "copying the received chunk to the device: %s",
                        gs_last_error());
    } else if (f->parts == 0) {
        gs__wfetch_complete(w, f);   /* copied synchronously */
    } else {
        f->state = GS_WFETCH_STAGING;
        f->stream = s;
    }
}

void gs__wfetch_staged(gs_worker_t *w, gs_wfetch_t *f, gs_status_t status)
{
    if (status != GS_OK && f->part_status == GS_OK) f->part_status = status;
    if (f->parts > 1) {              /* a copy in parts: wait for the last one */
        f->parts--;
        return;
    }
    f->parts = 0;
    if (status == GS_OK) status = f->part_status;
    gs__wipc_give_back(w, f);        /* the copy out of a lent chunk is over */
    if (f->dead) {
        gs__wfetch_free(w, f);
        return;
    }
    f->state = GS_WFETCH_REQUESTED;
    if (status == GS_OK) gs__wfetch_complete(w, f);
    else gs__wfetch_fail(w, f, status, "copying the received chunk to the device failed (%s)",
                         gs_status_string(status));
}


static void gs__wsend_ucp_cb(void *req, ucs_status_t st, void *arg)
{
    gs_wsend_t *s = arg;
    ucp_request_free(req);
    s->ucp_req = NULL;
    s->w->ucp_outstanding--;
    gs__wsend_done(s->w, s, st);
}

/* Post an AM on @a ep for @a s (header already encoded). UCS_INPROGRESS: gs__wsend_done
 * follows from UCX; otherwise the operation is over (UCS_OK or an error) and the caller
 * finishes @a s. */
ucs_status_t gs__wsend_post(gs_worker_t *w, gs_wsend_t *s, ucp_ep_h ep, unsigned am_id,
                            const void *payload, size_t len, unsigned flags)
{
    ucp_request_param_t p;
    void *r;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send = gs__wsend_ucp_cb;
    p.user_data = s;
    p.flags = flags;
    if (s->payload_cuda && payload != NULL) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        p.memory_type = UCS_MEMORY_TYPE_CUDA;
    }
    r = ucp_am_send_nbx(ep, am_id, s->header.data + GS_PROTO_FRAME_HEADER,
                        s->header.len - GS_PROTO_FRAME_HEADER, payload, len, &p);
    if (r == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(r)) return UCS_PTR_STATUS(r);
    s->ucp_req = r;
    w->ucp_outstanding++;
    return UCS_INPROGRESS;
}

gs_wsend_t *gs__wsend_new(gs_worker_t *w)
{
    gs_wsend_t *s = gs_calloc(1, sizeof(*s), "worker send");
    if (s == NULL) return NULL;
    s->w = w;
    s->stream = -1;
    gs_buf_init(&s->header);
    gs__wlist_push(&w->sends, &s->link);
    return s;
}

void gs__wsend_free(gs_worker_t *w, gs_wsend_t *s)
{
    gs__wlist_del(&s->link);
    if (s->chunk) gs__wchunk_unref(w, s->chunk);
    if (s->host_owned) gs_free(s->host);
    gs_buf_cleanup(&s->header);
    gs_free(s);
}

void gs__wsend_done(gs_worker_t *w, gs_wsend_t *s, ucs_status_t st)
{
    if (s->pipe) {
        gs__wpipe_sent(w, s, st);
        return;
    }
    if (s->is_request) {
        if (st != UCS_OK) {
            uint64_t v;
            if (gs_u64map_get(&w->fetches, s->req_id, &v)) {
                gs_wfetch_t *f = (gs_wfetch_t *)(uintptr_t)v;
                gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST,
                                "sending the request to worker %llu failed: %s",
                                (unsigned long long)s->from_worker, ucs_status_string(st));
            }
        }
    } else if (st == UCS_OK) {
        if (s->status == GS_OK) w->st.served++;
    } else if (st != UCS_ERR_CANCELED) {
        GS_LOG_WARN("sending (%llu, %llu) to worker %llu failed: %s",
                    (unsigned long long)s->graph, (unsigned long long)s->task,
                    (unsigned long long)s->from_worker, ucs_status_string(st));
    }
    gs__wsend_free(w, s);
}

gs_status_t gs__wfetch_post_req(gs_worker_t *w, gs_wfetch_t *f, int ipc)
{
    gs_wpeer_t *p = f->peer;
    gs_wep_t *epc;
    gs_wsend_t *s;
    gs_status_t status;
    gs_msg_t m;
    ucs_status_t st;

    if (p == NULL) return gs_error_set(GS_ERR_WORKER_LOST, "the fetch has no peer any more");
    if ((status = gs__wpeer_ep(w, p, &epc)) != GS_OK) return status;
    if ((s = gs__wsend_new(w)) == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a fetch request");
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_FETCH_REQ;
    m.u.fetch_req.req_id = f->req_id;
    m.u.fetch_req.graph_id = f->chunk->graph->id;
    m.u.fetch_req.task_id = f->chunk->task;
    m.u.fetch_req.from_worker = w->id;
    if ((status = gs_msg_encode(&m, &s->header)) != GS_OK) {
        gs__wsend_free(w, s);
        return status;
    }
    s->is_request = 1;
    s->req_id = f->req_id;
    s->from_worker = p->id;
    s->graph = m.u.fetch_req.graph_id;
    s->task = m.u.fetch_req.task_id;
    st = ipc ? gs__wsend_post(w, s, epc->ep, GS_AM_IPC_REQ, w->host_key, sizeof(w->host_key),
                              UCP_AM_SEND_FLAG_REPLY)
             : gs__wsend_post(w, s, epc->ep, GS_AM_FETCH_REQ, NULL, 0, UCP_AM_SEND_FLAG_REPLY);
    if (st == UCS_INPROGRESS) return GS_OK;
    gs__wsend_free(w, s);
    if (st == UCS_OK) return GS_OK;
    return gs_error_set(GS_ERR_WORKER_LOST, "sending the request to worker %llu (%s) failed: %s",
                        (unsigned long long)p->id, p->name, ucs_status_string(st));
}

gs_status_t gs__wucx_fetch(gs_worker_t *w, uint64_t graph, uint64_t task, uint64_t from,
                           uint64_t nbytes, gs_wchunk_t **c_p)
{
    gs_wpeer_t *p;
    gs_wep_t *epc;
    gs_wgraph_t *g;
    gs_wchunk_t *c;
    gs_wfetch_t *f;
    gs_status_t status;
    uint64_t v;

    if (from == w->id)
        return gs_error_set(GS_ERR_NOT_FOUND, "the input should be local but is not");
    if (!gs_u64map_get(&w->peers, from, &v))
        return gs_error_set(GS_ERR_WORKER_LOST, "worker %llu is not a known peer",
                            (unsigned long long)from);
    p = (gs_wpeer_t *)(uintptr_t)v;
    status = gs__wpeer_ep(w, p, &epc);
    if (status != GS_OK) return status;
    status = gs__wgraph_get(w, graph, 1, &g);
    if (status != GS_OK) return status;
    status = gs__wchunk_new(w, g, task, nbytes, &c);
    if (status != GS_OK) {
        gs__wgraph_maybe_free(w, g, 0);
        return status;
    }
    f = gs_calloc(1, sizeof(*f), "fetch");
    if (f == NULL) {
        status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a fetch");
        goto err_chunk;
    }
    f->w = w;
    f->chunk = c;
    f->peer = p;
    f->stream = -1;
    gs__wlist_init(&f->peer_link);
    /* streams mode: a host staging buffer is allocated when the bytes arrive over UCX (a CUDA
     * IPC copy needs none) */
    f->host = w->streams_mode ? NULL : c->ptr;
    f->req_id = ++w->next_req_id;
    if (gs_u64map_put(&w->fetches, f->req_id, (uint64_t)(uintptr_t)f) != GS_OK) {
        status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the fetch table");
        goto err_chunk;
    }
    status = gs__wstore_insert(w, c);     /* as a fetched copy: later users share it */
    if (status != GS_OK) {
        gs_u64map_del(&w->fetches, f->req_id);
        goto err_chunk;
    }
    f->t_start = gs_now_ns();
    f->deadline = f->t_start + (uint64_t)w->fetch_timeout_ms * 1000000ull;
    f->state = GS_WFETCH_REQUESTED;
    GS_LOG_TRACE("fetch %llu: (%llu, %llu), %llu bytes from worker %llu",
                 (unsigned long long)f->req_id, (unsigned long long)graph,
                 (unsigned long long)task, (unsigned long long)nbytes, (unsigned long long)from);
    status = gs__wfetch_post_req(w, f, gs__wipc_want(w, p));
    if (status != GS_OK) {
        gs__wstore_detach(w, c);
        gs_u64map_del(&w->fetches, f->req_id);
        goto err_chunk;
    }
    gs__wlist_push(&p->fetches, &f->peer_link);
    gs__wchunk_ref(c);                    /* the fetch's reference; the caller gets the other */
    *c_p = c;
    return GS_OK;

err_chunk:
    gs_free(f);
    gs__wchunk_unref(w, c);
    return status;
}

void gs__wfetch_defer(gs_worker_t *w, gs_wdefer_t *d)
{
    gs__wdefer_push(w, d);
}

ucp_ep_h gs__wpeer_ep_by_id(gs_worker_t *w, uint64_t id)
{
    uint64_t v;
    gs_wep_t *epc;
    if (!gs_u64map_get(&w->peers, id, &v)) return NULL;
    if (gs__wpeer_ep(w, (gs_wpeer_t *)(uintptr_t)v, &epc) != GS_OK) return NULL;
    return epc->ep;
}

void gs__wucx_tick(gs_worker_t *w)
{
    uint64_t now = gs_now_ns();

    gs__wipc_tick(w);

    /* one pass: failing a fetch deletes it (a tombstone) and starts no new fetch */
    for (size_t i = 0; i < w->fetches.cap; i++) {
        gs_wfetch_t *f;
        if (w->fetches.keys[i] >= GS_U64MAP_TOMB) continue;
        f = (gs_wfetch_t *)(uintptr_t)w->fetches.vals[i];
        if (f->deadline > now) continue;
        gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "no answer from worker %llu (%s) within "
                        "%u ms", (unsigned long long)(f->peer ? f->peer->id : 0),
                        f->peer ? f->peer->name : "?", w->fetch_timeout_ms);
    }
}

/* ---------------------------------------------------------------- AM handlers */

static ucs_status_t gs__wam_request(gs_worker_t *w, const void *header, size_t header_len,
                                    int ipc, const ucp_am_recv_param_t *param)
{
    gs_msg_t m;
    gs_wdefer_t *d;

    if (gs_msg_decode(header, header_len, &m) != GS_OK) {
        GS_LOG_WARN("malformed fetch request from a peer (%zu header bytes): %s", header_len,
                    gs_last_error());
        return UCS_OK;
    }
    if (m.type != GS_MSG_FETCH_REQ) {
        GS_LOG_WARN("unexpected %s message on the fetch-request channel",
                    gs_msg_type_name(m.type));
        gs_msg_cleanup(&m);
        return UCS_OK;
    }
    d = gs_calloc(1, sizeof(*d), "ucx deferred");
    if (d == NULL) {
        GS_LOG_ERROR("out of memory answering fetch %llu", (unsigned long long)m.u.fetch_req.req_id);
        gs_msg_cleanup(&m);
        return UCS_OK;
    }
    d->kind = GS_WDEFER_SERVE;
    d->ipc = ipc;
    d->req_id = m.u.fetch_req.req_id;
    d->graph = m.u.fetch_req.graph_id;
    d->task = m.u.fetch_req.task_id;
    d->from_worker = m.u.fetch_req.from_worker;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) d->reply_ep = param->reply_ep;
    gs_msg_cleanup(&m);
    gs__wdefer_push(w, d);
    return UCS_OK;
}

static ucs_status_t gs__wam_fetch_req(void *arg, const void *header, size_t header_len,
                                      void *data, size_t len, const ucp_am_recv_param_t *param)
{
    (void)data;
    (void)len;
    return gs__wam_request(arg, header, header_len, 0, param);
}

/* Like FETCH_REQ; the payload is the requester's host key: a CUDA IPC lease is possible when
 * it is ours. A rendezvous payload (not a key) is never read: UCX drops it on return. */
static ucs_status_t gs__wam_ipc_req(void *arg, const void *header, size_t header_len, void *data,
                                    size_t len, const ucp_am_recv_param_t *param)
{
    gs_worker_t *w = arg;
    int ipc = !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
              gs__wipc_same_host(w, data, len);
    return gs__wam_request(w, header, header_len, ipc, param);
}

static ucs_status_t gs__wam_data(void *arg, const void *header, size_t header_len, void *data,
                                 size_t len, const ucp_am_recv_param_t *param)
{
    gs_worker_t *w = arg;
    gs_msg_t m;
    gs_wfetch_t *f;
    gs_wdefer_t *d;
    uint64_t v;
    ucs_status_t ret = UCS_OK;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    size_t msg_len = header_len;
    uint64_t csum = 0;
    int csum_on = 0;

    if (w->transfer_checksum) {
        const unsigned char *tr = header_len >= GS__CSUM_TRAILER
                                      ? (const unsigned char *)header + header_len - GS__CSUM_TRAILER
                                      : NULL;
        if (tr == NULL || tr[8] > 1) {
            GS_LOG_WARN("data message from a peer without a checksum trailer (%zu header bytes; "
                        "is every worker started with --transfer-checksum?)", header_len);
            return UCS_OK;
        }
        memcpy(&csum, tr, 8);
        csum_on = tr[8];
        msg_len -= GS__CSUM_TRAILER;
    }
    if (gs_msg_decode(header, msg_len, &m) != GS_OK) {
        GS_LOG_WARN("malformed data message from a peer (%zu header bytes): %s", header_len,
                    gs_last_error());
        return UCS_OK;     /* a rendezvous descriptor is dropped by UCX */
    }
    if (m.type != GS_MSG_DATA) {
        GS_LOG_WARN("unexpected %s message on the data channel", gs_msg_type_name(m.type));
        gs_msg_cleanup(&m);
        return UCS_OK;
    }
    if (!gs_u64map_get(&w->fetches, m.u.data.req_id, &v)) {
        GS_LOG_DEBUG("data for unknown or expired fetch %llu dropped",
                     (unsigned long long)m.u.data.req_id);
        goto out;
    }
    f = (gs_wfetch_t *)(uintptr_t)v;
    if (f->state != GS_WFETCH_REQUESTED || f->chunk->graph->id != m.u.data.graph_id ||
        f->chunk->task != m.u.data.task_id) {
        gs__wfetch_fail(w, f, GS_ERR_PROTO, "worker %llu answered fetch %llu with key (%llu, "
                        "%llu)", (unsigned long long)(f->peer ? f->peer->id : 0),
                        (unsigned long long)f->req_id, (unsigned long long)m.u.data.graph_id,
                        (unsigned long long)m.u.data.task_id);
        goto out;
    }
    if (m.u.data.status != GS_OK) {
        gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "worker %llu (%s) does not have it (%s)",
                        (unsigned long long)f->peer->id, f->peer->name,
                        gs_status_string((gs_status_t)m.u.data.status));
        goto out;
    }
    if (len != f->chunk->nbytes) {
        gs__wfetch_fail(w, f, GS_ERR_PROTO, "worker %llu sent %zu bytes, expected %llu",
                        (unsigned long long)f->peer->id, len,
                        (unsigned long long)f->chunk->nbytes);
        goto out;
    }
    f->csum = csum;
    f->csum_on = (uint8_t)csum_on;
    if (f->host == NULL && rndv && w->ucx_cuda && len >= GS_W_UCX_CUDA_MIN) {
        f->host = f->chunk->ptr;      /* device memory: UCX receives into it */
        f->dev_recv = 1;
    }
    if (f->host == NULL) {
        f->host = gs_malloc(len ? len : 1, "fetch staging");
        if (f->host == NULL) {
            gs__wfetch_fail(w, f, GS_ERR_NO_MEMORY, "out of host memory for a %zu-byte staging "
                            "buffer", len);
            goto out;
        }
        f->host_owned = 1;
    }
    if (rndv) {
        d = gs_calloc(1, sizeof(*d), "ucx deferred");
        if (d == NULL) {
            gs__wfetch_fail(w, f, GS_ERR_NO_MEMORY, "out of memory receiving the chunk");
            goto out;
        }
        d->kind = GS_WDEFER_RNDV;
        d->req_id = f->req_id;
        d->desc = data;
        d->len = len;
        f->state = GS_WFETCH_RECEIVING;
        gs__wdefer_push(w, d);
        ret = UCS_INPROGRESS;
        goto out;
    }
    if (len) memcpy(f->host, data, len);
    gs__wfetch_received(w, f);
out:
    gs_msg_cleanup(&m);
    return ret;
}

static void gs__wrecv_cb(void *req, ucs_status_t st, size_t len, void *arg)
{
    gs_wfetch_t *f = arg;
    gs_worker_t *w = f->w;

    ucp_request_free(req);
    f->recv_req = NULL;
    w->ucp_outstanding--;
    if (f->dead) {
        gs__wfetch_free(w, f);
        return;
    }
    f->state = GS_WFETCH_REQUESTED;
    if (st != UCS_OK) {
        gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "receiving from worker %llu failed: %s",
                        (unsigned long long)(f->peer ? f->peer->id : 0), ucs_status_string(st));
        return;
    }
    gs__wfetch_received(w, f);
}

/* ---------------------------------------------------------------- serving (owner side) */

static ucp_ep_h gs__wserve_ep(gs_worker_t *w, uint64_t from, ucp_ep_h reply_ep)
{
    uint64_t v;
    gs_wep_t *epc;
    if (gs_u64map_get(&w->peers, from, &v) &&
        gs__wpeer_ep(w, (gs_wpeer_t *)(uintptr_t)v, &epc) == GS_OK)
        return epc->ep;
    return reply_ep;
}

static void gs__wserve_post(gs_worker_t *w, gs_wsend_t *s, ucp_ep_h ep)
{
    gs_msg_t m;
    gs_status_t status;

    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_DATA;
    m.u.data.req_id = s->req_id;
    m.u.data.graph_id = s->graph;
    m.u.data.task_id = s->task;
    m.u.data.status = s->status;
    status = gs_msg_encode(&m, &s->header);
    if (status == GS_OK && w->transfer_checksum) {
        unsigned char tr[GS__CSUM_TRAILER] = {0};
        if (s->status == GS_OK && !s->payload_cuda) {
            uint64_t c = gs__wchecksum(s->host, (size_t)s->chunk->nbytes);
            memcpy(tr, &c, 8);
            tr[8] = 1;
            if (w->test_corrupt && s->chunk->nbytes > 0) {
                /* tests: send a corrupted copy (never touch the stored chunk) */
                unsigned char *copy = gs_malloc((size_t)s->chunk->nbytes, "corrupt copy");
                if (copy != NULL) {
                    memcpy(copy, s->host, (size_t)s->chunk->nbytes);
                    copy[s->chunk->nbytes / 2] ^= 0x40;
                    if (s->host_owned) gs_free(s->host);
                    s->host = copy;
                    s->host_owned = 1;
                }
            }
        }
        status = gs_buf_append(&s->header, tr, sizeof(tr));
    }
    if (status != GS_OK || ep == NULL) {
        GS_LOG_WARN("cannot answer fetch %llu of worker %llu: %s", (unsigned long long)s->req_id,
                    (unsigned long long)s->from_worker,
                    ep == NULL ? "no endpoint to it" : gs_last_error());
        gs__wsend_free(w, s);
        return;
    }
    {
        ucs_status_t st = gs__wsend_post(w, s, ep, GS_AM_DATA,
                                         s->status == GS_OK ? s->host : NULL,
                                         s->status == GS_OK ? (size_t)s->chunk->nbytes : 0, 0);
        if (st != UCS_INPROGRESS) gs__wsend_done(w, s, st);
    }
}

void gs__wserve_answer(gs_worker_t *w, gs_wsend_t *s)
{
    gs__wserve_post(w, s, gs__wserve_ep(w, s->from_worker, NULL));
}

/* Copy chunk @a s->chunk to a host staging buffer on a stream; gs__wsend_staged follows. */
static gs_status_t gs__wsend_stage(gs_worker_t *w, gs_wsend_t *s)
{
    gs_wnote_t *n;
    gs_status_t status;
    int st = gs__wexec_pick_stream(w);

    s->host = gs_malloc(s->chunk->nbytes ? (size_t)s->chunk->nbytes : 1, "send staging");
    n = gs_calloc(1, sizeof(*n), "send note");
    if (s->host == NULL || n == NULL) {
        gs_free(n);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of host memory staging %llu bytes",
                            (unsigned long long)s->chunk->nbytes);
    }
    s->host_owned = 1;
    status = w->ops->copy_to_host(w->ctx, w->streams[st], s->host, s->chunk->ptr,
                                  (size_t)s->chunk->nbytes);
    if (status != GS_OK) {
        gs_free(n);
        return status;
    }
    n->w = w;
    n->kind = GS_WNOTE_SEND_STAGED;
    n->obj = s;
    status = w->ops->notify(w->ctx, w->streams[st], gs__wnote_cb, n);
    if (status != GS_OK) {
        gs_free(n);
        status = w->ops->sync(w->ctx, w->streams[st]);
        if (status != GS_OK) return status;
        gs__wsend_staged(w, s, GS_OK);
        return GS_OK;
    }
    s->stream = st;
    return GS_OK;
}

static void gs__wsend_release_cb(void *arg, gs_status_t status)
{
    gs_wsend_t *s = arg;
    (void)status;   /* a failed write closes the connection; gsched re-routes the gather */
    gs__wsend_free(s->w, s);
}

/* Answer a gather with @a s's bytes (s->host, the chunk's size) without copying them: the
 * connection writes them in place and frees @a s (chunk reference, staging buffer) once done.
 * Consumes @a s in every case. */
static void gs__wsend_to_scheduler(gs_worker_t *w, gs_wsend_t *s)
{
    gs_msg_t m;
    gs_status_t status;
    if (w->conn == NULL) {
        gs__wsend_free(w, s);
        return;
    }
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_DATA;
    m.u.data.req_id = s->req_id;
    m.u.data.graph_id = s->graph;
    m.u.data.task_id = s->task;
    m.u.data.status = GS_OK;
    m.u.data.data.data = s->host;
    m.u.data.data.len = (size_t)s->chunk->nbytes;
    status = gs_conn_send_data(w->conn, &m, gs__wsend_release_cb, s);
    if (status != GS_OK) {
        if (status != GS_ERR_CONN_CLOSED)
            GS_LOG_ERROR("sending data to gsched failed: %s", gs_last_error());
        gs__wsend_free(w, s);
    }
}

void gs__wsend_staged(gs_worker_t *w, gs_wsend_t *s, gs_status_t status)
{
    if (s->pipe) {
        gs__wpipe_staged(w, s, status);
        return;
    }
    s->stream = -1;
    if (w->state != GS_WSTATE_RUNNING) {
        gs__wsend_free(w, s);
        return;
    }
    if (status != GS_OK) {
        GS_LOG_WARN("copying (%llu, %llu) to the host failed: %s", (unsigned long long)s->graph,
                    (unsigned long long)s->task, gs_status_string(status));
        s->status = status;
    }
    if (s->to_scheduler) {
        if (s->status == GS_OK) {
            gs__wsend_to_scheduler(w, s);
            return;
        }
        gs__wdata_to_scheduler(w, s->req_id, s->graph, s->task, s->status, NULL, 0);
        gs__wsend_free(w, s);
        return;
    }
    gs__wserve_post(w, s, gs__wserve_ep(w, s->from_worker, NULL));
}

static void gs__wserve(gs_worker_t *w, gs_wdefer_t *d)
{
    gs_wchunk_t *c = gs__wstore_find(w, d->graph, d->task);
    gs_wsend_t *s;

    if (w->state != GS_WSTATE_RUNNING) return;
    s = gs__wsend_new(w);
    if (s == NULL) {
        GS_LOG_ERROR("out of memory answering fetch %llu", (unsigned long long)d->req_id);
        return;
    }
    s->req_id = d->req_id;
    s->graph = d->graph;
    s->task = d->task;
    s->from_worker = d->from_worker;
    if (c == NULL || c->state != GS_WCHUNK_READY) {
        GS_LOG_DEBUG("worker %llu asked for (%llu, %llu), which is not here",
                     (unsigned long long)d->from_worker, (unsigned long long)d->graph,
                     (unsigned long long)d->task);
        s->status = GS_ERR_NOT_FOUND;
        gs__wserve_post(w, s, gs__wserve_ep(w, d->from_worker, d->reply_ep));
        return;
    }
    if (d->ipc && gs__wipc_serve(w, d, c, gs__wserve_ep(w, d->from_worker, d->reply_ep))) {
        gs__wsend_free(w, s);
        return;
    }
    gs__wchunk_ref(c);
    s->chunk = c;
    if (w->streams_mode && w->ucx_cuda && c->nbytes >= GS_W_UCX_CUDA_MIN) {
        /* UCX moves device memory itself (cuda_copy / cuda_ipc / GPUDirect RDMA) */
        s->host = c->ptr;
        s->payload_cuda = 1;
        gs__wserve_post(w, s, gs__wserve_ep(w, d->from_worker, d->reply_ep));
        return;
    }
    if (w->streams_mode && gs__wpipe_serve(w, s)) return;   /* in slices */
    if (w->streams_mode) {
        gs_status_t status = gs__wsend_stage(w, s);
        if (status != GS_OK) {
            GS_LOG_WARN("staging (%llu, %llu) for worker %llu failed: %s",
                        (unsigned long long)d->graph, (unsigned long long)d->task,
                        (unsigned long long)d->from_worker, gs_last_error());
            s->status = status;
            gs__wserve_post(w, s, gs__wserve_ep(w, d->from_worker, d->reply_ep));
        }
        return;
    }
    s->host = c->ptr;
    gs__wserve_post(w, s, gs__wserve_ep(w, d->from_worker, d->reply_ep));
}

void gs__wgather(gs_worker_t *w, uint64_t req_id, uint64_t graph, uint64_t task)
{
    gs_wchunk_t *c = gs__wstore_find(w, graph, task);
    gs_wsend_t *s;

    if (c == NULL || !c->owned || c->state != GS_WCHUNK_READY) {
        gs__wdata_to_scheduler(w, req_id, graph, task, GS_ERR_NOT_FOUND, NULL, 0);
        return;
    }
    if (c->nbytes > GS_PROTO_DEFAULT_MAX_FRAME - 256) {
        GS_LOG_WARN("chunk (%llu, %llu) has %llu bytes, more than one frame may carry",
                    (unsigned long long)graph, (unsigned long long)task,
                    (unsigned long long)c->nbytes);
        gs__wdata_to_scheduler(w, req_id, graph, task, GS_ERR_MSG_TOO_LARGE, NULL, 0);
        return;
    }
    s = gs__wsend_new(w);
    if (s == NULL) {
        gs__wdata_to_scheduler(w, req_id, graph, task, GS_ERR_NO_MEMORY, NULL, 0);
        return;
    }
    s->to_scheduler = 1;
    s->req_id = req_id;
    s->graph = graph;
    s->task = task;
    gs__wchunk_ref(c);
    s->chunk = c;
    if (!w->streams_mode) {
        s->host = c->ptr;   /* host memory: written from the chunk itself, which s keeps alive */
        gs__wsend_to_scheduler(w, s);
        return;
    }
    {
        gs_status_t st = gs__wsend_stage(w, s);
        if (st == GS_OK) return;
        GS_LOG_WARN("staging (%llu, %llu) for gsched failed: %s", (unsigned long long)graph,
                    (unsigned long long)task, gs_last_error());
        gs__wsend_free(w, s);
        gs__wdata_to_scheduler(w, req_id, graph, task, st, NULL, 0);
    }
}

/* ---------------------------------------------------------------- deferred processing */

static void gs__wpeer_fail_fetches(gs_worker_t *w, gs_wpeer_t *p, const char *why)
{
    while (!gs__wlist_empty(&p->fetches)) {
        gs_wfetch_t *f = GS_WCONTAINER(p->fetches.next, gs_wfetch_t, peer_link);
        gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "worker %llu (%s) %s",
                        (unsigned long long)p->id, p->name, why);
    }
}

static void gs__wucx_run_deferred(gs_worker_t *w)
{
    while (w->defer_head) {
        gs_wdefer_t *d = w->defer_head;
        w->defer_head = d->next;
        if (w->defer_head == NULL) w->defer_tail = NULL;
        if (d->kind == GS_WDEFER_SERVE) {
            gs__wserve(w, d);
        } else if (d->kind == GS_WDEFER_IPC_COPY) {
            gs__wipc_copy(w, d);
        } else if (d->kind == GS_WDEFER_RNDV_PART) {
            gs__wpipe_recv(w, d);
        } else if (d->kind == GS_WDEFER_RNDV) {
            uint64_t v;
            gs_wfetch_t *f = NULL;
            if (gs_u64map_get(&w->fetches, d->req_id, &v)) f = (gs_wfetch_t *)(uintptr_t)v;
            if (f == NULL || f->dead || w->state != GS_WSTATE_RUNNING) {
                ucp_am_data_release(w->ucp_worker, d->desc);
            } else {
                ucp_request_param_t p;
                void *r;
                memset(&p, 0, sizeof(p));
                p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
                p.cb.recv_am = gs__wrecv_cb;
                p.user_data = f;
                if (f->dev_recv) {
                    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
                    p.memory_type = UCS_MEMORY_TYPE_CUDA;
                }
                r = ucp_am_recv_data_nbx(w->ucp_worker, d->desc, f->host, d->len, &p);
                if (r == NULL) {
                    f->state = GS_WFETCH_REQUESTED;
                    gs__wfetch_received(w, f);
                } else if (UCS_PTR_IS_ERR(r)) {
                    f->state = GS_WFETCH_REQUESTED;
                    gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "receiving from worker %llu "
                                    "failed: %s", (unsigned long long)(f->peer ? f->peer->id : 0),
                                    ucs_status_string(UCS_PTR_STATUS(r)));
                } else {
                    f->recv_req = r;
                    w->ucp_outstanding++;
                }
            }
        }
        gs_free(d);
    }
    if (w->ep_fail_pending) {
        w->ep_fail_pending = 0;
        for (size_t i = 0; i < w->peers.cap; i++) {
            gs_wpeer_t *p;
            char why[160];
            if (w->peers.keys[i] >= GS_U64MAP_TOMB) continue;
            p = (gs_wpeer_t *)(uintptr_t)w->peers.vals[i];
            if (!p->failed || p->epc == NULL) continue;
            snprintf(why, sizeof(why), "was lost: %s", ucs_status_string(p->fail_status));
            gs__wep_close(w, p->epc, 0);
            p->epc = NULL;
            p->failed = 0;
            gs__wpeer_fail_fetches(w, p, why);
        }
    }
}

void gs__wucx_progress(gs_worker_t *w)
{
    ucs_status_t st;

    if (w->ucp_worker == NULL || w->in_progress) return;
    w->in_progress = 1;
    for (;;) {
        while (ucp_worker_progress(w->ucp_worker)) gs__wucx_run_deferred(w);
        gs__wucx_run_deferred(w);
        st = ucp_worker_arm(w->ucp_worker);
        if (st == UCS_ERR_BUSY) continue;
        if (st != UCS_OK) GS_LOG_ERROR("ucp_worker_arm: %s", ucs_status_string(st));
        break;
    }
    w->in_progress = 0;
}

/* ---------------------------------------------------------------- peers */

static void gs__wpeer_free(gs_worker_t *w, gs_wpeer_t *p, const char *why, int flush)
{
    gs__wpeer_fail_fetches(w, p, why);
    if (p->epc) gs__wep_close(w, p->epc, flush);
    gs_free(p->name);
    gs_free(p->addr);
    gs_free(p);
}

void gs__wucx_peers(gs_worker_t *w, const gs_msg_peers_t *m)
{
    uint32_t i;
    uint64_t v;

    for (i = 0; i < m->nremoved; i++) {
        if (!gs_u64map_get(&w->peers, m->removed[i], &v)) continue;
        gs_u64map_del(&w->peers, m->removed[i]);
        gs__wipc_peer_gone(w, m->removed[i]);
        GS_LOG_INFO("peer worker %llu (%s) removed", (unsigned long long)m->removed[i],
                    ((gs_wpeer_t *)(uintptr_t)v)->name);
        gs__wpeer_free(w, (gs_wpeer_t *)(uintptr_t)v, "left the cluster", 0);
    }
    for (i = 0; i < m->nadded; i++) {
        const gs_peer_info_t *in = &m->added[i];
        gs_wpeer_t *p;
        if (in->id == w->id) continue;
        if (in->id >= GS_U64MAP_TOMB || in->ucx_address.len == 0) {
            GS_LOG_WARN("peer %llu announced without a usable id or address; ignored",
                        (unsigned long long)in->id);
            continue;
        }
        if (gs_u64map_get(&w->peers, in->id, &v)) {
            p = (gs_wpeer_t *)(uintptr_t)v;
            if (p->addr_len == in->ucx_address.len &&
                memcmp(p->addr, in->ucx_address.data, p->addr_len) == 0)
                continue;
            gs_u64map_del(&w->peers, in->id);
            gs__wpeer_free(w, p, "re-registered with a new address", 0);
        }
        p = gs_calloc(1, sizeof(*p), "peer");
        if (p) {
            p->id = in->id;
            p->name = gs_strdup(in->name.len ? (const char *)in->name.data : "?", "peer name");
            p->addr = gs_malloc(in->ucx_address.len, "peer address");
            gs__wlist_init(&p->fetches);
        }
        if (p == NULL || p->name == NULL || p->addr == NULL ||
            gs_u64map_put(&w->peers, p->id, (uint64_t)(uintptr_t)p) != GS_OK) {
            GS_LOG_ERROR("out of memory recording peer %llu; fetches from it will fail",
                         (unsigned long long)in->id);
            if (p) {
                gs_free(p->name);
                gs_free(p->addr);
                gs_free(p);
            }
            continue;
        }
        memcpy(p->addr, in->ucx_address.data, in->ucx_address.len);
        p->addr_len = in->ucx_address.len;
        GS_LOG_DEBUG("peer worker %llu (%s) added", (unsigned long long)p->id, p->name);
    }
    w->st.npeers = (uint32_t)w->peers.len;
}

/* ---------------------------------------------------------------- setup / teardown */

static void gs__wucx_poll_cb(uv_poll_t *h, int status, int events)
{
    gs_worker_t *w = h->data;
    gs__wucx_progress(w);
    gs__wexec_pump(w);
}

gs_status_t gs__wucx_init(gs_worker_t *w)
{
    ucp_params_t params;
    ucp_config_t *cfg = NULL;
    ucp_context_attr_t ca;
    ucp_worker_params_t wp;
    ucp_am_handler_param_t hp;
    ucs_status_t st;
    int rc;

    gs__wlist_init(&w->sends);
    gs__wlist_init(&w->closing);
    gs__wlist_init(&w->dead_fetches);
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_config_read");
    st = ucp_init(&params, cfg, &w->ucp_ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        w->ucp_ctx = NULL;
        return gs__ucs_err(GS_ERR_UCX, st, "ucp_init");
    }
    memset(&ca, 0, sizeof(ca));
    ca.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(w->ucp_ctx, &ca) == UCS_OK) {
        char types[256] = "";
        size_t off = 0;
        for (int t = 0; t < UCS_MEMORY_TYPE_LAST; t++) {
            if (!(ca.memory_types & UCS_BIT(t))) continue;
            off += (size_t)snprintf(types + off, off < sizeof(types) ? sizeof(types) - off : 0,
                                    "%s%s", off ? ", " : "", ucs_memory_type_names[t]);
        }
        if (w->streams_mode && !(ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)))
            GS_LOG_INFO("ucx memory types: %s; device chunks are staged through host buffers",
                        types);
        else if (w->streams_mode) {
            w->ucx_cuda = 1;
            GS_LOG_INFO("ucx memory types: %s: device chunks go to UCX directly (rendezvous); "
                        "small ones are staged", types);
        }
        else
            GS_LOG_DEBUG("ucx memory types: %s", types);
    }
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(w->ucp_ctx, &wp, &w->ucp_worker);
    if (st != UCS_OK) {
        w->ucp_worker = NULL;
        return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_create");
    }
    st = ucp_worker_get_address(w->ucp_worker, &w->ucp_addr, &w->ucp_addr_len);
    if (st != UCS_OK) {
        w->ucp_addr = NULL;
        return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_get_address");
    }
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.arg = w;
    hp.id = GS_AM_FETCH_REQ;
    hp.cb = gs__wam_fetch_req;
    st = ucp_worker_set_am_recv_handler(w->ucp_worker, &hp);
    if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_set_am_recv_handler");
    hp.id = GS_AM_DATA;
    hp.cb = gs__wam_data;
    st = ucp_worker_set_am_recv_handler(w->ucp_worker, &hp);
    if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_set_am_recv_handler");
    {
        static const struct {
            unsigned id;
            ucp_am_recv_callback_t cb;
        } ipc_am[] = {{GS_AM_IPC_REQ, gs__wam_ipc_req},
                      {GS_AM_IPC_GRANT, gs__wam_ipc_grant},
                      {GS_AM_IPC_RELEASE, gs__wam_ipc_release},
                      {GS_AM_DATA_PART, gs__wam_data_part}};
        for (size_t i = 0; i < sizeof(ipc_am) / sizeof(ipc_am[0]); i++) {
            hp.id = ipc_am[i].id;
            hp.cb = ipc_am[i].cb;
            st = ucp_worker_set_am_recv_handler(w->ucp_worker, &hp);
            if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_set_am_recv_handler");
        }
    }
    gs__wipc_init(w);
    st = ucp_worker_get_efd(w->ucp_worker, &w->ucp_efd);
    if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_get_efd");
    rc = uv_poll_init(w->loop, &w->ucp_poll, w->ucp_efd);
    if (rc != 0) return gs_error_set(GS_ERR_IO, "uv_poll_init on the ucx event fd: %s",
                                     uv_strerror(rc));
    w->ucp_poll.data = w;
    w->ucp_poll_open = 1;
    w->nhandles_open++;
    rc = uv_poll_start(&w->ucp_poll, UV_READABLE, gs__wucx_poll_cb);
    if (rc != 0) return gs_error_set(GS_ERR_IO, "uv_poll_start on the ucx event fd: %s",
                                     uv_strerror(rc));
    uv_unref((uv_handle_t *)&w->ucp_poll);
    if (GS_LOG_LEVEL_DEBUG <= gs__log_level) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (f) {
            ucp_worker_print_info(w->ucp_worker, f);
            fclose(f);
            for (char *line = buf, *nl; line && *line; line = nl) {
                nl = strchr(line, '\n');
                if (nl) *nl++ = '\0';
                if (strstr(line, "#") == line && strlen(line) > 2)
                    GS_LOG_DEBUG("ucx worker: %s", line + 1);
            }
            free(buf);
        }
    }
    return GS_OK;
}

void gs__wucx_shutdown(gs_worker_t *w)
{
    uint64_t deadline;

    if (w->ucp_worker == NULL) return;
    /* fail every fetch (their tasks are gone already) */
    for (size_t i = 0; i < w->fetches.cap; i++) {
        if (w->fetches.keys[i] >= GS_U64MAP_TOMB) continue;
        gs__wfetch_fail(w, (gs_wfetch_t *)(uintptr_t)w->fetches.vals[i], GS_ERR_CANCELED,
                        "the worker is stopping");
    }
    for (size_t i = 0; i < w->peers.cap; i++) {
        gs_wpeer_t *p;
        if (w->peers.keys[i] >= GS_U64MAP_TOMB) continue;
        p = (gs_wpeer_t *)(uintptr_t)w->peers.vals[i];
        gs__wpeer_free(w, p, "is unreachable: the worker is stopping", w->ucx_shm);
    }
    gs_u64map_cleanup(&w->peers);
    /* cancel what is still outstanding, then progress (bounded) until it has all returned */
    for (gs_wlink_t *e = w->sends.next; e != &w->sends; e = e->next) {
        gs_wsend_t *s = GS_WCONTAINER(e, gs_wsend_t, link);
        if (s->ucp_req) ucp_request_cancel(w->ucp_worker, s->ucp_req);
    }
    deadline = gs_now_ns() + 2000000000ull;
    while ((w->ucp_outstanding || w->defer_head) && gs_now_ns() < deadline) {
        w->in_progress = 1;
        ucp_worker_progress(w->ucp_worker);
        w->in_progress = 0;
        gs__wucx_run_deferred(w);
    }
    if (w->ucp_outstanding)
        GS_LOG_WARN("%llu ucx operations still outstanding at shutdown",
                    (unsigned long long)w->ucp_outstanding);
    w->st.npeers = 0;
}

void gs__wucx_cleanup(gs_worker_t *w)
{
    /* sends whose UCX operation never returned: drop them (UCX frees its requests with the
     * worker) */
    while (!gs__wlist_empty(&w->sends)) {
        gs_wsend_t *s = GS_WCONTAINER(w->sends.next, gs_wsend_t, link);
        gs__wsend_free(w, s);
    }
    while (!gs__wlist_empty(&w->closing)) {
        gs_wep_t *epc = GS_WCONTAINER(w->closing.next, gs_wep_t, link);
        gs__wlist_del(&epc->link);
        gs_free(epc);
    }
    while (w->defer_head) {
        gs_wdefer_t *d = w->defer_head;
        w->defer_head = d->next;
        if ((d->kind == GS_WDEFER_RNDV || d->kind == GS_WDEFER_RNDV_PART) && w->ucp_worker)
            ucp_am_data_release(w->ucp_worker, d->desc);
        if (d->kind == GS_WDEFER_RNDV_PART) gs_free(d->ctx);
        gs_free(d);
    }
    w->defer_tail = NULL;
    while (!gs__wlist_empty(&w->dead_fetches)) {
        gs_wfetch_t *f = GS_WCONTAINER(w->dead_fetches.next, gs_wfetch_t, peer_link);
        gs__wfetch_free(w, f);
    }
    /* fetches still waiting for a receive callback */
    for (size_t i = 0; i < w->fetches.cap; i++) {
        gs_wfetch_t *f;
        if (w->fetches.keys[i] >= GS_U64MAP_TOMB) continue;
        f = (gs_wfetch_t *)(uintptr_t)w->fetches.vals[i];
        gs__wfetch_detach(w, f);
        gs__wfetch_free(w, f);
    }
    gs_u64map_cleanup(&w->fetches);
    gs_u64map_cleanup(&w->peers);
    gs__wipc_cleanup(w);
    gs__wpipe_cleanup(w);
    if (w->ucp_addr) ucp_worker_release_address(w->ucp_worker, w->ucp_addr);
    if (w->ucp_worker) ucp_worker_destroy(w->ucp_worker);
    if (w->ucp_ctx) ucp_cleanup(w->ucp_ctx);
    w->ucp_addr = NULL;
    w->ucp_worker = NULL;
    w->ucp_ctx = NULL;
}
