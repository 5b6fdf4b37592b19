/* Serving chunks, the owner side: FETCH_REQ from a peer or GATHER_REQ from gsched, answered
 * with DATA from host-accessible chunk memory or a host staging copy (whole, or in slices by
 * pipe.c, or as a CUDA IPC lease by ipc.c); and the sends that carry them over UCX. */
#include "worker/xfer/xfer_int.h"

#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void gs__wsend_ucp_cb(void *req, ucs_status_t st, void *arg)
{
    gs_wsend_t *s = arg;
    ucp_request_free(req);
    s->ucp_req = NULL;
    s->w->xfer->ucp_outstanding--;
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

    if (gs__wseal(w, am_id, s) != GS_OK) {
        GS_LOG_WARN("cannot seal a message to worker %llu: %s", (unsigned long long)s->from_worker,
                    gs_last_error());
        return UCS_ERR_REJECTED;
    }
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
    w->xfer->ucp_outstanding++;
    return UCS_INPROGRESS;
}

gs_wsend_t *gs__wsend_new(gs_worker_t *w)
{
    gs_wsend_t *s = gs_calloc(1, sizeof(*s), "worker send");
    if (s == NULL) return NULL;
    s->w = w;
    s->stream = -1;
    gs_buf_init(&s->header);
    gs__wlist_push(&w->xfer->sends, &s->link);
    return s;
}

