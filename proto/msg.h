/**
 * Control-plane and data-plane messages of gsched.
 *
 * Wire format: a frame is a 4-byte little-endian payload length followed by a msgpack payload
 * `[type, field...]` (one msgpack array). Large integer tables travel as msgpack `bin` holding
 * little-endian fixed-width arrays (columnar), so a million-task graph is a handful of memcpys.
 * Frames larger than the receiver's limit (GS_PROTO_DEFAULT_MAX_FRAME unless configured) are
 * refused with GS_ERR_MSG_TOO_LARGE before any allocation.
 *
 * Decoding is total: any byte sequence yields a message or GS_ERR_PROTO (with gs_last_error()
 * naming the first problem) and never reads out of bounds, crashes or leaks. Decoded messages
 * own their memory (aligned copies of every table and string): release with gs_msg_cleanup().
 * Encoding borrows the message's pointers only for the duration of the call.
 *
 * Conversation:
 *   any peer -> gsched  HELLO(version, role, name, nonce)   first frame on every connection;
 *                       a wrong version is answered with ERROR and the connection closed
 *   gsched -> peer      CHALLENGE(nonce, proof): gsched proves it knows the cluster token
 *   peer -> gsched      AUTH(proof): the peer proves it (common/auth.h); a wrong proof is
 *                       answered with ERROR (GS_ERR_AUTH) and the connection closed
 *   gsched -> peer      WELCOME(id, heartbeat interval, data-plane key for workers)
 *   worker -> gsched    WORKER_REGISTER, then HEARTBEAT periodically, TASK_DONE batches, DATA
 *   gsched -> worker    PEERS, TASK_ASSIGN batches, RELEASE, GATHER_REQ, CANCEL, SHUTDOWN
 *   client -> gsched    GRAPH_SUBMIT, GATHER_REQ, CANCEL, RELEASE_GRAPH
 *   gsched -> client    GRAPH_ACCEPTED, PROGRESS, GRAPH_DONE, DATA, ERROR
 *   worker -> worker    FETCH_REQ / DATA over UCX (active messages; DATA's payload is the chunk);
 *                       every request carries a trailer: sender id, counter, HMAC with the
 *                       data-plane key (worker/xfer/seal.c)
 *   client -> gsched    INFO_REQ; gsched -> client INFO (cluster state, e.g. to wait for workers)
 *   worker -> gsched    BANDWIDTH: per source worker, the peer fetches completed since the last
 *                       report (bytes, summed seconds, count, path name); sent with heartbeats
 *   client -> gsched    REPLICATE(req_id, target worker, keys): copy chunks to a worker;
 *                       gsched -> worker REPLICATE(req_id, keys, holders, sizes): fetch and keep;
 *                       worker -> gsched REPLICATE_DONE(the keys it now holds, first error);
 *                       gsched -> client REPLICATE_DONE(status, message, keys copied)
 *   client -> gsched    WORKERS_REQ; gsched -> client WORKERS (id, name, host, backend, address,
 *                       device, threads, memory of every live worker)
 *
 * Keys and lifetimes: graph ids are assigned by gsched (GRAPH_ACCEPTED). The output chunks of a
 * graph stay on the workers after GRAPH_DONE until the client sends RELEASE_GRAPH (or
 * disconnects); with GS_SUBMIT_PERSIST they may also be used as externals by later graphs.
 * The client fetches results with GATHER_REQ (its own req_id) and gets one DATA per key; gsched
 * relays them from the workers.
 */
#ifndef GS_PROTO_MSG_H
#define GS_PROTO_MSG_H

#include "common/buf.h"

#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: HELLO carries a nonce and no token; CHALLENGE and AUTH prove the token (common/auth.h);
 * WELCOME carries a worker's data-plane key; worker-to-worker requests carry a MAC.
 * 3: every integer table (TAB, CSR, DTAB of proto/msg_schema.h) is a bin 32 whose entries follow
 * 0 to 7 zero bytes of padding that put them at a multiple of 8 bytes from the payload's start, so
 * a receiver reads a large graph's tables in place instead of copying them. */
