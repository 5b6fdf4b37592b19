/* The dashboard served by a real gsched process: every endpoint fetched while and after a job
 * runs on real workers, the JSON checked against what ran, /metrics parsed strictly, the token
 * rule, and bad HTTP input (malformed requests, huge headers, unknown paths, many slow clients)
 * while gsched keeps scheduling. */
#include "cluster.h"
#include "http.h"

#include "common/buf.h"
#include "graph/taskgraph.h"
#include "proto/handshake_fd.h"

#include <gsched/gsched.h>

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

static tcluster_t CL;
static int DPORT;

/* gsched with a dashboard on a free port (@a host) and two workers. */
static void start(const char *host, const char *token)
{
    char bin[4096], seen[1024] = "", addr[96], dhost[64], dashbuf[128];
    const char *dash;
    const char *argv[10];
    int ac = 0;
    alarm(240);
    memset(&CL, 0, sizeof CL);
    CL.token = token;
    snprintf(dhost, sizeof dhost, "%s:0", host);
    argv[ac++] = tp_bin("gsched", bin, sizeof bin);
    argv[ac++] = "--host";
    argv[ac++] = "127.0.0.1";
    argv[ac++] = "--port";
    argv[ac++] = "0";
    argv[ac++] = "--dashboard-address";
    argv[ac++] = dhost;
    argv[ac] = NULL;
    CL.sched = tp_spawn(argv, &CL.sched_out, token);
    cr_assert(CL.sched > 0);
    /* the listening line, then the dashboard's */
    cr_assert(tp_read_line(CL.sched_out, "gsched dashboard at http://", dashbuf, sizeof dashbuf, seen, sizeof seen, 20.0));
    dash = dashbuf;
    cr_assert(sscanf(seen, "gsched listening on %95s", addr) == 1, "no listening line before the dashboard's: '%s'", seen);
    snprintf(CL.address, sizeof CL.address, "%s", addr);
    cr_assert(sscanf(strchr(dash, ':') + 1, "%d", &DPORT) == 1 && DPORT > 0, "dashboard line '%s'", dash);
    for (int i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        cr_assert(tc_add_worker(&CL, name) > 0);
    }
}

static void up(void)
{
    start("127.0.0.1", NULL);
}

static void down(void)
{
    tp_kill_all();
}

/* sum(arange(n) + 1) in chunks of @a chunk on the cluster: returns the value. */
static double run_job(gs_client_h c, int64_t n, int64_t chunk)
{
    gs_array_h a, b, s;
    double v = 0;
    OK(gs_array_arange(0, 1, 1, &n, &chunk, &a));
    OK(gs_array_binary_scalar(GS_BINARY_ADD, a, 1.0, &b));
    OK(gs_array_reduce(GS_RED_SUM, b, NULL, &s));
    OK(gs_client_compute_scalar(c, s, &v));
    gs_array_release(s);
    gs_array_release(b);
    gs_array_release(a);
    return v;
}

