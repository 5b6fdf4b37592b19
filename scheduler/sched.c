/*
 * The scheduler's lifecycle (create, listen, stop, destroy), its public queries and the
 * housekeeping timer (heartbeat and handshake timeouts, retries, progress) and per-iteration
 * tick. Connections are in peers.c; sched_int.h lists the other files.
 */
#include "scheduler/peers.h"
#include "scheduler/place.h"
#include "scheduler/keep.h"
#include "scheduler/send.h"
#include "scheduler/tasks.h"

#include "common/heap.h"
#include "common/time.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define GS__HOUSEKEEPING_MS 50u
/* Pending connections the kernel queues for accept (clamped to net.core.somaxconn, 4096 on
 * current Linux): a connect storm that fills a short queue drops real clients' SYNs, and their
 * retransmissions back off 1, 2, 4, 8 s: one client waited over 20 s under the socket fuzzer. */
#define GS__LISTEN_BACKLOG 4096
/* A housekeeping timer this late means the loop stood still (see gs__on_timer). */
#define GS__STALL_NS (500ull * 1000000ull)
/* Return free heap memory to the system when this much is held free (checked every ..._MS) */
#define GS__HEAP_RELEASE_BYTES (32ull << 20)
#define GS__HEAP_RELEASE_MS 1000u

/* ------------------------------------------------------------------------------------------ */
/* Housekeeping and the per-iteration tick.                                                   */

/* A client silent for the idle timeout (no heartbeat either: the client library sends one every
 * heartbeat interval): closed when it holds no graph, else looked at again one timeout later (a
 * graph in flight or kept is its reason to wait; its results stay until it releases them). */
static void gs__client_idle(gs_sched_t *s, gs__peer_t *p, uint64_t now)
{
    for (const gs__graph_t *g = s->gtail; g != NULL; g = g->prev) {
        if (g->client == p) {
            p->last_seen_ns = now;
            return;
        }
    }
    s->st.idle_closed_total++;
    gs__peer_close(p, GS_ERR_TIMED_OUT, GS_ERR_TIMED_OUT, "idle for %u ms without a graph",
                   s->client_idle_timeout_ms);
}

/* Memory release, from housekeeping. Free heap memory goes back to the system once
 * GS__HEAP_RELEASE_BYTES of it have accumulated, at most once per GS__HEAP_RELEASE_MS: glibc
 * keeps freed blocks resident (common/heap.h), so after a storm of connections and frames gsched
 * would otherwise stay at its peak RSS. */
static void gs__sched_heap(gs_sched_t *s, uint64_t now)
{
    gs_heap_stats_t hs;
    if (now - s->heap_checked_ns < GS__HEAP_RELEASE_MS * 1000000ull) return;
    s->heap_checked_ns = now;
    /* table blocks kept for the next graph go once unused for a while (keep.h) */
    gs__keep_trim(s, now, GS__KEEP_IDLE_MS * 1000000ull);
    gs_heap_stats(&hs);
    if (hs.free >= GS__HEAP_RELEASE_BYTES && gs_heap_release()) s->st.heap_trims_total++;
}

