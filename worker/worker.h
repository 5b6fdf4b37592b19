/**
 * gworker as a library: one worker of a gsched cluster, driven by a libuv loop the caller owns.
 *
 * A worker connects to gsched (HELLO role worker + token, WELCOME, WORKER_REGISTER with its UCX
 * address), heartbeats, executes the tasks gsched assigns (TASK_ASSIGN batches) with a chunkops
 * backend, keeps their output chunks in a chunk store until gsched releases them, serves chunks
 * to gsched (GATHER_REQ -> DATA) and to peer workers over UCX, and fetches missing inputs from
 * peers over UCX. Completions go back in TASK_DONE batches, flushed at the end of every loop
 * iteration (or earlier when a batch is large).
 *
 * Threads. Every function here must be called on the loop's thread. The worker adds its own
 * threads only for the "pool" execution mode (cpu backend): nthreads kernel threads that never
 * touch the loop; their completions come back through a queue and a uv_async_t. In "streams"
 * mode (cuda backend) kernels are enqueued from the loop on several backend streams and their
 * completion (gs_chunkops_ops_t.notify) comes back the same way. Some backend calls block the
 * thread that makes them for the whole computation (cuSOLVER's QR and SVD synchronise inside):
 * in streams mode, tasks that are a QR or an SVD (linalg layers) are handed to one launcher
 * thread per worker (started on the first such task, joined at stop), which enqueues them on
 * its own backend stream; their completion comes back like every other. File reads and writes
 * (array files) go to file threads instead, min(nthreads, running slots) of them with a stream
 * each, so several chunks are read and decoded at once as in pool mode (worker/launch.c).
 * Environment:
 * GS_WORKER_LAUNCHER=off launches them from the loop like the rest (for comparisons). The loop
 * never blocks on a kernel, a copy or a transfer.
 *
 * Memory. Chunk memory comes from the backend (mem_alloc) and is accounted against the
 * effective memory limit (the backend's). A task is admitted (its output and the inputs it
 * must fetch allocated) in assignment order while memory allows; a task that does not fit
 * waits until memory is released, and meanwhile later queued tasks that fit may run. Tasks
 * without inputs (generators) may fill only 3/4 of the memory, so tasks consuming stored
 * chunks (whose completion lets gsched release them) always find room; the reserve is lifted
 * when admission has been blocked with nothing running for 100 ms. When nothing can free
 * memory (nothing running or fetching and nothing released for memory_wait_ms), or when the
 * task alone needs more than the limit, the task fails with an error naming the task and the
 * sizes. A worker cannot hand queued tasks back, so a scheduler that fills a worker's queue
 * with generators whose outputs exceed its memory gets that error rather than a hang.
 * Spilling (cpu backend, unless no_spill; worker/spill/spill.h): above spill_threshold of the
 * limit, stored chunks nothing is using move to files in the worker's local directory, least
 * recently used first, down to spill_target; a task that does not fit makes room the same way
 * and then waits for the writes, and inputs on disk are read back at admission (so those of
 * the tasks admitted ahead of execution load while others compute). The generators' share is
 * spill_pause (0.75, the 3/4 above). A failure of the disk tier fails the waiting task with a
 * message naming the worker, the tier, the sizes and the limit (GS_ERR_NO_RESOURCE).
 * In streams mode with a backend that has to_host/to_device ("cuda"), the tier below the
 * backend's memory is host memory (host_limit), with the same policy, and the disk is below
 * it: host copies beyond the host tier's threshold go to the local directory (cascade.c);
 * inputs of queued tasks on the lower tier are brought up ahead of admission while memory is
 * under spill_threshold (spill.h).
 *
 * Peer transfers. One ucp context (active messages) and one ucp worker whose event fd is
 * polled by the loop. Endpoints are created lazily from the PEERS addresses and closed when
 * PEERS removes a worker. A fetch sends FETCH_REQ (proto/msg.h encoding as the AM header); the
 * owner answers with DATA whose AM payload is the chunk (UCX picks eager or rendezvous by
 * size). Transports are UCX's defaults (UCX_TLS is not set). Endpoints use peer-failure
 * handling, which UCX 1.13 supports only on tcp among the transports of one host, so two
 * workers of one host talk over tcp unless ucx_shm is set (see there). In streams mode chunk
 * memory is device memory. The path is chosen per pair of workers:
 *  - CUDA workers of one host: CUDA IPC (worker/ipc.c: the owner lends its device memory, the
 *    fetcher copies it peer-to-peer over NVLink/PCIe);
 *  - UCX reporting CUDA memory support (ucp_context_query memory types, logged at start):
 *    chunks of >= 1 MiB go to UCX as device pointers (rendezvous);
 *  - otherwise: staged through a host buffer (copy_to_host / copy_from_host on a stream).
 *
 * Contract with gsched (what a scheduler must do, besides proto/msg.h):
 *  - tasks are assigned when all their dependencies exist somewhere; a dependency whose
 *    dep_worker is the receiving worker's own id must be in its store, otherwise the task fails
 *    with GS_ERR_NOT_FOUND;
 *  - dependencies on other workers are fetched over UCX from the worker named by dep_worker,
 *    which must have been announced in PEERS; a fetch that fails (the peer is unknown, lost,
 *    removed by PEERS, does not have the key, or does not answer within fetch_timeout_ms)
 *    fails the task with GS_ERR_WORKER_LOST, so gsched may retry or reassign it; several tasks
 *    needing one remote key share one fetch;
 *  - fetched copies are private to the worker (freed when the tasks needing them are done), so
 *    a completed task's output is the only key a worker adds to its store;
 *  - layers: a layer is sent once per (worker, graph) and cached by (graph, layer id) until
 *    CANCEL(graph). A graph with no task and no key left on the worker keeps its layers in a
 *    bounded idle cache (256 graphs / 64 MiB of encoded layers, oldest dropped
 *    first): a scheduler must send the layers again to a worker that holds no task and no key
 *    of the graph, and should send CANCEL(graph) to every worker that got layers of a graph
 *    when it drops the graph. A task naming a layer the worker does not have fails with
 *    GS_ERR_NOT_FOUND;
 *  - CANCEL(graph) drops the graph's queued tasks, its chunks and its layers; running tasks of
 *    the graph finish and are not reported;
 *  - a failed task is reported with status != GS_OK and a message "task T (layer NAME, block B)
 *    of graph G failed: ..."; canceled tasks are not reported;
 *  - SHUTDOWN stops the worker cleanly (stop_cb with GS_OK); losing the connection stops it
 *    with GS_ERR_SCHEDULER_LOST.
 *
 * Device loss. When a task's kernel reports GS_ERR_DEVICE_LOST (chunkops.h: a CUDA sticky
 * error such as an illegal address; the context can run nothing any more), the worker reports
 * that task failed with GS_ERR_DEVICE_LOST and "kernel NAME lost the device: CAUSE" (NAME the
 * user kernel's symbol, else the layer's name; CAUSE the backend's health(), e.g. the CUDA
 * error string), sends gsched an ERROR (GS_ERR_DEVICE_LOST, the same cause) saying it is
 * leaving, and stops with GS_ERR_DEVICE_LOST once gsched has closed the connection (at most
 * 2 s later: closing first with gsched's messages unread would reset the connection and could
 * lose the ERROR and the failed task in gsched's socket). Nothing else is reported
 * after the loss: tasks completing later (they failed with the same error, or ran on a broken
 * device) are dropped, and gsched reassigns them and recomputes the worker's chunks as for any
 * lost worker. The task blamed is the first whose completion reports the loss, unless that
 * one runs a built-in kernel and a user's kernel is still running: a sticky CUDA error reaches
 * every stream, so the user's kernel is then blamed (reported at once; its own completion is
 * dropped) and the first one goes unreported. gworker then
 * exits with GS_WORKER_EXIT_DEVICE_LOST instead of rejoining: only a new process gets the
 * device back.
 */
