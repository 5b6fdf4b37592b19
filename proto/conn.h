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
#include "proto/tls.h"

#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_conn gs_conn_t;

/** A budget of bytes that a set of connections may reserve for frames being received (shared by
 *  every connection whose params name it; all on one loop thread). A frame larger than
 *  GS_CONN_BUDGET_MIN_FRAME is charged its announced length once its header is in, before its
 *  buffer is reserved, and uncharged when it has been handed to msg_cb (or the connection
 *  closes). A frame that does not fit the remaining budget stops the connection's reading until
 *  other frames free enough (first come, first served; counted in waits_total); a frame larger
 *  than the whole budget closes the connection with GS_ERR_MSG_TOO_LARGE (refused_total). So
 *  the connections hold at most limit bytes of large frames, plus each a drained buffer of at
 *  most GS_CONN_BUDGET_KEPT (larger ones are released after every read) or a small frame being
 *  received (less than 128 KiB). The read buffer itself is one per thread.
 *  Initialise with gs_conn_budget_init(); the fields are read-only counters for the owner. */
typedef struct gs_conn_budget {
    uint64_t limit;                /* 0 = unbounded (only counted) */
    uint64_t used;                 /* bytes charged now */
    uint64_t peak;                 /* highest used */
    uint64_t waits_total;          /* frames that had to wait for budget */
    uint64_t refused_total;        /* frames larger than limit (connection closed) */
    uint64_t stalled_total;        /* connections closed by gs_conn_budget_expire() */
    /* Memory of the connections naming the budget (all of it, large frames or not), now and at
     * the peak: for stats and for finding where a daemon's memory goes. */
    uint64_t nconns;               /* connections naming it, not yet freed */
    uint64_t read_bytes;           /* receive buffers of their frame readers */
    uint64_t read_peak;
    uint64_t write_bytes;          /* bytes queued for writing, not yet written */
    uint64_t write_peak;
    gs_conn_t *wait_head, *wait_tail;  /* private: connections waiting, in order */
    gs_conn_t *charged_head;       /* private: connections holding a charge */
} gs_conn_budget_t;

/** While connections wait for @a budget: close (GS_ERR_TIMED_OUT, counted in stalled_total) every
 *  connection holding a charge that has received nothing for @a stall_ms, so peers that announce
 *  large frames and stop sending cannot keep the others waiting. Call it periodically. */
void gs_conn_budget_expire(gs_conn_budget_t *budget, uint32_t stall_ms);

/** Bytes of the read buffer (one per thread, shared by its connections). */
#define GS_CONN_READ_BUFFER (64u * 1024u)
/** A connection naming a budget keeps at most this much of a drained frame reader's buffer. */
#define GS_CONN_BUDGET_KEPT (16u * 1024u)

/** Frames of at most this many bytes are not charged to a budget (they fit the read buffer). */
#define GS_CONN_BUDGET_MIN_FRAME (64u * 1024u)

/** Initialise @a budget with @a limit bytes (0 = unbounded). It must outlive every connection
 *  that names it (no cleanup needed once they have closed). */
void gs_conn_budget_init(gs_conn_budget_t *budget, uint64_t limit);

/** A decoded message. @a msg is valid only during the call (it is cleaned up afterwards). A DATA
 *  message's bytes are not copied out of the received frame (gs_msg_decode_borrow: no alignment
 *  guarantee), nor are the integer tables of a frame whose payload is 8-byte aligned (the reader
 *  aligns frames over 64 KiB); gs_conn_detach_frame() keeps them alive past the call. */
typedef void (*gs_conn_msg_cb)(gs_conn_t *conn, gs_msg_t *msg, void *arg);
/** Borrowed bytes of gs_conn_send_data() are no longer used: @a status GS_OK once written,
 *  GS_ERR_CANCELED when dropped by a close, another error when the write failed. */
