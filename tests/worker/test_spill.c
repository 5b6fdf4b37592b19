/* Spilling (worker/spill): in-process workers with tiny memory limits on a fake scheduler,
 * their chunks going to a local directory and back, and the disk tier's failures. */
#include "fake_sched.h"

#include "common/log.h"
#include "common/sysmem.h"
#include "tests/tmp_tree.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/time.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIMIT (64u * 1024u)           /* memory limit of the spilling workers */

static uv_loop_t loop;
static fake_sched_t fs;
static char tmpdir[64];

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/gs-test-spill-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    fs_fixture_setup(&fs, &loop);
}

static void teardown(void)
{
    fs_fixture_teardown(&fs, &loop);
    (void)umount2(tmpdir, MNT_DETACH);
    tmp_tree_remove(tmpdir);
}

TestSuite(worker_spill, .init = setup, .fini = teardown, .timeout = 120);

/* Stop and destroy one worker; its directory must be gone from the local directory. */
static void stop_leaving_nothing(tw_t *t)
{
    tw_stop_each(&fs, t, 1);
    cr_assert_eq(tmp_tree_count(tmpdir, ""), 0, "the worker left its directory behind");
}

static gs_worker_params_t spill_params(const char *dir)
{
    gs_worker_params_t p = {0};
    p.memory_limit = LIMIT;
    p.nthreads = 1;
    p.local_directory = dir;
    p.memory_wait_ms = 3000;
    return p;
}

/* uniform(0, 1) of (16, 32 * nchunks) in (16, 32) chunks: 4096 bytes each. */
static gs_array_h chunked_array(int nchunks)
{
    gs_array_h a;
    int64_t shape[2] = {16, 32 * (int64_t)nchunks}, chunks[2] = {16, 32};
    cr_assert_eq(gs_array_random_uniform(11, 0, 1, 2, shape, chunks, &a), GS_OK);
    return a;
}

Test(worker_spill, persisted_chunks_four_times_the_limit_spill_and_gather_exactly)
{
    gs_worker_params_t p = spill_params(tmpdir);
    tw_t t;
    gs_worker_stats_t st;
    double *ref, *got;
    size_t size, failed;
    gs_array_h a = chunked_array(64);                  /* 256 KiB: 4 x the limit */
    gs_taskgraph_t *tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));

    tw_start_each(&fs, &t, 1, &p);
    cr_assert_eq(tmp_tree_count(tmpdir, ""), 1, "no private subdirectory in the local directory");
    failed = fs_run_graph(&fs, 1, tg, place, 0, 60000);
    cr_assert_eq(failed, 0, "%s", fs_fail_msg(&fs, failed));
    gs_worker_stats(t.w, &st);
    cr_assert_leq(st.mem_used, (uint64_t)LIMIT);
    cr_assert_geq(st.disk_used, 256u * 1024u - LIMIT, "only %llu bytes on disk",
                  (unsigned long long)st.disk_used);
    cr_assert_eq(st.spilled_bytes, st.spills * 4096u);
    cr_assert_eq(st.chunks, 64u);
    got = calloc(size, sizeof(double));
    cr_assert(fs_gather_all(&fs, 1, tg, place, got, 10000), "gather failed");
    fs_assert_close(got, ref, size);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.unspilled_bytes, 0u, "the gather read nothing from disk");
    /* releasing the keys deletes their files */
    for (uint64_t i = 0; i < tg->ntasks; i++) fs_release(&fs, 0, 1, i);
    fs_run_for(&fs, 100);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.disk_used, 0u);
    cr_assert_eq(st.mem_used, 0u);
    stop_leaving_nothing(&t);
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(a);
}

/* sum(x) of a 96-chunk x (384 KiB) without fusion (fs_run_unfused_sum). */
static void run_unfused_sum(const gs_worker_params_t *p, int nw, int split, gs_worker_stats_t *st_p)
{
    gs_array_h a = chunked_array(96);
    fs_run_unfused_sum(&fs, a, p, nw, split, st_p);
    gs_array_release(a);
}

Test(worker_spill, unfused_sum_reads_spilled_inputs_back)
{
    gs_worker_params_t p = spill_params(tmpdir);
    gs_worker_stats_t st;
    run_unfused_sum(&p, 1, 0, &st);
    cr_assert_gt(st.spills, 0u);
    cr_assert_gt(st.unspills, 0u, "no input came back from disk");
    cr_assert_gt(st.unspilled_ns, 0u);
    cr_assert_leq(st.mem_used, (uint64_t)LIMIT);
}

