/* Test harness for the scheduler: runs gsched_sched in-process on a uv loop and talks to it
 * with fake workers and clients (proto/conn.h) on loopback, all on the test's thread. */
#ifndef GS_TESTS_SCHEDULER_HARNESS_H
#define GS_TESTS_SCHEDULER_HARNESS_H

#include "common/vec.h"
#include "proto/conn.h"
#include "proto/handshake.h"
#include "scheduler/sched.h"

#include <stdint.h>

#define TH_TIMEOUT_MS 30000   /* bounds waits for events that must come; a loaded machine is slow */

typedef struct th th_t;

/* A fake peer: every message it receives is kept (re-encoded) in its inbox. */
typedef struct tp {
    th_t *th;
    gs_conn_t *conn;
    int connected;
    int closed;
    gs_status_t close_reason;
    GS_VEC(gs_buf_t) inbox;
    uint64_t id;                 /* from WELCOME */
    int heartbeat;               /* send HEARTBEAT every th->hb_ms */
    char name[32];
    int manual;                  /* the test answers CHALLENGE itself (tp_connect_manual) */
    char token[64];              /* what the peer proves it knows */
    gs_hs_peer_t hs;             /* the handshake (proto/handshake.h), answered automatically */
} tp_t;

struct th {
    uv_loop_t loop;
    gs_sched_h sched;
    int port;
    uv_timer_t timer;
    uint32_t hb_ms;
    uint64_t hb_last_ns;
    tp_t *peers[32];
    int npeers;
};

/* Scheduler with @a params (NULL: defaults; host/port are forced to 127.0.0.1:0). */
void th_init(th_t *th, const gs_sched_params_t *params);
void th_fini(th_t *th);
/* Run the loop for @a ms milliseconds. */
void th_run_for(th_t *th, int ms);
gs_sched_stats_t th_stats(th_t *th);

/* Connect and send HELLO (not waiting for an answer); the CHALLENGE that follows is answered with
 * the proof of @a token (it stays in the inbox too). A version other than GS_PROTO_VERSION sends
 * an old-style HELLO (th_hello). */
tp_t *tp_connect(th_t *th, uint32_t version, const char *token, uint32_t role, const char *name);
/* Connect and send @a hello as it is; nothing is answered automatically. */
tp_t *tp_connect_manual(th_t *th, const gs_msg_t *hello);
/* Encode @a m and send it whole on the blocking socket @a fd. */
void th_raw_send(int fd, const gs_msg_t *m);
/* The whole handshake on the raw socket @a fd, running the loop while waiting (asserts WELCOME). */
void th_raw_handshake(th_t *th, int fd, const char *token, uint32_t role, const char *name);
/* Fill @a m with a HELLO of @a version carrying no nonce, the token in clear (what a version 1
 * peer sends; the strings are borrowed). */
void th_hello(gs_msg_t *m, uint32_t version, const char *token, uint32_t role, const char *name);
/* Connect with the right version/token as a client; waits for WELCOME. */
tp_t *tp_client(th_t *th, const char *name);
/* Connect as a worker, register (nthreads, a memory limit of 1 GiB), wait for WELCOME and PEERS. */
tp_t *tp_worker(th_t *th, const char *name, uint32_t nthreads);
/* Like tp_worker with @a memory_limit bytes (0 = unknown). */
tp_t *tp_worker_mem(th_t *th, const char *name, uint32_t nthreads, uint64_t memory_limit);
void tp_send(tp_t *p, const gs_msg_t *msg);
/* Close from the test side and wait until closed. */
void tp_close(tp_t *p);

/* Wait for the next message of @a type (earlier messages of other types stay queued).
 * Returns 1 with *msg filled (gs_msg_cleanup it), 0 on timeout or close. */
int tp_wait(tp_t *p, uint32_t type, int timeout_ms, gs_msg_t *msg);
/* Like tp_wait but fails the test on timeout. */
void tp_expect(tp_t *p, uint32_t type, gs_msg_t *msg);
/* Run the loop for @a ms; 1 if no message of @a type arrived (it is left queued otherwise). */
int tp_none(tp_t *p, uint32_t type, int ms);
/* Wait until the connection is closed (1) or timeout (0). */
int tp_wait_closed(tp_t *p, int timeout_ms);
/* Drop every queued message. */
void tp_drain(tp_t *p);

/* ---- graphs ---- */

typedef struct tg {
    uint32_t nlayers;
    gs_bytes_t layers[8];
    uint64_t ntasks;
    uint32_t task_layer[128];
    uint64_t task_block[128];
    uint64_t dep_off[129];
    uint64_t deps[512];
    uint64_t nbytes[128];
    uint64_t nexternals;
    uint64_t externals[128];
    uint64_t noutputs;
    uint64_t outputs[128];
} tg_t;

void tg_init(tg_t *g, uint32_t nlayers);
/* Add a task (layer, deps as task ids or ntasks-relative external markers via tg_ext). */
uint64_t tg_task(tg_t *g, uint32_t layer, int ndeps, const uint64_t *deps);
/* Add external (graph, task); returns its dependency id marker EXT(k) (resolved at submit). */
uint64_t tg_ext(tg_t *g, uint64_t graph, uint64_t task);
void tg_output(tg_t *g, uint64_t task);
/* Send GRAPH_SUBMIT (externals markers resolved to ntasks + k). */
void tg_submit(tp_t *client, const tg_t *g, uint32_t flags, uint64_t client_ref);
/* Submit and wait for GRAPH_ACCEPTED; returns the graph id. */
uint64_t tg_submit_ok(tp_t *client, const tg_t *g, uint32_t flags);

#define TG_EXT_BASE (1ull << 40)

/* ---- worker side ---- */

/* Send TASK_DONE for @a n tasks of @a graph with one status (message @a err when not OK). */
void tw_done(tp_t *w, uint64_t graph, const uint64_t *tasks, int n, int32_t status, uint64_t nbytes,
             const char *err);
void tw_done1(tp_t *w, uint64_t graph, uint64_t task);
/* Index of task @a t in an assign message, -1 if absent. */
int ta_find(const gs_msg_task_assign_t *a, uint64_t t);
/* Collect assigned task ids of @a graph into @a out (max @a cap) waiting up to @a ms for
 * @a want tasks in total; returns the count. */
int tw_collect(tp_t *w, uint64_t graph, int want, uint64_t *out, int cap, int ms);
/* Send a HEARTBEAT. */
void tw_heartbeat(tp_t *w);

#endif
