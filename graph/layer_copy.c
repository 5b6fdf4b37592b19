/* COPY layers (rechunk, concatenate, stack): every block lists its inputs (with their expected
 * lengths) and the rectangular pieces it assembles from them. Checks, instantiation to
 * gs_kcopy_t and the wire body (copy_int.h). */
#include "graph/copy_int.h"
#include "common/vec.h"

#include <string.h>

void gs__copy_free(gs_layer_t *l)
{
    gs_free(l->u.cp.ioff);
    gs_free(l->u.cp.in_len);
    gs_free(l->u.cp.poff);
    gs_free(l->u.cp.pieces);
    l->u.cp.ioff = l->u.cp.in_len = l->u.cp.poff = NULL;
    l->u.cp.pieces = NULL;
}

int gs__copy_ninputs(const gs_layer_t *l, uint64_t block)
{
    return (int)(l->u.cp.ioff[block + 1] - l->u.cp.ioff[block]);
}

const int64_t *gs__copy_in_lens(const gs_layer_t *l, uint64_t block)
{
    return l->u.cp.in_len + l->u.cp.ioff[block];
}

/* Lowest and highest source offset a piece reads (box non-empty); 0 on overflow. */
static int gs__piece_range(int32_t nd, const gs__cpiece_t *p, __int128 *lo_p, __int128 *hi_p)
{
    __int128 lo = p->base, hi = p->base;
    for (int32_t j = 0; j < nd; j++) {
        __int128 d = (__int128)(p->size[j] - 1) * p->stride[j];
        if (d < 0) lo += d;
        else hi += d;
    }
    *lo_p = lo;
    *hi_p = hi;
    return 1;
}

int gs__copy_check(const gs_layer_t *l, const char **why_p)
{
    return gs__copy_check_ex(l, NULL, 1, why_p);
}

int gs__copy_check_ex(const gs_layer_t *l, const int32_t *pad, int cover, const char **why_p)
{
    const int32_t nd = l->grid.ndim;
    const uint64_t nb = gs_grid_nblocks(&l->grid);
    const int64_t *ioff = l->u.cp.ioff, *poff = l->u.cp.poff;
    if (ioff == NULL || poff == NULL || l->u.cp.in_len == NULL || l->u.cp.pieces == NULL) {
        *why_p = "copy layer without block tables";
        return 0;
    }
    if (ioff[0] != 0 || poff[0] != 0) {
        *why_p = "block tables do not start at 0";
        return 0;
    }
    for (uint64_t b = 0; b < nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
        int64_t ni = ioff[b + 1] - ioff[b], np = poff[b + 1] - poff[b];
        __int128 covered = 0;
        if (ni < 0 || ni > GS_KERNEL_MAX_PIECES || np < 0 || np > GS_KERNEL_MAX_PIECES) {
            *why_p = "a block has a bad number of inputs or pieces";
            return 0;
        }
        gs_grid_block_region(&l->grid, b, start, shape);
        if (pad != NULL)
            for (int32_t j = 0; j < nd; j++) shape[j] += 2 * (int64_t)pad[j];
        for (int64_t i = ioff[b]; i < ioff[b + 1]; i++) {
            if (l->u.cp.in_len[i] < 0 || l->u.cp.in_len[i] > GS__MAX_ELEMENTS) {
                *why_p = "an input length is out of range";
                return 0;
            }
        }
        for (int64_t i = poff[b]; i < poff[b + 1]; i++) {
            const gs__cpiece_t *p = &l->u.cp.pieces[i];
            int64_t vol = 1;
            if (p->slot < 0 || p->slot >= ni) {
                *why_p = "a piece reads an input the block does not have";
                return 0;
            }
            for (int32_t j = 0; j < GS_MAX_NDIM; j++) {
                if (j >= nd) {
                    if (p->stride[j] != 0 || p->dst[j] != 0 || p->size[j] != 0) {
                        *why_p = "a piece has entries past the layer's ndim";
                        return 0;
                    }
                    continue;
                }
                if (p->size[j] < 0 || p->dst[j] < 0 || p->dst[j] > shape[j] ||
                    p->size[j] > shape[j] - p->dst[j]) {
                    *why_p = "a piece lies outside its block";
                    return 0;
                }
                vol *= p->size[j];   /* bounded by the block's size */
            }
            if (vol == 0) continue;
            {
                __int128 lo, hi;
                gs__piece_range(nd, p, &lo, &hi);
                if (lo < 0 || hi >= l->u.cp.in_len[ioff[b] + p->slot]) {
                    *why_p = "a piece reads outside its input";
                    return 0;
                }
            }
            for (int64_t m = poff[b]; m < i; m++) {
                const gs__cpiece_t *q = &l->u.cp.pieces[m];
                int disjoint = 0;
                for (int32_t j = 0; j < nd && !disjoint; j++)
                    if (q->size[j] == 0 || p->dst[j] >= q->dst[j] + q->size[j] ||
                        q->dst[j] >= p->dst[j] + p->size[j])
                        disjoint = 1;
                if (!disjoint) {
                    *why_p = "pieces of a block overlap";
                    return 0;
                }
            }
            covered += vol;
        }
        if (cover && covered != (__int128)gs_region_size(nd, shape)) {
            *why_p = "pieces do not cover their block";
            return 0;
        }
    }
    return 1;
}

