/* gs_array_map_blocks_dtype on the CPU backend's serial evaluator (issue 16): C kernels from
 * the test kernel library (tests/kernels, gs_test_typed) on float32, int32, uint8, int64,
 * bool, float16 and float64 blocks, with outputs of the caller's dtype, against a plain-C
 * reference on odd chunkings under every combination of lowering flags (fused and not, every
 * layer round-tripped through the codec); typed producers and consumers fused with an
 * elementwise kernel into one task per block; clean errors naming the dtypes. */
#include "dtype_eval_util.h"

#include <stddef.h>

TestSuite(graph_map_dtype, .init = setup, .fini = teardown, .timeout = 120);

#define R 13
#define C 11
static const int64_t shape[2] = {R, C}, chunks[2] = {4, 3};   /* 4 x 4 blocks, odd edges */

/* Input values exact in dtype @a d (uint8 and bool non-negative, floats halves). */
static double value(gs_dtype_t d, int k, int64_t i)
{
    switch (d) {
    case GS_DTYPE_BOOL: return (double)((i + k) % 3 == 0);
    case GS_DTYPE_UINT8: return (double)((i * 37 + k * 11) % 256);
    case GS_DTYPE_FLOAT32:
    case GS_DTYPE_FLOAT16:
    case GS_DTYPE_FLOAT64: return 0.5 * (double)((i * 7 + k) % 23 - 11);
    default: return (double)((i * 7 + k) % 23 - 11) * 1000.0;
    }
}

/* An R x C array of dtype @a d holding value(d, k, i): float64 from the host, then astype (a
 * blockwise producer the fused path inlines). */
static gs_array_h input(gs_dtype_t d, int k)
{
    double v[R * C];
    gs_array_h x, y;
    for (int64_t i = 0; i < R * C; i++) v[i] = value(d, k, i);
    OK(gs_array_from_host(v, 2, shape, chunks, &x));
    OK(gs_array_astype(x, d, &y));
    gs_array_release(x);
    return y;
}

/* v stored in dtype @a d as gs_test_typed stores it, read back as a double. */
static double store(gs_dtype_t d, double v)
{
    switch (d) {
    case GS_DTYPE_FLOAT32: return (double)(float)v;
    case GS_DTYPE_FLOAT16: return (double)(_Float16)v;
    case GS_DTYPE_INT32: return (double)(int32_t)(int64_t)v;
    case GS_DTYPE_INT64: return (double)(int64_t)v;
    case GS_DTYPE_UINT8: return (double)(uint8_t)(int64_t)v;
    case GS_DTYPE_BOOL: return v != 0.0;
    default: return v;
    }
}

static gs_array_h typed_map(int nin, gs_array_h *in, gs_dtype_t out, uint32_t flags)
{
    gs_user_kernel_t k = {GS_TEST_KERNELS, "gs_test_typed", NULL, 0, NULL, flags};
    gs_array_h m;
    OK(gs_array_map_blocks_dtype(&k, nin, in, out, 2, shape, chunks, &m));
    cr_assert_eq(gs_array_dtype(m), (int)out);
    return m;
}

static uint64_t ntasks(gs_array_h h, unsigned flags)
{
    gs_taskgraph_t *tg;
    uint64_t n;
    OK(gs_graph_lower(h, flags, &tg));
    n = tg->ntasks;
    gs_taskgraph_free(tg);
    return n;
}

/* gs_test_typed over inputs of @a d0 (and @a d1 when nin is 2) into @a out against its
 * plain-C twin; with @a flags GS_KERNEL_ELEMENTWISE also a consumer (+ 5 as a Python int,
 * which keeps @a out's dtype) and the fused chain's task count. */
