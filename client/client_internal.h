/* Internal pieces of the client library shared between its source files (not installed).
 *
 * The gsched client: one control connection to the scheduler, driven by a libuv loop in the
 * client's own I/O thread.
 *
 * Threads. API calls run on the caller's thread: they lower and encode graphs there (so several
 * threads may submit at once) and hand work to the I/O thread as ops on a mutex-protected queue
 * (uv_async_send wakes the loop). Blocking calls wait on the client's condition variable. The
 * I/O thread owns the connection and the maps from client refs, graph ids and request ids to
 * futures and ops; state shared with callers (future and op completion) is guarded by c->mu.
 *
 * Lifetimes. A client is reference counted: the user's handle is one reference and every live
 * future another, so futures may outlive gs_client_destroy(). A future is reference counted
 * too: the user's reference (dropped by gs_future_destroy) and the I/O thread's while the graph
 * is in flight. Every decision about what to tell the scheduler when a future goes away is made
 * on the I/O thread, so it never races with GRAPH_ACCEPTED / GRAPH_DONE.
 *
 * Failure. When the connection drops, every unfinished future and every pending request fails
 * with GS_ERR_SCHEDULER_LOST, and later calls fail the same way at once: nothing ever waits for
 * an answer that cannot come.
 *
 * Files, in layers: each calls only functions (internal or public) of the files above it.
 *   core.c     references, ops and their queue, waiting, completing futures and ops
 *   local.c    the "local" address: a private gs-local-cluster process
 *   submit.c   lowering and submitting a graph; futures (wait, cancel, destroy, stats)
 *   gather.c   gathering a result: the requests (I/O thread), placing chunks as they come,
 *              gs_future_gather, gs_client_compute, gather paths
 *   gather_direct.c  direct gathers: locating the chunks (I/O thread), fetching them from the
 *              workers' data ports or shared memory (caller's thread and its helpers)
 *   io.c       the I/O thread: start and stop, ops from callers, the handshake, messages from
 *              the scheduler
 *   client.c   gs_client_connect (checking its params) and gs_client_destroy
 *   cluster.c  cluster info and the worker list; persisted arrays (persist, replicate,
 *              unpersist)
 *   compute_many.c  gs_client_compute_many: several results from one graph, gathered or
 *              persisted
 */
#ifndef GS_CLIENT_INTERNAL_H
#define GS_CLIENT_INTERNAL_H

#include <gsched/client.h>
#include <gsched/status.h>

#include "common/hashmap.h"
#include "graph/taskgraph.h"
#include "proto/conn.h"
#include "proto/handshake.h"
#include "proto/msg.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GS__DEFAULT_TIMEOUT_S 10.0
#define GS__LOCAL_TIMEOUT_S 120.0
#define GS__SELF_GRAPH UINT64_MAX   /* placeholder in a future's output keys: "this graph" */
#define GS__MSG_LEN 512
#define GS__DIRECT_MIN_BYTES ((uint64_t)4 << 20)   /* GS_GATHER_AUTO: smaller results are relayed */

/** A local cluster started by the client ("local" address): the gs-local-cluster process. */
typedef struct gs__local {
    pid_t pid;          /* launcher process, 0 when none */
    int stdin_fd;       /* write end of the launcher's stdin: closing it stops the launcher */
    char address[256];  /* "tcp://host:port" printed by the launcher when ready */
} gs__local_t;

typedef enum gs__state {
    GS__CONNECTING = 0,
    GS__READY,
    GS__FAILED,    /* connect/handshake failed */
    GS__LOST,      /* connection dropped after the handshake */
    GS__CLOSED     /* gs_client_destroy ran */
} gs__state_t;

typedef enum gs__op_kind {
    GS__OP_SUBMIT = 0,
    GS__OP_INFO,
    GS__OP_GATHER,
    GS__OP_CANCEL,
    GS__OP_FUTURE_DROP,
    GS__OP_RELEASE_GRAPH,
    GS__OP_CLOSE,
    GS__OP_WORKERS,             /* WORKERS_REQ; answered in order with INFO (info list) */
    GS__OP_REPLICATE,           /* REPLICATE; answered by req_id (gathers map) */
    GS__OP_REPORT,              /* REPORT_REQ; answered by req_id (gathers map) with REPORT */
    GS__OP_LOCATE               /* LOCATE_REQ; answered by req_id (gathers map) with LOCATIONS */
} gs__op_kind_t;

