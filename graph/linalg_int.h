/* Internal definitions of dense linear algebra on chunked arrays: matmul, TSQR QR/SVD.
 *
 *   linalg.c        the public constructors (gs_array_matmul & co.), node rebuilds for pushdown;
 *   layer_linalg.c  the LINALG layer: an explicit per-block table of GEMM / QR / SVD / COPY /
 *                   SUM operations on views of input chunks; checks, instantiation, wire body;
 *   lower_linalg.c  lowering of MATMUL and FACTOR nodes to LINALG layers.
 * Not installed. */
#ifndef GS_GRAPH_LINALG_INT_H
#define GS_GRAPH_LINALG_INT_H

#include "graph/graph_internal.h"
#include "proto/mp.h"

/* Operations of one LINALG block. GEMM, QR, SVD, GRAM, APPLY and GSTEP are the kernels of
 * graph/kernel.h (gs_klinalg_t; alpha is the step of a GSTEP and 1/0 for a GRAM with/without a
 * state); COPY extracts op(view) (m x n) into a dense chunk (gs_kcopy_t); SUM adds its
 * inputs (each m * n doubles) elementwise (gs_kcombine_t SUM). Values are wire format. */
typedef enum gs__laop {
    GS__LA_GEMM = 0,
    GS__LA_QR = 1,
    GS__LA_SVD = 2,
    GS__LA_COPY = 3,
    GS__LA_SUM = 4,
    GS__LA_GRAM = 5,    /* GS_LA_GRAM: views = the pieces, then the state when alpha is 1 */
    GS__LA_APPLY = 6,   /* GS_LA_APPLY: views = the pieces, the alternative pieces when alpha
                         * is 1, then the state */
    GS__LA_GSTEP = 7,   /* GS_LA_GSTEP: views = G (n x n, ld n), then the state when alpha > 1 */
    GS__LA_OP_COUNT
} gs__laop_t;

/* Most inputs one LINALG block reads (a GEMM of GS_KERNEL_MAX_TERMS products of distinct
 * chunks, or a SUM of GS_KERNEL_MAX_COMBINE partials). */
#define GS__LA_MAX_INPUTS GS_KERNEL_MAX_COMBINE

/* A matrix view inside input `slot` of a block: element (r, c) at off + r * ld + c. */
typedef struct gs__laview {
    int32_t slot;
    int32_t trans;      /* GEMM operands and COPY: use the transpose */
    int64_t off, rows, cols, ld;
} gs__laview_t;

/* One block: its op, output shape parameters and its slices of the layer's input-length and view
 * tables. GEMM: views a0, b0, a1, b1, ... (nview = 2 * nterms); QR/SVD: the stacked pieces;
 * COPY: one view; SUM: none. Output length: gs__la_out_len(). */
typedef struct gs__lablk {
    int32_t op;
    int32_t nin;
    int32_t nview;
    int64_t m, n;
    double alpha;
    uint64_t in_first;
    uint64_t view_first;
} gs__lablk_t;

/* Doubles block @a b writes (-1 for a bad op). */
int64_t gs__la_out_len(const gs__lablk_t *b);

/* Free what a LINALG layer owns besides its grid. */
void gs__la_free(gs_layer_t *l);
/* Structural check (grid already checked): table sizes and order, per-block shapes, views
 * inside their inputs. 1 when valid, else 0 with *why_p set. */
int gs__la_check(const gs_layer_t *l, const char **why_p);
/* Set l->u.la.op_all from the block table (after building or decoding it). */
void gs__la_settle(gs_layer_t *l);
/* "linalg-gemm", ... ("linalg" for a layer of mixed ops). Static. */
const char *gs__la_name(const gs_layer_t *l);
/* Inputs of block @a block (in range), and their expected lengths (owned by the layer). */
int gs__la_ninputs(const gs_layer_t *l, uint64_t block);
const int64_t *gs__la_in_lens(const gs_layer_t *l, uint64_t block);
uint64_t gs__la_out_nbytes(const gs_layer_t *l, uint64_t block);
/* Rough element-operation count of block @a block (in range; INT64_MAX on overflow): flops of
 * a GEMM, m n^2 for a factorisation, the elements touched otherwise. For fuzz budgets. */
int64_t gs__la_block_work(const gs_layer_t *l, uint64_t block);
/* Kernel for block @a block (in range): checks the inputs' number and lengths
 * (GS_ERR_INVALID_PARAM). */
gs_status_t gs__la_instantiate(const gs_layer_t *l, uint64_t block, int ninputs,
                               const gs_chunk_ref_t *inputs, double *out, gs_ktask_t *t);
/* Wire body after the grid: [block...], block := [op, m, n, alpha, [in_len...], [view...]],
 * view := [slot, trans, off, rows, cols, ld]. The decoder reads into a layer whose grid is set
 * and checked; 0 on failure with r->err set (the caller frees the layer). */
void gs__la_encode_body(gs_mp_writer_t *w, const gs_layer_t *l);
int gs__la_decode_body(gs_mp_reader_t *r, gs_layer_t *l);

/* ---- nodes (linalg.c) ---- */

/* Parts of a factorisation node (u.fac.part). */
enum { GS__FAC_Q = 0, GS__FAC_R = 1, GS__FAC_U = 0, GS__FAC_S = 1, GS__FAC_VT = 2 };

/* Grid of part @a part of the factorisation @a op (GS_LA_QR / GS_LA_SVD) of the tall-and-skinny
 * @a x (M x N, one column chunk): Q/U like x; R and Vt N x N, S (N), one chunk each. *g is
 * overwritten (bounds allocated); GS_ERR_NO_MEMORY. */
gs_status_t gs__factor_grid(const struct gs_array *x, int32_t op, int part, gs_grid_t *g);

/* Whether the TSQR of grid @a g (M x N, M >= N >= 1, one column chunk) can be planned:
 * GS_ERR_INVALID_PARAM when its row chunks are too small to group (lower_linalg.c). */
gs_status_t gs__tsqr_check(const gs_grid_t *g);

/* The same MATMUL or FACTOR node as @a n over new inputs @a a (and @a b) with the same grids
 * (slice pushdown). New reference in *out_p. */
gs_status_t gs__linalg_rebuild(const struct gs_array *n, struct gs_array *a, struct gs_array *b,
                               struct gs_array **out_p);

#endif
