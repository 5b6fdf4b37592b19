/* Task graphs: release and structural validation. */
#include "graph/graph_internal.h"

void gs_taskgraph_free(gs_taskgraph_t *tg)
{
    if (tg == NULL) return;
    if (tg->layers != NULL)
        for (uint32_t i = 0; i < tg->nlayers; i++) gs_layer_free(tg->layers[i]);
    gs_free(tg->layers);
    gs_free(tg->task_layer);
    gs_free(tg->task_block);
    gs_free(tg->dep_off);
    gs_free(tg->deps);
    gs_free(tg->task_nbytes);
    gs_free(tg->externals);
    gs_grid_cleanup(&tg->out_grid);
    gs_free(tg->outputs);
    gs_free(tg);
}

gs_status_t gs_taskgraph_validate(const gs_taskgraph_t *tg)
{
    const char *why;
    if (tg == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "task graph is NULL");
    if (tg->nlayers > 0 && tg->layers == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "task graph has %u layers but no layer array",
                            tg->nlayers);
    for (uint32_t i = 0; i < tg->nlayers; i++)
        if (tg->layers[i] == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "layer %u is NULL", i);
    if (tg->ntasks > 0 && (tg->task_layer == NULL || tg->task_block == NULL ||
                           tg->task_nbytes == NULL))
        return gs_error_set(GS_ERR_INVALID_PARAM, "task graph has tasks but no task table");
    if (tg->dep_off == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "task graph has no dependency offsets");
    if (tg->dep_off[0] != 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "dependency offsets do not start at 0");
    if (tg->dep_off[tg->ntasks] > 0 && tg->deps == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "task graph has dependencies but no array");
    if (tg->nexternals > 0 && tg->externals == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "task graph has externals but no key array");
    if (tg->ntasks > UINT64_MAX - tg->nexternals)
        return gs_error_set(GS_ERR_INVALID_PARAM, "task and external counts overflow");
    for (uint64_t i = 0; i < tg->ntasks; i++) {
        uint32_t li = tg->task_layer[i];
        const gs_layer_t *l;
        uint64_t b = tg->task_block[i], nd;
        int expect;
        if (li >= tg->nlayers)
            return gs_error_set(GS_ERR_INVALID_PARAM, "task %llu refers to layer %u of %u",
                                (unsigned long long)i, li, tg->nlayers);
        l = tg->layers[li];
        if (b >= gs_layer_nblocks(l))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "task %llu refers to block %llu of a %llu-block layer",
                                (unsigned long long)i, (unsigned long long)b,
                                (unsigned long long)gs_layer_nblocks(l));
        if (tg->dep_off[i + 1] < tg->dep_off[i])
            return gs_error_set(GS_ERR_INVALID_PARAM, "dependency offsets decrease at task %llu",
                                (unsigned long long)i);
        nd = tg->dep_off[i + 1] - tg->dep_off[i];
        expect = gs_layer_ninputs(l, b);
        if (expect < 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "task %llu: layer %u cannot resolve block %llu",
                                (unsigned long long)i, li, (unsigned long long)b);
        if (nd != (uint64_t)expect)
            return gs_error_set(GS_ERR_INVALID_PARAM, "task %llu has %llu dependencies, its layer expects %d",
                                (unsigned long long)i, (unsigned long long)nd, expect);
        for (uint64_t k = tg->dep_off[i]; k < tg->dep_off[i + 1]; k++) {
            uint64_t d = tg->deps[k];
            if (d >= i && (d < tg->ntasks || d - tg->ntasks >= tg->nexternals))
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "task %llu depends on %llu: not an earlier task or an external",
                                    (unsigned long long)i, (unsigned long long)d);
        }
        if (tg->task_nbytes[i] != gs_layer_out_nbytes(l, b))
            return gs_error_set(GS_ERR_INVALID_PARAM, "task %llu declares %llu output bytes, its layer gives %llu",
                                (unsigned long long)i, (unsigned long long)tg->task_nbytes[i],
                                (unsigned long long)gs_layer_out_nbytes(l, b));
    }
    if (!gs__grid_check(&tg->out_grid, &why))
        return gs_error_set(GS_ERR_INVALID_PARAM, "output grid: %s", why);
    if (tg->noutputs != gs_grid_nblocks(&tg->out_grid))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%llu outputs for an output grid of %llu blocks",
                            (unsigned long long)tg->noutputs,
                            (unsigned long long)gs_grid_nblocks(&tg->out_grid));
    if (tg->noutputs > 0 && tg->outputs == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "task graph has no output array");
    for (uint64_t b = 0; b < tg->noutputs; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
        uint64_t t = tg->outputs[b];
        if (t >= tg->ntasks)
            return gs_error_set(GS_ERR_INVALID_PARAM, "output %llu refers to task %llu of %llu",
                                (unsigned long long)b, (unsigned long long)t,
                                (unsigned long long)tg->ntasks);
        gs_grid_block_region(&tg->out_grid, b, start, shape);
        if (tg->out_dtype < 0 || tg->out_dtype >= GS_DTYPE_COUNT)
            return gs_error_set(GS_ERR_INVALID_PARAM, "task graph has unknown output dtype %d",
                                (int)tg->out_dtype);
        if (tg->task_nbytes[t] != (uint64_t)gs_region_size(tg->out_grid.ndim, shape) *
                                      gs_dtype_size(tg->out_dtype))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "output %llu: task %llu has %llu bytes, the block needs %llu",
                                (unsigned long long)b, (unsigned long long)t,
                                (unsigned long long)tg->task_nbytes[t],
                                (unsigned long long)gs_region_size(tg->out_grid.ndim, shape) *
                                    gs_dtype_size(tg->out_dtype));
    }
    return GS_OK;
}
