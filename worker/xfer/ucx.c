/* Peer transfers of gworker over UCX (ucp active messages).
 *
 * One ucp context (AM + WAKEUP; transports left to UCX's defaults) and one ucp worker whose
 * event fd is polled by the uv loop: progress until idle, then ucp_worker_arm (UCS_ERR_BUSY:
 * progress again). Endpoints are created lazily per peer from the PEERS addresses, with
 * UCP_ERR_HANDLING_MODE_PEER so a peer that dies fails its endpoint instead of hanging it.
 * UCX 1.13 has no peer-failure support on its shared-memory transports (sysv, posix, cma), so
 * in that mode two workers on one host talk over tcp (loopback). With ucx_shm the endpoints use
 * UCP_ERR_HANDLING_MODE_NONE and UCX picks sysv/posix + cma on one host; a dead peer is then
 * noticed only through PEERS and the fetch timeout.
 *
 * Protocol (proto/msg.h encodings without the 4-byte frame header as the AM header):
 *   requester -> owner   AM GS_AM_FETCH_REQ, header FETCH_REQ(req_id, graph, task, from)
 *   owner -> requester   AM GS_AM_DATA, header DATA(req_id, graph, task, status, empty),
 *                        payload = the chunk bytes (UCX picks eager or rendezvous by size)
 * Every active message carries a seal (seal.c: sender, receiver, counter, HMAC with the cluster's
 * data-plane key); a request is served only when its seal is valid, its sender is a live peer
 * and `from` is that sender. The owner answers on its own endpoint to `from` (PEERS) or, failing
 * that, on the reply endpoint UCX passes with the (authenticated) request. A fetch fails on: an endpoint error, the peer leaving
 * PEERS, a DATA with an error status, a size mismatch, or no answer within fetch_timeout_ms.
 *
 * Nothing here runs inside a UCX callback that must not: callbacks only record work (deferred
 * list, flags) or copy eager bytes; sends, rendezvous receives and endpoint closes happen right
 * after ucp_worker_progress() returns.
 */
#include "worker/xfer/xfer_int.h"

#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <ucs/memory/memory_type.h>

static gs_status_t gs__ucs_err(gs_status_t status, ucs_status_t st, const char *what)
{
    return gs_error_set(status, "%s: %s", what, ucs_status_string(st));
}

/* ---------------------------------------------------------------- transfer checksums */

/* 64-bit checksum of @a len bytes: a multiply-xor over 8-byte words (several GB/s), then the
 * tail and the length. Not cryptographic: it catches corrupted or misplaced bytes. */
