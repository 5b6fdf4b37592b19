/* The client's side of the conversation with gsched, against a scripted fake scheduler: results,
 * assembly of gathered chunks, errors, loss of the scheduler, cancel, release and persist. */
#include "fake_sched.h"

#include "common/alloc.h"
#include "common/time.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* Every test process gets a deadline: SIGALRM kills a hung test (Criterion reports it as a
 * crash). Criterion's own .timeout leaks a watchdog record in the runner under ASan with -j2. */
static void arm_timeout(void)
{
    alarm(60);
}

static fake_t F;
static gs_client_h C;
static atomic_int progress_calls;
static atomic_ullong progress_last_done, progress_last_total;

static void on_progress(gs_future_h f, uint64_t done, uint64_t total, void *arg)
{
    (void)f;
    (void)arg;
    cr_assert_leq(done, total);
    atomic_store(&progress_last_done, done);
    atomic_store(&progress_last_total, total);
    atomic_fetch_add(&progress_calls, 1);
}

static void start(fake_handler_t h, void *arg)
{
    gs_client_params_t p;
    memset(&F, 0, sizeof(F));
    cr_assert_eq(fake_start(&F, h, arg), 0);
    memset(&p, 0, sizeof(p));
    p.address = F.address;
    p.field_mask = GS_CLIENT_FIELD_PROGRESS;
    p.progress_cb = on_progress;
    cr_assert_eq(gs_client_connect(&p, &C), GS_OK, "%s", gs_last_error());
}

static void stop(void)
{
    gs_client_destroy(C);
    C = NULL;
    fake_stop(&F);
}

/* A 0-d array: the sum of a small constant array. */
static gs_array_h small_sum(void)
{
    int64_t shape[2] = {4, 6}, chunks[2] = {2, 3};
    gs_array_h a, s;
    cr_assert_eq(gs_array_full(1.0, 2, shape, chunks, &a), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, a, NULL, &s), GS_OK, "%s", gs_last_error());
    gs_array_release(a);
    return s;
}

static int h_scalar(fake_t *f, const gs_msg_t *m)
{
    if (m->type == GS_MSG_GRAPH_SUBMIT) return fake_accept_and_finish(f, m);
    if (m->type == GS_MSG_GATHER_REQ) {
        double v = 42.5;
        for (uint64_t i = 0; i < m->u.gather_req.n; i++)
            if (fake_send_data(f, m->u.gather_req.req_id, m->u.gather_req.keys[2 * i],
                               m->u.gather_req.keys[2 * i + 1], GS_OK, &v, 1) != 0)
                return 1;
    }
    if (m->type == GS_MSG_INFO_REQ) {
        gs_msg_t r;
        memset(&r, 0, sizeof(r));
        r.type = GS_MSG_INFO;
        r.u.info.nworkers = 2;
        return fake_send(f, &r) != 0;
    }
    return 0;
}

Test(client_protocol, compute_scalar_returns_the_gathered_value, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    double v = 0;
    gs_future_h fut;
    gs_compute_stats_t st;
    start(h_scalar, NULL);
    cr_assert_eq(gs_client_compute_scalar(C, s, &v), GS_OK, "%s", gs_last_error());
    cr_assert_eq(v, 42.5);
    cr_assert_eq(gs_client_nworkers(C), 2);
    /* the same through a future, with statistics */
    cr_assert_eq(gs_client_submit(C, s, 0, &fut), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_future_wait(fut, 5.0), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_future_stats(fut, &st), GS_OK);
    cr_assert_eq(st.ntasks, F.sub_ntasks);
    cr_assert_gt(st.ntasks, 0);
    cr_assert_float_eq(st.run_s_total, 1e-6 * (double)st.ntasks, 1e-12);
    cr_assert_float_eq(st.sched_wall_s, 0.005, 1e-12);
    cr_assert_geq(st.wall_s, st.submit_s);
    /* the fake reports half the tasks; the client adds the final report before wait returns */
    cr_assert_geq(atomic_load(&progress_calls), 2);
    cr_assert_eq(atomic_load(&progress_last_done), st.ntasks);
    cr_assert_eq(atomic_load(&progress_last_total), st.ntasks);
    cr_assert_eq(F.sub_flags, 0u);
    gs_future_destroy(fut);
    gs_array_release(s);
    stop();
}

