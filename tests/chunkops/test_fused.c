/* CPU fused kernel against a naive reference written independently here: per element, the
 * leaf offsets are computed from scratch, the program runs on a scalar stack, and reductions
 * collect each record's values in row-major order and reduce them in long double. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/cpu/cpu.h" /* the batch generator: the random leaves' oracle */
#include "chunkops/random.h"
#include "../numpy_ref.h"
#include "spec_util.h"
#include "fused_ref.h"

/* ------------------------------------------------------------------ helpers ---- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int rndi(int n)
{
    return (int)(rnd() % (uint64_t)n);
}

static double rndu(void)
{
    return (double)(rnd() >> 11) * 0x1.0p-53;
}

/* --------------------------------------------------------- random spec maker ---- */

typedef struct owned {
    double *data[GS_KERNEL_MAX_LEAVES];
} owned_t;

static void owned_free(owned_t *o)
{
    for (int i = 0; i < GS_KERNEL_MAX_LEAVES; i++) free(o->data[i]);
}

/* strides = step_j * layout multiplier, base chosen so that the minimum offset is @a lo */
static void make_strides(const gs_kfused_t *k, gs_kleaf_t *lf, int allow_zero, int64_t lo,
                         int64_t *span_p)
{
    int perm[GS_MAX_NDIM];
    int64_t mult[GS_MAX_NDIM];
    for (int j = 0; j < k->ndim; j++) perm[j] = j;
    for (int j = k->ndim - 1; j > 0; j--) {
        int t = rndi(j + 1), x = perm[j];
        perm[j] = perm[t];
        perm[t] = x;
    }
    /* a (possibly transposed) dense layout with padding */
    int64_t m = 1;
    for (int q = k->ndim - 1; q >= 0; q--) {
        int j = perm[q];
        mult[j] = m;
        m *= (k->shape[j] + rndi(3)) * 3;
    }
    int64_t mn = 0, mx = 0;
    for (int j = 0; j < k->ndim; j++) {
        static const int steps[] = {1, 1, 1, -1, 2, -2, 3, 0};
        int s = steps[rndi(allow_zero ? 8 : 7)];
        lf->stride[j] = s * mult[j];
        int64_t ext = lf->stride[j] * (k->shape[j] > 0 ? k->shape[j] - 1 : 0);
        if (ext < 0) mn += ext;
        else mx += ext;
    }
    lf->base = lo - mn;
    *span_p = mx - mn + 1;
}

static double special_value(void)
{
    static const double sv[] = {0.0, -0.0, 1.0, -1.0, 2.0, 0.5, INFINITY, -INFINITY};
    return sv[rndi(8)];
}

static void make_leaf(gs_kfused_t *k, int li, owned_t *own, int nasty)
{
    gs_kleaf_t *lf = &k->leaves[li];
    int64_t span;
    memset(lf, 0, sizeof(*lf));
    /* the float64 kinds (the float32 and integer random leaves need typed programs) */
    lf->kind = rndi(GS_LEAF_NORMAL_V2 + 2); /* CHUNK .. NORMAL_V2, or ... */
    if (lf->kind == GS_LEAF_NORMAL_V2 + 1) lf->kind = GS_LEAF_NORMAL_V3; /* ... NORMAL_V3 */
    switch (lf->kind) {
    case GS_LEAF_CHUNK: {
        int64_t pad = rndi(4);
        make_strides(k, lf, 1, pad, &span);
        lf->data_len = span + pad + rndi(4);
        double *d = malloc((size_t)lf->data_len * sizeof(double));
        for (int64_t i = 0; i < lf->data_len; i++) {
            int r = rndi(40);
            if (nasty && r == 0) d[i] = NAN;
            else if (nasty && r == 1) d[i] = special_value();
            else if (r < 6) d[i] = (double)(rndi(5) - 2); /* ties */
            else d[i] = (rndu() - 0.5) * 6.0;
        }
        lf->data = d;
        own->data[li] = d;
        break;
    }
    case GS_LEAF_NORMAL:
    case GS_LEAF_NORMAL_V2:
    case GS_LEAF_NORMAL_V3:
    case GS_LEAF_UNIFORM:
        /* indices beyond 2^32 exercise the counter's high word */
        make_strides(k, lf, 1, rndi(2) ? (int64_t)rndi(1000) : ((int64_t)5 << 32) + rndi(1000),
                     &span);
        lf->seed = rndi(2) ? rnd() : (uint64_t)rndi(4);
        lf->p0 = lf->kind != GS_LEAF_UNIFORM ? rndu() * 2 - 1 : -1.0 - rndu();
        lf->p1 = lf->kind != GS_LEAF_UNIFORM ? 0.5 + rndu() : 1.0 + rndu();
        break;
    default:
        make_strides(k, lf, 1, rndi(2) ? 0 : -(int64_t)rndi(100000), &span);
        break;
    }
}

