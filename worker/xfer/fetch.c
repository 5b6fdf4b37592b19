/* Fetches of gworker, the requester side: a FETCH_REQ to the owner (ucx.c endpoints), the DATA
 * answer (eager bytes, a rendezvous receive, slices (pipe.c) or an IPC grant (ipc.c)), the copy
 * into backend memory when the bytes were staged on the host, timeouts and failures. A fetch
 * ends READY (gs__wexec_input_ready) or failed (its waiting tasks fail). */
#include "worker/xfer/xfer_int.h"

#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* ---------------------------------------------------------------- fetch (requester side) */

void gs__wfetch_free(gs_worker_t *w, gs_wfetch_t *f)
{
    gs__wlist_del(&f->peer_link);     /* w->xfer->dead_fetches, if there */
    if (f->host_owned) gs_free(f->host);
    gs__wchunk_unref(w, f->chunk);
    gs_free(f);
}

/* Detach from the map and the peer; the caller completes or fails the chunk. */
void gs__wfetch_detach(gs_worker_t *w, gs_wfetch_t *f)
{
    gs_u64map_del(&w->xfer->fetches, f->req_id);
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
        (void)gs_idtab_del(&c->graph->chunks, c->task);
        c->in_map = 0;
    }
    gs__wexec_input_failed(w, c, status, msg, f->damaged);
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
        gs__wlist_push(&w->xfer->dead_fetches, &f->peer_link);
        if (f->recv_req) ucp_request_cancel(w->xfer->ucp_worker, f->recv_req);
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
    if (st != GS_OK) {
        gs_free(n);
        return st;
    }
    n->kind = GS_WNOTE_FETCH_STAGED;
    n->obj = f;
    f->parts++;
    gs__wnote_arm(w, w->streams[sp], n);
    return GS_OK;
}

