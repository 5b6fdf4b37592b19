/* gs-local-cluster: start gsched and one gworker per visible GPU (or N CPU workers) on this
 * machine, print the scheduler's address once every worker has registered, and stop them all
 * again on SIGINT/SIGTERM/SIGHUP, on EOF of stdin (--watch-stdin), or when gsched dies. A
 * worker that exits unexpectedly (nonzero status, e.g. 75 after a lost device, or a signal) is
 * started again with the same GPU and options after a backoff, up to --restart-limit times per
 * window (deploy/restart.h); past the limit, or with --restart-limit 0, or when a worker exits
 * with status 0, the cluster stops.
 *
 * Process hygiene: the daemons run in their own process group (led by gsched), are killed as a
 * group on exit, and each is started with PR_SET_PDEATHSIG so that even a SIGKILL of this
 * launcher leaves nothing behind. */
#include "deploy/gpuinfo.h"
#include "deploy/restart.h"

#include "common/log.h"
#include "common/token.h"
#include "common/time.h"
#include "proto/conn.h"
#include "worker/worker.h"

#include <gsched/client.h>
#include <gsched/config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GS__MAX_WORKERS 1024
#define GS__LISTEN_PREFIX "gsched listening on "

typedef struct gs__child {
    pid_t pid;
    int alive;
    char name[64];
    char cvd[GS_GPU_MAX * 100];   /* CUDA_VISIBLE_DEVICES given to it ("" for cpu) */
    int numa_node;
    /* workers: what a restart needs (the same command line, GPU and CPUs) */
    char *av[40];
    char nth[16], share[16];
    cpu_set_t cpus;
    int have_cpus, use_cuda;
    gs_restart_hist_t restarts;
    double restart_at;          /* > 0: dead, to be started again at this time */
} gs__child_t;

typedef struct gs__opts {
    const char *host;
    int port;
    int nworkers;               /* 0 = default */
    const char *backend;        /* NULL = default */
    int nthreads;               /* 0 = default */
    const char *memory_limit;
    const char *device_memory_limit;
    const char *token;
    int token_generated;        /* token made here: printed on stdout for our own clients */
    const char *log_level;
    const char *dashboard;     /* --dashboard-address, NULL = gsched's default */
    const char *bin_dir;
    int watch_stdin;
    double ready_timeout_s;
    int affinity;
    const char *tls_ca_file, *tls_cert, *tls_key;  /* all or none */
    int tls_require_client_cert;
    gs_restart_policy_t restart;
} gs__opts_t;

static gs__child_t g_sched;
static gs__child_t g_workers[GS__MAX_WORKERS];
static int g_nworkers;
static pid_t g_pgid;

static void gs__usage(FILE *f)
{
    fprintf(f,
            "usage: gs-local-cluster [options]\n"
            "Start gsched and its workers on this machine; print\n"
            "  gs-local-cluster ready tcp://HOST:PORT\n"
            "(preceded by 'gs-local-cluster token TOKEN' when the token was generated here)\n"
            "when every worker has registered; stop them all on SIGINT/SIGTERM or if one dies.\n"
            "\n"
            "  --host HOST               address gsched binds to (default 127.0.0.1)\n"
            "  --port PORT               gsched port, 0 = any free port (default 8786)\n"
            "  --nworkers N              workers to start (default: one per visible GPU with\n"
            "                            --backend cuda, else 2)\n"
            "  --backend cpu|cuda        worker backend (default: cuda when a GPU is visible and\n"
            "                            the build has CUDA, else cpu)\n"
            "  --nthreads N              threads per worker (default: cpu: cores / workers)\n"
            "  --memory-limit SIZE       host memory limit per worker (passed to gworker;\n"
            "                            default: what this host or cgroup allows / workers)\n"
            "  --device-memory-limit SIZE  device memory per GPU worker (passed to gworker)\n"
            "  --token-file PATH         read the cluster token from PATH (default:\n"
            "                            $GSCHED_TOKEN, else a fresh random token for this\n"
            "                            cluster); handed to the daemons through $GSCHED_TOKEN,\n"
            "                            never on their command lines\n"
            "  --token TOKEN             the token on this command line: visible to every user\n"
            "                            (ps); prefer $GSCHED_TOKEN or --token-file\n"
            "  --log-level LEVEL         fatal|error|warn|info|debug|trace (all processes)\n"
            "  --dashboard-address A     gsched's dashboard HOST:PORT, or none (default: gsched's,\n"
            "                            127.0.0.1:8787 or a free port); its URL is printed\n"
            "  --bin-dir DIR             where gsched and gworker are (default: $GS_BIN_DIR,\n"
            "                            this program's directory, then $PATH)\n"
            "  --watch-stdin             stop everything when stdin reaches EOF\n"
            "  --ready-timeout SECONDS   give up if not ready by then (default 60)\n"
            "  --no-affinity             do not pin GPU workers to their GPU's NUMA node\n"
            "  --restart-limit N         restart a worker that exits with a nonzero status (75:\n"
            "                            its device was lost) or a signal, same GPU and options,\n"
            "                            at most N times per worker in 600 s (default 5, at most\n"
            "                            64); 0: stop the cluster instead\n"
            "  --restart-delay SECONDS   first backoff before a restart, doubling per restart in\n"
            "                            the window up to max(8, SECONDS) (default 0.5)\n"
            "  --tls-ca-file F --tls-cert F --tls-key F  TLS on every control connection: gsched\n"
            "                            serves this certificate (its IP or name must match the\n"
            "                            address workers use: 127.0.0.1 for a loopback or wildcard\n"
            "                            --host), the workers and this program present it as their\n"
            "                            client certificate and trust the CA file\n"
            "  --tls-require-client-cert gsched refuses peers without a certificate from the CA\n"
            "  --help                    this text\n"
            "  --version                 print the version and whether the build has CUDA\n");
}

