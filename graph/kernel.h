/**
 * Kernel specifications: what one chunk task asks a backend to compute.
 *
 * This header is plain C and compiles as C and C++ (nvcc), so the CUDA backend includes it.
 * All coordinates are element indices; data is row-major (C order), float64 unless a dtype
 * field says otherwise (the pointers stay `double *` for the float64 kernels; a non-float64
 * buffer holds elements of its dtype at that address).
 *
 * Dtypes (gs_dtype_t, 0 = float64 everywhere a field is zeroed). Every instruction has a
 * compute dtype `dtype`: the dtype of the value(s) it pops and, for LEAF/CONST, the dtype it
 * pushes. Its result has the same dtype, except comparisons, LAND/LOR/LXOR (and their IMM
 * forms), ISNAN/ISINF/ISFINITE and LNOT, which give bool. GS_OP_CAST converts the top from
 * `dtype` to dtype `arg` (NumPy astype: float -> int truncates toward zero, NaN/inf and out of
 * range give the wrapped value of the C conversion through int64; anything -> bool is != 0).
 * GS_OP_WHERE (arity 3) pops b (the top), a, then c, and pushes a where c is nonzero, else b:
 * c is bool, a and b of `dtype`; a program with WHERE is always a typed program.
 * Arithmetic follows NumPy: floating dtypes compute in double and round each result to their
 * precision (float16: the double result rounded once to binary16); integer dtypes wrap
 * (two's complement) to their width; integer DIV is not emitted (true division is float);
 * integer FLOORDIV/MOD by zero give 0 as NumPy does. A CHUNK leaf's `dtype` is the element
 * type of its data; random and index leaves are float64, except the
 * float32 and integer random leaves (below). GS_TERM_STORE writes the result in
 * `out_dtype`, which is the result dtype of the last instruction. REDUCE takes float64 values
 * (the lowering casts) into float64 records, except the integer records below; COMBINE with
 * `finalize` writes `out_dtype` values.
 *
 * Integer records (exact integer reductions, as NumPy's): a REDUCE whose `out_dtype` is
 * GS_DTYPE_INT64 takes int64 values (its last instruction gives int64) into records that hold
 * int64 bit patterns in their 8 bytes; only SUM, PROD, MIN and MAX have them
 * (gs_redop_int_records()). SUM and PROD wrap modulo 2^64 (two's complement, computed in
 * unsigned arithmetic), so every merge order gives the same bits; the empty records are
 * SUM [0], PROD [1], MIN [INT64_MAX], MAX [INT64_MIN]. A COMBINE with `rec_dtype`
 * GS_DTYPE_INT64 merges such records the same way and its finalize converts the int64 to
 * `out_dtype` (NumPy astype). The lowering uses them for int32, int64 and uint8 inputs; bool
 * inputs keep float64 records (exact below 2^53 elements, and the float64 kernels run them).
 *
 * A FUSED kernel computes, for every position p of a task-local output region of shape
 * `shape[0..ndim)`, the value of a small postfix program whose leaves read elements from
 * inputs at strided positions, then either stores the values densely (GS_TERM_STORE) or
 * reduces them into partial records (GS_TERM_REDUCE).
 *
 * Leaf addressing. For leaf k and output position p (0 <= p[j] < shape[j]):
 *     off_k(p) = base + sum_j p[j] * stride[j]         (int64; strides may be negative or 0)
 *   - GS_LEAF_CHUNK:   value = data[off_k(p)]     (data is a dense input chunk; the lowering
 *                      guarantees 0 <= off_k(p) < data_len for every p)
 *   - GS_LEAF_NORMAL:  value = gs_random_normal(seed, off_k(p), p0 = mean, p1 = std)
 *   - GS_LEAF_UNIFORM: value = gs_random_uniform(seed, off_k(p), p0 = low, p1 = high)
 *     (off_k(p) is the global row-major element index inside the random array; see
 *      docs/random.md for the exact definition both backends reproduce)
 *   - GS_LEAF_INDEX:   value = (double)off_k(p)   (iota; used for arange-like arrays)
 *   - GS_LEAF_NORMAL_V2: value = gs_random_normal_v2(seed, off_k(p), p0 = mean, p1 = std)
 *     (version 2 of the normal definition, docs/random.md; the value of index i depends on
 *      the block of pair i >> 1 only, so a region may compute both elements of a pair at once)
 *   - GS_LEAF_NORMAL_V3: value = gs_random_normal_v3(seed, off_k(p), p0 = mean, p1 = std)
 *     (version 3: index i takes half (i >> 1) & 1 of pair ((i >> 2) << 1) | (i & 1), so
 *      elements i and i + 2 of a group of four share a block; reads with stride 1 or 2 may
 *      compute both at once)
 *   - GS_LEAF_UNIFORM_F32, GS_LEAF_NORMAL_F32: value = gs_random_uniform_f32 / _normal_f32(seed,
 *     off_k(p), p0, p1), a float32 value (docs/random.md, "float32 random"); every GS_OP_LEAF
 *     of such a leaf has dtype GS_DTYPE_FLOAT32
 *   - GS_LEAF_NORMAL_F32_V3: value = gs_random_normal_f32_v3(seed, off_k(p), p0, p1), a float32
 *     value (docs/random.md, "float32 version 3": elements 4k and 4k + 2 share a Box-Muller pair,
 *     as do 4k + 1 and 4k + 3); every GS_OP_LEAF of such a leaf has dtype GS_DTYPE_FLOAT32
 *   - GS_LEAF_NORMAL_F32_V4: value = gs_random_normal_f32_v4(seed, off_k(p), p0, p1), a float32
 *     value (docs/random.md, "float32 version 4": elements 8g + p + 2m, m = 0..3, are the four
 *     normals of one block); every GS_OP_LEAF of such a leaf has dtype GS_DTYPE_FLOAT32
 *   - GS_LEAF_INTEGERS: value = gs_random_integers(seed, off_k(p), low, high), an int64 value;
 *     p0 and p1 hold the int64 bit patterns of low and high (low <= high), and every GS_OP_LEAF
 *     of the leaf has dtype GS_DTYPE_INT64
 *     (the leaf's own `dtype` field stays float64 for all random and index leaves)
 *
 * Program. `prog[0..nprog)` is evaluated in postfix order on a value stack; the program leaves
 * exactly one value. GS_OP_LEAF pushes leaf `arg`; GS_OP_CONST pushes `imm`; unary ops replace
 * the top; binary ops pop b (top) then a and push a OP b; *_IMM ops replace the top x with
 * x OP imm, and *_RIMM ops with imm OP x. Comparisons yield 1.0 or 0.0 (NaN compares false,
 * except NE). Opcodes from GS_OP_SIN on (GS_OP_EXTENDED) are defined once, for every backend,
 * in chunkops/elemwise.h (NumPy semantics: mod and floor_divide as np.mod / np.floor_divide,
 * logical ops and isnan & co. yield 1.0 or 0.0). Max stack depth is GS_KERNEL_MAX_STACK (the lowering checks it).
 *
 * Reduction (GS_TERM_REDUCE). `red_axis` = -1 reduces the whole region to one record;
 * otherwise it reduces along that axis only and the output has one record per position of the
 * remaining axes (row-major over `shape` with `shape[red_axis]` treated as 1). Each record has
 * gs_redop_width(redop) doubles:
 *     SUM: [sum]   MIN, MAX: [v] (NaN propagates; an empty region gives +inf / -inf)
 *     MEAN: [sum, count]   VAR (also STD): [count, mean, m2] (Chan et al. merging)
 *     ARGMIN, ARGMAX: [v, index] where index is the flat index of the winning element:
 *       red_axis = -1: index = idx_base + sum_j p[j] * idx_stride[j] (global flat index);
 *       red_axis = a:  index = idx_base + p[a] (global position along axis a).
 *       Ties keep the smallest index; NaN wins (first NaN), as NumPy does.
 */
