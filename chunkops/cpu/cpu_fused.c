/* CPU fused kernel (graph/kernel.h): evaluate a postfix program over a strided region, then
 * store the values or reduce them into partial records.
 *
 * Shape of the computation:
 *   1. The region is simplified: extent-1 axes are dropped and adjacent axes whose strides
 *      compose (for every leaf, the record index and the arg index) are merged, so a
 *      contiguous 1000x1000 region becomes one row of 1e6 elements. The reduction axis is
 *      never merged.
 *   2. The region is walked row-major in tiles of up to GS__TILE elements. A tile is a list of
 *      segments (pieces of rows along the innermost axis); leaf offsets advance incrementally.
 *   3. The program runs once per tile on per-depth tile buffers (dispatch per tile, not per
 *      element); a leaf is materialised at most once per tile, and a contiguous chunk leaf is
 *      read in place.
 *   4. STORE writes the last instruction's result straight into `out`. REDUCE folds tiles:
 *      sums through 8-way blocked tile sums merged pairwise, var through per-tile two-pass
 *      (count, mean, m2) merged with Chan et al.'s formula, min/max/arg by scanning with the
 *      NumPy NaN and tie rules (chunkops/records.h).
 *
 * Files: this one simplifies the region, materialises leaves, runs the program and drives the
 * walk; cpu_fused_reduce.c holds the REDUCE terminal (accumulators, pairwise sums, var, min/max/
 * arg, integer records); cpu_fused_int.h the kernel state they share.
 */
#include "chunkops/cpu/cpu_fused_int.h"
#include "chunkops/elem_dtype.h"
#include "chunkops/elemwise.h"
#include "chunkops/random.h"
#include "chunkops/records.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* ---------------------------------------------------------------- simplification ---- */

static void gs__space_build(gs__fused_t *f)
{
    const gs_kfused_t *k = f->k;
    gs__space_t *sp = &f->sp;
    int nd = k->ndim, a = -1;
    int64_t *shape = sp->shape;           /* built in place */
    int64_t (*stride)[GS_MAX_NDIM] = sp->stride;
    int64_t *base = sp->base;

    /* nothing reads a stride past sp->nd (<= k->ndim, or 1 below), but a fixed-size clear of
     * the 640-byte table is a few vector stores where clearing nd strides per column was a
     * memset call per column (10 per task: ~3 % of a worker's CPU in gs-bench tasks) */
    memset(base, 0, sizeof(sp->base));
    memset(stride, 0, sizeof(sp->stride));
    for (int j = 0; j < nd; j++) shape[j] = k->shape[j];
    for (int c = 0; c < k->nleaves; c++) {
        base[c] = k->leaves[c].base;
        for (int j = 0; j < nd; j++) stride[c][j] = k->leaves[c].stride[j];
    }
    if (k->terminal == GS_TERM_REDUCE && k->red_axis >= 0) {
        a = k->red_axis;
        int64_t rs = 1;
        for (int j = nd - 1; j >= 0; j--) {
            if (j == a) continue;
            stride[GS__COL_REC][j] = rs;
            rs *= shape[j];
        }
        base[GS__COL_AIDX] = k->idx_base;
        stride[GS__COL_AIDX][a] = 1;
    } else if (k->terminal == GS_TERM_REDUCE) {
        base[GS__COL_AIDX] = k->idx_base;
        for (int j = 0; j < nd; j++) stride[GS__COL_AIDX][j] = k->idx_stride[j];
    }

    /* drop extent-1 axes (other than the reduction axis) */
    int m = 0;
    for (int j = 0; j < nd; j++) {
        if (shape[j] == 1 && j != a) continue;
        if (j == a) a = m;
        shape[m] = shape[j];
        for (int c = 0; c < GS__NCOL; c++) stride[c][m] = stride[c][j];
        m++;
    }
    nd = m;
    /* merge adjacent axes whose strides compose */
    m = 0;
    for (int j = 0; j < nd; j++) {
        if (m > 0 && j != a && m - 1 != a) {
            int ok = 1;
            for (int c = 0; c < GS__NCOL && ok; c++)
                ok = stride[c][m - 1] == stride[c][j] * shape[j];
            if (ok) {
                shape[m - 1] *= shape[j];
                for (int c = 0; c < GS__NCOL; c++) stride[c][m - 1] = stride[c][j];
                continue;
            }
        }
        if (j == a) a = m;
        shape[m] = shape[j];
        for (int c = 0; c < GS__NCOL; c++) stride[c][m] = stride[c][j];
        m++;
    }
    nd = m;
    if (nd == 0) {
        nd = 1;
        shape[0] = 1;
        for (int c = 0; c < GS__NCOL; c++) stride[c][0] = 0;
    }
    sp->nd = nd;
    sp->red = a;

    if (k->terminal != GS_TERM_REDUCE) f->mode = GS__MODE_STORE;
    else if (a < 0) f->mode = GS__MODE_ALL;
    else if (a == nd - 1) f->mode = GS__MODE_INNER;
    else f->mode = GS__MODE_OUTER;
}

