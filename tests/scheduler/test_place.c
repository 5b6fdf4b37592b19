/* Transfer-cost placement (sched.h): measured bandwidth between workers against queue length;
 * bandwidth estimates from BANDWIDTH reports; REPLICATE bookkeeping. Fake workers in-process. */
#include "harness.h"

#include "common/time.h"

#include <criterion/criterion.h>
#include <string.h>

#define MB (1000ull * 1000ull)

/* Worker @a to reports fetching @a gbps GB/s from worker @a from (10 fetches of 100 MB). */
static void report_bw(tp_t *to, tp_t *from, double gbps)
{
    uint64_t peer = from->id, bytes = 1000 * MB, ns = (uint64_t)((double)bytes / gbps);
    uint32_t count = 10;
    gs_str_t path = {(const uint8_t *)"ucx", 3};
    gs_msg_t m;
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_BANDWIDTH;
    m.u.bandwidth = (gs_msg_bandwidth_t){.n = 1, .peer = &peer, .bytes = &bytes, .ns = &ns, .count = &count,
                                         .npaths = 1, .path = &path};
    tp_send(to, &m);
}

static double bw_of(th_t *th, tp_t *from, tp_t *to, int *measured)
{
    double g = 0;
    cr_assert_eq(gs_sched_bandwidth(th->sched, from->id, to->id, &g, measured), GS_OK, "%s", gs_last_error());
    return g;
}

typedef struct scene {
    th_t th;
    tp_t *client, *holder, *other;
    uint64_t gid;
    uint64_t producer, consumer;
    int fill_graph_done;
} scene_t;

/* The holder (1 thread: queue bound 6) computes a persisted producer chunk of @a nbytes, then
 * gets @a nfill filler tasks while it is alone (6 = full); the other worker registers and
 * reports @a gbps from the holder (0: no report); the holder heartbeats @a hb (NULL: none); then
 * a consumer of the chunk is submitted. */
static void scene_run_hb(scene_t *sc, uint64_t nbytes, int nfill, double gbps,
                         const gs_msg_heartbeat_t *hb)
{
    tg_t g;
    uint64_t got[16], pg, ext;
    th_init(&sc->th, NULL);
    sc->client = tp_client(&sc->th, "c");
    sc->holder = tp_worker(&sc->th, "holder", 1);
    tg_init(&g, 1);
    sc->producer = tg_task(&g, 0, 0, NULL);
    g.nbytes[sc->producer] = nbytes;
    tg_output(&g, sc->producer);
    pg = tg_submit_ok(sc->client, &g, GS_SUBMIT_PERSIST);
    cr_assert_eq(tw_collect(sc->holder, pg, 1, got, 16, TH_TIMEOUT_MS), 1);
    tw_done(sc->holder, pg, &sc->producer, 1, GS_OK, nbytes, NULL);
    if (nfill > 0) {
        uint64_t fg;
        tg_init(&g, 1);
        for (int i = 0; i < nfill; i++) tg_output(&g, tg_task(&g, 0, 0, NULL));
        fg = tg_submit_ok(sc->client, &g, 0);
        cr_assert_eq(tw_collect(sc->holder, fg, nfill, got, 16, TH_TIMEOUT_MS), nfill);
    }
    sc->other = tp_worker(&sc->th, "other", 1);
    if (gbps > 0) {
        int measured = 0;
        report_bw(sc->other, sc->holder, gbps);
        th_run_for(&sc->th, 30);
        cr_assert_float_eq(bw_of(&sc->th, sc->holder, sc->other, &measured), gbps, gbps * 1e-6);
        cr_assert(measured);
    }
    if (hb != NULL) {
        gs_msg_t m;
        memset(&m, 0, sizeof m);
        m.type = GS_MSG_HEARTBEAT;
        m.u.heartbeat = *hb;
        tp_send(sc->holder, &m);
        th_run_for(&sc->th, 30);
    }
    tg_init(&g, 1);
    ext = tg_ext(&g, pg, sc->producer);
    sc->consumer = tg_task(&g, 0, 1, &ext);
    tg_output(&g, sc->consumer);
    sc->gid = tg_submit_ok(sc->client, &g, 0);
    sc->fill_graph_done = 0;
}

static void scene_run(scene_t *sc, uint64_t nbytes, int nfill, double gbps)
{
    scene_run_hb(sc, nbytes, nfill, gbps, NULL);
}