static const int all_ops[] = {
    GS_OP_NEG, GS_OP_ABS, GS_OP_EXP, GS_OP_LOG, GS_OP_SQRT, GS_OP_ADD, GS_OP_SUB, GS_OP_MUL,
    GS_OP_DIV, GS_OP_POW, GS_OP_LT, GS_OP_LE, GS_OP_GT, GS_OP_GE, GS_OP_EQ, GS_OP_NE, GS_OP_MIN,
    GS_OP_MAX, GS_OP_ADD_IMM, GS_OP_SUB_IMM, GS_OP_MUL_IMM, GS_OP_DIV_IMM, GS_OP_POW_IMM,
    GS_OP_RSUB_IMM, GS_OP_RDIV_IMM, GS_OP_RPOW_IMM, GS_OP_LT_IMM, GS_OP_LE_IMM, GS_OP_GT_IMM,
    GS_OP_GE_IMM, GS_OP_EQ_IMM, GS_OP_NE_IMM, GS_OP_MIN_IMM, GS_OP_MAX_IMM};
/* ops that keep magnitudes tame (reductions compare sums with a relative tolerance) */
static const int tame_ops[] = {GS_OP_NEG, GS_OP_ABS, GS_OP_ADD, GS_OP_SUB, GS_OP_MUL,
                               GS_OP_LT, GS_OP_GE, GS_OP_MIN, GS_OP_MAX, GS_OP_ADD_IMM,
                               GS_OP_SUB_IMM, GS_OP_MUL_IMM, GS_OP_RSUB_IMM, GS_OP_EQ_IMM,
                               GS_OP_MIN_IMM, GS_OP_MAX_IMM, GS_OP_DIV_IMM};

/* emit a random expression tree of height <= h in postfix */
static void gen_expr(gs_kfused_t *k, int h, int tame)
{
    int r = rndi(10);
    if (h == 0 || r < 3 || k->nprog > GS_KERNEL_MAX_PROG - 8) {
        gs_kinstr_t *in = &k->prog[k->nprog++];
        if (rndi(8) == 0) {
            in->op = GS_OP_CONST;
            in->imm = tame ? rndi(5) - 2.0 : special_value();
        } else {
            in->op = GS_OP_LEAF;
            in->arg = rndi(k->nleaves);
        }
        return;
    }
    int op = tame ? tame_ops[rndi(sizeof(tame_ops) / sizeof(int))]
                  : all_ops[rndi(sizeof(all_ops) / sizeof(int))];
    gen_expr(k, h - 1, tame);
    if (fr_arity(op) == 2) gen_expr(k, h - 1, tame);
    gs_kinstr_t *in = &k->prog[k->nprog++];
    in->op = op;
    in->imm = tame ? (op == GS_OP_DIV_IMM ? 4.0 : rndi(7) - 3.0) : (rndu() * 4 - 2);
    if (!tame && rndi(4) == 0) in->imm = special_value();
    if (op == GS_OP_POW_IMM && rndi(3) == 0) in->imm = 2.0;
}

