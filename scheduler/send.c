/* Sending to a peer: the one place where a failed send closes the connection. */
#include "scheduler/send.h"

#include <string.h>

void gs__sched_send(gs_sched_t *s, gs__peer_t *p, const gs_msg_t *msg)
{
    gs_status_t st;
    (void)s;
    if (p == NULL || p->conn == NULL || p->state == GS__PEER_CLOSING) return;
    st = gs_conn_send(p->conn, msg);
    if (st == GS_OK || st == GS_ERR_CONN_CLOSED) return;
    /* the protocol with this peer is now inconsistent: close it; the cleanup runs from the
     * close callback, never inside whatever graph processing is sending */
    GS_LOG_ERROR("cannot send %s to %s: %s", gs_msg_type_name(msg->type), p->name, gs_last_error());
    gs_conn_close(p->conn, st);
}

void gs__sched_send_error(gs_sched_t *s, gs__peer_t *p, gs_status_t status, const char *text)
{
    gs_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_ERROR;
    msg.u.error.status = status;
    msg.u.error.message.data = (const uint8_t *)text;
    msg.u.error.message.len = strlen(text);
    gs__sched_send(s, p, &msg);
}

void gs__sched_send_data_error(gs_sched_t *s, gs__peer_t *client, uint64_t req, uint64_t graph,
                               uint64_t task, gs_status_t status)
{
    gs_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_DATA;
    msg.u.data.req_id = req;
    msg.u.data.graph_id = graph;
    msg.u.data.task_id = task;
    msg.u.data.status = status;
    gs__sched_send(s, client, &msg);
}
