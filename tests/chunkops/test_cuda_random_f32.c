/* The float32 random definition and random integers (docs/random.md "float32 random" and
 * "Random integers") on the CUDA backend against the CPU backend, bit for bit: typed STORE
 * programs of GS_LEAF_NORMAL_F32, GS_LEAF_UNIFORM_F32 and GS_LEAF_INTEGERS leaves at large
 * global offsets (the counter's high words), strided and unit-stride reads, followed by float32
 * arithmetic (the seed expression's + 1). Skips when there is no CUDA device. */

#include "cuda_test_util.h"

#include "chunkops/elem_dtype.h"
#include "chunkops/random.h"

enum { RR = 67, CC = 1031, NN = RR * CC };

/* LEAF [ADD_IMM 1] on a RR x CC region of a random leaf of @a kind, stored as its dtype */
static void spec(gs_kfused_t *k, int kind, int64_t base, int64_t s0, int64_t s1, int add,
                 double p0, double p1, void *out)
{
    const gs_dtype_t d = kind == GS_LEAF_INTEGERS ? GS_DTYPE_INT64 : GS_DTYPE_FLOAT32;
    memset(k, 0, sizeof(*k));
    k->ndim = 2;
    k->shape[0] = RR;
    k->shape[1] = CC;
    k->nleaves = 1;
    k->leaves[0].kind = kind;
    k->leaves[0].base = base;
    k->leaves[0].stride[0] = s0;
    k->leaves[0].stride[1] = s1;
    k->leaves[0].seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)base;
    k->leaves[0].p0 = p0;
    k->leaves[0].p1 = p1;
    k->prog[0].op = GS_OP_LEAF;
    k->prog[0].dtype = d;
    k->nprog = 1;
    if (add) {
        k->prog[1].op = GS_OP_ADD_IMM;
        k->prog[1].imm = 1.0;
        k->prog[1].dtype = d;
        k->nprog = 2;
    }
    k->terminal = GS_TERM_STORE;
    k->out_dtype = d;
    k->out = out;
}

static double i64_bits(int64_t v)
{
    double d;
    memcpy(&d, &v, sizeof(d));
    return d;
}

Test(chunkops_cuda, float32_random_and_integers_are_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    double *cpu = calloc(NN, sizeof(double)), *gpu = calloc(NN, sizeof(double));
    cr_assert(cpu != NULL && gpu != NULL);
    double *dout = dev_alloc_poisoned(&b, NN);
    static const int kinds[] = {GS_LEAF_NORMAL_F32, GS_LEAF_UNIFORM_F32, GS_LEAF_INTEGERS};
    static const int64_t bases[] = {0, 3, (INT64_C(1) << 40) + 5, (INT64_C(1) << 62) - 1};
    const int64_t ilo[] = {-1000, INT64_MIN, 0, 7}, ihi[] = {999, INT64_MAX, INT64_MAX, 7};
    int checked = 0;
    for (int kk = 0; kk < 3; kk++)
        for (int bi = 0; bi < 4; bi++)
            for (int layout = 0; layout < 3; layout++) {
                const int kind = kinds[kk];
                /* row-major unit stride, x[::2, ::2] of a 2CC-wide array, a transposed read */
                const int64_t s0 = layout == 0 ? CC : layout == 1 ? 4 * CC : 1;
                const int64_t s1 = layout == 0 ? 1 : layout == 1 ? 2 : RR;
                double p0 = kind == GS_LEAF_NORMAL_F32 ? 10.0 : -3.0;
                double p1 = kind == GS_LEAF_NORMAL_F32 ? 1.0 : 5.0;
                if (kind == GS_LEAF_INTEGERS) {
                    p0 = i64_bits(ilo[bi]);
                    p1 = i64_bits(ihi[bi]);
                }
                const int add = kind != GS_LEAF_INTEGERS && layout != 2;
                const size_t nb = (size_t)NN * (kind == GS_LEAF_INTEGERS ? 8 : 4);
                gs_kfused_t k, kg;
                spec(&k, kind, bases[bi], s0, s1, add, p0, p1, cpu);
                spec(&kg, kind, bases[bi], s0, s1, add, p0, p1, dout);
                memset(cpu, 0, nb);
                CHECK(CPU->fused(b.cpu, b.cs, &k));
                CHECK(CPU->sync(b.cpu, b.cs));
                CHECK(GPU->fused(b.gpu, b.gs, &kg));
                CHECK(GPU->sync(b.gpu, b.gs));
                memset(gpu, 0, nb);
                CHECK(GPU->copy_to_host(b.gpu, b.gs, gpu, dout, nb));
                CHECK(GPU->sync(b.gpu, b.gs));
                if (memcmp(cpu, gpu, nb) != 0) {
                    size_t es = kind == GS_LEAF_INTEGERS ? 8 : 4, e = 0;
                    while (memcmp((char *)cpu + e * es, (char *)gpu + e * es, es) == 0) e++;
                    cr_assert_fail("kind %d base %lld layout %d: element %zu differs (cpu %.9g, "
                                   "gpu %.9g as float32)", kind, (long long)bases[bi], layout, e,
                                   (double)((float *)cpu)[e], (double)((float *)gpu)[e]);
                }
                /* and both are the definition (spot checks at the global index) */
                for (int64_t e = 0; e < NN; e += 997) {
                    const int64_t i = e / CC, j = e % CC;
                    const uint64_t g = (uint64_t)(bases[bi] + i * s0 + j * s1);
                    if (kind == GS_LEAF_INTEGERS) {
                        cr_assert_eq(((int64_t *)cpu)[e],
                                     gs_random_integers(k.leaves[0].seed, g, ilo[bi], ihi[bi]));
                    } else {
                        float v = kind == GS_LEAF_NORMAL_F32
                                      ? gs_random_normal_f32(k.leaves[0].seed, g, p0, p1)
                                      : gs_random_uniform_f32(k.leaves[0].seed, g, p0, p1);
                        if (add) v = v + 1.0f;
                        cr_assert_eq(((float *)cpu)[e], v);
                    }
                }
                checked++;
            }
    cr_assert_eq(checked, 36);
    GPU->mem_free(b.gpu, dout);
    free(cpu);
    free(gpu);
    bk_close(&b);
}

/* the seed's typed reduction: (normal_f32 + 1) cast to float64, summed over the whole region in
 * one pass (k_typed_sum): equal to the CPU's sum up to the summation order, and the same bits on
 * every run */
Test(chunkops_cuda, float32_seed_sum_agrees_with_cpu_and_repeats)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    double *dout = dev_alloc_poisoned(&b, 1);
    static const int64_t shapes[][2] = {{RR, CC}, {1, 1}, {3000, 5}, {1, 100000}};
    for (int sh = 0; sh < 4; sh++) {
        gs_kfused_t k, kg;
        double cpu = 0, gpu[2];
        spec(&k, GS_LEAF_NORMAL_F32, 12345, 4 * CC, 2, 1, 10.0, 1.0, &cpu);
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
        cr_assert(fabs(gpu[0] - cpu) <= 1e-12 * fabs(cpu), "shape %d: gpu %.17g cpu %.17g", sh,
                  gpu[0], cpu);
        cr_assert(bits_equal(gpu[0], gpu[1]), "shape %d: runs give %.17g and %.17g", sh, gpu[0],
                  gpu[1]);
        cr_assert(fabs(cpu / n - 11.0) < 6.0 / sqrt(n), "shape %d: mean %g", sh, cpu / n);
    }
    GPU->mem_free(b.gpu, dout);
    bk_close(&b);
}
