/* Sending to a peer (send.c). Not installed. */
#ifndef GS_SCHEDULER_SEND_H
#define GS_SCHEDULER_SEND_H

#include "scheduler/sched_int.h"

/* Send @a msg to @a p (nothing when it is closing or gone). A failure other than a closed
 * connection closes the connection; its cleanup runs from the close callback, never inside
 * the caller. */
void gs__sched_send(gs_sched_t *s, gs__peer_t *p, const gs_msg_t *msg);
/* ERROR(@a status, @a text) to @a p. */
void gs__sched_send_error(gs_sched_t *s, gs__peer_t *p, gs_status_t status, const char *text);
/* DATA without bytes: gather @a req of chunk (@a graph, @a task) failed with @a status. */
void gs__sched_send_data_error(gs_sched_t *s, gs__peer_t *client, uint64_t req, uint64_t graph,
                               uint64_t task, gs_status_t status);

#endif
