/* LINALG layers: an explicit per-block table of dense linear algebra operations (GEMM, QR, SVD
 * on views of input chunks, view extraction, sums of partial products). See linalg_int.h.
 *
 * Every block lists its inputs (expected lengths) and its views; the check makes sure each view
 * lies inside its input and that the shapes fit the op, so instantiation against inputs of the
 * expected lengths can never read or write out of bounds. */
#include "common/vec.h"
#include "graph/linalg_int.h"

#include <math.h>
#include <string.h>

static const char *const gs__la_names[GS__LA_OP_COUNT] = {
    "linalg-gemm", "linalg-qr",   "linalg-svd",  "linalg-copy",
    "linalg-sum",  "linalg-gram", "linalg-apply", "linalg-gstep"};

int64_t gs__la_out_len(const gs__lablk_t *b)
{
    switch (b->op) {
    case GS__LA_GEMM: case GS__LA_COPY: case GS__LA_SUM:
        return b->m * b->n;
    case GS__LA_QR:
        return gs_klinalg_out_len(GS_LA_QR, b->m, b->n);
    case GS__LA_SVD:
        return gs_klinalg_out_len(GS_LA_SVD, b->m, b->n);
    case GS__LA_GRAM:
        return b->n * b->n;
    case GS__LA_APPLY:
        return b->m * b->n;
    case GS__LA_GSTEP:
        return GS_LA_STATE_LEN(b->n);
    default:
        return -1;
    }
}

void gs__la_free(gs_layer_t *l)
{
    gs_free(l->u.la.blk);
    gs_free(l->u.la.in_len);
    gs_free(l->u.la.views);
    l->u.la.blk = NULL;
    l->u.la.in_len = NULL;
    l->u.la.views = NULL;
}

const char *gs__la_name(const gs_layer_t *l)
{
    int32_t op = l->u.la.op_all;
    return op >= 0 && op < GS__LA_OP_COUNT ? gs__la_names[op] : "linalg";
}

/* Block @a b's slices of the tables (NULL when the table is empty). */
static const int64_t *gs__la_lens(const gs_layer_t *l, const gs__lablk_t *b)
{
    return l->u.la.in_len != NULL ? l->u.la.in_len + b->in_first : NULL;
}

static const gs__laview_t *gs__la_views(const gs_layer_t *l, const gs__lablk_t *b)
{
    return l->u.la.views != NULL ? l->u.la.views + b->view_first : NULL;
}

/* Shape of op(v). */
static void gs__la_opshape(const gs__laview_t *v, int64_t *r, int64_t *c)
{
    *r = v->trans ? v->cols : v->rows;
    *c = v->trans ? v->rows : v->cols;
}

static int gs__la_view_ok(const gs__laview_t *v, int32_t nin, const int64_t *in_len,
                          uint64_t *used, const char **why)
{
    int64_t last, t;
    if (v->slot < 0 || v->slot >= nin) {
        *why = "a view reads an input slot the block does not have";
        return 0;
    }
    if ((v->trans & ~1) || v->off < 0 || v->rows < 0 || v->cols < 0 || v->ld < v->cols ||
        v->rows > GS__MAX_ELEMENTS || v->cols > GS__MAX_ELEMENTS || v->ld > GS__MAX_ELEMENTS) {
        *why = "a view has a bad shape, offset or row stride";
        return 0;
    }
    if (v->rows > 0 && v->cols > 0) {
        if (__builtin_mul_overflow(v->rows - 1, v->ld, &t) ||
            __builtin_add_overflow(v->off, t, &last) ||
            __builtin_add_overflow(last, v->cols, &last) || last > in_len[v->slot]) {
            *why = "a view reaches past the end of its input";
            return 0;
        }
    }
    *used |= UINT64_C(1) << v->slot;
    return 1;
}

/* The views of a GRAM / APPLY / GSTEP block (linalg_int.h): pieces of n columns adding up to m
 * rows, G, and the state view (1 x GS_LA_STATE_LEN(n)) last where the op takes one. */
