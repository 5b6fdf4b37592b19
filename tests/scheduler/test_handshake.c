/* The scheduler's front door: handshake, refusals, garbage, timeouts. */
#include "harness.h"

#include "common/time.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static gs_sched_params_t token_params(const char *token)
{
    gs_sched_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_TOKEN;
    prm.token = token;
    return prm;
}

static void send_info_req(tp_t *p)
{
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_INFO_REQ;
    tp_send(p, &m);
}

/* A good client can still connect and is answered. */
static void check_serving(th_t *th, const char *token)
{
    tp_t *c = tp_connect(th, GS_PROTO_VERSION, token, GS_ROLE_CLIENT, "good");
    gs_msg_t m;
    tp_expect(c, GS_MSG_WELCOME, &m);
    cr_assert_gt(m.u.welcome.id, 0);
    cr_assert_eq(m.u.welcome.version, GS_PROTO_VERSION);
    gs_msg_cleanup(&m);
    send_info_req(c);
    tp_expect(c, GS_MSG_INFO, &m);
    gs_msg_cleanup(&m);
}

static void expect_refused(tp_t *p, gs_status_t status)
{
    gs_msg_t m;
    tp_expect(p, GS_MSG_ERROR, &m);
    cr_assert_eq(m.u.error.status, status, "status %d (%s)", m.u.error.status, (const char *)m.u.error.message.data);
    cr_assert_gt(m.u.error.message.len, 0);
    gs_msg_cleanup(&m);
    cr_assert(tp_wait_closed(p, TH_TIMEOUT_MS), "refused connection stays open");
    cr_assert(tp_none(p, GS_MSG_WELCOME, 0));
    cr_assert(tp_none(p, GS_MSG_INFO, 0));
}

Test(scheduler_handshake, welcomes_a_client_with_id_and_heartbeat)
{
    th_t th;
    gs_sched_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_HEARTBEAT_MS;
    prm.heartbeat_ms = 250;
    th_init(&th, &prm);
    tp_t *c = tp_connect(&th, GS_PROTO_VERSION, "", GS_ROLE_CLIENT, "c");
    gs_msg_t m;
    tp_expect(c, GS_MSG_WELCOME, &m);
    cr_assert_eq(m.u.welcome.heartbeat_ms, 250);
    cr_assert_gt(m.u.welcome.id, 0);
    gs_msg_cleanup(&m);
    cr_assert_eq(th_stats(&th).nclients, 1);
    th_fini(&th);
}

Test(scheduler_handshake, refuses_wrong_token_and_keeps_serving)
{
    th_t th;
    gs_sched_params_t prm = token_params("s3cret");
    th_init(&th, &prm);
    const char *bad_tokens[] = {"wrong!", "", "s3cre", "s3cretX", "S3cret"};
    for (int i = 0; i < 5; i++) {
        gs_msg_t m;
        tp_t *bad = tp_connect(&th, GS_PROTO_VERSION, bad_tokens[i], GS_ROLE_WORKER, "bad");
        tp_expect(bad, GS_MSG_CHALLENGE, &m);   /* answered (AUTH) as it arrived */
        gs_msg_cleanup(&m);
        send_info_req(bad);   /* must not be processed */
        expect_refused(bad, GS_ERR_AUTH);
    }
    check_serving(&th, "s3cret");
    cr_assert_eq(th_stats(&th).refused_total, 5);
    cr_assert_eq(th_stats(&th).auth_failed_total, 5);
    cr_assert_eq(th_stats(&th).nworkers, 0);
    th_fini(&th);
}

Test(scheduler_handshake, refuses_wrong_version)
{
    th_t th;
    th_init(&th, NULL);
    tp_t *bad = tp_connect(&th, GS_PROTO_VERSION + 1, "", GS_ROLE_CLIENT, "future");
    expect_refused(bad, GS_ERR_VERSION);
    check_serving(&th, "");
    th_fini(&th);
}

