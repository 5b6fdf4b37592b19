/*
 * The peer side of gsched's handshake, in one place: the HELLO every peer (client, worker, test
 * or tool) opens a connection with, and a blocking handshake over a connected stream socket for
 * programs without a libuv loop (tests/fuzz/sockfuzz, command-line tools). The client library and
 * gworker build their HELLO with gs_proto_hello_init(); any change to what a peer proves at the
 * handshake belongs here so that every peer follows it.
 */
#ifndef GS_PROTO_HELLO_H
#define GS_PROTO_HELLO_H

#include "proto/msg.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Fill @a m with HELLO(GS_PROTO_VERSION, @a role, @a token, @a name). @a token and @a name are
 *  borrowed (NUL-terminated; NULL means empty) and must outlive every use of @a m; nothing is
 *  allocated, so there is nothing to release. */
void gs_proto_hello_init(gs_msg_t *m, gs_peer_role_t role, const char *token, const char *name);

/** Run the handshake on @a fd, a connected, blocking or non-blocking stream socket owned by the
 *  caller (never closed here): send the HELLO of gs_proto_hello_init(@a role, @a token,
 *  @a name) and read until gsched answers. GS_OK: WELCOME arrived; *welcome_p (may be NULL) gets
 *  it and the socket is positioned right after it (nothing later was read). Errors: the status
 *  of gsched's ERROR (its message in gs_last_error()), GS_ERR_PROTO for a WELCOME of another
 *  protocol version or any other answer, GS_ERR_CONN_CLOSED when gsched closed the
 *  connection, GS_ERR_TIMED_OUT after @a timeout_s seconds, GS_ERR_NO_MEMORY. */
gs_status_t gs_proto_handshake_fd(int fd, gs_peer_role_t role, const char *token, const char *name,
                                  double timeout_s, gs_msg_welcome_t *welcome_p);

/** Write all @a len bytes of @a data to @a fd (a stream socket, blocking or not; SIGPIPE is not
 *  raised) within @a timeout_s seconds. GS_OK; GS_ERR_CONN_CLOSED when the peer closed or reset
 *  the connection; GS_ERR_TIMED_OUT; GS_ERR_IO otherwise (message in gs_last_error()). Part of
 *  the data may have been written on error. */
gs_status_t gs_proto_fd_send(int fd, const void *data, size_t len, double timeout_s);

#ifdef __cplusplus
}
#endif
#endif
