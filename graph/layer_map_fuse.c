/* Fused USER layers (stencil_int.h, "fused USER layers"): an elementwise user kernel with its
 * producers (pre[k]) and consumers (post) evaluated in one task per block. Checks, inputs,
 * instantiation to gs_kmapfused_t and the wire form of the embedded FUSED layers. */
#include "graph/stencil_int.h"

#include <string.h>

/* A non-NULL address for the inputs instantiation leaves to the run (temporary blocks): the
 * FUSED instantiation checks that every input has data; the MAPFUSED fields that point here
 * are reset to NULL before they leave this file. Never read or written. */
static const double gs__ufuse_unset[1];

void gs__ufuse_free(gs__ufuse_t *f)
{
    if (f == NULL) return;
    for (int k = 0; k < GS_KERNEL_MAX_USER_IN; k++) gs_layer_free(f->pre[k]);
    gs_layer_free(f->post);
    gs_free(f);
}

static int gs__ufuse_nin(const gs_layer_t *l)
{
    return (int)(l->u.ub.ioff[1] - l->u.ub.ioff[0]);
}

int gs__ufuse_check(const gs_layer_t *l, const char **why_p)
{
    const gs__ufuse_t *f = l->u.ub.fuse;
    const uint64_t nb = gs_grid_nblocks(&l->grid);
    const int nin = nb > 0 ? gs__ufuse_nin(l) : 0;
    int any = f->post != NULL;
    if (!(l->u.ub.user->flags & GS_KERNEL_ELEMENTWISE)) {
        *why_p = "a fused user layer's kernel is not elementwise";
        return 0;
    }
    for (uint64_t b = 0; b < nb; b++)
        if (l->u.ub.ioff[b + 1] - l->u.ub.ioff[b] != nin) {
            *why_p = "a fused user layer's blocks take different numbers of inputs";
            return 0;
        }
    for (int k = 0; k < GS_KERNEL_MAX_USER_IN; k++) {
        const gs_layer_t *p = f->pre[k];
        if (p == NULL) continue;
        any = 1;
        if (k >= nin || p->kind != GS_LAYER_FUSED || p->u.f.terminal != GS_TERM_STORE ||
            p->u.f.out_dtype != l->u.ub.in_dtype[k] || !gs__grid_equal(&p->grid, &l->grid)) {
            *why_p = "a fused user layer's producer is not a store of the kernel's input dtype "
                     "over its grid";
            return 0;
        }
    }
    if (f->post != NULL) {
        const gs_layer_t *p = f->post;
        if (p->kind != GS_LAYER_FUSED || !gs__grid_equal(&p->grid, &l->grid) || f->usrc < 0 ||
            f->usrc >= p->u.f.nsrc || !gs__grid_equal(&p->u.f.srcs[f->usrc], &l->grid)) {
            *why_p = "a fused user layer's consumer does not read the kernel's output grid";
            return 0;
        }
        for (int32_t q = 0; q < p->u.f.nleaves; q++)
            if (p->u.f.leaves[q].kind == GS_LEAF_CHUNK && p->u.f.leaves[q].src == f->usrc &&
                p->u.f.leaves[q].dtype != l->u.ub.out_dtype) {
                *why_p = "a fused user layer's consumer reads the kernel's output in another dtype";
                return 0;
            }
    } else if (f->usrc != -1) {
        *why_p = "a fused user layer names a kernel source without a consumer";
        return 0;
    }
    if (!any) {
        *why_p = "a fused user layer fuses nothing";
        return 0;
    }
    /* every block's input shapes are its own (elementwise: the output's grid) */
    for (uint64_t b = 0; b < nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
        const int32_t nd = l->grid.ndim;
        gs_grid_block_region(&l->grid, b, start, shape);
        for (int k = 0; k < nin; k++) {
            const int64_t *t = l->u.ub.ibox + (l->u.ub.ioff[b] + k) * (1 + 2 * (int64_t)nd);
            for (int32_t j = 0; j < nd; j++)
                if (t[1 + j] != shape[j] || t[1 + nd + j] != start[j]) {
                    *why_p = "a fused user layer's input block is not its output block";
                    return 0;
                }
        }
    }
    return 1;
}

