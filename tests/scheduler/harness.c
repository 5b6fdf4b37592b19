#include "harness.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <sys/socket.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* ---- loop ---- */

static void th_on_timer(uv_timer_t *t)
{
    th_t *th = t->data;
    uint64_t now = gs_now_ns();
    if (now - th->hb_last_ns >= (uint64_t)th->hb_ms * 1000000ull) {
        th->hb_last_ns = now;
        for (int i = 0; i < th->npeers; i++) {
            if (th->peers[i]->heartbeat && !th->peers[i]->closed) tw_heartbeat(th->peers[i]);
        }
    }
}

void th_init(th_t *th, const gs_sched_params_t *params)
{
    gs_sched_params_t prm;
    const char *lv = getenv("GS_TEST_LOG");   /* e.g. GS_TEST_LOG=debug */
    gs_log_level_t level = GS_LOG_LEVEL_ERROR;
    if (lv != NULL) gs_log_level_parse(lv, &level);
    gs_log_set_level(level);
    signal(SIGPIPE, SIG_IGN);
    memset(th, 0, sizeof *th);
    cr_assert_eq(uv_loop_init(&th->loop), 0);
    if (params) prm = *params;
    else memset(&prm, 0, sizeof prm);
    prm.field_mask |= GS_SCHED_FIELD_HOST | GS_SCHED_FIELD_PORT;
    prm.host = "127.0.0.1";
    prm.port = 0;
    cr_assert_eq(gs_sched_create(&prm, &th->loop, &th->sched), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_sched_listen(th->sched), GS_OK, "%s", gs_last_error());
    th->port = gs_sched_port(th->sched);
    cr_assert_gt(th->port, 0);
    th->hb_ms = 20;
    uv_timer_init(&th->loop, &th->timer);
    th->timer.data = th;
    uv_timer_start(&th->timer, th_on_timer, 5, 5);
}

void th_fini(th_t *th)
{
    gs_sched_stop(th->sched);
    for (int i = 0; i < th->npeers; i++) {
        if (th->peers[i]->conn != NULL) gs_conn_close(th->peers[i]->conn, GS_OK);
    }
    uv_close((uv_handle_t *)&th->timer, NULL);
    uv_run(&th->loop, UV_RUN_DEFAULT);
    gs_sched_destroy(th->sched);
    uv_run(&th->loop, UV_RUN_DEFAULT);
    cr_assert_eq(uv_loop_close(&th->loop), 0, "handles left open on the loop");
    for (int i = 0; i < th->npeers; i++) {
        tp_t *p = th->peers[i];
        for (size_t j = 0; j < p->inbox.len; j++) gs_buf_cleanup(&p->inbox.data[j]);
        GS_VEC_FREE(&p->inbox);
        gs_free(p);
    }
}

void th_run_for(th_t *th, int ms)
{
    uint64_t end = gs_now_ns() + (uint64_t)ms * 1000000ull;
    while (gs_now_ns() < end) uv_run(&th->loop, UV_RUN_ONCE);
}

gs_sched_stats_t th_stats(th_t *th)
{
    gs_sched_stats_t st;
    gs_sched_stats(th->sched, &st);
    return st;
}

/* ---- peers ---- */

static void tp_on_msg(gs_conn_t *conn, gs_msg_t *msg, void *arg)
{
    tp_t *p = arg;
    gs_buf_t b;
    (void)conn;
    if (msg->type == GS_MSG_CHALLENGE && !p->manual && !p->hs.challenged) {
        gs_msg_t auth;
        if (gs_hs_peer_answer(&p->hs, msg, &auth) != GS_OK) {
            /* gsched does not know our token: a real peer stops here; a test peer answers with
             * its proof anyway, so gsched's check is what refuses it */
            cr_assert_eq(msg->u.challenge.nonce.len, GS_AUTH_NONCE_BYTES);
            memcpy(p->hs.nonce_sched, msg->u.challenge.nonce.data, GS_AUTH_NONCE_BYTES);
            cr_assert_eq(gs_auth_handshake_mac(p->token, GS_AUTH_BY_PEER, GS_PROTO_VERSION, p->hs.role, p->hs.name,
                                               strlen(p->hs.name), p->hs.nonce, p->hs.nonce_sched, p->hs.proof),
                         GS_OK);
            p->hs.challenged = 1;
            auth = (gs_msg_t){.type = GS_MSG_AUTH, .u.auth.proof = {p->hs.proof, sizeof p->hs.proof}};
        }
        cr_assert_eq(gs_conn_send(p->conn, &auth), GS_OK);
    }
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(msg, &b), GS_OK, "re-encoding a received %s: %s", gs_msg_type_name(msg->type),
                 gs_last_error());
    cr_assert_eq(GS_VEC_PUSH(&p->inbox, b), GS_OK);
}

