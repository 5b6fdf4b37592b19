#include "fake_sched.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/alloc.h"
#include "common/log.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- recording */

static void fs_on_msg(gs_conn_t *conn, gs_msg_t *m, void *arg)
{
    fs_peer_t *p = arg;
    fake_sched_t *fs = p->fs;
    gs_msg_t r;

    memset(&r, 0, sizeof(r));
    switch (m->type) {
    case GS_MSG_HELLO:
        cr_assert_eq(m->u.hello.role, GS_ROLE_WORKER);
        cr_assert_eq(m->u.hello.version, GS_PROTO_VERSION);
        cr_assert_eq(gs_hs_sched_challenge(&p->hs, fs->token ? fs->token : "", &m->u.hello, &r), GS_OK, "%s",
                     gs_last_error());
        snprintf(p->name, sizeof(p->name), "%.*s", (int)m->u.hello.name.len,
                 (const char *)m->u.hello.name.data);
        gs_conn_send(conn, &r);
        break;
    case GS_MSG_AUTH: {
        uint8_t masked[GS_AUTH_KEY_BYTES];
        if (!gs_hs_sched_check(&p->hs, &m->u.auth)) {
            static const char msg[] = "wrong cluster token";
            r.type = GS_MSG_ERROR;
            r.u.error.status = GS_ERR_AUTH;
            r.u.error.message.data = (const uint8_t *)msg;
            r.u.error.message.len = sizeof(msg) - 1;
            gs_conn_send(conn, &r);
            gs_conn_close(conn, GS_OK);
            return;
        }
        cr_assert_eq(gs_hs_sched_key(&p->hs, fs->token ? fs->token : "", fs->data_key, masked), GS_OK);
        p->id = ++fs->next_id;
        r.type = GS_MSG_WELCOME;
        r.u.welcome.version = GS_PROTO_VERSION;
        r.u.welcome.id = p->id;
        r.u.welcome.heartbeat_ms = fs->heartbeat_ms;
        r.u.welcome.data_key = (gs_bytes_t){masked, sizeof(masked)};
        gs_conn_send(conn, &r);
        p->welcomed = 1;
        break;
    }
    case GS_MSG_WORKER_REGISTER:
        snprintf(p->backend, sizeof(p->backend), "%.*s", (int)m->u.worker_register.backend.len,
                 (const char *)m->u.worker_register.backend.data);
        p->nthreads = m->u.worker_register.nthreads;
        p->memory_limit = m->u.worker_register.memory_limit;
        free(p->ucx);
        p->ucx_len = m->u.worker_register.ucx_address.len;
        p->ucx = malloc(p->ucx_len ? p->ucx_len : 1);
        if (p->ucx_len) memcpy(p->ucx, m->u.worker_register.ucx_address.data, p->ucx_len);
        p->registered = 1;
        break;
    case GS_MSG_HEARTBEAT:
        p->nheartbeats++;
        p->last_hb = m->u.heartbeat;
        break;
    case GS_MSG_BANDWIDTH:
        for (uint32_t i = 0; i < m->u.bandwidth.n; i++) {
            p->bw_bytes += m->u.bandwidth.bytes[i];
            p->bw_count += m->u.bandwidth.count[i];
            p->bw_peer = m->u.bandwidth.peer[i];
            snprintf(p->bw_path, sizeof(p->bw_path), "%s", (const char *)m->u.bandwidth.path[i].data);
        }
        break;
    case GS_MSG_TASK_DONE: {
        const gs_msg_task_done_t *d = &m->u.task_done;
        uint32_t k = 0;
        fs->ndone_msgs++;
        for (uint64_t i = 0; i < d->n; i++) {
            fs_done_t *e;
            if (fs->ndone == fs->done_cap) {
                fs->done_cap = fs->done_cap ? 2 * fs->done_cap : 64;
                fs->done = realloc(fs->done, fs->done_cap * sizeof(*fs->done));
            }
            e = &fs->done[fs->ndone++];
            memset(e, 0, sizeof(*e));
            e->graph = d->graph_id[i];
            e->task = d->task_id[i];
            e->status = d->status[i];
            e->nbytes = d->nbytes[i];
            e->run_ns = d->run_ns[i];
            e->fetch_ns = d->fetch_ns[i];
            e->worker = -1;
            for (int j = 0; j < fs->npeers; j++) if (fs->peers[j] == p) e->worker = j;
            if (e->status != GS_OK) {
                cr_assert_lt(k, d->nerrors, "a failed task without its message");
                e->err = strndup((const char *)d->errors[k].data, d->errors[k].len);
                k++;
            }
        }
        cr_assert_eq(k, d->nerrors, "more messages than failed tasks");
        break;
    }
    case GS_MSG_DATA: {
        fs_data_t *e;
        if (fs->ndata == fs->data_cap) {
            fs->data_cap = fs->data_cap ? 2 * fs->data_cap : 64;
            fs->data = realloc(fs->data, fs->data_cap * sizeof(*fs->data));
        }
        e = &fs->data[fs->ndata++];
        e->req_id = m->u.data.req_id;
        e->graph = m->u.data.graph_id;
        e->task = m->u.data.task_id;
        e->status = m->u.data.status;
        e->len = m->u.data.data.len;
        e->bytes = malloc(e->len ? e->len : 1);
        if (e->len) memcpy(e->bytes, m->u.data.data.data, e->len);
        break;
    }
    case GS_MSG_ERROR:
        p->nerrors++;
        p->error_status = m->u.error.status;
        snprintf(p->error_msg, sizeof(p->error_msg), "%.*s", (int)m->u.error.message.len,
                 m->u.error.message.data ? (const char *)m->u.error.message.data : "");
        break;
    default:
        cr_log_warn("fake scheduler: unexpected %s from a worker", gs_msg_type_name(m->type));
        break;
    }
}

