/* Static files of the dashboard (scheduler/dash/static/), embedded at build time by
 * cmake/embed.cmake into the generated dash_assets.c. Not installed. */
#ifndef GS_SCHEDULER_DASH_ASSETS_H
#define GS_SCHEDULER_DASH_ASSETS_H

#include <stddef.h>

typedef struct gs__dasset {
    const char *path;            /* URL path, e.g. "/static/dash.js" ("/" for index.html) */
    const char *content_type;
    const unsigned char *data;   /* static */
    size_t len;
} gs__dasset_t;

extern const gs__dasset_t gs__dash_assets[];
extern const size_t gs__dash_nassets;

/* The asset named @a path (a URL path, or "report-template"), or NULL. */
const gs__dasset_t *gs__dash_asset_find(const char *path);

#endif