#ifndef GS_WORKER_H
#define GS_WORKER_H

#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_worker *gs_worker_h;

/** Called once when the worker has stopped (every handle closed, nothing running) because of
 *  gs_worker_stop(), a SHUTDOWN from gsched (GS_OK), a lost scheduler connection
 *  (GS_ERR_SCHEDULER_LOST), a refused handshake (GS_ERR_AUTH / GS_ERR_VERSION / the ERROR's
 *  status) or a failure to connect (GS_ERR_CONN_REFUSED, GS_ERR_TIMED_OUT). Runs on the loop,
 *  never from inside a gs_worker_* call. The worker may be destroyed from inside the callback. */
typedef void (*gs_worker_stop_cb)(gs_worker_h worker, gs_status_t reason, void *arg);

typedef enum gs_worker_exec {
    GS_WORKER_EXEC_AUTO = 0,    /* pool for "cpu", streams for anything else */
    GS_WORKER_EXEC_POOL = 1,    /* kernels on nthreads worker threads (host-memory backends) */
    GS_WORKER_EXEC_STREAMS = 2  /* kernels enqueued on nstreams backend streams + notify;
                                   chunk memory is treated as device memory (staged through
                                   host buffers for transfers) */
} gs_worker_exec_t;

/**
 * Worker parameters. Zero-initialise and set what you need: every field's zero value means
 * its documented default, and fields added later keep that rule. Strings are copied by
 * gs_worker_create().
 */