/* Where one output chunk is, for a direct gather (LOCATIONS). */
typedef struct gs__loc {
    uint64_t nbytes;
    uint8_t ticket[32];         /* gsched's ticket (common/auth.h), presented to the worker */
    char addr[80];              /* the worker's data port "ip:port"; "" : gather through gsched */
    char host[64];              /* the worker's host name (same host: shared memory possible) */
} gs__loc_t;

/* One output block of a gather: which key it comes from. Sorted by (graph, task). */
typedef struct gs__gkey {
    uint64_t graph;
    uint64_t task;
    uint64_t block;
    uint64_t uniq;    /* index of the distinct key */
} gs__gkey_t;

typedef struct gs__op gs__op_t;

struct gs_future {
    gs_client_h client;
    int refs;                   /* c->mu */
    unsigned flags;             /* GS_SUBMIT_* */
    uint64_t client_ref;
    /* I/O thread only */
    int accepted;
    int user_dropped;           /* gs_future_destroy ran before GRAPH_ACCEPTED */
    int cancel_requested;
    uint64_t progress_reported; /* last `done` given to progress_cb */
    /* c->mu */
    uint64_t graph_id;
    int done;
    gs_status_t status;
    char message[GS__MSG_LEN];
    int persist_marked;         /* KEEP: array marked persisted (API threads, c->mu) */
    /* fixed at submit */
    gs_array_h keep_array;      /* GS_SUBMIT_KEEP: retained until the future is freed */
    gs_grid_t grid;
    int32_t dtype;              /* gs_dtype_t of the result's elements */
    uint64_t noutputs;
    uint64_t *out_keys;         /* 2 * noutputs: (graph or GS__SELF_GRAPH, task) */
    uint64_t ntasks;
    double t_submit;            /* gs_now_s() at submit start */
    double submit_s;
    /* set at GRAPH_DONE (c->mu) */
    double t_done;
    uint64_t run_ns_total;
    uint64_t sched_wall_ns;
};

struct gs__op {
    gs__op_t *next;
    gs__op_kind_t kind;
    gs_future_h fut;            /* SUBMIT, GATHER, CANCEL, FUTURE_DROP (holds a reference) */
    uint64_t graph_id;          /* RELEASE_GRAPH */
    gs_buf_t frame;             /* SUBMIT: encoded GRAPH_SUBMIT */
    /* completion of waited-for ops (INFO, GATHER), c->mu */
    int done;
    int abandoned;              /* the waiter gave up: the I/O thread frees the op */
    gs_status_t status;
    char message[GS__MSG_LEN];
    /* INFO */
    uint32_t nworkers;
    gs__op_t *info_next;
    /* WORKERS: the answer (gs_malloc'd, nwinfo entries) */
    gs_client_worker_info_t *winfo;
    size_t nwinfo;
    /* REPORT: the graph, and the answer (gs_malloc'd, report_len bytes) */
    uint8_t *report_html;
    size_t report_len;
    /* REPLICATE: graph whose outputs are copied, target worker name; REPORT: the graph */
    uint64_t repl_graph;
    char repl_target[256];
    /* GATHER */
    double *out;                /* elements of out_es bytes (the result's dtype) */
    size_t out_es;
    int64_t out_stride[GS_MAX_NDIM];
    uint64_t req_id;
    uint64_t nkeys;             /* blocks */
    gs__gkey_t *keys;           /* nkeys, sorted */
    uint64_t nuniq;
    uint8_t *got;               /* nuniq flags */
    uint64_t nremaining;
    /* LOCATE: the keys asked for (2 * nloc) and the answer (nloc entries); both gs_malloc'd
     * and freed with the op */
    uint64_t *loc_keys;
    uint64_t nloc;
    gs__loc_t *loc;
};

typedef struct gs__persisted {
    struct gs__persisted *next;
    gs_array_h array;           /* retained */
    uint64_t graph_id;
} gs__persisted_t;