static void gs__on_timer(uv_timer_t *timer)
{
    gs_sched_t *s = timer->data;
    uint64_t now = gs_now_ns();
    uint64_t hb_ns = (uint64_t)s->heartbeat_timeout_ms * 1000000ull;
    uint64_t hs_ns = (uint64_t)s->handshake_timeout_ms * 1000000ull;
    uint64_t idle_ns = (uint64_t)s->client_idle_timeout_ms * 1000000ull;
    uint64_t stall = 0;
    gs__peer_t *p = s->peers;

    /* A stall of gsched itself (SIGSTOP, a VM pause, an overloaded host) does not count against
     * the workers or the clients: their heartbeats wait unread in the sockets meanwhile, and
     * timers run before this iteration reads them. Time the loop did not run is added to every
     * worker's and client's last sighting, so heartbeat and idle timeouts measure only time
     * gsched was awake to hear from them. */
    if (s->timer_last_ns != 0 && now - s->timer_last_ns > GS__STALL_NS) {
        stall = now - s->timer_last_ns - GS__HOUSEKEEPING_MS * 1000000ull;
        s->st.stalls_total++;
        GS_LOG_INFO("gsched's loop stood still for %.0f ms: not counted against heartbeats or task timeouts",
                    (double)stall / 1e6);
        for (gs__peer_t *q = s->peers; q != NULL; q = q->next) {
            if (q->state == GS__PEER_WORKER || q->state == GS__PEER_CLIENT) q->last_seen_ns += stall;
            /* nor against a hello or registration waiting unread in its socket */
            if (q->state == GS__PEER_HANDSHAKE || (q->state == GS__PEER_WORKER && q->worker == NULL))
                q->t_connect_ns += stall;
        }
    }
    s->timer_last_ns = now;
    /* Heartbeats (of workers and clients) are judged against the end of the loop's last poll
     * phase, not against now: timers run before this iteration reads the sockets, so a heartbeat
     * that arrived since is still unread however late this timer runs (a busy or stalled loop,
     * short timeouts). */
    if (s->polled_ns == 0 || s->polled_ns > now) s->polled_ns = now;
    while (p != NULL) {
        gs__peer_t *next = p->next;   /* closing never frees synchronously */
        /* last_seen may lie ahead of polled_ns: a heartbeat read late in a long iteration, plus
         * the stall added above (unsigned: without the first test it would read as a huge delay) */
        if (p->state == GS__PEER_WORKER && p->worker != NULL && s->polled_ns > p->last_seen_ns &&
            s->polled_ns - p->last_seen_ns > hb_ns) {
            GS_LOG_WARN("worker %s missed heartbeats for %u ms", p->worker->name, s->heartbeat_timeout_ms);
            gs__peer_close(p, GS_ERR_TIMED_OUT, 0, NULL);
        } else if (p->state == GS__PEER_HANDSHAKE && now > p->t_connect_ns && now - p->t_connect_ns > hs_ns) {
            s->st.refused_total++;
            gs__peer_close(p, GS_ERR_TIMED_OUT, GS_ERR_TIMED_OUT, "no hello within %u ms", s->handshake_timeout_ms);
        } else if (p->state == GS__PEER_WORKER && p->worker == NULL && now > p->t_connect_ns &&
                   now - p->t_connect_ns > hs_ns) {
            gs__peer_close(p, GS_ERR_TIMED_OUT, GS_ERR_TIMED_OUT, "no worker-register within %u ms",
                           s->handshake_timeout_ms);
        } else if (p->state == GS__PEER_CLIENT && idle_ns != 0 && s->polled_ns > p->last_seen_ns &&
                   s->polled_ns - p->last_seen_ns > idle_ns) {
            gs__client_idle(s, p, now);
        }
        p = next;
    }
    gs_conn_budget_expire(&s->frame_budget, s->handshake_timeout_ms);
    gs__sched_heap(s, now);
    gs__sched_retries(s, now);
    if (s->task_timeout_ms != 0) gs__sched_task_timeouts(s, now, stall);
    gs__sched_progress(s, now, 0);
    gs__sched_tick(s);
}

static void gs__on_check(uv_check_t *check)
{
    gs_sched_t *s = check->data;
    s->polled_ns = gs_now_ns();   /* right after the poll phase: every socket was read */
    s->accepts_round = 0;         /* the next iteration accepts GS__ACCEPTS_PER_ROUND again */
    gs__sched_tick(s);
}

/* ------------------------------------------------------------------------------------------ */
/* Public API.                                                                                */

static gs_status_t gs__parse_host(const char *host, int port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0) return GS_OK;
    if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0) return GS_OK;
    return gs_error_set(GS_ERR_INVALID_PARAM, "host '%s' is not a numeric IPv4 or IPv6 address", host);
}

