/* Gathering a result: the caller builds the list of output blocks sorted by key and waits;
 * the I/O thread sends one GATHER_REQ per distinct graph among the keys and places each DATA
 * chunk into the caller's buffer as it arrives. Also the blocking gs_client_compute calls,
 * which submit and gather in one. */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gs__gkey_cmp(uint64_t g1, uint64_t t1, uint64_t g2, uint64_t t2)
{
    if (g1 != g2) return g1 < g2 ? -1 : 1;
    if (t1 != t2) return t1 < t2 ? -1 : 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* I/O thread */

/* Copy one chunk into the gather buffer at block @a block of the future's grid. */
static gs_status_t gs__gather_place(gs__op_t *op, const gs_grid_t *grid, uint64_t block,
                                    const gs_msg_data_t *d)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], idx[GS_MAX_NDIM];
    int nd = grid->ndim;
    int64_t nelem = 1, inner, nrows;
    const uint8_t *src = d->data.data;

    gs_grid_block_region(grid, block, start, shape);
    for (int a = 0; a < nd; a++) nelem *= shape[a];
    const size_t es = op->out_es;
    char *outb = (char *)op->out;
    if (d->data.len != (size_t)nelem * es)
        return gs_error_set(GS_ERR_PROTO,
                            "chunk (%llu, %llu) has %zu bytes, expected %lld for block %llu",
                            (unsigned long long)d->graph_id, (unsigned long long)d->task_id,
                            d->data.len, (long long)nelem * (long long)es, (unsigned long long)block);
    if (nelem == 0) return GS_OK;
    if (nd == 0) {
        memcpy(outb, src, es);
        return GS_OK;
    }
    inner = shape[nd - 1];
    nrows = nelem / inner;
    for (int a = 0; a < nd; a++) idx[a] = 0;
    for (int64_t r = 0; r < nrows; r++) {
        int64_t off = start[nd - 1];
        for (int a = 0; a < nd - 1; a++) off += (start[a] + idx[a]) * op->out_stride[a];
        memcpy(outb + (size_t)off * es, src + (size_t)r * (size_t)inner * es, (size_t)inner * es);
        for (int a = nd - 2; a >= 0; a--) {
            if (++idx[a] < shape[a]) break;
            idx[a] = 0;
        }
    }
    return GS_OK;
}

void gs__gather_send(gs_client_h c, gs__op_t *op)
{
    gs_status_t st;
    uint64_t *keys;
    uint64_t i = 0;

    op->req_id = ++c->next_req_id;
    if ((st = gs_u64map_put(&c->gathers, op->req_id, (uint64_t)(uintptr_t)op)) != GS_OK) {
        gs__op_finish(c, op, st, "out of memory tracking a gather");
        return;
    }
    /* one GATHER_REQ per distinct graph among the keys (sorted by graph) */
    keys = gs_malloc(gs_size_mul(op->nuniq, 2 * sizeof(uint64_t)), "gather keys");
    if (keys == NULL) {
        gs_u64map_del(&c->gathers, op->req_id);
        gs__op_finish(c, op, GS_ERR_NO_MEMORY, "out of memory sending a gather request");
        return;
    }
    while (i < op->nkeys) {
        uint64_t g = op->keys[i].graph, n = 0;
        gs_msg_t m;
        for (; i < op->nkeys && op->keys[i].graph == g; i++) {
            if (n > 0 && keys[2 * (n - 1) + 1] == op->keys[i].task) continue;
            if (op->got[op->keys[i].uniq]) continue;   /* fetched directly (gather_direct.c) */
            keys[2 * n] = g;
            keys[2 * n + 1] = op->keys[i].task;
            n++;
        }
        if (n == 0) continue;
        memset(&m, 0, sizeof(m));
        m.type = GS_MSG_GATHER_REQ;
        m.u.gather_req.req_id = op->req_id;
        m.u.gather_req.n = n;
        m.u.gather_req.keys = keys;
        if ((st = gs_conn_send(c->conn, &m)) != GS_OK) {
            gs_free(keys);
            gs_u64map_del(&c->gathers, op->req_id);
            gs__op_finish(c, op, st, "could not send a gather request to the scheduler");
            return;
        }
    }
    gs_free(keys);   /* the op completes with its last DATA */
}

