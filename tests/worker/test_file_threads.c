/* Streams mode: file reads and writes go to the worker's file threads (worker/launch.c), a
 * pool of min(nthreads, running slots) threads with a backend stream each, the path CUDA
 * workers take for array files. The cpu backend in streams mode takes the same path (its
 * streams compute inside the enqueueing call), so this drives the pool on the host: a zarr
 * store written and read back by the file threads (the commit on the launcher), values
 * against the serial evaluator, a missing chunk reading as fill_value, a corrupt chunk and a
 * truncated .npy failing their task naming the file, and the worker serving on after.
 * GS_TEST_BACKEND=cuda runs the same on a GPU worker (bench/gpu-session.sh zarrcuda). */
#include "fake_sched.h"

#include "chunkops/chunkops.h"
#include "common/log.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uv_loop_t loop;
static fake_sched_t fs;
static char dir[64];

static void setup(void)
{
    fs_fixture_setup(&fs, &loop);
    snprintf(dir, sizeof(dir), "/tmp/gs-test-fthreads-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    fs_fixture_teardown(&fs, &loop);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

/* No .timeout (see test_launcher.c); ctest's TIMEOUT bounds a hang. */
TestSuite(worker_file_threads, .init = setup, .fini = teardown);

static gs_slice_t SL(int64_t start, int64_t stop, int64_t step, unsigned flags)
{
    gs_slice_t s = {start, stop, step, flags};
    return s;
}
#define SL_ALL SL(0, 0, 1, 0)
#define SL_RANGE(a, b, k) SL((a), (b), (k), GS_SLICE_HAS_START | GS_SLICE_HAS_STOP)

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

static const char *at(const char *rel)
{
    static char buf[4][256];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", dir, rel);
    return buf[i];
}

/* The cpu backend in streams mode, or with $GS_TEST_BACKEND=cuda the cuda backend (skipped
 * without a device): page-locked staging, double-buffered copies on each file thread's stream. */
static void start_streams_worker(tw_t *t, int nthreads)
{
    const char *be = getenv("GS_TEST_BACKEND");
    const char *backend = NULL;
    if (be != NULL && strcmp(be, "cuda") == 0) {
        if (gs_chunkops_cuda_device_count() < 1)
            cr_skip_test("GS_TEST_BACKEND=cuda: no CUDA device");
        backend = "cuda";
    }
    tw_start_streams(t, &fs, backend, nthreads);
}

static uint64_t count_layer(const gs_taskgraph_t *tg, const char *prefix)
{
    uint64_t n = 0;
    for (uint64_t t = 0; t < tg->ntasks; t++)
        n += strncmp(gs_layer_name(tg->layers[tg->task_layer[t]]), prefix, strlen(prefix)) == 0;
    return n;
}

/* Run @a a (no reference: it writes files) on worker 0; its task count. */
static uint64_t run_plain(uint64_t gid, gs_array_h a)
{
    gs_taskgraph_t *tg;
    size_t failed;
    uint64_t n;
    OK(gs_graph_lower(a, GS_LOWER_DEFAULT, &tg));
    int *place = calloc(tg->ntasks, sizeof(int));
    failed = fs_run_graph(&fs, gid, tg, place, 1, 60000);
    cr_assert_eq(failed, 0, "graph %llu: %s", (unsigned long long)gid,
                 failed == (size_t)-1 ? "timed out" : fs.done[failed - 1].err);
    n = tg->ntasks;
    free(place);
    gs_taskgraph_free(tg);
    return n;
}

/* Run @a a on worker 0 and compare every element with the serial evaluator's; the number of
 * its file-read tasks. */
static uint64_t run_and_check(uint64_t gid, gs_array_h a)
{
    double *ref, *got;
    size_t size;
    uint64_t nread;
    gs_taskgraph_t *tg = fs_run_gather_peer0(&fs, gid, a, &ref, &got, &size);
    for (size_t i = 0; i < size; i++)
        cr_assert(got[i] == ref[i] || (isnan(got[i]) && isnan(ref[i])),
                  "graph %llu element %zu: %.17g, reference %.17g", (unsigned long long)gid, i,
                  got[i], ref[i]);
    nread = count_layer(tg, "file-read");
    free(got);
    free(ref);
    gs_taskgraph_free(tg);
    return nread;
}

/* Run @a a on worker 0, expecting a task to fail with a message containing @a needle. */
static void run_expect_fail(uint64_t gid, gs_array_h a, const char *needle)
{
    gs_taskgraph_t *tg;
    size_t failed;
    OK(gs_graph_lower(a, GS_LOWER_DEFAULT, &tg));
    int *place = calloc(tg->ntasks, sizeof(int));
    failed = fs_run_graph(&fs, gid, tg, place, 1, 60000);
    cr_assert(failed != 0 && failed != (size_t)-1, "graph %llu did not fail (%zu)",
              (unsigned long long)gid, failed);
    cr_assert_not_null(fs.done[failed - 1].err);
    cr_assert_not_null(strstr(fs.done[failed - 1].err, needle), "the error \"%s\" does not name %s",
                       fs.done[failed - 1].err, needle);
    free(place);
    gs_taskgraph_free(tg);
}

static void put(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(p, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

Test(worker_file_threads, zarr_written_and_read_by_the_file_threads)
{
    tw_t t;
    gs_worker_stats_t st;
    const int64_t shape[2] = {400, 300}, zc[2] = {100, 150}, cc[2] = {100, 300};
    gs_array_h x, w, a, b;
    uint64_t nread, launcher0;

    start_streams_worker(&t, 3);
    OK(gs_array_arange(0.5, 1, 2, shape, zc, &x));
    OK(gs_array_to_zarr_expr(x, at("z"), at("z.tmp"), 3, 2 /* blosc */, &w));
    (void)run_plain(1, w);
    gs_worker_stats(t.w, &st);
    /* 8 chunk writes on the file threads, the commit on the launcher */
    cr_assert_eq(st.tasks_file_threads, 8, "%llu file tasks on the file threads",
                 (unsigned long long)st.tasks_file_threads);
    cr_assert_eq(st.tasks_launcher, 1);
    launcher0 = st.tasks_launcher;
    cr_assert_eq(access(at("z/zarr.json"), F_OK), 0, "no store written");

    /* read back in compute chunks of two zarr chunks each */
    OK(gs_array_from_zarr(at("z"), cc, &a));
    nread = run_and_check(2, a);
    cr_assert_eq(nread, 4, "%llu read tasks", (unsigned long long)nread);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.tasks_file_threads, 8 + nread);
    cr_assert_eq(st.tasks_launcher, launcher0, "reads went to the launcher");

    /* a missing chunk reads as fill_value (0), like the evaluator's */
    cr_assert_eq(unlink(at("z/c/1/1")), 0);
    OK(gs_array_from_zarr(at("z"), cc, &b));
    cr_assert_eq(run_and_check(3, b), 4);
    gs_array_release(b);

    /* a corrupt chunk fails its task naming the chunk file; the worker serves on */
    put(at("z/c/2/0"), "not a blosc chunk, just bytes here", 34);
    OK(gs_array_from_zarr(at("z"), cc, &b));
    run_expect_fail(4, b, "z/c/2/0");
    gs_array_release(b);
    OK(gs_array_from_zarr(at("z"), (int64_t[]){100, 150}, &b));
    {
        gs_slice_t sl[2] = {SL_RANGE(0, 200, 1), SL_ALL};
        gs_array_h s;
        OK(gs_array_slice(b, 2, sl, &s));
        cr_assert_gt(run_and_check(5, s), 0);
        gs_array_release(s);
    }
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.tasks_launcher, launcher0);
    gs_array_release(b);

    /* uncompressed: a region inside one chunk file is read from it as a raw file; a chunk
     * file of the wrong size is still refused naming it, a missing one still reads as 0 */
    gs_array_release(w);
    OK(gs_array_to_zarr_expr(x, at("n"), at("n.tmp"), 2, 0 /* none */, &w));
    (void)run_plain(6, w);
    OK(gs_array_from_zarr(at("n"), NULL, &b));
    cr_assert_eq(run_and_check(7, b), 8);
    cr_assert_eq(unlink(at("n/3.1")), 0);
    cr_assert_eq(run_and_check(8, b), 8);
    put(at("n/0.1"), "short", 5);
    run_expect_fail(9, b, "n/0.1: the chunk holds 5 bytes");
    tw_stop_each(&fs, &t, 1);
    gs_array_release(b);
    gs_array_release(a);
    gs_array_release(w);
    gs_array_release(x);
}

Test(worker_file_threads, npy_reads_and_a_truncated_file)
{
    tw_t t;
    gs_worker_stats_t st;
    const int64_t shape[2] = {600, 50}, cc[2] = {50, 50};
    gs_array_h x, w, a, s;
    uint64_t nread;

    start_streams_worker(&t, 4);
    OK(gs_array_arange(-3, 0.25, 2, shape, cc, &x));
    OK(gs_array_to_npy_expr(x, at("x.npy"), at("x.npy.tmp"), &w));
    (void)run_plain(1, w);
    OK(gs_array_from_npy(at("x.npy"), cc, &a));
    nread = run_and_check(2, a);
    cr_assert_eq(nread, 12, "%llu read tasks", (unsigned long long)nread);
    /* a strided slice reads byte ranges of the file on the file threads too */
    {
        gs_slice_t sl[2] = {SL(590, 0, -7, GS_SLICE_HAS_START), SL_RANGE(3, 50, 4)};
        OK(gs_array_slice(a, 2, sl, &s));
        cr_assert_gt(run_and_check(3, s), 0);
        gs_array_release(s);
    }
    gs_worker_stats(t.w, &st);
    cr_assert_geq(st.tasks_file_threads, 12 + 12 + 1);
    /* cut the file short: the read of the last rows fails naming the file */
    cr_assert_eq(truncate(at("x.npy"), 4096), 0);
    run_expect_fail(4, a, "x.npy is truncated");
    tw_stop_each(&fs, &t, 1);
    gs_array_release(a);
    gs_array_release(w);
    gs_array_release(x);
}
