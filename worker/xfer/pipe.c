/* Pipelined, double-buffered staging of device chunks over UCX (streams mode, when neither
 * CUDA IPC nor a CUDA-aware UCX applies: workers on different hosts with Debian's UCX).
 *
 * Owner: a chunk of at least w->xfer->pipe_min bytes is answered as GS_AM_DATA_PART messages of
 * w->xfer->pipe_slice bytes instead of one DATA. Two host slice buffers, reused for the whole chunk:
 * slice k+1 is copied device-to-host on a stream while slice k is on the wire, and a buffer
 * is refilled once UCX has sent its slice.
 * Requester: each slice lands at its offset in the host staging buffer (eagerly or by a
 * rendezvous receive) and is copied host-to-device at once, so the last slice's copy is all
 * that is left when the last byte arrives. The fetch holds a "guard" part until every byte has
 * arrived, plus one part per receive or copy in flight (gs_wfetch_t.parts); it completes (or,
 * once failed, is freed) when the last part returns.
 *
 * Header of GS_AM_DATA_PART (host byte order; both ends run this code): req_id, graph, task,
 * offset, total, checksum (u64 each), flags (u32: 1 = checksum present, 2 = payload MAC present),
 * status (i32), payload MAC counter (u64) and GMAC tag (16 bytes; seal.c: over the slice's
 * request, graph, task, offset, total and bytes). A
 * failure before every slice was sent ends with a plain DATA carrying the error, so the
 * requester fails at once instead of at its fetch timeout.
 */
#include "worker/xfer/xfer_int.h"

#include <string.h>

#define GS__PART_LEN 80

struct gs_wpipe {
    gs_wsend_t *s;              /* the request being answered: chunk ref, key, requester */
    size_t slice, total;
    uint32_t nparts, next, sent, inflight;
    void *buf[2];
    int busy[2];
    gs_status_t status;
};

typedef struct gs_wpart_sum {  /* what a slice's header says to check its bytes against */
    int has_csum, has_mac;
    uint64_t csum, mac_counter;
    uint8_t tag[GS_AUTH_PMAC_TAG_BYTES];
} gs_wpart_sum_t;

typedef struct gs_wpart_rx {   /* one rendezvous slice being received */
    gs_wfetch_t *f;
    uint64_t off, len;
    gs_wpart_sum_t sum;
} gs_wpart_rx_t;

/* ---------------------------------------------------------------- slice buffers */

static int gs__wpipe_pinned(gs_worker_t *w)
{
    return w->ops->host_alloc != NULL;
}

/* A slice buffer: from the pool, else new (page-locked when the backend offers it, so the
 * device-to-host copies run at full bus speed; pinning is slow, hence the pool). */
static void *gs__wpipe_buf_get(gs_worker_t *w)
{
    void *p = NULL;
    if (w->xfer->pipe_npool > 0) return w->xfer->pipe_pool[--w->xfer->pipe_npool];
    if (gs__wpipe_pinned(w))   /* all or nothing: the pool frees with the backend */
        return w->ops->host_alloc(w->ctx, w->xfer->pipe_slice, &p) == GS_OK ? p : NULL;
    return gs_malloc(w->xfer->pipe_slice, "pipe slice");
}

static void gs__wpipe_buf_put(gs_worker_t *w, void *p)
{
    if (p == NULL) return;
    if (w->xfer->pipe_npool < GS_W_PIPE_POOL) {
        w->xfer->pipe_pool[w->xfer->pipe_npool++] = p;
        return;
    }
    if (gs__wpipe_pinned(w)) w->ops->host_free(w->ctx, p);
    else gs_free(p);
}

void gs__wpipe_cleanup(gs_worker_t *w)
{
    while (w->xfer->pipe_npool > 0) {
        void *p = w->xfer->pipe_pool[--w->xfer->pipe_npool];
        if (gs__wpipe_pinned(w)) w->ops->host_free(w->ctx, p);
        else gs_free(p);
    }
}

/* ---------------------------------------------------------------- owner */

