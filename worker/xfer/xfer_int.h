/* Internals of worker/xfer/ (peer transfers): UCX, CUDA IPC, pipelined staging, bandwidth.
 * Only files under worker/xfer/ include this header (and with it ucp/api/ucp.h). The rest of
 * the worker sees worker/xfer/xfer.h. */
#ifndef GS_WORKER_XFER_INT_H
#define GS_WORKER_XFER_INT_H

#include "worker/worker_int.h"
#include "worker/xfer/xfer.h"

#include <ucp/api/ucp.h>

#define GS_W_UCX_CUDA_MIN (1u << 20)  /* device chunks this big go to UCX unstaged */
#define GS_W_PIPE_POOL 8           /* slice buffers kept for reuse */
#define GS_WIPC_KEY_BYTES 64

/* UCX active-message ids (the rest: pipe.c, ipc.c below). */
#define GS_AM_FETCH_REQ 17
#define GS_AM_DATA 18
/* With transfer_checksum, the AM header of DATA is the encoded message followed by a trailer:
 * the checksum (8 bytes) and 1 when it is present (0 for bytes UCX moves between device
 * buffers, which this worker never sees). */
#define GS__CSUM_TRAILER 9
/* With the payload MAC (instead of the checksum): counter (u64 LE), GMAC tag, and 1 when the
 * bytes are MACed (0: device bytes this worker never sees, or an error reply). */
#define GS__PMAC_TRAILER (8u + GS_AUTH_PMAC_TAG_BYTES + 1u)

/* seal.c: the trailer every active message carries (ids, counter, HMAC) and the replay window */
#define GS__SEAL_TRAILER (24u + GS_AUTH_MAC_BYTES)
#define GS__SEAL_WINDOW 1024u

typedef struct gs_wfetch gs_wfetch_t;
typedef struct gs_wpeer gs_wpeer_t;

/* Transfers (fetch from a peer). */
typedef enum gs_wfetch_state {
    GS_WFETCH_REQUESTED = 0,  /* FETCH_REQ sent (or being sent), waiting for DATA */
    GS_WFETCH_RECEIVING = 1,  /* rendezvous receive in progress */
    GS_WFETCH_STAGING = 2     /* host staging buffer -> backend memory copy in flight */
} gs_wfetch_state_t;

struct gs_wfetch {
    uint64_t req_id;
    gs_worker_t *w;
    gs_wpeer_t *peer;
    gs_wlink_t peer_link;     /* peer->fetches */
    gs_wchunk_t *chunk;       /* destination (PENDING), one ref held */
    void *host;               /* where the bytes land: chunk->ptr, or a staging buffer */
    uint8_t state;
    uint8_t host_owned;       /* host is a staging buffer to gs_free */
    uint8_t dead;             /* failed/timed out; freed when its UCX or copy op returns */
    uint8_t damaged;          /* failed because the bytes arrived altered (MAC / checksum) */
    uint64_t t_start, deadline;
    void *recv_req;           /* outstanding ucp receive request */
    int stream;               /* staging stream */
    uint8_t path;             /* gs_wpath_t the bytes came over */
    uint8_t dev_recv;         /* UCX receives straight into device memory (host = chunk) */
    uint8_t csum_on;          /* the DATA carried a checksum of the bytes (csum) */
    uint8_t parts;            /* STAGING: copies (notes) still to arrive; 0 or 1 = one */
    uint8_t pipe_rx;          /* arriving as slices (pipe.c) */
    uint8_t pipe_guard;       /* pipe_rx: the "not every byte yet" part is held */
    uint64_t rx_bytes;        /* pipe_rx: bytes arrived */
    gs_status_t part_status;  /* first failure among the parts */
    uint64_t csum;
    uint8_t mac_on;           /* the DATA carried a payload MAC (mac_counter, mac_tag) */
    uint64_t mac_counter;
    uint8_t mac_tag[GS_AUTH_PMAC_TAG_BYTES];
    uint64_t ipc_lease;       /* CUDA IPC: the owner's lease to give back (0 none) */
    uint64_t ipc_owner;       /* CUDA IPC: the owner's worker id */
};

/* How a fetched chunk travelled. */
typedef enum gs_wpath {
    GS_WPATH_UCX = 0,         /* UCX active message (host memory, or host-staged) */
    GS_WPATH_CUDA_IPC = 1     /* peer copy out of the owner's exported device arena */
} gs_wpath_t;