static int gs__parse_int(const char *opt, const char *s, long lo, long hi, long *v)
{
    char *end;
    long x;
    errno = 0;
    x = strtol(s, &end, 10);
    if (s[0] == '\0' || *end != '\0' || errno != 0 || x < lo || x > hi) {
        fprintf(stderr, "gs-local-cluster: %s expects an integer in [%ld, %ld], not '%s'\n", opt,
                lo, hi, s);
        return 0;
    }
    *v = x;
    return 1;
}

/* Append the TLS options of @a o to a gsched (@a server) or gworker command line. */
static void gs__tls_args(const gs__opts_t *o, char **av, int *ac, int server)
{
    if (o->tls_ca_file == NULL) return;
    av[(*ac)++] = "--tls-ca-file";
    av[(*ac)++] = (char *)o->tls_ca_file;
    av[(*ac)++] = "--tls-cert";
    av[(*ac)++] = (char *)o->tls_cert;
    av[(*ac)++] = "--tls-key";
    av[(*ac)++] = (char *)o->tls_key;
    if (server && o->tls_require_client_cert) av[(*ac)++] = "--tls-require-client-cert";
}

static int gs__parse_opts(int argc, char **argv, gs__opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8786;
    o->ready_timeout_s = 60.0;
    o->affinity = 1;
    o->token = getenv("GSCHED_TOKEN");
    gs_restart_policy_default(&o->restart);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        long v;
#define GS__NEEDS_VALUE()                                                                   \
    do {                                                                                    \
        if (i + 1 >= argc) {                                                                \
            fprintf(stderr, "gs-local-cluster: option %s needs a value\n", a);              \
            return 2;                                                                       \
        }                                                                                   \
        val = argv[++i];                                                                    \
    } while (0)
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            gs__usage(stdout);
            return 1;
        } else if (strcmp(a, "--version") == 0) {
            printf("gs-local-cluster %s\n", GS_VERSION_DESCRIPTION);
            return 1;
        } else if (strcmp(a, "--host") == 0) {
            GS__NEEDS_VALUE();
            if (val[0] == '\0') {
                fprintf(stderr, "gs-local-cluster: --host must not be empty\n");
                return 2;
            }
            o->host = val;
        } else if (strcmp(a, "--port") == 0) {
            GS__NEEDS_VALUE();
            if (!gs__parse_int(a, val, 0, 65535, &v)) return 2;
            o->port = (int)v;
        } else if (strcmp(a, "--nworkers") == 0) {
            GS__NEEDS_VALUE();
            if (!gs__parse_int(a, val, 1, GS__MAX_WORKERS, &v)) return 2;
            o->nworkers = (int)v;
        } else if (strcmp(a, "--backend") == 0) {
            GS__NEEDS_VALUE();
            if (strcmp(val, "cpu") != 0 && strcmp(val, "cuda") != 0) {
                fprintf(stderr, "gs-local-cluster: --backend must be cpu or cuda, not '%s'\n", val);
                return 2;
            }
            o->backend = val;
        } else if (strcmp(a, "--nthreads") == 0) {
            GS__NEEDS_VALUE();
            if (!gs__parse_int(a, val, 1, 4096, &v)) return 2;
            o->nthreads = (int)v;
        } else if (strcmp(a, "--memory-limit") == 0) {
            GS__NEEDS_VALUE();
            o->memory_limit = val;
        } else if (strcmp(a, "--device-memory-limit") == 0) {
            GS__NEEDS_VALUE();
            o->device_memory_limit = val;
        } else if (strcmp(a, "--token") == 0) {
            GS__NEEDS_VALUE();
            fprintf(stderr, "gs-local-cluster: warning: %s\n", GS_TOKEN_ARGV_WARNING);
            o->token = val;
        } else if (strcmp(a, "--token-file") == 0) {
            static char file_token[GS_TOKEN_BUF_LEN];
            GS__NEEDS_VALUE();
            if (gs_token_read_file(val, file_token, sizeof file_token) != GS_OK) {
                fprintf(stderr, "gs-local-cluster: %s\n", gs_last_error());
                return 2;
            }
            o->token = file_token;
        } else if (strcmp(a, "--log-level") == 0) {
            gs_log_level_t lvl;
            GS__NEEDS_VALUE();
            if (gs_log_level_parse(val, &lvl) != GS_OK) {
                fprintf(stderr, "gs-local-cluster: %s\n", gs_last_error());
                return 2;
            }
            gs_log_set_level(lvl);
            o->log_level = val;
        } else if (strcmp(a, "--tls-ca-file") == 0 || strcmp(a, "--tls-cert") == 0 ||
                   strcmp(a, "--tls-key") == 0) {
            GS__NEEDS_VALUE();
            *(a[6] == 'c' && a[7] == 'a' ? &o->tls_ca_file : a[6] == 'c' ? &o->tls_cert : &o->tls_key) = val;
        } else if (strcmp(a, "--tls-require-client-cert") == 0) {
            o->tls_require_client_cert = 1;
        } else if (strcmp(a, "--dashboard-address") == 0) {
            GS__NEEDS_VALUE();
            o->dashboard = val;
        } else if (strcmp(a, "--bin-dir") == 0) {
            GS__NEEDS_VALUE();
            o->bin_dir = val;
        } else if (strcmp(a, "--watch-stdin") == 0) {
            o->watch_stdin = 1;
        } else if (strcmp(a, "--no-affinity") == 0) {
            o->affinity = 0;
        } else if (strcmp(a, "--restart-limit") == 0) {
            GS__NEEDS_VALUE();
            if (!gs__parse_int(a, val, 0, GS_RESTART_MAX_LIMIT, &v)) return 2;
            o->restart.limit = (int)v;
        } else if (strcmp(a, "--restart-delay") == 0) {
            char *end;
            double d;
            GS__NEEDS_VALUE();
            d = strtod(val, &end);
            if (*end != '\0' || end == val || !(d >= 0.01) || d > 3600) {
                fprintf(stderr, "gs-local-cluster: --restart-delay expects seconds in [0.01, "
                                "3600], not '%s'\n", val);
                return 2;
            }
            o->restart.delay_s = d;
            if (o->restart.max_delay_s < d) o->restart.max_delay_s = d;
        } else if (strcmp(a, "--ready-timeout") == 0) {
            char *end;
            GS__NEEDS_VALUE();
            o->ready_timeout_s = strtod(val, &end);
            if (*end != '\0' || end == val || !(o->ready_timeout_s > 0) ||
                o->ready_timeout_s > 86400) {
                fprintf(stderr, "gs-local-cluster: --ready-timeout expects seconds in (0, 86400], "
                                "not '%s'\n", val);
                return 2;
            }
        } else {
            fprintf(stderr, "gs-local-cluster: unknown option '%s' (see --help)\n", a);
            return 2;
        }
