/* Gathers by each path (issue 18 item 4) on real gsched + gworker processes on loopback: the
 * relay through gsched, direct TCP from the workers' data ports, shared memory from workers of
 * this host, and auto; strided slices of an odd chunking, the same values whatever the path;
 * the data port refusing requests without gsched's ticket and surviving garbage; a worker gone
 * between the computation and the gather. With GS_TEST_BACKEND=cuda the workers are GPU ones
 * (bench/gpu-session.sh's gather stage). */
#include "cluster.h"
#include "reference.h"

#include "proto/msg.h"

#include <gsched/gsched.h>

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <limits.h>
#include <netinet/in.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

TC_SUITE_CLUSTER(up2, 2, 240)

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

TestSuite(integration_gather, .init = up2, .fini = down, .timeout = 300);

/* y = x[3:95:4, 1::3] of x = normal(seed 5) of 101 x 89 in 17 x 13 chunks, and its reference. */
static gs_array_h strided(ref_t *want)
{
    int64_t shape[2] = {101, 89}, chunks[2] = {17, 13}, rows[101], cols[89], nr, nc;
    gs_slice_t s[2] = {GS_SLICE(3, 95, 4), GS_SLICE_FROM(1, 3)};
    gs_array_h x, y;
    ref_t rx = ref_normal(5, 0, 1, 2, shape);
    OK(gs_array_random_normal(5, 0, 1, 2, shape, chunks, &x));
    OK(gs_array_slice(x, 2, s, &y));
    gs_array_release(x);
    nr = ref_slice_indices(101, 1, 3, 1, 95, 4, rows);
    nc = ref_slice_indices(89, 1, 1, 0, 0, 3, cols);
    *want = ref_take2(&rx, rows, nr, cols, nc);
    ref_free(&rx);
    return y;
}

static void expect_values(const double *got, const ref_t *want)
{
    for (int64_t i = 0; i < want->size; i++)
        cr_assert(fabs(got[i] - want->v[i]) <= 1e-12 * fmax(1.0, fabs(want->v[i])), "element %lld: %.17g vs %.17g",
                  (long long)i, got[i], want->v[i]);
}

static int tls_on(void)
{
    const char *t = getenv("GS_TEST_TLS");
    return t != NULL && strcmp(t, "1") == 0;
}

Test(integration_gather, every_path_gives_the_same_strided_slice)
{
    ref_t want;
    gs_array_h y = strided(&want);
    double *got = malloc((size_t)want.size * sizeof(double));
    cr_assert_not_null(got);
    for (int path = GS_GATHER_AUTO; path <= GS_GATHER_SHM; path++) {
        gs_gather_stats_t b, a;
        uint64_t nchunks;
        OK(gs_client_set_gather_path(C, path));
        for (int64_t i = 0; i < want.size; i++) got[i] = NAN;
        gs_client_gather_stats(C, &b);
        OK(gs_client_compute(C, y, got, (size_t)want.size));
        gs_client_gather_stats(C, &a);
        expect_values(got, &want);
        nchunks = (a.chunks_relay - b.chunks_relay) + (a.chunks_direct - b.chunks_direct) +
                  (a.chunks_shm - b.chunks_shm);
        cr_assert_eq(nchunks, 6 * 7, "path %s: %llu chunks", gs_gather_path_name(path), (unsigned long long)nchunks);
        cr_assert_eq(a.fallbacks, b.fallbacks, "path %s fell back", gs_gather_path_name(path));
        if (path == GS_GATHER_RELAY || path == GS_GATHER_AUTO || tls_on()) {   /* auto: 5 KiB, relayed */
            cr_assert_eq(a.chunks_relay - b.chunks_relay, nchunks);
        } else if (path == GS_GATHER_DIRECT) {
            cr_assert_eq(a.chunks_direct - b.chunks_direct, nchunks, "path direct: not every chunk over TCP");
        } else {   /* shm: the workers are on this host */
            cr_assert_eq(a.chunks_shm - b.chunks_shm, nchunks, "path %s: not every chunk through shared memory",
                         gs_gather_path_name(path));
        }
    }
    free(got);
    ref_free(&want);
    gs_array_release(y);
}

/* The same slice as float32 (4-byte elements): every path places the elements at their own
 * size, never as doubles. */
