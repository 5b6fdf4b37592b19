/* CUDA backend: context, device arena, streams, memory, host copies, tier moves through
 * page-locked staging (to_host / to_device), notify, sync, health, IPC, page-locked host
 * memory, and the backend's ops table. Plain C over the CUDA runtime API. The kernels' entry
 * points are in ctx_kernels.c; settings, timers and the device description in ctx_tools.c;
 * file reads in cufile.c; the structs they share in ctx_int.h. */
#include "chunkops/cuda/cuda_backend.h"
#include "chunkops/cuda/ctx_int.h"
#include "chunkops/cuda/linalg.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define GS__CUDA_SCRATCH_BYTES ((size_t)4 << 20)    /* per stream: partials + ticket */
#define GS__CUDA_RESERVE_BYTES ((size_t)256 << 20)  /* left free for scratch and the runtime */
#define GS__CUDA_DEFAULT_PERCENT 85
#define GS__CUDA_STAGE_BYTES ((size_t)32 << 20)     /* per stream doing tier moves */

int gs__cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

/* Make the context's device current on the calling thread (cheap when it already is). */
gs_status_t gs__cuda_use(gs_chunkops_ctx_h ctx)
{
    int cur = -1;
    /* no check of a recorded loss here: the cleanup calls (sync, destroy) must still reach
     * CUDA, and every call that enqueues work gets the sticky error from CUDA itself */
    if (cudaGetDevice(&cur) == cudaSuccess && cur == ctx->device) return GS_OK;
    GS__CUDA_CALL(cudaSetDevice(ctx->device));
    return GS_OK;
}

/* Remember the first enqueue failure of a stream for its next notify()/sync(). */
gs_status_t gs__cuda_fail(gs_chunkops_stream_h stream, gs_status_t st)
{
    int expected = GS_OK;
    if (st != GS_OK) atomic_compare_exchange_strong(&stream->pending, &expected, (int)st);
    return st;
}

/* ---- context ---- */

