/* Randomised fault injection: random DAGs (a persisted graph and a graph using its chunks) run
 * on fake workers that execute tasks in random order, while workers are killed (connection
 * dropped, store lost) or stalled (silent until the heartbeat timeout) and new ones join.
 * The fake workers check every assignment against what they actually hold: an input must be on
 * the worker gsched names (or that worker must be gone); the values gathered at the end must
 * equal a reference computed directly from the DAG. */
#include "harness.h"

#include "common/hashmap.h"
#include "common/time.h"

#include <criterion/criterion.h>
#include <string.h>

typedef struct rng {
    uint64_t s;
} rng_t;

static uint64_t rnd(rng_t *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return gs_hash_u64(r->s);
}

static uint32_t rndn(rng_t *r, uint32_t n)
{
    return (uint32_t)(rnd(r) % n);
}

#define MAXW 24

typedef struct job {
    uint64_t graph, task;
    int ndeps;
    uint64_t dep_keys[8];
    uint64_t dep_worker[8];
} job_t;

typedef struct fw {
    tp_t *p;
    int alive;     /* connected and not killed */
    int stalled;   /* stopped: processes nothing, sends nothing */
    gs_u64map_t store;   /* key -> value */
    GS_VEC(job_t) queue;
} fw_t;

typedef struct sim {
    th_t th;
    rng_t rng;
    fw_t w[MAXW];
    int nw;
    int nkills, nstalls;
} sim_t;

static uint64_t key_of(uint64_t g, uint64_t t)
{
    return (g << 32) | t;
}

static fw_t *sim_worker_by_id(sim_t *s, uint64_t id)
{
    for (int i = 0; i < s->nw; i++) {
        if (s->w[i].p->id == id) return &s->w[i];
    }
    return NULL;
}

static void sim_add_worker(sim_t *s)
{
    char name[16];
    cr_assert_lt(s->nw, MAXW);
    fw_t *f = &s->w[s->nw];
    snprintf(name, sizeof name, "fw%d", s->nw);
    memset(f, 0, sizeof *f);
    f->p = tp_worker(&s->th, name, 1 + rndn(&s->rng, 3));
    f->p->heartbeat = 1;
    f->alive = 1;
    gs_u64map_init(&f->store);
    s->nw++;
}

static uint64_t mix(uint64_t a, uint64_t b)
{
    return gs_hash_u64(a * 31 + b + 0x1234567);
}

/* Execute up to @a n queued jobs of worker @a f in random order. */
static void fw_run(sim_t *s, fw_t *f, int n)
{
    uint64_t gids[64], tids[64], nb[64], run[64], fetch[64];
    int32_t st[64];
    gs_str_t errs[64];
    uint32_t nerr = 0;
    int k = 0;
    while (k < n && k < 64 && f->queue.len > 0) {
        size_t i = rndn(&s->rng, (uint32_t)f->queue.len);
        job_t j = f->queue.data[i];
        f->queue.data[i] = f->queue.data[--f->queue.len];
        uint64_t v = j.task;
        int ok = 1;
        /* an input whose holder is gone fails the fetch; then the assignment may also be stale
         * (gsched reset the task when that input was lost and may have run it elsewhere and
         * released its other inputs), so the other inputs are not checked */
        for (int d = 0; d < j.ndeps; d++) {
            fw_t *h = sim_worker_by_id(s, j.dep_worker[d]);
            cr_assert_not_null(h, "input on unknown worker %llu", (unsigned long long)j.dep_worker[d]);
            if (!h->alive || h->p->closed) ok = 0;   /* closed: removed by gsched, not yet reaped */
        }
        for (int d = 0; d < j.ndeps && ok; d++) {
            fw_t *h = sim_worker_by_id(s, j.dep_worker[d]);
            uint64_t dv;
            cr_assert(gs_u64map_get(&h->store, j.dep_keys[2 * d] << 32 | j.dep_keys[2 * d + 1], &dv),
                      "worker %s told to fetch (%llu, %llu) from %s, which does not hold it", f->p->name,
                      (unsigned long long)j.dep_keys[2 * d], (unsigned long long)j.dep_keys[2 * d + 1], h->p->name);
            v = mix(v, dv * (uint64_t)(d + 1));
        }
        gids[k] = j.graph;
        tids[k] = j.task;
        nb[k] = 8 + rndn(&s->rng, 1000);
        run[k] = 100;
        fetch[k] = 0;
        st[k] = ok ? GS_OK : GS_ERR_WORKER_LOST;
        if (!ok) {
            errs[nerr].data = (const uint8_t *)"input holder gone";
            errs[nerr].len = 17;
            nerr++;
        } else {
            cr_assert_eq(gs_u64map_put(&f->store, key_of(j.graph, j.task), v), GS_OK);
        }
        k++;
    }
    if (k == 0) return;
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_TASK_DONE;
    m.u.task_done.n = (uint64_t)k;
    m.u.task_done.graph_id = gids;
    m.u.task_done.task_id = tids;
    m.u.task_done.status = st;
    m.u.task_done.nbytes = nb;
    m.u.task_done.run_ns = run;
    m.u.task_done.fetch_ns = fetch;
    m.u.task_done.start_ns = fetch;
    m.u.task_done.end_ns = run;
    m.u.task_done.nerrors = nerr;
    m.u.task_done.errors = errs;
    tp_send(f->p, &m);
}

