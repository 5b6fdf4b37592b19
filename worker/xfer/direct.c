/* Direct gathers, the worker's side: the data port.
 *
 * A client gathering a large result asks gsched where its output chunks are (LOCATE_REQ) and
 * fetches each one from the worker holding it instead of through gsched (client/gather_direct.c).
 * This file is that worker's end: a TCP listener on the address this worker reaches gsched
 * from (the source address of a UDP socket connected to gsched; advertised in WORKER_REGISTER
 * as data_addr), one gs_conn per client connection, and
 * CHUNK_REQ requests answered with DATA.
 *
 * Trust. Reaching the port proves nothing: every CHUNK_REQ carries the ticket gsched gave the
 * client for that chunk (common/auth.h, gs_auth_gather_ticket: an HMAC under the cluster's
 * data-plane key, which only gsched and the workers hold). A request whose ticket does not
 * verify is answered with GS_ERR_AUTH and its connection closed; nothing is read or mapped for
 * it. The port is plain TCP (gsched hands out no direct addresses when it runs TLS).
 *
 * Shared memory. A request naming shm (a POSIX shared-memory object of the client, "/gs-..."),
 * asks for the bytes to be written there at shm_off instead of sent: the client and this worker
 * are on one host. The object is opened and mapped once per connection (and unmapped when the
 * connection and every copy into it are over); host chunks are copied on libuv's thread pool,
 * device chunks by the backend's copy_to_host on a stream (serve.c) into the region page-locked
 * by the backend's host_register (cudaHostRegister: one copy at bus speed, device -> the memory
 * the client reads), and the DATA answer then carries no bytes. A name that cannot be opened, or a region too small, gets GS_ERR_UNSUPPORTED
 * and the client asks again for the bytes over the socket.
 *
 * Lifetimes. A gs_wdconn_t has one reference for its open connection and one per send in flight
 * (gs_wsend_t.dconn); answers to a closed connection are dropped. Everything runs on the loop. */
#include "worker/xfer/xfer_int.h"

#include "common/auth.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define GS_WDIRECT_MAX_FRAME 4096u   /* requests are small */
#define GS_WDIRECT_MAX_SHM ((uint64_t)16 << 30)   /* a client's slot: one chunk (page-locked on GPUs) */

static void gs__wdconn_unmap(gs_wdconn_t *dc)
{
    gs_worker_t *w = dc->w;
    if (dc->shm_registered) w->ops->host_unregister(w->ctx, dc->shm_base);
    dc->shm_registered = 0;
    if (dc->shm_base != NULL) munmap(dc->shm_base, dc->shm_size);
    dc->shm_base = NULL;
    dc->shm_size = 0;
    dc->shm_name[0] = '\0';
}

void gs__wdconn_unref(gs_worker_t *w, gs_wdconn_t *dc)
{
    (void)w;
    gs_assert_always(dc->refs > 0);
    if (--dc->refs > 0) return;
    gs__wdconn_unmap(dc);
    gs__wlist_del(&dc->link);
    gs_free(dc);
}

static void gs__wdconn_close_cb(gs_conn_t *conn, gs_status_t reason, void *arg)
{
    gs_wdconn_t *dc = arg;
    gs_worker_t *w = dc->w;
    (void)conn;
    (void)reason;
    dc->conn = NULL;
    gs__wdconn_unref(w, dc);
    gs__worker_unhold(w);
}

void gs__wdirect_reply(gs_worker_t *w, gs_wdconn_t *dc, uint64_t req_id, uint64_t graph, uint64_t task,
                       gs_status_t status)
{
    gs_msg_t m;
    gs_status_t st;
    (void)w;
    if (dc->conn == NULL) return;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_DATA;
    m.u.data.req_id = req_id;
    m.u.data.graph_id = graph;
    m.u.data.task_id = task;
    m.u.data.status = status;
    st = gs_conn_send(dc->conn, &m);
    if (st != GS_OK && st != GS_ERR_CONN_CLOSED)
        GS_LOG_WARN("cannot answer a direct gather: %s", gs_last_error());
}