static void fs_on_close(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    fs_peer_t *p = arg;
    p->closed = 1;
    p->close_reason = reason;
    p->conn = NULL;
    p->registered = 0;
}

static void fs_on_conn(uv_stream_t *server, int status)
{
    fake_sched_t *fs = server->data;
    gs_conn_params_t cp;
    fs_peer_t *p;

    cr_assert_eq(status, 0);
    cr_assert_lt(fs->npeers, FS_MAX_PEERS);
    p = calloc(1, sizeof(*p));
    p->fs = fs;
    memset(&cp, 0, sizeof(cp));
    cp.msg_cb = fs_on_msg;
    cp.close_cb = fs_on_close;
    cp.arg = p;
    cr_assert_eq(gs_conn_accept(server, &cp, &p->conn), GS_OK, "%s", gs_last_error());
    fs->peers[fs->npeers++] = p;
}

static void fs_tick(uv_timer_t *t) { (void)t; }

void fs_start(fake_sched_t *fs, uv_loop_t *loop, const char *token)
{
    struct sockaddr_in sa;
    struct sockaddr_storage ss;
    int len = sizeof(ss);

    memset(fs, 0, sizeof(*fs));
    fs->loop = loop;
    fs->token = token;
    fs->heartbeat_ms = 50;
    cr_assert_eq(gs_auth_random(fs->data_key, sizeof(fs->data_key)), GS_OK);
    cr_assert_eq(uv_tcp_init(loop, &fs->server), 0);
    fs->server.data = fs;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    cr_assert_eq(uv_tcp_bind(&fs->server, (const struct sockaddr *)&sa, 0), 0);
    cr_assert_eq(uv_listen((uv_stream_t *)&fs->server, 16, fs_on_conn), 0);
    cr_assert_eq(uv_tcp_getsockname(&fs->server, (struct sockaddr *)&ss, &len), 0);
    fs->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    uv_timer_init(loop, &fs->tick);
    uv_timer_start(&fs->tick, fs_tick, 5, 5);
    fs->nopen = 2;
}

