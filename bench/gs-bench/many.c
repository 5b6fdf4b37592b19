/* gs-bench many: three results sharing work, computed by one gs_client_compute_many (one graph,
 * the shared exp(x) computed once) against three gs_client_compute calls (three graphs, each
 * generating x and computing exp(x) again). y = exp(normal(0, 1, (n, n)) / 4):
 *   r0 = (y + 1).sum()   r1 = (y * 2).max()   r2 = y.mean(axis=0)  (n values)
 * One JSON line per timed run; both ways run in every run (separate first) and their results
 * must agree: the same bits on the CPU backend, within 1e-12 relative on CUDA, whose reduction
 * order follows each kernel's plan (max_rel_diff; identical: the same bits). */
#include "gs-bench.h"

#include "common/alloc.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void gs__many_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench many --n N --chunk C [options]\n"
            "y = exp(normal(0, 1, (N, N)) / 4) in C x C chunks; time (y + 1).sum(), (y * 2).max()\n"
            "and y.mean(axis=0) computed by one gs_client_compute_many against three\n"
            "gs_client_compute calls.\n"
            "  --n N                 array side (>= 1)\n"
            "  --chunk C             chunk side (>= 1)\n"
            "  --workers W           workers of the local cluster (default: one per GPU for cuda,\n"
            "                        else 2); with --scheduler: wait for W workers\n"
            "  --backend cpu|cuda    local cluster backend (default cuda when a GPU is visible)\n"
            "  --scheduler ADDR      use the cluster at tcp://host:port instead of a local one\n"
            "  --token T             cluster token (default $GSCHED_TOKEN)\n"
            "  --no-fuse             lower without fusion\n"
            "  --repeat R            timed runs after one cold run (default 1)\n"
            "  --seed S              random seed (default 0)\n"
            "Prints one JSON line per timed run: bench, n, chunk, workers, backend, run, seconds\n"
            "(compute_many), separate_seconds (three computes), speedup, tasks, separate_tasks,\n"
            "max_rel_diff, identical (results byte-identical), value (r0), ...\n");
}

typedef struct gs__many_run {
    double seconds;
    uint64_t tasks;
    gs_compute_stats_t stats;
} gs__many_run_t;

static int gs__many_fail(const char *what, gs_status_t st)
{
    fprintf(stderr, "%s %s: %s failed: %s: %s\n", g_prog, g_sub, what, gs_status_name(st),
            gs_last_error());
    return 1;
}

/* Three gs_client_compute calls (tasks from their graphs, submitted the same way). */
static int gs__many_separate(gs_client_h client, gs_array_h *r, double **out, size_t *len,
                             gs__many_run_t *run)
{
    double t0 = gs__now();
    gs_status_t st;
    run->tasks = 0;
    for (int i = 0; i < 3; i++) {
        gs_future_h f;
        gs_compute_stats_t s;
        if ((st = gs_client_submit(client, r[i], 0, &f)) != GS_OK)
            return gs__many_fail("submit", st);
        st = gs_future_gather(f, out[i], len[i]);
        if (st == GS_OK && gs_future_stats(f, &s) == GS_OK) run->tasks += s.ntasks;
        gs_future_destroy(f);
        if (st != GS_OK) return gs__many_fail("compute", st);
    }
    run->seconds = gs__now() - t0;
    return 0;
}

static int gs__many_together(gs_client_h client, gs_array_h *r, double **out, size_t *len,
                             gs__many_run_t *run)
{
    gs_compute_result_t res[3];
    gs_status_t st;
    double t0 = gs__now();
    memset(res, 0, sizeof(res));
    for (int i = 0; i < 3; i++) {
        res[i].array = r[i];
        res[i].out = out[i];
        res[i].out_len = len[i];
    }
    if ((st = gs_client_compute_many(client, 3, res, &run->stats)) != GS_OK)
        return gs__many_fail("compute_many", st);
    run->seconds = gs__now() - t0;
    run->tasks = run->stats.ntasks;
    return 0;
}

