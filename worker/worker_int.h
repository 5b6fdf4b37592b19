/* Internals of gworker shared by worker.c (lifecycle, control plane), store.c (graphs, chunks),
 * exec.c (tasks, memory admission, execution, completion) and ucx.c (peers, fetch, serve).
 * Everything here runs on the loop thread unless marked "any thread". */
#ifndef GS_WORKER_INT_H
#define GS_WORKER_INT_H

#include "chunkops/chunkops.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/vec.h"
#include "graph/taskgraph.h"
#include "proto/conn.h"
#include "worker/worker.h"

#include <stdatomic.h>
#include <ucp/api/ucp.h>

#define GS_W_INLINE_DEPS 4
#define GS_W_DONE_FLUSH 4096       /* flush TASK_DONE early past this many entries */
#define GS_W_ERRLEN 512
#define GS_W_SKIP_AHEAD 65536      /* queued tasks tried past a head blocked on memory */
#define GS_W_UCX_CUDA_MIN (1u << 20)  /* device chunks this big go to UCX unstaged */
#define GS_W_SMALL_TASK_BYTES 65536   /* a task reading and writing less is "small" */
#define GS_W_PIPE_POOL 8           /* slice buffers kept for reuse */
#define GS_W_SMALL_DEPTH 256       /* small tasks dispatched per kernel thread / stream */
#define GS_W_PRODUCER_QUARTERS 3   /* tasks without inputs fill at most 3/4 of the memory */
#define GS_W_RESERVE_IDLE_NS 100000000ull  /* blocked and idle this long: lift the reserve */
#define GS_W_IDLE_GRAPHS 256       /* idle graphs whose layers stay cached */
#define GS_W_IDLE_LAYER_BYTES (64ull << 20)

typedef struct gs_wgraph gs_wgraph_t;
typedef struct gs_wchunk gs_wchunk_t;
typedef struct gs_wtask gs_wtask_t;
typedef struct gs_wfetch gs_wfetch_t;
typedef struct gs_wpeer gs_wpeer_t;
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
    gs_u64map_t chunks;       /* task id -> gs_wchunk_t * (owned keys and fetched copies) */
    gs_u64map_t tasks;        /* task id -> gs_wtask_t * (queued .. running) */
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
    GS_VEC(gs_wtask_t *) waiters;   /* tasks waiting for PENDING -> READY */
};

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

/* Transfers (fetch from a peer). */
typedef enum gs_wfetch_state {
    GS_WFETCH_REQUESTED = 0,  /* FETCH_REQ sent (or being sent), waiting for DATA */
    GS_WFETCH_RECEIVING = 1,  /* rendezvous receive in progress */
    GS_WFETCH_STAGING = 2     /* host staging buffer -> backend memory copy in flight */
} gs_wfetch_state_t;

struct gs_wfetch {
    uint64_t req_id;
    gs_worker_t *w;
    gs_wpeer_t *peer;
    gs_wlink_t peer_link;     /* peer->fetches */
    gs_wchunk_t *chunk;       /* destination (PENDING), one ref held */
    void *host;               /* where the bytes land: chunk->ptr, or a staging buffer */
    uint8_t state;
    uint8_t host_owned;       /* host is a staging buffer to gs_free */
    uint8_t dead;             /* failed/timed out; freed when its UCX or copy op returns */
    uint64_t t_start, deadline;
    void *recv_req;           /* outstanding ucp receive request */
    int stream;               /* staging stream */
    uint8_t path;             /* gs_wpath_t the bytes came over */
    uint8_t dev_recv;         /* UCX receives straight into device memory (host = chunk) */
    uint8_t csum_on;          /* the DATA carried a checksum of the bytes (csum) */
    uint8_t parts;            /* STAGING: copies (notes) still to arrive; 0 or 1 = one */
    uint8_t pipe_rx;          /* arriving as slices (pipe.c) */
    uint8_t pipe_guard;       /* pipe_rx: the "not every byte yet" part is held */
    uint64_t rx_bytes;        /* pipe_rx: bytes arrived */
    gs_status_t part_status;  /* first failure among the parts */
    uint64_t csum;
    uint64_t ipc_lease;       /* CUDA IPC: the owner's lease to give back (0 none) */
    uint64_t ipc_owner;       /* CUDA IPC: the owner's worker id */
};

/* How a fetched chunk travelled. */
typedef enum gs_wpath {
    GS_WPATH_UCX = 0,         /* UCX active message (host memory, or host-staged) */
    GS_WPATH_CUDA_IPC = 1     /* peer copy out of the owner's exported device arena */
} gs_wpath_t;

