/* LINALG on the CUDA backend (see linalg.h): cuBLAS GEMM, cuSOLVER QR and SVD.
 *
 * Layouts. A row-major m x n matrix with row stride ld is, to cuBLAS, the column-major n x m
 * matrix A^T with leading dimension ld.
 *   - GEMM: row-major C = sum op(a) op(b) is column-major C^T = sum op(b)^T op(a)^T, i.e.
 *     cublasDgemm(op_b, op_a, n, m, k, b, ldb, a, lda) straight on the views (no copies);
 *     op_x = T exactly when the view is transposed. Terms add up with beta = 1.
 *   - QR: the stack is transposed into a column-major scratch Ac (m x n, ld m) by a tiled
 *     kernel; cusolverDnDgeqrf; a kernel writes R (row-major, zeros below the diagonal, rows
 *     negated where the diagonal is negative) to out and keeps the signs; cusolverDnDorgqr
 *     turns Ac into Q; a transpose kernel writes Q row-major to out, negating the same columns.
 *   - Tall stacks (m >= 2n): CholeskyQR2 first (gs__la_factor_cqr: syrk/potrf/trsm twice, no
 *     transposes, and for SVD the eigen-decomposition of R^T R when R is well conditioned),
 *     checked after one stream synchronisation; Householder below when the checks fail or
 *     GS_CUDA_QR=householder.
 *   - SVD: QR as above, then the SVD of the small n x n factor: the row-major R written to a
 *     scratch X is column-major R^T = V S U_r^T (A = Q R = (Q U_r) S V^T). Its left vectors,
 *     column-major, are V, which read row-major is Vt: cuSOLVER writes them straight into out.
 *     U = Q U_r, and row-major U is column-major U^T = U_r^T Q^T: one cublasDgemm from the
 *     right vectors of X and Ac into out. S comes descending from cuSOLVER.
 *     The QR first keeps the O(m n^2) part in geqrf/orgqr/GEMM (fast on the GPU); the SVD
 *     proper only sees n x n. Its method: cusolverDnDgesvdj (Jacobi, tolerance = machine
 *     epsilon, the default: faster, see gs__la_svd_method) or cusolverDnDgesvd (QR iteration),
 *     chosen by GS_CUDA_SVD=gesvdj|gesvd in the environment when the stream's state is made.
 *     Both give singular values with errors of order eps * sigma_max (LAPACK's accuracy).
 *     Both block the calling thread for the SVD's duration (cuSOLVER synchronises inside);
 *     GEMM and QR do not block.
 * Scratch: one arena block per call, freed by a stream callback after the work (linalg.h). */
#include "chunkops/cuda/linalg.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GS__LA_NINFO 3
#define GS__LA_POOL 64          /* completion records per pinned block */

enum { GS__LA_SVD_GESVD = 0, GS__LA_SVD_GESVDJ = 1 };
enum { GS__LA_QR_HOUSEHOLDER = 0, GS__LA_QR_CHOLQR2 = 1 };

/* A completion record, in pinned host memory: devInfo words are copied into info[]. */
typedef struct gs__la_rec {
    int info[GS__LA_NINFO];
    int ninfo;
    double stat[2];             /* CholeskyQR2: Gram deviation, squared inverse condition */
    int op;
    int svd_method;
    int64_t m, n;
    struct gs__cuda_la *la;
    uintptr_t scratch;          /* arena block; 0 for none */
    struct gs__la_rec *next;
} gs__la_rec_t;

struct gs__cuda_la {
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    gesvdjInfo_t svdj;          /* GS__LA_SVD_GESVDJ only */
    int svd_method;
    int qr_method;              /* GS__LA_QR_* */
    gs__cuda_arena_t *arena;
    atomic_int *late_err;
    pthread_mutex_t lock;       /* free_recs (completion callbacks return records) */
    gs__la_rec_t *free_recs;
    void **blocks;              /* pinned record blocks */
    int nblocks, capblocks;
};

static pthread_mutex_t gs__la_create_lock = PTHREAD_MUTEX_INITIALIZER;

gs_status_t gs__cuda_la_blas_error(int s, const char *call)
{
    if (s == CUBLAS_STATUS_ALLOC_FAILED)
        return gs_error_set(GS_ERR_NO_DEVICE_MEMORY, "cuda linalg: %s could not allocate", call);
    return gs_error_set(GS_ERR_CUDA, "cuda linalg: %s failed: %s (%d)", call,
                        cublasGetStatusString((cublasStatus_t)s), s);
}

gs_status_t gs__cuda_la_solver_error(int s, const char *call)
{
    if (s == CUSOLVER_STATUS_ALLOC_FAILED)
        return gs_error_set(GS_ERR_NO_DEVICE_MEMORY, "cuda linalg: %s could not allocate", call);
    return gs_error_set(GS_ERR_CUDA, "cuda linalg: %s failed: cusolverStatus_t %d", call, s);
}

