/* Internal error helpers: set the thread's last-error message while returning a status. */
#ifndef GS_COMMON_ERROR_H
#define GS_COMMON_ERROR_H

#include <gsched/status.h>

#if defined(__GNUC__)
#define GS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define GS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GS_LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define GS_PRINTF(a, b)
#define GS_UNLIKELY(x) (x)
#define GS_LIKELY(x) (x)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Record a formatted message as this thread's last error and return @a status unchanged,
 *  so callers write `return gs_error_set(GS_ERR_INVALID_PARAM, "step is 0 on axis %d", a);`. */
gs_status_t gs_error_set(gs_status_t status, const char *fmt, ...) GS_PRINTF(2, 3);

/** Clear this thread's last-error message. */
void gs_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif
