/**
 * @file gsched/client.h
 * @brief Connecting to a gsched cluster and computing arrays.
 *
 * A client holds one control connection to the scheduler `gsched`. Arrays (gsched/array.h) are
 * lowered to task graphs on the client and submitted; results come back over the same
 * connection. The address "local" starts a private local cluster (gsched + workers as child
 * processes, like Dask's Client()) and stops it in gs_client_destroy().
 *
 * Threading: a client runs its own I/O thread. All functions are thread-safe; blocking calls
 * (compute, wait) may be made from several threads at once. Callbacks (progress) run on the
 * client's I/O thread and must not block or call blocking client functions.
 *
 * Errors: GS_ERR_INVALID_PARAM (bad arguments), GS_ERR_CONN_REFUSED / GS_ERR_AUTH /
 * GS_ERR_VERSION (connect), GS_ERR_SCHEDULER_LOST (connection dropped; every pending future
 * fails with it), GS_ERR_TASK_FAILED (a worker reported an error; gs_last_error() holds the
 * worker's message naming the task), GS_ERR_CANCELED, GS_ERR_TIMED_OUT, GS_ERR_NO_MEMORY.
 */
#ifndef GSCHED_CLIENT_H
#define GSCHED_CLIENT_H

#include <gsched/array.h>
#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_client *gs_client_h;
typedef struct gs_future *gs_future_h;

/** Progress: @a done of @a total tasks of the graph behind @a future have finished. */
typedef void (*gs_progress_cb)(gs_future_h future, uint64_t done, uint64_t total, void *arg);

#define GS_CLIENT_FIELD_TOKEN 0x1u
#define GS_CLIENT_FIELD_TIMEOUT 0x2u
#define GS_CLIENT_FIELD_LOCAL_NWORKERS 0x4u
#define GS_CLIENT_FIELD_LOCAL_BACKEND 0x8u
#define GS_CLIENT_FIELD_LOWER_FLAGS 0x10u
#define GS_CLIENT_FIELD_PROGRESS 0x20u
#define GS_CLIENT_FIELD_BIN_DIR 0x40u
#define GS_CLIENT_FIELD_LOCAL_MEMORY 0x80u
#define GS_CLIENT_FIELD_PROGRESS_BAR 0x1000u
#define GS_CLIENT_FIELD_LOCAL_DASHBOARD 0x2000u
#define GS_CLIENT_FIELD_TLS 0x4000u
#define GS_CLIENT_FIELD_GATHER_PATH 0x8000u

/** How gathers move a result's chunks to the client (gather_path, gs_client_set_gather_path).
 *  Direct paths fetch each chunk from the worker holding it (gsched names the worker and gives
 *  a ticket for the chunk), several at a time, straight into the caller's buffer; a chunk they
 *  cannot fetch (worker unreachable or gone, a bad answer) is relayed through gsched instead.
 *  With TLS every chunk is relayed (the workers' data ports are plain TCP). */
typedef enum gs_gather_path {
    GS_GATHER_AUTO = 0,    /* default: shared memory from workers on this host, TCP from others;
                              results under 4 MiB are relayed (fewer round trips) */
    GS_GATHER_DIRECT = 1,  /* TCP from each worker (no shared memory) */
    GS_GATHER_RELAY = 2,   /* through gsched only (the path before direct gathers) */
    GS_GATHER_SHM = 3      /* like AUTO, whatever the result's size */
} gs_gather_path_t;

/** What gathers carried by each path since the client connected (gs_client_gather_stats). */
typedef struct gs_gather_stats {
    uint64_t chunks_relay, bytes_relay;    /* through gsched */
    uint64_t chunks_direct, bytes_direct;  /* from workers over TCP */
    uint64_t chunks_shm, bytes_shm;        /* from workers of this host through shared memory */
    uint64_t fallbacks;                    /* chunks a direct path failed and gsched relayed */
} gs_gather_stats_t;

