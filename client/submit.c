/* Submitting a graph and the futures it returns: lowering and encoding on the caller's
 * thread, waiting, canceling, destroying, statistics. A KEEP future that finished well records
 * its persisted chunks on its array here. */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/time.h"
#include "common/heap.h"

#include <math.h>
#include <string.h>

static gs_status_t gs__encode_submit(const gs_taskgraph_t *tg, uint64_t client_ref,
                                     uint32_t flags, gs_buf_t *frame)
{
    enum { NAME_CAP = 48 };   /* as long as gsched's dashboard shows */
    gs_buf_t lbuf;
    size_t *loff = NULL;
    gs_bytes_t *layers = NULL;
    gs_str_t *names = NULL;
    char *name_text = NULL;
    gs_msg_t m;
    gs_status_t st = GS_OK;

    gs_buf_init(&lbuf);
    /* the layers hold the chunk bounds: some bytes per task (grown if more) */
    if (tg->ntasks > 65536 && tg->ntasks < SIZE_MAX / 8 &&
        gs_buf_reserve(&lbuf, (size_t)tg->ntasks * 6 + 65536) == GS_OK)
        (void)gs_heap_advise_huge(lbuf.data, lbuf.cap);
    if (tg->nlayers > 0) {
        loff = gs_calloc((size_t)tg->nlayers + 1, sizeof(size_t), "layer offsets");
        layers = gs_calloc(tg->nlayers, sizeof(gs_bytes_t), "layer bytes");
        names = gs_calloc(tg->nlayers, sizeof(gs_str_t), "layer names");
        name_text = gs_calloc(tg->nlayers, NAME_CAP, "layer name text");
        if (loff == NULL || layers == NULL || names == NULL || name_text == NULL) {
            st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory encoding a graph");
            goto out;
        }
    }
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        loff[i] = lbuf.len;
        if ((st = gs_layer_encode(tg->layers[i], &lbuf)) != GS_OK) goto out;
    }
    if (tg->nlayers > 0) loff[tg->nlayers] = lbuf.len;
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        layers[i].data = lbuf.data + loff[i];
        layers[i].len = loff[i + 1] - loff[i];
        gs_layer_display_name(tg->layers[i], name_text + (size_t)i * NAME_CAP, NAME_CAP);
        names[i].data = (const uint8_t *)name_text + (size_t)i * NAME_CAP;
        names[i].len = strlen(name_text + (size_t)i * NAME_CAP);
    }
    /* reserve the frame once, on huge pages: with a million tasks it is some 40 MB */
    {
        uint64_t est = 1024 + (uint64_t)lbuf.len + (uint64_t)tg->nlayers * (16 + NAME_CAP) +
                       tg->ntasks * (4 + 8 + 8 + 8) + 8 +
                       (tg->dep_off != NULL ? tg->dep_off[tg->ntasks] * 8 : 0) +
                       tg->nexternals * 16 + tg->noutputs * 8;
        if (est <= UINT32_MAX && gs_buf_reserve(frame, (size_t)est) == GS_OK)
            (void)gs_heap_advise_huge(frame->data + frame->len, frame->cap - frame->len);
    }
    memset(&m, 0, sizeof(m));
    m.type = GS_MSG_GRAPH_SUBMIT;
    m.u.graph_submit.client_ref = client_ref;
    m.u.graph_submit.flags = flags;
    m.u.graph_submit.nlayers = tg->nlayers;
    m.u.graph_submit.layers = layers;
    m.u.graph_submit.ntasks = tg->ntasks;
    m.u.graph_submit.task_layer = tg->task_layer;
    m.u.graph_submit.task_block = tg->task_block;
    m.u.graph_submit.dep_off = tg->dep_off;
    m.u.graph_submit.deps = tg->deps;
    m.u.graph_submit.task_nbytes = tg->task_nbytes;
    m.u.graph_submit.nexternals = tg->nexternals;
    m.u.graph_submit.externals = (const uint64_t *)tg->externals;
    m.u.graph_submit.noutputs = tg->noutputs;
    m.u.graph_submit.outputs = tg->outputs;
    m.u.graph_submit.nlayer_names = tg->nlayers;
    m.u.graph_submit.layer_names = names;
    st = gs_msg_encode(&m, frame);
out:
    gs_free(loff);
    gs_free(layers);
    gs_free(names);
    gs_free(name_text);
    gs_buf_cleanup(&lbuf);
    return st;
}

gs_status_t gs_client_submit(gs_client_h c, gs_array_h array, unsigned flags,
                             gs_future_h *future_p)
{
    return gs__client_submit_lower(c, array, flags, c != NULL ? c->lower_flags : 0, future_p);
}

