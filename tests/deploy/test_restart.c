/* A lost device, end to end, with real daemons started by gs-local-cluster on loopback: the
 * job whose kernel lost the device fails naming the kernel, the worker tells gsched, exits 75
 * and the launcher restarts it; the restarted worker registers again and runs the next job;
 * the restart limit stops the cluster; SIGTERM during a restart's backoff stops it cleanly.
 *
 * Without a GPU the loss is the CPU backend's test knob (chunkops.h test_lose_device_on, set
 * for the workers through $GS_WORKER_TEST_LOSE_DEVICE_ON): the user kernel gs_test_crash really
 * crashes in its forked child and the backend reports GS_ERR_DEVICE_LOST from then on, as a
 * CUDA context does after an illegal address. With a GPU, the last test runs the same path with
 * a user NVRTC kernel that writes out of bounds on a CUDA worker (skipped without a device).
 *
 * This process is a child subreaper: anything the launcher leaves behind shows up as its child. */
#include "../integration/cluster.h"
#include "deploy_util.h"

#include "common/time.h"
#include "deploy/gpuinfo.h"
#include "deploy/restart.h"

#include <gsched/config.h>

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void setup(void)
{
    dp_subreaper_start(180);
}

/* The launcher's merged stdout and stderr, read line by line (what follows a line stays
 * buffered for the next wait). */
typedef struct launcher {
    pid_t pid;
    int fd;
    char buf[1 << 14];
    size_t len;
    char log[1 << 17];          /* every line so far, for failure messages */
    char address[96], token[80];
} launcher_t;

/* Read lines until one contains @a needle; copy it to @a line (may be NULL). 1, or 0 on EOF or
 * timeout. */
static int wait_line(launcher_t *l, const char *needle, char *line, size_t line_len, double timeout_s)
{
    double deadline = gs_now_s() + timeout_s;
    for (;;) {
        char *nl;
        while ((nl = memchr(l->buf, '\n', l->len)) != NULL) {
            size_t ll = (size_t)(nl - l->buf);
            int hit;
            *nl = '\0';
            hit = strstr(l->buf, needle) != NULL;
            if (strlen(l->log) + ll + 2 < sizeof(l->log)) {
                strcat(l->log, l->buf);
                strcat(l->log, "\n");
            }
            if (hit && line != NULL) snprintf(line, line_len, "%.*s", (int)(line_len - 1), l->buf);
            memmove(l->buf, nl + 1, l->len - ll - 1);
            l->len -= ll + 1;
            if (hit) return 1;
        }
        double left = deadline - gs_now_s();
        struct pollfd p = {l->fd, POLLIN, 0};
        ssize_t n;
        if (left <= 0) return 0;
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        if (l->len == sizeof(l->buf) - 1) l->len = 0;
        n = read(l->fd, l->buf + l->len, sizeof(l->buf) - 1 - l->len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        l->len += (size_t)n;
    }
}

/* Start gs-local-cluster --port 0 --backend BACKEND --nworkers 1 EXTRA..., its workers losing
 * their device in gs_test_crash, and wait for its ready line. */
static void launch_n(launcher_t *l, const char *backend, const char *nworkers,
                     const char *const *extra)
{
    char bin[PATH_MAX], line[512];
    const char *argv[24];
    const char *const pre[] = {"--dashboard-address", "none", "--backend", backend,
                               "--nworkers", nworkers, NULL};
    memset(l, 0, sizeof(*l));
    dp_launcher_argv(argv, 24, bin, sizeof(bin), pre, extra);
    cr_assert_eq(setenv("GS_WORKER_TEST_LOSE_DEVICE_ON", "gs_test_crash", 1), 0);
    l->pid = tp_spawn_capture(argv, &l->fd, NULL);
    cr_assert_gt(l->pid, 0);
    cr_assert(wait_line(l, "gs-local-cluster token ", line, sizeof line, 30.0), "%s", l->log);
    cr_assert_eq(sscanf(strstr(line, "gs-local-cluster token "), "gs-local-cluster token %79s",
                        l->token), 1);
    cr_assert(wait_line(l, "gs-local-cluster ready ", line, sizeof line, 30.0), "%s", l->log);
    snprintf(l->address, sizeof(l->address), "%s",
             strstr(line, "gs-local-cluster ready ") + strlen("gs-local-cluster ready "));
}

static void launch(launcher_t *l, const char *backend, const char *const *extra)
{
    launch_n(l, backend, "1", extra);
}

static gs_client_h connect_to(const launcher_t *l)
{
    gs_client_params_t p;
    gs_client_h c = NULL;
    dp_client_params(&p, l->address, l->token);
    cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
    return c;
}

/* Wait for the launcher to exit; returns its wait status. Then nothing of the cluster is left
 * (orphans would be re-parented to this subreaper). */
static int wait_gone(launcher_t *l, double timeout_s)
{
    int st = 0;
    double deadline;
    pid_t kids[8];
    cr_assert(tp_wait_exit(l->pid, &st, timeout_s), "the launcher did not exit\n%s", l->log);
    deadline = gs_now_s() + 5.0;
    while (tp_children(getpid(), kids, 8) > 0 && gs_now_s() < deadline) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        usleep(2000);
    }
    cr_assert_eq(tp_children(getpid(), kids, 8), 0, "a daemon outlived the launcher");
    return st;
}

