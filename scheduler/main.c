/* gsched: the scheduler daemon (a thin main over libgsched_sched, scheduler/sched.h). */
#include "common/heap.h"
#include "common/log.h"
#include "common/token.h"
#include "scheduler/dash/dash.h"
#include "proto/conn.h"
#include "scheduler/sched.h"

#include <gsched/config.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

static const char *gs__usage =
    "usage: gsched [options]\n"
    "\n"
    "The gsched scheduler: accepts clients and gworker workers on a TCP port and schedules task\n"
    "graphs on the workers.\n"
    "\n"
    "options:\n"
    "  --host ADDR               address to listen on (numeric IPv4/IPv6; default 127.0.0.1).\n"
    "                            Any other than a loopback address needs a token.\n"
    "  --port N                  TCP port (default 8786; 0 = any free port)\n"
    "  --token-file PATH         read the cluster token peers must present from PATH\n"
    "                            (default: $GSCHED_TOKEN, else none)\n"
    "  --token TOKEN             the token on the command line: visible to every user (ps);\n"
    "                            prefer $GSCHED_TOKEN or --token-file\n"
    "  --heartbeat-interval T    heartbeat interval announced to workers (default 1s)\n"
    "  --heartbeat-timeout T     remove a worker silent for this long (default 10s)\n"
    "  --allowed-failures N      worker deaths a task may survive before it fails (default 3)\n"
    "  --max-connections N       open connections at most (default 4096, lowered to the open file\n"
    "                            limit less 64); the oldest not yet handshaken ones make room\n"
    "  --max-connections-per-address N  open connections from one IP address (default 512)\n"
    "  --client-idle-timeout T   close a client without graphs silent (no heartbeat) this long\n"
    "                            (default 60s; 0 = never)\n"
"  --task-timeout T          retry a task assigned and not reported within T (counted as\n"
    "                            a failure; includes time queued on the worker: set T far\n"
    "                            above run plus queue time; default 0 = no limit)\n"
    "  --churn-max N             once N workers from one address left within T of\n"
    "                            registering (T = --churn-window), refuse registrations from\n"
    "                            there until the window ends (default 20; 0 = no cap)\n"
    "  --churn-window T          the window of --churn-max (default 10s)\n"
    "  --frame-memory SIZE       bytes all connections may reserve for large frames being\n"
    "                            received; more waits (default 4G; 0 = unbounded)\n"
    "  --client-max-frame SIZE   largest frame a client may send (default 1G)\n"
    "  --worker-max-frame SIZE   largest frame a worker may send (default 1G)\n"
    "  --dashboard-address A     serve the dashboard, /api and /metrics on HOST:PORT (default\n"
    "                            127.0.0.1:8787, or any free port when that one is taken;\n"
    "                            port 0 = any free port; 'none' = off). Any\n"
    "                            other than a loopback address needs the token, which the\n"
    "                            dashboard then asks for (docs/dashboard.md)\n"
    "  --tls-ca-file PATH        TLS on every client and worker connection (PEM files, TLS 1.2+):\n"
    "  --tls-cert PATH           the CAs of peer certificates, gsched's certificate (its name or\n"
    "  --tls-key PATH            IP must match the address peers connect to) and its key\n"
    "  --tls-require-client-cert refuse peers without a certificate signed by the CA file; a\n"
    "                            non-loopback --host may then go without a token\n"
    "  --log-level LEVEL         fatal, error, warn, info, debug or trace (default warn)\n"
    "  --help                    show this help\n"
    "  --version                 print the version and whether the build has CUDA, and exit\n"
    "\n"
    "Durations T: a number with an optional unit ms, s or m (default s), e.g. 500ms, 2.5s.\n"
    "Sizes: a number of bytes with an optional unit K, M or G (powers of 1024), e.g. 512M.\n"
    "On startup one line 'gsched listening on tcp://HOST:PORT' is printed to stdout, then\n"
    "'gsched dashboard at http://HOST:PORT/' when the dashboard is served.\n"
    "SIGINT / SIGTERM: tell workers to shut down, close every connection and exit 0.\n";