/* 127.0.0.0/8, ::1 or ::ffff:127.x.y.z: reachable from this machine only. */
static int gs__is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        const uint8_t *a = (const uint8_t *)&((const struct sockaddr_in *)ss)->sin_addr;
        return a[0] == 127;
    }
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
    }
    return 0;
}

/* The connection limit, lowered so that it is reached before accept() runs out of descriptors. */
static uint32_t gs__fd_bound(uint32_t max_conns)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        rlim_t avail = rl.rlim_cur > 2 * GS_SCHED_FD_RESERVE ? rl.rlim_cur - GS_SCHED_FD_RESERVE : GS_SCHED_FD_RESERVE;
        if ((rlim_t)max_conns > avail) {
            GS_LOG_INFO("connection limit lowered from %u to %u (open file limit %llu)", max_conns, (unsigned)avail,
                        (unsigned long long)rl.rlim_cur);
            max_conns = (uint32_t)avail;
        }
    }
    return max_conns;
}

gs_status_t gs_sched_create(const gs_sched_params_t *params, uv_loop_t *loop, gs_sched_h *sched_p)
{
    gs_sched_params_t prm;
    gs_sched_t *s;
    struct sockaddr_storage ss;
    gs_status_t st;
    uint8_t data_key[GS_AUTH_KEY_BYTES];

    if (loop == NULL || sched_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_create: NULL argument");
    memset(&prm, 0, sizeof prm);
    prm.host = "127.0.0.1";
    prm.port = GS_SCHED_DEFAULT_PORT;
    prm.token = "";
    prm.heartbeat_ms = GS_SCHED_DEFAULT_HEARTBEAT_MS;
    prm.heartbeat_timeout_ms = GS_SCHED_DEFAULT_HEARTBEAT_TIMEOUT_MS;
    prm.allowed_failures = GS_SCHED_DEFAULT_ALLOWED_FAILURES;
    prm.max_frame = GS_PROTO_DEFAULT_MAX_FRAME;
    prm.handshake_timeout_ms = GS_SCHED_DEFAULT_HANDSHAKE_TIMEOUT_MS;
    prm.bw_cpu_local_gbps = GS_SCHED_DEFAULT_BW_CPU_LOCAL_GBPS;
    prm.bw_cpu_remote_gbps = GS_SCHED_DEFAULT_BW_CPU_REMOTE_GBPS;
    prm.bw_gpu_local_gbps = GS_SCHED_DEFAULT_BW_GPU_LOCAL_GBPS;
    prm.bw_gpu_remote_gbps = GS_SCHED_DEFAULT_BW_GPU_REMOTE_GBPS;
    prm.xfer_latency_us = GS_SCHED_DEFAULT_XFER_LATENCY_US;
    prm.max_ucx_address = GS_SCHED_DEFAULT_MAX_UCX_ADDRESS;
    prm.max_register_string = GS_SCHED_DEFAULT_MAX_REGISTER_STRING;
    prm.max_connections = GS_SCHED_DEFAULT_MAX_CONNECTIONS;
    prm.max_connections_per_addr = GS_SCHED_DEFAULT_MAX_CONNECTIONS_PER_ADDR;
    prm.client_idle_timeout_ms = GS_SCHED_DEFAULT_CLIENT_IDLE_TIMEOUT_MS;
    prm.frame_memory = GS_SCHED_DEFAULT_FRAME_MEMORY;
    prm.task_timeout_ms = GS_SCHED_DEFAULT_TASK_TIMEOUT_MS;
    prm.churn_max = GS_SCHED_DEFAULT_CHURN_MAX;
    prm.churn_window_ms = GS_SCHED_DEFAULT_CHURN_WINDOW_MS;
    if (params != NULL) {
        uint32_t fm = params->field_mask;
        if (fm & GS_SCHED_FIELD_HOST) prm.host = params->host;
        if (fm & GS_SCHED_FIELD_PORT) prm.port = params->port;
        if (fm & GS_SCHED_FIELD_TOKEN) prm.token = params->token ? params->token : "";
        if (fm & GS_SCHED_FIELD_HEARTBEAT_MS) prm.heartbeat_ms = params->heartbeat_ms;
        if (fm & GS_SCHED_FIELD_HEARTBEAT_TIMEOUT_MS) prm.heartbeat_timeout_ms = params->heartbeat_timeout_ms;
        if (fm & GS_SCHED_FIELD_ALLOWED_FAILURES) prm.allowed_failures = params->allowed_failures;
        if (fm & GS_SCHED_FIELD_MAX_FRAME) prm.max_frame = params->max_frame ? params->max_frame : GS_PROTO_DEFAULT_MAX_FRAME;
        if (fm & GS_SCHED_FIELD_HANDSHAKE_TIMEOUT_MS) prm.handshake_timeout_ms = params->handshake_timeout_ms;
        if (fm & GS_SCHED_FIELD_BW_PRIORS) {
            prm.bw_cpu_local_gbps = params->bw_cpu_local_gbps;
            prm.bw_cpu_remote_gbps = params->bw_cpu_remote_gbps;
            prm.bw_gpu_local_gbps = params->bw_gpu_local_gbps;
            prm.bw_gpu_remote_gbps = params->bw_gpu_remote_gbps;
        }
        if (fm & GS_SCHED_FIELD_XFER_LATENCY_US) prm.xfer_latency_us = params->xfer_latency_us;
        if (fm & GS_SCHED_FIELD_MAX_UCX_ADDRESS) prm.max_ucx_address = params->max_ucx_address;
        if (fm & GS_SCHED_FIELD_MAX_REGISTER_STRING) prm.max_register_string = params->max_register_string;
        if (fm & GS_SCHED_FIELD_MAX_CONNECTIONS) {
            prm.max_connections = params->max_connections;
            prm.max_connections_per_addr = params->max_connections_per_addr;
        }
        if (fm & GS_SCHED_FIELD_CLIENT_IDLE_TIMEOUT_MS) prm.client_idle_timeout_ms = params->client_idle_timeout_ms;
        if (fm & GS_SCHED_FIELD_FRAME_MEMORY) prm.frame_memory = params->frame_memory;
        if (fm & GS_SCHED_FIELD_ROLE_MAX_FRAME) {
            prm.client_max_frame = params->client_max_frame;
            prm.worker_max_frame = params->worker_max_frame;
        }
        if (fm & GS_SCHED_FIELD_TASK_TIMEOUT_MS) prm.task_timeout_ms = params->task_timeout_ms;
        if (fm & GS_SCHED_FIELD_CHURN) {
            prm.churn_max = params->churn_max;
            prm.churn_window_ms = params->churn_window_ms;
        }
        if (fm & GS_SCHED_FIELD_DASHBOARD) {
            prm.dashboard_address = params->dashboard_address;
            prm.dashboard_fallback = params->dashboard_fallback;
        }
        if (fm & GS_SCHED_FIELD_TLS) {
            prm.tls_ca_file = params->tls_ca_file;
            prm.tls_cert = params->tls_cert;
            prm.tls_key = params->tls_key;
            prm.tls_require_client_cert = params->tls_require_client_cert;
            if (prm.tls_ca_file == NULL || prm.tls_cert == NULL || prm.tls_key == NULL) {
                return gs_error_set(GS_ERR_INVALID_PARAM, "TLS needs a CA file, a certificate and its key "
                                    "(--tls-ca-file, --tls-cert, --tls-key)");
            }
        }
    }
    if (!(prm.bw_cpu_local_gbps > 0 && prm.bw_cpu_remote_gbps > 0 && prm.bw_gpu_local_gbps > 0 &&
          prm.bw_gpu_remote_gbps > 0 && prm.bw_cpu_local_gbps < 1e9 && prm.bw_cpu_remote_gbps < 1e9 &&
          prm.bw_gpu_local_gbps < 1e9 && prm.bw_gpu_remote_gbps < 1e9)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "bandwidth priors must be positive GB/s figures");
    }
    if (prm.host == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "host is NULL");
    if (prm.port < 0 || prm.port > 65535) return gs_error_set(GS_ERR_INVALID_PARAM, "port %d is not in 0..65535", prm.port);
    if ((st = gs__parse_host(prm.host, prm.port, &ss)) != GS_OK) return st;
    if (prm.heartbeat_ms == 0) return gs_error_set(GS_ERR_INVALID_PARAM, "heartbeat interval must be > 0");
    if (prm.heartbeat_timeout_ms <= prm.heartbeat_ms) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "heartbeat timeout (%u ms) must exceed the interval (%u ms)",
                            prm.heartbeat_timeout_ms, prm.heartbeat_ms);
    }
    if (prm.allowed_failures > 250) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "allowed failures %u is more than 250", prm.allowed_failures);
    }
    if (prm.max_ucx_address == 0 || prm.max_register_string == 0) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "registration caps (max_ucx_address, max_register_string) must be > 0");
    }
    if (prm.churn_window_ms == 0) return gs_error_set(GS_ERR_INVALID_PARAM, "churn window must be > 0");
    if (prm.handshake_timeout_ms == 0) return gs_error_set(GS_ERR_INVALID_PARAM, "handshake timeout must be > 0");
    if (prm.max_connections == 0 || prm.max_connections_per_addr == 0) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "connection limits must be > 0");
    }
    if (strlen(prm.token) > 4096) return gs_error_set(GS_ERR_INVALID_PARAM, "token longer than 4096 bytes");
    if (prm.token[0] == '\0' && !gs__is_loopback(&ss) && !(prm.tls_cert != NULL && prm.tls_require_client_cert)) {
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "refusing to listen on %s without a cluster token: anyone who can reach the port "
                            "could run tasks and read results. Set a token with $GSCHED_TOKEN or --token-file "
                            "PATH (the same on every worker and client), require TLS client certificates "
                            "(--tls-require-client-cert), or listen on 127.0.0.1",
                            prm.host);
    }

    /* the data-plane key of this cluster (handed to authenticated workers in WELCOME) */
    if ((st = gs_auth_random(data_key, sizeof data_key)) != GS_OK) return st;
    s = gs_calloc(1, sizeof *s, "scheduler");
    if (s == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the scheduler");
    s->loop = loop;
    s->host = gs_strdup(prm.host, "sched host");
    s->token = gs_strdup(prm.token, "sched token");
    if (s->host == NULL || s->token == NULL) {
        gs_free(s->host);
        gs_free(s->token);
        gs_free(s);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the scheduler");
    }
    s->token_len = strlen(s->token);
    if (prm.tls_cert != NULL) {
        gs_tls_config_t tc = {prm.tls_ca_file, prm.tls_cert, prm.tls_key, prm.tls_require_client_cert};
        if ((st = gs_tls_ctx_create(&tc, 1, &s->tls)) != GS_OK) {
            gs_free(s->host);
            gs_free(s->token);
            gs_free(s);
            return st;
        }
    }
    memcpy(s->data_key, data_key, sizeof data_key);
    memset(data_key, 0, sizeof data_key);
    if (prm.dashboard_address != NULL && strcmp(prm.dashboard_address, "none") != 0 &&
        (st = gs__dash_create(s, prm.dashboard_address, prm.dashboard_fallback, &s->dash)) != GS_OK) {
        memset(s->data_key, 0, sizeof s->data_key);
        gs_tls_ctx_destroy(s->tls);
        gs_free(s->host);
        gs_free(s->token);
        gs_free(s);
        return st;
    }
    s->port = prm.port;
    s->bound_port = -1;
    s->heartbeat_ms = prm.heartbeat_ms;
    s->heartbeat_timeout_ms = prm.heartbeat_timeout_ms;
    s->allowed_failures = prm.allowed_failures;
    s->max_frame = prm.max_frame;
    s->max_ucx_address = prm.max_ucx_address;
    s->max_register_string = prm.max_register_string;
    s->handshake_timeout_ms = prm.handshake_timeout_ms;
    s->max_conns = gs__fd_bound(prm.max_connections);
    s->max_conns_per_addr = prm.max_connections_per_addr;
    s->client_idle_timeout_ms = prm.client_idle_timeout_ms;
    s->client_max_frame = prm.client_max_frame ? prm.client_max_frame : prm.max_frame;
    s->worker_max_frame = prm.worker_max_frame ? prm.worker_max_frame : prm.max_frame;
    s->task_timeout_ms = prm.task_timeout_ms;
    s->churn_max = prm.churn_max;
    s->churn_window_ms = prm.churn_window_ms;
    gs_conn_budget_init(&s->frame_budget, prm.frame_memory);
    gs_u64map_init(&s->conns_by_addr);
    gs_u64map_init(&s->churn);
    s->bw_prior[GS__BW_CPU_LOCAL] = prm.bw_cpu_local_gbps;
    s->bw_prior[GS__BW_CPU_REMOTE] = prm.bw_cpu_remote_gbps;
    s->bw_prior[GS__BW_GPU_LOCAL] = prm.bw_gpu_local_gbps;
    s->bw_prior[GS__BW_GPU_REMOTE] = prm.bw_gpu_remote_gbps;
    s->xfer_latency_ns = (double)prm.xfer_latency_us * 1e3;
    s->next_peer_id = 1;
    s->next_graph_id = 1;
    s->next_sreq = 1;
    gs_u64map_init(&s->clients);
    gs_u64map_init(&s->graphs);
    gs_u64map_init(&s->relay_index);
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    uv_check_init(loop, &s->check);
    s->check.data = s;
    uv_prepare_init(loop, &s->accept_prep);
    s->accept_prep.data = s;
    s->nhandles = 3;
    *sched_p = s;
    return GS_OK;
}

