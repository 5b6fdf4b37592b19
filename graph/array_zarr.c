/* Zarr v2 and v3 directory stores as expression nodes: the metadata (.zarray, zarr.json) is
 * read and written here, on the client, through jansson; the chunk files are the workers'
 * (chunkops/zarr.c). A zarr source is a FILE READ node with fmt GS_KFILE_ZARR, so compute
 * chunks may differ from the zarr chunks (each task reads the zarr chunks its region touches)
 * and slices fold into it like any file source (pushdown.c). */
#include "graph/file_int.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static gs_status_t gs__zbad(const char *meta, const char *what)
{
    return gs_error_set(GS_ERR_INVALID_PARAM, "%s: %s", meta, what);
}

static int gs__zint_array(json_t *v, int32_t *n_p, int64_t *out)
{
    size_t i;
    json_t *x;
    if (!json_is_array(v) || json_array_size(v) > GS_MAX_NDIM) return 0;
    json_array_foreach(v, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0) return 0;
        out[i] = json_integer_value(x);
    }
    *n_p = (int32_t)json_array_size(v);
    return 1;
}

/* Fill value @a v of a store of dtype @a dt into *fill_p (gs__fspec_t.fill: the value for
 * floating dtypes, the int64 bit pattern for integers and bool). null (v2: no fill value) is 0.
 * Floats: a number, "NaN", "Infinity", "-Infinity" or (v3) "0x..." the bits of the dtype;
 * integers: an integer in the dtype's range (or an integral number); bool: true or false (or 0
 * or 1). 0 with *why set when @a v does not fit the dtype. */
static int gs__zfill(json_t *v, int32_t dt, double *fill_p, const char **why)
{
    if (v == NULL || json_is_null(v)) {
        *fill_p = 0.0;
        return 1;
    }
    if (dt == GS_DTYPE_FLOAT64 || dt == GS_DTYPE_FLOAT32 || dt == GS_DTYPE_FLOAT16) {
        if (json_is_number(v)) {
            *fill_p = json_number_value(v);
            return 1;
        }
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            size_t isz = gs_dtype_size((gs_dtype_t)dt);
            if (!strcmp(s, "NaN")) *fill_p = NAN;
            else if (!strcmp(s, "Infinity")) *fill_p = INFINITY;
            else if (!strcmp(s, "-Infinity")) *fill_p = -INFINITY;
            else if (s[0] == '0' && s[1] == 'x' && strlen(s) == 2 + 2 * isz &&
                     strspn(s + 2, "0123456789abcdefABCDEF") == 2 * isz) {
                uint64_t bits = strtoull(s + 2, NULL, 16);
                if (dt == GS_DTYPE_FLOAT64) {
                    memcpy(fill_p, &bits, 8);
                } else if (dt == GS_DTYPE_FLOAT32) {
                    uint32_t b32 = (uint32_t)bits;
                    float x;
                    memcpy(&x, &b32, 4);
                    *fill_p = x;
                } else {
                    int e = (int)(bits >> 10) & 0x1f;
                    double m = (double)(bits & 0x3ff);
                    double x = e == 0    ? ldexp(m, -24)
                               : e == 31 ? (m != 0 ? NAN : INFINITY)
                                         : ldexp(m + 1024.0, e - 25);
                    *fill_p = (bits & 0x8000) ? -x : x;
                }
            } else {
                return *why = "fill_value is not a number, \"NaN\", \"Infinity\", "
                              "\"-Infinity\" or the dtype's bits in hex", 0;
            }
            return 1;
        }
        return *why = "fill_value of a floating dtype is not a number", 0;
    }
    {
        int64_t x, lo, hi;
        switch (dt) {
        case GS_DTYPE_INT32: lo = INT32_MIN; hi = INT32_MAX; break;
        case GS_DTYPE_UINT8: lo = 0; hi = 255; break;
        case GS_DTYPE_BOOL: lo = 0; hi = 1; break;
        default: lo = INT64_MIN; hi = INT64_MAX; break;
        }
        if (json_is_boolean(v) && dt == GS_DTYPE_BOOL) {
            x = json_is_true(v);
        } else if (json_is_integer(v)) {
            x = json_integer_value(v);
        } else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
                   fabs(json_real_value(v)) < 9.0e15) {
            x = (int64_t)json_real_value(v);
        } else {
            return *why = dt == GS_DTYPE_BOOL ? "fill_value of a bool array is not true or false"
                                              : "fill_value of an integer array is not an integer",
                   0;
        }
        if (x < lo || x > hi) return *why = "fill_value outside the dtype's range", 0;
        memcpy(fill_p, &x, sizeof(x));
        return 1;
    }
}