static void tp_on_close(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    tp_t *p = arg;
    (void)conn;
    p->closed = 1;
    p->conn = NULL;
    p->close_reason = reason;
}

static void tp_on_connect(gs_conn_t *conn, gs_status_t status, void *arg)
{
    tp_t *p = arg;
    (void)conn;
    if (status == GS_OK) p->connected = 1;
}

static tp_t *tp_new(th_t *th, const char *name)
{
    tp_t *p = gs_calloc(1, sizeof *p, "test peer");
    gs_conn_params_t cp;
    cr_assert_not_null(p);
    cr_assert_lt(th->npeers, 32);
    th->peers[th->npeers++] = p;
    p->th = th;
    snprintf(p->name, sizeof p->name, "%s", name);
    memset(&cp, 0, sizeof cp);
    cp.msg_cb = tp_on_msg;
    cp.close_cb = tp_on_close;
    cp.connect_cb = tp_on_connect;
    cp.arg = p;
    cr_assert_eq(gs_conn_connect(&th->loop, "127.0.0.1", th->port, &cp, &p->conn), GS_OK, "%s", gs_last_error());
    return p;
}

tp_t *tp_connect(th_t *th, uint32_t version, const char *token, uint32_t role, const char *name)
{
    tp_t *p = tp_new(th, name);
    gs_msg_t m;
    cr_assert_lt(strlen(token), sizeof p->token);
    memcpy(p->token, token, strlen(token) + 1);
    if (version == GS_PROTO_VERSION) {
        cr_assert_eq(gs_hs_peer_hello(&p->hs, p->token, role, p->name, &m), GS_OK);
    } else {
        th_hello(&m, version, token, role, name);
    }
    tp_send(p, &m);
    return p;
}

tp_t *tp_connect_manual(th_t *th, const gs_msg_t *hello)
{
    tp_t *p = tp_new(th, "manual");
    p->manual = 1;
    tp_send(p, hello);
    return p;
}

void th_hello(gs_msg_t *m, uint32_t version, const char *token, uint32_t role, const char *name)
{
    memset(m, 0, sizeof *m);
    m->type = GS_MSG_HELLO;
    m->u.hello.version = version;
    m->u.hello.role = role;
    m->u.hello.token.data = (const uint8_t *)token;
    m->u.hello.token.len = strlen(token);
    m->u.hello.name.data = (const uint8_t *)name;
    m->u.hello.name.len = strlen(name);
}

tp_t *tp_client(th_t *th, const char *name)
{
    tp_t *p = tp_connect(th, GS_PROTO_VERSION, "", GS_ROLE_CLIENT, name);
    gs_msg_t m;
    tp_expect(p, GS_MSG_WELCOME, &m);
    p->id = m.u.welcome.id;
    gs_msg_cleanup(&m);
    return p;
}

tp_t *tp_worker(th_t *th, const char *name, uint32_t nthreads)
{
    return tp_worker_mem(th, name, nthreads, 1ull << 30);
}