/* The SVD method for the n x n factor: gesvdj (Jacobi, tolerance machine epsilon) unless
 * GS_CUDA_SVD=gesvd. Measured on an H100 (gs-kbench, whole SVD incl. QR and GEMM):
 * 20000 x 1000: gesvdj 108 ms, gesvd 188 ms; 2000 x 2000: gesvdj 364 ms, gesvd 462 ms; both
 * agree with LAPACK to 1e-12 * S[0]. Both routines block the calling thread until they finish
 * (they synchronise internally; enqueue time = wall time in gs-kbench). */
/* The QR method for tall stacks (m >= 2n): CholeskyQR2 with checks and a Householder fallback
 * (gs__la_factor_cqr) unless GS_CUDA_QR=householder. */
static int gs__la_qr_method(void)
{
    const char *e = getenv("GS_CUDA_QR");
    if (e != NULL && strcmp(e, "householder") == 0) return GS__LA_QR_HOUSEHOLDER;
    if (e != NULL && strcmp(e, "cholqr2") != 0 && e[0] != '\0')
        GS_LOG_WARN("GS_CUDA_QR=%s is not householder or cholqr2: using cholqr2", e);
    return GS__LA_QR_CHOLQR2;
}

static int gs__la_svd_method(void)
{
    const char *e = getenv("GS_CUDA_SVD");
    if (e != NULL && strcmp(e, "gesvd") == 0) return GS__LA_SVD_GESVD;
    if (e != NULL && strcmp(e, "gesvdj") != 0 && e[0] != '\0')
        GS_LOG_WARN("GS_CUDA_SVD=%s is not gesvd or gesvdj: using gesvdj", e);
    return GS__LA_SVD_GESVDJ;
}

void gs__cuda_la_destroy(struct gs__cuda_la *la)
{
    if (la == NULL) return;
    if (la->svdj != NULL) cusolverDnDestroyGesvdjInfo(la->svdj);
    if (la->solver != NULL) cusolverDnDestroy(la->solver);
    if (la->blas != NULL) cublasDestroy(la->blas);
    for (int i = 0; i < la->nblocks; i++)
        if (cudaFreeHost(la->blocks[i]) != cudaSuccess) (void)cudaGetLastError();
    gs_free(la->blocks);
    pthread_mutex_destroy(&la->lock);
    gs_free(la);
}

