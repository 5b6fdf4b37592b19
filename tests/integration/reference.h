/* Whole-array references for the integration tests, computed here directly from the random
 * definition (chunkops/random.h) with plain loops: no graph, no chunking, no daemon code. */
#ifndef GS_TESTS_REFERENCE_H
#define GS_TESTS_REFERENCE_H

#include "chunkops/random.h"
#include "common/alloc.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define REF_MAXD 4

typedef struct ref {
    int ndim;
    int64_t shape[REF_MAXD];
    int64_t size;
    double *v;   /* row-major, gs_malloc'ed */
} ref_t;

static inline ref_t ref_alloc(int ndim, const int64_t *shape)
{
    ref_t r;
    memset(&r, 0, sizeof(r));
    r.ndim = ndim;
    r.size = 1;
    for (int a = 0; a < ndim; a++) {
        r.shape[a] = shape[a];
        r.size *= shape[a];
    }
    r.v = gs_malloc((size_t)(r.size > 0 ? r.size : 1) * sizeof(double), "ref");
    return r;
}

static inline void ref_free(ref_t *r)
{
    gs_free(r->v);
    r->v = NULL;
}

/** normal(mean, std) of @a shape: element at flat index i is gs_random_normal_v3(seed, i, ...), the
 *  default float64 definition of gs_array_random_normal(). */
static inline ref_t ref_normal(uint64_t seed, double mean, double std, int ndim,
                               const int64_t *shape)
{
    ref_t r = ref_alloc(ndim, shape);
    for (int64_t i = 0; i < r.size; i++) r.v[i] = gs_random_normal_v3(seed, (uint64_t)i, mean, std);
    return r;
}

/** Python's slice.indices(len) followed by range(): the selected positions, in order, into
 *  @a idx (capacity len). Returns how many. */
static inline int64_t ref_slice_indices(int64_t len, int has_start, int64_t start, int has_stop,
                                        int64_t stop, int64_t step, int64_t *idx)
{
    int64_t lo, hi, n = 0;
    if (step > 0) {
        lo = has_start ? start : 0;
        hi = has_stop ? stop : len;
        if (lo < 0) lo += len;
        if (lo < 0) lo = 0;
        if (lo > len) lo = len;
        if (hi < 0) hi += len;
        if (hi < 0) hi = 0;
        if (hi > len) hi = len;
        for (int64_t i = lo; i < hi; i += step) idx[n++] = i;
    } else {
        lo = has_start ? start : len - 1;
        hi = has_stop ? stop : -1;   /* exclusive; -1 means "before 0" when not given */
        if (has_start) {
            if (lo < 0) lo += len;
            if (lo < 0) lo = -1;
            if (lo >= len) lo = len - 1;
        }
        if (has_stop) {
            if (hi < 0) hi += len;
            if (hi < 0) hi = -1;
            if (hi >= len) hi = len - 1;
        }
        for (int64_t i = lo; i > hi; i += step) idx[n++] = i;
    }
    return n;
}

/** 2-D a[rows, cols] with explicit index lists. */
static inline ref_t ref_take2(const ref_t *a, const int64_t *rows, int64_t nr, const int64_t *cols,
                              int64_t nc)
{
    int64_t shape[2] = {nr, nc};
    ref_t r = ref_alloc(2, shape);
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < nc; j++) r.v[i * nc + j] = a->v[rows[i] * a->shape[1] + cols[j]];
    return r;
}

/** Sum in long double (the reference accumulates more precisely than any chunked order). */
static inline double ref_sum(const ref_t *a)
{
    long double s = 0;
    for (int64_t i = 0; i < a->size; i++) s += a->v[i];
    return (double)s;
}

static inline double ref_rel(double got, double want)
{
    double d = fabs(got - want), m = fabs(want);
    return m > 0 ? d / m : d;
}

#endif
