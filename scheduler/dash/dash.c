/* The dashboard's lifecycle, the hooks the scheduler calls, and the snapshot timer (loop
 * thread); gs__dash_snapshot_get for HTTP threads. See dash.h. */
#include "scheduler/dash/dash_int.h"
#include "scheduler/dash/tally.h"
#include "scheduler/sched_int.h"
#include "scheduler/send.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

gs_status_t gs__dash_parse_address(const char *addr, char *host, size_t len, int *port_p)
{
    const char *colon, *hs, *he;
    char *end;
    unsigned long port;
    size_t hn;
    struct in6_addr a6;
    struct in_addr a4;

    if (addr == NULL || addr[0] == '\0') return gs_error_set(GS_ERR_INVALID_PARAM, "empty dashboard address");
    if (addr[0] == '[') {
        hs = addr + 1;
        he = strchr(hs, ']');
        if (he == NULL || he[1] != ':') {
            return gs_error_set(GS_ERR_INVALID_PARAM, "dashboard address '%s': expected [IPV6]:PORT", addr);
        }
        colon = he + 1;
    } else {
        colon = strrchr(addr, ':');
        if (colon == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "dashboard address '%s': expected HOST:PORT", addr);
        hs = addr;
        he = colon;
    }
    hn = (size_t)(he - hs);
    if (hn == 0 || hn >= len) return gs_error_set(GS_ERR_INVALID_PARAM, "dashboard address '%s': bad host", addr);
    memcpy(host, hs, hn);
    host[hn] = '\0';
    if (inet_pton(AF_INET, host, &a4) != 1 && inet_pton(AF_INET6, host, &a6) != 1) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "dashboard address '%s': host is not a numeric IPv4/IPv6 address", addr);
    }
    if (colon[1] < '0' || colon[1] > '9') return gs_error_set(GS_ERR_INVALID_PARAM, "dashboard address '%s': bad port", addr);
    errno = 0;
    port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || errno != 0 || port > 65535) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "dashboard address '%s': port is not in 0..65535", addr);
    }
    *port_p = (int)port;
    return GS_OK;
}

static int gs__dash_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) return memcmp(&a6, &in6addr_loopback, sizeof a6) == 0;
    return 0;
}

gs_status_t gs__dash_create(gs_sched_t *s, const char *addr, int fallback, gs__dash_t **dash_p)
{
    gs__dash_t *d;
    gs_status_t st;
    char host[GS__DASH_HOST_LEN];
    int port;

    if ((st = gs__dash_parse_address(addr, host, sizeof host, &port)) != GS_OK) return st;
    if (!gs__dash_loopback(host) && s->token_len == 0) {
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "refusing to serve the dashboard on %s without a cluster token: it shows "
                            "every worker and graph; set a token (then the dashboard asks for it) or "
                            "use 127.0.0.1", addr);
    }
    d = gs_calloc(1, sizeof *d, "dashboard");
    if (d == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the dashboard");
    d->ring = gs_calloc(GS__DASH_RING, sizeof *d->ring, "dashboard task ring");
    d->token = gs_strdup(s->token, "dashboard token");
    if (d->ring == NULL || d->token == NULL) {
        gs_free(d->ring);
        gs_free(d->token);
        gs_free(d);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the dashboard");
    }
    d->s = s;
    memcpy(d->host, host, sizeof host);
    d->port = port;
    d->token_len = s->token_len;
    d->need_token = !gs__dash_loopback(host);
    d->fallback = fallback;
    gs_u64map_init(&d->wstat_index);
    gs_u64map_init(&d->glr_index);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->t0_ns = gs_now_ns();
    *dash_p = d;
    return GS_OK;
}

/* Publish @a snap (may be NULL: nothing changes). */
static void gs__dash_publish(gs__dash_t *d, gs__dsnap_t *snap)
{
    gs__dsnap_t *old;
    if (snap == NULL) return;
    pthread_mutex_lock(&d->mu);
    old = d->cur;
    snap->serial = ++d->serial;
    d->cur = snap;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    gs__dsnap_unref(old);
}

