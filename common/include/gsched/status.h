/**
 * @file gsched/status.h
 * @brief The one status type of gsched.
 *
 * Every fallible function returns gs_status_t. GS_OK is zero, GS_INPROGRESS is positive (an
 * operation continues asynchronously and its callback will report the outcome), and errors are
 * negative, grouped by kind. The strings come from one X-macro table.
 */
#ifndef GSCHED_STATUS_H
#define GSCHED_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#define GS_STATUS_MAP(X)                                                             \
    X(GS_OK, 0, "success")                                                           \
    X(GS_INPROGRESS, 1, "operation in progress")                                     \
    /* argument and usage errors */                                                  \
    X(GS_ERR_INVALID_PARAM, -1, "invalid parameter")                                 \
    X(GS_ERR_UNSUPPORTED, -2, "operation not supported")                             \
    X(GS_ERR_NOT_FOUND, -3, "not found")                                             \
    X(GS_ERR_EXISTS, -4, "already exists")                                           \
    X(GS_ERR_BUSY, -5, "resource busy")                                              \
    /* resources */                                                                  \
    X(GS_ERR_NO_MEMORY, -10, "out of host memory")                                   \
    X(GS_ERR_NO_DEVICE_MEMORY, -11, "out of device memory")                          \
    X(GS_ERR_NO_RESOURCE, -12, "resource limit reached")                             \
    /* communication */                                                              \
    X(GS_ERR_PROTO, -20, "protocol error")                                           \
    X(GS_ERR_IO, -21, "i/o error")                                                   \
    X(GS_ERR_CONN_REFUSED, -22, "connection refused")                                \
    X(GS_ERR_CONN_CLOSED, -23, "connection closed")                                  \
    X(GS_ERR_TIMED_OUT, -24, "timed out")                                            \
    X(GS_ERR_AUTH, -25, "authentication failed")                                     \
    X(GS_ERR_VERSION, -26, "protocol version mismatch")                              \
    X(GS_ERR_MSG_TOO_LARGE, -27, "message too large")                                \
    X(GS_ERR_UCX, -28, "ucx error")                                                  \
    /* execution */                                                                  \
    X(GS_ERR_CUDA, -40, "cuda error")                                                \
    X(GS_ERR_WORKER_LOST, -41, "worker lost")                                        \
    X(GS_ERR_TASK_FAILED, -42, "task failed")                                        \
    X(GS_ERR_CANCELED, -43, "operation canceled")                                    \
    X(GS_ERR_SCHEDULER_LOST, -44, "scheduler lost")                                  \
    X(GS_ERR_NUMERIC, -45, "numerical failure")                                      \
    X(GS_ERR_DEVICE_LOST, -46, "device lost")                                        \
    X(GS_ERR_INTERNAL, -99, "internal error")

typedef enum gs_status {
#define GS__STATUS_ENUM(name, val, str) name = (val),
    GS_STATUS_MAP(GS__STATUS_ENUM)
#undef GS__STATUS_ENUM
} gs_status_t;

/** Static string describing @a status ("unknown status" for values outside the table).
 *  The string is owned by the library and lives for the program's lifetime. */
const char *gs_status_string(gs_status_t status);

/** Static identifier of @a status, e.g. "GS_ERR_PROTO". Lifetime as gs_status_string(). */
const char *gs_status_name(gs_status_t status);

/** The calling thread's last error message: a human-readable sentence naming the problem,
 *  set by the call that last returned an error on this thread (empty string if none).
 *  The buffer is thread-local and owned by the library; it stays valid until the next gsched
 *  call on this thread that fails. Copy it if you need it longer. */
const char *gs_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
