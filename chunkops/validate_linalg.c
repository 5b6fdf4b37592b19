/* LINALG kernel-spec validation (graph/kernel.h, gs_klinalg_t), shared by every backend: a
 * malformed spec is refused with GS_ERR_INVALID_PARAM and a message naming the field and the
 * term, so that no backend reads outside an input chunk or writes past the output.
 * All size arithmetic is done in 128 bits (views may span ~1e9 elements; a hostile spec may
 * carry values near INT64_MAX). */
#include "chunkops/chunkops.h"
#include "common/error.h"

#include <stdint.h>

typedef __int128 gs__la_i128;

static const char *const gs__la_names[GS_LA_OP_COUNT] = {"gemm", "qr", "svd", "gram",
                                                              "apply", "gstep"};

/* One view: non-negative fields, ld >= cols, inside its chunk; trans 0/1 (and 0 when the op
 * takes no transposes). @a which is "a" or "b". */
static gs_status_t gs__la_check_view(const char *opname, const char *which, int32_t t,
                                     const gs_kmat_t *v, int trans_ok)
{
    if (v->rows < 0 || v->cols < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: %s[%d] has negative shape %lld x %lld",
                            opname, which, (int)t, (long long)v->rows, (long long)v->cols);
    if (v->ld < v->cols)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "linalg %s: %s[%d].ld %lld is smaller than its cols %lld", opname,
                            which, (int)t, (long long)v->ld, (long long)v->cols);
    if (v->off < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: %s[%d].off %lld is negative",
                            opname, which, (int)t, (long long)v->off);
    if (v->len < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: %s[%d].len %lld is negative",
                            opname, which, (int)t, (long long)v->len);
    if (v->trans != 0 && v->trans != 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: %s[%d].trans is %d (0 or 1)",
                            opname, which, (int)t, (int)v->trans);
    if (v->trans && !trans_ok)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "linalg %s: %s[%d].trans is set (only GEMM operands may be transposed)",
                            opname, which, (int)t);
    if (v->rows == 0 || v->cols == 0) return GS_OK;
    if (v->data == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: %s[%d].data is NULL for a %lld x %lld view",
                            opname, which, (int)t, (long long)v->rows, (long long)v->cols);
    gs__la_i128 end = (gs__la_i128)v->off + (gs__la_i128)(v->rows - 1) * (gs__la_i128)v->ld +
                      (gs__la_i128)v->cols;
    if (end > (gs__la_i128)v->len)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "linalg %s: %s[%d] (%lld x %lld at off %lld, ld %lld) ends past its "
                            "chunk of %lld doubles",
                            opname, which, (int)t, (long long)v->rows, (long long)v->cols,
                            (long long)v->off, (long long)v->ld, (long long)v->len);
    return GS_OK;
}

/* The stacked pieces a[0..nterms) of an op with n columns: *rows_p their total. */
static gs_status_t gs__la_check_stack(const gs_klinalg_t *k, const char *name,
                                      gs__la_i128 *rows_p)
{
    gs_status_t st;
    gs__la_i128 rows = 0;
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t];
        if ((st = gs__la_check_view(name, "a", t, a, 0)) != GS_OK) return st;
        if (a->cols != k->n)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "linalg %s: a[%d] has %lld columns, the stack has n = %lld", name,
                                (int)t, (long long)a->cols, (long long)k->n);
        rows += a->rows; /* each < 2^63, at most 32 terms: no overflow in 128 bits */
    }
    *rows_p = rows;
    return GS_OK;
}

/* GRAM, APPLY, GSTEP (graph/kernel.h): the state view b[0] (1 x GS_LA_STATE_LEN(n), or 0 rows
 * for none), the stack, the step. */