static void make_spec(gs_kfused_t *k, owned_t *own, int max_elems, int tame)
{
    static const int64_t extents[] = {1, 2, 3, 5, 7, 13, 31, 64, 100, 257, 600};
    memset(k, 0, sizeof(*k));
    memset(own, 0, sizeof(*own));
    k->ndim = rndi(5);
    int64_t n;
    do {
        n = 1;
        for (int j = 0; j < k->ndim; j++) {
            k->shape[j] = extents[rndi(11)];
            n *= k->shape[j];
        }
    } while (n > max_elems);
    k->nleaves = 1 + rndi(4);
    for (int i = 0; i < k->nleaves; i++) make_leaf(k, i, own, !tame);
    k->nprog = 0;
    gen_expr(k, 1 + rndi(5), tame);
    /* arg-index mapping: the row-major strides of a larger array, at some offset */
    int64_t s = 1;
    for (int j = k->ndim - 1; j >= 0; j--) {
        k->idx_stride[j] = s;
        s *= k->shape[j] + rndi(3);
    }
    k->idx_base = rndi(1000);
    k->out = (double *)&rng_state; /* placeholder: never written, replaced by the checks */
    cr_assert_eq(gs_kfused_validate(k), GS_OK, "generated spec invalid: %s", gs_last_error());
}

/* ------------------------------------------------------------------- tests ---- */

Test(chunkops_fused, store_matches_reference_on_random_specs)
{
    rng_state = 1;
    for (int it = 0; it < 1000; it++) {
        gs_kfused_t k;
        owned_t own;
        make_spec(&k, &own, 5000, 0);
        fr_check_store(&k, 4e-16);
        owned_free(&own);
    }
}

Test(chunkops_fused, every_reduction_matches_reference_on_random_specs)
{
    rng_state = 2;
    for (int it = 0; it < 100; it++) {
        gs_kfused_t k;
        owned_t own;
        make_spec(&k, &own, 3000, 1);
        for (int op = 0; op < GS_RED_COUNT; op++)
            for (int axis = -1; axis < k.ndim; axis++) fr_check_reduce(&k, op, axis);
        owned_free(&own);
    }
}

Test(chunkops_fused, reductions_propagate_nan_and_infinities_like_numpy)
{
    rng_state = 3;
    for (int it = 0; it < 40; it++) {
        gs_kfused_t k;
        owned_t own;
        make_spec(&k, &own, 2000, 0);
        static const int ops[] = {GS_RED_MIN, GS_RED_MAX, GS_RED_ARGMIN, GS_RED_ARGMAX};
        for (int o = 0; o < 4; o++)
            for (int axis = -1; axis < k.ndim; axis++) fr_check_reduce(&k, ops[o], axis);
        owned_free(&own);
    }
}

/* one chunk leaf (and a second for binary ops) over hand-picked values */
Test(chunkops_fused, every_opcode_on_special_values)
{
    static const double xs[] = {0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.5, 3.0, INFINITY, -INFINITY,
                                NAN, 1e-300, 1e300, 2.0, 7.0};
    enum { NX = sizeof(xs) / sizeof(xs[0]) };
    static const double imms[] = {0.0, 1.0, -1.5, 2.0, 0.5, NAN, INFINITY};
    double a[NX * NX], b[NX * NX], out[NX * NX];
    for (int i = 0; i < NX; i++)
        for (int j = 0; j < NX; j++) {
            a[i * NX + j] = xs[i];
            b[i * NX + j] = xs[j];
        }
    for (int op = GS_OP_NEG; op < GS_OP_COUNT; op++) {
        if (op == GS_OP_WHERE) continue; /* ternary, typed programs only (test_cuda_dtype.c) */
        for (size_t m = 0; m < sizeof(imms) / sizeof(imms[0]); m++) {
            gs_kfused_t k;
            int bin = fr_arity(op) == 2;
            spec_one_op(&k, NX * NX, a, b, op, bin, imms[m], out);
            fr_run_fused(&k);
            for (int i = 0; i < NX * NX; i++) {
                double want = bin ? fr_binary(op, a[i], b[i]) : fr_unary(op, a[i], imms[m]);
                cr_assert(fr_same(out[i], want, 0), "op %d on (%g, %g) imm %g: %.17g, expected %.17g",
                          op, a[i], b[i], imms[m], out[i], want);
            }
            if (bin) break;
        }
    }
}

