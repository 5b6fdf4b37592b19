/* Authentication primitives (auth.h) over OpenSSL 3 libcrypto: EVP_MAC HMAC-SHA256, RAND_bytes,
 * CRYPTO_memcmp. */
#include "common/auth.h"

#include "common/alloc.h"
#include "common/error.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <string.h>

struct gs_auth_mac {
    EVP_MAC *mac;
    EVP_MAC_CTX *ctx;
};

static gs_status_t gs__auth_ossl_error(const char *what)
{
    char text[256];
    unsigned long e = ERR_get_error();
    ERR_error_string_n(e, text, sizeof text);
    ERR_clear_error();
    return gs_error_set(e != 0 && ERR_GET_REASON(e) == ERR_R_MALLOC_FAILURE ? GS_ERR_NO_MEMORY : GS_ERR_IO,
                        "%s failed: %s", what, e != 0 ? text : "unknown OpenSSL error");
}

gs_status_t gs_auth_random(void *buf, size_t len)
{
    if (buf == NULL && len > 0) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_auth_random: NULL buffer");
    if (len > 0 && RAND_bytes(buf, (int)len) != 1) return gs__auth_ossl_error("RAND_bytes");
    return GS_OK;
}

int gs_auth_equal(const void *a, const void *b, size_t len)
{
    return CRYPTO_memcmp(a, b, len) == 0;
}

gs_status_t gs_auth_mac_create(const void *key, size_t key_len, gs_auth_mac_t **mac_p)
{
    static const uint8_t none = 0;
    OSSL_PARAM params[2];
    gs_auth_mac_t *m;

    if ((key == NULL && key_len > 0) || mac_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_auth_mac_create: bad argument");
    m = gs_calloc(1, sizeof *m, "hmac context");
    if (m == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating an HMAC context");
    m->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (m->mac == NULL) goto err_ossl;
    m->ctx = EVP_MAC_CTX_new(m->mac);
    if (m->ctx == NULL) goto err_ossl;
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
    params[1] = OSSL_PARAM_construct_end();
    /* a zero-length key is valid HMAC; OpenSSL wants a non-NULL pointer for it */
    if (EVP_MAC_init(m->ctx, key_len ? key : &none, key_len, params) != 1) goto err_ossl;
    *mac_p = m;
    return GS_OK;
err_ossl: {
    gs_status_t st = gs__auth_ossl_error("creating an HMAC-SHA256 context");
    gs_auth_mac_destroy(m);
    return st;
}
}

void gs_auth_mac_destroy(gs_auth_mac_t *m)
{
    if (m == NULL) return;
    EVP_MAC_CTX_free(m->ctx);
    EVP_MAC_free(m->mac);
    gs_free(m);
}

gs_status_t gs_auth_mac_compute(gs_auth_mac_t *m, const gs_auth_part_t *parts, size_t nparts,
                                uint8_t out[GS_AUTH_MAC_BYTES])
{
    size_t outl = 0;
    if (m == NULL || (parts == NULL && nparts > 0) || out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_auth_mac_compute: bad argument");
    /* NULL key: start over with the key set at creation */
    if (EVP_MAC_init(m->ctx, NULL, 0, NULL) != 1) return gs__auth_ossl_error("HMAC init");
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].len > 0 && EVP_MAC_update(m->ctx, parts[i].data, parts[i].len) != 1)
            return gs__auth_ossl_error("HMAC update");
    }
    if (EVP_MAC_final(m->ctx, out, &outl, GS_AUTH_MAC_BYTES) != 1 || outl != GS_AUTH_MAC_BYTES)
        return gs__auth_ossl_error("HMAC final");
    return GS_OK;
}

gs_status_t gs_auth_hmac(const void *key, size_t key_len, const gs_auth_part_t *parts, size_t nparts,
                         uint8_t mac[GS_AUTH_MAC_BYTES])
{
    gs_auth_mac_t *m;
    gs_status_t st = gs_auth_mac_create(key, key_len, &m);
    if (st != GS_OK) return st;
    st = gs_auth_mac_compute(m, parts, nparts, mac);
    gs_auth_mac_destroy(m);
    return st;
}

static void gs__put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

