/* Building dashboard snapshots from the scheduler's state (loop thread) and freeing them (any
 * thread, at the last reference). See snapshot.h. */
#include "scheduler/dash/dash_int.h"
#include "scheduler/dash/tally.h"
#include "scheduler/sched_int.h"
#include "common/time.h"
#include "proto/mp.h"

#include <string.h>

const char *const gs__dstate_names[GS__DS_N] = {
#define GS__DS_NAME(n, s) s,
    GS__DSTATES(GS__DS_NAME)
#undef GS__DS_NAME
};

const double gs__dhist_le[GS__DHIST_N] = {1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0};

/* The dashboard state of a task state (GS__DS_N = not counted: culled). */
void gs__dsnap_ref(gs__dsnap_t *snap)
{
    if (snap != NULL) atomic_fetch_add_explicit(&snap->refs, 1, memory_order_relaxed);
}

void gs__dgraph_cleanup(gs__dgraph_t *g)
{
    gs_free(g->client);
    gs_free(g->error);
    gs_free(g->layers);
    memset(g, 0, sizeof *g);
}

static void gs__dsnap_free(gs__dsnap_t *snap)
{
    for (uint32_t i = 0; i < snap->nworkers; i++) {
        gs_free(snap->workers[i].name);
        gs_free(snap->workers[i].host);
        gs_free(snap->workers[i].backend);
    }
    gs_free(snap->workers);
    for (uint32_t i = 0; i < snap->ngraphs; i++) gs__dgraph_cleanup(&snap->graphs[i]);
    gs_free(snap->graphs);
    gs_free(snap->events);
    gs_free(snap->xfers);
    for (uint32_t i = 0; i < snap->npaths; i++) gs_free(snap->paths[i]);
    gs_free(snap->paths);
    gs_free(snap);
}

void gs__dsnap_unref(gs__dsnap_t *snap)
{
    if (snap == NULL) return;
    if (atomic_fetch_sub_explicit(&snap->refs, 1, memory_order_acq_rel) == 1) gs__dsnap_free(snap);
}

int gs__dgraph_fill(gs__dash_t *d, gs__graph_t *g, gs__dgraph_t *out)
{
    static const char *const phases[] = {"running", "done", "failed"};
    const uint64_t *tally;
    uint64_t v;
    memset(out, 0, sizeof *out);
    out->id = g->id;
    out->client_id = g->client != NULL ? g->client->id : 0;
    out->phase = phases[g->phase];
    out->status = g->status;
    out->ntasks = g->ntasks;
    out->ntotal = g->ntotal;
    out->ndone = g->ndone;
    out->run_ns_total = g->run_ns_total;
    out->t_start = (double)(g->t_accept_ns - d->t0_ns) * 1e-9;
    out->t_end = g->phase != GS__GRAPH_RUNNING && g->t_done_ns >= d->t0_ns ? (double)(g->t_done_ns - d->t0_ns) * 1e-9 : -1.0;
    if (g->t_accept_ns < d->t0_ns) out->t_start = -(double)(d->t0_ns - g->t_accept_ns) * 1e-9;
    out->nlayers = g->nlayers;
    out->client = gs_strdup(g->client != NULL ? g->client->name : "", "dashboard client name");
    out->layers = gs_calloc(g->nlayers ? g->nlayers : 1, sizeof *out->layers, "dashboard layers");
    if (g->errmsg != NULL) out->error = gs_strdup(g->errmsg, "dashboard graph error");
    if (out->client == NULL || out->layers == NULL || (g->errmsg != NULL && out->error == NULL)) {
        gs__dgraph_cleanup(out);
        return 0;
    }
    for (uint32_t l = 0; l < g->nlayers; l++) {
        _Static_assert(sizeof out->layers[l].name == GS__LAYER_NAME_CAP, "one layer name size");
        memcpy(out->layers[l].name, g->layer_names + (size_t)l * GS__LAYER_NAME_CAP, GS__LAYER_NAME_CAP);
    }
    if ((tally = gs__dash_tally_get(g)) == NULL) {
        gs__dgraph_cleanup(out);
        return 0;
    }
    for (uint32_t l = 0; l < g->nlayers; l++) {
        for (int k = 0; k < GS__DS_N; k++) {
            out->layers[l].nstate[k] = tally[(size_t)l * GS__DS_N + k];
            out->layers[l].ntasks += out->layers[l].nstate[k];
        }
    }
    if (gs_u64map_get(&d->glr_index, g->id, &v)) {
        const gs__dglr_t *r = &d->glr.data[v - 1];
        for (uint32_t l = 0; l < r->nlayers && l < g->nlayers; l++) out->layers[l].run_ns = r->run_ns[l];
    }
    return 1;
}

