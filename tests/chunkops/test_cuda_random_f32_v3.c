/* float32 version 3 normals (docs/random.md "float32 version 3": elements 4k, 4k + 2 and 4k + 1,
 * 4k + 3 share Box-Muller pairs) and version 4 normals ("float32 version 4": elements 8g + p + 2m,
 * m = 0..3, are the four normals of block (g, p)), each test run for both versions, on the CUDA
 * backend against the CPU backend, bit for bit, and
 * against the definition at every element: unit stride, stride 2 (the seed's x[::2, ::2]),
 * stride 2 with odd row widths and odd offsets, a transposed read, stride -1 and stride 3, at
 * large global offsets; the CHAIN kernels with float32 + - * (the f32 v3 walk), with a float64
 * tail (the generic chain), a two-leaf program (the interpreter), and the seed's whole-region
 * sum. Each GPU comparison runs twice: with the float32 pair kernels (fused_pairs_f32.cu, the
 * default: stride 1 and 2 along rows, odd offsets, odd row strides, rows of 1031 elements,
 * negative row steps, 1-D regions, STORE into float32 and float64, and the SUM) and with
 * GS_CUDA_F32PAIRS=0 (the CHAIN walk); gs__cuda_f32pairs_fits says which programs the pair
 * kernels take (version 4: stride 1 both blocks of a group, stride 2 the block of the row's
 * parity; offsets of every residue mod 8). Skips when there is no CUDA device (the plan test runs
 * without one). */

#include "cuda_test_util.h"

#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/elem_dtype.h"
#include "chunkops/random.h"

#include <stdlib.h>

enum { RR = 67, CC = 1031, NN = RR * CC };

static int ver = 3; /* the version under test: spec_f32 and want_f32 build and check it */

/* the element form of version @a v */
static float f32n(int v, uint64_t seed, uint64_t i, double mean, double std)
{
    return v == 4 ? gs_random_normal_f32_v4(seed, i, mean, std)
                  : gs_random_normal_f32_v3(seed, i, mean, std);
}

/* program @a prog over an RR x CC region of a leaf of version `ver` at @a base with strides
 * (s0, s1):
 *   0: LEAF, ADD_IMM 1 (float32)                       -> float32
 *   1: LEAF                                            -> float32
 *   2: LEAF, CAST float64, ADD_IMM 0.1 (float64)       -> float64
 *   3: LEAF 0, LEAF 1 (the same array at base + 1), ADD (float32) -> float32
 *   4: LEAF, MUL_IMM 0.5, SUB_IMM 2 (float32), CAST float64         -> float64 */
enum { NPROG = 5 };
static void spec_f32(gs_kfused_t *k, int prog, int64_t base, int64_t s0, int64_t s1, void *out)
{
    memset(k, 0, sizeof(*k));
    k->ndim = 2;
    k->shape[0] = RR;
    k->shape[1] = CC;
    k->nleaves = prog == 3 ? 2 : 1;
    for (int l = 0; l < k->nleaves; l++) {
        k->leaves[l].kind = ver == 4 ? GS_LEAF_NORMAL_F32_V4 : GS_LEAF_NORMAL_F32_V3;
        k->leaves[l].base = base + l;
        k->leaves[l].stride[0] = s0;
        k->leaves[l].stride[1] = s1;
        k->leaves[l].seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)base;
        k->leaves[l].p0 = 10.0;
        k->leaves[l].p1 = 1.0;
    }
    k->prog[0].op = GS_OP_LEAF;
    k->prog[0].dtype = GS_DTYPE_FLOAT32;
    k->nprog = 1;
    k->out_dtype = GS_DTYPE_FLOAT32;
    if (prog == 0) {
        k->prog[1].op = GS_OP_ADD_IMM;
        k->prog[1].imm = 1.0;
        k->prog[1].dtype = GS_DTYPE_FLOAT32;
        k->nprog = 2;
    } else if (prog == 2) {
        k->prog[1].op = GS_OP_CAST;
        k->prog[1].dtype = GS_DTYPE_FLOAT32;
        k->prog[1].arg = GS_DTYPE_FLOAT64;
        k->prog[2].op = GS_OP_ADD_IMM;
        k->prog[2].imm = 0.1;
        k->prog[2].dtype = GS_DTYPE_FLOAT64;
        k->nprog = 3;
        k->out_dtype = GS_DTYPE_FLOAT64;
    } else if (prog == 4) {
        k->prog[1].op = GS_OP_MUL_IMM;
        k->prog[1].imm = 0.5;
        k->prog[1].dtype = GS_DTYPE_FLOAT32;
        k->prog[2].op = GS_OP_SUB_IMM;
        k->prog[2].imm = 2.0;
        k->prog[2].dtype = GS_DTYPE_FLOAT32;
        k->prog[3].op = GS_OP_CAST;
        k->prog[3].dtype = GS_DTYPE_FLOAT32;
        k->prog[3].arg = GS_DTYPE_FLOAT64;
        k->nprog = 4;
        k->out_dtype = GS_DTYPE_FLOAT64;
    } else if (prog == 3) {
        k->prog[1].op = GS_OP_LEAF;
        k->prog[1].arg = 1;
        k->prog[1].dtype = GS_DTYPE_FLOAT32;
        k->prog[2].op = GS_OP_ADD;
        k->prog[2].dtype = GS_DTYPE_FLOAT32;
        k->nprog = 3;
    }
    k->terminal = GS_TERM_STORE;
    k->out = out;
}

