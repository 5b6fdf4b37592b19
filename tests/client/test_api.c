/* The client API's edges, without any cluster: argument errors, refused and silent servers. */
#include "fake_sched.h"

#include "common/time.h"

#include <gsched/gsched.h>

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Every test process gets a deadline: SIGALRM kills a hung test (Criterion reports it as a
 * crash). Criterion's own .timeout leaks a watchdog record in the runner under ASan with -j2. */
static void arm_timeout(void)
{
    alarm(60);
}

static gs_client_params_t params_for(const char *address)
{
    gs_client_params_t p;
    memset(&p, 0, sizeof(p));
    p.address = address;
    return p;
}

#define ASSERT_ERR(call, want, needle)                                                       \
    do {                                                                                     \
        gs_status_t st_ = (call);                                                            \
        cr_assert_eq(st_, (want), "%s gave %s, expected %s (%s)", #call, gs_status_name(st_), \
                     gs_status_name(want), gs_last_error());                                 \
        cr_assert(strstr(gs_last_error(), (needle)) != NULL,                                 \
                  "message '%s' does not mention '%s'", gs_last_error(), (needle));          \
    } while (0)

Test(client_api, connect_rejects_null_arguments, .init = arm_timeout)
{
    gs_client_h c = NULL;
    gs_client_params_t p = params_for("tcp://127.0.0.1:1");
    ASSERT_ERR(gs_client_connect(NULL, &c), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_client_connect(&p, NULL), GS_ERR_INVALID_PARAM, "NULL");
    cr_assert_null(c);
}

Test(client_api, connect_rejects_missing_or_malformed_address, .init = arm_timeout)
{
    gs_client_h c = NULL;
    gs_client_params_t p = params_for(NULL);
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM, "address");
    p.address = "";
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM, "address");
    p.address = "udp://127.0.0.1:80";
    cr_assert_eq(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM);
    cr_assert(strlen(gs_last_error()) > 0);
    p.address = "tcp://127.0.0.1";
    cr_assert_eq(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM);
    p.address = "tcp://127.0.0.1:99999";
    cr_assert_eq(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM);
    cr_assert_null(c);
}

Test(client_api, connect_rejects_bad_optional_fields, .init = arm_timeout)
{
    gs_client_h c = NULL;
    gs_client_params_t p = params_for("local");
    p.field_mask = 0x80000000u;
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM, "field_mask");
    p.field_mask = GS_CLIENT_FIELD_TIMEOUT;
    p.timeout_s = 0;
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM, "timeout");
    p.field_mask = GS_CLIENT_FIELD_LOCAL_NWORKERS;
    p.local_nworkers = 0;
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM, "local_nworkers");
    p.field_mask = GS_CLIENT_FIELD_LOCAL_BACKEND;
    p.local_backend = "tpu";
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM, "tpu");
    p.field_mask = GS_CLIENT_FIELD_LOWER_FLAGS;
    p.lower_flags = 0x100;
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM, "lower flags");
    p.field_mask = GS_CLIENT_FIELD_PROGRESS;
    p.progress_cb = NULL;
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM, "progress");
    cr_assert_null(c);
}

Test(client_api, field_mask_error_names_only_the_unknown_bits, .init = arm_timeout)
{
    gs_client_h c = NULL;
    gs_client_params_t p = params_for("tcp://127.0.0.1:1");
    p.field_mask = GS_CLIENT_FIELD_TOKEN | GS_CLIENT_FIELD_TIMEOUT | 0x100u | 0x80000000u;
    p.token = "t";
    p.timeout_s = 1.0;
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM,
               "gs_client_connect: unknown field_mask bits 0x80000100");
    cr_assert(strstr(gs_last_error(), "0x80000103") == NULL, "message '%s' names known bits",
              gs_last_error());
    p.field_mask = GS_CLIENT_FIELD_LOCAL_MEMORY << 1;   /* the first bit after the known ones */
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM, "unknown field_mask bits 0x100");
    cr_assert_null(c);
}

