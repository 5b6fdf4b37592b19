/* JSON of the dashboard's /api endpoints, rendered from a snapshot with jansson (HTTP threads).
 * Shapes are documented in docs/dashboard.md. */
#include "scheduler/dash/dash_int.h"

#include <inttypes.h>
#include <jansson.h>
#include <string.h>

/* Serialise and free @a root; NULL when any allocation failed (a NULL @a root included). */
static char *gs__api_dump(json_t *root)
{
    char *body;
    if (root == NULL) return NULL;
    body = json_dumps(root, JSON_COMPACT);   /* malloc'd by jansson's default allocator */
    json_decref(root);
    return body;
}

/* Set @a key of @a obj to @a v (stolen); a NULL @a v marks @a obj failed through *ok_p. */
static void gs__api_set(json_t *obj, const char *key, json_t *v, int *ok_p)
{
    if (v == NULL || json_object_set_new(obj, key, v) != 0) *ok_p = 0;
}

static void gs__api_push(json_t *arr, json_t *v, int *ok_p)
{
    if (v == NULL || json_array_append_new(arr, v) != 0) *ok_p = 0;
}

/* A string that may hold invalid UTF-8 (names come from peers): replaced bytes become '?'. */
static json_t *gs__api_str(const char *s)
{
    json_t *j = json_string(s);
    char *copy;
    size_t n;
    if (j != NULL || s == NULL) return j;
    n = strlen(s);
    if ((copy = malloc(n + 1)) == NULL) return NULL;
    for (size_t i = 0; i <= n; i++) copy[i] = (unsigned char)s[i] >= 0x80 ? '?' : s[i];
    j = json_string(copy);
    free(copy);
    return j;
}

static json_t *gs__api_root(const gs__dsnap_t *snap, int *ok_p)
{
    json_t *root = json_object();
    if (root == NULL) return NULL;
    gs__api_set(root, "now", json_real(gs__dsnap_t_s(snap, snap->now_ns)), ok_p);
    gs__api_set(root, "serial", json_integer((json_int_t)snap->serial), ok_p);
    return root;
}

/* The root object and an empty array for its list; 0 (both NULL) when out of memory. */
static int gs__api_root_list(const gs__dsnap_t *snap, int *ok_p, json_t **root_p, json_t **arr_p)
{
    *root_p = gs__api_root(snap, ok_p);
    *arr_p = json_array();
    if (*root_p != NULL && *arr_p != NULL) return 1;
    json_decref(*root_p);
    json_decref(*arr_p);
    *root_p = *arr_p = NULL;
    return 0;
}

