#include <criterion/criterion.h>

#include "common/alloc.h"
#include "common/mpool.h"

#include <stdint.h>
#include <string.h>

Test(common_mpool, hands_out_distinct_aligned_objects_and_reuses_returned_ones)
{
    gs_mpool_t mp;
    void *objs[100];
    cr_assert_eq(gs_mpool_init(&mp, 40, 64, 16, "test pool"), GS_OK);
    cr_assert_eq(mp.obj_size, 64);
    for (int i = 0; i < 100; i++) {
        objs[i] = gs_mpool_get(&mp);
        cr_assert_not_null(objs[i]);
        cr_assert_eq((uintptr_t)objs[i] % 64, 0, "object %d not 64-byte aligned", i);
        memset(objs[i], i, 40);
    }
    cr_assert_eq(mp.nlive, 100);
    cr_assert_eq(mp.nslabs, 7);          /* ceil(100 / 16) */
    for (int i = 0; i < 100; i++) {
        const unsigned char *p = objs[i];
        for (int k = 0; k < 40; k++) cr_assert_eq(p[k], (unsigned char)i, "object %d overlapped", i);
    }
    gs_mpool_put(&mp, objs[42]);
    gs_mpool_put(&mp, NULL);
    cr_assert_eq(mp.nlive, 99);
    cr_assert_eq(gs_mpool_get(&mp), objs[42]);   /* last returned, first reused */
    for (int i = 0; i < 100; i++) gs_mpool_put(&mp, objs[i]);
    cr_assert_eq(mp.nlive, 0);
    for (int i = 0; i < 100; i++) cr_assert_not_null(gs_mpool_get(&mp));
    cr_assert_eq(mp.nslabs, 7, "a warm pool grew");
    gs_mpool_cleanup(&mp);
    cr_assert_eq(mp.nslabs, 0);
}

Test(common_mpool, rejects_bad_parameters)
{
    gs_mpool_t mp;
    cr_assert_eq(gs_mpool_init(&mp, 0, 8, 16, "p"), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_mpool_init(&mp, 8, 24, 16, "p"), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_mpool_init(&mp, 8, 8192, 16, "p"), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_mpool_init(&mp, 8, 8, 0, "p"), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_mpool_init(NULL, 8, 8, 16, "p"), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_mpool_init(&mp, 1, 0, 4, "p"), GS_OK);
    cr_assert_eq(mp.obj_size, sizeof(void *));
    gs_mpool_cleanup(&mp);
}

Test(common_mpool, a_failed_slab_leaves_the_pool_usable)
{
    gs_mpool_t mp;
    void *a, *b;
    cr_assert_eq(gs_mpool_init(&mp, 16, 0, 1, "p"), GS_OK);
    a = gs_mpool_get(&mp);
    cr_assert_not_null(a);
    gs_alloc_fail_after(0);
    cr_assert_null(gs_mpool_get(&mp));
    gs_alloc_fail_after(-1);
    cr_assert_eq(mp.nlive, 1);
    cr_assert_eq(mp.nslabs, 1);
    b = gs_mpool_get(&mp);
    cr_assert_not_null(b);
    cr_assert_neq(a, b);
    gs_mpool_put(&mp, a);
    gs_mpool_put(&mp, b);
    gs_mpool_cleanup(&mp);
}
