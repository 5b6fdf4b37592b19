/* Replicas (replicate.c). Not installed. */
#ifndef GS_SCHEDULER_REPLICATE_H
#define GS_SCHEDULER_REPLICATE_H

#include "scheduler/sched_int.h"

void gs__sched_replicate(gs_sched_t *s, gs__peer_t *client, const gs_msg_replicate_t *m);
void gs__sched_replicate_done(gs_sched_t *s, gs__worker_t *w, const gs_msg_replicate_done_t *m);
/* The target of pending REPLICATEs is gone: their clients get an error. */
void gs__sched_repls_worker_gone(gs_sched_t *s, gs__worker_t *w);

#endif
