/* Layers: accessors, structural checks, block resolution and instantiation of kernels. */
#include "graph/graph_internal.h"
#include "graph/copy_int.h"
#include "graph/linalg_int.h"
#include "graph/file_int.h"
#include "graph/stencil_int.h"
#include "graph/scan_int.h"

#include <math.h>
#include <string.h>

gs_layer_t *gs__layer_new(int32_t kind)
{
    gs_layer_t *l = gs_calloc(1, sizeof(*l), "layer");
    if (l != NULL) l->kind = kind;
    return l;
}

void gs_layer_free(gs_layer_t *l)
{
    if (l == NULL) return;
    gs_grid_cleanup(&l->grid);
    switch (l->kind) {
    case GS_LAYER_FUSED:
        if (l->u.f.srcs != NULL) {
            for (int32_t i = 0; i < l->u.f.nsrc; i++) gs_grid_cleanup(&l->u.f.srcs[i]);
            gs_free(l->u.f.srcs);
        }
        break;
    case GS_LAYER_LITERAL:
        gs_free(l->u.lit.data);
        gs_free(l->u.lit.off);
        break;
    case GS_LAYER_COPY:
        gs__copy_free(l);
        break;
    case GS_LAYER_LINALG:
        gs__la_free(l);
        break;
    case GS_LAYER_FILE:
        gs__file_free(l);
        break;
    case GS_LAYER_SLAB:
        gs__slab_free(l);
        break;
    case GS_LAYER_STENCIL:
        gs__stencil_free(l);
        break;
    case GS_LAYER_USER:
        gs__user_free(l);
        break;
    case GS_LAYER_SCAN:
        gs__scan_free(l);
        break;
    default:
        break;
    }
    gs_free(l);
}

gs_layer_kind_t gs_layer_kind(const gs_layer_t *l)
{
    return (gs_layer_kind_t)l->kind;
}

static const char *const gs__reduce_names[GS_RED_COUNT] = {
    "reduce-sum", "reduce-min", "reduce-max", "reduce-mean",
    "reduce-var", "reduce-std", "reduce-argmin", "reduce-argmax",
    "reduce-prod"};
static const char *const gs__combine_names[GS_RED_COUNT] = {
    "combine-sum", "combine-min", "combine-max", "combine-mean",
    "combine-var", "combine-std", "combine-argmin", "combine-argmax",
    "combine-prod"};

const char *gs_layer_name(const gs_layer_t *l)
{
    switch (l->kind) {
    case GS_LAYER_FUSED:
        if (l->u.f.terminal == GS_TERM_REDUCE && l->u.f.redop >= 0 && l->u.f.redop < GS_RED_COUNT)
            return gs__reduce_names[l->u.f.redop];
        return "fused";
    case GS_LAYER_COMBINE:
        if (l->u.c.redop >= 0 && l->u.c.redop < GS_RED_COUNT)
            return gs__combine_names[l->u.c.redop];
        return "combine";
    case GS_LAYER_LITERAL:
        return "literal";
    case GS_LAYER_COPY:
        return "copy";
    case GS_LAYER_LINALG:
        return gs__la_name(l);
    case GS_LAYER_FILE:
        return gs__file_name(l);
    case GS_LAYER_SLAB:
        return "slab";
    case GS_LAYER_STENCIL:
        return l->st != NULL && l->st->user != NULL ? "map_overlap" : "stencil";
    case GS_LAYER_USER:
        return l->u.ub.fuse != NULL ? "map_blocks-fused" : "map_blocks";
    case GS_LAYER_SCAN:
        return gs__scan_name(l);
    default:
        return "unknown";
    }
}

const char *gs_layer_kernel_name(const gs_layer_t *l)
{
    if (l->kind == GS_LAYER_USER && l->u.ub.user != NULL && l->u.ub.user->symbol != NULL)
        return l->u.ub.user->symbol;
    if (l->kind == GS_LAYER_STENCIL && l->st != NULL && l->st->user != NULL &&
        l->st->user->symbol != NULL)
        return l->st->user->symbol;
    return gs_layer_name(l);
}

