/* STENCIL on the CPU backend. The padded block is never built whole: each output row (all
 * axes but the last fixed) needs prod_{j < last}(2 r_j + 1) rows of the padded block, which
 * are assembled on demand (constant, then the parts of the pieces crossing that row) into a
 * small cache of 2 x that many row slots; a slot is reused least recently requested first,
 * never one requested for the output row being summed (its rows' pointers are held until the
 * row is done: 3-D blocks need rows of several planes, so the lowest row id is not always a
 * free one). Each output row is then accumulated in blocks of GS__ST_TB
 * elements held in L1: acc += weight * shifted padded row, weights in row-major order
 * (graph/kernel.h), and its "keep" margins copy the centre. */
#include "chunkops/cpu/cpu.h"
#include "common/alloc.h"
#include "common/error.h"

#include <string.h>

#define GS__ST_TB 512

typedef struct gs__st_rows {
    int nslots;
    int64_t px;                 /* padded row length */
    int64_t *id;                /* [nslots] padded row index held, -1 none */
    int64_t *used;              /* [nslots] output row that last requested it, -1 never */
    int64_t now;                /* the output row being summed */
    double *data;               /* [nslots][px] */
} gs__st_rows_t;

/* Padded row @a q (coordinates on the leading axes of the padded block, flat index @a id). */
static const double *gs__st_row(const gs_kstencil_t *k, gs__st_rows_t *rc, const int64_t *q,
                                int64_t id)
{
    const int nl = k->ndim - 1;
    int s = 0;
    for (int i = 0; i < rc->nslots; i++) {
        if (rc->id[i] == id) {
            rc->used[i] = rc->now;
            return rc->data + (size_t)i * (size_t)rc->px;
        }
        if (rc->used[i] < rc->used[s]) s = i;
    }
    /* nslots is twice the rows an output row requests: slot s is not one of them */
    rc->used[s] = rc->now;
    double *row = rc->data + (size_t)s * (size_t)rc->px;
    rc->id[s] = id;
    for (int64_t x = 0; x < rc->px; x++) row[x] = k->cval;
    for (int32_t i = 0; i < k->npieces; i++) {
        const gs_kpiece_t *pc = &k->pieces[i];
        int64_t off = pc->src_base;
        int in = pc->size[nl] > 0;
        for (int j = 0; j < nl && in; j++) {
            if (q[j] < pc->dst_start[j] || q[j] >= pc->dst_start[j] + pc->size[j]) in = 0;
            off += (q[j] - pc->dst_start[j]) * pc->src_stride[j];
        }
        if (!in) continue;
        const double *src = pc->src + off;
        double *dst = row + pc->dst_start[nl];
        const int64_t len = pc->size[nl], ss = pc->src_stride[nl];
        if (ss == 1) memcpy(dst, src, (size_t)len * sizeof(double));
        else
            for (int64_t t = 0; t < len; t++) dst[t] = src[t * ss];
    }
    return row;
}

/* map_overlap: the whole padded block (constant, then the pieces, as COPY does) handed to the
 * user kernel with the output block. */
static gs_status_t gs__cpu_stencil_user(const gs_kstencil_t *k)
{
    const int nd = k->ndim;
    gs_block_t in, out;
    gs_kcopy_t *c;
    int64_t np = 1;
    gs_status_t st;
    memset(&in, 0, sizeof(in));
    memset(&out, 0, sizeof(out));
    in.ndim = out.ndim = nd;
    for (int j = 0; j < nd; j++) {
        in.shape[j] = k->shape[j] + 2 * (int64_t)k->radius[j];
        in.start[j] = k->start[j] - k->radius[j];
        out.shape[j] = k->shape[j];
        out.start[j] = k->start[j];
        np *= in.shape[j];
    }
    out.data = k->out;
    c = gs_malloc(sizeof(*c), "map_overlap copy spec");
    in.data = gs_malloc((size_t)(np > 0 ? np : 1) * sizeof(double), "map_overlap padded block");
    if (c == NULL || in.data == NULL) {
        gs_free(c);
        gs_free(in.data);
        return gs_error_set(GS_ERR_NO_MEMORY, "cpu map_overlap: no memory for a padded block of "
                            "%lld elements", (long long)np);
    }
    for (int64_t i = 0; i < np; i++) in.data[i] = k->cval;
    memset(c, 0, sizeof(*c));
    c->ndim = nd;
    memcpy(c->shape, in.shape, sizeof(c->shape));
    c->npieces = k->npieces;
    memcpy(c->pieces, k->pieces, (size_t)k->npieces * sizeof(gs_kpiece_t));
    c->out = in.data;
    gs__cpu_copy_run(c);
    gs_free(c);
    st = gs__cpu_user_call(k->user_lib, k->user_sym, &in, 1, &out, k->user_arg);
    gs_free(in.data);
    return st;
}

