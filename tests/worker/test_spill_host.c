/* The host tier (worker/spill/host.c): in-process streams-mode workers of the cpu backend,
 * whose to_host / to_device are plain copies, with tiny "device" limits on a fake scheduler:
 * chunks move to host memory and back through the same code a cuda worker runs (its tier
 * stream, notes, LRU, prefetch), and the tier's failures. The cuda backend's own copies are
 * tested by tests/worker/test_cuda.c on a GPU. */
#include "fake_sched.h"

#include "tests/tmp_tree.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#define LIMIT (64u * 1024u)           /* backend ("device") memory of the spilling workers */

static uv_loop_t loop;
static fake_sched_t fs;
static char tmpdir[64];

static void setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/gs-test-hspill-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    fs_fixture_setup(&fs, &loop);
}

static void teardown(void)
{
    fs_fixture_teardown(&fs, &loop);
    (void)umount2(tmpdir, MNT_DETACH);
    tmp_tree_remove(tmpdir);
}

TestSuite(worker_spill_host, .init = setup, .fini = teardown, .timeout = 120);

static gs_worker_params_t host_params(void)
{
    gs_worker_params_t p = {0};
    p.memory_limit = LIMIT;            /* the cpu backend's memory plays the device's */
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 2;
    p.local_directory = tmpdir;        /* the disk tier below host memory (cascade.c) */
    p.memory_wait_ms = 3000;
    /* spill ahead of need, as host memory does (device memory's own defaults spill only what a
     * task needs: device_defaults_spill_only_on_demand) */
    p.spill_threshold = 0.7;
    p.spill_target = 0.6;
    p.spill_pause = 0.75;
    return p;
}

/* uniform(0, 1) of (16, 32 * nchunks) in (16, 32 * per) chunks: 4096 * per bytes each. */
static gs_array_h chunked_array(int nchunks, int per)
{
    gs_array_h a;
    int64_t shape[2] = {16, 32 * (int64_t)nchunks}, chunks[2] = {16, 32 * (int64_t)per};
    cr_assert_eq(gs_array_random_uniform(11, 0, 1, 2, shape, chunks, &a), GS_OK);
    return a;
}

Test(worker_spill_host, persisted_chunks_four_times_the_device_limit_go_to_host_memory)
{
    gs_worker_params_t p = host_params();
    tw_t t;
    gs_worker_stats_t st;
    double *ref, *got;
    size_t size, failed;
    gs_array_h a = chunked_array(64, 1);               /* 256 KiB: 4 x the limit */
    gs_taskgraph_t *tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));

    tw_start_each(&fs, &t, 1, &p);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.host_limit, 0u, "no host tier");
    cr_assert_eq(st.disk_limit, UINT64_MAX, "no disk tier below host memory");
    failed = fs_run_graph(&fs, 1, tg, place, 0, 60000);
    cr_assert_eq(failed, 0, "%s", fs_fail_msg(&fs, failed));
    gs_worker_stats(t.w, &st);
    cr_assert_leq(st.mem_used, (uint64_t)LIMIT);
    cr_assert_geq(st.host_used, 256u * 1024u - LIMIT, "only %llu bytes in host memory",
                  (unsigned long long)st.host_used);
    cr_assert_eq(st.host_spilled_bytes, st.host_spills * 4096u);
    cr_assert_eq(st.spills, 0u, "the disk tier was used");
    cr_assert_eq(st.disk_used, 0u);
    cr_assert_eq(tmp_tree_count(tmpdir, ""), 1, "not just the worker's directory");
    cr_assert_eq(st.chunks, 64u);
    got = calloc(size, sizeof(double));
    cr_assert(fs_gather_all(&fs, 1, tg, place, got, 10000), "gather failed");
    fs_assert_close(got, ref, size);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.host_unspilled_bytes, 0u, "the gather read nothing from host memory");
    /* releasing the keys frees their host copies */
    for (uint64_t i = 0; i < tg->ntasks; i++) fs_release(&fs, 0, 1, i);
    fs_run_for(&fs, 100);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.host_used, 0u);
    cr_assert_eq(st.mem_used, 0u);
    tw_stop_each(&fs, &t, 1);
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(a);
}

/* The host pool's growers have made the quarter of the device limit they keep ahead. */
static int pool_settled(void *arg)
{
    gs_worker_stats_t st;
    gs_worker_stats(arg, &st);
    return st.host_pool_free >= LIMIT / 4;
}

