/* sockfuzz: loopback sockets with timeouts. */
#include "sockfuzz.h"

#include "common/time.h"
#include "proto/handshake_fd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int sf_connect(int port, const char *src, double timeout_s)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (src != NULL) {
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        inet_pton(AF_INET, src, &a.sin_addr);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) goto err_close;
    }
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        struct pollfd p = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t el = sizeof err;
        if (errno != EINPROGRESS) goto err_close;
        if (poll(&p, 1, (int)(timeout_s * 1000)) != 1) {
            errno = ETIMEDOUT;
            goto err_close;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            errno = err != 0 ? err : errno;
            goto err_close;
        }
    }
    return fd;
err_close:
    {
        int e = errno;
        close(fd);
        errno = e;
    }
    return -1;
}

int sf_send_all(int fd, const void *p, size_t len, double timeout_s)
{
    return gs_proto_fd_send(fd, p, len, timeout_s) == GS_OK;
}

/* Decode the complete frames in @a reader and count them by type. */
static void sf_count_frames(gs_frame_reader_t *reader, uint64_t *seen)
{
    const uint8_t *payload;
    size_t len;
    while (gs_frame_reader_next(reader, &payload, &len) == GS_OK) {
        gs_msg_t m;
        if (gs_msg_decode(payload, len, &m) != GS_OK) continue;
        if (m.type < GS_MSG_TYPE_MAX) seen[m.type]++;
        gs_msg_cleanup(&m);
    }
}

int sf_drain(int fd, gs_frame_reader_t *reader, uint64_t *seen)
{
    char buf[65536];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            if (reader != NULL && gs_frame_reader_feed(reader, buf, (size_t)n) == GS_OK) sf_count_frames(reader, seen);
            continue;
        }
        if (n == 0) return 0;
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
    }
}
