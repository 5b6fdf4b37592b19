/* Resource bounds of gsched: connection limits (total, per address), the client idle timeout
 * and the budget of memory reserved for frames being received. Raw sockets play the attacker;
 * every wait is on the scheduler's loop until a counter says the event happened. */
#include "harness.h"

#include "common/time.h"
#include "proto/handshake.h"
#include "proto/handshake_fd.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define NIDLE 2000
#define NSLOW 200

/* Start a non-blocking connect to the scheduler (completes when the loop accepts). */
static int bound_connect(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        cr_assert_eq(errno, EINPROGRESS, "connect: %s", strerror(errno));
    }
    return fd;
}

/* Connections the scheduler accepted so far (open, or closed by a bound). */
static uint64_t bound_accepted(th_t *th)
{
    gs_sched_stats_t st = th_stats(th);
    return st.nconnections + st.conns_evicted_total + st.conns_refused_total;
}

/* Run the loop until @a done(th, arg) holds, at most TH_TIMEOUT_MS x 4. */
static void bound_run_until(th_t *th, int (*done)(th_t *, uint64_t), uint64_t arg)
{
    uint64_t end = gs_now_ns() + (uint64_t)TH_TIMEOUT_MS * 4 * 1000000ull;
    while (!done(th, arg)) {
        cr_assert_lt(gs_now_ns(), end, "timed out waiting for the scheduler");
        uv_run(&th->loop, UV_RUN_ONCE);
    }
}

static int bound_all_accepted(th_t *th, uint64_t n)
{
    return bound_accepted(th) >= n;
}

static int bound_nconns_is(th_t *th, uint64_t n)
{
    return th_stats(th).nconnections == n;
}

static int bound_nconns_at_most(th_t *th, uint64_t n)
{
    return th_stats(th).nconnections <= n;
}

static void bound_raise_fd_limit(rlim_t need)
{
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < need) {
        cr_assert(rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need, "open file hard limit below %lu",
                  (unsigned long)need);
        rl.rlim_cur = need;
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
}

/* @a c is served: INFO_REQ is answered. */
static void bound_expect_served(tp_t *c)
{
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_INFO_REQ;
    tp_send(c, &m);
    tp_expect(c, GS_MSG_INFO, &m);
    gs_msg_cleanup(&m);
}

/* A client that completes its handshake, then announces a 1 GiB frame and sends its first bytes,
 * never the rest. */
static void bound_send_big(int fd)
{
    static const char hdr[] = "\x00\x00\x00\x40" "abcd";
    cr_assert_eq(send(fd, hdr, 8, MSG_NOSIGNAL), 8);
}

static void bound_send_hello(th_t *th, int fd)
{
    th_raw_handshake(th, fd, "", GS_ROLE_CLIENT, "slow");
    bound_send_big(fd);
}

Test(scheduler_bounds, idle_connections_do_not_lock_out_a_client, .timeout = 60)
{
    static int fds[NIDLE];
    gs_sched_stats_t st;
    th_t th;

    bound_raise_fd_limit(2 * NIDLE + 256);
    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_MAX_CONNECTIONS,
                                      .max_connections = 256,
                                      .max_connections_per_addr = 4096});
    for (int i = 0; i < NIDLE; i++) {
        fds[i] = bound_connect(th.port);
        uv_run(&th.loop, UV_RUN_NOWAIT);
    }
    bound_run_until(&th, bound_all_accepted, NIDLE);
    bound_run_until(&th, bound_nconns_at_most, 256);
    st = th_stats(&th);
    cr_assert_leq(st.nconnections, 256, "%u connections held", st.nconnections);
    cr_assert_geq(st.conns_evicted_total, NIDLE - 256, "%lu evicted", (unsigned long)st.conns_evicted_total);

    /* a real client gets in (the oldest idle connection makes room) and is served */
    tp_t *c = tp_client(&th, "real");
    bound_expect_served(c);
    cr_assert_eq(th_stats(&th).nclients, 1);
    for (int i = 0; i < NIDLE; i++) close(fds[i]);
    bound_run_until(&th, bound_nconns_is, 1);
    th_fini(&th);
}

