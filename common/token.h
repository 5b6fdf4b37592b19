/* Cluster tokens: generated per cluster, read from a file, never put on a command line.
 *
 * gsched, gworker, gs-local-cluster and the client take the token from $GSCHED_TOKEN or from
 * a file (--token-file PATH); a token given as --token TOKEN is visible to every user through
 * ps and /proc, so the programs warn when one is. gs-local-cluster and the client's "local"
 * mode generate a fresh random token for each cluster and hand it to the daemons in the
 * environment. */
#ifndef GS_COMMON_TOKEN_H
#define GS_COMMON_TOKEN_H

#include <gsched/status.h>
#include <stddef.h>

/** Longest token gsched accepts (bytes). */
#define GS_TOKEN_MAX 4096u
/** Bytes of randomness in a generated token (written as twice as many hex digits). */
#define GS_TOKEN_RANDOM_BYTES 32u
/** Buffer size for gs_token_generate(): hex digits and the NUL. */
#define GS_TOKEN_GENERATED_LEN (2u * GS_TOKEN_RANDOM_BYTES + 1u)
/** Buffer size for gs_token_read_file(). */
#define GS_TOKEN_BUF_LEN (GS_TOKEN_MAX + 1u)

/** Write a fresh random token (GS_TOKEN_RANDOM_BYTES from getrandom(2), lower-case hex, NUL
 *  terminated) into @a buf of @a len >= GS_TOKEN_GENERATED_LEN bytes. Errors:
 *  GS_ERR_INVALID_PARAM (buffer too small), GS_ERR_IO (no randomness available). */
gs_status_t gs_token_generate(char *buf, size_t len);

/** Read the token from the file @a path into @a buf (@a len >= GS_TOKEN_BUF_LEN bytes, NUL
 *  terminated): the whole file less trailing white space (a final newline). Errors, with a
 *  message naming the file: GS_ERR_IO (cannot open or read), GS_ERR_INVALID_PARAM (empty,
 *  longer than GS_TOKEN_MAX, holds a NUL byte, or buffer too small). */
gs_status_t gs_token_read_file(const char *path, char *buf, size_t len);

/** 1 when the @a given_len bytes at @a given equal the secret @a secret (@a secret_len bytes,
 *  NUL-terminated), in time that depends on the presented length only: every presented byte is
 *  compared (against the secret or its terminating NUL), the lengths folded in. */
int gs_token_equal(const char *secret, size_t secret_len, const void *given, size_t given_len);

/** The warning printed when a token is given on the command line (no trailing newline). */
#define GS_TOKEN_ARGV_WARNING                                                                    \
    "--token puts the token on the command line, where every user of this machine can read it " \
    "(ps, /proc); prefer $GSCHED_TOKEN or --token-file PATH"

#endif
