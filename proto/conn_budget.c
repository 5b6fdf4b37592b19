/*
 * Frame memory budget of the framed connections (proto/conn.h: gs_conn_budget_t; the rules are
 * in proto/conn.c's opening comment): charging a large frame before the reader reserves it,
 * the queue of connections waiting for room, waking them in order, closing a charged
 * connection that stalls while others wait; and the memory counters (queued write bytes,
 * reader buffers) every connection keeps current in its budget.
 */
#include "proto/conn_int.h"

#include "common/error.h"
#include "common/log.h"

#include <inttypes.h>
#include <string.h>

void gs_conn_budget_init(gs_conn_budget_t *b, uint64_t limit)
{
    memset(b, 0, sizeof *b);
    b->limit = limit;
}

/* Keep params.budget's memory counters current: queued write bytes change by @a delta. */
void gs__conn_pending(gs_conn_t *c, int64_t delta)
{
    gs_conn_budget_t *b = c->params.budget;
    c->pending_bytes = (size_t)((int64_t)c->pending_bytes + delta);
    if (b == NULL) return;
    b->write_bytes = (uint64_t)((int64_t)b->write_bytes + delta);
    if (b->write_bytes > b->write_peak) b->write_peak = b->write_bytes;
}

/* ... and the reader's buffer capacity, after anything that may have changed it. */
void gs__conn_count_read(gs_conn_t *c)
{
    gs_conn_budget_t *b = c->params.budget;
    size_t cap = c->reader.buf.cap;
    if (b == NULL || cap == c->read_counted) return;
    b->read_bytes = b->read_bytes - c->read_counted + cap;
    c->read_counted = cap;
    if (b->read_bytes > b->read_peak) b->read_peak = b->read_bytes;
}

static void gs__budget_charge(gs_conn_budget_t *b, gs_conn_t *c, uint64_t bytes)
{
    b->used += bytes;
    if (b->used > b->peak) b->peak = b->used;
    c->charged = bytes;
    c->last_read_ms = uv_now(c->tcp.loop);
    c->charged_prev = NULL;
    c->charged_next = b->charged_head;
    if (b->charged_head != NULL) b->charged_head->charged_prev = c;
    b->charged_head = c;
}

void gs_conn_budget_expire(gs_conn_budget_t *b, uint32_t stall_ms)
{
    gs_conn_t *c = b->charged_head;
    while (c != NULL && b->wait_head != NULL) {
        gs_conn_t *next = c->charged_next;   /* closing uncharges c (and may wake waiters) */
        uint64_t now = uv_now(c->tcp.loop);
        if (now - c->last_read_ms >= stall_ms) {
            b->stalled_total++;
            GS_LOG_WARN("connection %s: no bytes of a %" PRIu64 "-byte frame for %u ms while others wait for "
                        "frame memory; closing", c->peer_name, c->charged, stall_ms);
            gs__conn_fail(c, gs_error_set(GS_ERR_TIMED_OUT, "frame stalled for %u ms", stall_ms));
        }
        c = next;
    }
}

/* Restart the waiting connections, in order, while the first one fits. */
static void gs__budget_wake(gs_conn_budget_t *b)
{
    while (b->wait_head != NULL && (b->limit == 0 || b->used + b->wait_head->want <= b->limit)) {
        gs_conn_t *c = b->wait_head;
        int r;
        b->wait_head = c->wait_next;
        if (b->wait_head == NULL) b->wait_tail = NULL;
        c->wait_next = NULL;
        c->budget_wait = 0;
        gs__budget_charge(b, c, c->want);
        GS_LOG_DEBUG("connection %s: %" PRIu64 " frame bytes granted", c->peer_name, c->want);
        r = uv_read_start((uv_stream_t *)&c->tcp, gs__conn_alloc_cb, gs__conn_read_cb);
        if (r < 0) gs__conn_fail(c, gs_status_from_uv(r, "uv_read_start"));
    }
}

/* Give back the connection's charge (the frame was handed out, or reading is over) and leave
 * the queue; the waiting connections that now fit resume. */
void gs__conn_budget_uncharge(gs_conn_t *c)
{
    gs_conn_budget_t *b = c->params.budget;
    if (b == NULL || c->charged == 0) return;
    b->used -= c->charged;
    c->charged = 0;
    if (c->charged_prev != NULL) {
        c->charged_prev->charged_next = c->charged_next;
    } else {
        b->charged_head = c->charged_next;
    }
    if (c->charged_next != NULL) c->charged_next->charged_prev = c->charged_prev;
    c->charged_prev = c->charged_next = NULL;
    gs__budget_wake(b);
}

void gs__conn_budget_release(gs_conn_t *c)
{
    gs_conn_budget_t *b = c->params.budget;
    if (b == NULL) return;
    if (c->budget_wait) {
        gs_conn_t **pp = &b->wait_head, *prev = NULL;
        while (*pp != c) {
            prev = *pp;
            pp = &(*pp)->wait_next;
        }
        *pp = c->wait_next;
        if (b->wait_tail == c) b->wait_tail = prev;
        c->wait_next = NULL;
        c->budget_wait = 0;
    }
    gs__conn_budget_uncharge(c);
}

/* Before the reader examines the next frame: charge it when large. 1: go on; 0: reading stopped
 * until the budget has room; -1: the frame can never fit (connection failed). */
int gs__conn_budget_charge(gs_conn_t *c)
{
    gs_conn_budget_t *b = c->params.budget;
    const gs_frame_reader_t *r = &c->reader;
    uint64_t flen;
    if (b == NULL || c->charged != 0 || r->buf.len - r->pos < GS_PROTO_FRAME_HEADER) return 1;
    flen = (uint64_t)r->buf.data[r->pos] | (uint64_t)r->buf.data[r->pos + 1] << 8 |
           (uint64_t)r->buf.data[r->pos + 2] << 16 | (uint64_t)r->buf.data[r->pos + 3] << 24;
    if (flen <= GS_CONN_BUDGET_MIN_FRAME || flen > r->max_frame) return 1;  /* not charged / refused */
    if (b->limit != 0 && flen > b->limit) {
        b->refused_total++;
        GS_LOG_WARN("connection %s: frame of %" PRIu64 " bytes exceeds the frame memory budget of %" PRIu64
                    " bytes; closing", c->peer_name, flen, b->limit);
        gs__conn_fail(c, gs_error_set(GS_ERR_MSG_TOO_LARGE, "frame of %" PRIu64 " bytes exceeds the frame "
                                      "memory budget of %" PRIu64 " bytes", flen, b->limit));
        return -1;
    }
    if (b->wait_head == NULL && (b->limit == 0 || b->used + flen <= b->limit)) {
        gs__budget_charge(b, c, flen);
        return 1;
    }
    b->waits_total++;
    GS_LOG_DEBUG("connection %s: frame of %" PRIu64 " bytes waits for frame memory (%" PRIu64 " of %" PRIu64
                 " in use)", c->peer_name, flen, b->used, b->limit);
    c->want = flen;
    c->budget_wait = 1;
    if (b->wait_tail != NULL) {
        b->wait_tail->wait_next = c;
    } else {
        b->wait_head = c;
    }
    b->wait_tail = c;
    uv_read_stop((uv_stream_t *)&c->tcp);
    return 0;
}

