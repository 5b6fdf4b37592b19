/**
 * Framed message connections over libuv TCP streams (control plane of gsched, gworker and the
 * client). A gs_conn_t reads frames, decodes them (gs_msg_decode) and hands each message to
 * msg_cb; it encodes and queues outgoing messages without blocking the loop.
 *
 * Lifetime: a connection lives until close_cb has run. gs_conn_close() may be called any number
 * of times from the loop thread (first reason wins); close_cb runs exactly once, from the loop,
 * never from inside gs_conn_close() itself, and the connection is freed right after it returns.
 * A malformed frame, an oversized frame, EOF or a read/write error close the connection with
 * GS_ERR_PROTO / GS_ERR_MSG_TOO_LARGE / GS_ERR_CONN_CLOSED / GS_ERR_IO. Nothing a peer sends can
 * crash the process.
 *
 * All functions must be called on the loop's thread.
 */
#ifndef GS_PROTO_CONN_H
#define GS_PROTO_CONN_H

#include "proto/msg.h"

#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_conn gs_conn_t;

/** A decoded message. @a msg is valid only during the call (it is cleaned up afterwards). */
typedef void (*gs_conn_msg_cb)(gs_conn_t *conn, gs_msg_t *msg, void *arg);
/** Called once when the connection is closed (by either side); @a reason GS_OK for a local
 *  close with GS_OK. The connection is freed after this returns. */
typedef void (*gs_conn_close_cb)(gs_conn_t *conn, gs_status_t reason, void *arg);
/** Outcome of gs_conn_connect(): GS_OK, or an error after which close_cb follows. */
typedef void (*gs_conn_connect_cb)(gs_conn_t *conn, gs_status_t status, void *arg);

typedef struct gs_conn_params {
    gs_conn_msg_cb msg_cb;
    gs_conn_close_cb close_cb;
    gs_conn_connect_cb connect_cb;  /* gs_conn_connect only */
    void *arg;
    uint32_t max_frame;             /* 0 = GS_PROTO_DEFAULT_MAX_FRAME */
} gs_conn_params_t;

/** Accept a pending connection on @a server and start reading. */
gs_status_t gs_conn_accept(uv_stream_t *server, const gs_conn_params_t *params, gs_conn_t **conn_p);

/** Start connecting to @a host:@a port (numeric address or name resolved synchronously).
 *  connect_cb reports the outcome; messages may be queued with gs_conn_send() before it. */
gs_status_t gs_conn_connect(uv_loop_t *loop, const char *host, int port,
                            const gs_conn_params_t *params, gs_conn_t **conn_p);

/** Encode and queue @a msg. GS_ERR_CONN_CLOSED once closing; GS_ERR_NO_MEMORY. The message's
 *  pointers are only read during the call. */
gs_status_t gs_conn_send(gs_conn_t *conn, const gs_msg_t *msg);

/** Queue an already encoded frame; takes ownership of @a frame's storage in every case. */
gs_status_t gs_conn_send_frame(gs_conn_t *conn, gs_buf_t *frame);

/** Close (idempotent). Queued writes are flushed when @a reason is GS_OK, dropped otherwise. */
void gs_conn_close(gs_conn_t *conn, gs_status_t reason);

/** Change the largest frame this connection accepts (0 = GS_PROTO_DEFAULT_MAX_FRAME). Takes
 *  effect at the next frame header examined, including frames already received and not yet
 *  handed out, so a msg_cb may lower or raise the limit for the frames that follow its message
 *  (gsched accepts small frames only until the handshake succeeds). A header announcing more
 *  closes the connection at once with GS_ERR_MSG_TOO_LARGE (logged as a warning naming the
 *  peer and both sizes); the announced payload is never buffered. GS_ERR_INVALID_PARAM for a
 *  NULL connection. */
gs_status_t gs_conn_set_max_frame(gs_conn_t *conn, uint32_t bytes);

/** Bytes queued for writing and not yet written (for backpressure). */
size_t gs_conn_pending_bytes(const gs_conn_t *conn);
/** User data slot (not touched by gs_conn). */
void gs_conn_set_data(gs_conn_t *conn, void *data);
void *gs_conn_data(const gs_conn_t *conn);
/** "ip:port" of the peer, or "?" (owned by the connection). */
const char *gs_conn_peer_name(const gs_conn_t *conn);

/** Parse "tcp://host:port" (or "host:port") into @a host (NUL-terminated, @a host_len bytes)
 *  and *port_p. GS_ERR_INVALID_PARAM with a message on anything else. */
gs_status_t gs_addr_parse(const char *addr, char *host, size_t host_len, int *port_p);

/** Convert a libuv error code at the boundary (logged with @a what). */
gs_status_t gs_status_from_uv(int uv_err, const char *what);

#ifdef __cplusplus
}
#endif
#endif