static json_t *get_json(const char *path, const char *extra)
{
    th_resp_t r;
    json_error_t je;
    json_t *j;
    cr_assert(th_http_get(DPORT, path, extra, &r), "connect to the dashboard");
    cr_assert_eq(r.status, 200, "%s: HTTP %d: %s", path, r.status, r.body ? r.body : "");
    {
        char ct[128];
        cr_assert_not_null(th_resp_header(&r, "Content-Type", ct, sizeof ct));
        cr_assert_str_eq(ct, "application/json; charset=utf-8");
    }
    j = json_loads(r.body, 0, &je);
    cr_assert_not_null(j, "%s: invalid JSON: %s", path, je.text);
    th_resp_free(&r);
    return j;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The graph of /api/graphs that finished with @a total tasks, polled until it shows (the page
 * data follows the scheduler within a snapshot period). New reference, or NULL at the deadline. */
static json_t *wait_done_graph(int64_t total)
{
    double deadline = now_s() + 30.0;
    while (now_s() < deadline) {
        json_t *root = get_json("/api/graphs", NULL), *gs = json_object_get(root, "graphs"), *g;
        size_t i;
        json_array_foreach(gs, i, g) {
            if (strcmp(json_string_value(json_object_get(g, "phase")), "done") == 0 &&
                json_integer_value(json_object_get(g, "total")) == total &&
                json_integer_value(json_object_get(g, "done")) == total) {
                json_incref(g);
                json_decref(root);
                return g;
            }
        }
        json_decref(root);
        usleep(50000);   /* polling an HTTP endpoint: the event is the snapshot showing the graph */
    }
    return NULL;
}

/* CPU workers spill to a local directory by default: once a worker's heartbeat has reached gsched,
 * /api/workers lists its disk tier after its host memory (polled: the event is the snapshot). */
static int workers_show_disk_tier(void)
{
    double deadline = now_s() + 30.0;
    while (now_s() < deadline) {
        json_t *root = get_json("/api/workers", NULL), *arr = json_object_get(root, "workers"), *e;
        size_t i, with_disk = 0;
        json_array_foreach(arr, i, e) {
            json_t *t = json_array_get(json_object_get(e, "memory"), 1);
            if (t != NULL && strcmp(json_string_value(json_object_get(t, "tier")), "disk") == 0 &&
                json_is_null(json_object_get(t, "limit")))
                with_disk++;
        }
        json_decref(root);
        if (with_disk == 2) return 1;
        usleep(50000);
    }
    return 0;
}

Test(dashboard, endpoints_describe_the_job_that_ran, .init = up, .fini = down)
{
    gs_client_h c = tc_connect(&CL, GS_LOWER_DEFAULT);
    json_t *w, *g, *t, *x, *arr, *e;
    int64_t total = 0, nlayers, ids[2];
    size_t i;
    uint64_t mine = 0;
    const double n = 4000;
    cr_assert_not_null(c, "%s", gs_last_error());
    OK(gs_client_wait_for_workers(c, 2, 30.0));
    cr_assert_eq(run_job(c, 4000, 100), n * (n + 1) / 2);

    /* workers: both, by name, with their thread count and the tasks they ran */
    w = get_json("/api/workers", NULL);
    arr = json_object_get(w, "workers");
    cr_assert_eq(json_array_size(arr), 2);
    json_array_foreach(arr, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        cr_assert(strcmp(name, "w0") == 0 || strcmp(name, "w1") == 0, "worker %s", name);
        {
            /* CPU workers of this cluster run one thread and report host memory; CUDA workers
             * ($GS_TEST_BACKEND=cuda) run stream slots and report device memory first */
            const char *be = getenv("GS_TEST_BACKEND");
            int cuda = be != NULL && strcmp(be, "cuda") == 0;
            json_int_t nthreads = json_integer_value(json_object_get(e, "nthreads"));
            if (cuda) cr_assert_geq(nthreads, 1);
            else cr_assert_eq(nthreads, 1);
            cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(e, "memory"), 0), "tier")),
                             cuda ? "device" : "host");
        }
        ids[i] = json_integer_value(json_object_get(e, "id"));
        total += json_integer_value(json_object_get(json_object_get(e, "tasks"), "done"));
    }

    {
        const char *be = getenv("GS_TEST_BACKEND");
        if (be == NULL || strcmp(be, "cuda") != 0)
            cr_assert(workers_show_disk_tier(), "no disk tier in /api/workers within 30 s");
    }

    /* graphs: 40 leaves (arange + 1 fused) and the combine tree (40 -> 3 -> 1) = 44 tasks */
    g = wait_done_graph(44);
    cr_assert_not_null(g, "no finished graph of 44 tasks in /api/graphs");
    cr_assert_eq(total, 44, "workers report %ld tasks done", (long)total);
    nlayers = (int64_t)json_array_size(json_object_get(g, "layers"));
    {
        int64_t sum = 0, fused = 0, combine = 0;
        json_array_foreach(json_object_get(g, "layers"), i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            sum += json_integer_value(json_object_get(e, "total"));
            cr_assert_eq(json_integer_value(json_object_get(e, "done")), json_integer_value(json_object_get(e, "total")));
            /* operation names say what the layer computes: arange (index * step + start), + 1, sum;
             * then the tree */
            if (strcmp(name, "arange+mul+add+sum") == 0) fused += json_integer_value(json_object_get(e, "total"));
            else if (strcmp(name, "combine-sum") == 0) combine += json_integer_value(json_object_get(e, "total"));
            else cr_assert_fail("layer named '%s'", name);
        }
        cr_assert_eq(sum, 44);
        cr_assert_eq(fused, 40);
        cr_assert_eq(combine, 4);
    }
    cr_assert(json_real_value(json_object_get(g, "t_end")) >= json_real_value(json_object_get(g, "t_start")));

    /* tasks: one report per task of the graph, on the two workers, in order; each kernel's
     * interval (the worker's own stamps, mapped onto gsched's clock) within the job's wall time */
    t = get_json("/api/tasks?since=0", NULL);
    {
        json_int_t gid = json_integer_value(json_object_get(g, "id")), prev = 0, seen = 0;
        double g0 = json_real_value(json_object_get(g, "t_start")), g1 = json_real_value(json_object_get(g, "t_end"));
        double last_end = g0;
        char *hit = calloc(44, 1);
        json_array_foreach(json_object_get(t, "tasks"), i, e) {
            json_int_t task = json_integer_value(json_object_get(e, "task"));
            json_int_t wid = json_integer_value(json_object_get(e, "worker"));
            cr_assert_gt(json_integer_value(json_object_get(e, "seq")), prev);
            prev = json_integer_value(json_object_get(e, "seq"));
            if (json_integer_value(json_object_get(e, "graph")) != gid) continue;
            cr_assert(wid == ids[0] || wid == ids[1]);
            cr_assert_lt(json_integer_value(json_object_get(e, "layer")), nlayers);
            {
                double ts = json_real_value(json_object_get(e, "start")), te = json_real_value(json_object_get(e, "end"));
                /* one host: the clocks agree, the mapping only ever makes times later (by the
                 * fastest batch's delay), never past the report's receipt */
                cr_assert(ts <= te, "task %ld: start %.9f after end %.9f", (long)task, ts, te);
                cr_assert(ts >= g0, "task %ld started at %.9f before its graph (%.9f)", (long)task, ts, g0);
                cr_assert(te <= g1, "task %ld ended at %.9f after its graph (%.9f)", (long)task, te, g1);
                if (te > last_end) last_end = te;
            }
            cr_assert_eq(json_integer_value(json_object_get(e, "status")), 0);
            cr_assert(task >= 0 && task < 44 && !hit[task], "task %ld twice or out of range", (long)task);
            hit[task] = 1;
            seen++;
        }
        cr_assert_eq(seen, 44);
        cr_assert_gt(last_end, g0, "no task of the graph ended after it started");
        free(hit);
        mine = (uint64_t)json_integer_value(json_object_get(t, "next"));
        cr_assert_eq(mine, 44);
        json_decref(t);
        /* since = next: nothing new */
        t = get_json("/api/tasks?since=44", NULL);
        cr_assert_eq(json_array_size(json_object_get(t, "tasks")), 0);
    }
    x = get_json("/api/transfers", NULL);
    cr_assert(json_is_array(json_object_get(x, "transfers")));

    /* metrics agree */
    {
        th_resp_t r;
        const char *why;
        double v;
        char ct[128];
        cr_assert(th_http_get(DPORT, "/metrics", NULL, &r));
        cr_assert_eq(r.status, 200);
        cr_assert_str_eq(th_resp_header(&r, "Content-Type", ct, sizeof ct), "text/plain; version=0.0.4; charset=utf-8");
        why = th_prom_check(r.body);
        cr_assert_null(why, "/metrics: %s\n%s", why, r.body);
        cr_assert(th_prom_value(r.body, "gsched_workers", &v) && v == 2);
        cr_assert(th_prom_value(r.body, "gsched_tasks_total{state=\"done\"}", &v) && v == 44);
        cr_assert(th_prom_value(r.body, "gsched_task_duration_seconds_count", &v) && v == 44);
        cr_assert(th_prom_value(r.body, "gsched_worker_tasks{worker=\"w0\",state=\"queued\"}", &v));
        th_resp_free(&r);
    }

    /* the report is one HTML file with the graph's data inline and nothing fetched */
    {
        th_resp_t r;
        char path[64];
        snprintf(path, sizeof path, "/report?graph=%lld", (long long)json_integer_value(json_object_get(g, "id")));
        cr_assert(th_http_get(DPORT, path, NULL, &r));
        cr_assert_eq(r.status, 200);
        cr_assert_null(strstr(r.body, "__GS_REPORT_DATA__"));
        cr_assert_null(strstr(r.body, "__GS_COLOURS__"));
        cr_assert_not_null(strstr(r.body, "function gsColour"), "the colours are inlined");
        cr_assert_not_null(strstr(r.body, "\"arange+mul+add+sum\""), "the report names the operations");
        cr_assert_not_null(strstr(r.body, "\"combine-sum\""));
        cr_assert_null(strstr(r.body, "src=\"http"));
        cr_assert_null(strstr(r.body, "<link"));
        th_resp_free(&r);
        cr_assert(th_http_get(DPORT, "/report?graph=999999", NULL, &r));
        cr_assert_eq(r.status, 404);
        th_resp_free(&r);
    }
    json_decref(w);
    json_decref(g);
    json_decref(t);
    json_decref(x);
    gs_client_destroy(c);
}