/* Persist @a a as graph @a graph on @a w, check its values, wait for the pool to settle. */
static void persist_checked(tw_t *t, gs_array_h a, uint64_t graph)
{
    double *ref, *got;
    size_t size, failed;
    gs_taskgraph_t *tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));

    failed = fs_run_graph(&fs, graph, tg, place, 0, 60000);
    cr_assert_eq(failed, 0, "%s", fs_fail_msg(&fs, failed));
    got = calloc(size, sizeof(double));
    cr_assert(fs_gather_all(&fs, graph, tg, place, got, 10000), "gather failed");
    fs_assert_close(got, ref, size);
    cr_assert(fs_run_until(&fs, pool_settled, t->w, 10000), "the host pool did not grow");
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
}

Test(worker_spill_host, host_copies_are_pieces_of_a_recycled_page_locked_pool)
{
    gs_worker_params_t p = host_params();
    gs_worker_stats_t st, st1;
    tw_t t;
    gs_array_h a = chunked_array(64, 1);               /* 256 KiB: 4 x the limit */

    tw_start_each(&fs, &t, 1, &p);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.host_pool_bytes, 0u, "page-locked before any chunk was stored");
    persist_checked(&t, a, 1);
    gs_worker_stats(t.w, &st1);
    cr_assert_gt(st1.host_used, 0u);
    cr_assert_gt(st1.host_pool_bytes, 0u, "no pool");
    /* every host copy is a pool piece in use or a pageable fallback */
    cr_assert_eq(st1.host_used, st1.host_pool_bytes - st1.host_pool_free + st1.host_pageable,
                 "host_used %llu, pool %llu (%llu free), pageable %llu",
                 (unsigned long long)st1.host_used, (unsigned long long)st1.host_pool_bytes,
                 (unsigned long long)st1.host_pool_free,
                 (unsigned long long)st1.host_pageable);
    /* released: every piece back in the pool, the pageable copies freed */
    for (uint64_t i = 0; i < 64; i++) fs_release(&fs, 0, 1, i);
    fs_run_for(&fs, 100);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.host_used, 0u);
    cr_assert_eq(st.host_pageable, 0u);
    cr_assert_eq(st.host_pool_free, st.host_pool_bytes);
    cr_assert_geq(st.host_pool_bytes, st1.host_pool_bytes);
    st1.host_pool_bytes = st.host_pool_bytes;
    /* the same again: its copies reuse the pieces (the pool grows by at most what the first
     * round held outside it, plus the part kept ahead) */
    persist_checked(&t, a, 2);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.host_used, 0u);
    /* (the first round may have spilled before the growers made any piece: not this one) */
    cr_assert_lt(st.host_pageable, st.host_used, "no host copy came from the pool");
    cr_assert_leq(st.host_pool_bytes, st1.host_pool_bytes + st1.host_pageable + LIMIT / 4 + 4096,
                  "pool %llu bytes after the second round, %llu after the first (%llu pageable)",
                  (unsigned long long)st.host_pool_bytes, (unsigned long long)st1.host_pool_bytes,
                  (unsigned long long)st1.host_pageable);
    tw_stop_each(&fs, &t, 1);
    gs_array_release(a);
}

/* $GSCHED_HOST_POOL=alloc: slabs from the backend's host_alloc (cudaHostAlloc) instead of the
 * default mapped memory faulted in by the growers: the same values, the same recycling. */
Test(worker_spill_host, host_pool_of_allocated_slabs_holds_the_copies_too)
{
    gs_worker_params_t p = host_params();
    gs_worker_stats_t st;
    tw_t t;
    gs_array_h a = chunked_array(64, 1);

    cr_assert_eq(setenv("GSCHED_HOST_POOL", "alloc", 1), 0);
    tw_start_each(&fs, &t, 1, &p);
    for (uint64_t g = 1; g <= 2; g++) {
        persist_checked(&t, a, g);
        gs_worker_stats(t.w, &st);
        cr_assert_gt(st.host_pool_bytes, 0u);
        cr_assert_eq(st.host_used, st.host_pool_bytes - st.host_pool_free + st.host_pageable);
        /* the second round starts with the pieces the growers made during the first */
        if (g == 2) cr_assert_lt(st.host_pageable, st.host_used, "no copy came from the pool");
        for (uint64_t i = 0; i < 64; i++) fs_release(&fs, 0, g, i);
        fs_run_for(&fs, 100);
        gs_worker_stats(t.w, &st);
        cr_assert_eq(st.host_used, 0u);
        cr_assert_eq(st.host_pool_free, st.host_pool_bytes);
    }
    tw_stop_each(&fs, &t, 1);
    gs_array_release(a);
}

