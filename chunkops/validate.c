/* Kernel-spec validation (graph/kernel.h), shared by every backend: a malformed spec is
 * refused here with GS_ERR_INVALID_PARAM and a message naming the problem, so that no backend
 * ever reads or writes out of bounds. */
#include "chunkops/chunkops.h"
#include "chunkops/elem_dtype.h"
#include "common/error.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef __int128 gs__i128;

static const int8_t gs__op_arity[GS_OP_COUNT] = {
#define GS__OPC_ARITY(name, val, str, arity) [val] = (arity),
    GS_OPCODE_MAP(GS__OPC_ARITY)
#undef GS__OPC_ARITY
};

static const char *const gs__op_names[GS_OP_COUNT] = {
#define GS__OPC_NAME(name, val, str, arity) [val] = (str),
    GS_OPCODE_MAP(GS__OPC_NAME)
#undef GS__OPC_NAME
};

/* Extreme values of base + sum_j p[j] * stride[j] over 0 <= p[j] < shape[j] (non-empty
 * region). Exact: |stride| * shape < 2^126 summed over 8 axes fits in 128 bits. */
static void gs__affine_range(int32_t ndim, const int64_t *shape, int64_t base,
                             const int64_t *stride, gs__i128 *lo_p, gs__i128 *hi_p)
{
    gs__i128 lo = base, hi = base;
    for (int32_t j = 0; j < ndim; j++) {
        gs__i128 ext = (gs__i128)stride[j] * (gs__i128)(shape[j] - 1);
        if (ext < 0) lo += ext;
        else hi += ext;
    }
    *lo_p = lo;
    *hi_p = hi;
}

/* Shape check shared by fused and copy: ndim range, non-negative extents, element count
 * representable. *size_p = number of elements. */
static gs_status_t gs__check_shape(const char *what, int32_t ndim, const int64_t *shape,
                                   int64_t *size_p)
{
    if (ndim < 0 || ndim > GS_MAX_NDIM)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: ndim %d out of range 0..%d", what,
                            (int)ndim, GS_MAX_NDIM);
    int64_t n = 1;
    int zero = 0;
    for (int32_t j = 0; j < ndim; j++) {
        if (shape[j] < 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: negative extent %lld on axis %d",
                                what, (long long)shape[j], (int)j);
    }
    /* the product of the non-zero extents must fit too, so that no partial product of the
     * shape (or of a sub-box of it) overflows */
    for (int32_t j = 0; j < ndim; j++) {
        if (shape[j] == 0) {
            zero = 1;
            continue;
        }
        if (__builtin_mul_overflow(n, shape[j], &n))
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: region has more than 2^63 elements",
                                what);
    }
    *size_p = zero ? 0 : n;
    return GS_OK;
}