/* ---------------------------------------------------------------- leaves ---- */

static const double *gs__leaf_tile(gs__fused_t *f, int li)
{
    if (f->leafptr[li] != NULL) return f->leafptr[li];
    const gs_kleaf_t *lf = &f->k->leaves[li];
    const int nd1 = f->sp.nd - 1;
    const int64_t is = f->sp.stride[li][nd1];
    double *buf = f->s->leaf[li];
    const gs__seg_t *segs = f->s->segs;

    switch (lf->kind) {
    case GS_LEAF_CHUNK:
        if (lf->dtype != GS_DTYPE_FLOAT64) {
            /* typed data: converted to stack values (elem_dtype.h) */
            for (int g = 0; g < f->nseg; g++) {
                const int64_t o = segs[g].off[li];
                double *dst = buf + segs[g].pos;
                for (int i = 0; i < segs[g].len; i++)
                    dst[i] = gs_load_elem(lf->dtype, lf->data, o + (int64_t)i * is);
            }
            break;
        }
        if (f->nseg == 1 && is == 1) {
            f->leafptr[li] = lf->data + segs[0].off[li];
            return f->leafptr[li];
        }
        for (int g = 0; g < f->nseg; g++) {
            const double *src = lf->data + segs[g].off[li];
            double *dst = buf + segs[g].pos;
            int len = segs[g].len;
            if (is == 1) {
                memcpy(dst, src, (size_t)len * sizeof(double));
            } else if (is == 0) {
                double v = *src;
                for (int i = 0; i < len; i++) dst[i] = v;
            } else {
                for (int i = 0; i < len; i++) dst[i] = src[(int64_t)i * is];
            }
        }
        break;
    case GS_LEAF_NORMAL:
    case GS_LEAF_NORMAL_V2:
    case GS_LEAF_NORMAL_V3:
    case GS_LEAF_UNIFORM: {
        uint64_t *idx = f->s->idx;
        for (int g = 0; g < f->nseg; g++) {
            uint64_t o = (uint64_t)segs[g].off[li];
            uint64_t *d = idx + segs[g].pos;
            for (int i = 0; i < segs[g].len; i++) d[i] = o + (uint64_t)((int64_t)i * is);
        }
        if (lf->kind == GS_LEAF_NORMAL)
            gs__cpu_random_normal(lf->seed, idx, f->n, lf->p0, lf->p1, buf);
        else if (lf->kind == GS_LEAF_NORMAL_V2)
            gs__cpu_random_normal_v2(lf->seed, idx, f->n, lf->p0, lf->p1, buf);
        else if (lf->kind == GS_LEAF_NORMAL_V3)
            gs__cpu_random_normal_v3(lf->seed, idx, f->n, lf->p0, lf->p1, buf);
        else
            gs__cpu_random_uniform(lf->seed, idx, f->n, lf->p0, lf->p1, buf);
        break;
    }
    case GS_LEAF_NORMAL_F32_V3: {
        /* float32 version 3: a walk state keeps the block and evaluates each Box-Muller pair
         * (elements 4k, 4k+2 or 4k+1, 4k+3) once for the elements of it the segment reads */
        const float mf = (float)lf->p0, sf = (float)lf->p1;
        for (int g = 0; g < f->nseg; g++) {
            const uint64_t o = (uint64_t)segs[g].off[li];
            double *dst = buf + segs[g].pos;
            gs_f32v3_walk_t t;
            gs_f32v3_walk_init(&t);
            for (int i = 0; i < segs[g].len; i++) {
                const float z = gs_f32v3_walk_z(&t, lf->seed, o + (uint64_t)((int64_t)i * is));
                dst[i] = (double)(mf + sf * z); /* gs_random_scale_f32 */
            }
        }
        break;
    }
    case GS_LEAF_NORMAL_F32_V4: {
        /* float32 version 4: a walk state keeps the group's two blocks (parities 0 and 1), each
         * evaluated once, and evaluates each Box-Muller pair once for the elements of it the
         * segment reads (a stride-2 read: one block per four elements) */
        const float mf = (float)lf->p0, sf = (float)lf->p1;
        for (int g = 0; g < f->nseg; g++) {
            const uint64_t o = (uint64_t)segs[g].off[li];
            double *dst = buf + segs[g].pos;
            gs_f32v4_walk_t t;
            gs_f32v4_walk_init(&t);
            for (int i = 0; i < segs[g].len; i++) {
                const float z = gs_f32v4_walk_z(&t, lf->seed, o + (uint64_t)((int64_t)i * is));
                dst[i] = (double)(mf + sf * z); /* gs_random_scale_f32 */
            }
        }
        break;
    }
    case GS_LEAF_UNIFORM_F32:
    case GS_LEAF_NORMAL_F32:
    case GS_LEAF_INTEGERS: {
        /* typed programs only (validated): float32 values as doubles, int64 as bit patterns */
        int64_t lo = 0, hi = 0;
        memcpy(&lo, &lf->p0, sizeof(lo));
        memcpy(&hi, &lf->p1, sizeof(hi));
        if (lf->kind == GS_LEAF_INTEGERS) {
            for (int g = 0; g < f->nseg; g++) {
                const uint64_t o = (uint64_t)segs[g].off[li];
                double *dst = buf + segs[g].pos;
                for (int i = 0; i < segs[g].len; i++)
                    dst[i] = gs_i_v(gs_random_integers(lf->seed, o + (uint64_t)((int64_t)i * is),
                                                       lo, hi));
            }
            break;
        }
        /* float32: one Philox block serves elements 4k..4k+3; reuse it while reads stay in it */
        for (int g = 0; g < f->nseg; g++) {
            const uint64_t o = (uint64_t)segs[g].off[li];
            double *dst = buf + segs[g].pos;
            uint64_t wk = o >> 2;
            gs_philox4_t w = gs_random_block_f32(lf->seed, wk);
            for (int i = 0; i < segs[g].len; i++) {
                const uint64_t e = o + (uint64_t)((int64_t)i * is);
                if (e >> 2 != wk) {
                    wk = e >> 2;
                    w = gs_random_block_f32(lf->seed, wk);
                }
                dst[i] = lf->kind == GS_LEAF_UNIFORM_F32
                             ? (double)gs_random_uniform_f32_w(&w, e, lf->p0, lf->p1)
                             : (double)gs_random_normal_f32_w(&w, e, lf->p0, lf->p1);
            }
        }
        break;
    }
    default: /* GS_LEAF_INDEX */
        for (int g = 0; g < f->nseg; g++) {
            int64_t o = segs[g].off[li];
            double *dst = buf + segs[g].pos;
            for (int i = 0; i < segs[g].len; i++) dst[i] = (double)(o + (int64_t)i * is);
        }
        break;
    }
    f->leafptr[li] = buf;
    return buf;
}

