/* Task graph validation (each corruption rejected) and grid helpers. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "common/alloc.h"
#include "graph/taskgraph.h"

#define OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s: %s: %s", #call, gs_status_name(st__), gs_last_error()); } while (0)

/* (normal(20x12) - normal.mean(axis=0)).sum(), unfused: several layers with dependencies */
static gs_taskgraph_t *sample(void)
{
    int64_t s[2] = {20, 12}, c[2] = {6, 5};
    gs_array_h x, m, d, r;
    gs_reduce_params_t p = {GS_REDUCE_FIELD_AXIS, 0, 0, 0};
    OK(gs_array_random_normal(1, 0, 1, 2, s, c, &x));
    OK(gs_array_reduce(GS_RED_MEAN, x, &p, &m));
    OK(gs_array_binary(GS_BINARY_SUB, x, m, &d));
    OK(gs_array_reduce(GS_RED_SUM, d, NULL, &r));
    gs_taskgraph_t *tg;
    OK(gs_graph_lower(r, GS_LOWER_CULL, &tg));
    OK(gs_taskgraph_validate(tg));
    gs_array_release(x);
    gs_array_release(m);
    gs_array_release(d);
    gs_array_release(r);
    return tg;
}

static void expect_invalid(const gs_taskgraph_t *tg, const char *word)
{
    gs_status_t st = gs_taskgraph_validate(tg);
    cr_assert_eq(st, GS_ERR_INVALID_PARAM, "validate returned %s", gs_status_name(st));
    cr_assert(strstr(gs_last_error(), word) != NULL, "message '%s' lacks '%s'", gs_last_error(), word);
}

/* first task with at least one dependency */
static uint64_t task_with_deps(const gs_taskgraph_t *tg)
{
    for (uint64_t t = 0; t < tg->ntasks; t++)
        if (tg->dep_off[t + 1] > tg->dep_off[t]) return t;
    cr_assert_fail("no task with dependencies");
    return 0;
}

Test(graph_taskgraph, lowered_graphs_validate)
{
    gs_taskgraph_t *tg = sample();
    cr_assert_gt(tg->nlayers, 3);
    for (uint64_t t = 0; t < tg->ntasks; t++)
        for (uint64_t k = tg->dep_off[t]; k < tg->dep_off[t + 1]; k++)
            cr_assert_lt(tg->deps[k], t, "not topological");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_null_graph)
{
    expect_invalid(NULL, "NULL");
}

Test(graph_taskgraph, rejects_layer_out_of_range)
{
    gs_taskgraph_t *tg = sample();
    tg->task_layer[0] = tg->nlayers;
    expect_invalid(tg, "layer");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_block_out_of_range)
{
    gs_taskgraph_t *tg = sample();
    tg->task_block[0] = gs_layer_nblocks(tg->layers[tg->task_layer[0]]);
    expect_invalid(tg, "block");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_forward_dependency)
{
    gs_taskgraph_t *tg = sample();
    uint64_t t = task_with_deps(tg);
    tg->deps[tg->dep_off[t]] = t;
    expect_invalid(tg, "not an earlier task");
    tg->deps[tg->dep_off[t]] = t + 1;
    expect_invalid(tg, "not an earlier task");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_external_out_of_range)
{
    gs_taskgraph_t *tg = sample();
    uint64_t t = task_with_deps(tg);
    tg->deps[tg->dep_off[t]] = tg->ntasks;   /* no externals */
    expect_invalid(tg, "external");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_wrong_dependency_count)
{
    gs_taskgraph_t *tg = sample();
    uint64_t t = task_with_deps(tg);
    tg->dep_off[t + 1]--;   /* t loses one input, t + 1 gains it */
    expect_invalid(tg, "dependencies");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_decreasing_offsets)
{
    gs_taskgraph_t *tg = sample();
    uint64_t t = 0;
    while (t < tg->ntasks && tg->dep_off[t] == 0) t++;
    cr_assert_lt(t, tg->ntasks);
    tg->dep_off[t + 1] = tg->dep_off[t] - 1;
    expect_invalid(tg, "decrease");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_nonzero_first_offset)
{
    gs_taskgraph_t *tg = sample();
    tg->dep_off[0] = 1;
    expect_invalid(tg, "start at 0");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_wrong_output_size)
{
    gs_taskgraph_t *tg = sample();
    tg->task_nbytes[0] += 8;
    expect_invalid(tg, "output bytes");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_output_task_out_of_range)
{
    gs_taskgraph_t *tg = sample();
    tg->outputs[0] = tg->ntasks;
    expect_invalid(tg, "output");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_output_of_the_wrong_size)
{
    gs_taskgraph_t *tg = sample();
    tg->outputs[0] = 0;   /* a partial-record task, not the 1-element result */
    expect_invalid(tg, "output 0");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_output_count_mismatch)
{
    gs_taskgraph_t *tg = sample();
    tg->noutputs = 2;
    expect_invalid(tg, "outputs");
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_null_layer)
{
    gs_taskgraph_t *tg = sample();
    gs_layer_t *l = tg->layers[1];
    tg->layers[1] = NULL;
    expect_invalid(tg, "NULL");
    tg->layers[1] = l;
    gs_taskgraph_free(tg);
}

Test(graph_taskgraph, rejects_bad_output_grid)
{
    gs_taskgraph_t *tg = sample();
    tg->out_grid.ndim = GS_MAX_NDIM + 1;
    expect_invalid(tg, "output grid");
    tg->out_grid.ndim = 0;
    gs_taskgraph_free(tg);
}

/* ---- grids ---- */

Test(graph_taskgraph, grid_helpers)
{
    int64_t s[3] = {7, 5, 3}, c[3] = {3, 5, 2};
    gs_array_h x;
    OK(gs_array_full(1.0, 3, s, c, &x));
    gs_grid_t g, h;
    memset(&g, 0, sizeof(g));
    g.ndim = 3;
    for (int a = 0; a < 3; a++) {
        g.shape[a] = s[a];
        g.nchunks[a] = gs_array_nchunks(x, a);
        g.bounds[a] = (int64_t *)gs_array_chunk_bounds(x, a);
    }
    cr_assert_eq(gs_grid_nblocks(&g), 3 * 1 * 2);
    int64_t start[3], shape[3];
    gs_grid_block_region(&g, 5, start, shape);   /* (2, 0, 1) */
    cr_assert_eq(start[0], 6);
    cr_assert_eq(shape[0], 1);
    cr_assert_eq(start[1], 0);
    cr_assert_eq(shape[1], 5);
    cr_assert_eq(start[2], 2);
    cr_assert_eq(shape[2], 1);
    OK(gs_grid_copy(&h, &g));
    cr_assert_neq(h.bounds[0], g.bounds[0]);
    cr_assert_eq(h.bounds[0][2], 6);
    cr_assert_eq(gs_grid_nblocks(&h), 6);
    gs_grid_cleanup(&h);
    cr_assert_eq(h.ndim, 0);
    gs_grid_t z;
    memset(&z, 0, sizeof(z));
    cr_assert_eq(gs_grid_nblocks(&z), 1);   /* ndim 0: one block */
    gs_grid_cleanup(NULL);
    gs_array_release(x);
}
