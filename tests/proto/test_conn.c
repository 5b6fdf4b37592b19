#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "common/alloc.h"
#include "proto/conn.h"
#include "samples.h"

/* ---- a small server on a real uv loop ---- */

#define MAXC 8

typedef struct server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int port;
    uint32_t max_frame;
    int close_on_first;           /* close each connection from inside its first msg_cb */
    int naccepted;
    int nclosed;
    gs_conn_t *conns[MAXC];
    int closed[MAXC];             /* close_cb count per connection */
    gs_status_t reason[MAXC];
    int nmsgs[MAXC];
    uint32_t last_type[MAXC];
    size_t data_bytes[MAXC];
    int echo_in_place;            /* answer DATA with itself, written from the detached frame */
    int nreleased;                /* release callbacks of those echoes */
    gs_status_t detach_again;     /* a second gs_conn_detach_frame in the same msg_cb */
} server_t;

static void srv_release_cb(void *arg, gs_status_t status);

static int conn_index(server_t *s, gs_conn_t *c)
{
    for (int i = 0; i < s->naccepted; i++) {
        if (s->conns[i] == c) return i;
    }
    cr_assert_fail("unknown connection");
    return -1;
}

static void srv_msg_cb(gs_conn_t *c, gs_msg_t *m, void *arg)
{
    server_t *s = arg;
    int i = conn_index(s, c);
    gs_msg_t reply;
    s->nmsgs[i]++;
    s->last_type[i] = m->type;
    if (s->close_on_first) {
        gs_conn_close(c, GS_ERR_CANCELED);
        return;
    }
    memset(&reply, 0, sizeof reply);
    switch (m->type) {
    case GS_MSG_HELLO:
    {
        gs_msg_t sample;
        sample_msg(GS_MSG_HELLO, &sample);
        assert_msg_eq(m, &sample);
    }
        reply.type = GS_MSG_WELCOME;
        reply.u.welcome.id = 100 + (uint64_t)i;
        reply.u.welcome.version = GS_PROTO_VERSION;
        cr_assert_eq(gs_conn_send(c, &reply), GS_OK);
        break;
    case GS_MSG_PROGRESS:
        reply = *m;
        reply.owned = NULL;
        reply.u.progress.done++;
        cr_assert_eq(gs_conn_send(c, &reply), GS_OK);
        break;
    case GS_MSG_DATA:
        s->data_bytes[i] += m->u.data.data.len;
        for (size_t k = 0; k < m->u.data.data.len; k++) {
            cr_assert_eq(m->u.data.data.data[k], (uint8_t)(k * 7), "data byte %zu", k);
        }
        if (s->echo_in_place) {
            gs_frame_storage_t *frame = NULL;
            cr_assert_eq(gs_conn_detach_frame(c, &frame), GS_OK, "%s", gs_last_error());
            s->detach_again = gs_conn_detach_frame(c, &frame);
            m->u.data.req_id++;
            cr_assert_eq(gs_conn_send_data(c, m, srv_release_cb, frame), GS_OK, "%s", gs_last_error());
            break;
        }
        reply.type = GS_MSG_GRAPH_ACCEPTED;
        reply.u.graph_accepted.graph_id = m->u.data.data.len;
        cr_assert_eq(gs_conn_send(c, &reply), GS_OK);
        break;
    default:
        break;
    }
}

static server_t *g_srv;   /* for srv_release_cb (its argument is the frame) */

static void srv_release_cb(void *arg, gs_status_t status)
{
    cr_assert_eq(status, GS_OK);
    g_srv->nreleased++;
    gs_frame_storage_free(arg);
}

static void srv_close_cb(gs_conn_t *c, gs_status_t reason, void *arg)
{
    server_t *s = arg;
    int i = conn_index(s, c);
    s->closed[i]++;
    s->reason[i] = reason;
    s->nclosed++;
}

static void srv_on_connection(uv_stream_t *listener, int status)
{
    server_t *s = listener->data;
    gs_conn_params_t p = {.msg_cb = srv_msg_cb, .close_cb = srv_close_cb, .arg = s, .max_frame = s->max_frame};
    cr_assert_eq(status, 0);
    cr_assert_lt(s->naccepted, MAXC);
    gs_conn_t *c = NULL;
    cr_assert_eq(gs_conn_accept(listener, &p, &c), GS_OK, "%s", gs_last_error());
    s->conns[s->naccepted++] = c;
    cr_assert(strncmp(gs_conn_peer_name(c), "127.0.0.1:", 10) == 0, "%s", gs_conn_peer_name(c));
}

static void server_start(server_t *s, uv_loop_t *loop, uint32_t max_frame)
{
    struct sockaddr_in a;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    memset(s, 0, sizeof *s);
    g_srv = s;
    s->loop = loop;
    s->max_frame = max_frame;
    cr_assert_eq(uv_tcp_init(loop, &s->listener), 0);
    s->listener.data = s;
    cr_assert_eq(uv_ip4_addr("127.0.0.1", 0, &a), 0);
    cr_assert_eq(uv_tcp_bind(&s->listener, (const struct sockaddr *)&a, 0), 0);
    cr_assert_eq(uv_listen((uv_stream_t *)&s->listener, 16, srv_on_connection), 0);
    cr_assert_eq(uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len), 0);
    s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* ---- a client ---- */

