/* Random arrays of a dtype (gs_array_random_normal_dtype / _uniform_dtype /
 * gs_array_random_integers; docs/random.md "float32 random" and "Random integers") through the
 * whole graph path: lowering under every flag combination and several chunkings, layers
 * round-tripped through the codec, the CPU backend's serial evaluator; compared bit for bit with
 * chunkops/random.h evaluated directly at each element's global index (chunk invariance), plus
 * the seed expression in float32 and bad input. */
#include "random_graph_test_util.h"
#include "common/buf.h"

TestSuite(graph_random_dtype, .init = rg_setup, .fini = rg_teardown, .timeout = 300);

enum { R = 37, C = 53 };
static const int64_t chunkings[][2] = {{R, C}, {5, 7}, {16, 1}, {1, 53}};

/* the element (i, j) of each kind at global index i * C + j; the float32 normal of
 * gs_array_random_normal_dtype is the float32 default, version 4 */
static void want_elem(int kind, uint64_t seed, int64_t i, int64_t j, void *w)
{
    const uint64_t g = (uint64_t)(i * C + j);
    if (kind == 0) {
        float v = gs_random_normal_f32_v4(seed, g, 1.5, 2.0);
        memcpy(w, &v, 4);
    } else if (kind == 1) {
        float v = gs_random_uniform_f32(seed, g, -3.0, 5.0);
        memcpy(w, &v, 4);
    } else {
        int64_t v = gs_random_integers(seed, g, -1000, 999);
        memcpy(w, &v, 8);
    }
}

static gs_array_h make(int kind, uint64_t seed, const int64_t *chunks)
{
    const int64_t shape[2] = {R, C};
    gs_array_h h;
    if (kind == 0)
        OK(gs_array_random_normal_dtype(seed, 1.5, 2.0, GS_DTYPE_FLOAT32, 2, shape, chunks, &h));
    else if (kind == 1)
        OK(gs_array_random_uniform_dtype(seed, -3.0, 5.0, GS_DTYPE_FLOAT32, 2, shape, chunks, &h));
    else
        OK(gs_array_random_integers(seed, -1000, 999, 2, shape, chunks, &h));
    return h;
}

Test(graph_random_dtype, values_are_the_definition_on_every_chunking)
{
    for (int kind = 0; kind < 3; kind++) {
        const size_t es = kind == 2 ? 8 : 4;
        for (size_t c = 0; c < sizeof(chunkings) / sizeof(chunkings[0]); c++) {
            gs_array_h h = make(kind, 77 + (uint64_t)kind, chunkings[c]);
            cr_assert_eq(gs_array_dtype(h), kind == 2 ? GS_DTYPE_INT64 : GS_DTYPE_FLOAT32);
            for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f += 3) {
                unsigned char *got = eval_raw(h, f);
                for (int64_t i = 0; i < R; i++)
                    for (int64_t j = 0; j < C; j++) {
                        unsigned char w[8];
                        want_elem(kind, 77 + (uint64_t)kind, i, j, w);
                        cr_assert(memcmp(got + (size_t)(i * C + j) * es, w, es) == 0,
                                  "kind %d chunking %zu flags 0x%x: element (%lld, %lld) differs",
                                  kind, c, f, (long long)i, (long long)j);
                    }
                free(got);
            }
            gs_array_release(h);
        }
    }
}

/* x[::2, ::2] generates only the elements it keeps, at their global indices */
Test(graph_random_dtype, slices_read_global_indices)
{
    for (int kind = 0; kind < 3; kind++) {
        const size_t es = kind == 2 ? 8 : 4;
        gs_array_h h = make(kind, 5, chunkings[1]), s;
        gs_slice_t sl[2] = {GS_SLICE_STEP(2), GS_SLICE(C - 1, 0, -3)};
        OK(gs_array_slice(h, 2, sl, &s));
        cr_assert_eq(gs_array_dtype(s), gs_array_dtype(h));
        unsigned char *got = eval_raw(s, GS_LOWER_DEFAULT);
        int64_t n = 0;
        for (int64_t i = 0; i < R; i += 2)
            for (int64_t j = C - 1; j > 0; j -= 3, n++) {
                unsigned char w[8];
                want_elem(kind, 5, i, j, w);
                cr_assert(memcmp(got + (size_t)n * es, w, es) == 0, "kind %d (%lld, %lld)", kind,
                          (long long)i, (long long)j);
            }
        cr_assert_eq(n, gs_array_size(s));
        free(got);
        gs_array_release(s);
        gs_array_release(h);
    }
}

/* the seed expression in float32: sum((normal_f32 + 1)[::2, ::2]) is float32; the sum is
 * accumulated in float64 from the float32 values and rounded once to float32 */
