/* CPU backend plumbing: contexts, memory accounting and its limit, streams, notify, host
 * copies, backend lookup and task dispatch (gs_chunkops_run_ktask). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/alloc.h"

static const gs_chunkops_ops_t *ops = &gs_chunkops_cpu_ops;

static gs_chunkops_ctx_h ctx_with_limit(size_t limit)
{
    gs_chunkops_params_t p = {.memory_limit = limit};
    gs_chunkops_ctx_h ctx = NULL;
    cr_assert_eq(ops->ctx_create(&p, &ctx), GS_OK);
    cr_assert_not_null(ctx);
    return ctx;
}

Test(chunkops_cpu, default_context_has_a_positive_limit)
{
    gs_chunkops_ctx_h ctx = NULL;
    size_t used = 1, limit = 0;
    cr_assert_eq(ops->ctx_create(NULL, &ctx), GS_OK);
    ops->mem_usage(ctx, &used, &limit);
    cr_assert_eq(used, 0);
    cr_assert_gt(limit, 0);
    ops->ctx_destroy(ctx);
    gs_chunkops_params_t bad = {.nthreads = -1};
    ctx = NULL;
    cr_assert_eq(ops->ctx_create(&bad, &ctx), GS_ERR_INVALID_PARAM);
    cr_assert_null(ctx);
    cr_assert_eq(ops->ctx_create(NULL, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_str_eq(ops->name, "cpu");
}

Test(chunkops_cpu, mem_alloc_refuses_beyond_the_limit)
{
    gs_chunkops_ctx_h ctx = ctx_with_limit(1000);
    void *a = NULL, *b = NULL, *c = NULL;
    size_t used, limit;
    cr_assert_eq(ops->mem_alloc(ctx, 600, &a), GS_OK);
    cr_assert_eq(ops->mem_alloc(ctx, 500, &b), GS_ERR_NO_MEMORY);
    cr_assert_null(b, "output written on failure");
    cr_assert(strstr(gs_last_error(), "500 bytes") != NULL, "message: %s", gs_last_error());
    ops->mem_usage(ctx, &used, &limit);
    cr_assert_eq(used, 600);
    cr_assert_eq(limit, 1000);
    cr_assert_eq(ops->mem_alloc(ctx, 400, &b), GS_OK);
    cr_assert_eq(ops->mem_alloc(ctx, 1, &c), GS_ERR_NO_MEMORY);
    cr_assert_eq(ops->mem_alloc(ctx, SIZE_MAX, &c), GS_ERR_NO_MEMORY);
    memset(a, 1, 600);
    memset(b, 2, 400);
    ops->mem_free(ctx, a);
    ops->mem_usage(ctx, &used, NULL);
    cr_assert_eq(used, 400);
    ops->mem_free(ctx, b);
    ops->mem_free(ctx, NULL);
    cr_assert_eq(ops->mem_alloc(ctx, 1000, &a), GS_OK);
    ops->mem_free(ctx, a);
    ops->mem_usage(ctx, &used, NULL);
    cr_assert_eq(used, 0);
    ops->ctx_destroy(ctx);
}

Test(chunkops_cpu, zero_byte_allocations_are_unique_and_aligned)
{
    gs_chunkops_ctx_h ctx = ctx_with_limit(0);
    void *a = NULL, *b = NULL, *c = NULL;
    cr_assert_eq(ops->mem_alloc(ctx, 0, &a), GS_OK);
    cr_assert_eq(ops->mem_alloc(ctx, 0, &b), GS_OK);
    cr_assert_eq(ops->mem_alloc(ctx, 24, &c), GS_OK);
    cr_assert(a != NULL && b != NULL && a != b);
    cr_assert_eq((uintptr_t)a % 64, 0);
    cr_assert_eq((uintptr_t)c % 64, 0);
    ops->mem_free(ctx, a);
    ops->mem_free(ctx, b);
    ops->mem_free(ctx, c);
    ops->ctx_destroy(ctx);
}

Test(chunkops_cpu, failed_host_allocation_releases_its_reservation)
{
    gs_chunkops_ctx_h ctx = ctx_with_limit(1 << 20);
    void *a = NULL;
    size_t used;
    gs_alloc_fail_after(0);
    gs_status_t st = ops->mem_alloc(ctx, 4096, &a);
    gs_alloc_fail_after(-1);
    cr_assert_eq(st, GS_ERR_NO_MEMORY);
    cr_assert_null(a);
    ops->mem_usage(ctx, &used, NULL);
    cr_assert_eq(used, 0);
    ops->ctx_destroy(ctx);
}

typedef struct {
    gs_chunkops_ctx_h ctx;
    int ok, refused, over;
} worker_arg_t;

static void *alloc_worker(void *p)
{
    worker_arg_t *w = p;
    void *held[8] = {0};
    for (int it = 0; it < 4000; it++) {
        int slot = it % 8;
        if (held[slot] != NULL) {
            ops->mem_free(w->ctx, held[slot]);
            held[slot] = NULL;
        } else if (ops->mem_alloc(w->ctx, 1000, &held[slot]) == GS_OK) {
            w->ok++;
        } else {
            w->refused++;
        }
        size_t used, limit;
        ops->mem_usage(w->ctx, &used, &limit);
        if (used > limit) w->over++;
    }
    for (int i = 0; i < 8; i++) ops->mem_free(w->ctx, held[i]);
    return NULL;
}

Test(chunkops_cpu, accounting_is_thread_safe)
{
    /* 4 threads want up to 8 blocks each; only 10 fit at once */
    gs_chunkops_ctx_h ctx = ctx_with_limit(10000);
    pthread_t th[4];
    worker_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (worker_arg_t){.ctx = ctx};
        cr_assert_eq(pthread_create(&th[i], NULL, alloc_worker, &args[i]), 0);
    }
    int ok = 0, refused = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].ok;
        refused += args[i].refused;
        cr_assert_eq(args[i].over, 0, "usage exceeded the limit");
    }
    size_t used;
    ops->mem_usage(ctx, &used, NULL);
    cr_assert_eq(used, 0);
    cr_assert_gt(ok, 0);
    cr_assert_gt(ok + refused, 0);
    ops->ctx_destroy(ctx);
}

