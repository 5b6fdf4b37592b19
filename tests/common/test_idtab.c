#include <criterion/criterion.h>

#include "common/alloc.h"
#include "common/idtab.h"

/* distinct non-NULL pointers standing for entries (never dereferenced) */
static void *ptr_of(uint64_t id) { return (void *)((uintptr_t)0x1000 + 16 * (uintptr_t)id); }

Test(common_idtab, dense_ids_live_in_pages)
{
    gs_idtab_t t;
    gs_idtab_init(&t);
    for (uint64_t i = 0; i < 100000; i++) cr_assert_eq(gs_idtab_swap(&t, i, ptr_of(i), NULL), GS_OK);
    cr_assert_eq(t.len, 100000);
    cr_assert_eq(t.sparse.len, 0, "dense ids in order all go to pages");
    for (uint64_t i = 0; i < 100000; i++) cr_assert_eq(gs_idtab_get(&t, i), ptr_of(i));
    cr_assert_null(gs_idtab_get(&t, 100000));
    for (uint64_t i = 0; i < 100000; i += 2) cr_assert_eq(gs_idtab_del(&t, i), ptr_of(i));
    cr_assert_null(gs_idtab_del(&t, 0), "already removed");
    cr_assert_eq(t.len, 50000);
    for (uint64_t i = 0; i < 100000; i++)
        cr_assert_eq(gs_idtab_get(&t, i), i % 2 ? ptr_of(i) : NULL);
    for (uint64_t i = 1; i < 100000; i += 2) cr_assert(gs_idtab_del_if(&t, i, ptr_of(i)));
    cr_assert_eq(t.len, 0);
    cr_assert_eq(t.npages, 0, "empty pages are freed");
    gs_idtab_cleanup(&t);
}

Test(common_idtab, far_ids_go_to_the_map_and_bound_memory)
{
    gs_idtab_t t;
    gs_idtab_init(&t);
    /* one id per page, far apart: only the first pages are paged, the rest hashed */
    for (uint64_t i = 0; i < 10000; i++)
        cr_assert_eq(gs_idtab_swap(&t, i * 1000003ull, ptr_of(i), NULL), GS_OK);
    cr_assert_eq(t.len, 10000);
    cr_assert_leq(t.npages, GS_IDTAB_PAGES_BASE + t.len / 32);
    cr_assert_leq(t.ndir, GS_IDTAB_DIR_BASE + t.ninserts / 4);
    cr_assert_gt(t.sparse.len, 9000);
    cr_assert_eq(gs_idtab_swap(&t, UINT64_MAX - 2, ptr_of(7), NULL), GS_OK);
    cr_assert_eq(gs_idtab_get(&t, UINT64_MAX - 2), ptr_of(7));
    for (uint64_t i = 0; i < 10000; i++) cr_assert_eq(gs_idtab_get(&t, i * 1000003ull), ptr_of(i));
    gs_idtab_cleanup(&t);
}

Test(common_idtab, an_id_hashed_earlier_stays_hashed_when_its_page_appears)
{
    gs_idtab_t u;
    void *old = NULL;
    const uint64_t far = 2000ull * GS_IDTAB_PAGE;   /* beyond the directory's first bound */
    gs_idtab_init(&u);
    cr_assert_eq(gs_idtab_swap(&u, far, ptr_of(1), NULL), GS_OK);
    cr_assert_eq(u.sparse.len, 1);
    /* enough inserts that the directory may reach the far page */
    for (uint64_t i = 0; i < 8 * 2000ull; i++)
        cr_assert_eq(gs_idtab_swap(&u, i, ptr_of(i), NULL), GS_OK);
    cr_assert_eq(gs_idtab_swap(&u, far + 1, ptr_of(2), NULL), GS_OK);
    cr_assert_eq(u.sparse.len, 1, "the far page exists now");
    cr_assert_eq(gs_idtab_swap(&u, far, ptr_of(9), &old), GS_OK);
    cr_assert_eq(old, ptr_of(1), "replaced in the map, not duplicated in the page");
    cr_assert_eq(u.len, 8 * 2000ull + 2);
    cr_assert_eq(gs_idtab_get(&u, far), ptr_of(9));
    cr_assert_eq(gs_idtab_del(&u, far), ptr_of(9));
    cr_assert_null(gs_idtab_get(&u, far));
    cr_assert_eq(gs_idtab_get(&u, far + 1), ptr_of(2));
    gs_idtab_cleanup(&u);
}

