/* The client's core: reference counts of clients and futures, ops and the queue that carries
 * them to the I/O thread, waiting on the client's condition, and completing futures and ops.
 * Used by every other client file; calls none of them. */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "common/time.h"

#include <string.h>

static void gs__msgcpy(char *dst, const char *src, size_t len)
{
    size_t n = len < GS__MSG_LEN - 1 ? len : GS__MSG_LEN - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ------------------------------------------------------------------------------------------ */
/* references */

void gs__client_unref_locked(gs_client_h c, int *free_p)
{
    gs_assert_always(c->refs > 0);
    *free_p = --c->refs == 0;
}

void gs__persisted_free_all(gs__persisted_t *p)
{
    while (p != NULL) {
        gs__persisted_t *next = p->next;
        gs_array_clear_persisted(p->array);
        gs_array_release(p->array);
        gs_free(p);
        p = next;
    }
}

void gs__client_free(gs_client_h c)
{
    gs__persisted_free_all(c->persisted);
    uv_cond_destroy(&c->cond);
    uv_mutex_destroy(&c->mu);
    gs_free(c->token);
    gs_tls_ctx_destroy(c->tls);
    gs_buf_cleanup(&c->spare_frame);
    gs_free(c);
}

void gs__future_free(gs_future_h f)
{
    gs_grid_cleanup(&f->grid);
    gs_free(f->out_keys);
    gs_array_release(f->keep_array);
    gs_free(f);
}

void gs__future_unref(gs_future_h f)
{
    gs_client_h c = f->client;
    int free_f, free_c = 0;
    uv_mutex_lock(&c->mu);
    gs_assert_always(f->refs > 0);
    free_f = --f->refs == 0;
    if (free_f) gs__client_unref_locked(c, &free_c);
    uv_mutex_unlock(&c->mu);
    if (free_f) gs__future_free(f);
    if (free_c) gs__client_free(c);
}

/* ------------------------------------------------------------------------------------------ */
/* ops and the queue */

void gs__op_free(gs__op_t *op)
{
    gs_buf_cleanup(&op->frame);
    gs_free(op->keys);
    gs_free(op->got);
    gs_free(op->winfo);
    gs_free(op->report_html);
    gs_free(op->loc_keys);
    gs_free(op->loc);
    gs_free(op);
}

gs__op_t *gs__op_new(gs__op_kind_t kind)
{
    gs__op_t *op = gs_calloc(1, sizeof(*op), "client op");
    if (op == NULL) return NULL;
    op->kind = kind;
    gs_buf_init(&op->frame);
    return op;
}

gs_status_t gs__client_unusable_locked(gs_client_h c)
{
    switch (c->state) {
    case GS__LOST:
    case GS__FAILED:
        return gs_error_set(c->fail_status, "%s", c->fail_message);
    case GS__CLOSED:
        return gs_error_set(GS_ERR_CANCELED, "the client has been destroyed");
    default:
        return gs_error_set(GS_ERR_INTERNAL, "client is not connected");
    }
}

void gs__queue_push_locked(gs_client_h c, gs__op_t *op)
{
    op->next = NULL;
    if (c->q_tail != NULL)
        c->q_tail->next = op;
    else
        c->q_head = op;
    c->q_tail = op;
    /* sent under the lock: shutdown sets `stopping` under it before the handle is closed */
    uv_async_send(&c->async);
}

gs__op_t *gs__queue_take(gs_client_h c)
{
    gs__op_t *op;
    uv_mutex_lock(&c->mu);
    op = c->q_head;
    c->q_head = c->q_tail = NULL;
    uv_mutex_unlock(&c->mu);
    return op;
}

gs_status_t gs__post(gs_client_h c, gs__op_t *op)
{
    uv_mutex_lock(&c->mu);
    if (c->state == GS__CLOSED || c->stopping || !c->thread_started) {
        gs_status_t st = c->state == GS__LOST || c->state == GS__FAILED
                             ? gs__client_unusable_locked(c)
                             : gs_error_set(GS_ERR_CANCELED, "the client has been destroyed");
        uv_mutex_unlock(&c->mu);
        return st;
    }
    gs__queue_push_locked(c, op);
    uv_mutex_unlock(&c->mu);
    return GS_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* waiting */

int gs__wait_flag_locked(gs_client_h c, const int *flag, double deadline)
{
    while (!*flag) {
        if (deadline < 0) {
            uv_cond_wait(&c->cond, &c->mu);
        } else {
            double left = deadline - gs_now_s();
            if (left <= 0) return 0;
            (void)uv_cond_timedwait(&c->cond, &c->mu, (uint64_t)(left * 1e9) + 1);
        }
    }
    return 1;
}

double gs__deadline(double timeout_s)
{
    return timeout_s < 0 ? -1.0 : gs_now_s() + timeout_s;
}

gs_status_t gs__op_call(gs_client_h c, gs__op_t *op, double deadline, const char *timeout_msg)
{
    gs_status_t st;
    if ((st = gs__post(c, op)) != GS_OK) {
        gs__op_free(op);
        return st;
    }
    uv_mutex_lock(&c->mu);
    if (!gs__wait_flag_locked(c, &op->done, deadline)) {
        op->abandoned = 1;   /* the I/O thread frees it when the answer (or failure) comes */
        uv_mutex_unlock(&c->mu);
        return gs_error_set(GS_ERR_TIMED_OUT, "%s", timeout_msg);
    }
    uv_mutex_unlock(&c->mu);
    st = op->status;
    if (st != GS_OK) {
        gs_error_set(st, "%s", op->message);
        gs__op_free(op);
    }
    return st;
}

/* ------------------------------------------------------------------------------------------ */
/* completing futures and ops */

void gs__future_complete_locked(gs_future_h f, gs_status_t status, const char *msg,
                                size_t msg_len)
{
    if (f->done) return;
    f->done = 1;
    f->status = status;
    f->t_done = gs_now_s();
    if (status != GS_OK) {
        if (msg == NULL || msg_len == 0) {
            msg = gs_status_string(status);
            msg_len = strlen(msg);
        }
        gs__msgcpy(f->message, msg, msg_len);
    }
}

void gs__future_finish(gs_client_h c, gs_future_h f, gs_status_t status, const char *msg,
                       size_t msg_len)
{
    uv_mutex_lock(&c->mu);
    gs__future_complete_locked(f, status, msg, msg_len);
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
    gs__future_unref(f);
}

static void gs__op_complete_locked(gs__op_t *op, gs_status_t status, const char *msg)
{
    if (op->done) return;
    op->done = 1;
    op->status = status;
    if (status != GS_OK) {
        if (msg == NULL || msg[0] == '\0') msg = gs_status_string(status);
        gs__msgcpy(op->message, msg, strlen(msg));
    }
}

void gs__op_finish(gs_client_h c, gs__op_t *op, gs_status_t status, const char *msg)
{
    int free_op;
    uv_mutex_lock(&c->mu);
    gs__op_complete_locked(op, status, msg);
    free_op = op->abandoned;
    uv_cond_broadcast(&c->cond);
    uv_mutex_unlock(&c->mu);
    if (free_op) gs__op_free(op);
}
