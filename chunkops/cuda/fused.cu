/* Fused chunk kernels: generation -> elementwise program -> strided addressing -> STORE or
 * per-chunk reduction, one kernel per chunk task, generating only the elements the region
 * needs and keeping every intermediate in registers.
 *
 * The postfix program is interpreted per element by a warp-uniform loop (every thread runs
 * the same instruction, so the switch never diverges). The value stack lives in registers: it
 * is kept top-first in a fixed-size array indexed only by compile-time constants, and pushes
 * and pops shift it (D registers). Three template instances cover the programs: CHAIN (depth
 * 1, one leaf: "leaf then unary/immediate ops", e.g. normal + 1), PAIR (depth 2, two leaves)
 * and GENERIC (depth 8, 8 leaves).
 *
 * Reductions are deterministic: every thread folds its elements in a fixed order, warps merge
 * with a fixed shuffle tree, blocks through shared memory, and the per-block partials are
 * merged by the last block to finish (FULL; an integer ticket elects it, its merge order is
 * fixed) or by a second kernel (split axis reductions). No floating-point atomics.
 *
 * Partial-record arithmetic comes from chunkops/records.h, shared with the CPU backend, and
 * random values from chunkops/random.h, so values agree with the CPU backend. This file must be
 * compiled with --fmad=false so that a*b+c is rounded twice, as on the CPU.
 */
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/random.h"
#include "chunkops/records.h"

#include <cuda_runtime.h>