void fs_addr(const fake_sched_t *fs, char *buf, size_t len)
{
    snprintf(buf, len, "tcp://127.0.0.1:%d", fs->port);
}

static void fs_closed(uv_handle_t *h)
{
    fake_sched_t *fs = h->data;
    fs->nopen--;
}

void fs_stop(fake_sched_t *fs)
{
    int i;
    for (i = 0; i < fs->npeers; i++)
        if (fs->peers[i]->conn) gs_conn_close(fs->peers[i]->conn, GS_ERR_CANCELED);
    fs->tick.data = fs;
    uv_close((uv_handle_t *)&fs->server, fs_closed);
    uv_close((uv_handle_t *)&fs->tick, fs_closed);
    for (int k = 0; k < 1000 && fs->nopen > 0; k++) uv_run(fs->loop, UV_RUN_NOWAIT);
    for (int k = 0; k < 100; k++) {
        int open = 0;
        for (i = 0; i < fs->npeers; i++) open += fs->peers[i]->conn != NULL;
        if (!open) break;
        uv_run(fs->loop, UV_RUN_NOWAIT);
    }
    for (i = 0; i < fs->npeers; i++) {
        free(fs->peers[i]->ucx);
        free(fs->peers[i]->layers_sent);
        free(fs->peers[i]);
    }
    for (size_t k = 0; k < fs->ndone; k++) free(fs->done[k].err);
    for (size_t k = 0; k < fs->ndata; k++) free(fs->data[k].bytes);
    free(fs->done);
    free(fs->data);
    fs->npeers = 0;
}

int fs_run_until(fake_sched_t *fs, int (*pred)(void *), void *arg, int timeout_ms)
{
    uint64_t end = uv_hrtime() + (uint64_t)timeout_ms * 1000000ull;
    while (!pred(arg)) {
        if (uv_hrtime() > end) return pred(arg);
        uv_run(fs->loop, UV_RUN_ONCE);
    }
    return 1;
}

static int fs_never(void *arg) { (void)arg; return 0; }

void fs_run_for(fake_sched_t *fs, int ms)
{
    (void)fs_run_until(fs, fs_never, NULL, ms);
}

typedef struct { fake_sched_t *fs; int n; } fs_nreg_t;

static int fs_nreg_pred(void *arg)
{
    fs_nreg_t *a = arg;
    int n = 0;
    for (int i = 0; i < a->fs->npeers; i++) n += a->fs->peers[i]->registered;
    return n >= a->n;
}

int fs_wait_registered(fake_sched_t *fs, int n, int timeout_ms)
{
    fs_nreg_t a = {fs, n};
    return fs_run_until(fs, fs_nreg_pred, &a, timeout_ms);
}

void fs_send(fake_sched_t *fs, int peer, const gs_msg_t *m)
{
    cr_assert(peer >= 0 && peer < fs->npeers);
    cr_assert_not_null(fs->peers[peer]->conn, "peer %d is gone", peer);
    cr_assert_eq(gs_conn_send(fs->peers[peer]->conn, m), GS_OK, "%s", gs_last_error());
}

int fs_peer_of(const fake_sched_t *fs, uint64_t id)
{
    for (int i = 0; i < fs->npeers; i++)
        if (fs->peers[i]->id == id && fs->peers[i]->welcomed) return i;
    return -1;
}

void fs_announce_peers(fake_sched_t *fs)
{
    gs_peer_info_t info[FS_MAX_PEERS];
    gs_msg_t m;
    int n = 0, i;
    for (i = 0; i < fs->npeers; i++) {
        fs_peer_t *p = fs->peers[i];
        if (!p->registered) continue;
        info[n].id = p->id;
        info[n].name.data = (const uint8_t *)p->name;
        info[n].name.len = strlen(p->name);
        info[n].host.data = (const uint8_t *)"localhost";
        info[n].host.len = 9;
        info[n].ucx_address.data = p->ucx;
        info[n].ucx_address.len = p->ucx_len;
        n++;
    }
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_PEERS;
    m.u.peers.nadded = (uint32_t)n;
    m.u.peers.added = info;
    for (i = 0; i < fs->npeers; i++)
        if (fs->peers[i]->registered) fs_send(fs, i, &m);
}

