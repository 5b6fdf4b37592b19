/*
 * Types shared by every file of the scheduler, and lookups on them. Not installed.
 *
 * The files, each with its own header, and who may call whom (calls point down only):
 *   sched.c      lifecycle (create/listen/stop/destroy), public queries, housekeeping timer
 *   peers.c      connections: handshake, worker registration and removal, message dispatch
 *   replicate.c  REPLICATE requests            submit.c  validation and submission of graphs
 *   place.c      placement: the per-iteration tick, worker choice, TASK_ASSIGN batches
 *   tasks.c      the task state machine: readiness, completion, release, lineage, failure
 *   gather.c     gathers: parked until computed, relayed from the holding worker
 *   cost.c       the cost model placement uses: queue bounds, bandwidth per worker pair
 *   send.c       sending to a peer (a failed send closes that connection)
 *   rset.h       the ready set (data structure)
 *   dash/        the dashboard (dash/dash.h): hooks called from tasks.c, cost.c and peers.c,
 *                lifecycle from sched.c; it reads this state only on the loop thread
 * Placement, the state machine, gathers and the cost model never call the connection
 * handling (peers.c) or the lifecycle (sched.c).
 */
#ifndef GS_SCHEDULER_SCHED_INT_H
#define GS_SCHEDULER_SCHED_INT_H

#include "common/alloc.h"
#include "common/error.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/vec.h"
#include "proto/conn.h"
#include "proto/handshake.h"
#include "scheduler/dash/dash.h"
#include "scheduler/rset.h"
#include "scheduler/sched.h"

#include <stdint.h>

#define GS__NO_WORKER UINT32_MAX

/* Task states. LOST and LOST_RUNNING exist only while a worker removal is being processed. */
enum {
    GS__TS_WAITING = 0,   /* some input chunk not in memory (ndeps_left > 0) */
    GS__TS_READY,         /* every input in memory; in one of the graph's ready sets */
    GS__TS_ASSIGNED,      /* sent to worker `where` (queued or running there) */
    GS__TS_MEMORY,        /* output chunk held by worker `where` */
    GS__TS_RELEASED,      /* was computed; chunk dropped (or lost) and not needed now */
    GS__TS_ERRED,         /* failed (its graph has failed) */
    GS__TS_CULLED,        /* no output depends on it: never run */
    GS__TS_DEFERRED,      /* input fetch failed; waits for a retry time */
    GS__TS_LOST,          /* (transient) chunk was on a removed worker */
    GS__TS_LOST_RUNNING   /* (transient) was assigned to a removed worker */
};

/* Per-task flags. */
#define GS__TF_OUTPUT 0x1u
#define GS__TF_STACKED 0x2u   /* present in a ready set (entries are removed lazily); during
                                 submission: on the priority walk's stack */
#define GS__TF_ROOT 0x4u      /* no inputs at all (a generator): placed under the root bound */
#define GS__TF_RQUEUED 0x8u   /* counted in the root tallies of worker `where` as assigned */
#define GS__TF_RHELD 0x10u    /* counted in the root tallies of worker `where` as a stored
                                 chunk with pending dependents (MEMORY, nrefs > 0) */

/* Root tallies of a worker (over all graphs). */
typedef struct gs__roots {
    uint32_t nqueued;            /* root tasks assigned, not reported */
    uint32_t nheld;              /* root chunks stored there whose dependents are pending */
    uint64_t bytes;              /* their bytes (declared while queued, reported once stored) */
    uint64_t held_bytes;         /* the stored ones' bytes */
} gs__roots_t;

enum { GS__GRAPH_RUNNING = 0, GS__GRAPH_DONE, GS__GRAPH_FAILED };

enum { GS__PEER_HANDSHAKE = 0, GS__PEER_CLIENT, GS__PEER_WORKER, GS__PEER_CLOSING };

typedef struct gs__peer gs__peer_t;
typedef struct gs__worker gs__worker_t;
typedef struct gs__graph gs__graph_t;
typedef struct gs_sched gs_sched_t;

/* What a graph knows about one worker slot. */
typedef struct gs__gw {
    uint64_t *layer_bits;   /* NULL until the worker got a task of this graph; nlayers bits */
    uint32_t outstanding;   /* tasks of this graph sent to the worker and not reported */
    uint32_t nheld;         /* chunks of this graph the worker holds (as far as we know) */
} gs__gw_t;

