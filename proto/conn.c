/*
 * Framed message connections over libuv TCP (see proto/conn.h).
 *
 * Reading: one 64 KiB read buffer per thread (gs__conn_rbuf); received bytes go into a gs_frame_reader_t,
 * each complete payload is decoded (DATA's bytes borrowed from the frame) and handed to msg_cb.
 * Once the header of a large frame (> 64 KiB) is in, the reader reserves the whole frame and
 * alloc_cb hands out the reader's free space, so the rest of the frame is received in place
 * (copied once, by the kernel). A drained large buffer the reader keeps for a following large
 * frame is released after GS__CONN_TRIM_MS without traffic. A malformed or oversized frame
 * closes the connection (GS_ERR_PROTO / GS_ERR_MSG_TOO_LARGE, logged as a warning).
 *
 * Writing: a plain frame (TCP without TLS, no borrowed tail) goes straight to the socket with
 * uv_try_write when nothing is queued before it, and completes there when written whole; the
 * rest of it, and every other frame, is one uv_write request (frames queued before the
 * connection is established wait in a list and are submitted in order when it is); a DATA frame sent with
 * gs_conn_send_data() is written from two places, its encoded head and the caller's bytes,
 * whose release callback runs when the request completes or is dropped. pending_bytes counts
 * the bytes of every frame not yet completed.
 *
 * Budget (gs_conn_budget_t): before the reader examines the header of a frame larger than
 * GS_CONN_BUDGET_MIN_FRAME (and reserves it), the frame is charged to the connection's budget;
 * when it does not fit, reading stops and the connection joins the budget's queue; frames
 * handed out and connections closing uncharge and restart the waiting connections in order.
 * The rest of a waiting frame (it is larger than one read) is still in the socket, so
 * restarting the reads is enough to resume it.
 *
 * TLS (params.tls set; proto/tls.c): received ciphertext goes through the session and its
 * plaintext into the frame reader (always through the read buffer); each frame is encrypted as a whole
 * into the request's cipher buffer when it is submitted, and handshake records go out as
 * requests without a frame. Frames wait in the wait list until the TLS handshake completes; a
 * client's connect_cb reports the handshake's outcome, not the TCP connection's.
 *
 * Closing: the first gs_conn_close() wins. An error reason uv_close()s at once, which cancels
 * queued writes; GS_OK waits for the connection attempt if one is under way, then uv_shutdown()s
 * (which completes after every queued write) and uv_close()s. close_cb runs from the uv_close
 * callback, so always from the loop and never inside gs_conn_close(); the connection is freed
 * right after it. A TLS peer's close_notify closes it once the frames received before it (often
 * in the same read, e.g. gsched's last SHUTDOWN) are handed out, as the end of stream does.
 * A GS_OK close of a TLS connection whose frames still wait for its own handshake keeps
 * reading until the handshake completes (received frames are dropped, as after any close),
 * then sends the frames and close_notify after them; a failed handshake or the end of stream
 * closes it with that reason (the frames dropped), as does gs_conn_close() with an error.
 *
 * Files (structs and shared helpers in proto/conn_int.h): this one holds lifetime, reading,
 * writing, accept/connect and accessors; conn_budget.c the frame budget and memory counters;
 * conn_tls.c the TLS layer; conn_refuse.c gs_conn_refuse().
 */
#include "proto/conn_int.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>

#define GS__CONN_RBUF GS_CONN_READ_BUFFER
#define GS__CONN_WCHUNK (1u << 30)  /* uv_buf_t lengths are unsigned int: split larger frames */
#define GS__CONN_TRIM_MS 1000u      /* release a retained large read buffer after this idle time */

/* One read buffer per thread, shared by its connections: libuv calls a stream's read_cb right
 * after its alloc_cb, and every byte is consumed (copied into the frame reader, or through the
 * TLS session) before read_cb returns, so no connection needs its own. An idle connection then
 * costs its struct and its reader's small buffer, not 64 KiB. */
static _Thread_local char gs__conn_rbuf[GS__CONN_RBUF];

/* ---- lifetime ---- */

