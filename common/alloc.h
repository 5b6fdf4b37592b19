/* One swappable allocator. Every heap allocation in gsched goes through gs_malloc & co so that
 * tests can inject failures (gs_alloc_fail_after) and count live allocations.
 * The @a what string names the allocation in logs; it must be a static string. */
#ifndef GS_COMMON_ALLOC_H
#define GS_COMMON_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** malloc(size); NULL on failure (or injected failure). size 0 returns a unique pointer. */
void *gs_malloc(size_t size, const char *what);
/** calloc(n, size) with overflow check; NULL on failure. */
void *gs_calloc(size_t n, size_t size, const char *what);
/** realloc; on failure returns NULL and leaves @a ptr untouched. */
void *gs_realloc(void *ptr, size_t size, const char *what);
/** free(ptr); NULL is fine. */
void gs_free(void *ptr);
/** strdup through gs_malloc; NULL on failure. */
char *gs_strdup(const char *s, const char *what);
/** n * size, or SIZE_MAX when it overflows (so the following allocation fails). */
size_t gs_size_mul(size_t n, size_t size);

/** Failure injection (tests only; not thread-safe against concurrent configuration).
 *  After @a n further successful allocations, every allocation fails until reset.
 *  A negative @a n disables injection. */
void gs_alloc_fail_after(long n);
/** Number of allocations that failed because of injection since the last reset. */
unsigned long gs_alloc_injected_failures(void);

#ifdef __cplusplus
}
#endif
#endif