/* The graph @a id of /api/graphs once done (polled: the event is the snapshot showing it). */
static json_t *wait_done_graph_id(uint64_t id)
{
    double deadline = now_s() + 30.0;
    while (now_s() < deadline) {
        json_t *root = get_json("/api/graphs", NULL), *g;
        size_t i;
        json_array_foreach(json_object_get(root, "graphs"), i, g) {
            if ((uint64_t)json_integer_value(json_object_get(g, "id")) == id &&
                strcmp(json_string_value(json_object_get(g, "phase")), "done") == 0) {
                json_incref(g);
                json_decref(root);
                return g;
            }
        }
        json_decref(root);
        usleep(50000);
    }
    return NULL;
}

/* A raw client connection to gsched (handshaken): the socket. */
static int raw_client(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    cr_assert(sscanf(strrchr(CL.address, ':') + 1, "%d", &port) == 1, "address %s", CL.address);
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    OK(gs_proto_handshake_fd(fd, GS_ROLE_CLIENT, CL.token, "raw", 20.0, NULL));
    return fd;
}

/* The operation names on the dashboard are the client's (GRAPH_SUBMIT), kept as text: gsched
 * never decodes layers for them. A peer's names are shown as sent (cut, bytes outside printable
 * ASCII as '?'; JSON and the report escape the rest); a graph without names shows "layer". */
