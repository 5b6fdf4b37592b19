/* The reference of the CPU fused kernel tests (test_fused.c), written independently of the
 * kernel: per element, the leaf offsets are computed from scratch, the program runs on a
 * scalar stack, and reductions collect each record's values in row-major order and reduce them
 * in long double. */
#include "fused_ref.h"

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

int fr_same(double a, double b, double rel)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (a == b) return 1;
    if (isinf(a) || isinf(b)) return 0;
    return fabs(a - b) <= rel * fabs(b) + 1e-300;
}

static gs_chunkops_ctx_h ctx_new(void)
{
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    return ctx;
}

void fr_run_fused(const gs_kfused_t *k)
{
    gs_chunkops_ctx_h ctx = ctx_new();
    gs_status_t st = gs_chunkops_cpu_ops.fused(ctx, NULL, k);
    cr_assert_eq(st, GS_OK, "fused: %s: %s", gs_status_name(st), gs_last_error());
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

/* ------------------------------------------------------------- the reference ---- */

int fr_arity(int op)
{
    switch (op) {
    case GS_OP_LEAF:
    case GS_OP_CONST: return 0;
    case GS_OP_ADD: case GS_OP_SUB: case GS_OP_MUL: case GS_OP_DIV: case GS_OP_POW:
    case GS_OP_LT: case GS_OP_LE: case GS_OP_GT: case GS_OP_GE: case GS_OP_EQ: case GS_OP_NE:
    case GS_OP_MIN: case GS_OP_MAX: case GS_OP_MOD: case GS_OP_FLOORDIV: case GS_OP_LAND:
    case GS_OP_LOR: case GS_OP_LXOR: return 2;
    default: return 1;
    }
}

/* np.minimum / np.maximum: NaN if either operand is NaN */
static double ref_minimum(double a, double b)
{
    if (isnan(a) || isnan(b)) return NAN;
    return a <= b ? a : b;
}

static double ref_maximum(double a, double b)
{
    if (isnan(a) || isnan(b)) return NAN;
    return a >= b ? a : b;
}

double fr_binary(int op, double a, double b)
{
    switch (op) {
    case GS_OP_ADD: return a + b;
    case GS_OP_SUB: return a - b;
    case GS_OP_MUL: return a * b;
    case GS_OP_DIV: return a / b;
    case GS_OP_POW: return pow(a, b);
    case GS_OP_LT: return (isnan(a) || isnan(b)) ? 0.0 : (a < b);
    case GS_OP_LE: return (isnan(a) || isnan(b)) ? 0.0 : (a <= b);
    case GS_OP_GT: return (isnan(a) || isnan(b)) ? 0.0 : (a > b);
    case GS_OP_GE: return (isnan(a) || isnan(b)) ? 0.0 : (a >= b);
    case GS_OP_EQ: return (isnan(a) || isnan(b)) ? 0.0 : (a == b);
    case GS_OP_NE: return (isnan(a) || isnan(b)) ? 1.0 : (a != b);
    case GS_OP_MIN: return ref_minimum(a, b);
    case GS_OP_MAX: return ref_maximum(a, b);
    case GS_OP_MOD: return ref_np_mod(a, b);
    case GS_OP_FLOORDIV: return ref_np_floor_divide(a, b);
    case GS_OP_LAND: return !(a == 0) && !(b == 0);
    case GS_OP_LOR: return !(a == 0) || !(b == 0);
    case GS_OP_LXOR: return !(a == 0) != !(b == 0);
    default: cr_assert_fail("not binary: %d", op); return 0;
    }
}

/* libm functions of GS_OP_SIN..GS_OP_TRUNC, in opcode order */
static double (*const ref_libm[])(double) = {sin,   cos,   tan,   asin,  acos,      atan,
                                             sinh,  cosh,  tanh,  exp2,  log2,      log10,
                                             log1p, expm1, floor, ceil,  nearbyint, trunc};

double fr_unary(int op, double x, double imm)
{
    if (op >= GS_OP_SIN && op <= GS_OP_TRUNC) return ref_libm[op - GS_OP_SIN](x);
    switch (op) {
    case GS_OP_NEG: return -x;
    case GS_OP_ABS: return x < 0 ? -x : (x == 0 ? 0.0 : x);
    case GS_OP_EXP: return exp(x);
    case GS_OP_LOG: return log(x);
    case GS_OP_SQRT: return sqrt(x);
    case GS_OP_ADD_IMM: return fr_binary(GS_OP_ADD, x, imm);
    case GS_OP_SUB_IMM: return fr_binary(GS_OP_SUB, x, imm);
    case GS_OP_MUL_IMM: return fr_binary(GS_OP_MUL, x, imm);
    case GS_OP_DIV_IMM: return fr_binary(GS_OP_DIV, x, imm);
    case GS_OP_POW_IMM: return fr_binary(GS_OP_POW, x, imm);
    case GS_OP_RSUB_IMM: return fr_binary(GS_OP_SUB, imm, x);
    case GS_OP_RDIV_IMM: return fr_binary(GS_OP_DIV, imm, x);
    case GS_OP_RPOW_IMM: return fr_binary(GS_OP_POW, imm, x);
    case GS_OP_LT_IMM: return fr_binary(GS_OP_LT, x, imm);
    case GS_OP_LE_IMM: return fr_binary(GS_OP_LE, x, imm);
    case GS_OP_GT_IMM: return fr_binary(GS_OP_GT, x, imm);
    case GS_OP_GE_IMM: return fr_binary(GS_OP_GE, x, imm);
    case GS_OP_EQ_IMM: return fr_binary(GS_OP_EQ, x, imm);
    case GS_OP_NE_IMM: return fr_binary(GS_OP_NE, x, imm);
    case GS_OP_MIN_IMM: return ref_minimum(x, imm);
    case GS_OP_MAX_IMM: return ref_maximum(x, imm);
    case GS_OP_SIGN: return isnan(x) ? x : (double)((x > 0) - (x < 0));
    case GS_OP_SQUARE: return fr_binary(GS_OP_MUL, x, x);
    case GS_OP_RECIP: return fr_binary(GS_OP_DIV, 1.0, x);
    case GS_OP_ISNAN: return isnan(x) ? 1.0 : 0.0;
    case GS_OP_ISINF: return isinf(x) ? 1.0 : 0.0;
    case GS_OP_ISFINITE: return isfinite(x) ? 1.0 : 0.0;
    case GS_OP_LNOT: return x == 0 ? 1.0 : 0.0;
    case GS_OP_CAST: return x; /* float64 -> float64 */
    case GS_OP_MOD_IMM: return fr_binary(GS_OP_MOD, x, imm);
    case GS_OP_RMOD_IMM: return fr_binary(GS_OP_MOD, imm, x);
    case GS_OP_FLOORDIV_IMM: return fr_binary(GS_OP_FLOORDIV, x, imm);
    case GS_OP_RFLOORDIV_IMM: return fr_binary(GS_OP_FLOORDIV, imm, x);
    case GS_OP_LAND_IMM: return fr_binary(GS_OP_LAND, x, imm);
    case GS_OP_LOR_IMM: return fr_binary(GS_OP_LOR, x, imm);
    case GS_OP_LXOR_IMM: return fr_binary(GS_OP_LXOR, x, imm);
    default: cr_assert_fail("not unary: %d", op); return 0;
    }
}

static double ref_leaf(const gs_kfused_t *k, int li, const int64_t *p)
{
    const gs_kleaf_t *lf = &k->leaves[li];
    int64_t off = lf->base;
    for (int j = 0; j < k->ndim; j++) off += p[j] * lf->stride[j];
    switch (lf->kind) {
    case GS_LEAF_CHUNK:
        cr_assert(off >= 0 && off < lf->data_len, "reference: leaf %d offset %lld", li,
                  (long long)off);
        return lf->data[off];
    /* Random values come from the CPU backend's batch generator, which test_random.c checks
     * against the definition (within a few ulps); here it is the oracle so that programs
     * amplifying last-bit differences (x - y, comparisons) still compare exactly. */
    case GS_LEAF_NORMAL: {
        uint64_t i = (uint64_t)off;
        double v;
        gs__cpu_random_normal(lf->seed, &i, 1, lf->p0, lf->p1, &v);
        return v;
    }
    case GS_LEAF_UNIFORM: return gs_random_uniform(lf->seed, (uint64_t)off, lf->p0, lf->p1);
    case GS_LEAF_NORMAL_V2: return gs_random_normal_v2(lf->seed, (uint64_t)off, lf->p0, lf->p1);
    case GS_LEAF_NORMAL_V3: return gs_random_normal_v3(lf->seed, (uint64_t)off, lf->p0, lf->p1);
    default: return (double)off;
    }
}

static double ref_eval(const gs_kfused_t *k, const int64_t *p)
{
    double st[64];
    int sp = 0;
    for (int i = 0; i < k->nprog; i++) {
        const gs_kinstr_t *in = &k->prog[i];
        if (in->op == GS_OP_LEAF) st[sp++] = ref_leaf(k, in->arg, p);
        else if (in->op == GS_OP_CONST) st[sp++] = in->imm;
        else if (fr_arity(in->op) == 2) {
            sp--;
            st[sp - 1] = fr_binary(in->op, st[sp - 1], st[sp]);
        } else {
            st[sp - 1] = fr_unary(in->op, st[sp - 1], in->imm);
        }
    }
    cr_assert_eq(sp, 1);
    return st[0];
}

/* advance a row-major odometer; 0 when done */
static int next_pos(int ndim, const int64_t *shape, int64_t *p)
{
    for (int j = ndim - 1; j >= 0; j--) {
        if (++p[j] < shape[j]) return 1;
        p[j] = 0;
    }
    return 0;
}

void fr_check_store(const gs_kfused_t *k0, double rel)
{
    gs_kfused_t k = *k0;
    int64_t n = gs_region_size(k.ndim, k.shape);
    double *out = malloc((size_t)(n + 4) * sizeof(double));
    for (int64_t i = 0; i < n + 4; i++) out[i] = 12345.0;
    k.terminal = GS_TERM_STORE;
    k.out = out;
    fr_run_fused(&k);
    int64_t p[GS_MAX_NDIM] = {0};
    for (int64_t i = 0; i < n; i++) {
        double want = ref_eval(&k, p);
        cr_assert(fr_same(out[i], want, rel), "store element %lld: got %.17g, reference %.17g",
                  (long long)i, out[i], want);
        next_pos(k.ndim, k.shape, p);
    }
    for (int64_t i = n; i < n + 4; i++) cr_assert_eq(out[i], 12345.0, "wrote past the region");
    free(out);
}

/* Reference record of values v[0..n) (row-major order), with their arg indices. */
static void ref_record(int op, const double *v, const double *idx, int64_t n, double *rec)
{
    long double s = 0, mean = 0, m2 = 0;
    switch (op) {
    case GS_RED_SUM:
        for (int64_t i = 0; i < n; i++) s += v[i];
        rec[0] = (double)s;
        break;
    case GS_RED_MEAN:
        for (int64_t i = 0; i < n; i++) s += v[i];
        rec[0] = (double)s;
        rec[1] = (double)n;
        break;
    case GS_RED_PROD: { /* in double: the kernel's range (long double would not overflow) */
        double p = 1.0;
        for (int64_t i = 0; i < n; i++) p *= v[i];
        rec[0] = p;
        break;
    }
    case GS_RED_MIN:
    case GS_RED_MAX: {
        double m = op == GS_RED_MIN ? INFINITY : -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            if (isnan(v[i])) { m = NAN; break; }
            if (op == GS_RED_MIN ? v[i] < m : v[i] > m) m = v[i];
        }
        rec[0] = m;
        break;
    }
    case GS_RED_VAR:
    case GS_RED_STD:
        for (int64_t i = 0; i < n; i++) s += v[i];
        if (n > 0) mean = s / n;
        for (int64_t i = 0; i < n; i++) m2 += (v[i] - mean) * (v[i] - mean);
        rec[0] = (double)n;
        rec[1] = (double)mean;
        rec[2] = (double)m2;
        break;
    default: { /* ARGMIN / ARGMAX: first NaN, else first extreme */
        int is_max = op == GS_RED_ARGMAX;
        double bv = is_max ? -INFINITY : INFINITY, bi = -1;
        for (int64_t i = 0; i < n; i++) {
            if (isnan(v[i])) {
                if (!isnan(bv) || idx[i] < bi) { bv = v[i]; bi = idx[i]; }
                continue;
            }
            if (isnan(bv)) continue;
            if (bi < 0 || (is_max ? v[i] > bv : v[i] < bv) || (v[i] == bv && idx[i] < bi)) {
                bv = v[i];
                bi = idx[i];
            }
        }
        rec[0] = bv;
        rec[1] = bi;
        break;
    }
    }
}