gs_status_t gs__copy_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_kcopy_t *k)
{
    const int64_t *lens = gs__copy_in_lens(l, block);
    const int expected = gs__copy_ninputs(l, block);
    int64_t start[GS_MAX_NDIM];
    if (ninputs != expected)
        return gs_error_set(GS_ERR_INVALID_PARAM, "block %llu of layer copy expects %d inputs, got %d",
                            (unsigned long long)block, expected, ninputs);
    if (ninputs > 0 && inputs == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "inputs are NULL");
    const size_t es = gs_dtype_size((gs_dtype_t)l->u.cp.dtype);
    for (int i = 0; i < ninputs; i++) {
        if (es == sizeof(double) ? inputs[i].len != lens[i]
                                 : inputs[i].nbytes != (uint64_t)lens[i] * es)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "input %d of a copy task has %lld bytes, expected %lld %s elements",
                                i, (long long)(es == sizeof(double) ? inputs[i].len * 8
                                                                   : (int64_t)inputs[i].nbytes),
                                (long long)lens[i], gs_dtype_name((gs_dtype_t)l->u.cp.dtype));
        if (inputs[i].data == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "input %d of a copy task has no data", i);
    }
    memset(k, 0, sizeof(*k));
    k->ndim = l->grid.ndim;
    gs_grid_block_region(&l->grid, block, start, k->shape);
    k->npieces = (int32_t)(l->u.cp.poff[block + 1] - l->u.cp.poff[block]);
    for (int32_t i = 0; i < k->npieces; i++) {
        const gs__cpiece_t *p = &l->u.cp.pieces[l->u.cp.poff[block] + i];
        gs_kpiece_t *kp = &k->pieces[i];
        kp->src = inputs[p->slot].data;
        kp->src_len = lens[p->slot];
        kp->src_base = p->base;
        memcpy(kp->src_stride, p->stride, sizeof(kp->src_stride));
        memcpy(kp->dst_start, p->dst, sizeof(kp->dst_start));
        memcpy(kp->size, p->size, sizeof(kp->size));
    }
    k->out = out;
    k->elem_size = (int32_t)es;
    return GS_OK;
}

/* ---- wire body ---- */

void gs__copy_encode_body(gs_mp_writer_t *w, const gs_layer_t *l)
{
    const int32_t nd = l->grid.ndim;
    const uint64_t nb = gs_grid_nblocks(&l->grid);
    gs_mp_write_array(w, (uint32_t)nb);
    for (uint64_t b = 0; b < nb; b++) {
        gs_mp_write_array(w, 2);
        gs_mp_write_array(w, (uint32_t)(l->u.cp.ioff[b + 1] - l->u.cp.ioff[b]));
        for (int64_t i = l->u.cp.ioff[b]; i < l->u.cp.ioff[b + 1]; i++)
            gs_mp_write_i64(w, l->u.cp.in_len[i]);
        gs_mp_write_array(w, (uint32_t)(l->u.cp.poff[b + 1] - l->u.cp.poff[b]));
        for (int64_t i = l->u.cp.poff[b]; i < l->u.cp.poff[b + 1]; i++) {
            const gs__cpiece_t *p = &l->u.cp.pieces[i];
            gs_mp_write_array(w, 5);
            gs_mp_write_i64(w, p->slot);
            gs_mp_write_i64(w, p->base);
            gs_mp_write_array(w, (uint32_t)nd);
            for (int32_t j = 0; j < nd; j++) gs_mp_write_i64(w, p->stride[j]);
            gs_mp_write_array(w, (uint32_t)nd);
            for (int32_t j = 0; j < nd; j++) gs_mp_write_i64(w, p->dst[j]);
            gs_mp_write_array(w, (uint32_t)nd);
            for (int32_t j = 0; j < nd; j++) gs_mp_write_i64(w, p->size[j]);
        }
    }
}

