/* gs-bench stencil: the seed's 3x3 smoothing (issue 16), timed on a persisted input.
 *
 *   x = normal(0, 1, (n, n)) in C x C chunks, persisted; time computing and keeping
 *   s = stencil(x, 3x3 weights 1/9, radius 1, --boundary) on the workers (each chunk's task
 *   reads its chunk and its neighbours' edge slabs). gb_per_s counts what any implementation
 *   must move: x read once and s written once (2 n^2 8 bytes); limit_s is that over the
 *   memory bandwidth given by --bandwidth-tbps (default 4.3, one H200). Untimed checks compare
 *   the rows of s around the first chunk boundary and at the array's edges with a plain C
 *   reference computed from the random definition.
 *
 *   --kernel cuda times the same smoothing written as a CUDA C++ kernel and run through
 *   gs_array_map_overlap (the padded block assembled on the device, then the kernel).
 *
 *   When 2 n^2 8 bytes fit --loop-max-mb (default 4096), the same smoothing as a
 *   single-threaded C loop over host memory is timed in the same run (bench "stencil-c-loop"):
 *   the baseline the seed compares with. */
#include "gs-bench.h"
#include "tests/kernels/test_kernels_cuda.h"

#include "chunkops/random.h"
#include "common/alloc.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gs__st_opts {
    gs__common_t c;
    int64_t n, chunk, loop_max_mb;
    int boundary;
    int cuda_kernel;                /* --kernel cuda: map_overlap with the CUDA source below */
    double tbps;
} gs__st_opts_t;

static const char *const gs__bnames[GS_BOUNDARY_COUNT] = {"none", "reflect", "periodic",
                                                          "constant"};

static void gs__st_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench stencil --n N --chunk C [options]\n"
            "Persist x = normal(0, 1, (N, N)) in C x C chunks, then time the 3x3 smoothing\n"
            "stencil(x) (weights 1/9) computed and kept on the workers.\n"
            "  --n N                 array side (>= 1)\n"
            "  --chunk C             chunk side (>= 1)\n"
            "  --boundary B          none|reflect|periodic|constant (0) (default none)\n"
            "  --kernel K            builtin (gs_array_stencil, default) or cuda (the same\n"
            "                        smoothing as a CUDA C++ kernel through gs_array_map_overlap;\n"
            "                        CUDA workers only)\n"
            "  --bandwidth-tbps T    memory bandwidth for limit_s (default 4.3: one H200)\n"
            "  --loop-max-mb M       time the single-threaded C loop when x and s fit M MB\n"
            "                        of host memory (default 4096; 0: never)\n"
            "  --workers W, --backend cpu|cuda, --scheduler ADDR, --token T, --report FILE,\n"
            "  --repeat R, --seed S  as the other benchmarks\n"
            "Prints one JSON line per timed run: bench, n, chunk, workers, backend, boundary, run,\n"
            "seconds, gb_per_s, limit_s, checked, mismatches, tasks, kernel_s, ...; and one\n"
            "stencil-c-loop line: seconds, gb_per_s.\n");
}

static int gs__st_own_arg(int argc, char **argv, int *i, void *ctx)
{
    gs__st_opts_t *o = ctx;
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(a, "--loop-max-mb") == 0) {
        if (!gs__int_arg(a, v, 0, INT64_C(1) << 40, &o->loop_max_mb)) return 2;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--boundary") == 0) {
        int b = -1;
        for (int k = 0; k < GS_BOUNDARY_COUNT && v != NULL; k++)
            if (strcmp(v, gs__bnames[k]) == 0) b = k;
        if (b < 0) return gs__bad("--boundary takes none, reflect, periodic or constant");
        o->boundary = b;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--kernel") == 0) {
        if (v == NULL || (strcmp(v, "builtin") != 0 && strcmp(v, "cuda") != 0))
            return gs__bad("--kernel takes builtin or cuda");
        o->cuda_kernel = strcmp(v, "cuda") == 0;
        (*i)++;
        return 1;
    }
    if (strcmp(a, "--bandwidth-tbps") == 0) {
        char *end = NULL;
        o->tbps = v != NULL ? strtod(v, &end) : 0;
        if (v == NULL || end == v || *end != '\0' || !(o->tbps > 0))
            return gs__bad("--bandwidth-tbps takes a positive number");
        (*i)++;
        return 1;
    }
    return 0;
}