static gs_status_t gs__la_create(void *cuda_stream, gs__cuda_arena_t *arena, void *late_err,
                                 struct gs__cuda_la **la_p)
{
    gs_status_t st;
    cublasStatus_t bs;
    cusolverStatus_t ss;
    struct gs__cuda_la *la = gs_calloc(1, sizeof(*la), "cuda linalg state");
    if (la == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cuda linalg: out of memory");
    if (pthread_mutex_init(&la->lock, NULL) != 0) {
        gs_free(la);
        return gs_error_set(GS_ERR_NO_RESOURCE, "cuda linalg: pthread_mutex_init failed");
    }
    la->arena = arena;
    la->late_err = (atomic_int *)late_err;
    la->svd_method = gs__la_svd_method();
    la->qr_method = gs__la_qr_method();
    if ((bs = cublasCreate(&la->blas)) != CUBLAS_STATUS_SUCCESS) {
        la->blas = NULL;
        st = gs__cuda_la_blas_error((int)bs, "cublasCreate");
        goto err;
    }
    if ((bs = cublasSetStream(la->blas, (cudaStream_t)cuda_stream)) != CUBLAS_STATUS_SUCCESS) {
        st = gs__cuda_la_blas_error((int)bs, "cublasSetStream");
        goto err;
    }
    if ((ss = cusolverDnCreate(&la->solver)) != CUSOLVER_STATUS_SUCCESS) {
        la->solver = NULL;
        st = gs__cuda_la_solver_error((int)ss, "cusolverDnCreate");
        goto err;
    }
    if ((ss = cusolverDnSetStream(la->solver, (cudaStream_t)cuda_stream)) !=
        CUSOLVER_STATUS_SUCCESS) {
        st = gs__cuda_la_solver_error((int)ss, "cusolverDnSetStream");
        goto err;
    }
    if (la->svd_method == GS__LA_SVD_GESVDJ) {
        if ((ss = cusolverDnCreateGesvdjInfo(&la->svdj)) != CUSOLVER_STATUS_SUCCESS) {
            la->svdj = NULL;
            st = gs__cuda_la_solver_error((int)ss, "cusolverDnCreateGesvdjInfo");
            goto err;
        }
        /* tolerance: machine epsilon (the default, set explicitly); up to 100 sweeps */
        if ((ss = cusolverDnXgesvdjSetTolerance(la->svdj, 0x1.0p-52)) != CUSOLVER_STATUS_SUCCESS ||
            (ss = cusolverDnXgesvdjSetMaxSweeps(la->svdj, 100)) != CUSOLVER_STATUS_SUCCESS ||
            (ss = cusolverDnXgesvdjSetSortEig(la->svdj, 1)) != CUSOLVER_STATUS_SUCCESS) {
            st = gs__cuda_la_solver_error((int)ss, "cusolverDnXgesvdjSet*");
            goto err;
        }
    }
    *la_p = la;
    return GS_OK;
err:
    gs__cuda_la_destroy(la);
    return st;
}

/* A free completion record (a new pinned block of GS__LA_POOL when none is free). */
static gs_status_t gs__la_rec_get(struct gs__cuda_la *la, gs__la_rec_t **rec_p)
{
    pthread_mutex_lock(&la->lock);
    gs__la_rec_t *r = la->free_recs;
    if (r != NULL) la->free_recs = r->next;
    pthread_mutex_unlock(&la->lock);
    if (r == NULL) {
        void *blk = NULL;
        if (la->nblocks == la->capblocks) {
            int cap = la->capblocks ? la->capblocks * 2 : 4;
            void **nb = gs_realloc(la->blocks, (size_t)cap * sizeof(*nb), "cuda linalg blocks");
            if (nb == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cuda linalg: out of memory");
            la->blocks = nb;
            la->capblocks = cap;
        }
        cudaError_t e = cudaHostAlloc(&blk, GS__LA_POOL * sizeof(gs__la_rec_t),
                                      cudaHostAllocDefault);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return gs__cuda_error((int)e, "cudaHostAlloc(linalg completion records)");
        }
        la->blocks[la->nblocks++] = blk;
        gs__la_rec_t *recs = blk;
        pthread_mutex_lock(&la->lock);
        for (int i = 1; i < GS__LA_POOL; i++) {
            recs[i].next = la->free_recs;
            la->free_recs = &recs[i];
        }
        pthread_mutex_unlock(&la->lock);
        r = &recs[0];
    }
    memset(r, 0, sizeof(*r));
    r->la = la;
    *rec_p = r;
    return GS_OK;
}

static void gs__la_rec_put(struct gs__cuda_la *la, gs__la_rec_t *r)
{
    pthread_mutex_lock(&la->lock);
    r->next = la->free_recs;
    la->free_recs = r;
    pthread_mutex_unlock(&la->lock);
}

static const char *gs__la_info_name(const gs__la_rec_t *r, int i)
{
    if (i == 0) return "cusolverDnDgeqrf";
    if (i == 1) return "cusolverDnDorgqr";
    return r->svd_method == GS__LA_SVD_GESVDJ ? "cusolverDnDgesvdj" : "cusolverDnDgesvd";
}

/* Stream callback after a QR/SVD: check devInfo, free the scratch, recycle the record.
 * Runs on a CUDA runtime thread: no CUDA calls here. */
static void CUDART_CB gs__la_done_cb(cudaStream_t cs, cudaError_t err, void *ud)
{
    gs__la_rec_t *r = ud;
    struct gs__cuda_la *la = r->la;
    (void)cs;
    if (err == cudaSuccess) {
        for (int i = 0; i < r->ninfo; i++) {
            if (r->info[i] == 0) continue;
            gs_status_t st = r->info[i] < 0 ? GS_ERR_INTERNAL : GS_ERR_NUMERIC;
            GS_LOG_ERROR("cuda linalg %s of a %lld x %lld stack: %s returned info %d (%s)",
                         r->op == GS_LA_QR ? "qr" : "svd", (long long)r->m, (long long)r->n,
                         gs__la_info_name(r, i), r->info[i],
                         r->info[i] < 0 ? "an invalid argument" : "no convergence");
            int expected = GS_OK;
            atomic_compare_exchange_strong(la->late_err, &expected, (int)st);
            break;
        }
    }
    if (r->scratch != 0 && gs__cuda_arena_free(la->arena, r->scratch) != GS_OK)
        GS_LOG_ERROR("cuda linalg: freeing scratch: %s", gs_last_error());
    gs__la_rec_put(la, r);
}

static int gs__la_int(int64_t v)
{
    return v >= 0 && v <= INT_MAX;
}

static gs_status_t gs__la_too_big(const char *op, const char *what, int64_t v)
{
    return gs_error_set(GS_ERR_UNSUPPORTED,
                        "cuda linalg %s: %s %lld exceeds the 32-bit dimensions of cuBLAS/cuSOLVER",
                        op, what, (long long)v);
}

static gs_status_t gs__la_gemm(struct gs__cuda_la *la, cudaStream_t s, const gs_klinalg_t *k)
{
    gs_status_t st = GS_OK;
    const double zero = 0.0, one = 1.0;
    const int64_t m = k->m, n = k->n;
    int first = 1;
    if (m == 0 || n == 0) return GS_OK;
    if (!gs__la_int(m)) return gs__la_too_big("gemm", "m", m);
    if (!gs__la_int(n)) return gs__la_too_big("gemm", "n", n);
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t], *b = &k->b[t];
        int64_t kk = a->trans ? a->rows : a->cols;
        if (!gs__la_int(kk)) return gs__la_too_big("gemm", "inner dimension", kk);
        if (!gs__la_int(a->ld)) return gs__la_too_big("gemm", "a.ld", a->ld);
        if (!gs__la_int(b->ld)) return gs__la_too_big("gemm", "b.ld", b->ld);
    }
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t], *b = &k->b[t];
        int64_t kk = a->trans ? a->rows : a->cols;
        if (kk == 0) continue;
        GS__LA_BLAS(cublasDgemm(la->blas, b->trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                                a->trans ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)kk,
                                &k->alpha, b->data + b->off, (int)b->ld, a->data + a->off,
                                (int)a->ld, first ? &zero : &one, k->out, (int)n));
        first = 0;
    }
    if (first) {
        cudaError_t e = cudaMemsetAsync(k->out, 0, (size_t)m * (size_t)n * sizeof(double), s);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return gs__cuda_error((int)e, "cudaMemsetAsync(linalg gemm zeros)");
        }
    }
    return GS_OK;