/* ---------------------------------------------------------------- program ---- */

static inline double gs__minimum(double a, double b)
{
    return (a < b || a != a) ? a : b;
}

static inline double gs__maximum(double a, double b)
{
    return (a > b || a != a) ? a : b;
}

#define GS__UN(expr)                                                \
    for (int i = 0; i < n; i++) { double x = a[i]; o[i] = (expr); } \
    break
#define GS__BIN(expr)                                                           \
    for (int i = 0; i < n; i++) { double x = a[i], y = b[i]; o[i] = (expr); }   \
    break

static void gs__apply(int op, double imm, const double *a, const double *restrict b, double *o,
                      int n)
{
    /* o may alias a (in place), never b; a and b may be the same read-only buffer */
    switch (op) {
    case GS_OP_CONST: for (int i = 0; i < n; i++) o[i] = imm; break;
    case GS_OP_NEG: GS__UN(-x);
    case GS_OP_ABS: GS__UN(fabs(x));
    case GS_OP_EXP: GS__UN(exp(x));
    case GS_OP_LOG: GS__UN(log(x));
    case GS_OP_SQRT: GS__UN(sqrt(x));
    case GS_OP_ADD: GS__BIN(x + y);
    case GS_OP_SUB: GS__BIN(x - y);
    case GS_OP_MUL: GS__BIN(x * y);
    case GS_OP_DIV: GS__BIN(x / y);
    case GS_OP_POW: GS__BIN(pow(x, y));
    case GS_OP_LT: GS__BIN(x < y ? 1.0 : 0.0);
    case GS_OP_LE: GS__BIN(x <= y ? 1.0 : 0.0);
    case GS_OP_GT: GS__BIN(x > y ? 1.0 : 0.0);
    case GS_OP_GE: GS__BIN(x >= y ? 1.0 : 0.0);
    case GS_OP_EQ: GS__BIN(x == y ? 1.0 : 0.0);
    case GS_OP_NE: GS__BIN(x != y ? 1.0 : 0.0);
    case GS_OP_MIN: GS__BIN(gs__minimum(x, y));
    case GS_OP_MAX: GS__BIN(gs__maximum(x, y));
    case GS_OP_ADD_IMM: GS__UN(x + imm);
    case GS_OP_SUB_IMM: GS__UN(x - imm);
    case GS_OP_MUL_IMM: GS__UN(x * imm);
    case GS_OP_DIV_IMM: GS__UN(x / imm);
    case GS_OP_POW_IMM: GS__UN(pow(x, imm));
    case GS_OP_RSUB_IMM: GS__UN(imm - x);
    case GS_OP_RDIV_IMM: GS__UN(imm / x);
    case GS_OP_RPOW_IMM: GS__UN(pow(imm, x));
    case GS_OP_LT_IMM: GS__UN(x < imm ? 1.0 : 0.0);
    case GS_OP_LE_IMM: GS__UN(x <= imm ? 1.0 : 0.0);
    case GS_OP_GT_IMM: GS__UN(x > imm ? 1.0 : 0.0);
    case GS_OP_GE_IMM: GS__UN(x >= imm ? 1.0 : 0.0);
    case GS_OP_EQ_IMM: GS__UN(x == imm ? 1.0 : 0.0);
    case GS_OP_NE_IMM: GS__UN(x != imm ? 1.0 : 0.0);
    case GS_OP_MIN_IMM: GS__UN(gs__minimum(x, imm));
    case GS_OP_MAX_IMM: GS__UN(gs__maximum(x, imm));
    case GS_OP_MOD: case GS_OP_FLOORDIV: case GS_OP_LAND: case GS_OP_LOR: case GS_OP_LXOR:
        GS__BIN(gs_elem_binary(op, x, y));
    default:
        gs_assert_always(op >= GS_OP_EXTENDED && op < GS_OP_COUNT);
        GS__UN(gs_elem_unary(op, x, imm));
    }
}

