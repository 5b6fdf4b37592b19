/* Two (or three) in-process workers on one loop exchanging chunks over UCX. */
#include "fake_sched.h"

#include "common/log.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

TestSuite(worker_peer, .init = setup, .fini = teardown, .timeout = 90);

static void start_workers(tw_t *t, int n, const gs_worker_params_t *p)
{
    for (int i = 0; i < n; i++) {
        tw_start(&t[i], &fs, p);
        /* register one at a time so peer index i is worker t[i] */
        cr_assert(fs_wait_registered(&fs, i + 1, 5000), "worker %d did not register", i);
    }
    fs_announce_peers(&fs);
    fs_run_for(&fs, 20);
}

static void stop_workers(tw_t *t, int n)
{
    for (int i = 0; i < n; i++) {
        if (t[i].w == NULL) continue;
        gs_worker_stop(t[i].w, GS_OK);
        cr_assert(tw_wait_stopped(&t[i], &fs, 5000), "worker %d did not stop", i);
        tw_destroy(&t[i]);
    }
}

/* Run @a a spread over @a nw workers (task i on worker i % nw, or by @a place_fn) and check. */
static void run_spread_failing(uint64_t gid, gs_array_h a, unsigned flags, int nw, tw_t *t,
                               uint64_t *fetched_p, int failures_ok);

static void run_spread(uint64_t gid, gs_array_h a, unsigned flags, int nw, tw_t *t,
                       uint64_t *fetched_p)
{
    run_spread_failing(gid, a, flags, nw, t, fetched_p, 0);
}

/* run_spread; with @a failures_ok, failed fetches (retried by the workers) are allowed. */
static void run_spread_failing(uint64_t gid, gs_array_h a, unsigned flags, int nw, tw_t *t,
                               uint64_t *fetched_p, int failures_ok)
{
    double *ref, *got;
    size_t size, failed;
    gs_taskgraph_t *tg = tw_lower(a, flags, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));
    uint64_t fetched = 0;
    for (uint64_t i = 0; i < tg->ntasks; i++) place[i] = (int)(i % (uint64_t)nw);
    failed = fs_run_graph(&fs, gid, tg, place, 1, 30000);
    cr_assert_eq(failed, 0, "graph %llu: %s", (unsigned long long)gid,
                 failed == (size_t)-1 ? "timed out" : fs.done[failed - 1].err);
    got = calloc(size ? size : 1, sizeof(double));
    cr_assert(fs_gather_all(&fs, gid, tg, place, got, 5000), "gather failed");
    fs_assert_close(got, ref, size);
    for (int i = 0; i < nw; i++) {
        gs_worker_stats_t st;
        gs_worker_stats(t[i].w, &st);
        if (!failures_ok) cr_assert_eq(st.fetch_failures, 0);
        fetched += st.fetches;
    }
    if (fetched_p) *fetched_p = fetched;
    free(got);
    free(ref);
    free(place);
    gs_taskgraph_free(tg);
}

static gs_array_h seed_sum(int64_t n, int64_t chunk)
{
    gs_array_h a, b, c, d;
    int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
    gs_slice_t s[2] = {{0, 0, 2, 0}, {0, 0, 2, 0}};
    gs_reduce_params_t rp = {GS_REDUCE_FIELD_SPLIT_EVERY, 0, 3, 0};
    cr_assert_eq(gs_array_random_normal(11, 10.0, 1.0, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_binary_scalar(GS_BINARY_ADD, a, 1.0, &b), GS_OK);
    cr_assert_eq(gs_array_slice(b, 2, s, &c), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, c, &rp, &d), GS_OK);
    gs_array_release(a);
    gs_array_release(b);
    gs_array_release(c);
    return d;
}

/* random -> +1 -> transpose, unfused: big chunks move between workers (rendezvous). Lowered
 * with BIG_FLAGS: without slice pushdown, which would move the transpose into the generator and
 * leave no chunk crossing workers under the round-robin placement. */
