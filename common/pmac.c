/* Payload MACs (see common/auth.h): GMAC over OpenSSL 3's EVP_MAC. */
#include "common/auth.h"

#include "common/alloc.h"
#include "common/error.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <string.h>

struct gs_auth_pmac {
    EVP_MAC *mac;
    EVP_MAC_CTX *ctx;
};

static gs_status_t gs__pmac_ossl_error(const char *what)
{
    char text[256];
    unsigned long e = ERR_get_error();
    ERR_error_string_n(e, text, sizeof text);
    ERR_clear_error();
    return gs_error_set(GS_ERR_IO, "%s failed: %s", what, e != 0 ? text : "unknown OpenSSL error");
}

gs_status_t gs_auth_pmac_create(const uint8_t *key, gs_auth_pmac_t **pmac_p)
{
    static const char label[] = "gsched payload mac v1";
    uint8_t derived[GS_AUTH_MAC_BYTES], iv[GS_AUTH_PMAC_IV_BYTES] = {0};
    gs_auth_part_t part = {label, sizeof label - 1};
    OSSL_PARAM params[3];
    gs_auth_pmac_t *p;
    gs_status_t st;

    if (key == NULL || pmac_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_auth_pmac_create: NULL argument");
    if ((st = gs_auth_hmac(key, GS_AUTH_KEY_BYTES, &part, 1, derived)) != GS_OK) return st;
    p = gs_calloc(1, sizeof *p, "payload mac");
    if (p == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating a payload MAC context");
    p->mac = EVP_MAC_fetch(NULL, "GMAC", NULL);
    if (p->mac == NULL) {
        ERR_clear_error();
        st = gs_error_set(GS_ERR_UNSUPPORTED, "this OpenSSL has no GMAC (EVP_MAC \"GMAC\")");
        goto err_free;
    }
    p->ctx = EVP_MAC_CTX_new(p->mac);
    if (p->ctx == NULL) goto err_ossl;
    params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, (char *)"AES-256-GCM", 0);
    params[1] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, iv, sizeof iv);
    params[2] = OSSL_PARAM_construct_end();
    if (EVP_MAC_init(p->ctx, derived, sizeof derived, params) != 1) goto err_ossl;
    memset(derived, 0, sizeof derived);
    *pmac_p = p;
    return GS_OK;
err_ossl:
    st = gs__pmac_ossl_error("creating a GMAC context");
err_free:
    memset(derived, 0, sizeof derived);
    gs_auth_pmac_destroy(p);
    return st;
}

void gs_auth_pmac_destroy(gs_auth_pmac_t *p)
{
    if (p == NULL) return;
    EVP_MAC_CTX_free(p->ctx);
    EVP_MAC_free(p->mac);
    gs_free(p);
}

gs_status_t gs_auth_pmac_iv(uint64_t sender, uint64_t counter, uint8_t *iv)
{
    if (iv == NULL || sender > UINT32_MAX)
        return gs_error_set(GS_ERR_INVALID_PARAM, "payload MAC: worker id %llu does not fit the IV",
                            (unsigned long long)sender);
    for (int i = 0; i < 4; i++) iv[i] = (uint8_t)(sender >> (8 * i));
    for (int i = 0; i < 8; i++) iv[4 + i] = (uint8_t)(counter >> (8 * i));
    return GS_OK;
}

gs_status_t gs_auth_pmac_compute(gs_auth_pmac_t *p, const uint8_t *iv, const gs_auth_part_t *parts, size_t nparts,
                                 uint8_t *tag)
{
    OSSL_PARAM params[2];
    size_t outl = 0;
    if (p == NULL || iv == NULL || tag == NULL || (parts == NULL && nparts > 0))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_auth_pmac_compute: bad argument");
    params[0] = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, (void *)(uintptr_t)iv, GS_AUTH_PMAC_IV_BYTES);
    params[1] = OSSL_PARAM_construct_end();
    /* NULL key: the key set at creation stays; the IV is set anew */
    if (EVP_MAC_init(p->ctx, NULL, 0, params) != 1) return gs__pmac_ossl_error("GMAC init");
    for (size_t i = 0; i < nparts; i++) {
        if (parts[i].len > 0 && EVP_MAC_update(p->ctx, parts[i].data, parts[i].len) != 1)
            return gs__pmac_ossl_error("GMAC update");
    }
    if (EVP_MAC_final(p->ctx, tag, &outl, GS_AUTH_PMAC_TAG_BYTES) != 1 || outl != GS_AUTH_PMAC_TAG_BYTES)
        return gs__pmac_ossl_error("GMAC final");
    return GS_OK;
}