/* Disconnect @a c and SIGTERM the launcher: it must exit with status 0 within @a timeout_s,
 * leaving nothing of the cluster behind (wait_gone). */
static void stop_cleanly(launcher_t *l, gs_client_h c, double timeout_s)
{
    int st;
    gs_client_destroy(c);
    cr_assert_eq(kill(l->pid, SIGTERM), 0);
    st = wait_gone(l, timeout_s);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher status 0x%x\n%s", st, l->log);
}

/* Run gs_test_crash over a 40 x 30 array in 10 x 10 chunks: the job must fail naming the kernel
 * and the lost device. */
static void run_crashing_job(gs_client_h c)
{
    const int64_t shape[2] = {40, 30}, chunks[2] = {10, 10};
    gs_user_kernel_t bad = {GS_TEST_KERNELS, "gs_test_crash", NULL, 0, NULL, 0};
    gs_array_h x, m;
    double out[1200];
    gs_status_t st;
    cr_assert_eq(gs_array_random_normal(3, 0, 1, 2, shape, chunks, &x), GS_OK);
    cr_assert_eq(gs_array_map_blocks(&bad, 1, &x, 2, shape, chunks, &m), GS_OK, "%s",
                 gs_last_error());
    st = gs_client_compute(c, m, out, 1200);
    cr_assert_eq(st, GS_ERR_TASK_FAILED, "%s: %s", gs_status_name(st), gs_last_error());
    cr_assert(strstr(gs_last_error(), "kernel gs_test_crash lost the device") != NULL &&
                  strstr(gs_last_error(), "GS_ERR_DEVICE_LOST") != NULL &&
                  strstr(gs_last_error(), "Segmentation fault") != NULL,
              "%s", gs_last_error());
    gs_array_release(m);
    gs_array_release(x);
}

/* A job that must come out exact: gs_test_position over ones(57, 43) in 10 x 9 chunks. */
static void run_good_job(gs_client_h c)
{
    const int64_t shape[2] = {57, 43}, chunks[2] = {10, 9};
    gs_user_kernel_t pos = {GS_TEST_KERNELS, "gs_test_position", NULL, 0, NULL, 0};
    gs_array_h x, m;
    static double out[57 * 43];
    cr_assert_eq(gs_array_ones(2, shape, chunks, &x), GS_OK);
    cr_assert_eq(gs_array_map_blocks(&pos, 1, &x, 2, shape, chunks, &m), GS_OK);
    cr_assert_eq(gs_client_compute(c, m, out, 57 * 43), GS_OK, "%s", gs_last_error());
    for (int i = 0; i < 57; i++)
        for (int j = 0; j < 43; j++)
            cr_assert_eq(out[i * 43 + j], i * 1000.0 + j + 0.5, "(%d, %d): %.17g", i, j,
                         out[i * 43 + j]);
    gs_array_release(m);
    gs_array_release(x);
}