#define BIG_FLAGS GS_LOWER_CULL
static gs_array_h big_chain(int64_t n, int64_t chunk)
{
    gs_array_h a, b, c;
    int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
    cr_assert_eq(gs_array_random_uniform(5, -1.0, 1.0, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_binary_scalar(GS_BINARY_MUL, a, 3.0, &b), GS_OK);
    cr_assert_eq(gs_array_transpose(b, NULL, &c), GS_OK);
    gs_array_release(a);
    gs_array_release(b);
    return c;
}

Test(worker_peer, fetches_inputs_from_another_worker)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h sum = seed_sum(96, 16);
    uint64_t fetched = 0;
    p.nthreads = 1;
    start_workers(t, 2, &p);
    run_spread(1, sum, GS_LOWER_DEFAULT, 2, t, &fetched);
    cr_assert_gt(fetched, 0, "no chunk moved between the workers");
    run_spread(2, sum, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE, 2, t, &fetched);
    gs_array_release(sum);
    stop_workers(t, 2);
}

Test(worker_peer, moves_large_chunks_with_rendezvous)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h big = big_chain(512, 256);   /* 512 KiB chunks */
    gs_worker_stats_t st0, st1;
    p.nthreads = 1;
    start_workers(t, 2, &p);
    run_spread(1, big, BIG_FLAGS, 2, t, NULL);
    gs_worker_stats(t[0].w, &st0);
    gs_worker_stats(t[1].w, &st1);
    cr_assert_geq(st0.fetch_bytes + st1.fetch_bytes, 512 * 1024u, "%llu bytes fetched",
                  (unsigned long long)(st0.fetch_bytes + st1.fetch_bytes));
    cr_assert_gt(st0.served + st1.served, 0);
    gs_array_release(big);
    stop_workers(t, 2);
}

Test(worker_peer, streams_mode_stages_transfers_through_host_buffers)
{
    gs_worker_params_t p = {0};
    tw_t t[3];
    gs_array_h sum = seed_sum(96, 16), big = big_chain(256, 128);
    uint64_t fetched = 0;
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 2;
    start_workers(t, 3, &p);
    run_spread(1, sum, GS_LOWER_DEFAULT, 3, t, &fetched);
    cr_assert_gt(fetched, 0);
    run_spread(2, big, BIG_FLAGS, 3, t, NULL);
    gs_array_release(sum);
    gs_array_release(big);
    stop_workers(t, 3);
}

/* Graph with one STORE task (0) and one task (1) consuming it. */
static gs_taskgraph_t *pair_graph(void)
{
    gs_array_h a, b;
    gs_taskgraph_t *tg;
    int64_t shape[1] = {64}, chunks[1] = {64};
    cr_assert_eq(gs_array_random_uniform(9, 0, 1, 1, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_MAX, a, NULL, &b), GS_OK);
    cr_assert_eq(gs_graph_lower(b, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE, &tg), GS_OK);
    gs_array_release(a);
    gs_array_release(b);
    cr_assert_geq(tg->ntasks, 2);
    cr_assert_eq(tg->dep_off[1], 0);
    cr_assert_eq(tg->dep_off[2] - tg->dep_off[1], 1);
    cr_assert_eq(tg->deps[tg->dep_off[1]], 0);
    return tg;
}

Test(worker_peer, fetch_from_a_dead_peer_fails_cleanly)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_taskgraph_t *tg = pair_graph();
    uint64_t task0 = 0, task1 = 1, holder[2];
    uint64_t dead_id;
    const fs_done_t *d;
    uint64_t t0;
    p.fetch_timeout_ms = 3000;
    start_workers(t, 2, &p);
    holder[0] = holder[1] = 0;
    fs_assign(&fs, 0, 1, tg, &task0, 1, holder);
    d = fs_wait_done(&fs, 1, 0, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_OK);
    dead_id = fs.peers[0]->id;
    /* worker 0 dies (its UCX worker goes away) but the scheduler has not noticed yet */
    gs_worker_stop(t[0].w, GS_OK);
    cr_assert(tw_wait_stopped(&t[0], &fs, 5000));
    tw_destroy(&t[0]);
    holder[0] = dead_id;
    t0 = uv_hrtime();
    fs_assign(&fs, 1, 1, tg, &task1, 1, holder);
    d = fs_wait_done(&fs, 1, 1, 10000);
    cr_assert_not_null(d, "no completion for a task whose input holder is dead");
    cr_assert_eq(d->status, GS_ERR_WORKER_LOST, "status %d: %s", d->status, d->err);
    cr_assert(strstr(d->err, "task 1") && strstr(d->err, "fetching input (1, 0)"),
              "message: %s", d->err);
    cr_assert_lt(uv_hrtime() - t0, 8000000000ull, "the failure took too long");
    /* the surviving worker still serves */
    {
        uint64_t h0 = fs.peers[1]->id, tasks[1] = {0};
        uint64_t hh[2] = {h0, h0};
        fs_assign(&fs, 1, 2, tg, tasks, 1, hh);
        d = fs_wait_done(&fs, 2, 0, 5000);
        cr_assert_not_null(d);
        cr_assert_eq(d->status, GS_OK);
        tasks[0] = 1;
        fs_assign(&fs, 1, 2, tg, tasks, 1, hh);
        d = fs_wait_done(&fs, 2, 1, 5000);
        cr_assert_not_null(d);
        cr_assert_eq(d->status, GS_OK, "%s", d->err);
    }
    gs_taskgraph_free(tg);
    stop_workers(t, 2);
}

