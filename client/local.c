/* The "local" address: start a private gs-local-cluster for this client and stop it again.
 *
 * The launcher is started with posix_spawn (safe in multi-threaded programs) with its stdin and
 * stdout connected to pipes. It prints "gs-local-cluster ready tcp://HOST:PORT" once gsched and
 * every worker are up; with --watch-stdin it shuts the whole cluster down when its stdin reaches
 * EOF, i.e. when this process closes the pipe or dies for any reason, so no cluster outlives its
 * client even when the client is killed with SIGKILL. */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "common/time.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define GS__LAUNCHER "gs-local-cluster"
#define GS__READY_PREFIX "gs-local-cluster ready "

static int gs__is_executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static int gs__try_dir(const char *dir, const char *name, char *path, size_t path_len)
{
    int n;
    if (dir == NULL || dir[0] == '\0') return 0;
    n = snprintf(path, path_len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= path_len) return 0;
    return gs__is_executable(path);
}

static void gs__copy_str(char *dst, size_t dst_len, const char *src)
{
    size_t n = strlen(src);
    if (dst_len == 0) return;
    if (n >= dst_len) n = dst_len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

gs_status_t gs__find_executable(const char *name, const char *bin_dir, char *path,
                                size_t path_len, char *dir, size_t dir_len)
{
    char exe_dir[PATH_MAX];
    const char *env_dir = getenv("GS_BIN_DIR");
    const char *env_path = getenv("PATH");
    ssize_t n;

    if (gs__try_dir(bin_dir, name, path, path_len)) {
        gs__copy_str(dir, dir_len, bin_dir);
        return GS_OK;
    }
    if (gs__try_dir(env_dir, name, path, path_len)) {
        gs__copy_str(dir, dir_len, env_dir);
        return GS_OK;
    }
    exe_dir[0] = '\0';
    n = readlink("/proc/self/exe", exe_dir, sizeof(exe_dir) - 1);
    if (n > 0) {
        char *slash;
        exe_dir[n] = '\0';
        slash = strrchr(exe_dir, '/');
        if (slash != NULL) *slash = '\0';
        if (gs__try_dir(exe_dir, name, path, path_len)) {
            gs__copy_str(dir, dir_len, exe_dir);
            return GS_OK;
        }
    } else {
        exe_dir[0] = '\0';
    }
    if (env_path != NULL) {
        const char *p = env_path;
        while (*p != '\0') {
            char one[PATH_MAX];
            size_t len = strcspn(p, ":");
            if (len > 0 && len < sizeof(one)) {
                memcpy(one, p, len);
                one[len] = '\0';
                if (gs__try_dir(one, name, path, path_len)) {
                    gs__copy_str(dir, dir_len, "");
                    return GS_OK;
                }
            }
            p += len;
            if (*p == ':') p++;
        }
    }
    return gs_error_set(GS_ERR_NOT_FOUND,
                        "cannot find the executable '%s' (looked in bin_dir '%s', $GS_BIN_DIR "
                        "'%s', the program's directory '%s' and $PATH)",
                        name, bin_dir ? bin_dir : "", env_dir ? env_dir : "", exe_dir);
}

/* Environment for the launcher: ours, with GSCHED_TOKEN replaced when a token is given (the
 * token then does not appear on any command line the launcher itself was given). */
static char **gs__build_env(const char *token, char **token_var_p)
{
    size_t n = 0, k = 0;
    char **envp;
    while (environ != NULL && environ[n] != NULL) n++;
    envp = gs_calloc(n + 2, sizeof(char *), "local env");
    if (envp == NULL) return NULL;
    *token_var_p = NULL;
    for (size_t i = 0; i < n; i++) {
        if (token != NULL && strncmp(environ[i], "GSCHED_TOKEN=", 13) == 0) continue;
        envp[k++] = environ[i];
    }
    if (token != NULL) {
        size_t len = strlen(token) + 14;
        char *var = gs_malloc(len, "local env token");
        if (var == NULL) {
            gs_free(envp);
            return NULL;
        }
        snprintf(var, len, "GSCHED_TOKEN=%s", token);
        envp[k++] = var;
        *token_var_p = var;
    }
    envp[k] = NULL;
    return envp;
}

static void gs__reap(pid_t pid, double grace_s)
{
    double deadline = gs_now_s() + grace_s;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) return;
        if (gs_now_s() >= deadline) break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    GS_LOG_WARN("local cluster launcher %d did not stop within %.1f s; killing it", (int)pid,
                grace_s);
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
}

static gs_status_t gs__describe_exit(pid_t pid, const char *why)
{
    int st = 0;
    pid_t r;
    /* give the launcher a moment to finish exiting so its status can be reported */
    double deadline = gs_now_s() + 2.0;
    while ((r = waitpid(pid, &st, WNOHANG)) == 0 && gs_now_s() < deadline) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    if (r == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return gs_error_set(GS_ERR_IO, "local cluster did not start: %s", why);
    }
    if (r == pid && WIFEXITED(st))
        return gs_error_set(GS_ERR_IO,
                            "local cluster did not start: %s (gs-local-cluster exited with "
                            "status %d; its messages are on stderr)",
                            why, WEXITSTATUS(st));
    if (r == pid && WIFSIGNALED(st))
        return gs_error_set(GS_ERR_IO,
                            "local cluster did not start: %s (gs-local-cluster killed by signal %d)",
                            why, WTERMSIG(st));
    return gs_error_set(GS_ERR_IO, "local cluster did not start: %s", why);
}