#define GS_PROTO_VERSION 3u
#define GS_PROTO_FRAME_HEADER 4u
#define GS_PROTO_DEFAULT_MAX_FRAME (1024u * 1024u * 1024u)  /* 1 GiB */

typedef enum gs_msg_type {
    GS_MSG_HELLO = 1,
    GS_MSG_WELCOME = 2,
    GS_MSG_WORKER_REGISTER = 3,
    GS_MSG_HEARTBEAT = 4,
    GS_MSG_PEERS = 5,
    GS_MSG_GRAPH_SUBMIT = 6,
    GS_MSG_GRAPH_ACCEPTED = 7,
    GS_MSG_TASK_ASSIGN = 8,
    GS_MSG_TASK_DONE = 9,
    GS_MSG_RELEASE = 10,
    GS_MSG_GATHER_REQ = 11,
    GS_MSG_DATA = 12,
    GS_MSG_FETCH_REQ = 13,
    GS_MSG_PROGRESS = 14,
    GS_MSG_GRAPH_DONE = 15,
    GS_MSG_CANCEL = 16,
    GS_MSG_RELEASE_GRAPH = 17,
    GS_MSG_ERROR = 18,
    GS_MSG_SHUTDOWN = 19,
    GS_MSG_INFO_REQ = 20,
    GS_MSG_INFO = 21,
    GS_MSG_BANDWIDTH = 22,
    GS_MSG_REPLICATE = 23,
    GS_MSG_REPLICATE_DONE = 24,
    GS_MSG_WORKERS_REQ = 25,
    GS_MSG_WORKERS = 26,
    GS_MSG_CHALLENGE = 27,
    GS_MSG_AUTH = 28,
    GS_MSG_REPORT_REQ = 29,
    GS_MSG_REPORT = 30,
    GS_MSG_LOCATE_REQ = 31,
    GS_MSG_LOCATIONS = 32,
    GS_MSG_CHUNK_REQ = 33,
    GS_MSG_TYPE_MAX
} gs_msg_type_t;

typedef enum gs_peer_role {
    GS_ROLE_CLIENT = 1,
    GS_ROLE_WORKER = 2
} gs_peer_role_t;

/** Byte string. In decoded messages it points into memory owned by the message. */
typedef struct gs_bytes {
    const uint8_t *data;
    size_t len;
} gs_bytes_t;

/** Strings are gs_bytes_t too (not NUL-terminated on the wire; decoded strings are
 *  NUL-terminated for convenience, len excludes the NUL). */
typedef gs_bytes_t gs_str_t;

typedef struct gs_msg_hello {
    uint32_t version;
    uint32_t role;          /* gs_peer_role_t */
    gs_str_t token;         /* empty since version 2 (the token never travels); kept for the layout */
    gs_str_t name;
    gs_bytes_t nonce;       /* GS_AUTH_NONCE_BYTES fresh random bytes of the peer */
} gs_msg_hello_t;

typedef struct gs_msg_welcome {
    uint32_t version;
    uint64_t id;            /* client id or worker id */
    uint64_t heartbeat_ms;  /* interval the peer should heartbeat at (workers) */
    gs_bytes_t data_key;    /* workers: the cluster's data-plane key, masked (gs_auth_key_mask);
                             * clients: empty */
} gs_msg_welcome_t;

typedef struct gs_msg_challenge {
    gs_bytes_t nonce;       /* GS_AUTH_NONCE_BYTES fresh random bytes of gsched */
    gs_bytes_t proof;       /* gs_auth_handshake_mac(GS_AUTH_BY_SCHED, ...) */
} gs_msg_challenge_t;

typedef struct gs_msg_auth {
    gs_bytes_t proof;       /* gs_auth_handshake_mac(GS_AUTH_BY_PEER, ...) */
} gs_msg_auth_t;

