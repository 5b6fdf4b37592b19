/* The Gram-path kernels on the CUDA backend (graph/kernel.h GS_LA_GRAM / APPLY / GSTEP; the
 * plan is in graph/lower_linalg.c and docs/ARCHITECTURE.md "Tall SVD").
 *
 * Layouts, as in linalg.c: a row-major m x n matrix with row stride ld is, to cuBLAS, the
 * column-major n x m matrix A^T (ld ld). So
 *   - GRAM: G = A^T A (symmetric: the same in both layouts). By default (batched) the upper
 *     blocks of 128 x 128 (36 of the 64 at n 1000), each cut along the rows of A into up to 32
 *     slices, are one cublasDgemmBatched(N, T) per piece into scratch slots that one kernel
 *     sums into both triangles (gs__gram_batched). GS_CUDA_GRAM=blocked: one cublasDgemm(N, T)
 *     per upper block, summed with beta = 1 over the pieces, then the lower triangle mirrored
 *     (the default before session 13); syrk: cublasDsyrk(upper, N); gemm: one full GEMM.
 *   - APPLY: X T is cublasDgemm(N, N) of T^T (T's storage) and X^T; X T^-1 solves in place
 *     (cublasDtrsm, left, lower: the storage of a row-major upper T is column-major T^T).
 *   - GSTEP: n x n work in cuSOLVER: syevd (G is symmetric), potrf(lower): the column-major
 *     lower factor L (G = L L^T) read row-major is R = L^T, upper, with G = R^T R; gesvd of
 *     the storage of Racc (column-major Racc^T = V S U_r^T): its left vectors are V (stored
 *     row-major: Vt) and its right ones give U_r^T (stored row-major: U_r).
 * Reading the state's header needs the host: a copy to host and a stream synchronisation (the
 * worker's launcher thread runs these tasks). GSTEP works synchronously and frees its scratch
 * before returning; the batched GRAM's scratch goes back from a stream callback. */
#include "chunkops/cuda/linalg.h"
#include "chunkops/chunkops.h"
#include "common/error.h"
#include "common/log.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static gs_status_t gs__gram_cuda(cudaError_t e, const char *what)
{
    (void)cudaGetLastError();
    return gs__cuda_error((int)e, what);
}

/* Copy @a nd doubles at @a src (device) to @a dst (host) and wait for the stream. */
static gs_status_t gs__gram_read(cudaStream_t s, const double *src, double *dst, size_t nd)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, nd * sizeof(double), cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return gs__gram_cuda(e, "gram path: reading the state (cudaMemcpyAsync)");
    return GS_OK;
}

static gs_status_t gs__gram_copy(cudaStream_t s, double *dst, const double *src, size_t nd)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, nd * sizeof(double), cudaMemcpyDeviceToDevice, s);
    if (e != cudaSuccess) return gs__gram_cuda(e, "gram path: cudaMemcpyAsync");
    return GS_OK;
}

static gs_status_t gs__gram_zero(cudaStream_t s, double *dst, size_t nd)
{
    cudaError_t e = cudaMemsetAsync(dst, 0, nd * sizeof(double), s);
    if (e != cudaSuccess) return gs__gram_cuda(e, "gram path: cudaMemsetAsync");
    return GS_OK;
}

enum {
    GS__GRAM_SYRK = 0,
    GS__GRAM_GEMM = 1,
    GS__GRAM_BLOCKED = 2,
    GS__GRAM_BATCHED = 3,
    GS__GRAM_STRIDED = 4
};

/* GS_CUDA_GRAM=blocked (the default until session 13): GEMMs on the upper blocks of
 * GS__GRAM_BLOCK columns, 10 of the 16 for n <= 1024; syrk (cublasDsyrk) or gemm (the full
 * product). Read per call (cheap).
 * gs-kbench, one 250000 x 1000 block: blocked (512) 7.9 ms, gemm 10.1 ms, syrk 12.3 ms on an
 * H100; cuBLAS's dsyrk runs at half the rate of its dgemm there. One H200 (session 12), block
 * side 512: 6.95 ms, 336: 8.42, 256: 6.50 (min 6.07), 200: 8.79, 128: 6.55; gs-bench svd 4 M x
 * 1000: 0.281-0.297 s at 512, 0.271-0.283 s at 256. */
#define GS__GRAM_BLOCK 256
/* The batched method's block side (GS_CUDA_GRAM=batched, the default). 128 and the 32 slices
 * of GS__GRAM_SPLIT are choices made without a device (session 13): 128 does 9/10 of 256's
 * work at n 1000 (36 pairs of 128^2 against 10 of 256^2), which the blocked method could not
 * use (36 launches, each with its tail, measured level with 10 at 256); 32 slices give over a
 * thousand 128^2 tiles, several waves on 132 SMs. gs-kbench's gram_b<B>_s<S> lines measure
 * the alternatives. */
