/* COMBINE and COPY kernels of the CUDA backend, and the occupancy table. */
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/elem_dtype.h"
#include "chunkops/records.h"

#include <cuda_runtime.h>

namespace {

constexpr int BLOCK = GS__CUDA_BLOCK;

/* gs_redop_width() for device code (kernel.h's is host-only). */
__device__ __forceinline__ int rec_width(int op)
{
    return op == GS_RED_VAR || op == GS_RED_STD ? 3
           : op == GS_RED_MEAN || op == GS_RED_ARGMIN || op == GS_RED_ARGMAX ? 2
                                                                           : 1;
}

/* COMBINE: one thread per record; inputs merged in order with the shared record helpers, so
 * the result equals the CPU backend's bit for bit. */
__global__ void __launch_bounds__(BLOCK) k_combine(const __grid_constant__ gs_kcombine_t c)
{
    const int op = c.redop;
    const int w = rec_width(op);
    if (c.rec_dtype == GS_DTYPE_INT64) {
        /* integer records (graph/kernel.h): int64 bit patterns, wrapping */
        for (int64_t r = (int64_t)blockIdx.x * BLOCK + threadIdx.x; r < c.nrec;
             r += (int64_t)gridDim.x * BLOCK) {
            double acc = __ldg(c.inputs[0] + r);
            for (int32_t i = 1; i < c.ninputs; i++) {
                const double b = __ldg(c.inputs[i] + r);
                gs_irec_merge(op, &acc, &b);
            }
            if (c.finalize)
                gs_store_elem(c.out_dtype, c.out, r,
                              gs_cast_value(GS_DTYPE_INT64, c.out_dtype, acc));
            else
                c.out[r] = acc;
        }
        return;
    }
    for (int64_t r = (int64_t)blockIdx.x * BLOCK + threadIdx.x; r < c.nrec;
         r += (int64_t)gridDim.x * BLOCK) {
        double acc[GS_KERNEL_MAX_RECORD];
        gs_rec_init(op, acc);
        for (int32_t i = 0; i < c.ninputs; i++) {
            const double *in = c.inputs[i] + r * w;
            double b[GS_KERNEL_MAX_RECORD];
            b[0] = __ldg(in);
            b[1] = w > 1 ? __ldg(in + 1) : 0.0;
            b[2] = w > 2 ? __ldg(in + 2) : 0.0;
            gs_rec_merge(op, acc, b);
        }
        if (c.finalize && c.out_dtype != GS_DTYPE_FLOAT64) {
            /* finalized records in the result's dtype (graph/kernel.h, "Dtypes") */
            const double v = gs_rec_finalize(op, acc, c.ddof);
            gs_store_elem(c.out_dtype, c.out, r, gs_cast_value(GS_DTYPE_FLOAT64, c.out_dtype, v));
        } else if (c.finalize) {
            c.out[r] = gs_rec_finalize(op, acc, c.ddof);
        } else {
            double *o = c.out + r * w;
            o[0] = acc[0];
            if (w > 1) o[1] = acc[1];
            if (w > 2) o[2] = acc[2];
        }
    }
}

/* COPY: blockIdx.y picks the piece; blocks stride over its units (a tile of rows x
 * GS__CUDA_COPY_UNROLL column passes); loads are issued before stores. T is an unsigned type
 * of the element size (double for float64; the others move other dtypes bit for bit). */
template <class T>
__global__ void __launch_bounds__(BLOCK) k_copy(const __grid_constant__ gs__cuda_cplan_t p)
{
    const gs__cuda_cpiece_t &pc = p.pieces[blockIdx.y];
    const int trow = threadIdx.x / pc.tpr;
    const int tcol = threadIdx.x - trow * pc.tpr;
    if (trow >= pc.tile_rows) return;
    const bool small = ((uint64_t)pc.units >> 32) == 0;
    for (int64_t u = blockIdx.x; u < pc.units; u += gridDim.x) {
        int64_t rt = u, cc = 0;
        if (pc.colchunks > 1) {
            rt = small ? (int64_t)((uint32_t)u / (uint32_t)pc.colchunks) : u / pc.colchunks;
            cc = u - rt * pc.colchunks;
        }
        const int64_t r = rt * pc.tile_rows + trow;
        if (r >= pc.rows) continue;
        int64_t so = pc.src_base, d = pc.dst_base, q = r;
        for (int j = pc.nr - 1; j >= 0; j--) {
            int64_t c = q;
            if (j > 0) {
                const int64_t n = pc.rshape[j];
                const int64_t qq = q / n;
                c = q - qq * n;
                q = qq;
            }
            so += c * pc.src_rstride[j];
            d += c * pc.dst_rstride[j];
        }
        const int64_t c0 = cc * pc.tpr * GS__CUDA_COPY_UNROLL + tcol;
        const T *src = reinterpret_cast<const T *>(pc.src);
        T *out = reinterpret_cast<T *>(p.out);
        T v[GS__CUDA_COPY_UNROLL];
#pragma unroll
        for (int k = 0; k < GS__CUDA_COPY_UNROLL; k++) {
            const int64_t c = c0 + (int64_t)k * pc.tpr;
            if (c < pc.cols) v[k] = __ldg(src + so + c * pc.src_cstride);
        }
#pragma unroll
        for (int k = 0; k < GS__CUDA_COPY_UNROLL; k++) {
            const int64_t c = c0 + (int64_t)k * pc.tpr;
            if (c < pc.cols) out[d + c * pc.dst_cstride] = v[k];
        }
    }
}

}  // namespace

extern "C" gs_status_t gs__cuda_kernels_init(gs__cuda_dev_t *dev)
{
    gs_status_t st;
    cudaError_t err;
    if ((st = gs__cuda_fused_occupancy(dev)) != GS_OK) return st;
    if ((st = gs__cuda_f32pairs_init(dev)) != GS_OK) return st;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&dev->occ_combine, k_combine, BLOCK, 0);
    if (err == cudaSuccess)
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&dev->occ_copy, k_copy<double>, BLOCK, 0);
    if (err != cudaSuccess)
        return gs__cuda_error((int)err, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_launch_combine(const gs__cuda_dev_t *dev, void *stream,
                                               const gs_kcombine_t *k)
{
    if (k->nrec == 0) return GS_OK;
    int64_t T = (int64_t)(dev->num_sms > 0 ? dev->num_sms : 1) *
                (dev->occ_combine > 0 ? dev->occ_combine : 1) * 8;
    int64_t blocks = (k->nrec + BLOCK - 1) / BLOCK;
    if (blocks > T) blocks = T;
    void *args[1] = {(void *)k};
    cudaError_t err = cudaLaunchKernel((const void *)k_combine, dim3((unsigned)blocks), dim3(BLOCK),
                                       args, 0, (cudaStream_t)stream);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaLaunchKernel(combine)");
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_launch_copy(void *stream, const gs__cuda_cplan_t *p)
{
    if (p->npieces == 0 || p->grid_x == 0) return GS_OK;
    void *args[1] = {(void *)p};
    const void *fn = p->esize == 1   ? (const void *)k_copy<unsigned char>
                     : p->esize == 2 ? (const void *)k_copy<unsigned short>
                     : p->esize == 4 ? (const void *)k_copy<unsigned int>
                                     : (const void *)k_copy<double>;
    cudaError_t err = cudaLaunchKernel(fn, dim3(p->grid_x, (unsigned)p->npieces),
                                       dim3(BLOCK), args, 0, (cudaStream_t)stream);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaLaunchKernel(copy)");
    return GS_OK;
}