static gs_status_t gs__cuda_ctx_create(const gs_chunkops_params_t *params, gs_chunkops_ctx_h *ctx_p)
{
    gs_status_t st;
    cudaError_t e;
    size_t free_b = 0, total_b = 0, size;
    int device = params != NULL ? params->device : 0;

    if (ctx_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cuda ctx_create: ctx_p is NULL");
    if (device < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda ctx_create: negative device %d", device);
    int ndev = gs__cuda_device_count();
    if (device >= ndev)
        return gs_error_set(GS_ERR_NOT_FOUND, "cuda ctx_create: no CUDA device %d (%d present)",
                            device, ndev);

    struct gs_chunkops_ctx *ctx = gs_calloc(1, sizeof(*ctx), "cuda ctx");
    if (ctx == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cuda ctx_create: out of memory");
    ctx->device = device;
    ctx->dev.device = device;
    ctx->dev.file_path = params != NULL ? params->file_path : GS_FILE_PATH_AUTO;
    if (pthread_mutex_init(&ctx->lock, NULL) != 0) {
        st = gs_error_set(GS_ERR_NO_RESOURCE, "cuda ctx_create: pthread_mutex_init failed");
        goto err_free;
    }
    if ((st = gs__cuda_pincache_init(&ctx->pins)) != GS_OK) {
        pthread_mutex_destroy(&ctx->lock);
        goto err_free;
    }
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        st = gs__cuda_error((int)e, "cudaSetDevice");
        goto err_lock;
    }
    if ((e = cudaDeviceGetAttribute(&ctx->dev.num_sms, cudaDevAttrMultiProcessorCount, device)) !=
        cudaSuccess) {
        st = gs__cuda_error((int)e, "cudaDeviceGetAttribute(MultiProcessorCount)");
        goto err_lock;
    }
    if ((st = gs__cuda_kernels_init(&ctx->dev)) != GS_OK) goto err_lock;
    gs__cuda_settings_from_env(&ctx->dev);
    if ((e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) {
        st = gs__cuda_error((int)e, "cudaMemGetInfo");
        goto err_lock;
    }
    if (params != NULL && params->memory_limit != 0) {
        size = params->memory_limit;
        if (size > free_b) {
            st = gs_error_set(GS_ERR_NO_DEVICE_MEMORY,
                              "cuda ctx_create: memory_limit %zu exceeds the %zu bytes free on "
                              "device %d",
                              size, free_b, device);
            goto err_lock;
        }
    } else {
        size = free_b / 100 * GS__CUDA_DEFAULT_PERCENT;
        size = size > GS__CUDA_RESERVE_BYTES ? size - GS__CUDA_RESERVE_BYTES : free_b / 2;
        size &= ~(((size_t)2 << 20) - 1);
        if (size == 0) {
            st = gs_error_set(GS_ERR_NO_DEVICE_MEMORY,
                              "cuda ctx_create: only %zu bytes free on device %d", free_b, device);
            goto err_lock;
        }
    }
    size = (size + GS__ARENA_UNIT - 1) / GS__ARENA_UNIT * GS__ARENA_UNIT;
    if ((e = cudaMalloc(&ctx->arena_mem, size)) != cudaSuccess) {
        (void)cudaGetLastError();
        ctx->arena_mem = NULL;
        if (e == cudaErrorMemoryAllocation)
            st = gs_error_set(GS_ERR_NO_DEVICE_MEMORY,
                              "cuda ctx_create: cudaMalloc of a %zu-byte arena failed on device %d "
                              "(%zu bytes free)",
                              size, device, free_b);
        else
            st = gs__cuda_error((int)e, "cudaMalloc(arena)");
        goto err_lock;
    }
    if ((st = gs__cuda_arena_init(&ctx->arena, (uintptr_t)ctx->arena_mem, size)) != GS_OK)
        goto err_mem;
    ctx->arena_size = size;
    GS_LOG_DEBUG("cuda context on device %d: %d SMs, arena %zu bytes (%zu free of %zu)", device,
                 ctx->dev.num_sms, size, free_b, total_b);
    *ctx_p = ctx;
    return GS_OK;

err_mem:
    cudaFree(ctx->arena_mem);
err_lock:
    gs__cuda_pincache_destroy(&ctx->pins);
    pthread_mutex_destroy(&ctx->lock);
err_free:
    gs_free(ctx);
    return st;
}

static void gs__cuda_stream_release(struct gs_chunkops_stream *s);

static void gs__cuda_ctx_destroy(gs_chunkops_ctx_h ctx)
{
    size_t used = 0, nallocs = 0;
    if (ctx == NULL) return;
    if (gs__cuda_use(ctx) != GS_OK)
        GS_LOG_ERROR("cuda ctx_destroy: cannot select device %d: %s", ctx->device, gs_last_error());
    pthread_mutex_lock(&ctx->lock);
    if (ctx->nstreams != 0)
        GS_LOG_WARN("cuda chunkops context destroyed with %d live streams", ctx->nstreams);
    while (ctx->streams != NULL) {
        struct gs_chunkops_stream *s = ctx->streams;
        ctx->streams = s->next;
        gs__cuda_stream_release(s);
    }
    pthread_mutex_unlock(&ctx->lock);
    gs__cuda_arena_stats(&ctx->arena, &used, NULL, &nallocs, NULL);
    if (nallocs != 0)
        GS_LOG_WARN("cuda chunkops context destroyed with %zu live allocations (%zu bytes)",
                    nallocs, used);
    gs__cuda_arena_cleanup(&ctx->arena);
    cudaError_t e = cudaFree(ctx->arena_mem); /* waits for outstanding work */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        GS_LOG_ERROR("cuda ctx_destroy: cudaFree(arena) failed: %s", cudaGetErrorString(e));
    }
    gs__cuda_pincache_destroy(&ctx->pins);
    pthread_mutex_destroy(&ctx->lock);
    gs_free(ctx);
}

/* ---- streams ---- */

static gs_status_t gs__cuda_stream_create(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h *stream_p)
{
    gs_status_t st;
    cudaError_t e;
    if (ctx == NULL || stream_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda stream_create: NULL argument");
    if ((st = gs__cuda_use(ctx)) != GS_OK) return st;
    struct gs_chunkops_stream *s = gs_calloc(1, sizeof(*s), "cuda stream");
    if (s == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cuda stream_create: out of memory");
    s->ctx = ctx;
    atomic_init(&s->pending, GS_OK);
    atomic_init(&s->late_err, GS_OK);
    if (pthread_mutex_init(&s->note_lock, NULL) != 0) {
        st = gs_error_set(GS_ERR_NO_RESOURCE, "cuda stream_create: pthread_mutex_init failed");
        goto err_free;
    }
    if ((e = cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking)) != cudaSuccess) {
        (void)cudaGetLastError();
        st = gs__cuda_error((int)e, "cudaStreamCreateWithFlags");
        goto err_lock;
    }
    if ((e = cudaMalloc(&s->scratch_mem, GS__CUDA_SCRATCH_BYTES)) != cudaSuccess) {
        (void)cudaGetLastError();
        s->scratch_mem = NULL;
        st = e == cudaErrorMemoryAllocation
                 ? gs_error_set(GS_ERR_NO_DEVICE_MEMORY,
                                "cuda stream_create: no device memory for the %zu-byte scratch",
                                GS__CUDA_SCRATCH_BYTES)
                 : gs__cuda_error((int)e, "cudaMalloc(stream scratch)");
        goto err_stream;
    }
    if ((e = cudaMemsetAsync(s->scratch_mem, 0, GS__ARENA_UNIT, s->s)) != cudaSuccess) {
        (void)cudaGetLastError();
        st = gs__cuda_error((int)e, "cudaMemsetAsync(stream scratch)");
        goto err_scratch;
    }
    s->scratch.counter = (unsigned int *)s->scratch_mem;
    s->scratch.partials = (double *)((char *)s->scratch_mem + GS__ARENA_UNIT);
    s->scratch.npartials = (GS__CUDA_SCRATCH_BYTES - GS__ARENA_UNIT) / sizeof(double);

    pthread_mutex_lock(&ctx->lock);
    s->next = ctx->streams;
    if (s->next != NULL) s->next->prev = s;
    ctx->streams = s;
    ctx->nstreams++;
    pthread_mutex_unlock(&ctx->lock);
    *stream_p = s;
    return GS_OK;

err_scratch:
    cudaFree(s->scratch_mem);
err_stream:
    cudaStreamDestroy(s->s);
err_lock:
    pthread_mutex_destroy(&s->note_lock);
err_free:
    gs_free(s);
    return st;
}

/* Wait for the stream's work and callbacks, then free it (caller unlinked it). */
static void gs__cuda_stream_release(struct gs_chunkops_stream *s)
{
    cudaError_t e = cudaStreamSynchronize(s->s);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        GS_LOG_ERROR("cuda stream_destroy: work failed: %s", cudaGetErrorString(e));
    }
    gs__cuda_la_destroy(s->la);
    if (s->stage != NULL && (e = cudaFreeHost(s->stage)) != cudaSuccess) (void)cudaGetLastError();
    if ((e = cudaStreamDestroy(s->s)) != cudaSuccess) (void)cudaGetLastError();
    if ((e = cudaFree(s->scratch_mem)) != cudaSuccess) (void)cudaGetLastError();
    if (s->typed_mem != NULL && (e = cudaFree(s->typed_mem)) != cudaSuccess)
        (void)cudaGetLastError();
    while (s->free_notes != NULL) {
        gs__cuda_note_t *n = s->free_notes;
        s->free_notes = n->next;
        gs_free(n);
    }
    pthread_mutex_destroy(&s->note_lock);
    gs_free(s);
}

static void gs__cuda_stream_destroy(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream)
{
    if (ctx == NULL || stream == NULL) return;
    gs_assert(stream->ctx == ctx);
    if (gs__cuda_use(ctx) != GS_OK)
        GS_LOG_ERROR("cuda stream_destroy: cannot select device %d: %s", ctx->device,
                     gs_last_error());
    pthread_mutex_lock(&ctx->lock);
    if (stream->prev != NULL) stream->prev->next = stream->next;
    else ctx->streams = stream->next;
    if (stream->next != NULL) stream->next->prev = stream->prev;
    ctx->nstreams--;
    pthread_mutex_unlock(&ctx->lock);
    gs__cuda_stream_release(stream);
}

/* ---- memory ---- */

static gs_status_t gs__cuda_mem_alloc(gs_chunkops_ctx_h ctx, size_t nbytes, void **ptr_p)
{
    uintptr_t a;
    gs_status_t st;
    if (ctx == NULL || ptr_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda mem_alloc: NULL argument");
    if ((st = gs__cuda_arena_alloc(&ctx->arena, nbytes, &a)) != GS_OK) return st;
    *ptr_p = (void *)a;
    return GS_OK;
}

static void gs__cuda_mem_free(gs_chunkops_ctx_h ctx, void *ptr)
{
    if (ctx == NULL || ptr == NULL) return;
    if (gs__cuda_arena_free(&ctx->arena, (uintptr_t)ptr) != GS_OK)
        GS_LOG_ERROR("%s", gs_last_error());
}

static void gs__cuda_mem_usage(gs_chunkops_ctx_h ctx, size_t *used_p, size_t *limit_p)
{
    if (ctx == NULL) {
        if (used_p != NULL) *used_p = 0;
        if (limit_p != NULL) *limit_p = 0;
        return;
    }
    gs__cuda_arena_stats(&ctx->arena, used_p, limit_p, NULL, NULL);
}

/* ---- copies ---- */

static gs_status_t gs__cuda_memcpy(const char *what, gs_chunkops_ctx_h ctx,
                                   gs_chunkops_stream_h stream, void *dst, const void *src,
                                   size_t nbytes, enum cudaMemcpyKind kind)
{
    gs_status_t st;
    GS__CHECK_CTX_STREAM(ctx, stream, what);
    if (nbytes == 0) return GS_OK;
    if (dst == NULL || src == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda %s: NULL buffer for %zu bytes", what,
                            nbytes);
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    cudaError_t e = cudaMemcpyAsync(dst, src, nbytes, kind, stream->s);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gs__cuda_fail(stream, gs__cuda_error((int)e, "cudaMemcpyAsync"));
    }
    return GS_OK;
}

static gs_status_t gs__cuda_copy_to_host(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                         void *dst, const void *src, size_t nbytes)
{
    return gs__cuda_memcpy("copy_to_host", ctx, stream, dst, src, nbytes, cudaMemcpyDeviceToHost);
}

static gs_status_t gs__cuda_copy_from_host(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                           void *dst, const void *src, size_t nbytes)
{
    return gs__cuda_memcpy("copy_from_host", ctx, stream, dst, src, nbytes,
                           cudaMemcpyHostToDevice);
}

/* ---- tier moves: pageable host memory through the stream's page-locked staging ---- */

/* One piece of a tier move: the host side's memcpy, run by a host function on the stream
 * between the piece's DMA and the next (stream order keeps the staging buffer in use by one
 * piece at a time). Freed by the host function. */
typedef struct gs__cuda_hcopy {
    void *dst;
    const void *src;
    size_t n;
} gs__cuda_hcopy_t;

static void CUDART_CB gs__cuda_hcopy_cb(void *ud)
{
    gs__cuda_hcopy_t *h = ud;
    memcpy(h->dst, h->src, h->n);
    gs_free(h);
}

/* Enqueue memcpy(dst, src, n) on the stream's host-function thread. */
static gs_status_t gs__cuda_hcopy(gs_chunkops_stream_h stream, void *dst, const void *src,
                                  size_t n)
{
    gs__cuda_hcopy_t *h = gs_malloc(sizeof(*h), "cuda tier piece");
    cudaError_t e;
    if (h == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cuda tier move: out of memory");
    h->dst = dst;
    h->src = src;
    h->n = n;
    if ((e = cudaLaunchHostFunc(stream->s, gs__cuda_hcopy_cb, h)) != cudaSuccess) {
        (void)cudaGetLastError();
        gs_free(h);
        return gs__cuda_error((int)e, "cudaLaunchHostFunc(tier move)");
    }
    return GS_OK;
}

static gs_status_t gs__cuda_tier_move(const char *what, gs_chunkops_ctx_h ctx,
                                      gs_chunkops_stream_h stream, void *dst, const void *src,
                                      size_t nbytes, int down)
{
    gs_status_t st;
    GS__CHECK_CTX_STREAM(ctx, stream, what);
    if (nbytes == 0) return GS_OK;
    if (dst == NULL || src == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda %s: NULL buffer for %zu bytes", what,
                            nbytes);
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    if (stream->stage == NULL) {
        cudaError_t e = cudaHostAlloc(&stream->stage, GS__CUDA_STAGE_BYTES, cudaHostAllocPortable);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            stream->stage = NULL;
            return e == cudaErrorMemoryAllocation
                       ? gs_error_set(GS_ERR_NO_MEMORY, "cuda %s: no page-locked memory for "
                                      "the %zu-byte staging buffer", what, GS__CUDA_STAGE_BYTES)
                       : gs__cuda_error((int)e, "cudaHostAlloc(tier staging)");
        }
    }
    for (size_t off = 0; off < nbytes; off += GS__CUDA_STAGE_BYTES) {
        size_t n = nbytes - off < GS__CUDA_STAGE_BYTES ? nbytes - off : GS__CUDA_STAGE_BYTES;
        cudaError_t e;
        if (down) {
            /* device -> staging (DMA), then staging -> pageable host (host function) */
            e = cudaMemcpyAsync(stream->stage, (const char *)src + off, n,
                                cudaMemcpyDeviceToHost, stream->s);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                return gs__cuda_fail(stream, gs__cuda_error((int)e, "cudaMemcpyAsync(to_host)"));
            }
            if ((st = gs__cuda_hcopy(stream, (char *)dst + off, stream->stage, n)) != GS_OK)
                return gs__cuda_fail(stream, st);
        } else {
            if ((st = gs__cuda_hcopy(stream, stream->stage, (const char *)src + off, n)) != GS_OK)
                return gs__cuda_fail(stream, st);
            e = cudaMemcpyAsync((char *)dst + off, stream->stage, n, cudaMemcpyHostToDevice,
                                stream->s);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                return gs__cuda_fail(stream,
                                     gs__cuda_error((int)e, "cudaMemcpyAsync(to_device)"));
            }
        }
    }
    return GS_OK;
}