void gs__gather_on_data(gs_client_h c, const gs_msg_data_t *d)
{
    uint64_t v;
    gs__op_t *op;
    uint64_t lo, hi;
    char msg[GS__MSG_LEN];
    gs_status_t st;

    if (!gs_u64map_get(&c->gathers, d->req_id, &v)) {
        GS_LOG_DEBUG("data for unknown request %llu ignored", (unsigned long long)d->req_id);
        return;
    }
    op = (gs__op_t *)(uintptr_t)v;
    if (op->kind == GS__OP_LOCATE) {   /* gsched could not locate: the gather is relayed */
        gs_u64map_del(&c->gathers, d->req_id);
        gs__op_finish(c, op, d->status < 0 ? (gs_status_t)d->status : GS_ERR_PROTO,
                      "the scheduler could not locate the chunks");
        return;
    }
    if (op->kind != GS__OP_GATHER) return;
    /* binary search the first key >= (graph, task) */
    lo = 0;
    hi = op->nkeys;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (gs__gkey_cmp(op->keys[mid].graph, op->keys[mid].task, d->graph_id, d->task_id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo >= op->nkeys || op->keys[lo].graph != d->graph_id || op->keys[lo].task != d->task_id) {
        GS_LOG_WARN("scheduler sent chunk (%llu, %llu) that was not requested",
                    (unsigned long long)d->graph_id, (unsigned long long)d->task_id);
        return;
    }
    if (op->got[op->keys[lo].uniq]) return;   /* duplicate */
    if (d->status != GS_OK) {
        snprintf(msg, sizeof(msg), "cannot gather chunk (%llu, %llu): %s",
                 (unsigned long long)d->graph_id, (unsigned long long)d->task_id,
                 gs_status_string((gs_status_t)d->status));
        gs_u64map_del(&c->gathers, op->req_id);
        gs__op_finish(c, op, d->status < 0 ? (gs_status_t)d->status : GS_ERR_PROTO, msg);
        return;
    }
    for (uint64_t i = lo; i < op->nkeys && op->keys[i].graph == d->graph_id &&
                          op->keys[i].task == d->task_id;
         i++) {
        if ((st = gs__gather_place(op, &op->fut->grid, op->keys[i].block, d)) != GS_OK) {
            snprintf(msg, sizeof(msg), "%s", gs_last_error());
            gs_u64map_del(&c->gathers, op->req_id);
            gs__op_finish(c, op, st, msg);
            return;
        }
    }
    op->got[op->keys[lo].uniq] = 1;
    uv_mutex_lock(&c->mu);
    c->gstats.chunks_relay++;
    c->gstats.bytes_relay += d->data.len;
    uv_mutex_unlock(&c->mu);
    if (--op->nremaining == 0) {
        gs_u64map_del(&c->gathers, op->req_id);
        gs__op_finish(c, op, GS_OK, NULL);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* caller's thread */

static int gs__gkey_qcmp(const void *a, const void *b)
{
    const gs__gkey_t *x = a, *y = b;
    int r = gs__gkey_cmp(x->graph, x->task, y->graph, y->task);
    if (r != 0) return r;
    return x->block < y->block ? -1 : x->block > y->block;
}

static void gs__gkey_sort(gs__gkey_t *k, uint64_t n)
{
    qsort(k, (size_t)n, sizeof(*k), gs__gkey_qcmp);
}

gs_status_t gs_future_gather(gs_future_h f, double *out, size_t out_len)
{
    gs_client_h c;
    gs__op_t *op;
    gs_status_t st;
    uint64_t size = 1, n;

    if (f == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_gather: future is NULL");
    for (int a = 0; a < f->grid.ndim; a++) size *= (uint64_t)f->grid.shape[a];
    if (size > 0 && out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_gather: out is NULL");
    if (out_len < size)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_gather: out holds %zu doubles, the "
                                                  "result has %llu", out_len,
                            (unsigned long long)size);
    if (f->grid.ndim == 0 && out_len != 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_future_gather: the result is 0-d (one "
                                                  "value) but out holds %zu doubles; pass "
                                                  "out_len 1 (a reduction over one axis needs "
                                                  "GS_REDUCE_FIELD_AXIS in field_mask)", out_len);
    if ((st = gs_future_wait(f, -1.0)) != GS_OK) return st;
    if (size == 0 || f->noutputs == 0) return GS_OK;
    c = f->client;

    op = gs__op_new(GS__OP_GATHER);
    if (op == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory gathering a result");
    n = f->noutputs;
    op->nkeys = n;
    op->keys = gs_malloc(gs_size_mul(n, sizeof(gs__gkey_t)), "gather blocks");
    op->got = gs_calloc(n, 1, "gather flags");
    if (op->keys == NULL || op->got == NULL) {
        gs__op_free(op);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory gathering a result");
    }
    uv_mutex_lock(&c->mu);
    uint64_t gid = f->graph_id;
    uv_mutex_unlock(&c->mu);
    for (uint64_t b = 0; b < n; b++) {
        op->keys[b].graph = f->out_keys[2 * b] == GS__SELF_GRAPH ? gid : f->out_keys[2 * b];
        op->keys[b].task = f->out_keys[2 * b + 1];
        op->keys[b].block = b;
    }
    /* sort by (graph, task) unless already sorted (the usual case) */
    {
        int sorted = 1;
        for (uint64_t b = 1; b < n && sorted; b++)
            if (gs__gkey_cmp(op->keys[b - 1].graph, op->keys[b - 1].task, op->keys[b].graph,
                             op->keys[b].task) > 0)
                sorted = 0;
        if (!sorted) gs__gkey_sort(op->keys, n);
    }
    op->nuniq = 0;
    for (uint64_t b = 0; b < n; b++) {
        if (b == 0 || op->keys[b].graph != op->keys[b - 1].graph ||
            op->keys[b].task != op->keys[b - 1].task)
            op->nuniq++;
        op->keys[b].uniq = op->nuniq - 1;
    }
    op->nremaining = op->nuniq;
    op->out = out;
    op->out_es = gs_dtype_size((gs_dtype_t)f->dtype);
    {
        int64_t s = 1;
        for (int a = f->grid.ndim - 1; a >= 0; a--) {
            op->out_stride[a] = s;
            s *= f->grid.shape[a];
        }
    }
    op->fut = f;   /* borrowed: the caller holds the future while it waits */
    {
        int path;
        uv_mutex_lock(&c->mu);
        path = c->gather_path;
        uv_mutex_unlock(&c->mu);
        /* AUTO relays small results: one round trip through gsched beats locating and
         * connecting (scalars, reductions) */
        if (path != GS_GATHER_RELAY && c->tls == NULL &&
            (path != GS_GATHER_AUTO || size * op->out_es >= GS__DIRECT_MIN_BYTES))
            gs__gather_direct(c, op, path);
        if (op->nremaining == 0) {
            gs__op_free(op);
            return GS_OK;
        }
    }
    if ((st = gs__op_call(c, op, -1.0, "")) != GS_OK) return st;   /* no deadline */
    gs__op_free(op);
    return GS_OK;
}

gs_status_t gs__future_gather_part(gs_future_h f, const gs_grid_t *grid, int32_t dtype,
                                   uint64_t off, uint64_t n, void *out, size_t out_len)
{
    struct gs_future v;   /* a view of the result: never posted, so never referenced after */
    gs_status_t st;
    if ((st = gs_future_wait(f, -1.0)) != GS_OK) return st;
    if (off > f->noutputs || n > f->noutputs - off || n != gs_grid_nblocks(grid))
        return gs_error_set(GS_ERR_INTERNAL, "result blocks %llu..+%llu outside the graph's %llu "
                            "outputs", (unsigned long long)off, (unsigned long long)n,
                            (unsigned long long)f->noutputs);
    memset(&v, 0, sizeof(v));
    v.client = f->client;
    v.refs = 1;
    uv_mutex_lock(&f->client->mu);
    v.graph_id = f->graph_id;
    uv_mutex_unlock(&f->client->mu);
    v.done = 1;
    v.status = GS_OK;
    v.grid = *grid;   /* borrowed bounds: the view is not freed */
    v.dtype = dtype;
    v.noutputs = n;
    v.out_keys = f->out_keys + 2 * off;
    return gs_future_gather(&v, out, out_len);
}

/* ------------------------------------------------------------------------------------------ */
/* submit and gather */

/* Submit @a array and gather it into @a out; when the Gram path of a tall SVD refused the
 * input (numerically rank-deficient or too ill-conditioned), once more by TSQR
 * (gs_graph_lower_retry_flags; docs/ARCHITECTURE.md "Tall SVD"). */
static gs_status_t gs__compute(gs_client_h c, gs_array_h array, double *out, size_t out_len)
{
    unsigned lower = c->lower_flags, retry;
    gs_future_h f;
    gs_status_t st;
    for (;;) {
        if ((st = gs__client_submit_lower(c, array, 0, lower, &f)) != GS_OK) return st;
        st = gs_future_gather(f, out, out_len);
        int again = st != GS_OK && gs_graph_lower_retry_flags(lower, st, gs_last_error(), &retry);
        gs_future_destroy(f);
        if (!again) return st;
        GS_LOG_INFO("compute: the Gram path refused a tall SVD's input; again by TSQR");
        lower = retry;   /* without GS_LOWER_GRAM_SVD: no second retry */
    }
}

gs_status_t gs_client_compute_scalar(gs_client_h c, gs_array_h array, double *value_p)
{
    gs_status_t st;
    double v = 0.0;   /* 8 bytes: room for the element in any dtype */
    gs_dtype_t dt;
    if (c == NULL || array == NULL || value_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_scalar: client, array and "
                                                  "value_p must not be NULL");
    if (gs_array_ndim(array) != 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_scalar: the array has %d "
                                                  "axes; a scalar (0-d) array is required",
                            gs_array_ndim(array));
    dt = (gs_dtype_t)gs_array_dtype(array);
    st = gs__compute(c, array, &v, 1);
    if (st == GS_OK) *value_p = gs_dtype_to_double(dt, &v);
    return st;
}

gs_status_t gs_client_compute(gs_client_h c, gs_array_h array, double *out, size_t out_len)
{
    int64_t size;
    if (c == NULL || array == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute: client and array must not "
                                                  "be NULL");
    size = gs_array_size(array);
    if (size > 0 && out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute: out is NULL");
    if ((uint64_t)size > out_len)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute: out holds %zu doubles, the "
                                                  "array has %lld", out_len, (long long)size);
    if (gs_array_ndim(array) == 0 && out_len != 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute: the array is 0-d (one "
                                                  "value) but out holds %zu doubles; pass "
                                                  "out_len 1 (a reduction over one axis needs "
                                                  "GS_REDUCE_FIELD_AXIS in field_mask)", out_len);
    return gs__compute(c, array, out, out_len);
}

/* ------------------------------------------------------------------------------------------ */
/* gather paths */

gs_status_t gs_client_set_gather_path(gs_client_h c, int path)
{
    if (c == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_set_gather_path: client is NULL");
    if (path < GS_GATHER_AUTO || path > GS_GATHER_SHM)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_set_gather_path: %d is not GS_GATHER_AUTO, "
                                                  "_DIRECT, _RELAY or _SHM", path);
    uv_mutex_lock(&c->mu);
    c->gather_path = path;
    uv_mutex_unlock(&c->mu);
    return GS_OK;
}

void gs_client_gather_stats(gs_client_h c, gs_gather_stats_t *stats_p)
{
    if (stats_p == NULL) return;
    memset(stats_p, 0, sizeof *stats_p);
    if (c == NULL) return;
    uv_mutex_lock(&c->mu);
    *stats_p = c->gstats;
    uv_mutex_unlock(&c->mu);
}

const char *gs_gather_path_name(int path)
{
    switch (path) {
    case GS_GATHER_AUTO: return "auto";
    case GS_GATHER_DIRECT: return "direct";
    case GS_GATHER_RELAY: return "relay";
    case GS_GATHER_SHM: return "shm";
    default: return "unknown";
    }
}
