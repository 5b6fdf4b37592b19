/*
 * gs-sched-bench: scheduler throughput without kernels. One process: gsched (libgsched_sched)
 * on its own thread and uv loop, W fake workers on their own threads (each answers every
 * TASK_ASSIGN at once with one TASK_DONE for the whole batch), and a client on the main thread
 * that submits a graph and waits for GRAPH_DONE. Everything goes through real loopback TCP
 * and the real codec, so the figure is the end-to-end per-task cost of the runtime (scheduler
 * + protocol + a worker's bookkeeping), the upper bound on tasks/s the scheduler allows.
 *
 *   gs-sched-bench [--tasks N] [--workers W] [--nthreads T] [--fanin K] [--repeat R] [--done-batch B]
 *
 * --fanin 0: N independent tasks, all outputs (kept until the graph is released).
 * --fanin K: N leaves reduced by a K-ary tree to one output (intermediates released).
 * --done-batch B: workers report completions in TASK_DONE messages of at most B tasks
 *   (default: one message per TASK_ASSIGN), to model workers that flush completions often.
 * Prints one JSON line per repeat: bench, tasks (incl. tree), workers, fanin, seconds,
 * tasks_per_s, submit_s (client encode + send), sched_cpu_s (scheduler thread CPU time),
 * sched_us_per_task.
 */
#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"
#include "proto/conn.h"
#include "proto/handshake.h"
#include "scheduler/sched.h"

#include <gsched/config.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* ---- scheduler thread ---- */

typedef struct sched_thread {
    uv_loop_t loop;
    uv_async_t stop;
    gs_sched_h sched;
    int port;
    pthread_t tid;
    clockid_t cpu_clock;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;
} sched_thread_t;

static void on_sched_stop(uv_async_t *a)
{
    sched_thread_t *st = a->data;
    gs_sched_stop(st->sched);
    uv_close((uv_handle_t *)a, NULL);
}

static void *sched_main(void *arg)
{
    sched_thread_t *st = arg;
    gs_sched_params_t prm;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_HOST | GS_SCHED_FIELD_PORT;
    prm.host = "127.0.0.1";
    prm.port = 0;
    uv_loop_init(&st->loop);
    if (gs_sched_create(&prm, &st->loop, &st->sched) != GS_OK || gs_sched_listen(st->sched) != GS_OK) {
        fprintf(stderr, "gs-sched-bench: scheduler: %s\n", gs_last_error());
        exit(1);
    }
    uv_async_init(&st->loop, &st->stop, on_sched_stop);
    st->stop.data = st;
    pthread_getcpuclockid(pthread_self(), &st->cpu_clock);
    pthread_mutex_lock(&st->mu);
    st->port = gs_sched_port(st->sched);
    st->ready = 1;
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
    uv_run(&st->loop, UV_RUN_DEFAULT);
    gs_sched_destroy(st->sched);
    uv_run(&st->loop, UV_RUN_DEFAULT);
    uv_loop_close(&st->loop);
    return NULL;
}

/* ---- fake worker threads ---- */

typedef struct fake_worker {
    int port;
    uint32_t nthreads;
    int index;
    uv_loop_t loop;
    uv_async_t stop;
    gs_conn_t *conn;
    pthread_t tid;
    size_t cap;
    uint64_t *gids, *nbytes, *run_ns, *fetch_ns;
    int32_t *status;
    uint64_t ndone;
    uint64_t done_batch;   /* completions per TASK_DONE message (0 = the whole assignment) */
    char name[32];
    gs_hs_peer_t hs;
} fake_worker_t;

/* Answer gsched's CHALLENGE (no token); 0 when @a msg was not one. */
static int bench_answer(gs_conn_t *conn, gs_hs_peer_t *hs, const gs_msg_t *msg)
{
    gs_msg_t auth;
    if (msg->type != GS_MSG_CHALLENGE) return 0;
    if (gs_hs_peer_answer(hs, msg, &auth) != GS_OK) {
        fprintf(stderr, "gs-sched-bench: handshake: %s\n", gs_last_error());
        exit(1);
    }
    gs_conn_send(conn, &auth);
    return 1;
}

