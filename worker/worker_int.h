/* Internals of gworker shared by worker.c (lifecycle, control plane), store.c (graphs, chunks),
 * exec.c (tasks, memory admission, execution, completion), replicate.c and worker/xfer/ (peer
 * transfers, behind worker/xfer/xfer.h). No UCX type appears here.
 * Everything here runs on the loop thread unless marked "any thread". */
#ifndef GS_WORKER_INT_H
#define GS_WORKER_INT_H

#include "chunkops/chunkops.h"
#include "common/hashmap.h"
#include "common/idtab.h"
#include "common/log.h"
#include "common/mpool.h"
#include "common/vec.h"
#include "graph/taskgraph.h"
#include "proto/conn.h"
#include "proto/handshake.h"
#include "worker/spill/spill.h"
#include "worker/worker.h"

#include <stdatomic.h>

#define GS_W_INLINE_DEPS 4
#define GS_W_JOB_SMALL ((uintptr_t)1)  /* job ring entry: the task is small */
#define GS_W_CHUNK_SLAB 1024       /* chunk headers per slab of the chunk pool */
#define GS_W_DONE_FLUSH 4096       /* flush TASK_DONE early past this many entries */
/* While the loop has more to do at once (it will not block), completions wait for more to join
 * their TASK_DONE, up to this many entries or this long since the oldest: one small message per
 * loop turn made a send system call per task or two under tiny tasks. Before the loop blocks
 * everything queued goes out (gs__worker_prepare_cb). */
#define GS_W_DONE_BATCH 256
#define GS_W_DONE_DELAY_NS 50000ull
#define GS_W_ERRLEN 512
#define GS_W_PUMP_BATCH 64         /* tasks admitted between dispatches in one pump (pool mode) */
#define GS_W_SKIP_AHEAD 65536      /* queued tasks tried past a head blocked on memory */
/* Spilling to admit a task waits while admitted tasks with inputs may free memory: their
 * completion lets gsched release the inputs (a round trip later). It stops waiting
 * GS_W_RELEASE_GRACE_NS after the last such completion, after GS_W_DEFER_MAX_NS in all, and
 * for the rest of the graph once GS_W_DEFER_MISSES waits in a row ended in a spill anyway. */
#define GS_W_RELEASE_GRACE_NS (3ull * 1000000ull)
#define GS_W_DEFER_MAX_NS (250ull * 1000000ull)
#define GS_W_DEFER_MISSES 4
/* Fetches of a task's inputs repeated after they arrived altered (a link that flips bits, a
 * peer that sends garbage once) before the task fails with the MAC or checksum error. */
