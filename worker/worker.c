/* gworker lifecycle and control plane: connect/handshake/register with gsched, heartbeats,
 * message dispatch, stop and destroy. */
#include "worker/worker_int.h"
#include "worker/xfer/xfer.h"
#include "chunkops/fileio.h"

#include "common/sysmem.h"
#include "common/time.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GS_W_RETRY_MS 100
#define GS_W_LEAVE_MS 2000   /* after a device loss: how long gsched has to close the connection */
#define GS_W_TICK_MS 50

static void gs__worker_count_closed(gs_worker_t *w);
static void gs__worker_teardown(gs_worker_t *w);
static void gs__worker_connect(gs_worker_t *w);

/* ---------------------------------------------------------------- sending */

void gs__wsend_msg(gs_worker_t *w, const gs_msg_t *m)
{
    gs_status_t status;
    if (w->conn == NULL) return;
    status = gs_conn_send(w->conn, m);
    if (status != GS_OK && status != GS_ERR_CONN_CLOSED)
        GS_LOG_ERROR("sending %s to gsched failed: %s", gs_msg_type_name(m->type),
                     gs_last_error());
}

void gs__wdata_to_scheduler(gs_worker_t *w, uint64_t req_id, uint64_t graph, uint64_t task,
                            gs_status_t status, const void *data, size_t len)
{
    gs_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_DATA;
    m.u.data.req_id = req_id;
    m.u.data.graph_id = graph;
    m.u.data.task_id = task;
    m.u.data.status = status;
    m.u.data.data.data = data;
    m.u.data.data.len = data ? len : 0;
    gs__wsend_msg(w, &m);
}

static void gs__worker_heartbeat(gs_worker_t *w)
{
    gs_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_HEARTBEAT;
    m.u.heartbeat.seq = ++w->hb_seq;
    m.u.heartbeat.mem_used = w->mem_used;
    m.u.heartbeat.mem_limit = w->mem_limit;
    m.u.heartbeat.executing = (uint32_t)w->nrunning;
    m.u.heartbeat.queued = (uint32_t)(w->nqueued + w->nadmitted - w->nrunning);
    m.u.heartbeat.disk_used = w->st.disk_used;
    m.u.heartbeat.disk_limit = w->st.disk_limit;
    m.u.heartbeat.spilled_bytes = w->st.spilled_bytes;
    m.u.heartbeat.spilled_ns = w->st.spilled_ns;
    m.u.heartbeat.unspilled_bytes = w->st.unspilled_bytes;
    m.u.heartbeat.unspilled_ns = w->st.unspilled_ns;
    m.u.heartbeat.host_used = w->st.host_used;
    m.u.heartbeat.host_limit = w->st.host_limit;
    m.u.heartbeat.host_spilled_bytes = w->st.host_spilled_bytes;
    m.u.heartbeat.host_spilled_ns = w->st.host_spilled_ns;
    m.u.heartbeat.host_unspilled_bytes = w->st.host_unspilled_bytes;
    m.u.heartbeat.host_unspilled_ns = w->st.host_unspilled_ns;
    {
        uint64_t fr[GS_FREAD_NPATHS];
        gs_chunkops_file_read_stats(fr);
        m.u.heartbeat.file_cpu_bytes = fr[GS_FREAD_CPU];
        m.u.heartbeat.file_pinned_bytes = fr[GS_FREAD_PINNED];
        m.u.heartbeat.file_cufile_bytes = fr[GS_FREAD_CUFILE];
        m.u.heartbeat.file_compat_bytes = fr[GS_FREAD_CUFILE_COMPAT];
    }
    gs__wsend_msg(w, &m);
    gs__xfer_report(w);
}

static void gs__worker_hb_cb(uv_timer_t *h)
{
    gs__worker_heartbeat(h->data);
}

static void gs__worker_tick_cb(uv_timer_t *h)
{
    gs_worker_t *w = h->data;
    if (w->state != GS_WSTATE_RUNNING) return;
    gs__xfer_tick(w);
    gs__wexec_tick(w);
    gs__xfer_progress(w);
    gs__wexec_pump(w);
}

