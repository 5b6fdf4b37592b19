/* The task state machine (tasks.c). Not installed. */
#ifndef GS_SCHEDULER_TASKS_H
#define GS_SCHEDULER_TASKS_H

#include "scheduler/sched_int.h"

/* Graph lifetime. */
void gs__graph_free_arrays(gs__graph_t *g);
void gs__graph_accepted(gs_sched_t *s, gs__graph_t *g);
void gs__graph_cancel(gs__graph_t *g, gs_status_t status, const char *fmt, ...) GS_PRINTF(3, 4);
void gs__graph_release(gs__graph_t *g);
void gs__graph_drop_client(gs_sched_t *s, gs__peer_t *client);
void gs__graph_free_all(gs_sched_t *s);

/* The active list: graphs with ready tasks, visited in turn by placement. */
void gs__graph_active_add(gs_sched_t *s, gs__graph_t *g);
void gs__graph_active_del(gs_sched_t *s, gs__graph_t *g);

/* Transitions reported by workers and by the housekeeping timer. */
void gs__sched_task_done(gs_sched_t *s, gs__worker_t *w, const gs_msg_task_done_t *m);
void gs__sched_worker_removed(gs_sched_t *s, gs__worker_t *w);
void gs__sched_retries(gs_sched_t *s, uint64_t now);
void gs__sched_task_timeouts(gs_sched_t *s, uint64_t now, uint64_t stall_ns);
void gs__sched_progress(gs_sched_t *s, uint64_t now, int force);

/* Chunk bookkeeping shared with placement and replication. */
void gs__root_count(gs__graph_t *g, uint32_t t, gs__worker_t *w, uint8_t flag);
void gs__queue_release(gs__worker_t *w, uint64_t graph, uint64_t task);
void gs__sched_flush_releases(gs_sched_t *s);
void gs__replica_set(gs_sched_t *s, gs__graph_t *g, uint32_t t, uint64_t mask);
#ifdef GS_SCHED_CHECK_INVARIANTS
void gs__sched_check_invariants(gs_sched_t *s);
#endif

/* Replica holders of chunk @a t (0 when none). */
static inline uint64_t gs__replica_mask(const gs__graph_t *g, uint32_t t)
{
    uint64_t m;
    if (g->replicas.len == 0 || !gs_u64map_get(&g->replicas, t, &m)) return 0;
    return m;
}

/* Drop (lazily removed) entry @a t, of priority @a p, from ready set @a r. */
static inline void gs__ready_del(gs__graph_t *g, gs__rset_t *r, uint32_t p, uint32_t t)
{
    gs__rset_del(r, p);
    gs_assert(g->nready > 0);
    g->nready--;
    g->tflags[t] &= (uint8_t)~GS__TF_STACKED;
}

#endif
