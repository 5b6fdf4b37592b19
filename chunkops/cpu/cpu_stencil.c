/* STENCIL on the CPU backend: the padded block is assembled in scratch memory (constant, then
 * the pieces, as COPY does), then every output row accumulates weight * shifted padded row,
 * weights in row-major order (graph/kernel.h), and the "keep" margins copy the centre. */
#include "chunkops/cpu/cpu.h"
#include "common/alloc.h"
#include "common/error.h"

#include <string.h>

gs_status_t gs__cpu_stencil_run(const gs_kstencil_t *k)
{
    const int nd = k->ndim, nl = nd - 1;
    int64_t pshape[GS_MAX_NDIM], pst[GS_MAX_NDIM], ext[GS_MAX_NDIM];
    int64_t np = 1, n = k->shape[nl], woff[GS_KERNEL_MAX_WEIGHTS];
    int64_t p[GS_MAX_NDIM] = {0}, o[GS_MAX_NDIM] = {0};
    gs_kcopy_t *c;
    double *P;
    if (gs_region_size(nd, k->shape) == 0) return GS_OK;
    for (int j = nd - 1; j >= 0; j--) {
        pshape[j] = k->shape[j] + 2 * (int64_t)k->radius[j];
        ext[j] = 2 * (int64_t)k->radius[j] + 1;
        pst[j] = np;
        np *= pshape[j];
    }
    c = gs_malloc(sizeof(*c), "stencil copy spec");
    P = gs_malloc((size_t)np * sizeof(double), "stencil padded block");
    if (c == NULL || P == NULL) {
        gs_free(c);
        gs_free(P);
        return gs_error_set(GS_ERR_NO_MEMORY, "cpu stencil: no memory for a padded block of "
                            "%lld elements", (long long)np);
    }
    for (int64_t i = 0; i < np; i++) P[i] = k->cval;
    memset(c, 0, sizeof(*c));
    c->ndim = nd;
    memcpy(c->shape, pshape, sizeof(pshape));
    c->npieces = k->npieces;
    memcpy(c->pieces, k->pieces, (size_t)k->npieces * sizeof(gs_kpiece_t));
    c->out = P;
    gs__cpu_copy_run(c);
    gs_free(c);
    /* offset of each weight in the padded block */
    for (int32_t w = 0; w < k->nweights; w++) {
        int64_t off = 0;
        for (int j = 0; j < nd; j++) off += o[j] * pst[j];
        woff[w] = off;
        for (int j = nd - 1; j >= 0; j--) {
            if (++o[j] < ext[j]) break;
            o[j] = 0;
        }
    }
    int64_t centre = 0;
    for (int j = 0; j < nd; j++) centre += k->radius[j] * pst[j];
    double *out = k->out;
    for (;;) {
        int64_t base = 0;
        int keep_row = 0;
        for (int j = 0; j < nl; j++) {
            base += p[j] * pst[j];
            if (p[j] < k->keep_lo[j] || p[j] >= k->shape[j] - k->keep_hi[j]) keep_row = 1;
        }
        const double *src = P + base;
        if (keep_row) {
            memcpy(out, src + centre, (size_t)n * sizeof(double));
        } else {
            for (int64_t t = 0; t < n; t++) out[t] = 0.0;
            for (int32_t w = 0; w < k->nweights; w++) {
                const double wv = k->weights[w], *s = src + woff[w];
                for (int64_t t = 0; t < n; t++) out[t] += wv * s[t];
            }
            for (int64_t t = 0; t < k->keep_lo[nl] && t < n; t++) out[t] = src[centre + t];
            for (int64_t t = n - k->keep_hi[nl]; t < n; t++)
                if (t >= 0) out[t] = src[centre + t];
        }
        out += n;
        int j = nl - 1;
        while (j >= 0 && ++p[j] == k->shape[j]) p[j--] = 0;
        if (j < 0) break;
    }
    gs_free(P);
    return GS_OK;
}