Test(integration_gather, every_path_places_float32_elements_at_their_size)
{
    ref_t want;
    gs_array_h y64 = strided(&want), y;
    OK(gs_array_astype(y64, GS_DTYPE_FLOAT32, &y));
    gs_array_release(y64);
    float *got = malloc((size_t)(want.size + 1) * sizeof(float));
    cr_assert_not_null(got);
    for (int path = GS_GATHER_AUTO; path <= GS_GATHER_SHM; path++) {
        gs_gather_stats_t b, a;
        OK(gs_client_set_gather_path(C, path));
        for (int64_t i = 0; i <= want.size; i++) got[i] = NAN;
        gs_client_gather_stats(C, &b);
        OK(gs_client_compute(C, y, (double *)(void *)got, (size_t)want.size));
        gs_client_gather_stats(C, &a);
        cr_assert_eq(a.fallbacks, b.fallbacks, "path %s fell back (a size check in doubles?)",
                     gs_gather_path_name(path));
        if (path == GS_GATHER_DIRECT && !tls_on())
            cr_assert_eq(a.chunks_direct - b.chunks_direct, 6 * 7, "path direct: not every chunk over TCP");
        if (path == GS_GATHER_SHM && !tls_on())
            cr_assert_eq(a.chunks_shm - b.chunks_shm, 6 * 7, "path shm: not every chunk through shared memory");
        for (int64_t i = 0; i < want.size; i++)
            cr_assert_eq(got[i], (float)want.v[i], "path %s, element %lld: %.9g vs %.9g",
                         gs_gather_path_name(path), (long long)i, (double)got[i], (double)(float)want.v[i]);
        cr_assert(isnan(got[want.size]), "path %s wrote past the float32 result", gs_gather_path_name(path));
    }
    free(got);
    ref_free(&want);
    gs_array_release(y);
}

Test(integration_gather, rejects_an_unknown_path)
{
    cr_assert_eq(gs_client_set_gather_path(C, 7), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_client_set_gather_path(NULL, GS_GATHER_AUTO), GS_ERR_INVALID_PARAM);
}

Test(integration_gather, a_worker_gone_before_the_gather_is_recomputed)
{
    ref_t want;
    gs_array_h y = strided(&want);
    gs_future_h f;
    double *got = malloc((size_t)want.size * sizeof(double));
    cr_assert_not_null(got);
    OK(gs_client_set_gather_path(C, GS_GATHER_DIRECT));
    OK(gs_client_submit(C, y, 0, &f));
    OK(gs_future_wait(f, 60.0));
    cr_assert_eq(kill(CL.workers[0], SIGKILL), 0);
    OK(gs_future_gather(f, got, (size_t)want.size));   /* stale addresses, then the relay */
    expect_values(got, &want);
    gs_future_destroy(f);
    free(got);
    ref_free(&want);
    gs_array_release(y);
}

/* A worker whose log (info) names its data port: its address in @a addr. */
static pid_t worker_with_port(char *addr, size_t len)
{
    char bin[PATH_MAX], buf[8192];
    const char *argv[] = {tp_bin("gworker", bin, sizeof bin), CL.address, "--name", "w-port", "--backend", "cpu",
                          "--nthreads", "1", "--log-level", "info", NULL};
    size_t have = 0;
    int fd = -1;
    pid_t pid = tp_spawn_capture(argv, &fd, CL.token);
    time_t end = time(NULL) + 30;
    cr_assert(pid > 0);
    while (time(NULL) < end && have + 1 < sizeof buf) {
        struct pollfd p = {fd, POLLIN, 0};
        const char *at;
        ssize_t n;
        if (poll(&p, 1, 1000) <= 0) continue;
        if ((n = read(fd, buf + have, sizeof buf - 1 - have)) <= 0) break;
        have += (size_t)n;
        buf[have] = '\0';
        if ((at = strstr(buf, "data port for direct gathers at ")) != NULL && strchr(at, '\n') != NULL) {
            at += strlen("data port for direct gathers at ");
            snprintf(addr, len, "%.*s", (int)strcspn(at, "\n"), at);
            return pid;
        }
    }
    cr_assert_fail("the worker did not log its data port: %s", buf);
    return -1;
}

