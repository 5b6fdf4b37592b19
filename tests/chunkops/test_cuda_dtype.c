/* Typed fused programs (graph/kernel.h, "Dtypes") on the CUDA backend against the CPU backend:
 * every dtype with binary, unary and cast instructions over special values (integer extremes
 * that wrap, NaN and infinities, float16 rounding) as STORE programs, and COMBINE finalising
 * into int64 and float32. Both backends evaluate the element rules of chunkops/elem_dtype.h,
 * so the stored bytes must be identical (no libm function is involved). Skips when there is no
 * CUDA device. */

#include "cuda_test_util.h"

#include "chunkops/elem_dtype.h"

static const gs_dtype_t dts[] = {GS_DTYPE_FLOAT32, GS_DTYPE_FLOAT16, GS_DTYPE_INT32,
                                 GS_DTYPE_INT64,   GS_DTYPE_UINT8,   GS_DTYPE_BOOL,
                                 GS_DTYPE_FLOAT64};
enum { NDT = sizeof(dts) / sizeof(dts[0]) };

static const double fvals[] = {0.0, -0.0, 1.5, -2.25, 1e30, -1e-30, INFINITY, -INFINITY, NAN,
                               3.0, 65504.0, 65520.0, 0.1, 7.0, -7.0, 2.0};
static const double ivals[] = {0, 1, -1, 2, -3, 7, 100, -128, 127, 255, 256, 2147483647.0,
                               -2147483648.0, 4611686018427387904.0, -7, 13};
enum { NV = sizeof(fvals) / sizeof(fvals[0]) };

/* NV x NV elements of dtype d: a[i, j] = v[i], b[i, j] = v[j] (as astype would give them). */
static void fill(gs_dtype_t d, void *a, void *b)
{
    const double *v = gs_dt_is_float(d) ? fvals : ivals;
    for (int i = 0; i < NV; i++)
        for (int j = 0; j < NV; j++) {
            gs_store_elem(d, a, i * NV + j, gs_cast_value(GS_DTYPE_FLOAT64, d, v[i]));
            gs_store_elem(d, b, i * NV + j, gs_cast_value(GS_DTYPE_FLOAT64, d, v[j]));
        }
}

/* LEAF a [LEAF b] OP (compute dtype d), stored as @a od. */
static void spec(gs_kfused_t *k, gs_dtype_t d, const void *a, const void *b, int op, int arg,
                 int binary, gs_dtype_t od, void *out)
{
    memset(k, 0, sizeof(*k));
    k->ndim = 2;
    k->shape[0] = NV;
    k->shape[1] = NV;
    k->nleaves = 2;
    for (int l = 0; l < 2; l++) {
        k->leaves[l].kind = GS_LEAF_CHUNK;
        k->leaves[l].dtype = d;
        k->leaves[l].data = l ? b : a;
        k->leaves[l].data_len = NV * NV;
        k->leaves[l].stride[0] = NV;
        k->leaves[l].stride[1] = 1;
    }
    k->prog[0].op = GS_OP_LEAF;
    k->prog[0].dtype = d;
    k->prog[1].op = GS_OP_LEAF;
    k->prog[1].arg = 1;
    k->prog[1].dtype = d;
    k->prog[binary ? 2 : 1].op = op;
    k->prog[binary ? 2 : 1].arg = arg;
    k->prog[binary ? 2 : 1].dtype = d;
    k->prog[binary ? 2 : 1].imm = 3.0;
    k->nprog = binary ? 3 : 2;
    if (op == GS_OP_CONST) {   /* no operand: the constant alone */
        k->prog[0] = k->prog[1];
        k->nprog = 1;
    }
    k->terminal = GS_TERM_STORE;
    k->out_dtype = od;
    k->out = out;
}

