/* Linear algebra on chunked arrays: matmul, TSQR QR/SVD, randomized SVD. Values come from the
 * serial CPU evaluator (every layer round-tripped through its codec) and are checked against
 * naive products and LAPACK; structure tests count the layers and tasks the lowering builds;
 * codec and instantiation tests feed the LINALG layer bad bytes and bad inputs. */
#include "graph_eval_util.h"
#include <criterion/criterion.h>
#include <lapacke.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"
#include "graph/linalg_int.h"
#include "graph/taskgraph.h"

#define OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s: %s: %s", #call, gs_status_name(st__), gs_last_error()); } while (0)

static gs_chunkops_ctx_h ctx;

static void setup(void)
{
    ctx = gx_ctx_create();
}

static void teardown(void)
{
    gx_ctx_destroy(ctx);
}

TestSuite(graph_linalg, .init = setup, .fini = teardown, .timeout = 120);

/* ---- helpers ---- */

static uint64_t rng_state = 88172645463325252ull;

static double rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static double *rand_mat(int64_t m, int64_t n)
{
    double *v = malloc((size_t)(m * n > 0 ? m * n : 1) * sizeof(double));
    cr_assert_not_null(v);
    for (int64_t i = 0; i < m * n; i++) v[i] = rnd();
    return v;
}

/* Host array of @a data (m x n, or a vector of m when n < 0) with row bounds @a rb (nr chunks)
 * and column bounds @a cb (nc chunks); NULL bounds: one chunk. */
static gs_array_h host(const double *data, int64_t m, int64_t n, int64_t nr, const int64_t *rb,
                       int64_t nc, const int64_t *cb)
{
    int nd = n < 0 ? 1 : 2;
    int64_t shape[2] = {m, n}, chunks[2] = {m > 0 ? m : 1, n > 0 ? n : 1};
    int64_t ncs[2] = {nr, nc};
    const int64_t *bs[2] = {rb, cb};
    gs_array_h h, r;
    OK(gs_array_from_host(data, nd, shape, chunks, &h));
    if (rb == NULL && cb == NULL) return h;
    OK(gs_array_rechunk_bounds(h, ncs, bs, &r));
    gs_array_release(h);
    return r;
}

/* Regular chunk bounds of @a len in chunks of @a c (static storage per call site is not needed:
 * returned malloc'ed, count in *nc). */
static int64_t *reg(int64_t len, int64_t c, int64_t *nc)
{
    int64_t k = (len + c - 1) / c, *b = malloc((size_t)(k + 1) * sizeof(int64_t));
    for (int64_t i = 0; i < k; i++) b[i] = i * c;
    b[k] = len;
    *nc = k;
    return b;
}

static double *eval_flags(gs_array_h h, unsigned flags)
{
    gs_taskgraph_t *tg;
    int64_t size = gs_array_size(h);
    double *out = malloc((size_t)(size ? size : 1) * sizeof(double));
    cr_assert_not_null(out);
    OK(gs_graph_lower(h, flags, &tg));
    OK(gs_taskgraph_validate(tg));
    cr_assert_eq(tg->out_grid.ndim, gs_array_ndim(h));
    for (int ax = 0; ax < tg->out_grid.ndim; ax++)
        cr_assert(memcmp(tg->out_grid.bounds[ax], gs_array_chunk_bounds(h, ax),
                         (size_t)(gs_array_nchunks(h, ax) + 1) * sizeof(int64_t)) == 0);
    gx_roundtrip_layers(tg);
    OK(gs_taskgraph_validate(tg));
    OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)size));
    gs_taskgraph_free(tg);
    return out;
}

static double *eval(gs_array_h h)
{
    return eval_flags(h, GS_LOWER_DEFAULT);
}

static void naive_mm(const double *a, const double *b, int64_t m, int64_t k, int64_t n, double *c)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t t = 0; t < k; t++) s += a[i * k + t] * b[t * n + j];
            c[i * n + j] = s;
        }
}

static void assert_close(const double *got, const double *want, int64_t n, double tol,
                         const char *what)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= tol * fmax(1.0, fabs(want[i])),
                  "%s: element %lld is %.17g, expected %.17g", what, (long long)i, got[i], want[i]);
}

/* Layers of a lowered graph whose name is @a name, and their total task count. */
static uint64_t count_tasks(const gs_taskgraph_t *tg, const char *name, int *nlayers_p)
{
    uint64_t n = 0;
    int nl = 0;
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        if (strcmp(gs_layer_name(tg->layers[i]), name) != 0) continue;
        nl++;
        for (uint64_t t = 0; t < tg->ntasks; t++) n += tg->task_layer[t] == i;
    }
    if (nlayers_p) *nlayers_p = nl;
    return n;
}

static void check_qr(const double *a, const double *q, const double *r, int64_t m, int64_t n,
                     const char *what)
{
    double *qr = malloc((size_t)(m * n) * sizeof(double));
    naive_mm(q, r, m, n, n, qr);
    assert_close(qr, a, m * n, 1e-12, what);
    for (int64_t i = 0; i < n; i++) {
        cr_assert(r[i * n + i] >= 0, "%s: R diagonal %lld is negative", what, (long long)i);
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            if (j < i) cr_assert_eq(r[i * n + j], 0.0, "%s: R is not upper triangular", what);
            for (int64_t t = 0; t < m; t++) s += q[t * n + i] * q[t * n + j];
            cr_assert(fabs(s - (i == j)) < 1e-12, "%s: (Q^T Q)[%lld, %lld] = %.17g", what,
                      (long long)i, (long long)j, s);
        }
    }
    free(qr);
}

/* LAPACK's singular values of a (m x n), descending. */
static double *lapack_sv(const double *a, int64_t m, int64_t n)
{
    int64_t k = m < n ? m : n;
    double *cp = malloc((size_t)(m * n) * sizeof(double)), *s = malloc((size_t)k * sizeof(double));
    double *sup = malloc((size_t)k * sizeof(double));
    memcpy(cp, a, (size_t)(m * n) * sizeof(double));
    cr_assert_eq(LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', (lapack_int)m, (lapack_int)n, cp,
                                (lapack_int)n, s, NULL, 1, NULL, 1, sup), 0);
    free(cp);
    free(sup);
    return s;
}

/* u (m x k) diag(s) vt (k x n) */
static double *recon(const double *u, const double *s, const double *vt, int64_t m, int64_t k,
                     int64_t n)
{
    double *us = malloc((size_t)(m * k) * sizeof(double)), *a = malloc((size_t)(m * n) * sizeof(double));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < k; j++) us[i * k + j] = u[i * k + j] * s[j];
    naive_mm(us, vt, m, k, n, a);
    free(us);
    return a;
}

