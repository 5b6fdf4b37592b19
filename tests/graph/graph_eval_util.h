/* Fixture of the graph tests that evaluate task graphs on the CPU backend: the chunkops
 * context of each test, a private temporary directory, and the lowering every evaluated graph
 * goes through (validated, each layer replaced by its decoded encoding, which must re-encode to
 * the same bytes). Header-only; each function is used by some of the including files. */
#ifndef GS_TESTS_GRAPH_EVAL_UTIL_H
#define GS_TESTS_GRAPH_EVAL_UTIL_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"
#include "common/error.h"
#include "graph/taskgraph.h"

/* A CPU backend context with default parameters (the test fails when it cannot be made). */
static inline gs_chunkops_ctx_h gx_ctx_create(void)
{
    gs_chunkops_params_t p;
    gs_chunkops_ctx_h ctx = NULL;
    memset(&p, 0, sizeof(p));
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(&p, &ctx), GS_OK, "%s", gs_last_error());
    return ctx;
}

static inline void gx_ctx_destroy(gs_chunkops_ctx_h ctx)
{
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

/* Make a fresh directory /tmp/<prefix>-XXXXXX into @a dir (@a len bytes). */
static inline void gx_tmpdir_make(char *dir, size_t len, const char *prefix)
{
    snprintf(dir, len, "/tmp/%s-XXXXXX", prefix);
    cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

/* Remove @a dir and everything in it. */
static inline void gx_tmpdir_remove(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* "@a dir/@a rel" in one of four rotating static buffers (a call may use up to four at once). */
static inline const char *gx_path(const char *dir, const char *rel)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, rel);
    return buf[k];
}

/* Replace every layer of @a tg with its decoded encoding; re-encoding it must give the same
 * bytes. */
static inline void gx_roundtrip_layers(gs_taskgraph_t *tg)
{
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        gs_buf_t b1, b2;
        gs_layer_t *l;
        gs_buf_init(&b1);
        gs_buf_init(&b2);
        cr_assert_eq(gs_layer_encode(tg->layers[i], &b1), GS_OK, "%s", gs_last_error());
        cr_assert_eq(gs_layer_decode(b1.data, b1.len, &l), GS_OK, "layer %u: %s", i, gs_last_error());
        cr_assert_eq(gs_layer_encode(l, &b2), GS_OK, "%s", gs_last_error());
        cr_assert(b1.len == b2.len && memcmp(b1.data, b2.data, b1.len) == 0,
                  "layer %u re-encodes differently", i);
        gs_layer_free(tg->layers[i]);
        tg->layers[i] = l;
        gs_buf_cleanup(&b1);
        gs_buf_cleanup(&b2);
    }
}

/* Lower @a h with @a flags, validate, round-trip the layers through the codec and validate
 * again. The caller frees the graph. */
static inline gs_taskgraph_t *gx_lower(gs_array_h h, unsigned flags)
{
    gs_taskgraph_t *tg = NULL;
    cr_assert_eq(gs_graph_lower(h, flags, &tg), GS_OK, "lowering (flags 0x%x): %s", flags,
                 gs_last_error());
    cr_assert_eq(gs_taskgraph_validate(tg), GS_OK, "%s", gs_last_error());
    gx_roundtrip_layers(tg);
    cr_assert_eq(gs_taskgraph_validate(tg), GS_OK, "after the codec: %s", gs_last_error());
    return tg;
}

/* Evaluate @a h on the CPU backend context @a ctx with lowering @a flags (gx_lower) into raw
 * elements of its dtype; the caller frees the result. */
static inline void *gx_eval_raw(gs_chunkops_ctx_h ctx, gs_array_h h, unsigned flags)
{
    const int64_t size = gs_array_size(h);
    const size_t es = gs_dtype_size((gs_dtype_t)gs_array_dtype(h));
    void *out = calloc((size_t)(size ? size : 1), es);
    cr_assert_not_null(out);
    gs_taskgraph_t *tg = gx_lower(h, flags);
    cr_assert_eq(tg->out_dtype, gs_array_dtype(h));
    cr_assert_eq(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)size * es), GS_OK,
                 "%s", gs_last_error());
    gs_taskgraph_free(tg);
    return out;
}

/* The call fails with GS_ERR_INVALID_PARAM, a message containing @a needle, *out untouched. */
#define GX_EXPECT_INVALID(call, out, needle)                                                 \
    do {                                                                                     \
        gs_array_h sentinel__ = (gs_array_h)(uintptr_t)0x5a5a;                               \
        (out) = sentinel__;                                                                  \
        gs_status_t st__ = (call);                                                           \
        cr_assert_eq(st__, GS_ERR_INVALID_PARAM, "%s: %s", #call, gs_status_name(st__));     \
        cr_assert((out) == sentinel__, "%s wrote its output on error", #call);               \
        cr_assert(strstr(gs_last_error(), (needle)) != NULL, "%s: message '%s' lacks '%s'",  \
                  #call, gs_last_error(), (needle));                                         \
    } while (0)

#ifdef GS_HAVE_CUDA
#include "chunkops/cuda/cuda_backend.h"

/* Switch a test that evaluates on (*be, *ctx) (the CPU backend, ctx made by its setup) to the
 * CUDA backend: destroys the CPU context and makes a CUDA one on device 0 (256 MiB). Skips the
 * test when there is no CUDA device. */
static inline void gx_cuda_begin(const gs_chunkops_ops_t **be, gs_chunkops_ctx_h *ctx)
{
    gs_chunkops_params_t p;
    if (gs__cuda_device_count() == 0) cr_skip_test("no CUDA device on this machine");
    memset(&p, 0, sizeof(p));
    p.device = 0;
    p.memory_limit = (size_t)256 << 20;
    gs_chunkops_cpu_ops.ctx_destroy(*ctx);   /* setup's CPU context */
    *be = &gs_chunkops_cuda_ops;
    cr_assert_eq((*be)->ctx_create(&p, ctx), GS_OK, "%s", gs_last_error());
}

/* Back from gx_cuda_begin: the CUDA context must hold no device memory; it is destroyed and a
 * fresh CPU context (for the teardown) put in its place. */
static inline void gx_cuda_end(const gs_chunkops_ops_t **be, gs_chunkops_ctx_h *ctx)
{
    size_t used = 0;
    (*be)->mem_usage(*ctx, &used, NULL);
    cr_assert_eq(used, 0, "device memory left allocated: %zu bytes", used);
    (*be)->ctx_destroy(*ctx);
    *be = &gs_chunkops_cpu_ops;
    *ctx = gx_ctx_create();
}
#endif

#endif