static void count_cb(gs_status_t status, void *arg)
{
    int *n = arg;
    cr_assert_eq(status, GS_OK);
    (*n)++;
}

Test(chunkops_cpu, streams_notify_at_once_and_copies_move_bytes)
{
    gs_chunkops_ctx_h ctx = ctx_with_limit(0);
    gs_chunkops_stream_h s = NULL;
    cr_assert_eq(ops->stream_create(ctx, &s), GS_OK);
    cr_assert_not_null(s);
    double host[16], back[16];
    void *dev = NULL;
    for (int i = 0; i < 16; i++) host[i] = i * 1.5;
    cr_assert_eq(ops->mem_alloc(ctx, sizeof(host), &dev), GS_OK);
    cr_assert_eq(ops->copy_from_host(ctx, s, dev, host, sizeof(host)), GS_OK);
    cr_assert_eq(ops->copy_to_host(ctx, s, back, dev, sizeof(host)), GS_OK);
    cr_assert_eq(memcmp(host, back, sizeof(host)), 0);
    cr_assert_eq(ops->copy_to_host(ctx, s, NULL, dev, 8), GS_ERR_INVALID_PARAM);
    cr_assert_eq(ops->copy_to_host(ctx, s, NULL, NULL, 0), GS_OK);
    int n = 0;
    cr_assert_eq(ops->notify(ctx, s, count_cb, &n), GS_OK);
    cr_assert_eq(n, 1, "cpu notify calls back before returning");
    cr_assert_eq(ops->notify(ctx, s, NULL, &n), GS_ERR_INVALID_PARAM);
    cr_assert_eq(n, 1);
    cr_assert_eq(ops->sync(ctx, s), GS_OK);
    ops->mem_free(ctx, dev);
    ops->stream_destroy(ctx, s);
    ops->ctx_destroy(ctx);
}

Test(chunkops_cpu, find_knows_cpu_and_reports_cuda_availability)
{
    const gs_chunkops_ops_t *o = NULL;
    cr_assert_eq(gs_chunkops_find("cpu", &o), GS_OK);
    cr_assert_eq(o, &gs_chunkops_cpu_ops);
    o = NULL;
    cr_assert_eq(gs_chunkops_find("opencl", &o), GS_ERR_NOT_FOUND);
    cr_assert(strstr(gs_last_error(), "opencl") != NULL);
    cr_assert_null(o);
    cr_assert_eq(gs_chunkops_find(NULL, &o), GS_ERR_INVALID_PARAM);
#if GS_HAVE_CUDA
    cr_assert_eq(gs_chunkops_find("cuda", &o), GS_OK);
    cr_assert_str_eq(o->name, "cuda");
    cr_assert_geq(gs_chunkops_cuda_device_count(), 0);
#else
    cr_assert_eq(gs_chunkops_find("cuda", &o), GS_ERR_UNSUPPORTED);
    cr_assert(strstr(gs_last_error(), "without CUDA") != NULL, "message: %s", gs_last_error());
    cr_assert_null(o);
    cr_assert_eq(gs_chunkops_cuda_device_count(), 0);
#endif
}