static void check_orthonormal_cols(const double *q, int64_t m, int64_t n, double tol,
                                   const char *what)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t t = 0; t < m; t++) s += q[t * n + i] * q[t * n + j];
            cr_assert(fabs(s - (i == j)) < tol, "%s: (Q^T Q)[%lld, %lld] = %.17g", what,
                      (long long)i, (long long)j, s);
        }
}

/* ---- matmul ---- */

static void mm_case(int64_t m, int64_t k, int64_t n, int64_t cm, int64_t ck, int64_t cn,
                    unsigned flags)
{
    int64_t nr, nk, nc;
    int64_t *rb = reg(m, cm, &nr), *kb = reg(k, ck, &nk), *cb = reg(n, cn, &nc);
    double *a = rand_mat(m, k), *b = rand_mat(k, n), *want = malloc((size_t)(m * n) * sizeof(double));
    gs_array_h ha = host(a, m, k, nr, rb, nk, kb), hb = host(b, k, n, nk, kb, nc, cb), hc;
    double *got;
    OK(gs_array_matmul(ha, hb, &hc));
    cr_assert_eq(gs_array_nchunks(hc, 0), nr);
    cr_assert_eq(gs_array_nchunks(hc, 1), nc);
    got = eval_flags(hc, flags);
    naive_mm(a, b, m, k, n, want);
    assert_close(got, want, m * n, 1e-12, "matmul");
    gs_array_release(ha);
    gs_array_release(hb);
    gs_array_release(hc);
    free(a), free(b), free(want), free(got), free(rb), free(kb), free(cb);
}

Test(graph_linalg, matmul_matches_naive_product_for_many_chunkings)
{
    mm_case(7, 5, 3, 7, 5, 3, GS_LOWER_DEFAULT);      /* one chunk each */
    mm_case(13, 11, 9, 4, 3, 5, GS_LOWER_DEFAULT);    /* uneven last chunks */
    mm_case(10, 60, 6, 3, 3, 4, GS_LOWER_DEFAULT);    /* 20 contracted chunks: 3 groups + sum */
    mm_case(4, 200, 3, 2, 2, 2, GS_LOWER_DEFAULT);    /* 100 contracted chunks: two sum levels */
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) mm_case(9, 30, 5, 4, 2, 3, f);
}

Test(graph_linalg, matmul_of_irregular_chunks_from_rechunk)
{
    const int64_t rb[] = {0, 1, 5, 9}, kb[] = {0, 6, 7, 12}, cb[] = {0, 2, 3};
    double *a = rand_mat(9, 12), *b = rand_mat(12, 3), want[27], *got;
    gs_array_h ha = host(a, 9, 12, 3, rb, 3, kb), hb = host(b, 12, 3, 3, kb, 2, cb), hc;
    OK(gs_array_matmul(ha, hb, &hc));
    got = eval(hc);
    naive_mm(a, b, 9, 12, 3, want);
    assert_close(got, want, 27, 1e-12, "irregular matmul");
    gs_array_release(ha), gs_array_release(hb), gs_array_release(hc);
    free(a), free(b), free(got);
}

Test(graph_linalg, matmul_handles_vectors_like_numpy)
{
    double *a = rand_mat(6, 8), *x = rand_mat(8, 1), *y = rand_mat(6, 1), want[8], *got;
    int64_t n8 = 8, n6 = 6, c3 = 3, c4 = 4;
    gs_array_h ha, hx, hy, r;
    int64_t sa[2] = {6, 8}, ca[2] = {4, 3};
    OK(gs_array_from_host(a, 2, sa, ca, &ha));
    OK(gs_array_from_host(x, 1, &n8, &c3, &hx));
    OK(gs_array_from_host(y, 1, &n6, &c4, &hy));
    /* matrix @ vector -> (6) */
    OK(gs_array_matmul(ha, hx, &r));
    cr_assert_eq(gs_array_ndim(r), 1);
    got = eval(r);
    naive_mm(a, x, 6, 8, 1, want);
    assert_close(got, want, 6, 1e-12, "matvec");
    free(got), gs_array_release(r);
    /* vector @ matrix -> (8) */
    OK(gs_array_matmul(hy, ha, &r));
    cr_assert_eq(gs_array_ndim(r), 1);
    cr_assert_eq(gs_array_nchunks(r, 0), 3);
    got = eval(r);
    naive_mm(y, a, 1, 6, 8, want);
    assert_close(got, want, 8, 1e-12, "vecmat");
    free(got), gs_array_release(r);
    /* vector @ vector -> scalar */
    OK(gs_array_matmul(hx, hx, &r));
    cr_assert_eq(gs_array_ndim(r), 0);
    got = eval(r);
    naive_mm(x, x, 1, 8, 1, want);
    assert_close(got, want, 1, 1e-12, "dot");
    free(got), gs_array_release(r);
    gs_array_release(ha), gs_array_release(hx), gs_array_release(hy);
    free(a), free(x), free(y);
}

Test(graph_linalg, matmul_reads_transposed_operands_in_place)
{
    double *a = rand_mat(12, 7), *b = rand_mat(12, 5), *at = malloc(84 * sizeof(double));
    double want[35], *got;
    int64_t sa[2] = {12, 7}, ca[2] = {5, 3}, sb[2] = {12, 5}, cb[2] = {5, 2};
    gs_array_h ha, hb, hat, r, hbt, r2;
    gs_taskgraph_t *tg;
    int nl;
    OK(gs_array_from_host(a, 2, sa, ca, &ha));
    OK(gs_array_from_host(b, 2, sb, cb, &hb));
    OK(gs_array_transpose(ha, NULL, &hat));
    OK(gs_array_matmul(hat, hb, &r));          /* a^T b: 7 x 5 */
    OK(gs_graph_lower(r, GS_LOWER_DEFAULT, &tg));
    count_tasks(tg, "fused", &nl);
    cr_assert_eq(nl, 0, "the transpose was materialised");
    gs_taskgraph_free(tg);
    got = eval(r);
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 7; j++) at[j * 12 + i] = a[i * 7 + j];
    naive_mm(at, b, 7, 12, 5, want);
    assert_close(got, want, 35, 1e-12, "a^T b");
    free(got);
    /* (a^T b)^T = b^T a through a transposed b */
    OK(gs_array_transpose(hb, NULL, &hbt));
    OK(gs_array_matmul(hbt, ha, &r2));
    got = eval(r2);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 7; j++)
            cr_assert(fabs(got[i * 7 + j] - want[j * 5 + i]) < 1e-12);
    free(got);
    gs_array_release(ha), gs_array_release(hb), gs_array_release(hat), gs_array_release(r);
    gs_array_release(hbt), gs_array_release(r2);
    free(a), free(b), free(at);
}

