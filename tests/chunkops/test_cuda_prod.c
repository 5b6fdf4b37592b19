/* GS_RED_PROD on the CUDA backend against the CPU backend: factors +-1, +-2 and +-0.5 (so
 * every partial product is a power of two, exact in any order, and both backends must give
 * the same bits), float64 chunk leaves through the FULL, row and column kernels and their
 * split paths, an int32 leaf through the typed path, NaN and infinities, empty regions.
 * Skips when there is no CUDA device. (Other products are compared within rounding by the
 * random-spec tests of test_cuda.c, which walk every reduction.) */

#include "cuda_test_util.h"

/* Mostly 1, now and then -1, +-2 or +-0.5; with @a special a NaN or an infinity at times. */
static double factor(int special)
{
    const uint64_t r = rnd() % 1024;
    if (special && r == 0) return NAN;
    if (special && r == 1) return -INFINITY;
    /* one in 128 changes the exponent: no subset of 1.2M factors leaves double's range */
    return r < 2 ? 2.0 : r < 4 ? 0.5 : r < 6 ? -2.0 : r < 8 ? -0.5 : r < 600 ? 1.0 : -1.0;
}

/* One LEAF (chunk of @a dt, R x L, row-major) [CAST to float64] program reducing with PROD. */
static void prod_spec(gs_kfused_t *k, int64_t R, int64_t L, gs_dtype_t dt, int axis)
{
    memset(k, 0, sizeof(*k));
    k->ndim = 2;
    k->shape[0] = R;
    k->shape[1] = L;
    k->nleaves = 1;
    k->leaves[0].kind = GS_LEAF_CHUNK;
    k->leaves[0].dtype = dt;
    k->leaves[0].data_len = R * L;
    k->leaves[0].stride[0] = L;
    k->leaves[0].stride[1] = 1;
    k->prog[0].op = GS_OP_LEAF;
    k->prog[0].dtype = dt;
    k->nprog = 1;
    if (dt != GS_DTYPE_FLOAT64) {
        k->prog[1].op = GS_OP_CAST;
        k->prog[1].dtype = dt;
        k->prog[1].arg = GS_DTYPE_FLOAT64;
        k->nprog = 2;
    }
    k->terminal = GS_TERM_REDUCE;
    k->redop = GS_RED_PROD;
    k->red_axis = axis;
}

/* Run @a k (host data @a h of @a nbytes) on both backends; compare the records bitwise. */
static void run_compare(bk_t *b, gs_kfused_t *k, const void *h, size_t nbytes, const char *what)
{
    const int64_t nrec = gs_kfused_nrecords(k);
    double *cpu = malloc(sizeof(double) * (size_t)(nrec + 1)),
           *gpu = malloc(sizeof(double) * (size_t)(nrec + 1));
    void *d = NULL;
    cr_assert(cpu != NULL && gpu != NULL);
    double *dout = dev_alloc_poisoned(b, nrec + 1);
    if (nbytes > 0) {
        CHECK(GPU->mem_alloc(b->gpu, nbytes, &d));
        CHECK(GPU->copy_from_host(b->gpu, b->gs, d, h, nbytes));
    }
    gs_kfused_t kg = *k;
    k->leaves[0].data = h;
    k->out = cpu;
    kg.leaves[0].data = nbytes > 0 ? d : h;
    kg.out = dout;
    CHECK(CPU->fused(b->cpu, b->cs, k));
    CHECK(CPU->sync(b->cpu, b->cs));
    CHECK(GPU->fused(b->gpu, b->gs, &kg));
    CHECK(GPU->sync(b->gpu, b->gs));
    dev_download(b, gpu, dout, nrec);
    for (int64_t r = 0; r < nrec; r++)
        cr_assert(bits_equal(gpu[r], cpu[r]), "%s: record %lld: gpu %.17g cpu %.17g", what,
                  (long long)r, gpu[r], cpu[r]);
    if (d != NULL) GPU->mem_free(b->gpu, d);
    GPU->mem_free(b->gpu, dout);
    free(gpu);
    free(cpu);
}

Test(chunkops_cuda, prod_of_powers_of_two_is_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)256 << 20);
    rng_state = 2020;
    static const int64_t shapes[][2] = {{1, 1}, {37, 129}, {3, 400000}, {400000, 3},
                                        {1000, 1000}, {2, 65}};
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
        const int64_t R = shapes[si][0], L = shapes[si][1], N = R * L;
        double *x = malloc(sizeof(double) * (size_t)N);
        int32_t *xi = malloc(sizeof(int32_t) * (size_t)N);
        cr_assert(x != NULL && xi != NULL);
        for (int special = 0; special < 2; special++) {
            for (int64_t i = 0; i < N; i++) x[i] = factor(special);
            for (int64_t i = 0; i < N; i++)
                xi[i] = isfinite(x[i]) && fabs(x[i]) >= 1 ? (int32_t)x[i] : 1;
            for (int axis = -1; axis < 2; axis++) {
                gs_kfused_t k;
                char what[96];
                snprintf(what, sizeof(what), "float64 %lldx%lld axis %d special %d",
                         (long long)R, (long long)L, axis, special);
                prod_spec(&k, R, L, GS_DTYPE_FLOAT64, axis);
                run_compare(&b, &k, x, sizeof(double) * (size_t)N, what);
                snprintf(what, sizeof(what), "int32 %lldx%lld axis %d special %d", (long long)R,
                         (long long)L, axis, special);
                prod_spec(&k, R, L, GS_DTYPE_INT32, axis);
                run_compare(&b, &k, xi, sizeof(int32_t) * (size_t)N, what);
            }
        }
        free(xi);
        free(x);
    }
    bk_close(&b);
}

Test(chunkops_cuda, prod_of_an_empty_region_is_one)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    static const double none[1] = {0};
    for (int axis = -1; axis < 2; axis++) {
        gs_kfused_t k;
        char what[64];
        prod_spec(&k, 5, 0, GS_DTYPE_FLOAT64, axis);
        k.leaves[0].kind = GS_LEAF_INDEX;   /* empty regions read nothing (graph/layer.c) */
        k.leaves[0].data_len = 0;
        if (gs_kfused_nrecords(&k) == 0) continue;
        snprintf(what, sizeof(what), "empty axis %d", axis);
        run_compare(&b, &k, none, 0, what);
    }
    bk_close(&b);
}
