/* A worker paused (SIGSTOP) past gsched's heartbeat timeout is removed; resumed, it registers
 * again as a new incarnation and the cluster computes correctly with it. */
#include "cluster.h"
#include "reference.h"

#include "common/time.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <signal.h>
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
            want += gs_random_normal(5, (uint64_t)(i * shape[1] + j), 10, 1);
    cr_assert(ref_rel(v, want) <= 1e-12, "%.17g vs %.17g", v, want);
    cr_assert(tp_alive(c.workers[0]) && tp_alive(c.workers[1]));
    gs_array_release(x);
    gs_array_release(s);
    gs_client_destroy(client);
}
