/* Scheduling order and the root bound (scheduler/sched.h): ready tasks are placed by a
 * depth-first priority from the outputs, consumers before generators, and a worker is never
 * given more unconsumed generator (root) outputs than the bound, while graphs whose consumers
 * need more roots than the bound still finish. */
#include "harness.h"

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/time.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1ull << 20)

static void expect_done_ok(tp_t *c, uint64_t gid)
{
    gs_msg_t m;
    tp_expect(c, GS_MSG_GRAPH_DONE, &m);
    cr_assert_eq(m.u.graph_done.graph_id, gid);
    cr_assert_eq(m.u.graph_done.status, GS_OK, "graph failed: %.*s", (int)m.u.graph_done.message.len,
                 (const char *)m.u.graph_done.message.data);
    gs_msg_cleanup(&m);
}

/* The next TASK_ASSIGN of @a w must list exactly @a n tasks, @a ids in this order. */
static void expect_assign(tp_t *w, uint64_t gid, const uint64_t *ids, uint64_t n)
{
    gs_msg_t m;
    tp_expect(w, GS_MSG_TASK_ASSIGN, &m);
    cr_assert_eq(m.u.task_assign.graph_id, gid);
    cr_assert_eq(m.u.task_assign.ntasks, n, "assigned %llu tasks (first %llu), expected %llu (first %llu)",
                 (unsigned long long)m.u.task_assign.ntasks, (unsigned long long)m.u.task_assign.task_id[0],
                 (unsigned long long)n, (unsigned long long)ids[0]);
    for (uint64_t i = 0; i < n; i++) {
        cr_assert_eq(m.u.task_assign.task_id[i], ids[i], "position %llu: task %llu, expected %llu",
                     (unsigned long long)i, (unsigned long long)m.u.task_assign.task_id[i],
                     (unsigned long long)ids[i]);
    }
    gs_msg_cleanup(&m);
}

/* Report @a n assigned tasks done, then run whatever is assigned until the graph is done. */
static void finish(tp_t *w, tp_t *c, uint64_t gid, uint64_t *got, int n)
{
    uint64_t buf[64];
    gs_msg_t m;
    uint64_t end = gs_now_ns() + 30ull * 1000000000ull;
    tw_done(w, gid, got, n, GS_OK, 800, NULL);
    for (;;) {
        if (tp_wait(c, GS_MSG_GRAPH_DONE, 0, &m)) break;
        cr_assert_lt(gs_now_ns(), end, "graph did not finish");
        int k = tw_collect(w, gid, 1, buf, 64, 10);
        if (k > 0) tw_done(w, gid, buf, k, GS_OK, 800, NULL);
    }
    cr_assert_eq(m.u.graph_done.graph_id, gid);
    cr_assert_eq(m.u.graph_done.status, GS_OK);
    gs_msg_cleanup(&m);
}

static void heartbeat_mem(tp_t *w, uint64_t used, uint64_t limit)
{
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_HEARTBEAT;
    m.u.heartbeat.mem_used = used;
    m.u.heartbeat.mem_limit = limit;
    tp_send(w, &m);
}

Test(scheduler_order, places_ready_tasks_in_depth_first_priority_not_id_order)
{
    th_t th;
    tg_t g;
    th_init(&th, NULL);
    tp_t *w = tp_worker(&th, "w", 1);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 3);
    uint64_t x[4], y[4];
    for (int i = 0; i < 4; i++) x[i] = tg_task(&g, 0, 0, NULL);
    for (int i = 0; i < 4; i++) y[i] = tg_task(&g, 1, 1, &x[i]);
    uint64_t rev[4] = {y[3], y[2], y[1], y[0]};
    uint64_t z = tg_task(&g, 2, 4, rev);
    tg_output(&g, z);
    uint64_t gid = tg_submit_ok(c, &g, 0);

    /* z reads y3 first: its branch comes first */
    uint64_t xs[4] = {x[3], x[2], x[1], x[0]};
    expect_assign(w, gid, xs, 4);
    tw_done(w, gid, x, 4, GS_OK, 800, NULL);
    expect_assign(w, gid, rev, 4);
    tw_done(w, gid, y, 4, GS_OK, 800, NULL);
    expect_assign(w, gid, &z, 1);
    tw_done1(w, gid, z);
    expect_done_ok(c, gid);
    th_fini(&th);
}

