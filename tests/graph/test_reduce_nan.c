/* gs_array_reduce_composite(): any, all, count_nonzero and the NaN-skipping reductions per
 * dtype, over single axes, tuples of axes and every axis, with and without keepdims, against
 * a plain-C reference (NaN, +-inf, all-NaN slices, inf + -inf, the first of several -inf after
 * NaN, empty axes, odd chunks), evaluated by the CPU backend with every layer round-tripped
 * through the codec; result dtypes against NumPy's; bad input. */
#include "dtype_eval_util.h"

TestSuite(graph_reduce_nan, .init = setup, .fini = teardown, .timeout = 300);

static const gs_dtype_t dtypes[] = {GS_DTYPE_FLOAT64, GS_DTYPE_FLOAT32, GS_DTYPE_FLOAT16,
                                    GS_DTYPE_INT32,   GS_DTYPE_INT64,   GS_DTYPE_UINT8,
                                    GS_DTYPE_BOOL};
enum { NDT = sizeof(dtypes) / sizeof(dtypes[0]) };

/* NumPy's result dtypes (np.nansum(np.int32) is int64, np.nanmean(np.int32) float64, ...) */
static gs_dtype_t want_dtype(gs_credop_t op, gs_dtype_t d)
{
    switch (op) {
    case GS_CRED_ANY: case GS_CRED_ALL: return GS_DTYPE_BOOL;
    case GS_CRED_COUNT_NONZERO: case GS_CRED_NANARGMIN: case GS_CRED_NANARGMAX:
        return GS_DTYPE_INT64;
    case GS_CRED_NANMIN: case GS_CRED_NANMAX: return d;
    case GS_CRED_NANSUM: case GS_CRED_NANPROD: return is_float(d) ? d : GS_DTYPE_INT64;
    default: return is_float(d) ? d : GS_DTYPE_FLOAT64;
    }
}

/* NumPy's astype of a double without NaN or inf (integers wrap, bool is != 0). */
static double ref_cast_int(gs_dtype_t d, double v)
{
    int64_t i = (int64_t)v;
    switch (d) {
    case GS_DTYPE_INT32: return (double)(int32_t)(uint32_t)(uint64_t)i;
    case GS_DTYPE_UINT8: return (double)(uint8_t)(uint64_t)i;
    case GS_DTYPE_BOOL: return v != 0;
    default: return (double)i;
    }
}

/* The reduction of one slice x[0..n) (already of dtype d) as NumPy gives it, in double. */
static double ref_slice(gs_credop_t op, gs_dtype_t d, const double *x, int64_t n, double ddof)
{
    int64_t cnt = 0, nz = 0, best = -1;
    double s = 0.0, prod = 1.0;
    for (int64_t i = 0; i < n; i++) {
        nz += x[i] != 0;   /* NaN != 0 */
        if (isnan(x[i])) continue;
        cnt++;
        s += x[i];
        prod *= x[i];
        if (best < 0 || (op == GS_CRED_NANMAX || op == GS_CRED_NANARGMAX ? x[i] > x[best]
                                                                          : x[i] < x[best]))
            best = i;
    }
    switch (op) {
    case GS_CRED_ANY: return nz > 0;
    case GS_CRED_ALL: return nz == n;
    case GS_CRED_COUNT_NONZERO: return (double)nz;
    case GS_CRED_NANSUM: return is_float(d) ? ref_round(d, s) : s;
    case GS_CRED_NANPROD: return is_float(d) ? ref_round(d, prod) : prod;
    case GS_CRED_NANMEAN: return ref_round(d, cnt ? s / (double)cnt : NAN);
    case GS_CRED_NANMIN: case GS_CRED_NANMAX: return best < 0 ? NAN : x[best];
    case GS_CRED_NANARGMIN: case GS_CRED_NANARGMAX: return (double)best;
    default: {
        double m = s / (double)cnt, ss = 0.0, v;
        for (int64_t i = 0; i < n; i++)
            if (!isnan(x[i])) ss += (x[i] - m) * (x[i] - m);
        v = (double)cnt - ddof > 0 ? ss / ((double)cnt - ddof) : NAN;
        return ref_round(d, op == GS_CRED_NANSTD ? sqrt(v) : v);
    }
    }
}

/* Reference reduction of x (nd axes, @a shape) over the axes in @a mask: want[o] for each
 * output element o in row-major order, the slice visited in row-major order of the reduced
 * axes (so an index within it is NumPy's arg index). Returns the number of outputs. */
