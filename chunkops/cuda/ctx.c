/* CUDA backend: context, device arena, streams, host copies, tier moves through page-locked
 * staging (to_host / to_device), kernels' entry points, notify, sync, file reads (cufile.c),
 * and the benchmark helpers (timers, device-to-device copies). Plain C over the CUDA
 * runtime API; kernels are launched through the plain-C launchers of fused.cu / misc.cu. */
#include "chunkops/cuda/cuda_backend.h"
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/cuda/linalg.h"
#include "chunkops/cuda/stencil.h"
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

typedef struct gs__cuda_note {
    gs_chunkops_done_cb cb;
    void *arg;
    gs_status_t status;                 /* enqueue failures before this notify */
    struct gs_chunkops_stream *stream;
    struct gs__cuda_note *next;
} gs__cuda_note_t;

struct gs_chunkops_stream {
    gs_chunkops_ctx_h ctx;
    cudaStream_t s;
    void *scratch_mem;
    gs__cuda_scratch_t scratch;
    void *typed_mem;                    /* typed reductions: the program's float64 values */
    size_t typed_cap;                   /* bytes of typed_mem (grown on demand, never shrunk) */
    atomic_int pending;                 /* first enqueue failure since the last notify/sync */
    pthread_mutex_t note_lock;
    gs__cuda_note_t *free_notes;        /* recycled notify records */
    struct gs_chunkops_stream *prev, *next;
    struct gs__cuda_la *la;             /* linalg handles (linalg.c), made on first use */
    atomic_int late_err;                /* first failure found by a completion callback */
    void *stage;                        /* page-locked staging of tier moves (to_host,
                                           to_device), GS__CUDA_STAGE_BYTES, made on first use */
};

struct gs_chunkops_ctx {
    int device;
    gs__cuda_dev_t dev;
    void *arena_mem;
    size_t arena_size;
    int ipc_exported;                   /* ipc_handle valid */
    cudaIpcMemHandle_t ipc_handle;
    gs__cuda_arena_t arena;
    pthread_mutex_t lock;               /* the stream list */
    struct gs_chunkops_stream *streams;
    int nstreams;
    gs__cuda_pincache_t pins;           /* host_alloc's page-locked buffers (pinned.c) */
};

/* Check a runtime call; on failure clear the (non-sticky) last error and return GS_ERR_CUDA. */
#define GS__CUDA_CALL(call)                                                                 \
    do {                                                                                    \
        cudaError_t gs__e = (call);                                                         \
        if (gs__e != cudaSuccess) {                                                         \
            (void)cudaGetLastError();                                                       \
            return gs__cuda_error((int)gs__e, #call);                                       \
        }                                                                                   \
    } while (0)

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
static gs_status_t gs__cuda_use(gs_chunkops_ctx_h ctx)
{
    int cur = -1;
    /* no check of a recorded loss here: the cleanup calls (sync, destroy) must still reach
     * CUDA, and every call that enqueues work gets the sticky error from CUDA itself */
    if (cudaGetDevice(&cur) == cudaSuccess && cur == ctx->device) return GS_OK;
    GS__CUDA_CALL(cudaSetDevice(ctx->device));
    return GS_OK;
}

/* Remember the first enqueue failure of a stream for its next notify()/sync(). */
static gs_status_t gs__cuda_fail(gs_chunkops_stream_h stream, gs_status_t st)
{
    int expected = GS_OK;
    if (st != GS_OK) atomic_compare_exchange_strong(&stream->pending, &expected, (int)st);
    return st;
}

#define GS__CHECK_CTX_STREAM(ctx, stream, what)                                               \
    do {                                                                                      \
        if ((ctx) == NULL || (stream) == NULL)                                                \
            return gs_error_set(GS_ERR_INVALID_PARAM, "cuda %s: NULL context or stream", what); \
        if ((stream)->ctx != (ctx))                                                           \
            return gs_error_set(GS_ERR_INVALID_PARAM,                                         \
                                "cuda %s: stream belongs to another context", what);          \
    } while (0)

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
    const char *flat = getenv("GS_CUDA_FLAT"); /* "0": the tile kernels only (comparisons) */
    ctx->dev.no_flat = flat != NULL && strcmp(flat, "0") == 0;
    const char *ttile = getenv("GS_CUDA_TTILE"); /* "0": no transposed tiles (comparisons) */
    ctx->dev.no_ttile = ttile != NULL && strcmp(ttile, "0") == 0;
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

gs_status_t gs_cuda_memcpy_d2d(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, void *dst,
                               const void *src, size_t nbytes)
{
    return gs__cuda_memcpy("memcpy_d2d", ctx, stream, dst, src, nbytes, cudaMemcpyDeviceToDevice);
}

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

static gs_status_t gs__cuda_fused(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
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

static gs_status_t gs__cuda_combine(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                    const gs_kcombine_t *k)
{
    gs_status_t st;
    GS__CHECK_CTX_STREAM(ctx, stream, "combine");
    if ((st = gs_kcombine_validate(k)) != GS_OK) return st;
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    return gs__cuda_fail(stream, gs__cuda_launch_combine(&ctx->dev, stream->s, k));
}

static gs_status_t gs__cuda_copy(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
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

static gs_status_t gs__cuda_stencil(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
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

static gs_status_t gs__cuda_linalg(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                   const gs_klinalg_t *k)
{
    gs_status_t st;
    GS__CHECK_CTX_STREAM(ctx, stream, "linalg");
    if ((st = gs_klinalg_validate(k)) != GS_OK) return st;
    if ((st = gs__cuda_use(ctx)) != GS_OK) return gs__cuda_fail(stream, st);
    return gs__cuda_fail(stream, gs__cuda_linalg_run(&stream->la, stream->s, &ctx->arena,
                                                     &stream->late_err, k));
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