#ifndef GS_GRAPH_KERNEL_H
#define GS_GRAPH_KERNEL_H

#include <gsched/array.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GS_KERNEL_MAX_LEAVES 8
#define GS_KERNEL_MAX_PROG 48
#define GS_KERNEL_MAX_STACK 8
#define GS_KERNEL_MAX_RECORD 3

typedef enum gs_leaf_kind {
    GS_LEAF_CHUNK = 0,
    GS_LEAF_NORMAL = 1,
    GS_LEAF_UNIFORM = 2,
    GS_LEAF_INDEX = 3,
    GS_LEAF_NORMAL_V2 = 4,          /* random.h version 2 (pairs of elements share a block) */
    GS_LEAF_UNIFORM_F32 = 5,        /* random.h float32 version 1 (typed programs only) */
    GS_LEAF_NORMAL_F32 = 6,         /* random.h float32 version 1 (typed programs only) */
    GS_LEAF_INTEGERS = 7,           /* random.h gs_random_integers (typed programs only) */
    GS_LEAF_NORMAL_V3 = 8,          /* random.h version 3 (pairs at distance 2 share a block) */
    GS_LEAF_NORMAL_F32_V3 = 9,      /* random.h float32 version 3 (typed programs only) */
    GS_LEAF_NORMAL_F32_V4 = 10,     /* random.h float32 version 4 (typed programs only) */
    GS_LEAF_KIND_COUNT
} gs_leaf_kind_t;

/** Nonzero iff @a kind is a leaf kind this build defines (the values below GS_LEAF_KIND_COUNT
 *  are not all defined: a spec or layer with another kind is rejected). */
static inline int gs_leaf_kind_valid(int32_t kind)
{
    switch (kind) {
    case GS_LEAF_CHUNK: case GS_LEAF_NORMAL: case GS_LEAF_UNIFORM: case GS_LEAF_INDEX:
    case GS_LEAF_NORMAL_V2: case GS_LEAF_UNIFORM_F32: case GS_LEAF_NORMAL_F32:
    case GS_LEAF_INTEGERS: case GS_LEAF_NORMAL_V3:
    case GS_LEAF_NORMAL_F32_V3: case GS_LEAF_NORMAL_F32_V4:
        return 1;
    default:
        return 0;
    }
}

