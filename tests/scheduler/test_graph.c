/* Graphs through the scheduler: validation, assignment, dependencies, placement, release,
 * progress, completion, gathers, cancel, persisted externals, several clients. */
#include "harness.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static void expect_done(tp_t *c, uint64_t gid, gs_status_t status, gs_msg_t *out)
{
    gs_msg_t m;
    tp_expect(c, GS_MSG_GRAPH_DONE, &m);
    cr_assert_eq(m.u.graph_done.graph_id, gid);
    cr_assert_eq(m.u.graph_done.status, status, "graph %llu status %d: %s", (unsigned long long)gid,
                 m.u.graph_done.status, m.u.graph_done.message.len ? (const char *)m.u.graph_done.message.data : "");
    if (out) *out = m;
    else gs_msg_cleanup(&m);
}

static int has_key(const uint64_t *keys, uint64_t n, uint64_t g, uint64_t t)
{
    for (uint64_t i = 0; i < n; i++) {
        if (keys[2 * i] == g && keys[2 * i + 1] == t) return 1;
    }
    return 0;
}

static void send_gather(tp_t *c, uint64_t req, uint64_t g, uint64_t t)
{
    gs_msg_t m;
    uint64_t keys[2] = {g, t};
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_GATHER_REQ;
    m.u.gather_req.req_id = req;
    m.u.gather_req.n = 1;
    m.u.gather_req.keys = keys;
    tp_send(c, &m);
}

static void send_graph_msg(tp_t *c, uint32_t type, uint64_t g)
{
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.u.cancel.graph_id = g;
    tp_send(c, &m);
}

/* Worker answers a relayed gather with @a payload. */
static void answer_gather(tp_t *w, uint64_t g, uint64_t t, const char *payload)
{
    gs_msg_t m, d;
    tp_expect(w, GS_MSG_GATHER_REQ, &m);
    cr_assert_eq(m.u.gather_req.n, 1);
    cr_assert_eq(m.u.gather_req.keys[0], g);
    cr_assert_eq(m.u.gather_req.keys[1], t);
    memset(&d, 0, sizeof d);
    d.type = GS_MSG_DATA;
    d.u.data.req_id = m.u.gather_req.req_id;
    d.u.data.graph_id = g;
    d.u.data.task_id = t;
    d.u.data.status = GS_OK;
    d.u.data.data.data = (const uint8_t *)payload;
    d.u.data.data.len = strlen(payload);
    gs_msg_cleanup(&m);
    tp_send(w, &d);
}

Test(scheduler_graph, registers_workers_and_broadcasts_peers)
{
    th_t th;
    gs_msg_t m;
    th_init(&th, NULL);
    tp_t *w1 = tp_worker(&th, "w1", 1);
    tp_t *w2 = tp_connect(&th, GS_PROTO_VERSION, "", GS_ROLE_WORKER, "w2");
    tp_expect(w2, GS_MSG_WELCOME, &m);
    w2->id = m.u.welcome.id;
    gs_msg_cleanup(&m);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_WORKER_REGISTER;
    m.u.worker_register.name.data = (const uint8_t *)"w2";
    m.u.worker_register.name.len = 2;
    m.u.worker_register.ucx_address.data = (const uint8_t *)"UCX2";
    m.u.worker_register.ucx_address.len = 4;
    m.u.worker_register.nthreads = 3;
    tp_send(w2, &m);
    /* the newcomer learns both (itself included) */
    tp_expect(w2, GS_MSG_PEERS, &m);
    cr_assert_eq(m.u.peers.nadded, 2);
    cr_assert_eq(m.u.peers.nremoved, 0);
    int seen1 = 0, seen2 = 0;
    for (uint32_t i = 0; i < 2; i++) {
        if (m.u.peers.added[i].id == w1->id) {
            seen1 = 1;
            cr_assert_eq(m.u.peers.added[i].ucx_address.len, 4);
            cr_assert_eq(memcmp(m.u.peers.added[i].ucx_address.data, "\1\2\3\4", 4), 0);
        }
        if (m.u.peers.added[i].id == w2->id) {
            seen2 = 1;
            cr_assert_eq(memcmp(m.u.peers.added[i].ucx_address.data, "UCX2", 4), 0);
            cr_assert_str_eq((const char *)m.u.peers.added[i].name.data, "w2");
        }
    }
    cr_assert(seen1 && seen2);
    gs_msg_cleanup(&m);
    /* the old one learns the newcomer */
    tp_expect(w1, GS_MSG_PEERS, &m);
    cr_assert_eq(m.u.peers.nadded, 1);
    cr_assert_eq(m.u.peers.added[0].id, w2->id);
    gs_msg_cleanup(&m);
    cr_assert_eq(th_stats(&th).nworkers, 2);
    /* a departure is announced */
    tp_close(w2);
    tp_expect(w1, GS_MSG_PEERS, &m);
    cr_assert_eq(m.u.peers.nadded, 0);
    cr_assert_eq(m.u.peers.nremoved, 1);
    cr_assert_eq(m.u.peers.removed[0], w2->id);
    gs_msg_cleanup(&m);
    cr_assert_eq(th_stats(&th).nworkers, 1);
    th_fini(&th);
}

