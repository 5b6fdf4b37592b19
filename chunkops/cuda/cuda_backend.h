/**
 * The CUDA chunkops backend, as seen from outside chunkops/cuda/ (plain C; includes no CUDA
 * header). Only built when GS_HAVE_CUDA.
 *
 * Context: bound to one device (params->device); the only device it ever makes current. At
 * creation it takes one device-memory range (params->memory_limit bytes, or by default 85% of
 * the device's free memory less 256 MiB) and sub-allocates every chunk from it; each stream
 * adds a 4 MiB scratch area for reduction partials. Streams are non-blocking CUDA streams.
 * notify() registers a stream callback (cudaStreamAddCallback, which, unlike
 * cudaLaunchHostFunc, also runs after a device error and reports it); the user callback runs
 * on a CUDA runtime thread. Every CUDA failure is returned as GS_ERR_CUDA with the failing call
 * and cudaGetErrorString() in gs_last_error(); a failed enqueue is also reported to the next
 * notify()/sync() of that stream.
 */
#ifndef GS_CHUNKOPS_CUDA_BACKEND_H
#define GS_CHUNKOPS_CUDA_BACKEND_H

#include "chunkops/chunkops.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The "cuda" ops table. */
extern const gs_chunkops_ops_t gs_chunkops_cuda_ops;

/** Number of CUDA devices (cudaGetDeviceCount; 0 when there is no device or no usable driver).
 *  Creates no context. */
int gs__cuda_device_count(void);

/** Device name and multiprocessor count of the context's device (tools, benchmarks).
 *  @a name (may be NULL) receives at most @a len bytes, NUL-terminated. */
gs_status_t gs_cuda_device_describe(gs_chunkops_ctx_h ctx, char *name, size_t len,
                                    int *num_sms_p);

/** Whether STORE/FULL kernels may take the flat walk (default on; off when the environment
 *  had GS_CUDA_FLAT=0 at context creation). Off, they run over row tiles: same results, for
 *  comparisons. Takes effect for work enqueued afterwards; not synchronised with concurrent
 *  enqueues (set it before). */
gs_status_t gs_cuda_set_flat_walk(gs_chunkops_ctx_h ctx, int enable);

/** Whether STORE/FULL kernels over 2-D regions that read a chunk transposed (x + x.T) may stage
 *  the transposed tiles through shared memory (default on; off when the environment had
 *  GS_CUDA_TTILE=0 at context creation). Off (@a enable 0), they take the flat walk or the row
 *  tiles: same values (sums may round differently), for comparisons. @a enable 1: on, with
 *  programs of one row-major and one transposed chunk leaf in the pipelined kernel (the
 *  default; GS_CUDA_TT_PF=0 at context creation turns the pipelining off); 2: on, never
 *  pipelined. GS_ERR_INVALID_PARAM for a NULL @a ctx. Takes effect for work enqueued
 *  afterwards (set it before). */
gs_status_t gs_cuda_set_transpose_tiles(gs_chunkops_ctx_h ctx, int enable);

/* The normal pair kernels (version 2 and 3 leaves, fused_pairs.cu) take two pairs per thread
 * and step; GS_CUDA_PAIRS_U=1 in the environment at context creation takes one (the same
 * values; sums may round differently), for comparisons. */

/** Device-to-device copy of @a nbytes enqueued on @a stream (cudaMemcpyAsync). */
gs_status_t gs_cuda_memcpy_d2d(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, void *dst,
                               const void *src, size_t nbytes);

/** GPU timing with CUDA events, for benchmarks: @a nmarks events recorded on streams;
 *  elapsed(i, j) waits for mark j and returns the milliseconds from mark i to mark j.
 *  The timer belongs to @a ctx and must be destroyed before it. */
typedef struct gs_cuda_timer *gs_cuda_timer_h;
gs_status_t gs_cuda_timer_create(gs_chunkops_ctx_h ctx, int nmarks, gs_cuda_timer_h *timer_p);
void gs_cuda_timer_destroy(gs_cuda_timer_h timer);
gs_status_t gs_cuda_timer_mark(gs_cuda_timer_h timer, gs_chunkops_stream_h stream, int i);
gs_status_t gs_cuda_timer_elapsed_ms(gs_cuda_timer_h timer, int i, int j, double *ms_p);

#ifdef __cplusplus
}
#endif
#endif
