#include <criterion/criterion.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"

Test(common_status, every_status_has_distinct_string)
{
    cr_assert_str_eq(gs_status_string(GS_OK), "success");
    cr_assert_str_eq(gs_status_name(GS_ERR_PROTO), "GS_ERR_PROTO");
    cr_assert_str_neq(gs_status_string(GS_ERR_PROTO), gs_status_string(GS_ERR_CUDA));
    cr_assert_str_eq(gs_status_string((gs_status_t)-12345), "unknown status");
}

Test(common_status, error_message_is_thread_local_and_formatted)
{
    gs_status_t st = gs_error_set(GS_ERR_INVALID_PARAM, "step is 0 on axis %d", 1);
    cr_assert_eq(st, GS_ERR_INVALID_PARAM);
    cr_assert_str_eq(gs_last_error(), "step is 0 on axis 1");
    gs_error_clear();
    cr_assert_str_eq(gs_last_error(), "");
}

Test(common_log, parses_levels_and_rejects_unknown)
{
    gs_log_level_t l;
    cr_assert_eq(gs_log_level_parse("debug", &l), GS_OK);
    cr_assert_eq(l, GS_LOG_LEVEL_DEBUG);
    cr_assert_eq(gs_log_level_parse("loud", &l), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "loud") != NULL);
}
