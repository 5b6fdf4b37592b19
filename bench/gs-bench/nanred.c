/* gs-bench nanred: the truth and NaN-skipping reductions (gs_array_reduce_composite) and
 * np.prod beside a plain sum, on a persisted x = normal(0, 1, (n, n)) whose elements above 2
 * read as NaN (y = where(x > 2, nan, x), fused into each reduction; ~2.3% NaN), optionally
 * cast to float32; or, with --dtype int64, y = astype(x * 2^52, int64) (no NaN: the exact
 * integer reductions, values beyond 2^53). Each op reduces y over every axis; the time is the whole computation
 * (submit, tasks, gather of the scalar). One JSON line per op and timed run: bench, op, n,
 * chunk, workers, backend, dtype, run, value, seconds, gb_per_s (x's float64 bytes per
 * second: the composite ops read x more than once, so their rate against sum's is the
 * overhead), tasks, ... */
#include "gs-bench.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gs__nanred_opts {
    gs__common_t c;
    int64_t n, chunk;
    gs_dtype_t dtype;   /* of y: float64, float32 or int64 */
    int persist_y;
} gs__nanred_opts_t;

/* The ops timed: a plain reduction (credop < 0) or a composite one. */
static const struct {
    const char *name;
    int redop, credop;
} gs__nanred_ops[] = {
    {"sum", GS_RED_SUM, -1},
    {"prod", GS_RED_PROD, -1},
    {"count_nonzero", -1, GS_CRED_COUNT_NONZERO},
    {"any", -1, GS_CRED_ANY},
    {"nansum", -1, GS_CRED_NANSUM},
    {"nanmean", -1, GS_CRED_NANMEAN},
    {"nanmax", -1, GS_CRED_NANMAX},
    {"nanargmax", -1, GS_CRED_NANARGMAX},
    {"nanvar", -1, GS_CRED_NANVAR},
};

static void gs__nanred_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench nanred --n N --chunk C [options]\n"
            "Persist x = normal(0, 1, (N, N)) in C x C chunks; y = where(x > 2, nan, x); time\n"
            "sum, prod, count_nonzero, any, nansum, nanmean, nanmax, nanargmax and nanvar of y\n"
            "over every axis.\n"
            "  --n N                 array side (>= 1)\n"
            "  --chunk C             chunk side (>= 1)\n"
            "  --dtype float32|int64 cast y to float32 first (default float64); int64: y is\n"
            "                        astype(x * 2^52, int64) instead (no NaN; values beyond\n"
            "                        2^53, sums that wrap: the exact integer reductions)\n"
            "  --persist-y           persist y too (as data with NaN in it): time the reductions\n"
            "                        alone; otherwise y is computed inside each reduction (a\n"
            "                        composite op reading y twice materialises it once per chunk)\n"
            "  --workers W, --backend cpu|cuda, --scheduler ADDR, --token T, --repeat R,\n"
            "  --seed S, --no-fuse, --report FILE: as every gs-bench benchmark\n"
            "Prints one JSON line per op and timed run: bench, op, n, chunk, workers, backend,\n"
            "dtype, run, value, seconds, gb_per_s, tasks, submit_s, kernel_s, persist_s, ...\n");
}

static int gs__nanred_own_arg(int argc, char **argv, int *i, void *ctx)
{
    gs__nanred_opts_t *o = ctx;
    const char *a = argv[*i];
    if (strcmp(a, "--persist-y") == 0) {
        o->persist_y = 1;
        return 1;
    }
    if (strcmp(a, "--dtype") == 0) {
        const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
        if (v == NULL || (strcmp(v, "float32") != 0 && strcmp(v, "float64") != 0 &&
                          strcmp(v, "int64") != 0))
            return gs__bad("--dtype takes float32, float64 or int64");
        (*i)++;
        o->dtype = strcmp(v, "float32") == 0 ? GS_DTYPE_FLOAT32
                   : strcmp(v, "int64") == 0 ? GS_DTYPE_INT64
                                             : GS_DTYPE_FLOAT64;
        return 1;
    }
    return 0;
}

static int gs__nanred_args(int argc, char **argv, gs__nanred_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    return gs__nchunk_args(argc, argv, &o->c, &o->n, &o->chunk, gs__nanred_usage,
                           gs__nanred_own_arg, o, done);
}

int gs__bench_nanred(int argc, char **argv)
{
    gs__nanred_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL, m = NULL, nan = NULL, y = NULL, yc = NULL, r = NULL;
    double connect_s = 0, persist_s = 0;
    gs_compute_stats_t stats;
    int rc, done;

    if ((rc = gs__nanred_args(argc, argv, &o, &done)) != 0 || done) return rc;
    rc = gs__connect_persist_square(&o.c, o.n, o.chunk, &client, &x, &connect_s, &persist_s);
    if (rc != 0) goto out;
    rc = 2;
    if (o.dtype == GS_DTYPE_INT64
            ? gs_array_binary_array_scalar(GS_BINARY_MUL, x, 0x1p52, &y) != GS_OK ||
                  gs_array_astype(y, GS_DTYPE_INT64, &yc) != GS_OK
            : gs_array_binary_array_scalar(GS_BINARY_GT, x, 2.0, &m) != GS_OK ||
                  gs_array_full_like(x, NAN, &nan) != GS_OK ||
                  gs_array_where(m, nan, x, &y) != GS_OK ||
                  gs_array_astype(y, o.dtype, &yc) != GS_OK) {
        gs__cannot_build("y");
        goto out;
    }
    rc = 1;
    if (o.persist_y) { /* y as data loaded with NaN in it would be: the reductions alone */
        gs_status_t st;
        double t0 = gs__now();
        if ((st = gs_client_persist(client, yc)) != GS_OK) {
            fprintf(stderr, "%s %s: persisting y failed: %s: %s\n", g_prog, g_sub,
                    gs_status_name(st), gs_last_error());
            goto out;
        }
        persist_s += gs__now() - t0;
    }
    for (size_t k = 0; k < sizeof(gs__nanred_ops) / sizeof(gs__nanred_ops[0]); k++) {
        gs_status_t st = gs__nanred_ops[k].credop < 0
                             ? gs_array_reduce((gs_redop_t)gs__nanred_ops[k].redop, yc, NULL, &r)
                             : gs_array_reduce_composite((gs_credop_t)gs__nanred_ops[k].credop, yc,
                                                         0, NULL, 0, NULL, &r);
        if (st != GS_OK) {
            rc = gs__cannot_build(gs__nanred_ops[k].name);
            goto out;
        }
        for (int run = 0; run < o.c.repeat; run++) {
            double v = NAN, t;
            if (gs__run_scalar(client, r, &v, &t, &stats) != 0) goto out;
            gs__json_open("nanred", "op", gs__nanred_ops[k].name);
            gs__json_size(o.n, o.chunk, &o.c);
            gs__json_str("dtype", gs_dtype_name(o.dtype));
            gs__json_bool("fused", o.c.fuse);
            gs__json_bool("persist_y", o.persist_y);
            printf(",\"run\":%d", run);
            gs__json_num("value", v);
            gs__json_rate(t, (double)o.n * (double)o.n * 8.0);
            gs__json_run_tail(&stats, persist_s, connect_s, client);
        }
        gs_array_release(r);
        r = NULL;
    }
    rc = 0;
out:
    gs_client_destroy(client);
    gs_array_release(r);
    gs_array_release(yc);
    gs_array_release(y);
    gs_array_release(nan);
    gs_array_release(m);
    gs_array_release(x);
    return rc;
}