Test(scheduler_graph, runs_a_graph_releases_intermediates_and_relays_gathers)
{
    th_t th;
    tg_t g;
    gs_msg_t m;
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 2);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 2);
    uint64_t a = tg_task(&g, 0, 0, NULL);
    uint64_t b = tg_task(&g, 0, 0, NULL);
    uint64_t deps[2] = {a, b};
    uint64_t s = tg_task(&g, 1, 2, deps);
    tg_output(&g, s);
    uint64_t gid = tg_submit_ok(c, &g, 0);

    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    cr_assert_eq(m.u.task_assign.graph_id, gid);
    cr_assert_eq(m.u.task_assign.ntasks, 2);
    cr_assert_eq(m.u.task_assign.task_id[0], a, "lowest id first");
    cr_assert_eq(m.u.task_assign.task_id[1], b);
    cr_assert_eq(m.u.task_assign.task_block[1], 10);
    cr_assert_eq(m.u.task_assign.nlayers, 1);
    cr_assert_eq(m.u.task_assign.layer_ids[0], 0);
    cr_assert_eq(m.u.task_assign.layers[0].len, 7);
    cr_assert_eq(memcmp(m.u.task_assign.layers[0].data, "layer-0", 7), 0);
    cr_assert_eq(m.u.task_assign.dep_off[2], 0);
    gs_msg_cleanup(&m);
    cr_assert(tp_none(w, GS_MSG_TASK_ASSIGN, 20), "the sum must wait for its inputs");

    tw_done(w, gid, deps, 2, GS_OK, 800, NULL);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    cr_assert_eq(m.u.task_assign.ntasks, 1);
    cr_assert_eq(m.u.task_assign.task_id[0], s);
    cr_assert_eq(m.u.task_assign.task_layer[0], 1);
    cr_assert_eq(m.u.task_assign.nlayers, 1);
    cr_assert_eq(m.u.task_assign.layer_ids[0], 1);
    cr_assert_eq(m.u.task_assign.dep_off[1], 2);
    cr_assert_eq(m.u.task_assign.dep_keys[0], gid);
    cr_assert_eq(m.u.task_assign.dep_keys[1], a);
    cr_assert_eq(m.u.task_assign.dep_keys[3], b);
    cr_assert_eq(m.u.task_assign.dep_worker[0], w->id, "own id = already local");
    cr_assert_eq(m.u.task_assign.dep_nbytes[1], 800);
    gs_msg_cleanup(&m);
    cr_assert(tp_none(w, GS_MSG_RELEASE, 20), "inputs released before their consumer finished");

    tw_done1(w, gid, s);
    tp_expect(w, GS_MSG_RELEASE, &m);
    cr_assert_eq(m.u.release.n, 2);
    cr_assert(has_key(m.u.release.keys, 2, gid, a));
    cr_assert(has_key(m.u.release.keys, 2, gid, b));
    gs_msg_cleanup(&m);

    tp_expect(c, GS_MSG_PROGRESS, &m);
    while (m.u.progress.done < 3) {
        gs_msg_cleanup(&m);
        tp_expect(c, GS_MSG_PROGRESS, &m);
    }
    cr_assert_eq(m.u.progress.total, 3);
    cr_assert_eq(m.u.progress.graph_id, gid);
    gs_msg_cleanup(&m);
    expect_done(c, gid, GS_OK, &m);
    cr_assert_eq(m.u.graph_done.ntasks, 3);
    cr_assert_eq(m.u.graph_done.run_ns_total, 1000 + 1001 + 1000);
    cr_assert_gt(m.u.graph_done.wall_ns, 0);
    gs_msg_cleanup(&m);

    /* gathers: an output is relayed from its worker; anything else is not found */
    send_gather(c, 77, gid, s);
    answer_gather(w, gid, s, "8 bytes!");
    tp_expect(c, GS_MSG_DATA, &m);
    cr_assert_eq(m.u.data.req_id, 77);
    cr_assert_eq(m.u.data.graph_id, gid);
    cr_assert_eq(m.u.data.task_id, s);
    cr_assert_eq(m.u.data.status, GS_OK);
    cr_assert_eq(m.u.data.data.len, 8);
    cr_assert_eq(memcmp(m.u.data.data.data, "8 bytes!", 8), 0);
    gs_msg_cleanup(&m);
    send_gather(c, 78, gid, a);
    tp_expect(c, GS_MSG_DATA, &m);
    cr_assert_eq(m.u.data.req_id, 78);
    cr_assert_eq(m.u.data.status, GS_ERR_NOT_FOUND);
    gs_msg_cleanup(&m);
    send_gather(c, 79, gid + 100, 0);
    tp_expect(c, GS_MSG_DATA, &m);
    cr_assert_eq(m.u.data.status, GS_ERR_NOT_FOUND);
    gs_msg_cleanup(&m);

    /* the output stays until RELEASE_GRAPH */
    cr_assert(tp_none(w, GS_MSG_RELEASE, 20));
    send_graph_msg(c, GS_MSG_RELEASE_GRAPH, gid);
    tp_expect(w, GS_MSG_CANCEL, &m);   /* the worker forgets the graph's layers */
    cr_assert_eq(m.u.cancel.graph_id, gid);
    gs_msg_cleanup(&m);
    tp_expect(w, GS_MSG_RELEASE, &m);
    cr_assert_eq(m.u.release.n, 1);
    cr_assert(has_key(m.u.release.keys, 1, gid, s));
    gs_msg_cleanup(&m);
    th_run_for(&th, 10);
    cr_assert_eq(th_stats(&th).ngraphs, 0);
    cr_assert_eq(th_stats(&th).tasks_done_total, 3);
    th_fini(&th);
}