static int gs__dec_vec(gs_mp_reader_t *r, uint32_t nd, int64_t *v, const char *what)
{
    uint32_t n;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n != nd) return gs_mp_fail(r, what);
    for (uint32_t j = 0; j < n; j++)
        if (!gs_mp_read_i64(r, &v[j])) return 0;
    return 1;
}

int gs__copy_decode_body(gs_mp_reader_t *r, gs_layer_t *l)
{
    const uint32_t nd = (uint32_t)l->grid.ndim;
    const uint64_t nb = gs_grid_nblocks(&l->grid);
    GS_VEC(int64_t) lens = {0};
    GS_VEC(gs__cpiece_t) pieces = {0};
    uint32_t n;
    if (!gs_mp_read_array(r, &n)) return 0;
    /* the count is bounded by the remaining bytes, so this allocation is too */
    if ((uint64_t)n != nb) return gs_mp_fail(r, "copy layer block count does not match its grid");
    l->u.cp.ioff = gs_malloc(((size_t)n + 1) * sizeof(int64_t), "copy input offsets");
    l->u.cp.poff = gs_malloc(((size_t)n + 1) * sizeof(int64_t), "copy piece offsets");
    if (l->u.cp.ioff == NULL || l->u.cp.poff == NULL) goto nomem;
    l->u.cp.ioff[0] = l->u.cp.poff[0] = 0;
    for (uint32_t b = 0; b < n; b++) {
        uint32_t m, ni, np;
        if (!gs_mp_read_array(r, &m)) goto fail;
        if (m != 2) {
            gs_mp_fail(r, "copy block must have 2 fields");
            goto fail;
        }
        if (!gs_mp_read_array(r, &ni)) goto fail;
        if (ni > GS_KERNEL_MAX_PIECES) {
            gs_mp_fail(r, "copy block has too many inputs");
            goto fail;
        }
        for (uint32_t i = 0; i < ni; i++) {
            int64_t v;
            if (!gs_mp_read_i64(r, &v)) goto fail;
            if (GS_VEC_PUSH(&lens, v) != GS_OK) goto nomem;
        }
        if (!gs_mp_read_array(r, &np)) goto fail;
        if (np > GS_KERNEL_MAX_PIECES) {
            gs_mp_fail(r, "copy block has too many pieces");
            goto fail;
        }
        for (uint32_t i = 0; i < np; i++) {
            gs__cpiece_t p;
            memset(&p, 0, sizeof(p));
            if (!gs_mp_read_array(r, &m)) goto fail;
            if (m != 5) {
                gs_mp_fail(r, "copy piece must have 5 fields");
                goto fail;
            }
            if (!gs_mp_read_i32(r, &p.slot) || !gs_mp_read_i64(r, &p.base) ||
                !gs__dec_vec(r, nd, p.stride, "copy piece stride count does not match ndim") ||
                !gs__dec_vec(r, nd, p.dst, "copy piece start count does not match ndim") ||
                !gs__dec_vec(r, nd, p.size, "copy piece size count does not match ndim"))
                goto fail;
            if (GS_VEC_PUSH(&pieces, p) != GS_OK) goto nomem;
        }
        l->u.cp.ioff[b + 1] = (int64_t)lens.len;
        l->u.cp.poff[b + 1] = (int64_t)pieces.len;
    }
    /* never NULL, even for a layer without inputs or pieces */
    if (GS_VEC_RESERVE(&lens, 1) != GS_OK || GS_VEC_RESERVE(&pieces, 1) != GS_OK) goto nomem;
    l->u.cp.in_len = lens.data;
    l->u.cp.pieces = pieces.data;
    return 1;
nomem:
    r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a copy layer");
fail:
    GS_VEC_FREE(&lens);
    GS_VEC_FREE(&pieces);
    return 0;
}
