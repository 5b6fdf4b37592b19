/* The CUDA backend against the CPU backend on the same specs. Every test skips when there is
 * no CUDA device; contexts are created inside the tests (Criterion forks per test).
 *
 * Agreement rules (per element / per record):
 *   - programs without libm functions (leaves: chunk, uniform, index; ops: everything but
 *     exp/log/pow) are computed with the same IEEE operations in the same order on both
 *     backends (CUDA built with --fmad=false): STORE results must be bitwise equal, and so
 *     must MIN/MAX/ARGMIN/ARGMAX records; SUM/MEAN/VAR records may differ only by summation
 *     order: |gpu - cpu| <= 1e-12 * sum|x| (m2: 1e-10 relative plus a rounding floor);
 *   - random normal leaves and exp/log/pow differ by the math libraries' ulps: per element
 *     |gpu - cpu| <= 1e-12 * max(|cpu|, largest |intermediate| of that element's program),
 *     the intermediates coming from a scalar evaluator written here;
 *   - COMBINE uses the shared record helpers in input order on both: bitwise;
 *   - COPY moves bits: bitwise.
 * NaN equals NaN everywhere. */

#include "cuda_test_util.h"


/* ------------------------------------------------------- random fused specs ---- */

typedef struct spec {
    gs_kfused_t k;
    double *data[GS_KERNEL_MAX_LEAVES]; /* host chunk data, owned */
} spec_t;

enum { FAM_EXACT = 0, FAM_MATH = 1 };

static void spec_free(spec_t *s)
{
    for (int i = 0; i < GS_KERNEL_MAX_LEAVES; i++) free(s->data[i]);
    memset(s, 0, sizeof(*s));
}

/* Region: ndim 0..4 with at most @a maxn elements; some unit axes. */
static void gen_shape(gs_kfused_t *k, int64_t maxn)
{
    k->ndim = (int32_t)rndr(0, 4);
    int64_t budget = maxn;
    for (int j = 0; j < k->ndim; j++) {
        int64_t m = rnd() % 5 == 0 ? 1 : rndr(1, 24);
        if (rnd() % 4 == 0) m = rndr(50, 700);
        if (m > budget) m = budget;
        if (m < 1) m = 1;
        budget /= m;
        k->shape[j] = m;
    }
}

static void gen_leaf(spec_t *s, int i, int fam)
{
    gs_kfused_t *k = &s->k;
    gs_kleaf_t *lf = &k->leaves[i];
    int kinds_exact[] = {GS_LEAF_CHUNK, GS_LEAF_CHUNK, GS_LEAF_UNIFORM, GS_LEAF_INDEX};
    int kinds_math[] = {GS_LEAF_CHUNK, GS_LEAF_NORMAL, GS_LEAF_NORMAL, GS_LEAF_UNIFORM};
    lf->kind = fam == FAM_EXACT ? kinds_exact[rnd() % 4] : kinds_math[rnd() % 4];
    if (lf->kind == GS_LEAF_CHUNK) {
        /* a dense data array indexed with per-axis steps (0 = broadcast, negative = reversed)
         * over a random permutation of the region's axes, sometimes padded */
        int64_t step[GS_MAX_NDIM], ext[GS_MAX_NDIM], c[GS_MAX_NDIM];
        int perm[GS_MAX_NDIM];
        static const int64_t steps[] = {1, 1, 1, 2, -1, -2, 0, 3};
        for (int j = 0; j < k->ndim; j++) {
            step[j] = steps[rnd() % 8];
            ext[j] = step[j] == 0 ? 1 : (step[j] < 0 ? -step[j] : step[j]) * (k->shape[j] - 1) + 1;
            perm[j] = j;
        }
        if (rnd() % 3 == 0)
            for (int j = k->ndim - 1; j > 0; j--) {
                int r = (int)(rnd() % (uint64_t)(j + 1)), t = perm[r];
                perm[r] = perm[j];
                perm[j] = t;
            }
        int64_t len = 1;
        for (int jj = k->ndim - 1; jj >= 0; jj--) {
            int j = perm[jj];
            c[j] = len;
            len *= ext[j] + (rnd() % 5 == 0 ? rndr(1, 2) : 0);
        }
        int64_t off = rndr(0, 3);
        lf->base = off;
        for (int j = 0; j < k->ndim; j++) {
            lf->stride[j] = step[j] * c[j];
            if (step[j] < 0) lf->base += -step[j] * (k->shape[j] - 1) * c[j];
        }
        lf->data_len = len + off;
        s->data[i] = malloc(sizeof(double) * (size_t)lf->data_len);
        for (int64_t e = 0; e < lf->data_len; e++) {
            double v = rndu() * 4.0 - 2.0;
            switch (rnd() % 16) {
            case 0: v = 0.0; break;
            case 1: v = 1.0; break;
            case 2: v = -0.5; break;
            default: break;
            }
            s->data[i][e] = v;
        }
        lf->data = s->data[i];
    } else if (lf->kind == GS_LEAF_INDEX) {
        lf->base = rndr(-1000, 1000);
        for (int j = 0; j < k->ndim; j++) lf->stride[j] = rndr(-60, 60);
    } else { /* random: indices must stay >= 0 */
        lf->base = rndr(0, (int64_t)1 << 40);
        for (int j = 0; j < k->ndim; j++) {
            lf->stride[j] = rnd() % 6 == 0 ? 0 : rndr(-20000, 20000);
            if (lf->stride[j] < 0) lf->base += -lf->stride[j] * (k->shape[j] - 1);
        }
        lf->seed = rnd();
        if (lf->kind == GS_LEAF_NORMAL) {
            lf->p0 = fam == FAM_MATH ? 0.0 : (double)rndr(-2, 2) * 0.5;
            lf->p1 = 0.25 * (double)rndr(1, 8);
        } else {
            lf->p0 = -1.0 - rndu();
            lf->p1 = 2.0 + rndu();
        }
    }
}