/* One UCX endpoint to a peer; outlives the peer while its close completes. */
typedef struct gs_wep {
    gs_worker_t *w;
    uint64_t peer_id;
    ucp_ep_h ep;
    gs_wlink_t link;          /* w->closing while a close is in flight */
} gs_wep_t;

struct gs_wpeer {
    uint64_t id;
    char *name;
    uint8_t *addr;
    size_t addr_len;
    gs_wep_t *epc;            /* created lazily */
    int failed;               /* epc reported an error; closed and recreated on next use */
    ucs_status_t fail_status;
    gs_wlink_t fetches;       /* gs_wfetch_t waiting on this peer */
    uint8_t ipc_off;          /* CUDA IPC with this peer failed once: plain fetches only */
    uint8_t logged_path[2];   /* first transfer over each gs_wpath_t logged */
};

#define GS_WIPC_KEY_BYTES 64

/* A deferred piece of UCX work, run right after ucp_worker_progress() returns. */
typedef enum gs_wdefer_kind {
    GS_WDEFER_SERVE = 0,      /* answer a FETCH_REQ */
    GS_WDEFER_RNDV = 1,       /* start a rendezvous receive */
    GS_WDEFER_IPC_COPY = 2,   /* map a granted IPC region and copy the chunk out of it */
    GS_WDEFER_RNDV_PART = 3   /* receive one slice (pipe.c); ctx is its gs_wpart_rx */
} gs_wdefer_kind_t;

typedef struct gs_wdefer {
    struct gs_wdefer *next;
    int kind;
    uint64_t req_id, graph, task, from_worker;
    ucp_ep_h reply_ep;
    void *desc;
    size_t len;
    gs_wpeer_t *peer;
    gs_status_t status;
    int ipc;                  /* SERVE: the requester asked for a CUDA IPC lease */
    void *ctx;                /* RNDV_PART: the slice being received */
    uint64_t ipc_off, ipc_lease, ipc_nbytes;   /* IPC_COPY: the grant */
    gs_ipc_handle_t ipc_handle;
} gs_wdefer_t;

/* A completion record from a backend notify() (streams mode) or a finished staging copy. */
typedef enum gs_wnote_kind {
    GS_WNOTE_TASK = 0,
    GS_WNOTE_FETCH_STAGED = 1,
    GS_WNOTE_SEND_STAGED = 2,
    GS_WNOTE_LAUNCH = 3       /* a task run by the launcher thread (exec.c, gs_wlaunch_job_t) */
} gs_wnote_kind_t;

typedef struct gs_wnote {
    struct gs_wnote *next;
    gs_worker_t *w;
    int kind;
    gs_status_t status;
    uint64_t t_done;
    void *obj;
} gs_wnote_t;

/* A chunk on its way out (to a peer over UCX, or to gsched as DATA) from staged host memory
 * or directly from host-accessible chunk memory. */
typedef struct gs_wsend {
    gs_worker_t *w;
    gs_wlink_t link;          /* w->sends (outstanding) */
    gs_wchunk_t *chunk;       /* ref held until done (NULL for error replies) */
    void *host;               /* bytes to send */
    uint8_t host_owned;
    uint8_t to_scheduler;     /* DATA over the control connection (gather) */
    int stream;
    uint64_t req_id, graph, task, from_worker;
    gs_status_t status;
    void *ucp_req;
    gs_buf_t header;          /* encoded header (must live until UCX completes) */
    uint8_t is_request;       /* a FETCH_REQ (req_id names the fetch) */
    uint8_t payload_cuda;     /* host is device memory: UCX with CUDA memory support */
    struct gs_wpipe *pipe;    /* a slice of a pipelined send (pipe.c), else NULL */
    uint32_t part;
    int slot;
    size_t part_len;
} gs_wsend_t;