typedef void (*gs_conn_release_cb)(void *arg, gs_status_t status);
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
    gs_conn_budget_t *budget;       /* NULL = large frames are not charged to any budget */
    gs_tls_ctx_t *tls;              /* NULL = plain TCP; else TLS with this context (proto/tls.h):
                                       server context for gs_conn_accept, client context for
                                       gs_conn_connect (the host is verified against the server's
                                       certificate). Must outlive the connection. */
    uint32_t close_wait_ms;         /* TLS only: how long an orderly close (gs_conn_close with
                                       GS_OK) of a connection whose own handshake has not finished
                                       waits for it, so that the frames queued before the close are
                                       sent; past it the connection closes with GS_ERR_TIMED_OUT and
                                       they are dropped. 0 = GS_CONN_CLOSE_WAIT_MS */
} gs_conn_params_t;

/** The default bound of a TLS connection's close waiting for its handshake (ms). */
#define GS_CONN_CLOSE_WAIT_MS 10000u

/** Accept a pending connection on @a server and start reading. On success *@a conn_p is the
 *  connection (the caller's until close_cb). On failure (GS_ERR_INVALID_PARAM, GS_ERR_NO_MEMORY,
 *  an I/O or TLS error) *@a conn_p is untouched and the pending connection may still be waiting
 *  in @a server: a connection callback that gets an error (or cannot call this at all) must hand
 *  the connection to gs_conn_refuse(), else libuv never accepts on @a server again. */
gs_status_t gs_conn_accept(uv_stream_t *server, const gs_conn_params_t *params, gs_conn_t **conn_p);

typedef struct gs_conn_refuser gs_conn_refuser_t;
/** Called when @a r has nothing left to close (gs_conn_refuser_busy() is 0 again). */
typedef void (*gs_conn_refuser_idle_cb)(gs_conn_refuser_t *r);

/** Refuses pending connections without allocating: libuv stops watching a listening socket
 *  whose connection callback returned without uv_accept() (the accepted descriptor stays in
 *  the handle and no later connection is ever accepted), so a callback that cannot take a
 *  connection (out of memory) accepts it into this handle, which closes it at once. Owned by
 *  the server's owner, zero-initialised, on the server's loop thread; it must stay valid (and
 *  the server open or closed, not freed) while gs_conn_refuser_busy() is 1. */
struct gs_conn_refuser {
    uv_tcp_t tcp;                   /* private: accepts the connection to refuse, then closes */
    uv_stream_t *waiting;           /* private: a server whose connection waits for tcp */
    int closing;                    /* private: tcp is closing */
    uint64_t refused_total;         /* connections refused */
    gs_conn_refuser_idle_cb idle_cb;  /* optional (the owner's: e.g. to count it as a handle) */
    void *data;                     /* the owner's */
};

/** Refuse the connection pending on @a server (call it from the server's connection callback,
 *  after gs_conn_accept() failed or instead of it): the peer sees the connection closed, and
 *  @a server accepts the following connections. When the handle is still closing from the
 *  previous refusal, the connection is refused as soon as it has closed (libuv does not watch
 *  @a server meanwhile: nothing is lost, accepting only pauses). Returns 1 when @a r went from
 *  idle to busy (idle_cb runs later, once), else 0. No error: nothing here can fail. */
int gs_conn_refuse(gs_conn_refuser_t *r, uv_stream_t *server);

/** 1 while @a r has a connection to refuse or its handle is closing, else 0. */
int gs_conn_refuser_busy(const gs_conn_refuser_t *r);

/** Start connecting to @a host:@a port (numeric address or name resolved synchronously).
 *  connect_cb reports the outcome; messages may be queued with gs_conn_send() before it. */
gs_status_t gs_conn_connect(uv_loop_t *loop, const char *host, int port,
                            const gs_conn_params_t *params, gs_conn_t **conn_p);

