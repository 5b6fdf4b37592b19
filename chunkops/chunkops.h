/**
 * Chunk-operation backends behind one C vtable.
 *
 * A backend owns an execution context (gs_chunkops_ctx_h) bound to one device (the CPU, or one
 * CUDA GPU). Chunk memory is backend memory: host memory for "cpu", device memory for "cuda".
 * Work is submitted on a stream (gs_chunkops_stream_h): for "cpu" a stream is the calling
 * thread and every call completes before it returns; for "cuda" calls enqueue work on a CUDA
 * stream and return at once, and gs_chunkops_ops_t.notify() delivers completion.
 *
 * Errors: every function returns gs_status_t; GS_ERR_INVALID_PARAM for a malformed kernel spec
 * (checked by gs_kfused_validate() & co. before any launch), GS_ERR_NO_DEVICE_MEMORY /
 * GS_ERR_NO_MEMORY when allocation fails, GS_ERR_CUDA with the failing call named in
 * gs_last_error() for CUDA failures, GS_ERR_UNSUPPORTED for an op the backend lacks.
 *
 * GS_ERR_DEVICE_LOST: the context is broken for good -- a CUDA "sticky" error (an illegal
 * address, a launch failure or illegal instruction, a misaligned address, a hardware
 * exception or trap, an uncorrectable ECC error, a lost device). It may come back from any
 * call, or from notify()/sync() for work that was already enqueued, and from then on every
 * call of the context fails with it: nothing short of a new process gets the device back.
 * health() names the cause. A worker fails the task that saw it first and exits
 * (worker/worker.h, GS_WORKER_EXIT_DEVICE_LOST) for its launcher to restart it.
 */
#ifndef GS_CHUNKOPS_H
#define GS_CHUNKOPS_H

#include "graph/kernel.h"

#include <gsched/status.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_chunkops_ctx *gs_chunkops_ctx_h;
typedef struct gs_chunkops_stream *gs_chunkops_stream_h;

/** Completion callback: runs once per notify() with the status of the work enqueued before it
 *  on that stream. For "cuda" it runs on a CUDA runtime thread: it must not call CUDA and
 *  should only hand off (queue + uv_async_send). For "cpu" it runs inside notify(). */
typedef void (*gs_chunkops_done_cb)(gs_status_t status, void *arg);

typedef struct gs_chunkops_params {
    int device;                 /* CUDA device ordinal (ignored by cpu) */
    size_t memory_limit;        /* bytes of backend memory the arena may use; 0 = default */
    int nthreads;               /* cpu: threads a single kernel may use (0 = 1) */
    /* Tests only ("cpu"): a user kernel of this symbol run by the user op (map_blocks) that
     * fails at run time (crashes or exits in its child) loses the context as a GPU's sticky error does: that call returns
     * GS_ERR_DEVICE_LOST and so does every later call. NULL: off. The string must outlive the
     * context. The path of a real device loss can be tested on machines without a GPU. */
    const char *test_lose_device_on;
    /* How file reads reach backend memory ("cuda"; gs_file_path_t): GS_FILE_PATH_AUTO (0)
     * reads with cuFile when GPUDirect Storage is available and stages through page-locked
     * buffers otherwise; PINNED always stages; CUFILE reads with cuFile even in its
     * compatibility mode (no nvidia-fs driver), staging only where cuFile cannot be loaded or
     * the layout needs it. chunkops/cuda/cufile.c states the method. */
    int file_path;
} gs_chunkops_params_t;

/** Requested file read path (gs_chunkops_params_t.file_path; worker --file-path,
 *  GSCHED_FILE_PATH). */
typedef enum gs_file_path {
    GS_FILE_PATH_AUTO = 0,
    GS_FILE_PATH_PINNED = 1,
    GS_FILE_PATH_CUFILE = 2
} gs_file_path_t;

/** The path a file read took (chunkops/fileio.h gs_chunkops_file_read_stats): straight into
 *  host backend memory ("cpu"), staged through page-locked host buffers, cuFile with
 *  GPUDirect Storage, cuFile in its compatibility mode (POSIX reads inside libcufile). */
typedef enum gs_fread_path {
    GS_FREAD_CPU = 0,
    GS_FREAD_PINNED = 1,
    GS_FREAD_CUFILE = 2,
    GS_FREAD_CUFILE_COMPAT = 3,
    GS_FREAD_NPATHS = 4
} gs_fread_path_t;

