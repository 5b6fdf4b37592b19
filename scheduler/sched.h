/**
 * The gsched scheduler as a library (libgsched_sched): usable in-process on any libuv loop (tests,
 * the embedded "local" mode) and wrapped by the thin `gsched` daemon (scheduler/main.c).
 *
 * What it does (protocol in proto/msg.h):
 *  - listens on TCP; every connection must open with HELLO carrying GS_PROTO_VERSION and a
 *    fresh nonce; gsched answers CHALLENGE (its nonce and its proof of the cluster token) and
 *    the peer must answer AUTH with its proof, HMAC-SHA256 keyed by the token over both nonces,
 *    the role and the name (proto/handshake.h, common/auth.h; compared in constant time; the
 *    token never crosses the wire, a recorded AUTH fails on any other connection). Anything
 *    else is answered with ERROR (GS_ERR_VERSION naming both versions / GS_ERR_AUTH /
 *    GS_ERR_PROTO) and the connection is closed before any other message of it is processed.
 *    Accepted peers get WELCOME(id, heartbeat interval; workers also the cluster's data-plane
 *    key, drawn at start and masked for that connection). Ids are assigned by gsched, one per
 *    connection, never reused: a worker's id is what every other message of its connection
 *    (TASK_DONE, DATA, REPLICATE_DONE, BANDWIDTH) is attributed to, never a field it sends.
 *    A connection that has not completed the handshake after the handshake timeout is closed;
 *    before the handshake a connection may send frames of at most GS_SCHED_HELLO_MAX_FRAME
 *    bytes (a larger announced length closes it at once, before the bytes are buffered).
 *  - bounds (gs_sched_params_t, counted in gs_sched_stats_t): at most max_connections open
 *    connections (lowered below the open file limit) and max_connections_per_addr from one IP
 *    address; past a limit a connection that has not completed the handshake is closed to make
 *    room (the oldest whose peer is gone or that has sent nothing for a second, else the oldest
 *    younger one that has sent nothing, else the oldest; other than the new one), else the new
 *    one is answered ERROR(GS_ERR_BUSY) and closed. One loop
 *    iteration accepts at most 64 connections (the rest wait in the listen backlog for the next
 *    one, accepts_deferred_total), so a connect storm cannot keep the loop from reading the
 *    handshakes of connections already accepted; a connection gsched cannot take (out of
 *    memory) is accepted and closed at once (accept_errors_total). After the
 *    handshake a client may send frames of client_max_frame bytes, a worker worker_max_frame;
 *    all connections together reserve at most frame_memory bytes for large frames being
 *    received (a frame that does not fit waits, its connection's reading paused; a holder that
 *    stalls for the handshake timeout meanwhile is closed). A client
 *    that holds no graph and has sent nothing (not even a heartbeat: the client library sends
 *    one every heartbeat interval) for client_idle_timeout_ms is closed.
 *  - workers send WORKER_REGISTER; gsched answers the new worker with PEERS listing every
 *    registered worker *including itself* (a worker skips its own id, known from WELCOME) and
 *    sends PEERS(added = new worker) to the others; a removed worker is announced with
 *    PEERS(removed = id). A worker registering under the name of a live worker is refused
 *    (ERROR GS_ERR_EXISTS, connection closed) and the live one kept, so nobody can evict a
 *    worker by taking its name; a worker restarted under its old name registers once gsched
 *    has removed the old one (its connection closed or its heartbeats timed out). A
 *    registration over the caps below (GS_SCHED_DEFAULT_MAX_UCX_ADDRESS) is refused likewise.
 *  - GRAPH_SUBMIT is validated structurally (see gs_sched_graph_check()) and answered, in order,
 *    by exactly one GRAPH_ACCEPTED or ERROR (the ERROR message starts with
 *    "graph submission (client ref N) rejected:"). Tasks that no output depends on are culled.
 *  - tasks move through an explicit state machine kept in struct-of-arrays tables indexed by
 *    task id (no allocation per transition): waiting -> ready -> assigned -> memory -> released,
 *    or erred; a chunk whose holder dies is lost and, if still needed, its task and any released
 *    ancestors are reset to waiting and recomputed from lineage (across persisted graphs).
 *  - order: at submission every needed task gets a priority, a depth-first post-order from the
 *    outputs (in their listed order, inputs in their listed order; like dask.order): all inputs
 *    of a task come before it and one input's subtree is finished before the next one starts.
 *    Ready tasks are placed lowest priority first (O(log64 n) per task), so a worker is fed the
 *    consumers that free chunks before the generators of the next branch.
 *  - root bound: a root is a task without inputs whose output some needed task consumes (a
 *    generator; generators that are only outputs are ordinary tasks). Each placement pass
 *    places a graph's other ready tasks before any of its roots. A worker W is sent a root task
 *    only while it has queue room and either n(W) < nthreads, or
 *        n(W) < 2 x nthreads + queue bound, and
 *        bytes(W) + the root's declared size <= mem_limit / 2 - other(W),
 *    where n(W) counts W's roots assigned and not reported plus the root chunks W stores whose
 *    needed dependents have not all completed, bytes(W) their sizes (declared while assigned,
 *    reported once stored), mem_limit the worker's (from WORKER_REGISTER, updated by
 *    heartbeats; 0 = unknown: no byte condition) and other(W) the memory its last heartbeat
 *    reported in use less the root chunks counted in n(W) at that time (everything else it
 *    stores). So a worker never accumulates more unconsumed generator outputs than the bound
 *    (at most half its memory, less what other data takes), however many roots are ready;
 *    freed roots count at once, without waiting for a heartbeat. Exception, so that the
 *    bound cannot deadlock a graph
 *    whose consumers need more roots than it allows (e.g. a contraction holding whole rows):
 *    when a graph has no other task ready or assigned, its roots may go to a worker past the
 *    bound while that worker has fewer of its roots assigned and unreported than threads.
 *    gs_sched_stats() counts passes that withheld roots (roots_withheld_total).
 *  - placement: once per loop iteration (uv_check) ready tasks are placed in batches: one
 *    TASK_ASSIGN per worker per graph per iteration. A task without inputs goes to the least
 *    loaded worker with room. A task with inputs goes by the transfer-cost model: for every
 *    live worker W its estimated finish cost is
 *        cost(W) = queue(W) + sum over inputs W does not hold of (L + bytes / bw(H -> W)
 *                                                                 + bytes x D(H))
 *                  + sum over inputs W holds of bytes x D(W),
 *    D(W) = W's disk share (disk_used / (disk_used + mem_used) of its last HEARTBEAT) x its
 *    measured read-back time per byte (unspilled_ns / unspilled_bytes, 1 ns until measured):
 *    among holders, the one likely to have the inputs in memory rather than on disk wins;
 *    queue(W) = tasks sent to W and not reported x W's measured kernel time per task (EWMA of
 *    TASK_DONE run times, 1 ms until measured) / W's threads, H the holder of the input (its
 *    primary holder or a replica) with the highest bw to W, L the per-transfer latency
 *    (xfer_latency_us, default 50 us). The cheapest worker with room (queue room for a worker
 *    holding an input, refill room for others) gets it; ties go to the less loaded. A task
 *    waits for a busy input holder (no queue room) only when that holder's queue(W) + bandwidth
 *    term is below the chosen worker's: waiting is cheaper than moving the bytes. L is left out
 *    of that comparison, so tiny inputs never pin a task. bw(A -> B) is per ordered pair of
 *    workers: the EWMA (weight 0.3 per report) of the BANDWIDTH reports of B about fetches from
 *    A whose mean transfer is >= 256 KiB (smaller ones measure latency), and before any such
 *    report the prior of the pair's kind (both cuda or not x same host name or not;
 *    GS_SCHED_DEFAULT_BW_*, set with GS_SCHED_FIELD_BW_PRIORS). The first measurement of a pair
 *    is logged at info level ("transfer w1 -> w3: 312.4 GB/s (cuda-ipc)"). Cost per decision
 *    O(workers x inputs), no allocation.
 *    Each worker's queue is bounded by 2 x nthreads + a pipeline depth that adapts to the
 *    reported kernel times (about 2 ms of queued work, at least 4 and at most 4096 tasks), so
 *    freed or new workers get work promptly. Load-balanced placement refills a worker once an
 *    eighth of its queue is free (then up to the bound), so tiny tasks travel in large batches.
 *    A layer is sent to a worker once per graph.
 *  - TASK_DONE batches complete tasks, wake dependents and RELEASE intermediates as soon as no
 *    pending task needs them (batched per worker); PROGRESS goes to the client at most every
 *    100 ms and at completion; GRAPH_DONE(status, ntasks, run_ns_total, wall_ns) when every
 *    output chunk exists. Outputs stay on the workers until RELEASE_GRAPH or client disconnect.
 *  - REPLICATE from a client (keys of its live, finished, persisted graphs; (G, ALL) = every
 *    output of G) copies chunks to one worker: gsched sends that worker REPLICATE naming a
 *    holder of each chunk not there yet; the worker fetches them over its peer-fetch path,
 *    keeps them as stored keys and answers REPLICATE_DONE; gsched records the extra holders and
 *    answers the client REPLICATE_DONE (GS_OK, or the error naming the failure; GS_ERR_WORKER_LOST
 *    if the target is removed first). A chunk with copies survives the loss of any of its
 *    holders (a copy becomes the primary, nothing is recomputed), placement counts every holder,
 *    and releasing the chunk releases every copy. Copies are kept on worker slots 0..63 only.
 *  - REPORT_REQ(req, graph) from a client is answered with REPORT: the graph's performance report
 *    (one self-contained HTML page, built on the loop from a fresh dashboard snapshot) when the
 *    graph is the client's and gsched still knows it (running, kept, or one of the last 16
 *    released), else GS_ERR_NOT_FOUND naming why (also when no dashboard is served). The
 *    dashboard itself (scheduler/dash/dash.h, docs/dashboard.md) runs in its own threads and
 *    reads snapshots the loop publishes.
 *  - WORKERS_REQ from a client is answered with WORKERS (every live worker: id, name, host,
 *    backend, control address, device, threads, memory).
 *  - GATHER_REQ from a client: one GATHER_REQ per key is relayed to the worker holding it, and
 *    the DATA answers are relayed back with the client's req_id. A key that is not an output
 *    of a live graph of that client is answered with DATA(status GS_ERR_NOT_FOUND); a key being
 *    (re)computed is answered when it exists (or with the graph's error). At most 8 keys of a
 *    client (and about 1 GiB; always at least one) are requested from workers and not yet
 *    written to the client; the others wait in order. DATA of 256 KiB or more is written to the
 *    client from the frame it arrived in (not re-encoded).
 *  - LOCATE_REQ from a client (direct gathers): one LOCATIONS answers every key, in order: for
 *    an output of a live graph of that client stored on a live worker with a data port (given in
 *    WORKER_REGISTER's data_addr, kept only when it parses as host:port), the worker's data
 *    address and host, the task's bytes, and a ticket (common/auth.h: gs_auth_gather_ticket of
 *    the client's id and the key under the data-plane key); for any other key (another client's,
 *    being recomputed, no data port) an empty address: the client relays it with GATHER_REQ. No
 *    addresses when gsched runs TLS. gsched keeps no state for it.
 *  - CANCEL(graph) from the client stops scheduling it and answers GRAPH_DONE(GS_ERR_CANCELED);
 *    CANCEL of a finished graph is ignored. RELEASE_GRAPH drops the graph (deferred while later
 *    graphs still use its chunks as externals; a running graph is canceled without GRAPH_DONE).
 *    A client disconnect cancels and releases all its graphs.
 *  - to workers, CANCEL(graph) means "forget this graph": drop its queued tasks and its layers.
 *    It is sent once to every worker that received tasks of the graph, when the graph fails,
 *    is canceled or is released, followed by RELEASE for the graph's chunks held there. Layers
 *    are sent again whenever a worker gets a task of a graph while it has no task and no chunk
 *    of that graph (it may have evicted them from an idle cache). RELEASE or CANCEL for keys or graphs a worker
 *    does not know must be ignored. A worker that stored a key it is assigned again (after a
 *    fault) simply replaces it.
 *  - faults: a worker whose connection drops, that sends ERROR (it is leaving: its device is
 *    lost, worker/worker.h; logged with its message) or that misses heartbeats for the heartbeat
 *    timeout is removed (time gsched's own loop stood still is not counted, nor in the handshake
 *    timeout of a connection that has not registered yet; silence is measured up to the end of
 *    the loop's last socket read, not to the moment the housekeeping timer runs: a late timer
 *    does not blame the worker for heartbeats waiting unread): its assigned tasks go back to
 *    ready/waiting, each counting
 *    one failure; chunks held only there are lost and recomputed from lineage when still needed.
 *    A task that was on more than allowed_failures removed workers fails with an error naming
 *    graph, task id, layer and block. Task runtime limit (task_timeout_ms, off by default): a
 *    task assigned to a worker and not reported within the limit counts one failure like a
 *    removed worker's and goes back to ready; past allowed_failures its graph fails
 *    (GS_ERR_TIMED_OUT) naming task, layer, block, worker and the limit. gsched knows only when
 *    it sent a task and workers queue tasks, so the limit is measured from the assignment and
 *    includes queueing: set it far above a task's run time plus the queue's (2 x nthreads +
 *    the pipeline depth tasks). The worker is not told (the protocol has no per-task cancel);
 *    its late result is released like any result nobody waits for, and its queue slot stays
 *    counted until it reports. A worker that timed out a task gets no new task until it
 *    reports one (unless every live worker is in that state), so the retry goes elsewhere;
 *    time gsched's own loop stood still is not counted (as for heartbeats); counted in
 *    tasks_timed_out_total. Expiry is checked every eighth of the limit (O(tasks held) each). A task reported with status != GS_OK fails its graph with
 *    the worker's message -- except GS_ERR_WORKER_LOST, which a worker reports when it could
 *    not fetch an input from a peer: the task is retried after a back-off (10 ms doubling, at most
 *    a third of the heartbeat timeout, so that retries outlast the detection of a dead input
 *    holder; at most GS_SCHED_FETCH_RETRIES times, then the graph fails naming the task). With no worker at all tasks wait (logged
 *    once as a warning). Late messages from a removed worker are ignored; results nobody
 *    expects are released on the worker that reports them.
 *
 * Threading: everything runs on the loop's thread; the handle is not thread-safe. To stop a
 * scheduler running on another thread, wake that loop (uv_async) and call gs_sched_stop there.
 *
 * Process-wide requirement: writing to a closed socket raises SIGPIPE; the embedding process
 * must ignore it (signal(SIGPIPE, SIG_IGN)); the gsched daemon does.
 */