Test(graph_linalg, matmul_groups_products_and_sums_partials_in_a_tree)
{
    int64_t sa[2] = {8, 200}, ca[2] = {4, 10}, sb[2] = {200, 6}, cb[2] = {10, 3};
    gs_array_h a, b, c;
    gs_taskgraph_t *tg;
    int nl;
    OK(gs_array_random_normal(1, 0, 1, 2, sa, ca, &a));
    OK(gs_array_random_normal(2, 0, 1, 2, sb, cb, &b));
    OK(gs_array_matmul(a, b, &c));
    OK(gs_graph_lower(c, GS_LOWER_DEFAULT, &tg));
    /* 20 contracted chunks in 3 groups of <= 8 per output block (2 x 2 blocks), then one sum */
    cr_assert_eq(count_tasks(tg, "linalg-gemm", &nl), 12);
    cr_assert_eq(nl, 1);
    cr_assert_eq(count_tasks(tg, "linalg-sum", &nl), 4);
    cr_assert_eq(nl, 1);
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        const gs_layer_t *l = tg->layers[tg->task_layer[t]];
        if (strcmp(gs_layer_name(l), "linalg-gemm") == 0)
            cr_assert_leq(tg->dep_off[t + 1] - tg->dep_off[t], 16);
    }
    gs_taskgraph_free(tg);
    gs_array_release(a), gs_array_release(b), gs_array_release(c);
}

Test(graph_linalg, matmul_rejects_misaligned_shapes_and_chunks)
{
    int64_t sa[2] = {6, 8}, ca[2] = {3, 4}, sb[2] = {8, 5}, cb[2] = {3, 5}, sc[2] = {7, 5};
    int64_t s3[3] = {2, 2, 2};
    gs_array_h a, b, c, d, r = NULL;
    OK(gs_array_full(1, 2, sa, ca, &a));
    OK(gs_array_full(1, 2, sb, cb, &b));
    OK(gs_array_full(1, 2, sc, cb, &c));
    OK(gs_array_full(1, 3, s3, s3, &d));
    cr_assert_eq(gs_array_matmul(a, b, &r), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "[0, 4, 8]") && strstr(gs_last_error(), "[0, 3, 6, 8]"),
              "message names both chunkings: %s", gs_last_error());
    cr_assert_eq(gs_array_matmul(a, c, &r), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "8") && strstr(gs_last_error(), "7"), "%s", gs_last_error());
    cr_assert_eq(gs_array_matmul(a, d, &r), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_matmul(a, NULL, &r), GS_ERR_INVALID_PARAM);
    cr_assert_null(r);
    gs_array_release(a), gs_array_release(b), gs_array_release(c), gs_array_release(d);
}

/* ---- QR ---- */

static void qr_case(int64_t m, int64_t n, int64_t nr, const int64_t *rb, const char *what)
{
    double *a = rand_mat(m, n), *q, *r;
    gs_array_h h = host(a, m, n, nr, rb, 1, NULL), hq, hr;
    OK(gs_array_qr(h, &hq, &hr));
    cr_assert_eq(gs_array_nchunks(hq, 0), nr);
    q = eval(hq);
    r = eval(hr);
    check_qr(a, q, r, m, n, what);
    gs_array_release(h), gs_array_release(hq), gs_array_release(hr);
    free(a), free(q), free(r);
}

Test(graph_linalg, qr_factors_tall_skinny_arrays_in_several_chunkings)
{
    const int64_t one[] = {0, 30}, even[] = {0, 10, 20, 30}, uneven[] = {0, 7, 19, 23, 30};
    const int64_t small[] = {0, 2, 4, 5, 9, 10, 12, 20, 21, 30};   /* chunks < ncols: stacked */
    qr_case(30, 6, 1, one, "one chunk");
    qr_case(30, 6, 3, even, "even chunks");
    qr_case(30, 6, 4, uneven, "uneven chunks");
    qr_case(30, 6, 9, small, "small chunks");
    qr_case(6, 6, 1, (const int64_t[]){0, 6}, "square");
}

Test(graph_linalg, qr_uses_several_tree_levels_for_many_blocks)
{
    /* 70 blocks of 3 rows, 3 columns: 70 leaves, 3 groups of <= 32, then the top */
    int64_t nr, *rb = reg(210, 3, &nr);
    gs_array_h h, hq;
    gs_taskgraph_t *tg;
    double *a = rand_mat(210, 3);
    int nl;
    h = host(a, 210, 3, nr, rb, 1, NULL);
    OK(gs_array_qr(h, &hq, NULL));
    OK(gs_graph_lower(hq, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(count_tasks(tg, "linalg-qr", &nl), 70 + 3 + 1);
    cr_assert_eq(nl, 3);
    /* multipliers of the 70 leaves (their parents are not the top), then the Q chunks */
    cr_assert_eq(count_tasks(tg, "linalg-gemm", &nl), 70 + 70);
    gs_taskgraph_free(tg);
    gs_array_release(hq);
    gs_array_release(h);
    free(a);
    qr_case(210, 3, nr, rb, "three levels");
    free(rb);
}

Test(graph_linalg, q_and_r_of_one_array_share_one_factorisation)
{
    int64_t s[2] = {40, 4}, c[2] = {10, 4};
    gs_array_h a, q, r, sq, sr, both;
    gs_taskgraph_t *tg;
    OK(gs_array_random_normal(3, 0, 1, 2, s, c, &a));
    OK(gs_array_qr(a, &q, &r));
    OK(gs_array_reduce(GS_RED_SUM, q, NULL, &sq));
    OK(gs_array_reduce(GS_RED_SUM, r, NULL, &sr));
    OK(gs_array_binary(GS_BINARY_ADD, sq, sr, &both));
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        OK(gs_graph_lower(both, f, &tg));
        cr_assert_eq(count_tasks(tg, "linalg-qr", NULL), 4 + 1, "flags 0x%x", f);
        gs_taskgraph_free(tg);
    }
    gs_array_release(a), gs_array_release(q), gs_array_release(r);
    gs_array_release(sq), gs_array_release(sr), gs_array_release(both);
}

Test(graph_linalg, qr_rejects_bad_shapes_and_chunkings)
{
    int64_t s[2] = {40, 4}, c2[2] = {10, 2}, sw[2] = {3, 4}, c[2] = {10, 4}, st[2] = {400, 40},
            ct[2] = {1, 40};
    gs_array_h a, w, t, q = NULL, r = NULL;
    OK(gs_array_full(1, 2, s, c2, &a));
    cr_assert_eq(gs_array_qr(a, &q, &r), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "rechunk") && strstr(gs_last_error(), "column chunk"),
              "%s", gs_last_error());
    gs_array_release(a);
    OK(gs_array_full(1, 2, sw, c, &w));
    cr_assert_eq(gs_array_qr(w, &q, &r), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "tall"), "%s", gs_last_error());
    gs_array_release(w);
    OK(gs_array_full(1, 2, st, ct, &t));   /* 1-row chunks for 40 columns: 40 per QR > 32 */
    cr_assert_eq(gs_array_qr(t, &q, &r), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "rechunk the rows"), "%s", gs_last_error());
    cr_assert_eq(gs_array_qr(t, NULL, NULL), GS_ERR_INVALID_PARAM);
    gs_array_release(t);
    cr_assert_null(q);
    cr_assert_null(r);
}

