/**
 * @file gsched/array.h
 * @brief Building lazy, chunked n-dimensional arrays (the expression graph).
 *
 * An array handle (gs_array_h) names a node of an immutable expression DAG: a random generator,
 * host data, an elementwise operation, a slice, a transpose or a reduction. Nothing is computed
 * when a handle is built; gs_client_compute() & co. (gsched/client.h) lower the expression to a
 * task graph and run it on a cluster.
 *
 * Semantics follow NumPy/Dask: elementwise binary operations broadcast; slices take
 * start/stop/step per axis with negative indices and negative steps; reductions run over all
 * axes or one axis, combined in a tree of fan-in `split_every`.
 *
 * Ownership: every function that returns a handle through @a *out_p gives the caller one
 * reference, released with gs_array_release(). Operands are borrowed: the new node keeps its
 * own references, so operands may be released at once. Handles are immutable and may be shared
 * between threads for reading; reference counting is atomic.
 *
 * Errors: GS_ERR_INVALID_PARAM for bad arguments (shapes/chunks that do not fit, step 0, axis
 * out of range, operands that do not broadcast, zero-size min/max/arg reductions), with
 * gs_last_error() naming the problem, and operations a dtype has no loop for (bool - bool)
 * naming the dtypes; GS_ERR_NO_MEMORY. On error *out_p is not written. Arrays are float64
 * unless built with gs_array_astype(), gs_array_full_dtype() & co. or by an operation whose
 * NumPy result dtype differs (comparisons give bool, argmax int64, ...).
 */
#ifndef GSCHED_ARRAY_H
#define GSCHED_ARRAY_H

#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GS_MAX_NDIM 8

typedef struct gs_array *gs_array_h;

/* Element types, NumPy's names. One table: X(enum, value, name, bytes, kind) with kind 'f'
 * (floating), 'i' (signed integer), 'u' (unsigned integer), 'b' (bool). Values are part of the
 * wire format: append only. float16 is a storage type (each result is computed in double
 * and rounded once to binary16). Every array has a dtype (gs_array_dtype()); the rules below
 * are those every operation follows; docs/api.md, "Dtypes", says what runs where. */
#define GS_DTYPE_MAP(X)                          \
    X(GS_DTYPE_FLOAT64, 0, "float64", 8, 'f')    \
    X(GS_DTYPE_FLOAT32, 1, "float32", 4, 'f')    \
    X(GS_DTYPE_FLOAT16, 2, "float16", 2, 'f')    \
    X(GS_DTYPE_INT32, 3, "int32", 4, 'i')        \
    X(GS_DTYPE_INT64, 4, "int64", 8, 'i')        \
    X(GS_DTYPE_UINT8, 5, "uint8", 1, 'u')        \
    X(GS_DTYPE_BOOL, 6, "bool", 1, 'b')

typedef enum gs_dtype {
#define GS__DTYPE_ENUM(name, val, str, size, kind) name = (val),
    GS_DTYPE_MAP(GS__DTYPE_ENUM)
#undef GS__DTYPE_ENUM
    GS_DTYPE_COUNT
} gs_dtype_t;

/* How a scalar operand of an elementwise op takes part in type promotion (NumPy 2, NEP 50:
 * Python scalars are "weak" and adopt the array's type where its kind can hold them). */
typedef enum gs_scalar_kind {
    GS_SCALAR_FLOAT = 0,   /* a Python float: float arrays keep their dtype, others -> float64 */
    GS_SCALAR_INT,         /* a Python int: numeric arrays keep their dtype, bool -> int64 */
    GS_SCALAR_BOOL,        /* a Python bool: every array keeps its dtype */
    GS_SCALAR_KIND_COUNT
} gs_scalar_kind_t;

typedef enum gs_unop {
    GS_UNARY_NEG = 0,
    GS_UNARY_ABS,
    GS_UNARY_EXP,
    GS_UNARY_LOG,
    GS_UNARY_SQRT,
    GS_UNARY_SIN,
    GS_UNARY_COS,
    GS_UNARY_TAN,
    GS_UNARY_ARCSIN,
    GS_UNARY_ARCCOS,
    GS_UNARY_ARCTAN,
    GS_UNARY_SINH,
    GS_UNARY_COSH,
    GS_UNARY_TANH,
    GS_UNARY_EXP2,
    GS_UNARY_LOG2,
    GS_UNARY_LOG10,
    GS_UNARY_LOG1P,
    GS_UNARY_EXPM1,
    GS_UNARY_FLOOR,
    GS_UNARY_CEIL,
    GS_UNARY_ROUND,         /* np.round(x) = np.rint(x): halves to even */
    GS_UNARY_TRUNC,
    GS_UNARY_SIGN,          /* -1, 0, +1; NaN stays NaN */
    GS_UNARY_SQUARE,
    GS_UNARY_RECIPROCAL,
    GS_UNARY_ISNAN,         /* bool results (also ISINF, ISFINITE, LOGICAL_NOT) */
    GS_UNARY_ISINF,
    GS_UNARY_ISFINITE,
    GS_UNARY_LOGICAL_NOT,   /* x == 0 (NaN is true, as in NumPy) */
    GS_UNARY_COUNT
} gs_unop_t;

typedef enum gs_binop {
    GS_BINARY_ADD = 0,
    GS_BINARY_SUB,
    GS_BINARY_MUL,
    GS_BINARY_DIV,
    GS_BINARY_POW,
    GS_BINARY_LT,
    GS_BINARY_LE,
    GS_BINARY_GT,
    GS_BINARY_GE,
    GS_BINARY_EQ,
    GS_BINARY_NE,
    GS_BINARY_MINIMUM,
    GS_BINARY_MAXIMUM,
    GS_BINARY_MOD,          /* np.mod / np.remainder: the sign of the divisor */
    GS_BINARY_FLOOR_DIVIDE, /* np.floor_divide; a // 0 is a / 0 (inf or NaN) */
    GS_BINARY_LOGICAL_AND,  /* truth of nonzero (NaN is true); bool */
    GS_BINARY_LOGICAL_OR,
    GS_BINARY_LOGICAL_XOR,
    GS_BINARY_COUNT
} gs_binop_t;

typedef enum gs_redop {
    GS_RED_SUM = 0,
    GS_RED_MIN = 1,
    GS_RED_MAX = 2,
    GS_RED_MEAN = 3,
    GS_RED_VAR = 4,
    GS_RED_STD = 5,
    GS_RED_ARGMIN = 6,
    GS_RED_ARGMAX = 7,
    GS_RED_PROD = 8,        /* np.prod: 1 for an empty slice; floats accumulated in float64,
                               integers in int64 with NumPy's wrap (gs_array_reduce) */
    GS_RED_COUNT
} gs_redop_t;

/* ---- dtypes (graph/dtype.c; docs/api.md has the tables) ---- */

/** NumPy's name of @a dtype ("float32"), or "unknown" for a value outside the table. The
 *  string is static. */
const char *gs_dtype_name(gs_dtype_t dtype);
/** Bytes per element (1, 2, 4 or 8), 0 for a value outside the table. */
size_t gs_dtype_size(gs_dtype_t dtype);
/** np.result_type of two array operands (symmetric): bool < uint8 < int32 < int64 among
 *  integers, float16 < float32 < float64 among floats; an integer with a float gives the
 *  smallest float holding every value of both (uint8 + float16 = float16, int32 + float32 =
 *  float64). GS_ERR_INVALID_PARAM for a dtype outside the table; *out_p written on success. */
gs_status_t gs_dtype_promote(gs_dtype_t a, gs_dtype_t b, gs_dtype_t *out_p);
/** Result dtype of an array of @a a with a scalar of kind @a k (NEP 50 weak scalars, either
 *  operand order). Errors as gs_dtype_promote(). */
gs_status_t gs_dtype_promote_scalar(gs_dtype_t a, gs_scalar_kind_t k, gs_dtype_t *out_p);
/** Result dtype of unary @a op on @a a: NEG, ABS, SIGN, SQUARE, RECIPROCAL and the rounding
 *  ops (FLOOR, CEIL, ROUND, TRUNC) keep the dtype (on bool only ABS is allowed, as NumPy has
 *  no bool loops for the others); ISNAN, ISINF, ISFINITE, LOGICAL_NOT give bool; the
 *  exponential, logarithmic, root and trigonometric functions of integers give the smallest
 *  float holding them (bool, uint8 -> float16; int32, int64 -> float64), of floats the float.
 *  GS_ERR_INVALID_PARAM with a message naming the op and dtype otherwise. */
gs_status_t gs_dtype_unary_result(gs_unop_t op, gs_dtype_t a, gs_dtype_t *out_p);
/** Result dtype of binary @a op on operands of dtypes @a a and @a b (already promoted for
 *  scalars with gs_dtype_promote_scalar(), the scalar then counting as the promoted type):
 *  comparisons and the LOGICAL_* ops give bool; DIV (true division) of integers gives
 *  float64, of floats the promoted float; ADD, MUL, MINIMUM, MAXIMUM the promoted type
 *  (bool + bool is logical or, bool * bool logical and); SUB, POW, MOD and FLOOR_DIVIDE the
 *  promoted type, and are errors on two bools (NumPy has no such loops among these dtypes). GS_ERR_INVALID_PARAM naming the op and both dtypes otherwise. */
