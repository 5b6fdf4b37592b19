/* GPU workers beyond their device memory (worker/spill/host.c): chunks move from the device
 * arena to host memory, one DMA each into pieces of the host tier's page-locked pool (or
 * through the backend's staging, to_host / to_device, while the pool has no free piece), and
 * come back for the tasks that use them. Skipped where no GPU is usable. The same policy
 * on the cpu backend in streams mode: test_spill_host.c. */
#include "fake_sched.h"

#include "chunkops/chunkops.h"
#include "common/log.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEVICE_LIMIT (64ull << 20)

static uv_loop_t loop;
static fake_sched_t fs;

static void setup(void)
{
    fs_fixture_setup(&fs, &loop);
}

static void teardown(void)
{
    fs_fixture_teardown(&fs, &loop);
}

/* No .timeout (test_cuda.c says why); ctest's TIMEOUT bounds a hang. */
TestSuite(worker_cuda_spill, .init = setup, .fini = teardown);

#define NEED_GPU()                                                                          \
    do {                                                                                    \
        if (gs_chunkops_cuda_device_count() < 1) cr_skip_test("no CUDA device");            \
    } while (0)

static void start_worker(tw_t *t, const char *name)
{
    gs_worker_params_t p = {0};
    p.backend = "cuda";
    p.name = name;
    p.device_memory_limit = DEVICE_LIMIT;
    p.memory_wait_ms = 10000;
    tw_start(t, &fs, &p);
    cr_assert(fs_wait_registered(&fs, 1, 20000), "the worker did not register");
    fs_announce_peers(&fs);
    fs_run_for(&fs, 20);
}

static void stop_worker(tw_t *t)
{
    gs_worker_stop(t->w, GS_OK);
    cr_assert(tw_wait_stopped(t, &fs, 10000), "the worker did not stop");
    tw_destroy(t);
}

/* Run @a tg (every task on the one worker; intermediates released as consumed with
 * @a release) and gather its outputs against @a ref. */
static void run_and_check(uint64_t gid, const gs_taskgraph_t *tg, const double *ref, size_t size,
                          int release)
{
    int *place = calloc(tg->ntasks, sizeof(int));
    double *got = calloc(size ? size : 1, sizeof(double));
    size_t failed = fs_run_graph(&fs, gid, tg, place, release, 120000);
    cr_assert_eq(failed, 0, "graph %llu: %s", (unsigned long long)gid,
                 failed == (size_t)-1 ? "timed out" : fs.done[failed - 1].err);
    cr_assert(fs_gather_all(&fs, gid, tg, place, got, 60000), "gather failed");
    for (size_t i = 0; i < size; i++)
        cr_assert(fabs(got[i] - ref[i]) <= 1e-9 * fmax(1.0, fabs(ref[i])),
                  "element %zu: gpu %.17g, cpu %.17g", i, got[i], ref[i]);
    free(got);
    free(place);
}

/* Run @a tg on the one worker in two phases: its generators (tasks without dependencies) to
 * the end, then the rest in waves (each task once its dependencies are done), nothing
 * released; gather its outputs against @a ref. (fs_run_graph would hand each consumer over as
 * soon as its generator is done, so it may run before its input is ever spilled.) */