/* Arity of each opcode: 0 pushes, 1 replaces the top, 2 pops two and pushes one. */
static const int8_t gs__arity[GS_OP_COUNT] = {
#define GS__OPC_ARITY(name, val, str, arity) [val] = (arity),
    GS_OPCODE_MAP(GS__OPC_ARITY)
#undef GS__OPC_ARITY
};

/* One instruction of a typed program (graph/kernel.h, "Dtypes"; values as in elem_dtype.h). */
static void gs__apply_typed(const gs_kinstr_t *in, const double *a, const double *restrict b,
                            const double *restrict c, double *o, int n)
{
    const int dt = in->dtype, op = in->op;
    if (op == GS_OP_WHERE) {
        /* a is the condition (bool), b and c the values */
        for (int i = 0; i < n; i++) o[i] = gs_v_i(a[i]) != 0 ? b[i] : c[i];
        return;
    }
    if (op == GS_OP_CAST) {
        for (int i = 0; i < n; i++) o[i] = gs_cast_value(dt, in->arg, a[i]);
        return;
    }
    if (gs_dt_is_float(dt)) {
        gs__apply(op, op == GS_OP_CONST ? gs_round_float(dt, in->imm) : in->imm, a, b, o, n);
        if (gs_op_is_predicate(op)) {
            for (int i = 0; i < n; i++) o[i] = gs_i_v(o[i] != 0.0);
        } else if (dt != GS_DTYPE_FLOAT64) {
            for (int i = 0; i < n; i++) o[i] = gs_round_float(dt, o[i]);
        }
        return;
    }
    const int64_t imm = gs_f64_to_i64(in->imm);
    switch (gs__arity[op]) {
    case 0:
        for (int i = 0; i < n; i++) o[i] = gs_i_v(gs_wrap_int(dt, imm));
        break;
    case 2:
        for (int i = 0; i < n; i++) o[i] = gs_i_v(gs_int_binary(op, dt, gs_v_i(a[i]), gs_v_i(b[i])));
        break;
    default:
        if (op >= GS_OP_ADD_IMM && op <= GS_OP_MAX_IMM) {
            for (int i = 0; i < n; i++) o[i] = gs_i_v(gs_int_binary(op, dt, gs_v_i(a[i]), imm));
        } else if (op >= GS_OP_MOD_IMM && op <= GS_OP_LXOR_IMM) {
            for (int i = 0; i < n; i++) o[i] = gs_i_v(gs_int_binary(op, dt, gs_v_i(a[i]), imm));
        } else {
            for (int i = 0; i < n; i++) o[i] = gs_i_v(gs_int_unary(op, dt, gs_v_i(a[i])));
        }
        break;
    }
}