/* The policy alone (deploy/restart.h): backoff 0.5 s doubling to 8 s per restart in the window,
 * the limit counted per window, restarts leaving the window forgotten, 0 = never. */
Test(deploy_restart, the_policy_backs_off_and_counts_restarts_per_window)
{
    gs_restart_policy_t p;
    gs_restart_hist_t h;
    const double want[5] = {0.5, 1, 2, 4, 8};
    int n = -1;
    gs_restart_policy_default(&p);
    p.limit = 6;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(gs_restart_next(&p, &h, 100.0 + i, &n), want[i], "restart %d", i);
        cr_assert_eq(n, i + 1);
    }
    cr_assert_eq(gs_restart_next(&p, &h, 106.0, &n), 8.0);   /* capped */
    cr_assert_eq(gs_restart_next(&p, &h, 107.0, &n), -1.0);  /* 6 in the window: the limit */
    cr_assert_eq(n, 6);
    /* restarts are recorded at their start (100.5, 102, 104, 107, 112, 114): 600 s later the
     * first three have left the window: room again, a shorter backoff */
    cr_assert_eq(gs_restart_next(&p, &h, 705.0, &n), 4.0);
    cr_assert_eq(n, 4);
    p.limit = 0;
    memset(&h, 0, sizeof h);
    cr_assert_eq(gs_restart_next(&p, &h, 1.0, &n), -1.0);
    p.limit = 2;
    p.delay_s = 30;
    p.max_delay_s = 30;
    cr_assert_eq(gs_restart_next(&p, &h, 1.0, &n), 30.0);
    cr_assert_eq(gs_restart_next(&p, &h, 2.0, &n), 30.0);
}

/* (a) + (b): the faulting job fails with the kernel's name; the worker exits 75, is restarted,
 * registers again and (being the only worker) runs the next job, exactly. */
Test(deploy_restart, a_lost_device_fails_its_job_and_the_restarted_worker_runs_the_next, .init = setup,
     .fini = dp_children_kill)
{
    static launcher_t l;
    char line[512];
    gs_client_h c;
    double t0, t1;
    launch(&l, "cpu", NULL);
    c = connect_to(&l);
    t0 = gs_now_s();
    run_crashing_job(c);
    t1 = gs_now_s();
    cr_assert(wait_line(&l, "restarting it in 0.5 s (restart 1 of 5 in 600 s)", line, sizeof line,
                        30.0), "%s", l.log);
    cr_assert(strstr(line, "worker cpu-0") != NULL &&
                  strstr(line, "exited with status 75 (device lost)") != NULL, "%s", line);
    cr_assert(wait_line(&l, "gs-local-cluster: worker cpu-0 restarted (pid ", NULL, 0, 30.0), "%s",
              l.log);
    cr_assert_eq(gs_client_wait_for_workers(c, 1, 30.0), GS_OK, "%s", gs_last_error());
    cr_log_info("lost device: the job failed after %.3f s; the restarted worker registered %.3f s "
                "later (backoff 0.5 s)", t1 - t0, gs_now_s() - t1);
    run_good_job(c);
    /* gsched logged why the worker left (its ERROR), and the launcher is still up */
    cr_assert(strstr(l.log, "is leaving: GS_ERR_DEVICE_LOST: kernel gs_test_crash lost the "
                            "device") != NULL, "%s", l.log);
    cr_assert_eq(kill(l.pid, 0), 0);
    stop_cleanly(&l, c, 20.0);
}

/* Two workers: a job with chunks persisted on both runs while a one-task job loses one
 * worker's device; the first completes exactly (the lost chunks recomputed, the lost worker's
 * tasks reassigned), the second fails, and the worker comes back. */
