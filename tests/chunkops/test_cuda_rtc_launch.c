/* Users' CUDA C++ kernels on a GPU (chunkops/cuda/rtc.h, issue 16): compiled with NVRTC,
 * loaded, launched on a chunkops stream, against a plain-C reference; a kernel that faults
 * fails the stream's sync with the CUDA reason. Every test skips without a device. */
#include "cuda_test_util.h"

#include "chunkops/cuda/rtc.h"
#include "tests/tmp_tree.h"

#include <unistd.h>

/* out[i] = in0[i] * (*(const double *)arg) + in1[i] + global index (position-dependent) */
static const char k_axpy[] =
    "extern \"C\" __global__ void axpy(gs_cuda_args_t a)\n"
    "{\n"
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= a.n_out) return;\n"
    "    long long r = i / a.out.shape[1], c = i % a.out.shape[1];\n"
    "    double f = *(const double *)a.arg;\n"
    "    a.out.data[i] = a.in[0].data[i] * f + a.in[1].data[i]\n"
    "                    + (double)((a.out.start[0] + r) * 1000 + a.out.start[1] + c);\n"
    "}\n";

static const char k_fault[] =
    "extern \"C\" __global__ void fault(gs_cuda_args_t a)\n"
    "{\n"
    "    if (threadIdx.x == 0) ((double *)0x10)[blockIdx.x] = 1.0;\n"
    "}\n";

static gs_cuda_rtc_kernel_h build(const char *src, const char *name)
{
    void *img = NULL;
    size_t len = 0;
    gs_cuda_rtc_kernel_h k = NULL;
    int arch = gs_cuda_rtc_device_arch(0);
    cr_assert_gt(arch, 0);
    CHECK(gs_cuda_rtc_compile(src, name, arch, NULL, &img, &len, NULL));
    CHECK(gs_cuda_rtc_load(0, img, len, name, &k));
    gs_free(img);
    return k;
}

Test(chunkops_cuda_rtc_launch, a_user_kernel_matches_the_plain_c_reference)
{
    GPU_OR_SKIP();
    bk_t b;
    const int64_t R = 37, C = 301, n = R * C;   /* several blocks, a partial last one */
    double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n);
    double *got = malloc(sizeof(double) * n), f = 1.5;
    rng_state = 16;
    for (int64_t i = 0; i < n; i++) x[i] = rndu() - 0.5, y[i] = rndu();
    bk_open(&b, (size_t)256 << 20);
    gs_cuda_rtc_kernel_h k = build(k_axpy, "axpy");
    gs_block_t in[2] = {{0}}, out = {0};
    in[0].data = dev_upload(&b, x, n);
    in[1].data = dev_upload(&b, y, n);
    out.data = dev_alloc_poisoned(&b, n);
    for (int i = 0; i < 2; i++) in[i].ndim = 2, in[i].shape[0] = R, in[i].shape[1] = C;
    out.ndim = 2, out.shape[0] = R, out.shape[1] = C, out.start[0] = 100, out.start[1] = 7;
    CHECK(gs_cuda_rtc_launch(k, b.gs, in, 2, &out, &f, sizeof(f)));
    dev_download(&b, got, out.data, n);
    for (int64_t i = 0; i < n; i++) {
        double want = x[i] * 1.5 + y[i] + (double)((100 + i / C) * 1000 + 7 + i % C);
        cr_assert(bits_equal(got[i], want), "element %lld: %.17g, want %.17g", (long long)i,
                  got[i], want);
    }
    gs_cuda_rtc_unload(k);
    GPU->mem_free(b.gpu, in[0].data);
    GPU->mem_free(b.gpu, in[1].data);
    GPU->mem_free(b.gpu, out.data);
    bk_close(&b);
    free(x), free(y), free(got);
}

Test(chunkops_cuda_rtc_launch, a_kernel_missing_from_the_image_fails_at_load)
{
    GPU_OR_SKIP();
    void *img = NULL;
    size_t len = 0;
    gs_cuda_rtc_kernel_h k = NULL;
    /* "axpy" is mentioned (a comment), so compilation succeeds; the symbol is absent */
    CHECK(gs_cuda_rtc_compile("// axpy\n__global__ void other(int *p) { *p = 1; }\n", "axpy",
                              gs_cuda_rtc_device_arch(0), NULL, &img, &len, NULL));
    cr_assert_eq(gs_cuda_rtc_load(0, img, len, "axpy", &k), GS_ERR_CUDA);
    cr_assert_not_null(strstr(gs_last_error(), "axpy not found"), "%s", gs_last_error());
    cr_assert_null(k);
    gs_free(img);
}

/* An illegal address is a sticky error: the sync reports GS_ERR_DEVICE_LOST (chunkops.h) with
 * the reason, health() names it from then on and every later call of the context fails with
 * it. (The worker process is restarted by its launcher; here the forked test process ends.) */