void gs__wsend_free(gs_worker_t *w, gs_wsend_t *s)
{
    gs__wlist_del(&s->link);
    if (s->chunk) gs__wchunk_unref(w, s->chunk);
    if (s->host_owned) gs_free(s->host);
    if (s->dconn) gs__wdconn_unref(w, s->dconn);
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
            if (gs_u64map_get(&w->xfer->fetches, s->req_id, &v)) {
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

/* ---------------------------------------------------------------- AM handlers */

static ucs_status_t gs__wam_request(gs_worker_t *w, unsigned am_id, const void *header, size_t header_len,
                                    int ipc, const ucp_am_recv_param_t *param)
{
    gs_msg_t m;
    gs_wdefer_t *d;
    uint64_t sender;

    if (!gs__wseal_open(w, am_id, header, &header_len, &sender)) return UCS_OK;   /* nothing sent */
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
    if (m.u.fetch_req.from_worker != sender) {
        gs__wseal_mismatch(w, am_id, sender, "the request names another worker as its requester");
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

ucs_status_t gs__wam_fetch_req(void *arg, const void *header, size_t header_len,
                                      void *data, size_t len, const ucp_am_recv_param_t *param)
{
    (void)data;
    (void)len;
    return gs__wam_request(arg, GS_AM_FETCH_REQ, header, header_len, 0, param);
}

/* Like FETCH_REQ; the payload is the requester's host key: a CUDA IPC lease is possible when
 * it is ours. A rendezvous payload (not a key) is never read: UCX drops it on return. */
ucs_status_t gs__wam_ipc_req(void *arg, const void *header, size_t header_len, void *data,
                                    size_t len, const ucp_am_recv_param_t *param)
{
    gs_worker_t *w = arg;
    int ipc = !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
              gs__wipc_same_host(w, data, len);
    return gs__wam_request(w, GS_AM_IPC_REQ, header, header_len, ipc, param);
}

/* ---------------------------------------------------------------- serving (owner side) */

static ucp_ep_h gs__wserve_ep(gs_worker_t *w, uint64_t from, ucp_ep_h reply_ep)
{
    uint64_t v;
    gs_wep_t *epc;
    if (gs_u64map_get(&w->xfer->peers, from, &v) &&
        gs__wpeer_ep(w, (gs_wpeer_t *)(uintptr_t)v, &epc) == GS_OK)
        return epc->ep;
    return reply_ep;
}

/* Tests (test_corrupt_transfers): send a copy with one byte flipped, after its checksum or MAC
 * was taken; the stored chunk is never touched. */
static gs_status_t gs__wserve_corrupt(gs_wsend_t *s)
{
    unsigned char *copy = gs_malloc((size_t)s->chunk->nbytes, "corrupt copy");
    if (copy == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a corrupted copy");
    memcpy(copy, s->host, (size_t)s->chunk->nbytes);
    copy[s->chunk->nbytes / 2] ^= 0x40;
    if (s->host_owned) gs_free(s->host);
    s->host = copy;
    s->host_owned = 1;
    return GS_OK;
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
    if (status == GS_OK && w->xfer->payload_mac) {
        unsigned char tr[GS__PMAC_TRAILER] = {0};
        if (s->status == GS_OK && !s->payload_cuda) {
            const uint64_t bind[5] = {s->req_id, s->graph, s->task, 0, s->chunk->nbytes};
            uint64_t c = 0;
            status = gs__wpmac_tag(w, bind, s->host, (size_t)s->chunk->nbytes, &c, tr + 8);
            for (int i = 0; i < 8; i++) tr[i] = (unsigned char)(c >> (8 * i));
            tr[GS__PMAC_TRAILER - 1] = 1;
            if (status == GS_OK && s->chunk->nbytes > 0 && gs__wxfer_corrupt_next(w->xfer))
                status = gs__wserve_corrupt(s);   /* tests: a tampering peer */
        }
        if (status == GS_OK) status = gs_buf_append(&s->header, tr, sizeof(tr));
    } else if (status == GS_OK && w->xfer->transfer_checksum) {
        unsigned char tr[GS__CSUM_TRAILER] = {0};
        if (s->status == GS_OK && !s->payload_cuda) {
            uint64_t c = gs__wchecksum(s->host, (size_t)s->chunk->nbytes);
            memcpy(tr, &c, 8);
            tr[8] = 1;
            if (s->chunk->nbytes > 0 && gs__wxfer_corrupt_next(w->xfer)) status = gs__wserve_corrupt(s);
        }
        if (status == GS_OK) status = gs_buf_append(&s->header, tr, sizeof(tr));
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
    n->kind = GS_WNOTE_SEND_STAGED;
    n->obj = s;
    s->stream = st;
    gs__wnote_arm(w, w->streams[st], n);
    return GS_OK;
}

static void gs__wsend_release_cb(void *arg, gs_status_t status)
{
    gs_wsend_t *s = arg;
    (void)status;   /* a failed write closes the connection; gsched re-routes the gather */
    gs__wsend_free(s->w, s);
}

/* Answer a gather with @a s's bytes (s->host, the chunk's size) without copying them: the
 * connection (gsched's, or the direct client's s->dconn) writes them in place and frees @a s
 * (chunk reference, staging buffer) once done. A direct gather into shared memory (s->shm_dst)
 * has its bytes there already (or in s->host, read back from disk: copied now) and gets an
 * empty DATA. Consumes @a s in every case. */
static void gs__wsend_to_scheduler(gs_worker_t *w, gs_wsend_t *s)
{
    gs_msg_t m;
    gs_status_t status;
    gs_conn_t *conn = s->dconn != NULL ? s->dconn->conn : w->conn;
    if (conn == NULL) {
        gs__wsend_free(w, s);
        return;
    }
    if (s->shm_dst != NULL) {
        if (s->host_owned) memcpy(s->shm_dst, s->host, (size_t)s->chunk->nbytes);
        gs__wdirect_reply(w, s->dconn, s->req_id, s->graph, s->task, GS_OK);
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
    status = gs_conn_send_data(conn, &m, gs__wsend_release_cb, s);
    if (status != GS_OK) {
        if (status != GS_ERR_CONN_CLOSED)
            GS_LOG_ERROR("sending data to %s failed: %s", s->dconn ? "a client" : "gsched", gs_last_error());
        gs__wsend_free(w, s);
    }
}

/* A gather's error answer: to gsched, or to the direct client. */
static void gs__wgather_error(gs_worker_t *w, gs_wdconn_t *dc, uint64_t req_id, uint64_t graph, uint64_t task,
                              gs_status_t st)
{
    if (dc != NULL) gs__wdirect_reply(w, dc, req_id, graph, task, st);
    else gs__wdata_to_scheduler(w, req_id, graph, task, st, NULL, 0);
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
        gs__wgather_error(w, s->dconn, s->req_id, s->graph, s->task, s->status);
        gs__wsend_free(w, s);
        return;
    }
    gs__wserve_post(w, s, gs__wserve_ep(w, s->from_worker, NULL));
}

static void gs__wsend_unspilled_cb(gs_worker_t *w, gs_status_t status, void *arg)
{
    gs__wsend_staged(w, arg, status);
}

/* s->chunk is on disk (worker/spill): read it into a host buffer of s's off the loop, then
 * answer as after a staging copy (gs__wsend_staged). */
static gs_status_t gs__wsend_unspill(gs_worker_t *w, gs_wsend_t *s)
{
    s->host = gs_malloc(s->chunk->nbytes ? (size_t)s->chunk->nbytes : 1, "send from disk");
    if (s->host == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "out of host memory reading %llu bytes from disk",
                            (unsigned long long)s->chunk->nbytes);
    s->host_owned = 1;
    return gs__wspill_read(w, s->chunk, s->host, gs__wsend_unspilled_cb, s);
}

void gs__wserve(gs_worker_t *w, gs_wdefer_t *d)
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
    if (!gs__wchunk_resident(c)) {
        gs__wchunk_ref(c);
        s->chunk = c;
        if ((s->status = gs__wsend_unspill(w, s)) != GS_OK)
            gs__wserve_post(w, s, gs__wserve_ep(w, d->from_worker, d->reply_ep));
        return;
    }
    if (d->ipc && gs__wipc_serve(w, d, c, gs__wserve_ep(w, d->from_worker, d->reply_ep))) {
        gs__wsend_free(w, s);
        return;
    }
    gs__wchunk_ref(c);
    s->chunk = c;
    if (w->streams_mode && w->xfer->ucx_cuda && c->nbytes >= GS_W_UCX_CUDA_MIN) {
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

/* Thread-pool copy of a host chunk into the client's shared memory (direct gathers). */
static void gs__wsend_shm_work(uv_work_t *req)
{
    gs_wsend_t *s = req->data;
    memcpy(s->shm_dst, s->host, (size_t)s->chunk->nbytes);
}

static void gs__wsend_shm_done(uv_work_t *req, int status)
{
    gs_wsend_t *s = req->data;
    gs_worker_t *w = s->w;
    if (status != 0) s->status = GS_ERR_CANCELED;
    s->host = NULL;   /* the chunk's own memory */
    if (s->status == GS_OK) gs__wsend_to_scheduler(w, s);
    else {
        gs__wgather_error(w, s->dconn, s->req_id, s->graph, s->task, s->status);
        gs__wsend_free(w, s);
    }
    gs__worker_unhold(w);
}

/* Serve a gather of (graph, task): to gsched (dc NULL, GATHER_REQ) or to a direct client on
 * @a dc, in DATA bytes or (@a shm_dst) into its shared memory. */
static void gs__wgather_serve(gs_worker_t *w, gs_wdconn_t *dc, uint8_t *shm_dst, uint64_t req_id,
                              uint64_t graph, uint64_t task)
{
    gs_wchunk_t *c = gs__wstore_find(w, graph, task);
    gs_wsend_t *s;

    if (c == NULL || (dc == NULL && !c->owned) || c->state != GS_WCHUNK_READY) {
        gs__wgather_error(w, dc, req_id, graph, task, GS_ERR_NOT_FOUND);
        return;
    }
    if (shm_dst == NULL && c->nbytes > GS_PROTO_DEFAULT_MAX_FRAME - 256) {
        GS_LOG_WARN("chunk (%llu, %llu) has %llu bytes, more than one frame may carry",
                    (unsigned long long)graph, (unsigned long long)task,
                    (unsigned long long)c->nbytes);
        gs__wgather_error(w, dc, req_id, graph, task, GS_ERR_MSG_TOO_LARGE);
        return;
    }
    s = gs__wsend_new(w);
    if (s == NULL) {
        gs__wgather_error(w, dc, req_id, graph, task, GS_ERR_NO_MEMORY);
        return;
    }
    s->to_scheduler = 1;
    s->req_id = req_id;
    s->graph = graph;
    s->task = task;
    s->shm_dst = shm_dst;
    if (dc != NULL) {
        dc->refs++;
        s->dconn = dc;
    }
    gs__wchunk_ref(c);
    s->chunk = c;
    if (!gs__wchunk_resident(c)) {
        gs_status_t st = gs__wsend_unspill(w, s);
        if (st == GS_OK) return;
        gs__wgather_error(w, dc, req_id, graph, task, st);
        gs__wsend_free(w, s);
        return;
    }
    if (!w->streams_mode) {
        s->host = c->ptr;   /* host memory: written from the chunk itself, which s keeps alive */
        if (shm_dst != NULL && c->nbytes > 0) {
            int r;
            s->work.data = s;
            gs__worker_hold(w);
            if ((r = uv_queue_work(w->loop, &s->work, gs__wsend_shm_work, gs__wsend_shm_done)) == 0) return;
            gs__worker_unhold(w);
            memcpy(shm_dst, c->ptr, (size_t)c->nbytes);   /* no thread pool: on the loop */
        }
        gs__wsend_to_scheduler(w, s);
        return;
    }
    {
        gs_status_t st;
        if (shm_dst != NULL) {
            /* device -> the client's shared memory directly; gs__wsend_staged follows */
            int sti = gs__wexec_pick_stream(w);
            gs_wnote_t *n = gs_calloc(1, sizeof(*n), "send note");
            st = n == NULL ? gs_error_set(GS_ERR_NO_MEMORY, "out of memory staging a direct gather")
                           : w->ops->copy_to_host(w->ctx, w->streams[sti], shm_dst, c->ptr, (size_t)c->nbytes);
            if (st == GS_OK) {
                n->kind = GS_WNOTE_SEND_STAGED;
                n->obj = s;
                s->stream = sti;
                gs__wnote_arm(w, w->streams[sti], n);
                return;
            }
            gs_free(n);
        } else {
            st = gs__wsend_stage(w, s);
            if (st == GS_OK) return;
        }
        GS_LOG_WARN("staging (%llu, %llu) for %s failed: %s", (unsigned long long)graph,
                    (unsigned long long)task, dc ? "a client" : "gsched", gs_last_error());
        gs__wgather_error(w, dc, req_id, graph, task, st);   /* before s's dconn reference goes */
        gs__wsend_free(w, s);
    }
}

void gs__xfer_gather(gs_worker_t *w, uint64_t req_id, uint64_t graph, uint64_t task)
{
    gs__wgather_serve(w, NULL, NULL, req_id, graph, task);
}

void gs__xfer_gather_to(gs_worker_t *w, gs_wdconn_t *dc, uint8_t *shm_dst, uint64_t req_id, uint64_t graph,
                        uint64_t task)
{
    gs__wgather_serve(w, dc, shm_dst, req_id, graph, task);
}
