/* Shape operations: reshape, ravel, eye, diag, tril, triu. Each expression is lowered under every
 * combination of lowering flags and run by the CPU backend's serial evaluator
 * (gs_chunkops_eval_array); values are compared exactly with plain-C references (NumPy's
 * definitions written as loops), on chunkings that do not divide the shapes, for float64,
 * float32, int32 and bool, with positive, negative and out-of-range k and empty shapes. Bad
 * input returns GS_ERR_INVALID_PARAM naming the problem and leaves the output unwritten. */
#include "graph_test_util.h"
#include "graph_eval_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef GS_HAVE_CUDA
#include "chunkops/cuda/cuda_backend.h"
#endif

/* the backend every check() evaluates on: the CPU's, or CUDA's in the *_on_cuda tests */
static const gs_chunkops_ops_t *be = &gs_chunkops_cpu_ops;
static gs_chunkops_ctx_h ctx;

static void setup(void)
{
    gs_chunkops_params_t p;
    memset(&p, 0, sizeof(p));
    TX_OK(gs_chunkops_cpu_ops.ctx_create(&p, &ctx));
}

static void teardown(void)
{
    tx_free_all();
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

TestSuite(graph_shape, .init = setup, .fini = teardown, .timeout = 120);

static const gs_dtype_t dtypes[] = {GS_DTYPE_FLOAT64, GS_DTYPE_FLOAT32, GS_DTYPE_INT32,
                                    GS_DTYPE_BOOL};
enum { NDT = sizeof(dtypes) / sizeof(dtypes[0]) };

/* ---- helpers ---- */

/* The value a dtype holds for the test pattern (small integers and halves; bool: != 0). */
static double pat(gs_dtype_t d, int64_t i)
{
    double v = (double)((i * 7) % 23) - 11.0;
    if (d == GS_DTYPE_BOOL) return v != 0;
    if (d == GS_DTYPE_INT32) return v;
    return v + 0.5;
}

/* An array of @a d holding pat(d, i) at flat index i, chunked by @a chunks. */
static gs_array_h typed(gs_dtype_t d, int nd, const int64_t *shape, const int64_t *chunks)
{
    int64_t size = 1;
    for (int a = 0; a < nd; a++) size *= shape[a];
    double *v = malloc((size_t)(size ? size : 1) * sizeof(double));
    cr_assert_not_null(v);
    for (int64_t i = 0; i < size; i++) v[i] = pat(d, i);
    gs_array_h x, y;
    TX_OK(gs_array_from_host(v, nd, shape, chunks, &x));
    free(v);
    if (d == GS_DTYPE_FLOAT64) return x;
    TX_OK(gs_array_astype(x, d, &y));
    gs_array_release(x);
    return y;
}

/* Evaluate @a h under lowering @a flags, widened to doubles (caller frees). */
static double *eval(gs_array_h h, unsigned flags)
{
    const int64_t size = gs_array_size(h);
    const gs_dtype_t dt = (gs_dtype_t)gs_array_dtype(h);
    const size_t es = gs_dtype_size(dt);
    double *out = calloc((size_t)(size ? size : 1), sizeof(double));
    cr_assert_not_null(out);
    gs_status_t st = gs_chunkops_eval_array(be, ctx, h, flags, out, (size_t)size);
    cr_assert_eq(st, GS_OK, "evaluation on %s under lowering flags 0x%x: %s: %s",
                 be == &gs_chunkops_cpu_ops ? "cpu" : "cuda", flags, gs_status_name(st),
                 gs_last_error());
    for (int64_t i = size - 1; i >= 0; i--)
        out[i] = gs_dtype_to_double(dt, (const char *)out + (size_t)i * es);
    return out;
}

/* @a h has @a nd axes of @a shape, dtype @a dt and values @a want, under every lowering. */
static void check(gs_array_h h, gs_dtype_t dt, int nd, const int64_t *shape, const double *want,
                  const char *what)
{
    int64_t hs[GS_MAX_NDIM], size = 1;
    cr_assert_eq(gs_array_ndim(h), nd, "%s: ndim %d, want %d", what, gs_array_ndim(h), nd);
    gs_array_shape(h, hs);
    for (int a = 0; a < nd; a++) {
        cr_assert_eq(hs[a], shape[a], "%s: axis %d has %lld, want %lld", what, a,
                     (long long)hs[a], (long long)shape[a]);
        size *= shape[a];
    }
    cr_assert_eq(gs_array_dtype(h), (int)dt, "%s: dtype %s, want %s", what,
                 gs_dtype_name((gs_dtype_t)gs_array_dtype(h)), gs_dtype_name(dt));
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        double *got = eval(h, f);
        for (int64_t i = 0; i < size; i++)
            cr_assert(got[i] == want[i], "%s, %s, flags 0x%x: element %lld is %.17g, want %.17g", what,
                      be == &gs_chunkops_cpu_ops ? "cpu" : "cuda", f, (long long)i, got[i],
                      want[i]);
        free(got);
    }
}

/* ---- reshape / ravel ---- */

/* reshape keeps the row-major sequence: the reference is the input's own pattern. */
static void check_reshape(gs_dtype_t d, int ind, const int64_t *ish, const int64_t *ich, int ond,
                          const int64_t *osh, const int64_t *want_shape)
{
    char what[160];
    int64_t size = 1;
    for (int a = 0; a < ind; a++) size *= ish[a];
    gs_array_h x = typed(d, ind, ish, ich), y;
    TX_OK(gs_array_reshape(x, ond, osh, &y));
    double *want = malloc((size_t)(size ? size : 1) * sizeof(double));
    for (int64_t i = 0; i < size; i++) want[i] = pat(d, i);
    snprintf(what, sizeof(what), "%s reshape %d-D -> %d-D", gs_dtype_name(d), ind, ond);
    check(y, d, ond, want_shape, want, what);
    free(want);
    gs_array_release(y);
    gs_array_release(x);
}

