/* Dtypes end to end: arrays of every dtype built with astype/full_dtype, elementwise ops,
 * comparisons and reductions lowered under every combination of lowering flags, every layer
 * round-tripped through the codec, run by the CPU backend's serial evaluator and compared with
 * plain-C references (NumPy semantics: integer wrap, floor division and mod signs, float32 and
 * float16 rounding of every result, bool from comparisons, int64 from sums and argmax). */
#include "dtype_eval_util.h"
#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"
#include "common/error.h"
#include "graph/taskgraph.h"

#include <criterion/criterion.h>
#include <gsched/array.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(graph_dtype_eval, .init = setup, .fini = teardown, .timeout = 120);

static const gs_dtype_t all_dtypes[] = {GS_DTYPE_FLOAT64, GS_DTYPE_FLOAT32, GS_DTYPE_FLOAT16,
                                        GS_DTYPE_INT32,   GS_DTYPE_INT64,   GS_DTYPE_UINT8,
                                        GS_DTYPE_BOOL};
enum { NDT = sizeof(all_dtypes) / sizeof(all_dtypes[0]) };

/* ---- plain-C reference semantics ---- */

static int64_t ref_wrap(gs_dtype_t d, int64_t v)
{
    switch (d) {
    case GS_DTYPE_INT32: return (int32_t)(uint32_t)(uint64_t)v;
    case GS_DTYPE_UINT8: return (uint8_t)(uint64_t)v;
    case GS_DTYPE_BOOL: return v != 0;
    default: return v;
    }
}

/* NumPy astype of a double to dtype d, as a double (integers stay exact below 2^53). */
static double ref_cast(gs_dtype_t d, double x)
{
    if (is_float(d)) return ref_round(d, x);
    if (d == GS_DTYPE_BOOL) return x != 0;
    return (double)ref_wrap(d, (int64_t)x);
}

static int64_t ref_floordiv(int64_t x, int64_t y)
{
    if (y == 0) return 0;
    int64_t q = x / y;
    if (x % y != 0 && ((x < 0) != (y < 0))) q--;
    return q;
}

static int64_t ref_mod(int64_t x, int64_t y)
{
    if (y == 0) return 0;
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}

/* a OP b for operands already of dtype d (compute dtype d), result as a double. */
static double ref_binary(gs_binop_t op, gs_dtype_t d, double a, double b)
{
    if (is_float(d)) {
        double r;
        switch (op) {
        case GS_BINARY_ADD: r = a + b; break;
        case GS_BINARY_SUB: r = a - b; break;
        case GS_BINARY_MUL: r = a * b; break;
        case GS_BINARY_DIV: r = a / b; break;
        case GS_BINARY_MAXIMUM: r = (a > b || isnan(a)) ? a : b; break;
        case GS_BINARY_MINIMUM: r = (a < b || isnan(a)) ? a : b; break;
        case GS_BINARY_LT: return a < b;
        case GS_BINARY_EQ: return a == b;
        case GS_BINARY_NE: return a != b;
        case GS_BINARY_GE: return a >= b;
        case GS_BINARY_LOGICAL_AND: return (a != 0) && (b != 0);
        case GS_BINARY_LOGICAL_XOR: return (a != 0) != (b != 0);
        default: cr_assert_fail("op %d not in the reference", (int)op); return 0;
        }
        return ref_round(d, r);
    }
    int64_t x = (int64_t)a, y = (int64_t)b, r;
    switch (op) {
    case GS_BINARY_ADD: r = (int64_t)((uint64_t)x + (uint64_t)y); break;
    case GS_BINARY_SUB: r = (int64_t)((uint64_t)x - (uint64_t)y); break;
    case GS_BINARY_MUL: r = (int64_t)((uint64_t)x * (uint64_t)y); break;
    case GS_BINARY_MAXIMUM: r = x > y ? x : y; break;
    case GS_BINARY_MINIMUM: r = x < y ? x : y; break;
    case GS_BINARY_FLOOR_DIVIDE: r = ref_floordiv(x, y); break;
    case GS_BINARY_MOD: r = ref_mod(x, y); break;
    case GS_BINARY_LT: return x < y;
    case GS_BINARY_EQ: return x == y;
    case GS_BINARY_NE: return x != y;
    case GS_BINARY_GE: return x >= y;
    case GS_BINARY_LOGICAL_AND: return (x != 0) && (y != 0);
    case GS_BINARY_LOGICAL_XOR: return (x != 0) != (y != 0);
    default: cr_assert_fail("op %d not in the reference", (int)op); return 0;
    }
    return (double)ref_wrap(d, r);
}