tp_t *tp_worker_mem(th_t *th, const char *name, uint32_t nthreads, uint64_t memory_limit)
{
    tp_t *p = tp_connect(th, GS_PROTO_VERSION, "", GS_ROLE_WORKER, name);
    gs_msg_t m;
    static const uint8_t ucx[4] = {1, 2, 3, 4};
    tp_expect(p, GS_MSG_WELCOME, &m);
    p->id = m.u.welcome.id;
    gs_msg_cleanup(&m);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_WORKER_REGISTER;
    m.u.worker_register.name.data = (const uint8_t *)name;
    m.u.worker_register.name.len = strlen(name);
    m.u.worker_register.backend.data = (const uint8_t *)"cpu";
    m.u.worker_register.backend.len = 3;
    m.u.worker_register.host.data = (const uint8_t *)"127.0.0.1";
    m.u.worker_register.host.len = 9;
    m.u.worker_register.nthreads = nthreads;
    m.u.worker_register.memory_limit = memory_limit;
    m.u.worker_register.ucx_address.data = ucx;
    m.u.worker_register.ucx_address.len = sizeof ucx;
    tp_send(p, &m);
    tp_expect(p, GS_MSG_PEERS, &m);
    gs_msg_cleanup(&m);
    return p;
}

void tp_send(tp_t *p, const gs_msg_t *msg)
{
    cr_assert_not_null(p->conn, "peer %s is closed", p->name);
    cr_assert_eq(gs_conn_send(p->conn, msg), GS_OK, "%s", gs_last_error());
}

void tp_close(tp_t *p)
{
    if (p->conn != NULL) gs_conn_close(p->conn, GS_OK);
    cr_assert(tp_wait_closed(p, TH_TIMEOUT_MS));
}

static int tp_take(tp_t *p, uint32_t type, gs_msg_t *msg)
{
    for (size_t i = 0; i < p->inbox.len; i++) {
        gs_buf_t *b = &p->inbox.data[i];
        gs_msg_t m;
        cr_assert_eq(gs_msg_decode(b->data + 4, b->len - 4, &m), GS_OK, "%s", gs_last_error());
        if (m.type == type) {
            gs_buf_cleanup(b);
            memmove(&p->inbox.data[i], &p->inbox.data[i + 1], (p->inbox.len - i - 1) * sizeof *b);
            p->inbox.len--;
            if (msg != NULL) *msg = m;
            else gs_msg_cleanup(&m);
            return 1;
        }
        gs_msg_cleanup(&m);
    }
    return 0;
}

int tp_wait(tp_t *p, uint32_t type, int timeout_ms, gs_msg_t *msg)
{
    uint64_t end = gs_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        if (tp_take(p, type, msg)) return 1;
        if (p->closed || gs_now_ns() > end) return 0;
        uv_run(&p->th->loop, UV_RUN_ONCE);
    }
}

void tp_expect(tp_t *p, uint32_t type, gs_msg_t *msg)
{
    cr_assert(tp_wait(p, type, TH_TIMEOUT_MS, msg), "%s: no %s arrived (closed %d)", p->name,
              gs_msg_type_name(type), p->closed);
}

int tp_none(tp_t *p, uint32_t type, int ms)
{
    th_run_for(p->th, ms);
    for (size_t i = 0; i < p->inbox.len; i++) {
        gs_buf_t *b = &p->inbox.data[i];
        gs_msg_t m;
        int same;
        cr_assert_eq(gs_msg_decode(b->data + 4, b->len - 4, &m), GS_OK);
        same = m.type == type;
        gs_msg_cleanup(&m);
        if (same) return 0;
    }
    return 1;
}

int tp_wait_closed(tp_t *p, int timeout_ms)
{
    uint64_t end = gs_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (!p->closed && gs_now_ns() < end) uv_run(&p->th->loop, UV_RUN_ONCE);
    return p->closed;
}

void tp_drain(tp_t *p)
{
    for (size_t j = 0; j < p->inbox.len; j++) gs_buf_cleanup(&p->inbox.data[j]);
    p->inbox.len = 0;
}

/* ---- graphs ---- */

static const char *tg_layer_text[8] = {"layer-0", "layer-1", "layer-2", "layer-3",
                                       "layer-4", "layer-5", "layer-6", "layer-7"};

void tg_init(tg_t *g, uint32_t nlayers)
{
    memset(g, 0, sizeof *g);
    g->nlayers = nlayers;
    for (uint32_t l = 0; l < nlayers; l++) {
        g->layers[l].data = (const uint8_t *)tg_layer_text[l];
        g->layers[l].len = strlen(tg_layer_text[l]);
    }
}

