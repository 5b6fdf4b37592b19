/* gs_array_stencil on real gsched + 2 CPU gworker processes on loopback: x persisted across both
 * workers, so the halos of most chunks come from the other worker as edge slabs (slab tasks run
 * where the chunk is; the slabs travel over UCX). Every boundary mode, odd chunks, chunks
 * thinner than the radius, a stencil of a stencil; references from the random definition
 * (reference.h) through tests/stencil_ref.h. */
#include "cluster.h"
#include "reference.h"
#include "../kernels/test_kernels_cuda.h"
#include "../stencil_ref.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TC_SUITE_CLUSTER(up2, 2, 180)

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

static void expect(gs_array_h a, const double *want, int64_t size, const char *what)
{
    double *got = gs_malloc((size_t)size * sizeof(double) + 8, "got");
    OK(gs_client_compute(C, a, got, (size_t)size));
    for (int64_t i = 0; i < size; i++)
        cr_assert(fabs(got[i] - want[i]) <= 1e-12 * fmax(1.0, fabs(want[i])),
                  "%s: element %lld: %.17g vs %.17g", what, (long long)i, got[i], want[i]);
    gs_free(got);
}

Test(integration_stencil, every_boundary_on_a_persisted_array, .init = up2, .fini = down)
{
    const int64_t shape[2] = {97, 83}, chunks[2] = {20, 17};
    const int r[2] = {1, 2};
    double w[15];
    for (int k = 0; k < 15; k++) w[k] = 0.1 * (double)(k + 1) - 0.7;
    gs_array_h x;
    OK(gs_array_random_normal(5, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_persist(C, x));
    ref_t rx = ref_normal(5, 0, 1, 2, shape);
    double *want = gs_malloc((size_t)rx.size * sizeof(double), "want");
    static const char *const names[] = {"none", "reflect", "periodic", "constant"};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) {
        gs_array_h s;
        OK(gs_array_stencil(x, w, r, (gs_boundary_t)b, -0.5, &s));
        ref_stencil(rx.v, 2, shape, w, r, b, -0.5, want);
        expect(s, want, rx.size, names[b]);
        gs_array_release(s);
    }
    gs_free(want);
    ref_free(&rx);
    OK(gs_client_unpersist(C, x));
    gs_array_release(x);
}