#ifndef GS_SCHEDULER_SCHED_H
#define GS_SCHEDULER_SCHED_H

#include "proto/msg.h"

#include <gsched/status.h>
#include <stdint.h>
#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_sched *gs_sched_h;

#define GS_SCHED_DEFAULT_PORT 8786
#define GS_SCHED_DEFAULT_HEARTBEAT_MS 1000u
#define GS_SCHED_DEFAULT_HEARTBEAT_TIMEOUT_MS 10000u
#define GS_SCHED_DEFAULT_ALLOWED_FAILURES 3u
#define GS_SCHED_DEFAULT_HANDSHAKE_TIMEOUT_MS 10000u
/** Largest frame a connection may send before its handshake has completed (HELLO is capped at
 *  8 KiB by the schema, AUTH at 256 bytes; a version 1 HELLO carried a token of <= 4096 bytes,
 *  so it still arrives whole and is told the version). A header announcing more closes the
 *  connection at once (logged, counted in refused_total), so a peer that is not speaking the
 *  protocol (plain text, a 2 GB length) holds no buffer until the handshake timeout. After the
 *  handshake the limit is max_frame. */
#define GS_SCHED_HELLO_MAX_FRAME (64u * 1024u)
/** Connection bounds (gs_sched_params_t max_connections, max_connections_per_addr). */
#define GS_SCHED_DEFAULT_MAX_CONNECTIONS 4096u
#define GS_SCHED_DEFAULT_MAX_CONNECTIONS_PER_ADDR 512u
/** File descriptors left free below RLIMIT_NOFILE: max_connections is lowered to the soft limit
 *  less this, so the connection limit is reached before accept() fails with EMFILE. */
