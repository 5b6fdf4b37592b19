/* FILE layers: reading chunks of an array file, writing chunks into one, and committing the
 * written file (graph_internal.h, gs__fspec_t). The layer carries the file's description; the
 * worker does the I/O (chunkops/fileio.c) from the gs_kfile_t this file instantiates.
 *
 * Wire body (layer_codec.c: FILE := [1, 5, grid, body]):
 *   body := [op, path, tmp | nil, fdtype, swap, forder, offset, [fshape...], [off...],
 *            [step...], [perm...], hdr (bin), expect, fmt, zver, zcodec, zlevel, zsep,
 *            [zchunk...], fill]
 * A READ layer's blocks hold elements of fdtype (the file's dtype is the array's; big-endian
 * files are byte-swapped as they are read); WRITE writes its input, of fdtype, little-endian.
 * The check is total over decoded input: a layer naming a file region outside the file's
 * shape, an unknown dtype or a path with a NUL byte is rejected before any task reads it. */
#include "graph/file_int.h"

#include <string.h>

/* ---- specs ---- */

void gs__fspec_free(gs__fspec_t *f)
{
    if (f == NULL) return;
    gs_free(f->path);
    gs_free(f->tmp);
    gs_free(f->hdr);
    gs_free(f);
}

gs__fspec_t *gs__fspec_dup(const gs__fspec_t *f)
{
    gs__fspec_t *d = gs_malloc(sizeof(*d), "file spec");
    if (d == NULL) return NULL;
    *d = *f;
    d->path = d->tmp = NULL;
    d->hdr = NULL;
    d->path = gs_strdup(f->path ? f->path : "", "file path");
    if (f->tmp != NULL) d->tmp = gs_strdup(f->tmp, "file path");
    if (f->hdr_len > 0) {
        d->hdr = gs_malloc((size_t)f->hdr_len, "file header");
        if (d->hdr != NULL) memcpy(d->hdr, f->hdr, (size_t)f->hdr_len);
    }
    if (d->path == NULL || (f->tmp != NULL && d->tmp == NULL) ||
        (f->hdr_len > 0 && d->hdr == NULL)) {
        gs__fspec_free(d);
        return NULL;
    }
    return d;
}

int64_t gs__fspec_nelems(const gs__fspec_t *f)
{
    return gs_region_size(f->fndim, f->fshape);
}

/* Flat element strides of the file's axes (C or Fortran order). */
static void gs__fspec_strides(const gs__fspec_t *f, int64_t *fs)
{
    int64_t s = 1;
    if (f->forder) {
        for (int32_t a = 0; a < f->fndim; a++) {
            fs[a] = s;
            s *= f->fshape[a];
        }
    } else {
        for (int32_t a = f->fndim - 1; a >= 0; a--) {
            fs[a] = s;
            s *= f->fshape[a];
        }
    }
}

