/**
 * Array file tasks (GS_KTASK_FILE_READ / _WRITE / _COMMIT, gs_kfile_t in graph/kernel.h),
 * backend-independent: the I/O runs on the calling thread with pread/pwrite, and data reaches
 * backend memory through the vtable (file_read straight into device memory where the backend
 * offers it, else copy_from_host from page-locked staging, double-buffered, on device
 * backends; directly on "cpu"). chunkops/fileio.c states the method.
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

/** Bytes file READ tasks of this process have read by each path (gs_fread_path_t: index
 *  GS_FREAD_CPU, _PINNED, _CUFILE, _CUFILE_COMPAT) since it started, into @a bytes_p
 *  (caller-owned, GS_FREAD_NPATHS entries). Thread-safe. */
void gs_chunkops_file_read_stats(uint64_t bytes_p[GS_FREAD_NPATHS]);
/** "cpu", "pinned", "cufile" or "cufile-compat" (static); "unknown" otherwise. */
const char *gs_fread_path_name(int path);
/** Parse "auto", "pinned" or "cufile" into a gs_file_path_t (*path_p written only on success);
 *  GS_ERR_INVALID_PARAM naming the accepted values otherwise. */
gs_status_t gs_file_path_parse(const char *s, int *path_p);

#ifdef __cplusplus
}
#endif
#endif
