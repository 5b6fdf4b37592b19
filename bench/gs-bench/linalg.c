/* gs-bench dot and svd: dense linear algebra on a persisted input, timed as dask-cuda's
 * local_cupy benchmark does (the input is computed and kept on the workers first; only the
 * operation is timed, its result kept on the workers as `wait(op(x).persist())` does).
 *
 *   dot: x = normal(0, 1, (n, n)) in C x C chunks persisted; time x @ x persisted.
 *        Check (untimed): sum(x @ x) = (column sums of x) . (row sums of x).
 *        gflops = 2 n^3 / seconds.
 *   svd: x = normal(0, 1, (rows, cols)) in (chunk, cols) chunks persisted; time U of
 *        u, s, vt = svd(x) persisted: the Gram passes (or, with --no-gram, the whole TSQR: leaf
 *        QRs, stacked R factors, SVD at the top, assembly of U). s is gathered after the timed
 *        run (recomputing the factorisation, untimed) for the check sum(s^2) = ||x||_F^2, and
 *        U^T U from the persisted U for orth_err = max |U^T U - I| (<= 1e-10 checked).
 *        gflops counts the Householder QR flops 2 m n^2 - 2 n^3 / 3 of the leaves.
 *
 * One JSON line per timed run. */
#include "gs-bench.h"

#include "common/alloc.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gs__la_opts {
    gs__common_t c;
    int64_t n, chunk, rows, cols;
    int rank_def;   /* svd --rank-deficient */
} gs__la_opts_t;

static void gs__la_usage(FILE *f, int svd)
{
    fprintf(f,
            svd ? "usage: gs-bench svd --rows R --cols C --chunk K [options]\n"
                  "Persist x = normal(0, 1, (R, C)) in (K, C) chunks, then time u of\n"
                  "u, s, vt = svd(x) persisted (Gram passes; TSQR with --no-gram).\n"
                  "  --rows R              rows (>= cols)\n"
                  "  --cols C              columns (>= 1)\n"
                  "  --chunk K             rows per chunk (>= 1)\n"
                  "  --no-gram             lower the SVD to TSQR (GS_LOWER_GRAM_SVD off)\n"
                  "  --rank-deficient      x with its last column zeroed (x @ diag(1,..,1,0),\n"
                  "                        persisted untimed): the Gram path refuses it and\n"
                  "                        gs_client_persist / _compute fall back to TSQR;\n"
                  "                        seconds include the refused Gram run\n"
                : "usage: gs-bench dot --n N --chunk C [options]\n"
                  "Persist x = normal(0, 1, (N, N)) in C x C chunks, then time x @ x persisted.\n"
                  "  --n N                 array side (>= 1)\n"
                  "  --chunk C             chunk side (>= 1)\n");
    fprintf(f,
            "  --workers W           workers of the local cluster (default: one per GPU for cuda,\n"
            "                        else 2); with --scheduler: wait for W workers\n"
            "  --backend cpu|cuda    local cluster backend (default cuda when a GPU is visible)\n"
            "  --scheduler ADDR      use the cluster at tcp://host:port instead of a local one\n"
            "  --token T             cluster token (default $GSCHED_TOKEN)\n"
            "  --report FILE         save the last timed run's performance report (one HTML file;\n"
            "                        a %%d in FILE numbers the runs: one report per graph)\n"
            "  --dashboard-address A local cluster: gsched's dashboard HOST:PORT or none\n"
            "  --repeat R            timed runs (default 1)\n"
            "  --seed S              random seed (default 0)\n"
            "Prints one JSON line per timed run: bench, %s, workers, backend, run, seconds,\n"
            "gflops, value, expected, tasks, submit_s, kernel_s, persist_s, ...\n",
            svd ? "rows, cols, chunk" : "n, chunk");
}