typedef struct client {
    gs_conn_t *conn;
    int nconnect;
    gs_status_t connect_status;
    int nclosed;
    gs_status_t reason;
    int nmsgs;
    uint32_t last_type;
    uint64_t welcome_id;
    uint64_t accepted_len;
    uint64_t progress_done;
    int ndata;                    /* DATA received (bytes checked against the k * 7 pattern) */
    size_t data_bytes;
    uint64_t last_req;
    int close_on_connect;         /* close from inside connect_cb with GS_ERR_CANCELED */
    int close_cb_seen_in_close;   /* set if close_cb ran inside gs_conn_close (must not) */
} client_t;

static void cli_msg_cb(gs_conn_t *c, gs_msg_t *m, void *arg)
{
    client_t *cl = arg;
    cr_assert_eq(c, cl->conn);
    cl->nmsgs++;
    cl->last_type = m->type;
    if (m->type == GS_MSG_WELCOME) cl->welcome_id = m->u.welcome.id;
    if (m->type == GS_MSG_GRAPH_ACCEPTED) cl->accepted_len = m->u.graph_accepted.graph_id;
    if (m->type == GS_MSG_PROGRESS) cl->progress_done = m->u.progress.done;
    if (m->type == GS_MSG_DATA) {
        for (size_t k = 0; k < m->u.data.data.len; k++) {
            cr_assert_eq(m->u.data.data.data[k], (uint8_t)(k * 7), "data byte %zu", k);
        }
        cl->ndata++;
        cl->data_bytes += m->u.data.data.len;
        cl->last_req = m->u.data.req_id;
    }
}

static void cli_close_cb(gs_conn_t *c, gs_status_t reason, void *arg)
{
    client_t *cl = arg;
    cr_assert_eq(c, cl->conn);
    cl->nclosed++;
    cl->reason = reason;
    gs_conn_close(c, GS_ERR_IO);  /* closing again from close_cb is harmless */
}

static void cli_connect_cb(gs_conn_t *c, gs_status_t status, void *arg)
{
    client_t *cl = arg;
    cr_assert_eq(c, cl->conn);
    cr_assert_eq(cl->nclosed, 0, "connect_cb after close_cb");
    cl->nconnect++;
    cl->connect_status = status;
    if (status == GS_OK && cl->close_on_connect) {
        gs_conn_close(c, GS_ERR_CANCELED);
        cl->close_cb_seen_in_close = cl->nclosed;
        gs_conn_close(c, GS_OK);  /* first reason wins */
        gs_msg_t m = {.type = GS_MSG_SHUTDOWN};
        cr_assert_eq(gs_conn_send(c, &m), GS_ERR_CONN_CLOSED);
    }
}

static void client_connect(client_t *cl, uv_loop_t *loop, const char *host, int port)
{
    gs_conn_params_t p = {.msg_cb = cli_msg_cb, .close_cb = cli_close_cb, .connect_cb = cli_connect_cb, .arg = cl};
    cr_assert_eq(gs_conn_connect(loop, host, port, &p, &cl->conn), GS_OK, "%s", gs_last_error());
}

/* ---- loop helpers ---- */

static void tick_cb(uv_timer_t *t)
{
    (void)t;
}