Test(scheduler_order, feeds_the_consumer_of_a_large_root_before_the_next_root)
{
    th_t th;
    tg_t g;
    th_init(&th, NULL);
    /* roots of 400 MiB on a 1 GiB worker: the bound (half the memory) admits one at a time */
    tp_t *w = tp_worker_mem(&th, "w", 1, 1024 * MIB);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 3);
    uint64_t r[4], mp[4];
    for (int i = 0; i < 4; i++) {
        r[i] = tg_task(&g, 0, 0, NULL);
        g.nbytes[r[i]] = 400 * MIB;
    }
    for (int i = 0; i < 4; i++) mp[i] = tg_task(&g, 1, 1, &r[i]);
    uint64_t s = tg_task(&g, 2, 4, mp);
    tg_output(&g, s);
    uint64_t gid = tg_submit_ok(c, &g, 0);

    for (int i = 0; i < 4; i++) {
        expect_assign(w, gid, &r[i], 1);
        cr_assert(tp_none(w, GS_MSG_TASK_ASSIGN, 20), "a second 400 MiB root was sent while r%d is queued", i);
        tw_done(w, gid, &r[i], 1, GS_OK, 400 * MIB, NULL);
        expect_assign(w, gid, &mp[i], 1);
        cr_assert(tp_none(w, GS_MSG_TASK_ASSIGN, 20), "a root was sent while r%d is unconsumed", i);
        tw_done(w, gid, &mp[i], 1, GS_OK, 8, NULL);
    }
    expect_assign(w, gid, &s, 1);
    tw_done1(w, gid, s);
    expect_done_ok(c, gid);
    cr_assert_gt(th_stats(&th).roots_withheld_total, 0);
    th_fini(&th);
}

/* 600 MiB of other data on a 1 GiB worker leave no room under half the memory: one root per
 * thread only. */
Test(scheduler_order, throttles_roots_to_one_per_thread_when_other_data_fills_half_the_memory)
{
    th_t th;
    tg_t g;
    uint64_t got[32];
    th_init(&th, NULL);
    tp_t *w = tp_worker_mem(&th, "w", 2, 1024 * MIB);
    tp_t *c = tp_client(&th, "c");
    heartbeat_mem(w, 600 * MIB, 1024 * MIB);
    th_run_for(&th, 20);
    tg_init(&g, 3);
    uint64_t r[10], mp[10];
    for (int i = 0; i < 10; i++) r[i] = tg_task(&g, 0, 0, NULL);
    for (int i = 0; i < 10; i++) mp[i] = tg_task(&g, 1, 1, &r[i]);
    uint64_t s = tg_task(&g, 2, 10, mp);
    tg_output(&g, s);
    uint64_t gid = tg_submit_ok(c, &g, 0);

    int n = tw_collect(w, gid, 10, got, 32, 100);
    cr_assert_eq(n, 2, "%d roots sent to a 2-thread worker using 60%% of its memory", n);
    cr_assert_eq(got[0], r[0]);
    cr_assert_eq(got[1], r[1]);
    /* memory freed: the full bound again (up to the queue bound of 2 x 2 + 4) */
    heartbeat_mem(w, 0, 1024 * MIB);
    int more = tw_collect(w, gid, 6, got + 2, 30, 2000);
    cr_assert_eq(more, 6);
    finish(w, c, gid, got, 8);
    th_fini(&th);
}

