/* Exact integer reductions (issue 20; graph/kernel.h "Integer records"): sum, prod, min and
 * max of int64 and int32 arrays, over every axis, one axis, a tuple of axes with keepdims and
 * through nansum/nanprod, lowered with every set of lowering flags (layers round-tripped
 * through the codec), evaluated by the CPU backend and compared as int64 with a plain-C
 * reference in unsigned arithmetic (NumPy wraps modulo 2^64). The arrays have many chunks,
 * so the partial records pass through a two-level combine tree; values lie beyond 2^53, where
 * float64 accumulation would round. */
#include "graph_eval_util.h"
#include "../intsum_ref.h"

#include "chunkops/eval.h"
#include "graph/graph_internal.h"

#include <gsched/array.h>
#include <stdint.h>

#define OK(call)                                                                       \
    do {                                                                               \
        gs_status_t st__ = (call);                                                     \
        cr_assert_eq(st__, GS_OK, "%s: %s", #call, gs_last_error());                   \
    } while (0)

static gs_chunkops_ctx_h ctx;

static void setup(void)
{
    ctx = gx_ctx_create();
}

static void teardown(void)
{
    gx_ctx_destroy(ctx);
}

TestSuite(graph_intsum, .init = setup, .fini = teardown, .timeout = 300);

enum { R = 60, C = 50 };

/* Evaluate @a h (int64 result of n elements) with lowering @a flags into @a out. */
static void eval_i64(gs_array_h h, unsigned flags, int64_t *out, int64_t n)
{
    gs_taskgraph_t *tg = gx_lower(h, flags);
    cr_assert_eq(gs_array_size(h), n);
    OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, (double *)out, (size_t)n));
    gs_taskgraph_free(tg);
}

/* Reference of @a op over v (R x C) along @a axis (-1: all) into want[]. */
static void ref_reduce(int op, const int64_t *v, int axis, int64_t *want)
{
    const int64_t nrec = axis < 0 ? 1 : axis == 0 ? C : R;
    for (int64_t r = 0; r < nrec; r++) want[r] = ref_int_empty(op);
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            int64_t r = axis < 0 ? 0 : axis == 0 ? j : i;
            want[r] = ref_int_op(op, want[r], v[i * C + j]);
        }
}

/* x: int64 in [lo, hi] (R x C in 7 x 9 chunks: 54 chunks), its values into v. */
static gs_array_h ints(uint64_t seed, int64_t lo, int64_t hi, int64_t *v)
{
    gs_array_h x;
    const int64_t shape[2] = {R, C}, chunks[2] = {7, 9};
    OK(gs_array_random_integers(seed, lo, hi, 2, shape, chunks, &x));
    eval_i64(x, GS_LOWER_DEFAULT, v, R * C);
    return x;
}

static void check_all(gs_array_h x, const int64_t *v, const char *what)
{
    static const gs_redop_t ops[] = {GS_RED_SUM, GS_RED_PROD, GS_RED_MIN, GS_RED_MAX};
    int64_t want[R > C ? R : C], got[R > C ? R : C];
    for (int o = 0; o < 4; o++)
        for (int axis = -1; axis < 2; axis++) {
            gs_reduce_params_t rp = {0};
            gs_array_h h;
            const int64_t nrec = axis < 0 ? 1 : axis == 0 ? C : R;
            if (axis >= 0) {
                rp.field_mask = GS_REDUCE_FIELD_AXIS;
                rp.axis = axis;
            }
            OK(gs_array_reduce(ops[o], x, &rp, &h));
            cr_assert_eq(gs_array_dtype(h), GS_DTYPE_INT64);
            ref_reduce(ops[o], v, axis, want);
            for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
                eval_i64(h, f, got, nrec);
                for (int64_t r = 0; r < nrec; r++)
                    cr_assert_eq(got[r], want[r],
                                 "%s: op %d axis %d flags 0x%x element %lld: %lld, want %lld",
                                 what, (int)ops[o], axis, f, (long long)r, (long long)got[r],
                                 (long long)want[r]);
            }
            gs_array_release(h);
        }
}

Test(graph_intsum, int64_reductions_are_exact_beyond_2_53_and_wrap)
{
    static int64_t v[R * C];
    /* sums of 3000 values near 2^62 wrap past 2^63 many times; odd values beyond 2^53 */
    gs_array_h x = ints(7, (1ll << 62) - 1000, (1ll << 62) + 1000, v);
    check_all(x, v, "near 2^62");
    gs_array_release(x);
    x = ints(8, INT64_MIN, INT64_MAX, v);
    check_all(x, v, "full int64 range");
    gs_array_release(x);
    x = ints(9, (1ll << 53) - 5, (1ll << 53) + 5, v);
    check_all(x, v, "near 2^53");
    gs_array_release(x);
}

Test(graph_intsum, int32_sum_beyond_2_53_is_exact)
{
    /* (2^31 - 1) * (2^23 + 1): odd and above 2^54, where float64 accumulation rounds */
    const int64_t n = (1ll << 23) + 1, shape[1] = {n}, chunks[1] = {1 << 18};
    gs_array_h x, s, m;
    int64_t got = 0;
    const int64_t want = (int64_t)INT32_MAX * n;
    OK(gs_array_full_dtype((double)INT32_MAX, GS_DTYPE_INT32, 1, shape, chunks, &x));
    OK(gs_array_reduce(GS_RED_SUM, x, NULL, &s));
    OK(gs_array_reduce(GS_RED_MAX, x, NULL, &m));
    cr_assert_eq(gs_array_dtype(s), GS_DTYPE_INT64);
    cr_assert_eq(gs_array_dtype(m), GS_DTYPE_INT32);
    eval_i64(s, GS_LOWER_DEFAULT, &got, 1);
    cr_assert_eq(got, want, "sum %lld, want %lld", (long long)got, (long long)want);
    eval_i64(s, 0, &got, 1);
    cr_assert_eq(got, want, "flags 0: sum %lld, want %lld", (long long)got, (long long)want);
    {
        gs_taskgraph_t *tg = gx_lower(m, GS_LOWER_DEFAULT);
        int32_t mx = 0;
        OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, (double *)&mx, 1));
        cr_assert_eq(mx, INT32_MAX, "max of int32 finalises into int32");
        gs_taskgraph_free(tg);
    }
    gs_array_release(m);
    gs_array_release(s);
    gs_array_release(x);
}

