#include "samples.h"

#include <criterion/criterion.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define GS_TEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS_TEST_LSAN 1
#endif
#endif
#ifdef GS_TEST_LSAN
#include <sanitizer/lsan_interface.h>
#endif

/* The test binary is linked with -Wl,--wrap=malloc,... so every allocation made by gsched's static
 * libraries (gs_malloc & co in common/alloc.c) is counted here; libuv and Criterion are shared
 * libraries and are not. Works the same under ASan (__real_malloc is ASan's malloc). */
void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void __real_free(void *p);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void __wrap_free(void *p);

static long live_blocks;
static size_t requested_bytes;

void *__wrap_malloc(size_t size)
{
    void *p = __real_malloc(size);
    requested_bytes += size;
    if (p != NULL) live_blocks++;
    return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
    void *p = __real_calloc(n, size);
    requested_bytes += n * size;
    if (p != NULL) live_blocks++;
    return p;
}

void *__wrap_realloc(void *p, size_t size)
{
    void *q = __real_realloc(p, size);
    requested_bytes += size;
    if (p == NULL && q != NULL) live_blocks++;
    if (p != NULL && q == NULL && size == 0) live_blocks--;
    return q;
}

void __wrap_free(void *p)
{
    if (p != NULL) live_blocks--;
    __real_free(p);
}

size_t live_heap_blocks(void)
{
    return (size_t)live_blocks;
}

size_t heap_bytes_requested(void)
{
    return requested_bytes;
}

void proto_check_no_leaks(void)
{
    cr_assert_eq(live_heap_blocks(), 0, "%zu heap blocks allocated by gsched were not freed", live_heap_blocks());
#ifdef GS_TEST_LSAN
    /* Criterion's workers exit without LeakSanitizer's report: ask for it explicitly */
    cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks");
#endif
}

#define S(lit) ((gs_str_t){(const uint8_t *)(lit), sizeof(lit) - 1})
#define B(arr) ((gs_bytes_t){(const uint8_t *)(arr), sizeof(arr)})

static const uint8_t ucx_a[] = {0x01, 0x02, 0x03, 0x00, 0xff, 0x7f, 0x80};
static const uint8_t ucx_b[] = {0xde, 0xad, 0xbe, 0xef};
static const uint8_t layer0[] = {0x93, 0x01, 0x02, 0x03};
static const uint8_t layer1[] = {0xc4, 0x03, 0xaa, 0xbb, 0xcc, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55};

static gs_peer_info_t peers_added[2];
static uint64_t peers_removed[3] = {7, 1ull << 40, UINT64_MAX};

static gs_bytes_t submit_layers[3];
static const uint32_t submit_task_layer[5] = {0, 1, 2, 1, 0};
static const uint64_t submit_task_block[5] = {0, 1, 0, 5, UINT64_MAX};
static const uint64_t submit_dep_off[6] = {0, 0, 1, 3, 3, 5};
static const uint64_t submit_deps[5] = {0, 0, 1, 1, 6};
static const uint64_t submit_task_nbytes[5] = {800, 8, 1ull << 33, 0, 16};
static const uint64_t submit_externals[4] = {7, 1, 7, 2};
static const uint64_t submit_outputs[2] = {3, 4};

static const uint32_t assign_layer_ids[2] = {4, 9};
static gs_bytes_t assign_layers[2];
static const uint64_t assign_task_id[3] = {10, 11, 1ull << 50};
static const uint32_t assign_task_layer[3] = {4, 9, 4};
static const uint64_t assign_task_block[3] = {0, 3, 2};
static const uint64_t assign_dep_off[4] = {0, 2, 2, 3};
static const uint64_t assign_dep_keys[6] = {1, 2, 1, 3, 5, 6};
static const uint64_t assign_dep_worker[3] = {0, 2, 7};
static const uint64_t assign_dep_nbytes[3] = {8, 80000, 0};