Test(scheduler_order, a_consumer_of_more_roots_than_the_bound_still_runs)
{
    th_t th;
    tg_t g;
    th_init(&th, NULL);
    tp_t *w = tp_worker_mem(&th, "w", 1, 1024 * MIB);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g, 2);
    uint64_t r[6];
    for (int i = 0; i < 6; i++) {
        r[i] = tg_task(&g, 0, 0, NULL);
        g.nbytes[r[i]] = 400 * MIB;
    }
    uint64_t s = tg_task(&g, 1, 6, r);   /* needs six 400 MiB roots; the bound admits one */
    tg_output(&g, s);
    uint64_t gid = tg_submit_ok(c, &g, 0);

    for (int i = 0; i < 6; i++) {
        expect_assign(w, gid, &r[i], 1);
        cr_assert(tp_none(w, GS_MSG_TASK_ASSIGN, 20), "more roots than threads queued past the bound");
        tw_done(w, gid, &r[i], 1, GS_OK, 400 * MIB, NULL);
    }
    expect_assign(w, gid, &s, 1);
    tw_done1(w, gid, s);
    expect_done_ok(c, gid);
    th_fini(&th);
}

/* TASK_DONE for @a n tasks with @a run_ns each (keeps the worker's queue bound where it is). */
static void done_run(tp_t *w, uint64_t gid, const uint64_t *tasks, int n, uint64_t nbytes, uint64_t run_ns)
{
    uint64_t gids[64], nb[64], run[64], fetch[64];
    int32_t st[64];
    gs_msg_t m;
    cr_assert_leq(n, 64);
    for (int i = 0; i < n; i++) {
        gids[i] = gid;
        nb[i] = nbytes;
        run[i] = run_ns;
        fetch[i] = 0;
        st[i] = GS_OK;
    }
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_TASK_DONE;
    m.u.task_done.n = (uint64_t)n;
    m.u.task_done.graph_id = gids;
    m.u.task_done.task_id = tasks;
    m.u.task_done.status = st;
    m.u.task_done.nbytes = nb;
    m.u.task_done.run_ns = run;
    m.u.task_done.fetch_ns = fetch;
    m.u.task_done.start_ns = fetch;
    m.u.task_done.end_ns = run;
    tp_send(w, &m);
}

/* Worker a (1 thread, memory unknown: root bound 2 x 1 + queue bound 6 = 8) runs its roots at
 * once; their consumers also read a 1 GiB chunk on worker b and so go to b (deep queue, over
 * half its memory: it takes almost no roots itself), where nothing runs yet. Without the bound
 * a would be refilled with roots as fast as it runs them. */
