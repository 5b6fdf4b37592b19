/* The C library's heap (see common/heap.h). */
#include "common/heap.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__GLIBC__)
#include <malloc.h>
#endif

void gs_heap_stats(gs_heap_stats_t *stats_p)
{
    if (stats_p == NULL) return;
    memset(stats_p, 0, sizeof *stats_p);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    {
        struct mallinfo2 mi = mallinfo2();
        stats_p->used = (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
        stats_p->free = (uint64_t)mi.fordblks;
        stats_p->mmapped = (uint64_t)mi.hblkhd;
    }
#endif
}

int gs_heap_tune_daemon(uint64_t mmap_threshold, unsigned arenas)
{
#if defined(__GLIBC__)
    int ok = 1;
    if (mmap_threshold == 0 || mmap_threshold > (64u << 20)) return -1;
    /* setting either threshold turns off the dynamic adjustment of both */
    ok &= mallopt(M_MMAP_THRESHOLD, (int)mmap_threshold) == 1;
    ok &= mallopt(M_TRIM_THRESHOLD, (int)(mmap_threshold * 2)) == 1;
    if (arenas > 0) ok &= mallopt(M_ARENA_MAX, (int)arenas) == 1;
    return ok ? 0 : -1;
#else
    (void)mmap_threshold;
    (void)arenas;
    return -1;
#endif
}

int gs_heap_release(void)
{
#if defined(__GLIBC__)
    return malloc_trim(0);
#else
    return 0;
#endif
}

int gs_heap_advise_huge(void *p, size_t len)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a, b;
    if (p == NULL || len < huge) return 0;
    a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
    b = ((uintptr_t)p + len) & ~(huge - 1);
    if (b <= a) return 0;
    return madvise((void *)a, (size_t)(b - a), MADV_HUGEPAGE) == 0;
#else
    (void)p;
    (void)len;
    return 0;
#endif
}

uint64_t gs_heap_rss(void)
{
    unsigned long long size = 0, resident = 0;
    long page = sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/statm", "re");
    if (f == NULL) return 0;
    if (fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
    fclose(f);
    return page > 0 ? (uint64_t)resident * (uint64_t)page : 0;
}
