/* A worker paused (SIGSTOP) past gsched's heartbeat timeout is removed; resumed, it registers
 * again as a new incarnation and the cluster computes correctly with it. */
#include "cluster.h"
#include "reference.h"

#include "common/time.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

static void arm(void)
{
    alarm(240);
}

static void down(void)
{
    tp_kill_all();
}

/* Poll gsched's worker count until pred(count) holds or @a timeout_s passed; returns the last
 * count seen. */
static int wait_nworkers(gs_client_h c, int (*pred)(int), double timeout_s)
{
    double end = gs_now_s() + timeout_s;
    int n;
    for (;;) {
        n = gs_client_nworkers(c);
        if (pred(n) || gs_now_s() > end) return n;
        usleep(20000);
    }
}

static int fewer_than_two(int n)
{
    return n >= 0 && n < 2;
}

static int two(int n)
{
    return n == 2;
}

Test(integration_rejoin, paused_worker_rejoins_and_the_cluster_keeps_working, .init = arm,
     .fini = down)
{
    const char *const sched_args[] = {"--heartbeat-interval", "200ms", "--heartbeat-timeout",
                                      "2s", NULL};
    int64_t shape[2] = {200, 200}, chunks[2] = {50, 50};
    tcluster_t c;
    gs_client_h client;
    gs_array_h x, s;
    double v = 0, want = 0;
    int n;

    cr_assert(tc_start(&c, 2, NULL, sched_args), "cluster did not start");
    client = tc_connect(&c, GS_LOWER_DEFAULT);
    cr_assert_not_null(client, "%s", gs_last_error());
    cr_assert_eq(wait_nworkers(client, two, 60.0), 2);

    cr_assert_eq(kill(c.workers[0], SIGSTOP), 0);
    n = wait_nworkers(client, fewer_than_two, 60.0);
    cr_assert(fewer_than_two(n), "gsched still counts %d workers with one paused", n);
    cr_assert_eq(kill(c.workers[0], SIGCONT), 0);
    n = wait_nworkers(client, two, 60.0);
    cr_assert_eq(n, 2, "the resumed worker did not rejoin (%d workers)", n);
    cr_assert(tp_alive(c.workers[0]), "the resumed worker exited instead of rejoining");

    OK(gs_array_random_normal(5, 10, 1, 2, shape, chunks, &x));
    OK(gs_array_reduce(GS_RED_SUM, x, NULL, &s));
    OK(gs_client_compute_scalar(client, s, &v));
    for (int64_t i = 0; i < shape[0]; i++)
        for (int64_t j = 0; j < shape[1]; j++)
            want += gs_random_normal_v3(5, (uint64_t)(i * shape[1] + j), 10, 1);
    cr_assert(ref_rel(v, want) <= 1e-12, "%.17g vs %.17g", v, want);
    cr_assert(tp_alive(c.workers[0]) && tp_alive(c.workers[1]));
    gs_array_release(x);
    gs_array_release(s);
    gs_client_destroy(client);
}

/* gsched stopped in order (SIGTERM: gs_sched_stop) while it holds a persisted array and a graph
 * runs sends SHUTDOWN to its workers, which exit at once (status 0). A worker whose connection
 * closed without SHUTDOWN would instead try to rejoin for its whole --connect-timeout (120 s
 * here), past the 20 s this test waits. */
Test(integration_rejoin, stopped_gsched_shuts_its_workers_down_instead_of_leaving_them_to_rejoin,
     .init = arm, .fini = down)
{
    const char *const worker_args[] = {"--connect-timeout", "120000", NULL};
    int64_t shape[2] = {3000, 3000}, chunks[2] = {100, 100};
    tcluster_t c;
    gs_client_h client;
    gs_array_h x, y, s;
    gs_future_h f;
    int st;

    cr_assert(tc_start(&c, 0, NULL, NULL), "gsched did not start");
    cr_assert_gt(tc_add_worker_args(&c, "w0", worker_args), 0);
    cr_assert_gt(tc_add_worker_args(&c, "w1", worker_args), 0);
    client = tc_connect(&c, GS_LOWER_DEFAULT);
    cr_assert_not_null(client, "%s", gs_last_error());
    cr_assert_eq(wait_nworkers(client, two, 60.0), 2);

    OK(gs_array_random_normal(7, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_persist(client, x));
    OK(gs_array_unary(GS_UNARY_EXP, x, &y));
    OK(gs_array_reduce(GS_RED_SUM, y, NULL, &s));
    OK(gs_client_submit(client, s, 0, &f));

    cr_assert_eq(kill(c.sched, SIGTERM), 0);
    cr_assert(tp_wait_exit(c.sched, &st, 20.0), "gsched did not exit on SIGTERM");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "gsched status %d", st);
    for (int i = 0; i < 2; i++) {
        cr_assert(tp_wait_exit(c.workers[i], &st, 20.0),
                  "worker %d did not exit after gsched stopped (no SHUTDOWN: rejoining)", i);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d status %d", i, st);
    }
    gs_future_destroy(f);
    gs_array_release(x);
    gs_array_release(y);
    gs_array_release(s);
    gs_client_destroy(client);
}