gs_status_t gs__cpu_stencil_run(const gs_kstencil_t *k)
{
    if (k->user_cuda_src != NULL)
        return gs_error_set(GS_ERR_UNSUPPORTED, "cuda kernel %s: map_overlap with CUDA source "
                            "needs a CUDA worker", k->user_sym != NULL ? k->user_sym : "(unnamed)");
    if (k->user_lib != NULL) return gs__cpu_stencil_user(k);
    {
    const int nd = k->ndim, nl = nd - 1;
    const int64_t n = k->shape[nl], rx = k->radius[nl], ex = 2 * rx + 1;
    int64_t pshape[GS_MAX_NDIM], ext[GS_MAX_NDIM], nlead = 1;
    int64_t p[GS_MAX_NDIM] = {0};
    gs__st_rows_t rc;
    const double **wrow = NULL;
    int32_t *wdx = NULL;
    if (gs_region_size(nd, k->shape) == 0) return GS_OK;
    for (int j = 0; j < nd; j++) {
        pshape[j] = k->shape[j] + 2 * (int64_t)k->radius[j];
        ext[j] = 2 * (int64_t)k->radius[j] + 1;
        if (j < nl) nlead *= ext[j];
    }
    memset(&rc, 0, sizeof(rc));
    rc.nslots = (int)(2 * nlead);
    rc.px = pshape[nl];
    rc.id = gs_malloc((size_t)rc.nslots * sizeof(int64_t), "stencil row ids");
    rc.used = gs_malloc((size_t)rc.nslots * sizeof(int64_t), "stencil row uses");
    rc.data = gs_malloc((size_t)rc.nslots * (size_t)rc.px * sizeof(double), "stencil rows");
    wrow = gs_malloc((size_t)k->nweights * sizeof(*wrow), "stencil weight rows");
    wdx = gs_malloc((size_t)k->nweights * sizeof(*wdx), "stencil weight offsets");
    if (rc.id == NULL || rc.used == NULL || rc.data == NULL || wrow == NULL || wdx == NULL) {
        gs_free(rc.id);
        gs_free(rc.used);
        gs_free(rc.data);
        gs_free(wrow);
        gs_free(wdx);
        return gs_error_set(GS_ERR_NO_MEMORY, "cpu stencil: no memory for %d rows of %lld",
                            rc.nslots, (long long)rc.px);
    }
    for (int i = 0; i < rc.nslots; i++) rc.id[i] = rc.used[i] = -1;
    double *out = k->out;
    for (;;) {
        int keep_row = 0;
        for (int j = 0; j < nl; j++)
            if (p[j] < k->keep_lo[j] || p[j] >= k->shape[j] - k->keep_hi[j]) keep_row = 1;
        /* the padded rows of this output row, one per leading offset, in weight order */
        {
            int64_t o[GS_MAX_NDIM] = {0};
            for (int64_t r = 0; r < nlead; r++) {
                int64_t q[GS_MAX_NDIM] = {0}, id = 0;
                for (int j = 0; j < nl; j++) {
                    q[j] = p[j] + o[j];
                    id = id * pshape[j] + q[j];
                }
                const double *row = gs__st_row(k, &rc, q, id);
                for (int64_t dx = 0; dx < ex; dx++) {
                    wrow[r * ex + dx] = row;
                    wdx[r * ex + dx] = (int32_t)dx;
                }
                for (int j = nl - 1; j >= 0; j--) {
                    if (++o[j] < ext[j]) break;
                    o[j] = 0;
                }
            }
        }
        /* the centre row: leading offsets = radius */
        const double *centre = wrow[(nlead / 2) * ex] + rx;
        if (keep_row) {
            memcpy(out, centre, (size_t)n * sizeof(double));
        } else {
            /* out itself is the accumulator (a block of GS__ST_TB stays in L1); weights go
             * nine, then three, then one per pass, each pass adding them in order: the same
             * roundings as one by one from 0.0 */
            for (int64_t t0 = 0; t0 < n; t0 += GS__ST_TB) {
                const int64_t tn = n - t0 < GS__ST_TB ? n - t0 : GS__ST_TB;
                double *o = out + t0;
                int32_t w = 0;
                for (int64_t t = 0; t < tn; t++) o[t] = 0.0;
                for (; w + 9 <= k->nweights; w += 9) {
                    const double *wt = k->weights + w;
                    const double *s0 = wrow[w] + wdx[w] + t0, *s1 = wrow[w + 1] + wdx[w + 1] + t0,
                                 *s2 = wrow[w + 2] + wdx[w + 2] + t0,
                                 *s3 = wrow[w + 3] + wdx[w + 3] + t0,
                                 *s4 = wrow[w + 4] + wdx[w + 4] + t0,
                                 *s5 = wrow[w + 5] + wdx[w + 5] + t0,
                                 *s6 = wrow[w + 6] + wdx[w + 6] + t0,
                                 *s7 = wrow[w + 7] + wdx[w + 7] + t0,
                                 *s8 = wrow[w + 8] + wdx[w + 8] + t0;
                    const double w0 = wt[0], w1 = wt[1], w2 = wt[2], w3 = wt[3], w4 = wt[4],
                                 w5 = wt[5], w6 = wt[6], w7 = wt[7], w8 = wt[8];
                    for (int64_t t = 0; t < tn; t++) {
                        double a = o[t];
                        a += w0 * s0[t];
                        a += w1 * s1[t];
                        a += w2 * s2[t];
                        a += w3 * s3[t];
                        a += w4 * s4[t];
                        a += w5 * s5[t];
                        a += w6 * s6[t];
                        a += w7 * s7[t];
                        a += w8 * s8[t];
                        o[t] = a;
                    }
                }
                for (; w + 3 <= k->nweights; w += 3) {
                    const double w0 = k->weights[w], w1 = k->weights[w + 1], w2 = k->weights[w + 2];
                    const double *s0 = wrow[w] + wdx[w] + t0, *s1 = wrow[w + 1] + wdx[w + 1] + t0,
                                 *s2 = wrow[w + 2] + wdx[w + 2] + t0;
                    for (int64_t t = 0; t < tn; t++)
                        o[t] = ((o[t] + w0 * s0[t]) + w1 * s1[t]) + w2 * s2[t];
                }
                for (; w < k->nweights; w++) {
                    const double wv = k->weights[w], *s = wrow[w] + wdx[w] + t0;
                    for (int64_t t = 0; t < tn; t++) o[t] += wv * s[t];
                }
            }
            for (int64_t t = 0; t < k->keep_lo[nl] && t < n; t++) out[t] = centre[t];
            for (int64_t t = n - k->keep_hi[nl]; t < n; t++)
                if (t >= 0) out[t] = centre[t];
        }
        out += n;
        rc.now++;
        int j = nl - 1;
        while (j >= 0 && ++p[j] == k->shape[j]) p[j--] = 0;
        if (j < 0) break;
    }
    gs_free(rc.id);
    gs_free(rc.used);
    gs_free(rc.data);
    gs_free(wrow);
    gs_free(wdx);
    return GS_OK;
    }
}
