/* Freed table blocks kept for the next graph: see keep.h. */
#include "scheduler/keep.h"

#include "common/alloc.h"
#include "common/time.h"

#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

void *gs__keep_take(gs_sched_t *s, size_t size, int zero, const char *what)
{
    int best = -1;
    if (size >= GS__KEEP_MIN) {
        for (int i = 0; i < s->nkeep; i++) {
            size_t sz = s->keep[i].size;
            if (sz >= size && sz - size <= size / 2 && (best < 0 || sz < s->keep[best].size))
                best = i;
        }
    }
    if (best >= 0) {
        void *p = s->keep[best].p;
        s->keep_bytes -= s->keep[best].size;
        s->keep[best] = s->keep[--s->nkeep];
        if (zero) memset(p, 0, size);
        return p;
    }
    return zero ? gs_calloc(1, size, what) : gs_malloc(size, what);
}

void gs__keep_put(gs_sched_t *s, void *p)
{
#if defined(__GLIBC__)
    size_t sz;
    if (p == NULL) return;
    sz = malloc_usable_size(p);
    if (sz >= GS__KEEP_MIN && s->nkeep < GS__KEEP_SLOTS && s->keep_bytes + sz <= GS__KEEP_BYTES) {
        s->keep[s->nkeep].p = p;
        s->keep[s->nkeep].size = sz;
        s->keep[s->nkeep].t_ns = gs_now_ns();
        s->nkeep++;
        s->keep_bytes += sz;
        return;
    }
#endif
    gs_free(p);
}

void gs__keep_trim(gs_sched_t *s, uint64_t now, uint64_t idle_ns)
{
    for (int i = 0; i < s->nkeep;) {
        if (idle_ns == 0 || now - s->keep[i].t_ns >= idle_ns) {
            gs_free(s->keep[i].p);
            s->keep_bytes -= s->keep[i].size;
            s->keep[i] = s->keep[--s->nkeep];
        } else {
            i++;
        }
    }
}