#define GS__GRAM_BATCH_BLOCK 128
/* GS_CUDA_GRAM_BLOCK: the block side of the blocked and batched methods (default
 * GS__GRAM_BLOCK / GS__GRAM_BATCH_BLOCK; 16..4096), read per call, for measurements. */
static int gs__gram_block(int batched)
{
    const char *e = getenv("GS_CUDA_GRAM_BLOCK");
    int b = e != NULL ? atoi(e) : 0;
    return b >= 16 && b <= 4096 ? b : batched ? GS__GRAM_BATCH_BLOCK : GS__GRAM_BLOCK;
}

/* GS_CUDA_GRAM: batched (the default), strided, blocked, syrk or gemm. */
static int gs__gram_method(void)
{
    const char *e = getenv("GS_CUDA_GRAM");
    if (e != NULL && strcmp(e, "gemm") == 0) return GS__GRAM_GEMM;
    if (e != NULL && strcmp(e, "syrk") == 0) return GS__GRAM_SYRK;
    if (e != NULL && strcmp(e, "blocked") == 0) return GS__GRAM_BLOCKED;
    if (e != NULL && strcmp(e, "strided") == 0) return GS__GRAM_STRIDED;
    return GS__GRAM_BATCHED;
}

/* The batched method (GS_CUDA_GRAM=batched, the default): the blocked method's GEMMs, each
 * also cut along the contraction (the rows of A) into row slices, all in one
 * cublasDgemmBatched call per piece, so the device runs every block product at once instead of
 * ten launches each with its own tail and cuBLAS's own split of the long contraction. The
 * blocks all have the side b (the last one is shifted left, overlapping its neighbour, so the
 * call has one shape); each slice writes its own slot of partial products in a scratch block
 * and one kernel sums the slots into both triangles of G (gs__cuda_gram_reduce). The scratch
 * goes back to the arena from a stream callback once the work has run: no synchronisation.
 * GS_CUDA_GRAM_SPLIT: slices per piece (1..64, default GS__GRAM_SPLIT; fewer for pieces below
 * GS__GRAM_SLICE_MIN rows per slice), read per call. GS_CUDA_GRAM=strided: the same slots and
 * sum, filled by one cublasDgemmStridedBatched per block pair over the slices (a hedge in case
 * cuBLAS's pointer-array batched kernels are the slower ones; no pointer arrays). */
#define GS__GRAM_SPLIT 32
#define GS__GRAM_SLICE_MIN 4096
#define GS__GRAM_SCRATCH_MAX ((size_t)256 << 20)   /* slots above this: fewer slices */

static int gs__gram_split(void)
{
    const char *e = getenv("GS_CUDA_GRAM_SPLIT");
    int v = e != NULL ? atoi(e) : 0;
    return v >= 1 && v <= 64 ? v : GS__GRAM_SPLIT;
}

/* Slices for a piece of @a rows rows, at most @a split. */
static int gs__gram_slices(int64_t rows, int split)
{
    int64_t p = rows / GS__GRAM_SLICE_MIN;
    if (p < 1) p = 1;
    return p < split ? (int)p : split;
}

typedef struct gs__gram_freer {
    gs__cuda_arena_t *arena;
    uintptr_t base;
} gs__gram_freer_t;

/* Stream callback: the scratch of a batched Gram goes back (no CUDA calls here). */
static void CUDART_CB gs__gram_free_cb(void *ud)
{
    gs__gram_freer_t *f = ud;
    if (gs__cuda_arena_free(f->arena, f->base) != GS_OK)
        GS_LOG_ERROR("cuda linalg gram: freeing scratch: %s", gs_last_error());
    free(f);
}

/* Return @a base to @a arena once the work enqueued on @a s so far has run: from a stream
 * callback, or after a synchronisation when none can be registered. */
static void gs__gram_free_after(gs__cuda_arena_t *arena, cudaStream_t s, uintptr_t base)
{
    gs__gram_freer_t *f = malloc(sizeof(*f));
    if (f != NULL) {
        f->arena = arena;
        f->base = base;
        if (cudaLaunchHostFunc(s, gs__gram_free_cb, f) == cudaSuccess) return;
        (void)cudaGetLastError();
        free(f);
    }
    if (cudaStreamSynchronize(s) != cudaSuccess) (void)cudaGetLastError();
    if (gs__cuda_arena_free(arena, base) != GS_OK)
        GS_LOG_ERROR("cuda linalg gram: freeing scratch: %s", gs_last_error());
}

/* Slots [s0, s1) of pair (i, j) (offsets @a oi, @a oj) += / = slices of @a L rows of piece
 * @a x: one strided-batched GEMM over the slices. */