gs_status_t gs_kfused_validate(const gs_kfused_t *k)
{
    gs_status_t st;
    int64_t size;

    if (k == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: spec is NULL");
    if ((st = gs__check_shape("fused kernel", k->ndim, k->shape, &size)) != GS_OK) return st;
    if (k->nleaves < 0 || k->nleaves > GS_KERNEL_MAX_LEAVES)
        return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: nleaves %d out of range 0..%d",
                            (int)k->nleaves, GS_KERNEL_MAX_LEAVES);

    for (int32_t i = 0; i < k->nleaves; i++) {
        const gs_kleaf_t *lf = &k->leaves[i];
        gs__i128 lo, hi;
        if (!gs_leaf_kind_valid(lf->kind))
            return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: leaf %d has unknown kind %d",
                                (int)i, (int)lf->kind);
        if (lf->dtype < 0 || lf->dtype >= GS_DTYPE_COUNT ||
            (lf->kind != GS_LEAF_CHUNK && lf->dtype != GS_DTYPE_FLOAT64))
            return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: leaf %d has bad dtype %d",
                                (int)i, (int)lf->dtype);
        if (lf->kind == GS_LEAF_CHUNK) {
            if (lf->data == NULL)
                return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: chunk leaf %d has NULL data",
                                    (int)i);
            if (lf->data_len < 0)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "fused kernel: chunk leaf %d has negative data_len %lld", (int)i,
                                    (long long)lf->data_len);
        }
        if (size == 0) continue;
        gs__affine_range(k->ndim, k->shape, lf->base, lf->stride, &lo, &hi);
        switch (lf->kind) {
        case GS_LEAF_CHUNK:
            if (lo < 0 || hi >= (gs__i128)lf->data_len)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "fused kernel: chunk leaf %d reads offsets %lld..%lld outside "
                                    "its %lld elements",
                                    (int)i, (long long)(lo < INT64_MIN ? INT64_MIN : lo),
                                    (long long)(hi > INT64_MAX ? INT64_MAX : hi),
                                    (long long)lf->data_len);
            break;
        case GS_LEAF_NORMAL:
        case GS_LEAF_NORMAL_V2:
        case GS_LEAF_NORMAL_V3:
        case GS_LEAF_UNIFORM:
        case GS_LEAF_UNIFORM_F32:
        case GS_LEAF_NORMAL_F32:
        case GS_LEAF_NORMAL_F32_V3:
        case GS_LEAF_NORMAL_F32_V4:
        case GS_LEAF_INTEGERS:
            if (lo < 0 || hi > INT64_MAX)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "fused kernel: random leaf %d has element indices outside "
                                    "0..2^63-1",
                                    (int)i);
            break;
        default: /* GS_LEAF_INDEX: keep every difference of offsets within int64 */
            if (lo < -((gs__i128)1 << 61) || hi > ((gs__i128)1 << 61))
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "fused kernel: index leaf %d has offsets outside -2^61..2^61",
                                    (int)i);
            break;
        }
    }

    if (k->nprog < 1 || k->nprog > GS_KERNEL_MAX_PROG)
        return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: program length %d out of range 1..%d",
                            (int)k->nprog, GS_KERNEL_MAX_PROG);
    if (k->out_dtype < 0 || k->out_dtype >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: unknown output dtype %d",
                            (int)k->out_dtype);
    for (int32_t i = 0; i < k->nprog; i++)
        if (k->prog[i].dtype < 0 || k->prog[i].dtype >= GS_DTYPE_COUNT ||
            (k->prog[i].op == GS_OP_CAST &&
             (k->prog[i].arg < 0 || k->prog[i].arg >= GS_DTYPE_COUNT)))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "fused kernel: instruction %d has an unknown dtype", (int)i);
    int depth = 0;
    for (int32_t i = 0; i < k->nprog; i++) {
        const gs_kinstr_t *in = &k->prog[i];
        if (in->op < 0 || in->op >= GS_OP_COUNT)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "fused kernel: instruction %d has unknown opcode %d", (int)i,
                                (int)in->op);
        int arity = gs__op_arity[in->op];
        if (in->op == GS_OP_LEAF && (in->arg < 0 || in->arg >= k->nleaves))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "fused kernel: instruction %d reads leaf %d of %d", (int)i,
                                (int)in->arg, (int)k->nleaves);
        if (in->op == GS_OP_LEAF) {
            /* float32 and integer random leaves push values of their own dtype */
            const int32_t lk = k->leaves[in->arg].kind;
            const int32_t want = lk == GS_LEAF_UNIFORM_F32 || lk == GS_LEAF_NORMAL_F32 ||
                                         lk == GS_LEAF_NORMAL_F32_V3 || lk == GS_LEAF_NORMAL_F32_V4
                                     ? GS_DTYPE_FLOAT32
                                 : lk == GS_LEAF_INTEGERS ? GS_DTYPE_INT64 : -1;
            if (want >= 0 && in->dtype != want)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "fused kernel: instruction %d reads leaf %d (%s random) as "
                                    "dtype %d", (int)i, (int)in->arg,
                                    want == GS_DTYPE_INT64 ? "int64" : "float32", (int)in->dtype);
            if (lk == GS_LEAF_INTEGERS) {
                int64_t lo, hi;
                memcpy(&lo, &k->leaves[in->arg].p0, sizeof(lo));
                memcpy(&hi, &k->leaves[in->arg].p1, sizeof(hi));
                if (lo > hi)
                    return gs_error_set(GS_ERR_INVALID_PARAM,
                                        "fused kernel: integer random leaf %d has low %lld > "
                                        "high %lld", (int)in->arg, (long long)lo, (long long)hi);
            }
        }
        if (depth < arity)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "fused kernel: stack underflow at instruction %d (%s needs %d "
                                "operands, stack holds %d)",
                                (int)i, gs__op_names[in->op], arity, depth);
        depth += arity == 0 ? 1 : 1 - arity;
        if (depth > GS_KERNEL_MAX_STACK)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "fused kernel: stack depth %d at instruction %d exceeds %d", depth,
                                (int)i, GS_KERNEL_MAX_STACK);
    }
    if (depth != 1)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "fused kernel: program leaves %d values on the stack instead of 1",
                            depth);

    if (k->terminal == GS_TERM_REDUCE) {
        if (k->redop < 0 || k->redop >= GS_RED_COUNT)
            return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: unknown reduction %d",
                                (int)k->redop);
        if (k->red_axis < -1 || k->red_axis >= k->ndim)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "fused kernel: reduction axis %d out of range -1..%d",
                                (int)k->red_axis, (int)k->ndim - 1);
        if (k->out_dtype != GS_DTYPE_FLOAT64) {
            /* integer records: SUM/PROD/MIN/MAX of a program that ends in int64 values */
            const gs_kinstr_t *last = &k->prog[k->nprog - 1];
            const int32_t ldt = last->op == GS_OP_CAST         ? last->arg
                                : gs_op_is_predicate(last->op) ? GS_DTYPE_BOOL
                                                               : last->dtype;
            if (k->out_dtype != GS_DTYPE_INT64 || !gs_redop_int_records(k->redop) ||
                ldt != GS_DTYPE_INT64)
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "fused kernel: reduction %d with records of dtype %d (only "
                                    "sum, prod, min and max of int64 values have int64 records)",
                                    (int)k->redop, (int)k->out_dtype);
        }
        if ((k->redop == GS_RED_ARGMIN || k->redop == GS_RED_ARGMAX) && size > 0) {
            gs__i128 lo, hi;
            if (k->red_axis < 0) {
                gs__affine_range(k->ndim, k->shape, k->idx_base, k->idx_stride, &lo, &hi);
            } else {
                lo = k->idx_base;
                hi = (gs__i128)k->idx_base + k->shape[k->red_axis] - 1;
            }
            /* indices travel as doubles: keep them exact */
            if (lo < 0 || hi > ((gs__i128)1 << 53))
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "fused kernel: arg-reduction indices outside 0..2^53");
        }
        /* nrecords * width must be representable */
        int64_t nrec = 1;
        if (k->red_axis >= 0) {
            for (int32_t j = 0; j < k->ndim; j++) {
                if (j == k->red_axis) continue;
                if (__builtin_mul_overflow(nrec, k->shape[j], &nrec) ||
                    nrec > INT64_MAX / GS_KERNEL_MAX_RECORD)
                    return gs_error_set(GS_ERR_INVALID_PARAM,
                                        "fused kernel: too many reduction records");
            }
        }
    } else if (k->terminal != GS_TERM_STORE) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: unknown terminal %d",
                            (int)k->terminal);
    }
    if (k->out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "fused kernel: out is NULL");
    return GS_OK;
}