/* Run the loop until @a cond holds (30 s limit: generous for a loaded machine). */
#define RUN_UNTIL(loop, cond)                                                          \
    do {                                                                               \
        uv_timer_t tick_;                                                              \
        uv_timer_init((loop), &tick_);                                                 \
        uv_timer_start(&tick_, tick_cb, 5, 5);                                         \
        uint64_t t0_ = uv_hrtime();                                                    \
        while (!(cond)) {                                                              \
            cr_assert_lt(uv_hrtime() - t0_, 30000000000ull, "timed out waiting: " #cond); \
            uv_run((loop), UV_RUN_ONCE);                                               \
        }                                                                              \
        uv_close((uv_handle_t *)&tick_, NULL);                                         \
        uv_run((loop), UV_RUN_NOWAIT);                                                 \
    } while (0)

static void close_listener_and_drain(server_t *s)
{
    uv_close((uv_handle_t *)&s->listener, NULL);
    cr_assert_eq(uv_run(s->loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(s->loop), 0, "handles left open");
}

static int raw_connect(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* 1 when the peer has closed @a fd (EOF or reset). */
static int raw_peer_closed(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c;
    if (poll(&p, 1, 2000) != 1) return 0;
    ssize_t n = recv(fd, &c, 1, 0);
    return n <= 0;
}

static void send_msg(gs_conn_t *c, uint32_t type)
{
    gs_msg_t m;
    sample_msg(type, &m);
    cr_assert_eq(gs_conn_send(c, &m), GS_OK, "%s", gs_last_error());
}

static void send_data(gs_conn_t *c, size_t n)
{
    uint8_t *bytes = gs_malloc(n, "test data");
    cr_assert_not_null(bytes);
    for (size_t k = 0; k < n; k++) bytes[k] = (uint8_t)(k * 7);
    gs_msg_t m = {.type = GS_MSG_DATA};
    m.u.data.data = (gs_bytes_t){bytes, n};
    cr_assert_eq(gs_conn_send(c, &m), GS_OK, "%s", gs_last_error());
    gs_free(bytes);  /* the message's pointers are only read during the call */
}

/* ---- tests ---- */

Test(proto_conn, exchanges_messages_over_loopback)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    size_t heap0 = live_heap_blocks();
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    client_connect(&cl, &loop, "127.0.0.1", s.port);
    char expect[32];
    snprintf(expect, sizeof expect, "127.0.0.1:%d", s.port);
    cr_assert_str_eq(gs_conn_peer_name(cl.conn), expect);
    gs_conn_set_data(cl.conn, &cl);
    cr_assert_eq(gs_conn_data(cl.conn), &cl);

    /* queued before the connection exists */
    send_msg(cl.conn, GS_MSG_HELLO);
    send_data(cl.conn, 3u << 20);
    cr_assert_gt(gs_conn_pending_bytes(cl.conn), 3u << 20);
    RUN_UNTIL(&loop, cl.welcome_id != 0 && cl.accepted_len != 0);
    cr_assert_eq(cl.nconnect, 1);
    cr_assert_eq(cl.connect_status, GS_OK);
    cr_assert_eq(cl.welcome_id, 100);
    cr_assert_eq(cl.accepted_len, 3u << 20);
    cr_assert_eq(s.data_bytes[0], 3u << 20);
    cr_assert_eq(gs_conn_pending_bytes(cl.conn), 0);

    /* every sample type reaches the server intact */
    for (uint32_t t = GS_MSG_HELLO; t < GS_MSG_TYPE_MAX; t++) {
        if (t != GS_MSG_DATA) send_msg(cl.conn, t);
    }
    gs_msg_t progress;
    sample_msg(GS_MSG_PROGRESS, &progress);
    RUN_UNTIL(&loop, s.nmsgs[0] == 2 + GS_MSG_TYPE_MAX - 2 && cl.progress_done == progress.u.progress.done + 1);

    gs_conn_close(cl.conn, GS_OK);
    cr_assert_eq(cl.nclosed, 0, "close_cb ran inside gs_conn_close");
    RUN_UNTIL(&loop, cl.nclosed == 1 && s.nclosed == 1);
    cr_assert_eq(cl.reason, GS_OK);
    cr_assert_eq(s.reason[0], GS_ERR_CONN_CLOSED);
    close_listener_and_drain(&s);
    cr_assert_eq(cl.nclosed, 1);
    cr_assert_eq(s.closed[0], 1);
    cr_assert_eq(live_heap_blocks(), heap0, "connections leaked memory");
    proto_check_no_leaks();
}

Test(proto_conn, garbage_frame_closes_only_that_connection)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    client_connect(&cl, &loop, "localhost", s.port);  /* resolved by name */
    send_msg(cl.conn, GS_MSG_HELLO);
    RUN_UNTIL(&loop, cl.welcome_id != 0);

    int fd = raw_connect(s.port);
    static const uint8_t garbage[] = {5, 0, 0, 0, 0xc1, 0xc1, 0x00, 0xff, 0x93};
    cr_assert_eq(send(fd, garbage, sizeof garbage, 0), (ssize_t)sizeof garbage);
    RUN_UNTIL(&loop, s.naccepted == 2 && s.closed[1] == 1);
    cr_assert_eq(s.reason[1], GS_ERR_PROTO);
    cr_assert_eq(s.nmsgs[1], 0);
    cr_assert(raw_peer_closed(fd));
    close(fd);

    /* the other client is still served */
    gs_msg_t m = {.type = GS_MSG_PROGRESS};
    m.u.progress.done = 41;
    cr_assert_eq(gs_conn_send(cl.conn, &m), GS_OK);
    RUN_UNTIL(&loop, cl.progress_done == 42);
    cr_assert_eq(s.closed[0], 0);

    gs_conn_close(cl.conn, GS_OK);
    RUN_UNTIL(&loop, cl.nclosed == 1 && s.closed[0] == 1);
    close_listener_and_drain(&s);
    proto_check_no_leaks();
}

Test(proto_conn, refuses_oversize_frames)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 1024);

    /* a raw header announcing more than the limit, with no payload */
    int fd = raw_connect(s.port);
    static const uint8_t hdr[] = {0x01, 0x04, 0, 0};  /* 1025 */
    cr_assert_eq(send(fd, hdr, sizeof hdr, 0), 4);
    RUN_UNTIL(&loop, s.naccepted == 1 && s.closed[0] == 1);
    cr_assert_eq(s.reason[0], GS_ERR_MSG_TOO_LARGE);
    cr_assert(raw_peer_closed(fd));
    close(fd);

    /* a real client sending a frame over the limit is dropped too */
    client_connect(&cl, &loop, "127.0.0.1", s.port);
    send_msg(cl.conn, GS_MSG_HELLO);
    RUN_UNTIL(&loop, cl.welcome_id != 0);
    send_data(cl.conn, 2000);
    RUN_UNTIL(&loop, s.closed[1] == 1 && cl.nclosed == 1);
    cr_assert_eq(s.reason[1], GS_ERR_MSG_TOO_LARGE);
    cr_assert(cl.reason == GS_ERR_CONN_CLOSED, "client closed with %s", gs_status_name(cl.reason));
    close_listener_and_drain(&s);
    proto_check_no_leaks();
}