static gs_status_t gs__gram_strided_pair(cublasHandle_t blas, const double *x, int ld, int b,
                                         int64_t L, int oi, int oj, double *c, size_t slot_len,
                                         int s0, int s1, const double *beta)
{
    gs_status_t st = GS_OK;
    const double one = 1.0;
    const long long sa = (long long)L * ld;
    GS__LA_BLAS(cublasDgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, b, b, (int)L, &one,
                                          x + oi + s0 * sa, ld, sa, x + oj + s0 * sa, ld, sa,
                                          beta, c + (size_t)s0 * slot_len, b,
                                          (long long)slot_len, s1 - s0));
    return GS_OK;
fail:
    return st;
}

/* The strided variant of one piece (see gs__gram_batched): @a p slices of @a L rows, slots
 * [0, w) accumulate, the rest are written; then the tail rows into slot 0. */
static gs_status_t gs__gram_strided_piece(cublasHandle_t blas, const double *x, int ld, int b,
                                          int nb, int n, int p, int w, int64_t L, int64_t tail,
                                          double *slots)
{
    gs_status_t st = GS_OK;
    const double one = 1.0, zero = 0.0;
    const int npair = nb * (nb + 1) / 2;
    const size_t slot_len = (size_t)npair * (size_t)b * (size_t)b;
    for (int j = 0, pr = 0; j < nb; j++)
        for (int i = 0; i <= j; i++, pr++) {
            const int oi = i * b < n - b ? i * b : n - b, oj = j * b < n - b ? j * b : n - b;
            double *c = slots + (size_t)pr * (size_t)b * (size_t)b;
            if (w > 0)
                GS__LA_TRY(gs__gram_strided_pair(blas, x, ld, b, L, oi, oj, c, slot_len, 0, w,
                                                 &one));
            if (p > w)
                GS__LA_TRY(gs__gram_strided_pair(blas, x, ld, b, L, oi, oj, c, slot_len, w, p,
                                                 &zero));
            const double *xt = x + (size_t)p * (size_t)L * (size_t)ld;   /* the tail rows */
            if (tail > 0)
                GS__LA_BLAS(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, b, b, (int)tail, &one,
                                        xt + oi, ld, xt + oj, ld, &one, c, b));
        }
    return GS_OK;
fail:
    return st;
}

/* G = sum of A_t^T A_t by the batched method (@a strided: its strided variant) into k->out
 * (both triangles). *done_p = 0 (and nothing enqueued) when the scratch cannot be had: the
 * caller uses the blocked method. */
static gs_status_t gs__gram_batched(cublasHandle_t blas, gs__cuda_arena_t *arena, cudaStream_t s,
                                    const gs_klinalg_t *k, int bs, int strided, int *done_p)
{
    gs_status_t st = GS_OK;
    const double one = 1.0, zero = 0.0;
    const int n = (int)k->n, b = bs < n ? bs : n, nb = (n + b - 1) / b;
    const int npair = nb * (nb + 1) / 2;
    const size_t slot_bytes = (size_t)npair * (size_t)b * (size_t)b * sizeof(double);
    int64_t maxrows = 0;
    int split = gs__gram_split(), written = 0, nslots;
    size_t ptr_bytes, slots_sz;
    uintptr_t base = 0;
    *done_p = 0;
    for (int32_t t = 0; t < k->nterms; t++)
        if (k->a[t].rows > maxrows) maxrows = k->a[t].rows;
    if (maxrows == 0 || slot_bytes > GS__GRAM_SCRATCH_MAX) return GS_OK;
    nslots = gs__gram_slices(maxrows, split);
    if ((size_t)nslots * slot_bytes > GS__GRAM_SCRATCH_MAX)
        nslots = (int)(GS__GRAM_SCRATCH_MAX / slot_bytes);
    /* pointer arrays: per piece, its slices and one tail call (three arrays each) */
    const size_t per_piece = (size_t)(nslots + 1) * (size_t)npair;
    slots_sz = ((size_t)nslots * slot_bytes + GS__ARENA_UNIT - 1) / GS__ARENA_UNIT * GS__ARENA_UNIT;
    ptr_bytes = (size_t)k->nterms * per_piece * 3 * sizeof(double *);
    if (gs__cuda_arena_alloc(arena, slots_sz + ptr_bytes, &base) != GS_OK) {
        GS_LOG_DEBUG("cuda linalg gram: no %zu bytes of scratch for the batched Gram (%s); "
                     "blocked GEMMs instead", slots_sz + ptr_bytes, gs_last_error());
        return GS_OK;
    }
    *done_p = 1;
    double *slots = (double *)base;
    double **ptrs = (double **)(base + slots_sz);
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t];
        const double *x = a->data + a->off;
        const int ld = (int)a->ld;
        if (a->rows == 0) continue;
        const int p = gs__gram_slices(a->rows, nslots);
        const int64_t L = a->rows / p, tail = a->rows - (int64_t)p * L;
        double **pa = ptrs + (size_t)t * per_piece * 3, **pb = pa + per_piece;
        double **pc = pb + per_piece;
        const int w = written < p ? written : p;   /* slots [0, w) already hold a sum */
        if (strided) {
            GS__LA_TRY(gs__gram_strided_piece(blas, x, ld, b, nb, n, p, w, L, tail, slots));
            if (p > written) written = p;
            continue;
        }
        GS__LA_TRY(gs__cuda_gram_ptrs(s, x, ld, 0, L, b, nb, n, p, 0, slots, pa, pb, pc));
        if (w > 0)
            GS__LA_BLAS(cublasDgemmBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, b, b, (int)L, &one,
                                           (const double *const *)pa, ld,
                                           (const double *const *)pb, ld, &one, pc, b,
                                           w * npair));
        if (p > w)
            GS__LA_BLAS(cublasDgemmBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, b, b, (int)L, &one,
                                           (const double *const *)(pa + (size_t)w * npair), ld,
                                           (const double *const *)(pb + (size_t)w * npair), ld,
                                           &zero, pc + (size_t)w * npair, b, (p - w) * npair));
        if (p > written) written = p;
        if (tail > 0) {   /* the last rows (fewer than p) into slot 0 */
            double **ta = pa + (size_t)p * npair, **tb = pb + (size_t)p * npair;
            double **tc = pc + (size_t)p * npair;
            GS__LA_TRY(gs__cuda_gram_ptrs(s, x, ld, (int64_t)p * L, 0, b, nb, n, 1, 0, slots, ta,
                                          tb, tc));
            GS__LA_BLAS(cublasDgemmBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, b, b, (int)tail, &one,
                                           (const double *const *)ta, ld,
                                           (const double *const *)tb, ld, &one, tc, b, npair));
        }
    }
    GS__LA_TRY(gs__cuda_gram_reduce(s, slots, written, b, nb, n, k->out));
