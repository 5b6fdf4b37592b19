/* Internal definitions of array files (gs__fspec_t in graph_internal.h).
 *
 *   array_file.c  the public constructors (gs_array_from_npy, gs_array_from_raw), the .npy
 *                 header codec, and the write expression behind gs_client_to_npy;
 *   layer_file.c  the FILE layer: checks, instantiation (gs_kfile_t), the body of its wire
 *                 format;
 *   lower.c       lowers FILE nodes to FILE layers (gs__lw_build_file below);
 *   pushdown.c    folds slices and transposes of a file source into the source's map.
 * Not installed. */
#ifndef GS_GRAPH_FILE_INT_H
#define GS_GRAPH_FILE_INT_H

#include "graph/graph_internal.h"
#include "proto/mp.h"

/* Longest path a FILE layer carries. */
#define GS__FILE_PATH_MAX 4096

/* Whether @a f describes a valid operation over an array of grid @a grid: 1, or 0 with *why
 * set (static text). Total over decoded input. */
int gs__fspec_check(const gs__fspec_t *f, const gs_grid_t *grid, const char **why);

/* ---- FILE layers (layer_file.c) ---- */
void gs__file_free(gs_layer_t *l);
const char *gs__file_name(const gs_layer_t *l);
int gs__file_ninputs(const gs_layer_t *l);
uint64_t gs__file_out_nbytes(const gs_layer_t *l, uint64_t block);
int gs__file_check(const gs_layer_t *l, const char **why);
/* The gs_kfile_t of block @a block in t->u.file (and t->kind); GS_ERR_INVALID_PARAM for a
 * wrong number or size of inputs. Pointers borrow from @a l, @a inputs and @a out. */
gs_status_t gs__file_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_ktask_t *t);
void gs__file_encode_body(gs_mp_writer_t *w, const gs_layer_t *l);
int gs__file_decode_body(gs_mp_reader_t *r, gs_layer_t *l);

/* ---- dtypes of files (array_file.c) ---- */

/* The dtypes files may hold, for messages. */
#define GS__FILE_DTYPES "float64, float32, float16, int32, int64, uint8, bool"

/* NumPy type string @a d (@a len bytes, not NUL-terminated; .npy descr and zarr v2 dtype:
 * '<f8', '>i4', '|u1', '|b1', ...) as a gs_dtype_t and whether its bytes are big-endian
 * (*swap_p; 0 for one-byte types): 1, or 0 when this build has no such dtype. */
int gs__npy_descr_parse(const char *d, size_t len, int32_t *dtype_p, int32_t *swap_p);
/* The little-endian NumPy type string of dtype @a dt ('<f8', '|u1', '|b1', ...); static. */
const char *gs__npy_descr_of(int32_t dt);

/* ---- nodes (array_file.c) ---- */

/* A FILE node of @a grid (bounds copied) owning @a spec (moved in, also on failure), with
 * input @a in (a new reference taken; NULL for READ). GS_ERR_NO_MEMORY / GS_ERR_INVALID_PARAM. */
gs_status_t gs__array_file_node(gs__fspec_t *spec, const gs_grid_t *grid, gs_array_h in,
                                gs_array_h *out_p);

/* A READ node over the whole file described by @a spec (moved in, also on failure; its map is
 * set to the identity), chunked by @a chunks (fndim entries >= 1). */
gs_status_t gs__file_source(gs__fspec_t *spec, const int64_t *chunks, gs_array_h *out_p);

/* The write expression of @a a into @a path through @a tmp: WRITE (one unit per chunk: bytes
 * for raw files, 1 for zarr chunks) -> sum -> COMMIT checking the total against @a expect and
 * writing @a hdr (hdr_len bytes, copied: the .npy header at offset 0, or the zarr metadata
 * file). @a proto gives fmt and the zarr fields; everything else comes from @a a. */
gs_status_t gs__file_write_expr(gs_array_h a, const char *path, const char *tmp,
                                const gs__fspec_t *proto, const uint8_t *hdr, int64_t hdr_len,
                                double expect, gs_array_h *out_p);

#endif
