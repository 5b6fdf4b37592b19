/* Planning of the CUDA STENCIL kernel (stencil.h): a validated gs_kstencil_t viewed as (Z, Y, X). */
#include "chunkops/cuda/stencil.h"
#include "chunkops/cuda/cuda_internal.h"
#include "common/error.h"

#include <string.h>

gs_status_t gs__cuda_splan_build(const gs_kstencil_t *k, gs__cuda_splan_t *p)
{
    const int nd = k->ndim, lead = 3 - nd;
    int64_t best = -1;
    if (nd < 1 || nd > 3)
        return gs_error_set(GS_ERR_UNSUPPORTED, "cuda stencil: ndim %d (the kernel takes 1 to 3)",
                            nd);
    memset(p, 0, offsetof(gs__cuda_splan_t, pieces));
    p->out = k->out;
    for (int j = 0; j < 3; j++) {
        int s = j - lead;   /* spec axis, < 0: a leading unit axis */
        p->shape[j] = s < 0 ? 1 : k->shape[s];
        p->r[j] = s < 0 ? 0 : k->radius[s];
        p->keep_lo[j] = s < 0 ? 0 : k->keep_lo[s];
        p->keep_hi[j] = s < 0 ? 0 : k->keep_hi[s];
    }
    p->cval = k->cval;
    p->home = -1;
    for (int32_t i = 0; i < k->npieces; i++) {
        const gs_kpiece_t *kp = &k->pieces[i];
        gs__cuda_spiece_t *sp = &p->pieces[p->npieces];
        int64_t vol = 1;
        sp->src = kp->src;
        sp->base = kp->src_base;
        for (int j = 0; j < 3; j++) {
            int s = j - lead;
            sp->stride[j] = s < 0 ? 0 : kp->src_stride[s];
            sp->lo[j] = s < 0 ? 0 : kp->dst_start[s];
            sp->hi[j] = s < 0 ? 1 : kp->dst_start[s] + kp->size[s];
            vol *= sp->hi[j] - sp->lo[j];
        }
        if (vol == 0) continue;
        if (vol > best) {
            best = vol;
            p->home = p->npieces;
        }
        p->npieces++;
    }
    p->nweights = k->nweights;
    memcpy(p->weights, k->weights, (size_t)k->nweights * sizeof(double));
    /* tiles of OUTS * block outputs: one row of them for 1-D data, else 16 x 64 */
    if (p->shape[1] == 1) {
        p->th = 1;
        p->tw = GS__CUDA_STENCIL_OUTS * GS__CUDA_BLOCK;
    } else {
        p->th = GS__CUDA_STENCIL_OUTS * GS__CUDA_BLOCK / 64;
        p->tw = 64;
    }
    int64_t gx = (p->shape[2] + p->tw - 1) / p->tw, gy = (p->shape[1] + p->th - 1) / p->th;
    int64_t gz = p->shape[0] < 65535 ? p->shape[0] : 65535;
    if (gx > INT32_MAX || gy > 65535)
        return gs_error_set(GS_ERR_UNSUPPORTED, "cuda stencil: a block of %lld x %lld x %lld is "
                            "beyond the launch grid", (long long)p->shape[0],
                            (long long)p->shape[1], (long long)p->shape[2]);
    p->grid[0] = (uint32_t)gx;
    p->grid[1] = (uint32_t)gy;
    p->grid[2] = (uint32_t)gz;
    p->smem = (uint32_t)((int64_t)(p->th + 2 * p->r[1]) * (p->tw + 2 * p->r[2]) * sizeof(double));
    return GS_OK;
}