/* How long the CPU thread count of the cluster is reused before gsched is asked again. */
#define GS__HINT_TTL_S 1.0

/* Kernel threads of @a c's CPU workers together (0: unknown), cached GS__HINT_TTL_S. */
static uint32_t gs__client_cpu_threads(gs_client_h c)
{
    gs_client_worker_info_t *wi = NULL;
    size_t n = 0, cap;
    uint64_t sum = 0;
    double now = gs_now_s();
    uint32_t v;
    uv_mutex_lock(&c->mu);
    v = c->hint_cpu_threads;
    if (c->hint_at_s > 0 && now - c->hint_at_s < GS__HINT_TTL_S) {
        uv_mutex_unlock(&c->mu);
        return v;
    }
    uv_mutex_unlock(&c->mu);
    if (gs_client_workers(c, NULL, 0, &n) != GS_OK || n == 0) return 0;
    cap = n + 8;   /* workers that joined between the two calls */
    if ((wi = gs_malloc(cap * sizeof(*wi), "worker list for lowering")) == NULL) return 0;
    if (gs_client_workers(c, wi, cap, &n) == GS_OK) {
        for (size_t i = 0; i < n && i < cap; i++)
            if (strcmp(wi[i].backend, "cpu") == 0) sum += wi[i].nthreads;
        v = sum > UINT32_MAX ? UINT32_MAX : (uint32_t)sum;
        uv_mutex_lock(&c->mu);
        c->hint_cpu_threads = v;
        c->hint_at_s = now;
        uv_mutex_unlock(&c->mu);
    } else {
        v = 0;
    }
    gs_free(wi);
    return v;
}

/* Whether @a tg holds a fused user kernel (the only plan gs_lower_hints_t changes today). */
static int gs__graph_has_fused_user(const gs_taskgraph_t *tg)
{
    for (uint32_t i = 0; i < tg->nlayers; i++)
        if (strcmp(gs_layer_name(tg->layers[i]), "map_blocks-fused") == 0) return 1;
    return 0;
}

gs_status_t gs__client_lower(gs_client_h c, size_t n, const gs_array_h *arrays, unsigned flags,
                             gs_taskgraph_t **tg_p, gs_lower_result_t **res_p)
{
    gs_taskgraph_t *tg = NULL, *tg2 = NULL;
    gs_lower_result_t *res = NULL, *res2 = NULL;
    gs_lower_hints_t hints;
    gs_status_t st;
    st = res_p != NULL ? gs_graph_lower_many(n, arrays, flags, &tg, &res)
                       : gs_graph_lower(arrays[0], flags, &tg);
    if (st != GS_OK) return st;
    /* a fused user kernel: lower again knowing the CPU pool, which may decline the fusion of
     * a CPU kernel with too few blocks to keep it busy (gs_lower_hints_t); the values are the
     * same either way, so a failure here keeps the first plan */
    if (gs__graph_has_fused_user(tg) && (hints.cpu_threads = gs__client_cpu_threads(c)) > 0) {
        st = res_p != NULL ? gs_graph_lower_many_hinted(n, arrays, flags, &hints, &tg2, &res2)
                           : gs_graph_lower_hinted(arrays[0], flags, &hints, &tg2);
        if (st == GS_OK) {
            gs_taskgraph_free(tg);
            gs_graph_lower_results_free(n, res);
            tg = tg2;
            res = res2;
        }
    }
    *tg_p = tg;
    if (res_p != NULL) *res_p = res;
    return GS_OK;
}

gs_status_t gs__client_submit_lower(gs_client_h c, gs_array_h array, unsigned flags,
                                    unsigned lower_flags, gs_future_h *future_p)
{
    gs_taskgraph_t *tg = NULL;
    gs_status_t st;
    double t0 = gs_now_s();

    if (c == NULL || array == NULL || future_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_submit: client, array and future_p "
                                                  "must not be NULL");
    if (flags & ~GS_SUBMIT_KEEP)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_submit: unknown flags 0x%x", flags);
    if ((st = gs__client_usable(c)) != GS_OK) return st;
    if ((st = gs__client_lower(c, 1, &array, lower_flags, &tg, NULL)) != GS_OK) return st;
    return gs__client_submit_graph(c, tg, flags, flags & GS_SUBMIT_KEEP ? array : NULL, t0,
                                   future_p);
}

gs_status_t gs__client_usable(gs_client_h c)
{
    gs_status_t st = GS_OK;
    uv_mutex_lock(&c->mu);
    if (c->state != GS__READY) st = gs__client_unusable_locked(c);
    uv_mutex_unlock(&c->mu);
    return st;
}

