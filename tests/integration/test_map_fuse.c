/* Elementwise user kernels fused in chains (GS_KERNEL_ELEMENTWISE, graph/lower_fuse_user.c) on
 * real gsched + 2 CPU gworker processes on loopback: exp(x) + 1 -> kernel -> * 2 (and its sum)
 * gives exactly the values of the unfused graph (a
 * client lowering without GS_LOWER_FUSE) with one task per chunk; a kernel that crashes inside
 * a fused task fails the job with the kernel's name and signal, and the same workers go on. */
#include "cluster.h"
#include "common/alloc.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

TC_SUITE_CLUSTER(up2, 2, 180)

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

/* Compute @a a into @a out (n elements) through client @a c; its tasks in *ntasks_p. */
static void compute(gs_client_h c, gs_array_h a, void *out, size_t n, uint64_t *ntasks_p)
{
    gs_compute_result_t r = {a, GS_RESULT_GATHER, out, n};
    gs_compute_stats_t st;
    OK(gs_client_compute_many(c, 1, &r, &st));
    *ntasks_p = st.ntasks;
}

/* exp(x) + 1 -> kernel(mode) -> * 2 over @a x (the caller releases the result) */
static gs_array_h chain(gs_array_h x, const char *sym, const int64_t *shape, const int64_t *chunks)
{
    gs_user_kernel_t k = {GS_TEST_KERNELS, sym, NULL, 0, NULL, GS_KERNEL_ELEMENTWISE};
    gs_array_h e, a, m, c;
    OK(gs_array_unary(GS_UNARY_EXP, x, &e));
    OK(gs_array_binary_scalar(GS_BINARY_ADD, e, 1.0, &a));
    OK(gs_array_map_blocks(&k, 1, &a, 2, shape, chunks, &m));
    OK(gs_array_binary_scalar(GS_BINARY_MUL, m, 2.0, &c));
    gs_array_release(e);
    gs_array_release(a);
    gs_array_release(m);
    return c;
}

Test(integration_map_fuse, a_fused_chain_equals_the_unfused_one_in_one_task_per_chunk,
     .init = up2, .fini = down)
{
    const int64_t shape[2] = {120, 90}, chunks[2] = {30, 30};   /* 4 x 3 chunks */
    const size_t n = 120 * 90;
    gs_client_h plain = tc_connect(&CL, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE);
    gs_array_h x, c, s;
    double *a = gs_malloc(n * sizeof(double), "a"), *b = gs_malloc(n * sizeof(double), "b");
    double sa = 0, sb = 0;
    uint64_t ta, tb, tsa, tsb;
    cr_assert_not_null(plain, "%s", gs_last_error());
    OK(gs_array_random_normal(21, 0, 0.5, 2, shape, chunks, &x));
    c = chain(x, "gs_test_ew", shape, chunks);
    OK(gs_array_reduce(GS_RED_SUM, c, NULL, &s));
    compute(C, c, a, n, &ta);
    compute(plain, c, b, n, &tb);
    for (size_t i = 0; i < n; i++)
        cr_assert(a[i] == b[i], "element %zu: %.17g vs %.17g", i, a[i], b[i]);
    /* fused: one task per chunk; unfused: the generator, exp, + 1, the kernel and * 2 */
    cr_assert_eq(ta, 12, "%llu tasks fused", (unsigned long long)ta);
    cr_assert_eq(tb, 5 * 12, "%llu tasks unfused", (unsigned long long)tb);
    compute(C, s, &sa, 1, &tsa);
    compute(plain, s, &sb, 1, &tsb);
    cr_assert(fabs(sa - sb) <= 1e-12 * fabs(sb), "%.17g vs %.17g", sa, sb);
    /* the same combine tree; unfused, the partial sums are a sixth task per chunk */
    cr_assert_eq(tsa + 5 * 12, tsb, "%llu vs %llu tasks", (unsigned long long)tsa,
                 (unsigned long long)tsb);
    gs_array_release(s);
    gs_array_release(c);
    gs_array_release(x);
    gs_client_destroy(plain);
    gs_free(a);
    gs_free(b);
}