#define GS_W_MAX_REFETCHES 2
#define GS_W_SMALL_TASK_BYTES 65536   /* a task reading and writing less is "small" */
#define GS_W_THREAD_BATCH 32       /* small tasks a kernel thread takes (and returns) at once */
#define GS_W_THREAD_BATCH_MAX 256  /* ... or its share of a deep queue, up to this many */
#define GS_W_THREAD_REPORT_NS 100000ull /* a thread hands back what it finished at least
                                            this often (a large batch's first results) */
#define GS_W_SMALL_DEPTH 256       /* small tasks dispatched per kernel thread / stream */
#define GS_W_PRODUCER_QUARTERS 3   /* tasks without inputs fill at most 3/4 of the memory */
#define GS_W_RESERVE_IDLE_NS 100000000ull  /* blocked and idle this long: lift the reserve */
#define GS_W_IDLE_GRAPHS 256       /* idle graphs whose layers stay cached */
#define GS_W_IDLE_LAYER_BYTES (64ull << 20)

typedef struct gs_wgraph gs_wgraph_t;
typedef struct gs_wchunk gs_wchunk_t;
typedef struct gs_wtask gs_wtask_t;
typedef struct gs_worker gs_worker_t;

/* Intrusive doubly-linked list. */
typedef struct gs_wlink {
    struct gs_wlink *prev, *next;
} gs_wlink_t;

static inline void gs__wlist_init(gs_wlink_t *h) { h->prev = h->next = h; }
static inline int gs__wlist_empty(const gs_wlink_t *h) { return h->next == h; }
static inline void gs__wlist_push(gs_wlink_t *h, gs_wlink_t *e)
{
    e->prev = h->prev;
    e->next = h;
    h->prev->next = e;
    h->prev = e;
}
static inline void gs__wlist_del(gs_wlink_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = e;
}
#define GS_WCONTAINER(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* A graph as seen by this worker: its decoded layers, its chunks and its live tasks. */
struct gs_wgraph {
    uint64_t id;
    gs_u64map_t layers;       /* layer id -> gs_layer_t * */
    gs_idtab_t chunks;        /* task id -> gs_wchunk_t * (owned keys and fetched copies);
                                 task ids of a graph are dense: paged arrays (common/idtab.h) */
    gs_idtab_t tasks;         /* task id -> gs_wtask_t * (queued .. running) */
    uint64_t nchunks_alive;   /* chunk structs pointing here (in the map or detached) */
    uint64_t nowned;          /* owned keys in the map (+ temporary pins) */
    uint64_t layer_bytes;     /* encoded size of the cached layers */
    gs_wlink_t idle_link;     /* w->idle_graphs while idle (layers only) */
    int idle;
};

typedef enum gs_wchunk_state {
    GS_WCHUNK_READY = 0,      /* data valid */
    GS_WCHUNK_PENDING = 1,    /* being fetched / staged / computed */
    GS_WCHUNK_FAILED = 2
} gs_wchunk_state_t;

/* A chunk of backend memory. refs: the store holds one for an owned key in the map; each task
 * using it as input holds one; each transfer reading it holds one. */
struct gs_wchunk {
    gs_wgraph_t *graph;
    uint64_t task;
    void *ptr;
    uint64_t nbytes;
    uint32_t refs;
    uint8_t state;            /* gs_wchunk_state_t */
    uint8_t owned;            /* a key gsched knows this worker holds */
    uint8_t in_map;
    GS_VEC(gs_wtask_t *) waiters;   /* tasks waiting for PENDING -> READY, or for the chunk
                                       to come back from disk */
    gs_wspill_chunk_t sp;     /* tier (worker/spill/spill.h): on disk, ptr is NULL */
};

/* The chunk's bytes are at its ptr (not only on disk). */
static inline int gs__wchunk_resident(const gs_wchunk_t *c) { return c->sp.tier == GS_WTIER_MEM; }
/* A task using @a c must wait for it (computed or fetched, or read back from disk). */
static inline int gs__wchunk_waiting(const gs_wchunk_t *c)
{
    return c->state == GS_WCHUNK_PENDING || c->sp.tier != GS_WTIER_MEM;
}

typedef struct gs_wdep {
    uint64_t graph, task, worker, nbytes;
    gs_wchunk_t *chunk;       /* held ref once admitted */
} gs_wdep_t;

typedef enum gs_wtask_state {
    GS_WTASK_QUEUED = 0,      /* waiting for admission (memory) */
    GS_WTASK_FETCHING = 1,    /* admitted, inputs not all ready */
    GS_WTASK_READY = 2,       /* inputs ready, waiting for an execution slot */
    GS_WTASK_RUNNING = 3,
    GS_WTASK_DONE = 4
} gs_wtask_state_t;

struct gs_wtask {
    gs_wlink_t link;          /* admission queue / ready queue */
    gs_wtask_t *job_next;     /* pool job queue / completion queue (under lock) */
    gs_wgraph_t *graph;
    const gs_layer_t *layer;
    uint64_t id, block;
    uint32_t layer_id;
    uint32_t ndeps;
    uint32_t nwait;           /* inputs not READY yet */
    uint8_t state;
    uint8_t canceled;
    uint8_t small;            /* inputs and output under GS_W_SMALL_TASK_BYTES */
    uint8_t refetches;        /* admissions again after an input arrived altered */
    int stream;               /* streams mode: index; -1 otherwise */
    gs_wdep_t *deps;
    gs_wdep_t deps_inline[GS_W_INLINE_DEPS];
    gs_wchunk_t *out;
    uint64_t out_nbytes;
    uint64_t t_admit, t_ready, t_launch;
    uint64_t run_ns, fetch_ns;
    gs_status_t status;       /* set on completion (any thread before queueing) */
    char *err;                /* failure message (gs_malloc'd), NULL on success */
};

/* A completion record from a backend notify() (streams mode) or a finished staging copy. */
typedef enum gs_wnote_kind {
    GS_WNOTE_TASK = 0,
    GS_WNOTE_FETCH_STAGED = 1,
    GS_WNOTE_SEND_STAGED = 2,
    GS_WNOTE_LAUNCH = 3,      /* a task run by the launcher thread (launch.c, gs_wlaunch_job_t) */
    GS_WNOTE_TIER = 4         /* a host-tier copy finished (worker/spill/host.c) */
} gs_wnote_kind_t;

typedef struct gs_wnote {
    struct gs_wnote *next;
    gs_worker_t *w;
    int kind;
    gs_status_t status;
    uint64_t t_done;
    void *obj;
    gs_chunkops_stream_h stream;   /* the stream it waits for (gs__wnote_arm) */
    uint32_t retries;              /* failed registrations so far (note.c) */
} gs_wnote_t;

typedef enum gs_wstate {
    GS_WSTATE_CREATED = 0,
    GS_WSTATE_CONNECTING,
    GS_WSTATE_HELLO,          /* HELLO sent, waiting for CHALLENGE, then (AUTH sent) WELCOME */
    GS_WSTATE_RUNNING,
    GS_WSTATE_STOPPING,
    GS_WSTATE_STOPPED
} gs_wstate_t;

struct gs_worker {
    uv_loop_t *loop;
    int state;
    gs_status_t stop_reason;
    gs_worker_stop_cb stop_cb;
    void *stop_arg;
    int destroying;

    /* configuration */
    char *sched_host;
    int sched_port;
    char *name;
    char *token;
    gs_tls_ctx_t *tls;            /* NULL: plain TCP to gsched */
    char *hostname;
    int device;
    int nthreads;
    int nstreams;
    int stream_depth;
    int streams_mode;         /* 1: GS_WORKER_EXEC_STREAMS */
    uint64_t memory_limit_req;
    uint32_t connect_timeout_ms, fetch_timeout_ms, memory_wait_ms, heartbeat_req_ms;

    /* control plane */
    gs_conn_t *conn;
    gs_hs_peer_t hs;          /* the registration handshake (HELLO state) */
    uint64_t id;
    uint64_t heartbeat_ms;
    uint64_t hb_seq;
    uint64_t connect_deadline;
    uv_timer_t hb_timer;      /* heartbeats */
    uv_timer_t retry_timer;   /* connection retries; memory watchdog; fetch timeouts */
    uv_timer_t tick_timer;    /* periodic: fetch timeouts, memory watchdog */
    uv_check_t check;         /* end of each loop iteration: flush TASK_DONE, UCX */
    uv_prepare_t prepare;     /* before blocking: progress UCX and arm it */
    uv_async_t async;         /* completions from kernel threads / CUDA callbacks */
    int nhandles_open;        /* handles not closed yet */
    int handles_init;         /* the loop handles above were initialised (create) */

    /* backend */
    const gs_chunkops_ops_t *ops;
    gs_chunkops_ctx_h ctx;
    gs_chunkops_stream_h *streams;     /* nstreams (streams mode) */
    int *stream_inflight;
    uint64_t dev_last_done;            /* last completion on any stream (for run_ns) */
    /* streams mode: tasks whose backend call blocks the calling thread (QR, SVD) are launched
     * by a launcher thread on its own stream, index nstreams in stream_inflight (launch.c) */
    struct gs_wlauncher *launcher;     /* created on the first such task */
    int launcher_off;                  /* GS_WORKER_LAUNCHER=off, or it could not start */
    /* streams mode: file reads and writes go to min(nthreads, slots) file threads, each with
     * its own stream, index nstreams in stream_inflight too (launch.c) */
    struct gs_wlauncher *freader;      /* created on the first file task */
    int freader_off;                   /* they could not start: file tasks go to the launcher */
    char *file_root;                   /* resolved params.file_root, or NULL (launch.c) */
    uint64_t mem_used;
    uint64_t mem_limit;

    /* kernel threads (pool mode) */
    uv_thread_t *threads;
    gs_chunkops_stream_h *thread_streams;
    int nthreads_started;              /* under job_lock */
    int threads_created;
    uv_mutex_t job_lock;
    uv_cond_t job_cond;
    /* the pool's job queue: a ring of task pointers, each tagged with its small flag in bit 0
     * (GS_W_JOB_SMALL) so a thread takes a batch under the lock without touching the tasks.
     * It holds at most small_slots tasks (dispatch keeps nrunning under it); job_mask + 1,
     * a power of two, is at least that. The loop writes slots [job_wr, job_wr + n) before
     * publishing job_wr under job_lock; threads read [job_rd, job_wr) under job_lock. */
    uintptr_t *job_ring;
    uint64_t job_mask;
    uint64_t job_rd, job_wr;           /* under job_lock (job_wr: written by the loop only) */
    int job_quit;                      /* under job_lock */

    /* completions (any thread -> loop) */
    uv_mutex_t done_lock;
    gs_wtask_t *done_head, *done_tail; /* pool completions, under done_lock */
    gs_wnote_t *note_head, *note_tail; /* notify completions, under done_lock */
    gs_wnote_t *park_head, *park_tail; /* notes whose registration failed, under done_lock */
    uv_timer_t note_timer;             /* retries parked registrations (note.c) */
    atomic_int test_notify_fail;       /* tests: registrations still to refuse */
    char *test_lose_device_on;         /* params.test_lose_device_on, owned */
    int dev_lost;                      /* a task reported GS_ERR_DEVICE_LOST: stopping (exec.c) */
    int leaving;                       /* dev_lost: ERROR sent, waiting for gsched to close */
    atomic_ullong nnotify_retried;     /* registrations that failed and were retried */

    /* peer transfers (xfer/xfer.h; opaque here) and replicate requests (replicate.c) */
    struct gs_xfer *xfer;
    struct gs_wrepl *repls;
    struct gs_wspill *spill;           /* memory tiers (spill/spill.h) */

    /* graphs, tasks */
    gs_u64map_t graphs;                /* graph id -> gs_wgraph_t * */
    gs_wgraph_t *graph_last;           /* the graph found last (NULL once it is freed) */
    gs_wlink_t idle_graphs;            /* graphs with layers but no task or key, oldest first */
    uint64_t nidle, idle_layer_bytes;
    gs_wlink_t admit_q;                /* QUEUED tasks, FIFO */
    gs_wlink_t ready_q;                /* READY tasks, FIFO */
    uint64_t nqueued, nadmitted, nrunning;
    uint64_t max_admitted;
    uint64_t max_admitted_small;       /* admission limit while the queue head is small */
    int slots;                         /* max running */
    int small_slots;                   /* max running while the ready head is small */
    uint64_t nadmitted_consumers;      /* admitted tasks with inputs */
    uint64_t t_consumer_done;          /* when one of those last completed */
    uint64_t spill_defer_since;        /* 0: admission not waiting before a spill */
    int spill_defer_misses;            /* waits in a row that ended in a spill anyway */
    uv_timer_t defer_timer;            /* the end of the release grace */
    uint64_t mem_blocked_since;        /* 0: admission not blocked on memory */
    gs_wtask_t *mem_blocked_task;      /* the head task that is blocked */
    uint64_t admit_epoch;              /* bumped when memory is freed or tasks are queued */
    int reserve_off;                   /* generators may use the consumers' reserve */
    uint64_t blocked_epoch;            /* admit_epoch at the last blocked scan */
    uint64_t last_mem_free;
    GS_VEC(gs_wtask_t *) task_free;    /* free-list of task structs */
    GS_VEC(void *) task_slabs;
    gs_mpool_t chunk_pool;             /* gs_wchunk_t headers (loop thread) */

    /* TASK_DONE batch */
    GS_VEC(uint64_t) d_graph, d_task, d_nbytes, d_run, d_fetch;
    GS_VEC(uint64_t) d_start, d_end;   /* the kernel's interval, worker clock */
    GS_VEC(int32_t) d_status;
    GS_VEC(char *) d_err;
    uint64_t d_first_ns;               /* when the oldest entry of the batch was queued */

    /* stats */
    gs_worker_stats_t st;
};

/* ---- store.c ---- */
gs_status_t gs__wgraph_get(gs_worker_t *w, uint64_t id, int create, gs_wgraph_t **g_p);
/* Free @a g if nothing refers to it; with @a drop_layers also when only layers remain. */
void gs__wgraph_maybe_free(gs_worker_t *w, gs_wgraph_t *g, int drop_layers);
void gs__wgraph_free_all(gs_worker_t *w);
void gs__wgraph_unidle(gs_worker_t *w, gs_wgraph_t *g);
void gs__wgraph_evict_idle(gs_worker_t *w);     /* safe points only */
void gs__wstore_clear(gs_worker_t *w);          /* drop every key (destroy) */
gs_wchunk_t *gs__wstore_find(gs_worker_t *w, uint64_t graph, uint64_t task);
/* New chunk struct (refs 1, PENDING, not in the map) with memory allocated via the backend.
 * GS_ERR_NO_MEMORY/GS_ERR_NO_DEVICE_MEMORY when it does not fit (worker accounting or backend). */
gs_status_t gs__wchunk_new(gs_worker_t *w, gs_wgraph_t *g, uint64_t task, uint64_t nbytes,
                           gs_wchunk_t **c_p);
void gs__wchunk_ref(gs_wchunk_t *c);
void gs__wchunk_unref(gs_worker_t *w, gs_wchunk_t *c);
/* Put @a c in its graph's map (replacing/detaching what is there). */
gs_status_t gs__wstore_insert(gs_worker_t *w, gs_wchunk_t *c);
/* Remove @a c from the map (if there); drops the store's ref for an owned key. */
void gs__wstore_detach(gs_worker_t *w, gs_wchunk_t *c);
void gs__wstore_release(gs_worker_t *w, uint64_t graph, uint64_t task);
void gs__wgraph_cancel(gs_worker_t *w, uint64_t graph);
void gs__wmem_freed(gs_worker_t *w);
/* Backend memory accounted against the limit (GS_ERR_NO_MEMORY / GS_ERR_NO_DEVICE_MEMORY when
 * it does not fit, nothing changed); gs__wmem_free gives it back (and wakes admission). */
gs_status_t gs__wmem_alloc(gs_worker_t *w, uint64_t nbytes, void **ptr_p);
void gs__wmem_free(gs_worker_t *w, void *ptr, uint64_t nbytes);

/* ---- exec.c (intake.c: gs__wexec_assign) ---- */
gs_status_t gs__wexec_init(gs_worker_t *w);
void gs__wexec_stop_threads(gs_worker_t *w);
void gs__wexec_cleanup_tasks(gs_worker_t *w);     /* release every task */
void gs__wexec_cleanup(gs_worker_t *w);
void gs__wexec_assign(gs_worker_t *w, const gs_msg_task_assign_t *m);
void gs__wexec_pump(gs_worker_t *w);               /* admission + dispatch */
void gs__wexec_drain(gs_worker_t *w);              /* completions from the async queue */
void gs__wexec_input_ready(gs_worker_t *w, gs_wchunk_t *c);  /* c went PENDING -> READY */
/* c went PENDING -> FAILED (a fetch failed because of @a why): fail the tasks waiting on it.
 * With @a damaged (the bytes arrived altered: payload MAC or checksum mismatch), a waiting task
 * that has not used up GS_W_MAX_REFETCHES goes back to the head of the admission queue instead
 * and fetches its inputs again. */
void gs__wexec_input_failed(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, const char *why,
                            int damaged);
void gs__wexec_flush_done(gs_worker_t *w);
/* Flush the TASK_DONE batch when it is due: GS_W_DONE_BATCH entries, or its oldest queued
 * GS_W_DONE_DELAY_NS ago (the loop keeps turning: more will join it soon). */
void gs__wexec_flush_done_due(gs_worker_t *w);
void gs__wexec_tick(gs_worker_t *w);               /* memory watchdog */
void gs__wtask_drop(gs_worker_t *w, gs_wtask_t *t);   /* canceled, not running */
void gs__wtask_fail(gs_worker_t *w, gs_wtask_t *t, gs_status_t status, const char *fmt, ...)
    GS_PRINTF(4, 5);
int gs__wexec_pick_stream(gs_worker_t *w);
/* Finish running task @a t with @a status (TASK_DONE, output in the store, release). */
void gs__wtask_complete(gs_worker_t *w, gs_wtask_t *t, gs_status_t status, uint64_t t_done);
gs_wtask_t *gs__wtask_alloc(gs_worker_t *w);
/* Add one entry to the TASK_DONE batch (takes @a err, gs_malloc'd or NULL). @a start_ns: when
 * its kernel started (gs_now_ns()), 0 when it never ran (then the report's time); its end is
 * @a start_ns + @a run_ns. */
void gs__wdone_push(gs_worker_t *w, uint64_t graph, uint64_t task, gs_status_t status,
                    uint64_t nbytes, uint64_t run_ns, uint64_t fetch_ns, uint64_t start_ns, char *err);
void gs__wtask_recycle(gs_worker_t *w, gs_wtask_t *t);

/* ---- launch.c: running kernels ---- */
void gs__wpool_main(void *arg);                               /* pool thread */
void gs__wtask_launch_stream(gs_worker_t *w, gs_wtask_t *t);  /* streams mode */
void gs__wlaunch_done(gs_worker_t *w, gs_wnote_t *n);         /* a GS_WNOTE_LAUNCH note */
void gs__wlaunch_stop(gs_worker_t *w);                        /* join the launcher thread */
void gs__wlaunch_destroy(gs_worker_t *w);

/* ---- note.c: the completion queue ---- */
void gs__wnote_push(gs_worker_t *w, gs_wnote_t *n);   /* any thread */
void gs__wnote_cb(gs_status_t status, void *arg);     /* chunkops notify callback */
/* Deliver @a n (kind and obj set by the caller) through the completion queue once everything
 * enqueued on @a stream so far has finished; n->status is the stream's status. Never blocks:
 * when the backend cannot register the notification, registration is retried from a loop
 * timer. Takes @a n. Any thread. */
void gs__wnote_arm(gs_worker_t *w, gs_chunkops_stream_h stream, gs_wnote_t *n);
/* Loop thread, before draining: start the retry timer for parked notes; once stopping, move
 * them into the queue with GS_ERR_CANCELED (the streams have been drained). */
void gs__wnote_unpark(gs_worker_t *w);

/* ---- spill/host.c: a GS_WNOTE_TIER note arrived (takes it) ---- */
void gs__wspill_note(gs_worker_t *w, gs_wnote_t *n);

/* ---- replicate.c: REPLICATE from gsched ---- */
void gs__wrepl_start(gs_worker_t *w, const gs_msg_replicate_t *m);
void gs__wrepl_poll(gs_worker_t *w);               /* every loop iteration */
void gs__wrepl_cleanup(gs_worker_t *w);            /* stop: drop pending requests */

/* ---- worker.c ---- */
void gs__worker_handle_closed(uv_handle_t *h);   /* close callback: counts nhandles_open */
/* Work outside a handle (thread-pool requests) that a stop must wait for: hold before it
 * starts, unhold from its completion on the loop. */
void gs__worker_hold(gs_worker_t *w);
void gs__worker_unhold(gs_worker_t *w);
void gs__wsend_msg(gs_worker_t *w, const gs_msg_t *m);
void gs__wdata_to_scheduler(gs_worker_t *w, uint64_t req_id, uint64_t graph, uint64_t task,
                            gs_status_t status, const void *data, size_t len);

#endif