void fr_check_reduce(const gs_kfused_t *k0, int op, int axis)
{
    gs_kfused_t k = *k0;
    k.terminal = GS_TERM_REDUCE;
    k.redop = op;
    k.red_axis = axis;
    int w = gs_redop_width(op);
    int64_t nrec = gs_kfused_nrecords(&k);
    int64_t n = gs_region_size(k.ndim, k.shape);
    double *out = malloc((size_t)(nrec * w + 4) * sizeof(double));
    for (int64_t i = 0; i < nrec * w + 4; i++) out[i] = 12345.0;
    k.out = out;
    fr_run_fused(&k);

    /* bucket every element's value by record, in row-major order */
    double *vals = malloc((size_t)(n + 1) * sizeof(double));
    double *idxs = malloc((size_t)(n + 1) * sizeof(double));
    int64_t *start = calloc((size_t)(nrec + 1), sizeof(int64_t));
    int64_t *fill = calloc((size_t)(nrec + 1), sizeof(int64_t));
    int64_t *recof = malloc((size_t)(n + 1) * sizeof(int64_t));
    {
        int64_t p[GS_MAX_NDIM] = {0};
        for (int64_t i = 0; i < n; i++) {
            int64_t rr = 0;
            for (int j = 0; j < k.ndim; j++)
                if (j != axis) rr = rr * k.shape[j] + p[j];
            recof[i] = axis < 0 ? 0 : rr;
            start[recof[i] + 1]++;
            next_pos(k.ndim, k.shape, p);
        }
        for (int64_t r = 0; r < nrec; r++) start[r + 1] += start[r];
        memset(p, 0, sizeof(p));
        for (int64_t i = 0; i < n; i++) {
            int64_t at = start[recof[i]] + fill[recof[i]]++;
            vals[at] = ref_eval(&k, p);
            int64_t id = k.idx_base;
            if (axis < 0)
                for (int j = 0; j < k.ndim; j++) id += p[j] * k.idx_stride[j];
            else
                id += p[axis];
            idxs[at] = (double)id;
            next_pos(k.ndim, k.shape, p);
        }
    }
    for (int64_t r = 0; r < nrec; r++) {
        int64_t cnt = start[r + 1] - start[r];
        double absum = 0;
        for (int64_t i = start[r]; i < start[r + 1]; i++) absum += fabs(vals[i]);
        double want[3];
        ref_record(op, vals + start[r], idxs + start[r], cnt, want);
        double *got = out + r * w;
        switch (op) {
        case GS_RED_SUM:
        case GS_RED_MEAN:
            cr_assert(fr_same(got[0], want[0], 0) || fabs(got[0] - want[0]) <= 1e-13 * absum,
                      "op %d axis %d record %lld: sum %.17g, reference %.17g", op, axis,
                      (long long)r, got[0], want[0]);
            if (op == GS_RED_MEAN) cr_assert_eq(got[1], want[1]);
            break;
        case GS_RED_PROD: /* the kernel multiplies in another order: a few roundings apart */
            cr_assert(fr_same(got[0], want[0], 1e-12 * (double)(cnt + 1)),
                      "op %d axis %d record %lld: product %.17g, reference %.17g", op, axis,
                      (long long)r, got[0], want[0]);
            break;
        case GS_RED_VAR:
        case GS_RED_STD:
            cr_assert_eq(got[0], want[0], "record %lld: count %g vs %g", (long long)r, got[0],
                         want[0]);
            if (isnan(want[2])) { /* infinities or NaN among the values: var is NaN */
                cr_assert(isnan(got[2]), "record %lld: m2 %g, expected NaN", (long long)r,
                          got[2]);
                break;
            }
            cr_assert(fabs(got[1] - want[1]) <= 1e-13 * (absum / (cnt ? cnt : 1)),
                      "op %d axis %d record %lld: mean %.17g, reference %.17g", op, axis,
                      (long long)r, got[1], want[1]);
            /* m2 of near-constant data carries ~n (eps * mean)^2 from rounding the mean */
            double mabs = absum / (cnt ? cnt : 1);
            cr_assert(fabs(got[2] - want[2]) <= 1e-9 * want[2] + cnt * 1e-28 * mabs * mabs ||
                          fr_same(got[2], want[2], 0),
                      "op %d axis %d record %lld: m2 %.17g, reference %.17g", op, axis,
                      (long long)r, got[2], want[2]);
            break;
        default:
            for (int c = 0; c < w; c++)
                cr_assert(fr_same(got[c], want[c], 0),
                          "op %d axis %d record %lld field %d: %.17g, reference %.17g", op, axis,
                          (long long)r, c, got[c], want[c]);
            break;
        }
    }
    for (int64_t i = nrec * w; i < nrec * w + 4; i++) cr_assert_eq(out[i], 12345.0);
    free(vals);
    free(idxs);
    free(start);
    free(fill);
    free(recof);
    free(out);
}