int64_t gs_kfused_nrecords(const gs_kfused_t *k)
{
    if (k->terminal != GS_TERM_REDUCE) return 0;
    if (k->red_axis < 0) return 1;
    int64_t n = 1;
    for (int32_t j = 0; j < k->ndim && j < GS_MAX_NDIM; j++)
        if (j != k->red_axis) n *= k->shape[j];
    return n;
}

int64_t gs_kfused_out_len(const gs_kfused_t *k)
{
    if (k->terminal == GS_TERM_REDUCE) return gs_kfused_nrecords(k) * gs_redop_width(k->redop);
    return gs_region_size(k->ndim, k->shape);
}

gs_status_t gs_kcombine_validate(const gs_kcombine_t *k)
{
    if (k == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "combine kernel: spec is NULL");
    if (k->redop < 0 || k->redop >= GS_RED_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "combine kernel: unknown reduction %d",
                            (int)k->redop);
    if (k->ninputs < 1 || k->ninputs > GS_KERNEL_MAX_COMBINE)
        return gs_error_set(GS_ERR_INVALID_PARAM, "combine kernel: ninputs %d out of range 1..%d",
                            (int)k->ninputs, GS_KERNEL_MAX_COMBINE);
    if (k->nrec < 0 || k->nrec > INT64_MAX / GS_KERNEL_MAX_RECORD)
        return gs_error_set(GS_ERR_INVALID_PARAM, "combine kernel: nrec %lld out of range",
                            (long long)k->nrec);
    if (k->finalize != 0 && k->finalize != 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "combine kernel: finalize must be 0 or 1, not %d",
                            (int)k->finalize);
    if (isnan(k->ddof) || isinf(k->ddof))
        return gs_error_set(GS_ERR_INVALID_PARAM, "combine kernel: ddof is not finite");
    if (k->out_dtype < 0 || k->out_dtype >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "combine kernel: unknown output dtype %d",
                            (int)k->out_dtype);
    if ((k->rec_dtype != GS_DTYPE_FLOAT64 && k->rec_dtype != GS_DTYPE_INT64) ||
        (k->rec_dtype == GS_DTYPE_INT64 && !gs_redop_int_records(k->redop)))
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "combine kernel: records of dtype %d for reduction %d (float64, or "
                            "int64 for sum, prod, min and max)", (int)k->rec_dtype, (int)k->redop);
    for (int32_t i = 0; i < k->ninputs; i++)
        if (k->inputs[i] == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "combine kernel: input %d is NULL", (int)i);
    if (k->out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "combine kernel: out is NULL");
    return GS_OK;
}

