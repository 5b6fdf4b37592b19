/* Fused chunk kernels, their shared device code (chunkops/cuda internal; included by the
 * kernel files fused_flat.cu and fused_tiled.cu, so that every helper inlines into its kernels): generation -> elementwise program -> strided addressing -> STORE or
 * per-chunk reduction, one kernel per chunk task, generating only the elements the region
 * needs and keeping every intermediate in registers.
 *
 * The postfix program is interpreted per element by a warp-uniform loop (every thread runs
 * the same instruction, so the switch never diverges). The value stack lives in registers: it
 * is kept top-first in a fixed-size array indexed only by compile-time constants, and pushes
 * and pops shift it (D registers). Template instances cover the programs: CHAIN (one random
 * leaf then unary ops, e.g. normal + 1), PAIR (depth 2, two leaves), GENERIC (depth 8, 8
 * leaves), and the memory-bound CHAIN_MEM and PAIR_MEM (no random leaf, no costly op; several
 * elements in flight per thread). CHAIN kernels run their loops once per leaf kind and tail
 * form (with_chain): the leaf is inlined and a tail of x * m + a is two operations.
 *
 * Addressing: STORE and FULL over regions of at most two collapsed dims (nearly every chunk
 * task) take the flat walk: each thread strides over the flat element index by the grid's
 * thread count and advances its offsets by additions (no division or 64-bit multiply per
 * element); the memory-bound variants walk adjacent pairs with 16-byte loads and stores where
 * aligned. Other regions go over row tiles; axis reductions give a warp (ROW) or a thread
 * (COL) per output record.
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
#ifndef GS_CHUNKOPS_CUDA_FUSED_DEVICE_CUH
#define GS_CHUNKOPS_CUDA_FUSED_DEVICE_CUH

#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/elemwise.h"
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

/* The costly program ops (divisions, square roots, exp, log, pow: the libm functions and the
 * correctly rounded slow paths of / and sqrt) are one real call from the interpreter: inlined
 * into its switch they raise the register count of every kernel (exp alone took the CHAIN
 * reduction from 46 to 77 registers), while the random leaves keep their own inlined
 * log/sqrt/cos. A kernel allocates the registers of everything it calls, so the memory-bound
 * variants (SLOW = false) run only programs without these ops (the planner sends the others
 * to the one-element variants): 34 registers instead of 58 for a chunk reduction. */
__device__ __noinline__ double op_unary_slow(int op, double x, double imm)
{
    switch (op) {
    case GS_OP_EXP: return exp(x);
    case GS_OP_LOG: return log(x);
    case GS_OP_SQRT: return sqrt(x);
    case GS_OP_DIV_IMM: return x / imm;
    case GS_OP_POW_IMM: return pow(x, imm);
    case GS_OP_RDIV_IMM: return imm / x;
    default: return pow(imm, x); /* GS_OP_RPOW_IMM */
    }
}

__device__ __noinline__ double op_binary_slow(int op, double a, double b)
{
    return op == GS_OP_DIV ? a / b : pow(a, b); /* GS_OP_DIV, GS_OP_POW */
}

/* The extended ops (chunkops/elemwise.h), called only from the EXT variant's kernels (EXT
 * below): the others never reference them, so these functions' registers and stack frames
 * do not weigh on the others. */
__device__ __noinline__ double op_unary_ext(int op, double x, double imm)
{
    return gs_elem_unary(op, x, imm);
}

__device__ __noinline__ double op_binary_ext(int op, double a, double b)
{
    return gs_elem_binary(op, a, b);
}

/* Unary and binary ops, NumPy semantics. SLOW: the costly ops are possible (else they give
 * NaN: the planner never sends them). EXT: the extended ops too (the EXT variant). */
