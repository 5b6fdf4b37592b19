/* Array files as expression nodes: raw and .npy sources (read by the workers, chunk by chunk)
 * and the write expression behind gs_client_to_npy (graph/file_int.h). The client reads only
 * a .npy file's header; the data never passes through it. */
#include "graph/file_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

gs_status_t gs__array_file_node(gs__fspec_t *spec, const gs_grid_t *grid, gs_array_h in,
                                gs_array_h *out_p)
{
    struct gs_array *n = gs__array_node_new(GS__NODE_FILE, grid->ndim);
    gs_status_t st;
    const char *why;
    if (n == NULL) {
        gs__fspec_free(spec);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file array");
    }
    n->u.file = spec;
    /* a source is an array of the file's dtype; writes and commits give byte or chunk counts */
    n->dtype = spec->op == GS__FILE_READ ? spec->fdtype : GS_DTYPE_FLOAT64;
    if ((st = gs_grid_copy(&n->grid, grid)) != GS_OK) goto err_free;
    if ((st = gs__array_node_finish(n)) != GS_OK) goto err_free;
    if (spec->op != GS__FILE_WRITE && !gs__fspec_check(spec, grid, &why)) {
        st = gs_error_set(GS_ERR_INVALID_PARAM, "%s: %s", spec->path, why);
        goto err_free;
    }
    if (in != NULL) {
        n->in[0] = gs_array_retain(in);
        n->ninputs = 1;
    }
    *out_p = n;
    return GS_OK;
err_free:
    gs__array_node_free(n);
    return st;
}

/* Regular grid of @a ndim axes (chunks[a] >= 1 each, the last chunk shorter). */
static gs_status_t gs__file_grid(int ndim, const int64_t *shape, const int64_t *chunks,
                                 gs_grid_t *g)
{
    memset(g, 0, sizeof(*g));
    g->ndim = ndim;
    for (int a = 0; a < ndim; a++) {
        if (shape[a] < 0 || chunks == NULL || chunks[a] < 1)
            return gs_error_set(GS_ERR_INVALID_PARAM,
                                "axis %d: shape %lld and chunk %lld (chunks must be >= 1)", a,
                                (long long)shape[a], chunks ? (long long)chunks[a] : 0LL);
        g->shape[a] = shape[a];
        g->nchunks[a] = shape[a] == 0 ? 1 : (shape[a] + chunks[a] - 1) / chunks[a];
    }
    if (gs__grid_alloc(g) != GS_OK) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a grid");
    for (int a = 0; a < ndim; a++) {
        for (int64_t k = 0; k < g->nchunks[a]; k++) {
            int64_t b = k * chunks[a];
            g->bounds[a][k] = b < shape[a] ? b : shape[a];
        }
        g->bounds[a][g->nchunks[a]] = shape[a];
    }
    return GS_OK;
}

/* A READ node over the whole file described by @a spec (moved in). */
gs_status_t gs__file_source(gs__fspec_t *spec, const int64_t *chunks, gs_array_h *out_p)
{
    gs_grid_t g;
    gs_status_t st;
    spec->map.ndim = spec->fndim;
    for (int32_t a = 0; a < spec->fndim; a++) {
        spec->map.off[a] = 0;
        spec->map.step[a] = 1;
        spec->map.perm[a] = a;
    }
    if ((st = gs__file_grid(spec->fndim, spec->fshape, chunks, &g)) != GS_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", gs_last_error());
        st = gs_error_set(st, "%s: %s", spec->path, msg);
        gs__fspec_free(spec);
        return st;
    }
    st = gs__array_file_node(spec, &g, NULL, out_p);
    gs_grid_cleanup(&g);
    return st;
}

/* Size of the file at @a path; GS_ERR_IO naming it when it cannot be opened. */
static gs_status_t gs__file_size(const char *path, int64_t *size_p)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return gs_error_set(GS_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return gs_error_set(GS_ERR_IO, "%s: not a regular file", path);
    *size_p = (int64_t)sb.st_size;
    return GS_OK;
}

/* The file must hold the array's bytes: at least (raw: a region of a larger file is fine) or,
 * @a exact (.npy), exactly offset + elements * itemsize, so a header whose dtype or shape
 * disagrees with the data is an error rather than a misread. */