Test(proto_conn, graceful_close_flushes_queued_writes)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    client_connect(&cl, &loop, "127.0.0.1", s.port);
    for (int i = 0; i < 50; i++) send_msg(cl.conn, GS_MSG_HEARTBEAT);
    send_data(cl.conn, 2u << 20);
    send_msg(cl.conn, GS_MSG_SHUTDOWN);
    gs_conn_close(cl.conn, GS_OK);  /* still connecting: flushed once connected */
    cr_assert_eq(gs_conn_send(cl.conn, &(gs_msg_t){.type = GS_MSG_SHUTDOWN}), GS_ERR_CONN_CLOSED);
    RUN_UNTIL(&loop, cl.nclosed == 1 && s.nclosed == 1);
    cr_assert_eq(cl.nconnect, 1);
    cr_assert_eq(cl.reason, GS_OK);
    cr_assert_eq(s.nmsgs[0], 52);
    cr_assert_eq(s.last_type[0], GS_MSG_SHUTDOWN);
    cr_assert_eq(s.data_bytes[0], 2u << 20);
    cr_assert_eq(s.reason[0], GS_ERR_CONN_CLOSED);
    close_listener_and_drain(&s);
    proto_check_no_leaks();
}

Test(proto_conn, error_close_is_deferred_idempotent_and_first_reason_wins)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    cl.close_on_connect = 1;
    client_connect(&cl, &loop, "127.0.0.1", s.port);
    send_msg(cl.conn, GS_MSG_HELLO);
    RUN_UNTIL(&loop, cl.nclosed == 1 && s.nclosed == 1);
    cr_assert_eq(cl.close_cb_seen_in_close, 0);
    cr_assert_eq(cl.reason, GS_ERR_CANCELED);
    close_listener_and_drain(&s);
    cr_assert_eq(cl.nclosed, 1);
    proto_check_no_leaks();
}

Test(proto_conn, close_while_connecting_cancels_connect)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    client_connect(&cl, &loop, "127.0.0.1", s.port);
    send_msg(cl.conn, GS_MSG_HELLO);
    gs_conn_close(cl.conn, GS_ERR_CANCELED);
    cr_assert_eq(cl.nclosed, 0);
    cr_assert_eq(cl.nconnect, 0);
    RUN_UNTIL(&loop, cl.nclosed == 1);
    cr_assert_eq(cl.nconnect, 1);
    cr_assert_eq(cl.connect_status, GS_ERR_CANCELED);
    cr_assert_eq(cl.reason, GS_ERR_CANCELED);
    RUN_UNTIL(&loop, s.naccepted == 0 || s.nclosed == s.naccepted);
    close_listener_and_drain(&s);
    proto_check_no_leaks();
}

Test(proto_conn, connect_refused_reports_then_closes)
{
    uv_loop_t loop;
    client_t cl = {0};
    /* a port with nothing listening: bind one, then close it */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    close(fd);
    cr_assert_eq(uv_loop_init(&loop), 0);
    client_connect(&cl, &loop, "127.0.0.1", ntohs(a.sin_port));
    send_msg(cl.conn, GS_MSG_HELLO);
    RUN_UNTIL(&loop, cl.nclosed == 1);
    cr_assert_eq(cl.nconnect, 1);
    cr_assert_eq(cl.connect_status, GS_ERR_CONN_REFUSED, "%s", gs_status_name(cl.connect_status));
    cr_assert_eq(cl.reason, GS_ERR_CONN_REFUSED);
    cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&loop), 0);
    proto_check_no_leaks();
}

Test(proto_conn, closing_inside_msg_cb_stops_delivery)
{
    uv_loop_t loop;
    server_t s;
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    s.close_on_first = 1;
    gs_buf_t frames;
    gs_buf_init(&frames);
    sample_frame(GS_MSG_HEARTBEAT, &frames);
    sample_frame(GS_MSG_PROGRESS, &frames);
    sample_frame(GS_MSG_SHUTDOWN, &frames);
    int fd = raw_connect(s.port);
    cr_assert_eq(send(fd, frames.data, frames.len, 0), (ssize_t)frames.len);  /* one segment */
    RUN_UNTIL(&loop, s.nclosed == 1);
    cr_assert_eq(s.nmsgs[0], 1);
    cr_assert_eq(s.last_type[0], GS_MSG_HEARTBEAT);
    cr_assert_eq(s.reason[0], GS_ERR_CANCELED);
    close(fd);
    gs_buf_cleanup(&frames);
    close_listener_and_drain(&s);
    proto_check_no_leaks();
}

