/* Layer wire format (msgpack, through proto/mp.h). Version 2 (written; version 1, read too, is
 * the same without the compact grid axis):
 *
 *   layer   := [version, kind, body...]
 *   FUSED   := [v, 0, grid, terminal, redop, red_axis, [grid...] (chunk sources),
 *               [leaf...], [instr...]]
 *   COMBINE := [v, 1, grid (outer), redop, finalize (bool), ddof, nprev, split_every]
 *   LITERAL := [v, 2, grid, bin (chunk-ordered float64, little-endian)]
 *   COPY    := [v, 3, grid, [block...]]  (one entry per block of grid; layer_copy.c)
 *   block   := [[in_len...], [piece...]]
 *   piece   := [slot, base, [stride...], [dst...], [size...]]  (ndim entries each)
 *   LINALG  := [v, 4, grid, [lablock...]]  (one entry per block of grid; layer_linalg.c)
 *   lablock := [op, m, n, alpha, [in_len...], [view...]]
 *   view    := [slot, trans, off, rows, cols, ld]
 *   FILE    := [v, 5, grid, body]  (layer_file.c)
 *   SCAN    := [v, 9, grid, [op, mode, axis, chain, in_dtype, out_dtype, src grid]]
 *              (layer_scan.c)
 *   grid    := [[shape...], [axis 0, axis 1, ...]]
 *   axis    := [bounds...]  (nchunks + 1 entries from 0 to the shape), or
 *              [chunk]      (a regular axis: every chunk `chunk` wide but the last, which ends
 *                            at the shape; written for every such axis of a positive shape with
 *                            at most GS__GRID_COMPACT_MAX chunks, so a layer of a million chunks
 *                            along an axis costs one integer there instead of a million)
 *   leaf    := [kind, src, [off...], [step...], [perm...], [shape...], seed, p0, p1]
 *              (ndim = len(off); shape has ndim entries for random/index leaves, 0 for chunk)
 *   instr   := [op, arg, imm]
 *
 * Dtypes (appended fields; a layer without them is all float64, and a layer whose dtypes are
 * all float64 is written without them, byte for byte as before):
 *   FUSED   := [v, 0, ... as above ..., out_dtype, [leaf dtype...], [instr dtype...]]
 *   COMBINE := [v, 1, ... as above ..., out_dtype]
 *   COMBINE := [v, 1, ... as above ..., out_dtype, rec_dtype]  (integer records only)
 *   COPY    := [v, 3, grid, [block...], dtype]
 *
 * Decoding is total: every read is bounds-checked and the result is checked semantically
 * (gs__layer_check) before it is returned, so a hostile layer cannot make instantiation read
 * out of bounds. */
#include "graph/graph_internal.h"
#include "graph/copy_int.h"
#include "graph/linalg_int.h"
#include "graph/file_int.h"
#include "graph/stencil_int.h"
#include "graph/scan_int.h"
#include "proto/mp.h"

#include <stdio.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the literal layer codec assumes a little-endian host"
#endif

/* Version 2 may hold compact grid axes ([chunk]); version 1 (before session 14) never does and is
 * still read. A decoder of version 1 only refuses a version-2 layer by its version, so a peer
 * built before the compact form reports "unsupported layer version 2" instead of a malformed
 * grid. */
#define GS__LAYER_VERSION 2
#define GS__LAYER_VERSION_MIN 1
/* At most this many chunks along one axis in the compact [chunk] form, and in all the compact
 * axes of one grid: a decoder materialises the bounds (8 bytes a chunk), so a few bytes of a
 * hostile layer cannot ask for more than 128 MiB of them per grid. Encoders write larger
 * regular axes with explicit bounds (whose size then bounds the decoder's allocation). */
#define GS__GRID_COMPACT_MAX ((int64_t)1 << 24)

/* ---- encode ---- */

