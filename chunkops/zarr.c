/* Zarr chunk I/O of FILE tasks (gs_kfile_t with fmt GS_KFILE_ZARR; graph/kernel.h states the
 * addressing). Host side: chunk files are read whole, decompressed with libzstd or libblosc,
 * byte-swapped when stored big-endian and scattered into the task's region (on device backends into slabs of rows that
 * fileio.c double-buffers through page-locked staging). The metadata is the client's (graph/array_zarr.c, through jansson);
 * the worker only reads and writes chunk files and, in the commit task, the metadata text it
 * was given. Every error names the chunk file. */
#include "chunkops/fileio_int.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <blosc.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

/* "<dir>/<key>" of zarr chunk @a ci (per file axis) into @a buf. */
static void gs__zarr_key(const gs_kfile_t *k, const char *dir, const int64_t *ci, char *buf,
                         size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "%s/%s", dir, k->zver == 3 ? "c" : "");
    if (k->fndim == 0) {
        if (k->zver == 2) snprintf(buf + n, len - n, "0");
        return;
    }
    for (int32_t a = 0; a < k->fndim && n < len; a++) {
        int first = a == 0 && k->zver == 2;
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", first ? "" : (k->zsep == '/' ? "/" : "."),
                              (long long)ci[a]);
    }
}

/* Open chunk file @a path for reading and give its size: GS_ERR_NOT_FOUND (no error text) when
 * it does not exist, GS_ERR_IO naming it otherwise. */