uint64_t gs_layer_nblocks(const gs_layer_t *l)
{
    if (l->kind == GS_LAYER_COMBINE) return gs_grid_nblocks(&l->grid) * (uint64_t)l->u.c.ngroups;
    return gs_grid_nblocks(&l->grid);
}

int64_t gs__reduce_nrec(int32_t ndim, const int64_t *shape, int32_t red_axis)
{
    int64_t n = 1;
    if (red_axis < 0) return 1;
    for (int32_t j = 0; j < ndim; j++)
        if (j != red_axis) n *= shape[j];
    return n;
}

/* ---- structural checks ---- */

static int gs__prog_check(const gs_layer_t *l, const char **why)
{
    int32_t depth = 0;
    if (l->u.f.nprog < 1 || l->u.f.nprog > GS_KERNEL_MAX_PROG) {
        *why = "program length out of range";
        return 0;
    }
    for (int32_t i = 0; i < l->u.f.nprog; i++) {
        const gs_kinstr_t *in = &l->u.f.prog[i];
        int arity;
        switch (in->op) {
#define GS__OPC_AR(name, val, str, ar) case name: arity = ar; break;
        GS_OPCODE_MAP(GS__OPC_AR)
#undef GS__OPC_AR
        default:
            *why = "program has an unknown opcode";
            return 0;
        }
        if (in->dtype < 0 || in->dtype >= GS_DTYPE_COUNT ||
            (in->op == GS_OP_CAST && (in->arg < 0 || in->arg >= GS_DTYPE_COUNT))) {
            *why = "instruction has an unknown dtype";
            return 0;
        }
        if (in->op == GS_OP_LEAF && (in->arg < 0 || in->arg >= l->u.f.nleaves)) {
            *why = "program reads a leaf that does not exist";
            return 0;
        }
        if (depth < arity) {
            *why = "program underflows its stack";
            return 0;
        }
        depth += 1 - (arity == 0 ? 0 : arity);
        if (depth > GS_KERNEL_MAX_STACK) {
            *why = "program exceeds the stack depth limit";
            return 0;
        }
    }
    if (depth != 1) {
        *why = "program does not leave exactly one value";
        return 0;
    }
    return 1;
}

