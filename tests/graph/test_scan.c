/* Cumulative sums and products (gs_array_cumulative; graph/lower_scan.c): every dtype x {sum,
 * prod} x axis against a plain-C reference (NumPy's definition written as a loop along the
 * axis), on chunkings that do not divide the shapes, one chunk and many chunks along the axis,
 * negative axes, NaN and inf, integer wrap-around, empty and 0-d arrays, results read through
 * slices (culled carries) and scans of expressions. Each expression is lowered under every
 * combination of lowering flags, every layer round-tripped through the codec, and run by the
 * serial evaluator on the CPU backend (and on CUDA in the *_on_cuda tests, which skip without a
 * device). Bad input returns GS_ERR_INVALID_PARAM naming the problem, output unwritten. */
#include "graph_eval_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/error.h"
#include "graph/graph_internal.h"   /* a layer's fields, to break them */

#include <gsched/array.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GS_HAVE_CUDA
#include "chunkops/cuda/cuda_backend.h"
#endif

#define OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s: %s", #call, gs_last_error()); } while (0)

/* the backend every check() evaluates on: the CPU's, or CUDA's in the *_on_cuda tests */
static const gs_chunkops_ops_t *be = &gs_chunkops_cpu_ops;
static gs_chunkops_ctx_h ctx;

static void setup(void)
{
    ctx = gx_ctx_create();
}

static void teardown(void)
{
    be->ctx_destroy(ctx);
}

TestSuite(graph_scan, .init = setup, .fini = teardown, .timeout = 240);

static const gs_dtype_t dtypes[] = {GS_DTYPE_FLOAT64, GS_DTYPE_FLOAT32, GS_DTYPE_FLOAT16,
                                    GS_DTYPE_INT32,   GS_DTYPE_INT64,   GS_DTYPE_UINT8,
                                    GS_DTYPE_BOOL};
enum { NDT = sizeof(dtypes) / sizeof(dtypes[0]) };

static int is_float(gs_dtype_t d)
{
    return d == GS_DTYPE_FLOAT64 || d == GS_DTYPE_FLOAT32 || d == GS_DTYPE_FLOAT16;
}

/* ---- the reference ---- */

/* The test pattern at flat index i for dtype d and op: sums take small halves (exact in every
 * float dtype for these sizes), products powers of two and signs (exact until they overflow);
 * integer dtypes take the integer part, bool != 0. */
static double pat(gs_dtype_t d, gs_scan_op_t op, int64_t i)
{
    static const double pv[] = {1.0, -2.0, 0.5, 1.0, 2.0, -0.5, 1.0, 2.0, -1.0, 0.5, 2.0};
    double v = op == GS_SCAN_SUM ? (double)((i * 7) % 23) * 0.5 - 5.5 : pv[i % 11];
    if (d == GS_DTYPE_BOOL) return (i % 5) != 0 ? 1.0 : 0.0;
    if (d == GS_DTYPE_UINT8) return (double)((i * 37) % 251);
    if (!is_float(d)) return op == GS_SCAN_SUM ? (double)((i * 7) % 23) - 11.0 : (pv[i % 11] == 0.5 ? 3.0 : pv[i % 11]);
    return v;
}

/* acc OP x in result dtype @a r, with the compiler's own arithmetic (not the library's). */
static double ref_step(gs_dtype_t r, gs_scan_op_t op, double acc, double x)
{
    switch (r) {
    case GS_DTYPE_FLOAT32: {
        float a = (float)acc, b = (float)x;
        float c = op == GS_SCAN_SUM ? a + b : a * b;
        return (double)c;
    }
    case GS_DTYPE_FLOAT16: {
        float a = (float)(_Float16)acc, b = (float)(_Float16)x;
        _Float16 c = (_Float16)(op == GS_SCAN_SUM ? a + b : a * b);
        return (double)c;
    }
    case GS_DTYPE_INT64: {
        uint64_t a = (uint64_t)(int64_t)acc, b = (uint64_t)(int64_t)x;
        return (double)(int64_t)(op == GS_SCAN_SUM ? a + b : a * b);
    }
    case GS_DTYPE_INT32: {
        uint32_t a = (uint32_t)(int32_t)(int64_t)acc, b = (uint32_t)(int32_t)(int64_t)x;
        return (double)(int32_t)(op == GS_SCAN_SUM ? a + b : a * b);
    }
    case GS_DTYPE_UINT8: {
        unsigned a = (unsigned)(int64_t)acc & 0xffu, b = (unsigned)(int64_t)x & 0xffu;
        return (double)((op == GS_SCAN_SUM ? a + b : a * b) & 0xffu);
    }
    case GS_DTYPE_BOOL:
        return op == GS_SCAN_SUM ? (double)(acc != 0 || x != 0) : (double)(acc != 0 && x != 0);
    default:
        return op == GS_SCAN_SUM ? acc + x : acc * x;
    }
}