static int gs__fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "gsched: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n(try gsched --help)\n");
    return 2;
}

/* Parse a duration into milliseconds (1 ms .. 1 day). */
static int gs__parse_duration(const char *str, uint32_t *ms_p)
{
    char *end;
    double v, scale = 1000.0;
    errno = 0;
    v = strtod(str, &end);
    if (end == str || errno != 0 || !isfinite(v)) return 0;
    if (*end == '\0' || strcmp(end, "s") == 0) scale = 1000.0;
    else if (strcmp(end, "ms") == 0) scale = 1.0;
    else if (strcmp(end, "m") == 0) scale = 60000.0;
    else return 0;
    v *= scale;
    if (!(v >= 1.0) || v > 86400000.0) return 0;
    *ms_p = (uint32_t)llround(v);
    return 1;
}

static int gs__parse_uint(const char *str, unsigned long max, unsigned long *v_p)
{
    char *end;
    unsigned long v;
    if (str[0] < '0' || str[0] > '9') return 0;
    errno = 0;
    v = strtoul(str, &end, 10);
    if (*end != '\0' || errno != 0 || v > max) return 0;
    *v_p = v;
    return 1;
}

/* Parse a size in bytes with an optional K, M or G suffix (at most @a max). */
static int gs__parse_size(const char *str, uint64_t max, uint64_t *v_p)
{
    char *end;
    unsigned long long v;
    uint64_t scale = 1;
    if (str[0] < '0' || str[0] > '9') return 0;
    errno = 0;
    v = strtoull(str, &end, 10);
    if (errno != 0) return 0;
    if (strcmp(end, "K") == 0) scale = 1ull << 10;
    else if (strcmp(end, "M") == 0) scale = 1ull << 20;
    else if (strcmp(end, "G") == 0) scale = 1ull << 30;
    else if (*end != '\0') return 0;
    if (v > max / scale) return 0;
    *v_p = (uint64_t)v * scale;
    return 1;
}

/* SIGINT and SIGTERM, read from a signalfd by the loop, and the scheduler to stop. */
static struct {
    uv_poll_t poll;
    int fd;
    gs_sched_h sched;
} gs__sig = {.fd = -1};

static void gs__on_signal_fd(uv_poll_t *h, int status, int events)
{
    struct signalfd_siginfo si;
    (void)events;
    if (status < 0 || read(gs__sig.fd, &si, sizeof si) != (ssize_t)sizeof si) return;
    GS_LOG_INFO("signal %u: shutting down", si.ssi_signo);
    gs_sched_stop(gs__sig.sched);
    if (!uv_is_closing((uv_handle_t *)h)) uv_close((uv_handle_t *)h, NULL);
}