/* One UCX endpoint to a peer; outlives the peer while its close completes. */
typedef struct gs_wep {
    gs_worker_t *w;
    uint64_t peer_id;
    ucp_ep_h ep;
    gs_wlink_t link;          /* w->closing while a close is in flight */
} gs_wep_t;

struct gs_wpeer {
    uint64_t id;
    char *name;
    uint8_t *addr;
    size_t addr_len;
    gs_wep_t *epc;            /* created lazily */
    int failed;               /* epc reported an error; closed and recreated on next use */
    ucs_status_t fail_status;
    gs_wlink_t fetches;       /* gs_wfetch_t waiting on this peer */
    uint8_t ipc_off;          /* CUDA IPC with this peer failed once: plain fetches only */
    uint8_t logged_path[2];   /* first transfer over each gs_wpath_t logged */
    uint64_t tx_counter;      /* seal.c: last counter sealed to this peer */
    uint64_t rx_top;          /* seal.c: highest counter accepted from it */
    uint64_t rx_seen[GS__SEAL_WINDOW / 64];   /* bit i: counter rx_top - i accepted */
};

/* A deferred piece of UCX work, run right after ucp_worker_progress() returns. */
typedef enum gs_wdefer_kind {
    GS_WDEFER_SERVE = 0,      /* answer a FETCH_REQ */
    GS_WDEFER_RNDV = 1,       /* start a rendezvous receive */
    GS_WDEFER_IPC_COPY = 2,   /* map a granted IPC region and copy the chunk out of it */
    GS_WDEFER_RNDV_PART = 3   /* receive one slice (pipe.c); ctx is its gs_wpart_rx */
} gs_wdefer_kind_t;

typedef struct gs_wdefer {
    struct gs_wdefer *next;
    int kind;
    uint64_t req_id, graph, task, from_worker;
    ucp_ep_h reply_ep;
    void *desc;
    size_t len;
    gs_wpeer_t *peer;
    gs_status_t status;
    int ipc;                  /* SERVE: the requester asked for a CUDA IPC lease */
    void *ctx;                /* RNDV_PART: the slice being received */
    uint64_t ipc_off, ipc_lease, ipc_nbytes;   /* IPC_COPY: the grant */
    gs_ipc_handle_t ipc_handle;
} gs_wdefer_t;

/* A chunk on its way out (to a peer over UCX, or to gsched as DATA) from staged host memory
 * or directly from host-accessible chunk memory. */
/* A client's connection to the data port (direct.c). */
typedef struct gs_wdconn {
    gs_worker_t *w;
    gs_wlink_t link;          /* w->xfer->dconns */
    gs_conn_t *conn;          /* NULL once closed */
    int refs;                 /* the open connection + each send in flight */
    char shm_name[64];        /* the client's shared memory mapped for it ("" when none) */
    uint8_t *shm_base;
    size_t shm_size;
    int shm_registered;       /* page-locked by the backend (host_register) */
} gs_wdconn_t;

typedef struct gs_wsend {
    gs_worker_t *w;
    gs_wlink_t link;          /* w->sends (outstanding) */
    gs_wchunk_t *chunk;       /* ref held until done (NULL for error replies) */
    void *host;               /* bytes to send */
    uint8_t host_owned;
    uint8_t to_scheduler;     /* DATA over the control connection (gather), or to dconn */
    gs_wdconn_t *dconn;       /* direct gather: the client's connection (ref held), else NULL */
    uint8_t *shm_dst;         /* direct gather into the client's shared memory: where */
    uv_work_t work;           /* host copy into shm_dst on the thread pool */
    int stream;
    uint64_t req_id, graph, task, from_worker;
    gs_status_t status;
    void *ucp_req;
    gs_buf_t header;          /* encoded header (must live until UCX completes) */
    uint8_t is_request;       /* a FETCH_REQ (req_id names the fetch) */
    uint8_t payload_cuda;     /* host is device memory: UCX with CUDA memory support */
    struct gs_wpipe *pipe;    /* a slice of a pipelined send (pipe.c), else NULL */
    uint32_t part;
    int slot;
    size_t part_len;
} gs_wsend_t;

