#include <criterion/criterion.h>
#include <stdint.h>

#include "common/alloc.h"
#include "common/vec.h"

Test(common_alloc, injected_failure_after_n)
{
    gs_alloc_fail_after(2);
    void *a = gs_malloc(8, "a");
    void *b = gs_malloc(8, "b");
    void *c = gs_malloc(8, "c");
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_null(c);
    cr_assert_eq(gs_alloc_injected_failures(), 1);
    gs_alloc_fail_after(-1);
    gs_free(a);
    gs_free(b);
}

Test(common_alloc, calloc_rejects_overflow)
{
    cr_assert_null(gs_calloc(SIZE_MAX / 2, 4, "big"));
    cr_assert_eq(gs_size_mul(SIZE_MAX / 2, 4), SIZE_MAX);
}

Test(common_vec, push_grows_and_failure_keeps_contents)
{
    GS_VEC(int) v = {0};
    for (int i = 0; i < 100; i++) cr_assert_eq(GS_VEC_PUSH(&v, i), GS_OK);
    cr_assert_eq(v.len, 100);
    cr_assert_eq(v.data[99], 99);
    gs_alloc_fail_after(0);
    while (v.len < v.cap) cr_assert_eq(GS_VEC_PUSH(&v, 7), GS_OK);
    size_t len = v.len;
    cr_assert_eq(GS_VEC_PUSH(&v, 1), GS_ERR_NO_MEMORY);
    cr_assert_eq(v.len, len);
    gs_alloc_fail_after(-1);
    cr_assert_eq(v.data[50], 50);
    GS_VEC_FREE(&v);
}