typedef struct gs_msg_worker_register {
    gs_str_t name;
    gs_str_t backend;       /* "cpu" / "cuda" */
    gs_str_t host;
    int32_t device;
    uint32_t nthreads;
    uint32_t pid;
    uint64_t memory_limit;
    gs_bytes_t ucx_address; /* ucp_worker_get_address() blob */
    gs_str_t data_addr;     /* "host:port" of its direct-gather port (worker/direct.c); empty: none */
} gs_msg_worker_register_t;

typedef struct gs_msg_heartbeat {
    uint64_t seq;
    uint64_t mem_used;
    uint64_t mem_limit;
    uint32_t executing;
    uint32_t queued;
    /* the disk tier (worker/spill): bytes in files now, their limit (0: spilling off,
     * UINT64_MAX: the file system's room), and since start bytes and time written to disk and
     * read back */
    uint64_t disk_used;
    uint64_t disk_limit;
    uint64_t spilled_bytes;
    uint64_t spilled_ns;
    uint64_t unspilled_bytes;
    uint64_t unspilled_ns;
    /* the host tier of a device worker (worker/spill/host.c): bytes of chunks copied to host
     * memory now, its limit (0: none), and since start bytes and time copied down and back */
    uint64_t host_used;
    uint64_t host_limit;
    uint64_t host_spilled_bytes;
    uint64_t host_spilled_ns;
    uint64_t host_unspilled_bytes;
    uint64_t host_unspilled_ns;
    /* bytes its file reads took since start by each path (chunkops/fileio.h,
     * gs_fread_path_t): straight into host memory (cpu), page-locked staging, cuFile with
     * GPUDirect Storage, cuFile in its compatibility mode */
    uint64_t file_cpu_bytes;
    uint64_t file_pinned_bytes;
    uint64_t file_cufile_bytes;
    uint64_t file_compat_bytes;
} gs_msg_heartbeat_t;

typedef struct gs_peer_info {
    uint64_t id;
    gs_str_t name;
    gs_str_t host;
    gs_bytes_t ucx_address;
} gs_peer_info_t;

typedef struct gs_msg_peers {
    uint32_t nadded;
    gs_peer_info_t *added;
    uint32_t nremoved;
    uint64_t *removed;
} gs_msg_peers_t;

/** A graph as the client submits it (columnar; see graph/taskgraph.h for the meaning). */
typedef struct gs_msg_graph_submit {
    uint64_t client_ref;    /* chosen by the client, echoed in GRAPH_ACCEPTED */
    uint32_t flags;         /* GS_SUBMIT_* */
    uint32_t nlayers;
    gs_bytes_t *layers;     /* encoded layers */
    uint64_t ntasks;
    const uint32_t *task_layer;
    const uint64_t *task_block;
    const uint64_t *dep_off;     /* ntasks + 1 */
    const uint64_t *deps;        /* dep_off[ntasks] */
    const uint64_t *task_nbytes;
    uint64_t nexternals;
    const uint64_t *externals;   /* 2 * nexternals: (graph, task) pairs */
    uint64_t noutputs;
    const uint64_t *outputs;
    /* readable operation name per layer (graph/taskgraph.h: gs_layer_display_name), for the
     * dashboard and reports only: none, or one per layer, each at most
     * GS_MSG_LAYER_NAME_MAX bytes; gsched keeps them as opaque text */
    uint32_t nlayer_names;
    gs_str_t *layer_names;
} gs_msg_graph_submit_t;

#define GS_MSG_LAYER_NAME_MAX 255u

#define GS_SUBMIT_PERSIST 0x1u   /* keep output chunks on the workers after completion */

typedef struct gs_msg_graph_accepted {
    uint64_t client_ref;
    uint64_t graph_id;
} gs_msg_graph_accepted_t;

/** A batch of tasks for one worker, all of one graph. For each task: its id, layer and block,
 *  and its dependencies as keys with where to fetch them (worker id; the receiving worker's
 *  own id means "already local") and their sizes. Layers the worker has not seen for this graph
 *  come along (layer id + encoded bytes). */