Test(chunkops_cuda, typed_programs_agree_with_cpu_bytewise)
{
    GPU_OR_SKIP();
    static const int bin_ops[] = {GS_OP_ADD, GS_OP_SUB, GS_OP_MUL, GS_OP_MIN,     GS_OP_MAX,
                                  GS_OP_LT,  GS_OP_EQ,  GS_OP_NE,  GS_OP_FLOORDIV, GS_OP_MOD,
                                  GS_OP_LAND, GS_OP_LXOR};
    static const int un_ops[] = {GS_OP_NEG,     GS_OP_ABS,     GS_OP_SQUARE, GS_OP_ISNAN,
                                 GS_OP_LNOT,    GS_OP_ADD_IMM, GS_OP_MUL_IMM, GS_OP_RSUB_IMM,
                                 GS_OP_FLOORDIV_IMM, GS_OP_SIGN, GS_OP_CONST};
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    enum { N = NV * NV, W = N + 1 };   /* W doubles hold N elements of any dtype */
    double ha[W], hb[W], cpu[W], gpu[W];
    double *da = dev_alloc_poisoned(&b, W), *db = dev_alloc_poisoned(&b, W);
    double *dout = dev_alloc_poisoned(&b, W);
    for (int t = 0; t < NDT; t++) {
        const gs_dtype_t d = dts[t];
        const size_t nb = (size_t)N * (size_t)gs_dt_size(d);
        memset(ha, 0, sizeof(ha));
        memset(hb, 0, sizeof(hb));
        fill(d, ha, hb);
        CHECK(GPU->copy_from_host(b.gpu, b.gs, da, ha, nb));
        CHECK(GPU->copy_from_host(b.gpu, b.gs, db, hb, nb));
        for (int kind = 0; kind < 3; kind++) {
            const int nops = kind == 0 ? (int)(sizeof(bin_ops) / sizeof(bin_ops[0]))
                             : kind == 1 ? (int)(sizeof(un_ops) / sizeof(un_ops[0]))
                                         : NDT;
            for (int o = 0; o < nops; o++) {
                int op = kind == 0 ? bin_ops[o] : kind == 1 ? un_ops[o] : GS_OP_CAST;
                int arg = kind == 2 ? (int)dts[o] : 0;
                gs_dtype_t od = kind == 2 ? dts[o] : gs_op_is_predicate(op) ? GS_DTYPE_BOOL : d;
                gs_kfused_t k, kg;
                memset(cpu, 0, sizeof(cpu));
                spec(&k, d, ha, hb, op, arg, kind == 0, od, cpu);
                spec(&kg, d, da, db, op, arg, kind == 0, od, dout);
                CHECK(CPU->fused(b.cpu, b.cs, &k));
                CHECK(CPU->sync(b.cpu, b.cs));
                CHECK(GPU->fused(b.gpu, b.gs, &kg));
                CHECK(GPU->sync(b.gpu, b.gs));
                memset(gpu, 0, sizeof(gpu));
                CHECK(GPU->copy_to_host(b.gpu, b.gs, gpu, dout, (size_t)N * (size_t)gs_dt_size(od)));
                CHECK(GPU->sync(b.gpu, b.gs));
                if (memcmp(cpu, gpu, (size_t)N * (size_t)gs_dt_size(od)) != 0) {
                    const size_t es = (size_t)gs_dt_size(od);
                    int at = 0;
                    uint64_t cb = 0, gb = 0;
                    while (at < N && memcmp((char *)cpu + at * es, (char *)gpu + at * es, es) == 0) at++;
                    memcpy(&cb, (char *)cpu + at * es, es);
                    memcpy(&gb, (char *)gpu + at * es, es);
                    cr_assert_fail("%s op %d (arg %d): gpu and cpu bytes differ first at element %d "
                                   "(a = %g, b = %g): cpu %#llx, gpu %#llx", gs_dtype_name(d), op,
                                   arg, at, gs_load_elem(d, ha, at), gs_load_elem(d, hb, at),
                                   (unsigned long long)cb, (unsigned long long)gb);
                }
            }
        }
    }
    GPU->mem_free(b.gpu, dout);
    GPU->mem_free(b.gpu, da);
    GPU->mem_free(b.gpu, db);
    bk_close(&b);
}