typedef enum gs_wstate {
    GS_WSTATE_CREATED = 0,
    GS_WSTATE_CONNECTING,
    GS_WSTATE_HELLO,          /* HELLO sent, waiting for WELCOME */
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
    char *hostname;
    int device;
    int nthreads;
    int nstreams;
    int stream_depth;
    int streams_mode;         /* 1: GS_WORKER_EXEC_STREAMS */
    int ucx_shm;              /* endpoints without peer-failure handling (shm transports) */
    int no_ipc;               /* CUDA IPC disabled by configuration */
    int transfer_checksum;    /* see gs_worker_params_t */
    size_t pipe_slice;        /* pipelined staging: slice bytes (0: off) */
    void *pipe_pool[GS_W_PIPE_POOL];   /* free slice buffers (pinned where the backend can) */
    int pipe_npool;
    uint64_t pipe_min;        /* chunks at least this big go in slices */
    int test_corrupt;
    int ucx_cuda;             /* streams mode and UCX reports CUDA memory support */
    uint64_t memory_limit_req;
    uint32_t connect_timeout_ms, fetch_timeout_ms, memory_wait_ms, heartbeat_req_ms;

    /* control plane */
    gs_conn_t *conn;
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

    /* backend */
    const gs_chunkops_ops_t *ops;
    gs_chunkops_ctx_h ctx;
    gs_chunkops_stream_h *streams;     /* nstreams (streams mode) */
    int *stream_inflight;
    uint64_t dev_last_done;            /* last completion on any stream (for run_ns) */
    /* streams mode: tasks whose backend call blocks the calling thread (QR, SVD) are launched
     * by a launcher thread on its own stream, index nstreams in stream_inflight (exec.c) */
    struct gs_wlauncher *launcher;     /* created on the first such task */
    int launcher_off;                  /* GS_WORKER_LAUNCHER=off, or it could not start */
    uint64_t mem_used;
    uint64_t mem_limit;

    /* kernel threads (pool mode) */
    uv_thread_t *threads;
    gs_chunkops_stream_h *thread_streams;
    int nthreads_started;              /* under job_lock */
    int threads_created;
    uv_mutex_t job_lock;
    uv_cond_t job_cond;
    gs_wtask_t *job_head, *job_tail;   /* under job_lock */
    int job_quit;                      /* under job_lock */

    /* completions (any thread -> loop) */
    uv_mutex_t done_lock;
    gs_wtask_t *done_head, *done_tail; /* pool completions, under done_lock */
    gs_wnote_t *note_head, *note_tail; /* notify completions, under done_lock */

    /* graphs, tasks */
    gs_u64map_t graphs;                /* graph id -> gs_wgraph_t * */
    gs_wlink_t idle_graphs;            /* graphs with layers but no task or key, oldest first */
    uint64_t nidle, idle_layer_bytes;
    gs_wlink_t admit_q;                /* QUEUED tasks, FIFO */
    gs_wlink_t ready_q;                /* READY tasks, FIFO */
    uint64_t nqueued, nadmitted, nrunning;
    uint64_t max_admitted;
    uint64_t max_admitted_small;       /* admission limit while the queue head is small */
    int slots;                         /* max running */
    int small_slots;                   /* max running while the ready head is small */
    uint64_t mem_blocked_since;        /* 0: admission not blocked on memory */
    gs_wtask_t *mem_blocked_task;      /* the head task that is blocked */
    uint64_t admit_epoch;              /* bumped when memory is freed or tasks are queued */
    int reserve_off;                   /* generators may use the consumers' reserve */
    uint64_t blocked_epoch;            /* admit_epoch at the last blocked scan */
    uint64_t last_mem_free;
    GS_VEC(gs_wtask_t *) task_free;    /* free-list of task structs */
    GS_VEC(void *) task_slabs;

    /* TASK_DONE batch */
    GS_VEC(uint64_t) d_graph, d_task, d_nbytes, d_run, d_fetch;
    GS_VEC(int32_t) d_status;
    GS_VEC(char *) d_err;

    /* UCX */
    ucp_context_h ucp_ctx;
    ucp_worker_h ucp_worker;
    ucp_address_t *ucp_addr;
    size_t ucp_addr_len;
    int ucp_efd;
    uv_poll_t ucp_poll;
    int ucp_poll_open;
    gs_u64map_t peers;                 /* worker id -> gs_wpeer_t * */
    gs_u64map_t fetches;               /* req_id -> gs_wfetch_t * */
    uint64_t next_req_id;
    gs_wdefer_t *defer_head, *defer_tail;
    gs_wlink_t sends;                  /* gs_wsend_t outstanding */
    gs_wlink_t closing;                /* gs_wep_t being closed */
    gs_wlink_t dead_fetches;           /* failed fetches waiting for UCX or a copy */
    int ep_fail_pending;               /* some peer's endpoint failed */
    uint64_t ucp_outstanding;          /* ucp requests not completed */
    int in_progress;                   /* inside ucp_worker_progress */

    /* CUDA IPC (ipc.c) */
    int ipc_on;                        /* this worker lends and borrows device memory */
    unsigned char host_key[GS_WIPC_KEY_BYTES];   /* who counts as "this host" */
    gs_ipc_handle_t ipc_handle;        /* our exported arena */
    void *ipc_base;
    size_t ipc_size;
    gs_u64map_t ipc_leases;            /* lease id -> gs_wlease_t * (chunks lent out) */
    uint64_t next_lease;
    struct gs_wipc_map *ipc_maps;      /* peers' arenas mapped here */

    /* transfer measurements (bw.c) and replicate requests (replicate.c) */
    struct gs_wbw *bw;
    struct gs_wrepl *repls;

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

/* ---- exec.c ---- */
gs_status_t gs__wexec_init(gs_worker_t *w);
void gs__wexec_stop_threads(gs_worker_t *w);
void gs__wexec_cleanup_tasks(gs_worker_t *w);     /* release every task */
void gs__wexec_cleanup(gs_worker_t *w);
void gs__wexec_assign(gs_worker_t *w, const gs_msg_task_assign_t *m);
void gs__wexec_pump(gs_worker_t *w);               /* admission + dispatch */
void gs__wexec_drain(gs_worker_t *w);              /* completions from the async queue */
void gs__wexec_input_ready(gs_worker_t *w, gs_wchunk_t *c);  /* c left PENDING */
void gs__wexec_flush_done(gs_worker_t *w);
void gs__wexec_tick(gs_worker_t *w);               /* memory watchdog */
void gs__wtask_drop(gs_worker_t *w, gs_wtask_t *t);   /* canceled, not running */
void gs__wnote_push(gs_worker_t *w, gs_wnote_t *n);   /* any thread */
void gs__wtask_fail(gs_worker_t *w, gs_wtask_t *t, gs_status_t status, const char *fmt, ...)
    GS_PRINTF(4, 5);
int gs__wexec_pick_stream(gs_worker_t *w);
void gs__wnote_cb(gs_status_t status, void *arg);  /* chunkops notify callback */

/* ---- ucx.c ---- */
gs_status_t gs__wucx_init(gs_worker_t *w);
void gs__wucx_shutdown(gs_worker_t *w);            /* cancel everything, close eps */
void gs__wucx_cleanup(gs_worker_t *w);
void gs__wucx_progress(gs_worker_t *w);            /* progress until idle + arm */
void gs__wucx_peers(gs_worker_t *w, const gs_msg_peers_t *m);
/* Start fetching (graph, task) from peer @a from into a new PENDING chunk (returned with one
 * ref for the caller, also in the store as a fetched copy). */
gs_status_t gs__wucx_fetch(gs_worker_t *w, uint64_t graph, uint64_t task, uint64_t from,
                           uint64_t nbytes, gs_wchunk_t **c_p);
void gs__wucx_tick(gs_worker_t *w);                /* fetch timeouts */
void gs__wfetch_staged(gs_worker_t *w, gs_wfetch_t *f, gs_status_t status);
void gs__wsend_staged(gs_worker_t *w, gs_wsend_t *s, gs_status_t status);
/* Send a chunk to gsched as DATA for GATHER_REQ @a req_id (staging when needed). */
void gs__wgather(gs_worker_t *w, uint64_t req_id, uint64_t graph, uint64_t task);

/* ucx.c internals shared with ipc.c */
gs_wsend_t *gs__wsend_new(gs_worker_t *w);
void gs__wsend_free(gs_worker_t *w, gs_wsend_t *s);
void gs__wsend_done(gs_worker_t *w, gs_wsend_t *s, ucs_status_t st);
/* Post an AM for @a s (header in s->header after the frame header). UCS_INPROGRESS: done
 * follows from UCX; otherwise the caller finishes @a s. */
ucs_status_t gs__wsend_post(gs_worker_t *w, gs_wsend_t *s, ucp_ep_h ep, unsigned am_id,
                            const void *payload, size_t len, unsigned flags);
/* Endpoint to worker @a id (a known peer), or NULL. */
ucp_ep_h gs__wpeer_ep_by_id(gs_worker_t *w, uint64_t id);
void gs__wfetch_fail(gs_worker_t *w, gs_wfetch_t *f, gs_status_t status, const char *fmt, ...)
    GS_PRINTF(4, 5);
/* (Re)send the request of fetch @a f to its peer, asking for a CUDA IPC lease if @a ipc. */
gs_status_t gs__wfetch_post_req(gs_worker_t *w, gs_wfetch_t *f, int ipc);
void gs__wfetch_defer(gs_worker_t *w, gs_wdefer_t *d);   /* run after ucp progress returns */
/* Copy @a len host bytes at @a src into fetch @a f's chunk at byte @a off on stream @a sp,
 * followed by a FETCH_STAGED note for @a f (f->parts counts it). When no note can be
 * registered the stream is drained and the copy is done on return (f->parts unchanged).
 * On failure nothing of it is left running. */
gs_status_t gs__wfetch_copy_in(gs_worker_t *w, gs_wfetch_t *f, int sp, size_t off,
                               const void *src, size_t len);

/* 64-bit checksum of transferred bytes (ucx.c). */
uint64_t gs__wchecksum(const void *data, size_t len);
/* Answer a fetch with DATA as s describes (s->status, s->host); takes @a s. */
void gs__wserve_answer(gs_worker_t *w, gs_wsend_t *s);

/* ---- pipe.c (pipelined staging over UCX) ---- */
#define GS_AM_DATA_PART 22
typedef struct gs_wpipe gs_wpipe_t;
/* Owner: answer s (chunk held, streams mode) in slices; 0 when the chunk is too small or
 * pipelining is off (the caller stages the whole chunk). */
int gs__wpipe_serve(gs_worker_t *w, gs_wsend_t *s);
void gs__wpipe_staged(gs_worker_t *w, gs_wsend_t *c, gs_status_t status);   /* slice on host */
void gs__wpipe_sent(gs_worker_t *w, gs_wsend_t *c, ucs_status_t st);        /* slice sent */
ucs_status_t gs__wam_data_part(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param);
void gs__wpipe_recv(gs_worker_t *w, gs_wdefer_t *d);                        /* RNDV_PART */
void gs__wpipe_cleanup(gs_worker_t *w);                                     /* the pool */

/* ---- ipc.c (CUDA IPC between workers of one host) ---- */
#define GS_AM_IPC_REQ 19       /* FETCH_REQ header + our host key as payload */
#define GS_AM_IPC_GRANT 20     /* owner -> requester: raw grant (see ipc.c) */
#define GS_AM_IPC_RELEASE 21   /* requester -> owner: the lease is over */
/* Export our arena when the backend can (streams mode, not --no-ipc). Never fails the worker:
 * without IPC every transfer goes through UCX. */
void gs__wipc_init(gs_worker_t *w);
/* Whether a fetch from @a p should ask for an IPC lease. */
int gs__wipc_want(gs_worker_t *w, const gs_wpeer_t *p);
/* Whether the payload of an IPC request names this host. */
int gs__wipc_same_host(gs_worker_t *w, const void *key, size_t len);
/* Owner: lend ready chunk @a c to d->from_worker; 0 when it cannot (answer with plain DATA). */
int gs__wipc_serve(gs_worker_t *w, gs_wdefer_t *d, gs_wchunk_t *c, ucp_ep_h ep);
ucs_status_t gs__wam_ipc_grant(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param);
ucs_status_t gs__wam_ipc_release(void *arg, const void *header, size_t header_len, void *data,
                                 size_t len, const ucp_am_recv_param_t *param);
void gs__wipc_copy(gs_worker_t *w, gs_wdefer_t *d);        /* deferred IPC_COPY */
void gs__wipc_give_back(gs_worker_t *w, gs_wfetch_t *f);   /* release f's lease, if any */
void gs__wipc_tick(gs_worker_t *w);                        /* expire forgotten leases */
void gs__wipc_peer_gone(gs_worker_t *w, uint64_t peer);    /* drop its leases */
void gs__wipc_cleanup(gs_worker_t *w);
/* Log the first transfer from @a p over each path (bandwidth). */
void gs__wfetch_log_path(gs_worker_t *w, gs_wfetch_t *f);

/* ---- bw.c: peer transfer measurements, reported to gsched with heartbeats ---- */
/* Count one completed transfer of @a nbytes from worker @a peer taking @a ns over @a path. */
void gs__wbw_record(gs_worker_t *w, uint64_t peer, uint64_t nbytes, uint64_t ns, const char *path);
void gs__wbw_fetch_done(gs_worker_t *w, const gs_wfetch_t *f);   /* before the fetch detaches */
void gs__wbw_report(gs_worker_t *w);               /* BANDWIDTH with what was recorded */
void gs__wbw_cleanup(gs_worker_t *w);

/* ---- replicate.c: REPLICATE from gsched ---- */
void gs__wrepl_start(gs_worker_t *w, const gs_msg_replicate_t *m);
void gs__wrepl_poll(gs_worker_t *w);               /* every loop iteration */
void gs__wrepl_cleanup(gs_worker_t *w);            /* stop: drop pending requests */

/* ---- worker.c ---- */
void gs__wsend_msg(gs_worker_t *w, const gs_msg_t *m);
void gs__wdata_to_scheduler(gs_worker_t *w, uint64_t req_id, uint64_t graph, uint64_t task,
                            gs_status_t status, const void *data, size_t len);

#endif
