/* REPLICATE on gworker: gsched asks this worker to keep copies of chunks held elsewhere. Each
 * chunk is fetched from the named holder with the ordinary peer-fetch machinery (a fetch already
 * under way for a task is shared) and, once it has arrived, adopted as a stored key (what gsched
 * releases with RELEASE and what peers and gathers are served from). When every chunk of the
 * request has arrived or failed, REPLICATE_DONE lists the keys now held and names the first
 * failure. Pending requests are looked at once per loop iteration (gs__wrepl_poll). */
#include "worker/worker_int.h"
#include "worker/xfer/xfer.h"

#include <stdio.h>
#include <string.h>

struct gs_wrepl {
    struct gs_wrepl *next;
    uint64_t req_id;
    uint64_t n, npending;
    uint64_t *keys;           /* 2 * n */
    uint64_t *from;           /* n */
    gs_wchunk_t **chunks;     /* n: a reference while waiting, NULL once settled */
    GS_VEC(uint64_t) held;    /* (graph, task) pairs now stored here */
    GS_VEC(uint64_t) held_nbytes;
    gs_status_t status;
    char err[GS_W_ERRLEN];
};

static void gs__wrepl_fail(struct gs_wrepl *r, gs_status_t st, const char *fmt, uint64_t g, uint64_t t,
                           uint64_t from, const char *why)
{
    if (r->status != GS_OK) return;   /* the first failure is the one reported */
    r->status = st;
    snprintf(r->err, sizeof(r->err), fmt, (unsigned long long)g, (unsigned long long)t,
             (unsigned long long)from, why);
}

static void gs__wrepl_held(struct gs_wrepl *r, const gs_wchunk_t *c)
{
    if (GS_VEC_PUSH(&r->held, c->graph->id) != GS_OK || GS_VEC_PUSH(&r->held, c->task) != GS_OK ||
        GS_VEC_PUSH(&r->held_nbytes, c->nbytes) != GS_OK) {
        if (r->held.len % 2) r->held.len--;
        if (r->status == GS_OK) {
            r->status = GS_ERR_NO_MEMORY;
            snprintf(r->err, sizeof(r->err), "out of memory recording replicated chunks");
        }
    }
}

static void gs__wrepl_free(gs_worker_t *w, struct gs_wrepl *r)
{
    for (uint64_t i = 0; r->chunks != NULL && i < r->n; i++) {
        if (r->chunks[i] != NULL) gs__wchunk_unref(w, r->chunks[i]);
    }
    gs_free(r->keys);
    gs_free(r->from);
    gs_free(r->chunks);
    GS_VEC_FREE(&r->held);
    GS_VEC_FREE(&r->held_nbytes);
    gs_free(r);
}

static void gs__wrepl_finish(gs_worker_t *w, struct gs_wrepl *r)
{
    gs_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_REPLICATE_DONE;
    m.u.replicate_done.req_id = r->req_id;
    m.u.replicate_done.status = r->status;
    m.u.replicate_done.message.data = (const uint8_t *)r->err;
    m.u.replicate_done.message.len = r->status != GS_OK ? strlen(r->err) : 0;
    m.u.replicate_done.n = r->held.len / 2;
    m.u.replicate_done.keys = r->held.data;
    m.u.replicate_done.nbytes = r->held_nbytes.data;
    GS_LOG_DEBUG("replicate %llu: %llu of %llu chunks held%s%s", (unsigned long long)r->req_id,
                 (unsigned long long)(r->held.len / 2), (unsigned long long)r->n, r->status ? ": " : "",
                 r->status ? r->err : "");
    gs__wsend_msg(w, &m);
    gs__wrepl_free(w, r);
}