static void gs__wpipe_finish(gs_worker_t *w, gs_wpipe_t *p)
{
    gs_wsend_t *s = p->s;
    gs__wpipe_buf_put(w, p->buf[0]);
    gs__wpipe_buf_put(w, p->buf[1]);
    if (p->status != GS_OK && p->sent < p->nparts && w->state == GS_WSTATE_RUNNING) {
        GS_LOG_WARN("sending (%llu, %llu) to worker %llu in slices failed after %u of %u: %s",
                    (unsigned long long)s->graph, (unsigned long long)s->task,
                    (unsigned long long)s->from_worker, p->sent, p->nparts,
                    gs_status_string(p->status));
        s->status = p->status;
        gs_free(p);
        gs__wserve_answer(w, s);   /* plain DATA with the error; takes s */
        return;
    }
    if (p->status == GS_OK) w->st.served++;
    gs_free(p);
    gs__wsend_free(w, s);
}

static gs_status_t gs__wpipe_stage(gs_worker_t *w, gs_wpipe_t *p, int b)
{
    const uint32_t k = p->next;
    const size_t off = (size_t)k * p->slice;
    const size_t len = p->total - off < p->slice ? p->total - off : p->slice;
    gs_wsend_t *c = gs__wsend_new(w);
    gs_wnote_t *n = gs_calloc(1, sizeof(*n), "pipe note");
    gs_status_t st;
    int si = gs__wexec_pick_stream(w);

    if (c == NULL || n == NULL) {
        gs_free(n);
        if (c) gs__wsend_free(w, c);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a slice");
    }
    c->pipe = p;
    c->part = k;
    c->slot = b;
    c->host = p->buf[b];
    c->part_len = len;
    c->req_id = p->s->req_id;
    c->graph = p->s->graph;
    c->task = p->s->task;
    c->from_worker = p->s->from_worker;
    st = w->ops->copy_to_host(w->ctx, w->streams[si], c->host, (const char *)p->s->chunk->ptr + off,
                              len);
    if (st != GS_OK) {
        gs_free(n);
        (void)w->ops->sync(w->ctx, w->streams[si]);   /* the failed copy: nothing left running */
        gs__wsend_free(w, c);
        return st;
    }
    n->kind = GS_WNOTE_SEND_STAGED;
    n->obj = c;
    c->stream = si;
    p->busy[b] = 1;
    p->inflight++;
    p->next++;
    gs__wnote_arm(w, w->streams[si], n);
    return GS_OK;
}

int gs__wpipe_serve(gs_worker_t *w, gs_wsend_t *s)
{
    gs_wpipe_t *p;
    if (w->xfer->pipe_slice == 0 || s->chunk == NULL || s->chunk->nbytes < w->xfer->pipe_min ||
        s->chunk->nbytes <= w->xfer->pipe_slice || gs__wpeer_ep_by_id(w, s->from_worker) == NULL)
        return 0;   /* slices go on the requester's own endpoint (PEERS) */
    p = gs_calloc(1, sizeof(*p), "pipe");
    if (p == NULL) return 0;
    p->s = s;
    p->slice = w->xfer->pipe_slice;
    p->total = (size_t)s->chunk->nbytes;
    p->nparts = (uint32_t)((p->total + p->slice - 1) / p->slice);
    p->buf[0] = gs__wpipe_buf_get(w);
    p->buf[1] = gs__wpipe_buf_get(w);
    if (p->buf[0] == NULL || p->buf[1] == NULL) {
        gs__wpipe_buf_put(w, p->buf[0]);
        gs__wpipe_buf_put(w, p->buf[1]);
        gs_free(p);
        return 0;   /* the whole-chunk path tries (and reports) instead */
    }
    for (int b = 0; b < 2 && p->next < p->nparts; b++) {
        gs_status_t st = gs__wpipe_stage(w, p, b);
        if (st != GS_OK) {
            p->status = st;
            break;
        }
    }
    if (p->inflight == 0) gs__wpipe_finish(w, p);   /* nothing started: answers the error */
    return 1;
}

/* A slice's part (staging or sending) is over: refill its buffer or finish. */
static void gs__wpipe_part_over(gs_worker_t *w, gs_wsend_t *c, gs_status_t status)
{
    gs_wpipe_t *p = c->pipe;
    int b = c->slot;
    p->busy[b] = 0;
    p->inflight--;
    if (status == GS_OK) {
        p->sent++;
        w->st.served_slices++;
    }
    else if (p->status == GS_OK) p->status = status;
    c->pipe = NULL;
    gs__wsend_free(w, c);
    if (p->status == GS_OK && w->state == GS_WSTATE_RUNNING && p->next < p->nparts) {
        gs_status_t st = gs__wpipe_stage(w, p, b);
        if (st != GS_OK) p->status = st;
    }
    if (p->inflight == 0 && (p->sent == p->nparts || p->status != GS_OK ||
                             w->state != GS_WSTATE_RUNNING)) {
        if (p->status == GS_OK && p->sent < p->nparts) p->status = GS_ERR_CANCELED;
        gs__wpipe_finish(w, p);
    }
}