#undef GS__NEEDS_VALUE
    }
    if ((o->tls_ca_file == NULL) != (o->tls_cert == NULL) || (o->tls_cert == NULL) != (o->tls_key == NULL) ||
        (o->tls_require_client_cert && o->tls_ca_file == NULL)) {
        fprintf(stderr, "gs-local-cluster: TLS needs --tls-ca-file, --tls-cert and --tls-key together\n");
        return 2;
    }
    if (o->token == NULL || o->token[0] == '\0') {
        /* no token given: one of our own, so nobody else on this machine can join the cluster */
        static char fresh_token[GS_TOKEN_GENERATED_LEN];
        if (gs_token_generate(fresh_token, sizeof fresh_token) != GS_OK) {
            fprintf(stderr, "gs-local-cluster: %s\n", gs_last_error());
            return 2;
        }
        o->token = fresh_token;
        o->token_generated = 1;
    }
    return 0;
}

static int gs__find_bin(const char *name, const char *bin_dir, char *path, size_t len)
{
    char exe[PATH_MAX];
    const char *dirs[3];
    int nd = 0;
    ssize_t n;
    if (bin_dir != NULL) dirs[nd++] = bin_dir;
    if (getenv("GS_BIN_DIR") != NULL && getenv("GS_BIN_DIR")[0] != '\0') dirs[nd++] = getenv("GS_BIN_DIR");
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        char *slash;
        exe[n] = '\0';
        slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            dirs[nd++] = exe;
        }
    }
    for (int i = 0; i < nd; i++) {
        snprintf(path, len, "%s/%s", dirs[i], name);
        if (access(path, X_OK) == 0) return 1;
    }
    if (getenv("PATH") != NULL) {
        const char *p = getenv("PATH");
        while (*p != '\0') {
            size_t l = strcspn(p, ":");
            if (l > 0 && (int)l < (int)len - 2 - (int)strlen(name)) {
                snprintf(path, len, "%.*s/%s", (int)l, p, name);
                if (access(path, X_OK) == 0) return 1;
            }
            p += l;
            if (*p == ':') p++;
        }
    }
    fprintf(stderr, "gs-local-cluster: cannot find '%s' (looked in --bin-dir, $GS_BIN_DIR, %s and "
                    "$PATH)\n", name, n > 0 ? exe : "this program's directory");
    return 0;
}