static gs_status_t gs__la_validate_gram(const gs_klinalg_t *k, const char *name)
{
    gs_status_t st;
    const int32_t tmin = k->op == GS_LA_GRAM ? 0 : 1, tmax = GS_KERNEL_MAX_TERMS;
    if (k->nterms < tmin || k->nterms > tmax)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: nterms %d out of range %d..%d",
                            name, (int)k->nterms, (int)tmin, (int)tmax);
    if (k->n < 1 || k->m < 0 || k->n > (int64_t)1 << 20)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: bad shape m %lld, n %lld (needs "
                            "m >= 0, 1 <= n <= 2^20)", name, (long long)k->m, (long long)k->n);
    const int64_t slen = GS_LA_STATE_LEN(k->n);
    const gs_kmat_t *b = &k->b[0];
    if ((st = gs__la_check_view(name, "b", 0, b, 0)) != GS_OK) return st;
    const int has_state = b->rows > 0;
    if (b->rows > 1 || (has_state && b->cols != slen))
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "linalg %s: b[0] is %lld x %lld, not a state (1 x %lld) or none", name,
                            (long long)b->rows, (long long)b->cols, (long long)slen);
    if (k->op == GS_LA_APPLY && !has_state)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg apply: b[0] (the state) is missing");
    if (k->op == GS_LA_APPLY) {
        if (k->alpha != 0.0 && k->alpha != 1.0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "linalg apply: alpha %g is not 0 or 1 (an "
                                "alternative stack or none)", k->alpha);
        if (k->alpha == 1.0 && k->nterms >= GS_KERNEL_MAX_TERMS)
            return gs_error_set(GS_ERR_INVALID_PARAM, "linalg apply: %d pieces leave no room for "
                                "an alternative stack", (int)k->nterms);
        for (int32_t t = 0; k->alpha == 1.0 && t < k->nterms; t++) {
            const gs_kmat_t *x = &k->b[1 + t];
            if ((st = gs__la_check_view(name, "b", 1 + t, x, 0)) != GS_OK) return st;
            if (x->rows != k->a[t].rows || x->cols != k->n)
                return gs_error_set(GS_ERR_INVALID_PARAM, "linalg apply: the alternative piece "
                                    "b[%d] is %lld x %lld, a[%d] is %lld x %lld", (int)(1 + t),
                                    (long long)x->rows, (long long)x->cols, (int)t,
                                    (long long)k->a[t].rows, (long long)k->n);
        }
    }
    if (k->op == GS_LA_GSTEP) {
        if (!(k->alpha == 1.0 || k->alpha == 2.0 || k->alpha == 3.0))
            return gs_error_set(GS_ERR_INVALID_PARAM, "linalg gstep: step (alpha) %g is not 1, 2 "
                                "or 3", k->alpha);
        if (has_state != (k->alpha > 1.0))
            return gs_error_set(GS_ERR_INVALID_PARAM, "linalg gstep: step %g %s a previous state",
                                k->alpha, has_state ? "takes no" : "needs");
        if (k->m < k->n)
            return gs_error_set(GS_ERR_INVALID_PARAM, "linalg gstep: m %lld < n %lld",
                                (long long)k->m, (long long)k->n);
        for (int32_t t = 0; t < k->nterms; t++) {   /* partial Gram matrices, summed */
            if ((st = gs__la_check_view(name, "a", t, &k->a[t], 0)) != GS_OK) return st;
            if (k->a[t].rows != k->n || k->a[t].cols != k->n)
                return gs_error_set(GS_ERR_INVALID_PARAM, "linalg gstep: the Gram matrix a[%d] "
                                    "is %lld x %lld, not n x n (n = %lld)", (int)t,
                                    (long long)k->a[t].rows, (long long)k->a[t].cols,
                                    (long long)k->n);
        }
    } else {
        gs__la_i128 rows = 0;
        if ((st = gs__la_check_stack(k, name, &rows)) != GS_OK) return st;
        if (rows != (gs__la_i128)k->m)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "linalg %s: the %d pieces have %lld rows in total, m is %lld",
                                name, (int)k->nterms,
                                rows > (gs__la_i128)INT64_MAX ? (long long)INT64_MAX : (long long)rows,
                                (long long)k->m);
    }
    gs__la_i128 olen = k->op == GS_LA_GRAM    ? (gs__la_i128)k->n * k->n
                       : k->op == GS_LA_APPLY ? (gs__la_i128)k->m * k->n
                                              : (gs__la_i128)slen;
    if (olen > (gs__la_i128)INT64_MAX / (gs__la_i128)sizeof(double) ||
        olen > (gs__la_i128)(SIZE_MAX / sizeof(double)))
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: output too large to address", name);
    if (olen > 0 && k->out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: out is NULL for %lld doubles",
                            name, (long long)olen);
    return GS_OK;
}