static const int ops_exact_unary[] = {
    GS_OP_NEG, GS_OP_ABS, GS_OP_SQRT, GS_OP_ADD_IMM, GS_OP_SUB_IMM, GS_OP_MUL_IMM,
    GS_OP_DIV_IMM, GS_OP_RSUB_IMM, GS_OP_RDIV_IMM, GS_OP_LT_IMM, GS_OP_LE_IMM, GS_OP_GT_IMM,
    GS_OP_GE_IMM, GS_OP_EQ_IMM, GS_OP_NE_IMM, GS_OP_MIN_IMM, GS_OP_MAX_IMM};
static const int ops_exact_binary[] = {GS_OP_ADD, GS_OP_SUB, GS_OP_MUL, GS_OP_DIV, GS_OP_LT,
                                       GS_OP_LE,  GS_OP_GT,  GS_OP_GE,  GS_OP_EQ,  GS_OP_NE,
                                       GS_OP_MIN, GS_OP_MAX};
/* Well-conditioned math: operands made positive before libm functions (normal leaves are
 * centred, so |z| carries the generator's few-ulp relative error), at most two libm calls per
 * program with their arguments capped, combined by + * / max: the relative error stays a few
 * thousand ulps at worst, far under 1e-12. */
static const int ops_math_unary[] = {GS_OP_ABS,     GS_OP_EXP,     GS_OP_SQRT,    GS_OP_LOG,
                                     GS_OP_POW_IMM, GS_OP_MUL_IMM, GS_OP_ADD_IMM, GS_OP_RPOW_IMM};
static const int ops_math_binary[] = {GS_OP_ADD, GS_OP_MUL, GS_OP_DIV, GS_OP_MAX, GS_OP_POW};
static const int ops_plain_unary[] = {GS_OP_ABS, GS_OP_SQRT, GS_OP_MUL_IMM, GS_OP_ADD_IMM};
static const int ops_plain_binary[] = {GS_OP_ADD, GS_OP_MUL, GS_OP_DIV, GS_OP_MAX};

static int is_libm(int op)
{
    return op == GS_OP_EXP || op == GS_OP_LOG || op == GS_OP_POW || op == GS_OP_POW_IMM ||
           op == GS_OP_RPOW_IMM;
}

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void emit(gs_kfused_t *k, int op, int arg, double imm)
{
    k->prog[k->nprog].op = op;
    k->prog[k->nprog].arg = arg;
    k->prog[k->nprog].imm = imm;
    k->nprog++;
}

static double gen_imm(int op)
{
    static const double imms[] = {0.5, 1.0, 2.0, -1.5, 3.0, 0.25, -0.75, 1.0 / 3.0};
    if (op == GS_OP_POW_IMM) return (double)rndr(1, 3) * 0.5;  /* of a positive value */
    if (op == GS_OP_RPOW_IMM) return 1.5;                       /* 1.5 ** x, x moderate */
    if (op == GS_OP_ADD_IMM || op == GS_OP_MUL_IMM) return 0.5 + rndu();
    return imms[rnd() % 8];
}

/* A random well-formed program: maxd = stack depth allowed (1 = one leaf then unary ops). */
static void gen_prog(spec_t *s, int fam, int maxd)
{
    gs_kfused_t *k = &s->k;
    int depth = 0, target = (int)rndr(1, fam == FAM_MATH ? 10 : 16), nlibm = 0;
    k->nprog = 0;
    while (k->nprog < GS_KERNEL_MAX_PROG - GS_KERNEL_MAX_STACK - 2) {
        if (k->nprog >= target && depth == 1) break;
        int act;
        if (depth == 0) act = 0;
        else if (k->nprog >= target) act = 2;
        else act = (int)(rnd() % 3);
        if (act == 0 && depth >= maxd) act = 1;
        if (act == 2 && depth < 2) act = depth < maxd ? 0 : 1;
        if (act == 0) {
            if (fam == FAM_EXACT && rnd() % 8 == 0) emit(k, GS_OP_CONST, 0, gen_imm(GS_OP_CONST));
            else emit(k, GS_OP_LEAF, (int)(rnd() % (uint64_t)k->nleaves), 0.0);
            if (fam == FAM_MATH && k->prog[k->nprog - 1].op == GS_OP_LEAF)
                emit(k, GS_OP_ABS, 0, 0.0); /* positive operands for the libm functions */
            depth++;
        } else if (act == 1) {
            int op = fam == FAM_EXACT ? ops_exact_unary[rnd() % NELEM(ops_exact_unary)]
                     : nlibm < 2      ? ops_math_unary[rnd() % NELEM(ops_math_unary)]
                                      : ops_plain_unary[rnd() % NELEM(ops_plain_unary)];
            if (fam == FAM_MATH && op == GS_OP_EXP) emit(k, GS_OP_MIN_IMM, 0, 20.0);
            if (fam == FAM_MATH && op == GS_OP_RPOW_IMM) emit(k, GS_OP_MIN_IMM, 0, 30.0);
            emit(k, op, 0, gen_imm(op));
            if (fam == FAM_MATH && op == GS_OP_LOG) emit(k, GS_OP_ABS, 0, 0.0);
            nlibm += is_libm(op);
        } else {
            int op = fam == FAM_EXACT ? ops_exact_binary[rnd() % NELEM(ops_exact_binary)]
                     : nlibm < 2      ? ops_math_binary[rnd() % NELEM(ops_math_binary)]
                                      : ops_plain_binary[rnd() % NELEM(ops_plain_binary)];
            if (fam == FAM_MATH && op == GS_OP_POW) emit(k, GS_OP_MIN_IMM, 0, 3.0);
            emit(k, op, 0, 0.0);
            nlibm += is_libm(op);
            depth--;
        }
    }
    while (depth > 1) {
        emit(k, fam == FAM_EXACT ? GS_OP_SUB : GS_OP_ADD, 0, 0.0);
        depth--;
    }
}

