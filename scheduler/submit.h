/* Submission of graphs (submit.c). Not installed. */
#ifndef GS_SCHEDULER_SUBMIT_H
#define GS_SCHEDULER_SUBMIT_H

#include "scheduler/sched_int.h"

/* Validate @a m and build graph *@a graph_id_p of @a client from it (its ready tasks on the
 * active list). On error nothing is kept and gs_last_error() says why. */
gs_status_t gs__graph_submit(gs_sched_t *s, gs__peer_t *client, const gs_msg_graph_submit_t *m,
                             uint64_t *graph_id_p);

#endif
