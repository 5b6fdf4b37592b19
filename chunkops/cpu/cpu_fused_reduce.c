/* CPU fused kernel, the REDUCE terminal (graph/kernel.h): fold each tile's values into the
 * partial records: sums through 8-way blocked tile sums merged pairwise, var through per-tile
 * two-pass (count, mean, m2) merged with Chan et al.'s formula, min/max/arg by scanning with
 * the NumPy NaN and tie rules (chunkops/records.h), integer records as wrapping int64; the
 * running accumulator of the ALL and INNER modes and the elementwise records of OUTER. The
 * walk that calls it is cpu_fused.c. */
#include "chunkops/cpu/cpu_fused_int.h"
#include "chunkops/elem_dtype.h"
#include "chunkops/records.h"

#include <math.h>
#include <string.h>


/* ---------------------------------------------------------------- reductions ---- */

static void gs__ps_push(gs__pairsum_t *ps, double x)
{
    int t = ps->top;
    ps->v[t] = x;
    ps->lvl[t] = 0;
    t++;
    while (t >= 2 && ps->lvl[t - 1] == ps->lvl[t - 2]) {
        ps->v[t - 2] += ps->v[t - 1];
        ps->lvl[t - 2]++;
        t--;
    }
    ps->top = t;
}

static double gs__ps_total(const gs__pairsum_t *ps)
{
    double s = 0.0;
    for (int t = ps->top - 1; t >= 0; t--) s += ps->v[t];
    return s;
}

/* Blocked sum of x[0..n): 8 independent partial sums combined pairwise. */
static double gs__block_sum(const double *x, int n)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 += x[i];
        s1 += x[i + 1];
        s2 += x[i + 2];
        s3 += x[i + 3];
        s4 += x[i + 4];
        s5 += x[i + 5];
        s6 += x[i + 6];
        s7 += x[i + 7];
    }
    double s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
    for (; i < n; i++) s += x[i];
    return s;
}

/* (count, mean, m2) of x[0..n) by two passes, merged into acc. */
static void gs__var_fold(double *acc, const double *x, int n)
{
    if (n == 0) return;
    double mean = gs__block_sum(x, n) / n;
    double m0 = 0, m1 = 0, m2 = 0, m3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        double d0 = x[i] - mean, d1 = x[i + 1] - mean, d2 = x[i + 2] - mean, d3 = x[i + 3] - mean;
        m0 += d0 * d0;
        m1 += d1 * d1;
        m2 += d2 * d2;
        m3 += d3 * d3;
    }
    double m = (m0 + m1) + (m2 + m3);
    for (; i < n; i++) m += (x[i] - mean) * (x[i] - mean);
    gs_rec_var_merge(acc, (double)n, mean, m);
}

/* min/max with NaN propagation; four independent accumulators break the dependency chain
 * (the result does not depend on the order, except for the sign of a zero minimum) */
static double gs__scan_min(double acc, const double *x, int n)
{
    double a0 = acc, a1 = acc, a2 = acc, a3 = acc;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 = gs_rec_min(a0, x[i]);
        a1 = gs_rec_min(a1, x[i + 1]);
        a2 = gs_rec_min(a2, x[i + 2]);
        a3 = gs_rec_min(a3, x[i + 3]);
    }
    for (; i < n; i++) a0 = gs_rec_min(a0, x[i]);
    return gs_rec_min(gs_rec_min(a0, a1), gs_rec_min(a2, a3));
}

static double gs__scan_max(double acc, const double *x, int n)
{
    double a0 = acc, a1 = acc, a2 = acc, a3 = acc;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 = gs_rec_max(a0, x[i]);
        a1 = gs_rec_max(a1, x[i + 1]);
        a2 = gs_rec_max(a2, x[i + 2]);
        a3 = gs_rec_max(a3, x[i + 3]);
    }
    for (; i < n; i++) a0 = gs_rec_max(a0, x[i]);
    return gs_rec_max(gs_rec_max(a0, a1), gs_rec_max(a2, a3));
}