static int gs__la_gram_ok(const gs__lablk_t *b, const gs__laview_t *v, const char **why)
{
    int64_t sum = 0, nn, slen;
    int32_t npiece, has_state;
    if (b->n < 1 || __builtin_mul_overflow(b->n, b->n, &nn) || nn > GS__MAX_ELEMENTS / 4) {
        *why = "a gram-path block needs 1 <= n with 3 n^2 in range";
        return 0;
    }
    slen = GS_LA_STATE_LEN(b->n);
    if (b->op == GS__LA_GSTEP) {
        if (!(b->alpha == 1.0 || b->alpha == 2.0 || b->alpha == 3.0) || b->m < b->n) {
            *why = "a gstep block needs step (alpha) 1, 2 or 3 and m >= n";
            return 0;
        }
        has_state = b->alpha > 1.0;
        if (b->nview < 1 + has_state || b->nview > GS_KERNEL_MAX_TERMS + has_state) {
            *why = "a gstep block reads 1 to 32 partial Gram matrices (and the previous state)";
            return 0;
        }
        for (int32_t t = 0; t < b->nview - has_state; t++)
            if (v[t].trans || v[t].rows != b->n || v[t].cols != b->n || v[t].ld != b->n) {
                *why = "a gstep block reads dense n x n Gram matrices (and the previous state)";
                return 0;
            }
    } else {
        /* GRAM: alpha 1 = a state; APPLY: alpha 1 = an alternative stack (always a state) */
        int32_t alt = b->op == GS__LA_APPLY && b->alpha == 1.0;
        has_state = b->op == GS__LA_APPLY || b->alpha == 1.0;
        npiece = (b->nview - has_state) / (1 + alt);
        if ((b->alpha != 0.0 && b->alpha != 1.0) || npiece < (b->op == GS__LA_APPLY) ||
            npiece * (1 + alt) + has_state != b->nview || npiece + alt > GS_KERNEL_MAX_TERMS) {
            *why = "a gram/apply block has a bad view count or alpha";
            return 0;
        }
        for (int32_t t = 0; t < npiece * alt; t++) {
            const gs__laview_t *x = &v[npiece + t];
            if (x->trans || x->cols != b->n || x->rows != v[t].rows) {
                *why = "an apply block's alternative piece does not match its piece";
                return 0;
            }
        }
        for (int32_t t = 0; t < npiece; t++) {
            if (v[t].trans || v[t].cols != b->n) {
                *why = "a gram/apply piece is transposed or has the wrong column count";
                return 0;
            }
            sum += v[t].rows;   /* each <= GS__MAX_ELEMENTS, at most 32 of them */
        }
        if (sum != b->m) {
            *why = "the gram/apply pieces do not add up to m rows";
            return 0;
        }
    }
    if (has_state) {
        const gs__laview_t *sv = &v[b->nview - 1];
        if (sv->trans || sv->rows != 1 || sv->cols != slen) {
            *why = "a gram-path state view is not 1 x GS_LA_STATE_LEN(n)";
            return 0;
        }
    }
    return 1;
}

