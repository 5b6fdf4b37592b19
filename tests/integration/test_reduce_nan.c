/* Truth and NaN-skipping reductions (gs_array_reduce_composite) computed by real gsched +
 * gworker processes on loopback: float32 and int32 arrays with NaN, an all-NaN row and column,
 * reduced over one axis, a tuple of axes with keepdims and every axis, gathered in their
 * NumPy dtypes and compared with a plain-C reference. */
#include "cluster.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

TC_SUITE_CLUSTER(up2, 2, 120)

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

enum { R = 37, K = 29 };

static gs_array_h reduce(gs_credop_t op, gs_array_h a, int naxes, const int *axes, int keep)
{
    gs_array_h r;
    OK(gs_array_reduce_composite(op, a, naxes, axes, keep, NULL, &r));
    return r;
}

Test(integration_reduce_nan, nan_reductions_and_truth_tests_through_the_cluster, .init = up2,
     .fini = down)
{
    static double v[R * K];
    static float xf[R * K];
    static double vi[R * K];
    int64_t want_ns = 0;
    for (int i = 0; i < R * K; i++) {
        int r = i / K, c = i % K;
        v[i] = (double)((i * 7919) % 613) * 0.25 - 60.0;   /* float32-exact */
        if (r == 4 || c == 11 || (i % 13) == 5) v[i] = NAN;   /* row 4, column 11 all NaN */
        if ((i % 17) == 3 && !isnan(v[i])) v[i] = 0.0;
        xf[i] = (float)v[i];
        vi[i] = isnan(v[i]) ? 3.0 : v[i] * 4.0 + 1e9;   /* int32 values summing past 2^31 */
        want_ns += (int64_t)vi[i];
    }
    const int64_t shape[2] = {R, K}, chunks[2] = {10, 8};
    gs_array_h h, hi, f, i32, nm, nx, am, cz, an, al, ns;
    const int ax1[1] = {1}, ax0[1] = {0}, both[2] = {1, 0};
    OK(gs_array_from_host(v, 2, shape, chunks, &h));
    OK(gs_array_astype(h, GS_DTYPE_FLOAT32, &f));
    OK(gs_array_from_host(vi, 2, shape, chunks, &hi));
    OK(gs_array_astype(hi, GS_DTYPE_INT32, &i32));
    nm = reduce(GS_CRED_NANMEAN, f, 1, ax1, 0);
    nx = reduce(GS_CRED_NANMAX, f, 2, both, 1);
    am = reduce(GS_CRED_NANARGMIN, f, 1, ax0, 0);
    cz = reduce(GS_CRED_COUNT_NONZERO, f, 1, ax0, 1);
    an = reduce(GS_CRED_ANY, f, 1, ax1, 0);
    al = reduce(GS_CRED_ALL, f, 1, ax1, 0);
    ns = reduce(GS_CRED_NANSUM, i32, 0, NULL, 0);
    cr_assert_eq(gs_array_dtype(nm), GS_DTYPE_FLOAT32);
    cr_assert_eq(gs_array_dtype(nx), GS_DTYPE_FLOAT32);
    cr_assert_eq(gs_array_dtype(am), GS_DTYPE_INT64);
    cr_assert_eq(gs_array_dtype(cz), GS_DTYPE_INT64);
    cr_assert_eq(gs_array_dtype(an), GS_DTYPE_BOOL);
    cr_assert_eq(gs_array_dtype(ns), GS_DTYPE_INT64);

    float gnm[R], gnx[1];
    int64_t gam[K], gcz[K], gns[1];
    uint8_t gan[R], gal[R];
    OK(gs_client_compute(C, nm, (double *)gnm, R));
    OK(gs_client_compute(C, nx, (double *)gnx, 1));
    OK(gs_client_compute(C, am, (double *)gam, K));
    OK(gs_client_compute(C, cz, (double *)gcz, K));
    OK(gs_client_compute(C, an, (double *)gan, R));
    OK(gs_client_compute(C, al, (double *)gal, R));
    OK(gs_client_compute(C, ns, (double *)gns, 1));

    double mx = -INFINITY;
    for (int r = 0; r < R; r++) {
        double s = 0;
        int n = 0, nz = 0;
        for (int c = 0; c < K; c++) {
            double x = xf[r * K + c];
            nz += x != 0;
            if (isnan(x)) continue;
            s += x;
            n++;
            mx = fmax(mx, x);
        }
        float want = n ? (float)(s / n) : NAN;
        cr_assert(isnan(want) ? isnan(gnm[r]) : gnm[r] == want, "nanmean row %d: %.9g vs %.9g",
                  r, (double)gnm[r], (double)want);
        cr_assert_eq(gan[r], nz > 0, "any row %d", r);
        cr_assert_eq(gal[r], nz == K, "all row %d", r);
    }
    cr_assert(isnan(gnm[4]), "the all-NaN row's nanmean is NaN");
    cr_assert_eq(gnx[0], (float)mx, "nanmax %.9g vs %.9g", (double)gnx[0], mx);
    for (int c = 0; c < K; c++) {
        int64_t best = -1, nz = 0;
        for (int r = 0; r < R; r++) {
            double x = xf[r * K + c];
            nz += x != 0;
            if (!isnan(x) && (best < 0 || x < xf[best * K + c])) best = r;
        }
        cr_assert_eq(gam[c], best, "nanargmin column %d: %lld vs %lld", c, (long long)gam[c],
                     (long long)best);
        cr_assert_eq(gcz[c], nz, "count_nonzero column %d", c);
    }
    cr_assert_eq(gam[11], -1, "the all-NaN column's nanargmin is -1");
    /* nansum of int32 is the int64 sum (no wrap at 2^31) */
    cr_assert_eq(gns[0], want_ns, "nansum of int32 %lld vs %lld", (long long)gns[0],
                 (long long)want_ns);
    /* np.prod along rows of powers of two (exact in any order) and nanprod of the float32 */
    {
        static double pv[R * K];
        double gp[R], want[R];
        float gnp[K], wantn[K];
        gs_array_h hp, p, np_;
        for (int i = 0; i < R * K; i++) pv[i] = (i % 7 == 0) ? 2.0 : (i % 11 == 0) ? -0.5 : 1.0;
        for (int r = 0; r < R; r++) {
            want[r] = 1.0;
            for (int c = 0; c < K; c++) want[r] *= pv[r * K + c];
        }
        for (int c = 0; c < K; c++) {
            double q = 1.0;
            for (int r = 0; r < R; r++) q *= isnan(xf[r * K + c]) ? 1.0 : (double)xf[r * K + c];
            wantn[c] = (float)q;
        }
        OK(gs_array_from_host(pv, 2, shape, chunks, &hp));
        OK(gs_array_reduce_axes(GS_RED_PROD, hp, 1, ax1, 0, NULL, &p));
        np_ = reduce(GS_CRED_NANPROD, f, 1, ax0, 0);
        cr_assert_eq(gs_array_dtype(np_), GS_DTYPE_FLOAT32);
        OK(gs_client_compute(C, p, gp, R));
        OK(gs_client_compute(C, np_, (double *)gnp, K));
        for (int r = 0; r < R; r++) cr_assert_eq(gp[r], want[r], "prod row %d", r);
        for (int c = 0; c < K; c++)
            cr_assert(gnp[c] == wantn[c] ||
                          fabsf(gnp[c] - wantn[c]) <= 1e-6f * fabsf(wantn[c]),
                      "nanprod column %d: %.9g vs %.9g", c, (double)gnp[c], (double)wantn[c]);
        gs_array_release(np_);
        gs_array_release(p);
        gs_array_release(hp);
    }
    gs_array_release(ns);
    gs_array_release(al);
    gs_array_release(an);
    gs_array_release(cz);
    gs_array_release(am);
    gs_array_release(nx);
    gs_array_release(nm);
    gs_array_release(i32);
    gs_array_release(f);
    gs_array_release(hi);
    gs_array_release(h);
}