typedef struct gs_msg_task_assign {
    uint64_t graph_id;
    uint32_t nlayers;
    const uint32_t *layer_ids;
    gs_bytes_t *layers;
    uint64_t ntasks;
    const uint64_t *task_id;
    const uint32_t *task_layer;
    const uint64_t *task_block;
    const uint64_t *dep_off;       /* ntasks + 1 */
    const uint64_t *dep_keys;      /* 2 * ndeps: (graph, task) */
    const uint64_t *dep_worker;    /* ndeps */
    const uint64_t *dep_nbytes;    /* ndeps */
} gs_msg_task_assign_t;

/** A batch of task completions from a worker. status[i] != GS_OK marks a failure; its message
 *  is errors[k] for the k-th failed entry (in order). */
typedef struct gs_msg_task_done {
    uint64_t n;
    const uint64_t *graph_id;
    const uint64_t *task_id;
    const int32_t *status;
    const uint64_t *nbytes;
    const uint64_t *run_ns;        /* kernel time */
    const uint64_t *fetch_ns;      /* time waiting for inputs */
    uint32_t nerrors;
    gs_str_t *errors;
    /* The worker's task stream, on the worker's monotonic clock (CLOCK_MONOTONIC ns, not
     * comparable across hosts): now_ns is its clock when it sent this batch, start_ns[i] and
     * end_ns[i] when task i's kernel started and ended (start_ns <= end_ns; both = the report's
     * time for a task that never ran). gsched maps them to its own clock with the offset it
     * observes at receipt (gs__dash_batch, scheduler/dash/dash.c). */
    uint64_t now_ns;
    const uint64_t *start_ns;
    const uint64_t *end_ns;
} gs_msg_task_done_t;

/** Keys to drop (scheduler -> worker). */
typedef struct gs_msg_release {
    uint64_t n;
    const uint64_t *keys;          /* 2 * n: (graph, task) */
} gs_msg_release_t;

/** Ask for chunk data: client -> gsched (keys of one graph), gsched -> worker (req_id tags the
 *  answer). Each requested key is answered with one DATA message. */
typedef struct gs_msg_gather_req {
    uint64_t req_id;
    uint64_t n;
    const uint64_t *keys;          /* 2 * n */
} gs_msg_gather_req_t;

/** Chunk data (or the error that prevented it). */
typedef struct gs_msg_data {
    uint64_t req_id;
    uint64_t graph_id;
    uint64_t task_id;
    int32_t status;
    gs_bytes_t data;               /* little-endian float64 chunk */
} gs_msg_data_t;

/** Worker -> worker request for one chunk. */
typedef struct gs_msg_fetch_req {
    uint64_t req_id;
    uint64_t graph_id;
    uint64_t task_id;
    uint64_t from_worker;
} gs_msg_fetch_req_t;

typedef struct gs_msg_progress {
    uint64_t graph_id;
    uint64_t done;
    uint64_t total;
} gs_msg_progress_t;

typedef struct gs_msg_graph_done {
    uint64_t graph_id;
    int32_t status;
    gs_str_t message;              /* empty on success; otherwise names the failing task */
    uint64_t ntasks;
    uint64_t run_ns_total;         /* sum of kernel times reported by workers */
    uint64_t wall_ns;              /* scheduler-side time from accept to done */
} gs_msg_graph_done_t;

typedef struct gs_msg_cancel {
    uint64_t graph_id;
} gs_msg_cancel_t;

typedef struct gs_msg_info {
    uint32_t nworkers;
    uint32_t nclients;
    uint64_t ngraphs_active;
    uint64_t tasks_done_total;
    uint32_t nnames;
    gs_str_t *worker_names;
} gs_msg_info_t;

/** Measured peer transfers of a worker since its last report (worker -> gsched). Entry i: the
 *  fetches from worker peer[i] that completed: count[i] transfers, bytes[i] bytes in total,
 *  ns[i] summed from request to data in place, over path[i] ("ucx", "ucx-shm", "cuda-ipc",
 *  ...; may be empty). npaths must equal n. */
typedef struct gs_msg_bandwidth {
    uint32_t n;
    const uint64_t *peer;
    const uint64_t *bytes;
    const uint64_t *ns;
    const uint32_t *count;
    uint32_t npaths;
    gs_str_t *path;
} gs_msg_bandwidth_t;