static int gs__fused_typed(const gs_layer_t *l)
{
    int typed = l->u.f.out_dtype != GS_DTYPE_FLOAT64;
    for (int32_t k = 0; k < l->u.f.nleaves; k++) typed |= l->u.f.leaves[k].dtype != 0;
    for (int32_t i = 0; i < l->u.f.nprog; i++) typed |= l->u.f.prog[i].dtype != 0;
    return typed;
}

/* The chunk width of axis @a a when it is regular (every chunk that wide but the last, which
 * ends at the shape) and fits the compact form's budget @a *left (then reduced), else 0. */
static int64_t gs__grid_axis_regular(const gs_grid_t *g, int32_t a, int64_t *left)
{
    int64_t n = g->nchunks[a], shape = g->shape[a], c;
    const int64_t *b = g->bounds[a];
    if (shape <= 0 || n < 1 || n > *left || b[0] != 0 || b[n] != shape) return 0;
    c = b[1];
    if (c <= 0 || (shape - 1) / c + 1 != n) return 0;
    for (int64_t k = 1; k < n; k++)
        if (b[k] != k * c) return 0;
    *left -= n;
    return c;
}

void gs__enc_grid(gs_mp_writer_t *w, const gs_grid_t *g)
{
    int64_t left = GS__GRID_COMPACT_MAX;
    gs_mp_write_array(w, 2);
    gs_mp_write_array(w, (uint32_t)g->ndim);
    for (int32_t a = 0; a < g->ndim; a++) gs_mp_write_i64(w, g->shape[a]);
    gs_mp_write_array(w, (uint32_t)g->ndim);
    for (int32_t a = 0; a < g->ndim; a++) {
        int64_t c = gs__grid_axis_regular(g, a, &left);
        if (c > 0) {
            gs_mp_write_array(w, 1);
            gs_mp_write_i64(w, c);
            continue;
        }
        gs_mp_write_array(w, (uint32_t)(g->nchunks[a] + 1));
        gs_mp_write_i64s(w, g->bounds[a], (size_t)(g->nchunks[a] + 1));
    }
}