/* Opcodes of the fused program. Values are part of the wire format: append only. */
#define GS_OPCODE_MAP(X)                                       \
    X(GS_OP_LEAF, 0, "leaf", 0)                                \
    X(GS_OP_CONST, 1, "const", 0)                              \
    X(GS_OP_NEG, 2, "neg", 1)                                  \
    X(GS_OP_ABS, 3, "abs", 1)                                  \
    X(GS_OP_EXP, 4, "exp", 1)                                  \
    X(GS_OP_LOG, 5, "log", 1)                                  \
    X(GS_OP_SQRT, 6, "sqrt", 1)                                \
    X(GS_OP_ADD, 7, "add", 2)                                  \
    X(GS_OP_SUB, 8, "sub", 2)                                  \
    X(GS_OP_MUL, 9, "mul", 2)                                  \
    X(GS_OP_DIV, 10, "div", 2)                                 \
    X(GS_OP_POW, 11, "pow", 2)                                 \
    X(GS_OP_LT, 12, "lt", 2)                                   \
    X(GS_OP_LE, 13, "le", 2)                                   \
    X(GS_OP_GT, 14, "gt", 2)                                   \
    X(GS_OP_GE, 15, "ge", 2)                                   \
    X(GS_OP_EQ, 16, "eq", 2)                                   \
    X(GS_OP_NE, 17, "ne", 2)                                   \
    X(GS_OP_MIN, 18, "minimum", 2)                             \
    X(GS_OP_MAX, 19, "maximum", 2)                             \
    X(GS_OP_ADD_IMM, 20, "add_imm", 1)                         \
    X(GS_OP_SUB_IMM, 21, "sub_imm", 1)                         \
    X(GS_OP_MUL_IMM, 22, "mul_imm", 1)                         \
    X(GS_OP_DIV_IMM, 23, "div_imm", 1)                         \
    X(GS_OP_POW_IMM, 24, "pow_imm", 1)                         \
    X(GS_OP_RSUB_IMM, 25, "rsub_imm", 1)                       \
    X(GS_OP_RDIV_IMM, 26, "rdiv_imm", 1)                       \
    X(GS_OP_RPOW_IMM, 27, "rpow_imm", 1)                       \
    X(GS_OP_LT_IMM, 28, "lt_imm", 1)                           \
    X(GS_OP_LE_IMM, 29, "le_imm", 1)                           \
    X(GS_OP_GT_IMM, 30, "gt_imm", 1)                           \
    X(GS_OP_GE_IMM, 31, "ge_imm", 1)                           \
    X(GS_OP_EQ_IMM, 32, "eq_imm", 1)                           \
    X(GS_OP_NE_IMM, 33, "ne_imm", 1)                           \
    X(GS_OP_MIN_IMM, 34, "minimum_imm", 1)                     \
    X(GS_OP_MAX_IMM, 35, "maximum_imm", 1)                     \
    X(GS_OP_SIN, 36, "sin", 1)                                 \
    X(GS_OP_COS, 37, "cos", 1)                                 \
    X(GS_OP_TAN, 38, "tan", 1)                                 \
    X(GS_OP_ARCSIN, 39, "arcsin", 1)                           \
    X(GS_OP_ARCCOS, 40, "arccos", 1)                           \
    X(GS_OP_ARCTAN, 41, "arctan", 1)                           \
    X(GS_OP_SINH, 42, "sinh", 1)                               \
    X(GS_OP_COSH, 43, "cosh", 1)                               \
    X(GS_OP_TANH, 44, "tanh", 1)                               \
    X(GS_OP_EXP2, 45, "exp2", 1)                               \
    X(GS_OP_LOG2, 46, "log2", 1)                               \
    X(GS_OP_LOG10, 47, "log10", 1)                             \
    X(GS_OP_LOG1P, 48, "log1p", 1)                             \
    X(GS_OP_EXPM1, 49, "expm1", 1)                             \
    X(GS_OP_FLOOR, 50, "floor", 1)                             \
    X(GS_OP_CEIL, 51, "ceil", 1)                               \
    X(GS_OP_RINT, 52, "rint", 1)                               \
    X(GS_OP_TRUNC, 53, "trunc", 1)                             \
    X(GS_OP_SIGN, 54, "sign", 1)                               \
    X(GS_OP_SQUARE, 55, "square", 1)                           \
    X(GS_OP_RECIP, 56, "reciprocal", 1)                        \
    X(GS_OP_ISNAN, 57, "isnan", 1)                             \
    X(GS_OP_ISINF, 58, "isinf", 1)                             \
    X(GS_OP_ISFINITE, 59, "isfinite", 1)                       \
    X(GS_OP_LNOT, 60, "logical_not", 1)                        \
    X(GS_OP_MOD, 61, "mod", 2)                                 \
    X(GS_OP_FLOORDIV, 62, "floor_divide", 2)                   \
    X(GS_OP_LAND, 63, "logical_and", 2)                        \
    X(GS_OP_LOR, 64, "logical_or", 2)                          \
    X(GS_OP_LXOR, 65, "logical_xor", 2)                        \
    X(GS_OP_MOD_IMM, 66, "mod_imm", 1)                         \
    X(GS_OP_RMOD_IMM, 67, "rmod_imm", 1)                       \
    X(GS_OP_FLOORDIV_IMM, 68, "floor_divide_imm", 1)           \
    X(GS_OP_RFLOORDIV_IMM, 69, "rfloor_divide_imm", 1)         \
    X(GS_OP_LAND_IMM, 70, "logical_and_imm", 1)                \
    X(GS_OP_LOR_IMM, 71, "logical_or_imm", 1)                  \
    X(GS_OP_LXOR_IMM, 72, "logical_xor_imm", 1)                \
    X(GS_OP_CAST, 73, "cast", 1)                               \
    X(GS_OP_WHERE, 74, "where", 3)

typedef enum gs_opcode {
#define GS__OPC_ENUM(name, val, str, arity) name = (val),
    GS_OPCODE_MAP(GS__OPC_ENUM)
#undef GS__OPC_ENUM
    GS_OP_COUNT
} gs_opcode_t;

/* First of the opcodes defined in chunkops/elemwise.h; binary ones are
 * GS_OP_MOD..GS_OP_LXOR. */
#define GS_OP_EXTENDED GS_OP_SIN