Test(chunkops_fused, const_and_repeated_leaves)
{
    /* (x * x) - (3 - x) with x read twice, and a program that is a constant */
    double x[10], out[10];
    for (int i = 0; i < 10; i++) x[i] = i - 4.5;
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = 10;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = x;
    k.leaves[0].data_len = 10;
    k.leaves[0].stride[0] = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[1].op = GS_OP_LEAF;
    k.prog[2].op = GS_OP_MUL;
    k.prog[3].op = GS_OP_CONST;
    k.prog[3].imm = 3;
    k.prog[4].op = GS_OP_LEAF;
    k.prog[5].op = GS_OP_SUB;
    k.prog[6].op = GS_OP_SUB;
    k.nprog = 7;
    k.out = out;
    fr_run_fused(&k);
    for (int i = 0; i < 10; i++) cr_assert_eq(out[i], x[i] * x[i] - (3 - x[i]));
    k.prog[0].op = GS_OP_CONST;
    k.prog[0].imm = -2.25;
    k.nprog = 1;
    fr_run_fused(&k);
    for (int i = 0; i < 10; i++) cr_assert_eq(out[i], -2.25);
}

Test(chunkops_fused, ndim_zero_is_one_element)
{
    double x = 4.0, out[3] = {0, 0, 99};
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = &x;
    k.leaves[0].data_len = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[1].op = GS_OP_SQRT;
    k.nprog = 2;
    k.out = out;
    fr_run_fused(&k);
    cr_assert_eq(out[0], 2.0);
    cr_assert_eq(out[1], 0.0);
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_ARGMAX;
    k.red_axis = -1;
    k.idx_base = 17;
    fr_run_fused(&k);
    cr_assert_eq(out[0], 2.0);
    cr_assert_eq(out[1], 17.0);
    cr_assert_eq(out[2], 99.0);
}

Test(chunkops_fused, empty_regions_give_empty_records)
{
    double x = 1.0, out[64];
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 3;
    k.shape[1] = 0;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = &x;
    k.leaves[0].data_len = 0;
    k.prog[0].op = GS_OP_LEAF;
    k.nprog = 1;
    k.out = out;
    k.terminal = GS_TERM_STORE;
    out[0] = 5;
    fr_run_fused(&k);
    cr_assert_eq(out[0], 5, "empty store wrote");
    static const double empty[GS_RED_COUNT][3] = {
        [GS_RED_SUM] = {0}, [GS_RED_MIN] = {INFINITY}, [GS_RED_MAX] = {-INFINITY},
        [GS_RED_MEAN] = {0, 0}, [GS_RED_VAR] = {0, 0, 0}, [GS_RED_STD] = {0, 0, 0},
        [GS_RED_ARGMIN] = {INFINITY, -1}, [GS_RED_ARGMAX] = {-INFINITY, -1}, [GS_RED_PROD] = {1}};
    k.terminal = GS_TERM_REDUCE;
    for (int op = 0; op < GS_RED_COUNT; op++) {
        int w = gs_redop_width(op);
        k.redop = op;
        /* whole region: one empty record; along axis 1 (length 0): 3 empty records;
         * along axis 0: 0 records */
        for (int axis = -1; axis < 2; axis++) {
            k.red_axis = axis;
            int64_t nrec = gs_kfused_nrecords(&k);
            cr_assert_eq(nrec, axis == -1 ? 1 : axis == 1 ? 3 : 0);
            for (int i = 0; i < 64; i++) out[i] = 777;
            fr_run_fused(&k);
            for (int64_t r = 0; r < nrec; r++)
                for (int c = 0; c < w; c++)
                    cr_assert_eq(out[r * w + c], empty[op][c], "op %d axis %d", op, axis);
            cr_assert_eq(out[nrec * w], 777);
        }
    }
}

