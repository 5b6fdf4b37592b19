/* gs_chunkops_run_ktask: submit one instantiated task to a backend. Kept apart from eval.c so
 * that users of this function do not pull in the task-graph evaluator. */
#include "chunkops/eval.h"
#include "chunkops/fileio.h"
#include "chunkops/stage.h"
#include "common/alloc.h"
#include "common/error.h"

#include <stdint.h>
#include <string.h>

/* A user kernel (USER task, or the middle of a MAPFUSED one): CUDA source on backends with a
 * cuda_user op, CPU kernels on the backend's user op or staged through host memory. */
static gs_status_t gs__run_user(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                gs_chunkops_stream_h s, const gs_kuser_t *k)
{
    if (k->cuda_src != NULL) {
        if (ops->cuda_user == NULL)
            return gs_error_set(GS_ERR_UNSUPPORTED, "cuda kernel %s: backend %s runs no "
                                "CUDA kernels (needs a CUDA worker)",
                                k->sym != NULL ? k->sym : "(unnamed)", ops->name);
        return ops->cuda_user(ctx, s, k);
    }
    if (ops->user == NULL) return gs_chunkops_stage_user(ops, ctx, s, k);
    return ops->user(ctx, s, k);
}

/* graph/kernel.h gs_kmapfused_t: producers into temporary blocks, the user kernel, the
 * consumer from its output; then the stream is synchronised and the temporaries freed. */
