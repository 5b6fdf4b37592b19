/**
 * Array file tasks (GS_KTASK_FILE_READ / _WRITE / _COMMIT, gs_kfile_t in graph/kernel.h),
 * backend-independent: the I/O runs on the calling thread with pread/pwrite, and data reaches
 * backend memory through the vtable (copy_from_host from page-locked staging, double-buffered,
 * on device backends; directly on "cpu"). chunkops/fileio.c states the method.
 */
#ifndef GS_CHUNKOPS_FILEIO_H
#define GS_CHUNKOPS_FILEIO_H

#include "chunkops/chunkops.h"
#include "graph/taskgraph.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Run file task @a k of ktask kind @a kind on @a s. Blocks the calling thread until the data
 *  is in place (it synchronises @a s on device backends): call it from a pool or launcher
 *  thread, never an event loop. Pointers in @a k need only live until it returns.
 *  Errors: GS_ERR_IO naming the file (cannot open, truncated, short write, rename failed,
 *  byte total wrong), GS_ERR_INVALID_PARAM (a region outside the file), GS_ERR_UNSUPPORTED,
 *  GS_ERR_NO_MEMORY, or the backend's copy error. A failed READ leaves @a k->out unspecified;
 *  a failed COMMIT never renames. */
gs_status_t gs_chunkops_file_run(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                 gs_chunkops_stream_h s, int32_t kind, const gs_kfile_t *k);

#ifdef __cplusplus
}
#endif
#endif