Test(scheduler_order, bounds_unconsumed_roots_by_count_when_their_consumers_run_elsewhere)
{
    th_t th;
    tg_t g0, g;
    uint64_t got[64];
    th_init(&th, NULL);
    tp_t *b = tp_worker_mem(&th, "b", 1, 4096 * MIB);
    tp_t *c = tp_client(&th, "c");
    tg_init(&g0, 1);
    for (int i = 0; i < 12; i++) tg_output(&g0, tg_task(&g0, 0, 0, NULL));
    uint64_t big = 0;
    g0.nbytes[big] = 1ull << 30;
    uint64_t gid0 = tg_submit_ok(c, &g0, GS_SUBMIT_PERSIST);
    for (int i = 0; i < 12;) {
        int k = tw_collect(b, gid0, 1, got, 64, 2000);
        cr_assert_gt(k, 0);
        for (int j = 0; j < k; j++) done_run(b, gid0, &got[j], 1, g0.nbytes[got[j]], 1000);   /* fast: deep queue */
        i += k;
    }
    expect_done_ok(c, gid0);
    heartbeat_mem(b, 3072 * MIB, 4096 * MIB);
    th_run_for(&th, 10);
    tp_t *a = tp_worker_mem(&th, "a", 1, 0);

    tg_init(&g, 3);
    uint64_t ext = tg_ext(&g, gid0, big), r[40], mp[40], deps[2];
    for (int i = 0; i < 40; i++) r[i] = tg_task(&g, 0, 0, NULL);
    for (int i = 0; i < 40; i++) {
        deps[0] = r[i];
        deps[1] = ext;
        mp[i] = tg_task(&g, 1, 2, deps);
    }
    uint64_t sum = tg_task(&g, 2, 40, mp);
    tg_output(&g, sum);
    uint64_t gid = tg_submit_ok(c, &g, 0);

    /* a runs everything it gets at once; b runs nothing */
    int held = 0, most = 0, nb_tasks = 0;
    heartbeat_mem(b, 3072 * MIB, 4096 * MIB);
    uint64_t bq[128];
    /* at least 300 ms, and until the bound is reached (a loaded machine takes longer) */
    uint64_t t0 = gs_now_ns(), min_end = t0 + 300ull * 1000000ull, end = t0 + 30ull * 1000000000ull;
    while (gs_now_ns() < end && (most < 8 || gs_now_ns() < min_end)) {
        int k = tw_collect(a, gid, 1, got, 64, 5);
        for (int i = 0; i < k; i++) cr_assert_lt(got[i], 40, "a consumer ran on a: task %llu", (unsigned long long)got[i]);
        held += k;   /* its roots: stored, their maps wait on b */
        if (held > most) most = held;
        cr_assert_leq(held, 8, "worker a got %d unconsumed roots (bound 8)", held);
        if (k > 0) done_run(a, gid, got, k, 1000, 1000000);
        nb_tasks += tw_collect(b, gid, 1, bq + nb_tasks, 128 - nb_tasks, 1);
    }
    cr_assert_eq(most, 8, "the bound was not reached (most %d)", most);
    cr_assert_gt(th_stats(&th).roots_withheld_total, 0);
    /* now b runs its share; everything finishes */
    uint64_t endall = gs_now_ns() + 30ull * 1000000000ull;
    for (;;) {
        gs_msg_t m;
        if (tp_wait(c, GS_MSG_GRAPH_DONE, 0, &m)) {
            cr_assert_eq(m.u.graph_done.status, GS_OK);
            gs_msg_cleanup(&m);
            break;
        }
        cr_assert_lt(gs_now_ns(), endall, "graph did not finish");
        for (int off = 0; off < nb_tasks; off += 64) {
            done_run(b, gid, bq + off, nb_tasks - off < 64 ? nb_tasks - off : 64, 1000, 1000000);
        }
        nb_tasks = tw_collect(b, gid, 1, bq, 128, 5);
        int k = tw_collect(a, gid, 1, got, 64, 5);
        if (k > 0) done_run(a, gid, got, k, 1000, 1000000);
    }
    th_fini(&th);
}

/* ---- a wide reduction on simulated workers ---- */

enum { K_ROOT = 0, K_MAP, K_REDUCE, K_COMBINE };

typedef struct wide {
    uint64_t ntasks, cap;
    uint32_t *layer;
    uint64_t *block, *dep_off, *deps, *nbytes, *val;
    int *kind;
    uint64_t *root_of;   /* map -> the root it reads */
    uint64_t nroots, output;
} wide_t;

static uint64_t mix(uint64_t a, uint64_t b)
{
    return gs_hash_u64(a * 31 + b + 0x1234567);
}

static uint64_t wide_task(wide_t *g, int kind, uint64_t nbytes, int ndeps, const uint64_t *deps)
{
    uint64_t t = g->ntasks++, v = t;
    cr_assert_lt(t, g->cap);
    g->layer[t] = (uint32_t)kind;
    g->block[t] = t;
    g->kind[t] = kind;
    g->nbytes[t] = nbytes;
    g->root_of[t] = kind == K_MAP ? deps[0] : UINT64_MAX;
    for (int i = 0; i < ndeps; i++) {
        g->deps[g->dep_off[t] + (uint64_t)i] = deps[i];
        v = mix(v, g->val[deps[i]] * (uint64_t)(i + 1));
    }
    g->dep_off[t + 1] = g->dep_off[t] + (uint64_t)ndeps;
    g->val[t] = v;
    return t;
}