static int64_t ref_reduce(gs_credop_t op, gs_dtype_t d, int nd, const int64_t *shape,
                          const double *x, unsigned mask, double ddof, double *want)
{
    int64_t nout = 1, nsl = 1, size = 1;
    for (int a = 0; a < nd; a++) {
        size *= shape[a];
        if (mask & (1u << a)) nsl *= shape[a];
        else nout *= shape[a];
    }
    double *buf = calloc((size_t)(nout * nsl + 1), sizeof(double));
    cr_assert_not_null(buf);
    for (int64_t i = 0; i < size; i++) {
        int64_t rem = i, o = 0, s = 0, c[GS_MAX_NDIM];
        for (int a = nd - 1; a >= 0; a--) {
            c[a] = rem % shape[a];
            rem /= shape[a];
        }
        for (int a = 0; a < nd; a++) {
            if (mask & (1u << a)) s = s * shape[a] + c[a];
            else o = o * shape[a] + c[a];
        }
        buf[o * nsl + s] = x[i];
    }
    for (int64_t o = 0; o < nout; o++) want[o] = ref_slice(op, d, buf + o * nsl, nsl, ddof);
    free(buf);
    return nout;
}

/* Compare @a h with want[0..n): exactly, or within a relative 1e-12 (float64) / one rounding
 * of the dtype for nanvar/nanstd, whose two passes round differently from the reference. */
static void check_under(gs_array_h h, const double *want, int64_t n, int tol, gs_dtype_t d,
                        unsigned flags, const char *what)
{
    double *got = eval_flags(h, flags);
    const double rel = d == GS_DTYPE_FLOAT32 ? 1e-6 : d == GS_DTYPE_FLOAT16 ? 1e-3 : 1e-12;
    cr_assert_eq(gs_array_size(h), n, "%s: size", what);
    for (int64_t i = 0; i < n; i++) {
        int ok = same(got[i], want[i]);
        if (!ok && tol && isfinite(want[i]))
            ok = fabs(got[i] - want[i]) <= rel * fmax(1.0, fabs(want[i]));
        cr_assert(ok, "%s, flags 0x%x: element %lld is %.17g, want %.17g", what, flags,
                  (long long)i, got[i], want[i]);
    }
    free(got);
}

/* Every op over every dtype of the data v (nd axes, @a shape, @a chunks) over each tuple of
 * axes; keepdims alternates; lowered without and with every optimisation. */