static void run_generators_first(uint64_t gid, const gs_taskgraph_t *tg, const double *ref,
                                 size_t size)
{
    char *assigned = calloc(tg->ntasks, 1), *done = calloc(tg->ntasks, 1);
    uint64_t *batch = calloc(tg->ntasks, sizeof(uint64_t));
    uint64_t *holder = calloc(tg->ntasks, sizeof(uint64_t));
    int *place = calloc(tg->ntasks, sizeof(int));
    double *got = calloc(size ? size : 1, sizeof(double));
    size_t ndone = 0;
    for (uint64_t i = 0; i < tg->ntasks; i++) holder[i] = fs.peers[0]->id;
    for (int phase = 0; ndone < tg->ntasks; phase = 1) {
        size_t nb = 0;
        for (uint64_t t = 0; t < tg->ntasks; t++) {
            int ready = !assigned[t] && (phase == 1 || tg->dep_off[t + 1] == tg->dep_off[t]);
            for (uint64_t j = tg->dep_off[t]; j < tg->dep_off[t + 1] && ready; j++)
                ready = done[tg->deps[j]];
            if (!ready) continue;
            assigned[t] = 1;
            batch[nb++] = t;
        }
        cr_assert_gt(nb, 0u, "graph %llu: nothing to assign", (unsigned long long)gid);
        fs_assign(&fs, 0, gid, tg, batch, nb, holder);
        for (size_t k = 0; k < nb; k++) {
            const fs_done_t *d = fs_wait_done(&fs, gid, batch[k], 120000);
            cr_assert(d != NULL && d->status == GS_OK, "graph %llu task %llu: %s",
                      (unsigned long long)gid, (unsigned long long)batch[k],
                      d ? d->err : "timed out");
            done[batch[k]] = 1;
            ndone++;
        }
    }
    cr_assert(fs_gather_all(&fs, gid, tg, place, got, 60000), "gather failed");
    for (size_t i = 0; i < size; i++)
        cr_assert(fabs(got[i] - ref[i]) <= 1e-9 * fmax(1.0, fabs(ref[i])),
                  "element %zu: gpu %.17g, cpu %.17g", i, got[i], ref[i]);
    free(got);
    free(place);
    free(holder);
    free(batch);
    free(done);
    free(assigned);
}

/* x = normal(0, 1, (3072, 4096)) in 512 x 1024 chunks (4 MiB each, 96 MiB: 1.5 x the device
 * limit), lowered without fusion: the generators' chunks are stored (the fake scheduler
 * releases nothing) and summed by separate tasks. The generators run to the end first, so at
 * least 32 MiB of their chunks are in host memory when the sums arrive and must come back
 * (host_unspills counts exactly those host -> device loads for tasks). The sum is checked
 * against the cpu evaluator. */
Test(worker_cuda_spill, persisted_array_of_one_and_a_half_device_limits_sums_correctly)
{
    tw_t t;
    gs_array_h x, s;
    int64_t shape[2] = {3072, 4096}, chunks[2] = {512, 1024};
    gs_taskgraph_t *tg;
    double *ref;
    size_t size;
    gs_worker_stats_t st;
    NEED_GPU();
    cr_assert_eq(gs_array_random_normal(5, 0.0, 1.0, 2, shape, chunks, &x), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, x, NULL, &s), GS_OK);
    tg = tw_lower(s, GS_LOWER_CULL, &ref, &size);
    start_worker(&t, "gpu-spiller");
    run_generators_first(1, tg, ref, size);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.host_limit, 0u, "no host tier");
    cr_assert_gt(st.host_spills, 0u, "nothing went to host memory");
    cr_assert_geq(st.host_used + st.mem_used, 96ull << 20, "chunks are missing");
    cr_assert_leq(st.mem_used, DEVICE_LIMIT);
    cr_assert_gt(st.host_unspills, 0u, "nothing came back to the device");
    cr_assert_gt(st.host_spilled_ns, 0u);
    cr_assert_gt(st.host_unspilled_ns, 0u);
    /* the pool page-locked some (its growers run from half the spill target on) */
    cr_assert_gt(st.host_pool_bytes, 0u, "no page-locked host pool");
    /* every host copy is a pool piece (rounded up to its size class) or a pageable copy; the
     * pool's threads may still be growing it while the counters are read, so bound, not equal */
    cr_assert_leq(st.host_pageable, st.host_used, "pageable %llu of %llu host bytes",
                  (unsigned long long)st.host_pageable, (unsigned long long)st.host_used);
    cr_assert_geq(st.host_pool_bytes + st.host_pageable, st.host_used,
                  "host copies unaccounted for: used %llu, pool %llu (free %llu), pageable %llu",
                  (unsigned long long)st.host_used, (unsigned long long)st.host_pool_bytes,
                  (unsigned long long)st.host_pool_free, (unsigned long long)st.host_pageable);
    cr_log_info("host tier: %llu bytes down in %.3f s, %llu bytes up in %.3f s; pool %llu "
                "bytes page-locked in %.3f thread-s (%llu free), %llu bytes of pageable copies",
                (unsigned long long)st.host_spilled_bytes, (double)st.host_spilled_ns * 1e-9,
                (unsigned long long)st.host_unspilled_bytes,
                (double)st.host_unspilled_ns * 1e-9, (unsigned long long)st.host_pool_bytes,
                (double)st.host_pool_ns * 1e-9, (unsigned long long)st.host_pool_free,
                (unsigned long long)st.host_pageable);
    stop_worker(&t);
    free(ref);
    gs_taskgraph_free(tg);
    gs_array_release(s);
    gs_array_release(x);
}

