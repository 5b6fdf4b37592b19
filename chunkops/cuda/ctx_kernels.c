/* CUDA backend: the kernels' entry points of the ops table (fused, with typed reductions;
 * combine, copy, stencil, linalg): validate the spec, plan it (plan.c, stencil.c) and enqueue
 * it on the stream through the plain-C launchers of fused.cu / misc.cu / stencil.cu /
 * linalg.c. Enqueue failures are remembered on the stream (gs__cuda_fail). */
#include "chunkops/cuda/ctx_int.h"
#include "chunkops/cuda/linalg.h"
#include "chunkops/cuda/stencil.h"
#include "common/alloc.h"

#include <string.h>

/* ---- kernels ---- */

/* A typed REDUCE (graph/kernel.h): integer records run in one pass (k_typed_ireduce); of the
 * others (the program ends in float64 values) a whole-region SUM runs
 * in one pass (k_typed_sum, fused_typed.cu); otherwise the typed kernel stores the values as float64 into the stream's staging buffer, then the float64 reduction
 * kernels reduce that buffer (a one-leaf program), so records equal the CPU backend's up to
 * the float64 kernels' own summation order. Work on one stream runs in order: one buffer per
 * stream, grown when a larger region comes (cudaFree waits for the work that used it). */
static gs_status_t gs__cuda_fused_typed_reduce(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                               const gs_kfused_t *k)
{
    gs_status_t st;
    gs_kfused_t ks, kr;
    gs__cuda_fplan_t plan;
    const int64_t size = gs_region_size(k->ndim, k->shape);
    const size_t need = (size_t)(size > 0 ? size : 1) * sizeof(double);
    /* a whole-region SUM (the seed's float32 sum) in one pass, without the staging buffer */
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    /* integer records: exact int64 atomics in one pass */
    if (k->out_dtype == GS_DTYPE_INT64)
        return gs__cuda_fail(stream, gs__cuda_launch_typed_ireduce(&ctx->dev, stream->s, k));
    if (gs__cuda_launch_typed_sum(&ctx->dev, stream->s, k, stream->scratch.partials,
                                  stream->scratch.npartials, stream->scratch.counter, &st))
        return gs__cuda_fail(stream, st);
    if (need > stream->typed_cap) {
        void *m = NULL;
        cudaError_t e;
        if (stream->typed_mem != NULL && (e = cudaFree(stream->typed_mem)) != cudaSuccess)
            return gs__cuda_fail(stream, gs__cuda_error((int)e, "cudaFree(typed staging)"));
        stream->typed_mem = NULL;
        stream->typed_cap = 0;
        if ((e = cudaMalloc(&m, need)) != cudaSuccess) {
            (void)cudaGetLastError();
            return gs_error_set(GS_ERR_NO_DEVICE_MEMORY,
                                "cuda fused kernel: no device memory for %zu bytes of typed "
                                "reduction staging", need);
        }
        stream->typed_mem = m;
        stream->typed_cap = need;
    }
    ks = *k;
    ks.terminal = GS_TERM_STORE;
    ks.out_dtype = GS_DTYPE_FLOAT64;
    ks.out = (double *)stream->typed_mem;
    memset(&kr, 0, sizeof(kr));
    kr.ndim = k->ndim;
    kr.nleaves = 1;
    kr.leaves[0].kind = GS_LEAF_CHUNK;
    kr.leaves[0].data = (const double *)stream->typed_mem;
    kr.leaves[0].data_len = size;
    for (int64_t j = k->ndim - 1, rs = 1; j >= 0; j--) {
        kr.shape[j] = k->shape[j];
        kr.leaves[0].stride[j] = rs;
        rs *= k->shape[j];
    }
    kr.nprog = 1;
    kr.prog[0].op = GS_OP_LEAF;
    kr.terminal = GS_TERM_REDUCE;
    kr.redop = k->redop;
    kr.red_axis = k->red_axis;
    kr.idx_base = k->idx_base;
    memcpy(kr.idx_stride, k->idx_stride, sizeof(kr.idx_stride));
    kr.out = k->out;
    if ((st = gs_kfused_validate(&kr)) != GS_OK) return st;
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    if (size > 0 && (st = gs__cuda_launch_typed(&ctx->dev, stream->s, &ks)) != GS_OK)
        return gs__cuda_fail(stream, st);
    gs__cuda_fplan_build(&ctx->dev, &stream->scratch, &kr, &plan);
    return gs__cuda_fail(stream, gs__cuda_launch_fused(stream->s, &plan));
}

