#include "cluster.h"

#include "common/time.h"
#include "deploy/gpuinfo.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define TP_MAX 64

static pid_t tp_pids[TP_MAX];
static int tp_npids;
static int tp_atexit_done;

const char *tp_bin(const char *name, char *buf, size_t len)
{
    const char *dir = getenv("GS_BIN_DIR");
    if (dir != NULL && dir[0] != '\0') {
        snprintf(buf, len, "%s/%s", dir, name);
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        char *slash;
        exe[n > 0 ? n : 0] = '\0';
        slash = strrchr(exe, '/');
        if (slash != NULL) *slash = '\0';
        snprintf(buf, len, "%s/../bin/%s", exe, name);
    }
    return buf;
}

void tp_kill_all(void)
{
    for (int i = 0; i < tp_npids; i++) {
        int st;
        if (tp_pids[i] <= 0) continue;
        kill(tp_pids[i], SIGKILL);
        while (waitpid(tp_pids[i], &st, 0) < 0 && errno == EINTR) {
        }
        tp_pids[i] = 0;
    }
    tp_npids = 0;
}

extern char **environ;

static pid_t tp_spawn_impl(const char *const argv[], int *out_fd, const char *env_token,
                           int capture_err)
{
    int p[2] = {-1, -1};
    pid_t parent = getpid(), pid;
    /* the environment is built before fork: the test may have threads (a client's I/O
     * thread), so the child must not allocate */
    static char *envp[512];
    static char tokvar[256];
    int ne = 0;
    for (int i = 0; environ[i] != NULL && ne < 510; i++)
        if (strncmp(environ[i], "GSCHED_TOKEN=", 13) != 0) envp[ne++] = environ[i];
    if (env_token != NULL) {
        snprintf(tokvar, sizeof(tokvar), "GSCHED_TOKEN=%s", env_token);
        envp[ne++] = tokvar;
    }
    envp[ne] = NULL;
    if (!tp_atexit_done) {
        atexit(tp_kill_all);
        signal(SIGPIPE, SIG_IGN);
        tp_atexit_done = 1;
    }
    if (tp_npids >= TP_MAX) return -1;
    if (out_fd != NULL && pipe2(p, O_CLOEXEC) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        if (p[1] >= 0) {
            dup2(p[1], STDOUT_FILENO);
            if (capture_err) dup2(p[1], STDERR_FILENO);
        } else
            dup2(STDERR_FILENO, STDOUT_FILENO);
        signal(SIGPIPE, SIG_DFL);
        execve(argv[0], (char *const *)argv, envp);
        _exit(127);
    }
    if (p[1] >= 0) close(p[1]);
    if (out_fd != NULL) *out_fd = p[0];
    tp_pids[tp_npids++] = pid;
    return pid;
}

pid_t tp_spawn(const char *const argv[], int *out_fd, const char *env_token)
{
    return tp_spawn_impl(argv, out_fd, env_token, 0);
}

pid_t tp_spawn_capture(const char *const argv[], int *out_fd, const char *env_token)
{
    return tp_spawn_impl(argv, out_fd, env_token, 1);
}

size_t tp_read_all(int fd, char *buf, size_t len, double timeout_s)
{
    double deadline = gs_now_s() + timeout_s;
    size_t n = 0;
    buf[0] = '\0';
    while (n + 1 < len) {
        struct pollfd pfd = {fd, POLLIN, 0};
        double left = deadline - gs_now_s();
        ssize_t r;
        if (left <= 0) break;
        if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0) continue;
        r = read(fd, buf + n, len - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
        buf[n] = '\0';
    }
    return n;
}

int tp_read_line(int fd, const char *prefix, char *rest, size_t rest_len, char *seen,
                 size_t seen_len, double timeout_s)
{
    char buf[4096];
    size_t len = 0;
    double deadline = gs_now_s() + timeout_s;
    if (seen != NULL && seen_len > 0) seen[0] = '\0';
    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        double left = deadline - gs_now_s();
        ssize_t n;
        char *nl;
        if (left <= 0) return 0;
        if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0) continue;
        if (len == sizeof(buf) - 1) len = 0;
        n = read(fd, buf + len, sizeof(buf) - 1 - len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        len += (size_t)n;
        buf[len] = '\0';
        while ((nl = memchr(buf, '\n', len)) != NULL) {
            size_t ll = (size_t)(nl - buf);
            *nl = '\0';
            if (strncmp(buf, prefix, strlen(prefix)) == 0) {
                snprintf(rest, rest_len, "%s", buf + strlen(prefix));
                return 1;
            }
            if (seen != NULL && strlen(seen) + ll + 2 < seen_len) {
                strcat(seen, buf);
                strcat(seen, "\n");
            }
            memmove(buf, nl + 1, len - ll - 1);
            len -= ll + 1;
        }
    }
}