static void check_typed(int nin, gs_dtype_t d0, gs_dtype_t d1, gs_dtype_t out, uint32_t flags)
{
    gs_array_h in[2] = {input(d0, 0), nin > 1 ? input(d1, 1) : NULL};
    gs_array_h m = typed_map(nin, in, out, flags);
    double want[R * C];
    char what[128];
    snprintf(what, sizeof(what), "%s%s%s -> %s%s", gs_dtype_name(d0), nin > 1 ? ", " : "",
             nin > 1 ? gs_dtype_name(d1) : "", gs_dtype_name(out), flags ? " (elementwise)" : "");
    for (int64_t i = 0; i < R * C; i++)
        want[i] = store(out, 2.0 * value(d0, 0, i) + (nin > 1 ? value(d1, 1, i) : 0.0) +
                                 (double)(i / C));
    check(m, want, R * C, what);
    if (flags & GS_KERNEL_ELEMENTWISE) {
        gs_array_h c;
        /* producers (astype), kernel and consumer: one task per block (after the 16 tasks
         * of each input's literal), and more unfused */
        cr_assert_eq(ntasks(m, GS_LOWER_DEFAULT), 16 * (uint64_t)(nin + 1), "%s", what);
        if (out != GS_DTYPE_BOOL) {
            OK(gs_array_binary_array_scalar_kind(GS_BINARY_ADD, m, 5.0, GS_SCALAR_INT, &c));
            cr_assert_eq(gs_array_dtype(c), (int)out, "%s: + 5 keeps the dtype", what);
            for (int64_t i = 0; i < R * C; i++) want[i] = store(out, want[i] + 5.0);
            check(c, want, R * C, what);
            cr_assert_eq(ntasks(c, GS_LOWER_DEFAULT), 16 * (uint64_t)(nin + 1), "%s", what);
            cr_assert_eq(ntasks(c, 0), 16 * (uint64_t)(2 * nin + 2), "%s", what);
            gs_array_release(c);
        }
    }
    gs_array_release(m);
    for (int k = 0; k < nin; k++) gs_array_release(in[k]);
}

Test(graph_map_dtype, float32_int32_and_uint8_blocks_keep_their_dtypes)
{
    check_typed(1, GS_DTYPE_FLOAT32, 0, GS_DTYPE_FLOAT32, GS_KERNEL_ELEMENTWISE);
    check_typed(1, GS_DTYPE_INT32, 0, GS_DTYPE_INT32, GS_KERNEL_ELEMENTWISE);
    check_typed(1, GS_DTYPE_UINT8, 0, GS_DTYPE_UINT8, GS_KERNEL_ELEMENTWISE);   /* wraps */
    check_typed(1, GS_DTYPE_FLOAT32, 0, GS_DTYPE_FLOAT32, 0);
    check_typed(1, GS_DTYPE_INT32, 0, GS_DTYPE_INT32, 0);
    check_typed(1, GS_DTYPE_UINT8, 0, GS_DTYPE_UINT8, 0);
}

Test(graph_map_dtype, mixed_inputs_and_an_output_dtype_of_the_callers_choice)
{
    check_typed(2, GS_DTYPE_INT32, GS_DTYPE_UINT8, GS_DTYPE_INT64, GS_KERNEL_ELEMENTWISE);
    check_typed(2, GS_DTYPE_FLOAT32, GS_DTYPE_INT32, GS_DTYPE_FLOAT64, 0);
    check_typed(2, GS_DTYPE_UINT8, GS_DTYPE_BOOL, GS_DTYPE_FLOAT16, GS_KERNEL_ELEMENTWISE);
    check_typed(2, GS_DTYPE_FLOAT64, GS_DTYPE_FLOAT32, GS_DTYPE_BOOL, GS_KERNEL_ELEMENTWISE);
    check_typed(1, GS_DTYPE_INT64, 0, GS_DTYPE_UINT8, 0);
    check_typed(1, GS_DTYPE_FLOAT16, 0, GS_DTYPE_INT32, GS_KERNEL_ELEMENTWISE);
}

Test(graph_map_dtype, a_typed_kernel_feeds_a_reduction_in_one_task_per_block)
{
    gs_array_h in[1] = {input(GS_DTYPE_INT32, 0)}, m, s;
    double want = 0.0;
    m = typed_map(1, in, GS_DTYPE_INT64, GS_KERNEL_ELEMENTWISE);
    OK(gs_array_reduce(GS_RED_SUM, m, NULL, &s));
    for (int64_t i = 0; i < R * C; i++) want += 2.0 * value(GS_DTYPE_INT32, 0, i) + (double)(i / C);
    check(s, &want, 1, "sum of int32 -> int64");
    gs_array_release(s);
    gs_array_release(m);
    gs_array_release(in[0]);
}