/* ---- SVD ---- */

static void svd_case(int64_t m, int64_t n, int64_t nr, const int64_t *rb, int64_t nc,
                     const int64_t *cb, const char *what)
{
    int64_t k = m < n ? m : n;
    double *a = rand_mat(m, n), *u, *s, *vt, *ref, *rc;
    gs_array_h h = host(a, m, n, nr, rb, nc, cb), hu, hs, hvt;
    OK(gs_array_svd(h, &hu, &hs, &hvt));
    u = eval(hu), s = eval(hs), vt = eval(hvt);
    ref = lapack_sv(a, m, n);
    for (int64_t i = 0; i < k; i++)
        cr_assert(fabs(s[i] - ref[i]) <= 1e-10 * ref[i], "%s: s[%lld] = %.17g, LAPACK %.17g", what,
                  (long long)i, s[i], ref[i]);
    rc = recon(u, s, vt, m, k, n);
    assert_close(rc, a, m * n, 1e-11, what);
    check_orthonormal_cols(u, m, k, 1e-12, what);
    gs_array_release(h), gs_array_release(hu), gs_array_release(hs), gs_array_release(hvt);
    free(a), free(u), free(s), free(vt), free(ref), free(rc);
}

Test(graph_linalg, svd_matches_lapack_singular_values)
{
    const int64_t even[] = {0, 10, 20, 30, 40}, uneven[] = {0, 3, 11, 12, 40};
    int64_t nr, *rb = reg(300, 4, &nr);
    svd_case(40, 7, 1, (const int64_t[]){0, 40}, 1, NULL, "one chunk");
    svd_case(40, 7, 4, even, 1, NULL, "even");
    svd_case(40, 7, 4, uneven, 1, NULL, "uneven and small");
    svd_case(300, 4, nr, rb, 1, NULL, "two levels");
    free(rb);
}

Test(graph_linalg, svd_of_short_fat_arrays_goes_through_the_transpose)
{
    const int64_t cb[] = {0, 9, 20, 33};
    svd_case(6, 33, 1, NULL, 3, cb, "short-fat");
}

Test(graph_linalg, svd_rejects_arrays_chunked_both_ways)
{
    int64_t s[2] = {40, 4}, c[2] = {10, 2}, s2[2] = {4, 40}, c2[2] = {2, 10};
    gs_array_h a, b, u = NULL;
    OK(gs_array_full(1, 2, s, c, &a));
    OK(gs_array_full(1, 2, s2, c2, &b));
    cr_assert_eq(gs_array_svd(a, &u, NULL, NULL), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "rechunk"), "%s", gs_last_error());
    cr_assert_eq(gs_array_svd(b, &u, NULL, NULL), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "row chunk"), "%s", gs_last_error());
    cr_assert_null(u);
    gs_array_release(a), gs_array_release(b);
}

/* ---- the Gram-path SVD ---- */

/* m x n (m >= n) orthonormal columns: Q of LAPACK's QR of a random matrix. */
static double *rand_orth(int64_t m, int64_t n)
{
    double *q = rand_mat(m, n), *tau = malloc((size_t)n * sizeof(double));
    cr_assert_eq(LAPACKE_dgeqrf(LAPACK_ROW_MAJOR, (lapack_int)m, (lapack_int)n, q, (lapack_int)n,
                                tau), 0);
    cr_assert_eq(LAPACKE_dorgqr(LAPACK_ROW_MAJOR, (lapack_int)m, (lapack_int)n, (lapack_int)n, q,
                                (lapack_int)n, tau), 0);
    free(tau);
    return q;
}

/* A = Q1 diag(sigma) Q2^T with sigma_i = kappa^(-i / (n - 1)): 2-norm 1, condition kappa. */
static double *conditioned(int64_t m, int64_t n, double kappa)
{
    double *q1 = rand_orth(m, n), *q2 = rand_orth(n, n), *a = malloc((size_t)(m * n) * sizeof(double));
    for (int64_t j = 0; j < n; j++) {
        double sj = pow(kappa, -(double)j / (double)(n - 1));
        for (int64_t i = 0; i < m; i++) q1[i * n + j] *= sj;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = 0;
            for (int64_t t = 0; t < n; t++) v += q1[i * n + t] * q2[j * n + t];
            a[i * n + j] = v;
        }
    free(q1), free(q2);
    return a;
}

/* The SVD of @a a under @a flags, checked against LAPACK: singular values within 1e-12 s_max
 * (LAPACK's own accuracy is ~eps s_max), U^T U = I and V^T V = I within 1e-12, A = U S Vt
 * within 1e-12 max |A|. */
