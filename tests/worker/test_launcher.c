/* Streams mode: QR and SVD tasks go to the worker's launcher thread (worker/exec.c) so that
 * the event loop keeps turning while the backend computes. The cpu backend in streams mode
 * computes inside the enqueueing call, like cuSOLVER does for these routines, so it shows the
 * loop staying free (or not, with GS_WORKER_LAUNCHER=off), values, counts, and stop/cancel
 * with launches queued. */
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

/* No .timeout: with it, Criterion 2.4's runner intermittently leaks a 48-byte record under
 * -j2 (LeakSanitizer then fails the whole run); ctest's TIMEOUT bounds a hang instead. */
TestSuite(worker_launcher, .init = setup, .fini = teardown);

static gs_array_h normal2(uint64_t seed, int64_t m, int64_t n, int64_t cm, int64_t cn)
{
    gs_array_h a;
    int64_t shape[2] = {m, n}, chunks[2] = {cm, cn};
    cr_assert_eq(gs_array_random_normal(seed, 0.0, 1.0, 2, shape, chunks, &a), GS_OK);
    return a;
}

static uint64_t count_qr_svd(const gs_taskgraph_t *tg)
{
    uint64_t n = 0;
    for (uint64_t t = 0; t < tg->ntasks; t++) n += (uint64_t)fs_task_is_qr_or_svd(tg, t);
    return n;
}

/* Run @a a's graph on worker 0, compare with the serial evaluator; the number of its QR and
 * SVD tasks. */
static uint64_t run_and_check(uint64_t gid, gs_array_h a, double tol)
{
    double *ref, *got;
    size_t size;
    uint64_t nla;
    gs_taskgraph_t *tg = fs_run_gather_peer0(&fs, gid, a, &ref, &got, &size);
    for (size_t i = 0; i < size; i++)
        cr_assert(fabs(got[i] - ref[i]) <= tol * fmax(1.0, fabs(ref[i])),
                  "graph %llu element %zu: %.17g, reference %.17g", (unsigned long long)gid, i,
                  got[i], ref[i]);
    nla = count_qr_svd(tg);
    free(got);
    free(ref);
    gs_taskgraph_free(tg);
    return nla;
}

Test(worker_launcher, qr_and_svd_tasks_go_to_the_launcher_and_give_the_same_values)
{
    tw_t t;
    gs_worker_stats_t st;
    gs_array_h a = normal2(11, 600, 40, 100, 40), b = normal2(12, 40, 30, 40, 30);
    gs_array_h q, r, u, s, vt, ab;
    uint64_t nla = 0;

    cr_assert_eq(gs_array_qr(a, &q, &r), GS_OK);
    cr_assert_eq(gs_array_svd(a, &u, &s, &vt), GS_OK);
    cr_assert_eq(gs_array_matmul(a, b, &ab), GS_OK);
    tw_start_streams(&t, &fs, NULL, 0);
    nla += run_and_check(1, q, 1e-10);
    nla += run_and_check(2, r, 1e-10);
    nla += run_and_check(3, u, 1e-10);
    nla += run_and_check(4, s, 1e-10);
    nla += run_and_check(5, vt, 1e-10);
    cr_assert_gt(nla, 5, "the graphs have only %llu QR/SVD tasks", (unsigned long long)nla);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.tasks_launcher, nla, "%llu tasks went to the launcher, the graphs have %llu "
                 "QR/SVD tasks", (unsigned long long)st.tasks_launcher, (unsigned long long)nla);
    /* GEMMs stay on the loop's streams */
    cr_assert_eq(run_and_check(6, ab, 1e-12), 0);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.tasks_launcher, nla);
    cr_assert_eq(st.tasks_failed, 0);
    tw_stop_each(&fs, &t, 1);
    gs_array_release(a), gs_array_release(b), gs_array_release(ab);
    gs_array_release(q), gs_array_release(r);
    gs_array_release(u), gs_array_release(s), gs_array_release(vt);
}

/* ---- loop responsiveness: a repeating timer on the worker's loop records its longest gap */