/* zarr v3 data_type names of the dtypes this build has. */
static const struct { const char *v3; gs_dtype_t dt; } gs__ztypes[] = {
    {"float64", GS_DTYPE_FLOAT64}, {"float32", GS_DTYPE_FLOAT32}, {"float16", GS_DTYPE_FLOAT16},
    {"int32", GS_DTYPE_INT32},     {"int64", GS_DTYPE_INT64},     {"uint8", GS_DTYPE_UINT8},
    {"bool", GS_DTYPE_BOOL},
};

static int gs__zdtype3(const char *s, int32_t *dt_p)
{
    for (size_t i = 0; i < sizeof(gs__ztypes) / sizeof(gs__ztypes[0]); i++) {
        if (strcmp(s, gs__ztypes[i].v3) != 0) continue;
        *dt_p = (int32_t)gs__ztypes[i].dt;
        return 1;
    }
    return 0;
}

static const char *gs__zname3(int32_t dt)
{
    for (size_t i = 0; i < sizeof(gs__ztypes) / sizeof(gs__ztypes[0]); i++)
        if ((int32_t)gs__ztypes[i].dt == dt) return gs__ztypes[i].v3;
    return "?";
}

/* Compressor of a v2 .zarray or a v3 codec entry (name/id and its configuration object). */
static gs_status_t gs__zcodec(const char *meta, const char *name, json_t *conf, gs__fspec_t *f)
{
    if (!strcmp(name, "zstd")) {
        f->zcodec = GS_ZCODEC_ZSTD;
        return GS_OK;
    }
    if (!strcmp(name, "blosc")) {
        f->zcodec = GS_ZCODEC_BLOSC;
        return GS_OK;
    }
    (void)conf;
    return gs_error_set(GS_ERR_UNSUPPORTED, "%s: codec '%s' is not supported (none, zstd, blosc)",
                        meta, name);
}

static gs_status_t gs__zarr_v2(const char *meta, json_t *j, gs__fspec_t *f)
{
    json_t *v;
    int32_t n2;
    const char *s;
    gs_status_t st;
    f->zver = 2;
    if (!gs__zint_array(json_object_get(j, "shape"), &f->fndim, f->fshape))
        return gs__zbad(meta, "shape is not a list of integers");
    if (!gs__zint_array(json_object_get(j, "chunks"), &n2, f->zchunk) || n2 != f->fndim)
        return gs__zbad(meta, "chunks is not a list of integers as long as shape");
    v = json_object_get(j, "dtype");
    if (json_is_array(v))
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: a structured dtype is not supported "
                            "(supported: " GS__FILE_DTYPES ")", meta);
    if ((s = json_string_value(v)) == NULL) return gs__zbad(meta, "dtype is not a string");
    if (!gs__npy_descr_parse(s, strlen(s), &f->fdtype, &f->swap))
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: dtype '%s' is not supported (supported: "
                            GS__FILE_DTYPES ", either byte order: '<f8', '>i4', '|u1', "
                            "'|b1', ...)", meta, s);
    if ((s = json_string_value(json_object_get(j, "order"))) == NULL ||
        (strcmp(s, "C") && strcmp(s, "F")))
        return gs__zbad(meta, "order is not \"C\" or \"F\"");
    f->forder = s[0] == 'F';
    v = json_object_get(j, "compressor");
    if (v != NULL && !json_is_null(v)) {
        if ((s = json_string_value(json_object_get(v, "id"))) == NULL)
            return gs__zbad(meta, "compressor without an id");
        if ((st = gs__zcodec(meta, s, v, f)) != GS_OK) return st;
    }
    v = json_object_get(j, "filters");
    if (v != NULL && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: filters are not supported", meta);
    if (!gs__zfill(json_object_get(j, "fill_value"), f->fdtype, &f->fill, &s))
        return gs__zbad(meta, s);
    s = json_string_value(json_object_get(j, "dimension_separator"));
    f->zsep = s != NULL && !strcmp(s, "/") ? '/' : '.';
    return GS_OK;
}