template <bool SLOW, bool EXT = false>
__device__ __forceinline__ double apply_unary1(int op, double x, double imm)
{
    if constexpr (EXT) {
        if (op >= GS_OP_EXTENDED) return op_unary_ext(op, x, imm);
    }
    switch (op) {
    case GS_OP_NEG: return gs_neg_f64(x);
    case GS_OP_ABS: return fabs(x);
    case GS_OP_ADD_IMM: return x + imm;
    case GS_OP_SUB_IMM: return x - imm;
    case GS_OP_MUL_IMM: return x * imm;
    case GS_OP_RSUB_IMM: return imm - x;
    case GS_OP_LT_IMM: return x < imm ? 1.0 : 0.0;
    case GS_OP_LE_IMM: return x <= imm ? 1.0 : 0.0;
    case GS_OP_GT_IMM: return x > imm ? 1.0 : 0.0;
    case GS_OP_GE_IMM: return x >= imm ? 1.0 : 0.0;
    case GS_OP_EQ_IMM: return x == imm ? 1.0 : 0.0;
    case GS_OP_NE_IMM: return x != imm ? 1.0 : 0.0;
    case GS_OP_MIN_IMM: return op_minimum(x, imm);
    case GS_OP_MAX_IMM: return op_maximum(x, imm);
    default: /* exp log sqrt div_imm pow_imm rdiv_imm rpow_imm */
        if constexpr (SLOW) return op_unary_slow(op, x, imm);
        else return __longlong_as_double(0x7ff8000000000000ll);
    }
}