/* End of each loop iteration: send what completed during it once due (the next iteration's
 * prepare sends it all if the loop is about to block). */
static void gs__worker_check_cb(uv_check_t *h)
{
    gs_worker_t *w = h->data;
    if (w->state != GS_WSTATE_RUNNING) return;
    gs__wexec_pump(w);
    gs__wexec_flush_done_due(w);
    if (w->repls != NULL) gs__wrepl_poll(w);
}

/* Before the loop blocks: progress UCX and arm its event fd. */
static void gs__worker_prepare_cb(uv_prepare_t *h)
{
    gs_worker_t *w = h->data;
    if (w->state != GS_WSTATE_RUNNING) return;
    gs__xfer_progress(w);
    gs__wexec_pump(w);
    /* uv_backend_timeout 0: the poll that follows will not block (work is pending), so the
     * batch may wait for more; otherwise it goes now, before the loop sleeps */
    if (uv_backend_timeout(w->loop) == 0) gs__wexec_flush_done_due(w);
    else gs__wexec_flush_done(w);
    if (w->repls != NULL) gs__wrepl_poll(w);
}

/* gsched did not close the connection within GS_W_LEAVE_MS of the worker's ERROR: stop. */
static void gs__worker_leave_cb(uv_timer_t *h)
{
    gs_worker_stop(h->data, GS_ERR_DEVICE_LOST);
}

static void gs__worker_async_cb(uv_async_t *h)
{
    gs_worker_t *w = h->data;
    /* a device loss (exec.c) stops the worker here, outside the completion that found it --
     * once gsched, told by the ERROR, has closed the connection (or after GS_W_LEAVE_MS): a
     * worker closing first, with messages of gsched's still unread in its socket, makes its
     * kernel answer with a reset, and gsched's kernel then drops the failed task and the ERROR
     * if gsched has not read them yet (seen under load: gsched logged "connection closed") */
    if (w->dev_lost && w->state == GS_WSTATE_RUNNING) {
        if (w->conn == NULL) {
            gs_worker_stop(w, GS_ERR_DEVICE_LOST);
        } else if (!w->leaving) {
            w->leaving = 1;
            uv_timer_start(&w->retry_timer, gs__worker_leave_cb, GS_W_LEAVE_MS, 0);
        }
        return;
    }
    gs__wexec_drain(w);
}

/* ---------------------------------------------------------------- messages */

static void gs__worker_register(gs_worker_t *w)
{
    gs_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_WORKER_REGISTER;
    m.u.worker_register.name.data = (const uint8_t *)w->name;
    m.u.worker_register.name.len = strlen(w->name);
    m.u.worker_register.backend.data = (const uint8_t *)w->ops->name;
    m.u.worker_register.backend.len = strlen(w->ops->name);
    m.u.worker_register.host.data = (const uint8_t *)w->hostname;
    m.u.worker_register.host.len = strlen(w->hostname);
    m.u.worker_register.device = w->device;
    m.u.worker_register.nthreads = (uint32_t)(w->streams_mode ? w->nstreams : w->nthreads);
    m.u.worker_register.pid = (uint32_t)getpid();
    m.u.worker_register.memory_limit = w->mem_limit;
    {
        const void *addr;
        size_t len;
        gs__xfer_address(w, &addr, &len);
        m.u.worker_register.ucx_address.data = addr;
        m.u.worker_register.ucx_address.len = len;
    }
    if (gs__xfer_direct_start(w) != GS_OK)
        GS_LOG_WARN("no data port for direct gathers (clients gather through gsched): %s", gs_last_error());
    m.u.worker_register.data_addr.data = (const uint8_t *)gs__xfer_direct_addr(w);
    m.u.worker_register.data_addr.len = strlen(gs__xfer_direct_addr(w));
    gs__wsend_msg(w, &m);
}

