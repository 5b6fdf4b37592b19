/* CPU backend: dense linear algebra (graph/kernel.h, LINALG) over OpenBLAS and LAPACKE.
 *
 * Layouts. Views are row-major; LAPACK is column-major. A row-major m x n matrix with row
 * stride ld is the column-major n x m matrix X = A^T with leading dimension ld, so:
 *   - GEMM: cblas_dgemm in CblasRowMajor straight on the views (ld, trans flags); the terms are
 *     summed by beta = 1 after the first.
 *   - QR: the stack is copied into out's Q region (row-major m x n, ld n), which LAPACK sees
 *     as X = A^T (n x m, ld n). dgelqf gives X = L Q', i.e. A = Q'^T L^T = Q R with R = L^T;
 *     L (column-major lower) occupies exactly the row-major upper triangle of the first n x n
 *     block, and dorglq overwrites X with Q', which read row-major is Q. No m x n scratch.
 *     Signs: R's row j and Q's column j are negated where R[j][j] < 0.
 *   - SVD: the stack is copied into an m x n scratch X = A^T (n x m); dgesdd (jobz 'S') gives
 *     X = U_x S V_x^T, i.e. A = V_x S U_x^T: column-major V_x^T (n x m, ld n) read row-major is
 *     U (m x n) and column-major U_x (n x n) read row-major is Vt, so LAPACK writes both
 *     straight into out. S comes descending from LAPACK.
 * Only the _work LAPACKE entry points are used (the others allocate with malloc); workspace
 * comes from gs_malloc after a workspace query.
 *
 * Threads: OpenBLAS (Debian 12: 0.3.21, pthread build) has only the process-wide
 * openblas_set_num_threads() (the per-call openblas_set_num_threads_local() came in 0.3.27).
 * gs__cpu_linalg_threads() sets it from params.nthreads when a cpu context is created: the
 * worker's pool mode creates its context with nthreads 1 and runs one kernel per pool thread,
 * so BLAS never oversubscribes the cores; tools that run one kernel at a time pass more.
 * With several contexts in one process the last one created sets the count. */
#include "chunkops/cpu/cpu.h"
#include "common/alloc.h"
#include "common/error.h"

#include <cblas.h>
#include <lapacke.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

void gs__cpu_linalg_threads(int nthreads)
{
    openblas_set_num_threads(nthreads > 0 ? nthreads : 1);
}

/* BLAS/LAPACK take 32-bit dimensions (LP64 builds). */
static int gs__la_fits_int(int64_t v)
{
    return v >= 0 && v <= INT_MAX;
}

static gs_status_t gs__la_too_big(const char *op, const char *what, int64_t v)
{
    return gs_error_set(GS_ERR_UNSUPPORTED,
                        "cpu linalg %s: %s %lld exceeds the 32-bit dimensions of BLAS/LAPACK", op,
                        what, (long long)v);
}

static gs_status_t gs__la_gemm(const gs_klinalg_t *k)
{
    const int64_t m = k->m, n = k->n;
    int first = 1;
    if (m == 0 || n == 0) return GS_OK;
    if (!gs__la_fits_int(m)) return gs__la_too_big("gemm", "m", m);
    if (!gs__la_fits_int(n)) return gs__la_too_big("gemm", "n", n);
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t], *b = &k->b[t];
        int64_t kk = a->trans ? a->rows : a->cols;
        if (!gs__la_fits_int(kk)) return gs__la_too_big("gemm", "inner dimension", kk);
        if (!gs__la_fits_int(a->ld)) return gs__la_too_big("gemm", "a.ld", a->ld);
        if (!gs__la_fits_int(b->ld)) return gs__la_too_big("gemm", "b.ld", b->ld);
    }
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t], *b = &k->b[t];
        int64_t kk = a->trans ? a->rows : a->cols;
        if (kk == 0) continue; /* an empty product adds nothing */
        cblas_dgemm(CblasRowMajor, a->trans ? CblasTrans : CblasNoTrans,
                    b->trans ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)kk, k->alpha,
                    a->data + a->off, (int)a->ld, b->data + b->off, (int)b->ld,
                    first ? 0.0 : 1.0, k->out, (int)n);
        first = 0;
    }
    if (first) memset(k->out, 0, (size_t)m * (size_t)n * sizeof(double));
    return GS_OK;
}