static void gs__dash_on_timer(uv_timer_t *timer)
{
    gs__dash_t *d = timer->data;
    uint64_t now = gs_now_ns(), asked = atomic_load_explicit(&d->last_request_ns, memory_order_relaxed);
    if (asked == 0 || now - asked > (uint64_t)GS__DASH_IDLE_MS * 1000000u) return;   /* nobody watching */
    gs__dash_publish(d, gs__dsnap_build(d));
}

gs_status_t gs__dash_start(gs__dash_t *d)
{
    gs_status_t st;
    if ((st = gs__dash_http_start(d)) != GS_OK) {
        if (!d->fallback || d->port == 0) return st;
        /* expected when several clusters share a machine: the URL line names the port */
        GS_LOG_INFO("dashboard port %d is taken (%s); serving on any free port", d->port, gs_last_error());
        d->port = 0;
        if ((st = gs__dash_http_start(d)) != GS_OK) return st;
    }
    uv_timer_init(d->s->loop, &d->timer);
    d->timer.data = d;
    d->s->nhandles++;
    uv_timer_start(&d->timer, gs__dash_on_timer, GS__DASH_PERIOD_MS, GS__DASH_PERIOD_MS);
    uv_unref((uv_handle_t *)&d->timer);   /* the dashboard alone keeps no loop alive */
    d->started = 1;
    GS_LOG_INFO("dashboard on http://%s/", d->address);
    return GS_OK;
}

const char *gs__dash_address(const gs__dash_t *d)
{
    return d->address;
}

static void gs__dash_on_timer_closed(uv_handle_t *h)
{
    gs__dash_t *d = h->data;
    d->s->nhandles--;
}

void gs__dash_stop(gs__dash_t *d)
{
    if (d == NULL || d->stopped) return;
    pthread_mutex_lock(&d->mu);   /* requests waiting for a snapshot return at once */
    d->stopped = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    if (!d->started) return;
    gs__dash_http_stop(d);
    uv_timer_stop(&d->timer);
    uv_close((uv_handle_t *)&d->timer, gs__dash_on_timer_closed);
}

void gs__dash_free(gs__dash_t *d)
{
    if (d == NULL) return;
    gs__dsnap_unref(d->cur);
    for (size_t i = 0; i < d->glr.len; i++) gs_free(d->glr.data[i].run_ns);
    GS_VEC_FREE(&d->glr);
    gs_u64map_cleanup(&d->glr_index);
    GS_VEC_FREE(&d->wstats);
    gs_u64map_cleanup(&d->wstat_index);
    GS_VEC_FREE(&d->xfers);
    for (uint32_t i = 0; i < d->npaths; i++) gs_free(d->paths[i]);
    for (uint32_t i = 0; i < GS__DASH_GONE; i++) gs__dgraph_cleanup(&d->gone[i]);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    gs_free(d->token);
    gs_free(d->ring);
    gs_free(d);
}

gs__dsnap_t *gs__dash_snapshot_get(gs__dash_t *d, uint32_t max_age_ms)
{
    gs__dsnap_t *snap;
    uint64_t now = gs_now_ns(), limit = (uint64_t)max_age_ms * 1000000u;
    struct timespec until;

    atomic_store_explicit(&d->last_request_ns, now, memory_order_relaxed);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(GS__DASH_WAIT_MS % 1000u) * 1000000L;
    until.tv_sec += GS__DASH_WAIT_MS / 1000u + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&d->mu);
    while (!d->stopped && (d->cur == NULL || d->cur->now_ns + limit < now)) {
        if (pthread_cond_timedwait(&d->cv, &d->mu, &until) != 0) break;   /* timed out: serve what there is */
    }
    snap = d->cur;
    gs__dsnap_ref(snap);
    pthread_mutex_unlock(&d->mu);
    return snap;
}