/* Start a daemon. @a out_fd >= 0 becomes its stdout (else stdout goes to our stderr).
 * Runs before any thread exists in this process, so the child may call setenv. */
static pid_t gs__spawn(char *const argv[], int out_fd, const char *cvd, const cpu_set_t *cpus,
                       pid_t pgid, const char *token)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "gs-local-cluster: fork failed: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        sigset_t none;
        int devnull;
        setpgid(0, pgid);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);   /* the launcher died before prctl */
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            if (devnull != STDIN_FILENO) close(devnull);
        }
        if (out_fd >= 0) {
            dup2(out_fd, STDOUT_FILENO);
            if (out_fd != STDOUT_FILENO) close(out_fd);
        } else {
            dup2(STDERR_FILENO, STDOUT_FILENO);
        }
        if (cvd != NULL) {
            setenv("CUDA_VISIBLE_DEVICES", cvd, 1);
            setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 0);
        }
        /* the token travels in the environment (both daemons read $GSCHED_TOKEN), never on a
         * command line that `ps` shows */
        if (token != NULL) setenv("GSCHED_TOKEN", token, 1);
        if (cpus != NULL) (void)sched_setaffinity(0, sizeof(*cpus), cpus);
        execv(argv[0], argv);
        fprintf(stderr, "gs-local-cluster: cannot execute %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pgid == 0 ? pid : pgid);   /* also from the parent: no race with kill(-pgid) */
    return pid;
}

/* (Re)start worker @a w with the command line, GPU and CPUs recorded at its first start. */
static pid_t gs__spawn_worker(gs__child_t *w, const char *token)
{
    return gs__spawn(w->av, -1, w->use_cuda ? w->cvd : NULL, w->have_cpus ? &w->cpus : NULL,
                     g_pgid, token);
}

static const char *gs__child_name(pid_t pid)
{
    if (pid == g_sched.pid) return "gsched";
    for (int i = 0; i < g_nworkers; i++)
        if (g_workers[i].pid == pid) return g_workers[i].name;
    return NULL;
}

/* Reap exited children; returns 1 if one of ours died (and writes a description). */
static int gs__reap_any(char *why, size_t why_len)
{
    int died = 0, st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        const char *name = gs__child_name(pid);
        if (name == NULL) continue;
        if (pid == g_sched.pid) g_sched.alive = 0;
        for (int i = 0; i < g_nworkers; i++)
            if (g_workers[i].pid == pid) g_workers[i].alive = 0;
        if (!died) {
            if (WIFEXITED(st))
                snprintf(why, why_len, "%s (pid %d) exited with status %d", name, (int)pid,
                         WEXITSTATUS(st));
            else if (WIFSIGNALED(st))
                snprintf(why, why_len, "%s (pid %d) was killed by signal %d", name, (int)pid,
                         WTERMSIG(st));
            else
                snprintf(why, why_len, "%s (pid %d) stopped", name, (int)pid);
        }
        died = 1;
    }
    return died;
}

/* How a child ended, for the log. */
static void gs__describe_exit(int st, char *buf, size_t len)
{
    if (WIFEXITED(st))
        snprintf(buf, len, "exited with status %d%s", WEXITSTATUS(st),
                 WEXITSTATUS(st) == GS_WORKER_EXIT_DEVICE_LOST ? " (device lost)" : "");
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, len, "stopped");
}

/* Once ready: reap exited children. A worker that exited with a nonzero status or a signal is
 * scheduled for a restart (restart_at) within the policy; returns 1 (and a description in
 * @a why) when the cluster must stop instead: gsched died, a worker exited with status 0, or
 * a worker reached the restart limit. */