int gs__fspec_check(const gs__fspec_t *f, const gs_grid_t *grid, const char **why)
{
    int64_t n = 1, nz = 1, zv = 1;
    if (f->op < 0 || f->op >= GS__FILE_OP_COUNT) return *why = "unknown file operation", 0;
    if (f->path == NULL || f->path[0] == '\0') return *why = "file layer without a path", 0;
    if ((f->op != GS__FILE_READ) != (f->tmp != NULL && f->tmp[0] != '\0'))
        return *why = "file layer: a temporary name exactly when writing", 0;
    if (f->fdtype < 0 || f->fdtype >= GS_DTYPE_COUNT) return *why = "file dtype unknown", 0;
    if ((f->swap & ~1) || (f->forder & ~1)) return *why = "file flags out of range", 0;
    if (f->op != GS__FILE_READ && f->swap) return *why = "files are written little-endian", 0;
    if (f->offset < 0 || f->fndim < 0 || f->fndim > GS_MAX_NDIM)
        return *why = "file offset or ndim out of range", 0;
    for (int32_t a = 0; a < f->fndim; a++) {
        if (f->fshape[a] < 0) return *why = "negative file shape", 0;
        /* the nonzero axes too: the strides of an empty file's other axes multiply them */
        if (f->fshape[a] > 0 && nz > GS__MAX_ELEMENTS / f->fshape[a])
            return *why = "file too large", 0;
        if (f->fshape[a] > 0) nz *= f->fshape[a];
        n *= f->fshape[a];
    }
    if (f->offset > INT64_MAX / 2 - n * (int64_t)gs_dtype_size((gs_dtype_t)f->fdtype))
        return *why = "file offset too large", 0;
    if (f->hdr_len < 0 || (f->hdr_len > 0 && f->hdr == NULL) ||
        (f->fmt == GS_KFILE_RAW && f->hdr_len > f->offset) || f->hdr_len > (1 << 24))
        return *why = "file header does not fit before the data", 0;
    if (f->fmt < 0 || f->fmt >= GS_KFILE_FMT_COUNT) return *why = "unknown file format", 0;
    if (f->fmt == GS_KFILE_ZARR) {
        if ((f->zver != 2 && f->zver != 3) || f->zcodec < 0 || f->zcodec >= GS_ZCODEC_COUNT ||
            (f->zsep != '.' && f->zsep != '/') || f->zlevel < -131072 || f->zlevel > 22)
            return *why = "bad zarr parameters", 0;
        for (int32_t a = 0; a < f->fndim; a++)
            if (f->zchunk[a] < 1 || f->zchunk[a] > GS__MAX_ELEMENTS ||
                (f->fshape[a] > 0 && f->zchunk[a] > f->fshape[a] && f->zchunk[a] > 1 << 30))
                return *why = "bad zarr chunk shape", 0;
        for (int32_t a = 0; a < f->fndim; a++)   /* each >= 1 (above) */
            if (__builtin_mul_overflow(zv, f->zchunk[a], &zv) || zv > (int64_t)1 << 31)
                return *why = "zarr chunks of more than 2^31 elements", 0;
    }
    if (f->op == GS__FILE_COMMIT) {
        if (grid->ndim != 0) return *why = "file commit layer must have one block", 0;
        if (!(f->expect >= 0) || f->expect > 9.0e18) return *why = "bad byte count", 0;
        return 1;
    }
    if (f->map.ndim != f->fndim) return *why = "file map ndim differs from the file's", 0;
    for (int32_t a = 0; a < f->fndim; a++) {
        int32_t j = f->map.perm[a];
        int64_t lo, hi, ext;
        if (j < -1 || j >= grid->ndim) return *why = "file map axis out of range", 0;
        /* slices and transposes map each array axis from one file axis at most (the zarr
         * reader walks a chunk's box one file axis per array axis) */
        for (int32_t b = 0; b < a && j >= 0; b++)
            if (f->map.perm[b] == j) return *why = "file map reads one array axis twice", 0;
        ext = j < 0 ? 1 : grid->shape[j];
        if (ext == 0) continue;
        if (j < 0) {
            lo = hi = f->map.off[a];
        } else {
            int64_t s = f->map.step[a];
            if (s > GS__MAX_ELEMENTS || s < -GS__MAX_ELEMENTS) return *why = "file step too large", 0;
            lo = f->map.off[a];
            /* a step near the limit times a long axis leaves int64: outside any file */
            if (__builtin_mul_overflow(s, ext - 1, &hi) || __builtin_add_overflow(hi, lo, &hi))
                return *why = "file region outside the file's shape", 0;
        }
        if (lo < 0 || hi < 0 || lo >= f->fshape[a] || hi >= f->fshape[a])
            return *why = "file region outside the file's shape", 0;
    }
    if (f->op == GS__FILE_WRITE) {
        /* a written array covers the whole file, each element once */
        for (int32_t a = 0; a < f->fndim; a++)
            if (f->map.perm[a] != a || f->map.off[a] != 0 || f->map.step[a] != 1 ||
                grid->ndim != f->fndim || grid->shape[a] != f->fshape[a])
                return *why = "a file write must cover the file exactly", 0;
        if (f->fmt == GS_KFILE_ZARR) {
            for (int32_t a = 0; a < grid->ndim; a++)
                for (int64_t k = 0; k < grid->nchunks[a]; k++)
                    if (grid->bounds[a][k] != k * f->zchunk[a] ||
                        grid->bounds[a][k + 1] - grid->bounds[a][k] > f->zchunk[a])
                        return *why = "zarr writes need compute chunks equal to zarr chunks", 0;
        }
    }
    return 1;
}