Test(scheduler_graph, respects_dependencies_along_a_chain)
{
    th_t th;
    tg_t g;
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 4);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 1);
    uint64_t prev = tg_task(&g, 0, 0, NULL);
    for (int i = 1; i < 6; i++) prev = tg_task(&g, 0, 1, &prev);
    tg_output(&g, prev);
    uint64_t gid = tg_submit_ok(c, &g, 0);
    for (uint64_t t = 0; t < 6; t++) {
        gs_msg_t m;
        tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
        cr_assert_eq(m.u.task_assign.ntasks, 1);
        cr_assert_eq(m.u.task_assign.task_id[0], t);
        cr_assert_eq(m.u.task_assign.nlayers, t == 0 ? 1u : 0u, "layer sent once per worker per graph");
        gs_msg_cleanup(&m);
        cr_assert(tp_none(w, GS_MSG_TASK_ASSIGN, 5));
        tw_done1(w, gid, t);
        if (t >= 1) {
            tp_expect(w, GS_MSG_RELEASE, &m);
            cr_assert_eq(m.u.release.n, 1);
            cr_assert(has_key(m.u.release.keys, 1, gid, t - 1));
            gs_msg_cleanup(&m);
        }
    }
    expect_done(c, gid, GS_OK, NULL);
    th_fini(&th);
}

Test(scheduler_graph, culls_tasks_no_output_needs)
{
    th_t th;
    tg_t g;
    gs_msg_t m;
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 4);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 1);
    tg_task(&g, 0, 0, NULL);
    uint64_t b = tg_task(&g, 0, 0, NULL);
    tg_output(&g, b);
    uint64_t gid = tg_submit_ok(c, &g, 0);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    cr_assert_eq(m.u.task_assign.ntasks, 1);
    cr_assert_eq(m.u.task_assign.task_id[0], b);
    gs_msg_cleanup(&m);
    tw_done1(w, gid, b);
    tp_expect(c, GS_MSG_PROGRESS, &m);
    cr_assert_eq(m.u.progress.total, 1);
    gs_msg_cleanup(&m);
    expect_done(c, gid, GS_OK, NULL);
    th_fini(&th);
}

Test(scheduler_graph, completes_an_empty_graph_at_once)
{
    th_t th;
    tg_t g;
    th_init(&th, NULL);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 0);
    uint64_t gid = tg_submit_ok(c, &g, 0);
    expect_done(c, gid, GS_OK, NULL);
    th_fini(&th);
}

Test(scheduler_graph, prefers_the_worker_holding_most_input_bytes)
{
    th_t th;
    tg_t g;
    gs_msg_t m;
    uint64_t got1[8], got2[8];
    th_init(&th, NULL);
    tp_t *w1 = tp_worker(&th, "w1", 1);
    tp_t *w2 = tp_worker(&th, "w2", 1);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 2);
    uint64_t a = tg_task(&g, 0, 0, NULL);
    uint64_t b = tg_task(&g, 0, 0, NULL);
    uint64_t deps[2] = {a, b};
    uint64_t s = tg_task(&g, 1, 2, deps);
    tg_output(&g, s);
    uint64_t gid = tg_submit_ok(c, &g, 0);
    /* least loaded first: one input on each worker */
    cr_assert_eq(tw_collect(w1, gid, 1, got1, 8, 2000), 1);
    cr_assert_eq(tw_collect(w2, gid, 1, got2, 8, 2000), 1);
    cr_assert_neq(got1[0], got2[0]);
    /* the input on w2 is large: the sum must go to w2 (ties would pick w1) */
    tw_done(w1, gid, got1, 1, GS_OK, 100, NULL);
    tw_done(w2, gid, got2, 1, GS_OK, 1000000, NULL);
    tp_expect(w2, GS_MSG_TASK_ASSIGN, &m);
    cr_assert_eq(m.u.task_assign.task_id[0], s);
    for (int j = 0; j < 2; j++) {
        uint64_t key = m.u.task_assign.dep_keys[2 * j + 1];
        cr_assert_eq(m.u.task_assign.dep_worker[j], key == got2[0] ? w2->id : w1->id);
    }
    gs_msg_cleanup(&m);
    cr_assert(tp_none(w1, GS_MSG_TASK_ASSIGN, 20));
    tw_done1(w2, gid, s);
    expect_done(c, gid, GS_OK, NULL);
    th_fini(&th);
}

