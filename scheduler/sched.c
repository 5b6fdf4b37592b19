/*
 * The scheduler's lifecycle, connections, handshake, worker registry, message dispatch, gather
 * relays and housekeeping (heartbeat timeouts, retries, progress). Graph logic is in graph.c.
 */
#include "scheduler/sched_int.h"

#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define GS__HOUSEKEEPING_MS 50u
#define GS__MIN_DEPTH 4u
#define GS__MAX_DEPTH 4096u
#define GS__QUEUE_TARGET_NS 2e6   /* queued work per worker thread the pipeline aims at */

static void gs__peer_close(gs__peer_t *p, gs_status_t reason, gs_status_t err_status, const char *fmt, ...)
    GS_PRINTF(4, 5);

/* ------------------------------------------------------------------------------------------ */
/* Sending.                                                                                   */

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

static void gs__send_error(gs_sched_t *s, gs__peer_t *p, gs_status_t status, const char *text)
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

/* ------------------------------------------------------------------------------------------ */
/* Workers.                                                                                   */

void gs__sched_worker_capacity(gs__worker_t *w)
{
    double per = w->ns_per_task < 250.0 ? 250.0 : w->ns_per_task;
    double depth = GS__QUEUE_TARGET_NS * (double)w->nthreads / per;
    uint32_t d = depth < GS__MIN_DEPTH ? GS__MIN_DEPTH : depth > GS__MAX_DEPTH ? GS__MAX_DEPTH : (uint32_t)depth;
    w->cap = 2 * w->nthreads + d;
    /* refill in batches of at least an eighth of the queue: fewer, larger TASK_ASSIGN (and
     * TASK_DONE) messages when tasks are tiny; 1 for short queues */
    w->refill = w->cap / 8 > 1 ? w->cap / 8 : 1;
}

static void gs__worker_free(gs__worker_t *w)
{
    gs_free(w->name);
    gs_free(w->host);
    gs_free(w->backend);
    gs_free(w->ucx_addr);
    GS_VEC_FREE(&w->b_task_id);
    GS_VEC_FREE(&w->b_task_layer);
    GS_VEC_FREE(&w->b_task_block);
    GS_VEC_FREE(&w->b_dep_off);
    GS_VEC_FREE(&w->b_dep_keys);
    GS_VEC_FREE(&w->b_dep_worker);
    GS_VEC_FREE(&w->b_dep_nbytes);
    GS_VEC_FREE(&w->b_layer_ids);
    GS_VEC_FREE(&w->b_layers);
    GS_VEC_FREE(&w->release_keys);
    gs_free(w);
}

static void gs__peer_info(const gs__worker_t *w, gs_peer_info_t *pi)
{
    pi->id = w->id;
    pi->name.data = (const uint8_t *)w->name;
    pi->name.len = strlen(w->name);
    pi->host.data = (const uint8_t *)w->host;
    pi->host.len = strlen(w->host);
    pi->ucx_address.data = w->ucx_addr;
    pi->ucx_address.len = w->ucx_len;
}

static void gs__broadcast_removed(gs_sched_t *s, uint64_t id)
{
    gs_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_PEERS;
    msg.u.peers.nremoved = 1;
    msg.u.peers.removed = &id;
    for (uint32_t i = 0; i < s->nworkers; i++) gs__sched_send(s, s->live[i]->peer, &msg);
}

static void gs__relay_done(gs_sched_t *s, uint64_t client_id, uint64_t nbytes);

/* Re-route gathers that were waiting on a removed worker. */
static void gs__relays_worker_gone(gs_sched_t *s, uint32_t slot)
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

/* Remove a registered worker: PEERS(removed) to the others, its tasks re-planned, its chunks
 * lost (and recomputed when needed), gathers re-routed. */
static void gs__worker_remove(gs_sched_t *s, gs__worker_t *w, const char *why)
{
    uint32_t slot = w->slot;
    for (uint32_t i = 0; i < s->nworkers; i++) {
        if (s->live[i] == w) {
            s->live[i] = s->live[--s->nworkers];
            break;
        }
    }
    if (!s->stopping) {
        s->st.workers_lost_total++;
        GS_LOG_WARN("worker %s (id %" PRIu64 ") removed: %s", w->name, w->id, why);
        gs__broadcast_removed(s, w->id);
        gs__sched_repls_worker_gone(s, w);
        gs__sched_worker_removed(s, w);
        gs__relays_worker_gone(s, slot);
        if (s->nworkers == 0 && s->ngraphs_active > 0) {
            GS_LOG_WARN("no workers left; %" PRIu64 " graphs wait for workers", s->ngraphs_active);
        }
    }
    s->slots[slot] = NULL;
    if (w->peer != NULL) w->peer->worker = NULL;
    gs__worker_free(w);
}