int tp_wait_exit(pid_t pid, int *status_p, double timeout_s)
{
    double deadline = gs_now_s() + timeout_s;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            for (int i = 0; i < tp_npids; i++)
                if (tp_pids[i] == pid) tp_pids[i] = 0;
            if (status_p != NULL) *status_p = st;
            return 1;
        }
        if (r < 0 && errno != EINTR) return 0;
        if (gs_now_s() > deadline) return 0;
        usleep(2000);
    }
}

static int tp_stat(pid_t pid, char *state_p, pid_t *ppid_p)
{
    char path[64], buf[512], *rp;
    FILE *f;
    size_t n;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    rp = strrchr(buf, ')');   /* the command name may hold spaces and parentheses */
    if (rp == NULL) return 0;
    {
        char st;
        int ppid;
        if (sscanf(rp + 1, " %c %d", &st, &ppid) != 2) return 0;
        if (state_p != NULL) *state_p = st;
        if (ppid_p != NULL) *ppid_p = ppid;
    }
    return 1;
}

int tp_alive(pid_t pid)
{
    char st;
    if (!tp_stat(pid, &st, NULL)) return 0;
    return st != 'Z' && st != 'X';
}

int tp_children(pid_t parent, pid_t *out, int max)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    if (d == NULL) return 0;
    while ((e = readdir(d)) != NULL) {
        char *end, st;
        long pid = strtol(e->d_name, &end, 10);
        pid_t ppid;
        if (*end != '\0' || pid <= 0) continue;
        if (!tp_stat((pid_t)pid, &st, &ppid)) continue;
        if (ppid == parent && st != 'Z' && st != 'X' && n < max) out[n++] = (pid_t)pid;
    }
    closedir(d);
    return n;
}

/* $GS_TEST_TLS=1: one certificate (IP 127.0.0.1, no usage restriction) and its CA, made once
 * per test process by the openssl CLI, used by gsched, the workers and the clients. */
static char tc_tls_dir[64];
static char tc_tls_ca[PATH_MAX], tc_tls_cert[PATH_MAX], tc_tls_key[PATH_MAX];

static void tc_tls_remove(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tc_tls_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tc_tls_dir);
}

/* 1 when the cluster runs with TLS (files ready), 0 without; -1 when they cannot be made. */
static int tc_tls(void)
{
    static const char *script =
        "set -e; cd \"$1\"; exec 2>gen.log\n"
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem "
        "-days 2 -subj /CN=gs-test-ca -addext basicConstraints=critical,CA:TRUE\n"
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout node.key -out node.csr "
        "-subj /CN=node\n"
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > node.ext\n"
        "openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out node.pem "
        "-extfile node.ext\n";
    const char *env = getenv("GS_TEST_TLS");
    char sh[PATH_MAX], cmd[2 * PATH_MAX + 16];
    size_t n;
    FILE *f;
    if (env == NULL || strcmp(env, "1") != 0) return 0;
    if (tc_tls_dir[0] != '\0') return 1;
    snprintf(tc_tls_dir, sizeof(tc_tls_dir), "/tmp/gs-tc-tls-XXXXXX");
    if (mkdtemp(tc_tls_dir) == NULL) return -1;
    atexit(tc_tls_remove);
    n = strlen(tc_tls_dir);
    memcpy(sh, tc_tls_dir, n);
    memcpy(sh + n, "/gen.sh", 8);
    memcpy(tc_tls_ca, tc_tls_dir, n);
    memcpy(tc_tls_ca + n, "/ca.pem", 8);
    memcpy(tc_tls_cert, tc_tls_dir, n);
    memcpy(tc_tls_cert + n, "/node.pem", 10);
    memcpy(tc_tls_key, tc_tls_dir, n);
    memcpy(tc_tls_key + n, "/node.key", 10);
    if ((f = fopen(sh, "w")) == NULL) return -1;
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "sh %s %s", sh, tc_tls_dir);
    return system(cmd) == 0 ? 1 : -1;
}

/* Append the TLS options (gsched: @a server, with client certificates required). */
static int tc_tls_args(const char **argv, int ac, int server)
{
    if (tc_tls() != 1) return ac;
    argv[ac++] = "--tls-ca-file";
    argv[ac++] = tc_tls_ca;
    argv[ac++] = "--tls-cert";
    argv[ac++] = tc_tls_cert;
    argv[ac++] = "--tls-key";
    argv[ac++] = tc_tls_key;
    if (server) argv[ac++] = "--tls-require-client-cert";
    return ac;
}