static void gram_case(const double *a, int64_t m, int64_t n, int64_t nr, const int64_t *rb,
                      unsigned flags, const char *what)
{
    gs_array_h h = host(a, m, n, nr, rb, 1, NULL), hu, hs, hvt;
    double *u, *s, *vt, *ref, *rc, amax = 0;
    OK(gs_array_svd(h, &hu, &hs, &hvt));
    u = eval_flags(hu, flags), s = eval_flags(hs, flags), vt = eval_flags(hvt, flags);
    ref = lapack_sv(a, m, n);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(s[i] - ref[i]) <= 1e-12 * ref[0], "%s: s[%lld] = %.17g, LAPACK %.17g", what,
                  (long long)i, s[i], ref[i]);
    check_orthonormal_cols(u, m, n, 1e-12, what);
    for (int64_t i = 0; i < n; i++)   /* rows of Vt */
        for (int64_t j = 0; j < n; j++) {
            double d = 0;
            for (int64_t t = 0; t < n; t++) d += vt[i * n + t] * vt[j * n + t];
            cr_assert(fabs(d - (i == j)) < 1e-12, "%s: (Vt Vt^T)[%lld, %lld] = %.17g", what,
                      (long long)i, (long long)j, d);
        }
    rc = recon(u, s, vt, m, n, n);
    for (int64_t i = 0; i < m * n; i++) amax = fmax(amax, fabs(a[i]));
    for (int64_t i = 0; i < m * n; i++)
        cr_assert(fabs(rc[i] - a[i]) <= 1e-12 * amax, "%s: (U S Vt)[%lld] = %.17g, A %.17g", what,
                  (long long)i, rc[i], a[i]);
    gs_array_release(h), gs_array_release(hu), gs_array_release(hs), gs_array_release(hvt);
    free(u), free(s), free(vt), free(ref), free(rc);
}

Test(graph_linalg, svd_keeps_accuracy_for_ill_conditioned_inputs)
{
    /* 17 odd chunks: two GRAM groups per pass, summed by the GSTEP task */
    const int64_t m = 400, n = 16;
    int64_t nr, *rb = reg(m, 24, &nr);
    const double kappas[] = {1.0, 30.0, 1e3, 1e6, 1e10, 1e13};
    for (size_t i = 0; i < sizeof(kappas) / sizeof(kappas[0]); i++) {
        char what[64];
        double *a = conditioned(m, n, kappas[i]);
        snprintf(what, sizeof(what), "kappa %g", kappas[i]);
        gram_case(a, m, n, nr, rb, GS_LOWER_DEFAULT, what);
        snprintf(what, sizeof(what), "kappa %g, tsqr", kappas[i]);
        gram_case(a, m, n, nr, rb, GS_LOWER_DEFAULT & ~GS_LOWER_GRAM_SVD, what);
        free(a);
    }
    free(rb);
}

Test(graph_linalg, svd_of_odd_chunks_and_single_columns)
{
    const int64_t odd[] = {0, 1, 2, 40, 41, 97, 130}, one[] = {0, 5, 6, 30};
    double *a = conditioned(130, 9, 1e4), *b = rand_mat(30, 1);
    gram_case(a, 130, 9, 6, odd, GS_LOWER_DEFAULT, "odd chunks");
    gram_case(b, 30, 1, 3, one, GS_LOWER_DEFAULT, "one column");
    free(a), free(b);
    /* chunks past GS__GRAM_GROUP_ROWS: a GRAM task each, summed by the GSTEP task */
    const int64_t big[] = {0, 70000, 140000, 140003};
    a = conditioned(140003, 3, 1e8);
    gram_case(a, 140003, 3, 3, big, GS_LOWER_DEFAULT, "large chunks, kappa 1e8");
    free(a);
}