fail:
    gs__gram_free_after(arena, s, base);
    return st;
}

static gs_status_t gs__gram_gram(cublasHandle_t blas, gs__cuda_arena_t *arena, cudaStream_t s,
                                 const gs_klinalg_t *k)
{
    gs_status_t st = GS_OK;
    const double one = 1.0, zero = 0.0;
    const int n = (int)k->n;
    int first = 1, method = gs__gram_method(), bs = gs__gram_block(method >= GS__GRAM_BATCHED);
    if (k->b[0].rows > 0) {
        double hdr[GS_LA_STATE_HDR];
        GS__LA_TRY(gs__gram_read(s, k->b[0].data + k->b[0].off, hdr, GS_LA_STATE_HDR));
        if (hdr[GS_LA_H_SKIP] == 1.0) return gs__gram_zero(s, k->out, (size_t)n * (size_t)n);
    }
    if (method == GS__GRAM_BATCHED || method == GS__GRAM_STRIDED) {
        int done = 0;
        if ((st = gs__gram_batched(blas, arena, s, k, bs, method == GS__GRAM_STRIDED, &done)) !=
                GS_OK ||
            done)
            return st;
        method = GS__GRAM_BLOCKED;
        bs = gs__gram_block(0);
    }
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t];
        const double *x = a->data + a->off;
        if (a->rows == 0) continue;
        if (method == GS__GRAM_GEMM)
            GS__LA_BLAS(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, n, n, (int)a->rows, &one, x,
                                    (int)a->ld, x, (int)a->ld, first ? &zero : &one, k->out, n));
        else if (method == GS__GRAM_BLOCKED)
            for (int j0 = 0; j0 < n; j0 += bs)
                for (int i0 = 0; i0 <= j0; i0 += bs) {
                    /* column-major block (i, j) of G = X_i X_j^T, X_i the rows i0.. of A^T */
                    int bi = n - i0 < bs ? n - i0 : bs;
                    int bj = n - j0 < bs ? n - j0 : bs;
                    GS__LA_BLAS(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, bi, bj, (int)a->rows,
                                            &one, x + i0, (int)a->ld, x + j0, (int)a->ld,
                                            first ? &zero : &one,
                                            k->out + i0 + (size_t)j0 * (size_t)n, n));
                }
        else
            GS__LA_BLAS(cublasDsyrk(blas, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, n, (int)a->rows,
                                    &one, x, (int)a->ld, first ? &zero : &one, k->out, n));
        first = 0;
    }
    if (first) return gs__gram_zero(s, k->out, (size_t)n * (size_t)n);
    if (method != GS__GRAM_GEMM) GS__LA_TRY(gs__cuda_gram_mirror(s, k->out, n));
    return GS_OK;
fail:
    return st;
}

