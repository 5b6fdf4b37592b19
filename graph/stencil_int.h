/* Internal definitions of neighbourhood operations (gs_array_stencil; issue 16).
 *
 *   array_stencil.c  the public constructor and the node rebuild used by slice pushdown;
 *   layer_stencil.c  the SLAB layer (per block one box of one input chunk, made dense: the edge
 *                    slab a neighbour's halo needs) and the STENCIL layer (per block its inputs
 *                    and pieces of the padded block, as a COPY layer's, plus the weights):
 *                    checks, instantiation, wire bodies;
 *   lower_stencil.c  lowering of STENCIL nodes to one SLAB layer and one STENCIL layer;
 *   array_map.c, layer_map.c, lower_map.c  map_blocks: the node, the USER layer, its lowering;
 *   layer_map_fuse.c, lower_fuse_user.c   elementwise kernels fused with their producers and
 *                    consumers (fused USER layers, below).
 * Not installed. */
#ifndef GS_GRAPH_STENCIL_INT_H
#define GS_GRAPH_STENCIL_INT_H

#include "graph/graph_internal.h"
#include "proto/mp.h"

/* What a STENCIL layer holds besides its COPY-like tables (gs_layer_t.st). */
typedef struct gs__stencil_hdr {
    int32_t radius[GS_MAX_NDIM];
    double cval;
    int32_t nweights;               /* prod(2 radius + 1); 0 with a user kernel */
    double *weights;                /* [nweights] */
    gs__ukernel_t *user;            /* map_overlap's kernel, else NULL */
    int64_t *keep;                  /* [nblocks][2 ndim]: keep_lo then keep_hi per axis */
} gs__stencil_hdr_t;

/* Entries of one SLAB block in u.sl.tab: in_len, in_shape[nd], lo[nd], size[nd]. */
#define GS__SLAB_W(nd) (1 + 3 * (int64_t)(nd))

/* ---- nodes (array_stencil.c, array_map.c) ---- */

/* Where possible (the library exists here) the error a worker would meet loading @a k:
 * GS_ERR_NOT_FOUND with dlerror's text. */
gs_status_t gs__ukernel_check(const gs_user_kernel_t *k);
/* MAPBLOCKS node @a n rebuilt over inputs @a a, @a b (NULL past n's inputs). */
gs_status_t gs__map_rebuild(const struct gs_array *n, gs_array_h a, gs_array_h b, gs_array_h *out_p);

/* STENCIL node @a n rebuilt over input @a a (same grid as n's input). */
gs_status_t gs__stencil_rebuild(const struct gs_array *n, gs_array_h a, gs_array_h *out_p);

/* ---- layers (layer_stencil.c) ---- */

void gs__slab_free(gs_layer_t *l);
void gs__stencil_free(gs_layer_t *l);
/* Structural checks: 1 when valid, else 0 with *why_p set. */
int gs__slab_check(const gs_layer_t *l, const char **why_p);
int gs__stencil_check(const gs_layer_t *l, const char **why_p);
/* Kernels for block @a block (in range); GS_ERR_INVALID_PARAM for wrong inputs. */
gs_status_t gs__slab_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_kcopy_t *k);
gs_status_t gs__stencil_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                    const gs_chunk_ref_t *inputs, double *out, gs_kstencil_t *k);
/* Wire bodies after the grid. SLAB: [nd, [tab...]]. STENCIL: [[radius...], cval,
 * [weights...], [keep...], copy body, library, symbol, arg] (library "" without a user
 * kernel). Decoders read into a layer whose grid is set; 0 with
 * r->err set on failure (the caller frees the layer). */
void gs__slab_encode_body(gs_mp_writer_t *w, const gs_layer_t *l);
int gs__slab_decode_body(gs_mp_reader_t *r, gs_layer_t *l);
void gs__stencil_encode_body(gs_mp_writer_t *w, const gs_layer_t *l);
int gs__stencil_decode_body(gs_mp_reader_t *r, gs_layer_t *l);

