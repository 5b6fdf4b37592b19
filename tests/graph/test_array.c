/* Expression API: argument validation (one test per rejected case) and chunk bounds. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "common/alloc.h"
#include "graph/taskgraph.h"

#define OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s: %s", #call, gs_last_error()); } while (0)

/* The call fails with GS_ERR_INVALID_PARAM, leaves *out untouched and names the problem. */
#define REJECTS(call, out, word) do { \
    gs_array_h sentinel__ = (gs_array_h)(uintptr_t)0x1234; (out) = sentinel__; \
    gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_ERR_INVALID_PARAM, "%s returned %s", #call, gs_status_name(st__)); \
    cr_assert_eq((out), sentinel__, "output written on error"); \
    cr_assert(strstr(gs_last_error(), (word)) != NULL, "message '%s' does not mention '%s'", \
              gs_last_error(), (word)); } while (0)

static gs_array_h mk(int nd, const int64_t *shape, const int64_t *chunks)
{
    gs_array_h a;
    OK(gs_array_random_normal(1, 0.0, 1.0, nd, shape, chunks, &a));
    return a;
}

static gs_array_h mk1(int64_t n, int64_t c)
{
    return mk(1, &n, &c);
}

static void expect_bounds(gs_array_h a, int axis, const int64_t *want, int64_t n)
{
    const int64_t *b = gs_array_chunk_bounds(a, axis);
    cr_assert_eq(gs_array_nchunks(a, axis), n - 1, "axis %d: %lld chunks, want %lld", axis,
                 (long long)gs_array_nchunks(a, axis), (long long)(n - 1));
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(b[i], want[i], "axis %d bound %lld is %lld, want %lld", axis, (long long)i,
                     (long long)b[i], (long long)want[i]);
}

/* ---- creation ---- */

Test(graph_array, rejects_ndim_zero)
{
    int64_t s[1] = {4}, c[1] = {2};
    gs_array_h a;
    REJECTS(gs_array_random_normal(1, 0, 1, 0, s, c, &a), a, "ndim");
}

