/* The gworker executable: argument errors, help, and its life against a fake scheduler. */
#include "fake_sched.h"

#include "common/log.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Bounds each wait on the gworker process (registration, exit): generous, since a loaded
 * machine (and ASan) slows a spawned daemon by seconds. */
#define DAEMON_WAIT_MS 30000

TestSuite(worker_daemon, .timeout = 60);

static char gworker_path[4096];

static void find_gworker(void)
{
    const char *dir = getenv("GS_BIN_DIR");
    cr_assert_not_null(dir, "GS_BIN_DIR is not set (run the tests through ctest)");
    snprintf(gworker_path, sizeof(gworker_path), "%s/gworker", dir);
    cr_assert_eq(access(gworker_path, X_OK), 0, "%s is not executable", gworker_path);
}

/* Spawn gworker with @a args (NULL-terminated, without argv[0]); stderr goes to a pipe. */
static pid_t spawn_gworker(const char *const *args, int *err_fd_p)
{
    char *argv[40];
    int n = 0, fds[2];
    posix_spawn_file_actions_t fa;
    pid_t pid;
    argv[n++] = gworker_path;
    for (; *args && n < 39; args++) argv[n++] = (char *)*args;
    argv[n] = NULL;
    cr_assert_eq(pipe(fds), 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    /* nothing else of the test runner (its IPC descriptors) leaks into gworker */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    cr_assert_eq(posix_spawn(&pid, gworker_path, &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    *err_fd_p = fds[0];
    return pid;
}

static void drain(int fd, char *buf, size_t cap, size_t *len)
{
    ssize_t r;
    while (*len + 1 < cap && (r = read(fd, buf + *len, cap - 1 - *len)) > 0) *len += (size_t)r;
    buf[*len] = '\0';
}

/* Wait for exit (running @a fs's loop meanwhile when given); returns the exit code, or -1 on
 * timeout (the process is then killed), or 128+signal. */
static int wait_exit(pid_t pid, fake_sched_t *fs, int timeout_ms, int err_fd, char *err,
                     size_t cap)
{
    size_t len = 0;
    int status;
    uint64_t end = uv_hrtime() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        drain(err_fd, err, cap, &len);
        if (r == pid) break;
        if (uv_hrtime() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            close(err_fd);
            return -1;
        }
        if (fs) fs_run_for(fs, 10);
        else usleep(10000);
    }
    drain(err_fd, err, cap, &len);
    close(err_fd);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

static void expect_bad(const char *needle, const char *const *args)
{
    char err[4096];
    int fd;
    pid_t pid = spawn_gworker(args, &fd);
    int rc = wait_exit(pid, NULL, DAEMON_WAIT_MS, fd, err, sizeof(err));
    cr_assert_eq(rc, 2, "exit code %d for '%s' (stderr: %s)", rc, args[0] ? args[0] : "", err);
    cr_assert(strstr(err, needle) != NULL, "stderr lacks '%s': %s", needle, err);
}

Test(worker_daemon, rejects_bad_arguments, .init = find_gworker)
{
    expect_bad("no scheduler address", (const char *const[]){NULL});
    expect_bad("unknown option '--bogus'", (const char *const[]){"tcp://127.0.0.1:1", "--bogus", NULL});
    expect_bad("--nthreads: 'x' is not an integer",
               (const char *const[]){"tcp://127.0.0.1:1", "--nthreads", "x", NULL});
    expect_bad("--memory-limit: memory size '12 parsecs'",
               (const char *const[]){"tcp://127.0.0.1:1", "--memory-limit", "12 parsecs", NULL});
    expect_bad("--backend: 'opencl' is not cpu or cuda",
               (const char *const[]){"tcp://127.0.0.1:1", "--backend", "opencl", NULL});
    expect_bad("scheduler address 'nowhere'", (const char *const[]){"nowhere", NULL});
    expect_bad("--log-level", (const char *const[]){"tcp://127.0.0.1:1", "--log-level", "chatty", NULL});
}

Test(worker_daemon, prints_help, .init = find_gworker)
{
    char err[256];
    int fd;
    pid_t pid = spawn_gworker((const char *const[]){"--help", NULL}, &fd);
    cr_assert_eq(wait_exit(pid, NULL, DAEMON_WAIT_MS, fd, err, sizeof(err)), 0);
}

Test(worker_daemon, exits_nonzero_when_the_scheduler_is_unreachable, .init = find_gworker)
{
    char err[8192];
    int fd;
    pid_t pid = spawn_gworker((const char *const[]){"tcp://127.0.0.1:1", "--connect-timeout",
                                                    "300", NULL}, &fd);
    int rc = wait_exit(pid, NULL, DAEMON_WAIT_MS, fd, err, sizeof(err));
    cr_assert_eq(rc, 1, "exit code %d (stderr: %s)", rc, err);
    cr_assert(strstr(err, "cannot connect to gsched"), "stderr: %s", err);
}

typedef struct daemon_ctx {
    uv_loop_t loop;
    fake_sched_t fs;
    char addr[64];
} daemon_ctx_t;

static void daemon_up(daemon_ctx_t *d)
{
    find_gworker();
    gs_log_set_level(GS_LOG_LEVEL_ERROR);
    cr_assert_eq(uv_loop_init(&d->loop), 0);
    fs_start(&d->fs, &d->loop, "tok");
    fs_addr(&d->fs, d->addr, sizeof(d->addr));
}

static void daemon_down(daemon_ctx_t *d)
{
    fs_stop(&d->fs);
    uv_run(&d->loop, UV_RUN_NOWAIT);
    uv_loop_close(&d->loop);
}

/* gworker named "dw" on the fake scheduler, with @a extra (NULL or one more argument). */
static pid_t start_daemon_with(daemon_ctx_t *d, int *fd, const char *extra)
{
    pid_t pid;
    setenv("GSCHED_TOKEN", "tok", 1);
    pid = spawn_gworker((const char *const[]){d->addr, "--nthreads", "1", "--name", "dw",
                                              "--memory-limit", "64MiB", extra, NULL}, fd);
    unsetenv("GSCHED_TOKEN");
    cr_assert(fs_wait_registered(&d->fs, 1, DAEMON_WAIT_MS), "gworker did not register");
    cr_assert_str_eq(d->fs.peers[0]->name, "dw");
    cr_assert_eq(d->fs.peers[0]->memory_limit, 64u << 20);
    return pid;
}

static pid_t start_daemon(daemon_ctx_t *d, int *fd)
{
    return start_daemon_with(d, fd, NULL);
}

Test(worker_daemon, exits_0_on_shutdown)
{
    daemon_ctx_t d;
    char err[8192];
    int fd, rc;
    gs_msg_t m;
    pid_t pid;
    daemon_up(&d);
    pid = start_daemon(&d, &fd);
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_SHUTDOWN;
    fs_send(&d.fs, 0, &m);
    rc = wait_exit(pid, &d.fs, DAEMON_WAIT_MS, fd, err, sizeof(err));
    cr_assert_eq(rc, 0, "exit code %d (stderr: %s)", rc, err);
    daemon_down(&d);
}

Test(worker_daemon, exits_0_on_sigterm)
{
    daemon_ctx_t d;
    char err[8192];
    int fd, rc;
    pid_t pid;
    daemon_up(&d);
    pid = start_daemon(&d, &fd);
    kill(pid, SIGTERM);
    rc = wait_exit(pid, &d.fs, DAEMON_WAIT_MS, fd, err, sizeof(err));
    cr_assert_eq(rc, 0, "exit code %d (stderr: %s)", rc, err);
    daemon_down(&d);
}

Test(worker_daemon, exits_nonzero_when_the_scheduler_connection_is_lost)
{
    daemon_ctx_t d;
    char err[8192];
    int fd, rc;
    pid_t pid;
    daemon_up(&d);
    pid = start_daemon_with(&d, &fd, "--no-rejoin");
    gs_conn_close(d.fs.peers[0]->conn, GS_ERR_CANCELED);
    rc = wait_exit(pid, &d.fs, DAEMON_WAIT_MS, fd, err, sizeof(err));
    cr_assert_eq(rc, 1, "exit code %d (stderr: %s)", rc, err);
    cr_assert(strstr(err, "lost the connection to gsched"), "stderr: %s", err);
    daemon_down(&d);
}

typedef struct hb_wait {
    fs_peer_t *peer;
    uint64_t n;
} hb_wait_t;

static int heartbeats_pred(void *arg)
{
    hb_wait_t *h = arg;
    return h->peer->nheartbeats >= h->n;
}

/* A second connection (the fake scheduler forgets the closed first one's registration) has
 * registered. */
static int second_registered(void *arg)
{
    fake_sched_t *fs = arg;
    return fs->npeers >= 2 && fs->peers[1]->registered;
}

/* gsched dropping a registered worker (as after a pause past its heartbeat timeout) makes the
 * worker drop its chunks and tasks and register again under a fresh id. */
Test(worker_daemon, rejoins_as_a_new_incarnation_when_the_connection_is_lost)
{
    daemon_ctx_t d;
    char err[16384];
    int fd, rc, place[64] = {0};
    int64_t shape[2] = {64, 64}, chunks[2] = {32, 32};
    gs_array_h a;
    gs_taskgraph_t *tg;
    double *ref;
    size_t size;
    hb_wait_t hb;
    pid_t pid;

    daemon_up(&d);
    pid = start_daemon(&d, &fd);
    cr_assert_eq(gs_array_random_normal(3, 0.0, 1.0, 2, shape, chunks, &a), GS_OK);
    tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    cr_assert_eq(fs_run_graph(&d.fs, 1, tg, place, 0, DAEMON_WAIT_MS), 0);
    hb.peer = d.fs.peers[0];
    hb.n = hb.peer->nheartbeats + 1;
    cr_assert(fs_run_until(&d.fs, heartbeats_pred, &hb, DAEMON_WAIT_MS));
    cr_assert_gt(hb.peer->last_hb.mem_used, 0, "the first incarnation holds no chunks");

    gs_conn_close(d.fs.peers[0]->conn, GS_ERR_CANCELED);
    if (!fs_run_until(&d.fs, second_registered, &d.fs, DAEMON_WAIT_MS)) {
        kill(pid, SIGTERM);
        rc = wait_exit(pid, &d.fs, DAEMON_WAIT_MS, fd, err, sizeof(err));
        cr_assert_fail("gworker did not register again (exit %d, stderr: %s)", rc, err);
    }
    cr_assert_str_eq(d.fs.peers[1]->name, "dw");
    cr_assert_neq(d.fs.peers[1]->id, d.fs.peers[0]->id, "the new incarnation reused the id");
    hb.peer = d.fs.peers[1];
    hb.n = 1;
    cr_assert(fs_run_until(&d.fs, heartbeats_pred, &hb, DAEMON_WAIT_MS), "no heartbeat");
    cr_assert_eq(hb.peer->last_hb.mem_used, 0, "chunks survived the rejoin");
    cr_assert_eq(hb.peer->last_hb.executing, 0);
    cr_assert_eq(hb.peer->last_hb.queued, 0);

    kill(pid, SIGTERM);
    rc = wait_exit(pid, &d.fs, DAEMON_WAIT_MS, fd, err, sizeof(err));
    cr_assert_eq(rc, 0, "exit code %d (stderr: %s)", rc, err);
    cr_assert(strstr(err, "rejoining as a new incarnation"), "stderr: %s", err);
    free(ref);
    gs_taskgraph_free(tg);
    gs_array_release(a);
    daemon_down(&d);
}
