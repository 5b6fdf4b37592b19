/* gs_client_compute_many: several results from one submitted graph (Dask's
 * dask.compute(a, b, c)). The arguments are checked first; the arrays are lowered together
 * (gs_graph_lower_many), submitted once, waited for; then each gathered result is fetched from
 * its range of the graph's outputs (gs__future_gather_part) and each persisted one recorded on
 * its array and in the client's persisted list, all of them sharing the graph id (cluster.c
 * releases the graph when the last of them is unpersisted). */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "common/time.h"

#include <stdlib.h>
#include <string.h>

typedef struct gs__span {
    uintptr_t lo, hi;   /* [lo, hi) bytes */
    size_t idx;         /* result index */
} gs__span_t;

static int gs__span_cmp(const void *a, const void *b)
{
    const gs__span_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int gs__persisted_known(gs_client_h c, gs_array_h a)
{
    int known = 0;
    uv_mutex_lock(&c->mu);
    for (gs__persisted_t *p = c->persisted; p != NULL && !known; p = p->next) known = p->array == a;
    uv_mutex_unlock(&c->mu);
    return known;
}

/* Check every entry (nothing submitted yet). */
static gs_status_t gs__many_check(gs_client_h c, size_t n, const gs_compute_result_t *res)
{
    gs__span_t *sp = NULL;
    size_t nsp = 0;
    gs_status_t st = GS_OK;

    if (c == NULL || res == NULL || n == 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_many: client and results "
                                                  "must not be NULL and n at least 1");
    for (size_t i = 0; i < n; i++) {
        const gs_compute_result_t *r = &res[i];
        if (r->array == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_many: result %zu: "
                                                      "array is NULL", i);
        if (r->mode == GS_RESULT_PERSIST) {
            if (r->out != NULL || r->out_len != 0)
                return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_many: result %zu "
                                    "is persisted (GS_RESULT_PERSIST) but has a buffer: out "
                                    "must be NULL and out_len 0", i);
            for (size_t j = 0; j < i; j++)
                if (res[j].mode == GS_RESULT_PERSIST && res[j].array == r->array)
                    return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_many: results "
                                        "%zu and %zu persist the same array", j, i);
            continue;
        }
        if (r->mode != GS_RESULT_GATHER)
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_many: result %zu: mode "
                                "%d is not GS_RESULT_GATHER or GS_RESULT_PERSIST", i, r->mode);
        const int64_t size = gs_array_size(r->array);
        if (size > 0 && r->out == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_many: result %zu: out "
                                                      "is NULL", i);
        if ((uint64_t)size > r->out_len)
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_many: result %zu: out "
                                "holds %zu elements, the array has %lld (of %s)", i, r->out_len,
                                (long long)size,
                                gs_dtype_name((gs_dtype_t)gs_array_dtype(r->array)));
        if (gs_array_ndim(r->array) == 0 && r->out_len != 1)
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_many: result %zu is 0-d "
                                "(one value) but out holds %zu elements; pass out_len 1 (a "
                                "reduction over one axis needs GS_REDUCE_FIELD_AXIS)", i,
                                r->out_len);
    }
    /* gathered buffers must not overlap: each result would overwrite another's */
    sp = gs_calloc(n, sizeof(*sp), "compute_many spans");
    if (sp == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory checking buffers");
    for (size_t i = 0; i < n; i++) {
        const gs_compute_result_t *r = &res[i];
        int64_t size;
        if (r->mode != GS_RESULT_GATHER || (size = gs_array_size(r->array)) == 0) continue;
        sp[nsp].lo = (uintptr_t)r->out;
        sp[nsp].hi = sp[nsp].lo +
                     (uintptr_t)size * gs_dtype_size((gs_dtype_t)gs_array_dtype(r->array));
        sp[nsp++].idx = i;
    }
    qsort(sp, nsp, sizeof(*sp), gs__span_cmp);
    for (size_t k = 1; k < nsp; k++) {
        if (sp[k].lo < sp[k - 1].hi) {
            size_t a = sp[k - 1].idx < sp[k].idx ? sp[k - 1].idx : sp[k].idx;
            size_t b = sp[k - 1].idx < sp[k].idx ? sp[k].idx : sp[k - 1].idx;
            st = gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_compute_many: the buffers of "
                              "results %zu and %zu overlap", a, b);
            break;
        }
    }
    gs_free(sp);
    return st;
}

/* Record the persisted results (roots with @a persist set) of the finished graph of @a f:
 * their keys on their arrays, one persisted entry each, and the future as kept so dropping it
 * does not release the graph. All or nothing. */