struct gs_client {
    uv_mutex_t mu;
    uv_cond_t cond;
    int refs;                   /* mu: user handle + live futures */
    gs__state_t state;          /* mu */
    gs_status_t fail_status;    /* mu: why FAILED / LOST */
    char fail_message[GS__MSG_LEN];
    gs__op_t *q_head, *q_tail;  /* mu: ops for the I/O thread */
    gs__persisted_t *persisted; /* mu */
    uint64_t next_client_ref;   /* mu */

    /* configuration */
    char *token;
    gs_tls_ctx_t *tls;          /* NULL: plain TCP (GS_CLIENT_FIELD_TLS) */
    char hs_name[32];           /* the name HELLO gives ("client-PID") */
    gs_hs_peer_t hs;            /* I/O thread: the handshake (CONNECTING) */
    int hs_retry;               /* mu: this attempt failed in a way worth another (busy) */
    char address[288];
    unsigned lower_flags;
    gs_progress_cb progress_cb;
    void *progress_arg;
    int pbar;                   /* draw the terminal progress bar (progress.c) */
    uint64_t pbar_graph;        /* I/O thread: graph the bar last showed */
    double pbar_last_s;         /* I/O thread: when it was last drawn */
    gs__local_t local;

    /* I/O thread */
    uv_loop_t loop;
    uv_async_t async;
    uv_timer_t hb_timer;        /* HEARTBEAT every interval WELCOME names, while READY */
    uint64_t hb_seq;
    uv_thread_t thread;
    int thread_started;
    int stopping;               /* mu: no more ops may be posted (shutdown began) */
    gs_conn_t *conn;
    uint64_t client_id;
    gs_u64map_t pending;        /* client_ref -> future awaiting GRAPH_ACCEPTED */
    gs_u64map_t graphs;         /* graph id -> future in flight */
    gs_u64map_t gathers;        /* req_id -> gather op */
    gs__op_t *info_head, *info_tail;
    uint64_t next_req_id;
    int closing;

    /* gathers: the path (GS_GATHER_*, mu) and what each path carried (mu) */
    int gather_path;
    gs_gather_stats_t gstats;
    /* direct gathers' fetching threads' state (gather_direct.c), kept between gathers so their
     * worker connections and shared-memory slots (page-locked by GPU workers) are reused (mu) */
    struct gs__dthread *dpool;
    int dpool_busy;             /* a gather uses it */
    int dpool_closed;           /* gs_client_destroy ran: the last user frees it */
    /* lowering hints (submit.c): the CPU workers' kernel threads summed, and when they were
     * last asked of gsched (mu; 0: never) */
    uint32_t hint_cpu_threads;
    double hint_at_s;
    /* mu: the storage of the last GRAPH_SUBMIT frame once sent (io.c), taken by the next
     * submit so a large graph's frame is not faulted in afresh (at most GS__SPARE_FRAME_MAX) */
    gs_buf_t spare_frame;
};

#define GS__SPARE_FRAME_MAX ((size_t)256 << 20)

/* ------------------------------------------------------------------------------------------ */
/* core.c */

/** Drop one reference of @a c (c->mu held); *free_p tells the caller to gs__client_free it
 *  after unlocking. */
void gs__client_unref_locked(gs_client_h c, int *free_p);

/** Free the client: its persisted list, mutex, condition and token. */
void gs__client_free(gs_client_h c);

/** Clear and release every entry of a persisted list (arrays forget their chunks). */
void gs__persisted_free_all(gs__persisted_t *p);

/** Free a future's memory (no reference counting). */
void gs__future_free(gs_future_h f);

/** Drop one reference of @a f (c->mu NOT held). Frees the future, and the client when that was
 *  the client's last reference. */
void gs__future_unref(gs_future_h f);

gs__op_t *gs__op_new(gs__op_kind_t kind);
void gs__op_free(gs__op_t *op);

/** Status a call gets when the client is not usable (c->mu held); sets the error message. */
gs_status_t gs__client_unusable_locked(gs_client_h c);

/** Append @a op to the I/O thread's queue and wake the loop (c->mu held, no checks). */
void gs__queue_push_locked(gs_client_h c, gs__op_t *op);

/** Take every queued op, oldest first (a list through op->next; c->mu NOT held). */
gs__op_t *gs__queue_take(gs_client_h c);

