/* The ready set (scheduler/rset.h): bulk filling (put + seal) against one-by-one inserts. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "scheduler/rset.h"

/* Fill one set with gs__rset_add and one with gs__rset_put + gs__rset_seal from the same keys
 * (every key of 0 .. n-1 with probability 1/every), then drain both by minimum. */
static void compare_bulk(uint32_t n, unsigned every, unsigned seed)
{
    gs__rset_t a, b;
    uint32_t members = 0, last = 0;
    srand(seed);
    cr_assert_eq(gs__rset_init(&a, n), GS_OK);
    cr_assert_eq(gs__rset_init(&b, n), GS_OK);
    for (uint32_t p = 0; p < n; p++) {
        if ((unsigned)rand() % every != 0) continue;
        gs__rset_add(&a, p);
        gs__rset_put(&b, p);
        members++;
    }
    gs__rset_seal(&b);
    cr_assert_eq(b.n, members);
    cr_assert_eq(memcmp(a.bits, b.bits, ((size_t)a.off[a.nlevels - 1] + 1) * sizeof(uint64_t)), 0,
                 "n %u: the sealed levels differ from incremental inserts", n);
    while (a.n > 0) {
        uint32_t x = gs__rset_min(&a), y = gs__rset_min(&b);
        cr_assert_eq(x, y);
        cr_assert_geq(x, last);
        last = x;
        gs__rset_del(&a, x);
        gs__rset_del(&b, y);
    }
    cr_assert_eq(b.n, 0);
    gs_free(a.bits);
    gs_free(b.bits);
}

Test(scheduler_rset, bulk_fill_matches_one_by_one_inserts)
{
    const uint32_t sizes[] = {1, 63, 64, 65, 4095, 4096, 4097, 262143, 262144, 262145, 1000000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        compare_bulk(sizes[i], 1, 1);
        compare_bulk(sizes[i], 3, 2);
        compare_bulk(sizes[i], 5000, 3);
    }
}

Test(scheduler_rset, sealing_an_empty_set_leaves_it_empty)
{
    gs__rset_t r;
    cr_assert_eq(gs__rset_init(&r, 100000), GS_OK);
    gs__rset_seal(&r);
    cr_assert_eq(r.n, 0);
    for (uint32_t k = 0; k <= r.off[r.nlevels - 1]; k++) cr_assert_eq(r.bits[k], 0);
    gs__rset_add(&r, 99999);
    cr_assert_eq(gs__rset_min(&r), 99999);
    gs_free(r.bits);
}
