/* The CUDA STENCIL kernel and its launcher (stencil.h). */
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/cuda/stencil.h"
#include "common/error.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int BLOCK = GS__CUDA_BLOCK;
constexpr int OUTS = GS__CUDA_STENCIL_OUTS;

__device__ __forceinline__ bool in_box(const gs__cuda_spiece_t &pc, int64_t z, int64_t y,
                                       int64_t x)
{
    return z >= pc.lo[0] && z < pc.hi[0] && y >= pc.lo[1] && y < pc.hi[1] && x >= pc.lo[2] &&
           x < pc.hi[2];
}

__device__ __forceinline__ double at(const gs__cuda_spiece_t &pc, int64_t z, int64_t y, int64_t x)
{
    return __ldg(pc.src + pc.base + (z - pc.lo[0]) * pc.stride[0] + (y - pc.lo[1]) * pc.stride[1] +
                 (x - pc.lo[2]) * pc.stride[2]);
}

/* Element (z, y, x) of the padded block: its piece's, else the constant. */
__device__ double padded(const gs__cuda_splan_t &p, int64_t z, int64_t y, int64_t x)
{
    if (p.home >= 0 && in_box(p.pieces[p.home], z, y, x)) return at(p.pieces[p.home], z, y, x);
    for (int i = 0; i < p.npieces; i++)
        if (in_box(p.pieces[i], z, y, x)) return at(p.pieces[i], z, y, x);
    return p.cval;
}

__global__ void __launch_bounds__(BLOCK) k_stencil(const __grid_constant__ gs__cuda_splan_t p)
{
    extern __shared__ double tile[];
    const int tw = p.tw, th = p.th;
    const int rz = p.r[0], ry = p.r[1], rx = p.r[2];
    const int sw = tw + 2 * rx, sh = th + 2 * ry;
    const int64_t x0 = (int64_t)blockIdx.x * tw, y0 = (int64_t)blockIdx.y * th;
    int tb[OUTS];
#pragma unroll
    for (int k = 0; k < OUTS; k++) {
        const int i = threadIdx.x + k * BLOCK, ly = i / tw;
        tb[k] = ly * sw + (i - ly * tw);
    }
    for (int64_t z = blockIdx.z; z < p.shape[0]; z += gridDim.z) {
        double acc[OUTS];
#pragma unroll
        for (int k = 0; k < OUTS; k++) acc[k] = 0.0;
        const bool inside = p.home >= 0 && in_box(p.pieces[p.home], z, y0, x0) &&
                            in_box(p.pieces[p.home], z + 2 * rz, y0 + sh - 1, x0 + sw - 1);
        int w = 0;
        for (int dz = 0; dz <= 2 * rz; dz++) {
            if (inside) {
                const gs__cuda_spiece_t &hp = p.pieces[p.home];
                const double *src = hp.src + hp.base + (z + dz - hp.lo[0]) * hp.stride[0] +
                                    (y0 - hp.lo[1]) * hp.stride[1] + (x0 - hp.lo[2]) * hp.stride[2];
                for (int i = threadIdx.x; i < sh * sw; i += BLOCK) {
                    const int ly = i / sw, lx = i - ly * sw;
                    tile[i] = __ldg(src + ly * hp.stride[1] + lx * hp.stride[2]);
                }
            } else {
                for (int i = threadIdx.x; i < sh * sw; i += BLOCK) {
                    const int ly = i / sw, lx = i - ly * sw;
                    tile[i] = padded(p, z + dz, y0 + ly, x0 + lx);
                }
            }
            __syncthreads();
            for (int dy = 0; dy <= 2 * ry; dy++) {
                for (int dx = 0; dx <= 2 * rx; dx++, w++) {
                    const double wv = p.weights[w];
                    const int o = dy * sw + dx;
#pragma unroll
                    for (int k = 0; k < OUTS; k++) acc[k] += wv * tile[tb[k] + o];
                }
            }
            __syncthreads();
        }
        const bool kz = z < p.keep_lo[0] || z >= p.shape[0] - p.keep_hi[0];
#pragma unroll
        for (int k = 0; k < OUTS; k++) {
            const int i = threadIdx.x + k * BLOCK, ly = i / tw, lx = i - ly * tw;
            const int64_t y = y0 + ly, x = x0 + lx;
            if (y >= p.shape[1] || x >= p.shape[2]) continue;
            const bool keep = kz || y < p.keep_lo[1] || y >= p.shape[1] - p.keep_hi[1] ||
                              x < p.keep_lo[2] || x >= p.shape[2] - p.keep_hi[2];
            p.out[(z * p.shape[1] + y) * p.shape[2] + x] =
                keep ? padded(p, z + rz, y + ry, x + rx) : acc[k];
        }
    }
}

/* The 2-D kernel (rz == 0, (ry, rx) a compiled pair): thread t of a block takes column
 * x = blockIdx.x * BLOCK + t and ROWS2 outputs down it, keeping the (2 RY + 1) x (2 RX + 1)
 * window of padded values in registers: each input row is loaded once per column it feeds
 * (its horizontal neighbours come from L1, the rows above from registers), so the block reads
 * its 2-D footprint once from memory and needs no shared memory or barrier. Blocks whose
 * footprint lies inside the home piece read it directly; the others look every value up
 * (padded()). The weights are summed in the CPU's order (dy, then dx, from 0.0): the same
 * bits. */
constexpr int ROWS2 = 16;