static int gs__la_block_ok(const gs_layer_t *l, const gs__lablk_t *b, const char **why)
{
    const int64_t *in_len = gs__la_lens(l, b);
    const gs__laview_t *v = gs__la_views(l, b);
    uint64_t used = 0;
    int64_t mn, nn, tot, r, c, r2, c2, sum;
    if (b->op < 0 || b->op >= GS__LA_OP_COUNT) {
        *why = "unknown op";
        return 0;
    }
    if (b->m < 0 || b->n < 0 || b->m > GS__MAX_ELEMENTS || b->n > GS__MAX_ELEMENTS ||
        __builtin_mul_overflow(b->m, b->n, &mn) || __builtin_mul_overflow(b->n, b->n, &nn) ||
        __builtin_add_overflow(mn, nn, &tot) || __builtin_add_overflow(tot, b->n, &tot) ||
        tot > GS__MAX_ELEMENTS) {
        *why = "block output shape out of range";
        return 0;
    }
    if (!isfinite(b->alpha)) {
        *why = "alpha is not finite";
        return 0;
    }
    for (int32_t i = 0; i < b->nin; i++) {
        if (in_len[i] < 0 || in_len[i] > GS__MAX_ELEMENTS) {
            *why = "input length out of range";
            return 0;
        }
    }
    for (int32_t i = 0; i < b->nview; i++)
        if (!gs__la_view_ok(&v[i], b->nin, in_len, &used, why)) return 0;
    switch (b->op) {
    case GS__LA_GEMM:
        if ((b->nview & 1) || b->nview / 2 > GS_KERNEL_MAX_TERMS) {
            *why = "a gemm block needs pairs of views, at most the kernel's term count";
            return 0;
        }
        for (int32_t t = 0; t < b->nview; t += 2) {
            gs__la_opshape(&v[t], &r, &c);
            gs__la_opshape(&v[t + 1], &r2, &c2);
            if (r != b->m || c2 != b->n || c != r2) {
                *why = "gemm operand shapes do not fit";
                return 0;
            }
        }
        break;
    case GS__LA_QR: case GS__LA_SVD:
        if (b->nview < 1 || b->nview > GS_KERNEL_MAX_TERMS) {
            *why = "a factorisation block needs 1 to the kernel's term count of pieces";
            return 0;
        }
        sum = 0;
        for (int32_t t = 0; t < b->nview; t++) {
            if (v[t].trans || v[t].cols != b->n) {
                *why = "a factorisation piece is transposed or has the wrong column count";
                return 0;
            }
            sum += v[t].rows;   /* each <= GS__MAX_ELEMENTS, at most 32 of them */
        }
        if (sum != b->m || b->n < 1 || b->m < b->n) {
            *why = "a factorisation needs m >= n >= 1 stacked rows";
            return 0;
        }
        break;
    case GS__LA_GRAM: case GS__LA_APPLY: case GS__LA_GSTEP:
        if (!gs__la_gram_ok(b, v, why)) return 0;
        break;
    case GS__LA_COPY:
        if (b->nview != 1) {
            *why = "a copy block has exactly one view";
            return 0;
        }
        gs__la_opshape(&v[0], &r, &c);
        if (r != b->m || c != b->n) {
            *why = "copy view shape does not match the block";
            return 0;
        }
        break;
    case GS__LA_SUM:
        if (b->nview != 0 || b->nin < 1) {
            *why = "a sum block has inputs and no views";
            return 0;
        }
        for (int32_t i = 0; i < b->nin; i++) {
            if (in_len[i] != mn) {
                *why = "a sum input does not have the block's length";
                return 0;
            }
            used |= UINT64_C(1) << i;
        }
        break;
    default:
        break;
    }
    if (b->nin < 64 ? used != (UINT64_C(1) << b->nin) - 1 : used != UINT64_MAX) {
        *why = "a block lists an input it does not read";
        return 0;
    }
    return 1;
}

int gs__la_check(const gs_layer_t *l, const char **why)
{
    uint64_t nb = gs_grid_nblocks(&l->grid), in_next = 0, v_next = 0;
    if (l->u.la.nblk != nb) {
        *why = "block table size does not match the grid";
        return 0;
    }
    if ((nb > 0 && l->u.la.blk == NULL) || (l->u.la.nin > 0 && l->u.la.in_len == NULL) ||
        (l->u.la.nview > 0 && l->u.la.views == NULL)) {
        *why = "missing tables";
        return 0;
    }
    for (uint64_t bi = 0; bi < nb; bi++) {
        const gs__lablk_t *b = &l->u.la.blk[bi];
        if (b->nin < 0 || b->nin > GS__LA_MAX_INPUTS || b->nview < 0 ||
            b->nview > 2 * GS_KERNEL_MAX_TERMS || b->in_first != in_next ||
            b->view_first != v_next || (uint64_t)b->nin > l->u.la.nin - in_next ||
            (uint64_t)b->nview > l->u.la.nview - v_next) {
            *why = "block tables are out of order or out of range";
            return 0;
        }
        if (!gs__la_block_ok(l, b, why)) return 0;
        in_next += (uint64_t)b->nin;
        v_next += (uint64_t)b->nview;
    }
    if (in_next != l->u.la.nin || v_next != l->u.la.nview) {
        *why = "block tables have trailing entries";
        return 0;
    }
    return 1;
}

