/* CPU backend: context, memory accounting, streams, host copies and the ops table.
 * Every call completes before it returns; notify() calls its callback at once. A context may
 * be used from several threads at once (memory accounting is atomic, kernels keep their
 * scratch on the heap per call); each kernel runs on the calling thread, so parallelism
 * comes from running several tasks at once (params.nthreads is recorded for that purpose). */
#include "chunkops/cpu/cpu.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Chunk memory: 64-byte aligned, with the raw pointer and the size kept just before it. Chunks
 * of at most GS__CPU_SMALL bytes are pool blocks of GS__CPU_ALIGN + GS__CPU_SMALL bytes (the
 * header in the first line, the data in the second); raw is then the block. */
#define GS__CPU_ALIGN 64u
#define GS__CPU_SMALL 64u
#define GS__CPU_SMALL_SLAB 4096u

typedef struct gs__cpu_hdr {
    void *raw;
    size_t nbytes;
    size_t pooled;              /* 1: a block of ctx->small */
} gs__cpu_hdr_t;

static size_t gs__cpu_default_limit(void)
{
    long pages = sysconf(_SC_PHYS_PAGES);
    long psize = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || psize <= 0) return (size_t)1 << 32;
    uint64_t total = (uint64_t)pages * (uint64_t)psize;
    if (total > SIZE_MAX) total = SIZE_MAX;
    return (size_t)(total / 4 * 3);
}

gs_status_t gs__cpu_lost(gs_chunkops_ctx_h ctx)
{
    int lost = ctx != NULL ? atomic_load_explicit(&ctx->lost, memory_order_acquire) : 0;
    if (lost == 0) return GS_OK;
    return gs_error_set(GS_ERR_DEVICE_LOST, "%s", lost == 2 ? ctx->lost_why : "device lost");
}

static gs_status_t gs__cpu_health(gs_chunkops_ctx_h ctx)
{
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu health: ctx is NULL");
    return gs__cpu_lost(ctx);
}

