#include "common/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long gs__alloc_budget = -1;  /* < 0: no injection */
static atomic_ulong gs__alloc_injected = 0;

static int gs__alloc_should_fail(void)
{
    long b = atomic_load_explicit(&gs__alloc_budget, memory_order_relaxed);
    if (b < 0) return 0;
    if (b == 0) {
        atomic_fetch_add(&gs__alloc_injected, 1);
        return 1;
    }
    atomic_fetch_sub(&gs__alloc_budget, 1);
    return 0;
}

void gs_alloc_fail_after(long n)
{
    atomic_store(&gs__alloc_budget, n);
    atomic_store(&gs__alloc_injected, 0);
}

unsigned long gs_alloc_injected_failures(void)
{
    return atomic_load(&gs__alloc_injected);
}

size_t gs_size_mul(size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size) return SIZE_MAX;
    return n * size;
}

void *gs_malloc(size_t size, const char *what)
{
    (void)what;
    if (gs__alloc_should_fail() || size == SIZE_MAX) return NULL;
    return malloc(size ? size : 1);
}

void *gs_calloc(size_t n, size_t size, const char *what)
{
    (void)what;
    if (gs__alloc_should_fail()) return NULL;
    if (size != 0 && n > SIZE_MAX / size) return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *gs_realloc(void *ptr, size_t size, const char *what)
{
    (void)what;
    if (gs__alloc_should_fail() || size == SIZE_MAX) return NULL;
    return realloc(ptr, size ? size : 1);
}

void gs_free(void *ptr)
{
    free(ptr);
}

char *gs_strdup(const char *s, const char *what)
{
    size_t n = strlen(s) + 1;
    char *d = gs_malloc(n, what);
    if (d != NULL) memcpy(d, s, n);
    return d;
}
