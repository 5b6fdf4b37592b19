/**
 * Running lowered tasks on a chunkops backend: one task (gs_chunkops_run_ktask), or a whole
 * task graph serially inside the calling process (gs_chunkops_eval) — the reference evaluator
 * used by tests, tools and the embedded mode.
 */
#ifndef GS_CHUNKOPS_EVAL_H
#define GS_CHUNKOPS_EVAL_H

#include "chunkops/chunkops.h"
#include "graph/taskgraph.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Submit the concrete kernel @a t (from gs_layer_instantiate) on @a s: FUSED, COMBINE and
 *  COPY go to the matching op, HOST_DATA to copy_from_host(t->u.host.out, t->u.host.data).
 *  Pointers inside @a t must stay valid until the work completes (notify / sync); @a t itself
 *  may be discarded when this returns. GS_ERR_INVALID_PARAM for an unknown kind or a
 *  malformed spec, otherwise whatever the backend returns. */
gs_status_t gs_chunkops_run_ktask(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                  gs_chunkops_stream_h s, const gs_ktask_t *t);

/** Evaluate task graph @a tg serially on backend @a ops / @a ctx and write the result array
 *  row-major into @a out (caller-owned host memory of at least prod(tg->out_grid.shape)
 *  doubles; @a out_len says how many). Tasks run in id order (topological); each task's
 *  output is allocated with ops->mem_alloc(gs_layer_out_nbytes) and freed as soon as its last
 *  consumer has run; nothing stays allocated when this returns, on success or error.
 *  Errors: GS_ERR_INVALID_PARAM (bad arguments, a task table that does not match its layers,
 *  out_len too small), GS_ERR_UNSUPPORTED (graphs with externals), or the first failing
 *  task's status with gs_last_error() naming the task and the cause. @a out is written only
 *  after every task has succeeded (if copying a result back then fails, its contents are
 *  unspecified). */
gs_status_t gs_chunkops_eval(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                             const gs_taskgraph_t *tg, double *out, size_t out_len);

/** Lower the expression @a array with @a flags (GS_LOWER_*) and evaluate it as
 *  gs_chunkops_eval does, into @a out (caller-owned, @a out_len doubles). When the Gram path
 *  of a tall SVD refuses the input (numerically rank-deficient or too ill-conditioned;
 *  gs_graph_lower_retry_flags), the array is lowered again without GS_LOWER_GRAM_SVD and
 *  evaluated by TSQR, so any finite input gets its SVD. @a array is borrowed. Errors: those of
 *  gs_graph_lower and gs_chunkops_eval (after a fallback, those of the TSQR evaluation). @a out
 *  is written only on success. */
gs_status_t gs_chunkops_eval_array(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                   gs_array_h array, unsigned flags, double *out,
                                   size_t out_len);

#ifdef __cplusplus
}
#endif
#endif
