/* The C library's heap, seen from a long-running daemon (issue 12: gsched's RSS under a storm of
 * connections and large frames stayed at its peak long after the memory was freed).
 *
 * glibc's malloc keeps freed memory: blocks of the main heap below its top are not returned to
 * the system by free(), and its mmap threshold rises to the largest block freed (up to 32 MiB),
 * so after one large frame every following frame of that size comes from the heap too, where
 * it stays resident once freed. A daemon that receives large frames from many peers therefore
 * (1) fixes the thresholds (gs_heap_tune_daemon: blocks of 128 KiB and more are mmapped and
 * unmapped at free), and (2) returns free heap pages periodically (gs_heap_release). Elsewhere
 * (another C library) these are no-ops and the counters read 0. */
#ifndef GS_COMMON_HEAP_H
#define GS_COMMON_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct gs_heap_stats {
    uint64_t used;   /* bytes allocated now: heap blocks in use + mmapped blocks */
    uint64_t free;   /* bytes the allocator holds free (may still be resident) */
    uint64_t mmapped; /* of used: blocks served by mmap (returned to the system at free) */
} gs_heap_stats_t;

/** Current allocator counters into *stats_p (all 0 where unknown). Walks the arenas: O(number of
 *  free blocks); call it from timers and stats requests, not per message. */
void gs_heap_stats(gs_heap_stats_t *stats_p);

/** Fix the allocator's thresholds for a long-running single-loop daemon: blocks of at least
 *  @a mmap_threshold bytes are served by mmap and unmapped when freed (no dynamic raise), the top
 *  of the heap is trimmed past @a mmap_threshold * 2 free bytes, and at most @a arenas arenas are
 *  created (0 = leave the count alone). Process-wide: call once, early in main(), before other
 *  threads start; the library versions of the daemons leave the embedding program's allocator
 *  alone. Returns 0 on success, -1 when a setting was refused or is unknown here. */
int gs_heap_tune_daemon(uint64_t mmap_threshold, unsigned arenas);

/** Return free heap pages to the system (glibc malloc_trim(0): pages of free blocks anywhere in
 *  the heap, not only at its top). Costs a walk of the free blocks (milliseconds for a large,
 *  fragmented heap): call it when much was freed, not per free. Returns 1 when memory was
 *  returned, else 0. */
int gs_heap_release(void);

/** Ask for transparent huge pages under the 2 MiB-aligned part of [@a p, @a p + @a len) (Linux
 *  madvise MADV_HUGEPAGE; nothing where unsupported or when no aligned 2 MiB lies inside). For large tables that
 *  are filled right after allocation (a graph's per-task arrays): one page fault per 2 MiB instead
 *  of one per 4 KiB. Whether the kernel grants them is its policy
 *  (/sys/kernel/mm/transparent_hugepage/enabled: always or madvise). The memory stays the
 *  caller's; nothing to undo. Returns 1 when advised, else 0. */
int gs_heap_advise_huge(void *p, size_t len);

/** This process's resident set size in bytes (/proc/self/statm), 0 where unknown. */
uint64_t gs_heap_rss(void);

#endif