Test(worker_spill_host, unknown_host_pool_mode_is_refused_naming_the_variable)
{
    gs_worker_params_t p = host_params();
    gs_worker_h w = NULL;

    p.scheduler = "127.0.0.1:1";      /* never contacted: create fails first */
    cr_assert_eq(setenv("GSCHED_HOST_POOL", "hugepages", 1), 0);
    cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_ERR_INVALID_PARAM);
    cr_assert_null(w);
    cr_assert(strstr(gs_last_error(), "GSCHED_HOST_POOL") &&
              strstr(gs_last_error(), "hugepages"), "message: %s", gs_last_error());
}

/* sum(x) of a 96-chunk x (384 KiB) without fusion (fs_run_unfused_sum). */
static void run_unfused_sum(const gs_worker_params_t *p, int nw, int split, gs_worker_stats_t *st_p)
{
    gs_array_h a = chunked_array(96, 1);
    fs_run_unfused_sum(&fs, a, p, nw, split, st_p);
    gs_array_release(a);
}

Test(worker_spill_host, unfused_sum_brings_host_inputs_back_to_the_device)
{
    gs_worker_params_t p = host_params();
    gs_worker_stats_t st;
    run_unfused_sum(&p, 1, 0, &st);
    cr_assert_gt(st.host_spills, 0u);
    cr_assert_gt(st.host_unspills, 0u, "no input came back from host memory");
    cr_assert_gt(st.host_unspilled_ns, 0u);
    cr_assert_leq(st.mem_used, (uint64_t)LIMIT);
    cr_assert_eq(st.spills, 0u);
}

/* Assign every task of @a tg whose dependencies are done (done[]) and that is not assigned yet
 * to peer 0; returns how many. */
static size_t assign_ready(const gs_taskgraph_t *tg, char *assigned, const char *done,
                           uint64_t *batch, const uint64_t *holder)
{
    size_t nb = 0;
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        int ready = !assigned[t];
        for (uint64_t j = tg->dep_off[t]; j < tg->dep_off[t + 1] && ready; j++)
            ready = done[tg->deps[j]];
        if (!ready) continue;
        assigned[t] = 1;
        batch[nb++] = t;
    }
    if (nb) fs_assign(&fs, 0, 1, tg, batch, nb, holder);
    return nb;
}

/* Prefetch: 96 generators of 128 KiB chunks (12 MiB) on an 8 MiB "device" spilling down to 30 %
 * run first, so most of their chunks go to host memory; then the 96 tasks summing them arrive
 * at once, and each input is released once summed (as gsched does). Admission's window (12
 * tasks that are not small) leaves the others queued: their inputs come up ahead of admission
 * while the device is under its threshold (70 %). */