/* The client hints its CPU workers' threads to the lowering (gs_lower_hints_t; 2 workers of
 * 1 thread here): 2 x 3 blocks are fewer than GS_LOWER_USER_FUSE_TASKS_PER_THREAD per thread,
 * so the CPU kernel is not fused: its producers (generator, exp, + 1) are one task per block,
 * the kernel one, the consumer one; the values are the unfused client's. */
Test(integration_map_fuse, too_few_blocks_for_the_cpu_pool_keep_the_kernel_unfused,
     .init = up2, .fini = down)
{
    const int64_t shape[2] = {60, 90}, chunks[2] = {30, 30};   /* 2 x 3 chunks */
    const size_t n = 60 * 90;
    if (getenv("GS_TEST_BACKEND") != NULL && strcmp(getenv("GS_TEST_BACKEND"), "cuda") == 0)
        cr_skip_test("the hint counts CPU workers' threads; these workers are CUDA workers");
    gs_client_h plain = tc_connect(&CL, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE);
    gs_array_h x, c;
    double *a = gs_malloc(n * sizeof(double), "a"), *b = gs_malloc(n * sizeof(double), "b");
    uint64_t ta, tb;
    cr_assert_not_null(plain, "%s", gs_last_error());
    OK(gs_array_random_normal(22, 0, 0.5, 2, shape, chunks, &x));
    c = chain(x, "gs_test_ew", shape, chunks);
    compute(C, c, a, n, &ta);
    compute(plain, c, b, n, &tb);
    for (size_t i = 0; i < n; i++)
        cr_assert(a[i] == b[i], "element %zu: %.17g vs %.17g", i, a[i], b[i]);
    cr_assert_eq(ta, 3 * 6, "%llu tasks with the hint", (unsigned long long)ta);
    cr_assert_eq(tb, 5 * 6, "%llu tasks unfused", (unsigned long long)tb);
    gs_array_release(c);
    gs_array_release(x);
    gs_client_destroy(plain);
    gs_free(a);
    gs_free(b);
}

Test(integration_map_fuse, a_crash_inside_a_fused_task_fails_the_job_not_the_workers,
     .init = up2, .fini = down)
{
    const int64_t shape[2] = {60, 60}, chunks[2] = {20, 30};
    gs_array_h x, bad, good, sb;
    double v = 0;
    gs_status_t st;
    OK(gs_array_random_uniform(22, -1, 1, 2, shape, chunks, &x));
    bad = chain(x, "gs_test_crash", shape, chunks);
    OK(gs_array_reduce(GS_RED_SUM, bad, NULL, &sb));
    st = gs_client_compute_scalar(C, sb, &v);
    cr_assert_eq(st, GS_ERR_TASK_FAILED, "%s: %s", gs_status_name(st), gs_last_error());
    cr_assert(strstr(gs_last_error(), "gs_test_crash") != NULL, "%s", gs_last_error());
    cr_assert(strstr(gs_last_error(), "signal") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_client_nworkers(C), 2, "a worker died");
    good = chain(x, "gs_test_ew", shape, chunks);
    double *a = gs_malloc(3600 * sizeof(double), "a");
    OK(gs_client_compute(C, good, a, 3600));
    for (int i = 0; i < 3600; i++) cr_assert(isfinite(a[i]) && a[i] > 0, "element %d", i);
    gs_free(a);
    gs_array_release(good);
    gs_array_release(sb);
    gs_array_release(bad);
    gs_array_release(x);
}

/* A fused task that reads one chunk twice (input 0's producer reads the host array p, input 1
 * is p itself): the same values as unfused. */