template <bool SLOW, bool EXT = false>
__device__ __forceinline__ double apply_binary1(int op, double a, double b)
{
    if constexpr (EXT) {
        if (op >= GS_OP_EXTENDED) return op_binary_ext(op, a, b);
    }
    switch (op) {
    case GS_OP_ADD: return a + b;
    case GS_OP_SUB: return a - b;
    case GS_OP_MUL: return a * b;
    case GS_OP_LT: return a < b ? 1.0 : 0.0;
    case GS_OP_LE: return a <= b ? 1.0 : 0.0;
    case GS_OP_GT: return a > b ? 1.0 : 0.0;
    case GS_OP_GE: return a >= b ? 1.0 : 0.0;
    case GS_OP_EQ: return a == b ? 1.0 : 0.0;
    case GS_OP_NE: return a != b ? 1.0 : 0.0;
    case GS_OP_MIN: return op_minimum(a, b);
    case GS_OP_MAX: return op_maximum(a, b);
    default: /* div pow */
        if constexpr (SLOW) return op_binary_slow(op, a, b);
        else return __longlong_as_double(0x7ff8000000000000ll);
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

__device__ __forceinline__ void philox_dev(const gs__cuda_leaf_t &lf, uint64_t i, uint32_t (&c)[4],
                                           uint32_t c2 = 0u)
{
    c[0] = (uint32_t)i;
    c[1] = (uint32_t)(i >> 32);
    c[2] = c2;
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

/* Version 2 (random.h gs_random_normal_v2): the block of pair i >> 1 (counter word c2 =
 * GS_RANDOM_V2_TAG), then random.h's libm-free gs__normal_half_words for the half i is, so the
 * bits are the CPU's. One element computes only the half it needs. */
__device__ __forceinline__ double random_normal_v2_dev(const gs__cuda_leaf_t &lf, uint64_t i)
{
    gs_philox4_t w;
    philox_dev(lf, i >> 1, w.v, GS_RANDOM_V2_TAG);
    return lf.p0 + lf.p1 * gs__normal_half_words(&w, (unsigned)(i & 1u));
}

/* Version 3 (random.h gs_random_normal_v3): the block of pair gs_random_v3_pair(i) (counter word
 * c2 = GS_RANDOM_V3_TAG), then version 2's arithmetic for the half i is: the CPU's bits. */
__device__ __forceinline__ double random_normal_v3_dev(const gs__cuda_leaf_t &lf, uint64_t i)
{
    gs_philox4_t w;
    philox_dev(lf, gs_random_v3_pair(i), w.v, GS_RANDOM_V3_TAG);
    return lf.p0 + lf.p1 * gs__normal_half_words(&w, gs_random_v3_half(i));
}

__device__ __forceinline__ double random_uniform_dev(const gs__cuda_leaf_t &lf, uint64_t i)
{
    uint32_t r[4];
    philox_dev(lf, i, r);
    const uint64_t a = (((uint64_t)r[1] << 32) | r[0]) >> 11;
    return lf.p0 + (lf.p1 - lf.p0) * ((double)a * GS_TWO_POW_M53); /* low + (high-low) * u */
}

/* Values of a chunk or index leaf at U offsets (the memory-bound variants carry no random
 * leaves). Elements with ok[u] false are not read (their offsets may be out of bounds).
 * V == 2 with pair: elements (2j, 2j + 1) are adjacent and 16-byte aligned in the leaf's data
 * (the flat plan's fload2), and ok[2j + 1] implies ok[2j]: one 16-byte load per whole pair. */
template <int U, int V = 1>
__device__ __forceinline__ void leaf_values(const gs__cuda_leaf_t &lf, const int64_t (&o)[U],
                                            const bool (&ok)[U], double (&v)[U], bool pair)
{
    if (lf.kind != GS_LEAF_CHUNK) { /* GS_LEAF_INDEX */
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = (double)o[u];
        return;
    }
    if constexpr (V == 2 && U % 2 == 0) {
        if (pair) {
#pragma unroll
            for (int u = 0; u < U; u += 2) {
                if (ok[u + 1]) {
                    const double2 d = __ldg(reinterpret_cast<const double2 *>(lf.data + o[u]));
                    v[u] = d.x;
                    v[u + 1] = d.y;
                } else {
                    v[u] = ok[u] ? __ldg(lf.data + o[u]) : 0.0;
                    v[u + 1] = 0.0;
                }
            }
            return;
        }
    }
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = ok[u] ? __ldg(lf.data + o[u]) : 0.0;
}

/* One element of any leaf. */
__device__ __forceinline__ double leaf_value(const gs__cuda_leaf_t &lf, int64_t off)
{
    switch (lf.kind) {
    case GS_LEAF_CHUNK: return __ldg(lf.data + off);
    case GS_LEAF_NORMAL: return random_normal_dev(lf, (uint64_t)off);
    case GS_LEAF_UNIFORM: return random_uniform_dev(lf, (uint64_t)off);
    case GS_LEAF_NORMAL_V2: return random_normal_v2_dev(lf, (uint64_t)off);
    case GS_LEAF_NORMAL_V3: return random_normal_v3_dev(lf, (uint64_t)off);
    default: return (double)off; /* GS_LEAF_INDEX */
    }
}

/* CHAIN specialisations. The CHAIN variant (one random leaf, pushed by prog[0], then unary
 * ops) runs its loops once per (leaf kind, tail form) pair (with_chain below), so the leaf
 * needs no switch per element, and a tail of at most x * m then + a (the plan's tail_ma: no
 * tail, x + c, x - c, x * c, x * c + d) is two operations and no interpretation. Other tails
 * are interpreted. */
constexpr int CHAIN_NONE = -1; /* not the CHAIN variant: interpret the whole program */
constexpr int TAIL_MA = 0, TAIL_ANY = 1;
__host__ __device__ constexpr int chain_code(int kind, int tail)
{
    return kind * 2 + tail;
}
template <int C> struct ChainC {
    static constexpr int value = C;
};

template <int KIND>
__device__ __forceinline__ double leaf_value_k(const gs__cuda_leaf_t &lf, int64_t off)
{
    if constexpr (KIND == GS_LEAF_NORMAL) return random_normal_dev(lf, (uint64_t)off);
    else return random_uniform_dev(lf, (uint64_t)off); /* GS_LEAF_UNIFORM */
}

/* A unary op with the usual tail ops (x + c, x * c, x - c) tested first: compares and one
 * branch instead of the jump table of apply_unary1. */
__device__ __forceinline__ double apply_unary_chain(int op, double x, double imm)
{
    if (op == GS_OP_ADD_IMM) return x + imm;
    if (op == GS_OP_MUL_IMM) return x * imm;
    if (op == GS_OP_SUB_IMM) return x - imm;
    return apply_unary1<true>(op, x, imm);
}

/* Run f(ChainC<C>) with C the CHAIN variant's chain_code, or CHAIN_NONE for the others.
 * KIND >= 0: a kernel compiled for one CHAIN leaf kind (the flat ones: each kind gets its own
 * register allocation). CHAIN_MEM (several elements per step) has one form besides
 * CHAIN_NONE: a leaf then the tail_ma tail, chain_code(GS_LEAF_CHUNK, TAIL_MA) (the leaf chunk
 * or index). */
constexpr int KIND_ANY = -1;
template <int D, int NL, int U, int KIND = KIND_ANY, class F>
__device__ __forceinline__ void with_chain(const Plan &p, F &&f)
{
    if constexpr (D == 1 && NL == 1 && U == 1 && KIND != KIND_ANY) {
        if (p.tail_ma) f(ChainC<chain_code(KIND, TAIL_MA)>{});
        else f(ChainC<chain_code(KIND, TAIL_ANY)>{});
    } else if constexpr (D == 1 && NL == 1 && U == 1) {
        if (p.leaves[0].kind == GS_LEAF_NORMAL) {
            if (p.tail_ma) f(ChainC<chain_code(GS_LEAF_NORMAL, TAIL_MA)>{});
            else f(ChainC<chain_code(GS_LEAF_NORMAL, TAIL_ANY)>{});
        } else {
            if (p.tail_ma) f(ChainC<chain_code(GS_LEAF_UNIFORM, TAIL_MA)>{});
            else f(ChainC<chain_code(GS_LEAF_UNIFORM, TAIL_ANY)>{});
        }
    } else if constexpr (D == 1 && NL == 1) {
        if (p.tail_ma) f(ChainC<chain_code(GS_LEAF_CHUNK, TAIL_MA)>{});
        else f(ChainC<CHAIN_NONE>{});
    } else {
        f(ChainC<CHAIN_NONE>{});
    }
}

/* The program on one element; leaf(a) gives the value of leaf a. The value stack lives in
 * registers: s[0] is the top, pushes and pops shift the D levels (indices are compile-time).
 * D above GS_KERNEL_MAX_STACK (GS__CUDA_D_EXT) is the EXT variant: the extended ops too. */
template <int D, bool SLOW, class LeafF>
__device__ __forceinline__ double eval1_run(const Plan &p, LeafF &&leaf)
{
    constexpr bool EXT = D > GS_KERNEL_MAX_STACK;
    double s[D];
#pragma unroll
    for (int k = 0; k < D; k++) s[k] = 0.0;
    const int n = p.nprog;
    for (int i = 0; i < n; i++) {
        const int op = p.prog[i].op;
        const double imm = p.prog[i].imm;
        if (op == GS_OP_LEAF || op == GS_OP_CONST) {
            const double v = op == GS_OP_LEAF ? leaf(p.prog[i].arg) : imm;
#pragma unroll
            for (int k = D - 1; k > 0; k--) s[k] = s[k - 1];
            s[0] = v;
        } else if ((op >= GS_OP_ADD && op <= GS_OP_MAX) ||
                   (EXT && op >= GS_OP_MOD && op <= GS_OP_LXOR)) {
            if constexpr (D >= 2) {
                s[0] = apply_binary1<SLOW, EXT>(op, s[1], s[0]);
#pragma unroll
                for (int k = 1; k < D - 1; k++) s[k] = s[k + 1];
            }
        } else {
            s[0] = apply_unary1<SLOW, EXT>(op, s[0], imm);
        }
    }
    return s[0];
}

template <int D, int NL>
__device__ __forceinline__ double eval1_prog(const Plan &p, const int64_t (&off)[NL])
{
    return eval1_run<D, true>(p, [&](int a) {
        if (NL == 1) return leaf_value(p.leaves[0], off[0]);
        int64_t o = off[0];
#pragma unroll
        for (int k = 1; k < NL; k++)
            if (a == k) o = off[k];
        return leaf_value(p.leaves[a], o);
    });
}

/* One element: the program at leaf offsets off (C: see with_chain). */
template <int D, int NL, int C = CHAIN_NONE>
__device__ __forceinline__ double eval1(const Plan &p, const int64_t (&off)[NL])
{
    if constexpr (C != CHAIN_NONE) {
        double x = leaf_value_k<C / 2>(p.leaves[0], off[0]);
        if constexpr (C % 2 == TAIL_MA) {
            x = x * p.tail_m + p.tail_a; /* two roundings (--fmad=false), as the ops they stand for */
        } else {
            const int n = p.nprog;
#pragma unroll 1
            for (int i = 1; i < n; i++) x = apply_unary_chain(p.prog[i].op, x, p.prog[i].imm);
        }
        return x;
    } else {
        return eval1_prog<D, NL>(p, off);
    }
}

/* Evaluate the program on U elements at leaf offsets off[u][0..NL) (ok[u]: the element
 * exists). U > 1 (memory-bound variants: no random leaves, no costly ops): every leaf's U
 * values are loaded
 * first, so all loads are in flight together (V == 2: in aligned pairs where the plan says
 * so), then the program runs on one element after the other, so only the loaded values wait
 * in registers. */
template <int D, int NL, int U, int C = CHAIN_NONE, int V = 1>
__device__ __forceinline__ void eval(const Plan &p, const int64_t (&off)[U][NL],
                                     const bool (&ok)[U], double (&res)[U])
{
    if constexpr (U == 1) {
        res[0] = eval1<D, NL, C>(p, off[0]);
    } else if constexpr (C != CHAIN_NONE) { /* CHAIN_MEM: the leaf, then x * m + a */
        int64_t o[U];
#pragma unroll
        for (int u = 0; u < U; u++) o[u] = off[u][0];
        leaf_values<U, V>(p.leaves[0], o, ok, res, V == 2 && (p.fload2 & 1u));
#pragma unroll
        for (int u = 0; u < U; u++) res[u] = res[u] * p.tail_m + p.tail_a;
    } else {
        double lv[NL][U];
#pragma unroll
        for (int k = 0; k < NL; k++) {
            if (k < p.nleaves) {
                int64_t o[U];
#pragma unroll
                for (int u = 0; u < U; u++) o[u] = off[u][k];
                leaf_values<U, V>(p.leaves[k], o, ok, lv[k], V == 2 && ((p.fload2 >> k) & 1u));
            } else {
#pragma unroll
                for (int u = 0; u < U; u++) lv[k][u] = 0.0;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            res[u] = eval1_run<D, false>(p, [&](int a) {
                double x = lv[0][u];
#pragma unroll
                for (int k = 1; k < NL; k++)
                    if (a == k) x = lv[k][u];
                return x;
            });
    }
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

/* MIN, MAX and PROD (one double, merged by the same operation as elements are added) */
template <> struct Acc<GS__CUDA_ACC_MIN> {
    static constexpr int W = 1;
    double m;
    __device__ __forceinline__ void init(const Plan &p)
    {
        m = p.is_prod ? 1.0 : p.is_max ? -INFINITY : INFINITY;
    }
    __device__ __forceinline__ void add(const Plan &p, double v, int64_t)
    {
        m = p.is_prod ? m * v : p.is_max ? gs_rec_max(m, v) : gs_rec_min(m, v);
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

/* Offsets of the U elements l + u * step of a row; ok[u] = that element exists (< lend). One
 * element per step (the random variants) walks them by additions: o holds the offsets of
 * element l and advances by ds (row_walk); several (the memory-bound variants, short of
 * registers) compute them from the row's offsets. */
template <int NL, int U>
__device__ __forceinline__ void elem_offsets(const Plan &p, const int64_t (&row)[NL],
                                             int64_t (&o)[NL], const int64_t (&ds)[NL], int64_t l,
                                             int64_t step, int64_t lend, int64_t (&off)[U][NL],
                                             bool (&ok)[U])
{
    if constexpr (U == 1) {
        ok[0] = l < lend;
#pragma unroll
        for (int k = 0; k < NL; k++) {
            off[0][k] = o[k];
            o[k] += ds[k];
        }
    } else {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t lu = l + u * step;
            ok[u] = lu < lend;
#pragma unroll
            for (int k = 0; k < NL; k++) off[u][k] = row[k] + lu * p.leaves[k].lstride;
        }
    }
}

/* o = row + l * lstride and ds = step * lstride for every leaf (unused when U > 1). */
template <int NL>
__device__ __forceinline__ void row_walk(const Plan &p, const int64_t (&row)[NL], int64_t l,
                                         int64_t step, int64_t (&o)[NL], int64_t (&ds)[NL])
{
#pragma unroll
    for (int k = 0; k < NL; k++) {
        o[k] = row[k] + l * p.leaves[k].lstride;
        ds[k] = step * p.leaves[k].lstride;
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

/* The end of a FULL kernel: the block's record, then the per-block partials merged by the last
 * block to finish (an integer ticket elects it; its merge order is fixed), G partials per
 * thread and pass with their loads from L2 in flight together (merge_group: one for the wide
 * records and GENERIC, where more would raise the kernels' register counts). */
__host__ __device__ constexpr int merge_group(int D, int ACC)
{
    return D >= GS_KERNEL_MAX_STACK || ACC == GS__CUDA_ACC_VAR ? 1
           : ACC == GS__CUDA_ACC_ARG                         ? 2
                                                             : 4;
}

template <int ACC, int G>
__device__ __forceinline__ void full_finish(const Plan &p, Acc<ACC> &a)
{
    __shared__ int last;
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
    if constexpr (G == 1) {
#pragma unroll 4
        for (unsigned i = threadIdx.x; i < nb; i += BLOCK) {
            Acc<ACC> c;
            c.get_cg(p.partials + (size_t)i * Acc<ACC>::W);
            b.merge(p, c);
        }
    } else {
        for (unsigned i0 = threadIdx.x; i0 < nb; i0 += G * BLOCK) {
            Acc<ACC> c[G];
#pragma unroll
            for (int j = 0; j < G; j++)
                if (i0 + j * BLOCK < nb)
                    c[j].get_cg(p.partials + (size_t)(i0 + j * BLOCK) * Acc<ACC>::W);
#pragma unroll
            for (int j = 0; j < G; j++)
                if (i0 + j * BLOCK < nb) b.merge(p, c[j]); /* in index order, as one by one */
        }
    }
    block_reduce(p, b);
    if (threadIdx.x == 0) {
        b.write_out(p, p.out);
        *p.counter = 0u; /* ready for the next kernel on this stream */
    }
}

/* ---- the flat walk (plan.flat; see gs__cuda_fplan_t). Thread t's slots are t, t + T, ...;
 * the walk keeps the wrapped loop index wl and the offsets of the current slot and advances
 * them by additions only (no division or multiplication per element). ---- */

/* Start at flat element e0: wl and the offsets (and arg index) of that element. */
template <int NL, bool IDX>
__device__ __forceinline__ void flat_start(const Plan &p, uint32_t e0, uint32_t &wl,
                                           int64_t (&off)[NL], int64_t &idx)
{
    const uint32_t wr = e0 / p.lw;
    wl = e0 - wr * p.lw;
#pragma unroll
    for (int k = 0; k < NL; k++)
        off[k] = p.leaves[k].base + (int64_t)wr * p.leaves[k].frs +
                 (int64_t)wl * p.leaves[k].lstride;
    idx = IDX ? p.index.base + (int64_t)wr * p.index.frs + (int64_t)wl * p.index.lstride : 0;
}

/* One step: fvec * T elements further. */
template <int NL, bool IDX>
__device__ __forceinline__ void flat_advance(const Plan &p, uint32_t &wl, int64_t (&off)[NL],
                                             int64_t &idx)
{
    wl += p.fdl;
    const bool w = wl >= p.lw;
    if (w) wl -= p.lw;
#pragma unroll
    for (int k = 0; k < NL; k++) off[k] += p.leaves[k].fstep + (w ? p.leaves[k].fwrap : 0);
    if (IDX) idx += p.index.fstep + (w ? p.index.fwrap : 0);
}

/* The elements of the next U slots (element j = u * V + v) and the walk advanced past them.
 * Slot u exists when u < m (the thread's slots left); its second element too unless it is
 * the thread's half slot (half: the thread owns the odd last slot, which is its last). */
template <int NL, bool IDX, int U, int V>
__device__ __forceinline__ void flat_gather(const Plan &p, uint32_t m, bool half, uint32_t &wl,
                                            int64_t (&off)[NL], int64_t &idx,
                                            int64_t (&o)[U * V][NL], int64_t (&ix)[U * V],
                                            bool (&ok)[U * V])
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const bool has = (uint32_t)u < m;
        const int j = u * V;
#pragma unroll
        for (int k = 0; k < NL; k++) o[j][k] = off[k];
        ix[j] = idx;
        ok[j] = has;
        if constexpr (V == 2) {
            const bool w = wl + 1 == p.lw; /* the pair straddles a row end */
#pragma unroll
            for (int k = 0; k < NL; k++)
                o[j + 1][k] = off[k] + p.leaves[k].lstride + (w ? p.leaves[k].fwrap : 0);
            ix[j + 1] = IDX ? idx + p.index.lstride + (w ? p.index.fwrap : 0) : 0;
            ok[j + 1] = has && !(half && (uint32_t)u + 1 == m);
        }
        flat_advance<NL, IDX>(p, wl, off, idx);
    }
}

/* Resident blocks per SM a kernel is compiled for (__launch_bounds__). The one-element
 * variants (random leaves: issue-bound) with STORE or a one-double accumulator: 6 blocks of 8
 * warps (at most 40 registers) for CHAIN flat over a normal leaf (the seed path), else 5 (48)
 * flat or along an axis (the uniform-leaf CHAIN spilled at 40: its loop keeps the round keys
 * in registers); GENERIC: whatever ptxas allocates (a cap spills); the rest 4 (at most 64
 * registers: without a minimum ptxas chose 48 for some and spilled). */
enum { KFLAT, KTILE, KAXIS };
constexpr int min_blocks(int D, int UV, int ACC, int kind, int leaf = KIND_ANY)
{
    return D >= GS_KERNEL_MAX_STACK ? 1
           : UV == 1 && kind != KTILE && (ACC == GS__CUDA_ACC_SUM || ACC == GS__CUDA_ACC_MIN)
               ? (kind == KFLAT && leaf == GS_LEAF_NORMAL ? 6 : 5)
               : 4;
}

}  // namespace

#endif