/* Free a write request; a borrowed tail is released with @a status (exactly once: here). */
void gs__conn_free_wreq(gs__wreq_t *w, gs_status_t status)
{
    if (w->release != NULL) w->release(w->release_arg, status);
    gs_free(w->cipher);
    if (w->data_cap != 0) gs_frame_storage_give(w->data, w->data_cap);
    else gs_free(w->data);
    gs_free(w);
}

static void gs__conn_closed_cb(uv_handle_t *handle)
{
    gs_conn_t *c = handle->data;
    gs_assert(c->handles_open > 0);
    if (--c->handles_open > 0) return;
    gs_assert(c->wait_head == NULL);
    if (!c->silent) {
        if (c->tls_connect_pending && c->params.connect_cb != NULL) {
            c->params.connect_cb(c, c->close_reason != GS_OK ? c->close_reason : GS_ERR_CONN_CLOSED,
                                 c->params.arg);
        }
        GS_LOG_DEBUG("connection %s closed: %s", c->peer_name, gs_status_string(c->close_reason));
        c->params.close_cb(c, c->close_reason, c->params.arg);
    }
    gs_tls_session_destroy(c->tls);
    gs_frame_reader_cleanup(&c->reader);
    gs__conn_count_read(c);
    if (c->params.budget != NULL) c->params.budget->nconns--;
    gs_frame_storage_trim();  /* nothing outlives the connections of this thread */
    gs_free(c);
}

static void gs__conn_close_handle(gs_conn_t *c)
{
    if (c->handle_closing) return;
    c->handle_closing = 1;
    gs__conn_budget_release(c);
    while (c->wait_head != NULL) {  /* never submitted: drop */
        gs__wreq_t *w = c->wait_head;
        c->wait_head = w->next;
        gs__conn_pending(c, -(int64_t)w->len);
        gs__conn_free_wreq(w, GS_ERR_CANCELED);
    }
    c->wait_tail = NULL;
    uv_close((uv_handle_t *)&c->trim_timer, gs__conn_closed_cb);
    uv_close((uv_handle_t *)&c->tcp, gs__conn_closed_cb);
}

static void gs__conn_shutdown_cb(uv_shutdown_t *req, int status)
{
    gs_conn_t *c = req->data;
    (void)status;
    gs__conn_close_handle(c);
}

void gs__conn_shutdown(gs_conn_t *c)
{
    if (c->handle_closing) return;
    if (c->tls != NULL && c->connected) {
        if (gs__conn_tls_close_waits(c)) return;
        gs_tls_session_close_notify(c->tls);
        gs__conn_tls_flush(c);
    }
    if (c->connected && !c->handle_closing && uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, gs__conn_shutdown_cb) == 0) {
        return;
    }
    gs__conn_close_handle(c);
}

void gs_conn_close(gs_conn_t *c, gs_status_t reason)
{
    if (c == NULL) return;
    if (c->close_requested) {
        if (c->tls_close_pending && reason != GS_OK) gs__conn_fail(c, reason);  /* stop waiting */
        return;
    }
    c->close_requested = 1;
    c->close_reason = reason;
    uv_read_stop((uv_stream_t *)&c->tcp);
    gs__conn_budget_release(c);
    if (reason != GS_OK) {
        gs__conn_close_handle(c);
    } else if (!c->connecting) {
        gs__conn_shutdown(c);
    }
    /* else: gs__conn_connect_cb finishes the close once the attempt completes */
}

static gs_status_t gs__conn_new(uv_loop_t *loop, const gs_conn_params_t *params, gs_conn_t **conn_p)
{
    gs_conn_t *c;
    int r;
    if (params == NULL || params->msg_cb == NULL || params->close_cb == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "connection parameters need msg_cb and close_cb");
    }
    c = gs_calloc(1, sizeof *c, "conn");
    if (c == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory allocating a connection");
    r = uv_tcp_init(loop, &c->tcp);
    if (r < 0) {
        gs_free(c);
        return gs_status_from_uv(r, "uv_tcp_init");
    }
    uv_timer_init(loop, &c->trim_timer);  /* cannot fail */
    uv_unref((uv_handle_t *)&c->trim_timer);  /* never keeps the loop alive by itself */
    c->handles_open = 2;
    c->trim_timer.data = c;
    c->tcp.data = c;
    c->connect_req.data = c;
    c->shutdown_req.data = c;
    c->params = *params;
    if (params->budget != NULL) params->budget->nconns++;
    gs_frame_reader_init(&c->reader, params->max_frame);
    snprintf(c->peer_name, sizeof c->peer_name, "?");
    *conn_p = c;
    return GS_OK;
}