/* int32 data cast to float64 and reduced (the lowering's typed REDUCE form): all axes and
 * along each axis, SUM (exact: integers), MAX and ARGMAX, CPU and GPU records equal */
Test(chunkops_cuda, typed_reductions_agree_with_cpu)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    enum { R = 37, K = 129, N = R * K };
    _Alignas(8) int32_t h[N];
    double cpu[2 * K + 2], gpu[2 * K + 2];
    for (int i = 0; i < N; i++) h[i] = (int32_t)((i * 2654435761u) % 200001u) - 100000;
    double *d = dev_alloc_poisoned(&b, N), *dout = dev_alloc_poisoned(&b, 2 * K + 2);
    CHECK(GPU->copy_from_host(b.gpu, b.gs, d, h, sizeof(h)));
    static const int ops[] = {GS_RED_SUM, GS_RED_MAX, GS_RED_ARGMAX};
    for (int o = 0; o < 3; o++)
        for (int axis = -1; axis < 2; axis++) {
            gs_kfused_t k, kg;
            memset(&k, 0, sizeof(k));
            k.ndim = 2;
            k.shape[0] = R;
            k.shape[1] = K;
            k.nleaves = 1;
            k.leaves[0].kind = GS_LEAF_CHUNK;
            k.leaves[0].dtype = GS_DTYPE_INT32;
            k.leaves[0].data_len = N;
            k.leaves[0].stride[0] = K;
            k.leaves[0].stride[1] = 1;
            k.prog[0].op = GS_OP_LEAF;
            k.prog[0].dtype = GS_DTYPE_INT32;
            k.prog[1].op = GS_OP_CAST;
            k.prog[1].dtype = GS_DTYPE_INT32;
            k.prog[1].arg = GS_DTYPE_FLOAT64;
            k.nprog = 2;
            k.terminal = GS_TERM_REDUCE;
            k.redop = ops[o];
            k.red_axis = axis;
            k.idx_stride[0] = K;
            k.idx_stride[1] = 1;
            kg = k;
            k.leaves[0].data = (const double *)h;
            k.out = cpu;
            kg.leaves[0].data = d;
            kg.out = dout;
            const int64_t nrec = gs_kfused_nrecords(&k) * gs_redop_width((gs_redop_t)ops[o]);
            CHECK(CPU->fused(b.cpu, b.cs, &k));
            CHECK(CPU->sync(b.cpu, b.cs));
            CHECK(GPU->fused(b.gpu, b.gs, &kg));
            CHECK(GPU->sync(b.gpu, b.gs));
            dev_download(&b, gpu, dout, nrec);
            for (int64_t r = 0; r < nrec; r++)
                cr_assert(bits_equal(gpu[r], cpu[r]), "op %d axis %d record %lld: gpu %.17g cpu %.17g",
                          ops[o], axis, (long long)r, gpu[r], cpu[r]);
        }
    GPU->mem_free(b.gpu, dout);
    GPU->mem_free(b.gpu, d);
    bk_close(&b);
}

