/* Dtype table and NumPy's type rules (gsched/array.h, "dtypes"; docs/api.md has the tables).
 *
 * Promotion is computed, not tabulated by hand: each dtype has a kind (bool, unsigned,
 * signed, float) and a size, and the result of two operands is the smallest dtype of the table
 * whose value set contains both, the rule NumPy's own promotion table follows for these seven
 * types. tests/graph/test_dtype.c checks the outcome against NumPy's table written out. */
#include "graph/graph_internal.h"

#include <math.h>
#include <string.h>

typedef struct gs__dtype_info {
    const char *name;
    uint8_t size;
    char kind;
} gs__dtype_info_t;

static const gs__dtype_info_t gs__dtypes[GS_DTYPE_COUNT] = {
#define GS__DTYPE_INFO(name_, val, str, size_, kind_) [val] = {str, size_, kind_},
    GS_DTYPE_MAP(GS__DTYPE_INFO)
#undef GS__DTYPE_INFO
};

static int gs__dtype_valid(gs_dtype_t d)
{
    return (int)d >= 0 && d < GS_DTYPE_COUNT;
}

const char *gs_dtype_name(gs_dtype_t dtype)
{
    return gs__dtype_valid(dtype) ? gs__dtypes[dtype].name : "unknown";
}

size_t gs_dtype_size(gs_dtype_t dtype)
{
    return gs__dtype_valid(dtype) ? gs__dtypes[dtype].size : 0;
}

static gs_status_t gs__dtype_check2(const char *what, gs_dtype_t a, gs_dtype_t b,
                                    const void *out_p)
{
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: out_p is NULL", what);
    if (!gs__dtype_valid(a))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unknown dtype %d", what, (int)a);
    if (!gs__dtype_valid(b))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unknown dtype %d", what, (int)b);
    return GS_OK;
}

static int gs__is_int(gs_dtype_t d)
{
    return gs__dtypes[d].kind == 'i' || gs__dtypes[d].kind == 'u';
}

static int gs__is_float(gs_dtype_t d)
{
    return gs__dtypes[d].kind == 'f';
}

/* Bits of integer magnitude a dtype holds exactly: integers their value bits, floats their
 * significand (float16 11, float32 24, float64 53), bool 1. */
static int gs__exact_bits(gs_dtype_t d)
{
    switch (d) {
    case GS_DTYPE_BOOL: return 1;
    case GS_DTYPE_UINT8: return 8;
    case GS_DTYPE_INT32: return 31;
    case GS_DTYPE_INT64: return 63;
    case GS_DTYPE_FLOAT16: return 11;
    case GS_DTYPE_FLOAT32: return 24;
    default: return 53;
    }
}

/* Smallest float whose significand holds every value of integer (or bool) dtype @a d; int64
 * goes to float64 by convention, as in NumPy. */
static gs_dtype_t gs__float_for(gs_dtype_t d)
{
    if (gs__is_float(d)) return d;
    if (gs__exact_bits(d) <= gs__exact_bits(GS_DTYPE_FLOAT16)) return GS_DTYPE_FLOAT16;
    if (gs__exact_bits(d) <= gs__exact_bits(GS_DTYPE_FLOAT32)) return GS_DTYPE_FLOAT32;
    return GS_DTYPE_FLOAT64;
}

static gs_dtype_t gs__promote(gs_dtype_t a, gs_dtype_t b)
{
    if (a == b) return a;
    if (a == GS_DTYPE_BOOL) return b;
    if (b == GS_DTYPE_BOOL) return a;
    if (gs__is_float(a) && gs__is_float(b))
        return gs__dtypes[a].size >= gs__dtypes[b].size ? a : b;
    if (gs__is_int(a) && gs__is_int(b))   /* uint8 < int32 < int64: every pair fits the wider */
        return gs__exact_bits(a) >= gs__exact_bits(b) ? a : b;
    /* an integer and a float: the float, widened until it holds the integer */
    gs_dtype_t f = gs__is_float(a) ? a : b, i = gs__is_float(a) ? b : a;
    gs_dtype_t need = gs__float_for(i);
    return gs__dtypes[need].size > gs__dtypes[f].size ? need : f;
}