typedef struct gs_worker_params {
    const char *scheduler;        /* "tcp://host:port" or "host:port"; required */
    const char *name;             /* NULL: "<hostname>-<pid>" */
    const char *token;            /* cluster token; NULL: "" */
    const char *backend;          /* "cpu" (default) or "cuda" */
    int device;                   /* CUDA device ordinal (cuda only) */
    int nthreads;                 /* kernel threads in pool mode, file threads in streams mode
                                     (at most the running slots); 0: number of online CPUs */
    uint64_t memory_limit;        /* host backend memory (cpu backend), bytes; 0: auto: the
                                     memory this process may use (physical memory bounded by
                                     its cgroup, common/sysmem.h) divided by memory_share */
    uint64_t device_memory_limit; /* device arena (cuda backend), bytes; 0: backend default */
    int nstreams;                 /* streams mode: number of streams; 0: 4 */
    int stream_depth;             /* streams mode: tasks in flight per stream; 0: 2 */
    int exec;                     /* gs_worker_exec_t */
    uint32_t connect_timeout_ms;  /* keep retrying a refused connection this long; 0: 10000 */
    uint32_t fetch_timeout_ms;    /* a peer fetch not answered within this fails; 0: 30000 */
    uint32_t memory_wait_ms;      /* see "Memory" above; 0: 30000 */
    uint32_t heartbeat_ms;        /* 0: the interval gsched sends in WELCOME (1000 if 0) */
    int ucx_shm;                  /* nonzero: let UCX use its shared-memory transports (sysv,
                                     posix, cma) between workers of one host. UCX 1.13 cannot
                                     detect a dead peer on those, so endpoints then run without
                                     peer-failure handling and a dead peer is noticed only
                                     through PEERS(removed) and fetch_timeout_ms. Default (0):
                                     endpoints detect dead peers, and on one host UCX uses tcp */
    int transfer_checksum;        /* nonzero: every chunk sent over UCX carries a checksum of
                                     its bytes, checked on arrival (a mismatch fails the fetch
                                     with GS_ERR_PROTO). All workers of a cluster must agree.
                                     Bytes UCX moves straight between device buffers and CUDA
                                     IPC copies are not checksummed (they never touch the host) */
    uint64_t pipe_slice;          /* streams mode, chunks staged through host memory for UCX:
                                     slices of this many bytes, two in flight (D2H of one
                                     overlapping the send of the other; the receiver copies
                                     each slice to the device as it lands). 0: 8 MiB */
    uint64_t pipe_min;            /* chunks smaller than this go whole; 0: 32 MiB */
    int test_corrupt_transfers;   /* tests only: flip one byte of the chunks (or slices) this
                                     worker sends over UCX, after their checksum or MAC was
                                     taken: -1 every one, N > 0 the first N, 0 none */
    const char *interface;        /* network interface UCX's tcp transport listens on (with this
                                     host's RDMA ports); NULL: the one that reaches gsched
                                     (loopback alone when gsched is on loopback).
                                     $UCX_NET_DEVICES wins over both */
    int no_ipc;                   /* nonzero: never use CUDA IPC between workers of one host
                                     (every transfer then goes through UCX) */
    int test_notify_failures;     /* tests only: the first this many completion-notification
                                     registrations fail (each is retried from the loop) */
    uint32_t memory_share;        /* workers dividing this host's memory for the automatic
                                     limit (gs-local-cluster passes its worker count); 0: 1.
                                     An explicit memory_limit above this process's memory
                                     (physical, bounded by its cgroup) is lowered to it with a
                                     warning, as Dask does */
    /* Spilling (cpu backend; worker/spill/spill.h): stored chunks move to files in a private
     * subdirectory of local_directory when memory fills. Fractions of memory_limit, 0: default */
    const char *local_directory;  /* NULL: $TMPDIR, else /tmp. The worker creates
                                     gsched-worker-<name>-XXXXXX there and removes it (with its
                                     files) when destroyed */
    uint64_t disk_limit;          /* bytes of chunks on disk; 0: what the file system holds */
    const char *file_root;        /* NULL: file tasks (array files read and written for
                                     clients, chunkops/fileio.c) may use any path this user
                                     may; else only paths inside this existing directory
                                     (symbolic links resolved): others fail the task */
    int file_path;                /* how file reads reach device memory (cuda backend):
                                     gs_file_path_t of chunkops/chunkops.h, 0 = auto (cuFile
                                     with GPUDirect Storage, else pinned staging) */
    double spill_target;          /* spill down to this fraction; 0: 0.6 */
    double spill_threshold;       /* start spilling above it; 0: 0.7 */
    double spill_pause;           /* admit generators only below it; 0: 0.75 */
    int no_spill;                 /* nonzero: never spill (tasks wait for memory, then fail) */
    gs_worker_stop_cb stop_cb;    /* may be NULL */
    void *arg;                    /* passed to stop_cb */
    uint64_t host_limit;          /* streams mode with a backend that moves chunks to host
                                     memory (to_host; "cuda"): bytes of chunks the host tier
                                     holds. 0: memory_limit for a device backend, and for
                                     either the memory this process may use divided by
                                     memory_share when that is 0 too */
    /* TLS to gsched (proto/tls.h; TLS 1.2+), on when tls_ca_file is set: gsched's certificate
     * chain is verified against tls_ca_file and its name (or IP) against the scheduler address's
     * host. tls_cert/tls_key (PEM, both or neither): this worker's certificate, needed when
     * gsched requires client certificates. Read by gs_worker_create (bad file:
     * GS_ERR_INVALID_PARAM); a refused handshake stops the worker with GS_ERR_AUTH. */
    const char *tls_ca_file;
    const char *tls_cert;
    const char *tls_key;
    int no_direct;                /* nonzero: open no data port; clients gather this worker's
                                     chunks through gsched only (worker/xfer/direct.c) */
    /* Integrity of chunk bytes between workers (worker/xfer): with the payload MAC on, every
     * chunk this worker sends over UCX from host memory (whole, or as pipelined staging slices)
     * carries a GMAC tag keyed by the cluster's data-plane key (common/auth.h, gs_auth_pmac), and
     * every chunk it fetches is checked before it is used: a wrong tag fails the fetch with
     * GS_ERR_AUTH ("failed its payload MAC"), and so the task that needed it, with the reason.
     * It supersedes transfer_checksum (a MAC also detects corruption). All workers of a cluster
     * must agree. GS_WORKER_PAYLOAD_MAC_AUTO (0): on when the cluster has a token.
     * Device chunks: bytes UCX moves straight between device buffers (a CUDA-aware UCX) and
     * CUDA IPC copies within a host never touch host memory and are not MACed (a trusted
     * fabric: NVLink/PCIe of one host, or an RDMA network you trust) unless payload_mac_device
     * is set, which stages device chunks for UCX through host memory (MACed there) instead;
     * CUDA IPC stays on (one host's devices, the grant itself sealed). */
    int payload_mac;              /* GS_WORKER_PAYLOAD_MAC_AUTO / _ON / _OFF */
    int payload_mac_device;       /* nonzero: no unstaged device-to-device UCX transfers */
    const char *test_lose_device_on; /* tests only ("cpu" backend): a user kernel of this
                                     symbol that crashes loses the device as a CUDA kernel's
                                     illegal address does (chunkops.h test_lose_device_on), so
                                     the path below ("Device loss") runs without a GPU. NULL:
                                     off. gworker takes it from $GS_WORKER_TEST_LOSE_DEVICE_ON */
} gs_worker_params_t;

