/*
 * Message codec and framing (see proto/msg.h).
 *
 * Payload = one msgpack array [type, field...] with exactly the fields listed in the wire table
 * below, in order, and nothing after it. Integer tables are msgpack `bin` holding little-endian
 * fixed-width values; the count that sizes a table is sent explicitly and every table's length
 * must match it exactly.
 *
 * Decoding runs in three steps:
 *   1. parse: walk the payload with the bounds-checked cursor, check every type, field count and
 *      table length against the data actually present, and record where each table, string and
 *      array of strings/blobs lies in the payload (zero-copy, nothing allocated);
 *   2. own: compute the exact storage needed, make ONE allocation (bounded by a small constant
 *      times the payload length), copy every table 8-byte aligned and every string NUL-terminated;
 *   3. check: the semantic checks shared with the encoder (CSR offsets monotone, error count equal
 *      to the number of failed statuses, no NUL inside strings, ...). On failure the storage is
 *      freed and GS_ERR_PROTO returned.
 * The encoder runs the same semantic checks first (GS_ERR_INVALID_PARAM), so every message that
 * encodes also decodes.
 */
#include "proto/msg.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "proto/mp.h"

#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define GS__BIG_ENDIAN 1
#else
#define GS__BIG_ENDIAN 0
#endif

/* Wire field count of each type (including the type itself); 0 = unknown type. */
static const uint32_t gs__msg_nfields[GS_MSG_TYPE_MAX] = {
    [GS_MSG_HELLO] = 5,           /* [1, version, role, token, name] */
    [GS_MSG_WELCOME] = 4,         /* [2, version, id, heartbeat_ms] */
    [GS_MSG_WORKER_REGISTER] = 9, /* [3, name, backend, host, device, nthreads, pid, memory_limit, ucx_address] */
    [GS_MSG_HEARTBEAT] = 6,       /* [4, seq, mem_used, mem_limit, executing, queued] */
    [GS_MSG_PEERS] = 4,           /* [5, [[id, name, host, ucx_address]...], nremoved, removed] */
    [GS_MSG_GRAPH_SUBMIT] = 14,   /* [6, client_ref, flags, [layer...], ntasks, task_layer, task_block,
                                      dep_off, deps, task_nbytes, nexternals, externals, noutputs, outputs] */
    [GS_MSG_GRAPH_ACCEPTED] = 3,  /* [7, client_ref, graph_id] */
    [GS_MSG_TASK_ASSIGN] = 12,    /* [8, graph_id, layer_ids, [layer...], ntasks, task_id, task_layer,
                                      task_block, dep_off, dep_keys, dep_worker, dep_nbytes] */
    [GS_MSG_TASK_DONE] = 9,       /* [9, n, graph_id, task_id, status, nbytes, run_ns, fetch_ns, [error...]] */
    [GS_MSG_RELEASE] = 3,         /* [10, n, keys] */
    [GS_MSG_GATHER_REQ] = 4,      /* [11, req_id, n, keys] */
    [GS_MSG_DATA] = 6,            /* [12, req_id, graph_id, task_id, status, data] */
    [GS_MSG_FETCH_REQ] = 5,       /* [13, req_id, graph_id, task_id, from_worker] */
    [GS_MSG_PROGRESS] = 4,        /* [14, graph_id, done, total] */
    [GS_MSG_GRAPH_DONE] = 7,      /* [15, graph_id, status, message, ntasks, run_ns_total, wall_ns] */
    [GS_MSG_CANCEL] = 2,          /* [16, graph_id] */
    [GS_MSG_RELEASE_GRAPH] = 2,   /* [17, graph_id] */
    [GS_MSG_ERROR] = 3,           /* [18, status, message] */
    [GS_MSG_SHUTDOWN] = 1,        /* [19] */
    [GS_MSG_INFO_REQ] = 1,        /* [20] */
    [GS_MSG_INFO] = 6,            /* [21, nworkers, nclients, ngraphs_active, tasks_done_total, [name...]] */
    [GS_MSG_BANDWIDTH] = 7,       /* [22, n, peer, bytes, ns, count, [path...]] */
    [GS_MSG_REPLICATE] = 9,       /* [23, req_id, worker_id, worker_name, n, keys, nsrc, from, nbytes] */
    [GS_MSG_REPLICATE_DONE] = 7,  /* [24, req_id, status, message, n, keys, nbytes] */
    [GS_MSG_WORKERS_REQ] = 1,     /* [25] */
    [GS_MSG_WORKERS] = 11,        /* [26, n, id, device, nthreads, memory_limit, mem_used, [name...],
                                      [host...], [backend...], [addr...]] */
};

static const char *const gs__msg_names[GS_MSG_TYPE_MAX] = {
    [GS_MSG_HELLO] = "hello",
    [GS_MSG_WELCOME] = "welcome",
    [GS_MSG_WORKER_REGISTER] = "worker-register",
    [GS_MSG_HEARTBEAT] = "heartbeat",
    [GS_MSG_PEERS] = "peers",
    [GS_MSG_GRAPH_SUBMIT] = "graph-submit",
    [GS_MSG_GRAPH_ACCEPTED] = "graph-accepted",
    [GS_MSG_TASK_ASSIGN] = "task-assign",
    [GS_MSG_TASK_DONE] = "task-done",
    [GS_MSG_RELEASE] = "release",
    [GS_MSG_GATHER_REQ] = "gather-req",
    [GS_MSG_DATA] = "data",
    [GS_MSG_FETCH_REQ] = "fetch-req",
    [GS_MSG_PROGRESS] = "progress",
    [GS_MSG_GRAPH_DONE] = "graph-done",
    [GS_MSG_CANCEL] = "cancel",
    [GS_MSG_RELEASE_GRAPH] = "release-graph",
    [GS_MSG_ERROR] = "error",
    [GS_MSG_SHUTDOWN] = "shutdown",
    [GS_MSG_INFO_REQ] = "info-req",
    [GS_MSG_INFO] = "info",
    [GS_MSG_BANDWIDTH] = "bandwidth",
    [GS_MSG_REPLICATE] = "replicate",
    [GS_MSG_REPLICATE_DONE] = "replicate-done",
    [GS_MSG_WORKERS_REQ] = "workers-req",
    [GS_MSG_WORKERS] = "workers",
};

const char *gs_msg_type_name(uint32_t type)
{
    if (type >= GS_MSG_TYPE_MAX || gs__msg_names[type] == NULL) return "unknown";
    return gs__msg_names[type];
}

static uint64_t gs__ld_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

static void gs__st_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* ------------------------------------------------------------------------------------------ */
/* Semantic checks shared by the encoder and the decoder.                                     */

typedef struct gs__why {
    char text[200];
} gs__why_t;

static int gs__bad(gs__why_t *why, const char *fmt, ...) GS_PRINTF(2, 3);
static int gs__bad(gs__why_t *why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why->text, sizeof why->text, fmt, ap);
    va_end(ap);
    return 0;
}

static int gs__check_bytes(const gs_bytes_t *b, const char *what, gs__why_t *why)
{
    if (b->data == NULL && b->len > 0) return gs__bad(why, "%s has %zu bytes but no data", what, b->len);
    return 1;
}

static int gs__check_str(const gs_str_t *s, const char *what, gs__why_t *why)
{
    if (!gs__check_bytes(s, what, why)) return 0;
    if (s->len > 0 && memchr(s->data, 0, s->len) != NULL) {
        return gs__bad(why, "%s contains a NUL byte", what);
    }
    return 1;
}

static int gs__check_table(const void *p, uint64_t n, const char *what, gs__why_t *why)
{
    if (p == NULL && n > 0) return gs__bad(why, "%s is NULL but has %llu entries", what, (unsigned long long)n);
    return 1;
}

/* CSR offsets: ntasks + 1 entries starting at 0, never decreasing (the last one is ndeps).
 * NULL is accepted for ntasks == 0 (encoded as [0]). */
static int gs__check_dep_off(const uint64_t *dep_off, uint64_t ntasks, gs__why_t *why)
{
    if (dep_off == NULL) {
        if (ntasks == 0) return 1;
        return gs__bad(why, "dep_off is NULL for %llu tasks", (unsigned long long)ntasks);
    }
    if (dep_off[0] != 0) return gs__bad(why, "dep_off[0] is %llu, not 0", (unsigned long long)dep_off[0]);
    for (uint64_t i = 0; i < ntasks; i++) {
        if (dep_off[i + 1] < dep_off[i]) {
            return gs__bad(why, "dep_off decreases at task %llu (%llu after %llu)", (unsigned long long)i,
                           (unsigned long long)dep_off[i + 1], (unsigned long long)dep_off[i]);
        }
    }
    return 1;
}

static uint64_t gs__ndeps(const uint64_t *dep_off, uint64_t ntasks)
{
    return dep_off != NULL ? dep_off[ntasks] : 0;
}

