/* What the client asks of the cluster besides graphs: how many workers there are (and waiting
 * for them), the worker list, and the arrays it persisted there (persist, replicate,
 * unpersist). */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "common/time.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------ */
/* workers */

static gs_status_t gs__info(gs_client_h c, double deadline, uint32_t *nworkers_p)
{
    gs__op_t *op = gs__op_new(GS__OP_INFO);
    gs_status_t st;
    if (op == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory asking for cluster info");
    st = gs__op_call(c, op, deadline, "no cluster info from the scheduler in time");
    if (st != GS_OK) return st;
    *nworkers_p = op->nworkers;
    gs__op_free(op);
    return GS_OK;
}

int gs_client_nworkers(gs_client_h c)
{
    uint32_t n = 0;
    if (c == NULL) {
        gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_nworkers: client is NULL");
        return -1;
    }
    if (gs__info(c, gs__deadline(30.0), &n) != GS_OK) return -1;
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

gs_status_t gs_client_wait_for_workers(gs_client_h c, int n, double timeout_s)
{
    double deadline, sleep_s = 0.001;
    if (c == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_wait_for_workers: client "
                                                             "is NULL");
    if (n < 0) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_wait_for_workers: n must be "
                                                         ">= 0, not %d", n);
    if (isnan(timeout_s))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_wait_for_workers: timeout is NaN");
    deadline = gs__deadline(timeout_s);
    for (;;) {
        uint32_t have = 0;
        gs_status_t st = gs__info(c, deadline, &have);
        if (st != GS_OK) {
            if (st == GS_ERR_TIMED_OUT)
                return gs_error_set(GS_ERR_TIMED_OUT, "%d worker(s) did not register within "
                                                      "%.1f s", n, timeout_s);
            return st;
        }
        if ((int64_t)have >= n) return GS_OK;
        if (deadline >= 0 && gs_now_s() + sleep_s > deadline)
            return gs_error_set(GS_ERR_TIMED_OUT, "only %u of %d worker(s) registered within "
                                                  "%.1f s", have, n, timeout_s);
        struct timespec ts = {0, (long)(sleep_s * 1e9)};
        nanosleep(&ts, NULL);
        if (sleep_s < 0.02) sleep_s *= 2;
    }
}

gs_status_t gs_client_workers(gs_client_h c, gs_client_worker_info_t *out, size_t cap, size_t *n_p)
{
    gs__op_t *op;
    gs_status_t st;
    size_t n;
    if (c == NULL || n_p == NULL || (out == NULL && cap > 0))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_workers: client and n_p must not be NULL, "
                                                  "out only when cap is 0");
    op = gs__op_new(GS__OP_WORKERS);
    if (op == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory asking for the worker list");
    st = gs__op_call(c, op, gs__deadline(GS__DEFAULT_TIMEOUT_S),
                     "no worker list from the scheduler in time");
    if (st != GS_OK) return st;
    n = op->nwinfo < cap ? op->nwinfo : cap;
    if (n > 0) memcpy(out, op->winfo, n * sizeof(*out));
    *n_p = op->nwinfo;
    gs__op_free(op);
    return GS_OK;
}

const char *gs_file_read_path_name(int i)
{
    static const char *const names[GS_FILE_READ_PATHS] = {"cpu", "pinned", "cufile",
                                                          "cufile-compat"};
    return i >= 0 && i < GS_FILE_READ_PATHS ? names[i] : "unknown";
}

/* ------------------------------------------------------------------------------------------ */
/* persisted arrays */

/* This client's record of @a array, or NULL (c->mu held). */
static gs__persisted_t *gs__persisted_find_locked(gs_client_h c, gs_array_h array)
{
    for (gs__persisted_t *p = c->persisted; p != NULL; p = p->next)
        if (p->array == array) return p;
    return NULL;
}

gs_status_t gs_client_persist(gs_client_h c, gs_array_h array)
{
    gs_future_h f;
    gs_status_t st;
    int known;
    if (c == NULL || array == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_persist: client and array must not "
                                                  "be NULL");
    uv_mutex_lock(&c->mu);
    known = gs__persisted_find_locked(c, array) != NULL;
    uv_mutex_unlock(&c->mu);
    if (known) return GS_OK;   /* already persisted by this client */
    /* a tall SVD the Gram path refuses: once more by TSQR, as gs_client_compute */
    unsigned lower = c->lower_flags, retry;
    for (;;) {
        if ((st = gs__client_submit_lower(c, array, GS_SUBMIT_KEEP, lower, &f)) != GS_OK)
            return st;
        st = gs_future_wait(f, -1.0);
        int again = st != GS_OK && gs_graph_lower_retry_flags(lower, st, gs_last_error(), &retry);
        gs_future_destroy(f);
        if (!again) return st;
        GS_LOG_INFO("persist: the Gram path refused a tall SVD's input; again by TSQR");
        lower = retry;   /* without GS_LOWER_GRAM_SVD: no second retry */
    }
}

gs_status_t gs_client_replicate(gs_client_h c, gs_array_h array, const char *worker, double timeout_s)
{
    gs__persisted_t *p;
    gs__op_t *op;
    gs_status_t st;
    uint64_t gid = 0;
    char timeout_msg[GS__MSG_LEN];
    if (c == NULL || array == NULL || worker == NULL || worker[0] == '\0')
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_replicate: client, array and worker name must be "
                                                  "given");
    if (strlen(worker) >= sizeof(op->repl_target))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_replicate: worker name longer than %zu bytes",
                            sizeof(op->repl_target) - 1);
    uv_mutex_lock(&c->mu);
    if ((p = gs__persisted_find_locked(c, array)) != NULL) gid = p->graph_id;
    uv_mutex_unlock(&c->mu);
    if (p == NULL)
        return gs_error_set(GS_ERR_NOT_FOUND, "gs_client_replicate: the array is not persisted by this client "
                                              "(gs_client_persist first)");
    op = gs__op_new(GS__OP_REPLICATE);
    if (op == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a replicate request");
    op->repl_graph = gid;
    snprintf(op->repl_target, sizeof(op->repl_target), "%s", worker);
    snprintf(timeout_msg, sizeof(timeout_msg), "replicating to worker %s did not finish in time",
             worker);
    if ((st = gs__op_call(c, op, gs__deadline(timeout_s), timeout_msg)) != GS_OK) return st;
    gs__op_free(op);
    return GS_OK;
}