/* Run the SVD values of an n x n matrix on a streams worker while a 2 ms timer ticks; the
 * longest gap between ticks and the longest kernel time of a QR/SVD task (ns). With
 * @a attempts > 1 the graph runs again (as a new graph, on the same worker) until one run shows
 * the loop turning (gap < half the task), at most @a attempts times: a loop blocked by the task
 * stands still for the whole task in every run, while a loaded machine (CI's sanitizer builds
 * run several suites on 2 cores beside the SVD's own BLAS threads) can leave an unblocked loop
 * unscheduled for a while in one run, but not in every one. */
static void svd_with_ticker(int n, int attempts, uint64_t *max_gap_p, uint64_t *max_run_p,
                            uint64_t *launched_p, uint64_t *nla_p)
{
    tw_t t;
    fs_ticker_t k;
    gs_worker_stats_t st;
    gs_array_h a = normal2(21, n, n, n, n), s;
    gs_taskgraph_t *tg;
    double *ref;
    size_t size, failed;
    int place[64] = {0};
    uint64_t max_run = 0;
    uint64_t runs = 0;

    cr_assert_eq(gs_array_svd(a, NULL, &s, NULL), GS_OK);
    tg = tw_lower(s, GS_LOWER_DEFAULT, &ref, &size);
    cr_assert_leq(tg->ntasks, 64);
    tw_start_streams(&t, &fs, NULL, 0);
    while (runs < (uint64_t)attempts) {
        uint64_t gid = ++runs;
        max_run = 0;
        fs_ticker_start(&fs, &k);
        failed = fs_run_graph(&fs, gid, tg, place, 1, 60000);
        cr_assert_eq(failed, 0, "%s", failed == (size_t)-1 ? "timed out" : fs.done[failed - 1].err);
        fs_ticker_stop(&fs, &k);
        for (uint64_t i = 0; i < tg->ntasks; i++) {
            const fs_done_t *d = fs_find_done(&fs, gid, i);
            cr_assert_not_null(d);
            if (fs_task_is_qr_or_svd(tg, i) && d->run_ns > max_run) max_run = d->run_ns;
        }
        cr_log_info("run %llu: longest loop stall %.1f ms; longest QR/SVD task %.1f ms",
                    (unsigned long long)gid, k.max_gap / 1e6, max_run / 1e6);
        if (k.max_gap < max_run / 2) break;
    }
    gs_worker_stats(t.w, &st);
    /* per run (every run is the same graph) */
    cr_assert_eq(st.tasks_launcher % runs, 0);
    *launched_p = st.tasks_launcher / runs;
    tw_stop_each(&fs, &t, 1);
    *max_gap_p = k.max_gap;
    *max_run_p = max_run;
    *nla_p = count_qr_svd(tg);
    free(ref);
    gs_taskgraph_free(tg);
    gs_array_release(a);
    gs_array_release(s);
}

Test(worker_launcher, the_loop_keeps_turning_while_an_svd_computes)
{
    uint64_t gap, run, launched, nla;
    svd_with_ticker(700, 3, &gap, &run, &launched, &nla);
    cr_assert_gt(nla, 0);
    cr_assert_eq(launched, nla, "%llu tasks went to the launcher, the graph has %llu QR/SVD",
                 (unsigned long long)launched, (unsigned long long)nla);
    cr_assert_geq(run, 40000000ull, "the SVD took only %.1f ms: too fast to tell", run / 1e6);
    cr_assert_lt(gap, run / 2, "the loop stood still for %.1f ms while a %.1f ms task ran",
                 gap / 1e6, run / 1e6);
}

Test(worker_launcher, without_the_launcher_an_svd_blocks_the_loop)
{
    uint64_t gap, run, launched, nla;
    cr_assert_eq(setenv("GS_WORKER_LAUNCHER", "off", 1), 0);
    svd_with_ticker(700, 1, &gap, &run, &launched, &nla);
    cr_assert_gt(nla, 0);
    cr_assert_eq(launched, 0);
    cr_assert_geq(run, 40000000ull, "the SVD took only %.1f ms: too fast to tell", run / 1e6);
    cr_assert_geq(gap, run / 10 * 8, "the loop turned every %.1f ms during a %.1f ms task it "
                  "should have been blocked by", gap / 1e6, run / 1e6);
}