static gs_status_t gs__cuda_to_host(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                    void *dst, const void *src, size_t nbytes)
{
    return gs__cuda_tier_move("to_host", ctx, stream, dst, src, nbytes, 1);
}

static gs_status_t gs__cuda_to_device(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                      void *dst, const void *src, size_t nbytes)
{
    return gs__cuda_tier_move("to_device", ctx, stream, dst, src, nbytes, 0);
}

gs_status_t gs_cuda_memcpy_d2d(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, void *dst,
                               const void *src, size_t nbytes)
{
    return gs__cuda_memcpy("memcpy_d2d", ctx, stream, dst, src, nbytes, cudaMemcpyDeviceToDevice);
}

/* ---- completion ---- */

static void CUDART_CB gs__cuda_note_cb(cudaStream_t cs, cudaError_t err, void *ud)
{
    gs__cuda_note_t *n = ud;
    struct gs_chunkops_stream *s = n->stream;
    gs_chunkops_done_cb cb = n->cb;
    void *arg = n->arg;
    gs_status_t status = n->status;
    gs_status_t late = (gs_status_t)atomic_exchange(&s->late_err, GS_OK);
    if (status == GS_OK) status = late;
    (void)cs;
    if (err != cudaSuccess && gs__cuda_sticky((int)err)) {
        /* an illegal address & co. in work already enqueued: the context is gone */
        gs__cuda_note_lost(s->ctx->device, (int)err, "work on a stream");
        status = GS_ERR_DEVICE_LOST;
    } else if (status == GS_OK && err != cudaSuccess) {
        status = GS_ERR_CUDA;
        GS_LOG_ERROR("cuda: work on a stream of device %d failed (cudaError_t %d)", s->ctx->device,
                     (int)err);
    }
    pthread_mutex_lock(&s->note_lock);
    n->next = s->free_notes;
    s->free_notes = n;
    pthread_mutex_unlock(&s->note_lock);
    cb(status, arg);
}