/* Inputs of block @a block of FUSED layer @a p (0 without chunk leaves), -1 on error. */
static int gs__ufuse_part_n(const gs_layer_t *p, uint64_t block, gs__fres_t *r)
{
    r->ninputs = 0;
    if (!gs__fused_reads_chunks(p)) return 0;
    if (gs__fused_resolve(p, block, r) != GS_OK) return -1;
    return r->ninputs;
}

int gs__ufuse_ninputs(const gs_layer_t *l, uint64_t block)
{
    const gs__ufuse_t *f = l->u.ub.fuse;
    gs__fres_t r;
    int n = 0, nin = gs__ufuse_nin(l);
    for (int k = 0; k < nin; k++) {
        int m = f->pre[k] != NULL ? gs__ufuse_part_n(f->pre[k], block, &r) : 1;
        if (m < 0) return -1;
        n += m;
    }
    if (f->post != NULL) {
        int m = gs__ufuse_part_n(f->post, block, &r);
        if (m < 0) return -1;
        for (int32_t i = 0; i < r.ninputs; i++)
            if (r.in_src[i] == f->usrc) m--;
        n += m;
    }
    return n;
}

uint64_t gs__ufuse_out_nbytes(const gs_layer_t *l, uint64_t block)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    if (l->u.ub.fuse->post != NULL) return gs_layer_out_nbytes(l->u.ub.fuse->post, block);
    gs_grid_block_region(&l->grid, block, start, shape);
    return (uint64_t)gs_region_size(l->grid.ndim, shape) * gs_dtype_size(l->u.ub.out_dtype);
}

gs_status_t gs__ufuse_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                  const gs_chunk_ref_t *inputs, double *out, gs_kmapfused_t *k)
{
    const gs__ufuse_t *f = l->u.ub.fuse;
    const int expected = gs__ufuse_ninputs(l, block);
    gs_chunk_ref_t pin[GS_KERNEL_MAX_LEAVES];
    gs__fres_t r;
    gs_status_t st;
    int at = 0;
    if (expected < 0 || ninputs != expected || (ninputs > 0 && inputs == NULL))
        return gs_error_set(GS_ERR_INVALID_PARAM, "malformed fused user task: block %llu of a "
                            "fused map_blocks layer expects %d inputs, got %d",
                            (unsigned long long)block, expected, ninputs);
    memset(k->has_pre, 0, sizeof(k->has_pre));
    k->has_post = 0;
    k->post_user_leaves = 0;
    gs__user_fill(l, block, &k->user);
    for (int i = 0; i < k->user.nin; i++) {
        const gs_layer_t *p = f->pre[i];
        if (p == NULL) {   /* input i is a chunk, as in a plain USER task */
            if (!gs__user_ref_fits(&inputs[at], k->user.in_len[i], k->user.in[i].dtype))
                return gs_error_set(GS_ERR_INVALID_PARAM, "malformed fused user task: input %d "
                                    "has %llu bytes, expected %lld %s elements", at,
                                    (unsigned long long)gs__user_ref_nbytes(&inputs[at]),
                                    (long long)k->user.in_len[i],
                                    gs_dtype_name((gs_dtype_t)k->user.in[i].dtype));
            k->user.in[i].data = (double *)inputs[at++].data;
            continue;
        }
        int m = gs__ufuse_part_n(p, block, &r);
        k->has_pre[i] = 1;
        if ((st = gs__fused_instantiate(p, block, m, inputs + at, (double *)gs__ufuse_unset,
                                        &k->pre[i])) != GS_OK)
            return st;
        k->pre[i].out = NULL;
        at += m;
    }
    if (f->post != NULL) {
        int m = gs__ufuse_part_n(f->post, block, &r), uslot = -1;
        for (int32_t i = 0; i < m; i++) {
            if (r.in_src[i] == f->usrc) {
                if (r.in_block[i] != block)
                    return gs_error_set(GS_ERR_INVALID_PARAM, "malformed fused user task: the "
                                        "consumer of block %llu reads block %llu of the kernel's "
                                        "output", (unsigned long long)block,
                                        (unsigned long long)r.in_block[i]);
                uslot = i;
                pin[i].data = gs__ufuse_unset;
                pin[i].nbytes = (uint64_t)r.in_len[i] * gs_dtype_size(l->u.ub.out_dtype);
                pin[i].len = (int64_t)(pin[i].nbytes / sizeof(double));
            } else {
                pin[i] = inputs[at++];
            }
        }
        k->has_post = 1;
        if ((st = gs__fused_instantiate(f->post, block, m, pin, out, &k->post)) != GS_OK)
            return st;
        for (int32_t q = 0; q < k->post.nleaves; q++)
            if (uslot >= 0 && r.leaf_slot[q] == uslot && k->post.leaves[q].kind == GS_LEAF_CHUNK) {
                k->post_user_leaves |= 1u << q;
                k->post.leaves[q].data = NULL;
            }
    } else {
        k->user.out.data = out;
    }
    gs_assert_always(at == ninputs);
    return GS_OK;
}