Test(chunkops_cpu, run_ktask_dispatches_every_kind)
{
    gs_chunkops_ctx_h ctx = ctx_with_limit(0);
    double src[6] = {1, 2, 3, 4, 5, 6}, out[6] = {0};
    gs_ktask_t t;

    memset(&t, 0, sizeof(t));
    t.kind = GS_KTASK_HOST_DATA;
    t.u.host.data = src;
    t.u.host.len = 6;
    t.u.host.out = out;
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, &t), GS_OK);
    cr_assert_eq(memcmp(src, out, sizeof(src)), 0);
    t.u.host.out = NULL;
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, &t), GS_ERR_INVALID_PARAM);
    t.u.host.out = out;
    t.u.host.len = -1;
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, &t), GS_ERR_INVALID_PARAM);

    memset(&t, 0, sizeof(t));
    t.kind = GS_KTASK_FUSED;
    t.u.fused.ndim = 1;
    t.u.fused.shape[0] = 6;
    t.u.fused.nleaves = 1;
    t.u.fused.leaves[0].kind = GS_LEAF_INDEX;
    t.u.fused.leaves[0].stride[0] = 1;
    t.u.fused.nprog = 1;
    t.u.fused.terminal = GS_TERM_REDUCE;
    t.u.fused.redop = GS_RED_SUM;
    t.u.fused.red_axis = -1;
    t.u.fused.out = out;
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, &t), GS_OK);
    cr_assert_eq(out[0], 15.0);
    t.u.fused.nprog = 0;
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, &t), GS_ERR_INVALID_PARAM);

    memset(&t, 0, sizeof(t));
    t.kind = GS_KTASK_COMBINE;
    t.u.combine.redop = GS_RED_MAX;
    t.u.combine.nrec = 3;
    t.u.combine.ninputs = 2;
    t.u.combine.inputs[0] = src;
    t.u.combine.inputs[1] = src + 3;
    t.u.combine.out = out;
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, &t), GS_OK);
    cr_assert(out[0] == 4 && out[1] == 5 && out[2] == 6);

    memset(&t, 0, sizeof(t));
    t.kind = GS_KTASK_COPY;
    t.u.copy.ndim = 1;
    t.u.copy.shape[0] = 3;
    t.u.copy.npieces = 1;
    t.u.copy.pieces[0].src = src;
    t.u.copy.pieces[0].src_len = 6;
    t.u.copy.pieces[0].src_base = 5;
    t.u.copy.pieces[0].src_stride[0] = -2;
    t.u.copy.pieces[0].size[0] = 3;
    t.u.copy.out = out;
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, &t), GS_OK);
    cr_assert(out[0] == 6 && out[1] == 4 && out[2] == 2);

    t.kind = 17;
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, &t), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "unknown task kind") != NULL);
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, NULL), GS_ERR_INVALID_PARAM);
    ops->ctx_destroy(ctx);
}

typedef struct {
    gs_chunkops_ctx_h ctx;
    uint64_t seed;
    double sum;
    gs_status_t st;
} kernel_arg_t;

static void *kernel_worker(void *p)
{
    kernel_arg_t *a = p;
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 100;
    k.shape[1] = 300;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_NORMAL;
    k.leaves[0].seed = a->seed;
    k.leaves[0].p1 = 1.0;
    k.leaves[0].stride[0] = 600;
    k.leaves[0].stride[1] = 2;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[1].op = GS_OP_ADD_IMM;
    k.prog[1].imm = 1.0;
    k.nprog = 2;
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_SUM;
    k.red_axis = -1;
    k.out = &a->sum;
    gs_chunkops_stream_h s;
    a->st = ops->stream_create(a->ctx, &s);
    for (int rep = 0; rep < 5 && a->st == GS_OK; rep++) a->st = ops->fused(a->ctx, s, &k);
    if (s != NULL) ops->stream_destroy(a->ctx, s);
    return NULL;
}

