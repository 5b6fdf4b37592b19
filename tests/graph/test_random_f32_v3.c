/* float32 version 3 and version 4 normals through the graph path
 * (gs_array_random_normal_dtype_version with GS_DTYPE_FLOAT32 and GS_RANDOM_V3 or GS_RANDOM_V4;
 * docs/random.md "float32 version 3" and "float32 version 4"; each test runs for both versions
 * where it is the same): lowering under several
 * flag combinations and chunkings, layers round-tripped through the codec, the CPU backend's
 * serial evaluator; compared bit for bit with chunkops/random.h at each element's global index
 * (chunk invariance), strided slices (pairs split by the slice and by chunk edges), the seed
 * expression, the versions float32 does not have and the float64 refusal of version 4. */
#include "random_graph_test_util.h"

TestSuite(graph_random_f32_v3, .init = rg_setup, .fini = rg_teardown, .timeout = 300);

enum { R = 37, C = 53 };
static const int64_t chunkings[][2] = {{R, C}, {5, 7}, {16, 1}, {1, 53}, {4, 6}};

/* the element form of float32 version @a v (GS_RANDOM_V3 or GS_RANDOM_V4) */
static float f32n(int v, uint64_t seed, uint64_t i, double mean, double std)
{
    return v == GS_RANDOM_V4 ? gs_random_normal_f32_v4(seed, i, mean, std)
                             : gs_random_normal_f32_v3(seed, i, mean, std);
}

static gs_array_h make(int v, uint64_t seed, const int64_t *chunks)
{
    const int64_t shape[2] = {R, C};
    gs_array_h h;
    OK(gs_array_random_normal_dtype_version(seed, 1.5, 2.0, GS_DTYPE_FLOAT32, v, 2, shape, chunks,
                                            &h));
    cr_assert_eq(gs_array_dtype(h), GS_DTYPE_FLOAT32);
    return h;
}

Test(graph_random_f32_v3, values_are_the_definition_on_every_chunking)
{
    for (int v = GS_RANDOM_V3; v <= GS_RANDOM_V4; v++)
    for (size_t c = 0; c < sizeof(chunkings) / sizeof(chunkings[0]); c++) {
        gs_array_h h = make(v, 77, chunkings[c]);
        for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f += 3) {
            float *got = eval_raw(h, f);
            for (int64_t i = 0; i < R * C; i++) {
                const float w = f32n(v, 77, (uint64_t)i, 1.5, 2.0);
                cr_assert(memcmp(&got[i], &w, 4) == 0,
                          "v%d chunking %zu flags 0x%x: element %lld %.9g, definition %.9g", v, c, f,
                          (long long)i, (double)got[i], (double)w);
            }
            free(got);
        }
        gs_array_release(h);
    }
}

/* slices generate only the elements they keep, at their global indices: x[::2, ::2],
 * x[1::2, 1::2] (odd offsets), x[:, ::-1], x[3::5, C-1:0:-3] */
Test(graph_random_f32_v3, slices_read_global_indices)
{
    const gs_slice_t views[][2] = {
        {GS_SLICE_STEP(2), GS_SLICE_STEP(2)},
        {GS_SLICE_FROM(1, 2), GS_SLICE_FROM(1, 2)},
        {GS_SLICE_ALL, GS_SLICE_STEP(-1)},
        {GS_SLICE_FROM(3, 5), GS_SLICE(C - 1, 0, -3)}};
    /* the first kept index and the step of each view, per axis */
    static const int64_t start[][2] = {{0, 0}, {1, 1}, {0, C - 1}, {3, C - 1}};
    static const int64_t step[][2] = {{2, 2}, {2, 2}, {1, -1}, {5, -3}};
    for (int ver = GS_RANDOM_V3; ver <= GS_RANDOM_V4; ver++)
    for (size_t v = 0; v < sizeof(views) / sizeof(views[0]); v++)
        for (size_t c = 0; c < 3; c++) {
            gs_array_h h = make(ver, 5 + v, chunkings[c + 1]), s;
            OK(gs_array_slice(h, 2, views[v], &s));
            cr_assert_eq(gs_array_dtype(s), GS_DTYPE_FLOAT32);
            float *got = eval_raw(s, GS_LOWER_DEFAULT);
            int64_t shape[2];
            gs_array_shape(s, shape);
            int64_t n = 0;
            for (int64_t i = 0; i < shape[0]; i++)
                for (int64_t j = 0; j < shape[1]; j++, n++) {
                    const int64_t gi = start[v][0] + i * step[v][0];
                    const int64_t gj = start[v][1] + j * step[v][1];
                    const float w = f32n(ver, 5 + v, (uint64_t)(gi * C + gj), 1.5, 2.0);
                    cr_assert(memcmp(&got[n], &w, 4) == 0,
                              "v%d view %zu chunking %zu (%lld, %lld)", ver, v, c, (long long)gi,
                              (long long)gj);
                }
            cr_assert_eq(n, gs_array_size(s));
            free(got);
            gs_array_release(s);
            gs_array_release(h);
        }
}