/** progress_bar values: a one-line bar on stderr ("[####....]  45% 4500/10000 tasks |
 *  12.3 k tasks/s | 1.2 s"), redrawn at most every 100 ms from the I/O thread and ended with a
 *  newline when a graph completes; beside any progress_cb. */
#define GS_PROGRESS_BAR_NEVER 0
#define GS_PROGRESS_BAR_TTY 1     /* only when stderr is a terminal */
#define GS_PROGRESS_BAR_ALWAYS 2

/** Connection parameters; fields other than `address` are read only when their bit is set in
 *  field_mask (UCX style), so new fields never break old callers. Strings are copied. */
typedef struct gs_client_params {
    uint32_t field_mask;
    const char *address;        /* "tcp://host:port" or "local" (required) */
    const char *token;          /* cluster token; default: $GSCHED_TOKEN or none */
    double timeout_s;           /* connect / handshake timeout, default 10 s */
    int local_nworkers;         /* "local": workers to start (default: one per GPU, else 2) */
    const char *local_backend;  /* "local": "cpu" or "cuda" (default: cuda if a GPU exists) */
    unsigned lower_flags;       /* GS_LOWER_* optimisation switches (default: all on) */
    gs_progress_cb progress_cb;
    void *progress_arg;
    const char *bin_dir;        /* "local": where gsched/gworker live (default: $GS_BIN_DIR, then
                                   the directory of the running executable, then $PATH) */
    uint64_t local_memory_limit;        /* "local": host memory per worker in bytes (0: automatic:
                                           this host's or cgroup's memory / workers); chunks
                                           beyond it spill to disk (cpu backend) */
    uint64_t local_device_memory_limit; /* "local": device memory per GPU worker (0: default) */
    int progress_bar;           /* GS_CLIENT_FIELD_PROGRESS_BAR: GS_PROGRESS_BAR_* (default never) */
    const char *local_dashboard_address; /* "local": gsched's dashboard HOST:PORT or "none"
                                   (default 127.0.0.1:8787, any free port when taken); the
                                   launcher prints its URL on stderr (docs/dashboard.md) */
    /* GS_CLIENT_FIELD_TLS (remote addresses): connect with TLS 1.2+ and verify gsched's
     * certificate chain against tls_ca_file (required) and its name against the address's host
     * (or IP). tls_cert/tls_key (PEM, both or neither): this client's certificate, needed when
     * gsched requires client certificates. The files are read during gs_client_connect only.
     * A missing or bad file: GS_ERR_INVALID_PARAM; a refused handshake: GS_ERR_AUTH. */
    const char *tls_ca_file;
    const char *tls_cert;
    const char *tls_key;
    int gather_path;            /* GS_CLIENT_FIELD_GATHER_PATH: gs_gather_path_t (default AUTO) */
} gs_client_params_t;

/** Connect (and for "local", start the cluster first). *client_p written only on success.
 *  A scheduler at its connection limit turns connections away (ERROR GS_ERR_BUSY, or a close
 *  without a reason when it made room for others): the handshake is then tried again after
 *  a growing, jittered pause (10 ms doubling to 500 ms) until timeout_s -- bare closes at most 6
 *  times, so a peer that closes every connection (a TLS-only gsched met without TLS) is reported
 *  within a second. Errors: GS_ERR_INVALID_PARAM (params), GS_ERR_AUTH (token, TLS),
 *  GS_ERR_VERSION, GS_ERR_TIMED_OUT, GS_ERR_BUSY / GS_ERR_CONN_CLOSED (still turned away when
 *  the time or the tries ran out), GS_ERR_IO and other connect errors (a refused TCP connection
 *  is not tried again); gs_last_error() says which. */
gs_status_t gs_client_connect(const gs_client_params_t *params, gs_client_h *client_p);

/** Disconnect: cancels unfinished work of this client, fails its pending futures with
 *  GS_ERR_CANCELED, stops a local cluster. Futures must still be destroyed. NULL is fine. */
