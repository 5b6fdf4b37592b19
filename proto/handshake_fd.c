/* The peer side of the handshake run blocking on a socket (proto/handshake_fd.h), over the
 * protocol steps of proto/handshake.c. */
#include "proto/handshake_fd.h"

#include "proto/handshake.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/error.h"
#include "common/time.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The largest answer read during the handshake (WELCOME and ERROR are far smaller). */
#define GS__HELLO_MAX_ANSWER (64u * 1024u)

/* Wait until @a fd is ready for @a events or @a deadline (gs_now_s) passes. */
static gs_status_t gs__hello_wait(int fd, short events, double deadline)
{
    for (;;) {
        struct pollfd pfd = {fd, events, 0};
        double left = deadline - gs_now_s();
        int r;
        if (left <= 0) return gs_error_set(GS_ERR_TIMED_OUT, "timed out on a socket (handshake)");
        r = poll(&pfd, 1, (int)(left * 1000.0) + 1);
        if (r > 0) return GS_OK;
        if (r < 0 && errno != EINTR) return gs_error_set(GS_ERR_IO, "handshake: poll: %s", strerror(errno));
    }
}

gs_status_t gs_proto_fd_send(int fd, const void *data, size_t len, double timeout_s)
{
    const uint8_t *p = data;
    double deadline = gs_now_s() + timeout_s;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        gs_status_t st;
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if ((st = gs__hello_wait(fd, POLLOUT, deadline)) != GS_OK) return st;
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
            return gs_error_set(GS_ERR_CONN_CLOSED, "send: the peer closed the connection");
        return gs_error_set(GS_ERR_IO, "send: %s", strerror(errno));
    }
    return GS_OK;
}

/* Read exactly @a len bytes (no more: what follows the answer stays in the socket). */
static gs_status_t gs__hello_read(int fd, uint8_t *p, size_t len, double deadline)
{
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        gs_status_t st;
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return gs_error_set(GS_ERR_CONN_CLOSED, "handshake: gsched closed the connection");
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if ((st = gs__hello_wait(fd, POLLIN, deadline)) != GS_OK) return st;
            continue;
        }
        return gs_error_set(GS_ERR_IO, "handshake: recv: %s", strerror(errno));
    }
    return GS_OK;
}

gs_status_t gs_proto_fd_send_msg(int fd, const gs_msg_t *msg, double timeout_s)
{
    gs_buf_t out;
    gs_status_t st;
    gs_buf_init(&out);
    if ((st = gs_msg_encode(msg, &out)) == GS_OK) st = gs_proto_fd_send(fd, out.data, out.len, timeout_s);
    gs_buf_cleanup(&out);
    return st;
}

gs_status_t gs_proto_fd_recv_msg(int fd, uint32_t max_frame, double timeout_s, gs_msg_t *msg_p)
{
    double deadline = gs_now_s() + timeout_s;
    uint8_t head[4], *payload;
    uint32_t len;
    gs_status_t st;
    if ((st = gs__hello_read(fd, head, sizeof(head), deadline)) != GS_OK) return st;
    len = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
    if (len == 0 || len > max_frame) return gs_error_set(GS_ERR_PROTO, "a %u-byte frame announced", len);
    if ((payload = gs_malloc(len, "received frame")) == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "no memory for a %u-byte frame", len);
    if ((st = gs__hello_read(fd, payload, len, deadline)) == GS_OK) st = gs_msg_decode(payload, len, msg_p);
    gs_free(payload);
    return st;
}

/* gsched's answer @a m is not the one expected (@a want): its ERROR's status, else GS_ERR_PROTO. */
static gs_status_t gs__hs_unexpected(const gs_msg_t *m, uint32_t want)
{
    if (m->type == GS_MSG_ERROR) {
        gs_status_t st = m->u.error.status < 0 ? (gs_status_t)m->u.error.status : GS_ERR_PROTO;
        return gs_error_set(st, "handshake refused by gsched: %.*s", (int)m->u.error.message.len,
                            (const char *)m->u.error.message.data);
    }
    return gs_error_set(GS_ERR_PROTO, "handshake: gsched answered %s, not %s", gs_msg_type_name(m->type),
                        gs_msg_type_name(want));
}

gs_status_t gs_proto_handshake_fd(int fd, gs_peer_role_t role, const char *token, const char *name,
                                  double timeout_s, gs_msg_welcome_t *welcome_p)
{
    double deadline = gs_now_s() + timeout_s;
    gs_hs_peer_t hs;
    gs_msg_t out, in;
    gs_status_t st;

    if (fd < 0 || !(timeout_s > 0)) return gs_error_set(GS_ERR_INVALID_PARAM, "handshake: bad socket or timeout");
    if ((st = gs_hs_peer_hello(&hs, token, (uint32_t)role, name != NULL ? name : "", &out)) != GS_OK ||
        (st = gs_proto_fd_send_msg(fd, &out, deadline - gs_now_s())) != GS_OK)
        return st;
    if ((st = gs_proto_fd_recv_msg(fd, GS__HELLO_MAX_ANSWER, deadline - gs_now_s(), &in)) != GS_OK) return st;
    if (in.type != GS_MSG_CHALLENGE) st = gs__hs_unexpected(&in, GS_MSG_CHALLENGE);
    else st = gs_hs_peer_answer(&hs, &in, &out);   /* checks gsched's proof first */
    gs_msg_cleanup(&in);
    if (st != GS_OK || (st = gs_proto_fd_send_msg(fd, &out, deadline - gs_now_s())) != GS_OK) return st;
    if ((st = gs_proto_fd_recv_msg(fd, GS__HELLO_MAX_ANSWER, deadline - gs_now_s(), &in)) != GS_OK) return st;
    if (in.type != GS_MSG_WELCOME) {
        st = gs__hs_unexpected(&in, GS_MSG_WELCOME);
    } else if (in.u.welcome.version != GS_PROTO_VERSION) {
        st = gs_error_set(GS_ERR_PROTO, "handshake: gsched speaks protocol version %u, this peer %u",
                          in.u.welcome.version, GS_PROTO_VERSION);
    } else if (welcome_p != NULL) {
        *welcome_p = in.u.welcome;
        welcome_p->data_key.data = NULL;   /* its bytes go with the message */
        welcome_p->data_key.len = 0;
    }
    gs_msg_cleanup(&in);
    return st;
}