gs_status_t gs_layer_encode(const gs_layer_t *l, gs_buf_t *out)
{
    gs_mp_writer_t w;
    size_t old_len;
    if (l == NULL || out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "NULL argument");
    old_len = out->len;
    gs_mp_writer_init(&w, out);
    switch (l->kind) {
    case GS_LAYER_FUSED:
        gs_mp_write_array(&w, gs__fused_typed(l) ? 12 : 9);
        gs_mp_write_u64(&w, GS__LAYER_VERSION);
        gs_mp_write_u64(&w, (uint64_t)l->kind);
        gs__enc_grid(&w, &l->grid);
        gs_mp_write_i64(&w, l->u.f.terminal);
        gs_mp_write_i64(&w, l->u.f.redop);
        gs_mp_write_i64(&w, l->u.f.red_axis);
        gs_mp_write_array(&w, (uint32_t)l->u.f.nsrc);
        for (int32_t i = 0; i < l->u.f.nsrc; i++) gs__enc_grid(&w, &l->u.f.srcs[i]);
        gs_mp_write_array(&w, (uint32_t)l->u.f.nleaves);
        for (int32_t k = 0; k < l->u.f.nleaves; k++) {
            const gs__fleaf_t *lf = &l->u.f.leaves[k];
            uint32_t nd = (uint32_t)lf->map.ndim;
            gs_mp_write_array(&w, 9);
            gs_mp_write_i64(&w, lf->kind);
            gs_mp_write_i64(&w, lf->src);
            gs_mp_write_array(&w, nd);
            for (uint32_t a = 0; a < nd; a++) gs_mp_write_i64(&w, lf->map.off[a]);
            gs_mp_write_array(&w, nd);
            for (uint32_t a = 0; a < nd; a++) gs_mp_write_i64(&w, lf->map.step[a]);
            gs_mp_write_array(&w, nd);
            for (uint32_t a = 0; a < nd; a++) gs_mp_write_i64(&w, lf->map.perm[a]);
            if (lf->kind == GS_LEAF_CHUNK) {
                gs_mp_write_array(&w, 0);
            } else {
                gs_mp_write_array(&w, nd);
                for (uint32_t a = 0; a < nd; a++) gs_mp_write_i64(&w, lf->shape[a]);
            }
            gs_mp_write_u64(&w, lf->seed);
            gs_mp_write_f64(&w, lf->p0);
            gs_mp_write_f64(&w, lf->p1);
        }
        gs_mp_write_array(&w, (uint32_t)l->u.f.nprog);
        for (int32_t i = 0; i < l->u.f.nprog; i++) {
            gs_mp_write_array(&w, 3);
            gs_mp_write_i64(&w, l->u.f.prog[i].op);
            gs_mp_write_i64(&w, l->u.f.prog[i].arg);
            gs_mp_write_f64(&w, l->u.f.prog[i].imm);
        }
        if (gs__fused_typed(l)) {
            gs_mp_write_i64(&w, l->u.f.out_dtype);
            gs_mp_write_array(&w, (uint32_t)l->u.f.nleaves);
            for (int32_t k = 0; k < l->u.f.nleaves; k++) gs_mp_write_i64(&w, l->u.f.leaves[k].dtype);
            gs_mp_write_array(&w, (uint32_t)l->u.f.nprog);
            for (int32_t i = 0; i < l->u.f.nprog; i++) gs_mp_write_i64(&w, l->u.f.prog[i].dtype);
        }
        break;
    case GS_LAYER_COMBINE:
        gs_mp_write_array(&w, l->u.c.rec_dtype != GS_DTYPE_FLOAT64   ? 10
                              : l->u.c.out_dtype != GS_DTYPE_FLOAT64 ? 9
                                                                     : 8);
        gs_mp_write_u64(&w, GS__LAYER_VERSION);
        gs_mp_write_u64(&w, (uint64_t)l->kind);
        gs__enc_grid(&w, &l->grid);
        gs_mp_write_i64(&w, l->u.c.redop);
        gs_mp_write_bool(&w, l->u.c.finalize);
        gs_mp_write_f64(&w, l->u.c.ddof);
        gs_mp_write_i64(&w, l->u.c.nprev);
        gs_mp_write_i64(&w, l->u.c.split_every);
        if (l->u.c.out_dtype != GS_DTYPE_FLOAT64 || l->u.c.rec_dtype != GS_DTYPE_FLOAT64)
            gs_mp_write_i64(&w, l->u.c.out_dtype);
        if (l->u.c.rec_dtype != GS_DTYPE_FLOAT64) gs_mp_write_i64(&w, l->u.c.rec_dtype);
        break;
    case GS_LAYER_LITERAL: {
        int64_t n = l->u.lit.off[gs_grid_nblocks(&l->grid)];
        gs_mp_write_array(&w, 4);
        gs_mp_write_u64(&w, GS__LAYER_VERSION);
        gs_mp_write_u64(&w, (uint64_t)l->kind);
        gs__enc_grid(&w, &l->grid);
        gs_mp_write_bin(&w, l->u.lit.data, (size_t)n * sizeof(double));
        break;
    }
    case GS_LAYER_COPY:
        gs_mp_write_array(&w, l->u.cp.dtype != GS_DTYPE_FLOAT64 ? 5 : 4);
        gs_mp_write_u64(&w, GS__LAYER_VERSION);
        gs_mp_write_u64(&w, (uint64_t)l->kind);
        gs__enc_grid(&w, &l->grid);
        gs__copy_encode_body(&w, l);
        if (l->u.cp.dtype != GS_DTYPE_FLOAT64) gs_mp_write_i64(&w, l->u.cp.dtype);
        break;
    case GS_LAYER_LINALG:
        gs_mp_write_array(&w, 4);
        gs_mp_write_u64(&w, GS__LAYER_VERSION);
        gs_mp_write_u64(&w, (uint64_t)l->kind);
        gs__enc_grid(&w, &l->grid);
        gs__la_encode_body(&w, l);
        break;
    case GS_LAYER_FILE:
    case GS_LAYER_SLAB:
    case GS_LAYER_STENCIL:
    case GS_LAYER_USER:
    case GS_LAYER_SCAN:
        gs_mp_write_array(&w, 4);
        gs_mp_write_u64(&w, GS__LAYER_VERSION);
        gs_mp_write_u64(&w, (uint64_t)l->kind);
        gs__enc_grid(&w, &l->grid);
        if (l->kind == GS_LAYER_FILE) gs__file_encode_body(&w, l);
        else if (l->kind == GS_LAYER_SLAB) gs__slab_encode_body(&w, l);
        else if (l->kind == GS_LAYER_STENCIL) gs__stencil_encode_body(&w, l);
        else if (l->kind == GS_LAYER_SCAN) gs__scan_encode_body(&w, l);
        else gs__user_encode_body(&w, l);
        break;
    default:
        return gs_error_set(GS_ERR_UNSUPPORTED, "cannot encode a layer of kind %d", (int)l->kind);
    }
    if (w.err != GS_OK) {
        out->len = old_len;
        return w.err;
    }
    return GS_OK;
}