static gs_status_t gs__slots_grow(gs_sched_t *s)
{
    uint32_t n = s->nslots ? 2 * s->nslots : 8;
    gs__worker_t **slots = gs_realloc(s->slots, gs_size_mul(n, sizeof *slots), "sched slots");
    if (slots == NULL) return GS_ERR_NO_MEMORY;
    s->slots = slots;
    gs__worker_t **live = gs_realloc(s->live, gs_size_mul(n, sizeof *live), "sched live");
    if (live == NULL) return GS_ERR_NO_MEMORY;
    s->live = live;
    uint64_t *bytes = gs_realloc(s->bytes_by_slot, gs_size_mul(n, sizeof *bytes), "sched bytes");
    if (bytes == NULL) return GS_ERR_NO_MEMORY;
    s->bytes_by_slot = bytes;
    {
        /* the pair matrices change stride: copy the old rows */
        double *bw = gs_calloc(gs_size_mul(n, n), sizeof *bw, "sched bandwidth");
        uint8_t *meas = gs_calloc(gs_size_mul(n, n), 1, "sched bandwidth measured");
        if (bw == NULL || meas == NULL) {
            gs_free(bw);
            gs_free(meas);
            return GS_ERR_NO_MEMORY;
        }
        for (uint32_t i = 0; i < s->nslots; i++) {
            memcpy(bw + (size_t)i * n, s->bw + (size_t)i * s->nslots, s->nslots * sizeof *bw);
            memcpy(meas + (size_t)i * n, s->bw_measured + (size_t)i * s->nslots, s->nslots);
        }
        gs_free(s->bw);
        gs_free(s->bw_measured);
        s->bw = bw;
        s->bw_measured = meas;
    }
    memset(s->slots + s->nslots, 0, (size_t)(n - s->nslots) * sizeof *slots);
    memset(s->bytes_by_slot + s->nslots, 0, (size_t)(n - s->nslots) * sizeof *bytes);
    s->nslots = n;
    return GS_OK;
}

static char *gs__strndup(const gs_str_t *str, const char *what)
{
    char *p = gs_malloc(str->len + 1, what);
    if (p == NULL) return NULL;
    if (str->len) memcpy(p, str->data, str->len);
    p[str->len] = '\0';
    return p;
}

static void gs__worker_register(gs_sched_t *s, gs__peer_t *p, const gs_msg_worker_register_t *m)
{
    gs__worker_t *w;
    uint32_t slot;
    gs_msg_t msg;

    if (p->worker != NULL) {
        gs__peer_close(p, GS_ERR_PROTO, GS_ERR_PROTO, "worker registered twice");
        return;
    }
    if (m->name.len > 0) {
        for (uint32_t i = 0; i < s->nworkers; i++) {
            gs__worker_t *old = s->live[i];
            if (strlen(old->name) == m->name.len && memcmp(old->name, m->name.data, m->name.len) == 0) {
                GS_LOG_WARN("worker %s registers again from %s: replacing the old registration",
                            old->name, gs_conn_peer_name(p->conn));
                gs__peer_close(old->peer, GS_ERR_EXISTS, GS_ERR_EXISTS,
                               "replaced by a new worker registered under the same name");
                break;
            }
        }
    }
    for (slot = 0; slot < s->nslots && s->slots[slot] != NULL; slot++) {}
    if (slot == s->nslots && gs__slots_grow(s) != GS_OK) goto err_nomem;
    w = gs_calloc(1, sizeof *w, "worker");
    if (w == NULL) goto err_nomem;
    w->s = s;
    w->slot = slot;
    w->id = p->id;
    w->peer = p;
    w->name = m->name.len ? gs__strndup(&m->name, "worker name") : NULL;
    if (w->name == NULL) {
        char tmp[32];
        snprintf(tmp, sizeof tmp, "worker-%" PRIu64, p->id);
        w->name = gs_strdup(tmp, "worker name");
    }
    w->host = gs__strndup(&m->host, "worker host");
    w->backend = gs__strndup(&m->backend, "worker backend");
    w->ucx_addr = gs_malloc(m->ucx_address.len ? m->ucx_address.len : 1, "worker ucx address");
    if (w->name == NULL || w->host == NULL || w->backend == NULL || w->ucx_addr == NULL ||
        GS_VEC_RESERVE(&w->b_dep_off, 2) != GS_OK) {
        gs__worker_free(w);
        goto err_nomem;
    }
    if (m->ucx_address.len) memcpy(w->ucx_addr, m->ucx_address.data, m->ucx_address.len);
    w->ucx_len = m->ucx_address.len;
    w->device = m->device;
    w->nthreads = m->nthreads ? m->nthreads : 1;
    if (w->nthreads > 4096) w->nthreads = 4096;
    w->pid = m->pid;
    w->memory_limit = m->memory_limit;
    w->ns_per_task = 1e6;   /* until measured: 1 ms per task */
    gs__sched_worker_capacity(w);
    snprintf(p->name, sizeof p->name, "worker %s", w->name);

    /* PEERS: the newcomer learns everyone (itself included), the others learn the newcomer */
    s->peer_infos.len = 0;
    if (GS_VEC_RESERVE(&s->peer_infos, (size_t)s->nworkers + 1) != GS_OK) {
        gs__worker_free(w);
        goto err_nomem;
    }
    s->slots[slot] = w;
    s->live[s->nworkers++] = w;
    p->worker = w;
    gs__bw_reset_slot(s, slot);
    s->warned_no_workers = 0;
    for (uint32_t i = 0; i < s->nworkers; i++) gs__peer_info(s->live[i], &s->peer_infos.data[i]);
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_PEERS;
    msg.u.peers.nadded = s->nworkers;
    msg.u.peers.added = s->peer_infos.data;
    gs__sched_send(s, p, &msg);
    msg.u.peers.nadded = 1;
    msg.u.peers.added = &s->peer_infos.data[s->nworkers - 1];
    for (uint32_t i = 0; i + 1 < s->nworkers; i++) gs__sched_send(s, s->live[i]->peer, &msg);
    GS_LOG_INFO("worker %s (id %" PRIu64 ", %s, %u threads, backend %s) registered from %s", w->name, w->id,
                w->host, w->nthreads, w->backend, gs_conn_peer_name(p->conn));
    return;

err_nomem:
    gs__peer_close(p, GS_ERR_NO_MEMORY, GS_ERR_NO_MEMORY, "scheduler out of memory registering the worker");
}