static gs_status_t gs__file_check_size(const gs__fspec_t *f, int exact)
{
    int64_t size = 0, need;
    gs_status_t st;
    size_t isz = gs_dtype_size((gs_dtype_t)f->fdtype);
    if ((st = gs__file_size(f->path, &size)) != GS_OK) return st;
    need = f->offset + gs__fspec_nelems(f) * (int64_t)isz;
    if (size < need)
        return gs_error_set(GS_ERR_IO, "%s is truncated: %lld bytes, the array needs %lld (%lld "
                            "elements of %s after %lld header bytes)", f->path, (long long)size,
                            (long long)need, (long long)gs__fspec_nelems(f),
                            gs_dtype_name((gs_dtype_t)f->fdtype), (long long)f->offset);
    if (exact && size != need)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: %lld bytes, but its header's dtype %s and "
                            "shape need %lld (%lld elements of %zu bytes after %lld header "
                            "bytes): the header disagrees with the data", f->path,
                            (long long)size, gs__npy_descr_of(f->fdtype), (long long)need,
                            (long long)gs__fspec_nelems(f), isz, (long long)f->offset);
    return GS_OK;
}

gs_status_t gs_array_from_raw(const char *path, gs_dtype_t dtype, int ndim, const int64_t *shape,
                              gs_order_t order, int64_t offset, const int64_t *chunks,
                              gs_array_h *out_p)
{
    return gs_array_from_raw_ex(path, dtype, GS_BYTEORDER_NATIVE, ndim, shape, order, offset,
                                chunks, out_p);
}

gs_status_t gs_array_from_raw_ex(const char *path, gs_dtype_t dtype, gs_byteorder_t byteorder,
                                 int ndim, const int64_t *shape, gs_order_t order,
                                 int64_t offset, const int64_t *chunks, gs_array_h *out_p)
{
    gs__fspec_t *f;
    gs_status_t st;
    if (out_p == NULL || path == NULL || (ndim > 0 && shape == NULL))
        return gs_error_set(GS_ERR_INVALID_PARAM, "from_raw: NULL argument");
    if (path[0] == '\0' || strlen(path) > GS__FILE_PATH_MAX)
        return gs_error_set(GS_ERR_INVALID_PARAM, "from_raw: empty or too long path");
    if (ndim < 0 || ndim > GS_MAX_NDIM)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: ndim %d out of range", path, ndim);
    if ((int)dtype < 0 || dtype >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unknown dtype %d", path, (int)dtype);
    if (order != GS_ORDER_C && order != GS_ORDER_F)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: order must be C or F", path);
    if (byteorder != GS_BYTEORDER_NATIVE && byteorder != GS_BYTEORDER_LITTLE &&
        byteorder != GS_BYTEORDER_BIG)
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "%s: byte order %d (GS_BYTEORDER_NATIVE, _LITTLE or _BIG)", path,
                            (int)byteorder);
    if (offset < 0) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: negative offset", path);
    f = gs_calloc(1, sizeof(*f), "file spec");
    if (f == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file array");
    f->op = GS__FILE_READ;
    f->path = gs_strdup(path, "file path");
    if (f->path == NULL) {
        gs__fspec_free(f);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file array");
    }
    f->fdtype = (int32_t)dtype;
    /* swapped as read when big-endian: this build runs on little-endian hosts (as the .npy
     * reader's; chunkops/fileio.c checks); one-byte dtypes have no byte order */
    f->swap = byteorder == GS_BYTEORDER_BIG && gs_dtype_size(dtype) > 1;
    f->forder = order == GS_ORDER_F;
    f->offset = offset;
    f->fndim = ndim;
    for (int a = 0; a < ndim; a++) {
        if (shape[a] < 0) {
            gs__fspec_free(f);
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: negative shape", path);
        }
        f->fshape[a] = shape[a];
    }
    for (int64_t a = 0, n = 1; a < ndim; a++) {
        if (shape[a] > 0 && n > GS__MAX_ELEMENTS / shape[a]) {
            gs__fspec_free(f);
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: array too large", path);
        }
        n *= shape[a];
    }
    if ((st = gs__file_check_size(f, 0)) != GS_OK) {
        gs__fspec_free(f);
        return st;
    }
    return gs__file_source(f, chunks, out_p);
}

/* ---- .npy headers ---- */

/* The NumPy type strings of the dtypes this build has: a byte order and a type code each. */
static const struct { const char *code; gs_dtype_t dt; } gs__npy_codes[] = {
    {"f8", GS_DTYPE_FLOAT64}, {"f4", GS_DTYPE_FLOAT32}, {"f2", GS_DTYPE_FLOAT16},
    {"i4", GS_DTYPE_INT32},   {"i8", GS_DTYPE_INT64},   {"u1", GS_DTYPE_UINT8},
    {"b1", GS_DTYPE_BOOL},
};

int gs__npy_descr_parse(const char *d, size_t len, int32_t *dtype_p, int32_t *swap_p)
{
    char bo;
    if (len != 3) return 0;
    bo = d[0];
    if (bo != '<' && bo != '>' && bo != '|' && bo != '=') return 0;
    for (size_t i = 0; i < sizeof(gs__npy_codes) / sizeof(gs__npy_codes[0]); i++) {
        size_t isz = gs_dtype_size(gs__npy_codes[i].dt);
        if (memcmp(d + 1, gs__npy_codes[i].code, 2) != 0) continue;
        if (bo == '|' && isz > 1) return 0;         /* NumPy's "not applicable": 1 byte only */
        *dtype_p = (int32_t)gs__npy_codes[i].dt;
        *swap_p = bo == '>' && isz > 1;             /* this build runs on little-endian hosts */
        return 1;
    }
    return 0;
}

const char *gs__npy_descr_of(int32_t dt)
{
    switch (dt) {
    case GS_DTYPE_FLOAT64: return "<f8";
    case GS_DTYPE_FLOAT32: return "<f4";
    case GS_DTYPE_FLOAT16: return "<f2";
    case GS_DTYPE_INT32: return "<i4";
    case GS_DTYPE_INT64: return "<i8";
    case GS_DTYPE_UINT8: return "|u1";
    case GS_DTYPE_BOOL: return "|b1";
    default: return "?";
    }
}

static const char *gs__skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* The value text following key 'key' in the header dictionary, or NULL. */
static const char *gs__npy_find(const char *h, const char *end, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = h; p + kl + 2 <= end; p++) {
        if ((*p == '\'' || *p == '"') && memcmp(p + 1, key, kl) == 0 && p[kl + 1] == *p) {
            p = gs__skip_ws(p + kl + 2, end);
            if (p >= end || *p != ':') return NULL;
            return gs__skip_ws(p + 1, end);
        }
    }
    return NULL;
}

