/* float32 version 3 normals (docs/random.md "float32 version 3": elements 4k, 4k + 2 and 4k + 1,
 * 4k + 3 share Box-Muller pairs) on the CUDA backend against the CPU backend, bit for bit, and
 * against the definition at every element: unit stride, stride 2 (the seed's x[::2, ::2]),
 * stride 2 with odd row widths and odd offsets, a transposed read, stride -1 and stride 3, at
 * large global offsets; the CHAIN kernels with float32 + - * (the f32 v3 walk), with a float64
 * tail (the generic chain), a two-leaf program (the interpreter), and the seed's whole-region
 * sum. Skips when there is no CUDA device. */

#include "cuda_test_util.h"

#include "chunkops/elem_dtype.h"
#include "chunkops/random.h"

enum { RR = 67, CC = 1031, NN = RR * CC };

/* program @a prog over an RR x CC region of a v3 leaf at @a base with strides (s0, s1):
 *   0: LEAF, ADD_IMM 1 (float32)                       -> float32
 *   1: LEAF                                            -> float32
 *   2: LEAF, CAST float64, ADD_IMM 0.1 (float64)       -> float64
 *   3: LEAF 0, LEAF 1 (the same array at base + 1), ADD (float32) -> float32 */
static void spec_v3(gs_kfused_t *k, int prog, int64_t base, int64_t s0, int64_t s1, void *out)
{
    memset(k, 0, sizeof(*k));
    k->ndim = 2;
    k->shape[0] = RR;
    k->shape[1] = CC;
    k->nleaves = prog == 3 ? 2 : 1;
    for (int l = 0; l < k->nleaves; l++) {
        k->leaves[l].kind = GS_LEAF_NORMAL_F32_V3;
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
static double want_v3(const gs_kfused_t *k, int prog, int64_t e)
{
    const int64_t i = e / CC, j = e % CC;
    const gs_kleaf_t *lf = &k->leaves[0];
    const uint64_t g = (uint64_t)(lf->base + i * lf->stride[0] + j * lf->stride[1]);
    const float v = gs_random_normal_f32_v3(lf->seed, g, 10.0, 1.0);
    switch (prog) {
    case 0: return (double)(v + 1.0f);
    case 2: return (double)v + 0.1;
    case 3: return (double)(v + gs_random_normal_f32_v3(lf->seed, g + 1, 10.0, 1.0));
    default: return (double)v;
    }
}

Test(chunkops_cuda, float32_v3_random_is_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    double *cpu = calloc(NN, sizeof(double)), *gpu = calloc(NN, sizeof(double));
    cr_assert(cpu != NULL && gpu != NULL);
    double *dout = dev_alloc_poisoned(&b, NN);
    static const int64_t bases[] = {0, 1, 3, (INT64_C(1) << 40) + 5, (INT64_C(1) << 62) - 1};
    /* (s0, s1): unit stride; x[::2, ::2] of a 2CC-wide array; stride 2 with an odd row stride
     * (rows alternate between even and odd offsets); transposed; stride -1 (from the row's
     * end); stride 3 */
    static const int64_t lay[][2] = {{CC, 1}, {4 * CC, 2}, {2 * CC + 1, 2}, {1, RR},
                                     {CC, -1}, {3 * CC, 3}};
    const int nlay = (int)(sizeof(lay) / sizeof(lay[0]));
    int checked = 0;
    for (int prog = 0; prog < 4; prog++)
        for (int bi = 0; bi < 5; bi++)
            for (int layout = 0; layout < nlay; layout++) {
                const int64_t base = bases[bi] + (lay[layout][1] < 0 ? CC : 0);
                gs_kfused_t k, kg;
                spec_v3(&k, prog, base, lay[layout][0], lay[layout][1], cpu);
                spec_v3(&kg, prog, base, lay[layout][0], lay[layout][1], dout);
                const size_t es = k.out_dtype == GS_DTYPE_FLOAT64 ? 8 : 4, nb = (size_t)NN * es;
                memset(cpu, 0, nb);
                CHECK(CPU->fused(b.cpu, b.cs, &k));
                CHECK(CPU->sync(b.cpu, b.cs));
                CHECK(GPU->fused(b.gpu, b.gs, &kg));
                CHECK(GPU->sync(b.gpu, b.gs));
                memset(gpu, 0, nb);
                CHECK(GPU->copy_to_host(b.gpu, b.gs, gpu, dout, nb));
                CHECK(GPU->sync(b.gpu, b.gs));
                if (memcmp(cpu, gpu, nb) != 0) {
                    size_t e = 0;
                    while (memcmp((char *)cpu + e * es, (char *)gpu + e * es, es) == 0) e++;
                    cr_assert_fail("prog %d base %lld layout %d: element %zu differs (cpu %.9g, "
                                   "gpu %.9g)", prog, (long long)base, layout, e,
                                   es == 8 ? cpu[e] : (double)((float *)cpu)[e],
                                   es == 8 ? gpu[e] : (double)((float *)gpu)[e]);
                }
                /* and both are the definition at every element */
                for (int64_t e = 0; e < NN; e++) {
                    const double w = want_v3(&k, prog, e);
                    const double got = es == 8 ? cpu[e] : (double)((float *)cpu)[e];
                    cr_assert(bits_equal(got, w), "prog %d base %lld layout %d element %lld: "
                              "%.17g, definition %.17g", prog, (long long)base, layout,
                              (long long)e, got, w);
                }
                checked++;
            }
    cr_assert_eq(checked, 4 * 5 * nlay);
    GPU->mem_free(b.gpu, dout);
    free(cpu);
    free(gpu);
    bk_close(&b);
}

/* the seed's typed reduction with v3 normals: (normal_f32_v3 + 1) cast to float64 and summed over
 * the whole region in one pass (k_typed_chain_sum, the v3 walk): equal to the CPU's sum up to
 * the summation order, the same bits on every run, mean 11 */
Test(chunkops_cuda, float32_v3_seed_sum_agrees_with_cpu_and_repeats)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    double *dout = dev_alloc_poisoned(&b, 1);
    static const int64_t shapes[][2] = {{RR, CC}, {1, 1}, {3000, 5}, {1, 100000}, {501, 503}};
    static const int64_t strides[][3] = {{12345, 4 * CC, 2}, {12346, 2 * CC + 1, 2},
                                         {0, CC, 1}};
    for (int sh = 0; sh < 5; sh++)
        for (int st = 0; st < 3; st++) {
            gs_kfused_t k, kg;
            double cpu = 0, gpu[2];
            spec_v3(&k, 0, strides[st][0], strides[st][1], strides[st][2], &cpu);
            k.shape[0] = shapes[sh][0];
            k.shape[1] = shapes[sh][1];
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
            CHECK(CPU->fused(b.cpu, b.cs, &k));
            CHECK(CPU->sync(b.cpu, b.cs));
            for (int run = 0; run < 2; run++) {
                CHECK(GPU->fused(b.gpu, b.gs, &kg));
                CHECK(GPU->sync(b.gpu, b.gs));
                dev_download(&b, &gpu[run], dout, 1);
            }
            const double n = (double)(shapes[sh][0] * shapes[sh][1]);
            cr_assert(fabs(gpu[0] - cpu) <= 1e-12 * fabs(cpu), "shape %d stride %d: gpu %.17g "
                      "cpu %.17g", sh, st, gpu[0], cpu);
            cr_assert(bits_equal(gpu[0], gpu[1]), "shape %d stride %d: runs give %.17g and "
                      "%.17g", sh, st, gpu[0], gpu[1]);
            cr_assert(fabs(cpu / n - 11.0) < 6.0 / sqrt(n), "shape %d stride %d: mean %g", sh,
                      st, cpu / n);
        }
    GPU->mem_free(b.gpu, dout);
    bk_close(&b);
}
