/* gs-bench soak: many mixed jobs against one local cluster, watching gsched's and every worker's
 * resident memory and open descriptors for growth (issue 12's "300-job soak stays flat").
 *
 * Jobs cycle through five kinds, each checked:
 *   seed       (normal(s, 10, 1, (n, n)) + 1)[::2, ::2].sum(), against a reference computed here
 *              from the generator's definition (chunkops/random.h), relative error <= 1e-12;
 *   transpose  (x + x.T).sum() of x = arange(o, ...) (n, n): integers, compared exactly;
 *   slices     (x[1::3, ::2] * 2 + 1).sum(): exactly;
 *   gather     x - 3 gathered whole: every element exactly;
 *   failure    the svd of a matrix holding a NaN (LAPACK refuses it): the job must FAIL with an
 *              error, and the cluster must keep going.
 * Every --every jobs (and after the last) one JSON line gives the RSS and descriptors of gsched
 * and of each worker; the last line is the verdict: "flat" when, between the sample after the
 * warm-up (--warmup jobs) and the end, no process grew by more than --rss-growth percent (and
 * at least 8 MiB) of RSS or by more than 2 descriptors. Exit 0 when every job did what it must
 * and the verdict is flat, 1 otherwise, 2 for bad arguments. Local cluster only (the daemons are
 * this process's descendants, read from /proc). */
#include "gs-bench.h"

#include "chunkops/random.h"
#include "common/alloc.h"
#include "proc_cpu.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GS__SOAK_PROCS 16

typedef struct gs__soak_opts {
    gs__common_t c;
    int64_t jobs, every, warmup, n;
    double rss_growth;   /* percent */
} gs__soak_opts_t;

typedef struct gs__soak_sample {
    int np;
    int pid[GS__SOAK_PROCS], kind[GS__SOAK_PROCS], fds[GS__SOAK_PROCS];
    unsigned long long rss[GS__SOAK_PROCS];
} gs__soak_sample_t;

typedef struct gs__soak_tally {
    int64_t ok, wrong, failed, failed_as_expected, unexpectedly_ok;
    char first_problem[256];
} gs__soak_tally_t;

static const char *const gs__soak_kinds[] = {"seed", "transpose", "slices", "gather", "failure"};

static void gs__soak_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench soak [--jobs 300] [--every 25] [--warmup 50] [--n 1024]\n"
            "                     [--rss-growth 10] [--workers W] [--backend cpu|cuda] [--seed S]\n"
            "Run JOBS mixed jobs (seed, transpose, slices, gather, and a job that must fail) on one\n"
            "local cluster; every EVERY jobs print the RSS and open descriptors of gsched and each\n"
            "worker as one JSON line; the last line says whether they stayed flat after the first\n"
            "WARMUP jobs (growth above RSS_GROWTH percent and 8 MiB, or above 2 descriptors, is\n"
            "not flat). n: side of the arrays (chunks n / 4).\n");
}

static int gs__soak_args(int argc, char **argv, gs__soak_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    gs__common_defaults(&o->c);
    o->jobs = 300;
    o->every = 25;
    o->warmup = 50;
    o->n = 1024;
    o->rss_growth = 10.0;
    *done = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        int r;
        if (strcmp(a, "--help") == 0) {
            gs__soak_usage(stdout);
            *done = 1;
            return 0;
        }
        if (strcmp(a, "--jobs") == 0 || strcmp(a, "--every") == 0 || strcmp(a, "--warmup") == 0 ||
            strcmp(a, "--n") == 0 || strcmp(a, "--rss-growth") == 0) {
            if (v == NULL) return gs__bad("option %s needs a value", a);
            if (!gs__int_arg(a, v, strcmp(a, "--warmup") == 0 ? 0 : 1, 1000000, &x)) return 2;
            if (strcmp(a, "--jobs") == 0) o->jobs = x;
            else if (strcmp(a, "--every") == 0) o->every = x;
            else if (strcmp(a, "--warmup") == 0) o->warmup = x;
            else if (strcmp(a, "--n") == 0) o->n = x;
            else o->rss_growth = (double)x;
            i++;
            continue;
        }
        if ((r = gs__common_arg(argc, argv, &i, &o->c)) < 0) return 2;
        if (r == 0) return gs__bad("unknown option %s", a);
    }
    if (o->c.scheduler != NULL) return gs__bad("soak runs its own local cluster (no --scheduler)");
    if (o->n < 8) return gs__bad("--n must be at least 8");
    if (o->warmup >= o->jobs) return gs__bad("--warmup must be below --jobs");
    return 0;
}