Test(common_idtab, swap_returns_the_previous_entry_and_del_if_checks_it)
{
    gs_idtab_t t;
    void *old = ptr_of(99);
    gs_idtab_init(&t);
    cr_assert_eq(gs_idtab_swap(&t, 10, ptr_of(1), &old), GS_OK);
    cr_assert_null(old);
    cr_assert_eq(gs_idtab_swap(&t, 10, ptr_of(2), &old), GS_OK);
    cr_assert_eq(old, ptr_of(1));
    cr_assert_eq(t.len, 1);
    cr_assert_eq(gs_idtab_del_if(&t, 10, ptr_of(1)), 0);
    cr_assert_eq(gs_idtab_del_if(&t, 11, ptr_of(2)), 0);
    cr_assert_eq(gs_idtab_del_if(&t, 10, NULL), 0);
    cr_assert_eq(gs_idtab_del_if(&t, 10, ptr_of(2)), 1);
    cr_assert_null(gs_idtab_get(&t, 10));
    cr_assert_eq(gs_idtab_swap(&t, UINT64_MAX, ptr_of(1), NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_idtab_swap(&t, GS_U64MAP_TOMB, ptr_of(1), NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_idtab_swap(&t, 3, NULL, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(t.len, 0);
    gs_idtab_cleanup(&t);
}

Test(common_idtab, allocation_failure_leaves_the_table_unchanged)
{
    gs_idtab_t t;
    void *old = ptr_of(5);
    gs_idtab_init(&t);
    gs_alloc_fail_after(0);
    cr_assert_eq(gs_idtab_swap(&t, 5, ptr_of(1), &old), GS_ERR_NO_MEMORY);
    cr_assert_eq(gs_idtab_swap(&t, UINT64_MAX - 5, ptr_of(1), &old), GS_ERR_NO_MEMORY);
    gs_alloc_fail_after(-1);
    cr_assert_eq(old, ptr_of(5), "nothing written on failure");
    cr_assert_eq(t.len, 0);
    cr_assert_null(gs_idtab_get(&t, 5));
    cr_assert_eq(gs_idtab_swap(&t, 5, ptr_of(1), NULL), GS_OK);
    cr_assert_eq(gs_idtab_get(&t, 5), ptr_of(1));
    gs_idtab_cleanup(&t);
}

Test(common_idtab, iteration_sees_every_entry_once_and_allows_removal)
{
    gs_idtab_t t;
    gs_idtab_iter_t it = GS_IDTAB_ITER_INIT;
    uint64_t id, n = 0, sum = 0, want = 0;
    void *p;
    gs_idtab_init(&t);
    for (uint64_t i = 0; i < 5000; i += 3) {
        cr_assert_eq(gs_idtab_swap(&t, i, ptr_of(i), NULL), GS_OK);
        want += i;
    }
    cr_assert_eq(gs_idtab_swap(&t, 1ull << 60, ptr_of(1), NULL), GS_OK);   /* hashed */
    want += 1ull << 60;
    while (gs_idtab_next(&t, &it, &id, &p)) {
        cr_assert_eq(gs_idtab_get(&t, id), p);
        cr_assert_eq(gs_idtab_del(&t, id), p, "removing the current entry is allowed");
        n++;
        sum += id;
    }
    cr_assert_eq(n, 5000 / 3 + 1 + 1);
    cr_assert_eq(sum, want);
    cr_assert_eq(t.len, 0);
    gs_idtab_cleanup(&t);
}

Test(common_idtab, churn_across_a_page_boundary_reuses_the_spare_page)
{
    gs_idtab_t t;
    gs_idtab_init(&t);
    for (uint64_t i = 0; i < 4 * GS_IDTAB_PAGE; i++) {
        cr_assert_eq(gs_idtab_swap(&t, i, ptr_of(i), NULL), GS_OK);
        cr_assert_eq(gs_idtab_del(&t, i), ptr_of(i));
    }
    cr_assert_eq(t.npages, 0);
    cr_assert_not_null(t.spare);
    gs_alloc_fail_after(0);   /* the next page comes from the spare */
    cr_assert_eq(gs_idtab_swap(&t, 9 * GS_IDTAB_PAGE, ptr_of(1), NULL), GS_OK);
    gs_alloc_fail_after(-1);
    cr_assert_eq(gs_idtab_get(&t, 9 * GS_IDTAB_PAGE), ptr_of(1));
    gs_idtab_cleanup(&t);
}
