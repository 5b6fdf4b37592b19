/* A growable malloc'd text for HTTP bodies (dash_int.h). */
#include "scheduler/dash/dash_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gs__dtext_room(gs__dtext_t *t, size_t extra)
{
    size_t cap;
    char *p;
    if (t->oom) return 0;
    if (t->len + extra + 1 <= t->cap) return 1;
    cap = t->cap ? t->cap : 4096;
    while (cap < t->len + extra + 1) {
        if (cap > ((size_t)-1) / 2) {
            t->oom = 1;
            return 0;
        }
        cap *= 2;
    }
    if ((p = realloc(t->p, cap)) == NULL) {
        t->oom = 1;
        return 0;
    }
    t->p = p;
    t->cap = cap;
    return 1;
}

void gs__dtext_append(gs__dtext_t *t, const char *s, size_t n)
{
    if (!gs__dtext_room(t, n)) return;
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

void gs__dtext_printf(gs__dtext_t *t, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !gs__dtext_room(t, (size_t)n)) {
        t->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

char *gs__dtext_take(gs__dtext_t *t)
{
    char *p = t->p;
    if (t->oom || !gs__dtext_room(t, 0)) {
        free(t->p);
        memset(t, 0, sizeof *t);
        return NULL;
    }
    memset(t, 0, sizeof *t);
    return p;
}