/* Creation failed after uv_tcp_init: the handle must still be closed through the loop. */
static gs_status_t gs__conn_abort(gs_conn_t *c, gs_status_t st)
{
    c->silent = 1;
    c->close_requested = 1;
    gs__conn_close_handle(c);
    return st;
}

void gs__conn_fail(gs_conn_t *c, gs_status_t reason)
{
    if (c->tls_close_pending) {  /* a GS_OK close waiting for the TLS handshake: it failed */
        c->tls_close_pending = 0;
        c->close_reason = reason;
        gs__conn_close_handle(c);
        return;
    }
    gs_conn_close(c, reason);
}

/* ---- reading ---- */

void gs__conn_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    gs_conn_t *c = handle->data;
    uint8_t *space;
    size_t n;
    (void)suggested;
    /* the rest of a large frame goes straight into the reader's reserved buffer */
    n = c->tls != NULL ? 0 : gs_frame_reader_space(&c->reader, GS__CONN_RBUF, &space);
    if (n > 0) {
        buf->base = (char *)space;
        buf->len = n < GS__CONN_WCHUNK ? n : GS__CONN_WCHUNK;
        return;
    }
    buf->base = gs__conn_rbuf;
    buf->len = sizeof gs__conn_rbuf;
}

/* The connection's one timer: the deadline of a close waiting for the TLS handshake while one
 * does (tls_close_pending; gs__conn_arm_close_wait), else the idle trim of a retained buffer. */
static void gs__conn_trim_cb(uv_timer_t *t)
{
    gs_conn_t *c = t->data;
    if (c->tls_close_pending) {
        GS_LOG_WARN("connection %s: the TLS handshake did not finish within %u ms of the close; "
                    "%zu bytes of frames waiting for it are dropped", c->peer_name,
                    gs__conn_close_wait_ms(c), c->pending_bytes);
        gs_error_set(GS_ERR_TIMED_OUT, "connection %s: TLS handshake not finished within %u ms "
                     "of an orderly close", c->peer_name, gs__conn_close_wait_ms(c));
        gs__conn_fail(c, GS_ERR_TIMED_OUT);
        return;
    }
    gs_frame_reader_trim(&c->reader);
    gs__conn_count_read(c);
    gs_frame_storage_trim();
}

unsigned gs__conn_close_wait_ms(const gs_conn_t *c)
{
    return c->params.close_wait_ms != 0 ? c->params.close_wait_ms : GS_CONN_CLOSE_WAIT_MS;
}

void gs__conn_arm_close_wait(gs_conn_t *c)
{
    uv_timer_start(&c->trim_timer, gs__conn_trim_cb, gs__conn_close_wait_ms(c), 0);
}

/* (Re)start the idle timer while a large buffer waits for reuse: this reader's, or the thread's
 * spare (detached frames given back). */
static void gs__conn_arm_trim(gs_conn_t *c)
{
    if (c->handle_closing || c->tls_close_pending) return;
    if (gs_frame_reader_retained(&c->reader) > 0 || gs_frame_storage_spare() > 0) {
        uv_timer_start(&c->trim_timer, gs__conn_trim_cb, GS__CONN_TRIM_MS, 0);
    }
}