void gs_client_destroy(gs_client_h client);

/** Choose how later gathers move chunks (gs_gather_path_t). GS_ERR_INVALID_PARAM for another
 *  value or a NULL client. Safe from any thread. */
gs_status_t gs_client_set_gather_path(gs_client_h client, int path);

/** Copy what gathers carried by each path so far into *stats_p (zeros for a NULL client). */
void gs_client_gather_stats(gs_client_h client, gs_gather_stats_t *stats_p);

/** "auto", "direct", "relay" or "shm" (static); "unknown" otherwise. */
const char *gs_gather_path_name(int path);

/** Scheduler address the client is connected to ("tcp://127.0.0.1:40123"); owned by client. */
const char *gs_client_address(gs_client_h client);

/** Wait until at least @a n workers are registered (timeout_s < 0: forever).
 *  GS_ERR_TIMED_OUT otherwise. */
gs_status_t gs_client_wait_for_workers(gs_client_h client, int n, double timeout_s);

/** Number of workers registered now (asks the scheduler; -1 on error). */
int gs_client_nworkers(gs_client_h client);

/** Flags for gs_client_submit(). */
#define GS_SUBMIT_KEEP 0x1u     /* persist: keep the result chunks on the workers */

/** Lower @a array and submit it. Returns at once with a future (*future_p, caller-owned, free
 *  with gs_future_destroy). The array handle is borrowed. */
gs_status_t gs_client_submit(gs_client_h client, gs_array_h array, unsigned flags,
                             gs_future_h *future_p);

/** Wait for the graph to finish (timeout_s < 0: forever). GS_ERR_TIMED_OUT leaves the future
 *  running. Returns the graph's status. */
gs_status_t gs_future_wait(gs_future_h future, double timeout_s);

/** Gather the whole result into @a out (caller-owned, at least @a out_len elements =
 *  gs_array_size(array) of the array's dtype: doubles for float64, otherwise gs_dtype_size()
 *  bytes each, the buffer cast to double *), row-major. Waits for completion first. A 0-d result (a reduction
 *  over all axes) needs out_len exactly 1: a larger buffer is GS_ERR_INVALID_PARAM, since it
 *  usually means an axis was meant but not selected. Nothing is written on error. */
gs_status_t gs_future_gather(gs_future_h future, double *out, size_t out_len);

/** Ask the scheduler to cancel; the future completes with GS_ERR_CANCELED (unless it finished
 *  first). */
gs_status_t gs_future_cancel(gs_future_h future);

/** Free the future. If its result was persisted, the chunks stay on the cluster until
 *  gs_client_unpersist(). NULL is fine. */
void gs_future_destroy(gs_future_h future);

/** Statistics of a finished graph. */
typedef struct gs_compute_stats {
    uint64_t ntasks;
    double submit_s;        /* lowering + encoding + sending */
    double wall_s;          /* submit to completion as seen by the client */
    double run_s_total;     /* sum of per-task kernel times reported by workers */
    double sched_wall_s;    /* scheduler-side accept to done */
} gs_compute_stats_t;

gs_status_t gs_future_stats(gs_future_h future, gs_compute_stats_t *stats_p);

/** Save the performance report of @a future's graph (like Dask's performance_report) to the
 *  file @a path as one self-contained HTML page: per-operation task counts and kernel time, the
 *  task stream, workers and transfers (docs/dashboard.md). Waits for the graph to finish first;
 *  the scheduler keeps finished graphs' data for a while after they are released (the last 16)
 *  and the task stream of the newest 20,000 task reports. @a future must belong to @a client
 *  (borrowed); @a path is overwritten. Errors: GS_ERR_INVALID_PARAM, GS_ERR_NOT_FOUND (the
 *  scheduler no longer knows the graph, or serves no dashboard: gsched --dashboard-address
 *  none), GS_ERR_IO (the file; message names it), GS_ERR_TIMED_OUT, GS_ERR_SCHEDULER_LOST,
 *  GS_ERR_NO_MEMORY. */