uint64_t tg_task(tg_t *g, uint32_t layer, int ndeps, const uint64_t *deps)
{
    uint64_t t = g->ntasks++;
    g->task_layer[t] = layer;
    g->task_block[t] = t * 10;
    g->nbytes[t] = 800;
    for (int i = 0; i < ndeps; i++) g->deps[g->dep_off[t] + (uint64_t)i] = deps[i];
    g->dep_off[t + 1] = g->dep_off[t] + (uint64_t)ndeps;
    return t;
}

uint64_t tg_ext(tg_t *g, uint64_t graph, uint64_t task)
{
    uint64_t k = g->nexternals++;
    g->externals[2 * k] = graph;
    g->externals[2 * k + 1] = task;
    return TG_EXT_BASE + k;
}

void tg_output(tg_t *g, uint64_t task)
{
    g->outputs[g->noutputs++] = task;
}

void tg_submit(tp_t *client, const tg_t *g, uint32_t flags, uint64_t client_ref)
{
    static uint64_t deps[512];
    gs_msg_t m;
    uint64_t nd = g->dep_off[g->ntasks];
    for (uint64_t j = 0; j < nd; j++) {
        deps[j] = g->deps[j] >= TG_EXT_BASE ? g->ntasks + (g->deps[j] - TG_EXT_BASE) : g->deps[j];
    }
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_GRAPH_SUBMIT;
    m.u.graph_submit.client_ref = client_ref;
    m.u.graph_submit.flags = flags;
    m.u.graph_submit.nlayers = g->nlayers;
    m.u.graph_submit.layers = (gs_bytes_t *)g->layers;
    m.u.graph_submit.ntasks = g->ntasks;
    m.u.graph_submit.task_layer = g->task_layer;
    m.u.graph_submit.task_block = g->task_block;
    m.u.graph_submit.dep_off = g->dep_off;
    m.u.graph_submit.deps = deps;
    m.u.graph_submit.task_nbytes = g->nbytes;
    m.u.graph_submit.nexternals = g->nexternals;
    m.u.graph_submit.externals = g->externals;
    m.u.graph_submit.noutputs = g->noutputs;
    m.u.graph_submit.outputs = g->outputs;
    tp_send(client, &m);
}

uint64_t tg_submit_ok(tp_t *client, const tg_t *g, uint32_t flags)
{
    static uint64_t ref = 100;
    gs_msg_t m;
    uint64_t id;
    tg_submit(client, g, flags, ++ref);
    if (!tp_wait(client, GS_MSG_GRAPH_ACCEPTED, TH_TIMEOUT_MS, &m)) {
        gs_msg_t e;
        if (tp_wait(client, GS_MSG_ERROR, 10, &e)) {
            cr_assert_fail("graph refused: %s", (const char *)e.u.error.message.data);
        }
        cr_assert_fail("no graph-accepted");
    }
    cr_assert_eq(m.u.graph_accepted.client_ref, ref);
    id = m.u.graph_accepted.graph_id;
    gs_msg_cleanup(&m);
    return id;
}

/* ---- worker side ---- */

void tw_done(tp_t *w, uint64_t graph, const uint64_t *tasks, int n, int32_t status, uint64_t nbytes,
             const char *err)
{
    uint64_t gids[128], nb[128], run[128], fetch[128];
    int32_t st[128];
    gs_str_t errs[128];
    gs_msg_t m;
    cr_assert_leq(n, 128);
    for (int i = 0; i < n; i++) {
        gids[i] = graph;
        nb[i] = nbytes;
        run[i] = 1000 + (uint64_t)i;
        fetch[i] = 0;
        st[i] = status;
        errs[i].data = (const uint8_t *)(err ? err : "");
        errs[i].len = err ? strlen(err) : 0;
    }
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_TASK_DONE;
    m.u.task_done.n = (uint64_t)n;
    m.u.task_done.graph_id = gids;
    m.u.task_done.task_id = tasks;
    m.u.task_done.status = st;
    m.u.task_done.nbytes = nb;
    m.u.task_done.run_ns = run;
    m.u.task_done.fetch_ns = fetch;
    m.u.task_done.start_ns = fetch;   /* a fake worker's clock: kernels from 0 to run_ns */
    m.u.task_done.end_ns = run;
    m.u.task_done.nerrors = status == GS_OK ? 0 : (uint32_t)n;
    m.u.task_done.errors = errs;
    tp_send(w, &m);
}

