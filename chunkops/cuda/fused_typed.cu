/* The fused kernel for programs with dtypes other than float64 (graph/kernel.h, "Dtypes"):
 * STORE terminal only. One thread per output element in a grid-stride loop; each thread
 * unravels its flat index, reads its leaves (typed chunk data through gs_load_elem, random
 * and index leaves as float64), runs the program with the element rules of
 * chunkops/elem_dtype.h (shared with the CPU backend, so both give the same values) and
 * stores the result in the output dtype. Simple addressing (a division per axis and element):
 * the float64 kernels of fused_device.cuh stay the fast path. */
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/elem_dtype.h"
#include "chunkops/random.h"

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
    case GS_LEAF_UNIFORM_F32:
        return (double)gs_random_uniform_f32(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_NORMAL_F32:
        return (double)gs_random_normal_f32(lf.seed, (uint64_t)off, lf.p0, lf.p1);
    case GS_LEAF_INTEGERS:
        return gs_i_v(gs_random_integers(lf.seed, (uint64_t)off, gs_v_i(lf.p0), gs_v_i(lf.p1)));
    default: return (double)off;
    }
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
        gs_store_elem(k.out_dtype, k.out, e, stk[0]);
    }
}

}  // namespace

extern "C" gs_status_t gs__cuda_launch_typed(const gs__cuda_dev_t *dev, void *stream,
                                             const gs_kfused_t *k)
{
    int64_t size = 1;
    for (int j = 0; j < k->ndim; j++) size *= k->shape[j];
    if (size == 0) return GS_OK;
    int64_t blocks = (size + BLOCK - 1) / BLOCK;
    const int64_t cap = (int64_t)(dev->num_sms > 0 ? dev->num_sms : 1) * 16;
    if (blocks > cap) blocks = cap;
    void *args[2] = {(void *)k, (void *)&size};
    cudaError_t err = cudaLaunchKernel((const void *)k_typed_store, dim3((unsigned)blocks),
                                       dim3(BLOCK), args, 0, (cudaStream_t)stream);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaLaunchKernel(typed fused)");
    return GS_OK;
}