/* Value @a v (of the input's dtype) as dtype @a r (astype). */
static double ref_cast(gs_dtype_t r, double v)
{
    switch (r) {
    case GS_DTYPE_FLOAT32: return (double)(float)v;
    case GS_DTYPE_FLOAT16: return (double)(_Float16)v;
    case GS_DTYPE_BOOL: return v != 0;
    case GS_DTYPE_INT32: return (double)(int32_t)(int64_t)v;
    case GS_DTYPE_UINT8: return (double)((int64_t)v & 0xff);
    case GS_DTYPE_INT64: return (double)(int64_t)v;
    default: return v;
    }
}

/* want[] = the scan of v[] (shape nd/shape, values of the input) along axis in dtype r. */
static void ref_scan(gs_dtype_t r, gs_scan_op_t op, int nd, const int64_t *shape, int axis,
                     const double *v, double *want)
{
    int64_t outer = 1, inner = 1, n = shape[axis];
    for (int j = 0; j < axis; j++) outer *= shape[j];
    for (int j = axis + 1; j < nd; j++) inner *= shape[j];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            double acc = op == GS_SCAN_PROD ? 1.0 : 0.0;
            for (int64_t i = 0; i < n; i++) {
                const int64_t p = (o * n + i) * inner + j;
                acc = ref_step(r, op, acc, ref_cast(r, v[p]));
                want[p] = acc;
            }
        }
}

/* ---- evaluation ---- */

/* @a v as an array of dtype @a d, chunked by @a chunks. */
static gs_array_h typed(gs_dtype_t d, int nd, const int64_t *shape, const int64_t *chunks,
                        const double *v)
{
    gs_array_h x, y;
    OK(gs_array_from_host(v, nd, shape, chunks, &x));
    if (d == GS_DTYPE_FLOAT64) return x;
    OK(gs_array_astype(x, d, &y));
    gs_array_release(x);
    return y;
}

static int same(double got, double want)
{
    if (isnan(want)) return isnan(got);
    return got == want;
}

/* Evaluate @a h under lowering @a flags (layers through the codec), widened to doubles. */
static double *eval(gs_array_h h, unsigned flags)
{
    const int64_t size = gs_array_size(h);
    const gs_dtype_t dt = (gs_dtype_t)gs_array_dtype(h);
    const size_t es = gs_dtype_size(dt);
    double *out = calloc((size_t)(size ? size : 1), sizeof(double));
    gs_taskgraph_t *tg = gx_lower(h, flags);
    cr_assert_not_null(out);
    cr_assert_eq(tg->out_dtype, (int32_t)dt);
    gs_status_t st = gs_chunkops_eval(be, ctx, tg, out, (size_t)size);
    cr_assert_eq(st, GS_OK, "evaluation on %s, flags 0x%x: %s", be->name, flags, gs_last_error());
    gs_taskgraph_free(tg);
    for (int64_t i = size - 1; i >= 0; i--)
        out[i] = gs_dtype_to_double(dt, (const char *)out + (size_t)i * es);
    return out;
}

