#include <criterion/criterion.h>

#include "common/alloc.h"
#include "common/hashmap.h"

Test(common_hashmap, put_get_delete_many)
{
    gs_u64map_t m;
    gs_u64map_init(&m);
    for (uint64_t i = 0; i < 10000; i++) cr_assert_eq(gs_u64map_put(&m, i * 7919, i), GS_OK);
    cr_assert_eq(m.len, 10000);
    for (uint64_t i = 0; i < 10000; i += 2) cr_assert(gs_u64map_del(&m, i * 7919));
    for (uint64_t i = 0; i < 10000; i++) {
        uint64_t v = 0;
        int found = gs_u64map_get(&m, i * 7919, &v);
        cr_assert_eq(found, (int)(i % 2));
        if (found) cr_assert_eq(v, i);
    }
    cr_assert_eq(gs_u64map_put(&m, 3 * 7919, 42), GS_OK);
    uint64_t v;
    cr_assert(gs_u64map_get(&m, 3 * 7919, &v));
    cr_assert_eq(v, 42);
    cr_assert_eq(m.len, 5000);
    gs_u64map_cleanup(&m);
}

Test(common_hashmap, rejects_reserved_keys_and_survives_alloc_failure)
{
    gs_u64map_t m;
    gs_u64map_init(&m);
    cr_assert_eq(gs_u64map_put(&m, UINT64_MAX, 1), GS_ERR_INVALID_PARAM);
    gs_alloc_fail_after(0);
    cr_assert_eq(gs_u64map_put(&m, 5, 1), GS_ERR_NO_MEMORY);
    gs_alloc_fail_after(-1);
    cr_assert_eq(gs_u64map_get(&m, 5, NULL), 0);
    cr_assert_eq(gs_u64map_put(&m, 5, 1), GS_OK);
    cr_assert(gs_u64map_get(&m, 5, NULL));
    gs_u64map_cleanup(&m);
}

Test(common_hashmap, swap_returns_the_previous_value_and_del_if_checks_it)
{
    gs_u64map_t m;
    uint64_t old = 99, v;
    int found = 7;
    gs_u64map_init(&m);
    cr_assert_eq(gs_u64map_swap(&m, 10, 1, &found, &old), GS_OK);
    cr_assert_eq(found, 0);
    cr_assert_eq(old, 99, "nothing written when the key was absent");
    cr_assert_eq(gs_u64map_swap(&m, 10, 2, &found, &old), GS_OK);
    cr_assert_eq(found, 1);
    cr_assert_eq(old, 1);
    cr_assert(gs_u64map_get(&m, 10, &v));
    cr_assert_eq(v, 2);
    cr_assert_eq(m.len, 1);
    cr_assert_eq(gs_u64map_swap(&m, GS_U64MAP_TOMB, 1, &found, &old), GS_ERR_INVALID_PARAM);
    /* del_if removes only the entry holding that value */
    cr_assert_eq(gs_u64map_del_if(&m, 10, 1), 0);
    cr_assert(gs_u64map_get(&m, 10, NULL));
    cr_assert_eq(gs_u64map_del_if(&m, 11, 2), 0);
    cr_assert_eq(gs_u64map_del_if(&m, 10, 2), 1);
    cr_assert_eq(gs_u64map_get(&m, 10, NULL), 0);
    cr_assert_eq(m.len, 0);
    /* a swap after a delete reuses the tombstone and reports absence */
    cr_assert_eq(gs_u64map_swap(&m, 10, 3, &found, NULL), GS_OK);
    cr_assert_eq(found, 0);
    gs_u64map_cleanup(&m);
}