static void gen_spec(spec_t *s, int fam, int64_t maxn)
{
    memset(s, 0, sizeof(*s));
    gen_shape(&s->k, maxn);
    int maxd = (int)(rnd() % 3);
    maxd = maxd == 0 ? 1 : maxd == 1 ? 2 : GS_KERNEL_MAX_STACK;
    s->k.nleaves = maxd == 1 ? 1 : (int32_t)rndr(1, maxd == 2 ? 2 : 6);
    for (int i = 0; i < s->k.nleaves; i++) gen_leaf(s, i, fam);
    gen_prog(s, fam, maxd);
    s->k.terminal = GS_TERM_STORE;
    s->k.red_axis = -1;
}

/* ------------------------------------------------- a scalar reference evaluator ---- */

/* Value at region position @a pos and the largest magnitude any intermediate reached. */
static double host_eval(const gs_kfused_t *k, const int64_t *pos, double *maxabs_p)
{
    double st[GS_KERNEL_MAX_STACK + 1];
    int sp = 0;
    double m = 0.0;
    for (int i = 0; i < k->nprog; i++) {
        const gs_kinstr_t *in = &k->prog[i];
        double x = sp > 0 ? st[sp - 1] : 0.0, y, v = 0.0, imm = in->imm;
        switch (in->op) {
        case GS_OP_LEAF: {
            const gs_kleaf_t *lf = &k->leaves[in->arg];
            int64_t o = lf->base;
            for (int j = 0; j < k->ndim; j++) o += pos[j] * lf->stride[j];
            switch (lf->kind) {
            case GS_LEAF_CHUNK: v = lf->data[o]; break;
            case GS_LEAF_NORMAL: v = gs_random_normal(lf->seed, (uint64_t)o, lf->p0, lf->p1); break;
            case GS_LEAF_UNIFORM: v = gs_random_uniform(lf->seed, (uint64_t)o, lf->p0, lf->p1); break;
            default: v = (double)o; break;
            }
            if (lf->kind == GS_LEAF_NORMAL && fabs(lf->p0) > m) m = fabs(lf->p0);
            st[sp++] = v;
            break;
        }
        case GS_OP_CONST: st[sp++] = v = imm; break;
        case GS_OP_NEG: st[sp - 1] = v = -x; break;
        case GS_OP_ABS: st[sp - 1] = v = fabs(x); break;
        case GS_OP_EXP: st[sp - 1] = v = exp(x); break;
        case GS_OP_LOG: st[sp - 1] = v = log(x); break;
        case GS_OP_SQRT: st[sp - 1] = v = sqrt(x); break;
        case GS_OP_ADD_IMM: st[sp - 1] = v = x + imm; break;
        case GS_OP_SUB_IMM: st[sp - 1] = v = x - imm; break;
        case GS_OP_MUL_IMM: st[sp - 1] = v = x * imm; break;
        case GS_OP_DIV_IMM: st[sp - 1] = v = x / imm; break;
        case GS_OP_POW_IMM: st[sp - 1] = v = pow(x, imm); break;
        case GS_OP_RSUB_IMM: st[sp - 1] = v = imm - x; break;
        case GS_OP_RDIV_IMM: st[sp - 1] = v = imm / x; break;
        case GS_OP_RPOW_IMM: st[sp - 1] = v = pow(imm, x); break;
        case GS_OP_MIN_IMM: st[sp - 1] = v = (x < imm || x != x) ? x : imm; break;
        case GS_OP_MAX_IMM: st[sp - 1] = v = (x > imm || x != x) ? x : imm; break;
        default:
            if (in->op >= GS_OP_LT_IMM && in->op <= GS_OP_NE_IMM) {
                /* comparisons are exact; their values are 0/1 */
                st[sp - 1] = v = 0.0;
                break;
            }
            y = st[--sp];
            x = st[sp - 1];
            switch (in->op) {
            case GS_OP_ADD: v = x + y; break;
            case GS_OP_SUB: v = x - y; break;
            case GS_OP_MUL: v = x * y; break;
            case GS_OP_DIV: v = x / y; break;
            case GS_OP_POW: v = pow(x, y); break;
            case GS_OP_MIN: v = (x < y || x != x) ? x : y; break;
            case GS_OP_MAX: v = (x > y || x != x) ? x : y; break;
            default: v = 0.0; break; /* comparisons (only used for magnitudes here) */
            }
            st[sp - 1] = v;
            break;
        }
        if (isfinite(v) && fabs(v) > m) m = fabs(v);
    }
    *maxabs_p = m;
    return st[0];
}

/* -------------------------------------------------------- running on both ---- */