Test(scheduler_graph, bounds_each_worker_queue_so_new_workers_get_work)
{
    th_t th;
    tg_t g;
    uint64_t got[64];
    th_init(&th, NULL);
    tp_t *w1 = tp_worker(&th, "w1", 1);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 1);
    for (int i = 0; i < 40; i++) tg_output(&g, tg_task(&g, 0, 0, NULL));
    uint64_t gid = tg_submit_ok(c, &g, 0);
    int n1 = tw_collect(w1, gid, 40, got, 64, 100);
    cr_assert_gt(n1, 0);
    cr_assert_leq(n1, 16, "an unbounded queue: %d tasks on a 1-thread worker", n1);
    tp_t *w2 = tp_worker(&th, "w2", 1);
    uint64_t got2[64];
    int n2 = tw_collect(w2, gid, 40, got2, 64, 100);
    cr_assert_gt(n2, 0, "the new worker got nothing");
    /* finish everything, whoever gets it */
    int done = 0;
    tw_done(w1, gid, got, n1, GS_OK, 8, NULL);
    tw_done(w2, gid, got2, n2, GS_OK, 8, NULL);
    done = n1 + n2;
    while (done < 40) {
        int k1 = tw_collect(w1, gid, 1, got, 64, 20);
        if (k1) tw_done(w1, gid, got, k1, GS_OK, 8, NULL);
        int k2 = tw_collect(w2, gid, 1, got2, 64, 20);
        if (k2) tw_done(w2, gid, got2, k2, GS_OK, 8, NULL);
        done += k1 + k2;
        cr_assert_leq(done, 40, "a task was assigned twice");
    }
    expect_done(c, gid, GS_OK, NULL);
    th_fini(&th);
}

Test(scheduler_graph, graph_check_rejects_malformed_tables)
{
    uint32_t layer[3] = {0, 0, 0};
    uint64_t block[3] = {0, 1, 2}, nbytes[3] = {8, 8, 8};
    uint64_t dep_off[4] = {0, 0, 1, 2};
    uint64_t deps[2] = {0, 1};
    uint64_t outputs[1] = {2};
    uint64_t ext[2] = {1, 0};
    gs_bytes_t layers[1] = {{(const uint8_t *)"L", 1}};
    gs_msg_graph_submit_t m;
    memset(&m, 0, sizeof m);
    m.nlayers = 1;
    m.layers = layers;
    m.ntasks = 3;
    m.task_layer = layer;
    m.task_block = block;
    m.dep_off = dep_off;
    m.deps = deps;
    m.task_nbytes = nbytes;
    m.noutputs = 1;
    m.outputs = outputs;
    cr_assert_eq(gs_sched_graph_check(&m), GS_OK, "%s", gs_last_error());

    deps[1] = 2;   /* task 2 depends on itself */
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "itself"), "%s", gs_last_error());
    deps[0] = 2;   /* task 1 depends on later task 2 */
    deps[1] = 1;
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "later task"), "%s", gs_last_error());
    deps[0] = 3;   /* external 0 of none */
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "out of range"), "%s", gs_last_error());
    m.nexternals = 1;
    m.externals = ext;
    cr_assert_eq(gs_sched_graph_check(&m), GS_OK, "%s", gs_last_error());
    deps[0] = 4;
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    deps[0] = 0;
    layer[1] = 1;
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "layer 1 of 1"), "%s", gs_last_error());
    layer[1] = 0;
    outputs[0] = 3;
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "output 0"), "%s", gs_last_error());
    outputs[0] = 2;
    nbytes[1] = GS_SCHED_MAX_TASK_NBYTES + 1;
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "declares an output"), "%s", gs_last_error());
    nbytes[1] = 8;
    dep_off[1] = 2;   /* offsets decrease */
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    dep_off[1] = 0;
    dep_off[0] = 1;
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    dep_off[0] = 0;
    m.flags = 0x80;
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "flags"), "%s", gs_last_error());
    m.flags = 0;
    m.ntasks = GS_SCHED_MAX_TASKS + 1;
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    m.ntasks = 3;
    m.task_layer = NULL;
    cr_assert_eq(gs_sched_graph_check(&m), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_sched_graph_check(NULL), GS_ERR_INVALID_PARAM);
}

static void expect_rejected(tp_t *c, const tg_t *g, uint32_t flags, uint64_t ref, const char *phrase)
{
    gs_msg_t m;
    char want[64];
    tg_submit(c, g, flags, ref);
    tp_expect(c, GS_MSG_ERROR, &m);
    cr_assert_eq(m.u.error.status, GS_ERR_INVALID_PARAM);
    snprintf(want, sizeof want, "client ref %llu", (unsigned long long)ref);
    cr_assert(strstr((const char *)m.u.error.message.data, want), "%s", (const char *)m.u.error.message.data);
    cr_assert(strstr((const char *)m.u.error.message.data, phrase), "'%s' lacks '%s'",
              (const char *)m.u.error.message.data, phrase);
    gs_msg_cleanup(&m);
    cr_assert(tp_none(c, GS_MSG_GRAPH_ACCEPTED, 0));
}

