/* The gsched client: one control connection to the scheduler, driven by a libuv loop in the
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
 * an answer that cannot come. */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/time.h"
#include "graph/taskgraph.h"
#include "proto/conn.h"
#include "proto/msg.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

_Static_assert(sizeof(gs_key_t) == 2 * sizeof(uint64_t), "gs_key_t must be two packed u64");

#define GS__DEFAULT_TIMEOUT_S 10.0
#define GS__LOCAL_TIMEOUT_S 120.0
#define GS__SELF_GRAPH UINT64_MAX   /* placeholder in a future's output keys: "this graph" */
#define GS__MSG_LEN 512

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
    GS__OP_REPLICATE            /* REPLICATE; answered by req_id (gathers map) */
} gs__op_kind_t;

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
    /* REPLICATE: graph whose outputs are copied, target worker name */
    uint64_t repl_graph;
    char repl_target[256];
    /* GATHER */
    double *out;
    int64_t out_stride[GS_MAX_NDIM];
    uint64_t req_id;
    uint64_t nkeys;             /* blocks */
    gs__gkey_t *keys;           /* nkeys, sorted */
    uint64_t nuniq;
    uint8_t *got;               /* nuniq flags */
    uint64_t nremaining;
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
    char address[288];
    unsigned lower_flags;
    gs_progress_cb progress_cb;
    void *progress_arg;
    gs__local_t local;

    /* I/O thread */
    uv_loop_t loop;
    uv_async_t async;
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
};

/* ------------------------------------------------------------------------------------------ */
/* small helpers */

