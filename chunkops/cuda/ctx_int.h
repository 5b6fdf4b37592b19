/* Internal to chunkops/cuda/ctx*.c: the context and stream structs, the runtime-call macros
 * and the helpers the files share. ctx.c: context, streams, memory, copies, completion, IPC,
 * the ops table; ctx_kernels.c: the kernels' entry points; ctx_tools.c: settings (environment
 * knobs and their setters), the device description, timers. */
#ifndef GS_CHUNKOPS_CUDA_CTX_INT_H
#define GS_CHUNKOPS_CUDA_CTX_INT_H

#include "chunkops/cuda/cuda_backend.h"
#include "chunkops/cuda/cuda_internal.h"
#include "common/error.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

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

#define GS__CHECK_CTX_STREAM(ctx, stream, what)                                               \
    do {                                                                                      \
        if ((ctx) == NULL || (stream) == NULL)                                                \
            return gs_error_set(GS_ERR_INVALID_PARAM, "cuda %s: NULL context or stream", what); \
        if ((stream)->ctx != (ctx))                                                           \
            return gs_error_set(GS_ERR_INVALID_PARAM,                                         \
                                "cuda %s: stream belongs to another context", what);          \
    } while (0)

/* ctx.c */
/* Make the context's device current on the calling thread (cheap when it already is). */
gs_status_t gs__cuda_use(gs_chunkops_ctx_h ctx);
/* Remember the first enqueue failure of a stream for its next notify()/sync(); returns @a st. */
gs_status_t gs__cuda_fail(gs_chunkops_stream_h stream, gs_status_t st);

/* ctx_kernels.c: the ops table's kernel slots (chunkops/chunkops.h) */
gs_status_t gs__cuda_fused(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_kfused_t *k);
gs_status_t gs__cuda_combine(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_kcombine_t *k);
gs_status_t gs__cuda_copy(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_kcopy_t *k);
gs_status_t gs__cuda_stencil(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_kstencil_t *k);
gs_status_t gs__cuda_linalg(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_klinalg_t *k);

/* ctx_tools.c */
/* Read the comparison knobs at context creation: GS_CUDA_FLAT=0 (the tile kernels only),
 * GS_CUDA_TTILE=0 (no transposed tiles). */
void gs__cuda_settings_from_env(gs__cuda_dev_t *dev);

#endif