static int gs__la_args(int argc, char **argv, int svd, gs__la_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    gs__common_defaults(&o->c);
    o->n = o->chunk = o->rows = o->cols = -1;
    *done = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int64_t *v = NULL;
        int r;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            gs__la_usage(stdout, svd);
            *done = 1;
            return 0;
        }
        if (svd && strcmp(a, "--rank-deficient") == 0) {
            o->rank_def = 1;
            continue;
        }
        if (strcmp(a, "--chunk") == 0) v = &o->chunk;
        else if (!svd && strcmp(a, "--n") == 0) v = &o->n;
        else if (svd && strcmp(a, "--rows") == 0) v = &o->rows;
        else if (svd && strcmp(a, "--cols") == 0) v = &o->cols;
        if (v != NULL) {
            if (!gs__int_arg(a, i + 1 < argc ? argv[i + 1] : NULL, 1, INT64_C(3037000499), v))
                return 2;
            i++;
            continue;
        }
        r = gs__common_arg(argc, argv, &i, &o->c);
        if (r < 0) return 2;
        if (r == 0) return gs__bad("unknown option '%s'", a);
    }
    if (o->chunk < 0) return gs__bad("--chunk is required");
    if (!svd && o->n < 0) return gs__bad("--n is required");
    if (svd && (o->rows < 0 || o->cols < 0)) return gs__bad("--rows and --cols are required");
    if (svd && o->rows < o->cols)
        return gs__bad("--rows %" PRId64 " < --cols %" PRId64 ": the SVD benchmark is for "
                       "tall-and-skinny arrays", o->rows, o->cols);
    return 0;
}

/* Submit @a a, keeping its chunks on the workers when @a keep, else gathering @a out_len
 * doubles into @a out. */
