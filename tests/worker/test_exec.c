/* One in-process worker driven by a fake scheduler on loopback: registration, heartbeats,
 * execution of real lowered layers, gathers, failures, memory limits, release/cancel/stop. */
#include "fake_sched.h"

#include "common/log.h"
#include "common/sysmem.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static uv_loop_t loop;
static fake_sched_t fs;

static void setup(void)
{
    fs_fixture_setup(&fs, &loop);
}

static void teardown(void)
{
    fs_fixture_teardown(&fs, &loop);
}

TestSuite(worker_exec, .init = setup, .fini = teardown, .timeout = 60);

/* (normal(10, 1, (n, n)) + 1)[::2, ::2], summed when @a reduce (split_every 4). */
static gs_array_h seed_expr(int64_t n, int64_t chunk, int reduce)
{
    gs_array_h a, b, c, d;
    int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
    gs_slice_t s[2] = {{0, 0, 2, 0}, {0, 0, 2, 0}};
    gs_reduce_params_t rp = {GS_REDUCE_FIELD_SPLIT_EVERY, 0, 4, 0};
    cr_assert_eq(gs_array_random_normal(7, 10.0, 1.0, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_binary_scalar(GS_BINARY_ADD, a, 1.0, &b), GS_OK);
    cr_assert_eq(gs_array_slice(b, 2, s, &c), GS_OK);
    gs_array_release(a);
    gs_array_release(b);
    if (!reduce) return c;
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, c, &rp, &d), GS_OK);
    gs_array_release(c);
    return d;
}

static void start_worker(tw_t *t, const gs_worker_params_t *p)
{
    tw_start(t, &fs, p);
    cr_assert(fs_wait_registered(&fs, 1, 5000), "the worker did not register");
}

static void stop_worker(tw_t *t)
{
    gs_worker_stop(t->w, GS_OK);
    cr_assert(tw_wait_stopped(t, &fs, 5000), "the worker did not stop");
    tw_destroy(t);
}

/* Run @a a's graph on the single worker and compare every output with the serial evaluator. */
static void run_and_check(uint64_t gid, gs_array_h a, unsigned flags, int release)
{
    double *ref, *got;
    size_t size, failed;
    gs_taskgraph_t *tg = tw_lower(a, flags, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));
    failed = fs_run_graph(&fs, gid, tg, place, release, 20000);
    cr_assert_eq(failed, 0, "graph %llu: %s", (unsigned long long)gid,
                 failed == (size_t)-1 ? "timed out" : fs.done[failed - 1].err);
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        const fs_done_t *d = fs_find_done(&fs, gid, t);
        cr_assert_not_null(d);
        cr_assert_eq(d->nbytes, tg->task_nbytes[t], "task %llu: nbytes %llu, declared %llu",
                     (unsigned long long)t, (unsigned long long)d->nbytes,
                     (unsigned long long)tg->task_nbytes[t]);
    }
    got = calloc(size ? size : 1, sizeof(double));
    cr_assert(fs_gather_all(&fs, gid, tg, place, got, 5000), "gather failed");
    fs_assert_close(got, ref, size);
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
}

static int two_heartbeats(void *arg)
{
    return ((fs_peer_t *)arg)->nheartbeats >= 2;
}

Test(worker_exec, registers_and_heartbeats)
{
    gs_worker_params_t p = {0};
    tw_t t;
    fs_peer_t *peer;
    p.name = "alpha";
    p.nthreads = 2;
    p.memory_limit = 123456789;
    start_worker(&t, &p);
    peer = fs.peers[0];
    cr_assert_str_eq(peer->name, "alpha");
    cr_assert_str_eq(peer->backend, "cpu");
    cr_assert_eq(peer->nthreads, 2);
    cr_assert_eq(peer->memory_limit, 123456789u);
    cr_assert_gt(peer->ucx_len, 0, "no UCX address registered");
    cr_assert(fs_run_until(&fs, two_heartbeats, peer, 30000), "%llu heartbeats in 30 s at 50 ms",
              (unsigned long long)peer->nheartbeats);
    cr_assert_eq(peer->last_hb.mem_limit, 123456789u);
    cr_assert_eq(peer->last_hb.mem_used, 0u);
    stop_worker(&t);
}

