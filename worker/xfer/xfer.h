/* worker/xfer/: peer transfers of gworker, behind this one header.
 *
 * What xfer owns: the UCX context, worker, listener address and event fd (polled by a uv_poll),
 * one endpoint per peer (gsched's PEERS list), every fetch (this worker pulling a chunk from a
 * peer) and every send (a chunk going to a peer, or to gsched as DATA for a gather), the
 * host-staged pipelined slices (pipe.c), CUDA IPC leases and mappings between workers of one
 * host (ipc.c), the data port where clients fetch their results directly (direct.c), and the
 * per-peer bandwidth measurements reported with heartbeats (bw.c). Its
 * state (struct gs_xfer, w->xfer) is opaque to the rest of the worker; UCX types exist only
 * under worker/xfer/ (xfer_int.h).
 *
 * One fetch: exec.c admits a task whose input lives on worker P and calls gs__xfer_fetch(),
 * which creates a PENDING chunk (store: gs__wchunk_new + gs__wstore_insert as a fetched copy)
 * and posts FETCH_REQ to P's endpoint, sealed with the cluster's data-plane key (seal.c; P serves
 * nothing that is not sealed by a live peer). P's serve path (serve.c) answers with DATA (eager,
 * rendezvous, slices, or an IPC grant). The bytes land in the chunk directly, or in a host
 * buffer that is copied in on a backend stream; that copy's completion is a note (GS_WNOTE_
 * FETCH_STAGED) registered with gs__wnote_arm() and returned through the worker's completion
 * queue (exec.c drains it and hands it back with gs__xfer_note()). When the chunk is READY,
 * xfer calls gs__wexec_input_ready(), and exec.c runs the waiting tasks.
 *
 * Who frees what: gs__xfer_fetch returns the chunk with one reference for the caller; the fetch
 * holds another until it completes or fails (a failed fetch fails the chunk's waiting tasks and
 * detaches it from the store). A send holds a chunk reference until UCX (or the scheduler
 * connection) is done with its bytes; staging buffers belong to the fetch or send that made
 * them. gs__xfer_cleanup frees everything xfer allocated, w->xfer included.
 *
 * What xfer uses of the worker (worker_int.h): the store (gs__wgraph_get, gs__wchunk_new/ref/
 * unref, gs__wstore_find/insert/detach), the completion queue (gs__wnote_arm), the executor's
 * stream choice and input readiness (gs__wexec_pick_stream, gs__wexec_input_ready,
 * gs__wexec_input_failed, gs__wexec_pump), the scheduler connection (gs__wsend_msg, gs__wdata_to_scheduler) and the
 * loop handle count (gs__worker_handle_closed). Everything runs on the loop thread. */
#ifndef GS_WORKER_XFER_H
#define GS_WORKER_XFER_H

#include "proto/msg.h"

#include <stddef.h>
#include <stdint.h>

struct gs_worker;
struct gs_wchunk;
struct gs_wnote;
struct gs_worker_params;

typedef struct gs_xfer gs_xfer_t;

/* Create w->xfer from @a params and bring UCX up (listener address, event fd in the loop).
 * On failure w->xfer may be partly set up: gs__xfer_shutdown + gs__xfer_cleanup undo it. */
gs_status_t gs__xfer_init(struct gs_worker *w, const struct gs_worker_params *params);
/* Stop: fail every fetch, close endpoints, cancel sends, close the event-fd handle. */
void gs__xfer_shutdown(struct gs_worker *w);
/* Free everything (safe on a partly initialised or NULL w->xfer). */
void gs__xfer_cleanup(struct gs_worker *w);

/* The cluster's data-plane key from WELCOME (GS_AUTH_KEY_BYTES, copied): every request this
 * worker sends a peer is sealed with it and every request it serves must be (seal.c).
 * GS_ERR_NO_MEMORY / GS_ERR_IO (OpenSSL). */
gs_status_t gs__xfer_set_key(struct gs_worker *w, const uint8_t *key);
/* Peers added/removed: gsched's PEERS message (the full list). */
void gs__xfer_peers(struct gs_worker *w, const gs_msg_peers_t *m);
/* Start fetching (graph, task) from peer @a from into a new PENDING chunk (returned with one
 * ref for the caller, also in the store as a fetched copy); gs__wexec_input_ready follows. */
gs_status_t gs__xfer_fetch(struct gs_worker *w, uint64_t graph, uint64_t task, uint64_t from,
                           uint64_t nbytes, struct gs_wchunk **c_p);
/* Serve a chunk to gsched as DATA for GATHER_REQ @a req_id (staging when needed). */
void gs__xfer_gather(struct gs_worker *w, uint64_t req_id, uint64_t graph, uint64_t task);
/* Open the data port for direct gathers (direct.c) on the local address this host reaches
 * gsched from, port chosen by the system; nothing when already open or disabled.
 * GS_ERR_IO (message set): no port, gathers are relayed. */
gs_status_t gs__xfer_direct_start(struct gs_worker *w);
/* "ip:port" of the data port, "" when none. */
const char *gs__xfer_direct_addr(const struct gs_worker *w);
/* Close the data port and every client connection to it (stop). */
void gs__xfer_direct_stop(struct gs_worker *w);
/* A FETCH_STAGED / SEND_STAGED note from the completion queue. */
void gs__xfer_note(struct gs_worker *w, struct gs_wnote *n);

void gs__xfer_progress(struct gs_worker *w);   /* progress UCX until idle, then arm it */
void gs__xfer_tick(struct gs_worker *w);       /* fetch timeouts, IPC lease expiry */
void gs__xfer_report(struct gs_worker *w);     /* BANDWIDTH with what was measured */

/* Whether any fetch or send is outstanding. */
int gs__xfer_busy(const struct gs_worker *w);
/* Our UCX worker address (for WORKER_REGISTER); valid until gs__xfer_cleanup. */
void gs__xfer_address(const struct gs_worker *w, const void **addr_p, size_t *len_p);
uint32_t gs__xfer_npeers(const struct gs_worker *w);

#endif