/* ------------------------------------------------------------------------------------------ */
/* Gather relays.                                                                             */

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

void gs__sched_relay_gather(gs_sched_t *s, gs__peer_t *client, uint64_t client_req, gs__graph_t *g,
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

static void gs__relay_data(gs_sched_t *s, gs__worker_t *w, gs_msg_t *msg)
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
/* Peers (connections).                                                                       */

static void gs__peer_close(gs__peer_t *p, gs_status_t reason, gs_status_t err_status, const char *fmt, ...)
{
    char text[512];
    if (p->state == GS__PEER_CLOSING) return;
    text[0] = '\0';
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        if (err_status != 0) gs__send_error(p->s, p, err_status, text);
        GS_LOG_INFO("closing %s (%s): %s", p->name, p->conn ? gs_conn_peer_name(p->conn) : "?", text);
    }
    {
        int was_client = p->state == GS__PEER_CLIENT;
        p->state = GS__PEER_CLOSING;
        if (p->worker != NULL) gs__worker_remove(p->s, p->worker, text[0] ? text : gs_status_string(reason));
        if (was_client) {
            gs_u64map_del(&p->s->clients, p->id);
            p->s->nclients--;
            gs__graph_drop_client(p->s, p);
        }
    }
    /* flush (the ERROR) on protocol refusals; drop queued writes on failures */
    if (p->conn != NULL) gs_conn_close(p->conn, fmt != NULL && err_status != 0 ? GS_OK : reason);
}

static void gs__refuse(gs__peer_t *p, gs_status_t status, const char *fmt, ...) GS_PRINTF(3, 4);
static void gs__refuse(gs__peer_t *p, gs_status_t status, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    p->s->st.refused_total++;
    gs__peer_close(p, status, status, "%s", text);
}

static int gs__token_equal(const gs_sched_t *s, const gs_str_t *tok)
{
    /* constant time in the secret: every presented byte is compared (against the secret or its
     * terminating NUL), lengths folded in */
    volatile uint8_t diff = (uint8_t)((s->token_len ^ tok->len) != 0);
    for (size_t i = 0; i < tok->len; i++) {
        size_t j = i < s->token_len ? i : s->token_len;
        diff |= (uint8_t)(tok->data[i] ^ (uint8_t)s->token[j]);
    }
    return diff == 0;
}

static void gs__handshake(gs_sched_t *s, gs__peer_t *p, const gs_msg_t *msg)
{
    const gs_msg_hello_t *h = &msg->u.hello;
    gs_msg_t out;
    size_t nlen;

    if (msg->type != GS_MSG_HELLO) {
        gs__refuse(p, GS_ERR_PROTO, "the first message must be hello, not %s", gs_msg_type_name(msg->type));
        return;
    }
    if (h->version != GS_PROTO_VERSION) {
        gs__refuse(p, GS_ERR_VERSION, "protocol version %u is not supported (gsched speaks %u)", h->version,
                   GS_PROTO_VERSION);
        return;
    }
    if (!gs__token_equal(s, &h->token)) {
        gs__refuse(p, GS_ERR_AUTH, "wrong cluster token");
        return;
    }
    if (h->role != GS_ROLE_CLIENT && h->role != GS_ROLE_WORKER) {
        gs__refuse(p, GS_ERR_PROTO, "unknown role %u", h->role);
        return;
    }
    p->id = s->next_peer_id++;
    nlen = h->name.len < 40 ? h->name.len : 40;
    snprintf(p->name, sizeof p->name, "%s %" PRIu64 " %.*s", h->role == GS_ROLE_CLIENT ? "client" : "worker",
             p->id, (int)nlen, h->name.data ? (const char *)h->name.data : "");
    if (h->role == GS_ROLE_CLIENT) {
        if (gs_u64map_put(&s->clients, p->id, (uint64_t)(uintptr_t)p) != GS_OK) {
            gs__peer_close(p, GS_ERR_NO_MEMORY, GS_ERR_NO_MEMORY, "scheduler out of memory");
            return;
        }
        p->state = GS__PEER_CLIENT;
        s->nclients++;
    } else {
        p->state = GS__PEER_WORKER;
    }
    gs_conn_set_max_frame(p->conn, s->max_frame);   /* handshaken: the normal frame limit */
    memset(&out, 0, sizeof out);
    out.type = GS_MSG_WELCOME;
    out.u.welcome.version = GS_PROTO_VERSION;
    out.u.welcome.id = p->id;
    out.u.welcome.heartbeat_ms = s->heartbeat_ms;
    gs__sched_send(s, p, &out);
    GS_LOG_INFO("%s connected from %s", p->name, gs_conn_peer_name(p->conn));
}

static void gs__send_info(gs_sched_t *s, gs__peer_t *p)
{
    gs_msg_t msg;
    s->names.len = 0;
    if (GS_VEC_RESERVE(&s->names, (size_t)s->nworkers + 1) != GS_OK) {
        gs__send_error(s, p, GS_ERR_NO_MEMORY, "scheduler out of memory answering info");
        return;
    }
    for (uint32_t i = 0; i < s->nworkers; i++) {
        s->names.data[i].data = (const uint8_t *)s->live[i]->name;
        s->names.data[i].len = strlen(s->live[i]->name);
    }
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_INFO;
    msg.u.info.nworkers = s->nworkers;
    msg.u.info.nclients = s->nclients;
    msg.u.info.ngraphs_active = s->ngraphs_active;
    msg.u.info.tasks_done_total = s->st.tasks_done_total;
    msg.u.info.nnames = s->nworkers;
    msg.u.info.worker_names = s->names.data;
    gs__sched_send(s, p, &msg);
}