Test(scheduler_bounds, per_address_limit_evicts_unauthenticated_then_refuses)
{
    gs_msg_t m;
    th_t th;

    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_MAX_CONNECTIONS,
                                      .max_connections = 100,
                                      .max_connections_per_addr = 3});
    tp_client(&th, "a");
    tp_client(&th, "b");
    int idle = bound_connect(th.port);
    bound_run_until(&th, bound_all_accepted, 3);

    tp_t *c = tp_client(&th, "c");   /* the idle connection makes room */
    cr_assert_eq(th_stats(&th).conns_evicted_total, 1);

    tp_t *d = tp_connect(&th, GS_PROTO_VERSION, "", GS_ROLE_CLIENT, "d");
    tp_expect(d, GS_MSG_ERROR, &m);
    cr_assert_eq(m.u.error.status, GS_ERR_BUSY);
    gs_msg_cleanup(&m);
    cr_assert(tp_wait_closed(d, TH_TIMEOUT_MS));
    cr_assert_eq(th_stats(&th).conns_refused_total, 1);
    cr_assert(!c->closed);
    close(idle);
    th_fini(&th);
}

static int bound_waits_reach(th_t *th, uint64_t n)
{
    return th_stats(th).frame_waits_total >= n;
}

static int bound_frames_released(th_t *th, uint64_t n)
{
    gs_sched_stats_t st = th_stats(th);
    return st.frame_bytes_reserved == 0 && st.nconnections == n;
}

Test(scheduler_bounds, slow_large_frames_hold_no_more_than_the_budget, .timeout = 60)
{
    static int fds[NSLOW];
    const uint64_t budget = (1ull << 30) + (1ull << 20);   /* room for one 1 GiB frame */
    gs_sched_stats_t st;
    th_t th;

    bound_raise_fd_limit(2 * NSLOW + 256);
    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_FRAME_MEMORY, .frame_memory = budget});
    for (int i = 0; i < NSLOW; i++) {
        fds[i] = bound_connect(th.port);
        uv_run(&th.loop, UV_RUN_NOWAIT);
    }
    bound_run_until(&th, bound_all_accepted, NSLOW);
    for (int i = 0; i < NSLOW; i++) th_raw_handshake(&th, fds[i], "", GS_ROLE_CLIENT, "slow");
    for (int i = 0; i < NSLOW; i++) bound_send_big(fds[i]);
    bound_run_until(&th, bound_waits_reach, NSLOW - 1);
    st = th_stats(&th);
    cr_assert_eq(st.frame_bytes_reserved, 1ull << 30);
    cr_assert_leq(st.frame_bytes_peak, budget);
    cr_assert_eq(st.nclients, NSLOW);

    /* the scheduler still serves a real client (small frames are not held back) */
    tp_t *c = tp_client(&th, "real");
    bound_expect_served(c);

    for (int i = 0; i < NSLOW; i++) close(fds[i]);
    bound_run_until(&th, bound_frames_released, 1);
    st = th_stats(&th);
    cr_assert_leq(st.frame_bytes_peak, budget);
    th_fini(&th);
}

Test(scheduler_bounds, a_frame_larger_than_the_budget_closes_its_connection)
{
    th_t th;

    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_FRAME_MEMORY, .frame_memory = 1u << 20});
    int fd = bound_connect(th.port);
    bound_run_until(&th, bound_all_accepted, 1);
    bound_send_hello(&th, fd);   /* announces 1 GiB */
    bound_run_until(&th, bound_nconns_is, 0);
    cr_assert_eq(th_stats(&th).frames_refused_total, 1);
    cr_assert_eq(th_stats(&th).frame_bytes_peak, 0);
    close(fd);
    th_fini(&th);
}

static int bound_stalled(th_t *th, uint64_t n)
{
    return th_stats(th).frames_stalled_total >= n;
}

Test(scheduler_bounds, a_stalled_frame_gives_its_memory_to_a_waiting_one)
{
    int fds[2];
    th_t th;

    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_FRAME_MEMORY |
                                                    GS_SCHED_FIELD_HANDSHAKE_TIMEOUT_MS,
                                      .frame_memory = 1u << 30,
                                      .handshake_timeout_ms = 1000});
    /* each handshaken as soon as accepted (the timeout applies to the handshake too), then both
     * announce 1 GiB: the first gets the memory and stalls, the second waits */
    for (int i = 0; i < 2; i++) {
        fds[i] = bound_connect(th.port);
        bound_run_until(&th, bound_all_accepted, (uint64_t)i + 1);
        th_raw_handshake(&th, fds[i], "", GS_ROLE_CLIENT, "slow");
    }
    for (int i = 0; i < 2; i++) bound_send_big(fds[i]);
    bound_run_until(&th, bound_waits_reach, 1);
    bound_run_until(&th, bound_stalled, 1);   /* the first holder sent nothing more */
    bound_run_until(&th, bound_nconns_is, 1);
    gs_sched_stats_t st = th_stats(&th);
    cr_assert_eq(st.frame_bytes_reserved, 1u << 30, "the waiting frame got the memory");
    cr_assert_eq(st.frames_stalled_total, 1);
    for (int i = 0; i < 2; i++) close(fds[i]);
    th_fini(&th);
}

