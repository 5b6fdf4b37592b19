/* Faults with real processes: a worker SIGKILLed in the middle of a graph, gsched SIGKILLed under
 * a running client, garbage and wrong tokens on gsched's port, a rogue worker without the token. */
#include "cluster.h"
#include "reference.h"

#include "common/time.h"
#include "proto/handshake.h"

#include <gsched/gsched.h>

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static void arm(void)
{
    alarm(240);
}

static void down(void)
{
    tp_kill_all();
}

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

/* (normal(10, 1, (n, n)) + 1)[::2, ::2].sum() */
static gs_array_h seed_expr(int64_t n, int64_t chunk)
{
    int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
    gs_slice_t s[2];
    gs_array_h x, y, z, r;
    memset(s, 0, sizeof(s));
    s[0].step = s[1].step = 2;
    OK(gs_array_random_normal(0, 10, 1, 2, shape, chunks, &x));
    OK(gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &y));
    OK(gs_array_slice(y, 2, s, &z));
    OK(gs_array_reduce(GS_RED_SUM, z, NULL, &r));
    gs_array_release(x);
    gs_array_release(y);
    gs_array_release(z);
    return r;
}

static double seed_reference(int64_t n)
{
    long double s = 0;
    for (int64_t i = 0; i < n; i += 2)
        for (int64_t j = 0; j < n; j += 2) s += gs_random_normal_v3(0, (uint64_t)(i * n + j), 10, 1) + 1.0;
    return (double)s;
}

static atomic_ulong progress_done, progress_total;

static void on_progress(gs_future_h f, uint64_t done, uint64_t total, void *arg)
{
    (void)f;
    (void)arg;
    atomic_store(&progress_done, done);
    atomic_store(&progress_total, total);
}

/* Wait until the graph of @a f reports @a fraction of its tasks done, or @a fraction of
 * @a t_run (an undisturbed run's duration: progress comes at most every 100 ms) passed,
 * whichever comes first, or the graph finishes. Progress, not only the clock: a later run is
 * faster (warm connections) and a loaded machine stretches any run. */
static void wait_progress(gs_future_h f, double fraction, double t_run)
{
    double t0 = gs_now_s();
    for (;;) {
        uint64_t total = atomic_load(&progress_total), done = atomic_load(&progress_done);
        if (total > 0 && (double)done >= fraction * (double)total) return;
        if (gs_now_s() - t0 >= fraction * t_run || gs_future_wait(f, 0.0) != GS_ERR_TIMED_OUT) return;
        usleep(1000);
    }
}