static void gs__msgcpy(char *dst, const char *src, size_t len)
{
    size_t n = len < GS__MSG_LEN - 1 ? len : GS__MSG_LEN - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void gs__client_unref_locked(gs_client_h c, int *free_p)
{
    gs_assert_always(c->refs > 0);
    *free_p = --c->refs == 0;
}

static void gs__persisted_clear(gs_array_h a)
{
    gs_array_clear_persisted(a);
}

static void gs__client_free(gs_client_h c)
{
    gs__persisted_t *p = c->persisted;
    while (p != NULL) {
        gs__persisted_t *next = p->next;
        gs__persisted_clear(p->array);
        gs_array_release(p->array);
        gs_free(p);
        p = next;
    }
    uv_cond_destroy(&c->cond);
    uv_mutex_destroy(&c->mu);
    gs_free(c->token);
    gs_free(c);
}

static void gs__future_free(gs_future_h f)
{
    gs_grid_cleanup(&f->grid);
    gs_free(f->out_keys);
    gs_array_release(f->keep_array);
    gs_free(f);
}

/* Drop one reference of @a f (c->mu NOT held). Frees the future, and the client when that was
 * the client's last reference. */
static void gs__future_unref(gs_future_h f)
{
    gs_client_h c = f->client;
    int free_f, free_c = 0;
    uv_mutex_lock(&c->mu);
    gs_assert_always(f->refs > 0);
    free_f = --f->refs == 0;
    if (free_f) gs__client_unref_locked(c, &free_c);
    uv_mutex_unlock(&c->mu);
    if (free_f) gs__future_free(f);
    if (free_c) gs__client_free(c);
}

static void gs__op_free(gs__op_t *op)
{
    gs_buf_cleanup(&op->frame);
    gs_free(op->keys);
    gs_free(op->got);
    gs_free(op->winfo);
    gs_free(op);
}

static gs__op_t *gs__op_new(gs__op_kind_t kind)
{
    gs__op_t *op = gs_calloc(1, sizeof(*op), "client op");
    if (op == NULL) return NULL;
    op->kind = kind;
    gs_buf_init(&op->frame);
    return op;
}

/* Status a call gets when the client is not usable (c->mu held). */
static gs_status_t gs__client_unusable_locked(gs_client_h c)
{
    switch (c->state) {
    case GS__LOST:
    case GS__FAILED:
        return gs_error_set(c->fail_status, "%s", c->fail_message);
    case GS__CLOSED:
        return gs_error_set(GS_ERR_CANCELED, "the client has been destroyed");
    default:
        return gs_error_set(GS_ERR_INTERNAL, "client is not connected");
    }
}

/* Queue @a op for the I/O thread. On error the op is not queued (caller still owns it). */
static gs_status_t gs__post(gs_client_h c, gs__op_t *op)
{
    uv_mutex_lock(&c->mu);
    if (c->state == GS__CLOSED || c->stopping || !c->thread_started) {
        gs_status_t st = c->state == GS__LOST || c->state == GS__FAILED
                             ? gs__client_unusable_locked(c)
                             : gs_error_set(GS_ERR_CANCELED, "the client has been destroyed");
        uv_mutex_unlock(&c->mu);
        return st;
    }
    op->next = NULL;
    if (c->q_tail != NULL)
        c->q_tail->next = op;
    else
        c->q_head = op;
    c->q_tail = op;
    /* sent under the lock: shutdown sets `stopping` under it before the handle is closed */
    uv_async_send(&c->async);
    uv_mutex_unlock(&c->mu);
    return GS_OK;
}

/* Wait on c->cond until *flag or the deadline (deadline < 0: forever). c->mu held.
 * Returns 1 when *flag became true. */
static int gs__wait_flag_locked(gs_client_h c, const int *flag, double deadline)
{
    while (!*flag) {
        if (deadline < 0) {
            uv_cond_wait(&c->cond, &c->mu);
        } else {
            double left = deadline - gs_now_s();
            if (left <= 0) return 0;
            (void)uv_cond_timedwait(&c->cond, &c->mu, (uint64_t)(left * 1e9) + 1);
        }
    }
    return 1;
}

static double gs__deadline(double timeout_s)
{
    return timeout_s < 0 ? -1.0 : gs_now_s() + timeout_s;
}

/* ------------------------------------------------------------------------------------------ */
/* I/O thread: completing futures and ops */

/* Complete future @a f (I/O thread). Caller holds c->mu. */
static void gs__future_complete_locked(gs_future_h f, gs_status_t status, const char *msg,
                                       size_t msg_len)
{
    if (f->done) return;
    f->done = 1;
    f->status = status;
    f->t_done = gs_now_s();
    if (status != GS_OK) {
        if (msg == NULL || msg_len == 0) {
            msg = gs_status_string(status);
            msg_len = strlen(msg);
        }
        gs__msgcpy(f->message, msg, msg_len);
    }
}

/* Complete (or free, when abandoned) a waited-for op. Caller holds c->mu. */
static void gs__op_complete_locked(gs__op_t *op, gs_status_t status, const char *msg)
{
    if (op->done) return;
    op->done = 1;
    op->status = status;
    if (status != GS_OK) {
        if (msg == NULL || msg[0] == '\0') msg = gs_status_string(status);
        gs__msgcpy(op->message, msg, strlen(msg));
    }
}

static void gs__op_finish(gs_client_h c, gs__op_t *op, gs_status_t status, const char *msg)
{
    int free_op;
    uv_mutex_lock(&c->mu);
    gs__op_complete_locked(op, status, msg);
    free_op = op->abandoned;
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
    if (free_op) gs__op_free(op);
}

typedef struct gs__fail_ctx {
    gs_client_h c;
    gs_status_t status;
    const char *msg;
} gs__fail_ctx_t;

/* Fail every in-flight future and every pending request (I/O thread). */
static void gs__fail_everything(gs_client_h c, gs_status_t status, const char *msg)
{
    gs_u64map_t *maps[2] = {&c->pending, &c->graphs};
    gs__op_t *op;

    for (int m = 0; m < 2; m++) {
        gs_u64map_t *map = maps[m];
        for (size_t i = 0; i < map->cap; i++) {
            gs_future_h f;
            if (map->keys[i] == GS_U64MAP_EMPTY || map->keys[i] == GS_U64MAP_TOMB) continue;
            f = (gs_future_h)(uintptr_t)map->vals[i];
            uv_mutex_lock(&c->mu);
            gs__future_complete_locked(f, status, msg, strlen(msg));
            uv_mutex_unlock(&c->mu);
            gs__future_unref(f);
        }
        gs_u64map_cleanup(map);
        gs_u64map_init(map);
    }
    for (size_t i = 0; i < c->gathers.cap; i++) {
        if (c->gathers.keys[i] == GS_U64MAP_EMPTY || c->gathers.keys[i] == GS_U64MAP_TOMB) continue;
        op = (gs__op_t *)(uintptr_t)c->gathers.vals[i];
        gs__op_finish(c, op, status, msg);
    }
    gs_u64map_cleanup(&c->gathers);
    gs_u64map_init(&c->gathers);
    while ((op = c->info_head) != NULL) {
        c->info_head = op->info_next;
        gs__op_finish(c, op, status, msg);
    }
    c->info_tail = NULL;
    uv_mutex_lock(&c->mu);
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
}

/* ------------------------------------------------------------------------------------------ */
/* I/O thread: sending */

static gs_status_t gs__send_graph_cmd(gs_client_h c, uint32_t type, uint64_t graph_id)
{
    gs_msg_t m;
    if (c->conn == NULL) return GS_ERR_CONN_CLOSED;
    memset(&m, 0, sizeof(m));
    m.type = type;
    m.u.cancel.graph_id = graph_id;
    return gs_conn_send(c->conn, &m);
}

/* What to do with a future whose user reference is gone (I/O thread, graph accepted). */
static void gs__future_dropped(gs_client_h c, gs_future_h f)
{
    int done, keep;
    uint64_t gid;
    uv_mutex_lock(&c->mu);
    done = f->done;
    gid = f->graph_id;
    keep = f->persist_marked;
    uv_mutex_unlock(&c->mu);
    if (!done) (void)gs__send_graph_cmd(c, GS_MSG_CANCEL, gid);
    if (!keep) (void)gs__send_graph_cmd(c, GS_MSG_RELEASE_GRAPH, gid);
}

static void gs__handle_op(gs_client_h c, gs__op_t *op)
{
    gs_status_t st, fail = GS_ERR_CANCELED;
    char fail_msg[GS__MSG_LEN];
    int usable;
    uv_mutex_lock(&c->mu);
    usable = c->state == GS__READY && !c->closing && c->conn != NULL;
    if (c->state == GS__LOST || c->state == GS__FAILED) {
        fail = c->fail_status;
        snprintf(fail_msg, sizeof(fail_msg), "%s", c->fail_message);
    } else {
        snprintf(fail_msg, sizeof(fail_msg), "the client was destroyed");
    }
    uv_mutex_unlock(&c->mu);

    switch (op->kind) {
    case GS__OP_SUBMIT: {
        gs_future_h f = op->fut;
        op->fut = NULL;
        if (!usable) {
            uv_mutex_lock(&c->mu);
            gs__future_complete_locked(f, fail, fail_msg, strlen(fail_msg));
            uv_cond_broadcast(&c->cond);
            uv_mutex_unlock(&c->mu);
            gs__future_unref(f);
            break;
        }
        if ((st = gs_u64map_put(&c->pending, f->client_ref, (uint64_t)(uintptr_t)f)) != GS_OK) {
            uv_mutex_lock(&c->mu);
            gs__future_complete_locked(f, GS_ERR_NO_MEMORY, "out of memory tracking a graph", 30);
            uv_cond_broadcast(&c->cond);
            uv_mutex_unlock(&c->mu);
            gs__future_unref(f);
            break;
        }
        st = gs_conn_send_frame(c->conn, &op->frame);
        if (st != GS_OK) {
            gs_u64map_del(&c->pending, f->client_ref);
            uv_mutex_lock(&c->mu);
            gs__future_complete_locked(f, st, "could not send the graph to the scheduler", 41);
            uv_cond_broadcast(&c->cond);
            uv_mutex_unlock(&c->mu);
            gs__future_unref(f);
        }
        break;
    }
    case GS__OP_REPLICATE: {
        gs_msg_t m;
        uint64_t key[2];
        if (!usable) {
            gs__op_finish(c, op, fail, fail_msg);
            return;
        }
        op->req_id = ++c->next_req_id;
        if ((st = gs_u64map_put(&c->gathers, op->req_id, (uint64_t)(uintptr_t)op)) != GS_OK) {
            gs__op_finish(c, op, st, "out of memory tracking a replicate request");
            return;
        }
        key[0] = op->repl_graph;
        key[1] = GS_REPLICATE_ALL_OUTPUTS;
        memset(&m, 0, sizeof(m));
        m.type = GS_MSG_REPLICATE;
        m.u.replicate.req_id = op->req_id;
        m.u.replicate.worker_name.data = (const uint8_t *)op->repl_target;
        m.u.replicate.worker_name.len = strlen(op->repl_target);
        m.u.replicate.n = 1;
        m.u.replicate.keys = key;
        if ((st = gs_conn_send(c->conn, &m)) != GS_OK) {
            gs_u64map_del(&c->gathers, op->req_id);
            gs__op_finish(c, op, st, "could not send a replicate request to the scheduler");
        }
        return;   /* completed by REPLICATE_DONE */
    }
    case GS__OP_WORKERS:
    case GS__OP_INFO: {
        gs_msg_t m;
        if (!usable) {
            gs__op_finish(c, op, fail, fail_msg);
            return;
        }
        memset(&m, 0, sizeof(m));
        m.type = op->kind == GS__OP_WORKERS ? GS_MSG_WORKERS_REQ : GS_MSG_INFO_REQ;
        if ((st = gs_conn_send(c->conn, &m)) != GS_OK) {
            gs__op_finish(c, op, st, "could not send an info request to the scheduler");
            return;
        }
        op->info_next = NULL;
        if (c->info_tail != NULL)
            c->info_tail->info_next = op;
        else
            c->info_head = op;
        c->info_tail = op;
        return;   /* completed by INFO */
    }
    case GS__OP_GATHER: {
        gs_future_h f = op->fut;
        uint64_t gid;
        uint64_t *keys;
        if (!usable) {
            gs__op_finish(c, op, fail, fail_msg);
            return;
        }
        uv_mutex_lock(&c->mu);
        gid = f->graph_id;
        uv_mutex_unlock(&c->mu);
        op->req_id = ++c->next_req_id;
        if ((st = gs_u64map_put(&c->gathers, op->req_id, (uint64_t)(uintptr_t)op)) != GS_OK) {
            gs__op_finish(c, op, st, "out of memory tracking a gather");
            return;
        }
        /* one GATHER_REQ per distinct graph among the keys (sorted by graph) */
        keys = gs_malloc(gs_size_mul(op->nuniq, 2 * sizeof(uint64_t)), "gather keys");
        if (keys == NULL) {
            gs_u64map_del(&c->gathers, op->req_id);
            gs__op_finish(c, op, GS_ERR_NO_MEMORY, "out of memory sending a gather request");
            return;
        }
        (void)gid;
        {
            uint64_t i = 0;
            while (i < op->nkeys) {
                uint64_t g = op->keys[i].graph, n = 0;
                gs_msg_t m;
                for (; i < op->nkeys && op->keys[i].graph == g; i++) {
                    if (n > 0 && keys[2 * (n - 1) + 1] == op->keys[i].task) continue;
                    keys[2 * n] = g;
                    keys[2 * n + 1] = op->keys[i].task;
                    n++;
                }
                memset(&m, 0, sizeof(m));
                m.type = GS_MSG_GATHER_REQ;
                m.u.gather_req.req_id = op->req_id;
                m.u.gather_req.n = n;
                m.u.gather_req.keys = keys;
                if ((st = gs_conn_send(c->conn, &m)) != GS_OK) {
                    gs_free(keys);
                    gs_u64map_del(&c->gathers, op->req_id);
                    gs__op_finish(c, op, st, "could not send a gather request to the scheduler");
                    return;
                }
            }
        }
        gs_free(keys);
        return;   /* completed by DATA */
    }
    case GS__OP_CANCEL: {
        gs_future_h f = op->fut;
        op->fut = NULL;
        if (f->accepted) {
            int done;
            uint64_t gid;
            uv_mutex_lock(&c->mu);
            done = f->done;
            gid = f->graph_id;
            uv_mutex_unlock(&c->mu);
            if (!done && usable) (void)gs__send_graph_cmd(c, GS_MSG_CANCEL, gid);
        } else {
            f->cancel_requested = 1;
        }
        uv_mutex_lock(&c->mu);
        gs__future_complete_locked(f, GS_ERR_CANCELED, "the graph was canceled", 22);
        uv_cond_broadcast(&c->cond);
        uv_mutex_unlock(&c->mu);
        gs__future_unref(f);
        break;
    }
    case GS__OP_FUTURE_DROP: {
        gs_future_h f = op->fut;
        op->fut = NULL;
        if (f->accepted) {
            uint64_t v, gid;
            uv_mutex_lock(&c->mu);
            gid = f->graph_id;
            uv_mutex_unlock(&c->mu);
            if (usable) gs__future_dropped(c, f);
            /* still in flight: forget it now (a later GRAPH_DONE is ignored) */
            if (gs_u64map_get(&c->graphs, gid, &v) && v == (uint64_t)(uintptr_t)f) {
                gs_u64map_del(&c->graphs, gid);
                gs__future_unref(f);
            }
        } else {
            /* still waiting for GRAPH_ACCEPTED (or never sent): decide when it arrives */
            f->user_dropped = 1;
        }
        gs__future_unref(f);
        break;
    }
    case GS__OP_RELEASE_GRAPH:
        if (usable) (void)gs__send_graph_cmd(c, GS_MSG_RELEASE_GRAPH, op->graph_id);
        break;
    case GS__OP_CLOSE:
        c->closing = 1;
        gs__fail_everything(c, GS_ERR_CANCELED, "the client was destroyed");
        if (c->conn != NULL) gs_conn_close(c->conn, GS_OK);
        if (!uv_is_closing((uv_handle_t *)&c->async)) uv_close((uv_handle_t *)&c->async, NULL);
        break;
    }
    gs__op_free(op);
}

static void gs__async_cb(uv_async_t *h)
{
    gs_client_h c = h->data;
    gs__op_t *op;
    uv_mutex_lock(&c->mu);
    op = c->q_head;
    c->q_head = c->q_tail = NULL;
    uv_mutex_unlock(&c->mu);
    while (op != NULL) {
        gs__op_t *next = op->next;
        gs__handle_op(c, op);
        op = next;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* I/O thread: receiving */

static int gs__gkey_cmp(uint64_t g1, uint64_t t1, uint64_t g2, uint64_t t2)
{
    if (g1 != g2) return g1 < g2 ? -1 : 1;
    if (t1 != t2) return t1 < t2 ? -1 : 1;
    return 0;
}

/* Copy one chunk into the gather buffer at block @a block of the future's grid. */
static gs_status_t gs__gather_place(gs__op_t *op, const gs_grid_t *grid, uint64_t block,
                                    const gs_msg_data_t *d)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], idx[GS_MAX_NDIM];
    int nd = grid->ndim;
    int64_t nelem = 1, inner, nrows;
    const uint8_t *src = d->data.data;

    gs_grid_block_region(grid, block, start, shape);
    for (int a = 0; a < nd; a++) nelem *= shape[a];
    if (d->data.len != (size_t)nelem * sizeof(double))
        return gs_error_set(GS_ERR_PROTO,
                            "chunk (%llu, %llu) has %zu bytes, expected %lld for block %llu",
                            (unsigned long long)d->graph_id, (unsigned long long)d->task_id,
                            d->data.len, (long long)nelem * 8, (unsigned long long)block);
    if (nelem == 0) return GS_OK;
    if (nd == 0) {
        memcpy(op->out, src, sizeof(double));
        return GS_OK;
    }
    inner = shape[nd - 1];
    nrows = nelem / inner;
    for (int a = 0; a < nd; a++) idx[a] = 0;
    for (int64_t r = 0; r < nrows; r++) {
        int64_t off = start[nd - 1];
        for (int a = 0; a < nd - 1; a++) off += (start[a] + idx[a]) * op->out_stride[a];
        memcpy(op->out + off, src + (size_t)r * (size_t)inner * sizeof(double),
               (size_t)inner * sizeof(double));
        for (int a = nd - 2; a >= 0; a--) {
            if (++idx[a] < shape[a]) break;
            idx[a] = 0;
        }
    }
    return GS_OK;
}

static void gs__on_data(gs_client_h c, const gs_msg_data_t *d)
{
    uint64_t v;
    gs__op_t *op;
    uint64_t lo, hi;
    char msg[GS__MSG_LEN];
    gs_status_t st;

    if (!gs_u64map_get(&c->gathers, d->req_id, &v)) {
        GS_LOG_DEBUG("data for unknown request %llu ignored", (unsigned long long)d->req_id);
        return;
    }
    op = (gs__op_t *)(uintptr_t)v;
    /* binary search the first key >= (graph, task) */
    lo = 0;
    hi = op->nkeys;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (gs__gkey_cmp(op->keys[mid].graph, op->keys[mid].task, d->graph_id, d->task_id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo >= op->nkeys || op->keys[lo].graph != d->graph_id || op->keys[lo].task != d->task_id) {
        GS_LOG_WARN("scheduler sent chunk (%llu, %llu) that was not requested",
                    (unsigned long long)d->graph_id, (unsigned long long)d->task_id);
        return;
    }
    if (op->got[op->keys[lo].uniq]) return;   /* duplicate */
    if (d->status != GS_OK) {
        snprintf(msg, sizeof(msg), "cannot gather chunk (%llu, %llu): %s",
                 (unsigned long long)d->graph_id, (unsigned long long)d->task_id,
                 gs_status_string((gs_status_t)d->status));
        gs_u64map_del(&c->gathers, op->req_id);
        gs__op_finish(c, op, d->status < 0 ? (gs_status_t)d->status : GS_ERR_PROTO, msg);
        return;
    }
    for (uint64_t i = lo; i < op->nkeys && op->keys[i].graph == d->graph_id &&
                          op->keys[i].task == d->task_id;
         i++) {
        if ((st = gs__gather_place(op, &op->fut->grid, op->keys[i].block, d)) != GS_OK) {
            snprintf(msg, sizeof(msg), "%s", gs_last_error());
            gs_u64map_del(&c->gathers, op->req_id);
            gs__op_finish(c, op, st, msg);
            return;
        }
    }
    op->got[op->keys[lo].uniq] = 1;
    if (--op->nremaining == 0) {
        gs_u64map_del(&c->gathers, op->req_id);
        gs__op_finish(c, op, GS_OK, NULL);
    }
}

static void gs__on_accepted(gs_client_h c, const gs_msg_graph_accepted_t *a)
{
    uint64_t v;
    gs_future_h f;
    if (!gs_u64map_get(&c->pending, a->client_ref, &v)) {
        GS_LOG_WARN("scheduler accepted unknown graph ref %llu", (unsigned long long)a->client_ref);
        return;
    }
    gs_u64map_del(&c->pending, a->client_ref);
    f = (gs_future_h)(uintptr_t)v;
    f->accepted = 1;
    uv_mutex_lock(&c->mu);
    f->graph_id = a->graph_id;
    int done = f->done;
    uv_mutex_unlock(&c->mu);
    if (f->user_dropped) {
        gs__future_dropped(c, f);
        gs__future_unref(f);
        return;
    }
    if (f->cancel_requested || done) {
        /* canceled before the scheduler knew its id: cancel now; the future already failed */
        (void)gs__send_graph_cmd(c, GS_MSG_CANCEL, a->graph_id);
        gs__future_unref(f);
        return;
    }
    if (gs_u64map_put(&c->graphs, a->graph_id, (uint64_t)(uintptr_t)f) != GS_OK) {
        uv_mutex_lock(&c->mu);
        gs__future_complete_locked(f, GS_ERR_NO_MEMORY, "out of memory tracking a graph", 30);
        uv_cond_broadcast(&c->cond);
        uv_mutex_unlock(&c->mu);
        (void)gs__send_graph_cmd(c, GS_MSG_CANCEL, a->graph_id);
        gs__future_unref(f);
    }
}

static void gs__on_progress(gs_client_h c, const gs_msg_progress_t *p)
{
    uint64_t v;
    gs_future_h f;
    if (c->progress_cb == NULL || !gs_u64map_get(&c->graphs, p->graph_id, &v)) return;
    f = (gs_future_h)(uintptr_t)v;
    f->progress_reported = p->done;
    c->progress_cb(f, p->done, p->total, c->progress_arg);
}

static void gs__on_graph_done(gs_client_h c, const gs_msg_graph_done_t *d)
{
    uint64_t v, ntasks;
    gs_future_h f;
    gs_status_t st = d->status > 0 ? GS_ERR_PROTO : (gs_status_t)d->status;
    if (!gs_u64map_get(&c->graphs, d->graph_id, &v)) {
        GS_LOG_DEBUG("done for unknown graph %llu ignored", (unsigned long long)d->graph_id);
        return;
    }
    gs_u64map_del(&c->graphs, d->graph_id);
    f = (gs_future_h)(uintptr_t)v;
    uv_mutex_lock(&c->mu);
    ntasks = d->ntasks > 0 ? d->ntasks : f->ntasks;
    int already = f->done;
    uv_mutex_unlock(&c->mu);
    /* a final progress report before anyone waiting sees the result, unless the scheduler's
     * last PROGRESS was already it */
    if (c->progress_cb != NULL && st == GS_OK && !already && f->progress_reported != ntasks)
        c->progress_cb(f, ntasks, ntasks, c->progress_arg);
    uv_mutex_lock(&c->mu);
    if (!f->done) {
        f->run_ns_total = d->run_ns_total;
        f->sched_wall_ns = d->wall_ns;
        f->ntasks = ntasks;
    }
    gs__future_complete_locked(f, st, (const char *)d->message.data, d->message.len);
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
    gs__future_unref(f);
}

/* ERROR after the handshake: it answers the oldest graph still awaiting acceptance (the
 * scheduler processes a connection's messages in order); otherwise it is only logged. */
static void gs__on_error(gs_client_h c, const gs_msg_error_t *e)
{
    gs_future_h oldest = NULL;
    gs_status_t st = e->status < 0 ? (gs_status_t)e->status : GS_ERR_PROTO;
    for (size_t i = 0; i < c->pending.cap; i++) {
        gs_future_h f;
        if (c->pending.keys[i] == GS_U64MAP_EMPTY || c->pending.keys[i] == GS_U64MAP_TOMB) continue;
        f = (gs_future_h)(uintptr_t)c->pending.vals[i];
        if (oldest == NULL || f->client_ref < oldest->client_ref) oldest = f;
    }
    if (oldest == NULL) {
        GS_LOG_WARN("scheduler reported an error: %.*s (%s)", (int)e->message.len,
                    (const char *)e->message.data, gs_status_name(st));
        return;
    }
    gs_u64map_del(&c->pending, oldest->client_ref);
    uv_mutex_lock(&c->mu);
    gs__future_complete_locked(oldest, st, (const char *)e->message.data, e->message.len);
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
    gs__future_unref(oldest);
}

static void gs__wcopy(char *dst, size_t cap, const gs_str_t *s)
{
    size_t n = s->len < cap - 1 ? s->len : cap - 1;
    if (n > 0) memcpy(dst, s->data, n);
    dst[n] = '\0';
}

/* WORKERS answer: copy it into the op (I/O thread). */
static void gs__on_workers(gs_client_h c, gs__op_t *op, const gs_msg_workers_t *m)
{
    gs_client_worker_info_t *wi = gs_calloc(m->n ? m->n : 1, sizeof(*wi), "client workers");
    if (wi == NULL) {
        gs__op_finish(c, op, GS_ERR_NO_MEMORY, "out of memory receiving the worker list");
        return;
    }
    for (uint32_t i = 0; i < m->n; i++) {
        wi[i].id = m->id[i];
        wi[i].device = m->device[i];
        wi[i].nthreads = m->nthreads[i];
        wi[i].memory_limit = m->memory_limit[i];
        wi[i].mem_used = m->mem_used[i];
        gs__wcopy(wi[i].name, sizeof(wi[i].name), &m->name[i]);
        gs__wcopy(wi[i].host, sizeof(wi[i].host), &m->host[i]);
        gs__wcopy(wi[i].backend, sizeof(wi[i].backend), &m->backend[i]);
        gs__wcopy(wi[i].address, sizeof(wi[i].address), &m->addr[i]);
    }
    uv_mutex_lock(&c->mu);
    op->winfo = wi;
    op->nwinfo = m->n;
    uv_mutex_unlock(&c->mu);
    gs__op_finish(c, op, GS_OK, NULL);
}

static void gs__msg_cb(gs_conn_t *conn, gs_msg_t *msg, void *arg)
{
    gs_client_h c = arg;
    (void)conn;
    uv_mutex_lock(&c->mu);
    gs__state_t state = c->state;
    uv_mutex_unlock(&c->mu);

    if (state == GS__CONNECTING) {
        gs_status_t st = GS_OK;
        uv_mutex_lock(&c->mu);
        if (c->state != GS__CONNECTING) {           /* the connecting thread gave up */
            uv_mutex_unlock(&c->mu);
            return;
        }
        if (msg->type == GS_MSG_WELCOME && msg->u.welcome.version == GS_PROTO_VERSION) {
            c->state = GS__READY;
            c->client_id = msg->u.welcome.id;
        } else if (msg->type == GS_MSG_WELCOME) {
            st = GS_ERR_VERSION;
            snprintf(c->fail_message, sizeof(c->fail_message),
                     "scheduler at %s speaks protocol version %u, this client %u", c->address,
                     msg->u.welcome.version, GS_PROTO_VERSION);
        } else if (msg->type == GS_MSG_ERROR) {
            st = msg->u.error.status < 0 ? (gs_status_t)msg->u.error.status : GS_ERR_PROTO;
            snprintf(c->fail_message, sizeof(c->fail_message),
                     "scheduler at %s refused the connection: %.*s", c->address,
                     (int)msg->u.error.message.len, (const char *)msg->u.error.message.data);
        } else {
            st = GS_ERR_PROTO;
            snprintf(c->fail_message, sizeof(c->fail_message),
                     "scheduler at %s sent %s instead of welcome", c->address,
                     gs_msg_type_name(msg->type));
        }
        if (st != GS_OK) {
            c->state = GS__FAILED;
            c->fail_status = st;
        }
        uv_cond_broadcast(&c->cond);
        uv_mutex_unlock(&c->mu);
        if (st != GS_OK) gs_conn_close(c->conn, st);
        return;
    }
    if (state != GS__READY) return;
    switch (msg->type) {
    case GS_MSG_GRAPH_ACCEPTED: gs__on_accepted(c, &msg->u.graph_accepted); break;
    case GS_MSG_PROGRESS: gs__on_progress(c, &msg->u.progress); break;
    case GS_MSG_GRAPH_DONE: gs__on_graph_done(c, &msg->u.graph_done); break;
    case GS_MSG_DATA: gs__on_data(c, &msg->u.data); break;
    case GS_MSG_WORKERS:
    case GS_MSG_INFO: {
        gs__op_t *op = c->info_head;
        uint32_t want = msg->type == GS_MSG_INFO ? GS__OP_INFO : GS__OP_WORKERS;
        if (op == NULL || op->kind != want) {
            GS_LOG_DEBUG("unrequested %s ignored", gs_msg_type_name(msg->type));
            break;
        }
        c->info_head = op->info_next;
        if (c->info_head == NULL) c->info_tail = NULL;
        if (msg->type == GS_MSG_INFO) {
            op->nworkers = msg->u.info.nworkers;
            gs__op_finish(c, op, GS_OK, NULL);
            break;
        }
        gs__on_workers(c, op, &msg->u.workers);
        break;
    }
    case GS_MSG_REPLICATE_DONE: {
        const gs_msg_replicate_done_t *r = &msg->u.replicate_done;
        uint64_t v;
        gs__op_t *op;
        if (!gs_u64map_get(&c->gathers, r->req_id, &v)) {
            GS_LOG_DEBUG("replicate-done for unknown request %llu ignored", (unsigned long long)r->req_id);
            break;
        }
        op = (gs__op_t *)(uintptr_t)v;
        if (op->kind != GS__OP_REPLICATE) break;
        gs_u64map_del(&c->gathers, r->req_id);
        op->nworkers = (uint32_t)r->n;   /* chunks copied */
        gs__op_finish(c, op, r->status == GS_OK ? GS_OK : (gs_status_t)r->status,
                      r->message.len ? (const char *)r->message.data : NULL);
        break;
    }
    case GS_MSG_ERROR: gs__on_error(c, &msg->u.error); break;
    case GS_MSG_HEARTBEAT: break;
    default:
        GS_LOG_DEBUG("client ignores %s from the scheduler", gs_msg_type_name(msg->type));
        break;
    }
}

static void gs__connect_cb(gs_conn_t *conn, gs_status_t status, void *arg)
{
    gs_client_h c = arg;
    (void)conn;
    if (status == GS_OK) return;
    uv_mutex_lock(&c->mu);
    if (c->state == GS__CONNECTING) {
        c->state = GS__FAILED;
        c->fail_status = status;
        snprintf(c->fail_message, sizeof(c->fail_message), "cannot connect to the scheduler at "
                 "%s: %s", c->address, gs_status_string(status));
        uv_cond_broadcast(&c->cond);
    }
    uv_mutex_unlock(&c->mu);
}

static void gs__close_cb(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    gs_client_h c = arg;
    int lost = 0;
    char msg[GS__MSG_LEN];
    (void)conn;
    c->conn = NULL;
    uv_mutex_lock(&c->mu);
    if (c->state == GS__CONNECTING) {
        c->state = GS__FAILED;
        c->fail_status = reason == GS_OK ? GS_ERR_CONN_CLOSED : reason;
        if (c->fail_status == GS_ERR_CONN_CLOSED || c->fail_status == GS_ERR_IO)
            snprintf(c->fail_message, sizeof(c->fail_message), "the scheduler at %s closed the "
                     "connection during the handshake (wrong token or version?)", c->address);
        else
            snprintf(c->fail_message, sizeof(c->fail_message), "cannot connect to the scheduler "
                     "at %s: %s", c->address, gs_status_string(c->fail_status));
    } else if (c->state == GS__READY && !c->closing) {
        c->state = GS__LOST;
        c->fail_status = GS_ERR_SCHEDULER_LOST;
        snprintf(c->fail_message, sizeof(c->fail_message), "lost the connection to the scheduler "
                 "at %s (%s)", c->address, gs_status_string(reason == GS_OK ? GS_ERR_CONN_CLOSED
                                                                             : reason));
        lost = 1;
    }
    snprintf(msg, sizeof(msg), "%s", c->fail_message);
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
    if (lost) {
        GS_LOG_WARN("%s", msg);
        gs__fail_everything(c, GS_ERR_SCHEDULER_LOST, msg);
    }
}

static void gs__thread_main(void *arg)
{
    gs_client_h c = arg;
#ifdef __linux__
    pthread_setname_np(pthread_self(), "gs-client");
#endif
    uv_run(&c->loop, UV_RUN_DEFAULT);
}

/* ------------------------------------------------------------------------------------------ */
/* connect / destroy */

static void gs__loop_close_all(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* Stop the I/O thread (if started) and close the loop. */
static void gs__client_shutdown(gs_client_h c)
{
    gs__op_t *op;
    uv_mutex_lock(&c->mu);
    c->stopping = 1;
    uv_mutex_unlock(&c->mu);
    if (c->thread_started) {
        op = gs__op_new(GS__OP_CLOSE);
        if (op != NULL) {
            /* bypass gs__post's closed check: CLOSE must always reach the loop */
            uv_mutex_lock(&c->mu);
            op->next = NULL;
            if (c->q_tail != NULL)
                c->q_tail->next = op;
            else
                c->q_head = op;
            c->q_tail = op;
            uv_mutex_unlock(&c->mu);
            uv_async_send(&c->async);
        } else {
            /* no memory for an op: let the loop notice the closed state through the async */
            uv_mutex_lock(&c->mu);
            c->state = GS__CLOSED;
            uv_mutex_unlock(&c->mu);
            uv_async_send(&c->async);
        }
        uv_thread_join(&c->thread);
        c->thread_started = 0;
    }
    /* anything queued after the loop stopped: fail it */
    uv_mutex_lock(&c->mu);
    op = c->q_head;
    c->q_head = c->q_tail = NULL;
    uv_mutex_unlock(&c->mu);
    while (op != NULL) {
        gs__op_t *next = op->next;
        if (op->fut != NULL && op->kind != GS__OP_GATHER) {   /* gather borrows its future */
            uv_mutex_lock(&c->mu);
            gs__future_complete_locked(op->fut, GS_ERR_CANCELED, "the client was destroyed", 24);
            uv_mutex_unlock(&c->mu);
            gs__future_unref(op->fut);
        }
        if (op->kind == GS__OP_INFO || op->kind == GS__OP_GATHER || op->kind == GS__OP_WORKERS ||
            op->kind == GS__OP_REPLICATE) {
            uv_mutex_lock(&c->mu);
            gs__op_complete_locked(op, GS_ERR_CANCELED, "the client was destroyed");
            int ab = op->abandoned;
            uv_mutex_unlock(&c->mu);
            if (ab) gs__op_free(op);
        } else {
            gs__op_free(op);
        }
        op = next;
    }
    uv_walk(&c->loop, gs__loop_close_all, NULL);
    while (uv_loop_close(&c->loop) == UV_EBUSY) uv_run(&c->loop, UV_RUN_NOWAIT);
    gs_u64map_cleanup(&c->pending);
    gs_u64map_cleanup(&c->graphs);
    gs_u64map_cleanup(&c->gathers);
    uv_mutex_lock(&c->mu);
    c->state = GS__CLOSED;
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
}

gs_status_t gs_client_connect(const gs_client_params_t *params, gs_client_h *client_p)
{
    gs_client_h c;
    gs_status_t status;
    char host[256];
    int port = 0, r, is_local;
    double timeout_s = GS__DEFAULT_TIMEOUT_S;
    const char *token = NULL;
    gs_conn_params_t cp;
    sigset_t all, old;
    char hello_name[64];
    gs_msg_t hello;

    if (params == NULL || client_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: params and client_p must "
                                                  "not be NULL");
    if (params->address == NULL || params->address[0] == '\0')
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: address is missing "
                                                  "(\"tcp://host:port\" or \"local\")");
    if (params->field_mask & ~(GS_CLIENT_FIELD_TOKEN | GS_CLIENT_FIELD_TIMEOUT |
                               GS_CLIENT_FIELD_LOCAL_NWORKERS | GS_CLIENT_FIELD_LOCAL_BACKEND |
                               GS_CLIENT_FIELD_LOWER_FLAGS | GS_CLIENT_FIELD_PROGRESS |
                               GS_CLIENT_FIELD_BIN_DIR))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: unknown bits 0x%x in "
                                                  "field_mask", params->field_mask);
    if (params->field_mask & GS_CLIENT_FIELD_TIMEOUT) {
        if (!(params->timeout_s > 0) || !isfinite(params->timeout_s))
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: timeout_s must be a "
                                                      "positive number of seconds");
        timeout_s = params->timeout_s;
    }
    if ((params->field_mask & GS_CLIENT_FIELD_LOWER_FLAGS) &&
        (params->lower_flags & ~(unsigned)GS_LOWER_DEFAULT))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: unknown lower flags 0x%x",
                            params->lower_flags);
    if ((params->field_mask & GS_CLIENT_FIELD_PROGRESS) && params->progress_cb == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: progress field set but "
                                                  "progress_cb is NULL");
    is_local = strcmp(params->address, "local") == 0;
    if (is_local) {
        if ((params->field_mask & GS_CLIENT_FIELD_LOCAL_NWORKERS) &&
            (params->local_nworkers < 1 || params->local_nworkers > 4096))
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: local_nworkers must "
                                                      "be between 1 and 4096, not %d",
                                params->local_nworkers);
        if ((params->field_mask & GS_CLIENT_FIELD_LOCAL_BACKEND) &&
            (params->local_backend == NULL || (strcmp(params->local_backend, "cpu") != 0 &&
                                               strcmp(params->local_backend, "cuda") != 0)))
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: local_backend must be "
                                                      "\"cpu\" or \"cuda\", not \"%s\"",
                                params->local_backend ? params->local_backend : "(null)");
    } else if ((status = gs_addr_parse(params->address, host, sizeof(host), &port)) != GS_OK) {
        return status;
    }
    if (params->field_mask & GS_CLIENT_FIELD_TOKEN)
        token = params->token;
    else
        token = getenv("GSCHED_TOKEN");

    c = gs_calloc(1, sizeof(*c), "client");
    if (c == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating a client");
    c->refs = 1;
    c->state = GS__CONNECTING;
    c->local.pid = 0;
    c->local.stdin_fd = -1;
    c->lower_flags = (params->field_mask & GS_CLIENT_FIELD_LOWER_FLAGS) ? params->lower_flags
                                                                        : GS_LOWER_DEFAULT;
    if (params->field_mask & GS_CLIENT_FIELD_PROGRESS) {
        c->progress_cb = params->progress_cb;
        c->progress_arg = params->progress_arg;
    }
    gs_u64map_init(&c->pending);
    gs_u64map_init(&c->graphs);
    gs_u64map_init(&c->gathers);
    if (token != NULL && (c->token = gs_strdup(token, "client token")) == NULL) {
        gs_free(c);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating a client");
    }
    if (uv_mutex_init(&c->mu) != 0) {
        gs_free(c->token);
        gs_free(c);
        return gs_error_set(GS_ERR_NO_RESOURCE, "cannot create a mutex");
    }
    if (uv_cond_init(&c->cond) != 0) {
        uv_mutex_destroy(&c->mu);
        gs_free(c->token);
        gs_free(c);
        return gs_error_set(GS_ERR_NO_RESOURCE, "cannot create a condition variable");
    }

    if (is_local) {
        double lt = (params->field_mask & GS_CLIENT_FIELD_TIMEOUT) ? timeout_s : GS__LOCAL_TIMEOUT_S;
        status = gs__local_start((params->field_mask & GS_CLIENT_FIELD_BIN_DIR) ? params->bin_dir
                                                                                : NULL,
                                 (params->field_mask & GS_CLIENT_FIELD_LOCAL_NWORKERS)
                                     ? params->local_nworkers : 0,
                                 (params->field_mask & GS_CLIENT_FIELD_LOCAL_BACKEND)
                                     ? params->local_backend : NULL,
                                 c->token, lt, &c->local);
        if (status != GS_OK) goto err_sync;
        if ((status = gs_addr_parse(c->local.address, host, sizeof(host), &port)) != GS_OK)
            goto err_local;
    }
    snprintf(c->address, sizeof(c->address), "tcp://%s:%d", host, port);

    if ((r = uv_loop_init(&c->loop)) != 0) {
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot create an event loop: %s", uv_strerror(r));
        goto err_local;
    }
    if ((r = uv_async_init(&c->loop, &c->async, gs__async_cb)) != 0) {
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot create an async handle: %s",
                              uv_strerror(r));
        goto err_loop;
    }
    c->async.data = c;
    memset(&cp, 0, sizeof(cp));
    cp.msg_cb = gs__msg_cb;
    cp.close_cb = gs__close_cb;
    cp.connect_cb = gs__connect_cb;
    cp.arg = c;
    if ((status = gs_conn_connect(&c->loop, host, port, &cp, &c->conn)) != GS_OK) goto err_loop;
    memset(&hello, 0, sizeof(hello));
    snprintf(hello_name, sizeof(hello_name), "client-%d", (int)getpid());
    hello.type = GS_MSG_HELLO;
    hello.u.hello.version = GS_PROTO_VERSION;
    hello.u.hello.role = GS_ROLE_CLIENT;
    hello.u.hello.token.data = (const uint8_t *)(c->token ? c->token : "");
    hello.u.hello.token.len = c->token ? strlen(c->token) : 0;
    hello.u.hello.name.data = (const uint8_t *)hello_name;
    hello.u.hello.name.len = strlen(hello_name);
    if ((status = gs_conn_send(c->conn, &hello)) != GS_OK) {
        gs_conn_close(c->conn, status);
        goto err_loop;
    }

    /* the I/O thread never takes the process's signals (SIGPIPE on a dead socket included) */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    r = uv_thread_create(&c->thread, gs__thread_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        gs_conn_close(c->conn, GS_ERR_NO_RESOURCE);
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot start the client thread: %s",
                              uv_strerror(r));
        goto err_loop;
    }
    c->thread_started = 1;

    /* wait for WELCOME, a refusal or the timeout */
    uv_mutex_lock(&c->mu);
    {
        double deadline = gs_now_s() + timeout_s;
        while (c->state == GS__CONNECTING) {
            double left = deadline - gs_now_s();
            if (left <= 0) break;
            (void)uv_cond_timedwait(&c->cond, &c->mu, (uint64_t)(left * 1e9) + 1);
        }
    }
    if (c->state == GS__READY) {
        uv_mutex_unlock(&c->mu);
        *client_p = c;
        return GS_OK;
    }
    if (c->state == GS__CONNECTING) {
        c->state = GS__FAILED;
        c->fail_status = GS_ERR_TIMED_OUT;
        snprintf(c->fail_message, sizeof(c->fail_message), "no answer from the scheduler at %s "
                 "within %.1f s", c->address, timeout_s);
    }
    status = c->fail_status;
    {
        char msg[GS__MSG_LEN];
        snprintf(msg, sizeof(msg), "%s", c->fail_message);
        uv_mutex_unlock(&c->mu);
        gs__client_shutdown(c);
        if (c->local.pid > 0) gs__local_stop(&c->local);
        gs__client_free(c);
        return gs_error_set(status, "%s", msg);
    }