gs_status_t gs_dtype_binary_result(gs_binop_t op, gs_dtype_t a, gs_dtype_t b,
                                   gs_dtype_t *out_p);

/** Result dtype of reduction @a op over an array of @a a, NumPy's defaults: SUM and PROD of bool and
 *  integers gives int64 (NumPy gives uint64 for uint8, which gsched lacks: int64 holds every
 *  such sum of fewer than 2^55 elements), of floats the float; MEAN, VAR and STD of bool and
 *  integers give float64, of floats the float; MIN and MAX keep the dtype; ARGMIN and ARGMAX
 *  give int64. GS_ERR_INVALID_PARAM for an unknown op or dtype. */
gs_status_t gs_dtype_reduce_result(gs_redop_t op, gs_dtype_t a, gs_dtype_t *out_p);

/** The element of dtype @a dtype at @a elem (host memory, any alignment) as a double (int64
 *  beyond 2^53 rounds; bool gives 0 or 1); NaN for a NULL pointer or unknown dtype. Use it to
 *  read results gathered in their own dtype. */
double gs_dtype_to_double(gs_dtype_t dtype, const void *elem);

/** Dtype of the elements of @a a; -1 for NULL. */
int gs_array_dtype(gs_array_h a);

/** @a a converted to @a dtype (np.ndarray.astype, casting="unsafe"): float -> integer truncates
 *  toward zero (NaN, inf and out-of-range values give an unspecified value, as in NumPy),
 *  integer -> narrower integer wraps, anything -> bool is "!= 0". Fused into the consumer's
 *  kernel. A new reference to @a a itself when the dtype is already @a dtype.
 *  Errors: GS_ERR_INVALID_PARAM (NULL a or out_p, unknown dtype), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_astype(gs_array_h a, gs_dtype_t dtype, gs_array_h *out_p);

/* ---- creation ---- */

/** Normal(mean, std) float64 random array of @a ndim (1..GS_MAX_NDIM) axes. @a chunks[a] is
 *  the chunk length along axis a (the last chunk may be shorter); shape[a] >= 0, chunks[a] >= 1.
 *  Values follow docs/random.md: a pure function of (seed, global index), under the default
 *  float64 definition GS_RANDOM_DEFAULT_FLOAT64 (version 3 since session 12; arrays made before
 *  that had version 1 values: gs_array_random_normal_version(..., GS_RANDOM_V1, ...) gives them
 *  back bit for bit). std >= 0. Errors: GS_ERR_INVALID_PARAM (mean or std not finite, std < 0,
 *  bad ndim/shape/chunks, NULL out_p), GS_ERR_NO_MEMORY; *out_p (a new reference, released by
 *  the caller) is written only on success. */
gs_status_t gs_array_random_normal(uint64_t seed, double mean, double std, int ndim,
                                   const int64_t *shape, const int64_t *chunks, gs_array_h *out_p);

/* Versions of the normal definition (docs/random.md): V1, one Philox block and one
 * log/sqrt/cos per element (the default until session 12; still reachable by name, so every
 * seed made under it keeps its values); V2, one block and one log, sqrt and sine/cosine pair per
 * two adjacent elements, the same bits on CPU and GPU. */
#define GS_RANDOM_V1 1
#define GS_RANDOM_V2 2
/* V3 (float64 and float32): elements i and i + 2 of each group of four (4q, 4q + 2 and
 * 4q + 1, 4q + 3) share one block and one log, sqrt and sine/cosine pair, so reads with unit
 * stride and with stride 2 (x[::2]) both use both halves; the same bits on CPU and GPU. */
#define GS_RANDOM_V3 3
/* V4 (float32 only, docs/random.md "float32 version 4"): elements 8g + p + 2m (m = 0..3) of each
 * group of eight, p = 0 and p = 1, take the four normals of one block, so a read with stride 2
 * (x[::2]) uses whole blocks; the same bits on CPU and GPU. Float64 arrays have no version 4. */
#define GS_RANDOM_V4 4
/* The default normal definition of each dtype (docs/random.md "Versions and defaults"): what
 * gs_array_random_normal() / gs_array_random_normal_dtype() give, float64 version 3 and float32
 * version 4 (since session 12; before, version 1 for both). GS_RANDOM_DEFAULT passed as the
 * version of gs_array_random_normal_version() / _dtype_version() picks the dtype's default. */
#define GS_RANDOM_DEFAULT 0
#define GS_RANDOM_DEFAULT_FLOAT64 GS_RANDOM_V3
#define GS_RANDOM_DEFAULT_FLOAT32 GS_RANDOM_V4

/** gs_array_random_normal() under definition @a version (GS_RANDOM_V1, V2 or V3;
 *  GS_RANDOM_DEFAULT is GS_RANDOM_DEFAULT_FLOAT64, what gs_array_random_normal() gives); the
 *  same array, element for element, for the same arguments on any chunking, worker count and
 *  backend. GS_ERR_INVALID_PARAM for another version (GS_RANDOM_V4: float32 only, the message
 *  says so) or what gs_array_random_normal() rejects;
 *  *out_p (a new reference, released by the caller) is written only on success. */
gs_status_t gs_array_random_normal_version(uint64_t seed, double mean, double std, int version,
                                           int ndim, const int64_t *shape, const int64_t *chunks,
                                           gs_array_h *out_p);

/** Uniform [low, high) random array; as gs_array_random_normal(). */
gs_status_t gs_array_random_uniform(uint64_t seed, double low, double high, int ndim,
                                    const int64_t *shape, const int64_t *chunks,
                                    gs_array_h *out_p);

/** gs_array_random_normal() with elements of @a dtype, under the dtype's default definition:
 *  GS_DTYPE_FLOAT64 is exactly gs_array_random_normal() (GS_RANDOM_DEFAULT_FLOAT64, version 3);
 *  GS_DTYPE_FLOAT32 is the float32 definition GS_RANDOM_DEFAULT_FLOAT32 (version 4) of
 *  docs/random.md: binary32 arithmetic, the same bits on CPU and GPU, never a rounding of the
 *  float64 array. Version 1 of either dtype (the default before session 12) stays reachable by
 *  name through gs_array_random_normal_dtype_version(). Errors: GS_ERR_INVALID_PARAM for another dtype (the message
 *  names it), for mean or std not finite in the dtype, and what gs_array_random_normal()
 *  rejects. *out_p (a new reference) is written only on success. */
gs_status_t gs_array_random_normal_dtype(uint64_t seed, double mean, double std, gs_dtype_t dtype,
                                         int ndim, const int64_t *shape, const int64_t *chunks,
                                         gs_array_h *out_p);

/** gs_array_random_normal_dtype() under definition @a version of that dtype (docs/random.md):
 *  float64 takes GS_RANDOM_V1, V2 or V3 (as gs_array_random_normal_version()), float32
 *  GS_RANDOM_V1 (float32 version 1, section "float32 random"), V3 or V4 (float32 only);
 *  GS_RANDOM_DEFAULT picks the dtype's default (float64 V3, float32 V4). Errors: GS_ERR_INVALID_PARAM for a
 *  version the dtype does not have (the message names both) and what
 *  gs_array_random_normal_dtype() rejects; *out_p (a new reference) is written only on success. */
gs_status_t gs_array_random_normal_dtype_version(uint64_t seed, double mean, double std,
                                                 gs_dtype_t dtype, int version, int ndim,
                                                 const int64_t *shape, const int64_t *chunks,
                                                 gs_array_h *out_p);

/** gs_array_random_uniform() with elements of @a dtype (float64 or float32), as
 *  gs_array_random_normal_dtype(). */
gs_status_t gs_array_random_uniform_dtype(uint64_t seed, double low, double high,
                                          gs_dtype_t dtype, int ndim, const int64_t *shape,
                                          const int64_t *chunks, gs_array_h *out_p);

/** int64 random array uniform on [low, high], BOTH ends included (NumPy's random_integers;
 *  Generator.integers(low, high + 1)), unbiased (Lemire's method with rejection; docs/random.md
 *  "Random integers"). low = INT64_MIN, high = INT64_MAX gives all 2^64 values. Chunking,
 *  worker and backend independent like every random array. Errors: GS_ERR_INVALID_PARAM for
 *  low > high and what gs_array_random_normal() rejects for ndim/shape/chunks/out_p; *out_p (a
 *  new reference) is written only on success. */
gs_status_t gs_array_random_integers(uint64_t seed, int64_t low, int64_t high, int ndim,
                                     const int64_t *shape, const int64_t *chunks,
                                     gs_array_h *out_p);