gs_status_t gs__layer_check(const gs_layer_t *l)
{
    const char *why = NULL;
    if (!gs__grid_check(&l->grid, &why)) goto bad;
    switch (l->kind) {
    case GS_LAYER_FUSED:
        if (l->u.f.terminal != GS_TERM_STORE && l->u.f.terminal != GS_TERM_REDUCE) {
            why = "unknown terminal";
            goto bad;
        }
        if (l->u.f.terminal == GS_TERM_REDUCE &&
            (l->u.f.redop < 0 || l->u.f.redop >= GS_RED_COUNT || l->u.f.red_axis < -1 ||
             l->u.f.red_axis >= l->grid.ndim)) {
            why = "bad reduction op or axis";
            goto bad;
        }
        if (l->u.f.nsrc < 0 || l->u.f.nsrc > GS_KERNEL_MAX_LEAVES ||
            (l->u.f.nsrc > 0 && l->u.f.srcs == NULL)) {
            why = "bad source count";
            goto bad;
        }
        for (int32_t i = 0; i < l->u.f.nsrc; i++)
            if (!gs__grid_check(&l->u.f.srcs[i], &why)) goto bad;
        if (l->u.f.nleaves < 0 || l->u.f.nleaves > GS_KERNEL_MAX_LEAVES) {
            why = "leaf count out of range";
            goto bad;
        }
        for (int32_t k = 0; k < l->u.f.nleaves; k++) {
            const gs__fleaf_t *lf = &l->u.f.leaves[k];
            if (!gs_leaf_kind_valid(lf->kind)) {
                why = "unknown leaf kind";
                goto bad;
            }
            if (lf->map.ndim < 0 || lf->map.ndim > GS_MAX_NDIM) {
                why = "leaf ndim out of range";
                goto bad;
            }
            if (lf->dtype < 0 || lf->dtype >= GS_DTYPE_COUNT ||
                (lf->kind != GS_LEAF_CHUNK && lf->dtype != GS_DTYPE_FLOAT64)) {
                why = "leaf has a bad dtype";
                goto bad;
            }
            if (lf->kind == GS_LEAF_CHUNK) {
                if (lf->src < 0 || lf->src >= l->u.f.nsrc ||
                    l->u.f.srcs[lf->src].ndim != lf->map.ndim) {
                    why = "chunk leaf refers to a bad source";
                    goto bad;
                }
            } else {
                int64_t size = 1;
                for (int32_t a = 0; a < lf->map.ndim; a++) {
                    if (lf->shape[a] < 0 || __builtin_mul_overflow(size, lf->shape[a], &size)) {
                        why = "leaf shape is invalid";
                        goto bad;
                    }
                }
            }
            for (int32_t a = 0; a < lf->map.ndim; a++) {
                if (lf->map.perm[a] < -1 || lf->map.perm[a] >= l->grid.ndim) {
                    why = "leaf map refers to a bad axis";
                    goto bad;
                }
            }
        }
        if (l->u.f.out_dtype < 0 || l->u.f.out_dtype >= GS_DTYPE_COUNT) {
            why = "unknown output dtype";
            goto bad;
        }
        if (l->u.f.terminal == GS_TERM_REDUCE && l->u.f.out_dtype != GS_DTYPE_FLOAT64 &&
            (l->u.f.out_dtype != GS_DTYPE_INT64 || !gs_redop_int_records(l->u.f.redop))) {
            why = "bad record dtype (float64, or int64 for sum, prod, min and max)";
            goto bad;
        }
        if (!gs__prog_check(l, &why)) goto bad;
        break;
    case GS_LAYER_COMBINE: {
        uint64_t nb = gs_grid_nblocks(&l->grid);
        if (l->u.c.redop < 0 || l->u.c.redop >= GS_RED_COUNT || (l->u.c.finalize & ~1) ||
            !isfinite(l->u.c.ddof) || l->u.c.nprev < 1 || l->u.c.split_every < 2 ||
            l->u.c.split_every > GS_KERNEL_MAX_COMBINE ||
            l->u.c.ngroups != (l->u.c.nprev + l->u.c.split_every - 1) / l->u.c.split_every ||
            nb > (uint64_t)INT64_MAX / (uint64_t)l->u.c.ngroups || l->u.c.out_dtype < 0 ||
            l->u.c.out_dtype >= GS_DTYPE_COUNT ||
            (l->u.c.rec_dtype != GS_DTYPE_FLOAT64 &&
             (l->u.c.rec_dtype != GS_DTYPE_INT64 || !gs_redop_int_records(l->u.c.redop)))) {
            why = "bad combine parameters";
            goto bad;
        }
        break;
    }
    case GS_LAYER_LITERAL:
        if (l->u.lit.data == NULL || l->u.lit.off == NULL) {
            why = "literal without data";
            goto bad;
        }
        break;
    case GS_LAYER_COPY:
        if (l->u.cp.dtype < 0 || l->u.cp.dtype >= GS_DTYPE_COUNT) {
            why = "unknown dtype";
            goto bad;
        }
        if (!gs__copy_check(l, &why)) goto bad;
        break;
    case GS_LAYER_FILE:
        if (!gs__file_check(l, &why)) goto bad;
        break;
    case GS_LAYER_LINALG:
        if (!gs__la_check(l, &why)) goto bad;
        break;
    case GS_LAYER_SLAB:
        if (!gs__slab_check(l, &why)) goto bad;
        break;
    case GS_LAYER_STENCIL:
        if (!gs__stencil_check(l, &why)) goto bad;
        break;
    case GS_LAYER_USER:
        if (!gs__user_check(l, &why)) goto bad;
        break;
    case GS_LAYER_SCAN:
        if (!gs__scan_check(l, &why)) goto bad;
        break;
    default:
        why = "unsupported layer kind";
        goto bad;
    }
    return GS_OK;
bad:
    return gs_error_set(GS_ERR_INVALID_PARAM, "invalid %s layer: %s", gs_layer_name(l), why);
}