/** Exit status of gworker after a device loss ("restart me"; EX_TEMPFAIL of sysexits.h).
 *  gs-local-cluster, systemd (Restart=on-failure) and the Slurm script restart it. */
#define GS_WORKER_EXIT_DEVICE_LOST 75

#define GS_WORKER_PAYLOAD_MAC_AUTO 0
#define GS_WORKER_PAYLOAD_MAC_ON 1
#define GS_WORKER_PAYLOAD_MAC_OFF 2

/** Counters for tests and logs (monotonic since creation unless stated). */
typedef struct gs_worker_stats {
    uint64_t worker_id;           /* assigned by gsched (WELCOME); 0 before */
    int registered;               /* gsched accepted the registration: a message other than
                                     ERROR came after WELCOME (gsched sends PEERS at once) */
    uint64_t tasks_done;          /* reported with GS_OK */
    uint64_t tasks_failed;        /* reported with an error */
    uint64_t tasks_queued;        /* now: assigned, not running */
    uint64_t tasks_running;       /* now */
    uint64_t chunks;              /* now: keys in the store */
    uint64_t mem_used;            /* now: backend bytes held by the worker */
    uint64_t mem_limit;           /* effective limit */
    uint64_t fetches;             /* peer fetches completed */
    uint64_t fetch_failures;
    uint64_t refetches;           /* tasks that fetched their inputs again after one arrived
                                     altered (payload MAC or checksum mismatch) */
    uint64_t fetch_bytes;
    uint64_t served;              /* chunks sent to peers */
    uint64_t served_slices;       /* slices of pipelined sends (pipe_slice) among them */
    uint64_t tasks_launcher;      /* streams mode: tasks handed to the launcher thread (QR and
                                     SVD, whose backend calls block the calling thread) */
    uint64_t tasks_file_threads;  /* streams mode: file reads and writes handed to the file
                                     threads (--nthreads of them, at most the running slots) */
    uint32_t npeers;              /* now */
    uint64_t notify_retries;      /* completion notifications the backend refused at first
                                     (retried from the loop, never waited for) */
    uint64_t requests_refused;    /* peer messages dropped unanswered: no or a wrong seal (not
                                     from a member of this cluster), not a live peer, replayed,
                                     or naming another worker (worker/xfer/seal.c) */
    /* disk tier (worker/spill/spill.h) */
    uint64_t disk_used;           /* now: bytes of chunks in files */
    uint64_t disk_limit;          /* UINT64_MAX: the file system's room; 0: spilling is off */
    uint64_t spills;              /* chunks written to disk (streams mode: host copies) */
    uint64_t spilled_bytes, spilled_ns;      /* bytes written, time in the writes */
    uint64_t unspills;            /* chunks read back into memory for tasks */
    uint64_t unspilled_bytes, unspilled_ns;  /* bytes read back (also for peers and gsched) */
    uint64_t spill_failures;      /* writes that failed (the chunk stayed in memory) */
    uint64_t spill_waits;         /* admissions that waited for gsched's releases instead of
                                     spilling, and got the memory without a spill */
    /* host tier of a device backend (streams mode; worker/spill/spill.h): chunks copied from
     * the device arena to host memory when it fills, and back for tasks */
    uint64_t host_used;           /* now: bytes of chunks with a copy in host memory */
    uint64_t host_limit;          /* its limit; 0: no host tier */
    uint64_t host_spills;         /* chunks copied device -> host */
    uint64_t host_spilled_bytes, host_spilled_ns;     /* bytes, time of those copies */
    uint64_t host_unspills;       /* chunks copied back host -> device for tasks */
    uint64_t host_unspilled_bytes, host_unspilled_ns; /* bytes, time (also for peers, gsched) */
    uint64_t prefetches;          /* of those, brought up for queued tasks before admission */
    /* the host tier's page-locked pool (worker/spill/hpool.c; 0 without a host tier) */
    uint64_t host_pool_bytes;     /* page-locked so far (free pieces included; never shrinks) */
    uint64_t host_pool_free;      /* of those, free pieces (recycled host copies, grown ahead) */
    uint64_t host_pool_ns;        /* time spent allocating them, summed over its threads */
    uint64_t host_pageable;       /* bytes of host copies outside it (none free when needed) */
} gs_worker_stats_t;

