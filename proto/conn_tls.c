/*
 * The TLS layer of the framed connections (params.tls set; the rules are in proto/conn.c's
 * opening comment): received ciphertext through the session into the frame reader, the
 * session's own records (handshake, alerts, tickets) onto the wire, and what the end of the
 * handshake releases: the frames waiting for it and a client's connect_cb.
 */
#include "proto/conn_int.h"

#include "common/alloc.h"
#include "common/log.h"

void gs__conn_tls_flush(gs_conn_t *c)
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
    if (c->close_requested) return GS_OK;  /* closing (its handshake still running): dropped */
    if (gs_frame_reader_feed(&c->reader, data, len) != GS_OK) {
        GS_LOG_WARN("connection %s: out of memory buffering a frame", c->peer_name);
        return GS_ERR_NO_MEMORY;
    }
    return GS_OK;
}

/* Feed @a n received bytes at @a data through the TLS session; on completion of the handshake send
 * the waiting frames (and report a client's connection). Fails the connection on error. */
gs_status_t gs__conn_tls_feed(gs_conn_t *c, const void *data, size_t n)
{
    int was_ready = gs_tls_session_ready(c->tls);
    gs_status_t st = gs_tls_session_feed(c->tls, data, n, gs__conn_tls_plain, c);
    gs__conn_tls_flush(c);  /* handshake replies, alerts, session tickets */
    if (st == GS_ERR_CONN_CLOSED && !c->close_requested) c->tls_peer_closed = 1;
    else if (st != GS_OK) {
        gs__conn_fail(c, st);
        return st;
    }
    if (!was_ready && gs_tls_session_ready(c->tls) && (!c->close_requested || c->tls_close_pending)) {
        gs__conn_submit_waiting(c);
        if (c->tls_connect_pending) {
            c->tls_connect_pending = 0;
            if (c->params.connect_cb != NULL) c->params.connect_cb(c, GS_OK, c->params.arg);
        }
        if (c->tls_close_pending) {  /* the frames are queued: now close_notify after them */
            c->tls_close_pending = 0;
            uv_timer_stop(&c->trim_timer);  /* the wait's deadline */
            uv_read_stop((uv_stream_t *)&c->tcp);
            gs__conn_shutdown(c);
        }
    }
    return c->close_requested ? GS_ERR_CONN_CLOSED : GS_OK;
}

int gs__conn_tls_close_waits(gs_conn_t *c)
{
    int r;
    if (c->tls_close_pending) return 1;
    if (gs_tls_session_ready(c->tls) || c->wait_head == NULL) return 0;
    /* the frames are dropped only when the handshake cannot go on */
    r = uv_read_start((uv_stream_t *)&c->tcp, gs__conn_alloc_cb, gs__conn_read_cb);
    if (r < 0) {
        GS_LOG_DEBUG("connection %s: uv_read_start failed (%s); frames waiting for the TLS handshake dropped",
                     c->peer_name, uv_strerror(r));
        return 0;
    }
    c->tls_close_pending = 1;
    gs__conn_arm_close_wait(c);  /* bounded: a peer may stall its handshake for ever */
    GS_LOG_DEBUG("connection %s: closing once the TLS handshake has sent %zu waiting bytes", c->peer_name,
                 c->pending_bytes);
    return 1;
}