static void gs__soak_problem(gs__soak_tally_t *t, int64_t j, const char *fmt, double a, double b)
{
    if (t->first_problem[0] != '\0') return;
    int k = snprintf(t->first_problem, sizeof(t->first_problem), "job %" PRId64 " (%s): ", j,
                     gs__soak_kinds[j % 5]);
    if (k > 0 && (size_t)k < sizeof(t->first_problem))
        snprintf(t->first_problem + k, sizeof(t->first_problem) - (size_t)k, fmt, a, b);
}

/* One job: its expression in *expr_p; *want_p its expected value (scalars) or NaN. */
static gs_status_t gs__soak_build(const gs__soak_opts_t *o, int64_t j, gs_array_h *expr_p,
                                  double *want_p)
{
    int64_t n = o->n, shape[2] = {n, n}, chunks[2] = {n / 4, n / 4};
    double off = (double)(j % 1000), want = 0;
    uint64_t seed = o->c.seed + (uint64_t)j;
    gs_array_h x = NULL, a = NULL, b = NULL, c = NULL;
    gs_status_t st;
    switch (j % 5) {
    case 0: {
        gs_slice_t sl[2] = {{0, 0, 2, 0}, {0, 0, 2, 0}};
        if ((st = gs_array_random_normal(seed, 10.0, 1.0, 2, shape, chunks, &x)) == GS_OK &&
            (st = gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &a)) == GS_OK &&
            (st = gs_array_slice(a, 2, sl, &b)) == GS_OK)
            st = gs_array_reduce(GS_RED_SUM, b, NULL, expr_p);
        for (int64_t i = 0; i < n; i += 2)
            for (int64_t k = 0; k < n; k += 2) want += gs_random_normal_v3(seed, (uint64_t)(i * n + k), 10.0, 1.0) + 1.0; /* the default */
        break;
    }
    case 1:
        if ((st = gs_array_arange(off, 1.0, 2, shape, chunks, &x)) == GS_OK &&
            (st = gs_array_transpose(x, NULL, &a)) == GS_OK &&
            (st = gs_array_binary(GS_BINARY_ADD, x, a, &b)) == GS_OK)
            st = gs_array_reduce(GS_RED_SUM, b, NULL, expr_p);
        for (int64_t i = 0; i < n * n; i++) want += 2.0 * (off + (double)i);
        break;
    case 2: {
        gs_slice_t sl[2] = {{1, 0, 3, GS_SLICE_HAS_START}, {0, 0, 2, 0}};
        if ((st = gs_array_arange(off, 1.0, 2, shape, chunks, &x)) == GS_OK &&
            (st = gs_array_slice(x, 2, sl, &a)) == GS_OK &&
            (st = gs_array_binary_scalar(GS_BINARY_MUL, a, 2.0, &b)) == GS_OK &&
            (st = gs_array_binary_scalar(GS_BINARY_ADD, b, 1.0, &c)) == GS_OK)
            st = gs_array_reduce(GS_RED_SUM, c, NULL, expr_p);
        for (int64_t i = 1; i < n; i += 3)
            for (int64_t k = 0; k < n; k += 2) want += 2.0 * (off + (double)(i * n + k)) + 1.0;
        break;
    }
    case 3:
        if ((st = gs_array_arange(off, 1.0, 2, shape, chunks, &x)) == GS_OK)
            st = gs_array_binary_scalar(GS_BINARY_SUB, x, 3.0, expr_p);
        want = NAN;
        break;
    default: {
        /* a tall matrix with one NaN: LAPACK refuses it, the task fails, the job errors */
        int64_t tall[2] = {4 * n, 4}, tch[2] = {n, 4};
        gs_array_h u = NULL, s = NULL, vt = NULL;
        double *h = gs_malloc((size_t)(4 * n * 4) * sizeof(double), "soak nan matrix");
        if (h == NULL) return GS_ERR_NO_MEMORY;
        for (int64_t i = 0; i < 16 * n; i++) h[i] = (double)(i % 7) - 3.0 + (double)(i % 5) * 0.25;
        h[(j / 5) % (16 * n)] = NAN;
        if ((st = gs_array_from_host(h, 2, tall, tch, &x)) == GS_OK &&
            (st = gs_array_svd(x, &u, &s, &vt)) == GS_OK)
            st = gs_array_reduce(GS_RED_SUM, s, NULL, expr_p);
        gs_free(h);
        gs_array_release(u);
        gs_array_release(s);
        gs_array_release(vt);
        want = NAN;
        break;
    }
    }
    gs_array_release(c);
    gs_array_release(b);
    gs_array_release(a);
    gs_array_release(x);
    *want_p = want;
    return st;
}

