/*
 * Gathers: a client's request for an output chunk is answered with an error (failed graph),
 * parked until the chunk is (re)computed, or relayed: GATHER_REQ to the worker holding it, its
 * DATA forwarded to the client, at most a window of keys per client in flight.
 */
#include "scheduler/gather.h"

#include "scheduler/send.h"

#include "common/alloc.h"
#include "common/auth.h"

#include <inttypes.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Relay window.                                                                              */

/* Keys of one client requested from workers and not yet written to it: bounds what gsched holds
 * for a gather (the chunks arrive faster than one client connection drains them) and lets the
 * frame buffers of written chunks be reused for the next ones. */
#define GS__RELAY_WINDOW 8u
#define GS__RELAY_WINDOW_BYTES ((uint64_t)1 << 30)  /* ... and about this many bytes (one key always) */

static uint64_t gs__relay_nbytes(const gs__graph_t *g, uint32_t task)
{
    return g != NULL && g->nbytes != NULL && task < g->ntasks ? g->nbytes[task] : 0;
}

/* May @a client have one more relay of @a nbytes out? */
static int gs__relay_fits(const gs__peer_t *client, uint64_t nbytes)
{
    return client->relays_out == 0 ||
           (client->relays_out < GS__RELAY_WINDOW && client->relay_bytes_out <= GS__RELAY_WINDOW_BYTES &&
            nbytes <= GS__RELAY_WINDOW_BYTES - client->relay_bytes_out);
}

/* One of @a client_id's relays (of @a nbytes) is over (written, failed or re-routed): start the
 * waiting ones that fit. */
static void gs__relay_done(gs_sched_t *s, uint64_t client_id, uint64_t nbytes)
{
    uint64_t v;
    gs__peer_t *client;
    if (!gs_u64map_get(&s->clients, client_id, &v)) return;
    client = (gs__peer_t *)(uintptr_t)v;
    gs_assert(client->relays_out > 0);
    if (client->relays_out > 0) client->relays_out--;
    client->relay_bytes_out -= nbytes < client->relay_bytes_out ? nbytes : client->relay_bytes_out;
    while (client->state != GS__PEER_CLOSING && client->relay_wait_head < client->relay_wait.len) {
        gs__relay_wait_t e = client->relay_wait.data[client->relay_wait_head];
        gs__graph_t *g = gs__graph_find(s, e.graph);
        if (!gs__relay_fits(client, gs__relay_nbytes(g, e.task))) break;
        client->relay_wait_head++;
        if (client->relay_wait_head == client->relay_wait.len) client->relay_wait.len = client->relay_wait_head = 0;
        if (g != NULL && g->client == client && e.task < g->ntasks) {
            gs__graph_gather(g, e.client_req, e.task);   /* relays, or parks until recomputed */
        } else {
            gs__sched_send_data_error(s, client, e.client_req, e.graph, e.task, GS_ERR_NOT_FOUND);
        }
    }
}

static void gs__relay_gather(gs_sched_t *s, gs__peer_t *client, uint64_t client_req, gs__graph_t *g,
                             uint32_t task)
{
    uint32_t slot = g->where[task];
    gs__worker_t *w = slot < s->nslots ? s->slots[slot] : NULL;
    gs__relay_t *r;
    uint32_t idx;
    uint64_t keys[2];
    gs_msg_t msg;

    if (w == NULL || g->state[task] != GS__TS_MEMORY) {
        gs__sched_send_data_error(s, client, client_req, g->id, task, GS_ERR_NOT_FOUND);
        return;
    }
    if (!gs__relay_fits(client, gs__relay_nbytes(g, task))) {
        gs__relay_wait_t e = {client_req, g->id, task};
        if (GS_VEC_PUSH(&client->relay_wait, e) != GS_OK) goto err_nomem;
        return;
    }
    if (s->relay_free.len > 0) {
        idx = s->relay_free.data[--s->relay_free.len];
    } else {
        gs__relay_t blank;
        memset(&blank, 0, sizeof blank);
        if (GS_VEC_PUSH(&s->relays, blank) != GS_OK) goto err_nomem;
        idx = (uint32_t)(s->relays.len - 1);
    }
    r = &s->relays.data[idx];
    r->sreq = s->next_sreq++;
    r->client_id = client->id;
    r->client_req = client_req;
    r->graph = g->id;
    r->task = task;
    r->slot = slot;
    r->nbytes = gs__relay_nbytes(g, task);
    if (gs_u64map_put(&s->relay_index, r->sreq, idx) != GS_OK) {
        r->sreq = 0;
        if (GS_VEC_PUSH(&s->relay_free, idx) != GS_OK) GS_LOG_ERROR("out of memory recycling a gather slot");
        goto err_nomem;
    }
    keys[0] = g->id;
    keys[1] = task;
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_GATHER_REQ;
    msg.u.gather_req.req_id = r->sreq;
    msg.u.gather_req.n = 1;
    msg.u.gather_req.keys = keys;
    client->relays_out++;
    client->relay_bytes_out += r->nbytes;
    gs__sched_send(s, w->peer, &msg);
    return;

err_nomem:
    gs__sched_send_data_error(s, client, client_req, g->id, task, GS_ERR_NO_MEMORY);
}