void gs__wpipe_staged(gs_worker_t *w, gs_wsend_t *c, gs_status_t status)
{
    gs_wpipe_t *p = c->pipe;
    unsigned char *h;
    uint64_t v[6];
    uint32_t flags = 0;
    int32_t st32 = GS_OK;
    ucp_ep_h ep;
    ucs_status_t us;

    c->stream = -1;
    if (status != GS_OK || w->state != GS_WSTATE_RUNNING || p->status != GS_OK) {
        gs__wpipe_part_over(w, c, status != GS_OK ? status : GS_ERR_CANCELED);
        return;
    }
    ep = gs__wpeer_ep_by_id(w, c->from_worker);
    if (ep == NULL || gs_buf_reserve(&c->header, GS_PROTO_FRAME_HEADER + GS__PART_LEN) != GS_OK) {
        gs__wpipe_part_over(w, c, GS_ERR_WORKER_LOST);
        return;
    }
    v[0] = c->req_id;
    v[1] = c->graph;
    v[2] = c->task;
    v[3] = (uint64_t)c->part * p->slice;
    v[4] = p->total;
    v[5] = 0;
    h = (unsigned char *)c->header.data;
    memset(h + GS_PROTO_FRAME_HEADER + 56, 0, 8 + GS_AUTH_PMAC_TAG_BYTES);
    if (w->xfer->payload_mac) {
        const uint64_t bind[5] = {v[0], v[1], v[2], v[3], v[4]};
        uint64_t ctr = 0;
        if (gs__wpmac_tag(w, bind, c->host, c->part_len, &ctr, h + GS_PROTO_FRAME_HEADER + 64) != GS_OK) {
            GS_LOG_WARN("cannot MAC a slice for worker %llu: %s", (unsigned long long)c->from_worker,
                        gs_last_error());
            gs__wpipe_part_over(w, c, GS_ERR_AUTH);
            return;
        }
        memcpy(h + GS_PROTO_FRAME_HEADER + 56, &ctr, 8);
        flags = 2;
    } else if (w->xfer->transfer_checksum) {
        v[5] = gs__wchecksum(c->host, c->part_len);
        flags = 1;
    }
    if ((w->xfer->payload_mac || w->xfer->transfer_checksum) && c->part_len > 0 &&
        gs__wxfer_corrupt_next(w->xfer))
        ((unsigned char *)c->host)[c->part_len / 2] ^= 0x40;   /* tests: the slice buffer is ours */
    memset(h, 0, GS_PROTO_FRAME_HEADER);
    memcpy(h + GS_PROTO_FRAME_HEADER, v, sizeof(v));
    memcpy(h + GS_PROTO_FRAME_HEADER + 48, &flags, 4);
    memcpy(h + GS_PROTO_FRAME_HEADER + 52, &st32, 4);
    c->header.len = GS_PROTO_FRAME_HEADER + GS__PART_LEN;
    us = gs__wsend_post(w, c, ep, GS_AM_DATA_PART, c->host, c->part_len, 0);
    if (us != UCS_INPROGRESS) gs__wpipe_part_over(w, c, us == UCS_OK ? GS_OK : GS_ERR_WORKER_LOST);
}

void gs__wpipe_sent(gs_worker_t *w, gs_wsend_t *c, ucs_status_t st)
{
    gs__wpipe_part_over(w, c, st == UCS_OK ? GS_OK : GS_ERR_WORKER_LOST);
}

/* ---------------------------------------------------------------- requester */

/* Slice [off, off + len) is in f->host: check it, copy it to the device, count it. A bad
 * slice fails the fetch at once (the parts still in flight free it when they return). */