Test(integration_stencil, thin_chunks_and_a_stencil_of_a_stencil, .init = up2, .fini = down)
{
    const int64_t shape[2] = {31, 26}, chunks[2] = {2, 3};
    const int r[2] = {3, 1};
    double w[21];
    for (int k = 0; k < 21; k++) w[k] = 1.0 / 21.0 + 0.01 * (double)(k % 4);
    gs_array_h x, s1, s2;
    OK(gs_array_random_normal(8, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_persist(C, x));
    OK(gs_array_stencil(x, w, r, GS_BOUNDARY_REFLECT, 0, &s1));
    OK(gs_array_stencil(s1, w, r, GS_BOUNDARY_PERIODIC, 0, &s2));
    ref_t rx = ref_normal(8, 0, 1, 2, shape);
    double *a = gs_malloc((size_t)rx.size * sizeof(double), "a");
    double *b = gs_malloc((size_t)rx.size * sizeof(double), "b");
    ref_stencil(rx.v, 2, shape, w, r, GS_BOUNDARY_REFLECT, 0, a);
    ref_stencil(a, 2, shape, w, r, GS_BOUNDARY_PERIODIC, 0, b);
    expect(s2, b, rx.size, "stencil of a stencil");
    gs_free(a);
    gs_free(b);
    ref_free(&rx);
    gs_array_release(s2);
    gs_array_release(s1);
    OK(gs_client_unpersist(C, x));
    gs_array_release(x);
}

/* map_overlap with users' kernels on the workers: a kernel that crashes fails the job with
 * the kernel's name and the signal, and the same workers then run a good kernel. GPU workers
 * ($GS_TEST_BACKEND=cuda) stage the kernels through host memory (chunkops/stage.c). */
Test(integration_stencil, a_crashing_user_kernel_fails_the_job_not_the_workers, .init = up2,
     .fini = down)
{
    const int64_t shape[2] = {40, 30}, chunks[2] = {10, 10};
    const int d[2] = {1, 1};
    static const double mean9[9] = {1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9,
                                    1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9};
    gs_user_kernel_t bad = {GS_TEST_KERNELS, "gs_test_crash", NULL, 0, NULL, 0};
    gs_user_kernel_t good = {GS_TEST_KERNELS, "gs_test_smooth3x3", NULL, 0, NULL, 0};
    gs_array_h x, m, g, s;
    double *a = gs_malloc(1200 * sizeof(double), "a"), *b = gs_malloc(1200 * sizeof(double), "b");
    OK(gs_array_random_normal(9, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_persist(C, x));
    OK(gs_array_map_overlap(&bad, x, d, GS_BOUNDARY_PERIODIC, 0, &m));
    gs_status_t st = gs_client_compute(C, m, a, 1200);
    cr_assert_neq(st, GS_OK);
    cr_assert(strstr(gs_last_error(), "gs_test_crash") != NULL, "%s: %s", gs_status_name(st),
              gs_last_error());
    cr_assert_eq(gs_client_nworkers(C), 2, "a worker died");
    OK(gs_array_map_overlap(&good, x, d, GS_BOUNDARY_PERIODIC, 0, &g));
    OK(gs_array_stencil(x, mean9, d, GS_BOUNDARY_PERIODIC, 0, &s));
    OK(gs_client_compute(C, g, a, 1200));
    OK(gs_client_compute(C, s, b, 1200));
    for (int i = 0; i < 1200; i++) cr_assert(a[i] == b[i], "element %d: %.17g vs %.17g", i, a[i], b[i]);
    gs_free(a);
    gs_free(b);
    gs_array_release(s);
    gs_array_release(g);
    gs_array_release(m);
    OK(gs_client_unpersist(C, x));
    gs_array_release(x);
}

/* map_blocks with CUDA C++ source (NVRTC on the workers): with GPU workers
 * ($GS_TEST_BACKEND=cuda) equal to the built-in x + x and a compile error reported with the
 * NVRTC log naming the line; CPU workers refuse it with a clear error. Either way the workers
 * carry on. */
Test(integration_stencil, a_cuda_source_kernel_runs_on_gpu_workers_and_is_refused_by_cpu_ones,
     .init = up2, .fini = down)
{
    const int64_t shape[2] = {50, 30}, chunks[2] = {20, 10};
    static const char src[] =
        "extern \"C\" __global__ void twice(gs_cuda_args_t a)\n"
        "{\n"
        "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i < a.n_out) a.out.data[i] = 2.0 * a.in[0].data[i];\n"
        "}\n";
    static const char broken[] =
        "extern \"C\" __global__ void twice(gs_cuda_args_t a)\n"
        "{\n"
        "    no_such_variable = 1;\n"
        "}\n";
    gs_user_kernel_t k = {NULL, "twice", NULL, 0, src, 0}, kb = {NULL, "twice", NULL, 0, broken, 0};
    const char *be = getenv("GS_TEST_BACKEND");
    int gpu = be != NULL && strcmp(be, "cuda") == 0;
    gs_array_h x, m, s, mb;
    double *a = gs_malloc(1500 * sizeof(double), "a"), *b = gs_malloc(1500 * sizeof(double), "b");
    OK(gs_array_random_normal(11, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_persist(C, x));
    OK(gs_array_map_blocks(&k, 1, &x, 2, shape, chunks, &m));
    OK(gs_array_map_blocks(&kb, 1, &x, 2, shape, chunks, &mb));
    OK(gs_array_binary(GS_BINARY_ADD, x, x, &s));
    if (gpu) {
        OK(gs_client_compute(C, m, a, 1500));
        OK(gs_client_compute(C, s, b, 1500));
        for (int i = 0; i < 1500; i++)
            cr_assert(a[i] == b[i], "element %d: %.17g vs %.17g", i, a[i], b[i]);
        gs_status_t st = gs_client_compute(C, mb, a, 1500);
        cr_assert_neq(st, GS_OK);
        cr_assert(strstr(gs_last_error(), "does not compile") != NULL &&
                      strstr(gs_last_error(), "twice.cu(3)") != NULL,
                  "%s: %s", gs_status_name(st), gs_last_error());
    } else {
        gs_status_t st = gs_client_compute(C, m, a, 1500);
        cr_assert_neq(st, GS_OK);
        cr_assert(strstr(gs_last_error(), "runs no CUDA kernels") != NULL, "%s: %s",
                  gs_status_name(st), gs_last_error());
    }
    cr_assert_eq(gs_client_nworkers(C), 2, "a worker died");
    OK(gs_client_compute(C, s, b, 1500));
    gs_free(a);
    gs_free(b);
    gs_array_release(s);
    gs_array_release(mb);
    gs_array_release(m);
    OK(gs_client_unpersist(C, x));
    gs_array_release(x);
}

/* map_overlap with CUDA C++ source: x persisted across both workers, so most halos arrive as
 * edge slabs from the other worker. With GPU workers ($GS_TEST_BACKEND=cuda) the padded block
 * is assembled in device memory and the NVRTC 3x3 mean (products and sums rounded apart) on
 * it equals the built-in stencil bit for bit, for every boundary; CPU workers refuse it with
 * GS_ERR_UNSUPPORTED's message and carry on. */
Test(integration_stencil, a_cuda_map_overlap_runs_on_gpu_workers_and_is_refused_by_cpu_ones,
     .init = up2, .fini = down)
{
    const int64_t shape[2] = {53, 31}, chunks[2] = {20, 9};
    const int d[2] = {1, 1};
    static const double mean9[9] = {1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9,
                                    1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9};
    static const char src[] = GS_TEST_SMOOTH3X3_CUDA_SRC;
    const char *be = getenv("GS_TEST_BACKEND");
    int gpu = be != NULL && strcmp(be, "cuda") == 0;
    gs_array_h x;
    double *a = gs_malloc(53 * 31 * sizeof(double), "a");
    double *b = gs_malloc(53 * 31 * sizeof(double), "b");
    OK(gs_array_random_normal(13, 0, 1, 2, shape, chunks, &x));
    OK(gs_client_persist(C, x));
    for (int bnd = 0; bnd < GS_BOUNDARY_COUNT; bnd++) {
        gs_user_kernel_t k = {NULL, "smooth3x3", NULL, 0, src, 0};
        gs_array_h m, s;
        if (bnd == GS_BOUNDARY_NONE) {   /* the kernel keeps the edges itself */
            k.arg = shape;
            k.arg_len = sizeof(shape);
        }
        OK(gs_array_map_overlap(&k, x, d, (gs_boundary_t)bnd, 0.75, &m));
        OK(gs_array_stencil(x, mean9, d, (gs_boundary_t)bnd, 0.75, &s));
        OK(gs_client_compute(C, s, b, 53 * 31));
        if (gpu) {
            OK(gs_client_compute(C, m, a, 53 * 31));
            for (int i = 0; i < 53 * 31; i++)
                cr_assert(memcmp(&a[i], &b[i], sizeof(double)) == 0,
                          "boundary %d, element %d: kernel %.17g, stencil %.17g", bnd, i, a[i],
                          b[i]);
        } else {
            gs_status_t st = gs_client_compute(C, m, a, 53 * 31);
            cr_assert_neq(st, GS_OK);
            cr_assert(strstr(gs_last_error(), "runs no CUDA kernels") != NULL, "%s: %s",
                      gs_status_name(st), gs_last_error());
        }
        gs_array_release(m);
        gs_array_release(s);
    }
    cr_assert_eq(gs_client_nworkers(C), 2, "a worker died");
    gs_free(a);
    gs_free(b);
    OK(gs_client_unpersist(C, x));
    gs_array_release(x);
}