Test(worker_peer, fetch_of_a_key_the_peer_lacks_fails)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_taskgraph_t *tg = pair_graph();
    uint64_t task1 = 1, holder[2];
    const fs_done_t *d;
    start_workers(t, 2, &p);
    holder[0] = fs.peers[0]->id;     /* says worker 0 holds task 0's output; it does not */
    fs_assign(&fs, 1, 1, tg, &task1, 1, holder);
    d = fs_wait_done(&fs, 1, 1, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_ERR_WORKER_LOST, "status %d: %s", d->status, d->err);
    cr_assert(strstr(d->err, "does not have it"), "message: %s", d->err);
    /* and an input on a worker nobody announced */
    holder[0] = 99;
    fs_assign(&fs, 1, 2, tg, &task1, 1, holder);
    d = fs_wait_done(&fs, 2, 1, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_ERR_WORKER_LOST);
    cr_assert(strstr(d->err, "worker 99 is not a known peer"), "message: %s", d->err);
    gs_taskgraph_free(tg);
    stop_workers(t, 2);
}

Test(worker_peer, a_removed_peer_fails_its_pending_fetches)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_taskgraph_t *tg = pair_graph();
    uint64_t task0 = 0, task1 = 1, holder[2];
    const fs_done_t *d;
    gs_worker_stats_t st;
    start_workers(t, 2, &p);
    holder[0] = holder[1] = 0;
    fs_assign(&fs, 0, 1, tg, &task0, 1, holder);
    cr_assert_eq(fs_wait_done(&fs, 1, 0, 5000)->status, GS_OK);
    fs_announce_removed(&fs, fs.peers[0]->id);
    holder[0] = fs.peers[0]->id;
    fs_assign(&fs, 1, 1, tg, &task1, 1, holder);
    d = fs_wait_done(&fs, 1, 1, 5000);
    cr_assert_not_null(d);
    cr_assert_eq(d->status, GS_ERR_WORKER_LOST);
    gs_worker_stats(t[1].w, &st);
    cr_assert_eq(st.npeers, 0);
    gs_taskgraph_free(tg);
    stop_workers(t, 2);
}