Test(deploy_restart, other_jobs_complete_exactly_while_a_worker_is_lost_and_restarted,
     .init = setup, .fini = dp_children_kill)
{
    static launcher_t l;
    const int64_t shape[2] = {400, 400}, chunks[2] = {20, 20}, one[2] = {10, 10};
    gs_user_kernel_t bad = {GS_TEST_KERNELS, "gs_test_crash", NULL, 0, NULL, 0};
    gs_array_h y, yy, sum, x, m;
    gs_future_h f;
    double v = 0, out[100];
    gs_status_t st;
    gs_client_h c;
    launch_n(&l, "cpu", "2", NULL);
    c = connect_to(&l);
    cr_assert_eq(gs_array_ones(2, shape, chunks, &y), GS_OK);
    cr_assert_eq(gs_client_persist(c, y), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_array_binary(GS_BINARY_ADD, y, y, &yy), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, yy, NULL, &sum), GS_OK);
    cr_assert_eq(gs_client_submit(c, sum, 0, &f), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_array_ones(2, one, one, &x), GS_OK);
    cr_assert_eq(gs_array_map_blocks(&bad, 1, &x, 2, one, one, &m), GS_OK);
    st = gs_client_compute(c, m, out, 100);
    cr_assert_eq(st, GS_ERR_TASK_FAILED, "%s: %s", gs_status_name(st), gs_last_error());
    cr_assert(strstr(gs_last_error(), "kernel gs_test_crash lost the device") != NULL, "%s",
              gs_last_error());
    cr_assert_eq(gs_future_gather(f, &v, 1), GS_OK, "%s", gs_last_error());
    cr_assert_eq(v, 2.0 * 400 * 400, "%.17g", v);
    gs_future_destroy(f);
    cr_assert(wait_line(&l, "restarted (pid ", NULL, 0, 30.0), "%s", l.log);
    cr_assert_eq(gs_client_wait_for_workers(c, 2, 30.0), GS_OK, "%s", gs_last_error());
    /* and again, on the restarted cluster (y's lost chunks recomputed once more if needed) */
    cr_assert_eq(gs_client_compute_scalar(c, sum, &v), GS_OK, "%s", gs_last_error());
    cr_assert_eq(v, 2.0 * 400 * 400, "%.17g", v);
    cr_assert(strstr(l.log, "restart 2 of") == NULL, "a second restart:\n%s", l.log);
    gs_array_release(m);
    gs_array_release(x);
    gs_array_release(sum);
    gs_array_release(yy);
    gs_array_release(y);
    stop_cleanly(&l, c, 20.0);
}

/* (c): past --restart-limit the launcher stops the cluster and says why. */
Test(deploy_restart, the_restart_limit_stops_the_cluster, .init = setup, .fini = dp_children_kill)
{
    static launcher_t l;
    const char *extra[] = {"--restart-limit", "1", "--restart-delay", "0.05", NULL};
    gs_client_h c;
    int st;
    launch(&l, "cpu", extra);
    c = connect_to(&l);
    run_crashing_job(c);
    cr_assert(wait_line(&l, "gs-local-cluster: worker cpu-0 restarted (pid ", NULL, 0, 30.0), "%s",
              l.log);
    cr_assert_eq(gs_client_wait_for_workers(c, 1, 30.0), GS_OK, "%s", gs_last_error());
    run_crashing_job(c);
    cr_assert(wait_line(&l, "restart limit reached (1 restarts in 600 s, --restart-limit 1); "
                            "stopping the cluster", NULL, 0, 30.0), "%s", l.log);
    gs_client_destroy(c);
    st = wait_gone(&l, 20.0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "launcher status 0x%x\n%s", st, l.log);
}

/* (d): SIGTERM while a restart waits out its backoff: a clean stop, no restart. */
Test(deploy_restart, sigterm_during_the_backoff_stops_cleanly_without_a_restart, .init = setup,
     .fini = dp_children_kill)
{
    static launcher_t l;
    const char *extra[] = {"--restart-delay", "120", NULL};
    gs_client_h c;
    launch(&l, "cpu", extra);
    c = connect_to(&l);
    run_crashing_job(c);
    cr_assert(wait_line(&l, "restarting it in 120.0 s", NULL, 0, 30.0), "%s", l.log);
    stop_cleanly(&l, c, 20.0);
    wait_line(&l, "never printed", NULL, 0, 2.0);   /* the rest of its output, up to EOF */
    cr_assert(strstr(l.log, "restarted (pid") == NULL, "%s", l.log);
}