Test(scheduler_graph, rejects_invalid_graphs_without_affecting_others)
{
    th_t th;
    tg_t g, bad;
    gs_msg_t m;
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 1);
    tp_t *c = tp_client(&th, "c");
    tp_t *other = tp_client(&th, "other");
    /* a good graph, running */
    tg_init(&g, 1);
    uint64_t a = tg_task(&g, 0, 0, NULL);
    uint64_t b = tg_task(&g, 0, 1, &a);
    tg_output(&g, b);
    uint64_t gid = tg_submit_ok(c, &g, 0);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    gs_msg_cleanup(&m);
    /* a non-persisted graph and another client's persisted one, for bad externals */
    tg_t p;
    tg_init(&p, 1);
    tg_output(&p, tg_task(&p, 0, 0, NULL));
    uint64_t other_gid = tg_submit_ok(other, &p, GS_SUBMIT_PERSIST);

    uint64_t one = 1, zero = 0;
    tg_init(&bad, 1);                          /* forward dependency */
    tg_task(&bad, 0, 1, &one);
    tg_output(&bad, tg_task(&bad, 0, 0, NULL));
    expect_rejected(c, &bad, 0, 1, "later task");
    tg_init(&bad, 1);                          /* self dependency: a cycle */
    tg_output(&bad, tg_task(&bad, 0, 1, &zero));
    expect_rejected(c, &bad, 0, 2, "itself");
    tg_init(&bad, 1);                          /* dependency out of range */
    uint64_t far = 7;
    tg_output(&bad, tg_task(&bad, 0, 1, &far));
    expect_rejected(c, &bad, 0, 3, "out of range");
    tg_init(&bad, 1);                          /* unknown external graph */
    uint64_t e = tg_ext(&bad, 999, 0);
    tg_output(&bad, tg_task(&bad, 0, 1, &e));
    expect_rejected(c, &bad, 0, 4, "no such graph");
    tg_init(&bad, 1);                          /* external of a graph not persisted */
    e = tg_ext(&bad, gid, b);
    tg_output(&bad, tg_task(&bad, 0, 1, &e));
    expect_rejected(c, &bad, 0, 5, "not persisted");
    tg_init(&bad, 1);                          /* another client's graph */
    e = tg_ext(&bad, other_gid, 0);
    tg_output(&bad, tg_task(&bad, 0, 1, &e));
    expect_rejected(c, &bad, 0, 6, "no such graph");
    tg_init(&bad, 1);                          /* unknown flags */
    tg_output(&bad, tg_task(&bad, 0, 0, NULL));
    expect_rejected(c, &bad, 0x40, 7, "flags");
    tg_init(&bad, 1);                          /* implausible size */
    tg_output(&bad, tg_task(&bad, 0, 0, NULL));
    bad.nbytes[0] = 1ull << 62;
    expect_rejected(c, &bad, 0, 8, "bytes");
    tg_init(&bad, 1);                          /* output out of range */
    tg_task(&bad, 0, 0, NULL);
    tg_output(&bad, 5);
    expect_rejected(c, &bad, 0, 9, "output 0");

    /* the good graph is unaffected */
    uint64_t got[4];
    tw_done1(w, gid, a);
    cr_assert_eq(tw_collect(w, gid, 1, got, 4, 2000), 1);
    cr_assert_eq(got[0], b);
    tw_done1(w, gid, b);
    expect_done(c, gid, GS_OK, NULL);
    th_fini(&th);
}

Test(scheduler_graph, cancel_stops_the_graph_and_tells_workers)
{
    th_t th;
    tg_t g;
    gs_msg_t m;
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 1);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 1);
    uint64_t a = tg_task(&g, 0, 0, NULL);
    tg_output(&g, tg_task(&g, 0, 1, &a));
    uint64_t gid = tg_submit_ok(c, &g, 0);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    gs_msg_cleanup(&m);
    send_graph_msg(c, GS_MSG_CANCEL, gid);
    tp_expect(w, GS_MSG_CANCEL, &m);
    cr_assert_eq(m.u.cancel.graph_id, gid);
    gs_msg_cleanup(&m);
    expect_done(c, gid, GS_ERR_CANCELED, NULL);
    /* a result arriving after the cancel is released on the worker */
    tw_done1(w, gid, a);
    tp_expect(w, GS_MSG_RELEASE, &m);
    cr_assert(has_key(m.u.release.keys, m.u.release.n, gid, a));
    gs_msg_cleanup(&m);
    cr_assert(tp_none(w, GS_MSG_TASK_ASSIGN, 20));
    cr_assert_eq(th_stats(&th).ngraphs_active, 0);
    /* the worker's queue accounting is intact: a new graph fills it */
    tg_t g2;
    tg_init(&g2, 1);
    for (int i = 0; i < 4; i++) tg_output(&g2, tg_task(&g2, 0, 0, NULL));
    uint64_t gid2 = tg_submit_ok(c, &g2, 0);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    cr_assert_eq(m.u.task_assign.ntasks, 4);
    uint64_t ids[4];
    memcpy(ids, m.u.task_assign.task_id, sizeof ids);
    gs_msg_cleanup(&m);
    tw_done(w, gid2, ids, 4, GS_OK, 8, NULL);
    expect_done(c, gid2, GS_OK, NULL);
    /* cancel of a finished graph is ignored */
    send_graph_msg(c, GS_MSG_CANCEL, gid2);
    cr_assert(tp_none(c, GS_MSG_GRAPH_DONE, 20));
    th_fini(&th);
}