/** Queue @a op for the I/O thread. On error the op is not queued (caller still owns it). */
gs_status_t gs__post(gs_client_h c, gs__op_t *op);

/** Wait on c->cond until *flag or the deadline (deadline < 0: forever). c->mu held.
 *  Returns 1 when *flag became true. */
int gs__wait_flag_locked(gs_client_h c, const int *flag, double deadline);

/** gs_now_s() + @a timeout_s, or -1 (forever) for a negative timeout. */
double gs__deadline(double timeout_s);

/** Post a waited-for op (INFO, WORKERS, GATHER, REPLICATE) and wait for its answer until
 *  @a deadline. GS_OK: the op is answered and the caller reads and frees it. Otherwise the op is
 *  no longer the caller's (freed, or abandoned to the I/O thread on timeout, when the error
 *  message is @a timeout_msg) and the error message is set. */
gs_status_t gs__op_call(gs_client_h c, gs__op_t *op, double deadline, const char *timeout_msg);

/** Complete future @a f (c->mu held); a NULL or empty @a msg stands for the status's string. */
void gs__future_complete_locked(gs_future_h f, gs_status_t status, const char *msg,
                                size_t msg_len);

/** Complete @a f, wake the waiters and drop one reference (c->mu NOT held). */
void gs__future_finish(gs_client_h c, gs_future_h f, gs_status_t status, const char *msg,
                       size_t msg_len);

/** Complete a waited-for op, wake the waiters, and free it when its waiter gave up (c->mu NOT
 *  held). */
void gs__op_finish(gs_client_h c, gs__op_t *op, gs_status_t status, const char *msg);

/* ------------------------------------------------------------------------------------------ */
/* local.c */

/** Find an executable @a name: @a bin_dir (may be NULL), $GS_BIN_DIR, the directory of the
 *  running executable, then $PATH. Writes the full path to @a path (@a path_len bytes) and the
 *  directory it was found in to @a dir (or "" when found through $PATH).
 *  GS_ERR_NOT_FOUND with a message listing where it looked. */
gs_status_t gs__find_executable(const char *name, const char *bin_dir, char *path,
                                size_t path_len, char *dir, size_t dir_len);

/** Start `gs-local-cluster --host 127.0.0.1 --port 0 --watch-stdin ...` and wait (up to
 *  @a timeout_s) until it prints its ready line. @a dashboard: gsched's --dashboard-address, or
 *  NULL for its default. On success *l is filled; on error nothing is left running. */
gs_status_t gs__local_start(const char *bin_dir, int nworkers, const char *backend,
                            uint64_t memory_limit, uint64_t device_memory_limit,
                            const char *dashboard, const char *token, double timeout_s,
                            gs__local_t *l);

/** Stop the launcher (stdin EOF + SIGTERM, then SIGKILL after a grace period) and reap it. */
void gs__local_stop(gs__local_t *l);

/* ------------------------------------------------------------------------------------------ */
/* gather.c (the I/O thread's half) */

/** Send a GATHER op's requests, one GATHER_REQ per distinct graph (I/O thread, client usable).
 *  On error the op is completed with it. */
void gs__gather_send(gs_client_h c, gs__op_t *op);

/** A DATA message: place the chunk in its gather's buffer; the gather completes with its last
 *  chunk or its first error (I/O thread). */
void gs__gather_on_data(gs_client_h c, const gs_msg_data_t *d);

/* ------------------------------------------------------------------------------------------ */
/* gather_direct.c */

/** Send a LOCATE op's LOCATE_REQ (I/O thread, client usable); on error the op completes with it. */
void gs__locate_send(gs_client_h c, gs__op_t *op);

/** LOCATIONS: fill and complete its LOCATE op (I/O thread). */
void gs__locate_on_answer(gs_client_h c, const gs_msg_locations_t *m);

/** Caller's thread: fetch the chunks of gather @a op (keys sorted, got[] clear) straight from the
 *  workers holding them, by path @a path (GS_GATHER_AUTO, _DIRECT or _SHM), into op->out; marks
 *  each chunk placed in op->got and lowers op->nremaining. Chunks it cannot fetch (no address,
 *  connection or worker failure, a bad answer) stay for the relay through gsched. */