/* the definition of element e (row-major in the region) of program @a prog */
static double want_f32(const gs_kfused_t *k, int prog, int64_t e)
{
    const int64_t i = e / CC, j = e % CC;
    const gs_kleaf_t *lf = &k->leaves[0];
    const uint64_t g = (uint64_t)(lf->base + i * lf->stride[0] + j * lf->stride[1]);
    const float v = f32n(ver, lf->seed, g, 10.0, 1.0);
    switch (prog) {
    case 0: return (double)(v + 1.0f);
    case 2: return (double)v + 0.1;
    case 3: return (double)(v + f32n(ver, lf->seed, g + 1, 10.0, 1.0));
    case 4: return (double)(v * 0.5f - 2.0f);
    default: return (double)v;
    }
}

/* 1 when the pair kernels take program @a prog read with row stride @a s1 (the float32
 * chains 0, 1, 4 with stride 1 or 2) */
static int pairs_expected(int prog, int64_t s1)
{
    return (prog == 0 || prog == 1 || prog == 4) && (s1 == 1 || s1 == 2);
}

/* the plan: which specs the float32 pair kernels take (host only: runs without a GPU) */
static void check_plan(int v)
{
    ver = v;
    gs__cuda_dev_t dev;
    memset(&dev, 0, sizeof(dev));
    dev.num_sms = 132;
    static const int64_t s1s[] = {1, 2, 3, -1, -2, RR};
    int taken = 0;
    for (int prog = 0; prog < NPROG; prog++)
        for (int si = 0; si < 6; si++) {
            gs_kfused_t k;
            spec_f32(&k, prog, 1 << 20, 4 * CC, s1s[si], NULL);
            dev.no_f32pairs = 0;
            const int want = pairs_expected(prog, s1s[si]);
            cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), want, "prog %d stride %lld", prog,
                         (long long)s1s[si]);
            taken += want;
            /* the whole-region sum into float64 too; not a sum along an axis */
            k.terminal = GS_TERM_REDUCE;
            k.redop = GS_RED_SUM;
            k.red_axis = -1;
            k.out_dtype = GS_DTYPE_FLOAT64;
            cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), want);
            k.red_axis = 1;
            cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), 0);
            k.red_axis = -1;
            k.redop = GS_RED_MAX;
            cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), 0);
            /* GS_CUDA_F32PAIRS=0: never */
            k.redop = GS_RED_SUM;
            dev.no_f32pairs = 1;
            cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), 0);
        }
    cr_assert_eq(taken, 3 * 2);
    /* 1-D yes; 3-D, empty regions, a version-1 leaf and a float64 op no */
    gs_kfused_t k;
    dev.no_f32pairs = 0;
    spec_f32(&k, 0, 0, CC, 2, NULL);
    k.ndim = 1;
    cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), 0); /* the 1-D read's stride is CC */
    k.leaves[0].stride[0] = 2;
    cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), 1);
    k.shape[0] = 0;
    cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), 0);
    spec_f32(&k, 0, 0, CC, 1, NULL);
    k.ndim = 3;
    k.shape[2] = 4;
    k.leaves[0].stride[2] = 1;
    cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), 0);
    spec_f32(&k, 0, 0, CC, 1, NULL);
    k.leaves[0].kind = GS_LEAF_NORMAL_F32;
    cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), 0);
    spec_f32(&k, 0, 0, CC, 1, NULL);
    k.prog[1].imm = 0.1; /* not a binary32 value: the float32 chain does not take it */
    cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &k), 0);
}