static void body_reshape_merges_and_splits_axes_on_odd_chunks(void)
{
    const int64_t s2[2] = {7, 10}, c2[2] = {3, 4};
    const int64_t s3[3] = {6, 5, 4}, c3[3] = {4, 2, 3};
    for (int di = 0; di < NDT; di++) {
        gs_dtype_t d = dtypes[di];
        check_reshape(d, 2, s2, c2, 2, (int64_t[]){5, 14}, (int64_t[]){5, 14});
        check_reshape(d, 2, s2, c2, 1, (int64_t[]){70}, (int64_t[]){70});
        check_reshape(d, 2, s2, c2, 2, (int64_t[]){2, 35}, (int64_t[]){2, 35});
        check_reshape(d, 2, s2, c2, 3, (int64_t[]){7, 2, 5}, (int64_t[]){7, 2, 5});
        check_reshape(d, 2, s2, c2, 2, (int64_t[]){-1, 7}, (int64_t[]){10, 7});
        check_reshape(d, 2, s2, c2, 4, (int64_t[]){1, 70, 1, 1}, (int64_t[]){1, 70, 1, 1});
        check_reshape(d, 3, s3, c3, 2, (int64_t[]){30, 4}, (int64_t[]){30, 4});
        check_reshape(d, 3, s3, c3, 2, (int64_t[]){6, -1}, (int64_t[]){6, 20});
        check_reshape(d, 3, s3, c3, 4, (int64_t[]){3, 2, 5, 4}, (int64_t[]){3, 2, 5, 4});
        check_reshape(d, 3, s3, c3, 3, (int64_t[]){4, 5, 6}, (int64_t[]){4, 5, 6});
        check_reshape(d, 3, s3, c3, 2, (int64_t[]){10, 12}, (int64_t[]){10, 12});
        check_reshape(d, 3, s3, c3, 3, (int64_t[]){2, 3, 20}, (int64_t[]){2, 3, 20});
    }
    /* a long axis with many small chunks split into a matrix whose rows span chunks */
    check_reshape(GS_DTYPE_FLOAT64, 1, (int64_t[]){105}, (int64_t[]){4}, 3, (int64_t[]){3, 5, 7},
                  (int64_t[]){3, 5, 7});
    check_reshape(GS_DTYPE_INT32, 2, (int64_t[]){6, 35}, (int64_t[]){4, 6}, 2,
                  (int64_t[]){10, 21}, (int64_t[]){10, 21});
}

Test(graph_shape, reshape_merges_and_splits_axes_on_odd_chunks)
{
    body_reshape_merges_and_splits_axes_on_odd_chunks();
}

Test(graph_shape, reshape_keeps_aligned_chunks_without_a_rechunk)
{
    /* rows of 3 whole rows: each output chunk is one input chunk as it is */
    gs_array_h x = typed(GS_DTYPE_FLOAT64, 2, (int64_t[]){7, 10}, (int64_t[]){3, 10}), y;
    TX_OK(gs_array_ravel(x, &y));
    cr_assert_eq(gs_array_nchunks(y, 0), 3);
    const int64_t *b = gs_array_chunk_bounds(y, 0);
    cr_assert(b[0] == 0 && b[1] == 30 && b[2] == 60 && b[3] == 70);
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(y, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(tg->nlayers, 2, "host data and one copy layer, no rechunk (%u layers)",
                 (unsigned)tg->nlayers);
    gs_taskgraph_free(tg);
    gs_array_release(y);
    /* the same shape is the same array */
    TX_OK(gs_array_reshape(x, 2, (int64_t[]){7, -1}, &y));
    cr_assert(y == x);
    gs_array_release(y);
    gs_array_release(x);
}

/* Layers of @a h's task graph (lowered with the default flags). */
static unsigned nlayers(gs_array_h h)
{
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(h, GS_LOWER_DEFAULT, &tg));
    unsigned n = (unsigned)tg->nlayers;
    gs_taskgraph_free(tg);
    return n;
}

Test(graph_shape, reshape_of_unit_chunked_leading_axes_needs_no_rechunk)
{
    /* a stack of 4 matrices 6 x 5, one matrix per chunk along axis 0 and 4-row chunks: merging
     * the first two axes keeps the chunks (1 x 4 x 5 -> 4 x 5), and the split back too */
    gs_array_h x = typed(GS_DTYPE_FLOAT32, 3, (int64_t[]){4, 6, 5}, (int64_t[]){1, 4, 5}), y, z;
    TX_OK(gs_array_reshape(x, 2, (int64_t[]){24, 5}, &y));
    const unsigned base = nlayers(x);   /* host data and the astype */
    cr_assert_eq(nlayers(y), base + 1, "x's and the reshape copy: %u layers", nlayers(y));
    cr_assert_eq(gs_array_nchunks(y, 0), 8);
    const int64_t *b = gs_array_chunk_bounds(y, 0);
    static const int64_t wb[9] = {0, 4, 6, 10, 12, 16, 18, 22, 24};
    for (int c = 0; c <= 8; c++) cr_assert_eq(b[c], wb[c], "bound %d: %lld", c, (long long)b[c]);
    TX_OK(gs_array_reshape(y, 3, (int64_t[]){4, 6, 5}, &z));
    cr_assert_eq(nlayers(z), base + 2, "x's and two reshape copies: %u layers", nlayers(z));
    for (int a = 0; a < 3; a++) cr_assert_eq(gs_array_nchunks(z, a), gs_array_nchunks(x, a));
    double want[120];
    for (int i = 0; i < 120; i++) want[i] = pat(GS_DTYPE_FLOAT32, i);
    check(y, GS_DTYPE_FLOAT32, 2, (int64_t[]){24, 5}, want, "(4, 6, 5) -> (24, 5)");
    check(z, GS_DTYPE_FLOAT32, 3, (int64_t[]){4, 6, 5}, want, "and back");
    gs_array_release(z);
    gs_array_release(y);
    /* rows of 3 split into (2, 9) -> (2, 3, 3): unit chunks on the new leading axis */
    gs_array_h r = typed(GS_DTYPE_INT32, 2, (int64_t[]){2, 9}, (int64_t[]){2, 3});
    TX_OK(gs_array_reshape(r, 3, (int64_t[]){2, 3, 3}, &y));
    cr_assert_eq(nlayers(y), nlayers(r) + 1, "(2, 9) in (2, 3) chunks -> (2, 3, 3): %u layers",
                 nlayers(y));
    for (int i = 0; i < 18; i++) want[i] = pat(GS_DTYPE_INT32, i);
    check(y, GS_DTYPE_INT32, 3, (int64_t[]){2, 3, 3}, want, "(2, 9) -> (2, 3, 3)");
    gs_array_release(y);
    gs_array_release(r);
    gs_array_release(x);
}