Test(graph_linalg, svd_lowers_to_three_gram_passes)
{
    int64_t s[2] = {2000, 10}, c[2] = {100, 10};
    gs_array_h a, u, sv, vt;
    gs_taskgraph_t *tg;
    int nl;
    OK(gs_array_random_normal(3, 0, 1, 2, s, c, &a));
    OK(gs_array_svd(a, &u, &sv, &vt));
    OK(gs_graph_lower(u, GS_LOWER_DEFAULT, &tg));
    /* 20 chunks of 100 rows: one GRAM task (small chunks grouped), no sum, one GSTEP, 20
     * APPLY per pass */
    cr_assert_eq(count_tasks(tg, "linalg-gram", &nl), 3 * 1);
    cr_assert_eq(count_tasks(tg, "linalg-sum", &nl), 0);
    cr_assert_eq(count_tasks(tg, "linalg-gstep", &nl), 3);
    cr_assert_eq(count_tasks(tg, "linalg-apply", &nl), 3 * 20);
    cr_assert_eq(count_tasks(tg, "linalg-qr", &nl), 0);
    gs_taskgraph_free(tg);
    /* S alone: no third APPLY pass */
    OK(gs_graph_lower(sv, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(count_tasks(tg, "linalg-apply", &nl), 2 * 20);
    cr_assert_eq(count_tasks(tg, "linalg-copy", &nl), 1);
    gs_taskgraph_free(tg);
    /* the flag off: TSQR */
    OK(gs_graph_lower(u, GS_LOWER_DEFAULT & ~GS_LOWER_GRAM_SVD, &tg));
    cr_assert_eq(count_tasks(tg, "linalg-gstep", &nl), 0);
    cr_assert_gt(count_tasks(tg, "linalg-qr", &nl), 0);
    gs_taskgraph_free(tg);
    gs_array_release(a), gs_array_release(u), gs_array_release(sv), gs_array_release(vt);
    /* 40 chunks of 70000 rows (never run): one GRAM task per chunk, one sum of 40 */
    int64_t s2[2] = {2800000, 4}, c2[2] = {70000, 4};
    OK(gs_array_random_normal(3, 0, 1, 2, s2, c2, &a));
    OK(gs_array_svd(a, &u, &sv, &vt));
    OK(gs_graph_lower(u, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(count_tasks(tg, "linalg-gram", &nl), 3 * 40);
    cr_assert_eq(count_tasks(tg, "linalg-sum", &nl), 3);
    gs_taskgraph_free(tg);
    gs_array_release(a), gs_array_release(u), gs_array_release(sv), gs_array_release(vt);
    /* 16 such chunks: the GSTEP task adds the 16 Gram matrices itself (no sum, no barrier) */
    int64_t s3[2] = {1120000, 4};
    OK(gs_array_random_normal(3, 0, 1, 2, s3, c2, &a));
    OK(gs_array_svd(a, &u, &sv, &vt));
    OK(gs_graph_lower(u, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(count_tasks(tg, "linalg-gram", &nl), 3 * 16);
    cr_assert_eq(count_tasks(tg, "linalg-sum", &nl), 0);
    cr_assert_eq(count_tasks(tg, "linalg-gstep", &nl), 3);
    gs_taskgraph_free(tg);
    gs_array_release(a), gs_array_release(u), gs_array_release(sv), gs_array_release(vt);
}

/* Evaluate @a h and expect failure @a want with @a msg in the error. */
static void eval_fails(gs_array_h h, unsigned flags, gs_status_t want, const char *msg)
{
    gs_taskgraph_t *tg;
    int64_t size = gs_array_size(h);
    double *out = malloc((size_t)size * sizeof(double));
    OK(gs_graph_lower(h, flags, &tg));
    gs_status_t st = gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)size);
    cr_assert_eq(st, want, "%d %s: %s", (int)st, gs_status_name(st), gs_last_error());
    cr_assert(strstr(gs_last_error(), msg), "%s", gs_last_error());
    gs_taskgraph_free(tg);
    free(out);
}

Test(graph_linalg, svd_reports_nan_inputs)
{
    const int64_t m = 60, n = 5, rb[] = {0, 20, 40, 60};
    double *a = rand_mat(m, n);
    gs_array_h h, u, s;
    a[77] = NAN;
    h = host(a, m, n, 3, rb, 1, NULL);
    OK(gs_array_svd(h, &u, &s, NULL));
    eval_fails(s, GS_LOWER_DEFAULT, GS_ERR_NUMERIC, "NaN");
    eval_fails(u, GS_LOWER_DEFAULT, GS_ERR_NUMERIC, "NaN");
    gs_array_release(h), gs_array_release(u), gs_array_release(s);
    free(a);
}

/* m x n of rank < n: 0 rank 1, 1 rank 3 (a product), 2 two exact zero columns, 3 duplicated
 * columns (rank 4) */
static double *rank_deficient(int kind, int64_t m, int64_t n)
{
    double *a = rand_mat(m, n), *l = rand_mat(m, 3), *r = rand_mat(3, n);
    if (kind == 1) naive_mm(l, r, m, 3, n, a);
    for (int64_t i = 0; i < m; i++) {
        if (kind == 0)
            for (int64_t j = 1; j < n; j++) a[i * n + j] = a[i * n] * (double)(j + 1);
        if (kind == 2) a[i * n + 1] = a[i * n + 4] = 0.0;
        if (kind == 3) a[i * n + 4] = a[i * n + 1], a[i * n + 5] = a[i * n + 2];
    }
    free(l), free(r);
    return a;
}

/* Rank-deficient tall inputs: the Gram path refuses them or factors them; either way the
 * evaluation with the default flags (gs_chunkops_eval_array: TSQR when the Gram path refuses)
 * gives U with orthonormal columns, S as LAPACK's dgesvd (the zero ones ~eps s_max) and
 * U S Vt = A. */
Test(graph_linalg, svd_of_rank_deficient_inputs_is_valid)
{
    const int64_t m = 90, n = 6, rb[] = {0, 30, 60, 90};
    int refused = 0;
    for (int kind = 0; kind < 4; kind++) {
        double *a = rank_deficient(kind, m, n), *ref = lapack_sv(a, m, n);
        double *u = malloc((size_t)(m * n) * 8), sv[6], vt[36], *rc;
        gs_array_h h = host(a, m, n, 3, rb, 1, NULL), hu, hs, hvt;
        gs_taskgraph_t *tg;
        OK(gs_array_svd(h, &hu, &hs, &hvt));
        OK(gs_graph_lower(hs, GS_LOWER_DEFAULT, &tg));   /* the Gram path alone */
        gs_status_t st = gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, sv, (size_t)n);
        gs_taskgraph_free(tg);
        if (st != GS_OK) {
            unsigned fl = 0;
            cr_assert_eq(st, GS_ERR_NUMERIC, "kind %d: %s", kind, gs_status_name(st));
            cr_assert(gs_graph_lower_retry_flags(GS_LOWER_DEFAULT, st, gs_last_error(), &fl),
                      "kind %d: %s", kind, gs_last_error());
            cr_assert_eq(fl, GS_LOWER_DEFAULT & ~GS_LOWER_GRAM_SVD);
            refused++;
        }
        OK(gs_chunkops_eval_array(&gs_chunkops_cpu_ops, ctx, hu, GS_LOWER_DEFAULT, u,
                                  (size_t)(m * n)));
        OK(gs_chunkops_eval_array(&gs_chunkops_cpu_ops, ctx, hs, GS_LOWER_DEFAULT, sv, 6));
        OK(gs_chunkops_eval_array(&gs_chunkops_cpu_ops, ctx, hvt, GS_LOWER_DEFAULT, vt, 36));
        check_orthonormal_cols(u, m, n, 1e-12, "rank-deficient U");
        check_orthonormal_cols(vt, n, n, 1e-12, "rank-deficient V");   /* Vt^T's columns */
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(sv[i] - ref[i]) <= 1e-12 * ref[0], "kind %d: s[%lld] = %.17g, "
                      "LAPACK %.17g", kind, (long long)i, sv[i], ref[i]);
        rc = recon(u, sv, vt, m, n, n);
        assert_close(rc, a, m * n, 1e-12, "rank-deficient reconstruction");
        gs_array_release(h), gs_array_release(hu), gs_array_release(hs), gs_array_release(hvt);
        free(a), free(ref), free(u), free(rc);
    }
    cr_assert(refused > 0, "no input made the Gram path fall back");
}

/* Only the Gram path's refusal is retried, and only once (the retry flags lack the path). */
Test(graph_linalg, svd_fallback_retries_only_the_gram_refusal)
{
    unsigned fl = 12345;
    const char *why = "task 7: linalg gstep: ... too " GS_LA_GRAM_REFUSED " (max ...)";
    cr_assert(gs_graph_lower_retry_flags(GS_LOWER_DEFAULT, GS_ERR_TASK_FAILED, why, &fl));
    cr_assert_eq(fl, GS_LOWER_DEFAULT & ~GS_LOWER_GRAM_SVD);
    fl = 12345;
    cr_assert(!gs_graph_lower_retry_flags(GS_LOWER_DEFAULT & ~GS_LOWER_GRAM_SVD, GS_ERR_NUMERIC,
                                          why, &fl));   /* TSQR already */
    cr_assert(!gs_graph_lower_retry_flags(GS_LOWER_DEFAULT, GS_ERR_NO_MEMORY, why, &fl));
    cr_assert(!gs_graph_lower_retry_flags(GS_LOWER_DEFAULT, GS_ERR_NUMERIC,
                                          "the Gram matrix is not finite (NaN/Inf)", &fl));
    cr_assert(!gs_graph_lower_retry_flags(GS_LOWER_DEFAULT, GS_ERR_NUMERIC, NULL, &fl));
    cr_assert_eq(fl, 12345u);
}

/* ---- randomized SVD ---- */

Test(graph_linalg, svd_compressed_recovers_a_low_rank_matrix)
{
    const int64_t m = 120, n = 50, rank = 5, k = 5;
    double *l = rand_mat(m, rank), *rr = rand_mat(rank, n), *a = malloc((size_t)(m * n) * 8);
    double *u, *s, *vt, *ref, *rc;
    int64_t nr, nc, *rb, *cb;
    gs_array_h h, hu, hs, hvt;
    gs_svd_compressed_params_t p;
    naive_mm(l, rr, m, rank, n, a);
    rb = reg(m, 25, &nr), cb = reg(n, 15, &nc);
    h = host(a, m, n, nr, rb, nc, cb);
    memset(&p, 0, sizeof(p));
    p.field_mask = GS_SVDC_FIELD_SEED | GS_SVDC_FIELD_OVERSAMPLES;
    p.seed = 42;
    p.n_oversamples = 4;
    OK(gs_array_svd_compressed(h, k, &p, &hu, &hs, &hvt));
    cr_assert_eq(gs_array_nchunks(hu, 0), nr);
    cr_assert_eq(gs_array_nchunks(hvt, 1), nc);
    u = eval(hu), s = eval(hs), vt = eval(hvt);
    ref = lapack_sv(a, m, n);
    for (int64_t i = 0; i < k; i++)
        cr_assert(fabs(s[i] - ref[i]) <= 1e-10 * ref[i], "s[%lld] = %.17g, LAPACK %.17g",
                  (long long)i, s[i], ref[i]);
    rc = recon(u, s, vt, m, k, n);
    assert_close(rc, a, m * n, 1e-10, "low-rank reconstruction");
    check_orthonormal_cols(u, m, k, 1e-12, "u");
    gs_array_release(h), gs_array_release(hu), gs_array_release(hs), gs_array_release(hvt);
    free(l), free(rr), free(a), free(u), free(s), free(vt), free(ref), free(rc), free(rb), free(cb);
}

Test(graph_linalg, svd_compressed_with_power_iterations_is_deterministic)
{
    const int64_t m = 90, n = 40, k = 4;
    double *a = rand_mat(m, n), *s1, *s2, *ref, *u;
    int64_t nr, nc, *rb = reg(m, 20, &nr), *cb = reg(n, 16, &nc);
    gs_array_h h, hs1, hs2, hu;
    gs_svd_compressed_params_t p;
    /* a decaying spectrum: scale column j by 0.5^j */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) a[i * n + j] *= pow(0.5, (double)j);
    h = host(a, m, n, nr, rb, nc, cb);
    memset(&p, 0, sizeof(p));
    p.field_mask = GS_SVDC_FIELD_SEED | GS_SVDC_FIELD_POWER_ITER;
    p.seed = 7;
    p.n_power_iter = 2;
    OK(gs_array_svd_compressed(h, k, &p, &hu, &hs1, NULL));
    OK(gs_array_svd_compressed(h, k, &p, NULL, &hs2, NULL));
    s1 = eval(hs1), s2 = eval(hs2), u = eval(hu);
    cr_assert(memcmp(s1, s2, (size_t)k * sizeof(double)) == 0, "same seed, different values");
    ref = lapack_sv(a, m, n);
    for (int64_t i = 0; i < k; i++)
        cr_assert(fabs(s1[i] - ref[i]) <= 1e-6 * ref[i], "s[%lld] = %.17g, LAPACK %.17g",
                  (long long)i, s1[i], ref[i]);
    check_orthonormal_cols(u, m, k, 1e-12, "u");
    gs_array_release(h), gs_array_release(hs1), gs_array_release(hs2), gs_array_release(hu);
    free(a), free(s1), free(s2), free(ref), free(u), free(rb), free(cb);
}

Test(graph_linalg, svd_compressed_rejects_k_beyond_the_rank_bound)
{
    int64_t s[2] = {30, 8}, c[2] = {10, 4};
    gs_array_h a, u = NULL;
    gs_svd_compressed_params_t p;
    OK(gs_array_full(1, 2, s, c, &a));
    cr_assert_eq(gs_array_svd_compressed(a, 9, NULL, &u, NULL, NULL), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "k = 9"), "%s", gs_last_error());
    cr_assert_eq(gs_array_svd_compressed(a, 0, NULL, &u, NULL, NULL), GS_ERR_INVALID_PARAM);
    memset(&p, 0, sizeof(p));
    p.field_mask = 0x80;
    cr_assert_eq(gs_array_svd_compressed(a, 2, &p, &u, NULL, NULL), GS_ERR_INVALID_PARAM);
    p.field_mask = GS_SVDC_FIELD_OVERSAMPLES;
    p.n_oversamples = -1;
    cr_assert_eq(gs_array_svd_compressed(a, 2, &p, &u, NULL, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_null(u);
    gs_array_release(a);
}

/* ---- slices over linalg results (pushdown rebuilds the nodes) ---- */

Test(graph_linalg, slices_of_products_and_factors_under_every_flag)
{
    double *a = rand_mat(20, 6), *b = rand_mat(6, 9), want[180];
    int64_t sa[2] = {20, 6}, ca[2] = {7, 6}, sb[2] = {6, 9}, cb[2] = {6, 4};
    gs_slice_t sl[2] = {{1, 0, 3, GS_SLICE_HAS_START}, {0, 0, -1, 0}};
    gs_array_h ha, hb, c, cs, q, r, qs, e;
    OK(gs_array_from_host(a, 2, sa, ca, &ha));
    OK(gs_array_from_host(b, 2, sb, cb, &hb));
    OK(gs_array_binary_scalar(GS_BINARY_MUL, ha, 2.0, &e));
    OK(gs_array_matmul(e, hb, &c));
    OK(gs_array_slice(c, 2, sl, &cs));
    OK(gs_array_qr(e, &q, &r));
    OK(gs_array_slice(q, 2, sl, &qs));
    naive_mm(a, b, 20, 6, 9, want);
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        double *got = eval_flags(cs, f), *qq = eval_flags(q, f), *rr = eval_flags(r, f);
        double *qsv = eval_flags(qs, f);
        int64_t t = 0;
        for (int64_t i = 1; i < 20; i += 3)
            for (int64_t j = 8; j >= 0; j--, t++)
                cr_assert(fabs(got[t] - 2 * want[i * 9 + j]) < 1e-12 * fmax(1, fabs(want[i * 9 + j])));
        t = 0;
        for (int64_t i = 1; i < 20; i += 3)
            for (int64_t j = 5; j >= 0; j--, t++) cr_assert_eq(qsv[t], qq[i * 6 + j]);
        for (int64_t i = 0; i < 120; i++) a[i] *= 2;
        check_qr(a, qq, rr, 20, 6, "qr of 2a");
        for (int64_t i = 0; i < 120; i++) a[i] /= 2;
        free(got), free(qq), free(rr), free(qsv);
    }
    gs_array_release(ha), gs_array_release(hb), gs_array_release(c), gs_array_release(cs);
    gs_array_release(q), gs_array_release(r), gs_array_release(qs), gs_array_release(e);
    free(a), free(b);
}

/* ---- the LINALG layer: codec and instantiation ---- */

static gs_taskgraph_t *lower_svd_and_sum(void)
{
    int64_t s[2] = {60, 5}, c[2] = {10, 5}, sb[2] = {5, 200}, cb[2] = {5, 20};
    gs_array_h a, u, sv, b, p, su, sp, t;
    gs_taskgraph_t *tg;
    OK(gs_array_random_normal(1, 0, 1, 2, s, c, &a));
    OK(gs_array_svd(a, &u, &sv, NULL));
    OK(gs_array_random_normal(2, 0, 1, 2, sb, cb, &b));
    OK(gs_array_transpose(b, NULL, &t));
    OK(gs_array_matmul(b, t, &p));   /* 10 contracted chunks: gemm groups + a sum */
    OK(gs_array_reduce(GS_RED_SUM, u, NULL, &su));
    OK(gs_array_reduce(GS_RED_SUM, p, NULL, &sp));
    gs_array_release(u);
    OK(gs_array_binary(GS_BINARY_ADD, su, sp, &u));
    OK(gs_graph_lower(u, GS_LOWER_DEFAULT, &tg));
    gs_array_release(a), gs_array_release(u), gs_array_release(sv), gs_array_release(b);
    gs_array_release(p), gs_array_release(su), gs_array_release(sp), gs_array_release(t);
    return tg;
}

Test(graph_linalg, linalg_layers_decode_totally)
{
    gs_taskgraph_t *tg = lower_svd_and_sum();
    int seen = 0;
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        gs_buf_t b;
        gs_layer_t *l;
        if (gs_layer_kind(tg->layers[i]) != GS_LAYER_LINALG) continue;
        seen++;
        gs_buf_init(&b);
        OK(gs_layer_encode(tg->layers[i], &b));
        for (size_t cut = 0; cut < b.len; cut++)
            cr_assert_eq(gs_layer_decode(b.data, cut, &l), GS_ERR_PROTO, "prefix of %zu bytes", cut);
        for (size_t pos = 0; pos < b.len; pos++) {
            uint8_t *d = (uint8_t *)b.data, old = d[pos];
            static const uint8_t v[] = {0x00, 0x7f, 0xff, 0xc0, 0x93, 0xcc, 0xd3};
            for (size_t x = 0; x < sizeof(v); x++) {
                gs_status_t st;
                d[pos] = v[x];
                st = gs_layer_decode(b.data, b.len, &l);
                cr_assert(st == GS_OK || st == GS_ERR_PROTO);
                if (st == GS_OK) gs_layer_free(l);
            }
            d[pos] = old;
        }
        gs_buf_cleanup(&b);
    }
    cr_assert_geq(seen, 5, "expected qr, svd, gemm (2) and sum layers, saw %d", seen);
    gs_taskgraph_free(tg);
}