static void fw_on_msg(gs_conn_t *conn, gs_msg_t *msg, void *arg)
{
    fake_worker_t *w = arg;
    if (bench_answer(conn, &w->hs, msg)) {
        gs_msg_t m;
        memset(&m, 0, sizeof m);
        m.type = GS_MSG_WORKER_REGISTER;
        m.u.worker_register.name.data = (const uint8_t *)w->name;
        m.u.worker_register.name.len = strlen(w->name);
        m.u.worker_register.backend.data = (const uint8_t *)"none";
        m.u.worker_register.backend.len = 4;
        m.u.worker_register.nthreads = w->nthreads;
        gs_conn_send(conn, &m);
        return;
    }
    if (msg->type == GS_MSG_TASK_ASSIGN) {
        const gs_msg_task_assign_t *a = &msg->u.task_assign;
        gs_msg_t d;
        if (a->ntasks > w->cap) {
            size_t n = a->ntasks * 2;
            w->gids = gs_realloc(w->gids, n * sizeof(uint64_t), "bench");
            w->nbytes = gs_realloc(w->nbytes, n * sizeof(uint64_t), "bench");
            w->run_ns = gs_realloc(w->run_ns, n * sizeof(uint64_t), "bench");
            w->fetch_ns = gs_realloc(w->fetch_ns, n * sizeof(uint64_t), "bench");
            w->status = gs_realloc(w->status, n * sizeof(int32_t), "bench");
            if (!w->gids || !w->nbytes || !w->run_ns || !w->fetch_ns || !w->status) abort();
            for (size_t i = w->cap; i < n; i++) {
                w->nbytes[i] = 8;
                w->run_ns[i] = 0;
                w->fetch_ns[i] = 0;
                w->status[i] = GS_OK;
            }
            w->cap = n;
        }
        uint64_t step = w->done_batch ? w->done_batch : a->ntasks;
        for (uint64_t i = 0; i < a->ntasks; i++) w->gids[i] = a->graph_id;
        for (uint64_t off = 0; off < a->ntasks; off += step) {
            uint64_t n = a->ntasks - off < step ? a->ntasks - off : step;
            memset(&d, 0, sizeof d);
            d.type = GS_MSG_TASK_DONE;
            d.u.task_done.n = n;
            d.u.task_done.graph_id = w->gids;
            d.u.task_done.task_id = a->task_id + off;
            d.u.task_done.status = w->status;
            d.u.task_done.nbytes = w->nbytes;
            d.u.task_done.run_ns = w->run_ns;
            d.u.task_done.fetch_ns = w->fetch_ns;
            d.u.task_done.start_ns = w->fetch_ns;   /* kernels from 0 to run_ns on its clock */
            d.u.task_done.end_ns = w->run_ns;
            gs_conn_send(conn, &d);
        }
        w->ndone += a->ntasks;
    } else if (msg->type == GS_MSG_SHUTDOWN) {
        gs_conn_close(conn, GS_OK);
    }
}

static void fw_on_close(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    fake_worker_t *w = arg;
    (void)conn;
    (void)reason;
    w->conn = NULL;
    if (!uv_is_closing((uv_handle_t *)&w->stop)) uv_close((uv_handle_t *)&w->stop, NULL);
}

static void fw_on_stop(uv_async_t *a)
{
    fake_worker_t *w = a->data;
    if (w->conn != NULL) gs_conn_close(w->conn, GS_OK);
    if (!uv_is_closing((uv_handle_t *)a)) uv_close((uv_handle_t *)a, NULL);
}