static int gs__check_graph_submit(const gs_msg_graph_submit_t *g, gs__why_t *why)
{
    uint64_t ndeps;
    if (!gs__check_table(g->layers, g->nlayers, "layers", why)) return 0;
    for (uint32_t i = 0; i < g->nlayers; i++) {
        if (!gs__check_bytes(&g->layers[i], "layer", why)) return 0;
    }
    if (!gs__check_table(g->task_layer, g->ntasks, "task_layer", why) ||
        !gs__check_table(g->task_block, g->ntasks, "task_block", why) ||
        !gs__check_table(g->task_nbytes, g->ntasks, "task_nbytes", why) ||
        !gs__check_dep_off(g->dep_off, g->ntasks, why)) {
        return 0;
    }
    ndeps = gs__ndeps(g->dep_off, g->ntasks);
    if (!gs__check_table(g->deps, ndeps, "deps", why) ||
        !gs__check_table(g->externals, g->nexternals, "externals", why) ||
        !gs__check_table(g->outputs, g->noutputs, "outputs", why)) {
        return 0;
    }
    for (uint64_t i = 0; i < g->ntasks; i++) {
        if (g->task_layer[i] >= g->nlayers) {
            return gs__bad(why, "task %llu uses layer %u of %u", (unsigned long long)i, g->task_layer[i],
                           g->nlayers);
        }
    }
    return 1;
}

static int gs__check_task_assign(const gs_msg_task_assign_t *a, gs__why_t *why)
{
    uint64_t ndeps;
    if (!gs__check_table(a->layer_ids, a->nlayers, "layer_ids", why) ||
        !gs__check_table(a->layers, a->nlayers, "layers", why)) {
        return 0;
    }
    for (uint32_t i = 0; i < a->nlayers; i++) {
        if (!gs__check_bytes(&a->layers[i], "layer", why)) return 0;
    }
    if (!gs__check_table(a->task_id, a->ntasks, "task_id", why) ||
        !gs__check_table(a->task_layer, a->ntasks, "task_layer", why) ||
        !gs__check_table(a->task_block, a->ntasks, "task_block", why) ||
        !gs__check_dep_off(a->dep_off, a->ntasks, why)) {
        return 0;
    }
    ndeps = gs__ndeps(a->dep_off, a->ntasks);
    return gs__check_table(a->dep_keys, ndeps, "dep_keys", why) &&
           gs__check_table(a->dep_worker, ndeps, "dep_worker", why) &&
           gs__check_table(a->dep_nbytes, ndeps, "dep_nbytes", why);
}

static int gs__check_task_done(const gs_msg_task_done_t *t, gs__why_t *why)
{
    uint64_t failed = 0;
    if (!gs__check_table(t->graph_id, t->n, "graph_id", why) ||
        !gs__check_table(t->task_id, t->n, "task_id", why) ||
        !gs__check_table(t->status, t->n, "status", why) ||
        !gs__check_table(t->nbytes, t->n, "nbytes", why) ||
        !gs__check_table(t->run_ns, t->n, "run_ns", why) ||
        !gs__check_table(t->fetch_ns, t->n, "fetch_ns", why) ||
        !gs__check_table(t->errors, t->nerrors, "errors", why)) {
        return 0;
    }
    for (uint64_t i = 0; i < t->n; i++) failed += t->status[i] != GS_OK;
    if (failed != t->nerrors) {
        return gs__bad(why, "%u error messages for %llu failed tasks", t->nerrors, (unsigned long long)failed);
    }
    for (uint32_t i = 0; i < t->nerrors; i++) {
        if (!gs__check_str(&t->errors[i], "error message", why)) return 0;
    }
    return 1;
}

static int gs__check_peers(const gs_msg_peers_t *p, gs__why_t *why)
{
    if (!gs__check_table(p->added, p->nadded, "added", why) ||
        !gs__check_table(p->removed, p->nremoved, "removed", why)) {
        return 0;
    }
    for (uint32_t i = 0; i < p->nadded; i++) {
        if (!gs__check_str(&p->added[i].name, "peer name", why) ||
            !gs__check_str(&p->added[i].host, "peer host", why) ||
            !gs__check_bytes(&p->added[i].ucx_address, "peer ucx_address", why)) {
            return 0;
        }
    }
    return 1;
}

static int gs__check_info(const gs_msg_info_t *in, gs__why_t *why)
{
    if (!gs__check_table(in->worker_names, in->nnames, "worker_names", why)) return 0;
    for (uint32_t i = 0; i < in->nnames; i++) {
        if (!gs__check_str(&in->worker_names[i], "worker name", why)) return 0;
    }
    return 1;
}

static int gs__check_strs(const gs_str_t *s, uint32_t n, uint32_t want, const char *what, gs__why_t *why)
{
    if (n != want) return gs__bad(why, "%u %s for %u entries", n, what, want);
    if (!gs__check_table(s, n, what, why)) return 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!gs__check_str(&s[i], what, why)) return 0;
    }
    return 1;
}

static int gs__check_bandwidth(const gs_msg_bandwidth_t *b, gs__why_t *why)
{
    return gs__check_table(b->peer, b->n, "peer", why) && gs__check_table(b->bytes, b->n, "bytes", why) &&
           gs__check_table(b->ns, b->n, "ns", why) && gs__check_table(b->count, b->n, "count", why) &&
           gs__check_strs(b->path, b->npaths, b->n, "paths", why);
}

static int gs__check_replicate(const gs_msg_replicate_t *r, gs__why_t *why)
{
    if (r->nsrc != 0 && r->nsrc != r->n) {
        return gs__bad(why, "%llu sources for %llu keys (0 or one per key)", (unsigned long long)r->nsrc,
                       (unsigned long long)r->n);
    }
    return gs__check_str(&r->worker_name, "worker_name", why) && gs__check_table(r->keys, r->n, "keys", why) &&
           gs__check_table(r->from, r->nsrc, "from", why) && gs__check_table(r->nbytes, r->nsrc, "nbytes", why);
}

static int gs__check_workers(const gs_msg_workers_t *w, gs__why_t *why)
{
    return gs__check_table(w->id, w->n, "id", why) && gs__check_table(w->device, w->n, "device", why) &&
           gs__check_table(w->nthreads, w->n, "nthreads", why) &&
           gs__check_table(w->memory_limit, w->n, "memory_limit", why) &&
           gs__check_table(w->mem_used, w->n, "mem_used", why) &&
           gs__check_strs(w->name, w->nname, w->n, "names", why) &&
           gs__check_strs(w->host, w->nhost, w->n, "hosts", why) &&
           gs__check_strs(w->backend, w->nbackend, w->n, "backends", why) &&
           gs__check_strs(w->addr, w->naddr, w->n, "addresses", why);
}

