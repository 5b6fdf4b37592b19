/* The worker's completion queue: notes from backend notify() callbacks (any thread) reach the
 * loop through note_head + uv_async_send, and gs__wexec_drain (exec.c) dispatches them.
 *
 * gs__wnote_arm is the one way a note is registered with the backend. When the backend cannot
 * register it (notify() fails: out of memory, a CUDA callback that cannot be queued), the loop
 * is not blocked in sync() as chunkops.h forbids: the note is parked and registration retried
 * from a uv timer every GS_W_NOTE_RETRY_MS. After GS_W_NOTE_RETRIES failed tries the note is
 * delivered with the registration error (the backend is broken by then). A stop delivers parked
 * notes with GS_ERR_CANCELED once the streams have been drained. */
#include "worker/worker_int.h"

#include "common/time.h"

#define GS_W_NOTE_RETRY_MS 1
#define GS_W_NOTE_RETRIES 1000

/* Append @a n to the list (*head_p, *tail_p); the caller holds done_lock. */
static void gs__wnote_append(gs_wnote_t **head_p, gs_wnote_t **tail_p, gs_wnote_t *n)
{
    n->next = NULL;
    if (*tail_p) (*tail_p)->next = n;
    else *head_p = n;
    *tail_p = n;
}

void gs__wnote_push(gs_worker_t *w, gs_wnote_t *n)
{
    uv_mutex_lock(&w->done_lock);
    gs__wnote_append(&w->note_head, &w->note_tail, n);
    uv_mutex_unlock(&w->done_lock);
    uv_async_send(&w->async);
}

void gs__wnote_cb(gs_status_t status, void *arg)
{
    gs_wnote_t *n = arg;
    n->status = status;
    n->t_done = gs_now_ns();
    gs__wnote_push(n->w, n);
}

static gs_status_t gs__wnote_register(gs_worker_t *w, gs_wnote_t *n)
{
    if (atomic_load(&w->test_notify_fail) > 0 && atomic_fetch_sub(&w->test_notify_fail, 1) > 0)
        return gs_error_set(GS_ERR_UNSUPPORTED, "test: completion notification refused");
    return w->ops->notify(w->ctx, n->stream, gs__wnote_cb, n);
}

/* Park @a n for the retry timer (any thread; the loop starts the timer in gs__wnote_unpark). */
static void gs__wnote_park(gs_worker_t *w, gs_wnote_t *n)
{
    uv_mutex_lock(&w->done_lock);
    gs__wnote_append(&w->park_head, &w->park_tail, n);
    uv_mutex_unlock(&w->done_lock);
    uv_async_send(&w->async);
}

void gs__wnote_arm(gs_worker_t *w, gs_chunkops_stream_h stream, gs_wnote_t *n)
{
    n->w = w;
    n->stream = stream;
    n->retries = 0;
    if (gs__wnote_register(w, n) == GS_OK) return;
    GS_LOG_WARN("completion notification failed (%s); retrying from the loop", gs_last_error());
    atomic_fetch_add(&w->nnotify_retried, 1);
    gs__wnote_park(w, n);
}

static void gs__wnote_retry_cb(uv_timer_t *h)
{
    gs_worker_t *w = h->data;
    gs_wnote_t *n;

    uv_mutex_lock(&w->done_lock);
    n = w->park_head;
    w->park_head = w->park_tail = NULL;
    uv_mutex_unlock(&w->done_lock);
    while (n) {
        gs_wnote_t *next = n->next;
        gs_status_t st = gs__wnote_register(w, n);
        if (st != GS_OK && ++n->retries >= GS_W_NOTE_RETRIES) {
            GS_LOG_ERROR("completion notification still failing after %d tries (%s): giving up",
                         GS_W_NOTE_RETRIES, gs_last_error());
            n->status = st;
            n->t_done = gs_now_ns();
            gs__wnote_push(w, n);
        } else if (st != GS_OK) {
            gs__wnote_park(w, n);
        }
        n = next;
    }
    uv_mutex_lock(&w->done_lock);
    if (w->park_head == NULL) uv_timer_stop(&w->note_timer);
    uv_mutex_unlock(&w->done_lock);
}

void gs__wnote_unpark(gs_worker_t *w)
{
    gs_wnote_t *n;

    uv_mutex_lock(&w->done_lock);
    n = w->park_head;
    if (n != NULL && w->state >= GS_WSTATE_STOPPING) w->park_head = w->park_tail = NULL;
    uv_mutex_unlock(&w->done_lock);
    if (n == NULL) return;
    if (w->state < GS_WSTATE_STOPPING) {
        if (!uv_is_active((uv_handle_t *)&w->note_timer))
            uv_timer_start(&w->note_timer, gs__wnote_retry_cb, GS_W_NOTE_RETRY_MS,
                           GS_W_NOTE_RETRY_MS);
        return;
    }
    /* stopping (the streams were drained before this runs): into the queue the caller is
     * about to drain, without waking the loop (its async handle may be closed) */
    uv_mutex_lock(&w->done_lock);
    while (n) {
        gs_wnote_t *next = n->next;
        n->status = GS_ERR_CANCELED;
        n->t_done = gs_now_ns();
        gs__wnote_append(&w->note_head, &w->note_tail, n);
        n = next;
    }
    uv_mutex_unlock(&w->done_lock);
}