/* Run the program over the current tile. When @a dst is not NULL the result is written
 * there (and dst is returned); otherwise the result lives in a tile buffer. */
static const double *gs__run_prog(gs__fused_t *f, double *dst)
{
    const gs_kfused_t *k = f->k;
    const double *stk[GS_KERNEL_MAX_STACK];
    int sp = 0, n = f->n;

    for (int pc = 0; pc < k->nprog; pc++) {
        const gs_kinstr_t *in = &k->prog[pc];
        int last = pc == k->nprog - 1;
        int ar = gs__arity[in->op];
        if (in->op == GS_OP_LEAF) {
            const double *v = gs__leaf_tile(f, in->arg);
            if (last && dst != NULL) {
                memcpy(dst, v, (size_t)n * sizeof(double));
                v = dst;
            }
            stk[sp++] = v;
            continue;
        }
        int d = ar == 0 ? sp : sp - ar; /* depth of the result */
        double *o = (last && dst != NULL) ? dst : f->s->slot[d];
        if (f->typed)
            gs__apply_typed(in, ar >= 1 ? stk[d] : NULL, ar >= 2 ? stk[d + 1] : NULL,
                            ar == 3 ? stk[d + 2] : NULL, o, n);
        else
            gs__apply(in->op, in->imm, ar >= 1 ? stk[d] : NULL, ar == 2 ? stk[d + 1] : NULL, o, n);
        stk[d] = o;
        sp = d + 1;
    }
    gs_assert(sp == 1);
    return stk[0];
}

/* ---------------------------------------------------------------- driver ---- */

/* The scratch tiles (~70 KB) of the calling thread: made at its first fused task, kept until
 * the thread exits (a malloc and free of that size per tiny task was a tenth of a worker's time). */
static pthread_key_t gs__scratch_key;
static pthread_once_t gs__scratch_once = PTHREAD_ONCE_INIT;
static int gs__scratch_key_ok;

static void gs__scratch_drop(void *p)
{
    gs_free(p);
}

static void gs__scratch_key_make(void)
{
    gs__scratch_key_ok = pthread_key_create(&gs__scratch_key, gs__scratch_drop) == 0;
}

/* The thread's scratch; NULL when out of memory. *owned_p: 1 when the caller must free it (no
 * thread key could be made). */
static gs__scratch_t *gs__scratch_get(int *owned_p)
{
    gs__scratch_t *s;
    pthread_once(&gs__scratch_once, gs__scratch_key_make);
    *owned_p = 0;
    if (gs__scratch_key_ok && (s = pthread_getspecific(gs__scratch_key)) != NULL) return s;
    s = gs_malloc(sizeof(gs__scratch_t), "fused scratch");
    if (s == NULL) return NULL;
    if (!gs__scratch_key_ok || pthread_setspecific(gs__scratch_key, s) != 0) *owned_p = 1;
    return s;
}

