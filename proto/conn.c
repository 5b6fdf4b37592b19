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
 * Writing: every frame is one uv_write request (frames queued before the connection is
 * established wait in a list and are submitted in order when it is); a DATA frame sent with
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
 */
#include "proto/conn.h"

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

typedef struct gs__wreq {
    uv_write_t req;
    struct gs__wreq *next;  /* queue of frames waiting for the connection */
    gs_conn_t *conn;
    uint8_t *data;          /* owned: the frame, or the head of a gs_conn_send_data() frame */
    size_t len;             /* bytes of data + tail */
    size_t head_len;        /* bytes of data */
    const uint8_t *tail;    /* borrowed bytes that follow data (gs_conn_send_data) */
    gs_conn_release_cb release;
    void *release_arg;
    uint8_t *cipher;        /* owned: TLS records written instead of data + tail */
} gs__wreq_t;

struct gs_conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_shutdown_t shutdown_req;
    uv_timer_t trim_timer;         /* releases a retained large read buffer when idle */
    gs_conn_params_t params;
    gs_frame_reader_t reader;
    gs__wreq_t *wait_head, *wait_tail;  /* frames queued before the connection was established */
    size_t pending_bytes;
    gs_status_t close_reason;
    unsigned connecting : 1;       /* uv_tcp_connect under way */
    unsigned connected : 1;        /* established: reads and writes go to libuv */
    unsigned close_requested : 1;  /* gs_conn_close() was called (first reason kept) */
    unsigned handle_closing : 1;   /* uv_close() was called */
    unsigned silent : 1;           /* failed creation: free without callbacks */
    unsigned in_msg_cb : 1;        /* msg_cb running: gs_conn_detach_frame() allowed */
    unsigned frame_detached : 1;   /* ... and it took the frame's storage */
    unsigned handles_open : 2;     /* tcp and trim_timer not yet closed */
    unsigned budget_wait : 1;      /* reading stopped until params.budget has room for want */
    unsigned has_addr : 1;         /* peer_addr is known */
    unsigned tls_connect_pending : 1;  /* TLS client: connect_cb not yet called */
    unsigned tls_peer_closed : 1;  /* close_notify came: fail after handing out the frames before it */
    gs_tls_session_t *tls;         /* NULL without TLS */
    uint64_t charged;              /* bytes of the frame in progress charged to params.budget */
    uint64_t want;                 /* bytes waited for (budget_wait) */
    gs_conn_t *wait_next;          /* next connection waiting for the budget */
    gs_conn_t *charged_prev, *charged_next;  /* connections holding a charge */
    uint64_t last_read_ms;         /* loop time of the last bytes received */
    size_t read_counted;           /* reader buffer bytes counted in params.budget->read_bytes */
    struct sockaddr_storage peer_addr;
    void *data;
    char peer_name[64];
};

/* One read buffer per thread, shared by its connections: libuv calls a stream's read_cb right
 * after its alloc_cb, and every byte is consumed (copied into the frame reader, or through the
 * TLS session) before read_cb returns, so no connection needs its own. An idle connection then
 * costs its struct and its reader's small buffer, not 64 KiB. */
static _Thread_local char gs__conn_rbuf[GS__CONN_RBUF];

/* ---- frame budget ---- */

void gs_conn_budget_init(gs_conn_budget_t *b, uint64_t limit)
{
    memset(b, 0, sizeof *b);
    b->limit = limit;
}

/* Keep params.budget's memory counters current: queued write bytes change by @a delta. */
static void gs__conn_pending(gs_conn_t *c, int64_t delta)
{
    gs_conn_budget_t *b = c->params.budget;
    c->pending_bytes = (size_t)((int64_t)c->pending_bytes + delta);
    if (b == NULL) return;
    b->write_bytes = (uint64_t)((int64_t)b->write_bytes + delta);
    if (b->write_bytes > b->write_peak) b->write_peak = b->write_bytes;
}

/* ... and the reader's buffer capacity, after anything that may have changed it. */
static void gs__conn_count_read(gs_conn_t *c)
{
    gs_conn_budget_t *b = c->params.budget;
    size_t cap = c->reader.buf.cap;
    if (b == NULL || cap == c->read_counted) return;
    b->read_bytes = b->read_bytes - c->read_counted + cap;
    c->read_counted = cap;
    if (b->read_bytes > b->read_peak) b->read_peak = b->read_bytes;
}

static void gs__conn_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void gs__conn_fail(gs_conn_t *c, gs_status_t reason);
static void gs__conn_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);
static void gs__conn_tls_flush(gs_conn_t *c);
static gs_status_t gs__conn_tls_feed(gs_conn_t *c, size_t n);