static void gs__wpipe_landed(gs_worker_t *w, gs_wfetch_t *f, uint64_t off, uint64_t len,
                             const gs_wpart_sum_t *sum)
{
    gs_status_t st;

    if (f->dead) return;
    if (sum->has_mac) {
        const uint64_t bind[5] = {f->req_id, f->chunk->graph->id, f->chunk->task, off, f->chunk->nbytes};
        if (!gs__wpmac_check(w, f->peer ? f->peer->id : 0, bind, (const char *)f->host + off, (size_t)len,
                             sum->mac_counter, sum->tag)) {
            f->damaged = 1;
            gs__wfetch_fail(w, f, GS_ERR_AUTH, "chunk (%llu, %llu) from worker %llu: the slice at byte %llu "
                            "failed its payload MAC (altered on the way, or sent by a peer without the "
                            "cluster's key); not used",
                            (unsigned long long)f->chunk->graph->id, (unsigned long long)f->chunk->task,
                            (unsigned long long)(f->peer ? f->peer->id : 0), (unsigned long long)off);
            return;
        }
    } else if (sum->has_csum && gs__wchecksum((const char *)f->host + off, (size_t)len) != sum->csum) {
        f->damaged = 1;
        gs__wfetch_fail(w, f, GS_ERR_PROTO, "chunk (%llu, %llu) from worker %llu arrived "
                        "corrupted: the slice at byte %llu fails its checksum",
                        (unsigned long long)f->chunk->graph->id,
                        (unsigned long long)f->chunk->task,
                        (unsigned long long)(f->peer ? f->peer->id : 0), (unsigned long long)off);
        return;
    }
    st = gs__wfetch_copy_in(w, f, gs__wexec_pick_stream(w), (size_t)off,
                            (const char *)f->host + off, (size_t)len);
    if (st != GS_OK) {
        gs__wfetch_fail(w, f, st, "copying a slice to the device: %s", gs_last_error());
        return;
    }
    f->rx_bytes += len;
    if (f->rx_bytes >= f->chunk->nbytes && f->pipe_guard) {
        f->pipe_guard = 0;
        gs__wfetch_staged(w, f, GS_OK);   /* the guard: completes when the copies are done */
    }
}

static void gs__wpipe_recv_cb(void *req, ucs_status_t st, size_t len, void *arg)
{
    gs_wpart_rx_t *rx = arg;
    gs_wfetch_t *f = rx->f;
    gs_worker_t *w = f->w;
    (void)len;
    ucp_request_free(req);
    w->xfer->ucp_outstanding--;
    if (st == UCS_OK)
        gs__wpipe_landed(w, f, rx->off, rx->len, &rx->sum);
    else if (!f->dead)
        gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "receiving a slice from worker %llu failed: %s",
                        (unsigned long long)(f->peer ? f->peer->id : 0), ucs_status_string(st));
    gs_free(rx);
    gs__wfetch_staged(w, f, GS_OK);   /* this receive's part */
}

void gs__wpipe_recv(gs_worker_t *w, gs_wdefer_t *d)
{
    gs_wpart_rx_t *rx = d->ctx;
    gs_wfetch_t *f = rx->f;
    ucp_request_param_t p;
    void *r;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = gs__wpipe_recv_cb;
    p.user_data = rx;
    if (f->dead || w->state != GS_WSTATE_RUNNING) {
        ucp_am_data_release(w->xfer->ucp_worker, d->desc);
        gs_free(rx);
        gs__wfetch_staged(w, f, GS_ERR_CANCELED);
        return;
    }
    r = ucp_am_recv_data_nbx(w->xfer->ucp_worker, d->desc, (char *)f->host + rx->off, (size_t)rx->len,
                             &p);
    if (r == NULL) {
        gs__wpipe_landed(w, f, rx->off, rx->len, &rx->sum);
        gs_free(rx);
        gs__wfetch_staged(w, f, GS_OK);
    } else if (UCS_PTR_IS_ERR(r)) {
        gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "receiving a slice from worker %llu failed: %s",
                        (unsigned long long)(f->peer ? f->peer->id : 0),
                        ucs_status_string(UCS_PTR_STATUS(r)));
        gs_free(rx);
        gs__wfetch_staged(w, f, GS_OK);
    } else {
        w->xfer->ucp_outstanding++;
    }
}

