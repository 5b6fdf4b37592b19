/* Internal helpers shared by chunkops/fileio.c (raw files, dispatch) and chunkops/zarr.c
 * (zarr chunk files). Not installed. */
#ifndef GS_CHUNKOPS_FILEIO_INT_H
#define GS_CHUNKOPS_FILEIO_INT_H

#include "chunkops/fileio.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes per element of gs_dtype_t @a dt (0: not readable). */
size_t gs__fio_itemsize(int32_t dt);
/* One element in the file's representation (@a swap: other byte order) as a double. */
double gs__fio_elem(const uint8_t *src, int32_t dt, int swap);
/* Exactly @a n bytes at @a off, in pieces; a short read is "truncated", naming @a path. */
gs_status_t gs__fio_pread(int fd, const char *path, void *dst, size_t n, int64_t off);
gs_status_t gs__fio_pwrite(int fd, const char *path, const void *src, size_t n, int64_t off);

/* zarr.c: read the region of @a k into host memory @a dst (C order); write the one chunk the
 * region is from host memory @a src (*units_p = 1 on success); commit: check the chunk count
 * @a total, write the metadata, rename the directory. */
gs_status_t gs__zarr_read(const gs_kfile_t *k, double *dst);
gs_status_t gs__zarr_write(const gs_kfile_t *k, const double *src, double *units_p);
gs_status_t gs__zarr_commit(const gs_kfile_t *k, double total);

#endif
