/* TLS sessions (proto/tls.c) driven by hand: a client and a server session exchange records in
 * memory, so every failure path is reached without sockets; and a TLS connection pair
 * (proto/conn.c) on one loop for the orderly close. Certificates are made by the openssl CLI in
 * a temporary directory. */
#include "common/alloc.h"
#include "common/error.h"
#include "proto/conn.h"
#include "proto/tls.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <arpa/inet.h>
#include <netinet/in.h>

static char dir[64];
static char ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX];

static void setup(void)
{
    char cmd[PATH_MAX + 1024];
    snprintf(dir, sizeof(dir), "/tmp/gs-tls-proto-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(cmd, sizeof(cmd),
             "cd %s && exec 2>gen.log && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem "
             "-days 2 -subj /CN=proto-ca -addext basicConstraints=critical,CA:TRUE && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout n.key -out n.csr -subj /CN=n && "
             "printf 'subjectAltName=IP:127.0.0.1,DNS:node.test\\n' > n.ext && "
             "openssl x509 -req -in n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out n.pem -extfile n.ext",
             dir);
    cr_assert_eq(system(cmd), 0, "openssl failed (%s/gen.log)", dir);
    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    snprintf(cert, sizeof(cert), "%s/n.pem", dir);
    snprintf(key, sizeof(key), "%s/n.key", dir);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

TestSuite(proto_tls, .init = setup, .fini = teardown);

typedef struct sink {
    uint8_t data[1 << 16];
    size_t len;
} sink_t;

static gs_status_t to_sink(void *arg, const void *data, size_t len)
{
    sink_t *s = arg;
    cr_assert_leq(s->len + len, sizeof(s->data));
    memcpy(s->data + s->len, data, len);
    s->len += len;
    return GS_OK;
}

/* Move @a from's output into @a to, @a step bytes per feed. */
static gs_status_t pump(gs_tls_session_t *from, gs_tls_session_t *to, size_t step, sink_t *got)
{
    gs_buf_t out;
    gs_status_t st = GS_OK;
    gs_buf_init(&out);
    cr_assert_eq(gs_tls_session_take_output(from, &out), GS_OK);
    for (size_t off = 0; off < out.len && st == GS_OK; off += step) {
        size_t n = out.len - off < step ? out.len - off : step;
        st = gs_tls_session_feed(to, out.data + off, n, to_sink, got);
    }
    gs_buf_cleanup(&out);
    return st;
}

static void pair(const char *host, gs_tls_ctx_t **sctx, gs_tls_ctx_t **cctx, gs_tls_session_t **srv,
                 gs_tls_session_t **cli)
{
    gs_tls_config_t sc = {ca, cert, key, 1}, cc = {ca, cert, key, 0};
    cr_assert_eq(gs_tls_ctx_create(&sc, 1, sctx), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_tls_ctx_create(&cc, 0, cctx), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_tls_session_create(*sctx, NULL, "client", srv), GS_OK);
    cr_assert_eq(gs_tls_session_create(*cctx, host, "server", cli), GS_OK);
}

Test(proto_tls, records_fed_one_byte_at_a_time_carry_the_bytes)
{
    gs_tls_ctx_t *sctx, *cctx;
    gs_tls_session_t *srv, *cli;
    sink_t got = {.len = 0}, none = {.len = 0};
    static uint8_t msg[40000];
    for (size_t i = 0; i < sizeof(msg); i++) msg[i] = (uint8_t)(i * 7);
    pair("127.0.0.1", &sctx, &cctx, &srv, &cli);
    for (int round = 0; round < 4 && !(gs_tls_session_ready(srv) && gs_tls_session_ready(cli)); round++) {
        cr_assert_eq(pump(cli, srv, 1, &none), GS_OK, "%s", gs_last_error());
        cr_assert_eq(pump(srv, cli, 1, &none), GS_OK, "%s", gs_last_error());
    }
    cr_assert(gs_tls_session_ready(srv) && gs_tls_session_ready(cli));
    cr_assert_eq(gs_tls_session_write(cli, msg, sizeof(msg)), GS_OK);
    cr_assert_eq(pump(cli, srv, 1, &got), GS_OK, "%s", gs_last_error());
    cr_assert_eq(got.len, sizeof(msg));
    cr_assert_eq(memcmp(got.data, msg, sizeof(msg)), 0);
    gs_tls_session_destroy(cli);
    gs_tls_session_destroy(srv);
    gs_tls_ctx_destroy(cctx);
    gs_tls_ctx_destroy(sctx);
}

Test(proto_tls, a_name_the_certificate_does_not_carry_fails_the_handshake)
{
    gs_tls_ctx_t *sctx, *cctx;
    gs_tls_session_t *srv, *cli;
    sink_t none = {.len = 0};
    gs_status_t st = GS_OK;
    pair("other.test", &sctx, &cctx, &srv, &cli);
    for (int round = 0; round < 4 && st == GS_OK; round++) {
        st = pump(cli, srv, 4096, &none);
        if (st == GS_OK) st = pump(srv, cli, 4096, &none);
    }
    cr_assert_eq(st, GS_ERR_AUTH);
    cr_assert(strstr(gs_last_error(), "certificate verify failed") != NULL, "%s", gs_last_error());
    gs_tls_session_destroy(cli);
    gs_tls_session_destroy(srv);
    gs_tls_ctx_destroy(cctx);
    gs_tls_ctx_destroy(sctx);
}

Test(proto_tls, garbage_and_flipped_records_are_errors_not_crashes)
{
    gs_tls_ctx_t *sctx, *cctx;
    gs_tls_session_t *srv, *cli;
    sink_t none = {.len = 0};
    gs_buf_t out;
    static const char junk[] = "\x10\x00\x00\x00 this is a plain frame, not a TLS record";
    pair("127.0.0.1", &sctx, &cctx, &srv, &cli);
    cr_assert_eq(gs_tls_session_feed(srv, junk, sizeof(junk), to_sink, &none), GS_ERR_AUTH);
    cr_assert_neq(gs_tls_session_feed(srv, junk, 1, to_sink, &none), GS_OK);  /* stays failed */
    gs_tls_session_destroy(srv);
    /* a fresh server; after the handshake one flipped bit in a record fails the record */
    cr_assert_eq(gs_tls_session_create(sctx, NULL, "client", &srv), GS_OK);
    for (int round = 0; round < 4 && !(gs_tls_session_ready(srv) && gs_tls_session_ready(cli)); round++) {
        cr_assert_eq(pump(cli, srv, 512, &none), GS_OK);
        cr_assert_eq(pump(srv, cli, 512, &none), GS_OK);
    }
    cr_assert_eq(gs_tls_session_write(cli, "hello", 5), GS_OK);
    gs_buf_init(&out);
    cr_assert_eq(gs_tls_session_take_output(cli, &out), GS_OK);
    out.data[out.len - 3] ^= 0x40;
    cr_assert_neq(gs_tls_session_feed(srv, out.data, out.len, to_sink, &none), GS_OK);
    cr_assert_eq(none.len, 0);
    gs_buf_cleanup(&out);
    gs_tls_session_destroy(cli);
    gs_tls_session_destroy(srv);
    gs_tls_ctx_destroy(cctx);
    gs_tls_ctx_destroy(sctx);
}

Test(proto_tls, bad_configurations_name_the_problem)
{
    gs_tls_ctx_t *ctx = NULL;
    gs_tls_config_t missing = {"/nonexistent/ca.pem", NULL, NULL, 0};
    gs_tls_config_t no_key = {ca, cert, NULL, 0};
    gs_tls_config_t swapped = {ca, key, cert, 0};
    gs_tls_config_t server_without_cert = {ca, NULL, NULL, 0};
    gs_tls_config_t no_ca = {NULL, cert, key, 0};
    cr_assert_eq(gs_tls_ctx_create(&missing, 0, &ctx), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "/nonexistent/ca.pem") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_tls_ctx_create(&no_key, 0, &ctx), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_tls_ctx_create(&swapped, 1, &ctx), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_tls_ctx_create(&server_without_cert, 1, &ctx), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_tls_ctx_create(&no_ca, 0, &ctx), GS_ERR_INVALID_PARAM);
    cr_assert_null(ctx);
}