/** Any key (G, GS_REPLICATE_ALL_OUTPUTS) in a client's REPLICATE stands for every output chunk
 *  of graph G. */
#define GS_REPLICATE_ALL_OUTPUTS UINT64_MAX

/** Copy chunks to a worker. client -> gsched: the target is worker_id if non-zero, else the
 *  worker named worker_name; nsrc = 0. gsched -> worker (the target): nsrc = n, from[i] is a
 *  worker holding keys[i] and nbytes[i] its size; worker_id is the target's own id. */
typedef struct gs_msg_replicate {
    uint64_t req_id;
    uint64_t worker_id;
    gs_str_t worker_name;
    uint64_t n;
    const uint64_t *keys;          /* 2 * n: (graph, task) */
    uint64_t nsrc;                 /* 0 or n */
    const uint64_t *from;          /* nsrc */
    const uint64_t *nbytes;        /* nsrc */
} gs_msg_replicate_t;

/** Outcome of a REPLICATE. worker -> gsched: keys[] (n) are stored on the worker now (nbytes[i]
 *  each); status/message name the first key that could not be copied. gsched -> client: status
 *  GS_OK when every requested chunk has a copy on the target, else the error naming the
 *  failure; keys are the chunks copied. */
typedef struct gs_msg_replicate_done {
    uint64_t req_id;
    int32_t status;
    gs_str_t message;
    uint64_t n;
    const uint64_t *keys;          /* 2 * n */
    const uint64_t *nbytes;        /* n */
} gs_msg_replicate_done_t;

/** Live workers (gsched -> client, answering WORKERS_REQ). Every table and string array has n
 *  entries; addr is the worker's control connection as gsched sees it ("ip:port"). */
typedef struct gs_msg_workers {
    uint32_t n;
    const uint64_t *id;
    const int32_t *device;
    const uint32_t *nthreads;
    const uint64_t *memory_limit;
    const uint64_t *mem_used;
    uint32_t nname, nhost, nbackend, naddr;
    gs_str_t *name;
    gs_str_t *host;
    gs_str_t *backend;
    gs_str_t *addr;
    const uint64_t *disk_used;       /* the disk tier at the last heartbeat (gs_msg_heartbeat_t) */
    const uint64_t *spilled_bytes;
    const uint64_t *spilled_ns;
    const uint64_t *unspilled_bytes;
    const uint64_t *unspilled_ns;
    const uint64_t *host_used;       /* the host tier at the last heartbeat */
    const uint64_t *host_spilled_bytes;
    const uint64_t *host_spilled_ns;
    const uint64_t *host_unspilled_bytes;
    const uint64_t *host_unspilled_ns;
    const uint64_t *file_cpu_bytes;  /* file reads by path at the last heartbeat */
    const uint64_t *file_pinned_bytes;
    const uint64_t *file_cufile_bytes;
    const uint64_t *file_compat_bytes;
} gs_msg_workers_t;

typedef struct gs_msg_error {
    int32_t status;
    gs_str_t message;
} gs_msg_error_t;

/** client -> gsched: the performance report of graph graph_id (one of the client's graphs,
 *  running, finished or recently released), answered by REPORT with the same req_id. */
typedef struct gs_msg_report_req {
    uint64_t req_id;
    uint64_t graph_id;
} gs_msg_report_req_t;

/** gsched -> client: the report as one self-contained HTML file (status GS_OK), or the error
 *  (GS_ERR_NOT_FOUND: no such graph of this client or gsched serves no dashboard; message says
 *  which) with empty html. */
typedef struct gs_msg_report {
    uint64_t req_id;
    int32_t status;
    gs_str_t message;
    gs_bytes_t html;
} gs_msg_report_t;

/** Client -> gsched: where are these output chunks (keys as gather_req)? */
typedef gs_msg_gather_req_t gs_msg_locate_req_t;

/** gsched -> client: per key its size, a ticket for the holding worker, and that worker's data
 *  address (empty: fetch it with GATHER_REQ instead) and host name. */