/* Run @a s (terminal as set) on both backends; cpu_out/gpu_out receive out_len doubles. */
static void run_both(bk_t *b, const spec_t *s, double *cpu_out, double *gpu_out)
{
    gs_kfused_t kc = s->k, kg = s->k;
    int64_t n = gs_kfused_out_len(&s->k);
    double *dl[GS_KERNEL_MAX_LEAVES] = {0};
    kc.out = cpu_out;
    CHECK(CPU->fused(b->cpu, b->cs, &kc));
    for (int i = 0; i < kg.nleaves; i++)
        if (kg.leaves[i].kind == GS_LEAF_CHUNK) {
            dl[i] = dev_upload(b, s->data[i], kg.leaves[i].data_len);
            kg.leaves[i].data = dl[i];
        }
    double *dout = dev_alloc_poisoned(b, n);
    kg.out = dout;
    CHECK(GPU->fused(b->gpu, b->gs, &kg));
    CHECK(GPU->sync(b->gpu, b->gs));
    dev_download(b, gpu_out, dout, n);
    GPU->mem_free(b->gpu, dout);
    for (int i = 0; i < kg.nleaves; i++) GPU->mem_free(b->gpu, dl[i]);
}

static void describe(const spec_t *s, char *buf, size_t len)
{
    const gs_kfused_t *k = &s->k;
    int n = snprintf(buf, len, "ndim %d shape (", k->ndim);
    for (int j = 0; j < k->ndim && n < (int)len; j++)
        n += snprintf(buf + n, len - (size_t)n, "%lld,", (long long)k->shape[j]);
    n += snprintf(buf + n, len - (size_t)n, ") leaves");
    for (int i = 0; i < k->nleaves && n < (int)len; i++)
        n += snprintf(buf + n, len - (size_t)n, " %d", k->leaves[i].kind);
    n += snprintf(buf + n, len - (size_t)n, " prog");
    for (int i = 0; i < k->nprog && n < (int)len; i++)
        n += snprintf(buf + n, len - (size_t)n, " %d", k->prog[i].op);
    if (k->terminal == GS_TERM_REDUCE && n < (int)len)
        snprintf(buf + n, len - (size_t)n, " reduce %d axis %d", k->redop, k->red_axis);
}

/* ----------------------------------------------------------------- tests ---- */

Test(chunkops_cuda, store_of_exact_programs_is_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)512 << 20);
    rng_state = 1001;
    for (int it = 0; it < 400; it++) {
        spec_t s;
        gen_spec(&s, FAM_EXACT, it % 10 == 0 ? 300000 : 20000);
        int64_t n = gs_kfused_out_len(&s.k);
        double *c = malloc(sizeof(double) * (size_t)(n + 1)), *g = malloc(sizeof(double) * (size_t)(n + 1));
        run_both(&b, &s, c, g);
        for (int64_t i = 0; i < n; i++)
            if (!bits_equal(g[i], c[i])) {
                char d[512];
                describe(&s, d, sizeof(d));
                cr_assert_fail("spec %d (%s): element %lld: gpu %.17g cpu %.17g", it, d,
                               (long long)i, g[i], c[i]);
            }
        free(c);
        free(g);
        spec_free(&s);
    }
    bk_close(&b);
}

Test(chunkops_cuda, store_with_normal_leaves_and_libm_agrees_to_1e12)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)512 << 20);
    rng_state = 2002;
    for (int it = 0; it < 300; it++) {
        spec_t s;
        gen_spec(&s, FAM_MATH, it % 10 == 0 ? 300000 : 20000);
        int64_t n = gs_kfused_out_len(&s.k);
        double *c = malloc(sizeof(double) * (size_t)(n + 1)), *g = malloc(sizeof(double) * (size_t)(n + 1));
        run_both(&b, &s, c, g);
        for (int64_t i = 0; i < n; i++) {
            if (bits_equal(g[i], c[i])) continue;
            int64_t pos[GS_MAX_NDIM], q = i;
            for (int j = s.k.ndim - 1; j >= 0; j--) {
                pos[j] = q % s.k.shape[j];
                q /= s.k.shape[j];
            }
            double m, h = host_eval(&s.k, pos, &m);
            double scale = fmax(fabs(c[i]), m);
            if (!(fabs(g[i] - c[i]) <= 1e-12 * scale)) {
                char d[512];
                describe(&s, d, sizeof(d));
                cr_assert_fail("spec %d (%s): element %lld: gpu %.17g cpu %.17g host %.17g "
                               "(scale %g)",
                               it, d, (long long)i, g[i], c[i], h, scale);
            }
        }
        free(c);
        free(g);
        spec_free(&s);
    }
    bk_close(&b);
}

Test(chunkops_cuda, random_leaves_match_the_definition_on_every_element)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)512 << 20);
    /* one leaf, STORE: uniform must be bitwise, normal(0, 1) within 1e-12 relative */
    const int64_t n = 1 << 20;
    double *g = malloc(sizeof(double) * (size_t)n);
    for (int kind = GS_LEAF_NORMAL; kind <= GS_LEAF_UNIFORM; kind++) {
        gs_kfused_t k;
        memset(&k, 0, sizeof(k));
        k.ndim = 1;
        k.shape[0] = n;
        k.nleaves = 1;
        k.leaves[0].kind = kind;
        k.leaves[0].seed = 0x0123456789abcdefull;
        k.leaves[0].base = ((int64_t)1 << 33) - n / 2; /* crosses a 32-bit counter boundary */
        k.leaves[0].stride[0] = 1;
        k.leaves[0].p0 = kind == GS_LEAF_NORMAL ? 0.0 : -3.0;
        k.leaves[0].p1 = kind == GS_LEAF_NORMAL ? 1.0 : 5.0;
        k.nprog = 1;
        k.prog[0].op = GS_OP_LEAF;
        k.terminal = GS_TERM_STORE;
        double *d = dev_alloc_poisoned(&b, n);
        k.out = d;
        CHECK(GPU->fused(b.gpu, b.gs, &k));
        dev_download(&b, g, d, n);
        GPU->mem_free(b.gpu, d);
        for (int64_t i = 0; i < n; i++) {
            uint64_t idx = (uint64_t)(k.leaves[0].base + i);
            double ref = kind == GS_LEAF_NORMAL ? gs_random_normal(k.leaves[0].seed, idx, 0.0, 1.0)
                                                : gs_random_uniform(k.leaves[0].seed, idx, -3.0, 5.0);
            if (kind == GS_LEAF_UNIFORM)
                cr_assert(bits_equal(g[i], ref), "uniform %lld: gpu %.17g ref %.17g", (long long)i,
                          g[i], ref);
            else
                cr_assert(fabs(g[i] - ref) <= 1e-12 * fabs(ref), "normal %lld: gpu %.17g ref %.17g",
                          (long long)i, g[i], ref);
        }
    }
    free(g);
    bk_close(&b);
}