static int connect_to(const char *addr)
{
    char host[64];
    int port = 0, fd;
    struct sockaddr_in sa;
    cr_assert_eq(sscanf(addr, "%63[^:]:%d", host, &port), 2, "address %s", addr);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    cr_assert_eq(inet_pton(AF_INET, host, &sa.sin_addr), 1);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "connect %s", addr);
    return fd;
}

/* Read one frame (at most @a cap bytes of payload) and decode it; 0 on EOF. */
static int read_msg(int fd, uint8_t *buf, size_t cap, gs_msg_t *m)
{
    uint32_t len;
    size_t got = 0;
    while (got < 4) {
        ssize_t n = read(fd, buf + got, 4 - got);
        if (n <= 0) return 0;
        got += (size_t)n;
    }
    len = (uint32_t)buf[0] | (uint32_t)buf[1] << 8 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 24;
    cr_assert(len <= cap);
    got = 0;
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n <= 0) return 0;
        got += (size_t)n;
    }
    cr_assert_eq(gs_msg_decode(buf, len, m), GS_OK, "%s", gs_last_error());
    return 1;
}

Test(integration_gather, the_data_port_refuses_requests_without_a_ticket)
{
    char addr[80];
    uint8_t zeros[32], buf[4096];
    gs_msg_t m, r;
    gs_buf_t b;
    int fd;
    pid_t pid;

    if (tls_on()) cr_skip_test("the worker spawned here has no TLS arguments (GS_TEST_TLS=1)");
    pid = worker_with_port(addr, sizeof addr);

    /* a forged ticket: refused, and the connection closed */
    memset(zeros, 0, sizeof zeros);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_CHUNK_REQ;
    m.u.chunk_req.req_id = 1;
    m.u.chunk_req.graph_id = 1;
    m.u.chunk_req.task_id = 0;
    m.u.chunk_req.ticket = (gs_bytes_t){zeros, sizeof zeros};
    gs_buf_init(&b);
    OK(gs_msg_encode(&m, &b));
    fd = connect_to(addr);
    cr_assert_eq(write(fd, b.data, b.len), (ssize_t)b.len);
    cr_assert(read_msg(fd, buf, sizeof buf, &r), "no answer to a forged ticket");
    cr_assert_eq(r.type, GS_MSG_DATA);
    cr_assert_eq(r.u.data.status, GS_ERR_AUTH);
    cr_assert_eq(r.u.data.data.len, 0u);
    gs_msg_cleanup(&r);
    cr_assert_eq(read_msg(fd, buf, sizeof buf, &r), 0, "the connection stays open after a forged ticket");
    close(fd);
    /* no ticket at all, and a message that is not a request: closed as well */
    m.u.chunk_req.ticket = (gs_bytes_t){NULL, 0};
    b.len = 0;
    OK(gs_msg_encode(&m, &b));
    fd = connect_to(addr);
    cr_assert_eq(write(fd, b.data, b.len), (ssize_t)b.len);
    cr_assert(read_msg(fd, buf, sizeof buf, &r));
    cr_assert_eq(r.u.data.status, GS_ERR_AUTH);
    gs_msg_cleanup(&r);
    close(fd);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_HEARTBEAT;
    b.len = 0;
    OK(gs_msg_encode(&m, &b));
    fd = connect_to(addr);
    cr_assert_eq(write(fd, b.data, b.len), (ssize_t)b.len);
    cr_assert_eq(read_msg(fd, buf, sizeof buf, &r), 0, "a heartbeat on the data port was answered");
    close(fd);
    fd = connect_to(addr);   /* garbage: a frame header announcing 3 GB */
    cr_assert_eq(write(fd, "\xff\xff\xff\xbf garbage", 12), 12);
    cr_assert_eq(read_msg(fd, buf, sizeof buf, &r), 0);
    close(fd);
    gs_buf_cleanup(&b);
    /* the worker lives on and serves real gathers */
    cr_assert(tp_alive(pid));
    {
        ref_t want;
        gs_array_h y = strided(&want);
        double *got = malloc((size_t)want.size * sizeof(double));
        OK(gs_client_set_gather_path(C, GS_GATHER_DIRECT));
        OK(gs_client_compute(C, y, got, (size_t)want.size));
        expect_values(got, &want);
        free(got);
        ref_free(&want);
        gs_array_release(y);
    }
    cr_assert(tp_alive(pid));
}

