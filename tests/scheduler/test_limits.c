/* Limits: the task runtime limit (a worker that heartbeats but never reports a task) and the cap
 * on rapid worker churn. */
#include "harness.h"

#include "common/time.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <unistd.h>
#include <string.h>

static void limits_params(gs_sched_params_t *prm, uint32_t task_timeout_ms, uint32_t allowed_failures)
{
    memset(prm, 0, sizeof *prm);
    prm->field_mask = GS_SCHED_FIELD_TASK_TIMEOUT_MS | GS_SCHED_FIELD_ALLOWED_FAILURES;
    prm->task_timeout_ms = task_timeout_ms;
    prm->allowed_failures = allowed_failures;
}

/* One output task, no inputs. */
static uint64_t submit_one(tp_t *c)
{
    tg_t g;
    tg_init(&g, 1);
    tg_output(&g, tg_task(&g, 0, 0, NULL));
    return tg_submit_ok(c, &g, 0);
}

Test(scheduler_limits, a_task_not_reported_within_the_limit_is_retried_on_another_worker)
{
    th_t th;
    gs_sched_params_t prm;
    gs_msg_t m;
    uint64_t got[4];
    tp_t *silent = NULL, *other;
    limits_params(&prm, 300, 3);
    th_init(&th, &prm);
    tp_t *w1 = tp_worker(&th, "w1", 1), *w2 = tp_worker(&th, "w2", 1);
    w1->heartbeat = w2->heartbeat = 1;
    tp_t *c = tp_client(&th, "c");
    uint64_t gid = submit_one(c);
    for (int i = 0; i < TH_TIMEOUT_MS / 10 && silent == NULL; i++) {
        if (tp_wait(w1, GS_MSG_TASK_ASSIGN, 5, &m)) silent = w1;
        else if (tp_wait(w2, GS_MSG_TASK_ASSIGN, 5, &m)) silent = w2;
    }
    cr_assert_not_null(silent, "the task was never assigned");
    cr_assert_eq(m.u.task_assign.task_id[0], 0);
    gs_msg_cleanup(&m);
    other = silent == w1 ? w2 : w1;
    /* the silent worker heartbeats but never reports: after the limit the task moves */
    cr_assert_eq(tw_collect(other, gid, 1, got, 4, TH_TIMEOUT_MS), 1, "the task was not retried elsewhere");
    cr_assert_eq(got[0], 0);
    cr_assert_eq(th_stats(&th).tasks_timed_out_total, 1);
    tw_done1(other, gid, 0);
    tp_expect(c, GS_MSG_GRAPH_DONE, &m);
    cr_assert_eq(m.u.graph_done.status, GS_OK);
    gs_msg_cleanup(&m);
    /* the late result is released on the worker that reports it; both workers stay */
    tw_done1(silent, gid, 0);
    tp_expect(silent, GS_MSG_RELEASE, &m);
    gs_msg_cleanup(&m);
    gs_sched_stats_t st = th_stats(&th);
    cr_assert_eq(st.nworkers, 2);
    cr_assert_eq(st.tasks_timed_out_total, 1);
    cr_assert(tp_none(silent, GS_MSG_TASK_ASSIGN, 20));
    th_fini(&th);
}

/* A scheduler with a task timeout of @a timeout_ms, one heartbeating worker @a name, a client
 * and a one-task graph (*gid_p) whose task the worker has received. */
static tp_t *start_one(th_t *th, uint32_t timeout_ms, uint32_t allowed_failures, const char *name, tp_t **c_p,
                       uint64_t *gid_p)
{
    gs_sched_params_t prm;
    uint64_t got[4];
    limits_params(&prm, timeout_ms, allowed_failures);
    th_init(th, &prm);
    tp_t *w = tp_worker(th, name, 1);
    w->heartbeat = 1;
    *c_p = tp_client(th, "c");
    *gid_p = submit_one(*c_p);
    cr_assert_eq(tw_collect(w, *gid_p, 1, got, 4, TH_TIMEOUT_MS), 1);
    return w;
}

