/* Replicas (REPLICATE): copies of stored output chunks on a chosen worker, asked for by a client
 * and recorded in the state machine's replica records once the worker confirms them. */
#include "scheduler/replicate.h"

#include "scheduler/send.h"
#include "scheduler/tasks.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void gs__send_repl_done(gs_sched_t *s, gs__peer_t *client, uint64_t req, gs_status_t status,
                               const char *text, uint64_t n, const uint64_t *keys, const uint64_t *nbytes)
{
    gs_msg_t msg;
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_REPLICATE_DONE;
    msg.u.replicate_done.req_id = req;
    msg.u.replicate_done.status = status;
    msg.u.replicate_done.message.data = (const uint8_t *)text;
    msg.u.replicate_done.message.len = text != NULL ? strlen(text) : 0;
    msg.u.replicate_done.n = n;
    msg.u.replicate_done.keys = keys;
    msg.u.replicate_done.nbytes = nbytes;
    gs__sched_send(s, client, &msg);
}

/* Client asks for copies of chunks on one worker. Every key must be a stored output chunk of a
 * live persisted graph of this client ((G, GS_REPLICATE_ALL_OUTPUTS) = all of G's outputs).
 * Chunks already on the target count as done; the others go to the target in one REPLICATE
 * naming a holder of each; REPLICATE_DONE from the worker completes the request. */
void gs__sched_replicate(gs_sched_t *s, gs__peer_t *client, const gs_msg_replicate_t *m)
{
    gs__worker_t *target = NULL;
    GS_VEC(uint64_t) keys = {0};
    GS_VEC(uint64_t) from = {0};
    GS_VEC(uint64_t) nb = {0};
    char text[512];
    gs_status_t st = GS_OK;
    uint64_t nalready = 0;
    gs__repl_t r;
    gs_msg_t msg;

    text[0] = '\0';
    for (uint32_t i = 0; i < s->nworkers; i++) {
        gs__worker_t *w = s->live[i];
        if (m->worker_id != 0 ? w->id == m->worker_id
                              : (m->worker_name.len > 0 && strcmp(w->name, (const char *)m->worker_name.data) == 0)) {
            target = w;
        }
    }
    if (target == NULL) {
        st = GS_ERR_NOT_FOUND;
        if (m->worker_id != 0) snprintf(text, sizeof text, "replicate: no live worker with id %" PRIu64, m->worker_id);
        else snprintf(text, sizeof text, "replicate: no live worker named '%s'",
                      m->worker_name.len ? (const char *)m->worker_name.data : "");
        goto reply;
    }
    if (target->slot >= 64) {
        st = GS_ERR_UNSUPPORTED;
        snprintf(text, sizeof text, "replicate: worker %s is in slot %u; copies are kept only on the first 64 "
                 "worker slots", target->name, target->slot);
        goto reply;
    }
    for (uint64_t i = 0; i < m->n && st == GS_OK; i++) {
        uint64_t gid = m->keys[2 * i], tid = m->keys[2 * i + 1];
        gs__graph_t *g = gs__graph_find(s, gid);
        uint32_t tlo, thi;
        if (g == NULL || g->client != client || g->client_released || !(g->flags & GS_SUBMIT_PERSIST)) {
            st = GS_ERR_NOT_FOUND;
            snprintf(text, sizeof text, "replicate: graph %" PRIu64 " is not a live persisted graph of this client",
                     gid);
            break;
        }
        if (g->phase != GS__GRAPH_DONE) {
            st = g->phase == GS__GRAPH_FAILED ? GS_ERR_TASK_FAILED : GS_ERR_BUSY;
            snprintf(text, sizeof text, "replicate: graph %" PRIu64 " %s", gid,
                     g->phase == GS__GRAPH_FAILED ? "failed" : "has not finished");
            break;
        }
        if (tid == GS_REPLICATE_ALL_OUTPUTS) {
            tlo = 0;
            thi = g->ntasks;
        } else if (tid < g->ntasks && (g->tflags[tid] & GS__TF_OUTPUT)) {
            tlo = (uint32_t)tid;
            thi = tlo + 1;
        } else {
            st = GS_ERR_NOT_FOUND;
            snprintf(text, sizeof text, "replicate: task %" PRIu64 " is not an output of graph %" PRIu64, tid, gid);
            break;
        }
        for (uint32_t t = tlo; t < thi; t++) {
            uint64_t mask;
            if (!(g->tflags[t] & GS__TF_OUTPUT)) continue;
            if (g->state[t] != GS__TS_MEMORY) {
                st = GS_ERR_BUSY;
                snprintf(text, sizeof text, "replicate: chunk (%" PRIu64 ", %u) is being recomputed; try again",
                         gid, t);
                break;
            }
            mask = gs__replica_mask(g, t);
            if (g->where[t] == target->slot || (mask & (1ull << target->slot))) {
                nalready++;
                continue;
            }
            if (GS_VEC_PUSH(&keys, g->id) != GS_OK || GS_VEC_PUSH(&keys, (uint64_t)t) != GS_OK ||
                GS_VEC_PUSH(&from, gs__slot_id(s, g->where[t])) != GS_OK || GS_VEC_PUSH(&nb, g->nbytes[t]) != GS_OK) {
                st = GS_ERR_NO_MEMORY;
                snprintf(text, sizeof text, "replicate: scheduler out of memory");
                break;
            }
        }
    }
    if (st != GS_OK || from.len == 0) goto reply;
    memset(&r, 0, sizeof r);
    r.sreq = s->next_sreq++;
    r.client_id = client->id;
    r.client_req = m->req_id;
    r.slot = target->slot;
    r.nasked = from.len;
    r.nalready = nalready;
    if (GS_VEC_PUSH(&s->repls, r) != GS_OK) {
        st = GS_ERR_NO_MEMORY;
        snprintf(text, sizeof text, "replicate: scheduler out of memory");
        goto reply;
    }
    memset(&msg, 0, sizeof msg);
    msg.type = GS_MSG_REPLICATE;
    msg.u.replicate.req_id = r.sreq;
    msg.u.replicate.worker_id = target->id;
    msg.u.replicate.n = from.len;
    msg.u.replicate.keys = keys.data;
    msg.u.replicate.nsrc = from.len;
    msg.u.replicate.from = from.data;
    msg.u.replicate.nbytes = nb.data;
    gs__sched_send(s, target->peer, &msg);
    GS_LOG_DEBUG("replicate request %" PRIu64 ": %zu chunks to worker %s (%" PRIu64 " there already)",
                 m->req_id, from.len, target->name, nalready);
    goto out;
reply:
    if (st != GS_OK) GS_LOG_INFO("%s: %s", client->name, text);
    gs__send_repl_done(s, client, m->req_id, st, text, 0, NULL, NULL);
out:
    GS_VEC_FREE(&keys);
    GS_VEC_FREE(&from);
    GS_VEC_FREE(&nb);
}

