/* SLAB and STENCIL layers (stencil_int.h): checks, instantiation, wire bodies.
 *
 * A SLAB layer's grid is 1-D: block b is slab b, its extent the slab's element count, so
 * gs_layer_out_nbytes and the task tables need nothing special. A STENCIL layer's grid is the
 * output's; its blocks' inputs and pieces live in u.cp exactly as a COPY layer's, except that
 * the pieces place data in the padded block (the block grown by the radius on both sides) and
 * need not cover it (what they leave is the constant). */
#include "graph/copy_int.h"
#include "graph/stencil_int.h"
#include "common/vec.h"

#include <string.h>

void gs__slab_free(gs_layer_t *l)
{
    gs_free(l->u.sl.tab);
    l->u.sl.tab = NULL;
}

void gs__stencil_free(gs_layer_t *l)
{
    gs__copy_free(l);
    if (l->st != NULL) {
        gs_free(l->st->weights);
        gs_free(l->st->keep);
        gs__ukernel_free(l->st->user);
        gs_free(l->st);
        l->st = NULL;
    }
}

int gs__slab_check(const gs_layer_t *l, const char **why_p)
{
    const int32_t nd = l->u.sl.nd;
    const uint64_t nb = gs_grid_nblocks(&l->grid);
    if (l->grid.ndim != 1) {
        *why_p = "slab layer grid is not 1-D";
        return 0;
    }
    if (nd < 1 || nd > GS_MAX_NDIM || l->u.sl.tab == NULL) {
        *why_p = "slab layer has a bad ndim or no table";
        return 0;
    }
    for (uint64_t b = 0; b < nb; b++) {
        const int64_t *t = l->u.sl.tab + (int64_t)b * GS__SLAB_W(nd);
        int64_t start, ext;
        __int128 in = 1, vol = 1;
        gs_grid_block_region(&l->grid, b, &start, &ext);
        for (int32_t j = 0; j < nd; j++) {
            int64_t sh = t[1 + j], lo = t[1 + nd + j], sz = t[1 + 2 * nd + j];
            if (sh < 0 || lo < 0 || sz < 0 || lo > sh || sz > sh - lo) {
                *why_p = "a slab lies outside its input";
                return 0;
            }
            in *= sh;
            vol *= sz;
            if (in > GS__MAX_ELEMENTS) {
                *why_p = "a slab's input is too large";
                return 0;
            }
        }
        if (in != t[0]) {
            *why_p = "a slab's input length does not match its shape";
            return 0;
        }
        if (vol != ext) {
            *why_p = "a slab's size does not match its block";
            return 0;
        }
    }
    return 1;
}

int gs__stencil_check(const gs_layer_t *l, const char **why_p)
{
    const gs__stencil_hdr_t *h = l->st;
    const int32_t nd = l->grid.ndim;
    const uint64_t nb = gs_grid_nblocks(&l->grid);
    int64_t nw = 1;
    if (h == NULL || (h->weights == NULL && h->user == NULL) || h->keep == NULL) {
        *why_p = "stencil layer without weights";
        return 0;
    }
    if (nd < 1) {
        *why_p = "stencil layer of ndim 0";
        return 0;
    }
    for (int32_t j = 0; j < GS_MAX_NDIM; j++) {
        if (j >= nd) {
            if (h->radius[j] != 0) {
                *why_p = "stencil radius past the layer's ndim";
                return 0;
            }
            continue;
        }
        if (h->radius[j] < 0 || h->radius[j] > GS_KERNEL_MAX_WEIGHTS) {
            *why_p = "stencil radius out of range";
            return 0;
        }
        nw *= 2 * (int64_t)h->radius[j] + 1;
        if (nw > GS_KERNEL_MAX_WEIGHTS) break;
    }
    if (h->user != NULL ? h->nweights != 0 || nw > GS_KERNEL_MAX_WEIGHTS : nw != h->nweights) {
        *why_p = "stencil weight count does not match its radius";
        return 0;
    }
    if (h->user != NULL && (h->user->library[0] == '\0' || h->user->symbol[0] == '\0' ||
                            h->user->arg_len > GS__UKERNEL_MAX_ARG)) {
        *why_p = "stencil user kernel without a name";
        return 0;
    }
    for (uint64_t b = 0; b < nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
        const int64_t *kp = h->keep + (int64_t)b * 2 * nd;
        gs_grid_block_region(&l->grid, b, start, shape);
        for (int32_t j = 0; j < nd; j++)
            if (kp[j] < 0 || kp[j] > shape[j] || kp[nd + j] < 0 || kp[nd + j] > shape[j]) {
                *why_p = "stencil keep counts out of range";
                return 0;
            }
    }
    return gs__copy_check_ex(l, h->radius, 0, why_p);
}

