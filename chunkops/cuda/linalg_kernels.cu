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


/* dst (column-major n x n, ld n) = upper triangle of src (column-major, ld lds), zeros below. */
__global__ void k_triu(const double *__restrict__ src, int64_t lds, int64_t n,
                       double *__restrict__ dst)
{
    const int64_t total = n * n;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e % n, j = e / n;
        dst[e] = i <= j ? src[i + j * lds] : 0.0;
    }
}

/* out[0] = max over i <= j of |g[i + j * n] - (i == j)| (upper triangle of a Gram matrix);
 * +inf when any entry is NaN. One block. */
__global__ void k_gram_dev(const double *__restrict__ g, int64_t n, double *__restrict__ out)
{
    __shared__ double red[256];
    double mx = 0.0;
    for (int64_t e = threadIdx.x; e < n * n; e += blockDim.x) {
        int64_t i = e % n, j = e / n;
        if (i > j) continue;
        double d = g[e] - (i == j ? 1.0 : 0.0);
        d = fabs(d);
        if (d != d) d = INFINITY;
        mx = d > mx ? d : mx;
    }
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w && red[threadIdx.x + w] > red[threadIdx.x])
            red[threadIdx.x] = red[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = red[0];
}

/* From syevd's eigenvectors e (column-major, ascending eigenvalues lam): v (column-major) with
 * the columns in descending order, s = sqrt(lam) descending (negative rounding -> 0). */
__global__ void k_eig_order(const double *__restrict__ e, const double *__restrict__ lam,
                            int64_t n, double *__restrict__ v, double *__restrict__ s)
{
    const int64_t total = n * n;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total;
         x += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = x % n, k = x / n;
        v[i + k * n] = e[i + (n - 1 - k) * n];
        if (i == 0) {
            double l = lam[n - 1 - k];
            s[k] = l > 0.0 ? sqrt(l) : 0.0;
        }
    }
}

/* w[:, k] /= s[k] (column-major n x n); out_ratio[0] = (s[n-1] / s[0])^2 (0 when s[0] = 0). */
__global__ void k_scale_cols(double *__restrict__ w, const double *__restrict__ s, int64_t n,
                             double *__restrict__ out_ratio)
{
    const int64_t total = n * n;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total;
         x += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = x / n;
        w[x] = s[k] > 0.0 ? w[x] / s[k] : 0.0;
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        double r = s[0] > 0.0 ? s[n - 1] / s[0] : 0.0;
        out_ratio[0] = r * r;
    }
}

/* a = I (column-major n x n) */
__global__ void k_eye(double *__restrict__ a, int64_t n)
{
    const int64_t total = n * n;
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < total;
         x += (int64_t)gridDim.x * blockDim.x)
        a[x] = (x % n) == (x / n) ? 1.0 : 0.0;
}

unsigned flat_blocks(int64_t total)
{
    int64_t b = (total + 255) / 256;
    if (b > 65535 * 8) b = 65535 * 8;
    return (unsigned)(b > 0 ? b : 1);
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

extern "C" gs_status_t gs__cuda_la_triu(void *stream, const double *src, int64_t lds, int64_t n,
                                        double *dst)
{
    if (n <= 0) return GS_OK;
    k_triu<<<flat_blocks(n * n), 256, 0, (cudaStream_t)stream>>>(src, lds, n, dst);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "launch(linalg triu)");
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_la_gram_dev(void *stream, const double *g, int64_t n, double *out)
{
    if (n <= 0) return GS_OK;
    k_gram_dev<<<1, 256, 0, (cudaStream_t)stream>>>(g, n, out);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "launch(linalg gram deviation)");
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_la_eig_order(void *stream, const double *e, const double *lam,
                                             int64_t n, double *v, double *s)
{
    if (n <= 0) return GS_OK;
    k_eig_order<<<flat_blocks(n * n), 256, 0, (cudaStream_t)stream>>>(e, lam, n, v, s);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "launch(linalg eig order)");
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_la_scale_cols(void *stream, double *w, const double *s, int64_t n,
                                              double *out_ratio)
{
    if (n <= 0) return GS_OK;
    k_scale_cols<<<flat_blocks(n * n), 256, 0, (cudaStream_t)stream>>>(w, s, n, out_ratio);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "launch(linalg scale columns)");
    return GS_OK;
}

extern "C" gs_status_t gs__cuda_la_eye(void *stream, double *a, int64_t n)
{
    if (n <= 0) return GS_OK;
    k_eye<<<flat_blocks(n * n), 256, 0, (cudaStream_t)stream>>>(a, n);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, "launch(linalg identity)");
    return GS_OK;
}