static json_t *gs__api_finish(json_t *root, int ok)
{
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

char *gs__dash_api_workers(const gs__dsnap_t *snap)
{
    int ok = 1;
    json_t *root, *arr;
    if (!gs__api_root_list(snap, &ok, &root, &arr)) return NULL;
    for (uint32_t i = 0; i < snap->nworkers && ok; i++) {
        const gs__dworker_t *w = &snap->workers[i];
        json_t *o = json_object(), *mem = json_array(), *tier = json_object(), *tasks = json_object();
        gs__api_set(tier, "tier", json_string(strcmp(w->backend, "cpu") == 0 ? "host" : "device"), &ok);
        gs__api_set(tier, "used", json_integer((json_int_t)w->mem_used), &ok);
        gs__api_set(tier, "limit", json_integer((json_int_t)w->memory_limit), &ok);
        gs__api_push(mem, tier, &ok);
        if (w->disk_limit != 0) {   /* spilling on: the disk tier (limit null: the file system's room) */
            json_t *disk = json_object();
            gs__api_set(disk, "tier", json_string("disk"), &ok);
            gs__api_set(disk, "used", json_integer((json_int_t)w->disk_used), &ok);
            gs__api_set(disk, "limit", w->disk_limit == UINT64_MAX ? json_null() : json_integer((json_int_t)w->disk_limit), &ok);
            gs__api_set(disk, "spilled_bytes", json_integer((json_int_t)w->spilled_bytes), &ok);
            gs__api_set(disk, "unspilled_bytes", json_integer((json_int_t)w->unspilled_bytes), &ok);
            gs__api_push(mem, disk, &ok);
        }
        if (w->host_limit != 0 && strcmp(w->backend, "cpu") != 0) {   /* a device's host tier */
            json_t *host = json_object();
            gs__api_set(host, "tier", json_string("host"), &ok);
            gs__api_set(host, "used", json_integer((json_int_t)w->host_used), &ok);
            gs__api_set(host, "limit", json_integer((json_int_t)w->host_limit), &ok);
            gs__api_set(host, "spilled_bytes", json_integer((json_int_t)w->host_spilled_bytes), &ok);
            gs__api_set(host, "unspilled_bytes", json_integer((json_int_t)w->host_unspilled_bytes), &ok);
            gs__api_push(mem, host, &ok);
        }
        gs__api_set(tasks, "running", json_integer((json_int_t)w->executing), &ok);
        gs__api_set(tasks, "queued", json_integer((json_int_t)w->queued), &ok);
        gs__api_set(tasks, "assigned", json_integer((json_int_t)w->outstanding), &ok);
        gs__api_set(tasks, "done", json_integer((json_int_t)w->tasks_done), &ok);
        gs__api_set(tasks, "failed", json_integer((json_int_t)w->tasks_failed), &ok);
        gs__api_set(o, "id", json_integer((json_int_t)w->id), &ok);
        gs__api_set(o, "name", gs__api_str(w->name), &ok);
        gs__api_set(o, "host", gs__api_str(w->host), &ok);
        gs__api_set(o, "backend", gs__api_str(w->backend), &ok);
        gs__api_set(o, "device", json_integer(w->device), &ok);
        gs__api_set(o, "nthreads", json_integer(w->nthreads), &ok);
        gs__api_set(o, "memory", mem, &ok);
        gs__api_set(o, "tasks", tasks, &ok);
        gs__api_set(o, "bytes_in", json_integer((json_int_t)w->bytes_in), &ok);
        gs__api_set(o, "bytes_out", json_integer((json_int_t)w->bytes_out), &ok);
        gs__api_set(o, "ms_per_task", json_real(w->ms_per_task), &ok);
        gs__api_set(o, "uptime_s", json_real(w->uptime_s), &ok);
        gs__api_push(arr, o, &ok);
    }
    gs__api_set(root, "workers", arr, &ok);
    return gs__api_dump(gs__api_finish(root, ok));
}

static json_t *gs__api_layer(const gs__dlayer_t *l, uint32_t index, int *ok_p)
{
    json_t *o = json_object();
    if (o == NULL) return NULL;
    gs__api_set(o, "index", json_integer(index), ok_p);
    gs__api_set(o, "name", json_string(l->name), ok_p);
    gs__api_set(o, "total", json_integer((json_int_t)l->ntasks), ok_p);
    for (int k = 0; k < GS__DS_N; k++) gs__api_set(o, gs__dstate_names[k], json_integer((json_int_t)l->nstate[k]), ok_p);
    gs__api_set(o, "done", json_integer((json_int_t)(l->nstate[GS__DS_MEMORY] + l->nstate[GS__DS_RELEASED])), ok_p);
    gs__api_set(o, "run_s", json_real((double)l->run_ns * 1e-9), ok_p);
    return o;
}

json_t *gs__dash_api_graph(const gs__dgraph_t *g, int *ok_p)
{
    json_t *o = json_object(), *layers = json_array();
    if (o == NULL || layers == NULL) {
        json_decref(o);
        json_decref(layers);
        *ok_p = 0;
        return NULL;
    }
    gs__api_set(o, "id", json_integer((json_int_t)g->id), ok_p);
    gs__api_set(o, "client", gs__api_str(g->client), ok_p);
    gs__api_set(o, "phase", json_string(g->phase), ok_p);
    gs__api_set(o, "status", json_integer(g->status), ok_p);
    gs__api_set(o, "error", g->error != NULL ? gs__api_str(g->error) : json_null(), ok_p);
    gs__api_set(o, "released", json_boolean(g->released), ok_p);
    gs__api_set(o, "ntasks", json_integer((json_int_t)g->ntasks), ok_p);
    gs__api_set(o, "total", json_integer((json_int_t)g->ntotal), ok_p);
    gs__api_set(o, "done", json_integer((json_int_t)g->ndone), ok_p);
    gs__api_set(o, "run_s", json_real((double)g->run_ns_total * 1e-9), ok_p);
    gs__api_set(o, "t_start", json_real(g->t_start), ok_p);
    gs__api_set(o, "t_end", g->t_end >= 0.0 ? json_real(g->t_end) : json_null(), ok_p);
    for (uint32_t l = 0; l < g->nlayers; l++) gs__api_push(layers, gs__api_layer(&g->layers[l], l, ok_p), ok_p);
    gs__api_set(o, "layers", layers, ok_p);
    return o;
}

char *gs__dash_api_graphs(const gs__dsnap_t *snap)
{
    int ok = 1;
    json_t *root, *arr;
    if (!gs__api_root_list(snap, &ok, &root, &arr)) return NULL;
    for (uint32_t i = 0; i < snap->ngraphs && ok; i++) gs__api_push(arr, gs__dash_api_graph(&snap->graphs[i], &ok), &ok);
    gs__api_set(root, "graphs", arr, &ok);
    return gs__api_dump(gs__api_finish(root, ok));
}

/* Index of the first event newer than @a since. */
static uint32_t gs__api_first_event(const gs__dsnap_t *snap, uint64_t since)
{
    uint64_t skip;
    if (snap->nevents == 0 || since < snap->events[0].seq) return 0;   /* events are in seq order */
    skip = since - snap->events[0].seq + 1;
    return skip >= snap->nevents ? snap->nevents : (uint32_t)skip;
}

json_t *gs__dash_api_events(const gs__dsnap_t *snap, uint64_t since, uint64_t graph, int *ok_p)
{
    json_t *arr = json_array();
    if (arr == NULL) {
        *ok_p = 0;
        return NULL;
    }
    for (uint32_t i = gs__api_first_event(snap, since); i < snap->nevents && *ok_p; i++) {
        const gs__devent_t *e = &snap->events[i];
        json_t *o;
        if (graph != 0 && e->graph != graph) continue;
        o = json_object();
        gs__api_set(o, "seq", json_integer((json_int_t)e->seq), ok_p);
        gs__api_set(o, "graph", json_integer((json_int_t)e->graph), ok_p);
        gs__api_set(o, "task", json_integer(e->task), ok_p);
        gs__api_set(o, "layer", json_integer(e->layer), ok_p);
        gs__api_set(o, "worker", json_integer((json_int_t)e->worker), ok_p);
        gs__api_set(o, "start", json_real(gs__dsnap_t_s(snap, e->start_ns)), ok_p);
        gs__api_set(o, "end", json_real(gs__dsnap_t_s(snap, e->end_ns)), ok_p);
        gs__api_set(o, "fetch_s", json_real((double)e->fetch_ns * 1e-9), ok_p);
        gs__api_set(o, "status", json_integer(e->status), ok_p);
        gs__api_push(arr, o, ok_p);
    }
    return arr;
}

/* The task stream is the one large answer (20,000 reports): it holds numbers only, so it is
 * printed directly, in the same shape jansson would give (%.17g round-trips doubles). */
char *gs__dash_api_tasks(const gs__dsnap_t *snap, uint64_t since)
{
    gs__dtext_t t = {0};
    uint64_t last = snap->nevents > 0 ? snap->events[snap->nevents - 1].seq : snap->events_dropped;
    uint64_t dropped = snap->events_dropped > since ? snap->events_dropped - since : 0;
    gs__dtext_printf(&t, "{\"now\":%.17g,\"serial\":%" PRIu64 ",\"since\":%" PRIu64 ",\"next\":%" PRIu64
                     ",\"dropped\":%" PRIu64 ",\"tasks\":[", gs__dsnap_t_s(snap, snap->now_ns), snap->serial, since,
                     since > last ? since : last, dropped);
    for (uint32_t i = gs__api_first_event(snap, since); i < snap->nevents && !t.oom; i++) {
        const gs__devent_t *e = &snap->events[i];
        gs__dtext_printf(&t, "%s{\"seq\":%" PRIu64 ",\"graph\":%" PRIu64 ",\"task\":%u,\"layer\":%u,\"worker\":%" PRIu64
                         ",\"start\":%.17g,\"end\":%.17g,\"fetch_s\":%.17g,\"status\":%d}",
                         t.len > 0 && t.p[t.len - 1] == '}' ? "," : "", e->seq, e->graph, e->task, e->layer, e->worker,
                         gs__dsnap_t_s(snap, e->start_ns), gs__dsnap_t_s(snap, e->end_ns),
                         (double)e->fetch_ns * 1e-9, (int)e->status);
    }
    gs__dtext_append(&t, "]}", 2);
    return gs__dtext_take(&t);
}

json_t *gs__dash_api_xfer_array(const gs__dsnap_t *snap, int *ok_p)
{
    json_t *arr = json_array();
    if (arr == NULL) {
        *ok_p = 0;
        return NULL;
    }
    for (uint32_t i = 0; i < snap->nxfers && *ok_p; i++) {
        const gs__dxfer_t *x = &snap->xfers[i];
        json_t *o = json_object();
        gs__api_set(o, "from", json_integer((json_int_t)x->from), ok_p);
        gs__api_set(o, "to", json_integer((json_int_t)x->to), ok_p);
        gs__api_set(o, "path", gs__api_str(x->path < snap->npaths ? snap->paths[x->path] : "unknown"), ok_p);
        gs__api_set(o, "bytes", json_integer((json_int_t)x->bytes), ok_p);
        gs__api_set(o, "count", json_integer((json_int_t)x->count), ok_p);
        gs__api_set(o, "seconds", json_real((double)x->ns * 1e-9), ok_p);
        gs__api_set(o, "gbps", json_real(x->ns > 0 ? (double)x->bytes / (double)x->ns : 0.0), ok_p);
        gs__api_set(o, "recent_gbps", json_real(x->gbps), ok_p);
        gs__api_set(o, "age_s", json_real((double)(snap->now_ns - x->last_ns) * 1e-9), ok_p);
        gs__api_push(arr, o, ok_p);
    }
    return arr;
}

char *gs__dash_api_transfers(const gs__dsnap_t *snap)
{
    int ok = 1;
    json_t *root = gs__api_root(snap, &ok);
    if (root == NULL) return NULL;
    gs__api_set(root, "transfers", gs__dash_api_xfer_array(snap, &ok), &ok);
    return gs__api_dump(gs__api_finish(root, ok));
}