Test(graph_shape, reshape_read_by_fused_kernels_copies_nothing)
{
    /* tril(x.reshape(10, 21)) on x (6, 35) in (4, 6) chunks: x rechunked to whole rows, then
     * the tril kernel reads those blocks in their reshaped shape: no copy layer for the
     * reshape itself (with fusion on); the same values under every lowering */
    gs_array_h x = typed(GS_DTYPE_FLOAT64, 2, (int64_t[]){6, 35}, (int64_t[]){4, 6}), r, rr, t;
    TX_OK(gs_array_reshape(x, 2, (int64_t[]){10, 21}, &r));
    TX_OK(gs_array_tril(r, 1, &t));
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(t, GS_LOWER_DEFAULT, &tg));
    unsigned ncopy = 0;
    for (uint32_t i = 0; i < tg->nlayers; i++) ncopy += gs_layer_kind(tg->layers[i]) == GS_LAYER_COPY;
    cr_assert_eq(ncopy, 1, "the rechunk only: %u copy layers", ncopy);
    gs_taskgraph_free(tg);
    double want[210];
    for (int i = 0; i < 10; i++)
        for (int j = 0; j < 21; j++) want[i * 21 + j] = j - i <= 1 ? pat(GS_DTYPE_FLOAT64, i * 21 + j) : 0;
    check(t, GS_DTYPE_FLOAT64, 2, (int64_t[]){10, 21}, want, "tril(x.reshape(10, 21), 1)");
    /* twice reshaped, summed along an axis: a reduction reads the aliased blocks too */
    gs_array_h s;
    gs_reduce_params_t p = {.field_mask = GS_REDUCE_FIELD_AXIS, .axis = 0};
    TX_OK(gs_array_reshape(r, 3, (int64_t[]){5, 2, 21}, &rr));
    TX_OK(gs_array_reduce(GS_RED_SUM, rr, &p, &s));
    double w2[42];
    for (int k = 0; k < 42; k++) {
        w2[k] = 0;
        for (int i = 0; i < 5; i++) w2[k] += pat(GS_DTYPE_FLOAT64, i * 42 + k);
    }
    check(s, GS_DTYPE_FLOAT64, 2, (int64_t[]){2, 21}, w2, "x.reshape(10, 21).reshape(5, 2, 21).sum(0)");
    gs_array_release(s);
    gs_array_release(rr);
    gs_array_release(t);
    gs_array_release(r);
    gs_array_release(x);
    /* over persisted chunks: x (8, 6) in whole rows of 2, x.reshape(4, 12) in rows of 1: the
     * tril kernel's inputs are x's persisted chunks themselves */
    gs_array_h p2 = typed(GS_DTYPE_FLOAT64, 2, (int64_t[]){8, 6}, (int64_t[]){2, 6}), r2, t2;
    gs_key_t keys[4] = {{9, 0}, {9, 1}, {9, 2}, {9, 3}};
    TX_OK(gs_array_set_persisted(p2, 4, keys));
    TX_OK(gs_array_reshape(p2, 2, (int64_t[]){4, 12}, &r2));
    TX_OK(gs_array_tril(r2, 0, &t2));
    TX_OK(gs_graph_lower(t2, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(tg->nlayers, 1, "the tril kernel alone: %u layers", (unsigned)tg->nlayers);
    cr_assert_eq(tg->nexternals, 4, "x's 4 persisted chunks");
    for (uint64_t b = 0; b < 4; b++)
        cr_assert(tg->externals[b].graph == 9 && tg->externals[b].task == b);
    gs_taskgraph_free(tg);
    gs_array_clear_persisted(p2);
    gs_array_release(t2);
    gs_array_release(r2);
    gs_array_release(p2);
}

Test(graph_shape, reshape_composes_with_elementwise_ops_and_generators)
{
    /* (arange(60).reshape(5, 12) * 2)[::2] + reshape of a slice */
    gs_array_h a, r, m, s, t;
    TX_OK(gs_array_arange(0, 1, 1, (int64_t[]){60}, (int64_t[]){7}, &a));
    TX_OK(gs_array_reshape(a, 2, (int64_t[]){5, 12}, &r));
    TX_OK(gs_array_binary_array_scalar(GS_BINARY_MUL, r, 2.0, &m));
    const gs_slice_t sl[1] = {GS_SLICE_STEP(2)};
    TX_OK(gs_array_slice(m, 1, sl, &s));
    double want[36];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 12; j++) want[i * 12 + j] = 2.0 * (double)(2 * i * 12 + j);
    check(s, GS_DTYPE_FLOAT64, 2, (int64_t[]){3, 12}, want, "arange.reshape * 2 [::2]");
    /* reshape of a strided slice: ravel(m[:, 1::3]) */
    const gs_slice_t sl2[2] = {GS_SLICE_ALL, GS_SLICE_FROM(1, 3)};
    gs_array_h v, f;
    TX_OK(gs_array_slice(m, 2, sl2, &v));
    TX_OK(gs_array_ravel(v, &f));
    double want2[20];
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++) want2[i * 4 + j] = 2.0 * (double)(i * 12 + 1 + 3 * j);
    check(f, GS_DTYPE_FLOAT64, 1, (int64_t[]){20}, want2, "ravel(m[:, 1::3])");
    /* and a reduction over a reshaped array */
    gs_array_h sum;
    gs_reduce_params_t p = {.field_mask = GS_REDUCE_FIELD_AXIS, .axis = 1};
    TX_OK(gs_array_reduce(GS_RED_SUM, r, &p, &sum));
    double want3[5];
    for (int i = 0; i < 5; i++) {
        want3[i] = 0;
        for (int j = 0; j < 12; j++) want3[i] += (double)(i * 12 + j);
    }
    check(sum, GS_DTYPE_FLOAT64, 1, (int64_t[]){5}, want3, "arange.reshape.sum(axis=1)");
    gs_array_release(sum);
    gs_array_release(f);
    gs_array_release(v);
    gs_array_release(s);
    gs_array_release(m);
    gs_array_release(r);
    gs_array_release(a);
    (void)t;
}

static void body_reshape_of_zero_d_and_size_one_arrays(void)
{
    gs_array_h x = typed(GS_DTYPE_INT32, 1, (int64_t[]){5}, (int64_t[]){2}), s, r, z, o;
    TX_OK(gs_array_reduce(GS_RED_MAX, x, NULL, &s));   /* 0-d int32 */
    cr_assert_eq(gs_array_ndim(s), 0);
    double mx = -1e9;
    for (int i = 0; i < 5; i++) mx = fmax(mx, pat(GS_DTYPE_INT32, i));
    TX_OK(gs_array_ravel(s, &r));
    check(r, GS_DTYPE_INT32, 1, (int64_t[]){1}, &mx, "ravel of a 0-d array");
    TX_OK(gs_array_reshape(r, 3, (int64_t[]){1, -1, 1}, &o));
    check(o, GS_DTYPE_INT32, 3, (int64_t[]){1, 1, 1}, &mx, "(1,) -> (1, 1, 1)");
    TX_OK(gs_array_reshape(o, 0, NULL, &z));
    check(z, GS_DTYPE_INT32, 0, NULL, &mx, "(1, 1, 1) -> ()");
    gs_array_release(z);
    gs_array_release(o);
    gs_array_release(r);
    gs_array_release(s);
    gs_array_release(x);
}

Test(graph_shape, reshape_of_zero_d_and_size_one_arrays)
{
    body_reshape_of_zero_d_and_size_one_arrays();
}

