/* Internal definitions of data-movement operations: rechunk, concatenate, stack.
 *
 *   array_copy.c  the public constructors (gs_array_rechunk & co.) and the node builders below;
 *   layer_copy.c  the COPY layer: per-block explicit inputs and pieces, checks, instantiation
 *                 (gs_kcopy_t) and the body of its wire format;
 *   lower_copy.c  lowering of RECHUNK and CONCAT nodes to COPY layers.
 * Not installed. */
#ifndef GS_GRAPH_COPY_INT_H
#define GS_GRAPH_COPY_INT_H

#include "graph/graph_internal.h"
#include "proto/mp.h"

/* One piece of a COPY block: the output box [dst, dst + size) (block-local) comes from input
 * `slot` of the block at offsets base + sum_j q[j] * stride[j] (q local to the box; element
 * units inside the input chunk). Entries past the layer's ndim are 0. */
typedef struct gs__cpiece {
    int32_t slot;
    int64_t base;
    int64_t stride[GS_MAX_NDIM];
    int64_t dst[GS_MAX_NDIM];
    int64_t size[GS_MAX_NDIM];
} gs__cpiece_t;

/* ---- COPY layers (layer_copy.c) ---- */

/* Free what a COPY layer owns besides its grid (NULL arrays are fine). */
void gs__copy_free(gs_layer_t *l);
/* Structural check of a COPY layer (grid already checked): offsets, input lengths, and per
 * block: at most GS_KERNEL_MAX_PIECES inputs and pieces, slots in range, boxes inside the block,
 * reads inside their input, pieces disjoint and covering the block. 1 when valid, else 0 with
 * *why_p set. */
int gs__copy_check(const gs_layer_t *l, const char **why_p);
/* gs__copy_check with each block grown by 2 pad[j] on axis j (pad NULL: none) and, with
 * @a cover 0, pieces that need not cover their block (a STENCIL layer's padded blocks). */
int gs__copy_check_ex(const gs_layer_t *l, const int32_t *pad, int cover, const char **why_p);
/* Inputs of block @a block (in range). */
int gs__copy_ninputs(const gs_layer_t *l, uint64_t block);
/* Expected input lengths of block @a block (gs__copy_ninputs entries, owned by the layer). */
const int64_t *gs__copy_in_lens(const gs_layer_t *l, uint64_t block);
/* Kernel for block @a block (in range): checks the inputs' number and lengths
 * (GS_ERR_INVALID_PARAM). */
gs_status_t gs__copy_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_kcopy_t *k);
/* Wire format of the body after the grid: [block...], block := [[in_len...], [piece...]],
 * piece := [slot, base, [stride...], [dst...], [size...]] (ndim entries each). The decoder
 * reads into a layer whose grid is set and checked; 0 on failure with r->err set (the caller
 * frees the layer). */
void gs__copy_encode_body(gs_mp_writer_t *w, const gs_layer_t *l);
int gs__copy_decode_body(gs_mp_reader_t *r, gs_layer_t *l);

/* ---- nodes (array_copy.c) ---- */

/* RECHUNK node over @a a with grid @a g (same ndim and shape as a's; copied). New reference in
 * *out_p. GS_ERR_NO_MEMORY, GS_ERR_INVALID_PARAM. */
gs_status_t gs__array_rechunk_grid(gs_array_h a, const gs_grid_t *g, gs_array_h *out_p);
/* A node of @a kind (GS__NODE_*) with the one input @a a, output grid @a g (copied) and a's
 * dtype: the constructor of RECHUNK and RESHAPE. New reference in *out_p. GS_ERR_NO_MEMORY. */
gs_status_t gs__array_grid_node(int kind, gs_array_h a, const gs_grid_t *g, gs_array_h *out_p);
/* CONCAT node: @a a then @a b (NULL: a alone) along output axis @a axis; @a ea / @a eb: the
 * operand lacks that axis (stack). Shapes must agree elsewhere (checked). Output chunks: the
 * operands' chunks one after the other along @a axis (one chunk per expanded operand), the
 * union of their boundaries on the other axes. New reference in *out_p. */
gs_status_t gs__array_concat_node(gs_array_h a, gs_array_h b, int axis, int ea, int eb,
                                  gs_array_h *out_p);

/* ---- reshape (array_shape.c) ---- */

/* RESHAPE node over @a a with output grid @a g (copied): block b of @a g must hold the elements
 * of one block of @a a in the same row-major order (gs_array_reshape() rechunks @a a so; the
 * lowering checks it). Same dtype and element count, size > 0. New reference in *out_p.
 * GS_ERR_NO_MEMORY, GS_ERR_INVALID_PARAM. */
gs_status_t gs__array_reshape_node(gs_array_h a, const gs_grid_t *g, gs_array_h *out_p);
/* DIAG node: diagonal @a k of the 2-D @a a, which must have at least one element on it. Output
 * chunks: the diagonal cut wherever it crosses a row or column chunk boundary of @a a. New
 * reference in *out_p. GS_ERR_NO_MEMORY, GS_ERR_INVALID_PARAM. */
gs_status_t gs__array_diag_node(gs_array_h a, int64_t k, gs_array_h *out_p);

#endif