#define GS_MSG_TICKET_WORDS 4u   /* a ticket: HMAC-SHA256 as 4 u64 (32 bytes) */
typedef struct gs_msg_locations {
    uint32_t n;                    /* first: gs__rule_one_per_entry */
    uint32_t naddr, nhost;
    uint64_t req_id;
    const uint64_t *keys;          /* 2 * n */
    const uint64_t *nbytes;        /* n */
    const uint64_t *ticket;        /* GS_MSG_TICKET_WORDS * n */
    gs_str_t *addr;                /* n */
    gs_str_t *host;                /* n */
} gs_msg_locations_t;

/** Client -> worker data port: one chunk, with gsched's ticket for it. shm: the name of the
 *  client's POSIX shared-memory object to write the bytes into at shm_off (same host), or empty:
 *  the bytes come inline in the DATA answer. */
typedef struct gs_msg_chunk_req {
    uint64_t req_id;
    uint64_t graph_id;
    uint64_t task_id;
    uint64_t client_id;
    gs_bytes_t ticket;
    gs_str_t shm;
    uint64_t shm_off;
} gs_msg_chunk_req_t;

typedef struct gs_msg {
    uint32_t type;                 /* gs_msg_type_t */
    union {
        gs_msg_hello_t hello;
        gs_msg_welcome_t welcome;
        gs_msg_worker_register_t worker_register;
        gs_msg_heartbeat_t heartbeat;
        gs_msg_peers_t peers;
        gs_msg_graph_submit_t graph_submit;
        gs_msg_graph_accepted_t graph_accepted;
        gs_msg_task_assign_t task_assign;
        gs_msg_task_done_t task_done;
        gs_msg_release_t release;          /* RELEASE */
        gs_msg_gather_req_t gather_req;
        gs_msg_data_t data;
        gs_msg_fetch_req_t fetch_req;
        gs_msg_progress_t progress;
        gs_msg_graph_done_t graph_done;
        gs_msg_cancel_t cancel;            /* CANCEL and RELEASE_GRAPH */
        gs_msg_error_t error;
        gs_msg_info_t info;                /* INFO (INFO_REQ, WORKERS_REQ and SHUTDOWN have no fields) */
        gs_msg_bandwidth_t bandwidth;
        gs_msg_replicate_t replicate;
        gs_msg_replicate_done_t replicate_done;
        gs_msg_workers_t workers;
        gs_msg_challenge_t challenge;
        gs_msg_auth_t auth;
        gs_msg_report_req_t report_req;
        gs_msg_report_t report;
        gs_msg_locate_req_t locate_req;
        gs_msg_locations_t locations;
        gs_msg_chunk_req_t chunk_req;
    } u;
    void *owned;                   /* decoder's allocation(s); private */
} gs_msg_t;

/** Name of a message type for logs ("task-assign"); "unknown" otherwise. Static. */
const char *gs_msg_type_name(uint32_t type);

/** Append one complete frame (header + payload) for @a msg to @a out. GS_ERR_INVALID_PARAM for
 *  an unknown type or inconsistent counts, GS_ERR_MSG_TOO_LARGE beyond 4 GiB, GS_ERR_NO_MEMORY.
 *  On error @a out is left as it was. */
gs_status_t gs_msg_encode(const gs_msg_t *msg, gs_buf_t *out);

/** gs_msg_encode() into the empty buffer @a out (no storage: gs_buf_init'ed), whose storage is
 *  one of this thread's spare buffers (gs_frame_storage_take) when the frame is larger than
 *  GS_FRAME_SPARE_MIN and a spare fits it; out->cap is then the spare's capacity, to hand back
 *  with gs_frame_storage_give once the frame is written. GS_ERR_INVALID_PARAM when @a out is
 *  not empty; other errors as gs_msg_encode(), @a out holding nothing or a spare to release. */
gs_status_t gs_msg_encode_spare(const gs_msg_t *msg, gs_buf_t *out);