/* Copy the vertical stack of k->a[] into dst (row-major m x n, ld n). */
static void gs__la_stack(const gs_klinalg_t *k, double *dst)
{
    const int64_t n = k->n;
    int64_t r0 = 0;
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t];
        if (a->rows == 0) continue;
        if (a->ld == n) {
            memcpy(dst + r0 * n, a->data + a->off, (size_t)(a->rows * n) * sizeof(double));
        } else {
            for (int64_t r = 0; r < a->rows; r++)
                memcpy(dst + (r0 + r) * n, a->data + a->off + r * a->ld,
                       (size_t)n * sizeof(double));
        }
        r0 += a->rows;
    }
}

static gs_status_t gs__la_lapack_fail(const char *op, const char *call, lapack_int info)
{
    if (info < 0)
        return gs_error_set(GS_ERR_INTERNAL, "cpu linalg %s: %s rejected argument %d", op, call,
                            (int)-info);
    return gs_error_set(GS_ERR_NUMERIC, "cpu linalg %s: %s did not converge (info %d)", op, call,
                        (int)info);
}

static gs_status_t gs__la_qr(const gs_klinalg_t *k)
{
    const int64_t m = k->m, n = k->n;
    double *q = k->out, *r = k->out + m * n;
    double *tau = NULL, *work = NULL, wq1 = 0.0, wq2 = 0.0;
    lapack_int info;
    gs_status_t st = GS_OK;

    if (!gs__la_fits_int(m)) return gs__la_too_big("qr", "m", m);
    gs__la_stack(k, q);
    tau = gs_malloc((size_t)n * sizeof(double), "linalg qr tau");
    if (tau == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "cpu linalg qr: out of memory (tau)");
    /* X = A^T is n x m, column-major, ld n */
    info = LAPACKE_dgelqf_work(LAPACK_COL_MAJOR, (lapack_int)n, (lapack_int)m, q, (lapack_int)n,
                               tau, &wq1, -1);
    if (info != 0) {
        st = gs__la_lapack_fail("qr", "dgelqf (workspace query)", info);
        goto out;
    }
    info = LAPACKE_dorglq_work(LAPACK_COL_MAJOR, (lapack_int)n, (lapack_int)m, (lapack_int)n, q,
                               (lapack_int)n, tau, &wq2, -1);
    if (info != 0) {
        st = gs__la_lapack_fail("qr", "dorglq (workspace query)", info);
        goto out;
    }
    double wq = wq1 > wq2 ? wq1 : wq2;
    if (!(wq >= 1.0) || wq > (double)INT_MAX) wq = wq >= 1.0 ? (double)INT_MAX : 1.0;
    lapack_int lwork = (lapack_int)wq;
    work = gs_malloc((size_t)lwork * sizeof(double), "linalg qr work");
    if (work == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "cpu linalg qr: out of memory (%d doubles of work)",
                          (int)lwork);
        goto out;
    }
    info = LAPACKE_dgelqf_work(LAPACK_COL_MAJOR, (lapack_int)n, (lapack_int)m, q, (lapack_int)n,
                               tau, work, lwork);
    if (info != 0) {
        st = gs__la_lapack_fail("qr", "dgelqf", info);
        goto out;
    }
    /* R = L^T: row-major R[i][j] (j >= i) = L[j][i] = X[j + i * n] = q[i * n + j] */
    for (int64_t i = 0; i < n; i++) {
        double *ri = r + i * n;
        memset(ri, 0, (size_t)i * sizeof(double));
        memcpy(ri + i, q + i * n + i, (size_t)(n - i) * sizeof(double));
    }
    info = LAPACKE_dorglq_work(LAPACK_COL_MAJOR, (lapack_int)n, (lapack_int)m, (lapack_int)n, q,
                               (lapack_int)n, tau, work, lwork);
    if (info != 0) {
        st = gs__la_lapack_fail("qr", "dorglq", info);
        goto out;
    }
    /* R's diagonal >= 0: negate R's row j and Q's column j together (Q R is unchanged) */
    int any = 0;
    for (int64_t j = 0; j < n; j++) {
        if (r[j * n + j] < 0.0) {
            tau[j] = -1.0; /* reused as the sign vector */
            any = 1;
            for (int64_t c = j; c < n; c++) r[j * n + c] = -r[j * n + c];
        } else {
            tau[j] = 1.0;
        }
    }
    if (any) {
        for (int64_t i = 0; i < m; i++) {
            double *qi = q + i * n;
            for (int64_t j = 0; j < n; j++) qi[j] *= tau[j];
        }
    }
