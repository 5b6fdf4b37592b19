/* gs-bench seed: the seed reduction (see main.c for the usage line). */
#include "gs-bench.h"

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
/* seed: (normal(10, 1, (n, n)) + 1)[::2, ::2].sum() */

typedef struct gs__run {
    double value;
    double seconds;
    int cpu_ok;              /* cpu: CPU time of the run by process (local cluster only) */
    gs_bench_cpu_t cpu;
    gs_compute_stats_t stats;
} gs__run_t;

static int gs__seed_run(gs_client_h client, gs_array_h expr, int sample, gs__run_t *r)
{
    const gs_dtype_t dt = (gs_dtype_t)gs_array_dtype(expr);
    gs_future_h f;
    double t0, v = 0.0;
    gs_status_t st;
    r->cpu_ok = sample && gs_bench_cpu_sample(&r->cpu) == 0;
    t0 = gs__now();
    if ((st = gs_client_submit(client, expr, 0, &f)) != GS_OK) {
        fprintf(stderr, "%s %s: submit failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        return 1;
    }
    st = gs_future_gather(f, &v, 1);
    r->seconds = gs__now() - t0;
    if (r->cpu_ok) {
        gs_bench_cpu_t end;
        if (gs_bench_cpu_sample(&end) == 0) gs_bench_cpu_diff(&r->cpu, &end, &r->cpu);
        else r->cpu_ok = 0;
    }
    if (st != GS_OK) {
        fprintf(stderr, "%s %s: run failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        gs_future_destroy(f);
        return 1;
    }
    r->value = gs_dtype_to_double(dt, &v);   /* the 0-d result in its dtype (float32: 4 bytes) */
    if (gs_future_stats(f, &r->stats) != GS_OK) memset(&r->stats, 0, sizeof(r->stats));
    st = gs__report_save(client, f) ? GS_ERR_IO : GS_OK;
    gs_future_destroy(f);
    return st != GS_OK;
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
            "  --report FILE         save the last timed run's performance report (one HTML file;\n"
            "                        a %%d in FILE numbers the runs: one report per graph)\n"
            "  --dashboard-address A local cluster: gsched's dashboard HOST:PORT or none\n"
            "  --no-fuse             lower without fusion (one task per op per chunk)\n"
            "  --no-pushdown         do not push the slice into the generator\n"
            "  --repeat R            R > 1: one cold run, then R timed runs (median reported)\n"
            "  --seed S              random seed (default 0)\n"
            "  --random N            normals under docs/random.md's definition version N: 1, 2\n"
            "                        or 3 (float64; default 3), 1, 3 or 4 (float32; default 4);\n"
            "                        --random 1 is the definition of releases before session 12;\n"
            "                        --random-v2 is --random 2\n"
            "  --dtype float64|float32  the array's dtype (default float64); float32 uses\n"
            "                        docs/random.md's float32 definition, + 1 in float32, and the\n"
            "                        sum is float32 (NumPy's result dtype; accumulated in float64)\n"
            "Prints one JSON line: bench, n, chunk, workers, backend, fused, random, dtype, value,\n"
            "count,\n"
            "mean, "
            "seconds, cold_seconds, tasks, submit_s, kernel_s, runtime_s_per_task, ...\n");
}

/* --dtype float64|float32 into *(gs_dtype_t *)ctx (gs__own_arg_fn). */
static int gs__seed_dtype_arg(int argc, char **argv, int *i, void *ctx)
{
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(argv[*i], "--dtype") != 0) return 0;
    if (v != NULL && strcmp(v, "float64") == 0) *(gs_dtype_t *)ctx = GS_DTYPE_FLOAT64;
    else if (v != NULL && strcmp(v, "float32") == 0) *(gs_dtype_t *)ctx = GS_DTYPE_FLOAT32;
    else return gs__bad("--dtype expects float64 or float32, not '%s'", v ? v : "");
    (*i)++;
    return 1;
}

