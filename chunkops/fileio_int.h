/* Internal helpers shared by chunkops/fileio.c (raw files, dispatch) and chunkops/zarr.c
 * (zarr chunk files). Not installed. */
#ifndef GS_CHUNKOPS_FILEIO_INT_H
#define GS_CHUNKOPS_FILEIO_INT_H

#include "chunkops/fileio.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes per element of gs_dtype_t @a dt (0: not readable). */
size_t gs__fio_itemsize(int32_t dt);
/* Bring @a n elements of dtype @a dt at @a p, as stored, to the host's representation in
 * place: byte-swapped when @a swap (the file is big-endian), bool bytes made 0 or 1. */
void gs__fio_fix(uint8_t *p, int64_t n, int32_t dt, int swap);
/* The bytes of one element of dtype @a dt (host order) holding fill value @a fill, into
 * @a out (8 bytes): floating dtypes take the value (rounded to the dtype), integer dtypes and
 * bool the int64 whose bit pattern @a fill holds (gs__fspec_t.fill). */
void gs__fio_fill_bytes(int32_t dt, double fill, uint8_t *out);
/* Exactly @a n bytes at @a off, in pieces; a short read is "truncated", naming @a path. */
gs_status_t gs__fio_pread(int fd, const char *path, void *dst, size_t n, int64_t off);
gs_status_t gs__fio_pwrite(int fd, const char *path, const void *src, size_t n, int64_t off);

/* zarr.c: read the region of @a k into host memory @a dst (C order, elements of k->fdtype); write the one chunk the
 * region is from host memory @a src (*units_p = 1 on success); commit: check the chunk count
 * @a total, write the metadata, rename the directory. */
gs_status_t gs__zarr_read(const gs_kfile_t *k, uint8_t *dst);
gs_status_t gs__zarr_write(const gs_kfile_t *k, const uint8_t *src, double *units_p);
gs_status_t gs__zarr_commit(const gs_kfile_t *k, double total);
/* Whether the region of zarr read @a k lies inside one uncompressed chunk file that exists
 * with exactly the chunk's bytes: then that file is a raw array, and *raw (its path in @a path,
 * @a len bytes) reads the same elements from it as a GS_KFILE_RAW task (pread straight into
 * the output or the staging buffers, no chunk buffer). 0 otherwise (other codecs, a region
 * over several chunks, a missing or wrong-sized file): the caller reads it as zarr, with its
 * fill_value and errors. */
int gs__zarr_as_raw(const gs_kfile_t *k, gs_kfile_t *raw, char *path, size_t len);

#endif