namespace {

typedef gs__cuda_fplan_t Plan;
constexpr int BLOCK = GS__CUDA_BLOCK;
constexpr int WARPS = BLOCK / 32;
constexpr unsigned FULL_MASK = 0xffffffffu;

/* ---- elementwise operations (NumPy semantics) ---- */

__device__ __forceinline__ double op_minimum(double a, double b)
{
    return (a < b || a != a) ? a : b;
}

__device__ __forceinline__ double op_maximum(double a, double b)
{
    return (a > b || a != a) ? a : b;
}

/* Transcendental program ops are real calls: inlined into the interpreter's switch they raise
 * the register count of every kernel (exp alone took the CHAIN reduction from 46 to 77
 * registers), while the random leaves keep their own inlined log/sqrt/cos. */
__device__ __noinline__ double op_exp(double x)
{
    return exp(x);
}

__device__ __noinline__ double op_log(double x)
{
    return log(x);
}

__device__ __noinline__ double op_pow(double a, double b)
{
    return pow(a, b);
}

/* Unary and binary ops over U values: the switch is outside, the loops over u inside. */
#define GS__UN(expr)                                                                           \
    _Pragma("unroll") for (int u = 0; u < U; u++)                                              \
    {                                                                                          \
        const double x = s0[u];                                                                \
        s0[u] = (expr);                                                                        \
    }                                                                                          \
    break
#define GS__BIN(expr)                                                                          \
    _Pragma("unroll") for (int u = 0; u < U; u++)                                              \
    {                                                                                          \
        const double x = s1[u], y = s0[u];                                                     \
        s0[u] = (expr);                                                                        \
    }                                                                                          \
    break

template <int U>
__device__ __forceinline__ void apply_unary(int op, double (&s0)[U], double imm)
{
    switch (op) {
    case GS_OP_NEG: GS__UN(-x);
    case GS_OP_ABS: GS__UN(fabs(x));
    case GS_OP_EXP: GS__UN(op_exp(x));
    case GS_OP_LOG: GS__UN(op_log(x));
    case GS_OP_SQRT: GS__UN(sqrt(x));
    case GS_OP_ADD_IMM: GS__UN(x + imm);
    case GS_OP_SUB_IMM: GS__UN(x - imm);
    case GS_OP_MUL_IMM: GS__UN(x * imm);
    case GS_OP_DIV_IMM: GS__UN(x / imm);
    case GS_OP_POW_IMM: GS__UN(op_pow(x, imm));
    case GS_OP_RSUB_IMM: GS__UN(imm - x);
    case GS_OP_RDIV_IMM: GS__UN(imm / x);
    case GS_OP_RPOW_IMM: GS__UN(op_pow(imm, x));
    case GS_OP_LT_IMM: GS__UN(x < imm ? 1.0 : 0.0);
    case GS_OP_LE_IMM: GS__UN(x <= imm ? 1.0 : 0.0);
    case GS_OP_GT_IMM: GS__UN(x > imm ? 1.0 : 0.0);
    case GS_OP_GE_IMM: GS__UN(x >= imm ? 1.0 : 0.0);
    case GS_OP_EQ_IMM: GS__UN(x == imm ? 1.0 : 0.0);
    case GS_OP_NE_IMM: GS__UN(x != imm ? 1.0 : 0.0);
    case GS_OP_MIN_IMM: GS__UN(op_minimum(x, imm));
    default: GS__UN(op_maximum(x, imm)); /* GS_OP_MAX_IMM */
    }
}

/* s0 <- s1 OP s0 */
template <int U>
__device__ __forceinline__ void apply_binary(int op, const double (&s1)[U], double (&s0)[U])
{
    switch (op) {
    case GS_OP_ADD: GS__BIN(x + y);
    case GS_OP_SUB: GS__BIN(x - y);
    case GS_OP_MUL: GS__BIN(x * y);
    case GS_OP_DIV: GS__BIN(x / y);
    case GS_OP_POW: GS__BIN(op_pow(x, y));
    case GS_OP_LT: GS__BIN(x < y ? 1.0 : 0.0);
    case GS_OP_LE: GS__BIN(x <= y ? 1.0 : 0.0);
    case GS_OP_GT: GS__BIN(x > y ? 1.0 : 0.0);
    case GS_OP_GE: GS__BIN(x >= y ? 1.0 : 0.0);
    case GS_OP_EQ: GS__BIN(x == y ? 1.0 : 0.0);
    case GS_OP_NE: GS__BIN(x != y ? 1.0 : 0.0);
    case GS_OP_MIN: GS__BIN(op_minimum(x, y));
    default: GS__BIN(op_maximum(x, y)); /* GS_OP_MAX */
    }
}

/* Scalar forms for eval1() (same operations; see eval1 for why they are separate). */
__device__ __forceinline__ double apply_unary1(int op, double x, double imm)
{
    switch (op) {
    case GS_OP_NEG: return -x;
    case GS_OP_ABS: return fabs(x);
    case GS_OP_EXP: return op_exp(x);
    case GS_OP_LOG: return op_log(x);
    case GS_OP_SQRT: return sqrt(x);
    case GS_OP_ADD_IMM: return x + imm;
    case GS_OP_SUB_IMM: return x - imm;
    case GS_OP_MUL_IMM: return x * imm;
    case GS_OP_DIV_IMM: return x / imm;
    case GS_OP_POW_IMM: return op_pow(x, imm);
    case GS_OP_RSUB_IMM: return imm - x;
    case GS_OP_RDIV_IMM: return imm / x;
    case GS_OP_RPOW_IMM: return op_pow(imm, x);
    case GS_OP_LT_IMM: return x < imm ? 1.0 : 0.0;
    case GS_OP_LE_IMM: return x <= imm ? 1.0 : 0.0;
    case GS_OP_GT_IMM: return x > imm ? 1.0 : 0.0;
    case GS_OP_GE_IMM: return x >= imm ? 1.0 : 0.0;
    case GS_OP_EQ_IMM: return x == imm ? 1.0 : 0.0;
    case GS_OP_NE_IMM: return x != imm ? 1.0 : 0.0;
    case GS_OP_MIN_IMM: return op_minimum(x, imm);
    default: return op_maximum(x, imm); /* GS_OP_MAX_IMM */
    }
}

__device__ __forceinline__ double apply_binary1(int op, double a, double b)
{
    switch (op) {
    case GS_OP_ADD: return a + b;
    case GS_OP_SUB: return a - b;
    case GS_OP_MUL: return a * b;
    case GS_OP_DIV: return a / b;
    case GS_OP_POW: return op_pow(a, b);
    case GS_OP_LT: return a < b ? 1.0 : 0.0;
    case GS_OP_LE: return a <= b ? 1.0 : 0.0;
    case GS_OP_GT: return a > b ? 1.0 : 0.0;
    case GS_OP_GE: return a >= b ? 1.0 : 0.0;
    case GS_OP_EQ: return a == b ? 1.0 : 0.0;
    case GS_OP_NE: return a != b ? 1.0 : 0.0;
    case GS_OP_MIN: return op_minimum(a, b);
    default: return op_maximum(a, b); /* GS_OP_MAX */
    }
}

/* ---- random leaves: chunkops/random.h, arranged for the GPU. Each 32x32->64 product is one
 * mul.wide.u32 (one IMAD.WIDE) and the round keys come precomputed in the kernel parameters
 * (the plan fills rk[] from the seed), so a round is two multiplies and two 3-input XORs.
 * Integer arithmetic is exact: the words are those of gs_random_block(); the floating-point
 * expressions below are random.h's, term for term. ---- */

__device__ __forceinline__ void mul_wide(uint32_t a, uint32_t b, uint32_t &hi, uint32_t &lo)
{
    uint64_t p;
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(p) : "r"(a), "r"(b));
    lo = (uint32_t)p;
    hi = (uint32_t)(p >> 32);
}

