/* Test helpers for the graph module: expressions built together with whole-array reference
 * values computed by naive loops (independent of the lowering and the kernels). */
#ifndef GS_TESTS_GRAPH_UTIL_H
#define GS_TESTS_GRAPH_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "chunkops/random.h"
#include "common/alloc.h"
#include "graph/taskgraph.h"
#include "../numpy_ref.h"

/* An expression and its reference value. */
typedef struct tx {
    gs_array_h h;
    int ndim;
    int64_t shape[GS_MAX_NDIM];
    int64_t size;
    double *v;      /* row-major reference */
} tx_t;

#define TX_MAX 512
static tx_t *tx_all[TX_MAX];
static int tx_n;

static inline tx_t *tx_new(gs_array_h h, int ndim, const int64_t *shape)
{
    tx_t *t = calloc(1, sizeof(*t));
    cr_assert_not_null(t);
    cr_assert_lt(tx_n, TX_MAX);
    tx_all[tx_n++] = t;
    t->h = h;
    t->ndim = ndim;
    t->size = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->size *= shape[i];
    }
    t->v = calloc((size_t)(t->size ? t->size : 1), sizeof(double));
    cr_assert_not_null(t->v);
    if (h != NULL) {
        int64_t hs[GS_MAX_NDIM];
        cr_assert_eq(gs_array_ndim(h), ndim, "ndim %d, reference %d", gs_array_ndim(h), ndim);
        gs_array_shape(h, hs);
        for (int i = 0; i < ndim; i++)
            cr_assert_eq(hs[i], shape[i], "axis %d: shape %lld, reference %lld", i,
                         (long long)hs[i], (long long)shape[i]);
        cr_assert_eq(gs_array_size(h), t->size);
    }
    return t;
}

static inline void tx_free_all(void)
{
    for (int i = 0; i < tx_n; i++) {
        gs_array_release(tx_all[i]->h);
        free(tx_all[i]->v);
        free(tx_all[i]);
    }
    tx_n = 0;
}

/* Free every expression except @a keep (which stays registered). */
static inline void tx_free_all_but(tx_t *keep)
{
    for (int i = 0; i < tx_n; i++) {
        if (tx_all[i] == keep) continue;
        gs_array_release(tx_all[i]->h);
        free(tx_all[i]->v);
        free(tx_all[i]);
    }
    tx_all[0] = keep;
    tx_n = 1;
}

static inline void tx_rowstrides(const tx_t *t, int64_t *rs)
{
    int64_t s = 1;
    for (int a = t->ndim - 1; a >= 0; a--) {
        rs[a] = s;
        s *= t->shape[a];
    }
}

/* coordinates of flat index i */
static inline void tx_coords(const tx_t *t, int64_t i, int64_t *c)
{
    for (int a = t->ndim - 1; a >= 0; a--) {
        c[a] = i % t->shape[a];
        i /= t->shape[a];
    }
}

#define TX_OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s failed: %s: %s", #call, gs_status_name(st__), gs_last_error()); } while (0)

/* ---- generators ---- */

