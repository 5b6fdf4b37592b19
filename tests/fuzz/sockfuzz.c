/*
 * sockfuzz: drive RUNNING daemons with hostile peers and check they stay correct and bounded.
 *
 * Starts gsched (token set, --max-connections and --frame-memory configured) and two CPU
 * gworkers on loopback with the integration tests' helpers (tests/integration/cluster.h), then for
 * --seconds runs, all at once:
 *   - attacker threads, each looping over episodes: random bytes; bad or truncated frame headers
 *     (0, 64 KiB + 1, 1 GiB, 4 GiB, cut frames); a first frame that is not a valid HELLO (random
 *     HELLOs: wrong token, version, role; a forged AUTH after a real CHALLENGE); the handshake
 *     (proto/handshake_fd.h over proto/handshake.c, the library's own) as a
 *     client or as a worker, then schema-valid random messages of every type, some with flipped
 *     bytes (sockfuzz_gen.c); connect/close storms with and without RST;
 *   - --idle idle connections (half of them handshaken clients) from other loopback addresses,
 *     plus un-handshaken ones from the real client's own address, re-opened when closed;
 *   - --slow slowloris connections: frames announced large and written a byte at a time;
 *   - a real client (the client library) submitting exact-integer jobs (sums of arange under
 *     transposes and slices, and a gathered array) and comparing every result EXACTLY, and
 *     connecting afresh every few jobs: a failed connection counts as a lock-out.
 * A worker-role attacker never sends WORKER_REGISTER: a registered worker holding the token is a
 * member of the cluster (it may compute anything); the token and identity checks are tested in
 * tests/scheduler. At the end: every daemon alive; gsched's open fds at their peak within
 * --max-connections (+ its own), its RSS within the frame memory budget plus the per-connection
 * allowance; fds back to the baseline once the attackers are gone; the workers' RSS and fds
 * flat. One JSON line with every counter; exit 0 only when all of that holds.
 *
 * Usage: sockfuzz [--seconds N] [--seed S] [--attackers N] [--idle N] [--slow N]
 *                 [--daemon-log PATH] [--rss-bound fail|warn] [--lockout fail|warn]
 *                 [--sched-log-level LEVEL]
 * gsched's RSS must stay under its start + the frame memory budget + 64 KiB per allowed
 * connection, and come back within 64 MiB of its start once the attackers left (issue 12: it
 * peaked at 1-2.3 GB before connections shared one read buffer, dropped drained buffers and
 * the heap returned freed memory; see docs/ARCHITECTURE.md). --rss-bound warn reports either
 * without failing (for allocators that keep freed memory by design, e.g. a sanitizer's).
 * --lockout warn counts and reports a real client locked out during the attack (it tries again)
 * without failing: for the ThreadSanitizer run, which is for data races (scripts/tsan.sh says
 * why); the normal build's run keeps the lock-out fatal; after the attack a client must still
 * get in either way.
 * The gsched and gworker programs are found as the integration tests find them ($GS_BIN_DIR, else
 * <dir of this program>/../bin).
 * Diagnostics: --sched-log-level sets gsched's --log-level (default error; at info gsched logs
 * "gsched's loop stood still for N ms" for a late housekeeping timer); $GS_SOCKFUZZ_STALL_CMD,
 * when set, is run once through the shell (with GS_SCHED_PID and GS_SCHED_PORT set) when the
 * real client has waited 5 s for a connection, e.g. a script taking gdb backtraces and ss -tanp.
 */
#include "cluster.h"
#include "proc_cpu.h"
#include "sockfuzz.h"

#include "common/time.h"
#include "proto/handshake.h"
#include "proto/handshake_fd.h"
#include "proto/msg.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* gsched's configured bounds (checked against /proc at the end). */
#define SF_MAX_CONNS 3000
#define SF_FRAME_MEMORY_MB 256
#define SF_CONN_ALLOWANCE (64u * 1024u) /* per open connection: the pre-handshake frame limit */
/* gsched's RSS over its start allowed once the attackers left; not checked for sanitized daemons
 * (built like this harness), whose allocators keep freed memory on purpose (ASan's quarantine) */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SF_RSS_SETTLE UINT64_MAX
#else
#define SF_RSS_SETTLE (64ull << 20)
#endif
#define SF_OWN_FDS 64                    /* gsched's own fds besides connections (loop, log...) */
#define SF_MAX_SLOW 1024
#define SF_MAX_IDLE 8192
#define SF_ATTACKERS_MAX 16

/* Every counter, printed in the JSON line in this order. */
#define SF_COUNTERS(X)                                                                     \
    X(episodes) X(connects) X(connect_failures) X(bytes_sent) X(frames_sent)              \
    X(random_byte_episodes) X(header_episodes) X(prehello_episodes) X(client_episodes)   \
    X(worker_episodes) X(storm_connects) X(handshakes_ok) X(handshakes_refused)           \
    X(bad_token_refused) X(bad_token_accepted) X(closed_by_gsched) X(idle_opened)        \
    X(idle_closed_by_gsched) X(slow_opened) X(slow_closed_by_gsched) X(jobs_ok)           \
    X(jobs_wrong) X(jobs_failed) X(client_connects) X(client_lockouts)

