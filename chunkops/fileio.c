/* Array file I/O of FILE tasks (gs_kfile_t, graph/kernel.h), run by the worker on the thread
 * that runs the task (a pool thread, or the launcher thread in streams mode: never the loop).
 *
 * Reading. The region is walked as runs along one output axis, the one whose file stride is
 * smallest (the last axis for C-order files, the first for Fortran-order ones), so each run is
 * one pread of a contiguous or short-strided byte range; a region whose elements are
 * contiguous in the file in the region's own row-major order (a block of whole rows of a
 * C-order file, and any float64 region of one row) is one pread per 64 MiB. Only the byte
 * ranges of kept elements are read (a run's span when its stride is small, else element by
 * element). Elements land in the file's own dtype (the array's: no conversion), byte-swapped
 * when the file is big-endian, bool bytes made 0 or 1.
 *
 * Backends whose memory is the host's ("cpu") are read into directly. On others, a region whose
 * bytes need no change (no byte swap, not bool) and whose runs along the last axis are
 * contiguous in the file (C order) is first offered to the backend's file_read: its runs, one
 * byte range each (adjacent ones merged), read straight into device memory (cuFile, when the
 * backend's file path says so: chunkops/cuda/cufile.c). Everything else, and every read the
 * backend declines (GS_ERR_UNSUPPORTED), gets slabs of whole
 * rows of the region read into two page-locked staging buffers (ops->host_alloc) in turn,
 * each copied to the device while the next is read: double buffering, with the copy of slab
 * i-1 overlapping the read of slab i (the stream is synchronised before a buffer is reused).
 * A worker in streams mode runs these tasks on its file threads (worker/launch.c), each with
 * a stream of its own: several chunks are read and decoded at once, blocking nothing else.
 * Zarr regions are assembled in one page-locked buffer of whole rows ending at zarr chunk
 * boundaries; beyond GS__FIO_ZPIN_MAX (zarr chunks of 200 MB, one per task, read by several
 * threads at once) they are decoded into host memory and staged out in GS__FIO_SLAB pieces,
 * so a file thread never holds more than two GS__FIO_SLAB staging buffers, which the CUDA
 * backend's cache of page-locked buffers keeps for the next task (chunkops/cuda/pinned.c).
 * The bytes each path read are counted for the worker's heartbeat
 * (gs_chunkops_file_read_stats).
 *
 * Writing. WRITE pwrites its chunk (copied to the host first on device backends) into the
 * temporary file at the addressing of its region; COMMIT writes the header, checks that the
 * writes total the file's data bytes, sets the size, fsyncs and renames: the final name
 * appears only once every chunk is written. Every error names the file. */
#include "chunkops/fileio_int.h"
#include "chunkops/elem_dtype.h"
#include "common/error.h"
#include "common/alloc.h"
#include "common/log.h"

#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GS__FIO_SLAB (16u << 20)         /* staging buffer bytes (device backends) */
/* Largest page-locked buffer a zarr read on a device backend assembles whole rows in; a
 * larger region is decoded into host memory and staged out in GS__FIO_SLAB pieces. */
#define GS__FIO_ZPIN_MAX ((size_t)64 << 20)
#define GS__FIO_PIECE ((size_t)64 << 20) /* largest single pread/pwrite */

/* bytes read by each gs_fread_path_t since the process started */
static _Atomic uint64_t gs__fio_read_bytes[GS_FREAD_NPATHS];

void gs_chunkops_file_read_stats(uint64_t bytes_p[GS_FREAD_NPATHS])
{
    for (int i = 0; i < GS_FREAD_NPATHS; i++) bytes_p[i] = atomic_load(&gs__fio_read_bytes[i]);
}

const char *gs_fread_path_name(int path)
{
    static const char *const names[GS_FREAD_NPATHS] = {"cpu", "pinned", "cufile",
                                                       "cufile-compat"};
    return path >= 0 && path < GS_FREAD_NPATHS ? names[path] : "unknown";
}

gs_status_t gs_file_path_parse(const char *s, int *path_p)
{
    int p;
    if (s == NULL || path_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "file path: NULL argument");
    if (strcmp(s, "auto") == 0) p = GS_FILE_PATH_AUTO;
    else if (strcmp(s, "pinned") == 0) p = GS_FILE_PATH_PINNED;
    else if (strcmp(s, "cufile") == 0) p = GS_FILE_PATH_CUFILE;
    else
        return gs_error_set(GS_ERR_INVALID_PARAM, "file path '%s': expected auto, pinned or cufile",
                            s);
    *path_p = p;
    return GS_OK;
}

