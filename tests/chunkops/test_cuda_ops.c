/* The CUDA backend against the CPU backend, beyond fused kernels: COMBINE and COPY (bitwise
 * equal to the CPU), device memory exhaustion, context parameters, invalid specs refused
 * before launch, completion notification, streams and contexts side by side. Every test skips
 * when there is no CUDA device (agreement rules: test_cuda.c). */

#include "cuda_test_util.h"

static void gen_records(int op, double *r, int64_t nrec)
{
    int w = gs_redop_width(op);
    for (int64_t i = 0; i < nrec; i++) {
        double *x = r + i * w;
        double v = rndu() * 10.0 - 5.0;
        if (rnd() % 50 == 0) v = NAN;
        if (rnd() % 50 == 0) v = INFINITY;
        switch (op) {
        case GS_RED_MEAN: x[0] = v; x[1] = (double)rndr(0, 100); break;
        case GS_RED_VAR:
        case GS_RED_STD:
            x[0] = (double)rndr(0, 5);
            x[1] = x[0] > 0 ? v : 0.0;
            x[2] = x[0] > 1 ? rndu() * 3.0 : 0.0;
            break;
        case GS_RED_ARGMIN:
        case GS_RED_ARGMAX:
            if (rnd() % 10 == 0) {
                x[0] = op == GS_RED_ARGMIN ? INFINITY : -INFINITY;
                x[1] = -1.0;
            } else {
                x[0] = rnd() % 4 == 0 ? floor(v) : v; /* ties */
                x[1] = (double)rndr(0, 1000000);
            }
            break;
        default: x[0] = v; break;
        }
    }
}

Test(chunkops_cuda, combine_is_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)256 << 20);
    rng_state = 5005;
    for (int it = 0; it < 80; it++) {
        gs_kcombine_t kc, kg;
        memset(&kc, 0, sizeof(kc));
        kc.redop = (int32_t)(it % GS_RED_COUNT);
        kc.finalize = (int32_t)(rnd() % 2);
        kc.ddof = (double)rndr(0, 1);
        kc.nrec = it % 7 == 0 ? 0 : rndr(1, 6000);
        kc.ninputs = (int32_t)rndr(1, GS_KERNEL_MAX_COMBINE);
        int w = gs_redop_width(kc.redop);
        int64_t len = kc.nrec * w;
        double *in[GS_KERNEL_MAX_COMBINE];
        kg = kc;
        for (int i = 0; i < kc.ninputs; i++) {
            in[i] = malloc(sizeof(double) * (size_t)(len + 1));
            gen_records(kc.redop, in[i], kc.nrec);
            kc.inputs[i] = in[i];
            kg.inputs[i] = dev_upload(&b, in[i], len);
        }
        int64_t olen = kc.finalize ? kc.nrec : len;
        double *c = malloc(sizeof(double) * (size_t)(olen + 1)), *g = malloc(sizeof(double) * (size_t)(olen + 1));
        double *dout = dev_alloc_poisoned(&b, olen);
        kc.out = c;
        kg.out = dout;
        CHECK(CPU->combine(b.cpu, b.cs, &kc));
        CHECK(GPU->combine(b.gpu, b.gs, &kg));
        dev_download(&b, g, dout, olen);
        for (int64_t i = 0; i < olen; i++)
            cr_assert(bits_equal(g[i], c[i]), "combine %d (redop %d finalize %d ninputs %d): [%lld] "
                      "gpu %.17g cpu %.17g", it, kc.redop, kc.finalize, kc.ninputs, (long long)i, g[i],
                      c[i]);
        GPU->mem_free(b.gpu, dout);
        for (int i = 0; i < kc.ninputs; i++) {
            GPU->mem_free(b.gpu, (void *)kg.inputs[i]);
            free(in[i]);
        }
        free(c);
        free(g);
    }
    bk_close(&b);
}