/** One contiguous byte range of a file and where it goes in backend memory (file_read). */
typedef struct gs_chunkops_fspan {
    int64_t off;                /* byte offset in the file */
    void *dst;                  /* backend memory */
    size_t nbytes;
} gs_chunkops_fspan_t;

/** An exported region of backend memory, meaningful to other processes on the same host
 *  (a cudaIpcMemHandle_t for "cuda"). */
#define GS_IPC_HANDLE_BYTES 64
typedef struct gs_ipc_handle {
    unsigned char bytes[GS_IPC_HANDLE_BYTES];
} gs_ipc_handle_t;

typedef struct gs_chunkops_ops {
    const char *name;           /* "cpu" or "cuda" */

    /** Create a context. *ctx_p written only on success. */
    gs_status_t (*ctx_create)(const gs_chunkops_params_t *params, gs_chunkops_ctx_h *ctx_p);
    /** Destroy; waits for outstanding work; all chunk memory must have been freed. */
    void (*ctx_destroy)(gs_chunkops_ctx_h ctx);

    /** Streams: independent queues of work. */
    gs_status_t (*stream_create)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h *stream_p);
    void (*stream_destroy)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream);

    /** Backend memory for chunks: nbytes may be 0 (returns a unique non-NULL pointer).
     *  Thread-safe. GS_ERR_NO_DEVICE_MEMORY / GS_ERR_NO_MEMORY when it does not fit. */
    gs_status_t (*mem_alloc)(gs_chunkops_ctx_h ctx, size_t nbytes, void **ptr_p);
    void (*mem_free)(gs_chunkops_ctx_h ctx, void *ptr);
    /** Bytes currently allocated and the limit. */
    void (*mem_usage)(gs_chunkops_ctx_h ctx, size_t *used_p, size_t *limit_p);

    /** Copies between host memory and backend memory (enqueued on @a stream). */
    gs_status_t (*copy_to_host)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, void *dst,
                                const void *src, size_t nbytes);
    gs_status_t (*copy_from_host)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, void *dst,
                                  const void *src, size_t nbytes);

    /** Kernels. The spec is copied before return; pointers inside must stay valid until the
     *  work completes (notify). */
    gs_status_t (*fused)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_kfused_t *k);
    gs_status_t (*combine)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                           const gs_kcombine_t *k);
    gs_status_t (*copy)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_kcopy_t *k);
    /** Dense linear algebra (GEMM, QR, SVD; graph/kernel.h). Workspace comes from the
     *  backend's own memory and is released when the work completes. */
    gs_status_t (*linalg)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                          const gs_klinalg_t *k);

    /** Peer access between processes of one host (optional: NULL where unsupported, e.g. "cpu").
     *  ipc_export: a handle for the one region holding every chunk of @a ctx, its first byte
     *  (*base_p) and size; chunk offsets are relative to *base_p. The same on every call.
     *  ipc_open: map a peer's exported region into this process (*ptr_p = its first byte);
     *  GS_ERR_UNSUPPORTED or GS_ERR_CUDA when it cannot be mapped (another host, no peer
     *  access); undo with ipc_close once no copy from it is in flight.
     *  copy_device: copy between backend memory and/or mapped peer memory on @a stream. */
    gs_status_t (*ipc_export)(gs_chunkops_ctx_h ctx, gs_ipc_handle_t *handle_p, void **base_p,
                              size_t *size_p);
    gs_status_t (*ipc_open)(gs_chunkops_ctx_h ctx, const gs_ipc_handle_t *handle, void **ptr_p);
    void (*ipc_close)(gs_chunkops_ctx_h ctx, void *ptr);
    gs_status_t (*copy_device)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, void *dst,
                               const void *src, size_t nbytes);
    /** Page-locked host memory for staging (optional: NULL where plain memory is as good).
     *  Copies between it and backend memory run at full bus speed. Costly to allocate: keep
     *  and reuse. GS_ERR_NO_MEMORY / GS_ERR_CUDA. */
    gs_status_t (*host_alloc)(gs_chunkops_ctx_h ctx, size_t nbytes, void **ptr_p);
    void (*host_free)(gs_chunkops_ctx_h ctx, void *ptr);

    /** Tiering: move chunk bytes between backend memory and plain host memory (the host tier
     *  below a device's memory). Optional: NULL where backend memory is host memory and a
     *  worker has no tier between it and the disk ("cpu" implements them as plain copies
     *  run in the call, for tests of the tiering code in streams mode).
     *  to_host copies @a nbytes of backend memory @a src into host memory @a dst; to_device
     *  copies host memory @a src into backend memory @a dst. The host side may be pageable
     *  memory of any alignment (gs_malloc): the backend stages it through page-locked buffers
     *  that @a stream owns (allocated on its first tier copy, freed with the stream), so the
     *  calling thread never blocks on the copy. Enqueued on @a stream after its earlier work;
     *  both buffers must stay valid and unmodified until notify() on @a stream reports it.
     *  Meant for a stream dedicated to tier moves: the staging serialises them.
     *  GS_ERR_INVALID_PARAM (NULL buffer with nbytes > 0), GS_ERR_NO_MEMORY (no page-locked
     *  staging), GS_ERR_CUDA; on error part of the copy may have been enqueued (the stream's
     *  next notify() reports the error). */
    gs_status_t (*to_host)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, void *dst,
                           const void *src, size_t nbytes);
    gs_status_t (*to_device)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, void *dst,
                             const void *src, size_t nbytes);

    /** Call @a cb(status, arg) once everything enqueued on @a stream so far has finished.
     *  Returns an error (and never calls @a cb) if the notification cannot be registered. */
    gs_status_t (*notify)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                          gs_chunkops_done_cb cb, void *arg);
    /** Block until @a stream is idle; returns the first error of its work. Tests and tools
     *  only: the worker never blocks its loop on this. */
    gs_status_t (*sync)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream);

    /** Page-lock existing host memory (e.g. a client's shared-memory region a direct gather
     *  writes into, worker/xfer/direct.c) so copy_to_host into it runs at full bus speed
     *  (optional: NULL where plain memory is as good). @a ptr .. @a ptr + @a nbytes must stay
     *  mapped until host_unregister, which must come once no copy into it is in flight.
     *  GS_ERR_CUDA when it cannot be registered (the copies then still work, slower). */
    gs_status_t (*host_register)(gs_chunkops_ctx_h ctx, void *ptr, size_t nbytes);
    void (*host_unregister)(gs_chunkops_ctx_h ctx, void *ptr);
    /** Weighted neighbourhood over a padded block (graph/kernel.h gs_kstencil_t). The weights
     *  are read or copied before return (optional: NULL gives GS_ERR_UNSUPPORTED). */
    gs_status_t (*stencil)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                           const gs_kstencil_t *k);
    /** A user kernel (graph/kernel.h gs_kuser_t; optional: NULL gives GS_ERR_UNSUPPORTED).
     *  "cpu" runs it in a forked child (chunkops/cpu/cpu_user.c). */
    gs_status_t (*user)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_kuser_t *k);
    /** A user's CUDA C++ kernel (gs_kuser_t with cuda_src; optional: NULL gives
     *  GS_ERR_UNSUPPORTED). "cuda" compiles it with NVRTC on first use (disk cache:
     *  chunkops/cuda/rtc.h), keeps it loaded for the process and enqueues it on @a stream;
     *  a compile error is GS_ERR_TASK_FAILED with the NVRTC log. The arg bytes are copied
     *  before return. */
    gs_status_t (*cuda_user)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                             const gs_kuser_t *k);
    /** A cumulative sum or product along one axis of a chunk, or a chunk's total along it
     *  (graph/kernel.h gs_kscan_t; optional: NULL gives GS_ERR_UNSUPPORTED). */
    gs_status_t (*scan)(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream, const gs_kscan_t *k);
    /** Read the @a n byte ranges @a spans of the file @a path straight into backend memory,
     *  bytes as stored (optional: NULL where reads are staged through host memory). Blocks the
     *  calling thread until the bytes are in place (call it where blocking is allowed, as
     *  gs_chunkops_file_run does); @a spans need only live until it returns. On success
     *  *@a how_p is the gs_fread_path_t that ran. GS_ERR_UNSUPPORTED (nothing read, *@a how_p
     *  untouched): this context stages file reads (params.file_path, no GPUDirect Storage, no
     *  cuFile library, a file cuFile cannot register): the caller stages. GS_ERR_IO naming
     *  @a path with cuFile's message (a short file is "truncated"), GS_ERR_CUDA; on error the
     *  destination bytes are unspecified. */
    gs_status_t (*file_read)(gs_chunkops_ctx_h ctx, const char *path,
                             const gs_chunkops_fspan_t *spans, size_t n, int *how_p);
    /** Whether the context still works (optional: NULL means it always does). GS_OK, or
     *  GS_ERR_DEVICE_LOST with gs_last_error() naming the cause once it is lost (see
     *  "GS_ERR_DEVICE_LOST" above), e.g. "cuda device 0 is lost: an illegal memory access was
     *  encountered (cudaErrorIllegalAddress)". Thread-safe; never blocks on the device. */
    gs_status_t (*health)(gs_chunkops_ctx_h ctx);
} gs_chunkops_ops_t;