Test(worker_exec, automatic_memory_limit_is_a_share_of_what_the_process_may_use)
{
    gs_worker_params_t p = {0};
    gs_sysmem_t mem;
    tw_t t;
    cr_assert_eq(gs_sysmem_query(NULL, &mem), GS_OK);
    p.nthreads = 1;
    p.memory_share = 3;                  /* memory_limit 0: automatic */
    start_worker(&t, &p);
    cr_assert_eq(fs.peers[0]->memory_limit, gs_sysmem_share(&mem, 3),
                 "registered %llu, expected a third of %llu (%s)",
                 (unsigned long long)fs.peers[0]->memory_limit, (unsigned long long)mem.total,
                 mem.source);
    cr_assert_leq(fs.peers[0]->memory_limit, mem.physical / 3);
    stop_worker(&t);
}

Test(worker_exec, runs_fused_and_combine_layers)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_array_h sum = seed_expr(64, 16, 1), arr = seed_expr(40, 16, 0);
    gs_worker_stats_t st;
    p.nthreads = 2;
    start_worker(&t, &p);
    run_and_check(1, sum, GS_LOWER_DEFAULT, 1);
    run_and_check(2, arr, GS_LOWER_DEFAULT, 1);
    run_and_check(3, sum, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE, 1);   /* one op per task */
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.tasks_done, 0);
    cr_assert_eq(st.tasks_failed, 0);
    /* only outputs are left: one scalar for graphs 1 and 3, the array's chunks for graph 2 */
    cr_assert_eq(st.chunks, 2 + 9, "%llu chunks kept", (unsigned long long)st.chunks);
    gs_array_release(sum);
    gs_array_release(arr);
    stop_worker(&t);
}

Test(worker_exec, reports_kernel_time_per_task)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_array_h arr = seed_expr(256, 128, 0);
    double *ref;
    size_t size;
    gs_taskgraph_t *tg = tw_lower(arr, GS_LOWER_DEFAULT, &ref, &size);
    int place[64] = {0};
    p.nthreads = 1;
    start_worker(&t, &p);
    cr_assert_eq(fs_run_graph(&fs, 1, tg, place, 0, 10000), 0);
    for (uint64_t i = 0; i < tg->ntasks; i++)
        cr_assert_gt(fs_find_done(&fs, 1, i)->run_ns, 0, "task %llu has no kernel time",
                     (unsigned long long)i);
    free(ref);
    gs_taskgraph_free(tg);
    gs_array_release(arr);
    stop_worker(&t);
}

Test(worker_exec, streams_mode_gives_the_same_values)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_array_h sum = seed_expr(64, 16, 1), arr = seed_expr(40, 16, 0);
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 3;
    p.stream_depth = 2;
    start_worker(&t, &p);
    run_and_check(1, sum, GS_LOWER_DEFAULT, 1);
    run_and_check(2, arr, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE, 1);
    gs_array_release(sum);
    gs_array_release(arr);
    stop_worker(&t);
}

/* A TASK_ASSIGN built by hand: one task of layer 0 with the given layer bytes. */
static void assign_raw(uint64_t gid, uint64_t task, const void *layer, size_t len, uint64_t ndeps,
                       const uint64_t *keys, const uint64_t *workers, const uint64_t *nbytes)
{
    uint32_t layer_id = 0, task_layer = 0;
    gs_bytes_t lb = {layer, len};
    uint64_t block = 0, dep_off[2] = {0, ndeps};
    gs_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_TASK_ASSIGN;
    m.u.task_assign.graph_id = gid;
    m.u.task_assign.nlayers = layer ? 1 : 0;
    m.u.task_assign.layer_ids = &layer_id;
    m.u.task_assign.layers = &lb;
    m.u.task_assign.ntasks = 1;
    m.u.task_assign.task_id = &task;
    m.u.task_assign.task_layer = &task_layer;
    m.u.task_assign.task_block = &block;
    m.u.task_assign.dep_off = dep_off;
    m.u.task_assign.dep_keys = keys;
    m.u.task_assign.dep_worker = workers;
    m.u.task_assign.dep_nbytes = nbytes;
    fs_send(&fs, 0, &m);
}

Test(worker_exec, garbage_layer_fails_the_task_and_the_worker_keeps_serving)
{
    gs_worker_params_t p = {0};
    tw_t t;
    static const uint8_t garbage[] = {0x93, 0xff, 0x01, 'g', 'a', 'r', 'b', 'a', 'g', 'e'};
    const fs_done_t *d;
    gs_array_h sum = seed_expr(32, 16, 1);
    p.nthreads = 1;
    start_worker(&t, &p);
    assign_raw(5, 17, garbage, sizeof(garbage), 0, NULL, NULL, NULL);
    d = fs_wait_done(&fs, 5, 17, 5000);
    cr_assert_not_null(d, "no completion for the garbage task");
    cr_assert_neq(d->status, GS_OK);
    cr_assert(strstr(d->err, "task 17") && strstr(d->err, "graph 5") &&
              strstr(d->err, "could not be decoded"), "message: %s", d->err);
    /* a task naming a layer that never came */
    assign_raw(6, 3, NULL, 0, 0, NULL, NULL, NULL);
    d = fs_wait_done(&fs, 6, 3, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_ERR_NOT_FOUND);
    cr_assert(strstr(d->err, "task 3") && strstr(d->err, "unknown"), "message: %s", d->err);
    run_and_check(1, sum, GS_LOWER_DEFAULT, 1);
    gs_array_release(sum);
    stop_worker(&t);
}

