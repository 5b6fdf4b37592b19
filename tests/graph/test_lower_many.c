/* gs_graph_lower_many: several results lowered into one task graph. Each result is evaluated
 * from the shared graph (its outputs alone, with the CPU backend's serial evaluator) and must
 * equal, byte for byte, the same array lowered and evaluated on its own, under every
 * combination of lowering flags; nodes the results share must become one set of tasks. */
#include "graph_test_util.h"
#include "graph_eval_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "graph/graph_internal.h"

#include <stdlib.h>

static gs_chunkops_ctx_h ctx;

static void setup(void)
{
    ctx = gx_ctx_create();
}

static void teardown(void)
{
    gx_ctx_destroy(ctx);
}

TestSuite(lower_many, .init = setup, .fini = teardown, .timeout = 120);

static const unsigned all_flags[] = {
    0, GS_LOWER_CULL, GS_LOWER_FUSE, GS_LOWER_CULL | GS_LOWER_FUSE,
    GS_LOWER_SLICE_PUSHDOWN, GS_LOWER_CULL | GS_LOWER_SLICE_PUSHDOWN,
    GS_LOWER_FUSE | GS_LOWER_SLICE_PUSHDOWN, GS_LOWER_DEFAULT,
};

static size_t nbytes_of(gs_array_h a)
{
    int64_t n = gs_array_size(a);
    return (size_t)(n > 0 ? n : 1) * gs_dtype_size((gs_dtype_t)gs_array_dtype(a));
}

/* Result @a res of the shared graph @a tg alone: the same graph with only its outputs (the
 * whole graph does not pass gs_taskgraph_validate, which wants one output grid). */
static void *eval_result(const gs_taskgraph_t *tg, const gs_lower_result_t *res, gs_array_h a)
{
    gs_taskgraph_t sub = *tg;
    size_t nb = nbytes_of(a);
    void *out = calloc(1, nb);
    cr_assert_not_null(out);
    sub.out_grid = res->grid;
    sub.out_dtype = res->dtype;
    sub.noutputs = res->noutputs;
    sub.outputs = tg->outputs + res->out_off;
    TX_OK(gs_taskgraph_validate(&sub));   /* a graph with one result is a valid graph */
    TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, &sub, out, (size_t)gs_array_size(a)));
    return out;
}

/* Tasks of @a tg whose fused kernel computes opcode @a op (how often a node's work is done). */
static uint64_t tasks_with_op(const gs_taskgraph_t *tg, int32_t op)
{
    uint64_t n = 0;
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        const gs_layer_t *l = tg->layers[tg->task_layer[t]];
        if (l->kind != GS_LAYER_FUSED) continue;
        for (int32_t i = 0; i < l->u.f.nprog; i++) {
            if (l->u.f.prog[i].op == op) {
                n++;
                break;
            }
        }
    }
    return n;
}

static uint64_t op_tasks_alone(gs_array_h a, unsigned flags, int32_t op)
{
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(a, flags, &tg));
    uint64_t n = tasks_with_op(tg, op);
    gs_taskgraph_free(tg);
    return n;
}

static uint64_t ntasks_alone(gs_array_h a, unsigned flags)
{
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(a, flags, &tg));
    uint64_t n = tg->ntasks;
    gs_taskgraph_free(tg);
    return n;
}

/* Lower @a arrays together under every flag combination; every result must equal its own
 * lowering's. The shared node computing opcode @a op must run in exactly @a op_together tasks
 * together and @a op_alone tasks summed over the results lowered alone (its work done once). */