fail:
    return st;
}

/* Byte offsets of a scratch layout, each rounded to the arena unit. */
static size_t gs__la_take(size_t *cur, size_t nbytes)
{
    size_t off = *cur;
    *cur += (nbytes + GS__ARENA_UNIT - 1) / GS__ARENA_UNIT * GS__ARENA_UNIT;
    return off;
}

/* Failure path of a factorisation: scratch and record go back once the work already enqueued
 * (@a enqueued) has finished (a completion callback; a synchronisation when even that cannot be
 * registered, unless @a synced). Returns @a st. */
static gs_status_t gs__la_abandon(struct gs__cuda_la *la, cudaStream_t s, gs__la_rec_t *rec,
                                  uintptr_t base, int enqueued, int synced, gs_status_t st)
{
    if (rec != NULL) rec->ninfo = 0;
    if (enqueued && rec != NULL && cudaStreamAddCallback(s, gs__la_done_cb, rec, 0) == cudaSuccess)
        return st;
    (void)cudaGetLastError();
    if (enqueued && !synced && cudaStreamSynchronize(s) != cudaSuccess) (void)cudaGetLastError();
    if (rec != NULL) gs__la_rec_put(la, rec);
    if (base != 0 && gs__cuda_arena_free(la->arena, base) != GS_OK)
        GS_LOG_ERROR("cuda linalg: freeing scratch: %s", gs_last_error());
    return st;
}

/* Success path: the devInfo words to the pinned record, then the completion callback that
 * checks them (rec->ninfo of them) and frees the scratch. */
static gs_status_t gs__la_complete(cudaStream_t s, gs__la_rec_t *rec, const int *info)
{
    cudaError_t e = cudaMemcpyAsync(rec->info, info, GS__LA_NINFO * sizeof(int),
                                    cudaMemcpyDeviceToHost, s);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gs__cuda_error((int)e, "cudaMemcpyAsync(linalg devInfo)");
    }
    e = cudaStreamAddCallback(s, gs__la_done_cb, rec, 0);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gs__cuda_error((int)e, "cudaStreamAddCallback(linalg completion)");
    }
    return GS_OK;
}