#define GS_SCHED_FD_RESERVE 64u
/** A client connection without graphs silent this long is closed (0 = never). The client library
 *  heartbeats every heartbeat interval (WELCOME), so only dead or foreign connections go quiet;
 *  a stall of gsched's own loop is not counted. */
#define GS_SCHED_DEFAULT_CLIENT_IDLE_TIMEOUT_MS 60000u
/** Bytes all connections together may reserve for large frames being received. */
#define GS_SCHED_DEFAULT_FRAME_MEMORY (4ull << 30)
/** Times a task is retried after its worker reported GS_ERR_WORKER_LOST (input fetch failed). */
#define GS_SCHED_FETCH_RETRIES 10u
/** Largest graph gsched accepts (task ids are 32-bit internally). */
#define GS_SCHED_MAX_TASKS 0x7fffffffull
/** Largest output size a task may declare (64 TiB); larger is refused as implausible. */
#define GS_SCHED_MAX_TASK_NBYTES (1ull << 46)

#define GS_SCHED_FIELD_HOST 0x1u
#define GS_SCHED_FIELD_PORT 0x2u
#define GS_SCHED_FIELD_TOKEN 0x4u
#define GS_SCHED_FIELD_HEARTBEAT_MS 0x8u
#define GS_SCHED_FIELD_HEARTBEAT_TIMEOUT_MS 0x10u
#define GS_SCHED_FIELD_ALLOWED_FAILURES 0x20u
#define GS_SCHED_FIELD_MAX_FRAME 0x40u
#define GS_SCHED_FIELD_HANDSHAKE_TIMEOUT_MS 0x80u
#define GS_SCHED_FIELD_BW_PRIORS 0x100u
#define GS_SCHED_FIELD_XFER_LATENCY_US 0x200u
#define GS_SCHED_FIELD_MAX_CONNECTIONS 0x400u          /* max_connections, max_connections_per_addr */
#define GS_SCHED_FIELD_CLIENT_IDLE_TIMEOUT_MS 0x800u
#define GS_SCHED_FIELD_FRAME_MEMORY 0x1000u
#define GS_SCHED_FIELD_ROLE_MAX_FRAME 0x2000u          /* client_max_frame, worker_max_frame */
#define GS_SCHED_FIELD_MAX_UCX_ADDRESS 0x10000u
#define GS_SCHED_FIELD_MAX_REGISTER_STRING 0x20000u
#define GS_SCHED_FIELD_TASK_TIMEOUT_MS 0x40000u
#define GS_SCHED_FIELD_CHURN 0x80000u                  /* churn_max, churn_window_ms */
#define GS_SCHED_FIELD_DASHBOARD 0x100000u             /* dashboard_address */
#define GS_SCHED_FIELD_TLS 0x200000u                   /* tls_ca_file, tls_cert, tls_key, tls_require_client_cert */

