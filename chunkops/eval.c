/* gs_chunkops_eval: a serial, in-process task-graph evaluator over one chunkops backend. */
#include "chunkops/eval.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>

typedef struct gs__eval {
    const gs_chunkops_ops_t *ops;
    gs_chunkops_ctx_h ctx;
    gs_chunkops_stream_h stream;
    const gs_taskgraph_t *tg;
    void **bufs;        /* [ntasks] live task outputs (backend memory) */
    uint64_t *refs;     /* [ntasks] consumers that have not run yet */
    uint8_t *is_out;    /* [ntasks] task is a graph output: kept to the end */
    gs_chunk_ref_t *inputs;
} gs__eval_t;

/* Re-set the last error with the task named in front of the cause. */
static gs_status_t gs__eval_task_error(gs_status_t st, const gs__eval_t *e, uint64_t t,
                                       const char *what)
{
    char cause[384];
    const gs_layer_t *l = e->tg->layers[e->tg->task_layer[t]];
    snprintf(cause, sizeof(cause), "%s", gs_last_error());
    return gs_error_set(st, "task %llu (%s, block %llu): %s: %s", (unsigned long long)t,
                        gs_layer_name(l), (unsigned long long)e->tg->task_block[t], what,
                        cause[0] ? cause : gs_status_string(st));
}

static gs_status_t gs__eval_free_task(gs__eval_t *e, uint64_t t)
{
    gs_status_t st = GS_OK;
    if (e->bufs[t] == NULL) return GS_OK;
    /* work reading or writing the buffer may still be queued (cuda) */
    st = e->ops->sync(e->ctx, e->stream);
    e->ops->mem_free(e->ctx, e->bufs[t]);
    e->bufs[t] = NULL;
    return st;
}

static gs_status_t gs__eval_task(gs__eval_t *e, uint64_t t)
{
    const gs_taskgraph_t *tg = e->tg;
    const gs_layer_t *l = tg->layers[tg->task_layer[t]];
    uint64_t block = tg->task_block[t];
    uint64_t nbytes = gs_layer_out_nbytes(l, block);
    gs_ktask_t kt;
    gs_status_t st;

    if (nbytes != tg->task_nbytes[t])
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "task %llu (%s, block %llu): the task table says %llu output bytes, "
                            "the layer %llu",
                            (unsigned long long)t, gs_layer_name(l), (unsigned long long)block,
                            (unsigned long long)tg->task_nbytes[t], (unsigned long long)nbytes);
    uint64_t d0 = tg->dep_off[t], d1 = tg->dep_off[t + 1];
    for (uint64_t i = d0; i < d1; i++) {
        uint64_t d = tg->deps[i];
        gs_assert_always(d < t && e->bufs[d] != NULL);
        e->inputs[i - d0].data = e->bufs[d];
        e->inputs[i - d0].len = (int64_t)(tg->task_nbytes[d] / sizeof(double));
        e->inputs[i - d0].nbytes = tg->task_nbytes[d];
    }
    if ((st = e->ops->mem_alloc(e->ctx, (size_t)nbytes, &e->bufs[t])) != GS_OK)
        return gs__eval_task_error(st, e, t, "allocating its output");
    if ((st = gs_layer_instantiate(l, block, (int)(d1 - d0), e->inputs, e->bufs[t], &kt)) != GS_OK)
        return gs__eval_task_error(st, e, t, "instantiating");
    if ((st = gs_chunkops_run_ktask(e->ops, e->ctx, e->stream, &kt)) != GS_OK)
        return gs__eval_task_error(st, e, t, "running");

    /* release inputs whose last consumer this was, and outputs nobody reads */
    for (uint64_t i = d0; i < d1; i++) {
        uint64_t d = tg->deps[i];
        gs_assert_always(e->refs[d] > 0);
        if (--e->refs[d] == 0 && !e->is_out[d] && (st = gs__eval_free_task(e, d)) != GS_OK)
            return gs__eval_task_error(st, e, t, "running");
    }
    if (e->refs[t] == 0 && !e->is_out[t] && (st = gs__eval_free_task(e, t)) != GS_OK)
        return gs__eval_task_error(st, e, t, "running");
    return GS_OK;
}