/* The transfer state of one worker (w->xfer). */
struct gs_xfer {
    /* configuration */
    int ucx_shm;              /* endpoints without peer-failure handling (shm transports) */
    int no_ipc;               /* CUDA IPC disabled by configuration */
    int transfer_checksum;    /* see gs_worker_params_t */
    size_t pipe_slice;        /* pipelined staging: slice bytes (0: off) */
    void *pipe_pool[GS_W_PIPE_POOL];   /* free slice buffers (pinned where the backend can) */
    int pipe_npool;
    uint64_t pipe_min;        /* chunks at least this big go in slices */
    int64_t test_corrupt;     /* test_corrupt_transfers: -1 every send, N > 0 the next N */
    int payload_mac;          /* payload MACs on (resolved from gs_worker_params_t) */
    int payload_mac_device;   /* device chunks staged for UCX so that they are MACed */
    gs_auth_pmac_t *pmac;     /* keyed with the data-plane key (NULL until WELCOME) */
    uint64_t pmac_counter;    /* last counter used in an IV of this worker */
    int ucx_cuda;             /* streams mode and UCX reports CUDA memory support */

    /* UCX */
    ucp_context_h ucp_ctx;
    ucp_worker_h ucp_worker;
    ucp_address_t *ucp_addr;
    size_t ucp_addr_len;
    int ucp_efd;
    uv_poll_t ucp_poll;
    int ucp_poll_open;
    gs_u64map_t peers;                 /* worker id -> gs_wpeer_t * */
    gs_u64map_t fetches;               /* req_id -> gs_wfetch_t * */
    uint64_t next_req_id;
    gs_wdefer_t *defer_head, *defer_tail;
    gs_wlink_t sends;                  /* gs_wsend_t outstanding */
    gs_wlink_t closing;                /* gs_wep_t being closed */
    gs_wlink_t dead_fetches;           /* failed fetches waiting for UCX or a copy */
    int ep_fail_pending;               /* some peer's endpoint failed */
    uint64_t ucp_outstanding;          /* ucp requests not completed */
    int in_progress;                   /* inside ucp_worker_progress */

    /* CUDA IPC (ipc.c) */
    int ipc_on;                        /* this worker lends and borrows device memory */
    unsigned char host_key[GS_WIPC_KEY_BYTES];   /* who counts as "this host" */
    gs_ipc_handle_t ipc_handle;        /* our exported arena */
    void *ipc_base;
    size_t ipc_size;
    gs_u64map_t ipc_leases;            /* lease id -> gs_wlease_t * (chunks lent out) */
    uint64_t next_lease;
    struct gs_wipc_map *ipc_maps;      /* peers' arenas mapped here */

    /* direct gathers (direct.c) */
    int direct_off;                    /* no data port (gs_worker_params_t.no_direct) */
    int direct_open;
    uv_tcp_t direct_tcp;
    gs_conn_refuser_t direct_refuser;  /* connections the data port cannot take (memory) */
    char direct_addr[80];              /* "ip:port" ("" when closed) */
    gs_wlink_t dconns;                 /* gs_wdconn_t */
    uint64_t direct_served, direct_refused;

    /* sealed messages (seal.c) */
    gs_auth_mac_t *seal;               /* keyed with the data-plane key (NULL until WELCOME) */
    uint64_t refuse_log_ns;            /* last refusal logged */
    uint64_t refused_unlogged;         /* refusals since */

    /* transfer measurements (bw.c) */
    struct gs_wbw *bw;
};

/* ---- ucx.c: context, endpoints, peers, deferred work, progress ---- */
void gs__wdefer_push(gs_worker_t *w, gs_wdefer_t *d);   /* run after ucp progress returns */
/* The endpoint to peer @a p, created (or recreated after a failure) on first use. */
gs_status_t gs__wpeer_ep(gs_worker_t *w, gs_wpeer_t *p, gs_wep_t **epc_p);
/* Endpoint to worker @a id (a known peer), or NULL. */
ucp_ep_h gs__wpeer_ep_by_id(gs_worker_t *w, uint64_t id);
/* 64-bit checksum of transferred bytes. */
uint64_t gs__wchecksum(const void *data, size_t len);

/* ---- direct.c: the data port ---- */
void gs__wdconn_unref(gs_worker_t *w, gs_wdconn_t *dc);
/* gs__xfer_cleanup, after every send is freed: free what is left of the client connections. */
void gs__xfer_direct_cleanup(gs_worker_t *w);
/* Answer a direct request with @a status and no bytes (dropped when the connection closed). */
void gs__wdirect_reply(gs_worker_t *w, gs_wdconn_t *dc, uint64_t req_id, uint64_t graph, uint64_t task,
                       gs_status_t status);
/* serve.c: serve (graph, task) for a direct request on @a dc: as DATA bytes, or into @a shm_dst
 * (the client's shared memory, at least the chunk's size) with an empty DATA when done. */
