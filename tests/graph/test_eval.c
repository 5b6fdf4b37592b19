/* End-to-end: lower expressions under every combination of lowering flags, round-trip every
 * layer through the codec, run the task graph with the CPU backend's serial evaluator and
 * compare with whole-array references computed by naive loops (graph_test_util.h). */
#include "graph_test_util.h"
#include "graph_eval_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"

#include <stdio.h>
#include <stdlib.h>

static gs_chunkops_ctx_h ctx;

static void setup(void)
{
    ctx = gx_ctx_create();
}

static void teardown(void)
{
    tx_free_all();
    gx_ctx_destroy(ctx);
}

TestSuite(graph_eval, .init = setup, .fini = teardown, .timeout = 120);

static double *eval_flags(gs_array_h h, unsigned flags, gs_taskgraph_t **tg_keep)
{
    gs_taskgraph_t *tg;
    int64_t size = gs_array_size(h);
    double *out = malloc((size_t)(size ? size : 1) * sizeof(double));
    cr_assert_not_null(out);
    TX_OK(gs_graph_lower(h, flags, &tg));
    TX_OK(gs_taskgraph_validate(tg));
    /* whatever the lowering rewrote, the result keeps the array's chunk grid */
    cr_assert_eq(tg->out_grid.ndim, gs_array_ndim(h));
    for (int ax = 0; ax < tg->out_grid.ndim; ax++) {
        cr_assert_eq(tg->out_grid.nchunks[ax], gs_array_nchunks(h, ax));
        cr_assert(memcmp(tg->out_grid.bounds[ax], gs_array_chunk_bounds(h, ax),
                         (size_t)(tg->out_grid.nchunks[ax] + 1) * sizeof(int64_t)) == 0,
                  "flags 0x%x: chunk bounds of axis %d differ from the array's", flags, ax);
    }
    gx_roundtrip_layers(tg);
    TX_OK(gs_taskgraph_validate(tg));
    TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)size));
    {
        /* the result comes in the array's dtype: widen to doubles in place, from the end */
        const gs_dtype_t dt = (gs_dtype_t)gs_array_dtype(h);
        const size_t es = gs_dtype_size(dt);
        for (int64_t i = size - 1; i >= 0; i--)
            out[i] = gs_dtype_to_double(dt, (const char *)out + (size_t)i * es);
    }
    if (tg_keep) *tg_keep = tg;
    else gs_taskgraph_free(tg);
    return out;
}

static int close_to(double got, double want, double rtol)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= rtol * fmax(1.0, fabs(want));
}

static void check_flags(tx_t *t, unsigned flags, const char *what)
{
    double *out = eval_flags(t->h, flags, NULL);
    for (int64_t i = 0; i < t->size; i++)
        cr_assert(close_to(out[i], t->v[i], 1e-12),
                  "%s, flags 0x%x: element %lld is %.17g, reference %.17g", what, flags,
                  (long long)i, out[i], t->v[i]);
    free(out);
}

/* every combination of CULL, FUSE, SLICE_PUSHDOWN */
static void check(tx_t *t, const char *what)
{
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) check_flags(t, f, what);
}

/* ---- the seed expression ---- */

Test(graph_eval, seed_expression_agrees_across_chunkings_and_flags)
{
    const int64_t ns[] = {60, 64, 100};
    const int64_t cs[] = {7, 10, 32, 100};
    for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
        double first = NAN;
        int64_t n = ns[a];
        int64_t cnt = ((n + 1) / 2) * ((n + 1) / 2);
        for (size_t b = 0; b < sizeof(cs) / sizeof(cs[0]); b++) {
            int64_t shape[2] = {n, n}, chunks[2] = {cs[b], cs[b]};
            gs_slice_t s[2] = {SL_STEP(2), SL_STEP(2)};
            tx_t *x = tx_normal(42, 10.0, 1.0, 2, shape, chunks);
            tx_t *y = tx_scalar_r(GS_BINARY_ADD, x, 1.0);
            tx_t *z = tx_slice(y, 2, s);
            tx_t *r = tx_reduce(GS_RED_SUM, z, -1, 0, 0);
            char what[64];
            snprintf(what, sizeof(what), "seed n=%lld chunk=%lld", (long long)n, (long long)cs[b]);
            check(r, what);
            for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
                double *out = eval_flags(r->h, f, NULL);
                if (isnan(first)) first = out[0];
                cr_assert(fabs(out[0] - first) <= 1e-12 * fabs(first),
                          "%s flags 0x%x: %.17g differs from %.17g", what, f, out[0], first);
                free(out);
            }
            tx_free_all();
        }
        double mean = first / (double)cnt;
        /* std of the mean is 1/sqrt(cnt) <= 0.034: 6 sigma */
        cr_assert(fabs(mean - 11.0) < 0.2, "n=%lld: mean %g is not about 11", (long long)n, mean);
    }
}

Test(graph_eval, seed_expression_mean_is_eleven)
{
    int64_t shape[2] = {64, 64}, chunks[2] = {10, 10};
    gs_slice_t s[2] = {SL_STEP(2), SL_STEP(2)};
    tx_t *x = tx_normal(7, 10.0, 1.0, 2, shape, chunks);
    tx_t *y = tx_scalar_r(GS_BINARY_ADD, x, 1.0);
    tx_t *z = tx_slice(y, 2, s);
    tx_t *r = tx_reduce(GS_RED_MEAN, z, -1, 0, 0);
    check(r, "seed mean");
    double *out = eval_flags(r->h, GS_LOWER_DEFAULT, NULL);
    cr_assert(fabs(out[0] - 11.0) < 0.2, "mean %g", out[0]);
    free(out);
}

/* ---- generators ---- */

Test(graph_eval, generators_with_uneven_chunks)
{
    int64_t shape[2] = {13, 29}, chunks[2] = {4, 7};
    check(tx_normal(3, -2.0, 0.5, 2, shape, chunks), "normal");
    check(tx_uniform(4, -1.0, 3.0, 2, shape, chunks), "uniform");
    check(tx_full(2.5, 2, shape, chunks), "full");
    check(tx_arange(-3.0, 0.25, 2, shape, chunks), "arange");
    check(tx_host(2, shape, chunks), "from_host");
}

Test(graph_eval, generators_in_three_dimensions)
{
    int64_t shape[3] = {5, 6, 7}, chunks[3] = {2, 4, 3};
    check(tx_normal(9, 0.0, 1.0, 3, shape, chunks), "normal 3d");
    check(tx_host(3, shape, chunks), "host 3d");
    check(tx_arange(1.0, 2.0, 3, shape, chunks), "arange 3d");
}

/* ---- elementwise ---- */

Test(graph_eval, every_unary_op)
{
    int64_t shape[2] = {9, 11}, chunks[2] = {4, 5};
    tx_t *x = tx_uniform(11, 0.1, 3.0, 2, shape, chunks);
    tx_t *y = tx_normal(12, 0.0, 2.0, 2, shape, chunks);
    tx_t *z = tx_uniform(13, -0.99, 0.99, 2, shape, chunks);
    for (int op = 0; op < GS_UNARY_COUNT; op++) {
        char what[32];
        tx_t *in = y;   /* the whole real line */
        if (op == GS_UNARY_LOG || op == GS_UNARY_SQRT || op == GS_UNARY_LOG2 ||
            op == GS_UNARY_LOG10)
            in = x;
        else if (op == GS_UNARY_ARCSIN || op == GS_UNARY_ARCCOS || op == GS_UNARY_LOG1P)
            in = z;
        snprintf(what, sizeof(what), "unary %d", op);
        check(tx_unary((gs_unop_t)op, in), what);
    }
}