static gs_status_t gs__la_factor_hh(struct gs__cuda_la *la, cudaStream_t s,
                                    const gs_klinalg_t *k)
{
    gs_status_t st = GS_OK;
    const double zero = 0.0, one = 1.0;
    const int64_t m = k->m, n = k->n;
    const int svd = k->op == GS_LA_SVD;
    const char *opname = svd ? "svd" : "qr";
    int lw_qrf = 0, lw_org = 0, lw_svd = 0;
    uintptr_t base = 0;
    gs__la_rec_t *rec = NULL;
    int enqueued = 0;

    if (!gs__la_int(m)) return gs__la_too_big(opname, "m", m);
    for (int32_t t = 0; t < k->nterms; t++)
        if (k->a[t].rows > 0 && !gs__la_int(k->a[t].ld))
            return gs__la_too_big(opname, "a.ld", k->a[t].ld);
    const int mi = (int)m, ni = (int)n;

    GS__LA_SOLVER(cusolverDnDgeqrf_bufferSize(la->solver, mi, ni, NULL, mi, &lw_qrf));
    GS__LA_SOLVER(cusolverDnDorgqr_bufferSize(la->solver, mi, ni, ni, NULL, mi, NULL, &lw_org));
    if (svd && la->svd_method == GS__LA_SVD_GESVDJ)
        GS__LA_SOLVER(cusolverDnDgesvdj_bufferSize(la->solver, CUSOLVER_EIG_MODE_VECTOR, 0, ni, ni,
                                                   NULL, ni, NULL, NULL, ni, NULL, ni, &lw_svd,
                                                   la->svdj));
    else if (svd)
        GS__LA_SOLVER(cusolverDnDgesvd_bufferSize(la->solver, ni, ni, &lw_svd));
    int lwork = lw_qrf;
    if (lw_org > lwork) lwork = lw_org;
    if (lw_svd > lwork) lwork = lw_svd;
    if (lwork < 1) lwork = 1;

    /* scratch: Ac (m x n) | tau (n) | sgn (n) | X, W (n x n each, SVD) | rwork (n) | work |
     * info */
    size_t sz = 0;
    const size_t o_ac = gs__la_take(&sz, (size_t)m * (size_t)n * sizeof(double));
    const size_t o_tau = gs__la_take(&sz, (size_t)n * sizeof(double));
    const size_t o_sgn = gs__la_take(&sz, (size_t)n * sizeof(double));
    const size_t o_x = svd ? gs__la_take(&sz, (size_t)n * (size_t)n * sizeof(double)) : 0;
    const size_t o_w = svd ? gs__la_take(&sz, (size_t)n * (size_t)n * sizeof(double)) : 0;
    const size_t o_rw = gs__la_take(&sz, (size_t)n * sizeof(double));
    const size_t o_work = gs__la_take(&sz, (size_t)lwork * sizeof(double));
    const size_t o_info = gs__la_take(&sz, GS__LA_NINFO * sizeof(int));
    if ((st = gs__cuda_arena_alloc(la->arena, sz, &base)) != GS_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", gs_last_error());
        return gs_error_set(st, "cuda linalg %s of %lld x %lld: no scratch (%s)", opname,
                            (long long)m, (long long)n, why);
    }
    double *ac = (double *)(base + o_ac), *tau = (double *)(base + o_tau);
    double *sgn = (double *)(base + o_sgn), *x = (double *)(base + o_x);
    double *w = (double *)(base + o_w), *rwork = (double *)(base + o_rw);
    double *work = (double *)(base + o_work);
    int *info = (int *)(base + o_info);
    GS__LA_TRY(gs__la_rec_get(la, &rec));
    rec->op = k->op;
    rec->svd_method = la->svd_method;
    rec->m = m;
    rec->n = n;
    rec->scratch = base;

    enqueued = 1; /* from here on, enqueued work may use the scratch */
    int64_t r0 = 0;
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t];
        GS__LA_TRY(gs__cuda_la_transpose(s, a->data + a->off, a->ld, ac + r0, m, a->rows, n, NULL));
        r0 += a->rows;
    }
    GS__LA_SOLVER(cusolverDnDgeqrf(la->solver, mi, ni, ac, mi, tau, work, lwork, info + 0));
    if (!svd) {
        double *q = k->out, *r = k->out + m * n;
        GS__LA_TRY(gs__cuda_la_extract_r(s, ac, m, n, 1, r, sgn));
        GS__LA_SOLVER(cusolverDnDorgqr(la->solver, mi, ni, ni, ac, mi, tau, work, lwork, info + 1));
        /* q[i * n + j] = ac[i + j * m] * sgn[j] */
        GS__LA_TRY(gs__cuda_la_transpose(s, ac, m, q, n, n, m, sgn));
        rec->ninfo = 2;
    } else {
        double *u = k->out, *sv = k->out + m * n, *vt = sv + n;
        GS__LA_TRY(gs__cuda_la_extract_r(s, ac, m, n, 0, x, NULL));
        GS__LA_SOLVER(cusolverDnDorgqr(la->solver, mi, ni, ni, ac, mi, tau, work, lwork, info + 1));
        /* X = R^T (column-major) = U_x S V_x^T: U_x = V (row-major Vt) into vt; then
         * row-major U = column-major U_r^T Q^T with U_r = V_x */
        if (la->svd_method == GS__LA_SVD_GESVDJ) {
            GS__LA_SOLVER(cusolverDnDgesvdj(la->solver, CUSOLVER_EIG_MODE_VECTOR, 0, ni, ni, x, ni,
                                            sv, vt, ni, w, ni, work, lwork, info + 2, la->svdj));
            GS__LA_BLAS(cublasDgemm(la->blas, CUBLAS_OP_T, CUBLAS_OP_T, ni, mi, ni, &one, w, ni,
                                    ac, mi, &zero, u, ni));
        } else {
            GS__LA_SOLVER(cusolverDnDgesvd(la->solver, 'A', 'A', ni, ni, x, ni, sv, vt, ni, w, ni,
                                           work, lwork, rwork, info + 2));
            GS__LA_BLAS(cublasDgemm(la->blas, CUBLAS_OP_N, CUBLAS_OP_T, ni, mi, ni, &one, w, ni,
                                    ac, mi, &zero, u, ni));
        }
        rec->ninfo = 3;
    }
    if ((st = gs__la_complete(s, rec, info)) != GS_OK) goto fail;
    return GS_OK;