/** Array filled with @a value. */
gs_status_t gs_array_full(double value, int ndim, const int64_t *shape, const int64_t *chunks,
                          gs_array_h *out_p);

/** gs_array_full() with elements of @a dtype (np.full(shape, value, dtype)): @a value is
 *  converted as gs_array_astype() converts a float64. Errors: as gs_array_full(), and
 *  GS_ERR_INVALID_PARAM for an unknown dtype. zeros/ones fill with 0 and 1. */
gs_status_t gs_array_full_dtype(double value, gs_dtype_t dtype, int ndim, const int64_t *shape,
                                const int64_t *chunks, gs_array_h *out_p);
gs_status_t gs_array_zeros_dtype(gs_dtype_t dtype, int ndim, const int64_t *shape,
                                 const int64_t *chunks, gs_array_h *out_p);
gs_status_t gs_array_ones_dtype(gs_dtype_t dtype, int ndim, const int64_t *shape,
                                const int64_t *chunks, gs_array_h *out_p);

/** gs_array_full() with 0 and 1 (np.zeros, np.ones). */
gs_status_t gs_array_zeros(int ndim, const int64_t *shape, const int64_t *chunks,
                           gs_array_h *out_p);
gs_status_t gs_array_ones(int ndim, const int64_t *shape, const int64_t *chunks,
                          gs_array_h *out_p);
/** An array filled with @a value with the shape, chunk grid and dtype of @a a (np.full_like;
 *  @a a is borrowed and not computed: only its shape and chunks are read). zeros_like and
 *  ones_like fill with 0 and 1. Errors: GS_ERR_INVALID_PARAM (NULL a or out_p),
 *  GS_ERR_NO_MEMORY. */
gs_status_t gs_array_full_like(gs_array_h a, double value, gs_array_h *out_p);
gs_status_t gs_array_zeros_like(gs_array_h a, gs_array_h *out_p);
gs_status_t gs_array_ones_like(gs_array_h a, gs_array_h *out_p);

/** Array whose element at row-major flat index i is start + i * step (like
 *  np.arange(start, ..., step).reshape(shape)). */
gs_status_t gs_array_arange(double start, double step, int ndim, const int64_t *shape,
                            const int64_t *chunks, gs_array_h *out_p);

/** Array holding a copy of @a data (row-major, prod(shape) doubles, caller-owned; it may be
 *  freed when this returns). The data travels inside the task graph: meant for small and
 *  medium inputs. */
gs_status_t gs_array_from_host(const double *data, int ndim, const int64_t *shape,
                               const int64_t *chunks, gs_array_h *out_p);

/* ---- elementwise ---- */

gs_status_t gs_array_unary(gs_unop_t op, gs_array_h a, gs_array_h *out_p);
/** a OP b with NumPy broadcasting. Chunks are unified: where the operands' chunk boundaries
 *  differ along an axis, the result is chunked at the union of the boundaries. */
gs_status_t gs_array_binary(gs_binop_t op, gs_array_h a, gs_array_h b, gs_array_h *out_p);
/** a OP scalar: the array is the left operand (a - 2, a / 2, a < 2). Errors as
 *  gs_array_binary() (unknown op, NULL handles). */
gs_status_t gs_array_binary_array_scalar(gs_binop_t op, gs_array_h a, double scalar,
                                         gs_array_h *out_p);
/** scalar OP a: the scalar is the left operand (2 - a, 2 / a, 2 < a). Errors as
 *  gs_array_binary(). */
gs_status_t gs_array_binary_scalar_array(gs_binop_t op, double scalar, gs_array_h a,
                                         gs_array_h *out_p);
/** a OP scalar and scalar OP a with a scalar of kind @a kind (NumPy 2's Python int, float or
 *  bool, NEP 50): an int scalar keeps an integer array's dtype (int32 + 2 is int32, wrapping
 *  on overflow) and must fit it (uint8 + 300 is an error, as NumPy raises), a float scalar
 *  makes integer arrays float64 (what the plain functions above do), a bool scalar (0 or 1)
 *  keeps every dtype. Errors as gs_array_binary(), and GS_ERR_INVALID_PARAM for a scalar that
 *  is not of its kind (2.5 as an int) or does not fit, naming the dtype. */
gs_status_t gs_array_binary_array_scalar_kind(gs_binop_t op, gs_array_h a, double scalar,
                                              gs_scalar_kind_t kind, gs_array_h *out_p);
gs_status_t gs_array_binary_scalar_array_kind(gs_binop_t op, double scalar,
                                              gs_scalar_kind_t kind, gs_array_h a,
                                              gs_array_h *out_p);
/** Deprecated name of gs_array_binary_array_scalar() (a OP scalar); kept for existing callers. */
gs_status_t gs_array_binary_scalar(gs_binop_t op, gs_array_h a, double scalar, gs_array_h *out_p);
/** Deprecated name of gs_array_binary_scalar_array() (scalar OP a); kept for existing callers. */
gs_status_t gs_array_scalar_binary(gs_binop_t op, double scalar, gs_array_h a, gs_array_h *out_p);

/** np.where(cond, a, b): a where cond is true (nonzero; NaN counts as true), else b, with
 *  NumPy broadcasting of the three operands and chunks unified as gs_array_binary() does.
 *  cond of any dtype is read as bool; the result has the promoted dtype of a and b. Fused
 *  into one kernel with its operands (a bool mask from a comparison never materialises).
 *  Errors: GS_ERR_INVALID_PARAM (NULL handles, operands that do not broadcast),
 *  GS_ERR_NO_MEMORY; *out_p is not written on error. */
gs_status_t gs_array_where(gs_array_h cond, gs_array_h a, gs_array_h b, gs_array_h *out_p);

/** np.clip(a, lo, hi) = minimum(maximum(a, lo), hi): NaN elements stay NaN, and lo > hi gives
 *  hi everywhere, as in NumPy. Infinite bounds clip one side only. Errors: GS_ERR_INVALID_PARAM
 *  (NULL handles, a NaN bound), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_clip(gs_array_h a, double lo, double hi, gs_array_h *out_p);

/* ---- slicing and layout ---- */

#define GS_SLICE_HAS_START 0x1u
#define GS_SLICE_HAS_STOP 0x2u
#define GS_SLICE_INDEX 0x4u   /* take the single element `start` and drop the axis */

/** One axis of a slice, NumPy semantics: start/stop are used only when their flag is set
 *  (otherwise they default by the sign of step); negative values count from the end; out of
 *  range values clip. step != 0. With GS_SLICE_INDEX the axis is indexed by `start` (must be in
 *  range) and removed. */
typedef struct gs_slice {
    int64_t start;
    int64_t stop;
    int64_t step;
    uint32_t flags;
} gs_slice_t;

/* Slice constructors (C compound literals), so that no field is left to a zeroed struct (a
 * zeroed gs_slice_t has step 0 and is rejected):
 *   GS_SLICE_ALL               a[:]
 *   GS_SLICE(start, stop, step) a[start:stop:step]
 *   GS_SLICE_FROM(start, step)  a[start::step]
 *   GS_SLICE_TO(stop, step)     a[:stop:step]
 *   GS_SLICE_STEP(step)         a[::step] (GS_SLICE_STEP(-1) reverses the axis)
 *   GS_SLICE_AT(i)              a[i]: take element i and drop the axis
 * Example: a[2:, ::-1, 5] is
 *   gs_slice_t s[3] = {GS_SLICE_FROM(2, 1), GS_SLICE_STEP(-1), GS_SLICE_AT(5)}; */
#define GS_SLICE(start_, stop_, step_)                                                       \
    ((gs_slice_t){(int64_t)(start_), (int64_t)(stop_), (int64_t)(step_),                     \
                  GS_SLICE_HAS_START | GS_SLICE_HAS_STOP})
#define GS_SLICE_FROM(start_, step_)                                                         \
    ((gs_slice_t){(int64_t)(start_), 0, (int64_t)(step_), GS_SLICE_HAS_START})
#define GS_SLICE_TO(stop_, step_)                                                            \
    ((gs_slice_t){0, (int64_t)(stop_), (int64_t)(step_), GS_SLICE_HAS_STOP})
#define GS_SLICE_STEP(step_) ((gs_slice_t){0, 0, (int64_t)(step_), 0u})
#define GS_SLICE_ALL GS_SLICE_STEP(1)
#define GS_SLICE_AT(i_) ((gs_slice_t){(int64_t)(i_), 0, 1, GS_SLICE_INDEX})

/** a[s[0], s[1], ..., s[n-1]]; axes past @a n are taken whole. n <= ndim(a). Output chunks
 *  follow the input chunks (each output chunk comes from one input chunk; empty ones drop). */
gs_status_t gs_array_slice(gs_array_h a, int n, const gs_slice_t *s, gs_array_h *out_p);

/** Permute axes: out axis i is input axis perm[i]; @a perm NULL reverses the axes. */
gs_status_t gs_array_transpose(gs_array_h a, const int *perm, gs_array_h *out_p);