__device__ __forceinline__ void philox_dev(const gs__cuda_leaf_t &lf, uint64_t i, uint32_t (&c)[4])
{
    c[0] = (uint32_t)i;
    c[1] = (uint32_t)(i >> 32);
    c[2] = 0u;
    c[3] = 0u;
#pragma unroll
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, lo0, hi1, lo1;
        mul_wide(GS_PHILOX_M0, c[0], hi0, lo0);
        mul_wide(GS_PHILOX_M1, c[2], hi1, lo1);
        const uint32_t n0 = hi1 ^ c[1] ^ lf.rk[2 * r];
        const uint32_t n2 = hi0 ^ c[3] ^ lf.rk[2 * r + 1];
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
}

__device__ __forceinline__ double random_normal_dev(const gs__cuda_leaf_t &lf, uint64_t i)
{
    uint32_t r[4];
    philox_dev(lf, i, r);
    const uint64_t a = (((uint64_t)r[1] << 32) | r[0]) >> 11;
    const uint64_t b = (((uint64_t)r[3] << 32) | r[2]) >> 11;
    const double u1 = (double)(a + 1) * GS_TWO_POW_M53;
    const double u2 = (double)b * GS_TWO_POW_M53;
    const double z = sqrt(-2.0 * log(u1)) * cos(GS_TWO_PI * u2);
    return lf.p0 + lf.p1 * z; /* mean + std * z */
}

__device__ __forceinline__ double random_uniform_dev(const gs__cuda_leaf_t &lf, uint64_t i)
{
    uint32_t r[4];
    philox_dev(lf, i, r);
    const uint64_t a = (((uint64_t)r[1] << 32) | r[0]) >> 11;
    return lf.p0 + (lf.p1 - lf.p0) * ((double)a * GS_TWO_POW_M53); /* low + (high-low) * u */
}

/* Values of leaf lf at U offsets. RANDOM: random kinds possible (only U == 1 plans carry them).
 * Elements with ok[u] false are not read (their offsets may be out of bounds). */
template <int U, bool RANDOM>
__device__ __forceinline__ void leaf_values(const gs__cuda_leaf_t &lf, const int64_t (&o)[U],
                                            const bool (&ok)[U], double (&v)[U])
{
    switch (lf.kind) {
    case GS_LEAF_CHUNK:
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = ok[u] ? __ldg(lf.data + o[u]) : 0.0;
        break;
    case GS_LEAF_NORMAL:
        if constexpr (RANDOM) {
#pragma unroll
            for (int u = 0; u < U; u++) v[u] = random_normal_dev(lf, (uint64_t)o[u]);
            break;
        }
    case GS_LEAF_UNIFORM:
        if constexpr (RANDOM) {
#pragma unroll
            for (int u = 0; u < U; u++) v[u] = random_uniform_dev(lf, (uint64_t)o[u]);
            break;
        }
    default: /* GS_LEAF_INDEX */
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = (double)o[u];
        break;
    }
}

/* One element (the random-capable variants): the scalar form of eval() below. Kept separate
 * because ptxas allocates fewer registers to it than to the U-wide form at U = 1. */
__device__ __forceinline__ double leaf_value(const gs__cuda_leaf_t &lf, int64_t off)
{
    switch (lf.kind) {
    case GS_LEAF_CHUNK: return __ldg(lf.data + off);
    case GS_LEAF_NORMAL: return random_normal_dev(lf, (uint64_t)off);
    case GS_LEAF_UNIFORM: return random_uniform_dev(lf, (uint64_t)off);
    default: return (double)off; /* GS_LEAF_INDEX */
    }
}

template <int D, int NL>
__device__ __forceinline__ double eval1(const Plan &p, const int64_t (&off)[NL])
{
    double s[D][1];
#pragma unroll
    for (int k = 0; k < D; k++) s[k][0] = 0.0;
    const int n = p.nprog;
    for (int i = 0; i < n; i++) {
        const int op = p.prog[i].op;
        const double imm = p.prog[i].imm;
        if (op == GS_OP_LEAF || op == GS_OP_CONST) {
            double v = imm;
            if (op == GS_OP_LEAF) {
                if (NL == 1) {
                    v = leaf_value(p.leaves[0], off[0]);
                } else {
                    const int a = p.prog[i].arg;
                    int64_t o = off[0];
#pragma unroll
                    for (int k = 1; k < NL; k++)
                        if (a == k) o = off[k];
                    v = leaf_value(p.leaves[a], o);
                }
            }
#pragma unroll
            for (int k = D - 1; k > 0; k--) s[k][0] = s[k - 1][0];
            s[0][0] = v;
        } else if (op >= GS_OP_ADD && op <= GS_OP_MAX) {
            if constexpr (D >= 2) {
                s[0][0] = apply_binary1(op, s[1][0], s[0][0]);
#pragma unroll
                for (int k = 1; k < D - 1; k++) s[k][0] = s[k + 1][0];
            }
        } else {
            s[0][0] = apply_unary1(op, s[0][0], imm);
        }
    }
    return s[0][0];
}