static void gs__on_handle_closed(uv_handle_t *h)
{
    gs_sched_t *s = h->data;
    s->nhandles--;
}

gs_status_t gs_sched_listen(gs_sched_h s)
{
    struct sockaddr_storage ss;
    struct sockaddr_storage bound;
    int r, len = sizeof bound;
    gs_status_t st;

    if (s == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_listen: NULL scheduler");
    if (s->listen_called || s->stopping) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_listen called twice or after gs_sched_stop");
    }
    s->listen_called = 1;
    if ((st = gs__parse_host(s->host, s->port, &ss)) != GS_OK) return st;
    r = uv_tcp_init(s->loop, &s->server);
    if (r < 0) return gs_status_from_uv(r, "uv_tcp_init");
    s->server.data = s;
    s->nhandles++;
    s->listening = 1;
    r = uv_tcp_bind(&s->server, (const struct sockaddr *)&ss, 0);
    if (r == 0) r = uv_listen((uv_stream_t *)&s->server, GS__LISTEN_BACKLOG, gs__sched_on_connection);
    if (r < 0) {
        st = gs_status_from_uv(r, "listen");
        st = gs_error_set(st, "cannot listen on %s:%d: %s", s->host, s->port, uv_strerror(r));
        uv_close((uv_handle_t *)&s->server, gs__on_handle_closed);
        s->listening = 0;
        return st;
    }
    r = uv_tcp_getsockname(&s->server, (struct sockaddr *)&bound, &len);
    if (r == 0) {
        s->bound_port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                                    : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    }
    if (s->dash != NULL && (st = gs__dash_start(s->dash)) != GS_OK) {
        uv_close((uv_handle_t *)&s->server, gs__on_handle_closed);
        s->listening = 0;
        return st;
    }
    uv_timer_start(&s->timer, gs__on_timer, GS__HOUSEKEEPING_MS, GS__HOUSEKEEPING_MS);
    uv_check_start(&s->check, gs__on_check);
    GS_LOG_INFO("listening on %s:%d", s->host, s->bound_port);
    return GS_OK;
}