/* ---- moving data between chunks ----
 * These build nodes whose chunks are assembled from pieces of other chunks (COPY tasks on the
 * workers). Transposes and slices need none of this: they read their input chunks in place,
 * inside the consumer's fused kernel (x + x.T reads chunks (i, j) and (j, i)). */

/** @a a with a new chunking. chunks[ax] per axis: >= 1 regular chunks of that length (the last
 *  one shorter; a length >= the axis gives one chunk), -1 one chunk for the whole axis, 0 keep
 *  @a a's chunks on that axis. NULL only for ndim 0. Returns a new reference to @a a itself when
 *  nothing changes. Output blocks that would gather more than GS_KERNEL_MAX_PIECES input pieces
 *  (tiny chunks into huge ones) are built through intermediate chunkings.
 *  Errors: GS_ERR_INVALID_PARAM (NULL arguments, chunks[ax] < -1), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_rechunk(gs_array_h a, const int64_t *chunks, gs_array_h *out_p);

/** @a a with explicit chunk boundaries: for each axis either bounds[ax] = NULL (keep @a a's
 *  chunks) or nchunks[ax] chunks with boundaries bounds[ax][0..nchunks[ax]], strictly
 *  increasing from 0 to the axis length (an empty axis: nchunks 1, bounds {0, 0}). Both arrays
 *  are borrowed (copied). Otherwise as gs_array_rechunk(). */
gs_status_t gs_array_rechunk_bounds(gs_array_h a, const int64_t *nchunks,
                                    const int64_t *const *bounds, gs_array_h *out_p);

/** Join @a n >= 1 arrays (borrowed handles in @a arrays[0..n)) along existing @a axis
 *  (negative counts from the end), like np.concatenate. All must have the same ndim (>= 1) and
 *  the same size on every other axis. Output chunks: each operand's chunks along @a axis one
 *  after the other; on the other axes the union of the operands' boundaries. n = 1 returns a
 *  new reference to arrays[0]. Errors: GS_ERR_INVALID_PARAM (n < 1, NULL arrays, ndim or shape
 *  mismatch naming the array and axis, axis out of range), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_concatenate(int n, const gs_array_h *arrays, int axis, gs_array_h *out_p);

/** Join @a n >= 1 arrays of identical shape along a new axis @a axis of the result
 *  (-(ndim+1) <= axis <= ndim), like np.stack: result ndim = ndim + 1 <= GS_MAX_NDIM, one chunk
 *  per operand along the new axis, the union of the operands' boundaries elsewhere. Errors as
 *  gs_array_concatenate(). */
gs_status_t gs_array_stack(int n, const gs_array_h *arrays, int axis, gs_array_h *out_p);

/* ---- shape: reshape, ravel, eye, diag, tril, triu (graph/array_shape.c) ----
 * All keep the input's dtype (eye: the one asked for) and follow NumPy exactly; the ones built
 * from masks (tril, triu, eye, diag of a vector) fuse into one kernel per chunk. On error
 * *out_p is not written and gs_last_error() names the problem. */

/** np.reshape(a, shape) in C (row-major) order: @a ndim (0..GS_MAX_NDIM) sizes in @a shape
 *  (borrowed; NULL only for ndim 0), one of which may be -1 (inferred from the others).
 *  Like Dask, @a a is first rechunked where needed so that every output chunk is one input
 *  chunk's elements (on each run of axes that merge or split, the axes after the first are
 *  taken whole), then each chunk is relabelled by one copy task, or by none where only fused
 *  kernels (elementwise ops, where, reductions) read the result: they read the input's chunks
 *  in the new shape. The same shape returns a new reference to @a a. Errors: GS_ERR_INVALID_PARAM (NULL a or out_p, ndim out of range, NULL
 *  shape, a size < -1, two -1s, a -1 beside a zero size, an element count that differs from
 *  @a a's ("cannot reshape an array of size 12 into shape (5, 3)"), overflow),
 *  GS_ERR_NO_MEMORY. */
gs_status_t gs_array_reshape(gs_array_h a, int ndim, const int64_t *shape, gs_array_h *out_p);

/** Element order: C (row-major: the last index varies fastest) or Fortran (column-major: the
 *  first index varies fastest). Of a raw file (gs_array_from_raw()) and of a reshape
 *  (gs_array_reshape_order()). */
typedef enum gs_order { GS_ORDER_C = 0, GS_ORDER_F = 1 } gs_order_t;

/** np.reshape(a, shape, order): gs_array_reshape() with @a order a gs_order_t. GS_ORDER_C is
 *  gs_array_reshape(). GS_ORDER_F reads the elements of @a a and writes them into the new
 *  shape in column-major index order (NumPy's order='F': the first index varies fastest on
 *  both sides; it says nothing about memory layout), which equals
 *  transpose(reshape(transpose(a), reversed shape)) and is lowered that way: the transposes
 *  are index maps read in place, the reshape rechunks and relabels as gs_array_reshape()
 *  does. The same shape (or one axis or fewer on both sides) gives what gs_array_reshape()
 *  gives. The result keeps @a a's dtype. Errors: those of gs_array_reshape() (same messages:
 *  sizes, -1 inference, ndim, NULL arguments) and GS_ERR_INVALID_PARAM for an @a order other
 *  than GS_ORDER_C and GS_ORDER_F ("unknown order"), GS_ERR_NO_MEMORY. New reference in
 *  *out_p, written only on success. */
gs_status_t gs_array_reshape_order(gs_array_h a, int ndim, const int64_t *shape,
                                   gs_order_t order, gs_array_h *out_p);

/** np.ravel(a): gs_array_reshape(a, 1, {-1}) (a 0-d array gives shape (1,)). Errors as
 *  gs_array_reshape(). */
gs_status_t gs_array_ravel(gs_array_h a, gs_array_h *out_p);

/** np.eye(n, m, k, dtype): an n x m array of @a dtype, 1 on diagonal @a k (0 the main one,
 *  > 0 above, < 0 below; any value: one outside the matrix gives all zeros) and 0 elsewhere.
 *  @a m = -1 means m = n (NumPy's M=None). Chunked regularly by chunks[0..2) (borrowed).
 *  Computed from indices inside each chunk's kernel (no data is read). Errors:
 *  GS_ERR_INVALID_PARAM (n < 0, m < -1, unknown dtype, NULL chunks or out_p, a chunk length
 *  < 1, a side longer than 2^53, too many elements), GS_ERR_NO_MEMORY. tril, triu and diag of
 *  a vector have the same 2^53 limit on the matrix's sides. */
gs_status_t gs_array_eye(int64_t n, int64_t m, int64_t k, gs_dtype_t dtype, const int64_t *chunks,
                         gs_array_h *out_p);

/** np.diag(x, k). A 1-D @a x of length n gives the (n + |k|) x (n + |k|) matrix with x on
 *  diagonal @a k and zeros elsewhere, chunked along both axes like x (plus one chunk of |k|
 *  when k != 0). A 2-D @a x (m x n) gives its diagonal k as a 1-D array (x[i, i + k]; empty
 *  when the diagonal misses the matrix), read by one copy task per run of the diagonal inside
 *  one chunk of x (the result's chunks: the diagonal cut at x's chunk boundaries). Errors: GS_ERR_INVALID_PARAM (NULL x or out_p, x not 1-D or 2-D, |k| too large
 *  for the result), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_diag(gs_array_h x, int64_t k, gs_array_h *out_p);

/** np.tril(x, k) / np.triu(x, k): x with the elements above (tril) / below (triu) diagonal @a k
 *  of its last two axes set to 0: tril keeps x[..., i, j] where j - i <= k, triu where
 *  j - i >= k. @a x (borrowed) has ndim >= 2 (more axes: a stack of matrices, as in NumPy; a
 *  1-D x, which NumPy broadcasts to an n x n result, is rejected); result chunks and dtype
 *  are x's. One fused where(mask, x, 0) kernel per chunk. Errors:
 *  GS_ERR_INVALID_PARAM (NULL x or out_p, ndim < 2), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_tril(gs_array_h x, int64_t k, gs_array_h *out_p);
gs_status_t gs_array_triu(gs_array_h x, int64_t k, gs_array_h *out_p);

/* ---- reductions ---- */

#define GS_REDUCE_FIELD_AXIS 0x1u
#define GS_REDUCE_FIELD_SPLIT_EVERY 0x2u
#define GS_REDUCE_FIELD_DDOF 0x4u

/** Extensible reduction parameters: fields are read only when their bit is in field_mask.
 *  Defaults: all axes, split_every 16, ddof 0. axis may be negative (counts from the end).
 *  A field set to a non-zero value without its bit is an error (GS_ERR_INVALID_PARAM): an axis
 *  without GS_REDUCE_FIELD_AXIS would otherwise silently reduce over all axes. Zero-initialise
 *  the struct ({0}) and set the bits of the fields you fill in. */
