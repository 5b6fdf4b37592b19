/* The peer side of the handshake (proto/hello.h): HELLO, and a blocking handshake on a socket. */
#include "proto/hello.h"

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

void gs_proto_hello_init(gs_msg_t *m, gs_peer_role_t role, const char *token, const char *name)
{
    memset(m, 0, sizeof(*m));
    m->type = GS_MSG_HELLO;
    m->u.hello.version = GS_PROTO_VERSION;
    m->u.hello.role = (uint32_t)role;
    m->u.hello.token.data = (const uint8_t *)(token != NULL ? token : "");
    m->u.hello.token.len = token != NULL ? strlen(token) : 0;
    m->u.hello.name.data = (const uint8_t *)(name != NULL ? name : "");
    m->u.hello.name.len = name != NULL ? strlen(name) : 0;
}

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

/* What gsched's first answer means. */
static gs_status_t gs__hello_answer(const gs_msg_t *m, gs_msg_welcome_t *welcome_p)
{
    if (m->type == GS_MSG_WELCOME && m->u.welcome.version == GS_PROTO_VERSION) {
        if (welcome_p != NULL) *welcome_p = m->u.welcome;
        return GS_OK;
    }
    if (m->type == GS_MSG_WELCOME)
        return gs_error_set(GS_ERR_PROTO, "handshake: gsched speaks protocol version %u, this peer %u",
                            m->u.welcome.version, GS_PROTO_VERSION);
    if (m->type == GS_MSG_ERROR) {
        gs_status_t st = m->u.error.status < 0 ? (gs_status_t)m->u.error.status : GS_ERR_PROTO;
        return gs_error_set(st, "handshake refused by gsched: %.*s", (int)m->u.error.message.len,
                            (const char *)m->u.error.message.data);
    }
    return gs_error_set(GS_ERR_PROTO, "handshake: gsched answered %s", gs_msg_type_name(m->type));
}

gs_status_t gs_proto_handshake_fd(int fd, gs_peer_role_t role, const char *token, const char *name,
                                  double timeout_s, gs_msg_welcome_t *welcome_p)
{
    double deadline = gs_now_s() + timeout_s;
    gs_buf_t out;
    gs_msg_t m, ans;
    uint8_t head[4], *payload;
    uint32_t len;
    gs_status_t st;

    if (fd < 0 || !(timeout_s > 0)) return gs_error_set(GS_ERR_INVALID_PARAM, "handshake: bad socket or timeout");
    gs_proto_hello_init(&m, role, token, name);
    gs_buf_init(&out);
    if ((st = gs_msg_encode(&m, &out)) != GS_OK) return st;
    st = gs_proto_fd_send(fd, out.data, out.len, deadline - gs_now_s());
    gs_buf_cleanup(&out);
    if (st != GS_OK) return st;

    if ((st = gs__hello_read(fd, head, sizeof(head), deadline)) != GS_OK) return st;
    len = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
    if (len == 0 || len > GS__HELLO_MAX_ANSWER)
        return gs_error_set(GS_ERR_PROTO, "handshake: gsched announced a %u-byte answer", len);
    if ((payload = gs_malloc(len, "handshake answer")) == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "handshake: no memory for the answer");
    if ((st = gs__hello_read(fd, payload, len, deadline)) == GS_OK &&
        (st = gs_msg_decode(payload, len, &ans)) == GS_OK) {
        st = gs__hello_answer(&ans, welcome_p);
        gs_msg_cleanup(&ans);
    }
    gs_free(payload);
    return st;
}
