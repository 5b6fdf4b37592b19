/* Internal pieces of the client library shared between its source files (not installed). */
#ifndef GS_CLIENT_INTERNAL_H
#define GS_CLIENT_INTERNAL_H

#include <gsched/client.h>
#include <gsched/status.h>

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A local cluster started by the client ("local" address): the gs-local-cluster process. */
typedef struct gs__local {
    pid_t pid;          /* launcher process, 0 when none */
    int stdin_fd;       /* write end of the launcher's stdin: closing it stops the launcher */
    char address[256];  /* "tcp://host:port" printed by the launcher when ready */
} gs__local_t;

/** Find an executable @a name: @a bin_dir (may be NULL), $GS_BIN_DIR, the directory of the
 *  running executable, then $PATH. Writes the full path to @a path (@a path_len bytes) and the
 *  directory it was found in to @a dir (or "" when found through $PATH).
 *  GS_ERR_NOT_FOUND with a message listing where it looked. */
gs_status_t gs__find_executable(const char *name, const char *bin_dir, char *path,
                                size_t path_len, char *dir, size_t dir_len);

/** Start `gs-local-cluster --host 127.0.0.1 --port 0 --watch-stdin ...` and wait (up to
 *  @a timeout_s) until it prints its ready line. On success *l is filled; on error nothing is
 *  left running. */
gs_status_t gs__local_start(const char *bin_dir, int nworkers, const char *backend,
                            const char *token, double timeout_s, gs__local_t *l);

/** Stop the launcher (stdin EOF + SIGTERM, then SIGKILL after a grace period) and reap it. */
void gs__local_stop(gs__local_t *l);

#ifdef __cplusplus
}
#endif
#endif