uint64_t gs__wchecksum(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)len, w;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    for (; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

/* ---------------------------------------------------------------- deferred work */

void gs__wdefer_push(gs_worker_t *w, gs_wdefer_t *d)
{
    d->next = NULL;
    if (w->xfer->defer_tail) w->xfer->defer_tail->next = d;
    else w->xfer->defer_head = d;
    w->xfer->defer_tail = d;
}

/* ---------------------------------------------------------------- endpoints */

static void gs__wep_close_cb(void *req, ucs_status_t st, void *arg)
{
    gs_wep_t *epc = arg;
    ucp_request_free(req);
    epc->w->xfer->ucp_outstanding--;
    gs__wlist_del(&epc->link);
    gs_free(epc);
}

/* FORCE for peers that are gone or failed; a flushing close at our own shutdown when the
 * endpoints run without peer-failure handling (shared-memory mode), where UCX documents a
 * forced close as undefined for the still-running remote side. */
static void gs__wep_close(gs_worker_t *w, gs_wep_t *epc, int flush)
{
    ucp_request_param_t p;
    void *r;

    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                     UCP_OP_ATTR_FIELD_USER_DATA;
    p.flags = flush ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    p.cb.send = gs__wep_close_cb;
    p.user_data = epc;
    epc->peer_id = UINT64_MAX;     /* no longer any peer's */
    r = ucp_ep_close_nbx(epc->ep, &p);
    if (r == NULL || UCS_PTR_IS_ERR(r)) {
        gs_free(epc);
        return;
    }
    w->xfer->ucp_outstanding++;
    gs__wlist_push(&w->xfer->closing, &epc->link);
}

static void gs__wep_err_cb(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    gs_wep_t *epc = arg;
    gs_worker_t *w = epc->w;
    uint64_t v;
    gs_wpeer_t *p;

    if (epc->peer_id == UINT64_MAX || !gs_u64map_get(&w->xfer->peers, epc->peer_id, &v)) return;
    p = (gs_wpeer_t *)(uintptr_t)v;
    if (p->epc != epc) return;
    /* a peer that exits (a cluster shutting down) fails its endpoint too: only worth a
     * warning when fetches were waiting on it */
    if (!gs__wlist_empty(&p->fetches))
        GS_LOG_WARN("endpoint to worker %llu (%s) failed: %s", (unsigned long long)p->id,
                    p->name, ucs_status_string(st));
    else
        GS_LOG_DEBUG("endpoint to worker %llu (%s) failed: %s", (unsigned long long)p->id,
                     p->name, ucs_status_string(st));
    p->failed = 1;
    p->fail_status = st;
    w->xfer->ep_fail_pending = 1;
}

static void gs__wucx_log_ep(gs_worker_t *w, gs_wpeer_t *p, ucp_ep_h ep)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    if (GS_LOG_LEVEL_DEBUG > gs__log_level) return;
    f = open_memstream(&buf, &len);
    if (f == NULL) return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    for (char *line = buf, *nl; line && *line; line = nl) {
        nl = strchr(line, '\n');
        if (nl) *nl++ = '\0';
        if (strstr(line, "lane[") || strstr(line, "am_send") || strstr(line, "rma_bw")) {
            while (*line == '#' || *line == ' ') line++;
            GS_LOG_DEBUG("ucx to worker %llu (%s): %s", (unsigned long long)p->id, p->name,
                         line);
        }
    }
    free(buf);   /* allocated by open_memstream (libc), not by gs_malloc */
}

gs_status_t gs__wpeer_ep(gs_worker_t *w, gs_wpeer_t *p, gs_wep_t **epc_p)
{
    ucp_ep_params_t ep;
    ucs_status_t st;
    gs_wep_t *epc;

    if (p->epc && !p->failed) {
        *epc_p = p->epc;
        return GS_OK;
    }
    if (p->epc) {
        gs__wep_close(w, p->epc, 0);
        p->epc = NULL;
        p->failed = 0;
    }
    epc = gs_calloc(1, sizeof(*epc), "ucx endpoint");
    if (epc == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for an endpoint");
    epc->w = w;
    epc->peer_id = p->id;
    gs__wlist_init(&epc->link);
    memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = (const ucp_address_t *)p->addr;
    ep.err_mode = w->xfer->ucx_shm ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = gs__wep_err_cb;
    ep.err_handler.arg = epc;
    st = ucp_ep_create(w->xfer->ucp_worker, &ep, &epc->ep);
    if (st != UCS_OK) {
        gs_free(epc);
        return gs_error_set(GS_ERR_WORKER_LOST, "cannot connect to worker %llu (%s): %s",
                            (unsigned long long)p->id, p->name, ucs_status_string(st));
    }
    p->epc = epc;
    gs__wucx_log_ep(w, p, epc->ep);
    *epc_p = epc;
    return GS_OK;
}

/* ---------------------------------------------------------------- deferred processing */

static void gs__wpeer_fail_fetches(gs_worker_t *w, gs_wpeer_t *p, const char *why)
{
    while (!gs__wlist_empty(&p->fetches)) {
        gs_wfetch_t *f = GS_WCONTAINER(p->fetches.next, gs_wfetch_t, peer_link);
        gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "worker %llu (%s) %s",
                        (unsigned long long)p->id, p->name, why);
    }
}