Test(chunkops_cpu, one_context_runs_kernels_from_several_threads)
{
    gs_chunkops_ctx_h ctx = ctx_with_limit(0);
    kernel_arg_t serial[4], par[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        serial[i] = (kernel_arg_t){.ctx = ctx, .seed = 100 + (uint64_t)i};
        kernel_worker(&serial[i]);
        cr_assert_eq(serial[i].st, GS_OK);
    }
    for (int i = 0; i < 4; i++) {
        par[i] = (kernel_arg_t){.ctx = ctx, .seed = 100 + (uint64_t)i};
        cr_assert_eq(pthread_create(&th[i], NULL, kernel_worker, &par[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(par[i].st, GS_OK);
        cr_assert_eq(par[i].sum, serial[i].sum, "thread %d: %.17g vs %.17g", i, par[i].sum,
                     serial[i].sum);
    }
    ops->ctx_destroy(ctx);
}

Test(chunkops_cpu, refuses_a_cuda_source_kernel_and_leaves_the_output_alone)
{
    gs_chunkops_ctx_h ctx = ctx_with_limit(0);
    double in[4] = {1, 2, 3, 4}, out[4] = {7, 7, 7, 7};
    gs_ktask_t t;
    memset(&t, 0, sizeof(t));
    t.kind = GS_KTASK_USER;
    t.u.user.sym = "scale";
    t.u.user.cuda_src = "extern \"C\" __global__ void scale(gs_cuda_args_t a) {}";
    t.u.user.nin = 1;
    t.u.user.in[0].data = in;
    t.u.user.in[0].ndim = 1;
    t.u.user.in[0].shape[0] = 4;
    t.u.user.in_len[0] = 4;
    t.u.user.out = t.u.user.in[0];
    t.u.user.out.data = out;
    cr_assert_eq(gs_chunkops_run_ktask(ops, ctx, NULL, &t), GS_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(gs_last_error(), "cuda kernel scale: backend cpu runs no CUDA"),
                       "%s", gs_last_error());
    for (int i = 0; i < 4; i++) cr_assert_eq(out[i], 7.0);
    ops->ctx_destroy(ctx);
}

static void note_status(gs_status_t status, void *arg)
{
    *(gs_status_t *)arg = status;
}

/* test_lose_device_on: the named user kernel's crash loses the context as a CUDA sticky error
 * does -- that call and every later one fail with GS_ERR_DEVICE_LOST, health() names the cause;
 * another kernel's crash, and contexts without the knob, are an ordinary task failure. */
Test(chunkops_cpu, a_crash_of_the_named_kernel_loses_the_context_for_good)
{
    gs_chunkops_params_t p = {.memory_limit = 1 << 20, .test_lose_device_on = "gs_test_crash"};
    gs_chunkops_ctx_h ctx, plain;
    gs_chunkops_stream_h s;
    double in[4] = {1, 2, 3, 4}, out[4] = {0};
    gs_status_t noted = GS_OK;
    gs_kuser_t k;
    memset(&k, 0, sizeof(k));
    k.lib = GS_TEST_KERNELS;
    k.nin = 1;
    k.in[0].data = in;
    k.in[0].ndim = 1;
    k.in[0].shape[0] = 4;
    k.in_len[0] = 4;
    k.out = k.in[0];
    k.out.data = out;
    cr_assert_eq(ops->ctx_create(&p, &ctx), GS_OK);
    cr_assert_eq(ops->ctx_create(NULL, &plain), GS_OK);
    cr_assert_eq(ops->stream_create(ctx, &s), GS_OK);
    cr_assert_eq(ops->health(ctx), GS_OK);
    k.sym = "gs_test_add";
    cr_assert_eq(ops->user(ctx, s, &k), GS_OK, "%s", gs_last_error());
    cr_assert(out[3] == 4.0);
    k.sym = "gs_test_crash";
    cr_assert_eq(ops->user(plain, s, &k), GS_ERR_TASK_FAILED, "%s", gs_last_error());
    cr_assert_eq(ops->health(plain), GS_OK);
    cr_assert_eq(ops->user(ctx, s, &k), GS_ERR_DEVICE_LOST, "%s", gs_last_error());
    cr_assert(strstr(gs_last_error(), "gs_test_crash") != NULL, "%s", gs_last_error());
    cr_assert_eq(ops->health(ctx), GS_ERR_DEVICE_LOST);
    cr_assert(strstr(gs_last_error(), "device lost (test_lose_device_on gs_test_crash): user "
                                      "kernel gs_test_crash") != NULL &&
                  strstr(gs_last_error(), "crashed: signal") != NULL,
              "%s", gs_last_error());
    /* sticky: a good kernel, notify and sync fail too */
    k.sym = "gs_test_add";
    cr_assert_eq(ops->user(ctx, s, &k), GS_ERR_DEVICE_LOST);
    cr_assert_eq(ops->notify(ctx, s, note_status, &noted), GS_OK);
    cr_assert_eq(noted, GS_ERR_DEVICE_LOST);
    cr_assert_eq(ops->sync(ctx, s), GS_ERR_DEVICE_LOST);
    ops->stream_destroy(ctx, s);
    ops->ctx_destroy(ctx);
    ops->ctx_destroy(plain);
}
