/**
 * TLS for the control connections (proto/conn.c): OpenSSL SSL objects driven through memory
 * BIOs, so the libuv stream stays the only owner of the socket. Ciphertext received from the
 * socket is fed in with gs_tls_session_feed(), plaintext comes out through a callback; plaintext
 * to send goes in with gs_tls_session_write() and the ciphertext to put on the socket is taken
 * with gs_tls_session_take_output(). Framing and the registration handshake above are unchanged.
 *
 * TLS 1.2 or newer only. The peer's certificate chain is verified against the configured CA
 * file; a client also checks the server's name: the host it connects to (SSL_set1_host), or its
 * IP address when that host is numeric. A server asks for a client certificate, and fails the
 * handshake without one, only when require_client_cert is set.
 *
 * Not thread-safe per object; a context may be shared by the sessions of one loop thread.
 */
#ifndef GS_PROTO_TLS_H
#define GS_PROTO_TLS_H

#include "common/buf.h"
#include "gsched/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_tls_ctx gs_tls_ctx_t;
typedef struct gs_tls_session gs_tls_session_t;

/** Paths of PEM files (only read during gs_tls_ctx_create). */
typedef struct gs_tls_config {
    const char *ca_file;      /* required: CAs that sign the peers' certificates */
    const char *cert_file;    /* server: required; client: optional (mutual TLS) */
    const char *key_file;     /* private key of cert_file (required with it) */
    int require_client_cert;  /* server only: refuse clients without a certificate from ca_file */
} gs_tls_config_t;

/** Create a server (@a is_server 1) or client context from @a cfg. GS_ERR_INVALID_PARAM with a
 *  message naming the file and OpenSSL's reason for a missing/unreadable/mismatched file or a
 *  bad combination; GS_ERR_NO_MEMORY. The caller destroys it with gs_tls_ctx_destroy() after
 *  every session made from it. */
gs_status_t gs_tls_ctx_create(const gs_tls_config_t *cfg, int is_server, gs_tls_ctx_t **ctx_p);
void gs_tls_ctx_destroy(gs_tls_ctx_t *ctx);
/** 1 for a server context that requires client certificates. */
int gs_tls_ctx_requires_client_cert(const gs_tls_ctx_t *ctx);

/** A session for one connection. @a peer_host (client contexts only, may be NULL for servers):
 *  the name or address the client connects to, checked against the server's certificate; only
 *  read during the call. @a peer_name names the peer in log lines (copied). A client session
 *  has its ClientHello ready in the output at once. GS_ERR_NO_MEMORY, GS_ERR_INVALID_PARAM. */
gs_status_t gs_tls_session_create(gs_tls_ctx_t *ctx, const char *peer_host, const char *peer_name,
                                  gs_tls_session_t **session_p);
void gs_tls_session_destroy(gs_tls_session_t *s);

/** Plaintext received: @a len bytes at @a data, valid during the call. Return GS_OK to go on;
 *  any error stops gs_tls_session_feed(), which returns it. */
typedef gs_status_t (*gs_tls_plain_cb)(void *arg, const void *data, size_t len);

/** Feed @a len bytes of ciphertext from the peer. Runs the handshake while it is not done and
 *  hands out every plaintext byte that becomes available through @a cb. Bytes to send back
 *  (handshake, alerts) are then in the output. GS_ERR_AUTH when the handshake fails (the reason,
 *  e.g. "certificate verify failed: unable to get local issuer certificate", is logged as a
 *  warning naming the peer and set as the last error); GS_ERR_PROTO when a record fails later; GS_ERR_CONN_CLOSED when the peer sent close_notify; @a cb's error.
 *  After an error the session is unusable (only destroy it). */
gs_status_t gs_tls_session_feed(gs_tls_session_t *s, const void *data, size_t len, gs_tls_plain_cb cb, void *arg);

/** 1 once the handshake has completed. */
int gs_tls_session_ready(const gs_tls_session_t *s);

/** Encrypt @a len bytes (handshake must be complete). GS_ERR_INVALID_PARAM before that;
 *  GS_ERR_PROTO / GS_ERR_NO_MEMORY on failure. The ciphertext is appended to the output. */
gs_status_t gs_tls_session_write(gs_tls_session_t *s, const void *data, size_t len);

/** Encrypt @a head_len bytes at @a head followed by @a tail_len bytes at @a tail (either may be
 *  0 bytes: with both, only the waiting output is taken) and take all waiting output, those
 *  records included, into *@a out_p (gs_malloc'ed, the caller frees it with gs_free; NULL when
 *  there is none) and *@a len_p. Errors as gs_tls_session_write(); nothing is written to the
 *  outputs then. */
gs_status_t gs_tls_session_seal(gs_tls_session_t *s, const void *head, size_t head_len, const void *tail,
                                size_t tail_len, uint8_t **out_p, size_t *len_p);

/** Queue a close_notify alert in the output (best effort). */
void gs_tls_session_close_notify(gs_tls_session_t *s);

/** Bytes waiting in the output. */
size_t gs_tls_session_pending_output(const gs_tls_session_t *s);

/** Move all waiting output into @a out (appended; the caller owns @a out). GS_ERR_NO_MEMORY. */
gs_status_t gs_tls_session_take_output(gs_tls_session_t *s, gs_buf_t *out);

#ifdef __cplusplus
}
#endif
#endif