typedef struct gs_reduce_params {
    uint32_t field_mask;
    int axis;
    int split_every;   /* >= 2 */
    double ddof;
} gs_reduce_params_t;

/** Reduce @a a with @a op. Over all axes the result has ndim 0 (a scalar); over one axis the
 *  axis is removed. The result dtype is NumPy's (gs_dtype_reduce_result()): ARGMIN/ARGMAX
 *  give int64 indices (the flat row-major index when reducing all axes), SUM and PROD of
 *  integers int64, MEAN of integers float64. SUM, PROD, MIN and MAX of int32, int64 and
 *  uint8 accumulate in int64, exactly, and SUM and PROD wrap modulo 2^64 as NumPy's do
 *  (two's complement; every chunking, split_every and backend gives the same bits); bool
 *  sums and products accumulate in float64 (exact below 2^53 elements). Everything else
 *  accumulates in float64: MEAN of integers sums in float64 and divides, as NumPy's
 *  np.mean does (so a mean of int64 values beyond 2^53 is rounded, as in NumPy). Gather an
 *  int64 result into an int64_t with gs_client_compute() (gs_client_compute_scalar()
 *  converts to a double, which rounds beyond 2^53). @a params may be NULL. */
gs_status_t gs_array_reduce(gs_redop_t op, gs_array_h a, const gs_reduce_params_t *params,
                            gs_array_h *out_p);

/** Reduce @a a over the axes axes[0..naxes) (NumPy's axis=(a, b, ...): distinct, any order,
 *  negative counting from the end; naxes 0 with axes NULL means every axis), keeping each
 *  reduced axis with length 1 when @a keepdims is nonzero (one small COPY task per kept
 *  axis). @a params (may be NULL) gives split_every and ddof; its AXIS field must not be set.
 *  SUM, PROD, MIN and MAX reduce one axis after the other; MEAN takes the mean of means (the groups
 *  are equal); VAR and STD combine per-axis means and variances by the law of total variance
 *  (exact, and as stable as the one-axis reduction); every axis at once is the all-axes
 *  reduction (one tree). ARGMIN/ARGMAX take one axis or all of them, as in NumPy.
 *  Errors: GS_ERR_INVALID_PARAM (NULL handles, naxes outside 0..ndim, axes NULL with naxes >
 *  0, an axis out of range or repeated, the AXIS field set, argmin/argmax over some but not
 *  all axes, and every error of gs_array_reduce()), GS_ERR_NO_MEMORY; nothing is written on
 *  error. */
gs_status_t gs_array_reduce_axes(gs_redop_t op, gs_array_h a, int naxes, const int *axes,
                                 int keepdims, const gs_reduce_params_t *params,
                                 gs_array_h *out_p);

/* NumPy's truth and NaN-skipping reductions (graph/reduce_nan.c). Separate from gs_redop_t:
 * they are compositions of the plain reductions with elementwise ops (fused into the
 * reductions' kernels), never a layer or wire value of their own. Values are append-only. */
typedef enum gs_credop {
    GS_CRED_ANY = 0,        /* np.any: bool; NaN is true; an empty slice gives false */
    GS_CRED_ALL,            /* np.all: bool; an empty slice gives true */
    GS_CRED_COUNT_NONZERO,  /* np.count_nonzero: int64; NaN counts */
    GS_CRED_NANSUM,         /* NaN as 0; dtype as SUM (int32 -> int64); all-NaN gives 0 */
    GS_CRED_NANMEAN,        /* NaN skipped; dtype as MEAN; all-NaN or empty gives NaN */
    GS_CRED_NANMIN,         /* NaN skipped; keeps the dtype; all-NaN gives NaN */
    GS_CRED_NANMAX,
    GS_CRED_NANARGMIN,      /* int64; an all-NaN slice gives -1 (NumPy raises ValueError) */
    GS_CRED_NANARGMAX,
    GS_CRED_NANVAR,         /* NaN skipped, two passes; dtype as VAR; NaN where n - ddof <= 0 */
    GS_CRED_NANSTD,
    GS_CRED_NANPROD,        /* NaN as 1; dtype as PROD (int32 -> int64); all-NaN gives 1 */
    GS_CRED_COUNT
} gs_credop_t;

/** NumPy's name of @a op ("nanmax"), "unknown" outside the table. The string is static. */
const char *gs_credop_name(gs_credop_t op);

/** Result dtype of @a op over an array of @a a (NumPy's): ANY, ALL bool; COUNT_NONZERO,
 *  NANARGMIN, NANARGMAX int64; NANSUM, NANPROD as gs_dtype_reduce_result(GS_RED_SUM); NANMIN, NANMAX
 *  @a a; NANMEAN, NANVAR, NANSTD as GS_RED_MEAN (ints and bool -> float64). Errors:
 *  GS_ERR_INVALID_PARAM (unknown op or dtype, NULL out_p); *out_p written on success only. */
gs_status_t gs_dtype_composite_result(gs_credop_t op, gs_dtype_t a, gs_dtype_t *out_p);

/** Reduce @a a with @a op over the axes axes[0..naxes) (as gs_array_reduce_axes(): distinct,
 *  negative from the end; naxes 0 with axes NULL means every axis), keeping the reduced axes
 *  with length 1 when @a keepdims is nonzero. NANARGMIN/NANARGMAX take one axis or all of
 *  them. @a params (may be NULL) gives split_every; ddof only for NANVAR/NANSTD; AXIS must not
 *  be set. Each op is built from existing reductions, elementwise ops and where (docs/api.md,
 *  "Truth and NaN-skipping reductions", has the table): on bool and integer arrays the nan-
 *  reductions are the plain ones (so integer NANSUM, NANPROD, NANMIN, NANMAX are exact in
 *  int64 and wrap, as gs_array_reduce()'s; COUNT_NONZERO counts in float64, exact below
 *  2^53 elements). Floats accumulate in float64 (nanmean, nanvar, nanstd are
 *  rounded once to a float32/float16 input's dtype). Differences from NumPy: an all-NaN slice
 *  gives -1 from NANARGMIN/NANARGMAX (NumPy raises), and no RuntimeWarning is issued for
 *  all-NaN slices (nanmin/nanmax/nanmean give NaN as NumPy does). NANMIN, NANMAX, NANARG*
 *  over a zero-size axis are errors, as in NumPy. Ownership as every constructor.
 *  Errors: GS_ERR_INVALID_PARAM (NULL handles, unknown op or dtype, ddof with another op, and
 *  every error of gs_array_reduce_axes(), prefixed with the op and dtype), GS_ERR_NO_MEMORY;
 *  nothing is written on error. */
gs_status_t gs_array_reduce_composite(gs_credop_t op, gs_array_h a, int naxes, const int *axes,
                                      int keepdims, const gs_reduce_params_t *params,
                                      gs_array_h *out_p);

/** Row-major multi-index of flat index @a flat in an array of shape @a shape (like
 *  np.unravel_index): idx_p[a] for a < ndim (caller-owned, ndim entries). Use it on the flat
 *  index an all-axes ARGMIN/ARGMAX gives. ndim 0 accepts only flat 0 (nothing is written).
 *  Errors: GS_ERR_INVALID_PARAM (ndim outside 0..GS_MAX_NDIM, NULL shape or idx_p with
 *  ndim > 0, a negative extent, flat outside 0..size-1); idx_p is not written on error. */
gs_status_t gs_unravel_index(int64_t flat, int ndim, const int64_t *shape, int64_t *idx_p);

/* ---- cumulative sums and products (graph/array_scan.c, graph/lower_scan.c) ---- */

/** Operation of a cumulative scan. Values are part of the wire format: append only. */
typedef enum gs_scan_op {
    GS_SCAN_SUM = 0,        /* np.cumsum */
    GS_SCAN_PROD = 1,       /* np.cumprod */
    GS_SCAN_OP_COUNT
} gs_scan_op_t;

/** "No dtype asked for": the operation picks NumPy's default. */
#ifndef GS_DTYPE_AUTO
#define GS_DTYPE_AUTO ((gs_dtype_t)-1)
#endif

/** Result dtype of a cumulative sum or product of an array of @a a, asked for as @a dtype
 *  (GS_DTYPE_AUTO: NumPy's default: bool, uint8, int32 and int64 give int64 (NumPy gives
 *  uint64 for uint8, which gsched lacks), float16, float32 and float64 keep theirs; any other
 *  value is the result and accumulator dtype, as NumPy's dtype= argument). Errors:
 *  GS_ERR_INVALID_PARAM (unknown op, unknown dtype @a a or @a dtype, NULL out_p) naming
 *  them; *out_p is written on success only. */
gs_status_t gs_dtype_scan_result(gs_scan_op_t op, gs_dtype_t a, gs_dtype_t dtype,
                                 gs_dtype_t *out_p);