/* Map the client's shared-memory object @a name (checked: "/gs-" and then letters, digits, '-'
 * or '_') for @a dc, unless it is mapped already. GS_ERR_INVALID_PARAM / GS_ERR_IO. */
static gs_status_t gs__wdconn_map(gs_wdconn_t *dc, const gs_str_t *name)
{
    char path[sizeof dc->shm_name];
    struct stat sb;
    void *base;
    int fd;

    if (name->len < 5 || name->len >= sizeof path || memcmp(name->data, "/gs-", 4) != 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "shared-memory name of %zu bytes is not /gs-...",
                            (size_t)name->len);
    for (size_t i = 4; i < name->len; i++) {
        uint8_t ch = name->data[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_'))
            return gs_error_set(GS_ERR_INVALID_PARAM, "shared-memory name with a bad character");
    }
    memcpy(path, name->data, name->len);
    path[name->len] = '\0';
    if (dc->shm_base != NULL && strcmp(path, dc->shm_name) == 0) return GS_OK;
    if (dc->refs > 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "a connection may not switch shared-memory regions "
                                                  "while copies into the old one are in flight");
    gs__wdconn_unmap(dc);
    fd = shm_open(path, O_RDWR, 0);
    if (fd < 0) return gs_error_set(GS_ERR_IO, "cannot open shared memory %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || sb.st_size <= 0 || (uint64_t)sb.st_size > GS_WDIRECT_MAX_SHM) {
        close(fd);
        return gs_error_set(GS_ERR_IO, "shared memory %s is empty, unreadable or larger than %llu bytes", path,
                            (unsigned long long)GS_WDIRECT_MAX_SHM);
    }
    base = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return gs_error_set(GS_ERR_IO, "cannot map shared memory %s: %s", path, strerror(errno));
    dc->shm_base = base;
    dc->shm_size = (size_t)sb.st_size;
    memcpy(dc->shm_name, path, name->len + 1);
    /* device chunks are copied straight into it: page-lock it once for full-speed copies */
    if (dc->w->streams_mode && dc->w->ops->host_register != NULL) {
        if (dc->w->ops->host_register(dc->w->ctx, base, dc->shm_size) == GS_OK)
            dc->shm_registered = 1;
        else
            GS_LOG_DEBUG("cannot page-lock shared memory %s (%s): copies into it are slower", path,
                         gs_last_error());
    }
    return GS_OK;
}

static void gs__wdconn_request(gs_worker_t *w, gs_wdconn_t *dc, const gs_msg_chunk_req_t *r)
{
    uint8_t mac[GS_AUTH_MAC_BYTES];
    uint8_t *shm_dst = NULL;
    gs_wchunk_t *c;

    if (w->xfer->seal == NULL || r->ticket.len != GS_AUTH_MAC_BYTES ||
        gs_auth_gather_ticket_mac(w->xfer->seal, r->client_id, r->graph_id, r->task_id, mac) != GS_OK ||
        !gs_auth_equal(mac, r->ticket.data, GS_AUTH_MAC_BYTES)) {
        w->xfer->direct_refused++;
        GS_LOG_WARN("direct gather of (%llu, %llu) from %s refused: no valid ticket",
                    (unsigned long long)r->graph_id, (unsigned long long)r->task_id,
                    gs_conn_peer_name(dc->conn));
        gs__wdirect_reply(w, dc, r->req_id, r->graph_id, r->task_id, GS_ERR_AUTH);
        gs_conn_close(dc->conn, GS_ERR_AUTH);
        return;
    }
    c = gs__wstore_find(w, r->graph_id, r->task_id);
    if (c == NULL || c->state != GS_WCHUNK_READY) {
        gs__wdirect_reply(w, dc, r->req_id, r->graph_id, r->task_id, GS_ERR_NOT_FOUND);
        return;
    }
    if (r->shm.len > 0) {
        gs_status_t st = gs__wdconn_map(dc, &r->shm);
        if (st == GS_OK && (r->shm_off > dc->shm_size || c->nbytes > dc->shm_size - r->shm_off))
            st = gs_error_set(GS_ERR_INVALID_PARAM, "chunk of %llu bytes does not fit the shared memory "
                                                    "at %llu", (unsigned long long)c->nbytes,
                              (unsigned long long)r->shm_off);
        if (st != GS_OK) {
            GS_LOG_DEBUG("direct gather into shared memory refused: %s", gs_last_error());
            /* GS_ERR_UNSUPPORTED: the client asks again for the bytes over the socket */
            gs__wdirect_reply(w, dc, r->req_id, r->graph_id, r->task_id, GS_ERR_UNSUPPORTED);
            return;
        }
        shm_dst = dc->shm_base + r->shm_off;
    }
    w->xfer->direct_served++;
    gs__xfer_gather_to(w, dc, shm_dst, r->req_id, r->graph_id, r->task_id);
}

static void gs__wdconn_msg_cb(gs_conn_t *conn, gs_msg_t *m, void *arg)
{
    gs_wdconn_t *dc = arg;
    gs_worker_t *w = dc->w;
    if (w->state != GS_WSTATE_RUNNING) return;
    if (m->type != GS_MSG_CHUNK_REQ) {
        GS_LOG_WARN("unexpected %s on the data port from %s; closing", gs_msg_type_name(m->type),
                    gs_conn_peer_name(conn));
        gs_conn_close(conn, GS_ERR_PROTO);
        return;
    }
    gs__wdconn_request(w, dc, &m->u.chunk_req);
}

/* The refuser has closed its last connection: the worker may finish stopping. */
static void gs__wdirect_refuser_idle(gs_conn_refuser_t *r)
{
    gs__worker_unhold(r->data);
}

/* Refuse the connection pending on the data port (libuv accepts nothing more on it until the
 * callback has accepted it); the worker counts the refuser as a handle while it is busy. */
static void gs__wdirect_refuse(gs_worker_t *w, uv_stream_t *server)
{
    gs_conn_refuser_t *r = &w->xfer->direct_refuser;
    r->idle_cb = gs__wdirect_refuser_idle;
    r->data = w;
    if (gs_conn_refuse(r, server)) gs__worker_hold(w);
}

static void gs__wdirect_accept_cb(uv_stream_t *server, int status)
{
    gs_worker_t *w = server->data;
    gs_conn_params_t cp;
    gs_wdconn_t *dc;

    if (status < 0) {
        GS_LOG_WARN("data port: accept failed: %s", uv_strerror(status));
        return;
    }
    /* every way out before gs_conn_accept() succeeded refuses the connection (conn.h) */
    dc = gs_calloc(1, sizeof *dc, "direct connection");
    if (dc == NULL) {
        GS_LOG_WARN("data port: out of memory accepting a connection: refused");
        gs__wdirect_refuse(w, server);
        return;
    }
    memset(&cp, 0, sizeof cp);
    cp.msg_cb = gs__wdconn_msg_cb;
    cp.close_cb = gs__wdconn_close_cb;
    cp.arg = dc;
    cp.max_frame = GS_WDIRECT_MAX_FRAME;
    dc->w = w;
    dc->refs = 1;
    gs__wlist_push(&w->xfer->dconns, &dc->link);
    if (gs_conn_accept(server, &cp, &dc->conn) != GS_OK) {
        GS_LOG_WARN("data port: cannot accept a connection: %s", gs_last_error());
        gs__wlist_del(&dc->link);
        gs_free(dc);
        gs__wdirect_refuse(w, server);
        return;
    }
    gs__worker_hold(w);   /* released by the close callback */
    if (w->state != GS_WSTATE_RUNNING) gs_conn_close(dc->conn, GS_OK);
}

/* The local address this host reaches gsched from (a connected UDP socket sends nothing). */
static gs_status_t gs__wdirect_local_addr(const gs_worker_t *w, struct sockaddr_storage *ss)
{
    struct addrinfo hints, *res = NULL;
    char port[16];
    socklen_t len = sizeof *ss;
    int fd, ok;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_DGRAM;
    snprintf(port, sizeof port, "%d", w->sched_port);
    if (getaddrinfo(w->sched_host, port, &hints, &res) != 0 || res == NULL)
        return gs_error_set(GS_ERR_IO, "data port: cannot resolve %s", w->sched_host);
    fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
         getsockname(fd, (struct sockaddr *)ss, &len) == 0;
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return ok ? GS_OK : gs_error_set(GS_ERR_IO, "data port: no local address towards %s", w->sched_host);
}

gs_status_t gs__xfer_direct_start(gs_worker_t *w)
{
    gs_xfer_t *x = w->xfer;
    struct sockaddr_storage ss;
    int len = (int)sizeof ss, r;
    char ip[INET6_ADDRSTRLEN];
    gs_status_t st;

    if (x->direct_open || x->direct_off) return GS_OK;
    if ((st = gs__wdirect_local_addr(w, &ss)) != GS_OK) return st;
    if (ss.ss_family == AF_INET) ((struct sockaddr_in *)&ss)->sin_port = 0;
    else if (ss.ss_family == AF_INET6) ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    else return gs_error_set(GS_ERR_IO, "data port: the scheduler is not reached over IP");
    if ((r = uv_tcp_init(w->loop, &x->direct_tcp)) != 0) return gs_status_from_uv(r, "data port");
    x->direct_tcp.data = w;
    x->direct_open = 1;
    gs__worker_hold(w);   /* released by gs__worker_handle_closed */
    if ((r = uv_tcp_bind(&x->direct_tcp, (const struct sockaddr *)&ss, 0)) != 0 ||
        (r = uv_listen((uv_stream_t *)&x->direct_tcp, 1024, gs__wdirect_accept_cb)) != 0 ||
        (r = uv_tcp_getsockname(&x->direct_tcp, (struct sockaddr *)&ss, &len)) != 0) {
        st = gs_status_from_uv(r, "data port");
        gs__xfer_direct_stop(w);
        return st;
    }
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        uv_ip4_name(a, ip, sizeof ip);
        snprintf(x->direct_addr, sizeof x->direct_addr, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        uv_ip6_name(a, ip, sizeof ip);
        snprintf(x->direct_addr, sizeof x->direct_addr, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
    }
    GS_LOG_INFO("data port for direct gathers at %s", x->direct_addr);
    return GS_OK;
}

const char *gs__xfer_direct_addr(const gs_worker_t *w)
{
    return w->xfer != NULL ? w->xfer->direct_addr : "";
}

void gs__xfer_direct_stop(gs_worker_t *w)
{
    gs_xfer_t *x = w->xfer;
    if (x == NULL) return;
    if (x->direct_open) {
        x->direct_open = 0;
        x->direct_addr[0] = '\0';
        uv_close((uv_handle_t *)&x->direct_tcp, gs__worker_handle_closed);
    }
    for (gs_wlink_t *e = x->dconns.next, *next; e != &x->dconns; e = next) {
        gs_wdconn_t *dc = GS_WCONTAINER(e, gs_wdconn_t, link);
        next = e->next;
        if (dc->conn != NULL) gs_conn_close(dc->conn, GS_OK);
    }
}

void gs__xfer_direct_cleanup(gs_worker_t *w)
{
    /* connections whose close never completed (the loop did not run again): freed here */
    while (!gs__wlist_empty(&w->xfer->dconns)) {
        gs_wdconn_t *dc = GS_WCONTAINER(w->xfer->dconns.next, gs_wdconn_t, link);
        gs__wdconn_unmap(dc);
        gs__wlist_del(&dc->link);
        gs_free(dc);
    }
}