static void gs__worker_on_msg(gs_conn_t *conn, gs_msg_t *m, void *arg)
{
    gs_worker_t *w = arg;
    uint64_t i;

    if (w->state >= GS_WSTATE_STOPPING) return;
    GS_LOG_TRACE("%s from gsched", gs_msg_type_name(m->type));
    if (w->state == GS_WSTATE_HELLO) {
        if (m->type == GS_MSG_CHALLENGE) {
            gs_msg_t auth;
            gs_status_t st = gs_hs_peer_answer(&w->hs, m, &auth);
            if (st != GS_OK) {
                GS_LOG_ERROR("gsched at %s:%d failed the handshake: %s", w->sched_host, w->sched_port,
                             gs_last_error());
                gs_worker_stop(w, st);
                return;
            }
            gs__wsend_msg(w, &auth);
            return;
        }
        if (m->type == GS_MSG_WELCOME) {
            uint8_t key[GS_AUTH_KEY_BYTES];
            gs_status_t st = gs_hs_peer_key(&w->hs, &m->u.welcome, key);
            if (st == GS_OK) st = gs__xfer_set_key(w, key);
            memset(key, 0, sizeof key);
            memset(&w->hs, 0, sizeof w->hs);
            if (st != GS_OK) {
                GS_LOG_ERROR("gsched at %s:%d sent an unusable welcome: %s", w->sched_host, w->sched_port,
                             gs_last_error());
                gs_worker_stop(w, st);
                return;
            }
            w->id = m->u.welcome.id;
            w->st.worker_id = w->id;
            w->heartbeat_ms = w->heartbeat_req_ms ? w->heartbeat_req_ms
                              : m->u.welcome.heartbeat_ms ? m->u.welcome.heartbeat_ms : 1000;
            w->state = GS_WSTATE_RUNNING;
            gs__worker_register(w);
            uv_timer_start(&w->hb_timer, gs__worker_hb_cb, w->heartbeat_ms, w->heartbeat_ms);
            uv_timer_start(&w->tick_timer, gs__worker_tick_cb, GS_W_TICK_MS, GS_W_TICK_MS);
            GS_LOG_INFO("registered with gsched at %s:%d as worker %llu (%s, backend %s, %d %s, "
                        "memory limit %llu bytes)", w->sched_host, w->sched_port,
                        (unsigned long long)w->id, w->name, w->ops->name,
                        w->streams_mode ? w->nstreams : w->nthreads,
                        w->streams_mode ? "streams" : "threads",
                        (unsigned long long)w->mem_limit);
            return;
        }
        if (m->type == GS_MSG_ERROR) {
            gs_status_t st = m->u.error.status < 0 ? (gs_status_t)m->u.error.status : GS_ERR_AUTH;
            GS_LOG_ERROR("gsched refused this worker: %s (%s)",
                         m->u.error.message.len ? (const char *)m->u.error.message.data : "",
                         gs_status_string(st));
            gs_worker_stop(w, st);
            return;
        }
        GS_LOG_WARN("%s from gsched before welcome; ignored", gs_msg_type_name(m->type));
        return;
    }
    if (m->type != GS_MSG_ERROR) w->st.registered = 1;
    switch (m->type) {
    case GS_MSG_PEERS:
        gs__xfer_peers(w, &m->u.peers);
        break;
    case GS_MSG_TASK_ASSIGN:
        gs__wexec_assign(w, &m->u.task_assign);
        gs__xfer_progress(w);      /* push fetch requests out now */
        break;
    case GS_MSG_RELEASE:
        for (i = 0; i < m->u.release.n; i++)
            gs__wstore_release(w, m->u.release.keys[2 * i], m->u.release.keys[2 * i + 1]);
        gs__wgraph_evict_idle(w);
        gs__wexec_pump(w);
        break;
    case GS_MSG_GATHER_REQ:
        for (i = 0; i < m->u.gather_req.n; i++)
            gs__xfer_gather(w, m->u.gather_req.req_id, m->u.gather_req.keys[2 * i],
                        m->u.gather_req.keys[2 * i + 1]);
        break;
    case GS_MSG_CANCEL:
        gs__wgraph_cancel(w, m->u.cancel.graph_id);
        gs__wexec_pump(w);
        break;
    case GS_MSG_REPLICATE:
        gs__wrepl_start(w, &m->u.replicate);
        break;
    case GS_MSG_SHUTDOWN:
        GS_LOG_INFO("gsched asked this worker to shut down");
        gs_worker_stop(w, GS_OK);
        break;
    case GS_MSG_ERROR:
        GS_LOG_ERROR("gsched reported an error: %s (%s)",
                     m->u.error.message.len ? (const char *)m->u.error.message.data : "",
                     gs_status_string((gs_status_t)m->u.error.status));
        break;
    default:
        GS_LOG_WARN("unexpected %s message from gsched; ignored", gs_msg_type_name(m->type));
        break;
    }
}