/* The same sum with a 32 MiB host tier: 96 MiB do not fit device + host, so host copies
 * cascade to the local directory (worker/spill/cascade.c) and come back through new host
 * copies; the sum is exact and the disk tier was used both ways. */
Test(worker_cuda_spill, persisted_array_beyond_device_and_host_limits_cascades_to_disk)
{
    tw_t t;
    gs_worker_params_t p = {0};
    gs_array_h x, s;
    int64_t shape[2] = {3072, 4096}, chunks[2] = {512, 1024};
    gs_taskgraph_t *tg;
    double *ref;
    size_t size;
    gs_worker_stats_t st;
    char dir[] = "/tmp/gs-test-cuda-cascade-XXXXXX";
    NEED_GPU();
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(gs_array_random_normal(5, 0.0, 1.0, 2, shape, chunks, &x), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, x, NULL, &s), GS_OK);
    tg = tw_lower(s, GS_LOWER_CULL, &ref, &size);
    p.backend = "cuda";
    p.name = "gpu-cascade";
    p.device_memory_limit = DEVICE_LIMIT;
    p.host_limit = 32ull << 20;
    p.local_directory = dir;
    p.memory_wait_ms = 10000;
    tw_start(&t, &fs, &p);
    cr_assert(fs_wait_registered(&fs, 1, 20000), "the worker did not register");
    fs_announce_peers(&fs);
    fs_run_for(&fs, 20);
    run_generators_first(1, tg, ref, size);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.spills, 0u, "nothing went to disk");
    cr_assert_gt(st.disk_used, 0u);
    cr_assert_gt(st.unspills, 0u, "nothing came back from disk");
    cr_assert_leq(st.mem_used, DEVICE_LIMIT);
    cr_assert_geq(st.disk_used + st.host_used + st.mem_used, 96ull << 20, "chunks are missing");
    cr_log_info("cascade: %llu bytes host -> disk in %.3f s, %llu bytes back in %.3f s",
                (unsigned long long)st.spilled_bytes, (double)st.spilled_ns * 1e-9,
                (unsigned long long)st.unspilled_bytes, (double)st.unspilled_ns * 1e-9);
    stop_worker(&t);
    cr_expect_eq(rmdir(dir), 0, "the worker left files in %s", dir);
    free(ref);
    gs_taskgraph_free(tg);
    gs_array_release(s);
    gs_array_release(x);
}

/* One 128 MiB chunk on a 64 MiB device: the task fails naming the worker, the device tier,
 * the sizes and the limit; the worker then runs a graph that fits. */
Test(worker_cuda_spill, chunk_larger_than_the_device_fails_naming_worker_tier_sizes_limit)
{
    tw_t t;
    gs_array_h a, b;
    int64_t shape[2] = {4096, 4096}, chunks[2] = {4096, 4096};
    int64_t shape2[2] = {1024, 1024}, chunks2[2] = {512, 512};
    gs_taskgraph_t *tg;
    uint64_t task = 0, holder = 0;
    const fs_done_t *d;
    double *ref;
    size_t size;
    NEED_GPU();
    cr_assert_eq(gs_array_random_uniform(1, 0, 1, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_graph_lower(a, GS_LOWER_DEFAULT, &tg), GS_OK);
    start_worker(&t, "small-gpu");
    fs_assign(&fs, 0, 1, tg, &task, 1, &holder);
    d = fs_wait_done(&fs, 1, 0, 10000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_ERR_NO_DEVICE_MEMORY, "status %d: %s", d->status, d->err);
    cr_assert(strstr(d->err, "worker small-gpu") && strstr(d->err, "device") &&
              strstr(d->err, "134217728") && strstr(d->err, "limit is"), "message: %s", d->err);
    gs_taskgraph_free(tg);
    cr_assert_eq(gs_array_random_uniform(2, 0, 1, 2, shape2, chunks2, &b), GS_OK);
    tg = tw_lower(b, GS_LOWER_DEFAULT, &ref, &size);
    run_and_check(2, tg, ref, size, 1);
    free(ref);
    gs_taskgraph_free(tg);
    gs_array_release(b);
    gs_array_release(a);
    stop_worker(&t);
}
