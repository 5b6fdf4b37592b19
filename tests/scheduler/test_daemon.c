/* The gsched program: arguments, the address line, signals, SHUTDOWN to workers. */
#include "harness.h"
#include "proto/msg.h"

#include "common/time.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* Bounds each wait on the gsched process (start-up, a frame, exit): generous, since a loaded
 * machine (and ASan) slows a spawned daemon by seconds. */
#define DAEMON_WAIT_MS 30000

static void gsched_path(char *buf, size_t len)
{
    const char *dir = getenv("GS_BIN_DIR");
    snprintf(buf, len, "%s/gsched", dir ? dir : "bin");
    if (access(buf, X_OK) != 0) cr_skip_test("gsched not found at %s (set GS_BIN_DIR)", buf);
}

/* Start gsched with @a args; its stdout comes back on *out_fd, stderr on *err_fd. */
static pid_t spawn(const char *const *args, int *out_fd, int *err_fd)
{
    char path[512];
    const char *argv[16];
    int o[2], e[2], n = 0;
    pid_t pid;
    gsched_path(path, sizeof path);
    argv[n++] = path;
    for (int i = 0; args[i] != NULL && n < 15; i++) argv[n++] = args[i];
    argv[n] = NULL;
    cr_assert_eq(pipe(o), 0);
    cr_assert_eq(pipe(e), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(o[1], 1);
        dup2(e[1], 2);
        close(o[0]);
        close(e[0]);
        execv(path, (char *const *)argv);
        _exit(127);
    }
    close(o[1]);
    close(e[1]);
    *out_fd = o[0];
    *err_fd = e[0];
    return pid;
}

static ssize_t read_some(int fd, char *buf, size_t cap, int ms)
{
    size_t len = 0;
    uint64_t end = gs_now_ns() + (uint64_t)ms * 1000000ull;
    while (len < cap - 1 && gs_now_ns() < end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0) continue;
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n <= 0) break;
        len += (size_t)n;
        if (memchr(buf, '\n', len)) break;
    }
    buf[len] = '\0';
    return (ssize_t)len;
}

static int wait_exit(pid_t pid, int ms)
{
    uint64_t end = gs_now_ns() + (uint64_t)ms * 1000000ull;
    int st;
    while (gs_now_ns() < end) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    cr_assert_fail("gsched did not exit");
    return -1;
}

static int connect_to(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
    return fd;
}


/* Read one frame (blocking with a timeout); 0 at EOF. */
static int recv_msg(int fd, gs_msg_t *m, int ms)
{
    uint8_t hdr[4], *payload;
    size_t got = 0;
    uint32_t len;
    uint64_t end = gs_now_ns() + (uint64_t)ms * 1000000ull;
    while (got < 4) {
        struct pollfd p = {fd, POLLIN, 0};
        cr_assert_lt(gs_now_ns(), end, "timed out waiting for a frame");
        if (poll(&p, 1, 20) <= 0) continue;
        ssize_t n = recv(fd, hdr + got, 4 - got, 0);
        if (n <= 0) return 0;
        got += (size_t)n;
    }
    len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    payload = malloc(len ? len : 1);
    got = 0;
    while (got < len) {
        ssize_t n = recv(fd, payload + got, len - got, 0);
        cr_assert_gt(n, 0);
        got += (size_t)n;
    }
    cr_assert_eq(gs_msg_decode(payload, len, m), GS_OK);
    free(payload);
    return 1;
}

/* The handshake over a blocking socket as @a role with @a token: *m gets gsched's last answer
 * (WELCOME, or an ERROR; gs_msg_cleanup it). */
static void raw_handshake(int fd, const char *token, uint32_t role, const char *name, gs_msg_t *m)
{
    gs_hs_peer_t hs;
    gs_msg_t out;
    cr_assert_eq(gs_hs_peer_hello(&hs, token, role, name, &out), GS_OK);
    th_raw_send(fd, &out);
    cr_assert(recv_msg(fd, m, DAEMON_WAIT_MS), "no answer to hello");
    if (m->type != GS_MSG_CHALLENGE) return;
    /* a wrong token: gsched's proof does not check out; answer anyway, as a rogue would */
    if (gs_hs_peer_answer(&hs, m, &out) != GS_OK) {
        static const uint8_t zero[GS_AUTH_MAC_BYTES];
        out = (gs_msg_t){.type = GS_MSG_AUTH, .u.auth.proof = {zero, sizeof zero}};
    }
    gs_msg_cleanup(m);
    th_raw_send(fd, &out);
    cr_assert(recv_msg(fd, m, DAEMON_WAIT_MS), "no answer to auth");
}