/* A version 1 peer (token in clear, no nonce) is told which versions differ. */
Test(scheduler_handshake, refuses_an_old_protocol_version_with_a_clear_error)
{
    th_t th;
    gs_msg_t m;
    static const uint32_t versions[] = {1, GS_PROTO_VERSION - 1};   /* the first, and the one before */
    char want[64], speaks[32];
    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_TOKEN, .token = "tok"});
    snprintf(speaks, sizeof speaks, "speaks %u", GS_PROTO_VERSION);
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        tp_t *old = tp_connect(&th, versions[i], "tok", GS_ROLE_WORKER, "old");
        snprintf(want, sizeof want, "protocol version %u is not supported", versions[i]);
        tp_expect(old, GS_MSG_ERROR, &m);
        cr_assert_eq(m.u.error.status, GS_ERR_VERSION);
        cr_assert(strstr((const char *)m.u.error.message.data, want) != NULL &&
                      strstr((const char *)m.u.error.message.data, speaks) != NULL,
                  "%s", (const char *)m.u.error.message.data);
        gs_msg_cleanup(&m);
        cr_assert(tp_wait_closed(old, TH_TIMEOUT_MS));
        cr_assert(tp_none(old, GS_MSG_CHALLENGE, 0), "a challenge went to a peer of another version");
    }
    check_serving(&th, "tok");
    th_fini(&th);
}

/* Record a worker's HELLO and AUTH on one connection and replay both on another: gsched's fresh
 * nonce makes the recorded proof worthless. The token itself never appears in the frames. */
Test(scheduler_handshake, refuses_a_recorded_registration_replayed_on_a_new_connection)
{
    static const char token[] = "s3cret-token";
    th_t th;
    gs_hs_peer_t hs;
    gs_msg_t hello, auth, m;
    uint8_t proof[GS_AUTH_MAC_BYTES];
    gs_buf_t wire;

    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_TOKEN, .token = token});
    cr_assert_eq(gs_hs_peer_hello(&hs, token, GS_ROLE_WORKER, "victim", &hello), GS_OK);
    tp_t *a = tp_connect_manual(&th, &hello);
    tp_expect(a, GS_MSG_CHALLENGE, &m);
    cr_assert_eq(gs_hs_peer_answer(&hs, &m, &auth), GS_OK, "%s", gs_last_error());
    gs_msg_cleanup(&m);
    tp_send(a, &auth);
    tp_expect(a, GS_MSG_WELCOME, &m);
    cr_assert_eq(m.u.welcome.data_key.len, GS_AUTH_KEY_BYTES, "a worker gets the data-plane key");
    gs_msg_cleanup(&m);
    memcpy(proof, hs.proof, sizeof proof);
    gs_buf_init(&wire);
    cr_assert_eq(gs_msg_encode(&hello, &wire), GS_OK);
    cr_assert_eq(gs_msg_encode(&auth, &wire), GS_OK);
    cr_assert_null(memmem(wire.data, wire.len, token, strlen(token)), "the token crossed the wire");
    gs_buf_cleanup(&wire);

    /* the replay: same HELLO (same nonce), then the recorded AUTH */
    tp_t *b = tp_connect_manual(&th, &hello);
    tp_expect(b, GS_MSG_CHALLENGE, &m);
    gs_msg_cleanup(&m);
    auth = (gs_msg_t){.type = GS_MSG_AUTH, .u.auth.proof = {proof, sizeof proof}};
    tp_send(b, &auth);
    expect_refused(b, GS_ERR_AUTH);
    cr_assert_eq(th_stats(&th).auth_failed_total, 1);
    cr_assert_eq(th_stats(&th).nworkers, 0);
    th_fini(&th);
}

/* A client's WELCOME carries no data-plane key; a HELLO without a nonce is refused. */
Test(scheduler_handshake, gives_the_data_key_to_workers_only_and_wants_a_nonce)
{
    th_t th;
    gs_msg_t m, hello;
    th_init(&th, NULL);
    tp_t *c = tp_connect(&th, GS_PROTO_VERSION, "", GS_ROLE_CLIENT, "c");
    tp_expect(c, GS_MSG_WELCOME, &m);
    cr_assert_eq(m.u.welcome.data_key.len, 0);
    gs_msg_cleanup(&m);
    th_hello(&hello, GS_PROTO_VERSION, "", GS_ROLE_WORKER, "no-nonce");
    tp_t *bad = tp_connect_manual(&th, &hello);
    expect_refused(bad, GS_ERR_PROTO);
    th_fini(&th);
}