Test(chunkops_fused, argmin_ties_keep_first_and_nan_wins)
{
    double d[12] = {3, 1, 2, 1, 5, 1, 0.5, 0.5, 9, -1, -1, 4};
    double out[8];
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 3;
    k.shape[1] = 4;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = d;
    k.leaves[0].data_len = 12;
    k.leaves[0].stride[0] = 4;
    k.leaves[0].stride[1] = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.nprog = 1;
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_ARGMIN;
    k.red_axis = -1;
    k.idx_stride[0] = 4;
    k.idx_stride[1] = 1;
    k.out = out;
    fr_run_fused(&k);
    cr_assert_eq(out[0], -1);
    cr_assert_eq(out[1], 9);
    k.redop = GS_RED_ARGMAX;
    fr_run_fused(&k);
    cr_assert_eq(out[0], 9);
    cr_assert_eq(out[1], 8);
    /* along axis 1: row minima 1 @1, 0.5 @2, -1 @1 */
    k.redop = GS_RED_ARGMIN;
    k.red_axis = 1;
    fr_run_fused(&k);
    cr_assert(out[0] == 1 && out[1] == 1 && out[2] == 0.5 && out[3] == 2 && out[4] == -1 &&
              out[5] == 1);
    /* NaNs: the first NaN wins everywhere */
    d[5] = NAN;
    d[10] = NAN;
    k.red_axis = -1;
    for (int op = GS_RED_ARGMIN; op <= GS_RED_ARGMAX; op++) {
        k.redop = op;
        fr_run_fused(&k);
        cr_assert(isnan(out[0]) && out[1] == 5, "op %d gave %g @%g", op, out[0], out[1]);
    }
    k.redop = GS_RED_MIN;
    fr_run_fused(&k);
    cr_assert(isnan(out[0]));
    /* reversed traversal (negative strides): ties still pick the smallest index */
    d[5] = 1;
    d[10] = -1;
    k.redop = GS_RED_ARGMIN;
    k.leaves[0].base = 11;
    k.leaves[0].stride[0] = -4;
    k.leaves[0].stride[1] = -1;
    k.idx_base = 11;
    k.idx_stride[0] = -4;
    k.idx_stride[1] = -1;
    fr_run_fused(&k);
    cr_assert(out[0] == -1 && out[1] == 9, "got %g @%g", out[0], out[1]);
}

Test(chunkops_fused, infinities_and_nan_in_every_reduction_mode)
{
    /* 6 x 5 data; +inf at (2, 3); then -inf at (4, 3); then NaN at (0, 1) */
    double d[30];
    for (int i = 0; i < 30; i++) d[i] = i * 0.25 - 2;
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 6;
    k.shape[1] = 5;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = d;
    k.leaves[0].data_len = 30;
    k.leaves[0].stride[0] = 5;
    k.leaves[0].stride[1] = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.nprog = 1;
    k.idx_stride[0] = 5;
    k.idx_stride[1] = 1;
    k.out = d; /* placeholder for validation */
    for (int stage = 0; stage < 3; stage++) {
        if (stage == 0) d[2 * 5 + 3] = INFINITY;
        if (stage == 1) d[4 * 5 + 3] = -INFINITY;
        if (stage == 2) d[0 * 5 + 1] = NAN;
        for (int op = 0; op < GS_RED_COUNT; op++)
            for (int axis = -1; axis < 2; axis++) fr_check_reduce(&k, op, axis);
        /* the same along the outer axis of a transposed view (records contiguous) */
        gs_kfused_t t = k;
        t.shape[0] = 5;
        t.shape[1] = 6;
        t.leaves[0].stride[0] = 1;
        t.leaves[0].stride[1] = 5;
        t.idx_stride[0] = 1;
        t.idx_stride[1] = 5;
        for (int op = 0; op < GS_RED_COUNT; op++)
            for (int axis = -1; axis < 2; axis++) fr_check_reduce(&t, op, axis);
    }
}

Test(chunkops_fused, long_sums_are_accurate)
{
    /* 0.1 summed 2e6 times: naive left-to-right summation is off by ~2.6e-6 */
    double tenth = 0.1, out[4];
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 1000;
    k.shape[1] = 2000;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = &tenth;
    k.leaves[0].data_len = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.nprog = 1;
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_SUM;
    k.red_axis = -1;
    k.out = out;
    fr_run_fused(&k);
    cr_assert(fabs(out[0] - 200000.0) < 2e-9, "sum %.17g", out[0]);
    /* along each axis, including the outer one (compensated per record) */
    double *rec = malloc(2000 * 2 * sizeof(double));
    k.out = rec;
    k.redop = GS_RED_MEAN;
    k.shape[0] = 200000;
    k.shape[1] = 2;
    k.red_axis = 0;
    fr_run_fused(&k);
    for (int r = 0; r < 2; r++) {
        cr_assert(fabs(rec[2 * r] - 20000.0) < 1e-10, "axis-0 sum %.17g", rec[2 * r]);
        cr_assert_eq(rec[2 * r + 1], 200000.0);
    }
    k.shape[0] = 2;
    k.shape[1] = 200000;
    k.red_axis = 1;
    fr_run_fused(&k);
    for (int r = 0; r < 2; r++) cr_assert(fabs(rec[2 * r] - 20000.0) < 1e-10);
    free(rec);
}