/* Ids in layer order, as lowering numbers them (every generator first): @a R roots, a map of
 * each, a reduce of each map, then a combine tree of fan-in 4 down to one output. */
static void wide_build(wide_t *g, uint64_t R, uint64_t root_nbytes)
{
    uint64_t level[512], n, deps[4];
    memset(g, 0, sizeof *g);
    g->cap = 4 * R + 8;
    g->layer = calloc(g->cap, sizeof *g->layer);
    g->block = calloc(g->cap, sizeof *g->block);
    g->dep_off = calloc(g->cap + 1, sizeof *g->dep_off);
    g->deps = calloc(4 * g->cap, sizeof *g->deps);
    g->nbytes = calloc(g->cap, sizeof *g->nbytes);
    g->val = calloc(g->cap, sizeof *g->val);
    g->kind = calloc(g->cap, sizeof *g->kind);
    g->root_of = calloc(g->cap, sizeof *g->root_of);
    cr_assert(g->layer && g->block && g->dep_off && g->deps && g->nbytes && g->val && g->kind && g->root_of);
    cr_assert_leq(R, 512);
    g->nroots = R;
    for (uint64_t i = 0; i < R; i++) wide_task(g, K_ROOT, root_nbytes, 0, NULL);
    for (uint64_t i = 0; i < R; i++) wide_task(g, K_MAP, root_nbytes, 1, &i);
    for (uint64_t i = 0; i < R; i++) {
        deps[0] = R + i;
        level[i] = wide_task(g, K_REDUCE, 8, 1, deps);
    }
    n = R;
    while (n > 1) {
        uint64_t m = 0;
        for (uint64_t i = 0; i < n; i += 4) {
            int k = 0;
            for (uint64_t j = i; j < n && j < i + 4; j++) deps[k++] = level[j];
            level[m++] = wide_task(g, K_COMBINE, 8, k, deps);
        }
        n = m;
    }
    g->output = level[0];
}

static void wide_free(wide_t *g)
{
    free(g->layer);
    free(g->block);
    free(g->dep_off);
    free(g->deps);
    free(g->nbytes);
    free(g->val);
    free(g->kind);
    free(g->root_of);
}

static uint64_t wide_submit(tp_t *c, const wide_t *g)
{
    static const char *names[4] = {"root", "map", "reduce", "combine"};
    gs_bytes_t layers[4];
    gs_msg_t m;
    uint64_t id;
    for (int l = 0; l < 4; l++) {
        layers[l].data = (const uint8_t *)names[l];
        layers[l].len = strlen(names[l]);
    }
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_GRAPH_SUBMIT;
    m.u.graph_submit.client_ref = 7;
    m.u.graph_submit.nlayers = 4;
    m.u.graph_submit.layers = layers;
    m.u.graph_submit.ntasks = g->ntasks;
    m.u.graph_submit.task_layer = g->layer;
    m.u.graph_submit.task_block = g->block;
    m.u.graph_submit.dep_off = g->dep_off;
    m.u.graph_submit.deps = g->deps;
    m.u.graph_submit.task_nbytes = g->nbytes;
    m.u.graph_submit.noutputs = 1;
    m.u.graph_submit.outputs = (uint64_t *)&g->output;
    tp_send(c, &m);
    tp_expect(c, GS_MSG_GRAPH_ACCEPTED, &m);
    id = m.u.graph_accepted.graph_id;
    gs_msg_cleanup(&m);
    return id;
}

typedef struct job {
    uint64_t task;
    int ndeps;
    uint64_t dep[4];
    uint64_t dep_worker[4];
} job_t;