static int gs__st_args(int argc, char **argv, gs__st_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    o->loop_max_mb = 4096;
    o->boundary = GS_BOUNDARY_NONE;
    o->tbps = 4.3;
    return gs__nchunk_args(argc, argv, &o->c, &o->n, &o->chunk, gs__st_usage, gs__st_own_arg, o,
                           done);
}

static const double gs__w9[9] = {1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9,
                                 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9};

/* Source index of g on an axis of n under boundary b; -1 constant 0, -2 outside (none). */
static int64_t gs__st_map(int64_t g, int64_t n, int b)
{
    if (g >= 0 && g < n) return g;
    if (b == GS_BOUNDARY_PERIODIC) return ((g % n) + n) % n;
    if (b == GS_BOUNDARY_REFLECT) return g < 0 ? -g - 1 : 2 * n - g - 1;
    return b == GS_BOUNDARY_CONSTANT ? -1 : -2;
}

/* s[i, j] from the random definition @a version (reference for the checks). */
static double gs__st_ref(int version, uint64_t seed, int64_t n, int b, int64_t i, int64_t j)
{
    double acc = 0.0;
    for (int di = 0; di < 3; di++)
        for (int dj = 0; dj < 3; dj++) {
            int64_t si = gs__st_map(i + di - 1, n, b), sj = gs__st_map(j + dj - 1, n, b);
            if (si == -2 || sj == -2)
                return gs__normal_at(version, seed, (uint64_t)(i * n + j), 0.0, 1.0);
            acc += gs__w9[di * 3 + dj] *
                   (si < 0 || sj < 0 ? 0.0
                                     : gs__normal_at(version, seed, (uint64_t)(si * n + sj), 0.0, 1.0));
        }
    return acc;
}

/* The baseline: one thread, one pass, the interior without any index mapping. */
static void gs__st_loop(const double *x, double *s, int64_t n, int b)
{
    for (int64_t i = 0; i < n; i++) {
        const int edge_row = i == 0 || i == n - 1;
        for (int64_t j = 0; j < n; j++) {
            if (edge_row || j == 0 || j == n - 1) {
                double acc = 0.0;
                int out = 0;
                for (int di = 0; di < 3 && !out; di++)
                    for (int dj = 0; dj < 3; dj++) {
                        int64_t si = gs__st_map(i + di - 1, n, b), sj = gs__st_map(j + dj - 1, n, b);
                        if (si == -2 || sj == -2) {
                            out = 1;
                            break;
                        }
                        acc += gs__w9[di * 3 + dj] * (si < 0 || sj < 0 ? 0.0 : x[si * n + sj]);
                    }
                s[i * n + j] = out ? x[i * n + j] : acc;
                continue;
            }
            const double *a = x + (i - 1) * n + j - 1, *m = a + n, *c = m + n;
            double acc = 0.0;
            acc += gs__w9[0] * a[0];
            acc += gs__w9[1] * a[1];
            acc += gs__w9[2] * a[2];
            acc += gs__w9[3] * m[0];
            acc += gs__w9[4] * m[1];
            acc += gs__w9[5] * m[2];
            acc += gs__w9[6] * c[0];
            acc += gs__w9[7] * c[1];
            acc += gs__w9[8] * c[2];
            s[i * n + j] = acc;
        }
    }
}

/* Compare rows of the persisted s around the first chunk boundary and at the edges. */
static int gs__st_check(gs_client_h client, gs_array_h s, const void *opts, int64_t *checked_p,
                        int64_t *bad_p)
{
    const gs__st_opts_t *o = opts;
    int64_t rows[6] = {0, 1, o->chunk - 1, o->chunk, o->n - 2, o->n - 1};
    double *buf = gs_malloc((size_t)o->n * sizeof(double), "stencil check row");
    if (buf == NULL) return 1;
    *checked_p = *bad_p = 0;
    for (int k = 0; k < 6; k++) {
        int64_t i = rows[k];
        if (i < 0 || i >= o->n || (k > 0 && i <= rows[k - 1])) continue;
        gs_slice_t sl[1] = {GS_SLICE(i, i + 1, 1)};
        if (gs__gather_f64(client, s, 1, sl, buf, (size_t)o->n, "row", i) != 0) {
            gs_free(buf);
            return 1;
        }
        for (int64_t j = 0; j < o->n; j += (j < 4 || j > o->n - 5 || (j % o->chunk) < 2 ||
                                            (j % o->chunk) > o->chunk - 3) ? 1 : 97) {
            double want = gs__st_ref(o->c.random_version, o->c.seed, o->n, o->boundary, i, j);
            if (gs__tally(fabs(buf[j] - want) <= 1e-12 * fmax(1.0, fabs(want)), checked_p, bad_p))
                fprintf(stderr, "%s %s: s[%" PRId64 ", %" PRId64 "] = %.17g, expected %.17g\n",
                        g_prog, g_sub, i, j, buf[j], want);
        }
    }
    gs_free(buf);
    return 0;
}