Test(client_protocol, compute_scalar_rejects_arrays_with_axes, .init = arm_timeout)
{
    int64_t shape[1] = {5}, chunks[1] = {5};
    gs_array_h a;
    double v = 7;
    start(h_scalar, NULL);
    cr_assert_eq(gs_array_full(1.0, 1, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_client_compute_scalar(C, a, &v), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "scalar") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_client_compute(C, a, &v, 1), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "out holds") != NULL, "%s", gs_last_error());
    cr_assert_eq(v, 7);
    gs_array_release(a);
    stop();
}

Test(client_protocol, zero_d_result_rejects_a_larger_buffer, .init = arm_timeout)
{
    int64_t shape[1] = {5}, chunks[1] = {5};
    gs_reduce_params_t rp = {0};
    gs_array_h a, s;
    gs_future_h fut;
    double out[5] = {7, 7, 7, 7, 7};
    start(h_scalar, NULL);
    cr_assert_eq(gs_array_full(1.0, 1, shape, chunks, &a), GS_OK);
    rp.field_mask = GS_REDUCE_FIELD_SPLIT_EVERY;
    rp.split_every = 4;
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, a, &rp, &s), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_client_compute(C, s, out, 5), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "0-d") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_client_submit(C, s, 0, &fut), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_future_gather(fut, out, 5), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "GS_REDUCE_FIELD_AXIS") != NULL, "%s", gs_last_error());
    for (int i = 0; i < 5; i++) cr_assert_eq(out[i], 7, "out[%d] written on error", i);
    cr_assert_eq(gs_future_gather(fut, out, 1), GS_OK, "%s", gs_last_error());
    cr_assert_eq(out[0], 42.5);
    for (int i = 1; i < 5; i++) cr_assert_eq(out[i], 7);
    gs_future_destroy(fut);
    gs_array_release(s);
    gs_array_release(a);
    stop();
}

/* ---- gathering an array: the fake sends, for each output block, the block's region filled
 * with each element's global row-major index, so the assembled buffer must read 0, 1, 2, ... */

typedef struct grid_arg {
    int ndim;
    int64_t shape[GS_MAX_NDIM];
    int64_t nchunks[GS_MAX_NDIM];
    const int64_t *bounds[GS_MAX_NDIM];
} grid_arg_t;

static int h_grid(fake_t *f, const gs_msg_t *m)
{
    const grid_arg_t *g = f->arg;
    if (m->type == GS_MSG_GRAPH_SUBMIT) return fake_accept_and_finish(f, m);
    if (m->type != GS_MSG_GATHER_REQ) return 0;
    for (uint64_t i = 0; i < m->u.gather_req.n; i++) {
        uint64_t task = m->u.gather_req.keys[2 * i + 1], b;
        int64_t bc[GS_MAX_NDIM], lo[GS_MAX_NDIM], ext[GS_MAX_NDIM], idx[GS_MAX_NDIM];
        int64_t n = 1, rem;
        double *v;
        for (b = 0; b < f->sub_noutputs; b++)
            if (f->sub_outputs[b] == task) break;
        cr_assert_lt(b, f->sub_noutputs, "gather of a key that is not an output");
        rem = (int64_t)b;
        for (int a = g->ndim - 1; a >= 0; a--) {
            bc[a] = rem % g->nchunks[a];
            rem /= g->nchunks[a];
        }
        for (int a = 0; a < g->ndim; a++) {
            lo[a] = g->bounds[a][bc[a]];
            ext[a] = g->bounds[a][bc[a] + 1] - lo[a];
            n *= ext[a];
            idx[a] = 0;
        }
        v = gs_malloc((size_t)n * sizeof(double), "test chunk");
        for (int64_t k = 0; k < n; k++) {
            int64_t flat = 0;
            for (int a = 0; a < g->ndim; a++) flat = flat * g->shape[a] + lo[a] + idx[a];
            v[k] = (double)flat;
            for (int a = g->ndim - 1; a >= 0; a--) {
                if (++idx[a] < ext[a]) break;
                idx[a] = 0;
            }
        }
        if (fake_send_data(f, m->u.gather_req.req_id, m->u.gather_req.keys[2 * i], task, GS_OK,
                           v, (size_t)n) != 0) {
            gs_free(v);
            return 1;
        }
        gs_free(v);
    }
    return 0;
}