/* ------------------------------------------------------------------------------------------ */
/* Gathers of a graph's outputs.                                                              */

void gs__graph_gather(gs__graph_t *g, uint64_t client_req, uint32_t task)
{
    gs_sched_t *s = g->s;
    gs__parked_t p;
    if (g->phase == GS__GRAPH_FAILED) {
        gs__sched_send_data_error(s, g->client, client_req, g->id, task, g->status);
        return;
    }
    if (g->state[task] == GS__TS_MEMORY) {
        gs__relay_gather(s, g->client, client_req, g, task);
        return;
    }
    p.client_req = client_req;
    p.task = task;
    if (GS_VEC_PUSH(&g->parked, p) != GS_OK) {
        gs__sched_send_data_error(s, g->client, client_req, g->id, task, GS_ERR_NO_MEMORY);
    }
}

void gs__graph_flush_parked(gs_sched_t *s, gs__graph_t *g)
{
    for (size_t i = 0; i < g->parked.len; i++) {
        gs__parked_t *p = &g->parked.data[i];
        if (g->phase == GS__GRAPH_FAILED) {
            gs__sched_send_data_error(s, g->client, p->client_req, g->id, p->task, g->status);
        } else {
            gs__relay_gather(s, g->client, p->client_req, g, p->task);
        }
    }
    g->parked.len = 0;
}