static gs_status_t gs__cuda_notify(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                   gs_chunkops_done_cb cb, void *arg)
{
    gs_status_t st;
    GS__CHECK_CTX_STREAM(ctx, stream, "notify");
    if (cb == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cuda notify: NULL callback");
    if ((st = gs__cuda_use(ctx)) != GS_OK) return st;
    pthread_mutex_lock(&stream->note_lock);
    gs__cuda_note_t *n = stream->free_notes;
    if (n != NULL) stream->free_notes = n->next;
    pthread_mutex_unlock(&stream->note_lock);
    if (n == NULL && (n = gs_malloc(sizeof(*n), "cuda notify record")) == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "cuda notify: out of memory");
    n->cb = cb;
    n->arg = arg;
    n->stream = stream;
    n->status = (gs_status_t)atomic_exchange(&stream->pending, GS_OK);
    cudaError_t e = cudaStreamAddCallback(stream->s, gs__cuda_note_cb, n, 0);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        int expected = GS_OK; /* the callback will not run: keep the failure for the next one */
        atomic_compare_exchange_strong(&stream->pending, &expected, (int)n->status);
        pthread_mutex_lock(&stream->note_lock);
        n->next = stream->free_notes;
        stream->free_notes = n;
        pthread_mutex_unlock(&stream->note_lock);
        return gs__cuda_error((int)e, "cudaStreamAddCallback");
    }
    return GS_OK;
}