Test(client_api, local_without_launcher_names_what_is_missing, .init = arm_timeout)
{
    gs_client_h c = NULL;
    gs_client_params_t p = params_for("local");
    /* an empty search path: nothing can be found */
    setenv("GS_BIN_DIR", "/nonexistent-gsched-dir", 1);
    setenv("PATH", "/nonexistent-gsched-path", 1);
    p.field_mask = GS_CLIENT_FIELD_BIN_DIR;
    p.bin_dir = "/nonexistent-bin-dir";
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_NOT_FOUND, "gs-local-cluster");
    cr_assert_null(c);
}

Test(client_api, calls_reject_null_handles, .init = arm_timeout)
{
    gs_future_h f = NULL;
    gs_compute_stats_t st;
    double v;
    ASSERT_ERR(gs_client_submit(NULL, NULL, 0, &f), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_future_wait(NULL, 1.0), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_future_gather(NULL, &v, 1), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_future_cancel(NULL), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_future_stats(NULL, &st), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_client_compute_scalar(NULL, NULL, &v), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_client_compute(NULL, NULL, &v, 1), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_client_persist(NULL, NULL), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_client_unpersist(NULL, NULL), GS_ERR_INVALID_PARAM, "NULL");
    ASSERT_ERR(gs_client_wait_for_workers(NULL, 1, 1.0), GS_ERR_INVALID_PARAM, "NULL");
    cr_assert_eq(gs_client_nworkers(NULL), -1);
    cr_assert_str_eq(gs_client_address(NULL), "");
    gs_client_destroy(NULL);
    gs_future_destroy(NULL);
    cr_assert_null(f);
}

/* A port nobody listens on: bind to a free one and close it again. */
static int closed_port(void)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

Test(client_api, connect_to_closed_port_is_refused_fast, .init = arm_timeout)
{
    char addr[64];
    gs_client_h c = NULL;
    gs_client_params_t p;
    double t0;
    snprintf(addr, sizeof(addr), "tcp://127.0.0.1:%d", closed_port());
    p = params_for(addr);
    t0 = gs_now_s();
    cr_assert_eq(gs_client_connect(&p, &c), GS_ERR_CONN_REFUSED, "%s", gs_last_error());
    /* fast: well under the 10 s a retried connect would take, even on a loaded machine */
    cr_assert_lt(gs_now_s() - t0, 5.0, "refusal took %.3f s", gs_now_s() - t0);
    cr_assert(strstr(gs_last_error(), addr) != NULL, "message '%s' does not name %s",
              gs_last_error(), addr);
    cr_assert_null(c);
}

Test(client_api, connect_to_silent_server_times_out, .init = arm_timeout)
{
    fake_t f;
    gs_client_h c = NULL;
    gs_client_params_t p;
    double t0;
    memset(&f, 0, sizeof(f));
    f.silent = 1;
    cr_assert_eq(fake_start(&f, NULL, NULL), 0);
    p = params_for(f.address);
    p.field_mask = GS_CLIENT_FIELD_TIMEOUT;
    p.timeout_s = 0.3;
    t0 = gs_now_s();
    cr_assert_eq(gs_client_connect(&p, &c), GS_ERR_TIMED_OUT, "%s", gs_last_error());
    cr_assert_geq(gs_now_s() - t0, 0.29);
    cr_assert_lt(gs_now_s() - t0, 10.0);   /* gave up at its timeout (generous when loaded) */
    cr_assert_null(c);
    fake_stop(&f);
}

Test(client_api, wrong_token_is_reported_as_auth_error, .init = arm_timeout)
{
    fake_t f;
    gs_client_h c = NULL;
    gs_client_params_t p;
    memset(&f, 0, sizeof(f));
    f.token = "right";
    cr_assert_eq(fake_start(&f, NULL, NULL), 0);
    p = params_for(f.address);
    p.field_mask = GS_CLIENT_FIELD_TOKEN;
    p.token = "wrong";
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_AUTH, "wrong cluster token");
    cr_assert_null(c);
    fake_stop(&f);
}

