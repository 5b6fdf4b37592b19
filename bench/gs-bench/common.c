/* gs-bench shared helpers: see gs-bench.h. */
#include "gs-bench.h"

#include "chunkops/random.h"
#include "common/alloc.h"
#include "deploy/gpuinfo.h"
#include "graph/taskgraph.h"
#include "proc_cpu.h"

#include <gsched/gsched.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------- */
/* shared: arguments, cluster, timing, JSON */


const char *g_prog = "gs-bench";
const char *g_sub = "";

int gs__bad(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s %s: ", g_prog, g_sub);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see '%s %s --help')\n", g_prog, g_sub);
    return 2;
}

double gs__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Parse an integer option value in [lo, hi]; 0 on error (message printed). */
int gs__int_arg(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    char *end;
    long long x;
    if (s == NULL) {
        gs__bad("option %s needs a value", opt);
        return 0;
    }
    errno = 0;
    x = strtoll(s, &end, 10);
    if (s[0] == '\0' || *end != '\0' || errno != 0) {
        gs__bad("option %s expects an integer, not '%s'", opt, s);
        return 0;
    }
    if (x < lo || x > hi) {
        gs__bad("option %s must be between %" PRId64 " and %" PRId64 ", not %lld", opt, lo, hi, x);
        return 0;
    }
    *v = x;
    return 1;
}

const char *g_report;

static int g_report_runs; /* graphs reported so far (the %d of a numbered --report name) */

/* Write the report of @a f's graph to --report's file: the name as given, or, when it holds
 * "%d" (checked by gs__common_arg: at most one '%', and only that), with %d replaced by the
 * count of graphs reported before this one, so every timed graph keeps its own report. */
int gs__report_save(gs_client_h client, gs_future_h f)
{
    char name[4096];
    const char *path = g_report;
    if (g_report == NULL) return 0;
    if (strstr(g_report, "%d") != NULL) {
        int k = snprintf(name, sizeof(name), g_report, g_report_runs);
        if (k < 0 || (size_t)k >= sizeof(name)) {
            fprintf(stderr, "%s %s: --report %s: the name is too long\n", g_prog, g_sub, g_report);
            return 1;
        }
        path = name;
    }
    g_report_runs++;
    if (gs_client_report(client, f, path) != GS_OK) {
        fprintf(stderr, "%s %s: --report %s: %s\n", g_prog, g_sub, path, gs_last_error());
        return 1;
    }
    return 0;
}

/* Options every benchmark understands. Returns 1 when argv[*i] was one (consuming its value),
 * 0 when it was not, -1 on a bad value (message printed). */
void gs__common_defaults(gs__common_t *c)
{
    memset(c, 0, sizeof(*c));
    c->fuse = c->pushdown = 1;
    c->random_version = GS_RANDOM_DEFAULT; /* the dtype's default (float64: version 3) */
    c->repeat = 1;
    c->token = getenv("GSCHED_TOKEN");
}

int gs__nchunk_arg(int argc, char **argv, int *i, int64_t *n, int64_t *chunk)
{
    const char *a = argv[*i];
    if (strcmp(a, "--n") != 0 && strcmp(a, "--chunk") != 0) return 0;
    if (!gs__int_arg(a, *i + 1 < argc ? argv[*i + 1] : NULL, 1, INT64_C(3037000499),
                     a[2] == 'n' ? n : chunk))
        return -1;
    (*i)++;
    return 1;
}

