/**
 * Partial-record arithmetic shared by every backend (graph/kernel.h defines the records).
 *
 * Plain C that also compiles as CUDA C++: functions are GS_HD (host and device). A backend
 * that uses these helpers for initialisation, merging and finalisation produces the same
 * records and the same final values as the CPU backend, bit for bit, given the same inputs
 * in the same merge order.
 *
 * Record layouts (width = gs_redop_width(op)):
 *     SUM [sum]   PROD [product]   MIN, MAX [v]   MEAN [sum, count]   VAR, STD [count, mean, m2]
 *     ARGMIN, ARGMAX [v, index]
 * The empty record (no element seen) is
 *     SUM [0]  PROD [1]  MIN [+inf]  MAX [-inf]  MEAN [0, 0]  VAR/STD [0, 0, 0]
 *     ARGMIN [+inf, -1]  ARGMAX [-inf, -1]
 * An arg record with index < 0 is empty: it never wins a merge, and finalises to -1.
 */
#ifndef GS_CHUNKOPS_RECORDS_H
#define GS_CHUNKOPS_RECORDS_H

#include "chunkops/random.h" /* GS_HD */
#include "graph/kernel.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/** Write the empty record of @a op to r[0 .. width). */
GS_HD void gs_rec_init(int op, double *r)
{
    switch (op) {
    case GS_RED_SUM: r[0] = 0.0; break;
    case GS_RED_PROD: r[0] = 1.0; break;
    case GS_RED_MIN: r[0] = INFINITY; break;
    case GS_RED_MAX: r[0] = -INFINITY; break;
    case GS_RED_MEAN: r[0] = 0.0; r[1] = 0.0; break;
    case GS_RED_VAR:
    case GS_RED_STD: r[0] = 0.0; r[1] = 0.0; r[2] = 0.0; break;
    case GS_RED_ARGMIN: r[0] = INFINITY; r[1] = -1.0; break;
    case GS_RED_ARGMAX: r[0] = -INFINITY; r[1] = -1.0; break;
    default: break;
    }
}

/** min with NaN propagation (NumPy np.min): NaN if either is NaN. */
GS_HD double gs_rec_min(double acc, double x)
{
    return (x < acc || x != x) ? x : acc;
}

GS_HD double gs_rec_max(double acc, double x)
{
    return (x > acc || x != x) ? x : acc;
}

/** Does candidate (v, i) beat the current arg record (bv, bi)? NumPy rules: NaN wins (the
 *  NaN with the smallest index), ties keep the smallest index, an empty record (bi < 0)
 *  loses to anything, an empty candidate (i < 0) never wins. @a is_max picks argmax. */
GS_HD int gs_rec_arg_better(int is_max, double v, double i, double bv, double bi)
{
    if (i < 0.0) return 0;
    if (bi < 0.0) return 1;
    if (v != v) return (bv == bv) || i < bi;
    if (bv != bv) return 0;
    if (is_max ? (v > bv) : (v < bv)) return 1;
    return v == bv && i < bi;
}

/** Chan et al. merge of (na, ma, m2a) with (nb, mb, m2b) into r[0..3). */
GS_HD void gs_rec_var_merge(double *r, double nb, double mb, double m2b)
{
    double na = r[0];
    if (nb == 0.0) return;
    if (na == 0.0) {
        r[0] = nb;
        r[1] = mb;
        r[2] = m2b;
        return;
    }
    double n = na + nb;
    double delta = mb - r[1];
    r[1] = r[1] + delta * (nb / n);
    r[2] = r[2] + m2b + delta * delta * (na * nb / n);
    r[0] = n;
}

/** Merge record @a b into record @a acc (both of @a op's width). */
GS_HD void gs_rec_merge(int op, double *acc, const double *b)
{
    switch (op) {
    case GS_RED_SUM: acc[0] += b[0]; break;
    case GS_RED_PROD: acc[0] *= b[0]; break;
    case GS_RED_MIN: acc[0] = gs_rec_min(acc[0], b[0]); break;
    case GS_RED_MAX: acc[0] = gs_rec_max(acc[0], b[0]); break;
    case GS_RED_MEAN: acc[0] += b[0]; acc[1] += b[1]; break;
    case GS_RED_VAR:
    case GS_RED_STD: gs_rec_var_merge(acc, b[0], b[1], b[2]); break;
    case GS_RED_ARGMIN:
    case GS_RED_ARGMAX:
        if (gs_rec_arg_better(op == GS_RED_ARGMAX, b[0], b[1], acc[0], acc[1])) {
            acc[0] = b[0];
            acc[1] = b[1];
        }
        break;
    default: break;
    }
}

/** Final value of a record: sum, product, min, max, mean = sum/count (NaN for count 0),
 *  var = m2/(count-ddof) (NaN when count <= ddof), std = sqrt(var), arg = index (-1 empty). */
GS_HD double gs_rec_finalize(int op, const double *r, double ddof)
{
    switch (op) {
    case GS_RED_SUM:
    case GS_RED_PROD:
    case GS_RED_MIN:
    case GS_RED_MAX: return r[0];
    case GS_RED_MEAN: return r[1] > 0.0 ? r[0] / r[1] : NAN;
    case GS_RED_VAR:
    case GS_RED_STD: {
        double d = r[0] - ddof;
        double v = d > 0.0 ? r[2] / d : NAN;
        return op == GS_RED_STD ? sqrt(v) : v;
    }
    case GS_RED_ARGMIN:
    case GS_RED_ARGMAX: return r[1] < 0.0 ? -1.0 : r[1];
    default: return NAN;
    }
}

/* ---- integer records (graph/kernel.h "Integer records"): int64 bit patterns in the 8 bytes
 * of a record's double; SUM and PROD in unsigned arithmetic (wrap modulo 2^64, no UB). ---- */

/** Empty integer record of @a op (SUM, PROD, MIN or MAX), as its int64 value. */
GS_HD int64_t gs_irec_empty(int op)
{
    switch (op) {
    case GS_RED_PROD: return 1;
    case GS_RED_MIN: return INT64_MAX;
    case GS_RED_MAX: return INT64_MIN;
    default: return 0;
    }
}

/** @a acc merged with @a x under @a op (SUM, PROD, MIN, MAX), wrapping. */
GS_HD int64_t gs_irec_op(int op, int64_t acc, int64_t x)
{
    switch (op) {
    case GS_RED_SUM: return (int64_t)((uint64_t)acc + (uint64_t)x);
    case GS_RED_PROD: return (int64_t)((uint64_t)acc * (uint64_t)x);
    case GS_RED_MIN: return x < acc ? x : acc;
    case GS_RED_MAX: return x > acc ? x : acc;
    default: return acc;
    }
}

/** Write the empty integer record of @a op to r[0]. */
GS_HD void gs_irec_init(int op, double *r)
{
    int64_t v = gs_irec_empty(op);
    memcpy(r, &v, sizeof(v));
}

/** Merge integer record @a b into @a acc. */
GS_HD void gs_irec_merge(int op, double *acc, const double *b)
{
    int64_t a, x;
    memcpy(&a, acc, sizeof(a));
    memcpy(&x, b, sizeof(x));
    a = gs_irec_op(op, a, x);
    memcpy(acc, &a, sizeof(a));
}

#endif