Test(dashboard, operation_names_are_the_clients, .init = up, .fini = down)
{
    static const char *const sent[2] = {"</script><b>my-op</b>", "caf\xc3\xa9\x01"};
    static const char *const shown[2] = {"</script><b>my-op</b>", "caf???"};
    const int64_t n = 4000, chunk = 100;
    gs_array_h a, b, s;
    gs_taskgraph_t *tg;
    gs_buf_t lbuf;
    gs_bytes_t layers[8];
    gs_str_t names[8];
    size_t loff[9];
    uint32_t nl;
    gs_msg_t m, ans;
    uint64_t gid = 0;
    int fd;

    OK(gs_array_arange(0, 1, 1, &n, &chunk, &a));
    OK(gs_array_binary_scalar(GS_BINARY_ADD, a, 1.0, &b));
    OK(gs_array_reduce(GS_RED_SUM, b, NULL, &s));
    OK(gs_graph_lower(s, GS_LOWER_DEFAULT, &tg));
    nl = tg->nlayers;
    cr_assert(nl >= 2 && nl <= 8, "%u layers", nl);
    gs_buf_init(&lbuf);
    for (uint32_t l = 0; l < nl; l++) {
        loff[l] = lbuf.len;
        OK(gs_layer_encode(tg->layers[l], &lbuf));
    }
    loff[nl] = lbuf.len;
    fd = raw_client();
    for (int named = 1; named >= 0; named--) {
        for (uint32_t l = 0; l < nl; l++) {
            layers[l] = (gs_bytes_t){lbuf.data + loff[l], loff[l + 1] - loff[l]};
            names[l] = (gs_str_t){(const uint8_t *)sent[l > 0], strlen(sent[l > 0])};
        }
        memset(&m, 0, sizeof m);
        m.type = GS_MSG_GRAPH_SUBMIT;
        m.u.graph_submit = (gs_msg_graph_submit_t){
            .client_ref = 7, .nlayers = nl, .layers = layers, .ntasks = tg->ntasks,
            .task_layer = tg->task_layer, .task_block = tg->task_block, .dep_off = tg->dep_off,
            .deps = tg->deps, .task_nbytes = tg->task_nbytes, .noutputs = tg->noutputs,
            .outputs = tg->outputs, .nlayer_names = named ? nl : 0, .layer_names = named ? names : NULL};
        OK(gs_proto_fd_send_msg(fd, &m, 20.0));
        /* GRAPH_ACCEPTED (the id), then (PROGRESS...) GRAPH_DONE */
        do {
            OK(gs_proto_fd_recv_msg(fd, 1 << 20, 60.0, &ans));
            cr_assert_neq(ans.type, GS_MSG_ERROR, "gsched refused the graph");
            if (ans.type == GS_MSG_GRAPH_ACCEPTED) gid = ans.u.graph_accepted.graph_id;
            if (ans.type == GS_MSG_GRAPH_DONE) cr_assert_eq(ans.u.graph_done.status, GS_OK);
            gs_msg_cleanup(&ans);
        } while (ans.type != GS_MSG_GRAPH_DONE);
        {
            json_t *g = wait_done_graph_id(gid), *e;
            size_t i;
            th_resp_t r;
            char path[64];
            cr_assert_not_null(g);
            json_array_foreach(json_object_get(g, "layers"), i, e) {
                const char *name = json_string_value(json_object_get(e, "name"));
                cr_assert_str_eq(name, named ? shown[i > 0] : "layer", "layer %zu named '%s'", i, name);
            }
            snprintf(path, sizeof path, "/report?graph=%lld", (long long)json_integer_value(json_object_get(g, "id")));
            cr_assert(th_http_get(DPORT, path, NULL, &r));
            cr_assert_eq(r.status, 200);
            if (named) {
                /* inside the report's script: "</" escaped, so the name cannot end it */
                cr_assert_not_null(strstr(r.body, "\"<\\/script><b>my-op<\\/b>\""), "the report names the operation");
                cr_assert_null(strstr(r.body, "</script><b>my-op"));
            }
            th_resp_free(&r);
            json_decref(g);
        }
    }
    close(fd);
    gs_buf_cleanup(&lbuf);
    gs_taskgraph_free(tg);
    gs_array_release(s);
    gs_array_release(b);
    gs_array_release(a);
}