static void gs__wucx_run_deferred(gs_worker_t *w)
{
    while (w->xfer->defer_head) {
        gs_wdefer_t *d = w->xfer->defer_head;
        w->xfer->defer_head = d->next;
        if (w->xfer->defer_head == NULL) w->xfer->defer_tail = NULL;
        if (d->kind == GS_WDEFER_SERVE) {
            gs__wserve(w, d);
        } else if (d->kind == GS_WDEFER_IPC_COPY) {
            gs__wipc_copy(w, d);
        } else if (d->kind == GS_WDEFER_RNDV_PART) {
            gs__wpipe_recv(w, d);
        } else if (d->kind == GS_WDEFER_RNDV) {
            uint64_t v;
            gs_wfetch_t *f = NULL;
            if (gs_u64map_get(&w->xfer->fetches, d->req_id, &v)) f = (gs_wfetch_t *)(uintptr_t)v;
            if (f == NULL || f->dead || w->state != GS_WSTATE_RUNNING) {
                ucp_am_data_release(w->xfer->ucp_worker, d->desc);
            } else {
                ucp_request_param_t p;
                void *r;
                memset(&p, 0, sizeof(p));
                p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
                p.cb.recv_am = gs__wrecv_cb;
                p.user_data = f;
                if (f->dev_recv) {
                    p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
                    p.memory_type = UCS_MEMORY_TYPE_CUDA;
                }
                r = ucp_am_recv_data_nbx(w->xfer->ucp_worker, d->desc, f->host, d->len, &p);
                if (r == NULL) {
                    f->state = GS_WFETCH_REQUESTED;
                    gs__wfetch_received(w, f);
                } else if (UCS_PTR_IS_ERR(r)) {
                    f->state = GS_WFETCH_REQUESTED;
                    gs__wfetch_fail(w, f, GS_ERR_WORKER_LOST, "receiving from worker %llu "
                                    "failed: %s", (unsigned long long)(f->peer ? f->peer->id : 0),
                                    ucs_status_string(UCS_PTR_STATUS(r)));
                } else {
                    f->recv_req = r;
                    w->xfer->ucp_outstanding++;
                }
            }
        }
        gs_free(d);
    }
    if (w->xfer->ep_fail_pending) {
        w->xfer->ep_fail_pending = 0;
        for (size_t i = 0; i < w->xfer->peers.cap; i++) {
            gs_wpeer_t *p;
            char why[160];
            if (w->xfer->peers.keys[i] >= GS_U64MAP_TOMB) continue;
            p = (gs_wpeer_t *)(uintptr_t)w->xfer->peers.vals[i];
            if (!p->failed || p->epc == NULL) continue;
            snprintf(why, sizeof(why), "was lost: %s", ucs_status_string(p->fail_status));
            gs__wep_close(w, p->epc, 0);
            p->epc = NULL;
            p->failed = 0;
            gs__wpeer_fail_fetches(w, p, why);
        }
    }
}

void gs__xfer_progress(gs_worker_t *w)
{
    ucs_status_t st;

    if (w->xfer->ucp_worker == NULL || w->xfer->in_progress) return;
    w->xfer->in_progress = 1;
    for (;;) {
        while (ucp_worker_progress(w->xfer->ucp_worker)) gs__wucx_run_deferred(w);
        gs__wucx_run_deferred(w);
        st = ucp_worker_arm(w->xfer->ucp_worker);
        if (st == UCS_ERR_BUSY) continue;
        if (st != UCS_OK) GS_LOG_ERROR("ucp_worker_arm: %s", ucs_status_string(st));
        break;
    }
    w->xfer->in_progress = 0;
}

/* ---------------------------------------------------------------- peers */

static void gs__wpeer_free(gs_worker_t *w, gs_wpeer_t *p, const char *why, int flush)
{
    gs__wpeer_fail_fetches(w, p, why);
    if (p->epc) gs__wep_close(w, p->epc, flush);
    gs_free(p->name);
    gs_free(p->addr);
    gs_free(p);
}