gs_status_t gs_client_report(gs_client_h client, gs_future_h future, const char *path);

/* ---- convenience: submit + wait + gather in one call ---- */

/** Compute a 0-d (scalar) array into *value_p, converted to a double whatever its dtype (an
 *  int64 beyond 2^53, such as an exact integer sum, rounds: gather it exactly with
 *  gs_client_compute() into an int64_t passed as (double *)&v, out_len 1). */
gs_status_t gs_client_compute_scalar(gs_client_h client, gs_array_h array, double *value_p);
/** Compute @a array into @a out (row-major, out_len >= gs_array_size(array); exactly 1 for a
 *  0-d array, as gs_future_gather()). Elements are written in the array's dtype
 *  (gs_array_dtype(), gs_dtype_size() bytes each): for other dtypes than float64 pass a
 *  buffer of that type cast to double *; out_len counts elements. The SVD of a tall array
 *  that the Gram path refuses (numerically rank-deficient) is computed again by TSQR here and
 *  in gs_client_compute_scalar and gs_client_persist (docs/api.md "Accuracy of the tall SVD"). */
gs_status_t gs_client_compute(gs_client_h client, gs_array_h array, double *out, size_t out_len);

/* ---- several results from one graph (Dask's dask.compute(a, b, c)) ---- */

/** What gs_client_compute_many() does with one result (gs_compute_result_t.mode). */
typedef enum gs_result_mode {
    GS_RESULT_GATHER = 0,   /* copy it into the caller's buffer (out, out_len) */
    GS_RESULT_PERSIST = 1   /* keep its chunks on the workers, as gs_client_persist() does */
} gs_result_mode_t;

/** One result of gs_client_compute_many(). Zero-initialise it (`= {0}` or a designated
 *  initialiser), so fields added later keep their defaults. */
typedef struct gs_compute_result {
    gs_array_h array;   /* the array to compute (borrowed for the call) */
    int mode;           /* gs_result_mode_t; 0 = GS_RESULT_GATHER */
    void *out;          /* GATHER: caller-owned buffer of out_len elements of the array's dtype
                           (gs_array_dtype(); gs_dtype_size() bytes each: a double * for
                           float64, a float * for float32, an int64_t * for int64, a uint8_t *
                           for bool ...), row-major; may be NULL only for an empty array.
                           PERSIST: NULL */
    size_t out_len;     /* GATHER: elements in out, at least gs_array_size(array), exactly 1
                           for a 0-d array (as gs_client_compute). PERSIST: 0 */
} gs_compute_result_t;

/** Compute the @a n results @a results[0..n) from ONE task graph, so work they share is done
 *  once: the arrays are lowered together (with the client's lower_flags) and an expression
 *  node reachable from several results becomes one set of tasks whose chunks every result
 *  reads (as Dask's dask.compute(a, b, c); a cheap node such as a random generator may still be
 *  regenerated inside each consumer's fused kernel, as within one expression). Blocks until
 *  the graph has finished, then gathers each GS_RESULT_GATHER result into its buffer and
 *  records each GS_RESULT_PERSIST result as gs_client_persist() does (later expressions read its
 *  chunks; gs_client_unpersist() drops them). The same array may appear several times (each
 *  GATHER entry gets a copy); an array this client has already persisted needs no work as a
 *  PERSIST entry (as gs_client_persist()).
 *
 *  All or nothing: the arguments are all checked before anything is submitted; when any task
 *  fails the whole call fails, no buffer is written and nothing is persisted. Buffers are
 *  written only after the whole graph has succeeded; as with gs_client_compute(), a failure
 *  during the gathers themselves (the connection to gsched lost, a worker gone with chunks
 *  that cannot be recomputed) may leave buffers of this call partly written, and then nothing
 *  is persisted. Persisted results are recorded only after every gather succeeded.
 *
 *  Persisted results of one call share one graph on the cluster: its gathered results' chunks
 *  stay on the workers too until every result persisted by the call is unpersisted (persist
 *  large arrays in their own call when that matters), and gs_client_replicate() of one of them
 *  copies all of that call's kept chunks.
 *
 *  @a stats_p (caller-owned, may be NULL): the graph's statistics (gs_future_stats()), written
 *  on success only; all zero when nothing needed computing (every entry an array already
 *  persisted). A tall SVD refused by the Gram path is computed again by TSQR, as in
 *  gs_client_compute(). Thread-safe like the other blocking calls.
 *
 *  Errors: GS_ERR_INVALID_PARAM (gs_last_error() names the entry): NULL client, results == NULL
 *  or n == 0, a NULL array, an unknown mode, a GATHER entry whose buffer is NULL (non-empty
 *  array) or holds fewer elements than the array (or not exactly 1 for a 0-d array), a PERSIST
 *  entry with a buffer or out_len, two GATHER buffers that overlap, the same array twice as
 *  PERSIST; what the lowering refuses. GS_ERR_TASK_FAILED (a worker's message naming the task),
 *  GS_ERR_SCHEDULER_LOST, GS_ERR_CANCELED (client destroyed), GS_ERR_NO_MEMORY, and the
 *  connection's errors as gs_client_submit(). */