Test(worker_spill_host, inputs_of_queued_tasks_come_up_ahead_of_admission)
{
    gs_worker_params_t p = host_params();
    gs_worker_stats_t st;
    tw_t t;
    double *ref, *got;
    size_t size, ndone = 0;
    gs_array_h a, s;
    int64_t shape[2] = {16, 1024 * 96}, chunks[2] = {16, 1024};
    gs_taskgraph_t *tg;
    char *assigned, *done, *output;
    uint64_t *batch, *holder, *consumers;
    int *place;

    p.memory_limit = 8u << 20;
    p.spill_target = 0.3;
    cr_assert_eq(gs_array_random_uniform(13, 0, 1, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_reduce_axes(GS_RED_SUM, a, 1, (int[]){0}, 0, NULL, &s), GS_OK);
    tg = tw_lower(s, GS_LOWER_CULL, &ref, &size);
    assigned = calloc(tg->ntasks, 1);
    done = calloc(tg->ntasks, 1);
    output = calloc(tg->ntasks, 1);
    batch = calloc(tg->ntasks, sizeof(uint64_t));
    holder = calloc(tg->ntasks, sizeof(uint64_t));
    consumers = calloc(tg->ntasks, sizeof(uint64_t));
    place = calloc(tg->ntasks, sizeof(int));
    for (uint64_t o = 0; o < tg->noutputs; o++) output[tg->outputs[o]] = 1;
    for (uint64_t j = 0; j < tg->dep_off[tg->ntasks]; j++) consumers[tg->deps[j]]++;
    tw_start_each(&fs, &t, 1, &p);
    for (uint64_t i = 0; i < tg->ntasks; i++) holder[i] = fs.peers[0]->id;
    /* the generators, to the end */
    cr_assert_eq(assign_ready(tg, assigned, done, batch, holder), 96u);
    for (size_t k = 0; k < 96; k++) {
        const fs_done_t *d = fs_wait_done(&fs, 1, batch[k], 30000);
        cr_assert(d != NULL && d->status == GS_OK, "generator %llu: %s",
                  (unsigned long long)batch[k], d ? d->err : "timed out");
        done[batch[k]] = 1;
        ndone++;
    }
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.host_used, 4u << 20, "the generators' chunks are not in host memory");
    cr_assert_leq(st.mem_used, 6u << 20);
    cr_assert_eq(st.prefetches, 0u);
    /* their consumers at once, waves until the end; inputs released once consumed */
    while (ndone < tg->ntasks) {
        size_t nb = assign_ready(tg, assigned, done, batch, holder);
        cr_assert_gt(nb, 0u, "nothing to assign");
        for (size_t k = 0; k < nb; k++) {
            const fs_done_t *d = fs_wait_done(&fs, 1, batch[k], 30000);
            cr_assert(d != NULL && d->status == GS_OK, "task %llu: %s",
                      (unsigned long long)batch[k], d ? d->err : "timed out");
            done[batch[k]] = 1;
            ndone++;
            for (uint64_t j = tg->dep_off[batch[k]]; j < tg->dep_off[batch[k] + 1]; j++) {
                uint64_t dep = tg->deps[j];
                if (--consumers[dep] == 0 && !output[dep]) fs_release(&fs, 0, 1, dep);
            }
        }
    }
    got = calloc(size, sizeof(double));
    cr_assert(fs_gather_all(&fs, 1, tg, place, got, 10000), "gather failed");
    fs_assert_close(got, ref, size);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.prefetches, 0u, "no input of a queued task came up ahead of admission");
    cr_assert_leq(st.prefetches, st.host_unspills);
    tw_stop_each(&fs, &t, 1);
    free(got);
    free(ref);
    free(assigned);
    free(done);
    free(output);
    free(batch);
    free(holder);
    free(consumers);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(s);
    gs_array_release(a);
}

Test(worker_spill_host, peers_fetch_chunks_from_host_memory)
{
    gs_worker_params_t p[2] = {host_params(), {0}};
    gs_worker_stats_t st;
    p[1].nthreads = 1;
    run_unfused_sum(p, 2, 1, &st);
    cr_assert_gt(st.host_spills, 0u);
    cr_assert_eq(st.served, 96u);
    cr_assert_gt(st.host_unspilled_bytes, 0u, "no chunk was served from host memory");
    cr_assert_eq(st.host_unspills, 0u, "serving brought chunks back to the device");
}

/* The cluster stays usable after a failure: drop graph 1, run and check a small graph 2. */
static void assert_still_usable(void)
{
    gs_array_h small = chunked_array(2, 1);
    double *ref, *got;
    size_t size, failed;
    gs_taskgraph_t *tg = tw_lower(small, GS_LOWER_DEFAULT, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));
    gs_msg_t m;

    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_CANCEL;
    m.u.cancel.graph_id = 1;
    fs_send(&fs, 0, &m);
    failed = fs_run_graph(&fs, 2, tg, place, 0, 30000);
    cr_assert_eq(failed, 0, "%s", fs_fail_msg(&fs, failed));
    got = calloc(size, sizeof(double));
    cr_assert(fs_gather_all(&fs, 2, tg, place, got, 10000));
    fs_assert_close(got, ref, size);
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(small);
}

/* Count the spill files in the worker's directory under tmpdir. */
static int chunk_files(void)
{
    char sub[PATH_MAX];
    struct dirent *de;
    int n = -1;
    DIR *d = opendir(tmpdir);
    cr_assert_not_null(d);
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "gsched-worker-", 14) != 0) continue;
        snprintf(sub, sizeof(sub), "%s/%s", tmpdir, de->d_name);
        n = tmp_tree_count(sub, ".chunk");
    }
    closedir(d);
    cr_assert_geq(n, 0, "no worker directory in %s", tmpdir);
    return n;
}

