/* gs_client_compute_many (issue 20 item 4) on real gsched + gworker processes on loopback:
 * several results from one graph equal, byte for byte, separate gs_client_compute calls (by
 * every gather path); the work they share runs once (task counts); typed results in one call;
 * bad arguments refused with nothing written; a failing result fails the call with no buffer written and nothing
 * persisted; persisted results serve later expressions and their shared graph stays until the
 * last of them is unpersisted. */
#include "cluster.h"

#include "graph/taskgraph.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tcluster_t CL;
static gs_client_h C;
static char dir[64];

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

/* the shared fixture (fixture.c), plus a temporary directory for the file test */
static void up2(void)
{
    snprintf(dir, sizeof(dir), "/tmp/gs-itest-many-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    C = tc_up(&CL, 2, 240);
}

static void down(void)
{
    char cmd[128];
    tc_down(&C);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

TestSuite(integration_compute_many, .init = up2, .fini = down, .timeout = 300);

static int tls_on(void)
{
    const char *t = getenv("GS_TEST_TLS");
    return t != NULL && strcmp(t, "1") == 0;
}

/* x = normal(seed 11) of 123 x 77 in 32 x 20 chunks (4 x 4 = 16 blocks) */
static const int64_t XSHAPE[2] = {123, 77}, XCHUNKS[2] = {32, 20};
#define XBLOCKS 16

static gs_array_h make_x(void)
{
    gs_array_h x;
    OK(gs_array_random_normal(11, 0.0, 1.0, 2, XSHAPE, XCHUNKS, &x));
    return x;
}

/* The three results sharing x: sum(x + 1) (0-d), (x * 2)[::2, ::3], exp(x).T */
static void make_three(gs_array_h x, gs_array_h out[3])
{
    gs_array_h t;
    gs_slice_t s[2] = {GS_SLICE_STEP(2), GS_SLICE_STEP(3)};
    const int perm[2] = {1, 0};
    OK(gs_array_binary_array_scalar(GS_BINARY_ADD, x, 1.0, &t));
    OK(gs_array_reduce(GS_RED_SUM, t, NULL, &out[0]));
    gs_array_release(t);
    OK(gs_array_binary_array_scalar(GS_BINARY_MUL, x, 2.0, &t));
    OK(gs_array_slice(t, 2, s, &out[1]));
    gs_array_release(t);
    OK(gs_array_unary(GS_UNARY_EXP, x, &t));
    OK(gs_array_transpose(t, perm, &out[2]));
    gs_array_release(t);
}

static size_t nbytes(gs_array_h a)
{
    return (size_t)gs_array_size(a) * gs_dtype_size((gs_dtype_t)gs_array_dtype(a));
}

/* Each of @a n arrays computed on its own with gs_client_compute (malloc'd buffers). */
static void compute_separately(gs_client_h c, size_t n, gs_array_h *a, void **want)
{
    for (size_t i = 0; i < n; i++) {
        want[i] = malloc(nbytes(a[i]) + 1);
        cr_assert_not_null(want[i]);
        OK(gs_client_compute(c, a[i], want[i], (size_t)gs_array_size(a[i])));
    }
}

/* Results of gathering @a a[0..n) in one call into fresh buffers. */
static void compute_together(gs_client_h c, size_t n, gs_array_h *a, void **got,
                             gs_compute_stats_t *stats)
{
    gs_compute_result_t r[8];
    cr_assert_leq(n, 8);
    memset(r, 0, sizeof(r));
    for (size_t i = 0; i < n; i++) {
        got[i] = malloc(nbytes(a[i]) + 1);
        cr_assert_not_null(got[i]);
        r[i].array = a[i];
        r[i].mode = GS_RESULT_GATHER;
        r[i].out = got[i];
        r[i].out_len = (size_t)gs_array_size(a[i]);
    }
    OK(gs_client_compute_many(c, n, r, stats));
}

Test(integration_compute_many, three_results_equal_separate_computes)
{
    gs_array_h x = make_x(), a[3];
    void *want[3], *got[3];
    gs_compute_stats_t st;
    make_three(x, a);
    compute_separately(C, 3, a, want);
    /* every gather path: each result is fetched from its own range of the graph's outputs */
    for (int path = GS_GATHER_AUTO; path <= GS_GATHER_SHM; path++) {
        gs_gather_stats_t g0, g1;
        OK(gs_client_set_gather_path(C, path));
        gs_client_gather_stats(C, &g0);
        memset(&st, 0, sizeof(st));
        compute_together(C, 3, a, got, &st);
        gs_client_gather_stats(C, &g1);
        for (int i = 0; i < 3; i++) {
            cr_assert(memcmp(got[i], want[i], nbytes(a[i])) == 0, "path %s: result %d differs "
                      "from its own gs_client_compute", gs_gather_path_name(path), i);
            free(got[i]);
        }
        if (path == GS_GATHER_SHM && !tls_on())   /* with TLS every chunk is relayed */
            cr_assert_gt(g1.chunks_shm, g0.chunks_shm, "no chunk came through shared memory");
        if (path == GS_GATHER_RELAY) cr_assert_eq(g1.chunks_shm + g1.chunks_direct,
                                                  g0.chunks_shm + g0.chunks_direct);
        cr_assert_gt(st.ntasks, 0);
        cr_assert_gt(st.wall_s, 0.0);
    }
    for (int i = 0; i < 3; i++) {
        free(want[i]);
        gs_array_release(a[i]);
    }
    gs_array_release(x);
}

/* Without fusion every expression node is a layer of tasks, so the task counts show the
 * sharing exactly: together, x's 16 generator tasks run once instead of three times. */
Test(integration_compute_many, shared_work_runs_once)
{
    gs_client_h c = tc_connect(&CL, GS_LOWER_CULL);
    gs_array_h x = make_x(), a[3];
    void *want[3], *got[3];
    gs_compute_stats_t st;
    uint64_t alone = 0;
    cr_assert_not_null(c, "%s", gs_last_error());
    make_three(x, a);
    for (int i = 0; i < 3; i++) {
        gs_future_h f;
        gs_compute_stats_t fs;
        OK(gs_client_submit(c, a[i], 0, &f));
        OK(gs_future_wait(f, -1.0));
        OK(gs_future_stats(f, &fs));
        alone += fs.ntasks;
        gs_future_destroy(f);
    }
    compute_separately(c, 3, a, want);
    compute_together(c, 3, a, got, &st);
    cr_assert_eq(st.ntasks, alone - 2 * XBLOCKS, "%llu tasks together, %llu in three graphs",
                 (unsigned long long)st.ntasks, (unsigned long long)alone);
    for (int i = 0; i < 3; i++) {
        cr_assert(memcmp(got[i], want[i], nbytes(a[i])) == 0, "result %d differs", i);
        free(got[i]);
        free(want[i]);
        gs_array_release(a[i]);
    }
    /* with the default lowering exp(x), used by three results, runs in one layer of 16 tasks
     * instead of inside each result's kernels: the graph is the one gs_graph_lower_many gives */
    {
        gs_array_h y, r[3], t;
        gs_taskgraph_t *tg;
        gs_lower_result_t *lr;
        OK(gs_array_unary(GS_UNARY_EXP, x, &y));
        OK(gs_array_reduce(GS_RED_SUM, y, NULL, &r[0]));
        OK(gs_array_binary_array_scalar(GS_BINARY_GT, y, 1.0, &r[1]));
        OK(gs_array_binary_array_scalar(GS_BINARY_MUL, y, 3.0, &t));
        OK(gs_array_astype(t, GS_DTYPE_FLOAT32, &r[2]));
        gs_array_release(t);
        OK(gs_graph_lower_many(3, r, GS_LOWER_DEFAULT, &tg, &lr));
        compute_separately(C, 3, r, want);
        compute_together(C, 3, r, got, &st);
        cr_assert_eq(st.ntasks, tg->ntasks);
        for (int i = 0; i < 3; i++) {
            cr_assert(memcmp(got[i], want[i], nbytes(r[i])) == 0, "result %d differs", i);
            free(got[i]);
            free(want[i]);
            gs_array_release(r[i]);
        }
        gs_graph_lower_results_free(3, lr);
        gs_taskgraph_free(tg);
        gs_array_release(y);
    }
    gs_array_release(x);
    gs_client_destroy(c);
}

Test(integration_compute_many, typed_results_in_one_call)
{
    gs_array_h x = make_x(), t, f32, i64, b;
    OK(gs_array_binary_array_scalar(GS_BINARY_MUL, x, 2.0, &t));
    OK(gs_array_astype(t, GS_DTYPE_FLOAT32, &f32));
    gs_array_release(t);
    OK(gs_array_binary_array_scalar(GS_BINARY_MUL, x, 1000.0, &t));
    OK(gs_array_astype(t, GS_DTYPE_INT64, &i64));
    gs_array_release(t);
    OK(gs_array_binary_array_scalar(GS_BINARY_GT, x, 0.0, &b));
    cr_assert_eq(gs_array_dtype(b), GS_DTYPE_BOOL);
    const size_t n = 123 * 77;
    float *gf = malloc(n * sizeof(float)), *wf = malloc(n * sizeof(float));
    int64_t *gi = malloc(n * sizeof(int64_t)), *wi = malloc(n * sizeof(int64_t));
    uint8_t *gb = malloc(n), *wb = malloc(n);
    OK(gs_client_compute(C, f32, (double *)wf, n));
    OK(gs_client_compute(C, i64, (double *)wi, n));
    OK(gs_client_compute(C, b, (double *)wb, n));
    gs_compute_result_t r[3] = {
        {.array = f32, .out = gf, .out_len = n},
        {.array = i64, .mode = GS_RESULT_GATHER, .out = gi, .out_len = n},
        {.array = b, .out = gb, .out_len = n},
    };
    OK(gs_client_compute_many(C, 3, r, NULL));
    cr_assert(memcmp(gf, wf, n * sizeof(float)) == 0, "float32 result differs");
    cr_assert(memcmp(gi, wi, n * sizeof(int64_t)) == 0, "int64 result differs");
    cr_assert(memcmp(gb, wb, n) == 0, "bool result differs");
    /* spot values against their definitions */
    {
        double xv[123 * 77];
        size_t npos = 0;
        OK(gs_client_compute(C, x, xv, n));
        for (size_t i = 0; i < n; i++) {
            cr_assert_eq(gf[i], (float)(xv[i] * 2.0));
            cr_assert_eq(gi[i], (int64_t)(xv[i] * 1000.0));
            cr_assert_eq(gb[i], xv[i] > 0.0);
            npos += gb[i];
        }
        cr_assert(npos > n / 4 && npos < 3 * n / 4, "%zu of %zu positive", npos, n);
    }
    free(gf), free(wf), free(gi), free(wi), free(gb), free(wb);
    gs_array_release(f32);
    gs_array_release(i64);
    gs_array_release(b);
    gs_array_release(x);
}

/* Every bad argument: GS_ERR_INVALID_PARAM naming the problem, no buffer written. */
Test(integration_compute_many, bad_arguments_write_nothing)
{
    gs_array_h x = make_x(), s;
    double buf[123 * 77 + 8], one[2];
    const size_t n = 123 * 77;
    OK(gs_array_reduce(GS_RED_SUM, x, NULL, &s));
    memset(buf, 0xab, sizeof(buf));
    memset(one, 0xab, sizeof(one));
    struct {
        size_t n;
        gs_compute_result_t r[2];
        const char *msg;
    } bad[] = {
        {0, {{.array = x, .out = buf, .out_len = n}}, "n at least 1"},
        {1, {{.array = NULL, .out = buf, .out_len = n}}, "result 0: array is NULL"},
        {2, {{.array = s, .out = one, .out_len = 1}, {.array = x, .out = NULL, .out_len = n}},
         "result 1: out is NULL"},
        {1, {{.array = x, .out = buf, .out_len = n - 1}}, "holds 9470 elements"},
        {1, {{.array = s, .out = one, .out_len = 2}}, "is 0-d"},
        {1, {{.array = x, .mode = 7, .out = buf, .out_len = n}}, "mode 7"},
        {1, {{.array = x, .mode = GS_RESULT_PERSIST, .out = buf, .out_len = n}},
         "out must be NULL and out_len 0"},
        {1, {{.array = x, .mode = GS_RESULT_PERSIST, .out_len = 1}},
         "out must be NULL and out_len 0"},
        {2, {{.array = x, .mode = GS_RESULT_PERSIST}, {.array = x, .mode = GS_RESULT_PERSIST}},
         "persist the same array"},
        {2, {{.array = x, .out = buf, .out_len = n}, {.array = s, .out = buf + 5, .out_len = 1}},
         "results 0 and 1 overlap"},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        gs_compute_stats_t st;
        memset(&st, 0x5a, sizeof(st));
        cr_assert_eq(gs_client_compute_many(C, bad[k].n, bad[k].r, &st), GS_ERR_INVALID_PARAM,
                     "case %zu accepted", k);
        cr_assert_not_null(strstr(gs_last_error(), bad[k].msg), "case %zu: %s", k,
                           gs_last_error());
        for (size_t i = 0; i < sizeof(buf); i++)
            cr_assert_eq(((const uint8_t *)buf)[i], 0xab, "case %zu wrote byte %zu", k, i);
        for (size_t i = 0; i < sizeof(one); i++)
            cr_assert_eq(((const uint8_t *)one)[i], 0xab, "case %zu wrote one", k);
        cr_assert_eq(((uint8_t *)&st)[0], 0x5a, "case %zu wrote the stats", k);
    }
    cr_assert_eq(gs_client_compute_many(NULL, 1, bad[0].r, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_client_compute_many(C, 1, NULL, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_client_unpersist(C, x), GS_ERR_NOT_FOUND, "a refused call persisted x");
    /* the same array gathered twice into two buffers is fine */
    {
        double a1[123 * 77], a2[123 * 77];
        gs_compute_result_t r[2] = {{.array = x, .out = a1, .out_len = n},
                                    {.array = x, .out = a2, .out_len = n}};
        OK(gs_client_compute_many(C, 2, r, NULL));
        OK(gs_client_compute(C, x, buf, n));
        cr_assert(memcmp(a1, buf, n * sizeof(double)) == 0);
        cr_assert(memcmp(a2, buf, n * sizeof(double)) == 0);
    }
    gs_array_release(s);
    gs_array_release(x);
}

/* One result reads a file that shrank after the array was made: its tasks fail, so the call
 * fails naming the file, the other results' buffers stay untouched and nothing is persisted. */
Test(integration_compute_many, one_failing_result_fails_all)
{
    char path[160];
    const int64_t shape[2] = {40, 30}, chunks[2] = {10, 30};
    double d[40 * 30];
    gs_array_h x = make_x(), good, p, f, fs;
    FILE *fp;
    for (int i = 0; i < 40 * 30; i++) d[i] = i;
    snprintf(path, sizeof(path), "%s/d.raw", dir);
    fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(d, sizeof(double), 40 * 30, fp), 40 * 30);
    fclose(fp);
    OK(gs_array_from_raw(path, GS_DTYPE_FLOAT64, 2, shape, GS_ORDER_C, 0, chunks, &f));
    OK(gs_array_reduce(GS_RED_SUM, f, NULL, &fs));
    OK(gs_array_reduce(GS_RED_SUM, x, NULL, &good));
    OK(gs_array_binary_array_scalar(GS_BINARY_MUL, x, 3.0, &p));
    cr_assert_eq(truncate(path, 8 * 100), 0);

    double gbuf[1], xbuf[123 * 77];
    memset(gbuf, 0xcd, sizeof(gbuf));
    memset(xbuf, 0xcd, sizeof(xbuf));
    gs_compute_result_t r[4] = {
        {.array = good, .out = gbuf, .out_len = 1},
        {.array = x, .out = xbuf, .out_len = 123 * 77},
        {.array = p, .mode = GS_RESULT_PERSIST},
        {.array = fs, .out = d, .out_len = 1},
    };
    d[0] = -1.0;
    gs_status_t st = gs_client_compute_many(C, 4, r, NULL);
    cr_assert_neq(st, GS_OK);
    cr_assert_not_null(strstr(gs_last_error(), "d.raw"), "%s", gs_last_error());
    cr_assert_eq(d[0], -1.0, "the failing result was written");
    for (size_t i = 0; i < 8; i++) cr_assert_eq(((uint8_t *)gbuf)[i], 0xcd, "gbuf written");
    for (size_t i = 0; i < sizeof(xbuf); i++)
        cr_assert_eq(((uint8_t *)xbuf)[i], 0xcd, "xbuf written");
    cr_assert_eq(gs_client_unpersist(C, p), GS_ERR_NOT_FOUND, "a failed call persisted p");
    /* the cluster still serves, and the same call without the bad result succeeds */
    OK(gs_client_compute_many(C, 3, r, NULL));
    OK(gs_client_unpersist(C, p));
    gs_array_release(fs);
    gs_array_release(f);
    gs_array_release(good);
    gs_array_release(p);
    gs_array_release(x);
}

static double sum_scalar(gs_array_h a, int *externals_p)
{
    gs_array_h s;
    gs_taskgraph_t *tg;
    double v;
    OK(gs_array_reduce(GS_RED_SUM, a, NULL, &s));
    OK(gs_graph_lower(s, GS_LOWER_DEFAULT, &tg));
    *externals_p = tg->nexternals > 0;
    gs_taskgraph_free(tg);
    OK(gs_client_compute_scalar(C, s, &v));
    gs_array_release(s);
    return v;
}

/* A sum over persisted chunks against the same sum fused from the generator: the CPU backend
 * folds both in one order (the same bits); a CUDA reduction's order follows its plan (the
 * leaves' kind, the grid), so there the last bits may differ. */
static void assert_same_sum(double got, double want, const char *what)
{
    const char *be = getenv("GS_TEST_BACKEND");
    if (be != NULL && strcmp(be, "cuda") == 0)
        cr_assert(fabs(got - want) <= 1e-12 * fabs(want), "%s: %.17g, fused %.17g", what, got,
                  want);
    else
        cr_assert(memcmp(&got, &want, sizeof(got)) == 0, "%s: %.17g, fused %.17g", what, got,
                  want);
}

/* Persisted results serve later expressions; unpersisting one keeps the other (their graph
 * is shared) until the last goes. */
Test(integration_compute_many, persisted_results_are_reused)
{
    gs_array_h x = make_x(), p1, p2, q1, q2, g;
    double gv, want1, want2;
    int ext;
    gs_compute_stats_t st;
    OK(gs_array_binary_array_scalar(GS_BINARY_MUL, x, 3.0, &p1));
    OK(gs_array_binary_array_scalar(GS_BINARY_ADD, x, 5.0, &p2));
    OK(gs_array_binary_array_scalar(GS_BINARY_MUL, x, 3.0, &q1));   /* same values, not persisted */
    OK(gs_array_binary_array_scalar(GS_BINARY_ADD, x, 5.0, &q2));
    OK(gs_array_reduce(GS_RED_MAX, x, NULL, &g));
    want1 = sum_scalar(q1, &ext);
    cr_assert_eq(ext, 0);
    want2 = sum_scalar(q2, &ext);
    gs_compute_result_t r[3] = {
        {.array = p1, .mode = GS_RESULT_PERSIST},
        {.array = g, .out = &gv, .out_len = 1},
        {.array = p2, .mode = GS_RESULT_PERSIST},
    };
    OK(gs_client_compute_many(C, 3, r, &st));
    cr_assert_gt(st.ntasks, 0);
    cr_assert(gv > 2.0 && gv < 6.0, "max of 9471 normals is %g", gv);
    assert_same_sum(sum_scalar(p1, &ext), want1, "sum(p1)");
    cr_assert_eq(ext, 1, "sum(p1) does not read p1's persisted chunks");
    assert_same_sum(sum_scalar(p2, &ext), want2, "sum(p2)");
    cr_assert_eq(ext, 1, "sum(p2) does not read p2's persisted chunks");
    /* already persisted: nothing to compute */
    {
        gs_compute_result_t again[2] = {r[0], r[2]};
        memset(&st, 0x5a, sizeof(st));
        OK(gs_client_compute_many(C, 2, again, &st));
        cr_assert_eq(st.ntasks, 0);
        cr_assert_eq(st.wall_s, 0.0);
    }
    /* dropping p1 keeps p2's chunks (one graph): a later graph reading them still runs */
    OK(gs_client_unpersist(C, p1));
    assert_same_sum(sum_scalar(p1, &ext), want1, "sum(p1)");
    cr_assert_eq(ext, 0);
    assert_same_sum(sum_scalar(p2, &ext), want2, "sum(p2)");
    cr_assert_eq(ext, 1);
    OK(gs_client_unpersist(C, p2));
    cr_assert_eq(gs_client_unpersist(C, p2), GS_ERR_NOT_FOUND);
    assert_same_sum(sum_scalar(p2, &ext), want2, "sum(p2)");
    cr_assert_eq(ext, 0);
    gs_array_release(p1);
    gs_array_release(p2);
    gs_array_release(q1);
    gs_array_release(q2);
    gs_array_release(g);
    gs_array_release(x);
}