Test(scheduler_daemon, prints_its_address_and_shuts_workers_down_on_sigterm)
{
    const char *args[] = {"--host", "127.0.0.1", "--port", "0", "--token", "tok", NULL};
    int out, err, port = 0;
    char line[256];
    gs_msg_t m;
    pid_t pid = spawn(args, &out, &err);
    cr_assert_gt(read_some(out, line, sizeof line, DAEMON_WAIT_MS), 0, "no address line");
    cr_assert_eq(sscanf(line, "gsched listening on tcp://127.0.0.1:%d", &port), 1, "line: %s", line);
    cr_assert_gt(port, 0);
    /* a worker registers */
    int fd = connect_to(port);
    raw_handshake(fd, "tok", GS_ROLE_WORKER, "w", &m);
    cr_assert_eq(m.type, GS_MSG_WELCOME);
    gs_msg_cleanup(&m);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_WORKER_REGISTER;
    m.u.worker_register.name.data = (const uint8_t *)"w";
    m.u.worker_register.name.len = 1;
    m.u.worker_register.nthreads = 1;
    th_raw_send(fd, &m);
    cr_assert(recv_msg(fd, &m, DAEMON_WAIT_MS));
    cr_assert_eq(m.type, GS_MSG_PEERS);
    gs_msg_cleanup(&m);
    kill(pid, SIGTERM);
    cr_assert(recv_msg(fd, &m, DAEMON_WAIT_MS), "no shutdown before the connection closed");
    cr_assert_eq(m.type, GS_MSG_SHUTDOWN);
    gs_msg_cleanup(&m);
    int st = wait_exit(pid, DAEMON_WAIT_MS);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    close(fd);
    close(out);
    close(err);
}

Test(scheduler_daemon, takes_the_token_from_the_environment_and_exits_on_sigint)
{
    const char *args[] = {"--host", "127.0.0.1", "--port", "0", NULL};
    int out, err, port = 0;
    char line[256];
    gs_msg_t m;
    setenv("GSCHED_TOKEN", "envtok", 1);
    pid_t pid = spawn(args, &out, &err);
    unsetenv("GSCHED_TOKEN");
    cr_assert_gt(read_some(out, line, sizeof line, DAEMON_WAIT_MS), 0);
    cr_assert_eq(sscanf(line, "gsched listening on tcp://127.0.0.1:%d", &port), 1, "line: %s", line);
    int fd = connect_to(port);
    raw_handshake(fd, "nope", GS_ROLE_CLIENT, "c", &m);
    cr_assert_eq(m.type, GS_MSG_ERROR);
    cr_assert_eq(m.u.error.status, GS_ERR_AUTH);
    gs_msg_cleanup(&m);
    close(fd);
    fd = connect_to(port);
    raw_handshake(fd, "envtok", GS_ROLE_CLIENT, "c", &m);
    cr_assert_eq(m.type, GS_MSG_WELCOME);
    gs_msg_cleanup(&m);
    kill(pid, SIGINT);
    int st = wait_exit(pid, DAEMON_WAIT_MS);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    close(fd);
    close(out);
    close(err);
}

static void expect_bad_args(const char *const *args, const char *phrase)
{
    int out, err;
    char msg[1024];
    pid_t pid = spawn(args, &out, &err);
    int st = wait_exit(pid, DAEMON_WAIT_MS);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "accepted bad arguments (status %d)", st);
    read_some(err, msg, sizeof msg, 1000);
    cr_assert(strstr(msg, phrase), "stderr '%s' lacks '%s'", msg, phrase);
    close(out);
    close(err);
}