/* ((x + 1) * 2) of a 12-chunk x without fusion, inputs released as their consumers complete:
 * the data never needs more than the limit, but a consumer blocked on memory with others
 * admitted ahead of it would, without waiting for gsched's releases, spill a chunk that a
 * moment later is no longer needed (or is read back at once). The admission waits instead. */
Test(worker_spill, admission_waits_for_releases_instead_of_spilling)
{
    gs_worker_params_t p = spill_params(tmpdir);
    gs_worker_stats_t st;
    tw_t t;
    double *ref, *got;
    size_t size, failed;
    gs_array_h a = chunked_array(12), b, c;
    gs_taskgraph_t *tg;
    int *place;

    p.nthreads = 2;
    p.spill_threshold = 1.0;   /* spilling only to admit a task, as on a device by default */
    p.spill_target = 1.0;
    p.spill_pause = 1.0;
    cr_assert_eq(gs_array_binary_scalar(GS_BINARY_ADD, a, 1.0, &b), GS_OK);
    cr_assert_eq(gs_array_binary_scalar(GS_BINARY_MUL, b, 2.0, &c), GS_OK);
    tg = tw_lower(c, GS_LOWER_CULL, &ref, &size);
    cr_assert_eq(tg->ntasks, 36u, "not one task per chunk and operation: %llu",
                 (unsigned long long)tg->ntasks);
    place = calloc(tg->ntasks, sizeof(int));
    tw_start_each(&fs, &t, 1, &p);
    failed = fs_run_graph(&fs, 1, tg, place, 1, 60000);
    cr_assert_eq(failed, 0, "%s", fs_fail_msg(&fs, failed));
    got = calloc(size, sizeof(double));
    cr_assert(fs_gather_all(&fs, 1, tg, place, got, 10000), "gather failed");
    fs_assert_close(got, ref, size);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.spill_waits, 0u, "no admission waited for a release (%llu chunks spilled)",
                 (unsigned long long)st.spills);
    cr_assert_leq(st.mem_used, (uint64_t)LIMIT);
    tw_stop_each(&fs, &t, 1);
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(c);
    gs_array_release(b);
    gs_array_release(a);
}

Test(worker_spill, peers_fetch_spilled_chunks)
{
    gs_worker_params_t p[2] = {spill_params(tmpdir), {0}};
    gs_worker_stats_t st;
    p[1].nthreads = 1;
    run_unfused_sum(p, 2, 1, &st);
    cr_assert_gt(st.spills, 0u);
    cr_assert_eq(st.served, 96u);
    /* which chunks the peer gets from disk depends on timing (a sum may fetch its input before
     * it spills; under CI load it did for every chunk): the disk reads are logged, the values
     * checked by run_unfused_sum, and gathers from disk are asserted by
     * persisted_chunks_four_times_the_limit_spill_and_gather_exactly */
    cr_log_info("%llu bytes served from disk", (unsigned long long)st.unspilled_bytes);
    cr_assert_eq(st.unspills, 0u, "serving brought chunks back to memory");
}

/* Run @a tg on one worker until a task fails; check the failure names the disk tier, that every
 * chunk computed is intact and that the worker still runs new work. */