/* Evaluate the program on U elements at leaf offsets off[u][0..NL). The value stack lives in
 * registers: s[0] is the top, pushes and pops shift the D levels (indices are compile-time). */
template <int D, int NL, int U>
__device__ __forceinline__ void eval(const Plan &p, const int64_t (&off)[U][NL],
                                     const bool (&ok)[U], double (&res)[U])
{
    if constexpr (U == 1) {
        res[0] = eval1<D, NL>(p, off[0]);
        return;
    }
    constexpr bool RANDOM = U == 1;
    double s[D][U];
#pragma unroll
    for (int k = 0; k < D; k++)
#pragma unroll
        for (int u = 0; u < U; u++) s[k][u] = 0.0;
    const int n = p.nprog;
    for (int i = 0; i < n; i++) {
        const int op = p.prog[i].op;
        const double imm = p.prog[i].imm;
        if (op == GS_OP_LEAF || op == GS_OP_CONST) {
            double v[U];
            if (op == GS_OP_LEAF) {
                const int a = NL == 1 ? 0 : p.prog[i].arg;
                int64_t o[U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    o[u] = off[u][0];
#pragma unroll
                    for (int k = 1; k < NL; k++)
                        if (a == k) o[u] = off[u][k];
                }
                leaf_values<U, RANDOM>(p.leaves[a], o, ok, v);
            } else {
#pragma unroll
                for (int u = 0; u < U; u++) v[u] = imm;
            }
#pragma unroll
            for (int k = D - 1; k > 0; k--)
#pragma unroll
                for (int u = 0; u < U; u++) s[k][u] = s[k - 1][u];
#pragma unroll
            for (int u = 0; u < U; u++) s[0][u] = v[u];
        } else if (op >= GS_OP_ADD && op <= GS_OP_MAX) {
            if constexpr (D >= 2) {
                apply_binary<U>(op, s[1], s[0]);
#pragma unroll
                for (int k = 1; k < D - 1; k++)
#pragma unroll
                    for (int u = 0; u < U; u++) s[k][u] = s[k + 1][u];
            }
        } else {
            apply_unary<U>(op, s[0], imm);
        }
    }
#pragma unroll
    for (int u = 0; u < U; u++) res[u] = s[0][u];
}

/* Offsets of record r: base + sum_j digit_j(r) * rstride[j] for every leaf (and the index). */
template <int NL, bool IDX>
__device__ __forceinline__ void row_offsets(const Plan &p, int64_t r, int64_t (&off)[NL],
                                            int64_t &idx)
{
#pragma unroll
    for (int k = 0; k < NL; k++) off[k] = p.leaves[k].base;
    idx = p.index.base;
    int64_t q = r;
    for (int j = p.nr - 1; j >= 0; j--) {
        int64_t c = q;
        if (j > 0) {
            const int64_t n = p.rshape[j];
            int64_t qq;
            if (((uint64_t)q | (uint64_t)n) >> 32 == 0)
                qq = (int64_t)((uint32_t)q / (uint32_t)n);
            else
                qq = q / n;
            c = q - qq * n;
            q = qq;
        }
#pragma unroll
        for (int k = 0; k < NL; k++) off[k] += c * p.leaves[k].rstride[j];
        if (IDX) idx += c * p.index.rstride[j];
    }
}

/* ---- accumulators: one thread's fold of elements, mergeable, record I/O ---- */

template <int ACC> struct Acc;

/* Each accumulator: init (empty record), add (one element with its flat index), merge,
 * down (shuffle from lane + d), put/get (plain memory: shared or own global writes), get_cg
 * (partials written by other blocks: read from L2), write_out (the output record). */