/* Pieces of a COPY output (or a STENCIL's padded block) of @a shape: inside it, reading inside
 * their sources, disjoint and, with @a cover, covering it. */
static gs_status_t gs__pieces_check(int32_t ndim, const int64_t *shape, int64_t size,
                                    int32_t npieces, const gs_kpiece_t *pieces, int cover)
{
    if (npieces < 0 || npieces > GS_KERNEL_MAX_PIECES)
        return gs_error_set(GS_ERR_INVALID_PARAM, "copy kernel: npieces %d out of range 0..%d",
                            (int)npieces, GS_KERNEL_MAX_PIECES);
    gs__i128 covered = 0;
    for (int32_t i = 0; i < npieces; i++) {
        const gs_kpiece_t *pc = &pieces[i];
        int64_t psize = 1;
        for (int32_t j = 0; j < ndim; j++) {
            if (pc->size[j] < 0 || pc->dst_start[j] < 0 || pc->dst_start[j] > shape[j] ||
                pc->size[j] > shape[j] - pc->dst_start[j])
                return gs_error_set(GS_ERR_INVALID_PARAM,
                                    "copy kernel: piece %d box [%lld, %lld+%lld) on axis %d is "
                                    "outside the output extent %lld",
                                    (int)i, (long long)pc->dst_start[j], (long long)pc->dst_start[j],
                                    (long long)pc->size[j], (int)j, (long long)shape[j]);
            psize *= pc->size[j]; /* bounded by the output size: no overflow */
        }
        if (pc->src == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "copy kernel: piece %d has NULL source",
                                (int)i);
        if (pc->src_len < 0)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "copy kernel: piece %d has negative source length", (int)i);
        if (psize == 0) continue;
        gs__i128 lo, hi;
        gs__affine_range(ndim, pc->size, pc->src_base, pc->src_stride, &lo, &hi);
        if (lo < 0 || hi >= (gs__i128)pc->src_len)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "copy kernel: piece %d reads source offsets outside its %lld "
                                "elements",
                                (int)i, (long long)pc->src_len);
        /* pieces must not overlap: together with the volume check below they tile the output */
        for (int32_t m = 0; m < i; m++) {
            const gs_kpiece_t *q = &pieces[m];
            int disjoint = 0;
            for (int32_t j = 0; j < ndim && !disjoint; j++) {
                if (q->size[j] == 0 || pc->dst_start[j] >= q->dst_start[j] + q->size[j] ||
                    q->dst_start[j] >= pc->dst_start[j] + pc->size[j])
                    disjoint = 1;
            }
            if (!disjoint)
                return gs_error_set(GS_ERR_INVALID_PARAM, "copy kernel: pieces %d and %d overlap",
                                    (int)m, (int)i);
        }
        covered += psize;
    }
    if (cover && covered != (gs__i128)size)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "copy kernel: pieces cover %lld of the %lld output elements",
                            (long long)covered, (long long)size);
    return GS_OK;
}