gs_status_t gs__cuda_fused(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                           const gs_kfused_t *k)
{
    gs_status_t st;
    gs__cuda_fplan_t plan;
    GS__CHECK_CTX_STREAM(ctx, stream, "fused");
    if ((st = gs_kfused_validate(k)) != GS_OK) return st;
    gs_kfused_t ku;
    if (gs_kfused_dtype_other(k) != GS_DTYPE_FLOAT64 && gs_kfused_untype(k, &ku)) {
        /* comparisons cast back to float64: the tuned float64 kernels run it */
        if ((st = gs_kfused_validate(&ku)) != GS_OK) return st;
        gs__cuda_fplan_build(&ctx->dev, &stream->scratch, &ku, &plan);
        if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
        return gs__cuda_fail(stream, gs__cuda_launch_fused(stream->s, &plan));
    }
    if (gs_kfused_dtype_other(k) != GS_DTYPE_FLOAT64) {
        /* typed programs: the element-wise kernel of fused_typed.cu */
        if (k->terminal != GS_TERM_STORE) return gs__cuda_fused_typed_reduce(ctx, stream, k);
        if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
        return gs__cuda_fail(stream, gs__cuda_launch_typed(&ctx->dev, stream->s, k));
    }
    gs__cuda_fplan_build(&ctx->dev, &stream->scratch, k, &plan);
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    return gs__cuda_fail(stream, gs__cuda_launch_fused(stream->s, &plan));
}

gs_status_t gs__cuda_combine(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                             const gs_kcombine_t *k)
{
    gs_status_t st;
    GS__CHECK_CTX_STREAM(ctx, stream, "combine");
    if ((st = gs_kcombine_validate(k)) != GS_OK) return st;
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    return gs__cuda_fail(stream, gs__cuda_launch_combine(&ctx->dev, stream->s, k));
}

gs_status_t gs__cuda_copy(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                          const gs_kcopy_t *k)
{
    gs_status_t st;
    gs__cuda_cplan_t plan;
    GS__CHECK_CTX_STREAM(ctx, stream, "copy");
    if ((st = gs_kcopy_validate(k)) != GS_OK) return st;
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    int64_t T = (int64_t)(ctx->dev.num_sms > 0 ? ctx->dev.num_sms : 1) *
                (ctx->dev.occ_copy > 0 ? ctx->dev.occ_copy : 1) * 4;
    int32_t i = 0;
    while (i < k->npieces) {
        int64_t units = 0;
        memset(&plan, 0, offsetof(gs__cuda_cplan_t, pieces));
        plan.out = k->out;
        plan.esize = k->elem_size > 0 ? k->elem_size : (int32_t)sizeof(double);
        while (i < k->npieces && plan.npieces < GS__CUDA_COPY_GROUP) {
            gs__cuda_cpiece_t *pc = &plan.pieces[plan.npieces];
            if (gs__cuda_cpiece_build(k, i++, pc)) {
                if (pc->units > units) units = pc->units;
                plan.npieces++;
            }
        }
        if (plan.npieces == 0) break;
        plan.grid_x = (uint32_t)(units < T ? units : T);
        if ((st = gs__cuda_launch_copy(stream->s, &plan)) != GS_OK)
            return gs__cuda_fail(stream, st);
    }
    return GS_OK;
}

gs_status_t gs__cuda_stencil(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                             const gs_kstencil_t *k)
{
    gs_status_t st;
    gs__cuda_splan_t *plan;
    GS__CHECK_CTX_STREAM(ctx, stream, "stencil");
    if ((st = gs_kstencil_validate(k)) != GS_OK) return st;
    if (k->user_lib != NULL || k->user_cuda_src != NULL)   /* those: gs_chunkops_run_ktask */
        return gs_error_set(GS_ERR_UNSUPPORTED, "cuda stencil: user kernel %s runs through "
                            "gs_chunkops_run_ktask", k->user_sym);
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    plan = gs_malloc(sizeof(*plan), "cuda stencil plan");
    if (plan == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cuda stencil: no memory for a plan");
    /* the launch copies the plan (a kernel parameter): it may go when this returns */
    if ((st = gs__cuda_splan_build(k, plan)) != GS_OK) goto free_plan;   /* nothing enqueued */
    if ((st = gs__cuda_launch_stencil(stream->s, plan)) != GS_OK && st != GS_ERR_UNSUPPORTED)
        gs__cuda_fail(stream, st);
free_plan:
    gs_free(plan);
    return st;
}

gs_status_t gs__cuda_linalg(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                            const gs_klinalg_t *k)
{
    gs_status_t st;
    GS__CHECK_CTX_STREAM(ctx, stream, "linalg");
    if ((st = gs_klinalg_validate(k)) != GS_OK) return st;
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    return gs__cuda_fail(stream, gs__cuda_linalg_run(&stream->la, stream->s, &ctx->arena,
                                                     &stream->late_err, k));
}