gs_status_t gs_dtype_promote(gs_dtype_t a, gs_dtype_t b, gs_dtype_t *out_p)
{
    gs_status_t st = gs__dtype_check2("dtype promote", a, b, out_p);
    if (st != GS_OK) return st;
    *out_p = gs__promote(a, b);
    return GS_OK;
}

gs_status_t gs_dtype_promote_scalar(gs_dtype_t a, gs_scalar_kind_t k, gs_dtype_t *out_p)
{
    gs_status_t st = gs__dtype_check2("dtype promote scalar", a, a, out_p);
    if (st != GS_OK) return st;
    switch (k) {
    case GS_SCALAR_FLOAT: *out_p = gs__is_float(a) ? a : GS_DTYPE_FLOAT64; return GS_OK;
    case GS_SCALAR_INT: *out_p = a == GS_DTYPE_BOOL ? GS_DTYPE_INT64 : a; return GS_OK;
    case GS_SCALAR_BOOL: *out_p = a; return GS_OK;
    default:
        return gs_error_set(GS_ERR_INVALID_PARAM, "dtype promote scalar: unknown scalar kind %d",
                            (int)k);
    }
}

static const char *const gs__unop_names[GS_UNARY_COUNT] = {
    "negative", "absolute", "exp",   "log",   "sqrt",  "sin",   "cos",        "tan",
    "arcsin",   "arccos",   "arctan", "sinh", "cosh",  "tanh",  "exp2",       "log2",
    "log10",    "log1p",    "expm1", "floor", "ceil",  "round", "trunc",      "sign",
    "square",   "reciprocal", "isnan", "isinf", "isfinite", "logical_not"};

gs_status_t gs_dtype_unary_result(gs_unop_t op, gs_dtype_t a, gs_dtype_t *out_p)
{
    gs_status_t st = gs__dtype_check2("unary dtype", a, a, out_p);
    if (st != GS_OK) return st;
    switch (op) {
    case GS_UNARY_NEG:
        if (a == GS_DTYPE_BOOL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "negative of a bool array is not "
                                                      "supported (use logical not)");
        *out_p = a;
        return GS_OK;
    case GS_UNARY_ABS: case GS_UNARY_SIGN: case GS_UNARY_SQUARE: case GS_UNARY_RECIPROCAL:
    case GS_UNARY_FLOOR: case GS_UNARY_CEIL: case GS_UNARY_ROUND: case GS_UNARY_TRUNC:
        if (a == GS_DTYPE_BOOL && op != GS_UNARY_ABS)
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s of a bool array is not supported "
                                                      "(convert with astype first)",
                                gs__unop_names[op]);
        *out_p = a;
        return GS_OK;
    case GS_UNARY_ISNAN: case GS_UNARY_ISINF: case GS_UNARY_ISFINITE: case GS_UNARY_LOGICAL_NOT:
        *out_p = GS_DTYPE_BOOL;
        return GS_OK;
    default:
        if ((int)op >= 0 && op < GS_UNARY_COUNT) {   /* exp, log, sqrt, trigonometric & co. */
            *out_p = gs__float_for(a);
            return GS_OK;
        }
        return gs_error_set(GS_ERR_INVALID_PARAM, "unary dtype: unknown op %d on %s", (int)op,
                            gs_dtype_name(a));
    }
}

static const char *const gs__binop_names[GS_BINARY_COUNT] = {
    "add", "subtract", "multiply", "divide", "power", "less", "less_equal", "greater",
    "greater_equal", "equal", "not_equal", "minimum", "maximum", "mod", "floor_divide",
    "logical_and", "logical_or", "logical_xor"};