/** Task runtime limit: off by default (task_timeout_ms 0), like Dask's. See the faults item
 *  of the overview above. */
#define GS_SCHED_DEFAULT_TASK_TIMEOUT_MS 0u
/** Churn cap: a worker that leaves (connection lost, heartbeats missed) within churn_window_ms
 *  of registering counts against its peer IP address; once churn_max have been counted in one
 *  window (a window opens at the first such departure after the last one closed), further
 *  registrations from that address are refused (ERROR GS_ERR_BUSY naming the wait, connection
 *  closed, counted in churn_refused_total and refused_total) until the window closes. Stops a
 *  crash-looping or hostile worker from registering and leaving in a tight loop (each
 *  registration and removal is broadcast to every worker), while a host starting many workers
 *  at once, or workers that ran a while and rejoin after a pause, are never refused. Counts are
 *  kept per address (at most 65536 addresses; past that the history is forgotten). */
#define GS_SCHED_DEFAULT_CHURN_MAX 20u
#define GS_SCHED_DEFAULT_CHURN_WINDOW_MS 10000u

/** Registration caps: a WORKER_REGISTER whose UCX address is longer than max_ucx_address bytes,
 *  or whose name, host or backend is longer than max_register_string bytes, is answered with
 *  ERROR (GS_ERR_MSG_TOO_LARGE) and its connection closed (counted in refused_total). Each
 *  registration is re-sent to every worker, so without a cap a few registrations could make
 *  gsched hold and send gigabytes. The address default leaves room for ucp worker addresses of
 *  multi-rail GPU nodes (every transport of 8 NICs), which reach several KiB. */