/* ---- layer accessors ---- */

void gs__file_free(gs_layer_t *l)
{
    gs__fspec_free(l->u.file.spec);
    l->u.file.spec = NULL;
}

const char *gs__file_name(const gs_layer_t *l)
{
    static const char *const names[GS__FILE_OP_COUNT] = {"file-read", "file-write", "file-commit"};
    int32_t op = l->u.file.spec ? l->u.file.spec->op : -1;
    return op >= 0 && op < GS__FILE_OP_COUNT ? names[op] : "file";
}

int gs__file_ninputs(const gs_layer_t *l)
{
    return l->u.file.spec->op == GS__FILE_READ ? 0 : 1;
}

uint64_t gs__file_out_nbytes(const gs_layer_t *l, uint64_t block)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    if (l->u.file.spec->op != GS__FILE_READ) return sizeof(double);
    gs_grid_block_region(&l->grid, block, start, shape);
    return (uint64_t)gs_region_size(l->grid.ndim, shape) *
           gs_dtype_size((gs_dtype_t)l->u.file.spec->fdtype);
}

int gs__file_check(const gs_layer_t *l, const char **why)
{
    if (l->u.file.spec == NULL) return *why = "file layer without a spec", 0;
    return gs__fspec_check(l->u.file.spec, &l->grid, why);
}

gs_status_t gs__file_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_ktask_t *t)
{
    const gs__fspec_t *f = l->u.file.spec;
    gs_kfile_t *k = &t->u.file;
    int64_t start[GS_MAX_NDIM], fs[GS_MAX_NDIM];
    int expect = gs__file_ninputs(l);
    if (ninputs != expect || (expect > 0 && (inputs == NULL || inputs[0].data == NULL)))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s task %llu: %d inputs, expected %d",
                            gs__file_name(l), (unsigned long long)block, ninputs, expect);
    memset(k, 0, sizeof(*k));
    k->path = f->path;
    k->tmp = f->tmp;
    k->fdtype = f->fdtype;
    k->swap = f->swap;
    k->offset = f->offset;
    k->nelems = gs__fspec_nelems(f);
    k->out = out;
    k->fmt = f->fmt;
    k->forder = f->forder;
    k->fndim = f->fndim;
    k->zver = f->zver;
    k->zcodec = f->zcodec;
    k->zlevel = f->zlevel;
    k->zsep = (char)f->zsep;
    k->fill = f->fill;
    memcpy(k->fshape, f->fshape, sizeof(k->fshape));
    memcpy(k->zchunk, f->zchunk, sizeof(k->zchunk));
    if (f->op == GS__FILE_COMMIT) {
        if (inputs[0].len != 1)
            return gs_error_set(GS_ERR_INVALID_PARAM, "file commit: input of %lld elements",
                                (long long)inputs[0].len);
        t->kind = GS_KTASK_FILE_COMMIT;
        k->in = inputs[0].data;
        k->nin = 1;
        k->hdr = f->hdr;
        k->hdr_len = f->hdr_len;
        k->expect = f->expect;
        return GS_OK;
    }
    gs_grid_block_region(&l->grid, block, start, k->shape);
    k->ndim = l->grid.ndim;
    gs__fspec_strides(f, fs);
    k->base = 0;
    /* an empty read reads nothing: its map is not checked (gs__fspec_check skips the axes of
     * extent 0: any offset and step), so it is not applied either (base, strides stay 0).
     * Writes cover the file exactly (identity map, checked) */
    const int skip = f->op == GS__FILE_READ && gs_region_size(k->ndim, k->shape) == 0;
    for (int32_t a = 0; a < f->fndim && !skip; a++) {
        int32_t j = f->map.perm[a];
        /* along an axis of the array of extent 1 the step is not checked (any step reads the
         * one element off): it is not applied, as it moves nothing */
        int64_t step = j < 0 || l->grid.shape[j] <= 1 ? 0 : f->map.step[a];
        k->base += fs[a] * (f->map.off[a] + (j < 0 ? 0 : step * start[j]));
        if (j >= 0) k->stride[j] += fs[a] * step;
        k->fbase[a] = f->map.off[a] + (j < 0 ? 0 : step * start[j]);
        k->fstep[a] = step;
        k->fperm[a] = j;
    }
    if (f->op == GS__FILE_WRITE) {
        int64_t n = gs_region_size(k->ndim, k->shape);
        uint64_t want = (uint64_t)n * gs_dtype_size((gs_dtype_t)f->fdtype);
        if (inputs[0].nbytes != want)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "file write task %llu: input of %llu bytes, expected %llu (%lld "
                                "elements of %s)", (unsigned long long)block,
                                (unsigned long long)inputs[0].nbytes, (unsigned long long)want,
                                (long long)n, gs_dtype_name((gs_dtype_t)f->fdtype));
        t->kind = GS_KTASK_FILE_WRITE;
        k->path = f->tmp;
        k->in = inputs[0].data;
        k->nin = n;
    } else {
        t->kind = GS_KTASK_FILE_READ;
    }
    return GS_OK;
}