Test(scheduler_limits, a_single_silent_worker_fails_the_graph_naming_the_task_and_the_limit)
{
    th_t th;
    gs_msg_t m;
    uint64_t got[4], gid;
    tp_t *c, *w = start_one(&th, 200, 1, "lazy", &c, &gid);
    /* the only worker gets it again (one failure allowed), then the graph fails */
    cr_assert_eq(tw_collect(w, gid, 1, got, 4, TH_TIMEOUT_MS), 1, "the task was not retried");
    tp_expect(c, GS_MSG_GRAPH_DONE, &m);
    cr_assert_eq(m.u.graph_done.graph_id, gid);
    cr_assert_eq(m.u.graph_done.status, GS_ERR_TIMED_OUT);
    cr_assert_gt(m.u.graph_done.message.len, 0);
    const char *msg = (const char *)m.u.graph_done.message.data;
    cr_assert(strstr(msg, "task 0 (layer 0, block 0)") != NULL, "%s", msg);
    cr_assert(strstr(msg, "worker lazy") != NULL, "%s", msg);
    cr_assert(strstr(msg, "task timeout of 200 ms") != NULL, "%s", msg);
    gs_msg_cleanup(&m);
    gs_sched_stats_t st = th_stats(&th);
    cr_assert(st.tasks_timed_out_total == 2 && st.nworkers == 1, "timed out %llu, workers %u",
              (unsigned long long)st.tasks_timed_out_total, st.nworkers);
    th_fini(&th);
}

/* gsched's own loop stands still (SIGSTOP, a VM pause) past the limit: not counted. */
Test(scheduler_limits, a_stall_of_gsched_itself_does_not_time_out_tasks)
{
    th_t th;
    gs_msg_t m;
    uint64_t gid;
    tp_t *c, *w = start_one(&th, 1000, 0, "w", &c, &gid);
    th_run_for(&th, 100);         /* the housekeeping timer has run once */
    usleep(2500 * 1000);          /* the stall: 2.5 task timeouts */
    th_run_for(&th, 200);
    cr_assert_geq(th_stats(&th).stalls_total, 1, "the stall was not noticed");
    cr_assert_eq(th_stats(&th).tasks_timed_out_total, 0, "gsched's own stall timed out a task");
    tw_done1(w, gid, 0);
    tp_expect(c, GS_MSG_GRAPH_DONE, &m);
    cr_assert_eq(m.u.graph_done.status, GS_OK);
    gs_msg_cleanup(&m);
    th_fini(&th);
}

/* A worker registration without waiting for its answer. */
static tp_t *register_worker(th_t *th, const char *name)
{
    tp_t *p = tp_connect(th, GS_PROTO_VERSION, "", GS_ROLE_WORKER, name);
    gs_msg_t m;
    tp_expect(p, GS_MSG_WELCOME, &m);
    gs_msg_cleanup(&m);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_WORKER_REGISTER;
    m.u.worker_register.name.data = (const uint8_t *)name;
    m.u.worker_register.name.len = strlen(name);
    m.u.worker_register.nthreads = 1;
    tp_send(p, &m);
    return p;
}

Test(scheduler_limits, the_churn_cap_refuses_rapid_re_registration_and_admits_after_the_window)
{
    th_t th;
    gs_sched_params_t prm;
    gs_msg_t m;
    const uint32_t window_ms = 1000;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_CHURN;
    prm.churn_max = 3;
    prm.churn_window_ms = window_ms;
    th_init(&th, &prm);
    tp_t *steady = tp_worker(&th, "steady", 1);
    steady->heartbeat = 1;
    /* more workers than the cap may register at once: only departures count */
    tp_t *many[4];
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        many[i] = tp_worker(&th, name, 1);
    }
    cr_assert_eq(th_stats(&th).nworkers, 5);
    /* three of them leave at once: the cap is reached */
    for (int i = 0; i < 3; i++) tp_close(many[i]);
    for (int i = 0; i < TH_TIMEOUT_MS / 10 && th_stats(&th).workers_lost_total < 3; i++) th_run_for(&th, 10);
    cr_assert_eq(th_stats(&th).workers_lost_total, 3);
    uint64_t t0 = gs_now_ns();
    tp_t *late = register_worker(&th, "again");
    tp_expect(late, GS_MSG_ERROR, &m);
    cr_assert_eq(m.u.error.status, GS_ERR_BUSY);
    cr_assert(strstr((const char *)m.u.error.message.data, "churn cap 3") != NULL, "%s",
              (const char *)m.u.error.message.data);
    gs_msg_cleanup(&m);
    cr_assert(tp_wait_closed(late, TH_TIMEOUT_MS));
    gs_sched_stats_t st = th_stats(&th);
    cr_assert_eq(st.churn_refused_total, 1);
    cr_assert_eq(st.nworkers, 2, "a refused registration touched the live workers");
    /* after the window the address is admitted again */
    uint64_t waited_ms = (gs_now_ns() - t0) / 1000000ull;
    if (waited_ms < window_ms) th_run_for(&th, (int)(window_ms - waited_ms) + 20);
    tp_t *back = tp_worker(&th, "again", 1);
    cr_assert_eq(th_stats(&th).nworkers, 3);
    cr_assert_eq(th_stats(&th).churn_refused_total, 1);
    cr_assert(tp_none(back, GS_MSG_ERROR, 20));
    th_fini(&th);
}
