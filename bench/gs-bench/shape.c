/* gs-bench shape: reshape, ravel, tril, diag and eye timed on a persisted input (issue 20).
 *
 *   x = normal(0, 1, (n, n)) in c x c chunks, persisted (untimed); then, timed, each of
 *     reshape  x.reshape(n / 2, 2 n).sum()   (n even: rechunk to whole rows, one copy per chunk)
 *     ravel    x.ravel().sum()
 *     tril     tril(x).sum()                 (one fused where kernel per chunk)
 *     diag     diag(x).sum()                 (one strided copy per run of the diagonal)
 *     eye      eye(n).sum()                  (generated in the kernels, nothing read)
 *
 * One JSON line per op and run: bench "shape", op, n, chunk, workers, backend, run, value,
 * expected (x.sum() for reshape/ravel, x.sum() - triu(x, 1).sum() for tril, the diagonal's sum
 * computed through a slice for diag, n for eye), seconds, gb_per_s (x's bytes / seconds; eye:
 * the bytes of the float64 identity) and the run tail (tasks, kernel_s, persist_s, ...). */
#include "gs-bench.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gs__shape_opts {
    gs__common_t c;
    int64_t n, chunk;
    const char *op;   /* NULL: all */
} gs__shape_opts_t;

static const char *const gs__shape_ops[] = {"reshape", "ravel", "tril", "diag", "eye"};
enum { GS__SHAPE_NOPS = sizeof(gs__shape_ops) / sizeof(gs__shape_ops[0]) };

static void gs__shape_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench shape --n N --chunk C [--op reshape|ravel|tril|diag|eye] [options]\n"
            "Persist x = normal(0, 1, (N, N)) in C x C chunks, then time op(x).sum() for each op\n"
            "(default: all): x.reshape(N/2, 2N) (N even), x.ravel(), tril(x), diag(x), eye(N).\n"
            "  --n N, --chunk C      array and chunk side (>= 1)\n"
            "  --op OP               one op only\n"
            "  --workers W, --backend cpu|cuda, --scheduler ADDR, --token T, --report FILE,\n"
            "  --no-fuse, --no-pushdown, --repeat R, --seed S   as for the other benchmarks\n"
            "Prints one JSON line per op and timed run: bench, op, n, chunk, workers, backend,\n"
            "run, value, expected, seconds, gb_per_s (x's bytes per second), tasks, ...\n");
}

static int gs__shape_own_arg(int argc, char **argv, int *i, void *ctx)
{
    gs__shape_opts_t *o = ctx;
    int known = 0;
    if (strcmp(argv[*i], "--op") != 0) return 0;
    if (*i + 1 >= argc) return gs__bad("--op needs a value");
    o->op = argv[++*i];
    for (int k = 0; k < GS__SHAPE_NOPS; k++) known |= strcmp(o->op, gs__shape_ops[k]) == 0;
    if (!known) return gs__bad("unknown --op '%s'", o->op);
    return 1;
}

static int gs__shape_args(int argc, char **argv, gs__shape_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    return gs__nchunk_args(argc, argv, &o->c, &o->n, &o->chunk, gs__shape_usage,
                           gs__shape_own_arg, o, done);
}

/* The sum of @a a into *v: 0 ok, 1 failure (printed). *seconds_p: submit to result. */
static int gs__shape_sum(gs_client_h client, gs_array_h a, double *v, double *seconds_p,
                         gs_compute_stats_t *stats_p)
{
    gs_array_h s = NULL;
    gs_status_t st;
    int rc;
    if ((st = gs_array_reduce(GS_RED_SUM, a, NULL, &s)) != GS_OK) {
        fprintf(stderr, "%s %s: run failed: %s: %s\n", g_prog, g_sub, gs_status_name(st),
                gs_last_error());
        return 1;
    }
    rc = gs__run_scalar(client, s, v, seconds_p, stats_p);
    gs_array_release(s);
    return rc;
}