/* ---- decode ---- */

static int gs__dec_i64_array(gs_mp_reader_t *r, uint32_t n_expect, int64_t *v, const char *what)
{
    uint32_t n;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n != n_expect) return gs_mp_fail(r, what);
    for (uint32_t i = 0; i < n; i++)
        if (!gs_mp_read_i64(r, &v[i])) return 0;
    return 1;
}

/* Decode a grid into @a g (zeroed by the caller); on failure the caller cleans it up. */
int gs__dec_grid(gs_mp_reader_t *r, gs_grid_t *g)
{
    uint32_t n, nd, nb;
    int64_t left = GS__GRID_COMPACT_MAX;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n != 2) return gs_mp_fail(r, "grid must have 2 fields");
    if (!gs_mp_read_array(r, &nd)) return 0;
    if (nd > GS_MAX_NDIM) return gs_mp_fail(r, "grid ndim out of range");
    g->ndim = (int32_t)nd;
    for (uint32_t a = 0; a < nd; a++)
        if (!gs_mp_read_i64(r, &g->shape[a])) return 0;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n != nd) return gs_mp_fail(r, "grid bounds count does not match ndim");
    for (uint32_t a = 0; a < nd; a++) {
        if (!gs_mp_read_array(r, &nb)) return 0;   /* count checked against remaining bytes */
        if (nb == 1) {
            /* a regular axis: [chunk] */
            int64_t c, shape = g->shape[a], nc;
            if (!gs_mp_read_i64(r, &c)) return 0;
            if (c <= 0 || shape <= 0)
                return gs_mp_fail(r, "regular grid axis needs a positive chunk and shape");
            nc = (shape - 1) / c + 1;
            if (nc > left) return gs_mp_fail(r, "regular grid axes have too many chunks");
            left -= nc;
            g->nchunks[a] = nc;
            g->bounds[a] = gs_malloc((size_t)(nc + 1) * sizeof(int64_t), "grid bounds");
            if (g->bounds[a] == NULL) {
                r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a grid");
                return 0;
            }
            for (int64_t k = 0; k < nc; k++) g->bounds[a][k] = k * c;
            g->bounds[a][nc] = shape;
            continue;
        }
        if (nb < 2) return gs_mp_fail(r, "grid axis without chunks");
        g->nchunks[a] = (int64_t)nb - 1;
        g->bounds[a] = gs_malloc((size_t)nb * sizeof(int64_t), "grid bounds");
        if (g->bounds[a] == NULL) {
            r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a grid");
            return 0;
        }
        for (uint32_t k = 0; k < nb; k++)
            if (!gs_mp_read_i64(r, &g->bounds[a][k])) return 0;
    }
    {
        const char *why;
        if (!gs__grid_check(g, &why)) return gs_mp_fail(r, why);
    }
    return 1;
}