gs_status_t gs_client_unpersist(gs_client_h c, gs_array_h array)
{
    gs__persisted_t **pp, *p = NULL;
    gs__op_t *op;
    int shared = 0;
    if (c == NULL || array == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_unpersist: client and array must not "
                                                  "be NULL");
    uv_mutex_lock(&c->mu);
    for (pp = &c->persisted; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->array == array) {
            p = *pp;
            *pp = p->next;
            break;
        }
    }
    /* arrays persisted by one gs_client_compute_many share its graph: released with the last */
    for (gs__persisted_t *q = c->persisted; p != NULL && q != NULL && !shared; q = q->next)
        shared = q->graph_id == p->graph_id;
    uv_mutex_unlock(&c->mu);
    if (p == NULL)
        return gs_error_set(GS_ERR_NOT_FOUND, "gs_client_unpersist: the array is not persisted "
                                              "by this client");
    gs_array_clear_persisted(p->array);
    op = shared ? NULL : gs__op_new(GS__OP_RELEASE_GRAPH);
    if (op != NULL) {
        op->graph_id = p->graph_id;
        if (gs__post(c, op) != GS_OK) gs__op_free(op);   /* disconnected: chunks are gone anyway */
    }
    gs_array_release(p->array);
    gs_free(p);
    return GS_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* performance report */

gs_status_t gs_client_report(gs_client_h c, gs_future_h future, const char *path)
{
    gs__op_t *op;
    gs_status_t st;
    uint64_t gid;
    FILE *f;
    if (c == NULL || future == NULL || path == NULL || path[0] == '\0' || future->client != c)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_report: client, one of its futures and a path "
                                                  "must be given");
    uv_mutex_lock(&c->mu);
    gs__wait_flag_locked(c, &future->done, -1.0);   /* the report is of the finished graph */
    gid = future->graph_id;
    uv_mutex_unlock(&c->mu);
    if (gid == 0)
        return gs_error_set(GS_ERR_NOT_FOUND, "gs_client_report: the graph never reached the scheduler");
    op = gs__op_new(GS__OP_REPORT);
    if (op == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a report request");
    op->repl_graph = gid;
    if ((st = gs__op_call(c, op, gs__deadline(GS__DEFAULT_TIMEOUT_S), "no report from the scheduler in time")) != GS_OK)
        return st;
    f = fopen(path, "wb");
    if (f == NULL) {
        st = gs_error_set(GS_ERR_IO, "gs_client_report: cannot create %s: %s", path, strerror(errno));
    } else {
        size_t n = fwrite(op->report_html, 1, op->report_len, f);
        if (fclose(f) != 0 || n != op->report_len) {
            st = gs_error_set(GS_ERR_IO, "gs_client_report: cannot write %s: %s", path, strerror(errno));
        }
    }
    gs__op_free(op);
    return st;
}