Test(chunkops_cuda, copy_is_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)256 << 20);
    rng_state = 6006;
    for (int it = 0; it < 150; it++) {
        gs_kcopy_t kc, kg;
        memset(&kc, 0, sizeof(kc));
        kc.ndim = (int32_t)rndr(1, 4);
        int64_t cuts[GS_MAX_NDIM][5], ncut[GS_MAX_NDIM], total = 1;
        int npieces = 1;
        for (int j = 0; j < kc.ndim; j++) {
            kc.shape[j] = rndr(1, kc.ndim <= 2 ? 300 : 30);
            ncut[j] = rndr(1, 3);
            if (npieces * ncut[j] > GS_KERNEL_MAX_PIECES) ncut[j] = 1;
            npieces *= (int)ncut[j];
            cuts[j][0] = 0;
            for (int c = 1; c < ncut[j]; c++) cuts[j][c] = rndr(0, kc.shape[j]);
            cuts[j][ncut[j]] = kc.shape[j];
            for (int c = 1; c < ncut[j]; c++) /* sort */
                for (int e = c; e > 1 && cuts[j][e - 1] > cuts[j][e]; e--) {
                    int64_t t = cuts[j][e];
                    cuts[j][e] = cuts[j][e - 1];
                    cuts[j][e - 1] = t;
                }
            total *= kc.shape[j];
        }
        kc.npieces = npieces;
        double *src[GS_KERNEL_MAX_PIECES];
        kg = kc;
        for (int p = 0; p < npieces; p++) {
            gs_kpiece_t *pc = &kc.pieces[p];
            int rem = p;
            for (int j = kc.ndim - 1; j >= 0; j--) {
                int c = rem % (int)ncut[j];
                rem /= (int)ncut[j];
                pc->dst_start[j] = cuts[j][c];
                pc->size[j] = cuts[j][c + 1] - cuts[j][c];
            }
            /* source: a larger array, piece read with steps (maybe reversed, transposed) */
            int64_t c = 1, base = rndr(0, 5);
            int transpose = kc.ndim > 1 && rnd() % 3 == 0;
            for (int jj = kc.ndim - 1; jj >= 0; jj--) {
                int j = transpose ? kc.ndim - 1 - jj : jj;
                int64_t stp = rnd() % 4 == 0 ? 2 : 1;
                int rev = rnd() % 5 == 0;
                int64_t ext = stp * (pc->size[j] > 0 ? pc->size[j] - 1 : 0) + 1;
                pc->src_stride[j] = (rev ? -stp : stp) * c;
                if (rev) base += stp * (pc->size[j] > 0 ? pc->size[j] - 1 : 0) * c;
                c *= ext;
            }
            pc->src_base = base;
            pc->src_len = c + base + 2;
            src[p] = malloc(sizeof(double) * (size_t)pc->src_len);
            for (int64_t e = 0; e < pc->src_len; e++) src[p][e] = rndu();
            pc->src = src[p];
            kg.pieces[p] = *pc;
            kg.pieces[p].src = dev_upload(&b, src[p], pc->src_len);
        }
        double *c = malloc(sizeof(double) * (size_t)total), *g = malloc(sizeof(double) * (size_t)total);
        double *dout = dev_alloc_poisoned(&b, total);
        kc.out = c;
        kg.out = dout;
        CHECK(CPU->copy(b.cpu, b.cs, &kc));
        CHECK(GPU->copy(b.gpu, b.gs, &kg));
        dev_download(&b, g, dout, total);
        for (int64_t i = 0; i < total; i++)
            cr_assert(bits_equal(g[i], c[i]), "copy %d (%d pieces): [%lld] gpu %.17g cpu %.17g", it,
                      npieces, (long long)i, g[i], c[i]);
        GPU->mem_free(b.gpu, dout);
        for (int p = 0; p < npieces; p++) {
            GPU->mem_free(b.gpu, (void *)kg.pieces[p].src);
            free(src[p]);
        }
        free(c);
        free(g);
    }
    bk_close(&b);
}