static void gs__conn_read(gs_conn_t *c, ssize_t nread, const uv_buf_t *buf)
{
    const uint8_t *payload;
    size_t len;
    gs_status_t st;
    (void)buf;

    if (nread < 0) {
        if (nread == UV_EOF) {
            GS_LOG_DEBUG("connection %s: end of stream", c->peer_name);
            gs__conn_fail(c, gs_error_set(GS_ERR_CONN_CLOSED, "connection %s closed by the peer", c->peer_name));
        } else {
            st = gs_status_from_uv((int)nread, "read");
            if (st != GS_ERR_CONN_CLOSED) st = GS_ERR_IO;
            gs__conn_fail(c, st);
        }
        return;
    }
    if (nread == 0 || (c->close_requested && !c->tls_close_pending)) return;
    c->last_read_ms = uv_now(c->tcp.loop);
    if (c->tls != NULL) {
        if (gs__conn_tls_feed(c, gs__conn_rbuf, (size_t)nread) != GS_OK) return;
    } else if (buf->base != gs__conn_rbuf) {
        gs_frame_reader_commit(&c->reader, (size_t)nread);  /* received in place */
    } else if (gs_frame_reader_feed(&c->reader, gs__conn_rbuf, (size_t)nread) != GS_OK) {
        GS_LOG_WARN("connection %s: out of memory buffering a frame", c->peer_name);
        gs__conn_fail(c, GS_ERR_NO_MEMORY);
        return;
    }
    while (!c->close_requested) {
        gs_msg_t msg;
        int go = gs__conn_budget_charge(c);
        if (go < 0) return;
        if (go == 0) break;
        st = gs_frame_reader_next(&c->reader, &payload, &len);
        if (st == GS_INPROGRESS) break;
        if (st != GS_OK) {
            GS_LOG_WARN("connection %s: %s; closing", c->peer_name, gs_last_error());
            gs__conn_fail(c, st);
            return;
        }
        st = gs_msg_decode_borrow(payload, len, &msg);
        if (st != GS_OK) {
            GS_LOG_WARN("connection %s: bad frame of %zu bytes: %s; closing", c->peer_name, len, gs_last_error());
            gs__conn_fail(c, st);
            return;
        }
        c->in_msg_cb = 1;
        c->frame_detached = 0;
        c->params.msg_cb(c, &msg, c->params.arg);
        c->in_msg_cb = 0;
        gs_msg_cleanup(&msg);
        gs__conn_budget_uncharge(c);  /* the frame was handed out */
    }
    if (c->tls_peer_closed) gs__conn_fail(c, GS_ERR_CONN_CLOSED);  /* its earlier frames went out */
    gs__conn_arm_trim(c);
}

void gs__conn_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    gs_conn_t *c = stream->data;
    gs__conn_read(c, nread, buf);
    /* c lives until its close callbacks have run. A budgeted connection keeps no drained buffer
     * larger than its read buffer: memory past it is the budget's, and only while a frame is in. */
    if (c->params.budget != NULL) gs_frame_reader_shrink(&c->reader, GS_CONN_BUDGET_KEPT);
    gs__conn_count_read(c);
}

gs_status_t gs_conn_detach_frame(gs_conn_t *c, gs_frame_storage_t **storage_p)
{
    gs_status_t st;
    if (c == NULL || storage_p == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_detach_frame: NULL argument");
    }
    if (!c->in_msg_cb || c->frame_detached) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_detach_frame: only once, inside msg_cb");
    }
    st = gs_frame_reader_detach(&c->reader, storage_p);
    if (st == GS_OK) c->frame_detached = 1;
    gs__conn_count_read(c);
    return st;
}

/* ---- writing ---- */

static void gs__conn_write_cb(uv_write_t *req, int status)
{
    gs__wreq_t *w = (gs__wreq_t *)req;
    gs_conn_t *c = w->conn;
    gs_status_t st = GS_OK;
    gs__conn_pending(c, -(int64_t)w->len);
    if (status == UV_ECANCELED) {
        st = GS_ERR_CANCELED;
    } else if (status < 0) {
        st = gs_status_from_uv(status, "write");
        if (st != GS_ERR_CONN_CLOSED) st = GS_ERR_IO;
        GS_LOG_DEBUG("connection %s: write failed: %s", c->peer_name, uv_strerror(status));
    }
    gs__conn_free_wreq(w, st);
    if (st != GS_OK && st != GS_ERR_CANCELED) {
        gs__conn_fail(c, st);
    } else {
        gs__conn_arm_trim(c);
    }
}

/* Append @a len bytes at @a p to @a bufs, split into uv_buf_t-sized pieces. */
static void gs__conn_bufs(uv_buf_t *bufs, unsigned *nbufs, unsigned max, const uint8_t *p, size_t len)
{
    size_t off = 0;
    while (off < len) {
        size_t n = len - off < GS__CONN_WCHUNK ? len - off : GS__CONN_WCHUNK;
        gs_assert_always(*nbufs < max);
        bufs[(*nbufs)++] = uv_buf_init((char *)(uintptr_t)(p + off), (unsigned)n);
        off += n;
    }
}