/** Like gs_msg_encode(), but a DATA message's chunk bytes (msg->u.data.data) are not copied:
 *  @a out gets the frame up to them and *tail_len_p = msg->u.data.data.len; the frame is complete
 *  once the caller sends those bytes right after it (the 4-byte header counts them). The bytes on
 *  the wire are identical to gs_msg_encode()'s. Other types: the whole frame, *tail_len_p = 0.
 *  Errors as gs_msg_encode(); on error @a out is left as it was and *tail_len_p untouched. */
gs_status_t gs_msg_encode_head(const gs_msg_t *msg, gs_buf_t *out, size_t *tail_len_p);

/** Decode one payload (without the 4-byte header). On success *msg_p is filled and owns its
 *  memory; on error nothing is allocated. GS_ERR_PROTO for malformed input, GS_ERR_MSG_TOO_LARGE
 *  for a payload longer than its type's cap (proto/msg_schema.h), checked before any parsing. */
gs_status_t gs_msg_decode(const void *payload, size_t len, gs_msg_t *msg_p);

/** As gs_msg_decode(), except that a DATA message's bytes (msg->u.data.data) are not copied:
 *  they point into @a payload (no alignment guarantee), and neither are the integer tables when
 *  @a payload is 8-byte aligned on a little-endian host (the tables are then aligned too): both
 *  are valid only as long as @a payload is. Every other field is owned as with gs_msg_decode();
 *  release with gs_msg_cleanup(). */
gs_status_t gs_msg_decode_borrow(const void *payload, size_t len, gs_msg_t *msg_p);

/** Release a decoded message's memory (no-op for messages built by hand). */
void gs_msg_cleanup(gs_msg_t *msg);

/**
 * Incremental frame reader for stream transports. Feed bytes as they arrive (or receive them
 * straight into the reader: gs_frame_reader_space / _commit); take complete payloads out. The
 * reader owns its buffer. A frame larger than 4 MiB is reserved once, at its announced size (plus
 * 8 bytes), when its header has been examined by gs_frame_reader_next (and accepted against
 * max_frame). The payload of a frame of more than 64 KiB that is still arriving is moved to an
 * 8-byte boundary in memory (while little of it is in), so its tables decode in place
 * (gs_msg_decode_borrow). Once drained, a large buffer is kept for the next frame only while the
 * last frame handed out was large: the first small frame, or gs_frame_reader_trim(), releases it to the
 * thread's spare buffers (those of detached frames and written frames given back, see
 * gs_frame_storage_free and gs_frame_storage_give; the next frame of more than
 * GS_FRAME_SPARE_MIN bytes on the thread is received into one, its pages already faulted in;
 * gs_frame_reader_shrink releases buffers of more than GS_FRAME_SPARE_MIN bytes there too). So a
 * reader holds one buffer, never more than the largest recent frame (plus less than 64 KiB of
 * bytes that followed it in one read).
 */
typedef struct gs_frame_reader {
    gs_buf_t buf;
    size_t pos;                    /* start of unconsumed bytes */
    uint32_t max_frame;
    uint32_t keep;                 /* private: the last frame handed out was large */
    size_t last;                   /* private: start of that frame (SIZE_MAX: none to detach) */
} gs_frame_reader_t;

void gs_frame_reader_init(gs_frame_reader_t *r, uint32_t max_frame);
void gs_frame_reader_cleanup(gs_frame_reader_t *r);
/** Append received bytes. GS_ERR_NO_MEMORY leaves the reader unchanged. */
gs_status_t gs_frame_reader_feed(gs_frame_reader_t *r, const void *data, size_t len);
/** Next complete payload: GS_OK with *payload_p / *len_p pointing into the reader (valid until
 *  the next feed/next/commit call), GS_INPROGRESS when more bytes are needed (the buffer then
 *  has room for the rest of the frame whose header is in), GS_ERR_MSG_TOO_LARGE when the header
 *  announces more than max_frame (the stream is then unusable; nothing was reserved),
 *  GS_ERR_NO_MEMORY when the announced frame cannot be reserved. */
