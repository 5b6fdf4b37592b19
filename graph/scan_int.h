/* Internal definitions of cumulative sums and products (gs_array_cumulative; issue 20).
 *
 *   array_scan.c  the public constructor, the result dtype rule and the node rebuild used by
 *                 slice pushdown;
 *   layer_scan.c  the SCAN layer (checks, inputs, instantiation to gs_kscan_t, wire body);
 *   lower_scan.c  lowering of a SCAN node to its layers.
 *
 * A SCAN node over K chunks along its axis lowers to (Dask's cumsum, with the carry folded into
 * the chunk scans instead of a separate broadcast add):
 *   totals  (K > 1) TOTAL, chain 0: per input chunk k < K-1 its total along the axis t_k, a slab
 *           (the chunk's shape with 1 on the axis);
 *   carries (K > 1) TOTAL, chain 1, over the totals' grid: c_k = c_{k-1} OP t_k (c_0 = t_0), a
 *           sequential chain of slab tasks along the axis: c_k is the running total of chunks
 *           0..k;
 *   scans   SCAN: output chunk k = the inclusive scan of input chunk k starting from c_{k-1}
 *           (from the identity for k = 0).
 * Every task of the totals and scans is independent of the others along the axis; only the
 * slab-sized carries are sequential. */
#ifndef GS_GRAPH_SCAN_INT_H
#define GS_GRAPH_SCAN_INT_H

#include "graph/graph_internal.h"
#include "proto/mp.h"

/* ---- nodes (array_scan.c) ---- */

/* SCAN node @a n rebuilt over input @a a (same grid as n's input). */
gs_status_t gs__scan_rebuild(const struct gs_array *n, gs_array_h a, gs_array_h *out_p);

/* ---- layers (layer_scan.c) ---- */

void gs__scan_free(gs_layer_t *l);
/* 1 when the layer is consistent (op, mode, axis, dtypes, grid against src), else 0 with
 * *why_p set. */
int gs__scan_check(const gs_layer_t *l, const char **why_p);
/* Inputs of block @a block: its input chunk, and the running total before it (SCAN, or a
 * chained TOTAL, past the first block along the axis). */
int gs__scan_ninputs(const gs_layer_t *l, uint64_t block);
uint64_t gs__scan_out_nbytes(const gs_layer_t *l, uint64_t block);
/* The kernel of block @a block; inputs are checked against the sizes they must have. */
gs_status_t gs__scan_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_kscan_t *k);
/* The block of src (SCAN, TOTAL) that block @a block of the layer reads. */
uint64_t gs__scan_src_block(const gs_layer_t *l, uint64_t block);
/* Display name: "cumsum", "cumprod", "cumsum-total", "cumsum-carry" (static). */
const char *gs__scan_name(const gs_layer_t *l);
/* The layer codec's grid form (layer_codec.c): [[shape...], [[bounds...]...]]. Decoding into a
 * zeroed grid; on failure the caller cleans it up (gs_grid_cleanup). */
void gs__enc_grid(gs_mp_writer_t *w, const gs_grid_t *g);
int gs__dec_grid(gs_mp_reader_t *r, gs_grid_t *g);
/* Wire body after the grid: [op, mode, axis, chain, in_dtype, out_dtype, src grid]. */
void gs__scan_encode_body(gs_mp_writer_t *w, const gs_layer_t *l);
int gs__scan_decode_body(gs_mp_reader_t *r, gs_layer_t *l);

#endif