/* ------------------------------------------------------------------------------------------ */
/* Hooks (loop thread).                                                                       */

/* Tallies of worker @a id, created on first use; NULL when out of memory. */
static gs__dwstat_t *gs__dash_wstat(gs__dash_t *d, uint64_t id)
{
    uint64_t v;
    gs__dwstat_t ws;
    if (d->last_wi != 0 && d->last_wid == id) return &d->wstats.data[d->last_wi - 1];
    if (gs_u64map_get(&d->wstat_index, id, &v)) {
        d->last_wid = id;
        d->last_wi = v;
        return &d->wstats.data[v - 1];
    }
    memset(&ws, 0, sizeof ws);
    ws.id = id;
    if (GS_VEC_PUSH(&d->wstats, ws) != GS_OK) return NULL;
    if (gs_u64map_put(&d->wstat_index, id, d->wstats.len) != GS_OK) {
        d->wstats.len--;
        return NULL;
    }
    return &d->wstats.data[d->wstats.len - 1];
}

/* Kernel time per layer of graph @a g, created on first use; NULL when out of memory. */
static gs__dglr_t *gs__dash_glr(gs__dash_t *d, const gs__graph_t *g)
{
    uint64_t v;
    gs__dglr_t r;
    if (d->last_gi != 0 && d->last_gid == g->id) return &d->glr.data[d->last_gi - 1];
    if (gs_u64map_get(&d->glr_index, g->id, &v)) {
        d->last_gid = g->id;
        d->last_gi = v;
        return &d->glr.data[v - 1];
    }
    r.graph = g->id;
    r.nlayers = g->nlayers;
    r.run_ns = gs_calloc(g->nlayers ? g->nlayers : 1, sizeof *r.run_ns, "dashboard layer times");
    if (r.run_ns == NULL) return NULL;
    if (GS_VEC_PUSH(&d->glr, r) != GS_OK) {
        gs_free(r.run_ns);
        return NULL;
    }
    if (gs_u64map_put(&d->glr_index, g->id, d->glr.len) != GS_OK) {
        gs_free(r.run_ns);
        d->glr.len--;
        return NULL;
    }
    return &d->glr.data[d->glr.len - 1];
}

/* Clock mapping. The worker stamps each TASK_DONE batch with its clock (now_ns) as it sends;
 * gsched reads its own clock (recv) when the batch is processed. recv - now_ns = the true offset
 * between the clocks + the batch's one-way delay (network, the worker's send queue, gsched's
 * loop backlog), never less than the true offset. The smallest value seen on the connection is
 * therefore the best estimate: mapped times are late by at most the delay of that fastest batch
 * (on loopback tens of microseconds; bounded by any single batch's delay), plus the clocks'
 * drift since it came (none on one host, whose processes share CLOCK_MONOTONIC; at most 500 ppm
 * between hosts whose clocks NTP slews). A mapped time never lies after the report's receipt. The values are mod 2^64: two
 * hosts' monotonic clocks are unrelated. */
void gs__dash_batch(gs__dash_t *d, const gs__worker_t *w, uint64_t worker_now_ns)
{
    gs__dwstat_t *ws;
    uint64_t recv, off;

    if (d == NULL || (ws = gs__dash_wstat(d, w->id)) == NULL) return;
    recv = gs_now_ns();
    off = recv - worker_now_ns;
    if (!ws->clock_known || (int64_t)(off - ws->clock_off) < 0) ws->clock_off = off;
    ws->clock_known = 1;
    ws->batch_recv = recv;
    ws->batch_now = worker_now_ns;
}

/* Map the worker-clock interval [start, end] of @a ws's current batch onto gsched's clock into
 * e->start_ns, e->end_ns: clamped (signed, relative to the batch's now) to start <= end <= now. */