/* ---------------------------------------------------------------- connection */

static void gs__worker_retry_cb(uv_timer_t *h)
{
    gs__worker_connect(h->data);
}

static void gs__worker_on_close(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    gs_worker_t *w = arg;

    if (w->conn == conn) w->conn = NULL;
    if (w->state >= GS_WSTATE_STOPPING) {
        gs__worker_count_closed(w);       /* the connection counted as a handle */
        return;
    }
    if (w->state == GS_WSTATE_RUNNING && w->dev_lost) {
        GS_LOG_INFO("gsched closed the connection after the device loss");
        gs_worker_stop(w, GS_ERR_DEVICE_LOST);
        return;
    }
    if (w->state == GS_WSTATE_RUNNING) {
        GS_LOG_ERROR("lost the connection to gsched at %s:%d (%s)", w->sched_host,
                     w->sched_port, gs_status_string(reason));
        gs_worker_stop(w, GS_ERR_SCHEDULER_LOST);
        return;
    }
    /* not registered yet: retry refused connections until the deadline */
    if (gs_now_ns() < w->connect_deadline &&
        (reason == GS_ERR_CONN_REFUSED || reason == GS_ERR_IO || reason == GS_ERR_CONN_CLOSED ||
         reason == GS_ERR_TIMED_OUT)) {
        GS_LOG_DEBUG("connecting to gsched at %s:%d failed (%s); retrying", w->sched_host,
                     w->sched_port, gs_status_string(reason));
        w->state = GS_WSTATE_CONNECTING;
        uv_timer_start(&w->retry_timer, gs__worker_retry_cb, GS_W_RETRY_MS, 0);
        return;
    }
    GS_LOG_ERROR("cannot connect to gsched at %s:%d: %s", w->sched_host, w->sched_port,
                 gs_status_string(reason));
    gs_worker_stop(w, reason == GS_ERR_CONN_REFUSED || reason == GS_ERR_TIMED_OUT || reason == GS_ERR_AUTH
                          ? reason : GS_ERR_SCHEDULER_LOST);
}

static void gs__worker_on_connect(gs_conn_t *conn, gs_status_t status, void *arg)
{
    gs_worker_t *w = arg;
    if (status == GS_OK)
        GS_LOG_DEBUG("connected to gsched at %s:%d", w->sched_host, w->sched_port);
}

static void gs__worker_connect(gs_worker_t *w)
{
    gs_conn_params_t cp;
    gs_msg_t m;
    gs_status_t status;

    if (w->state != GS_WSTATE_CONNECTING) return;
    memset(&cp, 0, sizeof(cp));
    cp.msg_cb = gs__worker_on_msg;
    cp.close_cb = gs__worker_on_close;
    cp.connect_cb = gs__worker_on_connect;
    cp.arg = w;
    cp.tls = w->tls;
    status = gs_conn_connect(w->loop, w->sched_host, w->sched_port, &cp, &w->conn);
    if (status != GS_OK) {
        w->conn = NULL;
        GS_LOG_ERROR("cannot connect to gsched at %s:%d: %s", w->sched_host, w->sched_port,
                     gs_last_error());
        gs_worker_stop(w, status);
        return;
    }
    status = gs_hs_peer_hello(&w->hs, w->token, GS_ROLE_WORKER, w->name, &m);
    if (status != GS_OK) {
        GS_LOG_ERROR("cannot start the handshake with gsched: %s", gs_last_error());
        gs_worker_stop(w, status);
        return;
    }
    w->state = GS_WSTATE_HELLO;
    gs__wsend_msg(w, &m);
}

/* ---------------------------------------------------------------- public API */

/* The automatic host memory limit: what this process may use (physical memory bounded by its
 * cgroup) divided among the @a share workers of this host. */