typedef enum gs_terminal {
    GS_TERM_STORE = 0,
    GS_TERM_REDUCE = 1
} gs_terminal_t;

/** Whether @a op may have integer records (graph/kernel.h "Integer records"): SUM, PROD, MIN,
 *  MAX. */
static inline int gs_redop_int_records(int32_t op)
{
    return op == GS_RED_SUM || op == GS_RED_PROD || op == GS_RED_MIN || op == GS_RED_MAX;
}

/** Doubles per partial record of @a op: 1 (sum/min/max/prod), 2 (mean, argmin/argmax), 3 (var/std). */
static inline int gs_redop_width(gs_redop_t op)
{
    switch (op) {
    case GS_RED_SUM: case GS_RED_MIN: case GS_RED_MAX: case GS_RED_PROD: return 1;
    case GS_RED_MEAN: case GS_RED_ARGMIN: case GS_RED_ARGMAX: return 2;
    case GS_RED_VAR: case GS_RED_STD: return 3;
    default: return 0;
    }
}

typedef struct gs_kleaf {
    int32_t kind;                   /* gs_leaf_kind_t */
    int64_t base;
    int64_t stride[GS_MAX_NDIM];
    const double *data;             /* GS_LEAF_CHUNK: backend memory (host for cpu, device for cuda) */
    int64_t data_len;               /* GS_LEAF_CHUNK: elements in data */
    uint64_t seed;                  /* random leaves */
    double p0, p1;                  /* mean/std or low/high */
    int32_t dtype;                  /* gs_dtype_t of data (GS_LEAF_CHUNK) */
} gs_kleaf_t;

typedef struct gs_kinstr {
    int32_t op;                     /* gs_opcode_t */
    int32_t arg;                    /* leaf index for GS_OP_LEAF */
    double imm;                     /* GS_OP_CONST and *_IMM ops */
    int32_t dtype;                  /* gs_dtype_t the instruction computes in (see above) */
} gs_kinstr_t;

typedef struct gs_kfused {
    int32_t ndim;                   /* 0..GS_MAX_NDIM; ndim 0 is one element */
    int64_t shape[GS_MAX_NDIM];     /* task-local output region */
    int32_t nleaves;
    gs_kleaf_t leaves[GS_KERNEL_MAX_LEAVES];
    int32_t nprog;
    gs_kinstr_t prog[GS_KERNEL_MAX_PROG];
    int32_t terminal;               /* gs_terminal_t */
    int32_t redop;                  /* gs_redop_t, GS_TERM_REDUCE only */
    int32_t red_axis;               /* -1 = all axes */
    int64_t idx_base;               /* ARGMIN/ARGMAX index mapping (see above) */
    int64_t idx_stride[GS_MAX_NDIM];
    double *out;                    /* backend memory: prod(shape) doubles (STORE) or
                                       nrecords * width doubles (REDUCE) */
    int32_t out_dtype;              /* GS_TERM_STORE: gs_dtype_t of out; GS_TERM_REDUCE: of
                                       the records (FLOAT64, or INT64: integer records) */
} gs_kfused_t;

/**
 * COMBINE: merge `ninputs` arrays of partial records elementwise into `out`.
 * Each input and the output hold `nrec` records of gs_redop_width(redop) doubles. With
 * `finalize` set, `out` instead receives `nrec` plain doubles: sum, min, max, mean = sum/count,
 * var = m2/(count-ddof), std = sqrt(var), argmin/argmax = index. var/std with count <= ddof
 * give NaN (NumPy warns and returns NaN); mean of count 0 gives NaN. With `rec_dtype`
 * GS_DTYPE_INT64 the records are integer records (see above; SUM, PROD, MIN, MAX only).
 */
#define GS_KERNEL_MAX_COMBINE 64
typedef struct gs_kcombine {
    int32_t redop;
    int32_t finalize;
    double ddof;
    int64_t nrec;
    int32_t ninputs;                /* 1..GS_KERNEL_MAX_COMBINE */
    const double *inputs[GS_KERNEL_MAX_COMBINE];
    double *out;
    int32_t out_dtype;              /* finalize: gs_dtype_t of out (records: rec_dtype) */
    int32_t rec_dtype;              /* records: GS_DTYPE_FLOAT64 (0) or GS_DTYPE_INT64 */
} gs_kcombine_t;

/**
 * COPY: assemble a dense output block of shape `shape` from rectangular pieces of input chunks
 * (rechunk, concatenate, stack). Piece i copies the sub-box [dst_start, dst_start + size) of the
 * output from positions src_base + sum_j q[j] * src_stride[j] of input src (q local to the box).
 */
#define GS_KERNEL_MAX_PIECES 64
typedef struct gs_kpiece {
    const double *src;
    int64_t src_len;
    int64_t src_base;
    int64_t src_stride[GS_MAX_NDIM];
    int64_t dst_start[GS_MAX_NDIM];
    int64_t size[GS_MAX_NDIM];
} gs_kpiece_t;

typedef struct gs_kcopy {
    int32_t ndim;
    int64_t shape[GS_MAX_NDIM];
    int32_t npieces;
    gs_kpiece_t pieces[GS_KERNEL_MAX_PIECES];
    double *out;
    int32_t elem_size;              /* bytes per element: 1, 2, 4 or 8 (0 means 8: float64);
                                       src_len and offsets count elements */
} gs_kcopy_t;