#define SF_DECL(name) atomic_ullong name;
static struct {
    SF_COUNTERS(SF_DECL)
} sf_n;
#undef SF_DECL
#define SF_ADD(name, v) atomic_fetch_add(&sf_n.name, (unsigned long long)(v))

static struct {
    double seconds;
    uint64_t seed;
    int attackers, idle, slow;
    int rss_warn;   /* --rss-bound warn: gsched's RSS bound is reported, not fatal */
    const char *daemon_log;
    int lockout_warn; /* --lockout warn: a real client locked out during the attack is counted
                         and reported, and it tries again, instead of failing the run */
    const char *sched_log_level; /* --sched-log-level: gsched's --log-level (default error) */
} sf_opt = {60.0, 1, 4, 2000, 200, 0, NULL, 0, "error"};

/* Messages gsched sent to member attackers, by type. */
static atomic_ullong sf_seen[GS_MSG_TYPE_MAX];

static atomic_int sf_stop;
static atomic_int sf_failed;   /* sf_fail_text is set */
static tcluster_t sf_cl;
static int sf_port;
static char sf_token[65];
static double sf_client_connect_max_s;
/* when the real client's connection attempt in progress began (gs_now_s), 0 when none: a
 * connection slower than SF_STALL_S runs $GS_SOCKFUZZ_STALL_CMD once (diagnostics) */
static _Atomic double sf_client_connect_t0;
#define SF_STALL_S 5.0
static char sf_fail_text[512];

static void sf_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sf_fail(const char *fmt, ...)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    va_list ap;
    pthread_mutex_lock(&mu);
    if (sf_fail_text[0] == '\0') {
        va_start(ap, fmt);
        vsnprintf(sf_fail_text, sizeof sf_fail_text, fmt, ap);
        va_end(ap);
        fprintf(stdout, "sockfuzz: FAIL: %s\n", sf_fail_text);
        fflush(stdout);
        atomic_store(&sf_failed, 1);
    }
    pthread_mutex_unlock(&mu);
}

/* ------------------------------------------------------------------ attackers */

static int sf_open(const char *src)
{
    int fd = sf_connect(sf_port, src, 5.0);
    if (fd < 0) SF_ADD(connect_failures, 1);
    else SF_ADD(connects, 1);
    return fd;
}

