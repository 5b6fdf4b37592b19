/* gs_chunkops_run_ktask: submit one instantiated task to a backend. Kept apart from eval.c so
 * that users of this function do not pull in the task-graph evaluator. */
#include "chunkops/eval.h"
#include "chunkops/fileio.h"
#include "chunkops/stage.h"
#include "common/error.h"

#include <stdint.h>

gs_status_t gs_chunkops_run_ktask(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                  gs_chunkops_stream_h s, const gs_ktask_t *t)
{
    if (ops == NULL || t == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "run_ktask: NULL backend or task");
    switch (t->kind) {
    case GS_KTASK_FUSED: return ops->fused(ctx, s, &t->u.fused);
    case GS_KTASK_COMBINE: return ops->combine(ctx, s, &t->u.combine);
    case GS_KTASK_COPY: return ops->copy(ctx, s, &t->u.copy);
    case GS_KTASK_LINALG:
        if (ops->linalg == NULL)
            return gs_error_set(GS_ERR_UNSUPPORTED, "backend %s has no linear algebra", ops->name);
        return ops->linalg(ctx, s, &t->u.linalg);
    case GS_KTASK_STENCIL:
        if (ops->stencil == NULL)
            return gs_error_set(GS_ERR_UNSUPPORTED, "backend %s has no stencil kernel", ops->name);
        /* users' CPU kernels: staged through host memory where the backend has no user op */
        if (t->u.stencil.user_lib != NULL && ops->user == NULL)
            return gs_chunkops_stage_stencil(ops, ctx, s, &t->u.stencil);
        return ops->stencil(ctx, s, &t->u.stencil);
    case GS_KTASK_USER:
        if (t->u.user.cuda_src != NULL) {
            if (ops->cuda_user == NULL)
                return gs_error_set(GS_ERR_UNSUPPORTED, "cuda kernel %s: backend %s runs no "
                                    "CUDA kernels (needs a CUDA worker)",
                                    t->u.user.sym != NULL ? t->u.user.sym : "(unnamed)",
                                    ops->name);
            return ops->cuda_user(ctx, s, &t->u.user);
        }
        if (ops->user == NULL) return gs_chunkops_stage_user(ops, ctx, s, &t->u.user);
        return ops->user(ctx, s, &t->u.user);
    case GS_KTASK_SCAN:
        if (ops->scan == NULL)
            return gs_error_set(GS_ERR_UNSUPPORTED, "backend %s has no scan kernel", ops->name);
        return ops->scan(ctx, s, &t->u.scan);
    case GS_KTASK_HOST_DATA:
        if (t->u.host.len < 0 || (uint64_t)t->u.host.len > SIZE_MAX / sizeof(double))
            return gs_error_set(GS_ERR_INVALID_PARAM, "run_ktask: host data length %lld invalid",
                                (long long)t->u.host.len);
        if (t->u.host.len > 0 && (t->u.host.data == NULL || t->u.host.out == NULL))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "run_ktask: host data task without %s",
                                t->u.host.data == NULL ? "data" : "destination (u.host.out)");
        return ops->copy_from_host(ctx, s, t->u.host.out, t->u.host.data,
                                   (size_t)t->u.host.len * sizeof(double));
    case GS_KTASK_FILE_READ: case GS_KTASK_FILE_WRITE: case GS_KTASK_FILE_COMMIT:
        return gs_chunkops_file_run(ops, ctx, s, t->kind, &t->u.file);
    default:
        return gs_error_set(GS_ERR_INVALID_PARAM, "run_ktask: unknown task kind %d", (int)t->kind);
    }
}