static void check_gather(int ndim, const int64_t *shape, const int64_t *chunks)
{
    grid_arg_t g;
    gs_array_h a;
    double *out;
    int64_t size = 1;
    memset(&g, 0, sizeof(g));
    cr_assert_eq(gs_array_arange(0.0, 1.0, ndim, shape, chunks, &a), GS_OK, "%s", gs_last_error());
    g.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        g.shape[d] = shape[d];
        g.nchunks[d] = gs_array_nchunks(a, d);
        g.bounds[d] = gs_array_chunk_bounds(a, d);
        size *= shape[d];
    }
    start(h_grid, &g);
    out = gs_malloc((size_t)size * sizeof(double), "test out");
    for (int64_t i = 0; i < size; i++) out[i] = -1;
    cr_assert_eq(gs_client_compute(C, a, out, (size_t)size), GS_OK, "%s", gs_last_error());
    for (int64_t i = 0; i < size; i++) cr_assert_eq(out[i], (double)i, "element %lld is %g", (long long)i, out[i]);
    gs_free(out);
    gs_array_release(a);
    stop();
}

Test(client_protocol, gather_places_uneven_2d_chunks_row_major, .init = arm_timeout)
{
    int64_t shape[2] = {7, 10}, chunks[2] = {3, 4};
    check_gather(2, shape, chunks);
}

Test(client_protocol, gather_places_3d_chunks_row_major, .init = arm_timeout)
{
    int64_t shape[3] = {5, 3, 8}, chunks[3] = {2, 2, 3};
    check_gather(3, shape, chunks);
}

Test(client_protocol, gather_places_1d_chunks, .init = arm_timeout)
{
    int64_t shape[1] = {11}, chunks[1] = {4};
    check_gather(1, shape, chunks);
}

/* A scheduler that cannot locate the chunks (direct gathers): every chunk is relayed. */
static int h_grid_no_locate(fake_t *f, const gs_msg_t *m)
{
    f->locate_error = 1;
    return h_grid(f, m);
}

Test(client_protocol, gather_is_relayed_when_locating_fails, .init = arm_timeout)
{
    int64_t shape[2] = {7, 10}, chunks[2] = {3, 4}, size = 70;
    grid_arg_t g;
    gs_array_h a;
    gs_gather_stats_t st;
    double out[70];
    memset(&g, 0, sizeof(g));
    cr_assert_eq(gs_array_arange(0.0, 1.0, 2, shape, chunks, &a), GS_OK, "%s", gs_last_error());
    g.ndim = 2;
    for (int d = 0; d < 2; d++) {
        g.shape[d] = shape[d];
        g.nchunks[d] = gs_array_nchunks(a, d);
        g.bounds[d] = gs_array_chunk_bounds(a, d);
    }
    start(h_grid_no_locate, &g);   /* set in the fake's thread, before the gather asks */
    cr_assert_eq(gs_client_set_gather_path(C, GS_GATHER_DIRECT), GS_OK);   /* auto relays small results */
    cr_assert_eq(gs_client_compute(C, a, out, (size_t)size), GS_OK, "%s", gs_last_error());
    for (int64_t i = 0; i < size; i++) cr_assert_eq(out[i], (double)i);
    gs_client_gather_stats(C, &st);
    cr_assert_eq(st.chunks_relay, 9);
    cr_assert_eq(st.chunks_direct + st.chunks_shm, 0);
    cr_assert_eq(F.counts[GS_MSG_LOCATE_REQ], 1);
    gs_array_release(a);
    stop();
}

Test(client_protocol, auto_path_relays_a_small_result_without_locating, .init = arm_timeout)
{
    int64_t shape[2] = {7, 10}, chunks[2] = {3, 4};
    check_gather(2, shape, chunks);   /* auto (the default), 560 bytes */
    cr_assert_eq(F.counts[GS_MSG_LOCATE_REQ], 0);
}

/* ---- errors */

