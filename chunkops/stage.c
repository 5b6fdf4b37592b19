/* Users' CPU kernels on backends that run none themselves (chunkops/stage.h): the inputs are
 * copied to host memory through the backend's copy_to_host, the CPU backend's forked-child
 * call runs on those copies, and the output goes back with copy_from_host. The stream is
 * synchronised around the call (the copies must have landed before the kernel reads them, and
 * the output must have left before its host copy is freed), so the calling thread blocks for
 * the whole task: the worker runs these tasks on its launcher thread (worker/launch.c). */
#include "chunkops/stage.h"
#include "chunkops/cpu/cpu.h"
#include "common/alloc.h"
#include "common/error.h"

#include <string.h>

/* Host copy of @a n elements of @a es bytes of backend memory @a src into a new buffer
 * (*host_p, owned by the caller on success). */
static gs_status_t gs__stage_down(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                  gs_chunkops_stream_h s, const double *src, int64_t n, size_t es,
                                  double **host_p)
{
    gs_status_t st;
    double *h = gs_malloc((size_t)(n > 0 ? n : 1) * (es > 0 ? es : sizeof(double)),
                          "staged kernel input");
    if (h == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "user kernel staging: no host memory for %lld "
                            "elements", (long long)n);
    if (n > 0 && (st = ops->copy_to_host(ctx, s, h, src, (size_t)n * es)) != GS_OK) {
        gs_free(h);
        return st;
    }
    *host_p = h;
    return GS_OK;
}

/* Copy host @a h (n elements of @a es bytes) to backend memory @a dst and wait for it. */
static gs_status_t gs__stage_up(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                gs_chunkops_stream_h s, double *dst, const double *h, int64_t n,
                                size_t es)
{
    gs_status_t st = GS_OK;
    if (n > 0) st = ops->copy_from_host(ctx, s, dst, h, (size_t)n * es);
    if (st == GS_OK) st = ops->sync(ctx, s);
    return st;
}

gs_status_t gs_chunkops_stage_user(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                   gs_chunkops_stream_h s, const gs_kuser_t *k)
{
    gs_block_t in[GS_KERNEL_MAX_USER_IN], out;
    double *hin[GS_KERNEL_MAX_USER_IN] = {NULL}, *hout = NULL;
    int64_t nout;
    size_t oes;
    gs_status_t st = GS_OK;
    if (ops == NULL || k == NULL || k->lib == NULL || k->sym == NULL || k->nin < 1 ||
        k->nin > GS_KERNEL_MAX_USER_IN || k->out.data == NULL || k->arg_len < 0 ||
        (k->arg_len > 0 && k->arg == NULL))
        return gs_error_set(GS_ERR_INVALID_PARAM, "staged user kernel: malformed kernel spec");
    for (int i = 0; i < k->nin; i++)
        if (k->in_len[i] < 0 || (k->in[i].data == NULL && k->in_len[i] > 0) ||
            gs_dtype_size((gs_dtype_t)k->in[i].dtype) == 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "staged user kernel: input %d has no data "
                                "or an unknown dtype", i);
    if ((oes = gs_dtype_size((gs_dtype_t)k->out.dtype)) == 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "staged user kernel: unknown output dtype %d",
                            (int)k->out.dtype);
    nout = gs_region_size(k->out.ndim, k->out.shape);
    for (int i = 0; i < k->nin && st == GS_OK; i++) {
        in[i] = k->in[i];
        st = gs__stage_down(ops, ctx, s, k->in[i].data, k->in_len[i],
                            gs_dtype_size((gs_dtype_t)k->in[i].dtype), &hin[i]);
        in[i].data = hin[i];
    }
    if (st == GS_OK) {
        hout = gs_malloc((size_t)(nout > 0 ? nout : 1) * oes, "staged kernel output");
        if (hout == NULL)
            st = gs_error_set(GS_ERR_NO_MEMORY, "user kernel %s: no host memory for a staged "
                              "output of %lld elements", k->sym, (long long)nout);
    }
    if (st == GS_OK) st = ops->sync(ctx, s);
    if (st == GS_OK) {
        out = k->out;
        out.data = hout;
        st = gs__cpu_user_call(k->lib, k->sym, in, k->nin, &out, k->arg);
    }
    if (st == GS_OK) st = gs__stage_up(ops, ctx, s, k->out.data, hout, nout, oes);
    for (int i = 0; i < k->nin; i++) gs_free(hin[i]);
    gs_free(hout);
    return st;
}

gs_status_t gs_chunkops_stage_stencil(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                      gs_chunkops_stream_h s, const gs_kstencil_t *k)
{
    gs_kstencil_t *h;
    double *host[GS_KERNEL_MAX_PIECES] = {NULL}, *hout = NULL;
    int nhost = 0;
    int64_t nout;
    gs_status_t st;
    if (ops == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "staged stencil: no backend");
    if ((st = gs_kstencil_validate(k)) != GS_OK) return st;
    if (k->user_lib == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "staged stencil: only users' kernels are "
                            "staged (this spec has weights)");
    h = gs_malloc(sizeof(*h), "staged stencil spec");
    if (h == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "staged stencil: no memory for a spec");
    *h = *k;
    nout = gs_region_size(k->ndim, k->shape);
    /* one host copy per source buffer (the pieces of one chunk share it) */
    for (int32_t i = 0; i < k->npieces && st == GS_OK; i++) {
        int32_t j = 0;
        while (j < i && k->pieces[j].src != k->pieces[i].src) j++;
        if (j < i) {
            h->pieces[i].src = h->pieces[j].src;
            continue;
        }
        int64_t len = k->pieces[i].src_len;
        for (int32_t m = i + 1; m < k->npieces; m++)
            if (k->pieces[m].src == k->pieces[i].src && k->pieces[m].src_len > len)
                len = k->pieces[m].src_len;
        st = gs__stage_down(ops, ctx, s, k->pieces[i].src, len, sizeof(double), &host[nhost]);
        if (st == GS_OK) h->pieces[i].src = host[nhost++];
    }
    if (st == GS_OK) {
        hout = gs_malloc((size_t)(nout > 0 ? nout : 1) * sizeof(double), "staged stencil output");
        if (hout == NULL)
            st = gs_error_set(GS_ERR_NO_MEMORY, "user kernel %s: no host memory for a staged "
                              "output of %lld elements", k->user_sym, (long long)nout);
    }
    if (st == GS_OK) st = ops->sync(ctx, s);
    if (st == GS_OK) {
        h->out = hout;
        st = gs__cpu_stencil_run(h);
    }
    if (st == GS_OK) st = gs__stage_up(ops, ctx, s, k->out, hout, nout, sizeof(double));
    for (int i = 0; i < nhost; i++) gs_free(host[i]);
    gs_free(hout);
    gs_free(h);
    return st;
}
