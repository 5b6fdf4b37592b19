/* The CUDA STENCIL kernel against the CPU backend (bit for bit: both sum the weights in
 * row-major order without fused multiply-adds) and the plain-C reference (tests/stencil_ref.h):
 * whole task graphs (slab tasks, halo pieces, reflected strides) evaluated on each backend.
 * Skips without a device. */
#include "cuda_test_util.h"
#include "../kernels/test_kernels_cuda.h"
#include "../stencil_ref.h"

#include "chunkops/eval.h"
#include "graph/taskgraph.h"

#include <gsched/array.h>

TestSuite(cuda_stencil, .timeout = 300);

/* x: values of a uniform random array; s = stencil(x); both backends and the reference. */
static void run_case(int nd, const int64_t *shape, const int64_t *chunks, const int *r, int b,
                     double cval)
{
    bk_t bk;
    int64_t nw = 1, size = 1;
    for (int j = 0; j < nd; j++) {
        nw *= 2 * r[j] + 1;
        size *= shape[j];
    }
    double *w = malloc((size_t)nw * sizeof(double));
    for (int64_t k = 0; k < nw; k++) w[k] = 0.5 - 0.0625 * (double)(k % 5) + 0.01 * (double)k;
    gs_array_h x, s;
    gs_taskgraph_t *tg;
    CHECK(gs_array_random_uniform(11, -1.0, 1.0, nd, shape, chunks, &x));
    CHECK(gs_array_stencil(x, w, r, (gs_boundary_t)b, cval, &s));
    CHECK(gs_graph_lower(s, GS_LOWER_DEFAULT, &tg));
    double *xv = malloc((size_t)size * sizeof(double)), *ref = malloc((size_t)size * sizeof(double));
    double *gc = malloc((size_t)size * sizeof(double)), *gg = malloc((size_t)size * sizeof(double));
    for (int64_t i = 0; i < size; i++) xv[i] = gs_random_uniform(11, (uint64_t)i, -1.0, 1.0);
    ref_stencil(xv, nd, shape, w, r, b, cval, ref);
    bk_open(&bk, (size_t)1 << 30);
    CHECK(gs_chunkops_eval(CPU, bk.cpu, tg, gc, (size_t)size));
    CHECK(gs_chunkops_eval(GPU, bk.gpu, tg, gg, (size_t)size));
    for (int64_t i = 0; i < size; i++) {
        cr_assert(bits_equal(gg[i], gc[i]), "boundary %d: element %lld gpu %.17g cpu %.17g", b,
                  (long long)i, gg[i], gc[i]);
        cr_assert(fabs(gg[i] - ref[i]) <= 1e-12 * fmax(1.0, fabs(ref[i])),
                  "boundary %d: element %lld gpu %.17g reference %.17g", b, (long long)i, gg[i],
                  ref[i]);
    }
    bk_close(&bk);
    gs_taskgraph_free(tg);
    gs_array_release(s);
    gs_array_release(x);
    free(w);
    free(xv);
    free(ref);
    free(gc);
    free(gg);
}

Test(cuda_stencil, smoothing_3x3_every_boundary_odd_chunks)
{
    GPU_OR_SKIP();
    const int64_t shape[2] = {523, 301}, chunks[2] = {200, 97};
    const int r[2] = {1, 1};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) run_case(2, shape, chunks, r, b, 0.25);
}

Test(cuda_stencil, one_and_three_axes_unequal_radii)
{
    GPU_OR_SKIP();
    const int64_t s1[1] = {5001}, c1[1] = {1234};
    const int r1[1] = {4};
    const int64_t s3[3] = {17, 40, 70}, c3[3] = {6, 13, 33};
    const int r3[3] = {1, 2, 1};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) {
        run_case(1, s1, c1, r1, b, -1.0);
        run_case(3, s3, c3, r3, b, 2.0);
    }
}

Test(cuda_stencil, chunks_thinner_than_the_halo)
{
    GPU_OR_SKIP();
    const int64_t shape[2] = {29, 40}, chunks[2] = {2, 3};
    const int r[2] = {3, 4};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) run_case(2, shape, chunks, r, b, 1.5);
}

Test(cuda_stencil, wide_radius_beyond_default_shared_memory)
{
    GPU_OR_SKIP();
    /* 1 x 341 weights: a 16 x (64 + 340) tile of doubles is 51.7 KB, past the 48 KB default */
    const int64_t shape[2] = {70, 900}, chunks[2] = {33, 400};
    const int r[2] = {0, 170};
    run_case(2, shape, chunks, r, GS_BOUNDARY_PERIODIC, 0.0);
}