Test(scheduler_daemon, rejects_bad_arguments_with_a_message)
{
    expect_bad_args((const char *[]){"--port", "70000", NULL}, "--port");
    expect_bad_args((const char *[]){"--port", NULL}, "needs a value");
    expect_bad_args((const char *[]){"--allowed-failures", "x", NULL}, "--allowed-failures");
    expect_bad_args((const char *[]){"--heartbeat-interval", "soon", NULL}, "--heartbeat-interval");
    expect_bad_args((const char *[]){"--heartbeat-interval", "2s", "--heartbeat-timeout", "1s", NULL}, "timeout");
    expect_bad_args((const char *[]){"--log-level", "loud", NULL}, "--log-level");
    expect_bad_args((const char *[]){"--host", "not-an-ip", "--port", "0", NULL}, "not-an-ip");
    expect_bad_args((const char *[]){"--frobnicate", NULL}, "unknown option");
    expect_bad_args((const char *[]){"--max-connections", "0", NULL}, "--max-connections");
    expect_bad_args((const char *[]){"--max-connections-per-address", "-1", NULL}, "--max-connections-per-address");
    expect_bad_args((const char *[]){"--frame-memory", "4X", NULL}, "--frame-memory");
    expect_bad_args((const char *[]){"--client-max-frame", "5G", NULL}, "--client-max-frame");
    expect_bad_args((const char *[]){"--client-idle-timeout", "soon", NULL}, "--client-idle-timeout");
}

Test(scheduler_daemon, fails_cleanly_when_the_port_is_taken)
{
    const char *args[] = {"--host", "127.0.0.1", "--port", "0", NULL};
    int out, err, port = 0;
    char line[256];
    pid_t pid = spawn(args, &out, &err);
    cr_assert_gt(read_some(out, line, sizeof line, DAEMON_WAIT_MS), 0);
    cr_assert_eq(sscanf(line, "gsched listening on tcp://127.0.0.1:%d", &port), 1, "line: %s", line);
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    expect_bad_args((const char *[]){"--host", "127.0.0.1", "--port", ps, NULL}, "cannot listen");
    kill(pid, SIGTERM);
    int st = wait_exit(pid, DAEMON_WAIT_MS);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(out);
    close(err);
}

Test(scheduler_daemon, help_exits_zero)
{
    int out, err;
    char text[256];
    pid_t pid = spawn((const char *[]){"--help", NULL}, &out, &err);
    cr_assert_gt(read_some(out, text, sizeof text, DAEMON_WAIT_MS), 0);
    cr_assert(strstr(text, "usage: gsched"), "%s", text);
    int st = wait_exit(pid, DAEMON_WAIT_MS);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(out);
    close(err);
}

/* Whether /proc/net/tcp lists a socket listening on 127.0.0.1:@a port (and none on another
 * address with that port). */
static int listens_on_loopback_only(int port)
{
    char line[512];
    int loopback = 0, other = 0;
    FILE *f = fopen("/proc/net/tcp", "r");
    cr_assert_not_null(f);
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned addr, lport, state;
        if (sscanf(line, " %*d: %8X:%4X %*8X:%*4X %2X", &addr, &lport, &state) != 3) continue;
        if ((int)lport != port || state != 0x0A) continue;   /* TCP_LISTEN */
        if (addr == 0x0100007Fu) loopback = 1;                /* 127.0.0.1, little-endian */
        else other = 1;
    }
    fclose(f);
    return loopback && !other;
}

/* HELLO as a client with @a token; the answer must be @a want_type (an ERROR: GS_ERR_AUTH). */
static void hello_expect(int port, const char *token, uint32_t want_type)
{
    gs_msg_t m;
    int fd = connect_to(port);
    raw_handshake(fd, token, GS_ROLE_CLIENT, "c", &m);
    cr_assert_eq(m.type, want_type, "token '%s'", token);
    if (want_type == GS_MSG_ERROR) cr_assert_eq(m.u.error.status, GS_ERR_AUTH);
    gs_msg_cleanup(&m);
    close(fd);
}