Test(worker_peer, an_input_listed_twice_from_a_dead_peer_fails_once)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h a, s;
    gs_taskgraph_t *tg;
    int64_t shape[1] = {64}, chunks[1] = {16};
    gs_reduce_params_t rp = {GS_REDUCE_FIELD_SPLIT_EVERY, 0, 2, 0};
    uint64_t comb = UINT64_MAX, holder[64], first = 0, dead;
    size_t nrec = 0;
    cr_assert_eq(gs_array_random_uniform(2, 0, 1, 1, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, a, &rp, &s), GS_OK);
    cr_assert_eq(gs_graph_lower(s, GS_LOWER_DEFAULT, &tg), GS_OK);
    for (uint64_t i = 0; i < tg->ntasks && comb == UINT64_MAX; i++)
        if (tg->dep_off[i + 1] - tg->dep_off[i] == 2) comb = i;
    cr_assert_neq(comb, UINT64_MAX, "no two-input combine task");
    p.fetch_timeout_ms = 3000;
    start_workers(t, 2, &p);
    first = tg->deps[tg->dep_off[comb]];
    for (int i = 0; i < 64; i++) holder[i] = fs.peers[0]->id;
    fs_assign(&fs, 0, 1, tg, &first, 1, holder);
    cr_assert_eq(fs_wait_done(&fs, 1, first, 5000)->status, GS_OK);
    dead = fs.peers[0]->id;
    gs_worker_stop(t[0].w, GS_OK);
    cr_assert(tw_wait_stopped(&t[0], &fs, 5000));
    tw_destroy(&t[0]);
    {
        /* the combine task with both inputs = `first` (same size), held by the dead worker */
        gs_taskgraph_t alt = *tg;
        uint64_t *deps = malloc(tg->dep_off[tg->ntasks] * sizeof(uint64_t));
        memcpy(deps, tg->deps, tg->dep_off[tg->ntasks] * sizeof(uint64_t));
        deps[tg->dep_off[comb] + 1] = first;
        alt.deps = deps;
        holder[first] = dead;
        fs_assign(&fs, 1, 1, &alt, &comb, 1, holder);
        free(deps);
    }
    cr_assert_not_null(fs_wait_done(&fs, 1, comb, 10000));
    fs_run_for(&fs, 100);
    for (size_t i = 0; i < fs.ndone; i++)
        if (fs.done[i].graph == 1 && fs.done[i].task == comb) {
            nrec++;
            cr_assert_eq(fs.done[i].status, GS_ERR_WORKER_LOST, "%s", fs.done[i].err);
        }
    cr_assert_eq(nrec, 1, "the task was reported %zu times", nrec);
    gs_taskgraph_free(tg);
    gs_array_release(a);
    gs_array_release(s);
    stop_workers(t, 2);
}

Test(worker_peer, shared_memory_mode_moves_chunks)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h sum = seed_sum(96, 16), big = big_chain(512, 256);
    uint64_t fetched = 0;
    p.nthreads = 1;
    p.ucx_shm = 1;
    start_workers(t, 2, &p);
    run_spread(1, sum, GS_LOWER_DEFAULT, 2, t, &fetched);
    cr_assert_gt(fetched, 0);
    run_spread(2, big, BIG_FLAGS, 2, t, NULL);
    gs_array_release(sum);
    gs_array_release(big);
    stop_workers(t, 2);
}

Test(worker_peer, shared_memory_mode_fails_a_dead_peer_fetch_within_the_timeout)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_taskgraph_t *tg = pair_graph();
    uint64_t task0 = 0, task1 = 1, holder[2] = {0, 0}, dead;
    const fs_done_t *d;
    p.ucx_shm = 1;
    p.fetch_timeout_ms = 1500;
    start_workers(t, 2, &p);
    fs_assign(&fs, 0, 1, tg, &task0, 1, holder);
    cr_assert_eq(fs_wait_done(&fs, 1, 0, 5000)->status, GS_OK);
    dead = fs.peers[0]->id;
    gs_worker_stop(t[0].w, GS_OK);
    cr_assert(tw_wait_stopped(&t[0], &fs, 5000));
    tw_destroy(&t[0]);
    holder[0] = dead;
    fs_assign(&fs, 1, 1, tg, &task1, 1, holder);
    d = fs_wait_done(&fs, 1, 1, 10000);
    cr_assert_not_null(d, "no completion: the fetch from a dead peer hung");
    cr_assert_eq(d->status, GS_ERR_WORKER_LOST, "status %d: %s", d->status, d->err);
    gs_taskgraph_free(tg);
    stop_workers(t, 2);
}

static int fetches_all_reported(void *arg)
{
    tw_t *t = arg;
    gs_worker_stats_t st;
    uint64_t fetches = 0, counted = 0;
    for (int i = 0; i < 2; i++) {
        gs_worker_stats(t[i].w, &st);
        fetches += st.fetches;
        counted += fs.peers[i]->bw_count;
    }
    return fetches > 0 && counted == fetches;
}

/* Every completed peer fetch is timed and reported to the scheduler as BANDWIDTH (per source
 * worker, with the path) at the next heartbeat. */
