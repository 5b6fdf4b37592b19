/* The terminal progress bar (GS_CLIENT_FIELD_PROGRESS_BAR), like Dask's progress(): one line
 * on stderr redrawn in place, at most every GS__PBAR_MS, with tasks done/total, percentage,
 * rate and elapsed time; the final report of a graph ends the line. Runs on the I/O thread. */
#include "client/client_internal.h"
#include "common/time.h"

#include <stdio.h>
#include <string.h>

#define GS__PBAR_MS 100.0
#define GS__PBAR_WIDTH 30

/* "1.2 k", "3.4 M": @a v with an SI prefix into @a buf. */
static const char *gs__pbar_si(double v, char *buf, size_t len)
{
    static const char *const pre[] = {"", " k", " M", " G"};
    int i = 0;
    while (v >= 1000.0 && i < 3) {
        v /= 1000.0;
        i++;
    }
    snprintf(buf, len, i ? "%.1f%s" : "%.0f%s", v, pre[i]);
    return buf;
}

void gs__pbar_format(char *line, size_t len, uint64_t done, uint64_t total, double elapsed_s)
{
    char bar[GS__PBAR_WIDTH + 1], rate[32];
    double frac = total > 0 ? (double)done / (double)total : 1.0;
    int fill;
    if (frac > 1.0) frac = 1.0;
    fill = (int)(frac * GS__PBAR_WIDTH + 0.5);
    memset(bar, '#', (size_t)fill);
    memset(bar + fill, '.', (size_t)(GS__PBAR_WIDTH - fill));
    bar[GS__PBAR_WIDTH] = '\0';
    snprintf(line, len, "[%s] %3.0f%% %llu/%llu tasks | %s tasks/s | %.1f s", bar, frac * 100.0,
             (unsigned long long)done, (unsigned long long)total,
             gs__pbar_si(elapsed_s > 0 ? (double)done / elapsed_s : 0.0, rate, sizeof rate), elapsed_s);
}

void gs__pbar_update(gs_client_h c, gs_future_h f, uint64_t done, uint64_t total)
{
    double now = gs_now_s();
    char line[160];
    int final = done >= total;
    if (!final && f->graph_id == c->pbar_graph && now - c->pbar_last_s < GS__PBAR_MS * 1e-3) return;
    c->pbar_graph = f->graph_id;
    c->pbar_last_s = now;
    gs__pbar_format(line, sizeof line, done, total, now - f->t_submit);
    fprintf(stderr, "\r%s%s", line, final ? "\n" : "");
    fflush(stderr);
}

void gs__progress_emit(gs_client_h c, gs_future_h f, uint64_t done, uint64_t total)
{
    f->progress_reported = done;
    if (c->pbar) gs__pbar_update(c, f, done, total);
    if (c->progress_cb != NULL) c->progress_cb(f, done, total, c->progress_arg);
}