template <int RY, int RX>
__global__ void __launch_bounds__(BLOCK) k_stencil2d(const __grid_constant__ gs__cuda_splan_t p)
{
    constexpr int WY = 2 * RY + 1, WX = 2 * RX + 1;
    const int64_t x = (int64_t)blockIdx.x * BLOCK + threadIdx.x;
    const int64_t y0 = (int64_t)blockIdx.y * ROWS2;
    const int64_t X = p.shape[2], Y = p.shape[1];
    if (x >= X) return;
    const int64_t xl = (int64_t)blockIdx.x * BLOCK, xh = xl + BLOCK + 2 * RX; /* footprint */
    const int64_t yh = y0 + ROWS2 + 2 * RY;
    const bool kx = x < p.keep_lo[2] || x >= X - p.keep_hi[2];
    for (int64_t z = blockIdx.z; z < p.shape[0]; z += gridDim.z) {
        const bool kz = z < p.keep_lo[0] || z >= p.shape[0] - p.keep_hi[0];
        const bool inside = p.home >= 0 && in_box(p.pieces[p.home], z, y0, xl) &&
                            in_box(p.pieces[p.home], z, yh - 1, xh - 1);
        const gs__cuda_spiece_t &hp = p.pieces[p.home < 0 ? 0 : p.home];
        const double *col = hp.src + hp.base + (z - hp.lo[0]) * hp.stride[0] +
                            (x - hp.lo[2]) * hp.stride[2];
        double win[WY][WX];
        auto load_row = [&](int slot, int64_t yy) {
            if (inside) {
                const double *rp = col + (yy - hp.lo[1]) * hp.stride[1];
#pragma unroll
                for (int dx = 0; dx < WX; dx++) win[slot][dx] = __ldg(rp + dx * hp.stride[2]);
            } else {
#pragma unroll
                for (int dx = 0; dx < WX; dx++) win[slot][dx] = padded(p, z, yy, x + dx);
            }
        };
#pragma unroll
        for (int k = 0; k < WY - 1; k++) load_row(k + 1, y0 + k);
#pragma unroll
        for (int t = 0; t < ROWS2; t++) {
            const int64_t y = y0 + t;
#pragma unroll
            for (int k = 0; k < WY - 1; k++)
#pragma unroll
                for (int dx = 0; dx < WX; dx++) win[k][dx] = win[k + 1][dx];
            if (y >= Y) break;
            load_row(WY - 1, y + WY - 1);
            double acc = 0.0;
#pragma unroll
            for (int dy = 0; dy < WY; dy++)
#pragma unroll
                for (int dx = 0; dx < WX; dx++) acc += p.weights[dy * WX + dx] * win[dy][dx];
            const bool keep = kz || kx || y < p.keep_lo[1] || y >= Y - p.keep_hi[1];
            p.out[(z * Y + y) * X + x] = keep ? win[RY][RX] : acc;
        }
    }
}

template <int RY, int RX>
const void *k2d()
{
    return (const void *)k_stencil2d<RY, RX>;
}

}  // namespace

/* The 2-D kernel for plan p, or NULL (3-D radius, 1-D data, a pair not compiled, a grid
 * beyond CUDA's limits): the tiled kernel runs instead. */
static const void *stencil2d_kernel(const gs__cuda_splan_t *p, dim3 *grid)
{
    const void *k = NULL;
    if (p->r[0] != 0 || p->shape[1] == 1) return NULL;
    if (p->r[1] == 1 && p->r[2] == 1) k = k2d<1, 1>();
    else if (p->r[1] == 2 && p->r[2] == 2) k = k2d<2, 2>();
    else if (p->r[1] == 0 && p->r[2] == 1) k = k2d<0, 1>();
    else if (p->r[1] == 1 && p->r[2] == 0) k = k2d<1, 0>();
    if (k == NULL) return NULL;
    const int64_t gx = (p->shape[2] + BLOCK - 1) / BLOCK, gy = (p->shape[1] + ROWS2 - 1) / ROWS2;
    if (gx > INT32_MAX || gy > 65535) return NULL;
    *grid = dim3((unsigned)gx, (unsigned)gy, p->grid[2]);
    return k;
}

extern "C" gs_status_t gs__cuda_launch_stencil(void *stream, const gs__cuda_splan_t *p)
{
    cudaError_t err;
    if (p->shape[0] == 0 || p->shape[1] == 0 || p->shape[2] == 0) return GS_OK;
    /* the environment is read once per process, not per launch */
    static const bool no2d = getenv("GS_CUDA_STENCIL2D") != NULL &&
                             strcmp(getenv("GS_CUDA_STENCIL2D"), "0") == 0;
    dim3 grid2;
    const void *k2 = no2d ? NULL : stencil2d_kernel(p, &grid2);
    if (k2 != NULL) {
        void *args2[1] = {(void *)p};
        err = cudaLaunchKernel(k2, grid2, dim3(BLOCK), args2, 0, (cudaStream_t)stream);
        if (err == cudaSuccess) err = cudaGetLastError();
        if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaLaunchKernel(stencil2d)");
        return GS_OK;
    }
    if (p->smem > 48 * 1024) {
        int dev = 0, optin = 0;
        err = cudaGetDevice(&dev);
        if (err == cudaSuccess)
            err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaDeviceGetAttribute(stencil)");
        if (p->smem > (uint32_t)optin)
            return gs_error_set(GS_ERR_UNSUPPORTED,
                                "cuda stencil: a tile needs %u bytes of shared memory, the device "
                                "allows %d (radius too large)", p->smem, optin);
        err = cudaFuncSetAttribute((const void *)k_stencil,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)p->smem);
        if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaFuncSetAttribute(stencil)");
    }
    void *args[1] = {(void *)p};
    err = cudaLaunchKernel((const void *)k_stencil, dim3(p->grid[0], p->grid[1], p->grid[2]),
                           dim3(BLOCK), args, p->smem, (cudaStream_t)stream);
    if (err == cudaSuccess) err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaLaunchKernel(stencil)");
    return GS_OK;
}