/* Write what the socket takes of @a w at once (nothing else queued before it): a frame written
 * whole completes here, without a uv_write request (whose completion re-arms the socket's
 * watcher: one epoll_ctl per frame sent) and returns 1; else the bytes written are dropped from
 * @a bufs / *@a nbufs and the rest goes through uv_write (0). Only for frames without a borrowed
 * tail's release callback, which must not run inside the send that queued it. */
static int gs__conn_try_write(gs_conn_t *c, gs__wreq_t *w, uv_buf_t *bufs, unsigned *nbufs)
{
    size_t done;
    unsigned i = 0, k = 0;
    int r = uv_try_write((uv_stream_t *)&c->tcp, bufs, *nbufs);
    if (r <= 0) return 0;   /* EAGAIN, or an error uv_write reports as before */
    done = (size_t)r;
    if (done >= w->len) {
        gs__conn_pending(c, -(int64_t)w->len);
        gs__conn_free_wreq(w, GS_OK);
        gs__conn_arm_trim(c);
        return 1;
    }
    while (i < *nbufs && done >= bufs[i].len) done -= bufs[i++].len;
    for (; i < *nbufs; i++) {
        bufs[k] = bufs[i];
        if (done > 0) {
            bufs[k].base += done;
            bufs[k].len -= (unsigned)done;
            done = 0;
        }
        k++;
    }
    *nbufs = k;
    return 0;
}

/* Hand @a w to libuv. On failure @a w is untouched (still counted in pending_bytes): the caller
 * disposes of it and then fails the connection. */
gs_status_t gs__conn_submit(gs_conn_t *c, gs__wreq_t *w)
{
    uv_buf_t bufs[12];
    unsigned nbufs = 0;
    int r;
    if (c->tls != NULL && w->cipher == NULL) {
        size_t n;
        gs_status_t st = gs_tls_session_seal(c->tls, w->data, w->head_len, w->tail, w->len - w->head_len,
                                             &w->cipher, &n);
        if (st != GS_OK) return st;
        gs__conn_bufs(bufs, &nbufs, sizeof bufs / sizeof bufs[0], w->cipher, n);
    } else if (w->cipher != NULL) {  /* handshake records */
        gs__conn_bufs(bufs, &nbufs, sizeof bufs / sizeof bufs[0], w->cipher, w->head_len);
    } else {
        gs__conn_bufs(bufs, &nbufs, sizeof bufs / sizeof bufs[0], w->data, w->head_len);
        gs__conn_bufs(bufs, &nbufs, sizeof bufs / sizeof bufs[0], w->tail, w->len - w->head_len);
        if (w->release == NULL && gs__conn_try_write(c, w, bufs, &nbufs)) return GS_OK;
    }
    r = uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, nbufs, gs__conn_write_cb);
    if (r < 0) return gs_status_from_uv(r, "uv_write");
    return GS_OK;
}

/* Queue @a data (owned, gs_malloc'ed) of @a len bytes followed by @a tail_len borrowed bytes at
 * @a tail (released through @a release once written or dropped -- but not when this fails: the
 * caller keeps them then). @a cap: data's capacity when it becomes a spare buffer once written
 * (gs_frame_storage_give), 0 when it is freed. */
static gs_status_t gs__conn_queue(gs_conn_t *c, uint8_t *data, size_t len, size_t cap, const uint8_t *tail,
                                  size_t tail_len, gs_conn_release_cb release, void *release_arg)
{
    gs_status_t st;
    gs__wreq_t *w = gs_malloc(sizeof *w, "conn write");
    if (w == NULL) {
        gs_free(data);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory queueing %zu bytes to %s", len + tail_len,
                            c->peer_name);
    }
    w->next = NULL;
    w->conn = c;
    w->data = data;
    w->data_cap = cap;
    w->head_len = len;
    w->len = len + tail_len;
    w->tail = tail;
    w->release = release;
    w->release_arg = release_arg;
    w->cipher = NULL;
    gs__conn_pending(c, (int64_t)w->len);
    if (!c->connected || (c->tls != NULL && !gs_tls_session_ready(c->tls))) {
        if (c->wait_tail != NULL) {
            c->wait_tail->next = w;
        } else {
            c->wait_head = w;
        }
        c->wait_tail = w;
        return GS_OK;
    }
    st = gs__conn_submit(c, w);
    if (st != GS_OK) {
        gs__conn_pending(c, -(int64_t)w->len);
        w->release = NULL;  /* the caller keeps its bytes */
        gs__conn_free_wreq(w, st);
        gs__conn_fail(c, st == GS_ERR_NO_MEMORY ? st : GS_ERR_IO);
    }
    return st;
}

