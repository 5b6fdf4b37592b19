/* A scripted stand-in for gsched, for testing the client's side of the conversation without the
 * daemons: a thread that listens on 127.0.0.1 (free port), accepts one connection, performs the
 * handshake (checking the token) and hands every later message to a test-provided handler. It
 * speaks the real wire format (gs_msg_encode / gs_frame_reader / gs_msg_decode). */
#ifndef GS_TESTS_FAKE_SCHED_H
#define GS_TESTS_FAKE_SCHED_H

#include "proto/handshake.h"
#include "proto/msg.h"

#include <pthread.h>
#include <stdint.h>

#define FAKE_MAX_OUTPUTS 4096

typedef struct fake fake_t;
/** Handle one message after the handshake. Return 0 to go on, 1 to close the connection. */
typedef int (*fake_handler_t)(fake_t *f, const gs_msg_t *m);

struct fake {
    int lfd;
    int cfd;
    int port;
    char address[64];
    pthread_t thread;
    const char *token;            /* expected token ("" = none) */
    int refuse_version;           /* answer WELCOME with a wrong version */
    int silent;                   /* accept but never answer */
    int locate_error;             /* answer LOCATE_REQ with an error DATA, not with LOCATIONS
                                     naming no worker (both: the gather is relayed) */
    int close_first;              /* close this many connections at once, without a word */
    int busy_first;               /* then answer this many HELLOs with ERROR GS_ERR_BUSY */
    int hangup_first;             /* then this many with CHALLENGE, and close */
    int accepted;                 /* connections accepted so far (under mu) */
    gs_hs_sched_t hs;             /* the fake's thread: the handshake in progress */
    fake_handler_t handler;
    void *arg;
    /* recorded under mu */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int counts[GS_MSG_TYPE_MAX];  /* messages received per type */
    uint64_t last_graph_cmd;      /* graph id of the last CANCEL / RELEASE_GRAPH */
    uint64_t next_graph_id;
    /* the last GRAPH_SUBMIT */
    uint64_t sub_client_ref;
    uint32_t sub_flags;
    uint64_t sub_ntasks, sub_nexternals, sub_noutputs;
    uint64_t sub_outputs[FAKE_MAX_OUTPUTS];
    uint64_t sub_graph_id;
    int closed;
};

/** Start listening (and the thread). Returns 0 on success. */
int fake_start(fake_t *f, fake_handler_t handler, void *arg);
/** Close everything and join the thread. */
void fake_stop(fake_t *f);
/** Send a message to the client (from the handler). 0 on success. */
int fake_send(fake_t *f, const gs_msg_t *m);
/** Wait (up to timeout_s) until at least @a n messages of @a type have arrived. 1 when so. */
int fake_wait_count(fake_t *f, uint32_t type, int n, double timeout_s);

/* Handler building blocks. */
/** Answer GRAPH_SUBMIT with ACCEPTED (graph id next_graph_id++), PROGRESS and GRAPH_DONE(OK),
 *  recording the submission in f. */
int fake_accept_and_finish(fake_t *f, const gs_msg_t *m);
/** Send one DATA for (graph, task) holding @a n doubles. */
int fake_send_data(fake_t *f, uint64_t req_id, uint64_t graph, uint64_t task, int32_t status,
                   const double *v, size_t n);

#endif