gs_status_t gs_klinalg_validate(const gs_klinalg_t *k)
{
    gs_status_t st;

    if (k == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "linalg kernel: spec is NULL");
    if (k->op < 0 || k->op >= GS_LA_OP_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg kernel: unknown op %d", (int)k->op);
    const char *name = gs__la_names[k->op];
    if (k->op >= GS_LA_GRAM) return gs__la_validate_gram(k, name);
    const int gemm = k->op == GS_LA_GEMM;
    const int32_t tmin = gemm ? 0 : 1;
    if (k->nterms < tmin || k->nterms > GS_KERNEL_MAX_TERMS)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: nterms %d out of range %d..%d",
                            name, (int)k->nterms, (int)tmin, GS_KERNEL_MAX_TERMS);
    if (k->m < 0 || k->n < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: negative shape m %lld, n %lld",
                            name, (long long)k->m, (long long)k->n);
    if (!gemm && k->n < 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: n is %lld (needs n >= 1)", name,
                            (long long)k->n);
    if (!gemm && k->m < k->n)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "linalg %s: m %lld < n %lld (needs a tall or square stack, m >= n)",
                            name, (long long)k->m, (long long)k->n);

    /* output size: GEMM m*n; QR m*n + n*n; SVD m*n + n + n*n; also in bytes */
    gs__la_i128 m = k->m, n = k->n;
    gs__la_i128 olen = m * n + (gemm ? 0 : n * n + (k->op == GS_LA_SVD ? n : 0));
    if (olen > (gs__la_i128)INT64_MAX / (gs__la_i128)sizeof(double) ||
        olen > (gs__la_i128)(SIZE_MAX / sizeof(double)))
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "linalg %s: output of m %lld x n %lld is too large to address", name,
                            (long long)k->m, (long long)k->n);
    if (olen > 0 && k->out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg %s: out is NULL for %lld doubles",
                            name, (long long)olen);

    if (gemm) {
        for (int32_t t = 0; t < k->nterms; t++) {
            const gs_kmat_t *a = &k->a[t], *b = &k->b[t];
            if ((st = gs__la_check_view(name, "a", t, a, 1)) != GS_OK) return st;
            if ((st = gs__la_check_view(name, "b", t, b, 1)) != GS_OK) return st;
            int64_t ar = a->trans ? a->cols : a->rows, ac = a->trans ? a->rows : a->cols;
            int64_t br = b->trans ? b->cols : b->rows, bc = b->trans ? b->rows : b->cols;
            if (ar != k->m)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "linalg gemm: op(a[%d]) has %lld rows, the output m is %lld",
                                    (int)t, (long long)ar, (long long)k->m);
            if (bc != k->n)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "linalg gemm: op(b[%d]) has %lld columns, the output n is %lld",
                                    (int)t, (long long)bc, (long long)k->n);
            if (ac != br)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "linalg gemm: term %d inner dimensions differ: op(a[%d]) is "
                                    "%lld x %lld, op(b[%d]) is %lld x %lld",
                                    (int)t, (int)t, (long long)ar, (long long)ac, (int)t,
                                    (long long)br, (long long)bc);
        }
        return GS_OK;
    }

    gs__la_i128 rows = 0;
    if ((st = gs__la_check_stack(k, name, &rows)) != GS_OK) return st;
    if (rows != m)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "linalg %s: the %d pieces have %lld rows in total, m is %lld", name,
                            (int)k->nterms,
                            rows > (gs__la_i128)INT64_MAX ? (long long)INT64_MAX : (long long)rows,
                            (long long)k->m);
    return GS_OK;
}

gs_status_t gs__gram_rank_fail(double dev)
{
    return gs_error_set(GS_ERR_NUMERIC,
                        "linalg gstep: the matrix is numerically rank-deficient or too "
                        GS_LA_GRAM_REFUSED " (max |Q^T Q - I| = %.3g after two "
                        "passes); lower it with GS_LOWER_GRAM_SVD off (TSQR)", dev);
}

gs_status_t gs__la_apply_source(const gs_klinalg_t *k, const double *hdr, const gs_kmat_t **xs_p)
{
    const double how = hdr[GS_LA_H_APPLY];
    if (how != GS_LA_APPLY_COPY && how != GS_LA_APPLY_TRSM && how != GS_LA_APPLY_GEMM &&
        how != GS_LA_APPLY_NONE)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg apply: the state's apply word is %g",
                            how);
    if (hdr[GS_LA_H_SRC] == 1.0 && how != GS_LA_APPLY_NONE && k->alpha != 1.0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "linalg apply: the state asks for the "
                            "alternative stack, which this task does not have");
    *xs_p = hdr[GS_LA_H_SRC] == 1.0 ? &k->b[1] : &k->a[0];
    return GS_OK;
}

int gs__la_step_hdr(double *hdr, int step)
{
    hdr[GS_LA_H_STEP] = (double)step;
    if (hdr[GS_LA_H_FAST] != 1.0) return 0;
    hdr[GS_LA_H_SKIP] = 1.0;
    hdr[GS_LA_H_APPLY] = step == 3 ? GS_LA_APPLY_GEMM : GS_LA_APPLY_NONE;
    hdr[GS_LA_H_SRC] = step == 3 ? 1.0 : 0.0;
    return 1;
}
