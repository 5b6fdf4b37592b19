/*
 * Blocks of a graph's per-task tables kept for the next graph. gsched's heap is tuned to mmap
 * large blocks and unmap them at free (common/heap.h), so each graph of millions of tasks had
 * its tables (tens of MiB per million tasks) faulted in and zeroed by the kernel page by page:
 * a quarter of gsched's CPU in gs-bench tasks. Freed table blocks of at least GS__KEEP_MIN
 * bytes are kept instead, up to GS__KEEP_BYTES in all, and reused by the next graph's tables;
 * housekeeping frees those unused for GS__KEEP_IDLE_MS. Only a submitted graph's tables (an
 * authenticated client's) go through here, never a peer's frame, so what a hostile
 * connection sends still leaves the heap at once. Loop thread only.
 */
#ifndef GS_SCHEDULER_KEEP_H
#define GS_SCHEDULER_KEEP_H

#include "scheduler/sched_int.h"

#define GS__KEEP_MIN ((size_t)1 << 20)
#define GS__KEEP_BYTES ((size_t)256 << 20)
#define GS__KEEP_IDLE_MS 2000u
#define GS__KEEP_SLOTS ((int)(sizeof(((gs_sched_t *)0)->keep) / sizeof(((gs_sched_t *)0)->keep[0])))

/** A block of at least @a size bytes (zeroed when @a zero): a kept one when one fits with at
 *  most half of it to spare, else gs_malloc / gs_calloc. Free it with gs__keep_put (or
 *  gs_free). NULL when out of memory. */
void *gs__keep_take(gs_sched_t *s, size_t size, int zero, const char *what);
/** Keep @a p (a block from gs_malloc, gs_calloc or gs__keep_take; NULL is fine) for reuse, or
 *  free it when it is small, the store is full, or the allocator cannot tell its size. */
void gs__keep_put(gs_sched_t *s, void *p);
/** Free the kept blocks unused for @a idle_ns nanoseconds at @a now (0: all of them). */
void gs__keep_trim(gs_sched_t *s, uint64_t now, uint64_t idle_ns);

#endif