Test(chunkops_cuda, float32_v3_pairs_kernel_takes_the_seed_shapes)
{
    check_plan(3);
}

Test(chunkops_cuda, float32_v4_pairs_kernel_takes_the_seed_shapes)
{
    check_plan(4);
}

/* one STORE of @a k (host output @a host) on the CPU and of @a kg on the GPU: equal bits */
static void store_cpu_gpu(bk_t *b, gs_kfused_t *k, gs_kfused_t *kg, double *host, double *gpu,
                          int64_t n, const char *what)
{
    const size_t es = k->out_dtype == GS_DTYPE_FLOAT64 ? 8 : 4, nb = (size_t)n * es;
    memset(host, 0, nb);
    CHECK(CPU->fused(b->cpu, b->cs, k));
    CHECK(CPU->sync(b->cpu, b->cs));
    CHECK(GPU->fused(b->gpu, b->gs, kg));
    CHECK(GPU->sync(b->gpu, b->gs));
    memset(gpu, 0, nb);
    CHECK(GPU->copy_to_host(b->gpu, b->gs, gpu, kg->out, nb));
    CHECK(GPU->sync(b->gpu, b->gs));
    if (memcmp(host, gpu, nb) != 0) {
        size_t e = 0;
        while (memcmp((char *)host + e * es, (char *)gpu + e * es, es) == 0) e++;
        cr_assert_fail("%s: element %zu differs (cpu %.9g, gpu %.9g)", what, e,
                       es == 8 ? host[e] : (double)((float *)host)[e],
                       es == 8 ? gpu[e] : (double)((float *)gpu)[e]);
    }
}

/* version 3: offsets 0, 1, 3 and large ones; version 4 also every other residue mod 8 */
static const int64_t bases[] = {0, 1, 3, (INT64_C(1) << 40) + 5, (INT64_C(1) << 62) - 1,
                                2, 4, 5, 6, 7, (INT64_C(1) << 40) + 2};