static void gs__scan_arg(int is_max, double *acc, const double *x, int n, int64_t idx0,
                         int64_t istride)
{
    for (int i = 0; i < n; i++) {
        double id = (double)(idx0 + (int64_t)i * istride);
        if (gs_rec_arg_better(is_max, x[i], id, acc[0], acc[1])) {
            acc[0] = x[i];
            acc[1] = id;
        }
    }
}

/* Reset the running accumulator (ALL and INNER modes). */
void gs__fused_acc_reset(gs__fused_t *f)
{
    f->ps.top = 0;
    f->count = 0;
    gs_rec_init(f->redop, f->acc);
}

/* Fold values x[0..n) into the running accumulator. */
static void gs__acc_fold(gs__fused_t *f, const double *x, int n, int64_t idx0, int64_t istride)
{
    switch (f->redop) {
    case GS_RED_SUM:
    case GS_RED_MEAN:
        gs__ps_push(&f->ps, gs__block_sum(x, n));
        f->count += n;
        break;
    case GS_RED_PROD:
        for (int i = 0; i < n; i++) f->acc[0] *= x[i];
        break;
    case GS_RED_MIN: f->acc[0] = gs__scan_min(f->acc[0], x, n); break;
    case GS_RED_MAX: f->acc[0] = gs__scan_max(f->acc[0], x, n); break;
    case GS_RED_VAR:
    case GS_RED_STD: gs__var_fold(f->acc, x, n); break;
    case GS_RED_ARGMIN:
    case GS_RED_ARGMAX: gs__scan_arg(f->redop == GS_RED_ARGMAX, f->acc, x, n, idx0, istride); break;
    default: break;
    }
}

/* Write the running accumulator as record @a r. */
void gs__fused_acc_flush(gs__fused_t *f, int64_t r)
{
    double *rec = f->k->out + r * f->width;
    switch (f->redop) {
    case GS_RED_SUM: rec[0] = gs__ps_total(&f->ps); break;
    case GS_RED_MEAN:
        rec[0] = gs__ps_total(&f->ps);
        rec[1] = (double)f->count;
        break;
    default:
        for (int w = 0; w < f->width; w++) rec[w] = f->acc[w];
        break;
    }
}

/* OUTER mode: element i of segment g updates record r0 + i * rs. */
static void gs__outer_fold(gs__fused_t *f, const double *x, const gs__seg_t *g)
{
    const int nd1 = f->sp.nd - 1;
    const int64_t rs = f->sp.stride[GS__COL_REC][nd1];
    const int64_t r0 = g->off[GS__COL_REC];
    double *out = f->k->out;
    const int n = g->len;
    x += g->pos;

    switch (f->redop) {
    case GS_RED_SUM:
    case GS_RED_MEAN: {
        const int w = f->width;
        if (w == 1 && rs == 1) {
            /* contiguous records: the same update, in a loop the compiler vectorises */
            double *o = out + r0, *cp = f->comp + r0;
            for (int i = 0; i < n; i++) {
                double s = o[i], v = x[i], t = s + v;
                double big = (s - t) + v, small = (v - t) + s;
                cp[i] += fabs(s) >= fabs(v) ? big : small;
                o[i] = t;
            }
            break;
        }
        for (int i = 0; i < n; i++) {
            int64_t r = r0 + (int64_t)i * rs;
            double s = out[r * w], v = x[i], t = s + v;
            /* Neumaier compensated summation */
            f->comp[r] += fabs(s) >= fabs(v) ? (s - t) + v : (v - t) + s;
            out[r * w] = t;
            if (w == 2) out[r * w + 1] += 1.0;
        }
        break;
    }
    case GS_RED_PROD:
        for (int i = 0; i < n; i++) out[r0 + (int64_t)i * rs] *= x[i];
        break;
    case GS_RED_MIN:
        for (int i = 0; i < n; i++) {
            int64_t r = r0 + (int64_t)i * rs;
            out[r] = gs_rec_min(out[r], x[i]);
        }
        break;
    case GS_RED_MAX:
        for (int i = 0; i < n; i++) {
            int64_t r = r0 + (int64_t)i * rs;
            out[r] = gs_rec_max(out[r], x[i]);
        }
        break;
    case GS_RED_VAR:
    case GS_RED_STD:
        /* Welford's update, one element per record */
        for (int i = 0; i < n; i++) {
            double *rec = out + (r0 + (int64_t)i * rs) * 3;
            double c = rec[0] + 1.0, d = x[i] - rec[1];
            rec[1] += d / c;
            rec[2] += d * (x[i] - rec[1]);
            rec[0] = c;
        }
        break;
    case GS_RED_ARGMIN:
    case GS_RED_ARGMAX: {
        int is_max = f->redop == GS_RED_ARGMAX;
        const int64_t as = f->sp.stride[GS__COL_AIDX][nd1];
        for (int i = 0; i < n; i++) {
            double *rec = out + (r0 + (int64_t)i * rs) * 2;
            double id = (double)(g->off[GS__COL_AIDX] + (int64_t)i * as);
            if (gs_rec_arg_better(is_max, x[i], id, rec[0], rec[1])) {
                rec[0] = x[i];
                rec[1] = id;
            }
        }
        break;
    }
    default: break;
    }
}