static void *fw_main(void *arg)
{
    fake_worker_t *w = arg;
    gs_conn_params_t cp;
    gs_msg_t m;
    uv_loop_init(&w->loop);
    uv_async_init(&w->loop, &w->stop, fw_on_stop);
    w->stop.data = w;
    memset(&cp, 0, sizeof cp);
    cp.msg_cb = fw_on_msg;
    cp.close_cb = fw_on_close;
    cp.arg = w;
    if (gs_conn_connect(&w->loop, "127.0.0.1", w->port, &cp, &w->conn) != GS_OK) {
        fprintf(stderr, "gs-sched-bench: worker connect: %s\n", gs_last_error());
        exit(1);
    }
    snprintf(w->name, sizeof w->name, "fake-%d", w->index);
    if (gs_hs_peer_hello(&w->hs, "", GS_ROLE_WORKER, w->name, &m) != GS_OK) {
        fprintf(stderr, "gs-sched-bench: %s\n", gs_last_error());
        exit(1);
    }
    gs_conn_send(w->conn, &m);   /* WORKER_REGISTER follows the challenge's answer */
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
    gs_free(w->gids);
    gs_free(w->nbytes);
    gs_free(w->run_ns);
    gs_free(w->fetch_ns);
    gs_free(w->status);
    return NULL;
}

/* ---- client (main thread) ---- */

typedef struct client {
    uv_loop_t loop;
    gs_conn_t *conn;
    int welcomed;
    uint32_t nworkers;
    int info;
    uint64_t graph_id;
    int accepted, done;
    int32_t done_status;
    char done_msg[256];
    uint64_t sched_wall_ns;
    int error;
    char error_msg[256];
    gs_hs_peer_t hs;
} client_t;

static void cl_on_msg(gs_conn_t *conn, gs_msg_t *msg, void *arg)
{
    client_t *c = arg;
    if (bench_answer(conn, &c->hs, msg)) return;
    switch (msg->type) {
    case GS_MSG_WELCOME: c->welcomed = 1; break;
    case GS_MSG_INFO:
        c->nworkers = msg->u.info.nworkers;
        c->info = 1;
        break;
    case GS_MSG_GRAPH_ACCEPTED:
        c->graph_id = msg->u.graph_accepted.graph_id;
        c->accepted = 1;
        break;
    case GS_MSG_GRAPH_DONE:
        if (msg->u.graph_done.graph_id == c->graph_id) {
            c->done = 1;
            c->done_status = msg->u.graph_done.status;
            c->sched_wall_ns = msg->u.graph_done.wall_ns;
            snprintf(c->done_msg, sizeof c->done_msg, "%.*s", (int)msg->u.graph_done.message.len,
                     msg->u.graph_done.message.len ? (const char *)msg->u.graph_done.message.data : "");
        }
        break;
    case GS_MSG_ERROR:
        c->error = 1;
        snprintf(c->error_msg, sizeof c->error_msg, "%.*s", (int)msg->u.error.message.len,
                 msg->u.error.message.len ? (const char *)msg->u.error.message.data : "");
        break;
    default: break;
    }
}

static void cl_on_close(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    client_t *c = arg;
    (void)conn;
    (void)reason;
    c->conn = NULL;
}

static void cl_run_until(client_t *c, const int *flag, double timeout_s)
{
    double end = gs_now_s() + timeout_s;
    while (!*flag && !c->error && c->conn != NULL) {
        if (gs_now_s() > end) {
            fprintf(stderr, "gs-sched-bench: timed out\n");
            exit(1);
        }
        uv_run(&c->loop, UV_RUN_ONCE);
    }
    if (c->error) {
        fprintf(stderr, "gs-sched-bench: scheduler error: %s\n", c->error_msg);
        exit(1);
    }
}

static double thread_cpu_s(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0) return 0;
    *v = x;
    return 1;
}