static int bound_idle_closed(th_t *th, uint64_t n)
{
    return th_stats(th).idle_closed_total >= n;
}

Test(scheduler_bounds, closes_silent_clients_without_graphs_only)
{
    tg_t g;
    th_t th;

    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_CLIENT_IDLE_TIMEOUT_MS,
                                      .client_idle_timeout_ms = 200});
    tp_t *busy = tp_client(&th, "busy");
    tg_init(&g, 1);
    tg_output(&g, tg_task(&g, 0, 0, NULL));
    tg_submit_ok(busy, &g, 0);   /* no worker: the graph stays in flight */
    tp_t *idle = tp_client(&th, "idle");   /* connected later, so closed later than busy's check */

    bound_run_until(&th, bound_idle_closed, 1);
    cr_assert(tp_wait_closed(idle, TH_TIMEOUT_MS));
    cr_assert(!busy->closed);
    cr_assert_eq(th_stats(&th).idle_closed_total, 1);
    th_fini(&th);
}

/* Wait (without running the loop: gsched is "busy") until the kernel completed @a fd's connect. */
static void bound_wait_connected(int fd)
{
    struct pollfd p = {fd, POLLOUT, 0};
    cr_assert_eq(poll(&p, 1, TH_TIMEOUT_MS), 1, "connect did not complete");
}

static int bound_readable(th_t *th, uint64_t fd)
{
    struct pollfd p = {(int)fd, POLLIN, 0};
    (void)th;
    return poll(&p, 1, 0) == 1;
}

static void bound_send_msg(int fd, const gs_msg_t *m)
{
    cr_assert_eq(gs_proto_fd_send_msg(fd, m, TH_TIMEOUT_MS / 1000.0), GS_OK, "%s", gs_last_error());
}

/* Run the loop until @a fd has bytes, then read one message (the client was not closed). */
static void bound_recv_msg(th_t *th, int fd, gs_msg_t *m)
{
    bound_run_until(th, bound_readable, (uint64_t)fd);
    cr_assert_eq(gs_proto_fd_recv_msg(fd, 65536, TH_TIMEOUT_MS / 1000.0, m), GS_OK,
                 "the client was closed before its handshake: %s", gs_last_error());
}

/* Connect @a n sockets to @a port into @a fds, each connected by the kernel before the next (the
 * loop does not run: they wait in the backlog). */
static void bound_connect_burst(int port, int *fds, int n)
{
    for (int i = 0; i < n; i++) {
        fds[i] = bound_connect(port);
        bound_wait_connected(fds[i]);
    }
}

/* The client @a cfd, whose HELLO (@a hs) was sent, is challenged (not closed), answers, is
 * welcomed, and is then gsched's only client. */
static void bound_finish_handshake(th_t *th, int cfd, gs_hs_peer_t *hs)
{
    gs_msg_t m, out;
    bound_recv_msg(th, cfd, &m);
    cr_assert_eq(m.type, GS_MSG_CHALLENGE, "answered %s", gs_msg_type_name(m.type));
    cr_assert_eq(gs_hs_peer_answer(hs, &m, &out), GS_OK);
    gs_msg_cleanup(&m);
    bound_send_msg(cfd, &out);
    bound_recv_msg(th, cfd, &m);
    cr_assert_eq(m.type, GS_MSG_WELCOME, "answered %s", gs_msg_type_name(m.type));
    gs_msg_cleanup(&m);
    cr_assert_eq(th_stats(th).nclients, 1);
}

/* A client's HELLO that waits unread while a burst of connections from its address arrives
 * (the loop was busy) is not evicted as "not handshaken": idle ones make room. */