void gs__xfer_peers(gs_worker_t *w, const gs_msg_peers_t *m)
{
    uint32_t i;
    uint64_t v;

    for (i = 0; i < m->nremoved; i++) {
        if (!gs_u64map_get(&w->xfer->peers, m->removed[i], &v)) continue;
        gs_u64map_del(&w->xfer->peers, m->removed[i]);
        gs__wipc_peer_gone(w, m->removed[i]);
        GS_LOG_INFO("peer worker %llu (%s) removed", (unsigned long long)m->removed[i],
                    ((gs_wpeer_t *)(uintptr_t)v)->name);
        gs__wpeer_free(w, (gs_wpeer_t *)(uintptr_t)v, "left the cluster", 0);
    }
    for (i = 0; i < m->nadded; i++) {
        const gs_peer_info_t *in = &m->added[i];
        gs_wpeer_t *p;
        if (in->id == w->id) continue;
        if (in->id >= GS_U64MAP_TOMB || in->ucx_address.len == 0) {
            GS_LOG_WARN("peer %llu announced without a usable id or address; ignored",
                        (unsigned long long)in->id);
            continue;
        }
        if (gs_u64map_get(&w->xfer->peers, in->id, &v)) {
            p = (gs_wpeer_t *)(uintptr_t)v;
            if (p->addr_len == in->ucx_address.len &&
                memcmp(p->addr, in->ucx_address.data, p->addr_len) == 0)
                continue;
            gs_u64map_del(&w->xfer->peers, in->id);
            gs__wpeer_free(w, p, "re-registered with a new address", 0);
        }
        p = gs_calloc(1, sizeof(*p), "peer");
        if (p) {
            p->id = in->id;
            p->name = gs_strdup(in->name.len ? (const char *)in->name.data : "?", "peer name");
            p->addr = gs_malloc(in->ucx_address.len, "peer address");
            gs__wlist_init(&p->fetches);
        }
        if (p == NULL || p->name == NULL || p->addr == NULL ||
            gs_u64map_put(&w->xfer->peers, p->id, (uint64_t)(uintptr_t)p) != GS_OK) {
            GS_LOG_ERROR("out of memory recording peer %llu; fetches from it will fail",
                         (unsigned long long)in->id);
            if (p) {
                gs_free(p->name);
                gs_free(p->addr);
                gs_free(p);
            }
            continue;
        }
        memcpy(p->addr, in->ucx_address.data, in->ucx_address.len);
        p->addr_len = in->ucx_address.len;
        GS_LOG_DEBUG("peer worker %llu (%s) added", (unsigned long long)p->id, p->name);
    }
    w->st.npeers = (uint32_t)w->xfer->peers.len;
}

/* ---------------------------------------------------------------- setup / teardown */

static void gs__wucx_poll_cb(uv_poll_t *h, int status, int events)
{
    gs_worker_t *w = h->data;
    gs__xfer_progress(w);
    gs__wexec_pump(w);
}