int main(int argc, char **argv)
{
    uint64_t ntasks = 1000000, nworkers = 2, nthreads = 4, fanin = 0, repeat = 3, done_batch = 0;
    sched_thread_t st;
    fake_worker_t *ws;
    client_t c;
    gs_conn_params_t cp;
    gs_msg_t m;

    for (int i = 1; i < argc; i++) {
        uint64_t *dst = NULL;
        if (strcmp(argv[i], "--tasks") == 0) dst = &ntasks;
        else if (strcmp(argv[i], "--workers") == 0) dst = &nworkers;
        else if (strcmp(argv[i], "--nthreads") == 0) dst = &nthreads;
        else if (strcmp(argv[i], "--fanin") == 0) dst = &fanin;
        else if (strcmp(argv[i], "--repeat") == 0) dst = &repeat;
        else if (strcmp(argv[i], "--done-batch") == 0) dst = &done_batch;
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: gs-sched-bench [--tasks N] [--workers W] [--nthreads T] [--fanin K] [--repeat R] "
                   "[--done-batch B] | --version\n");
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("gs-sched-bench %s\n", GS_VERSION_DESCRIPTION);
            return 0;
        }
        if (dst == NULL || i + 1 >= argc || !parse_u64(argv[i + 1], dst)) {
            fprintf(stderr, "gs-sched-bench: bad argument '%s'\n", argv[i]);
            return 2;
        }
        i++;
    }
    if (ntasks == 0 || ntasks > 100000000 || nworkers == 0 || nworkers > 256 || nthreads == 0 || fanin == 1 ||
        repeat == 0) {
        fprintf(stderr, "gs-sched-bench: need tasks in 1..1e8, workers in 1..256, nthreads >= 1, fanin 0 or >= 2\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    gs_log_set_level(GS_LOG_LEVEL_ERROR);

    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.mu, NULL);
    pthread_cond_init(&st.cv, NULL);
    pthread_create(&st.tid, NULL, sched_main, &st);
    pthread_mutex_lock(&st.mu);
    while (!st.ready) pthread_cond_wait(&st.cv, &st.mu);
    pthread_mutex_unlock(&st.mu);

    ws = calloc(nworkers, sizeof *ws);
    for (uint64_t i = 0; i < nworkers; i++) {
        ws[i].port = st.port;
        ws[i].nthreads = (uint32_t)nthreads;
        ws[i].index = (int)i;
        ws[i].done_batch = done_batch;
        pthread_create(&ws[i].tid, NULL, fw_main, &ws[i]);
    }

    memset(&c, 0, sizeof c);
    uv_loop_init(&c.loop);
    memset(&cp, 0, sizeof cp);
    cp.msg_cb = cl_on_msg;
    cp.close_cb = cl_on_close;
    cp.arg = &c;
    if (gs_conn_connect(&c.loop, "127.0.0.1", st.port, &cp, &c.conn) != GS_OK) {
        fprintf(stderr, "gs-sched-bench: %s\n", gs_last_error());
        return 1;
    }
    if (gs_hs_peer_hello(&c.hs, "", GS_ROLE_CLIENT, "bench", &m) != GS_OK) {
        fprintf(stderr, "gs-sched-bench: %s\n", gs_last_error());
        return 1;
    }
    gs_conn_send(c.conn, &m);
    cl_run_until(&c, &c.welcomed, 10);
    while (c.nworkers < nworkers) {
        c.info = 0;
        memset(&m, 0, sizeof m);
        m.type = GS_MSG_INFO_REQ;
        gs_conn_send(c.conn, &m);
        cl_run_until(&c, &c.info, 10);
    }

    /* the graph: leaves, then (fanin) tree levels */
    uint64_t total = ntasks;
    if (fanin >= 2) {
        for (uint64_t level = ntasks; level > 1; level = (level + fanin - 1) / fanin) total += (level + fanin - 1) / fanin;
    }
    uint32_t *task_layer = malloc(total * sizeof *task_layer);
    uint64_t *task_block = malloc(total * sizeof *task_block);
    uint64_t *dep_off = malloc((total + 1) * sizeof *dep_off);
    uint64_t *deps = malloc((total + 1) * sizeof *deps);
    uint64_t *nbytes = malloc(total * sizeof *nbytes);
    uint64_t *outputs = malloc(total * sizeof *outputs);
    uint64_t noutputs = 0, nd = 0, t = 0;
    gs_bytes_t layers[64];
    uint32_t nlayers = 1;
    layers[0].data = (const uint8_t *)"leaf";
    layers[0].len = 4;
    dep_off[0] = 0;
    for (; t < ntasks; t++) {
        task_layer[t] = 0;
        task_block[t] = t;
        nbytes[t] = 8;
        dep_off[t + 1] = 0;
        if (fanin == 0) outputs[noutputs++] = t;
    }
    if (fanin >= 2) {
        uint64_t lo = 0, hi = ntasks;
        while (hi - lo > 1) {
            uint64_t first = t;
            layers[nlayers].data = (const uint8_t *)"combine";
            layers[nlayers].len = 7;
            for (uint64_t i = lo; i < hi; i += fanin) {
                for (uint64_t j = i; j < hi && j < i + fanin; j++) deps[nd++] = j;
                task_layer[t] = nlayers;
                task_block[t] = t - first;
                nbytes[t] = 8;
                dep_off[t + 1] = nd;
                t++;
            }
            nlayers++;
            lo = hi;
            hi = t;
        }
        outputs[noutputs++] = t - 1;
    }

    for (uint64_t r = 0; r < repeat; r++) {
        double t0 = gs_now_s(), cpu0 = thread_cpu_s(st.cpu_clock), t1, t2;
        memset(&m, 0, sizeof m);
        m.type = GS_MSG_GRAPH_SUBMIT;
        m.u.graph_submit.client_ref = r + 1;
        m.u.graph_submit.nlayers = nlayers;
        m.u.graph_submit.layers = layers;
        m.u.graph_submit.ntasks = total;
        m.u.graph_submit.task_layer = task_layer;
        m.u.graph_submit.task_block = task_block;
        m.u.graph_submit.dep_off = dep_off;
        m.u.graph_submit.deps = deps;
        m.u.graph_submit.task_nbytes = nbytes;
        m.u.graph_submit.noutputs = noutputs;
        m.u.graph_submit.outputs = outputs;
        c.accepted = c.done = 0;
        if (gs_conn_send(c.conn, &m) != GS_OK) {
            fprintf(stderr, "gs-sched-bench: submit: %s\n", gs_last_error());
            return 1;
        }
        t1 = gs_now_s();
        cl_run_until(&c, &c.accepted, 60);
        cl_run_until(&c, &c.done, 600);
        t2 = gs_now_s();
        if (c.done_status != GS_OK) {
            fprintf(stderr, "gs-sched-bench: graph failed: %s\n", c.done_msg);
            return 1;
        }
        double cpu = thread_cpu_s(st.cpu_clock) - cpu0;
        printf("{\"bench\":\"sched\",\"tasks\":%llu,\"workers\":%llu,\"nthreads\":%llu,\"fanin\":%llu,"
               "\"seconds\":%.4f,\"tasks_per_s\":%.0f,\"submit_s\":%.4f,\"sched_wall_s\":%.4f,"
               "\"sched_cpu_s\":%.4f,\"sched_us_per_task\":%.3f}\n",
               (unsigned long long)total, (unsigned long long)nworkers, (unsigned long long)nthreads,
               (unsigned long long)fanin, t2 - t0, (double)total / (t2 - t0), t1 - t0,
               (double)c.sched_wall_ns * 1e-9, cpu, cpu * 1e6 / (double)total);
        fflush(stdout);
        memset(&m, 0, sizeof m);
        m.type = GS_MSG_RELEASE_GRAPH;
        m.u.cancel.graph_id = c.graph_id;
        gs_conn_send(c.conn, &m);
    }

    gs_conn_close(c.conn, GS_OK);
    uv_run(&c.loop, UV_RUN_DEFAULT);
    uv_loop_close(&c.loop);
    uv_async_send(&st.stop);
    for (uint64_t i = 0; i < nworkers; i++) pthread_join(ws[i].tid, NULL);
    pthread_join(st.tid, NULL);
    free(ws);
    free(task_layer);
    free(task_block);
    free(dep_off);
    free(deps);
    free(nbytes);
    free(outputs);
    return 0;
}