/* Reference records of a reduction computed here from the CPU's element values. */
typedef struct rref {
    double sum_abs, max_abs, n;
    int nonfinite;
} rref_t;

static void check_reduction(const spec_t *s, const double *x, const double *c, const double *g,
                            int it)
{
    const gs_kfused_t *k = &s->k;
    int64_t nrec = gs_kfused_nrecords(k), N = gs_region_size(k->ndim, k->shape);
    int w = gs_redop_width(k->redop);
    rref_t *rr = calloc((size_t)(nrec > 0 ? nrec : 1), sizeof(rref_t));
    for (int64_t f = 0; f < N; f++) {
        int64_t pos[GS_MAX_NDIM], q = f, rec = 0;
        for (int j = k->ndim - 1; j >= 0; j--) {
            pos[j] = q % k->shape[j];
            q /= k->shape[j];
        }
        if (k->red_axis >= 0)
            for (int j = 0; j < k->ndim; j++)
                if (j != k->red_axis) rec = rec * k->shape[j] + pos[j];
        rref_t *r = &rr[rec];
        double v = x[f];
        if (!isfinite(v)) r->nonfinite = 1;
        else {
            r->sum_abs += fabs(v);
            r->max_abs = fmax(r->max_abs, fabs(v));
        }
        r->n += 1.0;
    }
    char d[512];
    describe(s, d, sizeof(d));
    for (int64_t r = 0; r < nrec; r++) {
        const double *cr = c + r * w, *gr = g + r * w;
        rref_t *ref = &rr[r];
        switch (k->redop) {
        case GS_RED_MIN:
        case GS_RED_MAX:
        case GS_RED_ARGMIN:
        case GS_RED_ARGMAX:
            for (int i = 0; i < w; i++)
                cr_assert(bits_equal(gr[i], cr[i]), "spec %d (%s): record %lld[%d]: gpu %.17g cpu %.17g",
                          it, d, (long long)r, i, gr[i], cr[i]);
            break;
        case GS_RED_SUM:
        case GS_RED_MEAN:
            if (k->redop == GS_RED_MEAN)
                cr_assert_eq(gr[1], cr[1], "spec %d (%s): record %lld count", it, d, (long long)r);
            if (ref->nonfinite)
                cr_assert(bits_equal(gr[0], cr[0]) || (!isfinite(gr[0]) && !isfinite(cr[0])),
                          "spec %d (%s): record %lld: gpu %.17g cpu %.17g", it, d, (long long)r,
                          gr[0], cr[0]);
            else
                cr_assert(fabs(gr[0] - cr[0]) <= 1e-12 * ref->sum_abs,
                          "spec %d (%s): record %lld sum: gpu %.17g cpu %.17g (sum|x| %g)", it, d,
                          (long long)r, gr[0], cr[0], ref->sum_abs);
            break;
        case GS_RED_PROD: {
            /* the device multiplies in a tree, the CPU in order: finite nonzero products agree
             * to a few roundings per element; a product that overflows or underflows in one
             * order may meet a zero or an infinity in the other (0, a subnormal, +-inf or NaN
             * on each) */
            const int gd = !(fabs(gr[0]) >= 1e-290 && isfinite(gr[0])),
                      cd = !(fabs(cr[0]) >= 1e-290 && isfinite(cr[0]));   /* or subnormal */
            if (gd || cd)
                cr_assert(bits_equal(gr[0], cr[0]) || (gd && cd),
                          "spec %d (%s): record %lld product: gpu %.17g cpu %.17g", it, d,
                          (long long)r, gr[0], cr[0]);
            else
                cr_assert(fabs(gr[0] - cr[0]) <= 4e-16 * (ref->n + 8) * fabs(cr[0]),
                          "spec %d (%s): record %lld product: gpu %.17g cpu %.17g", it, d,
                          (long long)r, gr[0], cr[0]);
            break;
        }
        default: /* VAR, STD: [count, mean, m2] */
            cr_assert_eq(gr[0], cr[0], "spec %d (%s): record %lld count", it, d, (long long)r);
            if (ref->nonfinite) break;
            cr_assert(fabs(gr[1] - cr[1]) <= 1e-12 * ref->max_abs + 1e-300,
                      "spec %d (%s): record %lld mean: gpu %.17g cpu %.17g", it, d, (long long)r,
                      gr[1], cr[1]);
            cr_assert(fabs(gr[2] - cr[2]) <=
                          1e-10 * fabs(cr[2]) + 1e-13 * ref->n * ref->max_abs * ref->max_abs,
                      "spec %d (%s): record %lld m2: gpu %.17g cpu %.17g", it, d, (long long)r,
                      gr[2], cr[2]);
            break;
        }
    }
    free(rr);
}