/** The CPU backend (always built). */
extern const gs_chunkops_ops_t gs_chunkops_cpu_ops;

/** Look a backend up by name ("cpu", "cuda"). GS_ERR_NOT_FOUND for unknown names,
 *  GS_ERR_UNSUPPORTED for "cuda" in a build without CUDA. *ops_p is a static table. */
gs_status_t gs_chunkops_find(const char *name, const gs_chunkops_ops_t **ops_p);

/** Number of CUDA devices usable by this build (0 without CUDA or without a GPU). Creates no
 *  context. */
int gs_chunkops_cuda_device_count(void);

/** Validate a kernel spec (shapes, leaf kinds, program well-formed and stack-bounded, reduce
 *  axis, chunk leaf offsets within data_len at the extreme corners of the region).
 *  GS_ERR_INVALID_PARAM with a message naming the problem. Backends call these first. */
gs_status_t gs_kfused_validate(const gs_kfused_t *k);
gs_status_t gs_kcombine_validate(const gs_kcombine_t *k);
gs_status_t gs_kcopy_validate(const gs_kcopy_t *k);
/** A dtype other than float64 that fused spec @a k uses (a leaf, an instruction, a cast
 *  target or the output), or GS_DTYPE_FLOAT64 (0) when it is an all-float64 program. For
 *  backends that execute float64 only. */