/* @a h has dtype @a dt and values want[0..n) under every lowering. */
static void check(gs_array_h h, gs_dtype_t dt, const double *want, int64_t n, const char *what)
{
    cr_assert_eq(gs_array_size(h), n, "%s: size %lld, want %lld", what,
                 (long long)gs_array_size(h), (long long)n);
    cr_assert_eq(gs_array_dtype(h), (int)dt, "%s: dtype %s, want %s", what,
                 gs_dtype_name((gs_dtype_t)gs_array_dtype(h)), gs_dtype_name(dt));
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        double *got = eval(h, f);
        for (int64_t i = 0; i < n; i++)
            cr_assert(same(got[i], want[i]), "%s, %s, flags 0x%x: element %lld is %.17g, want "
                      "%.17g", what, be->name, f, (long long)i, got[i], want[i]);
        free(got);
    }
}

/* cumulative @a op of the pattern array (dtype d, shape, chunks) along @a axis (may be
 * negative), asked as @a asked, against the reference. */
static void check_scan(gs_dtype_t d, gs_scan_op_t op, int nd, const int64_t *shape,
                       const int64_t *chunks, int axis, gs_dtype_t asked)
{
    char what[200];
    int64_t size = 1;
    gs_dtype_t r;
    for (int a = 0; a < nd; a++) size *= shape[a];
    double *v = malloc((size_t)(size ? size : 1) * sizeof(double));
    double *want = malloc((size_t)(size ? size : 1) * sizeof(double));
    cr_assert(v != NULL && want != NULL);
    for (int64_t i = 0; i < size; i++) v[i] = ref_cast(d, pat(d, op, i));
    OK(gs_dtype_scan_result(op, d, asked, &r));
    ref_scan(r, op, nd, shape, axis < 0 ? axis + nd : axis, v, want);
    gs_array_h x = typed(d, nd, shape, chunks, v), y;
    OK(gs_array_cumulative(x, op, axis, asked, &y));
    snprintf(what, sizeof(what), "%s of %s (%d-D, axis %d, chunk %lld) as %s",
             op == GS_SCAN_SUM ? "cumsum" : "cumprod", gs_dtype_name(d), nd, axis,
             (long long)chunks[0], gs_dtype_name(r));
    check(y, r, want, size, what);
    gs_array_release(y);
    gs_array_release(x);
    free(v);
    free(want);
}

/* ---- the tests (bodies shared with the CUDA variants) ---- */

static void body_every_dtype_op_and_axis(void)
{
    const int64_t s1[1] = {40}, c1[1] = {3};
    const int64_t s2[2] = {7, 9}, c2[2] = {3, 4};
    const int64_t s3[3] = {4, 5, 6}, c3[3] = {3, 2, 4};
    for (int di = 0; di < NDT; di++)
        for (int op = 0; op < GS_SCAN_OP_COUNT; op++) {
            check_scan(dtypes[di], (gs_scan_op_t)op, 1, s1, c1, 0, GS_DTYPE_AUTO);
            for (int ax = 0; ax < 2; ax++)
                check_scan(dtypes[di], (gs_scan_op_t)op, 2, s2, c2, ax, GS_DTYPE_AUTO);
            for (int ax = -3; ax < 3; ax++)
                check_scan(dtypes[di], (gs_scan_op_t)op, 3, s3, c3, ax, GS_DTYPE_AUTO);
        }
}

static void body_single_chunk_and_many_chunks_along_the_axis(void)
{
    const int64_t s[2] = {30, 5}, one[2] = {30, 5}, many[2] = {1, 2};
    for (int op = 0; op < GS_SCAN_OP_COUNT; op++) {
        check_scan(GS_DTYPE_FLOAT64, (gs_scan_op_t)op, 2, s, one, 0, GS_DTYPE_AUTO);
        check_scan(GS_DTYPE_FLOAT64, (gs_scan_op_t)op, 2, s, many, 0, GS_DTYPE_AUTO);
        check_scan(GS_DTYPE_INT32, (gs_scan_op_t)op, 2, s, many, -2, GS_DTYPE_AUTO);
        check_scan(GS_DTYPE_FLOAT32, (gs_scan_op_t)op, 2, s, many, 1, GS_DTYPE_AUTO);
    }
}

