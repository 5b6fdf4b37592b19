/* Linear algebra on real gsched + 2 CPU gworker processes on loopback: matmul and SVD of
 * persisted arrays (chunks spread over both workers, fetched over UCX by the GEMM / QR tasks),
 * and a randomized SVD. Inputs are gathered to the client and the results checked there
 * (naive products; U S Vt = A, orthonormal U); the numerics against LAPACK are in
 * tests/graph/test_linalg.c. */
#include "cluster.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <lapacke.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TC_SUITE_CLUSTER(up2, 2, 120)

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

static gs_array_h normal2(uint64_t seed, int64_t r, int64_t c, int64_t cr, int64_t cc)
{
    int64_t shape[2] = {r, c}, chunks[2] = {cr, cc};
    gs_array_h x;
    OK(gs_array_random_normal(seed, 0, 1, 2, shape, chunks, &x));
    return x;
}

static double *gather(gs_array_h a)
{
    int64_t n = gs_array_size(a);
    double *v = malloc((size_t)n * sizeof(double));
    cr_assert_not_null(v);
    OK(gs_client_compute(C, a, v, (size_t)n));
    return v;
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

/* u (m x k) diag(s) vt (k x n) == a, u orthonormal, s descending */
static void check_svd(const double *a, const double *u, const double *s, const double *vt,
                      int64_t m, int64_t k, int64_t n, double tol)
{
    for (int64_t i = 0; i + 1 < k; i++) cr_assert_geq(s[i], s[i + 1]);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = 0;
            for (int64_t t = 0; t < k; t++) v += u[i * k + t] * s[t] * vt[t * n + j];
            cr_assert(fabs(v - a[i * n + j]) <= tol * fmax(1, fabs(a[i * n + j])),
                      "(%lld, %lld): %.17g vs %.17g", (long long)i, (long long)j, v, a[i * n + j]);
        }
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) {
            double v = 0;
            for (int64_t t = 0; t < m; t++) v += u[t * k + i] * u[t * k + j];
            cr_assert(fabs(v - (i == j)) < 1e-12, "(U^T U)[%lld, %lld] = %.17g", (long long)i,
                      (long long)j, v);
        }
}

Test(integration_linalg, matmul_of_persisted_arrays, .init = up2, .fini = down)
{
    gs_array_h a = normal2(31, 120, 90, 40, 30), b = normal2(32, 90, 50, 30, 25), c, at, ata;
    double *va, *vb, *vc, *want = malloc(120 * 90 * sizeof(double));
    OK(gs_client_persist(C, a));
    OK(gs_client_persist(C, b));
    va = gather(a), vb = gather(b);
    OK(gs_array_matmul(a, b, &c));
    vc = gather(c);
    naive_mm(va, vb, 120, 90, 50, want);
    for (int64_t i = 0; i < 120 * 50; i++)
        cr_assert(fabs(vc[i] - want[i]) <= 1e-12 * fmax(1, fabs(want[i])), "element %lld",
                  (long long)i);
    free(vc);
    /* a^T a: the transpose is read in place by the GEMM tasks */
    OK(gs_array_transpose(a, NULL, &at));
    OK(gs_array_matmul(at, a, &ata));
    vc = gather(ata);
    for (int64_t i = 0; i < 90; i++)
        for (int64_t j = 0; j < 90; j++) {
            double s = 0;
            for (int64_t t = 0; t < 120; t++) s += va[t * 90 + i] * va[t * 90 + j];
            cr_assert(fabs(vc[i * 90 + j] - s) <= 1e-12 * fmax(1, fabs(s)));
        }
    gs_array_release(a), gs_array_release(b), gs_array_release(c);
    gs_array_release(at), gs_array_release(ata);
    free(va), free(vb), free(vc), free(want);
}

Test(integration_linalg, svd_of_a_persisted_tall_array, .init = up2, .fini = down)
{
    const int64_t m = 400, n = 12;
    gs_array_h a = normal2(33, m, n, 50, n), u, s, vt;
    double *va, *vu, *vs, *vvt;
    OK(gs_client_persist(C, a));
    va = gather(a);
    OK(gs_array_svd(a, &u, &s, &vt));
    vu = gather(u), vs = gather(s), vvt = gather(vt);
    check_svd(va, vu, vs, vvt, m, n, n, 1e-11);
    gs_array_release(a), gs_array_release(u), gs_array_release(s), gs_array_release(vt);
    free(va), free(vu), free(vs), free(vvt);
}