/* Integer records (every mode): element i of segment g updates record off[REC] + i * rs
 * (rs is 0 in ALL and INNER modes: one running value per segment). Values and records are
 * int64 bit patterns; SUM and PROD wrap in unsigned arithmetic. */
static void gs__iterminal(gs__fused_t *f, const double *v)
{
    const int nd1 = f->sp.nd - 1;
    const int64_t rs = f->sp.stride[GS__COL_REC][nd1];
    const int op = f->redop;
    double *out = f->k->out;
    for (int g = 0; g < f->nseg; g++) {
        const gs__seg_t *sg = &f->s->segs[g];
        const double *x = v + sg->pos;
        const int n = sg->len;
        const int64_t r0 = sg->off[GS__COL_REC];
        if (rs != 0) {
            for (int i = 0; i < n; i++) {
                double *rec = out + r0 + (int64_t)i * rs;
                *rec = gs_i_v(gs_irec_op(op, gs_v_i(*rec), gs_v_i(x[i])));
            }
            continue;
        }
        int64_t acc = gs_v_i(out[r0]);
        switch (op) {
        case GS_RED_SUM: {
            uint64_t s = (uint64_t)acc;
            for (int i = 0; i < n; i++) s += (uint64_t)gs_v_i(x[i]);
            acc = (int64_t)s;
            break;
        }
        case GS_RED_PROD: {
            uint64_t p = (uint64_t)acc;
            for (int i = 0; i < n; i++) p *= (uint64_t)gs_v_i(x[i]);
            acc = (int64_t)p;
            break;
        }
        default:
            for (int i = 0; i < n; i++) acc = gs_irec_op(op, acc, gs_v_i(x[i]));
            break;
        }
        out[r0] = gs_i_v(acc);
    }
}

void gs__fused_terminal(gs__fused_t *f, const double *v)
{
    const int nd1 = f->sp.nd - 1;
    const gs__seg_t *segs = f->s->segs;
    if (f->irec) {
        gs__iterminal(f, v);
        return;
    }
    switch (f->mode) {
    case GS__MODE_ALL:
        if (f->redop == GS_RED_ARGMIN || f->redop == GS_RED_ARGMAX) {
            for (int g = 0; g < f->nseg; g++)
                gs__acc_fold(f, v + segs[g].pos, segs[g].len, segs[g].off[GS__COL_AIDX],
                             f->sp.stride[GS__COL_AIDX][nd1]);
        } else {
            gs__acc_fold(f, v, f->n, 0, 0);
        }
        break;
    case GS__MODE_INNER:
        for (int g = 0; g < f->nseg; g++) {
            int64_t r = segs[g].off[GS__COL_REC];
            if (r != f->cur_rec) {
                if (f->cur_rec >= 0) gs__fused_acc_flush(f, f->cur_rec);
                gs__fused_acc_reset(f);
                f->cur_rec = r;
            }
            gs__acc_fold(f, v + segs[g].pos, segs[g].len, segs[g].off[GS__COL_AIDX],
                         f->sp.stride[GS__COL_AIDX][nd1]);
        }
        break;
    case GS__MODE_OUTER:
        for (int g = 0; g < f->nseg; g++) gs__outer_fold(f, v, &segs[g]);
        break;
    default: break;
    }
}