static void body_explicit_dtypes(void)
{
    const int64_t s[2] = {6, 11}, c[2] = {4, 3};
    for (int di = 0; di < NDT; di++)
        for (int ri = 0; ri < NDT; ri++) {
            check_scan(dtypes[di], GS_SCAN_SUM, 2, s, c, 1, dtypes[ri]);
            check_scan(dtypes[di], GS_SCAN_PROD, 2, s, c, 0, dtypes[ri]);
        }
}

static void body_nan_and_inf_propagate(void)
{
    const double v[10] = {1.0, NAN, 2.0, 3.0, INFINITY, 1.0, -INFINITY, 2.0, 0.0, 5.0};
    const int64_t s[1] = {10}, c[1] = {3};
    const gs_dtype_t fl[3] = {GS_DTYPE_FLOAT64, GS_DTYPE_FLOAT32, GS_DTYPE_FLOAT16};
    for (int di = 0; di < 3; di++)
        for (int op = 0; op < GS_SCAN_OP_COUNT; op++) {
            double want[10];
            /* the NaN at 1 poisons everything after it */
            ref_scan(fl[di], (gs_scan_op_t)op, 1, s, 0, v, want);
            for (int i = 1; i < 10; i++) cr_assert(isnan(want[i]));
            gs_array_h x = typed(fl[di], 1, s, c, v), y;
            OK(gs_array_cumulative(x, (gs_scan_op_t)op, 0, GS_DTYPE_AUTO, &y));
            check(y, fl[di], want, 10, "nan");
            gs_array_release(y);
            gs_array_release(x);
        }
    /* inf without NaN: inf, then inf - inf = NaN for the sum; 0 * inf = NaN for the product */
    const double w[6] = {1.0, INFINITY, 2.0, -INFINITY, 3.0, 0.0};
    const int64_t s6[1] = {6}, c2[1] = {2};
    for (int op = 0; op < GS_SCAN_OP_COUNT; op++) {
        double want[6];
        ref_scan(GS_DTYPE_FLOAT64, (gs_scan_op_t)op, 1, s6, 0, w, want);
        cr_assert(isinf(want[1]) && isnan(want[3]) == (op == GS_SCAN_SUM));
        gs_array_h x = typed(GS_DTYPE_FLOAT64, 1, s6, c2, w), y;
        OK(gs_array_cumulative(x, (gs_scan_op_t)op, 0, GS_DTYPE_AUTO, &y));
        check(y, GS_DTYPE_FLOAT64, want, 6, "inf");
        gs_array_release(y);
        gs_array_release(x);
    }
}

static void body_integers_wrap(void)
{
    /* int32 sums asked as int32 wrap at 2^31; int64 products of 1024 wrap to 0 at 2^70 */
    const double big[6] = {2e9, 2e9, 2e9, -2e9, 1.0, 7.0};
    const int64_t s6[1] = {6}, c2[1] = {2};
    double want[9];
    ref_scan(GS_DTYPE_INT32, GS_SCAN_SUM, 1, s6, 0, big, want);
    cr_assert(want[1] < 0, "the reference wraps");
    gs_array_h x = typed(GS_DTYPE_INT32, 1, s6, c2, big), y;
    OK(gs_array_cumulative(x, GS_SCAN_SUM, 0, GS_DTYPE_INT32, &y));
    check(y, GS_DTYPE_INT32, want, 6, "int32 wrap");
    gs_array_release(y);
    /* the default (int64) does not wrap there */
    ref_scan(GS_DTYPE_INT64, GS_SCAN_SUM, 1, s6, 0, big, want);
    cr_assert_eq(want[2], 6e9);
    OK(gs_array_cumsum(x, 0, &y));
    check(y, GS_DTYPE_INT64, want, 6, "int32 -> int64");
    gs_array_release(y);
    gs_array_release(x);

    double k[9];
    const int64_t s9[1] = {9}, c4[1] = {4};
    for (int i = 0; i < 9; i++) k[i] = 1024.0;
    ref_scan(GS_DTYPE_INT64, GS_SCAN_PROD, 1, s9, 0, k, want);
    cr_assert(want[6] == 0 && want[5] == 1152921504606846976.0, "the reference wraps");
    x = typed(GS_DTYPE_INT64, 1, s9, c4, k);
    OK(gs_array_cumprod(x, 0, &y));
    check(y, GS_DTYPE_INT64, want, 9, "int64 product wrap");
    gs_array_release(y);
    gs_array_release(x);
    /* uint8 asked as uint8 wraps at 256 */
    const int64_t s2[2] = {5, 8}, c[2] = {2, 3};
    check_scan(GS_DTYPE_UINT8, GS_SCAN_SUM, 2, s2, c, 1, GS_DTYPE_UINT8);
}