static const uint64_t done_graph[4] = {1, 1, 2, 2};
static const uint64_t done_task[4] = {5, 6, 7, 8};
static const int32_t done_status[4] = {GS_OK, GS_ERR_TASK_FAILED, GS_OK, GS_ERR_CUDA};
static const uint64_t done_nbytes[4] = {8, 0, 16, 0};
static const uint64_t done_run_ns[4] = {1000, 2000, 3, UINT64_MAX};
static const uint64_t done_fetch_ns[4] = {0, 1, 2, 3};
static gs_str_t done_errors[2];

static const uint64_t release_keys[6] = {1, 2, 1, 3, 9, UINT64_MAX};
static const uint64_t gather_keys[4] = {4, 0, 4, 1};
static double data_chunk[1000];
static gs_str_t info_names[3];

static const uint64_t bw_peer[2] = {3, 1ull << 40};
static const uint64_t bw_bytes[2] = {80000000, 1};
static const uint64_t bw_ns[2] = {25000000, UINT64_MAX};
static const uint32_t bw_count[2] = {10, 1};
static gs_str_t bw_path[2];
static const uint64_t repl_keys[6] = {4, 0, 4, 1, 9, UINT64_MAX};
static const uint64_t repl_from[3] = {2, 3, 1ull << 33};
static const uint64_t repl_nbytes[3] = {8000000, 0, 1ull << 40};
static const uint64_t workers_id[3] = {1, 2, 1ull << 41};
static const int32_t workers_device[3] = {0, -1, 7};
static const uint32_t workers_nthreads[3] = {4, 1, 4096};
static const uint64_t workers_memlim[3] = {1ull << 30, 0, UINT64_MAX};
static const uint64_t workers_memused[3] = {5, 0, 1ull << 20};
static gs_str_t workers_name[3], workers_host[3], workers_backend[3], workers_addr[3];