Test(chunkops_cuda, arena_exhaustion_gives_no_device_memory)
{
    GPU_OR_SKIP();
    gs_chunkops_ctx_h ctx;
    gs_chunkops_params_t p = {0};
    void *a, *bb, *c;
    size_t used, limit;
    p.memory_limit = (size_t)4 << 20;
    CHECK(GPU->ctx_create(&p, &ctx));
    GPU->mem_usage(ctx, &used, &limit);
    cr_assert_eq(used, 0);
    cr_assert_eq(limit, (size_t)4 << 20);
    CHECK(GPU->mem_alloc(ctx, (size_t)3 << 20, &a));
    c = (void *)0x1;
    cr_assert_eq(GPU->mem_alloc(ctx, (size_t)2 << 20, &c), GS_ERR_NO_DEVICE_MEMORY);
    cr_assert_eq(c, (void *)0x1, "output written on failure");
    cr_assert(strlen(gs_last_error()) > 0);
    CHECK(GPU->mem_alloc(ctx, (size_t)1 << 20, &bb));
    GPU->mem_usage(ctx, &used, NULL);
    cr_assert_eq(used, (size_t)4 << 20);
    GPU->mem_free(ctx, a);
    GPU->mem_free(ctx, bb);
    GPU->mem_usage(ctx, &used, NULL);
    cr_assert_eq(used, 0);
    GPU->ctx_destroy(ctx);
}

Test(chunkops_cuda, context_refuses_missing_device_and_oversized_limit)
{
    GPU_OR_SKIP();
    gs_chunkops_ctx_h ctx = NULL;
    gs_chunkops_params_t p = {0};
    p.device = gs__cuda_device_count();
    cr_assert_eq(GPU->ctx_create(&p, &ctx), GS_ERR_NOT_FOUND);
    p.device = -1;
    cr_assert_eq(GPU->ctx_create(&p, &ctx), GS_ERR_INVALID_PARAM);
    p.device = 0;
    p.memory_limit = (size_t)1 << 50; /* a petabyte */
    cr_assert_eq(GPU->ctx_create(&p, &ctx), GS_ERR_NO_DEVICE_MEMORY);
    cr_assert_null(ctx);
}

Test(chunkops_cuda, invalid_specs_fail_before_launch)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    double *out = dev_alloc_poisoned(&b, 16);
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = 16;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_INDEX;
    k.leaves[0].stride[0] = 1;
    k.nprog = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[0].arg = 3; /* no such leaf */
    k.terminal = GS_TERM_STORE;
    k.out = out;
    cr_assert_eq(GPU->fused(b.gpu, b.gs, &k), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "leaf") != NULL, "message: %s", gs_last_error());
    k.prog[0].arg = 0;
    k.nprog = 0;
    cr_assert_eq(GPU->fused(b.gpu, b.gs, &k), GS_ERR_INVALID_PARAM);
    k.nprog = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK; /* chunk leaf reading past its data */
    k.leaves[0].data = out;
    k.leaves[0].data_len = 8;
    cr_assert_eq(GPU->fused(b.gpu, b.gs, &k), GS_ERR_INVALID_PARAM);
    cr_assert_eq(GPU->fused(b.gpu, b.gs, NULL), GS_ERR_INVALID_PARAM);
    gs_kcombine_t kc;
    memset(&kc, 0, sizeof(kc));
    kc.redop = 99;
    kc.ninputs = 1;
    kc.inputs[0] = out;
    kc.out = out;
    cr_assert_eq(GPU->combine(b.gpu, b.gs, &kc), GS_ERR_INVALID_PARAM);
    gs_kcopy_t kp;
    memset(&kp, 0, sizeof(kp));
    kp.ndim = 1;
    kp.shape[0] = 16;
    kp.npieces = 1;
    kp.pieces[0].src = out;
    kp.pieces[0].src_len = 16;
    kp.pieces[0].src_stride[0] = 1;
    kp.pieces[0].size[0] = 8; /* covers half the output */
    kp.out = out;
    cr_assert_eq(GPU->copy(b.gpu, b.gs, &kp), GS_ERR_INVALID_PARAM);
    /* nothing was enqueued: the stream is clean and the output untouched */
    CHECK(GPU->sync(b.gpu, b.gs));
    double h[16];
    dev_download(&b, h, out, 16);
    for (int i = 0; i < 16; i++) cr_assert_eq(h[i], -12345.678);
    GPU->mem_free(b.gpu, out);
    bk_close(&b);
}

typedef struct note {
    atomic_int calls;
    atomic_int status;
} note_t;

