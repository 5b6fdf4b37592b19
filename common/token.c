/* Cluster tokens (token.h). */
#include "common/token.h"

#include "common/error.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

gs_status_t gs_token_generate(char *buf, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[GS_TOKEN_RANDOM_BYTES];
    size_t got = 0;

    if (buf == NULL || len < GS_TOKEN_GENERATED_LEN)
        return gs_error_set(GS_ERR_INVALID_PARAM, "token buffer too small");
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return gs_error_set(GS_ERR_IO, "cannot generate a token: getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof raw; i++) {
        buf[2 * i] = hex[raw[i] >> 4];
        buf[2 * i + 1] = hex[raw[i] & 15u];
    }
    buf[2 * sizeof raw] = '\0';
    memset(raw, 0, sizeof raw);
    return GS_OK;
}

gs_status_t gs_token_read_file(const char *path, char *buf, size_t len)
{
    FILE *f;
    size_t n;
    int too_long;

    if (path == NULL || buf == NULL || len < GS_TOKEN_BUF_LEN)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_token_read_file: bad argument");
    f = fopen(path, "re");
    if (f == NULL) return gs_error_set(GS_ERR_IO, "cannot open the token file '%s': %s", path, strerror(errno));
    n = fread(buf, 1, GS_TOKEN_MAX, f);
    too_long = n == GS_TOKEN_MAX && fgetc(f) != EOF;
    if (ferror(f)) {
        fclose(f);
        return gs_error_set(GS_ERR_IO, "cannot read the token file '%s'", path);
    }
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t')) n--;
    buf[n] = '\0';
    if (too_long) return gs_error_set(GS_ERR_INVALID_PARAM, "the token file '%s' holds more than %u bytes", path, GS_TOKEN_MAX);
    if (n == 0) return gs_error_set(GS_ERR_INVALID_PARAM, "the token file '%s' is empty", path);
    if (memchr(buf, '\0', n) != NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "the token file '%s' holds a NUL byte", path);
    return GS_OK;
}

int gs_token_equal(const char *secret, size_t secret_len, const void *given, size_t given_len)
{
    const uint8_t *g = given;
    volatile uint8_t diff = (uint8_t)((secret_len ^ given_len) != 0);
    for (size_t i = 0; i < given_len; i++) {
        size_t j = i < secret_len ? i : secret_len;
        diff |= (uint8_t)(g[i] ^ (uint8_t)secret[j]);
    }
    return diff == 0;
}
