/* gs-bench tasks: tiny-task throughput (see main.c for the usage line). */
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
/* tasks: N tiny tasks through client -> gsched -> gworker.
 *
 * y = arange(0, 1, (N * E,), chunks E) + 1 lowers (fused) to N independent tasks of E elements.
 *   --shape independent: persist y (GS_SUBMIT_KEEP: outputs stay on the workers, nothing but
 *                        GRAPH_DONE goes back to the client), time submit -> done, unpersist.
 *   --shape tree:        sum(y) with split_every K: N fused leaf tasks (generate, +1, partial
 *                        sum) and a K-ary combine tree; the scalar is gathered and checked.
 * Both values are exact in float64 (sum = N*E*(N*E+1)/2 < 2^53 for the sizes allowed). */

typedef struct gs__tasks_run {
    double seconds;          /* submit call to completion, as the caller sees it */
    double value;            /* tree: the gathered sum */
    double check_s;          /* independent: the check sum over the persisted chunks */
    int check_cpu_ok;
    gs_bench_cpu_t check_cpu;  /* CPU time of the check sum by process */
    double release_s;        /* independent: unpersist + a round trip to the scheduler */
    double submit_cpu_s;     /* CPU time of the calling thread inside gs_client_submit */
    int cpu_ok;              /* cpu holds the CPU time of the run (local cluster) */
    gs_bench_cpu_t cpu;      /* CPU time from just before submit to completion */
    gs_compute_stats_t stats;
} gs__tasks_run_t;

static double gs__thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Submit with timing: CPU samples of the cluster (when sampling) and of this thread. */
static gs_status_t gs__tasks_submit(gs_client_h client, gs_array_h a, unsigned flags, int sample,
                                    gs__tasks_run_t *r, gs_future_h *f_p, double *t0_p)
{
    gs_status_t st;
    double c0;
    r->cpu_ok = sample && gs_bench_cpu_sample(&r->cpu) == 0;
    c0 = gs__thread_cpu();
    *t0_p = gs__now();
    st = gs_client_submit(client, a, flags, f_p);
    r->submit_cpu_s = gs__thread_cpu() - c0;
    return st;
}

/* After completion: r->cpu becomes the CPU time spent since the submit. */
static void gs__tasks_sample_end(gs__tasks_run_t *r)
{
    gs_bench_cpu_t end;
    if (r->cpu_ok && gs_bench_cpu_sample(&end) == 0) gs_bench_cpu_diff(&r->cpu, &end, &r->cpu);
    else r->cpu_ok = 0;
}

static void gs__run_failed(const char *what, gs_status_t st)
{
    fprintf(stderr, "%s %s: %s failed: %s: %s\n", g_prog, g_sub, what, gs_status_name(st),
            gs_last_error());
}

/* One independent run: persist y, wait, unpersist (the release is sent before returning; a
 * round trip to the scheduler makes sure it was processed before the next run starts). */
static int gs__tasks_run_independent(gs_client_h client, gs_array_h y, gs_array_h check_sum,
                                     double expect, int sample, gs__tasks_run_t *r)
{
    gs_future_h f = NULL;
    gs_status_t st;
    double t0;
    if ((st = gs__tasks_submit(client, y, GS_SUBMIT_KEEP, sample, r, &f, &t0)) != GS_OK) {
        gs__run_failed("submit", st);
        return 1;
    }
    st = gs_future_wait(f, -1.0);
    r->seconds = gs__now() - t0;
    gs__tasks_sample_end(r);
    if (st != GS_OK) {
        gs__run_failed("run", st);
        gs_future_destroy(f);
        return 1;
    }
    if (gs_future_stats(f, &r->stats) != GS_OK) memset(&r->stats, 0, sizeof(r->stats));
    if (gs__report_save(client, f)) {
        gs_future_destroy(f);
        return 1;
    }
    gs_future_destroy(f);   /* the chunks stay: y is persisted until unpersist */
    r->value = NAN;
    r->check_s = 0.0;
    r->check_cpu_ok = 0;
    if (check_sum != NULL) {
        /* sum(y) reads the persisted chunks: proves they are all there and right */
        double v = 0.0;
        gs_bench_cpu_t end;
        r->check_cpu_ok = sample && gs_bench_cpu_sample(&r->check_cpu) == 0;
        t0 = gs__now();
        if ((st = gs_client_compute_scalar(client, check_sum, &v)) != GS_OK) {
            gs__run_failed("the check sum over the persisted chunks", st);
            return 1;
        }
        r->value = v;
        r->check_s = gs__now() - t0;
        if (r->check_cpu_ok && gs_bench_cpu_sample(&end) == 0)
            gs_bench_cpu_diff(&r->check_cpu, &end, &r->check_cpu);
        else
            r->check_cpu_ok = 0;
        if (v != expect) {
            fprintf(stderr, "%s %s: wrong result: the persisted chunks sum to %.17g, expected %.17g\n",
                    g_prog, g_sub, v, expect);
            return 1;
        }
    }
    t0 = gs__now();
    if ((st = gs_client_unpersist(client, y)) != GS_OK) {
        gs__run_failed("unpersist", st);
        return 1;
    }
    if (gs_client_nworkers(client) < 0) {
        fprintf(stderr, "%s %s: scheduler round trip failed: %s\n", g_prog, g_sub, gs_last_error());
        return 1;
    }
    r->release_s = gs__now() - t0;
    return 0;
}