int gs__bench_seed(int argc, char **argv)
{
    gs__common_t c;
    int64_t n = -1, chunk = -1;
    gs_client_h client = NULL;
    gs_array_h x = NULL, y = NULL, z = NULL, s = NULL;
    gs_slice_t sl[2];
    double connect_s = 0, *times = NULL;
    gs__run_t cold, run, last;
    int rc, done, nruns;
    int64_t count;
    gs_dtype_t dtype = GS_DTYPE_FLOAT64;

    if ((rc = gs__nchunk_args(argc, argv, &c, &n, &chunk, gs__seed_usage, gs__seed_dtype_arg, &dtype,
                              &done)) != 0 ||
        done)
        return rc;
    rc = 1;
    if (c.random_version == GS_RANDOM_DEFAULT) /* the dtype's default, printed as the number */
        c.random_version =
            dtype == GS_DTYPE_FLOAT32 ? GS_RANDOM_DEFAULT_FLOAT32 : GS_RANDOM_DEFAULT_FLOAT64;

    /* the expression */
    {
        int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
        memset(sl, 0, sizeof(sl));
        sl[0].step = sl[1].step = 2;
        gs_status_t gst = gs_array_random_normal_dtype_version(c.seed, 10.0, 1.0, dtype,
                                                               c.random_version, 2, shape,
                                                               chunks, &x);
        if (gst != GS_OK ||
            gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &y) != GS_OK ||
            gs_array_slice(y, 2, sl, &z) != GS_OK ||
            gs_array_reduce(GS_RED_SUM, z, NULL, &s) != GS_OK) {
            rc = gs__cannot_build("the expression");
            goto out;
        }
        count = gs_array_size(z);
    }
    if (gs__connect(&c, &client, &connect_s) != 0) goto out;

    /* cold run, then repeat timed runs when asked */
    if (gs__seed_run(client, s, c.scheduler == NULL, &cold) != 0) goto out;
    last = cold;
    nruns = c.repeat > 1 ? c.repeat : 0;
    times = gs_calloc((size_t)(nruns > 0 ? nruns : 1), sizeof(double), "bench times");
    if (times == NULL) {
        fprintf(stderr, "%s %s: out of memory\n", g_prog, g_sub);
        goto out;
    }
    for (int k = 0; k < nruns; k++) {
        if (gs__seed_run(client, s, c.scheduler == NULL, &run) != 0) goto out;
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
        /* one line for people (stderr, so that stdout stays one JSON line), then the JSON */
        const double esize = (double)gs_dtype_size(dtype);
        fprintf(stderr, "(normal(10, 1, (%" PRId64 ", %" PRId64 ")) + 1)[::2, ::2].sum() of %.3g GB of %s "
                        "on %d %s worker(s): %.17g in %.3f s\n", n, n, (double)n * (double)n * esize * 1e-9,
                gs_dtype_name(dtype), c.workers,
                c.backend ? c.backend : "remote", cold.value, seconds);
        fflush(stderr);
        printf("{\"bench\":\"seed\",\"n\":%" PRId64 ",\"chunk\":%" PRId64 ",\"workers\":%d", n,
               chunk, c.workers);
        printf(",\"backend\":\"%s\"", c.backend ? c.backend : "remote");
        printf(",\"fused\":%s,\"pushdown\":%s,\"random\":%d", c.fuse ? "true" : "false",
               c.pushdown ? "true" : "false", c.random_version);
        printf(",\"dtype\":\"%s\"", gs_dtype_name(dtype));
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
        gs__json_num("gb_per_s", (double)n * (double)n * esize / seconds * 1e-9);
        if (last.cpu_ok) {
            /* CPU seconds of the last run by process (user + system), and the kernel's share */
            gs__json_num("client_cpu_s", last.cpu.self_user_s + last.cpu.self_sys_s);
            gs__json_num("sched_cpu_s", last.cpu.sched_user_s + last.cpu.sched_sys_s);
            gs__json_num("workers_cpu_s", last.cpu.work_user_s + last.cpu.work_sys_s);
            gs__json_num("workers_sys_fraction",
                         last.cpu.work_sys_s / (last.cpu.work_user_s + last.cpu.work_sys_s));
            gs__json_num("workers_ctxsw_per_task",
                         tasks > 0 ? (double)last.cpu.ctxsw_work / tasks : NAN);
        }
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