void gs__sched_replicate_done(gs_sched_t *s, gs__worker_t *w, const gs_msg_replicate_done_t *m)
{
    gs__repl_t r;
    gs__peer_t *client = NULL;
    uint64_t v, nrec = 0;
    size_t i;
    for (i = 0; i < s->repls.len; i++) {
        if (s->repls.data[i].sreq == m->req_id && s->repls.data[i].slot == w->slot) break;
    }
    /* record what the worker holds now, whether or not anyone waits for the answer */
    for (uint64_t k = 0; k < m->n; k++) {
        uint64_t gid = m->keys[2 * k], tid = m->keys[2 * k + 1];
        gs__graph_t *g = gs__graph_find(s, gid);
        if (g == NULL || g->phase == GS__GRAPH_FAILED || tid >= g->ntasks || g->state[tid] != GS__TS_MEMORY ||
            w->slot >= 64) {
            gs__queue_release(w, gid, tid);   /* nobody needs that copy any more */
            continue;
        }
        if (g->where[tid] != w->slot) {
            uint64_t mask = gs__replica_mask(g, (uint32_t)tid);
            if (!(mask & (1ull << w->slot))) {
                gs__replica_set(s, g, (uint32_t)tid, mask | (1ull << w->slot));
                s->st.replicas_total++;
            }
        }
        nrec++;
    }
    if (i == s->repls.len) {
        GS_LOG_DEBUG("replicate-done for unknown request %" PRIu64 " from worker %s", m->req_id, w->name);
        return;
    }
    r = s->repls.data[i];
    s->repls.data[i] = s->repls.data[--s->repls.len];
    if (gs_u64map_get(&s->clients, r.client_id, &v)) client = (gs__peer_t *)(uintptr_t)v;
    if (client == NULL) return;
    if (m->status == GS_OK && nrec < r.nasked) {
        char text[256];
        snprintf(text, sizeof text, "replicate: worker %s copied %" PRIu64 " of %" PRIu64 " chunks (the others were "
                 "released meanwhile)", w->name, nrec, r.nasked);
        gs__send_repl_done(s, client, r.client_req, GS_ERR_NOT_FOUND, text, m->n, m->keys, m->nbytes);
        return;
    }
    if (m->status != GS_OK) {
        char text[700];
        snprintf(text, sizeof text, "replicate to worker %s: %s", w->name,
                 m->message.len ? (const char *)m->message.data : gs_status_string((gs_status_t)m->status));
        gs__send_repl_done(s, client, r.client_req, (gs_status_t)m->status, text, m->n, m->keys, m->nbytes);
        return;
    }
    gs__send_repl_done(s, client, r.client_req, GS_OK, NULL, m->n, m->keys, m->nbytes);
}

/* The target of pending REPLICATEs is gone: their clients get an error. */
void gs__sched_repls_worker_gone(gs_sched_t *s, gs__worker_t *w)
{
    size_t i = 0;
    while (i < s->repls.len) {
        gs__repl_t r = s->repls.data[i];
        uint64_t v;
        if (r.slot != w->slot) {
            i++;
            continue;
        }
        s->repls.data[i] = s->repls.data[--s->repls.len];
        if (gs_u64map_get(&s->clients, r.client_id, &v)) {
            char text[256];
            snprintf(text, sizeof text, "replicate: worker %s was removed before the copies completed", w->name);
            gs__send_repl_done(s, (gs__peer_t *)(uintptr_t)v, r.client_req, GS_ERR_WORKER_LOST, text, 0, NULL, NULL);
        }
    }
}
