/* The client's I/O thread: it owns the libuv loop and the connection to the scheduler. It
 * starts and stops here, takes ops from callers (gs__post), sends the scheduler what they ask
 * for, runs the handshake and turns the scheduler's answers into completed futures and ops. */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* failing everything */

/* Fail every in-flight future and every pending request (I/O thread). */
static void gs__fail_everything(gs_client_h c, gs_status_t status, const char *msg)
{
    gs_u64map_t *maps[2] = {&c->pending, &c->graphs};
    gs__op_t *op;

    for (int m = 0; m < 2; m++) {
        gs_u64map_t *map = maps[m];
        for (size_t i = 0; i < map->cap; i++) {
            gs_future_h f;
            if (map->keys[i] == GS_U64MAP_EMPTY || map->keys[i] == GS_U64MAP_TOMB) continue;
            f = (gs_future_h)(uintptr_t)map->vals[i];
            gs__future_finish(c, f, status, msg, strlen(msg));
        }
        gs_u64map_cleanup(map);
        gs_u64map_init(map);
    }
    for (size_t i = 0; i < c->gathers.cap; i++) {
        if (c->gathers.keys[i] == GS_U64MAP_EMPTY || c->gathers.keys[i] == GS_U64MAP_TOMB) continue;
        op = (gs__op_t *)(uintptr_t)c->gathers.vals[i];
        gs__op_finish(c, op, status, msg);
    }
    gs_u64map_cleanup(&c->gathers);
    gs_u64map_init(&c->gathers);
    while ((op = c->info_head) != NULL) {
        c->info_head = op->info_next;
        gs__op_finish(c, op, status, msg);
    }
    c->info_tail = NULL;
    uv_mutex_lock(&c->mu);
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
}

/* ------------------------------------------------------------------------------------------ */
/* ops from callers */

static gs_status_t gs__send_graph_cmd(gs_client_h c, uint32_t type, uint64_t graph_id)
{
    gs_msg_t m;
    if (c->conn == NULL) return GS_ERR_CONN_CLOSED;
    memset(&m, 0, sizeof(m));
    m.type = type;
    m.u.cancel.graph_id = graph_id;
    return gs_conn_send(c->conn, &m);
}

/* What to do with a future whose user reference is gone (I/O thread, graph accepted). */
static void gs__future_dropped(gs_client_h c, gs_future_h f)
{
    int done, keep;
    uint64_t gid;
    uv_mutex_lock(&c->mu);
    done = f->done;
    gid = f->graph_id;
    keep = f->persist_marked;
    uv_mutex_unlock(&c->mu);
    if (!done) (void)gs__send_graph_cmd(c, GS_MSG_CANCEL, gid);
    if (!keep) (void)gs__send_graph_cmd(c, GS_MSG_RELEASE_GRAPH, gid);
}

/* A GRAPH_SUBMIT frame on the wire: its storage goes back to the client when written. */
typedef struct gs__frame_lease {
    gs_client_h c;
    gs_buf_t buf;
} gs__frame_lease_t;

/* (I/O thread) Keep the larger of the sent frame and the spare, within GS__SPARE_FRAME_MAX. */
static void gs__frame_lease_release(void *arg, gs_status_t status)
{
    gs__frame_lease_t *l = arg;
    gs_client_h c = l->c;
    (void)status;
    uv_mutex_lock(&c->mu);
    if (l->buf.cap <= GS__SPARE_FRAME_MAX && l->buf.cap > c->spare_frame.cap) {
        gs_buf_t old = c->spare_frame;
        c->spare_frame = l->buf;
        c->spare_frame.len = 0;
        l->buf = old;
    }
    uv_mutex_unlock(&c->mu);
    gs_buf_cleanup(&l->buf);
    gs_free(l);
}

/* Send @a frame (taken in every case) lending its storage, so the next submit reuses it. */
static gs_status_t gs__send_submit_frame(gs_client_h c, gs_buf_t *frame)
{
    gs__frame_lease_t *l = gs_malloc(sizeof(*l), "submit frame lease");
    gs_status_t st;
    if (l == NULL) return gs_conn_send_frame(c->conn, frame);
    l->c = c;
    l->buf = *frame;
    gs_buf_init(frame);
    st = gs_conn_send_frame_borrowed(c->conn, l->buf.data, l->buf.len, gs__frame_lease_release, l);
    if (st != GS_OK) {
        gs_buf_cleanup(&l->buf);
        gs_free(l);
    }
    return st;
}