Test(chunkops_cuda, combine_finalizes_into_the_result_dtype)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    enum { R = 37 };
    double rec[2][R], cpu[R], gpu[R];
    for (int i = 0; i < R; i++) {
        rec[0][i] = (double)(i * 1000003 % 9973) - 4000.0;
        rec[1][i] = (double)i * 0.1;
    }
    double *d0 = dev_upload(&b, rec[0], R), *d1 = dev_upload(&b, rec[1], R);
    double *dout = dev_alloc_poisoned(&b, R);
    static const gs_dtype_t outs[] = {GS_DTYPE_INT64, GS_DTYPE_FLOAT32, GS_DTYPE_INT32};
    for (int o = 0; o < 3; o++) {
        gs_kcombine_t k, kg;
        memset(&k, 0, sizeof(k));
        k.redop = GS_RED_SUM;
        k.finalize = 1;
        k.nrec = R;
        k.ninputs = 2;
        k.out_dtype = outs[o];
        kg = k;
        k.inputs[0] = rec[0];
        k.inputs[1] = rec[1];
        k.out = cpu;
        kg.inputs[0] = d0;
        kg.inputs[1] = d1;
        kg.out = dout;
        memset(cpu, 0, sizeof(cpu));
        memset(gpu, 0, sizeof(gpu));
        CHECK(CPU->combine(b.cpu, b.cs, &k));
        CHECK(CPU->sync(b.cpu, b.cs));
        CHECK(GPU->combine(b.gpu, b.gs, &kg));
        CHECK(GPU->sync(b.gpu, b.gs));
        dev_download(&b, gpu, dout, R);
        cr_assert(memcmp(cpu, gpu, (size_t)R * (size_t)gs_dt_size(outs[o])) == 0,
                  "combine into %s differs", gs_dtype_name(outs[o]));
    }
    GPU->mem_free(b.gpu, dout);
    GPU->mem_free(b.gpu, d0);
    GPU->mem_free(b.gpu, d1);
    bk_close(&b);
}

Test(chunkops_cuda, where_agrees_with_cpu)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    enum { N = 1000 };
    /* 8-byte aligned: the spec's pointers are double * (graph/kernel.h, "Dtypes") */
    _Alignas(8) uint8_t hc[N];
    _Alignas(8) float ha[N];
    _Alignas(8) float hb[N];
    _Alignas(8) float cpu[N];
    _Alignas(8) float gpu[N];
    for (int i = 0; i < N; i++) {
        hc[i] = (uint8_t)((i * 7919) % 3 == 0);
        ha[i] = (float)i * 0.5f;
        hb[i] = -(float)i;
    }
    double *dc = dev_alloc_poisoned(&b, N), *da = dev_alloc_poisoned(&b, N);
    double *db = dev_alloc_poisoned(&b, N), *dout = dev_alloc_poisoned(&b, N);
    CHECK(GPU->copy_from_host(b.gpu, b.gs, dc, hc, sizeof(hc)));
    CHECK(GPU->copy_from_host(b.gpu, b.gs, da, ha, sizeof(ha)));
    CHECK(GPU->copy_from_host(b.gpu, b.gs, db, hb, sizeof(hb)));
    gs_kfused_t k, kg;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = N;
    k.nleaves = 3;
    for (int l = 0; l < 3; l++) {
        k.leaves[l].kind = GS_LEAF_CHUNK;
        k.leaves[l].dtype = l == 0 ? GS_DTYPE_BOOL : GS_DTYPE_FLOAT32;
        k.leaves[l].data_len = N;
        k.leaves[l].stride[0] = l == 2 ? -1 : 1;   /* b read backwards */
        k.leaves[l].base = l == 2 ? N - 1 : 0;
        k.prog[l].op = GS_OP_LEAF;
        k.prog[l].arg = l;
        k.prog[l].dtype = k.leaves[l].dtype;
    }
    k.prog[3].op = GS_OP_WHERE;
    k.prog[3].dtype = GS_DTYPE_FLOAT32;
    k.nprog = 4;
    k.terminal = GS_TERM_STORE;
    k.out_dtype = GS_DTYPE_FLOAT32;
    kg = k;
    k.leaves[0].data = (const double *)hc;
    k.leaves[1].data = (const double *)ha;
    k.leaves[2].data = (const double *)hb;
    k.out = (double *)cpu;
    kg.leaves[0].data = dc;
    kg.leaves[1].data = da;
    kg.leaves[2].data = db;
    kg.out = dout;
    CHECK(CPU->fused(b.cpu, b.cs, &k));
    CHECK(CPU->sync(b.cpu, b.cs));
    CHECK(GPU->fused(b.gpu, b.gs, &kg));
    CHECK(GPU->copy_to_host(b.gpu, b.gs, gpu, dout, sizeof(gpu)));
    CHECK(GPU->sync(b.gpu, b.gs));
    for (int i = 0; i < N; i++) {
        cr_assert_eq(cpu[i], hc[i] ? ha[i] : hb[N - 1 - i], "cpu element %d", i);
        cr_assert_eq(gpu[i], cpu[i], "gpu element %d: %g vs %g", i, (double)gpu[i], (double)cpu[i]);
    }
    GPU->mem_free(b.gpu, dout);
    GPU->mem_free(b.gpu, db);
    GPU->mem_free(b.gpu, da);
    GPU->mem_free(b.gpu, dc);
    bk_close(&b);
}