/* ---- fused block resolution ---- */

gs_status_t gs__fused_resolve(const gs_layer_t *l, uint64_t block, gs__fres_t *r)
{
    const int32_t ond = l->grid.ndim;
    if (block >= gs_grid_nblocks(&l->grid))
        return gs_error_set(GS_ERR_INVALID_PARAM, "block %llu out of range for layer %s",
                            (unsigned long long)block, gs_layer_name(l));
    gs_grid_block_region(&l->grid, block, r->start, r->shape);
    r->empty = 0;
    for (int32_t j = 0; j < ond; j++)
        if (r->shape[j] == 0) r->empty = 1;
    r->ninputs = 0;
    for (int32_t k = 0; k < l->u.f.nleaves; k++) {
        const gs__fleaf_t *lf = &l->u.f.leaves[k];
        const gs__lmap_t *m = &lf->map;
        const gs_grid_t *g = lf->kind == GS_LEAF_CHUNK ? &l->u.f.srcs[lf->src] : NULL;
        int64_t cidx[GS_MAX_NDIM], ext[GS_MAX_NDIM], cc[GS_MAX_NDIM], rs;
        int64_t base = 0;
        r->leaf_slot[k] = -1;
        r->leaf_base[k] = 0;
        for (int32_t j = 0; j < GS_MAX_NDIM; j++) r->leaf_stride[k][j] = 0;
        if (r->empty) continue;   /* nothing is read: no inputs, no addressing */
        for (int32_t a = 0; a < m->ndim; a++) {
            int64_t c0, c1, lo, hi, size_a = g ? g->shape[a] : lf->shape[a];
            int32_t j = m->perm[a];
            if (j < 0) {
                c0 = c1 = m->off[a];
            } else {
                int64_t t0, t1;
                if (__builtin_mul_overflow(m->step[a], r->start[j], &t0) ||
                    __builtin_add_overflow(m->off[a], t0, &c0) ||
                    __builtin_mul_overflow(m->step[a], r->shape[j] - 1, &t1) ||
                    __builtin_add_overflow(c0, t1, &c1))
                    goto bad_range;
            }
            lo = c0 < c1 ? c0 : c1;
            hi = c0 < c1 ? c1 : c0;
            if (lo < 0 || hi >= size_a) goto bad_range;
            if (g != NULL) {
                int64_t ci = gs__grid_find(g, (int)a, c0);
                if (lo < g->bounds[a][ci] || hi >= g->bounds[a][ci + 1])
                    return gs_error_set(GS_ERR_INVALID_PARAM,
                                        "leaf %d of layer %s crosses a chunk boundary on axis %d",
                                        (int)k, gs_layer_name(l), (int)a);
                cidx[a] = ci;
                cc[a] = c0 - g->bounds[a][ci];
                ext[a] = g->bounds[a][ci + 1] - g->bounds[a][ci];
            } else {
                cc[a] = c0;
                ext[a] = size_a;
            }
        }
        /* row-major strides over the chunk (or the whole leaf array) */
        rs = 1;
        for (int32_t a = m->ndim - 1; a >= 0; a--) {
            int32_t j = m->perm[a];
            base += cc[a] * rs;
            if (j >= 0 && r->shape[j] > 1) {
                int64_t t;
                if (__builtin_mul_overflow(m->step[a], rs, &t) ||
                    __builtin_add_overflow(r->leaf_stride[k][j], t, &r->leaf_stride[k][j]))
                    goto bad_range;
            }
            rs *= ext[a];
        }
        r->leaf_base[k] = base;
        if (g != NULL) {
            uint64_t sb = gs__grid_block_index(g, cidx);
            int32_t slot = -1;
            for (int32_t i = 0; i < r->ninputs; i++)
                if (r->in_src[i] == lf->src && r->in_block[i] == sb) slot = i;
            if (slot < 0) {
                slot = r->ninputs++;
                r->in_src[slot] = lf->src;
                r->in_block[slot] = sb;
                r->in_len[slot] = rs;
            }
            r->leaf_slot[k] = slot;
        }
    }
    return GS_OK;
bad_range:
    return gs_error_set(GS_ERR_INVALID_PARAM, "a leaf of layer %s reads outside its array",
                        gs_layer_name(l));
}