/* values every dtype can hold after its cast (floats also get NaN and inf below) */
static const double int_vals[] = {0, 1, -1, 2, -3, 7, 100, -128, 127, 255, 256, 2147483647.0,
                                  -2147483648.0, 4611686018427387904.0, -7, 13};
static const double int_vals2[] = {3, -1, 2, 0, 5, -7, 100, -128, 1, 2, 300, 1, -1,
                                   4611686018427387904.0, 2, -4};
enum { NV = sizeof(int_vals) / sizeof(int_vals[0]) };

Test(graph_dtype_eval, astype_converts_like_numpy)
{
    static const double v[] = {0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 255.0, 256.0, 300.0, 65504.0,
                               65520.0, 1e-8, 3.14159265358979, 1e20, -1e20, INFINITY, NAN};
    const int64_t n = sizeof(v) / sizeof(v[0]);
    for (int k = 0; k < NDT; k++) {
        gs_dtype_t d = all_dtypes[k];
        /* float -> integer conversion of NaN/inf/out-of-range values is unspecified (NumPy):
         * integers get the finite values within int32 only */
        int64_t m = is_float(d) || d == GS_DTYPE_BOOL ? n : 9;
        double want[32];
        gs_array_h h = typed_array(d, v, m);
        for (int64_t i = 0; i < m; i++) want[i] = ref_cast(d, v[i]);
        check(h, want, m, gs_dtype_name(d));
        gs_array_release(h);
    }
}

Test(graph_dtype_eval, every_dtype_and_binary_op_against_the_reference)
{
    static const gs_binop_t ops[] = {GS_BINARY_ADD,     GS_BINARY_SUB,          GS_BINARY_MUL,
                                     GS_BINARY_DIV,     GS_BINARY_MAXIMUM,      GS_BINARY_MINIMUM,
                                     GS_BINARY_LT,      GS_BINARY_EQ,           GS_BINARY_NE,
                                     GS_BINARY_GE,      GS_BINARY_LOGICAL_AND,  GS_BINARY_LOGICAL_XOR,
                                     GS_BINARY_MOD,     GS_BINARY_FLOOR_DIVIDE};
    static const double fv[] = {0.0, -0.0, 1.5, -2.25, 1e30, -1e-30, INFINITY, -INFINITY, NAN,
                                3.0, 65504.0, 0.1, 7.0, -7.0, 2.0, 1.0};
    static const double fw[] = {1.0, 0.0, -1.5, 3.0, 1e30, 2.0, INFINITY, 1.0, 1.0, NAN,
                                65504.0, 0.2, -2.0, 2.0, 0.0, 3.0};
    for (int k = 0; k < NDT; k++) {
        gs_dtype_t d = all_dtypes[k];
        const double *va = is_float(d) ? fv : int_vals, *vb = is_float(d) ? fw : int_vals2;
        gs_array_h a = typed_array(d, va, NV), b = typed_array(d, vb, NV);
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
            gs_binop_t op = ops[o];
            gs_dtype_t rd;
            gs_array_h h = NULL;
            double want[NV];
            char what[96];
            if (gs_dtype_binary_result(op, d, d, &rd) != GS_OK) {
                /* NumPy has no such loop (bool - bool ...): an error naming the dtype */
                cr_assert_eq(gs_array_binary(op, a, b, &h), GS_ERR_INVALID_PARAM);
                cr_assert_null(h, "output written on error");
                cr_assert(strstr(gs_last_error(), "bool") != NULL, "%s", gs_last_error());
                continue;
            }
            /* float mod/floor_divide are the float64 suite's (test_eval); true division of
             * integers goes through float64 */
            if (is_float(d) && (op == GS_BINARY_MOD || op == GS_BINARY_FLOOR_DIVIDE)) continue;
            OK(gs_array_binary(op, a, b, &h));
            cr_assert_eq(gs_array_dtype(h), (int)rd, "%s of %s", "binary", gs_dtype_name(d));
            for (int64_t i = 0; i < NV; i++) {
                double x = ref_cast(d, va[i]), y = ref_cast(d, vb[i]);
                if (op == GS_BINARY_DIV && !is_float(d))
                    want[i] = x / y;   /* true division in float64 */
                else
                    want[i] = ref_binary(op, d, x, y);
            }
            snprintf(what, sizeof(what), "op %d on %s", (int)op, gs_dtype_name(d));
            check(h, want, NV, what);
            gs_array_release(h);
        }
        gs_array_release(a);
        gs_array_release(b);
    }
}

