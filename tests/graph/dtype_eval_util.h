/* Helpers of the per-dtype evaluation tests (test_dtype_eval.c, test_reduce_nan.c), on top of
 * graph_eval_util.h: the suite's CPU backend context, evaluation of an array in its dtype under
 * given lowering flags (every layer round-tripped through the codec), exact comparison with a
 * reference under every combination of flags, 1-D typed arrays. */
#ifndef GS_TESTS_GRAPH_DTYPE_EVAL_UTIL_H
#define GS_TESTS_GRAPH_DTYPE_EVAL_UTIL_H

#include "graph_eval_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"
#include "common/error.h"
#include "graph/taskgraph.h"

#include <criterion/criterion.h>
#include <gsched/array.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s: %s", #call, gs_last_error()); } while (0)

static gs_chunkops_ctx_h ctx;

static inline void setup(void)
{
    ctx = gx_ctx_create();
}

static inline void teardown(void)
{
    gx_ctx_destroy(ctx);
}

static inline int is_float(gs_dtype_t d)
{
    return d == GS_DTYPE_FLOAT64 || d == GS_DTYPE_FLOAT32 || d == GS_DTYPE_FLOAT16;
}

/* Round to a float dtype with the compiler's own conversions (not the library's). */
static inline double ref_round(gs_dtype_t d, double x)
{
    if (d == GS_DTYPE_FLOAT32) return (double)(float)x;
    if (d == GS_DTYPE_FLOAT16) return (double)(_Float16)x;
    return x;
}

/* ---- evaluation ---- */

/* Evaluate @a h with lowering @a flags; the result widened to doubles (caller frees). */
static inline double *eval_flags(gs_array_h h, unsigned flags)
{
    gs_taskgraph_t *tg;
    int64_t size = gs_array_size(h);
    const gs_dtype_t dt = (gs_dtype_t)gs_array_dtype(h);
    const size_t es = gs_dtype_size(dt);
    double *out = calloc((size_t)(size ? size : 1), sizeof(double));
    cr_assert_not_null(out);
    OK(gs_graph_lower(h, flags, &tg));
    cr_assert_eq(tg->out_dtype, (int32_t)dt, "the task graph's result dtype is the array's");
    gx_roundtrip_layers(tg);
    OK(gs_taskgraph_validate(tg));
    OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)size));
    gs_taskgraph_free(tg);
    for (int64_t i = size - 1; i >= 0; i--)
        out[i] = gs_dtype_to_double(dt, (const char *)out + (size_t)i * es);
    return out;
}

static inline int same(double got, double want)
{
    if (isnan(want)) return isnan(got);
    return got == want;
}

/* Check @a h against @a want[0..n) under every combination of lowering flags. */
static inline void check(gs_array_h h, const double *want, int64_t n, const char *what)
{
    cr_assert_eq(gs_array_size(h), n);
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        double *got = eval_flags(h, f);
        for (int64_t i = 0; i < n; i++)
            cr_assert(same(got[i], want[i]), "%s, flags 0x%x: element %lld is %.17g, want %.17g",
                      what, f, (long long)i, got[i], want[i]);
        free(got);
    }
}

/* A 1-D array of dtype @a d holding ref_cast(d, v[i]), in odd chunks of 3. */
static inline gs_array_h typed_array(gs_dtype_t d, const double *v, int64_t n)
{
    gs_array_h x, y;
    int64_t shape[1] = {n}, chunks[1] = {3};
    OK(gs_array_from_host(v, 1, shape, chunks, &x));
    OK(gs_array_astype(x, d, &y));
    gs_array_release(x);
    cr_assert_eq(gs_array_dtype(y), (int)d);
    return y;
}

#endif