Test(chunkops_fused, variance_is_stable_with_a_large_offset)
{
    /* x = 1e9 + i % 7 : var is that of 0..6 repeated, exactly 4 for full cycles */
    enum { N = 7 * 3000 };
    double *x = malloc(N * sizeof(double)), out[3 * 7];
    for (int i = 0; i < N; i++) x[i] = 1e9 + (i % 7);
    gs_kfused_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = N;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = x;
    k.leaves[0].data_len = N;
    k.leaves[0].stride[0] = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.nprog = 1;
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_VAR;
    k.red_axis = -1;
    k.out = out;
    fr_run_fused(&k);
    cr_assert_eq(out[0], N);
    cr_assert(fabs(out[1] - (1e9 + 3)) < 1e-6, "mean %.17g", out[1]);
    cr_assert(fabs(out[2] / N - 4.0) < 1e-9, "var %.17g", out[2] / N);
    /* as 3000 x 7 reduced along axis 0: each column is constant, m2 = 0 */
    k.ndim = 2;
    k.shape[0] = 3000;
    k.shape[1] = 7;
    k.leaves[0].stride[0] = 7;
    k.leaves[0].stride[1] = 1;
    k.red_axis = 0;
    fr_run_fused(&k);
    for (int c = 0; c < 7; c++) {
        cr_assert_eq(out[3 * c], 3000);
        cr_assert_eq(out[3 * c + 1], 1e9 + c);
        cr_assert_eq(out[3 * c + 2], 0.0);
    }
    free(x);
}

Test(chunkops_fused, seed_kernel_normal_plus_one_strided_sum)
{
    /* sum over (normal + 1)[::2, ::2] of a 64 x 90 array, as the lowering emits it */
    gs_kfused_t k;
    double out[1];
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 32;
    k.shape[1] = 45;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_NORMAL;
    k.leaves[0].seed = 42;
    k.leaves[0].p1 = 1.0;
    k.leaves[0].stride[0] = 2 * 90;
    k.leaves[0].stride[1] = 2;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[1].op = GS_OP_ADD_IMM;
    k.prog[1].imm = 1.0;
    k.nprog = 2;
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_SUM;
    k.red_axis = -1;
    k.out = out;
    fr_run_fused(&k);
    long double want = 0;
    for (int i = 0; i < 64; i += 2)
        for (int j = 0; j < 90; j += 2) want += gs_random_normal(42, (uint64_t)(i * 90 + j), 0, 1) + 1.0;
    cr_assert(fabs(out[0] - (double)want) < 1e-11, "sum %.17g, expected %.17Lg", out[0], want);
}

/* x + x.T over one chunk pair of odd sizes: leaf 1 reads its chunk transposed (unit stride down
 * the rows), which the kernel walks in tiles; the values and every reduction match the
 * row-major reference, for regions smaller than, equal to and straddling the tile. */