static void body_reshape_of_empty_arrays(void)
{
    gs_array_h x, y;
    TX_OK(gs_array_zeros_dtype(GS_DTYPE_FLOAT32, 2, (int64_t[]){0, 6}, (int64_t[]){4, 4}, &x));
    TX_OK(gs_array_reshape(x, 3, (int64_t[]){3, 0, 2}, &y));
    check(y, GS_DTYPE_FLOAT32, 3, (int64_t[]){3, 0, 2}, NULL, "(0, 6) -> (3, 0, 2)");
    gs_array_release(y);
    TX_OK(gs_array_reshape(x, 2, (int64_t[]){-1, 3}, &y));
    check(y, GS_DTYPE_FLOAT32, 2, (int64_t[]){0, 3}, NULL, "(0, 6) -> (-1, 3)");
    gs_array_release(y);
    TX_OK(gs_array_ravel(x, &y));
    check(y, GS_DTYPE_FLOAT32, 1, (int64_t[]){0}, NULL, "ravel (0, 6)");
    gs_array_release(y);
    GX_EXPECT_INVALID(gs_array_reshape(x, 2, (int64_t[]){-1, 0}, &y), y, "cannot infer");
    gs_array_release(x);
}

Test(graph_shape, reshape_of_empty_arrays)
{
    body_reshape_of_empty_arrays();
}

Test(graph_shape, reshape_rejects_bad_shapes)
{
    gs_array_h x = typed(GS_DTYPE_FLOAT64, 2, (int64_t[]){3, 4}, (int64_t[]){2, 3}), y;
    GX_EXPECT_INVALID(gs_array_reshape(x, 2, (int64_t[]){5, 3}, &y), y,
                   "cannot reshape an array of size 12 into shape (5, 3)");
    GX_EXPECT_INVALID(gs_array_reshape(x, 2, (int64_t[]){-1, 5}, &y), y,
                   "cannot reshape an array of size 12 into shape (-1, 5)");
    GX_EXPECT_INVALID(gs_array_reshape(x, 3, (int64_t[]){-1, 2, -1}, &y), y, "more than one -1");
    GX_EXPECT_INVALID(gs_array_reshape(x, 2, (int64_t[]){-2, -6}, &y), y, "negative size on axis 0");
    GX_EXPECT_INVALID(gs_array_reshape(x, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 3, 4}, &y), y,
                   "ndim 9 out of range");
    GX_EXPECT_INVALID(gs_array_reshape(x, 2, NULL, &y), y, "shape is NULL");
    GX_EXPECT_INVALID(gs_array_reshape(NULL, 1, (int64_t[]){12}, &y), y, "operand is NULL");
    GX_EXPECT_INVALID(gs_array_ravel(NULL, &y), y, "operand is NULL");
    GX_EXPECT_INVALID(gs_array_reshape(x, 2, (int64_t[]){INT64_MAX / 2, 4}, &y), y, "overflows");
    cr_assert_eq(gs_array_reshape(x, 1, (int64_t[]){12}, NULL), GS_ERR_INVALID_PARAM);
    gs_array_release(x);
}

/* ---- tril / triu ---- */

static void check_tri(gs_dtype_t d, int nd, const int64_t *shape, const int64_t *chunks,
                      int64_t k, int upper)
{
    char what[160];
    int64_t size = 1;
    for (int a = 0; a < nd; a++) size *= shape[a];
    const int64_t m = shape[nd - 2], n = shape[nd - 1];
    gs_array_h x = typed(d, nd, shape, chunks), y;
    TX_OK(upper ? gs_array_triu(x, k, &y) : gs_array_tril(x, k, &y));
    double *want = malloc((size_t)(size ? size : 1) * sizeof(double));
    for (int64_t f = 0; f < size; f++) {
        int64_t j = f % n, i = (f / n) % m;
        int keep = upper ? j - i >= k : j - i <= k;
        want[f] = keep ? pat(d, f) : 0.0;
    }
    snprintf(what, sizeof(what), "%s %s(k=%lld) of %lld x %lld", gs_dtype_name(d),
             upper ? "triu" : "tril", (long long)k, (long long)m, (long long)n);
    check(y, d, nd, shape, want, what);
    for (int a = 0; a < nd; a++) cr_assert_eq(gs_array_nchunks(y, a), gs_array_nchunks(x, a));
    free(want);
    gs_array_release(y);
    gs_array_release(x);
}

static void body_tril_and_triu_match_numpy_for_every_k(void)
{
    static const int64_t ks[] = {-100, -8, -3, -1, 0, 1, 2, 5, 9, 100, INT64_MIN, INT64_MAX};
    for (int di = 0; di < NDT; di++)
        for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
            for (int up = 0; up < 2; up++) {
                check_tri(dtypes[di], 2, (int64_t[]){7, 9}, (int64_t[]){3, 4}, ks[ki], up);
                check_tri(dtypes[di], 2, (int64_t[]){9, 5}, (int64_t[]){4, 2}, ks[ki], up);
            }
    /* a stack of matrices, and empty ones */
    check_tri(GS_DTYPE_FLOAT32, 3, (int64_t[]){3, 5, 6}, (int64_t[]){2, 2, 4}, 1, 0);
    check_tri(GS_DTYPE_INT32, 3, (int64_t[]){3, 5, 6}, (int64_t[]){2, 2, 4}, -2, 1);
    check_tri(GS_DTYPE_FLOAT64, 2, (int64_t[]){0, 4}, (int64_t[]){1, 3}, 0, 0);
    check_tri(GS_DTYPE_FLOAT64, 2, (int64_t[]){4, 0}, (int64_t[]){3, 1}, 1, 1);
}

Test(graph_shape, tril_and_triu_match_numpy_for_every_k)
{
    body_tril_and_triu_match_numpy_for_every_k();
}

Test(graph_shape, tril_is_one_fused_kernel_and_keeps_nan)
{
    gs_array_h x, l, y;
    TX_OK(gs_array_random_normal(3, 0, 1, 2, (int64_t[]){50, 40}, (int64_t[]){16, 13}, &x));
    TX_OK(gs_array_tril(x, -1, &l));
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(l, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(tg->nlayers, 1, "tril of a generator: %u layers", (unsigned)tg->nlayers);
    gs_taskgraph_free(tg);
    gs_array_release(l);
    /* NaN above the diagonal becomes 0 (a mask, not a product) */
    gs_array_h nanv;
    TX_OK(gs_array_full(NAN, 2, (int64_t[]){4, 4}, (int64_t[]){3, 3}, &nanv));
    TX_OK(gs_array_triu(nanv, 1, &y));
    double want[16];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) want[i * 4 + j] = j - i >= 1 ? NAN : 0.0;
    double *got = eval(y, GS_LOWER_DEFAULT);
    for (int i = 0; i < 16; i++)
        cr_assert(isnan(want[i]) ? isnan(got[i]) : got[i] == want[i], "element %d: %g", i, got[i]);
    free(got);
    gs_array_release(y);
    gs_array_release(nanv);
    gs_array_release(x);
}

