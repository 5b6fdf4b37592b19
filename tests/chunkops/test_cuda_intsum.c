/* Integer records (graph/kernel.h "Integer records") on the CUDA backend against the CPU
 * backend: fused REDUCE (k_typed_ireduce: SUM, PROD, MIN, MAX of int64, int32 and uint8 values
 * over the whole region, the inner and the outer axis) and COMBINE (merging and finalising
 * integer records). Integer arithmetic modulo 2^64 commutes, so the records must be identical
 * bit for bit whatever order the GPU threads merge in. Values lie near and beyond 2^53 and the
 * sums and products wrap past 2^63. Skips when there is no CUDA device. */

#include "cuda_test_util.h"
#include "intsum_spec.h"

static void *dev_bytes(bk_t *b, const void *h, size_t n)
{
    void *d;
    CHECK(GPU->mem_alloc(b->gpu, n > 0 ? n : 1, &d));
    if (n > 0) CHECK(GPU->copy_from_host(b->gpu, b->gs, d, h, n));
    CHECK(GPU->sync(b->gpu, b->gs));
    return d;
}

/* Every op and axis over R x C values of dtype @a dt (host @a h, @a es bytes each); @a nz:
 * the values cast to bool first (count_nonzero's sum(astype(x, bool))). */
static void agree_cast(bk_t *b, gs_dtype_t dt, const void *h, size_t es, int64_t R, int64_t C,
                       int nz)
{
    static const int ops[] = {GS_RED_SUM, GS_RED_PROD, GS_RED_MIN, GS_RED_MAX};
    void *d = dev_bytes(b, h, (size_t)(R * C) * es);
    const int64_t maxrec = R > C ? R : C;
    double *cpu = malloc(sizeof(double) * (size_t)maxrec);
    double *gpu = malloc(sizeof(double) * (size_t)maxrec);
    double *dout = dev_alloc_poisoned(b, maxrec);
    cr_assert(cpu != NULL && gpu != NULL);
    for (int o = 0; o < 4; o++)
        for (int axis = -1; axis < 2; axis++) {
            gs_kfused_t k;
            const int64_t nrec = axis < 0 ? 1 : axis == 0 ? C : R;
            is_reduce_spec(&k, dt, h, R, C, ops[o], axis, cpu);
            if (nz) is_cast_to_bool(&k);
            CHECK(CPU->fused(b->cpu, b->cs, &k));
            is_reduce_spec(&k, dt, d, R, C, ops[o], axis, dout);
            if (nz) is_cast_to_bool(&k);
            CHECK(GPU->fused(b->gpu, b->gs, &k));
            dev_download(b, gpu, dout, nrec);
            for (int64_t r = 0; r < nrec; r++)
                cr_assert(memcmp(&cpu[r], &gpu[r], 8) == 0,
                          "dtype %d %lldx%lld op %d axis %d record %lld: gpu %lld, cpu %lld",
                          (int)dt, (long long)R, (long long)C, ops[o], axis, (long long)r,
                          (long long)((int64_t *)gpu)[r], (long long)((int64_t *)cpu)[r]);
        }
    GPU->mem_free(b->gpu, dout);
    GPU->mem_free(b->gpu, d);
    free(cpu);
    free(gpu);
}

static void agree(bk_t *b, gs_dtype_t dt, const void *h, size_t es, int64_t R, int64_t C)
{
    agree_cast(b, dt, h, es, R, C, 0);
    agree_cast(b, dt, h, es, R, C, 1);
}

Test(chunkops_cuda_intsum, reductions_agree_with_cpu_bitwise)
{
    GPU_OR_SKIP();
    static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {37, 300}, {1, 100000}, {2000, 3}, {0, 5}};
    bk_t b;
    bk_open(&b, (size_t)256 << 20);
    rng_state = 30;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const int64_t R = shapes[s][0], C = shapes[s][1], n = R * C;
        int64_t *a = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
        int32_t *a32 = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
        uint8_t *a8 = malloc((size_t)(n > 0 ? n : 1));
        cr_assert(a != NULL && a32 != NULL && a8 != NULL);
        for (int64_t i = 0; i < n; i++) {
            a[i] = is_big_value(rnd);
            a32[i] = (int32_t)(rnd() % 2 ? INT32_MAX - (int64_t)(rnd() % 5)
                                         : INT32_MIN + (int64_t)(rnd() % 5));
            a8[i] = (uint8_t)(255 - rnd() % 3);
        }
        agree(&b, GS_DTYPE_INT64, a, 8, R, C);
        agree(&b, GS_DTYPE_INT32, a32, 4, R, C);
        agree(&b, GS_DTYPE_UINT8, a8, 1, R, C);
        free(a);
        free(a32);
        free(a8);
    }
    bk_close(&b);
}

Test(chunkops_cuda_intsum, combine_agrees_with_cpu_bitwise)
{
    GPU_OR_SKIP();
    enum { NREC = 5000, NIN = 17 };
    static const int ops[] = {GS_RED_SUM, GS_RED_PROD, GS_RED_MIN, GS_RED_MAX};
    static const gs_dtype_t outs[] = {GS_DTYPE_INT64, GS_DTYPE_INT32, GS_DTYPE_UINT8};
    bk_t b;
    bk_open(&b, (size_t)256 << 20);
    rng_state = 31;
    int64_t *h = malloc(sizeof(int64_t) * NREC * NIN);
    cr_assert_not_null(h);
    for (int i = 0; i < NREC * NIN; i++) h[i] = is_big_value(rnd);
    double *d = dev_upload(&b, (const double *)h, NREC * NIN);
    double *dout = dev_alloc_poisoned(&b, NREC);
    double *cpu = malloc(sizeof(double) * NREC), *gpu = malloc(sizeof(double) * NREC);
    cr_assert(cpu != NULL && gpu != NULL);
    for (int o = 0; o < 4; o++)
        for (int fin = 0; fin < 4; fin++) {
            gs_kcombine_t kc, kg;
            is_combine_spec(&kc, ops[o], NREC, NIN, fin > 0,
                            fin > 0 ? outs[fin - 1] : GS_DTYPE_FLOAT64);
            kg = kc;
            for (int i = 0; i < NIN; i++) {
                kc.inputs[i] = (const double *)h + (size_t)i * NREC;
                kg.inputs[i] = d + (size_t)i * NREC;
            }
            memset(cpu, 0, sizeof(double) * NREC);
            kc.out = cpu;
            kg.out = dout;
            CHECK(CPU->combine(b.cpu, b.cs, &kc));
            CHECK(GPU->combine(b.gpu, b.gs, &kg));
            dev_download(&b, gpu, dout, NREC);
            const size_t nb = (size_t)NREC * (fin > 0 ? gs_dtype_size(kc.out_dtype) : 8);
            cr_assert(memcmp(cpu, gpu, nb) == 0, "combine op %d finalize %d differs", ops[o], fin);
        }
    GPU->mem_free(b.gpu, dout);
    GPU->mem_free(b.gpu, d);
    free(h);
    free(cpu);
    free(gpu);
    bk_close(&b);
}