gs_status_t gs_auth_handshake_mac(const char *token, gs_auth_side_t side, uint32_t version, uint32_t role,
                                  const void *name, size_t name_len, const uint8_t *nonce_peer,
                                  const uint8_t *nonce_sched, uint8_t mac[GS_AUTH_MAC_BYTES])
{
    static const char by_peer[] = "gsched handshake: peer proof";
    static const char by_sched[] = "gsched handshake: gsched proof";
    uint8_t fixed[16];
    const char *label = side == GS_AUTH_BY_SCHED ? by_sched : by_peer;
    gs_auth_part_t parts[5];

    if (token == NULL || (name == NULL && name_len > 0) || nonce_peer == NULL || nonce_sched == NULL ||
        (side != GS_AUTH_BY_PEER && side != GS_AUTH_BY_SCHED))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_auth_handshake_mac: bad argument");
    gs__put_le(fixed, version, 4);
    gs__put_le(fixed + 4, role, 4);
    gs__put_le(fixed + 8, name_len, 8);
    parts[0] = (gs_auth_part_t){label, strlen(label) + 1};
    parts[1] = (gs_auth_part_t){fixed, sizeof fixed};
    parts[2] = (gs_auth_part_t){name, name_len};
    parts[3] = (gs_auth_part_t){nonce_peer, GS_AUTH_NONCE_BYTES};
    parts[4] = (gs_auth_part_t){nonce_sched, GS_AUTH_NONCE_BYTES};
    return gs_auth_hmac(token, strlen(token), parts, 5, mac);
}

gs_status_t gs_auth_key_mask(const char *token, const uint8_t *nonce_peer, const uint8_t *nonce_sched,
                             const uint8_t *in, uint8_t *out)
{
    static const char label[] = "gsched handshake: data-plane key mask";
    uint8_t pad[GS_AUTH_MAC_BYTES];
    gs_auth_part_t parts[3];
    gs_status_t st;

    if (token == NULL || nonce_peer == NULL || nonce_sched == NULL || in == NULL || out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_auth_key_mask: bad argument");
    parts[0] = (gs_auth_part_t){label, sizeof label};
    parts[1] = (gs_auth_part_t){nonce_peer, GS_AUTH_NONCE_BYTES};
    parts[2] = (gs_auth_part_t){nonce_sched, GS_AUTH_NONCE_BYTES};
    st = gs_auth_hmac(token, strlen(token), parts, 3, pad);
    if (st != GS_OK) return st;
    for (size_t i = 0; i < GS_AUTH_KEY_BYTES; i++) out[i] = in[i] ^ pad[i];
    OPENSSL_cleanse(pad, sizeof pad);
    return GS_OK;
}

/* The message a gather ticket MACs: label || u64le client || u64le graph || u64le task. */
static const char gs__ticket_label[] = "gsched direct gather ticket";
static void gs__ticket_parts(uint64_t client_id, uint64_t graph, uint64_t task, uint8_t ids[24],
                             gs_auth_part_t parts[2])
{
    uint64_t v[3] = {client_id, graph, task};
    for (int i = 0; i < 3; i++)
        for (int b = 0; b < 8; b++) ids[8 * i + b] = (uint8_t)(v[i] >> (8 * b));
    parts[0] = (gs_auth_part_t){gs__ticket_label, sizeof gs__ticket_label};
    parts[1] = (gs_auth_part_t){ids, 24};
}

gs_status_t gs_auth_gather_ticket(const uint8_t *key, uint64_t client_id, uint64_t graph, uint64_t task,
                                  uint8_t ticket[GS_AUTH_MAC_BYTES])
{
    uint8_t ids[24];
    gs_auth_part_t parts[2];
    if (key == NULL || ticket == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_auth_gather_ticket: bad argument");
    gs__ticket_parts(client_id, graph, task, ids, parts);
    return gs_auth_hmac(key, GS_AUTH_KEY_BYTES, parts, 2, ticket);
}

gs_status_t gs_auth_gather_ticket_mac(gs_auth_mac_t *ctx, uint64_t client_id, uint64_t graph, uint64_t task,
                                      uint8_t ticket[GS_AUTH_MAC_BYTES])
{
    uint8_t ids[24];
    gs_auth_part_t parts[2];
    if (ctx == NULL || ticket == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_auth_gather_ticket_mac: bad argument");
    gs__ticket_parts(client_id, graph, task, ids, parts);
    return gs_auth_mac_compute(ctx, parts, 2, ticket);
}