void fs_announce_removed(fake_sched_t *fs, uint64_t id)
{
    gs_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_PEERS;
    m.u.peers.nremoved = 1;
    m.u.peers.removed = &id;
    for (int i = 0; i < fs->npeers; i++)
        if (fs->peers[i]->registered) fs_send(fs, i, &m);
}

void fs_assign(fake_sched_t *fs, int peer, uint64_t gid, const gs_taskgraph_t *tg,
               const uint64_t *tasks, size_t n, const uint64_t *holder)
{
    fs_peer_t *p = fs->peers[peer];
    uint32_t *layer_ids = calloc(tg->nlayers + 1, sizeof(uint32_t));
    gs_bytes_t *layers = calloc(tg->nlayers + 1, sizeof(gs_bytes_t));
    gs_buf_t *bufs = calloc(tg->nlayers + 1, sizeof(gs_buf_t));
    uint32_t *task_layer = calloc(n + 1, sizeof(uint32_t));
    uint64_t *task_block = calloc(n + 1, sizeof(uint64_t));
    uint64_t *dep_off = calloc(n + 1, sizeof(uint64_t));
    uint64_t ndeps = 0, k = 0;
    uint64_t *dep_keys, *dep_worker, *dep_nbytes;
    uint32_t nl = 0;
    gs_msg_t m;
    size_t i;

    if (p->layers_sent == NULL) p->layers_sent = calloc(64, sizeof(uint64_t));
    for (i = 0; i < n; i++) ndeps += tg->dep_off[tasks[i] + 1] - tg->dep_off[tasks[i]];
    dep_keys = calloc(2 * ndeps + 1, sizeof(uint64_t));
    dep_worker = calloc(ndeps + 1, sizeof(uint64_t));
    dep_nbytes = calloc(ndeps + 1, sizeof(uint64_t));
    for (i = 0; i < n; i++) {
        uint64_t t = tasks[i];
        uint32_t l = tg->task_layer[t];
        int sent = gid < 64 && l < 64 && (p->layers_sent[gid] >> l & 1);
        task_layer[i] = l;
        task_block[i] = tg->task_block[t];
        dep_off[i] = k;
        for (uint64_t j = tg->dep_off[t]; j < tg->dep_off[t + 1]; j++, k++) {
            uint64_t d = tg->deps[j];
            cr_assert_lt(d, tg->ntasks, "externals are not supported by the fake scheduler");
            dep_keys[2 * k] = gid;
            dep_keys[2 * k + 1] = d;
            dep_worker[k] = holder[d];
            dep_nbytes[k] = tg->task_nbytes[d];
        }
        if (!sent) {
            uint32_t q;
            for (q = 0; q < nl; q++) if (layer_ids[q] == l) break;
            if (q == nl) {
                gs_buf_init(&bufs[nl]);
                cr_assert_eq(gs_layer_encode(tg->layers[l], &bufs[nl]), GS_OK);
                layer_ids[nl] = l;
                layers[nl].data = bufs[nl].data;
                layers[nl].len = bufs[nl].len;
                nl++;
            }
            if (gid < 64 && l < 64) p->layers_sent[gid] |= 1ull << l;
        }
    }
    dep_off[n] = k;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_TASK_ASSIGN;
    m.u.task_assign.graph_id = gid;
    m.u.task_assign.nlayers = nl;
    m.u.task_assign.layer_ids = layer_ids;
    m.u.task_assign.layers = layers;
    m.u.task_assign.ntasks = n;
    m.u.task_assign.task_id = tasks;
    m.u.task_assign.task_layer = task_layer;
    m.u.task_assign.task_block = task_block;
    m.u.task_assign.dep_off = dep_off;
    m.u.task_assign.dep_keys = dep_keys;
    m.u.task_assign.dep_worker = dep_worker;
    m.u.task_assign.dep_nbytes = dep_nbytes;
    fs_send(fs, peer, &m);
    for (i = 0; i < nl; i++) gs_buf_cleanup(&bufs[i]);
    free(bufs);
    free(layers);
    free(layer_ids);
    free(task_layer);
    free(task_block);
    free(dep_off);
    free(dep_keys);
    free(dep_worker);
    free(dep_nbytes);
}