gs_status_t gs__client_submit_graph(gs_client_h c, gs_taskgraph_t *tg, unsigned flags,
                                    gs_array_h keep_array, double t0, gs_future_h *future_p)
{
    gs_future_h f;
    gs__op_t *op;
    gs_status_t st;

    f = gs_calloc(1, sizeof(*f), "future");
    op = gs__op_new(GS__OP_SUBMIT);
    if (f == NULL || op == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory submitting a graph");
        goto err_alloc;
    }
    f->client = c;
    f->flags = flags;
    f->t_submit = t0;
    f->ntasks = tg->ntasks;
    f->grid = tg->out_grid;   /* moved: tg is freed below (a million bounds are 8 MB) */
    memset(&tg->out_grid, 0, sizeof(tg->out_grid));
    f->dtype = tg->out_dtype;
    f->noutputs = tg->noutputs;
    f->out_keys = gs_malloc(gs_size_mul(tg->noutputs ? tg->noutputs : 1, 2 * sizeof(uint64_t)),
                            "future output keys");
    if (f->out_keys == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory submitting a graph");
        goto err_grid;
    }
    (void)gs_heap_advise_huge(f->out_keys, (size_t)tg->noutputs * 2 * sizeof(uint64_t));
    for (uint64_t b = 0; b < tg->noutputs; b++) {
        uint64_t t = tg->outputs[b];
        if (t < tg->ntasks) {
            f->out_keys[2 * b] = GS__SELF_GRAPH;
            f->out_keys[2 * b + 1] = t;
        } else if (t - tg->ntasks < tg->nexternals) {
            f->out_keys[2 * b] = tg->externals[t - tg->ntasks].graph;
            f->out_keys[2 * b + 1] = tg->externals[t - tg->ntasks].task;
        } else {
            st = gs_error_set(GS_ERR_INTERNAL, "lowering produced output %llu out of range",
                              (unsigned long long)t);
            goto err_grid;
        }
    }
    uv_mutex_lock(&c->mu);
    f->client_ref = ++c->next_client_ref;
    /* the last frame's storage, when it is back (already faulted in) */
    if (c->spare_frame.data != NULL) {
        op->frame = c->spare_frame;
        op->frame.len = 0;
        gs_buf_init(&c->spare_frame);
    }
    uv_mutex_unlock(&c->mu);
    if ((st = gs__encode_submit(tg, f->client_ref, (flags & GS_SUBMIT_KEEP) ? GS_SUBMIT_PERSIST : 0,
                                &op->frame)) != GS_OK)
        goto err_grid;
    if (keep_array != NULL) f->keep_array = gs_array_retain(keep_array);

    /* two references: the caller's and the I/O thread's; each future holds the client */
    f->refs = 2;
    op->fut = f;
    f->submit_s = gs_now_s() - t0;
    uv_mutex_lock(&c->mu);
    if (c->state != GS__READY) {
        st = gs__client_unusable_locked(c);
        uv_mutex_unlock(&c->mu);
        goto err_grid;
    }
    c->refs++;
    uv_mutex_unlock(&c->mu);
    st = gs__post(c, op);
    /* the frame is on its way: the lowering's tables (tens of MB for a million tasks) are
     * unmapped while the I/O thread sends it, not before */
    gs_taskgraph_free(tg);
    if (st != GS_OK) {
        int free_c;
        uv_mutex_lock(&c->mu);
        gs__client_unref_locked(c, &free_c);
        uv_mutex_unlock(&c->mu);
        op->fut = NULL;
        gs__op_free(op);
        gs__future_free(f);
        return st;
    }
    *future_p = f;
    return GS_OK;

err_grid:
    if (f != NULL) {
        gs_grid_cleanup(&f->grid);
        gs_free(f->out_keys);
        gs_array_release(f->keep_array);
    }
err_alloc:
    gs_taskgraph_free(tg);
    if (op != NULL) {
        op->fut = NULL;
        gs__op_free(op);
    }
    gs_free(f);
    return st;
}


/* ------------------------------------------------------------------------------------------ */
/* futures */

/* A KEEP future that finished well: record the persisted chunks on its array (once). Called
 * on API threads with c->mu NOT held. */