gs_status_t gs_client_compute_many(gs_client_h client, size_t n,
                                   const gs_compute_result_t *results,
                                   gs_compute_stats_t *stats_p);

/** Write @a array to the .npy file @a path in its own dtype (C order, little-endian, version
 *  1.0; gs_array_to_npy_expr() lists the descr strings), from the
 *  workers: each writes the chunks it holds straight into a temporary file next to @a path
 *  (`path.gs-tmp-<pid>-<random>`), and one task then writes the header, checks that every
 *  byte was written, fsyncs and renames the temporary file to @a path. @a path appears only
 *  complete; an existing file there is replaced only on success. @a path must be visible to
 *  the workers (a shared or local file system); this process removes the temporary file after
 *  a failure when it can see it. Errors: GS_ERR_INVALID_PARAM, GS_ERR_TASK_FAILED or GS_ERR_IO
 *  with the worker's message naming the file, and those of gs_client_compute_scalar(). */
gs_status_t gs_client_to_npy(gs_client_h client, gs_array_h array, const char *path);

/** Write @a array, in its own dtype, as the zarr store @a path, version @a version (2 or 3),
 *  chunks compressed by @a codec (gs_zarr_codec_t), from the workers like gs_client_to_npy(): chunk
 *  files go to a temporary directory next to @a path, renamed to @a path once every chunk and
 *  the metadata are written. Errors as gs_client_to_npy(); a failed write's temporary
 *  directory is removed when this process can see it. */
gs_status_t gs_client_to_zarr(gs_client_h client, gs_array_h array, const char *path,
                              int version, int codec);

/** Compute @a array and keep its chunks on the workers; afterwards every expression using
 *  @a array reads those chunks instead of recomputing it. */
gs_status_t gs_client_persist(gs_client_h client, gs_array_h array);
/** Drop the persisted chunks of @a array (it will be recomputed when used again). */
gs_status_t gs_client_unpersist(gs_client_h client, gs_array_h array);

/* ---- cluster: workers and copies ---- */