/* ---- codec ---- */

static void gs__enc_i64s(gs_mp_writer_t *w, int32_t n, const int64_t *v)
{
    gs_mp_write_array(w, (uint32_t)n);
    for (int32_t i = 0; i < n; i++) gs_mp_write_i64(w, v[i]);
}

void gs__file_encode_body(gs_mp_writer_t *w, const gs_layer_t *l)
{
    const gs__fspec_t *f = l->u.file.spec;
    int64_t perm[GS_MAX_NDIM];
    gs_mp_write_array(w, 20);
    gs_mp_write_i64(w, f->op);
    gs_mp_write_str(w, f->path, strlen(f->path));
    if (f->tmp != NULL) gs_mp_write_str(w, f->tmp, strlen(f->tmp));
    else gs_mp_write_nil(w);
    gs_mp_write_i64(w, f->fdtype);
    gs_mp_write_bool(w, f->swap);
    gs_mp_write_bool(w, f->forder);
    gs_mp_write_i64(w, f->offset);
    gs__enc_i64s(w, f->fndim, f->fshape);
    gs__enc_i64s(w, f->map.ndim, f->map.off);
    gs__enc_i64s(w, f->map.ndim, f->map.step);
    for (int32_t a = 0; a < f->map.ndim; a++) perm[a] = f->map.perm[a];
    gs__enc_i64s(w, f->map.ndim, perm);
    gs_mp_write_bin(w, f->hdr, (size_t)f->hdr_len);
    gs_mp_write_f64(w, f->expect);
    gs_mp_write_i64(w, f->fmt);
    gs_mp_write_i64(w, f->zver);
    gs_mp_write_i64(w, f->zcodec);
    gs_mp_write_i64(w, f->zlevel);
    gs_mp_write_i64(w, f->zsep);
    gs__enc_i64s(w, f->fmt == GS_KFILE_ZARR ? f->fndim : 0, f->zchunk);
    gs_mp_write_f64(w, f->fill);
}