static gs_status_t gs__gram_apply(cublasHandle_t blas, cudaStream_t s, const gs_klinalg_t *k)
{
    gs_status_t st = GS_OK;
    const double one = 1.0, zero = 0.0;
    const int n = (int)k->n;
    const double *state = k->b[0].data + k->b[0].off, *tm = state + GS_LA_STATE_T(n);
    double hdr[GS_LA_STATE_HDR];
    const gs_kmat_t *xs;
    int64_t r0 = 0;
    if (k->m == 0) return GS_OK;
    GS__LA_TRY(gs__gram_read(s, state, hdr, GS_LA_STATE_HDR));
    const double how = hdr[GS_LA_H_APPLY];
    if ((st = gs__la_apply_source(k, hdr, &xs)) != GS_OK || how == GS_LA_APPLY_NONE) return st;
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &xs[t];
        double *dst = k->out + r0 * n;
        if (a->rows == 0) continue;
        if (how == GS_LA_APPLY_GEMM) {
            GS__LA_BLAS(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, (int)a->rows, n, &one, tm,
                                    n, a->data + a->off, (int)a->ld, &zero, dst, n));
        } else {
            cudaError_t e = cudaMemcpy2DAsync(dst, (size_t)n * sizeof(double), a->data + a->off,
                                              (size_t)a->ld * sizeof(double),
                                              (size_t)n * sizeof(double), (size_t)a->rows,
                                              cudaMemcpyDeviceToDevice, s);
            if (e != cudaSuccess) return gs__gram_cuda(e, "gram apply: cudaMemcpy2DAsync");
        }
        r0 += a->rows;
    }
    if (how == GS_LA_APPLY_TRSM)
        GS__LA_BLAS(cublasDtrsm(blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                                CUBLAS_DIAG_NON_UNIT, n, (int)k->m, &one, tm, n, k->out, n));
    return GS_OK;
fail:
    return st;
}

/* Scratch of a GSTEP: E (n x n) | U_r or temp (n x n) | G summed (n x n) | lam (n) | work |
 * info. */
typedef struct gs__gram_scratch {
    uintptr_t base;
    double *e, *w, *g, *lam, *work;
    int *info;
    int lwork;
} gs__gram_scratch_t;

static gs_status_t gs__gram_scratch_get(cusolverDnHandle_t solver, gs__cuda_arena_t *arena,
                                        int n, gs__gram_scratch_t *sc)
{
    gs_status_t st = GS_OK;
    int lw_eig = 0, lw_potrf = 0, lw_svd = 0;
    const size_t nn = (size_t)n * (size_t)n * sizeof(double);
    size_t sz = 0, o_e, o_w, o_g, o_lam, o_work, o_info;
    memset(sc, 0, sizeof(*sc));
    GS__LA_SOLVER(cusolverDnDsyevd_bufferSize(solver, CUSOLVER_EIG_MODE_VECTOR,
                                              CUBLAS_FILL_MODE_UPPER, n, NULL, n, NULL, &lw_eig));
    GS__LA_SOLVER(cusolverDnDpotrf_bufferSize(solver, CUBLAS_FILL_MODE_LOWER, n, NULL, n,
                                              &lw_potrf));
    GS__LA_SOLVER(cusolverDnDgesvd_bufferSize(solver, n, n, &lw_svd));
    sc->lwork = lw_eig > lw_potrf ? lw_eig : lw_potrf;
    if (lw_svd > sc->lwork) sc->lwork = lw_svd;
    sc->lwork += n;   /* gesvd's rwork (n - 1) after the workspace */
    o_e = sz, sz += (nn + GS__ARENA_UNIT - 1) / GS__ARENA_UNIT * GS__ARENA_UNIT;
    o_w = sz, sz += (nn + GS__ARENA_UNIT - 1) / GS__ARENA_UNIT * GS__ARENA_UNIT;
    o_g = sz, sz += (nn + GS__ARENA_UNIT - 1) / GS__ARENA_UNIT * GS__ARENA_UNIT;
    o_lam = sz, sz += ((size_t)n * sizeof(double) + GS__ARENA_UNIT - 1) / GS__ARENA_UNIT *
                      GS__ARENA_UNIT;
    o_work = sz, sz += ((size_t)sc->lwork * sizeof(double) + GS__ARENA_UNIT - 1) /
                       GS__ARENA_UNIT * GS__ARENA_UNIT;
    o_info = sz, sz += GS__ARENA_UNIT;
    if ((st = gs__cuda_arena_alloc(arena, sz, &sc->base)) != GS_OK) return st;
    sc->e = (double *)(sc->base + o_e);
    sc->w = (double *)(sc->base + o_w);
    sc->g = (double *)(sc->base + o_g);
    sc->lam = (double *)(sc->base + o_lam);
    sc->work = (double *)(sc->base + o_work);
    sc->info = (int *)(sc->base + o_info);
    return GS_OK;
fail:
    return st;
}