/* A client's gather waiting for an output that is being (re)computed. */
typedef struct gs__parked {
    uint64_t client_req;
    uint32_t task;
} gs__parked_t;

#define GS__LAYER_NAME_CAP 48   /* bytes per layer name, NUL included (dash snapshot.h) */

struct gs__graph {
    gs_sched_t *s;
    uint64_t id;
    gs__peer_t *client;          /* owner; graphs are dropped before their client is freed */
    uint64_t client_ref;
    uint32_t flags;              /* GS_SUBMIT_* */
    int phase;                   /* GS__GRAPH_* */
    int client_released;         /* RELEASE_GRAPH received; freed when nusing drops to 0 */
    gs_status_t status;
    char *errmsg;                /* failure message (owned) or NULL */

    /* layers (opaque bytes) */
    uint32_t nlayers;
    uint8_t *layer_blob;
    uint64_t *layer_off;         /* nlayers + 1 */
    char *layer_names;           /* nlayers * GS__LAYER_NAME_CAP: the client's operation names, as
                                    text (cut, bytes outside printable ASCII as '?'; "layer" when
                                    none came); never interpreted */

    /* task table (struct of arrays) */
    uint32_t ntasks;
    uint32_t *task_layer;
    uint64_t *task_block;
    uint32_t *dep_off;           /* ntasks + 1 */
    uint32_t *deps;              /* < ntasks: internal; ntasks + k: externals[k] */
    uint64_t *nbytes;
    uint32_t *rdep_off;          /* ntasks + 1: dependents (internal, needed only) */
    uint32_t *rdeps;
    uint8_t *state;              /* set through gs__task_state_set (scheduler/dash/tally.h) */
    uint64_t *dash_tally;        /* the dashboard's task counts by layer and state; NULL until a
                                    snapshot looks at the graph */
    uint8_t *tflags;
    uint8_t *nfail;              /* removed workers while assigned */
    uint8_t *nretry;             /* input fetch failures */
    uint64_t *t_assigned;        /* when each task was last assigned (ns); only with a task
                                    timeout, else NULL */
    uint32_t *ndeps_left;        /* inputs not in memory (valid in WAITING) */
    uint32_t *nrefs;             /* needed dependents not yet done */
    uint32_t *where;             /* worker slot (ASSIGNED / MEMORY) or GS__NO_WORKER */

    /* externals: chunks of earlier persisted graphs */
    uint32_t nexternals;
    gs__graph_t **ext_graph;     /* [nexternals] */
    uint32_t *ext_task;          /* [nexternals] */
    uint32_t *ext_rdep_off;      /* nexternals + 1 */
    uint32_t *ext_rdeps;         /* tasks of this graph using externals[k] */
    gs_u64map_t ext_index;       /* (graph id << 32 | task) -> k */
    uint32_t nsrcs;
    gs__graph_t **srcs;          /* distinct graphs this one reads externals from */
    GS_VEC(gs__graph_t *) users; /* graphs reading our outputs */
    uint32_t nusing;             /* = users.len, kept while users exist */

    /* priorities: a depth-first post-order from the outputs (lower runs first); prio[t] for
     * needed tasks, UINT32_MAX for culled ones; order[p] is the task of priority p */
    uint32_t *prio;
    uint32_t *order;             /* [ntotal] */
    /* ready tasks by priority: roots (no inputs) apart, so that placement can prefer the others
     * and hold roots back (see the root bound in sched.h) */
    gs__rset_t ready_tasks;
    gs__rset_t ready_roots;
    uint32_t nready;             /* ready_tasks.n + ready_roots.n */
    uint32_t nroots_queued;      /* root tasks counted as assigned (GS__TF_RQUEUED) */

    /* counters */
    uint64_t ntotal;             /* needed (not culled) tasks */
    uint64_t ndone;              /* needed tasks whose result exists or existed */
    uint64_t noutputs;           /* distinct output tasks */
    uint64_t noutputs_missing;
    uint64_t run_ns_total;
    uint64_t t_accept_ns;
    uint64_t t_done_ns;
    uint64_t progress_last_ns;
    uint64_t progress_sent;      /* ndone last sent, UINT64_MAX = never */