Test(chunkops_cuda_rtc_launch, an_illegal_address_loses_the_device_with_the_reason)
{
    GPU_OR_SKIP();
    gs_chunkops_params_t pg = {0};
    gs_chunkops_ctx_h ctx;
    gs_chunkops_stream_h s;
    void *d;
    pg.memory_limit = (size_t)64 << 20;
    CHECK(GPU->ctx_create(&pg, &ctx));
    CHECK(GPU->stream_create(ctx, &s));
    CHECK(GPU->mem_alloc(ctx, 1024, &d));
    CHECK(GPU->health(ctx));
    gs_cuda_rtc_kernel_h k = build(k_fault, "fault");
    gs_block_t in = {0}, out = {0};
    in.data = out.data = d;
    in.ndim = out.ndim = 1, in.shape[0] = out.shape[0] = 128;
    CHECK(gs_cuda_rtc_launch(k, s, &in, 1, &out, NULL, 0));
    gs_status_t st = GPU->sync(ctx, s);
    cr_assert_eq(st, GS_ERR_DEVICE_LOST, "%s: %s", gs_status_name(st), gs_last_error());
    cr_assert_not_null(strstr(gs_last_error(), "illegal"), "%s", gs_last_error());
    st = GPU->health(ctx);
    cr_assert_eq(st, GS_ERR_DEVICE_LOST, "%s", gs_status_name(st));
    cr_assert_not_null(strstr(gs_last_error(), "cudaErrorIllegalAddress"), "%s", gs_last_error());
    st = GPU->copy_from_host(ctx, s, d, &in, 8);
    cr_assert_eq(st, GS_ERR_DEVICE_LOST, "%s", gs_status_name(st));
}

static void note_status(gs_status_t status, void *arg)
{
    atomic_store((_Atomic int *)arg, (int)status + 1000);
}

/* The worker's path: the loss reaches notify()'s callback for work already enqueued. */
Test(chunkops_cuda_rtc_launch, an_illegal_address_reaches_notify_as_a_lost_device)
{
    GPU_OR_SKIP();
    gs_chunkops_params_t pg = {0};
    gs_chunkops_ctx_h ctx;
    gs_chunkops_stream_h s;
    void *d;
    _Atomic int got = 0;
    pg.memory_limit = (size_t)64 << 20;
    CHECK(GPU->ctx_create(&pg, &ctx));
    CHECK(GPU->stream_create(ctx, &s));
    CHECK(GPU->mem_alloc(ctx, 1024, &d));
    gs_cuda_rtc_kernel_h k = build(k_fault, "fault");
    gs_block_t in = {0}, out = {0};
    in.data = out.data = d;
    in.ndim = out.ndim = 1, in.shape[0] = out.shape[0] = 128;
    CHECK(gs_cuda_rtc_launch(k, s, &in, 1, &out, NULL, 0));
    CHECK(GPU->notify(ctx, s, note_status, (void *)&got));
    (void)GPU->sync(ctx, s);   /* returns once the callback has been called */
    for (int i = 0; i < 5000 && atomic_load(&got) == 0; i++) usleep(1000);
    cr_assert_eq(atomic_load(&got) - 1000, GS_ERR_DEVICE_LOST, "callback status %d",
                 atomic_load(&got) - 1000);
}

/* Through the backend's vtable, as a worker runs a map_blocks task: compiled on first use,
 * loaded once, a compile error naming its line. */
Test(chunkops_cuda_rtc_launch, the_cuda_user_op_runs_a_source_kernel_and_reports_compile_errors)
{
    GPU_OR_SKIP();
    bk_t b;
    const int64_t n = 1000;
    double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n);
    double *got = malloc(sizeof(double) * n), f = -2.0;
    char cache[128];
    snprintf(cache, sizeof(cache), "/tmp/gs-test-rtc-op-%ld", (long)getpid());
    setenv("GS_CUDA_RTC_CACHE_DIR", cache, 1);
    for (int64_t i = 0; i < n; i++) x[i] = (double)i * 0.5, y[i] = 1.0;
    bk_open(&b, (size_t)64 << 20);
    gs_kuser_t u;
    memset(&u, 0, sizeof(u));
    u.sym = "axpy";
    u.cuda_src = k_axpy;
    u.arg = &f;
    u.arg_len = sizeof(f);
    u.nin = 2;
    for (int i = 0; i < 2; i++) {
        u.in[i].ndim = 2, u.in[i].shape[0] = 1, u.in[i].shape[1] = n, u.in_len[i] = n;
    }
    u.in[0].data = dev_upload(&b, x, n);
    u.in[1].data = dev_upload(&b, y, n);
    u.out = u.in[0];
    u.out.data = dev_alloc_poisoned(&b, n);
    CHECK(GPU->cuda_user(b.gpu, b.gs, &u));
    CHECK(GPU->cuda_user(b.gpu, b.gs, &u));   /* second call: the loaded kernel */
    dev_download(&b, got, u.out.data, n);
    for (int64_t i = 0; i < n; i++)
        cr_assert(bits_equal(got[i], x[i] * -2.0 + 1.0 + (double)i), "element %lld",
                  (long long)i);
    char path[512];
    cr_assert(tmp_path_join(path, sizeof(path), cache, "nvrtc-cache"));
    cr_assert_eq(tmp_tree_count(path, ".cubin"), 1, "the image went to the disk cache");
    u.cuda_src = "extern \"C\" __global__ void axpy(gs_cuda_args_t a)\n{\n  undefined_thing;\n}\n";
    cr_assert_eq(GPU->cuda_user(b.gpu, b.gs, &u), GS_ERR_TASK_FAILED);
    cr_assert_not_null(strstr(gs_last_error(), "axpy.cu(3)"), "%s", gs_last_error());
    GPU->mem_free(b.gpu, u.in[0].data);
    GPU->mem_free(b.gpu, u.in[1].data);
    GPU->mem_free(b.gpu, u.out.data);
    bk_close(&b);
    tmp_tree_remove(cache);
    free(x), free(y), free(got);
}