/* Re-route gathers that were waiting on a removed worker. */
void gs__sched_relays_worker_gone(gs_sched_t *s, uint32_t slot)
{
    for (size_t i = 0; i < s->relays.len; i++) {
        gs__relay_t r = s->relays.data[i];
        uint64_t v;
        gs__peer_t *client = NULL;
        gs__graph_t *g;
        if (r.sreq == 0 || r.slot != slot) continue;
        gs_u64map_del(&s->relay_index, r.sreq);
        s->relays.data[i].sreq = 0;
        if (GS_VEC_PUSH(&s->relay_free, (uint32_t)i) != GS_OK) {
            GS_LOG_ERROR("out of memory recycling a gather slot");
        }
        gs__relay_done(s, r.client_id, r.nbytes);
        if (gs_u64map_get(&s->clients, r.client_id, &v)) client = (gs__peer_t *)(uintptr_t)v;
        if (client == NULL) continue;
        g = gs__graph_find(s, r.graph);
        if (g != NULL && g->client == client && r.task < g->ntasks) {
            gs__graph_gather(g, r.client_req, r.task);   /* parks until recomputed */
        } else {
            gs__sched_send_data_error(s, client, r.client_req, r.graph, r.task, GS_ERR_WORKER_LOST);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Relayed data.                                                                              */

/* Relayed DATA at least this large is forwarded without copying its bytes. */
#define GS__RELAY_IN_PLACE_MIN (256u * 1024u)

/* A chunk relayed in place: the worker's frame, kept until written to the client. */
typedef struct gs__relay_sent {
    gs_sched_t *s;
    uint64_t client_id;
    uint64_t nbytes;
    gs_frame_storage_t *frame;
} gs__relay_sent_t;

static void gs__relay_release_cb(void *arg, gs_status_t status)
{
    gs__relay_sent_t *rs = arg;
    (void)status;
    gs_frame_storage_free(rs->frame);   /* reused for the next large frame */
    gs__relay_done(rs->s, rs->client_id, rs->nbytes);
    gs_free(rs);
}

/* Forward DATA @a msg, received from @a w, to @a client: large chunks are written straight from
 * the frame they arrived in (its storage taken from the worker connection), small ones
 * re-encoded. */
static void gs__relay_forward(gs_sched_t *s, gs__worker_t *w, gs__peer_t *client, gs_msg_t *msg,
                              uint64_t nbytes)
{
    gs__relay_sent_t *rs;
    gs_status_t st;
    if (msg->u.data.data.len < GS__RELAY_IN_PLACE_MIN || client->conn == NULL ||
        client->state == GS__PEER_CLOSING || w->peer == NULL || w->peer->conn == NULL ||
        (rs = gs_malloc(sizeof *rs, "relay")) == NULL) {
        gs__sched_send(s, client, msg);
        gs__relay_done(s, client->id, nbytes);
        return;
    }
    if (gs_conn_detach_frame(w->peer->conn, &rs->frame) != GS_OK) {
        gs_free(rs);
        gs__sched_send(s, client, msg);
        gs__relay_done(s, client->id, nbytes);
        return;
    }
    rs->s = s;
    rs->client_id = client->id;
    rs->nbytes = nbytes;
    st = gs_conn_send_data(client->conn, msg, gs__relay_release_cb, rs);
    if (st == GS_OK) return;   /* done when written */
    gs_frame_storage_free(rs->frame);
    gs_free(rs);
    if (st != GS_ERR_CONN_CLOSED) {
        GS_LOG_ERROR("cannot send data to %s: %s", client->name, gs_last_error());
        gs_conn_close(client->conn, st);
    }
    gs__relay_done(s, client->id, nbytes);
}

void gs__sched_relay_data(gs_sched_t *s, gs__worker_t *w, gs_msg_t *msg)
{
    gs_msg_data_t *d = &msg->u.data;
    uint64_t idx, v;
    gs__relay_t r;
    gs__peer_t *client;

    if (!gs_u64map_get(&s->relay_index, d->req_id, &idx)) {
        GS_LOG_DEBUG("data for unknown request %" PRIu64 " from worker %s dropped", d->req_id, w->name);
        return;
    }
    r = s->relays.data[idx];
    if (r.slot != w->slot || d->graph_id != r.graph || d->task_id != r.task) {
        GS_LOG_WARN("worker %s answered request %" PRIu64 " with the wrong key; dropped", w->name, d->req_id);
        return;
    }
    gs_u64map_del(&s->relay_index, d->req_id);
    s->relays.data[idx].sreq = 0;
    if (GS_VEC_PUSH(&s->relay_free, (uint32_t)idx) != GS_OK) GS_LOG_ERROR("out of memory recycling a gather slot");
    if (!gs_u64map_get(&s->clients, r.client_id, &v)) return;
    client = (gs__peer_t *)(uintptr_t)v;
    d->req_id = r.client_req;
    gs__relay_forward(s, w, client, msg, r.nbytes);
}

/* ------------------------------------------------------------------------------------------ */
/* Direct gathers: where each chunk is, and a ticket to fetch it.                             */

void gs__sched_locate(gs_sched_t *s, gs__peer_t *client, const gs_msg_locate_req_t *m)
{
    uint64_t n = m->n;
    uint64_t *nbytes = NULL, *ticket = NULL;
    gs_str_t *addr = NULL, *host = NULL;
    gs_msg_t out;

    if (n > UINT32_MAX / 2) {
        gs__sched_send_data_error(s, client, m->req_id, 0, 0, GS_ERR_INVALID_PARAM);
        return;
    }
    nbytes = gs_calloc(n ? n : 1, sizeof *nbytes, "locations");
    ticket = gs_calloc(n ? n : 1, GS_MSG_TICKET_WORDS * sizeof *ticket, "locations");
    addr = gs_calloc(n ? n : 1, sizeof *addr, "locations");
    host = gs_calloc(n ? n : 1, sizeof *host, "locations");
    if (nbytes == NULL || ticket == NULL || addr == NULL || host == NULL) goto err_free;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t gid = m->keys[2 * i], tid = m->keys[2 * i + 1];
        gs__graph_t *g = gs__graph_find(s, gid);
        gs__worker_t *w;
        uint8_t mac[GS_AUTH_MAC_BYTES];
        addr[i] = (gs_str_t){(const uint8_t *)"", 0};
        host[i] = addr[i];
        if (g == NULL || g->client != client || g->client_released || tid >= g->ntasks ||
            !(g->tflags[tid] & GS__TF_OUTPUT) || g->state[tid] != GS__TS_MEMORY || s->tls != NULL)
            continue;
        w = g->where[tid] < s->nslots ? s->slots[g->where[tid]] : NULL;
        if (w == NULL || w->data_addr == NULL || w->data_addr[0] == '\0') continue;
        if (gs_auth_gather_ticket(s->data_key, client->id, gid, tid, mac) != GS_OK) continue;
        for (unsigned k = 0; k < GS_MSG_TICKET_WORDS; k++) {
            uint64_t v = 0;
            for (int b = 0; b < 8; b++) v |= (uint64_t)mac[8 * k + b] << (8 * b);
            ticket[GS_MSG_TICKET_WORDS * i + k] = v;
        }
        nbytes[i] = gs__relay_nbytes(g, (uint32_t)tid);
        addr[i] = (gs_str_t){(const uint8_t *)w->data_addr, strlen(w->data_addr)};
        host[i] = (gs_str_t){(const uint8_t *)w->host, strlen(w->host)};
    }
    memset(&out, 0, sizeof out);
    out.type = GS_MSG_LOCATIONS;
    out.u.locations.req_id = m->req_id;
    out.u.locations.n = (uint32_t)n;
    out.u.locations.naddr = out.u.locations.nhost = (uint32_t)n;
    out.u.locations.keys = m->keys;
    out.u.locations.nbytes = nbytes;
    out.u.locations.ticket = ticket;
    out.u.locations.addr = addr;
    out.u.locations.host = host;
    gs__sched_send(s, client, &out);
    gs_free(nbytes);
    gs_free(ticket);
    gs_free(addr);
    gs_free(host);
    return;

err_free:
    gs_free(nbytes);
    gs_free(ticket);
    gs_free(addr);
    gs_free(host);
    gs__sched_send_data_error(s, client, m->req_id, 0, 0, GS_ERR_NO_MEMORY);
}