ucs_status_t gs__wam_data_part(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param)
{
    gs_worker_t *w = arg;
    uint64_t v[6], fv;
    uint32_t flags;
    int32_t st32;
    gs_wpart_sum_t sum;
    gs_wfetch_t *f;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    uint64_t sender;

    if (!gs__wseal_open(w, GS_AM_DATA_PART, header, &header_len, &sender)) return UCS_OK;
    if (header == NULL || header_len != GS__PART_LEN) {
        GS_LOG_WARN("malformed slice message from a peer (%zu header bytes)", header_len);
        return UCS_OK;
    }
    memcpy(v, header, sizeof(v));
    memcpy(&flags, (const char *)header + 48, 4);
    memcpy(&st32, (const char *)header + 52, 4);
    memset(&sum, 0, sizeof sum);
    sum.has_csum = (int)(flags & 1);
    sum.csum = v[5];
    sum.has_mac = (int)((flags >> 1) & 1);
    memcpy(&sum.mac_counter, (const char *)header + 56, 8);
    memcpy(sum.tag, (const char *)header + 64, GS_AUTH_PMAC_TAG_BYTES);
    if (!gs_u64map_get(&w->xfer->fetches, v[0], &fv)) return UCS_OK;   /* expired: dropped */
    f = (gs_wfetch_t *)(uintptr_t)fv;
    if (f->peer == NULL || f->peer->id != sender) {
        gs__wseal_mismatch(w, GS_AM_DATA_PART, sender, "a slice of a fetch addressed to another worker");
        return UCS_OK;
    }
    if (f->chunk->graph->id != v[1] || f->chunk->task != v[2] || v[4] != f->chunk->nbytes ||
        v[3] > v[4] || len > v[4] - v[3] || st32 != GS_OK || flags > 3 ||
        (f->state != GS_WFETCH_REQUESTED && !f->pipe_rx) ||
        (f->pipe_rx && f->rx_bytes + len > f->chunk->nbytes)) {
        gs__wfetch_fail(w, f, GS_ERR_PROTO, "worker %llu sent a slice that does not fit fetch "
                        "%llu", (unsigned long long)(f->peer ? f->peer->id : 0),
                        (unsigned long long)f->req_id);
        return UCS_OK;
    }
    if (w->xfer->payload_mac && !sum.has_mac) {
        gs__wfetch_fail(w, f, GS_ERR_AUTH, "chunk (%llu, %llu) from worker %llu: a slice came without its "
                        "payload MAC (do all workers agree on --payload-mac?)",
                        (unsigned long long)f->chunk->graph->id, (unsigned long long)f->chunk->task,
                        (unsigned long long)(f->peer ? f->peer->id : 0));
        return UCS_OK;
    }
    if (!f->pipe_rx) {
        if (f->host == NULL) {
            f->host = gs_malloc(f->chunk->nbytes ? (size_t)f->chunk->nbytes : 1, "fetch staging");
            if (f->host == NULL) {
                gs__wfetch_fail(w, f, GS_ERR_NO_MEMORY, "out of host memory for a %llu-byte "
                                "staging buffer", (unsigned long long)f->chunk->nbytes);
                return UCS_OK;
            }
            f->host_owned = 1;
        }
        f->pipe_rx = 1;
        f->pipe_guard = 1;
        f->parts = 1;
        f->rx_bytes = 0;
        f->part_status = GS_OK;
        f->state = GS_WFETCH_STAGING;
    }
    if (rndv) {
        gs_wdefer_t *d = gs_calloc(1, sizeof(*d), "ucx deferred");
        gs_wpart_rx_t *rx = gs_calloc(1, sizeof(*rx), "slice receive");
        if (d == NULL || rx == NULL) {
            gs_free(d);
            gs_free(rx);
            gs__wfetch_fail(w, f, GS_ERR_NO_MEMORY, "out of memory receiving a slice");
            return UCS_OK;
        }
        rx->f = f;
        rx->off = v[3];
        rx->len = len;
        rx->sum = sum;
        f->parts++;   /* the receive */
        d->kind = GS_WDEFER_RNDV_PART;
        d->desc = data;
        d->len = len;
        d->ctx = rx;
        gs__wdefer_push(w, d);
        return UCS_INPROGRESS;
    }
    memcpy((char *)f->host + v[3], data, len);
    gs__wpipe_landed(w, f, v[3], len, &sum);
    return UCS_OK;
}