#define GS_SCHED_DEFAULT_MAX_UCX_ADDRESS (16u * 1024u)
#define GS_SCHED_DEFAULT_MAX_REGISTER_STRING 256u

/** Default bandwidth priors (GB/s = bytes/ns) of the transfer model, by pair kind, used until a
 *  pair has been measured: two cpu workers on one host (UCX over tcp loopback or shm), on two
 *  hosts (~10 GbE), two cuda workers on one host (staged copies; CUDA IPC measures far higher),
 *  on two hosts (~100 Gb/s fabric). A pair is "cuda" when both workers' backend is not "cpu",
 *  "one host" when their registered host names are equal. */
#define GS_SCHED_DEFAULT_BW_CPU_LOCAL_GBPS 2.0
#define GS_SCHED_DEFAULT_BW_CPU_REMOTE_GBPS 1.0
#define GS_SCHED_DEFAULT_BW_GPU_LOCAL_GBPS 20.0
#define GS_SCHED_DEFAULT_BW_GPU_REMOTE_GBPS 10.0
/** Default fixed cost per input moved (request round trip), microseconds. */
#define GS_SCHED_DEFAULT_XFER_LATENCY_US 50u

/** Scheduler parameters. A field is read only when its bit is set in field_mask (UCX style);
 *  unset fields take the defaults shown. Strings are copied by gs_sched_create(). */