/* Killing worker 0 once the first bytes of the result have landed in the buffer. */
typedef struct killer {
    volatile const double *buf;
    int64_t n;
    pid_t victim;
    int killed;
} killer_t;

static void *kill_on_first_bytes(void *arg)
{
    killer_t *k = arg;
    time_t end = time(NULL) + 60;
    while (time(NULL) < end) {
        for (int64_t i = 0; i < k->n; i += 997)
            if (!isnan(k->buf[i])) {
                k->killed = kill(k->victim, SIGKILL) == 0;
                return NULL;
            }
        sched_yield();
    }
    return NULL;
}

Test(integration_gather, a_worker_killed_mid_gather_is_recomputed_or_refetched)
{
    int64_t shape[2] = {2000, 2000}, chunks[2] = {125, 125};
    gs_array_h x;
    gs_future_h f;
    pthread_t th;
    killer_t k;
    double *got = malloc((size_t)(shape[0] * shape[1]) * sizeof(double));
    cr_assert_not_null(got);
    OK(gs_array_random_normal(9, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_set_gather_path(C, GS_GATHER_AUTO));
    OK(gs_client_submit(C, x, 0, &f));
    OK(gs_future_wait(f, 120.0));
    for (int64_t i = 0; i < shape[0] * shape[1]; i++) got[i] = NAN;
    k = (killer_t){got, shape[0] * shape[1], CL.workers[0], 0};
    cr_assert_eq(pthread_create(&th, NULL, kill_on_first_bytes, &k), 0);
    OK(gs_future_gather(f, got, (size_t)(shape[0] * shape[1])));
    pthread_join(th, NULL);
    cr_assert(k.killed, "worker 0 was not killed during the gather");
    for (int64_t i = 0; i < shape[0] * shape[1]; i += 7) {
        double want = gs_random_normal_v3(9, (uint64_t)i, 0.0, 1.0);
        cr_assert(fabs(got[i] - want) <= 1e-12 * fmax(1.0, fabs(want)), "element %lld: %.17g vs %.17g", (long long)i,
                  got[i], want);
    }
    gs_future_destroy(f);
    gs_array_release(x);
    free(got);
}

Test(integration_gather, a_worker_without_a_data_port_is_relayed)
{
    const char *const no_direct[] = {"--no-direct", NULL};
    int64_t shape[2] = {600, 500}, chunks[2] = {100, 100};
    gs_array_h x;
    gs_gather_stats_t b, a;
    double *got = malloc((size_t)(shape[0] * shape[1]) * sizeof(double));
    cr_assert_not_null(got);
    cr_assert(tc_add_worker_args(&CL, "w-no-direct", no_direct) > 0);
    OK(gs_client_wait_for_workers(C, 3, 60.0));
    /* only the worker without a data port remains: every chunk is computed there */
    cr_assert_eq(kill(CL.workers[0], SIGKILL), 0);
    cr_assert_eq(kill(CL.workers[1], SIGKILL), 0);
    OK(gs_array_random_normal(11, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_set_gather_path(C, GS_GATHER_SHM));
    gs_client_gather_stats(C, &b);
    OK(gs_client_compute(C, x, got, (size_t)(shape[0] * shape[1])));
    gs_client_gather_stats(C, &a);
    for (int64_t i = 0; i < shape[0] * shape[1]; i++) {
        double want = gs_random_normal_v3(11, (uint64_t)i, 0.0, 1.0);
        cr_assert(fabs(got[i] - want) <= 1e-12 * fmax(1.0, fabs(want)), "element %lld", (long long)i);
    }
    cr_assert_eq(a.fallbacks, b.fallbacks, "a chunk of no data port counts as a failed direct fetch");
    cr_assert_eq(a.chunks_relay - b.chunks_relay, 30, "%llu of 30 chunks relayed",
                 (unsigned long long)(a.chunks_relay - b.chunks_relay));
    cr_assert_eq(a.chunks_shm + a.chunks_direct, b.chunks_shm + b.chunks_direct);
    gs_array_release(x);
    free(got);
}