/* ---- stop and cancel with launches queued */

/* Assign every not yet assigned task of @a tg whose dependencies are done; returns how many. */
static size_t assign_ready(uint64_t gid, const gs_taskgraph_t *tg, uint8_t *assigned)
{
    uint64_t *holder = calloc(tg->ntasks + 1, sizeof(uint64_t));
    uint64_t *batch = calloc(tg->ntasks + 1, sizeof(uint64_t));
    size_t n = 0;
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        const fs_done_t *d = fs_find_done(&fs, gid, t);
        if (d != NULL) {
            cr_assert_eq(d->status, GS_OK, "task %llu: %s", (unsigned long long)t, d->err);
            holder[t] = fs.peers[0]->id;
        }
    }
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        int ready = !assigned[t];
        for (uint64_t k = tg->dep_off[t]; ready && k < tg->dep_off[t + 1]; k++)
            ready = fs_find_done(&fs, gid, tg->deps[k]) != NULL;
        if (ready) {
            batch[n++] = t;
            assigned[t] = 1;
        }
    }
    if (n) fs_assign(&fs, 0, gid, tg, batch, n, holder);
    free(holder);
    free(batch);
    return n;
}

typedef struct {
    gs_worker_h w;
    uint64_t launched;
} launched_pred_t;

static int launched_at_least(void *arg)
{
    launched_pred_t *p = arg;
    gs_worker_stats_t st;
    gs_worker_stats(p->w, &st);
    return st.tasks_launcher >= p->launched;
}

static int all_done(void *arg)
{
    const gs_taskgraph_t *tg = arg;
    for (uint64_t t = 0; t < tg->ntasks; t++)
        if (tg->dep_off[t] == tg->dep_off[t + 1] && fs_find_done(&fs, 1, t) == NULL) return 0;
    return 1;
}

/* Graph 1: the Q of an 8 x 800-row, 400-column array; its generators are run, then its 8 leaf
 * QRs are assigned at once and this returns as soon as all 8 are with the launcher (it runs
 * them one after the other, ~tens of ms each). */
static gs_taskgraph_t *queue_leaf_qrs(tw_t *t, uint8_t **assigned_p, gs_array_h *a_p,
                                      gs_array_h *q_p)
{
    gs_taskgraph_t *tg;
    double *ref;
    size_t size;
    uint8_t *assigned;
    launched_pred_t lp;
    gs_worker_stats_t st;
    uint64_t nleaf = 0;

    *a_p = normal2(31, 8 * 800, 400, 800, 400);
    cr_assert_eq(gs_array_qr(*a_p, q_p, NULL), GS_OK);
    tg = tw_lower(*q_p, GS_LOWER_DEFAULT, &ref, &size);
    free(ref);
    assigned = calloc(tg->ntasks, 1);
    /* the generators (no inputs) first */
    {
        uint64_t *holder = calloc(tg->ntasks + 1, sizeof(uint64_t));
        uint64_t *batch = calloc(tg->ntasks + 1, sizeof(uint64_t));
        size_t n = 0;
        for (uint64_t i = 0; i < tg->ntasks; i++)
            if (tg->dep_off[i] == tg->dep_off[i + 1]) {
                batch[n++] = i;
                assigned[i] = 1;
            }
        cr_assert_gt(n, 0);
        fs_assign(&fs, 0, 1, tg, batch, n, holder);
        free(holder);
        free(batch);
    }
    cr_assert(fs_run_until(&fs, all_done, tg, 20000), "the generators did not finish");
    /* now every leaf QR is ready: one dispatch hands them all to the launcher */
    cr_assert_gt(assign_ready(1, tg, assigned), 0);
    for (uint64_t i = 0; i < tg->ntasks; i++)
        nleaf += (uint64_t)(assigned[i] && fs_task_is_qr_or_svd(tg, i));
    cr_assert_eq(nleaf, 8, "%llu leaf QRs", (unsigned long long)nleaf);
    lp.w = t->w;
    lp.launched = nleaf;
    cr_assert(fs_run_until(&fs, launched_at_least, &lp, 10000), "the QRs did not reach the "
              "launcher");
    gs_worker_stats(t->w, &st);
    cr_assert_geq(st.tasks_running, 4, "only %llu of the 8 QRs still running: the launcher "
                  "cannot have had any queued", (unsigned long long)st.tasks_running);
    *assigned_p = assigned;
    return tg;
}

