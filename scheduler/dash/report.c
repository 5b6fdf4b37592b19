/* The per-graph performance report: one self-contained HTML file (like Dask's
 * performance_report): the template static/report.html (inline CSS and JS, no external
 * resource) with static/colours.js in place of its colours marker and the graph's data as JSON
 * in place of its data marker. HTTP threads (and the loop for REPORT_REQ). */
#include "scheduler/dash/assets.h"
#include "scheduler/dash/dash_int.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define GS__REPORT_MARKER "\"__GS_REPORT_DATA__\""
#define GS__COLOURS_MARKER "/*__GS_COLOURS__*/"

/* JSON of everything the report shows about @a g; NULL when out of memory. */
static char *gs__report_json(const gs__dsnap_t *snap, const gs__dgraph_t *g)
{
    int ok = 1;
    json_t *root = json_object(), *workers = json_array();
    char *text;
    if (root == NULL || workers == NULL) {
        json_decref(root);
        json_decref(workers);
        return NULL;
    }
    for (uint32_t i = 0; i < snap->nworkers && ok; i++) {
        const gs__dworker_t *w = &snap->workers[i];
        json_t *o = json_object();
        if (o == NULL || json_object_set_new(o, "id", json_integer((json_int_t)w->id)) != 0 ||
            json_object_set_new(o, "name", json_string(w->name)) != 0 ||
            json_object_set_new(o, "backend", json_string(w->backend)) != 0 ||
            json_object_set_new(o, "nthreads", json_integer(w->nthreads)) != 0 || json_array_append_new(workers, o) != 0) {
            ok = 0;
        }
    }
    if (json_object_set_new(root, "graph", gs__dash_api_graph(g, &ok)) != 0 ||
        json_object_set_new(root, "tasks", gs__dash_api_events(snap, 0, g->id, &ok)) != 0 ||
        json_object_set_new(root, "transfers", gs__dash_api_xfer_array(snap, &ok)) != 0 ||
        json_object_set_new(root, "workers", workers) != 0 ||
        json_object_set_new(root, "dropped", json_integer((json_int_t)snap->events_dropped)) != 0) {
        ok = 0;
    }
    /* JSON_ESCAPE_SLASH: "</script>" inside a string cannot end the script element */
    text = ok ? json_dumps(root, JSON_COMPACT | JSON_ESCAPE_SLASH) : NULL;
    json_decref(root);
    return text;
}

char *gs__dash_report(const gs__dsnap_t *snap, uint64_t graph, int *status_p)
{
    const gs__dasset_t *tpl = gs__dash_asset_find("report-template");
    const gs__dasset_t *colours = gs__dash_asset_find("/static/colours.js");
    const gs__dgraph_t *g = NULL;
    const char *at, *cat, *text;
    gs__dtext_t t = {0};
    char *json;

    for (uint32_t i = 0; i < snap->ngraphs && g == NULL; i++) {
        if (snap->graphs[i].id == graph) g = &snap->graphs[i];
    }
    if (g == NULL) {
        *status_p = 404;
        return NULL;
    }
    *status_p = 500;
    /* the template holds the colours marker, then the data marker */
    text = tpl != NULL ? (const char *)tpl->data : NULL;
    cat = text != NULL ? strstr(text, GS__COLOURS_MARKER) : NULL;
    at = cat != NULL ? strstr(cat, GS__REPORT_MARKER) : NULL;
    if (at == NULL || colours == NULL || (json = gs__report_json(snap, g)) == NULL) return NULL;
    gs__dtext_append(&t, text, (size_t)(cat - text));
    gs__dtext_append(&t, (const char *)colours->data, colours->len);
    cat += strlen(GS__COLOURS_MARKER);
    gs__dtext_append(&t, cat, (size_t)(at - cat));
    gs__dtext_append(&t, json, strlen(json));
    at += strlen(GS__REPORT_MARKER);
    gs__dtext_append(&t, at, tpl->len - (size_t)(at - text));
    free(json);
    *status_p = 200;
    return gs__dtext_take(&t);
}
