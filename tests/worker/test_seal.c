/* The worker's data port. A rogue UCX endpoint against it (worker/xfer/seal.c): a real ucp client
 * created here, connected to the UCX address the worker published at registration, sends fetch
 * requests without a seal, sealed with a wrong key, naming another worker, and replayed. The
 * worker answers none of them to the rogue, counts each refusal, and keeps serving its peers.
 * The seal is computed here from its documented layout (not with the worker's code). And the
 * port listens on the loopback interface only when gsched is reached over loopback. */
#include "fake_sched.h"

#include "common/auth.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

/* worker/xfer/xfer_int.h: the active-message ids of a fetch and its answers */
#define AM_FETCH_REQ 17
#define AM_DATA 18
#define AM_IPC_GRANT 20
#define AM_DATA_PART 22

static uv_loop_t loop;
static fake_sched_t fs;

typedef struct rogue {
    ucp_context_h ctx;
    ucp_worker_h wk;
    ucp_ep_h ep;
    int answers;              /* any DATA, grant or slice that reached the rogue */
    int send_failed;
} rogue_t;

static rogue_t rg;

static void setup(void)
{
    fs_fixture_setup(&fs, &loop);
}

static void teardown(void)
{
    fs_fixture_teardown(&fs, &loop);
}

TestSuite(worker_seal, .init = setup, .fini = teardown, .timeout = 90);

static ucs_status_t rogue_on_answer(void *arg, const void *header, size_t header_len, void *data, size_t len,
                                   const ucp_am_recv_param_t *param)
{
    (void)header, (void)header_len, (void)data, (void)len, (void)param;
    ((rogue_t *)arg)->answers++;
    return UCS_OK;
}

static void rogue_ep_err(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    (void)ep, (void)st;
    ((rogue_t *)arg)->send_failed = 1;
}

static void rogue_connect(rogue_t *r, const uint8_t *addr)
{
    ucp_params_t pp;
    ucp_config_t *cfg;
    ucp_worker_params_t wp;
    ucp_ep_params_t ep;
    static const unsigned ids[] = {AM_DATA, AM_IPC_GRANT, AM_DATA_PART};

    memset(r, 0, sizeof *r);
    memset(&pp, 0, sizeof pp);
    pp.field_mask = UCP_PARAM_FIELD_FEATURES;
    pp.features = UCP_FEATURE_AM;
    cr_assert_eq(ucp_config_read(NULL, NULL, &cfg), UCS_OK);
    cr_assert_eq(ucp_init(&pp, cfg, &r->ctx), UCS_OK);
    ucp_config_release(cfg);
    memset(&wp, 0, sizeof wp);
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    cr_assert_eq(ucp_worker_create(r->ctx, &wp, &r->wk), UCS_OK);
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        ucp_am_handler_param_t hp;
        memset(&hp, 0, sizeof hp);
        hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id = ids[i];
        hp.cb = rogue_on_answer;
        hp.arg = r;
        cr_assert_eq(ucp_worker_set_am_recv_handler(r->wk, &hp), UCS_OK);
    }
    memset(&ep, 0, sizeof ep);
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = (const ucp_address_t *)addr;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = rogue_ep_err;
    ep.err_handler.arg = r;
    cr_assert_eq(ucp_ep_create(r->wk, &ep, &r->ep), UCS_OK);
}