static void note_cb(gs_status_t status, void *arg)
{
    note_t *n = arg;
    atomic_store(&n->status, (int)status);
    atomic_fetch_add(&n->calls, 1);
}

Test(chunkops_cuda, notify_delivers_completion_once_after_the_work)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)256 << 20);
    const int64_t n = 4000000;
    double *out = dev_alloc_poisoned(&b, n);
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = n;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_NORMAL;
    k.leaves[0].stride[0] = 1;
    k.leaves[0].p1 = 1.0;
    k.nprog = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.terminal = GS_TERM_STORE;
    k.out = out;
    note_t nt[3];
    double *h = malloc(sizeof(double) * (size_t)n);
    for (int r = 0; r < 3; r++) {
        atomic_init(&nt[r].calls, 0);
        atomic_init(&nt[r].status, -1000);
        CHECK(GPU->fused(b.gpu, b.gs, &k));
        CHECK(GPU->copy_to_host(b.gpu, b.gs, h, out, (size_t)n * sizeof(double)));
        CHECK(GPU->notify(b.gpu, b.gs, note_cb, &nt[r]));
    }
    struct timespec ts = {0, 1000000};
    for (int waited = 0; waited < 20000 && atomic_load(&nt[2].calls) == 0; waited++)
        nanosleep(&ts, NULL);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(atomic_load(&nt[r].calls), 1, "notify %d ran %d times", r,
                     atomic_load(&nt[r].calls));
        cr_assert_eq(atomic_load(&nt[r].status), GS_OK);
    }
    /* the work before the notify had completed: the copy is in place */
    for (int64_t i = 0; i < n; i += 4099)
        cr_assert(fabs(h[i] - gs_random_normal(0, (uint64_t)i, 0.0, 1.0)) <=
                      1e-12 * fabs(h[i]) + 1e-300,
                  "element %lld", (long long)i);
    cr_assert_eq(GPU->notify(b.gpu, b.gs, NULL, NULL), GS_ERR_INVALID_PARAM);
    free(h);
    GPU->mem_free(b.gpu, out);
    bk_close(&b);
}

Test(chunkops_cuda, streams_run_independently_and_contexts_coexist)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)128 << 20);
    gs_chunkops_stream_h s2;
    CHECK(GPU->stream_create(b.gpu, &s2));
    const int64_t n = 1 << 20;
    double *o1 = dev_alloc_poisoned(&b, n), *o2 = dev_alloc_poisoned(&b, n);
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = n;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_INDEX;
    k.leaves[0].stride[0] = 1;
    k.nprog = 2;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[1].op = GS_OP_MUL_IMM;
    k.prog[1].imm = 2.0;
    k.terminal = GS_TERM_STORE;
    k.out = o1;
    CHECK(GPU->fused(b.gpu, b.gs, &k));
    k.out = o2;
    k.prog[1].imm = 3.0;
    CHECK(GPU->fused(b.gpu, s2, &k));
    /* a second context on the same device coexists; its stream is refused by the first */
    gs_chunkops_ctx_h other;
    gs_chunkops_stream_h os;
    gs_chunkops_params_t p = {0};
    p.memory_limit = (size_t)16 << 20;
    CHECK(GPU->ctx_create(&p, &other));
    CHECK(GPU->stream_create(other, &os));
    cr_assert_eq(GPU->fused(b.gpu, os, &k), GS_ERR_INVALID_PARAM);
    GPU->stream_destroy(other, os);
    GPU->ctx_destroy(other);
    CHECK(GPU->sync(b.gpu, s2));
    double *h = malloc(sizeof(double) * (size_t)n);
    dev_download(&b, h, o1, n);
    for (int64_t i = 0; i < n; i += 997) cr_assert_eq(h[i], 2.0 * (double)i);
    CHECK(GPU->copy_to_host(b.gpu, s2, h, o2, (size_t)n * sizeof(double)));
    CHECK(GPU->sync(b.gpu, s2));
    for (int64_t i = 0; i < n; i += 997) cr_assert_eq(h[i], 3.0 * (double)i);
    free(h);
    GPU->stream_destroy(b.gpu, s2);
    GPU->mem_free(b.gpu, o1);
    GPU->mem_free(b.gpu, o2);
    bk_close(&b);
}