template <> struct Acc<GS__CUDA_ACC_SUM> {
    static constexpr int W = 1;
    double s;
    __device__ __forceinline__ void init(const Plan &) { s = 0.0; }
    __device__ __forceinline__ void add(const Plan &, double v, int64_t) { s += v; }
    __device__ __forceinline__ void merge(const Plan &, const Acc &o) { s += o.s; }
    __device__ __forceinline__ Acc down(unsigned d) const
    {
        Acc o;
        o.s = __shfl_down_sync(FULL_MASK, s, d);
        return o;
    }
    __device__ __forceinline__ void put(double *q) const { q[0] = s; }
    __device__ __forceinline__ void get(const double *q) { s = q[0]; }
    __device__ __forceinline__ void get_cg(const double *q) { s = __ldcg(q); }
    __device__ __forceinline__ void write_out(const Plan &p, double *o) const
    {
        o[0] = s;
        if (p.is_mean) o[1] = p.count;
    }
};

template <> struct Acc<GS__CUDA_ACC_MIN> {
    static constexpr int W = 1;
    double m;
    __device__ __forceinline__ void init(const Plan &p) { m = p.is_max ? -INFINITY : INFINITY; }
    __device__ __forceinline__ void add(const Plan &p, double v, int64_t)
    {
        m = p.is_max ? gs_rec_max(m, v) : gs_rec_min(m, v);
    }
    __device__ __forceinline__ void merge(const Plan &p, const Acc &o) { add(p, o.m, 0); }
    __device__ __forceinline__ Acc down(unsigned d) const
    {
        Acc o;
        o.m = __shfl_down_sync(FULL_MASK, m, d);
        return o;
    }
    __device__ __forceinline__ void put(double *q) const { q[0] = m; }
    __device__ __forceinline__ void get(const double *q) { m = q[0]; }
    __device__ __forceinline__ void get_cg(const double *q) { m = __ldcg(q); }
    __device__ __forceinline__ void write_out(const Plan &, double *o) const { o[0] = m; }
};

template <> struct Acc<GS__CUDA_ACC_VAR> {
    static constexpr int W = 3;
    double n, mean, m2;
    __device__ __forceinline__ void init(const Plan &) { n = mean = m2 = 0.0; }
    __device__ __forceinline__ void add(const Plan &, double v, int64_t)
    {
        n += 1.0;
        const double d = v - mean;
        mean += d / n;
        m2 += d * (v - mean);
    }
    __device__ __forceinline__ void merge(const Plan &, const Acc &o)
    {
        double r[3] = {n, mean, m2};
        gs_rec_var_merge(r, o.n, o.mean, o.m2);
        n = r[0];
        mean = r[1];
        m2 = r[2];
    }
    __device__ __forceinline__ Acc down(unsigned d) const
    {
        Acc o;
        o.n = __shfl_down_sync(FULL_MASK, n, d);
        o.mean = __shfl_down_sync(FULL_MASK, mean, d);
        o.m2 = __shfl_down_sync(FULL_MASK, m2, d);
        return o;
    }
    __device__ __forceinline__ void put(double *q) const
    {
        q[0] = n;
        q[1] = mean;
        q[2] = m2;
    }
    __device__ __forceinline__ void get(const double *q)
    {
        n = q[0];
        mean = q[1];
        m2 = q[2];
    }
    __device__ __forceinline__ void get_cg(const double *q)
    {
        n = __ldcg(q);
        mean = __ldcg(q + 1);
        m2 = __ldcg(q + 2);
    }
    __device__ __forceinline__ void write_out(const Plan &, double *o) const { put(o); }
};

template <> struct Acc<GS__CUDA_ACC_ARG> {
    static constexpr int W = 2;
    double v, i;
    __device__ __forceinline__ void init(const Plan &p)
    {
        v = p.is_max ? -INFINITY : INFINITY;
        i = -1.0;
    }
    __device__ __forceinline__ void add(const Plan &p, double x, int64_t idx)
    {
        const double xi = (double)idx;
        if (gs_rec_arg_better(p.is_max, x, xi, v, i)) {
            v = x;
            i = xi;
        }
    }
    __device__ __forceinline__ void merge(const Plan &p, const Acc &o)
    {
        if (gs_rec_arg_better(p.is_max, o.v, o.i, v, i)) {
            v = o.v;
            i = o.i;
        }
    }
    __device__ __forceinline__ Acc down(unsigned d) const
    {
        Acc o;
        o.v = __shfl_down_sync(FULL_MASK, v, d);
        o.i = __shfl_down_sync(FULL_MASK, i, d);
        return o;
    }
    __device__ __forceinline__ void put(double *q) const
    {
        q[0] = v;
        q[1] = i;
    }
    __device__ __forceinline__ void get(const double *q)
    {
        v = q[0];
        i = q[1];
    }
    __device__ __forceinline__ void get_cg(const double *q)
    {
        v = __ldcg(q);
        i = __ldcg(q + 1);
    }
    __device__ __forceinline__ void write_out(const Plan &, double *o) const { put(o); }
};