Test(scheduler_bounds, a_connect_burst_does_not_evict_a_client_whose_hello_waits)
{
    enum { LIMIT = 4, BURST = 8 };
    int idle[LIMIT + BURST], cfd, n = 0;
    gs_hs_peer_t hs;
    gs_msg_t out;
    th_t th;

    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_MAX_CONNECTIONS,
                                      .max_connections = 100,
                                      .max_connections_per_addr = LIMIT});
    for (int i = 0; i < LIMIT; i++) idle[n++] = bound_connect(th.port);
    bound_run_until(&th, bound_all_accepted, LIMIT);

    /* the loop does not run: the client connects and sends HELLO, then the burst connects */
    cfd = bound_connect(th.port);
    bound_wait_connected(cfd);
    cr_assert_eq(gs_hs_peer_hello(&hs, "", GS_ROLE_CLIENT, "real", &out), GS_OK);
    bound_send_msg(cfd, &out);
    bound_connect_burst(th.port, idle + n, BURST);
    n += BURST;

    /* the client is challenged, not closed, and completes its handshake */
    bound_run_until(&th, bound_all_accepted, LIMIT + 1 + BURST);
    bound_finish_handshake(&th, cfd, &hs);
    cr_assert_geq(th_stats(&th).conns_evicted_total, BURST - 1);
    close(cfd);
    for (int i = 0; i < n; i++) close(idle[i]);
    th_fini(&th);
}

/* Receive memory is counted and let go: a client's 1 MiB frame is charged while it arrives
 * (conn_read_peak sees it), and once handed out the connection keeps at most
 * GS_CONN_BUDGET_KEPT; nothing stays charged. */
Test(scheduler_bounds, a_large_frame_leaves_no_receive_memory_behind)
{
    static uint8_t junk[1u << 20];
    gs_bytes_t layer = {.data = junk, .len = sizeof junk};
    gs_sched_stats_t st;
    gs_msg_t m;
    th_t th;

    th_init(&th, NULL);
    tp_t *c = tp_client(&th, "big");
    memset(junk, 0x5a, sizeof junk);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_GRAPH_SUBMIT;
    m.u.graph_submit.client_ref = 7;
    m.u.graph_submit.nlayers = 1;
    m.u.graph_submit.layers = &layer;   /* no tasks: an empty graph; the connection stays */
    tp_send(c, &m);
    bound_expect_served(c);             /* answered in order: the frame was handed out */
    cr_assert(!tp_none(c, GS_MSG_GRAPH_ACCEPTED, 0) || !tp_none(c, GS_MSG_ERROR, 0), "the submission was answered");
    st = th_stats(&th);
    cr_assert_geq(st.conn_read_peak, sizeof junk, "the frame was counted while it arrived");
    cr_assert_leq(st.conn_read_bytes, (uint64_t)st.nconnections * GS_CONN_BUDGET_KEPT,
                  "%llu bytes still held by %u connections", (unsigned long long)st.conn_read_bytes,
                  st.nconnections);
    cr_assert_eq(st.frame_bytes_reserved, 0);
    cr_assert_geq(st.frame_bytes_peak, sizeof junk);
    cr_assert_gt(st.heap_used_bytes + st.rss_bytes, 0, "memory counters are filled on this platform");
    th_fini(&th);
}

static int bound_accept_errors_reach(th_t *th, uint64_t n)
{
    return th_stats(th).accept_errors_total >= n;
}

/* Run the loop until the peer closed @a fd (EOF or reset), at most TH_TIMEOUT_MS. */
static void bound_expect_closed_by_gsched(th_t *th, int fd)
{
    uint64_t end = gs_now_ns() + (uint64_t)TH_TIMEOUT_MS * 1000000ull;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        char b;
        if (poll(&pfd, 1, 0) == 1) {
            ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT);
            cr_assert(n == 0 || (n < 0 && errno == ECONNRESET), "the refused connection got data or %s",
                      n < 0 ? strerror(errno) : "a byte");
            return;
        }
        cr_assert_lt(gs_now_ns(), end, "gsched did not close the connection it could not take");
        uv_run(&th->loop, UV_RUN_ONCE);
    }
}

/* libuv stops watching a listening socket whose connection callback returns without accepting:
 * connections gsched cannot take (no memory for them) are accepted and closed, and the next
 * connection still gets in. Two connections wait together, so that the second is refused while
 * the first one's refusal is still closing. */