static int gs__tasks_run_tree(gs_client_h client, gs_array_h s, double expect, int sample,
                              gs__tasks_run_t *r)
{
    gs_future_h f = NULL;
    gs_status_t st;
    double v = 0.0, t0;
    if ((st = gs__tasks_submit(client, s, 0, sample, r, &f, &t0)) != GS_OK) {
        gs__run_failed("submit", st);
        return 1;
    }
    st = gs_future_gather(f, &v, 1);
    r->seconds = gs__now() - t0;
    gs__tasks_sample_end(r);
    if (st != GS_OK) {
        gs__run_failed("run", st);
        gs_future_destroy(f);
        return 1;
    }
    if (gs_future_stats(f, &r->stats) != GS_OK) memset(&r->stats, 0, sizeof(r->stats));
    if (gs__report_save(client, f)) {
        gs_future_destroy(f);
        return 1;
    }
    gs_future_destroy(f);
    r->value = v;
    r->check_s = r->release_s = 0.0;
    r->check_cpu_ok = 0;
    if (v != expect) {
        fprintf(stderr, "%s %s: wrong result: sum %.17g, expected %.17g\n", g_prog, g_sub, v,
                expect);
        return 1;
    }
    return 0;
}

static void gs__tasks_report_run(const char *name, const gs__tasks_run_t *r)
{
    fprintf(stderr,
            "%s %s: %s: %" PRIu64 " tasks in %.4f s (submit %.4f s, scheduler %.4f s, kernels "
            "%.4f s, client wait after submit %.4f s, outside the scheduler %.4f s)",
            g_prog, g_sub, name, r->stats.ntasks, r->seconds, r->stats.submit_s,
            r->stats.sched_wall_s, r->stats.run_s_total, r->seconds - r->stats.submit_s,
            r->seconds - r->stats.submit_s - r->stats.sched_wall_s);
    fprintf(stderr, "; submit cpu %.4f s", r->submit_cpu_s);
    if (r->cpu_ok)
        fprintf(stderr, "; cpu s (user+sys): client %.3f+%.3f, gsched %.3f+%.3f, gworkers "
                "%.3f+%.3f; context switches gsched %lld, gworkers %lld", r->cpu.self_user_s,
                r->cpu.self_sys_s, r->cpu.sched_user_s, r->cpu.sched_sys_s, r->cpu.work_user_s,
                r->cpu.work_sys_s, r->cpu.ctxsw_sched, r->cpu.ctxsw_work);
    if (r->check_s > 0) fprintf(stderr, "; check sum %.4f s", r->check_s);
    if (r->check_s > 0 && r->check_cpu_ok)
        fprintf(stderr, " (cpu s: client %.3f+%.3f, gsched %.3f+%.3f, gworkers %.3f+%.3f; "
                "context switches gsched %lld, gworkers %lld)", r->check_cpu.self_user_s,
                r->check_cpu.self_sys_s, r->check_cpu.sched_user_s, r->check_cpu.sched_sys_s,
                r->check_cpu.work_user_s, r->check_cpu.work_sys_s, r->check_cpu.ctxsw_sched,
                r->check_cpu.ctxsw_work);
    if (r->release_s > 0) fprintf(stderr, "; unpersist %.4f s", r->release_s);
    fputc('\n', stderr);
}

