/*
 * Connections (peers): the handshake, the worker registry (registration, removal), and the
 * dispatch of every client and worker message to the part that handles it.
 */
#include "scheduler/peers.h"

#include "scheduler/cost.h"
#include "scheduler/gather.h"
#include "scheduler/place.h"
#include "scheduler/replicate.h"
#include "scheduler/send.h"
#include "scheduler/submit.h"
#include "scheduler/tasks.h"

#include "common/time.h"
#include "common/token.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Workers.                                                                                   */

void gs__worker_free(gs__worker_t *w)
{
    gs_free(w->name);
    gs_free(w->host);
    gs_free(w->backend);
    gs_free(w->ucx_addr);
    gs_free(w->data_addr);
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

/* ------------------------------------------------------------------------------------------ */
/* The churn cap (sched.h): workers of one address that leave within churn_window_ms of         */
/* registering are counted per window; at churn_max, registrations from there are refused.      */

#define GS__CHURN_MAX_ADDRS 65536u   /* past this many addresses the history is forgotten */

/* Workers of address @a key gone in the current window; *v_p = the entry to update. */
static uint32_t gs__churn_count(const gs_sched_t *s, uint64_t key, uint32_t now_ms, uint64_t *v_p)
{
    uint64_t v;
    if (gs_u64map_get(&s->churn, key, &v) && now_ms - (uint32_t)(v >> 32) < s->churn_window_ms) {
        *v_p = v;
        return (uint32_t)v;
    }
    *v_p = (uint64_t)now_ms << 32;
    return 0;
}

static void gs__churn_note(gs_sched_t *s, const gs__worker_t *w)
{
    uint64_t now = gs_now_ns(), v;
    uint32_t n;
    if (s->churn_max == 0 || w->addr_key == 0 || now - w->t_register_ns >= (uint64_t)s->churn_window_ms * 1000000ull) return;
    n = gs__churn_count(s, w->addr_key, (uint32_t)(now / 1000000ull), &v);
    if (n == 0 && s->churn.len >= GS__CHURN_MAX_ADDRS) gs_u64map_cleanup(&s->churn);
    if (gs_u64map_put(&s->churn, w->addr_key, (v & ~0xffffffffull) | (n + 1)) != GS_OK) {
        GS_LOG_WARN("out of memory counting worker churn");
    }
}

/* 1 (and @a p closed with ERROR GS_ERR_BUSY) when the churn cap refuses its registration. */
static int gs__churn_refuse(gs_sched_t *s, gs__peer_t *p)
{
    uint32_t now_ms = (uint32_t)(gs_now_ns() / 1000000ull), n;
    uint64_t v;
    if (s->churn_max == 0 || p->addr_key == 0) return 0;
    n = gs__churn_count(s, p->addr_key, now_ms, &v);
    if (n < s->churn_max) return 0;
    s->st.churn_refused_total++;
    s->st.refused_total++;
    GS_LOG_WARN("refusing a worker from %s: %u workers from there left within %u ms of registering",
                gs_conn_peer_name(p->conn), n, s->churn_window_ms);
    gs__peer_close(p, GS_ERR_BUSY, GS_ERR_BUSY,
                   "worker registration refused: %u workers from this address left within %u ms (churn cap %u);"
                   " try again in %u ms", n, s->churn_window_ms, s->churn_max,
                   s->churn_window_ms - (now_ms - (uint32_t)(v >> 32)));
    return 1;
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
        gs__churn_note(s, w);
        GS_LOG_WARN("worker %s (id %" PRIu64 ") removed: %s", w->name, w->id, why);
        gs__broadcast_removed(s, w->id);
        gs__sched_repls_worker_gone(s, w);
        gs__sched_worker_removed(s, w);
        gs__sched_relays_worker_gone(s, slot);
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
    if (gs__bw_grow(s, n) != GS_OK) return GS_ERR_NO_MEMORY;
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

/* A registering worker's direct-gather address: kept when it parses as host:port, else "" (the
 * worker's chunks are then only relayed). NULL: out of memory. */
static char *gs__worker_data_addr(const gs_str_t *a, const char *name)
{
    char host[256], *str;
    int port;
    if (a->len == 0) return gs_strdup("", "worker data address");
    str = a->len < 300 ? gs__strndup(a, "worker data address") : NULL;
    if (str != NULL && memchr(a->data, 0, a->len) == NULL &&
        gs_addr_parse(str, host, sizeof host, &port) == GS_OK && port > 0)
        return str;
    GS_LOG_WARN("worker %s gave an unusable data address (%zu bytes); its chunks are relayed", name,
                (size_t)a->len);
    gs_free(str);
    return gs_strdup("", "worker data address");
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
    if (m->ucx_address.len > s->max_ucx_address || m->name.len > s->max_register_string ||
        m->host.len > s->max_register_string || m->backend.len > s->max_register_string) {
        s->st.refused_total++;
        gs__peer_close(p, GS_ERR_MSG_TOO_LARGE, GS_ERR_MSG_TOO_LARGE,
                       "worker registration refused: UCX address of %zu bytes (at most %u) or name/host/backend "
                       "of %zu/%zu/%zu bytes (at most %u each)",
                       (size_t)m->ucx_address.len, s->max_ucx_address, (size_t)m->name.len, (size_t)m->host.len,
                       (size_t)m->backend.len, s->max_register_string);
        return;
    }
    if (gs__churn_refuse(s, p)) return;
    if (m->name.len > 0) {
        for (uint32_t i = 0; i < s->nworkers; i++) {
            const gs__worker_t *old = s->live[i];
            if (strlen(old->name) == m->name.len && memcmp(old->name, m->name.data, m->name.len) == 0) {
                /* the live worker stays: a name is no proof of identity. A restarted worker gets
                 * its name back once the old connection is gone. */
                GS_LOG_WARN("refusing a worker from %s: the name %s belongs to the live worker id %" PRIu64,
                            gs_conn_peer_name(p->conn), old->name, old->id);
                s->st.refused_total++;
                gs__peer_close(p, GS_ERR_EXISTS, GS_ERR_EXISTS,
                               "worker name '%s' is taken by a live worker (id %" PRIu64 ")", old->name, old->id);
                return;
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
    w->data_addr = gs__worker_data_addr(&m->data_addr, w->name);
    w->ucx_addr = gs_malloc(m->ucx_address.len ? m->ucx_address.len : 1, "worker ucx address");
    if (w->name == NULL || w->host == NULL || w->backend == NULL || w->ucx_addr == NULL || w->data_addr == NULL ||
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
    w->addr_key = p->addr_key;
    w->t_register_ns = gs_now_ns();
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
/* Peers (connections).                                                                       */

/* The handshake list (s->hs_head): connections in HANDSHAKE in accept order, so that eviction
 * finds the oldest without walking every connection (a connect storm at the connection limit
 * evicts once per accepted connection). */
static void gs__hs_link(gs_sched_t *s, gs__peer_t *p)
{
    p->hs_next = NULL;
    p->hs_prev = s->hs_tail;
    if (s->hs_tail != NULL) s->hs_tail->hs_next = p;
    else s->hs_head = p;
    s->hs_tail = p;
    p->in_hs = 1;
}

/* Leave the handshake list (the state leaves HANDSHAKE); idempotent. */
static void gs__hs_unlink(gs_sched_t *s, gs__peer_t *p)
{
    if (!p->in_hs) return;
    if (p->hs_prev != NULL) p->hs_prev->hs_next = p->hs_next;
    else s->hs_head = p->hs_next;
    if (p->hs_next != NULL) p->hs_next->hs_prev = p->hs_prev;
    else s->hs_tail = p->hs_prev;
    p->hs_prev = p->hs_next = NULL;
    p->in_hs = 0;
}

void gs__peer_close(gs__peer_t *p, gs_status_t reason, gs_status_t err_status, const char *fmt, ...)
{
    char text[512];
    if (p->state == GS__PEER_CLOSING) return;
    text[0] = '\0';
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        if (err_status != 0) gs__sched_send_error(p->s, p, err_status, text);
        GS_LOG_INFO("closing %s (%s): %s", p->name, p->conn ? gs_conn_peer_name(p->conn) : "?", text);
    }
    {
        int was_client = p->state == GS__PEER_CLIENT;
        p->state = GS__PEER_CLOSING;
        gs__hs_unlink(p->s, p);
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

/* HELLO: the version, then CHALLENGE (common/auth.h). Nothing is decided on the name yet. */
static void gs__hello(gs_sched_t *s, gs__peer_t *p, const gs_msg_t *msg)
{
    const gs_msg_hello_t *h = &msg->u.hello;
    gs_msg_t out;
    gs_status_t st;
    size_t nlen;

    if (msg->type != GS_MSG_HELLO) {
        gs__refuse(p, GS_ERR_PROTO, "the first message must be hello, not %s", gs_msg_type_name(msg->type));
        return;
    }
    if (h->version != GS_PROTO_VERSION) {
        gs__refuse(p, GS_ERR_VERSION, "protocol version %u is not supported (gsched speaks %u): upgrade the %s",
                   h->version, GS_PROTO_VERSION, h->version < GS_PROTO_VERSION ? "peer" : "scheduler");
        return;
    }
    if (h->role != GS_ROLE_CLIENT && h->role != GS_ROLE_WORKER) {
        gs__refuse(p, GS_ERR_PROTO, "unknown role %u", h->role);
        return;
    }
    if ((st = gs_hs_sched_challenge(&p->hs, s->token, h, &out)) != GS_OK) {
        gs__refuse(p, st, "%s", gs_last_error());
        return;
    }
    nlen = h->name.len < 40 ? h->name.len : 40;
    snprintf(p->name, sizeof p->name, "%s %.*s", h->role == GS_ROLE_CLIENT ? "client" : "worker", (int)nlen,
             h->name.data ? (const char *)h->name.data : "");
    gs__sched_send(s, p, &out);
}

/* AUTH: the peer's proof; then WELCOME (a worker's with the data-plane key). */
static void gs__handshake(gs_sched_t *s, gs__peer_t *p, const gs_msg_t *msg)
{
    gs_msg_t out;
    gs_status_t st;
    uint8_t masked[GS_AUTH_KEY_BYTES];
    uint32_t role = p->hs.role;

    if (!p->hs.challenged) {
        gs__hello(s, p, msg);
        return;
    }
    if (msg->type != GS_MSG_AUTH) {
        gs__refuse(p, GS_ERR_PROTO, "the answer to the challenge must be auth, not %s", gs_msg_type_name(msg->type));
        return;
    }
    if (!gs_hs_sched_check(&p->hs, &msg->u.auth)) {
        s->st.auth_failed_total++;
        GS_LOG_WARN("%s from %s failed to authenticate (wrong cluster token)", p->name, gs_conn_peer_name(p->conn));
        gs__refuse(p, GS_ERR_AUTH, "wrong cluster token");
        return;
    }
    memset(&out, 0, sizeof out);
    if (role == GS_ROLE_WORKER) {
        if ((st = gs_hs_sched_key(&p->hs, s->token, s->data_key, masked)) != GS_OK) {
            gs__peer_close(p, st, st, "scheduler cannot mask the key: %s", gs_last_error());
            return;
        }
        out.u.welcome.data_key = (gs_bytes_t){masked, sizeof masked};
    }
    p->id = s->next_peer_id++;
    {
        char tmp[sizeof p->name];
        memcpy(tmp, p->name, sizeof tmp);
        tmp[sizeof tmp - 1] = '\0';
        /* "client 3 name": the kind, the id gsched assigned, the name it gave */
        const char *rest = strchr(tmp, ' ');
        snprintf(p->name, sizeof p->name, "%s %" PRIu64 "%s", role == GS_ROLE_CLIENT ? "client" : "worker", p->id,
                 rest != NULL ? rest : "");
    }
    if (role == GS_ROLE_CLIENT) {
        if (gs_u64map_put(&s->clients, p->id, (uint64_t)(uintptr_t)p) != GS_OK) {
            gs__peer_close(p, GS_ERR_NO_MEMORY, GS_ERR_NO_MEMORY, "scheduler out of memory");
            return;
        }
        p->state = GS__PEER_CLIENT;
        s->nclients++;
    } else {
        p->state = GS__PEER_WORKER;
    }
    gs__hs_unlink(s, p);
    /* handshaken: the frame limit of the role */
    gs_conn_set_max_frame(p->conn, role == GS_ROLE_CLIENT ? s->client_max_frame : s->worker_max_frame);
    out.type = GS_MSG_WELCOME;
    out.u.welcome.version = GS_PROTO_VERSION;
    out.u.welcome.id = p->id;
    out.u.welcome.heartbeat_ms = s->heartbeat_ms;
    gs__sched_send(s, p, &out);
    memset(masked, 0, sizeof masked);
    memset(&p->hs, 0, sizeof p->hs);
    GS_LOG_INFO("%s connected from %s", p->name, gs_conn_peer_name(p->conn));
}

static void gs__send_info(gs_sched_t *s, gs__peer_t *p)
{
    gs_msg_t msg;
    s->names.len = 0;
    if (GS_VEC_RESERVE(&s->names, (size_t)s->nworkers + 1) != GS_OK) {
        gs__sched_send_error(s, p, GS_ERR_NO_MEMORY, "scheduler out of memory answering info");
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
    uint64_t *tiers = gs_calloc(14 * nn, sizeof *tiers, "workers tiers");
    gs_str_t *strs = gs_calloc(4 * nn, sizeof *strs, "workers strings");
    gs_msg_t msg;
    if (ids == NULL || dev == NULL || thr == NULL || lim == NULL || used == NULL || tiers == NULL ||
        strs == NULL) {
        gs__sched_send_error(s, p, GS_ERR_NO_MEMORY, "scheduler out of memory answering workers-req");
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
        tiers[i] = w->disk_used;
        tiers[nn + i] = w->spilled_bytes;
        tiers[2 * nn + i] = w->spilled_ns;
        tiers[3 * nn + i] = w->unspilled_bytes;
        tiers[4 * nn + i] = w->unspilled_ns;
        tiers[5 * nn + i] = w->host_used;
        tiers[6 * nn + i] = w->host_spilled_bytes;
        tiers[7 * nn + i] = w->host_spilled_ns;
        tiers[8 * nn + i] = w->host_unspilled_bytes;
        tiers[9 * nn + i] = w->host_unspilled_ns;
        for (int k = 0; k < 4; k++) tiers[(10 + k) * nn + i] = w->file_bytes[k];
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
                                       .addr = strs + 3 * nn, .disk_used = tiers,
                                       .spilled_bytes = tiers + nn, .spilled_ns = tiers + 2 * nn,
                                       .unspilled_bytes = tiers + 3 * nn,
                                       .unspilled_ns = tiers + 4 * nn,
                                       .host_used = tiers + 5 * nn,
                                       .host_spilled_bytes = tiers + 6 * nn,
                                       .host_spilled_ns = tiers + 7 * nn,
                                       .host_unspilled_bytes = tiers + 8 * nn,
                                       .host_unspilled_ns = tiers + 9 * nn,
                                       .file_cpu_bytes = tiers + 10 * nn,
                                       .file_pinned_bytes = tiers + 11 * nn,
                                       .file_cufile_bytes = tiers + 12 * nn,
                                       .file_compat_bytes = tiers + 13 * nn};
    gs__sched_send(s, p, &msg);
out:
    gs_free(ids);
    gs_free(dev);
    gs_free(thr);
    gs_free(lim);
    gs_free(used);
    gs_free(tiers);
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
            gs__sched_send_error(s, p, st, text);
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
    case GS_MSG_LOCATE_REQ: {
        gs__sched_locate(s, p, &msg->u.locate_req);   /* keys of other clients get no location */
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
    case GS_MSG_REPORT_REQ:
        gs__dash_report_req(s, p, &msg->u.report_req);
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

/* A stored byte of @a w is on disk with the probability disk_used / (disk_used + host_used +
 * mem_used) (the files of chunks also in memory make this an upper bound) and costs its
 * measured read time per byte (1 ns, i.e. 1 GB/s, until it has read something back); likewise
 * in a device worker's host memory (host_used; 0.05 ns, i.e. 20 GB/s, until it has copied
 * something back to the device). */
static void gs__worker_disk_cost(gs__worker_t *w)
{
    double held = (double)w->disk_used + (double)w->host_used + (double)w->mem_used;
    double per_byte = w->unspilled_bytes > 0 ? (double)w->unspilled_ns / (double)w->unspilled_bytes
                                             : 1.0;
    double host_per_byte = w->host_unspilled_bytes > 0
                               ? (double)w->host_unspilled_ns / (double)w->host_unspilled_bytes
                               : 0.05;
    w->disk_ns_per_byte = held > 0 ? (double)w->disk_used / held * per_byte : 0.0;
    w->host_ns_per_byte = held > 0 ? (double)w->host_used / held * host_per_byte : 0.0;
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
            w->disk_used = msg->u.heartbeat.disk_used;
            w->disk_limit = msg->u.heartbeat.disk_limit;
            w->spilled_bytes = msg->u.heartbeat.spilled_bytes;
            w->spilled_ns = msg->u.heartbeat.spilled_ns;
            w->unspilled_bytes = msg->u.heartbeat.unspilled_bytes;
            w->unspilled_ns = msg->u.heartbeat.unspilled_ns;
            w->host_used = msg->u.heartbeat.host_used;
            w->host_limit = msg->u.heartbeat.host_limit;
            w->host_spilled_bytes = msg->u.heartbeat.host_spilled_bytes;
            w->host_spilled_ns = msg->u.heartbeat.host_spilled_ns;
            w->host_unspilled_bytes = msg->u.heartbeat.host_unspilled_bytes;
            w->host_unspilled_ns = msg->u.heartbeat.host_unspilled_ns;
            w->file_bytes[0] = msg->u.heartbeat.file_cpu_bytes;
            w->file_bytes[1] = msg->u.heartbeat.file_pinned_bytes;
            w->file_bytes[2] = msg->u.heartbeat.file_cufile_bytes;
            w->file_bytes[3] = msg->u.heartbeat.file_compat_bytes;
            gs__worker_disk_cost(w);
            /* what is not a root chunk counted here (earlier TASK_DONEs of this connection have
             * been processed; chunks released but not yet dropped there count as other) */
            w->mem_other = w->mem_used > w->roots.held_bytes ? w->mem_used - w->roots.held_bytes : 0;
            if (msg->u.heartbeat.mem_limit > 0) w->memory_limit = msg->u.heartbeat.mem_limit;
            gs__dash_heartbeat(s->dash, w, msg->u.heartbeat.executing, msg->u.heartbeat.queued);
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
        gs__sched_relay_data(s, p->worker, msg);
        break;
    case GS_MSG_BANDWIDTH:
        gs__sched_bandwidth(s, p->worker, &msg->u.bandwidth);
        break;
    case GS_MSG_REPLICATE_DONE:
        gs__sched_replicate_done(s, p->worker, &msg->u.replicate_done);
        break;
    case GS_MSG_ERROR: {
        /* the worker is leaving (its device is lost, worker/worker.h): removed at once, its
         * tasks reassigned and its chunks recomputed as for any lost worker */
        const gs_msg_error_t *e = &msg->u.error;
        int32_t st = e->status < 0 ? e->status : GS_ERR_INTERNAL;
        gs__peer_close(p, (gs_status_t)st, 0, "worker %s is leaving: %s: %.*s", p->worker->name,
                       gs_status_name((gs_status_t)st), (int)(e->message.len > 400 ? 400 : e->message.len),
                       e->message.data != NULL ? (const char *)e->message.data : "");
        break;
    }
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

static uint64_t gs__addr_count(gs_sched_t *s, uint64_t key, int delta);

static void gs__on_close(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    gs__peer_t *p = arg;
    gs_sched_t *s = p->s;
    (void)conn;
    gs__hs_unlink(s, p);
    p->conn = NULL;
    if (reason == GS_ERR_MSG_TOO_LARGE) s->st.msgs_oversized_total++;
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
    if (p->evicted) s->nevicted--;
    gs__addr_count(s, p->addr_key, -1);
    GS_VEC_FREE(&p->relay_wait);
    gs_free(p);
    if (!s->stopping) gs__sched_tick(s);
}

/* Key of the peer's IP address for conns_by_addr (IPv4 and IPv4-mapped IPv6: the address;
 * IPv6: a hash of it, top bit set); 0 when unknown. */
static uint64_t gs__addr_key(const gs_conn_t *conn)
{
    struct sockaddr_storage ss;
    const uint8_t *a;
    uint64_t h = 1469598103934665603ull;
    if (gs_conn_peer_addr(conn, &ss) != GS_OK) return 0;
    if (ss.ss_family == AF_INET) {
        return (1ull << 32) | ((const struct sockaddr_in *)&ss)->sin_addr.s_addr;
    }
    if (ss.ss_family != AF_INET6) return 0;
    a = ((const struct sockaddr_in6 *)&ss)->sin6_addr.s6_addr;
    if (memcmp(a, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0) {
        uint32_t v4;
        memcpy(&v4, a + 12, sizeof v4);
        return (1ull << 32) | v4;
    }
    for (int i = 0; i < 16; i++) h = (h ^ a[i]) * 1099511628211ull;
    return h | (1ull << 63);
}

/* Add @a delta to the connections counted for @a key; returns the new count. */
static uint64_t gs__addr_count(gs_sched_t *s, uint64_t key, int delta)
{
    uint64_t n = 0;
    if (key == 0) return 0;
    gs_u64map_get(&s->conns_by_addr, key, &n);
    n = delta < 0 ? n - 1 : n + 1;
    if (n == 0) {
        gs_u64map_del(&s->conns_by_addr, key);
    } else if (gs_u64map_put(&s->conns_by_addr, key, n) != GS_OK) {
        return 0;   /* out of memory: this connection is not limited per address */
    }
    return n;
}

/* A connection younger than this that has sent nothing may be a real peer whose HELLO is on
 * its way (gsched accepts within microseconds; a loaded peer writes later): evicted only when
 * no other candidate is left. */
#define GS__EVICT_GRACE_NS (1000ull * 1000000ull)
/* Candidates examined per eviction (each costs a recv(MSG_PEEK)): under a connect storm most
 * are young and silent, and examining them all made every accept O(connections) again. */
#define GS__EVICT_SCAN 32

/* Close a connection that has not completed the handshake (other than @a keep; from address
 * @a key unless 0) to make room. Among the GS__EVICT_SCAN oldest candidates, in order of
 * preference, oldest first: one whose peer is gone
 * (end of stream or reset unread) or that has sent nothing for GS__EVICT_GRACE_NS; else the
 * oldest young one that has sent nothing; else the oldest. A peer whose HELLO waits unread (a
 * burst of connections accepted before the loop read it) or that was challenged (its HELLO read,
 * its AUTH on the way) is not the idle one to drop, nor is a connection just accepted whose
 * HELLO has not arrived yet, else a connect storm from its address would evict real clients in
 * the middle of their handshake. 0 when there is none. */
static int gs__evict_oldest_handshake(gs_sched_t *s, const gs__peer_t *keep, uint64_t key)
{
    gs__peer_t *oldest = NULL, *young = NULL, *first = NULL;
    uint64_t now = gs_now_ns();
    int seen = 0;
    /* the handshake list holds exactly the connections in HANDSHAKE, in accept order */
    for (gs__peer_t *p = s->hs_head; p != NULL && seen < GS__EVICT_SCAN; p = p->hs_next) {
        int in;
        if (p == keep || (key != 0 && p->addr_key != key)) continue;
        seen++;
        if (first == NULL) first = p;
        if (p->hs.challenged || (in = gs_conn_input_peek(p->conn)) > 0) continue;
        if (in < 0 || now < p->t_connect_ns || now - p->t_connect_ns >= GS__EVICT_GRACE_NS) {
            oldest = p;
            break;
        }
        if (young == NULL) young = p;
    }
    if (oldest == NULL) oldest = young != NULL ? young : first;
    if (oldest == NULL) return 0;
    s->st.conns_evicted_total++;
    /* its descriptor is closed at once: it stops counting now, not when its close callback runs
     * (a burst of accepts in one loop iteration would otherwise find nothing left to evict) */
    gs__addr_count(s, oldest->addr_key, -1);
    oldest->addr_key = 0;
    oldest->evicted = 1;
    s->nevicted++;
    GS_LOG_INFO("connection from %s closed before its handshake to make room", gs_conn_peer_name(oldest->conn));
    /* A real peer among the evicted (its HELLO still on the way) must learn that it may try
     * again: a bare close is also what a TLS-only gsched does to a plain client, which clients
     * give up on after a few tries. Plain connections get an ERROR BUSY first: a frame that
     * nothing waits before is written at once (gs_conn_send's try-write), so it goes out with
     * the close below, which still frees the descriptor now (best effort: a frame the socket
     * cannot take at once is dropped with the connection). A TLS connection has no session yet
     * to carry it. */
    if (s->tls == NULL)
        gs__sched_send_error(s, oldest, GS_ERR_BUSY, "too many connections from this address: "
                             "closed before its handshake to make room; try again");
    gs__peer_close(oldest, GS_ERR_BUSY, 0, NULL);   /* abortive: its descriptor is freed now */
    return 1;
}

/* Enforce max_connections and max_connections_per_addr on the new connection @a p (counted). */
static void gs__admit(gs_sched_t *s, gs__peer_t *p)
{
    uint64_t from_addr = gs__addr_count(s, p->addr_key, +1);
    if (from_addr > s->max_conns_per_addr && !gs__evict_oldest_handshake(s, p, p->addr_key)) {
        s->st.conns_refused_total++;
        gs__peer_close(p, GS_ERR_BUSY, GS_ERR_BUSY, "too many connections from %s (limit %u per address)",
                       gs_conn_peer_name(p->conn), s->max_conns_per_addr);
    } else if (s->nconns - s->nevicted > s->max_conns && !gs__evict_oldest_handshake(s, p, 0)) {
        s->st.conns_refused_total++;
        gs__peer_close(p, GS_ERR_BUSY, GS_ERR_BUSY, "too many connections (limit %u)", s->max_conns);
    }
}

/* Accept the connection pending in @a server and start its handshake (or refuse it). */
static void gs__accept(gs_sched_t *s, uv_stream_t *server)
{
    gs__peer_t *p;
    gs_conn_params_t cp;
    gs_status_t st;

    /* Every way out before gs_conn_accept() succeeded must refuse the connection: libuv stops
     * watching the listening socket when this callback returns without accepting, and gsched
     * would never accept a connection again. */
    p = gs_calloc(1, sizeof *p, "peer");
    if (p == NULL) {
        s->st.accept_errors_total++;
        GS_LOG_ERROR("out of memory accepting a connection: refused");
        gs_conn_refuse(&s->refuser, server);
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
    cp.budget = &s->frame_budget;
    cp.tls = s->tls;
    st = gs_conn_accept(server, &cp, &p->conn);
    if (st != GS_OK) {
        s->st.accept_errors_total++;
        GS_LOG_WARN("cannot accept a connection: %s", gs_last_error());
        gs_free(p);
        gs_conn_refuse(&s->refuser, server);
        return;
    }
    gs_conn_set_data(p->conn, p);
    p->next = s->peers;
    if (s->peers) s->peers->prev = p;
    s->peers = p;
    s->nconns++;
    p->addr_key = gs__addr_key(p->conn);
    gs__hs_link(s, p);
    if (s->stopping) {
        gs__peer_close(p, GS_OK, 0, NULL);
        return;
    }
    gs__admit(s, p);
}

void gs__sched_on_connection(uv_stream_t *server, int status)
{
    gs_sched_t *s = server->data;

    if (status < 0) {
        s->st.accept_errors_total++;
        GS_LOG_WARN("accept failed: %s", uv_strerror(status));
        /* out of descriptors: free one for the next attempt */
        if (status == UV_EMFILE || status == UV_ENFILE) gs__evict_oldest_handshake(s, NULL, 0);
        return;
    }
    if (s->accepts_round >= GS__ACCEPTS_PER_ROUND && !s->stopping) {
        /* this iteration has accepted its share: the connection stays in the server (libuv
         * stops watching it until it is accepted) and the next iteration takes it, after
         * the sockets that are ready now (handshakes of accepted peers included) were read */
        s->accept_deferred = 1;
        s->st.accepts_deferred_total++;
        uv_prepare_start(&s->accept_prep, gs__sched_on_accept_prep);
        return;
    }
    s->accepts_round++;
    gs__accept(s, server);
}

void gs__sched_on_accept_prep(uv_prepare_t *prep)
{
    gs_sched_t *s = prep->data;
    uv_prepare_stop(prep);
    if (!s->accept_deferred) return;
    s->accept_deferred = 0;
    if (s->stopping) return;   /* closing the server closed the pending descriptor */
    s->accepts_round++;
    gs__accept(s, (uv_stream_t *)&s->server);   /* uv_accept: libuv watches the server again */
}