err_loop:
    {
        char msg[GS__MSG_LEN];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        uv_walk(&c->loop, gs__loop_close_all, NULL);
        while (uv_loop_close(&c->loop) == UV_EBUSY) uv_run(&c->loop, UV_RUN_NOWAIT);
        gs_error_set(status, "%s", msg);
    }
err_local:
    if (c->local.pid > 0) {
        char msg[GS__MSG_LEN];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        gs__local_stop(&c->local);
        gs_error_set(status, "%s", msg);
    }
err_sync:
    uv_cond_destroy(&c->cond);
    uv_mutex_destroy(&c->mu);
    gs_free(c->token);
    gs_free(c);
    return status;
}

void gs_client_destroy(gs_client_h c)
{
    int free_c;
    if (c == NULL) return;
    gs__client_shutdown(c);
    if (c->local.pid > 0) gs__local_stop(&c->local);
    uv_mutex_lock(&c->mu);
    /* persisted chunks die with the connection: arrays must not point at them any more */
    {
        gs__persisted_t *p = c->persisted;
        c->persisted = NULL;
        uv_mutex_unlock(&c->mu);
        while (p != NULL) {
            gs__persisted_t *next = p->next;
            gs__persisted_clear(p->array);
            gs_array_release(p->array);
            gs_free(p);
            p = next;
        }
        uv_mutex_lock(&c->mu);
    }
    gs__client_unref_locked(c, &free_c);
    uv_mutex_unlock(&c->mu);
    if (free_c) gs__client_free(c);
}