/**
 * LINALG: dense linear algebra on matrix *views* of input chunks (row-major float64).
 *
 * A view names a rows x cols matrix inside an input chunk: element (r, c) is
 * data[off + r * ld + c], with ld >= cols (ld may exceed cols: the view is a column range of a
 * wider packed chunk). With `trans` set, a GEMM operand is the transpose of the view.
 * The kernel reads only views; every view must lie inside its chunk (0 <= off, and
 * off + (rows - 1) * ld + cols <= len when rows, cols > 0); gs_klinalg_validate() checks it.
 *
 *   GS_LA_GEMM: out (m x n, dense, ld n) = alpha * sum_t op(a[t]) @ op(b[t]),  t < nterms,
 *               op(x) = x or x^T; op(a[t]) is m x k_t and op(b[t]) is k_t x n.
 *               nterms 0 gives zeros.
 *   GS_LA_QR:   the input is the vertical stack of a[0..nterms) (each with n columns, m rows
 *               in total, m >= n >= 1). Reduced QR, with R's diagonal made >= 0:
 *               out = [Q (m x n, ld n) | R (n x n, ld n, zeros below the diagonal)].
 *   GS_LA_SVD:  the input is the vertical stack as for QR (m >= n >= 1). Thin SVD:
 *               out = [U (m x n, ld n) | S (n, descending) | Vt (n x n, ld n)].
 *
 * Gram-based SVD (the tall-and-skinny SVD of graph/lower_linalg.c; docs/ARCHITECTURE.md). A *state*
 * is a vector of GS_LA_STATE_LEN(n) doubles: a header of GS_LA_STATE_HDR doubles (indices
 * GS_LA_H_*), then T (n x n), S (n), Vt (n x n) and Racc (n x n), row-major, at the
 * GS_LA_STATE_* offsets. A state view is b[0] with 1 row of GS_LA_STATE_LEN(n) columns; "no
 * state" is b[0] with 0 rows.
 *   GS_LA_GRAM:  out (n x n) = sum_t a[t]^T a[t] (a[t]: rows_t x n, m = sum of rows_t, nterms
 *                0 gives zeros); with a state in b[0] whose GS_LA_H_SKIP is 1, zeros without
 *                reading a[] (a pass the state says is not needed).
 *   GS_LA_APPLY: out (m x n) = the stack X of a[] times the state's T, as its GS_LA_H_APPLY
 *                says: GS_LA_APPLY_COPY X, GS_LA_APPLY_TRSM X T^-1 (T upper triangular,
 *                solved, never inverted), GS_LA_APPLY_GEMM X T, GS_LA_APPLY_NONE: nothing
 *                (out is left unwritten: a pass the state says no task reads). b[0] is the
 *                state (required); b[1..nterms] may hold an alternative stack (piece t as tall
 *                as a[t]; alpha = 1 says it is there, else alpha = 0), which X is instead of
 *                a[] when the state's GS_LA_H_SRC is 1 (the last pass of the fast path reads
 *                the input itself).
 *   GS_LA_GSTEP: one step of the factorisation from the Gram matrix G (n x n) of the rows of
 *                the current pass, the sum of a[0 .. nterms) (1 to GS_KERNEL_MAX_TERMS dense
 *                partial sums, added in order), and the previous state b[0] (none for step 1);
 *                m = the rows of the whole matrix, alpha = the step (1, 2 or 3);
 *                out = the new state. Step 1 decides the path from the eigenvalues of G:
 *                condition kappa <= GS_LA_GRAM_KAPPA_FAST gives the one-pass SVD (S, Vt from
 *                the eigen-decomposition, T = V S^-1; passes 1 and 2 apply NONE and their
 *                Grams SKIP, pass 3 applies T to the input, GS_LA_H_SRC 1); else shifted
 *                CholeskyQR3 (Fukaya et al. 2020):
 *                T = R_k = chol(G [+ shift I at step 1]), Racc = R_k Racc, and step 3 takes
 *                the SVD of Racc = U_r S V^T and T = R_3^-1 U_r. GS_ERR_NUMERIC when a Cholesky
 *                factorisation or the SVD fails (NaN/Inf in the input) or when G_3 is further
 *                than GS_LA_GRAM_DEV_MAX from I (numerically rank-deficient input).
 * Output lengths: gs_klinalg_out_len(). All backends write every element of out (except an
 * APPLY told NONE).
 */
#define GS_KERNEL_MAX_TERMS 32

typedef enum gs_laop {
    GS_LA_GEMM = 0,
    GS_LA_QR = 1,
    GS_LA_SVD = 2,
    GS_LA_GRAM = 3,
    GS_LA_APPLY = 4,
    GS_LA_GSTEP = 5,
    GS_LA_OP_COUNT
} gs_laop_t;

/* The state of the Gram-based SVD (GS_LA_GSTEP): header words, then T | S | Vt | Racc. */
enum {
    GS_LA_H_FAST = 0,       /* 1: the one-pass path (step 1 found kappa small), else 0 */
    GS_LA_H_APPLY = 1,      /* GS_LA_APPLY_* for the next APPLY pass */
    GS_LA_H_KAPPA = 2,      /* condition estimate sqrt(lambda_max / lambda_min) (inf: singular) */
    GS_LA_H_SHIFT = 3,      /* shift added to G at step 1 (0 on the fast path) */
    GS_LA_H_STEP = 4,       /* the step that wrote the state */
    GS_LA_H_SKIP = 5,       /* 1: the next Gram pass is not needed (GS_LA_GRAM writes zeros) */
    GS_LA_H_SRC = 6,        /* 1: the next APPLY reads its alternative stack (the input) */
    GS_LA_STATE_HDR = 8
};
enum { GS_LA_APPLY_COPY = 0, GS_LA_APPLY_TRSM = 1, GS_LA_APPLY_GEMM = 2, GS_LA_APPLY_NONE = 3 };
/* Largest condition number that takes the one-pass path: its orthogonality error is about
 * eps kappa^2 (<= 1e-12 here); anything above takes shifted CholeskyQR3. */