Test(graph_random_dtype, seed_expression_in_float32)
{
    const int64_t shape[2] = {R, C}, chunks[2] = {8, 9};
    gs_array_h x, y, s, t;
    OK(gs_array_random_normal_dtype(2024, 0.0, 1.0, GS_DTYPE_FLOAT32, 2, shape, chunks, &x));
    OK(gs_array_binary_array_scalar(GS_BINARY_ADD, x, 1.0, &y));
    cr_assert_eq(gs_array_dtype(y), GS_DTYPE_FLOAT32, "float32 + a float scalar stays float32");
    gs_slice_t sl[2] = {GS_SLICE_STEP(2), GS_SLICE_STEP(2)};
    OK(gs_array_slice(y, 2, sl, &s));
    OK(gs_array_reduce(GS_RED_SUM, s, NULL, &t));
    cr_assert_eq(gs_array_dtype(t), GS_DTYPE_FLOAT32, "NumPy: sum of float32 is float32");
    long double exact = 0;
    for (int64_t i = 0; i < R; i += 2)
        for (int64_t j = 0; j < C; j += 2) {
            float v = gs_random_normal_f32_v4(2024, (uint64_t)(i * C + j), 0.0, 1.0) + 1.0f;
            exact += v;
        }
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f += 5) {
        float *got = eval_raw(t, f);
        /* float64 accumulation of 513 values: the float32 rounding of it is within 1 ulp */
        cr_assert(fabsl((long double)got[0] - exact) <= fabsl(exact) * 0x1p-23L,
                  "flags 0x%x: sum %.9g, exact %.12Lg", f, (double)got[0], exact);
        free(got);
    }
    gs_array_release(t);
    gs_array_release(s);
    gs_array_release(y);
    gs_array_release(x);
}

Test(graph_random_dtype, integers_cover_the_full_int64_range)
{
    const int64_t shape[1] = {1000}, chunks[1] = {64};
    gs_array_h h, h2;
    OK(gs_array_random_integers(9, INT64_MIN, INT64_MAX, 1, shape, chunks, &h));
    OK(gs_array_random_integers(9, INT64_MAX - 2, INT64_MAX, 1, shape, chunks, &h2));
    int64_t *got = eval_raw(h, GS_LOWER_DEFAULT), *got2 = eval_raw(h2, GS_LOWER_DEFAULT);
    int neg = 0, seen[3] = {0};
    for (int64_t i = 0; i < 1000; i++) {
        cr_assert_eq(got[i], gs_random_integers(9, (uint64_t)i, INT64_MIN, INT64_MAX));
        cr_assert_eq(got2[i], gs_random_integers(9, (uint64_t)i, INT64_MAX - 2, INT64_MAX));
        cr_assert(got2[i] >= INT64_MAX - 2);
        seen[INT64_MAX - got2[i]]++;
        neg += got[i] < 0;
    }
    cr_expect(neg > 400 && neg < 600, "%d negative of 1000", neg);
    cr_expect(seen[0] > 250 && seen[1] > 250 && seen[2] > 250);
    free(got);
    free(got2);
    gs_array_release(h);
    gs_array_release(h2);
}