/* ---- USER layers (layer_map.c) ---- */

void gs__user_free(gs_layer_t *l);
int gs__user_check(const gs_layer_t *l, const char **why_p);
int gs__user_ninputs(const gs_layer_t *l, uint64_t block);
gs_status_t gs__user_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                 const gs_chunk_ref_t *inputs, double *out, gs_kuser_t *k);
/* Wire body after the grid: [[ioff...], [ibox...], library, symbol, arg] (CPU kernels without
 * flags or fusion), [..., cuda source] (CUDA kernels without), or, with flags or fusion,
 * [..., arg, cuda source ("" for CPU kernels), flags, fuse] (layer_map_fuse.c), or, with any
 * dtype other than float64, [..., flags, fuse, [out_dtype, in_dtype_0, in_dtype_1]]. */
void gs__user_encode_body(gs_mp_writer_t *w, const gs_layer_t *l);
int gs__user_decode_body(gs_mp_reader_t *r, gs_layer_t *l);
/* 1 when the kernel's output or an input is not float64. */
int gs__user_typed(const gs_layer_t *l);
/* Bytes of chunk ref @a r (nbytes, else len doubles); whether it has data and holds exactly
 * @a n elements of @a dtype (float64: len == n, and nbytes when set; others: nbytes). */
uint64_t gs__user_ref_nbytes(const gs_chunk_ref_t *r);
int gs__user_ref_fits(const gs_chunk_ref_t *r, int64_t n, int32_t dtype);
/* The kernel fields of block @a block (everything but in[k].data and out.data). */
void gs__user_fill(const gs_layer_t *l, uint64_t block, gs_kuser_t *k);

/* ---- fused USER layers (layer_map_fuse.c) ----
 * An elementwise user kernel fused with its producers and consumers: a USER layer whose
 * u.ub.fuse holds, per user input k, pre[k] (a FUSED STORE layer over the USER layer's grid,
 * out_dtype the kernel's in_dtype[k], computing input k of every block; NULL: input k is a
 * task input chunk as in a plain USER layer) and post (a FUSED STORE or REDUCE layer over the same grid, NULL: the
 * kernel's output is the task's) whose source usrc is the kernel's output block (block b of
 * the grid for task b, never a task input). Task b's inputs, in order: for each k, pre[k]'s
 * inputs of block b (gs__fused_resolve order) or the one chunk; then post's inputs of block b
 * without the usrc slot. The layers are owned. */
typedef struct gs__ufuse {
    gs_layer_t *pre[GS_KERNEL_MAX_USER_IN];
    gs_layer_t *post;
    int32_t usrc;
} gs__ufuse_t;

void gs__ufuse_free(gs__ufuse_t *f);
/* Structural check of a fused USER layer (l->u.ub.fuse set); 1 valid, else 0 with *why_p. */
int gs__ufuse_check(const gs_layer_t *l, const char **why_p);
/* Task inputs of block @a block (in range), -1 when the block cannot be resolved. */
int gs__ufuse_ninputs(const gs_layer_t *l, uint64_t block);
/* Output bytes of block @a block: post's, else the block's elements of the kernel's out_dtype. */
uint64_t gs__ufuse_out_nbytes(const gs_layer_t *l, uint64_t block);
/* The MAPFUSED kernel of block @a block (graph/kernel.h gs_kmapfused_t; temporaries NULL).
 * GS_ERR_INVALID_PARAM naming the fault for inputs of the wrong number or size or a post
 * that does not read its own block of the kernel's output. */
gs_status_t gs__ufuse_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                                  const gs_chunk_ref_t *inputs, double *out, gs_kmapfused_t *k);
/* Wire: fuse := [[pre_k...] (one bin per user input: an encoded FUSED layer, empty = none),
 * post (bin, empty = none), usrc]. */
void gs__ufuse_encode(gs_mp_writer_t *w, const gs_layer_t *l);
int gs__ufuse_decode(gs_mp_reader_t *r, gs_layer_t *l);

#endif
