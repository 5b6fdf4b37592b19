/* A fake gsched for worker tests: a TCP server on 127.0.0.1 (proto/conn.h) that handshakes
 * workers, records what they send (registrations, heartbeats, TASK_DONE, DATA) and lets a
 * test drive them (PEERS, TASK_ASSIGN built from a real lowered task graph, RELEASE, GATHER_REQ,
 * CANCEL, SHUTDOWN). Workers under test run in-process on the same loop (gs_worker_create) or
 * as gworker processes. */
#ifndef GS_TESTS_WORKER_FAKE_SCHED_H
#define GS_TESTS_WORKER_FAKE_SCHED_H

#include "graph/taskgraph.h"
#include "proto/conn.h"
#include "proto/handshake.h"
#include "worker/worker.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define FS_MAX_PEERS 8

typedef struct fs_done {
    uint64_t graph, task;
    int32_t status;
    uint64_t nbytes, run_ns, fetch_ns;
    char *err;                /* malloc'd, NULL on success */
    int worker;               /* index of the reporting peer */
} fs_done_t;

typedef struct fs_data {
    uint64_t req_id, graph, task;
    int32_t status;
    uint8_t *bytes;           /* malloc'd copy */
    size_t len;
} fs_data_t;

typedef struct fs_peer {
    struct fake_sched *fs;
    gs_conn_t *conn;
    int closed;
    gs_status_t close_reason;
    int welcomed;
    int registered;
    uint64_t id;
    char name[64];
    char backend[16];
    uint32_t nthreads;
    uint64_t memory_limit;
    uint8_t *ucx;
    size_t ucx_len;
    uint64_t nheartbeats;
    gs_msg_heartbeat_t last_hb;
    uint64_t bw_bytes, bw_count, bw_peer;   /* summed BANDWIDTH reports */
    char bw_path[16];
    uint64_t *layers_sent;    /* per (graph slot) bitmaps, see fs_assign */
    gs_hs_sched_t hs;         /* the handshake */
    int nerrors;              /* ERROR messages from the worker (it is leaving) */
    int32_t error_status;     /* the last one's */
    char error_msg[512];
} fs_peer_t;

typedef struct fake_sched {
    uv_loop_t *loop;
    uv_tcp_t server;
    uv_timer_t tick;
    int port;
    const char *token;        /* the cluster token (NULL: none, i.e. "") */
    uint8_t data_key[GS_AUTH_KEY_BYTES];   /* handed to workers in WELCOME (drawn by fs_start) */
    uint64_t heartbeat_ms;
    int nopen;                /* own handles open */
    fs_peer_t *peers[FS_MAX_PEERS];
    int npeers;
    uint64_t next_id;
    fs_done_t *done;
    size_t ndone, done_cap;
    size_t ndone_msgs;        /* TASK_DONE messages received (batches) */
    fs_data_t *data;
    size_t ndata, data_cap;
    uint64_t next_req;
} fake_sched_t;

/* Start listening on 127.0.0.1 (any port) on @a loop. */
void fs_start(fake_sched_t *fs, uv_loop_t *loop, const char *token);
/* "tcp://127.0.0.1:PORT" into buf. */
void fs_addr(const fake_sched_t *fs, char *buf, size_t len);
/* Close everything of the fake scheduler and free its records (runs the loop until closed). */
void fs_stop(fake_sched_t *fs);
/* Run the loop until pred(arg) is true or timeout_ms passed; returns pred's last value. */
int fs_run_until(fake_sched_t *fs, int (*pred)(void *), void *arg, int timeout_ms);
/* Run the loop for ms milliseconds. */
void fs_run_for(fake_sched_t *fs, int ms);
/* Wait until @a n workers are registered; returns 1 on success. */
int fs_wait_registered(fake_sched_t *fs, int n, int timeout_ms);
/* Send PEERS listing every registered worker (including itself) to every registered worker. */
void fs_announce_peers(fake_sched_t *fs);
/* Send PEERS(removed = id) to every registered worker. */
void fs_announce_removed(fake_sched_t *fs, uint64_t id);
void fs_send(fake_sched_t *fs, int peer, const gs_msg_t *m);
/* Assign tasks[0..n) of @a tg (graph id @a gid) to peer @a peer. holder[t] is the worker id
 * holding task t's output (for every dependency). Layers go along unless already sent to this
 * peer for this graph (tracked for graphs < 64). */
void fs_assign(fake_sched_t *fs, int peer, uint64_t gid, const gs_taskgraph_t *tg,
               const uint64_t *tasks, size_t n, const uint64_t *holder);
/* Completion record of (gid, task) or NULL. */
const fs_done_t *fs_find_done(const fake_sched_t *fs, uint64_t gid, uint64_t task);
/* Wait for completion of (gid, task). */
const fs_done_t *fs_wait_done(fake_sched_t *fs, uint64_t gid, uint64_t task, int timeout_ms);
/* Ask @a peer for (gid, task) and wait for the DATA; NULL on timeout. */
const fs_data_t *fs_gather(fake_sched_t *fs, int peer, uint64_t gid, uint64_t task,
                           int timeout_ms);
void fs_release(fake_sched_t *fs, int peer, uint64_t gid, uint64_t task);
/* Index of the registered peer with worker id @a id, or -1. */
int fs_peer_of(const fake_sched_t *fs, uint64_t id);