Test(worker_peer, reports_fetch_bandwidth_with_heartbeats)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h big = big_chain(512, 256);   /* 512 KiB chunks */
    gs_worker_stats_t st[2];
    uint64_t fetched = 0, reported = 0, count = 0;
    p.nthreads = 1;
    p.heartbeat_ms = 20;
    start_workers(t, 2, &p);
    run_spread(1, big, BIG_FLAGS, 2, t, NULL);
    /* the next heartbeats carry every fetch (on a loaded machine they may come late) */
    cr_assert(fs_run_until(&fs, fetches_all_reported, t, 30000), "fetches missing from the heartbeats");
    for (int i = 0; i < 2; i++) gs_worker_stats(t[i].w, &st[i]);
    for (int i = 0; i < 2; i++) {
        fetched += st[i].fetch_bytes;
        reported += fs.peers[i]->bw_bytes;
        count += fs.peers[i]->bw_count;
        if (fs.peers[i]->bw_count > 0) {
            cr_assert_eq(fs.peers[i]->bw_peer, st[1 - i].worker_id, "the source is the other worker (%llu, not %llu; self %llu)", (unsigned long long)fs.peers[i]->bw_peer, (unsigned long long)st[1 - i].worker_id, (unsigned long long)st[i].worker_id);
            cr_assert_str_eq(fs.peers[i]->bw_path, "ucx");
        }
    }
    cr_assert_gt(fetched, 0);
    cr_assert_eq(reported, fetched, "%llu bytes reported, %llu fetched", (unsigned long long)reported,
                 (unsigned long long)fetched);
    cr_assert_eq(count, st[0].fetches + st[1].fetches);
    gs_array_release(big);
    stop_workers(t, 2);
}

/* --transfer-checksum: chunks cross with their checksum checked; a corrupted transfer fails
 * the fetch (and so its task, with the reason) instead of handing wrong bytes on. */
Test(worker_peer, checksummed_transfers_pass)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h big = big_chain(256, 128);
    p.nthreads = 1;
    p.transfer_checksum = 1;
    start_workers(t, 2, &p);
    run_spread(1, big, BIG_FLAGS, 2, t, NULL);
    stop_workers(t, 2);
    gs_array_release(big);
}

Test(worker_peer, corrupted_transfers_fail_their_fetch_under_checksums)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h big = big_chain(256, 128);
    p.nthreads = 1;
    p.transfer_checksum = 1;
    p.test_corrupt_transfers = -1;  /* every sender corrupts what it sends */
    start_workers(t, 2, &p);
    {
        double *ref;
        size_t size, failed;
        gs_taskgraph_t *tg = tw_lower(big, BIG_FLAGS, &ref, &size);
        int *place = calloc(tg->ntasks, sizeof(int));
        gs_worker_stats_t st0, st1;
        for (uint64_t i = 0; i < tg->ntasks; i++) place[i] = (int)(i % 2);
        failed = fs_run_graph(&fs, 2, tg, place, 1, 30000);
        cr_assert(failed != 0 && failed != (size_t)-1, "a corrupted transfer went unnoticed");
        cr_assert(strstr(fs.done[failed - 1].err, "corrupted") != NULL, "error: %s",
                  fs.done[failed - 1].err);
        gs_worker_stats(t[0].w, &st0);
        gs_worker_stats(t[1].w, &st1);
        cr_assert_gt(st0.fetch_failures + st1.fetch_failures, 0);
        free(place);
        free(ref);
        gs_taskgraph_free(tg);
    }
    stop_workers(t, 2);
    gs_array_release(big);
}

/* Streams mode with pipelined staging: 512 KiB chunks move as 64 KiB slices (two in flight,
 * eager and rendezvous sizes both), with and without checksums; the values must be exact. */
Test(worker_peer, streams_mode_moves_big_chunks_in_pipelined_slices)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h big = big_chain(512, 256);   /* 512 KiB chunks */
    gs_worker_stats_t st0, st1;
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 2;
    p.pipe_slice = 64 * 1024;
    p.pipe_min = 128 * 1024;
    p.transfer_checksum = 1;
    start_workers(t, 2, &p);
    run_spread(1, big, BIG_FLAGS, 2, t, NULL);
    gs_worker_stats(t[0].w, &st0);
    gs_worker_stats(t[1].w, &st1);
    cr_assert_geq(st0.fetch_bytes + st1.fetch_bytes, 512 * 1024u);
    cr_assert_geq(st0.served_slices + st1.served_slices, 8, "%llu slices sent",
                  (unsigned long long)(st0.served_slices + st1.served_slices));
    cr_assert_eq(st0.fetch_failures + st1.fetch_failures, 0);
    stop_workers(t, 2);
    gs_array_release(big);
}