static gs_status_t gs__zarr_open(const char *path, int *fd_p, size_t *size_p)
{
    struct stat sb;
    gs_status_t st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return GS_ERR_NOT_FOUND;
        return gs_error_set(GS_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (fstat(fd, &sb) != 0) {
        st = gs_error_set(GS_ERR_IO, "%s: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    *fd_p = fd;
    *size_p = (size_t)sb.st_size;
    return GS_OK;
}

/* Read the whole file @a path into a new buffer; GS_ERR_NOT_FOUND when it does not exist. */
static gs_status_t gs__zarr_slurp(const char *path, uint8_t **buf_p, size_t *len_p)
{
    uint8_t *buf;
    size_t size;
    int fd;
    gs_status_t st = gs__zarr_open(path, &fd, &size);
    if (st != GS_OK) return st;
    buf = gs_malloc(size + 1, "zarr chunk");
    if (buf == NULL) {
        close(fd);
        return gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    if ((st = gs__fio_pread(fd, path, buf, size, 0)) != GS_OK) {
        gs_free(buf);
        close(fd);
        return st;
    }
    close(fd);
    *buf_p = buf;
    *len_p = size;
    return GS_OK;
}

/* An uncompressed chunk file @a path read straight into @a dst (exactly @a want bytes): what
 * gs__zarr_slurp then gs__zarr_decode do for GS_ZCODEC_NONE, with the same errors, without
 * the copy. GS_ERR_NOT_FOUND when the file does not exist. */
static gs_status_t gs__zarr_read_plain(const char *path, uint8_t *dst, size_t want)
{
    size_t size;
    int fd;
    gs_status_t st = gs__zarr_open(path, &fd, &size);
    if (st != GS_OK) return st;
    if (size != want) {
        st = gs_error_set(GS_ERR_IO, "%s: the chunk holds %zu bytes, the metadata's chunk shape "
                          "needs %zu (the metadata disagrees with the chunk files)", path, size,
                          want);
    } else {
        st = gs__fio_pread(fd, path, dst, want, 0);
    }
    close(fd);
    return st;
}

/* Decode chunk file contents @a src into @a dst (exactly @a want bytes). */
static gs_status_t gs__zarr_decode(const gs_kfile_t *k, const char *path, const uint8_t *src,
                                   size_t n, uint8_t *dst, size_t want)
{
    switch (k->zcodec) {
    case GS_ZCODEC_NONE:
        if (n != want) goto bad_size;
        memcpy(dst, src, n);
        return GS_OK;
    case GS_ZCODEC_ZSTD: {
        unsigned long long cs = ZSTD_getFrameContentSize(src, n);
        size_t got;
        if (cs == ZSTD_CONTENTSIZE_ERROR)
            return gs_error_set(GS_ERR_IO, "%s: corrupt zstd chunk (no zstd frame)", path);
        if (cs != ZSTD_CONTENTSIZE_UNKNOWN && cs != want) {
            n = (size_t)cs;
            goto bad_size;
        }
        got = ZSTD_decompress(dst, want, src, n);
        if (ZSTD_isError(got))
            return gs_error_set(GS_ERR_IO, "%s: corrupt zstd chunk: %s", path,
                                ZSTD_getErrorName(got));
        if (got != want) {
            n = got;
            goto bad_size;
        }
        return GS_OK;
    }
    case GS_ZCODEC_BLOSC: {
        size_t nb = 0, cb = 0, bs = 0;
        int got;
        if (n < BLOSC_MIN_HEADER_LENGTH)
            return gs_error_set(GS_ERR_IO, "%s: corrupt blosc chunk (%zu bytes)", path, n);
        blosc_cbuffer_sizes(src, &nb, &cb, &bs);
        if (cb != n) return gs_error_set(GS_ERR_IO, "%s: corrupt blosc chunk (header says %zu "
                                         "bytes, file has %zu)", path, cb, n);
        if (nb != want) {
            n = nb;
            goto bad_size;
        }
        got = blosc_decompress_ctx(src, dst, want, 1);
        if (got < 0 || (size_t)got != want)
            return gs_error_set(GS_ERR_IO, "%s: corrupt blosc chunk (error %d)", path, got);
        return GS_OK;
    }
    default:
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: unknown codec %d", path, (int)k->zcodec);
    }
bad_size:
    return gs_error_set(GS_ERR_IO, "%s: the chunk holds %zu bytes, the metadata's chunk shape "
                        "needs %zu (the metadata disagrees with the chunk files)", path, n, want);
}

/* Output range [lo, hi) along one output axis whose positions p read file coordinates
 * base + step * p (p in [0, n)) inside [c0, c1). Step 0 (every position reads base: an axis
 * of extent 1, or a map a peer sent) gives all of [0, n) or nothing. */
static void gs__zarr_prange(int64_t base, int64_t step, int64_t n, int64_t c0, int64_t c1,
                            int64_t *lo, int64_t *hi)
{
    int64_t a, b;
    if (step == 0) {
        *lo = 0;
        *hi = base >= c0 && base < c1 ? n : 0;
        return;
    }
    if (step > 0) {
        a = c0 - base <= 0 ? 0 : (c0 - base + step - 1) / step;
        b = c1 - 1 - base < 0 ? -1 : (c1 - 1 - base) / step;
    } else {
        int64_t s = -step;
        a = base - (c1 - 1) <= 0 ? 0 : (base - (c1 - 1) + s - 1) / s;
        b = base - c0 < 0 ? -1 : (base - c0) / s;
    }
    if (a < 0) a = 0;
    if (b > n - 1) b = n - 1;
    *lo = a;
    *hi = b + 1 > a ? b + 1 : a;
}

gs_status_t gs__zarr_read(const gs_kfile_t *k, uint8_t *dst)
{
    const size_t isz = gs__fio_itemsize(k->fdtype);
    const int64_t is = (int64_t)isz;
    uint8_t fillb[8];
    const int32_t fnd = k->fndim, nd = k->ndim;
    int64_t clo[GS_MAX_NDIM], chi[GS_MAX_NDIM], ci[GS_MAX_NDIM], cs[GS_MAX_NDIM];
    int64_t ost[GS_MAX_NDIM], zn = gs_region_size(fnd, k->zchunk);
    uint8_t *chunk = NULL;
    char path[4200];
    gs_status_t st = GS_OK;

    if (isz == 0) return gs_error_set(GS_ERR_UNSUPPORTED, "%s: unsupported dtype", k->path);
    if (gs_region_size(nd, k->shape) == 0) return GS_OK;
    gs__fio_fill_bytes(k->fdtype, k->fill, fillb);
    for (int32_t j = nd - 1; j >= 0; j--)
        ost[j] = j == nd - 1 ? 1 : ost[j + 1] * k->shape[j + 1];
    /* chunk-local element strides (C or F order inside a chunk) */
    {
        int64_t s = 1;
        if (k->forder) {
            for (int32_t a = 0; a < fnd; a++) { cs[a] = s; s *= k->zchunk[a]; }
        } else {
            for (int32_t a = fnd - 1; a >= 0; a--) { cs[a] = s; s *= k->zchunk[a]; }
        }
    }
    for (int32_t a = 0; a < fnd; a++) {
        int64_t c0 = k->fbase[a], c1 = k->fbase[a];
        if (k->fperm[a] >= 0) {
            int64_t e = k->fbase[a] + k->fstep[a] * (k->shape[k->fperm[a]] - 1);
            if (e < c0) c0 = e;
            else c1 = e;
        }
        if (c0 < 0 || c1 >= k->fshape[a])
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: region outside the array", k->path);
        clo[a] = c0 / k->zchunk[a];
        chi[a] = c1 / k->zchunk[a];
        ci[a] = clo[a];
    }
    chunk = gs_malloc((size_t)zn * isz, "zarr chunk");
    if (chunk == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory", k->path);
    for (;;) {
        int64_t plo[GS_MAX_NDIM], phi[GS_MAX_NDIM], p[GS_MAX_NDIM];
        int empty = 0, missing = 0;
        uint8_t *raw = NULL;
        size_t rawlen = 0;
        for (int32_t j = 0; j < nd; j++) {
            plo[j] = 0;
            phi[j] = k->shape[j];
        }
        for (int32_t a = 0; a < fnd; a++) {
            int32_t j = k->fperm[a];
            if (j < 0) continue;
            gs__zarr_prange(k->fbase[a], k->fstep[a], k->shape[j], ci[a] * k->zchunk[a],
                            (ci[a] + 1) * k->zchunk[a], &plo[j], &phi[j]);
            if (plo[j] >= phi[j]) empty = 1;
        }
        if (!empty) {
            gs__zarr_key(k, k->path, ci, path, sizeof(path));
            if (k->zcodec == GS_ZCODEC_NONE) {
                st = gs__zarr_read_plain(path, chunk, (size_t)zn * isz);
            } else {
                st = gs__zarr_slurp(path, &raw, &rawlen);
                if (st == GS_OK) {
                    st = gs__zarr_decode(k, path, raw, rawlen, chunk, (size_t)zn * isz);
                    gs_free(raw);
                }
            }
            if (st == GS_ERR_NOT_FOUND) {
                missing = 1;
                st = GS_OK;
            } else if (st == GS_OK) {
                gs__fio_fix(chunk, zn, k->fdtype, k->swap);
            }
            if (st != GS_OK) break;
            /* scatter the box plo..phi, a run along the last output axis at a time (one
             * memcpy when the run is contiguous in the chunk) */
            int64_t rs = 0, rn = nd > 0 ? phi[nd - 1] - plo[nd - 1] : 1;
            for (int32_t a = 0; a < fnd; a++)
                if (nd > 0 && k->fperm[a] == nd - 1) rs = cs[a] * k->fstep[a];
            const int fast = !missing && rs == 1;
            for (int32_t j = 0; j < nd; j++) p[j] = plo[j];
            for (;;) {
                int64_t o = 0, e = 0;
                for (int32_t j = 0; j < nd; j++) o += ost[j] * p[j];
                for (int32_t a = 0; a < fnd; a++) {
                    int32_t j = k->fperm[a];
                    int64_t c = k->fbase[a] + (j < 0 ? 0 : k->fstep[a] * p[j]);
                    e += cs[a] * (c - ci[a] * k->zchunk[a]);
                }
                if (fast) {
                    memcpy(dst + o * is, chunk + e * is, (size_t)rn * isz);
                } else if (missing) {
                    for (int64_t t = 0; t < rn; t++) memcpy(dst + (o + t) * is, fillb, isz);
                } else {
                    for (int64_t t = 0; t < rn; t++)
                        memcpy(dst + (o + t) * is, chunk + (e + t * rs) * is, isz);
                }
                {
                    int32_t j = nd - 2;
                    for (; j >= 0; j--) {
                        if (++p[j] < phi[j]) break;
                        p[j] = plo[j];
                    }
                    if (j < 0) break;
                }
            }
        }
        {
            int32_t a = fnd - 1;
            for (; a >= 0; a--) {
                if (++ci[a] <= chi[a]) break;
                ci[a] = clo[a];
            }
            if (a < 0) break;
        }
    }
    gs_free(chunk);
    return st;
}

int gs__zarr_as_raw(const gs_kfile_t *k, gs_kfile_t *raw, char *path, size_t len)
{
    const size_t isz = gs__fio_itemsize(k->fdtype);
    int64_t cs[GS_MAX_NDIM], ci[GS_MAX_NDIM], s = 1, base = 0, zn;
    struct stat sb;

    if (k->zcodec != GS_ZCODEC_NONE || isz == 0 || k->ndim < 1 || k->fndim < 1 ||
        k->ndim > GS_MAX_NDIM || k->fndim > GS_MAX_NDIM)
        return 0;
    for (int32_t j = 0; j < k->ndim; j++)
        if (k->shape[j] < 1) return 0;
    if (k->forder) {
        for (int32_t a = 0; a < k->fndim; a++) { cs[a] = s; s *= k->zchunk[a]; }
    } else {
        for (int32_t a = k->fndim - 1; a >= 0; a--) { cs[a] = s; s *= k->zchunk[a]; }
    }
    zn = s;
    *raw = *k;
    raw->fmt = GS_KFILE_RAW;
    raw->offset = 0;
    raw->nelems = zn;
    for (int32_t j = 0; j < k->ndim; j++) raw->stride[j] = 0;
    for (int32_t a = 0; a < k->fndim; a++) {
        int64_t c0 = k->fbase[a], c1 = k->fbase[a];
        int32_t j = k->fperm[a];
        if (k->zchunk[a] < 1) return 0;
        if (j >= k->ndim) return 0;
        if (j >= 0) {
            int64_t e = k->fbase[a] + k->fstep[a] * (k->shape[j] - 1);
            if (e < c0) c0 = e;
            else c1 = e;
            raw->stride[j] += cs[a] * k->fstep[a];
        }
        if (c0 < 0 || c1 >= k->fshape[a] || c0 / k->zchunk[a] != c1 / k->zchunk[a]) return 0;
        ci[a] = c0 / k->zchunk[a];
        base += cs[a] * (k->fbase[a] - ci[a] * k->zchunk[a]);
    }
    raw->base = base;
    gs__zarr_key(k, k->path, ci, path, len);
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != (uint64_t)zn * isz)
        return 0;
    raw->path = path;
    return 1;
}

/* mkdir -p of the directories above @a path (the file itself excluded). */
static gs_status_t gs__zarr_mkdirs(char *path, size_t from)
{
    for (char *p = path + from; *p; p++) {
        if (*p != '/' || p == path) continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            gs_status_t st = gs_error_set(GS_ERR_IO, "%s: %s", path, strerror(errno));
            *p = '/';
            return st;
        }
        *p = '/';
    }
    return GS_OK;
}

static gs_status_t gs__zarr_put(const char *path, const void *p, size_t n)
{
    gs_status_t st;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return gs_error_set(GS_ERR_IO, "%s: %s", path, strerror(errno));
    st = gs__fio_pwrite(fd, path, p, n, 0);
    if (close(fd) != 0 && st == GS_OK)
        st = gs_error_set(GS_ERR_IO, "%s: close: %s", path, strerror(errno));
    return st;
}

gs_status_t gs__zarr_write(const gs_kfile_t *k, const uint8_t *src, double *units_p)
{
    const int32_t nd = k->ndim;
    const size_t isz = gs__fio_itemsize(k->fdtype);
    int64_t zn = gs_region_size(nd, k->zchunk), ci[GS_MAX_NDIM], p[GS_MAX_NDIM] = {0};
    uint8_t *chunk, fillb[8];
    uint8_t *enc = NULL;
    size_t enc_len = 0, raw_len;
    char path[4200];
    gs_status_t st;

    if (isz == 0 || k->swap || k->forder || nd != k->fndim)
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: zarr chunks are written C order, "
                            "little-endian, of a supported dtype", k->path);
    for (int32_t a = 0; a < nd; a++) {
        if (k->fbase[a] % k->zchunk[a] != 0 || k->shape[a] > k->zchunk[a])
            return gs_error_set(GS_ERR_INVALID_PARAM, "%s: region is not one zarr chunk", k->path);
        ci[a] = k->fbase[a] / k->zchunk[a];
    }
    raw_len = (size_t)zn * isz;
    chunk = gs_malloc(raw_len, "zarr chunk");
    if (chunk == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory", k->path);
    gs__fio_fill_bytes(k->fdtype, k->fill, fillb);
    for (int64_t i = 0; i < zn; i++) memcpy(chunk + (size_t)i * isz, fillb, isz);
    if (gs_region_size(nd, k->shape) > 0) {
        int64_t cst[GS_MAX_NDIM], i = 0;
        for (int32_t a = nd - 1; a >= 0; a--) cst[a] = a == nd - 1 ? 1 : cst[a + 1] * k->zchunk[a + 1];
        for (;;) {
            int64_t e = 0;
            for (int32_t a = 0; a < nd - 1; a++) e += cst[a] * p[a];
            if (nd > 0) {
                memcpy(chunk + (size_t)e * isz, src + (size_t)i * isz,
                       (size_t)k->shape[nd - 1] * isz);
                i += k->shape[nd - 1];
            } else {
                memcpy(chunk, src, isz);
                break;
            }
            {
                int32_t a = nd - 2;
                for (; a >= 0; a--) {
                    if (++p[a] < k->shape[a]) break;
                    p[a] = 0;
                }
                if (a < 0) break;
            }
        }
    }
    switch (k->zcodec) {
    case GS_ZCODEC_NONE:
        enc = (uint8_t *)chunk;
        enc_len = raw_len;
        break;
    case GS_ZCODEC_ZSTD: {
        size_t cap = ZSTD_compressBound(raw_len);
        enc = gs_malloc(cap, "zarr encoded chunk");
        if (enc == NULL) {
            st = gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory", k->path);
            goto out_chunk;
        }
        enc_len = ZSTD_compress(enc, cap, chunk, raw_len, k->zlevel);
        if (ZSTD_isError(enc_len)) {
            st = gs_error_set(GS_ERR_INTERNAL, "%s: zstd: %s", k->path, ZSTD_getErrorName(enc_len));
            goto out_enc;
        }
        break;
    }
    case GS_ZCODEC_BLOSC: {
        size_t cap = raw_len + BLOSC_MAX_OVERHEAD;
        int n;
        enc = gs_malloc(cap, "zarr encoded chunk");
        if (enc == NULL) {
            st = gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory", k->path);
            goto out_chunk;
        }
        n = blosc_compress_ctx(k->zlevel < 0 ? 5 : k->zlevel, BLOSC_SHUFFLE, isz,
                               raw_len, chunk, enc, cap, "lz4", 0, 1);
        if (n <= 0) {
            st = gs_error_set(GS_ERR_INTERNAL, "%s: blosc compression failed (%d)", k->path, n);
            goto out_enc;
        }
        enc_len = (size_t)n;
        break;
    }
    default:
        st = gs_error_set(GS_ERR_UNSUPPORTED, "%s: unknown codec", k->path);
        goto out_chunk;
    }
    gs__zarr_key(k, k->path, ci, path, sizeof(path));
    if ((st = gs__zarr_mkdirs(path, 0)) == GS_OK) st = gs__zarr_put(path, enc, enc_len);
    if (st == GS_OK) *units_p = 1.0;
out_enc:
    if ((void *)enc != (void *)chunk) gs_free(enc);
out_chunk:
    gs_free(chunk);
    return st;
}

gs_status_t gs__zarr_commit(const gs_kfile_t *k, double total)
{
    char meta[4200];
    gs_status_t st;
    int fd;
    if (total != k->expect)
        return gs_error_set(GS_ERR_IO, "%s: %.0f chunks written, expected %.0f; %s left in place",
                            k->path, total, k->expect, k->tmp);
    /* the write tasks made the temporary directory; without it this commit already ran (a
     * re-run after a lost worker) when the store's metadata is in place, else it is an error */
    if (access(k->tmp, F_OK) != 0) {
        int e = errno;
        snprintf(meta, sizeof(meta), "%s/%s", k->path, k->zver == 3 ? "zarr.json" : ".zarray");
        if (e == ENOENT && access(meta, F_OK) == 0) {
            GS_LOG_INFO("%s: already committed", k->path);
            return GS_OK;
        }
        return gs_error_set(GS_ERR_IO, "%s: %s", k->tmp, strerror(e));
    }
    snprintf(meta, sizeof(meta), "%s/%s", k->tmp, k->zver == 3 ? "zarr.json" : ".zarray");
    if ((st = gs__zarr_put(meta, k->hdr, (size_t)k->hdr_len)) != GS_OK) return st;
    if (k->zver == 2) {
        snprintf(meta, sizeof(meta), "%s/.zattrs", k->tmp);
        if ((st = gs__zarr_put(meta, "{}", 2)) != GS_OK) return st;
    }
    fd = open(k->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    if (rename(k->tmp, k->path) != 0)
        return gs_error_set(GS_ERR_IO, "cannot rename %s to %s: %s", k->tmp, k->path,
                            strerror(errno));
    GS_LOG_INFO("wrote zarr store %s", k->path);
    return GS_OK;
}