Test(cuda_stencil, four_axes_are_unsupported_not_wrong)
{
    GPU_OR_SKIP();
    bk_t bk;
    double in[16], wt[3] = {1, 1, 1};
    gs_kstencil_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 4;
    for (int j = 0; j < 4; j++) k.shape[j] = 2;
    k.radius[3] = 1;
    k.nweights = 3;
    k.weights = wt;
    bk_open(&bk, (size_t)1 << 28);
    double *d = dev_alloc_poisoned(&bk, 16);
    k.out = d;
    k.npieces = 1;
    k.pieces[0].src = d;
    k.pieces[0].src_len = 16;
    k.pieces[0].src_stride[0] = 8;
    k.pieces[0].src_stride[1] = 4;
    k.pieces[0].src_stride[2] = 2;
    k.pieces[0].src_stride[3] = 1;
    for (int j = 0; j < 4; j++) k.pieces[0].size[j] = 2;
    k.pieces[0].dst_start[3] = 1;
    cr_assert_eq(GPU->stencil(bk.gpu, bk.gs, &k), GS_ERR_UNSUPPORTED);
    k.ndim = 3;   /* the spec no longer matches its pieces: refused before any launch */
    cr_assert_eq(GPU->stencil(bk.gpu, bk.gs, &k), GS_ERR_INVALID_PARAM);
    dev_download(&bk, in, d, 16);
    cr_assert(in[0] == -12345.678, "a refused stencil wrote its output");
    GPU->mem_free(bk.gpu, d);
    bk_close(&bk);
}

Test(cuda_stencil, user_kernels_are_refused_on_the_gpu)
{
    GPU_OR_SKIP();
    bk_t bk;
    double wt[1] = {1};
    gs_kstencil_t k;
    gs_kuser_t u;
    memset(&k, 0, sizeof(k));
    memset(&u, 0, sizeof(u));
    bk_open(&bk, (size_t)1 << 28);
    double *d = dev_alloc_poisoned(&bk, 4);
    k.ndim = 1;
    k.shape[0] = 4;
    k.out = d;
    k.user_lib = "/nonexistent/lib.so";
    k.user_sym = "f";
    cr_assert_eq(GPU->stencil(bk.gpu, bk.gs, &k), GS_ERR_UNSUPPORTED);
    k.user_lib = NULL;   /* the same spec with weights runs */
    k.nweights = 1;
    k.weights = wt;
    CHECK(GPU->stencil(bk.gpu, bk.gs, &k));
    /* map_blocks: the cuda backend has no user op; run_ktask stages the kernel through host
     * memory (chunkops/stage.c), which refuses a spec without a library */
    gs_ktask_t t;
    memset(&t, 0, sizeof(t));
    t.kind = GS_KTASK_USER;
    t.u.user = u;
    t.u.user.sym = "f";
    cr_assert_eq(gs_chunkops_run_ktask(GPU, bk.gpu, bk.gs, &t), GS_ERR_INVALID_PARAM);
    GPU->mem_free(bk.gpu, d);
    bk_close(&bk);
}

/* Users' CPU kernels on the GPU: gs_chunkops_run_ktask stages them through host memory
 * (chunkops/stage.c: copy_to_host, the CPU backend's forked-child call, copy_from_host).
 * map_overlap and map_blocks graphs give the CPU backend's values bit for bit; a crashing
 * kernel fails its task and the context then runs a good one. */