Test(graph_shape, tril_rejects_arrays_of_fewer_than_two_axes)
{
    gs_array_h v = typed(GS_DTYPE_FLOAT64, 1, (int64_t[]){5}, (int64_t[]){2}), s, y;
    GX_EXPECT_INVALID(gs_array_tril(v, 0, &y), y, "tril: the input must have at least 2 axes");
    GX_EXPECT_INVALID(gs_array_triu(v, 0, &y), y, "triu: the input must have at least 2 axes");
    TX_OK(gs_array_reduce(GS_RED_SUM, v, NULL, &s));
    GX_EXPECT_INVALID(gs_array_tril(s, 0, &y), y, "it has 0");
    GX_EXPECT_INVALID(gs_array_tril(NULL, 0, &y), y, "operand is NULL");
    cr_assert_eq(gs_array_triu(v, 0, NULL), GS_ERR_INVALID_PARAM);
    gs_array_release(s);
    gs_array_release(v);
}

/* ---- eye ---- */

static void body_eye_matches_numpy(void)
{
    static const gs_dtype_t eds[] = {GS_DTYPE_FLOAT64, GS_DTYPE_FLOAT32, GS_DTYPE_INT32,
                                     GS_DTYPE_BOOL, GS_DTYPE_FLOAT16, GS_DTYPE_UINT8,
                                     GS_DTYPE_INT64};
    static const int64_t ks[] = {-7, -2, 0, 3, 4, 10, INT64_MIN};
    static const int64_t dims[][2] = {{7, 5}, {5, 7}, {6, -1}, {0, 3}, {3, 0}, {1, 1}};
    for (size_t di = 0; di < sizeof(eds) / sizeof(eds[0]); di++)
        for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
            for (size_t si = 0; si < sizeof(dims) / sizeof(dims[0]); si++) {
                const int64_t n = dims[si][0], m = dims[si][1] < 0 ? n : dims[si][1];
                const int64_t k = ks[ki];
                char what[128];
                gs_array_h e;
                TX_OK(gs_array_eye(n, dims[si][1], k, eds[di], (int64_t[]){3, 2}, &e));
                double *want = calloc((size_t)(n * m + 1), sizeof(double));
                for (int64_t i = 0; i < n; i++)
                    for (int64_t j = 0; j < m; j++) want[i * m + j] = j - i == k;
                snprintf(what, sizeof(what), "eye(%lld, %lld, k=%lld, %s)", (long long)n,
                         (long long)m, (long long)k, gs_dtype_name(eds[di]));
                check(e, eds[di], 2, (int64_t[]){n, m}, want, what);
                if (n > 3) cr_assert_eq(gs_array_nchunks(e, 0), (n + 2) / 3);
                if (m > 2) cr_assert_eq(gs_array_nchunks(e, 1), (m + 1) / 2);
                free(want);
                gs_array_release(e);
            }
}

Test(graph_shape, eye_matches_numpy)
{
    body_eye_matches_numpy();
}

Test(graph_shape, eye_rejects_bad_arguments)
{
    gs_array_h y;
    const int64_t ch[2] = {2, 2};
    GX_EXPECT_INVALID(gs_array_eye(-1, 3, 0, GS_DTYPE_FLOAT64, ch, &y), y, "n = -1 is negative");
    GX_EXPECT_INVALID(gs_array_eye(3, -2, 0, GS_DTYPE_FLOAT64, ch, &y), y, "m = -2 is negative");
    GX_EXPECT_INVALID(gs_array_eye(3, 3, 0, (gs_dtype_t)99, ch, &y), y, "unknown dtype 99");
    GX_EXPECT_INVALID(gs_array_eye(3, 3, 0, GS_DTYPE_FLOAT64, NULL, &y), y, "chunks is NULL");
    GX_EXPECT_INVALID(gs_array_eye(3, 3, 0, GS_DTYPE_FLOAT64, (int64_t[]){0, 2}, &y), y,
                   "must be >= 1");
    cr_assert_eq(gs_array_eye(3, 3, 0, GS_DTYPE_FLOAT64, ch, NULL), GS_ERR_INVALID_PARAM);
    GX_EXPECT_INVALID(gs_array_eye((INT64_C(1) << 53) + 1, 1, 0, GS_DTYPE_BOOL, ch, &y), y,
                   "longer than 2^53");
}

/* ---- diag ---- */

static void body_diag_of_a_vector_builds_the_matrix(void)
{
    static const int64_t ks[] = {-3, -1, 0, 1, 4};
    for (int di = 0; di < NDT; di++)
        for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
            const gs_dtype_t d = dtypes[di];
            const int64_t n = 7, k = ks[ki], big = n + (k < 0 ? -k : k);
            char what[96];
            gs_array_h v = typed(d, 1, (int64_t[]){n}, (int64_t[]){3}), y;
            TX_OK(gs_array_diag(v, k, &y));
            double *want = calloc((size_t)(big * big), sizeof(double));
            for (int64_t i = 0; i < n; i++) {
                int64_t r = k >= 0 ? i : i - k, c = k >= 0 ? i + k : i;
                want[r * big + c] = pat(d, i);
            }
            snprintf(what, sizeof(what), "%s diag(v[7], k=%lld)", gs_dtype_name(d), (long long)k);
            check(y, d, 2, (int64_t[]){big, big}, want, what);
            free(want);
            gs_array_release(y);
            gs_array_release(v);
        }
    /* empty vectors */
    gs_array_h e, y;
    TX_OK(gs_array_zeros_dtype(GS_DTYPE_INT32, 1, (int64_t[]){0}, (int64_t[]){1}, &e));
    TX_OK(gs_array_diag(e, 0, &y));
    check(y, GS_DTYPE_INT32, 2, (int64_t[]){0, 0}, NULL, "diag(empty)");
    gs_array_release(y);
    TX_OK(gs_array_diag(e, -2, &y));
    check(y, GS_DTYPE_INT32, 2, (int64_t[]){2, 2}, (double[]){0, 0, 0, 0}, "diag(empty, -2)");
    gs_array_release(y);
    gs_array_release(e);
}

Test(graph_shape, diag_of_a_vector_builds_the_matrix)
{
    body_diag_of_a_vector_builds_the_matrix();
}