int gs__common_arg(int argc, char **argv, int *i, gs__common_t *c)
{
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int64_t x;
    if (strcmp(a, "--scheduler") == 0) {
        if (v == NULL) return gs__bad("option --scheduler needs a value"), -1;
        if (strncmp(v, "tcp://", 6) != 0 && strcmp(v, "local") != 0)
            return gs__bad("--scheduler expects tcp://host:port or local, not '%s'", v), -1;
        c->scheduler = strcmp(v, "local") == 0 ? NULL : v;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--dashboard-address") == 0) {
        if (v == NULL || v[0] == '\0') return gs__bad("option --dashboard-address needs HOST:PORT or none"), -1;
        c->dashboard = v;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--report") == 0) {
        if (v == NULL || v[0] == '\0') return gs__bad("option --report needs a file name"), -1;
        {
            const char *pc = strchr(v, '%');
            if (pc != NULL && (pc[1] != 'd' || strchr(pc + 1, '%') != NULL))
                return gs__bad("option --report: the name may hold one %%d (the graph's number) "
                               "and no other '%%', not '%s'", v),
                       -1;
        }
        g_report = v;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--workers") == 0) {
        if (!gs__int_arg(a, v, 1, 4096, &x)) return -1;
        c->workers = (int)x;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--backend") == 0) {
        if (v == NULL) return gs__bad("option --backend needs a value"), -1;
        if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0)
            return gs__bad("--backend must be cpu or cuda, not '%s'", v), -1;
        c->backend = v;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--tls-ca-file") == 0 || strcmp(a, "--tls-cert") == 0 || strcmp(a, "--tls-key") == 0) {
        if (v == NULL || v[0] == '\0') return gs__bad("option %s needs a file", a), -1;
        *(a[6] == 'c' && a[7] == 'a' ? &c->tls_ca_file : a[6] == 'c' ? &c->tls_cert : &c->tls_key) = v;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--token") == 0) {
        if (v == NULL) return gs__bad("option --token needs a value"), -1;
        c->token = v;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--repeat") == 0) {
        if (!gs__int_arg(a, v, 1, 100000, &x)) return -1;
        c->repeat = (int)x;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--seed") == 0) {
        char *end;
        unsigned long long s;
        if (v == NULL) return gs__bad("option --seed needs a value"), -1;
        errno = 0;
        s = strtoull(v, &end, 0);
        if (v[0] == '\0' || v[0] == '-' || *end != '\0' || errno != 0)
            return gs__bad("--seed expects a non-negative 64-bit integer, not '%s'", v), -1;
        c->seed = s;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--gather-path") == 0) {
        int path = -1;
        if (v == NULL) return gs__bad("option --gather-path needs auto, direct, relay or shm"), -1;
        for (int p = GS_GATHER_AUTO; p <= GS_GATHER_SHM; p++)
            if (strcmp(v, gs_gather_path_name(p)) == 0) path = p;
        if (path < 0) return gs__bad("--gather-path must be auto, direct, relay or shm, not '%s'", v), -1;
        c->gather_path = path;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--no-fuse") == 0) {
        c->fuse = 0;
        return 1;
    }
    if (strcmp(a, "--random-v2") == 0) {
        c->random_version = GS_RANDOM_V2;
        return 1;
    }
    if (strcmp(a, "--random") == 0) {
        if (v == NULL || (strcmp(v, "1") != 0 && strcmp(v, "2") != 0 && strcmp(v, "3") != 0 &&
                          strcmp(v, "4") != 0))
            return gs__bad("option --random needs a definition version: 1, 2, 3 or 4 (4: "
                           "float32 only)"), -1;
        c->random_version = v[0] - '0';
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--no-gram") == 0) {
        c->no_gram = 1;
        return 1;
    }
    if (strcmp(a, "--no-pushdown") == 0) {
        c->pushdown = 0;
        return 1;
    }
    return 0;
}

const char *gs__default_backend(void)
{
#ifdef GS_HAVE_CUDA
    gs_gpu_t gpus[GS_GPU_MAX];
    return gs_gpu_discover(gpus) > 0 ? "cuda" : "cpu";
#else
    return "cpu";
#endif
}