/* ---- a TLS connection pair (proto/conn.c) on one loop ---- */

typedef struct tconn {
    gs_tls_ctx_t *sctx, *cctx;
    gs_conn_t *srv, *cli;
    int connected, srv_got, nmsgs, closed_before_msg, cli_closed, srv_closed;
    uint32_t last_type;
    gs_status_t srv_reason;
} tconn_t;

static void tc_cli_msg(gs_conn_t *c, gs_msg_t *m, void *arg)
{
    tconn_t *t = arg;
    (void)c;
    t->nmsgs++;
    t->last_type = m->type;
}

static void tc_cli_close(gs_conn_t *c, gs_status_t reason, void *arg)
{
    tconn_t *t = arg;
    (void)c;
    (void)reason;
    if (t->nmsgs == 0) t->closed_before_msg = 1;
    t->cli_closed = 1;
}

static void tc_cli_connect(gs_conn_t *c, gs_status_t status, void *arg)
{
    tconn_t *t = arg;
    (void)c;
    cr_assert_eq(status, GS_OK, "the TLS handshake failed: %s", gs_last_error());
    t->connected = 1;
}

static void tc_srv_msg(gs_conn_t *c, gs_msg_t *m, void *arg)
{
    (void)c;
    (void)m;
    ((tconn_t *)arg)->srv_got = 1;
}

