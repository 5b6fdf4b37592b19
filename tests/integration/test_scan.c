/* cumsum / cumprod (gs_array_cumulative) computed by real gsched + gworker processes on
 * loopback: chunk scans, per-chunk totals and the carry chain spread over two workers, on a
 * persisted input and on an expression, along both axes, in float64, float32 and int32 (int64
 * results), compared with a plain-C reference; a persisted scan read by a later expression. */
#include "cluster.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

TC_SUITE_CLUSTER(up2, 2, 120)

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

enum { R = 41, K = 23 };

/* want = the scan of v (R x K) along @a axis (sum or product), in double. */
static void ref(const double *v, int axis, int prod, double *want)
{
    for (int i = 0; i < R; i++)
        for (int j = 0; j < K; j++) {
            const int p = i * K + j, q = axis == 0 ? p - K : p - 1;
            const int first = axis == 0 ? i == 0 : j == 0;
            want[p] = first ? v[p] : prod ? want[q] * v[p] : want[q] + v[p];
        }
}

/* The float64 @a y (R x K), computed by the cluster into @a got, equals @a want exactly. */
static void expect_f64(gs_array_h y, double *got, const double *want, const char *what, int axis)
{
    OK(gs_client_compute(C, y, got, R * K));
    for (int i = 0; i < R * K; i++)
        cr_assert_eq(got[i], want[i], "%s axis %d [%d]: %.17g, want %.17g", what, axis, i, got[i],
                     want[i]);
}

Test(integration_scan, cumsum_and_cumprod_through_the_cluster, .init = up2, .fini = down)
{
    static double v[R * K], pv[R * K], want[R * K], got[R * K];
    static float gf[R * K];
    static int64_t gi[R * K];
    for (int i = 0; i < R * K; i++) {
        v[i] = (double)((i * 7919) % 613) * 0.25 - 76.0;     /* exact sums in float32 too */
        pv[i] = (i % 7) == 3 ? -2.0 : (i % 5) == 1 ? 0.5 : 1.0;   /* exact products */
    }
    const int64_t shape[2] = {R, K}, chunks[2] = {4, 5};   /* 11 x 5 chunks */
    gs_array_h x, xf, xi, p, y;
    OK(gs_array_from_host(v, 2, shape, chunks, &x));
    OK(gs_client_persist(C, x));
    OK(gs_array_astype(x, GS_DTYPE_FLOAT32, &xf));
    OK(gs_array_astype(x, GS_DTYPE_INT32, &xi));
    OK(gs_array_from_host(pv, 2, shape, chunks, &p));
    for (int axis = 0; axis < 2; axis++) {
        /* float64, persisted input */
        ref(v, axis, 0, want);
        OK(gs_array_cumsum(x, axis, &y));
        expect_f64(y, got, want, "float64", axis);
        gs_array_release(y);
        /* float32: an expression (the cast) scanned in float32 */
        OK(gs_array_cumsum(xf, -2 + axis, &y));
        cr_assert_eq(gs_array_dtype(y), GS_DTYPE_FLOAT32);
        OK(gs_client_compute(C, y, (double *)gf, R * K));
        for (int i = 0; i < R * K; i++)
            cr_assert_eq((double)gf[i], want[i], "float32 axis %d [%d]: %.9g, want %.17g", axis,
                         i, gf[i], want[i]);
        gs_array_release(y);
        /* int32 -> int64 */
        OK(gs_array_cumsum(xi, axis, &y));
        cr_assert_eq(gs_array_dtype(y), GS_DTYPE_INT64);
        OK(gs_client_compute(C, y, (double *)gi, R * K));
        {
            static double vi[R * K], wi[R * K];
            for (int i = 0; i < R * K; i++) vi[i] = (double)(int32_t)v[i];
            ref(vi, axis, 0, wi);
            for (int i = 0; i < R * K; i++)
                cr_assert_eq((double)gi[i], wi[i], "int32 axis %d [%d]: %lld, want %.17g", axis,
                             i, (long long)gi[i], wi[i]);
        }
        gs_array_release(y);
        /* products */
        ref(pv, axis, 1, want);
        OK(gs_array_cumprod(p, axis, &y));
        expect_f64(y, got, want, "cumprod", axis);
        gs_array_release(y);
    }
    /* a persisted scan read by a later expression: sum(cumsum(x, 1)[:, -1]) = sum(x) */
    gs_array_h s, last, tot;
    double sum = 0, gs_tot = 0;
    for (int i = 0; i < R * K; i++) sum += v[i];
    OK(gs_array_cumsum(x, 1, &s));
    OK(gs_client_persist(C, s));
    const gs_slice_t sl[2] = {GS_SLICE_ALL, GS_SLICE_AT(K - 1)};
    OK(gs_array_slice(s, 2, sl, &last));
    OK(gs_array_reduce(GS_RED_SUM, last, NULL, &tot));
    OK(gs_client_compute(C, tot, &gs_tot, 1));
    cr_assert_eq(gs_tot, sum, "sum of the last column %.17g, want %.17g", gs_tot, sum);
    gs_array_release(tot);
    gs_array_release(last);
    gs_array_release(s);
    gs_array_release(p);
    gs_array_release(xi);
    gs_array_release(xf);
    gs_array_release(x);
}