static int gs__la_run(gs_client_h client, gs_array_h a, int keep, double *out, size_t out_len,
                      double *seconds_p, gs_compute_stats_t *stats_p)
{
    gs_future_h f;
    gs_status_t st;
    double t0 = gs__now();
    if ((st = gs_client_submit(client, a, keep ? GS_SUBMIT_KEEP : 0, &f)) != GS_OK) {
        fprintf(stderr, "%s %s: submit failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        return 1;
    }
    st = keep ? gs_future_wait(f, -1.0) : gs_future_gather(f, out, out_len);
    *seconds_p = gs__now() - t0;
    if (st != GS_OK) {
        fprintf(stderr, "%s %s: run failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        gs_future_destroy(f);
        return 1;
    }
    if (stats_p != NULL && gs_future_stats(f, stats_p) != GS_OK)
        memset(stats_p, 0, sizeof(*stats_p));
    st = gs__report_save(client, f) ? GS_ERR_IO : GS_OK;
    gs_future_destroy(f);
    return st != GS_OK;
}

/* As gs__la_run through gs_client_persist / gs_client_compute, which fall back to TSQR when
 * the Gram path refuses the input (no per-graph statistics: *stats_p zeroed). */
static int gs__la_run_fallback(gs_client_h client, gs_array_h a, int keep, double *out,
                               size_t out_len, double *seconds_p, gs_compute_stats_t *stats_p)
{
    double t0 = gs__now();
    gs_status_t st = keep ? gs_client_persist(client, a) : gs_client_compute(client, a, out,
                                                                             out_len);
    *seconds_p = gs__now() - t0;
    if (stats_p != NULL) memset(stats_p, 0, sizeof(*stats_p));
    if (st != GS_OK) {
        fprintf(stderr, "%s %s: run failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        return 1;
    }
    return 0;
}

/* x @ diag(1, .., 1, 0) persisted in place of *x_p (untimed; adds to *persist_s_p). */
static int gs__la_zero_last_col(gs_client_h client, int64_t cols, gs_array_h *x_p,
                                double *persist_s_p)
{
    int64_t shape[2] = {cols, cols};
    double *d = gs_calloc((size_t)(cols * cols), sizeof(double), "bench diag"), t0 = gs__now();
    gs_array_h dh = NULL, xr = NULL;
    int rc = 1;
    if (d == NULL) {
        fprintf(stderr, "%s %s: out of memory\n", g_prog, g_sub);
        return 1;
    }
    for (int64_t i = 0; i + 1 < cols; i++) d[i * cols + i] = 1.0;
    if (gs_array_from_host(d, 2, shape, shape, &dh) != GS_OK ||
        gs_array_matmul(*x_p, dh, &xr) != GS_OK || gs_client_persist(client, xr) != GS_OK) {
        gs__cannot_build("the rank-deficient x");
        goto out;
    }
    gs_client_unpersist(client, *x_p);
    gs_array_release(*x_p);
    *x_p = xr, xr = NULL;
    *persist_s_p += gs__now() - t0;
    rc = 0;
out:
    gs_free(d);
    gs_array_release(dh);
    gs_array_release(xr);
    return rc;
}

static gs_array_h gs__la_sum(gs_array_h a, int axis)
{
    gs_reduce_params_t p;
    gs_array_h s = NULL;
    memset(&p, 0, sizeof(p));
    if (axis >= 0) {
        p.field_mask = GS_REDUCE_FIELD_AXIS;
        p.axis = axis;
    }
    if (gs_array_reduce(GS_RED_SUM, a, &p, &s) != GS_OK) return NULL;
    return s;
}

int gs__bench_dot(int argc, char **argv)
{
    gs__la_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL, y = NULL, sy = NULL, cs = NULL, rs = NULL;
    double connect_s = 0, persist_s = 0, expected = 0, t, *vc = NULL, *vr = NULL;
    gs_compute_stats_t stats;
    int rc, done;

    if ((rc = gs__la_args(argc, argv, 0, &o, &done)) != 0 || done) return rc;
    {
        int64_t shape[2] = {o.n, o.n}, chunks[2] = {o.chunk, o.chunk};
        rc = gs__connect_persist_normal(&o.c, shape, chunks, &client, &x, &connect_s, &persist_s);
    }
    if (rc != 0) goto out;
    rc = 2;
    if ((cs = gs__la_sum(x, 0)) == NULL || (rs = gs__la_sum(x, 1)) == NULL) {
        gs__cannot_build("the check");
        goto out;
    }
    rc = 1;
    /* the check value, untimed: sum(x @ x) = colsum(x) . rowsum(x) */
    vc = gs_malloc((size_t)o.n * sizeof(double), "bench colsum");
    vr = gs_malloc((size_t)o.n * sizeof(double), "bench rowsum");
    if (vc == NULL || vr == NULL) {
        fprintf(stderr, "%s %s: out of memory\n", g_prog, g_sub);
        goto out;
    }
    if (gs__la_run(client, cs, 0, vc, (size_t)o.n, &t, NULL) != 0 ||
        gs__la_run(client, rs, 0, vr, (size_t)o.n, &t, NULL) != 0)
        goto out;
    for (int64_t i = 0; i < o.n; i++) expected += vc[i] * vr[i];
    for (int r = 0; r < o.c.repeat; r++) {
        double v = NAN, tv;
        if (gs_array_matmul(x, x, &y) != GS_OK || (sy = gs__la_sum(y, -1)) == NULL) {
            rc = gs__cannot_build("x @ x");
            goto out;
        }
        if (gs__la_run(client, y, 1, NULL, 0, &t, &stats) != 0) goto out;
        if (gs__la_run(client, sy, 0, &v, 1, &tv, NULL) != 0) goto out;
        printf("{\"bench\":\"dot\",\"n\":%" PRId64 ",\"chunk\":%" PRId64 ",\"workers\":%d", o.n,
               o.chunk, o.c.workers);
        printf(",\"backend\":\"%s\",\"seed\":%" PRIu64 ",\"run\":%d",
               o.c.backend ? o.c.backend : "remote", o.c.seed, r);
        gs__json_num("seconds", t);
        gs__json_num("gflops", 2.0 * (double)o.n * (double)o.n * (double)o.n / t * 1e-9);
        gs__json_num("value", v);
        gs__json_num("expected", expected);
        gs__json_run_tail(&stats, persist_s, connect_s, client);
        gs_client_unpersist(client, y);
        gs_array_release(sy), sy = NULL;
        gs_array_release(y), y = NULL;
        /* each of the n^2 entries has rounding ~ sqrt(n) eps |entry| with |entry| ~ sqrt(n) */
        if (!(fabs(v - expected) <= 1e-12 * (double)o.n * (double)o.n * sqrt((double)o.n))) {
            fprintf(stderr, "%s %s: run %d: sum(x @ x) = %.17g, expected %.17g\n", g_prog, g_sub,
                    r, v, expected);
            goto out;
        }
    }
    rc = 0;
out:
    gs_free(vc);
    gs_free(vr);
    gs_client_destroy(client);
    gs_array_release(sy);
    gs_array_release(y);
    gs_array_release(cs);
    gs_array_release(rs);
    gs_array_release(x);
    return rc;
}

int gs__bench_svd(int argc, char **argv)
{
    gs__la_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL, x2 = NULL, fro = NULL, u = NULL, s = NULL, ut = NULL, utu = NULL;
    double connect_s = 0, persist_s = 0, expected = NAN, t, *vs = NULL, *vg = NULL;
    gs_compute_stats_t stats;
    int rc, done;

    if ((rc = gs__la_args(argc, argv, 1, &o, &done)) != 0 || done) return rc;
    {
        int64_t shape[2] = {o.rows, o.cols}, chunks[2] = {o.chunk, o.cols};
        rc = gs__connect_persist_normal(&o.c, shape, chunks, &client, &x, &connect_s, &persist_s);
    }
    if (rc != 0) goto out;
    rc = 1;
    if (o.rank_def && gs__la_zero_last_col(client, o.cols, &x, &persist_s) != 0) goto out;
    int (*run)(gs_client_h, gs_array_h, int, double *, size_t, double *, gs_compute_stats_t *) =
        o.rank_def ? gs__la_run_fallback : gs__la_run;
    rc = 2;
    if (gs_array_binary(GS_BINARY_MUL, x, x, &x2) != GS_OK || (fro = gs__la_sum(x2, -1)) == NULL) {
        gs__cannot_build("the check");
        goto out;
    }
    rc = 1;
    if (gs__la_run(client, fro, 0, &expected, 1, &t, NULL) != 0) goto out;
    vs = gs_malloc((size_t)o.cols * sizeof(double), "bench s");
    vg = gs_malloc((size_t)o.cols * (size_t)o.cols * sizeof(double), "bench u^T u");
    if (vs == NULL || vg == NULL) {
        fprintf(stderr, "%s %s: out of memory\n", g_prog, g_sub);
        goto out;
    }
    for (int r = 0; r < o.c.repeat; r++) {
        double v = 0, tv, m = (double)o.rows, n = (double)o.cols;
        if (gs_array_svd(x, &u, &s, NULL) != GS_OK) {
            rc = gs__cannot_build("the svd");
            goto out;
        }
        if (run(client, u, 1, NULL, 0, &t, &stats) != 0) goto out;
        /* untimed: U^T U from the persisted U, its largest deviation from I; then U goes, so
         * that s (recomputing the factorisation) has the memory the timed run had */
        double orth = 0.0, s_sec;
        if (gs_array_transpose(u, NULL, &ut) != GS_OK || gs_array_matmul(ut, u, &utu) != GS_OK) {
            gs__cannot_build("U^T U");
            goto out;
        }
        if (gs__la_run(client, utu, 0, vg, (size_t)(o.cols * o.cols), &tv, NULL) != 0) goto out;
        for (int64_t i = 0; i < o.cols * o.cols; i++)
            orth = fmax(orth, fabs(vg[i] - (i / o.cols == i % o.cols ? 1.0 : 0.0)));
        gs_array_release(utu), utu = NULL;
        gs_array_release(ut), ut = NULL;
        gs_client_unpersist(client, u);
        if (run(client, s, 0, vs, (size_t)o.cols, &s_sec, NULL) != 0) goto out;
        for (int64_t i = 0; i < o.cols; i++) v += vs[i] * vs[i];
        printf("{\"bench\":\"svd\",\"rows\":%" PRId64 ",\"cols\":%" PRId64 ",\"chunk\":%" PRId64
               ",\"workers\":%d", o.rows, o.cols, o.chunk, o.c.workers);
        printf(",\"backend\":\"%s\",\"seed\":%" PRIu64 ",\"run\":%d",
               o.c.backend ? o.c.backend : "remote", o.c.seed, r);
        gs__json_num("seconds", t);
        gs__json_num("gflops", (2.0 * m * n * n - 2.0 * n * n * n / 3.0) / t * 1e-9);
        gs__json_num("s_max", vs[0]);
        gs__json_num("s_min", vs[o.cols - 1]);
        gs__json_num("value", v);
        gs__json_num("expected", expected);
        gs__json_num("s_seconds", s_sec);
        gs__json_num("orth_err", orth);
        printf(",\"gram\":%s,\"rank_deficient\":%s", o.c.no_gram ? "false" : "true",
               o.rank_def ? "true" : "false");
        gs__json_run_tail(&stats, persist_s, connect_s, client);
        gs_array_release(u), u = NULL;
        gs_array_release(s), s = NULL;
        if (!(orth <= 1e-10)) {
            fprintf(stderr, "%s %s: run %d: max |U^T U - I| = %.3g\n", g_prog, g_sub, r, orth);
            goto out;
        }
        if (!(fabs(v - expected) <= 1e-10 * expected)) {
            fprintf(stderr, "%s %s: run %d: sum(s^2) = %.17g, ||x||_F^2 = %.17g\n", g_prog, g_sub,
                    r, v, expected);
            goto out;
        }
    }
    rc = 0;
out:
    gs_free(vs);
    gs_free(vg);
    gs_client_destroy(client);
    gs_array_release(utu);
    gs_array_release(ut);
    gs_array_release(u);
    gs_array_release(s);
    gs_array_release(fro);
    gs_array_release(x2);
    gs_array_release(x);
    return rc;
}