static void run_all(int nd, const int64_t *shape, const int64_t *chunks, const double *v,
                    int ntup, const int *naxes, const int (*tuples)[GS_MAX_NDIM])
{
    int64_t size = 1, cap = 1;   /* cap: outputs of any reduction (3 x 0 over axis 1: 3) */
    for (int a = 0; a < nd; a++) {
        size *= shape[a];
        cap *= shape[a] > 0 ? shape[a] : 1;
    }
    double *x = calloc((size_t)size + 1, sizeof(double));
    double *want = calloc((size_t)cap, sizeof(double));
    cr_assert(x != NULL && want != NULL);
    for (int t = 0; t < NDT; t++) {
        const gs_dtype_t d = dtypes[t];
        gs_array_h h, a;
        /* integers and bool: NaN -> 0, +-inf -> +-9 before the cast (no NaN in them) */
        for (int64_t i = 0; i < size; i++) {
            double w = v[i];
            if (!is_float(d)) w = isnan(w) ? 0.0 : isinf(w) ? copysign(9.0, w) : w;
            x[i] = is_float(d) ? ref_round(d, w) : ref_cast_int(d, w);
        }
        OK(gs_array_from_host(x, nd, shape, chunks, &h));
        OK(gs_array_astype(h, d, &a));
        gs_array_release(h);
        for (int op = 0; op < GS_CRED_COUNT; op++) {
            for (int k = 0; k < ntup; k++) {
                unsigned mask = 0;
                int keep = (op + k) % 2, na = naxes[k], nred = 0;
                const int *axes = na ? tuples[k] : NULL;
                gs_reduce_params_t p = {0};
                char what[160];
                gs_array_h r = NULL;
                for (int i = 0; i < na; i++) mask |= 1u << (axes[i] < 0 ? axes[i] + nd : axes[i]);
                if (na == 0) mask = (1u << nd) - 1;
                for (int ax = 0; ax < nd; ax++) nred += (mask >> ax) & 1;
                if ((op == GS_CRED_NANARGMIN || op == GS_CRED_NANARGMAX) && nred != 1 &&
                    nred != nd)
                    continue;   /* NumPy's arg reductions take one axis or all (bad_input) */
                if (op == GS_CRED_NANVAR || op == GS_CRED_NANSTD) {
                    p.field_mask = GS_REDUCE_FIELD_DDOF;
                    p.ddof = k % 2;
                }
                snprintf(what, sizeof(what), "%s of %s, tuple %d, keepdims %d",
                         gs_credop_name((gs_credop_t)op), gs_dtype_name(d), k, keep);
                int64_t rn = 1, empty_red = 0;
                for (int ax = 0; ax < nd; ax++)
                    if ((mask >> ax) & 1) empty_red |= shape[ax] == 0;
                    else rn *= shape[ax];
                gs_status_t st = gs_array_reduce_composite((gs_credop_t)op, a, na, axes, keep,
                                                           &p, &r);
                if (empty_red && rn > 0 &&
                    (op == GS_CRED_NANMIN || op == GS_CRED_NANMAX || op == GS_CRED_NANARGMIN ||
                     op == GS_CRED_NANARGMAX)) {
                    /* NumPy: "zero-size array to reduction operation ... has no identity" */
                    cr_assert_eq(st, GS_ERR_INVALID_PARAM, "%s: want an error", what);
                    cr_assert(strstr(gs_last_error(), "zero-size") != NULL, "%s: %s", what,
                              gs_last_error());
                    cr_assert_null(r);
                    continue;
                }
                cr_assert_eq(st, GS_OK, "%s: %s", what, gs_last_error());
                cr_assert_eq(gs_array_dtype(r), (int)want_dtype((gs_credop_t)op, d), "%s: dtype %s",
                             what, gs_dtype_name((gs_dtype_t)gs_array_dtype(r)));
                cr_assert_eq(gs_array_ndim(r), keep ? nd : nd - nred, "%s: ndim", what);
                if (keep) {
                    int64_t rs[GS_MAX_NDIM];
                    gs_array_shape(r, rs);
                    for (int ax = 0; ax < nd; ax++)
                        cr_assert_eq(rs[ax], (mask >> ax) & 1 ? 1 : shape[ax], "%s: axis %d",
                                     what, ax);
                }
                int64_t n = ref_reduce((gs_credop_t)op, d, nd, shape, x, mask, p.ddof, want);
                int tol = op == GS_CRED_NANVAR || op == GS_CRED_NANSTD;
                check_under(r, want, n, tol, want_dtype((gs_credop_t)op, d), 0, what);
                check_under(r, want, n, tol, want_dtype((gs_credop_t)op, d), GS_LOWER_DEFAULT,
                            what);
                gs_array_release(r);
            }
        }
        gs_array_release(a);
    }
    free(want);
    free(x);
}

Test(graph_reduce_nan, every_op_and_dtype_over_axes_and_tuples_of_a_matrix)
{
    /* row 1 and column 2 all NaN; row 3 only NaN and -inf (nanargmax must skip the NaN in
     * front); column 6 only NaN and +inf (nanargmin); row 4 has -inf and +inf (nansum NaN) */
    const double N = NAN, I = INFINITY;
    static double v[5 * 7];
    const double rows[5][7] = {
        {1.5, -2, N, 3, 0, 0.25, N},
        {N, N, N, N, N, N, N},
        {0, 0, N, -7.5, 2, 100, I},
        {N, -I, N, -I, N, -I, N},
        {-I, 4, N, 3, -0.5, 6, I},
    };
    memcpy(v, rows, sizeof(rows));
    const int64_t shape[2] = {5, 7}, chunks[2] = {2, 3};
    const int naxes[] = {0, 1, 1, 2, 2};
    const int tuples[][GS_MAX_NDIM] = {{0}, {0}, {-1}, {1, 0}, {0, -1}};
    run_all(2, shape, chunks, v, 5, naxes, tuples);
}

Test(graph_reduce_nan, tuples_of_some_axes_of_a_3d_array_and_zero_slices)
{
    /* 3 x 4 x 5 in chunks 2 x 3 x 2; zeros make any() false and all() false in places */
    enum { S = 3 * 4 * 5 };
    double v[S];
    for (int i = 0; i < S; i++) {
        int m = i % 7;
        v[i] = m == 0 ? NAN : m == 3 ? 0.0 : m == 5 ? -INFINITY : (i % 11) * 0.5 - 2.0;
        if (i >= 20 && i < 25) v[i] = 0.0;   /* one all-zero slice of axis 2 */
    }
    const int64_t shape[3] = {3, 4, 5}, chunks[3] = {2, 3, 2};
    const int naxes[] = {2, 2, 1, 3};
    const int tuples[][GS_MAX_NDIM] = {{0, 2}, {2, 1}, {1}, {2, 0, 1}};
    run_all(3, shape, chunks, v, 4, naxes, tuples);
}

