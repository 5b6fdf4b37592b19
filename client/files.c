/* Writing arrays to files from the workers (gsched/client.h, "files"): the client builds the
 * write expression (graph/array_file.c), computes it like any other and removes the temporary
 * file when the write failed where this process can see it. No data passes through here. */
#include "client/client_internal.h"
#include "common/auth.h"
#include "common/error.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

/* Remove @a path, a file or a directory tree (best effort, for a failed write's leftovers). */
static int gs__files_remove(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        char sub[4400];
        if (d == NULL) return -1;
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
            (void)gs__files_remove(sub);
        }
        closedir(d);
        return rmdir(path);
    }
    return unlink(path);
}

static gs_status_t gs__files_write(gs_client_h client, gs_array_h array, const char *path,
                                   int zarr_version, int codec)
{
    char tmp[4200];
    uint8_t rnd[8];
    gs_array_h w;
    gs_status_t st;
    double size = 0;
    if (client == NULL || array == NULL || path == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_to_%s: NULL argument",
                            zarr_version ? "zarr" : "npy");
    if (gs_auth_random(rnd, sizeof(rnd)) != GS_OK)
        memset(rnd, 0, sizeof(rnd));
    if (snprintf(tmp, sizeof(tmp), "%s.gs-tmp-%ld-%02x%02x%02x%02x%02x%02x%02x%02x", path,
                 (long)getpid(), rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6],
                 rnd[7]) >= (int)sizeof(tmp))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_to_npy: path too long");
    st = zarr_version ? gs_array_to_zarr_expr(array, path, tmp, zarr_version, codec, &w)
                      : gs_array_to_npy_expr(array, path, tmp, &w);
    if (st != GS_OK) return st;
    st = gs_client_compute_scalar(client, w, &size);
    gs_array_release(w);
    if (st != GS_OK) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        if (gs__files_remove(tmp) == 0) return gs_error_set(st, "%s", msg);
        return gs_error_set(st, "%s (%s left behind: %s)", msg, tmp, strerror(errno));
    }
    return GS_OK;
}

gs_status_t gs_client_to_npy(gs_client_h client, gs_array_h array, const char *path)
{
    return gs__files_write(client, array, path, 0, 0);
}

gs_status_t gs_client_to_zarr(gs_client_h client, gs_array_h array, const char *path,
                              int version, int codec)
{
    if (version != 2 && version != 3)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_to_zarr: version %d (2 or 3)",
                            version);
    return gs__files_write(client, array, path, version, codec);
}
