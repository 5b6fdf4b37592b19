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

/* Block of column @a x in the batched Gram's layout: blocks of side b at offsets
 * o_i = min(i b, n - b), the last one shifted left so that every block is b wide. */
__device__ int gram_blk(int64_t x, int b, int nb)
{
    int64_t i = x / b;
    return i < nb - 1 ? (int)i : nb - 1;
}

__device__ int64_t gram_off(int i, int b, int64_t n)
{
    int64_t o = (int64_t)i * b;
    return o < n - b ? o : n - b;
}

/* Pointer arrays of one cublasDgemmBatched call: entry e = s * npair + p is slice s (rows
 * row0 + s L ..) of upper block pair p = j (j + 1) / 2 + i (i <= j): A = X_i, B = X_j (the
 * column-major views of A^T at column offsets o_i, o_j), C = slot slot0 + s, pair p. */
__global__ void k_gram_ptrs(const double *x, int64_t ld, int64_t row0, int64_t L, int b, int nb,
                            int64_t n, int nslots, int slot0, double *slots, const double **pa,
                            const double **pb, double **pc)
{
    const int npair = nb * (nb + 1) / 2;
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= nslots * npair) return;
    const int s = e / npair, p = e % npair;
    int j = 0;
    while ((j + 1) * (j + 2) / 2 <= p) j++;
    const int i = p - j * (j + 1) / 2;
    const double *base = x + (row0 + (int64_t)s * L) * ld;
    pa[e] = base + gram_off(i, b, n);
    pb[e] = base + gram_off(j, b, n);
    pc[e] = slots + ((int64_t)(slot0 + s) * npair + p) * (int64_t)b * b;
}

/* out (n x n, symmetric: the same in both layouts) = the sum over @a nslots slots of the
 * partial block products: each upper element (r <= c) is summed once (the slots are read once)
 * and written to (r, c) and (c, r), so the result is exactly symmetric. */
__global__ void k_gram_reduce(const double *__restrict__ slots, int nslots, int b, int nb,
                              int64_t n, double *__restrict__ out)
{
    const int64_t npair = nb * (nb + 1) / 2, bb = (int64_t)b * b;
    GS__GRAM_FOR(n) {
        const int64_t r = x % n, c = x / n;   /* column-major (r, c) at r + c * n */
        if (r > c) continue;
        const int i = gram_blk(r, b, nb), j = gram_blk(c, b, nb);
        const int64_t p = (int64_t)j * (j + 1) / 2 + i;
        const double *q = slots + p * bb + (r - gram_off(i, b, n)) + (c - gram_off(j, b, n)) * b;
        double v = 0.0;
        for (int s = 0; s < nslots; s++) v += q[(int64_t)s * npair * bb];
        out[x] = v;
        out[c + r * n] = v;
    }
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

extern "C" gs_status_t gs__cuda_gram_ptrs(void *stream, const double *x, int64_t ld, int64_t row0,
                                          int64_t L, int b, int nb, int64_t n, int nslots,
                                          int slot0, double *slots, double **pa, double **pb,
                                          double **pc)
{
    const int entries = nslots * (nb * (nb + 1) / 2);
    k_gram_ptrs<<<(entries + 127) / 128, 128, 0, (cudaStream_t)stream>>>(
        x, ld, row0, L, b, nb, n, nslots, slot0, slots, (const double **)pa, (const double **)pb,
        pc);
    return launched("launch(gram pointers)");
}

extern "C" gs_status_t gs__cuda_gram_reduce(void *stream, const double *slots, int nslots, int b,
                                            int nb, int64_t n, double *out)
{
    k_gram_reduce<<<gram_blocks(n * n), 256, 0, (cudaStream_t)stream>>>(slots, nslots, b, nb, n,
                                                                        out);
    return launched("launch(gram reduce)");
}