out:
    gs_free(work);
    gs_free(tau);
    return st;
}

static gs_status_t gs__la_svd(const gs_klinalg_t *k)
{
    const int64_t m = k->m, n = k->n;
    double *u = k->out, *s = k->out + m * n, *vt = s + n;
    double *x = NULL, *work = NULL, wq = 0.0;
    lapack_int *iwork = NULL, info;
    gs_status_t st = GS_OK;

    if (!gs__la_fits_int(m)) return gs__la_too_big("svd", "m", m);
    if ((uint64_t)n > (uint64_t)INT_MAX / 8) return gs__la_too_big("svd", "n", n);
    x = gs_malloc((size_t)m * (size_t)n * sizeof(double), "linalg svd input copy");
    iwork = gs_malloc((size_t)(8 * n) * sizeof(lapack_int), "linalg svd iwork");
    if (x == NULL || iwork == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "cpu linalg svd: out of memory (%lld x %lld copy)",
                          (long long)m, (long long)n);
        goto out;
    }
    gs__la_stack(k, x);
    /* X = A^T (n x m, ld n) = U_x S V_x^T: U_x -> vt (ld n), V_x^T (n x m) -> u (ld n) */
    info = LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, 'S', (lapack_int)n, (lapack_int)m, x,
                               (lapack_int)n, s, vt, (lapack_int)n, u, (lapack_int)n, &wq, -1,
                               iwork);
    if (info != 0) {
        st = gs__la_lapack_fail("svd", "dgesdd (workspace query)", info);
        goto out;
    }
    if (!(wq >= 1.0) || wq > (double)INT_MAX) {
        st = gs_error_set(GS_ERR_UNSUPPORTED,
                          "cpu linalg svd: dgesdd wants %.0f doubles of workspace (more than "
                          "32-bit LAPACK addresses)",
                          wq);
        goto out;
    }
    lapack_int lwork = (lapack_int)wq;
    work = gs_malloc((size_t)lwork * sizeof(double), "linalg svd work");
    if (work == NULL) {
        st = gs_error_set(GS_ERR_NO_MEMORY, "cpu linalg svd: out of memory (%d doubles of work)",
                          (int)lwork);
        goto out;
    }
    info = LAPACKE_dgesdd_work(LAPACK_COL_MAJOR, 'S', (lapack_int)n, (lapack_int)m, x,
                               (lapack_int)n, s, vt, (lapack_int)n, u, (lapack_int)n, work, lwork,
                               iwork);
    if (info != 0) st = gs__la_lapack_fail("svd", "dgesdd", info);
out:
    gs_free(work);
    gs_free(iwork);
    gs_free(x);
    return st;
}

gs_status_t gs__cpu_linalg(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                           const gs_klinalg_t *k)
{
    gs_status_t st;
    (void)stream;
    if (ctx == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "cpu linalg: ctx is NULL");
    if ((st = gs__cpu_lost(ctx)) != GS_OK) return st;
    if ((st = gs_klinalg_validate(k)) != GS_OK) return st;
    switch (k->op) {
    case GS_LA_GEMM: return gs__la_gemm(k);
    case GS_LA_QR: return gs__la_qr(k);
    case GS_LA_SVD: return gs__la_svd(k);
    default: return gs__cpu_linalg_gram(k);
    }
}