/* With a GPU: a user NVRTC kernel that writes far out of bounds (an illegal address, a sticky
 * CUDA error) on a CUDA worker; the job fails naming the kernel and the CUDA error, the worker
 * is restarted, and the next CUDA kernel runs exactly on the fresh context. */
Test(deploy_restart, an_illegal_address_in_a_cuda_kernel_restarts_the_gpu_worker, .init = setup,
     .fini = dp_children_kill)
{
    static launcher_t l;
    static const char oob[] =
        "extern \"C\" __global__ void oob(gs_cuda_args_t a)\n"
        "{\n"
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < a.n_out) a.out.data[i + (1LL << 40)] = 1.0;\n"
        "}\n";
    static const char twice[] =
        "extern \"C\" __global__ void twice(gs_cuda_args_t a)\n"
        "{\n"
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < a.n_out) a.out.data[i] = 2.0 * a.in[0].data[i];\n"
        "}\n";
    const int64_t shape[2] = {50, 30}, chunks[2] = {20, 10};
    gs_user_kernel_t kbad = {NULL, "oob", NULL, 0, oob, 0}, kgood = {NULL, "twice", NULL, 0, twice, 0};
    gs_array_h x, m;
    static double out[1500], ref[1500];
    gs_status_t st;
    gs_client_h c;
    {
        gs_gpu_t gpus[GS_GPU_MAX];
        if (strstr(GS_VERSION_DESCRIPTION, "cuda backend: yes") == NULL)
            cr_skip_test("this build has no CUDA backend");
        if (gs_gpu_discover(gpus) == 0) cr_skip_test("no GPU visible");
    }
    launch(&l, "cuda", NULL);
    c = connect_to(&l);
    cr_assert_eq(gs_array_random_normal(4, 0, 1, 2, shape, chunks, &x), GS_OK);
    cr_assert_eq(gs_client_compute(c, x, ref, 1500), GS_OK, "%s", gs_last_error());
    /* x persisted: the faulting job runs only the faulting kernel (the worker blames a user's
     * kernel in flight anyway, worker.h "Device loss"); its chunks are recomputed after */
    cr_assert_eq(gs_client_persist(c, x), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_array_map_blocks(&kbad, 1, &x, 2, shape, chunks, &m), GS_OK);
    st = gs_client_compute(c, m, out, 1500);
    cr_assert_eq(st, GS_ERR_TASK_FAILED, "%s: %s", gs_status_name(st), gs_last_error());
    cr_assert(strstr(gs_last_error(), "kernel oob lost the device") != NULL &&
                  strstr(gs_last_error(), "cudaErrorIllegalAddress") != NULL,
              "%s", gs_last_error());
    gs_array_release(m);
    cr_assert(wait_line(&l, "exited with status 75 (device lost); restarting it in", NULL, 0, 60.0),
              "%s", l.log);
    cr_assert(wait_line(&l, "gs-local-cluster: worker gpu-0 restarted (pid ", NULL, 0, 30.0), "%s",
              l.log);
    cr_assert_eq(gs_client_wait_for_workers(c, 1, 60.0), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_array_map_blocks(&kgood, 1, &x, 2, shape, chunks, &m), GS_OK);
    cr_assert_eq(gs_client_compute(c, m, out, 1500), GS_OK, "%s", gs_last_error());
    for (int i = 0; i < 1500; i++)
        cr_assert_eq(out[i], 2.0 * ref[i], "element %d: %.17g vs %.17g", i, out[i], 2.0 * ref[i]);
    gs_array_release(m);
    gs_array_release(x);
    stop_cleanly(&l, c, 30.0);
}