static void body_empty_and_zero_d(void)
{
    const int64_t e1[2] = {0, 5}, e2[2] = {3, 0}, c[2] = {2, 2};
    for (int op = 0; op < GS_SCAN_OP_COUNT; op++)
        for (int ax = 0; ax < 2; ax++) {
            check_scan(GS_DTYPE_FLOAT64, (gs_scan_op_t)op, 2, e1, c, ax, GS_DTYPE_AUTO);
            check_scan(GS_DTYPE_INT32, (gs_scan_op_t)op, 2, e2, c, ax, GS_DTYPE_AUTO);
        }
    /* 0-d: the 1-d array of its element (NumPy with an axis) */
    const double v[2] = {2.5, 1.0};
    const int64_t s[1] = {2}, c1[1] = {1};
    gs_array_h x, z, y;
    OK(gs_array_from_host(v, 1, s, c1, &x));
    OK(gs_array_reduce(GS_RED_SUM, x, NULL, &z));
    cr_assert_eq(gs_array_ndim(z), 0);
    for (int ax = -1; ax <= 0; ax++) {
        const double want[1] = {3.5};
        int64_t shape[1];
        OK(gs_array_cumulative(z, GS_SCAN_PROD, ax, GS_DTYPE_AUTO, &y));
        cr_assert_eq(gs_array_ndim(y), 1);
        gs_array_shape(y, shape);
        cr_assert_eq(shape[0], 1);
        check(y, GS_DTYPE_FLOAT64, want, 1, "0-d");
        gs_array_release(y);
    }
    gs_array_release(z);
    gs_array_release(x);
}

static void body_slices_of_scans_and_scans_of_expressions(void)
{
    /* y = cumsum(2 x + 1, axis 0)[7:, ::2]: the slice needs only the later chunks' scans,
     * which still need every carry before them (culling keeps the chain) */
    const int64_t s[2] = {20, 6}, c[2] = {3, 4};
    double v[120], e[120], want[120];
    for (int i = 0; i < 120; i++) {
        v[i] = pat(GS_DTYPE_FLOAT64, GS_SCAN_SUM, i);
        e[i] = 2.0 * v[i] + 1.0;
    }
    ref_scan(GS_DTYPE_FLOAT64, GS_SCAN_SUM, 2, s, 0, e, want);
    gs_array_h x = typed(GS_DTYPE_FLOAT64, 2, s, c, v), t1, t2, y, z;
    OK(gs_array_binary_array_scalar(GS_BINARY_MUL, x, 2.0, &t1));
    OK(gs_array_binary_array_scalar(GS_BINARY_ADD, t1, 1.0, &t2));
    OK(gs_array_cumsum(t2, 0, &y));
    const gs_slice_t sl[2] = {GS_SLICE_FROM(7, 1), GS_SLICE_STEP(2)};
    OK(gs_array_slice(y, 2, sl, &z));
    double ws[13 * 3];
    for (int i = 7, k = 0; i < 20; i++)
        for (int j = 0; j < 6; j += 2) ws[k++] = want[i * 6 + j];
    check(z, GS_DTYPE_FLOAT64, ws, 39, "slice of a scan");
    /* and a scan of a scan */
    gs_array_h yy;
    double want2[120];
    ref_scan(GS_DTYPE_FLOAT64, GS_SCAN_SUM, 2, s, 1, want, want2);
    OK(gs_array_cumsum(y, -1, &yy));
    check(yy, GS_DTYPE_FLOAT64, want2, 120, "scan of a scan");
    gs_array_release(yy);
    gs_array_release(z);
    gs_array_release(y);
    gs_array_release(t2);
    gs_array_release(t1);
    gs_array_release(x);
}