Test(graph_reduce_nan, empty_axes)
{
    /* 3 x 0: over axis 0 every op gives an empty result; over axis 1 and all axes the sums
     * give 0, nanmean NaN, any false, all true, and nanmin/nanmax/nanarg* are errors */
    const double v[1] = {0};
    const int64_t shape[2] = {3, 0}, chunks[2] = {2, 1};
    const int naxes[] = {1, 1, 0};
    const int tuples[][GS_MAX_NDIM] = {{0}, {1}, {0}};
    run_all(2, shape, chunks, v, 3, naxes, tuples);
}

Test(graph_reduce_nan, result_dtypes_follow_numpy)
{
    for (int op = 0; op < GS_CRED_COUNT; op++)
        for (int t = 0; t < NDT; t++) {
            gs_dtype_t r = GS_DTYPE_COUNT;
            OK(gs_dtype_composite_result((gs_credop_t)op, dtypes[t], &r));
            cr_assert_eq(r, want_dtype((gs_credop_t)op, dtypes[t]), "%s of %s",
                         gs_credop_name((gs_credop_t)op), gs_dtype_name(dtypes[t]));
        }
    /* np.prod: int64 for bool and integers, the float for floats */
    for (int t = 0; t < NDT; t++) {
        gs_dtype_t r = GS_DTYPE_COUNT;
        OK(gs_dtype_reduce_result(GS_RED_PROD, dtypes[t], &r));
        cr_assert_eq(r, is_float(dtypes[t]) ? dtypes[t] : GS_DTYPE_INT64, "prod of %s",
                     gs_dtype_name(dtypes[t]));
    }
    cr_assert_str_eq(gs_credop_name(GS_CRED_NANARGMAX), "nanargmax");
    cr_assert_str_eq(gs_credop_name(GS_CRED_COUNT), "unknown");
}