static void check_bitwise(int v)
{
    ver = v;
    const int nbases = v == 4 ? 11 : 5, noff = v == 4 ? 10 : 6;
    double *cpu = calloc(NN, sizeof(double)), *gpu = calloc(NN, sizeof(double));
    cr_assert(cpu != NULL && gpu != NULL);
    /* (s0, s1): unit stride; x[::2, ::2] of a 2CC-wide array; stride 2 with an odd row stride
     * (rows alternate between even and odd offsets); transposed; stride -1 (from the row's
     * end); stride 3; stride 2 and 1 with negative row steps (from the last row) */
    static const int64_t lay[][2] = {{CC, 1}, {4 * CC, 2}, {2 * CC + 1, 2}, {1, RR},
                                     {CC, -1}, {3 * CC, 3}, {-(2 * CC + 1), 2}, {-CC - 3, 1}};
    const int nlay = (int)(sizeof(lay) / sizeof(lay[0]));
    gs__cuda_dev_t dev;
    memset(&dev, 0, sizeof(dev));
    int checked = 0, paired = 0;
    /* pass 0: the pair kernels; pass 1: GS_CUDA_F32PAIRS=0 (the CHAIN walk) */
    for (int pass = 0; pass < 2; pass++) {
        cr_assert_eq(setenv("GS_CUDA_F32PAIRS", pass ? "0" : "1", 1), 0);
        dev.no_f32pairs = pass;
        bk_t b;
        bk_open(&b, (size_t)64 << 20);
        double *dout = dev_alloc_poisoned(&b, NN);
        for (int prog = 0; prog < NPROG; prog++)
            for (int bi = 0; bi < nbases; bi++)
                for (int layout = 0; layout < nlay; layout++) {
                    const int64_t s0 = lay[layout][0], s1 = lay[layout][1];
                    const int64_t base = bases[bi] + (s1 < 0 ? CC : 0) +
                                         (s0 < 0 ? (RR - 1) * -s0 : 0);
                    gs_kfused_t k, kg;
                    spec_f32(&k, prog, base, s0, s1, cpu);
                    spec_f32(&kg, prog, base, s0, s1, dout);
                    const int fits = gs__cuda_f32pairs_fits(&dev, &kg);
                    cr_assert_eq(fits, pass ? 0 : pairs_expected(prog, s1), "prog %d layout %d",
                                 prog, layout);
                    paired += fits;
                    char what[96];
                    snprintf(what, sizeof(what), "pass %d prog %d base %lld layout %d", pass,
                             prog, (long long)base, layout);
                    store_cpu_gpu(&b, &k, &kg, cpu, gpu, NN, what);
                    checked++;
                    if (pass) continue; /* the CPU's bits are the same on both passes */
                    /* and both are the definition at every element */
                    const int f64 = k.out_dtype == GS_DTYPE_FLOAT64;
                    for (int64_t e = 0; e < NN; e++) {
                        const double w = want_f32(&k, prog, e);
                        const double got = f64 ? cpu[e] : (double)((float *)cpu)[e];
                        cr_assert(bits_equal(got, w), "%s element %lld: %.17g, definition "
                                  "%.17g", what, (long long)e, got, w);
                    }
                }
        /* 1-D regions (one row) of lengths 1 .. 9 and CC from offsets 0 .. 5 (v4: 0 .. 9),
         * strides 1, 2 */
        for (int64_t len = 1; len <= 10; len++)
            for (int64_t off = 0; off < noff; off++)
                for (int64_t s1 = 1; s1 <= 2; s1++)
                    for (int prog = 0; prog < NPROG; prog += 4) {
                        gs_kfused_t k, kg;
                        spec_f32(&k, prog, off, 0, s1, cpu);
                        spec_f32(&kg, prog, off, 0, s1, dout);
                        k.ndim = kg.ndim = 1;
                        k.shape[0] = kg.shape[0] = len == 10 ? CC : len;
                        k.leaves[0].stride[0] = kg.leaves[0].stride[0] = s1;
                        cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &kg), !pass);
                        char what[96];
                        snprintf(what, sizeof(what), "pass %d 1-D len %lld off %lld stride %lld "
                                 "prog %d", pass, (long long)k.shape[0], (long long)off,
                                 (long long)s1, prog);
                        store_cpu_gpu(&b, &k, &kg, cpu, gpu, k.shape[0], what);
                        for (int64_t e = 0; e < k.shape[0]; e++) {
                            const uint64_t g = (uint64_t)(off + e * s1);
                            const float x = f32n(ver, k.leaves[0].seed, g, 10.0, 1.0);
                            const double w = prog == 4 ? (double)(x * 0.5f - 2.0f)
                                                       : (double)(x + 1.0f);
                            const double got = prog == 4 ? cpu[e] : (double)((float *)cpu)[e];
                            cr_assert(bits_equal(got, w), "%s element %lld", what, (long long)e);
                        }
                        checked++;
                    }
        GPU->mem_free(b.gpu, dout);
        bk_close(&b);
    }
    cr_assert_eq(unsetenv("GS_CUDA_F32PAIRS"), 0);
    cr_assert_eq(checked, 2 * (NPROG * nbases * nlay + 10 * noff * 2 * 2));
    cr_assert_eq(paired, 3 * nbases * 5); /* progs 0, 1, 4 x bases x the 5 layouts of stride 1, 2 */
    free(cpu);
    free(gpu);
}

Test(chunkops_cuda, float32_v3_random_is_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    check_bitwise(3);
}

Test(chunkops_cuda, float32_v4_random_is_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    check_bitwise(4);
}

/* the seed's typed reduction with v3 (v4) normals: (normal + 1) cast to float64 and summed over
 * the whole region in one pass (the pair kernel k_pairs_f32, and with GS_CUDA_F32PAIRS=0
 * k_typed_chain_sum, the v3 (v4) walk): equal to the CPU's sum up to the summation order, the same
 * bits on every run, mean 11; rows of 1 .. 3 elements, odd offsets, rows of odd parity */