static gs_status_t gs__cuda_health(gs_chunkops_ctx_h ctx)
{
    cudaError_t e;
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cuda health: ctx is NULL");
    if (gs__cuda_lost(ctx->device) != GS_OK) return GS_ERR_DEVICE_LOST;
    /* a sticky error nobody has seen yet (peeking neither blocks nor clears it) */
    e = cudaPeekAtLastError();
    if (e != cudaSuccess && gs__cuda_sticky((int)e)) {
        gs__cuda_note_lost(ctx->device, (int)e, "cudaPeekAtLastError");
        return gs__cuda_lost(ctx->device);
    }
    return GS_OK;
}

static gs_status_t gs__cuda_sync(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream)
{
    gs_status_t st;
    GS__CHECK_CTX_STREAM(ctx, stream, "sync");
    if ((st = gs__cuda_use(ctx)) != GS_OK) return st;
    cudaError_t e = cudaStreamSynchronize(stream->s);
    gs_status_t pend = (gs_status_t)atomic_exchange(&stream->pending, GS_OK);
    gs_status_t late = (gs_status_t)atomic_exchange(&stream->late_err, GS_OK);
    if (pend == GS_OK) pend = late;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gs__cuda_error((int)e, "cudaStreamSynchronize");
    }
    if (pend != GS_OK)
        return gs_error_set(pend, "cuda sync: work enqueued on this stream failed earlier (%s)",
                            gs_status_string(pend));
    return GS_OK;
}