/* Host tier full: host copies cascade to the disk tier. 256 KiB persisted on a 64 KiB device
 * over a 32 KiB host tier: every chunk comes back exact, most from files. */
Test(worker_spill_host, full_host_tier_cascades_to_disk_and_chunks_gather_exactly)
{
    gs_worker_params_t p = host_params();
    gs_array_h a = chunked_array(64, 1);
    double *ref, *got;
    size_t size, failed;
    gs_taskgraph_t *tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));
    gs_worker_stats_t st;
    tw_t t;

    p.host_limit = 32768;
    tw_start_each(&fs, &t, 1, &p);
    failed = fs_run_graph(&fs, 1, tg, place, 0, 60000);
    cr_assert_eq(failed, 0, "%s", fs_fail_msg(&fs, failed));
    gs_worker_stats(t.w, &st);
    cr_assert_leq(st.mem_used, (uint64_t)LIMIT);
    cr_assert_leq(st.host_used, 32768u);
    cr_assert_gt(st.disk_used, 0u, "nothing went to disk");
    cr_assert_geq(st.disk_used + st.host_used + st.mem_used, 256u * 1024u, "chunks are missing");
    cr_assert_gt(st.spills, 0u);
    cr_assert_eq(st.spilled_bytes, st.spills * 4096u);
    cr_assert_gt(st.spilled_ns, 0u);
    cr_assert_geq(chunk_files(), (int)(st.disk_used / 4096u));
    got = calloc(size, sizeof(double));
    cr_assert(fs_gather_all(&fs, 1, tg, place, got, 10000), "gather failed");
    fs_assert_close(got, ref, size);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.unspilled_bytes, 0u, "the gather read nothing from disk");
    /* releasing the keys deletes their files and host copies */
    for (uint64_t i = 0; i < tg->ntasks; i++) fs_release(&fs, 0, 1, i);
    fs_run_for(&fs, 100);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.host_used, 0u);
    cr_assert_eq(st.disk_used, 0u);
    cr_assert_eq(st.mem_used, 0u);
    cr_assert_eq(chunk_files(), 0);
    tw_stop_each(&fs, &t, 1);
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(a);
}

/* sum(x), x 6 x the device limit, 12 x the host limit: the summing tasks' inputs come back
 * from disk through host memory to the device; the value is exact (run_unfused_sum). */
Test(worker_spill_host, unfused_sum_reads_inputs_back_from_disk_through_host_memory)
{
    gs_worker_params_t p = host_params();
    gs_worker_stats_t st;
    p.host_limit = 32768;
    run_unfused_sum(&p, 1, 0, &st);
    cr_assert_gt(st.spills, 0u, "nothing went to disk");
    cr_assert_gt(st.unspills, 0u, "no input came back from disk");
    cr_assert_gt(st.unspilled_ns, 0u);
    cr_assert_gt(st.host_unspills, 0u);
    cr_assert_leq(st.mem_used, (uint64_t)LIMIT);
}

/* Peers fetch chunks of a streams-mode worker whose host tier cascades to disk; which tier
 * serves each depends on timing (the gather of the test above reads files deterministically,
 * through the same gs__wspill_read); the value is exact. */
Test(worker_spill_host, peers_fetch_chunks_from_the_disk_below_host_memory)
{
    gs_worker_params_t p[2] = {host_params(), {0}};
    gs_worker_stats_t st;
    p[0].host_limit = 32768;
    p[1].nthreads = 1;
    run_unfused_sum(p, 2, 1, &st);
    cr_assert_gt(st.spills, 0u);
    cr_assert_eq(st.served, 96u);
}

/* Device, host and disk full: the task that finds no room fails naming the worker, the disk
 * tier, the sizes and @a expect; chunks stored before are intact; the worker stays usable. */
static void assert_all_tiers_full(tw_t *t, const char *expect)
{
    gs_array_h a = chunked_array(64, 1);
    double *ref;
    size_t size, failed, ngood = 0;
    gs_taskgraph_t *tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));
    const fs_done_t *d;

    failed = fs_run_graph(&fs, 1, tg, place, 0, 60000);
    cr_assert(failed != 0 && failed != (size_t)-1, "no task failed (or timed out)");
    d = &fs.done[failed - 1];
    cr_assert_eq(d->status, GS_ERR_NO_RESOURCE, "%s: %s", gs_status_string(d->status), d->err);
    cr_assert(strstr(d->err, "worker spiller") && strstr(d->err, "disk tier") &&
              strstr(d->err, expect) && strstr(d->err, "host tier") &&
              strstr(d->err, "device tier") && strstr(d->err, "65536"), "message: %s", d->err);
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
    cr_assert_geq(ngood, 24u, "too few chunks were stored before the tiers filled");
    assert_still_usable();
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(a);
}

