/* Several results from one task graph (gs_graph_lower_many): the roots are lowered together
 * (gs__graph_lower_roots in lower.c walks, pushes slices down and fuses over all of them at
 * once), so a node two results share becomes one set of tasks; this file checks the arguments
 * and describes where each result's blocks are among the graph's outputs. */
#include "graph/lower_int.h"

#include "common/alloc.h"
#include "common/error.h"

void gs_graph_lower_results_free(size_t n, gs_lower_result_t *res)
{
    if (res == NULL) return;
    for (size_t r = 0; r < n; r++) gs_grid_cleanup(&res[r].grid);
    gs_free(res);
}

gs_status_t gs_graph_lower_many(size_t n, const gs_array_h *arrays, unsigned flags,
                                gs_taskgraph_t **tg_p, gs_lower_result_t **res_p)
{
    return gs_graph_lower_many_hinted(n, arrays, flags, NULL, tg_p, res_p);
}

gs_status_t gs_graph_lower_many_hinted(size_t n, const gs_array_h *arrays, unsigned flags,
                                       const gs_lower_hints_t *hints, gs_taskgraph_t **tg_p,
                                       gs_lower_result_t **res_p)
{
    gs_taskgraph_t *tg = NULL;
    gs_lower_result_t *res = NULL;
    uint64_t *off = NULL;
    gs_status_t st;

    if (n == 0 || arrays == NULL || tg_p == NULL || res_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_graph_lower_many: n must be at least 1 and "
                                                  "arrays, tg_p and res_p must not be NULL");
    for (size_t r = 0; r < n; r++)
        if (arrays[r] == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_graph_lower_many: array %zu is NULL", r);
    off = gs_calloc(n + 1, sizeof(uint64_t), "lower result offsets");
    res = gs_calloc(n, sizeof(*res), "lower results");
    if (off == NULL || res == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
        goto err;
    }
    if ((st = gs__graph_lower_roots(n, arrays, flags, hints, &tg, off)) != GS_OK) goto err;
    for (size_t r = 0; r < n; r++) {
        const struct gs_array *a = arrays[r];
        if (gs_grid_copy(&res[r].grid, &a->grid) != GS_OK) {
            st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory while lowering");
            goto err;
        }
        res[r].dtype = a->dtype;
        res[r].out_off = off[r];
        res[r].noutputs = off[r + 1] - off[r];
        if (res[r].noutputs != gs_grid_nblocks(&a->grid)) {
            st = gs_error_set(GS_ERR_INTERNAL, "lowering gave result %zu %llu blocks, its grid "
                              "has %llu", r, (unsigned long long)res[r].noutputs,
                              (unsigned long long)gs_grid_nblocks(&a->grid));
            goto err;
        }
    }
    gs_free(off);
    *tg_p = tg;
    *res_p = res;
    return GS_OK;
err:
    gs_free(off);
    gs_graph_lower_results_free(n, res);
    gs_taskgraph_free(tg);
    return st;
}
