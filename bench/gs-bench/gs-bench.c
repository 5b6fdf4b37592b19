/* gs-bench: benchmarks through the public client API. One JSON line per measurement on stdout;
 * diagnostics on stderr. Bad arguments exit with status 2 and a message naming the problem;
 * failures of the run exit with status 1.
 *
 *   gs-bench seed --n N --chunk C [--workers W] [--backend cpu|cuda] [--no-fuse] [--no-pushdown]
 *                 [--scheduler tcp://host:port] [--repeat R] [--seed S] [--token T]
 *
 * Subcommands live in one table (gs__benches); each parses its own options with the shared
 * helpers below and reports through gs__json_*. */
#include "common/alloc.h"
#include "deploy/gpuinfo.h"

#include <gsched/gsched.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

/* ---------------------------------------------------------------------------------------- */
/* shared: arguments, cluster, timing, JSON */

typedef struct gs__common {
    const char *scheduler;   /* NULL: start a local cluster */
    int workers;             /* 0: default */
    const char *backend;     /* NULL: default */
    const char *token;
    int fuse, pushdown;
    int repeat;
    uint64_t seed;
} gs__common_t;

static const char *g_prog = "gs-bench";
static const char *g_sub = "";

static int gs__bad(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s %s: ", g_prog, g_sub);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see '%s %s --help')\n", g_prog, g_sub);
    return 2;
}

static double gs__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Parse an integer option value in [lo, hi]; 0 on error (message printed). */
static int gs__int_arg(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *v)
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

/* Options every benchmark understands. Returns 1 when argv[*i] was one (consuming its value),
 * 0 when it was not, -1 on a bad value (message printed). */
static int gs__common_arg(int argc, char **argv, int *i, gs__common_t *c)
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
    if (strcmp(a, "--no-fuse") == 0) {
        c->fuse = 0;
        return 1;
    }
    if (strcmp(a, "--no-pushdown") == 0) {
        c->pushdown = 0;
        return 1;
    }
    return 0;
}

static const char *gs__default_backend(void)
{
#ifdef GS_HAVE_CUDA
    gs_gpu_t gpus[GS_GPU_MAX];
    return gs_gpu_discover(gpus) > 0 ? "cuda" : "cpu";
#else
    return "cpu";
#endif
}

