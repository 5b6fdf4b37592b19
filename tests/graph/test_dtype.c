/* Dtype table and type rules against NumPy's own results, written out here as NumPy 2 prints
 * them (np.result_type, np.exp(x).dtype, np.sum(x).dtype, ...) for the seven gsched dtypes. */
#include <criterion/criterion.h>
#include <string.h>

#include "common/error.h"
#include <gsched/array.h>

enum { B = GS_DTYPE_BOOL, U1 = GS_DTYPE_UINT8, I4 = GS_DTYPE_INT32, I8 = GS_DTYPE_INT64,
       F2 = GS_DTYPE_FLOAT16, F4 = GS_DTYPE_FLOAT32, F8 = GS_DTYPE_FLOAT64 };
static const int order[7] = {B, U1, I4, I8, F2, F4, F8};

/* np.result_type(row, column) */
static const int numpy_result_type[7][7] = {
    /*         b   u1  i4  i8  f2  f4  f8 */
    /* b  */ {B, U1, I4, I8, F2, F4, F8},
    /* u1 */ {U1, U1, I4, I8, F2, F4, F8},
    /* i4 */ {I4, I4, I4, I8, F8, F8, F8},
    /* i8 */ {I8, I8, I8, I8, F8, F8, F8},
    /* f2 */ {F2, F2, F8, F8, F2, F4, F8},
    /* f4 */ {F4, F4, F8, F8, F4, F4, F8},
    /* f8 */ {F8, F8, F8, F8, F8, F8, F8},
};

#define OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s: %s", #call, gs_last_error()); } while (0)

Test(graph_dtype, names_and_sizes_follow_numpy)
{
    static const char *names[7] = {"bool", "uint8", "int32", "int64", "float16", "float32",
                                   "float64"};
    static const size_t sizes[7] = {1, 1, 4, 8, 2, 4, 8};
    for (int i = 0; i < 7; i++) {
        cr_assert_str_eq(gs_dtype_name((gs_dtype_t)order[i]), names[i]);
        cr_assert_eq(gs_dtype_size((gs_dtype_t)order[i]), sizes[i], "%s", names[i]);
    }
    cr_assert_eq(GS_DTYPE_FLOAT64, 0, "float64 is the zero value (wire format, zeroed nodes)");
    cr_assert_str_eq(gs_dtype_name(GS_DTYPE_COUNT), "unknown");
    cr_assert_str_eq(gs_dtype_name((gs_dtype_t)-1), "unknown");
    cr_assert_eq(gs_dtype_size(GS_DTYPE_COUNT), 0);
}

Test(graph_dtype, promotion_matches_numpy_result_type)
{
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 7; j++) {
            gs_dtype_t got;
            OK(gs_dtype_promote((gs_dtype_t)order[i], (gs_dtype_t)order[j], &got));
            cr_assert_eq((int)got, numpy_result_type[i][j], "%s with %s: %s, numpy %s",
                         gs_dtype_name((gs_dtype_t)order[i]), gs_dtype_name((gs_dtype_t)order[j]),
                         gs_dtype_name(got), gs_dtype_name((gs_dtype_t)numpy_result_type[i][j]));
        }
}

Test(graph_dtype, python_scalars_are_weak)
{
    /* (np.zeros(1, row) + 1.0).dtype, + 1, + True */
    static const int want[7][3] = {
        {F8, I8, B}, {F8, U1, U1}, {F8, I4, I4}, {F8, I8, I8},
        {F2, F2, F2}, {F4, F4, F4}, {F8, F8, F8},
    };
    for (int i = 0; i < 7; i++)
        for (int k = 0; k < GS_SCALAR_KIND_COUNT; k++) {
            gs_dtype_t got;
            OK(gs_dtype_promote_scalar((gs_dtype_t)order[i], (gs_scalar_kind_t)k, &got));
            cr_assert_eq((int)got, want[i][k], "%s with scalar kind %d: %s",
                         gs_dtype_name((gs_dtype_t)order[i]), k, gs_dtype_name(got));
        }
}

Test(graph_dtype, unary_results)
{
    /* np.exp(x).dtype and np.negative(x).dtype */
    static const int exp_want[7] = {F2, F2, F8, F8, F2, F4, F8};
    for (int i = 0; i < 7; i++) {
        gs_dtype_t got;
        OK(gs_dtype_unary_result(GS_UNARY_EXP, (gs_dtype_t)order[i], &got));
        cr_assert_eq((int)got, exp_want[i], "exp of %s: %s", gs_dtype_name((gs_dtype_t)order[i]),
                     gs_dtype_name(got));
        OK(gs_dtype_unary_result(GS_UNARY_SQRT, (gs_dtype_t)order[i], &got));
        cr_assert_eq((int)got, exp_want[i]);
        OK(gs_dtype_unary_result(GS_UNARY_ABS, (gs_dtype_t)order[i], &got));
        cr_assert_eq((int)got, order[i]);
        if (order[i] == B) continue;
        OK(gs_dtype_unary_result(GS_UNARY_NEG, (gs_dtype_t)order[i], &got));
        cr_assert_eq((int)got, order[i]);
    }
    /* the other ops: np.sin like exp, np.floor & co. keep, np.isnan gives bool */
    for (int i = 0; i < 7; i++) {
        gs_dtype_t a = (gs_dtype_t)order[i], got;
        for (int op = GS_UNARY_SIN; op < GS_UNARY_COUNT; op++) {
            int want;
            if (op >= GS_UNARY_ISNAN) want = B;
            else if (op >= GS_UNARY_FLOOR) want = order[i];
            else want = exp_want[i];
            if (a == GS_DTYPE_BOOL && op >= GS_UNARY_FLOOR && op < GS_UNARY_ISNAN) {
                cr_assert_eq(gs_dtype_unary_result((gs_unop_t)op, a, &got), GS_ERR_INVALID_PARAM);
                cr_assert(strstr(gs_last_error(), "bool") != NULL, "%s", gs_last_error());
                continue;
            }
            OK(gs_dtype_unary_result((gs_unop_t)op, a, &got));
            cr_assert_eq((int)got, want, "unary %d of %s: %s", op, gs_dtype_name(a),
                         gs_dtype_name(got));
        }
    }
    gs_dtype_t got = GS_DTYPE_COUNT;
    cr_assert_eq(gs_dtype_unary_result(GS_UNARY_NEG, GS_DTYPE_BOOL, &got), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "bool") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_dtype_unary_result(GS_UNARY_COUNT, GS_DTYPE_INT32, &got),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_dtype_unary_result(GS_UNARY_EXP, GS_DTYPE_COUNT, &got), GS_ERR_INVALID_PARAM);
    cr_assert_eq((int)got, GS_DTYPE_COUNT, "written on error");
}