gs_status_t gs_conn_send(gs_conn_t *c, const gs_msg_t *msg)
{
    gs_buf_t b;
    gs_status_t st;
    uint8_t *data;
    size_t len, cap;
    if (c == NULL || msg == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_send: NULL argument");
    if (c->close_requested) {
        return gs_error_set(GS_ERR_CONN_CLOSED, "connection %s is closing; %s message not sent", c->peer_name,
                            gs_msg_type_name(msg->type));
    }
    gs_buf_init(&b);
    st = gs_msg_encode_spare(msg, &b);   /* a large frame into a spare buffer, reused once written */
    if (st != GS_OK) {
        gs_buf_cleanup(&b);
        return st;
    }
    cap = b.cap;
    data = gs_buf_detach(&b, &len);
    return gs__conn_queue(c, data, len, cap > GS_FRAME_SPARE_MIN ? cap : 0, NULL, 0, NULL, NULL);
}

gs_status_t gs_conn_send_data(gs_conn_t *c, const gs_msg_t *msg, gs_conn_release_cb release, void *arg)
{
    gs_buf_t b;
    gs_status_t st;
    uint8_t *data;
    size_t len, tail_len = 0;
    if (c == NULL || msg == NULL || release == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_send_data: NULL argument");
    }
    if (msg->type != GS_MSG_DATA) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_send_data: %s is not a data message",
                            gs_msg_type_name(msg->type));
    }
    if (c->close_requested) {
        return gs_error_set(GS_ERR_CONN_CLOSED, "connection %s is closing; data message not sent", c->peer_name);
    }
    gs_buf_init(&b);
    st = gs_msg_encode_head(msg, &b, &tail_len);
    if (st != GS_OK) {
        gs_buf_cleanup(&b);
        return st;
    }
    data = gs_buf_detach(&b, &len);
    return gs__conn_queue(c, data, len, 0, msg->u.data.data.data, tail_len, release, arg);
}

gs_status_t gs_conn_send_frame_borrowed(gs_conn_t *c, const uint8_t *data, size_t len,
                                        gs_conn_release_cb release, void *arg)
{
    if (c == NULL || data == NULL || release == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_send_frame_borrowed: NULL argument");
    if (c->close_requested)
        return gs_error_set(GS_ERR_CONN_CLOSED, "connection %s is closing; frame not sent", c->peer_name);
    if (!gs_frames_whole(data, len))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_send_frame_borrowed: %zu bytes are not whole frames",
                            len);
    return gs__conn_queue(c, NULL, 0, 0, data, len, release, arg);
}

gs_status_t gs_conn_send_frame(gs_conn_t *c, gs_buf_t *frame)
{
    uint8_t *data;
    size_t len;
    if (frame == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_send_frame: NULL frame");
    if (c == NULL) {
        gs_buf_cleanup(frame);
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_send_frame: NULL connection");
    }
    if (c->close_requested) {
        gs_buf_cleanup(frame);
        return gs_error_set(GS_ERR_CONN_CLOSED, "connection %s is closing; frame not sent", c->peer_name);
    }
    if (!gs_frames_whole(frame->data, frame->len)) {
        size_t flen = frame->len;
        gs_buf_cleanup(frame);
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_send_frame: %zu bytes are not whole frames", flen);
    }
    data = gs_buf_detach(frame, &len);
    return gs__conn_queue(c, data, len, 0, NULL, 0, NULL, NULL);
}

/* ---- accept / connect ---- */

static void gs__conn_name(gs_conn_t *c, const struct sockaddr *sa)
{
    char ip[INET6_ADDRSTRLEN];
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        if (uv_ip4_name(in, ip, sizeof ip) == 0) {
            snprintf(c->peer_name, sizeof c->peer_name, "%s:%u", ip, (unsigned)ntohs(in->sin_port));
        }
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        if (uv_ip6_name(in6, ip, sizeof ip) == 0) {
            snprintf(c->peer_name, sizeof c->peer_name, "[%s]:%u", ip, (unsigned)ntohs(in6->sin6_port));
        }
    }
}