/* Connect (starting a local cluster unless --scheduler was given). */
static int gs__connect(gs__common_t *c, gs_client_h *client_p, double *connect_s_p)
{
    gs_client_params_t p;
    double t0 = gs__now();
    memset(&p, 0, sizeof(p));
    p.field_mask = GS_CLIENT_FIELD_LOWER_FLAGS;
    p.lower_flags = GS_LOWER_CULL | (c->fuse ? GS_LOWER_FUSE : 0u) |
                    (c->pushdown ? GS_LOWER_SLICE_PUSHDOWN : 0u);
    if (c->token != NULL) {
        p.field_mask |= GS_CLIENT_FIELD_TOKEN;
        p.token = c->token;
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

static double gs__median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), gs__cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* JSON numbers: non-finite values become null. */
static void gs__json_num(const char *key, double v)
{
    if (isfinite(v))
        printf(",\"%s\":%.17g", key, v);
    else
        printf(",\"%s\":null", key);
}

/* ---------------------------------------------------------------------------------------- */
/* seed: (normal(10, 1, (n, n)) + 1)[::2, ::2].sum() */

typedef struct gs__run {
    double value;
    double seconds;
    gs_compute_stats_t stats;
} gs__run_t;

static int gs__seed_run(gs_client_h client, gs_array_h expr, gs__run_t *r)
{
    gs_future_h f;
    double t0 = gs__now(), v = 0.0;
    gs_status_t st;
    if ((st = gs_client_submit(client, expr, 0, &f)) != GS_OK) {
        fprintf(stderr, "%s %s: submit failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        return 1;
    }
    st = gs_future_gather(f, &v, 1);
    r->seconds = gs__now() - t0;
    if (st != GS_OK) {
        fprintf(stderr, "%s %s: run failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        gs_future_destroy(f);
        return 1;
    }
    r->value = v;
    if (gs_future_stats(f, &r->stats) != GS_OK) memset(&r->stats, 0, sizeof(r->stats));
    gs_future_destroy(f);
    return 0;
}

static void gs__seed_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench seed --n N --chunk C [options]\n"
            "Compute (normal(10, 1, (N, N)) + 1)[::2, ::2].sum() with C x C chunks.\n"
            "  --n N                 array side (>= 1)\n"
            "  --chunk C             chunk side (>= 1)\n"
            "  --workers W           workers of the local cluster (default: one per GPU for cuda,\n"
            "                        else 2); with --scheduler: wait for W workers\n"
            "  --backend cpu|cuda    local cluster backend (default cuda when a GPU is visible)\n"
            "  --scheduler ADDR      use the cluster at tcp://host:port instead of a local one\n"
            "  --token T             cluster token (default $GSCHED_TOKEN)\n"
            "  --no-fuse             lower without fusion (one task per op per chunk)\n"
            "  --no-pushdown         do not push the slice into the generator\n"
            "  --repeat R            R > 1: one cold run, then R timed runs (median reported)\n"
            "  --seed S              random seed (default 0)\n"
            "Prints one JSON line: bench, n, chunk, workers, backend, fused, value, count, mean,\n"
            "seconds, cold_seconds, tasks, submit_s, kernel_s, runtime_s_per_task, ...\n");
}

static int gs__bench_seed(int argc, char **argv)
{
    gs__common_t c;
    int64_t n = -1, chunk = -1;
    gs_client_h client = NULL;
    gs_array_h x = NULL, y = NULL, z = NULL, s = NULL;
    gs_slice_t sl[2];
    double connect_s = 0, *times = NULL;
    gs__run_t cold, run, last;
    int rc = 1, nruns;
    int64_t count;

    memset(&c, 0, sizeof(c));
    c.fuse = c.pushdown = 1;
    c.repeat = 1;
    c.token = getenv("GSCHED_TOKEN");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            gs__seed_usage(stdout);
            return 0;
        }
        if (strcmp(a, "--n") == 0) {
            if (!gs__int_arg(a, i + 1 < argc ? argv[i + 1] : NULL, 1, INT64_C(3037000499), &n))
                return 2;
            i++;
            continue;
        }
        if (strcmp(a, "--chunk") == 0) {
            if (!gs__int_arg(a, i + 1 < argc ? argv[i + 1] : NULL, 1, INT64_C(3037000499), &chunk))
                return 2;
            i++;
            continue;
        }
        r = gs__common_arg(argc, argv, &i, &c);
        if (r < 0) return 2;
        if (r == 0) return gs__bad("unknown option '%s'", a);
    }
    if (n < 0) return gs__bad("--n is required");
    if (chunk < 0) return gs__bad("--chunk is required");

    /* the expression */
    {
        int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
        memset(sl, 0, sizeof(sl));
        sl[0].step = sl[1].step = 2;
        if (gs_array_random_normal(c.seed, 10.0, 1.0, 2, shape, chunks, &x) != GS_OK ||
            gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &y) != GS_OK ||
            gs_array_slice(y, 2, sl, &z) != GS_OK ||
            gs_array_reduce(GS_RED_SUM, z, NULL, &s) != GS_OK) {
            fprintf(stderr, "%s %s: cannot build the expression: %s\n", g_prog, g_sub,
                    gs_last_error());
            rc = 2;
            goto out;
        }
        count = gs_array_size(z);
    }
    if (gs__connect(&c, &client, &connect_s) != 0) goto out;

    /* cold run, then repeat timed runs when asked */
    if (gs__seed_run(client, s, &cold) != 0) goto out;
    last = cold;
    nruns = c.repeat > 1 ? c.repeat : 0;
    times = gs_calloc((size_t)(nruns > 0 ? nruns : 1), sizeof(double), "bench times");
    if (times == NULL) {
        fprintf(stderr, "%s %s: out of memory\n", g_prog, g_sub);
        goto out;
    }
    for (int k = 0; k < nruns; k++) {
        if (gs__seed_run(client, s, &run) != 0) goto out;
        if (run.value != cold.value && !(isnan(run.value) && isnan(cold.value)))
            fprintf(stderr, "%s %s: warning: run %d gave %.17g, the first run %.17g\n", g_prog,
                    g_sub, k + 1, run.value, cold.value);
        times[k] = run.seconds;
        last = run;
    }
    {
        double seconds = nruns > 0 ? gs__median(times, nruns) : cold.seconds;
        /* Execution slots: one per GPU worker; for CPU workers on a local cluster, the launcher
         * gives each worker cores / workers threads. runtime_s_per_task is the slot time per task
         * not spent in kernels: (wall * slots - kernel time) / tasks, an upper bound on what the
         * runtime (scheduling, messaging, fetches, idling on the critical path) costs per task. */
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        double slots = (double)c.workers;
        double tasks = (double)last.stats.ntasks;
        if (c.backend != NULL && strcmp(c.backend, "cpu") == 0 && ncpu > c.workers)
            slots = (double)c.workers * (double)(ncpu / c.workers);
        printf("{\"bench\":\"seed\",\"n\":%" PRId64 ",\"chunk\":%" PRId64 ",\"workers\":%d", n,
               chunk, c.workers);
        printf(",\"backend\":\"%s\"", c.backend ? c.backend : "remote");
        printf(",\"fused\":%s,\"pushdown\":%s", c.fuse ? "true" : "false",
               c.pushdown ? "true" : "false");
        printf(",\"seed\":%" PRIu64, c.seed);
        gs__json_num("value", cold.value);
        printf(",\"count\":%" PRId64, count);
        gs__json_num("mean", cold.value / (double)count);
        gs__json_num("seconds", seconds);
        gs__json_num("cold_seconds", cold.seconds);
        printf(",\"repeat\":%d", c.repeat);
        printf(",\"tasks\":%" PRIu64, last.stats.ntasks);
        gs__json_num("submit_s", last.stats.submit_s);
        gs__json_num("kernel_s", last.stats.run_s_total);
        gs__json_num("sched_wall_s", last.stats.sched_wall_s);
        printf(",\"slots\":%.0f", slots);
        gs__json_num("busy_fraction",
                     last.seconds > 0 ? last.stats.run_s_total / (last.seconds * slots) : NAN);
        gs__json_num("runtime_s_per_task",
                     tasks > 0 ? fmax(0.0, last.seconds * slots - last.stats.run_s_total) / tasks
                               : NAN);
        gs__json_num("tasks_per_s", last.seconds > 0 ? tasks / last.seconds : NAN);
        gs__json_num("gb_per_s", (double)n * (double)n * 8.0 / seconds * 1e-9);
        gs__json_num("connect_s", connect_s);
        printf(",\"scheduler\":\"%s\"}\n", gs_client_address(client));
        fflush(stdout);
    }
    rc = 0;