    gs__gw_t *gw;                /* [ngw] per worker slot */
    uint32_t ngw;

    GS_VEC(gs__parked_t) parked;

    /* extra copies of MEMORY chunks (REPLICATE): task -> bit mask of worker slots (< 64) that
     * hold a copy besides where[task]; entries exist only while the chunk is in MEMORY */
    gs_u64map_t replicas;

    gs__graph_t *prev, *next;    /* all graphs, in id order */
    gs__graph_t *aprev, *anext;  /* active list: graphs with ready tasks */
    int in_active;
};

struct gs__worker {
    gs_sched_t *s;
    uint32_t slot;
    uint64_t id;
    gs__peer_t *peer;
    char *name;
    char *host;
    char *backend;
    uint8_t *ucx_addr;
    size_t ucx_len;
    char *data_addr;             /* "host:port" of its direct-gather port, "" when none */
    int32_t device;
    uint32_t nthreads;
    uint32_t pid;
    uint64_t memory_limit;
    uint64_t mem_used;           /* from the last heartbeat */
    uint64_t disk_used;          /* its disk tier then (bytes of chunks in files) */
    uint64_t disk_limit;         /* and that tier's limit (UINT64_MAX: the file system's room;
                                    0: spilling off) */
    uint64_t spilled_bytes, spilled_ns, unspilled_bytes, unspilled_ns;   /* then, since start */
    uint64_t host_used, host_limit;      /* its host tier then (device workers) */
    uint64_t host_spilled_bytes, host_spilled_ns, host_unspilled_bytes, host_unspilled_ns;
    uint64_t file_bytes[4];      /* its file reads by path then (heartbeat file_*_bytes) */
    double disk_ns_per_byte;     /* expected read-back cost of a byte it holds (place.c): the
                                    share of its chunks on disk x its measured read time/byte
                                    (paid wherever the byte is used) */
    double host_ns_per_byte;     /* the same for its host tier (a device worker's chunks in
                                    host memory): paid only when the byte is used there (a
                                    peer is served from host memory directly) */
    uint64_t mem_other;          /* mem_used then, less the root chunks counted as held then */
    gs__roots_t roots;           /* root tallies over all graphs */
    uint32_t outstanding;        /* tasks sent, not reported */
    uint32_t cap;                /* queue bound */
    uint32_t refill;             /* least-loaded placement waits until this much room (batching) */
    uint64_t fill_tick;          /* tick in which the worker is being filled up to cap */
    double ns_per_task;          /* EWMA of reported kernel time per task */
    int touched;                 /* has a pending TASK_ASSIGN batch */
    int suspect;                 /* a task of it timed out and it has not reported since */
    uint64_t addr_key;           /* its connection's address key (churn cap), 0 = none */
    uint64_t t_register_ns;

    /* TASK_ASSIGN batch under construction (one graph at a time), reused */
    GS_VEC(uint64_t) b_task_id;
    GS_VEC(uint32_t) b_task_layer;
    GS_VEC(uint64_t) b_task_block;
    GS_VEC(uint64_t) b_dep_off;
    GS_VEC(uint64_t) b_dep_keys;
    GS_VEC(uint64_t) b_dep_worker;
    GS_VEC(uint64_t) b_dep_nbytes;
    GS_VEC(uint32_t) b_layer_ids;
    GS_VEC(gs_bytes_t) b_layers;
    GS_VEC(uint64_t) release_keys;  /* pending RELEASE (graph, task) pairs */
};

/* A client's gather of one key waiting for a free relay (the client's window is full). */
typedef struct gs__relay_wait {
    uint64_t client_req;
    uint64_t graph;
    uint32_t task;
} gs__relay_wait_t;