static void body_diag_of_a_matrix_extracts_the_diagonal(void)
{
    static const int64_t ks[] = {-9, -7, -6, -2, 0, 3, 8, 9, 20, INT64_MIN, INT64_MAX};
    static const int64_t shapes[][2] = {{7, 9}, {9, 7}, {5, 5}};
    for (int di = 0; di < NDT; di++)
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
            for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
                const gs_dtype_t d = dtypes[di];
                const int64_t m = shapes[si][0], n = shapes[si][1], k = ks[ki];
                double want[16];
                int64_t len = 0;
                char what[96];
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++)
                        if (k > -100 && k < 100 && j - i == k) want[len++] = pat(d, i * n + j);
                gs_array_h x = typed(d, 2, shapes[si], (int64_t[]){3, 4}), y;
                TX_OK(gs_array_diag(x, k, &y));
                snprintf(what, sizeof(what), "%s diag(%lldx%lld, k=%lld)", gs_dtype_name(d),
                         (long long)m, (long long)n, (long long)k);
                check(y, d, 1, &len, want, what);
                gs_array_release(y);
                gs_array_release(x);
            }
}

Test(graph_shape, diag_of_a_matrix_extracts_the_diagonal)
{
    body_diag_of_a_matrix_extracts_the_diagonal();
}

Test(graph_shape, diag_of_a_matrix_reads_only_the_diagonal)
{
    /* one copy task per run of the diagonal inside one block, cut at the row and column
     * boundaries: 7 x 9 in (3, 4) chunks, k = 0 -> runs [0, 3) [3, 4) [4, 6) [6, 7) */
    gs_array_h x = typed(GS_DTYPE_FLOAT64, 2, (int64_t[]){7, 9}, (int64_t[]){3, 4}), y;
    TX_OK(gs_array_diag(x, 0, &y));
    static const int64_t wb[5] = {0, 3, 4, 6, 7};
    cr_assert_eq(gs_array_nchunks(y, 0), 4);
    for (int c = 0; c <= 4; c++) cr_assert_eq(gs_array_chunk_bounds(y, 0)[c], wb[c]);
    cr_assert_eq(nlayers(y), nlayers(x) + 1);
    gs_array_release(y);
    /* of a generator, k = 5: normal values from the random definition */
    gs_array_h g, d;
    TX_OK(gs_array_random_normal(9, 0, 1, 2, (int64_t[]){50, 40}, (int64_t[]){16, 13}, &g));
    TX_OK(gs_array_diag(g, 5, &d));
    double want[35];
    for (int i = 0; i < 35; i++) want[i] = gs_random_normal_v3(9, (uint64_t)(i * 40 + i + 5), 0, 1);
    double *got = eval(d, GS_LOWER_DEFAULT);
    for (int i = 0; i < 35; i++)
        cr_assert(fabs(got[i] - want[i]) <= 1e-15 * fmax(1.0, fabs(want[i])), "element %d", i);
    free(got);
    gs_array_release(d);
    gs_array_release(g);
    gs_array_release(x);
}

Test(graph_shape, diag_rejects_other_ranks)
{
    gs_array_h x = typed(GS_DTYPE_FLOAT64, 3, (int64_t[]){2, 3, 4}, (int64_t[]){1, 2, 3}), y;
    GX_EXPECT_INVALID(gs_array_diag(x, 0, &y), y, "diag: the input must be 1-D or 2-D, it has 3");
    GX_EXPECT_INVALID(gs_array_diag(NULL, 0, &y), y, "operand is NULL");
    gs_array_h v = typed(GS_DTYPE_FLOAT64, 1, (int64_t[]){3}, (int64_t[]){2});
    GX_EXPECT_INVALID(gs_array_diag(v, INT64_MIN, &y), y, "too large");
    gs_array_release(v);
    gs_array_release(x);
}

/* ---- the same on the CUDA backend (skips without a device) ---- */

#ifdef GS_HAVE_CUDA
Test(graph_shape, reshape_on_cuda)
{
    gx_cuda_begin(&be, &ctx);
    body_reshape_merges_and_splits_axes_on_odd_chunks();
    body_reshape_of_empty_arrays();
    body_reshape_of_zero_d_and_size_one_arrays();
    gx_cuda_end(&be, &ctx);
}

Test(graph_shape, tril_triu_eye_diag_on_cuda)
{
    gx_cuda_begin(&be, &ctx);
    body_tril_and_triu_match_numpy_for_every_k();
    body_eye_matches_numpy();
    body_diag_of_a_vector_builds_the_matrix();
    body_diag_of_a_matrix_extracts_the_diagonal();
    gx_cuda_end(&be, &ctx);
}
#endif

/* ---- random shapes ---- */

static uint64_t rs_state = 0x243f6a8885a308d3ull;
static int64_t rs_next(int64_t n)   /* 0 .. n-1 */
{
    rs_state = rs_state * 6364136223846793005ull + 1442695040888963407ull;
    return (int64_t)((rs_state >> 33) % (uint64_t)n);
}

/* A random reshape: an input shape of @a ind axes (each 1 to 6 long) with random chunks in
 * @a ish, @a ich, and its size split into @a ond - 1 random factors in osh[0 .. ond - 2]. Returns
 * the size; what is left of it (for the last output axis) in *left_p. */
static int64_t rs_reshape_draw(int ind, int ond, int64_t *ish, int64_t *ich, int64_t *osh,
                               int64_t *left_p)
{
    static const int64_t sizes[] = {1, 2, 3, 4, 5, 6};
    int64_t size = 1, left;
    for (int a = 0; a < ind; a++) {
        ish[a] = sizes[rs_next(6)];
        ich[a] = 1 + rs_next(ish[a]);
        size *= ish[a];
    }
    left = size;
    for (int a = 0; a + 1 < ond; a++) {
        int64_t f = 1 + rs_next(left);
        while (left % f != 0) f--;
        osh[a] = f;
        left /= f;
    }
    *left_p = left;
    return size;
}

/* @a y (of @a size elements), evaluated unfused and with GS_LOWER_DEFAULT, equals @a want;
 * failures name random trial @a trial and its @a ind -> @a ond axes. */
static void expect_reshaped(gs_array_h y, const double *want, int64_t size, int trial, int ind,
                            int ond)
{
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f += GS_LOWER_DEFAULT) {
        double *got = eval(y, f);
        for (int64_t i = 0; i < size; i++)
            cr_assert(got[i] == want[i], "trial %d (%d-D -> %d-D), flags 0x%x: element %lld",
                      trial, ind, ond, f, (long long)i);
        free(got);
    }
}