/* WORKERS: every live worker (scratch tables are rebuilt per request; rare). */
static void gs__send_workers(gs_sched_t *s, gs__peer_t *p)
{
    uint32_t n = s->nworkers;
    size_t nn = n ? n : 1;
    uint64_t *ids = gs_calloc(nn, sizeof *ids, "workers ids");
    int32_t *dev = gs_calloc(nn, sizeof *dev, "workers devices");
    uint32_t *thr = gs_calloc(nn, sizeof *thr, "workers threads");
    uint64_t *lim = gs_calloc(nn, sizeof *lim, "workers limits");
    uint64_t *used = gs_calloc(nn, sizeof *used, "workers used");
    gs_str_t *strs = gs_calloc(4 * nn, sizeof *strs, "workers strings");
    gs_msg_t msg;
    if (ids == NULL || dev == NULL || thr == NULL || lim == NULL || used == NULL || strs == NULL) {
        gs__send_error(s, p, GS_ERR_NO_MEMORY, "scheduler out of memory answering workers-req");
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        const gs__worker_t *w = s->live[i];
        const char *addr = w->peer != NULL && w->peer->conn != NULL ? gs_conn_peer_name(w->peer->conn) : "?";
        ids[i] = w->id;
        dev[i] = w->device;
        thr[i] = w->nthreads;
        lim[i] = w->memory_limit;
        used[i] = w->mem_used;
        strs[i] = (gs_str_t){(const uint8_t *)w->name, strlen(w->name)};
        strs[nn + i] = (gs_str_t){(const uint8_t *)w->host, strlen(w->host)};
        strs[2 * nn + i] = (gs_str_t){(const uint8_t *)w->backend, strlen(w->backend)};
        strs[3 * nn + i] = (gs_str_t){(const uint8_t *)addr, strlen(addr)};
    }
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_WORKERS;
    msg.u.workers = (gs_msg_workers_t){.n = n, .id = ids, .device = dev, .nthreads = thr, .memory_limit = lim,
                                       .mem_used = used, .nname = n, .nhost = n, .nbackend = n, .naddr = n,
                                       .name = strs, .host = strs + nn, .backend = strs + 2 * nn,
                                       .addr = strs + 3 * nn};
    gs__sched_send(s, p, &msg);
out:
    gs_free(ids);
    gs_free(dev);
    gs_free(thr);
    gs_free(lim);
    gs_free(used);
    gs_free(strs);
}

static gs__graph_t *gs__client_graph(gs_sched_t *s, gs__peer_t *p, uint64_t id)
{
    gs__graph_t *g = gs__graph_find(s, id);
    return g != NULL && g->client == p ? g : NULL;
}

static void gs__client_msg(gs_sched_t *s, gs__peer_t *p, gs_msg_t *msg)
{
    switch (msg->type) {
    case GS_MSG_GRAPH_SUBMIT: {
        const gs_msg_graph_submit_t *m = &msg->u.graph_submit;
        uint64_t gid;
        gs_status_t st = gs__graph_submit(s, p, m, &gid);
        if (st != GS_OK) {
            char text[768];
            snprintf(text, sizeof text, "graph submission (client ref %" PRIu64 ") rejected: %s", m->client_ref,
                     gs_last_error());
            GS_LOG_INFO("%s: %s", p->name, text);
            gs__send_error(s, p, st, text);
        } else {
            gs_msg_t out;
            gs__graph_t *g = gs__graph_find(s, gid);
            memset(&out, 0, sizeof out);
            out.type = GS_MSG_GRAPH_ACCEPTED;
            out.u.graph_accepted.client_ref = m->client_ref;
            out.u.graph_accepted.graph_id = gid;
            gs__sched_send(s, p, &out);
            GS_LOG_DEBUG("graph %" PRIu64 " accepted from %s: %" PRIu64 " tasks, %" PRIu64 " outputs", gid,
                         p->name, m->ntasks, m->noutputs);
            if (g != NULL) gs__graph_accepted(s, g);
        }
        break;
    }
    case GS_MSG_GATHER_REQ: {
        const gs_msg_gather_req_t *m = &msg->u.gather_req;
        for (uint64_t i = 0; i < m->n && p->state == GS__PEER_CLIENT; i++) {
            uint64_t gid = m->keys[2 * i], tid = m->keys[2 * i + 1];
            gs__graph_t *g = gs__client_graph(s, p, gid);
            if (g == NULL || g->client_released || tid >= g->ntasks || !(g->tflags[tid] & GS__TF_OUTPUT)) {
                gs__sched_send_data_error(s, p, m->req_id, gid, tid, GS_ERR_NOT_FOUND);
                continue;
            }
            gs__graph_gather(g, m->req_id, (uint32_t)tid);
        }
        break;
    }
    case GS_MSG_CANCEL: {
        gs__graph_t *g = gs__client_graph(s, p, msg->u.cancel.graph_id);
        if (g != NULL && g->phase == GS__GRAPH_RUNNING) {
            gs__graph_cancel(g, GS_ERR_CANCELED, "graph %" PRIu64 " canceled by the client", g->id);
        }
        break;
    }
    case GS_MSG_RELEASE_GRAPH: {
        gs__graph_t *g = gs__client_graph(s, p, msg->u.cancel.graph_id);
        if (g != NULL) gs__graph_release(g);
        break;
    }
    case GS_MSG_INFO_REQ:
        gs__send_info(s, p);
        break;
    case GS_MSG_WORKERS_REQ:
        gs__send_workers(s, p);
        break;
    case GS_MSG_REPLICATE:
        gs__sched_replicate(s, p, &msg->u.replicate);
        break;
    case GS_MSG_HEARTBEAT:
        break;
    default:
        gs__peer_close(p, GS_ERR_PROTO, GS_ERR_PROTO, "unexpected %s from a client", gs_msg_type_name(msg->type));
        break;
    }
}