Test(chunkops_fused, transposed_leaf_in_tiles_matches_reference)
{
    static const int64_t sides[][2] = {{1, 7}, {7, 1}, {2, 2}, {8, 32}, {9, 33}, {37, 53},
                                       {64, 100}, {257, 31}};
    rng_state = 19;
    for (size_t c = 0; c < sizeof(sides) / sizeof(sides[0]); c++) {
        const int64_t R = sides[c][0], L = sides[c][1], ld = L + 3, tld = R + 5;
        double *a = malloc((size_t)(R * ld) * sizeof(double));
        double *b = malloc((size_t)(L * tld) * sizeof(double));
        for (int64_t i = 0; i < R * ld; i++) a[i] = (rndu() - 0.5) * 4.0;
        for (int64_t i = 0; i < L * tld; i++) b[i] = (rndu() - 0.5) * 4.0;
        gs_kfused_t k;
        memset(&k, 0, sizeof(k));
        k.ndim = 2;
        k.shape[0] = R;
        k.shape[1] = L;
        k.nleaves = 2;
        k.leaves[0].kind = GS_LEAF_CHUNK;
        k.leaves[0].data = a;
        k.leaves[0].data_len = R * ld;
        k.leaves[0].base = 1;
        k.leaves[0].stride[0] = ld;
        k.leaves[0].stride[1] = 1;
        k.leaves[1].kind = GS_LEAF_CHUNK; /* element (r, l) is b[l][r]: the transposed view */
        k.leaves[1].data = b;
        k.leaves[1].data_len = L * tld;
        k.leaves[1].base = 2;
        k.leaves[1].stride[0] = 1;
        k.leaves[1].stride[1] = tld;
        k.nprog = 3;
        k.prog[0].op = GS_OP_LEAF;
        k.prog[0].arg = 0;
        k.prog[1].op = GS_OP_LEAF;
        k.prog[1].arg = 1;
        k.prog[2].op = GS_OP_ADD;
        k.idx_base = 5;
        k.idx_stride[0] = L;
        k.idx_stride[1] = 1;
        k.out = (double *)&rng_state;
        cr_assert_eq(gs_kfused_validate(&k), GS_OK, "%s", gs_last_error());
        fr_check_store(&k, 0.0); /* one addition per element: bit for bit */
        for (int op = 0; op < GS_RED_COUNT; op++)
            for (int axis = -1; axis < 2; axis++) fr_check_reduce(&k, op, axis);
        /* the transposed leaf alone (a copy of b.T) and a program with a constant */
        k.nprog = 1;
        k.prog[0].arg = 1;
        fr_check_store(&k, 0.0);
        fr_check_reduce(&k, GS_RED_SUM, -1);
        fr_check_reduce(&k, GS_RED_ARGMAX, -1);
        free(a);
        free(b);
    }
}

/* (x > 0.25) cast to float64, + 1, summed: the typed program and its untyped form
 * (gs_kfused_untype) give the same bits; programs with real dtypes are not untyped */
Test(chunkops_fused, comparisons_cast_back_to_float64_run_untyped)
{
    enum { N = 1000 };
    double x[N], typed[1], plain[1];
    for (int i = 0; i < N; i++) x[i] = (double)((i * 7919) % 1000) / 1000.0;
    gs_kfused_t k, ku;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = N;
    k.nleaves = 1;
    k.leaves[0].kind = GS_LEAF_CHUNK;
    k.leaves[0].data = x;
    k.leaves[0].data_len = N;
    k.leaves[0].stride[0] = 1;
    k.prog[0].op = GS_OP_LEAF;
    k.prog[1].op = GS_OP_GT_IMM;
    k.prog[1].imm = 0.25;
    k.prog[2].op = GS_OP_CAST;
    k.prog[2].dtype = GS_DTYPE_BOOL;
    k.prog[2].arg = GS_DTYPE_FLOAT64;
    k.prog[3].op = GS_OP_ADD_IMM;
    k.prog[3].imm = 1.0;
    k.nprog = 4;
    k.terminal = GS_TERM_REDUCE;
    k.redop = GS_RED_SUM;
    k.red_axis = -1;
    k.out = typed;
    cr_assert(gs_kfused_untype(&k, &ku), "a float64 comparison cast back is untyped");
    cr_assert_eq(ku.nprog, 3);
    for (int i = 0; i < ku.nprog; i++) cr_assert_eq(ku.prog[i].dtype, GS_DTYPE_FLOAT64);
    ku.out = plain;
    fr_run_fused(&k);
    fr_run_fused(&ku);
    double want = 0;
    for (int i = 0; i < N; i++) want += (x[i] > 0.25) + 1.0;
    cr_assert_eq(typed[0], want);
    cr_assert(memcmp(typed, plain, sizeof(typed)) == 0);
    /* a bool output, a float32 step or a where: real dtypes stay typed */
    gs_kfused_t k2 = k;
    k2.nprog = 2;
    k2.terminal = GS_TERM_STORE;
    k2.out_dtype = GS_DTYPE_BOOL;
    cr_assert(!gs_kfused_untype(&k2, NULL));
    k2 = k;
    k2.prog[3].dtype = GS_DTYPE_FLOAT32;
    cr_assert(!gs_kfused_untype(&k2, NULL));
    k2 = k;
    k2.prog[1].dtype = GS_DTYPE_INT32;
    cr_assert(!gs_kfused_untype(&k2, NULL));
}
