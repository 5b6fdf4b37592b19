/* gs-bench scan: cumsum / cumprod (gs_array_cumulative, issue 20) of a persisted
 * x = normal(0, 1, (n, n)) along one axis, the result kept on the workers.
 *
 *   y = cumulative(x, --op, --axis, --dtype) is submitted with GS_SUBMIT_KEEP and waited for:
 *   the time covers the per-chunk totals, the carry chain along the axis and the chunk scans
 *   (x read twice, y written once), not a gather. Untimed, after the last run, the lines 0,
 *   chunk and n-1 of y along the axis (rows for axis 1, columns for axis 0: every carry of
 *   those lines) are gathered and compared with a host loop over the same random definition
 *   (docs/random.md). With --c-loop, a single-threaded host loop computing the same cumsum is timed too
 *   (bench "scan-c-loop"; needs 16 n^2 bytes of memory).
 * One JSON line per timed run: bench, op, axis, n, chunk, workers, backend, dtype, run, seconds,
 * gb_per_s (bytes of x read twice and y written once, per second), checked, mismatches, tasks,
 * submit_s, kernel_s, persist_s, connect_s, scheduler. */
#include "gs-bench.h"

#include "chunkops/random.h"
#include "common/alloc.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gs__scan_opts {
    gs__common_t c;
    int64_t n, chunk;
    int axis;
    int op;             /* gs_scan_op_t */
    int float32;
    int c_loop;
} gs__scan_opts_t;

static void gs__scan_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench scan --n N --chunk C [options]\n"
            "Persist x = normal(0, 1, (N, N)) in C x C chunks; time y = cumsum(x, axis) computed\n"
            "and kept on the workers.\n"
            "  --n N                 array side (>= 1)\n"
            "  --chunk C             chunk side (>= 1)\n"
            "  --axis A              0 or 1 (default 0; -1 and -2 count from the end)\n"
            "  --op sum|prod         cumsum (default) or cumprod\n"
            "  --dtype float32       accumulate and store y in float32 (default float64)\n"
            "  --c-loop              also time a single-threaded host loop (16 N^2 bytes)\n"
            "  --workers W, --backend cpu|cuda, --scheduler ADDR, --token T, --repeat R,\n"
            "  --seed S, --no-fuse, --report FILE: as every gs-bench benchmark\n"
            "Prints one JSON line per timed run: bench, op, axis, n, chunk, workers, backend,\n"
            "dtype, run, seconds, gb_per_s, checked, mismatches, tasks, submit_s, kernel_s, ...\n");
}

static int gs__scan_own_arg(int argc, char **argv, int *i, void *ctx)
{
    gs__scan_opts_t *o = ctx;
    const char *a = argv[*i];
    if (strcmp(a, "--axis") == 0) {
        int64_t v;
        if (*i + 1 >= argc || !gs__int_arg(a, argv[++*i], -2, 1, &v)) return 2;
        o->axis = (int)(v < 0 ? v + 2 : v);
        return 1;
    }
    if (strcmp(a, "--op") == 0) {
        if (*i + 1 >= argc || (strcmp(argv[*i + 1], "sum") != 0 && strcmp(argv[*i + 1], "prod") != 0))
            return gs__bad("--op takes sum or prod");
        o->op = strcmp(argv[++*i], "prod") == 0 ? GS_SCAN_PROD : GS_SCAN_SUM;
        return 1;
    }
    if (strcmp(a, "--dtype") == 0) {
        if (*i + 1 >= argc || (strcmp(argv[*i + 1], "float32") != 0 &&
                               strcmp(argv[*i + 1], "float64") != 0))
            return gs__bad("--dtype takes float32 or float64");
        o->float32 = strcmp(argv[++*i], "float32") == 0;
        return 1;
    }
    if (strcmp(a, "--c-loop") == 0) {
        o->c_loop = 1;
        return 1;
    }
    return 0;
}

static int gs__scan_args(int argc, char **argv, gs__scan_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    return gs__nchunk_args(argc, argv, &o->c, &o->n, &o->chunk, gs__scan_usage, gs__scan_own_arg,
                           o, done);
}

/* acc OP v in the benchmark's dtype. */
static double gs__scan_step(const gs__scan_opts_t *o, double acc, double v)
{
    double r;
    if (o->float32) {
        float a = (float)acc, b = (float)v;
        return (double)(o->op == GS_SCAN_PROD ? a * b : a + b);
    }
    r = o->op == GS_SCAN_PROD ? acc * v : acc + v;
    return r;
}

/* Line @a i of y along the scanned axis (row i for axis 1, column i for axis 0; n values)
 * into @a buf; 0 ok, 1 failure (printed). */
static int gs__scan_line(gs_client_h client, gs_array_h y, const gs__scan_opts_t *o, int64_t i,
                         double *buf)
{
    gs_slice_t sl[2] = {GS_SLICE_AT(i), GS_SLICE_ALL};
    if (o->axis == 0) {
        sl[0] = GS_SLICE_ALL;
        sl[1] = GS_SLICE_AT(i);
    }
    return gs__gather_f64(client, y, 2, sl, buf, (size_t)o->n, "line", i);
}

/* Lines 0, chunk and n-1 of the kept y along the axis (every carry of those lines) against
 * host loops over the random definition. */