Test(scheduler_graph, client_disconnect_cancels_and_releases_its_graphs)
{
    th_t th;
    tg_t g1, g2;
    gs_msg_t m;
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 1);
    tp_t *c = tp_client(&th, "c");
    tp_t *c2 = tp_client(&th, "c2");
    tg_init(&g1, 1);
    tg_output(&g1, tg_task(&g1, 0, 0, NULL));
    uint64_t gid1 = tg_submit_ok(c, &g1, GS_SUBMIT_PERSIST);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    gs_msg_cleanup(&m);
    tw_done1(w, gid1, 0);
    expect_done(c, gid1, GS_OK, NULL);
    tg_init(&g2, 1);
    uint64_t a = tg_task(&g2, 0, 0, NULL);
    tg_output(&g2, tg_task(&g2, 0, 1, &a));
    uint64_t gid2 = tg_submit_ok(c, &g2, 0);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    cr_assert_eq(m.u.task_assign.graph_id, gid2);
    gs_msg_cleanup(&m);
    /* another client's graph is not touched */
    tg_t g3;
    tg_init(&g3, 1);
    tg_output(&g3, tg_task(&g3, 0, 0, NULL));
    uint64_t gid3 = tg_submit_ok(c2, &g3, 0);

    tp_close(c);
    tp_expect(w, GS_MSG_CANCEL, &m);
    cr_assert_eq(m.u.cancel.graph_id, gid2);
    gs_msg_cleanup(&m);
    tp_expect(w, GS_MSG_RELEASE, &m);
    cr_assert(has_key(m.u.release.keys, m.u.release.n, gid1, 0));
    gs_msg_cleanup(&m);
    th_run_for(&th, 10);
    cr_assert_eq(th_stats(&th).ngraphs, 1);
    cr_assert_eq(th_stats(&th).nclients, 1);
    /* w's slot freed by the cancel goes to c2's graph */
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    cr_assert_eq(m.u.task_assign.graph_id, gid3);
    gs_msg_cleanup(&m);
    tw_done1(w, gid3, 0);
    expect_done(c2, gid3, GS_OK, NULL);
    th_fini(&th);
}

Test(scheduler_graph, graphs_wait_for_workers)
{
    th_t th;
    tg_t g;
    gs_msg_t m;
    th_init(&th, NULL);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 1);
    tg_output(&g, tg_task(&g, 0, 0, NULL));
    uint64_t gid = tg_submit_ok(c, &g, 0);
    cr_assert(tp_none(c, GS_MSG_GRAPH_DONE, 50));
    tp_t *w = tp_worker(&th, "late", 1);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    gs_msg_cleanup(&m);
    tw_done1(w, gid, 0);
    expect_done(c, gid, GS_OK, NULL);
    th_fini(&th);
}

Test(scheduler_graph, info_reports_the_cluster)
{
    th_t th;
    gs_msg_t m;
    th_init(&th, NULL);
    tp_worker(&th, "alpha", 1);
    tp_worker(&th, "beta", 1);
    tp_t *c = tp_client(&th, "c");
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_INFO_REQ;
    tp_send(c, &m);
    tp_expect(c, GS_MSG_INFO, &m);
    cr_assert_eq(m.u.info.nworkers, 2);
    cr_assert_eq(m.u.info.nclients, 1);
    cr_assert_eq(m.u.info.nnames, 2);
    int a = 0, b = 0;
    for (uint32_t i = 0; i < 2; i++) {
        a |= strcmp((const char *)m.u.info.worker_names[i].data, "alpha") == 0;
        b |= strcmp((const char *)m.u.info.worker_names[i].data, "beta") == 0;
    }
    cr_assert(a && b);
    gs_msg_cleanup(&m);
    th_fini(&th);
}

Test(scheduler_graph, persisted_outputs_feed_later_graphs)
{
    th_t th;
    tg_t g1, g2;
    gs_msg_t m;
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 2);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g1, 1);
    uint64_t x = tg_task(&g1, 0, 0, NULL);
    tg_output(&g1, x);
    uint64_t gid1 = tg_submit_ok(c, &g1, GS_SUBMIT_PERSIST);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    gs_msg_cleanup(&m);
    /* a later graph may use the chunk before it exists: it waits for it */
    tg_init(&g2, 1);
    uint64_t e = tg_ext(&g2, gid1, x);
    uint64_t y = tg_task(&g2, 0, 1, &e);
    uint64_t z = tg_task(&g2, 0, 2, (uint64_t[]){e, e});   /* the same external twice */
    tg_output(&g2, y);
    tg_output(&g2, z);
    uint64_t gid2 = tg_submit_ok(c, &g2, 0);
    cr_assert(tp_none(w, GS_MSG_TASK_ASSIGN, 20));
    tw_done1(w, gid1, x);
    expect_done(c, gid1, GS_OK, NULL);
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    cr_assert_eq(m.u.task_assign.graph_id, gid2);
    cr_assert_eq(m.u.task_assign.ntasks, 2);
    cr_assert_eq(m.u.task_assign.dep_off[1], 1);
    cr_assert_eq(m.u.task_assign.dep_off[2], 3);
    cr_assert_eq(m.u.task_assign.dep_keys[0], gid1);
    cr_assert_eq(m.u.task_assign.dep_keys[1], x);
    cr_assert_eq(m.u.task_assign.dep_worker[0], w->id);
    gs_msg_cleanup(&m);
    tw_done(w, gid2, (uint64_t[]){y, z}, 2, GS_OK, 8, NULL);
    expect_done(c, gid2, GS_OK, NULL);
    /* releasing the source while a user graph lives keeps its chunk */
    send_graph_msg(c, GS_MSG_RELEASE_GRAPH, gid1);
    cr_assert(tp_none(w, GS_MSG_RELEASE, 30));
    /* a released graph cannot feed new graphs */
    tg_t g3;
    tg_init(&g3, 1);
    e = tg_ext(&g3, gid1, x);
    tg_output(&g3, tg_task(&g3, 0, 1, &e));
    tg_submit(c, &g3, 0, 5);
    tp_expect(c, GS_MSG_ERROR, &m);
    cr_assert(strstr((const char *)m.u.error.message.data, "released"), "%s", (const char *)m.u.error.message.data);
    gs_msg_cleanup(&m);
    /* releasing the user frees both */
    send_graph_msg(c, GS_MSG_RELEASE_GRAPH, gid2);
    tp_expect(w, GS_MSG_RELEASE, &m);
    cr_assert_eq(m.u.release.n, 3);
    cr_assert(has_key(m.u.release.keys, 3, gid1, x));
    cr_assert(has_key(m.u.release.keys, 3, gid2, y));
    cr_assert(has_key(m.u.release.keys, 3, gid2, z));
    gs_msg_cleanup(&m);
    th_run_for(&th, 10);
    cr_assert_eq(th_stats(&th).ngraphs, 0);
    th_fini(&th);
}