gs_status_t gs__xfer_init(gs_worker_t *w, const gs_worker_params_t *wparams)
{
    ucp_params_t params;
    ucp_config_t *cfg = NULL;
    ucp_context_attr_t ca;
    ucp_worker_params_t wp;
    ucp_am_handler_param_t hp;
    ucs_status_t st;
    gs_xfer_t *x;
    int rc;

    x = w->xfer = gs_calloc(1, sizeof(*w->xfer), "worker transfers");
    if (x == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the transfer state");
    x->ucx_shm = wparams->ucx_shm != 0;
    x->no_ipc = wparams->no_ipc != 0;
    x->direct_off = wparams->no_direct != 0;
    x->transfer_checksum = wparams->transfer_checksum != 0;
    x->pipe_slice = wparams->pipe_slice ? (size_t)wparams->pipe_slice : ((size_t)8 << 20);
    x->pipe_min = wparams->pipe_min ? wparams->pipe_min : ((uint64_t)32 << 20);
    x->test_corrupt = wparams->test_corrupt_transfers;
    x->payload_mac = wparams->payload_mac == GS_WORKER_PAYLOAD_MAC_ON ||
                     (wparams->payload_mac == GS_WORKER_PAYLOAD_MAC_AUTO && wparams->token != NULL &&
                      wparams->token[0] != '\0');
    x->payload_mac_device = x->payload_mac && wparams->payload_mac_device != 0;
    gs_u64map_init(&x->peers);
    gs_u64map_init(&x->fetches);
    gs__wlist_init(&x->sends);
    gs__wlist_init(&x->closing);
    gs__wlist_init(&x->dead_fetches);
    gs__wlist_init(&x->dconns);
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_config_read");
    if ((rc = gs__wucx_net_devices(w, wparams->interface, cfg)) != 0) {
        ucp_config_release(cfg);
        return GS_ERR_INVALID_PARAM;   /* the error is set */
    }
    st = ucp_init(&params, cfg, &w->xfer->ucp_ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        w->xfer->ucp_ctx = NULL;
        return gs__ucs_err(GS_ERR_UCX, st, "ucp_init");
    }
    memset(&ca, 0, sizeof(ca));
    ca.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(w->xfer->ucp_ctx, &ca) == UCS_OK) {
        char types[256] = "";
        size_t off = 0;
        for (int t = 0; t < UCS_MEMORY_TYPE_LAST; t++) {
            if (!(ca.memory_types & UCS_BIT(t))) continue;
            off += (size_t)snprintf(types + off, off < sizeof(types) ? sizeof(types) - off : 0,
                                    "%s%s", off ? ", " : "", ucs_memory_type_names[t]);
        }
        if (w->streams_mode && !(ca.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)))
            GS_LOG_INFO("ucx memory types: %s; device chunks are staged through host buffers",
                        types);
        else if (w->streams_mode && w->xfer->payload_mac_device)
            GS_LOG_INFO("ucx memory types: %s; device chunks are staged through host buffers, where "
                        "their payload MACs are taken (--payload-mac-device)", types);
        else if (w->streams_mode) {
            w->xfer->ucx_cuda = 1;
            GS_LOG_INFO("ucx memory types: %s: device chunks go to UCX directly (rendezvous); "
                        "small ones are staged", types);
        }
        else
            GS_LOG_DEBUG("ucx memory types: %s", types);
    }
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(w->xfer->ucp_ctx, &wp, &w->xfer->ucp_worker);
    if (st != UCS_OK) {
        w->xfer->ucp_worker = NULL;
        return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_create");
    }
    st = ucp_worker_get_address(w->xfer->ucp_worker, &w->xfer->ucp_addr, &w->xfer->ucp_addr_len);
    if (st != UCS_OK) {
        w->xfer->ucp_addr = NULL;
        return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_get_address");
    }
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.arg = w;
    hp.id = GS_AM_FETCH_REQ;
    hp.cb = gs__wam_fetch_req;
    st = ucp_worker_set_am_recv_handler(w->xfer->ucp_worker, &hp);
    if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_set_am_recv_handler");
    hp.id = GS_AM_DATA;
    hp.cb = gs__wam_data;
    st = ucp_worker_set_am_recv_handler(w->xfer->ucp_worker, &hp);
    if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_set_am_recv_handler");
    {
        static const struct {
            unsigned id;
            ucp_am_recv_callback_t cb;
        } ipc_am[] = {{GS_AM_IPC_REQ, gs__wam_ipc_req},
                      {GS_AM_IPC_GRANT, gs__wam_ipc_grant},
                      {GS_AM_IPC_RELEASE, gs__wam_ipc_release},
                      {GS_AM_DATA_PART, gs__wam_data_part}};
        for (size_t i = 0; i < sizeof(ipc_am) / sizeof(ipc_am[0]); i++) {
            hp.id = ipc_am[i].id;
            hp.cb = ipc_am[i].cb;
            st = ucp_worker_set_am_recv_handler(w->xfer->ucp_worker, &hp);
            if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_set_am_recv_handler");
        }
    }
    gs__wipc_init(w);
    st = ucp_worker_get_efd(w->xfer->ucp_worker, &w->xfer->ucp_efd);
    if (st != UCS_OK) return gs__ucs_err(GS_ERR_UCX, st, "ucp_worker_get_efd");
    rc = uv_poll_init(w->loop, &w->xfer->ucp_poll, w->xfer->ucp_efd);
    if (rc != 0) return gs_error_set(GS_ERR_IO, "uv_poll_init on the ucx event fd: %s",
                                     uv_strerror(rc));
    w->xfer->ucp_poll.data = w;
    w->xfer->ucp_poll_open = 1;
    w->nhandles_open++;
    rc = uv_poll_start(&w->xfer->ucp_poll, UV_READABLE, gs__wucx_poll_cb);
    if (rc != 0) return gs_error_set(GS_ERR_IO, "uv_poll_start on the ucx event fd: %s",
                                     uv_strerror(rc));
    uv_unref((uv_handle_t *)&w->xfer->ucp_poll);
    if (GS_LOG_LEVEL_DEBUG <= gs__log_level) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (f) {
            ucp_worker_print_info(w->xfer->ucp_worker, f);
            fclose(f);
            for (char *line = buf, *nl; line && *line; line = nl) {
                nl = strchr(line, '\n');
                if (nl) *nl++ = '\0';
                if (strstr(line, "#") == line && strlen(line) > 2)
                    GS_LOG_DEBUG("ucx worker: %s", line + 1);
            }
            free(buf);
        }
    }
    return GS_OK;
}