/* the seed expression with v3 and v4 normals: sum((normal_f32_vN + 1)[::2, ::2]) in float32 */
Test(graph_random_f32_v3, seed_expression)
{
    for (int v = GS_RANDOM_V3; v <= GS_RANDOM_V4; v++) {
    const int64_t shape[2] = {R, C}, chunks[2] = {8, 9};
    gs_array_h x, y, s, t;
    OK(gs_array_random_normal_dtype_version(2024, 0.0, 1.0, GS_DTYPE_FLOAT32, v, 2, shape, chunks,
                                            &x));
    OK(gs_array_binary_array_scalar(GS_BINARY_ADD, x, 1.0, &y));
    gs_slice_t sl[2] = {GS_SLICE_STEP(2), GS_SLICE_STEP(2)};
    OK(gs_array_slice(y, 2, sl, &s));
    OK(gs_array_reduce(GS_RED_SUM, s, NULL, &t));
    cr_assert_eq(gs_array_dtype(t), GS_DTYPE_FLOAT32);
    long double exact = 0, v1 = 0;
    for (int64_t i = 0; i < R; i += 2)
        for (int64_t j = 0; j < C; j += 2) {
            exact += f32n(v, 2024, (uint64_t)(i * C + j), 0.0, 1.0) + 1.0f;
            v1 += gs_random_normal_f32(2024, (uint64_t)(i * C + j), 0.0, 1.0) + 1.0f;
        }
    cr_assert(exact != v1, "version %d is not version 1", v);
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f += 5) {
        float *got = eval_raw(t, f);
        cr_assert(fabsl((long double)got[0] - exact) <= fabsl(exact) * 0x1p-23L,
                  "v%d flags 0x%x: sum %.9g, exact %.12Lg", v, f, (double)got[0], exact);
        free(got);
    }
    gs_array_release(t);
    gs_array_release(s);
    gs_array_release(y);
    gs_array_release(x);
    }
}

/* float32 has versions 1, 3 and 4: others are refused naming the dtype and version, the output
 * untouched; version 1 is gs_array_random_normal_dtype's array */