Test(scheduler_daemon, listens_on_loopback_by_default)
{
    const char *args[] = {"--port", "0", NULL};
    int out, err, port = 0;
    char line[256];
    unsetenv("GSCHED_TOKEN");
    pid_t pid = spawn(args, &out, &err);
    cr_assert_gt(read_some(out, line, sizeof line, 5000), 0, "no address line");
    cr_assert_eq(sscanf(line, "gsched listening on tcp://127.0.0.1:%d", &port), 1, "line: %s", line);
    cr_assert(listens_on_loopback_only(port), "port %d is not bound to 127.0.0.1 only", port);
    hello_expect(port, "", GS_MSG_WELCOME);
    kill(pid, SIGTERM);
    int st = wait_exit(pid, 30000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    close(out);
    close(err);
}

Test(scheduler_daemon, refuses_a_non_loopback_address_without_a_token)
{
    int out, err;
    char msg[1024];
    unsetenv("GSCHED_TOKEN");
    pid_t pid = spawn((const char *[]){"--host", "0.0.0.0", "--port", "0", NULL}, &out, &err);
    int st = wait_exit(pid, 30000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status 0x%x", st);
    read_some(err, msg, sizeof msg, 1000);
    cr_assert(strstr(msg, "without a cluster token"), "%s", msg);
    cr_assert(strstr(msg, "$GSCHED_TOKEN") && strstr(msg, "--token-file"), "says not how: %s", msg);
    close(out);
    close(err);
    /* an empty token file is no token either */
    char path[] = "/tmp/gs-test-token-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    expect_bad_args((const char *[]){"--host", "::", "--port", "0", "--token-file", path, NULL}, "is empty");
    close(fd);
    unlink(path);
}

Test(scheduler_daemon, reads_the_token_from_a_file_and_warns_about_one_on_the_command_line)
{
    char path[] = "/tmp/gs-test-token-XXXXXX";
    int out, err, port = 0, st;
    char line[256], msg[1024];
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "filetok\n", 8), 8);
    close(fd);
    unsetenv("GSCHED_TOKEN");
    pid_t pid = spawn((const char *[]){"--host", "0.0.0.0", "--port", "0", "--token-file", path, NULL}, &out, &err);
    cr_assert_gt(read_some(out, line, sizeof line, 5000), 0, "no address line");
    cr_assert_eq(sscanf(line, "gsched listening on tcp://%*[^:]:%d", &port), 1, "line: %s", line);
    hello_expect(port, "", GS_MSG_ERROR);
    hello_expect(port, "filetok\n", GS_MSG_ERROR);
    hello_expect(port, "filetok", GS_MSG_WELCOME);
    kill(pid, SIGTERM);
    st = wait_exit(pid, 30000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    close(out);
    close(err);
    unlink(path);

    pid = spawn((const char *[]){"--host", "127.0.0.1", "--port", "0", "--token", "argtok", NULL}, &out, &err);
    cr_assert_gt(read_some(out, line, sizeof line, 5000), 0, "no address line");
    read_some(err, msg, sizeof msg, 1000);
    cr_assert(strstr(msg, "warning") && strstr(msg, "--token-file"), "no warning: %s", msg);
    kill(pid, SIGTERM);
    st = wait_exit(pid, 30000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    close(out);
    close(err);
}

/* The reproduction: with a 1024-descriptor limit, 2,000 idle connections used to lock
 * real clients out. gsched keeps its connections below the limit (and 512 per address) by
 * closing the oldest connections that have not said hello, so a client still gets in. */
Test(scheduler_daemon, idle_connections_do_not_lock_out_a_client_under_a_1024_fd_limit, .timeout = 60)
{
    enum { NIDLE = 2000 };
    static int fds[NIDLE];
    const char *args[] = {"--host", "127.0.0.1", "--port", "0", "--token", "tok", NULL};
    struct rlimit rl, low;
    int out, err, port = 0;
    char line[256];
    gs_msg_t m;

    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    cr_assert(rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= 2 * NIDLE, "open file hard limit too low");
    low = rl;
    low.rlim_cur = 1024;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    pid_t pid = spawn(args, &out, &err);   /* gsched inherits the 1024 limit */
    low.rlim_cur = 2 * NIDLE + 256;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    cr_assert_gt(read_some(out, line, sizeof line, 5000), 0, "no address line");
    cr_assert_eq(sscanf(line, "gsched listening on tcp://127.0.0.1:%d", &port), 1, "line: %s", line);
    for (int i = 0; i < NIDLE; i++) fds[i] = connect_to(port);

    int fd = connect_to(port);
    raw_handshake(fd, "tok", GS_ROLE_CLIENT, "real", &m);
    cr_assert_eq(m.type, GS_MSG_WELCOME, "type %u: %.*s", m.type,
                 m.type == GS_MSG_ERROR ? (int)m.u.error.message.len : 0,
                 m.type == GS_MSG_ERROR ? (const char *)m.u.error.message.data : "");
    gs_msg_cleanup(&m);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_INFO_REQ;
    th_raw_send(fd, &m);
    cr_assert(recv_msg(fd, &m, 5000));
    cr_assert_eq(m.type, GS_MSG_INFO);
    cr_assert_eq(m.u.info.nclients, 1);
    gs_msg_cleanup(&m);

    kill(pid, SIGTERM);
    int st = wait_exit(pid, 30000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    for (int i = 0; i < NIDLE; i++) close(fds[i]);
    close(fd);
    close(out);
    close(err);
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
}