/* Copy the output blocks into @a out, row-major over the result array. */
static gs_status_t gs__eval_assemble(gs__eval_t *e, double *out)
{
    const gs_taskgraph_t *tg = e->tg;
    const gs_grid_t *g = &tg->out_grid;
    const int nd = g->ndim;
    int64_t gstride[GS_MAX_NDIM];
    int64_t s = 1;
    size_t maxbytes = 0;
    const size_t es = gs_dtype_size(tg->out_dtype);
    char *stage = NULL, *outb = (char *)out;
    gs_status_t st = GS_OK;

    for (int j = nd - 1; j >= 0; j--) {
        gstride[j] = s;
        s *= g->shape[j];
    }
    for (uint64_t b = 0; b < tg->noutputs; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
        uint64_t t = tg->outputs[b];
        gs_grid_block_region(g, b, start, shape);
        int64_t nel = gs_region_size(nd, shape);
        if (tg->task_nbytes[t] != (uint64_t)nel * es)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "output block %llu: task %llu holds %llu bytes, the block needs "
                                "%lld elements",
                                (unsigned long long)b, (unsigned long long)t,
                                (unsigned long long)tg->task_nbytes[t], (long long)nel);
        if ((size_t)nel * es > maxbytes) maxbytes = (size_t)nel * es;
    }
    if (tg->noutputs == 1) {
        /* one block is the whole array */
        if (maxbytes == 0) return GS_OK;
        if ((st = e->ops->copy_to_host(e->ctx, e->stream, out, e->bufs[tg->outputs[0]], maxbytes)) !=
            GS_OK)
            return st;
        return e->ops->sync(e->ctx, e->stream);
    }
    stage = gs_malloc(maxbytes, "eval staging");
    if (stage == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "eval: out of memory for a %zu-byte staging buffer",
                            maxbytes);
    for (uint64_t b = 0; b < tg->noutputs && st == GS_OK; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], q[GS_MAX_NDIM] = {0};
        uint64_t t = tg->outputs[b];
        gs_grid_block_region(g, b, start, shape);
        int64_t nel = gs_region_size(nd, shape);
        if (nel == 0) continue;
        if ((st = e->ops->copy_to_host(e->ctx, e->stream, stage, e->bufs[t],
                                       (size_t)nel * es)) != GS_OK ||
            (st = e->ops->sync(e->ctx, e->stream)) != GS_OK)
            break;
        if (nd == 0) {
            memcpy(outb, stage, es);
            continue;
        }
        int64_t off = 0, row = shape[nd - 1];
        for (int j = 0; j < nd; j++) off += start[j] * gstride[j];
        for (int64_t src = 0; src < nel; src += row) {
            memcpy(outb + (size_t)off * es, stage + (size_t)src * es, (size_t)row * es);
            for (int j = nd - 2; j >= 0; j--) {
                if (++q[j] < shape[j]) {
                    off += gstride[j];
                    break;
                }
                off -= gstride[j] * (shape[j] - 1);
                q[j] = 0;
            }
        }
    }
    gs_free(stage);
    return st;
}