static void tc_srv_close(gs_conn_t *c, gs_status_t reason, void *arg)
{
    (void)c;
    ((tconn_t *)arg)->srv_reason = reason;
    ((tconn_t *)arg)->srv_closed = 1;
}

static void tc_on_connection(uv_stream_t *listener, int status)
{
    tconn_t *t = listener->data;
    gs_conn_params_t p = {.msg_cb = tc_srv_msg, .close_cb = tc_srv_close, .arg = t, .tls = t->sctx};
    cr_assert_eq(status, 0);
    cr_assert_eq(gs_conn_accept(listener, &p, &t->srv), GS_OK, "%s", gs_last_error());
}

static void tc_run_until(uv_loop_t *loop, const int *flag)
{
    for (int i = 0; i < 20000 && !*flag; i++) uv_run(loop, UV_RUN_NOWAIT);
    cr_assert(*flag, "timed out waiting on the loop");
}

/* A frame and the close_notify right behind it (gsched's SHUTDOWN, then its orderly close)
 * arrive in one read: the frame is handed out before the connection closes. */
Test(proto_tls, a_frame_just_before_close_notify_is_handed_out_first)
{
    gs_tls_config_t sc = {ca, cert, key, 1}, cc = {ca, cert, key, 0};
    gs_conn_params_t p = {.msg_cb = tc_cli_msg, .close_cb = tc_cli_close,
                          .connect_cb = tc_cli_connect};
    struct sockaddr_in a;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    uv_loop_t loop;
    uv_tcp_t listener;
    tconn_t t = {0};
    gs_msg_t shut = {.type = GS_MSG_SHUTDOWN};

    cr_assert_eq(gs_tls_ctx_create(&sc, 1, &t.sctx), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_tls_ctx_create(&cc, 0, &t.cctx), GS_OK, "%s", gs_last_error());
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_eq(uv_tcp_init(&loop, &listener), 0);
    listener.data = &t;
    cr_assert_eq(uv_ip4_addr("127.0.0.1", 0, &a), 0);
    cr_assert_eq(uv_tcp_bind(&listener, (const struct sockaddr *)&a, 0), 0);
    cr_assert_eq(uv_listen((uv_stream_t *)&listener, 4, tc_on_connection), 0);
    cr_assert_eq(uv_tcp_getsockname(&listener, (struct sockaddr *)&ss, &len), 0);
    p.arg = &t;
    p.tls = t.cctx;
    cr_assert_eq(gs_conn_connect(&loop, "127.0.0.1", ntohs(((struct sockaddr_in *)&ss)->sin_port),
                                 &p, &t.cli), GS_OK, "%s", gs_last_error());
    tc_run_until(&loop, &t.connected);
    /* a frame from the client: the server's side of the handshake is done too */
    cr_assert_eq(gs_conn_send(t.cli, &shut), GS_OK, "%s", gs_last_error());
    tc_run_until(&loop, &t.srv_got);

    /* both before the loop runs again: one read at the client sees both */
    cr_assert_eq(gs_conn_send(t.srv, &shut), GS_OK, "%s", gs_last_error());
    gs_conn_close(t.srv, GS_OK);
    tc_run_until(&loop, &t.cli_closed);
    cr_assert_eq(t.nmsgs, 1, "the frame before close_notify was dropped");
    cr_assert_eq(t.last_type, GS_MSG_SHUTDOWN);
    cr_assert_not(t.closed_before_msg);

    tc_run_until(&loop, &t.srv_closed);
    uv_close((uv_handle_t *)&listener, NULL);
    cr_assert_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(&loop), 0, "handles left open");
    gs_tls_ctx_destroy(t.cctx);
    gs_tls_ctx_destroy(t.sctx);
}

