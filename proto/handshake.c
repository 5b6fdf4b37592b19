/* The registration handshake (handshake.h). */
#include "proto/handshake.h"

#include "common/error.h"

#include <string.h>

gs_status_t gs_hs_peer_hello(gs_hs_peer_t *hs, const char *token, uint32_t role, const char *name,
                             gs_msg_t *hello)
{
    gs_status_t st;
    memset(hs, 0, sizeof *hs);
    hs->token = token != NULL ? token : "";
    hs->name = name != NULL ? name : "";
    hs->role = role;
    if ((st = gs_auth_random(hs->nonce, sizeof hs->nonce)) != GS_OK) return st;
    memset(hello, 0, sizeof *hello);
    hello->type = GS_MSG_HELLO;
    hello->u.hello.version = GS_PROTO_VERSION;
    hello->u.hello.role = role;
    hello->u.hello.name = (gs_str_t){(const uint8_t *)hs->name, strlen(hs->name)};
    hello->u.hello.nonce = (gs_bytes_t){hs->nonce, sizeof hs->nonce};
    return GS_OK;
}

gs_status_t gs_hs_peer_answer(gs_hs_peer_t *hs, const gs_msg_t *ch, gs_msg_t *auth)
{
    uint8_t want[GS_AUTH_MAC_BYTES];
    const gs_msg_challenge_t *c = &ch->u.challenge;
    gs_status_t st;

    if (ch->type != GS_MSG_CHALLENGE || hs->challenged)
        return gs_error_set(GS_ERR_PROTO, "gsched answered hello with %s, not one challenge",
                            gs_msg_type_name(ch->type));
    if (c->nonce.len != GS_AUTH_NONCE_BYTES || c->proof.len != GS_AUTH_MAC_BYTES)
        return gs_error_set(GS_ERR_PROTO, "malformed challenge (nonce of %zu bytes, proof of %zu; want %u and %u)",
                            c->nonce.len, c->proof.len, GS_AUTH_NONCE_BYTES, GS_AUTH_MAC_BYTES);
    memcpy(hs->nonce_sched, c->nonce.data, GS_AUTH_NONCE_BYTES);
    st = gs_auth_handshake_mac(hs->token, GS_AUTH_BY_SCHED, GS_PROTO_VERSION, hs->role, hs->name, strlen(hs->name),
                               hs->nonce, hs->nonce_sched, want);
    if (st != GS_OK) return st;
    if (!gs_auth_equal(want, c->proof.data, GS_AUTH_MAC_BYTES))
        return gs_error_set(GS_ERR_AUTH, "wrong cluster token: gsched could not prove that it knows ours (the "
                                         "tokens differ, or this is not the real gsched)");
    st = gs_auth_handshake_mac(hs->token, GS_AUTH_BY_PEER, GS_PROTO_VERSION, hs->role, hs->name, strlen(hs->name),
                               hs->nonce, hs->nonce_sched, hs->proof);
    if (st != GS_OK) return st;
    hs->challenged = 1;
    memset(auth, 0, sizeof *auth);
    auth->type = GS_MSG_AUTH;
    auth->u.auth.proof = (gs_bytes_t){hs->proof, sizeof hs->proof};
    return GS_OK;
}

gs_status_t gs_hs_peer_key(const gs_hs_peer_t *hs, const gs_msg_welcome_t *welcome, uint8_t key[GS_AUTH_KEY_BYTES])
{
    if (!hs->challenged) return gs_error_set(GS_ERR_PROTO, "welcome before the challenge");
    if (welcome->data_key.len != GS_AUTH_KEY_BYTES)
        return gs_error_set(GS_ERR_PROTO, "welcome carries a data-plane key of %zu bytes (want %u)",
                            welcome->data_key.len, GS_AUTH_KEY_BYTES);
    return gs_auth_key_mask(hs->token, hs->nonce, hs->nonce_sched, welcome->data_key.data, key);
}

gs_status_t gs_hs_sched_challenge(gs_hs_sched_t *hs, const char *token, const gs_msg_hello_t *hello,
                                  gs_msg_t *challenge)
{
    gs_status_t st;
    if (hello->nonce.len != GS_AUTH_NONCE_BYTES)
        return gs_error_set(GS_ERR_PROTO, "hello carries a nonce of %zu bytes (want %u)", hello->nonce.len,
                            GS_AUTH_NONCE_BYTES);
    memset(hs, 0, sizeof *hs);
    hs->role = hello->role;
    memcpy(hs->nonce_peer, hello->nonce.data, GS_AUTH_NONCE_BYTES);
    if ((st = gs_auth_random(hs->nonce, sizeof hs->nonce)) != GS_OK) return st;
    st = gs_auth_handshake_mac(token, GS_AUTH_BY_SCHED, hello->version, hello->role, hello->name.data,
                               hello->name.len, hs->nonce_peer, hs->nonce, hs->proof);
    if (st == GS_OK)
        st = gs_auth_handshake_mac(token, GS_AUTH_BY_PEER, hello->version, hello->role, hello->name.data,
                                   hello->name.len, hs->nonce_peer, hs->nonce, hs->expect);
    if (st != GS_OK) return st;
    hs->challenged = 1;
    memset(challenge, 0, sizeof *challenge);
    challenge->type = GS_MSG_CHALLENGE;
    challenge->u.challenge.nonce = (gs_bytes_t){hs->nonce, sizeof hs->nonce};
    challenge->u.challenge.proof = (gs_bytes_t){hs->proof, sizeof hs->proof};
    return GS_OK;
}

int gs_hs_sched_check(const gs_hs_sched_t *hs, const gs_msg_auth_t *auth)
{
    return hs->challenged && auth->proof.len == GS_AUTH_MAC_BYTES &&
           gs_auth_equal(hs->expect, auth->proof.data, GS_AUTH_MAC_BYTES);
}

gs_status_t gs_hs_sched_key(const gs_hs_sched_t *hs, const char *token, const uint8_t key[GS_AUTH_KEY_BYTES],
                            uint8_t masked[GS_AUTH_KEY_BYTES])
{
    return gs_auth_key_mask(token, hs->nonce_peer, hs->nonce, key, masked);
}