Test(integration_faults, worker_killed_mid_graph_still_gives_the_right_answer, .init = arm,
     .fini = down)
{
    tcluster_t c;
    gs_client_params_t p;
    gs_client_h client;
    gs_future_h f;
    gs_array_h e;
    double v = NAN, v0 = NAN, want, t0, t_run;
    const int64_t n = 3000, chunk = 50;   /* 3600 chunks, unfused: ~15000 tasks */
    int killed_mid_graph = 0;

    cr_assert(tc_start(&c, 3, NULL, NULL), "cluster did not start");
    memset(&p, 0, sizeof(p));
    p.address = c.address;
    p.field_mask = GS_CLIENT_FIELD_PROGRESS | GS_CLIENT_FIELD_LOWER_FLAGS;
    p.progress_cb = on_progress;
    p.lower_flags = GS_LOWER_CULL;   /* no fusion: intermediates live on the workers */
    OK(gs_client_connect(&p, &client));
    e = seed_expr(n, chunk);
    want = seed_reference(n);

    /* an undisturbed run: its duration tells when "the middle" is */
    t0 = gs_now_s();
    OK(gs_client_compute_scalar(client, e, &v0));
    t_run = gs_now_s() - t0;
    cr_assert(ref_rel(v0, want) <= 1e-12, "%.17g vs %.17g", v0, want);

    for (int attempt = 0; attempt < 2 && !killed_mid_graph; attempt++) {
        atomic_store(&progress_done, 0);
        atomic_store(&progress_total, 0);
        OK(gs_client_submit(client, e, 0, &f));
        wait_progress(f, 0.25 + 0.15 * attempt, t_run);
        if (gs_future_wait(f, 0.0) == GS_ERR_TIMED_OUT) {
            cr_assert_eq(kill(c.workers[attempt], SIGKILL), 0);
            killed_mid_graph = gs_future_wait(f, 0.0) == GS_ERR_TIMED_OUT;
        }
        cr_assert_eq(gs_future_wait(f, 120.0), GS_OK, "graph failed after a worker died: %s",
                     gs_last_error());
        OK(gs_future_gather(f, &v, 1));
        gs_future_destroy(f);
        /* recomputed chunks are the same numbers, combined in the same tree */
        cr_assert_eq(v, v0, "%.17g after the kill, %.17g before", v, v0);
    }
    cr_assert(killed_mid_graph, "the graph (%.3f s) always finished before a worker could be "
              "killed", t_run);
    {
        gs_client_h k = tc_connect(&c, GS_LOWER_DEFAULT);
        cr_assert_not_null(k);
        cr_assert_eq(gs_client_nworkers(k), 2, "the killed worker is still registered");
        gs_client_destroy(k);
    }
    gs_array_release(e);
    gs_client_destroy(client);
}

Test(integration_faults, scheduler_killed_gives_an_error_not_a_hang, .init = arm, .fini = down)
{
    tcluster_t c;
    gs_client_h client;
    gs_future_h f;
    gs_array_h e;
    double t0;
    gs_status_t st;
    cr_assert(tc_start(&c, 2, NULL, NULL), "cluster did not start");
    client = tc_connect(&c, GS_LOWER_CULL);
    cr_assert_not_null(client, "%s", gs_last_error());
    e = seed_expr(2000, 40);
    OK(gs_client_submit(client, e, 0, &f));
    usleep(100000);
    cr_assert_eq(kill(c.sched, SIGKILL), 0);
    t0 = gs_now_s();
    st = gs_future_wait(f, 30.0);
    cr_assert(st == GS_ERR_SCHEDULER_LOST || st == GS_OK, "got %s: %s", gs_status_name(st),
              gs_last_error());
    if (st == GS_OK) {
        /* finished just before the kill; the next call must fail, not hang */
        double v;
        cr_assert_eq(gs_future_gather(f, &v, 1), GS_ERR_SCHEDULER_LOST);
    }
    cr_assert_lt(gs_now_s() - t0, 20.0, "noticing the lost scheduler took %.1f s", gs_now_s() - t0);
    cr_assert(strstr(gs_last_error(), c.address) != NULL, "%s", gs_last_error());
    {
        gs_future_h f2 = NULL;
        cr_assert_eq(gs_client_submit(client, e, 0, &f2), GS_ERR_SCHEDULER_LOST);
        cr_assert_eq(gs_client_nworkers(client), -1);
    }
    gs_future_destroy(f);
    gs_array_release(e);
    gs_client_destroy(client);
}

static int raw_connect(int port)
{
    struct sockaddr_in sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
    return fd;
}

/* 1 when the peer closes the connection within @a timeout_s (reading and dropping anything it
 * sends first, e.g. an ERROR frame). */
static int closed_by_peer(int fd, double timeout_s)
{
    double deadline = gs_now_s() + timeout_s;
    char buf[4096];
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        double left = deadline - gs_now_s();
        ssize_t n;
        if (left <= 0) return 0;
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) return 1;
        if (n < 0 && errno != EINTR) return 1;
    }
}