static void gs__worker_msg(gs_sched_t *s, gs__peer_t *p, gs_msg_t *msg)
{
    if (msg->type == GS_MSG_WORKER_REGISTER) {
        gs__worker_register(s, p, &msg->u.worker_register);
        return;
    }
    if (msg->type == GS_MSG_HEARTBEAT) {
        if (p->worker != NULL) {
            gs__worker_t *w = p->worker;
            w->mem_used = msg->u.heartbeat.mem_used;
            /* what is not a root chunk counted here (earlier TASK_DONEs of this connection have
             * been processed; chunks released but not yet dropped there count as other) */
            w->mem_other = w->mem_used > w->roots.held_bytes ? w->mem_used - w->roots.held_bytes : 0;
            if (msg->u.heartbeat.mem_limit > 0) w->memory_limit = msg->u.heartbeat.mem_limit;
        }
        return;
    }
    if (p->worker == NULL) {
        gs__peer_close(p, GS_ERR_PROTO, GS_ERR_PROTO, "%s before worker-register", gs_msg_type_name(msg->type));
        return;
    }
    switch (msg->type) {
    case GS_MSG_TASK_DONE:
        gs__sched_task_done(s, p->worker, &msg->u.task_done);
        break;
    case GS_MSG_DATA:
        gs__relay_data(s, p->worker, msg);
        break;
    case GS_MSG_BANDWIDTH:
        gs__sched_bandwidth(s, p->worker, &msg->u.bandwidth);
        break;
    case GS_MSG_REPLICATE_DONE:
        gs__sched_replicate_done(s, p->worker, &msg->u.replicate_done);
        break;
    default:
        gs__peer_close(p, GS_ERR_PROTO, GS_ERR_PROTO, "unexpected %s from a worker", gs_msg_type_name(msg->type));
        break;
    }
}

static void gs__on_msg(gs_conn_t *conn, gs_msg_t *msg, void *arg)
{
    gs__peer_t *p = arg;
    gs_sched_t *s = p->s;
    (void)conn;
    if (p->state == GS__PEER_CLOSING) return;   /* nothing after a refusal is processed */
    p->last_seen_ns = gs_now_ns();
    switch (p->state) {
    case GS__PEER_HANDSHAKE:
        gs__handshake(s, p, msg);
        break;
    case GS__PEER_CLIENT:
        gs__client_msg(s, p, msg);
        break;
    case GS__PEER_WORKER:
        gs__worker_msg(s, p, msg);
        break;
    default:
        break;
    }
}

static void gs__on_close(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    gs__peer_t *p = arg;
    gs_sched_t *s = p->s;
    (void)conn;
    p->conn = NULL;
    if (p->state == GS__PEER_HANDSHAKE && reason != GS_OK && reason != GS_ERR_CONN_CLOSED) {
        s->st.refused_total++;   /* oversized or malformed frame before the handshake */
        GS_LOG_INFO("%s closed before the handshake: %s", p->name, gs_status_string(reason));
    }
    if (p->state != GS__PEER_CLOSING) {
        const char *why = reason == GS_ERR_CONN_CLOSED ? "connection closed" : gs_status_string(reason);
        int was_client = p->state == GS__PEER_CLIENT;
        p->state = GS__PEER_CLOSING;
        if (p->worker != NULL) gs__worker_remove(s, p->worker, why);
        if (was_client) {
            gs_u64map_del(&s->clients, p->id);
            s->nclients--;
            GS_LOG_INFO("%s disconnected (%s)", p->name, why);
            gs__graph_drop_client(s, p);
        }
    }
    if (p->prev) p->prev->next = p->next;
    else s->peers = p->next;
    if (p->next) p->next->prev = p->prev;
    s->nconns--;
    GS_VEC_FREE(&p->relay_wait);
    gs_free(p);
    if (!s->stopping) gs__sched_tick(s);
}

static void gs__on_connection(uv_stream_t *server, int status)
{
    gs_sched_t *s = server->data;
    gs__peer_t *p;
    gs_conn_params_t cp;
    gs_status_t st;

    if (status < 0) {
        GS_LOG_WARN("accept failed: %s", uv_strerror(status));
        return;
    }
    p = gs_calloc(1, sizeof *p, "peer");
    if (p == NULL) {
        GS_LOG_ERROR("out of memory accepting a connection");
        return;
    }
    p->s = s;
    p->state = GS__PEER_HANDSHAKE;
    p->t_connect_ns = p->last_seen_ns = gs_now_ns();
    snprintf(p->name, sizeof p->name, "new connection");
    memset(&cp, 0, sizeof cp);
    cp.msg_cb = gs__on_msg;
    cp.close_cb = gs__on_close;
    cp.arg = p;
    /* until the handshake: small frames only (GS_SCHED_HELLO_MAX_FRAME) */
    cp.max_frame = s->max_frame < GS_SCHED_HELLO_MAX_FRAME ? s->max_frame : GS_SCHED_HELLO_MAX_FRAME;
    st = gs_conn_accept(server, &cp, &p->conn);
    if (st != GS_OK) {
        GS_LOG_WARN("cannot accept a connection: %s", gs_last_error());
        gs_free(p);
        return;
    }
    gs_conn_set_data(p->conn, p);
    p->next = s->peers;
    if (s->peers) s->peers->prev = p;
    s->peers = p;
    s->nconns++;
    if (s->stopping) gs__peer_close(p, GS_OK, 0, NULL);
}

