/* Spilling with real daemons: gworker processes with tiny --memory-limit values keep arrays
 * several times larger than their memory in their --local-directory and compute on them; with
 * $GS_TEST_BACKEND=cuda, GPU workers with a tiny --device-memory-limit keep them in host
 * memory. */
#include "cluster.h"
#include "reference.h"
#include "tests/tmp_tree.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define OK(x) cr_assert_eq((x), GS_OK, "%s: %s", #x, gs_last_error())

#ifdef GS_TEST_NO_BENCH
#define NEED_BENCH() cr_skip_test("gs-bench is not built (GS_BUILD_BENCH=OFF)")
#else
#define NEED_BENCH() ((void)0)
#endif

static tcluster_t CL;
static gs_client_h C;
static char dir[64];

/* Files in the workers' subdirectories of the local directory. */
static int spilled_files(void)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char sub[512];
    int n = 0;
    if (d == NULL) return 0;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "gsched-worker-", 14) != 0) continue;
        if (tmp_path_join(sub, sizeof(sub), dir, de->d_name)) n += tmp_tree_count(sub, ".chunk");
    }
    closedir(d);
    return n;
}

/* gsched and @a n CPU workers with --memory-limit @a limit spilling to a fresh directory. */
static void up(int n, const char *limit)
{
    const char *extra[] = {"--memory-limit", limit, "--local-directory", dir, NULL};
    const char *backend = getenv("GS_TEST_BACKEND");
    if (backend != NULL && strcmp(backend, "cuda") == 0)
        cr_skip_test("spilling applies to the cpu backend's host memory");
    alarm(600);
    snprintf(dir, sizeof(dir), "/tmp/gs-test-ispill-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert(tc_start(&CL, 0, NULL, NULL), "gsched did not start");
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof(name), "s%d", i);
        cr_assert_gt(tc_add_worker_args(&CL, name, extra), 0);
    }
    C = tc_connect(&CL, GS_LOWER_DEFAULT);
    cr_assert_not_null(C, "%s", gs_last_error());
    OK(gs_client_wait_for_workers(C, n, 60.0));
}

static void down(void)
{
    gs_client_destroy(C);
    C = NULL;
    tp_kill_all();
    if (dir[0]) tmp_tree_remove(dir);
}

static double sum_of(gs_array_h a)
{
    gs_array_h s;
    double v = NAN;
    OK(gs_array_reduce(GS_RED_SUM, a, NULL, &s));
    OK(gs_client_compute(C, s, &v, 1));
    gs_array_release(s);
    return v;
}

TestSuite(integration_spill, .timeout = 600);

Test(integration_spill, persisted_array_four_times_the_host_limit_sums_exactly, .fini = down)
{
    const int64_t n = 2048;                  /* 32 MiB of float64 on an 8 MiB worker */
    int64_t shape[2] = {n, n}, chunks[2] = {256, 256};
    gs_array_h x, y;
    ref_t rx;
    double want;
    up(1, "8MiB");
    OK(gs_array_random_normal(31, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_persist(C, x));
    cr_assert_geq(spilled_files(), 64 - 16, "only %d chunks went to disk", spilled_files());
    rx = ref_normal(31, 0, 1, 2, shape);
    want = ref_sum(&rx);
    cr_assert(ref_rel(sum_of(x), want) <= 1e-12, "x.sum(): %.17g vs %.17g", sum_of(x), want);
    /* a second pass over the persisted array, through an elementwise expression */
    OK(gs_array_binary_scalar(GS_BINARY_MUL, x, 2.0, &y));
    cr_assert(ref_rel(sum_of(y), 2 * want) <= 1e-12);
    OK(gs_client_unpersist(C, x));
    gs_array_release(y);
    gs_array_release(x);
    ref_free(&rx);
}

Test(integration_spill, transpose_sum_n4000_chunk500_completes_under_64MB, .fini = down)
{
    char bin[4096], out[16384], addr[128];
    const char *argv[16];
    const char *line;
    int fd, st = 0, ac = 0;
    pid_t pid;
    ref_t rx;
    double want, got;
    NEED_BENCH();
    up(2, "64MB");                           /* x is 128 MB: all of both workers' memory */
    snprintf(addr, sizeof(addr), "%s", CL.address);
    argv[ac++] = tp_bin("gs-bench", bin, sizeof(bin));
    argv[ac++] = "transpose-sum";
    argv[ac++] = "--scheduler";
    argv[ac++] = addr;
    argv[ac++] = "--workers";
    argv[ac++] = "2";
    argv[ac++] = "--n";
    argv[ac++] = "4000";
    argv[ac++] = "--chunk";
    argv[ac++] = "500";
    argv[ac] = NULL;
    pid = tp_spawn_capture(argv, &fd, NULL);
    cr_assert_gt(pid, 0);
    tp_read_all(fd, out, sizeof(out), 500.0);
    close(fd);
    cr_assert(tp_wait_exit(pid, &st, 60.0), "gs-bench did not finish");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "gs-bench failed:\n%s", out);
    line = strstr(out, "\"value\":");
    cr_assert_not_null(line, "no value in:\n%s", out);
    got = strtod(line + 8, NULL);
    rx = ref_normal(0, 0, 1, 2, (int64_t[]){4000, 4000});
    want = 2 * ref_sum(&rx);
    cr_assert(fabs(got - want) <= 1e-9 * 4000, "(x + x.T).sum(): %.17g vs %.17g\n%s", got, want,
              out);
    /* the workers' counters reach gsched with their heartbeats (every second) */
    {
        gs_client_worker_info_t wi[2];
        uint64_t spilled = 0, unspilled = 0;
        size_t nw = 0;
        for (int tries = 0; tries < 600 && (spilled == 0 || unspilled == 0); tries++) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            OK(gs_client_workers(C, wi, 2, &nw));
            spilled = unspilled = 0;
            for (size_t i = 0; i < nw && i < 2; i++) {
                spilled += wi[i].spilled_bytes;
                unspilled += wi[i].unspilled_bytes;
            }
            if (spilled == 0 || unspilled == 0) nanosleep(&ts, NULL);
        }
        cr_assert_gt(spilled, 0u, "no worker reported spilling");
        cr_assert_gt(unspilled, 0u, "no worker reported reading spilled chunks back");
    }
    ref_free(&rx);
}