typedef struct gs_sched_params {
    uint32_t field_mask;
    const char *host;              /* address to bind: IPv4 or IPv6 literal; default "127.0.0.1".
                                      A non-loopback address needs a non-empty token, or TLS
                                      with client certificates required
                                      (gs_sched_create refuses it otherwise) */
    int port;                      /* 0..65535, 0 = any free port; default 8786 */
    const char *token;             /* cluster token peers must present; default "" (peers must
                                      then present an empty token) */
    uint32_t heartbeat_ms;         /* interval announced to peers in WELCOME (> 0) */
    uint32_t heartbeat_timeout_ms; /* a worker silent this long is removed (> heartbeat_ms) */
    uint32_t allowed_failures;     /* worker deaths a task may survive (0..250) */
    uint32_t max_frame;            /* largest accepted frame; 0 = GS_PROTO_DEFAULT_MAX_FRAME */
    uint32_t handshake_timeout_ms; /* close connections that have not sent HELLO by then (> 0) */
    double bw_cpu_local_gbps;      /* GS_SCHED_FIELD_BW_PRIORS: the four priors (> 0 each) */
    double bw_cpu_remote_gbps;
    double bw_gpu_local_gbps;
    double bw_gpu_remote_gbps;
    uint32_t xfer_latency_us;      /* GS_SCHED_FIELD_XFER_LATENCY_US (0 allowed) */
    uint32_t max_ucx_address;      /* GS_SCHED_FIELD_MAX_UCX_ADDRESS: bytes (> 0) */
    uint32_t max_register_string;  /* GS_SCHED_FIELD_MAX_REGISTER_STRING: bytes (> 0) */
    /* Connection bounds. A connection past either limit is accepted and closed at once
     * (conns_refused_total) -- unless connections that have not completed the handshake hold
     * the slots: then the oldest of them (of the same address for the per-address limit) is
     * closed instead (conns_evicted_total), so idle unauthenticated connections cannot lock out
     * a real peer. max_connections is lowered to RLIMIT_NOFILE - GS_SCHED_FD_RESERVE. */
    uint32_t max_connections;      /* > 0; default GS_SCHED_DEFAULT_MAX_CONNECTIONS */
    uint32_t max_connections_per_addr; /* > 0; per peer IP address; default 512 */
    uint32_t client_idle_timeout_ms; /* close a client that holds no graph and sent nothing (not
                                      even a heartbeat) this long (idle_closed_total); 0 = never;
                                      default GS_SCHED_DEFAULT_CLIENT_IDLE_TIMEOUT_MS */
    uint64_t frame_memory;         /* bytes all connections may reserve for frames larger than
                                      GS_CONN_BUDGET_MIN_FRAME being received (proto/conn.h
                                      gs_conn_budget_t: a frame that does not fit waits, reading
                                      of its connection paused; a frame larger than this closes
                                      its connection; while frames wait, a connection holding
                                      memory that receives nothing for handshake_timeout_ms is
                                      closed); 0 = unbounded; default 4 GiB */
    uint32_t client_max_frame;     /* largest frame of a client after the handshake; 0 = max_frame */
    uint32_t worker_max_frame;     /* largest frame of a worker after the handshake; 0 = max_frame */
    uint32_t task_timeout_ms;      /* GS_SCHED_FIELD_TASK_TIMEOUT_MS: a task assigned and not
                                      reported within this is retried elsewhere (counting one
                                      failure); 0 = off (default) */
    uint32_t churn_max;            /* GS_SCHED_FIELD_CHURN: short-lived workers per address per
                                      window before registrations are refused (0 = no cap);
                                      default GS_SCHED_DEFAULT_CHURN_MAX */
    uint32_t churn_window_ms;      /* > 0; default GS_SCHED_DEFAULT_CHURN_WINDOW_MS */
    const char *dashboard_address; /* GS_SCHED_FIELD_DASHBOARD: serve the dashboard (pages, /api,
                                      /metrics; docs/dashboard.md) on "HOST:PORT" (numeric host;
                                      port 0 = any free port; a non-loopback host needs a token,
                                      which the dashboard then asks for); NULL or "none" = no
                                      dashboard (default for the library; the gsched daemon
                                      serves GS_DASH_DEFAULT_ADDRESS) */
    int dashboard_fallback;        /* GS_SCHED_FIELD_DASHBOARD: when the dashboard's port is taken,
                                      serve on any free port instead (logged as a warning) rather
                                      than fail gs_sched_listen */
    /* GS_SCHED_FIELD_TLS: every client and worker connection speaks TLS 1.2+ (proto/tls.h).
     * tls_cert/tls_key (PEM, required): gsched's certificate, whose name (or IP) must match the
     * host peers connect to; tls_ca_file (required): the CAs of peer certificates. With
     * tls_require_client_cert, peers without a certificate from tls_ca_file are refused in the
     * handshake, and a non-loopback host may then go without a token (the certificate is the
     * credential). Files are read by gs_sched_create (a bad one: GS_ERR_INVALID_PARAM). */
    const char *tls_ca_file;
    const char *tls_cert;
    const char *tls_key;
    int tls_require_client_cert;
} gs_sched_params_t;