/* ------------------------------------------------------------------------------------------ */
/* Housekeeping and the per-iteration tick.                                                   */

static void gs__on_timer(uv_timer_t *timer)
{
    gs_sched_t *s = timer->data;
    uint64_t now = gs_now_ns();
    uint64_t hb_ns = (uint64_t)s->heartbeat_timeout_ms * 1000000ull;
    uint64_t hs_ns = (uint64_t)s->handshake_timeout_ms * 1000000ull;
    gs__peer_t *p = s->peers;

    while (p != NULL) {
        gs__peer_t *next = p->next;   /* closing never frees synchronously */
        if (p->state == GS__PEER_WORKER && p->worker != NULL && now - p->last_seen_ns > hb_ns) {
            GS_LOG_WARN("worker %s missed heartbeats for %u ms", p->worker->name, s->heartbeat_timeout_ms);
            gs__peer_close(p, GS_ERR_TIMED_OUT, 0, NULL);
        } else if (p->state == GS__PEER_HANDSHAKE && now - p->t_connect_ns > hs_ns) {
            s->st.refused_total++;
            gs__peer_close(p, GS_ERR_TIMED_OUT, GS_ERR_TIMED_OUT, "no hello within %u ms", s->handshake_timeout_ms);
        } else if (p->state == GS__PEER_WORKER && p->worker == NULL && now - p->t_connect_ns > hs_ns) {
            gs__peer_close(p, GS_ERR_TIMED_OUT, GS_ERR_TIMED_OUT, "no worker-register within %u ms",
                           s->handshake_timeout_ms);
        }
        p = next;
    }
    gs__sched_retries(s, now);
    gs__sched_progress(s, now, 0);
    gs__sched_tick(s);
}

static void gs__on_check(uv_check_t *check)
{
    gs__sched_tick(check->data);
}

/* ------------------------------------------------------------------------------------------ */
/* Public API.                                                                                */

static gs_status_t gs__parse_host(const char *host, int port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0) return GS_OK;
    if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0) return GS_OK;
    return gs_error_set(GS_ERR_INVALID_PARAM, "host '%s' is not a numeric IPv4 or IPv6 address", host);
}