Test(worker_exec, wrong_dependencies_fail_the_task_with_a_message)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_array_h sum = seed_expr(64, 16, 1), arr = seed_expr(32, 16, 0);
    double *ref;
    size_t size;
    gs_taskgraph_t *tg = tw_lower(sum, GS_LOWER_DEFAULT, &ref, &size);
    gs_taskgraph_t *tga;
    double *refa;
    int place[256] = {0};
    uint64_t holder[256], comb = UINT64_MAX, self;
    const fs_done_t *d;

    start_worker(&t, &p);
    self = fs.peers[0]->id;
    for (int i = 0; i < 256; i++) holder[i] = self;
    for (uint64_t i = 0; i < tg->ntasks; i++)
        if (tg->dep_off[i + 1] > tg->dep_off[i]) { comb = i; break; }
    cr_assert_neq(comb, UINT64_MAX, "no combine task in the graph");

    /* (1) inputs that were never computed here */
    fs_assign(&fs, 0, 1, tg, &comb, 1, holder);
    d = fs_wait_done(&fs, 1, comb, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_ERR_NOT_FOUND, "status %d: %s", d->status, d->err);
    cr_assert(strstr(d->err, "is not on this worker"), "message: %s", d->err);

    /* (2) inputs of the wrong size: graph 2's array chunks stand in for graph 1's partials */
    tga = tw_lower(arr, GS_LOWER_DEFAULT, &refa, &size);
    cr_assert_eq(fs_run_graph(&fs, 2, tga, place, 0, 5000), 0);
    {
        uint64_t nd = tg->dep_off[comb + 1] - tg->dep_off[comb];
        uint64_t keys[64], workers[32], nbytes[32];
        gs_buf_t lb;
        cr_assert_leq(nd, 4);
        for (uint64_t k = 0; k < nd; k++) {
            keys[2 * k] = 2;
            keys[2 * k + 1] = k;           /* an array chunk of graph 2 */
            workers[k] = self;
            nbytes[k] = tga->task_nbytes[k];
        }
        gs_buf_init(&lb);
        cr_assert_eq(gs_layer_encode(tg->layers[tg->task_layer[comb]], &lb), GS_OK);
        assign_raw(7, 0, lb.data, lb.len, nd, keys, workers, nbytes);
        gs_buf_cleanup(&lb);
        d = fs_wait_done(&fs, 7, 0, 5000);
        cr_assert_not_null(d);
        cr_assert_eq(d->status, GS_ERR_INVALID_PARAM, "status %d: %s", d->status, d->err);
        cr_assert(strstr(d->err, "task 0 (layer ") && strstr(d->err, "graph 7 failed"),
                  "message: %s", d->err);

        /* (3) too few dependencies for the layer */
        gs_buf_init(&lb);
        cr_assert_eq(gs_layer_encode(tg->layers[tg->task_layer[comb]], &lb), GS_OK);
        assign_raw(8, 0, lb.data, lb.len, nd - 1, keys, workers, nbytes);
        gs_buf_cleanup(&lb);
        d = fs_wait_done(&fs, 8, 0, 5000);
        cr_assert_not_null(d);
        cr_assert_eq(d->status, GS_ERR_INVALID_PARAM);
        cr_assert(strstr(d->err, "inputs but the task lists"), "message: %s", d->err);
    }
    /* still serving */
    run_and_check(3, sum, GS_LOWER_DEFAULT, 1);
    free(ref);
    free(refa);
    gs_taskgraph_free(tg);
    gs_taskgraph_free(tga);
    gs_array_release(sum);
    gs_array_release(arr);
    stop_worker(&t);
}

