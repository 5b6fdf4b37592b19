/* Connections (peers.c). Not installed. */
#ifndef GS_SCHEDULER_PEERS_H
#define GS_SCHEDULER_PEERS_H

#include "scheduler/sched_int.h"

/* uv_listen callback of the scheduler's server: accept and start the handshake. */
void gs__sched_on_connection(uv_stream_t *server, int status);
/* Close @a p (once): with @a fmt, ERROR(@a err_status, text) first when @a err_status != 0; its
 * worker is removed and its graphs dropped now, the connection freed from its close callback. */
void gs__peer_close(gs__peer_t *p, gs_status_t reason, gs_status_t err_status, const char *fmt, ...)
    GS_PRINTF(4, 5);
void gs__worker_free(gs__worker_t *w);

#endif