static void gs__budget_charge(gs_conn_budget_t *b, gs_conn_t *c, uint64_t bytes)
{
    b->used += bytes;
    if (b->used > b->peak) b->peak = b->used;
    c->charged = bytes;
    c->last_read_ms = uv_now(c->tcp.loop);
    c->charged_prev = NULL;
    c->charged_next = b->charged_head;
    if (b->charged_head != NULL) b->charged_head->charged_prev = c;
    b->charged_head = c;
}

void gs_conn_budget_expire(gs_conn_budget_t *b, uint32_t stall_ms)
{
    gs_conn_t *c = b->charged_head;
    while (c != NULL && b->wait_head != NULL) {
        gs_conn_t *next = c->charged_next;   /* closing uncharges c (and may wake waiters) */
        uint64_t now = uv_now(c->tcp.loop);
        if (now - c->last_read_ms >= stall_ms) {
            b->stalled_total++;
            GS_LOG_WARN("connection %s: no bytes of a %" PRIu64 "-byte frame for %u ms while others wait for "
                        "frame memory; closing", c->peer_name, c->charged, stall_ms);
            gs__conn_fail(c, gs_error_set(GS_ERR_TIMED_OUT, "frame stalled for %u ms", stall_ms));
        }
        c = next;
    }
}

/* Restart the waiting connections, in order, while the first one fits. */
static void gs__budget_wake(gs_conn_budget_t *b)
{
    while (b->wait_head != NULL && (b->limit == 0 || b->used + b->wait_head->want <= b->limit)) {
        gs_conn_t *c = b->wait_head;
        int r;
        b->wait_head = c->wait_next;
        if (b->wait_head == NULL) b->wait_tail = NULL;
        c->wait_next = NULL;
        c->budget_wait = 0;
        gs__budget_charge(b, c, c->want);
        GS_LOG_DEBUG("connection %s: %" PRIu64 " frame bytes granted", c->peer_name, c->want);
        r = uv_read_start((uv_stream_t *)&c->tcp, gs__conn_alloc_cb, gs__conn_read_cb);
        if (r < 0) gs__conn_fail(c, gs_status_from_uv(r, "uv_read_start"));
    }
}

/* Give back the connection's charge (the frame was handed out, or reading is over) and leave
 * the queue; the waiting connections that now fit resume. */
static void gs__conn_budget_uncharge(gs_conn_t *c)
{
    gs_conn_budget_t *b = c->params.budget;
    if (b == NULL || c->charged == 0) return;
    b->used -= c->charged;
    c->charged = 0;
    if (c->charged_prev != NULL) {
        c->charged_prev->charged_next = c->charged_next;
    } else {
        b->charged_head = c->charged_next;
    }
    if (c->charged_next != NULL) c->charged_next->charged_prev = c->charged_prev;
    c->charged_prev = c->charged_next = NULL;
    gs__budget_wake(b);
}

static void gs__conn_budget_release(gs_conn_t *c)
{
    gs_conn_budget_t *b = c->params.budget;
    if (b == NULL) return;
    if (c->budget_wait) {
        gs_conn_t **pp = &b->wait_head, *prev = NULL;
        while (*pp != c) {
            prev = *pp;
            pp = &(*pp)->wait_next;
        }
        *pp = c->wait_next;
        if (b->wait_tail == c) b->wait_tail = prev;
        c->wait_next = NULL;
        c->budget_wait = 0;
    }
    gs__conn_budget_uncharge(c);
}

/* Before the reader examines the next frame: charge it when large. 1: go on; 0: reading stopped
 * until the budget has room; -1: the frame can never fit (connection failed). */
