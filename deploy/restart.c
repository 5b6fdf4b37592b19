/* gs-local-cluster's restart policy (restart.h). */
#include "deploy/restart.h"

#include <string.h>

void gs_restart_policy_default(gs_restart_policy_t *p)
{
    p->limit = GS_RESTART_DEFAULT_LIMIT;
    p->window_s = GS_RESTART_DEFAULT_WINDOW_S;
    p->delay_s = GS_RESTART_DEFAULT_DELAY_S;
    p->max_delay_s = GS_RESTART_MAX_DELAY_S;
}

double gs_restart_next(const gs_restart_policy_t *p, gs_restart_hist_t *h, double now, int *n_p)
{
    int keep = 0, limit = p->limit < GS_RESTART_MAX_LIMIT ? p->limit : GS_RESTART_MAX_LIMIT;
    double delay = p->delay_s;
    /* drop restarts that left the window */
    while (keep < h->n && h->t[keep] <= now - p->window_s) keep++;
    if (keep > 0) {
        memmove(h->t, h->t + keep, (size_t)(h->n - keep) * sizeof(h->t[0]));
        h->n -= keep;
    }
    if (limit <= 0 || h->n >= limit) {
        if (n_p != NULL) *n_p = h->n;
        return -1.0;
    }
    for (int i = 0; i < h->n && delay < p->max_delay_s; i++) delay *= 2.0;
    if (delay > p->max_delay_s) delay = p->max_delay_s;
    h->t[h->n++] = now + delay;
    if (n_p != NULL) *n_p = h->n;
    return delay;
}