/* Connect (starting a local cluster unless --scheduler was given). */
int gs__connect(gs__common_t *c, gs_client_h *client_p, double *connect_s_p)
{
    gs_client_params_t p;
    double t0 = gs__now();
    memset(&p, 0, sizeof(p));
    p.field_mask = GS_CLIENT_FIELD_LOWER_FLAGS | GS_CLIENT_FIELD_PROGRESS_BAR | GS_CLIENT_FIELD_GATHER_PATH;
    p.gather_path = c->gather_path;
    p.progress_bar = GS_PROGRESS_BAR_TTY;   /* a bar on stderr when it is a terminal */
    p.lower_flags = GS_LOWER_CULL | (c->fuse ? GS_LOWER_FUSE : 0u) |
                    (c->pushdown ? GS_LOWER_SLICE_PUSHDOWN : 0u) |
                    (c->no_gram ? 0u : GS_LOWER_GRAM_SVD);
    if (c->token != NULL) {
        p.field_mask |= GS_CLIENT_FIELD_TOKEN;
        p.token = c->token;
    }
    if (c->tls_ca_file != NULL || c->tls_cert != NULL || c->tls_key != NULL) {
        if (c->scheduler == NULL) {
            fprintf(stderr, "%s %s: --tls-* options need --scheduler tcp://host:port\n", g_prog, g_sub);
            return 1;
        }
        p.field_mask |= GS_CLIENT_FIELD_TLS;
        p.tls_ca_file = c->tls_ca_file;
        p.tls_cert = c->tls_cert;
        p.tls_key = c->tls_key;
    }
    if (c->scheduler != NULL) {
        p.address = c->scheduler;
    } else {
        gs_gpu_t gpus[GS_GPU_MAX];
        if (c->backend == NULL) c->backend = gs__default_backend();
        if (c->workers == 0)
            c->workers = strcmp(c->backend, "cuda") == 0 ? gs_gpu_discover(gpus) : 2;
        if (c->workers < 1) c->workers = 1;
        p.address = "local";
        p.field_mask |= GS_CLIENT_FIELD_LOCAL_NWORKERS | GS_CLIENT_FIELD_LOCAL_BACKEND;
        p.local_nworkers = c->workers;
        p.local_backend = c->backend;
        if (c->memory_limit || c->device_memory_limit) {
            p.field_mask |= GS_CLIENT_FIELD_LOCAL_MEMORY;
            p.local_memory_limit = c->memory_limit;
            p.local_device_memory_limit = c->device_memory_limit;
        }
        if (c->dashboard != NULL) {
            p.field_mask |= GS_CLIENT_FIELD_LOCAL_DASHBOARD;
            p.local_dashboard_address = c->dashboard;
        }
    }
    if (gs_client_connect(&p, client_p) != GS_OK) {
        fprintf(stderr, "%s %s: cannot connect to %s: %s\n", g_prog, g_sub,
                c->scheduler ? c->scheduler : "a local cluster", gs_last_error());
        return 1;
    }
    if (c->scheduler != NULL) {
        if (c->workers > 0 && gs_client_wait_for_workers(*client_p, c->workers, 60.0) != GS_OK) {
            fprintf(stderr, "%s %s: %s\n", g_prog, g_sub, gs_last_error());
            gs_client_destroy(*client_p);
            return 1;
        }
        if (c->workers == 0) {
            if (gs_client_wait_for_workers(*client_p, 1, 60.0) != GS_OK ||
                (c->workers = gs_client_nworkers(*client_p)) < 1) {
                fprintf(stderr, "%s %s: no worker registered with %s: %s\n", g_prog, g_sub,
                        c->scheduler, gs_last_error());
                gs_client_destroy(*client_p);
                return 1;
            }
        }
    }
    *connect_s_p = gs__now() - t0;
    return 0;
}

static int gs__cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double gs__median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), gs__cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* JSON numbers: non-finite values become null. */
void gs__json_num(const char *key, double v)
{
    if (isfinite(v))
        printf(",\"%s\":%.17g", key, v);
    else
        printf(",\"%s\":null", key);
}