void gs__la_settle(gs_layer_t *l)
{
    int32_t op_all = -1;
    for (uint64_t bi = 0; bi < l->u.la.nblk; bi++) {
        int32_t op = l->u.la.blk[bi].op;
        if (bi == 0) op_all = op;
        else if (op != op_all) op_all = -1;
    }
    l->u.la.op_all = op_all;
}

int gs__la_ninputs(const gs_layer_t *l, uint64_t block)
{
    return l->u.la.blk[block].nin;
}

const int64_t *gs__la_in_lens(const gs_layer_t *l, uint64_t block)
{
    return gs__la_lens(l, &l->u.la.blk[block]);
}

uint64_t gs__la_out_nbytes(const gs_layer_t *l, uint64_t block)
{
    return (uint64_t)gs__la_out_len(&l->u.la.blk[block]) * sizeof(double);
}

static void gs__la_kmat(const gs__laview_t *v, const gs_chunk_ref_t *inputs, gs_kmat_t *k)
{
    k->data = inputs[v->slot].data;
    k->len = inputs[v->slot].len;
    k->off = v->off;
    k->rows = v->rows;
    k->cols = v->cols;
    k->ld = v->ld;
    k->trans = v->trans;
}

gs_status_t gs__la_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                               const gs_chunk_ref_t *inputs, double *out, gs_ktask_t *t)
{
    const gs__lablk_t *b = &l->u.la.blk[block];
    const int64_t *in_len = gs__la_lens(l, b);
    const gs__laview_t *v = gs__la_views(l, b);
    if (ninputs != b->nin)
        return gs_error_set(GS_ERR_INVALID_PARAM, "block %llu of layer %s expects %d inputs, got %d",
                            (unsigned long long)block, gs__la_name(l), (int)b->nin, ninputs);
    if (ninputs > 0 && inputs == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "inputs are NULL");
    for (int i = 0; i < ninputs; i++) {
        if (inputs[i].len != in_len[i])
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "input %d of a %s task has %lld elements, expected %lld", i,
                                gs__la_name(l), (long long)inputs[i].len, (long long)in_len[i]);
        if (inputs[i].data == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "input %d of a %s task has no data", i,
                                gs__la_name(l));
    }
    memset(t, 0, sizeof(*t));
    switch (b->op) {
    case GS__LA_GEMM: case GS__LA_QR: case GS__LA_SVD: {
        gs_klinalg_t *k = &t->u.linalg;
        t->kind = GS_KTASK_LINALG;
        k->op = b->op == GS__LA_GEMM ? GS_LA_GEMM : b->op == GS__LA_QR ? GS_LA_QR : GS_LA_SVD;
        k->m = b->m;
        k->n = b->n;
        k->alpha = b->alpha;
        if (b->op == GS__LA_GEMM) {
            k->nterms = b->nview / 2;
            for (int32_t i = 0; i < k->nterms; i++) {
                gs__la_kmat(&v[2 * i], inputs, &k->a[i]);
                gs__la_kmat(&v[2 * i + 1], inputs, &k->b[i]);
            }
        } else {
            k->nterms = b->nview;
            for (int32_t i = 0; i < k->nterms; i++) gs__la_kmat(&v[i], inputs, &k->a[i]);
        }
        k->out = out;
        break;
    }
    case GS__LA_GRAM: case GS__LA_APPLY: case GS__LA_GSTEP: {
        gs_klinalg_t *k = &t->u.linalg;
        const int32_t has_state = b->op == GS__LA_APPLY || (b->op == GS__LA_GRAM && b->alpha == 1.0) ||
                                  (b->op == GS__LA_GSTEP && b->alpha > 1.0);
        t->kind = GS_KTASK_LINALG;
        k->op = b->op == GS__LA_GRAM ? GS_LA_GRAM : b->op == GS__LA_APPLY ? GS_LA_APPLY : GS_LA_GSTEP;
        k->m = b->m;
        k->n = b->n;
        const int32_t alt = b->op == GS__LA_APPLY && b->alpha == 1.0;
        k->alpha = b->op == GS__LA_GRAM ? 0.0 : b->alpha;
        k->nterms = (b->nview - has_state) / (1 + alt);
        for (int32_t i = 0; i < k->nterms; i++) gs__la_kmat(&v[i], inputs, &k->a[i]);
        for (int32_t i = 0; i < k->nterms * alt; i++)
            gs__la_kmat(&v[k->nterms + i], inputs, &k->b[1 + i]);
        if (has_state) gs__la_kmat(&v[b->nview - 1], inputs, &k->b[0]);
        k->out = out;
        break;
    }
    case GS__LA_COPY: {
        gs_kcopy_t *k = &t->u.copy;
        gs_kpiece_t *p = &k->pieces[0];
        t->kind = GS_KTASK_COPY;
        k->ndim = 2;
        k->shape[0] = b->m;
        k->shape[1] = b->n;
        k->npieces = b->m > 0 && b->n > 0 ? 1 : 0;
        p->src = inputs[v[0].slot].data;
        p->src_len = inputs[v[0].slot].len;
        p->src_base = v[0].off;
        p->src_stride[0] = v[0].trans ? 1 : v[0].ld;
        p->src_stride[1] = v[0].trans ? v[0].ld : 1;
        p->size[0] = b->m;
        p->size[1] = b->n;
        k->out = out;
        break;
    }
    case GS__LA_SUM: {
        gs_kcombine_t *k = &t->u.combine;
        t->kind = GS_KTASK_COMBINE;
        k->redop = GS_RED_SUM;
        k->finalize = 0;
        k->nrec = b->m * b->n;
        k->ninputs = b->nin;
        for (int32_t i = 0; i < b->nin; i++) k->inputs[i] = inputs[i].data;
        k->out = out;
        break;
    }
    default:
        return gs_error_set(GS_ERR_INVALID_PARAM, "unknown linalg op %d", (int)b->op);
    }
    return GS_OK;
}