Test(graph_shape, reshape_of_random_shapes_and_chunkings)
{
    for (int trial = 0; trial < 300; trial++) {
        int ind = 1 + (int)rs_next(4), ond = (int)rs_next(5);
        int64_t ish[GS_MAX_NDIM], ich[GS_MAX_NDIM], osh[GS_MAX_NDIM];
        /* the output: size split into ond factors (the rest on the last axis) */
        int64_t left, size = rs_reshape_draw(ind, ond, ish, ich, osh, &left);
        if (ond == 0 && size != 1) ond = 1;
        if (ond > 0) osh[ond - 1] = left;
        if (ond > 1 && rs_next(3) == 0) osh[rs_next(ond)] = -1;
        gs_array_h x = typed(GS_DTYPE_FLOAT64, ind, ish, ich), y;
        TX_OK(gs_array_reshape(x, ond, osh, &y));
        int64_t ys[GS_MAX_NDIM], ysize = 1;
        gs_array_shape(y, ys);
        for (int a = 0; a < ond; a++) {
            if (osh[a] != -1) cr_assert_eq(ys[a], osh[a]);
            ysize *= ys[a];
        }
        cr_assert_eq(ysize, size, "trial %d", trial);
        double *want = malloc((size_t)size * sizeof(double));
        for (int64_t i = 0; i < size; i++) want[i] = pat(GS_DTYPE_FLOAT64, i);
        expect_reshaped(y, want, size, trial, ind, ond);
        free(want);
        gs_array_release(y);
        gs_array_release(x);
    }
}

/* ---- reshape in Fortran order (NumPy's order='F') ---- */

/* The reference: output element at column-major flat index f is the input element at
 * column-major flat index f (np.reshape(x, s, order='F')), laid out here in row-major order. */
static void ref_reshape_f(gs_dtype_t d, int ind, const int64_t *ish, int ond, const int64_t *osh,
                          double *want)
{
    int64_t size = 1, idx[GS_MAX_NDIM] = {0};
    for (int a = 0; a < ond; a++) size *= osh[a];
    for (int64_t o = 0; o < size; o++) {
        int64_t f = 0, m = 1, rem = o, c = 0;
        for (int a = ond - 1; a >= 0; a--) {   /* row-major o -> output index */
            idx[a] = rem % osh[a];
            rem /= osh[a];
        }
        for (int a = 0; a < ond; a++) {        /* output index -> column-major flat f */
            f += idx[a] * m;
            m *= osh[a];
        }
        for (int a = 0; a < ind; a++) {        /* column-major f -> input index */
            idx[a] = f % ish[a];
            f /= ish[a];
        }
        for (int a = 0; a < ind; a++) c = c * ish[a] + idx[a];   /* -> row-major input */
        want[o] = pat(d, c);
    }
}

static void check_reshape_f(gs_dtype_t d, int ind, const int64_t *ish, const int64_t *ich,
                            int ond, const int64_t *osh, const int64_t *want_shape)
{
    char what[160];
    int64_t size = 1;
    for (int a = 0; a < ind; a++) size *= ish[a];
    gs_array_h x = typed(d, ind, ish, ich), y;
    TX_OK(gs_array_reshape_order(x, ond, osh, GS_ORDER_F, &y));
    double *want = malloc((size_t)(size ? size : 1) * sizeof(double));
    cr_assert_not_null(want);
    ref_reshape_f(d, ind, ish, ond, want_shape, want);
    snprintf(what, sizeof(what), "%s reshape order F %d-D -> %d-D", gs_dtype_name(d), ind, ond);
    check(y, d, ond, want_shape, want, what);
    free(want);
    gs_array_release(y);
    gs_array_release(x);
}

static void body_reshape_order_f_matches_numpy_on_odd_chunks(void)
{
    const int64_t s1[1] = {12}, c1[1] = {5};
    const int64_t s2[2] = {7, 10}, c2[2] = {3, 4};
    const int64_t s3[3] = {6, 5, 4}, c3[3] = {4, 2, 3};
    for (int di = 0; di < NDT; di++) {
        gs_dtype_t d = dtypes[di];
        check_reshape_f(d, 1, s1, c1, 2, (int64_t[]){3, 4}, (int64_t[]){3, 4});
        check_reshape_f(d, 1, s1, c1, 3, (int64_t[]){2, -1, 3}, (int64_t[]){2, 2, 3});
        check_reshape_f(d, 2, s2, c2, 1, (int64_t[]){-1}, (int64_t[]){70});
        check_reshape_f(d, 2, s2, c2, 2, (int64_t[]){10, 7}, (int64_t[]){10, 7});
        check_reshape_f(d, 2, s2, c2, 2, (int64_t[]){5, 14}, (int64_t[]){5, 14});
        check_reshape_f(d, 2, s2, c2, 2, (int64_t[]){14, -1}, (int64_t[]){14, 5});
        check_reshape_f(d, 2, s2, c2, 3, (int64_t[]){7, 2, 5}, (int64_t[]){7, 2, 5});
        check_reshape_f(d, 2, s2, c2, 2, (int64_t[]){7, 10}, (int64_t[]){7, 10});   /* same */
        check_reshape_f(d, 3, s3, c3, 2, (int64_t[]){30, 4}, (int64_t[]){30, 4});
        check_reshape_f(d, 3, s3, c3, 2, (int64_t[]){6, -1}, (int64_t[]){6, 20});
        check_reshape_f(d, 3, s3, c3, 3, (int64_t[]){4, 5, 6}, (int64_t[]){4, 5, 6});
        check_reshape_f(d, 3, s3, c3, 4, (int64_t[]){3, 2, 5, 4}, (int64_t[]){3, 2, 5, 4});
        check_reshape_f(d, 3, s3, c3, 1, (int64_t[]){120}, (int64_t[]){120});
    }
    check_reshape_f(GS_DTYPE_FLOAT64, 1, (int64_t[]){105}, (int64_t[]){4}, 3,
                    (int64_t[]){3, 5, 7}, (int64_t[]){3, 5, 7});
    check_reshape_f(GS_DTYPE_INT32, 2, (int64_t[]){6, 35}, (int64_t[]){4, 6}, 2,
                    (int64_t[]){10, 21}, (int64_t[]){10, 21});
}

Test(graph_shape, reshape_order_f_matches_numpy_on_odd_chunks)
{
    body_reshape_order_f_matches_numpy_on_odd_chunks();
}

/* The reference against NumPy's own output, so that ref_reshape_f cannot be wrong with it:
 * np.arange(6).reshape(2, 3, order='F') == [[0, 2, 4], [1, 3, 5]] and
 * np.arange(24).reshape(2, 3, 4).reshape(4, 6, order='F')[1] == [12, 20, 17, 14, 22, 19]. */