static void gs__dash_map(const gs__dwstat_t *ws, uint64_t start, uint64_t end, gs__devent_t *e)
{
    int64_t rs = (int64_t)(start - ws->batch_now), re = (int64_t)(end - ws->batch_now);
    uint64_t now_g = ws->batch_now + ws->clock_off;   /* <= batch_recv by the minimum */
    if (re > 0) re = 0;
    if (rs > re) rs = re;
    e->start_ns = now_g + (uint64_t)rs;
    e->end_ns = now_g + (uint64_t)re;
}

void gs__dash_task(gs__dash_t *d, const gs__graph_t *g, uint32_t t, const gs__worker_t *w, int32_t status,
                   uint64_t run_ns, uint64_t fetch_ns, uint64_t start_ns, uint64_t end_ns)
{
    gs__devent_t *e;
    gs__dwstat_t *ws;
    gs__dglr_t *lr;
    double s;
    int b = 0;

    if (d == NULL) return;
    e = &d->ring[d->nevents & (GS__DASH_RING - 1)];
    e->seq = ++d->nevents;
    ws = gs__dash_wstat(d, w->id);
    if (ws != NULL && ws->clock_known) {
        gs__dash_map(ws, start_ns, end_ns, e);
    } else {   /* no batch stamp (out of memory): the report's receipt minus the kernel time */
        e->end_ns = gs_now_ns();
        e->start_ns = e->end_ns - (run_ns < e->end_ns ? run_ns : e->end_ns);
    }
    e->run_ns = run_ns;
    e->fetch_ns = fetch_ns;
    e->graph = g->id;
    e->worker = w->id;
    e->task = t;
    e->layer = g->task_layer[t];
    e->status = status;
    if (ws != NULL) {
        if (status == GS_OK) ws->tasks_done++;
        else ws->tasks_failed++;
    }
    if (status != GS_OK) {
        d->tasks_failed_total++;
        return;
    }
    if ((lr = gs__dash_glr(d, g)) != NULL && e->layer < lr->nlayers) lr->run_ns[e->layer] += run_ns;
    s = (double)run_ns * 1e-9;
    while (b < GS__DHIST_N && s > gs__dhist_le[b]) b++;
    d->hist[b]++;
    d->hist_count++;
    d->hist_sum_s += s;
}

/* Index of path name @a path (interned; the last slot collects the overflow). */
static uint32_t gs__dash_path(gs__dash_t *d, const char *path, size_t len)
{
    char *copy;
    for (uint32_t i = 0; i < d->npaths; i++) {
        if (strlen(d->paths[i]) == len && memcmp(d->paths[i], path, len) == 0) return i;
    }
    if (d->npaths == GS__DASH_MAX_PATHS) return GS__DASH_MAX_PATHS - 1;
    copy = gs_malloc(len + 1, "dashboard path name");
    if (copy == NULL) return d->npaths > 0 ? d->npaths - 1 : 0;
    memcpy(copy, path, len);
    copy[len] = '\0';
    d->paths[d->npaths] = copy;
    return d->npaths++;
}

void gs__dash_xfer(gs__dash_t *d, const gs__worker_t *from, const gs__worker_t *to, const char *path,
                   size_t path_len, uint64_t bytes, uint64_t ns, uint64_t count)
{
    gs__dxfer_t *x = NULL, nx;
    gs__dwstat_t *ws;
    uint32_t pi;

    if (d == NULL) return;
    if (path_len == 0) {
        path = "unknown";
        path_len = 7;
    }
    pi = gs__dash_path(d, path, path_len);
    if (d->npaths == 0) return;   /* out of memory for the first name */
    for (size_t i = 0; i < d->xfers.len && x == NULL; i++) {
        gs__dxfer_t *c = &d->xfers.data[i];
        if (c->from == from->id && c->to == to->id && c->path == pi) x = c;
    }
    if (x == NULL) {
        memset(&nx, 0, sizeof nx);
        nx.from = from->id;
        nx.to = to->id;
        nx.path = pi;
        if (GS_VEC_PUSH(&d->xfers, nx) != GS_OK) return;
        x = &d->xfers.data[d->xfers.len - 1];
    }
    x->bytes += bytes;
    x->ns += ns;
    x->count += count;
    if (ns > 0) x->gbps = x->gbps == 0.0 ? (double)bytes / (double)ns : 0.7 * x->gbps + 0.3 * (double)bytes / (double)ns;
    x->last_ns = gs_now_ns();
    if ((ws = gs__dash_wstat(d, to->id)) != NULL) ws->bytes_in += bytes;
    if ((ws = gs__dash_wstat(d, from->id)) != NULL) ws->bytes_out += bytes;
}

