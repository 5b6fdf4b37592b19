#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *gs_status_string(gs_status_t status)
{
    switch (status) {
#define GS__STATUS_STR(name, val, str) case name: return str;
    GS_STATUS_MAP(GS__STATUS_STR)
#undef GS__STATUS_STR
    }
    return "unknown status";
}

const char *gs_status_name(gs_status_t status)
{
    switch (status) {
#define GS__STATUS_NAME(name, val, str) case name: return #name;
    GS_STATUS_MAP(GS__STATUS_NAME)
#undef GS__STATUS_NAME
    }
    return "GS_ERR_UNKNOWN";
}

static _Thread_local char gs__errbuf[512];

const char *gs_last_error(void)
{
    return gs__errbuf;
}

gs_status_t gs_error_set(gs_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gs__errbuf, sizeof(gs__errbuf), fmt, ap);
    va_end(ap);
    return status;
}

void gs_error_clear(void)
{
    gs__errbuf[0] = '\0';
}
