/* The fused kernel for programs with dtypes other than float64 (graph/kernel.h, "Dtypes"):
 * STORE terminal, whole-region SUM (k_typed_sum), integer-record reductions (k_typed_ireduce;
 * over the whole region or along the last axis k_typed_ireduce_rows, which walks rows; other
 * typed reductions go through the staging buffer of ctx.c). One thread per output
 * element in a grid-stride loop; each thread unravels its flat index, reads its leaves (typed
 * chunk data through gs_load_elem, random and index leaves as float64), runs the program with
 * the element rules of chunkops/elem_dtype.h (shared with the CPU backend, so both give the
 * same values) and stores the result in the output dtype. Simple addressing (a division per
 * axis and element): the float64 kernels of fused_device.cuh stay the fast path.
 *
 * CHAIN programs (one leaf, then one-operand instructions: the float32 seed's
 * normal_f32 + 1, cast to float64) take k_typed_chain_store / k_typed_chain_sum instead: the
 * value stays in a register (no stack), rows are walked without a division per element, and
 * each thread takes CHAIN_G adjacent elements of a row so that a float32 random leaf computes
 * each Philox block (4 elements) once for the elements of it the thread needs, not once per
 * element; a float32 version-3 normal leaf (pairs at distance 2, chunkops/random.h) also
 * evaluates each Box-Muller pair once for the two elements of it the thread reads (unit stride:
 * two logs for four elements; stride 2: one log for two). */
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/cuda/fused_typed.cuh"
#include "chunkops/elem_dtype.h"
#include "chunkops/random.h"
#include "chunkops/records.h"

#include <cuda_runtime.h>