static void reduce_exact_family(uint64_t seed, int iters)
{
    bk_t b;
    bk_open(&b, (size_t)512 << 20);
    rng_state = seed;
    for (int it = 0; it < iters; it++) {
        spec_t s;
        gen_spec(&s, FAM_EXACT, it % 8 == 0 ? 400000 : 30000);
        int64_t N = gs_region_size(s.k.ndim, s.k.shape);
        double *x = malloc(sizeof(double) * (size_t)(N + 1));
        gs_kfused_t kx = s.k; /* element values, CPU */
        kx.out = x;
        CHECK(CPU->fused(b.cpu, b.cs, &kx));
        s.k.terminal = GS_TERM_REDUCE;
        s.k.redop = (int32_t)(it % GS_RED_COUNT);
        s.k.red_axis = s.k.ndim > 0 && rnd() % 3 ? (int32_t)(rnd() % (uint64_t)s.k.ndim) : -1;
        /* arg indices: a global flat index over a larger array holding the region */
        s.k.idx_base = rndr(0, 1000);
        for (int j = s.k.ndim - 1, st = 1; j >= 0; j--) {
            s.k.idx_stride[j] = st;
            st *= (int)s.k.shape[j] + 3;
        }
        int64_t n = gs_kfused_out_len(&s.k);
        double *c = malloc(sizeof(double) * (size_t)(n + 1)), *g = malloc(sizeof(double) * (size_t)(n + 1));
        run_both(&b, &s, c, g);
        check_reduction(&s, x, c, g, it);
        free(x);
        free(c);
        free(g);
        spec_free(&s);
    }
    bk_close(&b);
}

Test(chunkops_cuda, reductions_of_exact_programs_match_cpu_records)
{
    GPU_OR_SKIP();
    reduce_exact_family(3003, 320);
}

/* Axis reductions that take the split paths (a warp per record over a long axis split across
 * blocks; a thread per record over a long strided axis split across threads) and a FULL
 * reduction large enough for hundreds of blocks and the last-block merge. */
Test(chunkops_cuda, split_and_multiblock_reductions_match_cpu_records)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)512 << 20);
    rng_state = 4004;
    static const int64_t shapes[][2] = {{3, 400000}, {400000, 3}, {1, 1000000}, {1000, 1000},
                                        {7, 50000},  {50000, 7},  {2, 65}};
    for (int si = 0; si < NELEM(shapes); si++)
        for (int axis = -1; axis < 2; axis++)
            for (int redop = 0; redop < GS_RED_COUNT; redop++) {
                spec_t s;
                memset(&s, 0, sizeof(s));
                s.k.ndim = 2;
                s.k.shape[0] = shapes[si][0];
                s.k.shape[1] = shapes[si][1];
                s.k.nleaves = 2;
                gen_leaf(&s, 0, FAM_EXACT);
                /* odd reductions: an index leaf, so chunk/index programs take the
                 * memory-bound kernels (several elements per thread per step) */
                s.k.leaves[1].kind = redop % 2 ? GS_LEAF_INDEX : GS_LEAF_UNIFORM;
                s.k.leaves[1].seed = rnd();
                s.k.leaves[1].stride[0] = s.k.shape[1];
                s.k.leaves[1].stride[1] = 1;
                s.k.leaves[1].p0 = -1.0;
                s.k.leaves[1].p1 = 1.0;
                emit(&s.k, GS_OP_LEAF, 0, 0.0);
                emit(&s.k, GS_OP_LEAF, 1, 0.0);
                emit(&s.k, GS_OP_ADD, 0, 0.0);
                s.k.terminal = GS_TERM_STORE;
                int64_t N = s.k.shape[0] * s.k.shape[1];
                double *x = malloc(sizeof(double) * (size_t)N);
                gs_kfused_t kx = s.k;
                kx.out = x;
                CHECK(CPU->fused(b.cpu, b.cs, &kx));
                s.k.terminal = GS_TERM_REDUCE;
                s.k.redop = redop;
                s.k.red_axis = axis;
                s.k.idx_stride[0] = s.k.shape[1];
                s.k.idx_stride[1] = 1;
                int64_t n = gs_kfused_out_len(&s.k);
                double *c = malloc(sizeof(double) * (size_t)n), *g = malloc(sizeof(double) * (size_t)n);
                run_both(&b, &s, c, g);
                check_reduction(&s, x, c, g, si * 100 + (axis + 1) * 10 + redop);
                /* determinism: the same launch gives the same bits */
                double *g2 = malloc(sizeof(double) * (size_t)n);
                run_both(&b, &s, c, g2);
                for (int64_t i = 0; i < n; i++)
                    cr_assert(bits_equal(g[i], g2[i]), "shape %d axis %d redop %d: run-to-run "
                              "difference at %lld", si, axis, redop, (long long)i);
                free(x);
                free(c);
                free(g);
                free(g2);
                spec_free(&s);
            }
    bk_close(&b);
}

/* The seed case at reduced size: a 2000x2000 chunk of a 4000-column normal array, sliced
 * [::2, ::2], +1, summed. */