Test(graph_random_f32_v3, other_versions_are_refused)
{
    const int64_t shape[1] = {10}, chunks[1] = {4};
    gs_array_h h = (gs_array_h)(uintptr_t)0x1;
    static const int bad[] = {GS_RANDOM_V2, 5, -1}; /* 0 is GS_RANDOM_DEFAULT */
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        cr_assert_eq(gs_array_random_normal_dtype_version(1, 0, 1, GS_DTYPE_FLOAT32, bad[b], 1,
                                                          shape, chunks, &h),
                     GS_ERR_INVALID_PARAM);
        char want[32];
        snprintf(want, sizeof(want), "version %d", bad[b]);
        cr_assert(strstr(gs_last_error(), "float32") != NULL &&
                      strstr(gs_last_error(), want) != NULL, "%s", gs_last_error());
    }
    /* the parameter checks come first for v3 too */
    cr_assert_eq(gs_array_random_normal_dtype_version(1, 1e300, 1, GS_DTYPE_FLOAT32, GS_RANDOM_V3,
                                                      1, shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_random_normal_dtype_version(1, 0, -1, GS_DTYPE_FLOAT32, GS_RANDOM_V3,
                                                      1, shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_random_normal_dtype_version(1, 0, 1, GS_DTYPE_INT32, GS_RANDOM_V3, 1,
                                                      shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_random_normal_dtype_version(1, 0, 1, GS_DTYPE_FLOAT32, GS_RANDOM_V3, 1,
                                                      shape, chunks, NULL),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(h, (gs_array_h)(uintptr_t)0x1, "no output written on error");
    gs_array_h a, c, d;
    OK(gs_array_random_normal_dtype_version(3, 0, 1, GS_DTYPE_FLOAT32, GS_RANDOM_V1, 1, shape,
                                            chunks, &a));
    OK(gs_array_random_normal_dtype_version(3, 0, 1, GS_DTYPE_FLOAT32, GS_RANDOM_V3, 1, shape,
                                            chunks, &c));
    OK(gs_array_random_normal_dtype_version(3, 0, 1, GS_DTYPE_FLOAT32, GS_RANDOM_V4, 1, shape,
                                            chunks, &d));
    float *ga = eval_raw(a, GS_LOWER_DEFAULT), *gc = eval_raw(c, GS_LOWER_DEFAULT),
          *gd = eval_raw(d, GS_LOWER_DEFAULT);
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(ga[i], gs_random_normal_f32(3, (uint64_t)i, 0, 1));
        cr_assert_eq(gc[i], gs_random_normal_f32_v3(3, (uint64_t)i, 0, 1));
        cr_assert_eq(gd[i], gs_random_normal_f32_v4(3, (uint64_t)i, 0, 1));
    }
    free(ga);
    free(gc);
    free(gd);
    gs_array_release(a);
    gs_array_release(c);
    gs_array_release(d);
}

/* version 4 is float32 only: float64 (through either entry point) is refused with a message
 * saying so, the output untouched */
Test(graph_random_f32_v3, version_4_is_float32_only)
{
    const int64_t shape[1] = {10}, chunks[1] = {4};
    gs_array_h h = (gs_array_h)(uintptr_t)0x1;
    cr_assert_eq(gs_array_random_normal_version(1, 0, 1, GS_RANDOM_V4, 1, shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "version 4 is float32 only") != NULL, "%s",
              gs_last_error());
    cr_assert_eq(gs_array_random_normal_dtype_version(1, 0, 1, GS_DTYPE_FLOAT64, GS_RANDOM_V4, 1,
                                                      shape, chunks, &h),
                 GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "version 4 is float32 only") != NULL, "%s",
              gs_last_error());
    cr_assert_eq(h, (gs_array_h)(uintptr_t)0x1, "no output written on error");
}

/* a v1 and a v3 (or v4) array of the same seed and parameters in one expression stay two
 * leaves, as do a v3 and a v4 array */
Test(graph_random_f32_v3, v1_and_v3_of_one_seed_are_different_leaves)
{
    static const int pairs[][2] = {{GS_RANDOM_V1, GS_RANDOM_V3}, {GS_RANDOM_V1, GS_RANDOM_V4},
                                   {GS_RANDOM_V3, GS_RANDOM_V4}};
    for (size_t q = 0; q < sizeof(pairs) / sizeof(pairs[0]); q++) {
        const int va = pairs[q][0], vc = pairs[q][1];
        const int64_t shape[1] = {64}, chunks[1] = {16};
        gs_array_h a, c, d;
        OK(gs_array_random_normal_dtype_version(8, 0, 1, GS_DTYPE_FLOAT32, va, 1, shape, chunks,
                                                &a));
        OK(gs_array_random_normal_dtype_version(8, 0, 1, GS_DTYPE_FLOAT32, vc, 1, shape, chunks,
                                                &c));
        OK(gs_array_binary(GS_BINARY_SUB, a, c, &d));
        float *got = eval_raw(d, GS_LOWER_DEFAULT);
        int zero = 0;
        for (int i = 0; i < 64; i++) {
            const float x = va == GS_RANDOM_V1 ? gs_random_normal_f32(8, (uint64_t)i, 0, 1)
                                               : f32n(va, 8, (uint64_t)i, 0, 1);
            const float w = x - f32n(vc, 8, (uint64_t)i, 0, 1);
            cr_assert_eq(got[i], w, "v%d - v%d: element %d", va, vc, i);
            zero += got[i] == 0.0f;
        }
        cr_assert_lt(zero, 3);
        free(got);
        gs_array_release(d);
        gs_array_release(c);
        gs_array_release(a);
    }
}