Test(proto_conn, send_frame_takes_ownership_and_checks_framing)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    client_connect(&cl, &loop, "127.0.0.1", s.port);

    gs_buf_t f;
    gs_buf_init(&f);
    sample_frame(GS_MSG_HELLO, &f);
    sample_frame(GS_MSG_HEARTBEAT, &f);  /* two frames in one buffer */
    cr_assert_eq(gs_conn_send_frame(cl.conn, &f), GS_OK);
    cr_assert_null(f.data);
    sample_frame(GS_MSG_HEARTBEAT, &f);
    f.len -= 1;  /* not a whole frame */
    cr_assert_eq(gs_conn_send_frame(cl.conn, &f), GS_ERR_INVALID_PARAM);
    cr_assert_null(f.data, "storage freed on error too");
    cr_assert_eq(gs_conn_send_frame(cl.conn, &f), GS_ERR_INVALID_PARAM);  /* empty */
    RUN_UNTIL(&loop, cl.welcome_id != 0 && s.naccepted == 1 && s.nmsgs[0] == 2);
    gs_conn_close(cl.conn, GS_OK);
    sample_frame(GS_MSG_HEARTBEAT, &f);
    cr_assert_eq(gs_conn_send_frame(cl.conn, &f), GS_ERR_CONN_CLOSED);
    cr_assert_null(f.data);
    RUN_UNTIL(&loop, cl.nclosed == 1 && s.nclosed == 1);
    close_listener_and_drain(&s);
    proto_check_no_leaks();
}

Test(proto_conn, rejects_bad_arguments)
{
    uv_loop_t loop;
    gs_conn_t *c = NULL;
    gs_conn_params_t p = {0};
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_eq(gs_conn_connect(&loop, "127.0.0.1", 1234, &p, &c), GS_ERR_INVALID_PARAM);
    p.msg_cb = cli_msg_cb;
    p.close_cb = cli_close_cb;
    cr_assert_eq(gs_conn_connect(&loop, "127.0.0.1", 0, &p, &c), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_conn_connect(&loop, "127.0.0.1", 70000, &p, &c), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_conn_connect(&loop, "no-such-host.invalid", 1234, &p, &c), GS_ERR_NOT_FOUND);
    cr_assert_null(c);
    cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&loop), 0);
    proto_check_no_leaks();
}

Test(proto_conn, parses_addresses)
{
    char host[64];
    int port = -1;
    cr_assert_eq(gs_addr_parse("tcp://10.1.2.3:8786", host, sizeof host, &port), GS_OK);
    cr_assert_str_eq(host, "10.1.2.3");
    cr_assert_eq(port, 8786);
    cr_assert_eq(gs_addr_parse("node-7.cluster:1", host, sizeof host, &port), GS_OK);
    cr_assert_str_eq(host, "node-7.cluster");
    cr_assert_eq(port, 1);
    cr_assert_eq(gs_addr_parse("tcp://[::1]:65535", host, sizeof host, &port), GS_OK);
    cr_assert_str_eq(host, "::1");
    cr_assert_eq(port, 65535);
    cr_assert_eq(gs_addr_parse("127.0.0.1:0", host, sizeof host, &port), GS_OK);
    cr_assert_eq(port, 0);

    static const char *const bad[] = {
        "", "host", "host:", ":80", "tcp://:80", "host:65536", "host:123456", "host:-1", "host:80x",
        "udp://host:80", "ucx://host:80", "::1:80", "[::1]80", "[::1", "[]:80", "host:8 0",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        port = -1;
        strcpy(host, "unchanged");
        cr_assert_eq(gs_addr_parse(bad[i], host, sizeof host, &port), GS_ERR_INVALID_PARAM, "accepted '%s'", bad[i]);
        cr_assert_eq(port, -1);
        cr_assert_str_eq(host, "unchanged");
        cr_assert_neq(gs_last_error()[0], '\0');
    }
    char small[4];
    cr_assert_eq(gs_addr_parse("abcd:1", small, sizeof small, &port), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_addr_parse("abc:1", small, sizeof small, &port), GS_OK);
    cr_assert_str_eq(small, "abc");
    cr_assert_eq(gs_addr_parse(NULL, host, sizeof host, &port), GS_ERR_INVALID_PARAM);
    proto_check_no_leaks();
}

Test(proto_conn, converts_libuv_errors)
{
    cr_assert_eq(gs_status_from_uv(0, "x"), GS_OK);
    cr_assert_eq(gs_status_from_uv(UV_ECONNREFUSED, "connect"), GS_ERR_CONN_REFUSED);
    cr_assert(strstr(gs_last_error(), "connect") != NULL);
    cr_assert_eq(gs_status_from_uv(UV_EOF, "read"), GS_ERR_CONN_CLOSED);
    cr_assert_eq(gs_status_from_uv(UV_ECONNRESET, "read"), GS_ERR_CONN_CLOSED);
    cr_assert_eq(gs_status_from_uv(UV_ENOMEM, "x"), GS_ERR_NO_MEMORY);
    cr_assert_eq(gs_status_from_uv(UV_ETIMEDOUT, "x"), GS_ERR_TIMED_OUT);
    cr_assert_eq(gs_status_from_uv(UV_EADDRINUSE, "bind"), GS_ERR_BUSY);
    cr_assert_eq(gs_status_from_uv(UV_ECANCELED, "x"), GS_ERR_CANCELED);
    cr_assert_eq(gs_status_from_uv(UV_EIO, "x"), GS_ERR_IO);
    cr_assert_eq(gs_status_from_uv(UV_EAI_NONAME, "x"), GS_ERR_NOT_FOUND);
    proto_check_no_leaks();
}