fail:
    return gs__la_abandon(la, s, rec, base, enqueued, 0, st);
}

/* CholeskyQR2 (Yamamoto et al. 2015) for a tall stack, transpose-free: the row-major m x n
 * stack copied densely into X is, column-major, X = A^T (n x m, ld n). Twice:
 *   G = X X^T (syrk) = A^T A;  G = R_k^T R_k (potrf, upper);  R_k^-1 (trsm on I, n^3);
 *   Y = R_k^-T X (one GEMM: tensor-core speed, where a trsm on the m x n block runs at a
 *   fraction of it) = (A R_k^-1)^T
 * ping-ponging X -> Y -> X so X ends as Q^T, i.e. row-major Q, and R = R_2 R_1 (trmm). Checks, after one stream
 * synchronisation: both potrf succeeded and the second Gram matrix is within 0.5 of I
 * elementwise (Q_1 well conditioned, so Q_2 is orthonormal to rounding); otherwise the caller
 * falls back to Householder (*fallback_p = 1, nothing written). Cost: 2 (syrk + trsm) =
 * 2 m n^2 flops of level-3 BLAS, against 4 m n^2 of geqrf + orgqr at panel speed.
 * SVD: with R (n x n) known, R^T R = V L V^T (syevd), S = sqrt(L), U_r = R V S^-1 and
 * U = Q U_r, provided kappa(R)^2 = L_max / L_min <= 1e4 (then S is accurate to ~1e-12
 * relative); otherwise the SVD of R goes to the Jacobi/QR-iteration method as in Householder
 * mode. The synchronisation blocks the calling thread for the factorisation, as cuSOLVER's
 * own routines do. */