Test(graph_random_dtype, bad_input_is_rejected_and_outputs_unwritten)
{
    const int64_t shape[1] = {10}, chunks[1] = {4}, zero[1] = {0};
    gs_array_h h = (gs_array_h)(uintptr_t)0x1;
    cr_assert_eq(gs_array_random_normal_dtype(1, 0, 1, GS_DTYPE_INT32, 1, shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "int32") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_array_random_uniform_dtype(1, 0, 1, GS_DTYPE_FLOAT16, 1, shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "float16") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_array_random_uniform_dtype(1, 0, 1, (gs_dtype_t)99, 1, shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_random_normal_dtype(1, 1e300, 1, GS_DTYPE_FLOAT32, 1, shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_random_normal_dtype(1, 0, -1, GS_DTYPE_FLOAT32, 1, shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_random_integers(1, 5, 4, 1, shape, chunks, &h), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "low 5 > high 4") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_array_random_integers(1, 0, 4, 1, shape, zero, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_random_integers(1, 0, 4, 1, shape, chunks, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(h, (gs_array_h)(uintptr_t)0x1, "no output written on error");
    /* float64 through the _dtype form is the plain float64 array (default: version 3) */
    gs_array_h a, b;
    OK(gs_array_random_normal_dtype(3, 0, 1, GS_DTYPE_FLOAT64, 1, shape, chunks, &a));
    cr_assert_eq(gs_array_dtype(a), GS_DTYPE_FLOAT64);
    double *got = eval_raw(a, GS_LOWER_DEFAULT);
    for (int i = 0; i < 10; i++) cr_assert_eq(got[i], gs_random_normal_v3(3, (uint64_t)i, 0, 1));
    free(got);
    OK(gs_array_random_uniform_dtype(3, 0, 1, GS_DTYPE_FLOAT64, 1, shape, chunks, &b));
    got = eval_raw(b, GS_LOWER_DEFAULT);
    for (int i = 0; i < 10; i++) cr_assert_eq(got[i], gs_random_uniform(3, (uint64_t)i, 0, 1));
    free(got);
    gs_array_release(a);
    gs_array_release(b);
}

/* a kernel that reads a float32 random leaf as float64 (or an integer one with low > high) is
 * rejected by validation: what a peer sends never reaches the generator malformed */
Test(graph_random_dtype, kernels_with_mistyped_random_leaves_are_rejected)
{
    double out[4];
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = 4;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_NORMAL_F32;
    k.leaves[0].stride[0] = 1;
    k.leaves[0].p1 = 1.0;
    k.nprog = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[0].dtype = GS_DTYPE_FLOAT64;
    k.out = out;
    cr_assert_eq(gs_kfused_validate(&k), GS_ERR_INVALID_PARAM);
    k.prog[0].dtype = GS_DTYPE_FLOAT32;
    k.out_dtype = GS_DTYPE_FLOAT32;
    OK(gs_kfused_validate(&k));
    k.leaves[0].kind = GS_LEAF_INTEGERS;
    k.prog[0].dtype = GS_DTYPE_INT64;
    k.out_dtype = GS_DTYPE_INT64;
    int64_t lo = 3, hi = 2;
    memcpy(&k.leaves[0].p0, &lo, 8);
    memcpy(&k.leaves[0].p1, &hi, 8);
    cr_assert_eq(gs_kfused_validate(&k), GS_ERR_INVALID_PARAM);
    hi = 3;
    memcpy(&k.leaves[0].p1, &hi, 8);
    OK(gs_kfused_validate(&k));
}

/* The float32 normal of gs_array_random_normal_dtype() is version 4 (GS_RANDOM_DEFAULT_FLOAT32,
 * the default since session 12), bit for bit the array GS_RANDOM_V4 and GS_RANDOM_DEFAULT name;
 * GS_RANDOM_V1 by name still gives float32 version 1 (the old default) on every chunking. */
Test(graph_random_dtype, float32_default_is_version_4_and_version_1_stays_by_name)
{
    const int64_t shape[2] = {R, C};
    cr_assert_eq(GS_RANDOM_DEFAULT_FLOAT32, GS_RANDOM_V4);
    for (size_t c = 0; c < sizeof(chunkings) / sizeof(chunkings[0]); c++) {
        gs_array_h d, n, v4, v1;
        OK(gs_array_random_normal_dtype(11, 0.5, 3.0, GS_DTYPE_FLOAT32, 2, shape, chunkings[c], &d));
        OK(gs_array_random_normal_dtype_version(11, 0.5, 3.0, GS_DTYPE_FLOAT32, GS_RANDOM_DEFAULT,
                                                2, shape, chunkings[c], &n));
        OK(gs_array_random_normal_dtype_version(11, 0.5, 3.0, GS_DTYPE_FLOAT32, GS_RANDOM_V4, 2,
                                                shape, chunkings[c], &v4));
        OK(gs_array_random_normal_dtype_version(11, 0.5, 3.0, GS_DTYPE_FLOAT32, GS_RANDOM_V1, 2,
                                                shape, chunkings[c], &v1));
        for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f += 3) {
            float *gd = eval_raw(d, f), *gn = eval_raw(n, f), *g4 = eval_raw(v4, f),
                  *g1 = eval_raw(v1, f);
            int64_t differ = 0;
            cr_assert(memcmp(gd, g4, (size_t)R * C * 4) == 0,
                      "chunking %zu flags 0x%x: the default is not version 4 by name", c, f);
            cr_assert(memcmp(gn, g4, (size_t)R * C * 4) == 0,
                      "chunking %zu flags 0x%x: GS_RANDOM_DEFAULT is not version 4", c, f);
            for (int64_t i = 0; i < R * C; i++) {
                const float w4 = gs_random_normal_f32_v4(11, (uint64_t)i, 0.5, 3.0);
                const float w1 = gs_random_normal_f32(11, (uint64_t)i, 0.5, 3.0);
                cr_assert(memcmp(&gd[i], &w4, 4) == 0, "chunking %zu flags 0x%x: element %lld",
                          c, f, (long long)i);
                cr_assert(memcmp(&g1[i], &w1, 4) == 0,
                          "chunking %zu flags 0x%x: version 1 element %lld", c, f, (long long)i);
                differ += gd[i] != g1[i];
            }
            cr_assert_gt(differ, R * C - 10, "versions 1 and 4 are different definitions");
            free(gd), free(gn), free(g4), free(g1);
        }
        gs_array_release(v1);
        gs_array_release(v4);
        gs_array_release(n);
        gs_array_release(d);
    }
}