Test(dashboard, serves_pages_with_content_types, .init = up, .fini = down)
{
    static const struct { const char *path, *ctype; } pages[] = {
        {"/", "text/html; charset=utf-8"},
        {"/static/dash.js", "text/javascript; charset=utf-8"},
        {"/static/dash.css", "text/css; charset=utf-8"},
        {"/static/colours.js", "text/javascript; charset=utf-8"},
    };
    for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
        th_resp_t r;
        char ct[128];
        cr_assert(th_http_get(DPORT, pages[i].path, NULL, &r));
        cr_assert_eq(r.status, 200, "%s", pages[i].path);
        cr_assert_str_eq(th_resp_header(&r, "Content-Type", ct, sizeof ct), pages[i].ctype);
        cr_assert_gt(r.body_len, 100);
        cr_assert_null(strstr(r.body, "https://"), "%s refers to the internet", pages[i].path);
        th_resp_free(&r);
    }
}

Test(dashboard, bad_requests_get_errors_and_scheduling_goes_on, .init = up, .fini = down)
{
    gs_client_h c = tc_connect(&CL, GS_LOWER_DEFAULT);
    th_resp_t r;
    size_t big = 256 * 1024;
    char *huge = malloc(big + 256);
    int n;
    cr_assert_not_null(c);
    OK(gs_client_wait_for_workers(c, 2, 30.0));

    cr_assert(th_http_get(DPORT, "/no/such/page", NULL, &r));
    cr_assert_eq(r.status, 404);
    th_resp_free(&r);
    cr_assert(th_http_get(DPORT, "/api/tasks?since=abc", NULL, &r));
    cr_assert_eq(r.status, 400);
    th_resp_free(&r);
    {
        static const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc";
        cr_assert(th_http_raw(DPORT, post, sizeof post - 1, 10.0, &r));
    }
    cr_assert_eq(r.status, 405);
    th_resp_free(&r);
    cr_assert(th_http_raw(DPORT, "GARBAGE\r\n\r\n", 11, 10.0, &r));
    cr_assert(r.status == 400 || r.status == 0, "malformed request line answered %d", r.status);
    th_resp_free(&r);
    cr_assert(th_http_raw(DPORT, "GET / HTTP/1.1\r\nHost x\r\n\r\n", 26, 10.0, &r));
    cr_assert(r.status == 400 || r.status == 0, "malformed header answered %d", r.status);
    th_resp_free(&r);
    n = snprintf(huge, 256, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(huge + n, 'a', big);
    memcpy(huge + n + big, "\r\n\r\n", 4);
    cr_assert(th_http_raw(DPORT, huge, (size_t)n + big + 4, 10.0, &r));
    cr_assert(r.status == 431 || r.status == 413 || r.status == 0, "huge header answered %d", r.status);
    th_resp_free(&r);
    free(huge);

    /* the scheduler kept scheduling and the dashboard kept serving */
    cr_assert_eq(run_job(c, 2000, 100), 2000.0 * 2001.0 / 2.0);
    cr_assert(th_http_get(DPORT, "/health", NULL, &r));
    cr_assert_eq(r.status, 200);
    th_resp_free(&r);
    gs_client_destroy(c);
}

Test(dashboard, many_slow_clients_do_not_stop_scheduling, .init = up, .fini = down)
{
    enum { NSLOW = 1000 };
    static int fds[NSLOW];
    struct rlimit rl;
    struct sockaddr_in a;
    gs_client_h c = tc_connect(&CL, GS_LOWER_DEFAULT);
    th_resp_t r;
    int nopen = 0;
    cr_assert_not_null(c);
    OK(gs_client_wait_for_workers(c, 2, 30.0));
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < NSLOW + 64 && rl.rlim_max >= NSLOW + 64) {
        rl.rlim_cur = NSLOW + 64;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)DPORT);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < NSLOW; i++) {   /* each sends half a request line and stalls */
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0) break;
        if (connect(fds[i], (struct sockaddr *)&a, sizeof a) != 0) {
            close(fds[i]);
            break;
        }
        send(fds[i], "GET /api/wor", 12, MSG_NOSIGNAL);
        nopen++;
    }
    cr_assert_geq(nopen, 500, "only %d slow connections could be opened", nopen);
    cr_assert_eq(run_job(c, 4000, 100), 4000.0 * 4001.0 / 2.0);
    cr_assert(th_http_get(DPORT, "/health", NULL, &r));
    cr_assert_eq(r.status, 200, "a real client is still served beside %d slow ones", nopen);
    th_resp_free(&r);
    for (int i = 0; i < nopen; i++) close(fds[i]);
    gs_client_destroy(c);
}

