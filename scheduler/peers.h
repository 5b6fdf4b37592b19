/* Connections (peers.c). Not installed. */
#ifndef GS_SCHEDULER_PEERS_H
#define GS_SCHEDULER_PEERS_H

#include "scheduler/sched_int.h"

/* uv_listen callback of the scheduler's server: accept and start the handshake. */
void gs__sched_on_connection(uv_stream_t *server, int status);
/* At most GS__ACCEPTS_PER_ROUND connections are accepted per loop iteration (the rest wait in the
 * listening socket, unwatched, so that one iteration cannot be spent accepting a connect storm
 * while the handshakes of accepted peers wait unread; gs__on_check resets the count): the
 * prepare callback of s->accept_prep, started when a connection was left pending, accepts it
 * before the next poll, and so libuv watches the listening socket again. */
#define GS__ACCEPTS_PER_ROUND 64
void gs__sched_on_accept_prep(uv_prepare_t *prep);
/* Close @a p (once): with @a fmt, ERROR(@a err_status, text) first when @a err_status != 0; its
 * worker is removed and its graphs dropped now, the connection freed from its close callback. */
void gs__peer_close(gs__peer_t *p, gs_status_t reason, gs_status_t err_status, const char *fmt, ...)
    GS_PRINTF(4, 5);
void gs__worker_free(gs__worker_t *w);

#endif