out:
    gs_free(times);
    gs_client_destroy(client);
    gs_array_release(s);
    gs_array_release(z);
    gs_array_release(y);
    gs_array_release(x);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */

typedef struct gs__bench {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} gs__bench_t;

/* Later issues add tasks, transfer, transpose-sum, dot and svd here. */
static const gs__bench_t gs__benches[] = {
    {"seed", gs__bench_seed, "(normal(10,1,(n,n)) + 1)[::2, ::2].sum() on a cluster"},
};

static void gs__usage(FILE *f)
{
    fprintf(f, "usage: gs-bench <benchmark> [options]   (gs-bench <benchmark> --help)\n"
               "benchmarks:\n");
    for (size_t i = 0; i < sizeof(gs__benches) / sizeof(gs__benches[0]); i++)
        fprintf(f, "  %-14s %s\n", gs__benches[i].name, gs__benches[i].what);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        gs__usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        gs__usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof(gs__benches) / sizeof(gs__benches[0]); i++) {
        if (strcmp(argv[1], gs__benches[i].name) == 0) {
            g_sub = gs__benches[i].name;
            return gs__benches[i].run(argc - 2, argv + 2);
        }
    }
    fprintf(stderr, "gs-bench: unknown benchmark '%s'\n", argv[1]);
    gs__usage(stderr);
    return 2;
}