/** np.cumsum(x, axis, dtype) (@a op GS_SCAN_SUM) or np.cumprod (GS_SCAN_PROD) along @a axis
 *  (negative counts from the end): element i along the axis is x[0] op ... op x[i], with the
 *  result shape and chunks of @a x. The result dtype is gs_dtype_scan_result(op, dtype(x),
 *  @a dtype); values are converted to it and accumulated in it (floats round each step to
 *  their precision, as NumPy's loops; integers wrap; bool adds as logical or). NaN
 *  propagates; an empty array gives an empty array. A 0-d @a x is taken as the 1-d array of
 *  its one element, as NumPy does when an axis is given (axis 0 or -1 then; the result has
 *  shape (1,)); for NumPy's axis=None (the flattened array) scan gs_array_ravel(x) along 0.
 *  Chunk-parallel, as Dask's cumsum: each chunk is scanned by one task starting from the
 *  running total of the chunks before it along the axis; those totals come from a task per
 *  chunk (its total along the axis) and a chain of small tasks along the axis (one slab each),
 *  so the input is read twice and the result written once. The input's own expression is
 *  computed into chunks first (it is not fused into the scan).
 *  Ownership as every constructor: *out_p is a new reference (gs_array_release), @a x keeps
 *  its own. Errors: GS_ERR_INVALID_PARAM (NULL x or out_p, unknown op, an axis outside
 *  -ndim..ndim-1 or (0-d x) outside -1..0, an unknown dtype; the message names the axis and
 *  ndim or the dtype), GS_ERR_NO_MEMORY; *out_p is written on success only. */
gs_status_t gs_array_cumulative(gs_array_h x, gs_scan_op_t op, int axis, gs_dtype_t dtype,
                                gs_array_h *out_p);
/** gs_array_cumulative(x, GS_SCAN_SUM, axis, GS_DTYPE_AUTO, out_p). */
gs_status_t gs_array_cumsum(gs_array_h x, int axis, gs_array_h *out_p);
/** gs_array_cumulative(x, GS_SCAN_PROD, axis, GS_DTYPE_AUTO, out_p). */
gs_status_t gs_array_cumprod(gs_array_h x, int axis, gs_array_h *out_p);

/* ---- linear algebra ---- */

/** Matrix product a @ b with NumPy matmul semantics for 1-D and 2-D operands: 2-D @ 2-D is
 *  (M x K) @ (K x N) -> M x N; a 1-D a is a row vector (K) -> (N), a 1-D b a column vector
 *  (K) -> (M); 1-D @ 1-D is the dot product (ndim 0). The output is chunked like a's rows and
 *  b's columns. The contracted axis must be chunked identically in both operands (a's last
 *  axis, b's first): otherwise GS_ERR_INVALID_PARAM naming both chunkings (rechunk one of
 *  them). Each output chunk sums the products of its chunk pairs: up to 8 pairs per task, the
 *  partial products added in a tree. An operand that is the transpose of a 2-D array
 *  (gs_array_transpose) is read in place, transposed by the product, never materialised.
 *  Errors: GS_ERR_INVALID_PARAM (ndim not 1 or 2, shapes not aligned, chunks differ),
 *  GS_ERR_NO_MEMORY. Ownership as for every constructor (file comment). */
gs_status_t gs_array_matmul(gs_array_h a, gs_array_h b, gs_array_h *out_p);

/** QR factorisation of a tall-and-skinny 2-D array a (M x N, M >= N >= 1) chunked along rows
 *  only (one column chunk), by TSQR: a = q @ r with q (M x N, orthonormal columns, chunked like
 *  a) and r (N x N, upper triangular with a non-negative diagonal, one chunk). Row chunks
 *  smaller than N are stacked with their neighbours (at most 32 per QR). Either of @a q_p and
 *  @a r_p may be NULL (that part is not built); q and r of one array, used in one computation,
 *  share one factorisation. Errors: GS_ERR_INVALID_PARAM (not 2-D, M < N, N = 0, several
 *  column chunks: "rechunk", row chunks too small to group), GS_ERR_NO_MEMORY; nothing is
 *  written on error. */
gs_status_t gs_array_qr(gs_array_h a, gs_array_h *q_p, gs_array_h *r_p);

/** Thin SVD a = u @ diag(s) @ vt of a tall-and-skinny (M >= N, one column chunk) or
 *  short-and-fat (M < N, one row chunk) 2-D array, K = min(M, N): u (M x K), s (K, descending,
 *  one chunk), vt (K x N). Tall: TSQR, then the SVD of the stacked R factors at the top of the
 *  tree; u chunked like a's rows, vt one chunk. Short-and-fat: through the transpose; vt is
 *  chunked like a's columns, u one chunk. Signs of singular vectors are those LAPACK gives.
 *  Any of the outputs may be NULL. Errors and ownership as gs_array_qr(). */
gs_status_t gs_array_svd(gs_array_h a, gs_array_h *u_p, gs_array_h *s_p, gs_array_h *vt_p);

#define GS_SVDC_FIELD_POWER_ITER 0x1u
#define GS_SVDC_FIELD_OVERSAMPLES 0x2u
#define GS_SVDC_FIELD_SEED 0x4u

/** Parameters of gs_array_svd_compressed(), read only when their bit is in field_mask.
 *  Defaults: n_power_iter 0 (as Dask; 1-2 sharpen slowly decaying spectra at two more passes
 *  over a each), n_oversamples 10, seed 0. */
typedef struct gs_svd_compressed_params {
    uint32_t field_mask;
    int n_power_iter;       /* 0..100 */
    int64_t n_oversamples;  /* >= 0 */
    uint64_t seed;          /* of the Gaussian test matrix (gs_array_random_normal) */
} gs_svd_compressed_params_t;

/** Randomized truncated SVD (Halko, Martinsson & Tropp 2011) of a 2-D array chunked in any
 *  way: u (M x k), s (k), vt (k x N) approximating the k leading singular triplets. With
 *  l = min(k + n_oversamples, min(M, N)) and Omega an N x l standard normal test matrix from
 *  @a seed: Y = a @ Omega, n_power_iter times Y = a @ Q(a^T @ Q(Y)), Q = Q(Y) (TSQR), then the
 *  SVD of B = Q^T a through its tall transpose a^T @ Q. The result depends on the seed only,
 *  never on the cluster. u is chunked like a's rows, vt like a's columns, s one chunk.
 *  @a params may be NULL. Each output is a separate expression over the same subexpressions:
 *  compute them in one call (or persist a) to avoid recomputation. Any output may be NULL.
 *  Errors: GS_ERR_INVALID_PARAM (not 2-D, k < 1 or k > min(M, N), bad params, row chunks of a
 *  too small for l columns), GS_ERR_NO_MEMORY. */
gs_status_t gs_array_svd_compressed(gs_array_h a, int64_t k,
                                    const gs_svd_compressed_params_t *params, gs_array_h *u_p,
                                    gs_array_h *s_p, gs_array_h *vt_p);

/* ---- neighbourhoods (stencils with halos; issue 16) ---- */

/** What a neighbourhood sees beyond the array's edges (the same on every axis).
 *  NONE: nothing; an output element whose neighbourhood leaves the array keeps its input value.
 *  REFLECT: mirrored with the edge element repeated (d c b a | a b c d | d c b a), as
 *  scipy.ndimage's "reflect" and Dask's "reflect" (NumPy's pad mode "symmetric").
 *  PERIODIC: wraps around (the array tiles space). CONSTANT: a given value. */
typedef enum gs_boundary {
    GS_BOUNDARY_NONE = 0,
    GS_BOUNDARY_REFLECT = 1,
    GS_BOUNDARY_PERIODIC = 2,
    GS_BOUNDARY_CONSTANT = 3,
    GS_BOUNDARY_COUNT
} gs_boundary_t;

/** Weighted neighbourhood sum (a correlation, as scipy.ndimage.correlate):
 *      out[i] = sum_o weights[o] * x[i + o - radius],  o over [0, 2 radius] per axis,
 *  with @a weights row-major over the offsets (prod(2 radius[ax] + 1) doubles, at most
 *  GS_KERNEL_MAX_WEIGHTS = 343; copied) and @a radius one entry per axis (>= 0). Elements
 *  beyond the edges follow @a boundary (@a cval for GS_BOUNDARY_CONSTANT, else ignored). The
 *  output has @a x's shape and chunks. Each output chunk's task reads its own chunk and, from
 *  each neighbouring chunk, only the edge slab its halo needs (a slab task runs where that
 *  chunk is, so peers send slabs, never whole chunks). Chunks thinner than the radius are
 *  read whole; a halo that would need more than GS_KERNEL_MAX_PIECES pieces per chunk fails
 *  at lowering with GS_ERR_INVALID_PARAM (rechunk to larger chunks first).
 *  Errors: GS_ERR_INVALID_PARAM (NULL arguments, ndim 0, a negative radius, too many weights,
 *  an unknown boundary, REFLECT or PERIODIC with a radius larger than its axis),
 *  GS_ERR_NO_MEMORY. New reference in *out_p, written only on success. */