/* Graph of 16x16-chunk STORE tasks (2048 bytes each) without dependencies. */
static gs_taskgraph_t *store_graph(int nchunks)
{
    gs_array_h a;
    gs_taskgraph_t *tg;
    int64_t shape[2] = {16, 16 * nchunks}, chunks[2] = {16, 16};
    cr_assert_eq(gs_array_random_uniform(3, 0, 1, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_graph_lower(a, GS_LOWER_DEFAULT, &tg), GS_OK);
    gs_array_release(a);
    cr_assert_eq(tg->ntasks, (uint64_t)nchunks);
    for (int i = 0; i < nchunks; i++) cr_assert_eq(tg->task_nbytes[i], 2048u);
    return tg;
}

Test(worker_exec, output_larger_than_the_memory_limit_fails_at_once)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_taskgraph_t *tg = store_graph(1);
    uint64_t task = 0, holder = 0;
    const fs_done_t *d;
    p.memory_limit = 1000;
    start_worker(&t, &p);
    fs_assign(&fs, 0, 1, tg, &task, 1, &holder);
    d = fs_wait_done(&fs, 1, 0, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_ERR_NO_MEMORY);
    cr_assert(strstr(d->err, "task 0") && strstr(d->err, "2048 bytes") &&
              strstr(d->err, "memory limit is 1000 bytes"), "message: %s", d->err);
    gs_taskgraph_free(tg);
    stop_worker(&t);
}

static int heartbeat_says_one_queued(void *arg)
{
    return ((fs_peer_t *)arg)->last_hb.queued == 1;
}

Test(worker_exec, task_waits_for_memory_until_a_release)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_taskgraph_t *tg = store_graph(3);
    uint64_t tasks[3] = {0, 1, 2}, holder[3] = {0};
    gs_worker_stats_t st;
    p.memory_limit = 5000;        /* two 2048-byte chunks fit, three do not */
    p.memory_wait_ms = 20000;
    p.no_spill = 1;               /* the memory tier alone (spilling: test_spill.c) */
    start_worker(&t, &p);
    fs_assign(&fs, 0, 1, tg, tasks, 3, holder);
    cr_assert_not_null(fs_wait_done(&fs, 1, 0, 5000));
    cr_assert_not_null(fs_wait_done(&fs, 1, 1, 5000));
    fs_run_for(&fs, 200);
    cr_assert_null(fs_find_done(&fs, 1, 2), "the third task ran over the memory limit");
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.mem_used, 4096u);
    cr_assert_eq(st.tasks_queued, 1u);
    /* the next heartbeat carries the queued task (on a loaded machine it may come late) */
    cr_assert(fs_run_until(&fs, heartbeat_says_one_queued, fs.peers[0], 30000),
              "no heartbeat with the queued task");
    cr_assert_eq(fs.peers[0]->last_hb.queued, 1u, "heartbeat says %u queued",
                 fs.peers[0]->last_hb.queued);
    cr_assert_eq(fs.peers[0]->last_hb.mem_used, 4096u);
    fs_release(&fs, 0, 1, 0);
    {
        const fs_done_t *d = fs_wait_done(&fs, 1, 2, 5000);
        cr_assert_not_null(d, "the task did not run after the release");
        cr_assert_eq(d->status, GS_OK, "%s", d->err);
    }
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.mem_used, 4096u);
    cr_assert_eq(fs.peers[0]->last_hb.mem_limit, 5000u);
    gs_taskgraph_free(tg);
    stop_worker(&t);
}

Test(worker_exec, task_fails_when_nothing_can_free_memory)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_taskgraph_t *tg = store_graph(3);
    uint64_t tasks[3] = {0, 1, 2}, holder[3] = {0};
    const fs_done_t *d;
    p.memory_limit = 5000;
    p.memory_wait_ms = 300;
    p.no_spill = 1;               /* the memory tier alone (spilling: test_spill.c) */
    start_worker(&t, &p);
    fs_assign(&fs, 0, 1, tg, tasks, 3, holder);
    d = fs_wait_done(&fs, 1, 2, 5000);
    cr_assert_not_null(d, "the blocked task never failed");
    cr_assert_eq(d->status, GS_ERR_NO_MEMORY);
    cr_assert(strstr(d->err, "task 2") && strstr(d->err, "5000-byte memory limit") &&
              strstr(d->err, "300 ms"), "message: %s", d->err);
    cr_assert_eq(fs_find_done(&fs, 1, 0)->status, GS_OK);
    cr_assert_eq(fs_find_done(&fs, 1, 1)->status, GS_OK);
    gs_taskgraph_free(tg);
    stop_worker(&t);
}

