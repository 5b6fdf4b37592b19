#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

gs_log_level_t gs__log_level = GS_LOG_LEVEL_WARN;
static const char *gs__log_component = "gsched";

static const char *const gs__log_names[] = {"fatal", "error", "warn", "info", "debug", "trace"};

void gs_log_set_level(gs_log_level_t level)
{
    gs__log_level = level;
}

void gs_log_set_component(const char *component)
{
    gs__log_component = component;
}

gs_status_t gs_log_level_parse(const char *name, gs_log_level_t *level_p)
{
    for (int i = 0; i <= GS_LOG_LEVEL_TRACE; i++) {
        if (name != NULL && strcmp(name, gs__log_names[i]) == 0) {
            *level_p = (gs_log_level_t)i;
            return GS_OK;
        }
    }
    return gs_error_set(GS_ERR_INVALID_PARAM,
                        "unknown log level '%s' (expected fatal, error, warn, info, debug or trace)",
                        name ? name : "(null)");
}

void gs__log(gs_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    char when[32];
    struct timespec ts;
    struct tm tm;
    const char *base = strrchr(file, '/');
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    /* ISO-8601 UTC with microseconds: 2026-11-25T07:15:01.123456Z */
    fprintf(stderr, "[%s.%06ldZ] %s[%d] %-5s %s:%d %s\n", when, ts.tv_nsec / 1000,
            gs__log_component, (int)getpid(), gs__log_names[level], base ? base + 1 : file, line,
            msg);
}

void gs__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "%s[%d]: assertion '%s' failed at %s:%d\n", gs__log_component, (int)getpid(),
            expr, file, line);
    abort();
}