static int gs__dec_i32(gs_mp_reader_t *r, int32_t *v)
{
    return gs_mp_read_i32(r, v);
}

/* The appended dtype fields of a FUSED layer (layer.c checks the values). */
static int gs__dec_fused_dtypes(gs_mp_reader_t *r, gs_layer_t *l)
{
    uint32_t n;
    if (!gs__dec_i32(r, &l->u.f.out_dtype)) return 0;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n != (uint32_t)l->u.f.nleaves) return gs_mp_fail(r, "leaf dtype count does not match");
    for (uint32_t k = 0; k < n; k++)
        if (!gs__dec_i32(r, &l->u.f.leaves[k].dtype)) return 0;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n != (uint32_t)l->u.f.nprog)
        return gs_mp_fail(r, "instruction dtype count does not match");
    for (uint32_t i = 0; i < n; i++)
        if (!gs__dec_i32(r, &l->u.f.prog[i].dtype)) return 0;
    return 1;
}

static int gs__dec_fused(gs_mp_reader_t *r, gs_layer_t *l)
{
    uint32_t n;
    if (!gs__dec_grid(r, &l->grid)) return 0;
    if (!gs__dec_i32(r, &l->u.f.terminal) || !gs__dec_i32(r, &l->u.f.redop) ||
        !gs__dec_i32(r, &l->u.f.red_axis))
        return 0;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n > GS_KERNEL_MAX_LEAVES) return gs_mp_fail(r, "too many chunk sources");
    l->u.f.srcs = gs_calloc(n ? n : 1, sizeof(gs_grid_t), "layer sources");
    if (l->u.f.srcs == NULL) {
        r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a layer");
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        l->u.f.nsrc = (int32_t)i + 1;   /* so cleanup frees the partial grid */
        if (!gs__dec_grid(r, &l->u.f.srcs[i])) return 0;
    }
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n > GS_KERNEL_MAX_LEAVES) return gs_mp_fail(r, "too many leaves");
    l->u.f.nleaves = (int32_t)n;
    for (uint32_t k = 0; k < n; k++) {
        gs__fleaf_t *lf = &l->u.f.leaves[k];
        uint32_t m, nd, ns;
        int64_t perm[GS_MAX_NDIM];
        if (!gs_mp_read_array(r, &m)) return 0;
        if (m != 9) return gs_mp_fail(r, "leaf must have 9 fields");
        if (!gs__dec_i32(r, &lf->kind) || !gs__dec_i32(r, &lf->src)) return 0;
        if (!gs_mp_read_array(r, &nd)) return 0;
        if (nd > GS_MAX_NDIM) return gs_mp_fail(r, "leaf ndim out of range");
        lf->map.ndim = (int32_t)nd;
        for (uint32_t a = 0; a < nd; a++)
            if (!gs_mp_read_i64(r, &lf->map.off[a])) return 0;
        if (!gs__dec_i64_array(r, nd, lf->map.step, "leaf step count does not match ndim") ||
            !gs__dec_i64_array(r, nd, perm, "leaf perm count does not match ndim"))
            return 0;
        for (uint32_t a = 0; a < nd; a++) {
            if (perm[a] < -1 || perm[a] >= GS_MAX_NDIM) return gs_mp_fail(r, "leaf perm out of range");
            lf->map.perm[a] = (int32_t)perm[a];
        }
        if (!gs_mp_read_array(r, &ns)) return 0;
        if (ns != (lf->kind == GS_LEAF_CHUNK ? 0u : nd))
            return gs_mp_fail(r, "leaf shape count does not match its kind");
        for (uint32_t a = 0; a < ns; a++)
            if (!gs_mp_read_i64(r, &lf->shape[a])) return 0;
        if (!gs_mp_read_u64(r, &lf->seed) || !gs_mp_read_f64(r, &lf->p0) ||
            !gs_mp_read_f64(r, &lf->p1))
            return 0;
    }
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n > GS_KERNEL_MAX_PROG) return gs_mp_fail(r, "program too long");
    l->u.f.nprog = (int32_t)n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t m;
        if (!gs_mp_read_array(r, &m)) return 0;
        if (m != 3) return gs_mp_fail(r, "instruction must have 3 fields");
        if (!gs__dec_i32(r, &l->u.f.prog[i].op) || !gs__dec_i32(r, &l->u.f.prog[i].arg) ||
            !gs_mp_read_f64(r, &l->u.f.prog[i].imm))
            return 0;
    }
    return 1;
}

