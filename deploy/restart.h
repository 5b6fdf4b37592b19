/* gs-local-cluster's restart policy for workers that exit unexpectedly (deploy/README.md):
 * exponential backoff and a limit of restarts per window, per worker. Plain bookkeeping on a
 * clock the caller passes in (seconds), so it is tested without processes. */
#ifndef GS_DEPLOY_RESTART_H
#define GS_DEPLOY_RESTART_H

#define GS_RESTART_MAX_LIMIT 64              /* largest --restart-limit */
#define GS_RESTART_DEFAULT_LIMIT 5
#define GS_RESTART_DEFAULT_WINDOW_S 600.0    /* the limit counts restarts in this window */
#define GS_RESTART_DEFAULT_DELAY_S 0.5       /* first backoff; doubles per restart in the window */
#define GS_RESTART_MAX_DELAY_S 8.0           /* backoff cap */

typedef struct gs_restart_policy {
    int limit;                  /* restarts allowed per window; 0: never restart */
    double window_s;            /* > 0 */
    double delay_s;             /* first backoff, > 0 */
    double max_delay_s;         /* >= delay_s */
} gs_restart_policy_t;

/** Restarts of one worker within the current window (times in seconds, oldest first). */
typedef struct gs_restart_hist {
    double t[GS_RESTART_MAX_LIMIT];
    int n;
} gs_restart_hist_t;

/** The default policy (limit 5 per 600 s, backoff 0.5 s doubling to 8 s). */
void gs_restart_policy_default(gs_restart_policy_t *p);

/** A worker died at @a now: forget restarts older than the window, then return the backoff
 *  before the next restart (delay_s * 2^(restarts left in the window), at most max_delay_s)
 *  and record that restart at @a now + backoff; or -1 when the window already holds @a p->limit
 *  restarts (or the limit is 0): do not restart. *@a n_p (may be NULL): the restarts in the
 *  window including the one just recorded (or the count that hit the limit). */
double gs_restart_next(const gs_restart_policy_t *p, gs_restart_hist_t *h, double now, int *n_p);

#endif