Test(graph_scan, every_dtype_op_and_axis_matches_the_reference)
{
    body_every_dtype_op_and_axis();
}

Test(graph_scan, one_chunk_and_many_chunks_along_the_axis)
{
    body_single_chunk_and_many_chunks_along_the_axis();
}

Test(graph_scan, explicit_result_dtypes_convert_then_accumulate)
{
    body_explicit_dtypes();
}

Test(graph_scan, nan_and_inf_propagate)
{
    body_nan_and_inf_propagate();
}

Test(graph_scan, integers_wrap_like_numpy)
{
    body_integers_wrap();
}

Test(graph_scan, empty_and_zero_d_arrays)
{
    body_empty_and_zero_d();
}

Test(graph_scan, slices_of_scans_and_scans_of_expressions)
{
    body_slices_of_scans_and_scans_of_expressions();
}

Test(graph_scan, default_result_dtypes_are_numpys)
{
    static const gs_dtype_t want[GS_DTYPE_COUNT] = {
        [GS_DTYPE_FLOAT64] = GS_DTYPE_FLOAT64, [GS_DTYPE_FLOAT32] = GS_DTYPE_FLOAT32,
        [GS_DTYPE_FLOAT16] = GS_DTYPE_FLOAT16, [GS_DTYPE_INT32] = GS_DTYPE_INT64,
        [GS_DTYPE_INT64] = GS_DTYPE_INT64,     [GS_DTYPE_UINT8] = GS_DTYPE_INT64,
        [GS_DTYPE_BOOL] = GS_DTYPE_INT64};
    for (int op = 0; op < GS_SCAN_OP_COUNT; op++)
        for (int d = 0; d < GS_DTYPE_COUNT; d++) {
            gs_dtype_t r = (gs_dtype_t)99;
            OK(gs_dtype_scan_result((gs_scan_op_t)op, (gs_dtype_t)d, GS_DTYPE_AUTO, &r));
            cr_assert_eq(r, want[d], "%s", gs_dtype_name((gs_dtype_t)d));
            OK(gs_dtype_scan_result((gs_scan_op_t)op, (gs_dtype_t)d, GS_DTYPE_FLOAT32, &r));
            cr_assert_eq(r, GS_DTYPE_FLOAT32);
        }
}