/* ---- raw sockets ---- */

static int raw_connect(int port);
static void raw_send(int fd, const void *p, size_t n);
static int raw_wait_eof(th_t *th, int fd, uint8_t *got, size_t cap, size_t *len_p, int timeout_ms);

/* A message over its type's cap (msg_schema.h) closes the connection and is counted, even from
 * an authenticated peer; the scheduler keeps serving. */
Test(scheduler_handshake, closes_a_connection_sending_a_message_over_its_type_cap)
{
    th_t th;
    uint8_t frame[4 + 300];
    th_init(&th, NULL);
    int fd = raw_connect(th.port);
    th_raw_handshake(&th, fd, "", GS_ROLE_CLIENT, "padder");
    /* [HEARTBEAT, 1, 1, 1, 1, 1] and nil padding to 300 bytes */
    memset(frame, 0xc0, sizeof frame);
    frame[0] = 44, frame[1] = 1, frame[2] = 0, frame[3] = 0;   /* 300, little-endian */
    memcpy(frame + 4, "\x96\x04\x01\x01\x01\x01\x01", 7);
    raw_send(fd, frame, sizeof frame);
    cr_assert(raw_wait_eof(&th, fd, NULL, 0, NULL, TH_TIMEOUT_MS), "the connection stayed open");
    close(fd);
    cr_assert_eq(th_stats(&th).msgs_oversized_total, 1);
    check_serving(&th, "");
    th_fini(&th);
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
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
    cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void raw_send_msg(int fd, const gs_msg_t *m)
{
    gs_buf_t b;
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(m, &b), GS_OK);
    raw_send(fd, b.data, b.len);
    gs_buf_cleanup(&b);
}

/* Run the loop until the server closes @a fd; collects what it sent into @a got. */
static int raw_wait_eof(th_t *th, int fd, uint8_t *got, size_t cap, size_t *len_p, int ms)
{
    uint64_t end = gs_now_ns() + (uint64_t)ms * 1000000ull;
    size_t len = 0;
    while (gs_now_ns() < end) {
        uint8_t buf[4096];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            if (len_p) *len_p = len;
            return 1;
        }
        if (n > 0) {
            size_t k = (size_t)n < cap - len ? (size_t)n : cap - len;
            if (got) memcpy(got + len, buf, k);
            len += k;
            continue;
        }
        uv_run(&th->loop, UV_RUN_ONCE);
    }
    return 0;
}

Test(scheduler_handshake, refuses_a_first_frame_that_is_not_hello)
{
    th_t th;
    th_init(&th, NULL);
    int fd = raw_connect(th.port);
    gs_msg_t m;
    uint8_t got[4096];
    size_t len = 0;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_INFO_REQ;
    raw_send_msg(fd, &m);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_HELLO;
    m.u.hello.version = GS_PROTO_VERSION;
    m.u.hello.role = GS_ROLE_CLIENT;
    raw_send_msg(fd, &m);
    cr_assert(raw_wait_eof(&th, fd, got, sizeof got, &len, TH_TIMEOUT_MS));
    /* exactly one frame: an ERROR */
    cr_assert_geq(len, 4);
    uint32_t flen = (uint32_t)got[0] | (uint32_t)got[1] << 8 | (uint32_t)got[2] << 16 | (uint32_t)got[3] << 24;
    cr_assert_eq(len, 4 + (size_t)flen, "more than one frame came back");
    cr_assert_eq(gs_msg_decode(got + 4, flen, &m), GS_OK);
    cr_assert_eq(m.type, GS_MSG_ERROR);
    cr_assert_eq(m.u.error.status, GS_ERR_PROTO);
    gs_msg_cleanup(&m);
    close(fd);
    check_serving(&th, "");
    cr_assert_eq(th_stats(&th).nclients, 1);
    th_fini(&th);
}