static void up_token(void)
{
    start("0.0.0.0", "s3cret-token");
}

Test(dashboard, off_loopback_it_asks_for_the_token, .init = up_token, .fini = down)
{
    th_resp_t r;
    char cookie[256];
    cr_assert(th_http_get(DPORT, "/api/workers", NULL, &r));
    cr_assert_eq(r.status, 401);
    th_resp_free(&r);
    cr_assert(th_http_get(DPORT, "/api/workers", "Authorization: Bearer wrong\r\n", &r));
    cr_assert_eq(r.status, 401);
    th_resp_free(&r);
    cr_assert(th_http_get(DPORT, "/metrics", "Authorization: Bearer s3cret-token\r\n", &r));
    cr_assert_eq(r.status, 200);
    th_resp_free(&r);
    cr_assert(th_http_get(DPORT, "/?token=s3cret-token", NULL, &r));
    cr_assert_eq(r.status, 200);
    cr_assert_not_null(th_resp_header(&r, "Set-Cookie", cookie, sizeof cookie));
    cr_assert_not_null(strstr(cookie, "HttpOnly"));
    th_resp_free(&r);
    cr_assert(th_http_get(DPORT, "/api/graphs", "Cookie: gsched_token=s3cret-token\r\n", &r));
    cr_assert_eq(r.status, 200);
    th_resp_free(&r);
}