gs_status_t gs_conn_accept(uv_stream_t *server, const gs_conn_params_t *params, gs_conn_t **conn_p)
{
    struct sockaddr_storage ss;
    int sslen = (int)sizeof ss;
    gs_conn_t *c;
    gs_status_t st;
    int r;
    if (server == NULL || conn_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_accept: NULL argument");
    if ((st = gs__conn_new(server->loop, params, &c)) != GS_OK) return st;
    r = uv_accept(server, (uv_stream_t *)&c->tcp);
    if (r < 0) return gs__conn_abort(c, gs_status_from_uv(r, "uv_accept"));
    c->connected = 1;
    uv_tcp_nodelay(&c->tcp, 1);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sslen) == 0) {
        gs__conn_name(c, (struct sockaddr *)&ss);
        c->peer_addr = ss;
        c->has_addr = 1;
    }
    if (params->tls != NULL && (st = gs_tls_session_create(params->tls, NULL, c->peer_name, &c->tls)) != GS_OK) {
        return gs__conn_abort(c, st);
    }
    r = uv_read_start((uv_stream_t *)&c->tcp, gs__conn_alloc_cb, gs__conn_read_cb);
    if (r < 0) return gs__conn_abort(c, gs_status_from_uv(r, "uv_read_start"));
    GS_LOG_DEBUG("accepted connection from %s", c->peer_name);
    *conn_p = c;
    return GS_OK;
}

void gs__conn_submit_waiting(gs_conn_t *c)
{
    while (c->wait_head != NULL) {
        gs__wreq_t *w = c->wait_head;
        c->wait_head = w->next;
        if (c->wait_head == NULL) c->wait_tail = NULL;
        w->next = NULL;
        if (c->handle_closing) {
            gs__conn_pending(c, -(int64_t)w->len);
            gs__conn_free_wreq(w, GS_ERR_CANCELED);
        } else {
            gs_status_t st = gs__conn_submit(c, w);
            if (st != GS_OK) {
                gs__conn_pending(c, -(int64_t)w->len);
                gs__conn_free_wreq(w, st);
                gs__conn_fail(c, st == GS_ERR_NO_MEMORY ? st : GS_ERR_IO);
            }
        }
    }
}

/* Put the TLS session's pending records (handshake, alerts) on the wire. */

static void gs__conn_connect_cb(uv_connect_t *req, int status)
{
    gs_conn_t *c = req->data;
    int was_closing = c->close_requested;
    int r;

    c->connecting = 0;
    if (status < 0) {
        c->tls_connect_pending = 0;  /* reported here */
        gs_status_t st = status == UV_ECANCELED ? GS_ERR_CANCELED : gs_status_from_uv(status, "connect");
        GS_LOG_DEBUG("connection to %s failed: %s", c->peer_name, uv_strerror(status));
        if (c->params.connect_cb != NULL) c->params.connect_cb(c, st, c->params.arg);
        if (was_closing) {
            gs__conn_close_handle(c);
        } else {
            gs_conn_close(c, st);
        }
        return;
    }
    c->connected = 1;
    if (c->tls != NULL) {
        gs__conn_tls_flush(c);  /* the ClientHello */
    } else {
        gs__conn_submit_waiting(c);
    }
    if (!c->close_requested) {
        r = uv_read_start((uv_stream_t *)&c->tcp, gs__conn_alloc_cb, gs__conn_read_cb);
        if (r < 0) gs__conn_fail(c, gs_status_from_uv(r, "uv_read_start"));
    }
    if (c->params.connect_cb != NULL && c->tls == NULL) c->params.connect_cb(c, GS_OK, c->params.arg);
    if (was_closing) gs__conn_shutdown(c);
}

