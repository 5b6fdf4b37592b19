/* The extended elementwise opcodes (chunkops/elemwise.h) on the CUDA backend against the CPU
 * backend: every opcode on special values (zeros of both signs, infinities, NaN, huge and tiny
 * values) as a STORE program, each also after a random leaf (the CHAIN variant) and inside a
 * reduction. Skips when there is no CUDA device.
 *
 * Agreement: ops made of IEEE operations and exact functions (mod, floor_divide, floor, ceil,
 * rint, trunc, sign, square, reciprocal, isnan & co., the logical ops) are bitwise equal; the
 * libm functions (trigonometric, hyperbolic, exp2, log2, log10, log1p, expm1) may differ by the
 * libraries' ulps: |gpu - cpu| <= 1e-14 * |cpu| (or 1e-300), NaN and infinities equal. */

#include "cuda_test_util.h"
#include "spec_util.h"

static int is_libm(int op)
{
    return op >= GS_OP_SIN && op <= GS_OP_EXPM1;
}

static int agree(int op, double g, double c)
{
    if (!is_libm(op)) return bits_equal(g, c);
    if (isnan(c) || isinf(c)) return bits_equal(g, c);
    return fabs(g - c) <= 1e-14 * fabs(c) + 1e-300;
}

static const double xs[] = {0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.5, -0.5, 3.0, 7.0, INFINITY,
                            -INFINITY, NAN, 1e-300, -1e300, 0.3, 1e17, -7.5};
enum { NX = sizeof(xs) / sizeof(xs[0]) };
static const double imms[] = {0.0, -2.5, 3.0, NAN, INFINITY};

static int arity(int op)
{
    return (op >= GS_OP_MOD && op <= GS_OP_LXOR) ? 2 : 1;
}

Test(chunkops_cuda, extended_opcodes_agree_with_cpu_on_special_values)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    double a[NX * NX], c[NX * NX], cpu[NX * NX], gpu[NX * NX];
    for (int i = 0; i < NX; i++)
        for (int j = 0; j < NX; j++) {
            a[i * NX + j] = xs[i];
            c[i * NX + j] = xs[j];
        }
    double *da = dev_upload(&b, a, NX * NX), *dc = dev_upload(&b, c, NX * NX);
    double *dout = dev_alloc_poisoned(&b, NX * NX);
    for (int op = GS_OP_EXTENDED; op < GS_OP_COUNT; op++) {
        if (op == GS_OP_WHERE) continue; /* ternary, typed programs only (test_cuda_dtype.c) */
        for (size_t m = 0; m < sizeof(imms) / sizeof(imms[0]); m++) {
            gs_kfused_t k, kg;
            int bin = arity(op) == 2;
            spec_one_op(&k, NX * NX, a, c, op, bin, imms[m], cpu);
            spec_one_op(&kg, NX * NX, da, dc, op, bin, imms[m], dout);
            CHECK(CPU->fused(b.cpu, b.cs, &k));
            CHECK(GPU->fused(b.gpu, b.gs, &kg));
            CHECK(GPU->sync(b.gpu, b.gs));
            dev_download(&b, gpu, dout, NX * NX);
            for (int i = 0; i < NX * NX; i++)
                cr_assert(agree(op, gpu[i], cpu[i]), "op %d on (%g, %g) imm %g: gpu %.17g cpu %.17g",
                          op, a[i], c[i], imms[m], gpu[i], cpu[i]);
            if (bin) break;
        }
    }
    GPU->mem_free(b.gpu, dout);
    GPU->mem_free(b.gpu, da);
    GPU->mem_free(b.gpu, dc);
    bk_close(&b);
}

/* normal(seed, i) -> OP (imm 0.75) over a 3-D region: the CHAIN variant when stored, and a full
 * and an axis SUM reduction */
Test(chunkops_cuda, extended_opcodes_after_a_random_leaf_and_in_reductions)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    enum { N0 = 7, N1 = 33, N2 = 130, N = N0 * N1 * N2 };
    double *cpu = malloc(sizeof(double) * N), *gpu = malloc(sizeof(double) * N);
    double *dout = dev_alloc_poisoned(&b, N);
    for (int op = GS_OP_EXTENDED; op < GS_OP_COUNT; op++) {
        if (op == GS_OP_WHERE) continue; /* ternary, typed programs only (test_cuda_dtype.c) */
        if (arity(op) == 2) continue;
        for (int t = 0; t < 3; t++) {
            gs_kfused_t k;
            memset(&k, 0, sizeof(k));
            k.ndim = 3;
            k.shape[0] = N0;
            k.shape[1] = N1;
            k.shape[2] = N2;
            k.nleaves = 1;
            k.leaves[0].kind = GS_LEAF_NORMAL;
            k.leaves[0].seed = 77 + (uint64_t)op;
            k.leaves[0].p1 = 2.0;
            k.leaves[0].base = 1000;
            k.leaves[0].stride[0] = N1 * N2;
            k.leaves[0].stride[1] = N2;
            k.leaves[0].stride[2] = 1;
            k.prog[0].op = GS_OP_LEAF;
            k.prog[1].op = op;
            k.prog[1].imm = 0.75;
            k.prog[2].op = GS_OP_ISFINITE;   /* sums stay finite: count the finite values */
            k.nprog = t == 0 ? 2 : 3;
            k.terminal = t == 0 ? GS_TERM_STORE : GS_TERM_REDUCE;
            k.redop = GS_RED_SUM;
            k.red_axis = t == 2 ? 1 : -1;
            int64_t n = gs_kfused_out_len(&k);
            gs_kfused_t kg = k;
            k.out = cpu;
            kg.out = dout;
            CHECK(CPU->fused(b.cpu, b.cs, &k));
            CHECK(GPU->fused(b.gpu, b.gs, &kg));
            CHECK(GPU->sync(b.gpu, b.gs));
            dev_download(&b, gpu, dout, n);
            for (int64_t i = 0; i < n; i++) {
                /* the normal leaf differs by ulps between the libraries, and ops such as tan
                 * near its poles magnify that: 1e-9 relative */
                int ok = t == 0 ? (isnan(cpu[i]) ? isnan(gpu[i])
                                   : fabs(gpu[i] - cpu[i]) <= 1e-9 * fmax(1.0, fabs(cpu[i])))
                                : gpu[i] == cpu[i];   /* counts of 0/1 values: exact */
                cr_assert(ok, "op %d form %d [%lld]: gpu %.17g cpu %.17g", op, t, (long long)i,
                          gpu[i], cpu[i]);
            }
        }
    }
    GPU->mem_free(b.gpu, dout);
    free(cpu);
    free(gpu);
    bk_close(&b);
}
