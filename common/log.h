/* Levelled logging. The level check happens before any formatting. Messages are lowercase
 * sentences: GS_LOG_WARN("worker %s lost", name). Output goes to stderr, one line each,
 * prefixed with time, level and component. */
#ifndef GS_COMMON_LOG_H
#define GS_COMMON_LOG_H

#include "common/error.h"

typedef enum gs_log_level {
    GS_LOG_LEVEL_FATAL = 0,
    GS_LOG_LEVEL_ERROR,
    GS_LOG_LEVEL_WARN,
    GS_LOG_LEVEL_INFO,
    GS_LOG_LEVEL_DEBUG,
    GS_LOG_LEVEL_TRACE
} gs_log_level_t;

#ifdef __cplusplus
extern "C" {
#endif

extern gs_log_level_t gs__log_level;

/** Set the process-wide level. Thread-safe enough: a plain store read racily by loggers. */
void gs_log_set_level(gs_log_level_t level);
/** Parse "fatal|error|warn|info|debug|trace" into @a level_p. GS_ERR_INVALID_PARAM otherwise. */
gs_status_t gs_log_level_parse(const char *name, gs_log_level_t *level_p);
/** Set the component tag printed on each line (static string, e.g. "gsched"). */
void gs_log_set_component(const char *component);

void gs__log(gs_log_level_t level, const char *file, int line, const char *fmt, ...)
    GS_PRINTF(4, 5);

#ifdef __cplusplus
}
#endif

#define GS_LOG(level, ...)                                                                   \
    do {                                                                                     \
        if (GS_UNLIKELY((level) <= gs__log_level)) gs__log((level), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define GS_LOG_ERROR(...) GS_LOG(GS_LOG_LEVEL_ERROR, __VA_ARGS__)
#define GS_LOG_WARN(...) GS_LOG(GS_LOG_LEVEL_WARN, __VA_ARGS__)
#define GS_LOG_INFO(...) GS_LOG(GS_LOG_LEVEL_INFO, __VA_ARGS__)
#define GS_LOG_DEBUG(...) GS_LOG(GS_LOG_LEVEL_DEBUG, __VA_ARGS__)
#define GS_LOG_TRACE(...) GS_LOG(GS_LOG_LEVEL_TRACE, __VA_ARGS__)

/* Internal invariants. gs_assert is compiled out in NDEBUG builds; gs_assert_always is not
 * (refcount underflow, double completion). Both abort with file:line. */
void gs__assert_fail(const char *expr, const char *file, int line);
#define gs_assert_always(e) ((e) ? (void)0 : gs__assert_fail(#e, __FILE__, __LINE__))
#ifdef NDEBUG
#define gs_assert(e) ((void)0)
#else
#define gs_assert(e) gs_assert_always(e)
#endif

#endif