static void gs__tasks_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench tasks --tasks N [options]\n"
            "Run N tiny tasks through client -> gsched -> gworker: y = arange(N*E) + 1 in chunks\n"
            "of E elements (one fused task per chunk).\n"
            "  --tasks N             number of tiny tasks (1 .. 90000000; N x E at most 90000000)\n"
            "  --shape independent   persist y: N independent tasks whose outputs stay on the\n"
            "                        workers (default); unpersisted after each run\n"
            "  --shape tree          sum(y): N leaf tasks and a combine tree of fan-in K\n"
            "  --split-every K       fan-in of the combine tree (2 .. 1048576, default 16;\n"
            "                        --shape tree only)\n"
            "  --elems E             elements per task (1 .. 1048576, default 1)\n"
            "  --workers W           workers of the local cluster (default 2 on CPU); with\n"
            "                        --scheduler: wait for W workers\n"
            "  --backend cpu|cuda    local cluster backend (default cuda when a GPU is visible)\n"
            "  --scheduler ADDR      use the cluster at tcp://host:port instead of a local one\n"
            "  --token T             cluster token (default $GSCHED_TOKEN)\n"
            "  --tls-ca-file F --tls-cert F --tls-key F  TLS to --scheduler (cert/key: when\n"
            "                        gsched requires client certificates)\n"
            "  --report FILE         save the last timed run's performance report (one HTML file;\n"
            "                        a %%d in FILE numbers the runs: one report per graph)\n"
            "  --dashboard-address A local cluster: gsched's dashboard HOST:PORT or none\n"
            "  --no-fuse             lower without fusion (arange and +1 become separate tasks)\n"
            "  --repeat R            timed runs after one warm-up run (default 3; median reported)\n"
            "  --no-check            independent: skip the check that sums the persisted chunks\n"
            "                        after the warm-up (tree runs always check the sum)\n"
            "  --verbose, -v         one line per run on stderr (run, submit, scheduler, kernel,\n"
            "                        check and release times)\n"
            "Prints one JSON line: bench, shape, tasks (as the scheduler ran them), workers,\n"
            "backend, seconds (median), submit_s (lowering + encoding + sending), lower_s\n"
            "(lowering alone, timed separately), sched_wall_s (scheduler: graph accepted to\n"
            "done), tasks_per_s, us_per_task, kernel_s (sum of worker kernel times), ...\n");
}