static uint64_t gs__worker_auto_memory(uint32_t share)
{
    gs_sysmem_t mem;
    uint64_t lim;
    (void)gs_sysmem_query(NULL, &mem);
    lim = gs_sysmem_share(&mem, share);
    GS_LOG_INFO("automatic memory limit %.2f GB: %.2f GB (%s) / %u worker(s)", (double)lim / 1e9,
                (double)mem.total / 1e9, mem.source, share ? share : 1u);
    return lim;
}

/* An explicit limit above what this process may use is lowered to it (Dask does the same:
 * a limit the machine cannot honour would only defer the failure to the kernel's OOM killer). */
static uint64_t gs__worker_clamp_memory(const gs_worker_t *w, uint64_t lim)
{
    gs_sysmem_t mem;
    (void)gs_sysmem_query(NULL, &mem);
    if (lim <= mem.total) return lim;
    GS_LOG_WARN("worker %s: memory limit %.2f GB is more than the %.2f GB this process may use "
                "(%s): using %.2f GB", w->name, (double)lim / 1e9, (double)mem.total / 1e9,
                mem.source, (double)mem.total / 1e9);
    return mem.total;
}

gs_status_t gs_worker_create(const gs_worker_params_t *params, uv_loop_t *loop,
                             gs_worker_h *worker_p)
{
    gs_worker_t *w;
    gs_status_t status;
    gs_chunkops_params_t cp;
    char host[256];
    int port, rc;
    size_t used = 0, limit = 0;

    if (params == NULL || loop == NULL || worker_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_worker_create: params, loop and worker_p "
                            "are required");
    if (params->scheduler == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "no scheduler address given");
    status = gs_addr_parse(params->scheduler, host, sizeof(host), &port);
    if (status != GS_OK) return status;
    if (params->nthreads < 0 || params->nthreads > 4096)
        return gs_error_set(GS_ERR_INVALID_PARAM, "nthreads %d is out of range 0..4096",
                            params->nthreads);
    if (params->nstreams < 0 || params->nstreams > 256)
        return gs_error_set(GS_ERR_INVALID_PARAM, "nstreams %d is out of range 0..256",
                            params->nstreams);
    if (params->stream_depth < 0 || params->stream_depth > 64)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stream_depth %d is out of range 0..64",
                            params->stream_depth);
    if (params->exec < GS_WORKER_EXEC_AUTO || params->exec > GS_WORKER_EXEC_STREAMS)
        return gs_error_set(GS_ERR_INVALID_PARAM, "exec mode %d is unknown", params->exec);
    if (params->device < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "device %d is negative", params->device);

    w = gs_calloc(1, sizeof(*w), "worker");
    if (w == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the worker");
    w->loop = loop;
    w->state = GS_WSTATE_CREATED;
    w->stop_cb = params->stop_cb;
    w->stop_arg = params->arg;
    w->sched_port = port;
    w->device = params->device;
    w->connect_timeout_ms = params->connect_timeout_ms ? params->connect_timeout_ms : 10000;
    w->fetch_timeout_ms = params->fetch_timeout_ms ? params->fetch_timeout_ms : 30000;
    w->memory_wait_ms = params->memory_wait_ms ? params->memory_wait_ms : 30000;
    w->heartbeat_req_ms = params->heartbeat_ms;
    atomic_init(&w->test_notify_fail, params->test_notify_failures);
    atomic_init(&w->nnotify_retried, 0);
    gs_u64map_init(&w->graphs);
    /* chunk headers: one per task output and fetched copy, so no malloc per task */
    status = gs_mpool_init(&w->chunk_pool, sizeof(gs_wchunk_t), 0, GS_W_CHUNK_SLAB, "worker chunk slab");
    gs_assert_always(status == GS_OK);
    gs__wlist_init(&w->admit_q);
    gs__wlist_init(&w->ready_q);
    gs__wlist_init(&w->idle_graphs);
    uv_mutex_init(&w->job_lock);
    uv_mutex_init(&w->done_lock);
    uv_cond_init(&w->job_cond);

    {
        char hn[256];
        if (gethostname(hn, sizeof(hn)) != 0) snprintf(hn, sizeof(hn), "localhost");
        hn[sizeof(hn) - 1] = '\0';
        w->hostname = gs_strdup(hn, "worker hostname");
        if (params->name && params->name[0]) {
            w->name = gs_strdup(params->name, "worker name");
        } else {
            char nm[300];
            snprintf(nm, sizeof(nm), "%s-%ld", hn, (long)getpid());
            w->name = gs_strdup(nm, "worker name");
        }
    }
    status = gs_addr_parse(params->scheduler, host, sizeof(host), &port);
    w->sched_host = gs_strdup(host, "scheduler host");
    w->token = gs_strdup(params->token ? params->token : "", "worker token");
    if (!w->hostname || !w->name || !w->sched_host || !w->token) {
        status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the worker's strings");
        goto err;
    }
    if (params->file_root != NULL) {
        char *r = realpath(params->file_root, NULL);
        if (r == NULL) {
            status = gs_error_set(GS_ERR_INVALID_PARAM, "file root %s: %s", params->file_root,
                                  strerror(errno));
            goto err;
        }
        w->file_root = gs_strdup(r, "worker file root");
        free(r);
        if (w->file_root == NULL) {
            status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the worker's strings");
            goto err;
        }
    }
    if (params->tls_ca_file != NULL || params->tls_cert != NULL || params->tls_key != NULL) {
        gs_tls_config_t tc = {params->tls_ca_file, params->tls_cert, params->tls_key, 0};
        if ((status = gs_tls_ctx_create(&tc, 0, &w->tls)) != GS_OK) goto err;
    }

    status = gs_chunkops_find(params->backend ? params->backend : "cpu", &w->ops);
    if (status != GS_OK) goto err;
    w->streams_mode = params->exec == GS_WORKER_EXEC_STREAMS ||
                      (params->exec == GS_WORKER_EXEC_AUTO && strcmp(w->ops->name, "cpu") != 0);
    if (!w->streams_mode && strcmp(w->ops->name, "cpu") != 0) {
        status = gs_error_set(GS_ERR_INVALID_PARAM, "the %s backend needs the streams execution "
                              "mode", w->ops->name);
        goto err;
    }
    w->nthreads = params->nthreads;
    if (w->nthreads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        w->nthreads = n > 0 ? (int)n : 1;
    }
    w->nstreams = params->nstreams ? params->nstreams : 4;
    w->stream_depth = params->stream_depth ? params->stream_depth : 2;

    memset(&cp, 0, sizeof(cp));
    cp.device = params->device;
    cp.nthreads = 1;
    if (params->test_lose_device_on != NULL) {
        w->test_lose_device_on = gs_strdup(params->test_lose_device_on, "worker test knob");
        if (w->test_lose_device_on == NULL) {
            status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the worker");
            goto err;
        }
        GS_LOG_WARN("test_lose_device_on %s: a crash of that kernel counts as a lost device",
                    w->test_lose_device_on);
    }
    cp.test_lose_device_on = w->test_lose_device_on;
    cp.file_path = params->file_path;
    if (strcmp(w->ops->name, "cpu") == 0) {
        uint64_t lim = params->memory_limit ? gs__worker_clamp_memory(w, params->memory_limit)
                                            : gs__worker_auto_memory(params->memory_share);
        cp.memory_limit = (size_t)lim;
    } else {
        cp.memory_limit = (size_t)params->device_memory_limit;
    }
    status = w->ops->ctx_create(&cp, &w->ctx);
    if (status != GS_OK) {
        w->ctx = NULL;
        goto err;
    }
    w->ops->mem_usage(w->ctx, &used, &limit);
    w->mem_limit = limit ? (uint64_t)limit : (uint64_t)cp.memory_limit;
    if (w->mem_limit == 0) w->mem_limit = gs__worker_auto_memory(params->memory_share);
    w->st.mem_limit = w->mem_limit;

    status = gs__wexec_init(w);
    if (status != GS_OK) goto err;
    status = gs__wspill_init(w, params);
    if (status != GS_OK) goto err;

    /* loop handles (unreferenced: only the scheduler connection keeps the loop alive) */
    rc = uv_async_init(loop, &w->async, gs__worker_async_cb);
    if (rc != 0) {
        status = gs_error_set(GS_ERR_IO, "uv_async_init: %s", uv_strerror(rc));
        goto err;
    }
    uv_timer_init(loop, &w->hb_timer);
    uv_timer_init(loop, &w->retry_timer);
    uv_timer_init(loop, &w->tick_timer);
    uv_timer_init(loop, &w->note_timer);
    uv_timer_init(loop, &w->defer_timer);
    uv_check_init(loop, &w->check);
    uv_prepare_init(loop, &w->prepare);
    w->nhandles_open += 8;
    w->handles_init = 1;
    w->hb_timer.data = w->retry_timer.data = w->tick_timer.data = w->note_timer.data = w;
    w->defer_timer.data = w;
    w->check.data = w->prepare.data = w->async.data = w;
    uv_unref((uv_handle_t *)&w->hb_timer);
    uv_unref((uv_handle_t *)&w->tick_timer);
    uv_unref((uv_handle_t *)&w->note_timer);
    uv_unref((uv_handle_t *)&w->defer_timer);
    uv_unref((uv_handle_t *)&w->check);
    uv_unref((uv_handle_t *)&w->prepare);
    uv_unref((uv_handle_t *)&w->async);
    uv_check_start(&w->check, gs__worker_check_cb);
    uv_prepare_start(&w->prepare, gs__worker_prepare_cb);

    status = gs__xfer_init(w, params);
    if (status != GS_OK) goto err;

    *worker_p = w;
    return GS_OK;

err:
    {
        gs_status_t keep = status;
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        gs__worker_teardown(w);
        return gs_error_set(keep, "%s", msg);
    }
}