Test(worker_peer, pipelined_slices_of_an_odd_size_over_three_streams)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h big = big_chain(512, 256);
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 3;
    p.pipe_slice = 100000;                  /* not a divisor of the chunk size */
    p.pipe_min = 1;
    start_workers(t, 2, &p);
    run_spread(1, big, BIG_FLAGS, 2, t, NULL);
    stop_workers(t, 2);
    gs_array_release(big);
}

Test(worker_peer, corrupted_slices_fail_their_fetch_under_checksums)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h big = big_chain(512, 256);
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 2;
    p.pipe_slice = 64 * 1024;
    p.pipe_min = 1;
    p.transfer_checksum = 1;
    p.test_corrupt_transfers = -1;
    start_workers(t, 2, &p);
    {
        double *ref;
        size_t size, failed;
        gs_taskgraph_t *tg = tw_lower(big, BIG_FLAGS, &ref, &size);
        int *place = calloc(tg->ntasks, sizeof(int));
        for (uint64_t i = 0; i < tg->ntasks; i++) place[i] = (int)(i % 2);
        failed = fs_run_graph(&fs, 1, tg, place, 1, 30000);
        cr_assert(failed != 0 && failed != (size_t)-1, "a corrupted slice went unnoticed");
        cr_assert(strstr(fs.done[failed - 1].err, "corrupted") != NULL, "error: %s",
                  fs.done[failed - 1].err);
        free(place);
        free(ref);
        gs_taskgraph_free(tg);
    }
    stop_workers(t, 2);
    gs_array_release(big);
}

/* Payload MACs (--payload-mac on): chunks cross whole and as pipelined slices with their GMAC
 * checked, the values exact; a tampering peer (it alters every chunk after its MAC was taken)
 * gets its chunks refused with a clear error, which fails the fetch and the task that needed
 * it, never handing the altered bytes on. */
Test(worker_peer, payload_maced_transfers_pass_whole_and_in_slices)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h big = big_chain(512, 256);
    gs_worker_stats_t st0, st1;
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 2;
    p.pipe_slice = 64 * 1024;
    p.pipe_min = 256 * 1024;
    p.payload_mac = GS_WORKER_PAYLOAD_MAC_ON;
    start_workers(t, 2, &p);
    run_spread(1, big, BIG_FLAGS, 2, t, NULL);
    gs_worker_stats(t[0].w, &st0);
    gs_worker_stats(t[1].w, &st1);
    cr_assert_geq(st0.served_slices + st1.served_slices, 8, "slices were MACed too");
    cr_assert_eq(st0.fetch_failures + st1.fetch_failures, 0);
    stop_workers(t, 2);
    gs_array_release(big);
}

static void peer_expect_refused_payloads(gs_worker_params_t *p, const char *what)
{
    tw_t t[2];
    gs_array_h big = big_chain(512, 256);
    double *ref;
    size_t size, failed;
    gs_worker_stats_t st0, st1;
    start_workers(t, 2, p);
    gs_taskgraph_t *tg = tw_lower(big, BIG_FLAGS, &ref, &size);
    int *place = calloc(tg->ntasks, sizeof(int));
    for (uint64_t i = 0; i < tg->ntasks; i++) place[i] = (int)(i % 2);
    failed = fs_run_graph(&fs, 1, tg, place, 1, 30000);
    cr_assert(failed != 0 && failed != (size_t)-1, "a tampered %s went unnoticed", what);
    cr_assert(strstr(fs.done[failed - 1].err, "failed its payload MAC") != NULL, "error: %s", fs.done[failed - 1].err);
    gs_worker_stats(t[0].w, &st0);
    gs_worker_stats(t[1].w, &st1);
    cr_assert_gt(st0.fetch_failures + st1.fetch_failures, 0);
    /* each task fetched again GS_W_MAX_REFETCHES (2) times before it failed */
    cr_assert_geq(st0.refetches + st1.refetches, 2, "%llu refetches",
                  (unsigned long long)(st0.refetches + st1.refetches));
    free(place);
    free(ref);
    gs_taskgraph_free(tg);
    stop_workers(t, 2);
    gs_array_release(big);
}