int main(int argc, char **argv)
{
    gs_sched_params_t prm;
    sigset_t stop_sigs;
    gs_sched_h sched = NULL;
    uv_loop_t loop;
    const char *env_token = getenv("GSCHED_TOKEN");
    char addr[128];
    static char file_token[GS_TOKEN_BUF_LEN];
    gs_status_t st;
    uint32_t hb_ms = GS_SCHED_DEFAULT_HEARTBEAT_MS, hb_timeout_ms = GS_SCHED_DEFAULT_HEARTBEAT_TIMEOUT_MS;
    int hb_timeout_set = 0;

    gs_log_set_component("gsched");
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_HOST | GS_SCHED_FIELD_PORT | GS_SCHED_FIELD_TOKEN |
                     GS_SCHED_FIELD_HEARTBEAT_MS | GS_SCHED_FIELD_HEARTBEAT_TIMEOUT_MS |
                     GS_SCHED_FIELD_ALLOWED_FAILURES;
    prm.host = "127.0.0.1";
    prm.port = GS_SCHED_DEFAULT_PORT;
    prm.token = env_token != NULL ? env_token : "";
    prm.allowed_failures = GS_SCHED_DEFAULT_ALLOWED_FAILURES;
    prm.churn_max = GS_SCHED_DEFAULT_CHURN_MAX;
    prm.churn_window_ms = GS_SCHED_DEFAULT_CHURN_WINDOW_MS;
    prm.field_mask |= GS_SCHED_FIELD_DASHBOARD;
    prm.dashboard_address = GS_DASH_DEFAULT_ADDRESS;
    prm.dashboard_fallback = 1;

    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = NULL;
        const char *eq = strchr(opt, '=');
        char name[64];
        unsigned long u;
        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            fputs(gs__usage, stdout);
            return 0;
        }
        if (strcmp(opt, "--version") == 0) {
            printf("gsched %s\n", GS_VERSION_DESCRIPTION);
            return 0;
        }
        if (strncmp(opt, "--", 2) != 0) return gs__fail("unexpected argument '%s'%s", opt, "");
        if (eq != NULL) {
            size_t n = (size_t)(eq - opt);
            if (n >= sizeof name) return gs__fail("unknown option '%s'%s", opt, "");
            memcpy(name, opt, n);
            name[n] = '\0';
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", opt);
            if (strlen(opt) >= sizeof name) return gs__fail("unknown option '%s'%s", opt, "");
        }