Test(worker_exec, release_and_cancel_drop_chunks)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_taskgraph_t *tg = store_graph(4);
    int place[4] = {0};
    gs_worker_stats_t st;
    const fs_data_t *d;
    gs_msg_t m;
    start_worker(&t, &p);
    cr_assert_eq(fs_run_graph(&fs, 4, tg, place, 0, 5000), 0);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.chunks, 4u);
    cr_assert_eq(st.mem_used, 4 * 2048u);
    d = fs_gather(&fs, 0, 4, 1, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_OK);
    cr_assert_eq(d->len, 2048u);

    fs_release(&fs, 0, 4, 1);
    d = fs_gather(&fs, 0, 4, 1, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_ERR_NOT_FOUND);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.chunks, 3u);
    cr_assert_eq(st.mem_used, 3 * 2048u);

    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_CANCEL;
    m.u.cancel.graph_id = 4;
    fs_send(&fs, 0, &m);
    d = fs_gather(&fs, 0, 4, 0, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_ERR_NOT_FOUND);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.chunks, 0u);
    cr_assert_eq(st.mem_used, 0u);
    gs_taskgraph_free(tg);
    stop_worker(&t);
}

/* Task ids of a graph are dense in practice (the worker keeps them in pages indexed by the id),
 * but any id works: far-apart ids (hashed by the worker) run, are found and are released. */
Test(worker_exec, far_apart_task_ids_run_and_are_released)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_taskgraph_t *tg = store_graph(4);
    uint64_t ids[4] = {3, 1ull << 40, 70000, UINT64_MAX - 2};
    uint32_t layer_id = 0, task_layer[4] = {0, 0, 0, 0};
    uint64_t task_block[4] = {0, 1, 2, 3}, dep_off[5] = {0};
    gs_bytes_t layer;
    gs_buf_t buf;
    gs_worker_stats_t st;
    gs_msg_t m;

    start_worker(&t, &p);
    gs_buf_init(&buf);
    cr_assert_eq(gs_layer_encode(tg->layers[0], &buf), GS_OK);
    layer.data = buf.data;
    layer.len = buf.len;
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_TASK_ASSIGN;
    m.u.task_assign.graph_id = 9;
    m.u.task_assign.nlayers = 1;
    m.u.task_assign.layer_ids = &layer_id;
    m.u.task_assign.layers = &layer;
    m.u.task_assign.ntasks = 4;
    m.u.task_assign.task_id = ids;
    m.u.task_assign.task_layer = task_layer;
    m.u.task_assign.task_block = task_block;
    m.u.task_assign.dep_off = dep_off;
    fs_send(&fs, 0, &m);
    for (int i = 0; i < 4; i++) {
        const fs_done_t *d = fs_wait_done(&fs, 9, ids[i], 5000);
        const fs_data_t *g;
        cr_assert_not_null(d, "task %llu did not complete", (unsigned long long)ids[i]);
        cr_assert_eq(d->status, GS_OK, "task %llu: %s", (unsigned long long)ids[i], d->err);
        g = fs_gather(&fs, 0, 9, ids[i], 5000);
        cr_assert_not_null(g);
        cr_assert_eq(g->status, GS_OK);
        cr_assert_eq(g->len, 2048u);
    }
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.chunks, 4u);
    fs_release(&fs, 0, 9, 1ull << 40);
    cr_assert_eq(fs_gather(&fs, 0, 9, 1ull << 40, 5000)->status, GS_ERR_NOT_FOUND);
    cr_assert_eq(fs_gather(&fs, 0, 9, UINT64_MAX - 2, 5000)->status, GS_OK);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.chunks, 3u);
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_CANCEL;
    m.u.cancel.graph_id = 9;
    fs_send(&fs, 0, &m);
    cr_assert_eq(fs_gather(&fs, 0, 9, 3, 5000)->status, GS_ERR_NOT_FOUND);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.chunks, 0u);
    cr_assert_eq(st.mem_used, 0u);
    gs_buf_cleanup(&buf);
    gs_taskgraph_free(tg);
    stop_worker(&t);
}

static int worker_idle_and_empty(void *arg)
{
    gs_worker_stats_t st;
    gs_worker_stats((gs_worker_h)arg, &st);
    return st.tasks_queued == 0 && st.tasks_running == 0 && st.chunks == 0 && st.mem_used == 0;
}

Test(worker_exec, cancel_drops_queued_tasks)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_taskgraph_t *tg = store_graph(64);
    uint64_t tasks[64], holder[64] = {0};
    gs_worker_stats_t st;
    gs_msg_t m;
    size_t before;
    for (int i = 0; i < 64; i++) tasks[i] = (uint64_t)i;
    p.nthreads = 1;
    p.memory_limit = 3 * 2048;     /* at most three run; the rest queue */
    p.memory_wait_ms = 20000;
    start_worker(&t, &p);
    fs_assign(&fs, 0, 9, tg, tasks, 64, holder);
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_CANCEL;
    m.u.cancel.graph_id = 9;
    fs_send(&fs, 0, &m);
    /* the cancel lands, the running task (if any) finishes and its chunk goes */
    cr_assert(fs_run_until(&fs, worker_idle_and_empty, t.w, 30000), "the canceled graph left work or chunks");
    before = fs.ndone;
    cr_assert_leq(before, 3, "%zu tasks completed although memory held 3", before);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.tasks_queued, 0u);
    cr_assert_eq(st.tasks_running, 0u);
    cr_assert_eq(st.chunks, 0u);
    cr_assert_eq(st.mem_used, 0u);
    gs_taskgraph_free(tg);
    stop_worker(&t);
}