/* Blocked walk: a 2-D STORE or whole-region reduction with a chunk leaf read transposed (unit
 * stride along the rows, a long one along the columns: x.T in x + x.T). Walking row-major, each
 * element of such a leaf would be read from its own cache line; instead tiles of GS__BROWS x
 * GS__BCOLS elements (GS__BROWS rows of GS__BCOLS columns, one segment each) are walked, so a
 * transposed leaf's GS__BCOLS cache lines give all GS__BROWS rows before they are left. The
 * values are those of the row-major walk; a sum's rounding follows the tile order. */
#define GS__BROWS 8
#define GS__BCOLS (GS__TILE / GS__BROWS)

static int gs__blocked_wanted(const gs__fused_t *f)
{
    const gs__space_t *sp = &f->sp;
    if (sp->nd != 2 || (f->mode != GS__MODE_STORE && f->mode != GS__MODE_ALL)) return 0;
    if (f->typed) return 0;   /* its stores are float64 rows; typed stores go element-wise */
    if (sp->shape[0] < 2 || sp->shape[1] < 2) return 0;
    for (int c = 0; c < f->k->nleaves; c++) {
        if (f->k->leaves[c].kind != GS_LEAF_CHUNK) continue;
        int64_t rs = sp->stride[c][0], cs = sp->stride[c][1];
        if ((rs == 1 || rs == -1) && (cs > 1 || cs < -1)) return 1;
    }
    return 0;
}

static void gs__walk_blocked(gs__fused_t *f)
{
    const gs_kfused_t *k = f->k;
    const gs__space_t *sp = &f->sp;
    const int64_t R = sp->shape[0], L = sp->shape[1];
    for (int64_t r0 = 0; r0 < R; r0 += GS__BROWS) {
        const int64_t nr = R - r0 < GS__BROWS ? R - r0 : GS__BROWS;
        for (int64_t c0 = 0; c0 < L; c0 += GS__BCOLS) {
            const int len = (int)(L - c0 < GS__BCOLS ? L - c0 : GS__BCOLS);
            int n = 0;
            for (int64_t i = 0; i < nr; i++) {
                gs__seg_t *g = &f->s->segs[i];
                g->pos = n;
                g->len = len;
                for (int c = 0; c < GS__NCOL; c++)
                    g->off[c] = sp->base[c] + (r0 + i) * sp->stride[c][0] + c0 * sp->stride[c][1];
                n += len;
            }
            f->n = n;
            f->nseg = (int)nr;
            memset(f->leafptr, 0, sizeof(f->leafptr));
            const double *v = gs__run_prog(f, NULL);
            if (f->mode == GS__MODE_STORE) {
                for (int64_t i = 0; i < nr; i++)
                    memcpy(k->out + (r0 + i) * L + c0, v + i * len, (size_t)len * sizeof(double));
            } else {
                gs__fused_terminal(f, v);
            }
        }
    }
}