int gs_sched_port(gs_sched_h s)
{
    return s != NULL && s->listening ? s->bound_port : -1;
}

gs_status_t gs_sched_address(gs_sched_h s, char *buf, size_t len)
{
    struct sockaddr_storage bound;
    int blen = sizeof bound, n;
    char host[INET6_ADDRSTRLEN + 1] = "127.0.0.1";
    int v6 = 0;

    if (s == NULL || buf == NULL || !s->listening) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_address: scheduler is not listening");
    }
    if (uv_tcp_getsockname(&s->server, (struct sockaddr *)&bound, &blen) != 0) {
        return gs_error_set(GS_ERR_IO, "cannot read the bound address");
    }
    if (bound.ss_family == AF_INET6) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&bound;
        static const struct in6_addr any6 = IN6ADDR_ANY_INIT;
        if (memcmp(&a6->sin6_addr, &any6, sizeof any6) != 0) {
            uv_ip6_name(a6, host, sizeof host);
            v6 = 1;
        }
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&bound;
        if (a4->sin_addr.s_addr != htonl(INADDR_ANY)) uv_ip4_name(a4, host, sizeof host);
    }
    if (strcmp(host, "127.0.0.1") == 0 && !v6) {
        /* wildcard: name an address others can reach */
        uv_interface_address_t *ifs;
        int nifs;
        int wildcard = bound.ss_family == AF_INET6 ||
                       ((struct sockaddr_in *)&bound)->sin_addr.s_addr == htonl(INADDR_ANY);
        if (wildcard && uv_interface_addresses(&ifs, &nifs) == 0) {
            for (int i = 0; i < nifs; i++) {
                if (!ifs[i].is_internal && ifs[i].address.address4.sin_family == AF_INET) {
                    uv_ip4_name(&ifs[i].address.address4, host, sizeof host);
                    break;
                }
            }
            uv_free_interface_addresses(ifs, nifs);
        }
    }
    n = v6 ? snprintf(buf, len, "[%s]:%d", host, s->bound_port) : snprintf(buf, len, "%s:%d", host, s->bound_port);
    if (n < 0 || (size_t)n >= len) return gs_error_set(GS_ERR_INVALID_PARAM, "address buffer of %zu bytes is too small", len);
    return GS_OK;
}

