/* gs-mac-bench: throughput of the keyed MACs OpenSSL 3 offers for chunk payloads on the data
 * plane (worker/xfer: --payload-mac), one JSON line per construction and size:
 *   {"bench":"payload-mac","mac":"hmac-sha256","bytes":N,"gbps":G,"reps":R}
 * GB/s = bytes MACed per second (1e9), best of the repetitions, one thread.
 * Usage: gs-mac-bench [MiB (default 64)] [reps (default 5)] */
#include "common/auth.h"
#include "common/time.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double mb_evp(const char *alg, const char *digest, const char *cipher, const unsigned char *buf,
                     size_t len, int reps)
{
    unsigned char key[32], iv[12], out[64];
    size_t outl;
    double best = 0;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, alg, NULL);
    EVP_MAC_CTX *ctx;
    OSSL_PARAM params[3], *p = params;
    if (mac == NULL) return -1;
    ctx = EVP_MAC_CTX_new(mac);
    memset(key, 7, sizeof key);
    memset(iv, 9, sizeof iv);
    if (digest != NULL) *p++ = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)digest, 0);
    if (cipher != NULL) {
        *p++ = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, (char *)cipher, 0);
        *p++ = OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, iv, sizeof iv);
    }
    *p = OSSL_PARAM_construct_end();
    for (int r = 0; r < reps; r++) {
        double t0 = gs_now_s(), t;
        if (EVP_MAC_init(ctx, key, sizeof key, params) != 1 || EVP_MAC_update(ctx, buf, len) != 1 ||
            EVP_MAC_final(ctx, out, &outl, sizeof out) != 1) {
            best = -1;
            break;
        }
        t = gs_now_s() - t0;
        if (t > 0 && len / t / 1e9 > best) best = len / t / 1e9;
    }
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return best;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    size_t len = mib << 20;
    unsigned char *buf = malloc(len ? len : 1);
    static const struct {
        const char *name, *alg, *digest, *cipher;
    } kinds[] = {
        {"hmac-sha256", "HMAC", "SHA256", NULL},
        {"hmac-sha512", "HMAC", "SHA512", NULL},
        {"blake2bmac", "BLAKE2BMAC", NULL, NULL},
        {"gmac-aes-256", "GMAC", NULL, "AES-256-GCM"},
    };
    if (buf == NULL || reps < 1) return 2;
    for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)(i * 131u);
    {
        /* the construction the data plane uses (common/pmac.c), parts as the workers pass them */
        uint8_t key[GS_AUTH_KEY_BYTES], iv[GS_AUTH_PMAC_IV_BYTES], tag[GS_AUTH_PMAC_TAG_BYTES];
        gs_auth_pmac_t *pm;
        double best = 0;
        memset(key, 3, sizeof key);
        if (gs_auth_pmac_create(key, &pm) == GS_OK) {
            for (int r = 0; r < reps; r++) {
                gs_auth_part_t part = {buf, len};
                double t0 = gs_now_s(), t;
                gs_auth_pmac_iv(1, (uint64_t)r + 1, iv);
                if (gs_auth_pmac_compute(pm, iv, &part, 1, tag) != GS_OK) break;
                t = gs_now_s() - t0;
                if (t > 0 && len / t / 1e9 > best) best = len / t / 1e9;
            }
            gs_auth_pmac_destroy(pm);
        }
        printf("{\"bench\":\"payload-mac\",\"mac\":\"gs_auth_pmac (gmac-aes-256)\",\"bytes\":%zu,\"reps\":%d,"
               "\"gbps\":%.3f}\n", len, reps, best);
    }
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        double g = mb_evp(kinds[k].alg, kinds[k].digest, kinds[k].cipher, buf, len, reps);
        printf("{\"bench\":\"payload-mac\",\"mac\":\"%s\",\"bytes\":%zu,\"reps\":%d,\"gbps\":%.3f}\n", kinds[k].name,
               len, reps, g);
    }
    free(buf);
    return 0;
}