void gs__gather_direct(gs_client_h c, gs__op_t *op, int path);

/** gs_client_destroy: free the direct gathers' kept connections and shared memory (now, or by the
 *  gather using them when it ends). */
void gs__gather_direct_close(gs_client_h c);

/** One DATA answer read from a data-port socket @a fd straight into the blocks of @a op's key
 *  range [k0, k1) (the same chunk placed at each): GS_OK, or an error naming what was wrong
 *  (a wrong size or key, truncation, the worker's status). @a shm: where the worker wrote the
 *  bytes when the request named shared memory (NULL: they follow in the frame). Exposed for
 *  tests (hostile answers over a socketpair). */
gs_status_t gs__direct_read_answer(int fd, gs__op_t *op, uint64_t k0, uint64_t k1, uint64_t req_id,
                                   uint64_t nbytes, const uint8_t *shm);

/* ------------------------------------------------------------------------------------------ */
/* io.c */

/** Lower @a arrays (n >= 1; @a res_p NULL: gs_graph_lower of arrays[0], else
 *  gs_graph_lower_many) with @a flags and, when the plan holds a fused user kernel, the
 *  cluster's CPU threads as gs_lower_hints_t (asked of gsched, cached a second). Errors and
 *  outputs as those functions. */
gs_status_t gs__client_lower(gs_client_h c, size_t n, const gs_array_h *arrays, unsigned flags,
                             gs_taskgraph_t **tg_p, gs_lower_result_t **res_p);
/** gs_client_submit with the lowering flags @a lower_flags instead of the client's (the TSQR
 *  fallback of gs_client_compute). Same ownership and errors. */
gs_status_t gs__client_submit_lower(gs_client_h c, gs_array_h array, unsigned flags,
                                    unsigned lower_flags, gs_future_h *future_p);

/** GS_OK when @a c is connected and ready, else the reason it is not (as later calls fail). */
gs_status_t gs__client_usable(gs_client_h c);

/** Submit the lowered graph @a tg (ownership moves in, freed on every path) with @a flags
 *  (GS_SUBMIT_KEEP: the scheduler keeps the outputs). @a keep_array (borrowed, NULL for none)
 *  is the array whose persisted chunks the future records when it finishes well; @a t0 is when
 *  the submission began (gs_now_s()). *future_p as gs_client_submit. */
gs_status_t gs__client_submit_graph(gs_client_h c, gs_taskgraph_t *tg, unsigned flags,
                                    gs_array_h keep_array, double t0, gs_future_h *future_p);

/** Gather outputs [@a off, @a off + @a n) of the finished future @a f, the blocks (row-major)
 *  of a result of grid @a grid (borrowed) and dtype @a dtype, into @a out (@a out_len elements)
 *  as gs_future_gather does (gather.c; used by gs_client_compute_many). */
gs_status_t gs__future_gather_part(gs_future_h f, const gs_grid_t *grid, int32_t dtype,
                                   uint64_t off, uint64_t n, void *out, size_t out_len);

/** Create the loop, connect to @a host:@a port, queue HELLO and start the I/O thread. On error
 *  nothing is left of the loop and the thread never ran. */
gs_status_t gs__io_start(gs_client_h c, const char *host, int port);

/** Stop the I/O thread, fail the ops still queued with GS_ERR_CANCELED and close the loop; the
 *  client is CLOSED afterwards. Does nothing when gs__io_start did not succeed. */
void gs__io_stop(gs_client_h c);

/** After gs__io_stop of a connection whose handshake failed: the client is CONNECTING again with
 *  empty maps and no handshake state, ready for another gs__io_start. */
void gs__io_reset(gs_client_h c);

#ifdef __cplusplus
}
#endif
/* progress.c: report @a done of @a total for @a f to the progress bar and the progress callback
 * (I/O thread); the bar line formatted alone (tests). */
void gs__progress_emit(gs_client_h c, gs_future_h f, uint64_t done, uint64_t total);
void gs__pbar_update(gs_client_h c, gs_future_h f, uint64_t done, uint64_t total);
void gs__pbar_format(char *line, size_t len, uint64_t done, uint64_t total, double elapsed_s);

#endif