static void send_all(int fd, const void *p, size_t n)
{
    cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

Test(integration_faults, garbage_and_wrong_tokens_are_refused_and_gsched_keeps_serving,
     .init = arm, .fini = down)
{
    tcluster_t c;
    gs_client_h good, bad = NULL;
    gs_client_params_t p;
    gs_array_h e;
    double v = NAN;
    int port = 0, text_fd;
    double text_t0;
    char host[64];

    cr_assert(tc_start(&c, 2, "s3cret", NULL), "cluster did not start");
    cr_assert_eq(sscanf(c.address, "tcp://%63[^:]:%d", host, &port), 2);

    /* plain text, as a confused HTTP client would send: "GET " reads as a 542 MB frame
     * header, under the frame limit, so gsched can only drop it at its handshake timeout
     * (10 s); it stays open while everything below runs and must not disturb it */
    text_fd = raw_connect(port);
    text_t0 = gs_now_s();
    send_all(text_fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);

    /* a frame of random bytes (valid length, garbage payload) */
    {
        int fd = raw_connect(port);
        unsigned char frame[4 + 64];
        uint32_t len = 64;
        memcpy(frame, &len, 4);
        for (int i = 0; i < 64; i++) frame[4 + i] = (unsigned char)(i * 37 + 11);
        send_all(fd, frame, sizeof(frame));
        cr_assert(closed_by_peer(fd, 5.0), "gsched kept a connection that sent garbage");
        close(fd);
    }
    /* a header announcing 4 GiB */
    {
        int fd = raw_connect(port);
        unsigned char hdr[8] = {0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4};
        send_all(fd, hdr, sizeof(hdr));
        cr_assert(closed_by_peer(fd, 5.0), "gsched kept a connection with an oversized frame");
        close(fd);
    }
    /* wrong and missing tokens */
    memset(&p, 0, sizeof(p));
    p.address = c.address;
    p.field_mask = GS_CLIENT_FIELD_TOKEN;
    p.token = "wrong";
    cr_assert_eq(gs_client_connect(&p, &bad), GS_ERR_AUTH, "%s", gs_last_error());
    cr_assert_null(bad);
    p.token = "";
    cr_assert_eq(gs_client_connect(&p, &bad), GS_ERR_AUTH, "%s", gs_last_error());
    cr_assert_null(bad);

    /* gsched still serves a real client, and its workers */
    p.token = "s3cret";
    OK(gs_client_connect(&p, &good));
    cr_assert_eq(gs_client_nworkers(good), 2);
    e = seed_expr(200, 64);
    OK(gs_client_compute_scalar(good, e, &v));
    cr_assert(ref_rel(v, seed_reference(200)) <= 1e-12, "%.17g", v);
    gs_array_release(e);
    gs_client_destroy(good);

    cr_assert(closed_by_peer(text_fd, 15.0 - (gs_now_s() - text_t0)),
              "gsched kept a connection that sent text and no handshake");
    close(text_fd);
}

/* Read one frame from @a fd (blocking, @a timeout_s) and decode it into @a m; 0 at EOF. */
static int recv_frame(int fd, gs_msg_t *m, double timeout_s)
{
    double deadline = gs_now_s() + timeout_s;
    uint8_t hdr[4], *payload;
    size_t got = 0, want = 4;
    uint8_t *dst = hdr;
    uint32_t len = 0;
    for (int phase = 0; phase < 2; phase++) {
        while (got < want) {
            struct pollfd p = {fd, POLLIN, 0};
            ssize_t n;
            cr_assert_lt(gs_now_s(), deadline, "gsched did not answer");
            if (poll(&p, 1, 20) <= 0) continue;
            n = recv(fd, dst + got, want - got, 0);
            if (n <= 0) {
                if (phase == 1) free(dst);
                return 0;
            }
            got += (size_t)n;
        }
        if (phase == 0) {
            len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
            cr_assert_leq(len, 1u << 20);
            dst = malloc(len ? len : 1);
            got = 0;
            want = len;
        }
    }
    payload = dst;
    cr_assert_eq(gs_msg_decode(payload, len, m), GS_OK);
    free(payload);
    return 1;
}

static void send_msg(int fd, const gs_msg_t *m)
{
    gs_buf_t b;
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(m, &b), GS_OK);
    send_all(fd, b.data, b.len);
    gs_buf_cleanup(&b);
}