/** Counters for tests and monitoring (a snapshot). */
typedef struct gs_sched_stats {
    uint32_t nworkers;             /* registered, live */
    uint32_t nclients;             /* handshaken client connections */
    uint32_t nconnections;         /* all open connections, handshaken or not */
    uint64_t ngraphs;              /* graphs held (running, finished-but-kept, failed-but-kept) */
    uint64_t ngraphs_active;       /* graphs whose outputs are not complete yet */
    uint64_t tasks_done_total;     /* task completions accepted */
    uint64_t stalls_total;         /* times gsched's own loop stood still > 0.5 s (not counted
                                      against workers' heartbeats) */
    uint64_t tasks_assigned_total; /* task assignments sent */
    uint64_t tasks_recomputed_total; /* tasks reset to waiting to recompute lost chunks */
    uint64_t roots_withheld_total; /* placement passes that held a ready root task back because
                                      of the root bound although a worker had queue room */
    uint64_t workers_lost_total;   /* workers removed because of connection loss / timeout */
    uint64_t refused_total;        /* connections refused at the handshake (including those
                                      closed for an oversized or malformed frame before it) or
                                      at registration (name taken, over the caps) */
    uint64_t replicas_total;       /* chunk copies recorded from REPLICATE */
    uint64_t bw_reports_total;     /* BANDWIDTH entries accepted */
    uint64_t conns_refused_total;  /* connections closed at accept: over max_connections or
                                      max_connections_per_addr */
    uint64_t conns_evicted_total;  /* connections not yet handshaken closed to make room */
    uint64_t accept_errors_total;  /* accept() failures (e.g. EMFILE), connections refused for want of memory */
    uint64_t accepts_deferred_total; /* connections left for the next loop iteration (GS__ACCEPTS_PER_ROUND) */
    uint64_t idle_closed_total;    /* clients closed by client_idle_timeout_ms */
    uint64_t frame_bytes_reserved; /* bytes of large frames being received, now (<= frame_memory) */
    uint64_t frame_bytes_peak;     /* highest frame_bytes_reserved */
    uint64_t frame_waits_total;    /* frames that waited for frame memory */
    uint64_t frames_refused_total; /* frames larger than frame_memory (connection closed) */
    uint64_t frames_stalled_total; /* connections closed for holding frame memory without
                                      receiving anything for the handshake timeout while
                                      others waited for it */
    uint64_t tasks_timed_out_total; /* tasks not reported within task_timeout_ms */
    uint64_t churn_refused_total;  /* registrations refused by the churn cap */
    uint64_t auth_failed_total;    /* handshakes whose AUTH proof was wrong (wrong token, or a
                                      replayed answer); also in refused_total */
    uint64_t msgs_oversized_total; /* connections closed for a frame over their limit or a
                                      message over its type's cap (proto/msg_schema.h) */
    /* Where gsched's memory goes (issue 12), now and at the peak: */
    uint64_t conn_read_bytes;      /* receive buffers of all connections (their frame readers;
                                      large frames being received included) */
    uint64_t conn_read_peak;
    uint64_t conn_write_bytes;     /* bytes queued to peers and not yet written */
    uint64_t conn_write_peak;
    uint64_t heap_used_bytes;      /* malloc: bytes allocated now (glibc mallinfo2: arena bytes in
                                      use + mmapped blocks; 0 where unknown) */
    uint64_t heap_free_bytes;      /* malloc: bytes it holds free (fordblks); what it can give
                                      back to the system is returned by the housekeeping timer */
    uint64_t heap_trims_total;     /* times the housekeeping timer returned free heap memory */
    uint64_t rss_bytes;            /* the process's resident set size (0 where unknown) */
} gs_sched_stats_t;

