/* /metrics: the Prometheus text exposition format (version 0.0.4) rendered from a snapshot
 * (HTTP threads). Every family has HELP and TYPE lines; counters end in _total, units are base
 * units (bytes, seconds); label values are escaped (backslash, double quote, newline). The
 * families are listed in docs/dashboard.md. */
#include "scheduler/dash/dash_int.h"

#include <inttypes.h>
#include <string.h>

static void gs__m_family(gs__dtext_t *t, const char *name, const char *type, const char *help)
{
    gs__dtext_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Append @a v as a label value (escaped, without the quotes). */
static void gs__m_label(gs__dtext_t *t, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\') gs__dtext_append(t, "\\\\", 2);
        else if (*v == '"') gs__dtext_append(t, "\\\"", 2);
        else if (*v == '\n') gs__dtext_append(t, "\\n", 2);
        else gs__dtext_append(t, v, 1);
    }
}

static void gs__m_u64(gs__dtext_t *t, const char *name, const char *lname, const char *lval, uint64_t v)
{
    if (lname == NULL) {
        gs__dtext_printf(t, "%s %" PRIu64 "\n", name, v);
        return;
    }
    gs__dtext_printf(t, "%s{%s=\"", name, lname);
    gs__m_label(t, lval);
    gs__dtext_printf(t, "\"} %" PRIu64 "\n", v);
}

/* A per-worker sample: name{worker="W",tier|state="X"} v. */
static void gs__m_worker(gs__dtext_t *t, const char *name, const gs__dworker_t *w, const char *lname,
                         const char *lval, uint64_t v)
{
    gs__dtext_printf(t, "%s{worker=\"", name);
    gs__m_label(t, w->name);
    gs__dtext_printf(t, "\",%s=\"%s\"} %" PRIu64 "\n", lname, lval, v);
}