/** One worker as gs_client_workers() reports it (strings truncated to fit, NUL-terminated). */
typedef struct gs_client_worker_info {
    uint64_t id;                /* worker id (gsched's) */
    char name[64];
    char host[64];              /* host name the worker registered with */
    char backend[16];           /* "cpu" / "cuda" */
    char address[64];           /* its control connection as gsched sees it ("ip:port") */
    int32_t device;
    uint32_t nthreads;          /* kernel threads (cpu) or streams (cuda) */
    uint64_t memory_limit;
    uint64_t mem_used;          /* at its last heartbeat */
    /* its disk tier at its last heartbeat: bytes of chunks spilled to its local directory now,
     * and since it started the bytes and seconds written there and read back */
    uint64_t disk_used;
    uint64_t spilled_bytes;
    double spilled_s;
    uint64_t unspilled_bytes;
    double unspilled_s;
    /* a device worker's host tier at its last heartbeat: bytes of chunks copied from the device
     * to host memory now, and since it started the bytes and seconds copied down and back
     * (back: for tasks, peers and gsched) */
    uint64_t host_used;
    uint64_t host_spilled_bytes;
    double host_spilled_s;
    uint64_t host_unspilled_bytes;
    double host_unspilled_s;
    /* bytes its file reads (gs_array_from_npy & co.) took since it started, by the path that
     * read them (GS_FILE_READ_PATHS entries, named by gs_file_read_path_name): [0] straight
     * into host memory (cpu workers), [1] staged through page-locked host buffers, [2] cuFile
     * with GPUDirect Storage, [3] cuFile in its compatibility mode (at its last heartbeat) */
    uint64_t file_read_bytes[4];
} gs_client_worker_info_t;

#define GS_FILE_READ_PATHS 4
/** "cpu", "pinned", "cufile" or "cufile-compat" for index @a i of file_read_bytes (static);
 *  "unknown" otherwise. */
const char *gs_file_read_path_name(int i);

/** List the live workers: up to @a cap entries into @a out (caller-owned; may be NULL when
 *  @a cap is 0), the total in *n_p (which may exceed @a cap). Order is gsched's. */
gs_status_t gs_client_workers(gs_client_h client, gs_client_worker_info_t *out, size_t cap, size_t *n_p);

/** Copy every chunk of the persisted @a array to the worker named @a worker (like Dask's
 *  client.replicate(workers=[...])): the worker fetches each chunk it lacks from a holder over
 *  the peer-transfer path and keeps it; afterwards the chunks are served from either copy,
 *  placement counts both, and losing one holder loses nothing. Blocks until every copy exists
 *  (GS_OK) or fails: GS_ERR_NOT_FOUND (array not persisted by this client, no such worker),
 *  GS_ERR_WORKER_LOST (a fetch failed or the target died; gs_last_error() names the chunk),
 *  GS_ERR_TIMED_OUT (timeout_s < 0: wait forever; the copies may still complete). */
gs_status_t gs_client_replicate(gs_client_h client, gs_array_h array, const char *worker, double timeout_s);

/* ---- address files written by launchers (gs-slurm-cluster) ---- */

/** Longest token gs_client_address_file_read() accepts (bytes). */
#define GS_CLIENT_TOKEN_MAX 4096

/** A cluster's address and token as read from an address file. */
typedef struct gs_client_address {
    char address[256];                      /* "tcp://host:port", NUL-terminated */
    char token[GS_CLIENT_TOKEN_MAX + 1];    /* the token ("" when the file names none) */
} gs_client_address_t;

/** Read the address file at @a path (NULL: $GSCHED_ADDRESS_FILE): KEY=VALUE lines; blank lines
 *  and lines starting with '#' are skipped, unknown keys ignored. GSCHED_ADDRESS (required) is
 *  the scheduler's address; GSCHED_TOKEN_FILE (optional) names the file holding the token, which
 *  is read too (a relative path is taken from the address file's directory). Fills the
 *  caller-owned *@a addr_p only on success; use it as params.address and params.token (with
 *  GS_CLIENT_FIELD_TOKEN). Errors, with gs_last_error() naming the file and line:
 *  GS_ERR_INVALID_PARAM (NULL @a addr_p, no path and no $GSCHED_ADDRESS_FILE, a line without
 *  '=', no GSCHED_ADDRESS, an address of 256 bytes or more or not starting with "tcp://", an
 *  empty, over-long or NUL-holding token file), GS_ERR_IO (a file that cannot be read). */
gs_status_t gs_client_address_file_read(const char *path, gs_client_address_t *addr_p);

#ifdef __cplusplus
}
#endif
#endif