gs_status_t gs_worker_start(gs_worker_h w)
{
    if (w == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_worker_start: no worker");
    if (w->state != GS_WSTATE_CREATED)
        return gs_error_set(GS_ERR_BUSY, "the worker was already started");
    w->state = GS_WSTATE_CONNECTING;
    w->connect_deadline = gs_now_ns() + (uint64_t)w->connect_timeout_ms * 1000000ull;
    GS_LOG_INFO("worker %s starting: connecting to gsched at %s:%d", w->name, w->sched_host,
                w->sched_port);
    gs__worker_connect(w);
    return GS_OK;
}

/* Every closed handle (and the closed connection) counts down; the last one ends the stop. */
static void gs__worker_finish_stop(gs_worker_t *w)
{
    gs_worker_stop_cb cb = w->stop_cb;
    void *arg = w->stop_arg;
    gs_status_t reason = w->stop_reason;

    w->state = GS_WSTATE_STOPPED;
    GS_LOG_INFO("worker %s stopped (%s)", w->name, gs_status_string(reason));
    if (cb && !w->destroying) cb(w, reason, arg);
}

static void gs__worker_count_closed(gs_worker_t *w)
{
    gs_assert(w->nhandles_open > 0);
    if (--w->nhandles_open == 0 && w->state == GS_WSTATE_STOPPING && !w->destroying)
        gs__worker_finish_stop(w);
}

void gs__worker_handle_closed(uv_handle_t *h)
{
    gs__worker_count_closed(h->data);
}

void gs__worker_hold(gs_worker_t *w)
{
    w->nhandles_open++;
}

void gs__worker_unhold(gs_worker_t *w)
{
    gs__worker_count_closed(w);
}

void gs_worker_stop(gs_worker_h w, gs_status_t reason)
{
    if (w == NULL || w->state >= GS_WSTATE_STOPPING) return;
    /* after a device loss nothing else may stop the worker for another reason (gsched may
     * close the connection first): the process must exit, not rejoin */
    if (w->dev_lost) reason = GS_ERR_DEVICE_LOST;
    w->stop_reason = reason;
    if (w->state == GS_WSTATE_RUNNING && (reason == GS_OK || reason == GS_ERR_DEVICE_LOST))
        gs__wexec_flush_done(w);
    w->state = GS_WSTATE_STOPPING;
    GS_LOG_DEBUG("worker %s stopping (%s)", w->name, gs_status_string(reason));

    /* kernels: let running ones finish; their results are dropped */
    gs__wexec_stop_threads(w);
    if (w->streams_mode && w->streams) {
        for (int s = 0; s < w->nstreams; s++)
            if (w->streams[s]) (void)w->ops->sync(w->ctx, w->streams[s]);
    }
    gs__wexec_drain(w);
    gs__wexec_cleanup_tasks(w);
    gs__wrepl_cleanup(w);
    gs__xfer_shutdown(w);
    gs__wexec_drain(w);     /* staging notes that UCX shutdown may have produced */

    uv_timer_stop(&w->hb_timer);
    uv_timer_stop(&w->retry_timer);
    uv_timer_stop(&w->tick_timer);
    uv_timer_stop(&w->note_timer);
    uv_timer_stop(&w->defer_timer);
    uv_close((uv_handle_t *)&w->hb_timer, gs__worker_handle_closed);
    uv_close((uv_handle_t *)&w->retry_timer, gs__worker_handle_closed);
    uv_close((uv_handle_t *)&w->tick_timer, gs__worker_handle_closed);
    uv_close((uv_handle_t *)&w->note_timer, gs__worker_handle_closed);
    uv_close((uv_handle_t *)&w->defer_timer, gs__worker_handle_closed);
    uv_close((uv_handle_t *)&w->check, gs__worker_handle_closed);
    uv_close((uv_handle_t *)&w->prepare, gs__worker_handle_closed);
    uv_close((uv_handle_t *)&w->async, gs__worker_handle_closed);
    if (w->conn) {
        w->nhandles_open++;   /* the connection counts until its close_cb */
        /* flushed: a clean stop, and a device loss (the failed task and the ERROR) */
        gs_conn_close(w->conn, reason == GS_OK || reason == GS_ERR_DEVICE_LOST ? GS_OK : reason);
    }
}

/* Stop (when the loop handles exist and the worker is not stopped yet), run the loop until
 * every handle is closed, then free everything: gs_worker_destroy and the error path of
 * gs_worker_create, so that the two cannot drift apart. Safe on a partly created worker. */
static void gs__worker_teardown(gs_worker_t *w)
{
    if (w->handles_init) {
        if (w->state != GS_WSTATE_STOPPED) {
            if (w->state < GS_WSTATE_STOPPING) gs_worker_stop(w, GS_OK);
            w->destroying = 1;
            while (w->nhandles_open > 0) uv_run(w->loop, UV_RUN_ONCE);
            w->state = GS_WSTATE_STOPPED;
        }
        gs__wexec_drain(w);
    }
    gs__wrepl_cleanup(w);
    gs__xfer_cleanup(w);
    gs__wexec_stop_threads(w);
    gs__wexec_cleanup(w);
    gs__wstore_clear(w);
    gs__wgraph_free_all(w);
    gs__wspill_cleanup(w);
    gs_mpool_cleanup(&w->chunk_pool);   /* chunks leaked past free_all go with their slabs */
    if (w->ctx) w->ops->ctx_destroy(w->ctx);
    uv_mutex_destroy(&w->job_lock);
    uv_mutex_destroy(&w->done_lock);
    uv_cond_destroy(&w->job_cond);
    gs_free(w->hostname);
    gs_free(w->name);
    gs_free(w->sched_host);
    gs_free(w->token);
    gs_free(w->file_root);
    gs_free(w->test_lose_device_on);
    gs_tls_ctx_destroy(w->tls);
    gs_free(w);
}

void gs_worker_destroy(gs_worker_h w)
{
    if (w == NULL) return;
    gs__worker_teardown(w);
}

void gs_worker_stats(gs_worker_h w, gs_worker_stats_t *stats_p)
{
    if (w == NULL || stats_p == NULL) return;
    *stats_p = w->st;
    stats_p->worker_id = w->id;
    stats_p->tasks_queued = w->nqueued + w->nadmitted - w->nrunning;
    stats_p->tasks_running = w->nrunning;
    stats_p->mem_used = w->mem_used;
    stats_p->mem_limit = w->mem_limit;
    stats_p->npeers = gs__xfer_npeers(w);
    stats_p->notify_retries = atomic_load(&w->nnotify_retried);
    gs__wspill_host_stats(w, stats_p);
}