#define GS__NEED_VAL()                                                                   \
    do {                                                                                 \
        if (val == NULL) {                                                               \
            if (i + 1 >= argc) return gs__fail("option %s needs a value%s", name, "");   \
            val = argv[++i];                                                             \
        }                                                                                \
    } while (0)
        if (strcmp(name, "--host") == 0) {
            GS__NEED_VAL();
            if (val[0] == '\0') return gs__fail("--host: empty address%s%s", "", "");
            prm.host = val;
        } else if (strcmp(name, "--port") == 0) {
            GS__NEED_VAL();
            if (!gs__parse_uint(val, 65535, &u)) return gs__fail("--port '%s' is not a number in 0..65535%s", val, "");
            prm.port = (int)u;
        } else if (strcmp(name, "--token") == 0) {
            GS__NEED_VAL();
            fprintf(stderr, "gsched: warning: %s\n", GS_TOKEN_ARGV_WARNING);
            prm.token = val;
        } else if (strcmp(name, "--token-file") == 0) {
            GS__NEED_VAL();
            if (gs_token_read_file(val, file_token, sizeof file_token) != GS_OK) {
                return gs__fail("%s%s", gs_last_error(), "");
            }
            prm.token = file_token;
        } else if (strcmp(name, "--heartbeat-interval") == 0) {
            GS__NEED_VAL();
            if (!gs__parse_duration(val, &hb_ms)) {
                return gs__fail("--heartbeat-interval '%s' is not a duration (e.g. 500ms, 1s)%s", val, "");
            }
        } else if (strcmp(name, "--heartbeat-timeout") == 0) {
            GS__NEED_VAL();
            if (!gs__parse_duration(val, &hb_timeout_ms)) {
                return gs__fail("--heartbeat-timeout '%s' is not a duration (e.g. 10s)%s", val, "");
            }
            hb_timeout_set = 1;
        } else if (strcmp(name, "--allowed-failures") == 0) {
            GS__NEED_VAL();
            if (!gs__parse_uint(val, 250, &u)) return gs__fail("--allowed-failures '%s' is not a number in 0..250%s", val, "");
            prm.allowed_failures = (uint32_t)u;
        } else if (strcmp(name, "--max-connections") == 0 || strcmp(name, "--max-connections-per-address") == 0) {
            int per_addr = strcmp(name, "--max-connections-per-address") == 0;
            GS__NEED_VAL();
            if (!gs__parse_uint(val, UINT32_MAX, &u) || u == 0) {
                return gs__fail("%s: '%s' is not a number > 0", name, val);
            }
            if (!(prm.field_mask & GS_SCHED_FIELD_MAX_CONNECTIONS)) {
                prm.field_mask |= GS_SCHED_FIELD_MAX_CONNECTIONS;
                prm.max_connections = GS_SCHED_DEFAULT_MAX_CONNECTIONS;
                prm.max_connections_per_addr = GS_SCHED_DEFAULT_MAX_CONNECTIONS_PER_ADDR;
            }
            *(per_addr ? &prm.max_connections_per_addr : &prm.max_connections) = (uint32_t)u;
        } else if (strcmp(name, "--client-idle-timeout") == 0 || strcmp(name, "--task-timeout") == 0) {
            int task = name[2] == 't';
            uint32_t *ms_p = task ? &prm.task_timeout_ms : &prm.client_idle_timeout_ms;
            GS__NEED_VAL();
            prm.field_mask |= task ? GS_SCHED_FIELD_TASK_TIMEOUT_MS : GS_SCHED_FIELD_CLIENT_IDLE_TIMEOUT_MS;
            *ms_p = 0;
            if (strcmp(val, "0") != 0 && !gs__parse_duration(val, ms_p)) {
                return gs__fail("%s: '%s' is not a duration (e.g. 10m) or 0", name, val);
            }
        } else if (strcmp(name, "--churn-max") == 0) {
            GS__NEED_VAL();
            if (!gs__parse_uint(val, UINT32_MAX, &u)) return gs__fail("--churn-max '%s' is not a number%s", val, "");
            prm.field_mask |= GS_SCHED_FIELD_CHURN;
            prm.churn_max = (uint32_t)u;
        } else if (strcmp(name, "--churn-window") == 0) {
            GS__NEED_VAL();
            if (!gs__parse_duration(val, &prm.churn_window_ms)) {
                return gs__fail("--churn-window '%s' is not a duration (e.g. 10s)%s", val, "");
            }
            prm.field_mask |= GS_SCHED_FIELD_CHURN;
        } else if (strcmp(name, "--frame-memory") == 0) {
            GS__NEED_VAL();
            if (!gs__parse_size(val, UINT64_MAX, &prm.frame_memory)) {
                return gs__fail("--frame-memory '%s' is not a size (e.g. 4G)%s", val, "");
            }
            prm.field_mask |= GS_SCHED_FIELD_FRAME_MEMORY;
        } else if (strcmp(name, "--client-max-frame") == 0 || strcmp(name, "--worker-max-frame") == 0) {
            uint64_t v;
            GS__NEED_VAL();
            if (!gs__parse_size(val, UINT32_MAX, &v) || v == 0) {
                return gs__fail("%s: '%s' is not a size of 1 byte .. 4G-1", name, val);
            }
            prm.field_mask |= GS_SCHED_FIELD_ROLE_MAX_FRAME;
            *(name[2] == 'c' ? &prm.client_max_frame : &prm.worker_max_frame) = (uint32_t)v;
        } else if (strcmp(name, "--tls-require-client-cert") == 0) {
            if (val != NULL) return gs__fail("%s takes no value%s", name, "");
            prm.tls_require_client_cert = 1;
        } else if (strcmp(name, "--tls-ca-file") == 0 || strcmp(name, "--tls-cert") == 0 ||
                   strcmp(name, "--tls-key") == 0) {
            GS__NEED_VAL();
            prm.field_mask |= GS_SCHED_FIELD_TLS;
            *(name[6] == 'c' && name[7] == 'a' ? &prm.tls_ca_file : name[6] == 'c' ? &prm.tls_cert
                                                                                    : &prm.tls_key) = val;
        } else if (strcmp(name, "--dashboard-address") == 0) {
            GS__NEED_VAL();
            if (strcmp(val, "none") != 0) {
                char host[64];
                int port;
                if (gs__dash_parse_address(val, host, sizeof host, &port) != GS_OK) return gs__fail("--dashboard-address: %s%s", gs_last_error(), "");
            }
            prm.dashboard_address = val;
            prm.dashboard_fallback = 0;
        } else if (strcmp(name, "--log-level") == 0) {
            gs_log_level_t level;
            GS__NEED_VAL();
            if (gs_log_level_parse(val, &level) != GS_OK) {
                return gs__fail("--log-level '%s': expected fatal, error, warn, info, debug or trace%s", val, "");
            }
            gs_log_set_level(level);
        } else {
            return gs__fail("unknown option '%s'%s", opt, "");
        }
