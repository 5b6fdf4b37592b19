/* SCAN layers (gs_array_cumulative; scan_int.h): checks, inputs, instantiation to gs_kscan_t,
 * the wire body. Block b of a layer reads block b of its `src` grid (the same block
 * coordinates) and, past the first block along the axis, the running total before it: a block
 * of the carries layer (SCAN) or the previous block of this layer (a chained TOTAL). */
#include "graph/scan_int.h"

#include <string.h>

void gs__scan_free(gs_layer_t *l)
{
    gs_grid_cleanup(&l->u.sc.src);
}

const char *gs__scan_name(const gs_layer_t *l)
{
    const int prod = l->u.sc.op == GS_SCAN_PROD;
    if (l->u.sc.mode == GS_KSCAN_SCAN) return prod ? "cumprod" : "cumsum";
    if (l->u.sc.chain) return prod ? "cumprod-carry" : "cumsum-carry";
    return prod ? "cumprod-total" : "cumsum-total";
}

int gs__scan_check(const gs_layer_t *l, const char **why_p)
{
    const gs_grid_t *g = &l->grid, *s = &l->u.sc.src;
    const int32_t ax = l->u.sc.axis;
    if (l->u.sc.op < 0 || l->u.sc.op >= GS_SCAN_OP_COUNT || l->u.sc.mode < 0 ||
        l->u.sc.mode >= GS_KSCAN_MODE_COUNT || (l->u.sc.chain & ~1) ||
        (l->u.sc.chain && l->u.sc.mode != GS_KSCAN_TOTAL)) {
        *why_p = "unknown scan op or mode";
        return 0;
    }
    if (l->u.sc.in_dtype < 0 || l->u.sc.in_dtype >= GS_DTYPE_COUNT || l->u.sc.out_dtype < 0 ||
        l->u.sc.out_dtype >= GS_DTYPE_COUNT ||
        (l->u.sc.chain && l->u.sc.in_dtype != l->u.sc.out_dtype)) {
        *why_p = "bad scan dtypes";
        return 0;
    }
    if (!gs__grid_check(s, why_p)) return 0;
    if (g->ndim < 1 || s->ndim != g->ndim || ax < 0 || ax >= g->ndim) {
        *why_p = "scan axis or ndim out of range";
        return 0;
    }
    for (int32_t a = 0; a < g->ndim; a++) {
        if (a == ax && l->u.sc.mode == GS_KSCAN_TOTAL) {
            /* one unit chunk per src chunk, for the first nchunks of them */
            if (g->nchunks[a] > s->nchunks[a] || g->shape[a] != g->nchunks[a]) goto mismatch;
            for (int64_t k = 0; k <= g->nchunks[a]; k++)
                if (g->bounds[a][k] != k) goto mismatch;
            continue;
        }
        if (g->shape[a] != s->shape[a] || g->nchunks[a] != s->nchunks[a]) goto mismatch;
        for (int64_t k = 0; k <= g->nchunks[a]; k++)
            if (g->bounds[a][k] != s->bounds[a][k]) goto mismatch;
    }
    return 1;
mismatch:
    *why_p = "scan grid does not match its source grid";
    return 0;
}

uint64_t gs__scan_src_block(const gs_layer_t *l, uint64_t block)
{
    int64_t c[GS_MAX_NDIM];
    gs__grid_block_coords(&l->grid, block, c);
    return gs__grid_block_index(&l->u.sc.src, c);
}

int gs__scan_ninputs(const gs_layer_t *l, uint64_t block)
{
    int64_t c[GS_MAX_NDIM];
    if (l->u.sc.mode == GS_KSCAN_TOTAL && !l->u.sc.chain) return 1;
    gs__grid_block_coords(&l->grid, block, c);
    return c[l->u.sc.axis] > 0 ? 2 : 1;
}

uint64_t gs__scan_out_nbytes(const gs_layer_t *l, uint64_t block)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    gs_grid_block_region(&l->grid, block, start, shape);
    return (uint64_t)gs_region_size(l->grid.ndim, shape) * gs_dtype_size(l->u.sc.out_dtype);
}

static gs_status_t gs__scan_check_ref(const gs_layer_t *l, int i, const gs_chunk_ref_t *in,
                                      int64_t n, int32_t dt)
{
    const uint64_t want = (uint64_t)n * gs_dtype_size((gs_dtype_t)dt);
    /* len is the chunk's bytes / 8 (as workers and the evaluator pass it): checked too */
    if (in->data == NULL || in->nbytes != want || in->len != (int64_t)(want / sizeof(double)))
        return gs_error_set(GS_ERR_INVALID_PARAM, "input %d of a %s task has %llu bytes, "
                            "expected %lld %s elements", i, gs__scan_name(l),
                            (unsigned long long)in->nbytes, (long long)n,
                            gs_dtype_name((gs_dtype_t)dt));
    return GS_OK;
}

gs_status_t gs__scan_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_kscan_t *k)
{
    const int expected = gs__scan_ninputs(l, block);
    int64_t start[GS_MAX_NDIM];
    gs_status_t st;
    if (ninputs != expected || inputs == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "block %llu of a %s layer expects %d inputs, "
                            "got %d", (unsigned long long)block, gs__scan_name(l), expected,
                            ninputs);
    memset(k, 0, sizeof(*k));
    k->op = l->u.sc.op;
    k->mode = l->u.sc.mode;
    k->ndim = l->grid.ndim;
    k->axis = l->u.sc.axis;
    gs_grid_block_region(&l->u.sc.src, gs__scan_src_block(l, block), start, k->shape);
    k->in_len = gs_region_size(k->ndim, k->shape);
    k->in_dtype = l->u.sc.in_dtype;
    k->out_dtype = l->u.sc.out_dtype;
    if ((st = gs__scan_check_ref(l, 0, &inputs[0], k->in_len, k->in_dtype)) != GS_OK) return st;
    k->in = inputs[0].data;
    if (ninputs == 2) {
        gs_kscan_t slab = *k;
        slab.mode = GS_KSCAN_TOTAL;
        if ((st = gs__scan_check_ref(l, 1, &inputs[1], gs_kscan_out_len(&slab), k->out_dtype)) !=
            GS_OK)
            return st;
        k->init = inputs[1].data;
    }
    k->out = out;
    return GS_OK;
}

void gs__scan_encode_body(gs_mp_writer_t *w, const gs_layer_t *l)
{
    gs_mp_write_array(w, 7);
    gs_mp_write_i64(w, l->u.sc.op);
    gs_mp_write_i64(w, l->u.sc.mode);
    gs_mp_write_i64(w, l->u.sc.axis);
    gs_mp_write_i64(w, l->u.sc.chain);
    gs_mp_write_i64(w, l->u.sc.in_dtype);
    gs_mp_write_i64(w, l->u.sc.out_dtype);
    gs__enc_grid(w, &l->u.sc.src);
}

int gs__scan_decode_body(gs_mp_reader_t *r, gs_layer_t *l)
{
    uint32_t n;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n != 7) return gs_mp_fail(r, "scan body must have 7 fields");
    if (!gs_mp_read_i32(r, &l->u.sc.op) || !gs_mp_read_i32(r, &l->u.sc.mode) ||
        !gs_mp_read_i32(r, &l->u.sc.axis) || !gs_mp_read_i32(r, &l->u.sc.chain) ||
        !gs_mp_read_i32(r, &l->u.sc.in_dtype) || !gs_mp_read_i32(r, &l->u.sc.out_dtype))
        return 0;
    return gs__dec_grid(r, &l->u.sc.src);   /* gs_layer_free cleans a partial grid */
}