void gs__xfer_shutdown(gs_worker_t *w)
{
    uint64_t deadline;

    if (w->xfer == NULL) return;
    gs__xfer_direct_stop(w);
    if (w->xfer->ucp_poll_open) {
        w->xfer->ucp_poll_open = 0;
        uv_close((uv_handle_t *)&w->xfer->ucp_poll, gs__worker_handle_closed);
    }
    if (w->xfer->ucp_worker == NULL) return;
    /* fail every fetch (their tasks are gone already) */
    for (size_t i = 0; i < w->xfer->fetches.cap; i++) {
        if (w->xfer->fetches.keys[i] >= GS_U64MAP_TOMB) continue;
        gs__wfetch_fail(w, (gs_wfetch_t *)(uintptr_t)w->xfer->fetches.vals[i], GS_ERR_CANCELED,
                        "the worker is stopping");
    }
    for (size_t i = 0; i < w->xfer->peers.cap; i++) {
        gs_wpeer_t *p;
        if (w->xfer->peers.keys[i] >= GS_U64MAP_TOMB) continue;
        p = (gs_wpeer_t *)(uintptr_t)w->xfer->peers.vals[i];
        gs__wpeer_free(w, p, "is unreachable: the worker is stopping", w->xfer->ucx_shm);
    }
    gs_u64map_cleanup(&w->xfer->peers);
    /* cancel what is still outstanding, then progress (bounded) until it has all returned */
    for (gs_wlink_t *e = w->xfer->sends.next; e != &w->xfer->sends; e = e->next) {
        gs_wsend_t *s = GS_WCONTAINER(e, gs_wsend_t, link);
        if (s->ucp_req) ucp_request_cancel(w->xfer->ucp_worker, s->ucp_req);
    }
    deadline = gs_now_ns() + 2000000000ull;
    while ((w->xfer->ucp_outstanding || w->xfer->defer_head) && gs_now_ns() < deadline) {
        w->xfer->in_progress = 1;
        ucp_worker_progress(w->xfer->ucp_worker);
        w->xfer->in_progress = 0;
        gs__wucx_run_deferred(w);
    }
    if (w->xfer->ucp_outstanding)
        GS_LOG_WARN("%llu ucx operations still outstanding at shutdown",
                    (unsigned long long)w->xfer->ucp_outstanding);
    w->st.npeers = 0;
}