/* Everything a well-formed message satisfies beyond its shape. */
static int gs__msg_check(const gs_msg_t *m, gs__why_t *why)
{
    switch (m->type) {
    case GS_MSG_HELLO:
        if (m->u.hello.role != GS_ROLE_CLIENT && m->u.hello.role != GS_ROLE_WORKER) {
            return gs__bad(why, "unknown peer role %u", m->u.hello.role);
        }
        return gs__check_str(&m->u.hello.token, "token", why) && gs__check_str(&m->u.hello.name, "name", why);
    case GS_MSG_WORKER_REGISTER: {
        const gs_msg_worker_register_t *w = &m->u.worker_register;
        return gs__check_str(&w->name, "name", why) && gs__check_str(&w->backend, "backend", why) &&
               gs__check_str(&w->host, "host", why) && gs__check_bytes(&w->ucx_address, "ucx_address", why);
    }
    case GS_MSG_PEERS: return gs__check_peers(&m->u.peers, why);
    case GS_MSG_GRAPH_SUBMIT: return gs__check_graph_submit(&m->u.graph_submit, why);
    case GS_MSG_TASK_ASSIGN: return gs__check_task_assign(&m->u.task_assign, why);
    case GS_MSG_TASK_DONE: return gs__check_task_done(&m->u.task_done, why);
    case GS_MSG_RELEASE: return gs__check_table(m->u.release.keys, m->u.release.n, "keys", why);
    case GS_MSG_GATHER_REQ: return gs__check_table(m->u.gather_req.keys, m->u.gather_req.n, "keys", why);
    case GS_MSG_DATA: return gs__check_bytes(&m->u.data.data, "data", why);
    case GS_MSG_GRAPH_DONE: return gs__check_str(&m->u.graph_done.message, "message", why);
    case GS_MSG_ERROR: return gs__check_str(&m->u.error.message, "message", why);
    case GS_MSG_INFO: return gs__check_info(&m->u.info, why);
    case GS_MSG_BANDWIDTH: return gs__check_bandwidth(&m->u.bandwidth, why);
    case GS_MSG_REPLICATE: return gs__check_replicate(&m->u.replicate, why);
    case GS_MSG_REPLICATE_DONE:
        return gs__check_str(&m->u.replicate_done.message, "message", why) &&
               gs__check_table(m->u.replicate_done.keys, m->u.replicate_done.n, "keys", why) &&
               gs__check_table(m->u.replicate_done.nbytes, m->u.replicate_done.n, "nbytes", why);
    case GS_MSG_WORKERS: return gs__check_workers(&m->u.workers, why);
    default: return 1;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Encoder.                                                                                   */

static void gs__w_str(gs_mp_writer_t *w, const gs_str_t *s)
{
    gs_mp_write_str(w, (const char *)s->data, s->len);
}

static void gs__w_bytes(gs_mp_writer_t *w, const gs_bytes_t *b)
{
    gs_mp_write_bin(w, b->data, b->len);
}

/* A table of @a n entries of @a width bytes (host order in memory, little-endian on the wire). */
static void gs__w_table(gs_mp_writer_t *w, const void *p, uint64_t n, unsigned width, const char *what)
{
    if (w->err != GS_OK) return;
    if (n > UINT32_MAX / width) {
        w->err = gs_error_set(GS_ERR_MSG_TOO_LARGE, "%s: %llu entries of %u bytes exceed the 4 GiB bin limit",
                              what, (unsigned long long)n, width);
        return;
    }
#if GS__BIG_ENDIAN
    {
        size_t len = (size_t)n * width;
        uint8_t *tmp = gs_malloc(len, "le table");
        if (tmp == NULL) {
            w->err = gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory converting to little-endian", what);
            return;
        }
        for (size_t i = 0; i < len; i += width) {
            for (unsigned k = 0; k < width; k++) tmp[i + k] = ((const uint8_t *)p)[i + width - 1 - k];
        }
        gs_mp_write_bin(w, tmp, len);
        gs_free(tmp);
    }
#else
    gs_mp_write_bin(w, p, (size_t)n * width);
#endif
}

static void gs__w_dep_off(gs_mp_writer_t *w, const uint64_t *dep_off, uint64_t ntasks)
{
    static const uint64_t zero = 0;
    if (dep_off == NULL) {
        gs__w_table(w, &zero, 1, 8, "dep_off");
    } else if (ntasks >= UINT32_MAX) {
        gs__w_table(w, dep_off, UINT64_MAX, 8, "dep_off");  /* reports the size error */
    } else {
        gs__w_table(w, dep_off, ntasks + 1, 8, "dep_off");
    }
}

static void gs__w_body(gs_mp_writer_t *w, const gs_msg_t *m)
{
    switch (m->type) {
    case GS_MSG_HELLO: {
        const gs_msg_hello_t *h = &m->u.hello;
        gs_mp_write_u64(w, h->version);
        gs_mp_write_u64(w, h->role);
        gs__w_str(w, &h->token);
        gs__w_str(w, &h->name);
        break;
    }
    case GS_MSG_WELCOME:
        gs_mp_write_u64(w, m->u.welcome.version);
        gs_mp_write_u64(w, m->u.welcome.id);
        gs_mp_write_u64(w, m->u.welcome.heartbeat_ms);
        break;
    case GS_MSG_WORKER_REGISTER: {
        const gs_msg_worker_register_t *r = &m->u.worker_register;
        gs__w_str(w, &r->name);
        gs__w_str(w, &r->backend);
        gs__w_str(w, &r->host);
        gs_mp_write_i64(w, r->device);
        gs_mp_write_u64(w, r->nthreads);
        gs_mp_write_u64(w, r->pid);
        gs_mp_write_u64(w, r->memory_limit);
        gs__w_bytes(w, &r->ucx_address);
        break;
    }
    case GS_MSG_HEARTBEAT: {
        const gs_msg_heartbeat_t *h = &m->u.heartbeat;
        gs_mp_write_u64(w, h->seq);
        gs_mp_write_u64(w, h->mem_used);
        gs_mp_write_u64(w, h->mem_limit);
        gs_mp_write_u64(w, h->executing);
        gs_mp_write_u64(w, h->queued);
        break;
    }
    case GS_MSG_PEERS: {
        const gs_msg_peers_t *p = &m->u.peers;
        gs_mp_write_array(w, p->nadded);
        for (uint32_t i = 0; i < p->nadded; i++) {
            gs_mp_write_array(w, 4);
            gs_mp_write_u64(w, p->added[i].id);
            gs__w_str(w, &p->added[i].name);
            gs__w_str(w, &p->added[i].host);
            gs__w_bytes(w, &p->added[i].ucx_address);
        }
        gs_mp_write_u64(w, p->nremoved);
        gs__w_table(w, p->removed, p->nremoved, 8, "removed");
        break;
    }
    case GS_MSG_GRAPH_SUBMIT: {
        const gs_msg_graph_submit_t *g = &m->u.graph_submit;
        uint64_t ndeps = gs__ndeps(g->dep_off, g->ntasks);
        gs_mp_write_u64(w, g->client_ref);
        gs_mp_write_u64(w, g->flags);
        gs_mp_write_array(w, g->nlayers);
        for (uint32_t i = 0; i < g->nlayers; i++) gs__w_bytes(w, &g->layers[i]);
        gs_mp_write_u64(w, g->ntasks);
        gs__w_table(w, g->task_layer, g->ntasks, 4, "task_layer");
        gs__w_table(w, g->task_block, g->ntasks, 8, "task_block");
        gs__w_dep_off(w, g->dep_off, g->ntasks);
        gs__w_table(w, g->deps, ndeps, 8, "deps");
        gs__w_table(w, g->task_nbytes, g->ntasks, 8, "task_nbytes");
        gs_mp_write_u64(w, g->nexternals);
        gs__w_table(w, g->externals, g->nexternals > UINT32_MAX ? UINT64_MAX : 2 * g->nexternals, 8,
                    "externals");
        gs_mp_write_u64(w, g->noutputs);
        gs__w_table(w, g->outputs, g->noutputs, 8, "outputs");
        break;
    }
    case GS_MSG_GRAPH_ACCEPTED:
        gs_mp_write_u64(w, m->u.graph_accepted.client_ref);
        gs_mp_write_u64(w, m->u.graph_accepted.graph_id);
        break;
    case GS_MSG_TASK_ASSIGN: {
        const gs_msg_task_assign_t *a = &m->u.task_assign;
        uint64_t ndeps = gs__ndeps(a->dep_off, a->ntasks);
        gs_mp_write_u64(w, a->graph_id);
        gs_mp_write_array(w, a->nlayers);
        for (uint32_t i = 0; i < a->nlayers; i++) gs__w_bytes(w, &a->layers[i]);
        gs__w_table(w, a->layer_ids, a->nlayers, 4, "layer_ids");
        gs_mp_write_u64(w, a->ntasks);
        gs__w_table(w, a->task_id, a->ntasks, 8, "task_id");
        gs__w_table(w, a->task_layer, a->ntasks, 4, "task_layer");
        gs__w_table(w, a->task_block, a->ntasks, 8, "task_block");
        gs__w_dep_off(w, a->dep_off, a->ntasks);
        gs__w_table(w, a->dep_keys, ndeps > UINT32_MAX ? UINT64_MAX : 2 * ndeps, 8, "dep_keys");
        gs__w_table(w, a->dep_worker, ndeps, 8, "dep_worker");
        gs__w_table(w, a->dep_nbytes, ndeps, 8, "dep_nbytes");
        break;
    }
    case GS_MSG_TASK_DONE: {
        const gs_msg_task_done_t *t = &m->u.task_done;
        gs_mp_write_u64(w, t->n);
        gs__w_table(w, t->graph_id, t->n, 8, "graph_id");
        gs__w_table(w, t->task_id, t->n, 8, "task_id");
        gs__w_table(w, t->status, t->n, 4, "status");
        gs__w_table(w, t->nbytes, t->n, 8, "nbytes");
        gs__w_table(w, t->run_ns, t->n, 8, "run_ns");
        gs__w_table(w, t->fetch_ns, t->n, 8, "fetch_ns");
        gs_mp_write_array(w, t->nerrors);
        for (uint32_t i = 0; i < t->nerrors; i++) gs__w_str(w, &t->errors[i]);
        break;
    }
    case GS_MSG_RELEASE:
        gs_mp_write_u64(w, m->u.release.n);
        gs__w_table(w, m->u.release.keys, m->u.release.n > UINT32_MAX ? UINT64_MAX : 2 * m->u.release.n, 8,
                    "keys");
        break;
    case GS_MSG_GATHER_REQ:
        gs_mp_write_u64(w, m->u.gather_req.req_id);
        gs_mp_write_u64(w, m->u.gather_req.n);
        gs__w_table(w, m->u.gather_req.keys,
                    m->u.gather_req.n > UINT32_MAX ? UINT64_MAX : 2 * m->u.gather_req.n, 8, "keys");
        break;
    case GS_MSG_DATA:
        gs_mp_write_u64(w, m->u.data.req_id);
        gs_mp_write_u64(w, m->u.data.graph_id);
        gs_mp_write_u64(w, m->u.data.task_id);
        gs_mp_write_i64(w, m->u.data.status);
        gs__w_bytes(w, &m->u.data.data);
        break;
    case GS_MSG_FETCH_REQ:
        gs_mp_write_u64(w, m->u.fetch_req.req_id);
        gs_mp_write_u64(w, m->u.fetch_req.graph_id);
        gs_mp_write_u64(w, m->u.fetch_req.task_id);
        gs_mp_write_u64(w, m->u.fetch_req.from_worker);
        break;
    case GS_MSG_PROGRESS:
        gs_mp_write_u64(w, m->u.progress.graph_id);
        gs_mp_write_u64(w, m->u.progress.done);
        gs_mp_write_u64(w, m->u.progress.total);
        break;
    case GS_MSG_GRAPH_DONE: {
        const gs_msg_graph_done_t *d = &m->u.graph_done;
        gs_mp_write_u64(w, d->graph_id);
        gs_mp_write_i64(w, d->status);
        gs__w_str(w, &d->message);
        gs_mp_write_u64(w, d->ntasks);
        gs_mp_write_u64(w, d->run_ns_total);
        gs_mp_write_u64(w, d->wall_ns);
        break;
    }
    case GS_MSG_CANCEL:
    case GS_MSG_RELEASE_GRAPH:
        gs_mp_write_u64(w, m->u.cancel.graph_id);
        break;
    case GS_MSG_ERROR:
        gs_mp_write_i64(w, m->u.error.status);
        gs__w_str(w, &m->u.error.message);
        break;
    case GS_MSG_INFO: {
        const gs_msg_info_t *in = &m->u.info;
        gs_mp_write_u64(w, in->nworkers);
        gs_mp_write_u64(w, in->nclients);
        gs_mp_write_u64(w, in->ngraphs_active);
        gs_mp_write_u64(w, in->tasks_done_total);
        gs_mp_write_array(w, in->nnames);
        for (uint32_t i = 0; i < in->nnames; i++) gs__w_str(w, &in->worker_names[i]);
        break;
    }
    case GS_MSG_BANDWIDTH: {
        const gs_msg_bandwidth_t *b = &m->u.bandwidth;
        gs_mp_write_u64(w, b->n);
        gs__w_table(w, b->peer, b->n, 8, "peer");
        gs__w_table(w, b->bytes, b->n, 8, "bytes");
        gs__w_table(w, b->ns, b->n, 8, "ns");
        gs__w_table(w, b->count, b->n, 4, "count");
        gs_mp_write_array(w, b->npaths);
        for (uint32_t i = 0; i < b->npaths; i++) gs__w_str(w, &b->path[i]);
        break;
    }
    case GS_MSG_REPLICATE: {
        const gs_msg_replicate_t *r = &m->u.replicate;
        gs_mp_write_u64(w, r->req_id);
        gs_mp_write_u64(w, r->worker_id);
        gs__w_str(w, &r->worker_name);
        gs_mp_write_u64(w, r->n);
        gs__w_table(w, r->keys, r->n > UINT32_MAX ? UINT64_MAX : 2 * r->n, 8, "keys");
        gs_mp_write_u64(w, r->nsrc);
        gs__w_table(w, r->from, r->nsrc, 8, "from");
        gs__w_table(w, r->nbytes, r->nsrc, 8, "nbytes");
        break;
    }
    case GS_MSG_REPLICATE_DONE: {
        const gs_msg_replicate_done_t *r = &m->u.replicate_done;
        gs_mp_write_u64(w, r->req_id);
        gs_mp_write_i64(w, r->status);
        gs__w_str(w, &r->message);
        gs_mp_write_u64(w, r->n);
        gs__w_table(w, r->keys, r->n > UINT32_MAX ? UINT64_MAX : 2 * r->n, 8, "keys");
        gs__w_table(w, r->nbytes, r->n, 8, "nbytes");
        break;
    }
    case GS_MSG_WORKERS: {
        const gs_msg_workers_t *x = &m->u.workers;
        gs_mp_write_u64(w, x->n);
        gs__w_table(w, x->id, x->n, 8, "id");
        gs__w_table(w, x->device, x->n, 4, "device");
        gs__w_table(w, x->nthreads, x->n, 4, "nthreads");
        gs__w_table(w, x->memory_limit, x->n, 8, "memory_limit");
        gs__w_table(w, x->mem_used, x->n, 8, "mem_used");
        gs_mp_write_array(w, x->nname);
        for (uint32_t i = 0; i < x->nname; i++) gs__w_str(w, &x->name[i]);
        gs_mp_write_array(w, x->nhost);
        for (uint32_t i = 0; i < x->nhost; i++) gs__w_str(w, &x->host[i]);
        gs_mp_write_array(w, x->nbackend);
        for (uint32_t i = 0; i < x->nbackend; i++) gs__w_str(w, &x->backend[i]);
        gs_mp_write_array(w, x->naddr);
        for (uint32_t i = 0; i < x->naddr; i++) gs__w_str(w, &x->addr[i]);
        break;
    }
    default: /* SHUTDOWN, INFO_REQ, WORKERS_REQ: no fields */
        break;
    }
}

static uint64_t gs__sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t gs__sat_mul(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* Rough payload size of the bulky parts, so large frames are reserved once instead of grown by
 * doubling (a 600 MB chunk would otherwise leave a 1 GiB buffer behind). */
static uint64_t gs__msg_size_hint(const gs_msg_t *m)
{
    uint64_t s = 64;
    switch (m->type) {
    case GS_MSG_GRAPH_SUBMIT: {
        const gs_msg_graph_submit_t *g = &m->u.graph_submit;
        for (uint32_t i = 0; i < g->nlayers; i++) s = gs__sat_add(s, g->layers[i].len + 8);
        s = gs__sat_add(s, gs__sat_mul(g->ntasks, 4 + 8 + 8 + 8));
        s = gs__sat_add(s, gs__sat_mul(gs__ndeps(g->dep_off, g->ntasks), 8));
        s = gs__sat_add(s, gs__sat_mul(g->nexternals, 16));
        s = gs__sat_add(s, gs__sat_mul(g->noutputs, 8));
        return s;
    }
    case GS_MSG_TASK_ASSIGN: {
        const gs_msg_task_assign_t *a = &m->u.task_assign;
        for (uint32_t i = 0; i < a->nlayers; i++) s = gs__sat_add(s, a->layers[i].len + 12);
        s = gs__sat_add(s, gs__sat_mul(a->ntasks, 8 + 4 + 8 + 8));
        s = gs__sat_add(s, gs__sat_mul(gs__ndeps(a->dep_off, a->ntasks), 32));
        return s;
    }
    case GS_MSG_TASK_DONE:
        return gs__sat_add(s, gs__sat_mul(m->u.task_done.n, 44));
    case GS_MSG_RELEASE:
        return gs__sat_add(s, gs__sat_mul(m->u.release.n, 16));
    case GS_MSG_GATHER_REQ:
        return gs__sat_add(s, gs__sat_mul(m->u.gather_req.n, 16));
    case GS_MSG_DATA:
        return gs__sat_add(s, m->u.data.data.len);
    default:
        return s;
    }
}

static gs_status_t gs__msg_encode(const gs_msg_t *msg, gs_buf_t *out, int head_only, size_t *tail_len_p)
{
    static const uint8_t header[GS_PROTO_FRAME_HEADER] = {0};
    gs_mp_writer_t w;
    gs__why_t why;
    size_t start, payload, tail;
    uint64_t hint;
    gs_status_t st;

    if (msg == NULL || out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_msg_encode: NULL argument");
    if (msg->type == 0 || msg->type >= GS_MSG_TYPE_MAX) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "cannot encode unknown message type %u", msg->type);
    }
    if (!gs__msg_check(msg, &why)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "cannot encode %s message: %s", gs_msg_type_name(msg->type),
                            why.text);
    }
    head_only = head_only && msg->type == GS_MSG_DATA;
    tail = head_only ? msg->u.data.data.len : 0;
    hint = head_only ? 64 : gs__msg_size_hint(msg);
    if (hint <= UINT32_MAX && gs_buf_reserve(out, GS_PROTO_FRAME_HEADER + (size_t)hint) != GS_OK) {
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory encoding a %s message of about %llu bytes",
                            gs_msg_type_name(msg->type), (unsigned long long)hint);
    }
    start = out->len;
    if (gs_buf_append(out, header, sizeof header) != GS_OK) {
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory encoding a %s message", gs_msg_type_name(msg->type));
    }
    gs_mp_writer_init(&w, out);
    gs_mp_write_array(&w, gs__msg_nfields[msg->type]);
    gs_mp_write_u64(&w, msg->type);
    if (head_only) {
        /* gs__w_body's DATA fields, with only the bin's header: the caller sends the bytes */
        gs_mp_write_u64(&w, msg->u.data.req_id);
        gs_mp_write_u64(&w, msg->u.data.graph_id);
        gs_mp_write_u64(&w, msg->u.data.task_id);
        gs_mp_write_i64(&w, msg->u.data.status);
        gs_mp_write_bin_head(&w, tail);
    } else {
        gs__w_body(&w, msg);
    }
    if (w.err != GS_OK) {
        out->len = start;
        return w.err;  /* message set where it latched */
    }
    payload = out->len - start - GS_PROTO_FRAME_HEADER;
    if ((uint64_t)payload + (uint64_t)tail > UINT32_MAX) {
        payload += tail;
        out->len = start;
        st = gs_error_set(GS_ERR_MSG_TOO_LARGE, "%s message of %zu bytes exceeds the 4 GiB frame limit",
                          gs_msg_type_name(msg->type), payload);
        return st;
    }
    gs__st_le32(out->data + start, (uint32_t)(payload + tail));
    if (tail_len_p != NULL) *tail_len_p = tail;
    return GS_OK;
}