gs_status_t gs_dtype_binary_result(gs_binop_t op, gs_dtype_t a, gs_dtype_t b,
                                   gs_dtype_t *out_p)
{
    gs_status_t st = gs__dtype_check2("binary dtype", a, b, out_p);
    gs_dtype_t p;
    if (st != GS_OK) return st;
    if ((int)op < 0 || op >= GS_BINARY_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "binary dtype: unknown op %d on %s and %s",
                            (int)op, gs_dtype_name(a), gs_dtype_name(b));
    p = gs__promote(a, b);
    switch (op) {
    case GS_BINARY_LT: case GS_BINARY_LE: case GS_BINARY_GT: case GS_BINARY_GE:
    case GS_BINARY_EQ: case GS_BINARY_NE: case GS_BINARY_LOGICAL_AND: case GS_BINARY_LOGICAL_OR:
    case GS_BINARY_LOGICAL_XOR:
        *out_p = GS_DTYPE_BOOL;
        return GS_OK;
    case GS_BINARY_DIV:
        *out_p = gs__is_float(p) ? p : GS_DTYPE_FLOAT64;
        return GS_OK;
    case GS_BINARY_SUB:
    case GS_BINARY_POW:
    case GS_BINARY_MOD:
    case GS_BINARY_FLOOR_DIVIDE:
        if (p == GS_DTYPE_BOOL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s of bool and bool is not supported "
                                                      "(convert with astype first)",
                                gs__binop_names[op]);
        *out_p = p;
        return GS_OK;
    default:
        *out_p = p;
        return GS_OK;
    }
}

gs_status_t gs_dtype_reduce_result(gs_redop_t op, gs_dtype_t a, gs_dtype_t *out_p)
{
    gs_status_t st = gs__dtype_check2("reduce dtype", a, a, out_p);
    if (st != GS_OK) return st;
    switch (op) {
    case GS_RED_SUM:
    case GS_RED_PROD: *out_p = gs__is_float(a) ? a : GS_DTYPE_INT64; return GS_OK;
    case GS_RED_MEAN:
    case GS_RED_VAR:
    case GS_RED_STD: *out_p = gs__is_float(a) ? a : GS_DTYPE_FLOAT64; return GS_OK;
    case GS_RED_MIN:
    case GS_RED_MAX: *out_p = a; return GS_OK;
    case GS_RED_ARGMIN:
    case GS_RED_ARGMAX: *out_p = GS_DTYPE_INT64; return GS_OK;
    default:
        return gs_error_set(GS_ERR_INVALID_PARAM, "reduce dtype: unknown reduction %d on %s",
                            (int)op, gs_dtype_name(a));
    }
}

int gs_array_dtype(gs_array_h a)
{
    return a != NULL ? (int)a->dtype : -1;
}

/* ---- nodes of a dtype ---- */

int32_t gs__node_compute_dtype(const struct gs_array *n)
{
    gs_dtype_t c;
    switch (n->kind) {
    case GS__NODE_UNARY:
        switch (n->u.op.op) {
        case GS_UNARY_ISNAN: case GS_UNARY_ISINF: case GS_UNARY_ISFINITE:
        case GS_UNARY_LOGICAL_NOT:
            return n->in[0]->dtype;
        default:
            return n->dtype;
        }
    case GS__NODE_BINARY_SCALAR:
    case GS__NODE_SCALAR_BINARY:
    case GS__NODE_BINARY:
        if (n->dtype != GS_DTYPE_BOOL) return n->dtype;
        /* comparisons and logical ops compare in the promoted type */
        if (n->kind == GS__NODE_BINARY) {
            if (gs_dtype_promote((gs_dtype_t)n->in[0]->dtype, (gs_dtype_t)n->in[1]->dtype, &c) !=
                GS_OK)
                return n->dtype;
        } else if (gs_dtype_promote_scalar((gs_dtype_t)n->in[0]->dtype,
                                           (gs_scalar_kind_t)n->u.op.skind, &c) != GS_OK) {
            return n->dtype;
        }
        return c;
    default:
        return n->dtype;
    }
}

