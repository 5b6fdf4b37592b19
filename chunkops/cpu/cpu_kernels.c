/* CPU combine and copy kernels (graph/kernel.h). Specs are validated by the caller. */
#include "chunkops/cpu/cpu.h"
#include "chunkops/elem_dtype.h"
#include "chunkops/records.h"

#include <string.h>

void gs__cpu_combine_run(const gs_kcombine_t *k)
{
    const int w = gs_redop_width(k->redop);
    double acc[GS_KERNEL_MAX_RECORD];

    if (k->rec_dtype == GS_DTYPE_INT64) {
        /* integer records (graph/kernel.h): int64 bit patterns, wrapping */
        for (int64_t r = 0; r < k->nrec; r++) {
            double acc1 = k->inputs[0][r];
            for (int32_t i = 1; i < k->ninputs; i++)
                gs_irec_merge(k->redop, &acc1, k->inputs[i] + r);
            if (k->finalize)
                gs_store_elem(k->out_dtype, k->out, r,
                              gs_cast_value(GS_DTYPE_INT64, k->out_dtype, acc1));
            else
                k->out[r] = acc1;
        }
        return;
    }
    for (int64_t r = 0; r < k->nrec; r++) {
        const double *first = k->inputs[0] + r * w;
        for (int c = 0; c < w; c++) acc[c] = first[c];
        for (int32_t i = 1; i < k->ninputs; i++) gs_rec_merge(k->redop, acc, k->inputs[i] + r * w);
        /* out may alias inputs[0]: record r is read completely before it is written, and a
         * finalised out[r] never lies beyond record r of the input */
        if (k->finalize && k->out_dtype != GS_DTYPE_FLOAT64) {
            double v = gs_rec_finalize(k->redop, acc, k->ddof);
            gs_store_elem(k->out_dtype, k->out, r, gs_cast_value(GS_DTYPE_FLOAT64, k->out_dtype, v));
        } else if (k->finalize) {
            k->out[r] = gs_rec_finalize(k->redop, acc, k->ddof);
        } else {
            for (int c = 0; c < w; c++) k->out[r * w + c] = acc[c];
        }
    }
}

void gs__cpu_copy_run(const gs_kcopy_t *k)
{
    const int nd = k->ndim;
    int64_t dstride[GS_MAX_NDIM];
    int64_t s = 1;
    for (int j = nd - 1; j >= 0; j--) {
        dstride[j] = s;
        s *= k->shape[j];
    }
    const size_t es = k->elem_size > 0 ? (size_t)k->elem_size : sizeof(double);
    char *outb = (char *)k->out;
    if (nd == 0) {
        for (int32_t i = 0; i < k->npieces; i++)
            memcpy(outb, (const char *)k->pieces[i].src + (size_t)k->pieces[i].src_base * es, es);
        return;
    }
    for (int32_t i = 0; i < k->npieces; i++) {
        const gs_kpiece_t *pc = &k->pieces[i];
        if (gs_region_size(nd, pc->size) == 0) continue;
        const int nd1 = nd - 1;
        const int64_t len = pc->size[nd1], ss = pc->src_stride[nd1];
        int64_t q[GS_MAX_NDIM] = {0};
        int64_t soff = pc->src_base, doff = 0;
        for (int j = 0; j < nd; j++) doff += pc->dst_start[j] * dstride[j];
        for (;;) {
            if (es != sizeof(double)) {
                /* other dtypes: elements of es bytes */
                const char *src = (const char *)pc->src + soff * (int64_t)es;
                char *dst = outb + doff * (int64_t)es;
                if (ss == 1) memcpy(dst, src, (size_t)len * es);
                else
                    for (int64_t t = 0; t < len; t++)
                        memcpy(dst + t * (int64_t)es, src + t * ss * (int64_t)es, es);
            } else {
                const double *src = pc->src + soff;
                double *dst = k->out + doff;
                if (ss == 1) memcpy(dst, src, (size_t)len * sizeof(double));
                else
                    for (int64_t t = 0; t < len; t++) dst[t] = src[t * ss];
            }
            int j = nd1 - 1;
            for (; j >= 0; j--) {
                if (++q[j] < pc->size[j]) {
                    soff += pc->src_stride[j];
                    doff += dstride[j];
                    break;
                }
                soff -= pc->src_stride[j] * (pc->size[j] - 1);
                doff -= dstride[j] * (pc->size[j] - 1);
                q[j] = 0;
            }
            if (j < 0) break;
        }
    }
}