void tw_done1(tp_t *w, uint64_t graph, uint64_t task)
{
    tw_done(w, graph, &task, 1, GS_OK, 800, NULL);
}

int ta_find(const gs_msg_task_assign_t *a, uint64_t t)
{
    for (uint64_t i = 0; i < a->ntasks; i++) {
        if (a->task_id[i] == t) return (int)i;
    }
    return -1;
}

int tw_collect(tp_t *w, uint64_t graph, int want, uint64_t *out, int cap, int ms)
{
    int n = 0;
    uint64_t end = gs_now_ns() + (uint64_t)ms * 1000000ull;
    while (n < want && gs_now_ns() < end) {
        gs_msg_t m;
        if (!tp_wait(w, GS_MSG_TASK_ASSIGN, 10, &m)) continue;
        if (m.u.task_assign.graph_id == graph) {
            for (uint64_t i = 0; i < m.u.task_assign.ntasks && n < cap; i++) out[n++] = m.u.task_assign.task_id[i];
        }
        gs_msg_cleanup(&m);
    }
    return n;
}

void tw_heartbeat(tp_t *w)
{
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_HEARTBEAT;
    if (w->conn != NULL) gs_conn_send(w->conn, &m);
}

/* ---- raw sockets ---- */

static void th_raw_read(th_t *th, int fd, uint8_t *buf, size_t len)
{
    size_t got = 0;
    uint64_t end = gs_now_ns() + (uint64_t)TH_TIMEOUT_MS * 1000000ull;
    while (got < len) {
        ssize_t n = recv(fd, buf + got, len - got, MSG_DONTWAIT);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        cr_assert(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), "the connection closed mid-handshake");
        cr_assert_lt(gs_now_ns(), end, "timed out waiting for gsched");
        uv_run(&th->loop, UV_RUN_NOWAIT);
    }
}

static void th_raw_recv(th_t *th, int fd, gs_msg_t *m)
{
    uint8_t hdr[4], *payload;
    uint32_t len;
    th_raw_read(th, fd, hdr, 4);
    len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    cr_assert_leq(len, 1u << 20);
    payload = malloc(len ? len : 1);
    cr_assert_not_null(payload);
    th_raw_read(th, fd, payload, len);
    cr_assert_eq(gs_msg_decode(payload, len, m), GS_OK, "%s", gs_last_error());
    free(payload);
}

void th_raw_send(int fd, const gs_msg_t *m)
{
    gs_buf_t b;
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode(m, &b), GS_OK);
    cr_assert_eq(send(fd, b.data, b.len, MSG_NOSIGNAL), (ssize_t)b.len);
    gs_buf_cleanup(&b);
}

void th_raw_handshake(th_t *th, int fd, const char *token, uint32_t role, const char *name)
{
    gs_hs_peer_t hs;
    gs_msg_t m, out;
    cr_assert_eq(gs_hs_peer_hello(&hs, token, role, name, &out), GS_OK);
    th_raw_send(fd, &out);
    th_raw_recv(th, fd, &m);
    cr_assert_eq(m.type, GS_MSG_CHALLENGE, "%s instead of challenge", gs_msg_type_name(m.type));
    cr_assert_eq(gs_hs_peer_answer(&hs, &m, &out), GS_OK, "%s", gs_last_error());
    gs_msg_cleanup(&m);
    th_raw_send(fd, &out);
    th_raw_recv(th, fd, &m);
    cr_assert_eq(m.type, GS_MSG_WELCOME, "%s instead of welcome", gs_msg_type_name(m.type));
    gs_msg_cleanup(&m);
}
