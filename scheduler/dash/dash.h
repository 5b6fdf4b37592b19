/*
 * The dashboard room of the scheduler: an HTTP server (libmicrohttpd, its own threads) serving
 * the status page, JSON (/api/...), Prometheus metrics (/metrics) and per-graph reports, fed by
 * immutable snapshots that the scheduling loop publishes. This header is the narrow interface
 * the rest of the scheduler uses: lifecycle calls from sched.c and hook calls (task reports,
 * transfers, graphs leaving) from tasks.c, cost.c and peers.c. Not installed.
 *
 * Files (calls point down only):
 *   dash.c      lifecycle, the hooks, the snapshot timer on the loop
 *   snapshot.c  building a snapshot from the scheduler's state (loop thread), reference counts
 *   http.c      the libmicrohttpd daemon: routing, authentication, limits, static assets
 *   api.c       JSON of /api/workers, /api/graphs, /api/tasks (jansson), on HTTP threads
 *   metrics.c   /metrics in the Prometheus text format, on HTTP threads
 *   report.c    the self-contained per-graph performance report (HTML), on HTTP threads
 *
 * Threads. Hooks, the timer and lifecycle calls run on the scheduler's loop thread and touch
 * only loop-owned tallies. The loop builds a snapshot (struct gs__dsnap, snapshot.h) from its
 * own state every GS__DASH_PERIOD_MS while someone asked within GS__DASH_IDLE_MS, and swaps it
 * in under a mutex held for a pointer swap and a reference count. HTTP threads only take a
 * reference to the current snapshot and read it: they never lock or call into the loop.
 *
 * Cost with nobody watching: one function call per reported task (a ring-buffer write and a
 * histogram increment) and a 100 ms timer that returns at once.
 */
#ifndef GS_SCHEDULER_DASH_DASH_H
#define GS_SCHEDULER_DASH_DASH_H

#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>

struct gs_sched;
struct gs__graph;
struct gs__worker;

typedef struct gs__dash gs__dash_t;

/** Default address of the gsched daemon's dashboard. */
#define GS_DASH_DEFAULT_ADDRESS "127.0.0.1:8787"

/** Parse "HOST:PORT" ("[v6]:PORT" for IPv6; PORT 0 = any free port) into @a host (@a len
 *  bytes) and *port_p. GS_ERR_INVALID_PARAM with a message naming the problem. */
gs_status_t gs__dash_parse_address(const char *addr, char *host, size_t len, int *port_p);

/** Create the dashboard of @a s for @a addr ("HOST:PORT"); nothing is bound yet. A non-loopback
 *  host needs the scheduler's token (GS_ERR_INVALID_PARAM otherwise). With @a fallback, a port
 *  found taken at start is replaced by any free one (logged). *dash_p owned by the
 *  scheduler (gs__dash_free). Errors: GS_ERR_INVALID_PARAM, GS_ERR_NO_MEMORY. */
gs_status_t gs__dash_create(struct gs_sched *s, const char *addr, int fallback, gs__dash_t **dash_p);

/** Bind and start the HTTP threads and the snapshot timer (one uv handle, counted in
 *  s->nhandles). Errors: GS_ERR_BUSY / GS_ERR_IO naming the address (e.g. port in use). */
gs_status_t gs__dash_start(gs__dash_t *d);

/** The bound address "HOST:PORT" (valid after a successful start; NUL-terminated, owned by the
 *  dashboard). */
const char *gs__dash_address(const gs__dash_t *d);

/** Stop serving (joins the HTTP threads: requests in progress finish from their snapshot) and
 *  close the timer. Idempotent; loop thread. */
void gs__dash_stop(gs__dash_t *d);

/** Free everything (after gs__dash_stop and after the timer handle closed). NULL is fine. */
void gs__dash_free(gs__dash_t *d);

/* ---- hooks: loop thread; @a d may be NULL (dashboard disabled) ---- */

/** A TASK_DONE batch from worker @a w arrived now, sent when the worker's clock read
 *  @a worker_now_ns; updates the worker's clock offset (the smallest receipt - sent seen) that
 *  maps the batch's task times (gs__dash_task) onto gsched's clock. Call before its tasks. */
void gs__dash_batch(gs__dash_t *d, const struct gs__worker *w, uint64_t worker_now_ns);

/** Worker @a w reported task @a t of @a g with @a status after @a run_ns on a kernel and
 *  @a fetch_ns fetching inputs; its kernel ran from @a start_ns to @a end_ns on the worker's
 *  clock (any values: they are clamped to start <= end <= the batch's now_ns). */
void gs__dash_task(gs__dash_t *d, const struct gs__graph *g, uint32_t t, const struct gs__worker *w,
                   int32_t status, uint64_t run_ns, uint64_t fetch_ns, uint64_t start_ns, uint64_t end_ns);

/** Worker @a to fetched @a count chunks, @a bytes in @a ns, from worker @a from over @a path
 *  (e.g. "cuda-ipc", "ucx", "staged"; not NUL-terminated, @a path_len bytes). */
void gs__dash_xfer(gs__dash_t *d, const struct gs__worker *from, const struct gs__worker *to,
                   const char *path, size_t path_len, uint64_t bytes, uint64_t ns, uint64_t count);

/** Worker @a w's heartbeat says it is running @a executing tasks and has @a queued waiting. */
void gs__dash_heartbeat(gs__dash_t *d, const struct gs__worker *w, uint64_t executing, uint64_t queued);

/** Answer client @a p's REPORT_REQ @a m with REPORT: the HTML report of its graph, built now
 *  from a fresh snapshot, or GS_ERR_NOT_FOUND naming why (not its graph, no dashboard). */
struct gs__peer;
struct gs_msg_report_req;
void gs__dash_report_req(struct gs_sched *s, struct gs__peer *p, const struct gs_msg_report_req *m);

/** Graph @a g is about to be freed: its summary moves to the recently-finished list and its
 *  task tally (tally.h) is freed. */
void gs__dash_graph_gone(gs__dash_t *d, struct gs__graph *g);

#endif