Test(graph_scan, bad_input_is_rejected_and_leaves_the_output_unwritten)
{
    const double v[6] = {1, 2, 3, 4, 5, 6};
    const int64_t s[2] = {2, 3}, c[2] = {1, 2};
    gs_array_h x, y;
    OK(gs_array_from_host(v, 2, s, c, &x));
    GX_EXPECT_INVALID(gs_array_cumulative(x, GS_SCAN_SUM, 2, GS_DTYPE_AUTO, &y), y, "axis 2");
    GX_EXPECT_INVALID(gs_array_cumulative(x, GS_SCAN_SUM, -3, GS_DTYPE_AUTO, &y), y, "axis -3");
    GX_EXPECT_INVALID(gs_array_cumprod(x, 5, &y), y, "2 dimensions");
    GX_EXPECT_INVALID(gs_array_cumulative(x, GS_SCAN_SUM, 0, (gs_dtype_t)42, &y), y, "dtype 42");
    GX_EXPECT_INVALID(gs_array_cumulative(x, (gs_scan_op_t)7, 0, GS_DTYPE_AUTO, &y), y,
                   "operation 7");
    GX_EXPECT_INVALID(gs_array_cumulative(NULL, GS_SCAN_SUM, 0, GS_DTYPE_AUTO, &y), y, "NULL");
    cr_assert_eq(gs_array_cumsum(x, 0, NULL), GS_ERR_INVALID_PARAM);
    gs_dtype_t r = (gs_dtype_t)77;
    cr_assert_eq(gs_dtype_scan_result(GS_SCAN_SUM, (gs_dtype_t)9, GS_DTYPE_AUTO, &r),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(r, (gs_dtype_t)77);
    /* 0-d: only axis 0 or -1 */
    gs_array_h z;
    OK(gs_array_reduce(GS_RED_SUM, x, NULL, &z));
    GX_EXPECT_INVALID(gs_array_cumsum(z, 1, &y), y, "0 dimensions");
    gs_array_release(z);
    gs_array_release(x);
}

/* x = 0, 1, 2, ... (an s[0] x s[1] float64 array from the host) in @a c chunks, *y_p its cumsum
 * or cumprod (@a op) along @a axis; returns y lowered (gx_lower, GS_LOWER_DEFAULT). */
static gs_taskgraph_t *lower_ramp_scan(const int64_t *s, const int64_t *c, gs_scan_op_t op, int axis,
                                       gs_array_h *x_p, gs_array_h *y_p)
{
    const int64_t n = s[0] * s[1];
    double *v = malloc(sizeof(double) * (size_t)n);
    cr_assert_not_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = (double)i;
    OK(gs_array_from_host(v, 2, s, c, x_p));
    free(v);
    OK(op == GS_SCAN_PROD ? gs_array_cumprod(*x_p, axis, y_p) : gs_array_cumsum(*x_p, axis, y_p));
    return gx_lower(*y_p, GS_LOWER_DEFAULT);
}

Test(graph_scan, lowers_to_totals_carries_and_scans)
{
    /* 3 x 4 chunks, scanned along axis 1: 3 x 3 totals, 3 x 3 carries (a chain along the axis),
     * 12 scans; along axis 0 of one chunk row: the scans only */
    const int64_t s[2] = {12, 10}, c[2] = {4, 3};
    gs_array_h x, y;
    gs_taskgraph_t *tg = lower_ramp_scan(s, c, GS_SCAN_SUM, 1, &x, &y);
    int nscan = 0;
    uint64_t per[3] = {0, 0, 0};
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        const char *nm = gs_layer_name(tg->layers[i]);
        if (strcmp(nm, "cumsum-total") == 0) per[0] = gs_layer_nblocks(tg->layers[i]);
        if (strcmp(nm, "cumsum-carry") == 0) per[1] = gs_layer_nblocks(tg->layers[i]);
        if (strcmp(nm, "cumsum") == 0) per[2] = gs_layer_nblocks(tg->layers[i]), nscan++;
    }
    cr_assert_eq(nscan, 1);
    cr_assert(per[0] == 9 && per[1] == 9 && per[2] == 12, "%llu totals, %llu carries, %llu scans",
              (unsigned long long)per[0], (unsigned long long)per[1], (unsigned long long)per[2]);
    gs_taskgraph_free(tg);
    gs_array_release(y);
    const int64_t c1[2] = {12, 3};
    gs_array_release(x);
    tg = lower_ramp_scan(s, c1, GS_SCAN_PROD, 0, &x, &y);
    for (uint32_t i = 0; i < tg->nlayers; i++)
        cr_assert(strstr(gs_layer_name(tg->layers[i]), "-") == NULL, "layer %s",
                  gs_layer_name(tg->layers[i]));
    gs_taskgraph_free(tg);
    gs_array_release(y);
    gs_array_release(x);
}

#ifdef GS_HAVE_CUDA
Test(graph_scan, every_case_on_cuda)
{
    gx_cuda_begin(&be, &ctx);
    body_every_dtype_op_and_axis();
    body_single_chunk_and_many_chunks_along_the_axis();
    body_explicit_dtypes();
    body_nan_and_inf_propagate();
    body_integers_wrap();
    body_empty_and_zero_d();
    body_slices_of_scans_and_scans_of_expressions();
    gx_cuda_end(&be, &ctx);
}
#endif

