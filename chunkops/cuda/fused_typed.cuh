/* Device code shared by the typed fused kernels (fused_typed.cu, fused_pairs_f32.cu): the
 * float32 CHAIN programs (chain_f32_of, f32_chain_apply) and the deterministic end of a
 * whole-region sum (block_sum_merge). Included inside each file's anonymous namespace users
 * see their own copy; compiled with --fmad=false as every kernel of chunkops/cuda. */
#ifndef GS_CHUNKOPS_CUDA_FUSED_TYPED_CUH
#define GS_CHUNKOPS_CUDA_FUSED_TYPED_CUH

#include "chunkops/cuda/cuda_internal.h"

#include <cuda_runtime.h>
#include <math.h>

namespace {

/* CHAIN programs that float32 arithmetic gives exactly: a float32 random leaf, then at most
 * F32_OPS of + - * by immediates that are finite binary32 values, in float32, then at most a
 * cast to float64. For binary32 v and m, fl32(double(v) op m) = fl32(v op m) (double rounding
 * is innocuous for + - * as 53 >= 2 * 24 + 2), and a NaN is made canonical on the way out as
 * gs_round_float does, so the value stays a float: one float -> double conversion per element
 * instead of three. */
constexpr int F32_OPS = 3;
struct f32_chain {
    int n;
    int op[F32_OPS];
    float imm[F32_OPS];
};

__host__ __device__ inline bool chain_f32_of(const gs_kfused_t &k, f32_chain &c)
{
    const gs_kleaf_t &lf = k.leaves[k.prog[0].arg];
    c.n = 0;
    if (lf.kind != GS_LEAF_NORMAL_F32 && lf.kind != GS_LEAF_UNIFORM_F32 &&
        lf.kind != GS_LEAF_NORMAL_F32_V3 && lf.kind != GS_LEAF_NORMAL_F32_V4)
        return false;
    for (int pc = 1; pc < k.nprog; pc++) {
        const gs_kinstr_t &in = k.prog[pc];
        if (in.op == GS_OP_CAST) {
            if (pc != k.nprog - 1 || in.dtype != GS_DTYPE_FLOAT32 || in.arg != GS_DTYPE_FLOAT64)
                return false;
            continue;
        }
        if (in.dtype != GS_DTYPE_FLOAT32 || c.n == F32_OPS || !isfinite(in.imm) ||
            (double)(float)in.imm != in.imm ||
            (in.op != GS_OP_ADD_IMM && in.op != GS_OP_SUB_IMM && in.op != GS_OP_MUL_IMM))
            return false;
        c.op[c.n] = in.op;
        c.imm[c.n] = (float)in.imm;
        c.n++;
    }
    return true;
}

/* The float32 instructions of chain @a c applied to the leaf value @a v (binary32, in order). */
__device__ __forceinline__ float f32_chain_apply(const f32_chain &c, float v)
{
#pragma unroll
    for (int j = 0; j < F32_OPS; j++) {
        if (j >= c.n) break;
        v = c.op[j] == GS_OP_ADD_IMM ? v + c.imm[j] : c.op[j] == GS_OP_SUB_IMM ? v - c.imm[j]
                                                                               : v * c.imm[j];
    }
    return v;
}

/* The end of a whole-region sum: the block (number @a bid of @a nblocks, GS__CUDA_BLOCK
 * threads) adds its threads' values in a fixed tree, and the last block to finish (an integer
 * ticket elects it) adds the block partials in block order into out[0]: the same sum on every
 * run of the same grid. Every thread of the block calls it. */
__device__ __forceinline__ void block_sum_merge(double acc, unsigned bid, unsigned nblocks,
                                                double *partials, unsigned int *counter,
                                                double *out)
{
    __shared__ double sh[GS__CUDA_BLOCK];
    __shared__ int last;
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = GS__CUDA_BLOCK / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partials[bid] = sh[0];
        __threadfence();
        last = atomicAdd(counter, 1u) == nblocks - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x != 0) return;
    __threadfence();
    double s = 0.0;
    for (unsigned b = 0; b < nblocks; b++) s += __ldcg(partials + b);
    out[0] = s;
    *counter = 0u; /* ready for the next kernel on this stream */
}

}  // namespace

#endif
