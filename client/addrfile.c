/* Client address files (gs-slurm-cluster writes them): KEY=VALUE lines naming the scheduler's
 * address and the token file. */
#include "common/error.h"
#include "common/token.h"

#include <gsched/client.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(GS_CLIENT_TOKEN_MAX == GS_TOKEN_MAX, "client and common token limits differ");

#define GS__ADDRFILE_LINE 4096

/* The token file @a tok (as written in the address file @a path) into addr->token. */
static gs_status_t gs__addrfile_token(const char *path, const char *tok, gs_client_address_t *addr)
{
    char buf[GS_TOKEN_BUF_LEN], full[2 * GS__ADDRFILE_LINE];
    const char *slash = strrchr(path, '/');
    gs_status_t st;

    if (tok[0] != '/' && slash != NULL) {
        /* relative to the address file's directory; joined by length (no truncation) */
        size_t dl = (size_t)(slash - path) + 1, tl = strlen(tok);
        if (dl + tl + 1 > sizeof(full))
            return gs_error_set(GS_ERR_INVALID_PARAM, "address file '%s': the token file path is too long", path);
        memcpy(full, path, dl);
        memcpy(full + dl, tok, tl + 1);
        tok = full;
    }
    if ((st = gs_token_read_file(tok, buf, sizeof(buf))) != GS_OK) return st;
    memcpy(addr->token, buf, strlen(buf) + 1);
    return GS_OK;
}

gs_status_t gs_client_address_file_read(const char *path, gs_client_address_t *addr_p)
{
    char line[GS__ADDRFILE_LINE], tok[GS__ADDRFILE_LINE] = "";
    gs_client_address_t a;
    unsigned lineno = 0;
    gs_status_t st;
    FILE *f;

    if (addr_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_address_file_read: addr_p is NULL");
    if (path == NULL) path = getenv("GSCHED_ADDRESS_FILE");
    if (path == NULL || path[0] == '\0')
        return gs_error_set(GS_ERR_INVALID_PARAM, "no address file given and $GSCHED_ADDRESS_FILE is not set");
    memset(&a, 0, sizeof(a));
    f = fopen(path, "re");
    if (f == NULL) return gs_error_set(GS_ERR_IO, "cannot open the address file '%s': %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f) != NULL) {
        size_t n = strlen(line);
        char *eq, *val;
        lineno++;
        if (n == sizeof(line) - 1 && line[n - 1] != '\n') {
            fclose(f);
            return gs_error_set(GS_ERR_INVALID_PARAM, "address file '%s' line %u is longer than %d bytes", path,
                                lineno, GS__ADDRFILE_LINE - 2);
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
            line[--n] = '\0';
        if (n == 0 || line[0] == '#') continue;
        eq = strchr(line, '=');
        if (eq == NULL) {
            fclose(f);
            return gs_error_set(GS_ERR_INVALID_PARAM, "address file '%s' line %u is not KEY=VALUE", path, lineno);
        }
        *eq = '\0';
        val = eq + 1;
        if (strcmp(line, "GSCHED_ADDRESS") == 0) {
            if (strlen(val) >= sizeof(a.address) || strncmp(val, "tcp://", 6) != 0) {
                fclose(f);
                return gs_error_set(GS_ERR_INVALID_PARAM, "address file '%s' line %u: GSCHED_ADDRESS is not a "
                                    "tcp://HOST:PORT address shorter than %zu bytes", path, lineno, sizeof(a.address));
            }
            memcpy(a.address, val, strlen(val) + 1);
        } else if (strcmp(line, "GSCHED_TOKEN_FILE") == 0) {
            memcpy(tok, val, strlen(val) + 1);
        }
    }
    if (ferror(f)) {
        fclose(f);
        return gs_error_set(GS_ERR_IO, "cannot read the address file '%s'", path);
    }
    fclose(f);
    if (a.address[0] == '\0')
        return gs_error_set(GS_ERR_INVALID_PARAM, "address file '%s' has no GSCHED_ADDRESS line", path);
    if (tok[0] != '\0' && (st = gs__addrfile_token(path, tok, &a)) != GS_OK) return st;
    *addr_p = a;
    return GS_OK;
}