Test(cuda_stencil, users_kernels_are_staged_through_host_memory)
{
    GPU_OR_SKIP();
    bk_t bk;
    const int64_t shape[2] = {40, 30}, chunks[2] = {10, 10};
    const int d[2] = {1, 1};
    gs_user_kernel_t good = {GS_TEST_KERNELS, "gs_test_smooth3x3", NULL, 0, NULL, 0};
    gs_user_kernel_t add = {GS_TEST_KERNELS, "gs_test_add", NULL, 0, NULL, 0};
    gs_user_kernel_t bad = {GS_TEST_KERNELS, "gs_test_crash", NULL, 0, NULL, 0};
    gs_array_h x, y, arr[3];
    gs_taskgraph_t *tg;
    double gc[1200], gg[1200];
    CHECK(gs_array_random_uniform(11, -1.0, 1.0, 2, shape, chunks, &x));
    CHECK(gs_array_random_uniform(12, -1.0, 1.0, 2, shape, chunks, &y));
    gs_array_h in2[2] = {x, y};
    CHECK(gs_array_map_overlap(&good, x, d, GS_BOUNDARY_PERIODIC, 0, &arr[0]));
    CHECK(gs_array_map_blocks(&add, 2, in2, 2, shape, chunks, &arr[1]));
    CHECK(gs_array_map_overlap(&bad, x, d, GS_BOUNDARY_PERIODIC, 0, &arr[2]));
    bk_open(&bk, (size_t)1 << 28);
    for (int k = 0; k < 2; k++) {
        CHECK(gs_graph_lower(arr[k], GS_LOWER_DEFAULT, &tg));
        CHECK(gs_chunkops_eval(CPU, bk.cpu, tg, gc, 1200));
        CHECK(gs_chunkops_eval(GPU, bk.gpu, tg, gg, 1200));
        gs_taskgraph_free(tg);
        for (int i = 0; i < 1200; i++)
            cr_assert(bits_equal(gg[i], gc[i]), "kernel %d, element %d: gpu %.17g cpu %.17g", k,
                      i, gg[i], gc[i]);
    }
    CHECK(gs_graph_lower(arr[2], GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(gs_chunkops_eval(GPU, bk.gpu, tg, gg, 1200), GS_ERR_TASK_FAILED);
    cr_assert(strstr(gs_last_error(), "gs_test_crash") != NULL, "message: %s", gs_last_error());
    gs_taskgraph_free(tg);
    CHECK(gs_graph_lower(arr[0], GS_LOWER_DEFAULT, &tg));
    CHECK(gs_chunkops_eval(GPU, bk.gpu, tg, gg, 1200));
    gs_taskgraph_free(tg);
    bk_close(&bk);
    for (int k = 0; k < 3; k++) gs_array_release(arr[k]);
    gs_array_release(y);
    gs_array_release(x);
}

/* exp(x) + 1 -> elementwise kernel -> * 2 (and its sum) with the kernel fused between the
 * fused producer and consumer kernels (graph/lower_fuse_user.c; chunkops/ktask.c): an NVRTC
 * kernel launched on the stream between them, and the C kernel gs_test_ew staged through host
 * memory, both equal to the CPU backend's values of the same chain with gs_test_ew (within
 * 1e-13: the GPU's exp is not glibc's), one task per chunk. */
static const char k_ew[] = GS_TEST_EW_CUDA_SRC;

static gs_array_h ew_chain(const gs_user_kernel_t *k, gs_array_h x, const int64_t *shape,
                           const int64_t *chunks, gs_array_h *sum_p)
{
    gs_array_h e, a, m, c;
    CHECK(gs_array_unary(GS_UNARY_EXP, x, &e));
    CHECK(gs_array_binary_scalar(GS_BINARY_ADD, e, 1.0, &a));
    CHECK(gs_array_map_blocks(k, 1, &a, 2, shape, chunks, &m));
    CHECK(gs_array_binary_scalar(GS_BINARY_MUL, m, 2.0, &c));
    CHECK(gs_array_reduce(GS_RED_SUM, c, NULL, sum_p));
    gs_array_release(e);
    gs_array_release(a);
    gs_array_release(m);
    return c;
}

Test(cuda_stencil, an_elementwise_cuda_kernel_fused_in_a_chain_equals_the_cpu_result)
{
    GPU_OR_SKIP();
    bk_t bk;
    const int64_t shape[2] = {300, 170}, chunks[2] = {64, 50}, n = 300 * 170, nb = 5 * 4;
    gs_user_kernel_t kc = {GS_TEST_KERNELS, "gs_test_ew", NULL, 0, NULL, GS_KERNEL_ELEMENTWISE};
    gs_user_kernel_t kg = {NULL, "ew", NULL, 0, k_ew, GS_KERNEL_ELEMENTWISE};
    gs_array_h x, cc, sc, cg, sg, cs, ss;
    gs_taskgraph_t *tg;
    double *ref = malloc(sizeof(double) * n), *got = malloc(sizeof(double) * n);
    double sref = 0, sgot = 0;
    CHECK(gs_array_random_uniform(31, -1.0, 1.0, 2, shape, chunks, &x));
    cc = ew_chain(&kc, x, shape, chunks, &sc);
    cg = ew_chain(&kg, x, shape, chunks, &sg);
    cs = ew_chain(&kc, x, shape, chunks, &ss);   /* the C kernel, staged on the GPU */
    bk_open(&bk, (size_t)1 << 30);
    CHECK(gs_graph_lower(cc, GS_LOWER_DEFAULT, &tg));
    CHECK(gs_chunkops_eval(CPU, bk.cpu, tg, ref, (size_t)n));
    gs_taskgraph_free(tg);
    CHECK(gs_graph_lower(sc, GS_LOWER_DEFAULT, &tg));
    CHECK(gs_chunkops_eval(CPU, bk.cpu, tg, &sref, 1));
    gs_taskgraph_free(tg);
    for (int v = 0; v < 2; v++) {
        gs_array_h c = v == 0 ? cg : cs, s = v == 0 ? sg : ss;
        CHECK(gs_graph_lower(c, GS_LOWER_DEFAULT, &tg));
        cr_assert_eq(tg->ntasks, (uint64_t)nb, "variant %d: %llu tasks", v,
                     (unsigned long long)tg->ntasks);
        cr_assert_str_eq(gs_layer_name(tg->layers[0]), "map_blocks-fused");
        CHECK(gs_chunkops_eval(GPU, bk.gpu, tg, got, (size_t)n));
        gs_taskgraph_free(tg);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(got[i] - ref[i]) <= 1e-13 * fabs(ref[i]), "variant %d element %lld: "
                      "gpu %.17g cpu %.17g", v, (long long)i, got[i], ref[i]);
        CHECK(gs_graph_lower(s, GS_LOWER_DEFAULT, &tg));
        CHECK(gs_chunkops_eval(GPU, bk.gpu, tg, &sgot, 1));
        gs_taskgraph_free(tg);
        cr_assert(fabs(sgot - sref) <= 1e-12 * fabs(sref), "variant %d sum: gpu %.17g cpu %.17g",
                  v, sgot, sref);
        /* unfused on the GPU: the same values */
        CHECK(gs_graph_lower(c, 0, &tg));
        CHECK(gs_chunkops_eval(GPU, bk.gpu, tg, got, (size_t)n));
        gs_taskgraph_free(tg);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(got[i] - ref[i]) <= 1e-13 * fabs(ref[i]), "variant %d unfused element "
                      "%lld", v, (long long)i);
    }
    bk_close(&bk);
    gs_array_release(cc);
    gs_array_release(sc);
    gs_array_release(cg);
    gs_array_release(sg);
    gs_array_release(cs);
    gs_array_release(ss);
    gs_array_release(x);
    free(ref);
    free(got);
}

