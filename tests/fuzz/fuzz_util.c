/* Helpers shared by the fuzz targets: see fuzz_util.h. */
#include "fuzz_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/alloc.h"
#include "common/log.h"
#include "graph/graph_internal.h"
#include "graph/copy_int.h"
#include "graph/linalg_int.h"
#include "graph/scan_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static gs_chunkops_ctx_h fz_ctx;
static gs_chunkops_stream_h fz_stream;

void fz_bug(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "\n==fuzz== contract broken at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n==fuzz== last gsched error: %s\n", gs_last_error());
    abort();
}

void fz_init(void)
{
    const gs_chunkops_ops_t *ops = &gs_chunkops_cpu_ops;
    gs_chunkops_params_t params = {0};
    if (fz_ctx != NULL) return;
    /* decoders log rejected peer input at warn: keep the fuzzer's output readable and fast */
    gs_log_set_level(GS_LOG_LEVEL_FATAL);
    params.memory_limit = (size_t)1 << 30;
    params.nthreads = 1;
    if (ops->ctx_create(&params, &fz_ctx) != GS_OK) FZ_BUG("cpu ctx_create failed");
    if (ops->stream_create(fz_ctx, &fz_stream) != GS_OK) FZ_BUG("cpu stream_create failed");
}

void fz_rng_seed(fz_rng_t *r, const uint8_t *data, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ data[i]) * 0x100000001b3ull;
    r->s = h ? h : 0x9e3779b97f4a7c15ull;
}

uint64_t fz_rng_next(fz_rng_t *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 2685821657736338717ull;
}

static int64_t fz_region(const gs_grid_t *g, uint64_t block)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    gs_grid_block_region(g, block, start, shape);
    return gs_region_size(g->ndim, shape);
}

int fz_generator_only(const gs_layer_t *l)
{
    return gs_layer_kind(l) == GS_LAYER_FUSED && !gs__fused_reads_chunks(l);
}

gs_status_t fz_block_inputs(const gs_layer_t *l, uint64_t block, int *n_p, int64_t *lens)
{
    if (block >= gs_layer_nblocks(l))
        return gs_error_set(GS_ERR_INVALID_PARAM, "block out of range");
    switch (gs_layer_kind(l)) {
    case GS_LAYER_FUSED: {
        gs__fres_t r;
        gs_status_t st = gs__fused_resolve(l, block, &r);
        if (st != GS_OK) return st;
        for (int32_t i = 0; i < r.ninputs; i++) lens[i] = r.in_len[i];
        *n_p = r.ninputs;
        return GS_OK;
    }
    case GS_LAYER_COMBINE: {
        int n = gs_layer_ninputs(l, block);
        int64_t nrec = fz_region(&l->grid, block / (uint64_t)l->u.c.ngroups);
        int64_t w = gs_redop_width((gs_redop_t)l->u.c.redop);
        if (n < 0 || n > GS_KERNEL_MAX_COMBINE)
            FZ_BUG("combine block %llu expects %d inputs", (unsigned long long)block, n);
        for (int i = 0; i < n; i++) lens[i] = nrec * w;
        *n_p = n;
        return GS_OK;
    }
    case GS_LAYER_LITERAL:
        *n_p = 0;
        return GS_OK;
    case GS_LAYER_COPY: {
        int n = gs__copy_ninputs(l, block);
        const int64_t *cl = gs__copy_in_lens(l, block);
        if (n < 0 || n > GS_KERNEL_MAX_PIECES)
            FZ_BUG("copy block %llu expects %d inputs", (unsigned long long)block, n);
        for (int i = 0; i < n; i++) lens[i] = cl[i];
        *n_p = n;
        return GS_OK;
    }
    case GS_LAYER_LINALG: {
        int n = gs__la_ninputs(l, block);
        const int64_t *ll = gs__la_in_lens(l, block);
        if (n < 0 || n > GS__LA_MAX_INPUTS)
            FZ_BUG("linalg block %llu expects %d inputs", (unsigned long long)block, n);
        for (int i = 0; i < n; i++) lens[i] = ll[i];
        *n_p = n;
        return GS_OK;
    }
    case GS_LAYER_SCAN: {
        /* in doubles, rounded up: a typed input whose bytes are not a multiple of 8 is then
         * refused by the instantiation (which checks the exact bytes) */
        const int n = gs__scan_ninputs(l, block);
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], slab = 1, size;
        gs_grid_block_region(&l->u.sc.src, gs__scan_src_block(l, block), start, shape);
        size = gs_region_size(l->grid.ndim, shape);
        for (int32_t a = 0; a < l->grid.ndim; a++)
            if (a != l->u.sc.axis) slab *= shape[a];
        lens[0] = (size * (int64_t)gs_dtype_size((gs_dtype_t)l->u.sc.in_dtype) + 7) / 8;
        if (n == 2) lens[1] = (slab * (int64_t)gs_dtype_size((gs_dtype_t)l->u.sc.out_dtype) + 7) / 8;
        *n_p = n;
        return GS_OK;
    }
    default:
        return gs_error_set(GS_ERR_UNSUPPORTED, "layer kind");
    }
}

int64_t fz_block_work(const gs_layer_t *l, uint64_t block)
{
    switch (gs_layer_kind(l)) {
    case GS_LAYER_COMBINE: {
        int n = gs_layer_ninputs(l, block);
        int64_t nrec = fz_region(&l->grid, block / (uint64_t)l->u.c.ngroups);
        return nrec * gs_redop_width((gs_redop_t)l->u.c.redop) * (n + 1);
    }
    case GS_LAYER_LINALG:
        return gs__la_block_work(l, block);
    default:
        return fz_region(&l->grid, block);
    }
}

gs_status_t fz_run_block(const gs_layer_t *l, uint64_t block, int ninputs,
                         const gs_chunk_ref_t *inputs, fz_budget_t *budget, double **out_p)
{
    const gs_chunkops_ops_t *ops = &gs_chunkops_cpu_ops;
    uint64_t out_nbytes;
    int64_t work;
    double *out;
    gs_ktask_t t;
    gs_status_t st;

    *out_p = NULL;
    if (block >= gs_layer_nblocks(l)) return gs_error_set(GS_ERR_INVALID_PARAM, "block out of range");
    out_nbytes = gs_layer_out_nbytes(l, block);
    work = fz_block_work(l, block);
    if ((int64_t)(out_nbytes / sizeof(double)) > work) work = (int64_t)(out_nbytes / sizeof(double));
    if (work < 1) work = 1;
    if (work > budget->left) return GS_INPROGRESS;
    budget->left -= work;

    out = gs_malloc((size_t)out_nbytes, "fuzz output");
    if (out == NULL) FZ_BUG("harness out of memory for %llu bytes", (unsigned long long)out_nbytes);
    st = gs_layer_instantiate(l, block, ninputs, inputs, out, &t);
    if (st == GS_OK) {
        st = gs_chunkops_run_ktask(ops, fz_ctx, fz_stream, &t);
        if (st == GS_OK) st = ops->sync(fz_ctx, fz_stream);
    }
    if (st != GS_OK) {
        gs_free(out);
        return st;
    }
    *out_p = out;
    return GS_OK;
}