template <int ACC>
__device__ __forceinline__ void warp_reduce(const Plan &p, Acc<ACC> &a)
{
#pragma unroll
    for (unsigned d = 16; d > 0; d >>= 1) a.merge(p, a.down(d));
}

/* Fold the block's accumulators into thread 0's. Every thread of the block must call it;
 * callers separate two calls with a __syncthreads(). */
template <int ACC>
__device__ __forceinline__ void block_reduce(const Plan &p, Acc<ACC> &a)
{
    __shared__ double sh[WARPS * Acc<ACC>::W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    warp_reduce(p, a);
    if (lane == 0) a.put(sh + warp * Acc<ACC>::W);
    __syncthreads();
    if (warp == 0) {
        if (lane < WARPS) a.get(sh + lane * Acc<ACC>::W);
        else a.init(p);
        warp_reduce(p, a);
    }
}

/* Offsets of the U elements l + u * step of a row; ok[u] = that element exists (< lend). */
template <int NL, int U>
__device__ __forceinline__ void elem_offsets(const Plan &p, const int64_t (&row)[NL], int64_t l,
                                             int64_t step, int64_t lend, int64_t (&off)[U][NL],
                                             bool (&ok)[U])
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int64_t lu = l + u * step;
        ok[u] = lu < lend;
#pragma unroll
        for (int k = 0; k < NL; k++) off[u][k] = row[k] + lu * p.leaves[k].lstride;
    }
}

/* Fold U evaluated elements (those that exist) into an accumulator. */
template <int ACC, int U, bool IDX>
__device__ __forceinline__ void fold(const Plan &p, Acc<ACC> &a, const double (&v)[U],
                                     const bool (&ok)[U], int64_t idx, int64_t l, int64_t step)
{
#pragma unroll
    for (int u = 0; u < U; u++)
        if (ok[u]) a.add(p, v[u], IDX ? idx + (l + u * step) * p.index.lstride : 0);
}

/* ---- kernels (U: elements per thread per step; U > 1 only for plans without random leaves) */

/* STORE: out[r * L + l] for tiles of tile_rows x tpr threads, grid-strided. */
template <int D, int NL, int U>
__global__ void __launch_bounds__(BLOCK) k_store(const __grid_constant__ Plan p)
{
    const int trow = threadIdx.x / p.tpr;
    const int tcol = threadIdx.x - trow * p.tpr;
    if (trow >= p.tile_rows) return;
    const int64_t step = (int64_t)gridDim.x * p.tpr;
    for (int64_t r = (int64_t)blockIdx.y * p.tile_rows + trow; r < p.R;
         r += (int64_t)gridDim.y * p.tile_rows) {
        int64_t row[NL], idx;
        row_offsets<NL, false>(p, r, row, idx);
        double *o = p.out + r * p.L;
        for (int64_t l = (int64_t)blockIdx.x * p.tpr + tcol; l < p.L; l += U * step) {
            int64_t off[U][NL];
            bool ok[U];
            double v[U];
            elem_offsets<NL, U>(p, row, l, step, p.L, off, ok);
            eval<D, NL, U>(p, off, ok, v);
#pragma unroll
            for (int u = 0; u < U; u++)
                if (ok[u]) o[l + u * step] = v[u];
        }
    }
}