static int gs__scan_check(gs_client_h client, gs_array_h y, const void *opts, int64_t *checked_p,
                          int64_t *bad_p)
{
    const gs__scan_opts_t *o = opts;
    const int64_t lines[3] = {0, o->chunk, o->n - 1};
    const double eps = o->float32 ? 0x1p-23 : 0x1p-52;
    double *got = gs_malloc((size_t)o->n * sizeof(double), "scan line");
    *checked_p = *bad_p = 0;
    if (got == NULL) return 1;
    for (int r = 0; r < 3; r++) {
        const int64_t l = lines[r];
        double acc = o->op == GS_SCAN_PROD ? 1.0 : 0.0, mag = 0.0;
        if (l >= o->n || (r > 0 && l <= lines[r - 1])) continue;
        if (gs__scan_line(client, y, o, l, got) != 0) {
            gs_free(got);
            return 1;
        }
        for (int64_t k = 0; k < o->n; k++) {
            const int64_t idx = o->axis == 1 ? l * o->n + k : k * o->n + l;
            double v = gs__normal_at(o->c.random_version, o->c.seed, (uint64_t)idx, 0.0, 1.0);
            if (o->float32) v = (double)(float)v;
            acc = gs__scan_step(o, acc, v);
            mag = o->op == GS_SCAN_PROD ? fmax(fabs(acc), fabs(got[k])) : mag + fabs(v);
            /* the chunked order differs from this loop's: n eps |terms| bounds the difference */
            const double tol = 4.0 * (double)(k + 1) * eps * mag + 1e-300;
            if (gs__tally((isnan(acc) && isnan(got[k])) || acc == got[k] || fabs(got[k] - acc) <= tol,
                          checked_p, bad_p))
                fprintf(stderr, "%s %s: line %" PRId64 " element %" PRId64 " = %.17g, "
                        "expected %.17g\n", g_prog, g_sub, l, k, got[k], acc);
        }
    }
    gs_free(got);
    return 0;
}

/* The baseline: one thread, row after row (each row adds the previous one along axis 0, or a
 * running value along axis 1), x generated first and not timed. */
static void gs__scan_c_loop(const gs__scan_opts_t *o)
{
    const size_t nn = (size_t)o->n * (size_t)o->n;
    double *x = gs__host_normal(o->c.random_version, o->c.seed, nn, "scan loop x"), *y = gs_malloc(nn * sizeof(double), "scan loop y");
    if (x == NULL || y == NULL) {
        fprintf(stderr, "%s %s: no memory for the C loop\n", g_prog, g_sub);
        goto out;
    }
    const int64_t n = o->n;
    double t0 = gs__now();
    if (o->axis == 0) {
        memcpy(y, x, (size_t)n * sizeof(double));
        for (int64_t i = 1; i < n; i++)
            for (int64_t j = 0; j < n; j++) y[i * n + j] = y[(i - 1) * n + j] + x[i * n + j];
    } else {
        for (int64_t i = 0; i < n; i++) {
            double acc = 0.0;
            for (int64_t j = 0; j < n; j++) y[i * n + j] = acc += x[i * n + j];
        }
    }
    double t = gs__now() - t0;
    printf("{\"bench\":\"scan-c-loop\",\"op\":\"sum\",\"axis\":%d,\"n\":%" PRId64 ",\"threads\":1",
           o->axis, n);
    gs__json_rate(t, 16.0 * (double)nn);
    gs__json_num("check", y[nn - 1]);
    gs__json_close();
out:
    gs_free(x);
    gs_free(y);
}

/* Run @a run's JSON line up to its rates: x read twice, y written once. */
static void gs__scan_head(const void *opts, int run, double seconds)
{
    const gs__scan_opts_t *o = opts;
    gs__json_open("scan", "op", o->op == GS_SCAN_PROD ? "prod" : "sum");
    printf(",\"axis\":%d", o->axis);
    gs__json_size(o->n, o->chunk, &o->c);
    gs__json_str("dtype", o->float32 ? "float32" : "float64");
    gs__json_seed_run(&o->c, run);
    gs__json_rate(seconds, (double)o->n * (double)o->n * (16.0 + (o->float32 ? 4.0 : 8.0)));
}

int gs__bench_scan(int argc, char **argv)
{
    gs__scan_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL, y = NULL;
    double connect_s = 0, persist_s = 0;
    int rc, done;

    if ((rc = gs__scan_args(argc, argv, &o, &done)) != 0 || done) return rc;
    rc = gs__connect_persist_square(&o.c, o.n, o.chunk, &client, &x, &connect_s, &persist_s);
    if (rc != 0) goto out;
    if (gs_array_cumulative(x, (gs_scan_op_t)o.op, o.axis,
                            o.float32 ? GS_DTYPE_FLOAT32 : GS_DTYPE_FLOAT64, &y) != GS_OK) {
        rc = gs__cannot_build("the scan");
        goto out;
    }
    if ((rc = gs__kept_runs(client, y, o.c.repeat, gs__scan_check, gs__scan_head, &o, persist_s,
                            connect_s)) != 0)
        goto out;
    if (o.c_loop) gs__scan_c_loop(&o);
    rc = 0;
out:
    gs_client_destroy(client);
    gs_array_release(y);
    gs_array_release(x);
    return rc;
}