int gs__bench_many(int argc, char **argv)
{
    gs__common_t c;
    int64_t n = -1, chunk = -1;
    gs_client_h client = NULL;
    gs_array_h x = NULL, x4 = NULL, y = NULL, t1 = NULL, t2 = NULL, r[3] = {NULL, NULL, NULL};
    double *sep[3] = {NULL, NULL, NULL}, *tog[3] = {NULL, NULL, NULL}, connect_s = 0;
    size_t len[3];
    int rc, done;

    if ((rc = gs__nchunk_args(argc, argv, &c, &n, &chunk, gs__many_usage, NULL, NULL, &done)) != 0 ||
        done)
        return rc;
    rc = 1;
    {
        const int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
        gs_reduce_params_t ax0;
        memset(&ax0, 0, sizeof(ax0));
        ax0.field_mask = GS_REDUCE_FIELD_AXIS;
        ax0.axis = 0;
        if (gs_array_random_normal(c.seed, 0.0, 1.0, 2, shape, chunks, &x) != GS_OK ||
            gs_array_binary_array_scalar(GS_BINARY_DIV, x, 4.0, &x4) != GS_OK ||
            gs_array_unary(GS_UNARY_EXP, x4, &y) != GS_OK ||
            gs_array_binary_array_scalar(GS_BINARY_ADD, y, 1.0, &t1) != GS_OK ||
            gs_array_reduce(GS_RED_SUM, t1, NULL, &r[0]) != GS_OK ||
            gs_array_binary_array_scalar(GS_BINARY_MUL, y, 2.0, &t2) != GS_OK ||
            gs_array_reduce(GS_RED_MAX, t2, NULL, &r[1]) != GS_OK ||
            gs_array_reduce(GS_RED_MEAN, y, &ax0, &r[2]) != GS_OK) {
            rc = gs__cannot_build("the expressions");
            goto out;
        }
    }
    len[0] = len[1] = 1;
    len[2] = (size_t)n;
    for (int i = 0; i < 3; i++) {
        sep[i] = gs_calloc(len[i], sizeof(double), "bench results");
        tog[i] = gs_calloc(len[i], sizeof(double), "bench results");
        if (sep[i] == NULL || tog[i] == NULL) {
            fprintf(stderr, "%s %s: out of memory\n", g_prog, g_sub);
            goto out;
        }
    }
    if (gs__connect(&c, &client, &connect_s) != 0) goto out;
    for (int run = 0; run <= c.repeat; run++) {   /* run 0: cold, not printed */
        gs__many_run_t s = {.seconds = 0}, t = {.seconds = 0};
        /* the shared work is stored once and read back, so a result may be reduced from
         * chunks where the separate compute reduced the generator fused: the CPU backend gives
         * the same bits, a CUDA kernel's summation order follows its plan (last bits) */
        double rel = 0.0;
        if (gs__many_separate(client, r, sep, len, &s) != 0) goto out;
        if (gs__many_together(client, r, tog, len, &t) != 0) goto out;
        for (int i = 0; i < 3; i++)
            for (size_t e = 0; e < len[i]; e++) {
                const double a = sep[i][e], b = tog[i][e];
                const double d = (a == b || (a != a && b != b)) ? 0.0
                                                          : fabs(a - b) / fmax(fabs(a), fabs(b));
                if (!(d <= rel)) rel = d;   /* NaN on one side only: NaN */
            }
        if (!(rel <= 1e-12)) {
            fprintf(stderr, "%s %s: run %d: compute_many's results differ from the three "
                            "computes' (max relative difference %g)\n", g_prog, g_sub, run, rel);
            goto out;
        }
        if (run == 0) continue;
        gs__json_open("many", NULL, NULL);
        gs__json_size(n, chunk, &c);
        gs__json_bool("fused", c.fuse);
        printf(",\"run\":%d", run);
        gs__json_num("seconds", t.seconds);
        gs__json_num("separate_seconds", s.seconds);
        gs__json_num("max_rel_diff", rel);
        gs__json_num("speedup", s.seconds / t.seconds);
        printf(",\"separate_tasks\":%" PRIu64 ",\"identical\":%s", s.tasks,
               rel == 0.0 ? "true" : "false");
        gs__json_num("value", tog[0][0]);
        gs__json_run_tail(&t.stats, 0.0, connect_s, client);
    }
    rc = 0;
out:
    for (int i = 0; i < 3; i++) {
        gs_array_release(r[i]);
        gs_free(sep[i]);
        gs_free(tog[i]);
    }
    gs_array_release(t1);
    gs_array_release(t2);
    gs_array_release(y);
    gs_array_release(x4);
    gs_array_release(x);
    gs_client_destroy(client);
    return rc;
}