void gs_sched_stop(gs_sched_h s)
{
    gs_msg_t shut;
    if (s == NULL || s->stopping) return;
    s->stopping = 1;
    GS_LOG_INFO("shutting down");
    /* SHUTDOWN is queued to every worker before anything is torn down, so it is what each
     * worker reads next (workers exit on it rather than rejoin); the closes below flush it */
    memset(&shut, 0, sizeof shut);
    shut.type = GS_MSG_SHUTDOWN;
    for (gs__peer_t *p = s->peers; p != NULL; p = p->next)
        if (p->state == GS__PEER_WORKER) gs__sched_send(s, p, &shut);
    if (s->listening) uv_close((uv_handle_t *)&s->server, gs__on_handle_closed);
    gs__dash_stop(s->dash);
    uv_timer_stop(&s->timer);
    uv_check_stop(&s->check);
    uv_close((uv_handle_t *)&s->timer, gs__on_handle_closed);
    uv_close((uv_handle_t *)&s->check, gs__on_handle_closed);
    uv_close((uv_handle_t *)&s->accept_prep, gs__on_handle_closed);
    gs__graph_free_all(s);
    for (gs__peer_t *p = s->peers; p != NULL; p = p->next) gs__peer_close(p, GS_OK, 0, NULL);
}

void gs_sched_stats(gs_sched_h s, gs_sched_stats_t *stats_p)
{
    if (s == NULL || stats_p == NULL) return;
    *stats_p = s->st;
    stats_p->nworkers = s->nworkers;
    stats_p->nclients = s->nclients;
    stats_p->nconnections = s->nconns;
    stats_p->ngraphs = s->ngraphs;
    stats_p->ngraphs_active = s->ngraphs_active;
    stats_p->frame_bytes_reserved = s->frame_budget.used;
    stats_p->frame_bytes_peak = s->frame_budget.peak;
    stats_p->frame_waits_total = s->frame_budget.waits_total;
    stats_p->frames_refused_total = s->frame_budget.refused_total;
    stats_p->frames_stalled_total = s->frame_budget.stalled_total;
    stats_p->conn_read_bytes = s->frame_budget.read_bytes;
    stats_p->conn_read_peak = s->frame_budget.read_peak;
    stats_p->conn_write_bytes = s->frame_budget.write_bytes;
    stats_p->conn_write_peak = s->frame_budget.write_peak;
    {
        gs_heap_stats_t hs;
        gs_heap_stats(&hs);
        stats_p->heap_used_bytes = hs.used;
        stats_p->heap_free_bytes = hs.free;
    }
    stats_p->rss_bytes = gs_heap_rss();
}