/** The dashboard's bound address "HOST:PORT" (NUL-terminated into @a buf of @a len bytes) after
 *  a successful gs_sched_listen(). GS_ERR_NOT_FOUND when no dashboard is served,
 *  GS_ERR_INVALID_PARAM before listen or when @a len is too small. */
gs_status_t gs_sched_dashboard_address(gs_sched_h sched, char *buf, size_t len);

/** Create a scheduler on @a loop (borrowed; it must outlive the scheduler). Nothing is bound
 *  until gs_sched_listen(). @a params may be NULL (all defaults). Errors: GS_ERR_INVALID_PARAM
 *  (message names the field), GS_ERR_NO_MEMORY. *sched_p is written only on success and is
 *  owned by the caller (gs_sched_destroy). */
gs_status_t gs_sched_create(const gs_sched_params_t *params, uv_loop_t *loop, gs_sched_h *sched_p);

/** Bind host:port and start accepting connections and the housekeeping timer, and the
 *  dashboard when one was asked for (its address in use fails the call likewise). Errors:
 *  GS_ERR_INVALID_PARAM (host is not a numeric address), GS_ERR_IO / GS_ERR_BUSY (bind or
 *  listen failed, e.g. port in use; message names the address), GS_ERR_INVALID_PARAM if called
 *  twice or after gs_sched_stop(). */
gs_status_t gs_sched_listen(gs_sched_h sched);

/** The bound TCP port (useful with port 0), or -1 before a successful gs_sched_listen(). */
int gs_sched_port(gs_sched_h sched);

/** Write the bound address as "HOST:PORT" into @a buf (@a len bytes, NUL-terminated; IPv6 hosts
 *  in brackets). When bound to a wildcard address the host printed is the first non-loopback
 *  IPv4 address of the machine, else 127.0.0.1 (an address peers can connect to).
 *  GS_ERR_INVALID_PARAM before listen or if @a len is too small. */
gs_status_t gs_sched_address(gs_sched_h sched, char *buf, size_t len);

/** Begin an orderly shutdown (idempotent, loop thread only): send SHUTDOWN to every worker
 *  first (before anything is torn down: workers exit on it instead of rejoining), stop
 *  listening, flush and close every connection, close the scheduler's handles. Running
 *  graphs are abandoned (clients see their connection close). The loop's uv_run() returns once
 *  everything is closed (if nothing else keeps it alive). */
void gs_sched_stop(gs_sched_h sched);

/** Fill @a stats_p with current counters. */
void gs_sched_stats(gs_sched_h sched, gs_sched_stats_t *stats_p);

/** Current transfer estimate from worker @a from_id to worker @a to_id (ids from WELCOME) in
 *  GB/s (bytes/ns): the EWMA of reported measurements, or the prior of the pair's kind before
 *  any (*measured_p 0). GS_ERR_NOT_FOUND when either is not a live worker. */
gs_status_t gs_sched_bandwidth(gs_sched_h sched, uint64_t from_id, uint64_t to_id, double *gbps_p,
                               int *measured_p);

/** Free the scheduler. Calls gs_sched_stop() if needed and then runs the loop (UV_RUN_ONCE)
 *  until the scheduler's own handles have closed; call it on the loop's thread while uv_run()
 *  is not executing. NULL is fine. */
void gs_sched_destroy(gs_sched_h sched);

/** Validate a submitted graph's structure without any cluster state (externals are checked
 *  only for being referenced correctly, not for existing): flags known, ntasks <=
 *  GS_SCHED_MAX_TASKS, CSR offsets consistent, every task's layer < nlayers, every dependency
 *  either an earlier task (topological order; a later or equal id is a cycle/forward
 *  dependency) or an index into externals, declared sizes <= GS_SCHED_MAX_TASK_NBYTES, outputs
 *  < ntasks, layer names none or one per layer. GS_ERR_INVALID_PARAM with a message naming the first problem. Used by gsched on
 *  every GRAPH_SUBMIT and by the fuzz target. */
gs_status_t gs_sched_graph_check(const gs_msg_graph_submit_t *g);

#ifdef __cplusplus
}
#endif
#endif