Test(integration_spill, gworker_refuses_a_local_directory_it_cannot_write, .fini = down)
{
    char bin[4096], out[8192], file[128], below[160];
    const char *argv[8];
    int fd, st = 0;
    pid_t pid;
    FILE *f;
    snprintf(dir, sizeof(dir), "/tmp/gs-test-ispill-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert(tmp_path_join(file, sizeof(file), dir, "file"));
    cr_assert_not_null(f = fopen(file, "w"));
    fclose(f);
    cr_assert(tmp_path_join(below, sizeof(below), file, "sub"));
    argv[0] = tp_bin("gworker", bin, sizeof(bin));
    argv[1] = "tcp://127.0.0.1:1";
    argv[2] = "--local-directory";
    argv[3] = below;
    argv[4] = NULL;
    pid = tp_spawn_capture(argv, &fd, NULL);
    cr_assert_gt(pid, 0);
    tp_read_all(fd, out, sizeof(out), 30.0);
    close(fd);
    cr_assert(tp_wait_exit(pid, &st, 30.0));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "gworker started anyway:\n%s", out);
    cr_assert(strstr(out, below) && strstr(out, "local directory"), "output:\n%s", out);
}

/* GPU workers (only with $GS_TEST_BACKEND=cuda; the cpu backend runs the same host-tier code in
 * tests/worker/test_spill_host.c): x of 1.5 x a 64 MiB device limit is persisted, most of it in
 * host memory, and summed exactly; the workers report the host tier. */
Test(integration_spill, cuda_worker_keeps_one_and_a_half_device_limits_in_host_memory, .fini = down)
{
    const int64_t n = 3584;                  /* 98 MiB of float64 on a 64 MiB device */
    int64_t shape[2] = {n, n}, chunks[2] = {512, 512};
    const char *extra[] = {"--device-memory-limit", "64MiB", NULL};
    const char *backend = getenv("GS_TEST_BACKEND");
    gs_client_worker_info_t wi[1];
    uint64_t host_spilled = 0;
    size_t nw = 0;
    gs_array_h x;
    ref_t rx;
    double want;
    if (backend == NULL || strcmp(backend, "cuda") != 0)
        cr_skip_test("needs GPU workers ($GS_TEST_BACKEND=cuda)");
    alarm(600);
    cr_assert(tc_start(&CL, 0, NULL, NULL), "gsched did not start");
    cr_assert_gt(tc_add_worker_args(&CL, "g0", extra), 0);
    C = tc_connect(&CL, GS_LOWER_DEFAULT);
    cr_assert_not_null(C, "%s", gs_last_error());
    OK(gs_client_wait_for_workers(C, 1, 60.0));
    OK(gs_array_random_normal(37, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_persist(C, x));
    rx = ref_normal(37, 0, 1, 2, shape);
    want = ref_sum(&rx);
    cr_assert(ref_rel(sum_of(x), want) <= 1e-12, "x.sum(): %.17g vs %.17g", sum_of(x), want);
    for (int tries = 0; tries < 100 && host_spilled == 0; tries++) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        OK(gs_client_workers(C, wi, 1, &nw));
        host_spilled = nw ? wi[0].host_spilled_bytes : 0;
        if (host_spilled == 0) nanosleep(&ts, NULL);
    }
    cr_assert_gt(host_spilled, 0u, "the worker reported nothing copied to host memory");
    cr_assert_gt(wi[0].host_used, 0u);
    cr_assert_eq(wi[0].spilled_bytes, 0u, "a GPU worker wrote to disk");
    OK(gs_client_unpersist(C, x));
    gs_array_release(x);
    ref_free(&rx);
}