/**
 * Create a worker on @a loop: validates @a params, creates the backend context and its streams
 * (the only CUDA context is the one on params->device), the kernel threads and the UCX context
 * and worker (UCX's event fd polled from @a loop). Nothing is sent before gs_worker_start().
 * Errors: GS_ERR_INVALID_PARAM (message names the field), GS_ERR_NOT_FOUND / GS_ERR_UNSUPPORTED
 * for an unknown or unbuilt backend, GS_ERR_UCX, GS_ERR_CUDA, GS_ERR_NO_MEMORY. On error nothing
 * is left behind and *worker_p is not written. The worker is owned by the caller (destroy it).
 */
gs_status_t gs_worker_create(const gs_worker_params_t *params, uv_loop_t *loop,
                             gs_worker_h *worker_p);

/** Start connecting to gsched (retrying a refused connection for connect_timeout_ms). Returns
 *  GS_OK or GS_ERR_BUSY when already started; every later failure arrives through stop_cb. */
gs_status_t gs_worker_start(gs_worker_h worker);

/** Begin a stop: stop taking work, let running kernels finish (their results are dropped),
 *  close the scheduler connection (flushing what is queued when @a reason is GS_OK), close UCX
 *  endpoints and every handle. stop_cb(reason) follows from the loop once all of that is done.
 *  Idempotent: the first reason wins. */