static int gs__dec_i64s(gs_mp_reader_t *r, int32_t *n_p, int64_t *v)
{
    uint32_t n;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n > GS_MAX_NDIM) return gs_mp_fail(r, "file ndim out of range");
    for (uint32_t i = 0; i < n; i++)
        if (!gs_mp_read_i64(r, &v[i])) return 0;
    *n_p = (int32_t)n;
    return 1;
}

/* A string as an owned, NUL-terminated copy; strings holding NUL bytes are refused. */
static int gs__dec_path(gs_mp_reader_t *r, char **s_p)
{
    const char *s;
    uint32_t len;
    if (!gs_mp_read_str(r, &s, &len)) return 0;
    if (len == 0 || len > GS__FILE_PATH_MAX || memchr(s, '\0', len) != NULL)
        return gs_mp_fail(r, "file path empty, too long or holding a NUL byte");
    *s_p = gs_malloc((size_t)len + 1, "file path");
    if (*s_p == NULL) {
        r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a file layer");
        return 0;
    }
    memcpy(*s_p, s, len);
    (*s_p)[len] = '\0';
    return 1;
}

int gs__file_decode_body(gs_mp_reader_t *r, gs_layer_t *l)
{
    gs__fspec_t *f;
    uint32_t n, hl;
    int swap, forder;
    int32_t n1 = 0, n2 = 0, n3 = 0, nz = 0; /* set by gs__dec_i64s on success */
    int64_t perm[GS_MAX_NDIM];
    const uint8_t *hdr;
    if (!gs_mp_read_array(r, &n)) return 0;
    if (n != 20) return gs_mp_fail(r, "file layer must have 20 fields");
    f = gs_calloc(1, sizeof(*f), "file spec");
    if (f == NULL) {
        r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a file layer");
        return 0;
    }
    l->u.file.spec = f;
    if (!gs_mp_read_i32(r, &f->op) || !gs__dec_path(r, &f->path)) return 0;
    if (r->p < r->end && *r->p == 0xc0) {
        if (!gs_mp_read_nil(r)) return 0;
    } else if (!gs__dec_path(r, &f->tmp)) {
        return 0;
    }
    if (!gs_mp_read_i32(r, &f->fdtype) || !gs_mp_read_bool(r, &swap) ||
        !gs_mp_read_bool(r, &forder) || !gs_mp_read_i64(r, &f->offset) ||
        !gs__dec_i64s(r, &f->fndim, f->fshape) || !gs__dec_i64s(r, &n1, f->map.off) ||
        !gs__dec_i64s(r, &n2, f->map.step) || !gs__dec_i64s(r, &n3, perm) ||
        !gs_mp_read_bin(r, &hdr, &hl) || !gs_mp_read_f64(r, &f->expect) ||
        !gs_mp_read_i32(r, &f->fmt) || !gs_mp_read_i32(r, &f->zver) ||
        !gs_mp_read_i32(r, &f->zcodec) || !gs_mp_read_i32(r, &f->zlevel) ||
        !gs_mp_read_i32(r, &f->zsep) || !gs__dec_i64s(r, &nz, f->zchunk) ||
        !gs_mp_read_f64(r, &f->fill))
        return 0;
    if (nz != (f->fmt == GS_KFILE_ZARR ? f->fndim : 0))
        return gs_mp_fail(r, "zarr chunk shape does not match the file's ndim");
    if (n1 != n2 || n1 != n3) return gs_mp_fail(r, "file map arrays differ in length");
    f->swap = swap;
    f->forder = forder;
    f->map.ndim = n1;
    for (int32_t a = 0; a < n1; a++) {
        if (perm[a] < -1 || perm[a] >= GS_MAX_NDIM) return gs_mp_fail(r, "file map axis out of range");
        f->map.perm[a] = (int32_t)perm[a];
    }
    if (hl > 0) {
        f->hdr = gs_malloc(hl, "file header");
        if (f->hdr == NULL) {
            r->err = gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a file layer");
            return 0;
        }
        memcpy(f->hdr, hdr, hl);
    }
    f->hdr_len = hl;
    return 1;
}
