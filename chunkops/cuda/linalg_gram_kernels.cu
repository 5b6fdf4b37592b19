/* Layout kernels of the CUDA Gram path (linalg_gram.c): small n x n element-wise passes. */
#include "chunkops/cuda/linalg.h"

#include <cuda_runtime.h>

namespace {

struct gram_hdr {
    double h[GS_LA_STATE_HDR];
};

/* The grid-stride loop over n * n elements, x = r * n + c. */
#define GS__GRAM_FOR(n)                                                               \
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < (n) * (n);   \
         x += (int64_t)gridDim.x * blockDim.x)

__global__ void k_mirror(double *__restrict__ g, int64_t n)
{
    GS__GRAM_FOR(n) {
        const int64_t r = x / n, c = x % n;   /* column-major (r, c) at r + c * n */
        if (r > c) g[r + c * n] = g[c + r * n];
    }
}

__global__ void k_tril0(double *__restrict__ a, int64_t n)
{
    GS__GRAM_FOR(n) {
        if (x / n > x % n) a[x] = 0.0;
    }
}

__global__ void k_add_diag(double *__restrict__ a, int64_t n, double v)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        a[i * n + i] += v;
}

__global__ void k_fast_t(const double *__restrict__ vt, const double *__restrict__ s, int64_t n,
                         double *__restrict__ t)
{
    GS__GRAM_FOR(n) {
        const int64_t r = x / n, c = x % n;
        t[x] = vt[c * n + r] / s[c];
    }
}

__global__ void k_hdr(double *__restrict__ out, gram_hdr h)
{
    if (threadIdx.x < GS_LA_STATE_HDR) out[threadIdx.x] = h.h[threadIdx.x];
}

unsigned gram_blocks(int64_t total)
{
    int64_t b = (total + 255) / 256;
    if (b > 65535 * 8) b = 65535 * 8;
    return (unsigned)(b > 0 ? b : 1);
}

gs_status_t launched(const char *what)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return gs__cuda_error((int)err, what);
    return GS_OK;
}

} // namespace

extern "C" gs_status_t gs__cuda_gram_mirror(void *stream, double *g, int64_t n)
{
    k_mirror<<<gram_blocks(n * n), 256, 0, (cudaStream_t)stream>>>(g, n);
    return launched("launch(gram mirror)");
}

extern "C" gs_status_t gs__cuda_gram_tril0(void *stream, double *r, int64_t n)
{
    k_tril0<<<gram_blocks(n * n), 256, 0, (cudaStream_t)stream>>>(r, n);
    return launched("launch(gram tril0)");
}

extern "C" gs_status_t gs__cuda_gram_add_diag(void *stream, double *a, int64_t n, double v)
{
    k_add_diag<<<gram_blocks(n), 256, 0, (cudaStream_t)stream>>>(a, n, v);
    return launched("launch(gram add diagonal)");
}

extern "C" gs_status_t gs__cuda_gram_fast_t(void *stream, const double *vt, const double *s,
                                            int64_t n, double *t)
{
    k_fast_t<<<gram_blocks(n * n), 256, 0, (cudaStream_t)stream>>>(vt, s, n, t);
    return launched("launch(gram fast T)");
}

extern "C" gs_status_t gs__cuda_gram_hdr(void *stream, double *out, const double *h)
{
    gram_hdr v;
    for (int i = 0; i < GS_LA_STATE_HDR; i++) v.h[i] = h[i];
    k_hdr<<<1, 32, 0, (cudaStream_t)stream>>>(out, v);
    return launched("launch(gram header)");
}