gs_status_t gs_kcopy_validate(const gs_kcopy_t *k)
{
    gs_status_t st;
    int64_t size;

    if (k == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "copy kernel: spec is NULL");
    if ((st = gs__check_shape("copy kernel", k->ndim, k->shape, &size)) != GS_OK) return st;
    if (k->out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "copy kernel: out is NULL");
    if (k->elem_size != 0 && k->elem_size != 1 && k->elem_size != 2 && k->elem_size != 4 &&
        k->elem_size != 8)
        return gs_error_set(GS_ERR_INVALID_PARAM, "copy kernel: element size %d is not 1, 2, 4 "
                                                  "or 8", (int)k->elem_size);
    return gs__pieces_check(k->ndim, k->shape, size, k->npieces, k->pieces, 1);
}

gs_status_t gs_kstencil_validate(const gs_kstencil_t *k)
{
    gs_status_t st;
    int64_t size, psize, pshape[GS_MAX_NDIM], nw = 1;

    if (k == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "stencil kernel: spec is NULL");
    if (k->ndim < 1)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stencil kernel: ndim %d < 1", (int)k->ndim);
    if ((st = gs__check_shape("stencil kernel", k->ndim, k->shape, &size)) != GS_OK) return st;
    for (int32_t j = 0; j < k->ndim; j++) {
        if (k->radius[j] < 0 || k->radius[j] > GS_KERNEL_MAX_WEIGHTS)
            return gs_error_set(GS_ERR_INVALID_PARAM, "stencil kernel: radius %d of axis %d",
                                (int)k->radius[j], (int)j);
        if (k->keep_lo[j] < 0 || k->keep_lo[j] > k->shape[j] || k->keep_hi[j] < 0 ||
            k->keep_hi[j] > k->shape[j])
            return gs_error_set(GS_ERR_INVALID_PARAM, "stencil kernel: keep counts of axis %d",
                                (int)j);
        pshape[j] = k->shape[j] + 2 * (int64_t)k->radius[j];
        nw *= 2 * (int64_t)k->radius[j] + 1;
        if (nw > GS_KERNEL_MAX_WEIGHTS) break;
    }
    if (k->user_lib != NULL && k->user_cuda_src != NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "stencil kernel: a user kernel is a library's "
                            "or CUDA source, not both");
    if (k->user_lib != NULL || k->user_cuda_src != NULL) {
        if (k->user_sym == NULL || k->nweights != 0 || nw > GS_KERNEL_MAX_WEIGHTS ||
            k->user_arg_len < 0 || (k->user_arg_len > 0 && k->user_arg == NULL))
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "stencil kernel: a user kernel needs a symbol, no weights and a "
                                "neighbourhood of at most %d", GS_KERNEL_MAX_WEIGHTS);
    } else if (nw != k->nweights || k->weights == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "stencil kernel: %d weights for radii needing %lld", (int)k->nweights,
                            (long long)nw);
    }
    if (k->out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "stencil kernel: out is NULL");
    if ((st = gs__check_shape("stencil kernel", k->ndim, pshape, &psize)) != GS_OK) return st;
    return gs__pieces_check(k->ndim, pshape, psize, k->npieces, k->pieces, 0);
}

int gs_kfused_dtype_other(const gs_kfused_t *k)
{
    if (k->out_dtype != GS_DTYPE_FLOAT64) return k->out_dtype;
    for (int32_t i = 0; i < k->nleaves && i < GS_KERNEL_MAX_LEAVES; i++)
        if (k->leaves[i].dtype != GS_DTYPE_FLOAT64) return k->leaves[i].dtype;
    for (int32_t i = 0; i < k->nprog && i < GS_KERNEL_MAX_PROG; i++) {
        if (k->prog[i].dtype != GS_DTYPE_FLOAT64) return k->prog[i].dtype;
        if (k->prog[i].op == GS_OP_CAST && k->prog[i].arg != GS_DTYPE_FLOAT64)
            return k->prog[i].arg;
        if (k->prog[i].op == GS_OP_WHERE) return GS_DTYPE_BOOL;   /* its condition */
    }
    return GS_DTYPE_FLOAT64;
}

