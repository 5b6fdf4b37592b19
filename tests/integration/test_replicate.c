/* Replicas with real processes: list the workers, copy a persisted array to one worker, kill the
 * other holder and read the array again -- served from the copies, nothing recomputed. */
#include "cluster.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

static void arm(void)
{
    alarm(120);
}

static void down(void)
{
    tp_kill_all();
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) n++;
    return n;
}

Test(integration_replicate, copies_survive_the_loss_of_the_original_holder, .init = arm, .fini = down)
{
    static char log[1 << 20];
    char bin[PATH_MAX], addr[96];
    const char *argv[] = {tp_bin("gsched", bin, sizeof(bin)), "--host", "127.0.0.1", "--port", "0",
                          "--log-level", "info", NULL};
    tcluster_t c;
    gs_client_h client;
    gs_client_worker_info_t wi[4];
    size_t nw = 0;
    int64_t shape[2] = {400, 400}, chunks[2] = {100, 100};
    gs_array_h a, s;
    double v0 = 0, v1 = 1;
    int status;

    /* gsched with its log captured (the survivors are logged at info level) */
    memset(&c, 0, sizeof(c));
    c.sched = tp_spawn_capture(argv, &c.sched_out, NULL);
    cr_assert_gt(c.sched, 0);
    cr_assert(tp_read_line(c.sched_out, "gsched listening on ", addr, sizeof(addr), NULL, 0, 20.0));
    snprintf(c.address, sizeof(c.address), "%s", addr);
    cr_assert_gt(tc_add_worker(&c, "w0"), 0);
    cr_assert_gt(tc_add_worker(&c, "w1"), 0);
    client = tc_connect(&c, GS_LOWER_DEFAULT);
    cr_assert_not_null(client, "%s", gs_last_error());
    OK(gs_client_wait_for_workers(client, 2, 30.0));

    OK(gs_client_workers(client, wi, 4, &nw));
    cr_assert_eq(nw, 2);
    for (size_t i = 0; i < nw; i++) {
        cr_assert(strcmp(wi[i].name, "w0") == 0 || strcmp(wi[i].name, "w1") == 0, "name %s", wi[i].name);
        /* the suite's workers: cpu unless $GS_TEST_BACKEND=cuda (cluster.c) */
        const char *tb = getenv("GS_TEST_BACKEND");
        cr_assert_str_eq(wi[i].backend, tb != NULL && strcmp(tb, "cuda") == 0 ? "cuda" : "cpu");
        cr_assert_neq(strstr(wi[i].address, "127.0.0.1:"), NULL, "address %s", wi[i].address);
        cr_assert_gt(wi[i].id, 0);
        if (strcmp(wi[i].backend, "cpu") == 0) cr_assert_eq(wi[i].nthreads, 1);
    }
    OK(gs_client_workers(client, NULL, 0, &nw));
    cr_assert_eq(nw, 2);

    OK(gs_array_random_normal(0, 5, 0, 1, shape, chunks, &a));   /* 16 chunks */
    OK(gs_array_reduce(GS_RED_SUM, a, NULL, &s));
    cr_assert_eq(gs_client_replicate(client, a, "w0", 30.0), GS_ERR_NOT_FOUND, "not persisted yet");
    OK(gs_client_persist(client, a));
    OK(gs_client_compute_scalar(client, s, &v0));

    cr_assert_eq(gs_client_replicate(client, a, "nobody", 30.0), GS_ERR_NOT_FOUND);
    cr_assert_neq(strstr(gs_last_error(), "nobody"), NULL, "%s", gs_last_error());
    OK(gs_client_replicate(client, a, "w0", 30.0));
    OK(gs_client_replicate(client, a, "w0", 30.0));   /* everything is there: a no-op */

    /* w1 dies: every chunk it held has a copy on w0 */
    cr_assert_eq(kill(c.workers[1], SIGKILL), 0);
    waitpid(c.workers[1], &status, 0);
    for (int i = 0; i < 300 && gs_client_nworkers(client) != 1; i++) usleep(50000);
    cr_assert_eq(gs_client_nworkers(client), 1);
    OK(gs_client_compute_scalar(client, s, &v1));
    cr_assert_eq(v1, v0, "%.17g after the loss, %.17g before", v1, v0);

    gs_array_release(s);
    gs_array_release(a);
    gs_client_destroy(client);
    kill(c.sched, SIGTERM);
    tp_read_all(c.sched_out, log, sizeof(log), 10.0);
    cr_assert_gt(count_of(log, "lost with worker w1 survives on worker w0"), 0,
                 "no chunk of w1 was served from its copy:\n%s", log);
    /* the copies came over a measured peer transfer path (80 kB chunks are below the
     * bandwidth sample size, so no "transfer" line is required) */
}