/* Count the bytes of the region of @a k as read by @a path. */
static void gs__fio_count(int path, const gs_kfile_t *k)
{
    atomic_fetch_add(&gs__fio_read_bytes[path],
                     (uint64_t)gs_region_size(k->ndim, k->shape) * gs__fio_itemsize(k->fdtype));
}

size_t gs__fio_itemsize(int32_t dt)
{
    switch (dt) {
    case GS_DTYPE_FLOAT64: case GS_DTYPE_INT64: return 8;
    case GS_DTYPE_FLOAT32: case GS_DTYPE_INT32: return 4;
    case GS_DTYPE_FLOAT16: return 2;
    case GS_DTYPE_UINT8: case GS_DTYPE_BOOL: return 1;
    default: return 0;
    }
}

/* Reverse the bytes of each of the @a n items of @a isz (2, 4 or 8) bytes at @a p. One loop
 * for every size: called with a constant size (gs__fio_fix) it inlines to that size's
 * bswap loop alone, as fast as a loop written for it (the item size is not a runtime branch). */
static inline void gs__fio_bswap(uint8_t *p, int64_t n, size_t isz)
{
    for (int64_t i = 0; i < n; i++, p += isz) {
        if (isz == 2) {
            uint16_t v;
            memcpy(&v, p, 2);
            v = __builtin_bswap16(v);
            memcpy(p, &v, 2);
        } else if (isz == 4) {
            uint32_t v;
            memcpy(&v, p, 4);
            v = __builtin_bswap32(v);
            memcpy(p, &v, 4);
        } else {
            uint64_t v;
            memcpy(&v, p, 8);
            v = __builtin_bswap64(v);
            memcpy(p, &v, 8);
        }
    }
}

void gs__fio_fix(uint8_t *p, int64_t n, int32_t dt, int swap)
{
    switch (swap ? gs__fio_itemsize(dt) : 1) {
    case 2: gs__fio_bswap(p, n, 2); break;   /* constant sizes: one specialised loop each */
    case 4: gs__fio_bswap(p, n, 4); break;
    case 8: gs__fio_bswap(p, n, 8); break;
    default: break;
    }
    if (dt == GS_DTYPE_BOOL)
        for (int64_t i = 0; i < n; i++) p[i] = p[i] != 0;
}

void gs__fio_fill_bytes(int32_t dt, double fill, uint8_t *out)
{
    int64_t i = gs_v_i(fill);
    memset(out, 0, 8);
    switch (dt) {
    case GS_DTYPE_FLOAT64: memcpy(out, &fill, 8); break;
    case GS_DTYPE_FLOAT32: {
        /* beyond float's range: the infinity IEEE rounding gives (a C cast would be undefined) */
        float v = isfinite(fill) && fabs(fill) > FLT_MAX ? (fill > 0 ? INFINITY : -INFINITY)
                                                         : (float)fill;
        memcpy(out, &v, 4);
        break;
    }
    case GS_DTYPE_FLOAT16: { uint16_t v = gs_f64_to_f16(fill); memcpy(out, &v, 2); break; }
    case GS_DTYPE_INT32: { int32_t v = (int32_t)(uint32_t)i; memcpy(out, &v, 4); break; }
    case GS_DTYPE_INT64: memcpy(out, &i, 8); break;
    case GS_DTYPE_UINT8: out[0] = (uint8_t)i; break;
    case GS_DTYPE_BOOL: out[0] = i != 0; break;
    default: break;
    }
}

/* pread exactly @a n bytes at @a off; a short read is the file being truncated. */
gs_status_t gs__fio_pread(int fd, const char *path, void *dst, size_t n, int64_t off)
{
    uint8_t *p = dst;
    while (n > 0) {
        size_t want = n < GS__FIO_PIECE ? n : GS__FIO_PIECE;
        ssize_t got = pread(fd, p, want, (off_t)off);
        if (got < 0) {
            if (errno == EINTR) continue;
            return gs_error_set(GS_ERR_IO, "%s: read of %zu bytes at %lld: %s", path, want,
                                (long long)off, strerror(errno));
        }
        if (got == 0)
            return gs_error_set(GS_ERR_IO, "%s is truncated: no bytes at offset %lld", path,
                                (long long)off);
        p += got;
        n -= (size_t)got;
        off += got;
    }
    return GS_OK;
}

gs_status_t gs__fio_pwrite(int fd, const char *path, const void *src, size_t n,
                                  int64_t off)
{
    const uint8_t *p = src;
    while (n > 0) {
        size_t want = n < GS__FIO_PIECE ? n : GS__FIO_PIECE;
        ssize_t put = pwrite(fd, p, want, (off_t)off);
        if (put < 0) {
            if (errno == EINTR) continue;
            return gs_error_set(GS_ERR_IO, "%s: write of %zu bytes at %lld: %s", path, want,
                                (long long)off, strerror(errno));
        }
        p += put;
        n -= (size_t)put;
        off += put;
    }
    return GS_OK;
}