static gs_status_t gs__zarr_v3(const char *meta, json_t *j, gs__fspec_t *f)
{
    json_t *v, *c;
    int32_t n2;
    size_t i;
    const char *s;
    gs_status_t st;
    int seen_bytes = 0;
    f->zver = 3;
    if ((s = json_string_value(json_object_get(j, "node_type"))) == NULL || strcmp(s, "array"))
        return gs__zbad(meta, "node_type is not \"array\"");
    if (!gs__zint_array(json_object_get(j, "shape"), &f->fndim, f->fshape))
        return gs__zbad(meta, "shape is not a list of integers");
    v = json_object_get(j, "chunk_grid");
    if ((s = json_string_value(json_object_get(v, "name"))) == NULL || strcmp(s, "regular"))
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: only regular chunk grids are supported", meta);
    if (!gs__zint_array(json_object_get(json_object_get(v, "configuration"), "chunk_shape"), &n2,
                        f->zchunk) || n2 != f->fndim)
        return gs__zbad(meta, "chunk_shape is not a list of integers as long as shape");
    if ((s = json_string_value(json_object_get(j, "data_type"))) == NULL)
        return gs_error_set(json_object_get(j, "data_type") != NULL ? GS_ERR_UNSUPPORTED
                                                                    : GS_ERR_INVALID_PARAM,
                            "%s: data_type is not one of the names " GS__FILE_DTYPES, meta);
    if (!gs__zdtype3(s, &f->fdtype))
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: data_type '%s' is not supported (supported: "
                            GS__FILE_DTYPES ")", meta, s);
    v = json_object_get(j, "chunk_key_encoding");
    s = json_string_value(json_object_get(v, "name"));
    if (s != NULL && strcmp(s, "default"))
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: chunk_key_encoding '%s' is not supported",
                            meta, s);
    s = json_string_value(json_object_get(json_object_get(v, "configuration"), "separator"));
    f->zsep = s != NULL && !strcmp(s, ".") ? '.' : '/';
    if (!gs__zfill(json_object_get(j, "fill_value"), f->fdtype, &f->fill, &s))
        return gs__zbad(meta, s);
    v = json_object_get(j, "codecs");
    if (!json_is_array(v)) return gs__zbad(meta, "codecs is not a list");
    json_array_foreach(v, i, c) {
        json_t *conf = json_object_get(c, "configuration");
        if ((s = json_string_value(json_object_get(c, "name"))) == NULL)
            return gs__zbad(meta, "a codec without a name");
        if (!strcmp(s, "transpose") && !seen_bytes) {
            json_t *o = json_object_get(conf, "order"), *x;
            size_t q;
            if (!json_is_array(o) || json_array_size(o) != (size_t)f->fndim)
                return gs__zbad(meta, "bad transpose order");
            json_array_foreach(o, q, x) {
                if (!json_is_integer(x) || json_integer_value(x) != f->fndim - 1 - (int64_t)q)
                    return gs_error_set(GS_ERR_UNSUPPORTED, "%s: transpose orders other than "
                                        "reversed (Fortran order) are not supported", meta);
            }
            f->forder = 1;
        } else if (!strcmp(s, "bytes") && !seen_bytes) {
            const char *e = json_string_value(json_object_get(conf, "endian"));
            if (e != NULL && strcmp(e, "little") && strcmp(e, "big"))
                return gs__zbad(meta, "bytes codec endian is not \"little\" or \"big\"");
            if (e == NULL && gs_dtype_size((gs_dtype_t)f->fdtype) > 1)
                return gs__zbad(meta, "bytes codec without endian for a multi-byte data_type");
            f->swap = e != NULL && !strcmp(e, "big") && gs_dtype_size((gs_dtype_t)f->fdtype) > 1;
            seen_bytes = 1;
        } else if (seen_bytes && f->zcodec == GS_ZCODEC_NONE) {
            if ((st = gs__zcodec(meta, s, conf, f)) != GS_OK) return st;
        } else {
            return gs_error_set(GS_ERR_UNSUPPORTED, "%s: codec '%s' here is not supported", meta, s);
        }
    }
    if (!seen_bytes) return gs__zbad(meta, "codecs lack \"bytes\"");
    return GS_OK;
}