static void gs__handle_op(gs_client_h c, gs__op_t *op)
{
    gs_status_t st, fail = GS_ERR_CANCELED;
    char fail_msg[GS__MSG_LEN];
    int usable;
    uv_mutex_lock(&c->mu);
    usable = c->state == GS__READY && !c->closing && c->conn != NULL;
    if (c->state == GS__LOST || c->state == GS__FAILED) {
        fail = c->fail_status;
        snprintf(fail_msg, sizeof(fail_msg), "%s", c->fail_message);
    } else {
        snprintf(fail_msg, sizeof(fail_msg), "the client was destroyed");
    }
    uv_mutex_unlock(&c->mu);

    switch (op->kind) {
    case GS__OP_SUBMIT: {
        gs_future_h f = op->fut;
        op->fut = NULL;
        if (!usable) {
            gs__future_finish(c, f, fail, fail_msg, strlen(fail_msg));
            break;
        }
        if ((st = gs_u64map_put(&c->pending, f->client_ref, (uint64_t)(uintptr_t)f)) != GS_OK) {
            gs__future_finish(c, f, GS_ERR_NO_MEMORY, "out of memory tracking a graph", 30);
            break;
        }
        st = gs__send_submit_frame(c, &op->frame);
        if (st != GS_OK) {
            gs_u64map_del(&c->pending, f->client_ref);
            gs__future_finish(c, f, st, "could not send the graph to the scheduler", 41);
        }
        break;
    }
    case GS__OP_REPORT:
    case GS__OP_REPLICATE: {
        gs_msg_t m;
        uint64_t key[2];
        int report = op->kind == GS__OP_REPORT;
        if (!usable) {
            gs__op_finish(c, op, fail, fail_msg);
            return;
        }
        op->req_id = ++c->next_req_id;
        if ((st = gs_u64map_put(&c->gathers, op->req_id, (uint64_t)(uintptr_t)op)) != GS_OK) {
            gs__op_finish(c, op, st, report ? "out of memory tracking a report request"
                                            : "out of memory tracking a replicate request");
            return;
        }
        memset(&m, 0, sizeof(m));
        if (report) {
            m.type = GS_MSG_REPORT_REQ;
            m.u.report_req.req_id = op->req_id;
            m.u.report_req.graph_id = op->repl_graph;
        } else {
            key[0] = op->repl_graph;
            key[1] = GS_REPLICATE_ALL_OUTPUTS;
            m.type = GS_MSG_REPLICATE;
            m.u.replicate.req_id = op->req_id;
            m.u.replicate.worker_name.data = (const uint8_t *)op->repl_target;
            m.u.replicate.worker_name.len = strlen(op->repl_target);
            m.u.replicate.n = 1;
            m.u.replicate.keys = key;
        }
        if ((st = gs_conn_send(c->conn, &m)) != GS_OK) {
            gs_u64map_del(&c->gathers, op->req_id);
            gs__op_finish(c, op, st, report ? "could not send a report request to the scheduler"
                                            : "could not send a replicate request to the scheduler");
        }
        return;   /* completed by REPORT or REPLICATE_DONE */
    }
    case GS__OP_WORKERS:
    case GS__OP_INFO: {
        gs_msg_t m;
        if (!usable) {
            gs__op_finish(c, op, fail, fail_msg);
            return;
        }
        memset(&m, 0, sizeof(m));
        m.type = op->kind == GS__OP_WORKERS ? GS_MSG_WORKERS_REQ : GS_MSG_INFO_REQ;
        if ((st = gs_conn_send(c->conn, &m)) != GS_OK) {
            gs__op_finish(c, op, st, "could not send an info request to the scheduler");
            return;
        }
        op->info_next = NULL;
        if (c->info_tail != NULL)
            c->info_tail->info_next = op;
        else
            c->info_head = op;
        c->info_tail = op;
        return;   /* completed by INFO */
    }
    case GS__OP_GATHER:
        if (!usable) {
            gs__op_finish(c, op, fail, fail_msg);
            return;
        }
        gs__gather_send(c, op);
        return;   /* completed by DATA */
    case GS__OP_LOCATE:
        if (!usable) {
            gs__op_finish(c, op, fail, fail_msg);
            return;
        }
        gs__locate_send(c, op);
        return;   /* completed by LOCATIONS (or a DATA error) */
    case GS__OP_CANCEL: {
        gs_future_h f = op->fut;
        op->fut = NULL;
        if (f->accepted) {
            int done;
            uint64_t gid;
            uv_mutex_lock(&c->mu);
            done = f->done;
            gid = f->graph_id;
            uv_mutex_unlock(&c->mu);
            if (!done && usable) (void)gs__send_graph_cmd(c, GS_MSG_CANCEL, gid);
        } else {
            f->cancel_requested = 1;
        }
        gs__future_finish(c, f, GS_ERR_CANCELED, "the graph was canceled", 22);
        break;
    }
    case GS__OP_FUTURE_DROP: {
        gs_future_h f = op->fut;
        op->fut = NULL;
        if (f->accepted) {
            uint64_t v, gid;
            uv_mutex_lock(&c->mu);
            gid = f->graph_id;
            uv_mutex_unlock(&c->mu);
            if (usable) gs__future_dropped(c, f);
            /* still in flight: forget it now (a later GRAPH_DONE is ignored) */
            if (gs_u64map_get(&c->graphs, gid, &v) && v == (uint64_t)(uintptr_t)f) {
                gs_u64map_del(&c->graphs, gid);
                gs__future_unref(f);
            }
        } else {
            /* still waiting for GRAPH_ACCEPTED (or never sent): decide when it arrives */
            f->user_dropped = 1;
        }
        gs__future_unref(f);
        break;
    }
    case GS__OP_RELEASE_GRAPH:
        if (usable) (void)gs__send_graph_cmd(c, GS_MSG_RELEASE_GRAPH, op->graph_id);
        break;
    case GS__OP_CLOSE:
        c->closing = 1;
        gs__fail_everything(c, GS_ERR_CANCELED, "the client was destroyed");
        if (c->conn != NULL) gs_conn_close(c->conn, GS_OK);
        if (!uv_is_closing((uv_handle_t *)&c->async)) uv_close((uv_handle_t *)&c->async, NULL);
        if (!uv_is_closing((uv_handle_t *)&c->hb_timer)) uv_close((uv_handle_t *)&c->hb_timer, NULL);
        break;
    }
    gs__op_free(op);
}