static void assert_disk_tier_failure(tw_t *t, const char *expect)
{
    gs_array_h a = chunked_array(64), small = chunked_array(2);
    double *ref, *ref2, *got;
    size_t size, size2, failed;
    gs_taskgraph_t *tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    gs_taskgraph_t *tg2 = tw_lower(small, GS_LOWER_DEFAULT, &ref2, &size2);
    int *place = calloc(tg->ntasks, sizeof(int));
    const fs_done_t *d;
    gs_worker_stats_t st;
    size_t ngood = 0;

    failed = fs_run_graph(&fs, 1, tg, place, 0, 60000);
    cr_assert(failed != 0 && failed != (size_t)-1, "no task failed (or timed out)");
    d = &fs.done[failed - 1];
    cr_assert_eq(d->status, GS_ERR_NO_RESOURCE, "%s: %s", gs_status_string(d->status), d->err);
    cr_assert(strstr(d->err, "worker spiller") && strstr(d->err, "disk tier") &&
              strstr(d->err, expect) && strstr(d->err, "65536"), "message: %s", d->err);
    /* no lost chunks: every task reported done is intact, wherever it is */
    for (uint64_t b = 0; b < tg->noutputs; b++) {
        uint64_t i = tg->outputs[b];
        const fs_done_t *di = fs_find_done(&fs, 1, i);
        const fs_data_t *data;
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
        if (di == NULL || di->status != GS_OK) continue;
        data = fs_gather(&fs, 0, 1, i, 10000);
        cr_assert_not_null(data);
        cr_assert_eq(data->status, GS_OK);
        cr_assert_eq(data->len, 4096u);
        gs_grid_block_region(&tg->out_grid, b, start, shape);
        for (int64_t r = 0; r < shape[0]; r++)
            fs_assert_close((const double *)data->bytes + r * shape[1],
                         ref + (start[0] + r) * tg->out_grid.shape[1] + start[1],
                         (size_t)shape[1]);
        ngood++;
    }
    cr_assert_geq(ngood, 16u, "too few chunks were stored before the disk tier filled");
    gs_worker_stats(t->w, &st);
    cr_assert_gt(st.spills, 0u);
    /* the cluster stays usable: drop the graph, run another */
    {
        gs_msg_t m;
        memset(&m, 0, sizeof(m));
        m.type = GS_MSG_CANCEL;
        m.u.cancel.graph_id = 1;
        fs_send(&fs, 0, &m);
    }
    failed = fs_run_graph(&fs, 2, tg2, place, 0, 30000);
    cr_assert_eq(failed, 0, "%s", fs_fail_msg(&fs, failed));
    got = calloc(size2, sizeof(double));
    cr_assert(fs_gather_all(&fs, 2, tg2, place, got, 10000));
    fs_assert_close(got, ref2, size2);
    free(got);
    free(ref);
    free(ref2);
    free(place);
    gs_taskgraph_free(tg);
    gs_taskgraph_free(tg2);
    gs_array_release(a);
    gs_array_release(small);
}

Test(worker_spill, disk_limit_too_small_fails_the_task_naming_the_tier)
{
    gs_worker_params_t p = spill_params(tmpdir);
    tw_t t;
    p.name = "spiller";
    p.disk_limit = 32768;
    tw_start_each(&fs, &t, 1, &p);
    assert_disk_tier_failure(&t, "limit is 32768 bytes");
    tw_stop_each(&fs, &t, 1);
}

Test(worker_spill, full_file_system_keeps_chunks_in_memory)
{
    gs_worker_params_t p = spill_params(tmpdir);
    tw_t t;
    if (geteuid() != 0 || mount("tmpfs", tmpdir, "tmpfs", 0, "size=40k") != 0)
        cr_skip_test("cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN: %s)",
                     geteuid() != 0 ? "not root" : strerror(errno));
    p.name = "spiller";
    tw_start_each(&fs, &t, 1, &p);
    assert_disk_tier_failure(&t, "No space left on device");
    tw_stop_each(&fs, &t, 1);
}

Test(worker_spill, non_writable_local_directory_is_refused_at_create)
{
    gs_worker_params_t p = spill_params(NULL);
    gs_worker_h w = NULL;
    char file[128], dir[160];
    FILE *f;
    cr_assert(tmp_path_join(file, sizeof(file), tmpdir, "a-file"));
    f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert(tmp_path_join(dir, sizeof(dir), file, "below"));   /* below a file: never writable */
    p.scheduler = "127.0.0.1:1";
    p.local_directory = dir;
    cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_ERR_IO);
    cr_assert_null(w);
    cr_assert(strstr(gs_last_error(), dir) && strstr(gs_last_error(), "local directory"),
              "message: %s", gs_last_error());
    if (geteuid() != 0) {                                /* root writes anywhere */
        cr_assert_eq(chmod(tmpdir, 0500), 0);
        p.local_directory = tmpdir;
        cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_ERR_IO);
        cr_assert(strstr(gs_last_error(), "Permission denied"), "%s", gs_last_error());
        cr_assert_eq(chmod(tmpdir, 0700), 0);
    }
}