static int gs__reap_running(const gs__opts_t *o, char *why, size_t why_len)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        char how[128];
        gs__child_t *w = NULL;
        double delay;
        int n;
        if (pid == g_sched.pid) {
            g_sched.alive = 0;
            gs__describe_exit(st, how, sizeof how);
            snprintf(why, why_len, "gsched (pid %d) %s", (int)pid, how);
            return 1;
        }
        for (int i = 0; i < g_nworkers; i++)
            if (g_workers[i].alive && g_workers[i].pid == pid) w = &g_workers[i];
        if (w == NULL) continue;
        w->alive = 0;
        gs__describe_exit(st, how, sizeof how);
        if (o->restart.limit == 0 || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            snprintf(why, why_len, "%s (pid %d) %s", w->name, (int)pid, how);
            return 1;
        }
        delay = gs_restart_next(&o->restart, &w->restarts, gs_now_s(), &n);
        if (delay < 0) {
            snprintf(why, why_len, "%s (pid %d) %s; restart limit reached (%d restarts in %.0f s, "
                     "--restart-limit %d)", w->name, (int)pid, how, n, o->restart.window_s,
                     o->restart.limit);
            return 1;
        }
        w->restart_at = gs_now_s() + delay;
        fprintf(stderr, "gs-local-cluster: worker %s (pid %d) %s; restarting it in %.1f s "
                        "(restart %d of %d in %.0f s)\n", w->name, (int)pid, how, delay, n,
                o->restart.limit, o->restart.window_s);
    }
    return 0;
}

/* Start the workers whose backoff has passed. Returns the seconds until the next pending
 * restart (a large number when none is pending), or -1 when a fork failed. */
static double gs__restart_due(const gs__opts_t *o)
{
    double now = gs_now_s(), next = 1e9;
    for (int i = 0; i < g_nworkers; i++) {
        gs__child_t *w = &g_workers[i];
        if (w->restart_at <= 0) continue;
        if (w->restart_at > now) {
            if (w->restart_at - now < next) next = w->restart_at - now;
            continue;
        }
        w->restart_at = 0;
        w->pid = gs__spawn_worker(w, o->token);
        if (w->pid < 0) return -1;
        w->alive = 1;
        fprintf(stderr, "gs-local-cluster: worker %s restarted (pid %d)\n", w->name, (int)w->pid);
    }
    return next;
}

static int gs__any_alive(void)
{
    if (g_sched.alive) return 1;
    for (int i = 0; i < g_nworkers; i++)
        if (g_workers[i].alive) return 1;
    return 0;
}

/* Reap the daemons until none is alive (1) or @a deadline passes (0). */
static int gs__wait_all(double deadline)
{
    char why[256];
    for (;;) {
        gs__reap_any(why, sizeof(why));
        if (!gs__any_alive()) return 1;
        if (gs_now_s() >= deadline) return 0;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

/* Stop every daemon. An orderly shutdown first: SIGTERM to gsched alone, which tells its
 * workers to shut down before it closes their connections (so that neither side sees the other
 * vanish and warns); after half of @a grace_s, SIGTERM to the whole group; after @a grace_s,
 * SIGKILL. Reaps all. */
static void gs__stop_all(double grace_s)
{
    double t0 = gs_now_s();
    if (g_pgid <= 0) return;
    if (g_sched.alive) {
        kill(g_sched.pid, SIGTERM);
        if (gs__wait_all(t0 + grace_s / 2)) goto kill_rest;
    }
    kill(-g_pgid, SIGTERM);
    if (!gs__wait_all(t0 + grace_s)) {
        GS_LOG_WARN("daemons still running %.1f s after SIGTERM; killing them", grace_s);
        kill(-g_pgid, SIGKILL);
        if (g_sched.alive) kill(g_sched.pid, SIGKILL);
        for (int i = 0; i < g_nworkers; i++)
            if (g_workers[i].alive) kill(g_workers[i].pid, SIGKILL);
        while (gs__any_alive()) {
            int st;
            pid_t pid = waitpid(-1, &st, 0);
            if (pid < 0 && errno == ECHILD) break;
            if (pid == g_sched.pid) g_sched.alive = 0;
            for (int i = 0; i < g_nworkers; i++)
                if (g_workers[i].pid == pid) g_workers[i].alive = 0;
        }
    }
kill_rest:
    /* anything else of the group (grandchildren) */
    kill(-g_pgid, SIGKILL);
}

/* Read gsched's stdout until its listening line. Returns 1 and the address, 0 on failure. */
static int gs__read_listen(int fd, int sfd, double deadline, char *addr, size_t addr_len)
{
    char buf[1024];
    size_t len = 0;
    for (;;) {
        struct pollfd p[2] = {{fd, POLLIN, 0}, {sfd, POLLIN, 0}};
        double left = deadline - gs_now_s();
        int r;
        if (left <= 0) {
            fprintf(stderr, "gs-local-cluster: gsched did not print its address in time\n");
            return 0;
        }
        r = poll(p, 2, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR) return 0;
        if (r <= 0) continue;
        if (p[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si) && si.ssi_signo != SIGCHLD) {
                fprintf(stderr, "gs-local-cluster: interrupted by signal %u while starting\n",
                        si.ssi_signo);
                return 0;
            }
        }
        if (p[0].revents & (POLLIN | POLLHUP)) {
            ssize_t n;
            char *nl;
            if (len == sizeof(buf) - 1) len = 0;
            n = read(fd, buf + len, sizeof(buf) - 1 - len);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                fprintf(stderr, "gs-local-cluster: gsched exited before it was listening\n");
                return 0;
            }
            len += (size_t)n;
            buf[len] = '\0';
            while ((nl = memchr(buf, '\n', len)) != NULL) {
                size_t ll = (size_t)(nl - buf);
                *nl = '\0';
                if (strncmp(buf, GS__LISTEN_PREFIX, strlen(GS__LISTEN_PREFIX)) == 0) {
                    const char *a = buf + strlen(GS__LISTEN_PREFIX);
                    size_t al = strlen(a);
                    if (al >= addr_len) {
                        fprintf(stderr, "gs-local-cluster: gsched printed an overlong address\n");
                        return 0;
                    }
                    memcpy(addr, a, al + 1);
                    /* forward whatever followed (the dashboard's URL line) like later output */
                    if (len > ll + 1) {
                        ssize_t w = write(STDERR_FILENO, nl + 1, len - ll - 1);
                        (void)w;
                    }
                    return 1;
                }
                fprintf(stderr, "%s\n", buf);
                memmove(buf, nl + 1, len - ll - 1);
                len -= ll + 1;
            }
        }
    }
}