const fs_done_t *fs_find_done(const fake_sched_t *fs, uint64_t gid, uint64_t task)
{
    for (size_t i = fs->ndone; i-- > 0;)
        if (fs->done[i].graph == gid && fs->done[i].task == task) return &fs->done[i];
    return NULL;
}

typedef struct { fake_sched_t *fs; uint64_t gid, task; } fs_key_t;

static int fs_done_pred(void *arg)
{
    fs_key_t *k = arg;
    return fs_find_done(k->fs, k->gid, k->task) != NULL;
}

const fs_done_t *fs_wait_done(fake_sched_t *fs, uint64_t gid, uint64_t task, int timeout_ms)
{
    fs_key_t k = {fs, gid, task};
    fs_run_until(fs, fs_done_pred, &k, timeout_ms);
    return fs_find_done(fs, gid, task);
}

typedef struct { fake_sched_t *fs; uint64_t req; } fs_req_t;

static const fs_data_t *fs_find_data(const fake_sched_t *fs, uint64_t req)
{
    for (size_t i = 0; i < fs->ndata; i++)
        if (fs->data[i].req_id == req) return &fs->data[i];
    return NULL;
}

static int fs_data_pred(void *arg)
{
    fs_req_t *r = arg;
    return fs_find_data(r->fs, r->req) != NULL;
}

const fs_data_t *fs_gather(fake_sched_t *fs, int peer, uint64_t gid, uint64_t task,
                           int timeout_ms)
{
    uint64_t keys[2] = {gid, task};
    gs_msg_t m;
    fs_req_t r;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_GATHER_REQ;
    m.u.gather_req.req_id = ++fs->next_req + 1000;
    m.u.gather_req.n = 1;
    m.u.gather_req.keys = keys;
    fs_send(fs, peer, &m);
    r.fs = fs;
    r.req = m.u.gather_req.req_id;
    fs_run_until(fs, fs_data_pred, &r, timeout_ms);
    return fs_find_data(fs, r.req);
}

void fs_release(fake_sched_t *fs, int peer, uint64_t gid, uint64_t task)
{
    uint64_t keys[2] = {gid, task};
    gs_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_RELEASE;
    m.u.release.n = 1;
    m.u.release.keys = keys;
    fs_send(fs, peer, &m);
}

/* ---------------------------------------------------------------- whole graphs */

typedef struct { fake_sched_t *fs; size_t before; } fs_progress_t;

static int fs_progress_pred(void *arg)
{
    fs_progress_t *p = arg;
    return p->fs->ndone > p->before;
}