static gs_status_t gs__many_persist(gs_client_h c, gs_future_h f, size_t nroots,
                                    const gs_array_h *roots, const uint8_t *persist,
                                    const gs_lower_result_t *lr)
{
    gs__persisted_t *head = NULL, *tail = NULL;
    gs_key_t *keys = NULL;
    gs_status_t st = GS_OK;
    uint64_t gid;

    uv_mutex_lock(&c->mu);
    gid = f->graph_id;
    /* a closed or lost client's chunks are gone: nothing to record (as gs_client_persist) */
    if (c->state != GS__READY || c->stopping) {
        uv_mutex_unlock(&c->mu);
        return GS_OK;
    }
    uv_mutex_unlock(&c->mu);
    for (size_t r = 0; r < nroots; r++) {
        gs__persisted_t *p;
        if (!persist[r]) continue;
        keys = gs_malloc(gs_size_mul(lr[r].noutputs ? lr[r].noutputs : 1, sizeof(gs_key_t)),
                         "persist keys");
        p = gs_calloc(1, sizeof(*p), "persisted");
        if (keys == NULL || p == NULL) {
            gs_free(p);
            st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory recording persisted chunks");
            goto undo;
        }
        for (uint64_t b = 0; b < lr[r].noutputs; b++) {
            const uint64_t *k = f->out_keys + 2 * (lr[r].out_off + b);
            keys[b].graph = k[0] == GS__SELF_GRAPH ? gid : k[0];
            keys[b].task = k[1];
        }
        if ((st = gs_array_set_persisted(roots[r], lr[r].noutputs, keys)) != GS_OK) {
            gs_free(p);
            goto undo;
        }
        gs_free(keys);
        keys = NULL;
        p->array = gs_array_retain(roots[r]);
        p->graph_id = gid;
        if (tail != NULL) tail->next = p;
        else head = p;
        tail = p;
    }
    if (head != NULL) {
        uv_mutex_lock(&c->mu);
        tail->next = c->persisted;
        c->persisted = head;
        f->persist_marked = 1;   /* the graph stays until its last persisted array goes */
        uv_mutex_unlock(&c->mu);
    }
    return GS_OK;
undo:
    gs_free(keys);
    gs__persisted_free_all(head);   /* clears the arrays' persisted chunks */
    return st;
}

gs_status_t gs_client_compute_many(gs_client_h c, size_t n, const gs_compute_result_t *results,
                                   gs_compute_stats_t *stats_p)
{
    gs_array_h *roots = NULL;
    size_t *root_of = NULL;    /* result -> root index (SIZE_MAX: nothing to do) */
    uint8_t *persist = NULL;   /* root -> persisted */
    size_t nroots = 0;
    int any_persist = 0;
    unsigned lower, retry;
    gs_status_t st;

    if ((st = gs__many_check(c, n, results)) != GS_OK) return st;
    if ((st = gs__client_usable(c)) != GS_OK) return st;
    roots = gs_calloc(n, sizeof(*roots), "compute_many roots");
    root_of = gs_calloc(n, sizeof(*root_of), "compute_many root index");
    persist = gs_calloc(n, 1, "compute_many persist flags");
    if (roots == NULL || root_of == NULL || persist == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory computing several results");
        goto out;
    }
    /* one root per distinct array */
    for (size_t i = 0; i < n; i++) {
        const gs_compute_result_t *r = &results[i];
        size_t k;
        root_of[i] = SIZE_MAX;
        if (r->mode == GS_RESULT_PERSIST && gs__persisted_known(c, r->array)) continue;
        for (k = 0; k < nroots && roots[k] != r->array; k++) {
        }
        if (k == nroots) roots[nroots++] = r->array;
        root_of[i] = k;
        if (r->mode == GS_RESULT_PERSIST) persist[k] = any_persist = 1;
    }
    if (nroots == 0) {   /* every entry an array this client has persisted already */
        if (stats_p != NULL) memset(stats_p, 0, sizeof(*stats_p));
        goto out;
    }
    lower = c->lower_flags;
    for (;;) {
        gs_taskgraph_t *tg = NULL;
        gs_lower_result_t *lr = NULL;
        gs_compute_stats_t stats;
        gs_future_h f;
        double t0 = gs_now_s();
        int again;
        if ((st = gs__client_lower(c, nroots, roots, lower, &tg, &lr)) != GS_OK) goto out;
        if ((st = gs__client_submit_graph(c, tg, any_persist ? GS_SUBMIT_KEEP : 0, NULL, t0,
                                          &f)) != GS_OK) {
            gs_graph_lower_results_free(nroots, lr);
            goto out;
        }
        st = gs_future_wait(f, -1.0);
        again = st != GS_OK && gs_graph_lower_retry_flags(lower, st, gs_last_error(), &retry);
        for (size_t i = 0; st == GS_OK && i < n; i++) {
            const gs_compute_result_t *r = &results[i];
            const gs_lower_result_t *q;
            if (r->mode != GS_RESULT_GATHER || gs_array_size(r->array) == 0) continue;
            q = &lr[root_of[i]];
            st = gs__future_gather_part(f, &q->grid, q->dtype, q->out_off, q->noutputs, r->out,
                                        r->out_len);
        }
        if (st == GS_OK && stats_p != NULL) st = gs_future_stats(f, &stats);
        if (st == GS_OK && any_persist) st = gs__many_persist(c, f, nroots, roots, persist, lr);
        if (st == GS_OK && stats_p != NULL) *stats_p = stats;
        gs_future_destroy(f);
        gs_graph_lower_results_free(nroots, lr);
        if (!again) break;
        GS_LOG_INFO("compute_many: the Gram path refused a tall SVD's input; again by TSQR");
        lower = retry;   /* without GS_LOWER_GRAM_SVD: no second retry */
    }
out:
    gs_free(roots);
    gs_free(root_of);
    gs_free(persist);
    return st;
}