static int gs__conn_budget_charge(gs_conn_t *c)
{
    gs_conn_budget_t *b = c->params.budget;
    const gs_frame_reader_t *r = &c->reader;
    uint64_t flen;
    if (b == NULL || c->charged != 0 || r->buf.len - r->pos < GS_PROTO_FRAME_HEADER) return 1;
    flen = (uint64_t)r->buf.data[r->pos] | (uint64_t)r->buf.data[r->pos + 1] << 8 |
           (uint64_t)r->buf.data[r->pos + 2] << 16 | (uint64_t)r->buf.data[r->pos + 3] << 24;
    if (flen <= GS_CONN_BUDGET_MIN_FRAME || flen > r->max_frame) return 1;  /* not charged / refused */
    if (b->limit != 0 && flen > b->limit) {
        b->refused_total++;
        GS_LOG_WARN("connection %s: frame of %" PRIu64 " bytes exceeds the frame memory budget of %" PRIu64
                    " bytes; closing", c->peer_name, flen, b->limit);
        gs__conn_fail(c, gs_error_set(GS_ERR_MSG_TOO_LARGE, "frame of %" PRIu64 " bytes exceeds the frame "
                                      "memory budget of %" PRIu64 " bytes", flen, b->limit));
        return -1;
    }
    if (b->wait_head == NULL && (b->limit == 0 || b->used + flen <= b->limit)) {
        gs__budget_charge(b, c, flen);
        return 1;
    }
    b->waits_total++;
    GS_LOG_DEBUG("connection %s: frame of %" PRIu64 " bytes waits for frame memory (%" PRIu64 " of %" PRIu64
                 " in use)", c->peer_name, flen, b->used, b->limit);
    c->want = flen;
    c->budget_wait = 1;
    if (b->wait_tail != NULL) {
        b->wait_tail->wait_next = c;
    } else {
        b->wait_head = c;
    }
    b->wait_tail = c;
    uv_read_stop((uv_stream_t *)&c->tcp);
    return 0;
}

/* ---- lifetime ---- */

