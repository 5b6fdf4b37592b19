/* Plain-C reference of gs_array_stencil (a correlation with boundary modes), shared by the graph
 * and chunkops tests. Written from the definition in gsched/array.h, element by element, not
 * from the backends' code: every neighbour index is mapped through the boundary on its own. */
#ifndef GS_TESTS_STENCIL_REF_H
#define GS_TESTS_STENCIL_REF_H

#include <gsched/array.h>
#include <stdint.h>

/* Index g on an axis of length n under boundary b: the source index, or -1 (constant) / -2
 * (outside, boundary none). */
static inline int64_t ref_stencil_map(int64_t g, int64_t n, int b)
{
    if (g >= 0 && g < n) return g;
    switch (b) {
    case GS_BOUNDARY_PERIODIC: return ((g % n) + n) % n;
    case GS_BOUNDARY_REFLECT: return g < 0 ? -g - 1 : 2 * n - g - 1;
    case GS_BOUNDARY_CONSTANT: return -1;
    default: return -2;
    }
}

/* out[i] = sum_o w[o] x[i + o - r] (row-major o, summed in that order from 0.0). */
static inline void ref_stencil(const double *x, int nd, const int64_t *shape, const double *w,
                               const int *r, int b, double cval, double *out)
{
    int64_t size = 1, rs[GS_MAX_NDIM], ext[GS_MAX_NDIM], nw = 1;
    for (int j = nd - 1; j >= 0; j--) {
        rs[j] = size;
        size *= shape[j];
        ext[j] = 2 * r[j] + 1;
        nw *= ext[j];
    }
    for (int64_t i = 0; i < size; i++) {
        int64_t p[GS_MAX_NDIM], rem = i, o[GS_MAX_NDIM] = {0};
        double acc = 0.0;
        int outside = 0;
        for (int j = nd - 1; j >= 0; j--) {
            p[j] = rem % shape[j];
            rem /= shape[j];
        }
        for (int64_t k = 0; k < nw; k++) {
            int64_t off = 0;
            int cst = 0;
            for (int j = 0; j < nd; j++) {
                int64_t s = ref_stencil_map(p[j] + o[j] - r[j], shape[j], b);
                if (s == -2) outside = 1;
                if (s < 0) cst = 1;
                else off += s * rs[j];
            }
            acc += w[k] * (cst ? cval : x[off]);
            for (int j = nd - 1; j >= 0; j--) {
                if (++o[j] < ext[j]) break;
                o[j] = 0;
            }
        }
        out[i] = outside ? x[i] : acc;
    }
}

#endif
