/* common/auth.c: HMAC-SHA256 against RFC 4231, the reused keyed context, the handshake proofs'
 * separation and the key mask. */
#include "common/auth.h"

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <string.h>

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

Test(common_auth, hmac_sha256_matches_rfc4231_and_a_reused_context_agrees)
{
    uint8_t mac[GS_AUTH_MAC_BYTES], again[GS_AUTH_MAC_BYTES];
    char text[2 * GS_AUTH_MAC_BYTES + 1];
    gs_auth_part_t parts[2] = {{"what do ya want ", 16}, {"for nothing?", 12}};   /* test case 2 */
    gs_auth_mac_t *m;
    cr_assert_eq(gs_auth_hmac("Jefe", 4, parts, 2, mac), GS_OK);
    hex(mac, sizeof mac, text);
    cr_assert_str_eq(text, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    cr_assert_eq(gs_auth_mac_create("Jefe", 4, &m), GS_OK);
    for (int i = 0; i < 3; i++) {   /* the key set at creation is reused every time */
        cr_assert_eq(gs_auth_mac_compute(m, parts, 2, again), GS_OK);
        cr_assert(gs_auth_equal(mac, again, sizeof mac));
    }
    gs_auth_mac_destroy(m);
    /* an empty key is a valid HMAC key, and differs from another */
    cr_assert_eq(gs_auth_hmac("", 0, parts, 2, again), GS_OK);
    cr_assert(!gs_auth_equal(mac, again, sizeof mac));
    cr_assert_eq(gs_auth_hmac(NULL, 3, parts, 2, again), GS_ERR_INVALID_PARAM);
}

Test(common_auth, handshake_proofs_depend_on_every_input_and_the_side)
{
    uint8_t np[GS_AUTH_NONCE_BYTES] = {1}, ns[GS_AUTH_NONCE_BYTES] = {2}, ref[GS_AUTH_MAC_BYTES], mac[GS_AUTH_MAC_BYTES];
    cr_assert_eq(gs_auth_handshake_mac("tok", GS_AUTH_BY_PEER, 2, 2, "w", 1, np, ns, ref), GS_OK);
    cr_assert_eq(gs_auth_handshake_mac("tok", GS_AUTH_BY_PEER, 2, 2, "w", 1, np, ns, mac), GS_OK);
    cr_assert(gs_auth_equal(ref, mac, sizeof mac), "not deterministic");
    cr_assert_eq(gs_auth_handshake_mac("tok", GS_AUTH_BY_SCHED, 2, 2, "w", 1, np, ns, mac), GS_OK);
    cr_assert(!gs_auth_equal(ref, mac, sizeof mac), "gsched's proof stands for the peer's");
    cr_assert_eq(gs_auth_handshake_mac("tok2", GS_AUTH_BY_PEER, 2, 2, "w", 1, np, ns, mac), GS_OK);
    cr_assert(!gs_auth_equal(ref, mac, sizeof mac));
    cr_assert_eq(gs_auth_handshake_mac("tok", GS_AUTH_BY_PEER, 1, 2, "w", 1, np, ns, mac), GS_OK);
    cr_assert(!gs_auth_equal(ref, mac, sizeof mac));
    cr_assert_eq(gs_auth_handshake_mac("tok", GS_AUTH_BY_PEER, 2, 1, "w", 1, np, ns, mac), GS_OK);
    cr_assert(!gs_auth_equal(ref, mac, sizeof mac));
    cr_assert_eq(gs_auth_handshake_mac("tok", GS_AUTH_BY_PEER, 2, 2, "x", 1, np, ns, mac), GS_OK);
    cr_assert(!gs_auth_equal(ref, mac, sizeof mac));
    cr_assert_eq(gs_auth_handshake_mac("tok", GS_AUTH_BY_PEER, 2, 2, "w", 1, ns, np, mac), GS_OK);
    cr_assert(!gs_auth_equal(ref, mac, sizeof mac), "the nonces' order does not matter");
}

Test(common_auth, the_key_mask_is_its_own_inverse_and_depends_on_the_token)
{
    uint8_t np[GS_AUTH_NONCE_BYTES], ns[GS_AUTH_NONCE_BYTES], key[GS_AUTH_KEY_BYTES], masked[GS_AUTH_KEY_BYTES],
        back[GS_AUTH_KEY_BYTES];
    cr_assert_eq(gs_auth_random(np, sizeof np), GS_OK);
    cr_assert_eq(gs_auth_random(ns, sizeof ns), GS_OK);
    cr_assert_eq(gs_auth_random(key, sizeof key), GS_OK);
    cr_assert_eq(gs_auth_key_mask("tok", np, ns, key, masked), GS_OK);
    cr_assert(!gs_auth_equal(key, masked, sizeof key));
    cr_assert_eq(gs_auth_key_mask("tok", np, ns, masked, back), GS_OK);
    cr_assert(gs_auth_equal(key, back, sizeof key));
    cr_assert_eq(gs_auth_key_mask("other", np, ns, masked, back), GS_OK);
    cr_assert(!gs_auth_equal(key, back, sizeof key), "another token unmasks the key");
}

/* AES-256-GCM with no plaintext and @a aad as authenticated data: GMAC's definition, computed
 * with the cipher API (a different OpenSSL path from EVP_MAC "GMAC"). */
static void pmac_reference(const uint8_t *key32, const uint8_t *iv, const void *aad, size_t len, uint8_t *tag)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int outl;
    cr_assert_not_null(c);
    cr_assert_eq(EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, key32, iv), 1);
    cr_assert_eq(EVP_EncryptUpdate(c, NULL, &outl, aad, (int)len), 1);
    cr_assert_eq(EVP_EncryptFinal_ex(c, NULL, &outl), 1);
    cr_assert_eq(EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, GS_AUTH_PMAC_TAG_BYTES, tag), 1);
    EVP_CIPHER_CTX_free(c);
}