static void gs__soak_job(gs_client_h client, const gs__soak_opts_t *o, int64_t j, double *buf,
                         gs__soak_tally_t *t)
{
    gs_array_h e = NULL;
    double want = 0, got = 0;
    int64_t n = o->n;
    gs_status_t st = gs__soak_build(o, j, &e, &want);
    if (st != GS_OK) {
        t->failed++;
        gs__soak_problem(t, j, "cannot build the expression (%g %g)", 0, 0);
        return;
    }
    if (j % 5 == 3) st = gs_client_compute(client, e, buf, (size_t)(n * n));
    else st = gs_client_compute_scalar(client, e, &got);
    gs_array_release(e);
    if (j % 5 == 4) {
        if (st != GS_OK) {
            t->failed_as_expected++;
        } else {
            t->unexpectedly_ok++;
            gs__soak_problem(t, j, "the svd of a NaN matrix succeeded (%g, %g)", got, 0);
        }
        return;
    }
    if (st != GS_OK) {
        t->failed++;
        gs__soak_problem(t, j, "failed (status %g) %g", (double)st, 0);
        fprintf(stderr, "%s %s: job %" PRId64 " failed: %s\n", g_prog, g_sub, j, gs_last_error());
        return;
    }
    if (j % 5 == 3) {
        double off = (double)(j % 1000);
        for (int64_t i = 0; i < n * n; i++) {
            if (buf[i] != off + (double)i - 3.0) {
                t->wrong++;
                gs__soak_problem(t, j, "element differs: %.17g vs %.17g", buf[i], off + (double)i - 3.0);
                return;
            }
        }
    } else if (j % 5 == 0 ? !(fabs(got - want) <= 1e-12 * fabs(want)) : got != want) {
        t->wrong++;
        gs__soak_problem(t, j, "gave %.17g, not %.17g", got, want);
        return;
    }
    t->ok++;
}

static void gs__soak_take(gs__soak_sample_t *s)
{
    s->np = gs_bench_proc_daemons(s->pid, s->kind, GS__SOAK_PROCS);
    for (int i = 0; i < s->np; i++) {
        s->rss[i] = gs_bench_proc_rss(s->pid[i]);
        s->fds[i] = gs_bench_proc_fds(s->pid[i]);
    }
}

static void gs__soak_print(const char *what, int64_t jobs, const gs__soak_sample_t *s, const gs__soak_tally_t *t)
{
    printf("{\"bench\":\"soak\",\"phase\":\"%s\",\"jobs\":%" PRId64 ",\"ok\":%" PRId64 ",\"wrong\":%" PRId64
           ",\"failed\":%" PRId64 ",\"failed_as_expected\":%" PRId64 ",\"procs\":[",
           what, jobs, t->ok, t->wrong, t->failed, t->failed_as_expected);
    for (int i = 0; i < s->np; i++)
        printf("%s{\"name\":\"%s\",\"pid\":%d,\"rss_mb\":%.2f,\"fds\":%d}", i ? "," : "",
               s->kind[i] == 1 ? "gsched" : "gworker", s->pid[i], (double)s->rss[i] / 1048576.0, s->fds[i]);
    printf("]}\n");
    fflush(stdout);
}