Test(graph_dtype, binary_results)
{
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 7; j++) {
            gs_dtype_t a = (gs_dtype_t)order[i], b = (gs_dtype_t)order[j], got;
            int p = numpy_result_type[i][j];
            OK(gs_dtype_binary_result(GS_BINARY_LT, a, b, &got));
            cr_assert_eq((int)got, B);
            OK(gs_dtype_binary_result(GS_BINARY_NE, a, b, &got));
            cr_assert_eq((int)got, B);
            OK(gs_dtype_binary_result(GS_BINARY_LOGICAL_XOR, a, b, &got));
            cr_assert_eq((int)got, B);
            OK(gs_dtype_binary_result(GS_BINARY_ADD, a, b, &got));
            cr_assert_eq((int)got, p);
            OK(gs_dtype_binary_result(GS_BINARY_MAXIMUM, a, b, &got));
            cr_assert_eq((int)got, p);
            /* np.true_divide: integer loops give float64 */
            OK(gs_dtype_binary_result(GS_BINARY_DIV, a, b, &got));
            cr_assert_eq((int)got, (p == F2 || p == F4) ? p : F8, "%s / %s: %s",
                         gs_dtype_name(a), gs_dtype_name(b), gs_dtype_name(got));
            if (p == B) continue;
            OK(gs_dtype_binary_result(GS_BINARY_SUB, a, b, &got));
            cr_assert_eq((int)got, p);
            OK(gs_dtype_binary_result(GS_BINARY_POW, a, b, &got));
            cr_assert_eq((int)got, p);
            OK(gs_dtype_binary_result(GS_BINARY_FLOOR_DIVIDE, a, b, &got));
            cr_assert_eq((int)got, p);
        }
    gs_dtype_t got = GS_DTYPE_COUNT;
    cr_assert_eq(gs_dtype_binary_result(GS_BINARY_SUB, GS_DTYPE_BOOL, GS_DTYPE_BOOL, &got),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "subtract of bool and bool") != NULL, "%s",
              gs_last_error());
    cr_assert_eq(gs_dtype_binary_result(GS_BINARY_COUNT, GS_DTYPE_INT32, GS_DTYPE_UINT8, &got),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "int32 and uint8") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_dtype_binary_result(GS_BINARY_ADD, GS_DTYPE_INT32, (gs_dtype_t)99, &got),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_dtype_binary_result(GS_BINARY_ADD, GS_DTYPE_INT32, GS_DTYPE_INT32, NULL),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq((int)got, GS_DTYPE_COUNT, "written on error");
}

Test(graph_dtype, reduction_defaults_follow_numpy)
{
    /* np.sum / np.mean / np.max / np.argmax of an array of each dtype (uint8 sums: int64, see
     * array.h) */
    static const int sum_want[7] = {I8, I8, I8, I8, F2, F4, F8};
    static const int mean_want[7] = {F8, F8, F8, F8, F2, F4, F8};
    for (int i = 0; i < 7; i++) {
        gs_dtype_t a = (gs_dtype_t)order[i], got;
        OK(gs_dtype_reduce_result(GS_RED_SUM, a, &got));
        cr_assert_eq((int)got, sum_want[i], "sum of %s: %s", gs_dtype_name(a), gs_dtype_name(got));
        for (int op = GS_RED_MEAN; op <= GS_RED_STD; op++) {
            OK(gs_dtype_reduce_result((gs_redop_t)op, a, &got));
            cr_assert_eq((int)got, mean_want[i]);
        }
        OK(gs_dtype_reduce_result(GS_RED_MAX, a, &got));
        cr_assert_eq((int)got, order[i]);
        OK(gs_dtype_reduce_result(GS_RED_ARGMIN, a, &got));
        cr_assert_eq((int)got, I8);
    }
    gs_dtype_t got;
    cr_assert_eq(gs_dtype_reduce_result(GS_RED_COUNT, GS_DTYPE_INT32, &got), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "int32") != NULL, "%s", gs_last_error());
}

Test(graph_dtype, arrays_are_float64_today)
{
    int64_t shape[1] = {4}, chunks[1] = {2};
    gs_array_h a;
    OK(gs_array_full(1.0, 1, shape, chunks, &a));
    cr_assert_eq(gs_array_dtype(a), GS_DTYPE_FLOAT64);
    cr_assert_eq(gs_array_dtype(NULL), -1);
    gs_array_release(a);
}
