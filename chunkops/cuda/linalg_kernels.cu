/* Layout kernels of the CUDA LINALG path (linalg.c): tiled transposes between row-major views
 * and the column-major buffers cuSOLVER works on, with the sign fix-up of QR folded in. */
#include "chunkops/cuda/linalg.h"

#include <cuda_runtime.h>

namespace {

constexpr int TILE = 32;
constexpr int ROWS = 8; /* a block is TILE x ROWS threads; each moves TILE / ROWS elements */

/* out[c * ldo + r] = in[r * ldi + c] * (scale ? scale[r] : 1) for r < R, c < C.
 * Reads are coalesced along c, writes along r (through a shared-memory tile). Tiles: x over
 * c, y over r, both grid-strided. */
__global__ void __launch_bounds__(TILE *ROWS)
    k_transpose(const double *__restrict__ in, int64_t ldi, double *__restrict__ out,
                int64_t ldo, int64_t R, int64_t C, const double *__restrict__ scale)
{
    __shared__ double tile[TILE][TILE + 1];
    const int64_t tc = (C + TILE - 1) / TILE, tr = (R + TILE - 1) / TILE;
    for (int64_t by = blockIdx.y; by < tr; by += gridDim.y) {
        for (int64_t bx = blockIdx.x; bx < tc; bx += gridDim.x) {
            const int64_t r0 = by * TILE, c0 = bx * TILE;
            for (int k = threadIdx.y; k < TILE; k += ROWS) {
                int64_t r = r0 + k, c = c0 + threadIdx.x;
                if (r < R && c < C) {
                    double v = in[r * ldi + c];
                    tile[k][threadIdx.x] = scale != nullptr ? v * scale[r] : v;
                }
            }
            __syncthreads();
            for (int k = threadIdx.y; k < TILE; k += ROWS) {
                int64_t c = c0 + k, r = r0 + threadIdx.x;
                if (r < R && c < C) out[c * ldo + r] = tile[threadIdx.x][k];
            }
            __syncthreads();
        }
    }
}

/* R out of a geqrf result: a is column-major (lda), its upper n x n triangle is R.
 * r_out[i * n + j] = j >= i ? a[i + j * lda] * s_i : 0 (row-major, ld n), where
 * s_i = -1 if a[i + i * lda] < 0 else 1 when fix_signs, else 1; sgn[i] = s_i (if sgn).
 * Tiles: x over i (coalesced reads down a column), y over j. */
__global__ void __launch_bounds__(TILE *ROWS)
    k_extract_r(const double *__restrict__ a, int64_t lda, int64_t n, int fix_signs,
                double *__restrict__ r_out, double *__restrict__ sgn)
{
    __shared__ double tile[TILE][TILE + 1];
    __shared__ double s[TILE];
    const int64_t nt = (n + TILE - 1) / TILE;
    for (int64_t by = blockIdx.y; by < nt; by += gridDim.y) {
        for (int64_t bx = blockIdx.x; bx < nt; bx += gridDim.x) {
            const int64_t i0 = bx * TILE, j0 = by * TILE;
            if (threadIdx.y == 0) {
                int64_t i = i0 + threadIdx.x;
                double si = 1.0;
                if (fix_signs && i < n && a[i + i * lda] < 0.0) si = -1.0;
                s[threadIdx.x] = si;
                if (sgn != nullptr && by == 0 && i < n) sgn[i] = si;
            }
            for (int k = threadIdx.y; k < TILE; k += ROWS) {
                int64_t j = j0 + k, i = i0 + threadIdx.x;
                if (i < n && j < n) tile[k][threadIdx.x] = j >= i ? a[i + j * lda] : 0.0;
            }
            __syncthreads();
            for (int k = threadIdx.y; k < TILE; k += ROWS) {
                int64_t i = i0 + k, j = j0 + threadIdx.x;
                if (i < n && j < n) r_out[i * n + j] = tile[threadIdx.x][k] * s[k];
            }
            __syncthreads();
        }
    }
}

dim3 tiles(int64_t x, int64_t y)
{
    int64_t gx = (x + TILE - 1) / TILE, gy = (y + TILE - 1) / TILE;
    if (gx > 65535 * 8) gx = 65535 * 8;
    if (gy > 65535) gy = 65535;
    return dim3((unsigned)(gx > 0 ? gx : 1), (unsigned)(gy > 0 ? gy : 1));
}

} // namespace

extern "C" gs_status_t gs__cuda_la_transpose(void *stream, const double *in, int64_t ldi,
                                             double *out, int64_t ldo, int64_t R, int64_t C,
                                             const double *scale)
{
    if (R <= 0 || C <= 0) return GS_OK;
    k_transpose<<<tiles(C, R), dim3(TILE, ROWS), 0, (cudaStream_t)stream>>>(in, ldi, out, ldo, R,
                                                                            C, scale);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "launch(linalg transpose)");
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_la_extract_r(void *stream, const double *a, int64_t lda,
                                             int64_t n, int fix_signs, double *r_out,
                                             double *sgn)
{
    if (n <= 0) return GS_OK;
    k_extract_r<<<tiles(n, n), dim3(TILE, ROWS), 0, (cudaStream_t)stream>>>(a, lda, n, fix_signs,
                                                                            r_out, sgn);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "launch(linalg extract R)");
    return GS_OK;
}