/* ---- DATA with borrowed bytes (gs_conn_send_data) and detached frames ---- */

typedef struct release {
    int n;
    gs_status_t status;
    uint8_t *bytes;               /* freed by the release callback */
} release_t;

static void release_cb(void *arg, gs_status_t status)
{
    release_t *r = arg;
    r->n++;
    r->status = status;
    gs_free(r->bytes);
    r->bytes = NULL;
}

static uint8_t *pattern(size_t n)
{
    uint8_t *b = gs_malloc(n ? n : 1, "test data");
    cr_assert_not_null(b);
    for (size_t k = 0; k < n; k++) b[k] = (uint8_t)(k * 7);
    return b;
}

/* gs_conn_send_data of @a n pattern bytes with req_id @a req; release into @a r. */
static gs_status_t send_borrowed(gs_conn_t *c, size_t n, uint64_t req, release_t *r)
{
    gs_msg_t m = {.type = GS_MSG_DATA};
    r->n = 0;
    r->status = GS_ERR_INTERNAL;
    r->bytes = pattern(n);
    m.u.data.req_id = req;
    m.u.data.data = (gs_bytes_t){n ? r->bytes : NULL, n};
    return gs_conn_send_data(c, &m, release_cb, r);
}

Test(proto_conn, send_data_writes_borrowed_bytes_and_releases_once_when_written)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    release_t r[3];
    size_t sizes[3] = {3u << 20, 0, 100000};
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    client_connect(&cl, &loop, "127.0.0.1", s.port);
    send_msg(cl.conn, GS_MSG_HELLO);
    /* the first is queued before the connection exists, the others once it does */
    cr_assert_eq(send_borrowed(cl.conn, sizes[0], 1, &r[0]), GS_OK, "%s", gs_last_error());
    cr_assert_eq(r[0].n, 0, "released inside the call");
    RUN_UNTIL(&loop, cl.welcome_id != 0);
    for (int i = 1; i < 3; i++) {
        cr_assert_eq(send_borrowed(cl.conn, sizes[i], 1 + (uint64_t)i, &r[i]), GS_OK, "%s", gs_last_error());
        cr_assert_eq(r[i].n, 0, "released inside the call");
    }
    RUN_UNTIL(&loop, s.nmsgs[0] == 4 && r[0].n + r[1].n + r[2].n == 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r[i].n, 1);
        cr_assert_eq(r[i].status, GS_OK);
    }
    cr_assert_eq(s.data_bytes[0], sizes[0] + sizes[2]);
    RUN_UNTIL(&loop, cl.accepted_len == sizes[2]);
    cr_assert_eq(gs_conn_pending_bytes(cl.conn), 0);
    gs_conn_close(cl.conn, GS_OK);
    RUN_UNTIL(&loop, cl.nclosed == 1 && s.nclosed == 1);
    close_listener_and_drain(&s);
    for (int i = 0; i < 3; i++) cr_assert_eq(r[i].n, 1, "released again on close");
    proto_check_no_leaks();
}

Test(proto_conn, large_frames_received_in_place_and_relayed_from_the_detached_frame)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    release_t r;
    static const size_t sizes[] = {6u << 20, 5u << 20, 1000, (7u << 20) + 3, 0, 6u << 20, 65536};
    size_t total = 0;
    int n = (int)(sizeof sizes / sizeof sizes[0]);
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    s.echo_in_place = 1;
    client_connect(&cl, &loop, "127.0.0.1", s.port);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(send_borrowed(cl.conn, sizes[i], 10 * (uint64_t)i, &r), GS_OK);
        RUN_UNTIL(&loop, r.n == 1 && cl.ndata == i + 1);
        cr_assert_eq(r.status, GS_OK);
        cr_assert_eq(cl.last_req, 10 * (uint64_t)i + 1, "the echo carries the edited field");
        total += sizes[i];
    }
    cr_assert_eq(cl.data_bytes, total);
    cr_assert_eq(s.data_bytes[0], total);
    RUN_UNTIL(&loop, s.nreleased == n);
    cr_assert_eq(s.detach_again, GS_ERR_INVALID_PARAM, "a second detach in one msg_cb is refused");
    gs_frame_storage_t *frame = NULL;
    cr_assert_eq(gs_conn_detach_frame(cl.conn, &frame), GS_ERR_INVALID_PARAM, "outside msg_cb");
    cr_assert_eq(gs_conn_detach_frame(NULL, &frame), GS_ERR_INVALID_PARAM);
    cr_assert_null(frame);
    gs_conn_close(cl.conn, GS_OK);
    RUN_UNTIL(&loop, cl.nclosed == 1 && s.nclosed == 1);
    close_listener_and_drain(&s);
    cr_assert_eq(s.nreleased, n);
    cr_assert_eq(gs_frame_storage_spare(), 0, "closing the connections dropped the spare buffer");
    proto_check_no_leaks();
}