static gs_status_t gs__la_factor_cqr(struct gs__cuda_la *la, cudaStream_t s,
                                     const gs_klinalg_t *k, int *fallback_p)
{
    gs_status_t st = GS_OK;
    const double zero = 0.0, one = 1.0;
    const int64_t m = k->m, n = k->n;
    const int svd = k->op == GS_LA_SVD;
    const char *opname = svd ? "svd" : "qr";
    int lw_potrf = 0, lw_eig = 0, lw_svd = 0;
    uintptr_t base = 0;
    gs__la_rec_t *rec = NULL;
    int enqueued = 0, synced = 0;

    *fallback_p = 0;
    if (!gs__la_int(m)) return gs__la_too_big(opname, "m", m);
    const int mi = (int)m, ni = (int)n;
    GS__LA_SOLVER(cusolverDnDpotrf_bufferSize(la->solver, CUBLAS_FILL_MODE_UPPER, ni, NULL, ni,
                                              &lw_potrf));
    if (svd) {
        GS__LA_SOLVER(cusolverDnDsyevd_bufferSize(la->solver, CUSOLVER_EIG_MODE_VECTOR,
                                                  CUBLAS_FILL_MODE_UPPER, ni, NULL, ni, NULL,
                                                  &lw_eig));
        if (la->svd_method == GS__LA_SVD_GESVDJ)
            GS__LA_SOLVER(cusolverDnDgesvdj_bufferSize(la->solver, CUSOLVER_EIG_MODE_VECTOR, 0, ni,
                                                       ni, NULL, ni, NULL, NULL, ni, NULL, ni,
                                                       &lw_svd, la->svdj));
        else
            GS__LA_SOLVER(cusolverDnDgesvd_bufferSize(la->solver, ni, ni, &lw_svd));
    }
    int lwork = lw_potrf;
    if (lw_eig > lwork) lwork = lw_eig;
    if (lw_svd > lwork) lwork = lw_svd;
    if (lwork < 1) lwork = 1;

    /* scratch: X (m x n; QR: out's Q region), Y (m x n) | G, R1, T, Ri (n x n) | SVD: x, w,
     * lam | work | info */
    const size_t nn = (size_t)n * (size_t)n * sizeof(double);
    size_t sz = 0;
    const size_t o_x = svd ? gs__la_take(&sz, (size_t)m * (size_t)n * sizeof(double)) : 0;
    const size_t o_y = gs__la_take(&sz, (size_t)m * (size_t)n * sizeof(double));
    const size_t o_ri = gs__la_take(&sz, nn);
    const size_t o_g = gs__la_take(&sz, nn), o_r1 = gs__la_take(&sz, nn);
    const size_t o_t = gs__la_take(&sz, nn);
    const size_t o_sx = svd ? gs__la_take(&sz, nn) : 0, o_sw = svd ? gs__la_take(&sz, nn) : 0;
    const size_t o_lam = gs__la_take(&sz, (size_t)n * sizeof(double));
    const size_t o_rw = gs__la_take(&sz, (size_t)n * sizeof(double));
    const size_t o_work = gs__la_take(&sz, (size_t)lwork * sizeof(double));
    const size_t o_stat = gs__la_take(&sz, 2 * sizeof(double));
    const size_t o_info = gs__la_take(&sz, GS__LA_NINFO * sizeof(int));
    if ((st = gs__cuda_arena_alloc(la->arena, sz, &base)) != GS_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", gs_last_error());
        return gs_error_set(st, "cuda linalg %s of %lld x %lld: no scratch (%s)", opname,
                            (long long)m, (long long)n, why);
    }
    double *xq = svd ? (double *)(base + o_x) : k->out;
    double *yq = (double *)(base + o_y), *ri = (double *)(base + o_ri);
    double *g = (double *)(base + o_g), *r1 = (double *)(base + o_r1);
    double *t = (double *)(base + o_t), *sx = (double *)(base + o_sx);
    double *sw = (double *)(base + o_sw), *lam = (double *)(base + o_lam);
    double *rwork = (double *)(base + o_rw), *work = (double *)(base + o_work);
    double *stat = (double *)(base + o_stat);
    int *info = (int *)(base + o_info);
    GS__LA_TRY(gs__la_rec_get(la, &rec));
    rec->op = k->op;
    rec->svd_method = la->svd_method;
    rec->m = m;
    rec->n = n;
    rec->scratch = base;

    enqueued = 1;
    {
        cudaError_t e = cudaMemsetAsync(info, 0, GS__LA_NINFO * sizeof(int), s);
        int64_t r0 = 0;
        for (int32_t i = 0; i < k->nterms && e == cudaSuccess; i++) {
            const gs_kmat_t *a = &k->a[i];
            if (a->rows > 0)
                e = cudaMemcpy2DAsync(xq + r0 * n, (size_t)n * sizeof(double), a->data + a->off,
                                      (size_t)a->ld * sizeof(double), (size_t)n * sizeof(double),
                                      (size_t)a->rows, cudaMemcpyDeviceToDevice, s);
            r0 += a->rows;
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = gs__cuda_error((int)e, "cudaMemcpy2DAsync(linalg stack)");
            goto fail;
        }
    }
    for (int it = 0; it < 2; it++) {
        GS__LA_BLAS(cublasDsyrk(la->blas, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, ni, mi, &one,
                                it == 0 ? xq : yq, ni, &zero, g, ni));
        if (it == 1) GS__LA_TRY(gs__cuda_la_gram_dev(s, g, n, stat + 0));
        GS__LA_SOLVER(cusolverDnDpotrf(la->solver, CUBLAS_FILL_MODE_UPPER, ni, g, ni, work, lwork,
                                       info + it));
        /* Ri = R_k^-1; then (it 0) Y = Ri^T X, (it 1) X = Ri^T Y */
        GS__LA_TRY(gs__cuda_la_eye(s, ri, n));
        GS__LA_BLAS(cublasDtrsm(la->blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N,
                                CUBLAS_DIAG_NON_UNIT, ni, ni, &one, g, ni, ri, ni));
        GS__LA_BLAS(cublasDgemm(la->blas, CUBLAS_OP_T, CUBLAS_OP_N, ni, mi, ni, &one, ri, ni,
                                it == 0 ? xq : yq, ni, &zero, it == 0 ? yq : xq, ni));
        if (it == 0) GS__LA_TRY(gs__cuda_la_triu(s, g, n, n, r1));
    }
    /* T = R_2 R_1 (column-major, upper; zeros below since R_1 has them) */
    GS__LA_BLAS(cublasDtrmm(la->blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N,
                            CUBLAS_DIAG_NON_UNIT, ni, ni, &one, g, ni, r1, ni, t, ni));
    if (svd) {
        double *sv = k->out + m * n, *vt = sv + n;
        /* R^T R = T^T T; eigenvectors into g */
        GS__LA_BLAS(cublasDsyrk(la->blas, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T, ni, ni, &one, t, ni,
                                &zero, g, ni));
        GS__LA_SOLVER(cusolverDnDsyevd(la->solver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER,
                                       ni, g, ni, lam, work, lwork, info + 2));
        /* V (column-major) = row-major Vt into vt; S descending */
        GS__LA_TRY(gs__cuda_la_eig_order(s, g, lam, n, vt, sv));
        /* W = T V S^-1 = U_r */
        GS__LA_BLAS(cublasDgemm(la->blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, t, ni, vt,
                                ni, &zero, sw, ni));
        GS__LA_TRY(gs__cuda_la_scale_cols(s, sw, sv, n, stat + 1));
    }
    {
        cudaError_t e = cudaMemcpyAsync(rec->info, info, GS__LA_NINFO * sizeof(int),
                                        cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(rec->stat, stat, 2 * sizeof(double), cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = gs__cuda_error((int)e, "cholqr2 checks (cudaMemcpyAsync/cudaStreamSynchronize)");
            goto fail;
        }
        synced = 1;
    }
    if (rec->info[0] != 0 || rec->info[1] != 0 || !(rec->stat[0] <= 0.5)) {
        GS_LOG_DEBUG("cuda linalg %s of %lld x %lld: CholeskyQR2 not accurate here (potrf info "
                     "%d/%d, Gram deviation %g); Householder QR instead", opname, (long long)m,
                     (long long)n, rec->info[0], rec->info[1], rec->stat[0]);
        *fallback_p = 1;
        gs__la_rec_put(la, rec);
        if (gs__cuda_arena_free(la->arena, base) != GS_OK)
            GS_LOG_ERROR("cuda linalg: freeing scratch: %s", gs_last_error());
        return GS_OK;
    }
    if (!svd) {
        GS__LA_TRY(gs__cuda_la_extract_r(s, t, n, n, 0, k->out + m * n, NULL));
        rec->ninfo = 0;
    } else if (rec->info[2] == 0 && rec->stat[1] >= 1e-4) {
        /* U = Q U_r: row-major U = column-major U_r^T Q^T = W^T X */
        GS__LA_BLAS(cublasDgemm(la->blas, CUBLAS_OP_T, CUBLAS_OP_N, ni, mi, ni, &one, sw, ni, xq,
                                ni, &zero, k->out, ni));
        rec->ninfo = 0;
    } else {
        /* ill-conditioned R: its SVD by Jacobi / QR iteration, as in Householder mode.
         * sx = row-major R = column-major R^T = U_x S V_x^T: V = U_x (row-major Vt), U_r = V_x */
        double *sv = k->out + m * n, *vt = sv + n;
        GS__LA_TRY(gs__cuda_la_extract_r(s, t, n, n, 0, sx, NULL));
        if (la->svd_method == GS__LA_SVD_GESVDJ) {
            GS__LA_SOLVER(cusolverDnDgesvdj(la->solver, CUSOLVER_EIG_MODE_VECTOR, 0, ni, ni, sx, ni,
                                            sv, vt, ni, sw, ni, work, lwork, info + 2, la->svdj));
            GS__LA_BLAS(cublasDgemm(la->blas, CUBLAS_OP_T, CUBLAS_OP_N, ni, mi, ni, &one, sw, ni,
                                    xq, ni, &zero, k->out, ni));
        } else {
            GS__LA_SOLVER(cusolverDnDgesvd(la->solver, 'A', 'A', ni, ni, sx, ni, sv, vt, ni, sw, ni,
                                           work, lwork, rwork, info + 2));
            /* gesvd returns V_x^T in sw */
            GS__LA_BLAS(cublasDgemm(la->blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, mi, ni, &one, sw, ni,
                                    xq, ni, &zero, k->out, ni));
        }
        rec->ninfo = 3;   /* potrf's two words are 0 (checked above) */
    }
    if ((st = gs__la_complete(s, rec, info)) != GS_OK) goto fail;
    return GS_OK;

fail:
    return gs__la_abandon(la, s, rec, base, enqueued, synced, st);
}

static gs_status_t gs__la_factor(struct gs__cuda_la *la, cudaStream_t s, const gs_klinalg_t *k)
{
    if (la->qr_method == GS__LA_QR_CHOLQR2 && k->m >= 2 * k->n) {
        int fallback = 0;
        gs_status_t st = gs__la_factor_cqr(la, s, k, &fallback);
        if (st != GS_OK || !fallback) return st;
    }
    return gs__la_factor_hh(la, s, k);
}

gs_status_t gs__cuda_linalg_run(struct gs__cuda_la **la_p, void *cuda_stream,
                                gs__cuda_arena_t *arena, void *late_err, const gs_klinalg_t *k)
{
    gs_status_t st = GS_OK;
    pthread_mutex_lock(&gs__la_create_lock);
    struct gs__cuda_la *la = *la_p;
    if (la == NULL && (st = gs__la_create(cuda_stream, arena, late_err, &la)) == GS_OK) *la_p = la;
    pthread_mutex_unlock(&gs__la_create_lock);
    if (st != GS_OK) return st;
    if (k->op == GS_LA_GEMM) return gs__la_gemm(la, (cudaStream_t)cuda_stream, k);
    if (k->op >= GS_LA_GRAM)
        return gs__cuda_la_gram(la->blas, la->solver, la->arena, cuda_stream, k);
    return gs__la_factor(la, (cudaStream_t)cuda_stream, k);
}