struct gs__peer {
    gs_sched_t *s;
    gs_conn_t *conn;             /* NULL once the connection is gone */
    uint64_t id;
    int state;                   /* GS__PEER_* */
    uint64_t t_connect_ns;
    uint64_t last_seen_ns;
    uint64_t addr_key;           /* peer address key (conns_by_addr); 0 = not counted */
    int evicted;                 /* closed to make room: no longer counted against the limits */
    gs__worker_t *worker;        /* registered worker, or NULL */
    gs_hs_sched_t hs;            /* the handshake (HANDSHAKE: CHALLENGE sent once hs.challenged) */
    char name[64];
    gs__peer_t *prev, *next;
    gs__peer_t *hs_prev, *hs_next; /* in s->hs_head's list while HANDSHAKE (in_hs) */
    int in_hs;
    /* gather relays of a client: at most GS__RELAY_WINDOW keys (GS__RELAY_WINDOW_BYTES) requested
     * from workers and not yet written to the client; the rest wait here in order */
    uint32_t relays_out;
    uint64_t relay_bytes_out;
    size_t relay_wait_head;
    GS_VEC(gs__relay_wait_t) relay_wait;
};

/* A gather relayed to a worker (one key). */
typedef struct gs__relay {
    uint64_t sreq;               /* our req id (0 = free) */
    uint64_t client_id;
    uint64_t client_req;
    uint64_t graph;
    uint32_t task;
    uint32_t slot;
    uint64_t nbytes;             /* the chunk's size as gsched knows it (relay window) */
} gs__relay_t;

/* A client's REPLICATE being carried out by worker slot `slot`. */
typedef struct gs__repl {
    uint64_t sreq;               /* our req id sent to the worker (0 = free entry) */
    uint64_t client_id;
    uint64_t client_req;
    uint32_t slot;
    uint64_t nasked;             /* chunks the worker was asked to copy */
    uint64_t nalready;           /* chunks that were on the target already */
} gs__repl_t;

/* One input of a task as placement sees it (gs__choose scratch). */
typedef struct gs__input {
    uint32_t slot;               /* primary holder */
    uint64_t mask;               /* replica holders (slots < 64) */
    uint64_t nbytes;
} gs__input_t;

/* Kinds of worker pairs for the bandwidth priors (sched.h). */
enum { GS__BW_CPU_LOCAL = 0, GS__BW_CPU_REMOTE, GS__BW_GPU_LOCAL, GS__BW_GPU_REMOTE, GS__BW_NKINDS };

/* Deferred retry of a task whose input fetch failed. */
typedef struct gs__retry {
    uint64_t graph;
    uint32_t task;
    uint64_t at_ns;
} gs__retry_t;

struct gs_sched {
    uv_loop_t *loop;
    char *host;
    int port;
    int bound_port;
    char *token;
    size_t token_len;
    gs_tls_ctx_t *tls;             /* NULL: plain TCP (GS_SCHED_FIELD_TLS) */
    uint8_t data_key[GS_AUTH_KEY_BYTES];   /* the data-plane key, drawn at start (common/auth.h) */
    uint32_t heartbeat_ms;
    uint32_t heartbeat_timeout_ms;
    uint32_t allowed_failures;
    uint32_t max_frame;
    uint32_t handshake_timeout_ms;
    uint32_t max_ucx_address;    /* registration caps (gs_sched_params_t) */
    uint32_t max_register_string;
    uint32_t max_conns;              /* effective (lowered to the fd limit) */
    uint32_t max_conns_per_addr;
    uint32_t client_idle_timeout_ms; /* 0 = never */
    uint32_t client_max_frame;
    uint32_t worker_max_frame;
    uint32_t task_timeout_ms;        /* 0 = off */
    uint64_t timeout_scan_ns;        /* next scan for timed-out tasks */
    uint32_t nsuspect;               /* live workers with suspect set */
    uint32_t churn_max;              /* 0 = no cap */
    uint32_t churn_window_ms;
    gs_u64map_t churn;               /* address key -> window start (ms, 32 bits) << 32 | workers
                                        from there gone within the window after a short life */
    gs_conn_budget_t frame_budget;   /* shared by every connection */
    gs_u64map_t conns_by_addr;       /* address key -> open connections from it */

    uv_tcp_t server;
    gs_conn_refuser_t refuser;       /* refuses connections on_connection cannot take (memory) */
    uv_timer_t timer;
    uint64_t timer_last_ns;          /* when housekeeping last ran (stall detection) */
    uint64_t heap_checked_ns;        /* when housekeeping last looked at the heap (gs__sched_heap) */
    struct {                         /* freed graph-table blocks kept for reuse (keep.h) */
        void *p;
        size_t size;
        uint64_t t_ns;               /* when it was kept */
    } keep[64];
    int nkeep;
    size_t keep_bytes;
    uint64_t polled_ns;              /* when the loop last finished reading its sockets */
    uint64_t tick_ns;                /* when the current placement pass (gs__sched_tick) began:
                                        the assignment time of the tasks it assigns */
    uv_check_t check;
    uv_prepare_t accept_prep;        /* accepts a deferred connection before the next poll */
    int listening;
    int listen_called;
    int stopping;
    int nhandles;                /* our uv handles not yet closed */