static void gs__st_c_loop(const gs__st_opts_t *o)
{
    const size_t nn = (size_t)o->n * (size_t)o->n;
    double *x, *s, t0, t;
    if (o->loop_max_mb <= 0 || (double)nn * 16.0 > (double)o->loop_max_mb * 1048576.0) {
        fprintf(stderr, "%s %s: C loop skipped (x and s need %.0f MB, --loop-max-mb %" PRId64 ")\n",
                g_prog, g_sub, (double)nn * 16.0 / 1048576.0, o->loop_max_mb);
        return;
    }
    x = gs__host_normal(o->c.random_version, o->c.seed, nn, "stencil loop x");
    s = gs_malloc(nn * sizeof(double), "stencil loop s");
    if (x == NULL || s == NULL) {
        fprintf(stderr, "%s %s: C loop skipped (no memory)\n", g_prog, g_sub);
        gs_free(x);
        gs_free(s);
        return;
    }
    memset(s, 0, nn * sizeof(double));   /* first touch outside the timing */
    t0 = gs__now();
    gs__st_loop(x, s, o->n, o->boundary);
    t = gs__now() - t0;
    printf("{\"bench\":\"stencil-c-loop\",\"n\":%" PRId64 ",\"boundary\":\"%s\",\"threads\":1",
           o->n, gs__bnames[o->boundary]);
    gs__json_rate(t, (double)nn * 16.0);
    gs__json_num("checksum", s[nn / 2] + s[nn - 1]);
    gs__json_close();
    gs_free(x);
    gs_free(s);
}

/* Run @a run's JSON line up to its rates: x read once, s written once. */
static void gs__st_head(const void *opts, int run, double seconds)
{
    const gs__st_opts_t *o = opts;
    const double bytes = 2.0 * (double)o->n * (double)o->n * 8.0;
    gs__json_open("stencil", NULL, NULL);
    gs__json_size(o->n, o->chunk, &o->c);
    gs__json_str("boundary", gs__bnames[o->boundary]);
    gs__json_seed_run(&o->c, run);
    gs__json_str("kernel", o->cuda_kernel ? "cuda" : "builtin");
    gs__json_rate(seconds, bytes);
    gs__json_num("limit_s", bytes / (o->tbps * 1e12));
}

/* The smoothing as a CUDA C++ map_overlap kernel (gsched/array.h gs_user_kernel_t), shared
 * with the tests: the padded block in, the chunk out; with boundary none arg holds the shape
 * and the array's edge elements are kept, as gs_array_stencil keeps them. */
static const char gs__st_cuda_src[] = GS_TEST_SMOOTH3X3_CUDA_SRC;

int gs__bench_stencil(int argc, char **argv)
{
    gs__st_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL, s = NULL;
    double connect_s = 0, persist_s = 0;
    const int radius[2] = {1, 1};
    int rc, done;

    if ((rc = gs__st_args(argc, argv, &o, &done)) != 0 || done) return rc;
    rc = gs__connect_persist_square(&o.c, o.n, o.chunk, &client, &x, &connect_s, &persist_s);
    if (rc != 0) goto out;
    gs_status_t bst;
    if (o.cuda_kernel) {
        const int64_t shape[2] = {o.n, o.n};
        gs_user_kernel_t k = {NULL, "smooth3x3", NULL, 0, gs__st_cuda_src, 0};
        if (o.boundary == GS_BOUNDARY_NONE) {
            k.arg = shape;
            k.arg_len = sizeof(shape);
        }
        bst = gs_array_map_overlap(&k, x, radius, (gs_boundary_t)o.boundary, 0.0, &s);
    } else {
        bst = gs_array_stencil(x, gs__w9, radius, (gs_boundary_t)o.boundary, 0.0, &s);
    }
    if (bst != GS_OK) {
        rc = gs__cannot_build("the stencil");
        goto out;
    }
    if ((rc = gs__kept_runs(client, s, o.c.repeat, gs__st_check, gs__st_head, &o, persist_s,
                            connect_s)) != 0)
        goto out;
    gs__st_c_loop(&o);
    rc = 0;
out:
    gs_client_destroy(client);
    gs_array_release(s);
    gs_array_release(x);
    return rc;
}