static void gs__async_cb(uv_async_t *h)
{
    gs_client_h c = h->data;
    gs__op_t *op = gs__queue_take(c);
    while (op != NULL) {
        gs__op_t *next = op->next;
        gs__handle_op(c, op);
        op = next;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* messages from the scheduler */

static void gs__on_accepted(gs_client_h c, const gs_msg_graph_accepted_t *a)
{
    uint64_t v;
    gs_future_h f;
    if (!gs_u64map_get(&c->pending, a->client_ref, &v)) {
        GS_LOG_WARN("scheduler accepted unknown graph ref %llu", (unsigned long long)a->client_ref);
        return;
    }
    gs_u64map_del(&c->pending, a->client_ref);
    f = (gs_future_h)(uintptr_t)v;
    f->accepted = 1;
    uv_mutex_lock(&c->mu);
    f->graph_id = a->graph_id;
    int done = f->done;
    uv_mutex_unlock(&c->mu);
    if (f->user_dropped) {
        gs__future_dropped(c, f);
        gs__future_unref(f);
        return;
    }
    if (f->cancel_requested || done) {
        /* canceled before the scheduler knew its id: cancel now; the future already failed */
        (void)gs__send_graph_cmd(c, GS_MSG_CANCEL, a->graph_id);
        gs__future_unref(f);
        return;
    }
    if (gs_u64map_put(&c->graphs, a->graph_id, (uint64_t)(uintptr_t)f) != GS_OK) {
        gs__future_finish(c, f, GS_ERR_NO_MEMORY, "out of memory tracking a graph", 30);
        (void)gs__send_graph_cmd(c, GS_MSG_CANCEL, a->graph_id);
    }
}

static void gs__on_progress(gs_client_h c, const gs_msg_progress_t *p)
{
    uint64_t v;
    gs_future_h f;
    if ((c->progress_cb == NULL && !c->pbar) || !gs_u64map_get(&c->graphs, p->graph_id, &v)) return;
    f = (gs_future_h)(uintptr_t)v;
    gs__progress_emit(c, f, p->done, p->total);
}

static void gs__on_graph_done(gs_client_h c, const gs_msg_graph_done_t *d)
{
    uint64_t v, ntasks;
    gs_future_h f;
    gs_status_t st = d->status > 0 ? GS_ERR_PROTO : (gs_status_t)d->status;
    if (!gs_u64map_get(&c->graphs, d->graph_id, &v)) {
        GS_LOG_DEBUG("done for unknown graph %llu ignored", (unsigned long long)d->graph_id);
        return;
    }
    gs_u64map_del(&c->graphs, d->graph_id);
    f = (gs_future_h)(uintptr_t)v;
    uv_mutex_lock(&c->mu);
    ntasks = d->ntasks > 0 ? d->ntasks : f->ntasks;
    int already = f->done;
    uv_mutex_unlock(&c->mu);
    /* a final progress report before anyone waiting sees the result, unless the scheduler's
     * last PROGRESS was already it */
    if ((c->progress_cb != NULL || c->pbar) && st == GS_OK && !already && f->progress_reported != ntasks)
        gs__progress_emit(c, f, ntasks, ntasks);
    uv_mutex_lock(&c->mu);
    if (!f->done) {
        f->run_ns_total = d->run_ns_total;
        f->sched_wall_ns = d->wall_ns;
        f->ntasks = ntasks;
    }
    gs__future_complete_locked(f, st, (const char *)d->message.data, d->message.len);
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
    gs__future_unref(f);
}

/* ERROR after the handshake: it answers the oldest graph still awaiting acceptance (the
 * scheduler processes a connection's messages in order); otherwise it is only logged. */
static void gs__wcopy(char *dst, size_t cap, const gs_str_t *s)
{
    size_t n = s->len < cap - 1 ? s->len : cap - 1;
    if (n > 0) memcpy(dst, s->data, n);
    dst[n] = '\0';
}

static void gs__on_error(gs_client_h c, const gs_msg_error_t *e)
{
    gs_future_h oldest = NULL;
    gs_status_t st = e->status < 0 ? (gs_status_t)e->status : GS_ERR_PROTO;
    for (size_t i = 0; i < c->pending.cap; i++) {
        gs_future_h f;
        if (c->pending.keys[i] == GS_U64MAP_EMPTY || c->pending.keys[i] == GS_U64MAP_TOMB) continue;
        f = (gs_future_h)(uintptr_t)c->pending.vals[i];
        if (oldest == NULL || f->client_ref < oldest->client_ref) oldest = f;
    }
    if (oldest == NULL) {
        GS_LOG_WARN("scheduler reported an error: %.*s (%s)", (int)e->message.len,
                    (const char *)e->message.data, gs_status_name(st));
        return;
    }
    gs_u64map_del(&c->pending, oldest->client_ref);
    gs__future_finish(c, oldest, st, (const char *)e->message.data, e->message.len);
}

/* WORKERS answer: copy it into the op (I/O thread). */
static void gs__on_workers(gs_client_h c, gs__op_t *op, const gs_msg_workers_t *m)
{
    gs_client_worker_info_t *wi = gs_calloc(m->n ? m->n : 1, sizeof(*wi), "client workers");
    if (wi == NULL) {
        gs__op_finish(c, op, GS_ERR_NO_MEMORY, "out of memory receiving the worker list");
        return;
    }
    for (uint32_t i = 0; i < m->n; i++) {
        wi[i].id = m->id[i];
        wi[i].device = m->device[i];
        wi[i].nthreads = m->nthreads[i];
        wi[i].memory_limit = m->memory_limit[i];
        wi[i].mem_used = m->mem_used[i];
        wi[i].disk_used = m->disk_used[i];
        wi[i].spilled_bytes = m->spilled_bytes[i];
        wi[i].spilled_s = (double)m->spilled_ns[i] * 1e-9;
        wi[i].unspilled_bytes = m->unspilled_bytes[i];
        wi[i].unspilled_s = (double)m->unspilled_ns[i] * 1e-9;
        wi[i].host_used = m->host_used[i];
        wi[i].host_spilled_bytes = m->host_spilled_bytes[i];
        wi[i].host_spilled_s = (double)m->host_spilled_ns[i] * 1e-9;
        wi[i].host_unspilled_bytes = m->host_unspilled_bytes[i];
        wi[i].host_unspilled_s = (double)m->host_unspilled_ns[i] * 1e-9;
        wi[i].file_read_bytes[0] = m->file_cpu_bytes[i];
        wi[i].file_read_bytes[1] = m->file_pinned_bytes[i];
        wi[i].file_read_bytes[2] = m->file_cufile_bytes[i];
        wi[i].file_read_bytes[3] = m->file_compat_bytes[i];
        gs__wcopy(wi[i].name, sizeof(wi[i].name), &m->name[i]);
        gs__wcopy(wi[i].host, sizeof(wi[i].host), &m->host[i]);
        gs__wcopy(wi[i].backend, sizeof(wi[i].backend), &m->backend[i]);
        gs__wcopy(wi[i].address, sizeof(wi[i].address), &m->addr[i]);
    }
    uv_mutex_lock(&c->mu);
    op->winfo = wi;
    op->nwinfo = m->n;
    uv_mutex_unlock(&c->mu);
    gs__op_finish(c, op, GS_OK, NULL);
}

/* INFO or WORKERS: they answer the oldest INFO / WORKERS op, in order (I/O thread). */
static void gs__on_info_answer(gs_client_h c, const gs_msg_t *msg)
{
    gs__op_t *op = c->info_head;
    uint32_t want = msg->type == GS_MSG_INFO ? GS__OP_INFO : GS__OP_WORKERS;
    if (op == NULL || op->kind != want) {
        GS_LOG_DEBUG("unrequested %s ignored", gs_msg_type_name(msg->type));
        return;
    }
    c->info_head = op->info_next;
    if (c->info_head == NULL) c->info_tail = NULL;
    if (msg->type == GS_MSG_INFO) {
        op->nworkers = msg->u.info.nworkers;
        gs__op_finish(c, op, GS_OK, NULL);
        return;
    }
    gs__on_workers(c, op, &msg->u.workers);
}

/* The op of @a kind waiting for the answer to request @a req_id, taken off the request map;
 * NULL (logged) when there is none. */
static gs__op_t *gs__take_answered(gs_client_h c, uint64_t req_id, gs__op_kind_t kind, const char *what)
{
    uint64_t v;
    gs__op_t *op;
    if (!gs_u64map_get(&c->gathers, req_id, &v)) {
        GS_LOG_DEBUG("%s for unknown request %llu ignored", what, (unsigned long long)req_id);
        return NULL;
    }
    op = (gs__op_t *)(uintptr_t)v;
    if (op->kind != kind) return NULL;
    gs_u64map_del(&c->gathers, req_id);
    return op;
}

static void gs__on_replicate_done(gs_client_h c, const gs_msg_replicate_done_t *r)
{
    char text[512];
    gs__op_t *op = gs__take_answered(c, r->req_id, GS__OP_REPLICATE, "replicate-done");
    if (op == NULL) return;
    op->nworkers = (uint32_t)r->n;   /* chunks copied */
    gs__wcopy(text, sizeof(text), &r->message); /* the decoded string is not NUL-terminated */
    gs__op_finish(c, op, r->status == GS_OK ? GS_OK : (gs_status_t)r->status,
                  text[0] ? text : NULL);
}

/* Heartbeats (I/O thread): gsched closes clients silent past its idle timeout when they hold no
 * graph; a connected client, idle or not, says it is alive every interval WELCOME named. */
static void gs__hb_cb(uv_timer_t *t)
{
    gs_client_h c = t->data;
    gs_msg_t m;
    if (c->conn == NULL || c->closing) return;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_HEARTBEAT;
    m.u.heartbeat.seq = ++c->hb_seq;
    (void)gs_conn_send(c->conn, &m);   /* a failure closes the connection: reported there */
}

static void gs__on_report(gs_client_h c, const gs_msg_report_t *r)
{
    char text[512];
    gs__op_t *op = gs__take_answered(c, r->req_id, GS__OP_REPORT, "report");
    gs_status_t st = r->status == GS_OK ? GS_OK : r->status < 0 ? (gs_status_t)r->status : GS_ERR_PROTO;
    if (op == NULL) return;
    gs__wcopy(text, sizeof(text), &r->message);
    if (st == GS_OK) {
        op->report_html = gs_malloc(r->html.len ? r->html.len : 1, "client report");
        if (op->report_html == NULL) {
            st = GS_ERR_NO_MEMORY;
            snprintf(text, sizeof(text), "out of memory for a report of %zu bytes", r->html.len);
        } else {
            if (r->html.len) memcpy(op->report_html, r->html.data, r->html.len);
            op->report_len = r->html.len;
        }
    }
    gs__op_finish(c, op, st, text[0] ? text : NULL);
}

/* The first message on the connection: WELCOME, or why not (I/O thread, CONNECTING). */
static void gs__on_handshake(gs_client_h c, const gs_msg_t *msg)
{
    gs_status_t st = GS_OK;
    uv_mutex_lock(&c->mu);
    if (c->state != GS__CONNECTING) {           /* the connecting thread gave up */
        uv_mutex_unlock(&c->mu);
        return;
    }
    if (msg->type == GS_MSG_CHALLENGE) {
        gs_msg_t auth;
        st = gs_hs_peer_answer(&c->hs, msg, &auth);
        if (st == GS_OK) st = gs_conn_send(c->conn, &auth);
        if (st == GS_OK) {
            uv_mutex_unlock(&c->mu);
            return;
        }
        snprintf(c->fail_message, sizeof(c->fail_message), "handshake with the scheduler at %s failed: %s",
                 c->address, gs_last_error());
    } else if (msg->type == GS_MSG_WELCOME && msg->u.welcome.version != GS_PROTO_VERSION) {
        st = GS_ERR_VERSION;
        snprintf(c->fail_message, sizeof(c->fail_message),
                 "scheduler at %s speaks protocol version %u, this client %u", c->address,
                 msg->u.welcome.version, GS_PROTO_VERSION);
    } else if (msg->type == GS_MSG_WELCOME && !c->hs.challenged) {
        st = GS_ERR_AUTH;
        snprintf(c->fail_message, sizeof(c->fail_message),
                 "scheduler at %s welcomed this client without proving that it knows the cluster token",
                 c->address);
    } else if (msg->type == GS_MSG_WELCOME) {
        uint64_t hb = msg->u.welcome.heartbeat_ms;
        hb = hb == 0 ? 1000 : hb < 10 ? 10 : hb > 3600000 ? 3600000 : hb;
        memset(&c->hs, 0, sizeof(c->hs));
        c->state = GS__READY;
        c->client_id = msg->u.welcome.id;
        uv_timer_start(&c->hb_timer, gs__hb_cb, hb, hb);
    } else if (msg->type == GS_MSG_ERROR) {
        st = msg->u.error.status < 0 ? (gs_status_t)msg->u.error.status : GS_ERR_PROTO;
        c->hs_retry = st == GS_ERR_BUSY;   /* at its connection limit: room may come */
        snprintf(c->fail_message, sizeof(c->fail_message),
                 "scheduler at %s refused the connection: %.*s", c->address,
                 (int)msg->u.error.message.len, (const char *)msg->u.error.message.data);
    } else {
        st = GS_ERR_PROTO;
        snprintf(c->fail_message, sizeof(c->fail_message),
                 "scheduler at %s sent %s instead of welcome", c->address,
                 gs_msg_type_name(msg->type));
    }
    if (st != GS_OK) {
        c->state = GS__FAILED;
        c->fail_status = st;
    }
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
    if (st != GS_OK) gs_conn_close(c->conn, st);
}

static void gs__msg_cb(gs_conn_t *conn, gs_msg_t *msg, void *arg)
{
    gs_client_h c = arg;
    (void)conn;
    uv_mutex_lock(&c->mu);
    gs__state_t state = c->state;
    uv_mutex_unlock(&c->mu);

    if (state == GS__CONNECTING) {
        gs__on_handshake(c, msg);
        return;
    }
    if (state != GS__READY) return;
    switch (msg->type) {
    case GS_MSG_GRAPH_ACCEPTED: gs__on_accepted(c, &msg->u.graph_accepted); break;
    case GS_MSG_PROGRESS: gs__on_progress(c, &msg->u.progress); break;
    case GS_MSG_GRAPH_DONE: gs__on_graph_done(c, &msg->u.graph_done); break;
    case GS_MSG_DATA: gs__gather_on_data(c, &msg->u.data); break;
    case GS_MSG_WORKERS:
    case GS_MSG_INFO: gs__on_info_answer(c, msg); break;
    case GS_MSG_REPLICATE_DONE: gs__on_replicate_done(c, &msg->u.replicate_done); break;
    case GS_MSG_REPORT: gs__on_report(c, &msg->u.report); break;
    case GS_MSG_LOCATIONS: gs__locate_on_answer(c, &msg->u.locations); break;
    case GS_MSG_ERROR: gs__on_error(c, &msg->u.error); break;
    case GS_MSG_HEARTBEAT: break;
    default:
        GS_LOG_DEBUG("client ignores %s from the scheduler", gs_msg_type_name(msg->type));
        break;
    }
}

static void gs__connect_cb(gs_conn_t *conn, gs_status_t status, void *arg)
{
    gs_client_h c = arg;
    (void)conn;
    if (status == GS_OK) return;
    uv_mutex_lock(&c->mu);
    if (c->state == GS__CONNECTING) {
        c->state = GS__FAILED;
        c->fail_status = status;
        snprintf(c->fail_message, sizeof(c->fail_message), "cannot connect to the scheduler at "
                 "%s: %s", c->address, gs_status_string(status));
        uv_cond_broadcast(&c->cond);
    }
    uv_mutex_unlock(&c->mu);
}

static void gs__close_cb(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    gs_client_h c = arg;
    int lost = 0;
    char msg[GS__MSG_LEN];
    (void)conn;
    c->conn = NULL;
    uv_mutex_lock(&c->mu);
    if (c->state == GS__CONNECTING) {
        c->state = GS__FAILED;
        c->fail_status = reason == GS_OK ? GS_ERR_CONN_CLOSED : reason;
        /* closed without a refusal naming its reason (that would have ended CONNECTING): what a
         * connection gsched closed to make room for others looks like, before or after its
         * CHALLENGE (sched.h, connection bounds), so gs_client_connect tries again */
        c->hs_retry = c->fail_status == GS_ERR_CONN_CLOSED || c->fail_status == GS_ERR_IO;
        if (c->fail_status == GS_ERR_CONN_CLOSED || c->fail_status == GS_ERR_IO)
            snprintf(c->fail_message, sizeof(c->fail_message), "the scheduler at %s closed the "
                     "connection during the handshake (wrong token or version%s?)", c->address,
                     c->tls == NULL ? ", or it requires TLS" : "");
        else
            snprintf(c->fail_message, sizeof(c->fail_message), "cannot connect to the scheduler "
                     "at %s: %s", c->address, gs_status_string(c->fail_status));
    } else if (c->state == GS__READY && !c->closing) {
        uv_timer_stop(&c->hb_timer);
        c->state = GS__LOST;
        c->fail_status = GS_ERR_SCHEDULER_LOST;
        snprintf(c->fail_message, sizeof(c->fail_message), "lost the connection to the scheduler "
                 "at %s (%s)", c->address, gs_status_string(reason == GS_OK ? GS_ERR_CONN_CLOSED
                                                                             : reason));
        lost = 1;
    }
    snprintf(msg, sizeof(msg), "%s", c->fail_message);
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
    if (lost) {
        GS_LOG_WARN("%s", msg);
        gs__fail_everything(c, GS_ERR_SCHEDULER_LOST, msg);
    }
}

static void gs__thread_main(void *arg)
{
    gs_client_h c = arg;
#ifdef __linux__
    pthread_setname_np(pthread_self(), "gs-client");
#endif
    uv_run(&c->loop, UV_RUN_DEFAULT);
}

/* ------------------------------------------------------------------------------------------ */
/* start and stop */

static void gs__loop_close_all(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* Close every handle of the loop and the loop itself (the I/O thread is not running). */
static void gs__loop_close(gs_client_h c)
{
    uv_walk(&c->loop, gs__loop_close_all, NULL);
    while (uv_loop_close(&c->loop) == UV_EBUSY) uv_run(&c->loop, UV_RUN_NOWAIT);
}

gs_status_t gs__io_start(gs_client_h c, const char *host, int port)
{
    gs_status_t status;
    gs_conn_params_t cp;
    sigset_t all, old;
    gs_msg_t hello;
    int r;

    if ((r = uv_loop_init(&c->loop)) != 0)
        return gs_error_set(GS_ERR_NO_RESOURCE, "cannot create an event loop: %s", uv_strerror(r));
    if ((r = uv_async_init(&c->loop, &c->async, gs__async_cb)) != 0) {
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot create an async handle: %s",
                              uv_strerror(r));
        goto err_loop;
    }
    c->async.data = c;
    uv_timer_init(&c->loop, &c->hb_timer);   /* cannot fail */
    c->hb_timer.data = c;
    memset(&cp, 0, sizeof(cp));
    cp.msg_cb = gs__msg_cb;
    cp.close_cb = gs__close_cb;
    cp.connect_cb = gs__connect_cb;
    cp.arg = c;
    cp.tls = c->tls;
    if ((status = gs_conn_connect(&c->loop, host, port, &cp, &c->conn)) != GS_OK) goto err_loop;
    snprintf(c->hs_name, sizeof(c->hs_name), "client-%d", (int)getpid());
    if ((status = gs_hs_peer_hello(&c->hs, c->token, GS_ROLE_CLIENT, c->hs_name, &hello)) != GS_OK ||
        (status = gs_conn_send(c->conn, &hello)) != GS_OK) {
        gs_conn_close(c->conn, status);
        goto err_loop;
    }

    /* the I/O thread never takes the process's signals (SIGPIPE on a dead socket included) */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    r = uv_thread_create(&c->thread, gs__thread_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        gs_conn_close(c->conn, GS_ERR_NO_RESOURCE);
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot start the client thread: %s",
                              uv_strerror(r));
        goto err_loop;
    }
    c->thread_started = 1;
    return GS_OK;

err_loop:
    {
        /* closing the handles may run callbacks that overwrite the message */
        char msg[GS__MSG_LEN];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        gs__loop_close(c);
        gs_error_set(status, "%s", msg);
    }
    return status;
}

void gs__io_stop(gs_client_h c)
{
    gs__op_t *op;
    if (!c->thread_started) return;   /* gs__io_start failed or never ran: nothing to stop */
    uv_mutex_lock(&c->mu);
    c->stopping = 1;
    uv_mutex_unlock(&c->mu);
    op = gs__op_new(GS__OP_CLOSE);
    uv_mutex_lock(&c->mu);
    if (op != NULL) {
        /* bypass gs__post's closed check: CLOSE must always reach the loop */
        gs__queue_push_locked(c, op);
    } else {
        /* no memory for an op: let the loop notice the closed state through the async */
        c->state = GS__CLOSED;
        uv_async_send(&c->async);
    }
    uv_mutex_unlock(&c->mu);
    uv_thread_join(&c->thread);
    c->thread_started = 0;
    /* anything queued after the loop stopped: fail it */
    op = gs__queue_take(c);
    while (op != NULL) {
        gs__op_t *next = op->next;
        if (op->fut != NULL && op->kind != GS__OP_GATHER)   /* gather borrows its future */
            gs__future_finish(c, op->fut, GS_ERR_CANCELED, "the client was destroyed", 24);
        if (op->kind == GS__OP_INFO || op->kind == GS__OP_GATHER || op->kind == GS__OP_WORKERS ||
            op->kind == GS__OP_REPLICATE || op->kind == GS__OP_REPORT || op->kind == GS__OP_LOCATE)
            gs__op_finish(c, op, GS_ERR_CANCELED, "the client was destroyed");
        else
            gs__op_free(op);
        op = next;
    }
    gs__loop_close(c);
    gs_u64map_cleanup(&c->pending);
    gs_u64map_cleanup(&c->graphs);
    gs_u64map_cleanup(&c->gathers);
    uv_mutex_lock(&c->mu);
    c->state = GS__CLOSED;
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
}

void gs__io_reset(gs_client_h c)
{
    uv_mutex_lock(&c->mu);
    c->state = GS__CONNECTING;
    c->stopping = 0;
    c->hs_retry = 0;
    c->fail_status = GS_OK;
    c->fail_message[0] = '\0';
    uv_mutex_unlock(&c->mu);
    c->closing = 0;
    c->conn = NULL;
    memset(&c->hs, 0, sizeof(c->hs));
    gs_u64map_init(&c->pending);
    gs_u64map_init(&c->graphs);
    gs_u64map_init(&c->gathers);
}