Test(worker_spill_host, full_disk_under_the_host_tier_fails_naming_worker_tier_sizes_limit)
{
    gs_worker_params_t p = host_params();
    gs_worker_stats_t st;
    tw_t t;

    p.name = "spiller";
    p.host_limit = 32768;
    p.disk_limit = 32768;
    tw_start_each(&fs, &t, 1, &p);
    assert_all_tiers_full(&t, "limit is 32768 bytes");
    gs_worker_stats(t.w, &st);
    cr_assert_leq(st.disk_used, 32768u);
    tw_stop_each(&fs, &t, 1);
}

Test(worker_spill_host, full_file_system_under_the_host_tier_fails_naming_it)
{
    gs_worker_params_t p = host_params();
    tw_t t;
    if (geteuid() != 0 || mount("tmpfs", tmpdir, "tmpfs", 0, "size=40k") != 0)
        cr_skip_test("cannot mount a small tmpfs here (needs root and CAP_SYS_ADMIN: %s)",
                     geteuid() != 0 ? "not root" : strerror(errno));
    p.name = "spiller";
    p.host_limit = 32768;
    tw_start_each(&fs, &t, 1, &p);
    assert_all_tiers_full(&t, "No space left on device");
    tw_stop_each(&fs, &t, 1);
}

Test(worker_spill_host, chunk_larger_than_the_device_limit_fails_naming_worker_tier_sizes_limit)
{
    gs_worker_params_t p = host_params();
    gs_array_h a = chunked_array(4, 2);                /* 8192-byte chunks */
    double *ref;
    size_t size, failed;
    gs_taskgraph_t *tg;
    int *place;
    const fs_done_t *d;
    tw_t t;

    p.name = "small-device";
    p.memory_limit = 4096;
    tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    place = calloc(tg->ntasks, sizeof(int));
    tw_start_each(&fs, &t, 1, &p);
    failed = fs_run_graph(&fs, 1, tg, place, 0, 60000);
    cr_assert(failed != 0 && failed != (size_t)-1, "no task failed (or timed out)");
    d = &fs.done[failed - 1];
    cr_assert_eq(d->status, GS_ERR_NO_DEVICE_MEMORY, "%s: %s", gs_status_string(d->status),
                 d->err);
    cr_assert(strstr(d->err, "worker small-device") && strstr(d->err, "device") &&
              strstr(d->err, "8192") && strstr(d->err, "limit is 4096 bytes"),
              "message: %s", d->err);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(a);
    a = chunked_array(2, 1);                           /* 4096-byte chunks: they fit */
    tg = tw_lower(a, GS_LOWER_DEFAULT, &ref, &size);
    place = calloc(tg->ntasks, sizeof(int));
    failed = fs_run_graph(&fs, 2, tg, place, 0, 30000);
    cr_assert_eq(failed, 0, "%s", fs_fail_msg(&fs, failed));
    tw_stop_each(&fs, &t, 1);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
    gs_array_release(a);
}

/* Device memory's default fractions: nothing moves down while the stored chunks fit under the
 * limit (a persisted array of 0.9 x the limit stays in "device" memory), and a task that does
 * not fit still makes room (4 x the limit persists, through the host tier). */
Test(worker_spill_host, device_defaults_spill_only_on_demand)
{
    gs_worker_params_t p = host_params();
    gs_worker_stats_t st;
    tw_t t;
    p.spill_threshold = p.spill_target = p.spill_pause = 0;   /* the defaults */
    tw_start_each(&fs, &t, 1, &p);
    gs_array_h fits = chunked_array((int)(LIMIT / 4096 * 9 / 10), 1);
    persist_checked(&t, fits, 1);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.host_spills, 0u, "%llu chunks spilled while everything fit",
                 (unsigned long long)st.host_spills);
    gs_array_release(fits);
    gs_array_h big = chunked_array((int)(LIMIT / 4096 * 4), 1);
    persist_checked(&t, big, 2);
    gs_worker_stats(t.w, &st);
    cr_assert_gt(st.host_spills, 0u, "4 x the limit persisted without spilling");
    gs_array_release(big);
    tw_stop_each(&fs, &t, 1);
}