gs_status_t gs__slab_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_kcopy_t *k)
{
    const int32_t nd = l->u.sl.nd;
    const int64_t *t = l->u.sl.tab + (int64_t)block * GS__SLAB_W(nd);
    int64_t rs = 1;
    if (ninputs != 1 || inputs == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "a slab task expects 1 input, got %d", ninputs);
    if (inputs[0].len != t[0] || inputs[0].data == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "the input of a slab task has %lld elements, expected %lld",
                            (long long)inputs[0].len, (long long)t[0]);
    memset(k, 0, sizeof(*k));
    k->ndim = nd;
    k->npieces = 1;
    k->pieces[0].src = inputs[0].data;
    k->pieces[0].src_len = inputs[0].len;
    for (int32_t j = nd - 1; j >= 0; j--) {
        k->shape[j] = k->pieces[0].size[j] = t[1 + 2 * nd + j];
        k->pieces[0].src_stride[j] = rs;
        k->pieces[0].src_base += t[1 + nd + j] * rs;
        rs *= t[1 + j];
    }
    k->out = out;
    return GS_OK;
}

gs_status_t gs__stencil_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                    const gs_chunk_ref_t *inputs, double *out, gs_kstencil_t *k)
{
    const gs__stencil_hdr_t *h = l->st;
    const int32_t nd = l->grid.ndim;
    gs_kcopy_t *c = gs_malloc(sizeof(*c), "stencil pieces");
    gs_status_t st;
    if (c == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory instantiating a stencil");
    if ((st = gs__copy_instantiate(l, block, ninputs, inputs, out, c)) != GS_OK) {
        gs_free(c);
        return st;
    }
    memset(k, 0, sizeof(*k));
    k->ndim = nd;
    memcpy(k->shape, c->shape, sizeof(k->shape));
    memcpy(k->radius, h->radius, sizeof(k->radius));
    for (int32_t j = 0; j < nd; j++) {
        k->keep_lo[j] = h->keep[(int64_t)block * 2 * nd + j];
        k->keep_hi[j] = h->keep[(int64_t)block * 2 * nd + nd + j];
    }
    k->cval = h->cval;
    k->nweights = h->nweights;
    k->weights = h->weights;
    k->npieces = c->npieces;
    memcpy(k->pieces, c->pieces, (size_t)c->npieces * sizeof(gs_kpiece_t));
    k->out = out;
    {
        int64_t st0[GS_MAX_NDIM], sh0[GS_MAX_NDIM];
        gs_grid_block_region(&l->grid, block, st0, sh0);
        memcpy(k->start, st0, sizeof(k->start));
    }
    if (h->user != NULL) {
        /* a CUDA source kernel has no library (GS__UKERNEL_CUDA_LIB is a placeholder) */
        k->user_lib = h->user->cuda_src != NULL ? NULL : h->user->library;
        k->user_cuda_src = h->user->cuda_src;
        k->user_sym = h->user->symbol;
        k->user_arg = h->user->arg_len > 0 ? h->user->arg : NULL;   /* NULL, 0: no arg */
        k->user_arg_len = h->user->arg_len;
    }
    gs_free(c);
    return GS_OK;
}

/* ---- wire bodies ---- */

void gs__slab_encode_body(gs_mp_writer_t *w, const gs_layer_t *l)
{
    const int64_t n = (int64_t)gs_grid_nblocks(&l->grid) * GS__SLAB_W(l->u.sl.nd);
    gs_mp_write_array(w, 2);
    gs_mp_write_i64(w, l->u.sl.nd);
    gs_mp_write_array(w, (uint32_t)n);
    for (int64_t i = 0; i < n; i++) gs_mp_write_i64(w, l->u.sl.tab[i]);
}

int gs__slab_decode_body(gs_mp_reader_t *r, gs_layer_t *l)
{
    uint32_t m, n;
    int32_t nd;
    if (!gs_mp_read_array(r, &m)) return 0;
    if (m != 2) return gs_mp_fail(r, "slab body must have 2 fields");
    if (!gs_mp_read_i32(r, &nd)) return 0;
    if (nd < 1 || nd > GS_MAX_NDIM) return gs_mp_fail(r, "slab ndim out of range");
    if (!gs_mp_read_array(r, &n)) return 0;
    if (l->grid.ndim != 1 || (uint64_t)n != gs_grid_nblocks(&l->grid) * (uint64_t)GS__SLAB_W(nd))
        return gs_mp_fail(r, "slab table does not match its grid");
    l->u.sl.nd = nd;
    /* n is bounded by the remaining bytes */
    l->u.sl.tab = gs_malloc(((size_t)n + 1) * sizeof(int64_t), "slab table");
    if (l->u.sl.tab == NULL) {
        r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a slab layer");
        return 0;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!gs_mp_read_i64(r, &l->u.sl.tab[i])) return 0;
    return 1;
}

void gs__stencil_encode_body(gs_mp_writer_t *w, const gs_layer_t *l)
{
    const gs__stencil_hdr_t *h = l->st;
    const int32_t nd = l->grid.ndim;
    const int64_t nk = (int64_t)gs_grid_nblocks(&l->grid) * 2 * nd;
    const int cuda = h->user != NULL && h->user->cuda_src != NULL;
    gs_mp_write_array(w, cuda ? 9 : 8);   /* a CUDA kernel's source appended */
    gs_mp_write_array(w, (uint32_t)nd);
    for (int32_t j = 0; j < nd; j++) gs_mp_write_i64(w, h->radius[j]);
    gs_mp_write_f64(w, h->cval);
    gs_mp_write_array(w, (uint32_t)h->nweights);
    for (int32_t i = 0; i < h->nweights; i++) gs_mp_write_f64(w, h->weights[i]);
    gs_mp_write_array(w, (uint32_t)nk);
    for (int64_t i = 0; i < nk; i++) gs_mp_write_i64(w, h->keep[i]);
    gs__copy_encode_body(w, l);
    if (h->user != NULL) {
        gs_mp_write_str(w, h->user->library, strlen(h->user->library));
        gs_mp_write_str(w, h->user->symbol, strlen(h->user->symbol));
        gs_mp_write_bin(w, h->user->arg, h->user->arg_len);
        if (cuda) gs_mp_write_str(w, h->user->cuda_src, strlen(h->user->cuda_src));
    } else {
        gs_mp_write_str(w, "", 0);
        gs_mp_write_str(w, "", 0);
        gs_mp_write_bin(w, "", 0);
    }
}

int gs__stencil_decode_body(gs_mp_reader_t *r, gs_layer_t *l)
{
    const int32_t nd = l->grid.ndim;
    uint32_t m, n;
    gs__stencil_hdr_t *h;
    if (!gs_mp_read_array(r, &m)) return 0;
    if (m != 8 && m != 9) return gs_mp_fail(r, "stencil body must have 8 or 9 fields");
    h = l->st = gs_calloc(1, sizeof(*h), "stencil header");
    if (h == NULL) goto nomem;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n != (uint32_t)nd) return gs_mp_fail(r, "stencil radius count does not match ndim");
    for (uint32_t j = 0; j < n; j++)
        if (!gs_mp_read_i32(r, &h->radius[j])) return 0;
    if (!gs_mp_read_f64(r, &h->cval) || !gs_mp_read_array(r, &n)) return 0;
    if (n > GS_KERNEL_MAX_WEIGHTS) return gs_mp_fail(r, "stencil weight count out of range");
    h->nweights = (int32_t)n;
    h->weights = gs_malloc((size_t)n * sizeof(double) + 8, "stencil weights");
    if (h->weights == NULL) goto nomem;
    for (uint32_t i = 0; i < n; i++)
        if (!gs_mp_read_f64(r, &h->weights[i])) return 0;
    if (!gs_mp_read_array(r, &n)) return 0;
    if ((uint64_t)n != gs_grid_nblocks(&l->grid) * 2 * (uint64_t)nd)
        return gs_mp_fail(r, "stencil keep table does not match its grid");
    h->keep = gs_malloc(((size_t)n + 1) * sizeof(int64_t), "stencil keep table");
    if (h->keep == NULL) goto nomem;
    for (uint32_t i = 0; i < n; i++)
        if (!gs_mp_read_i64(r, &h->keep[i])) return 0;
    if (!gs__copy_decode_body(r, l)) return 0;
    {
        const char *lib, *sym;
        const uint8_t *arg;
        uint32_t nl, ns, na;
        char lb[4096], sb[1024];
        gs_status_t st;
        if (!gs_mp_read_str(r, &lib, &nl) || !gs_mp_read_str(r, &sym, &ns) ||
            !gs_mp_read_bin(r, &arg, &na))
            return 0;
        if (nl == 0 && ns == 0 && na == 0) {
            if (m != 8) return gs_mp_fail(r, "stencil with a cuda source but no kernel");
            if (h->nweights == 0) return gs_mp_fail(r, "stencil without weights or a kernel");
            return 1;
        }
        if (nl == 0 || nl >= sizeof(lb) || ns == 0 || ns >= sizeof(sb) ||
            memchr(lib, 0, nl) != NULL || memchr(sym, 0, ns) != NULL)
            return gs_mp_fail(r, "stencil user kernel names are empty, too long or hold NUL");
        if (h->nweights != 0) return gs_mp_fail(r, "stencil with both weights and a kernel");
        memcpy(lb, lib, nl);
        lb[nl] = '\0';
        memcpy(sb, sym, ns);
        sb[ns] = '\0';
        st = gs__ukernel_copy(lb, sb, arg, na, &h->user);
        if (st == GS_OK && m == 9) {
            /* the CUDA kernel's source (map_overlap with gs_user_kernel_t.cuda_source) */
            const char *src;
            uint32_t nsrc;
            char *c;
            if (!gs_mp_read_str(r, &src, &nsrc)) return 0;
            if (nsrc == 0 || nsrc > GS__UKERNEL_MAX_SRC || memchr(src, 0, nsrc) != NULL)
                return gs_mp_fail(r, "stencil cuda source is empty, too long or holds NUL");
            if ((c = gs_malloc((size_t)nsrc + 1, "stencil cuda source")) == NULL) goto nomem;
            memcpy(c, src, nsrc);
            c[nsrc] = '\0';
            h->user->cuda_src = c;
        }
        if (st != GS_OK) {
            r->err = st == GS_ERR_NO_MEMORY ? st : GS_ERR_PROTO;
            return 0;
        }
        return 1;
    }
nomem:
    r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a stencil layer");
    return 0;
}