/* Copy of a summary (deep). 0 when out of memory. */
static int gs__dgraph_copy(const gs__dgraph_t *in, gs__dgraph_t *out)
{
    *out = *in;
    out->client = gs_strdup(in->client, "dashboard client name");
    out->error = in->error != NULL ? gs_strdup(in->error, "dashboard graph error") : NULL;
    out->layers = gs_malloc((in->nlayers ? in->nlayers : 1) * sizeof *in->layers, "dashboard layers");
    if (out->client == NULL || out->layers == NULL || (in->error != NULL && out->error == NULL)) {
        gs__dgraph_cleanup(out);
        return 0;
    }
    if (in->nlayers > 0) memcpy(out->layers, in->layers, in->nlayers * sizeof *in->layers);
    return 1;
}

/* Forget the tallies of workers no longer live (loop-owned; before the copy). */
static void gs__dash_prune_workers(gs__dash_t *d)
{
    gs_sched_t *s = d->s;
    size_t i = 0;
    while (i < d->wstats.len) {
        uint64_t id = d->wstats.data[i].id;
        int live = 0;
        for (uint32_t k = 0; k < s->nworkers && !live; k++) live = s->live[k]->id == id;
        if (live) {
            i++;
            continue;
        }
        gs_u64map_del(&d->wstat_index, id);
        d->last_wi = 0;   /* entries move */
        d->wstats.data[i] = d->wstats.data[--d->wstats.len];
        if (i < d->wstats.len) gs_u64map_put(&d->wstat_index, d->wstats.data[i].id, i + 1);
    }
}

static int gs__dsnap_workers(gs__dash_t *d, gs__dsnap_t *snap)
{
    gs_sched_t *s = d->s;
    uint64_t now = snap->now_ns, v;
    snap->workers = gs_calloc(s->nworkers ? s->nworkers : 1, sizeof *snap->workers, "dashboard workers");
    if (snap->workers == NULL) return 0;
    for (uint32_t k = 0; k < s->nworkers; k++) {
        const gs__worker_t *w = s->live[k];
        gs__dworker_t *o = &snap->workers[snap->nworkers++];
        o->id = w->id;
        o->name = gs_strdup(w->name, "dashboard worker");
        o->host = gs_strdup(w->host, "dashboard worker");
        o->backend = gs_strdup(w->backend, "dashboard worker");
        if (o->name == NULL || o->host == NULL || o->backend == NULL) return 0;
        o->device = w->device;
        o->nthreads = w->nthreads;
        o->memory_limit = w->memory_limit;
        o->mem_used = w->mem_used;
        o->disk_used = w->disk_used;
        o->disk_limit = w->disk_limit;
        o->spilled_bytes = w->spilled_bytes;
        o->unspilled_bytes = w->unspilled_bytes;
        o->host_used = w->host_used;
        o->host_limit = w->host_limit;
        o->host_spilled_bytes = w->host_spilled_bytes;
        o->host_unspilled_bytes = w->host_unspilled_bytes;
        o->outstanding = w->outstanding;
        o->ms_per_task = w->ns_per_task * 1e-6;
        o->uptime_s = now > w->t_register_ns ? (double)(now - w->t_register_ns) * 1e-9 : 0.0;
        if (gs_u64map_get(&d->wstat_index, w->id, &v)) {
            const gs__dwstat_t *ws = &d->wstats.data[v - 1];
            o->tasks_done = ws->tasks_done;
            o->tasks_failed = ws->tasks_failed;
            o->bytes_in = ws->bytes_in;
            o->bytes_out = ws->bytes_out;
            o->executing = ws->executing;
            o->queued = ws->queued;
        }
    }
    return 1;
}