gs_status_t gs_sched_create(const gs_sched_params_t *params, uv_loop_t *loop, gs_sched_h *sched_p)
{
    gs_sched_params_t prm;
    gs_sched_t *s;
    struct sockaddr_storage ss;
    gs_status_t st;

    if (loop == NULL || sched_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_create: NULL argument");
    memset(&prm, 0, sizeof prm);
    prm.host = "0.0.0.0";
    prm.port = GS_SCHED_DEFAULT_PORT;
    prm.token = "";
    prm.heartbeat_ms = GS_SCHED_DEFAULT_HEARTBEAT_MS;
    prm.heartbeat_timeout_ms = GS_SCHED_DEFAULT_HEARTBEAT_TIMEOUT_MS;
    prm.allowed_failures = GS_SCHED_DEFAULT_ALLOWED_FAILURES;
    prm.max_frame = GS_PROTO_DEFAULT_MAX_FRAME;
    prm.handshake_timeout_ms = GS_SCHED_DEFAULT_HANDSHAKE_TIMEOUT_MS;
    prm.bw_cpu_local_gbps = GS_SCHED_DEFAULT_BW_CPU_LOCAL_GBPS;
    prm.bw_cpu_remote_gbps = GS_SCHED_DEFAULT_BW_CPU_REMOTE_GBPS;
    prm.bw_gpu_local_gbps = GS_SCHED_DEFAULT_BW_GPU_LOCAL_GBPS;
    prm.bw_gpu_remote_gbps = GS_SCHED_DEFAULT_BW_GPU_REMOTE_GBPS;
    prm.xfer_latency_us = GS_SCHED_DEFAULT_XFER_LATENCY_US;
    if (params != NULL) {
        uint32_t fm = params->field_mask;
        if (fm & GS_SCHED_FIELD_HOST) prm.host = params->host;
        if (fm & GS_SCHED_FIELD_PORT) prm.port = params->port;
        if (fm & GS_SCHED_FIELD_TOKEN) prm.token = params->token ? params->token : "";
        if (fm & GS_SCHED_FIELD_HEARTBEAT_MS) prm.heartbeat_ms = params->heartbeat_ms;
        if (fm & GS_SCHED_FIELD_HEARTBEAT_TIMEOUT_MS) prm.heartbeat_timeout_ms = params->heartbeat_timeout_ms;
        if (fm & GS_SCHED_FIELD_ALLOWED_FAILURES) prm.allowed_failures = params->allowed_failures;
        if (fm & GS_SCHED_FIELD_MAX_FRAME) prm.max_frame = params->max_frame ? params->max_frame : GS_PROTO_DEFAULT_MAX_FRAME;
        if (fm & GS_SCHED_FIELD_HANDSHAKE_TIMEOUT_MS) prm.handshake_timeout_ms = params->handshake_timeout_ms;
        if (fm & GS_SCHED_FIELD_BW_PRIORS) {
            prm.bw_cpu_local_gbps = params->bw_cpu_local_gbps;
            prm.bw_cpu_remote_gbps = params->bw_cpu_remote_gbps;
            prm.bw_gpu_local_gbps = params->bw_gpu_local_gbps;
            prm.bw_gpu_remote_gbps = params->bw_gpu_remote_gbps;
        }
        if (fm & GS_SCHED_FIELD_XFER_LATENCY_US) prm.xfer_latency_us = params->xfer_latency_us;
    }
    if (!(prm.bw_cpu_local_gbps > 0 && prm.bw_cpu_remote_gbps > 0 && prm.bw_gpu_local_gbps > 0 &&
          prm.bw_gpu_remote_gbps > 0 && prm.bw_cpu_local_gbps < 1e9 && prm.bw_cpu_remote_gbps < 1e9 &&
          prm.bw_gpu_local_gbps < 1e9 && prm.bw_gpu_remote_gbps < 1e9)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "bandwidth priors must be positive GB/s figures");
    }
    if (prm.host == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "host is NULL");
    if (prm.port < 0 || prm.port > 65535) return gs_error_set(GS_ERR_INVALID_PARAM, "port %d is not in 0..65535", prm.port);
    if ((st = gs__parse_host(prm.host, prm.port, &ss)) != GS_OK) return st;
    if (prm.heartbeat_ms == 0) return gs_error_set(GS_ERR_INVALID_PARAM, "heartbeat interval must be > 0");
    if (prm.heartbeat_timeout_ms <= prm.heartbeat_ms) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "heartbeat timeout (%u ms) must exceed the interval (%u ms)",
                            prm.heartbeat_timeout_ms, prm.heartbeat_ms);
    }
    if (prm.allowed_failures > 250) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "allowed failures %u is more than 250", prm.allowed_failures);
    }
    if (prm.handshake_timeout_ms == 0) return gs_error_set(GS_ERR_INVALID_PARAM, "handshake timeout must be > 0");
    if (strlen(prm.token) > 4096) return gs_error_set(GS_ERR_INVALID_PARAM, "token longer than 4096 bytes");

    s = gs_calloc(1, sizeof *s, "scheduler");
    if (s == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the scheduler");
    s->loop = loop;
    s->host = gs_strdup(prm.host, "sched host");
    s->token = gs_strdup(prm.token, "sched token");
    if (s->host == NULL || s->token == NULL) {
        gs_free(s->host);
        gs_free(s->token);
        gs_free(s);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the scheduler");
    }
    s->token_len = strlen(s->token);
    s->port = prm.port;
    s->bound_port = -1;
    s->heartbeat_ms = prm.heartbeat_ms;
    s->heartbeat_timeout_ms = prm.heartbeat_timeout_ms;
    s->allowed_failures = prm.allowed_failures;
    s->max_frame = prm.max_frame;
    s->handshake_timeout_ms = prm.handshake_timeout_ms;
    s->bw_prior[GS__BW_CPU_LOCAL] = prm.bw_cpu_local_gbps;
    s->bw_prior[GS__BW_CPU_REMOTE] = prm.bw_cpu_remote_gbps;
    s->bw_prior[GS__BW_GPU_LOCAL] = prm.bw_gpu_local_gbps;
    s->bw_prior[GS__BW_GPU_REMOTE] = prm.bw_gpu_remote_gbps;
    s->xfer_latency_ns = (double)prm.xfer_latency_us * 1e3;
    s->next_peer_id = 1;
    s->next_graph_id = 1;
    s->next_sreq = 1;
    gs_u64map_init(&s->clients);
    gs_u64map_init(&s->graphs);
    gs_u64map_init(&s->relay_index);
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    uv_check_init(loop, &s->check);
    s->check.data = s;
    s->nhandles = 2;
    *sched_p = s;
    return GS_OK;
}

static void gs__on_handle_closed(uv_handle_t *h)
{
    gs_sched_t *s = h->data;
    s->nhandles--;
}

gs_status_t gs_sched_listen(gs_sched_h s)
{
    struct sockaddr_storage ss;
    struct sockaddr_storage bound;
    int r, len = sizeof bound;
    gs_status_t st;

    if (s == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_listen: NULL scheduler");
    if (s->listen_called || s->stopping) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_listen called twice or after gs_sched_stop");
    }
    s->listen_called = 1;
    if ((st = gs__parse_host(s->host, s->port, &ss)) != GS_OK) return st;
    r = uv_tcp_init(s->loop, &s->server);
    if (r < 0) return gs_status_from_uv(r, "uv_tcp_init");
    s->server.data = s;
    s->nhandles++;
    s->listening = 1;
    r = uv_tcp_bind(&s->server, (const struct sockaddr *)&ss, 0);
    if (r == 0) r = uv_listen((uv_stream_t *)&s->server, 511, gs__on_connection);
    if (r < 0) {
        st = gs_status_from_uv(r, "listen");
        st = gs_error_set(st, "cannot listen on %s:%d: %s", s->host, s->port, uv_strerror(r));
        uv_close((uv_handle_t *)&s->server, gs__on_handle_closed);
        s->listening = 0;
        return st;
    }
    r = uv_tcp_getsockname(&s->server, (struct sockaddr *)&bound, &len);
    if (r == 0) {
        s->bound_port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                                    : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    }
    uv_timer_start(&s->timer, gs__on_timer, GS__HOUSEKEEPING_MS, GS__HOUSEKEEPING_MS);
    uv_check_start(&s->check, gs__on_check);
    GS_LOG_INFO("listening on %s:%d", s->host, s->bound_port);
    return GS_OK;
}

int gs_sched_port(gs_sched_h s)
{
    return s != NULL && s->listening ? s->bound_port : -1;
}