int gs__fused_reads_chunks(const gs_layer_t *l)
{
    for (int32_t k = 0; k < l->u.f.nleaves; k++)
        if (l->u.f.leaves[k].kind == GS_LEAF_CHUNK) return 1;
    return 0;
}

int gs_layer_ninputs(const gs_layer_t *l, uint64_t block)
{
    if (block >= gs_layer_nblocks(l)) return -1;
    switch (l->kind) {
    case GS_LAYER_FUSED: {
        gs__fres_t r;
        /* generators only: no inputs whatever the block (its addressing is checked when it is
         * instantiated); tiny tasks ask this once each */
        if (!gs__fused_reads_chunks(l)) return 0;
        if (gs__fused_resolve(l, block, &r) != GS_OK) return -1;
        return r.ninputs;
    }
    case GS_LAYER_COMBINE: {
        int64_t g = (int64_t)(block % (uint64_t)l->u.c.ngroups);
        int64_t n = l->u.c.nprev - g * l->u.c.split_every;
        return (int)(n < l->u.c.split_every ? n : l->u.c.split_every);
    }
    case GS_LAYER_LITERAL:
        return 0;
    case GS_LAYER_COPY:
        return gs__copy_ninputs(l, block);
    case GS_LAYER_LINALG:
        return gs__la_ninputs(l, block);
    case GS_LAYER_FILE:
        return gs__file_ninputs(l);
    case GS_LAYER_SLAB:
        return 1;
    case GS_LAYER_STENCIL:
        return gs__copy_ninputs(l, block);
    case GS_LAYER_USER:
        return gs__user_ninputs(l, block);
    case GS_LAYER_SCAN:
        return gs__scan_ninputs(l, block);
    default:
        return -1;
    }
}

/* Records (or elements) of block @a block: COMBINE's outer region size. */
static int64_t gs__combine_nrec(const gs_layer_t *l, uint64_t block)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    gs_grid_block_region(&l->grid, block / (uint64_t)l->u.c.ngroups, start, shape);
    return gs_region_size(l->grid.ndim, shape);
}

uint64_t gs_layer_out_nbytes(const gs_layer_t *l, uint64_t block)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    if (block >= gs_layer_nblocks(l)) return 0;
    switch (l->kind) {
    case GS_LAYER_FUSED:
        gs_grid_block_region(&l->grid, block, start, shape);
        if (l->u.f.terminal == GS_TERM_REDUCE)
            return (uint64_t)gs__reduce_nrec(l->grid.ndim, shape, l->u.f.red_axis) *
                   (uint64_t)gs_redop_width((gs_redop_t)l->u.f.redop) * sizeof(double);
        return (uint64_t)gs_region_size(l->grid.ndim, shape) * gs_dtype_size(l->u.f.out_dtype);
    case GS_LAYER_COMBINE:
        if (l->u.c.finalize)
            return (uint64_t)gs__combine_nrec(l, block) * gs_dtype_size(l->u.c.out_dtype);
        return (uint64_t)gs__combine_nrec(l, block) *
               (uint64_t)gs_redop_width((gs_redop_t)l->u.c.redop) * sizeof(double);
    case GS_LAYER_COPY:
    case GS_LAYER_SLAB:
    case GS_LAYER_STENCIL:
        gs_grid_block_region(&l->grid, block, start, shape);
        return (uint64_t)gs_region_size(l->grid.ndim, shape) * gs_dtype_size(l->u.cp.dtype);
    case GS_LAYER_USER:   /* blocks of the kernel's output dtype, or a fused consumer's output */
        if (l->u.ub.fuse != NULL) return gs__ufuse_out_nbytes(l, block);
        gs_grid_block_region(&l->grid, block, start, shape);
        return (uint64_t)gs_region_size(l->grid.ndim, shape) * gs_dtype_size(l->u.ub.out_dtype);
    case GS_LAYER_LITERAL:
        gs_grid_block_region(&l->grid, block, start, shape);
        return (uint64_t)gs_region_size(l->grid.ndim, shape) * sizeof(double);
    case GS_LAYER_LINALG:
        return gs__la_out_nbytes(l, block);
    case GS_LAYER_FILE:
        return gs__file_out_nbytes(l, block);
    case GS_LAYER_SCAN:
        return gs__scan_out_nbytes(l, block);
    default:
        return 0;
    }
}