Test(proto_conn, send_data_rejects_bad_arguments_and_never_releases_then)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    release_t r = {0};
    gs_msg_t m = {.type = GS_MSG_PROGRESS};
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    client_connect(&cl, &loop, "127.0.0.1", s.port);
    cr_assert_eq(gs_conn_send_data(NULL, &m, release_cb, &r), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_conn_send_data(cl.conn, NULL, release_cb, &r), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_conn_send_data(cl.conn, &m, release_cb, &r), GS_ERR_INVALID_PARAM, "not DATA");
    m.type = GS_MSG_DATA;
    cr_assert_eq(gs_conn_send_data(cl.conn, &m, NULL, &r), GS_ERR_INVALID_PARAM);
    m.u.data.data = (gs_bytes_t){NULL, 5};
    cr_assert_eq(gs_conn_send_data(cl.conn, &m, release_cb, &r), GS_ERR_INVALID_PARAM, "bytes missing");
    gs_conn_close(cl.conn, GS_OK);
    cr_assert_eq(send_borrowed(cl.conn, 100, 1, &r), GS_ERR_CONN_CLOSED);
    gs_free(r.bytes);  /* still ours */
    RUN_UNTIL(&loop, cl.nclosed == 1);
    RUN_UNTIL(&loop, s.nclosed == s.naccepted);
    close_listener_and_drain(&s);
    cr_assert_eq(r.n, 0);
    proto_check_no_leaks();
}

/* A raw listener that accepts one connection and never reads from it. */
static int raw_listen(int *port_p)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(fd, 4), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    *port_p = ntohs(a.sin_port);
    return fd;
}

Test(proto_conn, send_data_released_once_when_the_connection_closes_first)
{
    uv_loop_t loop;
    client_t cl = {0}, cl2 = {0};
    release_t r1, r2;
    int port, lfd, afd;
    cr_assert_eq(uv_loop_init(&loop), 0);
    lfd = raw_listen(&port);
    /* queued while connecting, dropped by an error close */
    client_connect(&cl, &loop, "127.0.0.1", port);
    cr_assert_eq(send_borrowed(cl.conn, 1000, 1, &r1), GS_OK);
    gs_conn_close(cl.conn, GS_ERR_CANCELED);
    RUN_UNTIL(&loop, cl.nclosed == 1);
    cr_assert_eq(r1.n, 1);
    cr_assert_neq(r1.status, GS_OK);
    afd = accept(lfd, NULL, NULL);
    if (afd >= 0) close(afd);
    /* in flight (more than the socket buffers hold; the peer never reads), then closed */
    client_connect(&cl2, &loop, "127.0.0.1", port);
    RUN_UNTIL(&loop, cl2.nconnect == 1);
    cr_assert_eq(send_borrowed(cl2.conn, 64u << 20, 2, &r2), GS_OK);
    for (int i = 0; i < 20; i++) uv_run(&loop, UV_RUN_NOWAIT);
    cr_assert_eq(r2.n, 0, "cannot have been written yet");
    gs_conn_close(cl2.conn, GS_ERR_CANCELED);
    cr_assert_eq(r2.n, 0, "released inside gs_conn_close");
    RUN_UNTIL(&loop, cl2.nclosed == 1);
    cr_assert_eq(r2.n, 1);
    cr_assert_eq(r2.status, GS_ERR_CANCELED);
    cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&loop), 0);
    close(lfd);
    cr_assert_eq(r1.n, 1);
    cr_assert_eq(r2.n, 1);
    proto_check_no_leaks();
}

Test(proto_conn, send_data_released_once_when_the_write_fails)
{
    uv_loop_t loop;
    client_t cl = {0};
    release_t r;
    int port, lfd, afd;
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    cr_assert_eq(uv_loop_init(&loop), 0);
    lfd = raw_listen(&port);
    client_connect(&cl, &loop, "127.0.0.1", port);
    RUN_UNTIL(&loop, cl.nconnect == 1);
    afd = accept(lfd, NULL, NULL);
    cr_assert_geq(afd, 0);
    cr_assert_eq(send_borrowed(cl.conn, 64u << 20, 3, &r), GS_OK);
    for (int i = 0; i < 20; i++) uv_run(&loop, UV_RUN_NOWAIT);
    cr_assert_eq(r.n, 0);
    /* the peer resets the connection with the frame half written */
    cr_assert_eq(setsockopt(afd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    close(afd);
    RUN_UNTIL(&loop, cl.nclosed == 1);
    cr_assert_eq(r.n, 1);
    cr_assert_neq(r.status, GS_OK);
    cr_assert(cl.reason == GS_ERR_CONN_CLOSED || cl.reason == GS_ERR_IO, "%s", gs_status_name(cl.reason));
    cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&loop), 0);
    close(lfd);
    cr_assert_eq(r.n, 1);
    proto_check_no_leaks();
}