/* Edge values of the NumPy-specific ops, NumPy's results written out: sign of zeros and NaN,
 * halves to even, mod and floor_divide signs, by zero and by infinity, truth of NaN. */
Test(graph_eval, numpy_edge_values_of_the_extended_ops)
{
    static const double a[12] = {-7, 7, -7.5, 0, 1, -1, 0, 5, -5, NAN, 2.5, -0.5};
    static const double b[12] = {3, -3, 2, -3, 0, 0, 0, 0, INFINITY, 1, -2.5, 0};
    static const struct { gs_binop_t op; double want[12]; } bin[] = {
        {GS_BINARY_MOD, {2, -2, 0.5, -0.0, NAN, NAN, NAN, NAN, INFINITY, NAN, -0.0, NAN}},
        {GS_BINARY_FLOOR_DIVIDE,
         {-3, -3, -4, -0.0, INFINITY, -INFINITY, NAN, INFINITY, -1, NAN, -1, -INFINITY}},
        {GS_BINARY_LOGICAL_AND, {1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0}},
        {GS_BINARY_LOGICAL_OR, {1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}},
        {GS_BINARY_LOGICAL_XOR, {0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 1}},
    };
    static const struct { gs_unop_t op; double want[12]; } un[] = {
        {GS_UNARY_SIGN, {-1, 1, -1, 0, 1, -1, 0, 1, -1, NAN, 1, -1}},
        {GS_UNARY_ROUND, {-7, 7, -8, 0, 1, -1, 0, 5, -5, NAN, 2, -0.0}},
        {GS_UNARY_TRUNC, {-7, 7, -7, 0, 1, -1, 0, 5, -5, NAN, 2, -0.0}},
        {GS_UNARY_FLOOR, {-7, 7, -8, 0, 1, -1, 0, 5, -5, NAN, 2, -1}},
        {GS_UNARY_CEIL, {-7, 7, -7, 0, 1, -1, 0, 5, -5, NAN, 3, -0.0}},
        {GS_UNARY_ISNAN, {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}},
        {GS_UNARY_LOGICAL_NOT, {0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0}},
        {GS_UNARY_RECIPROCAL, {-1.0 / 7, 1.0 / 7, -1 / 7.5, INFINITY, 1, -1, INFINITY, 0.2, -0.2,
                               NAN, 0.4, -2}},
    };
    int64_t shape[1] = {12}, chunks[1] = {5};
    gs_array_h ha, hb;
    TX_OK(gs_array_from_host(a, 1, shape, chunks, &ha));
    TX_OK(gs_array_from_host(b, 1, shape, chunks, &hb));
    tx_t *ta = tx_new(ha, 1, shape), *tb = tx_new(hb, 1, shape);
    for (size_t k = 0; k < sizeof(bin) / sizeof(bin[0]); k++) {
        gs_array_h h;
        TX_OK(gs_array_binary(bin[k].op, ta->h, tb->h, &h));
        tx_t *t = tx_new(h, 1, shape);
        memcpy(t->v, bin[k].want, sizeof(bin[k].want));
        check(t, "binary edge values");
        double *got = eval_flags(h, GS_LOWER_DEFAULT, NULL);
        for (int i = 0; i < 12; i++)   /* the sign of zero results too */
            if (bin[k].want[i] == 0.0)
                cr_assert_eq(signbit(got[i]) != 0, signbit(bin[k].want[i]) != 0,
                             "binary %d element %d: %g", (int)bin[k].op, i, got[i]);
        free(got);
        /* the scalar forms agree with the array form */
        TX_OK(gs_array_binary_array_scalar(bin[k].op, ta->h, -2.5, &h));
        t = tx_new(h, 1, shape);
        for (int i = 0; i < 12; i++) t->v[i] = tx_bin(bin[k].op, a[i], -2.5);
        check(t, "array op scalar edge values");
        TX_OK(gs_array_binary_scalar_array(bin[k].op, -2.5, ta->h, &h));
        t = tx_new(h, 1, shape);
        for (int i = 0; i < 12; i++) t->v[i] = tx_bin(bin[k].op, -2.5, a[i]);
        check(t, "scalar op array edge values");
    }
    for (size_t k = 0; k < sizeof(un) / sizeof(un[0]); k++) {
        gs_array_h h;
        TX_OK(gs_array_unary(un[k].op, ta->h, &h));
        tx_t *t = tx_new(h, 1, shape);
        memcpy(t->v, un[k].want, sizeof(un[k].want));
        check(t, "unary edge values");
    }
}

Test(graph_eval, every_binary_op_array_and_scalar)
{
    int64_t shape[2] = {8, 10}, chunks[2] = {3, 4}, chunks2[2] = {5, 3};
    tx_t *x = tx_uniform(21, 0.5, 2.0, 2, shape, chunks);
    tx_t *y = tx_uniform(22, 0.5, 2.0, 2, shape, chunks2);
    tx_t *r = tx_scalar_l(GS_BINARY_MUL, 1.0, tx_unary(GS_UNARY_NEG, tx_unary(GS_UNARY_NEG, x)));
    for (int op = 0; op < GS_BINARY_COUNT; op++) {
        char what[48];
        snprintf(what, sizeof(what), "binary %d", op);
        check(tx_binary((gs_binop_t)op, x, y), what);
        check(tx_binary((gs_binop_t)op, x, r), what);   /* equal operands: EQ/LE/GE true */
        snprintf(what, sizeof(what), "array op scalar %d", op);
        check(tx_scalar_r((gs_binop_t)op, x, 1.25), what);
        snprintf(what, sizeof(what), "scalar op array %d", op);
        check(tx_scalar_l((gs_binop_t)op, 1.25, x), what);
    }
}