Test(graph_dtype_eval, integer_overflow_wraps)
{
    static const double v[] = {2147483647.0, -2147483648.0, 65536.0, 255.0, 200.0};
    gs_array_h a = typed_array(GS_DTYPE_INT32, v, 5), s, m, u, us;
    double want[5];
    OK(gs_array_binary(GS_BINARY_ADD, a, a, &s));
    OK(gs_array_binary(GS_BINARY_MUL, a, a, &m));
    for (int i = 0; i < 5; i++) want[i] = (double)(int32_t)(uint32_t)((int64_t)v[i] * 2);
    check(s, want, 5, "int32 a + a");
    for (int i = 0; i < 5; i++)
        want[i] = (double)(int32_t)(uint32_t)((uint64_t)(int64_t)v[i] * (uint64_t)(int64_t)v[i]);
    check(m, want, 5, "int32 a * a");
    u = typed_array(GS_DTYPE_UINT8, v + 3, 2);   /* 255, 200 */
    OK(gs_array_binary(GS_BINARY_ADD, u, u, &us));
    want[0] = 254;
    want[1] = 144;
    check(us, want, 2, "uint8 a + a");
    gs_array_release(us);
    gs_array_release(u);
    gs_array_release(m);
    gs_array_release(s);
    gs_array_release(a);
}

