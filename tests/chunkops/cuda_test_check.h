/* The two checks every CUDA backend test uses: GPU_OR_SKIP() skips the test without a CUDA
 * device; CHECK(call) asserts that a gs_status_t call returned GS_OK, naming the call, the
 * status and gs_last_error(). Test-only and state-free, so a test that needs no more than these
 * (test_cuda_file.c) includes this rather than cuda_test_util.h. */
#ifndef GS_TESTS_CHUNKOPS_CUDA_TEST_CHECK_H
#define GS_TESTS_CHUNKOPS_CUDA_TEST_CHECK_H

#include <criterion/criterion.h>

#include "chunkops/cuda/cuda_backend.h"
#include <gsched/status.h>

#define GPU_OR_SKIP()                                                                  \
    do {                                                                               \
        if (gs__cuda_device_count() == 0) cr_skip_test("no CUDA device on this machine"); \
    } while (0)

#define CHECK(call)                                                                    \
    do {                                                                               \
        gs_status_t st_ = (call);                                                      \
        cr_assert_eq(st_, GS_OK, "%s: %s: %s", #call, gs_status_name(st_), gs_last_error()); \
    } while (0)

#endif
