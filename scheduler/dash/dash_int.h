/*
 * The dashboard's own state, shared by the files of scheduler/dash/ (see dash.h for who calls
 * whom and on which thread). Not installed.
 */
#ifndef GS_SCHEDULER_DASH_DASH_INT_H
#define GS_SCHEDULER_DASH_DASH_INT_H

#include "common/buf.h"
#include "common/hashmap.h"
#include "common/vec.h"
#include "scheduler/dash/snapshot.h"

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#define GS__DASH_PERIOD_MS 150u       /* snapshot period while watched */
#define GS__DASH_IDLE_MS 10000u       /* no snapshots once nobody asked for this long */
#define GS__DASH_WAIT_MS 1000u        /* a request waits at most this for a fresh snapshot */
#define GS__DASH_RING (1u << 16)      /* task reports kept on the loop (power of two) */
#define GS__DASH_SNAP_EVENTS 20000u   /* of them, the newest copied into a snapshot */
#define GS__DASH_EVENT_AGE_S 120u     /* and only those younger than this */
#define GS__DASH_MAX_PATHS 16u        /* distinct transfer path names kept */
#define GS__DASH_GONE 16u             /* recently freed graphs kept */
#define GS__DASH_HOST_LEN 64u

/* Loop-owned tallies of one worker (by id). */
typedef struct gs__dwstat {
    uint64_t id;
    uint64_t tasks_done, tasks_failed;
    uint64_t bytes_in, bytes_out;
    uint64_t executing, queued;
    /* The worker's clock: gsched's clock minus its own, as the smallest (receipt - the batch's
     * now_ns) seen so far (mod 2^64; clock_known once one batch came). Its error is the one-way
     * delay of that fastest batch (dash.c, docs/dashboard.md). */
    uint64_t clock_off;
    int clock_known;
    uint64_t batch_recv, batch_now;   /* the batch being processed: receipt, worker's now_ns */
} gs__dwstat_t;

/* Loop-owned kernel time per layer of one live graph. */
typedef struct gs__dglr {
    uint64_t graph;
    uint32_t nlayers;
    uint64_t *run_ns;            /* [nlayers] */
} gs__dglr_t;

struct gs__dash {
    struct gs_sched *s;
    char host[GS__DASH_HOST_LEN];
    int port;
    char address[GS__DASH_HOST_LEN + 16];
    char *token;                 /* copy of the cluster token; required when non-loopback */
    size_t token_len;
    int need_token;
    int fallback;                /* any free port when ours is taken */
    struct MHD_Daemon *mhd;
    uv_timer_t timer;
    int started;
    int stopped;                 /* written under mu (HTTP threads read it there) */
    uint64_t t0_ns;

    /* loop-owned tallies */
    gs__devent_t *ring;          /* [GS__DASH_RING] */
    uint64_t nevents;            /* reports so far (the newest has seq nevents) */
    GS_VEC(gs__dxfer_t) xfers;
    char *paths[GS__DASH_MAX_PATHS];
    uint32_t npaths;
    GS_VEC(gs__dwstat_t) wstats;
    gs_u64map_t wstat_index;     /* worker id -> index + 1 */
    GS_VEC(gs__dglr_t) glr;
    gs_u64map_t glr_index;       /* graph id -> index + 1 */
    /* the last worker's and graph's entries (index + 1; 0: none), so that the reports of one
     * TASK_DONE batch (one worker, mostly one graph) cost no hash lookup each; reset where
     * entries move (a removal swaps the last one in) */
    uint64_t last_wid, last_wi, last_gid, last_gi;
    uint64_t hist[GS__DHIST_N + 1];
    uint64_t hist_count;
    double hist_sum_s;
    uint64_t tasks_failed_total;
    gs__dgraph_t gone[GS__DASH_GONE];   /* ring of summaries of freed graphs */
    uint32_t ngone;                     /* total ever (index = ngone % GS__DASH_GONE) */

    /* publication: mu guards cur and serial; cv signals a new snapshot */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gs__dsnap_t *cur;
    uint64_t serial;
    _Atomic uint64_t last_request_ns;
    atomic_ulong requests_total;
    atomic_ulong http_errors_total;   /* answered 4xx/5xx */
};

/* snapshot.c: build a snapshot of @a d's scheduler (loop thread). NULL when out of memory. */
gs__dsnap_t *gs__dsnap_build(gs__dash_t *d);
/* Free what a graph summary owns (its strings and layers). */
void gs__dgraph_cleanup(gs__dgraph_t *g);
/* Summarise live graph @a g into @a out (allocates; gs__dgraph_cleanup frees). Its task counts
 * come from g's tally (tally.h), built on first use. 0 when out of memory. */
int gs__dgraph_fill(gs__dash_t *d, struct gs__graph *g, gs__dgraph_t *out);

/* Current snapshot with a reference taken, waiting up to GS__DASH_WAIT_MS for one at most
 * @a max_age_ms old (HTTP threads). NULL when none could be had. */
gs__dsnap_t *gs__dash_snapshot_get(gs__dash_t *d, uint32_t max_age_ms);

/* http.c */
gs_status_t gs__dash_http_start(gs__dash_t *d);
void gs__dash_http_stop(gs__dash_t *d);

/* api.c: JSON bodies (malloc'd, NUL-terminated; free()); NULL when out of memory. */
char *gs__dash_api_workers(const gs__dsnap_t *snap);
char *gs__dash_api_graphs(const gs__dsnap_t *snap);
/* @a since: the last event seq the caller has seen (0 = all held). */
char *gs__dash_api_tasks(const gs__dsnap_t *snap, uint64_t since);
char *gs__dash_api_transfers(const gs__dsnap_t *snap);

/* api.c, for the report: JSON values (jansson json_t *) of one graph summary, of the task
 * reports newer than @a since (of @a graph only unless 0), and of the transfers; NULL and *ok_p
 * = 0 when out of memory. The caller owns the result (json_decref). */
struct json_t;
struct json_t *gs__dash_api_graph(const gs__dgraph_t *g, int *ok_p);
struct json_t *gs__dash_api_events(const gs__dsnap_t *snap, uint64_t since, uint64_t graph, int *ok_p);
struct json_t *gs__dash_api_xfer_array(const gs__dsnap_t *snap, int *ok_p);

/* text.c: a growable text built with malloc (bodies handed to libmicrohttpd, which frees them
 * with free()). An allocation failure latches oom; gs__dtext_take then returns NULL. */
typedef struct gs__dtext {
    char *p;
    size_t len, cap;
    int oom;
} gs__dtext_t;
void gs__dtext_printf(gs__dtext_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gs__dtext_append(gs__dtext_t *t, const char *s, size_t n);
/* The text (NUL-terminated, caller frees with free()), or NULL after a failure. */
char *gs__dtext_take(gs__dtext_t *t);

/* metrics.c: the Prometheus exposition (malloc'd; free()); NULL when out of memory. Counters
 * of the HTTP server itself are passed in. */
char *gs__dash_metrics(const gs__dsnap_t *snap, uint64_t requests_total, uint64_t http_errors_total);

/* report.c: the self-contained HTML report of graph @a graph (malloc'd; free()), NULL with
 * *status_p = 404 when the snapshot does not hold the graph, 500 when out of memory. */
char *gs__dash_report(const gs__dsnap_t *snap, uint64_t graph, int *status_p);

#endif
