/* gs_heap_advise_huge: which ranges it advises, and that the memory stays the caller's, intact. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/heap.h"

#define MIB ((size_t)1 << 20)

Test(common_heap, rejects_null_and_ranges_without_an_aligned_2mib_inside)
{
    uint8_t *p = aligned_alloc(2 * MIB, 8 * MIB);
    cr_assert_not_null(p);
    cr_assert_eq(gs_heap_advise_huge(NULL, 8 * MIB), 0);
    cr_assert_eq(gs_heap_advise_huge(p, 0), 0);
    cr_assert_eq(gs_heap_advise_huge(p, 2 * MIB - 1), 0, "below 2 MiB");
    /* 2 MiB starting one byte past a boundary holds no whole aligned 2 MiB */
    cr_assert_eq(gs_heap_advise_huge(p + 1, 2 * MIB), 0);
    free(p);
}

Test(common_heap, advises_the_aligned_interior_and_keeps_the_bytes)
{
    const size_t len = 8 * MIB;
    uint8_t *p = aligned_alloc(2 * MIB, len);
    int r;
    cr_assert_not_null(p);
    for (size_t i = 0; i < len; i += 4096) p[i] = (uint8_t)(i >> 12);
    r = gs_heap_advise_huge(p + 4096, len - 8192);   /* unaligned ends: the inside is advised */
#if defined(__linux__)
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0)
        cr_assert_eq(r, 1, "a kernel with transparent huge pages accepts the advice");
#endif
    (void)r;
    for (size_t i = 0; i < len; i += 4096) cr_assert_eq(p[i], (uint8_t)(i >> 12), "byte %zu", i);
    memset(p, 0x5a, len);   /* still writable everywhere */
    cr_assert_eq(p[len - 1], 0x5a);
    free(p);
}