int gs__bench_tasks(int argc, char **argv)
{
    gs__common_t c;
    int64_t ntasks = -1, elems = 1, split_every = -1;
    int tree = 0, check = 1, verbose = 0, sample = 0, cpu_runs = 0;
    gs_bench_cpu_t cpu;
    double cpu_tasks = 0.0, *submit_cpus = NULL;
    const char *shape_name = "independent";
    gs_client_h client = NULL;
    gs_array_h a = NULL, y = NULL, s = NULL;
    double connect_s = 0, lower_s = NAN, expect;
    double *times = NULL, *submits = NULL, *scheds = NULL, *kernels = NULL;
    gs__tasks_run_t warm, run;
    int rc = 1;

    memset(&c, 0, sizeof(c));
    memset(&cpu, 0, sizeof(cpu));
    c.fuse = c.pushdown = 1;
    c.random_version = GS_RANDOM_DEFAULT;
    c.repeat = 3;
    c.token = getenv("GSCHED_TOKEN");
    for (int i = 0; i < argc; i++) {
        const char *a_ = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r;
        if (strcmp(a_, "--help") == 0 || strcmp(a_, "-h") == 0) {
            gs__tasks_usage(stdout);
            return 0;
        }
        if (strcmp(a_, "--tasks") == 0) {
            if (!gs__int_arg(a_, v, 1, INT64_C(90000000), &ntasks)) return 2;
            i++;
            continue;
        }
        if (strcmp(a_, "--elems") == 0) {
            if (!gs__int_arg(a_, v, 1, INT64_C(1048576), &elems)) return 2;
            i++;
            continue;
        }
        if (strcmp(a_, "--split-every") == 0) {
            if (!gs__int_arg(a_, v, 2, INT64_C(1048576), &split_every)) return 2;
            i++;
            continue;
        }
        if (strcmp(a_, "--shape") == 0) {
            if (v == NULL) return gs__bad("option --shape needs a value");
            if (strcmp(v, "independent") == 0) tree = 0;
            else if (strcmp(v, "tree") == 0) tree = 1;
            else return gs__bad("--shape must be independent or tree, not '%s'", v);
            shape_name = v;
            i++;
            continue;
        }
        if (strcmp(a_, "--no-check") == 0) {
            check = 0;
            continue;
        }
        if (strcmp(a_, "--verbose") == 0 || strcmp(a_, "-v") == 0) {
            verbose = 1;
            continue;
        }
        if (strcmp(a_, "--no-pushdown") == 0 || strcmp(a_, "--seed") == 0)
            return gs__bad("option %s does not apply to the tasks benchmark", a_);
        r = gs__common_arg(argc, argv, &i, &c);
        if (r < 0) return 2;
        if (r == 0) return gs__bad("unknown option '%s'", a_);
    }
    if (ntasks < 0) return gs__bad("--tasks is required");
    if (split_every > 0 && !tree) return gs__bad("--split-every applies only to --shape tree");
    if (split_every < 0) split_every = 16;
    if ((double)ntasks * (double)elems > 9.0e7)
        return gs__bad("--tasks x --elems must be at most 90000000 elements (so the sum is exact "
                       "in float64), not %" PRId64 " x %" PRId64, ntasks, elems);
    {
        double n = (double)ntasks * (double)elems;
        expect = n * (n + 1.0) / 2.0;   /* sum of 1 .. n; exact below 2^53 */
    }

    /* the expression */
    {
        int64_t shape[1] = {ntasks * elems}, chunks[1] = {elems};
        gs_reduce_params_t rp;
        memset(&rp, 0, sizeof(rp));
        rp.field_mask = GS_REDUCE_FIELD_SPLIT_EVERY;
        rp.split_every = (int)split_every;
        if (gs_array_arange(0.0, 1.0, 1, shape, chunks, &a) != GS_OK ||
            gs_array_binary_scalar(GS_BINARY_ADD, a, 1.0, &y) != GS_OK ||
            gs_array_reduce(GS_RED_SUM, y, &rp, &s) != GS_OK) {
            rc = gs__cannot_build("the expression");
            goto out;
        }
    }
    /* lowering alone, for the breakdown of submit_s (same flags as the client's) */
    {
        gs_taskgraph_t *tg = NULL;
        unsigned flags = GS_LOWER_CULL | (c.fuse ? GS_LOWER_FUSE : 0u) | GS_LOWER_SLICE_PUSHDOWN;
        double t0 = gs__now();
        if (gs_graph_lower(tree ? s : y, flags, &tg) != GS_OK) {
            fprintf(stderr, "%s %s: cannot lower the expression: %s\n", g_prog, g_sub,
                    gs_last_error());
            goto out;
        }
        lower_s = gs__now() - t0;
        gs_taskgraph_free(tg);
    }
    if (gs__connect(&c, &client, &connect_s) != 0) goto out;

    times = gs_calloc((size_t)c.repeat, sizeof(double), "bench times");
    submits = gs_calloc((size_t)c.repeat, sizeof(double), "bench submit times");
    scheds = gs_calloc((size_t)c.repeat, sizeof(double), "bench scheduler times");
    kernels = gs_calloc((size_t)c.repeat, sizeof(double), "bench kernel times");
    submit_cpus = gs_calloc((size_t)c.repeat, sizeof(double), "bench submit cpu times");
    if (times == NULL || submits == NULL || scheds == NULL || kernels == NULL ||
        submit_cpus == NULL) {
        fprintf(stderr, "%s %s: out of memory\n", g_prog, g_sub);
        goto out;
    }
    /* warm-up (independent: followed by the check over the persisted chunks), then R runs */
    sample = c.scheduler == NULL;   /* CPU figures need the cluster's processes here */
    if (tree ? gs__tasks_run_tree(client, s, expect, sample, &warm)
             : gs__tasks_run_independent(client, y, check ? s : NULL, expect, sample, &warm))
        goto out;
    if (verbose) gs__tasks_report_run("warm-up", &warm);
    run = warm;
    for (int k = 0; k < c.repeat; k++) {
        char name[32];
        if (tree ? gs__tasks_run_tree(client, s, expect, sample, &run)
                 : gs__tasks_run_independent(client, y, NULL, expect, sample, &run))
            goto out;
        if (run.cpu_ok) {
            cpu_runs++;
            cpu_tasks += (double)run.stats.ntasks;
            cpu.self_user_s += run.cpu.self_user_s;
            cpu.self_sys_s += run.cpu.self_sys_s;
            cpu.sched_user_s += run.cpu.sched_user_s;
            cpu.sched_sys_s += run.cpu.sched_sys_s;
            cpu.work_user_s += run.cpu.work_user_s;
            cpu.work_sys_s += run.cpu.work_sys_s;
            cpu.ctxsw_sched += run.cpu.ctxsw_sched;
            cpu.ctxsw_work += run.cpu.ctxsw_work;
        }
        submit_cpus[k] = run.submit_cpu_s;
        snprintf(name, sizeof(name), "run %d", k + 1);
        if (verbose) gs__tasks_report_run(name, &run);
        times[k] = run.seconds;
        submits[k] = run.stats.submit_s;
        scheds[k] = run.stats.sched_wall_s;
        kernels[k] = run.stats.run_s_total;
    }
    {
        double seconds = gs__median(times, c.repeat);
        double tasks = (double)run.stats.ntasks;
        struct rusage ru;
        printf("{\"bench\":\"tasks\",\"shape\":\"%s\",\"tasks\":%" PRIu64, shape_name,
               run.stats.ntasks);
        printf(",\"leaf_tasks\":%" PRId64 ",\"elems\":%" PRId64, ntasks, elems);
        if (tree) printf(",\"split_every\":%" PRId64, split_every);
        printf(",\"workers\":%d,\"backend\":\"%s\"", c.workers, c.backend ? c.backend : "remote");
        printf(",\"fused\":%s", c.fuse ? "true" : "false");
        gs__json_num("seconds", seconds);
        gs__json_num("warm_seconds", warm.seconds);
        printf(",\"repeat\":%d", c.repeat);
        gs__json_num("submit_s", gs__median(submits, c.repeat));
        gs__json_num("submit_cpu_s", gs__median(submit_cpus, c.repeat));
        gs__json_num("lower_s", lower_s);
        gs__json_num("sched_wall_s", gs__median(scheds, c.repeat));
        gs__json_num("tasks_per_s", seconds > 0 ? tasks / seconds : NAN);
        gs__json_num("us_per_task", tasks > 0 ? seconds / tasks * 1e6 : NAN);
        gs__json_num("kernel_s", gs__median(kernels, c.repeat));
        if (tree || check) gs__json_num("value", tree ? run.value : warm.value);
        if (cpu_runs > 0 && cpu_tasks > 0) {
            /* CPU microseconds per task over the timed runs, by process; sys = kernel share */
            double us = 1e6 / cpu_tasks;
            gs__json_num("client_cpu_us_per_task", (cpu.self_user_s + cpu.self_sys_s) * us);
            gs__json_num("sched_cpu_us_per_task", (cpu.sched_user_s + cpu.sched_sys_s) * us);
            gs__json_num("workers_cpu_us_per_task", (cpu.work_user_s + cpu.work_sys_s) * us);
            gs__json_num("sched_sys_fraction",
                         cpu.sched_sys_s / (cpu.sched_user_s + cpu.sched_sys_s));
            gs__json_num("workers_sys_fraction",
                         cpu.work_sys_s / (cpu.work_user_s + cpu.work_sys_s));
            gs__json_num("sched_ctxsw_per_task", (double)cpu.ctxsw_sched / cpu_tasks);
            gs__json_num("workers_ctxsw_per_task", (double)cpu.ctxsw_work / cpu_tasks);
        }
        gs__json_num("connect_s", connect_s);
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            gs__json_num("client_maxrss_mb", (double)ru.ru_maxrss / 1024.0);
        printf(",\"scheduler\":\"%s\"}\n", gs_client_address(client));
        fflush(stdout);
    }
    rc = 0;
out:
    gs_free(times);
    gs_free(submits);
    gs_free(scheds);
    gs_free(kernels);
    gs_free(submit_cpus);
    gs_client_destroy(client);
    gs_array_release(s);
    gs_array_release(y);
    gs_array_release(a);
    return rc;
}