/* Handle everything queued for worker @a f. */
static void fw_process(sim_t *s, fw_t *f)
{
    tp_t *p = f->p;
    for (size_t i = 0; i < p->inbox.len; i++) {
        gs_buf_t *b = &p->inbox.data[i];
        gs_msg_t m;
        cr_assert_eq(gs_msg_decode(b->data + 4, b->len - 4, &m), GS_OK);
        switch (m.type) {
        case GS_MSG_TASK_ASSIGN: {
            const gs_msg_task_assign_t *a = &m.u.task_assign;
            for (uint64_t t = 0; t < a->ntasks; t++) {
                job_t j;
                memset(&j, 0, sizeof j);
                j.graph = a->graph_id;
                j.task = a->task_id[t];
                j.ndeps = (int)(a->dep_off[t + 1] - a->dep_off[t]);
                cr_assert_leq(j.ndeps, 8);
                for (int d = 0; d < j.ndeps; d++) {
                    uint64_t x = a->dep_off[t] + (uint64_t)d;
                    j.dep_keys[2 * d] = a->dep_keys[2 * x];
                    j.dep_keys[2 * d + 1] = a->dep_keys[2 * x + 1];
                    j.dep_worker[d] = a->dep_worker[x];
                }
                cr_assert_eq(GS_VEC_PUSH(&f->queue, j), GS_OK);
            }
            break;
        }
        case GS_MSG_RELEASE:
            for (uint64_t k = 0; k < m.u.release.n; k++) {
                gs_u64map_del(&f->store, key_of(m.u.release.keys[2 * k], m.u.release.keys[2 * k + 1]));
            }
            break;
        case GS_MSG_CANCEL: {
            size_t o = 0;
            for (size_t q = 0; q < f->queue.len; q++) {
                if (f->queue.data[q].graph != m.u.cancel.graph_id) f->queue.data[o++] = f->queue.data[q];
            }
            f->queue.len = o;
            break;
        }
        case GS_MSG_GATHER_REQ: {
            uint64_t v = 0;
            gs_msg_t d;
            int have = gs_u64map_get(&f->store, key_of(m.u.gather_req.keys[0], m.u.gather_req.keys[1]), &v);
            cr_assert(have, "worker %s asked for a chunk it does not hold", p->name);
            memset(&d, 0, sizeof d);
            d.type = GS_MSG_DATA;
            d.u.data.req_id = m.u.gather_req.req_id;
            d.u.data.graph_id = m.u.gather_req.keys[0];
            d.u.data.task_id = m.u.gather_req.keys[1];
            d.u.data.status = GS_OK;
            d.u.data.data.data = (const uint8_t *)&v;
            d.u.data.data.len = sizeof v;
            tp_send(p, &d);
            break;
        }
        default:
            break;
        }
        gs_msg_cleanup(&m);
    }
    tp_drain(p);
}

static void fw_kill(fw_t *f)
{
    f->alive = 0;
    f->queue.len = 0;
    gs_u64map_cleanup(&f->store);
    gs_u64map_init(&f->store);
    if (f->p->conn != NULL) gs_conn_close(f->p->conn, GS_ERR_CONN_CLOSED);
}

/* Workers alive and not stalled. */
static int sim_nlive(const sim_t *s)
{
    int n = 0;
    for (int i = 0; i < s->nw; i++) n += s->w[i].alive && !s->w[i].stalled;
    return n;
}

