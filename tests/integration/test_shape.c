/* Shape operations on real gsched + 2 CPU gworker processes on loopback: reshape (rechunk + a
 * per-chunk copy whose inputs live on either worker), tril/triu (one fused where kernel per
 * chunk) and diag (strided copies) of random and persisted arrays, gathered into client
 * buffers (float64 and int32) and compared with references computed here from the random
 * definition (reference.h). */
#include "cluster.h"
#include "reference.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tcluster_t CL;
static gs_client_h C;

static void up2(void)
{
    alarm(120);
    cr_assert(tc_start(&CL, 2, NULL, NULL), "cluster did not start");
    C = tc_connect(&CL, GS_LOWER_DEFAULT);
    cr_assert_not_null(C, "%s", gs_last_error());
}

static void down(void)
{
    gs_client_destroy(C);
    C = NULL;
    tp_kill_all();
}

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

/* Gather @a a (float64) and compare with want[0..n) within a few ulp (the CPU backend's
 * generator and the reference's libm may differ in the last bits). */
static void expect(gs_array_h a, const double *want, int64_t n, const char *what)
{
    cr_assert_eq(gs_array_size(a), n);
    double *got = gs_malloc((size_t)n * sizeof(double) + 8, "got");
    OK(gs_client_compute(C, a, got, (size_t)n));
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= 1e-13 * fmax(1.0, fabs(want[i])),
                  "%s: element %lld: %.17g vs %.17g", what, (long long)i, got[i], want[i]);
    gs_free(got);
}

Test(integration_shape, reshape_and_tril_of_a_distributed_array, .init = up2, .fini = down)
{
    /* x: 40 x 30 normal in chunks 7 x 11, reshaped to 30 x 40 (rows of x span output rows,
     * so x is rechunked first), then tril(k = -2) and triu(k = 3) */
    const int64_t m = 40, n = 30;
    gs_array_h x, r, lo, up;
    OK(gs_array_random_normal(31, 0, 1, 2, (int64_t[]){m, n}, (int64_t[]){7, 11}, &x));
    ref_t rx = ref_normal(31, 0, 1, 2, (int64_t[]){m, n});
    OK(gs_array_reshape(x, 2, (int64_t[]){n, -1}, &r));
    expect(r, rx.v, m * n, "reshape");
    OK(gs_array_tril(r, -2, &lo));
    OK(gs_array_triu(r, 3, &up));
    double *wl = calloc((size_t)(m * n), sizeof(double)), *wu = calloc((size_t)(m * n), sizeof(double));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            wl[i * m + j] = j - i <= -2 ? rx.v[i * m + j] : 0.0;
            wu[i * m + j] = j - i >= 3 ? rx.v[i * m + j] : 0.0;
        }
    expect(lo, wl, m * n, "tril(reshape(x), -2)");
    expect(up, wu, m * n, "triu(reshape(x), 3)");
    /* the same from a persisted x: the reshape's copies read chunks held by both workers */
    OK(gs_client_persist(C, x));
    gs_array_h lo2, s;
    OK(gs_array_tril(r, -2, &lo2));
    expect(lo2, wl, m * n, "tril(reshape(persisted x), -2)");
    OK(gs_array_reduce(GS_RED_SUM, lo2, NULL, &s));
    double got = NAN, want = 0;
    OK(gs_client_compute_scalar(C, s, &got));
    for (int64_t i = 0; i < m * n; i++) want += wl[i];
    cr_assert(fabs(got - want) <= 1e-10 * fmax(1.0, fabs(want)), "sum %.17g vs %.17g", got, want);
    /* diag(reshape(x), 4): one strided copy per run of the diagonal inside a chunk */
    gs_array_h d;
    double wd[30];
    OK(gs_array_diag(r, 4, &d));
    for (int64_t i = 0; i < n; i++) wd[i] = rx.v[i * m + i + 4];
    expect(d, wd, n, "diag(reshape(persisted x), 4)");
    gs_array_release(d);
    gs_array_release(s);
    gs_array_release(lo2);
    free(wl);
    free(wu);
    ref_free(&rx);
    gs_array_release(up);
    gs_array_release(lo);
    gs_array_release(r);
    gs_array_release(x);
}

Test(integration_shape, tril_reads_a_persisted_array_through_a_reshape, .init = up2, .fini = down)
{
    /* x (40, 30) persisted in whole-row chunks of 4 rows: x.reshape(20, 60) needs no rechunk
     * (chunks of 2 rows) and no copy: the tril kernel reads x's persisted chunks in place */
    const int64_t m = 40, n = 30;
    gs_array_h x, r, lo;
    OK(gs_array_random_normal(32, 0, 1, 2, (int64_t[]){m, n}, (int64_t[]){4, 30}, &x));
    OK(gs_client_persist(C, x));
    ref_t rx = ref_normal(32, 0, 1, 2, (int64_t[]){m, n});
    OK(gs_array_reshape(x, 2, (int64_t[]){20, 60}, &r));
    cr_assert_eq(gs_array_nchunks(r, 0), 10);
    OK(gs_array_tril(r, 3, &lo));
    double *w = calloc((size_t)(m * n), sizeof(double));
    for (int64_t i = 0; i < 20; i++)
        for (int64_t j = 0; j < 60; j++) w[i * 60 + j] = j - i <= 3 ? rx.v[i * 60 + j] : 0.0;
    expect(lo, w, m * n, "tril(persisted x.reshape(20, 60), 3)");
    free(w);
    ref_free(&rx);
    gs_array_release(lo);
    gs_array_release(r);
    gs_array_release(x);
}

Test(integration_shape, typed_eye_and_ravel_gather_in_their_dtype, .init = up2, .fini = down)
{
    /* int32 eye(9, 7, k = -1) in chunks 4 x 3, raveled: int32 elements in the client buffer */
    gs_array_h e, f;
    OK(gs_array_eye(9, 7, -1, GS_DTYPE_INT32, (int64_t[]){4, 3}, &e));
    OK(gs_array_ravel(e, &f));
    cr_assert_eq(gs_array_dtype(f), GS_DTYPE_INT32);
    int32_t got[63];
    memset(got, 0x7f, sizeof(got));
    OK(gs_client_compute(C, f, (double *)(void *)got, 63));
    for (int i = 0; i < 9; i++)
        for (int j = 0; j < 7; j++)
            cr_assert_eq(got[i * 7 + j], j - i == -1 ? 1 : 0, "eye[%d, %d] = %d", i, j,
                         (int)got[i * 7 + j]);
    gs_array_release(f);
    gs_array_release(e);
}