/* ---- wire body ---- */

void gs__la_encode_body(gs_mp_writer_t *w, const gs_layer_t *l)
{
    gs_mp_write_array(w, (uint32_t)l->u.la.nblk);
    for (uint64_t bi = 0; bi < l->u.la.nblk; bi++) {
        const gs__lablk_t *b = &l->u.la.blk[bi];
        gs_mp_write_array(w, 6);
        gs_mp_write_i64(w, b->op);
        gs_mp_write_i64(w, b->m);
        gs_mp_write_i64(w, b->n);
        gs_mp_write_f64(w, b->alpha);
        gs_mp_write_array(w, (uint32_t)b->nin);
        for (int32_t i = 0; i < b->nin; i++) gs_mp_write_i64(w, l->u.la.in_len[b->in_first + i]);
        gs_mp_write_array(w, (uint32_t)b->nview);
        for (int32_t i = 0; i < b->nview; i++) {
            const gs__laview_t *v = &l->u.la.views[b->view_first + i];
            gs_mp_write_array(w, 6);
            gs_mp_write_i64(w, v->slot);
            gs_mp_write_i64(w, v->trans);
            gs_mp_write_i64(w, v->off);
            gs_mp_write_i64(w, v->rows);
            gs_mp_write_i64(w, v->cols);
            gs_mp_write_i64(w, v->ld);
        }
    }
}