void gs_sched_destroy(gs_sched_h s)
{
    if (s == NULL) return;
    gs_sched_stop(s);
    while (s->nhandles > 0 || s->peers != NULL || gs_conn_refuser_busy(&s->refuser)) uv_run(s->loop, UV_RUN_ONCE);
    for (uint32_t i = 0; i < s->nslots; i++) {
        if (s->slots[i] != NULL) gs__worker_free(s->slots[i]);
    }
    gs__keep_trim(s, 0, 0);
    gs_free(s->slots);
    gs_free(s->live);
    gs_free(s->bytes_by_slot);
    gs_free(s->bw);
    gs_free(s->bw_measured);
    GS_VEC_FREE(&s->scratch_in);
    GS_VEC_FREE(&s->repls);
    GS_VEC_FREE(&s->touched_slots);
    GS_VEC_FREE(&s->scratch_slots);
    GS_VEC_FREE(&s->scratch_defer);
    GS_VEC_FREE(&s->relays);
    GS_VEC_FREE(&s->relay_free);
    gs_u64map_cleanup(&s->relay_index);
    gs_u64map_cleanup(&s->clients);
    gs_u64map_cleanup(&s->conns_by_addr);
    gs_u64map_cleanup(&s->churn);
    gs_u64map_cleanup(&s->graphs);
    GS_VEC_FREE(&s->retries);
    GS_VEC_FREE(&s->stack);
    GS_VEC_FREE(&s->peer_infos);
    GS_VEC_FREE(&s->names);
    gs__dash_free(s->dash);
    gs_tls_ctx_destroy(s->tls);
    gs_free(s->host);
    gs_free(s->token);
    gs_free(s);
}

gs_status_t gs_sched_dashboard_address(gs_sched_h s, char *buf, size_t len)
{
    const char *addr;
    if (s == NULL || buf == NULL || !s->listening) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_sched_dashboard_address: scheduler is not listening");
    }
    if (s->dash == NULL) return gs_error_set(GS_ERR_NOT_FOUND, "no dashboard is served");
    addr = gs__dash_address(s->dash);
    if (strlen(addr) >= len) return gs_error_set(GS_ERR_INVALID_PARAM, "address buffer of %zu bytes is too small", len);
    memcpy(buf, addr, strlen(addr) + 1);
    return GS_OK;
}