static void sim_fault(sim_t *s)
{
    int alive[MAXW], n = 0;
    for (int i = 0; i < s->nw; i++) {
        if (s->w[i].alive && !s->w[i].stalled) alive[n++] = i;
    }
    if (n > 1 || (n == 1 && rndn(&s->rng, 4) == 0)) {
        fw_t *f = &s->w[alive[rndn(&s->rng, (uint32_t)n)]];
        if (rndn(&s->rng, 3) == 0) {
            f->stalled = 1;   /* like SIGSTOP: no heartbeats, nothing processed */
            f->p->heartbeat = 0;
            s->nstalls++;
        } else {
            fw_kill(f);       /* like SIGKILL */
            s->nkills++;
        }
    }
    if (s->nw < MAXW - 2 && (n <= 2 || rndn(&s->rng, 2) == 0)) sim_add_worker(s);
}

/* A random DAG of @a n tasks; deps on earlier tasks and (if @a next > 0) on externals
 * ext[0..next). Values in @a val (externals' values in @a extval). */
static void make_dag(rng_t *r, tg_t *g, int n, uint64_t src, const uint64_t *ext_tasks, const uint64_t *extval,
                     int next, uint64_t *val)
{
    uint64_t ext_ids[16];
    tg_init(g, 2);
    for (int k = 0; k < next; k++) ext_ids[k] = tg_ext(g, src, ext_tasks[k]);
    for (int t = 0; t < n; t++) {
        uint64_t deps[4], v = (uint64_t)t;
        int nd = t == 0 && next == 0 ? 0 : (int)rndn(r, 4);
        for (int d = 0; d < nd; d++) {
            uint64_t dv;
            if (next > 0 && (t == 0 || rndn(r, 3) == 0)) {
                int k = (int)rndn(r, (uint32_t)next);
                deps[d] = ext_ids[k];
                dv = extval[k];
            } else {
                uint32_t lo = t > 12 ? (uint32_t)t - 12 : 0;
                deps[d] = lo + rndn(r, (uint32_t)t - lo);
                dv = val[deps[d]];
            }
            v = mix(v, dv * (uint64_t)(d + 1));
        }
        tg_task(g, rndn(r, 2), nd, deps);
        val[t] = v;
    }
    /* outputs: the last few tasks and a random sample */
    for (int t = 0; t < n; t++) {
        if (t >= n - 3 || rndn(r, 10) == 0) tg_output(g, (uint64_t)t);
    }
}

static void sim_step(sim_t *s)
{
    uv_run(&s->th.loop, UV_RUN_NOWAIT);
    for (int i = 0; i < s->nw; i++) {
        fw_t *f = &s->w[i];
        if (f->alive && f->p->closed) {
            /* removed by gsched (stalled past the timeout) */
            fw_kill(f);
        }
        if (!f->alive || f->stalled) continue;
        fw_process(s, f);
        fw_run(s, f, 1 + (int)rndn(&s->rng, 6));
    }
    uv_run(&s->th.loop, UV_RUN_ONCE);
}

/* Wait for GRAPH_DONE of @a gid while stepping the simulation (faults every ~@a period steps). */
static void sim_until_done(sim_t *s, tp_t *c, uint64_t gid, int period, int *faults_left)
{
    uint64_t end = gs_now_ns() + 60ull * 1000000000ull;
    int step = 0;
    for (;;) {
        gs_msg_t m;
        if (tp_wait(c, GS_MSG_GRAPH_DONE, 0, &m)) {
            cr_assert_eq(m.u.graph_done.graph_id, gid);
            cr_assert_eq(m.u.graph_done.status, GS_OK, "graph failed: %s", (const char *)m.u.graph_done.message.data);
            gs_msg_cleanup(&m);
            return;
        }
        cr_assert_lt(gs_now_ns(), end, "graph %llu did not finish (kills %d, stalls %d)", (unsigned long long)gid,
                     s->nkills, s->nstalls);
        /* a loaded machine can starve this thread past the 120 ms heartbeat timeout, and gsched
         * then removes every simulated worker at once: one joins, as after the fault loop's
         * kills (else the graph could not finish once the faults ran out) */
        if (sim_nlive(s) == 0 && s->nw < MAXW) sim_add_worker(s);
        sim_step(s);
        if (++step % period == 0 && *faults_left > 0) {
            sim_fault(s);
            (*faults_left)--;
        }
    }
}