#define GS_LA_GRAM_KAPPA_FAST 64.0
/* Largest max |G_3 - I| step 3 accepts (shifted CholeskyQR2 leaves it ~1 / (11 m n) for any
 * input of full numerical rank); above, GS_ERR_NUMERIC: rank-deficient. */
#define GS_LA_GRAM_DEV_MAX 0.1
/* Every GS_ERR_NUMERIC a GSTEP kernel reports for an input the Gram path cannot factor (rank
 * deficiency, a failed Cholesky factorisation) carries this text in its message, on every
 * backend; gs_graph_lower_retry_flags() looks for it to fall back to TSQR. */
#define GS_LA_GRAM_REFUSED "ill-conditioned for the Gram path"

/** The shift of shifted CholeskyQR for an m x n matrix whose squared 2-norm is at most @a norm2
 *  (Fukaya et al. 2020): 11 (m n + n (n + 1)) u norm2, u = 2^-53. */
static inline double gs_la_gram_shift(int64_t m, int64_t n, double norm2)
{
    return 11.0 * ((double)m * (double)n + (double)n * ((double)n + 1.0)) * 0x1.0p-53 * norm2;
}
#define GS_LA_STATE_T(n) ((int64_t)GS_LA_STATE_HDR)
#define GS_LA_STATE_S(n) (GS_LA_STATE_HDR + (int64_t)(n) * (n))
#define GS_LA_STATE_VT(n) (GS_LA_STATE_HDR + (int64_t)(n) * (n) + (n))
#define GS_LA_STATE_RACC(n) (GS_LA_STATE_HDR + 2 * (int64_t)(n) * (n) + (n))
#define GS_LA_STATE_LEN(n) (GS_LA_STATE_HDR + 3 * (int64_t)(n) * (n) + (n))

typedef struct gs_kmat {
    const double *data;             /* backend memory: an input chunk */
    int64_t len;                    /* doubles in data */
    int64_t off;                    /* element (0, 0) of the view */
    int64_t rows, cols;             /* view shape (before trans) */
    int64_t ld;                     /* row stride, >= cols */
    int32_t trans;                  /* GEMM operands only: use the view's transpose */
} gs_kmat_t;

typedef struct gs_klinalg {
    int32_t op;                     /* gs_laop_t */
    int32_t nterms;                 /* GEMM: 0..MAX products; QR/SVD: 1..MAX stacked pieces */
    gs_kmat_t a[GS_KERNEL_MAX_TERMS];
    gs_kmat_t b[GS_KERNEL_MAX_TERMS];   /* GEMM only */
    double alpha;                   /* GEMM only */
    int64_t m, n;                   /* GEMM: output shape; QR/SVD: stacked input shape */
    double *out;                    /* backend memory, gs_klinalg_out_len() doubles */
} gs_klinalg_t;

/** Doubles a LINALG kernel writes: GEMM m*n; QR m*n + n*n; SVD m*n + n + n*n; GRAM n*n;
 *  APPLY m*n; GSTEP GS_LA_STATE_LEN(n); -1 for an unknown op or negative sizes. */
static inline int64_t gs_klinalg_out_len(int32_t op, int64_t m, int64_t n)
{
    if (m < 0 || n < 0) return -1;
    switch (op) {
    case GS_LA_GEMM: return m * n;
    case GS_LA_QR: return m * n + n * n;
    case GS_LA_SVD: return m * n + n + n * n;
    case GS_LA_GRAM: return n * n;
    case GS_LA_APPLY: return m * n;
    case GS_LA_GSTEP: return GS_LA_STATE_LEN(n);
    default: return -1;
    }
}

/**
 * FILE_READ: read region `shape[0..ndim)` of an array stored in a file into `out` (backend
 * memory, prod(shape) elements of fdtype, row-major). Output position p reads the file
 * element with flat index off(p) = base + sum_j p[j] * stride[j] (the file's own element
 * order, C or Fortran already folded into base and stride by the lowering), at byte
 * `offset + off(p) * itemsize`, as an element of the file's element type `fdtype` (gs_dtype_t;
 * no conversion; `swap`: bytes stored big-endian, swapped as they are read; bool bytes are
 * made 0 or 1). `nelems` is the number of elements the file must hold: a shorter file is an
 * error naming it (truncated), never a short or out-of-range read.
 *
 * FILE_WRITE: write `in` (a dense row-major chunk of region `shape`, `nin` elements of
 * fdtype) into the file at the same addressing, little-endian, then write one double, the
 * bytes written, to `out`. FILE_COMMIT: `path` is the final name, `tmp` the temporary file the
 * writes went to; write the `hdr_len` header bytes `hdr` at offset 0, check that the input (a
 * total of bytes written) equals `expect`, make the file `offset + nelems * itemsize` bytes long,
 * fsync it and rename it to `path`; `out` receives the file size.
 */
/* File formats and zarr chunk codecs of FILE tasks. Values are part of the wire format. */
enum { GS_KFILE_RAW = 0, GS_KFILE_ZARR = 1, GS_KFILE_FMT_COUNT };
enum { GS_ZCODEC_NONE = 0, GS_ZCODEC_ZSTD = 1, GS_ZCODEC_BLOSC = 2, GS_ZCODEC_COUNT };