static gs_status_t gs__cpu_ctx_create(const gs_chunkops_params_t *params, gs_chunkops_ctx_h *ctx_p)
{
    if (ctx_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu ctx_create: ctx_p is NULL");
    if (params != NULL && params->nthreads < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cpu ctx_create: negative nthreads %d",
                            params->nthreads);
    struct gs_chunkops_ctx *ctx = gs_calloc(1, sizeof(*ctx), "cpu ctx");
    if (ctx == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cpu ctx_create: out of memory");
    ctx->limit = (params != NULL && params->memory_limit != 0) ? params->memory_limit
                                                               : gs__cpu_default_limit();
    ctx->nthreads = (params != NULL && params->nthreads > 0) ? params->nthreads : 1;
    ctx->lose_on = params != NULL ? params->test_lose_device_on : NULL;
    atomic_init(&ctx->lost, 0);
    if (pthread_mutex_init(&ctx->small_lock, NULL) != 0) {
        gs_free(ctx);
        return gs_error_set(GS_ERR_NO_MEMORY, "cpu ctx_create: cannot create a lock");
    }
    if (gs_mpool_init(&ctx->small, GS__CPU_ALIGN + GS__CPU_SMALL, GS__CPU_ALIGN,
                      GS__CPU_SMALL_SLAB, "cpu small chunk slab") != GS_OK)
        gs_assert_always(!"constant pool parameters refused");
    atomic_init(&ctx->used, 0);
    atomic_init(&ctx->nallocs, 0);
    atomic_init(&ctx->nstreams, 0);
    gs__cpu_linalg_threads(ctx->nthreads);
    *ctx_p = ctx;
    return GS_OK;
}

static void gs__cpu_ctx_destroy(gs_chunkops_ctx_h ctx)
{
    if (ctx == NULL) return;
    size_t n = atomic_load(&ctx->nallocs);
    if (n != 0)
        GS_LOG_WARN("cpu chunkops context destroyed with %zu live allocations (%zu bytes)", n,
                    (size_t)atomic_load(&ctx->used));
    if (atomic_load(&ctx->nstreams) != 0)
        GS_LOG_WARN("cpu chunkops context destroyed with %d live streams",
                    atomic_load(&ctx->nstreams));
    gs_mpool_cleanup(&ctx->small);
    pthread_mutex_destroy(&ctx->small_lock);
    gs_free(ctx);
}

static gs_status_t gs__cpu_stream_create(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h *stream_p)
{
    if (ctx == NULL || stream_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cpu stream_create: NULL argument");
    struct gs_chunkops_stream *s = gs_malloc(sizeof(*s), "cpu stream");
    if (s == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cpu stream_create: out of memory");
    s->ctx = ctx;
    atomic_fetch_add(&ctx->nstreams, 1);
    *stream_p = s;
    return GS_OK;
}

static void gs__cpu_stream_destroy(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream)
{
    if (stream == NULL) return;
    gs_assert(stream->ctx == ctx);
    atomic_fetch_sub(&stream->ctx->nstreams, 1);
    gs_free(stream);
}

static gs_status_t gs__cpu_mem_alloc(gs_chunkops_ctx_h ctx, size_t nbytes, void **ptr_p)
{
    if (ctx == NULL || ptr_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cpu mem_alloc: NULL argument");
    size_t cur = atomic_load(&ctx->used);
    do {
        if (nbytes > ctx->limit || cur > ctx->limit - nbytes)
            return gs_error_set(GS_ERR_NO_MEMORY,
                                "cpu mem_alloc: %zu bytes do not fit (%zu of %zu in use)", nbytes,
                                cur, ctx->limit);
    } while (!atomic_compare_exchange_weak(&ctx->used, &cur, cur + nbytes));

    void *raw = NULL;
    uintptr_t p;
    if (nbytes <= GS__CPU_SMALL) {
        pthread_mutex_lock(&ctx->small_lock);
        raw = gs_mpool_get(&ctx->small);
        pthread_mutex_unlock(&ctx->small_lock);
        p = (uintptr_t)raw + GS__CPU_ALIGN;
    } else {
        if (nbytes <= SIZE_MAX - GS__CPU_ALIGN - sizeof(gs__cpu_hdr_t))
            raw = gs_malloc(nbytes + GS__CPU_ALIGN + sizeof(gs__cpu_hdr_t), "cpu chunk");
        p = ((uintptr_t)raw + sizeof(gs__cpu_hdr_t) + GS__CPU_ALIGN - 1) &
            ~(uintptr_t)(GS__CPU_ALIGN - 1);
    }
    if (raw == NULL) {
        atomic_fetch_sub(&ctx->used, nbytes);
        return gs_error_set(GS_ERR_NO_MEMORY, "cpu mem_alloc: malloc of %zu bytes failed", nbytes);
    }
    gs__cpu_hdr_t *h = (gs__cpu_hdr_t *)p - 1;
    h->raw = raw;
    h->nbytes = nbytes;
    h->pooled = nbytes <= GS__CPU_SMALL;
    atomic_fetch_add(&ctx->nallocs, 1);
    *ptr_p = (void *)p;
    return GS_OK;
}

static void gs__cpu_mem_free(gs_chunkops_ctx_h ctx, void *ptr)
{
    if (ptr == NULL) return;
    gs_assert_always(ctx != NULL);
    gs__cpu_hdr_t *h = (gs__cpu_hdr_t *)ptr - 1;
    size_t n = h->nbytes;
    gs_assert_always(atomic_load(&ctx->used) >= n);
    atomic_fetch_sub(&ctx->used, n);
    atomic_fetch_sub(&ctx->nallocs, 1);
    if (h->pooled) {
        pthread_mutex_lock(&ctx->small_lock);
        gs_mpool_put(&ctx->small, h->raw);
        pthread_mutex_unlock(&ctx->small_lock);
    } else {
        gs_free(h->raw);
    }
}

static void gs__cpu_mem_usage(gs_chunkops_ctx_h ctx, size_t *used_p, size_t *limit_p)
{
    gs_assert_always(ctx != NULL);
    if (used_p != NULL) *used_p = atomic_load(&ctx->used);
    if (limit_p != NULL) *limit_p = ctx->limit;
}

static gs_status_t gs__cpu_copy_bytes(const char *what, gs_chunkops_ctx_h ctx, void *dst,
                                      const void *src, size_t nbytes)
{
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu %s: ctx is NULL", what);
    if (nbytes == 0) return GS_OK;
    if (dst == NULL || src == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cpu %s: NULL buffer for %zu bytes", what,
                            nbytes);
    memmove(dst, src, nbytes);
    return GS_OK;
}

static gs_status_t gs__cpu_copy_to_host(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                        void *dst, const void *src, size_t nbytes)
{
    return gs__cpu_copy_bytes("copy_to_host", ctx, dst, src, nbytes);
}

static gs_status_t gs__cpu_copy_from_host(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                          void *dst, const void *src, size_t nbytes)
{
    return gs__cpu_copy_bytes("copy_from_host", ctx, dst, src, nbytes);
}

/* Tier moves (chunkops.h): backend memory is host memory, so plain copies run in the call. */
static gs_status_t gs__cpu_to_host(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, void *dst,
                                   const void *src, size_t nbytes)
{
    return gs__cpu_copy_bytes("to_host", ctx, dst, src, nbytes);
}

static gs_status_t gs__cpu_to_device(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                     void *dst, const void *src, size_t nbytes)
{
    return gs__cpu_copy_bytes("to_device", ctx, dst, src, nbytes);
}

static gs_status_t gs__cpu_fused(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                 const gs_kfused_t *k)
{
    gs_status_t st;
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu fused: ctx is NULL");
    if ((st = gs__cpu_lost(ctx)) != GS_OK) return st;
    if ((st = gs_kfused_validate(k)) != GS_OK) return st;
    return gs__cpu_fused_run(k);
}

static gs_status_t gs__cpu_combine(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                   const gs_kcombine_t *k)
{
    gs_status_t st;
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu combine: ctx is NULL");
    if ((st = gs__cpu_lost(ctx)) != GS_OK) return st;
    if ((st = gs_kcombine_validate(k)) != GS_OK) return st;
    gs__cpu_combine_run(k);
    return GS_OK;
}

static gs_status_t gs__cpu_copy(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                const gs_kcopy_t *k)
{
    gs_status_t st;
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu copy: ctx is NULL");
    if ((st = gs__cpu_lost(ctx)) != GS_OK) return st;
    if ((st = gs_kcopy_validate(k)) != GS_OK) return st;
    gs__cpu_copy_run(k);
    return GS_OK;
}

static gs_status_t gs__cpu_stencil(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                   const gs_kstencil_t *k)
{
    gs_status_t st;
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu stencil: ctx is NULL");
    if ((st = gs__cpu_lost(ctx)) != GS_OK) return st;
    if ((st = gs_kstencil_validate(k)) != GS_OK) return st;
    return gs__cpu_stencil_run(k);
}

static gs_status_t gs__cpu_scan(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                const gs_kscan_t *k)
{
    gs_status_t st;
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu scan: ctx is NULL");
    if ((st = gs_kscan_validate(k)) != GS_OK) return st;
    gs__cpu_scan_run(k);
    return GS_OK;
}

static gs_status_t gs__cpu_user(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                const gs_kuser_t *k)
{
    gs_status_t st;
    if (ctx == NULL || k == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu user: NULL argument");
    if (k->lib == NULL || k->sym == NULL || k->nin < 1 || k->nin > GS_KERNEL_MAX_USER_IN ||
        k->out.data == NULL || k->arg_len < 0 || (k->arg_len > 0 && k->arg == NULL))
        return gs_error_set(GS_ERR_INVALID_PARAM, "cpu user: malformed kernel spec");
    for (int i = 0; i < k->nin; i++)
        if (k->in[i].data == NULL && k->in_len[i] > 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "cpu user: input %d has no data", i);
    if ((st = gs__cpu_lost(ctx)) != GS_OK) return st;
    gs_block_t out = k->out;
    st = gs__cpu_user_call(k->lib, k->sym, k->in, k->nin, &out, k->arg);
    if (st == GS_ERR_TASK_FAILED && ctx->lose_on != NULL && strcmp(ctx->lose_on, k->sym) == 0) {
        /* tests: this kernel's failure stands for a CUDA kernel's illegal address. The first
         * loss names the cause; later ones (other threads) find it set. */
        int expected = 0;
        char why[sizeof(ctx->lost_why)];
        snprintf(why, sizeof why, "device lost (test_lose_device_on %s): %s", k->sym,
                 gs_last_error());
        if (atomic_compare_exchange_strong(&ctx->lost, &expected, 1)) {
            memcpy(ctx->lost_why, why, sizeof why);
            atomic_store_explicit(&ctx->lost, 2, memory_order_release);
        }
        return gs_error_set(GS_ERR_DEVICE_LOST, "%s", why);
    }
    return st;
}

static gs_status_t gs__cpu_notify(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                  gs_chunkops_done_cb cb, void *arg)
{
    if (ctx == NULL || cb == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cpu notify: NULL ctx or callback");
    /* Work on a cpu stream completes inside the call that submits it (and reports its error
     * there), so everything enqueued so far has finished successfully -- unless the context
     * was lost since (tests), which every call reports as a CUDA context's sticky error. */
    cb(atomic_load(&ctx->lost) ? GS_ERR_DEVICE_LOST : GS_OK, arg);
    return GS_OK;
}

static gs_status_t gs__cpu_sync(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream)
{
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu sync: ctx is NULL");
    return gs__cpu_lost(ctx);
}

const gs_chunkops_ops_t gs_chunkops_cpu_ops = {
    .name = "cpu",
    .ctx_create = gs__cpu_ctx_create,
    .ctx_destroy = gs__cpu_ctx_destroy,
    .stream_create = gs__cpu_stream_create,
    .stream_destroy = gs__cpu_stream_destroy,
    .mem_alloc = gs__cpu_mem_alloc,
    .mem_free = gs__cpu_mem_free,
    .mem_usage = gs__cpu_mem_usage,
    .copy_to_host = gs__cpu_copy_to_host,
    .copy_from_host = gs__cpu_copy_from_host,
    .fused = gs__cpu_fused,
    .combine = gs__cpu_combine,
    .copy = gs__cpu_copy,
    .linalg = gs__cpu_linalg,
    .to_host = gs__cpu_to_host,
    .to_device = gs__cpu_to_device,
    .stencil = gs__cpu_stencil,
    .user = gs__cpu_user,
    .notify = gs__cpu_notify,
    .sync = gs__cpu_sync,
    .scan = gs__cpu_scan,
    .health = gs__cpu_health,
};