/* map_overlap with a CUDA C++ kernel (chunkops/ktask.c): the padded block is assembled on the
 * device by the STENCIL op (radius 0, every element kept), the NVRTC kernel runs on it. The
 * seed's 3x3 mean (products and sums rounded apart, as the CPU loops do) equals, bit for bit,
 * the built-in gs_array_stencil on the CPU backend and on the GPU and the CPU kernel
 * gs_test_smooth3x3 on the CPU backend, for every boundary on odd chunkings (with NONE the
 * kernel keeps the array's edge elements itself, arg = the shape, as gs_test_smooth3x3 does). */
static const char k_smooth[] = GS_TEST_SMOOTH3X3_CUDA_SRC;

static void overlap_case(bk_t *bk, const int64_t *shape, const int64_t *chunks, int b)
{
    static const double mean9[9] = {1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9,
                                    1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9};
    const int d[2] = {1, 1};
    const int64_t n = shape[0] * shape[1];
    gs_user_kernel_t kg = {NULL, "smooth3x3", NULL, 0, k_smooth, 0};
    gs_user_kernel_t kc = {GS_TEST_KERNELS, "gs_test_smooth3x3", NULL, 0, NULL, 0};
    gs_array_h x, m, c, s;
    gs_taskgraph_t *tg;
    double *got = malloc((size_t)n * sizeof(double)), *ref[3];
    if (b == GS_BOUNDARY_NONE) {
        kg.arg = kc.arg = shape;
        kg.arg_len = kc.arg_len = 2 * sizeof(int64_t);
    }
    CHECK(gs_array_random_uniform(17, -1.0, 1.0, 2, shape, chunks, &x));
    CHECK(gs_array_map_overlap(&kg, x, d, (gs_boundary_t)b, 0.75, &m));
    CHECK(gs_array_map_overlap(&kc, x, d, (gs_boundary_t)b, 0.75, &c));
    CHECK(gs_array_stencil(x, mean9, d, (gs_boundary_t)b, 0.75, &s));
    for (int v = 0; v < 3; v++) {
        ref[v] = malloc((size_t)n * sizeof(double));
        CHECK(gs_graph_lower(v == 2 ? c : s, GS_LOWER_DEFAULT, &tg));
        CHECK(gs_chunkops_eval(v == 1 ? GPU : CPU, v == 1 ? bk->gpu : bk->cpu, tg, ref[v],
                               (size_t)n));
        gs_taskgraph_free(tg);
    }
    CHECK(gs_graph_lower(m, GS_LOWER_DEFAULT, &tg));
    for (int64_t i = 0; i < n; i++) got[i] = -2.0;
    CHECK(gs_chunkops_eval(GPU, bk->gpu, tg, got, (size_t)n));
    gs_taskgraph_free(tg);
    for (int v = 0; v < 3; v++)
        for (int64_t i = 0; i < n; i++)
            cr_assert(bits_equal(got[i], ref[v][i]), "%lld x %lld in %lld x %lld, boundary %d, "
                      "reference %d (0 cpu stencil, 1 gpu stencil, 2 cpu kernel), element %lld: "
                      "cuda kernel %.17g, reference %.17g", (long long)shape[0],
                      (long long)shape[1], (long long)chunks[0], (long long)chunks[1], b, v,
                      (long long)i, got[i], ref[v][i]);
    for (int v = 0; v < 3; v++) free(ref[v]);
    free(got);
    gs_array_release(m);
    gs_array_release(c);
    gs_array_release(s);
    gs_array_release(x);
}