    uint64_t next_peer_id;
    uint64_t next_graph_id;
    uint64_t next_sreq;

    gs__peer_t *peers;           /* all connections */
    gs__peer_t *hs_head, *hs_tail; /* connections in HANDSHAKE, oldest first (eviction) */
    uint32_t accepts_round;      /* connections accepted in this loop iteration */
    int accept_deferred;         /* a connection waits in the server for the next iteration */
    uint32_t nconns;
    uint32_t nevicted;           /* of nconns: evicted, descriptor closed, not yet freed */
    uint32_t nclients;
    gs_u64map_t clients;         /* client id -> gs__peer_t* */

    gs__worker_t **slots;        /* [nslots]; NULL = free */
    uint32_t nslots;
    uint32_t nworkers;
    gs__worker_t **live;         /* dense list of live workers [nworkers] */
    uint64_t *bytes_by_slot;     /* placement scratch [nslots] */
    GS_VEC(uint32_t) touched_slots;  /* workers with a TASK_ASSIGN batch under construction */
    GS_VEC(uint32_t) scratch_slots;  /* placement scratch */
    GS_VEC(uint32_t) scratch_defer;  /* ready priorities set aside in one placement pass */

    gs_u64map_t graphs;          /* graph id -> gs__graph_t* */
    gs__graph_t *ghead, *gtail;

    /* transfer model (placement): estimated bytes/ns from slot i to slot j at bw[i * nslots + j]
     * (the prior of the pair's kind until measured), bw_measured[i * nslots + j] once a
     * BANDWIDTH report set it; reset when a worker takes the slot */
    double *bw;
    uint8_t *bw_measured;
    double bw_prior[GS__BW_NKINDS];  /* bytes/ns */
    double xfer_latency_ns;          /* fixed cost per input moved */
    GS_VEC(gs__input_t) scratch_in;
    GS_VEC(gs__repl_t) repls;
    uint64_t nreplica_graphs;        /* graphs with replicas (fast path when 0) */
    gs__graph_t *active;         /* circular-ish list head of graphs with ready tasks */
    uint64_t ngraphs;
    uint64_t ngraphs_active;

    GS_VEC(gs__relay_t) relays;
    GS_VEC(uint32_t) relay_free;
    gs_u64map_t relay_index;     /* sreq -> index into relays */

    GS_VEC(gs__retry_t) retries;

    /* scratch */
    GS_VEC(uint64_t) stack;      /* (graph ptr, task) pairs for lineage walks */
    GS_VEC(gs_peer_info_t) peer_infos;
    GS_VEC(gs_str_t) names;

    int warned_no_workers;
    gs__dash_t *dash;                /* the dashboard (scheduler/dash/dash.h), NULL = none */
    uint64_t tick;               /* placement passes so far */
    gs_sched_stats_t st;
};

/* Graph pointers stored as map values and on the lineage stack. */

static inline gs__graph_t *gs__ptr_graph(uint64_t v)
{
    return (gs__graph_t *)(uintptr_t)v;
}

static inline gs__graph_t *gs__graph_find(gs_sched_t *s, uint64_t id)
{
    uint64_t v;
    if (id == 0 || id >= GS_U64MAP_TOMB) return NULL;
    if (!gs_u64map_get(&s->graphs, id, &v)) return NULL;
    return gs__ptr_graph(v);
}

/* Key of chunk (graph, task) in a graph's external index. */
static inline uint64_t gs__ext_key(uint64_t graph, uint32_t task)
{
    return (graph << 32) | task;
}

/* Id of the worker in @a slot, 0 when the slot is free. */
static inline uint64_t gs__slot_id(const gs_sched_t *s, uint32_t slot)
{
    if (slot < s->nslots && s->slots[slot] != NULL) return s->slots[slot]->id;
    return 0;
}

#endif