/* Zarr (fmt GS_KFILE_ZARR): `path` is the store's directory; the array (fshape, in chunks of
 * zchunk, each chunk a file named by zarr's chunk key: version 2 "i.j" / "i/j" (zsep), version
 * 3 "c/i/j" / "c.i.j") is read chunk by chunk: output position p reads file coordinate
 * fbase[a] + fstep[a] * p[fperm[a]] (fbase[a] when fperm[a] is -1) on each file axis a; every
 * zarr chunk the region touches is read once, decompressed (zcodec), converted and scattered;
 * a missing chunk file reads as `fill`. WRITE encodes its region, which must be exactly one
 * zarr chunk (edge chunks padded with `fill`), and writes one double, 1, to `out`; COMMIT
 * writes `hdr` as the store's metadata file (.zarray or zarr.json) into the temporary
 * directory `tmp` and renames it to `path`. */
typedef struct gs_kfile {
    const char *path;               /* NUL-terminated; borrowed from the layer */
    const char *tmp;                /* COMMIT: the temporary name (NUL-terminated) */
    int32_t fdtype;                 /* gs_dtype_t of the stored elements */
    int32_t swap;                   /* 1: stored big-endian (on this little-endian host) */
    int64_t offset;                 /* byte offset of file element 0 */
    int64_t nelems;                 /* elements the file holds */
    int32_t ndim;
    int64_t shape[GS_MAX_NDIM];
    int64_t base;
    int64_t stride[GS_MAX_NDIM];
    const double *in;               /* WRITE: the chunk (backend memory); COMMIT: the total */
    int64_t nin;
    const uint8_t *hdr;             /* COMMIT: header bytes (borrowed from the layer) */
    int64_t hdr_len;
    double expect;                  /* COMMIT: bytes the writes must total */
    double *out;                    /* backend memory */
    /* per-axis addressing (every format; zarr reads use it) */
    int32_t fmt;                    /* GS_KFILE_* */
    int32_t forder;                 /* Fortran order (of the file, or of each zarr chunk) */
    int32_t fndim;
    int64_t fshape[GS_MAX_NDIM];
    int64_t fbase[GS_MAX_NDIM];
    int64_t fstep[GS_MAX_NDIM];
    int32_t fperm[GS_MAX_NDIM];
    /* zarr */
    int32_t zver;                   /* 2 or 3 */
    int32_t zcodec;                 /* GS_ZCODEC_* */
    int32_t zlevel;                 /* compression level (writes) */
    char zsep;                      /* chunk key separator: '.' or '/' */
    int64_t zchunk[GS_MAX_NDIM];
    double fill;                    /* floating fdtypes: the value; integers and bool: the
                                     * int64 whose bit pattern this holds */
} gs_kfile_t;

/**
 * STENCIL: a weighted neighbourhood sum over a *padded* block (gs_array_stencil, issue 16).
 * The padded block has shape pshape[j] = shape[j] + 2 radius[j]; its element P[q] comes from
 * the piece whose box [dst_start, dst_start + size) holds q (read at src_base +
 * sum_j (q[j] - dst_start[j]) src_stride[j], as COPY pieces; strides may be negative: a
 * reflected halo), or is `cval` where no piece covers q (pieces are disjoint but need not
 * cover: constant padding). For every output position p (0 <= p < shape):
 *     out[p] = sum_o weights[o] * P[p + o],  o over [0, 2 radius] row-major (weights has
 *              prod(2 radius + 1) entries, summed in that order),
 * except that positions with p[j] < keep_lo[j] or p[j] >= shape[j] - keep_hi[j] on some axis
 * copy the centre value P[p + radius] (boundary "none": no neighbourhood outside the array).
 * `weights` is host memory the backend reads (or copies) before the call returns.
 */
#define GS_KERNEL_MAX_WEIGHTS 343
typedef struct gs_kstencil {
    int32_t ndim;                   /* 1..GS_MAX_NDIM */
    int64_t shape[GS_MAX_NDIM];     /* output block */
    int32_t radius[GS_MAX_NDIM];
    int64_t keep_lo[GS_MAX_NDIM], keep_hi[GS_MAX_NDIM];
    double cval;
    int32_t nweights;               /* prod(2 radius + 1), 1..GS_KERNEL_MAX_WEIGHTS */
    const double *weights;          /* host memory */
    int32_t npieces;
    gs_kpiece_t pieces[GS_KERNEL_MAX_PIECES];
    double *out;                    /* backend memory: prod(shape) doubles */
    /* map_overlap: instead of weights (nweights 0), the user kernel user_symbol of the shared
     * library user_lib (NUL-terminated) is called once with in[0] = the padded block (its
     * global start = start - radius) and out = the output block (global start `start`);
     * user_arg: user_arg_len bytes passed through. NULL user_lib: weights. */
    const char *user_lib, *user_sym;
    const void *user_arg;
    int64_t user_arg_len;
    int64_t start[GS_MAX_NDIM];
    /* map_overlap with a CUDA C++ kernel (gs_kuser_t.cuda_src): its NUL-terminated source,
     * user_sym its name, user_lib NULL. Run by gs_chunkops_run_ktask() on backends with a
     * cuda_user op (the padded block assembled by the backend's STENCIL op with radius 0,
     * then the kernel on it); the others fail it with GS_ERR_UNSUPPORTED. NULL: none. */
    const char *user_cuda_src;
} gs_kstencil_t;