gs_status_t gs_array_stencil(gs_array_h x, const double *weights, const int *radius,
                             gs_boundary_t boundary, double cval, gs_array_h *out_p);

/* ---- users' own code on chunks (issue 16) ---- */

/** One block as a user kernel sees it: row-major data of @a shape, whose element 0 is at
 *  global index @a start of the array (negative or past the end inside a halo), holding
 *  elements of @a dtype. Inputs are read only; the output's data is to be written whole.
 *  @a data points at elements of @a dtype whatever its declared type: a kernel casts it
 *  (float64 double, float32 float, float16 uint16_t holding IEEE binary16 bits, int32
 *  int32_t, int64 int64_t, uint8 uint8_t, bool a byte 0 or 1), e.g.
 *  `const float *x = (const float *)in[0].data;` when in[0].dtype == GS_DTYPE_FLOAT32.
 *  Each input keeps its array's dtype; the output has the dtype the caller gave
 *  (gs_array_map_blocks_dtype). @a dtype was appended after @a start: the fields before it
 *  keep their offsets, and a zeroed dtype is float64. */
typedef struct gs_block {
    double *data;
    int32_t ndim;
    int64_t shape[GS_MAX_NDIM];
    int64_t start[GS_MAX_NDIM];
    int32_t dtype;          /* gs_dtype_t of data's elements (0: float64) */
} gs_block_t;

/** A CPU kernel: `void f(const gs_block_t *in, int nin, gs_block_t *out, const void *arg)`. */
typedef void (*gs_block_fn)(const gs_block_t *in, int nin, gs_block_t *out, const void *arg);

/** A kernel in a shared library the CPU workers load by path (dlopen) and symbol (dlsym).
 *  @a arg / @a arg_len: bytes copied into the task graph and passed to every call (NULL, 0:
 *  none; at most 64 KiB). Each call runs in a forked child of the worker: a kernel that crashes
 *  (SIGSEGV, abort) fails its task with GS_ERR_TASK_FAILED naming the kernel and the signal,
 *  and the worker carries on. */
typedef struct gs_user_kernel {
    const char *library;
    const char *symbol;
    const void *arg;
    size_t arg_len;
    /** A CUDA C++ kernel instead (gs_array_map_blocks and gs_array_map_overlap): its source
     *  (NUL-terminated, copied; at most 1 MiB), @a symbol the kernel's name, @a library
     *  ignored (may be NULL).
     *  CUDA workers compile it with NVRTC at first use (cached in memory and on disk by a hash
     *  of source, name, architecture, options and NVRTC version, under $GS_CUDA_RTC_CACHE_DIR
     *  /nvrtc-cache, else $XDG_CACHE_HOME/gsched/nvrtc, else ~/.cache/gsched/nvrtc) and launch
     *  it on their stream as `extern "C" __global__ void NAME(gs_cuda_args_t a)` with
     *  blockDim.x 256 and gridDim.x ceil(n_out / 256); gs_cuda_args_t holds nin, in[2] and out
     *  (gs_block_t views of device memory with their global starts), arg (device memory) and
     *  arg_len, and n_out (docs/api.md "CUDA kernels"). A source that does not compile fails
     *  its task with GS_ERR_TASK_FAILED and the NVRTC log (naming "NAME.cu(LINE)"); CPU
     *  workers fail it with GS_ERR_UNSUPPORTED. NULL: the CPU kernel library/symbol. */
    const char *cuda_source;
    /** GS_KERNEL_* bits (0: none). Appended last: initialisers that stop before it give 0. */
    uint32_t flags;
} gs_user_kernel_t;

/** gs_user_kernel_t.flags: the kernel is *elementwise* (gs_array_map_blocks only). The user
 *  promises that (1) every input has the output's shape and chunks (checked: otherwise
 *  gs_array_map_blocks fails with GS_ERR_INVALID_PARAM), (2) output element i (a global
 *  index) depends only on element i of each input and on i itself (the block's start may be
 *  read), never on other elements, the block's shape or where its edges fall, and (3) the
 *  kernel writes every output element and no input. With GS_LOWER_FUSE on, such a kernel
 *  fuses with its blockwise producers and consumers (including a reduction's first stage):
 *  one task per output chunk evaluates the producers into a temporary block, calls the kernel
 *  on it and continues the consumers from its output, with no chunk stored or sent between
 *  them (docs/api.md "map_blocks"). The kernel still sees the very blocks (shape, start) it
 *  would see unfused, so a kernel that breaks (2) but keeps (1) and (3) gives the same values
 *  today; a kernel that breaks (2) is not safe against optimisations the promise allows (a
 *  slice pushed below the kernel, different chunks). Breaking (3) gives undefined values
 *  (the temporary blocks are not zeroed). Ignored by gs_array_map_overlap. */
#define GS_KERNEL_ELEMENTWISE 0x1u

/** Dask's map_overlap: @a kernel runs once per chunk of @a x on the chunk padded by @a depth
 *  elements per axis (halos from the neighbouring chunks' edge slabs, past the array's edges as
 *  @a boundary and @a cval say, exactly as gs_array_stencil), with nin = 1; in[0] is the padded
 *  block (in[0].start = the chunk's start - depth) and out the chunk itself (x's shape and
 *  chunks): the kernel writes the trimmed result. With GS_BOUNDARY_NONE the padding past the
 *  array's edges is 0 (the kernel sees where it is from start). A CPU kernel (library,
 *  symbol) runs on any worker (on a CUDA worker staged through host memory); a CUDA C++ kernel
 *  (@a kernel->cuda_source, as for gs_array_map_blocks: same signature and launch, nin = 1,
 *  in[0] the padded block in device memory, assembled there from the chunk and the
 *  neighbours' edge slabs exactly as the CPU path builds it; out the chunk, gridDim.x
 *  ceil(n_out / 256) over the chunk's elements) runs on CUDA workers only, for arrays of 1 to
 *  3 axes (more: GS_ERR_UNSUPPORTED); a CPU worker fails such a task with GS_ERR_UNSUPPORTED,
 *  a source that does not compile fails it with GS_ERR_TASK_FAILED and the NVRTC log.
 *  @a x must be float64 (the halo assembly moves float64 elements; blocks have dtype
 *  GS_DTYPE_FLOAT64): another dtype fails with GS_ERR_INVALID_PARAM naming it.
 *  Errors: GS_ERR_INVALID_PARAM (as gs_array_stencil for x, depth and boundary; NULL kernel
 *  fields, an empty CUDA source or name, arg over 64 KiB), GS_ERR_NOT_FOUND when the
 *  library exists on this machine but cannot be loaded or lacks the symbol (dlerror's text in
 *  gs_last_error(); a library absent here is checked by the workers only), GS_ERR_NO_MEMORY.
 *  New reference in *out_p. */
gs_status_t gs_array_map_overlap(const gs_user_kernel_t *kernel, gs_array_h x, const int *depth,
                                 gs_boundary_t boundary, double cval, gs_array_h *out_p);

/** Dask's map_blocks: @a kernel runs once per output chunk of an array of @a shape in
 *  @a chunks (as gs_array_zeros takes them; float64: gs_array_map_blocks_dtype with
 *  GS_DTYPE_FLOAT64), with in[k] = chunk b of inputs[k] for
 *  output chunk b (in[k].start its global offset) and out the output chunk. Inputs must have
 *  the output's ndim and its number of chunks on every axis (block b of each lines up with
 *  output block b; their shapes may differ). 1 <= nin <= 2. A CPU kernel runs each call in a
 *  forked child as for gs_array_map_overlap; a CUDA kernel (cuda_source) on CUDA workers.
 *  Errors: GS_ERR_INVALID_PARAM (NULL arguments, nin out of range, inputs whose ndim or chunk
 *  counts do not line up, bad shape or chunks, kernel fields as gs_array_map_overlap),
 *  GS_ERR_NOT_FOUND (as gs_array_map_overlap), GS_ERR_NO_MEMORY. New reference in *out_p. */
gs_status_t gs_array_map_blocks(const gs_user_kernel_t *kernel, int nin, const gs_array_h *inputs,
                                int ndim, const int64_t *shape, const int64_t *chunks,
                                gs_array_h *out_p);

/** gs_array_map_blocks with an output of @a dtype (any gs_dtype_t). Every input keeps its own
 *  dtype: in[k].dtype is inputs[k]'s, out.dtype is @a dtype (gs_block_t says how a kernel
 *  reads them), for CPU and CUDA kernels alike, fused (GS_KERNEL_ELEMENTWISE) or not.
 *  Errors: as gs_array_map_blocks, and GS_ERR_INVALID_PARAM for a @a dtype that is no
 *  gs_dtype_t (the message names it). New reference in *out_p, written only on success. */
gs_status_t gs_array_map_blocks_dtype(const gs_user_kernel_t *kernel, int nin,
                                      const gs_array_h *inputs, gs_dtype_t dtype, int ndim,
                                      const int64_t *shape, const int64_t *chunks,
                                      gs_array_h *out_p);