/* ---- wire ---- */

static void gs__ufuse_enc_part(gs_mp_writer_t *w, const gs_layer_t *p)
{
    gs_buf_t b;
    gs_status_t st;
    if (p == NULL) {
        gs_mp_write_bin(w, "", 0);
        return;
    }
    gs_buf_init(&b);
    if ((st = gs_layer_encode(p, &b)) != GS_OK) {
        if (w->err == GS_OK) w->err = st;
        gs_mp_write_bin(w, "", 0);
    } else {
        gs_mp_write_bin(w, b.data, b.len);
    }
    gs_buf_cleanup(&b);
}

void gs__ufuse_encode(gs_mp_writer_t *w, const gs_layer_t *l)
{
    const gs__ufuse_t *f = l->u.ub.fuse;
    if (f == NULL) {
        gs_mp_write_array(w, 0);
        return;
    }
    gs_mp_write_array(w, 3);
    gs_mp_write_array(w, (uint32_t)gs__ufuse_nin(l));
    for (int k = 0; k < gs__ufuse_nin(l); k++) gs__ufuse_enc_part(w, f->pre[k]);
    gs__ufuse_enc_part(w, f->post);
    gs_mp_write_i64(w, f->usrc);
}

/* An embedded layer: empty (none) or an encoded FUSED layer (its kind is read before it is
 * decoded, so embedded layers never nest). */
static int gs__ufuse_dec_part(gs_mp_reader_t *r, gs_layer_t **p_p)
{
    const uint8_t *p;
    uint32_t len, n;
    uint64_t ver, kind;
    gs_mp_reader_t h;
    gs_status_t st;
    if (!gs_mp_read_bin(r, &p, &len)) return 0;
    if (len == 0) return 1;
    gs_mp_reader_init(&h, p, len);
    if (!gs_mp_read_array(&h, &n) || !gs_mp_read_u64(&h, &ver) || !gs_mp_read_u64(&h, &kind) ||
        kind != GS_LAYER_FUSED)
        return gs_mp_fail(r, "a fused user layer embeds a layer that is not fused");
    if ((st = gs_layer_decode(p, len, p_p)) != GS_OK) {
        r->err = st == GS_ERR_NO_MEMORY ? st : GS_ERR_PROTO;
        return 0;
    }
    return 1;
}

int gs__ufuse_decode(gs_mp_reader_t *r, gs_layer_t *l)
{
    uint32_t m, n;
    int64_t usrc;
    gs__ufuse_t *f;
    if (!gs_mp_read_array(r, &m)) return 0;
    if (m == 0) return 1;
    if (m != 3) return gs_mp_fail(r, "fuse must have 0 or 3 fields");
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n > GS_KERNEL_MAX_USER_IN || gs_grid_nblocks(&l->grid) == 0 ||
        (int64_t)n != l->u.ub.ioff[1] - l->u.ub.ioff[0])
        return gs_mp_fail(r, "fuse producers do not match the kernel's inputs");
    f = gs_calloc(1, sizeof(*f), "fused user layer");
    if (f == NULL) {
        r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a user layer");
        return 0;
    }
    l->u.ub.fuse = f;   /* freed with the layer from here on */
    f->usrc = -1;
    for (uint32_t k = 0; k < n; k++)
        if (!gs__ufuse_dec_part(r, &f->pre[k])) return 0;
    if (!gs__ufuse_dec_part(r, &f->post) || !gs_mp_read_i64(r, &usrc)) return 0;
    if (usrc < -1 || usrc >= GS_KERNEL_MAX_LEAVES) return gs_mp_fail(r, "fuse source out of range");
    f->usrc = (int32_t)usrc;
    return 1;
}