void gs__xfer_cleanup(gs_worker_t *w)
{
    if (w->xfer == NULL) return;
    gs__wbw_cleanup(w);
    gs_auth_mac_destroy(w->xfer->seal);
    w->xfer->seal = NULL;
    gs_auth_pmac_destroy(w->xfer->pmac);
    w->xfer->pmac = NULL;
    /* sends whose UCX operation never returned: drop them (UCX frees its requests with the
     * worker) */
    while (!gs__wlist_empty(&w->xfer->sends)) {
        gs_wsend_t *s = GS_WCONTAINER(w->xfer->sends.next, gs_wsend_t, link);
        gs__wsend_free(w, s);
    }
    gs__xfer_direct_cleanup(w);
    while (!gs__wlist_empty(&w->xfer->closing)) {
        gs_wep_t *epc = GS_WCONTAINER(w->xfer->closing.next, gs_wep_t, link);
        gs__wlist_del(&epc->link);
        gs_free(epc);
    }
    while (w->xfer->defer_head) {
        gs_wdefer_t *d = w->xfer->defer_head;
        w->xfer->defer_head = d->next;
        if ((d->kind == GS_WDEFER_RNDV || d->kind == GS_WDEFER_RNDV_PART) && w->xfer->ucp_worker)
            ucp_am_data_release(w->xfer->ucp_worker, d->desc);
        if (d->kind == GS_WDEFER_RNDV_PART) gs_free(d->ctx);
        gs_free(d);
    }
    w->xfer->defer_tail = NULL;
    while (!gs__wlist_empty(&w->xfer->dead_fetches)) {
        gs_wfetch_t *f = GS_WCONTAINER(w->xfer->dead_fetches.next, gs_wfetch_t, peer_link);
        gs__wfetch_free(w, f);
    }
    /* fetches still waiting for a receive callback */
    for (size_t i = 0; i < w->xfer->fetches.cap; i++) {
        gs_wfetch_t *f;
        if (w->xfer->fetches.keys[i] >= GS_U64MAP_TOMB) continue;
        f = (gs_wfetch_t *)(uintptr_t)w->xfer->fetches.vals[i];
        gs__wfetch_detach(w, f);
        gs__wfetch_free(w, f);
    }
    gs_u64map_cleanup(&w->xfer->fetches);
    gs_u64map_cleanup(&w->xfer->peers);
    gs__wipc_cleanup(w);
    gs__wpipe_cleanup(w);
    if (w->xfer->ucp_addr) ucp_worker_release_address(w->xfer->ucp_worker, w->xfer->ucp_addr);
    if (w->xfer->ucp_worker) ucp_worker_destroy(w->xfer->ucp_worker);
    if (w->xfer->ucp_ctx) ucp_cleanup(w->xfer->ucp_ctx);
    gs_free(w->xfer);
    w->xfer = NULL;
}

void gs__xfer_note(gs_worker_t *w, gs_wnote_t *n)
{
    if (n->kind == GS_WNOTE_FETCH_STAGED) gs__wfetch_staged(w, n->obj, n->status);
    else gs__wsend_staged(w, n->obj, n->status);
}

int gs__xfer_busy(const gs_worker_t *w)
{
    return w->xfer->fetches.len || !gs__wlist_empty(&w->xfer->sends);
}

void gs__xfer_address(const gs_worker_t *w, const void **addr_p, size_t *len_p)
{
    *addr_p = w->xfer->ucp_addr;
    *len_p = w->xfer->ucp_addr_len;
}

uint32_t gs__xfer_npeers(const gs_worker_t *w)
{
    return w->xfer ? (uint32_t)w->xfer->peers.len : 0;
}