gs_status_t gs_sched_address(gs_sched_h s, char *buf, size_t len)
{
    struct sockaddr_storage bound;
    int blen = sizeof bound, n;
    char host[INET6_ADDRSTRLEN + 1] = "127.0.0.1";
    int v6 = 0;

    if (s == NULL || buf == NULL || !s->listening) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_address: scheduler is not listening");
    }
    if (uv_tcp_getsockname(&s->server, (struct sockaddr *)&bound, &blen) != 0) {
        return gs_error_set(GS_ERR_IO, "cannot read the bound address");
    }
    if (bound.ss_family == AF_INET6) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&bound;
        static const struct in6_addr any6 = IN6ADDR_ANY_INIT;
        if (memcmp(&a6->sin6_addr, &any6, sizeof any6) != 0) {
            uv_ip6_name(a6, host, sizeof host);
            v6 = 1;
        }
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&bound;
        if (a4->sin_addr.s_addr != htonl(INADDR_ANY)) uv_ip4_name(a4, host, sizeof host);
    }
    if (strcmp(host, "127.0.0.1") == 0 && !v6) {
        /* wildcard: name an address others can reach */
        uv_interface_address_t *ifs;
        int nifs;
        int wildcard = bound.ss_family == AF_INET6 ||
                       ((struct sockaddr_in *)&bound)->sin_addr.s_addr == htonl(INADDR_ANY);
        if (wildcard && uv_interface_addresses(&ifs, &nifs) == 0) {
            for (int i = 0; i < nifs; i++) {
                if (!ifs[i].is_internal && ifs[i].address.address4.sin_family == AF_INET) {
                    uv_ip4_name(&ifs[i].address.address4, host, sizeof host);
                    break;
                }
            }
            uv_free_interface_addresses(ifs, nifs);
        }
    }
    n = v6 ? snprintf(buf, len, "[%s]:%d", host, s->bound_port) : snprintf(buf, len, "%s:%d", host, s->bound_port);
    if (n < 0 || (size_t)n >= len) return gs_error_set(GS_ERR_INVALID_PARAM, "address buffer of %zu bytes is too small", len);
    return GS_OK;
}

void gs_sched_stop(gs_sched_h s)
{
    gs_msg_t shut;
    if (s == NULL || s->stopping) return;
    s->stopping = 1;
    GS_LOG_INFO("shutting down");
    if (s->listening) uv_close((uv_handle_t *)&s->server, gs__on_handle_closed);
    uv_timer_stop(&s->timer);
    uv_check_stop(&s->check);
    uv_close((uv_handle_t *)&s->timer, gs__on_handle_closed);
    uv_close((uv_handle_t *)&s->check, gs__on_handle_closed);
    gs__graph_free_all(s);
    memset(&shut, 0, sizeof shut);
    shut.type = GS_MSG_SHUTDOWN;
    for (gs__peer_t *p = s->peers; p != NULL; p = p->next) {
        if (p->state == GS__PEER_WORKER) gs__sched_send(s, p, &shut);
        gs__peer_close(p, GS_OK, 0, NULL);
    }
}

void gs_sched_stats(gs_sched_h s, gs_sched_stats_t *stats_p)
{
    if (s == NULL || stats_p == NULL) return;
    *stats_p = s->st;
    stats_p->nworkers = s->nworkers;
    stats_p->nclients = s->nclients;
    stats_p->nconnections = s->nconns;
    stats_p->ngraphs = s->ngraphs;
    stats_p->ngraphs_active = s->ngraphs_active;
}

gs_status_t gs_sched_bandwidth(gs_sched_h s, uint64_t from_id, uint64_t to_id, double *gbps_p, int *measured_p)
{
    gs__worker_t *a = NULL, *b = NULL;
    size_t k;
    if (s == NULL || gbps_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_bandwidth: NULL argument");
    for (uint32_t i = 0; i < s->nworkers; i++) {
        if (s->live[i]->id == from_id) a = s->live[i];
        if (s->live[i]->id == to_id) b = s->live[i];
    }
    if (a == NULL || b == NULL) {
        return gs_error_set(GS_ERR_NOT_FOUND, "worker %" PRIu64 " or %" PRIu64 " is not a live worker", from_id,
                            to_id);
    }
    k = (size_t)a->slot * s->nslots + b->slot;
    *gbps_p = s->bw[k];
    if (measured_p != NULL) *measured_p = s->bw_measured[k];
    return GS_OK;
}

void gs_sched_destroy(gs_sched_h s)
{
    if (s == NULL) return;
    gs_sched_stop(s);
    while (s->nhandles > 0 || s->peers != NULL) uv_run(s->loop, UV_RUN_ONCE);
    for (uint32_t i = 0; i < s->nslots; i++) {
        if (s->slots[i] != NULL) gs__worker_free(s->slots[i]);
    }
    gs_free(s->slots);
    gs_free(s->live);
    gs_free(s->bytes_by_slot);
    gs_free(s->bw);
    gs_free(s->bw_measured);
    GS_VEC_FREE(&s->scratch_in);
    GS_VEC_FREE(&s->repls);
    GS_VEC_FREE(&s->touched_slots);
    GS_VEC_FREE(&s->scratch_slots);
    GS_VEC_FREE(&s->scratch_defer);
    GS_VEC_FREE(&s->relays);
    GS_VEC_FREE(&s->relay_free);
    gs_u64map_cleanup(&s->relay_index);
    gs_u64map_cleanup(&s->clients);
    gs_u64map_cleanup(&s->graphs);
    GS_VEC_FREE(&s->retries);
    GS_VEC_FREE(&s->stack);
    GS_VEC_FREE(&s->peer_infos);
    GS_VEC_FREE(&s->names);
    gs_free(s->host);
    gs_free(s->token);
    gs_free(s);
}