/* ---- gs_conn_refuse ---- */

typedef struct refusing {
    gs_conn_refuser_t r;
    int ncb;       /* connection callbacks */
    int nidle;     /* idle_cb runs */
} refusing_t;

static void refusing_idle(gs_conn_refuser_t *r)
{
    ((refusing_t *)r->data)->nidle++;
}

static void refusing_on_connection(uv_stream_t *listener, int status)
{
    refusing_t *t = listener->data;
    cr_assert_eq(status, 0);
    t->ncb++;
    gs_conn_refuse(&t->r, listener);
}

/* A listener whose callback refuses every connection: each peer sees its connection closed and
 * the listener goes on accepting (three wait together, so that one is refused while the previous
 * refusal's handle is still closing); idle_cb runs once the refuser has nothing left to close. */
Test(proto_conn, refused_connections_are_closed_and_the_listener_keeps_accepting, .timeout = 60)
{
    enum { N = 3 };
    uv_loop_t loop;
    uv_tcp_t lst;
    refusing_t t;
    struct sockaddr_in a;
    struct sockaddr_storage ss;
    int len = sizeof ss, fds[N], port;

    memset(&t, 0, sizeof t);
    t.r.idle_cb = refusing_idle;
    t.r.data = &t;
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_eq(uv_tcp_init(&loop, &lst), 0);
    lst.data = &t;
    cr_assert_eq(uv_ip4_addr("127.0.0.1", 0, &a), 0);
    cr_assert_eq(uv_tcp_bind(&lst, (const struct sockaddr *)&a, 0), 0);
    cr_assert_eq(uv_listen((uv_stream_t *)&lst, 16, refusing_on_connection), 0);
    cr_assert_eq(uv_tcp_getsockname(&lst, (struct sockaddr *)&ss, &len), 0);
    port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    for (int i = 0; i < N; i++) fds[i] = raw_connect(port);   /* completed in the backlog */
    while (t.ncb < N || gs_conn_refuser_busy(&t.r)) uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(t.r.refused_total, N);
    cr_assert_geq(t.nidle, 1);
    for (int i = 0; i < N; i++) {
        cr_assert(raw_peer_closed(fds[i]), "connection %d was not closed", i);
        close(fds[i]);
    }
    /* and again after the refuser went idle */
    fds[0] = raw_connect(port);
    while (t.ncb < N + 1 || gs_conn_refuser_busy(&t.r)) uv_run(&loop, UV_RUN_ONCE);
    cr_assert(raw_peer_closed(fds[0]));
    close(fds[0]);
    cr_assert_eq(t.r.refused_total, N + 1);
    uv_close((uv_handle_t *)&lst, NULL);
    cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&loop), 0, "handles left open");
}

Test(proto_conn, send_frame_borrowed_writes_the_callers_bytes_and_releases_once)
{
    uv_loop_t loop;
    server_t s;
    client_t cl = {0};
    release_t r = {0, GS_ERR_INTERNAL, NULL};
    gs_buf_t f;
    cr_assert_eq(uv_loop_init(&loop), 0);
    server_start(&s, &loop, 0);
    client_connect(&cl, &loop, "127.0.0.1", s.port);
    gs_buf_init(&f);
    sample_frame(GS_MSG_HELLO, &f);
    sample_frame(GS_MSG_HEARTBEAT, &f);   /* two frames in one borrowed range */
    r.bytes = f.data;                     /* the release callback frees the storage */
    /* bad arguments and partial frames: refused, nothing released, the caller keeps them */
    cr_assert_eq(gs_conn_send_frame_borrowed(NULL, f.data, f.len, release_cb, &r), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_conn_send_frame_borrowed(cl.conn, f.data, f.len, NULL, &r), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_conn_send_frame_borrowed(cl.conn, f.data, f.len - 1, release_cb, &r),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_conn_send_frame_borrowed(cl.conn, f.data, 0, release_cb, &r), GS_ERR_INVALID_PARAM);
    cr_assert_eq(r.n, 0);
    /* queued before the connection is up: written once it is, then released with GS_OK */
    cr_assert_eq(gs_conn_send_frame_borrowed(cl.conn, f.data, f.len, release_cb, &r), GS_OK, "%s",
                 gs_last_error());
    cr_assert_eq(r.n, 0, "not released before it is written");
    RUN_UNTIL(&loop, cl.welcome_id != 0 && s.naccepted == 1 && s.nmsgs[0] == 2 && r.n == 1);
    cr_assert_eq(r.status, GS_OK);
    cr_assert_eq(s.last_type[0], GS_MSG_HEARTBEAT);
    gs_conn_close(cl.conn, GS_OK);
    RUN_UNTIL(&loop, cl.nclosed == 1 && s.nclosed == 1);
    cr_assert_eq(r.n, 1, "released exactly once");
    close_listener_and_drain(&s);
    proto_check_no_leaks();
}