static int h_wrong_size(fake_t *f, const gs_msg_t *m)
{
    if (m->type == GS_MSG_GRAPH_SUBMIT) return fake_accept_and_finish(f, m);
    if (m->type == GS_MSG_GATHER_REQ) {
        double v[3] = {1, 2, 3};
        return fake_send_data(f, m->u.gather_req.req_id, m->u.gather_req.keys[0],
                              m->u.gather_req.keys[1], GS_OK, v, 3) != 0;
    }
    return 0;
}

Test(client_protocol, chunk_of_wrong_size_is_a_protocol_error, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    double v = 3;
    start(h_wrong_size, NULL);
    cr_assert_eq(gs_client_compute_scalar(C, s, &v), GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "bytes") != NULL, "%s", gs_last_error());
    cr_assert_eq(v, 3, "output written on error");
    gs_array_release(s);
    stop();
}

static int h_data_error(fake_t *f, const gs_msg_t *m)
{
    if (m->type == GS_MSG_GRAPH_SUBMIT) return fake_accept_and_finish(f, m);
    if (m->type == GS_MSG_GATHER_REQ)
        return fake_send_data(f, m->u.gather_req.req_id, m->u.gather_req.keys[0],
                              m->u.gather_req.keys[1], GS_ERR_NOT_FOUND, NULL, 0) != 0;
    return 0;
}

Test(client_protocol, gather_error_status_reaches_caller, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    double v;
    start(h_data_error, NULL);
    cr_assert_eq(gs_client_compute_scalar(C, s, &v), GS_ERR_NOT_FOUND);
    cr_assert(strstr(gs_last_error(), "gather") != NULL, "%s", gs_last_error());
    gs_array_release(s);
    stop();
}

static int h_task_failed(fake_t *f, const gs_msg_t *m)
{
    static const char msg[] = "task 3 (layer fused, block 3) failed on worker cpu-1: boom";
    gs_msg_t r;
    if (m->type != GS_MSG_GRAPH_SUBMIT) return 0;
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_GRAPH_ACCEPTED;
    r.u.graph_accepted.client_ref = m->u.graph_submit.client_ref;
    r.u.graph_accepted.graph_id = 7;
    if (fake_send(f, &r) != 0) return 1;
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_GRAPH_DONE;
    r.u.graph_done.graph_id = 7;
    r.u.graph_done.status = GS_ERR_TASK_FAILED;
    r.u.graph_done.message.data = (const uint8_t *)msg;
    r.u.graph_done.message.len = sizeof(msg) - 1;
    return fake_send(f, &r) != 0;
}

Test(client_protocol, task_failure_reaches_caller_with_worker_message, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    double v = 5;
    start(h_task_failed, NULL);
    cr_assert_eq(gs_client_compute_scalar(C, s, &v), GS_ERR_TASK_FAILED);
    cr_assert(strstr(gs_last_error(), "boom") != NULL, "%s", gs_last_error());
    cr_assert(strstr(gs_last_error(), "task 3") != NULL, "%s", gs_last_error());
    cr_assert_eq(v, 5);
    gs_array_release(s);
    stop();
}

static int h_reject(fake_t *f, const gs_msg_t *m)
{
    static const char msg[] = "graph submission (client ref 1) rejected: dependency cycle";
    gs_msg_t r;
    if (m->type != GS_MSG_GRAPH_SUBMIT) return 0;
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_ERROR;
    r.u.error.status = GS_ERR_INVALID_PARAM;
    r.u.error.message.data = (const uint8_t *)msg;
    r.u.error.message.len = sizeof(msg) - 1;
    return fake_send(f, &r) != 0;
}

Test(client_protocol, rejected_submission_fails_the_future, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    gs_future_h fut;
    start(h_reject, NULL);
    cr_assert_eq(gs_client_submit(C, s, 0, &fut), GS_OK);
    cr_assert_eq(gs_future_wait(fut, 5.0), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "rejected") != NULL, "%s", gs_last_error());
    gs_future_destroy(fut);
    gs_array_release(s);
    stop();
}

/* ---- loss of the scheduler */