Test(cuda_stencil, map_overlap_cuda_kernel_equals_the_builtin_stencil_every_boundary)
{
    GPU_OR_SKIP();
    bk_t bk;
    const int64_t s1[2] = {523, 301}, c1[2] = {200, 97};
    const int64_t s2[2] = {29, 23}, c2[2] = {6, 5};
    const int64_t s3[2] = {17, 40}, c3[2] = {1, 7};   /* one-row chunks: whole-chunk halos */
    bk_open(&bk, (size_t)1 << 30);
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) {
        overlap_case(&bk, s1, c1, b);
        overlap_case(&bk, s2, c2, b);
        overlap_case(&bk, s3, c3, b);
    }
    bk_close(&bk);
}

/* A CUDA map_overlap kernel that does not compile fails its task with the NVRTC log; the
 * context then runs a good one. */
Test(cuda_stencil, map_overlap_cuda_compile_error_fails_the_task)
{
    GPU_OR_SKIP();
    bk_t bk;
    const int64_t shape[2] = {20, 30}, chunks[2] = {7, 11};
    const int d[2] = {1, 1};
    gs_user_kernel_t bad = {NULL, "broken", NULL, 0,
                            "extern \"C\" __global__ void broken(gs_cuda_args_t a)\n"
                            "{ a.out.data[0] = undeclared_name; }\n", 0};
    gs_user_kernel_t good = {NULL, "smooth3x3", NULL, 0, k_smooth, 0};
    gs_array_h x, m, g;
    gs_taskgraph_t *tg;
    double out[600];
    CHECK(gs_array_random_uniform(5, -1.0, 1.0, 2, shape, chunks, &x));
    CHECK(gs_array_map_overlap(&bad, x, d, GS_BOUNDARY_REFLECT, 0, &m));
    CHECK(gs_array_map_overlap(&good, x, d, GS_BOUNDARY_REFLECT, 0, &g));
    bk_open(&bk, (size_t)1 << 28);
    CHECK(gs_graph_lower(m, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(gs_chunkops_eval(GPU, bk.gpu, tg, out, 600), GS_ERR_TASK_FAILED);
    cr_assert(strstr(gs_last_error(), "broken") != NULL, "message: %s", gs_last_error());
    gs_taskgraph_free(tg);
    CHECK(gs_graph_lower(g, GS_LOWER_DEFAULT, &tg));
    CHECK(gs_chunkops_eval(GPU, bk.gpu, tg, out, 600));
    gs_taskgraph_free(tg);
    bk_close(&bk);
    gs_array_release(m);
    gs_array_release(g);
    gs_array_release(x);
}

/* Typed map_blocks (gs_array_map_blocks_dtype): inputs of int32, uint8, float32, int64 and bool
 * (astype producers the fused path inlines) into outputs of the caller's dtype, with the NVRTC
 * kernel "typed" (its typed pointers; fused and unfused) and the C kernel gs_test_typed staged
 * through host memory, byte for byte equal to the CPU backend running gs_test_typed. */
static const char k_typed[] = GS_TEST_TYPED_CUDA_SRC;

static gs_array_h typed_input(gs_dtype_t d, uint64_t seed, const int64_t *shape,
                              const int64_t *chunks)
{
    gs_array_h u, s, t;
    CHECK(gs_array_random_uniform(seed, 0.0, 300.0, 2, shape, chunks, &u));
    CHECK(gs_array_unary(GS_UNARY_FLOOR, u, &s));
    CHECK(gs_array_astype(s, d, &t));
    gs_array_release(u);
    gs_array_release(s);
    return t;
}

Test(cuda_stencil, typed_map_blocks_equal_the_cpu_kernel_byte_for_byte)
{
    GPU_OR_SKIP();
    static const struct { int nin; gs_dtype_t d0, d1, out; } cases[] = {
        {2, GS_DTYPE_INT32, GS_DTYPE_UINT8, GS_DTYPE_FLOAT32},
        {1, GS_DTYPE_FLOAT32, GS_DTYPE_FLOAT32, GS_DTYPE_UINT8},
        {1, GS_DTYPE_UINT8, GS_DTYPE_UINT8, GS_DTYPE_INT32},
        {2, GS_DTYPE_INT64, GS_DTYPE_BOOL, GS_DTYPE_INT64},
        {2, GS_DTYPE_FLOAT64, GS_DTYPE_INT32, GS_DTYPE_BOOL},
    };
    const int64_t shape[2] = {97, 61}, chunks[2] = {20, 13}, n = 97 * 61;
    bk_t bk;
    double *ref = malloc((size_t)n * 8), *got = malloc((size_t)n * 8);
    const unsigned char *rb = (const unsigned char *)ref, *gb = (const unsigned char *)got;
    bk_open(&bk, (size_t)1 << 28);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        gs_user_kernel_t kc = {GS_TEST_KERNELS, "gs_test_typed", NULL, 0, NULL,
                               GS_KERNEL_ELEMENTWISE};
        gs_user_kernel_t kg = {NULL, "typed", NULL, 0, k_typed, GS_KERNEL_ELEMENTWISE};
        gs_array_h in[2] = {typed_input(cases[c].d0, 40 + c, shape, chunks),
                            typed_input(cases[c].d1, 50 + c, shape, chunks)};
        gs_array_h mc, mg;
        gs_taskgraph_t *tg;
        const size_t nbytes = (size_t)n * gs_dtype_size(cases[c].out);
        CHECK(gs_array_map_blocks_dtype(&kc, cases[c].nin, in, cases[c].out, 2, shape, chunks,
                                        &mc));
        CHECK(gs_array_map_blocks_dtype(&kg, cases[c].nin, in, cases[c].out, 2, shape, chunks,
                                        &mg));
        CHECK(gs_graph_lower(mc, GS_LOWER_DEFAULT, &tg));
        CHECK(gs_chunkops_eval(CPU, bk.cpu, tg, ref, (size_t)n));
        gs_taskgraph_free(tg);
        for (int v = 0; v < 4; v++) {   /* cuda fused, cuda unfused, C staged fused / unfused */
            memset(got, 0xA5, (size_t)n * 8);
            CHECK(gs_graph_lower(v < 2 ? mg : mc, v % 2 == 0 ? GS_LOWER_DEFAULT : 0, &tg));
            CHECK(gs_chunkops_eval(GPU, bk.gpu, tg, got, (size_t)n));
            gs_taskgraph_free(tg);
            for (size_t i = 0; i < nbytes; i++)
                cr_assert(gb[i] == rb[i], "case %zu (%s -> %s) variant %d: byte %zu differs",
                          c, gs_dtype_name(cases[c].d0), gs_dtype_name(cases[c].out), v, i);
        }
        gs_array_release(mc);
        gs_array_release(mg);
        gs_array_release(in[0]);
        gs_array_release(in[1]);
    }
    bk_close(&bk);
    free(ref);
    free(got);
}