static gs_status_t gs__conn_resolve(uv_loop_t *loop, const char *host, int port, struct sockaddr_storage *ss)
{
    struct addrinfo hints;
    uv_getaddrinfo_t req;
    char service[16];
    int r;
    memset(ss, 0, sizeof *ss);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0) return GS_OK;
    if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0) return GS_OK;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(service, sizeof service, "%d", port);
    r = uv_getaddrinfo(loop, &req, NULL, host, service, &hints);  /* NULL cb: synchronous */
    if (r < 0) {
        gs_status_from_uv(r, "getaddrinfo");
        return gs_error_set(GS_ERR_NOT_FOUND, "cannot resolve host '%s': %s", host, uv_strerror(r));
    }
    if (req.addrinfo == NULL || req.addrinfo->ai_addrlen > sizeof *ss) {
        uv_freeaddrinfo(req.addrinfo);
        return gs_error_set(GS_ERR_NOT_FOUND, "cannot resolve host '%s': no usable address", host);
    }
    memcpy(ss, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
    uv_freeaddrinfo(req.addrinfo);
    return GS_OK;
}

gs_status_t gs_conn_connect(uv_loop_t *loop, const char *host, int port, const gs_conn_params_t *params,
                            gs_conn_t **conn_p)
{
    struct sockaddr_storage ss;
    gs_conn_t *c;
    gs_status_t st;
    int r;
    if (loop == NULL || host == NULL || conn_p == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_connect: NULL argument");
    }
    if (port <= 0 || port > 65535) return gs_error_set(GS_ERR_INVALID_PARAM, "port %d is not in 1..65535", port);
    if (params == NULL || params->msg_cb == NULL || params->close_cb == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "connection parameters need msg_cb and close_cb");
    }
    if ((st = gs__conn_resolve(loop, host, port, &ss)) != GS_OK) return st;
    if ((st = gs__conn_new(loop, params, &c)) != GS_OK) return st;
    gs__conn_name(c, (struct sockaddr *)&ss);
    if (params->tls != NULL) {
        if ((st = gs_tls_session_create(params->tls, host, c->peer_name, &c->tls)) != GS_OK) {
            return gs__conn_abort(c, st);
        }
        c->tls_connect_pending = 1;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    r = uv_tcp_connect(&c->connect_req, &c->tcp, (const struct sockaddr *)&ss, gs__conn_connect_cb);
    if (r < 0) return gs__conn_abort(c, gs_status_from_uv(r, "uv_tcp_connect"));
    c->connecting = 1;
    *conn_p = c;
    return GS_OK;
}

/* ---- accessors ---- */

gs_status_t gs_conn_set_max_frame(gs_conn_t *c, uint32_t bytes)
{
    if (c == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_set_max_frame: NULL connection");
    c->reader.max_frame = bytes != 0 ? bytes : GS_PROTO_DEFAULT_MAX_FRAME;
    return GS_OK;
}

gs_status_t gs_conn_peer_addr(const gs_conn_t *c, struct sockaddr_storage *addr_p)
{
    if (c == NULL || addr_p == NULL || !c->has_addr) {
        return gs_error_set(GS_ERR_NOT_FOUND, "peer address not known");
    }
    *addr_p = c->peer_addr;
    if (addr_p->ss_family == AF_INET) ((struct sockaddr_in *)addr_p)->sin_port = 0;
    if (addr_p->ss_family == AF_INET6) ((struct sockaddr_in6 *)addr_p)->sin6_port = 0;
    return GS_OK;
}

size_t gs_conn_pending_bytes(const gs_conn_t *c)
{
    return c->pending_bytes;
}

int gs_conn_input_peek(const gs_conn_t *c)
{
    uv_os_fd_t fd;
    ssize_t n;
    char b;
    if (c == NULL || c->handle_closing) return 0;
    if (uv_fileno((const uv_handle_t *)&c->tcp, &fd) != 0) return 0;
    n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n != 0 && n != -1) return 1;
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ? -1 : 0;
}

void gs_conn_set_data(gs_conn_t *c, void *data)
{
    c->data = data;
}

void *gs_conn_data(const gs_conn_t *c)
{
    return c->data;
}

const char *gs_conn_peer_name(const gs_conn_t *c)
{
    return c != NULL ? c->peer_name : "?";
}
