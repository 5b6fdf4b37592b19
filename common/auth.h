/* Authentication primitives shared by gsched, gworker and the client (OpenSSL libcrypto).
 *
 * The registration handshake (protocol version 2, proto/handshake.h drives it): the peer sends
 * HELLO with a fresh nonce Np, gsched answers CHALLENGE with its own fresh nonce Ns and a proof
 * that it knows the cluster token, the peer answers AUTH with its proof, and gsched WELCOMEs it.
 * A proof is HMAC-SHA256(token, label || version || role || name || Np || Ns) (gs_auth_handshake_
 * mac), the label telling gsched's proof from the peer's; the token itself never crosses the wire,
 * and a recorded AUTH is useless on a new connection (gsched's nonce differs). Comparisons run in
 * constant time (gs_auth_equal). An empty token (loopback-only clusters) is a valid HMAC key: the
 * same handshake runs, it only proves nothing.
 *
 * The data-plane key: gsched draws GS_AUTH_KEY_BYTES random bytes at start and gives them to each
 * authenticated worker in WELCOME, masked with HMAC(token, label || Np || Ns) (gs_auth_key_mask),
 * so only a holder of the token can read them. Workers MAC every request they send each other
 * with it (gs_auth_mac_t). */
#ifndef GS_COMMON_AUTH_H
#define GS_COMMON_AUTH_H

#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>

#define GS_AUTH_NONCE_BYTES 32u
#define GS_AUTH_MAC_BYTES 32u
#define GS_AUTH_KEY_BYTES 32u

/** Whose proof gs_auth_handshake_mac() computes (distinct labels: one can never stand for the other). */
typedef enum gs_auth_side {
    GS_AUTH_BY_PEER = 1,    /* the peer's answer (AUTH) */
    GS_AUTH_BY_SCHED = 2    /* gsched's proof (CHALLENGE) */
} gs_auth_side_t;

/** One piece of a message to MAC (only read during the call). */
typedef struct gs_auth_part {
    const void *data;
    size_t len;
} gs_auth_part_t;

/** A keyed HMAC-SHA256 context (opaque). Use from one thread at a time. */
typedef struct gs_auth_mac gs_auth_mac_t;

/** Fill @a buf with @a len bytes from the OpenSSL CSPRNG (RAND_bytes). GS_ERR_IO when it fails
 *  (message set), GS_ERR_INVALID_PARAM for NULL with @a len > 0. */
gs_status_t gs_auth_random(void *buf, size_t len);

/** 1 when the @a len bytes at @a a and @a b are equal, else 0; time independent of the contents
 *  (CRYPTO_memcmp). */
int gs_auth_equal(const void *a, const void *b, size_t len);

/** HMAC-SHA256 with @a key (@a key_len bytes, may be 0) over the concatenation of @a parts into
 *  @a mac. GS_ERR_INVALID_PARAM (NULL arguments), GS_ERR_NO_MEMORY / GS_ERR_IO (OpenSSL failed;
 *  message set). */
gs_status_t gs_auth_hmac(const void *key, size_t key_len, const gs_auth_part_t *parts, size_t nparts,
                         uint8_t mac[GS_AUTH_MAC_BYTES]);

/** The handshake proof of @a side: HMAC-SHA256(token, label(side) || u32le version || u32le role
 *  || u64le name_len || name || nonce_peer || nonce_sched). @a token may be "" (never NULL); the
 *  nonces are GS_AUTH_NONCE_BYTES each. Errors as gs_auth_hmac. */
gs_status_t gs_auth_handshake_mac(const char *token, gs_auth_side_t side, uint32_t version, uint32_t role,
                                  const void *name, size_t name_len, const uint8_t *nonce_peer,
                                  const uint8_t *nonce_sched, uint8_t mac[GS_AUTH_MAC_BYTES]);

/** Mask (or unmask: the operation is its own inverse) the data-plane key @a in into @a out
 *  (GS_AUTH_KEY_BYTES each, may alias) with HMAC-SHA256(token, label || nonce_peer ||
 *  nonce_sched). Errors as gs_auth_hmac. */
gs_status_t gs_auth_key_mask(const char *token, const uint8_t *nonce_peer, const uint8_t *nonce_sched,
                             const uint8_t *in, uint8_t *out);