void gs__xfer_gather_to(gs_worker_t *w, gs_wdconn_t *dc, uint8_t *shm_dst, uint64_t req_id, uint64_t graph,
                        uint64_t task);
/* ---- seal.c: payload MACs ---- */
/* Tag @a len bytes at @a data sent in answer to (req_id, graph, task) at offset @a off of a
 * chunk of @a total bytes: fills *counter_p and @a tag. GS_ERR_AUTH before WELCOME. */
/* Tests: whether the send being prepared is to go out altered (test_corrupt_transfers; counts
 * the remaining ones down). */
static inline int gs__wxfer_corrupt_next(struct gs_xfer *x)
{
    if (x->test_corrupt < 0) return 1;
    if (x->test_corrupt == 0) return 0;
    x->test_corrupt--;
    return 1;
}

gs_status_t gs__wpmac_tag(gs_worker_t *w, const uint64_t bind[5], const void *data, size_t len,
                          uint64_t *counter_p, uint8_t *tag);
/* 1 when @a tag is right for those bytes sent by worker @a sender with @a counter, else 0. */
int gs__wpmac_check(gs_worker_t *w, uint64_t sender, const uint64_t bind[5], const void *data, size_t len,
                    uint64_t counter, const uint8_t *tag);

/* ---- seal.c: sealed active messages ---- */
/* Append the trailer to s->header (the encoded header after the frame header) for the message
 * @a am_id to peer s->from_worker. GS_ERR_AUTH (no key yet), GS_ERR_WORKER_LOST (not a known
 * peer), GS_ERR_NO_MEMORY, OpenSSL errors. */
gs_status_t gs__wseal(gs_worker_t *w, unsigned am_id, gs_wsend_t *s);
/* Check the trailer of a received header of *len bytes: 1 with *len shortened to the header
 * before it and *sender_p the authenticated sender; 0 when refused (counted and logged). */
int gs__wseal_open(gs_worker_t *w, unsigned am_id, const void *header, size_t *len, uint64_t *sender_p);
/* Count and log (rate-limited) a sealed message refused for what it says (@a what). */
void gs__wseal_mismatch(gs_worker_t *w, unsigned am_id, uint64_t sender, const char *what);

/* ---- fetch.c: the requester side ---- */
void gs__wfetch_free(gs_worker_t *w, gs_wfetch_t *f);
void gs__wfetch_detach(gs_worker_t *w, gs_wfetch_t *f);    /* out of the fetch table */
void gs__wfetch_received(gs_worker_t *w, gs_wfetch_t *f);  /* the bytes are in f->host */
void gs__wfetch_staged(gs_worker_t *w, gs_wfetch_t *f, gs_status_t status);   /* a copy-in note */
void gs__wfetch_fail(gs_worker_t *w, gs_wfetch_t *f, gs_status_t status, const char *fmt, ...)
    GS_PRINTF(4, 5);
/* (Re)send the request of fetch @a f to its peer, asking for a CUDA IPC lease if @a ipc. */
gs_status_t gs__wfetch_post_req(gs_worker_t *w, gs_wfetch_t *f, int ipc);
/* Copy @a len host bytes at @a src into fetch @a f's chunk at byte @a off on stream @a sp,
 * followed by a FETCH_STAGED note for @a f (f->parts counts it; gs__wnote_arm). On failure
 * nothing of it is left running. */
gs_status_t gs__wfetch_copy_in(gs_worker_t *w, gs_wfetch_t *f, int sp, size_t off,
                               const void *src, size_t len);
ucs_status_t gs__wam_data(void *arg, const void *header, size_t header_len, void *data,
                          size_t len, const ucp_am_recv_param_t *param);
void gs__wrecv_cb(void *req, ucs_status_t st, size_t len, void *arg);   /* rendezvous */

/* ---- serve.c: the owner side, and sends ---- */
gs_wsend_t *gs__wsend_new(gs_worker_t *w);
void gs__wsend_free(gs_worker_t *w, gs_wsend_t *s);
void gs__wsend_done(gs_worker_t *w, gs_wsend_t *s, ucs_status_t st);
void gs__wsend_staged(gs_worker_t *w, gs_wsend_t *s, gs_status_t status);    /* a staging note */
/* Post an AM for @a s (header in s->header after the frame header). UCS_INPROGRESS: done
 * follows from UCX; otherwise the caller finishes @a s. */
ucs_status_t gs__wsend_post(gs_worker_t *w, gs_wsend_t *s, ucp_ep_h ep, unsigned am_id,
                            const void *payload, size_t len, unsigned flags);