static int h_accept_then_die(fake_t *f, const gs_msg_t *m)
{
    gs_msg_t r;
    if (m->type != GS_MSG_GRAPH_SUBMIT) return 0;
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_GRAPH_ACCEPTED;
    r.u.graph_accepted.client_ref = m->u.graph_submit.client_ref;
    r.u.graph_accepted.graph_id = 9;
    fake_send(f, &r);
    return 1;   /* close the connection: the scheduler is gone */
}

Test(client_protocol, scheduler_lost_fails_pending_future_and_later_calls, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    gs_future_h fut, fut2 = NULL;
    double t0;
    start(h_accept_then_die, NULL);
    cr_assert_eq(gs_client_submit(C, s, 0, &fut), GS_OK);
    t0 = gs_now_s();
    cr_assert_eq(gs_future_wait(fut, 10.0), GS_ERR_SCHEDULER_LOST, "%s", gs_last_error());
    cr_assert_lt(gs_now_s() - t0, 8.0);   /* noticed, not waited out (generous when loaded) */
    cr_assert(strstr(gs_last_error(), F.address) != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_client_submit(C, s, 0, &fut2), GS_ERR_SCHEDULER_LOST);
    cr_assert_null(fut2);
    cr_assert_eq(gs_client_wait_for_workers(C, 1, 5.0), GS_ERR_SCHEDULER_LOST);
    cr_assert_eq(gs_client_nworkers(C), -1);
    gs_future_destroy(fut);
    gs_array_release(s);
    stop();
}

/* ---- cancel, release, timeouts */

static int h_accept_only(fake_t *f, const gs_msg_t *m)
{
    gs_msg_t r;
    if (m->type != GS_MSG_GRAPH_SUBMIT) return 0;
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_GRAPH_ACCEPTED;
    r.u.graph_accepted.client_ref = m->u.graph_submit.client_ref;
    r.u.graph_accepted.graph_id = 11;
    return fake_send(f, &r) != 0;
}

Test(client_protocol, wait_timeout_leaves_future_running, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    gs_future_h fut;
    gs_compute_stats_t st;
    double t0;
    start(h_accept_only, NULL);
    cr_assert_eq(gs_client_submit(C, s, 0, &fut), GS_OK);
    t0 = gs_now_s();
    cr_assert_eq(gs_future_wait(fut, 0.2), GS_ERR_TIMED_OUT);
    cr_assert_geq(gs_now_s() - t0, 0.19);
    cr_assert_eq(gs_future_stats(fut, &st), GS_ERR_BUSY);
    cr_assert_eq(gs_future_cancel(fut), GS_OK);
    cr_assert_eq(gs_future_wait(fut, 5.0), GS_ERR_CANCELED);
    cr_assert(fake_wait_count(&F, GS_MSG_CANCEL, 1, 5.0));
    cr_assert_eq(F.last_graph_cmd, 11);
    gs_future_destroy(fut);
    cr_assert(fake_wait_count(&F, GS_MSG_RELEASE_GRAPH, 1, 5.0));
    cr_assert_eq(F.last_graph_cmd, 11);
    gs_array_release(s);
    stop();
}

Test(client_protocol, destroying_a_finished_future_releases_its_graph, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    double v;
    start(h_scalar, NULL);
    cr_assert_eq(gs_client_compute_scalar(C, s, &v), GS_OK, "%s", gs_last_error());
    cr_assert(fake_wait_count(&F, GS_MSG_RELEASE_GRAPH, 1, 5.0));
    cr_assert_eq(F.last_graph_cmd, F.sub_graph_id);
    cr_assert_eq(F.counts[GS_MSG_CANCEL], 0, "a finished graph must not be canceled");
    gs_array_release(s);
    stop();
}

Test(client_protocol, destroying_the_client_cancels_pending_futures, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    gs_future_h fut;
    start(h_accept_only, NULL);
    cr_assert_eq(gs_client_submit(C, s, 0, &fut), GS_OK);
    gs_client_destroy(C);
    C = NULL;
    cr_assert_eq(gs_future_wait(fut, 5.0), GS_ERR_CANCELED);
    gs_future_destroy(fut);   /* after the client: must not touch freed memory */
    fake_stop(&F);
    gs_array_release(s);
}

/* ---- persist */