/* Which worker gets the consumer within @a ms: 'h', 'o' or 0. */
static char scene_consumer_on(scene_t *sc, int ms)
{
    uint64_t end = gs_now_ns() + (uint64_t)ms * 1000000ull;
    while (gs_now_ns() < end) {
        gs_msg_t m;
        tp_t *ws[2] = {sc->holder, sc->other};
        for (int i = 0; i < 2; i++) {
            if (tp_wait(ws[i], GS_MSG_TASK_ASSIGN, 5, &m)) {
                int found = m.u.task_assign.graph_id == sc->gid && ta_find(&m.u.task_assign, sc->consumer) >= 0;
                gs_msg_cleanup(&m);
                if (found) return i == 0 ? 'h' : 'o';
            }
        }
    }
    return 0;
}

Test(scheduler_place, slow_link_keeps_a_big_input_consumer_on_its_holder_despite_a_longer_queue)
{
    scene_t sc;
    /* 40 MB at 0.1 GB/s = 400 ms to move; the holder's queue (3 fillers) is ~1.5 ms; the other
     * worker is idle */
    scene_run(&sc, 40 * MB, 3, 0.1);
    cr_assert_eq(scene_consumer_on(&sc, 2000), 'h');
    th_fini(&sc.th);
}

Test(scheduler_place, fast_link_moves_a_big_input_consumer_off_a_long_holder_queue)
{
    scene_t sc;
    /* 40 MB at 100 GB/s = 0.4 ms to move, less than the holder's queue: it moves */
    scene_run(&sc, 40 * MB, 3, 100.0);
    cr_assert_eq(scene_consumer_on(&sc, 2000), 'o');
    th_fini(&sc.th);
}

Test(scheduler_place, an_idle_holder_with_its_chunks_in_memory_keeps_the_consumer)
{
    scene_t sc;
    gs_msg_heartbeat_t hb = {.seq = 1, .mem_used = 40 * MB, .mem_limit = 1000 * MB,
                             .disk_limit = UINT64_MAX};
    /* 40 MB at 1 GB/s = 40 ms to move; nothing on the holder's disk: it keeps the task */
    scene_run_hb(&sc, 40 * MB, 0, 1.0, &hb);
    cr_assert_eq(scene_consumer_on(&sc, 2000), 'h');
    th_fini(&sc.th);
}

Test(scheduler_place, a_holder_with_its_chunks_on_a_slow_disk_keeps_the_consumer)
{
    scene_t sc;
    /* the holder's chunks are nearly all on disk, read back at 0.1 GB/s (400 ms): moving the
     * input elsewhere reads it from that disk too, so the holder still keeps the task (a model
     * charging the disk to the holder alone would move it) */
    gs_msg_heartbeat_t hb = {.seq = 1, .mem_used = 1 * MB, .mem_limit = 1000 * MB,
                             .disk_used = 999 * MB, .disk_limit = UINT64_MAX,
                             .unspilled_bytes = 100 * MB, .unspilled_ns = 1000000000ull};
    scene_run_hb(&sc, 40 * MB, 0, 1.0, &hb);
    cr_assert_eq(scene_consumer_on(&sc, 2000), 'h');
    th_fini(&sc.th);
}

/* A device worker's chunks in its host memory (the host tier) cost the holder the copy back
 * to its device, and a peer nothing more than the link (it is served from host memory). */
Test(scheduler_place, a_holder_with_its_chunks_in_host_memory_copied_back_slowly_loses_the_consumer)
{
    scene_t sc;
    /* nearly all in host memory, copied back at 0.1 GB/s (400 ms for 40 MB); the link moves
     * them in 4 ms: the other worker, whose device gets them straight, takes the task */
    gs_msg_heartbeat_t hb = {.seq = 1, .mem_used = 1 * MB, .mem_limit = 1000 * MB,
                             .host_used = 999 * MB, .host_limit = 4000 * MB,
                             .host_unspilled_bytes = 100 * MB, .host_unspilled_ns = 1000000000ull};
    scene_run_hb(&sc, 40 * MB, 0, 10.0, &hb);
    cr_assert_eq(scene_consumer_on(&sc, 2000), 'o');
    th_fini(&sc.th);
}

Test(scheduler_place, a_holder_with_its_chunks_in_host_memory_copied_back_fast_keeps_the_consumer)
{
    scene_t sc;
    /* the same at 25 GB/s back to the device (1.6 ms) over a 1 GB/s link (40 ms): it stays */
    gs_msg_heartbeat_t hb = {.seq = 1, .mem_used = 1 * MB, .mem_limit = 1000 * MB,
                             .host_used = 999 * MB, .host_limit = 4000 * MB,
                             .host_unspilled_bytes = 100 * MB, .host_unspilled_ns = 4000000ull};
    scene_run_hb(&sc, 40 * MB, 0, 1.0, &hb);
    cr_assert_eq(scene_consumer_on(&sc, 2000), 'h');
    th_fini(&sc.th);
}