/* Whether the region's elements are contiguous in the file in row-major region order. */
static int gs__fio_contiguous(const gs_kfile_t *k)
{
    int64_t s = 1;
    for (int32_t j = k->ndim - 1; j >= 0; j--) {
        if (k->shape[j] != 1 && k->stride[j] != s) return 0;
        s *= k->shape[j];
    }
    return 1;
}

/* Check the spec against itself: every address of the region inside the file. */
static gs_status_t gs__fio_check(const gs_kfile_t *k)
{
    int64_t lo = k->base, hi = k->base;
    if (k->path == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "file task without a path");
    if (gs__fio_itemsize(k->fdtype) == 0)
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: unsupported element type %d", k->path,
                            (int)k->fdtype);
    if (k->ndim < 0 || k->ndim > GS_MAX_NDIM || k->offset < 0 || k->nelems < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: bad file task", k->path);
    for (int32_t j = 0; j < k->ndim; j++) {
        if (k->shape[j] < 0) return gs_error_set(GS_ERR_INVALID_PARAM, "%s: bad region", k->path);
        if (k->shape[j] == 0) return GS_OK;
        if (k->stride[j] > 0) hi += k->stride[j] * (k->shape[j] - 1);
        else lo += k->stride[j] * (k->shape[j] - 1);
    }
    if (lo < 0 || hi >= k->nelems)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: region outside the file's %lld elements",
                            k->path, (long long)k->nelems);
    return GS_OK;
}

/* Element copy of @a isz bytes (1, 2, 4 or 8). */
static inline void gs__fio_put(uint8_t *dst, const uint8_t *src, size_t isz)
{
    switch (isz) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    default: memcpy(dst, src, 8); break;
    }
}

/* Read output rows [r0, r1) of axis 0 (all of the region for ndim 0) into @a dst (host, C
 * order, elements of k->fdtype), using @a scratch (at least GS__FIO_SLAB bytes) for strided
 * spans. Bytes land as stored and are then byte-swapped (k->swap) and, for bool, made 0/1. */
static gs_status_t gs__fio_read_rows(int fd, const gs_kfile_t *k, int64_t r0, int64_t r1,
                                     uint8_t *dst, uint8_t *scratch)
{
    const size_t isz = gs__fio_itemsize(k->fdtype);
    const int64_t is = (int64_t)isz;
    int64_t shape[GS_MAX_NDIM], ost[GS_MAX_NDIM], p[GS_MAX_NDIM];
    int32_t nd = k->ndim, in = -1;
    int64_t n, s, total;
    gs_status_t st;

    if (nd == 0) {
        if ((st = gs__fio_pread(fd, k->path, dst, isz, k->offset + k->base * is)) != GS_OK)
            return st;
        gs__fio_fix(dst, 1, k->fdtype, k->swap);
        return GS_OK;
    }
    memcpy(shape, k->shape, sizeof(shape));
    shape[0] = r1 - r0;
    total = gs_region_size(nd, shape);
    if (total == 0) return GS_OK;
    /* contiguous: one range */
    if (gs__fio_contiguous(k)) {
        int64_t off = k->offset + (k->base + r0 * k->stride[0]) * is;
        if ((st = gs__fio_pread(fd, k->path, dst, (size_t)total * isz, off)) != GS_OK) return st;
        gs__fio_fix(dst, total, k->fdtype, k->swap);
        return GS_OK;
    }
    /* runs along the axis of smallest nonzero file stride */
    ost[nd - 1] = 1;
    for (int32_t j = nd - 2; j >= 0; j--) ost[j] = ost[j + 1] * shape[j + 1];
    for (int32_t j = nd - 1; j >= 0; j--) {
        int64_t a = k->stride[j] < 0 ? -k->stride[j] : k->stride[j];
        int64_t b = in < 0 ? 0 : (k->stride[in] < 0 ? -k->stride[in] : k->stride[in]);
        if (shape[j] > 1 && a != 0 && (in < 0 || a < b)) in = j;
    }
    if (in < 0) in = nd - 1;
    n = shape[in];
    s = k->stride[in];
    memset(p, 0, sizeof(p));
    for (;;) {
        int64_t e0 = k->base + k->stride[0] * r0, o0 = 0;   /* rows from r0 on */
        int64_t as = s < 0 ? -s : s, span = as * (n - 1) + 1;
        for (int32_t j = 0; j < nd; j++) {
            if (j == in) continue;
            e0 += k->stride[j] * p[j];
            o0 += ost[j] * p[j];
        }
        if (s < 0) e0 += s * (n - 1);                   /* lowest address of the run */
        if (s == 1 && ost[in] == 1) {                   /* a contiguous run: straight in */
            if ((st = gs__fio_pread(fd, k->path, dst + o0 * is, (size_t)n * isz,
                                    k->offset + e0 * is)) != GS_OK)
                return st;
            gs__fio_fix(dst + o0 * is, n, k->fdtype, k->swap);
        } else if ((uint64_t)span * isz <= GS__FIO_SLAB && (span <= 4 * n || span * is <= 65536)) {
            if ((st = gs__fio_pread(fd, k->path, scratch, (size_t)span * isz,
                                    k->offset + e0 * is)) != GS_OK)
                return st;
            gs__fio_fix(scratch, span, k->fdtype, k->swap);
            for (int64_t t = 0; t < n; t++) {
                int64_t at = s < 0 ? (n - 1 - t) * as : t * as;
                gs__fio_put(dst + (o0 + t * ost[in]) * is, scratch + at * is, isz);
            }
        } else {
            for (int64_t t = 0; t < n; t++) {
                int64_t e = s < 0 ? e0 + (n - 1 - t) * as : e0 + t * as;
                uint8_t *d = dst + (o0 + t * ost[in]) * is;
                if ((st = gs__fio_pread(fd, k->path, d, isz, k->offset + e * is)) != GS_OK)
                    return st;
                gs__fio_fix(d, 1, k->fdtype, k->swap);
            }
        }
        {
            int32_t j = nd - 1;
            for (; j >= 0; j--) {
                if (j == in) continue;
                if (++p[j] < shape[j]) break;
                p[j] = 0;
            }
            if (j < 0) break;
        }
    }
    return GS_OK;
}