static int gs__dec_combine(gs_mp_reader_t *r, gs_layer_t *l)
{
    int fin;
    if (!gs__dec_grid(r, &l->grid)) return 0;
    if (!gs__dec_i32(r, &l->u.c.redop) || !gs_mp_read_bool(r, &fin) ||
        !gs_mp_read_f64(r, &l->u.c.ddof) || !gs_mp_read_i64(r, &l->u.c.nprev) ||
        !gs__dec_i32(r, &l->u.c.split_every))
        return 0;
    l->u.c.finalize = fin ? 1 : 0;
    if (l->u.c.nprev < 1 || l->u.c.split_every < 2 || l->u.c.split_every > GS_KERNEL_MAX_COMBINE)
        return gs_mp_fail(r, "bad combine fan-in");
    l->u.c.ngroups = (l->u.c.nprev + l->u.c.split_every - 1) / l->u.c.split_every;
    return 1;
}

/* Blocks an empty literal may have (its offsets table: 8 bytes each). */
#define GS__LITERAL_MAX_EMPTY_BLOCKS 65536u

static int gs__dec_literal(gs_mp_reader_t *r, gs_layer_t *l)
{
    const uint8_t *p;
    uint32_t len;
    uint64_t nb;
    int64_t total = 0;
    if (!gs__dec_grid(r, &l->grid)) return 0;
    if (!gs_mp_read_bin(r, &p, &len)) return 0;
    if ((int64_t)len != gs__grid_size(&l->grid) * (int64_t)sizeof(double))
        return gs_mp_fail(r, "literal data size does not match its grid");
    nb = gs_grid_nblocks(&l->grid);
    /* a block per element at most (the offsets table is no larger than the data), but an
     * empty array has empty blocks: 3 x 0 in chunks of 2 x 1 is 2 of them */
    if (nb > (uint64_t)len / sizeof(double) + 1 && (len != 0 || nb > GS__LITERAL_MAX_EMPTY_BLOCKS))
        return gs_mp_fail(r, "literal has more blocks than elements");
    l->u.lit.off = gs_malloc((size_t)(nb + 1) * sizeof(int64_t), "literal offsets");
    l->u.lit.data = gs_malloc(len ? len : 1, "literal data");
    if (l->u.lit.off == NULL || l->u.lit.data == NULL) {
        r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a literal layer");
        return 0;
    }
    memcpy(l->u.lit.data, p, len);
    for (uint64_t b = 0; b < nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
        gs_grid_block_region(&l->grid, b, start, shape);
        l->u.lit.off[b] = total;
        total += gs_region_size(l->grid.ndim, shape);
    }
    l->u.lit.off[nb] = total;
    return 1;
}