/* Chunk @a i has left PENDING: adopt it as a stored key, or record the failure. */
static void gs__wrepl_settle(gs_worker_t *w, struct gs_wrepl *r, uint64_t i)
{
    gs_wchunk_t *c = r->chunks[i];
    r->chunks[i] = NULL;
    r->npending--;
    if (c->state == GS_WCHUNK_READY && c->in_map) {
        gs__wrepl_held(r, c);
        if (!c->owned) {
            c->owned = 1;             /* our reference becomes the store's */
            c->graph->nowned++;
            w->st.chunks++;
            gs__wspill_track(w, c);
            return;
        }
    } else if (c->state == GS_WCHUNK_READY) {
        gs__wrepl_fail(r, GS_ERR_CANCELED, "chunk (%llu, %llu) from worker %llu: %s", r->keys[2 * i],
                       r->keys[2 * i + 1], r->from[i], "dropped here meanwhile (graph canceled)");
    } else {
        gs__wrepl_fail(r, GS_ERR_WORKER_LOST, "chunk (%llu, %llu) could not be fetched from worker %llu%s",
                       r->keys[2 * i], r->keys[2 * i + 1], r->from[i], "");
    }
    gs__wchunk_unref(w, c);
}

void gs__wrepl_start(gs_worker_t *w, const gs_msg_replicate_t *m)
{
    struct gs_wrepl *r;
    size_t n = (size_t)m->n;

    if (m->nsrc != m->n) {
        GS_LOG_WARN("replicate %llu without a holder for every key; ignored", (unsigned long long)m->req_id);
        return;
    }
    r = gs_calloc(1, sizeof(*r), "replicate");
    if (r == NULL) goto err_nomem;
    r->req_id = m->req_id;
    r->n = m->n;
    r->keys = gs_malloc(2 * (n ? n : 1) * sizeof(uint64_t), "replicate keys");
    r->from = gs_malloc((n ? n : 1) * sizeof(uint64_t), "replicate sources");
    r->chunks = gs_calloc(n ? n : 1, sizeof(gs_wchunk_t *), "replicate chunks");
    if (r->keys == NULL || r->from == NULL || r->chunks == NULL) {
        gs__wrepl_free(w, r);
        goto err_nomem;
    }
    if (n > 0) {
        memcpy(r->keys, m->keys, 2 * n * sizeof(uint64_t));
        memcpy(r->from, m->from, n * sizeof(uint64_t));
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t g = m->keys[2 * i], t = m->keys[2 * i + 1];
        gs_wchunk_t *c = gs__wstore_find(w, g, t);
        gs_status_t st;
        if (c != NULL && c->state == GS_WCHUNK_READY && c->owned) {
            gs__wrepl_held(r, c);     /* here already */
            continue;
        }
        if (c != NULL && c->state != GS_WCHUNK_FAILED) {
            gs__wchunk_ref(c);        /* being fetched or computed here: wait for it */
        } else if ((st = gs__xfer_fetch(w, g, t, m->from[i], m->nbytes[i], &c)) != GS_OK) {
            gs__wrepl_fail(r, st, "chunk (%llu, %llu) from worker %llu: %s", g, t, m->from[i], gs_last_error());
            continue;
        }
        r->chunks[i] = c;
        r->npending++;
    }
    if (r->npending == 0) {
        gs__wrepl_finish(w, r);
        return;
    }
    r->next = w->repls;
    w->repls = r;
    gs__xfer_progress(w);             /* push the fetch requests out now */
    return;

err_nomem:
    {
        gs_msg_t out;
        static const char text[] = "worker out of memory for a replicate request";
        memset(&out, 0, sizeof(out));
        out.type = GS_MSG_REPLICATE_DONE;
        out.u.replicate_done.req_id = m->req_id;
        out.u.replicate_done.status = GS_ERR_NO_MEMORY;
        out.u.replicate_done.message.data = (const uint8_t *)text;
        out.u.replicate_done.message.len = sizeof(text) - 1;
        gs__wsend_msg(w, &out);
    }
}

void gs__wrepl_poll(gs_worker_t *w)
{
    struct gs_wrepl **pp = &w->repls;
    while (*pp != NULL) {
        struct gs_wrepl *r = *pp;
        for (uint64_t i = 0; i < r->n; i++) {
            if (r->chunks[i] != NULL && r->chunks[i]->state != GS_WCHUNK_PENDING) gs__wrepl_settle(w, r, i);
        }
        if (r->npending == 0) {
            *pp = r->next;
            gs__wrepl_finish(w, r);
        } else {
            pp = &r->next;
        }
    }
}

void gs__wrepl_cleanup(gs_worker_t *w)
{
    while (w->repls != NULL) {
        struct gs_wrepl *r = w->repls;
        w->repls = r->next;
        gs__wrepl_free(w, r);
    }
}
