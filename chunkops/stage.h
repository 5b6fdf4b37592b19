/* Users' CPU kernels on backends without a user op (the cuda backend): staged through host
 * memory (stage.c). gs_chunkops_run_ktask() calls these for such backends. */
#ifndef GS_CHUNKOPS_STAGE_H
#define GS_CHUNKOPS_STAGE_H

#include "chunkops/chunkops.h"
#include "graph/kernel.h"

#include <gsched/status.h>

/** Run user kernel @a k (map_blocks) whose inputs and output are memory of backend @a ops:
 *  each input (in_len elements) is copied to a host buffer with ops->copy_to_host on @a s, the
 *  stream is synchronised, the CPU backend's forked-child call runs on the copies, and the
 *  output is copied back with ops->copy_from_host and synchronised. Blocks the calling thread
 *  for all of it; the host buffers are this call's (freed before it returns). Nothing is
 *  written to k->out.data unless the kernel succeeded. Errors: GS_ERR_INVALID_PARAM (a
 *  malformed spec), GS_ERR_NO_MEMORY (host buffers), the backend's copy/sync errors, and
 *  gs__cpu_user_call's (GS_ERR_NOT_FOUND, GS_ERR_TASK_FAILED, GS_ERR_NO_RESOURCE). */
gs_status_t gs_chunkops_stage_user(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                   gs_chunkops_stream_h s, const gs_kuser_t *k);
/** map_overlap: stencil @a k with a user kernel (k->user_lib set), its pieces in backend
 *  memory. Each distinct source buffer of the pieces (its largest src_len) is copied to host
 *  memory, the CPU backend builds the padded block and calls the kernel, the output goes back
 *  as for gs_chunkops_stage_user(). Same blocking, ownership and errors, plus those of
 *  gs_kstencil_validate(); a spec with weights is GS_ERR_INVALID_PARAM. */
gs_status_t gs_chunkops_stage_stencil(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                      gs_chunkops_stream_h s, const gs_kstencil_t *k);

#endif