/* ---- frames sent before the sender's own handshake has finished, then an orderly close ---- */

static void tc_srv_send_and_close(uv_stream_t *listener, int status)
{
    tconn_t *t = listener->data;
    gs_conn_params_t p = {.msg_cb = tc_srv_msg, .close_cb = tc_srv_close, .arg = t, .tls = t->sctx};
    gs_msg_t shut = {.type = GS_MSG_SHUTDOWN};
    cr_assert_eq(status, 0);
    cr_assert_eq(gs_conn_accept(listener, &p, &t->srv), GS_OK, "%s", gs_last_error());
    /* the ClientHello has not even been read yet */
    cr_assert_eq(gs_conn_send(t->srv, &shut), GS_OK, "%s", gs_last_error());
    gs_conn_close(t->srv, GS_OK);
}

/* Listen on loopback with @a on_connection; returns the port. */
static int tc_listen(uv_loop_t *loop, uv_tcp_t *listener, tconn_t *t, uv_connection_cb on_connection)
{
    gs_tls_config_t sc = {ca, cert, key, 1}, cc = {ca, cert, key, 0};
    struct sockaddr_in a;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    cr_assert_eq(gs_tls_ctx_create(&sc, 1, &t->sctx), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_tls_ctx_create(&cc, 0, &t->cctx), GS_OK, "%s", gs_last_error());
    cr_assert_eq(uv_loop_init(loop), 0);
    cr_assert_eq(uv_tcp_init(loop, listener), 0);
    listener->data = t;
    cr_assert_eq(uv_ip4_addr("127.0.0.1", 0, &a), 0);
    cr_assert_eq(uv_tcp_bind(listener, (const struct sockaddr *)&a, 0), 0);
    cr_assert_eq(uv_listen((uv_stream_t *)listener, 4, on_connection), 0);
    cr_assert_eq(uv_tcp_getsockname(listener, (struct sockaddr *)&ss, &len), 0);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void tc_finish(uv_loop_t *loop, uv_tcp_t *listener, tconn_t *t)
{
    uv_close((uv_handle_t *)listener, NULL);
    cr_assert_eq(uv_run(loop, UV_RUN_DEFAULT), 0);
    cr_assert_eq(uv_loop_close(loop), 0, "handles left open");
    gs_tls_ctx_destroy(t->cctx);
    gs_tls_ctx_destroy(t->sctx);
}

/* A client sends a frame and closes before its TCP connection, let alone its TLS handshake, is
 * up: the frame goes out once the handshake completes, and close_notify after it. */
Test(proto_tls, a_client_frame_sent_before_its_handshake_then_close_reaches_the_server, .timeout = 30)
{
    gs_conn_params_t p = {.msg_cb = tc_cli_msg, .close_cb = tc_cli_close};
    uv_loop_t loop;
    uv_tcp_t listener;
    tconn_t t = {0};
    gs_msg_t shut = {.type = GS_MSG_SHUTDOWN};
    int port = tc_listen(&loop, &listener, &t, tc_on_connection);

    p.arg = &t;
    p.tls = t.cctx;
    cr_assert_eq(gs_conn_connect(&loop, "127.0.0.1", port, &p, &t.cli), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_conn_send(t.cli, &shut), GS_OK, "%s", gs_last_error());
    gs_conn_close(t.cli, GS_OK);
    tc_run_until(&loop, &t.cli_closed);
    tc_run_until(&loop, &t.srv_closed);
    cr_assert(t.srv_got, "the frame sent before the client's handshake finished was dropped");
    tc_finish(&loop, &listener, &t);
}

/* The same from the server: a frame sent and an orderly close right at accept, before the
 * server has read the ClientHello. */
Test(proto_tls, a_server_frame_sent_before_its_handshake_then_close_reaches_the_client, .timeout = 30)
{
    gs_conn_params_t p = {.msg_cb = tc_cli_msg, .close_cb = tc_cli_close, .connect_cb = tc_cli_connect};
    uv_loop_t loop;
    uv_tcp_t listener;
    tconn_t t = {0};
    int port = tc_listen(&loop, &listener, &t, tc_srv_send_and_close);

    p.arg = &t;
    p.tls = t.cctx;
    cr_assert_eq(gs_conn_connect(&loop, "127.0.0.1", port, &p, &t.cli), GS_OK, "%s", gs_last_error());
    tc_run_until(&loop, &t.cli_closed);
    cr_assert(t.connected);
    cr_assert_eq(t.nmsgs, 1, "the frame sent before the server's handshake finished was dropped");
    cr_assert_eq(t.last_type, GS_MSG_SHUTDOWN);
    cr_assert_not(t.closed_before_msg);
    tc_run_until(&loop, &t.srv_closed);
    tc_finish(&loop, &listener, &t);
}

static void tc_plain_connect(gs_conn_t *c, gs_status_t status, void *arg)
{
    (void)c;
    cr_assert_eq(status, GS_OK, "%s", gs_last_error());
    ((tconn_t *)arg)->connected = 1;
}

/* A close waiting for the handshake ends when the peer goes away without one (here a client
 * without TLS that closes at once): the server's connection closes with the end of stream. */
Test(proto_tls, a_close_waiting_for_the_handshake_ends_when_the_peer_goes_away, .timeout = 30)
{
    gs_conn_params_t p = {.msg_cb = tc_cli_msg, .close_cb = tc_cli_close, .connect_cb = tc_plain_connect};
    uv_loop_t loop;
    uv_tcp_t listener;
    tconn_t t = {0};
    int port = tc_listen(&loop, &listener, &t, tc_srv_send_and_close);

    p.arg = &t;
    cr_assert_eq(gs_conn_connect(&loop, "127.0.0.1", port, &p, &t.cli), GS_OK, "%s", gs_last_error());
    tc_run_until(&loop, &t.connected);
    gs_conn_close(t.cli, GS_OK);
    tc_run_until(&loop, &t.srv_closed);
    cr_assert_eq(t.srv_reason, GS_ERR_CONN_CLOSED, "%s", gs_status_string(t.srv_reason));
    tc_run_until(&loop, &t.cli_closed);
    cr_assert_eq(t.nmsgs, 0);
    tc_finish(&loop, &listener, &t);
}

static void tc_srv_send_and_close_bounded(uv_stream_t *listener, int status)
{
    tconn_t *t = listener->data;
    gs_conn_params_t p = {.msg_cb = tc_srv_msg, .close_cb = tc_srv_close, .arg = t, .tls = t->sctx,
                          .close_wait_ms = 50};
    gs_msg_t shut = {.type = GS_MSG_SHUTDOWN};
    cr_assert_eq(status, 0);
    cr_assert_eq(gs_conn_accept(listener, &p, &t->srv), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_conn_send(t->srv, &shut), GS_OK, "%s", gs_last_error());
    gs_conn_close(t->srv, GS_OK);
}

/* A close waiting for the handshake is bounded: a peer that connects and then says nothing (here
 * a client without TLS that stays open) does not keep the connection for ever. Past
 * close_wait_ms the server's connection closes with GS_ERR_TIMED_OUT, its frame dropped, and
 * the silent peer sees the end of stream. Waits on the loop's events (the deadline is a timer). */
Test(proto_tls, a_close_waiting_for_a_stalled_handshake_ends_at_its_deadline, .timeout = 30)
{
    gs_conn_params_t p = {.msg_cb = tc_cli_msg, .close_cb = tc_cli_close, .connect_cb = tc_plain_connect};
    uv_loop_t loop;
    uv_tcp_t listener;
    tconn_t t = {0};
    int port = tc_listen(&loop, &listener, &t, tc_srv_send_and_close_bounded);

    p.arg = &t;
    cr_assert_eq(gs_conn_connect(&loop, "127.0.0.1", port, &p, &t.cli), GS_OK, "%s", gs_last_error());
    while (!t.srv_closed) uv_run(&loop, UV_RUN_ONCE);   /* the deadline's timer wakes the loop */
    cr_assert_eq(t.srv_reason, GS_ERR_TIMED_OUT, "%s", gs_status_string(t.srv_reason));
    while (!t.cli_closed) uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(t.nmsgs, 0);
    tc_finish(&loop, &listener, &t);
}