int gs_kfused_untype(const gs_kfused_t *k, gs_kfused_t *out)
{
    static const int8_t pred[GS_OP_COUNT] = {
        [GS_OP_LT] = 1, [GS_OP_LE] = 1, [GS_OP_GT] = 1, [GS_OP_GE] = 1, [GS_OP_EQ] = 1,
        [GS_OP_NE] = 1, [GS_OP_LT_IMM] = 1, [GS_OP_LE_IMM] = 1, [GS_OP_GT_IMM] = 1,
        [GS_OP_GE_IMM] = 1, [GS_OP_EQ_IMM] = 1, [GS_OP_NE_IMM] = 1, [GS_OP_LAND] = 1,
        [GS_OP_LOR] = 1, [GS_OP_LXOR] = 1, [GS_OP_LAND_IMM] = 1, [GS_OP_LOR_IMM] = 1,
        [GS_OP_LXOR_IMM] = 1, [GS_OP_ISNAN] = 1, [GS_OP_ISINF] = 1, [GS_OP_ISFINITE] = 1,
        [GS_OP_LNOT] = 1};
    int32_t n = 0;
    if (k->out_dtype != GS_DTYPE_FLOAT64 || k->nprog < 1 || k->nprog > GS_KERNEL_MAX_PROG ||
        k->nleaves < 0 || k->nleaves > GS_KERNEL_MAX_LEAVES)
        return 0;
    for (int32_t i = 0; i < k->nleaves; i++)
        if (k->leaves[i].dtype != GS_DTYPE_FLOAT64) return 0;
    for (int32_t i = 0; i < k->nprog; i++) {
        const gs_kinstr_t *in = &k->prog[i];
        if (in->op < 0 || in->op >= GS_OP_COUNT || in->op == GS_OP_WHERE) return 0;
        if (in->dtype == GS_DTYPE_FLOAT64 && in->op != GS_OP_CAST) continue;
        if (in->dtype == GS_DTYPE_FLOAT64 && in->arg == GS_DTYPE_FLOAT64) continue; /* f64->f64 */
        /* the only other form allowed: bool -> float64 right after a float64 predicate (in
         * postfix the top is the previous instruction's result) */
        if (in->op != GS_OP_CAST || in->dtype != GS_DTYPE_BOOL || in->arg != GS_DTYPE_FLOAT64 ||
            i == 0 || k->prog[i - 1].dtype != GS_DTYPE_FLOAT64 || !pred[k->prog[i - 1].op])
            return 0;
    }
    if (out == NULL) return 1;
    *out = *k;
    for (int32_t i = 0; i < k->nprog; i++) {
        if (k->prog[i].op == GS_OP_CAST) continue;   /* bool -> float64 or the identity */
        out->prog[n] = k->prog[i];
        out->prog[n].dtype = GS_DTYPE_FLOAT64;
        n++;
    }
    out->nprog = n;
    return n > 0;
}

gs_status_t gs_kscan_validate(const gs_kscan_t *k)
{
    int64_t size = 1;
    if (k == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "scan kernel: spec is NULL");
    if (k->op < 0 || k->op >= GS_SCAN_OP_COUNT || k->mode < 0 || k->mode >= GS_KSCAN_MODE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "scan kernel: unknown op %d or mode %d",
                            (int)k->op, (int)k->mode);
    if (k->ndim < 1 || k->ndim > GS_MAX_NDIM || k->axis < 0 || k->axis >= k->ndim)
        return gs_error_set(GS_ERR_INVALID_PARAM, "scan kernel: axis %d of ndim %d",
                            (int)k->axis, (int)k->ndim);
    if (k->in_dtype < 0 || k->in_dtype >= GS_DTYPE_COUNT || k->out_dtype < 0 ||
        k->out_dtype >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "scan kernel: unknown dtype %d -> %d",
                            (int)k->in_dtype, (int)k->out_dtype);
    for (int32_t j = 0; j < k->ndim; j++)
        if (k->shape[j] < 0 || __builtin_mul_overflow(size, k->shape[j], &size) ||
            size > INT64_MAX / 8)
            return gs_error_set(GS_ERR_INVALID_PARAM, "scan kernel: bad extent %lld on axis %d",
                                (long long)k->shape[j], (int)j);
    if (k->in_len != size)
        return gs_error_set(GS_ERR_INVALID_PARAM, "scan kernel: input has %lld elements, its "
                            "shape %lld", (long long)k->in_len, (long long)size);
    if ((size > 0 && k->in == NULL) || k->out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "scan kernel: NULL input or output");
    return GS_OK;
}