typedef struct fw {
    tp_t *p;
    uint32_t nthreads;
    uint64_t mem_limit;
    gs_u64map_t store;           /* task -> value */
    uint64_t mem_used;
    GS_VEC(job_t) queue;
    uint32_t roots_queued;       /* root tasks received, not run */
    uint32_t roots_held;         /* root outputs stored here whose map has not run */
    uint64_t roots_bytes;
    uint32_t max_roots;
    uint64_t max_root_bytes;
} fw_t;

typedef struct sim {
    th_t th;
    wide_t g;
    uint64_t gid;
    fw_t w[2];
    int nw;
    uint64_t run_ns;
    uint32_t bound;              /* unconsumed roots (queued + held) a worker may have */
    uint64_t bound_bytes;        /* and their bytes (0: no byte bound) */
    uint32_t *root_worker;       /* root -> worker index that stored it */
    uint8_t *done;
    uint32_t roots_started;
    int64_t first_combine_at;    /* roots started when the first combine completed */
} sim_t;

static fw_t *sim_worker(sim_t *s, uint64_t id)
{
    for (int i = 0; i < s->nw; i++) {
        if (s->w[i].p->id == id) return &s->w[i];
    }
    return NULL;
}

static void fw_check_bound(sim_t *s, fw_t *f)
{
    uint32_t n = f->roots_queued + f->roots_held;
    if (n > f->max_roots) f->max_roots = n;
    if (f->roots_bytes > f->max_root_bytes) f->max_root_bytes = f->roots_bytes;
    cr_assert_leq(n, s->bound, "worker %s has %u roots queued and %u unconsumed root outputs (bound %u)",
                  f->p->name, f->roots_queued, f->roots_held, s->bound);
    if (s->bound_bytes > 0) {
        cr_assert_leq(f->roots_bytes, s->bound_bytes, "worker %s has %llu bytes of unconsumed roots (bound %llu)",
                      f->p->name, (unsigned long long)f->roots_bytes, (unsigned long long)s->bound_bytes);
    }
}

static void fw_process(sim_t *s, fw_t *f)
{
    tp_t *p = f->p;
    for (size_t i = 0; i < p->inbox.len; i++) {
        gs_buf_t *b = &p->inbox.data[i];
        gs_msg_t m;
        cr_assert_eq(gs_msg_decode(b->data + 4, b->len - 4, &m), GS_OK);
        if (m.type == GS_MSG_TASK_ASSIGN) {
            const gs_msg_task_assign_t *a = &m.u.task_assign;
            cr_assert_eq(a->graph_id, s->gid);
            for (uint64_t k = 0; k < a->ntasks; k++) {
                job_t j;
                memset(&j, 0, sizeof j);
                j.task = a->task_id[k];
                cr_assert_lt(j.task, s->g.ntasks);
                j.ndeps = (int)(a->dep_off[k + 1] - a->dep_off[k]);
                cr_assert_leq(j.ndeps, 4);
                for (int d = 0; d < j.ndeps; d++) {
                    uint64_t x = a->dep_off[k] + (uint64_t)d;
                    j.dep[d] = a->dep_keys[2 * x + 1];
                    j.dep_worker[d] = a->dep_worker[x];
                }
                if (s->g.kind[j.task] == K_ROOT) {
                    f->roots_queued++;
                    f->roots_bytes += s->g.nbytes[j.task];
                }
                cr_assert_eq(GS_VEC_PUSH(&f->queue, j), GS_OK);
            }
            fw_check_bound(s, f);
        } else if (m.type == GS_MSG_RELEASE) {
            for (uint64_t k = 0; k < m.u.release.n; k++) {
                uint64_t t = m.u.release.keys[2 * k + 1], v;
                if (m.u.release.keys[2 * k] == s->gid && gs_u64map_get(&f->store, t, &v)) {
                    gs_u64map_del(&f->store, t);
                    f->mem_used -= s->g.nbytes[t];
                }
            }
        }
        gs_msg_cleanup(&m);
    }
    tp_drain(p);
}