/* FULL: the whole region into one record. Per-block partials, merged by the last block. */
template <int D, int NL, int U, int ACC>
__global__ void __launch_bounds__(BLOCK) k_full(const __grid_constant__ Plan p)
{
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    __shared__ int last;
    Acc<ACC> a;
    a.init(p);
    const int trow = threadIdx.x / p.tpr;
    const int tcol = threadIdx.x - trow * p.tpr;
    if (trow < p.tile_rows) {
        const int64_t step = (int64_t)gridDim.x * p.tpr;
        for (int64_t r = (int64_t)blockIdx.y * p.tile_rows + trow; r < p.R;
             r += (int64_t)gridDim.y * p.tile_rows) {
            int64_t row[NL], idx;
            row_offsets<NL, IDX>(p, r, row, idx);
            if constexpr (U == 1) { /* the seed path: this form allocates 6 registers fewer */
                for (int64_t l = (int64_t)blockIdx.x * p.tpr + tcol; l < p.L;
                     l += (int64_t)gridDim.x * p.tpr) {
                    int64_t off[NL];
#pragma unroll
                    for (int k = 0; k < NL; k++) off[k] = row[k] + l * p.leaves[k].lstride;
                    a.add(p, eval1<D, NL>(p, off), IDX ? idx + l * p.index.lstride : 0);
                }
            } else {
                for (int64_t l = (int64_t)blockIdx.x * p.tpr + tcol; l < p.L; l += U * step) {
                    int64_t off[U][NL];
                    bool ok[U];
                    double v[U];
                    elem_offsets<NL, U>(p, row, l, step, p.L, off, ok);
                    eval<D, NL, U>(p, off, ok, v);
                    fold<ACC, U, IDX>(p, a, v, ok, idx, l, step);
                }
            }
        }
    }
    block_reduce(p, a);
    const unsigned nb = gridDim.x * gridDim.y;
    if (nb == 1) {
        if (threadIdx.x == 0) a.write_out(p, p.out);
        return;
    }
    if (threadIdx.x == 0) {
        a.put(p.partials + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * Acc<ACC>::W);
        __threadfence();
        last = atomicAdd(p.counter, 1u) == nb - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    Acc<ACC> b;
    b.init(p);
    for (unsigned i = threadIdx.x; i < nb; i += BLOCK) {
        Acc<ACC> c;
        c.get_cg(p.partials + (size_t)i * Acc<ACC>::W);
        b.merge(p, c);
    }
    block_reduce(p, b);
    if (threadIdx.x == 0) {
        b.write_out(p, p.out);
        *p.counter = 0u; /* ready for the next kernel on this stream */
    }
}

/* ROW: one warp per record (lanes along the reduced axis); gridDim.x splits the axis. */
template <int D, int NL, int U, int ACC>
__global__ void __launch_bounds__(BLOCK) k_row(const __grid_constant__ Plan p)
{
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t step = (int64_t)gridDim.x * 32;
    for (int64_t r = (int64_t)blockIdx.y * WARPS + warp; r < p.R;
         r += (int64_t)gridDim.y * WARPS) {
        int64_t row[NL], idx;
        row_offsets<NL, IDX>(p, r, row, idx);
        Acc<ACC> a;
        a.init(p);
        for (int64_t l = (int64_t)blockIdx.x * 32 + lane; l < p.L; l += U * step) {
            int64_t off[U][NL];
            bool ok[U];
            double v[U];
            elem_offsets<NL, U>(p, row, l, step, p.L, off, ok);
            eval<D, NL, U>(p, off, ok, v);
            fold<ACC, U, IDX>(p, a, v, ok, idx, l, step);
        }
        warp_reduce(p, a);
        if (lane == 0) {
            if (gridDim.x == 1) a.write_out(p, p.out + r * p.wout);
            else a.put(p.partials + ((int64_t)blockIdx.x * p.R + r) * Acc<ACC>::W);
        }
    }
}

/* COL: one thread per (record, split); t = split * R + record. */
template <int D, int NL, int U, int ACC>
__global__ void __launch_bounds__(BLOCK) k_col(const __grid_constant__ Plan p)
{
    constexpr bool IDX = ACC == GS__CUDA_ACC_ARG;
    const int64_t total = p.R * p.nsplit;
    for (int64_t t = (int64_t)blockIdx.x * BLOCK + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * BLOCK) {
        int64_t s = 0, r = t;
        if (p.nsplit > 1) {
            s = t / p.R;
            r = t - s * p.R;
        }
        int64_t row[NL], idx;
        row_offsets<NL, IDX>(p, r, row, idx);
        const int64_t l0 = s * p.split_len;
        const int64_t l1 = l0 + p.split_len < p.L ? l0 + p.split_len : p.L;
        Acc<ACC> a;
        a.init(p);
        for (int64_t l = l0; l < l1; l += U) {
            int64_t off[U][NL];
            bool ok[U];
            double v[U];
            elem_offsets<NL, U>(p, row, l, 1, l1, off, ok);
            eval<D, NL, U>(p, off, ok, v);
            fold<ACC, U, IDX>(p, a, v, ok, idx, l, 1);
        }
        if (p.nsplit == 1) a.write_out(p, p.out + r * p.wout);
        else a.put(p.partials + t * Acc<ACC>::W);
    }
}

/* Merge nsplit partial records per output record, in split order (nsplit 0: empty records). */
template <int ACC>
__global__ void __launch_bounds__(BLOCK) k_merge(const __grid_constant__ Plan p)
{
    for (int64_t r = (int64_t)blockIdx.x * BLOCK + threadIdx.x; r < p.R;
         r += (int64_t)gridDim.x * BLOCK) {
        Acc<ACC> a;
        a.init(p);
        for (int32_t s = 0; s < p.nsplit; s++) {
            Acc<ACC> c;
            c.get_cg(p.partials + ((int64_t)s * p.R + r) * Acc<ACC>::W);
            a.merge(p, c);
        }
        a.write_out(p, p.out + r * p.wout);
    }
}

/* Kernel table: [variant][mode][acc]; STORE has one kernel (acc 0). Variants: (stack depth,
 * leaves, elements per step) = CHAIN (1, 1, 1), PAIR (2, 2, 1), GENERIC (8, 8, 1), and for
 * programs without random leaves CHAIN_MEM (1, 1, 4), PAIR_MEM (2, 2, 4). */
#define GS__ACCS(K, D, NL, U)                                                                    \
    {(const void *)K<D, NL, U, GS__CUDA_ACC_SUM>, (const void *)K<D, NL, U, GS__CUDA_ACC_MIN>,    \
     (const void *)K<D, NL, U, GS__CUDA_ACC_VAR>, (const void *)K<D, NL, U, GS__CUDA_ACC_ARG>}
#define GS__VARIANT(D, NL, U)                                                                    \
    {{(const void *)k_store<D, NL, U>, nullptr, nullptr, nullptr},                               \
     GS__ACCS(k_full, D, NL, U), GS__ACCS(k_row, D, NL, U), GS__ACCS(k_col, D, NL, U)}

const void *const g_fused[GS__CUDA_NVARIANTS][GS__CUDA_NMODES][GS__CUDA_NACC] = {
    GS__VARIANT(1, 1, 1),
    GS__VARIANT(2, 2, 1),
    GS__VARIANT(GS_KERNEL_MAX_STACK, GS_KERNEL_MAX_LEAVES, 1),
    GS__VARIANT(1, 1, GS__CUDA_MEM_UNROLL),
    GS__VARIANT(2, 2, GS__CUDA_MEM_UNROLL),
};

const void *const g_merge[GS__CUDA_NACC] = {
    (const void *)k_merge<GS__CUDA_ACC_SUM>, (const void *)k_merge<GS__CUDA_ACC_MIN>,
    (const void *)k_merge<GS__CUDA_ACC_VAR>, (const void *)k_merge<GS__CUDA_ACC_ARG>};

gs_status_t launch(const void *fn, dim3 grid, void *stream, const Plan *p, const char *what)
{
    void *args[1] = {(void *)p};
    cudaError_t err = cudaLaunchKernel(fn, grid, dim3(BLOCK), args, 0, (cudaStream_t)stream);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, what);
    return GS_OK;
}

}  // namespace