gs_status_t gs_array_astype(gs_array_h a, gs_dtype_t dtype, gs_array_h *out_p)
{
    struct gs_array *n;
    gs_status_t st;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "astype: operand is NULL");
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "astype: out_p is NULL");
    if (!gs__dtype_valid(dtype))
        return gs_error_set(GS_ERR_INVALID_PARAM, "astype: unknown dtype %d", (int)dtype);
    if ((gs_dtype_t)a->dtype == dtype) {
        *out_p = gs_array_retain(a);
        return GS_OK;
    }
    n = gs__array_node_new(GS__NODE_ASTYPE, a->grid.ndim);
    if (n == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an array node");
    if (gs_grid_copy(&n->grid, &a->grid) != GS_OK) {
        gs__array_node_free(n);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for chunk bounds");
    }
    if ((st = gs__array_node_finish(n)) != GS_OK) {
        gs__array_node_free(n);
        return st;
    }
    n->dtype = dtype;
    n->ninputs = 1;
    n->in[0] = gs_array_retain(a);
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_full_dtype(double value, gs_dtype_t dtype, int ndim, const int64_t *shape,
                                const int64_t *chunks, gs_array_h *out_p)
{
    gs_array_h n;
    gs_status_t st;
    if (!gs__dtype_valid(dtype))
        return gs_error_set(GS_ERR_INVALID_PARAM, "full: unknown dtype %d", (int)dtype);
    if ((st = gs_array_full(value, ndim, shape, chunks, &n)) != GS_OK) return st;
    n->dtype = dtype;   /* a fresh node: nobody else holds it yet */
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_zeros_dtype(gs_dtype_t dtype, int ndim, const int64_t *shape,
                                 const int64_t *chunks, gs_array_h *out_p)
{
    return gs_array_full_dtype(0.0, dtype, ndim, shape, chunks, out_p);
}

gs_status_t gs_array_ones_dtype(gs_dtype_t dtype, int ndim, const int64_t *shape,
                                const int64_t *chunks, gs_array_h *out_p)
{
    return gs_array_full_dtype(1.0, dtype, ndim, shape, chunks, out_p);
}

double gs_dtype_to_double(gs_dtype_t dtype, const void *elem)
{
    const uint8_t *p = elem;
    if (p == NULL) return NAN;
    switch (dtype) {
    case GS_DTYPE_FLOAT64: { double v; memcpy(&v, p, 8); return v; }
    case GS_DTYPE_FLOAT32: { float v; memcpy(&v, p, 4); return v; }
    case GS_DTYPE_FLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        double v = e == 0 ? ldexp((double)m, -24)
                 : e == 31 ? (m ? NAN : INFINITY) : ldexp((double)(m | 0x400), e - 25);
        return (h & 0x8000) ? -v : v;
    }
    case GS_DTYPE_INT32: { int32_t v; memcpy(&v, p, 4); return (double)v; }
    case GS_DTYPE_INT64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case GS_DTYPE_UINT8: return (double)p[0];
    case GS_DTYPE_BOOL: return p[0] != 0 ? 1.0 : 0.0;
    default: return NAN;
    }
}

/* ---- random arrays of a dtype (docs/random.md, "float32 random" and "Random integers") ---- */

static gs_status_t gs__random_dtype_check(const char *what, gs_dtype_t dtype, double p0, double p1,
                                          gs_array_h *out_p)
{
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: out_p is NULL", what);
    if (!gs__dtype_valid(dtype))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unknown dtype %d", what, (int)dtype);
    if (dtype != GS_DTYPE_FLOAT64 && dtype != GS_DTYPE_FLOAT32)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "%s: dtype %s is not supported (float64 or float32; integers come "
                            "from gs_array_random_integers)", what, gs_dtype_name(dtype));
    if (dtype == GS_DTYPE_FLOAT32 && (!isfinite((float)p0) || !isfinite((float)p1)))
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "%s: parameters %g, %g are not finite in float32", what, p0, p1);
    return GS_OK;
}