Test(scheduler_place, fast_link_does_not_wait_for_a_full_holder)
{
    scene_t sc;
    /* the holder is full (6 of 6); 40 MB move in 0.4 ms: no waiting (the old fixed 4 MiB rule
     * made this task wait for the holder) */
    scene_run(&sc, 40 * MB, 6, 100.0);
    th_run_for(&sc.th, 10);
    cr_assert_eq(scene_consumer_on(&sc, 2000), 'o');
    th_fini(&sc.th);
}

Test(scheduler_place, slow_link_waits_for_a_full_holder)
{
    scene_t sc;
    uint64_t filler = 0;
    scene_run(&sc, 40 * MB, 6, 0.1);
    cr_assert_eq(scene_consumer_on(&sc, 300), 0, "the consumer did not wait for its holder");
    tw_done(sc.holder, sc.gid - 1, &filler, 1, GS_OK, 800, NULL);   /* one queue slot frees */
    cr_assert_eq(scene_consumer_on(&sc, 2000), 'h');
    th_fini(&sc.th);
}

Test(scheduler_place, tiny_inputs_never_pin_a_task)
{
    scene_t sc;
    /* an 8-byte input over a very slow link, holder full: the consumer goes to the other worker */
    scene_run(&sc, 8, 6, 0.001);
    cr_assert_eq(scene_consumer_on(&sc, 2000), 'o');
    th_fini(&sc.th);
}

Test(scheduler_place, priors_by_host_and_backend_until_measured_then_ewma)
{
    th_t th;
    gs_sched_params_t prm;
    int measured = 1;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_BW_PRIORS;
    prm.bw_cpu_local_gbps = 3.0;
    prm.bw_cpu_remote_gbps = 1.5;
    prm.bw_gpu_local_gbps = 30.0;
    prm.bw_gpu_remote_gbps = 12.0;
    th_init(&th, &prm);
    tp_t *a = tp_worker(&th, "a", 1);
    tp_t *b = tp_worker(&th, "b", 1);
    /* the harness registers every worker as cpu on one host */
    cr_assert_float_eq(bw_of(&th, a, b, &measured), 3.0, 1e-9);
    cr_assert_eq(measured, 0);
    report_bw(b, a, 10.0);
    th_run_for(&th, 30);
    cr_assert_float_eq(bw_of(&th, a, b, &measured), 10.0, 1e-6);
    cr_assert_eq(measured, 1);
    cr_assert_float_eq(bw_of(&th, b, a, NULL), 3.0, 1e-9, "the reverse direction is a pair of its own");
    report_bw(b, a, 20.0);
    th_run_for(&th, 30);
    cr_assert_float_eq(bw_of(&th, a, b, NULL), 0.7 * 10.0 + 0.3 * 20.0, 1e-6);
    /* small transfers say nothing about bandwidth */
    {
        uint64_t peer = a->id, bytes = 1000, ns = 1000000;
        uint32_t count = 10;
        gs_str_t path = {(const uint8_t *)"", 0};
        gs_msg_t m;
        memset(&m, 0, sizeof m);
        m.type = GS_MSG_BANDWIDTH;
        m.u.bandwidth = (gs_msg_bandwidth_t){.n = 1, .peer = &peer, .bytes = &bytes, .ns = &ns, .count = &count,
                                             .npaths = 1, .path = &path};
        tp_send(b, &m);
        th_run_for(&th, 30);
    }
    cr_assert_float_eq(bw_of(&th, a, b, NULL), 13.0, 1e-6);
    cr_assert_eq(th_stats(&th).bw_reports_total, 2);
    th_fini(&th);
}

Test(scheduler_place, rejects_bad_priors)
{
    gs_sched_params_t prm;
    gs_sched_h s;
    uv_loop_t loop;
    memset(&prm, 0, sizeof prm);
    prm.field_mask = GS_SCHED_FIELD_BW_PRIORS;
    prm.bw_cpu_local_gbps = 1;
    prm.bw_cpu_remote_gbps = 0;
    prm.bw_gpu_local_gbps = 1;
    prm.bw_gpu_remote_gbps = 1;
    uv_loop_init(&loop);
    cr_assert_eq(gs_sched_create(&prm, &loop, &s), GS_ERR_INVALID_PARAM);
    uv_loop_close(&loop);
}