Test(chunkops_cuda, seed_shape_sum_matches_cpu)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)512 << 20);
    spec_t s;
    memset(&s, 0, sizeof(s));
    gs_kfused_t *k = &s.k;
    k->ndim = 2;
    k->shape[0] = k->shape[1] = 1000;
    k->nleaves = 1;
    k->leaves[0].kind = GS_LEAF_NORMAL;
    k->leaves[0].seed = 42;
    k->leaves[0].base = 2000 * 4000 + 2000; /* chunk (1, 1) */
    k->leaves[0].stride[0] = 2 * 4000;
    k->leaves[0].stride[1] = 2;
    k->leaves[0].p1 = 1.0;
    emit(k, GS_OP_LEAF, 0, 0.0);
    emit(k, GS_OP_ADD_IMM, 0, 1.0);
    k->terminal = GS_TERM_STORE;
    int64_t N = 1000 * 1000;
    double *x = malloc(sizeof(double) * (size_t)N), *xg = malloc(sizeof(double) * (size_t)N);
    run_both(&b, &s, x, xg);
    double sum_abs = 0.0;
    for (int64_t i = 0; i < N; i++) {
        sum_abs += fabs(x[i]);
        cr_assert(fabs(xg[i] - x[i]) <= 1e-12 * fmax(fabs(x[i]), 1.0), "element %lld: %.17g vs %.17g",
                  (long long)i, xg[i], x[i]);
    }
    k->terminal = GS_TERM_REDUCE;
    k->redop = GS_RED_SUM;
    k->red_axis = -1;
    double c, g;
    run_both(&b, &s, &c, &g);
    cr_assert(fabs(g - c) <= 1e-12 * sum_abs, "sum: gpu %.17g cpu %.17g", g, c);
    cr_assert(fabs(c - (double)N) < 10.0 * 1000.0, "sum %.17g is not near %lld", c, (long long)N);
    free(x);
    free(xg);
    spec_free(&s);
    bk_close(&b);
}

Test(chunkops_cuda, empty_regions_give_empty_records)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)64 << 20);
    for (int redop = 0; redop < GS_RED_COUNT; redop++)
        for (int axis = -1; axis < 2; axis++) {
            spec_t s;
            memset(&s, 0, sizeof(s));
            s.k.ndim = 2;
            s.k.shape[0] = 5;
            s.k.shape[1] = 0;
            s.k.nleaves = 1;
            s.k.leaves[0].kind = GS_LEAF_INDEX;
            emit(&s.k, GS_OP_LEAF, 0, 0.0);
            s.k.terminal = GS_TERM_REDUCE;
            s.k.redop = redop;
            s.k.red_axis = axis;
            int64_t n = gs_kfused_out_len(&s.k);
            double c[16], g[16];
            if (n == 0) continue;
            run_both(&b, &s, c, g);
            for (int64_t i = 0; i < n; i++)
                cr_assert(bits_equal(g[i], c[i]), "redop %d axis %d [%lld]: gpu %g cpu %g", redop,
                          axis, (long long)i, g[i], c[i]);
        }
    bk_close(&b);
}


/* x + x.T (leaf 1 reads its chunk transposed: the transposed-tile kernels) on odd shapes, one
 * tile, tile edges and many tiles: STORE bitwise equal to the CPU, every FULL reduction within
 * the rules above, pipelined (the default for this program), unpipelined and with the tiles
 * switched off (gs_cuda_set_transpose_tiles 1, 2, 0). */
Test(chunkops_cuda, transposed_chunk_leaves_match_cpu_in_tiles)
{
    GPU_OR_SKIP();
    bk_t b;
    bk_open(&b, (size_t)512 << 20);
    rng_state = 1919;
    static const int64_t shapes[][2] = {{2, 2}, {31, 33}, {32, 32}, {37, 53}, {1000, 999},
                                        {3, 5000}, {4097, 65}};
    for (int si = 0; si < NELEM(shapes); si++)
        for (int redop = -1; redop < GS_RED_COUNT; redop++) {
            const int64_t R = shapes[si][0], L = shapes[si][1], ld = L + 1, tld = R + 3;
            spec_t s;
            memset(&s, 0, sizeof(s));
            s.k.ndim = 2;
            s.k.shape[0] = R;
            s.k.shape[1] = L;
            s.k.nleaves = 2;
            for (int i = 0; i < 2; i++) {
                int64_t len = i == 0 ? R * ld : L * tld;
                s.data[i] = malloc(sizeof(double) * (size_t)len);
                for (int64_t e = 0; e < len; e++) s.data[i][e] = (double)rndr(-1000000, 1000000) / 1024.0;
                s.k.leaves[i].kind = GS_LEAF_CHUNK;
                s.k.leaves[i].data = s.data[i];
                s.k.leaves[i].data_len = len;
            }
            s.k.leaves[0].stride[0] = ld;
            s.k.leaves[0].stride[1] = 1;
            s.k.leaves[1].base = 1;
            s.k.leaves[1].stride[0] = 1; /* element (r, l) = data1[l * tld + r + 1] */
            s.k.leaves[1].stride[1] = tld;
            emit(&s.k, GS_OP_LEAF, 0, 0.0);
            emit(&s.k, GS_OP_LEAF, 1, 0.0);
            emit(&s.k, GS_OP_ADD, 0, 0.0);
            int64_t N = R * L;
            double *x = malloc(sizeof(double) * (size_t)N);
            gs_kfused_t kx = s.k;
            kx.out = x;
            CHECK(CPU->fused(b.cpu, b.cs, &kx));
            if (redop >= 0) {
                s.k.terminal = GS_TERM_REDUCE;
                s.k.redop = redop;
                s.k.red_axis = -1;
                s.k.idx_stride[0] = L;
                s.k.idx_stride[1] = 1;
            }
            int64_t n = gs_kfused_out_len(&s.k);
            double *c = malloc(sizeof(double) * (size_t)n), *g = malloc(sizeof(double) * (size_t)n);
            double *g0 = malloc(sizeof(double) * (size_t)n);
            double *g2 = malloc(sizeof(double) * (size_t)n);
            run_both(&b, &s, c, g); /* one row-major, one transposed leaf: pipelined tiles */
            CHECK(gs_cuda_set_transpose_tiles(b.gpu, 0));
            run_both(&b, &s, c, g0);
            CHECK(gs_cuda_set_transpose_tiles(b.gpu, 2)); /* tiles, not pipelined */
            run_both(&b, &s, c, g2);
            CHECK(gs_cuda_set_transpose_tiles(b.gpu, 1));
            if (redop < 0) {
                for (int64_t i = 0; i < n; i++) {
                    cr_assert(bits_equal(g[i], c[i]), "shape %d: element %lld: gpu %.17g cpu %.17g",
                              si, (long long)i, g[i], c[i]);
                    cr_assert(bits_equal(g0[i], c[i]), "shape %d, tiles off: element %lld", si,
                              (long long)i);
                    cr_assert(bits_equal(g2[i], c[i]), "shape %d, unpipelined: element %lld", si,
                              (long long)i);
                }
            } else {
                check_reduction(&s, x, c, g, si * 100 + redop);
                check_reduction(&s, x, c, g0, si * 100 + 50 + redop);
                check_reduction(&s, x, c, g2, si * 100 + 70 + redop);
            }
            free(g2);
            free(x);
            free(c);
            free(g);
            free(g0);
            spec_free(&s);
        }
    bk_close(&b);
}