/* Run up to nthreads queued tasks: roots first (like a worker whose memory admission lets
 * generators pass consumers), otherwise in arrival order. */
static void fw_run(sim_t *s, fw_t *f)
{
    uint64_t gids[8], tids[8], nb[8], run[8], fetch[8];
    int32_t st[8];
    uint32_t k = 0;
    while (k < f->nthreads && k < 8 && f->queue.len > 0) {
        size_t pick = 0;
        for (size_t q = 0; q < f->queue.len; q++) {
            if (s->g.kind[f->queue.data[q].task] == K_ROOT) {
                pick = q;
                break;
            }
        }
        job_t j = f->queue.data[pick];
        memmove(&f->queue.data[pick], &f->queue.data[pick + 1], (f->queue.len - pick - 1) * sizeof(job_t));
        f->queue.len--;
        uint64_t v = j.task;
        for (int d = 0; d < j.ndeps; d++) {
            fw_t *h = sim_worker(s, j.dep_worker[d]);
            uint64_t dv;
            cr_assert_not_null(h, "input %llu on an unknown worker", (unsigned long long)j.dep[d]);
            cr_assert(gs_u64map_get(&h->store, j.dep[d], &dv), "input %llu of task %llu is not on worker %s",
                      (unsigned long long)j.dep[d], (unsigned long long)j.task, h->p->name);
            v = mix(v, dv * (uint64_t)(d + 1));
        }
        cr_assert_eq(v, s->g.val[j.task], "task %llu computed from wrong inputs", (unsigned long long)j.task);
        cr_assert(!s->done[j.task], "task %llu ran twice", (unsigned long long)j.task);
        s->done[j.task] = 1;
        cr_assert_eq(gs_u64map_put(&f->store, j.task, v), GS_OK);
        f->mem_used += s->g.nbytes[j.task];
        switch (s->g.kind[j.task]) {
        case K_ROOT:
            f->roots_queued--;
            f->roots_held++;
            s->root_worker[j.task] = (uint32_t)(f - s->w);
            s->roots_started++;
            break;
        case K_MAP: {
            uint64_t r = s->g.root_of[j.task];
            fw_t *h = &s->w[s->root_worker[r]];
            h->roots_held--;
            h->roots_bytes -= s->g.nbytes[r];
            break;
        }
        case K_COMBINE:
            if (s->first_combine_at < 0) s->first_combine_at = s->roots_started;
            break;
        default:
            break;
        }
        gids[k] = s->gid;
        tids[k] = j.task;
        nb[k] = s->g.nbytes[j.task];
        run[k] = s->run_ns;
        fetch[k] = 0;
        st[k] = GS_OK;
        k++;
    }
    if (k == 0) return;
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_TASK_DONE;
    m.u.task_done.n = k;
    m.u.task_done.graph_id = gids;
    m.u.task_done.task_id = tids;
    m.u.task_done.status = st;
    m.u.task_done.nbytes = nb;
    m.u.task_done.run_ns = run;
    m.u.task_done.fetch_ns = fetch;
    m.u.task_done.start_ns = fetch;
    m.u.task_done.end_ns = run;
    tp_send(f->p, &m);
}

/* 200 roots -> map -> reduce -> combine tree on two 2-thread workers; checks the bound on
 * every assignment, the depth-first progress and every value. */
