/* Shared by the graph-path random tests (test_random_dtype.c, test_random_f32_v3.c): the OK
 * macro, a per-test CPU chunkops context (rg_setup / rg_teardown as a suite's .init / .fini)
 * and eval_raw, the raw bytes of an array evaluated through the serial evaluator
 * (graph_eval_util.h's gx_eval_raw; the caller frees them). */
#ifndef GS_TESTS_GRAPH_RANDOM_GRAPH_TEST_UTIL_H
#define GS_TESTS_GRAPH_RANDOM_GRAPH_TEST_UTIL_H

#include "graph_eval_util.h"
#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "chunkops/random.h"
#include "common/error.h"
#include "graph/taskgraph.h"

#include <criterion/criterion.h>
#include <gsched/array.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s: %s", #call, gs_last_error()); } while (0)

static gs_chunkops_ctx_h rg_ctx;

static inline void rg_setup(void)
{
    rg_ctx = gx_ctx_create();
}

static inline void rg_teardown(void)
{
    gx_ctx_destroy(rg_ctx);
}

static inline void *eval_raw(gs_array_h h, unsigned flags)
{
    return gx_eval_raw(rg_ctx, h, flags);
}

#endif
