/*
 * A dashboard snapshot: an immutable copy of what the pages show, built on the scheduler's loop
 * (gs__dsnap_build) and read by HTTP threads. Every pointer inside is owned by the snapshot and
 * freed with it when the last reference goes (gs__dsnap_unref, any thread). Not installed.
 */
#ifndef GS_SCHEDULER_DASH_SNAPSHOT_H
#define GS_SCHEDULER_DASH_SNAPSHOT_H

#include "scheduler/dash/dash.h"
#include "scheduler/sched.h"

#include <stdatomic.h>
#include <stdint.h>

/* Task states as the dashboard counts them (tasks by state). */
#define GS__DSTATES(X)      \
    X(WAITING, "waiting")   \
    X(READY, "ready")       \
    X(PROCESSING, "processing") \
    X(MEMORY, "memory")     \
    X(RELEASED, "released") \
    X(ERRED, "erred")
enum {
#define GS__DS_ENUM(n, s) GS__DS_##n,
    GS__DSTATES(GS__DS_ENUM)
#undef GS__DS_ENUM
    GS__DS_N
};
extern const char *const gs__dstate_names[GS__DS_N];

/* Upper bounds (seconds) of the task duration histogram; +Inf is implicit. */
#define GS__DHIST_N 10
extern const double gs__dhist_le[GS__DHIST_N];

/* One reported task (the task stream). Times in ns on gsched's monotonic clock. */
typedef struct gs__devent {
    uint64_t seq;                /* 1, 2, ... in report order */
    uint64_t start_ns;           /* the kernel's start and end on the worker, mapped to gsched's */
    uint64_t end_ns;             /* clock (dash.c: start <= end <= when the report arrived) */
    uint64_t run_ns;             /* kernel time on the worker */
    uint64_t fetch_ns;           /* input fetch time on the worker */
    uint64_t graph;
    uint64_t worker;             /* worker id */
    uint32_t task;
    uint32_t layer;
    int32_t status;
} gs__devent_t;

/* Transfers between one ordered pair of workers over one path (sums since registration). */
typedef struct gs__dxfer {
    uint64_t from, to;           /* worker ids */
    uint32_t path;               /* index into the dashboard's path names */
    uint64_t bytes, ns, count;
    double gbps;                 /* EWMA of the reports' bytes/ns */
    uint64_t last_ns;            /* when last reported */
} gs__dxfer_t;

typedef struct gs__dworker {
    uint64_t id;
    char *name, *host, *backend;
    int32_t device;
    uint32_t nthreads;
    uint64_t memory_limit, mem_used;
    uint64_t disk_used, disk_limit;   /* the spill tier (worker/spill/): 0, 0 when off */
    uint64_t spilled_bytes, unspilled_bytes;
    uint64_t host_used, host_limit;   /* a device worker's host tier: 0, 0 when none */
    uint64_t host_spilled_bytes, host_unspilled_bytes;
    uint32_t outstanding;        /* sent and not reported */
    uint64_t executing, queued;  /* from its last heartbeat */
    uint64_t tasks_done, tasks_failed;
    uint64_t bytes_in, bytes_out;
    double ms_per_task;
    double uptime_s;
} gs__dworker_t;

typedef struct gs__dlayer {
    char name[48];               /* "normal+add", "sum", "slice", ... (the client's, GRAPH_SUBMIT) */
    uint64_t ntasks;             /* needed tasks of this layer */
    uint64_t nstate[GS__DS_N];
    uint64_t run_ns;             /* kernel time reported for it */
} gs__dlayer_t;

typedef struct gs__dgraph {
    uint64_t id;
    uint64_t client_id;          /* the owning client's peer id */
    char *client;
    const char *phase;           /* "running", "done", "failed" (static) */
    int32_t status;
    char *error;                 /* NULL when none */
    int released;                /* freed by gsched (recently finished list) */
    uint64_t ntasks, ntotal, ndone;
    uint64_t run_ns_total;
    double t_start, t_end;       /* s since the dashboard started; t_end < 0 while running */
    uint32_t nlayers;
    gs__dlayer_t *layers;
} gs__dgraph_t;

typedef struct gs__dsnap {
    atomic_uint refs;
    uint64_t serial;             /* 1, 2, ...: publication order */
    uint64_t now_ns;
    uint64_t t0_ns;              /* the dashboard's start */
    /* workers and graphs */
    uint32_t nworkers;
    gs__dworker_t *workers;
    uint32_t ngraphs;
    gs__dgraph_t *graphs;        /* live graphs in id order, then recently freed ones */
    /* task stream: the newest reports, oldest first */
    uint32_t nevents;
    gs__devent_t *events;
    uint64_t events_dropped;     /* reports older than events[0] no longer held */
    /* transfers */
    uint32_t nxfers;
    gs__dxfer_t *xfers;
    uint32_t npaths;
    char **paths;
    /* counters */
    uint64_t tasks_by_state[GS__DS_N];
    uint64_t hist[GS__DHIST_N + 1];  /* last: +Inf */
    uint64_t hist_count;
    double hist_sum_s;
    uint64_t tasks_failed_total;
    gs_sched_stats_t st;
} gs__dsnap_t;

/** Take / drop a reference (any thread). The last unref frees the snapshot. NULL is fine. */
void gs__dsnap_ref(gs__dsnap_t *snap);
void gs__dsnap_unref(gs__dsnap_t *snap);

/** Seconds of @a ns on the snapshot's clock relative to the dashboard's start. */
static inline double gs__dsnap_t_s(const gs__dsnap_t *snap, uint64_t ns)
{
    return ns >= snap->t0_ns ? (double)(ns - snap->t0_ns) * 1e-9 : -(double)(snap->t0_ns - ns) * 1e-9;
}

#endif