/**
 * USER: a user kernel (gs_array_map_blocks) called once as f(in, nin, &out, arg): in[k] and
 * out are gs_block_t views of backend memory (host for cpu), with their global starts and
 * dtypes (in_len counts elements of in[k].dtype; out holds elements of out.dtype); or,
 * with cuda_src set, a CUDA C++ kernel compiled on the worker (chunkops/cuda/rtc.h).
 */
#define GS_KERNEL_MAX_USER_IN 2
typedef struct gs_kuser {
    const char *lib, *sym;          /* NUL-terminated */
    const void *arg;                /* arg_len bytes, NULL when 0 */
    int64_t arg_len;
    int32_t nin;                    /* 1..GS_KERNEL_MAX_USER_IN */
    gs_block_t in[GS_KERNEL_MAX_USER_IN];
    int64_t in_len[GS_KERNEL_MAX_USER_IN];   /* elements of each input's data */
    gs_block_t out;
    /* A CUDA C++ kernel instead (issue 16, chunkops/cuda/rtc.h): its NUL-terminated source,
     * `sym` its name, `lib` unused (NULL). NULL: the CPU kernel lib/sym. Only backends with a
     * cuda_user op run it; the others fail the task with GS_ERR_UNSUPPORTED. */
    const char *cuda_src;
} gs_kuser_t;

/**
 * MAPFUSED: an elementwise user kernel (GS_KERNEL_ELEMENTWISE) fused with its producers and
 * consumers, one task per output block (graph/layer_map_fuse.c). Run in order on one stream:
 *   1. for each k < user.nin with has_pre[k]: pre[k] (a FUSED STORE kernel of the block's
 *      shape, out_dtype = user.in[k].dtype) into a temporary block, which becomes
 *      user.in[k].data;
 *   2. user (gs_kuser_t; CPU or CUDA as for USER) writing user.out.data: a temporary block
 *      when has_post, else the task's output;
 *   3. with has_post: post (a FUSED STORE or REDUCE kernel writing the task's output) whose
 *      leaves with a bit set in post_user_leaves read the user's output block (dense,
 *      row-major, the block's shape, elements of user.out.dtype) instead of their data
 *      pointer.
 * Instantiation leaves the temporary pointers NULL (pre[k].out, user.in[k].data where
 * has_pre[k], user.out.data and those leaves' data where has_post); the run
 * (chunkops/ktask.c) allocates them from the backend (mem_alloc), fills them in, synchronises
 * the stream and frees them: the calling thread blocks for the whole task.
 */
typedef struct gs_kmapfused {
    int32_t has_pre[GS_KERNEL_MAX_USER_IN];
    gs_kfused_t pre[GS_KERNEL_MAX_USER_IN];
    gs_kuser_t user;
    int32_t has_post;
    uint32_t post_user_leaves;      /* bit q: post leaf q reads the user's output */
    gs_kfused_t post;
} gs_kmapfused_t;

/**
 * SCAN: a cumulative sum or product along one axis of a chunk (gs_array_cumulative; graph/
 * lower_scan.c). `in` is a dense row-major block of shape `shape[0..ndim)` (ndim >= 1) holding
 * `in_len` elements of `in_dtype`; every value is converted to `out_dtype` (NumPy astype) and
 * accumulated in `out_dtype`: floating dtypes round every step to their precision (float16 and
 * float32 as NumPy's float16/float32 loops do), integers wrap, bool adds as logical or and
 * multiplies as logical and. Along `axis`, for every line (a position of the other axes):
 *     GS_KSCAN_SCAN:  out[.., i, ..] = init OP in[.., 0, ..] OP ... OP in[.., i, ..]
 *                     (out has `shape`: the inclusive scan)
 *     GS_KSCAN_TOTAL: out[.., 0, ..] = init OP in[.., 0, ..] OP ... OP in[.., n-1, ..]
 *                     (out has `shape` with shape[axis] = 1: the line's total)
 * accumulated left to right, where `init` is the line's element of `init` (a dense block of
 * `shape` with shape[axis] = 1, `out_dtype`: the running total of the chunks before this one
 * along the axis) or, with `init` NULL, the identity (0, or 1 for a product). NaN propagates.
 */
enum { GS_KSCAN_SCAN = 0, GS_KSCAN_TOTAL = 1, GS_KSCAN_MODE_COUNT };
typedef struct gs_kscan {
    int32_t op;                     /* gs_scan_op_t: GS_SCAN_SUM or GS_SCAN_PROD */
    int32_t mode;                   /* GS_KSCAN_* */
    int32_t ndim;                   /* 1..GS_MAX_NDIM */
    int64_t shape[GS_MAX_NDIM];     /* the input block */
    int32_t axis;                   /* 0..ndim-1 */
    const double *in;               /* backend memory: in_len elements of in_dtype */
    int64_t in_len;
    int32_t in_dtype;
    const double *init;             /* backend memory or NULL: slab elements of out_dtype */
    double *out;                    /* backend memory: gs_kscan_out_len() elements */
    int32_t out_dtype;
} gs_kscan_t;

/** Elements a SCAN kernel writes: prod(shape) (SCAN) or prod(shape) / shape[axis] (TOTAL,
 *  with shape[axis] taken as 1). */
static inline int64_t gs_kscan_out_len(const gs_kscan_t *k)
{
    int64_t n = 1;
    for (int32_t i = 0; i < k->ndim; i++)
        n *= (k->mode == GS_KSCAN_TOTAL && i == k->axis) ? 1 : k->shape[i];
    return n;
}

/** Number of elements of a region (1 for ndim 0). */
static inline int64_t gs_region_size(int32_t ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

#ifdef __cplusplus
}
#endif
#endif