gs_status_t gs_msg_encode(const gs_msg_t *msg, gs_buf_t *out)
{
    return gs__msg_encode(msg, out, 0, NULL);
}

gs_status_t gs_msg_encode_head(const gs_msg_t *msg, gs_buf_t *out, size_t *tail_len_p)
{
    if (tail_len_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_msg_encode_head: NULL argument");
    return gs__msg_encode(msg, out, 1, tail_len_p);
}

/* ------------------------------------------------------------------------------------------ */
/* Decoder.                                                                                   */

typedef enum gs__item_kind {
    GS__IT_U64,    /* table of uint64_t   -> const uint64_t * field */
    GS__IT_U64_MUT,/* table of uint64_t   -> uint64_t * field (peers.removed) */
    GS__IT_U32,    /* table of uint32_t   -> const uint32_t * field */
    GS__IT_I32,    /* table of int32_t    -> const int32_t * field */
    GS__IT_BIN,    /* byte string         -> gs_bytes_t field (8-byte aligned copy) */
    GS__IT_STR,    /* string              -> gs_str_t field (NUL-terminated copy) */
    GS__IT_BINS,   /* array of bin        -> gs_bytes_t * field */
    GS__IT_STRS,   /* array of str        -> gs_str_t * field */
    GS__IT_PEERS   /* array of peer infos -> gs_peer_info_t * field */
} gs__item_kind_t;

typedef struct gs__item {
    gs__item_kind_t kind;
    const uint8_t *raw;   /* first byte (tables, bin, str) or first element (arrays) in the payload */
    size_t len;           /* bytes, or number of elements for arrays */
    void *dst;            /* the field that will point at the owned copy */
} gs__item_t;

#define GS__MAX_ITEMS 12

typedef struct gs__dec {
    gs_mp_reader_t r;
    gs__item_t items[GS__MAX_ITEMS];
    unsigned nitems;
    int borrow;           /* DATA's bytes point into the payload instead of being copied */
} gs__dec_t;

static int gs__dec_fail(gs__dec_t *d, const char *fmt, ...) GS_PRINTF(2, 3);
static int gs__dec_fail(gs__dec_t *d, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    if (d->r.err != GS_OK) return 0;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return gs_mp_fail(&d->r, what);
}

static void gs__dec_add(gs__dec_t *d, gs__item_kind_t kind, const uint8_t *raw, size_t len, void *dst)
{
    gs_assert_always(d->nitems < GS__MAX_ITEMS);
    d->items[d->nitems].kind = kind;
    d->items[d->nitems].raw = raw;
    d->items[d->nitems].len = len;
    d->items[d->nitems].dst = dst;
    d->nitems++;
}

/* A bin holding exactly @a count entries of @a width bytes. Returns its bytes, NULL on error. */
static const uint8_t *gs__dec_table(gs__dec_t *d, gs__item_kind_t kind, uint64_t count, unsigned width,
                                    void *dst, const char *what)
{
    const uint8_t *p;
    uint32_t len;
    if (!gs_mp_read_bin(&d->r, &p, &len)) return NULL;
    if (count > len / width || (uint64_t)len != count * width) {
        gs__dec_fail(d, "%s has %u bytes, expected %llu entries of %u bytes", what, len,
                     (unsigned long long)count, width);
        return NULL;
    }
    gs__dec_add(d, kind, p, len, dst);
    return p;
}

static void gs__dec_str(gs__dec_t *d, gs_str_t *dst)
{
    const char *s;
    uint32_t len;
    if (gs_mp_read_str(&d->r, &s, &len)) gs__dec_add(d, GS__IT_STR, (const uint8_t *)s, len, dst);
}

static void gs__dec_bin(gs__dec_t *d, gs_bytes_t *dst)
{
    const uint8_t *p;
    uint32_t len;
    if (gs_mp_read_bin(&d->r, &p, &len)) gs__dec_add(d, GS__IT_BIN, p, len, dst);
}

/* An array of bin (@a kind GS__IT_BINS) or str (GS__IT_STRS). */
static void gs__dec_blobs(gs__dec_t *d, gs__item_kind_t kind, void *dst, uint32_t *n_p)
{
    const uint8_t *first, *p;
    const char *s;
    uint32_t n, len;
    if (!gs_mp_read_array(&d->r, &n)) return;
    first = d->r.p;
    for (uint32_t i = 0; i < n; i++) {
        if (!(kind == GS__IT_BINS ? gs_mp_read_bin(&d->r, &p, &len) : gs_mp_read_str(&d->r, &s, &len))) return;
    }
    gs__dec_add(d, kind, first, n, dst);
    *n_p = n;
}

/* One peer: [id, name, host, ucx_address]. */
static int gs__dec_peer(gs_mp_reader_t *r, uint64_t *id_p, const char **name_p, uint32_t *name_len_p,
                        const char **host_p, uint32_t *host_len_p, const uint8_t **ucx_p, uint32_t *ucx_len_p)
{
    uint32_t k;
    if (!gs_mp_read_array(r, &k)) return 0;
    if (k != 4) return gs_mp_fail(r, "peer entry does not have 4 fields");
    return gs_mp_read_u64(r, id_p) && gs_mp_read_str(r, name_p, name_len_p) && gs_mp_read_str(r, host_p, host_len_p) &&
           gs_mp_read_bin(r, ucx_p, ucx_len_p);
}

static void gs__dec_peers(gs__dec_t *d, gs_msg_peers_t *p)
{
    const uint8_t *first, *ucx;
    const char *name, *host;
    uint32_t n, nl, hl, ul;
    uint64_t id;
    if (!gs_mp_read_array(&d->r, &n)) return;
    first = d->r.p;
    for (uint32_t i = 0; i < n; i++) {
        if (!gs__dec_peer(&d->r, &id, &name, &nl, &host, &hl, &ucx, &ul)) return;
    }
    gs__dec_add(d, GS__IT_PEERS, first, n, &p->added);
    p->nadded = n;
}

/* CSR offsets (ntasks + 1 entries); returns the number of dependencies they announce. */
static uint64_t gs__dec_dep_off(gs__dec_t *d, uint64_t ntasks, const uint64_t **dst)
{
    const uint8_t *raw;
    if (ntasks >= UINT32_MAX) return gs__dec_fail(d, "ntasks %llu is too large", (unsigned long long)ntasks);
    raw = gs__dec_table(d, GS__IT_U64, ntasks + 1, 8, (void *)dst, "dep_off");
    return raw != NULL ? gs__ld_le(raw + 8 * ntasks, 8) : 0;
}

static void gs__dec_body(gs__dec_t *d, gs_msg_t *m)
{
    gs_mp_reader_t *r = &d->r;
    switch (m->type) {
    case GS_MSG_HELLO: {
        gs_msg_hello_t *h = &m->u.hello;
        gs_mp_read_u32(r, &h->version);
        gs_mp_read_u32(r, &h->role);
        gs__dec_str(d, &h->token);
        gs__dec_str(d, &h->name);
        break;
    }
    case GS_MSG_WELCOME:
        gs_mp_read_u32(r, &m->u.welcome.version);
        gs_mp_read_u64(r, &m->u.welcome.id);
        gs_mp_read_u64(r, &m->u.welcome.heartbeat_ms);
        break;
    case GS_MSG_WORKER_REGISTER: {
        gs_msg_worker_register_t *w = &m->u.worker_register;
        gs__dec_str(d, &w->name);
        gs__dec_str(d, &w->backend);
        gs__dec_str(d, &w->host);
        gs_mp_read_i32(r, &w->device);
        gs_mp_read_u32(r, &w->nthreads);
        gs_mp_read_u32(r, &w->pid);
        gs_mp_read_u64(r, &w->memory_limit);
        gs__dec_bin(d, &w->ucx_address);
        break;
    }
    case GS_MSG_HEARTBEAT: {
        gs_msg_heartbeat_t *h = &m->u.heartbeat;
        gs_mp_read_u64(r, &h->seq);
        gs_mp_read_u64(r, &h->mem_used);
        gs_mp_read_u64(r, &h->mem_limit);
        gs_mp_read_u32(r, &h->executing);
        gs_mp_read_u32(r, &h->queued);
        break;
    }
    case GS_MSG_PEERS: {
        gs_msg_peers_t *p = &m->u.peers;
        gs__dec_peers(d, p);
        gs_mp_read_u32(r, &p->nremoved);
        gs__dec_table(d, GS__IT_U64_MUT, p->nremoved, 8, &p->removed, "removed");
        break;
    }
    case GS_MSG_GRAPH_SUBMIT: {
        gs_msg_graph_submit_t *g = &m->u.graph_submit;
        uint64_t ndeps;
        gs_mp_read_u64(r, &g->client_ref);
        gs_mp_read_u32(r, &g->flags);
        gs__dec_blobs(d, GS__IT_BINS, &g->layers, &g->nlayers);
        gs_mp_read_u64(r, &g->ntasks);
        gs__dec_table(d, GS__IT_U32, g->ntasks, 4, &g->task_layer, "task_layer");
        gs__dec_table(d, GS__IT_U64, g->ntasks, 8, &g->task_block, "task_block");
        ndeps = gs__dec_dep_off(d, g->ntasks, &g->dep_off);
        gs__dec_table(d, GS__IT_U64, ndeps, 8, &g->deps, "deps");
        gs__dec_table(d, GS__IT_U64, g->ntasks, 8, &g->task_nbytes, "task_nbytes");
        gs_mp_read_u64(r, &g->nexternals);
        gs__dec_table(d, GS__IT_U64, g->nexternals, 16, &g->externals, "externals");
        gs_mp_read_u64(r, &g->noutputs);
        gs__dec_table(d, GS__IT_U64, g->noutputs, 8, &g->outputs, "outputs");
        break;
    }
    case GS_MSG_GRAPH_ACCEPTED:
        gs_mp_read_u64(r, &m->u.graph_accepted.client_ref);
        gs_mp_read_u64(r, &m->u.graph_accepted.graph_id);
        break;
    case GS_MSG_TASK_ASSIGN: {
        gs_msg_task_assign_t *a = &m->u.task_assign;
        uint64_t ndeps;
        gs_mp_read_u64(r, &a->graph_id);
        gs__dec_blobs(d, GS__IT_BINS, &a->layers, &a->nlayers);
        gs__dec_table(d, GS__IT_U32, a->nlayers, 4, &a->layer_ids, "layer_ids");
        gs_mp_read_u64(r, &a->ntasks);
        gs__dec_table(d, GS__IT_U64, a->ntasks, 8, &a->task_id, "task_id");
        gs__dec_table(d, GS__IT_U32, a->ntasks, 4, &a->task_layer, "task_layer");
        gs__dec_table(d, GS__IT_U64, a->ntasks, 8, &a->task_block, "task_block");
        ndeps = gs__dec_dep_off(d, a->ntasks, &a->dep_off);
        gs__dec_table(d, GS__IT_U64, ndeps, 16, &a->dep_keys, "dep_keys");
        gs__dec_table(d, GS__IT_U64, ndeps, 8, &a->dep_worker, "dep_worker");
        gs__dec_table(d, GS__IT_U64, ndeps, 8, &a->dep_nbytes, "dep_nbytes");
        break;
    }
    case GS_MSG_TASK_DONE: {
        gs_msg_task_done_t *t = &m->u.task_done;
        gs_mp_read_u64(r, &t->n);
        gs__dec_table(d, GS__IT_U64, t->n, 8, &t->graph_id, "graph_id");
        gs__dec_table(d, GS__IT_U64, t->n, 8, &t->task_id, "task_id");
        gs__dec_table(d, GS__IT_I32, t->n, 4, &t->status, "status");
        gs__dec_table(d, GS__IT_U64, t->n, 8, &t->nbytes, "nbytes");
        gs__dec_table(d, GS__IT_U64, t->n, 8, &t->run_ns, "run_ns");
        gs__dec_table(d, GS__IT_U64, t->n, 8, &t->fetch_ns, "fetch_ns");
        gs__dec_blobs(d, GS__IT_STRS, &t->errors, &t->nerrors);
        break;
    }
    case GS_MSG_RELEASE:
        gs_mp_read_u64(r, &m->u.release.n);
        gs__dec_table(d, GS__IT_U64, m->u.release.n, 16, &m->u.release.keys, "keys");
        break;
    case GS_MSG_GATHER_REQ:
        gs_mp_read_u64(r, &m->u.gather_req.req_id);
        gs_mp_read_u64(r, &m->u.gather_req.n);
        gs__dec_table(d, GS__IT_U64, m->u.gather_req.n, 16, &m->u.gather_req.keys, "keys");
        break;
    case GS_MSG_DATA:
        gs_mp_read_u64(r, &m->u.data.req_id);
        gs_mp_read_u64(r, &m->u.data.graph_id);
        gs_mp_read_u64(r, &m->u.data.task_id);
        gs_mp_read_i32(r, &m->u.data.status);
        if (d->borrow) {
            const uint8_t *p;
            uint32_t len;
            if (gs_mp_read_bin(r, &p, &len)) {
                m->u.data.data.data = len > 0 ? p : NULL;
                m->u.data.data.len = len;
            }
        } else {
            gs__dec_bin(d, &m->u.data.data);
        }
        break;
    case GS_MSG_FETCH_REQ:
        gs_mp_read_u64(r, &m->u.fetch_req.req_id);
        gs_mp_read_u64(r, &m->u.fetch_req.graph_id);
        gs_mp_read_u64(r, &m->u.fetch_req.task_id);
        gs_mp_read_u64(r, &m->u.fetch_req.from_worker);
        break;
    case GS_MSG_PROGRESS:
        gs_mp_read_u64(r, &m->u.progress.graph_id);
        gs_mp_read_u64(r, &m->u.progress.done);
        gs_mp_read_u64(r, &m->u.progress.total);
        break;
    case GS_MSG_GRAPH_DONE: {
        gs_msg_graph_done_t *g = &m->u.graph_done;
        gs_mp_read_u64(r, &g->graph_id);
        gs_mp_read_i32(r, &g->status);
        gs__dec_str(d, &g->message);
        gs_mp_read_u64(r, &g->ntasks);
        gs_mp_read_u64(r, &g->run_ns_total);
        gs_mp_read_u64(r, &g->wall_ns);
        break;
    }
    case GS_MSG_CANCEL:
    case GS_MSG_RELEASE_GRAPH:
        gs_mp_read_u64(r, &m->u.cancel.graph_id);
        break;
    case GS_MSG_ERROR:
        gs_mp_read_i32(r, &m->u.error.status);
        gs__dec_str(d, &m->u.error.message);
        break;
    case GS_MSG_INFO: {
        gs_msg_info_t *in = &m->u.info;
        gs_mp_read_u32(r, &in->nworkers);
        gs_mp_read_u32(r, &in->nclients);
        gs_mp_read_u64(r, &in->ngraphs_active);
        gs_mp_read_u64(r, &in->tasks_done_total);
        gs__dec_blobs(d, GS__IT_STRS, &in->worker_names, &in->nnames);
        break;
    }
    case GS_MSG_BANDWIDTH: {
        gs_msg_bandwidth_t *b = &m->u.bandwidth;
        gs_mp_read_u32(r, &b->n);
        gs__dec_table(d, GS__IT_U64, b->n, 8, &b->peer, "peer");
        gs__dec_table(d, GS__IT_U64, b->n, 8, &b->bytes, "bytes");
        gs__dec_table(d, GS__IT_U64, b->n, 8, &b->ns, "ns");
        gs__dec_table(d, GS__IT_U32, b->n, 4, &b->count, "count");
        gs__dec_blobs(d, GS__IT_STRS, &b->path, &b->npaths);
        break;
    }
    case GS_MSG_REPLICATE: {
        gs_msg_replicate_t *x = &m->u.replicate;
        gs_mp_read_u64(r, &x->req_id);
        gs_mp_read_u64(r, &x->worker_id);
        gs__dec_str(d, &x->worker_name);
        gs_mp_read_u64(r, &x->n);
        gs__dec_table(d, GS__IT_U64, x->n, 16, &x->keys, "keys");
        gs_mp_read_u64(r, &x->nsrc);
        gs__dec_table(d, GS__IT_U64, x->nsrc, 8, &x->from, "from");
        gs__dec_table(d, GS__IT_U64, x->nsrc, 8, &x->nbytes, "nbytes");
        break;
    }
    case GS_MSG_REPLICATE_DONE: {
        gs_msg_replicate_done_t *x = &m->u.replicate_done;
        gs_mp_read_u64(r, &x->req_id);
        gs_mp_read_i32(r, &x->status);
        gs__dec_str(d, &x->message);
        gs_mp_read_u64(r, &x->n);
        gs__dec_table(d, GS__IT_U64, x->n, 16, &x->keys, "keys");
        gs__dec_table(d, GS__IT_U64, x->n, 8, &x->nbytes, "nbytes");
        break;
    }
    case GS_MSG_WORKERS: {
        gs_msg_workers_t *x = &m->u.workers;
        gs_mp_read_u32(r, &x->n);
        gs__dec_table(d, GS__IT_U64, x->n, 8, &x->id, "id");
        gs__dec_table(d, GS__IT_I32, x->n, 4, &x->device, "device");
        gs__dec_table(d, GS__IT_U32, x->n, 4, &x->nthreads, "nthreads");
        gs__dec_table(d, GS__IT_U64, x->n, 8, &x->memory_limit, "memory_limit");
        gs__dec_table(d, GS__IT_U64, x->n, 8, &x->mem_used, "mem_used");
        gs__dec_blobs(d, GS__IT_STRS, &x->name, &x->nname);
        gs__dec_blobs(d, GS__IT_STRS, &x->host, &x->nhost);
        gs__dec_blobs(d, GS__IT_STRS, &x->backend, &x->nbackend);
        gs__dec_blobs(d, GS__IT_STRS, &x->addr, &x->naddr);
        break;
    }
    default: /* SHUTDOWN, INFO_REQ, WORKERS_REQ */
        break;
    }
}

static size_t gs__place(size_t *off, size_t len, size_t align)
{
    size_t o = (*off + (align - 1)) & ~(align - 1);
    *off = o + len;
    return o;
}

#if GS__BIG_ENDIAN
static void gs__from_le(uint8_t *p, size_t len, unsigned width)
{
    for (size_t i = 0; i < len; i += width) {
        for (unsigned a = 0, b = width - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
    }
}
#else
#define gs__from_le(p, len, width) ((void)0)
#endif

/* Copy a blob (bin: 8-byte aligned; str: NUL-terminated) into the storage. */
static void gs__own_blob(size_t *off, uint8_t *base, int is_str, const uint8_t *raw, size_t len, gs_bytes_t *dst)
{
    size_t o = is_str ? gs__place(off, len + 1, 1) : gs__place(off, len, 8);
    if (base == NULL) return;
    if (len > 0) memcpy(base + o, raw, len);
    if (is_str) base[o + len] = 0;
    dst->data = (is_str || len > 0) ? base + o : NULL;
    dst->len = len;
}

/* Lay out (base == NULL: only size) or copy (base != NULL) every recorded item; returns the size.
 * The payload was fully validated by the parse step, so re-reading array elements cannot fail. */
static size_t gs__dec_layout(const gs__dec_t *d, uint8_t *base)
{
    size_t off = 0;
    for (unsigned i = 0; i < d->nitems; i++) {
        const gs__item_t *it = &d->items[i];
        switch (it->kind) {
        case GS__IT_U64:
        case GS__IT_U64_MUT:
        case GS__IT_U32:
        case GS__IT_I32: {
            size_t o = gs__place(&off, it->len, 8);
            uint8_t *p;
            if (base == NULL) break;
            p = it->len > 0 ? base + o : NULL;
            if (it->len > 0) {
                memcpy(p, it->raw, it->len);
                gs__from_le(p, it->len, it->kind == GS__IT_U64 || it->kind == GS__IT_U64_MUT ? 8 : 4);
            }
            if (it->kind == GS__IT_U64) {
                *(const uint64_t **)it->dst = (const uint64_t *)(void *)p;
            } else if (it->kind == GS__IT_U64_MUT) {
                *(uint64_t **)it->dst = (uint64_t *)(void *)p;
            } else if (it->kind == GS__IT_U32) {
                *(const uint32_t **)it->dst = (const uint32_t *)(void *)p;
            } else {
                *(const int32_t **)it->dst = (const int32_t *)(void *)p;
            }
            break;
        }
        case GS__IT_BIN:
        case GS__IT_STR:
            gs__own_blob(&off, base, it->kind == GS__IT_STR, it->raw, it->len, it->dst);
            break;
        case GS__IT_BINS:
        case GS__IT_STRS: {
            size_t o = gs__place(&off, it->len * sizeof(gs_bytes_t), alignof(gs_bytes_t));
            gs_bytes_t *arr = base != NULL ? (gs_bytes_t *)(void *)(base + o) : NULL;
            gs_bytes_t tmp;
            gs_mp_reader_t r;
            gs_mp_reader_init(&r, it->raw, (size_t)(d->r.end - it->raw));
            for (size_t k = 0; k < it->len; k++) {
                const uint8_t *p = NULL;
                const char *s = NULL;
                uint32_t len = 0;
                int is_str = it->kind == GS__IT_STRS;
                int ok = is_str ? gs_mp_read_str(&r, &s, &len) : gs_mp_read_bin(&r, &p, &len);
                gs_assert(ok);
                (void)ok;
                gs__own_blob(&off, base, is_str, is_str ? (const uint8_t *)s : p, len, arr ? &arr[k] : &tmp);
            }
            if (base != NULL) *(gs_bytes_t **)it->dst = it->len > 0 ? arr : NULL;
            break;
        }
        case GS__IT_PEERS: {
            size_t o = gs__place(&off, it->len * sizeof(gs_peer_info_t), alignof(gs_peer_info_t));
            gs_peer_info_t *arr = base != NULL ? (gs_peer_info_t *)(void *)(base + o) : NULL;
            gs_peer_info_t tmp;
            gs_mp_reader_t r;
            gs_mp_reader_init(&r, it->raw, (size_t)(d->r.end - it->raw));
            for (size_t k = 0; k < it->len; k++) {
                gs_peer_info_t *pi = arr ? &arr[k] : &tmp;
                const uint8_t *ucx = NULL;
                const char *name = NULL, *host = NULL;
                uint32_t nl = 0, hl = 0, ul = 0;
                uint64_t id = 0;
                int ok = gs__dec_peer(&r, &id, &name, &nl, &host, &hl, &ucx, &ul);
                gs_assert(ok);
                (void)ok;
                pi->id = id;
                gs__own_blob(&off, base, 1, (const uint8_t *)name, nl, &pi->name);
                gs__own_blob(&off, base, 1, (const uint8_t *)host, hl, &pi->host);
                gs__own_blob(&off, base, 0, ucx, ul, &pi->ucx_address);
            }
            if (base != NULL) *(gs_peer_info_t **)it->dst = it->len > 0 ? arr : NULL;
            break;
        }
        }
    }
    return off;
}

static gs_status_t gs__msg_decode(const void *payload, size_t len, int borrow, gs_msg_t *msg_p)
{
    gs__dec_t d;
    gs_msg_t m;
    gs__why_t why;
    uint32_t nfields = 0, type = 0;
    uint8_t *base = NULL;
    size_t size;

    if (msg_p == NULL || (payload == NULL && len > 0)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_msg_decode: NULL argument");
    }
    if (len > UINT32_MAX) {
        return gs_error_set(GS_ERR_PROTO, "payload of %zu bytes exceeds the 4 GiB frame limit", len);
    }
    memset(&m, 0, sizeof m);
    d.nitems = 0;
    d.borrow = borrow;
    gs_mp_reader_init(&d.r, payload, len);
    if (gs_mp_read_array(&d.r, &nfields) && nfields == 0) gs__dec_fail(&d, "empty message array");
    if (gs_mp_read_u32(&d.r, &type)) {
        if (type == 0 || type >= GS_MSG_TYPE_MAX) {
            gs__dec_fail(&d, "unknown message type %u", type);
        } else if (nfields != gs__msg_nfields[type]) {
            gs__dec_fail(&d, "%s message has %u fields, expected %u", gs_msg_type_name(type), nfields,
                         gs__msg_nfields[type]);
        } else {
            m.type = type;
            gs__dec_body(&d, &m);
        }
    }
    if (d.r.err == GS_OK && !gs_mp_at_end(&d.r)) {
        gs__dec_fail(&d, "%zu trailing bytes after the message", (size_t)(d.r.end - d.r.p));
    }
    if (d.r.err != GS_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", gs_last_error());
        return gs_error_set(GS_ERR_PROTO, "malformed %s message: %s", gs_msg_type_name(type), detail);
    }

    size = gs__dec_layout(&d, NULL);
    if (size > 0) {
        base = gs_malloc(size, "decoded message");
        if (base == NULL) {
            return gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a %s message (%zu bytes)",
                                gs_msg_type_name(type), size);
        }
        gs__dec_layout(&d, base);
    }
    m.owned = base;
    if (!gs__msg_check(&m, &why)) {
        gs_free(base);
        return gs_error_set(GS_ERR_PROTO, "malformed %s message: %s", gs_msg_type_name(type), why.text);
    }
    *msg_p = m;
    return GS_OK;
}

gs_status_t gs_msg_decode(const void *payload, size_t len, gs_msg_t *msg_p)
{
    return gs__msg_decode(payload, len, 0, msg_p);
}

gs_status_t gs_msg_decode_borrow(const void *payload, size_t len, gs_msg_t *msg_p)
{
    return gs__msg_decode(payload, len, 1, msg_p);
}

void gs_msg_cleanup(gs_msg_t *msg)
{
    if (msg == NULL) return;
    gs_free(msg->owned);
    msg->owned = NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Frame reader.                                                                              */

#define GS__FRAME_READER_KEEP (4u << 20)  /* buffers above this are sized exactly and retained briefly */
#define GS__FRAME_READER_NONE SIZE_MAX     /* no frame handed out that could be detached */

/* Detached frame storage (gs_frame_reader_detach). */
struct gs_frame_storage {
    uint8_t *data;
    size_t cap;
};

/* A few spare large buffers per thread: detached storage given back with gs_frame_storage_free()
 * (a relayed frame, once written) is reused by the next large frame a reader on this thread
 * reserves, so its pages are not faulted in and zeroed by the kernel again. Several, because
 * many frames are in flight at once (a gather relays every chunk from several workers while the
 * client reads them); the spares are buffers that were in use a moment ago, so they never raise
 * the peak; they are bounded (GS__SPARES buffers, GS__SPARE_BYTES in all) and the connections
 * trim them after GS__CONN_TRIM_MS idle. */
#define GS__SPARES 16
#define GS__SPARE_BYTES ((size_t)1 << 30)  /* and at most this much in all */
static _Thread_local gs_frame_storage_t gs__spare[GS__SPARES];

/* The smallest spare of at least @a need bytes, else the largest; -1 when there is none. */
static int gs__spare_pick(size_t need)
{
    int best = -1, largest = -1;
    for (int i = 0; i < GS__SPARES; i++) {
        if (gs__spare[i].data == NULL) continue;
        if (gs__spare[i].cap >= need && (best < 0 || gs__spare[i].cap < gs__spare[best].cap)) best = i;
        if (largest < 0 || gs__spare[i].cap > gs__spare[largest].cap) largest = i;
    }
    return best >= 0 ? best : largest;
}

void gs_frame_reader_init(gs_frame_reader_t *r, uint32_t max_frame)
{
    gs_buf_init(&r->buf);
    r->pos = 0;
    r->max_frame = max_frame != 0 ? max_frame : GS_PROTO_DEFAULT_MAX_FRAME;
    r->keep = 0;
    r->last = GS__FRAME_READER_NONE;
}

void gs_frame_reader_cleanup(gs_frame_reader_t *r)
{
    gs_buf_cleanup(&r->buf);
    r->pos = 0;
    r->keep = 0;
    r->last = GS__FRAME_READER_NONE;
}

/* Make room for @a extra more bytes after buf.len: first move the unconsumed bytes to the front,
 * then grow -- by doubling up to GS__FRAME_READER_KEEP (many small frames), exactly beyond it (a
 * large frame is reserved once, at its announced size, and never copied by doubling). */
static gs_status_t gs__frame_reader_room(gs_frame_reader_t *r, size_t extra)
{
    size_t need, ncap;
    uint8_t *p;
    if (r->buf.cap - r->buf.len >= extra) return GS_OK;
    if (r->pos > 0) {
        memmove(r->buf.data, r->buf.data + r->pos, r->buf.len - r->pos);
        r->buf.len -= r->pos;
        r->pos = 0;
        r->last = GS__FRAME_READER_NONE;
        if (r->buf.cap - r->buf.len >= extra) return GS_OK;
    }
    if (extra > SIZE_MAX - r->buf.len) {
        return gs_error_set(GS_ERR_NO_MEMORY, "cannot buffer %zu more received bytes", extra);
    }
    need = r->buf.len + extra;
    if (need > GS__FRAME_READER_KEEP && r->buf.cap <= GS__FRAME_READER_KEEP && gs__spare_pick(need) >= 0) {
        /* a large frame into a small buffer: take a spare (grown in place if need be) */
        gs_frame_storage_t *sp = &gs__spare[gs__spare_pick(need)];
        p = sp->cap >= need ? sp->data : gs_realloc(sp->data, need, "frame reader");
        if (p != NULL) {
            ncap = sp->cap >= need ? sp->cap : need;
            sp->data = NULL;
            sp->cap = 0;
            if (r->buf.len > 0) memcpy(p, r->buf.data, r->buf.len);
            gs_free(r->buf.data);
            r->buf.data = p;
            r->buf.cap = ncap;
            return GS_OK;
        }
    }
    if (need > GS__FRAME_READER_KEEP) {
        ncap = need;
    } else {
        ncap = r->buf.cap > 256 ? r->buf.cap : 256;
        while (ncap < need) ncap *= 2;
        if (ncap > GS__FRAME_READER_KEEP) ncap = GS__FRAME_READER_KEEP;
    }
    p = gs_realloc(r->buf.data, ncap, "frame reader");
    if (p == NULL) {
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory buffering a frame (%zu bytes)", ncap);
    }
    r->buf.data = p;
    r->buf.cap = ncap;
    return GS_OK;
}

/* Start over once everything is consumed; a large buffer survives only right after a large
 * frame (the next one is likely large too), and a small frame that follows releases it. */
static void gs__frame_reader_rewind(gs_frame_reader_t *r)
{
    if (r->pos != r->buf.len) return;
    r->buf.len = r->pos = 0;
    r->last = GS__FRAME_READER_NONE;
    if (r->buf.cap > GS__FRAME_READER_KEEP && !r->keep) gs_buf_cleanup(&r->buf);
}

gs_status_t gs_frame_reader_feed(gs_frame_reader_t *r, const void *data, size_t len)
{
    gs_status_t st;
    if (len == 0) return GS_OK;
    gs__frame_reader_rewind(r);
    if (r->buf.len == 0 && r->buf.cap > GS__FRAME_READER_KEEP && len >= GS_PROTO_FRAME_HEADER &&
        GS_PROTO_FRAME_HEADER + gs__ld_le(data, 4) <= GS__FRAME_READER_KEEP) {
        gs_buf_cleanup(&r->buf);  /* a small frame follows the large ones: release the large buffer */
    }
    if ((st = gs__frame_reader_room(r, len)) != GS_OK) return st;
    memcpy(r->buf.data + r->buf.len, data, len);
    r->buf.len += len;
    return GS_OK;
}

gs_status_t gs_frame_reader_next(gs_frame_reader_t *r, const uint8_t **payload_p, size_t *len_p)
{
    size_t avail = r->buf.len - r->pos, frame;
    uint32_t flen;
    if (avail < GS_PROTO_FRAME_HEADER) return GS_INPROGRESS;
    flen = (uint32_t)gs__ld_le(r->buf.data + r->pos, 4);
    if (flen > r->max_frame) {
        return gs_error_set(GS_ERR_MSG_TOO_LARGE, "frame of %u bytes exceeds the limit of %u bytes", flen,
                            r->max_frame);
    }
    frame = GS_PROTO_FRAME_HEADER + (size_t)flen;
    if (avail < frame) {
        /* reserve the whole frame once, now that its size is known and accepted */
        return gs__frame_reader_room(r, frame - avail) == GS_OK ? GS_INPROGRESS : GS_ERR_NO_MEMORY;
    }
    *payload_p = r->buf.data + r->pos + GS_PROTO_FRAME_HEADER;
    *len_p = flen;
    r->last = r->pos;
    r->keep = frame > GS__FRAME_READER_KEEP;
    r->pos += frame;
    return GS_OK;
}

size_t gs_frame_reader_space(gs_frame_reader_t *r, size_t min, uint8_t **space_p)
{
    size_t avail = r->buf.len - r->pos, frame, rest;
    uint32_t flen;
    if (avail < GS_PROTO_FRAME_HEADER) return 0;
    flen = (uint32_t)gs__ld_le(r->buf.data + r->pos, 4);
    if (flen > r->max_frame) return 0;
    frame = GS_PROTO_FRAME_HEADER + (size_t)flen;
    if (avail >= frame) return 0;
    rest = frame - avail;
    if (frame < min || r->buf.cap - r->buf.len < rest) return 0;  /* small, or not reserved yet */
    *space_p = r->buf.data + r->buf.len;
    return rest;
}

void gs_frame_reader_commit(gs_frame_reader_t *r, size_t n)
{
    gs_assert_always(n <= r->buf.cap - r->buf.len);
    r->buf.len += n;
}

gs_status_t gs_frame_reader_detach(gs_frame_reader_t *r, gs_frame_storage_t **storage_p)
{
    gs_frame_storage_t *fs;
    gs_buf_t rest;
    size_t nrest;
    if (storage_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_frame_reader_detach: NULL argument");
    if (r->last == GS__FRAME_READER_NONE) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_frame_reader_detach: no frame was just handed out");
    }
    fs = gs_malloc(sizeof *fs, "frame storage");
    if (fs == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory detaching a frame");
    /* bytes received after the frame (the start of the next ones) move to a new buffer */
    nrest = r->buf.len - r->pos;
    gs_buf_init(&rest);
    if (nrest > 0 && gs_buf_append(&rest, r->buf.data + r->pos, nrest) != GS_OK) {
        gs_free(fs);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory keeping %zu received bytes", nrest);
    }
    fs->data = r->buf.data;
    fs->cap = r->buf.cap;
    *storage_p = fs;
    r->buf = rest;
    r->pos = 0;
    r->keep = 0;
    r->last = GS__FRAME_READER_NONE;
    return GS_OK;
}

void gs_frame_storage_free(gs_frame_storage_t *fs)
{
    int slot = -1;
    if (fs == NULL) return;
    if (fs->cap > GS__FRAME_READER_KEEP && fs->cap <= GS__SPARE_BYTES) {
        /* an empty slot, else the smallest spare if this one is larger */
        for (int i = 0; i < GS__SPARES; i++) {
            if (gs__spare[i].data == NULL) {
                slot = i;
                break;
            }
            if (gs__spare[i].cap < fs->cap && (slot < 0 || gs__spare[i].cap < gs__spare[slot].cap)) slot = i;
        }
    }
    if (slot >= 0 && gs_frame_storage_spare() - gs__spare[slot].cap + fs->cap > GS__SPARE_BYTES) {
        /* over the byte bound: drop the smallest spares until it fits, else give up */
        while (gs_frame_storage_spare() - gs__spare[slot].cap + fs->cap > GS__SPARE_BYTES) {
            int small = -1;
            for (int i = 0; i < GS__SPARES; i++) {
                if (i != slot && gs__spare[i].data != NULL && gs__spare[i].cap < fs->cap &&
                    (small < 0 || gs__spare[i].cap < gs__spare[small].cap)) {
                    small = i;
                }
            }
            if (small < 0) {
                slot = -1;
                break;
            }
            gs_free(gs__spare[small].data);
            gs__spare[small].data = NULL;
            gs__spare[small].cap = 0;
        }
    }
    if (slot >= 0) {
        gs_free(gs__spare[slot].data);
        gs__spare[slot] = *fs;
    } else {
        gs_free(fs->data);
    }
    gs_free(fs);
}

size_t gs_frame_storage_spare(void)
{
    size_t total = 0;
    for (int i = 0; i < GS__SPARES; i++) total += gs__spare[i].cap;
    return total;
}

void gs_frame_storage_trim(void)
{
    for (int i = 0; i < GS__SPARES; i++) {
        gs_free(gs__spare[i].data);
        gs__spare[i].data = NULL;
        gs__spare[i].cap = 0;
    }
}

void gs_frame_reader_trim(gs_frame_reader_t *r)
{
    if (r->pos != r->buf.len || r->buf.cap <= GS__FRAME_READER_KEEP) return;
    r->keep = 0;
    gs__frame_reader_rewind(r);
}

size_t gs_frame_reader_retained(const gs_frame_reader_t *r)
{
    return r->pos == r->buf.len && r->buf.cap > GS__FRAME_READER_KEEP ? r->buf.cap : 0;
}
