/* gs-bench transpose-sum and slice3: operations that move data between chunks, timed on a
 * persisted input as dask-cuda's local_cupy benchmark does (the input is computed and kept on
 * the workers first; only the operation is timed).
 *
 *   transpose-sum: x = normal(0, 1, (n, n)) persisted; time (x + x.T).sum() (each output chunk
 *                  (i, j) reads x's chunks (i, j) and (j, i), usually on another worker).
 *   slice3:        x persisted; time computing x[::3] gathered into a client buffer.
 *
 * One JSON line per timed run. gb_per_s follows local_cupy's "data processed / duration":
 * x's bytes for transpose-sum, the gathered bytes for slice3. */
#include "gs-bench.h"

#include "chunkops/random.h"
#include "common/alloc.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gs__move_opts {
    gs__common_t c;
    int64_t n, chunk;
} gs__move_opts_t;

static void gs__move_usage(FILE *f, const char *name)
{
    int tsum = strcmp(name, "transpose-sum") == 0;
    fprintf(f,
            "usage: gs-bench %s --n N --chunk C [options]\n"
            "%s\n"
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
            "  --no-fuse             lower without fusion\n"
            "  --no-pushdown         do not push slices into generators\n"
            "  --gather-path P       auto|direct|relay|shm: how results reach the client (default\n"
            "                        auto: shared memory on this host, TCP from others, relay\n"
            "                        through gsched as the fallback)\n"
            "  --repeat R            timed runs (default 1)\n"
            "  --seed S              random seed (default 0)\n"
            "Prints one JSON line per timed run: bench, n, chunk, workers, backend, run, %s,\n"
            "seconds, gb_per_s, tasks, persist_s, ...\n",
            name,
            tsum ? "Persist x = normal(0, 1, (N, N)) in C x C chunks, then time (x + x.T).sum()."
                 : "Persist x = normal(0, 1, (N, N)) in C x C chunks, then time x[::3] gathered\n"
                   "into a client buffer.",
            tsum ? "value, expected (2 * x.sum())"
                 : "gathered_bytes, checked, mismatches, gather_s and gather_gb_per_s (the gather\n"
                   "alone), gather_path, path_used (shm, direct, relay or mixed), chunks_shm,\n"
                   "chunks_direct, chunks_relay, fallbacks");
}

static void gs__transpose_sum_usage(FILE *f)
{
    gs__move_usage(f, "transpose-sum");
}

static void gs__slice3_usage(FILE *f)
{
    gs__move_usage(f, "slice3");
}

static int gs__move_args(int argc, char **argv, const char *name, gs__move_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    return gs__nchunk_args(argc, argv, &o->c, &o->n, &o->chunk,
                           strcmp(name, "slice3") == 0 ? gs__slice3_usage : gs__transpose_sum_usage,
                           NULL, NULL, done);
}

static double g_gather_s;   /* the last slice3 run's gs_future_gather alone */

static void gs__move_head(const char *bench, const gs__move_opts_t *o, int run)
{
    gs__json_open(bench, NULL, NULL);
    gs__json_size(o->n, o->chunk, &o->c);
    gs__json_bool("fused", o->c.fuse);
    gs__json_seed_run(&o->c, run);
}

int gs__bench_transpose_sum(int argc, char **argv)
{
    gs__move_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL, xt = NULL, y = NULL, s = NULL, sx = NULL;
    double connect_s = 0, persist_s = 0, expected = NAN, t;
    gs_compute_stats_t stats;
    int rc, done;

    if ((rc = gs__move_args(argc, argv, "transpose-sum", &o, &done)) != 0 || done) return rc;
    rc = gs__connect_persist_square(&o.c, o.n, o.chunk, &client, &x, &connect_s, &persist_s);
    if (rc != 0) goto out;
    rc = 2;
    if (gs_array_transpose(x, NULL, &xt) != GS_OK || gs_array_binary(GS_BINARY_ADD, x, xt, &y) != GS_OK ||
        gs_array_reduce(GS_RED_SUM, y, NULL, &s) != GS_OK ||
        gs_array_reduce(GS_RED_SUM, x, NULL, &sx) != GS_OK) {
        gs__cannot_build("the expression");
        goto out;
    }
    rc = 1;
    /* the check value, untimed: (x + x.T).sum() = 2 * x.sum() up to rounding */
    if (gs__run_timed(client, sx, 0, &expected, 1, &t, NULL, &stats) != 0) goto out;
    expected *= 2.0;
    for (int r = 0; r < o.c.repeat; r++) {
        double v = NAN;
        if (gs__run_timed(client, s, 0, &v, 1, &t, NULL, &stats) != 0) goto out;
        gs__move_head("transpose-sum", &o, r);
        gs__json_num("value", v);
        gs__json_num("expected", expected);
        gs__json_rate(t, (double)o.n * (double)o.n * 8.0);
        gs__json_run_tail(&stats, persist_s, connect_s, client);
        if (!gs__value_ok(r, v, expected, 1e-9 * fmax(1.0, sqrt((double)o.n * (double)o.n))))
            goto out;
    }
    rc = 0;
out:
    gs_client_destroy(client);
    gs_array_release(sx);
    gs_array_release(s);
    gs_array_release(y);
    gs_array_release(xt);
    gs_array_release(x);
    return rc;
}

