#include <criterion/criterion.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"

Test(common_buf, append_and_detach)
{
    gs_buf_t b;
    gs_buf_init(&b);
    for (int i = 0; i < 1000; i++) cr_assert_eq(gs_buf_append(&b, "abcd", 4), GS_OK);
    cr_assert_eq(b.len, 4000);
    cr_assert(memcmp(b.data + 3996, "abcd", 4) == 0);
    size_t len;
    uint8_t *p = gs_buf_detach(&b, &len);
    cr_assert_eq(len, 4000);
    cr_assert_null(b.data);
    gs_free(p);
}

Test(common_buf, failed_growth_keeps_contents)
{
    gs_buf_t b;
    gs_buf_init(&b);
    cr_assert_eq(gs_buf_append(&b, "xy", 2), GS_OK);
    gs_alloc_fail_after(0);
    cr_assert_eq(gs_buf_append(&b, NULL, 1u << 20), GS_ERR_NO_MEMORY);
    gs_alloc_fail_after(-1);
    cr_assert_eq(b.len, 2);
    cr_assert(memcmp(b.data, "xy", 2) == 0);
    gs_buf_cleanup(&b);
}