int gs__connect_persist_normal(gs__common_t *c, const int64_t *shape, const int64_t *chunks,
                               gs_client_h *client_p, gs_array_h *x_p, double *connect_s_p,
                               double *persist_s_p)
{
    gs_status_t st;
    double t0;
    if (gs_array_random_normal_version(c->seed, 0.0, 1.0, c->random_version,
                                       2, shape, chunks, x_p) != GS_OK) {
        return gs__cannot_build("x");
    }
    if (gs__connect(c, client_p, connect_s_p) != 0) return 1;
    t0 = gs__now();
    if ((st = gs_client_persist(*client_p, *x_p)) != GS_OK) {
        fprintf(stderr, "%s %s: persisting x failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        return 1;
    }
    *persist_s_p = gs__now() - t0;
    return 0;
}

int gs__value_ok(int run, double v, double expected, double tol)
{
    if (fabs(v - expected) <= tol) return 1;
    fprintf(stderr, "%s %s: run %d gave %.17g, expected %.17g\n", g_prog, g_sub, run, v, expected);
    return 0;
}

void gs__json_run_tail(const gs_compute_stats_t *st, double persist_s, double connect_s,
                       gs_client_h client)
{
    printf(",\"tasks\":%" PRIu64, st->ntasks);
    gs__json_num("submit_s", st->submit_s);
    gs__json_num("kernel_s", st->run_s_total);
    gs__json_num("persist_s", persist_s);
    gs__json_num("connect_s", connect_s);
    printf(",\"scheduler\":\"%s\"}\n", gs_client_address(client));
    fflush(stdout);
}

void gs__json_gather_paths(int requested, const gs_gather_stats_t *b, const gs_gather_stats_t *a)
{
    uint64_t shm = a->chunks_shm - b->chunks_shm, direct = a->chunks_direct - b->chunks_direct,
             relay = a->chunks_relay - b->chunks_relay;
    const char *used = (shm > 0) + (direct > 0) + (relay > 0) > 1 ? "mixed"
                       : shm > 0                               ? "shm"
                       : direct > 0                            ? "direct"
                                                               : "relay";
    printf(",\"gather_path\":\"%s\",\"path_used\":\"%s\"", gs_gather_path_name(requested), used);
    printf(",\"chunks_shm\":%llu,\"chunks_direct\":%llu,\"chunks_relay\":%llu,\"fallbacks\":%llu",
           (unsigned long long)shm, (unsigned long long)direct, (unsigned long long)relay,
           (unsigned long long)(a->fallbacks - b->fallbacks));
}

int gs__nchunk_args(int argc, char **argv, gs__common_t *c, int64_t *n, int64_t *chunk,
                    void (*usage)(FILE *), gs__own_arg_fn own, void *ctx, int *done)
{
    gs__common_defaults(c);
    *n = *chunk = -1;
    *done = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            *done = 1;
            return 0;
        }
        if ((r = gs__nchunk_arg(argc, argv, &i, n, chunk)) != 0) {
            if (r < 0) return 2;
            continue;
        }
        if (own != NULL && (r = own(argc, argv, &i, ctx)) != 0) {
            if (r != 1) return 2;
            continue;
        }
        r = gs__common_arg(argc, argv, &i, c);
        if (r < 0) return 2;
        if (r == 0) return gs__bad("unknown option '%s'", a);
    }
    if (*n < 0) return gs__bad("--n is required");
    if (*chunk < 0) return gs__bad("--chunk is required");
    return 0;
}

int gs__connect_persist_square(gs__common_t *c, int64_t n, int64_t chunk, gs_client_h *client_p,
                               gs_array_h *x_p, double *connect_s_p, double *persist_s_p)
{
    const int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
    return gs__connect_persist_normal(c, shape, chunks, client_p, x_p, connect_s_p, persist_s_p);
}

