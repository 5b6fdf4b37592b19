/*
 * The cost model placement uses: per worker, the queue bound from its measured kernel time;
 * per worker pair, the estimated transfer bandwidth (priors by kind of pair until BANDWIDTH
 * reports measure it). Reads and writes only the model's fields; calls nothing above it.
 */
#include "scheduler/cost.h"

#include <inttypes.h>
#include <string.h>

#define GS__MIN_DEPTH 4u
#define GS__MAX_DEPTH 4096u
#define GS__QUEUE_TARGET_NS 2e6   /* queued work per worker thread the pipeline aims at */

/* ------------------------------------------------------------------------------------------ */
/* Queue bounds.                                                                              */

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

/* ------------------------------------------------------------------------------------------ */
/* Transfer model: bandwidth estimates per worker pair.                                       */

#define GS__BW_EWMA 0.3                  /* weight of a new measurement */
#define GS__BW_MIN_SAMPLE (256u * 1024u)  /* mean transfer size below which a report says more
                                            about latency than bandwidth: ignored */

static double gs__bw_prior(const gs_sched_t *s, const gs__worker_t *a, const gs__worker_t *b)
{
    int gpu = strcmp(a->backend, "cpu") != 0 && strcmp(b->backend, "cpu") != 0;
    int local = strcmp(a->host, b->host) == 0;
    return s->bw_prior[gpu ? (local ? GS__BW_GPU_LOCAL : GS__BW_GPU_REMOTE)
                           : (local ? GS__BW_CPU_LOCAL : GS__BW_CPU_REMOTE)];
}

/* A worker took @a slot: every pair with it starts again from the priors. */
void gs__bw_reset_slot(gs_sched_t *s, uint32_t slot)
{
    gs__worker_t *w = s->slots[slot];
    for (uint32_t i = 0; i < s->nslots; i++) {
        gs__worker_t *o = s->slots[i];
        double prior = o != NULL ? gs__bw_prior(s, o, w) : s->bw_prior[GS__BW_CPU_REMOTE];
        s->bw[(size_t)i * s->nslots + slot] = prior;
        s->bw[(size_t)slot * s->nslots + i] = prior;
        s->bw_measured[(size_t)i * s->nslots + slot] = 0;
        s->bw_measured[(size_t)slot * s->nslots + i] = 0;
    }
}

void gs__sched_bandwidth(gs_sched_t *s, gs__worker_t *w, const gs_msg_bandwidth_t *m)
{
    for (uint32_t k = 0; k < m->n; k++) {
        gs__worker_t *src = NULL;
        double sample;
        size_t idx;
        for (uint32_t i = 0; i < s->nworkers; i++) {
            if (s->live[i]->id == m->peer[k]) src = s->live[i];
        }
        if (src == NULL || src == w || m->ns[k] == 0 || m->count[k] == 0) continue;   /* gone or meaningless */
        gs__dash_xfer(s->dash, src, w, (const char *)m->path[k].data, m->path[k].len, m->bytes[k], m->ns[k], m->count[k]);
        if (m->bytes[k] / m->count[k] < GS__BW_MIN_SAMPLE) continue;
        sample = (double)m->bytes[k] / (double)m->ns[k];
        idx = (size_t)src->slot * s->nslots + w->slot;
        s->st.bw_reports_total++;
        if (!s->bw_measured[idx]) {
            s->bw[idx] = sample;
            s->bw_measured[idx] = 1;
            GS_LOG_INFO("transfer %s -> %s: %.1f GB/s (%s)", src->name, w->name, sample,
                        m->path[k].len > 0 ? (const char *)m->path[k].data : "unknown path");
        } else {
            s->bw[idx] = (1.0 - GS__BW_EWMA) * s->bw[idx] + GS__BW_EWMA * sample;
            GS_LOG_DEBUG("transfer %s -> %s: %.1f GB/s measured, estimate %.1f GB/s", src->name, w->name, sample,
                         s->bw[idx]);
        }
        if (s->bw[idx] < 1e-6) s->bw[idx] = 1e-6;   /* 1 kB/s floor: costs stay finite */
    }
}

/* The slot table grows from s->nslots to @a n slots: the pair matrices change stride (the old
 * rows are copied; new pairs are set when a worker takes their slot). */
gs_status_t gs__bw_grow(gs_sched_t *s, uint32_t n)
{
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
    return GS_OK;
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