/* Answer a fetch with DATA as s describes (s->status, s->host); takes @a s. */
void gs__wserve_answer(gs_worker_t *w, gs_wsend_t *s);
void gs__wserve(gs_worker_t *w, gs_wdefer_t *d);           /* deferred SERVE */
/* netdev.c: limits UCX's network devices (NET_DEVICES in @a cfg) to @a interface (gworker
 * --interface; NULL: the one routing to gsched) plus this host's RDMA ports, or to the loopback
 * interface alone; UCX_NET_DEVICES in the environment wins. Returns 0, or -1 with the error set
 * (GS_ERR_INVALID_PARAM) when @a interface does not exist. */
int gs__wucx_net_devices(gs_worker_t *w, const char *interface, ucp_config_t *cfg);

ucs_status_t gs__wam_fetch_req(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param);
ucs_status_t gs__wam_ipc_req(void *arg, const void *header, size_t header_len, void *data,
                             size_t len, const ucp_am_recv_param_t *param);

/* ---- pipe.c (pipelined staging over UCX) ---- */
#define GS_AM_DATA_PART 22
typedef struct gs_wpipe gs_wpipe_t;
/* Owner: answer s (chunk held, streams mode) in slices; 0 when the chunk is too small or
 * pipelining is off (the caller stages the whole chunk). */
int gs__wpipe_serve(gs_worker_t *w, gs_wsend_t *s);
void gs__wpipe_staged(gs_worker_t *w, gs_wsend_t *c, gs_status_t status);   /* slice on host */
void gs__wpipe_sent(gs_worker_t *w, gs_wsend_t *c, ucs_status_t st);        /* slice sent */
ucs_status_t gs__wam_data_part(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param);
void gs__wpipe_recv(gs_worker_t *w, gs_wdefer_t *d);                        /* RNDV_PART */
void gs__wpipe_cleanup(gs_worker_t *w);                                     /* the pool */

/* ---- ipc.c (CUDA IPC between workers of one host) ---- */
#define GS_AM_IPC_REQ 19       /* FETCH_REQ header + our host key as payload */
#define GS_AM_IPC_GRANT 20     /* owner -> requester: raw grant (see ipc.c) */
#define GS_AM_IPC_RELEASE 21   /* requester -> owner: the lease is over */
/* Export our arena when the backend can (streams mode, not --no-ipc). Never fails the worker:
 * without IPC every transfer goes through UCX. */
void gs__wipc_init(gs_worker_t *w);
/* Whether a fetch from @a p should ask for an IPC lease. */
int gs__wipc_want(gs_worker_t *w, const gs_wpeer_t *p);
/* Whether the payload of an IPC request names this host. */
int gs__wipc_same_host(gs_worker_t *w, const void *key, size_t len);
/* Owner: lend ready chunk @a c to d->from_worker; 0 when it cannot (answer with plain DATA). */
int gs__wipc_serve(gs_worker_t *w, gs_wdefer_t *d, gs_wchunk_t *c, ucp_ep_h ep);
ucs_status_t gs__wam_ipc_grant(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param);
ucs_status_t gs__wam_ipc_release(void *arg, const void *header, size_t header_len, void *data,
                                 size_t len, const ucp_am_recv_param_t *param);
void gs__wipc_copy(gs_worker_t *w, gs_wdefer_t *d);        /* deferred IPC_COPY */
void gs__wipc_give_back(gs_worker_t *w, gs_wfetch_t *f);   /* release f's lease, if any */
void gs__wipc_tick(gs_worker_t *w);                        /* expire forgotten leases */
void gs__wipc_peer_gone(gs_worker_t *w, uint64_t peer);    /* drop its leases */
void gs__wipc_cleanup(gs_worker_t *w);
/* Log the first transfer from @a p over each path (bandwidth). */
void gs__wfetch_log_path(gs_worker_t *w, gs_wfetch_t *f);

/* ---- bw.c: peer transfer measurements, reported to gsched with heartbeats ---- */
/* Count one completed transfer of @a nbytes from worker @a peer taking @a ns over @a path. */
void gs__wbw_record(gs_worker_t *w, uint64_t peer, uint64_t nbytes, uint64_t ns, const char *path);
void gs__wbw_fetch_done(gs_worker_t *w, const gs_wfetch_t *f);   /* before the fetch detaches */
void gs__wbw_cleanup(gs_worker_t *w);

#endif