static void check_seed_sum(int v)
{
    ver = v;
    enum { NSH = 9, NST = 7 };
    static const int64_t shapes[NSH][2] = {{RR, CC}, {1, 1}, {3000, 5}, {1, 100000}, {501, 503},
                                           {7, 3}, {5, 2}, {2, 1}, {0, 100001}};
    /* (base, row stride, stride): the seed's x[::2, ::2]; stride 2 with an odd row stride;
     * unit stride; unit stride from an odd offset; stride 2 with every row odd; stride 2 and 1
     * from offsets 6 and 5 mod 8 */
    static const int64_t strides[NST][3] = {{12345, 4 * CC, 2}, {12346, 2 * CC + 1, 2},
                                            {0, CC, 1}, {3, CC, 1}, {1, 4 * CC, 2},
                                            {14, 4 * CC, 2}, {13, CC, 1}};
    static double sums[2][NSH][NST];
    gs__cuda_dev_t dev;
    memset(&dev, 0, sizeof(dev));
    for (int pass = 0; pass < 2; pass++) {
        cr_assert_eq(setenv("GS_CUDA_F32PAIRS", pass ? "0" : "1", 1), 0);
        dev.no_f32pairs = pass;
        bk_t b;
        bk_open(&b, (size_t)64 << 20);
        double *dout = dev_alloc_poisoned(&b, 1);
        for (int sh = 0; sh < NSH; sh++)
            for (int st = 0; st < NST; st++) {
                gs_kfused_t k, kg;
                double cpu = 0, gpu[2];
                spec_f32(&k, 0, strides[st][0], strides[st][1], strides[st][2], &cpu);
                k.shape[0] = shapes[sh][0];
                k.shape[1] = shapes[sh][1];
                if (sh == NSH - 1) { /* 1-D: one row of 100001 */
                    k.ndim = 1;
                    k.shape[0] = shapes[sh][1];
                    k.leaves[0].stride[0] = strides[st][2];
                }
                k.prog[2].op = GS_OP_CAST;
                k.prog[2].dtype = GS_DTYPE_FLOAT32;
                k.prog[2].arg = GS_DTYPE_FLOAT64;
                k.nprog = 3;
                k.terminal = GS_TERM_REDUCE;
                k.redop = GS_RED_SUM;
                k.red_axis = -1;
                k.out_dtype = GS_DTYPE_FLOAT64;
                kg = k;
                kg.out = dout;
                cr_assert_eq(gs__cuda_f32pairs_fits(&dev, &kg), !pass);
                CHECK(CPU->fused(b.cpu, b.cs, &k));
                CHECK(CPU->sync(b.cpu, b.cs));
                for (int run = 0; run < 2; run++) {
                    CHECK(GPU->fused(b.gpu, b.gs, &kg));
                    CHECK(GPU->sync(b.gpu, b.gs));
                    dev_download(&b, &gpu[run], dout, 1);
                }
                const double n = (double)gs_region_size(k.ndim, k.shape);
                cr_assert(fabs(gpu[0] - cpu) <= 1e-12 * fabs(cpu), "pass %d shape %d stride "
                          "%d: gpu %.17g cpu %.17g", pass, sh, st, gpu[0], cpu);
                cr_assert(bits_equal(gpu[0], gpu[1]), "pass %d shape %d stride %d: runs give "
                          "%.17g and %.17g", pass, sh, st, gpu[0], gpu[1]);
                cr_assert(fabs(cpu / n - 11.0) < 6.0 / sqrt(n), "shape %d stride %d: mean %g",
                          sh, st, cpu / n);
                sums[pass][sh][st] = gpu[0];
            }
        GPU->mem_free(b.gpu, dout);
        bk_close(&b);
    }
    cr_assert_eq(unsetenv("GS_CUDA_F32PAIRS"), 0);
    /* the pair kernel and the CHAIN walk: the same sum up to the order */
    for (int sh = 0; sh < NSH; sh++)
        for (int st = 0; st < NST; st++)
            cr_assert(fabs(sums[0][sh][st] - sums[1][sh][st]) <= 1e-12 * fabs(sums[1][sh][st]),
                      "shape %d stride %d: pairs %.17g, chain %.17g", sh, st, sums[0][sh][st],
                      sums[1][sh][st]);
}

Test(chunkops_cuda, float32_v3_seed_sum_agrees_with_cpu_and_repeats)
{
    GPU_OR_SKIP();
    check_seed_sum(3);
}

Test(chunkops_cuda, float32_v4_seed_sum_agrees_with_cpu_and_repeats)
{
    GPU_OR_SKIP();
    check_seed_sum(4);
}