Test(graph_linalg, linalg_instantiation_checks_its_inputs)
{
    gs_taskgraph_t *tg = lower_svd_and_sum();
    double buf[4096], out[4096];
    gs_chunk_ref_t in[GS__LA_MAX_INPUTS + 1];
    gs_ktask_t t;
    int checked = 0;
    for (int i = 0; i <= GS__LA_MAX_INPUTS; i++) in[i].data = buf;
    for (uint64_t task = 0; task < tg->ntasks; task++) {
        const gs_layer_t *l = tg->layers[tg->task_layer[task]];
        uint64_t blk = tg->task_block[task];
        int n;
        const int64_t *lens;
        if (gs_layer_kind(l) != GS_LAYER_LINALG) continue;
        n = gs_layer_ninputs(l, blk);
        cr_assert_eq((uint64_t)n, tg->dep_off[task + 1] - tg->dep_off[task]);
        lens = gs__la_in_lens(l, blk);
        for (int i = 0; i < n; i++) {
            in[i].len = lens[i];
            cr_assert_eq((uint64_t)lens[i] * 8, tg->task_nbytes[tg->deps[tg->dep_off[task] + i]],
                         "input %d of task %llu has the wrong expected length", i,
                         (unsigned long long)task);
        }
        OK(gs_layer_instantiate(l, blk, n, in, out, &t));
        cr_assert_neq(gs_layer_instantiate(l, blk, n + 1, in, out, &t), GS_OK);
        if (n > 0) {
            cr_assert_neq(gs_layer_instantiate(l, blk, n - 1, in, out, &t), GS_OK);
            in[0].len++;
            cr_assert_neq(gs_layer_instantiate(l, blk, n, in, out, &t), GS_OK);
            in[0].len--;
        }
        cr_assert_neq(gs_layer_instantiate(l, gs_layer_nblocks(l), n, in, out, &t), GS_OK);
        checked++;
    }
    /* the SVD: three Gram passes of 1 GRAM + 1 GSTEP + 6 APPLY tasks; the matmul: 2 + 1 */
    cr_assert_eq(checked, 3 * (1 + 1 + 6) + 2 + 1);
    gs_taskgraph_free(tg);
}

Test(graph_linalg, matmul_of_empty_operands)
{
    int64_t sa[2] = {4, 0}, ca[2] = {2, 1}, sb[2] = {0, 3}, cb[2] = {1, 2}, se[2] = {0, 5},
            ce[2] = {1, 5}, sf[2] = {5, 3}, cf[2] = {5, 2};
    gs_array_h a, b, c, e, f, g;
    double *got;
    OK(gs_array_full(1, 2, sa, ca, &a));
    OK(gs_array_full(1, 2, sb, cb, &b));
    OK(gs_array_matmul(a, b, &c));   /* (4 x 0) @ (0 x 3): zeros */
    got = eval(c);
    for (int i = 0; i < 12; i++) cr_assert_eq(got[i], 0.0);
    free(got);
    OK(gs_array_full(1, 2, se, ce, &e));
    OK(gs_array_full(1, 2, sf, cf, &f));
    OK(gs_array_matmul(e, f, &g));   /* (0 x 5) @ (5 x 3): empty */
    cr_assert_eq(gs_array_size(g), 0);
    got = eval(g);
    free(got);
    gs_array_release(a), gs_array_release(b), gs_array_release(c);
    gs_array_release(e), gs_array_release(f), gs_array_release(g);
}