/* ---- instantiation ---- */

static gs_status_t gs__check_inputs(const gs_layer_t *l, uint64_t block, int ninputs,
                                    int expected, const gs_chunk_ref_t *inputs)
{
    if (ninputs != expected)
        return gs_error_set(GS_ERR_INVALID_PARAM, "block %llu of layer %s expects %d inputs, got %d",
                            (unsigned long long)block, gs_layer_name(l), expected, ninputs);
    if (ninputs > 0 && inputs == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "inputs are NULL");
    return GS_OK;
}

static gs_status_t gs__check_len(const gs_layer_t *l, int i, const gs_chunk_ref_t *in,
                                 int64_t expected)
{
    if (in->len != expected)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "input %d of a %s task has %lld elements, expected %lld", i,
                            gs_layer_name(l), (long long)in->len, (long long)expected);
    if (in->data == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "input %d of a %s task has no data", i,
                            gs_layer_name(l));
    return GS_OK;
}

/* Every check of a fused task (the block's addressing, the inputs): GS_OK means that
 * gs__fused_fill() with @a r_p cannot fail. */
static gs_status_t gs__fused_check(const gs_layer_t *l, uint64_t block, int ninputs,
                                   const gs_chunk_ref_t *inputs, gs__fres_t *r_p)
{
    gs__fres_t *r = r_p;   /* the caller's scratch: read only after GS_OK */
    gs_status_t st;
    if ((st = gs__fused_resolve(l, block, r)) != GS_OK) return st;
    if ((st = gs__check_inputs(l, block, ninputs, r->ninputs, inputs)) != GS_OK) return st;
    for (int i = 0; i < ninputs; i++) {
        int32_t dt = GS_DTYPE_FLOAT64;
        for (int32_t q = 0; q < l->u.f.nleaves; q++)
            if (r->leaf_slot[q] == i) dt = l->u.f.leaves[q].dtype;
        if (dt == GS_DTYPE_FLOAT64) {
            if ((st = gs__check_len(l, i, &inputs[i], r->in_len[i])) != GS_OK) return st;
        } else if (inputs[i].nbytes != (uint64_t)r->in_len[i] * gs_dtype_size(dt) ||
                   inputs[i].len != (int64_t)(inputs[i].nbytes / sizeof(double)) ||
                   inputs[i].data == NULL) {
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "input %d of a %s task has %llu bytes, expected %lld %s elements",
                                i, gs_layer_name(l), (unsigned long long)inputs[i].nbytes,
                                (long long)r->in_len[i], gs_dtype_name(dt));
        }
    }
    return GS_OK;
}

/* The kernel description of a checked fused task, written into @a k (fields it does not set are
 * left as they are: the caller clears them). */