static gs_status_t gs__fio_open(const char *path, int flags, int *fd_p)
{
    int fd = open(path, flags | O_CLOEXEC, 0644);
    if (fd < 0) return gs_error_set(GS_ERR_IO, "%s: %s", path, strerror(errno));
    *fd_p = fd;
    return GS_OK;
}

/* A staging buffer of @a n bytes: page-locked (ops->host_alloc) where the backend has them. */
static gs_status_t gs__fio_stage_alloc(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                       size_t n, void **p)
{
    if (ops->host_alloc) return ops->host_alloc(ctx, n, p);
    *p = gs_malloc(n, "file staging");
    return *p != NULL ? GS_OK : gs_error_set(GS_ERR_NO_MEMORY, "file staging");
}

static void gs__fio_stage_free(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx, void *p)
{
    if (p == NULL) return;
    if (ops->host_free) ops->host_free(ctx, p);
    else gs_free(p);
}

/* Copy @a n bytes of host memory @a src to backend memory @a dst through two staging buffers
 * of GS__FIO_SLAB bytes in turn: the copy of one piece to the device overlaps the memcpy of
 * the next into the other buffer. Returns with the copies done (@a s synchronised). */
static gs_status_t gs__fio_upload(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                  gs_chunkops_stream_h s, uint8_t *dst, const uint8_t *src,
                                  size_t n)
{
    void *stage[2] = {NULL, NULL};
    gs_status_t st = GS_OK;
    int i = 0;
    for (size_t off = 0; off < n; off += GS__FIO_SLAB, i ^= 1) {
        size_t len = n - off < GS__FIO_SLAB ? n - off : GS__FIO_SLAB;
        if (stage[i] == NULL &&
            (st = gs__fio_stage_alloc(ops, ctx, GS__FIO_SLAB, &stage[i])) != GS_OK)
            break;
        if ((st = ops->sync(ctx, s)) != GS_OK) break;          /* the copy from this buffer */
        memcpy(stage[i], src + off, len);
        if ((st = ops->copy_from_host(ctx, s, dst + off, stage[i], len)) != GS_OK) break;
    }
    if (st == GS_OK) st = ops->sync(ctx, s);
    else (void)ops->sync(ctx, s);
    for (int b = 0; b < 2; b++) gs__fio_stage_free(ops, ctx, stage[b]);
    return st;
}

/* Zarr on a device backend: slabs of whole output rows, each ending at a zarr chunk boundary
 * along the file axis that output axis 0 reads (so no zarr chunk is decoded twice), assembled
 * in two page-locked staging buffers in turn and copied to the device while the next is read. */