/* op(x) and the untimed check value of its sum. 0 ok, 1 run failure, 2 build failure. */
static int gs__shape_build(gs_client_h client, const char *op, gs_array_h x, int64_t n,
                           int64_t chunk, gs_array_h *y_p, double *expected_p)
{
    gs_array_h y = NULL, u = NULL;
    gs_compute_stats_t st;
    gs_status_t s = GS_OK;
    double t, xs = NAN, us = NAN;
    if (strcmp(op, "eye") == 0) {
        *expected_p = (double)n;
        s = gs_array_eye(n, -1, 0, GS_DTYPE_FLOAT64, (int64_t[]){chunk, chunk}, y_p);
        return s == GS_OK ? 0 : 2;
    }
    if (gs__shape_sum(client, x, &xs, &t, &st) != 0) return 1;
    if (strcmp(op, "reshape") == 0) {
        s = gs_array_reshape(x, 2, (int64_t[]){n / 2, 2 * n}, &y);
        *expected_p = xs;
    } else if (strcmp(op, "ravel") == 0) {
        s = gs_array_ravel(x, &y);
        *expected_p = xs;
    } else if (strcmp(op, "tril") == 0) {
        if ((s = gs_array_triu(x, 1, &u)) != GS_OK) goto out;
        if (gs__shape_sum(client, u, &us, &t, &st) != 0) {
            gs_array_release(u);
            return 1;
        }
        s = gs_array_tril(x, 0, &y);
        *expected_p = xs - us;
    } else {   /* diag: the diagonal's sum through a strided slice of the raveled x */
        gs_array_h r = NULL, d = NULL;
        const gs_slice_t sl = GS_SLICE_STEP(n + 1);
        if ((s = gs_array_ravel(x, &r)) == GS_OK && (s = gs_array_slice(r, 1, &sl, &d)) == GS_OK &&
            gs__shape_sum(client, d, &us, &t, &st) != 0) {
            gs_array_release(d);
            gs_array_release(r);
            return 1;
        }
        gs_array_release(d);
        gs_array_release(r);
        if (s == GS_OK) s = gs_array_diag(x, 0, &y);
        *expected_p = us;
    }
out:
    gs_array_release(u);
    if (s != GS_OK) {
        return gs__cannot_build(op);
    }
    *y_p = y;
    return 0;
}

int gs__bench_shape(int argc, char **argv)
{
    gs__shape_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL;
    double connect_s = 0, persist_s = 0;
    int rc, done;

    if ((rc = gs__shape_args(argc, argv, &o, &done)) != 0 || done) return rc;
    rc = gs__connect_persist_square(&o.c, o.n, o.chunk, &client, &x, &connect_s, &persist_s);
    if (rc != 0) goto out;
    for (int k = 0; k < GS__SHAPE_NOPS && rc == 0; k++) {
        const char *op = gs__shape_ops[k];
        gs_array_h y = NULL;
        double expected = NAN;
        if (o.op != NULL && strcmp(o.op, op) != 0) continue;
        if (strcmp(op, "reshape") == 0 && o.n % 2 != 0) continue;
        if ((rc = gs__shape_build(client, op, x, o.n, o.chunk, &y, &expected)) != 0) break;
        for (int r = 0; r < o.c.repeat && rc == 0; r++) {
            gs_compute_stats_t stats;
            double v = NAN, t = 0, nbytes = (double)o.n * (double)o.n * 8.0;
            if (gs__shape_sum(client, y, &v, &t, &stats) != 0) {
                rc = 1;
                break;
            }
            gs__json_open("shape", "op", op);
            gs__json_size(o.n, o.chunk, &o.c);
            gs__json_bool("fused", o.c.fuse);
            printf(",\"run\":%d", r);
            gs__json_num("value", v);
            gs__json_num("expected", expected);
            gs__json_rate(t, nbytes);
            gs__json_run_tail(&stats, persist_s, connect_s, client);
            if (!gs__value_ok(r, v, expected, 1e-9 * fmax(1.0, (double)o.n))) rc = 1;
        }
        gs_array_release(y);
    }
out:
    gs_client_destroy(client);
    gs_array_release(x);
    return rc;
}