size_t fs_run_graph(fake_sched_t *fs, uint64_t gid, const gs_taskgraph_t *tg, const int *place,
                    int release, int timeout_ms)
{
    uint64_t n = tg->ntasks;
    char *assigned = calloc(n + 1, 1), *done = calloc(n + 1, 1), *output = calloc(n + 1, 1);
    uint64_t *holder = calloc(n + 1, sizeof(uint64_t));
    uint64_t *consumers = calloc(n + 1, sizeof(uint64_t));
    uint64_t *batch = calloc(n + 1, sizeof(uint64_t));
    uint64_t ndone = 0, end = uv_hrtime() + (uint64_t)timeout_ms * 1000000ull;
    size_t scanned = fs->ndone, failed = 0;

    for (uint64_t o = 0; o < tg->noutputs; o++) output[tg->outputs[o]] = 1;
    for (uint64_t j = 0; j < tg->dep_off[n]; j++) consumers[tg->deps[j]]++;
    while (ndone < n && !failed) {
        for (int p = 0; p < fs->npeers; p++) {
            size_t nb = 0;
            for (uint64_t t = 0; t < n; t++) {
                int ready = 1;
                if (assigned[t] || place[t] != p) continue;
                for (uint64_t j = tg->dep_off[t]; j < tg->dep_off[t + 1] && ready; j++)
                    ready = done[tg->deps[j]];
                if (!ready) continue;
                assigned[t] = 1;
                batch[nb++] = t;
            }
            if (nb) fs_assign(fs, p, gid, tg, batch, nb, holder);
        }
        {
            fs_progress_t pr = {fs, scanned};
            if (!fs_run_until(fs, fs_progress_pred, &pr, (int)((end - uv_hrtime()) / 1000000)))
                break;
        }
        for (; scanned < fs->ndone; scanned++) {
            fs_done_t *d = &fs->done[scanned];
            if (d->graph != gid || d->task >= n) continue;
            if (d->status != GS_OK) {
                failed = scanned + 1;
                break;
            }
            done[d->task] = 1;
            ndone++;
            holder[d->task] = fs->peers[place[d->task]]->id;
            if (release) {
                for (uint64_t j = tg->dep_off[d->task]; j < tg->dep_off[d->task + 1]; j++) {
                    uint64_t dep = tg->deps[j];
                    if (--consumers[dep] == 0 && !output[dep]) fs_release(fs, place[dep], gid, dep);
                }
            }
        }
        if (uv_hrtime() > end) break;
    }
    if (!failed && ndone < n) failed = (size_t)-1;   /* timed out */
    free(assigned);
    free(done);
    free(output);
    free(holder);
    free(consumers);
    free(batch);
    return failed;
}

int fs_gather_all(fake_sched_t *fs, uint64_t gid, const gs_taskgraph_t *tg, const int *place,
                  double *out, int timeout_ms)
{
    const gs_grid_t *g = &tg->out_grid;
    int64_t rs[GS_MAX_NDIM];
    int64_t s = 1;
    for (int a = g->ndim - 1; a >= 0; a--) {
        rs[a] = s;
        s *= g->shape[a];
    }
    for (uint64_t b = 0; b < tg->noutputs; b++) {
        uint64_t t = tg->outputs[b];
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], idx[GS_MAX_NDIM];
        const fs_data_t *d = fs_gather(fs, place[t], gid, t, timeout_ms);
        const double *v;
        int64_t cnt = 1;
        if (d == NULL || d->status != GS_OK) return 0;
        gs_grid_block_region(g, b, start, shape);
        for (int a = 0; a < g->ndim; a++) cnt *= shape[a];
        cr_assert_eq(d->len, (size_t)cnt * sizeof(double), "block %llu: %zu bytes, expected %lld",
                     (unsigned long long)b, d->len, (long long)cnt * 8);
        v = (const double *)d->bytes;
        memset(idx, 0, sizeof(idx));
        for (int64_t e = 0; e < cnt; e++) {
            int64_t off = 0;
            for (int a = 0; a < g->ndim; a++) off += (start[a] + idx[a]) * rs[a];
            memcpy(&out[off], &v[e], sizeof(double));
            for (int a = g->ndim - 1; a >= 0; a--) {
                if (++idx[a] < shape[a]) break;
                idx[a] = 0;
            }
        }
    }
    return 1;
}