static gs_status_t gs__fio_read_zarr(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                     gs_chunkops_stream_h s, const gs_kfile_t *k)
{
    int64_t rows = k->ndim == 0 ? 1 : k->shape[0];
    int64_t row_elems = k->ndim == 0 ? 1 : gs_region_size(k->ndim, k->shape) / rows;
    const size_t isz = gs__fio_itemsize(k->fdtype);
    int64_t per, zrows = 1;
    int32_t a0 = -1;
    void *stage[2] = {NULL, NULL};
    size_t cap;
    gs_status_t st = GS_OK;
    int i = 0;

    if (strcmp(ops->name, "cpu") == 0) {
        st = gs__zarr_read(k, (uint8_t *)k->out);
        if (st == GS_OK) gs__fio_count(GS_FREAD_CPU, k);
        return st;
    }
    for (int32_t a = 0; a < k->fndim; a++)
        if (k->ndim > 0 && k->fperm[a] == 0) a0 = a;
    if (a0 >= 0) {
        int64_t st0 = k->fstep[a0] < 0 ? -k->fstep[a0] : k->fstep[a0];
        /* output rows one zarr chunk spans (step 0: every row reads one file row; slabs are
         * then not extended) */
        zrows = st0 == 0 ? 0 : k->zchunk[a0] / st0 + 1;
    }
    per = (int64_t)(GS__FIO_SLAB / isz) / row_elems;
    if (per < 1) per = 1;
    if (a0 < 0) per = rows;                            /* no row axis: one slab */
    cap = (size_t)((per + zrows < rows ? per + zrows : rows) * row_elems) * isz;
    if (cap > GS__FIO_ZPIN_MAX) {
        /* zarr chunks spanning more rows than a staging buffer holds (a 5000 x 5000 float64
         * chunk per task: 200 MB): decode the region into host memory, stage it out in
         * GS__FIO_SLAB pieces; page-locking a buffer of the region's size per task, with
         * several file threads at once, would cost more than the extra memcpy */
        size_t n = (size_t)(rows * row_elems) * isz;
        uint8_t *host = gs_malloc(n, "zarr region");
        if (host == NULL)
            return gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory for %zu bytes", k->path, n);
        st = gs__zarr_read(k, host);
        if (st == GS_OK) st = gs__fio_upload(ops, ctx, s, (uint8_t *)k->out, host, n);
        if (st == GS_OK) gs__fio_count(GS_FREAD_PINNED, k);
        gs_free(host);
        return st;
    }
    /* the buffers are made when first needed: a region read in one slab (a whole zarr chunk
     * per task, the common case) page-locks one buffer, not two */
    for (int64_t r0 = 0; r0 < rows; i ^= 1) {
        gs_kfile_t kk = *k;
        int64_t r1 = r0 + per < rows ? r0 + per : rows;
        if (a0 >= 0 && r1 < rows && k->fstep[a0] != 0) {
            /* extend to the last row inside the zarr chunk holding row r1 - 1 */
            int64_t f = k->fstep[a0], c = k->fbase[a0] + f * (r1 - 1), q = c / k->zchunk[a0];
            int64_t last = f > 0 ? ((q + 1) * k->zchunk[a0] - 1 - k->fbase[a0]) / f
                                 : (k->fbase[a0] - q * k->zchunk[a0]) / -f;
            if (last + 1 > r1) r1 = last + 1 < rows ? last + 1 : rows;
            if (r1 - r0 > per + zrows) r1 = r0 + per + zrows;
        }
        if (a0 >= 0) {
            kk.shape[0] = r1 - r0;
            kk.fbase[a0] = k->fbase[a0] + k->fstep[a0] * r0;
        }
        if (stage[i] == NULL && (st = gs__fio_stage_alloc(ops, ctx, cap, &stage[i])) != GS_OK)
            break;
        if ((st = gs__zarr_read(&kk, stage[i])) != GS_OK) break;
        if ((st = ops->sync(ctx, s)) != GS_OK) break;          /* the other buffer's copy */
        if ((st = ops->copy_from_host(ctx, s, (uint8_t *)k->out + (size_t)(r0 * row_elems) * isz,
                                      stage[i], (size_t)((r1 - r0) * row_elems) * isz)) != GS_OK)
            break;
        r0 = r1;
    }
    if (st == GS_OK) st = ops->sync(ctx, s);
    else (void)ops->sync(ctx, s);
    if (st == GS_OK) gs__fio_count(GS_FREAD_PINNED, k);
    for (int b = 0; b < 2; b++) gs__fio_stage_free(ops, ctx, stage[b]);
    return st;
}

/* Offer the region of @a k to the backend's file_read as byte ranges straight into k->out: one
 * per run along the last axis (C-order runs contiguous in the file), adjacent runs merged.
 * GS_ERR_UNSUPPORTED when the layout does not allow it or the backend declines (nothing read):
 * the caller stages. *@a how_p: the gs_fread_path_t that ran. */
