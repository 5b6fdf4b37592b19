/* Gathers (gather.c). Not installed. */
#ifndef GS_SCHEDULER_GATHER_H
#define GS_SCHEDULER_GATHER_H

#include "scheduler/sched_int.h"

/* Client gather @a client_req of output @a task of @a g: relayed when the chunk is stored,
 * parked until it is when not, answered with an error when the graph failed. */
void gs__graph_gather(gs__graph_t *g, uint64_t client_req, uint32_t task);
/* The graph's outputs are complete or it failed: answer its parked gathers. */
void gs__graph_flush_parked(gs_sched_t *s, gs__graph_t *g);
/* Worker @a slot is gone: re-route the gathers relayed to it. */
void gs__sched_relays_worker_gone(gs_sched_t *s, uint32_t slot);
/* DATA from worker @a w answering a relayed gather: forwarded to its client. */
void gs__sched_relay_data(gs_sched_t *s, gs__worker_t *w, gs_msg_t *msg);

/* LOCATE_REQ from @a client: answer with one LOCATIONS naming, for each key that is an output of
 * one of its graphs and stored on a live worker with a data address, that worker's address and
 * host and a ticket for the chunk (common/auth.h: gs_auth_gather_ticket); every other key gets an
 * empty address (the client gathers it through GATHER_REQ, which parks or fails it). No direct
 * addresses at all when gsched runs TLS: the data ports are plain TCP. */
void gs__sched_locate(gs_sched_t *s, gs__peer_t *client, const gs_msg_locate_req_t *m);

#endif