Test(worker_exec, stops_on_shutdown_from_the_scheduler)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_msg_t m;
    start_worker(&t, &p);
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_SHUTDOWN;
    fs_send(&fs, 0, &m);
    cr_assert(tw_wait_stopped(&t, &fs, 5000), "no stop after SHUTDOWN");
    cr_assert_eq(t.reason, GS_OK);
    tw_destroy(&t);
}

Test(worker_exec, stops_with_scheduler_lost_when_the_connection_drops)
{
    gs_worker_params_t p = {0};
    tw_t t;
    start_worker(&t, &p);
    gs_conn_close(fs.peers[0]->conn, GS_ERR_CANCELED);
    cr_assert(tw_wait_stopped(&t, &fs, 5000), "no stop after losing the scheduler");
    cr_assert_eq(t.reason, GS_ERR_SCHEDULER_LOST);
    tw_destroy(&t);
}

Test(worker_exec, stops_when_the_token_is_refused)
{
    gs_worker_params_t p = {0};
    tw_t t;
    fs.token = "secret";
    p.token = "wrong";
    tw_start(&t, &fs, &p);
    cr_assert(tw_wait_stopped(&t, &fs, 5000), "no stop after the refusal");
    cr_assert_eq(t.reason, GS_ERR_AUTH);
    tw_destroy(&t);
}

Test(worker_exec, gives_up_on_an_unreachable_scheduler)
{
    gs_worker_params_t p = {0};
    tw_t t;
    fake_sched_t other;
    char addr[64];
    uint64_t t0;
    /* a port that was just free: listen on it, note it, close it */
    fs_start(&other, &loop, NULL);
    fs_addr(&other, addr, sizeof(addr));
    fs_stop(&other);
    memset(&t, 0, sizeof(t));
    p.scheduler = addr;
    p.connect_timeout_ms = 300;
    t0 = uv_hrtime();
    tw_start_raw(&t, &loop, &p);
    cr_assert(tw_wait_stopped(&t, &fs, 5000), "still trying after the connect timeout");
    cr_assert_eq(t.reason, GS_ERR_CONN_REFUSED, "reason %s", gs_status_name(t.reason));
    cr_assert_geq(uv_hrtime() - t0, 250000000ull, "gave up before the connect timeout");
    tw_destroy(&t);
}

Test(worker_exec, runs_thousands_of_tiny_tasks)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_array_h a;
    gs_taskgraph_t *tg;
    int64_t shape[2] = {1, 3000}, chunks[2] = {1, 1};
    int *place;
    double *got, *ref;
    size_t size;
    uint64_t t0, ns;
    gs_worker_stats_t st;
    cr_assert_eq(gs_array_random_uniform(1, 0, 1, 2, shape, chunks, &a), GS_OK);
    tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    cr_assert_eq(tg->ntasks, 3000u);
    place = calloc(tg->ntasks, sizeof(int));
    p.nthreads = 2;
    start_worker(&t, &p);
    /* twice: the second run reuses task structs the first returned (more than one slab) */
    for (uint64_t gid = 1; gid <= 2; gid++) {
        size_t msgs0 = fs.ndone_msgs;
        t0 = uv_hrtime();
        cr_assert_eq(fs_run_graph(&fs, gid, tg, place, 0, 30000), 0);
        ns = uv_hrtime() - t0;
        cr_log_info("graph %llu: %llu tasks in %.1f ms (%.2f us per task, fake scheduler "
                    "included)", (unsigned long long)gid, (unsigned long long)tg->ntasks,
                    ns * 1e-6, ns * 1e-3 / (double)tg->ntasks);
        cr_log_info("graph %llu: %zu TASK_DONE messages", (unsigned long long)gid,
                    fs.ndone_msgs - msgs0);
    }
    got = calloc(size, sizeof(double));
    cr_assert(fs_gather_all(&fs, 2, tg, place, got, 10000));
    fs_assert_close(got, ref, size);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.tasks_done, 6000u);
    cr_assert_eq(st.chunks, 6000u);
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(a);
    stop_worker(&t);
}

