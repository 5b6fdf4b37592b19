/* The registration handshake of protocol version 2, both sides (common/auth.h says why):
 *
 *   peer -> gsched   HELLO(version, role, name, Np)        gs_hs_peer_hello
 *   gsched -> peer   CHALLENGE(Ns, gsched's proof)          gs_hs_sched_challenge
 *   peer -> gsched   AUTH(the peer's proof)                 gs_hs_peer_answer (checks gsched's)
 *   gsched -> peer   WELCOME(id, heartbeat, masked key)     gs_hs_sched_check, gs_hs_sched_key
 *                                                           gs_hs_peer_key (unmasks it)
 *
 * The peer checks gsched's proof before it answers, so a fake gsched that does not know the token
 * learns nothing (not even a proof to relay: gsched's nonce is in every proof). The structures hold
 * no pointers to free; messages filled by these functions borrow bytes from the structure (and
 * from @a proof buffers) and are valid while those are. */
#ifndef GS_PROTO_HANDSHAKE_H
#define GS_PROTO_HANDSHAKE_H

#include "common/auth.h"
#include "proto/msg.h"

typedef struct gs_hs_peer {
    const char *token;                         /* borrowed; "" for none */
    const char *name;                          /* borrowed */
    uint32_t role;                             /* gs_peer_role_t */
    uint8_t nonce[GS_AUTH_NONCE_BYTES];        /* ours (Np) */
    uint8_t nonce_sched[GS_AUTH_NONCE_BYTES];  /* gsched's (Ns), once challenged */
    uint8_t proof[GS_AUTH_MAC_BYTES];          /* our answer (AUTH borrows it) */
    int challenged;
} gs_hs_peer_t;

typedef struct gs_hs_sched {
    uint32_t role;
    int challenged;                            /* CHALLENGE sent; AUTH expected */
    uint8_t nonce_peer[GS_AUTH_NONCE_BYTES];
    uint8_t nonce[GS_AUTH_NONCE_BYTES];        /* ours (Ns) */
    uint8_t proof[GS_AUTH_MAC_BYTES];          /* ours (CHALLENGE borrows it) */
    uint8_t expect[GS_AUTH_MAC_BYTES];         /* the peer's proof we expect */
} gs_hs_sched_t;

/** Peer: start a handshake as @a role named @a name with @a token (NULL = ""; both borrowed for
 *  the handshake's life) and fill @a hello (borrows from @a hs and @a name). Errors: those of
 *  gs_auth_random. */
gs_status_t gs_hs_peer_hello(gs_hs_peer_t *hs, const char *token, uint32_t role, const char *name,
                             gs_msg_t *hello);

/** Peer: check CHALLENGE @a ch (gsched's proof) and fill @a auth (borrows from @a hs).
 *  GS_ERR_PROTO (not a CHALLENGE, a second one, wrong sizes), GS_ERR_AUTH (gsched does not know
 *  our token: wrong token on either side, or not the real gsched); messages set. */
gs_status_t gs_hs_peer_answer(gs_hs_peer_t *hs, const gs_msg_t *ch, gs_msg_t *auth);

/** Peer (worker): unmask WELCOME's data-plane key into @a key. GS_ERR_PROTO (not challenged,
 *  or a key of the wrong size; message set). */
gs_status_t gs_hs_peer_key(const gs_hs_peer_t *hs, const gs_msg_welcome_t *welcome,
                           uint8_t key[GS_AUTH_KEY_BYTES]);

/** gsched: HELLO @a hello (version already checked) with our @a token ("" for none): draw our
 *  nonce, compute both proofs and fill @a challenge (borrows from @a hs). GS_ERR_PROTO (a nonce
 *  of the wrong size), errors of gs_auth_random / gs_auth_hmac; messages set. */
gs_status_t gs_hs_sched_challenge(gs_hs_sched_t *hs, const char *token, const gs_msg_hello_t *hello,
                                  gs_msg_t *challenge);

/** gsched: 1 when AUTH @a auth carries the expected proof (constant-time comparison), else 0. */
int gs_hs_sched_check(const gs_hs_sched_t *hs, const gs_msg_auth_t *auth);

/** gsched: mask data-plane @a key for the peer of @a hs into @a masked. Errors of gs_auth_hmac. */
gs_status_t gs_hs_sched_key(const gs_hs_sched_t *hs, const char *token, const uint8_t key[GS_AUTH_KEY_BYTES],
                            uint8_t masked[GS_AUTH_KEY_BYTES]);

#endif