void gs_worker_stop(gs_worker_h worker, gs_status_t reason);

/** Free the worker. If it is not stopped yet this stops it and runs @a loop until it is (so do
 *  not call it from a loop callback unless stop_cb has already run). NULL is fine. */
void gs_worker_destroy(gs_worker_h worker);

/** Current counters. */
void gs_worker_stats(gs_worker_h worker, gs_worker_stats_t *stats_p);

/**
 * Parse a memory size: a non-negative number (decimal point allowed) with an optional unit,
 * case-insensitive, optional space between: B; K, KB = 1e3; M, MB = 1e6; G, GB = 1e9;
 * T, TB = 1e12; KiB, MiB, GiB, TiB = powers of 1024 ("4GB", "500MiB", "1.5 GiB", "1048576").
 * "auto" gives 0 (meaning "choose"). GS_ERR_INVALID_PARAM with a message naming @a text for
 * anything else (negative, empty, unknown unit, overflow past 2^64). *bytes_p only on success.
 */
gs_status_t gs_worker_parse_size(const char *text, uint64_t *bytes_p);

/** Command line of gworker, parsed (strings point into argv or are static). */
typedef struct gs_worker_cli {
    gs_worker_params_t params;
    int log_level;                /* gs_log_level_t; -1 when not given */
    int help;                     /* --help / -h was given: print gs_worker_usage() and exit 0 */
    int no_rejoin;                /* --no-rejoin: exit when the scheduler drops this worker
                                     instead of registering again as a new incarnation */
} gs_worker_cli_t;

/** Parse gworker's arguments (argv[0] is the program): `tcp://host:port` and --nthreads N,
 *  --memory-limit BYTES|auto, --device-memory-limit BYTES|auto, --backend cpu|cuda,
 *  --device N, --name NAME, --token TOKEN (default: $GSCHED_TOKEN), --log-level LEVEL,
 *  --nstreams N, --connect-timeout MS, --fetch-timeout MS, --ucx-shm, --no-rejoin,
 *  --local-directory DIR, --disk-limit SIZE|auto, --spill-target F, --spill-threshold F,
 *  --spill-pause F, --no-spill, --help; `--opt=value` works too.
 *  GS_ERR_INVALID_PARAM with a message naming the bad argument. *cli_p only on success. */
gs_status_t gs_worker_cli_parse(int argc, char **argv, gs_worker_cli_t *cli_p);

/** Usage text (static). */
const char *gs_worker_usage(void);

#ifdef __cplusplus
}
#endif
#endif