/** Encode and queue @a msg. GS_ERR_CONN_CLOSED once closing; GS_ERR_NO_MEMORY. The message's
 *  pointers are only read during the call. */
gs_status_t gs_conn_send(gs_conn_t *conn, const gs_msg_t *msg);

/** Queue an already encoded frame; takes ownership of @a frame's storage in every case. */
gs_status_t gs_conn_send_frame(gs_conn_t *conn, gs_buf_t *frame);

/** Queue the already encoded whole frames at @a data (@a len bytes) without copying them: the
 *  bytes stay the caller's and must stay valid and unchanged until @a release(@a arg, status) is
 *  called -- once, on the loop thread, when they were written (GS_OK) or dropped. On failure
 *  (the returned status) @a release is not called and the caller keeps the bytes. Lets a sender
 *  reuse the storage of a large frame (the client's GRAPH_SUBMIT). */
gs_status_t gs_conn_send_frame_borrowed(gs_conn_t *conn, const uint8_t *data, size_t len,
                                        gs_conn_release_cb release, void *arg);

/** Queue the DATA message @a msg without copying its bytes: only the fields before them are
 *  encoded (gs_msg_encode_head; same bytes on the wire as gs_conn_send), and msg->u.data.data is
 *  written from where it lies. Those bytes must stay valid and unchanged until @a release runs;
 *  it runs exactly once, from the loop and never inside this call: after the frame was written
 *  (GS_OK), or when the write fails or the connection closes first (an error status). If this
 *  returns an error (GS_ERR_INVALID_PARAM: NULL argument or not a DATA message; GS_ERR_CONN_CLOSED
 *  once closing; GS_ERR_NO_MEMORY; an encoding error), @a release is never called and the bytes
 *  stay the caller's. The rest of @a msg is only read during the call. */
gs_status_t gs_conn_send_data(gs_conn_t *conn, const gs_msg_t *msg, gs_conn_release_cb release, void *arg);

/** Only inside msg_cb, at most once per message: take the storage of the frame that carried the
 *  current message, so the bytes a DATA message borrows from it stay valid after msg_cb returns
 *  (e.g. to relay them with gs_conn_send_data). The caller releases *storage_p with
 *  gs_frame_storage_free(), which keeps a few large buffers per thread for the next large frames
 *  the connections of this thread receive (freed after GS__CONN_TRIM_MS without use, or when a
 *  connection of this thread closes). Bytes the connection received after the frame are kept
 *  for it (GS_ERR_NO_MEMORY if they cannot be: nothing changed). GS_ERR_INVALID_PARAM outside
 *  msg_cb, on a second call or for NULL arguments. */
gs_status_t gs_conn_detach_frame(gs_conn_t *conn, gs_frame_storage_t **storage_p);

/** Close (idempotent). Queued writes are flushed when @a reason is GS_OK, dropped otherwise. On
 *  a TLS connection, frames queued before its handshake completed are sent once it does, then
 *  close_notify (the connection reads until then; what it receives is dropped); a later call
 *  with an error reason stops that wait and drops them. */
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
/** What waits unread in the socket's receive queue: 1 bytes from the peer (a peer that has
 *  spoken, e.g. sent its HELLO, while the loop was busy); -1 the peer's end of stream or a
 *  reset (it is gone; the loop has not read it yet); 0 nothing, also for NULL or a closing
 *  connection. Bytes already read (a partial frame in the reader) do not count. */
int gs_conn_input_peek(const gs_conn_t *conn);
/** User data slot (not touched by gs_conn). */
void gs_conn_set_data(gs_conn_t *conn, void *data);
void *gs_conn_data(const gs_conn_t *conn);
/** The peer's address of an accepted connection (IP in *addr_p, port zeroed), so connections
 *  can be counted per address. GS_ERR_NOT_FOUND when it is not known. */
gs_status_t gs_conn_peer_addr(const gs_conn_t *conn, struct sockaddr_storage *addr_p);
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