void gs__dash_heartbeat(gs__dash_t *d, const gs__worker_t *w, uint64_t executing, uint64_t queued)
{
    gs__dwstat_t *ws;
    if (d == NULL || (ws = gs__dash_wstat(d, w->id)) == NULL) return;
    ws->executing = executing;
    ws->queued = queued;
}

void gs__dash_graph_gone(gs__dash_t *d, gs__graph_t *g)
{
    gs__dgraph_t *slot;
    uint64_t v;
    if (d == NULL) {
        gs__dash_tally_free(g);
        return;
    }
    slot = &d->gone[d->ngone % GS__DASH_GONE];
    gs__dgraph_cleanup(slot);
    if (gs__dgraph_fill(d, g, slot)) {
        slot->released = 1;
        d->ngone++;
    }
    gs__dash_tally_free(g);
    if (gs_u64map_get(&d->glr_index, g->id, &v)) {   /* drop its layer times (swap with the last) */
        size_t i = v - 1, last = d->glr.len - 1;
        d->last_gi = 0;   /* entries move */
        gs_free(d->glr.data[i].run_ns);
        gs_u64map_del(&d->glr_index, g->id);
        if (i != last) {
            d->glr.data[i] = d->glr.data[last];
            gs_u64map_put(&d->glr_index, d->glr.data[i].graph, i + 1);   /* key exists: cannot fail */
        }
        d->glr.len--;
    }
}

void gs__dash_report_req(gs_sched_t *s, gs__peer_t *p, const gs_msg_report_req_t *m)
{
    gs_msg_t r;
    gs__dsnap_t *snap = NULL;
    char *html = NULL, why[160] = "";
    int owned = 0, status = 404;

    memset(&r, 0, sizeof r);
    r.type = GS_MSG_REPORT;
    r.u.report.req_id = m->req_id;
    if (s->dash == NULL) {
        snprintf(why, sizeof why, "gsched serves no dashboard (started with --dashboard-address none)");
    } else if ((snap = gs__dsnap_build(s->dash)) == NULL) {
        status = 500;
    } else {
        for (uint32_t i = 0; i < snap->ngraphs && !owned; i++) {
            owned = snap->graphs[i].id == m->graph_id && snap->graphs[i].client_id == p->id;
        }
        if (owned) html = gs__dash_report(snap, m->graph_id, &status);
        else snprintf(why, sizeof why, "graph %" PRIu64 " is not a graph of this client that gsched still knows", m->graph_id);
    }
    if (html != NULL) {
        r.u.report.status = GS_OK;
        r.u.report.html.data = (const uint8_t *)html;
        r.u.report.html.len = strlen(html);
    } else {
        r.u.report.status = status == 500 ? GS_ERR_NO_MEMORY : GS_ERR_NOT_FOUND;
        if (status == 500) snprintf(why, sizeof why, "out of memory building the report");
        r.u.report.message.data = (const uint8_t *)why;
        r.u.report.message.len = strlen(why);
    }
    gs__sched_send(s, p, &r);
    free(html);   /* malloc'd (dash_int.h) */
    gs__dsnap_unref(snap);
}