static void check_many(size_t n, const gs_array_h *arrays, int32_t op, uint64_t op_together,
                       uint64_t op_alone)
{
    for (size_t f = 0; f < sizeof(all_flags) / sizeof(all_flags[0]); f++) {
        const unsigned flags = all_flags[f];
        gs_taskgraph_t *tg = NULL;
        gs_lower_result_t *res = NULL;
        uint64_t alone = 0;
        TX_OK(gs_graph_lower_many(n, arrays, flags, &tg, &res));
        gx_roundtrip_layers(tg);   /* the layers as they travel */
        cr_assert_eq(tg->noutputs, res[n - 1].out_off + res[n - 1].noutputs);
        for (size_t r = 0; r < n; r++) {
            size_t nb = nbytes_of(arrays[r]);
            void *want = calloc(1, nb);
            cr_assert_not_null(want);
            cr_assert_eq(res[r].dtype, gs_array_dtype(arrays[r]));
            cr_assert_eq(res[r].grid.ndim, gs_array_ndim(arrays[r]));
            cr_assert_eq(res[r].noutputs, gs_grid_nblocks(&res[r].grid));
            TX_OK(gs_chunkops_eval_array(&gs_chunkops_cpu_ops, ctx, arrays[r], flags, want,
                                         (size_t)gs_array_size(arrays[r])));
            void *got = eval_result(tg, &res[r], arrays[r]);
            cr_assert(memcmp(got, want, (size_t)gs_array_size(arrays[r]) *
                                            gs_dtype_size((gs_dtype_t)res[r].dtype)) == 0,
                      "flags 0x%x: result %zu differs from its own lowering", flags, r);
            free(got);
            free(want);
            alone += op_tasks_alone(arrays[r], flags, op);
        }
        cr_assert_eq(tasks_with_op(tg, op), op_together, "flags 0x%x: %llu tasks compute the "
                     "shared node together, expected %llu", flags,
                     (unsigned long long)tasks_with_op(tg, op), (unsigned long long)op_together);
        cr_assert_eq(alone, op_alone, "flags 0x%x: %llu tasks compute the shared node alone, "
                     "expected %llu", flags, (unsigned long long)alone,
                     (unsigned long long)op_alone);
        gs_graph_lower_results_free(n, res);
        gs_taskgraph_free(tg);
    }
}

/* x = normal (60 x 50, chunks 16 x 16), y = exp(x) shared by three results:
 * sum(y + 1), (y * 2)[::2, ::3] as float32, y > 1 (bool). */
Test(lower_many, three_results_share_work)
{
    const int64_t shape[2] = {60, 50}, chunks[2] = {16, 16};
    gs_array_h x, y, y1, r0, y2, y2s, r1, r2;
    gs_reduce_params_t rp;
    gs_slice_t sl[2] = {GS_SLICE_STEP(2), GS_SLICE_STEP(3)};
    memset(&rp, 0, sizeof(rp));
    TX_OK(gs_array_random_normal(7, 0.0, 1.0, 2, shape, chunks, &x));
    TX_OK(gs_array_unary(GS_UNARY_EXP, x, &y));
    TX_OK(gs_array_binary_array_scalar(GS_BINARY_ADD, y, 1.0, &y1));
    TX_OK(gs_array_reduce(GS_RED_SUM, y1, &rp, &r0));
    TX_OK(gs_array_binary_array_scalar(GS_BINARY_MUL, y, 2.0, &y2));
    TX_OK(gs_array_slice(y2, 2, sl, &y2s));
    TX_OK(gs_array_astype(y2s, GS_DTYPE_FLOAT32, &r1));
    TX_OK(gs_array_binary_array_scalar(GS_BINARY_GT, y, 1.0, &r2));
    gs_array_h roots[3] = {r0, r1, r2};
    /* exp(x) over 4 x 4 chunks: 16 tasks together (fused: materialised once, read by the
     * three), 3 x 16 alone (fused: inside each result's kernels) */
    check_many(3, roots, GS_OP_EXP, 16, 48);

    /* without fusion every node is a layer: together saves exactly the two shared layers (x
     * and y, 4 x 4 = 16 blocks each) of the second and third results */
    {
        gs_taskgraph_t *tg;
        gs_lower_result_t *res;
        uint64_t sum = 0;
        for (int r = 0; r < 3; r++) sum += ntasks_alone(roots[r], GS_LOWER_CULL);
        TX_OK(gs_graph_lower_many(3, roots, GS_LOWER_CULL, &tg, &res));
        cr_assert_eq(tg->ntasks, sum - 2 * 2 * 16, "%llu tasks together, %llu alone",
                     (unsigned long long)tg->ntasks, (unsigned long long)sum);
        gs_graph_lower_results_free(3, res);
        gs_taskgraph_free(tg);
    }
    gs_array_release(x);
    gs_array_release(y);
    gs_array_release(y1);
    gs_array_release(r0);
    gs_array_release(y2);
    gs_array_release(y2s);
    gs_array_release(r1);
    gs_array_release(r2);
}