int gs__la_decode_body(gs_mp_reader_t *r, gs_layer_t *l)
{
    GS_VEC(int64_t) lens = {0};
    GS_VEC(gs__laview_t) views = {0};
    uint32_t nb, m;
    int ok = 0;
    if (!gs_mp_read_array(r, &nb)) return 0;   /* count checked against the remaining bytes */
    if ((uint64_t)nb != gs_grid_nblocks(&l->grid))
        return gs_mp_fail(r, "linalg block count does not match the grid");
    l->u.la.blk = gs_calloc(nb ? nb : 1, sizeof(gs__lablk_t), "linalg blocks");
    if (l->u.la.blk == NULL) goto nomem;
    l->u.la.nblk = nb;
    for (uint32_t bi = 0; bi < nb; bi++) {
        gs__lablk_t *b = &l->u.la.blk[bi];
        uint32_t nin, nv;
        if (!gs_mp_read_array(r, &m)) goto out;
        if (m != 6) {
            gs_mp_fail(r, "linalg block must have 6 fields");
            goto out;
        }
        if (!gs_mp_read_i32(r, &b->op) || !gs_mp_read_i64(r, &b->m) || !gs_mp_read_i64(r, &b->n) ||
            !gs_mp_read_f64(r, &b->alpha) || !gs_mp_read_array(r, &nin))
            goto out;
        if (nin > GS__LA_MAX_INPUTS) {
            gs_mp_fail(r, "too many inputs in a linalg block");
            goto out;
        }
        b->nin = (int32_t)nin;
        b->in_first = lens.len;
        for (uint32_t i = 0; i < nin; i++) {
            int64_t x;
            if (!gs_mp_read_i64(r, &x)) goto out;
            if (GS_VEC_PUSH(&lens, x) != GS_OK) goto nomem;
        }
        if (!gs_mp_read_array(r, &nv)) goto out;
        if (nv > 2 * GS_KERNEL_MAX_TERMS) {
            gs_mp_fail(r, "too many views in a linalg block");
            goto out;
        }
        b->nview = (int32_t)nv;
        b->view_first = views.len;
        for (uint32_t i = 0; i < nv; i++) {
            gs__laview_t v;
            if (!gs_mp_read_array(r, &m)) goto out;
            if (m != 6) {
                gs_mp_fail(r, "linalg view must have 6 fields");
                goto out;
            }
            if (!gs_mp_read_i32(r, &v.slot) || !gs_mp_read_i32(r, &v.trans) ||
                !gs_mp_read_i64(r, &v.off) || !gs_mp_read_i64(r, &v.rows) ||
                !gs_mp_read_i64(r, &v.cols) || !gs_mp_read_i64(r, &v.ld))
                goto out;
            if (GS_VEC_PUSH(&views, v) != GS_OK) goto nomem;
        }
    }
    l->u.la.nin = lens.len;
    l->u.la.in_len = lens.data;
    l->u.la.nview = views.len;
    l->u.la.views = views.data;
    gs__la_settle(l);
    lens.data = NULL;
    views.data = NULL;
    ok = 1;
    goto out;
nomem:
    r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a linalg layer");
out:
    GS_VEC_FREE(&lens);
    GS_VEC_FREE(&views);
    return ok;
}

int64_t gs__la_block_work(const gs_layer_t *l, uint64_t block)
{
    const gs__lablk_t *b = &l->u.la.blk[block];
    const gs__laview_t *v = gs__la_views(l, b);
    int64_t w = 0, t;
    switch (b->op) {
    case GS__LA_GEMM:
        for (int32_t i = 0; i < b->nview; i += 2) {
            int64_t k = v[i].trans ? v[i].rows : v[i].cols;
            if (__builtin_mul_overflow(b->m * b->n, k, &t) || __builtin_add_overflow(w, t, &w))
                return INT64_MAX;
        }
        return w + b->m * b->n;
    case GS__LA_QR: case GS__LA_SVD:
        if (__builtin_mul_overflow(b->m * b->n, b->n, &w)) return INT64_MAX;
        return w;
    case GS__LA_SUM:
        return b->m * b->n * (b->nin + 1);
    case GS__LA_GRAM: case GS__LA_APPLY:
        if (__builtin_mul_overflow(b->m * b->n, b->n, &w)) return INT64_MAX;
        return w + b->n * b->n;
    case GS__LA_GSTEP:
        if (__builtin_mul_overflow(b->n * b->n, b->n, &w)) return INT64_MAX;
        return 20 * w;
    default:
        return b->m * b->n;
    }
}