/* Wait for the stream and check the devInfo word of @a call. */
static gs_status_t gs__gram_info(cudaStream_t s, const int *dinfo, const char *call)
{
    int info = 0;
    cudaError_t e = cudaMemcpyAsync(&info, dinfo, sizeof(int), cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return gs__gram_cuda(e, "gram step: reading devInfo");
    if (info < 0)
        return gs_error_set(GS_ERR_INTERNAL, "cuda linalg gstep: %s rejected argument %d", call,
                            -info);
    /* as the cpu backend: the eigen-solver fails only on NaN/Inf; a factorisation failing is
     * the Gram path refusing the input (GS_LA_GRAM_REFUSED: TSQR fallback) */
    if (info > 0 && strstr(call, "syevd") != NULL)
        return gs_error_set(GS_ERR_NUMERIC, "cuda linalg gstep: %s failed (info %d): the matrix "
                            "has NaN/Inf entries", call, info);
    if (info > 0)
        return gs_error_set(GS_ERR_NUMERIC,
                            "cuda linalg gstep: %s failed (info %d): the matrix has NaN/Inf entries "
                            "or is too " GS_LA_GRAM_REFUSED, call, info);
    return GS_OK;
}

/* R = chol(T) in place, row-major upper (zeros below). */
static gs_status_t gs__gram_chol(cusolverDnHandle_t solver, cudaStream_t s,
                                 const gs__gram_scratch_t *sc, double *tm, int n, const char *call)
{
    gs_status_t st = GS_OK;
    GS__LA_SOLVER(cusolverDnDpotrf(solver, CUBLAS_FILL_MODE_LOWER, n, tm, n, sc->work, sc->lwork,
                                   sc->info));
    GS__LA_TRY(gs__gram_info(s, sc->info, call));
    return gs__cuda_gram_tril0(s, tm, n);
fail:
    return st;
}

static gs_status_t gs__gram_step1(cusolverDnHandle_t solver, cudaStream_t s,
                                  const gs__gram_scratch_t *sc, const gs_klinalg_t *k, double *hdr)
{
    gs_status_t st = GS_OK;
    const int n = (int)k->n;
    const double *g = k->a[0].data + k->a[0].off;
    double *out = k->out, *tm = out + GS_LA_STATE_T(n), *sv = out + GS_LA_STATE_S(n);
    double *vt = out + GS_LA_STATE_VT(n), *racc = out + GS_LA_STATE_RACC(n);
    double ends[2];
    const size_t nn = (size_t)n * (size_t)n;
    GS__LA_TRY(gs__gram_zero(s, out, (size_t)GS_LA_STATE_LEN(n)));
    GS__LA_TRY(gs__gram_copy(s, sc->e, g, nn));
    GS__LA_SOLVER(cusolverDnDsyevd(solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, n,
                                   sc->e, n, sc->lam, sc->work, sc->lwork, sc->info));
    GS__LA_TRY(gs__gram_info(s, sc->info, "cusolverDnDsyevd"));
    GS__LA_TRY(gs__gram_read(s, sc->lam, &ends[0], 1));
    GS__LA_TRY(gs__gram_read(s, sc->lam + n - 1, &ends[1], 1));
    const double lmin = ends[0], lmax = ends[1];
    const double kappa = lmin > 0.0 ? sqrt(lmax / lmin) : INFINITY;
    if (!isfinite(lmax))
        return gs_error_set(GS_ERR_NUMERIC, "cuda linalg gstep: the Gram matrix is not finite "
                            "(NaN/Inf in the input)");
    hdr[GS_LA_H_KAPPA] = kappa;
    hdr[GS_LA_H_STEP] = 1.0;
    if (kappa <= GS_LA_GRAM_KAPPA_FAST) {
        GS__LA_TRY(gs__cuda_la_eig_order(s, sc->e, sc->lam, n, vt, sv));
        GS__LA_TRY(gs__cuda_gram_fast_t(s, vt, sv, n, tm));
        hdr[GS_LA_H_FAST] = 1.0;
        hdr[GS_LA_H_APPLY] = GS_LA_APPLY_NONE;
        hdr[GS_LA_H_SKIP] = 1.0;
        return GS_OK;
    }
    /* shifted CholeskyQR: s = 11 (m n + n (n + 1)) u ||A||_2^2 (Fukaya et al. 2020) */
    const double shift = gs_la_gram_shift(k->m, n, lmax > 0.0 ? lmax : 0.0);
    if (lmax > 0.0) {
        GS__LA_TRY(gs__gram_copy(s, tm, g, nn));
        GS__LA_TRY(gs__cuda_gram_add_diag(s, tm, n, shift));
    } else {
        GS__LA_TRY(gs__cuda_la_eye(s, tm, n));   /* A == 0 */
    }
    GS__LA_TRY(gs__gram_chol(solver, s, sc, tm, n, "cusolverDnDpotrf (step 1)"));
    if (lmax > 0.0) GS__LA_TRY(gs__gram_copy(s, racc, tm, nn));
    hdr[GS_LA_H_SHIFT] = shift;
    hdr[GS_LA_H_APPLY] = GS_LA_APPLY_TRSM;
    return GS_OK;
fail:
    return st;
}

static gs_status_t gs__gram_step(cublasHandle_t blas, cusolverDnHandle_t solver,
                                 cudaStream_t s, const gs__gram_scratch_t *sc,
                                 const gs_klinalg_t *k, double *hdr)
{
    gs_status_t st = GS_OK;
    const double one = 1.0;
    const int n = (int)k->n, step = (int)k->alpha;
    const size_t nn = (size_t)n * (size_t)n;
    double *out = k->out, *tm = out + GS_LA_STATE_T(n), *sv = out + GS_LA_STATE_S(n);
    double *vt = out + GS_LA_STATE_VT(n), *racc = out + GS_LA_STATE_RACC(n);
    const double *prev = k->b[0].data + k->b[0].off;
    GS__LA_TRY(gs__gram_read(s, prev, hdr, GS_LA_STATE_HDR));
    GS__LA_TRY(gs__gram_copy(s, out, prev, (size_t)GS_LA_STATE_LEN(n)));
    if (gs__la_step_hdr(hdr, step)) return GS_OK;   /* the fast path passes through */
    if (step == 3) {
        double dev = 0.0;
        GS__LA_TRY(gs__cuda_la_gram_dev(s, k->a[0].data + k->a[0].off, n, sc->lam));
        GS__LA_TRY(gs__gram_read(s, sc->lam, &dev, 1));
        if (!(dev <= GS_LA_GRAM_DEV_MAX)) return gs__gram_rank_fail(dev);
    }
    /* R_k = chol(G_k), or of G_k + shift I when G_k is numerically singular (step 3's check
     * decides whether the result is still orthonormal) */
    const char *call = step == 2 ? "cusolverDnDpotrf (step 2)" : "cusolverDnDpotrf (step 3)";
    GS__LA_TRY(gs__gram_copy(s, tm, k->a[0].data + k->a[0].off, nn));
    st = gs__gram_chol(solver, s, sc, tm, n, call);
    if (st == GS_ERR_NUMERIC) {
        double tr = 0.0;
        GS__LA_BLAS(cublasDasum(blas, n, k->a[0].data + k->a[0].off, n + 1, &tr));
        GS__LA_TRY(gs__gram_copy(s, tm, k->a[0].data + k->a[0].off, nn));
        GS__LA_TRY(gs__cuda_gram_add_diag(s, tm, n, gs_la_gram_shift(k->m, n, tr)));
        st = gs__gram_chol(solver, s, sc, tm, n, call);
    }
    if (st != GS_OK) goto fail;
    /* Racc = R_k Racc (row-major) = column-major Racc^T R_k^T: trmm right, lower, into E */
    GS__LA_BLAS(cublasDtrmm(blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                            CUBLAS_DIAG_NON_UNIT, n, n, &one, tm, n, racc, n, sc->e, n));
    GS__LA_TRY(gs__gram_copy(s, racc, sc->e, nn));
    hdr[GS_LA_H_SKIP] = 0.0;
    if (step == 2) {
        hdr[GS_LA_H_APPLY] = GS_LA_APPLY_TRSM;
        return GS_OK;
    }
    /* SVD of Racc: E (Racc's storage) = V S U_r^T column-major; V -> vt, U_r^T -> W */
    GS__LA_SOLVER(cusolverDnDgesvd(solver, 'A', 'A', n, n, sc->e, n, sv, vt, n, sc->w, n,
                                   sc->work, sc->lwork - n, sc->work + (sc->lwork - n), sc->info));
    GS__LA_TRY(gs__gram_info(s, sc->info, "cusolverDnDgesvd"));
    /* T = R_3^-1 U_r: W's storage is row-major U_r = column-major U_r^T; solve
     * X R_3^T = U_r^T (right, lower) in place, then W row-major is T */
    GS__LA_BLAS(cublasDtrsm(blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                            CUBLAS_DIAG_NON_UNIT, n, n, &one, tm, n, sc->w, n));
    GS__LA_TRY(gs__gram_copy(s, tm, sc->w, nn));
    hdr[GS_LA_H_APPLY] = GS_LA_APPLY_GEMM;
    hdr[GS_LA_H_SKIP] = 1.0;
    return GS_OK;
fail:
    return st;
}

/* Steps 2 and 3 when the previous state is on the fast path: the state passes through with
 * its header updated, without scratch or a synchronisation after the copy. *done_p = 0 (and
 * nothing enqueued) otherwise. */
static gs_status_t gs__gram_pass_fast(cudaStream_t s, const gs_klinalg_t *k, int *done_p)
{
    gs_status_t st = GS_OK;
    double hdr[GS_LA_STATE_HDR];
    const double *prev = k->b[0].data + k->b[0].off;
    *done_p = 0;
    GS__LA_TRY(gs__gram_read(s, prev, hdr, GS_LA_STATE_HDR));
    if (!gs__la_step_hdr(hdr, (int)k->alpha)) return GS_OK;
    GS__LA_TRY(gs__gram_copy(s, k->out, prev, (size_t)GS_LA_STATE_LEN(k->n)));
    GS__LA_TRY(gs__cuda_gram_hdr(s, k->out, hdr));
    *done_p = 1;
    return GS_OK;
fail:
    return st;
}

/* @a g (n x n) = a[0] + a[1] + ... of GSTEP @a k, added in order. */
static gs_status_t gs__gram_sum_terms(cublasHandle_t blas, cudaStream_t s, const gs_klinalg_t *k,
                                      double *g)
{
    gs_status_t st = GS_OK;
    const double one = 1.0;
    const int n = (int)k->n;
    GS__LA_TRY(gs__gram_copy(s, g, k->a[0].data + k->a[0].off, (size_t)n * (size_t)n));
    for (int32_t t = 1; t < k->nterms; t++)
        GS__LA_BLAS(cublasDgeam(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, &one, g, n, &one,
                                k->a[t].data + k->a[t].off, n, g, n));
    return GS_OK;
fail:
    return st;
}

static gs_status_t gs__gram_gstep(cublasHandle_t blas, cusolverDnHandle_t solver,
                                  gs__cuda_arena_t *arena, cudaStream_t s, const gs_klinalg_t *k)
{
    gs_status_t st;
    gs__gram_scratch_t sc;
    gs_klinalg_t k1;   /* k reading the summed G, when there are several partial Grams */
    double hdr[GS_LA_STATE_HDR];
    cudaError_t e;
    memset(hdr, 0, sizeof(hdr));
    for (int32_t t = 0; t < k->nterms; t++)
        if (k->a[t].ld != k->n)
            return gs_error_set(GS_ERR_INVALID_PARAM, "cuda linalg gstep: the Gram matrix view "
                                "a[%d] must be dense (ld %lld, n %lld)", (int)t,
                                (long long)k->a[t].ld, (long long)k->n);
    if (k->alpha != 1.0) {
        int done = 0;
        if ((st = gs__gram_pass_fast(s, k, &done)) != GS_OK || done) return st;
    }
    if ((st = gs__gram_scratch_get(solver, arena, (int)k->n, &sc)) != GS_OK) return st;
    if (k->nterms > 1) {
        st = gs__gram_sum_terms(blas, s, k, sc.g);
        k1 = *k;
        k1.a[0].data = sc.g;
        k1.a[0].off = 0;
        k1.a[0].len = k->n * k->n;
        k1.nterms = 1;
        k = &k1;
    }
    if (st == GS_OK && k->alpha == 1.0) st = gs__gram_step1(solver, s, &sc, k, hdr);
    else if (st == GS_OK) st = gs__gram_step(blas, solver, s, &sc, k, hdr);
    if (st == GS_OK) st = gs__cuda_gram_hdr(s, k->out, hdr);
    /* the scratch goes back once the work that uses it has finished */
    e = cudaStreamSynchronize(s);
    if (e != cudaSuccess && st == GS_OK) st = gs__gram_cuda(e, "gram step: cudaStreamSynchronize");
    else if (e != cudaSuccess) (void)cudaGetLastError();
    if (gs__cuda_arena_free(arena, sc.base) != GS_OK)
        GS_LOG_ERROR("cuda linalg gstep: freeing scratch: %s", gs_last_error());
    return st;
}

gs_status_t gs__cuda_la_gram(void *blas, void *solver, gs__cuda_arena_t *arena, void *stream,
                             const gs_klinalg_t *k)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (k->m > INT_MAX || k->n > INT_MAX / 8)
        return gs_error_set(GS_ERR_UNSUPPORTED, "cuda linalg: m %lld / n %lld exceed the 32-bit "
                            "dimensions of cuBLAS/cuSOLVER", (long long)k->m, (long long)k->n);
    for (int32_t t = 0; t < k->nterms; t++)
        if (k->a[t].ld > INT_MAX)
            return gs_error_set(GS_ERR_UNSUPPORTED, "cuda linalg: a[%d].ld %lld exceeds 32 bits",
                                (int)t, (long long)k->a[t].ld);
    switch (k->op) {
    case GS_LA_GRAM: return gs__gram_gram((cublasHandle_t)blas, arena, s, k);
    case GS_LA_APPLY: return gs__gram_apply((cublasHandle_t)blas, s, k);
    default: return gs__gram_gstep((cublasHandle_t)blas, (cusolverDnHandle_t)solver, arena, s, k);
    }
}