int gs_kfused_dtype_other(const gs_kfused_t *k);
/** Whether typed spec @a k is an all-float64 program in disguise: float64 leaves and output,
 *  and its only other dtype the bool of a float64 comparison (or isnan & co.) cast straight
 *  back to float64, as `(x > 0).sum()` lowers. Then *@a out (when not NULL) gets the same
 *  program without those casts, all float64: its values are bit for bit the typed program's
 *  (an all-float64 predicate gives 1.0 / 0.0), and float64-only kernels run it. Returns 0
 *  (nothing written) otherwise. */
int gs_kfused_untype(const gs_kfused_t *k, gs_kfused_t *out);
gs_status_t gs_klinalg_validate(const gs_klinalg_t *k);
gs_status_t gs_kstencil_validate(const gs_kstencil_t *k);
gs_status_t gs_kscan_validate(const gs_kscan_t *k);
/** The GS_ERR_NUMERIC of a Gram-path step 3 whose G_3 is @a dev (max |G_3 - I|) from I: the
 *  input is numerically rank-deficient (graph/kernel.h GS_LA_GRAM_DEV_MAX). Backends share it. */
gs_status_t gs__gram_rank_fail(double dev);
/** The stack an APPLY multiplies, as the state header @a hdr says (a[] or the alternative
 *  stack b[1..]); GS_ERR_INVALID_PARAM for an unknown apply word or a missing alternative. */
gs_status_t gs__la_apply_source(const gs_klinalg_t *k, const double *hdr, const gs_kmat_t **xs_p);
/** Step @a step (2 or 3) on the copied previous header @a hdr: records the step; on the fast
 *  path (returns 1) also the rest (Grams skipped, APPLY of pass 2 nothing, of pass 3 a GEMM of
 *  the input); else returns 0 and the caller factorises. */
int gs__la_step_hdr(double *hdr, int step);

/** Number of partial records a REDUCE terminal produces for @a k (1 for red_axis -1). */
int64_t gs_kfused_nrecords(const gs_kfused_t *k);
/** Number of doubles written to k->out. */
int64_t gs_kfused_out_len(const gs_kfused_t *k);

#ifdef __cplusplus
}
#endif
#endif