int gs__bench_slice3(int argc, char **argv)
{
    gs__move_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL, z = NULL;
    double connect_s = 0, persist_s = 0, *buf = NULL;
    gs_compute_stats_t stats;
    int rc, done;
    int64_t rows;
    size_t len;

    if ((rc = gs__move_args(argc, argv, "slice3", &o, &done)) != 0 || done) return rc;
    rows = (o.n + 2) / 3;
    len = (size_t)rows * (size_t)o.n;
    rc = gs__connect_persist_square(&o.c, o.n, o.chunk, &client, &x, &connect_s, &persist_s);
    if (rc != 0) goto out;
    {
        gs_slice_t sl;
        memset(&sl, 0, sizeof(sl));
        sl.step = 3;
        if (gs_array_slice(x, 1, &sl, &z) != GS_OK) {
            rc = gs__cannot_build("x[::3]");
            goto out;
        }
    }
    rc = 1;
    buf = gs_malloc(len * sizeof(double), "slice3 buffer");
    if (buf == NULL) {
        fprintf(stderr, "%s %s: cannot allocate the %zu-byte client buffer\n", g_prog, g_sub,
                len * sizeof(double));
        goto out;
    }
    for (int r = 0; r < o.c.repeat; r++) {
        double t;
        int64_t checked = 0, bad = 0;
        uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(r + 1);
        gs_gather_stats_t gb, ga;
        gs_client_gather_stats(client, &gb);
        if (gs__run_timed(client, z, 0, buf, len, &t, &g_gather_s, &stats) != 0) goto out;
        gs_client_gather_stats(client, &ga);
        /* untimed: spot-check 4096 elements (and the corners) against the random definition */
        for (int k = 0; k < 4096 + 2 && len > 0; k++) {
            uint64_t e;
            if (k == 0) e = 0;
            else if (k == 1) e = len - 1;
            else {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                e = rng % len;
            }
            int64_t i = (int64_t)(e / (uint64_t)o.n), j = (int64_t)(e % (uint64_t)o.n);
            double want = gs__normal_at(o.c.random_version, o.c.seed, (uint64_t)(3 * i * o.n + j), 0.0, 1.0);
            if (!(fabs(buf[e] - want) <= 1e-12 * fmax(1.0, fabs(want)))) bad++;
            checked++;
        }
        gs__move_head("slice3", &o, r);
        printf(",\"gathered_bytes\":%zu", len * sizeof(double));
        printf(",\"checked\":%" PRId64 ",\"mismatches\":%" PRId64, checked, bad);
        gs__json_rate(t, (double)len * 8.0);
        gs__json_num("gather_s", g_gather_s);
        gs__json_num("gather_gb_per_s", (double)len * 8.0 / g_gather_s * 1e-9);
        gs__json_gather_paths(o.c.gather_path, &gb, &ga);
        gs__json_run_tail(&stats, persist_s, connect_s, client);
        if (bad > 0) {
            fprintf(stderr, "%s %s: run %d: %" PRId64 " of %" PRId64 " checked elements differ\n",
                    g_prog, g_sub, r, bad, checked);
            goto out;
        }
    }
    rc = 0;
out:
    gs_free(buf);
    gs_client_destroy(client);
    gs_array_release(z);
    gs_array_release(x);
    return rc;
}