#undef GS__NEED_VAL
    }
    if (!hb_timeout_set && hb_timeout_ms <= hb_ms) hb_timeout_ms = hb_ms * 10 > hb_ms ? hb_ms * 10 : UINT32_MAX;
    if (prm.tls_require_client_cert && !(prm.field_mask & GS_SCHED_FIELD_TLS)) {
        return gs__fail("--tls-require-client-cert needs --tls-ca-file, --tls-cert and --tls-key%s%s", "", "");
    }
    prm.heartbeat_ms = hb_ms;
    prm.heartbeat_timeout_ms = hb_timeout_ms;

    signal(SIGPIPE, SIG_IGN);
    /* The heap of a daemon that buffers frames for thousands of peers (common/heap.h): blocks of
     * a connection's read buffer size and more are mmapped and unmapped at free, so a frame
     * reserved for a slow peer never lands on pages an earlier frame left resident; the
     * dashboard's HTTP threads share two arenas. GLIBC_TUNABLES naming malloc settings wins. */
    {
        const char *tun = getenv("GLIBC_TUNABLES");
        if ((tun == NULL || strstr(tun, "glibc.malloc.") == NULL) &&
            gs_heap_tune_daemon(GS_CONN_READ_BUFFER, 2) != 0)
            /* only an allocator other than glibc's refuses (a sanitizer build's) */
            GS_LOG_INFO("the allocator ignores mallopt (not glibc's malloc: a sanitizer build?); "
                        "memory freed by connections may stay resident");
    }
    /* SIGINT and SIGTERM stay blocked in every thread and are read from a signalfd by the loop:
     * a signal waits in the kernel until the loop takes it. (Handlers taking them
     * asynchronously lost one now and then under ThreadSanitizer, which defers a signal that
     * arrives outside a call it treats as blocking: a TSan gsched ignored SIGTERM for 30 s in
     * about 1 run of 80 under load, with the signal delivered and the loop still turning.)
     * The threads started below (the dashboard's HTTP pool) inherit the mask. */
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    gs__sig.fd = signalfd(-1, &stop_sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    if (gs__sig.fd < 0) {
        fprintf(stderr, "gsched: signalfd: %s\n", strerror(errno));
        return 1;
    }
    if (uv_loop_init(&loop) != 0) {
        fprintf(stderr, "gsched: cannot create the event loop\n");
        return 1;
    }
    st = gs_sched_create(&prm, &loop, &sched);
    if (st != GS_OK) {
        fprintf(stderr, "gsched: %s\n", gs_last_error());
        uv_loop_close(&loop);
        return 2;
    }
    st = gs_sched_listen(sched);
    if (st == GS_OK) st = gs_sched_address(sched, addr, sizeof addr);
    if (st != GS_OK) {
        fprintf(stderr, "gsched: %s\n", gs_last_error());
        gs_sched_destroy(sched);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        return 1;
    }
    gs__sig.sched = sched;
    if (uv_poll_init(&loop, &gs__sig.poll, gs__sig.fd) != 0 ||
        uv_poll_start(&gs__sig.poll, UV_READABLE, gs__on_signal_fd) != 0) {
        fprintf(stderr, "gsched: cannot watch the signalfd\n");
        gs_sched_destroy(sched);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        return 1;
    }

    printf("gsched listening on tcp://%s\n", addr);
    if (gs_sched_dashboard_address(sched, addr, sizeof addr) == GS_OK) printf("gsched dashboard at http://%s/\n", addr);
    fflush(stdout);

    uv_run(&loop, UV_RUN_DEFAULT);
    gs_sched_destroy(sched);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&loop) != 0) GS_LOG_WARN("event loop closed with handles still open");
    close(gs__sig.fd);
    return 0;
}