Test(graph_intsum, tuple_axes_keepdims_and_nan_reductions_are_exact)
{
    static int64_t v[R * C];
    int64_t want[1], got[1];
    const int axes[2] = {1, 0};
    gs_array_h x = ints(10, (1ll << 60), (1ll << 60) + 99999, v), h;
    ref_reduce(GS_RED_SUM, v, -1, want);
    OK(gs_array_reduce_axes(GS_RED_SUM, x, 2, axes, 1, NULL, &h));
    cr_assert_eq(gs_array_ndim(h), 2);
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        eval_i64(h, f, got, 1);
        cr_assert_eq(got[0], want[0], "sum over (1, 0) keepdims, flags 0x%x", f);
    }
    gs_array_release(h);
    OK(gs_array_reduce_composite(GS_CRED_NANSUM, x, 0, NULL, 0, NULL, &h));
    eval_i64(h, GS_LOWER_DEFAULT, got, 1);
    cr_assert_eq(got[0], want[0], "nansum of int64 is the exact sum");
    gs_array_release(h);
    ref_reduce(GS_RED_PROD, v, -1, want);
    OK(gs_array_reduce_composite(GS_CRED_NANPROD, x, 0, NULL, 0, NULL, &h));
    eval_i64(h, GS_LOWER_DEFAULT, got, 1);
    cr_assert_eq(got[0], want[0], "nanprod of int64 is the wrapped product");
    gs_array_release(h);
    gs_array_release(x);
}

/* The lowering gives integer records to int32/int64/uint8 sums and keeps float64 records for
 * bool (the tuned float64 kernels) and for mean; a layer with integer records for mean does
 * not decode. */
Test(graph_intsum, lowering_picks_integer_records)
{
    const int64_t shape[1] = {1000}, chunks[1] = {10};
    gs_array_h x, b, s, sb, mn;
    OK(gs_array_full_dtype(3.0, GS_DTYPE_UINT8, 1, shape, chunks, &x));
    OK(gs_array_binary_array_scalar(GS_BINARY_GT, x, 1.0, &b));
    cr_assert_eq(gs_array_dtype(b), GS_DTYPE_BOOL);
    OK(gs_array_reduce(GS_RED_SUM, x, NULL, &s));
    OK(gs_array_reduce(GS_RED_SUM, b, NULL, &sb));
    OK(gs_array_reduce(GS_RED_MEAN, x, NULL, &mn));
    struct { gs_array_h h; int32_t rec; } cases[] = {
        {s, GS_DTYPE_INT64}, {sb, GS_DTYPE_FLOAT64}, {mn, GS_DTYPE_FLOAT64}};
    for (int c = 0; c < 3; c++) {
        gs_taskgraph_t *tg = gx_lower(cases[c].h, GS_LOWER_DEFAULT);
        int ncomb = 0;
        for (uint32_t i = 0; i < tg->nlayers; i++) {
            const gs_layer_t *l = tg->layers[i];
            if (l->kind == GS_LAYER_FUSED && l->u.f.terminal == GS_TERM_REDUCE)
                cr_assert_eq(l->u.f.out_dtype, cases[c].rec, "case %d: reduce records", c);
            if (l->kind == GS_LAYER_COMBINE) {
                cr_assert_eq(l->u.c.rec_dtype, cases[c].rec, "case %d: combine records", c);
                ncomb++;
            }
        }
        cr_assert_eq(ncomb, 2, "100 chunks: a two-level combine tree");
        gs_taskgraph_free(tg);
    }
    {
        int64_t got = 0;
        eval_i64(s, GS_LOWER_DEFAULT, &got, 1);
        cr_assert_eq(got, 3000);
        eval_i64(sb, GS_LOWER_DEFAULT, &got, 1);
        cr_assert_eq(got, 1000);
    }
    /* a COMBINE layer claiming integer records for mean is refused by the decoder */
    {
        gs_taskgraph_t *tg = gx_lower(mn, GS_LOWER_DEFAULT);
        for (uint32_t i = 0; i < tg->nlayers; i++) {
            gs_layer_t *l = tg->layers[i], *d = NULL;
            gs_buf_t buf;
            if (l->kind != GS_LAYER_COMBINE) continue;
            l->u.c.rec_dtype = GS_DTYPE_INT64;
            gs_buf_init(&buf);
            OK(gs_layer_encode(l, &buf));
            cr_assert_eq(gs_layer_decode(buf.data, buf.len, &d), GS_ERR_PROTO,
                         "integer records for mean must not decode");
            cr_assert_null(d);
            gs_buf_cleanup(&buf);
            l->u.c.rec_dtype = GS_DTYPE_FLOAT64;
        }
        gs_taskgraph_free(tg);
    }
    gs_array_release(mn);
    gs_array_release(sb);
    gs_array_release(s);
    gs_array_release(b);
    gs_array_release(x);
}