/** Create a context computing HMAC-SHA256 with the @a key_len bytes at @a key (copied).
 *  GS_ERR_NO_MEMORY / GS_ERR_IO with a message; *mac_p is written only on success. */
gs_status_t gs_auth_mac_create(const void *key, size_t key_len, gs_auth_mac_t **mac_p);
/** Free (NULL is fine). */
void gs_auth_mac_destroy(gs_auth_mac_t *mac);
/** HMAC of the concatenation of @a parts with @a ctx's key into @a out. Errors as gs_auth_hmac. */
gs_status_t gs_auth_mac_compute(gs_auth_mac_t *ctx, const gs_auth_part_t *parts, size_t nparts,
                                uint8_t out[GS_AUTH_MAC_BYTES]);

/** The ticket gsched gives a client to fetch chunk (@a graph, @a task) straight from the worker
 *  holding it (direct gathers, LOCATIONS / CHUNK_REQ): HMAC-SHA256(data-plane key @a key of
 *  GS_AUTH_KEY_BYTES, label || u64le client_id || u64le graph || u64le task). Only gsched and
 *  the workers hold the key, so a client cannot make a ticket for a chunk gsched did not locate
 *  for it. Errors as gs_auth_hmac. */
gs_status_t gs_auth_gather_ticket(const uint8_t *key, uint64_t client_id, uint64_t graph, uint64_t task,
                                  uint8_t ticket[GS_AUTH_MAC_BYTES]);
/** The same ticket from a context keyed with the data-plane key (gs_auth_mac_create). */
gs_status_t gs_auth_gather_ticket_mac(gs_auth_mac_t *ctx, uint64_t client_id, uint64_t graph, uint64_t task,
                                      uint8_t ticket[GS_AUTH_MAC_BYTES]);

/* ---- Payload MACs (common/pmac.c): integrity of chunk bytes on the data plane ----
 * GMAC (AES-256-GCM over authenticated data only, OpenSSL EVP_MAC "GMAC": AES-NI + carry-less
 * multiplication, several GB/s per core; HMAC-SHA256 runs at a fraction of that, see
 * bench/macbench) keyed with a key derived from the data-plane key (HMAC-SHA256(data key,
 * "gsched payload mac v1"), so the two uses never share a key). GMAC needs an IV that is never
 * repeated under one key: callers use sender id (u32) || a per-sender counter (u64) -- gsched's
 * ids are never reused under one data-plane key (the key is drawn anew at every start) and the
 * counter only grows. */
#define GS_AUTH_PMAC_TAG_BYTES 16u
#define GS_AUTH_PMAC_IV_BYTES 12u

/** A payload MAC context (opaque). Use from one thread at a time. */
typedef struct gs_auth_pmac gs_auth_pmac_t;

/** Create a payload MAC context for the data-plane key @a key (GS_AUTH_KEY_BYTES, copied after
 *  derivation). GS_ERR_INVALID_PARAM (NULL), GS_ERR_NO_MEMORY / GS_ERR_IO / GS_ERR_UNSUPPORTED
 *  (this OpenSSL has no GMAC) with a message; *pmac_p is written only on success. */
gs_status_t gs_auth_pmac_create(const uint8_t *key, gs_auth_pmac_t **pmac_p);
/** Free (NULL is fine). */
void gs_auth_pmac_destroy(gs_auth_pmac_t *pmac);
/** The tag of the concatenation of @a parts under @a iv (GS_AUTH_PMAC_IV_BYTES; never reuse one
 *  for different bytes) into @a tag (GS_AUTH_PMAC_TAG_BYTES). Errors as gs_auth_hmac. */
gs_status_t gs_auth_pmac_compute(gs_auth_pmac_t *pmac, const uint8_t *iv, const gs_auth_part_t *parts,
                                 size_t nparts, uint8_t *tag);
/** The IV for sender @a sender's payload number @a counter: u32le sender || u64le counter.
 *  GS_ERR_INVALID_PARAM when @a sender does not fit 32 bits. */
gs_status_t gs_auth_pmac_iv(uint64_t sender, uint64_t counter, uint8_t *iv);

#endif