/* m x n with columns scaled by 10^(-e j / (n - 1)): condition ~10^e. */
static double *graded(int64_t m, int64_t n, double e)
{
    double *a = malloc((size_t)(m * n) * sizeof(double));
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < m * n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        a[i] = ((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0) *
               pow(10.0, -e * (double)(i % n) / (double)(n - 1));
    }
    return a;
}

/* The Gram-path SVD on the workers (three passes, the path chosen by the data) for a well
 * and two badly conditioned inputs, and the same through TSQR (GS_LOWER_GRAM_SVD off): U S Vt
 * = A and U orthonormal to 1e-12 each time. */
Test(integration_linalg, svd_keeps_accuracy_for_ill_conditioned_inputs, .init = up2, .fini = down)
{
    const int64_t m = 600, n = 10, shape[2] = {600, 10}, chunks[2] = {70, 10};
    const double expo[] = {0.5, 6.0, 10.0};
    gs_client_h tsqr = tc_connect(&CL, GS_LOWER_DEFAULT & ~GS_LOWER_GRAM_SVD);
    cr_assert_not_null(tsqr, "%s", gs_last_error());
    for (int c = 0; c < 3; c++) {
        double *a = graded(m, n, expo[c]);
        gs_array_h h, u, s, vt;
        OK(gs_array_from_host(a, 2, shape, chunks, &h));
        OK(gs_array_svd(h, &u, &s, &vt));
        for (int way = 0; way < 2; way++) {
            gs_client_h cl = way ? tsqr : C;
            double *vu = malloc((size_t)(m * n) * sizeof(double)), vs[10], vvt[100];
            OK(gs_client_compute(cl, u, vu, (size_t)(m * n)));
            OK(gs_client_compute(cl, s, vs, 10));
            OK(gs_client_compute(cl, vt, vvt, 100));
            check_svd(a, vu, vs, vvt, m, n, n, 1e-12);
            free(vu);
        }
        gs_array_release(h), gs_array_release(u), gs_array_release(s), gs_array_release(vt);
        free(a);
    }
    gs_client_destroy(tsqr);
}

/* Rank-deficient tall inputs (rank 1, rank 3, two zero columns, duplicated columns) through
 * the cluster with the Gram path on: the Gram path refuses at least one of them (a submitted
 * future fails with the cause), and gs_client_persist / gs_client_compute then fall back to
 * TSQR by themselves:
 * U S Vt = A, U orthonormal, S as LAPACK's dgesvd to 1e-12 s_max. */