Test(graph_array, rejects_ndim_above_max)
{
    int64_t s[GS_MAX_NDIM + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, c[GS_MAX_NDIM + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    gs_array_h a;
    REJECTS(gs_array_full(0, GS_MAX_NDIM + 1, s, c, &a), a, "ndim");
}

Test(graph_array, rejects_negative_shape)
{
    int64_t s[2] = {4, -1}, c[2] = {2, 2};
    gs_array_h a;
    REJECTS(gs_array_random_uniform(1, 0, 1, 2, s, c, &a), a, "shape[1]");
}

Test(graph_array, rejects_zero_chunk)
{
    int64_t s[2] = {4, 4}, c[2] = {2, 0};
    gs_array_h a;
    REJECTS(gs_array_arange(0, 1, 2, s, c, &a), a, "chunks[1]");
}

Test(graph_array, rejects_negative_chunk)
{
    int64_t s[1] = {4}, c[1] = {-3};
    gs_array_h a;
    REJECTS(gs_array_full(1, 1, s, c, &a), a, "chunks[0]");
}

Test(graph_array, rejects_null_shape_and_chunks)
{
    int64_t s[1] = {4};
    gs_array_h a;
    REJECTS(gs_array_full(1, 1, NULL, s, &a), a, "shape");
    REJECTS(gs_array_full(1, 1, s, NULL, &a), a, "chunks");
}

Test(graph_array, rejects_null_out_pointer)
{
    int64_t s[1] = {4}, c[1] = {2};
    cr_assert_eq(gs_array_full(1, 1, s, c, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_random_normal(1, 0, 1, 1, s, c, NULL), GS_ERR_INVALID_PARAM);
}

Test(graph_array, rejects_element_count_overflow)
{
    int64_t s[3] = {INT64_C(1) << 30, INT64_C(1) << 30, INT64_C(1) << 10};
    int64_t c[3] = {INT64_C(1) << 30, INT64_C(1) << 30, INT64_C(1) << 10};
    gs_array_h a;
    REJECTS(gs_array_random_normal(1, 0, 1, 3, s, c, &a), a, "overflows");
}

Test(graph_array, rejects_negative_std)
{
    int64_t s[1] = {4}, c[1] = {2};
    gs_array_h a;
    REJECTS(gs_array_random_normal(1, 0, -1, 1, s, c, &a), a, "std");
}

Test(graph_array, rejects_from_host_null_data)
{
    int64_t s[1] = {4}, c[1] = {2};
    gs_array_h a;
    REJECTS(gs_array_from_host(NULL, 1, s, c, &a), a, "data");
}

/* ---- elementwise ---- */

Test(graph_array, rejects_null_operands)
{
    gs_array_h x = mk1(10, 3), a;
    REJECTS(gs_array_unary(GS_UNARY_NEG, NULL, &a), a, "NULL");
    REJECTS(gs_array_binary(GS_BINARY_ADD, x, NULL, &a), a, "NULL");
    REJECTS(gs_array_binary(GS_BINARY_ADD, NULL, x, &a), a, "NULL");
    REJECTS(gs_array_binary_scalar(GS_BINARY_ADD, NULL, 1.0, &a), a, "NULL");
    REJECTS(gs_array_scalar_binary(GS_BINARY_ADD, 1.0, NULL, &a), a, "NULL");
    REJECTS(gs_array_slice(NULL, 0, NULL, &a), a, "NULL");
    REJECTS(gs_array_transpose(NULL, NULL, &a), a, "NULL");
    REJECTS(gs_array_reduce(GS_RED_SUM, NULL, NULL, &a), a, "NULL");
    gs_array_release(x);
}

Test(graph_array, rejects_unknown_ops)
{
    gs_array_h x = mk1(10, 3), a;
    REJECTS(gs_array_unary(GS_UNARY_COUNT, x, &a), a, "unary");
    REJECTS(gs_array_binary((gs_binop_t)99, x, x, &a), a, "binary");
    REJECTS(gs_array_binary_scalar((gs_binop_t)-1, x, 1.0, &a), a, "binary");
    REJECTS(gs_array_reduce(GS_RED_COUNT, x, NULL, &a), a, "reduction");
    gs_array_release(x);
}

Test(graph_array, rejects_shapes_that_do_not_broadcast)
{
    int64_t s1[2] = {4, 5}, s2[2] = {4, 6}, c[2] = {2, 2};
    gs_array_h x = mk(2, s1, c), y = mk(2, s2, c), a;
    REJECTS(gs_array_binary(GS_BINARY_MUL, x, y, &a), a, "broadcast");
    gs_array_release(x);
    gs_array_release(y);
}

/* ---- slicing ---- */

Test(graph_array, rejects_zero_step)
{
    gs_array_h x = mk1(10, 3), a;
    gs_slice_t s = {0, 0, 0, 0};
    REJECTS(gs_array_slice(x, 1, &s, &a), a, "step");
    gs_array_release(x);
}

Test(graph_array, rejects_index_out_of_range)
{
    gs_array_h x = mk1(10, 3), a;
    gs_slice_t s = {10, 0, 1, GS_SLICE_INDEX};
    REJECTS(gs_array_slice(x, 1, &s, &a), a, "out of range");
    s.start = -11;
    REJECTS(gs_array_slice(x, 1, &s, &a), a, "out of range");
    gs_array_release(x);
}

Test(graph_array, rejects_more_slices_than_axes)
{
    gs_array_h x = mk1(10, 3), a;
    gs_slice_t s[2] = {{0, 0, 1, 0}, {0, 0, 1, 0}};
    REJECTS(gs_array_slice(x, 2, s, &a), a, "ndim");
    REJECTS(gs_array_slice(x, 1, NULL, &a), a, "NULL");
    gs_array_release(x);
}

Test(graph_array, rejects_unknown_slice_flags)
{
    gs_array_h x = mk1(10, 3), a;
    gs_slice_t s = {0, 0, 1, 0x80};
    REJECTS(gs_array_slice(x, 1, &s, &a), a, "flags");
    gs_array_release(x);
}

Test(graph_array, rejects_transpose_axis_out_of_range)
{
    int64_t sh[2] = {4, 5}, c[2] = {2, 2};
    gs_array_h x = mk(2, sh, c), a;
    int p[2] = {0, 2};
    REJECTS(gs_array_transpose(x, p, &a), a, "out of range");
    gs_array_release(x);
}

Test(graph_array, rejects_transpose_repeated_axis)
{
    int64_t sh[2] = {4, 5}, c[2] = {2, 2};
    gs_array_h x = mk(2, sh, c), a;
    int p[2] = {1, 1};
    REJECTS(gs_array_transpose(x, p, &a), a, "repeats");
    gs_array_release(x);
}

/* ---- reductions ---- */

Test(graph_array, rejects_reduce_axis_out_of_range)
{
    int64_t sh[2] = {4, 5}, c[2] = {2, 2};
    gs_array_h x = mk(2, sh, c), a;
    gs_reduce_params_t p = {GS_REDUCE_FIELD_AXIS, 2, 0, 0};
    REJECTS(gs_array_reduce(GS_RED_SUM, x, &p, &a), a, "axis");
    p.axis = -3;
    REJECTS(gs_array_reduce(GS_RED_SUM, x, &p, &a), a, "axis");
    gs_array_release(x);
}

Test(graph_array, rejects_split_every_out_of_range)
{
    gs_array_h x = mk1(10, 3), a;
    gs_reduce_params_t p = {GS_REDUCE_FIELD_SPLIT_EVERY, 0, 1, 0};
    REJECTS(gs_array_reduce(GS_RED_SUM, x, &p, &a), a, "split_every");
    p.split_every = GS_KERNEL_MAX_COMBINE + 1;
    REJECTS(gs_array_reduce(GS_RED_SUM, x, &p, &a), a, "split_every");
    gs_array_release(x);
}

Test(graph_array, rejects_non_finite_ddof)
{
    gs_array_h x = mk1(10, 3), a;
    gs_reduce_params_t p = {GS_REDUCE_FIELD_DDOF, 0, 0, 1.0 / 0.0};
    REJECTS(gs_array_reduce(GS_RED_VAR, x, &p, &a), a, "ddof");
    gs_array_release(x);
}

Test(graph_array, rejects_min_max_argmin_argmax_of_zero_size)
{
    gs_array_h x = mk1(0, 3), a;
    REJECTS(gs_array_reduce(GS_RED_MIN, x, NULL, &a), a, "zero-size");
    REJECTS(gs_array_reduce(GS_RED_MAX, x, NULL, &a), a, "zero-size");
    REJECTS(gs_array_reduce(GS_RED_ARGMIN, x, NULL, &a), a, "zero-size");
    REJECTS(gs_array_reduce(GS_RED_ARGMAX, x, NULL, &a), a, "zero-size");
    /* sum and mean of an empty array are fine */
    OK(gs_array_reduce(GS_RED_SUM, x, NULL, &a));
    gs_array_release(a);
    gs_array_release(x);
}

Test(graph_array, rejects_max_along_an_empty_axis_with_a_nonempty_result)
{
    int64_t sh[2] = {5, 0}, c[2] = {2, 2};
    gs_array_h x = mk(2, sh, c), a;
    gs_reduce_params_t p = {GS_REDUCE_FIELD_AXIS, 1, 0, 0};
    REJECTS(gs_array_reduce(GS_RED_MAX, x, &p, &a), a, "zero-size");
    p.axis = 0;   /* result (0,) is empty: fine, as in NumPy */
    OK(gs_array_reduce(GS_RED_MAX, x, &p, &a));
    gs_array_release(a);
    gs_array_release(x);
}

Test(graph_array, rejects_unknown_reduce_fields)
{
    gs_array_h x = mk1(10, 3), a;
    gs_reduce_params_t p = {0x100, 0, 0, 0};
    REJECTS(gs_array_reduce(GS_RED_SUM, x, &p, &a), a, "field_mask");
    gs_array_release(x);
}

/* ---- persisted ---- */

Test(graph_array, set_persisted_rejects_wrong_block_count)
{
    gs_array_h x = mk1(10, 3);
    gs_key_t keys[3] = {{1, 0}, {1, 1}, {1, 2}};
    cr_assert_eq(gs_array_set_persisted(x, 3, keys), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "blocks") != NULL);
    cr_assert_eq(gs_array_set_persisted(NULL, 4, keys), GS_ERR_INVALID_PARAM);
    gs_array_release(x);
}

Test(graph_array, persisted_keys_are_copied_and_cleared)
{
    gs_array_h x = mk1(10, 5);
    gs_key_t keys[2] = {{7, 3}, {7, 4}}, *got;
    uint64_t n;
    cr_assert_eq(gs_array_get_persisted(x, &n, &got), GS_ERR_NOT_FOUND);
    OK(gs_array_set_persisted(x, 2, keys));
    keys[0].task = 99;
    OK(gs_array_get_persisted(x, &n, &got));
    cr_assert_eq(n, 2);
    cr_assert_eq(got[0].graph, 7);
    cr_assert_eq(got[0].task, 3);
    cr_assert_eq(got[1].task, 4);
    gs_free(got);
    gs_array_clear_persisted(x);
    cr_assert_eq(gs_array_get_persisted(x, &n, &got), GS_ERR_NOT_FOUND);
    gs_array_release(x);
}

/* ---- chunk bounds ---- */

Test(graph_array, regular_chunks_with_short_last_chunk)
{
    int64_t sh[2] = {10, 9}, c[2] = {4, 3};
    gs_array_h x = mk(2, sh, c);
    int64_t b0[] = {0, 4, 8, 10}, b1[] = {0, 3, 6, 9};
    expect_bounds(x, 0, b0, 4);
    expect_bounds(x, 1, b1, 4);
    cr_assert_eq(gs_array_size(x), 90);
    cr_assert_eq(gs_array_ndim(x), 2);
    gs_array_release(x);
}

Test(graph_array, empty_axis_has_one_empty_chunk)
{
    gs_array_h x = mk1(0, 4);
    int64_t b[] = {0, 0};
    expect_bounds(x, 0, b, 2);
    cr_assert_eq(gs_array_size(x), 0);
    gs_array_release(x);
}

Test(graph_array, slice_bounds_follow_input_chunks)
{
    gs_array_h x = mk1(20, 5), a;
    gs_slice_t s = {3, 17, 1, GS_SLICE_HAS_START | GS_SLICE_HAS_STOP};
    OK(gs_array_slice(x, 1, &s, &a));
    int64_t b[] = {0, 2, 7, 12, 14};
    expect_bounds(a, 0, b, 5);
    gs_array_release(a);
    gs_array_release(x);
}

Test(graph_array, slice_bounds_with_step_three)
{
    gs_array_h x = mk1(20, 5), a;
    gs_slice_t s = {0, 0, 3, 0};   /* 0 3 | 6 9 | 12 | 15 18 */
    OK(gs_array_slice(x, 1, &s, &a));
    int64_t b[] = {0, 2, 4, 5, 7};
    expect_bounds(a, 0, b, 5);
    gs_array_release(a);
    gs_array_release(x);
}

Test(graph_array, slice_bounds_with_negative_steps)
{
    gs_array_h x = mk1(12, 5), a, c;
    gs_slice_t s = {0, 0, -1, 0};   /* 11 10 | 9..5 | 4..0 */
    OK(gs_array_slice(x, 1, &s, &a));
    int64_t b[] = {0, 2, 7, 12};
    expect_bounds(a, 0, b, 4);
    gs_array_release(a);
    gs_array_release(x);
    x = mk1(20, 5);
    gs_slice_t s3 = {0, 0, -3, 0};  /* 19 16 | 13 10 | 7 | 4 1 */
    OK(gs_array_slice(x, 1, &s3, &c));
    int64_t b3[] = {0, 2, 4, 5, 7};
    expect_bounds(c, 0, b3, 5);
    gs_array_release(c);
    gs_array_release(x);
}

Test(graph_array, slice_with_index_drops_the_axis)
{
    int64_t sh[3] = {6, 7, 8}, ch[3] = {4, 3, 5};
    gs_array_h x = mk(3, sh, ch), a;
    gs_slice_t s[2] = {{0, 0, 1, 0}, {-1, 0, 1, GS_SLICE_INDEX}};
    OK(gs_array_slice(x, 2, s, &a));
    int64_t shp[2];
    cr_assert_eq(gs_array_ndim(a), 2);
    gs_array_shape(a, shp);
    cr_assert_eq(shp[0], 6);
    cr_assert_eq(shp[1], 8);
    int64_t b1[] = {0, 5, 8};
    expect_bounds(a, 1, b1, 3);
    gs_array_release(a);
    gs_array_release(x);
}

Test(graph_array, empty_slice_has_one_empty_chunk)
{
    gs_array_h x = mk1(20, 5), a, c;
    gs_slice_t s = {8, 3, 1, GS_SLICE_HAS_START | GS_SLICE_HAS_STOP};
    OK(gs_array_slice(x, 1, &s, &a));
    int64_t b[] = {0, 0};
    expect_bounds(a, 0, b, 2);
    gs_slice_t s2 = {100, 0, 2, GS_SLICE_HAS_START};   /* clipped to the end: empty */
    OK(gs_array_slice(x, 1, &s2, &c));
    expect_bounds(c, 0, b, 2);
    gs_array_release(a);
    gs_array_release(c);
    gs_array_release(x);
}

Test(graph_array, slice_clips_out_of_range_bounds)
{
    gs_array_h x = mk1(10, 4), a;
    gs_slice_t s = {-100, 100, 1, GS_SLICE_HAS_START | GS_SLICE_HAS_STOP};
    OK(gs_array_slice(x, 1, &s, &a));
    int64_t b[] = {0, 4, 8, 10};
    expect_bounds(a, 0, b, 4);
    gs_array_release(a);
    gs_array_release(x);
}

Test(graph_array, broadcast_bounds_are_the_union)
{
    int64_t sa[2] = {7, 1}, ca[2] = {3, 1}, sb[2] = {7, 9}, cb[2] = {4, 5};
    gs_array_h x = mk(2, sa, ca), y = mk(2, sb, cb), a;
    OK(gs_array_binary(GS_BINARY_ADD, x, y, &a));
    int64_t b0[] = {0, 3, 4, 6, 7}, b1[] = {0, 5, 9};
    expect_bounds(a, 0, b0, 5);
    expect_bounds(a, 1, b1, 3);   /* the broadcast axis contributes no boundaries */
    gs_array_release(a);
    gs_array_release(x);
    gs_array_release(y);
}

Test(graph_array, transpose_permutes_bounds)
{
    int64_t sh[3] = {5, 6, 7}, ch[3] = {2, 4, 7};
    gs_array_h x = mk(3, sh, ch), a, r;
    int p[3] = {2, 0, 1};
    OK(gs_array_transpose(x, p, &a));
    int64_t b0[] = {0, 7}, b1[] = {0, 2, 4, 5}, b2[] = {0, 4, 6};
    expect_bounds(a, 0, b0, 2);
    expect_bounds(a, 1, b1, 4);
    expect_bounds(a, 2, b2, 3);
    OK(gs_array_transpose(x, NULL, &r));   /* reverse */
    expect_bounds(r, 0, b0, 2);
    expect_bounds(r, 2, b1, 4);
    gs_array_release(a);
    gs_array_release(r);
    gs_array_release(x);
}

Test(graph_array, reduce_drops_the_axis_or_gives_a_scalar)
{
    int64_t sh[2] = {5, 6}, ch[2] = {2, 4};
    gs_array_h x = mk(2, sh, ch), a, s;
    gs_reduce_params_t p = {GS_REDUCE_FIELD_AXIS, -2, 0, 0};
    OK(gs_array_reduce(GS_RED_SUM, x, &p, &a));
    cr_assert_eq(gs_array_ndim(a), 1);
    int64_t b[] = {0, 4, 6};
    expect_bounds(a, 0, b, 3);
    OK(gs_array_reduce(GS_RED_MEAN, x, NULL, &s));
    cr_assert_eq(gs_array_ndim(s), 0);
    cr_assert_eq(gs_array_size(s), 1);
    gs_array_release(a);
    gs_array_release(s);
    gs_array_release(x);
}

Test(graph_array, operands_may_be_released_at_once)
{
    gs_array_h x = mk1(10, 3), y, z;
    OK(gs_array_unary(GS_UNARY_EXP, x, &y));
    gs_array_release(x);
    OK(gs_array_binary(GS_BINARY_ADD, y, y, &z));
    gs_array_release(y);
    cr_assert_eq(gs_array_size(z), 10);
    gs_array_release(z);
    gs_array_release(NULL);
}

Test(graph_array, releasing_a_long_chain_does_not_recurse)
{
    gs_array_h x = mk1(4, 2);
    for (int i = 0; i < 200000; i++) {
        gs_array_h y;
        OK(gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &y));
        gs_array_release(x);
        x = y;
    }
    gs_array_release(x);
}

Test(graph_array, allocation_failures_are_reported)
{
    int64_t sh[2] = {30, 20}, ch[2] = {7, 3};
    double data[600] = {0};
    for (long k = 0; k < 40; k++) {
        gs_array_h x = NULL, y = NULL, z = NULL, w = NULL;
        gs_slice_t s[2] = {{0, 0, -2, 0}, {1, 0, 1, GS_SLICE_INDEX}};
        gs_alloc_fail_after(k);
        gs_status_t st = gs_array_from_host(data, 2, sh, ch, &x);
        if (st == GS_OK) st = gs_array_binary(GS_BINARY_ADD, x, x, &y);
        if (st == GS_OK) st = gs_array_slice(y, 2, s, &z);
        if (st == GS_OK) st = gs_array_reduce(GS_RED_VAR, z, NULL, &w);
        gs_alloc_fail_after(-1);
        cr_assert(st == GS_OK || st == GS_ERR_NO_MEMORY, "k=%ld: %s", k, gs_status_name(st));
        gs_array_release(w);
        gs_array_release(z);
        gs_array_release(y);
        gs_array_release(x);
    }
}

Test(graph_array, accessors_tolerate_null_and_bad_axes)
{
    gs_array_h x = mk1(10, 3);
    cr_assert_eq(gs_array_ndim(NULL), -1);
    cr_assert_eq(gs_array_size(NULL), 0);
    cr_assert_eq(gs_array_nchunks(NULL, 0), 0);
    cr_assert_null(gs_array_chunk_bounds(NULL, 0));
    cr_assert_eq(gs_array_nchunks(x, 1), 0);
    cr_assert_eq(gs_array_nchunks(x, -1), 0);
    cr_assert_null(gs_array_chunk_bounds(x, 1));
    gs_array_shape(NULL, NULL);
    cr_assert_eq(gs_array_nchunks(x, 0), 4);
    gs_array_release(x);
}

/* ---- the traps of a first program: reduce fields without their bit, zeroed slices ---- */

Test(graph_array, rejects_reduce_fields_set_without_their_bit)
{
    int64_t s[2] = {4, 6}, c[2] = {2, 3};
    gs_array_h x = mk(2, s, c), a;
    gs_reduce_params_t p = {0, 1, 0, 0};
    REJECTS(gs_array_reduce(GS_RED_SUM, x, &p, &a), a, "GS_REDUCE_FIELD_AXIS");
    p = (gs_reduce_params_t){GS_REDUCE_FIELD_AXIS, 0, 8, 0};
    REJECTS(gs_array_reduce(GS_RED_SUM, x, &p, &a), a, "GS_REDUCE_FIELD_SPLIT_EVERY");
    p = (gs_reduce_params_t){GS_REDUCE_FIELD_AXIS, 1, 0, 1.0};
    REJECTS(gs_array_reduce(GS_RED_VAR, x, &p, &a), a, "GS_REDUCE_FIELD_DDOF");
    /* a zeroed struct and a struct with every bit set are fine */
    p = (gs_reduce_params_t){0, 0, 0, 0};
    OK(gs_array_reduce(GS_RED_SUM, x, &p, &a));
    cr_assert_eq(gs_array_ndim(a), 0);
    gs_array_release(a);
    p = (gs_reduce_params_t){GS_REDUCE_FIELD_AXIS | GS_REDUCE_FIELD_SPLIT_EVERY |
                             GS_REDUCE_FIELD_DDOF, -1, 4, 1.0};
    OK(gs_array_reduce(GS_RED_VAR, x, &p, &a));
    cr_assert_eq(gs_array_ndim(a), 1);
    gs_array_release(a);
    gs_array_release(x);
}

Test(graph_array, zeroed_slice_error_names_the_helpers)
{
    gs_array_h x = mk1(10, 3), a;
    gs_slice_t s[1] = {{0}};
    REJECTS(gs_array_slice(x, 1, s, &a), a, "GS_SLICE_ALL");
    gs_array_release(x);
}

Test(graph_array, slice_helpers_give_numpy_shapes)
{
    int64_t s[3] = {10, 7, 9}, c[3] = {3, 4, 9}, got[3];
    gs_array_h x = mk(3, s, c), a;
    struct { gs_slice_t sl[3]; int nd; int64_t want[3]; } cases[] = {
        {{GS_SLICE_ALL, GS_SLICE_ALL, GS_SLICE_ALL}, 3, {10, 7, 9}},
        {{GS_SLICE(1, 8, 3), GS_SLICE_STEP(-1), GS_SLICE_AT(-1)}, 2, {3, 7}},   /* 1,4,7 */
        {{GS_SLICE_FROM(2, 1), GS_SLICE_TO(3, 1), GS_SLICE_STEP(2)}, 3, {8, 3, 5}},
        {{GS_SLICE_FROM(-1, -1), GS_SLICE_TO(-5, -1), GS_SLICE(8, 2, -2)}, 3, {10, 4, 3}},
        {{GS_SLICE_AT(0), GS_SLICE_AT(6), GS_SLICE_AT(8)}, 0, {0}},
        {{GS_SLICE(5, 5, 1), GS_SLICE_ALL, GS_SLICE_ALL}, 3, {0, 7, 9}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        OK(gs_array_slice(x, 3, cases[i].sl, &a));
        cr_assert_eq(gs_array_ndim(a), cases[i].nd, "case %zu: ndim %d", i, gs_array_ndim(a));
        gs_array_shape(a, got);
        for (int ax = 0; ax < cases[i].nd; ax++)
            cr_assert_eq(got[ax], cases[i].want[ax], "case %zu axis %d: %lld, want %lld", i, ax,
                         (long long)got[ax], (long long)cases[i].want[ax]);
        gs_array_release(a);
    }
    gs_array_release(x);
}

Test(graph_array, unravel_index_is_row_major_and_checks_its_input)
{
    int64_t shape[3] = {4, 5, 6}, idx[3] = {-7, -7, -7};
    OK(gs_unravel_index(0, 3, shape, idx));
    cr_assert(idx[0] == 0 && idx[1] == 0 && idx[2] == 0);
    OK(gs_unravel_index(2 * 30 + 3 * 6 + 5, 3, shape, idx));
    cr_assert(idx[0] == 2 && idx[1] == 3 && idx[2] == 5, "%lld %lld %lld", (long long)idx[0],
              (long long)idx[1], (long long)idx[2]);
    OK(gs_unravel_index(119, 3, shape, idx));
    cr_assert(idx[0] == 3 && idx[1] == 4 && idx[2] == 5);
    OK(gs_unravel_index(0, 0, NULL, NULL));
    idx[0] = idx[1] = idx[2] = -7;
    cr_assert_eq(gs_unravel_index(120, 3, shape, idx), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "120") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_unravel_index(-1, 3, shape, idx), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_unravel_index(1, 0, NULL, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_unravel_index(0, 3, NULL, idx), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_unravel_index(0, GS_MAX_NDIM + 1, shape, idx), GS_ERR_INVALID_PARAM);
    int64_t empty[2] = {3, 0};
    cr_assert_eq(gs_unravel_index(0, 2, empty, idx), GS_ERR_INVALID_PARAM);
    int64_t neg[2] = {3, -1};
    cr_assert_eq(gs_unravel_index(0, 2, neg, idx), GS_ERR_INVALID_PARAM);
    cr_assert(idx[0] == -7 && idx[1] == -7 && idx[2] == -7, "idx written on error");
}

Test(graph_array, like_and_clip_reject_bad_arguments)
{
    gs_array_h x = mk1(10, 3), a;
    REJECTS(gs_array_full_like(NULL, 1.0, &a), a, "NULL");
    cr_assert_eq(gs_array_zeros_like(x, NULL), GS_ERR_INVALID_PARAM);
    REJECTS(gs_array_clip(x, 0.0 / 0.0, 1.0, &a), a, "NaN");
    REJECTS(gs_array_clip(NULL, 0.0, 1.0, &a), a, "NULL");
    int64_t s[1] = {4}, c[1] = {0};
    REJECTS(gs_array_zeros(1, s, c, &a), a, "chunks");
    gs_array_release(x);
}