Test(scheduler_handshake, closes_on_garbage_and_keeps_serving)
{
    th_t th;
    th_init(&th, NULL);
    static const uint8_t garbage[] = {5, 0, 0, 0, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1};
    static const uint8_t huge[] = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3};
    int fd1 = raw_connect(th.port);
    int fd2 = raw_connect(th.port);
    int fd3 = raw_connect(th.port);
    raw_send(fd1, garbage, sizeof garbage);
    raw_send(fd2, huge, sizeof huge);
    for (int i = 0; i < 200; i++) raw_send(fd3, "\x01\x00\x00\x00\x90", 5);   /* [] */
    cr_assert(raw_wait_eof(&th, fd1, NULL, 0, NULL, TH_TIMEOUT_MS));
    cr_assert(raw_wait_eof(&th, fd2, NULL, 0, NULL, TH_TIMEOUT_MS));
    cr_assert(raw_wait_eof(&th, fd3, NULL, 0, NULL, TH_TIMEOUT_MS));
    close(fd1);
    close(fd2);
    close(fd3);
    check_serving(&th, "");
    th_fini(&th);
}

Test(scheduler_handshake, closes_connections_that_never_say_hello)
{
    th_t th;
    gs_sched_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_HANDSHAKE_TIMEOUT_MS;
    prm.handshake_timeout_ms = 100;
    th_init(&th, &prm);
    int fd = raw_connect(th.port);
    uint64_t t0 = gs_now_ns();
    cr_assert(raw_wait_eof(&th, fd, NULL, 0, NULL, TH_TIMEOUT_MS));
    cr_assert_geq(gs_now_ns() - t0, 90ull * 1000000ull);
    close(fd);
    check_serving(&th, "");
    th_fini(&th);
}

Test(scheduler_handshake, refuses_worker_messages_before_register)
{
    th_t th;
    th_init(&th, NULL);
    tp_t *w = tp_connect(&th, GS_PROTO_VERSION, "", GS_ROLE_WORKER, "w");
    gs_msg_t m;
    tp_expect(w, GS_MSG_WELCOME, &m);
    gs_msg_cleanup(&m);
    tw_done1(w, 1, 0);
    expect_refused(w, GS_ERR_PROTO);
    th_fini(&th);
}

Test(scheduler_handshake, refuses_worker_messages_from_a_client)
{
    th_t th;
    th_init(&th, NULL);
    tp_t *c = tp_client(&th, "c");
    tp_t *other = tp_client(&th, "other");
    tw_done1(c, 1, 0);
    expect_refused(c, GS_ERR_PROTO);
    send_info_req(other);
    gs_msg_t m;
    tp_expect(other, GS_MSG_INFO, &m);
    cr_assert_eq(m.u.info.nclients, 1);
    gs_msg_cleanup(&m);
    th_fini(&th);
}

Test(scheduler_handshake, refuses_a_second_register)
{
    th_t th;
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 1);
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_WORKER_REGISTER;
    tp_send(w, &m);
    expect_refused(w, GS_ERR_PROTO);
    th_run_for(&th, 20);
    cr_assert_eq(th_stats(&th).nworkers, 0);
    th_fini(&th);
}

Test(scheduler_handshake, refuses_unknown_role)
{
    th_t th;
    th_init(&th, NULL);
    int fd = raw_connect(th.port);
    /* [1, version, role 7, "", ""] built by hand: the encoder refuses unknown roles */
    uint8_t frame[10] = {6, 0, 0, 0, 0x95, 0x01, (uint8_t)GS_PROTO_VERSION, 0x07, 0xa0, 0xa0};
    uint8_t got[4096];
    size_t len = 0;
    raw_send(fd, frame, sizeof frame);
    cr_assert(raw_wait_eof(&th, fd, got, sizeof got, &len, TH_TIMEOUT_MS));
    if (len > 0) {   /* refused by gsched (ERROR) or by the decoder (no frame) */
        gs_msg_t m;
        cr_assert_eq(gs_msg_decode(got + 4, len - 4, &m), GS_OK);
        cr_assert_eq(m.type, GS_MSG_ERROR);
        gs_msg_cleanup(&m);
    }
    close(fd);
    cr_assert_eq(th_stats(&th).nclients + th_stats(&th).nworkers, 0);
    check_serving(&th, "");
    th_fini(&th);
}