Test(client_protocol, persist_keeps_chunks_and_later_graphs_read_them, .init = arm_timeout)
{
    int64_t shape[2] = {4, 6}, chunks[2] = {2, 3};
    gs_array_h a, s;
    double v;
    uint64_t persist_graph;
    start(h_scalar, NULL);
    cr_assert_eq(gs_array_random_normal(3, 0, 1, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, a, NULL, &s), GS_OK);

    cr_assert_eq(gs_client_persist(C, a), GS_OK, "%s", gs_last_error());
    cr_assert_eq(F.sub_flags & GS_SUBMIT_PERSIST, GS_SUBMIT_PERSIST);
    cr_assert_eq(F.sub_noutputs, 4);
    persist_graph = F.sub_graph_id;
    cr_assert_eq(F.counts[GS_MSG_RELEASE_GRAPH], 0, "persisted graph released");
    cr_assert_eq(gs_client_persist(C, a), GS_OK);   /* already persisted: no new graph */
    cr_assert_eq(F.counts[GS_MSG_GRAPH_SUBMIT], 1);

    cr_assert_eq(gs_client_compute_scalar(C, s, &v), GS_OK, "%s", gs_last_error());
    cr_assert_eq(F.sub_nexternals, 4, "the sum should read the 4 persisted chunks");

    cr_assert_eq(gs_client_unpersist(C, a), GS_OK);
    cr_assert(fake_wait_count(&F, GS_MSG_RELEASE_GRAPH, 2, 5.0));
    cr_assert_eq(gs_client_unpersist(C, a), GS_ERR_NOT_FOUND);
    cr_assert_eq(gs_client_compute_scalar(C, s, &v), GS_OK, "%s", gs_last_error());
    cr_assert_eq(F.sub_nexternals, 0, "after unpersist the array is recomputed");
    (void)persist_graph;
    gs_array_release(s);
    gs_array_release(a);
    stop();
}

/* ---- workers */

static int h_info_grows(fake_t *f, const gs_msg_t *m)
{
    static uint32_t n;
    gs_msg_t r;
    if (m->type != GS_MSG_INFO_REQ) return 0;
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_INFO;
    r.u.info.nworkers = n++ / 2;
    return fake_send(f, &r) != 0;
}

Test(client_protocol, wait_for_workers_polls_until_enough, .init = arm_timeout)
{
    start(h_info_grows, NULL);
    cr_assert_eq(gs_client_wait_for_workers(C, 3, 10.0), GS_OK, "%s", gs_last_error());
    cr_assert_geq(gs_client_nworkers(C), 3);
    stop();
}

static int h_info_zero(fake_t *f, const gs_msg_t *m)
{
    gs_msg_t r;
    if (m->type != GS_MSG_INFO_REQ) return 0;
    memset(&r, 0, sizeof(r));
    r.type = GS_MSG_INFO;
    return fake_send(f, &r) != 0;
}

Test(client_protocol, wait_for_workers_times_out, .init = arm_timeout)
{
    double t0;
    start(h_info_zero, NULL);
    t0 = gs_now_s();
    cr_assert_eq(gs_client_wait_for_workers(C, 1, 0.2), GS_ERR_TIMED_OUT);
    cr_assert_lt(gs_now_s() - t0, 8.0);   /* gave up at 0.2 s (generous when loaded) */
    cr_assert(strstr(gs_last_error(), "worker") != NULL, "%s", gs_last_error());
    stop();
}

/* ---- several threads at once */

static void *compute_loop(void *arg)
{
    gs_array_h s = arg;
    for (int i = 0; i < 25; i++) {
        double v = 0;
        if (gs_client_compute_scalar(C, s, &v) != GS_OK || v != 42.5) return (void *)1;
    }
    return NULL;
}

Test(client_protocol, concurrent_computes_from_several_threads, .init = arm_timeout)
{
    gs_array_h s = small_sum();
    pthread_t th[4];
    start(h_scalar, NULL);
    for (int i = 0; i < 4; i++) cr_assert_eq(pthread_create(&th[i], NULL, compute_loop, s), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        cr_assert_null(r, "thread %d failed", i);
    }
    cr_assert_eq(F.counts[GS_MSG_GRAPH_SUBMIT], 100);
    gs_array_release(s);
    stop();
}