Test(graph_dtype_eval, mixed_dtypes_promote_and_compare_to_bool)
{
    /* int32 + float32 -> float64 (NumPy), int32 < float scalar -> bool, uint8 + int32 -> int32 */
    static const double v[] = {1, 2, 3, 16777217, -5, 250, 7};
    static const double w[] = {0.5, 0.25, 3, 1, 1e-3, 10, 7};
    gs_array_h i4 = typed_array(GS_DTYPE_INT32, v, 7), f4 = typed_array(GS_DTYPE_FLOAT32, w, 7);
    gs_array_h u1 = typed_array(GS_DTYPE_UINT8, v, 7), h;
    double want[7];
    OK(gs_array_binary(GS_BINARY_ADD, i4, f4, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_FLOAT64);
    for (int i = 0; i < 7; i++) want[i] = v[i] + (double)(float)w[i];
    check(h, want, 7, "int32 + float32");
    gs_array_release(h);
    OK(gs_array_binary_array_scalar(GS_BINARY_LT, i4, 2.5, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_BOOL);
    for (int i = 0; i < 7; i++) want[i] = v[i] < 2.5;
    check(h, want, 7, "int32 < 2.5");
    gs_array_release(h);
    OK(gs_array_binary(GS_BINARY_ADD, u1, i4, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_INT32);
    for (int i = 0; i < 7; i++) want[i] = (double)(uint8_t)(int64_t)v[i] + v[i];
    check(h, want, 7, "uint8 + int32");
    gs_array_release(h);
    /* a bool mask from a comparison, combined logically and summed */
    {
        gs_array_h m1, m2, m, cnt;
        OK(gs_array_binary_array_scalar(GS_BINARY_GT, i4, 1.5, &m1));
        OK(gs_array_binary_array_scalar(GS_BINARY_LT, f4, 5.0, &m2));
        OK(gs_array_binary(GS_BINARY_LOGICAL_AND, m1, m2, &m));
        cr_assert_eq(gs_array_dtype(m), GS_DTYPE_BOOL);
        OK(gs_array_reduce(GS_RED_SUM, m, NULL, &cnt));
        cr_assert_eq(gs_array_dtype(cnt), GS_DTYPE_INT64, "sum of bool is int64");
        int64_t c = 0;
        for (int i = 0; i < 7; i++) c += v[i] > 1.5 && (double)(float)w[i] < 5.0;
        want[0] = (double)c;
        check(cnt, want, 1, "count of a mask");
        gs_array_release(cnt);
        gs_array_release(m);
        gs_array_release(m2);
        gs_array_release(m1);
    }
    gs_array_release(u1);
    gs_array_release(f4);
    gs_array_release(i4);
}

Test(graph_dtype_eval, reductions_give_numpy_result_dtypes)
{
    static const double v[] = {2147483647.0, 2147483647.0, 5, -3, 100, 7, 7, -2147483648.0, 1};
    gs_array_h a = typed_array(GS_DTYPE_INT32, v, 9), h;
    double want[1];
    double sum = 0;
    int64_t amax = 0;
    for (int i = 0; i < 9; i++) {
        sum += v[i];
        if (v[i] > v[amax]) amax = i;
    }
    OK(gs_array_reduce(GS_RED_SUM, a, NULL, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_INT64);
    want[0] = sum;   /* no int32 wrap: accumulated in int64 */
    check(h, want, 1, "sum of int32");
    gs_array_release(h);
    OK(gs_array_reduce(GS_RED_MEAN, a, NULL, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_FLOAT64);
    want[0] = sum / 9;
    check(h, want, 1, "mean of int32");
    gs_array_release(h);
    OK(gs_array_reduce(GS_RED_MAX, a, NULL, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_INT32);
    want[0] = 2147483647.0;
    check(h, want, 1, "max of int32");
    gs_array_release(h);
    OK(gs_array_reduce(GS_RED_ARGMAX, a, NULL, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_INT64);
    want[0] = (double)amax;
    check(h, want, 1, "argmax of int32");
    gs_array_release(h);
    gs_array_release(a);
}

Test(graph_dtype_eval, float32_results_round_and_reduce_along_an_axis)
{
    /* 2-D float32 array (7 x 5, chunks 3 x 2), reversed rows, a float32 op and a sum along
     * axis 1 (float32 result) */
    enum { R = 7, K = 5 };
    double v[R * K], want[R * K];
    int64_t shape[2] = {R, K}, chunks[2] = {3, 2};
    gs_array_h x, f, s, y, t;
    gs_slice_t sl[2] = {GS_SLICE_STEP(-1), GS_SLICE_ALL};
    for (int i = 0; i < R * K; i++) v[i] = 0.1 * i - 1.3;
    OK(gs_array_from_host(v, 2, shape, chunks, &x));
    OK(gs_array_astype(x, GS_DTYPE_FLOAT32, &f));
    OK(gs_array_slice(f, 2, sl, &y));
    OK(gs_array_binary(GS_BINARY_MUL, y, y, &t));
    cr_assert_eq(gs_array_dtype(t), GS_DTYPE_FLOAT32);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < K; j++) {
            double e = (double)(float)v[(R - 1 - i) * K + j];
            want[i * K + j] = (double)(float)(e * e);
        }
    check(t, want, R * K, "float32 reversed square");
    {
        gs_reduce_params_t p = {0};
        p.field_mask = GS_REDUCE_FIELD_AXIS;
        p.axis = 1;
        OK(gs_array_reduce(GS_RED_SUM, t, &p, &s));
        cr_assert_eq(gs_array_dtype(s), GS_DTYPE_FLOAT32);
        double ws[R];
        for (int i = 0; i < R; i++) {
            double acc = 0;
            for (int j = 0; j < K; j++) acc += want[i * K + j];
            ws[i] = (double)(float)acc;   /* accumulated in float64, rounded once */
        }
        check(s, ws, R, "float32 sum along axis 1");
        gs_array_release(s);
    }
    gs_array_release(t);
    gs_array_release(y);
    gs_array_release(f);
    gs_array_release(x);
}

Test(graph_dtype_eval, full_and_ones_take_a_dtype)
{
    int64_t shape[2] = {4, 3}, chunks[2] = {3, 2};
    gs_array_h h;
    double want[12];
    OK(gs_array_full_dtype(300.7, GS_DTYPE_UINT8, 2, shape, chunks, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_UINT8);
    for (int i = 0; i < 12; i++) want[i] = 44;   /* 300 wraps to 44 */
    check(h, want, 12, "full uint8");
    gs_array_release(h);
    OK(gs_array_ones_dtype(GS_DTYPE_FLOAT16, 2, shape, chunks, &h));
    for (int i = 0; i < 12; i++) want[i] = 1;
    check(h, want, 12, "ones float16");
    gs_array_release(h);
    OK(gs_array_zeros_dtype(GS_DTYPE_BOOL, 2, shape, chunks, &h));
    for (int i = 0; i < 12; i++) want[i] = 0;
    check(h, want, 12, "zeros bool");
    gs_array_release(h);
}

Test(graph_dtype_eval, bad_dtypes_are_rejected_and_outputs_unwritten)
{
    static const double v[] = {1, 2, 3, 4};
    int64_t shape[1] = {4}, chunks[1] = {2}, rc[1] = {2};   /* typed_array chunks by 3 */
    gs_array_h b = typed_array(GS_DTYPE_BOOL, v, 4), i4 = typed_array(GS_DTYPE_INT32, v, 4);
    gs_array_h sentinel = (gs_array_h)(uintptr_t)0x1, h = sentinel;
    cr_assert_eq(gs_array_binary(GS_BINARY_SUB, b, b, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(h, sentinel);
    cr_assert(strstr(gs_last_error(), "bool") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_array_unary(GS_UNARY_NEG, b, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(h, sentinel);
    cr_assert_eq(gs_array_astype(i4, GS_DTYPE_COUNT, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_astype(i4, (gs_dtype_t)-1, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(h, sentinel);
    cr_assert_eq(gs_array_full_dtype(1.0, GS_DTYPE_COUNT, 1, shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(h, sentinel);
    {
        gs_array_h ops[2] = {i4, b};
        cr_assert_eq(gs_array_concatenate(2, ops, 0, &h), GS_ERR_INVALID_PARAM);
        cr_assert(strstr(gs_last_error(), "int32") != NULL && strstr(gs_last_error(), "bool"),
                  "%s", gs_last_error());
        cr_assert_eq(h, sentinel);
    }
    (void)rc;
    cr_assert_eq(gs_array_matmul(i4, i4, &h), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "int32") != NULL, "%s", gs_last_error());
    cr_assert_eq(h, sentinel);
    gs_array_release(i4);
    gs_array_release(b);
}

Test(graph_dtype_eval, layers_with_bad_dtypes_do_not_decode)
{
    /* a typed layer whose instruction dtype is out of range is rejected at decode */
    static const double v[] = {1, 2, 3};
    gs_array_h a = typed_array(GS_DTYPE_INT32, v, 3), h;
    gs_taskgraph_t *tg;
    OK(gs_array_binary(GS_BINARY_ADD, a, a, &h));
    OK(gs_graph_lower(h, GS_LOWER_DEFAULT, &tg));
    for (uint64_t i = 0; i < tg->nlayers; i++) {
        gs_layer_t *l = tg->layers[i], *back = NULL;
        gs_buf_t b1 = {0};
        if (gs_layer_kind(l) != GS_LAYER_FUSED) continue;
        OK(gs_layer_encode(l, &b1));
        /* the last byte is the last instruction's dtype (a positive fixint) */
        cr_assert(b1.len > 0 && ((uint8_t *)b1.data)[b1.len - 1] < 0x80);
        ((uint8_t *)b1.data)[b1.len - 1] = (uint8_t)GS_DTYPE_COUNT;
        cr_assert_eq(gs_layer_decode(b1.data, b1.len, &back), GS_ERR_PROTO);
        cr_assert_null(back);
        cr_assert(strstr(gs_last_error(), "dtype") != NULL, "%s", gs_last_error());
        gs_buf_cleanup(&b1);
    }
    gs_taskgraph_free(tg);
    gs_array_release(h);
    gs_array_release(a);
}

Test(graph_dtype_eval, where_selects_with_broadcasting_inside_one_kernel)
{
    /* where(x > 0.5, x_int32, -1.0) over a 2-D array with a broadcast row of replacements:
     * cond bool (R x K), a int32 (R x K), b float64 (1 x K) -> float64 */
    enum { R = 7, K = 5 };
    double v[R * K], row[K], want[R * K];
    int64_t shape[2] = {R, K}, chunks[2] = {3, 2}, rshape[2] = {1, K}, rchunks[2] = {1, 3};
    gs_array_h x, c, xi, r, w, rev, wr;
    for (int i = 0; i < R * K; i++) v[i] = 0.37 * i - 4.1;
    for (int j = 0; j < K; j++) row[j] = NAN + 0 * j;
    row[1] = -1.0;
    row[3] = INFINITY;
    OK(gs_array_from_host(v, 2, shape, chunks, &x));
    OK(gs_array_from_host(row, 2, rshape, rchunks, &r));
    OK(gs_array_binary_array_scalar(GS_BINARY_GT, x, 0.5, &c));
    OK(gs_array_astype(x, GS_DTYPE_INT32, &xi));
    OK(gs_array_where(c, xi, r, &w));
    cr_assert_eq(gs_array_dtype(w), GS_DTYPE_FLOAT64, "int32 with float64 promotes");
    for (int i = 0; i < R; i++)
        for (int j = 0; j < K; j++) {
            double e = v[i * K + j];
            want[i * K + j] = e > 0.5 ? (double)(int32_t)e : row[j];
        }
    check(w, want, R * K, "where with a broadcast row");
    /* reversed along axis 0 (the slice pushed below where) and summed along axis 1 */
    {
        gs_slice_t s[2] = {GS_SLICE_STEP(-2), GS_SLICE_ALL};
        double wr_want[R * K];
        int nr = 0;
        OK(gs_array_slice(w, 2, s, &rev));
        for (int i = R - 1; i >= 0; i -= 2, nr++)
            for (int j = 0; j < K; j++) wr_want[nr * K + j] = want[i * K + j];
        check(rev, wr_want, nr * K, "where reversed");
    }
    /* same-dtype operands keep the dtype; bool condition from a uint8 array */
    {
        gs_array_h u, ones, zeros;
        OK(gs_array_astype(x, GS_DTYPE_UINT8, &u));
        OK(gs_array_ones_dtype(GS_DTYPE_INT64, 2, shape, chunks, &ones));
        OK(gs_array_zeros_dtype(GS_DTYPE_INT64, 2, shape, chunks, &zeros));
        OK(gs_array_where(u, ones, zeros, &wr));
        cr_assert_eq(gs_array_dtype(wr), GS_DTYPE_INT64);
        for (int i = 0; i < R * K; i++) want[i] = (uint8_t)(int64_t)v[i] != 0;
        check(wr, want, R * K, "where of a uint8 condition");
        gs_array_release(wr);
        gs_array_release(zeros);
        gs_array_release(ones);
        gs_array_release(u);
    }
    /* operands that do not broadcast: an error, nothing written */
    {
        int64_t bad[2] = {R, 3}, bc[2] = {3, 3};
        gs_array_h y, h = NULL;
        OK(gs_array_full(1.0, 2, bad, bc, &y));
        cr_assert_eq(gs_array_where(c, x, y, &h), GS_ERR_INVALID_PARAM);
        cr_assert_null(h);
        gs_array_release(y);
    }
    gs_array_release(rev);
    gs_array_release(w);
    gs_array_release(xi);
    gs_array_release(c);
    gs_array_release(r);
    gs_array_release(x);
}

Test(graph_dtype_eval, where_is_fused_into_one_task_per_chunk)
{
    /* where(x > 0, x, -x) == abs(x) over a random array (a generator: inlined in each use) */
    int64_t shape[2] = {9, 8}, chunks[2] = {4, 3};
    gs_array_h x, c, n, w, ab;
    gs_taskgraph_t *tg;
    OK(gs_array_random_normal(5, 0.0, 1.0, 2, shape, chunks, &x));
    OK(gs_array_binary_array_scalar(GS_BINARY_GT, x, 0.0, &c));
    OK(gs_array_unary(GS_UNARY_NEG, x, &n));
    OK(gs_array_where(c, x, n, &w));
    OK(gs_array_unary(GS_UNARY_ABS, x, &ab));
    OK(gs_graph_lower(w, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(tg->nlayers, 1, "cond, both branches and where in one layer, got %u",
                 (unsigned)tg->nlayers);
    gs_taskgraph_free(tg);
    double *want = eval_flags(ab, GS_LOWER_DEFAULT);
    check(w, want, 72, "where as abs");
    free(want);
    gs_array_release(ab);
    gs_array_release(w);
    gs_array_release(n);
    gs_array_release(c);
    gs_array_release(x);
}

Test(graph_dtype_eval, int_scalars_keep_the_integer_dtype)
{
    static const double v[] = {2147483647.0, -5, 0, 7, -2147483648.0, 100};
    gs_array_h a = typed_array(GS_DTYPE_INT32, v, 6), u, h = NULL;
    double want[6];
    OK(gs_array_binary_array_scalar_kind(GS_BINARY_ADD, a, 3, GS_SCALAR_INT, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_INT32, "int32 + 3 stays int32");
    for (int i = 0; i < 6; i++) want[i] = (double)(int32_t)(uint32_t)((int64_t)v[i] + 3);
    check(h, want, 6, "int32 + 3 wraps");
    gs_array_release(h);
    OK(gs_array_binary_scalar_array_kind(GS_BINARY_FLOOR_DIVIDE, 100, GS_SCALAR_INT, a, &h));
    for (int i = 0; i < 6; i++) {
        int64_t x = (int64_t)v[i], q;
        if (x == 0) q = 0;
        else {
            q = 100 / x;
            if (100 % x != 0 && ((100 < 0) != (x < 0))) q--;
        }
        want[i] = (double)q;
    }
    check(h, want, 6, "100 // int32");
    gs_array_release(h);
    OK(gs_array_binary_array_scalar_kind(GS_BINARY_LT, a, 7, GS_SCALAR_INT, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_BOOL);
    for (int i = 0; i < 6; i++) want[i] = v[i] < 7;
    check(h, want, 6, "int32 < 7");
    gs_array_release(h);
    /* float scalars still promote (NumPy 2): int32 + 0.5 is float64 */
    OK(gs_array_binary_array_scalar(GS_BINARY_ADD, a, 0.5, &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_FLOAT64);
    gs_array_release(h);
    /* out of bounds or not an integer: errors naming the dtype, nothing written */
    u = typed_array(GS_DTYPE_UINT8, v + 2, 3);
    h = NULL;
    cr_assert_eq(gs_array_binary_array_scalar_kind(GS_BINARY_ADD, u, 300, GS_SCALAR_INT, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "uint8") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_array_binary_array_scalar_kind(GS_BINARY_ADD, u, 2.5, GS_SCALAR_INT, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_binary_array_scalar_kind(GS_BINARY_ADD, u, 2, GS_SCALAR_BOOL, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_binary_array_scalar_kind(GS_BINARY_ADD, u, 2, (gs_scalar_kind_t)7, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_null(h);
    gs_array_release(u);
    gs_array_release(a);
}

Test(graph_dtype_eval, rechunk_concatenate_and_keepdims_move_every_dtype)
{
    /* 1-, 2- and 4-byte elements through COPY tasks: rechunk, concatenate, stack and a
     * keepdims reduction of a float32 array */
    static const double v[] = {1.5, -2, 3, 70000, -0.25, 6, 7, 255, 9, -10, 11, 12};
    const gs_dtype_t ds[] = {GS_DTYPE_BOOL, GS_DTYPE_UINT8, GS_DTYPE_FLOAT16, GS_DTYPE_INT32,
                             GS_DTYPE_FLOAT32, GS_DTYPE_INT64};
    for (size_t t = 0; t < sizeof(ds) / sizeof(ds[0]); t++) {
        gs_dtype_t d = ds[t];
        gs_array_h a = typed_array(d, v, 12), r, c, st;
        int64_t ch[1] = {5};
        double want[24];
        OK(gs_array_rechunk(a, ch, &r));
        cr_assert_eq(gs_array_dtype(r), (int)d);
        for (int i = 0; i < 12; i++) want[i] = ref_cast(d, v[i]);
        check(r, want, 12, gs_dtype_name(d));
        gs_array_h ops[2] = {r, a};
        OK(gs_array_concatenate(2, ops, 0, &c));
        for (int i = 0; i < 12; i++) want[12 + i] = want[i];
        check(c, want, 24, "concatenate");
        OK(gs_array_stack(2, ops, 0, &st));
        check(st, want, 24, "stack");
        gs_array_release(st);
        gs_array_release(c);
        gs_array_release(r);
        gs_array_release(a);
    }
    {
        enum { R = 5, K = 4 };
        double x[R * K], want[K];
        int64_t shape[2] = {R, K}, chunks[2] = {2, 3};
        gs_array_h h, f, s;
        int axes[1] = {0};
        for (int i = 0; i < R * K; i++) x[i] = 0.3 * i - 2;
        OK(gs_array_from_host(x, 2, shape, chunks, &h));
        OK(gs_array_astype(h, GS_DTYPE_FLOAT32, &f));
        OK(gs_array_reduce_axes(GS_RED_MAX, f, 1, axes, 1, NULL, &s));
        cr_assert_eq(gs_array_dtype(s), GS_DTYPE_FLOAT32);
        cr_assert_eq(gs_array_ndim(s), 2);
        for (int j = 0; j < K; j++) {
            want[j] = -INFINITY;
            for (int i = 0; i < R; i++) want[j] = fmax(want[j], (double)(float)x[i * K + j]);
        }
        check(s, want, K, "float32 max keepdims");
        gs_array_release(s);
        gs_array_release(f);
        gs_array_release(h);
    }
}