Test(client_api, token_defaults_to_environment, .init = arm_timeout)
{
    fake_t f;
    gs_client_h c = NULL;
    gs_client_params_t p;
    memset(&f, 0, sizeof(f));
    f.token = "from-env";
    cr_assert_eq(fake_start(&f, NULL, NULL), 0);
    setenv("GSCHED_TOKEN", "from-env", 1);
    p = params_for(f.address);
    cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
    cr_assert_str_eq(gs_client_address(c), f.address);
    gs_client_destroy(c);
    fake_stop(&f);
}

Test(client_api, version_mismatch_is_refused, .init = arm_timeout)
{
    fake_t f;
    gs_client_h c = NULL;
    gs_client_params_t p;
    memset(&f, 0, sizeof(f));
    f.refuse_version = 1;
    cr_assert_eq(fake_start(&f, NULL, NULL), 0);
    p = params_for(f.address);
    ASSERT_ERR(gs_client_connect(&p, &c), GS_ERR_VERSION, "version");
    cr_assert_null(c);
    fake_stop(&f);
}

static int fake_accepted(fake_t *f)
{
    int n;
    pthread_mutex_lock(&f->mu);
    n = f->accepted;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* Connect (timeout 50 s) to a fake gsched that closes @a close_first connections at once, then
 * answers @a busy_first HELLOs with ERROR GS_ERR_BUSY, then @a hangup_first with CHALLENGE and
 * a close, then (token "right", the client's
 * @a token) carries on; expects @a want (GS_OK: a client, destroyed here; else the message
 * mentions @a needle) after exactly @a accepts connections. */
static void connect_turned_away(int close_first, int busy_first, int hangup_first, const char *token,
                                gs_status_t want, const char *needle, int accepts)
{
    fake_t f;
    gs_client_h c = NULL;
    gs_client_params_t p;
    memset(&f, 0, sizeof(f));
    f.close_first = close_first;
    f.busy_first = busy_first;
    f.hangup_first = hangup_first;
    f.token = "right";
    cr_assert_eq(fake_start(&f, NULL, NULL), 0);
    p = params_for(f.address);
    p.field_mask = GS_CLIENT_FIELD_TIMEOUT | GS_CLIENT_FIELD_TOKEN;
    p.timeout_s = 50.0;
    p.token = token;
    if (want == GS_OK) {
        cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
        gs_client_destroy(c);
    } else {
        ASSERT_ERR(gs_client_connect(&p, &c), want, needle);
        cr_assert_null(c);
    }
    cr_assert_eq(fake_accepted(&f), accepts, "%d connections, expected %d", fake_accepted(&f), accepts);
    fake_stop(&f);
}

/* gsched at its connection limit closes a connection that has not finished its handshake to
 * make room (sched.h): the client is turned away without a word and must try again. */
Test(client_api, a_connection_closed_before_a_word_is_tried_again, .init = arm_timeout)
{
    connect_turned_away(3, 0, 0, "right", GS_OK, NULL, 4);
}

Test(client_api, a_busy_refusal_is_tried_again, .init = arm_timeout)
{
    connect_turned_away(1, 2, 0, "right", GS_OK, NULL, 4);
}

/* Something that closes every connection (a TLS-only scheduler, not gsched at all) is reported
 * after a bounded number of attempts, not at the end of the timeout. */
Test(client_api, a_peer_that_always_closes_is_given_up_after_a_few_tries, .init = arm_timeout)
{
    connect_turned_away(1000, 0, 0, "right", GS_ERR_CONN_CLOSED, "closed the connection during the handshake", 7);
}

/* A refusal that says why (the token) is final: one connection only. */
Test(client_api, a_refusal_naming_the_token_is_not_tried_again, .init = arm_timeout)
{
    connect_turned_away(0, 0, 0, "wrong", GS_ERR_AUTH, "wrong cluster token", 1);
}

/* gsched may also close a connection after its CHALLENGE (all it could close to make room were
 * in the middle of their handshakes): no reason given, so tried again like a bare close. */
Test(client_api, a_connection_closed_after_the_challenge_is_tried_again, .init = arm_timeout)
{
    connect_turned_away(0, 0, 2, "right", GS_OK, NULL, 3);
}