static void gs__m_tasks(gs__dtext_t *t, const gs__dsnap_t *snap)
{
    gs__m_family(t, "gsched_tasks", "gauge", "Tasks of the graphs gsched holds, by state.");
    for (int k = 0; k < GS__DS_N; k++) gs__m_u64(t, "gsched_tasks", "state", gs__dstate_names[k], snap->tasks_by_state[k]);
    gs__m_family(t, "gsched_tasks_total", "counter", "Task transitions since gsched started, by state entered.");
    gs__m_u64(t, "gsched_tasks_total", "state", "assigned", snap->st.tasks_assigned_total);
    gs__m_u64(t, "gsched_tasks_total", "state", "done", snap->st.tasks_done_total);
    gs__m_u64(t, "gsched_tasks_total", "state", "erred", snap->tasks_failed_total);
    gs__m_u64(t, "gsched_tasks_total", "state", "recomputed", snap->st.tasks_recomputed_total);
    gs__m_u64(t, "gsched_tasks_total", "state", "timed_out", snap->st.tasks_timed_out_total);
    gs__m_family(t, "gsched_task_duration_seconds", "histogram", "Kernel time of completed tasks as workers report it.");
    {
        uint64_t cum = 0;
        for (int b = 0; b < GS__DHIST_N; b++) {
            cum += snap->hist[b];
            gs__dtext_printf(t, "gsched_task_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n", gs__dhist_le[b], cum);
        }
        cum += snap->hist[GS__DHIST_N];
        gs__dtext_printf(t, "gsched_task_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
        gs__dtext_printf(t, "gsched_task_duration_seconds_sum %.9g\n", snap->hist_sum_s);
        gs__dtext_printf(t, "gsched_task_duration_seconds_count %" PRIu64 "\n", snap->hist_count);
    }
}

static void gs__m_transfers(gs__dtext_t *t, const gs__dsnap_t *snap)
{
    static const struct { const char *name, *help; } fam[3] = {
        {"gsched_transfer_bytes_total", "Bytes workers fetched from peers, by path."},
        {"gsched_transfers_total", "Chunks workers fetched from peers, by path."},
        {"gsched_transfer_seconds_total", "Time workers spent fetching from peers, by path."},
    };
    for (int f = 0; f < 3; f++) {
        gs__m_family(t, fam[f].name, "counter", fam[f].help);
        for (uint32_t p = 0; p < snap->npaths; p++) {
            uint64_t bytes = 0, count = 0, ns = 0;
            for (uint32_t i = 0; i < snap->nxfers; i++) {
                if (snap->xfers[i].path != p) continue;
                bytes += snap->xfers[i].bytes;
                count += snap->xfers[i].count;
                ns += snap->xfers[i].ns;
            }
            if (f < 2) {
                gs__m_u64(t, fam[f].name, "path", snap->paths[p], f == 0 ? bytes : count);
            } else {
                gs__dtext_printf(t, "%s{path=\"", fam[f].name);
                gs__m_label(t, snap->paths[p]);
                gs__dtext_printf(t, "\"} %.9g\n", (double)ns * 1e-9);
            }
        }
    }
}

static void gs__m_workers(gs__dtext_t *t, const gs__dsnap_t *snap)
{
    gs__m_family(t, "gsched_workers", "gauge", "Registered, live workers.");
    gs__m_u64(t, "gsched_workers", NULL, NULL, snap->nworkers);
    gs__m_family(t, "gsched_worker_memory_bytes", "gauge", "Memory a worker reports in use, by tier.");
    for (uint32_t i = 0; i < snap->nworkers; i++) {
        const gs__dworker_t *w = &snap->workers[i];
        gs__m_worker(t, "gsched_worker_memory_bytes", w, "tier", strcmp(w->backend, "cpu") == 0 ? "host" : "device", w->mem_used);
        if (w->disk_limit != 0) gs__m_worker(t, "gsched_worker_memory_bytes", w, "tier", "disk", w->disk_used);
        if (w->host_limit != 0 && strcmp(w->backend, "cpu") != 0)
            gs__m_worker(t, "gsched_worker_memory_bytes", w, "tier", "host", w->host_used);
    }
    gs__m_family(t, "gsched_worker_memory_limit_bytes", "gauge", "A worker's memory limit, by tier.");
    for (uint32_t i = 0; i < snap->nworkers; i++) {
        const gs__dworker_t *w = &snap->workers[i];
        gs__m_worker(t, "gsched_worker_memory_limit_bytes", w, "tier", strcmp(w->backend, "cpu") == 0 ? "host" : "device",
                     w->memory_limit);
        if (w->disk_limit != 0 && w->disk_limit != UINT64_MAX)
            gs__m_worker(t, "gsched_worker_memory_limit_bytes", w, "tier", "disk", w->disk_limit);
    }
    gs__m_family(t, "gsched_worker_tasks", "gauge", "Tasks on a worker: running and queued (its heartbeat), assigned (sent, not reported).");
    for (uint32_t i = 0; i < snap->nworkers; i++) {
        const gs__dworker_t *w = &snap->workers[i];
        gs__m_worker(t, "gsched_worker_tasks", w, "state", "running", w->executing);
        gs__m_worker(t, "gsched_worker_tasks", w, "state", "queued", w->queued);
        gs__m_worker(t, "gsched_worker_tasks", w, "state", "assigned", w->outstanding);
    }
    gs__m_family(t, "gsched_worker_transfer_bytes_total", "counter", "Bytes a worker fetched (in) or served (out).");
    for (uint32_t i = 0; i < snap->nworkers; i++) {
        const gs__dworker_t *w = &snap->workers[i];
        gs__m_worker(t, "gsched_worker_transfer_bytes_total", w, "direction", "in", w->bytes_in);
        gs__m_worker(t, "gsched_worker_transfer_bytes_total", w, "direction", "out", w->bytes_out);
    }
}

char *gs__dash_metrics(const gs__dsnap_t *snap, uint64_t requests_total, uint64_t http_errors_total)
{
    gs__dtext_t t = {0};
    uint64_t phases[3] = {0, 0, 0};
    static const char *const phase_names[3] = {"running", "done", "failed"};

    gs__m_tasks(&t, snap);
    gs__m_transfers(&t, snap);
    gs__m_workers(&t, snap);
    for (uint32_t i = 0; i < snap->ngraphs; i++) {
        const gs__dgraph_t *g = &snap->graphs[i];
        if (g->released) continue;
        for (int p = 0; p < 3; p++) phases[p] += strcmp(g->phase, phase_names[p]) == 0;
    }
    gs__m_family(&t, "gsched_graphs", "gauge", "Graphs gsched holds, by phase.");
    for (int p = 0; p < 3; p++) gs__m_u64(&t, "gsched_graphs", "phase", phase_names[p], phases[p]);
    gs__m_family(&t, "gsched_clients", "gauge", "Connected clients.");
    gs__m_u64(&t, "gsched_clients", NULL, NULL, snap->st.nclients);
    gs__m_family(&t, "gsched_connections", "gauge", "Open connections, handshaken or not.");
    gs__m_u64(&t, "gsched_connections", NULL, NULL, snap->st.nconnections);
    gs__m_family(&t, "gsched_memory_bytes", "gauge",
                 "Where gsched's memory is: connections' receive buffers, their queued writes, large frames being received, the heap (used, held free), the resident set.");
    gs__m_u64(&t, "gsched_memory_bytes", "kind", "conn_read", snap->st.conn_read_bytes);
    gs__m_u64(&t, "gsched_memory_bytes", "kind", "conn_write", snap->st.conn_write_bytes);
    gs__m_u64(&t, "gsched_memory_bytes", "kind", "frames", snap->st.frame_bytes_reserved);
    gs__m_u64(&t, "gsched_memory_bytes", "kind", "heap_used", snap->st.heap_used_bytes);
    gs__m_u64(&t, "gsched_memory_bytes", "kind", "heap_free", snap->st.heap_free_bytes);
    gs__m_u64(&t, "gsched_memory_bytes", "kind", "resident", snap->st.rss_bytes);
    gs__m_family(&t, "gsched_memory_peak_bytes", "gauge", "Highest connection receive buffers, queued writes and large frames.");
    gs__m_u64(&t, "gsched_memory_peak_bytes", "kind", "conn_read", snap->st.conn_read_peak);
    gs__m_u64(&t, "gsched_memory_peak_bytes", "kind", "conn_write", snap->st.conn_write_peak);
    gs__m_u64(&t, "gsched_memory_peak_bytes", "kind", "frames", snap->st.frame_bytes_peak);
    gs__m_family(&t, "gsched_heap_releases_total", "counter", "Times gsched returned free heap memory to the system.");
    gs__m_u64(&t, "gsched_heap_releases_total", NULL, NULL, snap->st.heap_trims_total);
    gs__m_family(&t, "gsched_errors_total", "counter", "Errors gsched counted, by kind.");
    gs__m_u64(&t, "gsched_errors_total", "kind", "task_failed", snap->tasks_failed_total);
    gs__m_u64(&t, "gsched_errors_total", "kind", "task_timed_out", snap->st.tasks_timed_out_total);
    gs__m_u64(&t, "gsched_errors_total", "kind", "worker_lost", snap->st.workers_lost_total);
    gs__m_u64(&t, "gsched_errors_total", "kind", "connection_refused", snap->st.refused_total + snap->st.conns_refused_total);
    gs__m_u64(&t, "gsched_errors_total", "kind", "accept_failed", snap->st.accept_errors_total);
    gs__m_u64(&t, "gsched_errors_total", "kind", "frame_refused", snap->st.frames_refused_total);
    gs__m_u64(&t, "gsched_errors_total", "kind", "http", http_errors_total);
    gs__m_family(&t, "gsched_loop_stalls_total", "counter", "Times gsched's own loop stood still for more than 0.5 s.");
    gs__m_u64(&t, "gsched_loop_stalls_total", NULL, NULL, snap->st.stalls_total);
    gs__m_family(&t, "gsched_dashboard_requests_total", "counter", "HTTP requests the dashboard received.");
    gs__m_u64(&t, "gsched_dashboard_requests_total", NULL, NULL, requests_total);
    return gs__dtext_take(&t);
}