static gs_status_t gs__future_mark_persisted(gs_future_h f)
{
    gs_client_h c = f->client;
    gs__persisted_t *p;
    gs_key_t *keys;
    gs_status_t st;
    uint64_t gid;

    uv_mutex_lock(&c->mu);
    /* a closed or lost client's chunks are gone: nothing to record */
    if (f->keep_array == NULL || !f->done || f->status != GS_OK || f->persist_marked ||
        c->state != GS__READY || c->stopping) {
        uv_mutex_unlock(&c->mu);
        return GS_OK;
    }
    f->persist_marked = 1;
    gid = f->graph_id;
    uv_mutex_unlock(&c->mu);

    keys = gs_malloc(gs_size_mul(f->noutputs ? f->noutputs : 1, sizeof(gs_key_t)), "persist keys");
    p = gs_calloc(1, sizeof(*p), "persisted");
    if (keys == NULL || p == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory recording persisted chunks");
        goto err_unmark;
    }
    (void)gs_heap_advise_huge(keys, (size_t)f->noutputs * sizeof(gs_key_t));
    for (uint64_t b = 0; b < f->noutputs; b++) {
        keys[b].graph = f->out_keys[2 * b] == GS__SELF_GRAPH ? gid : f->out_keys[2 * b];
        keys[b].task = f->out_keys[2 * b + 1];
    }
    if ((st = gs_array_set_persisted(f->keep_array, f->noutputs, keys)) != GS_OK) goto err_unmark;
    gs_free(keys);
    p->array = gs_array_retain(f->keep_array);
    p->graph_id = gid;
    uv_mutex_lock(&c->mu);
    p->next = c->persisted;
    c->persisted = p;
    uv_mutex_unlock(&c->mu);
    return GS_OK;
err_unmark:
    gs_free(keys);
    gs_free(p);
    uv_mutex_lock(&c->mu);
    f->persist_marked = 0;
    uv_mutex_unlock(&c->mu);
    return st;
}

gs_status_t gs_future_wait(gs_future_h f, double timeout_s)
{
    gs_client_h c;
    gs_status_t st;
    if (f == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_wait: future is NULL");
    if (isnan(timeout_s)) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_wait: timeout is NaN");
    c = f->client;
    uv_mutex_lock(&c->mu);
    if (!gs__wait_flag_locked(c, &f->done, gs__deadline(timeout_s))) {
        uv_mutex_unlock(&c->mu);
        return gs_error_set(GS_ERR_TIMED_OUT, "graph still running after %.3f s", timeout_s);
    }
    st = f->status;
    if (st != GS_OK) gs_error_set(st, "%s", f->message);
    uv_mutex_unlock(&c->mu);
    if (st == GS_OK && f->keep_array != NULL) st = gs__future_mark_persisted(f);
    return st;
}

gs_status_t gs_future_cancel(gs_future_h f)
{
    gs__op_t *op;
    gs_status_t st;
    gs_client_h c;
    if (f == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_cancel: future is NULL");
    c = f->client;
    uv_mutex_lock(&c->mu);
    if (f->done) {
        uv_mutex_unlock(&c->mu);
        return GS_OK;
    }
    f->refs++;   /* the op's reference */
    uv_mutex_unlock(&c->mu);
    op = gs__op_new(GS__OP_CANCEL);
    if (op == NULL) {
        gs__future_unref(f);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory canceling a graph");
    }
    op->fut = f;
    if ((st = gs__post(c, op)) != GS_OK) {
        op->fut = NULL;
        gs__op_free(op);
        gs__future_unref(f);
        return st;
    }
    return GS_OK;
}

void gs_future_destroy(gs_future_h f)
{
    gs_client_h c;
    gs__op_t *op;
    if (f == NULL) return;
    c = f->client;
    /* a KEEP future that completed well keeps its chunks: make sure its array knows them */
    if (f->keep_array != NULL) (void)gs__future_mark_persisted(f);
    op = gs__op_new(GS__OP_FUTURE_DROP);
    if (op != NULL) {
        op->fut = f;   /* transfers the caller's reference */
        if (gs__post(c, op) == GS_OK) return;
        op->fut = NULL;
        gs__op_free(op);
    }
    /* client closed (or out of memory): nothing to tell the scheduler */
    gs__future_unref(f);
}

gs_status_t gs_future_stats(gs_future_h f, gs_compute_stats_t *stats_p)
{
    gs_client_h c;
    if (f == NULL || stats_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_stats: future and stats_p must not "
                                                  "be NULL");
    c = f->client;
    uv_mutex_lock(&c->mu);
    if (!f->done) {
        uv_mutex_unlock(&c->mu);
        return gs_error_set(GS_ERR_BUSY, "gs_future_stats: the graph is still running");
    }
    stats_p->ntasks = f->ntasks;
    stats_p->submit_s = f->submit_s;
    stats_p->wall_s = f->t_done - f->t_submit;
    stats_p->run_s_total = (double)f->run_ns_total * 1e-9;
    stats_p->sched_wall_s = (double)f->sched_wall_ns * 1e-9;
    uv_mutex_unlock(&c->mu);
    return GS_OK;
}