Test(worker_exec, smaller_tasks_run_past_a_head_that_waits_for_memory)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_taskgraph_t *big = store_graph(3), *small;
    gs_array_h a;
    int64_t shape[1] = {1}, chunks[1] = {1};
    uint64_t tasks[3] = {0, 1, 2}, holder[3] = {0}, zero = 0;
    const fs_done_t *d;
    cr_assert_eq(gs_array_random_uniform(4, 0, 1, 1, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_graph_lower(a, GS_LOWER_DEFAULT, &small), GS_OK);
    cr_assert_eq(small->task_nbytes[0], 8u);
    p.memory_limit = 5000;
    p.memory_wait_ms = 20000;
    p.no_spill = 1;               /* the memory tier alone (spilling: test_spill.c) */
    start_worker(&t, &p);
    fs_assign(&fs, 0, 1, big, tasks, 3, holder);          /* two fit, the third waits */
    cr_assert_not_null(fs_wait_done(&fs, 1, 0, 5000));
    cr_assert_not_null(fs_wait_done(&fs, 1, 1, 5000));
    fs_assign(&fs, 0, 2, small, &zero, 1, holder);        /* queued behind the third */
    d = fs_wait_done(&fs, 2, 0, 5000);
    cr_assert_not_null(d, "the small task waited behind the blocked one");
    cr_assert_eq(d->status, GS_OK);
    cr_assert_null(fs_find_done(&fs, 1, 2));
    fs_release(&fs, 0, 1, 1);
    d = fs_wait_done(&fs, 1, 2, 5000);
    cr_assert_not_null(d, "the blocked task never ran after the release");
    cr_assert_eq(d->status, GS_OK, "%s", d->err);
    gs_taskgraph_free(big);
    gs_taskgraph_free(small);
    gs_array_release(a);
    stop_worker(&t);
}

Test(worker_exec, generators_leave_room_for_the_tasks_that_consume_their_chunks)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_array_h a, b, c;
    int64_t shape[2] = {16, 16 * 8}, chunks[2] = {16, 16};   /* 8 chunks of 2048 bytes */
    gs_reduce_params_t rp = {GS_REDUCE_FIELD_SPLIT_EVERY, 0, 8, 0};
    double *ref, got;
    size_t size, failed;
    gs_taskgraph_t *tg;
    int place[64] = {0};
    cr_assert_eq(gs_array_random_uniform(6, 0, 1, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_binary_scalar(GS_BINARY_ADD, a, 1.0, &b), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, b, &rp, &c), GS_OK);
    /* unfused: generator (2048 B) -> +1 (2048 B) -> partial sum (8 B) -> combine */
    tg = tw_lower(c, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE, &ref, &size);
    cr_assert_leq(tg->ntasks, 64u);
    /* room for 4 chunks and the partials: the first wave assigns all 8 generators ahead of
     * any consumer; admitted in order they would fill the memory with chunks whose +1
     * consumers then never fit. The reserve keeps chains moving. */
    p.nthreads = 1;
    p.memory_limit = 4 * 2048 + 256;
    p.memory_wait_ms = 3000;
    start_worker(&t, &p);
    failed = fs_run_graph(&fs, 1, tg, place, 1, 20000);
    cr_assert_eq(failed, 0, "%s", failed == (size_t)-1 ? "timed out" : fs.done[failed - 1].err);
    cr_assert(fs_gather_all(&fs, 1, tg, place, &got, 5000));
    fs_assert_close(&got, ref, 1);
    free(ref);
    gs_taskgraph_free(tg);
    gs_array_release(a);
    gs_array_release(b);
    gs_array_release(c);
    stop_worker(&t);
}

/* 1 when every thread of this process but the calling one is asleep (state S), read from
 * /proc/self/task: the kernel threads sleep only once their queue is empty. */
static int other_threads_asleep(void)
{
    char path[320], stat[512];
    long self = syscall(SYS_gettid);
    int asleep = 1;
    struct dirent *e;
    DIR *d = opendir("/proc/self/task");
    if (d == NULL) return 0;
    while (asleep && (e = readdir(d)) != NULL) {
        FILE *f;
        char *state;
        if (e->d_name[0] == '.' || atol(e->d_name) == self) continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        if ((f = fopen(path, "r")) == NULL) continue;   /* the thread exited */
        if (fgets(stat, sizeof(stat), f) != NULL && (state = strrchr(stat, ')')) != NULL)
            asleep = state[1] == ' ' && state[2] == 'S';
        fclose(f);
    }
    closedir(d);
    return asleep;
}

/* Without running the loop: wait (up to @a timeout_ms) until the other threads have been seen
 * asleep twice in a row, 10 ms apart (one look could catch a kernel thread on a lock). */