int main(int argc, char **argv)
{
    gs__opts_t o;
    gs_gpu_t gpus[GS_GPU_MAX];
    int ngpus, rc, use_cuda, nworkers, nthreads, sfd, out_pipe[2];
    char gsched_path[PATH_MAX], gworker_path[PATH_MAX], addr[256], worker_addr[300];
    char host[256];
    int port;
    sigset_t mask;
    gs_client_h client = NULL;
    gs_client_params_t cp;
    char why[512];
    double t0 = gs_now_s(), deadline;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int exit_code = 0;

    gs_log_set_component("gs-local-cluster");
    rc = gs__parse_opts(argc, argv, &o);
    if (rc == 1) return 0;
    if (rc != 0) return 2;
    if (ncpu < 1) ncpu = 1;

    ngpus = gs_gpu_discover(gpus);
    if (o.backend != NULL)
        use_cuda = strcmp(o.backend, "cuda") == 0;
    else {
#ifdef GS_HAVE_CUDA
        use_cuda = ngpus > 0;
#else
        use_cuda = 0;
        if (ngpus > 0) GS_LOG_INFO("%d GPU(s) visible but this build has no CUDA backend", ngpus);
#endif
    }
    if (use_cuda) {
        if (ngpus == 0) {
            fprintf(stderr, "gs-local-cluster: --backend cuda but no GPU is visible "
                            "(nvidia driver, nvidia-smi and CUDA_VISIBLE_DEVICES checked)\n");
            return 2;
        }
        nworkers = o.nworkers > 0 ? o.nworkers : ngpus;
        if (nworkers > ngpus) {
            fprintf(stderr, "gs-local-cluster: --nworkers %d but only %d GPU(s) are visible (one "
                            "worker per GPU)\n", nworkers, ngpus);
            return 2;
        }
        nthreads = o.nthreads;
    } else {
        nworkers = o.nworkers > 0 ? o.nworkers : 2;
        nthreads = o.nthreads > 0 ? o.nthreads : (int)(ncpu / nworkers > 0 ? ncpu / nworkers : 1);
    }
    if (!gs__find_bin("gsched", o.bin_dir, gsched_path, sizeof(gsched_path)) ||
        !gs__find_bin("gworker", o.bin_dir, gworker_path, sizeof(gworker_path)))
        return 2;

    /* signals arrive through a signalfd; children get an empty mask back */
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGPIPE);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        fprintf(stderr, "gs-local-cluster: signalfd: %s\n", strerror(errno));
        return 1;
    }
    if (pipe2(out_pipe, O_CLOEXEC) != 0) {
        fprintf(stderr, "gs-local-cluster: pipe: %s\n", strerror(errno));
        return 1;
    }

    /* gsched */
    {
        char port_s[16];
        char *av[24];
        int ac = 0;
        snprintf(port_s, sizeof(port_s), "%d", o.port);
        av[ac++] = gsched_path;
        av[ac++] = "--host";
        av[ac++] = (char *)o.host;
        av[ac++] = "--port";
        av[ac++] = port_s;
        if (o.log_level != NULL) {
            av[ac++] = "--log-level";
            av[ac++] = (char *)o.log_level;
        }
        if (o.dashboard != NULL) {
            av[ac++] = "--dashboard-address";
            av[ac++] = (char *)o.dashboard;
        }
        gs__tls_args(&o, av, &ac, 1);
        av[ac] = NULL;
        g_sched.pid = gs__spawn(av, out_pipe[1], NULL, NULL, 0, o.token);
        if (g_sched.pid < 0) return 1;
        g_sched.alive = 1;
        g_pgid = g_sched.pid;
        snprintf(g_sched.name, sizeof(g_sched.name), "gsched");
        close(out_pipe[1]);
    }
    deadline = t0 + o.ready_timeout_s;
    if (!gs__read_listen(out_pipe[0], sfd, deadline, addr, sizeof(addr))) {
        exit_code = 1;
        goto stop;
    }
    if (gs_addr_parse(addr, host, sizeof(host), &port) != GS_OK) {
        fprintf(stderr, "gs-local-cluster: gsched printed an address I cannot parse: '%s'\n", addr);
        exit_code = 1;
        goto stop;
    }
    /* a wildcard bind is reached through loopback */
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 || strcmp(host, "[::]") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    snprintf(worker_addr, sizeof(worker_addr), "tcp://%s:%d", host, port);

    /* workers */
    g_nworkers = nworkers;
    for (int i = 0; i < nworkers; i++) {
        gs__child_t *w = &g_workers[i];
        char **av = w->av;
        int ac = 0;
        w->have_cpus = 0;
        w->use_cuda = use_cuda;
        w->numa_node = -1;
        w->cvd[0] = '\0';
        av[ac++] = gworker_path;
        av[ac++] = worker_addr;
        av[ac++] = "--backend";
        av[ac++] = use_cuda ? "cuda" : "cpu";
        if (use_cuda) {
            /* rotate the visible list so that this worker's GPU is device 0 and it still sees
             * its peers (for peer copies) */
            size_t off = 0;
            for (int k = 0; k < ngpus; k++) {
                const gs_gpu_t *g = &gpus[(i + k) % ngpus];
                off += (size_t)snprintf(w->cvd + off, sizeof(w->cvd) - off, "%s%s", k ? "," : "",
                                        g->id);
                if (off >= sizeof(w->cvd)) off = sizeof(w->cvd) - 1;
            }
            snprintf(w->name, sizeof(w->name), "gpu-%d", i);
            av[ac++] = "--device";
            av[ac++] = "0";
            w->numa_node = gpus[i].numa_node;
            if (o.affinity && w->numa_node >= 0 && gs_numa_cpuset(w->numa_node, &w->cpus) > 0)
                w->have_cpus = 1;
        } else {
            snprintf(w->name, sizeof(w->name), "cpu-%d", i);
        }
        av[ac++] = "--name";
        av[ac++] = w->name;
        if (nthreads > 0) {
            snprintf(w->nth, sizeof(w->nth), "%d", nthreads);
            av[ac++] = "--nthreads";
            av[ac++] = w->nth;
        }
        if (o.memory_limit != NULL) {
            av[ac++] = "--memory-limit";
            av[ac++] = (char *)o.memory_limit;
        } else {   /* automatic: the workers divide what this host may use */
            snprintf(w->share, sizeof(w->share), "%d", nworkers);
            av[ac++] = "--memory-share";
            av[ac++] = w->share;
        }
        if (o.device_memory_limit != NULL && use_cuda) {
            av[ac++] = "--device-memory-limit";
            av[ac++] = (char *)o.device_memory_limit;
        }
        if (o.log_level != NULL) {
            av[ac++] = "--log-level";
            av[ac++] = (char *)o.log_level;
        }
        gs__tls_args(&o, av, &ac, 0);
        av[ac] = NULL;
        w->pid = gs__spawn_worker(w, o.token);
        if (w->pid < 0) {
            g_nworkers = i;
            exit_code = 1;
            goto stop;
        }
        w->alive = 1;
    }

    /* wait until every worker has registered */
    memset(&cp, 0, sizeof(cp));
    cp.address = worker_addr;
    cp.field_mask = GS_CLIENT_FIELD_TIMEOUT | GS_CLIENT_FIELD_TOKEN;
    cp.token = o.token;
    if (o.tls_ca_file != NULL) {
        cp.field_mask |= GS_CLIENT_FIELD_TLS;
        cp.tls_ca_file = o.tls_ca_file;
        cp.tls_cert = o.tls_cert;
        cp.tls_key = o.tls_key;
    }
    cp.timeout_s = deadline - gs_now_s() > 0.1 ? deadline - gs_now_s() : 0.1;
    if (gs_client_connect(&cp, &client) != GS_OK) {
        fprintf(stderr, "gs-local-cluster: cannot connect to gsched at %s: %s\n", worker_addr,
                gs_last_error());
        exit_code = 1;
        goto stop;
    }
    for (;;) {
        struct signalfd_siginfo si;
        gs_status_t st;
        while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
            if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM || si.ssi_signo == SIGHUP) {
                fprintf(stderr, "gs-local-cluster: interrupted by signal %u while starting\n",
                        si.ssi_signo);
                exit_code = 1;
                goto stop;
            }
        }
        if (gs__reap_any(why, sizeof(why))) {
            fprintf(stderr, "gs-local-cluster: %s while starting\n", why);
            exit_code = 1;
            goto stop;
        }
        st = gs_client_wait_for_workers(client, nworkers, 0.05);
        if (st == GS_OK) break;
        if (st != GS_ERR_TIMED_OUT) {
            fprintf(stderr, "gs-local-cluster: %s\n", gs_last_error());
            exit_code = 1;
            goto stop;
        }
        if (gs_now_s() > deadline) {
            fprintf(stderr, "gs-local-cluster: only %d of %d workers registered within %.1f s\n",
                    gs_client_nworkers(client), nworkers, o.ready_timeout_s);
            exit_code = 1;
            goto stop;
        }
    }
    gs_client_destroy(client);
    client = NULL;

    for (int i = 0; i < nworkers; i++) {
        const gs__child_t *w = &g_workers[i];
        if (use_cuda)
            printf("gs-local-cluster worker %s pid %d backend cuda CUDA_VISIBLE_DEVICES=%s "
                   "numa_node %d\n", w->name, (int)w->pid, w->cvd, w->numa_node);
        else
            printf("gs-local-cluster worker %s pid %d backend cpu nthreads %d\n", w->name,
                   (int)w->pid, nthreads);
    }
    /* stdout reaches only whoever started us (a pipe, a terminal), unlike a command line */
    if (o.token_generated) printf("gs-local-cluster token %s\n", o.token);
    printf("gs-local-cluster ready %s\n", worker_addr);
    fflush(stdout);
    GS_LOG_INFO("ready in %.3f s: gsched %s, %d %s worker(s)", gs_now_s() - t0, worker_addr,
                nworkers, use_cuda ? "cuda" : "cpu");

    /* run until told to stop or gsched dies; restart workers that die (deploy/restart.h) */
    for (;;) {
        struct pollfd p[3];
        int np = 0, r, timeout_ms = 1000;
        double next;
        if (gs__reap_running(&o, why, sizeof(why))) {
            fprintf(stderr, "gs-local-cluster: %s; stopping the cluster\n", why);
            exit_code = 1;
            goto stop;
        }
        if ((next = gs__restart_due(&o)) < 0) {
            exit_code = 1;
            goto stop;
        }
        if (next * 1000 < timeout_ms) timeout_ms = (int)(next * 1000) + 1;
        p[np++] = (struct pollfd){sfd, POLLIN, 0};
        p[np++] = (struct pollfd){out_pipe[0], out_pipe[0] >= 0 ? POLLIN : 0, 0};
        if (o.watch_stdin) p[np++] = (struct pollfd){STDIN_FILENO, POLLIN, 0};
        r = poll(p, (nfds_t)np, timeout_ms);
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "gs-local-cluster: poll: %s\n", strerror(errno));
            exit_code = 1;
            goto stop;
        }
        if (r <= 0) continue;
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM || si.ssi_signo == SIGHUP) {
                    GS_LOG_INFO("signal %u: stopping the cluster", si.ssi_signo);
                    goto stop;
                }
            }
        }
        if (out_pipe[0] >= 0 && (p[1].revents & (POLLIN | POLLHUP))) {
            char buf[4096];
            ssize_t n = read(out_pipe[0], buf, sizeof(buf));
            if (n > 0) {
                ssize_t w = write(STDERR_FILENO, buf, (size_t)n);
                (void)w;
            } else if (n == 0) {
                close(out_pipe[0]);
                out_pipe[0] = -1;
            }
        }
        if (o.watch_stdin && (p[2].revents & (POLLIN | POLLHUP | POLLERR))) {
            char buf[256];
            ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                GS_LOG_INFO("stdin closed: stopping the cluster");
                goto stop;
            }
        }
    }

stop:
    if (client != NULL) gs_client_destroy(client);
    gs__stop_all(5.0);
    return exit_code;
}