extern "C" gs_status_t gs__cuda_fused_occupancy(gs__cuda_dev_t *dev)
{
    for (int v = 0; v < GS__CUDA_NVARIANTS; v++)
        for (int m = 0; m < GS__CUDA_NMODES; m++)
            for (int a = 0; a < GS__CUDA_NACC; a++) {
                const void *fn = g_fused[v][m][a];
                int n = 0;
                if (fn != nullptr) {
                    cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, BLOCK, 0);
                    if (err != cudaSuccess)
                        return gs__cuda_error((int)err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
                }
                dev->occ_fused[gs__cuda_fused_kid(v, m, a)] = n;
            }
    int n = 0;
    for (int a = 0; a < GS__CUDA_NACC; a++) {
        int na = 0;
        cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&na, g_merge[a], BLOCK, 0);
        if (err != cudaSuccess)
            return gs__cuda_error((int)err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
        if (a == 0 || na < n) n = na;
    }
    dev->occ_merge = n;
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_launch_fused(void *stream, const gs__cuda_fplan_t *p)
{
    gs_status_t st;
    switch (p->mode) {
    case GS__CUDA_MODE_NONE: return GS_OK;
    case GS__CUDA_MODE_MERGE_ONLY:
        if (p->merge_grid == 0) return GS_OK;
        return launch(g_merge[p->acc], dim3(p->merge_grid), stream, p,
                      "cudaLaunchKernel(fused empty-region merge)");
    default: break;
    }
    const void *fn = g_fused[p->variant][p->mode][p->mode == GS__CUDA_MODE_STORE ? 0 : p->acc];
    if ((st = launch(fn, dim3(p->grid_x, p->grid_y), stream, p, "cudaLaunchKernel(fused)")) != GS_OK)
        return st;
    if (p->merge_grid > 0)
        return launch(g_merge[p->acc], dim3(p->merge_grid), stream, p,
                      "cudaLaunchKernel(fused split merge)");
    return GS_OK;
}