static void wide_run(uint64_t root_nbytes, uint64_t mem_limit, uint64_t run_ns, uint32_t bound,
                     uint64_t bound_bytes)
{
    sim_t *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    th_init(&s->th, NULL);
    wide_build(&s->g, 200, root_nbytes);
    s->run_ns = run_ns;
    s->bound = bound;
    s->bound_bytes = bound_bytes;
    s->first_combine_at = -1;
    s->root_worker = calloc(s->g.ntasks, sizeof *s->root_worker);
    s->done = calloc(s->g.ntasks, 1);
    cr_assert(s->root_worker && s->done);
    for (int i = 0; i < 2; i++) {
        fw_t *f = &s->w[s->nw++];
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        f->p = tp_worker_mem(&s->th, name, 2, mem_limit);
        f->nthreads = 2;
        f->mem_limit = mem_limit;
        gs_u64map_init(&f->store);
    }
    tp_t *c = tp_client(&s->th, "c");
    s->gid = wide_submit(c, &s->g);

    uint64_t end = gs_now_ns() + 30ull * 1000000000ull;
    for (;;) {
        gs_msg_t m;
        if (tp_wait(c, GS_MSG_GRAPH_DONE, 0, &m)) {
            cr_assert_eq(m.u.graph_done.status, GS_OK, "graph failed: %.*s", (int)m.u.graph_done.message.len,
                         (const char *)m.u.graph_done.message.data);
            gs_msg_cleanup(&m);
            break;
        }
        cr_assert_lt(gs_now_ns(), end, "the wide reduction did not finish (%u roots started)", s->roots_started);
        uv_run(&s->th.loop, UV_RUN_NOWAIT);
        for (int i = 0; i < s->nw; i++) fw_process(s, &s->w[i]);
        for (int i = 0; i < s->nw; i++) fw_run(s, &s->w[i]);
        for (int i = 0; i < s->nw; i++) heartbeat_mem(s->w[i].p, s->w[i].mem_used, s->w[i].mem_limit);
        uv_run(&s->th.loop, UV_RUN_ONCE);
    }
    for (uint64_t t = 0; t < s->g.ntasks; t++) cr_assert(s->done[t], "task %llu never ran", (unsigned long long)t);
    {
        uint64_t v = 0;
        int found = 0;
        for (int i = 0; i < s->nw; i++) found |= gs_u64map_get(&s->w[i].store, s->g.output, &v);
        cr_assert(found, "the output is on no worker");
        cr_assert_eq(v, s->g.val[s->g.output], "wrong result");
    }
    cr_log_info("wide reduction: first combine after %lld of %llu roots; most unconsumed roots on a worker: %u "
                "and %u (%llu and %llu bytes); roots withheld in %llu passes",
                (long long)s->first_combine_at, (unsigned long long)s->g.nroots, s->w[0].max_roots,
                s->w[1].max_roots, (unsigned long long)s->w[0].max_root_bytes,
                (unsigned long long)s->w[1].max_root_bytes,
                (unsigned long long)th_stats(&s->th).roots_withheld_total);
    /* depth-first: the first combine (4 branches) completes long before the last root starts */
    cr_assert_geq(s->first_combine_at, 4);
    cr_assert_lt(s->first_combine_at, 50, "first combine only after %lld roots", (long long)s->first_combine_at);
    if (bound_bytes > 0) cr_assert_gt(th_stats(&s->th).roots_withheld_total, 0, "the bound was never exercised");

    th_fini(&s->th);
    for (int i = 0; i < s->nw; i++) {
        gs_u64map_cleanup(&s->w[i].store);
        GS_VEC_FREE(&s->w[i].queue);
    }
    free(s->root_worker);
    free(s->done);
    wide_free(&s->g);
    free(s);
}

/* Memory limit unknown, 1 ms tasks: queue bound 2 x 2 threads + 4 = 8, root bound 2 x 2 + 8
 * (the maps go to the root's holder, so here its queue bound keeps it lower). */
Test(scheduler_order, wide_reduction_keeps_unconsumed_roots_under_the_count_bound, .timeout = 60)
{
    wide_run(1000, 0, 1000000, 12, 0);
}

/* 256 MiB roots on 4 GiB workers with 10 us tasks (deep queues): at most half the memory, i.e.
 * 8 roots, whatever the queue bound. */
Test(scheduler_order, wide_reduction_keeps_unconsumed_roots_under_half_the_memory, .timeout = 60)
{
    wide_run(256 * MIB, 4096 * MIB, 10000, 8, 2048 * MIB);
}