static gs_status_t gs__fio_read_direct(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                       gs_chunkops_stream_h s, const gs_kfile_t *k, int *how_p)
{
    const size_t isz = gs__fio_itemsize(k->fdtype);
    const int32_t nd = k->ndim;
    int64_t run = nd == 0 ? 1 : k->shape[nd - 1], nruns, p[GS_MAX_NDIM] = {0};
    gs_chunkops_fspan_t *sp;
    size_t n = 0;
    gs_status_t st;

    if (ops->file_read == NULL || k->swap || k->fdtype == GS_DTYPE_BOOL ||
        (nd > 0 && run > 1 && k->stride[nd - 1] != 1))
        return GS_ERR_UNSUPPORTED;
    nruns = gs_region_size(nd, k->shape) / run;
    if (gs__fio_contiguous(k)) {
        run *= nruns;
        nruns = 1;
    }
    sp = gs_malloc((size_t)nruns * sizeof(*sp), "file read spans");
    if (sp == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory for spans", k->path);
    for (int64_t r = 0; r < nruns; r++) {
        int64_t e = k->base;
        uint8_t *dst = (uint8_t *)k->out + (size_t)(r * run) * isz;
        for (int32_t j = 0; j < nd - 1; j++) e += k->stride[j] * p[j];
        if (n > 0 && sp[n - 1].off + (int64_t)sp[n - 1].nbytes == k->offset + e * (int64_t)isz &&
            (uint8_t *)sp[n - 1].dst + sp[n - 1].nbytes == dst) {
            sp[n - 1].nbytes += (size_t)run * isz;
        } else {
            sp[n].off = k->offset + e * (int64_t)isz;
            sp[n].dst = dst;
            sp[n].nbytes = (size_t)run * isz;
            n++;
        }
        for (int32_t j = nd - 2; j >= 0; j--) {
            if (++p[j] < k->shape[j]) break;
            p[j] = 0;
        }
    }
    /* the output chunk is fresh, but the read must not overtake earlier work of the stream */
    st = ops->sync(ctx, s);
    if (st == GS_OK) st = ops->file_read(ctx, k->path, sp, n, how_p);
    gs_free(sp);
    return st;
}

static gs_status_t gs__fio_read(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                gs_chunkops_stream_h s, const gs_kfile_t *k)
{
    const int host = strcmp(ops->name, "cpu") == 0;
    const size_t isz = gs__fio_itemsize(k->fdtype);
    int64_t rows = k->ndim == 0 ? 1 : k->shape[0];
    int64_t row_elems = k->ndim == 0 ? 1 : gs_region_size(k->ndim, k->shape) / (rows ? rows : 1);
    uint8_t *scratch = NULL;
    void *stage[2] = {NULL, NULL};
    size_t slab;
    int fd = -1;
    gs_status_t st;
    struct stat sb;

    if ((st = gs__fio_check(k)) != GS_OK) return st;
    if (gs_region_size(k->ndim, k->shape) == 0) return GS_OK;
    if (k->fmt == GS_KFILE_ZARR) {
        /* a region inside one uncompressed chunk: that chunk file read as a raw file */
        gs_kfile_t rk;
        char cpath[4200];
        if (gs__zarr_as_raw(k, &rk, cpath, sizeof(cpath))) return gs__fio_read(ops, ctx, s, &rk);
        return gs__fio_read_zarr(ops, ctx, s, k);
    }
    if ((st = gs__fio_open(k->path, O_RDONLY, &fd)) != GS_OK) return st;
    if (fstat(fd, &sb) == 0 &&
        (int64_t)sb.st_size < k->offset + k->nelems * (int64_t)gs__fio_itemsize(k->fdtype)) {
        st = gs_error_set(GS_ERR_IO, "%s is truncated: %lld bytes, the array needs %lld", k->path,
                          (long long)sb.st_size,
                          (long long)(k->offset + k->nelems * (int64_t)gs__fio_itemsize(k->fdtype)));
        goto out_close;
    }
    if (!host) {
        int how = GS_FREAD_PINNED;
        st = gs__fio_read_direct(ops, ctx, s, k, &how);
        if (st == GS_OK) gs__fio_count(how, k);
        if (st != GS_ERR_UNSUPPORTED) goto out_close;
    }
    scratch = gs_malloc(GS__FIO_SLAB, "file read scratch");
    if (scratch == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory for read scratch", k->path);
        goto out_close;
    }
    if (host) {
        st = gs__fio_read_rows(fd, k, 0, rows, (uint8_t *)k->out, scratch);
        if (st == GS_OK) gs__fio_count(GS_FREAD_CPU, k);
        goto out_scratch;
    }
    /* device: double-buffered slabs of whole rows through page-locked staging */
    {
        static atomic_int said;
        if (atomic_exchange(&said, 1) == 0)
            GS_LOG_INFO("file reads on %s: staged reads pread into %s buffers of %zu MiB, "
                        "double-buffered copies to the device", ops->name,
                        ops->host_alloc ? "page-locked" : "host", (size_t)GS__FIO_SLAB >> 20);
    }
    slab = (size_t)row_elems * isz;
    if (slab < GS__FIO_SLAB) slab = GS__FIO_SLAB / slab * slab;
    /* buffers of GS__FIO_SLAB (a multiple of the row below it is used): one size for every
     * read, so cached page-locked buffers serve the next read whatever its rows */
    for (int i = 0; i < 2; i++)
        if ((st = gs__fio_stage_alloc(ops, ctx, slab > GS__FIO_SLAB ? slab : GS__FIO_SLAB,
                                      &stage[i])) != GS_OK)
            goto out_stage;
    {
        int64_t per = (int64_t)(slab / isz) / row_elems;
        int i = 0;
        if (per < 1) per = 1;
        for (int64_t r0 = 0; r0 < rows; r0 += per, i ^= 1) {
            int64_t r1 = r0 + per < rows ? r0 + per : rows;
            if ((st = gs__fio_read_rows(fd, k, r0, r1, stage[i], scratch)) != GS_OK) break;
            if ((st = ops->sync(ctx, s)) != GS_OK) break;      /* copy of the other buffer done */
            if ((st = ops->copy_from_host(ctx, s,
                                          (uint8_t *)k->out + (size_t)(r0 * row_elems) * isz,
                                          stage[i],
                                          (size_t)((r1 - r0) * row_elems) * isz)) != GS_OK)
                break;
        }
        if (st == GS_OK) st = ops->sync(ctx, s);
        else (void)ops->sync(ctx, s);
        if (st == GS_OK) gs__fio_count(GS_FREAD_PINNED, k);
    }
out_stage:
    for (int i = 0; i < 2; i++) gs__fio_stage_free(ops, ctx, stage[i]);
out_scratch:
    gs_free(scratch);
out_close:
    close(fd);
    return st;
}

static gs_status_t gs__fio_write(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                 gs_chunkops_stream_h s, const gs_kfile_t *k)
{
    const int host = strcmp(ops->name, "cpu") == 0;
    const uint8_t *src = (const uint8_t *)k->in;
    const size_t isz = gs__fio_itemsize(k->fdtype);
    uint8_t *copy = NULL;
    double written;
    int64_t rows, row_elems;
    int64_t p[GS_MAX_NDIM] = {0};
    int fd = -1;
    gs_status_t st;

    if ((st = gs__fio_check(k)) != GS_OK) return st;
    if (k->swap)
        return gs_error_set(GS_ERR_UNSUPPORTED, "%s: files are written little-endian", k->path);
    if (k->nin != gs_region_size(k->ndim, k->shape))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: chunk of %lld elements for a region of %lld",
                            k->path, (long long)k->nin,
                            (long long)gs_region_size(k->ndim, k->shape));
    if (!host && k->nin > 0) {
        copy = gs_malloc((size_t)k->nin * isz, "file write staging");
        if (copy == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory", k->path);
        if ((st = ops->copy_to_host(ctx, s, copy, k->in, (size_t)k->nin * isz)) != GS_OK ||
            (st = ops->sync(ctx, s)) != GS_OK)
            goto out_copy;
        src = copy;
    }
    if (k->fmt == GS_KFILE_ZARR) {
        written = 0;
        st = gs__zarr_write(k, src, &written);
        if (st == GS_OK) st = ops->copy_from_host(ctx, s, k->out, &written, sizeof(double));
        if (st == GS_OK && !host) st = ops->sync(ctx, s);
        goto out_copy;
    }
    if ((st = gs__fio_open(k->path, O_WRONLY | O_CREAT, &fd)) != GS_OK) goto out_copy;
    if (k->nin > 0) {
        /* runs along the last axis (the file is C order, written chunks are whole boxes) */
        int32_t nd = k->ndim;
        rows = nd == 0 ? 1 : k->nin / k->shape[nd - 1];
        row_elems = nd == 0 ? 1 : k->shape[nd - 1];
        if (gs__fio_contiguous(k)) {
            rows = 1;
            row_elems = k->nin;
        }
        for (int64_t r = 0; r < rows; r++) {
            int64_t e = k->base;
            for (int32_t j = 0; j < nd - 1; j++) e += k->stride[j] * p[j];
            if (rows == 1) e = k->base;
            if ((st = gs__fio_pwrite(fd, k->path, src + (size_t)(r * row_elems) * isz,
                                     (size_t)row_elems * isz,
                                     k->offset + e * (int64_t)isz)) != GS_OK)
                goto out_close;
            for (int32_t j = nd - 2; j >= 0; j--) {
                if (++p[j] < k->shape[j]) break;
                p[j] = 0;
            }
        }
    }
    written = (double)k->nin * (double)isz;
    st = ops->copy_from_host(ctx, s, k->out, &written, sizeof(double));
    if (st == GS_OK && !host) st = ops->sync(ctx, s);   /* &written is on this stack */
out_close:
    if (close(fd) != 0 && st == GS_OK)
        st = gs_error_set(GS_ERR_IO, "%s: close: %s", k->path, strerror(errno));
out_copy:
    gs_free(copy);
    return st;
}

static gs_status_t gs__fio_commit(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                  gs_chunkops_stream_h s, const gs_kfile_t *k)
{
    double total = 0, size;
    int64_t fsize = k->offset + k->nelems * (int64_t)gs__fio_itemsize(k->fdtype);
    int fd = -1;
    gs_status_t st;
    if (k->path == NULL || k->tmp == NULL || k->hdr_len < 0 || gs__fio_itemsize(k->fdtype) == 0 ||
        (k->fmt == GS_KFILE_RAW && k->hdr_len > k->offset))
        return gs_error_set(GS_ERR_INVALID_PARAM, "bad file commit task");
    if ((st = ops->copy_to_host(ctx, s, &total, k->in, sizeof(double))) != GS_OK ||
        (st = ops->sync(ctx, s)) != GS_OK)
        return st;
    if (k->fmt == GS_KFILE_ZARR) {
        if ((st = gs__zarr_commit(k, total)) != GS_OK) return st;
        size = total;
        st = ops->copy_from_host(ctx, s, k->out, &size, sizeof(double));
        if (st == GS_OK) st = ops->sync(ctx, s);
        return st;
    }
    if (total != k->expect)
        return gs_error_set(GS_ERR_IO, "%s: the chunks wrote %.0f bytes, expected %.0f; %s left "
                            "in place", k->path, total, k->expect, k->tmp);
    /* every write task created the temporary file; without it, either this commit already
     * ran (a re-run after a lost worker: the final file is there, complete) or it is an error.
     * Never create it here: that would rename an empty file over a complete one. */
    fd = open(k->tmp, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        struct stat sb;
        if (errno == ENOENT && stat(k->path, &sb) == 0 && (int64_t)sb.st_size == fsize) {
            GS_LOG_INFO("%s: already committed", k->path);
            size = (double)fsize;
            st = ops->copy_from_host(ctx, s, k->out, &size, sizeof(double));
            if (st == GS_OK) st = ops->sync(ctx, s);
            return st;
        }
        return gs_error_set(GS_ERR_IO, "%s: %s", k->tmp, strerror(errno));
    }
    if (k->hdr_len > 0 && (st = gs__fio_pwrite(fd, k->tmp, k->hdr, (size_t)k->hdr_len, 0)) != GS_OK)
        goto out_close;
    if (ftruncate(fd, (off_t)fsize) != 0 || fsync(fd) != 0) {
        st = gs_error_set(GS_ERR_IO, "%s: %s", k->tmp, strerror(errno));
        goto out_close;
    }
    if (close(fd) != 0) {
        fd = -1;
        st = gs_error_set(GS_ERR_IO, "%s: close: %s", k->tmp, strerror(errno));
        goto out_close;
    }
    fd = -1;
    if (rename(k->tmp, k->path) != 0) {
        st = gs_error_set(GS_ERR_IO, "cannot rename %s to %s: %s", k->tmp, k->path, strerror(errno));
        goto out_close;
    }
    GS_LOG_INFO("wrote %s (%lld bytes)", k->path, (long long)fsize);
    size = (double)fsize;
    st = ops->copy_from_host(ctx, s, k->out, &size, sizeof(double));
    if (st == GS_OK) st = ops->sync(ctx, s);
out_close:
    if (fd >= 0) close(fd);
    return st;
}

gs_status_t gs_chunkops_file_run(const gs_chunkops_ops_t *ops, gs_chunkops_ctx_h ctx,
                                 gs_chunkops_stream_h s, int32_t kind, const gs_kfile_t *k)
{
    if (ops == NULL || k == NULL || k->out == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "file task: NULL argument");
    switch (kind) {
    case GS_KTASK_FILE_READ: return gs__fio_read(ops, ctx, s, k);
    case GS_KTASK_FILE_WRITE: return gs__fio_write(ops, ctx, s, k);
    case GS_KTASK_FILE_COMMIT: return gs__fio_commit(ops, ctx, s, k);
    default: return gs_error_set(GS_ERR_INVALID_PARAM, "file task of kind %d", (int)kind);
    }
}
