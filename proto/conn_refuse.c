/*
 * Refusing a connection a server cannot take (proto/conn.h: gs_conn_refuser_t,
 * gs_conn_refuse): libuv accepts nothing more on a listener whose connection callback returned
 * without accepting, so the pending connection is accepted into the refuser's handle and closed.
 */
#include "proto/conn.h"

#include "common/log.h"

#include <inttypes.h>

static void gs__conn_refuse_now(gs_conn_refuser_t *r, uv_stream_t *server);

static void gs__conn_refused_cb(uv_handle_t *handle)
{
    gs_conn_refuser_t *r = handle->data;
    uv_stream_t *server = r->waiting;
    r->closing = 0;
    r->waiting = NULL;
    /* a closed server's pending descriptor was closed with it */
    if (server != NULL && !uv_is_closing((uv_handle_t *)server)) gs__conn_refuse_now(r, server);
    if (!gs_conn_refuser_busy(r) && r->idle_cb != NULL) r->idle_cb(r);
}

/* Accept into the refuser's handle (its memory is the caller's: nothing to allocate) and close
 * it: uv_accept() makes libuv watch @a server again, whatever it returns. */
static void gs__conn_refuse_now(gs_conn_refuser_t *r, uv_stream_t *server)
{
    (void)uv_tcp_init(server->loop, &r->tcp);   /* AF_UNSPEC: creates no socket, cannot fail */
    r->tcp.data = r;
    /* UV_EAGAIN: nothing was pending (accepted before its connection failed); on another
     * failure libuv closed the descriptor */
    if (uv_accept(server, (uv_stream_t *)&r->tcp) != UV_EAGAIN) r->refused_total++;
    r->closing = 1;
    uv_close((uv_handle_t *)&r->tcp, gs__conn_refused_cb);
}

int gs_conn_refuse(gs_conn_refuser_t *r, uv_stream_t *server)
{
    int was_busy;
    if (r == NULL || server == NULL) return 0;
    was_busy = gs_conn_refuser_busy(r);
    if (r->closing) {
        r->waiting = server;   /* one server per refuser: its callback runs once until accepted */
    } else {
        gs__conn_refuse_now(r, server);
    }
    GS_LOG_DEBUG("refused a connection (%" PRIu64 " so far)", r->refused_total);
    return !was_busy;
}

int gs_conn_refuser_busy(const gs_conn_refuser_t *r)
{
    return r != NULL && (r->closing || r->waiting != NULL);
}