static void rogue_close(rogue_t *r)
{
    ucp_request_param_t p;
    void *req;
    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    req = ucp_ep_close_nbx(r->ep, &p);
    while (req != NULL && UCS_PTR_IS_PTR(req) && ucp_request_check_status(req) == UCS_INPROGRESS) {
        ucp_worker_progress(r->wk);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    if (req != NULL && UCS_PTR_IS_PTR(req)) ucp_request_free(req);
    ucp_worker_destroy(r->wk);
    ucp_cleanup(r->ctx);
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* FETCH_REQ (graph, task) naming @a from_worker, encoded without the frame header into @a b;
 * sealed with @a key (NULL: no seal) as sender -> receiver with @a counter. */
static void build_req(gs_buf_t *b, uint64_t graph, uint64_t task, uint64_t from_worker, const uint8_t *key,
                      uint64_t sender, uint64_t receiver, uint64_t counter)
{
    gs_msg_t m;
    gs_buf_t enc;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_FETCH_REQ;
    m.u.fetch_req.req_id = 77;
    m.u.fetch_req.graph_id = graph;
    m.u.fetch_req.task_id = task;
    m.u.fetch_req.from_worker = from_worker;
    gs_buf_init(&enc);
    cr_assert_eq(gs_msg_encode(&m, &enc), GS_OK);
    gs_buf_init(b);
    cr_assert_eq(gs_buf_append(b, enc.data + GS_PROTO_FRAME_HEADER, enc.len - GS_PROTO_FRAME_HEADER), GS_OK);
    gs_buf_cleanup(&enc);
    if (key != NULL) {
        uint8_t tr[24 + GS_AUTH_MAC_BYTES], id4[4] = {AM_FETCH_REQ, 0, 0, 0};
        gs_auth_part_t parts[3];
        put64(tr, sender);
        put64(tr + 8, receiver);
        put64(tr + 16, counter);
        parts[0] = (gs_auth_part_t){id4, 4};
        parts[1] = (gs_auth_part_t){b->data, b->len};
        parts[2] = (gs_auth_part_t){tr, 24};
        cr_assert_eq(gs_auth_hmac(key, GS_AUTH_KEY_BYTES, parts, 3, tr + 24), GS_OK);
        cr_assert_eq(gs_buf_append(b, tr, sizeof tr), GS_OK);
    }
}

static void rogue_send(rogue_t *r, gs_buf_t *b)
{
    ucp_request_param_t p;
    void *req;
    memset(&p, 0, sizeof p);
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_REPLY;
    req = ucp_am_send_nbx(r->ep, AM_FETCH_REQ, b->data, b->len, NULL, 0, &p);
    cr_assert(!UCS_PTR_IS_ERR(req), "ucp_am_send_nbx: %s", ucs_status_string(UCS_PTR_STATUS(req)));
    while (req != NULL && ucp_request_check_status(req) == UCS_INPROGRESS) {
        ucp_worker_progress(r->wk);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    if (req != NULL) ucp_request_free(req);
    gs_buf_cleanup(b);
}

typedef struct wait_stat {
    gs_worker_h w;
    uint64_t refused, served;
} wait_stat_t;

/* The worker has refused at least ->refused requests and served at least ->served chunks (the
 * rogue's worker is progressed meanwhile, so an answer sent to it would arrive). */
static int stats_reach(void *arg)
{
    wait_stat_t *ws = arg;
    gs_worker_stats_t st;
    ucp_worker_progress(rg.wk);
    gs_worker_stats(ws->w, &st);
    return st.requests_refused >= ws->refused && st.served >= ws->served;
}

static gs_array_h small_sum(void)
{
    gs_array_h a, s;
    int64_t shape[2] = {64, 64}, chunks[2] = {16, 16};
    cr_assert_eq(gs_array_random_normal(3, 0.0, 1.0, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, a, NULL, &s), GS_OK);
    gs_array_release(a);
    return s;
}

Test(worker_seal, serves_nothing_to_a_rogue_endpoint_and_keeps_serving_its_peers)
{
    gs_worker_params_t p = {0};
    tw_t t[3];
    double *ref;
    size_t size;
    gs_worker_stats_t st;
    uint8_t wrong_key[GS_AUTH_KEY_BYTES];
    gs_buf_t b;

    p.nthreads = 1;
    for (int i = 0; i < 3; i++) {
        tw_start(&t[i], &fs, &p);
        cr_assert(fs_wait_registered(&fs, i + 1, 5000), "worker %d did not register", i);
    }
    fs_announce_peers(&fs);
    fs_run_for(&fs, 20);
    /* A holds the chunk; the rogue speaks as C (sealed cases: as if it had C's key), so the
     * counters it burns are C's and B's own requests to A stay fresh */
    uint64_t ida = fs.peers[0]->id, idb = fs.peers[2]->id;

    /* a chunk on A: the whole graph placed there */
    gs_array_h sum = small_sum();
    gs_taskgraph_t *tg = tw_lower(sum, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));
    cr_assert_eq(fs_run_graph(&fs, 1, tg, place, 0, 30000), 0);
    uint64_t task = 0;   /* a leaf: held by A */

    rogue_connect(&rg, fs.peers[0]->ucx);
    wait_stat_t ws = {t[0].w, 0, 0};

    /* 1. no seal at all, naming C */
    build_req(&b, 1, task, idb, NULL, 0, 0, 0);
    rogue_send(&rg, &b);
    ws.refused = 1;
    cr_assert(fs_run_until(&fs, stats_reach, &ws, 10000), "the unsealed request was not refused");
    /* 2. sealed with a key that is not the cluster's */
    cr_assert_eq(gs_auth_random(wrong_key, sizeof wrong_key), GS_OK);
    build_req(&b, 1, task, idb, wrong_key, idb, ida, 1);
    rogue_send(&rg, &b);
    ws.refused = 2;
    cr_assert(fs_run_until(&fs, stats_reach, &ws, 10000), "the wrongly sealed request was not refused");
    /* 3. the right key (a member's), the seal saying C, the request naming another worker */
    build_req(&b, 1, task, idb + 100, fs.data_key, idb, ida, 2);
    rogue_send(&rg, &b);
    ws.refused = 3;
    cr_assert(fs_run_until(&fs, stats_reach, &ws, 10000), "a request naming another worker was served");
    /* 4. a valid request of C's: served, but to C's own endpoint, never to whoever sent it;
     *    the same bytes again are a replay */
    gs_worker_stats(t[0].w, &st);
    build_req(&b, 1, task, idb, fs.data_key, idb, ida, 3);
    gs_buf_t copy;
    gs_buf_init(&copy);
    cr_assert_eq(gs_buf_append(&copy, b.data, b.len), GS_OK);
    rogue_send(&rg, &b);
    ws.served = st.served + 1;
    cr_assert(fs_run_until(&fs, stats_reach, &ws, 10000), "a valid request was not served");
    rogue_send(&rg, &copy);
    ws.refused = 4;
    cr_assert(fs_run_until(&fs, stats_reach, &ws, 10000), "the replayed request was not refused");
    /* 5. addressed to C, delivered to A */
    build_req(&b, 1, task, idb, fs.data_key, idb, idb, 4);
    rogue_send(&rg, &b);
    ws.refused = 5;
    cr_assert(fs_run_until(&fs, stats_reach, &ws, 10000), "a request sealed for another worker was served");

    /* 6. the replay window (1024 counters): later and earlier unseen counters pass, a seen one
     *    or one older than the window does not */
    static const struct { uint64_t counter; int served; } seq[] = {
        {10, 1}, {8, 1}, {8, 0}, {3000, 1}, {2000, 1}, {1900, 0}, {2000, 0}, {3000, 0}, {2999, 1}};
    for (size_t k = 0; k < sizeof seq / sizeof seq[0]; k++) {
        gs_worker_stats(t[0].w, &st);
        ws.served = st.served + (seq[k].served ? 1 : 0);
        ws.refused = st.requests_refused + (seq[k].served ? 0 : 1);
        build_req(&b, 1, task, idb, fs.data_key, idb, ida, seq[k].counter);
        rogue_send(&rg, &b);
        cr_assert(fs_run_until(&fs, stats_reach, &ws, 10000), "counter %llu was not %s",
                  (unsigned long long)seq[k].counter, seq[k].served ? "served" : "refused");
    }

    fs_run_for(&fs, 50);
    for (int i = 0; i < 20; i++) ucp_worker_progress(rg.wk);
    cr_assert_eq(rg.answers, 0, "the rogue endpoint received %d answers", rg.answers);
    gs_worker_stats(t[0].w, &st);
    cr_assert_eq(st.requests_refused, 4 + 1 + 4);

    /* the worker survived and its peers still fetch from it */
    memset(place, 0, tg->ntasks * sizeof(int));
    for (uint64_t i = 0; i < tg->ntasks; i++) place[i] = (int)(i % 2);
    cr_assert_eq(fs_run_graph(&fs, 2, tg, place, 1, 30000), 0, "a graph spread over A and B failed");
    double *got = calloc(size ? size : 1, sizeof(double));
    cr_assert(fs_gather_all(&fs, 2, tg, place, got, 5000));
    for (size_t i = 0; i < size; i++) cr_assert_float_eq(got[i], ref[i], 1e-9 * (1.0 + ref[i] * ref[i]));
    uint64_t fetched = 0;
    for (int i = 0; i < 2; i++) {
        gs_worker_stats(t[i].w, &st);
        cr_assert_eq(st.fetch_failures, 0);
        fetched += st.fetches;
    }
    cr_assert_gt(fetched, 0, "nothing moved between the workers");

    rogue_close(&rg);
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(sum);
    for (int i = 0; i < 3; i++) {
        gs_worker_stop(t[i].w, GS_OK);
        cr_assert(tw_wait_stopped(&t[i], &fs, 5000));
        tw_destroy(&t[i]);
    }
}

/* Listening TCP sockets of this process: local IPv4/IPv6 addresses (as text) and ports. */
typedef struct listener {
    char addr[64];
    int port;
    int v6;
} listener_t;

static int own_listeners(listener_t *out, int max)
{
    unsigned long inodes[1024];
    int ninodes = 0, n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    cr_assert_not_null(d);
    while ((e = readdir(d)) != NULL && ninodes < 1024) {
        char path[300], link[64];
        ssize_t len;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        len = readlink(path, link, sizeof link - 1);
        if (len <= 0) continue;
        link[len] = '\0';
        if (sscanf(link, "socket:[%lu]", &inodes[ninodes]) == 1) ninodes++;
    }
    closedir(d);
    for (int v6 = 0; v6 < 2; v6++) {
        FILE *f = fopen(v6 ? "/proc/self/net/tcp6" : "/proc/self/net/tcp", "r");
        char line[512];
        if (f == NULL) continue;
        while (fgets(line, sizeof line, f) != NULL && n < max) {
            char a[64];
            unsigned port, state;
            unsigned long inode;
            if (sscanf(line, " %*d: %63[0-9A-F]:%X %*s %X %*s %*s %*s %*s %*s %lu", a, &port, &state, &inode) != 4)
                continue;
            if (state != 0x0A) continue;   /* TCP_LISTEN */
            for (int i = 0; i < ninodes; i++) {
                if (inodes[i] != inode) continue;
                snprintf(out[n].addr, sizeof out[n].addr, "%s", a);
                out[n].port = (int)port;
                out[n].v6 = v6;
                n++;
            }
        }
        fclose(f);
    }
    return n;
}

/* 127.0.0.1 is 0100007F in /proc/net/tcp; ::1 is 00000000000000000000000001000000 in tcp6. */
static int is_loopback_hex(const listener_t *l)
{
    return l->v6 ? strcmp(l->addr, "00000000000000000000000001000000") == 0 : strcmp(l->addr + 6, "7F") == 0;
}

/* A worker of a cluster reached over loopback listens for UCX on loopback only: its data port is
 * on no other local address (the issue: UCX listened on every interface while the cluster was
 * told 127.0.0.1). */
Test(worker_seal, ucx_listens_on_loopback_only_when_gsched_is_reached_over_loopback)
{
    gs_worker_params_t p = {0};
    tw_t t;
    listener_t ls[64];
    struct ifaddrs *ifs = NULL, *i;
    int n, other_ports = 0;

    p.nthreads = 1;
    tw_start(&t, &fs, &p);
    cr_assert(fs_wait_registered(&fs, 1, 5000));
    n = own_listeners(ls, 64);
    for (int k = 0; k < n; k++) {
        cr_assert(is_loopback_hex(&ls[k]), "a listening socket on %s:%d (not loopback)", ls[k].addr, ls[k].port);
        if (ls[k].port != fs.port) other_ports++;
    }
    cr_assert_gt(other_ports, 0, "the worker listens nowhere (is UCX's tcp transport off?)");
    /* and its ports answer on no other local address */
    cr_assert_eq(getifaddrs(&ifs), 0);
    for (i = ifs; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) continue;
        for (int k = 0; k < n; k++) {
            struct sockaddr_in sa = *(const struct sockaddr_in *)i->ifa_addr;
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            if (ls[k].v6 || ls[k].port == fs.port) {
                close(fd);
                continue;
            }
            sa.sin_port = htons((uint16_t)ls[k].port);
            cr_assert_neq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0, "UCX port %d answers on %s", ls[k].port,
                          inet_ntoa(sa.sin_addr));
            close(fd);
        }
    }
    freeifaddrs(ifs);
    gs_worker_stop(t.w, GS_OK);
    cr_assert(tw_wait_stopped(&t, &fs, 5000));
    tw_destroy(&t);
}