gs_status_t gs__npy_parse(const char *path, const uint8_t *buf, size_t len, gs__fspec_t *f)
{
    uint32_t hlen;
    size_t hoff;
    const char *h, *end, *v;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s is not a .npy file (wrong magic)", path);
    if (buf[6] == 1) {
        hlen = (uint32_t)buf[8] | (uint32_t)buf[9] << 8;
        hoff = 10;
    } else if (buf[6] == 2 || buf[6] == 3) {
        if (len < 12) return gs_error_set(GS_ERR_IO, "%s is truncated in its header", path);
        hlen = (uint32_t)buf[8] | (uint32_t)buf[9] << 8 | (uint32_t)buf[10] << 16 |
               (uint32_t)buf[11] << 24;
        hoff = 12;
    } else {
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unsupported .npy version %u.%u", path,
                            buf[6], buf[7]);
    }
    if (hlen > len - hoff && len >= 4096)
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: .npy header of %u bytes (this reader takes "
                            "headers up to 4 KiB)", path, hlen);
    if (hlen > len - hoff) return gs_error_set(GS_ERR_IO, "%s is truncated in its header", path);
    h = (const char *)buf + hoff;
    end = h + hlen;
    f->offset = (int64_t)(hoff + hlen);
    /* descr */
    v = gs__npy_find(h, end, "descr");
    if (v != NULL && v < end && (*v == '[' || *v == '{'))
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: a structured dtype (%.*s) is not supported "
                            "(supported: " GS__FILE_DTYPES ")", path,
                            (int)(end - v < 40 ? end - v : 40), v);
    if (v == NULL || v >= end || (*v != '\'' && *v != '"'))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: .npy header without a descr string", path);
    {
        const char *q = memchr(v + 1, *v, (size_t)(end - v - 1));
        if (q == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: bad .npy descr", path);
        if (!gs__npy_descr_parse(v + 1, (size_t)(q - v - 1), &f->fdtype, &f->swap))
            return gs_error_set(GS_ERR_UNSUPPORTED,
                                "%s: dtype '%.*s' is not supported (supported: " GS__FILE_DTYPES
                                ", either byte order)",
                                path, (int)(q - v - 1 < 32 ? q - v - 1 : 32), v + 1);
    }
    v = gs__npy_find(h, end, "fortran_order");
    if (v != NULL && end - v >= 4 && memcmp(v, "True", 4) == 0) f->forder = 1;
    else if (v != NULL && end - v >= 5 && memcmp(v, "False", 5) == 0) f->forder = 0;
    else return gs_error_set(GS_ERR_INVALID_PARAM, "%s: .npy header without fortran_order", path);
    v = gs__npy_find(h, end, "shape");
    if (v == NULL || v >= end || *v != '(')
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: .npy header without a shape", path);
    v++;
    f->fndim = 0;
    for (;;) {
        char *e;
        long long x;
        v = gs__skip_ws(v, end);
        if (v < end && *v == ')') break;
        if (v >= end || *v < '0' || *v > '9')
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: bad .npy shape", path);
        if (f->fndim == GS_MAX_NDIM)
            return gs_error_set(GS_ERR_UNSUPPORTED, "%s: more than %d dimensions", path,
                                GS_MAX_NDIM);
        errno = 0;
        x = strtoll(v, &e, 10);
        if (errno != 0 || e > end || x < 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: bad .npy shape", path);
        f->fshape[f->fndim++] = x;
        v = gs__skip_ws(e, end);
        if (v < end && *v == ',') v++;
    }
    return GS_OK;
}

gs_status_t gs_array_from_npy(const char *path, const int64_t *chunks, gs_array_h *out_p)
{
    uint8_t buf[4096];
    ssize_t got;
    int fd;
    gs__fspec_t *f;
    gs_status_t st;
    if (out_p == NULL || path == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "from_npy: NULL argument");
    if (path[0] == '\0' || strlen(path) > GS__FILE_PATH_MAX)
        return gs_error_set(GS_ERR_INVALID_PARAM, "from_npy: empty or too long path");
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return gs_error_set(GS_ERR_IO, "%s: %s", path, strerror(errno));
    got = pread(fd, buf, sizeof(buf), 0);
    if (got < 0) {
        st = gs_error_set(GS_ERR_IO, "%s: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    close(fd);
    f = gs_calloc(1, sizeof(*f), "file spec");
    if (f == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file array");
    f->op = GS__FILE_READ;
    f->path = gs_strdup(path, "file path");
    if (f->path == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file array");
        goto err_spec;
    }
    if ((st = gs__npy_parse(path, buf, (size_t)got, f)) != GS_OK) goto err_spec;
    if ((st = gs__file_check_size(f, 1)) != GS_OK) goto err_spec;
    return gs__file_source(f, chunks, out_p);
err_spec:
    gs__fspec_free(f);
    return st;
}

/* ---- writing ---- */

/* The .npy header of a C-order little-endian array of dtype @a dt, @a ndim / @a shape:
 * version 1.0, padded with spaces so the data starts at a multiple of 64 bytes, as numpy
 * writes it. Owned by the caller (gs_free). */
static gs_status_t gs__npy_header(int32_t dt, int ndim, const int64_t *shape, uint8_t **hdr_p,
                                  int64_t *len_p)
{
    char dict[64 + 24 * GS_MAX_NDIM];
    int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     gs__npy_descr_of(dt));
    size_t dl, pre, total;
    uint8_t *h;
    for (int a = 0; a < ndim; a++)
        n += snprintf(dict + n, sizeof(dict) - (size_t)n, "%lld,", (long long)shape[a]);
    if (ndim > 1) n--;                      /* (3, 4) not (3, 4,) */
    n += snprintf(dict + n, sizeof(dict) - (size_t)n, "), }");
    dl = (size_t)n;
    pre = 10;
    total = (pre + dl + 1 + 63) / 64 * 64;
    h = gs_malloc(total, "npy header");
    if (h == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a .npy header");
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    h[8] = (uint8_t)((total - pre) & 0xff);
    h[9] = (uint8_t)((total - pre) >> 8);
    memcpy(h + pre, dict, dl);
    memset(h + pre + dl, ' ', total - pre - dl - 1);
    h[total - 1] = '\n';
    *hdr_p = h;
    *len_p = (int64_t)total;
    return GS_OK;
}

gs_status_t gs__file_write_expr(gs_array_h a, const char *path, const char *tmp,
                                const gs__fspec_t *proto, const uint8_t *hdr, int64_t hdr_len,
                                double expect, gs_array_h *out_p)
{
    gs__fspec_t *w = NULL, *c = NULL;
    gs_array_h wn = NULL, sum = NULL;
    gs_grid_t cg;
    gs_status_t st;
    if (a == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "file writer: array is NULL");
    if ((int)a->dtype < 0 || a->dtype >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "file writer: %s: unknown dtype %d", path,
                            (int)a->dtype);
    w = gs_calloc(1, sizeof(*w), "file spec");
    if (w == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file write");
    *w = *proto;
    w->path = w->tmp = NULL;
    w->hdr = NULL;
    w->op = GS__FILE_WRITE;
    w->path = gs_strdup(path, "file path");
    w->tmp = gs_strdup(tmp, "file path");
    if (w->path == NULL || w->tmp == NULL) {
        gs__fspec_free(w);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file write");
    }
    w->fdtype = a->dtype;                   /* the array's own dtype, little-endian */
    w->swap = w->forder = 0;
    w->offset = proto->fmt == GS_KFILE_RAW ? hdr_len : 0;
    w->fndim = a->grid.ndim;
    w->map.ndim = a->grid.ndim;
    for (int32_t d = 0; d < a->grid.ndim; d++) {
        w->fshape[d] = a->grid.shape[d];
        w->map.off[d] = 0;
        w->map.step[d] = 1;
        w->map.perm[d] = d;
    }
    w->expect = expect;
    if ((c = gs__fspec_dup(w)) == NULL) {
        gs__fspec_free(w);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file write");
    }
    c->op = GS__FILE_COMMIT;
    if (hdr_len > 0) {
        c->hdr = gs_malloc((size_t)hdr_len, "file header");
        if (c->hdr == NULL) {
            gs__fspec_free(w);
            st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file write");
            goto err_c;
        }
        memcpy(c->hdr, hdr, (size_t)hdr_len);
        c->hdr_len = hdr_len;
    }
    /* one double per written chunk: a grid of 1-element chunks, one per block of a */
    memset(&cg, 0, sizeof(cg));
    cg.ndim = a->grid.ndim;
    for (int32_t d = 0; d < cg.ndim; d++) {
        cg.shape[d] = a->grid.nchunks[d];
        cg.nchunks[d] = a->grid.nchunks[d];
    }
    if (gs__grid_alloc(&cg) != GS_OK) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a file write");
        gs__fspec_free(w);
        goto err_c;
    }
    for (int32_t d = 0; d < cg.ndim; d++)
        for (int64_t k = 0; k <= cg.nchunks[d]; k++) cg.bounds[d][k] = k;
    {
        const char *why;
        if (!gs__fspec_check(w, &a->grid, &why)) {
            st = gs_error_set(GS_ERR_INVALID_PARAM, "%s: %s", path, why);
            gs__fspec_free(w);
            gs_grid_cleanup(&cg);
            goto err_c;
        }
    }
    st = gs__array_file_node(w, &cg, a, &wn);
    gs_grid_cleanup(&cg);
    if (st != GS_OK) goto err_c;
    if ((st = gs_array_reduce(GS_RED_SUM, wn, NULL, &sum)) != GS_OK) goto err_wn;
    memset(&cg, 0, sizeof(cg));
    st = gs__array_file_node(c, &cg, sum, out_p);
    c = NULL;
    gs_array_release(sum);
err_wn:
    gs_array_release(wn);
err_c:
    gs__fspec_free(c);
    return st;
}

gs_status_t gs_array_to_npy_expr(gs_array_h a, const char *path, const char *tmp,
                                 gs_array_h *out_p)
{
    gs__fspec_t proto;
    uint8_t *hdr = NULL;
    int64_t hdr_len = 0;
    gs_status_t st;
    if (a == NULL || path == NULL || tmp == NULL || out_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "to_npy: NULL argument");
    if (path[0] == '\0' || tmp[0] == '\0' || strlen(path) > GS__FILE_PATH_MAX ||
        strlen(tmp) > GS__FILE_PATH_MAX)
        return gs_error_set(GS_ERR_INVALID_PARAM, "to_npy: empty or too long path");
    if ((int)a->dtype < 0 || a->dtype >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unknown dtype %d", path, (int)a->dtype);
    if ((st = gs__npy_header(a->dtype, a->grid.ndim, a->grid.shape, &hdr, &hdr_len)) != GS_OK)
        return st;
    memset(&proto, 0, sizeof(proto));
    proto.fmt = GS_KFILE_RAW;
    st = gs__file_write_expr(a, path, tmp, &proto, hdr, hdr_len,
                             (double)gs__grid_size(&a->grid) *
                                 (double)gs_dtype_size((gs_dtype_t)a->dtype),
                             out_p);
    gs_free(hdr);
    return st;
}