Test(graph_map_dtype, unknown_dtypes_and_typed_map_overlap_are_refused_by_name)
{
    gs_array_h in[1] = {input(GS_DTYPE_INT32, 0)}, m = NULL;
    gs_user_kernel_t k = {GS_TEST_KERNELS, "gs_test_typed", NULL, 0, NULL, 0};
    const int depth[2] = {1, 1};
    cr_assert_eq(gs_array_map_blocks_dtype(&k, 1, in, (gs_dtype_t)GS_DTYPE_COUNT, 2, shape,
                                           chunks, &m), GS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(gs_last_error(), "dtype 7"), "%s", gs_last_error());
    cr_assert_eq(gs_array_map_blocks_dtype(&k, 1, in, (gs_dtype_t)-2, 2, shape, chunks, &m),
                 GS_ERR_INVALID_PARAM);
    cr_assert_null(m);
    cr_assert_eq(gs_array_map_overlap(&k, in[0], depth, GS_BOUNDARY_REFLECT, 0.0, &m),
                 GS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(gs_last_error(), "map_overlap"), "%s", gs_last_error());
    cr_assert_not_null(strstr(gs_last_error(), "int32"), "%s", gs_last_error());
    cr_assert_null(m);
    gs_array_release(in[0]);
}

Test(graph_map_dtype, the_block_layout_keeps_its_fields_and_appends_the_dtype)
{
    cr_assert_eq(offsetof(gs_block_t, data), 0);
    cr_assert_eq(offsetof(gs_block_t, ndim), 8);
    cr_assert_eq(offsetof(gs_block_t, shape), 16);
    cr_assert_eq(offsetof(gs_block_t, start), 16 + 8 * GS_MAX_NDIM);
    cr_assert_eq(offsetof(gs_block_t, dtype), 16 + 16 * GS_MAX_NDIM);
    gs_block_t zeroed = {0};
    cr_assert_eq(zeroed.dtype, GS_DTYPE_FLOAT64, "a zeroed block is float64");
}

/* The typed USER layer's wire form (9 fields: the dtypes last), plain and fused: decodes to
 * the same bytes, refuses every prefix, and a dtype outside gs_dtype_t is refused. */
Test(graph_map_dtype, typed_user_layers_round_trip_and_refuse_truncations_and_bad_dtypes)
{
    gs_array_h in[2] = {input(GS_DTYPE_INT32, 0), input(GS_DTYPE_UINT8, 1)};
    for (int fuse = 0; fuse < 2; fuse++) {
        gs_array_h m = typed_map(2, in, GS_DTYPE_FLOAT32, GS_KERNEL_ELEMENTWISE);
        gs_taskgraph_t *tg;
        int seen = 0;
        OK(gs_graph_lower(m, fuse ? GS_LOWER_DEFAULT : 0, &tg));
        for (uint32_t i = 0; i < tg->nlayers; i++) {
            const gs_layer_t *l = tg->layers[i];
            gs_buf_t b, b2;
            gs_layer_t *dl = NULL;
            if (gs_layer_kind(l) != GS_LAYER_USER) continue;
            seen++;
            gs_buf_init(&b);
            gs_buf_init(&b2);
            OK(gs_layer_encode(l, &b));
            OK(gs_layer_decode(b.data, b.len, &dl));
            OK(gs_layer_encode(dl, &b2));
            cr_assert(b.len == b2.len && memcmp(b.data, b2.data, b.len) == 0);
            gs_layer_free(dl);
            for (size_t n = 0; n < b.len; n++) {
                gs_layer_t *t = NULL;
                cr_assert_eq(gs_layer_decode(b.data, n, &t), GS_ERR_PROTO, "prefix of %zu", n);
            }
            /* the last bytes are [out, in0, in1] = [1, 3, 5] as positive fixints */
            cr_assert_eq(b.data[b.len - 3], GS_DTYPE_FLOAT32);
            cr_assert_eq(b.data[b.len - 2], GS_DTYPE_INT32);
            cr_assert_eq(b.data[b.len - 1], GS_DTYPE_UINT8);
            b.data[b.len - 2] = GS_DTYPE_COUNT;
            cr_assert_eq(gs_layer_decode(b.data, b.len, &dl), GS_ERR_PROTO);
            gs_buf_cleanup(&b);
            gs_buf_cleanup(&b2);
        }
        cr_assert_eq(seen, 1, "fuse %d", fuse);
        gs_taskgraph_free(tg);
        gs_array_release(m);
    }
    gs_array_release(in[0]);
    gs_array_release(in[1]);
}
