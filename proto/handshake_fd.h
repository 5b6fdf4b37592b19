/*
 * The peer side of gsched's handshake (proto/handshake.h) run to completion on a connected stream
 * socket, blocking, for programs without a libuv loop (tests/fuzz/sockfuzz, tools): HELLO,
 * gsched's CHALLENGE checked, AUTH, WELCOME. Any change to what a peer proves belongs in
 * proto/handshake.c, which this follows.
 */
#ifndef GS_PROTO_HANDSHAKE_FD_H
#define GS_PROTO_HANDSHAKE_FD_H

#include "proto/msg.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Run the handshake on @a fd (a connected stream socket, blocking or not, owned by the caller and
 *  never closed here) as @a role named @a name with @a token (NULL or "" for none; both
 *  borrowed), within @a timeout_s seconds. GS_OK: WELCOME arrived; *welcome_p (may be NULL) gets
 *  its scalar fields (data_key is emptied: its bytes are not kept) and the socket is positioned right after it
 *  (nothing later was read). Errors: the status of gsched's ERROR (its message in
 *  gs_last_error()); GS_ERR_AUTH when gsched's proof does not match @a token (wrong token, or
 *  not the real gsched: nothing is answered); GS_ERR_PROTO for an unexpected answer or a
 *  WELCOME of another protocol version; GS_ERR_CONN_CLOSED, GS_ERR_TIMED_OUT, GS_ERR_IO,
 *  GS_ERR_NO_MEMORY. */
gs_status_t gs_proto_handshake_fd(int fd, gs_peer_role_t role, const char *token, const char *name,
                                  double timeout_s, gs_msg_welcome_t *welcome_p);

/** Read one frame from @a fd and decode it into *msg_p (release with gs_msg_cleanup()), reading
 *  exactly that frame, within @a timeout_s. A frame announcing more than @a max_frame bytes is
 *  GS_ERR_PROTO (nothing more read). Errors as gs_proto_handshake_fd's transport errors, and
 *  those of gs_msg_decode. */
gs_status_t gs_proto_fd_recv_msg(int fd, uint32_t max_frame, double timeout_s, gs_msg_t *msg_p);

/** Write all @a len bytes of @a data to @a fd (SIGPIPE is not raised) within @a timeout_s
 *  seconds. GS_OK; GS_ERR_CONN_CLOSED when the peer closed or reset the connection;
 *  GS_ERR_TIMED_OUT; GS_ERR_IO otherwise (message in gs_last_error()). Part of the data may
 *  have been written on error. */
gs_status_t gs_proto_fd_send(int fd, const void *data, size_t len, double timeout_s);

/** Encode @a msg and write it as one frame (gs_proto_fd_send's errors, and the encoder's). */
gs_status_t gs_proto_fd_send_msg(int fd, const gs_msg_t *msg, double timeout_s);

#ifdef __cplusplus
}
#endif
#endif