gs_status_t gs_chunkops_eval(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                             const gs_taskgraph_t *tg, double *out, size_t out_len)
{
    gs__eval_t e;
    gs_status_t st;
    uint64_t maxdeg = 0;

    if (ops == NULL || ctx == NULL || tg == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "eval: NULL backend, context or task graph");
    if (tg->nexternals > 0)
        return gs_error_set(GS_ERR_UNSUPPORTED,
                            "eval: the task graph reads %llu persisted chunks; the in-process "
                            "evaluator supports self-contained graphs only",
                            (unsigned long long)tg->nexternals);
    if ((st = gs_taskgraph_validate(tg)) != GS_OK) return st;
    if (tg->noutputs != gs_grid_nblocks(&tg->out_grid))
        return gs_error_set(GS_ERR_INVALID_PARAM, "eval: %llu outputs for a grid of %llu blocks",
                            (unsigned long long)tg->noutputs,
                            (unsigned long long)gs_grid_nblocks(&tg->out_grid));
    int64_t total = gs_region_size(tg->out_grid.ndim, tg->out_grid.shape);
    if ((uint64_t)total > out_len)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "eval: the result has %lld elements, the output buffer %zu",
                            (long long)total, out_len);
    if (total > 0 && out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "eval: output buffer is NULL");

    memset(&e, 0, sizeof(e));
    e.ops = ops;
    e.ctx = ctx;
    e.tg = tg;
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        uint64_t deg = tg->dep_off[t + 1] - tg->dep_off[t];
        if (deg > maxdeg) maxdeg = deg;
    }
    e.bufs = gs_calloc(tg->ntasks, sizeof(*e.bufs), "eval buffers");
    e.refs = gs_calloc(tg->ntasks, sizeof(*e.refs), "eval refcounts");
    e.is_out = gs_calloc(tg->ntasks, 1, "eval output flags");
    e.inputs = gs_calloc(maxdeg, sizeof(*e.inputs), "eval inputs");
    if (e.bufs == NULL || e.refs == NULL || e.is_out == NULL || e.inputs == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "eval: out of memory for %llu tasks",
                          (unsigned long long)tg->ntasks);
        goto out_free;
    }
    for (uint64_t i = 0; i < tg->dep_off[tg->ntasks]; i++) e.refs[tg->deps[i]]++;
    for (uint64_t b = 0; b < tg->noutputs; b++) e.is_out[tg->outputs[b]] = 1;
    if ((st = ops->stream_create(ctx, &e.stream)) != GS_OK) goto out_free;

    for (uint64_t t = 0; t < tg->ntasks; t++)
        if ((st = gs__eval_task(&e, t)) != GS_OK) goto out_release;
    if ((st = ops->sync(ctx, e.stream)) != GS_OK) goto out_release;
    st = gs__eval_assemble(&e, out);

out_release:
    if (st != GS_OK) {
        /* let queued work finish before freeing, keeping the first error's message */
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        (void)ops->sync(ctx, e.stream);
        gs_error_set(st, "%s", msg);
    }
    for (uint64_t t = 0; t < tg->ntasks; t++)
        if (e.bufs[t] != NULL) ops->mem_free(ctx, e.bufs[t]);
    ops->stream_destroy(ctx, e.stream);
out_free:
    gs_free(e.inputs);
    gs_free(e.bufs);
    gs_free(e.refs);
    gs_free(e.is_out);
    return st;
}

gs_status_t gs_chunkops_eval_array(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                   gs_array_h array, unsigned flags, double *out,
                                   size_t out_len)
{
    gs_taskgraph_t *tg = NULL;
    gs_status_t st;
    unsigned retry;
    if (ops == NULL || array == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "eval: ops and array must not be NULL");
    if ((st = gs_graph_lower(array, flags, &tg)) != GS_OK) return st;
    st = gs_chunkops_eval(ops, ctx, tg, out, out_len);
    gs_taskgraph_free(tg);
    if (st == GS_OK || !gs_graph_lower_retry_flags(flags, st, gs_last_error(), &retry)) return st;
    /* the Gram path refused the input: the same array by TSQR (docs/ARCHITECTURE.md) */
    if ((st = gs_graph_lower(array, retry, &tg)) != GS_OK) return st;
    st = gs_chunkops_eval(ops, ctx, tg, out, out_len);
    gs_taskgraph_free(tg);
    return st;
}