/* Growth between @a a and @a b, process by process (same pids); 1 when flat. */
static int gs__soak_flat(const gs__soak_opts_t *o, const gs__soak_sample_t *a, const gs__soak_sample_t *b,
                         char *why, size_t len)
{
    if (a->np != b->np) {
        snprintf(why, len, "%d daemons at the warm-up sample, %d at the end", a->np, b->np);
        return 0;
    }
    for (int i = 0; i < a->np; i++) {
        double grow = (double)b->rss[i] - (double)a->rss[i];
        double allowed = fmax(o->rss_growth / 100.0 * (double)a->rss[i], 8.0 * 1048576.0);
        if (a->pid[i] != b->pid[i]) {
            snprintf(why, len, "daemon %d was replaced by %d", a->pid[i], b->pid[i]);
            return 0;
        }
        if (grow > allowed) {
            snprintf(why, len, "pid %d RSS grew %.1f MiB (allowed %.1f)", a->pid[i], grow / 1048576.0,
                     allowed / 1048576.0);
            return 0;
        }
        if (b->fds[i] > a->fds[i] + 2) {
            snprintf(why, len, "pid %d descriptors grew from %d to %d", a->pid[i], a->fds[i], b->fds[i]);
            return 0;
        }
    }
    snprintf(why, len, "no process grew beyond %.0f%% / 8 MiB of RSS or 2 descriptors", o->rss_growth);
    return 1;
}

int gs__bench_soak(int argc, char **argv)
{
    gs__soak_opts_t o;
    gs__soak_sample_t warm, now;
    gs__soak_tally_t t;
    gs_client_h client;
    double connect_s, t0, *buf;
    char why[256];
    int done, rc, flat;

    if ((rc = gs__soak_args(argc, argv, &o, &done)) != 0 || done) return rc;
    if ((buf = gs_malloc((size_t)(o.n * o.n) * sizeof(double), "soak gather")) == NULL) return 1;
    if (gs__connect(&o.c, &client, &connect_s) != 0) {
        gs_free(buf);
        return 1;
    }
    memset(&t, 0, sizeof(t));
    memset(&warm, 0, sizeof(warm));
    t0 = gs__now();
    gs__soak_take(&now);
    gs__soak_print("start", 0, &now, &t);
    for (int64_t j = 0; j < o.jobs; j++) {
        gs__soak_job(client, &o, j, buf, &t);
        if (j + 1 == o.warmup) gs__soak_take(&warm);
        if ((j + 1) % o.every == 0 || j + 1 == o.jobs) {
            gs__soak_take(&now);
            gs__soak_print("sample", j + 1, &now, &t);
        }
    }
    if (o.warmup == 0) memcpy(&warm, &now, sizeof(warm));
    flat = gs__soak_flat(&o, &warm, &now, why, sizeof(why));
    printf("{\"bench\":\"soak\",\"phase\":\"verdict\",\"jobs\":%" PRId64 ",\"workers\":%d,\"backend\":\"%s\","
           "\"n\":%" PRId64 ",\"seconds\":%.1f,\"ok\":%" PRId64 ",\"wrong\":%" PRId64 ",\"failed\":%" PRId64
           ",\"failed_as_expected\":%" PRId64 ",\"unexpectedly_ok\":%" PRId64 ",\"verdict\":\"%s\",\"why\":\"%s\"",
           o.jobs, o.c.workers, o.c.backend, o.n, gs__now() - t0, t.ok, t.wrong, t.failed, t.failed_as_expected,
           t.unexpectedly_ok, flat ? "flat" : "growing", why);
    if (t.first_problem[0] != '\0') printf(",\"first_problem\":\"%s\"", t.first_problem);
    printf("}\n");
    fflush(stdout);
    gs_client_destroy(client);
    gs_free(buf);
    return flat && t.wrong == 0 && t.failed == 0 && t.unexpectedly_ok == 0 ? 0 : 1;
}