Test(worker_spill, bad_fractions_are_refused)
{
    gs_worker_params_t p = spill_params(tmpdir);
    gs_worker_h w = NULL;
    gs_worker_cli_t cli;
    char *argv_bad[] = {"gworker", "tcp://h:1", "--spill-threshold", "1.5", NULL};
    char *argv_ok[] = {"gworker", "tcp://h:1", "--spill-target=0.5", "--spill-threshold", "0.8",
                       "--spill-pause", "0.9", "--local-directory", "/x", "--disk-limit",
                       "2GB", "--no-spill", NULL};
    p.scheduler = "127.0.0.1:1";
    p.spill_target = 0.9;
    p.spill_threshold = 0.5;
    cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "spill_target 0.9"), "%s", gs_last_error());
    p.spill_target = -1;
    cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_worker_cli_parse(4, argv_bad, &cli), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "--spill-threshold: '1.5'"), "%s", gs_last_error());
    cr_assert_eq(gs_worker_cli_parse(12, argv_ok, &cli), GS_OK, "%s", gs_last_error());
    cr_assert_eq(cli.params.spill_target, 0.5);
    cr_assert_eq(cli.params.spill_threshold, 0.8);
    cr_assert_eq(cli.params.spill_pause, 0.9);
    cr_assert_str_eq(cli.params.local_directory, "/x");
    cr_assert_eq(cli.params.disk_limit, 2000000000u);
    cr_assert_eq(cli.params.no_spill, 1);
    cr_assert_eq(tmp_tree_count(tmpdir, ""), 0, "a refused create left a directory");
}

Test(worker_spill, limit_above_the_machine_is_lowered_to_it)
{
    gs_worker_params_t p = spill_params(tmpdir);
    gs_worker_h w = NULL;
    gs_worker_stats_t st;
    gs_sysmem_t mem;
    cr_assert_eq(gs_sysmem_query(NULL, &mem), GS_OK);
    p.scheduler = "127.0.0.1:1";
    p.memory_limit = mem.total * 4;
    cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_OK, "%s", gs_last_error());
    gs_worker_stats(w, &st);
    cr_assert_eq(st.mem_limit, mem.total);
    gs_worker_destroy(w);
    cr_assert_eq(tmp_tree_count(tmpdir, ""), 0, "the worker left its directory behind");
}

Test(worker_spill, directories_of_dead_workers_are_purged_at_start)
{
    gs_worker_params_t p = spill_params(tmpdir);
    gs_worker_h w = NULL;
    char dead[128], live[128], file[160];
    struct timeval old[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    FILE *f;
    int fd;
    cr_assert(tmp_path_join(dead, sizeof(dead), tmpdir, "gsched-worker-dead-AAAAAA"));
    cr_assert(tmp_path_join(live, sizeof(live), tmpdir, "gsched-worker-live-BBBBBB"));
    cr_assert_eq(mkdir(dead, 0700), 0);
    cr_assert_eq(mkdir(live, 0700), 0);
    cr_assert(tmp_path_join(file, sizeof(file), dead, "7.chunk"));
    cr_assert_not_null(f = fopen(file, "w"));
    fclose(f);
    cr_assert_eq(utimes(dead, old), 0);
    cr_assert_eq(utimes(live, old), 0);
    fd = open(live, O_RDONLY | O_DIRECTORY);            /* a running worker holds its lock */
    cr_assert_geq(fd, 0);
    cr_assert_eq(flock(fd, LOCK_EX), 0);
    p.scheduler = "127.0.0.1:1";
    cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_OK, "%s", gs_last_error());
    cr_assert_eq(access(dead, F_OK), -1, "the dead worker's directory is still there");
    cr_assert_eq(access(live, F_OK), 0, "a locked directory was removed");
    cr_assert_eq(tmp_tree_count(tmpdir, ""), 2);             /* live + the new worker's */
    gs_worker_destroy(w);
    cr_assert_eq(tmp_tree_count(tmpdir, ""), 1);
    close(fd);
}

static int twenty_done(void *arg)
{
    return ((fake_sched_t *)arg)->ndone >= 20;
}

Test(worker_spill, stops_cleanly_with_spill_writes_in_flight)
{
    gs_worker_params_t p = spill_params(tmpdir);
    tw_t t;
    gs_array_h a = chunked_array(64);
    double *ref;
    size_t size;
    gs_taskgraph_t *tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    uint64_t *tasks = calloc(tg->ntasks, sizeof(uint64_t)), *holder = calloc(tg->ntasks, 8);
    for (uint64_t i = 0; i < tg->ntasks; i++) tasks[i] = i;
    tw_start_each(&fs, &t, 1, &p);
    fs_assign(&fs, 0, 1, tg, tasks, tg->ntasks, holder);
    /* 20 chunks are 80 KiB: past the 64 KiB limit, so writes have started */
    cr_assert(fs_run_until(&fs, twenty_done, &fs, 30000), "the tasks did not run");
    stop_leaving_nothing(&t);
    free(tasks);
    free(holder);
    free(ref);
    gs_taskgraph_free(tg);
    gs_array_release(a);
}