/* The deprecated names keep their operand order: binary_scalar is a OP s, scalar_binary s OP a. */
Test(graph_eval, deprecated_scalar_names_keep_their_operand_order)
{
    int64_t shape[1] = {9}, chunks[1] = {4};
    tx_t *x = tx_arange(1.0, 1.0, 1, shape, chunks);
    gs_array_h h;
    TX_OK(gs_array_binary_scalar(GS_BINARY_SUB, x->h, 10.0, &h));
    tx_t *t = tx_new(h, 1, shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = x->v[i] - 10.0;
    check(t, "binary_scalar: a - 10");
    TX_OK(gs_array_scalar_binary(GS_BINARY_SUB, 10.0, x->h, &h));
    t = tx_new(h, 1, shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = 10.0 - x->v[i];
    check(t, "scalar_binary: 10 - a");
}

/* The public slice helpers (array.h) select what NumPy's a[...] does. */
Test(graph_eval, public_slice_helpers_match_numpy)
{
    int64_t shape[2] = {13, 11}, chunks[2] = {4, 3};
    tx_t *x = tx_normal(43, 0, 1, 2, shape, chunks);
    gs_slice_t cases[][2] = {
        {GS_SLICE_ALL, GS_SLICE_STEP(-1)},
        {GS_SLICE(1, 12, 3), GS_SLICE_AT(-2)},
        {GS_SLICE_FROM(-3, -1), GS_SLICE_TO(7, 2)},
        {GS_SLICE_AT(5), GS_SLICE(9, -12, -4)},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char what[32];
        snprintf(what, sizeof(what), "helper case %zu", i);
        check(tx_slice(x, 2, cases[i]), what);
    }
}

Test(graph_eval, clip_keeps_nan_and_follows_numpy_for_crossed_bounds)
{
    static const double a[7] = {-3, -0.5, 0, 0.25, 2, NAN, INFINITY};
    int64_t shape[1] = {7}, chunks[1] = {3};
    gs_array_h h, c;
    TX_OK(gs_array_from_host(a, 1, shape, chunks, &h));
    tx_t *x = tx_new(h, 1, shape);
    static const struct { double lo, hi, want[7]; } cases[] = {
        {-1, 1, {-1, -0.5, 0, 0.25, 1, NAN, 1}},
        {0.5, -0.5, {-0.5, -0.5, -0.5, -0.5, -0.5, NAN, -0.5}},   /* lo > hi: hi */
        {-INFINITY, 0, {-3, -0.5, 0, 0, 0, NAN, 0}},
        {0, INFINITY, {0, 0, 0, 0.25, 2, NAN, INFINITY}},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        TX_OK(gs_array_clip(x->h, cases[k].lo, cases[k].hi, &c));
        tx_t *t = tx_new(c, 1, shape);
        memcpy(t->v, cases[k].want, sizeof(cases[k].want));
        check(t, "clip");
    }
}

Test(graph_eval, zeros_ones_and_like_arrays)
{
    int64_t shape[2] = {7, 5}, chunks[2] = {3, 2};
    tx_t *x = tx_normal(5, 0, 1, 2, shape, chunks);
    gs_slice_t s[2] = {GS_SLICE_STEP(-2), GS_SLICE(1, 5, 3)};
    tx_t *y = tx_slice(x, 2, s);   /* irregular chunks */
    gs_array_h h;
    TX_OK(gs_array_zeros(2, shape, chunks, &h));
    tx_t *t = tx_new(h, 2, shape);
    check(t, "zeros");
    TX_OK(gs_array_ones(2, shape, chunks, &h));
    t = tx_new(h, 2, shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = 1.0;
    check(t, "ones");
    TX_OK(gs_array_full_like(y->h, -2.5, &h));
    cr_assert_eq(gs_array_ndim(h), 2);
    for (int ax = 0; ax < 2; ax++) {
        cr_assert_eq(gs_array_nchunks(h, ax), gs_array_nchunks(y->h, ax));
        cr_assert(memcmp(gs_array_chunk_bounds(h, ax), gs_array_chunk_bounds(y->h, ax),
                         (size_t)(gs_array_nchunks(h, ax) + 1) * sizeof(int64_t)) == 0);
    }
    t = tx_new(h, y->ndim, y->shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = -2.5;
    check(t, "full_like of a slice");
    TX_OK(gs_array_ones_like(y->h, &h));
    t = tx_new(h, y->ndim, y->shape);
    for (int64_t i = 0; i < t->size; i++) t->v[i] = 1.0;
    check(t, "ones_like");
    /* like a 0-d array */
    gs_array_h sum, z;
    TX_OK(gs_array_reduce(GS_RED_SUM, x->h, NULL, &sum));
    TX_OK(gs_array_zeros_like(sum, &z));
    gs_array_release(sum);
    cr_assert_eq(gs_array_ndim(z), 0);
    t = tx_new(z, 0, shape);
    check(t, "zeros_like of a 0-d array");
}

Test(graph_eval, broadcasting_with_different_chunkings)
{
    int64_t sa[2] = {12, 1}, ca[2] = {5, 1}, sb[1] = {17}, cb[1] = {4};
    tx_t *a = tx_normal(31, 0, 1, 2, sa, ca);
    tx_t *b = tx_arange(0.0, 1.0, 1, sb, cb);
    check(tx_binary(GS_BINARY_ADD, a, b), "(12,1)+(17,)");
    check(tx_binary(GS_BINARY_SUB, b, a), "(17,)-(12,1)");
    int64_t s3[3] = {4, 1, 5}, c3[3] = {3, 1, 2}, s2[2] = {3, 1}, c2[2] = {2, 1};
    tx_t *p = tx_host(3, s3, c3);
    tx_t *q = tx_uniform(32, 0, 1, 2, s2, c2);
    check(tx_binary(GS_BINARY_MUL, p, q), "(4,1,5)*(3,1)");
    int64_t s4[2] = {6, 10}, c4[2] = {4, 3}, c5[2] = {2, 5};
    tx_t *u = tx_normal(33, 1, 1, 2, s4, c4);
    tx_t *v = tx_normal(34, 1, 1, 2, s4, c5);
    tx_t *w = tx_binary(GS_BINARY_MAXIMUM, u, v);
    check(w, "union chunking");
    cr_assert_eq(gs_array_nchunks(w->h, 0), 3);   /* 0,4,6 | 0,2,4,6 -> 0,2,4,6 */
    cr_assert_eq(gs_array_nchunks(w->h, 1), 5);   /* 0,3,6,9,10 | 0,5,10 -> 0,3,5,6,9,10 */
    int64_t s1[1] = {1}, c1[1] = {1};
    tx_t *one = tx_full(3.0, 1, s1, c1);
    check(tx_binary(GS_BINARY_POW, u, one), "broadcast length-1 array");
}

/* ---- slicing ---- */

Test(graph_eval, slices_with_steps_negative_steps_and_indices)
{
    int64_t shape[2] = {23, 17}, chunks[2] = {5, 4};
    tx_t *x = tx_normal(41, 0, 1, 2, shape, chunks);
    gs_slice_t cases[][2] = {
        {SL_STEP(3), SL_STEP(3)},
        {SL_STEP(-1), SL_ALL},
        {SL_STEP(-3), SL_STEP(-2)},
        {SL_RANGE(20, 2, -3), SL_RANGE(1, 16, 4)},
        {SL_RANGE(-5, -1, 1), SL_RANGE(-100, 100, 2)},
        {SL_IDX(7), SL_STEP(2)},
        {SL_RANGE(2, 21, 3), SL_IDX(-1)},
        {SL_RANGE(4, 4, 1), SL_ALL},              /* empty */
        {SL_RANGE(100, 200, 1), SL_STEP(-5)},      /* empty by clipping */
        {SL(5, 0, -2, GS_SLICE_HAS_START), SL(0, 3, 1, GS_SLICE_HAS_STOP)},
        {SL_RANGE(3, 4, 1000), SL_RANGE(16, 0, -1000)},   /* one element, huge steps */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char what[32];
        snprintf(what, sizeof(what), "slice case %zu", i);
        check(tx_slice(x, 2, cases[i]), what);
    }
    gs_slice_t both[2] = {SL_IDX(3), SL_IDX(-2)};
    check(tx_slice(x, 2, both), "both indexed");
    gs_slice_t first[1] = {SL_STEP(-2)};
    check(tx_slice(x, 1, first), "one slice of two axes");
}

Test(graph_eval, slices_of_slices_of_transposes)
{
    int64_t shape[3] = {10, 12, 9}, chunks[3] = {3, 5, 4};
    int perm[3] = {2, 0, 1};
    tx_t *x = tx_arange(0.0, 1.0, 3, shape, chunks);
    tx_t *t = tx_transpose(x, perm);
    gs_slice_t s1[3] = {SL_STEP(-2), SL_RANGE(1, 9, 3), SL_ALL};
    tx_t *y = tx_slice(t, 3, s1);
    gs_slice_t s2[3] = {SL_IDX(1), SL_STEP(-1), SL_RANGE(2, 11, 2)};
    tx_t *z = tx_slice(y, 3, s2);
    check(z, "slice(slice(transpose(arange)))");
    check(tx_slice(tx_transpose(tx_normal(5, 0, 1, 3, shape, chunks), NULL), 3, s1),
          "slice(transpose(normal))");
    check(tx_slice(tx_host(3, shape, chunks), 3, s2), "slice(host)");
}

/* ---- slices and transposes above elementwise nodes (pushed down by SLICE_PUSHDOWN) ---- */

#define SL_FROM(a, k) SL((a), 0, (k), GS_SLICE_HAS_START)

Test(graph_eval, slices_above_elementwise_chains)
{
    int64_t shape[2] = {23, 17}, chunks[2] = {5, 4};
    tx_t *x = tx_normal(501, 0, 1, 2, shape, chunks);
    tx_t *y = tx_unary(GS_UNARY_SQRT, tx_unary(GS_UNARY_ABS, tx_scalar_l(GS_BINARY_SUB, 2.0,
                       tx_scalar_r(GS_BINARY_MUL, x, 3.0))));
    gs_slice_t cases[][2] = {
        {SL_STEP(2), SL_STEP(2)},
        {SL_STEP(-3), SL_RANGE(1, 16, 4)},
        {SL_RANGE(20, 2, -3), SL_STEP(-1)},
        {SL_IDX(7), SL_STEP(-2)},
        {SL_RANGE(2, 21, 3), SL_IDX(-1)},
        {SL_IDX(-4), SL_IDX(3)},
        {SL_RANGE(4, 4, 1), SL_ALL},                      /* empty */
        {SL_RANGE(3, 4, 1000), SL_RANGE(16, 0, -1000)},   /* one element, huge steps */
    };
    gs_slice_t again[1] = {SL_STEP(-2)};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char what[48];
        tx_t *z = tx_slice(y, 2, cases[i]);
        snprintf(what, sizeof(what), "slice case %zu of a chain", i);
        check(z, what);
        snprintf(what, sizeof(what), "sum of slice case %zu of a chain", i);
        check(tx_reduce(GS_RED_SUM, z, -1, 0, 0), what);
        if (z->ndim > 0) {
            snprintf(what, sizeof(what), "slice of slice case %zu of a chain", i);
            check(tx_slice(tx_scalar_r(GS_BINARY_ADD, z, 1.0), 1, again), what);
        }
    }
    /* a slice taking everything, and a slice of a 0-d array */
    gs_slice_t all[2] = {SL_ALL, SL_ALL};
    check(tx_slice(tx_unary(GS_UNARY_NEG, x), 2, all), "full slice of -x");
    check(tx_slice(tx_reduce(GS_RED_MAX, y, -1, 0, 0), 0, NULL), "slice of a 0-d array");
    /* the seed expression with odd shapes and steps */
    int64_t s3[3] = {9, 8, 7}, c3[3] = {4, 3, 5};
    gs_slice_t k[3] = {SL_STEP(2), SL_STEP(-3), SL_RANGE(1, 7, 2)};
    tx_t *u = tx_slice(tx_scalar_r(GS_BINARY_ADD, tx_uniform(502, 0, 1, 3, s3, c3), 1.0), 3, k);
    check(tx_reduce(GS_RED_SUM, u, -1, 0, 0), "3-d seed");
    check(tx_reduce(GS_RED_ARGMAX, u, 1, 0, 0), "argmax of a sliced 3-d chain");
}

Test(graph_eval, slices_above_broadcasting_binaries)
{
    int64_t sa[2] = {12, 1}, ca[2] = {5, 1}, sb[1] = {17}, cb[1] = {4};
    tx_t *a = tx_normal(511, 0, 1, 2, sa, ca);
    tx_t *b = tx_arange(0.0, 1.0, 1, sb, cb);
    tx_t *c = tx_binary(GS_BINARY_ADD, a, b);                     /* (12, 17) */
    tx_t *c2 = tx_binary(GS_BINARY_SUB, b, tx_unary(GS_UNARY_EXP, a));
    gs_slice_t cases[][2] = {
        {SL_STEP(2), SL_STEP(-3)},
        {SL_IDX(3), SL_ALL},
        {SL_ALL, SL_IDX(-2)},
        {SL_IDX(0), SL_IDX(16)},
        {SL_RANGE(5, 5, 1), SL_STEP(2)},                   /* empty rows */
        {SL_STEP(3), SL_RANGE(9, 9, 1)},                   /* empty columns */
        {SL_RANGE(-1, 0, -4), SL_RANGE(2, 9, 3)},
        {SL_RANGE(0, 1, 1), SL_RANGE(4, 5, 1)},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char what[48];
        snprintf(what, sizeof(what), "(12,1)+(17,) slice case %zu", i);
        check(tx_slice(c, 2, cases[i]), what);
        snprintf(what, sizeof(what), "(17,)-exp(12,1) slice case %zu", i);
        check(tx_slice(c2, 2, cases[i]), what);
    }
    /* (4,1,5) * (3,1): both operands broadcast on some axis */
    int64_t s3[3] = {4, 1, 5}, c3[3] = {3, 1, 2}, s2[2] = {3, 1}, c2s[2] = {2, 1};
    tx_t *p = tx_host(3, s3, c3);
    tx_t *q = tx_uniform(512, 0, 1, 2, s2, c2s);
    tx_t *pq = tx_binary(GS_BINARY_MUL, p, q);                    /* (4, 3, 5) */
    gs_slice_t k3[][3] = {
        {SL_IDX(1), SL_STEP(-1), SL_STEP(2)},
        {SL_STEP(2), SL_IDX(2), SL_IDX(-1)},
        {SL_ALL, SL_RANGE(0, 1, 1), SL_STEP(3)},
        {SL_STEP(-3), SL_STEP(2), SL_ALL},
    };
    for (size_t i = 0; i < sizeof(k3) / sizeof(k3[0]); i++) {
        char what[48];
        snprintf(what, sizeof(what), "(4,1,5)*(3,1) slice case %zu", i);
        check(tx_slice(pq, 3, k3[i]), what);
    }
    /* operands chunked differently: the result is chunked at the union */
    int64_t s4[2] = {6, 10}, c4[2] = {4, 3}, c5[2] = {2, 5};
    tx_t *u = tx_normal(513, 1, 1, 2, s4, c4);
    tx_t *v = tx_normal(514, 1, 1, 2, s4, c5);
    tx_t *w = tx_binary(GS_BINARY_MAXIMUM, tx_unary(GS_UNARY_ABS, u), v);
    gs_slice_t kw[2] = {SL_STEP(-1), SL_RANGE(1, 10, 2)};
    check(tx_slice(w, 2, kw), "slice of max(|u|, v), different chunks");
    /* 0-d operands */
    tx_t *s0 = tx_reduce(GS_RED_SUM, u, -1, 0, 0);
    gs_slice_t k0[2] = {SL_STEP(2), SL_IDX(1)};
    check(tx_slice(tx_binary(GS_BINARY_MUL, u, s0), 2, k0), "(u * u.sum())[::2, 1]");
    check(tx_slice(tx_binary(GS_BINARY_SUB, s0, v), 2, kw), "(v.sum() - v)[::-1, 1:10:2]");
}

Test(graph_eval, transposes_above_elementwise_nodes)
{
    int64_t shape[3] = {10, 12, 9}, chunks[3] = {3, 5, 4};
    int perm[3] = {2, 0, 1}, swap12[3] = {0, 2, 1}, swap01[3] = {1, 0, 2};
    tx_t *x = tx_normal(521, 0, 1, 3, shape, chunks);
    tx_t *y = tx_unary(GS_UNARY_EXP, tx_scalar_r(GS_BINARY_MUL, x, 0.1));
    tx_t *t = tx_transpose(y, perm);
    check(t, "transpose of a chain");
    gs_slice_t s1[3] = {SL_STEP(-2), SL_RANGE(1, 9, 3), SL_IDX(4)};
    check(tx_slice(t, 3, s1), "slice of a transposed chain");
    gs_slice_t s2[3] = {SL_IDX(1), SL_STEP(-1), SL_RANGE(2, 11, 2)};
    check(tx_slice(tx_transpose(tx_slice(y, 3, s2), NULL), 2, s2), "slice(T(slice(chain)))");
    /* transposes above binaries: every operand axis present */
    int64_t c2[3] = {5, 4, 3};
    tx_t *z = tx_arange(0.0, 0.5, 3, shape, c2);
    check(tx_slice(tx_transpose(tx_binary(GS_BINARY_ADD, x, z), perm), 3, s1),
          "slice(T(x + z)), different chunks");
    /* (3,4,5) + (4,5): a transpose keeping the operand's axes last moves down, another not */
    int64_t sp[3] = {3, 4, 5}, cp[3] = {2, 3, 2}, sq[2] = {4, 5}, cq[2] = {2, 2};
    tx_t *p = tx_normal(522, 0, 1, 3, sp, cp);
    tx_t *q = tx_uniform(523, 0, 1, 2, sq, cq);
    tx_t *pq = tx_binary(GS_BINARY_DIV, p, q);
    gs_slice_t s3[3] = {SL_STEP(-1), SL_STEP(2), SL_RANGE(1, 4, 1)};
    check(tx_slice(tx_transpose(pq, swap12), 3, s3), "(p / q).transpose(0,2,1) sliced");
    check(tx_slice(tx_transpose(pq, swap01), 3, s3), "(p / q).transpose(1,0,2) sliced");
    check(tx_transpose(pq, NULL), "(p / q).T");
    /* (4,5) + (5,): .T cannot move into the (5,) operand */
    int64_t sa[2] = {4, 5}, ca[2] = {3, 2}, sb[1] = {5}, cb[1] = {3};
    tx_t *a = tx_normal(524, 0, 1, 2, sa, ca);
    tx_t *b = tx_arange(1.0, 1.0, 1, sb, cb);
    tx_t *ab = tx_binary(GS_BINARY_ADD, a, b);
    gs_slice_t s4[2] = {SL_STEP(2), SL_STEP(-1)};
    check(tx_transpose(ab, NULL), "(a + b).T, b lacking an axis");
    check(tx_slice(tx_transpose(ab, NULL), 2, s4), "(a + b).T[::2, ::-1]");
    /* broadcast on both sides, transposed: (4,1) + (1,5) */
    int64_t sc[2] = {4, 1}, cc[2] = {3, 1}, sd[2] = {1, 5}, cd[2] = {1, 2};
    tx_t *cx = tx_normal(525, 0, 1, 2, sc, cc);
    tx_t *dx = tx_host(2, sd, cd);
    gs_slice_t s5[2] = {SL_STEP(-1), SL_RANGE(1, 4, 2)};
    check(tx_slice(tx_transpose(tx_binary(GS_BINARY_POW, dx, tx_unary(GS_UNARY_ABS, cx)), NULL),
                   2, s5), "(|c| ** d).T sliced, both broadcast");
}

Test(graph_eval, shared_nodes_under_slices)
{
    int64_t n1 = 40, c1 = 7;
    tx_t *x = tx_normal(531, 0, 1, 1, &n1, &c1);
    tx_t *y = tx_scalar_r(GS_BINARY_ADD, tx_scalar_r(GS_BINARY_MUL, x, 2.0), 1.0);
    gs_slice_t ev[1] = {SL_STEP(2)}, od[1] = {SL_FROM(1, 2)}, rv[1] = {SL_STEP(-3)};
    check(tx_binary(GS_BINARY_MUL, tx_slice(y, 1, ev), tx_slice(y, 1, od)), "y[::2] * y[1::2]");
    check(tx_slice(tx_binary(GS_BINARY_ADD, y, y), 1, rv), "(y + y)[::-3]");
    check(tx_binary(GS_BINARY_ADD, tx_reduce(GS_RED_SUM, tx_slice(y, 1, ev), -1, 0, 0),
                    tx_reduce(GS_RED_SUM, y, -1, 0, 0)), "y[::2].sum() + y.sum()");
    /* a shared slice */
    gs_slice_t tail[1] = {SL(1, 0, 1, GS_SLICE_HAS_START)}, init[1] = {SL(0, -1, 1, GS_SLICE_HAS_STOP)};
    tx_t *s = tx_slice(tx_unary(GS_UNARY_NEG, x), 1, ev);
    check(tx_binary(GS_BINARY_SUB, tx_slice(s, 1, tail), tx_slice(s, 1, init)), "s[1:] - s[:-1]");
    /* 2-d: a shared chain seen through a slice and a sliced transpose */
    int64_t sh[2] = {14, 14}, ch[2] = {4, 5};
    tx_t *m = tx_unary(GS_UNARY_EXP, tx_scalar_r(GS_BINARY_MUL, tx_normal(532, 0, 1, 2, sh, ch), 0.3));
    gs_slice_t k[2] = {SL_STEP(2), SL_STEP(-2)};
    check(tx_binary(GS_BINARY_ADD, tx_slice(m, 2, k), tx_slice(tx_transpose(m, NULL), 2, k)),
          "m[::2, ::-2] + m.T[::2, ::-2]");
    /* a generator used twice under one slice */
    tx_t *g = tx_normal(533, 0, 1, 2, sh, ch);
    check(tx_slice(tx_binary(GS_BINARY_SUB, g, tx_transpose(g, NULL)), 2, k), "(g - g.T)[::2, ::-2]");
}

Test(graph_eval, slices_above_reductions_and_host_data)
{
    int64_t shape[2] = {13, 11}, chunks[2] = {4, 3};
    tx_t *x = tx_normal(541, 1, 2, 2, shape, chunks);
    tx_t *r0 = tx_reduce(GS_RED_MEAN, x, 0, 0, 0);                /* (11,) */
    gs_slice_t s1[1] = {SL_STEP(-2)};
    check(tx_slice(tx_scalar_r(GS_BINARY_ADD, r0, 1.0), 1, s1), "(x.mean(0) + 1)[::-2]");
    check(tx_slice(tx_binary(GS_BINARY_SUB, x, r0), 2, (gs_slice_t[]){SL_STEP(3), SL_IDX(5)}),
          "(x - x.mean(0))[::3, 5]");
    tx_t *h = tx_host(2, shape, chunks);
    gs_slice_t k[2] = {SL_IDX(2), SL_STEP(2)}, kt[2] = {SL_STEP(-3), SL_RANGE(1, 12, 4)};
    check(tx_slice(tx_scalar_r(GS_BINARY_MUL, h, 2.0), 2, kt), "(host * 2)[::-3, 1:12:4]");
    check(tx_slice(tx_binary(GS_BINARY_ADD, h, x), 2, k), "(host + x)[2, ::2]");
    check(tx_slice(tx_transpose(tx_unary(GS_UNARY_ABS, h), NULL), 2, kt), "|host|.T sliced");
    /* a slice of a reduction's input and of its output */
    tx_t *v = tx_reduce(GS_RED_VAR, tx_slice(tx_scalar_r(GS_BINARY_SUB, x, 1.0), 2, kt), 1, 1.0, 2);
    check(tx_slice(tx_unary(GS_UNARY_SQRT, v), 1, s1), "sqrt(var((x - 1)[...], 1))[::-2]");
}

/* ---- transposes ---- */

Test(graph_eval, transposes_and_x_plus_x_transposed)
{
    int64_t shape[2] = {20, 20}, chunks[2] = {7, 5};
    tx_t *x = tx_normal(51, 0, 1, 2, shape, chunks);
    tx_t *xt = tx_transpose(x, NULL);
    check(xt, "x.T");
    check(tx_binary(GS_BINARY_ADD, x, xt), "x + x.T");
    /* a blockwise node used twice is materialised */
    tx_t *y = tx_scalar_r(GS_BINARY_MUL, x, 2.0);
    check(tx_binary(GS_BINARY_SUB, y, tx_transpose(y, NULL)), "y - y.T");
    int64_t s3[3] = {4, 6, 5}, c3[3] = {3, 4, 2};
    int perm[3] = {1, 2, 0};
    check(tx_transpose(tx_host(3, s3, c3), perm), "transpose host 3d");
}

/* x + x.T of data read from chunks (not a generator: x.T reads x's chunks transposed), on
 * chunkings whose blocks are not square and do not divide the side, stored and summed. */
Test(graph_eval, x_plus_x_transposed_of_chunks_on_odd_chunkings)
{
    static const int64_t cases[][3] = {{37, 8, 11}, {33, 33, 5}, {41, 40, 41}, {9, 2, 3}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int64_t shape[2] = {cases[c][0], cases[c][0]}, chunks[2] = {cases[c][1], cases[c][2]};
        tx_t *x = tx_host(2, shape, chunks);
        tx_t *y = tx_binary(GS_BINARY_ADD, x, tx_transpose(x, NULL));
        check(y, "x + x.T of chunks");
        check(tx_reduce(GS_RED_SUM, y, -1, 0.0, 0), "(x + x.T).sum() of chunks");
        check(tx_reduce(GS_RED_ARGMAX, y, -1, 0.0, 0), "(x + x.T).argmax() of chunks");
        tx_free_all();
    }
}

/* ---- reductions ---- */

static void check_reductions(tx_t *x, int split_every, const char *tag)
{
    char what[64];
    for (int op = 0; op < GS_RED_COUNT; op++) {
        for (int axis = -1; axis < x->ndim; axis++) {
            double ddof = (op == GS_RED_VAR || op == GS_RED_STD) ? 1.0 : 0.0;
            snprintf(what, sizeof(what), "%s reduce %d axis %d", tag, op, axis);
            check(tx_reduce((gs_redop_t)op, x, axis, ddof, split_every), what);
            tx_free_all_but(x);
        }
    }
}

Test(graph_eval, every_reduction_over_all_axes_and_each_axis)
{
    int64_t shape[2] = {19, 23}, chunks[2] = {4, 6};
    tx_t *x = tx_normal(61, 3.0, 2.0, 2, shape, chunks);
    check_reductions(x, 0, "normal");
    check_reductions(x, 2, "normal split 2");
}

Test(graph_eval, reductions_in_three_dimensions)
{
    int64_t shape[3] = {6, 7, 5}, chunks[3] = {4, 3, 2};
    tx_t *x = tx_uniform(62, -1.0, 1.0, 3, shape, chunks);
    check_reductions(x, 3, "uniform 3d");
}

Test(graph_eval, mean_var_std_with_ddof)
{
    int64_t shape[2] = {30, 8}, chunks[2] = {7, 3};
    tx_t *x = tx_normal(71, 5.0, 3.0, 2, shape, chunks);
    const double ddofs[] = {0.0, 1.0, 2.5};
    for (size_t i = 0; i < 3; i++) {
        for (int axis = -1; axis < 2; axis++) {
            check(tx_reduce(GS_RED_VAR, x, axis, ddofs[i], 0), "var");
            check(tx_reduce(GS_RED_STD, x, axis, ddofs[i], 0), "std");
            check(tx_reduce(GS_RED_MEAN, x, axis, ddofs[i], 0), "mean");
        }
    }
    /* count <= ddof gives NaN */
    int64_t s1[2] = {2, 3}, c1[2] = {1, 2};
    tx_t *y = tx_normal(72, 0, 1, 2, s1, c1);
    check(tx_reduce(GS_RED_VAR, y, 0, 2.0, 0), "var with count == ddof");
}

Test(graph_eval, argmax_argmin_with_ties)
{
    /* values repeat so ties occur; the smallest index must win */
    int64_t shape[2] = {9, 14}, chunks[2] = {4, 5};
    tx_t *x = tx_arange(0.0, 1.0, 2, shape, chunks);
    tx_t *m = tx_scalar_r(GS_BINARY_MINIMUM, tx_scalar_r(GS_BINARY_MAXIMUM, tx_unary(GS_UNARY_ABS,
                          tx_scalar_r(GS_BINARY_SUB, x, 60.0)), 10.0), 40.0);
    for (int axis = -1; axis < 2; axis++) {
        check(tx_reduce(GS_RED_ARGMAX, m, axis, 0, 0), "argmax ties");
        check(tx_reduce(GS_RED_ARGMIN, m, axis, 0, 0), "argmin ties");
        check(tx_reduce(GS_RED_ARGMAX, x, axis, 0, 0), "argmax arange");
        check(tx_reduce(GS_RED_ARGMIN, x, axis, 0, 0), "argmin arange");
    }
}

Test(graph_eval, reductions_feeding_elementwise_ops)
{
    int64_t shape[2] = {15, 11}, chunks[2] = {4, 3};
    tx_t *x = tx_normal(81, 2.0, 1.0, 2, shape, chunks);
    tx_t *m0 = tx_reduce(GS_RED_MEAN, x, 0, 0, 0);            /* (11,) */
    check(tx_binary(GS_BINARY_SUB, x, m0), "x - x.mean(axis=0)");
    tx_t *s = tx_reduce(GS_RED_SUM, x, -1, 0, 0);              /* 0-d */
    check(tx_scalar_r(GS_BINARY_MUL, s, 2.0), "x.sum() * 2");
    check(tx_binary(GS_BINARY_DIV, x, s), "x / x.sum()");
    tx_t *mx = tx_reduce(GS_RED_MAX, x, 1, 0, 0);             /* (15,) */
    check(tx_reduce(GS_RED_SUM, mx, -1, 0, 0), "sum of row maxima");
}

Test(graph_eval, zero_size_arrays)
{
    int64_t shape[2] = {0, 5}, chunks[2] = {3, 2};
    tx_t *x = tx_normal(91, 0, 1, 2, shape, chunks);
    check(x, "empty");
    check(tx_scalar_r(GS_BINARY_ADD, x, 1.0), "empty + 1");
    check(tx_reduce(GS_RED_SUM, x, -1, 0, 0), "sum of empty");
    check(tx_reduce(GS_RED_MEAN, x, -1, 0, 0), "mean of empty");
    check(tx_reduce(GS_RED_SUM, x, 0, 0, 0), "sum of (0,5) along axis 0");
    check(tx_reduce(GS_RED_MAX, x, 1, 0, 0), "max of (0,5) along axis 1");
    int64_t s2[2] = {6, 5}, c2[2] = {4, 2};
    tx_t *y = tx_normal(92, 0, 1, 2, s2, c2);
    gs_slice_t e[2] = {SL_RANGE(3, 3, 1), SL_ALL};
    tx_t *ye = tx_slice(y, 2, e);
    check(ye, "empty slice");
    check(tx_reduce(GS_RED_SUM, ye, -1, 0, 0), "sum of empty slice");
    check(tx_reduce(GS_RED_VAR, ye, 0, 0, 0), "var of empty slice along axis 0");
}

Test(graph_eval, long_chains_split_at_kernel_limits)
{
    int64_t shape[2] = {12, 10}, chunks[2] = {5, 4};
    /* 12 distinct random arrays: more leaves than one kernel holds */
    tx_t *acc = tx_normal(100, 0, 1, 2, shape, chunks);
    for (int i = 1; i < 12; i++) {
        gs_slice_t s[2] = {SL_STEP(1), SL_STEP(1)};
        tx_t *r = tx_slice(tx_normal(100 + (uint64_t)i, 0, 1, 2, shape, chunks), 2, s);
        acc = tx_binary(GS_BINARY_ADD, acc, tx_scalar_r(GS_BINARY_MUL, r, (double)i));
    }
    check(acc, "12-leaf sum");
    check(tx_reduce(GS_RED_SUM, acc, 1, 0, 0), "12-leaf sum reduced");
    /* 80 unary ops: longer than one program */
    tx_t *y = tx_uniform(200, 0.5, 1.5, 2, shape, chunks);
    for (int i = 0; i < 80; i++) y = tx_scalar_r(i % 2 ? GS_BINARY_ADD : GS_BINARY_MUL, y, 1.01);
    check(y, "80-op chain");
    /* deep right-leaning tree: stack depth */
    tx_t *d = tx_normal(300, 0, 1, 2, shape, chunks);
    for (int i = 0; i < 12; i++)
        d = tx_binary(GS_BINARY_SUB, tx_arange((double)i, 1.0, 2, shape, chunks), d);
    check(d, "deep tree");
}

Test(graph_eval, reductions_of_sliced_transposed_arrays_and_scalars)
{
    int64_t shape[2] = {17, 13}, chunks[2] = {5, 4};
    tx_t *x = tx_normal(400, 0, 1, 2, shape, chunks);
    gs_slice_t s[2] = {SL_STEP(-3), SL_RANGE(1, 12, 2)};
    tx_t *y = tx_slice(tx_transpose(x, NULL), 2, s);
    for (int axis = -1; axis < 2; axis++) {
        check(tx_reduce(GS_RED_ARGMAX, y, axis, 0, 3), "argmax of a sliced transpose");
        check(tx_reduce(GS_RED_MIN, y, axis, 0, 3), "min of a sliced transpose");
        check(tx_reduce(GS_RED_STD, y, axis, 0.5, 3), "std of a sliced transpose");
    }
    tx_t *s0 = tx_reduce(GS_RED_SUM, x, -1, 0, 0);
    check(tx_reduce(GS_RED_MEAN, s0, -1, 0, 0), "mean of a 0-d array");
    check(tx_binary(GS_BINARY_ADD, s0, x), "0-d + 2-d");
    check(tx_binary(GS_BINARY_MUL, y, s0), "2-d * 0-d");
}

/* ---- tuples of axes and kept dimensions ---- */

/* Row-major index of element i of x among the axes not in @a mask. */
static int64_t kept_index(const tx_t *x, unsigned mask, int64_t i)
{
    int64_t c[GS_MAX_NDIM], o = 0, mult = 1;
    tx_coords(x, i, c);
    for (int ax = x->ndim - 1; ax >= 0; ax--) {
        if (mask & (1u << ax)) continue;
        o += c[ax] * mult;
        mult *= x->shape[ax];
    }
    return o;
}

/* Reference: op over the axes in @a mask of x (population var/std with ddof), kept as
 * length-1 axes when keep. */
static tx_t *ref_reduce_axes(tx_t *x, gs_redop_t op, unsigned mask, double ddof, int keep,
                             gs_array_h h)
{
    int64_t oshape[GS_MAX_NDIM];
    int ond = 0;
    for (int ax = 0; ax < x->ndim; ax++) {
        if (!(mask & (1u << ax))) oshape[ond++] = x->shape[ax];
        else if (keep) oshape[ond++] = 1;
    }
    tx_t *t = tx_new(h, ond, oshape);
    int64_t osize = t->size;
    long double *s1 = calloc((size_t)(osize ? osize : 1), sizeof(long double));
    long double *s2 = calloc((size_t)(osize ? osize : 1), sizeof(long double));
    int64_t *cnt = calloc((size_t)(osize ? osize : 1), sizeof(int64_t));
    for (int64_t r = 0; r < osize; r++)
        t->v[r] = op == GS_RED_MIN ? INFINITY : op == GS_RED_PROD ? 1.0 : -INFINITY;
    for (int64_t i = 0; i < x->size; i++) {
        int64_t o = kept_index(x, mask, i);
        double v = x->v[i];
        s1[o] += v;
        cnt[o]++;
        if (op == GS_RED_MIN) t->v[o] = isnan(v) || isnan(t->v[o]) ? NAN : fmin(t->v[o], v);
        if (op == GS_RED_MAX) t->v[o] = isnan(v) || isnan(t->v[o]) ? NAN : fmax(t->v[o], v);
        if (op == GS_RED_PROD) t->v[o] *= v;
    }
    for (int64_t i = 0; i < x->size; i++) {
        int64_t o = kept_index(x, mask, i);
        long double d = x->v[i] - s1[o] / cnt[o];
        s2[o] += d * d;
    }
    for (int64_t r = 0; r < osize; r++) {
        switch (op) {
        case GS_RED_SUM: t->v[r] = (double)s1[r]; break;
        case GS_RED_MEAN: t->v[r] = (double)(s1[r] / cnt[r]); break;
        case GS_RED_VAR: t->v[r] = (double)(s2[r] / (cnt[r] - ddof)); break;
        case GS_RED_STD: t->v[r] = sqrt((double)(s2[r] / (cnt[r] - ddof))); break;
        default: break;
        }
    }
    free(s1);
    free(s2);
    free(cnt);
    return t;
}

Test(graph_eval, reductions_over_tuples_of_axes_with_and_without_keepdims)
{
    int64_t shape[4] = {5, 4, 7, 3}, chunks[4] = {2, 3, 4, 2};
    tx_t *x = tx_normal(61, 1.0, 2.0, 4, shape, chunks);
    static const gs_redop_t ops[] = {GS_RED_SUM, GS_RED_MEAN, GS_RED_MIN, GS_RED_MAX, GS_RED_VAR,
                                     GS_RED_STD, GS_RED_PROD};
    static const int tuples[][3] = {{0, 2, -1}, {3, 1, -1}, {-1, 0, 2}, {1, 2, 3}};
    static const int ntuple[] = {2, 2, 3, 3};
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
        for (size_t t = 0; t < sizeof(ntuple) / sizeof(ntuple[0]); t++)
            for (int keep = 0; keep < 2; keep++) {
                gs_reduce_params_t p = {0};
                unsigned mask = 0;
                p.field_mask = GS_REDUCE_FIELD_SPLIT_EVERY | GS_REDUCE_FIELD_DDOF;
                p.split_every = 3;
                p.ddof = (ops[o] == GS_RED_VAR || ops[o] == GS_RED_STD) ? 1.0 : 0.0;
                for (int i = 0; i < ntuple[t]; i++)
                    mask |= 1u << (tuples[t][i] < 0 ? tuples[t][i] + 4 : tuples[t][i]);
                gs_array_h h;
                TX_OK(gs_array_reduce_axes(ops[o], x->h, ntuple[t], tuples[t], keep, &p, &h));
                char what[64];
                snprintf(what, sizeof(what), "op %d tuple %zu keepdims %d", (int)ops[o], t, keep);
                check(ref_reduce_axes(x, ops[o], mask, p.ddof, keep, h), what);
            }
    /* every axis (naxes 0) and one axis, kept */
    gs_array_h h;
    TX_OK(gs_array_reduce_axes(GS_RED_SUM, x->h, 0, NULL, 1, NULL, &h));
    check(ref_reduce_axes(x, GS_RED_SUM, 0xf, 0, 1, h), "sum keepdims");
    int ax = -2;
    TX_OK(gs_array_reduce_axes(GS_RED_MAX, x->h, 1, &ax, 1, NULL, &h));
    check(ref_reduce_axes(x, GS_RED_MAX, 0x4, 0, 1, h), "max axis -2 keepdims");
    /* std over all four axes given as a tuple: the all-axes reduction */
    int all[4] = {3, 0, 2, 1};
    TX_OK(gs_array_reduce_axes(GS_RED_STD, x->h, 4, all, 0, NULL, &h));
    check(ref_reduce_axes(x, GS_RED_STD, 0xf, 0, 0, h), "std over a tuple of every axis");
    /* argmax over all axes, kept: the flat index in a (1, 1, 1, 1) array */
    TX_OK(gs_array_reduce_axes(GS_RED_ARGMAX, x->h, 0, NULL, 1, NULL, &h));
    int64_t ones[4] = {1, 1, 1, 1};
    tx_t *t = tx_new(h, 4, ones);
    for (int64_t i = 1; i < x->size; i++)
        if (x->v[i] > x->v[(int64_t)t->v[0]]) t->v[0] = (double)i;
    check(t, "argmax keepdims");
}

Test(graph_eval, tuple_axes_reject_bad_input)
{
    int64_t shape[3] = {4, 5, 6}, chunks[3] = {2, 2, 2};
    tx_t *x = tx_normal(62, 0, 1, 3, shape, chunks);
    gs_array_h h = (gs_array_h)(uintptr_t)0x1234;
    int axes[2] = {1, -2};   /* -2 = 1 */
    cr_assert_eq(gs_array_reduce_axes(GS_RED_SUM, x->h, 2, axes, 0, NULL, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "repeated") != NULL, "%s", gs_last_error());
    axes[1] = 3;
    cr_assert_eq(gs_array_reduce_axes(GS_RED_SUM, x->h, 2, axes, 0, NULL, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "out of range") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_array_reduce_axes(GS_RED_SUM, x->h, 4, axes, 0, NULL, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_reduce_axes(GS_RED_SUM, x->h, 1, NULL, 0, NULL, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_reduce_axes(GS_RED_SUM, x->h, 0, axes, 0, NULL, &h),
                 GS_ERR_INVALID_PARAM);
    axes[1] = 0;
    cr_assert_eq(gs_array_reduce_axes(GS_RED_ARGMAX, x->h, 2, axes, 0, NULL, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "argmax") != NULL, "%s", gs_last_error());
    gs_reduce_params_t p = {0};
    p.field_mask = GS_REDUCE_FIELD_AXIS;
    cr_assert_eq(gs_array_reduce_axes(GS_RED_SUM, x->h, 2, axes, 0, &p, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "GS_REDUCE_FIELD_AXIS") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_array_reduce_axes(GS_RED_MIN, NULL, 2, axes, 0, NULL, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(h, (gs_array_h)(uintptr_t)0x1234, "output written on error");
}

/* Version-2 and version-3 normals through the lowering: every chunking (odd chunk widths split
 * pairs between chunks), every lowering flag, and slices pushed into the generator (rows 1::2,
 * columns ::@a cstep: for version 2 and step -3 lone halves of pairs, for version 3 and step 2
 * or -2 both halves of every pair) give the definition's bits at every global index. Version 3
 * is the float64 default since session 12; version 1 stays reachable by name. */
static void check_normal_version(int version, double (*def)(uint64_t, uint64_t, double, double),
                                 int64_t cstep, double tol)
{
    static const int64_t chunkings[][2] = {{37, 53}, {5, 7}, {1, 53}, {37, 1}, {4, 6}};
    const int64_t shape[2] = {37, 53};
    const int64_t nq = (53 + (cstep < 0 ? -cstep : cstep) - 1) / (cstep < 0 ? -cstep : cstep);
    gs_slice_t sl[2] = {GS_SLICE_FROM(1, 2), GS_SLICE_STEP(cstep)};
    for (size_t c = 0; c < sizeof(chunkings) / sizeof(chunkings[0]); c++) {
        gs_array_h x, s;
        TX_OK(gs_array_random_normal_version(31, 2.0, 0.5, version, 2, shape, chunkings[c], &x));
        TX_OK(gs_array_slice(x, 2, sl, &s));
        for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
            double *v = eval_flags(x, f, NULL);
            for (int64_t i = 0; i < 37 * 53; i++)
                cr_assert(close_to(v[i], def(31, (uint64_t)i, 2.0, 0.5), tol),
                          "v%d chunking %zu flags 0x%x: element %lld", version, c, f, (long long)i);
            free(v);
            double *w = eval_flags(s, f, NULL);
            for (int64_t r = 0; r < 18; r++)
                for (int64_t q = 0; q < nq; q++) {
                    int64_t col = cstep > 0 ? q * cstep : 52 + q * cstep;
                    uint64_t i = (uint64_t)((1 + 2 * r) * 53 + col);
                    cr_assert(close_to(w[r * nq + q], def(31, i, 2.0, 0.5), tol),
                              "v%d chunking %zu flags 0x%x: slice element (%lld, %lld)", version,
                              c, f, (long long)r, (long long)q);
                }
            free(w);
        }
        gs_array_release(s);
        gs_array_release(x);
    }
}

Test(graph_eval, normal_v3_values_follow_the_definition_on_every_chunking)
{
    check_normal_version(GS_RANDOM_V3, gs_random_normal_v3, 2, 0);
    check_normal_version(GS_RANDOM_V3, gs_random_normal_v3, -2, 0);
    check_normal_version(GS_RANDOM_V3, gs_random_normal_v3, 1, 0);
}

Test(graph_eval, normal_v2_values_follow_the_definition_on_every_chunking)
{
    static const int64_t chunkings[][2] = {{37, 53}};
    const int64_t shape[2] = {37, 53};
    check_normal_version(GS_RANDOM_V2, gs_random_normal_v2, -3, 0);
    gs_array_h y;
    cr_assert_eq(gs_array_random_normal_version(1, 0.0, 1.0, 4, 2, shape, chunkings[0], &y),
                 GS_ERR_INVALID_PARAM);
}

/* Version 1 by name is the old default's definition on every chunking, flag set and slice (a
 * seed made before session 12 keeps its values; the CPU backend's libm-free log/cos is within a
 * few ulp of the libm-based gs_random_normal(), docs/random.md). */
Test(graph_eval, normal_v1_by_name_follows_the_old_definition)
{
    check_normal_version(GS_RANDOM_V1, gs_random_normal, 1, 1e-14);
    check_normal_version(GS_RANDOM_V1, gs_random_normal, -3, 1e-14);
}

/* gs_array_random_normal() and GS_RANDOM_DEFAULT give version 3, bit for bit, and differ from
 * version 1 */
Test(graph_eval, normal_default_is_version_3)
{
    static const int64_t chunks[2] = {5, 7};
    const int64_t shape[2] = {37, 53};
    gs_array_h d, n, v1;
    TX_OK(gs_array_random_normal(5, 1.0, 2.0, 2, shape, chunks, &d));
    TX_OK(gs_array_random_normal_version(5, 1.0, 2.0, GS_RANDOM_DEFAULT, 2, shape, chunks, &n));
    TX_OK(gs_array_random_normal_version(5, 1.0, 2.0, GS_RANDOM_V1, 2, shape, chunks, &v1));
    cr_assert_eq(GS_RANDOM_DEFAULT_FLOAT64, GS_RANDOM_V3);
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f += 3) {
        double *a = eval_flags(d, f, NULL), *b = eval_flags(n, f, NULL), *c = eval_flags(v1, f, NULL);
        int64_t differ = 0;
        for (int64_t i = 0; i < 37 * 53; i++) {
            cr_assert(a[i] == gs_random_normal_v3(5, (uint64_t)i, 1.0, 2.0),
                      "flags 0x%x: default element %lld is not version 3", f, (long long)i);
            cr_assert(b[i] == a[i], "flags 0x%x: GS_RANDOM_DEFAULT element %lld", f, (long long)i);
            cr_assert(close_to(c[i], gs_random_normal(5, (uint64_t)i, 1.0, 2.0), 1e-14),
                      "flags 0x%x: version 1 element %lld", f, (long long)i);
            differ += a[i] != c[i];
        }
        cr_assert_gt(differ, 37 * 53 - 10, "versions 1 and 3 are different definitions");
        free(a), free(b), free(c);
    }
    gs_array_release(v1);
    gs_array_release(n);
    gs_array_release(d);
}