gs_status_t gs__local_start(const char *bin_dir, int nworkers, const char *backend,
                            uint64_t memory_limit, uint64_t device_memory_limit,
                            const char *dashboard, const char *token, double timeout_s,
                            gs__local_t *l)
{
    char path[PATH_MAX], dir[PATH_MAX], nw[32], ml[32], dml[32];
    const char *argv[24];
    int argc = 0;
    int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, deflt;
    char **envp = NULL, *token_var = NULL;
    char line[1024];
    size_t line_len = 0;
    double deadline;
    pid_t pid;
    gs_status_t status;
    int rc;

    if ((status = gs__find_executable(GS__LAUNCHER, bin_dir, path, sizeof(path), dir,
                                      sizeof(dir))) != GS_OK)
        return status;

    argv[argc++] = path;
    argv[argc++] = "--host";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "--port";
    argv[argc++] = "0";
    argv[argc++] = "--watch-stdin";
    if (nworkers > 0) {
        snprintf(nw, sizeof(nw), "%d", nworkers);
        argv[argc++] = "--nworkers";
        argv[argc++] = nw;
    }
    if (backend != NULL) {
        argv[argc++] = "--backend";
        argv[argc++] = backend;
    }
    if (memory_limit > 0) {
        snprintf(ml, sizeof(ml), "%llu", (unsigned long long)memory_limit);
        argv[argc++] = "--memory-limit";
        argv[argc++] = ml;
    }
    if (device_memory_limit > 0) {
        snprintf(dml, sizeof(dml), "%llu", (unsigned long long)device_memory_limit);
        argv[argc++] = "--device-memory-limit";
        argv[argc++] = dml;
    }
    if (dashboard != NULL) {
        argv[argc++] = "--dashboard-address";
        argv[argc++] = dashboard;
    }
    if (dir[0] != '\0') {
        argv[argc++] = "--bin-dir";
        argv[argc++] = dir;
    }
    argv[argc] = NULL;

    if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0) {
        status = gs_error_set(GS_ERR_IO, "cannot create pipes for the local cluster: %s",
                              strerror(errno));
        goto err_pipes;
    }
    envp = gs__build_env(token, &token_var);
    if (envp == NULL) {
        status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory starting the local cluster");
        goto err_pipes;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_pipe[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    sigemptyset(&deflt);
    sigaddset(&deflt, SIGPIPE);
    sigaddset(&deflt, SIGINT);
    sigaddset(&deflt, SIGTERM);
    sigaddset(&deflt, SIGCHLD);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &deflt);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    rc = posix_spawn(&pid, path, &fa, &attr, (char *const *)argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    gs_free(token_var);
    gs_free(envp);
    if (rc != 0) {
        status = gs_error_set(GS_ERR_IO, "cannot start %s: %s", path, strerror(rc));
        goto err_pipes;
    }
    close(in_pipe[0]);
    in_pipe[0] = -1;
    close(out_pipe[1]);
    out_pipe[1] = -1;

    /* read lines until the ready line, EOF or the deadline */
    deadline = gs_now_s() + timeout_s;
    for (;;) {
        struct pollfd pfd = {out_pipe[0], POLLIN, 0};
        double left = deadline - gs_now_s();
        char *nl;
        ssize_t n;
        if (left <= 0) {
            kill(pid, SIGTERM);
            gs__reap(pid, 5.0);
            status = gs_error_set(GS_ERR_TIMED_OUT,
                                  "local cluster was not ready within %.1f s", timeout_s);
            goto err_started;
        }
        rc = poll(&pfd, 1, (int)(left * 1000.0) + 1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) continue;
        if (line_len == sizeof(line) - 1) line_len = 0;  /* overlong line: drop it */
        n = read(out_pipe[0], line + line_len, sizeof(line) - 1 - line_len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            status = gs__describe_exit(pid, "the launcher closed its output before it was ready");
            goto err_started;
        }
        line_len += (size_t)n;
        line[line_len] = '\0';
        while ((nl = memchr(line, '\n', line_len)) != NULL) {
            size_t ll = (size_t)(nl - line);
            *nl = '\0';
            if (strncmp(line, GS__READY_PREFIX, strlen(GS__READY_PREFIX)) == 0) {
                const char *addr = line + strlen(GS__READY_PREFIX);
                if (strlen(addr) >= sizeof(l->address)) {
                    kill(pid, SIGTERM);
                    gs__reap(pid, 5.0);
                    status = gs_error_set(GS_ERR_PROTO, "local cluster printed an overlong address");
                    goto err_started;
                }
                gs__copy_str(l->address, sizeof(l->address), addr);
                close(out_pipe[0]);
                l->pid = pid;
                l->stdin_fd = in_pipe[1];
                return GS_OK;
            }
            memmove(line, nl + 1, line_len - ll - 1);
            line_len -= ll + 1;
        }
    }

err_started:
err_pipes:
    for (int i = 0; i < 2; i++) {
        if (in_pipe[i] >= 0) close(in_pipe[i]);
        if (out_pipe[i] >= 0) close(out_pipe[i]);
    }
    return status;
}

void gs__local_stop(gs__local_t *l)
{
    if (l->pid <= 0) return;
    if (l->stdin_fd >= 0) {
        close(l->stdin_fd);
        l->stdin_fd = -1;
    }
    kill(l->pid, SIGTERM);
    gs__reap(l->pid, 10.0);
    l->pid = 0;
}