gs_taskgraph_t *tw_lower(gs_array_h a, unsigned flags, double **ref_p, size_t *size_p)
{
    gs_taskgraph_t *tg = NULL;
    gs_chunkops_ctx_h ctx;
    gs_chunkops_params_t cp;
    size_t size = (size_t)gs_array_size(a);
    double *ref;

    cr_assert_eq(gs_graph_lower(a, flags, &tg), GS_OK, "%s", gs_last_error());
    memset(&cp, 0, sizeof(cp));
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(&cp, &ctx), GS_OK);
    ref = calloc(size ? size : 1, sizeof(double));
    cr_assert_eq(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, ref, size ? size : 1), GS_OK,
                 "%s", gs_last_error());
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    *ref_p = ref;
    *size_p = size;
    return tg;
}

/* ---------------------------------------------------------------- in-process workers */

static void tw_stopped(gs_worker_h w, gs_status_t reason, void *arg)
{
    tw_t *t = arg;
    (void)w;
    t->stopped = 1;
    t->reason = reason;
}

void tw_start(tw_t *t, fake_sched_t *fs, const gs_worker_params_t *p)
{
    gs_worker_params_t q = *p;
    char addr[64];
    memset(t, 0, sizeof(*t));
    fs_addr(fs, addr, sizeof(addr));
    q.scheduler = addr;
    q.stop_cb = tw_stopped;
    q.arg = t;
    cr_assert_eq(gs_worker_create(&q, fs->loop, &t->w), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_worker_start(t->w), GS_OK);
}

void tw_start_raw(tw_t *t, uv_loop_t *loop, const gs_worker_params_t *p)
{
    gs_worker_params_t q = *p;
    memset(t, 0, sizeof(*t));
    q.stop_cb = tw_stopped;
    q.arg = t;
    cr_assert_eq(gs_worker_create(&q, loop, &t->w), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_worker_start(t->w), GS_OK);
}

static int tw_stopped_pred(void *arg)
{
    return ((tw_t *)arg)->stopped;
}

int tw_wait_stopped(tw_t *t, fake_sched_t *fs, int timeout_ms)
{
    return fs_run_until(fs, tw_stopped_pred, t, timeout_ms);
}

void tw_destroy(tw_t *t)
{
    gs_worker_destroy(t->w);
    t->w = NULL;
}

void tw_start_each(fake_sched_t *fs, tw_t *t, int n, const gs_worker_params_t *p)
{
    for (int i = 0; i < n; i++) {
        tw_start(&t[i], fs, &p[i]);
        cr_assert(fs_wait_registered(fs, i + 1, 20000), "worker %d did not register", i);
    }
    fs_announce_peers(fs);
    fs_run_for(fs, 20);
}

void tw_stop_each(fake_sched_t *fs, tw_t *t, int n)
{
    for (int i = 0; i < n; i++) {
        gs_worker_stop(t[i].w, GS_OK);
        cr_assert(tw_wait_stopped(&t[i], fs, 10000), "worker %d did not stop", i);
        tw_destroy(&t[i]);
    }
}

static void fs_ticker_cb(uv_timer_t *h)
{
    fs_ticker_t *k = h->data;
    uint64_t now = uv_hrtime();
    if (k->last && now - k->last > k->max_gap) k->max_gap = now - k->last;
    k->last = now;
}

static void fs_ticker_closed(uv_handle_t *h)
{
    ((fs_ticker_t *)h->data)->closed = 1;
}

static int fs_ticker_is_closed(void *arg)
{
    return ((fs_ticker_t *)arg)->closed;
}

void fs_ticker_start(fake_sched_t *fs, fs_ticker_t *k)
{
    memset(k, 0, sizeof(*k));
    cr_assert_eq(uv_timer_init(fs->loop, &k->timer), 0);
    k->timer.data = k;
    cr_assert_eq(uv_timer_start(&k->timer, fs_ticker_cb, 2, 2), 0);
}

void fs_ticker_stop(fake_sched_t *fs, fs_ticker_t *k)
{
    uv_close((uv_handle_t *)&k->timer, fs_ticker_closed);
    cr_assert(fs_run_until(fs, fs_ticker_is_closed, k, 1000));
}