static int gs__dsnap_graphs(gs__dash_t *d, gs__dsnap_t *snap)
{
    gs_sched_t *s = d->s;
    uint32_t ngone = d->ngone < GS__DASH_GONE ? d->ngone : GS__DASH_GONE;
    snap->graphs = gs_calloc(s->ngraphs + ngone + 1, sizeof *snap->graphs, "dashboard graphs");
    if (snap->graphs == NULL) return 0;
    for (gs__graph_t *g = s->ghead; g != NULL; g = g->next) {
        gs__dgraph_t *o = &snap->graphs[snap->ngraphs];
        if (!gs__dgraph_fill(d, g, o)) return 0;
        snap->ngraphs++;
        for (uint32_t l = 0; l < o->nlayers; l++) {
            for (int k = 0; k < GS__DS_N; k++) snap->tasks_by_state[k] += o->layers[l].nstate[k];
        }
    }
    for (uint32_t i = 0; i < ngone; i++) {   /* newest first */
        const gs__dgraph_t *in = &d->gone[(d->ngone - 1 - i) % GS__DASH_GONE];
        if (!gs__dgraph_copy(in, &snap->graphs[snap->ngraphs])) return 0;
        snap->ngraphs++;
    }
    return 1;
}

static int gs__dsnap_events(gs__dash_t *d, gs__dsnap_t *snap)
{
    uint64_t held = d->nevents < GS__DASH_RING ? d->nevents : GS__DASH_RING;
    uint64_t n = held < GS__DASH_SNAP_EVENTS ? held : GS__DASH_SNAP_EVENTS;
    uint64_t age = (uint64_t)GS__DASH_EVENT_AGE_S * 1000000000u, first;
    /* skip reports older than the age limit (ring order is report order) */
    while (n > 0) {
        const gs__devent_t *e = &d->ring[(d->nevents - n) & (GS__DASH_RING - 1)];
        if (snap->now_ns - e->end_ns <= age) break;
        n--;
    }
    snap->events = gs_malloc((n ? n : 1) * sizeof *snap->events, "dashboard events");
    if (snap->events == NULL) return 0;
    first = d->nevents - n;
    for (uint64_t i = 0; i < n; i++) snap->events[i] = d->ring[(first + i) & (GS__DASH_RING - 1)];
    snap->nevents = (uint32_t)n;
    snap->events_dropped = first;
    return 1;
}

static int gs__dsnap_xfers(gs__dash_t *d, gs__dsnap_t *snap)
{
    snap->xfers = gs_malloc((d->xfers.len ? d->xfers.len : 1) * sizeof *snap->xfers, "dashboard transfers");
    snap->paths = gs_calloc(d->npaths ? d->npaths : 1, sizeof *snap->paths, "dashboard paths");
    if (snap->xfers == NULL || snap->paths == NULL) return 0;
    if (d->xfers.len > 0) memcpy(snap->xfers, d->xfers.data, d->xfers.len * sizeof *snap->xfers);
    snap->nxfers = (uint32_t)d->xfers.len;
    for (uint32_t i = 0; i < d->npaths; i++) {
        if ((snap->paths[i] = gs_strdup(d->paths[i], "dashboard path")) == NULL) return 0;
        snap->npaths++;
    }
    return 1;
}

gs__dsnap_t *gs__dsnap_build(gs__dash_t *d)
{
    gs__dsnap_t *snap = gs_calloc(1, sizeof *snap, "dashboard snapshot");
    if (snap == NULL) return NULL;
    atomic_init(&snap->refs, 1);
    snap->now_ns = gs_now_ns();
    snap->t0_ns = d->t0_ns;
    gs__dash_prune_workers(d);
    gs_sched_stats(d->s, &snap->st);
    memcpy(snap->hist, d->hist, sizeof snap->hist);
    snap->hist_count = d->hist_count;
    snap->hist_sum_s = d->hist_sum_s;
    snap->tasks_failed_total = d->tasks_failed_total;
    if (!gs__dsnap_workers(d, snap) || !gs__dsnap_graphs(d, snap) || !gs__dsnap_events(d, snap) ||
        !gs__dsnap_xfers(d, snap)) {
        GS_LOG_WARN("out of memory for a dashboard snapshot; keeping the previous one");
        gs__dsnap_free(snap);
        return NULL;
    }
    return snap;
}