/* A link that alters a few transfers: each task whose input arrived altered fetches it again
 * (its MAC or checksum caught the damage) and the job completes with exact values. */
static void peer_expect_refetched(gs_worker_params_t *p)
{
    tw_t t[2];
    gs_array_h big = big_chain(512, 256);
    gs_worker_stats_t st0, st1;
    start_workers(t, 2, p);
    run_spread_failing(1, big, BIG_FLAGS, 2, t, NULL, 1);
    gs_worker_stats(t[0].w, &st0);
    gs_worker_stats(t[1].w, &st1);
    cr_assert_geq(st0.fetch_failures + st1.fetch_failures, 1, "no transfer arrived altered");
    cr_assert_eq(st0.refetches + st1.refetches, st0.fetch_failures + st1.fetch_failures,
                 "%llu refetches for %llu altered transfers",
                 (unsigned long long)(st0.refetches + st1.refetches),
                 (unsigned long long)(st0.fetch_failures + st1.fetch_failures));
    cr_assert_eq(st0.tasks_failed + st1.tasks_failed, 0);
    stop_workers(t, 2);
    gs_array_release(big);
}

Test(worker_peer, chunks_altered_once_are_fetched_again_under_payload_macs)
{
    gs_worker_params_t p = {0};
    p.nthreads = 1;
    p.payload_mac = GS_WORKER_PAYLOAD_MAC_ON;
    p.test_corrupt_transfers = 1;    /* each sender alters its first chunk, after the MAC */
    peer_expect_refetched(&p);
}

Test(worker_peer, slices_altered_once_are_fetched_again_under_checksums)
{
    gs_worker_params_t p = {0};
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 2;
    p.pipe_slice = 64 * 1024;
    p.pipe_min = 1;
    p.transfer_checksum = 1;
    p.test_corrupt_transfers = 1;
    peer_expect_refetched(&p);
}

Test(worker_peer, tampered_chunks_are_refused_by_their_payload_mac)
{
    gs_worker_params_t p = {0};
    p.nthreads = 1;
    p.payload_mac = GS_WORKER_PAYLOAD_MAC_ON;
    p.transfer_checksum = 1;         /* superseded by the MAC: the error names the MAC */
    p.test_corrupt_transfers = -1;   /* every sender alters what it sends, after the MAC */
    peer_expect_refused_payloads(&p, "chunk");
}

Test(worker_peer, tampered_slices_are_refused_by_their_payload_mac)
{
    gs_worker_params_t p = {0};
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 2;
    p.pipe_slice = 64 * 1024;
    p.pipe_min = 1;
    p.payload_mac = GS_WORKER_PAYLOAD_MAC_ON;
    p.test_corrupt_transfers = -1;
    peer_expect_refused_payloads(&p, "slice");
}

/* A completion notification the backend refuses to register is retried from the loop (never
 * waited for with sync()): tasks, staging copies and transfers still complete with the right
 * values. The knob refuses the first registrations of each worker. */
Test(worker_peer, refused_completion_notifications_are_retried)
{
    gs_worker_params_t p = {0};
    tw_t t[2];
    gs_array_h sum = seed_sum(96, 16), big = big_chain(256, 128);
    gs_worker_stats_t st0, st1;
    p.exec = GS_WORKER_EXEC_STREAMS;
    p.nstreams = 2;
    p.test_notify_failures = 40;
    start_workers(t, 2, &p);
    run_spread(1, sum, GS_LOWER_DEFAULT, 2, t, NULL);
    run_spread(2, big, BIG_FLAGS, 2, t, NULL);
    gs_worker_stats(t[0].w, &st0);
    gs_worker_stats(t[1].w, &st1);
    cr_assert_gt(st0.notify_retries, 0);
    cr_assert_gt(st1.notify_retries, 0);
    cr_assert_eq(st0.tasks_failed + st1.tasks_failed, 0);
    cr_assert_gt(st0.fetches + st1.fetches, 0);
    gs_array_release(sum);
    gs_array_release(big);
    stop_workers(t, 2);
}