/* A raw peer announcing a 1 GiB frame (or sending plain text) before HELLO is dropped at once,
 * long before the handshake timeout, while a real client connecting alongside is served; after
 * the handshake the normal limit applies (a frame above the pre-handshake limit is accepted). */
Test(scheduler_handshake, drops_a_huge_frame_header_before_hello_at_once)
{
    th_t th;
    gs_sched_params_t prm;
    static const uint8_t gib[] = {0x00, 0x00, 0x00, 0x40, 'x', 'y'};   /* 1 GiB payload */
    static const char text[] = "GET / HTTP/1.1\r\nHost: gsched\r\n\r\n";
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_HANDSHAKE_TIMEOUT_MS;
    prm.handshake_timeout_ms = 120000;   /* "at once" is anything well under this, even loaded */
    th_init(&th, &prm);
    tp_t *c = tp_connect(&th, GS_PROTO_VERSION, "", GS_ROLE_CLIENT, "alongside");
    int fd1 = raw_connect(th.port);
    int fd2 = raw_connect(th.port);
    uint64_t t0 = gs_now_ns();
    raw_send(fd1, gib, sizeof gib);
    raw_send(fd2, text, sizeof text - 1);
    cr_assert(raw_wait_eof(&th, fd1, NULL, 0, NULL, 30000), "1 GiB header not dropped");
    cr_assert(raw_wait_eof(&th, fd2, NULL, 0, NULL, 30000), "plain text not dropped");
    cr_assert_lt(gs_now_ns() - t0, 30000ull * 1000000ull, "took %.3f s",
                 (double)(gs_now_ns() - t0) * 1e-9);
    close(fd1);
    close(fd2);
    th_run_for(&th, 20);
    cr_assert_eq(th_stats(&th).refused_total, 2);

    /* the client connected alongside works, and may send frames above the hello limit */
    gs_msg_t m;
    tp_expect(c, GS_MSG_WELCOME, &m);
    gs_msg_cleanup(&m);
    {
        tg_t g;
        static uint8_t big[GS_SCHED_HELLO_MAX_FRAME + 1024];
        uint64_t t;
        tg_init(&g, 1);
        g.layers[0].data = big;
        g.layers[0].len = sizeof big;
        t = tg_task(&g, 0, 0, NULL);
        tg_output(&g, t);
        cr_assert_gt(tg_submit_ok(c, &g, 0), 0);
    }
    send_info_req(c);
    tp_expect(c, GS_MSG_INFO, &m);
    gs_msg_cleanup(&m);
    cr_assert_eq(th_stats(&th).nclients, 1);
    th_fini(&th);
}

Test(scheduler_handshake, hello_limit_does_not_apply_to_a_configured_smaller_max_frame)
{
    /* max_frame below the hello limit stays the limit before and after the handshake */
    th_t th;
    gs_sched_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_MAX_FRAME;
    prm.max_frame = 2048;
    th_init(&th, &prm);
    check_serving(&th, "");
    tp_t *c = tp_client(&th, "small");
    tg_t g;
    static uint8_t big[4096];
    uint64_t t;
    tg_init(&g, 1);
    g.layers[0].data = big;
    g.layers[0].len = sizeof big;
    t = tg_task(&g, 0, 0, NULL);
    tg_output(&g, t);
    tg_submit(c, &g, 0, 1);
    cr_assert(tp_wait_closed(c, TH_TIMEOUT_MS), "a frame above max_frame did not close the client");
    th_fini(&th);
}