Test(integration_linalg, svd_of_rank_deficient_inputs_falls_back_to_tsqr, .init = up2, .fini = down)
{
    const int64_t m = 600, n = 8, shape[2] = {600, 8}, chunks[2] = {70, 8};
    int refused = 0;
    for (int kind = 0; kind < 4; kind++) {
        double *a = graded(m, n, 0.5), *cp = malloc((size_t)(m * n) * sizeof(double));
        double *vu = malloc((size_t)(m * n) * sizeof(double)), vs[8], vvt[64], ref[8], sup[8];
        gs_array_h h, u, s, vt;
        gs_future_h f;
        for (int64_t i = 0; i < m; i++) {
            double *r = a + i * n;
            if (kind == 0)
                for (int64_t j = 1; j < n; j++) r[j] = r[0] * (double)(j + 1);
            if (kind == 1)   /* rank 3: every column a combination of the first three */
                for (int64_t j = 3; j < n; j++) r[j] = r[0] - 0.5 * (double)j * r[1] + r[2] / (double)j;
            if (kind == 2) r[2] = r[6] = 0.0;
            if (kind == 3) r[5] = r[1], r[7] = r[3];
        }
        memcpy(cp, a, (size_t)(m * n) * sizeof(double));
        cr_assert_eq(LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', (lapack_int)m, (lapack_int)n, cp,
                                    (lapack_int)n, ref, NULL, 1, NULL, 1, sup), 0);
        OK(gs_array_from_host(a, 2, shape, chunks, &h));
        OK(gs_array_svd(h, &u, &s, &vt));
        OK(gs_client_submit(C, s, 0, &f));   /* the Gram path alone: no fallback for futures */
        gs_status_t st = gs_future_wait(f, -1);
        if (st != GS_OK) {
            cr_assert_eq(st, GS_ERR_TASK_FAILED, "kind %d: %s", kind, gs_status_name(st));
            cr_assert(strstr(gs_last_error(), "for the Gram path"), "%s", gs_last_error());
            refused++;
        }
        gs_future_destroy(f);
        OK(gs_client_persist(C, u));   /* falls back as gs_client_compute does */
        OK(gs_client_compute(C, u, vu, (size_t)(m * n)));
        OK(gs_client_compute(C, s, vs, 8));
        OK(gs_client_compute(C, vt, vvt, 64));
        OK(gs_client_unpersist(C, u));
        check_svd(a, vu, vs, vvt, m, n, n, 1e-12);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(vs[i] - ref[i]) <= 1e-12 * ref[0], "kind %d: s[%lld] = %.17g, LAPACK "
                      "%.17g", kind, (long long)i, vs[i], ref[i]);
        gs_array_release(h), gs_array_release(u), gs_array_release(s), gs_array_release(vt);
        free(a), free(cp), free(vu);
    }
    cr_assert(refused > 0, "no input made the Gram path refuse");
}

/* A NaN in the input: the GSTEP task fails with GS_ERR_NUMERIC, which reaches the client as
 * GS_ERR_TASK_FAILED with that cause; the cluster stays usable. */
Test(integration_linalg, svd_of_a_nan_input_fails_with_the_cause, .init = up2, .fini = down)
{
    const int64_t shape[2] = {200, 5}, chunks[2] = {50, 5};
    double *a = graded(200, 5, 1.0), s[5];
    gs_array_h h, u, sv;
    a[333] = NAN;
    OK(gs_array_from_host(a, 2, shape, chunks, &h));
    OK(gs_array_svd(h, &u, &sv, NULL));
    gs_status_t st = gs_client_compute(C, sv, s, 5);
    cr_assert_eq(st, GS_ERR_TASK_FAILED, "%s: %s", gs_status_name(st), gs_last_error());
    cr_assert(strstr(gs_last_error(), "GS_ERR_NUMERIC") && strstr(gs_last_error(), "NaN"), "%s",
              gs_last_error());
    gs_array_release(h), gs_array_release(u), gs_array_release(sv);
    a[333] = 0.25;
    OK(gs_array_from_host(a, 2, shape, chunks, &h));
    OK(gs_array_svd(h, &u, &sv, NULL));
    OK(gs_client_compute(C, sv, s, 5));
    cr_assert(s[0] > 0 && s[4] > 0);
    gs_array_release(h), gs_array_release(u), gs_array_release(sv);
    free(a);
}

Test(integration_linalg, svd_compressed_of_a_low_rank_product, .init = up2, .fini = down)
{
    const int64_t m = 200, n = 80, r = 6;
    gs_array_h l = normal2(34, m, r, 50, r), rr = normal2(35, r, n, r, 20), a, u, s, vt;
    gs_svd_compressed_params_t p;
    double *va, *vu, *vs, *vvt;
    OK(gs_array_matmul(l, rr, &a));       /* rank 6, chunked 4 x 4 */
    OK(gs_client_persist(C, a));
    va = gather(a);
    memset(&p, 0, sizeof(p));
    p.field_mask = GS_SVDC_FIELD_SEED | GS_SVDC_FIELD_POWER_ITER;
    p.seed = 5;
    p.n_power_iter = 1;
    OK(gs_array_svd_compressed(a, r, &p, &u, &s, &vt));
    vu = gather(u), vs = gather(s), vvt = gather(vt);
    check_svd(va, vu, vs, vvt, m, r, n, 1e-9);
    gs_array_release(l), gs_array_release(rr), gs_array_release(a);
    gs_array_release(u), gs_array_release(s), gs_array_release(vt);
    free(va), free(vu), free(vs), free(vvt);
}