/* Like send_msg, for messages pipelined behind one gsched refuses: gsched may already have
 * closed the connection (EPIPE / ECONNRESET), which is the point. */
static void send_msg_pipelined(int fd, const gs_msg_t *m)
{
    gs_buf_t b;
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(m, &b), GS_OK);
    (void)send(fd, b.data, b.len, MSG_NOSIGNAL);
    gs_buf_cleanup(&b);
}

/* The reproduction: a raw-socket peer that registered as a worker and answered every
 * task with 42 changed a seed result. Now a peer without the token cannot register (its proof
 * is wrong whatever it sends, and a version 1 HELLO with the token in clear is refused), so it
 * is assigned nothing; the result is the reference and gsched counts one worker. */
Test(integration_faults, a_rogue_worker_without_the_token_cannot_register_or_change_a_result,
     .init = arm, .fini = down)
{
    tcluster_t c;
    gs_client_h good;
    gs_array_h e;
    gs_msg_t m, out;
    gs_hs_peer_t hs;
    double v = NAN;
    int port = 0, fds[3];
    char host[64];
    static const char *const guesses[] = {"", "wrong"};

    cr_assert(tc_start(&c, 1, "s3cret", NULL), "cluster did not start");
    cr_assert_eq(sscanf(c.address, "tcp://%63[^:]:%d", host, &port), 2);
    /* a rogue that guesses the token ("" then "wrong"), pipelining its registration and a
     * result of 42 behind its answer to the challenge */
    for (int i = 0; i < 2; i++) {
        static const uint64_t one = 1, zero = 0;
        static const int32_t ok = GS_OK;
        fds[i] = raw_connect(port);
        OK(gs_hs_peer_hello(&hs, guesses[i], GS_ROLE_WORKER, "rogue", &out));
        send_msg(fds[i], &out);
        cr_assert(recv_frame(fds[i], &m, 10.0));
        cr_assert_eq(m.type, GS_MSG_CHALLENGE);
        cr_assert_eq(gs_hs_peer_answer(&hs, &m, &out), GS_ERR_AUTH, "the rogue's guess proved the token");
        memcpy(hs.nonce_sched, m.u.challenge.nonce.data, GS_AUTH_NONCE_BYTES);
        gs_msg_cleanup(&m);
        OK(gs_auth_handshake_mac(guesses[i], GS_AUTH_BY_PEER, GS_PROTO_VERSION, GS_ROLE_WORKER, "rogue", 5,
                                 hs.nonce, hs.nonce_sched, hs.proof));
        out = (gs_msg_t){.type = GS_MSG_AUTH, .u.auth.proof = {hs.proof, GS_AUTH_MAC_BYTES}};
        send_msg(fds[i], &out);
        out = (gs_msg_t){.type = GS_MSG_WORKER_REGISTER,
                         .u.worker_register = {.name = {(const uint8_t *)"rogue", 5}, .nthreads = 64}};
        send_msg_pipelined(fds[i], &out);
        out = (gs_msg_t){.type = GS_MSG_TASK_DONE,
                         .u.task_done = {.n = 1, .graph_id = &one, .task_id = &zero, .status = &ok,
                                         .nbytes = &one, .run_ns = &one, .fetch_ns = &one,
                                         .start_ns = &one, .end_ns = &one}};
        send_msg_pipelined(fds[i], &out);
        /* the refusal, unless the close (with the rogue's pipelined bytes unread) reset the
         * connection before the ERROR frame was read: either way nothing else comes back */
        if (recv_frame(fds[i], &m, 10.0)) {
            cr_assert_eq(m.type, GS_MSG_ERROR, "the rogue got %s", gs_msg_type_name(m.type));
            cr_assert_eq(m.u.error.status, GS_ERR_AUTH);
            gs_msg_cleanup(&m);
            cr_assert(closed_by_peer(fds[i], 10.0), "gsched kept the rogue's connection");
        }
        close(fds[i]);
    }
    /* the old way in: a version 1 HELLO with an empty token */
    fds[2] = raw_connect(port);
    out = (gs_msg_t){.type = GS_MSG_HELLO, .u.hello = {.version = 1, .role = GS_ROLE_WORKER,
                                                        .name = {(const uint8_t *)"rogue", 5}}};
    send_msg(fds[2], &out);
    cr_assert(recv_frame(fds[2], &m, 10.0));
    cr_assert_eq(m.type, GS_MSG_ERROR);
    cr_assert_eq(m.u.error.status, GS_ERR_VERSION);
    gs_msg_cleanup(&m);
    close(fds[2]);

    good = tc_connect(&c, GS_LOWER_DEFAULT);
    cr_assert_not_null(good, "%s", gs_last_error());
    cr_assert_eq(gs_client_nworkers(good), 1, "the rogue counts as a worker");
    e = seed_expr(200, 64);
    OK(gs_client_compute_scalar(good, e, &v));
    cr_assert(v != 42.0 && ref_rel(v, seed_reference(200)) <= 1e-12, "%.17g", v);
    gs_array_release(e);
    gs_client_destroy(good);
}