namespace {

constexpr int BLOCK = GS__CUDA_BLOCK;

__device__ __forceinline__ int opcode_arity(int op)
{
    switch (op) {
#define GS__OPC_AR(name, val, str, ar) case name: return ar;
        GS_OPCODE_MAP(GS__OPC_AR)
#undef GS__OPC_AR
    default: return 1;
    }
}

__device__ __forceinline__ double typed_leaf(const gs_kleaf_t &lf, int64_t off)
{
    switch (lf.kind) {
    case GS_LEAF_CHUNK: return gs_load_elem(lf.dtype, lf.data, off);
    case GS_LEAF_NORMAL: return gs_random_normal(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_UNIFORM: return gs_random_uniform(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_NORMAL_V2: return gs_random_normal_v2(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_NORMAL_V3: return gs_random_normal_v3(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_UNIFORM_F32:
        return (double)gs_random_uniform_f32(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_NORMAL_F32:
        return (double)gs_random_normal_f32(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_NORMAL_F32_V3:
        return (double)gs_random_normal_f32_v3(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_NORMAL_F32_V4:
        return (double)gs_random_normal_f32_v4(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_INTEGERS:
        return gs_i_v(gs_random_integers(lf.seed, (uint64_t)off, gs_v_i(lf.p0), gs_v_i(lf.p1)));
    default: return (double)off;
    }
}

/* The program's value at output position p (graph/kernel.h: postfix, typed rules). */
__device__ __forceinline__ double typed_eval(const gs_kfused_t &k, const int64_t (&p)[GS_MAX_NDIM])
{
    double stk[GS_KERNEL_MAX_STACK];
    int sp = 0;
    for (int pc = 0; pc < k.nprog; pc++) {
        const gs_kinstr_t *in = &k.prog[pc];
        const int ar = opcode_arity(in->op);
        if (in->op == GS_OP_LEAF) {
            const gs_kleaf_t &lf = k.leaves[in->arg];
            int64_t off = lf.base;
            for (int j = 0; j < k.ndim; j++) off += p[j] * lf.stride[j];
            stk[sp++] = typed_leaf(lf, off);
        } else if (ar == 0) {
            stk[sp++] = gs_typed_apply1(in, 0, 0.0, 0.0);
        } else if (ar == 3) {
            /* where: condition (bool) below the two values */
            stk[sp - 3] = gs_v_i(stk[sp - 3]) != 0 ? stk[sp - 2] : stk[sp - 1];
            sp -= 2;
        } else if (ar == 2) {
            stk[sp - 2] = gs_typed_apply1(in, 2, stk[sp - 2], stk[sp - 1]);
            sp--;
        } else {
            stk[sp - 1] = gs_typed_apply1(in, 1, stk[sp - 1], 0.0);
        }
    }
    return stk[0];
}

__global__ void __launch_bounds__(BLOCK) k_typed_store(const __grid_constant__ gs_kfused_t k,
                                                       int64_t size)
{
    for (int64_t e = (int64_t)blockIdx.x * BLOCK + threadIdx.x; e < size;
         e += (int64_t)gridDim.x * BLOCK) {
        int64_t p[GS_MAX_NDIM];
        int64_t rem = e;
        for (int j = k.ndim - 1; j >= 0; j--) {
            p[j] = rem % k.shape[j];
            rem /= k.shape[j];
        }
        gs_store_elem(k.out_dtype, k.out, e, typed_eval(k, p));
    }
}

/* Whole-region SUM of a typed REDUCE program (its values are float64, graph/kernel.h): block b
 * takes rows b, b + grid, ... (a row: all axes but the last), its threads the row's elements
 * j, j + BLOCK, ...; each thread sums its values in that order, the block in a fixed tree,
 * and the last block to finish (an integer ticket elects it) adds the block partials in block
 * order: the same sum on every run. */
__global__ void __launch_bounds__(BLOCK) k_typed_sum(const __grid_constant__ gs_kfused_t k,
                                                     int64_t rows, double *partials,
                                                     unsigned int *counter)
{
    const int nd = k.ndim;
    const int64_t L = k.shape[nd - 1];
    double acc = 0.0;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t p[GS_MAX_NDIM];
        int64_t rem = r;
        for (int j = nd - 2; j >= 0; j--) {
            p[j] = rem % k.shape[j];
            rem /= k.shape[j];
        }
        for (int64_t c = threadIdx.x; c < L; c += BLOCK) {
            p[nd - 1] = c;
            acc += typed_eval(k, p);
        }
    }
    block_sum_merge(acc, blockIdx.x, gridDim.x, partials, counter, k.out);
}

/* ---- CHAIN programs ---- */

constexpr int CHAIN_G = 4; /* adjacent elements of a row per thread */

/* A program of one leaf then one-operand instructions only. */
__host__ __device__ inline bool typed_is_chain(const gs_kfused_t &k)
{
    if (k.nprog < 1 || k.prog[0].op != GS_OP_LEAF) return false;
    for (int pc = 1; pc < k.nprog; pc++) {
        switch (k.prog[pc].op) {
#define GS__OPC_CH(name, val, str, ar) case name: if (ar != 1) return false; break;
            GS_OPCODE_MAP(GS__OPC_CH)
#undef GS__OPC_CH
        default: return false;
        }
    }
    return true;
}

__device__ __noinline__ double chain_leaf_other(const gs_kleaf_t &lf, int64_t off)
{
    return typed_leaf(lf, off);
}

/* The leaf's value at element offset @a off; a float32 version-1 random leaf keeps the last
 * Philox block (@a w of block index @a kc) and computes a new one only when off leaves it;
 * float32 and float64 chunk data are read inline, other leaves (a float32 version-3 normal
 * among them: chain_f32 is its fast path) by a call. */
__device__ __forceinline__ double chain_leaf(const gs_kleaf_t &lf, int64_t off, uint64_t &kc,
                                             gs_philox4_t &w)
{
    if (lf.kind == GS_LEAF_NORMAL_F32 || lf.kind == GS_LEAF_UNIFORM_F32) {
        const uint64_t kb = (uint64_t)off >> 2;
        if (kb != kc) {
            w = gs_random_block_f32(lf.seed, kb);
            kc = kb;
        }
        return lf.kind == GS_LEAF_NORMAL_F32
                   ? (double)gs_random_normal_f32_w(&w, (uint64_t)off, lf.p0, lf.p1)
                   : (double)gs_random_uniform_f32_w(&w, (uint64_t)off, lf.p0, lf.p1);
    }
    if (lf.kind == GS_LEAF_CHUNK && lf.dtype == GS_DTYPE_FLOAT32)
        return gs_f32_to_f64(((const float *)lf.data)[off]);
    if (lf.kind == GS_LEAF_CHUNK && lf.dtype == GS_DTYPE_FLOAT64) return lf.data[off];
    return chain_leaf_other(lf, off);
}

/* One instruction the inline cases of chain_rest do not take (a call: inlined, the whole
 * opcode switch would take registers from every CHAIN kernel). */
__device__ __noinline__ double chain_apply_other(const gs_kinstr_t *in, double v)
{
    return gs_typed_apply1(in, 1, v, 0.0);
}

/* The instructions after the leaf. Inline: + - * of an immediate in float32/float64 (exactly
 * gs_typed_apply1's double operation rounded to the dtype) and a float -> float64 cast (exact). */
__device__ __forceinline__ double chain_rest(const gs_kfused_t &k, double v)
{
    for (int pc = 1; pc < k.nprog; pc++) {
        const gs_kinstr_t &in = k.prog[pc];
        const bool f32 = in.dtype == GS_DTYPE_FLOAT32;
        if (f32 || in.dtype == GS_DTYPE_FLOAT64) {
            double r;
            if (in.op == GS_OP_ADD_IMM) r = v + in.imm;
            else if (in.op == GS_OP_SUB_IMM) r = v - in.imm;
            else if (in.op == GS_OP_MUL_IMM) r = v * in.imm;
            else if (in.op == GS_OP_CAST && in.arg == GS_DTYPE_FLOAT64) continue;
            else {
                v = chain_apply_other(&in, v);
                continue;
            }
            v = f32 ? (double)gs_f64_to_f32(r) : r;
        } else {
            v = chain_apply_other(&in, v);
        }
    }
    return v;
}

/* The leaf offset of row @a r's element 0 (a row: all axes but the last; the first of them
 * takes no division). */
__device__ __forceinline__ int64_t chain_row_base(const gs_kfused_t &k, const gs_kleaf_t &lf,
                                                  int64_t r)
{
    int64_t off = lf.base;
    for (int j = k.ndim - 2; j >= 1; j--) {
        off += (r % k.shape[j]) * lf.stride[j];
        r /= k.shape[j];
    }
    if (k.ndim >= 2) off += r * lf.stride[0];
    return off;
}

/* chain_walk's modes: any CHAIN program (chain_leaf, chain_rest); a float32 version-1 leaf
 * chain (chain_f32_of, fused_typed.cuh); a float32 version-3 normal leaf chain; a float32
 * version-4 normal leaf chain */
constexpr int CHAIN_ANY = 0, CHAIN_F32 = 1, CHAIN_F32_V3 = 2, CHAIN_F32_V4 = 3;

/* Adjacent elements of a row per thread in mode @a MODE: CHAIN_G, or 8 for version 4 (a group
 * of eight elements is its two blocks, so a unit of 8 evaluates each block once). */
__host__ __device__ constexpr int chain_g(int mode)
{
    return mode == CHAIN_F32_V4 ? 8 : CHAIN_G;
}

/* The chain's value at leaf offset @a off. MODE CHAIN_F32: a float32 version-1 leaf (the
 * block cached in @a kc, @a w); CHAIN_F32_V3: a float32 version-3 normal leaf (block and pairs
 * cached in @a t, gs_f32v3_walk_z: registers only, no indexed access); CHAIN_F32_V4: a float32
 * version-4 normal leaf (the group's blocks and pairs cached in @a t4, gs_f32v4_walk_z). */
template <int MODE>
__device__ __forceinline__ double chain_f32(const f32_chain &c, const gs_kleaf_t &lf,
                                            int64_t off, uint64_t &kc, gs_philox4_t &w,
                                            gs_f32v3_walk_t &t, gs_f32v4_walk_t &t4)
{
    float v;
    if constexpr (MODE == CHAIN_F32_V4) {
        v = gs_random_scale_f32(gs_f32v4_walk_z(&t4, lf.seed, (uint64_t)off), lf.p0, lf.p1);
    } else if constexpr (MODE == CHAIN_F32_V3) {
        v = gs_random_scale_f32(gs_f32v3_walk_z(&t, lf.seed, (uint64_t)off), lf.p0, lf.p1);
    } else {
        const uint64_t kb = (uint64_t)off >> 2;
        if (kb != kc) {
            w = gs_random_block_f32(lf.seed, kb);
            kc = kb;
        }
        v = lf.kind == GS_LEAF_NORMAL_F32 ? gs_random_normal_f32_w(&w, (uint64_t)off, lf.p0, lf.p1)
                                          : gs_random_uniform_f32_w(&w, (uint64_t)off, lf.p0, lf.p1);
    }
    return gs_f32_to_f64(f32_chain_apply(c, v));
}

/* The CHAIN walk: the region is rows x ngroups units of chain_g(MODE) adjacent elements of a row
 * (the last one shorter); thread t of the grid takes units t, t + threads, ... and calls
 * @a fn(flat output index, value) for each element of them, in order. One division per unit
 * (32-bit while the unit count allows). */
template <int MODE, typename F>
__device__ __forceinline__ void chain_walk(const gs_kfused_t &k, F fn)
{
    const gs_kleaf_t &lf = k.leaves[k.prog[0].arg];
    int64_t rows = 1;
    for (int j = 0; j < k.ndim - 1; j++) rows *= k.shape[j];
    const int64_t L = k.ndim > 0 ? k.shape[k.ndim - 1] : 1;
    const int64_t sl = k.ndim > 0 ? lf.stride[k.ndim - 1] : 0;
    constexpr int G = chain_g(MODE);
    const int64_t ngroups = (L + G - 1) / G;
    const int64_t units = rows * ngroups;
    const bool small = units <= (int64_t)0xffffffff;
    const int64_t step = (int64_t)gridDim.x * BLOCK;
    f32_chain c;
    if (MODE != CHAIN_ANY) (void)chain_f32_of(k, c); /* the launcher checked it holds */
    for (int64_t u = (int64_t)blockIdx.x * BLOCK + threadIdx.x; u < units; u += step) {
        const int64_t r = small ? (int64_t)((uint32_t)u / (uint32_t)ngroups) : u / ngroups;
        const int64_t c0 = (u - r * ngroups) * G;
        const int64_t rb = chain_row_base(k, lf, r) + c0 * sl;
        uint64_t kc = ~(uint64_t)0;
        gs_philox4_t w;
        gs_f32v3_walk_t t;
        gs_f32v3_walk_init(&t);
        gs_f32v4_walk_t t4;
        gs_f32v4_walk_init(&t4);
        const int n = L - c0 < G ? (int)(L - c0) : G;
#pragma unroll 1
        for (int g = 0; g < n; g++)
            fn(r * L + c0 + g,
               MODE != CHAIN_ANY ? chain_f32<MODE>(c, lf, rb + g * sl, kc, w, t, t4)
                                 : chain_rest(k, chain_leaf(lf, rb + g * sl, kc, w)));
    }
}

/* The chain_walk mode of the CHAIN program @a k (host side). */
inline int chain_mode(const gs_kfused_t &k)
{
    f32_chain c;
    if (!chain_f32_of(k, c)) return CHAIN_ANY;
    const int32_t kind = k.leaves[k.prog[0].arg].kind;
    return kind == GS_LEAF_NORMAL_F32_V3   ? CHAIN_F32_V3
           : kind == GS_LEAF_NORMAL_F32_V4 ? CHAIN_F32_V4
                                           : CHAIN_F32;
}

/* The number of CHAIN units of @a k (host side: the grid's size). */
inline int64_t chain_units(const gs_kfused_t &k)
{
    int64_t rows = 1;
    for (int j = 0; j < k.ndim - 1; j++) rows *= k.shape[j];
    const int64_t L = k.ndim > 0 ? k.shape[k.ndim - 1] : 1;
    const int G = chain_g(chain_mode(k));
    return rows * ((L + G - 1) / G);
}

template <int MODE>
__global__ void __launch_bounds__(BLOCK) k_typed_chain_store(const __grid_constant__ gs_kfused_t k)
{
    chain_walk<MODE>(k, [&](int64_t e, double v) { gs_store_elem(k.out_dtype, k.out, e, v); });
}

/* As k_typed_sum, over CHAIN programs (chain_walk's order per thread, then the same fixed
 * block tree and block-order merge: the same sum on every run of the same grid). */
template <int MODE>
__global__ void __launch_bounds__(BLOCK) k_typed_chain_sum(const __grid_constant__ gs_kfused_t k,
                                                           int64_t rows, double *partials,
                                                           unsigned int *counter)
{
    double acc = 0.0;
    chain_walk<MODE>(k, [&](int64_t, double v) { acc += v; });
    block_sum_merge(acc, blockIdx.x, gridDim.x, partials, counter, k.out);
}


/* Integer records (graph/kernel.h): the empty record of every record. */
__global__ void __launch_bounds__(BLOCK) k_irec_init(double *out, int64_t nrec, int op)
{
    for (int64_t r = (int64_t)blockIdx.x * BLOCK + threadIdx.x; r < nrec;
         r += (int64_t)gridDim.x * BLOCK)
        gs_irec_init(op, out + r);
}

/* Merge int64 value @a v into integer record @a rec with a device atomic: SUM and PROD wrap
 * modulo 2^64 (unsigned), MIN/MAX compare as int64; all commute, so the result does not
 * depend on the order the threads arrive in. */
__device__ __forceinline__ void irec_atomic(int op, double *rec, int64_t v)
{
    unsigned long long *u = reinterpret_cast<unsigned long long *>(rec);
    switch (op) {
    case GS_RED_SUM: atomicAdd(u, (unsigned long long)v); break;
    case GS_RED_MIN: atomicMin(reinterpret_cast<long long *>(rec), (long long)v); break;
    case GS_RED_MAX: atomicMax(reinterpret_cast<long long *>(rec), (long long)v); break;
    default: { /* PROD */
        unsigned long long old = *u, assumed;
        do {
            assumed = old;
            old = atomicCAS(u, assumed, assumed * (unsigned long long)v);
        } while (old != assumed);
        break;
    }
    }
}

/* The warp's 32 integer records folded by @a op into lane 0's. */
__device__ __forceinline__ int64_t irec_warp_fold(int op, int64_t v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = gs_irec_op(op, v, (int64_t)__shfl_down_sync(0xffffffffu, (long long)v, off));
    return v;
}

/* An integer-record REDUCE (SUM, PROD, MIN, MAX of int64 values): element t of the region in
 * record-major order (record r = t / L, position j = t % L along the reduced axis, or the whole
 * region as one record for red_axis -1); each thread folds its values into a running value
 * for its current record and merges it atomically when the record changes and at the end;
 * for red_axis -1 the warp folds its 32 values first. */
__global__ void __launch_bounds__(BLOCK) k_typed_ireduce(const __grid_constant__ gs_kfused_t k,
                                                         int64_t size)
{
    const int op = k.redop;
    const int nd = k.ndim, ax = k.red_axis;
    const int64_t L = ax >= 0 ? k.shape[ax] : 1;
    int64_t cur = -1, acc = gs_irec_empty(op);
    for (int64_t t = (int64_t)blockIdx.x * BLOCK + threadIdx.x; t < size;
         t += (int64_t)gridDim.x * BLOCK) {
        int64_t p[GS_MAX_NDIM];
        int64_t r = 0, rem;
        if (ax >= 0) {
            r = t / L;
            p[ax] = t % L;
            rem = r;
            for (int j = nd - 1; j >= 0; j--) {
                if (j == ax) continue;
                p[j] = rem % k.shape[j];
                rem /= k.shape[j];
            }
        } else {
            rem = t;
            for (int j = nd - 1; j >= 0; j--) {
                p[j] = rem % k.shape[j];
                rem /= k.shape[j];
            }
        }
        const int64_t v = gs_v_i(typed_eval(k, p));
        if (r != cur) {
            if (cur >= 0) irec_atomic(op, k.out + cur, acc);
            cur = r;
            acc = gs_irec_empty(op);
        }
        acc = gs_irec_op(op, acc, v);
    }
    if (ax < 0) {
        /* every thread holds a value for record 0 (the empty one if it saw nothing) */
        acc = irec_warp_fold(op, acc);
        if ((threadIdx.x & 31) == 0) irec_atomic(op, k.out, acc);
    } else if (cur >= 0) {
        irec_atomic(op, k.out + cur, acc);
    }
}

/* The integer-record REDUCE over the whole region (one record) or along the last axis (a
 * record per row), walked by rows of the last axis: a block takes rows r, r + gridDim.x, ...,
 * unravels each row once and its threads stride along it, so no element pays a division per
 * axis; ONE_LEAF (the program is a chunk leaf, then one-operand instructions: a stored integer
 * chunk summed, or cast first as count_nonzero's astype(x, bool)) reads the leaf at base + c *
 * stride and runs the instructions with chain_rest, without the interpreter's stack. Integer
 * records wrap (two's complement) and min/max/sum/prod of them do not depend on order, so the
 * result is the same bits as k_typed_ireduce's and the CPU's. */
template <bool ONE_LEAF>
__global__ void __launch_bounds__(BLOCK) k_typed_ireduce_rows(const __grid_constant__ gs_kfused_t k,
                                                              int64_t rows)
{
    __shared__ long long sh[BLOCK / 32];
    const int op = k.redop, nd = k.ndim;
    const int64_t L = k.shape[nd - 1];
    const bool per_row = k.red_axis == nd - 1;
    const gs_kleaf_t &lf = k.leaves[0];
    int64_t acc = gs_irec_empty(op);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t p[GS_MAX_NDIM];
        int64_t rem = r, base = lf.base;
        for (int j = nd - 2; j >= 0; j--) {
            p[j] = rem % k.shape[j];
            rem /= k.shape[j];
            base += p[j] * lf.stride[j];
        }
        const int64_t step = lf.stride[nd - 1];
        int64_t racc = per_row ? gs_irec_empty(op) : acc;
        for (int64_t c = threadIdx.x; c < L; c += BLOCK) {
            int64_t v;
            if constexpr (ONE_LEAF) {
                v = gs_v_i(chain_rest(k, typed_leaf(lf, base + c * step)));
            } else {
                p[nd - 1] = c;
                v = gs_v_i(typed_eval(k, p));
            }
            racc = gs_irec_op(op, racc, v);
        }
        if (!per_row) {
            acc = racc;
            continue;
        }
        racc = irec_warp_fold(op, racc);
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = (long long)racc;
        __syncthreads();
        if (threadIdx.x == 0) {
            int64_t t = gs_irec_empty(op);
            for (int w = 0; w < BLOCK / 32; w++) t = gs_irec_op(op, t, (int64_t)sh[w]);
            irec_atomic(op, k.out + r, t);
        }
        __syncthreads(); /* sh is read before the next row writes it */
    }
    if (!per_row) {
        acc = irec_warp_fold(op, acc);
        if ((threadIdx.x & 31) == 0) irec_atomic(op, k.out, acc);
    }
}

}  // namespace

extern "C" gs_status_t gs__cuda_launch_typed_ireduce(const gs__cuda_dev_t *dev, void *stream,
                                                     const gs_kfused_t *k)
{
    int64_t size = 1, nrec = 1;
    for (int j = 0; j < k->ndim; j++) {
        size *= k->shape[j];
        if (j != k->red_axis) nrec *= k->shape[j];
    }
    if (k->red_axis < 0) nrec = 1;
    const int64_t cap = (int64_t)(dev->num_sms > 0 ? dev->num_sms : 1) * 16;
    int64_t blocks = (nrec + BLOCK - 1) / BLOCK;
    if (blocks > cap) blocks = cap;
    int op = k->redop;
    double *out = k->out;
    cudaError_t err = cudaSuccess;
    if (nrec > 0) {
        void *iargs[3] = {(void *)&out, (void *)&nrec, (void *)&op};
        err = cudaLaunchKernel((const void *)k_irec_init, dim3((unsigned)blocks), dim3(BLOCK),
                               iargs, 0, (cudaStream_t)stream);
        if (err == cudaSuccess) err = cudaGetLastError();
        if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaLaunchKernel(irec init)");
    }
    if (size == 0) return GS_OK;
    const int nd = k->ndim;
    if (nd >= 1 && (k->red_axis < 0 || k->red_axis == nd - 1) && k->shape[nd - 1] >= 128) {
        /* rows of the last axis (k_typed_ireduce_rows) */
        int64_t rows = size / k->shape[nd - 1];
        blocks = rows < cap ? rows : cap;
        const bool one = typed_is_chain(*k) && k->leaves[0].kind == GS_LEAF_CHUNK;
        void *rargs[2] = {(void *)k, (void *)&rows};
        err = cudaLaunchKernel(one ? (const void *)k_typed_ireduce_rows<true>
                                   : (const void *)k_typed_ireduce_rows<false>,
                               dim3((unsigned)blocks), dim3(BLOCK), rargs, 0,
                               (cudaStream_t)stream);
        if (err == cudaSuccess) err = cudaGetLastError();
        if (err != cudaSuccess)
            return gs__cuda_error((int)err, "cudaLaunchKernel(typed int reduce, rows)");
        return GS_OK;
    }
    blocks = (size + BLOCK - 1) / BLOCK;
    if (blocks > cap) blocks = cap;
    void *args[2] = {(void *)k, (void *)&size};
    err = cudaLaunchKernel((const void *)k_typed_ireduce, dim3((unsigned)blocks), dim3(BLOCK),
                           args, 0, (cudaStream_t)stream);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaLaunchKernel(typed int reduce)");
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_launch_typed(const gs__cuda_dev_t *dev, void *stream,
                                             const gs_kfused_t *k)
{
    int64_t size = 1;
    for (int j = 0; j < k->ndim; j++) size *= k->shape[j];
    if (size == 0) return GS_OK;
    int64_t blocks = (size + BLOCK - 1) / BLOCK;
    const int64_t cap = (int64_t)(dev->num_sms > 0 ? dev->num_sms : 1) * 16;
    if (blocks > cap) blocks = cap;
    cudaError_t err;
    gs_status_t st;
    if (gs__cuda_f32pairs_fits(dev, k) &&
        gs__cuda_launch_f32pairs(dev, stream, k, NULL, 0, NULL, &st))
        return st; /* float32 v3 / v4 normals in pairs and blocks (fused_pairs_f32.cu) */
    if (typed_is_chain(*k)) {
        const int64_t units = chain_units(*k);
        int64_t cblocks = (units + BLOCK - 1) / BLOCK;
        if (cblocks > cap) cblocks = cap;
        void *cargs[1] = {(void *)k};
        const int mode = chain_mode(*k);
        const void *fn = mode == CHAIN_F32_V4 ? (const void *)k_typed_chain_store<CHAIN_F32_V4>
                         : mode == CHAIN_F32_V3 ? (const void *)k_typed_chain_store<CHAIN_F32_V3>
                         : mode == CHAIN_F32  ? (const void *)k_typed_chain_store<CHAIN_F32>
                                              : (const void *)k_typed_chain_store<CHAIN_ANY>;
        err = cudaLaunchKernel(fn, dim3((unsigned)cblocks),
                               dim3(BLOCK), cargs, 0, (cudaStream_t)stream);
    } else {
        void *args[2] = {(void *)k, (void *)&size};
        err = cudaLaunchKernel((const void *)k_typed_store, dim3((unsigned)blocks), dim3(BLOCK),
                               args, 0, (cudaStream_t)stream);
    }
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaLaunchKernel(typed fused)");
    return GS_OK;
}

extern "C" int gs__cuda_launch_typed_sum(const gs__cuda_dev_t *dev, void *stream,
                                         const gs_kfused_t *k, double *partials,
                                         size_t npartials, unsigned int *counter,
                                         gs_status_t *st_p)
{
    if (k->terminal != GS_TERM_REDUCE || k->redop != GS_RED_SUM || k->red_axis != -1 ||
        k->ndim < 1 || k->out_dtype != GS_DTYPE_FLOAT64)
        return 0;
    int64_t rows = 1;
    for (int j = 0; j < k->ndim - 1; j++) rows *= k->shape[j];
    if (rows == 0 || k->shape[k->ndim - 1] == 0) return 0;
    if (gs__cuda_f32pairs_fits(dev, k) &&
        gs__cuda_launch_f32pairs(dev, stream, k, partials, npartials, counter, st_p))
        return 1; /* float32 v3 / v4 normals in pairs and blocks (fused_pairs_f32.cu) */
    const bool chain = typed_is_chain(*k);
    int64_t blocks = chain ? (chain_units(*k) + BLOCK - 1) / BLOCK : rows;
    const int64_t cap = (int64_t)(dev->num_sms > 0 ? dev->num_sms : 1) * 16;
    if (blocks > cap) blocks = cap;
    if ((size_t)blocks > npartials) return 0;
    void *args[4] = {(void *)k, (void *)&rows, (void *)&partials, (void *)&counter};
    const int mode = chain ? chain_mode(*k) : CHAIN_ANY;
    const void *fn = !chain                ? (const void *)k_typed_sum
                     : mode == CHAIN_F32_V4 ? (const void *)k_typed_chain_sum<CHAIN_F32_V4>
                     : mode == CHAIN_F32_V3 ? (const void *)k_typed_chain_sum<CHAIN_F32_V3>
                     : mode == CHAIN_F32    ? (const void *)k_typed_chain_sum<CHAIN_F32>
                                            : (const void *)k_typed_chain_sum<CHAIN_ANY>;
    cudaError_t err = cudaLaunchKernel(fn, dim3((unsigned)blocks), dim3(BLOCK), args, 0,
                                       (cudaStream_t)stream);
    if (err == cudaSuccess) err = cudaGetLastError();
    *st_p = err != cudaSuccess ? gs__cuda_error((int)err, "cudaLaunchKernel(typed sum)") : GS_OK;
    return 1;
}