void sample_msg(uint32_t type, gs_msg_t *m)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    switch (type) {
    case GS_MSG_HELLO:
        m->u.hello.version = GS_PROTO_VERSION;
        m->u.hello.role = GS_ROLE_WORKER;
        m->u.hello.token = S("s3cr\xc3\xa9t-\x01-token");
        m->u.hello.name = S("gworker-3");
        break;
    case GS_MSG_WELCOME:
        m->u.welcome.version = 7;
        m->u.welcome.id = 1ull << 45;
        m->u.welcome.heartbeat_ms = 250;
        break;
    case GS_MSG_WORKER_REGISTER:
        m->u.worker_register.name = S("gpu0");
        m->u.worker_register.backend = S("cuda");
        m->u.worker_register.host = S("node-17.cluster");
        m->u.worker_register.device = -1;
        m->u.worker_register.nthreads = 64;
        m->u.worker_register.pid = 4000000;
        m->u.worker_register.memory_limit = 141ull << 30;
        m->u.worker_register.ucx_address = B(ucx_a);
        break;
    case GS_MSG_HEARTBEAT:
        m->u.heartbeat.seq = 99;
        m->u.heartbeat.mem_used = 1ull << 36;
        m->u.heartbeat.mem_limit = UINT64_MAX;
        m->u.heartbeat.executing = 3;
        m->u.heartbeat.queued = UINT32_MAX;
        break;
    case GS_MSG_PEERS:
        peers_added[0] = (gs_peer_info_t){12, S("w12"), S("10.0.0.12"), B(ucx_a)};
        peers_added[1] = (gs_peer_info_t){13, S(""), S("host-b"), B(ucx_b)};
        m->u.peers.nadded = 2;
        m->u.peers.added = peers_added;
        m->u.peers.nremoved = 3;
        m->u.peers.removed = peers_removed;
        break;
    case GS_MSG_GRAPH_SUBMIT:
        submit_layers[0] = B(layer0);
        submit_layers[1] = (gs_bytes_t){NULL, 0};
        submit_layers[2] = B(layer1);
        m->u.graph_submit = (gs_msg_graph_submit_t){
            .client_ref = 42, .flags = GS_SUBMIT_PERSIST, .nlayers = 3, .layers = submit_layers,
            .ntasks = 5, .task_layer = submit_task_layer, .task_block = submit_task_block,
            .dep_off = submit_dep_off, .deps = submit_deps, .task_nbytes = submit_task_nbytes,
            .nexternals = 2, .externals = submit_externals, .noutputs = 2, .outputs = submit_outputs};
        break;
    case GS_MSG_GRAPH_ACCEPTED:
        m->u.graph_accepted.client_ref = 42;
        m->u.graph_accepted.graph_id = 1ull << 33;
        break;
    case GS_MSG_TASK_ASSIGN:
        assign_layers[0] = B(layer1);
        assign_layers[1] = B(layer0);
        m->u.task_assign = (gs_msg_task_assign_t){
            .graph_id = 5, .nlayers = 2, .layer_ids = assign_layer_ids, .layers = assign_layers,
            .ntasks = 3, .task_id = assign_task_id, .task_layer = assign_task_layer,
            .task_block = assign_task_block, .dep_off = assign_dep_off, .dep_keys = assign_dep_keys,
            .dep_worker = assign_dep_worker, .dep_nbytes = assign_dep_nbytes};
        break;
    case GS_MSG_TASK_DONE:
        done_errors[0] = S("task 6 of graph 1: kernel failed");
        done_errors[1] = S("cuda: illegal address");
        m->u.task_done = (gs_msg_task_done_t){
            .n = 4, .graph_id = done_graph, .task_id = done_task, .status = done_status,
            .nbytes = done_nbytes, .run_ns = done_run_ns, .fetch_ns = done_fetch_ns, .nerrors = 2,
            .errors = done_errors};
        break;
    case GS_MSG_RELEASE:
        m->u.release.n = 3;
        m->u.release.keys = release_keys;
        break;
    case GS_MSG_GATHER_REQ:
        m->u.gather_req.req_id = 77;
        m->u.gather_req.n = 2;
        m->u.gather_req.keys = gather_keys;
        break;
    case GS_MSG_DATA:
        for (int i = 0; i < 1000; i++) data_chunk[i] = i * 0.5 - 3.25;
        m->u.data.req_id = 77;
        m->u.data.graph_id = 4;
        m->u.data.task_id = 1;
        m->u.data.status = GS_OK;
        m->u.data.data = (gs_bytes_t){(const uint8_t *)data_chunk, sizeof data_chunk};
        break;
    case GS_MSG_FETCH_REQ:
        m->u.fetch_req = (gs_msg_fetch_req_t){1, 2, 3, 4};
        break;
    case GS_MSG_PROGRESS:
        m->u.progress = (gs_msg_progress_t){9, 1000, 1000000};
        break;
    case GS_MSG_GRAPH_DONE:
        m->u.graph_done.graph_id = 9;
        m->u.graph_done.status = GS_ERR_TASK_FAILED;
        m->u.graph_done.message = S("task 3 (layer 'sum') failed: out of device memory");
        m->u.graph_done.ntasks = 12345;
        m->u.graph_done.run_ns_total = 1ull << 40;
        m->u.graph_done.wall_ns = 5;
        break;
    case GS_MSG_CANCEL:
    case GS_MSG_RELEASE_GRAPH:
        m->u.cancel.graph_id = type * 1000ull;
        break;
    case GS_MSG_ERROR:
        m->u.error.status = GS_ERR_AUTH;
        m->u.error.message = S("wrong cluster token");
        break;
    case GS_MSG_INFO:
        info_names[0] = S("gpu0");
        info_names[1] = S("");
        info_names[2] = S("gpu2@node-b");
        m->u.info = (gs_msg_info_t){.nworkers = 3, .nclients = 1, .ngraphs_active = 2,
                                    .tasks_done_total = 1ull << 35, .nnames = 3, .worker_names = info_names};
        break;
    case GS_MSG_BANDWIDTH:
        bw_path[0] = S("ucx");
        bw_path[1] = S("");
        m->u.bandwidth = (gs_msg_bandwidth_t){.n = 2, .peer = bw_peer, .bytes = bw_bytes, .ns = bw_ns,
                                              .count = bw_count, .npaths = 2, .path = bw_path};
        break;
    case GS_MSG_REPLICATE:
        m->u.replicate = (gs_msg_replicate_t){.req_id = 77, .worker_id = 5, .worker_name = S("gpu1"), .n = 3,
                                              .keys = repl_keys, .nsrc = 3, .from = repl_from,
                                              .nbytes = repl_nbytes};
        break;
    case GS_MSG_REPLICATE_DONE:
        m->u.replicate_done = (gs_msg_replicate_done_t){.req_id = 78, .status = GS_ERR_WORKER_LOST,
                                                        .message = S("chunk (9, 1) could not be fetched"),
                                                        .n = 2, .keys = repl_keys, .nbytes = repl_nbytes};
        break;
    case GS_MSG_WORKERS:
        workers_name[0] = S("gpu0");
        workers_name[1] = S("");
        workers_name[2] = S("gpu7@node-b");
        workers_host[0] = workers_host[1] = S("node-a");
        workers_host[2] = S("node-b");
        workers_backend[0] = workers_backend[2] = S("cuda");
        workers_backend[1] = S("cpu");
        workers_addr[0] = S("127.0.0.1:4001");
        workers_addr[1] = S("[::1]:4002");
        workers_addr[2] = S("?");
        m->u.workers = (gs_msg_workers_t){.n = 3, .id = workers_id, .device = workers_device,
                                          .nthreads = workers_nthreads, .memory_limit = workers_memlim,
                                          .mem_used = workers_memused, .nname = 3, .nhost = 3,
                                          .nbackend = 3, .naddr = 3, .name = workers_name,
                                          .host = workers_host, .backend = workers_backend,
                                          .addr = workers_addr};
        break;
    default: /* SHUTDOWN, INFO_REQ, WORKERS_REQ */
        break;
    }
}