/* COPY of 1-, 2- and 4-byte elements (rechunk/concatenate of other dtypes): a transposing
 * piece and a strided one, CPU and GPU bytes equal */
Test(chunkops_cuda, copy_moves_every_element_size)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    enum { R = 19, K = 23, N = R * K };
    _Alignas(8) uint8_t src[N * 4];
    _Alignas(8) uint8_t cpu[N * 4];
    _Alignas(8) uint8_t gpu[N * 4];
    for (int i = 0; i < N * 4; i++) src[i] = (uint8_t)(i * 37 + 11);
    double *ds = dev_alloc_poisoned(&b, N / 2 + 1), *dout = dev_alloc_poisoned(&b, N / 2 + 1);
    CHECK(GPU->copy_from_host(b.gpu, b.gs, ds, src, sizeof(src)));
    static const int sizes[] = {1, 2, 4};
    for (int e = 0; e < 3; e++) {
        gs_kcopy_t *k = calloc(1, sizeof(*k)), *kg = calloc(1, sizeof(*kg));
        cr_assert(k != NULL && kg != NULL);
        k->ndim = 2;
        k->shape[0] = K;
        k->shape[1] = R;
        k->npieces = 1;
        k->elem_size = sizes[e];
        gs_kpiece_t *pc = &k->pieces[0];
        pc->src_len = N;
        pc->src_stride[0] = 1;   /* out (j, i) = in (i, j): a transpose */
        pc->src_stride[1] = K;
        pc->size[0] = K;
        pc->size[1] = R;
        *kg = *k;
        k->pieces[0].src = (const double *)src;
        k->out = (double *)cpu;
        kg->pieces[0].src = ds;
        kg->out = dout;
        memset(cpu, 0, sizeof(cpu));
        memset(gpu, 0, sizeof(gpu));
        CHECK(CPU->copy(b.cpu, b.cs, k));
        CHECK(CPU->sync(b.cpu, b.cs));
        CHECK(GPU->copy(b.gpu, b.gs, kg));
        CHECK(GPU->copy_to_host(b.gpu, b.gs, gpu, dout, (size_t)N * (size_t)sizes[e]));
        CHECK(GPU->sync(b.gpu, b.gs));
        for (int j = 0; j < K; j++)
            for (int i = 0; i < R; i++)
                cr_assert(memcmp(cpu + ((size_t)j * R + i) * sizes[e],
                                 src + ((size_t)i * K + j) * sizes[e], (size_t)sizes[e]) == 0,
                          "cpu element (%d, %d) of size %d", j, i, sizes[e]);
        cr_assert(memcmp(cpu, gpu, (size_t)N * (size_t)sizes[e]) == 0, "element size %d: gpu "
                  "and cpu differ", sizes[e]);
        free(k);
        free(kg);
    }
    GPU->mem_free(b.gpu, dout);
    GPU->mem_free(b.gpu, ds);
    bk_close(&b);
}
