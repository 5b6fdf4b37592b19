/* CUDA backend: settings and benchmark helpers: the comparison knobs (GS_CUDA_FLAT and
 * GS_CUDA_TTILE at context creation, gs_cuda_set_flat_walk / gs_cuda_set_transpose_tiles
 * after it), the device description and the event timers (cuda_backend.h). */
#include "chunkops/cuda/ctx_int.h"
#include "common/alloc.h"

#include <stdlib.h>
#include <string.h>

void gs__cuda_settings_from_env(gs__cuda_dev_t *dev)
{
    const char *flat = getenv("GS_CUDA_FLAT"); /* "0": the tile kernels only (comparisons) */
    dev->no_flat = flat != NULL && strcmp(flat, "0") == 0;
    const char *ttile = getenv("GS_CUDA_TTILE"); /* "0": no transposed tiles (comparisons) */
    dev->no_ttile = ttile != NULL && strcmp(ttile, "0") == 0;
}

gs_status_t gs_cuda_set_flat_walk(gs_chunkops_ctx_h ctx, int enable)
{
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cuda set_flat_walk: ctx is NULL");
    ctx->dev.no_flat = !enable;
    return GS_OK;
}

gs_status_t gs_cuda_set_transpose_tiles(gs_chunkops_ctx_h ctx, int enable)
{
    if (ctx == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda set_transpose_tiles: ctx is NULL");
    gs__cuda_dev_set_ttile(&ctx->dev, enable);
    return GS_OK;
}

/* ---- tools ---- */

gs_status_t gs_cuda_device_describe(gs_chunkops_ctx_h ctx, char *name, size_t len, int *num_sms_p)
{
    struct cudaDeviceProp prop;
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cuda describe: NULL context");
    GS__CUDA_CALL(cudaGetDeviceProperties(&prop, ctx->device));
    if (name != NULL && len > 0) {
        strncpy(name, prop.name, len - 1);
        name[len - 1] = '\0';
    }
    if (num_sms_p != NULL) *num_sms_p = ctx->dev.num_sms;
    return GS_OK;
}

struct gs_cuda_timer {
    gs_chunkops_ctx_h ctx;
    int n;
    cudaEvent_t ev[];
};

gs_status_t gs_cuda_timer_create(gs_chunkops_ctx_h ctx, int nmarks, gs_cuda_timer_h *timer_p)
{
    gs_status_t st;
    if (ctx == NULL || timer_p == NULL || nmarks < 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda timer_create: bad arguments");
    if ((st = gs__cuda_use(ctx)) != GS_OK) return st;
    struct gs_cuda_timer *t =
        gs_calloc(1, sizeof(*t) + (size_t)nmarks * sizeof(cudaEvent_t), "cuda timer");
    if (t == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cuda timer_create: out of memory");
    t->ctx = ctx;
    for (t->n = 0; t->n < nmarks; t->n++) {
        cudaError_t e = cudaEventCreate(&t->ev[t->n]);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = gs__cuda_error((int)e, "cudaEventCreate");
            gs_cuda_timer_destroy(t);
            return st;
        }
    }
    *timer_p = t;
    return GS_OK;
}

void gs_cuda_timer_destroy(gs_cuda_timer_h t)
{
    if (t == NULL) return;
    (void)gs__cuda_use(t->ctx);
    for (int i = 0; i < t->n; i++) cudaEventDestroy(t->ev[i]);
    gs_free(t);
}

gs_status_t gs_cuda_timer_mark(gs_cuda_timer_h t, gs_chunkops_stream_h stream, int i)
{
    gs_status_t st;
    if (t == NULL || stream == NULL || i < 0 || i >= t->n)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda timer_mark: bad arguments");
    if ((st = gs__cuda_use(t->ctx)) != GS_OK) return st;
    GS__CUDA_CALL(cudaEventRecord(t->ev[i], stream->s));
    return GS_OK;
}

gs_status_t gs_cuda_timer_elapsed_ms(gs_cuda_timer_h t, int i, int j, double *ms_p)
{
    gs_status_t st;
    float ms = 0.0f;
    if (t == NULL || ms_p == NULL || i < 0 || i >= t->n || j < 0 || j >= t->n)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda timer_elapsed: bad arguments");
    if ((st = gs__cuda_use(t->ctx)) != GS_OK) return st;
    GS__CUDA_CALL(cudaEventSynchronize(t->ev[j]));
    GS__CUDA_CALL(cudaEventElapsedTime(&ms, t->ev[i], t->ev[j]));
    *ms_p = ms;
    return GS_OK;
}