void gs__wfetch_received(gs_worker_t *w, gs_wfetch_t *f)
{
    gs_status_t status;
    int s;

    if (f->mac_on && !f->dev_recv) {
        const uint64_t bind[5] = {f->req_id, f->chunk->graph->id, f->chunk->task, 0, f->chunk->nbytes};
        if (!gs__wpmac_check(w, f->peer ? f->peer->id : 0, bind, f->host, (size_t)f->chunk->nbytes,
                             f->mac_counter, f->mac_tag)) {
            f->damaged = 1;
            gs__wfetch_fail(w, f, GS_ERR_AUTH, "chunk (%llu, %llu) from worker %llu failed its payload MAC "
                            "(altered on the way, or sent by a peer without the cluster's key); not used",
                            (unsigned long long)f->chunk->graph->id,
                            (unsigned long long)f->chunk->task,
                            (unsigned long long)(f->peer ? f->peer->id : 0));
            return;
        }
    }
    if (f->csum_on && !f->dev_recv) {
        uint64_t got = gs__wchecksum(f->host, (size_t)f->chunk->nbytes);
        if (got != f->csum) {
            f->damaged = 1;
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
    st = ipc ? gs__wsend_post(w, s, epc->ep, GS_AM_IPC_REQ, w->xfer->host_key, sizeof(w->xfer->host_key),
                              UCP_AM_SEND_FLAG_REPLY)
             : gs__wsend_post(w, s, epc->ep, GS_AM_FETCH_REQ, NULL, 0, UCP_AM_SEND_FLAG_REPLY);
    if (st == UCS_INPROGRESS) return GS_OK;
    gs__wsend_free(w, s);
    if (st == UCS_OK) return GS_OK;
    return gs_error_set(GS_ERR_WORKER_LOST, "sending the request to worker %llu (%s) failed: %s",
                        (unsigned long long)p->id, p->name, ucs_status_string(st));
}

gs_status_t gs__xfer_fetch(gs_worker_t *w, uint64_t graph, uint64_t task, uint64_t from,
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
    if (!gs_u64map_get(&w->xfer->peers, from, &v))
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
    f->req_id = ++w->xfer->next_req_id;
    if (gs_u64map_put(&w->xfer->fetches, f->req_id, (uint64_t)(uintptr_t)f) != GS_OK) {
        status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the fetch table");
        goto err_chunk;
    }
    status = gs__wstore_insert(w, c);     /* as a fetched copy: later users share it */
    if (status != GS_OK) {
        gs_u64map_del(&w->xfer->fetches, f->req_id);
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
        gs_u64map_del(&w->xfer->fetches, f->req_id);
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

ucp_ep_h gs__wpeer_ep_by_id(gs_worker_t *w, uint64_t id)
{
    uint64_t v;
    gs_wep_t *epc;
    if (!gs_u64map_get(&w->xfer->peers, id, &v)) return NULL;
    if (gs__wpeer_ep(w, (gs_wpeer_t *)(uintptr_t)v, &epc) != GS_OK) return NULL;
    return epc->ep;
}

void gs__xfer_tick(gs_worker_t *w)
{
    uint64_t now = gs_now_ns();

    gs__wipc_tick(w);

    /* one pass: failing a fetch deletes it (a tombstone) and starts no new fetch */
    for (size_t i = 0; i < w->xfer->fetches.cap; i++) {
        gs_wfetch_t *f;
        if (w->xfer->fetches.keys[i] >= GS_U64MAP_TOMB) continue;
        f = (gs_wfetch_t *)(uintptr_t)w->xfer->fetches.vals[i];
        if (f->deadline > now) continue;
        gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "no answer from worker %llu (%s) within "
                        "%u ms", (unsigned long long)(f->peer ? f->peer->id : 0),
                        f->peer ? f->peer->name : "?", w->fetch_timeout_ms);
    }
}

ucs_status_t gs__wam_data(void *arg, const void *header, size_t header_len, void *data,
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
    uint64_t csum = 0, sender, mac_counter = 0;
    int csum_on = 0, mac_on = 0;
    uint8_t mac_tag[GS_AUTH_PMAC_TAG_BYTES] = {0};

    if (!gs__wseal_open(w, GS_AM_DATA, header, &header_len, &sender)) return UCS_OK;
    msg_len = header_len;
    if (w->xfer->payload_mac) {
        const unsigned char *tr = header_len >= GS__PMAC_TRAILER
                                      ? (const unsigned char *)header + header_len - GS__PMAC_TRAILER
                                      : NULL;
        if (tr == NULL || tr[GS__PMAC_TRAILER - 1] > 1) {
            GS_LOG_WARN("data message from a peer without a payload MAC trailer (%zu header bytes; "
                        "do all workers agree on --payload-mac?)", header_len);
            return UCS_OK;
        }
        mac_counter = 0;
        for (int i = 7; i >= 0; i--) mac_counter = (mac_counter << 8) | tr[i];
        memcpy(mac_tag, tr + 8, GS_AUTH_PMAC_TAG_BYTES);
        mac_on = tr[GS__PMAC_TRAILER - 1];
        msg_len -= GS__PMAC_TRAILER;
    } else if (w->xfer->transfer_checksum) {
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
    if (!gs_u64map_get(&w->xfer->fetches, m.u.data.req_id, &v)) {
        GS_LOG_DEBUG("data for unknown or expired fetch %llu dropped",
                     (unsigned long long)m.u.data.req_id);
        goto out;
    }
    f = (gs_wfetch_t *)(uintptr_t)v;
    if (f->peer == NULL || f->peer->id != sender) {
        gs__wseal_mismatch(w, GS_AM_DATA, sender, "an answer to a fetch addressed to another worker");
        goto out;
    }
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
    f->mac_on = (uint8_t)mac_on;
    f->mac_counter = mac_counter;
    memcpy(f->mac_tag, mac_tag, sizeof mac_tag);
    if (w->xfer->payload_mac && !mac_on && !(w->xfer->ucx_cuda && len >= GS_W_UCX_CUDA_MIN)) {
        /* an answer from host memory must be MACed: only device-to-device bytes go without */
        gs__wfetch_fail(w, f, GS_ERR_AUTH, "chunk (%llu, %llu) from worker %llu came without its payload MAC",
                        (unsigned long long)f->chunk->graph->id, (unsigned long long)f->chunk->task,
                        (unsigned long long)f->peer->id);
        goto out;
    }
    if (f->host == NULL && rndv && w->xfer->ucx_cuda && len >= GS_W_UCX_CUDA_MIN) {
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

void gs__wrecv_cb(void *req, ucs_status_t st, size_t len, void *arg)
{
    gs_wfetch_t *f = arg;
    gs_worker_t *w = f->w;

    ucp_request_free(req);
    f->recv_req = NULL;
    w->xfer->ucp_outstanding--;
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