static size_t ndone_of(uint64_t gid)
{
    size_t n = 0;
    for (size_t i = 0; i < fs.ndone; i++) n += fs.done[i].graph == gid;
    return n;
}

Test(worker_launcher, stop_with_launches_queued_is_clean)
{
    tw_t t;
    gs_array_h a, q;
    uint8_t *assigned;
    gs_taskgraph_t *tg;
    size_t before;

    tw_start_streams(&t, &fs, NULL, 0);
    tg = queue_leaf_qrs(&t, &assigned, &a, &q);
    before = ndone_of(1);
    tw_stop_each(&fs, &t, 1);     /* LeakSanitizer checks that no job or task was left behind */
    /* the canceled QRs are not reported as failures (stop flushes successes only) */
    for (size_t i = 0; i < fs.ndone; i++)
        cr_assert_eq(fs.done[i].status, GS_OK, "task %llu reported %d: %s",
                     (unsigned long long)fs.done[i].task, fs.done[i].status, fs.done[i].err);
    cr_assert_lt(ndone_of(1), before + 8, "every queued QR ran although the worker stopped");
    free(assigned);
    gs_taskgraph_free(tg);
    gs_array_release(a);
    gs_array_release(q);
}

typedef struct {
    gs_worker_h w;
} idle_pred_t;

static int worker_idle(void *arg)
{
    gs_worker_stats_t st;
    gs_worker_stats(((idle_pred_t *)arg)->w, &st);
    return st.tasks_running == 0 && st.tasks_queued == 0;
}

Test(worker_launcher, cancel_with_launches_queued_reports_nothing_and_keeps_working)
{
    tw_t t;
    gs_array_h a, q, small = normal2(41, 300, 20, 50, 20), sq;
    uint8_t *assigned;
    gs_taskgraph_t *tg;
    gs_worker_stats_t st;
    idle_pred_t ip;
    size_t before;
    gs_msg_t m;

    tw_start_streams(&t, &fs, NULL, 0);
    tg = queue_leaf_qrs(&t, &assigned, &a, &q);
    before = ndone_of(1);
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_CANCEL;
    m.u.cancel.graph_id = 1;
    fs_send(&fs, 0, &m);
    ip.w = t.w;
    cr_assert(fs_run_until(&fs, worker_idle, &ip, 20000), "the canceled QRs never finished");
    fs_run_for(&fs, 20);
    /* QRs that finished before the CANCEL arrived (a loop turn or two) are reported, the rest
     * (at least 4 were in the launcher when it was sent, ~tens of ms each) are not */
    cr_assert_lt(ndone_of(1), before + 4, "%zu of the 8 canceled QRs were reported",
                 ndone_of(1) - before);
    gs_worker_stats(t.w, &st);
    cr_assert_eq(st.chunks, 0, "%llu chunks left after the cancel", (unsigned long long)st.chunks);
    cr_assert_eq(st.mem_used, 0, "%llu bytes left after the cancel",
                 (unsigned long long)st.mem_used);
    /* the launcher still serves */
    cr_assert_eq(gs_array_qr(small, &sq, NULL), GS_OK);
    cr_assert_gt(run_and_check(2, sq, 1e-10), 0);
    tw_stop_each(&fs, &t, 1);
    free(assigned);
    gs_taskgraph_free(tg);
    gs_array_release(a), gs_array_release(q);
    gs_array_release(small), gs_array_release(sq);
}