Test(integration_map_fuse, a_fused_task_may_read_one_chunk_twice, .init = up2, .fini = down)
{
    /* 8 blocks: enough for the fusion on 2 one-thread CPU workers (gs_lower_hints_t) */
    const int64_t shape[2] = {40, 50}, chunks[2] = {10, 25};
    gs_user_kernel_t k = {GS_TEST_KERNELS, "gs_test_ew", NULL, 0, NULL, GS_KERNEL_ELEMENTWISE};
    gs_client_h plain = tc_connect(&CL, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE);
    double *v = gs_malloc(2000 * sizeof(double), "v"), a[2000], b[2000];
    gs_array_h p, in[2], m;
    uint64_t ta, tb;
    cr_assert_not_null(plain, "%s", gs_last_error());
    for (int i = 0; i < 2000; i++) v[i] = 0.001 * (double)i - 0.7;
    OK(gs_array_from_host(v, 2, shape, chunks, &p));
    OK(gs_array_binary_scalar(GS_BINARY_ADD, p, 1.0, &in[0]));
    in[1] = p;
    OK(gs_array_map_blocks(&k, 2, in, 2, shape, chunks, &m));
    compute(C, m, a, 2000, &ta);
    compute(plain, m, b, 2000, &tb);
    for (int i = 0; i < 2000; i++) {
        double want = (v[i] + 1.0) * (v[i] + 1.0) - v[i] + (double)((i / 50) / 10 * 10) / 1000.0;
        cr_assert(a[i] == b[i] && a[i] == want, "element %d: %.17g %.17g %.17g", i, a[i], b[i], want);
    }
    cr_assert_eq(ta, 8 + 8, "%llu", (unsigned long long)ta);       /* p's chunks + fused */
    cr_assert_eq(tb, 8 + 8 + 8, "%llu", (unsigned long long)tb);   /* p, + 1, the kernel */
    gs_array_release(m);
    gs_array_release(in[0]);
    gs_array_release(p);
    gs_client_destroy(plain);
    gs_free(v);
}

/* Typed user kernels on real workers (gs_array_map_blocks_dtype): an int32 and a uint8 input
 * (astype producers) into an int32 output, fused (64 blocks: enough for the CPU pool) and
 * unfused, gathered as int32 and equal to gs_test_typed's plain-C twin. */
Test(integration_map_fuse, typed_blocks_travel_between_workers, .init = up2, .fini = down)
{
    const int64_t shape[2] = {64, 48}, chunks[2] = {8, 6};   /* 8 x 8 blocks */
    const size_t n = 64 * 48;
    gs_user_kernel_t k = {GS_TEST_KERNELS, "gs_test_typed", NULL, 0, NULL,
                          GS_KERNEL_ELEMENTWISE};
    gs_client_h plain = tc_connect(&CL, GS_LOWER_DEFAULT & ~GS_LOWER_FUSE);
    double *v = gs_malloc(n * sizeof(double), "v");
    int32_t *a = gs_malloc(n * sizeof(int32_t), "a"), *b = gs_malloc(n * sizeof(int32_t), "b");
    gs_array_h x, in[2], m;
    uint64_t ta, tb;
    cr_assert_not_null(plain, "%s", gs_last_error());
    for (size_t i = 0; i < n; i++) v[i] = (double)((int64_t)(i * 37) % 300 - 40);
    OK(gs_array_from_host(v, 2, shape, chunks, &x));
    OK(gs_array_astype(x, GS_DTYPE_INT32, &in[0]));
    OK(gs_array_astype(x, GS_DTYPE_UINT8, &in[1]));   /* -40..-1 wrap to 216..255 */
    OK(gs_array_map_blocks_dtype(&k, 2, in, GS_DTYPE_INT32, 2, shape, chunks, &m));
    compute(C, m, a, n, &ta);
    compute(plain, m, b, n, &tb);
    for (size_t i = 0; i < n; i++) {
        int32_t x0 = (int32_t)v[i], want = 2 * x0 + (uint8_t)x0 + (int32_t)(i / 48);
        cr_assert(a[i] == want && b[i] == want, "element %zu: %d %d, want %d", i, a[i], b[i], want);
    }
    cr_assert_eq(ta, 64 + 64, "%llu", (unsigned long long)ta);   /* x's chunks + fused */
    cr_assert_eq(tb, 64 * 4, "%llu", (unsigned long long)tb);    /* x, 2 astypes, kernel */
    gs_array_release(m);
    gs_array_release(in[0]);
    gs_array_release(in[1]);
    gs_array_release(x);
    gs_client_destroy(plain);
    gs_free(v);
    gs_free(a);
    gs_free(b);
}