int fs_task_is_qr_or_svd(const gs_taskgraph_t *tg, uint64_t task)
{
    const char *name = gs_layer_name(tg->layers[tg->task_layer[task]]);
    return strcmp(name, "linalg-qr") == 0 || strcmp(name, "linalg-svd") == 0 ||
           strcmp(name, "linalg-gram") == 0 || strcmp(name, "linalg-apply") == 0 ||
           strcmp(name, "linalg-gstep") == 0;
}

void tw_start_streams(tw_t *t, fake_sched_t *fs, const char *backend, int nthreads)
{
    gs_worker_params_t p = {0};
    p.backend = backend;
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 2;
    p.stream_depth = 2;
    p.nthreads = nthreads;
    tw_start(t, fs, &p);
    cr_assert(fs_wait_registered(fs, 1, 5000), "the worker did not register");
}

void fs_fixture_setup(fake_sched_t *fs, uv_loop_t *loop)
{
    gs_log_set_level(GS_LOG_LEVEL_ERROR);
    cr_assert_eq(uv_loop_init(loop), 0);
    fs_start(fs, loop, NULL);
}

void fs_fixture_teardown(fake_sched_t *fs, uv_loop_t *loop)
{
    fs_stop(fs);
    uv_run(loop, UV_RUN_NOWAIT);
    cr_expect_eq(uv_loop_close(loop), 0, "handles left on the loop");
}

void fs_assert_close(const double *got, const double *ref, size_t n)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs(got[i] - ref[i]) <= 1e-12 * fmax(1.0, fabs(ref[i])),
                  "element %zu: %.17g, reference %.17g", i, got[i], ref[i]);
}

const char *fs_fail_msg(const fake_sched_t *fs, size_t failed)
{
    return failed == (size_t)-1 ? "timed out" : fs->done[failed - 1].err;
}

void fs_run_unfused_sum(fake_sched_t *fs, gs_array_h a, const gs_worker_params_t *p, int nw,
                        int split, gs_worker_stats_t *st_p)
{
    tw_t t[2];
    double *ref, *got;
    size_t size, failed;
    gs_array_h s;
    gs_taskgraph_t *tg;
    int *place;

    cr_assert(nw >= 1 && nw <= 2);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, a, NULL, &s), GS_OK);
    tg = tw_lower(s, GS_LOWER_CULL, &ref, &size);
    place = calloc(tg->ntasks, sizeof(int));
    for (uint64_t i = 0; i < tg->ntasks; i++)
        place[i] = split && tg->dep_off[i + 1] > tg->dep_off[i];
    tw_start_each(fs, t, nw, p);
    failed = fs_run_graph(fs, 1, tg, place, 0, 60000);
    cr_assert_eq(failed, 0, "%s", fs_fail_msg(fs, failed));
    got = calloc(size, sizeof(double));
    cr_assert(fs_gather_all(fs, 1, tg, place, got, 10000), "gather failed");
    fs_assert_close(got, ref, size);
    gs_worker_stats(t[0].w, st_p);
    tw_stop_each(fs, t, nw);
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(s);
}

gs_taskgraph_t *fs_run_gather_peer0(fake_sched_t *fs, uint64_t gid, gs_array_h a, double **ref_p,
                                    double **got_p, size_t *size_p)
{
    double *ref, *got;
    size_t size, failed;
    gs_taskgraph_t *tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));
    cr_assert_not_null(place);
    failed = fs_run_graph(fs, gid, tg, place, 1, 60000);
    cr_assert_eq(failed, 0, "graph %llu: %s", (unsigned long long)gid, fs_fail_msg(fs, failed));
    got = calloc(size ? size : 1, sizeof(double));
    cr_assert(fs_gather_all(fs, gid, tg, place, got, 10000), "gather failed");
    free(place);
    *ref_p = ref;
    *got_p = got;
    *size_p = size;
    return tg;
}