/* Clients heartbeat: an idle client outlives gsched's client idle timeout, while an
 * authenticated raw connection that then says nothing is closed. The raw connection is made
 * after the client, so once it is closed the client has been idle at least as long. */
Test(integration_faults, client_heartbeats_keep_an_idle_client_while_a_silent_one_is_closed,
     .init = arm, .fini = down)
{
    static const char *const args[] = {"--client-idle-timeout", "400ms", "--heartbeat-interval", "50ms", NULL};
    tcluster_t c;
    gs_hs_peer_t hs;
    gs_msg_t m, out;
    gs_client_h idle;
    int port = 0, fd;
    char host[64];

    cr_assert(tc_start(&c, 1, "s3cret", args), "cluster did not start");
    cr_assert_eq(sscanf(c.address, "tcp://%63[^:]:%d", host, &port), 2);
    idle = tc_connect(&c, GS_LOWER_DEFAULT);
    cr_assert_not_null(idle, "%s", gs_last_error());
    fd = raw_connect(port);
    OK(gs_hs_peer_hello(&hs, "s3cret", GS_ROLE_CLIENT, "silent", &out));
    send_msg(fd, &out);
    cr_assert(recv_frame(fd, &m, 10.0));
    OK(gs_hs_peer_answer(&hs, &m, &out));
    gs_msg_cleanup(&m);
    send_msg(fd, &out);
    cr_assert(recv_frame(fd, &m, 10.0));
    cr_assert_eq(m.type, GS_MSG_WELCOME);
    gs_msg_cleanup(&m);
    /* silence: closed with ERROR(GS_ERR_TIMED_OUT) */
    cr_assert(recv_frame(fd, &m, 30.0), "the silent connection was not closed");
    cr_assert_eq(m.type, GS_MSG_ERROR);
    cr_assert_eq(m.u.error.status, GS_ERR_TIMED_OUT);
    gs_msg_cleanup(&m);
    cr_assert(closed_by_peer(fd, 10.0));
    close(fd);
    /* the idle client is still connected and served */
    cr_assert_eq(gs_client_nworkers(idle), 1, "%s", gs_last_error());
    gs_array_h e = seed_expr(64, 32);
    double v = NAN;
    OK(gs_client_compute_scalar(idle, e, &v));
    cr_assert(ref_rel(v, seed_reference(64)) <= 1e-12, "%.17g", v);
    gs_array_release(e);
    gs_client_destroy(idle);
}