Test(scheduler_graph, serves_several_clients_and_graphs_at_once)
{
    th_t th;
    th_init(&th, NULL);
    tp_t *w1 = tp_worker(&th, "w1", 2);
    tp_t *w2 = tp_worker(&th, "w2", 2);
    tp_t *cl[3];
    uint64_t gids[3][2];
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "c%d", i);
        cl[i] = tp_client(&th, name);
    }
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 2; j++) {
            tg_t g;
            tg_init(&g, 2);
            uint64_t a = tg_task(&g, 0, 0, NULL), b = tg_task(&g, 0, 0, NULL);
            tg_output(&g, tg_task(&g, 1, 2, (uint64_t[]){a, b}));
            gids[i][j] = tg_submit_ok(cl[i], &g, 0);
        }
    }
    /* workers complete whatever they get until all six graphs are done */
    int ndone = 0;
    for (int round = 0; round < 200 && ndone < 6; round++) {
        tp_t *ws[2] = {w1, w2};
        for (int k = 0; k < 2; k++) {
            gs_msg_t m;
            while (tp_wait(ws[k], GS_MSG_TASK_ASSIGN, 2, &m)) {
                tw_done(ws[k], m.u.task_assign.graph_id, m.u.task_assign.task_id, (int)m.u.task_assign.ntasks,
                        GS_OK, 8, NULL);
                gs_msg_cleanup(&m);
            }
        }
        for (int i = 0; i < 3; i++) {
            gs_msg_t m;
            while (tp_wait(cl[i], GS_MSG_GRAPH_DONE, 0, &m)) {
                cr_assert(m.u.graph_done.graph_id == gids[i][0] || m.u.graph_done.graph_id == gids[i][1],
                          "client %d got another client's graph", i);
                cr_assert_eq(m.u.graph_done.status, GS_OK);
                ndone++;
                gs_msg_cleanup(&m);
            }
        }
    }
    cr_assert_eq(ndone, 6);
    /* a client cannot gather another client's chunks */
    gs_msg_t m;
    uint64_t keys[2] = {gids[0][0], 2};
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_GATHER_REQ;
    m.u.gather_req.req_id = 9;
    m.u.gather_req.n = 1;
    m.u.gather_req.keys = keys;
    tp_send(cl[1], &m);
    tp_expect(cl[1], GS_MSG_DATA, &m);
    cr_assert_eq(m.u.data.status, GS_ERR_NOT_FOUND);
    gs_msg_cleanup(&m);
    th_fini(&th);
}