static void gather_check(sim_t *s, tp_t *c, uint64_t gid, const tg_t *g, const uint64_t *val)
{
    for (uint64_t o = 0; o < g->noutputs; o++) {
        gs_msg_t m;
        uint64_t keys[2] = {gid, g->outputs[o]}, v;
        memset(&m, 0, sizeof m);
        m.type = GS_MSG_GATHER_REQ;
        m.u.gather_req.req_id = 1000 + o;
        m.u.gather_req.n = 1;
        m.u.gather_req.keys = keys;
        tp_send(c, &m);
        uint64_t end = gs_now_ns() + 30ull * 1000000000ull;
        while (!tp_wait(c, GS_MSG_DATA, 0, &m)) {
            cr_assert_lt(gs_now_ns(), end, "no data for output %llu", (unsigned long long)g->outputs[o]);
            /* no faults come here, but a loaded machine can make gsched remove the last live
             * worker (heartbeats late) while the others stall: a cluster needs one to
             * recompute a lost output, as the fault loop's joins give it */
            if (sim_nlive(s) == 0 && s->nw < MAXW) sim_add_worker(s);
            sim_step(s);
        }
        cr_assert_eq(m.u.data.status, GS_OK);
        cr_assert_eq(m.u.data.req_id, 1000 + o);
        cr_assert_eq(m.u.data.data.len, 8);
        memcpy(&v, m.u.data.data.data, 8);
        cr_assert_eq(v, val[g->outputs[o]], "wrong value for task %llu of graph %llu",
                     (unsigned long long)g->outputs[o], (unsigned long long)gid);
        gs_msg_cleanup(&m);
    }
}

static void sim_run(uint64_t seed)
{
    sim_t *s = calloc(1, sizeof *s);
    gs_sched_params_t prm;
    static tg_t ga, gb;
    uint64_t va[128], vb[128], ext_tasks[16], extval[16];
    int faults = 6;
    cr_assert_not_null(s);
    s->rng.s = seed;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_HEARTBEAT_MS | GS_SCHED_FIELD_HEARTBEAT_TIMEOUT_MS |
                     GS_SCHED_FIELD_ALLOWED_FAILURES;
    prm.heartbeat_ms = 20;
    prm.heartbeat_timeout_ms = 120;
    prm.allowed_failures = 100;
    th_init(&s->th, &prm);
    for (int i = 0; i < 3; i++) sim_add_worker(s);
    tp_t *c = tp_client(&s->th, "client");

    make_dag(&s->rng, &ga, 100, 0, NULL, NULL, 0, va);
    uint64_t gida = tg_submit_ok(c, &ga, GS_SUBMIT_PERSIST);
    sim_until_done(s, c, gida, 15, &faults);
    int next = ga.noutputs < 16 ? (int)ga.noutputs : 16;
    for (int k = 0; k < next; k++) {
        ext_tasks[k] = ga.outputs[k];
        extval[k] = va[ga.outputs[k]];
    }
    make_dag(&s->rng, &gb, 100, gida, ext_tasks, extval, next, vb);
    uint64_t gidb = tg_submit_ok(c, &gb, 0);
    faults += 4;
    sim_until_done(s, c, gidb, 10, &faults);
    gather_check(s, c, gidb, &gb, vb);
    gather_check(s, c, gida, &ga, va);
    {
        gs_sched_stats_t st = th_stats(&s->th);
        cr_log_info("seed %llu: %d kills, %d stalls, %llu workers lost, %llu tasks recomputed, %llu assigned",
                    (unsigned long long)seed, s->nkills, s->nstalls, (unsigned long long)st.workers_lost_total,
                    (unsigned long long)st.tasks_recomputed_total, (unsigned long long)st.tasks_assigned_total);
        cr_assert_gt(st.workers_lost_total, 0);
    }

    th_fini(&s->th);
    for (int i = 0; i < s->nw; i++) {
        gs_u64map_cleanup(&s->w[i].store);
        GS_VEC_FREE(&s->w[i].queue);
    }
    free(s);
}

Test(scheduler_stress, random_graphs_survive_killed_and_stalled_workers)
{
    for (uint64_t seed = 1; seed <= 12; seed++) sim_run(seed * 7919);
}