static int wait_other_threads_asleep(int timeout_ms)
{
    uint64_t end = uv_hrtime() + (uint64_t)timeout_ms * 1000000ull;
    int seen = 0;
    while (seen < 2 && uv_hrtime() < end) {
        seen = other_threads_asleep() ? seen + 1 : 0;
        usleep(10000);
    }
    return seen == 2;
}

static int eight_running(void *arg)
{
    gs_worker_stats_t st;
    gs_worker_stats((gs_worker_h)arg, &st);
    return st.tasks_running == 8;
}

static int eight_done(void *arg)
{
    (void)arg;
    return fs.ndone >= 8;
}

Test(worker_exec, completions_of_one_loop_iteration_travel_in_one_message)
{
    gs_worker_params_t p = {0};
    tw_t t;
    gs_taskgraph_t *tg = store_graph(8);
    uint64_t tasks[8], holder[8] = {0};
    size_t msgs0;
    for (int i = 0; i < 8; i++) tasks[i] = (uint64_t)i;
    p.nthreads = 2;                      /* 8 tasks in the kernel threads' hands at once */
    start_worker(&t, &p);
    fs_assign(&fs, 0, 1, tg, tasks, 8, holder);
    cr_assert(fs_run_until(&fs, eight_running, t.w, 5000), "the 8 tasks were not dispatched");
    msgs0 = fs.ndone_msgs;
    /* the loop sleeps; the kernels finish meanwhile */
    cr_assert(wait_other_threads_asleep(30000), "the kernel threads are still busy after 30 s");
    cr_assert(fs_run_until(&fs, eight_done, NULL, 5000));
    cr_assert_eq(fs.ndone_msgs - msgs0, 1, "%zu TASK_DONE messages for 8 completions",
                 fs.ndone_msgs - msgs0);
    gs_taskgraph_free(tg);
    stop_worker(&t);
}

/* Device loss (worker.h): with test_lose_device_on the crash of gs_test_crash loses the cpu
 * backend's context as an illegal address loses a GPU's. The worker reports exactly one failed
 * task (GS_ERR_DEVICE_LOST, naming the kernel and the cause), then ERROR to the scheduler, and
 * stops with GS_ERR_DEVICE_LOST; the other tasks of the wave are not reported. */
Test(worker_exec, a_lost_device_fails_one_task_tells_the_scheduler_and_stops)
{
    gs_worker_params_t p = {0};
    const int64_t shape[2] = {40, 30}, chunks[2] = {10, 10};
    gs_user_kernel_t bad = {GS_TEST_KERNELS, "gs_test_crash", NULL, 0, NULL, 0};
    gs_array_h x, m;
    gs_taskgraph_t *tg = NULL;
    int *place;
    size_t failed, nfailed = 0;
    tw_t t;
    p.nthreads = 2;
    p.test_lose_device_on = "gs_test_crash";
    start_worker(&t, &p);
    cr_assert_eq(gs_array_ones(2, shape, chunks, &x), GS_OK);
    cr_assert_eq(gs_array_map_blocks(&bad, 1, &x, 2, shape, chunks, &m), GS_OK);
    cr_assert_eq(gs_graph_lower(m, GS_LOWER_DEFAULT, &tg), GS_OK, "%s", gs_last_error());
    place = calloc(tg->ntasks, sizeof(int));
    failed = fs_run_graph(&fs, 1, tg, place, 0, 20000);
    cr_assert(failed > 0 && failed != (size_t)-1, "no failure reported");
    cr_assert_eq(fs.done[failed - 1].status, GS_ERR_DEVICE_LOST);
    cr_assert(strstr(fs.done[failed - 1].err, "kernel gs_test_crash lost the device: device lost "
                                              "(test_lose_device_on gs_test_crash)") != NULL,
              "%s", fs.done[failed - 1].err);
    cr_assert(tw_wait_stopped(&t, &fs, 5000), "the worker did not stop");
    cr_assert_eq(t.reason, GS_ERR_DEVICE_LOST, "%s", gs_status_name(t.reason));
    cr_assert_eq(fs.peers[0]->nerrors, 1);
    cr_assert_eq(fs.peers[0]->error_status, GS_ERR_DEVICE_LOST);
    cr_assert(strstr(fs.peers[0]->error_msg, "kernel gs_test_crash lost the device") != NULL,
              "%s", fs.peers[0]->error_msg);
    for (size_t i = 0; i < fs.ndone; i++) nfailed += fs.done[i].status != GS_OK;
    cr_assert_eq(nfailed, 1, "%zu failures reported", nfailed);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(m);
    gs_array_release(x);
    tw_destroy(&t);
}