/* Close, sometimes with a RST instead of a FIN. */
static void sf_close(sf_rng_t *r, int fd)
{
    if (sf_below(r, 4) == 0) {
        struct linger l = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    close(fd);
}

static int sf_send_buf(int fd, gs_buf_t *b)
{
    int ok = b->len == 0 || sf_send_all(fd, b->data, b->len, 2.0);
    if (ok) SF_ADD(bytes_sent, b->len);
    b->len = 0;
    return ok;
}

static void sf_put_header(gs_buf_t *b, uint32_t len)
{
    uint8_t h[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
    gs_buf_append(b, h, 4);
}

/* Handshake with the library's own code; counts the outcome. */
static int sf_handshake(int fd, gs_peer_role_t role, const char *token, const char *name)
{
    gs_status_t st = gs_proto_handshake_fd(fd, role, token, name, 10.0, NULL);
    if (st == GS_OK) SF_ADD(handshakes_ok, 1);
    else SF_ADD(handshakes_refused, 1);
    return st == GS_OK;
}

/* Random bytes, in several writes. */
static void sf_ep_random(sf_rng_t *r, gs_buf_t *b)
{
    int fd = sf_open(NULL);
    SF_ADD(random_byte_episodes, 1);
    if (fd < 0) return;
    for (int k = 0, n = 1 + (int)sf_below(r, 6); k < n; k++) {
        sf_gen_bytes(r, sf_below(r, 8) == 0 ? 200000 : 4096, b);
        if (!sf_send_buf(fd, b) || !sf_drain(fd, NULL, NULL)) {
            SF_ADD(closed_by_gsched, 1);
            break;
        }
    }
    sf_close(r, fd);
}

/* Frame headers announcing sizes around every limit, and valid frames cut short; before the
 * handshake and after it (as a client). */
static void sf_ep_header(sf_rng_t *r, gs_buf_t *b)
{
    static const uint32_t lens[] = {0, 1, 3, 65536, 65537, 4u << 20, (4u << 20) + 1, 1u << 30, (1u << 30) + 1,
                                    0x7fffffffu, 0xffffffffu};
    int fd = sf_open(NULL), after = sf_below(r, 2);
    SF_ADD(header_episodes, 1);
    if (fd < 0) return;
    if (after && !sf_handshake(fd, GS_ROLE_CLIENT, sf_token, "sockfuzz-header")) goto out;
    if (sf_below(r, 2)) {
        sf_put_header(b, lens[sf_below(r, sizeof lens / sizeof lens[0])]);
        sf_gen_bytes(r, 64, b);
    } else {
        size_t full;
        sf_gen_frame(r, (uint32_t)sf_below(r, GS_MSG_TYPE_MAX), 0, b);
        full = b->len;
        if (full > 1) b->len = 1 + (size_t)sf_below(r, full - 1);   /* cut */
    }
    SF_ADD(frames_sent, 1);
    if (!sf_send_buf(fd, b) || !sf_drain(fd, NULL, NULL)) SF_ADD(closed_by_gsched, 1);
out:
    sf_close(r, fd);
}

/* A first frame that is not a valid HELLO: another type, or a HELLO of random fields (wrong token,
 * version or role); then a worker registration. gsched must refuse and close. */
static void sf_ep_prehello(sf_rng_t *r, gs_buf_t *b)
{
    int fd = sf_open(NULL);
    uint32_t type = sf_below(r, 2) ? GS_MSG_HELLO : (uint32_t)sf_below(r, GS_MSG_TYPE_MAX);
    SF_ADD(prehello_episodes, 1);
    if (fd < 0) return;
    if (sf_below(r, 3) == 0) {
        /* a rogue without the token: a real HELLO, then an AUTH with a made-up proof */
        gs_hs_peer_t hs;
        gs_msg_t m, auth;
        uint8_t proof[GS_AUTH_MAC_BYTES];
        for (size_t k = 0; k < sizeof proof; k++) proof[k] = (uint8_t)sf_rand(r);
        memset(&auth, 0, sizeof auth);
        auth.type = GS_MSG_AUTH;
        auth.u.auth.proof = (gs_bytes_t){proof, sizeof proof};
        if (gs_hs_peer_hello(&hs, "not-the-token", GS_ROLE_WORKER, "rogue", &m) == GS_OK &&
            gs_proto_fd_send_msg(fd, &m, 5.0) == GS_OK && gs_proto_fd_recv_msg(fd, 65536, 10.0, &m) == GS_OK) {
            int challenged = m.type == GS_MSG_CHALLENGE;
            gs_msg_cleanup(&m);
            if (challenged && gs_proto_fd_send_msg(fd, &auth, 5.0) == GS_OK &&
                gs_proto_fd_recv_msg(fd, 65536, 10.0, &m) == GS_OK) {
                if (m.type == GS_MSG_WELCOME) {
                    SF_ADD(bad_token_accepted, 1);
                    sf_fail("gsched welcomed a worker whose AUTH proof was made up");
                } else {
                    SF_ADD(bad_token_refused, 1);
                }
                gs_msg_cleanup(&m);
            } else if (challenged) {
                SF_ADD(bad_token_refused, 1);   /* closed without an answer */
            }
        }
    }
    sf_gen_frame(r, type, sf_below(r, 4) == 0, b);
    sf_gen_frame(r, GS_MSG_WORKER_REGISTER, 0, b);
    SF_ADD(frames_sent, 2);
    if (!sf_send_buf(fd, b) || !sf_drain(fd, NULL, NULL)) SF_ADD(closed_by_gsched, 1);
    sf_close(r, fd);
}

/* The handshake as a client or a worker, then random messages of every type (a worker: every
 * type but WORKER_REGISTER), some of them mutated, reading gsched's answers as they come. */
static void sf_ep_member(sf_rng_t *r, gs_buf_t *b, gs_peer_role_t role)
{
    int fd = sf_open(NULL);
    uint64_t seen[GS_MSG_TYPE_MAX] = {0};
    gs_frame_reader_t reader;
    char name[48];
    if (role == GS_ROLE_CLIENT) SF_ADD(client_episodes, 1);
    else SF_ADD(worker_episodes, 1);
    if (fd < 0) return;
    snprintf(name, sizeof name, "sockfuzz-%s-%llx", role == GS_ROLE_CLIENT ? "client" : "worker",
             (unsigned long long)sf_below(r, 1u << 20));
    gs_frame_reader_init(&reader, GS_PROTO_DEFAULT_MAX_FRAME);
    if (!sf_handshake(fd, role, sf_token, name)) goto out;
    for (int k = 0, n = 1 + (int)sf_below(r, 40); k < n && !atomic_load(&sf_stop); k++) {
        uint32_t type = (uint32_t)sf_below(r, GS_MSG_TYPE_MAX);
        if (role == GS_ROLE_WORKER && type == GS_MSG_WORKER_REGISTER) type = GS_MSG_HEARTBEAT;
        if (role == GS_ROLE_CLIENT && sf_below(r, 4) == 0) type = GS_MSG_GRAPH_SUBMIT;
        if (!sf_gen_frame(r, type, sf_below(r, 5) == 0, b)) continue;
        SF_ADD(frames_sent, 1);
        if (!sf_send_buf(fd, b) || !sf_drain(fd, &reader, seen)) {
            SF_ADD(closed_by_gsched, 1);
            goto out;
        }
    }
    /* sometimes wait for gsched's answers (and accepted graphs' progress) before leaving */
    if (sf_below(r, 4) == 0) {
        double until = gs_now_s() + 0.5;
        struct pollfd p = {fd, POLLIN, 0};
        while (gs_now_s() < until && poll(&p, 1, 100) >= 0) {
            if (p.revents != 0 && !sf_drain(fd, &reader, seen)) {
                SF_ADD(closed_by_gsched, 1);
                break;
            }
        }
    }
out:
    for (int t = 0; t < GS_MSG_TYPE_MAX; t++)
        if (seen[t] != 0) atomic_fetch_add(&sf_seen[t], seen[t]);
    gs_frame_reader_cleanup(&reader);
    sf_close(r, fd);
}

/* Connect and close at once, many times. */
static void sf_ep_storm(sf_rng_t *r)
{
    for (int k = 0, n = 20 + (int)sf_below(r, 80); k < n && !atomic_load(&sf_stop); k++) {
        int fd = sf_open(NULL);
        if (fd < 0) continue;
        SF_ADD(storm_connects, 1);
        sf_close(r, fd);
    }
}

static void *sf_attacker(void *arg)
{
    sf_rng_t r = {sf_opt.seed * 0x9e3779b97f4a7c15ull + (uintptr_t)arg * 7919u + 1};
    gs_buf_t b;
    gs_buf_init(&b);
    while (!atomic_load(&sf_stop)) {
        SF_ADD(episodes, 1);
        b.len = 0;
        switch (sf_below(&r, 8)) {
        case 0: sf_ep_random(&r, &b); break;
        case 1: sf_ep_header(&r, &b); break;
        case 2: sf_ep_prehello(&r, &b); break;
        case 3:
        case 4: sf_ep_member(&r, &b, GS_ROLE_CLIENT); break;
        case 5:
        case 6: sf_ep_member(&r, &b, GS_ROLE_WORKER); break;
        default: sf_ep_storm(&r); break;
        }
    }
    gs_buf_cleanup(&b);
    sf_gen_release();
    return NULL;
}

/* ------------------------------------------------------------------ idle and slow connections */

typedef struct sf_hold {
    int fd;
    int kind;           /* idle: 0 raw, 1 handshaken; slow: 0 before the handshake, 1 after */
    const char *src;
    uint32_t left;      /* slow: bytes of the announced frame still to write */
} sf_hold_t;

/* Idle source addresses: the handshaken ones come from addresses other than the real client's
 * (a per-address cap would otherwise lock it out by design); raw ones also from 127.0.0.1, where
 * gsched must close the oldest un-handshaken ones to make room. */
static const char *const sf_idle_src[] = {"127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.1.4",
                                          "127.0.1.5", "127.0.1.6", "127.0.1.7", "127.0.1.8"};

static void sf_hold_open_idle(sf_hold_t *h, int i)
{
    h->kind = i % 2;
    h->src = h->kind == 0 && i % 4 == 0 ? "127.0.0.1" : sf_idle_src[(i / 2) % 8];
    h->fd = sf_open(h->src);
    if (h->fd < 0) return;
    SF_ADD(idle_opened, 1);
    if (h->kind == 1) {
        char name[32];
        snprintf(name, sizeof name, "sockfuzz-idle-%d", i);
        if (!sf_handshake(h->fd, GS_ROLE_CLIENT, sf_token, name)) {
            close(h->fd);
            h->fd = -1;
        }
    }
}

static void sf_hold_open_slow(sf_hold_t *h, int i, gs_buf_t *b)
{
    h->kind = i % 2;
    h->src = "127.0.2.1";
    h->fd = sf_open(h->src);
    if (h->fd < 0) return;
    SF_ADD(slow_opened, 1);
    if (h->kind == 1 && !sf_handshake(h->fd, GS_ROLE_CLIENT, sf_token, "sockfuzz-slow")) {
        close(h->fd);
        h->fd = -1;
        return;
    }
    /* announce a frame: below the pre-handshake limit, or a large one after the handshake */
    h->left = h->kind == 0 ? 60000u : (8u << 20) + (uint32_t)(i * 4096);
    b->len = 0;
    sf_put_header(b, h->left);
    if (!sf_send_buf(h->fd, b)) {
        close(h->fd);
        h->fd = -1;
    }
}

/* Keep @a n connections open: poll them; one closed by gsched is counted and opened again (at
 * most 16 per round, so a refusing gsched is not stormed). Slow ones get one byte per round. */
static void sf_hold_loop(sf_hold_t *h, int n, int slow)
{
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    gs_buf_t b;
    gs_buf_init(&b);
    if (p == NULL) return;
    for (int i = 0; i < n; i++) h[i].fd = -1;   /* not opened (yet): never descriptor 0 */
    for (int i = 0; i < n && !atomic_load(&sf_stop); i++) {
        if (slow) sf_hold_open_slow(&h[i], i, &b);
        else sf_hold_open_idle(&h[i], i);
    }
    while (!atomic_load(&sf_stop)) {
        int reopen = 0;
        for (int i = 0; i < n; i++) p[i] = (struct pollfd){h[i].fd, POLLIN, 0};
        poll(p, (nfds_t)n, slow ? 250 : 500);
        for (int i = 0; i < n; i++) {
            int gone = 0;
            if (h[i].fd < 0) {
                if (reopen++ < 16) {
                    if (slow) sf_hold_open_slow(&h[i], i, &b);
                    else sf_hold_open_idle(&h[i], i);
                }
                continue;
            }
            if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) && !sf_drain(h[i].fd, NULL, NULL)) gone = 1;
            if (!gone && slow && h[i].left > 1) {
                uint8_t byte = (uint8_t)i;
                if (send(h[i].fd, &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) {
                    h[i].left--;
                    SF_ADD(bytes_sent, 1);
                } else if (errno != EAGAIN) {
                    gone = 1;
                }
            }
            if (gone) {
                close(h[i].fd);
                h[i].fd = -1;
                if (slow) SF_ADD(slow_closed_by_gsched, 1);
                else SF_ADD(idle_closed_by_gsched, 1);
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (h[i].fd >= 0) close(h[i].fd);
    free(p);
    gs_buf_cleanup(&b);
}

/* The idle (@a arg 0) or the slow (1) connections. */
static void *sf_hold_thread(void *arg)
{
    int slow = arg != NULL, n = slow ? sf_opt.slow : sf_opt.idle;
    sf_hold_t *h = calloc((size_t)(n > 0 ? n : 1), sizeof *h);
    if (h != NULL) sf_hold_loop(h, n, slow);
    free(h);
    return NULL;
}

/* ------------------------------------------------------------------ the real client */

#define SF_N 48
#define SF_CH 20

/* One job of kind @a k (offset @a off) and its exact expected value; everything is an integer
 * below 2^53, so any summation order gives the same double. */
static gs_status_t sf_job(gs_client_h c, int k, double off, double *out_p, double *want_p)
{
    int64_t shape[2] = {SF_N, SF_N}, chunks[2] = {SF_CH, SF_CH};
    gs_array_h x = NULL, y = NULL, t = NULL, s = NULL;
    gs_status_t st;
    double want = 0;
    if ((st = gs_array_arange(off, 1.0, 2, shape, chunks, &x)) != GS_OK) return st;
    if (k == 0) {
        /* (x + x.T).sum() */
        if ((st = gs_array_transpose(x, NULL, &t)) == GS_OK && (st = gs_array_binary(GS_BINARY_ADD, x, t, &y)) == GS_OK)
            st = gs_array_reduce(GS_RED_SUM, y, NULL, &s);
        for (int i = 0; i < SF_N * SF_N; i++) want += 2 * (off + i);
    } else {
        /* (x[1::3, ::2] * 2 + 1).sum() */
        gs_slice_t sl[2] = {{1, 0, 3, GS_SLICE_HAS_START}, {0, 0, 2, 0}};
        if ((st = gs_array_slice(x, 2, sl, &t)) == GS_OK &&
            (st = gs_array_binary_scalar(GS_BINARY_MUL, t, 2.0, &y)) == GS_OK) {
            gs_array_h z = NULL;
            if ((st = gs_array_binary_scalar(GS_BINARY_ADD, y, 1.0, &z)) == GS_OK) st = gs_array_reduce(GS_RED_SUM, z, NULL, &s);
            gs_array_release(z);
        }
        for (int i = 1; i < SF_N; i += 3)
            for (int j = 0; j < SF_N; j += 2) want += 2 * (off + i * SF_N + j) + 1;
    }
    if (st == GS_OK) {
        gs_future_h f = NULL;
        if ((st = gs_client_submit(c, s, 0, &f)) == GS_OK && (st = gs_future_wait(f, 120.0)) == GS_OK)
            st = gs_future_gather(f, out_p, 1);
        gs_future_destroy(f);
    }
    *want_p = want;
    gs_array_release(s);
    gs_array_release(y);
    gs_array_release(t);
    gs_array_release(x);
    return st;
}

/* A gathered array: every element compared. */
static gs_status_t sf_job_gather(gs_client_h c, double off, int *wrong_p)
{
    int64_t shape[2] = {SF_N, SF_N}, chunks[2] = {SF_CH, 16};
    static _Thread_local double out[SF_N * SF_N];
    gs_array_h x = NULL, y = NULL;
    gs_status_t st;
    *wrong_p = 0;
    if ((st = gs_array_arange(off, 1.0, 2, shape, chunks, &x)) == GS_OK &&
        (st = gs_array_binary_scalar(GS_BINARY_SUB, x, 3.0, &y)) == GS_OK &&
        (st = gs_client_compute(c, y, out, SF_N * SF_N)) == GS_OK) {
        for (int i = 0; i < SF_N * SF_N; i++) *wrong_p += out[i] != off + i - 3.0;
    }
    gs_array_release(y);
    gs_array_release(x);
    return st;
}

/* A fresh real client. A failed connection is a lock-out: fatal, unless @a during_attack and
 * --lockout warn (then counted, reported and NULL returned). */
static gs_client_h sf_client_connect(int during_attack)
{
    double t0 = gs_now_s(), dt;
    gs_client_h c;
    atomic_store(&sf_client_connect_t0, t0);
    c = tc_connect(&sf_cl, GS_LOWER_DEFAULT);
    atomic_store(&sf_client_connect_t0, 0.0);
    dt = gs_now_s() - t0;
    SF_ADD(client_connects, 1);
    if (dt > sf_client_connect_max_s) sf_client_connect_max_s = dt;
    if (c == NULL) {
        SF_ADD(client_lockouts, 1);
        if (!during_attack || !sf_opt.lockout_warn) {
            sf_fail("a real client could not connect: %s", gs_last_error());
            return NULL;
        }
        if (atomic_load(&sf_n.client_lockouts) <= 5)   /* the count is in the JSON line */
            fprintf(stderr, "sockfuzz: warning: a real client could not connect during the "
                    "attack (--lockout warn): %s\n", gs_last_error());
    }
    return c;
}

/* One job; 1 when it gave the exact answer. */
static int sf_client_job(gs_client_h c, uint64_t j)
{
    double off = (double)(j % 1000), got = -1, want = 0;
    int wrong = 0;
    gs_status_t st;
    if (j % 3 == 2) {
        st = sf_job_gather(c, off, &wrong);
        got = want = wrong;
    } else {
        st = sf_job(c, (int)(j % 3), off, &got, &want);
    }
    if (st != GS_OK) {
        SF_ADD(jobs_failed, 1);
        sf_fail("job %" PRIu64 " failed: %s: %s", j, gs_status_string(st), gs_last_error());
        return 0;
    }
    if (got != want || wrong != 0) {
        SF_ADD(jobs_wrong, 1);
        sf_fail("job %" PRIu64 " gave %.17g, not %.17g (%d wrong elements)", j, got, want, wrong);
        return 0;
    }
    SF_ADD(jobs_ok, 1);
    return 1;
}

static void *sf_client_thread(void *arg)
{
    gs_client_h c = sf_client_connect(1);
    uint64_t j = 0;
    (void)arg;
    while (!atomic_load(&sf_stop)) {
        if (c == NULL) {   /* locked out: the run failed, or under --lockout warn try again */
            if (!sf_opt.lockout_warn) break;
            c = sf_client_connect(1);
            continue;
        }
        sf_client_job(c, j++);
        if (j % 4 == 0) {
            /* a fresh client must get in whatever the attackers hold */
            gs_client_h fresh = sf_client_connect(1);
            if (fresh != NULL) {
                sf_client_job(fresh, j++);
                gs_client_destroy(fresh);
            }
        }
    }
    gs_client_destroy(c);
    return NULL;
}

/* ------------------------------------------------------------------ monitoring and main */

typedef struct sf_proc {
    pid_t pid;
    const char *name;
    uint64_t rss0, rss_peak, rss_end;
    int fds0, fds_peak, fds_end;
} sf_proc_t;

static void sf_sample(sf_proc_t *p, int n)
{
    for (int i = 0; i < n; i++) {
        uint64_t rss = gs_bench_proc_rss(p[i].pid);
        int fds = gs_bench_proc_fds(p[i].pid);
        if (rss > p[i].rss_peak) p[i].rss_peak = rss;
        if (fds > p[i].fds_peak) p[i].fds_peak = fds;
        if (!tp_alive(p[i].pid)) sf_fail("%s (pid %d) died", p[i].name, (int)p[i].pid);
    }
}

/* The real client has waited SF_STALL_S for its connection: run $GS_SOCKFUZZ_STALL_CMD (once per
 * run, through the shell, with GS_SCHED_PID and GS_SCHED_PORT set) to see what gsched is doing. */
static void sf_stall_check(void)
{
    static int done;
    double t0 = atomic_load(&sf_client_connect_t0);
    const char *cmd = getenv("GS_SOCKFUZZ_STALL_CMD");
    char v[32];
    if (done || cmd == NULL || t0 == 0.0 || gs_now_s() - t0 < SF_STALL_S) return;
    done = 1;
    snprintf(v, sizeof v, "%d", (int)sf_cl.sched);
    setenv("GS_SCHED_PID", v, 1);
    snprintf(v, sizeof v, "%d", sf_port);
    setenv("GS_SCHED_PORT", v, 1);
    fprintf(stdout, "sockfuzz: the real client has waited %.1f s for its connection: running $GS_SOCKFUZZ_STALL_CMD\n",
            gs_now_s() - t0);
    fflush(stdout);
    if (system(cmd) != 0) fprintf(stdout, "sockfuzz: $GS_SOCKFUZZ_STALL_CMD failed\n");
}

static int sf_usage(void)
{
    fprintf(stderr, "usage: sockfuzz [--seconds N] [--seed S] [--attackers N (1..%d)] [--idle N] [--slow N]"
                    " [--daemon-log PATH] [--rss-bound fail|warn] [--lockout fail|warn]"
                    " [--sched-log-level LEVEL]\n", SF_ATTACKERS_MAX);
    return 2;
}

static int sf_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) return 0;
        if (strcmp(a, "--seconds") == 0) sf_opt.seconds = atof(v);
        else if (strcmp(a, "--seed") == 0) sf_opt.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--attackers") == 0) sf_opt.attackers = atoi(v);
        else if (strcmp(a, "--idle") == 0) sf_opt.idle = atoi(v);
        else if (strcmp(a, "--slow") == 0) sf_opt.slow = atoi(v);
        else if (strcmp(a, "--daemon-log") == 0) sf_opt.daemon_log = v;
        else if (strcmp(a, "--sched-log-level") == 0) sf_opt.sched_log_level = v;
        else if (strcmp(a, "--rss-bound") == 0 && (strcmp(v, "warn") == 0 || strcmp(v, "fail") == 0))
            sf_opt.rss_warn = strcmp(v, "warn") == 0;
        else if (strcmp(a, "--lockout") == 0 && (strcmp(v, "warn") == 0 || strcmp(v, "fail") == 0))
            sf_opt.lockout_warn = strcmp(v, "warn") == 0;
        else return 0;
        i++;
    }
    return sf_opt.seconds > 0 && sf_opt.attackers >= 1 && sf_opt.attackers <= SF_ATTACKERS_MAX && sf_opt.idle >= 0 &&
           sf_opt.idle <= SF_MAX_IDLE && sf_opt.slow >= 0 && sf_opt.slow <= SF_MAX_SLOW;
}

/* Daemons inherit stderr: send it (and their logs) to the log file when asked. */
static void sf_redirect_logs(void)
{
    int fd;
    if (sf_opt.daemon_log == NULL) return;
    if ((fd = open(sf_opt.daemon_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) return;
    dup2(fd, STDERR_FILENO);
    close(fd);
}

static void sf_print(const sf_proc_t *p, int np, double secs, int ok)
{
    printf("{\"sockfuzz\":\"%s\",\"seconds\":%.1f,\"seed\":%" PRIu64 ",\"attackers\":%d,\"idle\":%d,\"slow\":%d",
           ok ? "pass" : "fail", secs, sf_opt.seed, sf_opt.attackers, sf_opt.idle, sf_opt.slow);
#define SF_PRINT(name) printf(",\"" #name "\":%llu", (unsigned long long)atomic_load(&sf_n.name));
    SF_COUNTERS(SF_PRINT)
#undef SF_PRINT
    printf(",\"client_connect_max_s\":%.3f,\"answers\":{", sf_client_connect_max_s);
    for (int t = 0, first = 1; t < GS_MSG_TYPE_MAX; t++) {
        unsigned long long v = atomic_load(&sf_seen[t]);
        if (v == 0) continue;
        printf("%s\"%s\":%llu", first ? "" : ",", gs_msg_type_name((uint32_t)t), v);
        first = 0;
    }
    printf("}");
    for (int i = 0; i < np; i++)
        printf(",\"%s\":{\"rss0_mb\":%.1f,\"rss_peak_mb\":%.1f,\"rss_end_mb\":%.1f,\"fds0\":%d,\"fds_peak\":%d,"
               "\"fds_end\":%d}",
               p[i].name, p[i].rss0 / 1048576.0, p[i].rss_peak / 1048576.0, p[i].rss_end / 1048576.0, p[i].fds0,
               p[i].fds_peak, p[i].fds_end);
    printf(",\"bounds\":{\"max_connections\":%d,\"frame_memory_mb\":%d}", SF_MAX_CONNS, SF_FRAME_MEMORY_MB);
    if (!ok) printf(",\"failure\":\"%s\"", sf_fail_text);
    printf("}\n");
    fflush(stdout);
}

/* The end-of-run bounds. */
static void sf_check_bounds(sf_proc_t *p, int np)
{
    uint64_t budget = (uint64_t)SF_FRAME_MEMORY_MB << 20;
    uint64_t rss_bound = p[0].rss0 + budget + (uint64_t)SF_MAX_CONNS * SF_CONN_ALLOWANCE;
    if (p[0].fds_peak > SF_MAX_CONNS + SF_OWN_FDS)
        sf_fail("gsched held %d fds, over --max-connections %d + %d", p[0].fds_peak, SF_MAX_CONNS, SF_OWN_FDS);
    if (p[0].rss_peak > rss_bound && sf_opt.rss_warn)
        printf("sockfuzz: WARNING: gsched RSS peaked at %.1f MB, over %.1f MB "
               "(start + frame memory + per-connection allowance)\n",
               p[0].rss_peak / 1048576.0, rss_bound / 1048576.0);
    else if (p[0].rss_peak > rss_bound)
        sf_fail("gsched RSS peaked at %.1f MB, over %.1f MB (start + frame memory + per-connection allowance)",
                p[0].rss_peak / 1048576.0, rss_bound / 1048576.0);
    if (SF_RSS_SETTLE == UINT64_MAX) {
        /* sanitized daemons: see SF_RSS_SETTLE */
    } else if (p[0].rss_end > p[0].rss0 + SF_RSS_SETTLE && sf_opt.rss_warn)
        printf("sockfuzz: WARNING: gsched RSS still %.1f MB after the attackers left (%.1f MB at start)\n",
               p[0].rss_end / 1048576.0, p[0].rss0 / 1048576.0);
    else if (p[0].rss_end > p[0].rss0 + SF_RSS_SETTLE)
        sf_fail("gsched RSS still %.1f MB after the attackers left (%.1f MB at start)", p[0].rss_end / 1048576.0,
                p[0].rss0 / 1048576.0);
    if (p[0].fds_end > p[0].fds0 + 4)
        sf_fail("gsched holds %d fds after the attackers left (%d before)", p[0].fds_end, p[0].fds0);
    for (int i = 1; i < np; i++) {
        if (p[i].fds_end > p[i].fds0 + 8) sf_fail("%s holds %d fds (%d at start)", p[i].name, p[i].fds_end, p[i].fds0);
        if (p[i].rss_end > 2 * p[i].rss0 + (256ull << 20))
            sf_fail("%s RSS grew from %.1f MB to %.1f MB", p[i].name, p[i].rss0 / 1048576.0, p[i].rss_end / 1048576.0);
    }
}

int main(int argc, char **argv)
{
    const char *sched_args[] = {"--max-connections", "3000", "--frame-memory", "256M", "--log-level", NULL, NULL};
    pthread_t att[SF_ATTACKERS_MAX], idle, slow, client;
    sf_proc_t procs[3];
    struct rlimit rl;
    double t0, deadline;
    sf_rng_t r;
    int ok;

    if (!sf_args(argc, argv)) return sf_usage();
    sched_args[5] = sf_opt.sched_log_level;
    signal(SIGPIPE, SIG_IGN);
    /* the harness holds idle + slow + attacker connections: raise the soft fd limit to the hard one */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)(sf_opt.idle + sf_opt.slow + 256)) {
        fprintf(stderr, "sockfuzz: open file limit %llu is too low for %d idle and %d slow connections\n",
                (unsigned long long)rl.rlim_cur, sf_opt.idle, sf_opt.slow);
        return 2;
    }
    r.s = sf_opt.seed * 0x2545f4914f6cdd1dull + 12345;
    for (int i = 0; i < 32; i++) sf_token[i] = "0123456789abcdef"[sf_below(&r, 16)];
    sf_redirect_logs();
    if (!tc_start(&sf_cl, 2, sf_token, sched_args)) {
        printf("sockfuzz: FAIL: could not start gsched and 2 workers\n");
        return 1;
    }
    {
        const char *colon = strrchr(sf_cl.address, ':');
        sf_port = colon != NULL ? atoi(colon + 1) : 0;
    }
    memset(procs, 0, sizeof procs);
    procs[0] = (sf_proc_t){.pid = sf_cl.sched, .name = "gsched"};
    procs[1] = (sf_proc_t){.pid = sf_cl.workers[0], .name = "worker0"};
    procs[2] = (sf_proc_t){.pid = sf_cl.workers[1], .name = "worker1"};
    for (int i = 0; i < 3; i++) {
        procs[i].rss0 = gs_bench_proc_rss(procs[i].pid);
        procs[i].fds0 = gs_bench_proc_fds(procs[i].pid);
    }

    t0 = gs_now_s();
    pthread_create(&client, NULL, sf_client_thread, NULL);
    pthread_create(&idle, NULL, sf_hold_thread, NULL);
    pthread_create(&slow, NULL, sf_hold_thread, (void *)1);
    for (int i = 0; i < sf_opt.attackers; i++) pthread_create(&att[i], NULL, sf_attacker, (void *)(uintptr_t)i);
    deadline = t0 + sf_opt.seconds;
    while (gs_now_s() < deadline && !atomic_load(&sf_failed)) {
        sf_sample(procs, 3);
        sf_stall_check();
        usleep(250000);   /* the sampling period, not a wait for an event */
    }
    atomic_store(&sf_stop, 1);
    for (int i = 0; i < sf_opt.attackers; i++) pthread_join(att[i], NULL);
    pthread_join(idle, NULL);
    pthread_join(slow, NULL);
    pthread_join(client, NULL);
    sf_sample(procs, 3);

    /* after the attack: a last job must be exact, and gsched must let go of every connection */
    {
        gs_client_h c = sf_client_connect(0);   /* after the attack: always fatal */
        if (c != NULL) {
            sf_client_job(c, 999999);
            gs_client_destroy(c);
        }
    }
    {
        double until = gs_now_s() + 30.0;
        while (gs_now_s() < until && gs_bench_proc_fds(procs[0].pid) > procs[0].fds0 + 4) usleep(50000);
        /* ... and of the memory: gsched returns free heap memory every second (issue 12) */
        until = gs_now_s() + 10.0;
        while (SF_RSS_SETTLE != UINT64_MAX && gs_now_s() < until &&
               gs_bench_proc_rss(procs[0].pid) > procs[0].rss0 + SF_RSS_SETTLE)
            usleep(100000);
    }
    for (int i = 0; i < 3; i++) {
        procs[i].rss_end = gs_bench_proc_rss(procs[i].pid);
        procs[i].fds_end = gs_bench_proc_fds(procs[i].pid);
        if (!tp_alive(procs[i].pid)) sf_fail("%s (pid %d) died", procs[i].name, (int)procs[i].pid);
    }
    sf_check_bounds(procs, 3);
    /* the end in order: gsched stopped by SIGTERM (gs_sched_stop) sends SHUTDOWN and exits, and
     * the workers exit on it at once; without it they would try to rejoin for their 10 s
     * connect timeout ("closed without a SHUTDOWN: rejoining") */
    if (!atomic_load(&sf_failed)) {
        kill(procs[0].pid, SIGTERM);
        for (int i = 0; i < 3; i++) {
            int st = 0;
            if (!tp_wait_exit(procs[i].pid, &st, i == 0 ? 20.0 : 5.0) || !WIFEXITED(st) ||
                WEXITSTATUS(st) != 0)
                sf_fail("%s (pid %d) did not exit with status 0 after gsched's SIGTERM (%d)",
                        procs[i].name, (int)procs[i].pid, st);
        }
    }
    if (atomic_load(&sf_n.jobs_ok) == 0) sf_fail("no job completed");
    ok = !atomic_load(&sf_failed);
    sf_print(procs, 3, gs_now_s() - t0, ok);
    tp_kill_all();
    return ok ? 0 : 1;
}