Test(graph_scan, layers_refuse_bad_inputs_and_bad_wire_bodies)
{
    /* a carry block past the first reads two slabs: one input, or a slab of the wrong size,
     * is refused before anything is read; a SCAN layer whose axis or grid does not match its
     * source does not decode */
    const int64_t s[2] = {8, 6}, c[2] = {3, 2};
    gs_array_h x, y;
    gs_taskgraph_t *tg = lower_ramp_scan(s, c, GS_SCAN_SUM, 0, &x, &y);
    gs_layer_t *carry = NULL;
    for (uint32_t i = 0; i < tg->nlayers; i++)
        if (strcmp(gs_layer_name(tg->layers[i]), "cumsum-carry") == 0) carry = tg->layers[i];
    cr_assert_not_null(carry);
    /* block (1, 0): the running total of rows 0..5 of columns 0..1, from carry (0, 0) and the
     * total of chunk (1, 0) */
    const uint64_t b = 3;   /* 2 x 3 blocks: coordinates (1, 0) */
    cr_assert_eq(gs_layer_ninputs(carry, b), 2);
    cr_assert_eq(gs_layer_ninputs(carry, 0), 1);
    double a[2] = {1, 2}, t[2] = {3, 4}, out[2];
    gs_chunk_ref_t in[2] = {{a, 2, 16}, {t, 2, 16}};
    gs_ktask_t kt;
    OK(gs_layer_instantiate(carry, b, 2, in, out, &kt));
    cr_assert_eq(kt.kind, GS_KTASK_SCAN);
    OK(gs_chunkops_run_ktask(&gs_chunkops_cpu_ops, ctx, NULL, &kt));
    cr_assert(out[0] == 4 && out[1] == 6, "carry %g %g", out[0], out[1]);
    cr_assert_eq(gs_layer_instantiate(carry, b, 1, in, out, &kt), GS_ERR_INVALID_PARAM);
    in[1].nbytes = 8;
    in[1].len = 1;
    cr_assert_eq(gs_layer_instantiate(carry, b, 2, in, out, &kt), GS_ERR_INVALID_PARAM);
    in[1].nbytes = 16;
    in[1].len = 3;   /* len must be bytes / 8 */
    cr_assert_eq(gs_layer_instantiate(carry, b, 2, in, out, &kt), GS_ERR_INVALID_PARAM);
    /* bad bodies: an axis outside the grid, a dtype outside the table */
    for (int k = 0; k < 2; k++) {
        gs_buf_t buf;
        gs_layer_t *dec = NULL;
        const int32_t axis = carry->u.sc.axis, dt = carry->u.sc.out_dtype;
        if (k == 0) carry->u.sc.axis = 2;
        else carry->u.sc.in_dtype = carry->u.sc.out_dtype = 42;
        gs_buf_init(&buf);
        OK(gs_layer_encode(carry, &buf));
        cr_assert_eq(gs_layer_decode(buf.data, buf.len, &dec), GS_ERR_PROTO);
        cr_assert(strstr(gs_last_error(), "scan") != NULL, "%s", gs_last_error());
        gs_buf_cleanup(&buf);
        carry->u.sc.axis = axis;
        carry->u.sc.in_dtype = carry->u.sc.out_dtype = dt;
    }
    gs_taskgraph_free(tg);
    gs_array_release(y);
    gs_array_release(x);
}

Test(graph_scan, the_cpu_kernel_rejects_a_malformed_spec)
{
    double in[4] = {1, 2, 3, 4}, out[4];
    gs_kscan_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = k.shape[1] = 2;
    k.in = in;
    k.in_len = 4;
    k.out = out;
    k.axis = 2;
    cr_assert_eq(gs_chunkops_cpu_ops.scan(ctx, NULL, &k), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "axis 2") != NULL, "%s", gs_last_error());
    k.axis = 1;
    k.in_len = 5;
    cr_assert_eq(gs_chunkops_cpu_ops.scan(ctx, NULL, &k), GS_ERR_INVALID_PARAM);
    k.in_len = 4;
    k.out_dtype = 17;
    cr_assert_eq(gs_chunkops_cpu_ops.scan(ctx, NULL, &k), GS_ERR_INVALID_PARAM);
    k.out_dtype = GS_DTYPE_FLOAT64;
    k.op = 3;
    cr_assert_eq(gs_chunkops_cpu_ops.scan(ctx, NULL, &k), GS_ERR_INVALID_PARAM);
    k.op = GS_SCAN_PROD;
    OK(gs_chunkops_cpu_ops.scan(ctx, NULL, &k));
    cr_assert(out[0] == 1 && out[1] == 2 && out[2] == 3 && out[3] == 12, "%g %g %g %g", out[0],
              out[1], out[2], out[3]);
}