gs_status_t gs_array_random_normal_dtype(uint64_t seed, double mean, double std, gs_dtype_t dtype,
                                         int ndim, const int64_t *shape, const int64_t *chunks,
                                         gs_array_h *out_p)
{
    gs_array_h n;
    gs_status_t st;
    if ((st = gs__random_dtype_check("random normal", dtype, mean, std, out_p)) != GS_OK) return st;
    if ((st = gs_array_random_normal(seed, mean, std, ndim, shape, chunks, &n)) != GS_OK)
        return st;
    n->dtype = dtype;   /* a fresh node: the dtype picks the definition (graph_internal.h) */
    n->u.gen.version =
        dtype == GS_DTYPE_FLOAT32 ? GS_RANDOM_DEFAULT_FLOAT32 : GS_RANDOM_DEFAULT_FLOAT64;
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_random_normal_dtype_version(uint64_t seed, double mean, double std,
                                                 gs_dtype_t dtype, int version, int ndim,
                                                 const int64_t *shape, const int64_t *chunks,
                                                 gs_array_h *out_p)
{
    gs_status_t st;
    if ((st = gs__random_dtype_check("random normal", dtype, mean, std, out_p)) != GS_OK) return st;
    if (version == GS_RANDOM_DEFAULT)
        version = dtype == GS_DTYPE_FLOAT32 ? GS_RANDOM_DEFAULT_FLOAT32 : GS_RANDOM_DEFAULT_FLOAT64;
    if (dtype == GS_DTYPE_FLOAT64)
        return gs_array_random_normal_version(seed, mean, std, version, ndim, shape, chunks, out_p);
    if (version != GS_RANDOM_V1 && version != GS_RANDOM_V3 && version != GS_RANDOM_V4)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "random normal: dtype float32 has no definition version %d "
                            "(versions 1, 3 and 4)", version);
    gs_array_h n;
    if ((st = gs_array_random_normal_dtype(seed, mean, std, dtype, ndim, shape, chunks, &n)) != GS_OK)
        return st;
    n->u.gen.version = version; /* a fresh node: lowered to GS_LEAF_NORMAL_F32_V3 / _V4 */
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_random_uniform_dtype(uint64_t seed, double low, double high,
                                          gs_dtype_t dtype, int ndim, const int64_t *shape,
                                          const int64_t *chunks, gs_array_h *out_p)
{
    gs_array_h n;
    gs_status_t st;
    if ((st = gs__random_dtype_check("random uniform", dtype, low, high, out_p)) != GS_OK) return st;
    if ((st = gs_array_random_uniform(seed, low, high, ndim, shape, chunks, &n)) != GS_OK)
        return st;
    n->dtype = dtype;
    *out_p = n;
    return GS_OK;
}

gs_status_t gs_array_random_integers(uint64_t seed, int64_t low, int64_t high, int ndim,
                                     const int64_t *shape, const int64_t *chunks,
                                     gs_array_h *out_p)
{
    gs_array_h n;
    gs_status_t st;
    if (out_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "random integers: out_p is NULL");
    if (low > high)
        return gs_error_set(GS_ERR_INVALID_PARAM, "random integers: low %lld > high %lld",
                            (long long)low, (long long)high);
    if ((st = gs_array_random_uniform(seed, 0.0, 1.0, ndim, shape, chunks, &n)) != GS_OK)
        return st;
    memcpy(&n->u.gen.p0, &low, sizeof(low));    /* int64 bit patterns (graph_internal.h) */
    memcpy(&n->u.gen.p1, &high, sizeof(high));
    n->dtype = GS_DTYPE_INT64;
    *out_p = n;
    return GS_OK;
}