gs_client_h tc_connect(const tcluster_t *c, unsigned lower_flags)
{
    gs_client_params_t p;
    gs_client_h client = NULL;
    memset(&p, 0, sizeof(p));
    p.address = c->address;
    p.field_mask = GS_CLIENT_FIELD_TOKEN | GS_CLIENT_FIELD_LOWER_FLAGS | GS_CLIENT_FIELD_TIMEOUT;
    p.token = c->token;
    p.lower_flags = lower_flags;
    p.timeout_s = 20.0;
    if (tc_tls() == 1) {
        p.field_mask |= GS_CLIENT_FIELD_TLS;
        p.tls_ca_file = tc_tls_ca;
        p.tls_cert = tc_tls_cert;
        p.tls_key = tc_tls_key;
    }
    if (gs_client_connect(&p, &client) != GS_OK) return NULL;
    return client;
}

/* Workers run the CPU backend unless $GS_TEST_BACKEND=cuda: then worker k uses GPU
 * k % (visible GPUs), with a small device arena so that several share one GPU. */
pid_t tc_add_worker(tcluster_t *c, const char *name)
{
    return tc_add_worker_args(c, name, NULL);
}

pid_t tc_add_worker_args(tcluster_t *c, const char *name, const char *const *extra)
{
    char bin[PATH_MAX], dev[16];
    const char *backend = getenv("GS_TEST_BACKEND");
    const char *argv[32];
    int ac = 0;
    pid_t pid;
    argv[ac++] = tp_bin("gworker", bin, sizeof(bin));
    argv[ac++] = c->address;
    argv[ac++] = "--name";
    argv[ac++] = name;
    if (backend != NULL && strcmp(backend, "cuda") == 0) {
        gs_gpu_t gpus[GS_GPU_MAX];
        int n = gs_gpu_discover(gpus);
        snprintf(dev, sizeof(dev), "%d", n > 0 ? c->nworkers % n : 0);
        argv[ac++] = "--backend";
        argv[ac++] = "cuda";
        argv[ac++] = "--device";
        argv[ac++] = dev;
        argv[ac++] = "--device-memory-limit";
        argv[ac++] = "2GiB";
    } else {
        argv[ac++] = "--backend";
        argv[ac++] = "cpu";
        argv[ac++] = "--nthreads";
        argv[ac++] = "1";
    }
    ac = tc_tls_args(argv, ac, 0);
    for (int i = 0; extra != NULL && extra[i] != NULL && ac < 31; i++) argv[ac++] = extra[i];
    argv[ac] = NULL;
    if (c->nworkers >= TC_MAX_WORKERS) return -1;
    pid = tp_spawn(argv, NULL, c->token);
    if (pid > 0) c->workers[c->nworkers++] = pid;
    return pid;
}

int tc_start(tcluster_t *c, int nworkers, const char *token, const char *const *sched_args)
{
    char bin[PATH_MAX];
    const char *argv[32];
    int ac = 0;
    gs_client_h client;
    gs_status_t st;

    memset(c, 0, sizeof(*c));
    if (tc_tls() < 0) return 0;  /* $GS_TEST_TLS=1 and openssl could not make the certificates */
    c->token = token;
    argv[ac++] = tp_bin("gsched", bin, sizeof(bin));
    argv[ac++] = "--host";
    argv[ac++] = "127.0.0.1";
    argv[ac++] = "--port";
    argv[ac++] = "0";
    ac = tc_tls_args(argv, ac, 1);
    for (int i = 0; sched_args != NULL && sched_args[i] != NULL && ac < 30; i++)
        argv[ac++] = sched_args[i];
    argv[ac] = NULL;
    c->sched = tp_spawn(argv, &c->sched_out, token);
    if (c->sched < 0) return 0;
    {
        char addr[96];
        if (!tp_read_line(c->sched_out, "gsched listening on ", addr, sizeof(addr), NULL, 0, 20.0))
            return 0;
        snprintf(c->address, sizeof(c->address), "%s", addr);
    }
    for (int i = 0; i < nworkers; i++) {
        char name[32];
        snprintf(name, sizeof(name), "w%d", i);
        if (tc_add_worker(c, name) < 0) return 0;
    }
    if ((client = tc_connect(c, GS_LOWER_DEFAULT)) == NULL) return 0;
    st = gs_client_wait_for_workers(client, nworkers, 30.0);
    gs_client_destroy(client);
    return st == GS_OK;
}