gs_status_t gs_array_from_zarr(const char *path, const int64_t *chunks, gs_array_h *out_p)
{
    char meta[GS__FILE_PATH_MAX + 32];
    json_t *j = NULL;
    json_error_t je;
    gs__fspec_t *f;
    gs_status_t st;
    int64_t zc[GS_MAX_NDIM];
    if (path == NULL || out_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "from_zarr: NULL argument");
    if (path[0] == '\0' || strlen(path) > GS__FILE_PATH_MAX)
        return gs_error_set(GS_ERR_INVALID_PARAM, "from_zarr: empty or too long path");
    f = gs_calloc(1, sizeof(*f), "file spec");
    if (f == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a zarr array");
    f->op = GS__FILE_READ;
    f->fmt = GS_KFILE_ZARR;
    f->path = gs_strdup(path, "file path");
    if (f->path == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for a zarr array");
        goto err_spec;
    }
    snprintf(meta, sizeof(meta), "%s/zarr.json", path);
    if (access(meta, F_OK) != 0) snprintf(meta, sizeof(meta), "%s/.zarray", path);
    j = json_load_file(meta, JSON_REJECT_DUPLICATES, &je);
    if (j == NULL) {
        if (access(meta, R_OK) != 0)
            st = gs_error_set(GS_ERR_IO, "%s: not a zarr array store (no zarr.json or .zarray: %s)",
                              path, strerror(errno));
        else
            st = gs_error_set(GS_ERR_INVALID_PARAM, "%s: line %d: %s", meta, je.line, je.text);
        goto err_spec;
    }
    {
        json_t *fmt = json_object_get(j, "zarr_format");
        int64_t ver = json_is_integer(fmt) ? json_integer_value(fmt) : 0;
        if (ver == 2) st = gs__zarr_v2(meta, j, f);
        else if (ver == 3) st = gs__zarr_v3(meta, j, f);
        else st = gs_error_set(GS_ERR_UNSUPPORTED, "%s: zarr_format %lld is not supported (2, 3)",
                               meta, (long long)ver);
    }
    json_decref(j);
    if (st != GS_OK) goto err_spec;
    for (int32_t a = 0; a < f->fndim; a++) {
        if (f->zchunk[a] < 1) {
            st = gs__zbad(meta, "chunk sizes must be >= 1");
            goto err_spec;
        }
        zc[a] = f->zchunk[a];
    }
    {
        gs_grid_t g;
        const char *why;
        memset(&g, 0, sizeof(g));
        f->map.ndim = f->fndim;
        for (int32_t a = 0; a < f->fndim; a++) {
            f->map.step[a] = 1;
            f->map.perm[a] = a;
            g.shape[a] = f->fshape[a];
        }
        g.ndim = f->fndim;
        if (!gs__fspec_check(f, &g, &why)) {
            st = gs__zbad(meta, why);
            goto err_spec;
        }
    }
    return gs__file_source(f, chunks ? chunks : zc, out_p);
err_spec:
    gs__fspec_free(f);
    return st;
}

/* ---- writing ---- */

/* The fill_value 0 of dtype @a dt as zarr writes it: 0.0 for floats, 0 for integers, false. */
static json_t *gs__zfill_zero(int32_t dt)
{
    if (dt == GS_DTYPE_BOOL) return json_false();
    if (dt == GS_DTYPE_INT32 || dt == GS_DTYPE_INT64 || dt == GS_DTYPE_UINT8)
        return json_integer(0);
    return json_real(0.0);
}

static char *gs__zarr_meta_text(gs_array_h a, const int64_t *zc, int version, int codec,
                                int level)
{
    json_t *j = json_object(), *shape = json_array(), *ch = json_array(), *comp = NULL;
    const int32_t dt = a->dtype;
    const int isz = (int)gs_dtype_size((gs_dtype_t)dt);
    char *text;
    for (int32_t d = 0; d < a->grid.ndim; d++) {
        json_array_append_new(shape, json_integer(a->grid.shape[d]));
        json_array_append_new(ch, json_integer(zc[d]));
    }
    json_object_set_new(j, "zarr_format", json_integer(version));
    json_object_set_new(j, "shape", shape);
    if (version == 2) {
        json_object_set_new(j, "chunks", ch);
        json_object_set_new(j, "dtype", json_string(gs__npy_descr_of(dt)));
        if (codec == GS_ZCODEC_ZSTD)
            comp = json_pack("{s:s, s:i}", "id", "zstd", "level", level);
        else if (codec == GS_ZCODEC_BLOSC)
            comp = json_pack("{s:s, s:s, s:i, s:i, s:i}", "id", "blosc", "cname", "lz4", "clevel",
                             level, "shuffle", isz > 1 ? 1 : 0, "blocksize", 0);
        json_object_set_new(j, "compressor", comp ? comp : json_null());
        json_object_set_new(j, "fill_value", gs__zfill_zero(dt));
        json_object_set_new(j, "order", json_string("C"));
        json_object_set_new(j, "filters", json_null());
        json_object_set_new(j, "dimension_separator", json_string("."));
    } else {
        json_t *codecs = json_array();
        json_object_set_new(j, "node_type", json_string("array"));
        json_object_set_new(j, "data_type", json_string(gs__zname3(dt)));
        json_object_set_new(j, "chunk_grid", json_pack("{s:s, s:{s:o}}", "name", "regular",
                                                       "configuration", "chunk_shape", ch));
        json_object_set_new(j, "chunk_key_encoding",
                            json_pack("{s:s, s:{s:s}}", "name", "default", "configuration",
                                      "separator", "/"));
        json_object_set_new(j, "fill_value", gs__zfill_zero(dt));
        if (isz > 1)
            json_array_append_new(codecs, json_pack("{s:s, s:{s:s}}", "name", "bytes",
                                                    "configuration", "endian", "little"));
        else        /* endian is for multi-byte data types only: as zarr-python writes it */
            json_array_append_new(codecs, json_pack("{s:s}", "name", "bytes"));
        if (codec == GS_ZCODEC_ZSTD)
            json_array_append_new(codecs, json_pack("{s:s, s:{s:i, s:b}}", "name", "zstd",
                                                    "configuration", "level", level, "checksum", 0));
        else if (codec == GS_ZCODEC_BLOSC)
            json_array_append_new(codecs, json_pack("{s:s, s:{s:s, s:i, s:s, s:i, s:i}}", "name",
                                                    "blosc", "configuration", "cname", "lz4",
                                                    "clevel", level, "shuffle",
                                                    isz > 1 ? "shuffle" : "noshuffle",
                                                    "typesize", isz, "blocksize", 0));
        json_object_set_new(j, "codecs", codecs);
        json_object_set_new(j, "attributes", json_object());
    }
    text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    return text;
}

gs_status_t gs_array_to_zarr_expr(gs_array_h a, const char *path, const char *tmp, int version,
                                  int codec, gs_array_h *out_p)
{
    int64_t zc[GS_MAX_NDIM];
    int regular = 1;
    gs_array_h src = NULL, out = NULL;
    gs__fspec_t *w;
    gs_status_t st;
    char *text;
    if (a == NULL || path == NULL || tmp == NULL || out_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "to_zarr: NULL argument");
    if (version != 2 && version != 3)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: zarr version %d (2 or 3)", path, version);
    if (codec < 0 || codec >= GS_ZCODEC_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unknown codec %d", path, codec);
    if ((int)a->dtype < 0 || a->dtype >= GS_DTYPE_COUNT)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: unknown dtype %d", path, (int)a->dtype);
    /* zarr chunks: the first compute chunk of each axis; an irregular grid is rechunked */
    for (int32_t d = 0; d < a->grid.ndim; d++) {
        zc[d] = a->grid.bounds[d][1] - a->grid.bounds[d][0];
        if (zc[d] < 1) zc[d] = 1;
        for (int64_t k = 0; k < a->grid.nchunks[d]; k++)
            if (a->grid.bounds[d][k] != k * zc[d] ||
                a->grid.bounds[d][k + 1] - a->grid.bounds[d][k] > zc[d])
                regular = 0;
    }
    if (regular) {
        src = gs_array_retain(a);
    } else if ((st = gs_array_rechunk(a, zc, &src)) != GS_OK) {
        return st;
    }
    text = gs__zarr_meta_text(a, zc, version, codec, codec == GS_ZCODEC_ZSTD ? 3 : 5);
    if (text == NULL) {
        gs_array_release(src);
        return gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory for the metadata", path);
    }
    {
        gs__fspec_t proto;
        memset(&proto, 0, sizeof(proto));
        proto.fmt = GS_KFILE_ZARR;
        proto.zver = version;
        proto.zcodec = codec;
        proto.zlevel = codec == GS_ZCODEC_ZSTD ? 3 : 5;
        proto.zsep = version == 3 ? '/' : '.';
        memcpy(proto.zchunk, zc, sizeof(zc));
        w = &proto;
        st = gs__file_write_expr(src, path, tmp, w, (const uint8_t *)text,
                                 (int64_t)strlen(text), (double)gs_grid_nblocks(&src->grid), &out);
    }
    free(text);
    gs_array_release(src);
    if (st == GS_OK) *out_p = out;
    return st;
}