static inline tx_t *tx_normal(uint64_t seed, double mean, double sd, int nd, const int64_t *shape,
                              const int64_t *chunks)
{
    gs_array_h h;
    TX_OK(gs_array_random_normal(seed, mean, sd, nd, shape, chunks, &h));
    tx_t *t = tx_new(h, nd, shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = gs_random_normal_v3(seed, (uint64_t)i, mean, sd);
    return t;
}

static inline tx_t *tx_uniform(uint64_t seed, double lo, double hi, int nd, const int64_t *shape,
                               const int64_t *chunks)
{
    gs_array_h h;
    TX_OK(gs_array_random_uniform(seed, lo, hi, nd, shape, chunks, &h));
    tx_t *t = tx_new(h, nd, shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = gs_random_uniform(seed, (uint64_t)i, lo, hi);
    return t;
}

static inline tx_t *tx_full(double value, int nd, const int64_t *shape, const int64_t *chunks)
{
    gs_array_h h;
    TX_OK(gs_array_full(value, nd, shape, chunks, &h));
    tx_t *t = tx_new(h, nd, shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = value;
    return t;
}

static inline tx_t *tx_arange(double start, double step, int nd, const int64_t *shape,
                              const int64_t *chunks)
{
    gs_array_h h;
    TX_OK(gs_array_arange(start, step, nd, shape, chunks, &h));
    tx_t *t = tx_new(h, nd, shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = start + (double)i * step;
    return t;
}

/* host data: a deterministic pattern */
static inline tx_t *tx_host(int nd, const int64_t *shape, const int64_t *chunks)
{
    int64_t size = 1;
    for (int a = 0; a < nd; a++) size *= shape[a];
    double *d = malloc((size_t)(size ? size : 1) * sizeof(double));
    cr_assert_not_null(d);
    for (int64_t i = 0; i < size; i++) d[i] = sin((double)i * 0.37) * 5.0 + (double)(i % 7);
    gs_array_h h;
    TX_OK(gs_array_from_host(d, nd, shape, chunks, &h));
    tx_t *t = tx_new(h, nd, shape);
    memcpy(t->v, d, (size_t)size * sizeof(double));
    free(d);
    return t;
}

/* ---- elementwise ---- */

static inline double tx_un(gs_unop_t op, double x)
{
    switch (op) {
    case GS_UNARY_NEG: return -x;
    case GS_UNARY_ABS: return fabs(x);
    case GS_UNARY_EXP: return exp(x);
    case GS_UNARY_LOG: return log(x);
    case GS_UNARY_SQRT: return sqrt(x);
    case GS_UNARY_SIN: return sin(x);
    case GS_UNARY_COS: return cos(x);
    case GS_UNARY_TAN: return tan(x);
    case GS_UNARY_ARCSIN: return asin(x);
    case GS_UNARY_ARCCOS: return acos(x);
    case GS_UNARY_ARCTAN: return atan(x);
    case GS_UNARY_SINH: return sinh(x);
    case GS_UNARY_COSH: return cosh(x);
    case GS_UNARY_TANH: return tanh(x);
    case GS_UNARY_EXP2: return pow(2.0, x);
    case GS_UNARY_LOG2: return log(x) / log(2.0);
    case GS_UNARY_LOG10: return log(x) / log(10.0);
    case GS_UNARY_LOG1P: return log1p(x);
    case GS_UNARY_EXPM1: return expm1(x);
    case GS_UNARY_FLOOR: return floor(x);
    case GS_UNARY_CEIL: return ceil(x);
    case GS_UNARY_ROUND: return nearbyint(x);
    case GS_UNARY_TRUNC: return trunc(x);
    case GS_UNARY_SIGN: return isnan(x) ? x : (x > 0) - (x < 0);
    case GS_UNARY_SQUARE: return x * x;
    case GS_UNARY_RECIPROCAL: return 1.0 / x;
    case GS_UNARY_ISNAN: return isnan(x);
    case GS_UNARY_ISINF: return isinf(x) ? 1.0 : 0.0;
    case GS_UNARY_ISFINITE: return isfinite(x) ? 1.0 : 0.0;
    case GS_UNARY_LOGICAL_NOT: return !(x != 0.0);
    default: cr_assert_fail("bad unop"); return 0;
    }
}

static inline double tx_bin(gs_binop_t op, double a, double b)
{
    switch (op) {
    case GS_BINARY_ADD: return a + b;
    case GS_BINARY_SUB: return a - b;
    case GS_BINARY_MUL: return a * b;
    case GS_BINARY_DIV: return a / b;
    case GS_BINARY_POW: return pow(a, b);
    case GS_BINARY_LT: return a < b ? 1.0 : 0.0;
    case GS_BINARY_LE: return a <= b ? 1.0 : 0.0;
    case GS_BINARY_GT: return a > b ? 1.0 : 0.0;
    case GS_BINARY_GE: return a >= b ? 1.0 : 0.0;
    case GS_BINARY_EQ: return a == b ? 1.0 : 0.0;
    case GS_BINARY_NE: return a != b ? 1.0 : 0.0;
    case GS_BINARY_MINIMUM: return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b);
    case GS_BINARY_MAXIMUM: return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b);
    case GS_BINARY_MOD: return ref_np_mod(a, b);
    case GS_BINARY_FLOOR_DIVIDE: return ref_np_floor_divide(a, b);
    case GS_BINARY_LOGICAL_AND: return (a != 0) && (b != 0);
    case GS_BINARY_LOGICAL_OR: return (a != 0) || (b != 0);
    case GS_BINARY_LOGICAL_XOR: return (a != 0) != (b != 0);
    default: cr_assert_fail("bad binop"); return 0;
    }
}

static inline tx_t *tx_unary(gs_unop_t op, tx_t *a)
{
    gs_array_h h;
    TX_OK(gs_array_unary(op, a->h, &h));
    tx_t *t = tx_new(h, a->ndim, a->shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = tx_un(op, a->v[i]);
    return t;
}

static inline tx_t *tx_scalar_r(gs_binop_t op, tx_t *a, double s)   /* a OP s */
{
    gs_array_h h;
    TX_OK(gs_array_binary_array_scalar(op, a->h, s, &h));
    tx_t *t = tx_new(h, a->ndim, a->shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = tx_bin(op, a->v[i], s);
    return t;
}

static inline tx_t *tx_scalar_l(gs_binop_t op, double s, tx_t *a)   /* s OP a */
{
    gs_array_h h;
    TX_OK(gs_array_binary_scalar_array(op, s, a->h, &h));
    tx_t *t = tx_new(h, a->ndim, a->shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = tx_bin(op, s, a->v[i]);
    return t;
}

static inline tx_t *tx_binary(gs_binop_t op, tx_t *a, tx_t *b)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t shape[GS_MAX_NDIM];
    for (int j = 0; j < nd; j++) {
        int ja = j - (nd - a->ndim), jb = j - (nd - b->ndim);
        int64_t sa = ja >= 0 ? a->shape[ja] : 1, sb = jb >= 0 ? b->shape[jb] : 1;
        shape[j] = sa == 1 ? sb : sa;
    }
    gs_array_h h;
    TX_OK(gs_array_binary(op, a->h, b->h, &h));
    tx_t *t = tx_new(h, nd, shape);
    int64_t ra[GS_MAX_NDIM], rb[GS_MAX_NDIM], c[GS_MAX_NDIM];
    tx_rowstrides(a, ra);
    tx_rowstrides(b, rb);
    for (int64_t i = 0; i < t->size; i++) {
        int64_t ia = 0, ib = 0;
        tx_coords(t, i, c);
        for (int j = 0; j < nd; j++) {
            int ja = j - (nd - a->ndim), jb = j - (nd - b->ndim);
            if (ja >= 0 && a->shape[ja] != 1) ia += c[j] * ra[ja];
            if (jb >= 0 && b->shape[jb] != 1) ib += c[j] * rb[jb];
        }
        t->v[i] = tx_bin(op, a->v[ia], b->v[ib]);
    }
    return t;
}

/* ---- layout ---- */

/* Python's range semantics for one axis: fills idx[0..n) with the selected indices. */
static inline int64_t tx_axis_indices(int64_t len, const gs_slice_t *s, int64_t *idx)
{
    int64_t step = s->step, start, stop, n = 0;
    if (step > 0) {
        start = (s->flags & GS_SLICE_HAS_START) ? s->start : 0;
        stop = (s->flags & GS_SLICE_HAS_STOP) ? s->stop : len;
        if (start < 0) start += len;
        if (stop < 0) stop += len;
        if (start < 0) start = 0;
        if (stop > len) stop = len;
        for (int64_t i = start; i < stop; i += step) idx[n++] = i;
    } else {
        start = (s->flags & GS_SLICE_HAS_START) ? s->start : len - 1;
        if (s->flags & GS_SLICE_HAS_STOP) {
            stop = s->stop;
            if (stop < 0) stop += len;
            if (stop < -1) stop = -1;
        } else {
            stop = -1;
        }
        if ((s->flags & GS_SLICE_HAS_START) && start < 0) start += len;
        if (start > len - 1) start = len - 1;
        for (int64_t i = start; i > stop && i >= 0; i += step) idx[n++] = i;
    }
    return n;
}

static inline tx_t *tx_slice(tx_t *a, int n, const gs_slice_t *s)
{
    int64_t *idx[GS_MAX_NDIM] = {0}, cnt[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    int nd = 0;
    for (int ax = 0; ax < a->ndim; ax++) {
        idx[ax] = malloc((size_t)(a->shape[ax] + 1) * sizeof(int64_t));
        if (ax < n && (s[ax].flags & GS_SLICE_INDEX)) {
            idx[ax][0] = s[ax].start < 0 ? s[ax].start + a->shape[ax] : s[ax].start;
            cnt[ax] = 1;
            continue;
        }
        if (ax < n) {
            cnt[ax] = tx_axis_indices(a->shape[ax], &s[ax], idx[ax]);
        } else {
            for (int64_t i = 0; i < a->shape[ax]; i++) idx[ax][i] = i;
            cnt[ax] = a->shape[ax];
        }
        shape[nd++] = cnt[ax];
    }
    gs_array_h h;
    TX_OK(gs_array_slice(a->h, n, s, &h));
    tx_t *t = tx_new(h, nd, shape);
    int64_t ra[GS_MAX_NDIM], c[GS_MAX_NDIM];
    tx_rowstrides(a, ra);
    for (int64_t i = 0; i < t->size; i++) {
        int64_t src = 0;
        int j = 0;
        tx_coords(t, i, c);
        for (int ax = 0; ax < a->ndim; ax++) {
            int isidx = ax < n && (s[ax].flags & GS_SLICE_INDEX);
            src += idx[ax][isidx ? 0 : c[j]] * ra[ax];
            if (!isidx) j++;
        }
        t->v[i] = a->v[src];
    }
    for (int ax = 0; ax < a->ndim; ax++) free(idx[ax]);
    return t;
}

static inline gs_slice_t SL(int64_t start, int64_t stop, int64_t step, unsigned flags)
{
    gs_slice_t s = {start, stop, step, flags};
    return s;
}
#define SL_ALL SL(0, 0, 1, 0)
#define SL_STEP(k) SL(0, 0, (k), 0)
#define SL_IDX(i) SL((i), 0, 1, GS_SLICE_INDEX)
#define SL_RANGE(a, b, k) SL((a), (b), (k), GS_SLICE_HAS_START | GS_SLICE_HAS_STOP)

static inline tx_t *tx_transpose(tx_t *a, const int *perm)
{
    int p[GS_MAX_NDIM];
    int64_t shape[GS_MAX_NDIM];
    for (int i = 0; i < a->ndim; i++) {
        p[i] = perm ? perm[i] : a->ndim - 1 - i;
        shape[i] = a->shape[p[i]];
    }
    gs_array_h h;
    TX_OK(gs_array_transpose(a->h, perm, &h));
    tx_t *t = tx_new(h, a->ndim, shape);
    int64_t ra[GS_MAX_NDIM], c[GS_MAX_NDIM];
    tx_rowstrides(a, ra);
    for (int64_t i = 0; i < t->size; i++) {
        int64_t src = 0;
        tx_coords(t, i, c);
        for (int j = 0; j < a->ndim; j++) src += c[j] * ra[p[j]];
        t->v[i] = a->v[src];
    }
    return t;
}

/* ---- reductions (two-pass, long double) ---- */

static inline double tx_red_vals(gs_redop_t op, const double *x, int64_t n, double ddof,
                                 int64_t *argi)
{
    long double s = 0, m, m2 = 0;
    int64_t best = 0;
    switch (op) {
    case GS_RED_SUM:
        for (int64_t i = 0; i < n; i++) s += x[i];
        return (double)s;
    case GS_RED_PROD:
        s = 1;
        for (int64_t i = 0; i < n; i++) s *= x[i];
        return (double)s;
    case GS_RED_MEAN:
        if (n == 0) return NAN;
        for (int64_t i = 0; i < n; i++) s += x[i];
        return (double)(s / n);
    case GS_RED_VAR: case GS_RED_STD:
        if (n - ddof <= 0) return NAN;
        for (int64_t i = 0; i < n; i++) s += x[i];
        m = s / n;
        for (int64_t i = 0; i < n; i++) m2 += (x[i] - m) * (x[i] - m);
        m2 /= (n - ddof);
        return op == GS_RED_VAR ? (double)m2 : sqrt((double)m2);
    case GS_RED_MIN: case GS_RED_ARGMIN:
        for (int64_t i = 1; i < n; i++) {
            if (isnan(x[best])) break;
            if (isnan(x[i]) || x[i] < x[best]) best = i;
        }
        if (argi) *argi = best;
        return op == GS_RED_MIN ? x[best] : (double)best;
    case GS_RED_MAX: case GS_RED_ARGMAX:
        for (int64_t i = 1; i < n; i++) {
            if (isnan(x[best])) break;
            if (isnan(x[i]) || x[i] > x[best]) best = i;
        }
        if (argi) *argi = best;
        return op == GS_RED_MAX ? x[best] : (double)best;
    default:
        cr_assert_fail("bad redop");
        return 0;
    }
}

/* axis < 0: all axes. split_every 0: default. */
static inline tx_t *tx_reduce(gs_redop_t op, tx_t *a, int axis, double ddof, int split_every)
{
    gs_reduce_params_t p;
    memset(&p, 0, sizeof(p));
    p.field_mask = GS_REDUCE_FIELD_DDOF;
    p.ddof = ddof;
    if (axis >= 0) {
        p.field_mask |= GS_REDUCE_FIELD_AXIS;
        p.axis = axis;
    }
    if (split_every > 0) {
        p.field_mask |= GS_REDUCE_FIELD_SPLIT_EVERY;
        p.split_every = split_every;
    }
    gs_array_h h;
    TX_OK(gs_array_reduce(op, a->h, &p, &h));
    int64_t shape[GS_MAX_NDIM] = {0};
    int nd = 0;
    for (int i = 0; i < a->ndim && axis >= 0; i++)
        if (i != axis) shape[nd++] = a->shape[i];
    tx_t *t = tx_new(h, nd, shape);
    if (axis < 0) {
        t->v[0] = tx_red_vals(op, a->v, a->size, ddof, NULL);
        return t;
    }
    int64_t ra[GS_MAX_NDIM], len = a->shape[axis];
    double *line = malloc((size_t)(len ? len : 1) * sizeof(double));
    tx_rowstrides(a, ra);
    for (int64_t i = 0; i < t->size; i++) {
        int64_t c[GS_MAX_NDIM], base = 0;
        tx_coords(t, i, c);
        for (int ax = 0, j = 0; ax < a->ndim; ax++) {
            if (ax == axis) continue;
            base += c[j++] * ra[ax];
        }
        for (int64_t k = 0; k < len; k++) line[k] = a->v[base + k * ra[axis]];
        t->v[i] = tx_red_vals(op, line, len, ddof, NULL);
    }
    free(line);
    return t;
}

#endif