/* ---- peer access between processes (CUDA IPC) ---- */

_Static_assert(sizeof(cudaIpcMemHandle_t) <= GS_IPC_HANDLE_BYTES, "IPC handle size");

static gs_status_t gs__cuda_ipc_export(gs_chunkops_ctx_h ctx, gs_ipc_handle_t *handle_p,
                                       void **base_p, size_t *size_p)
{
    gs_status_t st;
    if (ctx == NULL || handle_p == NULL || base_p == NULL || size_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda ipc_export: NULL argument");
    if ((st = gs__cuda_use(ctx)) != GS_OK) return st;
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->ipc_exported) {
        cudaError_t e = cudaIpcGetMemHandle(&ctx->ipc_handle, ctx->arena_mem);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            pthread_mutex_unlock(&ctx->lock);
            return gs__cuda_error((int)e, "cudaIpcGetMemHandle(arena)");
        }
        ctx->ipc_exported = 1;
    }
    memset(handle_p, 0, sizeof(*handle_p));
    memcpy(handle_p->bytes, &ctx->ipc_handle, sizeof(ctx->ipc_handle));
    pthread_mutex_unlock(&ctx->lock);
    *base_p = ctx->arena_mem;
    *size_p = ctx->arena_size;
    return GS_OK;
}

static gs_status_t gs__cuda_ipc_open(gs_chunkops_ctx_h ctx, const gs_ipc_handle_t *handle,
                                     void **ptr_p)
{
    cudaIpcMemHandle_t h;
    void *p = NULL;
    gs_status_t st;
    if (ctx == NULL || handle == NULL || ptr_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda ipc_open: NULL argument");
    if ((st = gs__cuda_use(ctx)) != GS_OK) return st;
    memcpy(&h, handle->bytes, sizeof(h));
    GS__CUDA_CALL(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    *ptr_p = p;
    return GS_OK;
}

static void gs__cuda_ipc_close(gs_chunkops_ctx_h ctx, void *ptr)
{
    if (ctx == NULL || ptr == NULL || gs__cuda_use(ctx) != GS_OK) return;
    if (cudaIpcCloseMemHandle(ptr) != cudaSuccess) (void)cudaGetLastError();
}

static gs_status_t gs__cuda_copy_device(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                        void *dst, const void *src, size_t nbytes)
{
    return gs__cuda_memcpy("copy_device", ctx, stream, dst, src, nbytes, cudaMemcpyDefault);
}

/* host_alloc / host_free: page-locked buffers through the context's cache (pinned.c) */
static gs_status_t gs__cuda_host_alloc(gs_chunkops_ctx_h ctx, size_t nbytes, void **ptr_p)
{
    gs_status_t st;
    if (ctx == NULL || ptr_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda host_alloc: NULL argument");
    if ((st = gs__cuda_use(ctx)) != GS_OK) return st;
    return gs__cuda_pinned_alloc(&ctx->pins, nbytes, ptr_p);
}

static void gs__cuda_host_free(gs_chunkops_ctx_h ctx, void *ptr)
{
    if (ctx == NULL || ptr == NULL || gs__cuda_use(ctx) != GS_OK) return;
    gs__cuda_pinned_free(&ctx->pins, ptr);
}

static gs_status_t gs__cuda_host_register(gs_chunkops_ctx_h ctx, void *ptr, size_t nbytes)
{
    gs_status_t st;
    cudaError_t e;
    if (ctx == NULL || ptr == NULL || nbytes == 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda host_register: bad argument");
    if ((st = gs__cuda_use(ctx)) != GS_OK) return st;
    e = cudaHostRegister(ptr, nbytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gs__cuda_error((int)e, "cudaHostRegister");
    }
    return GS_OK;
}

static void gs__cuda_host_unregister(gs_chunkops_ctx_h ctx, void *ptr)
{
    if (ctx == NULL || ptr == NULL || gs__cuda_use(ctx) != GS_OK) return;
    if (cudaHostUnregister(ptr) != cudaSuccess) (void)cudaGetLastError();
}

const gs_chunkops_ops_t gs_chunkops_cuda_ops = {
    .name = "cuda",
    .ctx_create = gs__cuda_ctx_create,
    .ctx_destroy = gs__cuda_ctx_destroy,
    .stream_create = gs__cuda_stream_create,
    .stream_destroy = gs__cuda_stream_destroy,
    .mem_alloc = gs__cuda_mem_alloc,
    .mem_free = gs__cuda_mem_free,
    .mem_usage = gs__cuda_mem_usage,
    .copy_to_host = gs__cuda_copy_to_host,
    .copy_from_host = gs__cuda_copy_from_host,
    .fused = gs__cuda_fused,
    .combine = gs__cuda_combine,
    .copy = gs__cuda_copy,
    .linalg = gs__cuda_linalg,
    .stencil = gs__cuda_stencil,
    .cuda_user = gs__cuda_rtc_user,
    .ipc_export = gs__cuda_ipc_export,
    .ipc_open = gs__cuda_ipc_open,
    .ipc_close = gs__cuda_ipc_close,
    .copy_device = gs__cuda_copy_device,
    .host_alloc = gs__cuda_host_alloc,
    .host_free = gs__cuda_host_free,
    .to_host = gs__cuda_to_host,
    .to_device = gs__cuda_to_device,
    .notify = gs__cuda_notify,
    .sync = gs__cuda_sync,
    .health = gs__cuda_health,
    .host_register = gs__cuda_host_register,
    .host_unregister = gs__cuda_host_unregister,
    .scan = gs__cuda_scan,
    .file_read = gs__cuda_file_read,
};

void *gs__cuda_stream_raw(gs_chunkops_stream_h stream, int *device_p)
{
    *device_p = stream->ctx->device;
    return (void *)stream->s;
}

const gs__cuda_dev_t *gs__cuda_ctx_dev(gs_chunkops_ctx_h ctx)
{
    return &ctx->dev;
}
