/*
 * Internal to proto/conn*.c: the connection and write-request structs and the helpers the
 * files share. conn.c: lifetime, reading, writing, accept/connect; conn_budget.c: the frame
 * memory budget and memory counters; conn_tls.c: the TLS layer; conn_refuse.c: the refuser
 * (needs only proto/conn.h). Nothing outside proto/ includes this.
 */
#ifndef GS_PROTO_CONN_INT_H
#define GS_PROTO_CONN_INT_H

#include "proto/conn.h"

#include <stdint.h>

typedef struct gs__wreq {
    uv_write_t req;
    struct gs__wreq *next;  /* queue of frames waiting for the connection */
    gs_conn_t *conn;
    uint8_t *data;          /* owned: the frame, or the head of a gs_conn_send_data() frame */
    size_t data_cap;        /* data's capacity when it goes back to the thread's spares once
                               written (gs_frame_storage_give), else 0: freed */
    size_t len;             /* bytes of data + tail */
    size_t head_len;        /* bytes of data */
    const uint8_t *tail;    /* borrowed bytes that follow data (gs_conn_send_data) */
    gs_conn_release_cb release;
    void *release_arg;
    uint8_t *cipher;        /* owned: TLS records written instead of data + tail */
} gs__wreq_t;

struct gs_conn {
    uv_tcp_t tcp;
    uv_connect_t connect_req;
    uv_shutdown_t shutdown_req;
    uv_timer_t trim_timer;         /* releases a retained large read buffer when idle; while a
                                      close waits for the TLS handshake, that wait's deadline */
    gs_conn_params_t params;
    gs_frame_reader_t reader;
    gs__wreq_t *wait_head, *wait_tail;  /* frames queued before the connection was established */
    size_t pending_bytes;
    gs_status_t close_reason;
    unsigned connecting : 1;       /* uv_tcp_connect under way */
    unsigned connected : 1;        /* established: reads and writes go to libuv */
    unsigned close_requested : 1;  /* gs_conn_close() was called (first reason kept) */
    unsigned handle_closing : 1;   /* uv_close() was called */
    unsigned silent : 1;           /* failed creation: free without callbacks */
    unsigned in_msg_cb : 1;        /* msg_cb running: gs_conn_detach_frame() allowed */
    unsigned frame_detached : 1;   /* ... and it took the frame's storage */
    unsigned handles_open : 2;     /* tcp and trim_timer not yet closed */
    unsigned budget_wait : 1;      /* reading stopped until params.budget has room for want */
    unsigned has_addr : 1;         /* peer_addr is known */
    unsigned tls_connect_pending : 1;  /* TLS client: connect_cb not yet called */
    unsigned tls_peer_closed : 1;  /* close_notify came: fail after handing out the frames before it */
    unsigned tls_close_pending : 1;  /* GS_OK close waits for the handshake to send the waiting frames */
    gs_tls_session_t *tls;         /* NULL without TLS */
    uint64_t charged;              /* bytes of the frame in progress charged to params.budget */
    uint64_t want;                 /* bytes waited for (budget_wait) */
    gs_conn_t *wait_next;          /* next connection waiting for the budget */
    gs_conn_t *charged_prev, *charged_next;  /* connections holding a charge */
    uint64_t last_read_ms;         /* loop time of the last bytes received */
    size_t read_counted;           /* reader buffer bytes counted in params.budget->read_bytes */
    struct sockaddr_storage peer_addr;
    void *data;
    char peer_name[64];
};

/* conn.c */
void gs__conn_fail(gs_conn_t *c, gs_status_t reason);
void gs__conn_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf);
void gs__conn_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
/* Free a write request; a borrowed tail is released with @a status (exactly once: here). */
void gs__conn_free_wreq(gs__wreq_t *w, gs_status_t status);
/* Hand @a w to libuv. On failure @a w is untouched (still counted in pending_bytes): the caller
 * disposes of it and then fails the connection. */
gs_status_t gs__conn_submit(gs_conn_t *c, gs__wreq_t *w);
/* Submit the frames queued before the connection (or its TLS session) was established. */
void gs__conn_submit_waiting(gs_conn_t *c);
/* Graceful end after a GS_OK close: flush queued writes (and a TLS close_notify), then close. */
void gs__conn_shutdown(gs_conn_t *c);

/* conn_budget.c */
/* Keep params.budget's memory counters current: queued write bytes change by @a delta. */
void gs__conn_pending(gs_conn_t *c, int64_t delta);
/* ... and the reader's buffer capacity, after anything that may have changed it. */
void gs__conn_count_read(gs_conn_t *c);
/* Give back the connection's charge (the frame was handed out, or reading is over); the
 * waiting connections that now fit resume. */
void gs__conn_budget_uncharge(gs_conn_t *c);
/* ... and leave the budget's queue too (the connection is closing). */
void gs__conn_budget_release(gs_conn_t *c);
/* Before the reader examines the next frame: charge it when large. 1: go on; 0: reading stopped
 * until the budget has room; -1: the frame can never fit (connection failed). */
int gs__conn_budget_charge(gs_conn_t *c);

/* conn_tls.c */
/* Put the TLS session's pending records (handshake, alerts) on the wire. */
void gs__conn_tls_flush(gs_conn_t *c);
/* Feed @a n received bytes at @a data through the TLS session; on completion of the handshake
 * send the waiting frames (and report a client's connection). Fails the connection on error. */
gs_status_t gs__conn_tls_feed(gs_conn_t *c, const void *data, size_t n);
/* A GS_OK close of a connection whose TLS handshake has not completed while frames wait for it:
 * 1 when the close must wait (reading is (re)started for the handshake; gs__conn_tls_feed
 * sends the frames, then shuts down); 0 to close now. */
int gs__conn_tls_close_waits(gs_conn_t *c);
/* The bound of a close waiting for the TLS handshake (params.close_wait_ms or the default), and
 * starting it on the connection's timer (conn.c; the timer fails the connection with
 * GS_ERR_TIMED_OUT when tls_close_pending is still set then). */
unsigned gs__conn_close_wait_ms(const gs_conn_t *c);
void gs__conn_arm_close_wait(gs_conn_t *c);

#endif