Test(scheduler_bounds, a_connection_without_memory_is_refused_and_the_next_one_gets_in, .timeout = 180)
{
    int fds[2];
    th_t th;

    th_init(&th, NULL);
    for (int i = 0; i < 2; i++) {
        struct pollfd pfd;
        fds[i] = bound_connect(th.port);
        pfd = (struct pollfd){.fd = fds[i], .events = POLLOUT};   /* in the accept queue */
        cr_assert_eq(poll(&pfd, 1, TH_TIMEOUT_MS), 1, "the kernel did not complete the connection");
    }
    gs_alloc_fail_after(0);   /* every allocation fails until both connections were tried */
    bound_run_until(&th, bound_accept_errors_reach, 2);
    gs_alloc_fail_after(-1);
    cr_assert_eq(th_stats(&th).nconnections, 0);
    for (int i = 0; i < 2; i++) {
        bound_expect_closed_by_gsched(&th, fds[i]);
        close(fds[i]);
    }
    tp_t *c = tp_client(&th, "after");
    bound_expect_served(c);
    cr_assert_eq(th_stats(&th).accept_errors_total, 2);
    th_fini(&th);
}

/* One loop iteration accepts at most GS__ACCEPTS_PER_ROUND (64) connections of a burst, reads
 * the sockets that are ready meanwhile (an accepted client's HELLO is answered in that
 * iteration), and the following iterations accept the rest: a connect storm cannot hold the
 * loop in accepting while handshakes wait unread (sockfuzz saw 15-43 s iterations). */
Test(scheduler_bounds, a_connect_burst_is_accepted_over_iterations_while_a_hello_is_answered, .timeout = 120)
{
    enum { BURST = 300 };
    static int fds[BURST];
    gs_hs_peer_t hs;
    gs_msg_t out;
    struct pollfd pfd;
    int cfd;
    th_t th;

    bound_raise_fd_limit(2 * BURST + 256);
    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_MAX_CONNECTIONS,
                                      .max_connections = 100,
                                      .max_connections_per_addr = 4096});
    cfd = bound_connect(th.port);
    bound_wait_connected(cfd);
    bound_run_until(&th, bound_all_accepted, 1);
    /* the loop does not run: the client's HELLO and the whole burst wait */
    cr_assert_eq(gs_hs_peer_hello(&hs, "", GS_ROLE_CLIENT, "real", &out), GS_OK);
    bound_send_msg(cfd, &out);
    bound_connect_burst(th.port, fds, BURST);

    uv_run(&th.loop, UV_RUN_ONCE);
    cr_assert_leq(bound_accepted(&th), 1 + 64, "%lu connections accepted in one iteration",
                  (unsigned long)bound_accepted(&th));
    cr_assert_geq(th_stats(&th).accepts_deferred_total, 1);
    pfd = (struct pollfd){.fd = cfd, .events = POLLIN};
    cr_assert_eq(poll(&pfd, 1, 0), 1, "the client's HELLO was not answered in that iteration");

    /* the rest of the burst is accepted (the connection limit evicts idle ones, not the client) */
    bound_run_until(&th, bound_all_accepted, 1 + BURST);
    bound_finish_handshake(&th, cfd, &hs);
    close(cfd);
    for (int i = 0; i < BURST; i++) close(fds[i]);
    th_fini(&th);
}

/* Past the per-address limit, a connection whose peer has already gone (its end of stream not
 * read yet) is closed to make room rather than an older one that is merely young and silent (a
 * client whose HELLO is on its way): all three wait in the backlog and are accepted in one
 * iteration, before the loop reads the gone peer's end of stream. */
Test(scheduler_bounds, eviction_takes_a_gone_peer_before_a_young_silent_one)
{
    int young, gone, fresh;
    struct pollfd pfd;
    th_t th;

    th_init(&th, &(gs_sched_params_t){.field_mask = GS_SCHED_FIELD_MAX_CONNECTIONS,
                                      .max_connections = 100,
                                      .max_connections_per_addr = 2});
    young = bound_connect(th.port);
    bound_wait_connected(young);
    gone = bound_connect(th.port);
    bound_wait_connected(gone);
    close(gone);
    fresh = bound_connect(th.port);
    bound_wait_connected(fresh);

    bound_run_until(&th, bound_all_accepted, 3);
    cr_assert_eq(th_stats(&th).conns_evicted_total, 1);
    cr_assert_eq(th_stats(&th).conns_refused_total, 0);
    bound_run_until(&th, bound_nconns_is, 2);
    pfd = (struct pollfd){.fd = young, .events = POLLIN};
    cr_assert_eq(poll(&pfd, 1, 0), 0, "the young connection was closed");
    close(young);
    close(fresh);
    th_fini(&th);
}