/* Version-2 and version-3 normals (random.h gs_random_normal_v2 / _v3): libm-free, so the GPU's
 * values are the CPU's bit for bit, through STORE over whole rows, strided slices (for version 2
 * lone halves of pairs; for version 3 stride 2 takes the pair kernels), odd offsets (pairs split
 * at region edges; @a offs shifts the first element of the region by 0..3 for version 3),
 * indices past 2^32, and under a program. */
static void normal_pairs_bitwise_equal(int kind, const int64_t (*steps)[2], int nsteps, int offs)
{
    bk_t b;
    bk_open(&b, (size_t)256 << 20);
    static const int64_t shapes[][2] = {{1, 1}, {37, 53}, {1000, 1001}, {3, 300000}};
    rng_state = 2002;
    for (int si = 0; si < NELEM(shapes); si++)
        for (int st = 0; st < nsteps; st++)
            for (int prog = 0; prog < 2; prog++) {
                spec_t s;
                memset(&s, 0, sizeof(s));
                s.k.ndim = 2;
                s.k.shape[0] = shapes[si][0];
                s.k.shape[1] = shapes[si][1];
                s.k.nleaves = 1;
                gs_kleaf_t *lf = &s.k.leaves[0];
                lf->kind = kind;
                lf->seed = st == 3 ? 0 : rnd();
                lf->p0 = prog ? 0.0 : 1.5;
                lf->p1 = prog ? 1.0 : 0.75;
                int64_t cols = 2 * shapes[si][1] * (steps[st][1] < 0 ? -steps[st][1] : steps[st][1]) + 7;
                lf->stride[0] = steps[st][0] * cols;
                lf->stride[1] = steps[st][1];
                lf->base = (si % 2 ? ((int64_t)3 << 32) : 0) + 1 + (offs ? (si + st + prog) % 4 : 0) +
                           (steps[st][0] < 0 ? -steps[st][0] * cols * shapes[si][0] : 0) +
                           (steps[st][1] < 0 ? cols - 1 : 0);
                emit(&s.k, GS_OP_LEAF, 0, 0.0);
                if (prog) {
                    emit(&s.k, GS_OP_MUL_IMM, 0, 2.0);
                    emit(&s.k, GS_OP_ADD_IMM, 0, 1.0);
                    if (st == 2) emit(&s.k, GS_OP_ABS, 0, 0.0); /* an interpreted tail */
                }
                s.k.terminal = GS_TERM_STORE;
                int64_t n = gs_kfused_out_len(&s.k);
                double *c = malloc(sizeof(double) * (size_t)n), *g = malloc(sizeof(double) * (size_t)n);
                run_both(&b, &s, c, g);
                for (int64_t i = 0; i < n; i++)
                    cr_assert(bits_equal(g[i], c[i]), "kind %d shape %d step %d prog %d: element %lld: "
                              "gpu %.17g cpu %.17g", kind, si, st, prog, (long long)i, g[i], c[i]);
                /* whole-region reductions of the same values (the pair kernels' FULL) */
                for (int redop = 0; redop < GS_RED_COUNT; redop++) {
                    s.k.terminal = GS_TERM_REDUCE;
                    s.k.redop = redop;
                    s.k.red_axis = -1;
                    s.k.idx_stride[0] = s.k.shape[1];
                    s.k.idx_stride[1] = 1;
                    int64_t nr = gs_kfused_out_len(&s.k);
                    double *cr = malloc(sizeof(double) * (size_t)nr), *gr = malloc(sizeof(double) * (size_t)nr);
                    run_both(&b, &s, cr, gr);
                    check_reduction(&s, c, cr, gr, si * 1000 + st * 100 + prog * 10 + redop);
                    free(cr);
                    free(gr);
                }
                free(c);
                free(g);
                spec_free(&s);
            }
    bk_close(&b);
}

Test(chunkops_cuda, normal_v2_is_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    static const int64_t steps[][2] = {{1, 1}, {2, 2}, {1, 3}, {-1, 1}};
    normal_pairs_bitwise_equal(GS_LEAF_NORMAL_V2, steps, NELEM(steps), 0);
}

Test(chunkops_cuda, normal_v3_is_bitwise_equal_to_cpu)
{
    GPU_OR_SKIP();
    static const int64_t steps[][2] = {{1, 1}, {2, 2}, {1, 3}, {-1, 1}, {1, 2}, {-2, 2}, {1, -2}};
    normal_pairs_bitwise_equal(GS_LEAF_NORMAL_V3, steps, NELEM(steps), 1);
}