/** Optimisation switches for lowering. All on by default (GS_LOWER_DEFAULT). Turning any off
 *  gives the same values. */
#define GS_LOWER_CULL 0x1u            /* drop tasks whose outputs the result does not need */
#define GS_LOWER_FUSE 0x2u            /* one task per output chunk for blockwise chains */
#define GS_LOWER_SLICE_PUSHDOWN 0x4u  /* generate only the elements a slice keeps */
/* the SVD of a tall array (rows >= 2 columns) by Gram passes: one pass when well conditioned,
 * shifted CholeskyQR3 otherwise (docs/api.md "Accuracy of the tall SVD"); off: TSQR. An input
 * the Gram path refuses (numerically rank-deficient) is computed again by TSQR by
 * gs_client_compute / gs_client_compute_scalar / gs_client_persist, so they give the SVD of
 * any finite matrix; a future from gs_client_submit reports the refusal (GS_ERR_TASK_FAILED). */
#define GS_LOWER_GRAM_SVD 0x8u
#define GS_LOWER_DEFAULT \
    (GS_LOWER_CULL | GS_LOWER_FUSE | GS_LOWER_SLICE_PUSHDOWN | GS_LOWER_GRAM_SVD)

/* ---- handles ---- */

/** Add a reference (returns @a a). */
gs_array_h gs_array_retain(gs_array_h a);
/** Drop a reference; NULL is fine. */
void gs_array_release(gs_array_h a);

int gs_array_ndim(gs_array_h a);
/** Copy the shape into @a shape_p (ndim entries). */
void gs_array_shape(gs_array_h a, int64_t *shape_p);
/** Number of elements. */
int64_t gs_array_size(gs_array_h a);
/** Number of chunks along @a axis (0 <= axis < ndim). */
int64_t gs_array_nchunks(gs_array_h a, int axis);
/** Chunk boundaries along @a axis: nchunks + 1 offsets from 0 to shape[axis]. The array is
 *  owned by the handle and lives as long as it. */
const int64_t *gs_array_chunk_bounds(gs_array_h a, int axis);

/* ---- array files (read and written by the workers; docs/api.md, "Files") ---- */

/* gs_order_t (C or Fortran element order of a raw file): with gs_array_reshape_order(). */

/** Array stored in a raw file at @a path: prod(shape) elements of @a dtype in native byte
 *  order (gs_array_from_raw_ex() takes another) and @a order, element 0 at byte @a offset, chunked by @a chunks (ndim entries, each
 *  >= 1; the last chunk of an axis may be shorter). Each chunk is read by the worker that
 *  computes it, straight from @a path (which must be visible to the workers and to this
 *  process, which checks the file's size now), reading only the bytes it needs; slices and
 *  transposes of the array read only the elements they keep. The array's dtype is @a dtype:
 *  elements are not converted. The strings are copied.
 *  Errors: GS_ERR_INVALID_PARAM (arguments), GS_ERR_IO (cannot stat the file, or it is
 *  shorter than offset + prod(shape) * itemsize: "truncated"), GS_ERR_NO_MEMORY; every
 *  message names the file. A file changed or removed after this call fails the tasks reading
 *  it with GS_ERR_IO naming the file. */
gs_status_t gs_array_from_raw(const char *path, gs_dtype_t dtype, int ndim, const int64_t *shape,
                              gs_order_t order, int64_t offset, const int64_t *chunks,
                              gs_array_h *out_p);

/** Byte order of the elements of a raw file (NumPy's '=', '<', '>'). */
typedef enum gs_byteorder {
    GS_BYTEORDER_NATIVE = 0,   /* this host's (gs_array_from_raw()) */
    GS_BYTEORDER_LITTLE = 1,   /* '<': x86-64, ARM64, arr.astype('<f8').tofile() */
    GS_BYTEORDER_BIG = 2       /* '>': network order, arr.astype('>f8').tofile() */
} gs_byteorder_t;

/** gs_array_from_raw() with the elements stored in byte order @a byteorder: the workers
 *  byte-swap each element as they read it when it differs from the host's (one-byte dtypes
 *  need none), so the array holds the file's values in @a dtype, exactly. NATIVE is
 *  gs_array_from_raw(). Errors: those of gs_array_from_raw(), and GS_ERR_INVALID_PARAM for
 *  a @a byteorder other than NATIVE, LITTLE and BIG (naming the file). */
gs_status_t gs_array_from_raw_ex(const char *path, gs_dtype_t dtype, gs_byteorder_t byteorder,
                                 int ndim, const int64_t *shape, gs_order_t order,
                                 int64_t offset, const int64_t *chunks, gs_array_h *out_p);

/** Array stored in the NumPy .npy file at @a path (versions 1.0 to 3.0; C or Fortran order;
 *  either byte order, big-endian data byte-swapped as it is read), chunked by @a chunks (ndim
 *  entries), of the file's dtype: descr f8, f4, f2, i4, i8, u1, b1 give float64, float32,
 *  float16, int32, int64, uint8, bool (no conversion). This process reads the header only;
 *  the workers read the data as gs_array_from_raw() says. Errors as gs_array_from_raw(), plus
 *  GS_ERR_INVALID_PARAM for a file that is not .npy (wrong magic, bad header) or whose size is
 *  not exactly header + prod(shape) * itemsize (the header disagrees with the data), and
 *  GS_ERR_UNSUPPORTED for another dtype (int16, uint32, complex, structured, strings,
 *  objects: the message names it and the supported list). */
gs_status_t gs_array_from_npy(const char *path, const int64_t *chunks, gs_array_h *out_p);

/** The expression that writes @a a as a .npy file of its own dtype (little-endian, descr
 *  '<f8', '<f4', '<f2', '<i4', '<i8', '|u1', '|b1'): each chunk is written by the
 *  worker holding it into @a tmp, then one task writes the header, checks the byte count,
 *  fsyncs and renames @a tmp to @a path. Its value (a 0-d array) is the file's size in
 *  bytes. gs_client_to_npy() is the usual entry point; @a tmp must not exist or be a file
 *  nobody else writes. New reference in *out_p; GS_ERR_INVALID_PARAM, GS_ERR_NO_MEMORY. */
gs_status_t gs_array_to_npy_expr(gs_array_h a, const char *path, const char *tmp,
                                 gs_array_h *out_p);

/** Compressor of zarr chunks (the same values as the zarr codecs of the task format). */
typedef enum gs_zarr_codec { GS_ZARR_NONE = 0, GS_ZARR_ZSTD = 1, GS_ZARR_BLOSC = 2 } gs_zarr_codec_t;

/** Array stored in the zarr directory store @a path: version 3 (zarr.json) or 2 (.zarray);
 *  regular chunk grids; chunks uncompressed, zstd or blosc (v2 "compressor"; v3 "bytes"
 *  little- or big-endian, optionally after a reversed "transpose" (Fortran order) and followed
 *  by "zstd" or "blosc"); C or F order; the array is of the store's dtype (v2 dtype strings
 *  as gs_array_from_npy(), either byte order; v3 data_type float64, float32, float16, int32,
 *  int64, uint8, bool), not converted; missing chunk files read as fill_value (a number,
 *  "NaN", "Infinity", "-Infinity" or v3 hex bits for floats, an integer in range, true or
 *  false for bool). Compute chunks are @a chunks (ndim entries) or,
 *  when NULL, the zarr chunks; they may differ: each task reads the zarr chunks its region
 *  touches. The metadata is read here (jansson); the workers read the chunk files. Errors:
 *  GS_ERR_IO (no store at @a path), GS_ERR_INVALID_PARAM (malformed metadata, naming the
 *  file), GS_ERR_UNSUPPORTED (a codec, dtype, chunk grid or key encoding this build does not
 *  read, named), GS_ERR_NO_MEMORY. Chunk files that do not match the metadata (size after
 *  decompression, corrupt compressed data) fail the task reading them, naming the file. */
gs_status_t gs_array_from_zarr(const char *path, const int64_t *chunks, gs_array_h *out_p);

/** The expression writing @a a as a zarr store of its own dtype (v2 dtype '<f4', '|b1', ...;
 *  v3 data_type "float32", "bool", ...; little-endian; fill_value 0 of the dtype: 0.0, 0,
 *  false) and @a version (2 or 3) with chunks
 *  compressed by @a codec (gs_zarr_codec_t): each compute chunk is one zarr chunk (an
 *  irregular grid is rechunked to its first chunk size first), written by the worker holding
 *  it into the directory @a tmp; a last task checks the chunk count, writes the metadata and
 *  renames @a tmp to @a path (which must not exist as a non-empty directory). Its value is the
 *  number of chunks. gs_client_to_zarr() is the usual entry point. */
gs_status_t gs_array_to_zarr_expr(gs_array_h a, const char *path, const char *tmp, int version,
                                  int codec, gs_array_h *out_p);

#ifdef __cplusplus
}
#endif
#endif