Test(scheduler_graph, gathers_keep_at_most_8_keys_in_flight_and_relay_large_chunks_intact)
{
    th_t th;
    tg_t g;
    gs_msg_t m;
    enum { N = 12, BIG = 1 << 20 };
    uint64_t tasks[N], keys[2 * N], got[N];
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 4);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 1);
    for (int i = 0; i < N; i++) {
        tasks[i] = tg_task(&g, 0, 0, NULL);
        tg_output(&g, tasks[i]);
    }
    uint64_t gid = tg_submit_ok(c, &g, 0);
    uint64_t ids[N];
    cr_assert_eq(tw_collect(w, gid, N, ids, N, 2000), N);
    tw_done(w, gid, ids, N, GS_OK, BIG, NULL);
    expect_done(c, gid, GS_OK, NULL);

    /* one GATHER_REQ for all twelve keys: only eight reach the worker at first */
    for (int i = 0; i < N; i++) {
        keys[2 * i] = gid;
        keys[2 * i + 1] = tasks[i];
    }
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_GATHER_REQ;
    m.u.gather_req.req_id = 5;
    m.u.gather_req.n = N;
    m.u.gather_req.keys = keys;
    tp_send(c, &m);
    uint64_t sreq[N], stask[N];
    for (int i = 0; i < 8; i++) {
        tp_expect(w, GS_MSG_GATHER_REQ, &m);
        cr_assert_eq(m.u.gather_req.n, 1);
        sreq[i] = m.u.gather_req.req_id;
        stask[i] = m.u.gather_req.keys[1];
        gs_msg_cleanup(&m);
    }
    cr_assert(tp_none(w, GS_MSG_GATHER_REQ, 50), "more than 8 keys requested at once");

    /* answering one (a large chunk, relayed in place) lets the next key go out */
    uint8_t *big = malloc(BIG);
    cr_assert_not_null(big);
    for (size_t k = 0; k < BIG; k++) big[k] = (uint8_t)(k * 13 + 5);
    int next = 8;
    memset(got, 0, sizeof got);
    for (int i = 0; i < N; i++) {
        gs_msg_t d;
        memset(&d, 0, sizeof d);
        d.type = GS_MSG_DATA;
        d.u.data.req_id = sreq[i];
        d.u.data.graph_id = gid;
        d.u.data.task_id = stask[i];
        d.u.data.status = GS_OK;
        d.u.data.data.data = i % 3 == 0 ? big : (const uint8_t *)"small";
        d.u.data.data.len = i % 3 == 0 ? BIG : 5;
        tp_send(w, &d);
        tp_expect(c, GS_MSG_DATA, &m);
        cr_assert_eq(m.u.data.req_id, 5);
        cr_assert_eq(m.u.data.task_id, stask[i]);
        cr_assert_eq(m.u.data.status, GS_OK);
        cr_assert_eq(m.u.data.data.len, d.u.data.data.len);
        cr_assert(memcmp(m.u.data.data.data, d.u.data.data.data, d.u.data.data.len) == 0, "chunk %d differs", i);
        got[i] = 1;
        gs_msg_cleanup(&m);
        if (next < N) {
            tp_expect(w, GS_MSG_GATHER_REQ, &m);
            sreq[next] = m.u.gather_req.req_id;
            stask[next] = m.u.gather_req.keys[1];
            gs_msg_cleanup(&m);
            next++;
        }
        cr_assert(tp_none(w, GS_MSG_GATHER_REQ, 10), "window exceeded after answer %d", i);
    }
    /* every key was asked for exactly once */
    for (int i = 0; i < N; i++) {
        int seen = 0;
        for (int k = 0; k < N; k++) seen += stask[k] == tasks[i];
        cr_assert_eq(seen, 1, "task %llu requested %d times", (unsigned long long)tasks[i], seen);
    }
    free(big);
    th_fini(&th);
}

Test(scheduler_graph, gathers_of_large_chunks_keep_about_1_gib_in_flight)
{
    th_t th;
    tg_t g;
    gs_msg_t m;
    enum { N = 5 };
    const uint64_t size = 300u << 20;   /* as reported by the worker: three fit in 1 GiB */
    uint64_t tasks[N], keys[2 * N], ids[N], sreq[N], stask[N];
    th_init(&th, NULL);
    tp_t *w = tp_worker_mem(&th, "w", 4, (uint64_t)64 << 30);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 1);
    for (int i = 0; i < N; i++) {
        tasks[i] = tg_task(&g, 0, 0, NULL);
        tg_output(&g, tasks[i]);
        keys[2 * i + 1] = tasks[i];
    }
    uint64_t gid = tg_submit_ok(c, &g, 0);
    cr_assert_eq(tw_collect(w, gid, N, ids, N, 2000), N);
    tw_done(w, gid, ids, N, GS_OK, size, NULL);
    expect_done(c, gid, GS_OK, NULL);
    for (int i = 0; i < N; i++) keys[2 * i] = gid;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_GATHER_REQ;
    m.u.gather_req.req_id = 9;
    m.u.gather_req.n = N;
    m.u.gather_req.keys = keys;
    tp_send(c, &m);
    for (int i = 0; i < 3; i++) {
        tp_expect(w, GS_MSG_GATHER_REQ, &m);
        sreq[i] = m.u.gather_req.req_id;
        stask[i] = m.u.gather_req.keys[1];
        gs_msg_cleanup(&m);
    }
    cr_assert(tp_none(w, GS_MSG_GATHER_REQ, 50), "a fourth 300 MB chunk requested");
    for (int i = 0; i < N; i++) {
        gs_msg_t d;
        memset(&d, 0, sizeof d);
        d.type = GS_MSG_DATA;
        d.u.data.req_id = sreq[i];
        d.u.data.graph_id = gid;
        d.u.data.task_id = stask[i];
        d.u.data.status = GS_ERR_NO_MEMORY;   /* an error answer ends a relay too */
        tp_send(w, &d);
        tp_expect(c, GS_MSG_DATA, &m);
        cr_assert_eq(m.u.data.task_id, stask[i]);
        cr_assert_eq(m.u.data.status, GS_ERR_NO_MEMORY);
        gs_msg_cleanup(&m);
        if (i + 3 < N) {
            tp_expect(w, GS_MSG_GATHER_REQ, &m);
            sreq[i + 3] = m.u.gather_req.req_id;
            stask[i + 3] = m.u.gather_req.keys[1];
            gs_msg_cleanup(&m);
        }
        cr_assert(tp_none(w, GS_MSG_GATHER_REQ, 10), "window exceeded after answer %d", i);
    }
    th_fini(&th);
}