static void gs__fused_fill(const gs_layer_t *l, const gs__fres_t *r, const gs_chunk_ref_t *inputs,
                           double *out, gs_kfused_t *k)
{
    const int32_t nd = l->grid.ndim;
    k->ndim = nd;
    for (int32_t j = 0; j < nd; j++) k->shape[j] = r->shape[j];
    k->nleaves = l->u.f.nleaves;
    for (int32_t i = 0; i < l->u.f.nleaves; i++) {
        const gs__fleaf_t *lf = &l->u.f.leaves[i];
        gs_kleaf_t *kl = &k->leaves[i];
        kl->kind = lf->kind;
        kl->base = r->leaf_base[i];
        for (int32_t j = 0; j < GS_MAX_NDIM; j++) kl->stride[j] = r->leaf_stride[i][j];
        kl->seed = lf->seed;
        kl->p0 = lf->p0;
        kl->p1 = lf->p1;
        kl->dtype = lf->dtype;
        if (lf->kind == GS_LEAF_CHUNK) {
            if (r->empty) {
                kl->kind = GS_LEAF_INDEX;   /* empty region: nothing is read */
                kl->dtype = GS_DTYPE_FLOAT64;   /* index leaves are float64 (a typed chunk
                                                   leaf's dtype would be rejected) */
            } else {
                kl->data = inputs[r->leaf_slot[i]].data;
                kl->data_len = lf->dtype == GS_DTYPE_FLOAT64
                                   ? inputs[r->leaf_slot[i]].len
                                   : (int64_t)(inputs[r->leaf_slot[i]].nbytes /
                                               gs_dtype_size((gs_dtype_t)lf->dtype));
            }
        }
    }
    k->nprog = l->u.f.nprog;
    memcpy(k->prog, l->u.f.prog, (size_t)l->u.f.nprog * sizeof(gs_kinstr_t));
    k->terminal = l->u.f.terminal;
    k->redop = l->u.f.terminal == GS_TERM_REDUCE ? l->u.f.redop : 0;
    k->red_axis = l->u.f.terminal == GS_TERM_REDUCE ? l->u.f.red_axis : -1;
    if (l->u.f.terminal == GS_TERM_REDUCE) {
        if (k->red_axis >= 0) {
            k->idx_base = r->start[k->red_axis];
        } else {
            int64_t rs = 1;
            k->idx_base = 0;
            for (int32_t j = nd - 1; j >= 0; j--) {
                k->idx_stride[j] = rs;
                k->idx_base += r->start[j] * rs;
                rs *= l->grid.shape[j];
            }
        }
    }
    k->out = out;
    k->out_dtype = l->u.f.out_dtype;
}

gs_status_t gs__fused_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                  const gs_chunk_ref_t *inputs, double *out, gs_kfused_t *k)
{
    gs__fres_t r;
    gs_status_t st;
    if ((st = gs__fused_check(l, block, ninputs, inputs, &r)) != GS_OK) return st;
    gs__fused_fill(l, &r, inputs, out, k);
    return GS_OK;
}