static gs_status_t gs__run_mapfused(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                    gs_chunkops_stream_h s, const gs_kmapfused_t *t)
{
    gs_kmapfused_t *k;
    void *tmp[GS_KERNEL_MAX_USER_IN + 1] = {NULL};
    int64_t nel;
    gs_status_t st = GS_OK, sst;
    int launched = 0;
    if (t->user.nin < 1 || t->user.nin > GS_KERNEL_MAX_USER_IN || t->user.out.ndim < 0 ||
        t->user.out.ndim > GS_MAX_NDIM || (!t->has_post && t->user.out.data == NULL))
        return gs_error_set(GS_ERR_INVALID_PARAM, "malformed fused user task: bad kernel spec");
    for (int i = 0; i < t->user.nin; i++)
        if (gs_dtype_size((gs_dtype_t)t->user.in[i].dtype) == 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "malformed fused user task: input %d has "
                                "dtype %d", i, (int)t->user.in[i].dtype);
    if (gs_dtype_size((gs_dtype_t)t->user.out.dtype) == 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "malformed fused user task: output dtype %d",
                            (int)t->user.out.dtype);
    k = gs_malloc(sizeof(*k), "fused user task");
    if (k == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a fused user task");
    *k = *t;
    /* every temporary block has the block's elements, of its own dtype (input k: the
     * producer's store dtype, which the graph checked is the kernel's in[k].dtype) */
    nel = gs_region_size(k->user.out.ndim, k->user.out.shape);
    for (int i = 0; i <= k->user.nin && st == GS_OK; i++) {
        const gs_block_t *b = i < k->user.nin ? &k->user.in[i] : &k->user.out;
        size_t nbytes = (size_t)nel * gs_dtype_size((gs_dtype_t)b->dtype);
        if (i < k->user.nin ? !k->has_pre[i] : !k->has_post) continue;
        st = ops->mem_alloc(ctx, nbytes > 0 ? nbytes : sizeof(double), &tmp[i]);
    }
    for (int i = 0; i < k->user.nin && st == GS_OK; i++) {
        if (!k->has_pre[i]) continue;
        if (gs_region_size(k->pre[i].ndim, k->pre[i].shape) != nel ||
            k->pre[i].out_dtype != k->user.in[i].dtype) {
            st = gs_error_set(GS_ERR_INVALID_PARAM, "malformed fused user task: producer %d "
                              "is not of the kernel's block shape and input dtype", i);
            break;
        }
        k->pre[i].out = tmp[i];
        k->user.in[i].data = tmp[i];
        k->user.in_len[i] = nel;
        launched = 1;
        st = ops->fused(ctx, s, &k->pre[i]);
    }
    if (st == GS_OK && k->has_post) {
        k->user.out.data = tmp[k->user.nin];
        for (int32_t q = 0; q < k->post.nleaves && q < 32; q++)
            if (k->post_user_leaves & (1u << q)) {
                k->post.leaves[q].data = tmp[k->user.nin];
                k->post.leaves[q].data_len = nel;
            }
    }
    for (int i = 0; i < k->user.nin && st == GS_OK; i++)
        if (k->user.in[i].data == NULL)
            st = gs_error_set(GS_ERR_INVALID_PARAM, "malformed fused user task: input %d of "
                              "the kernel has no data", i);
    if (st == GS_OK) {
        launched = 1;
        st = gs__run_user(ops, ctx, s, &k->user);
    }
    if (st == GS_OK && k->has_post) st = ops->fused(ctx, s, &k->post);
    /* the temporaries may be freed only once every launch that reads them is done */
    if (launched && (sst = ops->sync(ctx, s)) != GS_OK && st == GS_OK) st = sst;
    for (int i = 0; i <= GS_KERNEL_MAX_USER_IN; i++)
        if (tmp[i] != NULL) ops->mem_free(ctx, tmp[i]);
    gs_free(k);
    return st;
}

/* map_overlap with a CUDA C++ kernel (graph/kernel.h gs_kstencil_t.user_cuda_src): the padded
 * block is assembled in backend memory by the backend's own STENCIL op, run as a stencil of
 * radius 0 and weight 1 over the padded shape whose every element is a "keep" element (its
 * piece's value or the constant, copied exactly: the halo assembly of the built-in stencil,
 * bit for bit what the CPU path hands its kernel), then the kernel runs on it (nin 1, in[0]
 * the padded block starting at start - radius, out the chunk); the stream is synchronised
 * and the padded block freed, as for a MAPFUSED task. */
static gs_status_t gs__run_overlap_cuda(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                        gs_chunkops_stream_h s, const gs_kstencil_t *k)
{
    static const double one = 1.0;
    gs_kstencil_t *pad;
    gs_kuser_t u;
    void *tmp = NULL;
    int64_t np = 1;
    gs_status_t st, sst;
    if (ops->cuda_user == NULL)
        return gs_error_set(GS_ERR_UNSUPPORTED, "cuda kernel %s: backend %s runs no CUDA "
                            "kernels (map_overlap with CUDA source needs a CUDA worker)",
                            k->user_sym != NULL ? k->user_sym : "(unnamed)", ops->name);
    if ((st = gs_kstencil_validate(k)) != GS_OK) return st;
    pad = gs_malloc(sizeof(*pad), "map_overlap padding spec");
    if (pad == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a map_overlap task");
    *pad = *k;
    memset(&u, 0, sizeof(u));
    u.in[0].ndim = u.out.ndim = k->ndim;
    for (int32_t j = 0; j < k->ndim; j++) {
        pad->shape[j] = k->shape[j] + 2 * (int64_t)k->radius[j];
        pad->radius[j] = 0;
        pad->keep_lo[j] = pad->shape[j];
        pad->keep_hi[j] = 0;
        pad->start[j] = k->start[j] - k->radius[j];
        u.in[0].shape[j] = pad->shape[j];
        u.in[0].start[j] = pad->start[j];
        u.out.shape[j] = k->shape[j];
        u.out.start[j] = k->start[j];
        np *= pad->shape[j];
    }
    pad->nweights = 1;
    pad->weights = &one;
    pad->user_lib = pad->user_sym = pad->user_cuda_src = NULL;
    pad->user_arg = NULL;
    pad->user_arg_len = 0;
    st = ops->mem_alloc(ctx, (size_t)(np > 0 ? np : 1) * sizeof(double), &tmp);
    if (st == GS_OK) {
        pad->out = tmp;
        st = ops->stencil(ctx, s, pad);
    }
    if (st == GS_OK) {
        u.sym = k->user_sym;
        u.cuda_src = k->user_cuda_src;
        u.arg = k->user_arg;
        u.arg_len = k->user_arg_len;
        u.nin = 1;
        u.in[0].data = tmp;
        u.in_len[0] = np;
        u.out.data = k->out;
        st = ops->cuda_user(ctx, s, &u);
    }
    /* the padded block may be freed only once the kernel that reads it is done */
    if (tmp != NULL) {
        if ((sst = ops->sync(ctx, s)) != GS_OK && st == GS_OK) st = sst;
        ops->mem_free(ctx, tmp);
    }
    gs_free(pad);
    return st;
}

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
        if (t->u.stencil.user_cuda_src != NULL)
            return gs__run_overlap_cuda(ops, ctx, s, &t->u.stencil);
        /* users' CPU kernels: staged through host memory where the backend has no user op */
        if (t->u.stencil.user_lib != NULL && ops->user == NULL)
            return gs_chunkops_stage_stencil(ops, ctx, s, &t->u.stencil);
        return ops->stencil(ctx, s, &t->u.stencil);
    case GS_KTASK_USER: return gs__run_user(ops, ctx, s, &t->u.user);
    case GS_KTASK_MAPFUSED: return gs__run_mapfused(ops, ctx, s, &t->u.mapfused);
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