gs_status_t gs_layer_decode(const void *data, size_t len, gs_layer_t **l_p)
{
    gs_mp_reader_t r;
    gs_layer_t *l = NULL;
    uint32_t n;
    uint64_t ver, kind;
    gs_status_t st;
    if (l_p == NULL || (data == NULL && len > 0))
        return gs_error_set(GS_ERR_INVALID_PARAM, "NULL argument");
    gs_mp_reader_init(&r, data, len);
    if (!gs_mp_read_array(&r, &n) || !gs_mp_read_u64(&r, &ver) || !gs_mp_read_u64(&r, &kind))
        goto err;
    if (ver < GS__LAYER_VERSION_MIN || ver > GS__LAYER_VERSION) {
        gs_mp_fail(&r, ver > GS__LAYER_VERSION
                           ? "unsupported layer version (newer than this build's: a peer built "
                             "from another gsched version)"
                           : "unsupported layer version");
        goto err;
    }
    if (kind >= GS_LAYER_KIND_COUNT) {
        gs_mp_fail(&r, "unsupported layer kind");
        goto err;
    }
    if (n != (kind == GS_LAYER_FUSED ? 9u : kind == GS_LAYER_COMBINE ? 8u : 4u) &&
        n != (kind == GS_LAYER_FUSED ? 12u : kind == GS_LAYER_COMBINE ? 9u
                                           : kind == GS_LAYER_COPY ? 5u : 4u) &&
        !(kind == GS_LAYER_COMBINE && n == 10u)) {
        gs_mp_fail(&r, "wrong number of layer fields");
        goto err;
    }
    l = gs__layer_new((int32_t)kind);
    if (l == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a layer");
    switch (kind) {
    case GS_LAYER_FUSED:
        if (!gs__dec_fused(&r, l) || (n == 12u && !gs__dec_fused_dtypes(&r, l))) goto err;
        break;
    case GS_LAYER_COMBINE:
        if (!gs__dec_combine(&r, l) || (n >= 9u && !gs__dec_i32(&r, &l->u.c.out_dtype)) ||
            (n == 10u && !gs__dec_i32(&r, &l->u.c.rec_dtype)))
            goto err;
        break;
    case GS_LAYER_COPY:
        if (!gs__dec_grid(&r, &l->grid) || !gs__copy_decode_body(&r, l) ||
            (n == 5u && !gs__dec_i32(&r, &l->u.cp.dtype)))
            goto err;
        break;
    case GS_LAYER_LINALG:
        if (!gs__dec_grid(&r, &l->grid) || !gs__la_decode_body(&r, l)) goto err;
        break;
    case GS_LAYER_FILE:
        if (!gs__dec_grid(&r, &l->grid) || !gs__file_decode_body(&r, l)) goto err;
        break;
    case GS_LAYER_SLAB:
        if (!gs__dec_grid(&r, &l->grid) || !gs__slab_decode_body(&r, l)) goto err;
        break;
    case GS_LAYER_STENCIL:
        if (!gs__dec_grid(&r, &l->grid) || !gs__stencil_decode_body(&r, l)) goto err;
        break;
    case GS_LAYER_USER:
        if (!gs__dec_grid(&r, &l->grid) || !gs__user_decode_body(&r, l)) goto err;
        break;
    case GS_LAYER_SCAN:
        if (!gs__dec_grid(&r, &l->grid) || !gs__scan_decode_body(&r, l)) goto err;
        break;
    default:
        if (!gs__dec_literal(&r, l)) goto err;
        break;
    }
    if (!gs_mp_at_end(&r)) {
        gs_mp_fail(&r, "trailing bytes after the layer");
        goto err;
    }
    if (gs__layer_check(l) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        gs_layer_free(l);
        return gs_error_set(GS_ERR_PROTO, "layer decode: %s", msg);
    }
    *l_p = l;
    return GS_OK;
err:
    st = r.err != GS_OK ? r.err : GS_ERR_PROTO;
    gs_layer_free(l);
    if (st != GS_ERR_NO_MEMORY) st = GS_ERR_PROTO;
    return st;
}