const char *gs_client_address(gs_client_h c)
{
    if (c == NULL) return "";
    return c->address;
}

/* ------------------------------------------------------------------------------------------ */
/* info */

static gs_status_t gs__info(gs_client_h c, double deadline, uint32_t *nworkers_p)
{
    gs__op_t *op = gs__op_new(GS__OP_INFO);
    gs_status_t st;
    if (op == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory asking for cluster info");
    if ((st = gs__post(c, op)) != GS_OK) {
        gs__op_free(op);
        return st;
    }
    uv_mutex_lock(&c->mu);
    if (!gs__wait_flag_locked(c, &op->done, deadline)) {
        op->abandoned = 1;   /* the I/O thread frees it when the answer (or failure) comes */
        uv_mutex_unlock(&c->mu);
        return gs_error_set(GS_ERR_TIMED_OUT, "no cluster info from the scheduler in time");
    }
    uv_mutex_unlock(&c->mu);
    st = op->status;
    if (st == GS_OK)
        *nworkers_p = op->nworkers;
    else
        gs_error_set(st, "%s", op->message);
    gs__op_free(op);
    return st;
}

int gs_client_nworkers(gs_client_h c)
{
    uint32_t n = 0;
    if (c == NULL) {
        gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_nworkers: client is NULL");
        return -1;
    }
    if (gs__info(c, gs__deadline(30.0), &n) != GS_OK) return -1;
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

gs_status_t gs_client_wait_for_workers(gs_client_h c, int n, double timeout_s)
{
    double deadline, sleep_s = 0.001;
    if (c == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_wait_for_workers: client "
                                                             "is NULL");
    if (n < 0) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_wait_for_workers: n must be "
                                                         ">= 0, not %d", n);
    if (isnan(timeout_s))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_wait_for_workers: timeout is NaN");
    deadline = gs__deadline(timeout_s);
    for (;;) {
        uint32_t have = 0;
        gs_status_t st = gs__info(c, deadline, &have);
        if (st != GS_OK) {
            if (st == GS_ERR_TIMED_OUT)
                return gs_error_set(GS_ERR_TIMED_OUT, "%d worker(s) did not register within "
                                                      "%.1f s", n, timeout_s);
            return st;
        }
        if ((int64_t)have >= n) return GS_OK;
        if (deadline >= 0 && gs_now_s() + sleep_s > deadline)
            return gs_error_set(GS_ERR_TIMED_OUT, "only %u of %d worker(s) registered within "
                                                  "%.1f s", have, n, timeout_s);
        struct timespec ts = {0, (long)(sleep_s * 1e9)};
        nanosleep(&ts, NULL);
        if (sleep_s < 0.02) sleep_s *= 2;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* submit */

static gs_status_t gs__encode_submit(const gs_taskgraph_t *tg, uint64_t client_ref,
                                     uint32_t flags, gs_buf_t *frame)
{
    gs_buf_t lbuf;
    size_t *loff = NULL;
    gs_bytes_t *layers = NULL;
    gs_msg_t m;
    gs_status_t st = GS_OK;

    gs_buf_init(&lbuf);
    if (tg->nlayers > 0) {
        loff = gs_calloc((size_t)tg->nlayers + 1, sizeof(size_t), "layer offsets");
        layers = gs_calloc(tg->nlayers, sizeof(gs_bytes_t), "layer bytes");
        if (loff == NULL || layers == NULL) {
            st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory encoding a graph");
            goto out;
        }
    }
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        loff[i] = lbuf.len;
        if ((st = gs_layer_encode(tg->layers[i], &lbuf)) != GS_OK) goto out;
    }
    if (tg->nlayers > 0) loff[tg->nlayers] = lbuf.len;
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        layers[i].data = lbuf.data + loff[i];
        layers[i].len = loff[i + 1] - loff[i];
    }
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_GRAPH_SUBMIT;
    m.u.graph_submit.client_ref = client_ref;
    m.u.graph_submit.flags = flags;
    m.u.graph_submit.nlayers = tg->nlayers;
    m.u.graph_submit.layers = layers;
    m.u.graph_submit.ntasks = tg->ntasks;
    m.u.graph_submit.task_layer = tg->task_layer;
    m.u.graph_submit.task_block = tg->task_block;
    m.u.graph_submit.dep_off = tg->dep_off;
    m.u.graph_submit.deps = tg->deps;
    m.u.graph_submit.task_nbytes = tg->task_nbytes;
    m.u.graph_submit.nexternals = tg->nexternals;
    m.u.graph_submit.externals = (const uint64_t *)tg->externals;
    m.u.graph_submit.noutputs = tg->noutputs;
    m.u.graph_submit.outputs = tg->outputs;
    st = gs_msg_encode(&m, frame);
out:
    gs_free(loff);
    gs_free(layers);
    gs_buf_cleanup(&lbuf);
    return st;
}

gs_status_t gs_client_submit(gs_client_h c, gs_array_h array, unsigned flags,
                             gs_future_h *future_p)
{
    gs_taskgraph_t *tg = NULL;
    gs_future_h f;
    gs__op_t *op;
    gs_status_t st;
    double t0 = gs_now_s();

    if (c == NULL || array == NULL || future_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_submit: client, array and future_p "
                                                  "must not be NULL");
    if (flags & ~GS_SUBMIT_KEEP)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_submit: unknown flags 0x%x", flags);
    uv_mutex_lock(&c->mu);
    if (c->state != GS__READY) {
        st = gs__client_unusable_locked(c);
        uv_mutex_unlock(&c->mu);
        return st;
    }
    uv_mutex_unlock(&c->mu);

    if ((st = gs_graph_lower(array, c->lower_flags, &tg)) != GS_OK) return st;

    f = gs_calloc(1, sizeof(*f), "future");
    op = gs__op_new(GS__OP_SUBMIT);
    if (f == NULL || op == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory submitting a graph");
        goto err_alloc;
    }
    f->client = c;
    f->flags = flags;
    f->t_submit = t0;
    f->ntasks = tg->ntasks;
    if ((st = gs_grid_copy(&f->grid, &tg->out_grid)) != GS_OK) goto err_alloc;
    f->noutputs = tg->noutputs;
    f->out_keys = gs_malloc(gs_size_mul(tg->noutputs ? tg->noutputs : 1, 2 * sizeof(uint64_t)),
                            "future output keys");
    if (f->out_keys == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory submitting a graph");
        goto err_grid;
    }
    for (uint64_t b = 0; b < tg->noutputs; b++) {
        uint64_t t = tg->outputs[b];
        if (t < tg->ntasks) {
            f->out_keys[2 * b] = GS__SELF_GRAPH;
            f->out_keys[2 * b + 1] = t;
        } else if (t - tg->ntasks < tg->nexternals) {
            f->out_keys[2 * b] = tg->externals[t - tg->ntasks].graph;
            f->out_keys[2 * b + 1] = tg->externals[t - tg->ntasks].task;
        } else {
            st = gs_error_set(GS_ERR_INTERNAL, "lowering produced output %llu out of range",
                              (unsigned long long)t);
            goto err_grid;
        }
    }
    uv_mutex_lock(&c->mu);
    f->client_ref = ++c->next_client_ref;
    uv_mutex_unlock(&c->mu);
    if ((st = gs__encode_submit(tg, f->client_ref, (flags & GS_SUBMIT_KEEP) ? GS_SUBMIT_PERSIST : 0,
                                &op->frame)) != GS_OK)
        goto err_grid;
    gs_taskgraph_free(tg);
    tg = NULL;
    if (flags & GS_SUBMIT_KEEP) f->keep_array = gs_array_retain(array);

    /* two references: the caller's and the I/O thread's; each future holds the client */
    f->refs = 2;
    op->fut = f;
    f->submit_s = gs_now_s() - t0;
    uv_mutex_lock(&c->mu);
    if (c->state != GS__READY) {
        st = gs__client_unusable_locked(c);
        uv_mutex_unlock(&c->mu);
        goto err_grid;
    }
    c->refs++;
    uv_mutex_unlock(&c->mu);
    if ((st = gs__post(c, op)) != GS_OK) {
        int free_c;
        uv_mutex_lock(&c->mu);
        gs__client_unref_locked(c, &free_c);
        uv_mutex_unlock(&c->mu);
        op->fut = NULL;
        gs__op_free(op);
        gs__future_free(f);
        return st;
    }
    *future_p = f;
    return GS_OK;

err_grid:
    if (f != NULL) {
        gs_grid_cleanup(&f->grid);
        gs_free(f->out_keys);
        gs_array_release(f->keep_array);
    }
err_alloc:
    gs_taskgraph_free(tg);
    if (op != NULL) {
        op->fut = NULL;
        gs__op_free(op);
    }
    gs_free(f);
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* futures */

/* A KEEP future that finished well: record the persisted chunks on its array (once). Called
 * on API threads with c->mu NOT held. */
static gs_status_t gs__future_mark_persisted(gs_future_h f)
{
    gs_client_h c = f->client;
    gs__persisted_t *p;
    gs_key_t *keys;
    gs_status_t st;
    uint64_t gid;

    uv_mutex_lock(&c->mu);
    /* a closed or lost client's chunks are gone: nothing to record */
    if (f->keep_array == NULL || !f->done || f->status != GS_OK || f->persist_marked ||
        c->state != GS__READY || c->stopping) {
        uv_mutex_unlock(&c->mu);
        return GS_OK;
    }
    f->persist_marked = 1;
    gid = f->graph_id;
    uv_mutex_unlock(&c->mu);

    keys = gs_malloc(gs_size_mul(f->noutputs ? f->noutputs : 1, sizeof(gs_key_t)), "persist keys");
    p = gs_calloc(1, sizeof(*p), "persisted");
    if (keys == NULL || p == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory recording persisted chunks");
        goto err;
    }
    for (uint64_t b = 0; b < f->noutputs; b++) {
        keys[b].graph = f->out_keys[2 * b] == GS__SELF_GRAPH ? gid : f->out_keys[2 * b];
        keys[b].task = f->out_keys[2 * b + 1];
    }
    if ((st = gs_array_set_persisted(f->keep_array, f->noutputs, keys)) != GS_OK) goto err;
    gs_free(keys);
    p->array = gs_array_retain(f->keep_array);
    p->graph_id = gid;
    uv_mutex_lock(&c->mu);
    p->next = c->persisted;
    c->persisted = p;
    uv_mutex_unlock(&c->mu);
    return GS_OK;
err:
    gs_free(keys);
    gs_free(p);
    uv_mutex_lock(&c->mu);
    f->persist_marked = 0;
    uv_mutex_unlock(&c->mu);
    return st;
}

gs_status_t gs_future_wait(gs_future_h f, double timeout_s)
{
    gs_client_h c;
    gs_status_t st;
    if (f == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_wait: future is NULL");
    if (isnan(timeout_s)) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_wait: timeout is NaN");
    c = f->client;
    uv_mutex_lock(&c->mu);
    if (!gs__wait_flag_locked(c, &f->done, gs__deadline(timeout_s))) {
        uv_mutex_unlock(&c->mu);
        return gs_error_set(GS_ERR_TIMED_OUT, "graph still running after %.3f s", timeout_s);
    }
    st = f->status;
    if (st != GS_OK) gs_error_set(st, "%s", f->message);
    uv_mutex_unlock(&c->mu);
    if (st == GS_OK && f->keep_array != NULL) st = gs__future_mark_persisted(f);
    return st;
}

static int gs__gkey_qcmp(const void *a, const void *b)
{
    const gs__gkey_t *x = a, *y = b;
    int r = gs__gkey_cmp(x->graph, x->task, y->graph, y->task);
    if (r != 0) return r;
    return x->block < y->block ? -1 : x->block > y->block;
}

static void gs__gkey_sort(gs__gkey_t *k, uint64_t n)
{
    qsort(k, (size_t)n, sizeof(*k), gs__gkey_qcmp);
}

gs_status_t gs_future_gather(gs_future_h f, double *out, size_t out_len)
{
    gs_client_h c;
    gs__op_t *op;
    gs_status_t st;
    uint64_t size = 1, n;

    if (f == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_gather: future is NULL");
    for (int a = 0; a < f->grid.ndim; a++) size *= (uint64_t)f->grid.shape[a];
    if (size > 0 && out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_gather: out is NULL");
    if (out_len < size)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_gather: out holds %zu doubles, the "
                                                  "result has %llu", out_len,
                            (unsigned long long)size);
    if ((st = gs_future_wait(f, -1.0)) != GS_OK) return st;
    if (size == 0 || f->noutputs == 0) return GS_OK;
    c = f->client;

    op = gs__op_new(GS__OP_GATHER);
    if (op == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory gathering a result");
    n = f->noutputs;
    op->nkeys = n;
    op->keys = gs_malloc(gs_size_mul(n, sizeof(gs__gkey_t)), "gather blocks");
    op->got = gs_calloc(n, 1, "gather flags");
    if (op->keys == NULL || op->got == NULL) {
        gs__op_free(op);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory gathering a result");
    }
    uv_mutex_lock(&c->mu);
    uint64_t gid = f->graph_id;
    uv_mutex_unlock(&c->mu);
    for (uint64_t b = 0; b < n; b++) {
        op->keys[b].graph = f->out_keys[2 * b] == GS__SELF_GRAPH ? gid : f->out_keys[2 * b];
        op->keys[b].task = f->out_keys[2 * b + 1];
        op->keys[b].block = b;
    }
    /* sort by (graph, task) unless already sorted (the usual case) */
    {
        int sorted = 1;
        for (uint64_t b = 1; b < n && sorted; b++)
            if (gs__gkey_cmp(op->keys[b - 1].graph, op->keys[b - 1].task, op->keys[b].graph,
                             op->keys[b].task) > 0)
                sorted = 0;
        if (!sorted) gs__gkey_sort(op->keys, n);
    }
    op->nuniq = 0;
    for (uint64_t b = 0; b < n; b++) {
        if (b == 0 || op->keys[b].graph != op->keys[b - 1].graph ||
            op->keys[b].task != op->keys[b - 1].task)
            op->nuniq++;
        op->keys[b].uniq = op->nuniq - 1;
    }
    op->nremaining = op->nuniq;
    op->out = out;
    {
        int64_t s = 1;
        for (int a = f->grid.ndim - 1; a >= 0; a--) {
            op->out_stride[a] = s;
            s *= f->grid.shape[a];
        }
    }
    op->fut = f;   /* borrowed: the caller holds the future while it waits */
    if ((st = gs__post(c, op)) != GS_OK) {
        op->fut = NULL;
        gs__op_free(op);
        return st;
    }
    uv_mutex_lock(&c->mu);
    (void)gs__wait_flag_locked(c, &op->done, -1.0);
    uv_mutex_unlock(&c->mu);
    st = op->status;
    if (st != GS_OK) gs_error_set(st, "%s", op->message);
    op->fut = NULL;
    gs__op_free(op);
    return st;
}

gs_status_t gs_future_cancel(gs_future_h f)
{
    gs__op_t *op;
    gs_status_t st;
    gs_client_h c;
    if (f == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_cancel: future is NULL");
    c = f->client;
    uv_mutex_lock(&c->mu);
    if (f->done) {
        uv_mutex_unlock(&c->mu);
        return GS_OK;
    }
    f->refs++;   /* the op's reference */
    uv_mutex_unlock(&c->mu);
    op = gs__op_new(GS__OP_CANCEL);
    if (op == NULL) {
        gs__future_unref(f);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory canceling a graph");
    }
    op->fut = f;
    if ((st = gs__post(c, op)) != GS_OK) {
        op->fut = NULL;
        gs__op_free(op);
        gs__future_unref(f);
        return st;
    }
    return GS_OK;
}

void gs_future_destroy(gs_future_h f)
{
    gs_client_h c;
    gs__op_t *op;
    if (f == NULL) return;
    c = f->client;
    /* a KEEP future that completed well keeps its chunks: make sure its array knows them */
    if (f->keep_array != NULL) (void)gs__future_mark_persisted(f);
    op = gs__op_new(GS__OP_FUTURE_DROP);
    if (op != NULL) {
        op->fut = f;   /* transfers the caller's reference */
        if (gs__post(c, op) == GS_OK) return;
        op->fut = NULL;
        gs__op_free(op);
    }
    /* client closed (or out of memory): nothing to tell the scheduler */
    gs__future_unref(f);
}

gs_status_t gs_future_stats(gs_future_h f, gs_compute_stats_t *stats_p)
{
    gs_client_h c;
    if (f == NULL || stats_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_stats: future and stats_p must not "
                                                  "be NULL");
    c = f->client;
    uv_mutex_lock(&c->mu);
    if (!f->done) {
        uv_mutex_unlock(&c->mu);
        return gs_error_set(GS_ERR_BUSY, "gs_future_stats: the graph is still running");
    }
    stats_p->ntasks = f->ntasks;
    stats_p->submit_s = f->submit_s;
    stats_p->wall_s = f->t_done - f->t_submit;
    stats_p->run_s_total = (double)f->run_ns_total * 1e-9;
    stats_p->sched_wall_s = (double)f->sched_wall_ns * 1e-9;
    uv_mutex_unlock(&c->mu);
    return GS_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* convenience */

gs_status_t gs_client_compute_scalar(gs_client_h c, gs_array_h array, double *value_p)
{
    gs_future_h f;
    gs_status_t st;
    double v = 0.0;
    if (c == NULL || array == NULL || value_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_scalar: client, array and "
                                                  "value_p must not be NULL");
    if (gs_array_ndim(array) != 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_scalar: the array has %d "
                                                  "axes; a scalar (0-d) array is required",
                            gs_array_ndim(array));
    if ((st = gs_client_submit(c, array, 0, &f)) != GS_OK) return st;
    st = gs_future_gather(f, &v, 1);
    gs_future_destroy(f);
    if (st == GS_OK) *value_p = v;
    return st;
}

gs_status_t gs_client_compute(gs_client_h c, gs_array_h array, double *out, size_t out_len)
{
    gs_future_h f;
    gs_status_t st;
    int64_t size;
    if (c == NULL || array == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute: client and array must not "
                                                  "be NULL");
    size = gs_array_size(array);
    if (size > 0 && out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute: out is NULL");
    if ((uint64_t)size > out_len)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute: out holds %zu doubles, the "
                                                  "array has %lld", out_len, (long long)size);
    if ((st = gs_client_submit(c, array, 0, &f)) != GS_OK) return st;
    st = gs_future_gather(f, out, out_len);
    gs_future_destroy(f);
    return st;
}

gs_status_t gs_client_persist(gs_client_h c, gs_array_h array)
{
    gs_future_h f;
    gs_status_t st;
    if (c == NULL || array == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_persist: client and array must not "
                                                  "be NULL");
    uv_mutex_lock(&c->mu);
    for (gs__persisted_t *p = c->persisted; p != NULL; p = p->next) {
        if (p->array == array) {
            uv_mutex_unlock(&c->mu);
            return GS_OK;   /* already persisted by this client */
        }
    }
    uv_mutex_unlock(&c->mu);
    if ((st = gs_client_submit(c, array, GS_SUBMIT_KEEP, &f)) != GS_OK) return st;
    st = gs_future_wait(f, -1.0);
    gs_future_destroy(f);
    return st;
}

gs_status_t gs_client_workers(gs_client_h c, gs_client_worker_info_t *out, size_t cap, size_t *n_p)
{
    gs__op_t *op;
    gs_status_t st;
    if (c == NULL || n_p == NULL || (out == NULL && cap > 0))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_workers: client and n_p must not be NULL, "
                                                  "out only when cap is 0");
    op = gs__op_new(GS__OP_WORKERS);
    if (op == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory asking for the worker list");
    if ((st = gs__post(c, op)) != GS_OK) {
        gs__op_free(op);
        return st;
    }
    uv_mutex_lock(&c->mu);
    if (!gs__wait_flag_locked(c, &op->done, gs__deadline(GS__DEFAULT_TIMEOUT_S))) {
        op->abandoned = 1;
        uv_mutex_unlock(&c->mu);
        return gs_error_set(GS_ERR_TIMED_OUT, "no worker list from the scheduler in time");
    }
    uv_mutex_unlock(&c->mu);
    st = op->status;
    if (st == GS_OK) {
        size_t n = op->nwinfo < cap ? op->nwinfo : cap;
        if (n > 0) memcpy(out, op->winfo, n * sizeof(*out));
        *n_p = op->nwinfo;
    } else {
        gs_error_set(st, "%s", op->message);
    }
    gs__op_free(op);
    return st;
}

gs_status_t gs_client_replicate(gs_client_h c, gs_array_h array, const char *worker, double timeout_s)
{
    gs__op_t *op;
    gs_status_t st;
    uint64_t gid = 0;
    int found = 0;
    if (c == NULL || array == NULL || worker == NULL || worker[0] == '\0')
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_replicate: client, array and worker name must be "
                                                  "given");
    if (strlen(worker) >= sizeof(op->repl_target))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_replicate: worker name longer than %zu bytes",
                            sizeof(op->repl_target) - 1);
    uv_mutex_lock(&c->mu);
    for (gs__persisted_t *p = c->persisted; p != NULL; p = p->next) {
        if (p->array == array) {
            gid = p->graph_id;
            found = 1;
            break;
        }
    }
    uv_mutex_unlock(&c->mu);
    if (!found)
        return gs_error_set(GS_ERR_NOT_FOUND, "gs_client_replicate: the array is not persisted by this client "
                                              "(gs_client_persist first)");
    op = gs__op_new(GS__OP_REPLICATE);
    if (op == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a replicate request");
    op->repl_graph = gid;
    snprintf(op->repl_target, sizeof(op->repl_target), "%s", worker);
    if ((st = gs__post(c, op)) != GS_OK) {
        gs__op_free(op);
        return st;
    }
    uv_mutex_lock(&c->mu);
    if (!gs__wait_flag_locked(c, &op->done, gs__deadline(timeout_s))) {
        op->abandoned = 1;
        uv_mutex_unlock(&c->mu);
        return gs_error_set(GS_ERR_TIMED_OUT, "replicating to worker %s did not finish in time", worker);
    }
    uv_mutex_unlock(&c->mu);
    st = op->status;
    if (st != GS_OK) gs_error_set(st, "%s", op->message);
    gs__op_free(op);
    return st;
}

gs_status_t gs_client_unpersist(gs_client_h c, gs_array_h array)
{
    gs__persisted_t **pp, *p = NULL;
    gs__op_t *op;
    if (c == NULL || array == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_unpersist: client and array must not "
                                                  "be NULL");
    uv_mutex_lock(&c->mu);
    for (pp = &c->persisted; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->array == array) {
            p = *pp;
            *pp = p->next;
            break;
        }
    }
    uv_mutex_unlock(&c->mu);
    if (p == NULL)
        return gs_error_set(GS_ERR_NOT_FOUND, "gs_client_unpersist: the array is not persisted "
                                              "by this client");
    gs__persisted_clear(p->array);
    op = gs__op_new(GS__OP_RELEASE_GRAPH);
    if (op != NULL) {
        op->graph_id = p->graph_id;
        if (gs__post(c, op) != GS_OK) gs__op_free(op);   /* disconnected: chunks are gone anyway */
    }
    gs_array_release(p->array);
    gs_free(p);
    return GS_OK;
}