gs_status_t gs_frame_reader_next(gs_frame_reader_t *r, const uint8_t **payload_p, size_t *len_p);
/** Where the rest of the frame in progress may be received directly: when a frame of at least
 *  @a min bytes (header included) has its header in, is incomplete and is reserved (after
 *  gs_frame_reader_next returned GS_INPROGRESS), *space_p gets the reader's free space and the
 *  number of bytes still missing from that frame is returned (write at most that many); else 0
 *  and *space_p untouched. The space belongs to the reader; valid until the next call on it. */
size_t gs_frame_reader_space(gs_frame_reader_t *r, size_t min, uint8_t **space_p);
/** Account @a n bytes written into the space gs_frame_reader_space() returned (n <= its result). */
void gs_frame_reader_commit(gs_frame_reader_t *r, size_t n);
/** Whether the @a len bytes at @a data (only read) are one or more complete frames, back to back
 *  (0 for none: @a len 0). */
int gs_frames_whole(const uint8_t *data, size_t len);
/** Storage of a detached frame (opaque): release with gs_frame_storage_free(). */
typedef struct gs_frame_storage gs_frame_storage_t;

/** Right after gs_frame_reader_next() returned GS_OK: take the storage that holds that payload,
 *  so the payload stays valid until the caller passes *storage_p to gs_frame_storage_free().
 *  Bytes received after the frame move to a new buffer. GS_ERR_NO_MEMORY: nothing changed.
 *  GS_ERR_INVALID_PARAM when no payload was just handed out (or it was already detached). */
gs_status_t gs_frame_reader_detach(gs_frame_reader_t *r, gs_frame_storage_t **storage_p);
/** Release detached storage (NULL: no-op). One of more than GS_FRAME_SPARE_MIN bytes is kept
 *  as one of this thread's spares (at most 16 and 1 GiB in all; when full, it replaces smaller
 *  ones), which the next large frames reserved by readers, or encoded by gs_msg_encode_spare, on
 *  this thread reuse instead of fresh memory; gs_frame_storage_trim() frees them. */
void gs_frame_storage_free(gs_frame_storage_t *storage);
/** Buffers of more than this many bytes are kept as spares (smaller ones are freed): the C
 *  library maps such blocks afresh (gsched's mmap threshold), so reusing one saves faulting in
 *  and zeroing its pages again. */
#define GS_FRAME_SPARE_MIN (64u << 10)
/** Take this thread's smallest spare buffer of at least @a min bytes out of the spares: the
 *  caller owns it (gs_free it, or hand it back with gs_frame_storage_give) and *cap_p gets its
 *  capacity. NULL when there is none that large, or when @a min is at most GS_FRAME_SPARE_MIN. */
uint8_t *gs_frame_storage_take(size_t min, size_t *cap_p);
/** Give @a data (gs_malloc'ed, @a cap bytes of capacity; ownership passes, NULL: no-op) to this
 *  thread's spares, bounded as gs_frame_storage_free's; freed when it is not kept. */
void gs_frame_storage_give(uint8_t *data, size_t cap);
/** Total capacity of this thread's spare buffers (0: none). */
size_t gs_frame_storage_spare(void);
/** Free this thread's spare buffers. */
void gs_frame_storage_trim(void);

/** Release a retained large buffer if nothing is buffered (for idle connections). */
void gs_frame_reader_trim(gs_frame_reader_t *r);
/** Capacity of a drained large buffer being retained for the next frame, else 0. */
size_t gs_frame_reader_retained(const gs_frame_reader_t *r);
/** Release the buffer if nothing is buffered and it holds more than @a max_kept bytes, whatever
 *  the last frame was (a daemon bounding its receive memory: gsched's connections keep no drained
 *  buffer past their read buffer's size). A buffer of more than GS_FRAME_SPARE_MIN bytes goes to
 *  the thread's spares (bounded to 16 buffers and 1 GiB; connections trim them after a second
 *  without traffic). Returns the bytes released from the reader. */
size_t gs_frame_reader_shrink(gs_frame_reader_t *r, size_t max_kept);

#ifdef __cplusplus
}
#endif
#endif