/* Free a write request; a borrowed tail is released with @a status (exactly once: here). */
static void gs__conn_free_wreq(gs__wreq_t *w, gs_status_t status)
{
    if (w->release != NULL) w->release(w->release_arg, status);
    gs_free(w->cipher);
    gs_free(w->data);
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

/* Graceful end after a GS_OK close: flush queued writes, then close. */
static void gs__conn_shutdown(gs_conn_t *c)
{
    if (c->handle_closing) return;
    if (c->tls != NULL && c->connected) {
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
    if (c == NULL || c->close_requested) return;
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

static void gs__conn_fail(gs_conn_t *c, gs_status_t reason)
{
    gs_conn_close(c, reason);
}

/* ---- reading ---- */

static void gs__conn_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
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

static void gs__conn_trim_cb(uv_timer_t *t)
{
    gs_conn_t *c = t->data;
    gs_frame_reader_trim(&c->reader);
    gs__conn_count_read(c);
    gs_frame_storage_trim();
}

/* (Re)start the idle timer while a large buffer waits for reuse: this reader's, or the thread's
 * spare (detached frames given back). */
static void gs__conn_arm_trim(gs_conn_t *c)
{
    if (c->handle_closing) return;
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
    if (nread == 0 || c->close_requested) return;
    c->last_read_ms = uv_now(c->tcp.loop);
    if (c->tls != NULL) {
        if (gs__conn_tls_feed(c, (size_t)nread) != GS_OK) return;
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

static void gs__conn_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
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

/* Hand @a w to libuv. On failure @a w is untouched (still counted in pending_bytes): the caller
 * disposes of it and then fails the connection. */
static gs_status_t gs__conn_submit(gs_conn_t *c, gs__wreq_t *w)
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
    }
    r = uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, nbufs, gs__conn_write_cb);
    if (r < 0) return gs_status_from_uv(r, "uv_write");
    return GS_OK;
}

/* Queue @a data (owned, gs_malloc'ed) of @a len bytes followed by @a tail_len borrowed bytes at
 * @a tail (released through @a release once written or dropped -- but not when this fails: the
 * caller keeps them then). */
static gs_status_t gs__conn_queue(gs_conn_t *c, uint8_t *data, size_t len, const uint8_t *tail, size_t tail_len,
                                  gs_conn_release_cb release, void *release_arg)
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
    size_t len;
    if (c == NULL || msg == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_conn_send: NULL argument");
    if (c->close_requested) {
        return gs_error_set(GS_ERR_CONN_CLOSED, "connection %s is closing; %s message not sent", c->peer_name,
                            gs_msg_type_name(msg->type));
    }
    gs_buf_init(&b);
    st = gs_msg_encode(msg, &b);
    if (st != GS_OK) {
        gs_buf_cleanup(&b);
        return st;
    }
    data = gs_buf_detach(&b, &len);
    return gs__conn_queue(c, data, len, NULL, 0, NULL, NULL);
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
    return gs__conn_queue(c, data, len, msg->u.data.data.data, tail_len, release, arg);
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
    return gs__conn_queue(c, NULL, 0, data, len, release, arg);
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
    return gs__conn_queue(c, data, len, NULL, 0, NULL, NULL);
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

static void gs__conn_refuse_now(gs_conn_refuser_t *r, uv_stream_t *server);

static void gs__conn_refused_cb(uv_handle_t *handle)
{
    gs_conn_refuser_t *r = handle->data;
    uv_stream_t *server = r->waiting;
    r->closing = 0;
    r->waiting = NULL;
    /* a closed server's pending descriptor was closed with it */
    if (server != NULL && !uv_is_closing((uv_handle_t *)server)) gs__conn_refuse_now(r, server);
    if (!gs_conn_refuser_busy(r) && r->idle_cb != NULL) r->idle_cb(r);
}

/* Accept into the refuser's handle (its memory is the caller's: nothing to allocate) and close
 * it: uv_accept() makes libuv watch @a server again, whatever it returns. */
static void gs__conn_refuse_now(gs_conn_refuser_t *r, uv_stream_t *server)
{
    (void)uv_tcp_init(server->loop, &r->tcp);   /* AF_UNSPEC: creates no socket, cannot fail */
    r->tcp.data = r;
    /* UV_EAGAIN: nothing was pending (accepted before its connection failed); on another
     * failure libuv closed the descriptor */
    if (uv_accept(server, (uv_stream_t *)&r->tcp) != UV_EAGAIN) r->refused_total++;
    r->closing = 1;
    uv_close((uv_handle_t *)&r->tcp, gs__conn_refused_cb);
}

int gs_conn_refuse(gs_conn_refuser_t *r, uv_stream_t *server)
{
    int was_busy;
    if (r == NULL || server == NULL) return 0;
    was_busy = gs_conn_refuser_busy(r);
    if (r->closing) {
        r->waiting = server;   /* one server per refuser: its callback runs once until accepted */
    } else {
        gs__conn_refuse_now(r, server);
    }
    GS_LOG_DEBUG("refused a connection (%" PRIu64 " so far)", r->refused_total);
    return !was_busy;
}

int gs_conn_refuser_busy(const gs_conn_refuser_t *r)
{
    return r != NULL && (r->closing || r->waiting != NULL);
}

/* Submit the frames queued before the connection (or its TLS session) was established. */
static void gs__conn_submit_waiting(gs_conn_t *c)
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
static void gs__conn_tls_flush(gs_conn_t *c)
{
    gs__wreq_t *w;
    gs_status_t st;
    if (c->handle_closing || gs_tls_session_pending_output(c->tls) == 0) return;
    w = gs_calloc(1, sizeof *w, "conn write");
    /* head_len: the records' bytes; len stays 0 (no frame bytes) */
    if (w == NULL || gs_tls_session_seal(c->tls, NULL, 0, NULL, 0, &w->cipher, &w->head_len) != GS_OK) {
        gs_free(w);
        gs__conn_fail(c, GS_ERR_NO_MEMORY);
        return;
    }
    w->conn = c;
    if ((st = gs__conn_submit(c, w)) != GS_OK) {
        gs__conn_free_wreq(w, st);
        gs__conn_fail(c, GS_ERR_IO);
    }
}

static gs_status_t gs__conn_tls_plain(void *arg, const void *data, size_t len)
{
    gs_conn_t *c = arg;
    if (gs_frame_reader_feed(&c->reader, data, len) != GS_OK) {
        GS_LOG_WARN("connection %s: out of memory buffering a frame", c->peer_name);
        return GS_ERR_NO_MEMORY;
    }
    return GS_OK;
}

/* Feed @a n received bytes of the read buffer through the TLS session; on completion of the handshake send
 * the waiting frames (and report a client's connection). Fails the connection on error. */
static gs_status_t gs__conn_tls_feed(gs_conn_t *c, size_t n)
{
    int was_ready = gs_tls_session_ready(c->tls);
    gs_status_t st = gs_tls_session_feed(c->tls, gs__conn_rbuf, n, gs__conn_tls_plain, c);
    gs__conn_tls_flush(c);  /* handshake replies, alerts, session tickets */
    if (st == GS_ERR_CONN_CLOSED && !c->close_requested) c->tls_peer_closed = 1;
    else if (st != GS_OK) {
        gs__conn_fail(c, st);
        return st;
    }
    if (!was_ready && gs_tls_session_ready(c->tls) && !c->close_requested) {
        gs__conn_submit_waiting(c);
        if (c->tls_connect_pending) {
            c->tls_connect_pending = 0;
            if (c->params.connect_cb != NULL) c->params.connect_cb(c, GS_OK, c->params.arg);
        }
    }
    return c->close_requested ? GS_ERR_CONN_CLOSED : GS_OK;
}

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