Test(common_auth, payload_macs_are_gmac_under_a_derived_key_and_depend_on_iv_bytes_and_key)
{
    static const char label[] = "gsched payload mac v1";
    static uint8_t data[100000];
    uint8_t key[GS_AUTH_KEY_BYTES], other[GS_AUTH_KEY_BYTES], derived[GS_AUTH_MAC_BYTES];
    uint8_t iv[GS_AUTH_PMAC_IV_BYTES], iv2[GS_AUTH_PMAC_IV_BYTES];
    uint8_t t1[GS_AUTH_PMAC_TAG_BYTES], t2[GS_AUTH_PMAC_TAG_BYTES], ref[GS_AUTH_PMAC_TAG_BYTES];
    gs_auth_part_t whole = {data, sizeof data}, split[2] = {{data, 12345}, {data + 12345, sizeof data - 12345}};
    gs_auth_part_t lp = {label, sizeof label - 1};
    gs_auth_pmac_t *p, *q;

    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7u + 3u);
    memset(key, 0x11, sizeof key);
    memset(other, 0x12, sizeof other);
    cr_assert_eq(gs_auth_pmac_create(key, &p), GS_OK);
    cr_assert_eq(gs_auth_pmac_create(other, &q), GS_OK);
    cr_assert_eq(gs_auth_pmac_iv(7, 1, iv), GS_OK);
    cr_assert_eq(gs_auth_pmac_iv(7, 2, iv2), GS_OK);
    cr_assert_eq(gs_auth_pmac_iv(1ull << 32, 1, iv), GS_ERR_INVALID_PARAM, "ids beyond 32 bits are refused");
    cr_assert_eq(gs_auth_pmac_iv(7, 1, iv), GS_OK);

    cr_assert_eq(gs_auth_pmac_compute(p, iv, &whole, 1, t1), GS_OK);
    cr_assert_eq(gs_auth_hmac(key, sizeof key, &lp, 1, derived), GS_OK);
    pmac_reference(derived, iv, data, sizeof data, ref);
    cr_assert_arr_eq(t1, ref, sizeof ref, "GMAC under the derived key");
    cr_assert_eq(gs_auth_pmac_compute(p, iv, split, 2, t2), GS_OK);
    cr_assert_arr_eq(t1, t2, sizeof t1, "parts are concatenated");
    cr_assert_eq(gs_auth_pmac_compute(p, iv2, &whole, 1, t2), GS_OK);
    cr_assert(!gs_auth_equal(t1, t2, sizeof t1), "the IV counts");
    cr_assert_eq(gs_auth_pmac_compute(q, iv, &whole, 1, t2), GS_OK);
    cr_assert(!gs_auth_equal(t1, t2, sizeof t1), "the key counts");
    data[50000] ^= 1;
    cr_assert_eq(gs_auth_pmac_compute(p, iv, &whole, 1, t2), GS_OK);
    cr_assert(!gs_auth_equal(t1, t2, sizeof t1), "one flipped bit changes the tag");
    data[50000] ^= 1;
    cr_assert_eq(gs_auth_pmac_compute(p, iv, &whole, 1, t2), GS_OK);
    cr_assert_arr_eq(t1, t2, sizeof t1, "a reused context agrees");
    cr_assert_eq(gs_auth_pmac_compute(NULL, iv, &whole, 1, t2), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_auth_pmac_create(NULL, &q), GS_ERR_INVALID_PARAM);
    gs_auth_pmac_destroy(p);
    gs_auth_pmac_destroy(q);
}