gs_status_t gs_layer_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_ktask_t *task_p)
{
    gs_ktask_t t;
    gs_status_t st;
    size_t used;
    if (l == NULL || task_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "NULL argument");
    if (block >= gs_layer_nblocks(l))
        return gs_error_set(GS_ERR_INVALID_PARAM, "block %llu out of range for layer %s (%llu blocks)",
                            (unsigned long long)block, gs_layer_name(l),
                            (unsigned long long)gs_layer_nblocks(l));
    if (out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "output buffer is NULL");
    /* gs_ktask_t is ~14 KB (the linear algebra member); a fused task uses ~2 KB of it: only
     * that part is cleared and copied out (tiny tasks run one instantiate each) */
    if (l->kind != GS_LAYER_FUSED) memset(&t, 0, sizeof(t));
    switch (l->kind) {
    case GS_LAYER_FUSED: {
        /* checked first; past the checks nothing fails, so the task is built in place (still
         * written only on success) without a second copy of its ~2 KB */
        gs__fres_t r;
        if ((st = gs__fused_check(l, block, ninputs, inputs, &r)) != GS_OK) return st;
        /* cleared: the header, the leaves the task has and the fields after the program;
         * not the unused leaves nor the program (copied for its nprog instructions), which no
         * backend reads past nleaves / nprog (~2 KB less to clear per tiny task) */
        {
            gs_kfused_t *k = &task_p->u.fused;
            used = offsetof(gs_ktask_t, u) + offsetof(gs_kfused_t, leaves);
            memset(task_p, 0, used);
            memset(k->leaves, 0, (size_t)l->u.f.nleaves * sizeof(k->leaves[0]));
            memset(&k->terminal, 0, sizeof(*k) - offsetof(gs_kfused_t, terminal));
        }
        task_p->kind = GS_KTASK_FUSED;
        gs__fused_fill(l, &r, inputs, out, &task_p->u.fused);
        return GS_OK;
    }
    case GS_LAYER_COMBINE: {
        int expected = gs_layer_ninputs(l, block);
        int64_t nrec = gs__combine_nrec(l, block);
        int64_t w = gs_redop_width((gs_redop_t)l->u.c.redop);
        if ((st = gs__check_inputs(l, block, ninputs, expected, inputs)) != GS_OK) return st;
        t.kind = GS_KTASK_COMBINE;
        t.u.combine.redop = l->u.c.redop;
        t.u.combine.finalize = l->u.c.finalize;
        t.u.combine.ddof = l->u.c.ddof;
        t.u.combine.nrec = nrec;
        t.u.combine.ninputs = ninputs;
        for (int i = 0; i < ninputs; i++) {
            if ((st = gs__check_len(l, i, &inputs[i], nrec * w)) != GS_OK) return st;
            t.u.combine.inputs[i] = inputs[i].data;
        }
        t.u.combine.out = out;
        t.u.combine.out_dtype = l->u.c.out_dtype;
        t.u.combine.rec_dtype = l->u.c.rec_dtype;
        break;
    }
    case GS_LAYER_LITERAL:
        if ((st = gs__check_inputs(l, block, ninputs, 0, inputs)) != GS_OK) return st;
        t.kind = GS_KTASK_HOST_DATA;
        t.u.host.data = l->u.lit.data + l->u.lit.off[block];
        t.u.host.len = l->u.lit.off[block + 1] - l->u.lit.off[block];
        t.u.host.out = out;
        break;
    case GS_LAYER_COPY:
        t.kind = GS_KTASK_COPY;
        if ((st = gs__copy_instantiate(l, block, ninputs, inputs, out, &t.u.copy)) != GS_OK)
            return st;
        break;
    case GS_LAYER_LINALG:
        if ((st = gs__la_instantiate(l, block, ninputs, inputs, out, &t)) != GS_OK) return st;
        break;
    case GS_LAYER_FILE:
        if ((st = gs__file_instantiate(l, block, ninputs, inputs, out, &t)) != GS_OK) return st;
        break;
    case GS_LAYER_SLAB:
        t.kind = GS_KTASK_COPY;
        if ((st = gs__slab_instantiate(l, block, ninputs, inputs, out, &t.u.copy)) != GS_OK)
            return st;
        break;
    case GS_LAYER_STENCIL:
        t.kind = GS_KTASK_STENCIL;
        if ((st = gs__stencil_instantiate(l, block, ninputs, inputs, out, &t.u.stencil)) != GS_OK)
            return st;
        break;
    case GS_LAYER_USER:
        if (l->u.ub.fuse != NULL) {
            t.kind = GS_KTASK_MAPFUSED;
            st = gs__ufuse_instantiate(l, block, ninputs, inputs, out, &t.u.mapfused);
        } else {
            t.kind = GS_KTASK_USER;
            st = gs__user_instantiate(l, block, ninputs, inputs, out, &t.u.user);
        }
        if (st != GS_OK) return st;
        break;
    case GS_LAYER_SCAN:
        t.kind = GS_KTASK_SCAN;
        if ((st = gs__scan_instantiate(l, block, ninputs, inputs, out, &t.u.scan)) != GS_OK)
            return st;
        break;
    default:
        return gs_error_set(GS_ERR_UNSUPPORTED, "layer kind %d cannot be instantiated",
                            (int)l->kind);
    }
    *task_p = t;
    return GS_OK;
}