gs_status_t gs__cpu_fused_run(const gs_kfused_t *k)
{
    gs__fused_t f;
    int s_owned = 0;
    gs_kfused_t ku;
    /* comparisons cast back to float64 ((x > 0).sum()): the float64 loops, same values */
    if (gs_kfused_dtype_other(k) != GS_DTYPE_FLOAT64 && gs_kfused_untype(k, &ku))
        return gs__cpu_fused_run(&ku);
    f.k = k;
    f.mode = GS__MODE_STORE;
    f.s = NULL;
    f.nseg = f.n = 0;
    for (int i = 0; i < GS_KERNEL_MAX_LEAVES; i++) f.leafptr[i] = NULL;
    f.count = 0;
    for (int i = 0; i < GS_KERNEL_MAX_RECORD; i++) f.acc[i] = 0.0;
    f.comp = NULL;
    f.ps.top = 0;
    f.redop = k->redop;
    f.width = k->terminal == GS_TERM_REDUCE ? gs_redop_width(k->redop) : 1;
    f.cur_rec = -1;
    f.typed = k->out_dtype != GS_DTYPE_FLOAT64;
    for (int i = 0; i < k->nleaves; i++) f.typed |= k->leaves[i].dtype != GS_DTYPE_FLOAT64;
    f.typed |= gs_kfused_dtype_other(k) != GS_DTYPE_FLOAT64;
    f.irec = k->terminal == GS_TERM_REDUCE && k->out_dtype == GS_DTYPE_INT64;

    int64_t size = gs_region_size(k->ndim, k->shape);
    if (k->terminal == GS_TERM_REDUCE) {
        int64_t nrec = gs_kfused_nrecords(k);
        for (int64_t r = 0; r < nrec; r++) {
            if (f.irec) gs_irec_init(k->redop, k->out + r);
            else gs_rec_init(k->redop, k->out + r * f.width);
        }
    }
    if (size == 0) return GS_OK;

    gs__space_build(&f);
    f.s = gs__scratch_get(&s_owned);
    if (f.s == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cpu fused: out of memory for scratch");
    if (f.mode == GS__MODE_OUTER && !f.irec && (f.redop == GS_RED_SUM || f.redop == GS_RED_MEAN)) {
        int64_t nrec = gs_kfused_nrecords(k);
        f.comp = gs_calloc((size_t)nrec, sizeof(double), "fused compensation");
        if (f.comp == NULL) {
            if (s_owned) gs_free(f.s);
            return gs_error_set(GS_ERR_NO_MEMORY, "cpu fused: out of memory for %lld records",
                                (long long)nrec);
        }
    }
    if (f.mode == GS__MODE_ALL) gs__fused_acc_reset(&f);

    if (gs__blocked_wanted(&f)) {
        gs__walk_blocked(&f);
        goto finish;
    }
    const gs__space_t *sp = &f.sp;
    const int nd1 = sp->nd - 1;
    const int64_t L = sp->shape[nd1];
    int ncol = GS__NCOL;
    int64_t p[GS_MAX_NDIM] = {0};
    int64_t rowoff[GS__NCOL];
    for (int c = 0; c < ncol; c++) rowoff[c] = sp->base[c];
    int64_t j0 = 0;        /* position along the innermost axis */
    int64_t done = 0;      /* elements evaluated */

    while (done < size) {
        /* gather up to GS__TILE elements as segments */
        int n = 0, nseg = 0;
        while (n < GS__TILE && done + n < size) {
            int64_t len = L - j0;
            if (len > GS__TILE - n) len = GS__TILE - n;
            gs__seg_t *g = &f.s->segs[nseg++];
            g->pos = n;
            g->len = (int32_t)len;
            for (int c = 0; c < ncol; c++) g->off[c] = rowoff[c] + j0 * sp->stride[c][nd1];
            n += (int)len;
            j0 += len;
            if (j0 == L) {
                j0 = 0;
                /* next row: odometer over the outer axes */
                for (int j = nd1 - 1; j >= 0; j--) {
                    if (++p[j] < sp->shape[j]) {
                        for (int c = 0; c < ncol; c++) rowoff[c] += sp->stride[c][j];
                        break;
                    }
                    for (int c = 0; c < ncol; c++) rowoff[c] -= sp->stride[c][j] * (sp->shape[j] - 1);
                    p[j] = 0;
                }
            }
        }
        f.n = n;
        f.nseg = nseg;
        memset(f.leafptr, 0, sizeof(f.leafptr));

        if (f.mode == GS__MODE_STORE && k->out_dtype != GS_DTYPE_FLOAT64) {
            const double *v = gs__run_prog(&f, NULL);
            for (int i = 0; i < n; i++) gs_store_elem(k->out_dtype, k->out, done + i, v[i]);
        } else if (f.mode == GS__MODE_STORE) {
            gs__run_prog(&f, k->out + done);
            /* typed programs store canonical NaNs, as gs_store_elem does on every backend */
            if (f.typed)
                for (int i = 0; i < n; i++) k->out[done + i] = gs_f64_canonical(k->out[done + i]);
        } else {
            gs__fused_terminal(&f, gs__run_prog(&f, NULL));
        }
        done += n;
    }

finish:
    switch (f.irec ? GS__MODE_STORE : f.mode) {   /* integer records are written in place */
    case GS__MODE_ALL: gs__fused_acc_flush(&f, 0); break;
    case GS__MODE_INNER:
        if (f.cur_rec >= 0) gs__fused_acc_flush(&f, f.cur_rec);
        break;
    case GS__MODE_OUTER:
        if (f.comp != NULL) {
            /* a non-finite sum stays as it is (its compensation is NaN after inf - inf) */
            int64_t nrec = gs_kfused_nrecords(k);
            for (int64_t r = 0; r < nrec; r++)
                if (isfinite(k->out[r * f.width])) k->out[r * f.width] += f.comp[r];
        }
        break;
    default: break;
    }
    gs_free(f.comp);
    if (s_owned) gs_free(f.s);
    return GS_OK;
}