int gs__run_timed(gs_client_h client, gs_array_h a, unsigned flags, double *out, size_t out_len,
                  double *seconds_p, double *gather_s_p, gs_compute_stats_t *stats_p)
{
    gs_future_h f = NULL;
    gs_status_t st;
    double t0 = gs__now(), tg;
    if ((st = gs_client_submit(client, a, flags, &f)) != GS_OK) {
        fprintf(stderr, "%s %s: submit failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        return 1;
    }
    if ((st = gs_future_wait(f, -1.0)) == GS_OK && out != NULL) {
        tg = gs__now();
        st = gs_future_gather(f, out, out_len);
        if (gather_s_p != NULL) *gather_s_p = gs__now() - tg;
    }
    *seconds_p = gs__now() - t0;
    if (st != GS_OK) {
        fprintf(stderr, "%s %s: run failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        gs_future_destroy(f);
        return 1;
    }
    if (gs_future_stats(f, stats_p) != GS_OK) memset(stats_p, 0, sizeof(*stats_p));
    st = gs__report_save(client, f) ? GS_ERR_IO : GS_OK;
    gs_future_destroy(f);
    return st != GS_OK;
}

int gs__run_scalar(gs_client_h client, gs_array_h a, double *v_p, double *seconds_p,
                   gs_compute_stats_t *stats_p)
{
    _Alignas(8) unsigned char out[8] = {0};
    if (gs__run_timed(client, a, 0, (double *)out, 1, seconds_p, NULL, stats_p) != 0) return 1;
    *v_p = gs_dtype_to_double((gs_dtype_t)gs_array_dtype(a), out);
    return 0;
}

void gs__json_open(const char *bench, const char *key, const char *value)
{
    printf("{\"bench\":\"%s\"", bench);
    if (key != NULL) gs__json_str(key, value);
}

void gs__json_str(const char *key, const char *v)
{
    printf(",\"%s\":\"%s\"", key, v);
}

void gs__json_bool(const char *key, int v)
{
    printf(",\"%s\":%s", key, v ? "true" : "false");
}

void gs__json_size(int64_t n, int64_t chunk, const gs__common_t *c)
{
    printf(",\"n\":%" PRId64 ",\"chunk\":%" PRId64 ",\"workers\":%d", n, chunk, c->workers);
    gs__json_str("backend", c->backend ? c->backend : "remote");
}

void gs__json_seed_run(const gs__common_t *c, int run)
{
    printf(",\"seed\":%" PRIu64 ",\"run\":%d", c->seed, run);
}

void gs__json_checked(int64_t checked, int64_t mismatches)
{
    printf(",\"checked\":%" PRId64 ",\"mismatches\":%" PRId64, checked, mismatches);
}

void gs__json_rate(double seconds, double bytes)
{
    gs__json_num("seconds", seconds);
    gs__json_num("gb_per_s", bytes / seconds * 1e-9);
}

void gs__json_close(void)
{
    printf("}\n");
    fflush(stdout);
}

int gs__gather_f64(gs_client_h client, gs_array_h a, int nsl, const gs_slice_t *sl, double *buf,
                   size_t n, const char *what, int64_t i)
{
    gs_array_h part = NULL, pd = NULL;
    gs_status_t st = gs_array_slice(a, nsl, sl, &part);
    if (st == GS_OK) st = gs_array_astype(part, GS_DTYPE_FLOAT64, &pd);
    if (st == GS_OK) st = gs_client_compute(client, pd, buf, n);
    gs_array_release(pd);
    gs_array_release(part);
    if (st != GS_OK)
        fprintf(stderr, "%s %s: gathering %s %" PRId64 " failed: %s\n", g_prog, g_sub, what, i,
                gs_last_error());
    return st != GS_OK;
}

int gs__tally(int ok, int64_t *checked_p, int64_t *bad_p)
{
    (*checked_p)++;
    return !ok && (*bad_p)++ == 0;
}

double gs__normal_at(int version, uint64_t seed, uint64_t i, double mean, double std)
{
    switch (version) {
    case GS_RANDOM_V1: return gs_random_normal(seed, i, mean, std);
    case GS_RANDOM_V2: return gs_random_normal_v2(seed, i, mean, std);
    default: return gs_random_normal_v3(seed, i, mean, std); /* V3 and GS_RANDOM_DEFAULT */
    }
}

double *gs__host_normal(int version, uint64_t seed, size_t n, const char *what)
{
    double *x = gs_malloc(n * sizeof(double), what);
    if (x != NULL)
        for (size_t i = 0; i < n; i++) x[i] = gs__normal_at(version, seed, i, 0.0, 1.0);
    return x;
}

int gs__cannot_build(const char *what)
{
    fprintf(stderr, "%s %s: cannot build %s: %s\n", g_prog, g_sub, what, gs_last_error());
    return 2;
}

int gs__kept_runs(gs_client_h client, gs_array_h y, int repeat, gs__kept_check_fn check,
                  gs__kept_head_fn head, const void *opts, double persist_s, double connect_s)
{
    for (int r = 0; r < repeat; r++) {
        gs_compute_stats_t stats;
        int64_t checked = 0, bad = 0;
        double t;
        if (gs__run_timed(client, y, GS_SUBMIT_KEEP, NULL, 0, &t, NULL, &stats) != 0) return 1;
        /* untimed: parts of the kept y against the reference, then drop y */
        if (r == repeat - 1 && check(client, y, opts, &checked, &bad) != 0) return 1;
        gs_client_unpersist(client, y);
        head(opts, r, t);
        gs__json_checked(checked, bad);
        gs__json_run_tail(&stats, persist_s, connect_s, client);
        if (bad != 0) return 1;
    }
    return 0;
}