void sample_frame(uint32_t type, gs_buf_t *out)
{
    gs_msg_t m;
    sample_msg(type, &m);
    gs_status_t st = gs_msg_encode(&m, out);
    cr_assert_eq(st, GS_OK, "encoding sample %s: %s", gs_msg_type_name(type), gs_last_error());
}

static void assert_bytes_eq(gs_bytes_t a, gs_bytes_t b, const char *what)
{
    cr_assert_eq(a.len, b.len, "%s: length %zu vs %zu", what, a.len, b.len);
    if (a.len > 0) cr_assert(memcmp(a.data, b.data, a.len) == 0, "%s differs", what);
}

static void assert_table_eq(const void *a, const void *b, uint64_t n, size_t width, const char *what)
{
    if (n == 0) return;
    cr_assert_not_null(a, "%s is NULL", what);
    cr_assert_not_null(b, "%s is NULL", what);
    cr_assert(memcmp(a, b, (size_t)n * width) == 0, "%s differs", what);
}

void assert_msg_eq(const gs_msg_t *a, const gs_msg_t *b)
{
    cr_assert_eq(a->type, b->type);
    switch (a->type) {
    case GS_MSG_HELLO:
        cr_assert_eq(a->u.hello.version, b->u.hello.version);
        cr_assert_eq(a->u.hello.role, b->u.hello.role);
        assert_bytes_eq(a->u.hello.token, b->u.hello.token, "token");
        assert_bytes_eq(a->u.hello.name, b->u.hello.name, "name");
        break;
    case GS_MSG_WELCOME:
        cr_assert_eq(a->u.welcome.version, b->u.welcome.version);
        cr_assert_eq(a->u.welcome.id, b->u.welcome.id);
        cr_assert_eq(a->u.welcome.heartbeat_ms, b->u.welcome.heartbeat_ms);
        break;
    case GS_MSG_WORKER_REGISTER: {
        const gs_msg_worker_register_t *x = &a->u.worker_register, *y = &b->u.worker_register;
        assert_bytes_eq(x->name, y->name, "name");
        assert_bytes_eq(x->backend, y->backend, "backend");
        assert_bytes_eq(x->host, y->host, "host");
        cr_assert_eq(x->device, y->device);
        cr_assert_eq(x->nthreads, y->nthreads);
        cr_assert_eq(x->pid, y->pid);
        cr_assert_eq(x->memory_limit, y->memory_limit);
        assert_bytes_eq(x->ucx_address, y->ucx_address, "ucx_address");
        break;
    }
    case GS_MSG_HEARTBEAT:
        cr_assert_eq(a->u.heartbeat.seq, b->u.heartbeat.seq);
        cr_assert_eq(a->u.heartbeat.mem_used, b->u.heartbeat.mem_used);
        cr_assert_eq(a->u.heartbeat.mem_limit, b->u.heartbeat.mem_limit);
        cr_assert_eq(a->u.heartbeat.executing, b->u.heartbeat.executing);
        cr_assert_eq(a->u.heartbeat.queued, b->u.heartbeat.queued);
        break;
    case GS_MSG_PEERS:
        cr_assert_eq(a->u.peers.nadded, b->u.peers.nadded);
        for (uint32_t i = 0; i < a->u.peers.nadded; i++) {
            cr_assert_eq(a->u.peers.added[i].id, b->u.peers.added[i].id);
            assert_bytes_eq(a->u.peers.added[i].name, b->u.peers.added[i].name, "peer name");
            assert_bytes_eq(a->u.peers.added[i].host, b->u.peers.added[i].host, "peer host");
            assert_bytes_eq(a->u.peers.added[i].ucx_address, b->u.peers.added[i].ucx_address, "peer ucx");
        }
        cr_assert_eq(a->u.peers.nremoved, b->u.peers.nremoved);
        assert_table_eq(a->u.peers.removed, b->u.peers.removed, a->u.peers.nremoved, 8, "removed");
        break;
    case GS_MSG_GRAPH_SUBMIT: {
        const gs_msg_graph_submit_t *x = &a->u.graph_submit, *y = &b->u.graph_submit;
        cr_assert_eq(x->client_ref, y->client_ref);
        cr_assert_eq(x->flags, y->flags);
        cr_assert_eq(x->nlayers, y->nlayers);
        for (uint32_t i = 0; i < x->nlayers; i++) assert_bytes_eq(x->layers[i], y->layers[i], "layer");
        cr_assert_eq(x->ntasks, y->ntasks);
        assert_table_eq(x->task_layer, y->task_layer, x->ntasks, 4, "task_layer");
        assert_table_eq(x->task_block, y->task_block, x->ntasks, 8, "task_block");
        assert_table_eq(x->dep_off, y->dep_off, x->ntasks + 1, 8, "dep_off");
        assert_table_eq(x->deps, y->deps, x->dep_off[x->ntasks], 8, "deps");
        assert_table_eq(x->task_nbytes, y->task_nbytes, x->ntasks, 8, "task_nbytes");
        cr_assert_eq(x->nexternals, y->nexternals);
        assert_table_eq(x->externals, y->externals, 2 * x->nexternals, 8, "externals");
        cr_assert_eq(x->noutputs, y->noutputs);
        assert_table_eq(x->outputs, y->outputs, x->noutputs, 8, "outputs");
        break;
    }
    case GS_MSG_GRAPH_ACCEPTED:
        cr_assert_eq(a->u.graph_accepted.client_ref, b->u.graph_accepted.client_ref);
        cr_assert_eq(a->u.graph_accepted.graph_id, b->u.graph_accepted.graph_id);
        break;
    case GS_MSG_TASK_ASSIGN: {
        const gs_msg_task_assign_t *x = &a->u.task_assign, *y = &b->u.task_assign;
        uint64_t ndeps = x->dep_off[x->ntasks];
        cr_assert_eq(x->graph_id, y->graph_id);
        cr_assert_eq(x->nlayers, y->nlayers);
        assert_table_eq(x->layer_ids, y->layer_ids, x->nlayers, 4, "layer_ids");
        for (uint32_t i = 0; i < x->nlayers; i++) assert_bytes_eq(x->layers[i], y->layers[i], "layer");
        cr_assert_eq(x->ntasks, y->ntasks);
        assert_table_eq(x->task_id, y->task_id, x->ntasks, 8, "task_id");
        assert_table_eq(x->task_layer, y->task_layer, x->ntasks, 4, "task_layer");
        assert_table_eq(x->task_block, y->task_block, x->ntasks, 8, "task_block");
        assert_table_eq(x->dep_off, y->dep_off, x->ntasks + 1, 8, "dep_off");
        assert_table_eq(x->dep_keys, y->dep_keys, 2 * ndeps, 8, "dep_keys");
        assert_table_eq(x->dep_worker, y->dep_worker, ndeps, 8, "dep_worker");
        assert_table_eq(x->dep_nbytes, y->dep_nbytes, ndeps, 8, "dep_nbytes");
        break;
    }
    case GS_MSG_TASK_DONE: {
        const gs_msg_task_done_t *x = &a->u.task_done, *y = &b->u.task_done;
        cr_assert_eq(x->n, y->n);
        assert_table_eq(x->graph_id, y->graph_id, x->n, 8, "graph_id");
        assert_table_eq(x->task_id, y->task_id, x->n, 8, "task_id");
        assert_table_eq(x->status, y->status, x->n, 4, "status");
        assert_table_eq(x->nbytes, y->nbytes, x->n, 8, "nbytes");
        assert_table_eq(x->run_ns, y->run_ns, x->n, 8, "run_ns");
        assert_table_eq(x->fetch_ns, y->fetch_ns, x->n, 8, "fetch_ns");
        cr_assert_eq(x->nerrors, y->nerrors);
        for (uint32_t i = 0; i < x->nerrors; i++) assert_bytes_eq(x->errors[i], y->errors[i], "error");
        break;
    }
    case GS_MSG_RELEASE:
        cr_assert_eq(a->u.release.n, b->u.release.n);
        assert_table_eq(a->u.release.keys, b->u.release.keys, 2 * a->u.release.n, 8, "keys");
        break;
    case GS_MSG_GATHER_REQ:
        cr_assert_eq(a->u.gather_req.req_id, b->u.gather_req.req_id);
        cr_assert_eq(a->u.gather_req.n, b->u.gather_req.n);
        assert_table_eq(a->u.gather_req.keys, b->u.gather_req.keys, 2 * a->u.gather_req.n, 8, "keys");
        break;
    case GS_MSG_DATA:
        cr_assert_eq(a->u.data.req_id, b->u.data.req_id);
        cr_assert_eq(a->u.data.graph_id, b->u.data.graph_id);
        cr_assert_eq(a->u.data.task_id, b->u.data.task_id);
        cr_assert_eq(a->u.data.status, b->u.data.status);
        assert_bytes_eq(a->u.data.data, b->u.data.data, "data");
        break;
    case GS_MSG_FETCH_REQ:
        cr_assert_eq(a->u.fetch_req.req_id, b->u.fetch_req.req_id);
        cr_assert_eq(a->u.fetch_req.graph_id, b->u.fetch_req.graph_id);
        cr_assert_eq(a->u.fetch_req.task_id, b->u.fetch_req.task_id);
        cr_assert_eq(a->u.fetch_req.from_worker, b->u.fetch_req.from_worker);
        break;
    case GS_MSG_PROGRESS:
        cr_assert_eq(a->u.progress.graph_id, b->u.progress.graph_id);
        cr_assert_eq(a->u.progress.done, b->u.progress.done);
        cr_assert_eq(a->u.progress.total, b->u.progress.total);
        break;
    case GS_MSG_GRAPH_DONE:
        cr_assert_eq(a->u.graph_done.graph_id, b->u.graph_done.graph_id);
        cr_assert_eq(a->u.graph_done.status, b->u.graph_done.status);
        assert_bytes_eq(a->u.graph_done.message, b->u.graph_done.message, "message");
        cr_assert_eq(a->u.graph_done.ntasks, b->u.graph_done.ntasks);
        cr_assert_eq(a->u.graph_done.run_ns_total, b->u.graph_done.run_ns_total);
        cr_assert_eq(a->u.graph_done.wall_ns, b->u.graph_done.wall_ns);
        break;
    case GS_MSG_CANCEL:
    case GS_MSG_RELEASE_GRAPH:
        cr_assert_eq(a->u.cancel.graph_id, b->u.cancel.graph_id);
        break;
    case GS_MSG_ERROR:
        cr_assert_eq(a->u.error.status, b->u.error.status);
        assert_bytes_eq(a->u.error.message, b->u.error.message, "message");
        break;
    case GS_MSG_INFO:
        cr_assert_eq(a->u.info.nworkers, b->u.info.nworkers);
        cr_assert_eq(a->u.info.nclients, b->u.info.nclients);
        cr_assert_eq(a->u.info.ngraphs_active, b->u.info.ngraphs_active);
        cr_assert_eq(a->u.info.tasks_done_total, b->u.info.tasks_done_total);
        cr_assert_eq(a->u.info.nnames, b->u.info.nnames);
        for (uint32_t i = 0; i < a->u.info.nnames; i++) {
            assert_bytes_eq(a->u.info.worker_names[i], b->u.info.worker_names[i], "worker name");
        }
        break;
    case GS_MSG_BANDWIDTH: {
        const gs_msg_bandwidth_t *x = &a->u.bandwidth, *y = &b->u.bandwidth;
        cr_assert_eq(x->n, y->n);
        assert_table_eq(x->peer, y->peer, x->n, 8, "peer");
        assert_table_eq(x->bytes, y->bytes, x->n, 8, "bytes");
        assert_table_eq(x->ns, y->ns, x->n, 8, "ns");
        assert_table_eq(x->count, y->count, x->n, 4, "count");
        cr_assert_eq(x->npaths, y->npaths);
        for (uint32_t i = 0; i < x->npaths; i++) assert_bytes_eq(x->path[i], y->path[i], "path");
        break;
    }
    case GS_MSG_REPLICATE: {
        const gs_msg_replicate_t *x = &a->u.replicate, *y = &b->u.replicate;
        cr_assert_eq(x->req_id, y->req_id);
        cr_assert_eq(x->worker_id, y->worker_id);
        assert_bytes_eq(x->worker_name, y->worker_name, "worker_name");
        cr_assert_eq(x->n, y->n);
        assert_table_eq(x->keys, y->keys, x->n, 16, "keys");
        cr_assert_eq(x->nsrc, y->nsrc);
        assert_table_eq(x->from, y->from, x->nsrc, 8, "from");
        assert_table_eq(x->nbytes, y->nbytes, x->nsrc, 8, "nbytes");
        break;
    }
    case GS_MSG_REPLICATE_DONE: {
        const gs_msg_replicate_done_t *x = &a->u.replicate_done, *y = &b->u.replicate_done;
        cr_assert_eq(x->req_id, y->req_id);
        cr_assert_eq(x->status, y->status);
        assert_bytes_eq(x->message, y->message, "message");
        cr_assert_eq(x->n, y->n);
        assert_table_eq(x->keys, y->keys, x->n, 16, "keys");
        assert_table_eq(x->nbytes, y->nbytes, x->n, 8, "nbytes");
        break;
    }
    case GS_MSG_WORKERS: {
        const gs_msg_workers_t *x = &a->u.workers, *y = &b->u.workers;
        cr_assert_eq(x->n, y->n);
        assert_table_eq(x->id, y->id, x->n, 8, "id");
        assert_table_eq(x->device, y->device, x->n, 4, "device");
        assert_table_eq(x->nthreads, y->nthreads, x->n, 4, "nthreads");
        assert_table_eq(x->memory_limit, y->memory_limit, x->n, 8, "memory_limit");
        assert_table_eq(x->mem_used, y->mem_used, x->n, 8, "mem_used");
        cr_assert_eq(x->nname, y->nname);
        cr_assert_eq(x->naddr, y->naddr);
        for (uint32_t i = 0; i < x->n; i++) {
            assert_bytes_eq(x->name[i], y->name[i], "name");
            assert_bytes_eq(x->host[i], y->host[i], "host");
            assert_bytes_eq(x->backend[i], y->backend[i], "backend");
            assert_bytes_eq(x->addr[i], y->addr[i], "addr");
        }
        break;
    }
    default:
        break;
    }
}