Test(dashboard, client_saves_the_report_of_its_graph, .init = up, .fini = down)
{
    gs_client_h c = tc_connect(&CL, GS_LOWER_DEFAULT), other = tc_connect(&CL, GS_LOWER_DEFAULT);
    gs_array_h a, s;
    gs_future_h f;
    int64_t n = 3000, chunk = 100;
    char path[] = "/tmp/gs-report-XXXXXX", buf[1 << 16];
    int fd = mkstemp(path);
    ssize_t got;
    cr_assert(c != NULL && other != NULL && fd >= 0);
    OK(gs_client_wait_for_workers(c, 2, 30.0));
    OK(gs_array_arange(0, 1, 1, &n, &chunk, &a));
    OK(gs_array_reduce(GS_RED_SUM, a, NULL, &s));
    OK(gs_client_submit(c, s, 0, &f));
    OK(gs_client_report(c, f, path));   /* waits for the graph */
    got = pread(fd, buf, sizeof buf - 1, 0);
    cr_assert_gt(got, 1000);
    buf[got] = '\0';
    cr_assert_not_null(strstr(buf, "<!DOCTYPE html>"));
    cr_assert_null(strstr(buf, "__GS_REPORT_DATA__"), "the data marker was replaced");
    cr_assert_not_null(strstr(buf, "\"phase\":\"done\""));
    cr_assert_not_null(strstr(buf, "\"total\":33"), "30 leaves, 2 + 1 combines: %.300s", strstr(buf, "\"graph\""));
    /* another client's future is refused by the library; a bad path is an I/O error */
    cr_assert_eq(gs_client_report(other, f, path), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_client_report(c, f, "/nonexistent-dir/r.html"), GS_ERR_IO);
    cr_assert_not_null(strstr(gs_last_error(), "/nonexistent-dir/r.html"));
    gs_future_destroy(f);
    gs_array_release(s);
    gs_array_release(a);
    gs_client_destroy(other);
    gs_client_destroy(c);
    close(fd);
    unlink(path);
}

static void up_no_dash(void)
{
    const char *args[] = {"--dashboard-address", "none", NULL};
    alarm(240);
    cr_assert(tc_start(&CL, 1, NULL, args), "cluster did not start");
}

Test(dashboard, without_a_dashboard_the_report_is_not_found, .init = up_no_dash, .fini = down)
{
    gs_client_h c = tc_connect(&CL, GS_LOWER_DEFAULT);
    gs_array_h a, s;
    gs_future_h f;
    int64_t n = 100, chunk = 50;
    cr_assert_not_null(c);
    OK(gs_array_arange(0, 1, 1, &n, &chunk, &a));
    OK(gs_array_reduce(GS_RED_SUM, a, NULL, &s));
    OK(gs_client_submit(c, s, 0, &f));
    cr_assert_eq(gs_client_report(c, f, "/tmp/never-written.html"), GS_ERR_NOT_FOUND);
    cr_assert_not_null(strstr(gs_last_error(), "no dashboard"), "%s", gs_last_error());
    cr_assert_neq(access("/tmp/never-written.html", F_OK), 0);
    gs_future_destroy(f);
    gs_array_release(s);
    gs_array_release(a);
    gs_client_destroy(c);
}