Test(graph_reduce_nan, bad_input_is_rejected_and_outputs_unwritten)
{
    static const double v[24] = {1, 2, NAN, 4};
    gs_array_h h, a, r = (gs_array_h)(uintptr_t)0x1;
    gs_dtype_t dt = GS_DTYPE_COUNT;
    const int64_t shape[3] = {2, 3, 4}, chunks[3] = {1, 2, 3};
    OK(gs_array_from_host(v, 3, shape, chunks, &h));
    OK(gs_array_astype(h, GS_DTYPE_FLOAT32, &a));
    gs_array_release(h);
    const gs_array_h sentinel = r;
#define BAD(call, text)                                                                       \
    do {                                                                                      \
        cr_assert_eq((call), GS_ERR_INVALID_PARAM, "%s", #call);                              \
        cr_assert(strstr(gs_last_error(), (text)) != NULL, "%s: \"%s\" lacks \"%s\"", #call,   \
                  gs_last_error(), (text));                                                   \
        cr_assert_eq(r, sentinel, "%s wrote its output", #call);                              \
    } while (0)
    int ax_out[1] = {3}, ax_rep[2] = {1, -2}, ax_two[2] = {0, 2};
    gs_reduce_params_t ddof = {.field_mask = GS_REDUCE_FIELD_DDOF, .ddof = 1};
    gs_reduce_params_t axis = {.field_mask = GS_REDUCE_FIELD_AXIS, .axis = 1};
    gs_reduce_params_t nanddof = {.field_mask = GS_REDUCE_FIELD_DDOF, .ddof = NAN};
    BAD(gs_array_reduce_composite(GS_CRED_NANSUM, NULL, 0, NULL, 0, NULL, &r), "NULL");
    cr_assert_eq(gs_array_reduce_composite(GS_CRED_NANSUM, a, 0, NULL, 0, NULL, NULL),
                 GS_ERR_INVALID_PARAM);
    BAD(gs_array_reduce_composite(GS_CRED_COUNT, a, 0, NULL, 0, NULL, &r), "unknown");
    BAD(gs_array_reduce_composite((gs_credop_t)-1, a, 0, NULL, 0, NULL, &r), "unknown");
    BAD(gs_array_reduce_composite(GS_CRED_NANMAX, a, 1, ax_out, 0, NULL, &r),
        "nanmax of float32: reduce_axes: axes[0] = 3 out of range for ndim 3");
    BAD(gs_array_reduce_composite(GS_CRED_NANMEAN, a, 2, ax_rep, 1, NULL, &r), "repeated");
    BAD(gs_array_reduce_composite(GS_CRED_ANY, a, 4, ax_two, 0, NULL, &r), "naxes 4");
    BAD(gs_array_reduce_composite(GS_CRED_ALL, a, 1, NULL, 0, NULL, &r), "axes is NULL");
    BAD(gs_array_reduce_composite(GS_CRED_NANARGMAX, a, 2, ax_two, 0, NULL, &r),
        "nanargmax of float32: argmax over 2 of 3 axes");
    BAD(gs_array_reduce_composite(GS_CRED_NANSUM, a, 0, NULL, 0, &ddof, &r),
        "nansum takes no ddof");
    BAD(gs_array_reduce_composite(GS_CRED_NANVAR, a, 0, NULL, 0, &nanddof, &r), "ddof");
    BAD(gs_array_reduce_composite(GS_CRED_COUNT_NONZERO, a, 0, NULL, 0, &axis, &r),
        "GS_REDUCE_FIELD_AXIS");
    /* an int32 array: the plain reductions' errors also name the op and dtype */
    OK(gs_array_astype(a, GS_DTYPE_INT32, &h));
    BAD(gs_array_reduce_composite(GS_CRED_NANARGMIN, h, 2, ax_two, 1, NULL, &r),
        "nanargmin of int32: argmin over 2 of 3 axes");
    gs_array_release(h);
    cr_assert_eq(gs_dtype_composite_result(GS_CRED_COUNT, GS_DTYPE_INT32, &dt),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_dtype_composite_result(GS_CRED_NANSUM, GS_DTYPE_COUNT, &dt),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "unknown dtype") != NULL, "%s", gs_last_error());
    cr_assert_eq(dt, GS_DTYPE_COUNT, "the dtype was written on error");
#undef BAD
    gs_array_release(a);
}

Test(graph_reduce_nan, nanargmax_of_a_nan_before_the_only_minus_infinity_values)
{
    /* NumPy: np.nanargmax([nan, -inf, -inf]) == 1, np.nanargmin([nan, nan, inf]) == 2; an
     * all-NaN row gives -1 here (NumPy raises ValueError) */
    const double x[9] = {NAN, -INFINITY, -INFINITY, NAN, NAN, INFINITY, NAN, NAN, NAN};
    const int64_t shape[2] = {3, 3}, chunks[2] = {2, 2};
    const int ax[1] = {1};
    gs_array_h h, r;
    OK(gs_array_from_host(x, 2, shape, chunks, &h));
    OK(gs_array_reduce_composite(GS_CRED_NANARGMAX, h, 1, ax, 0, NULL, &r));
    check(r, (const double[]){1, 2, -1}, 3, "nanargmax");
    gs_array_release(r);
    OK(gs_array_reduce_composite(GS_CRED_NANARGMIN, h, 1, ax, 0, NULL, &r));
    check(r, (const double[]){1, 2, -1}, 3, "nanargmin");
    gs_array_release(r);
    OK(gs_array_reduce_composite(GS_CRED_NANARGMAX, h, 0, NULL, 0, NULL, &r));
    check(r, (const double[]){5}, 1, "nanargmax of every axis: the flat index");
    gs_array_release(r);
    gs_array_release(h);
}

Test(graph_reduce_nan, plain_sums_of_empty_regions_of_every_dtype)
{
    /* 3 x 0 in chunks of 2 x 1: two empty blocks, whose chunk leaves the kernel must not read
     * (they became index leaves that kept the chunk's dtype, which the kernel refused) */
    const double v[1] = {0}, zeros[3] = {0, 0, 0};
    const int64_t shape[2] = {3, 0}, chunks[2] = {2, 1};
    gs_array_h h, a, r;
    int ax0[1] = {0}, ax1[1] = {1};
    OK(gs_array_from_host(v, 2, shape, chunks, &h));
    for (int d = 0; d < NDT; d++) {
        OK(gs_array_astype(h, dtypes[d], &a));
        OK(gs_array_reduce_axes(GS_RED_SUM, a, 1, ax0, 0, NULL, &r));
        check(r, zeros, 0, gs_dtype_name(dtypes[d]));
        gs_array_release(r);
        OK(gs_array_reduce_axes(GS_RED_SUM, a, 1, ax1, 0, NULL, &r));
        check(r, zeros, 3, gs_dtype_name(dtypes[d]));
        gs_array_release(r);
        gs_array_release(a);
    }
    gs_array_release(h);
}