/* Run every task of @a tg as graph @a gid: task t goes to peer place[t] (peer indices), tasks
 * are assigned as soon as their dependencies are done (one batch per peer per wave).
 * Intermediates are released when @a release is set. Returns 0 when every task succeeded,
 * else the index+1 of the first failed completion record. */
size_t fs_run_graph(fake_sched_t *fs, uint64_t gid, const gs_taskgraph_t *tg, const int *place,
                    int release, int timeout_ms);
/* Gather every output block of @a tg (graph @a gid, outputs held by holder peers from the
 * last fs_run_graph) into @a out (row-major, size of out_grid). Returns 1 on success. */
int fs_gather_all(fake_sched_t *fs, uint64_t gid, const gs_taskgraph_t *tg, const int *place,
                  double *out, int timeout_ms);

/* Lower @a a and compute the reference with the serial evaluator on the cpu backend. *ref_p
 * is malloc'd (size doubles). */
gs_taskgraph_t *tw_lower(gs_array_h a, unsigned flags, double **ref_p, size_t *size_p);

/* A worker on the fake scheduler's loop. */
typedef struct tw {
    gs_worker_h w;
    int stopped;
    gs_status_t reason;
} tw_t;

/* Create and start a worker on fs's loop with @a p (scheduler and stop_cb filled in). */
void tw_start(tw_t *t, fake_sched_t *fs, const gs_worker_params_t *p);
/* Same with @a p->scheduler used as given (not fs's address). */
void tw_start_raw(tw_t *t, uv_loop_t *loop, const gs_worker_params_t *p);
/* Wait for stop_cb. */
int tw_wait_stopped(tw_t *t, fake_sched_t *fs, int timeout_ms);
void tw_destroy(tw_t *t);
/* Start @a n workers on @a fs, worker i with p[i] (registered one at a time, so peer index i is
 * t[i]), and announce them to each other. */
void tw_start_each(fake_sched_t *fs, tw_t *t, int n, const gs_worker_params_t *p);
/* Stop (GS_OK) and destroy @a n workers. */
void tw_stop_each(fake_sched_t *fs, tw_t *t, int n);
/* A repeating 2 ms timer on a fake scheduler's loop that records the longest gap between its
 * ticks (max_gap, ns): whether the loop kept turning while a worker on it computed. */
typedef struct fs_ticker {
    uv_timer_t timer;
    uint64_t last, max_gap;
    int closed;
} fs_ticker_t;
/* Start @a k (zeroed here) on fs's loop. */
void fs_ticker_start(fake_sched_t *fs, fs_ticker_t *k);
/* Stop @a k and wait (1 s) until its timer has closed; k->max_gap holds the longest gap. */
void fs_ticker_stop(fake_sched_t *fs, fs_ticker_t *k);
/* Whether task @a task of @a tg is a QR, SVD or Gram-path kernel (linalg-qr, -svd, -gram,
 * -apply, -gstep: those that synchronise their stream), which streams mode sends to the
 * launcher thread. */
int fs_task_is_qr_or_svd(const gs_taskgraph_t *tg, uint64_t task);
/* Start a streams-mode worker on @a fs (2 streams, 2 launches deep; backend @a backend, NULL
 * for the default cpu; @a nthreads threads, 0 for the default) and wait (5 s) until it has
 * registered. Stop it with tw_stop_each(fs, t, 1). */
void tw_start_streams(tw_t *t, fake_sched_t *fs, const char *backend, int nthreads);
/* Suite fixture: log errors only, a fresh @a loop and @a fs started on it (no token). */
void fs_fixture_setup(fake_sched_t *fs, uv_loop_t *loop);
/* Stop @a fs and close @a loop, expecting no handle left. */
void fs_fixture_teardown(fake_sched_t *fs, uv_loop_t *loop);

/* Assert @a got equals @a ref to 1e-12 relative (absolute below 1), naming the first element
 * that does not. */
void fs_assert_close(const double *got, const double *ref, size_t n);
/* What fs_run_graph's result @a failed means: "timed out" or the failed task's message. */
const char *fs_fail_msg(const fake_sched_t *fs, size_t failed);
/* sum(@a a) lowered without fusion, so @a a's chunks are stored and summed by separate tasks,
 * with nothing released; on @a nw (1 or 2) workers of @a p started on @a fs: every task on
 * worker 0, or with @a split the generators on worker 0 and their consumers on 1. The value is
 * checked; worker 0's counters come back in @a st_p; the workers are stopped. @a a stays the
 * caller's. */
void fs_run_unfused_sum(fake_sched_t *fs, gs_array_h a, const gs_worker_params_t *p, int nw,
                        int split, gs_worker_stats_t *st_p);
/* @a a lowered with GS_LOWER_DEFAULT and its reference computed (tw_lower), run as graph
 * @a gid with every task on peer 0 (intermediates released), its values gathered. The test
 * fails when a task fails, the run takes over 60 s or the gather over 10 s. Returns the graph;
 * *ref_p (the serial evaluator's values) and *got_p (the gathered ones) are malloc'd, *size_p
 * doubles each; the caller frees all three. @a a stays the caller's. */
gs_taskgraph_t *fs_run_gather_peer0(fake_sched_t *fs, uint64_t gid, gs_array_h a, double **ref_p,
                                    double **got_p, size_t *size_p);

#endif