Test(graph_shape, reshape_order_f_gives_numpys_values)
{
    gs_array_h x, y, z, w;
    double got6[6], got24[24];
    TX_OK(gs_array_arange(0.0, 1.0, 1, (int64_t[]){6}, (int64_t[]){4}, &x));
    TX_OK(gs_array_reshape_order(x, 2, (int64_t[]){2, 3}, GS_ORDER_F, &y));
    TX_OK(gs_chunkops_eval_array(be, ctx, y, GS_LOWER_DEFAULT, got6, 6));
    const double want6[6] = {0, 2, 4, 1, 3, 5};
    for (int i = 0; i < 6; i++) cr_assert_eq(got6[i], want6[i], "element %d: %g", i, got6[i]);
    TX_OK(gs_array_arange(0.0, 1.0, 3, (int64_t[]){2, 3, 4}, (int64_t[]){1, 2, 3}, &z));
    TX_OK(gs_array_reshape_order(z, 2, (int64_t[]){4, 6}, GS_ORDER_F, &w));
    TX_OK(gs_chunkops_eval_array(be, ctx, w, GS_LOWER_DEFAULT, got24, 24));
    const double want_row1[6] = {12, 20, 17, 14, 22, 19};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(got24[6 + i], want_row1[i], "row 1, column %d: %g", i, got24[6 + i]);
    gs_array_release(w);
    gs_array_release(z);
    gs_array_release(y);
    gs_array_release(x);
}

Test(graph_shape, reshape_order_f_of_empty_and_size_one_arrays)
{
    gs_array_h x, y, s, r;
    TX_OK(gs_array_zeros_dtype(GS_DTYPE_FLOAT32, 2, (int64_t[]){0, 6}, (int64_t[]){4, 4}, &x));
    TX_OK(gs_array_reshape_order(x, 3, (int64_t[]){3, 0, 2}, GS_ORDER_F, &y));
    check(y, GS_DTYPE_FLOAT32, 3, (int64_t[]){3, 0, 2}, NULL, "F (0, 6) -> (3, 0, 2)");
    gs_array_release(y);
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 2, (int64_t[]){-1, 0}, GS_ORDER_F, &y), y,
                      "cannot infer");
    gs_array_release(x);
    x = typed(GS_DTYPE_INT32, 1, (int64_t[]){5}, (int64_t[]){2});
    TX_OK(gs_array_reduce(GS_RED_MAX, x, NULL, &s));   /* 0-d */
    double mx = -1e9;
    for (int i = 0; i < 5; i++) mx = fmax(mx, pat(GS_DTYPE_INT32, i));
    TX_OK(gs_array_reshape_order(s, 3, (int64_t[]){1, 1, -1}, GS_ORDER_F, &r));
    check(r, GS_DTYPE_INT32, 3, (int64_t[]){1, 1, 1}, &mx, "F () -> (1, 1, 1)");
    gs_array_release(r);
    gs_array_release(s);
    gs_array_release(x);
}

Test(graph_shape, reshape_order_rejects_bad_input)
{
    gs_array_h x = typed(GS_DTYPE_FLOAT64, 2, (int64_t[]){3, 4}, (int64_t[]){2, 3}), y;
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 2, (int64_t[]){5, 3}, GS_ORDER_F, &y), y,
                      "cannot reshape an array of size 12 into shape (5, 3)");
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 2, (int64_t[]){-1, 5}, GS_ORDER_F, &y), y,
                      "cannot reshape an array of size 12 into shape (-1, 5)");
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 3, (int64_t[]){-1, 2, -1}, GS_ORDER_F, &y), y,
                      "more than one -1");
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 2, (int64_t[]){-2, -6}, GS_ORDER_F, &y), y,
                      "negative size on axis 0");
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 2, (int64_t[]){4, 3}, (gs_order_t)2, &y), y,
                      "unknown order 2");
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 2, (int64_t[]){4, 3}, (gs_order_t)-1, &y), y,
                      "unknown order -1");
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 2, (int64_t[]){12, 1}, (gs_order_t)7, &y), y,
                      "unknown order 7");
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 2, NULL, GS_ORDER_F, &y), y, "shape is NULL");
    GX_EXPECT_INVALID(gs_array_reshape_order(NULL, 1, (int64_t[]){12}, GS_ORDER_F, &y), y,
                      "operand is NULL");
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 3, 4},
                                             GS_ORDER_F, &y), y, "ndim 9 out of range");
    cr_assert_eq(gs_array_reshape_order(x, 1, (int64_t[]){12}, GS_ORDER_F, NULL),
                 GS_ERR_INVALID_PARAM);
    /* GS_ORDER_C is gs_array_reshape(): its errors and values */
    GX_EXPECT_INVALID(gs_array_reshape_order(x, 2, (int64_t[]){5, 3}, GS_ORDER_C, &y), y,
                      "cannot reshape an array of size 12 into shape (5, 3)");
    check_reshape(GS_DTYPE_FLOAT64, 2, (int64_t[]){3, 4}, (int64_t[]){2, 3}, 2,
                  (int64_t[]){6, 2}, (int64_t[]){6, 2});
    TX_OK(gs_array_reshape_order(x, 2, (int64_t[]){6, 2}, GS_ORDER_C, &y));
    {
        double want[12];
        for (int i = 0; i < 12; i++) want[i] = pat(GS_DTYPE_FLOAT64, i);
        check(y, GS_DTYPE_FLOAT64, 2, (int64_t[]){6, 2}, want, "order C (3, 4) -> (6, 2)");
    }
    gs_array_release(y);
    gs_array_release(x);
}

Test(graph_shape, reshape_order_f_of_random_shapes_and_chunkings)
{
    for (int trial = 0; trial < 150; trial++) {
        int ind = 1 + (int)rs_next(4), ond = 1 + (int)rs_next(4);
        int64_t ish[GS_MAX_NDIM], ich[GS_MAX_NDIM], osh[GS_MAX_NDIM], left;
        int64_t size = rs_reshape_draw(ind, ond, ish, ich, osh, &left);
        osh[ond - 1] = left;
        gs_array_h x = typed(GS_DTYPE_FLOAT64, ind, ish, ich), y;
        TX_OK(gs_array_reshape_order(x, ond, osh, GS_ORDER_F, &y));
        double *want = malloc((size_t)size * sizeof(double));
        cr_assert_not_null(want);
        ref_reshape_f(GS_DTYPE_FLOAT64, ind, ish, ond, osh, want);
        expect_reshaped(y, want, size, trial, ind, ond);
        free(want);
        gs_array_release(y);
        gs_array_release(x);
    }
}

#ifdef GS_HAVE_CUDA
Test(graph_shape, reshape_order_f_on_cuda)
{
    gx_cuda_begin(&be, &ctx);
    body_reshape_order_f_matches_numpy_on_odd_chunks();
    gx_cuda_end(&be, &ctx);
}
#endif
