/* Writing arrays to files from the workers (gsched/client.h, "files"): the client builds the
 * write expression (graph/array_file.c), computes it like any other and removes the temporary
 * file when the write failed where this process can see it. No data passes through here. */
#include "client/client_internal.h"
#include "common/auth.h"
#include "common/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

gs_status_t gs_client_to_npy(gs_client_h client, gs_array_h array, const char *path)
{
    char tmp[4200];
    uint8_t rnd[8];
    gs_array_h w;
    gs_status_t st;
    double size = 0;
    if (client == NULL || array == NULL || path == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_to_npy: NULL argument");
    if (gs_auth_random(rnd, sizeof(rnd)) != GS_OK)
        memset(rnd, 0, sizeof(rnd));
    if (snprintf(tmp, sizeof(tmp), "%s.gs-tmp-%ld-%02x%02x%02x%02x%02x%02x%02x%02x", path,
                 (long)getpid(), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6],
                 rnd[7]) >= (int)sizeof(tmp))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_to_npy: path too long");
    if ((st = gs_array_to_npy_expr(array, path, tmp, &w)) != GS_OK) return st;
    st = gs_client_compute_scalar(client, w, &size);
    gs_array_release(w);
    if (st != GS_OK) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        if (unlink(tmp) == 0 || errno == ENOENT) return gs_error_set(st, "%s", msg);
        return gs_error_set(st, "%s (%s left behind: %s)", msg, tmp, strerror(errno));
    }
    return GS_OK;
}