/* The same array twice, and a result that another result reads (y and y + 1, y[1:]). */
Test(lower_many, duplicates_and_nested_roots)
{
    const int64_t shape[1] = {100}, chunks[1] = {30};
    gs_array_h x, y, z, ys;
    gs_slice_t sl = GS_SLICE_FROM(1, 1);
    TX_OK(gs_array_random_uniform(3, -1.0, 1.0, 1, shape, chunks, &x));
    TX_OK(gs_array_unary(GS_UNARY_SIN, x, &y));
    TX_OK(gs_array_binary_array_scalar(GS_BINARY_ADD, y, 1.0, &z));
    TX_OK(gs_array_slice(y, 1, &sl, &ys));
    gs_array_h roots[5] = {z, y, z, ys, x};
    /* sin(x) over 4 chunks: once together; alone in z (twice), y and y[1:] */
    check_many(5, roots, GS_OP_SIN, 4, 16);
    gs_array_release(x);
    gs_array_release(y);
    gs_array_release(z);
    gs_array_release(ys);
}

Test(lower_many, one_result_is_lower)
{
    const int64_t shape[2] = {20, 30}, chunks[2] = {7, 8};
    gs_array_h x;
    gs_taskgraph_t *tg1, *tgn;
    gs_lower_result_t *res;
    TX_OK(gs_array_random_normal(1, 0.0, 1.0, 2, shape, chunks, &x));
    TX_OK(gs_graph_lower(x, GS_LOWER_DEFAULT, &tg1));
    TX_OK(gs_graph_lower_many(1, &x, GS_LOWER_DEFAULT, &tgn, &res));
    cr_assert_eq(tg1->ntasks, tgn->ntasks);
    cr_assert_eq(tg1->noutputs, tgn->noutputs);
    cr_assert(memcmp(tg1->outputs, tgn->outputs, tg1->noutputs * sizeof(uint64_t)) == 0);
    cr_assert_eq(res[0].out_off, 0);
    cr_assert_eq(res[0].noutputs, tg1->noutputs);
    gs_graph_lower_results_free(1, res);
    gs_taskgraph_free(tg1);
    gs_taskgraph_free(tgn);
    gs_array_release(x);
}

Test(lower_many, bad_arguments)
{
    const int64_t shape[1] = {10}, chunks[1] = {5};
    gs_array_h x;
    gs_taskgraph_t *tg = (gs_taskgraph_t *)0x1;
    gs_lower_result_t *res = (gs_lower_result_t *)0x1;
    TX_OK(gs_array_full(1.0, 1, shape, chunks, &x));
    gs_array_h two[2] = {x, NULL};
    cr_assert_eq(gs_graph_lower_many(0, &x, 0, &tg, &res), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_graph_lower_many(1, NULL, 0, &tg, &res), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_graph_lower_many(2, two, 0, &tg, &res), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "array 1 is NULL") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_graph_lower_many(1, &x, 0, NULL, &res), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_graph_lower_many(1, &x, 0, &tg, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_graph_lower_many(1, &x, 0x8000u, &tg, &res), GS_ERR_INVALID_PARAM);
    /* nothing written on error */
    cr_assert_eq(tg, (gs_taskgraph_t *)0x1);
    cr_assert_eq(res, (gs_lower_result_t *)0x1);
    gs_array_release(x);
}
