/* CPU backend: the Gram-based SVD kernels (graph/kernel.h: GS_LA_GRAM, GS_LA_APPLY,
 * GS_LA_GSTEP) over OpenBLAS and LAPACKE, all in row-major storage (LAPACKE's row-major entry
 * points transpose the n x n matrices internally; the m x n work is BLAS-3 in place).
 *   GRAM:  cblas_dsyrk (upper) per piece, summed with beta = 1, then the lower triangle mirrored.
 *   APPLY: the stack copied into out, then out = out T^-1 (cblas_dtrsm, right, upper) or
 *          out = X T (cblas_dgemm per piece).
 *   GSTEP: n x n LAPACK (dsyevd, dpotrf, dgesdd) as graph/kernel.h describes; _work entry
 *          points only, workspace from gs_malloc after a query. */
#include "chunkops/cpu/cpu.h"
#include "common/alloc.h"
#include "common/error.h"

#include <cblas.h>
#include <lapacke.h>
#include <limits.h>
#include <math.h>
#include <string.h>

static gs_status_t gs__gram_lapack_fail(const char *call, lapack_int info)
{
    if (info < 0)
        return gs_error_set(GS_ERR_INTERNAL, "cpu linalg gstep: %s rejected argument %d", call,
                            (int)-info);
    /* the eigen-solver fails only on NaN/Inf (nothing to fall back for); a factorisation
     * failing is the Gram path refusing the input (GS_LA_GRAM_REFUSED: TSQR fallback) */
    if (strstr(call, "syevd") != NULL)
        return gs_error_set(GS_ERR_NUMERIC, "cpu linalg gstep: %s failed (info %d): the matrix "
                            "has NaN/Inf entries", call, (int)info);
    return gs_error_set(GS_ERR_NUMERIC,
                        "cpu linalg gstep: %s failed (info %d): the matrix has NaN/Inf entries or "
                        "is too " GS_LA_GRAM_REFUSED,
                        call, (int)info);
}

static int gs__gram_fits(const gs_klinalg_t *k)
{
    if (k->m > INT_MAX || k->n > INT_MAX / 8) return 0;
    for (int32_t t = 0; t < k->nterms; t++)
        if (k->a[t].ld > INT_MAX) return 0;
    return 1;
}

/* Mirror the upper triangle of the row-major n x n @a g into its lower one. */
static void gs__gram_mirror(double *g, int64_t n)
{
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = 0; j < i; j++) g[i * n + j] = g[j * n + i];
}

/* Zero the strict lower triangle of the row-major n x n @a r. */
static void gs__gram_triu(double *r, int64_t n)
{
    for (int64_t i = 1; i < n; i++) memset(r + i * n, 0, (size_t)i * sizeof(double));
}

static gs_status_t gs__gram_gram(const gs_klinalg_t *k)
{
    const int64_t n = k->n;
    int first = 1;
    if (k->b[0].rows > 0 && k->b[0].data[k->b[0].off + GS_LA_H_SKIP] == 1.0) {
        memset(k->out, 0, (size_t)(n * n) * sizeof(double));
        return GS_OK;
    }
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &k->a[t];
        if (a->rows == 0) continue;
        cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)n, (int)a->rows, 1.0,
                    a->data + a->off, (int)a->ld, first ? 0.0 : 1.0, k->out, (int)n);
        first = 0;
    }
    if (first) memset(k->out, 0, (size_t)(n * n) * sizeof(double));
    else gs__gram_mirror(k->out, n);
    return GS_OK;
}

static gs_status_t gs__gram_apply(const gs_klinalg_t *k)
{
    const int64_t n = k->n, m = k->m;
    const double *state = k->b[0].data + k->b[0].off, *tm = state + GS_LA_STATE_T(n);
    const double how = state[GS_LA_H_APPLY];
    const gs_kmat_t *xs;
    int64_t r0 = 0;
    gs_status_t st;
    if ((st = gs__la_apply_source(k, state, &xs)) != GS_OK || how == GS_LA_APPLY_NONE) return st;
    if (m == 0) return GS_OK;
    for (int32_t t = 0; t < k->nterms; t++) {
        const gs_kmat_t *a = &xs[t];
        double *dst = k->out + r0 * n;
        if (a->rows == 0) continue;
        if (how == GS_LA_APPLY_GEMM) {
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)a->rows, (int)n, (int)n,
                        1.0, a->data + a->off, (int)a->ld, tm, (int)n, 0.0, dst, (int)n);
        } else if (a->ld == n) {
            memcpy(dst, a->data + a->off, (size_t)(a->rows * n) * sizeof(double));
        } else {
            for (int64_t r = 0; r < a->rows; r++)
                memcpy(dst + r * n, a->data + a->off + r * a->ld, (size_t)n * sizeof(double));
        }
        r0 += a->rows;
    }
    if (how == GS_LA_APPLY_TRSM)
        cblas_dtrsm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, (int)m,
                    (int)n, 1.0, tm, (int)n, k->out, (int)n);
    return GS_OK;
}

/* Step 1: eigen-decomposition of G; the fast path or the shifted Cholesky factor. */
static gs_status_t gs__gram_step1(const gs_klinalg_t *k, const double *g, double *st_out)
{
    const int64_t n = k->n;
    double *hdr = st_out, *tm = st_out + GS_LA_STATE_T(n), *s = st_out + GS_LA_STATE_S(n);
    double *vt = st_out + GS_LA_STATE_VT(n), *racc = st_out + GS_LA_STATE_RACC(n);
    double *e = NULL, *lam = NULL, *work = NULL, wq = 0.0;
    lapack_int *iwork = NULL, iwq = 0, info;
    gs_status_t st = GS_OK;
    e = gs_malloc((size_t)(n * n) * sizeof(double), "gram eigenvectors");
    lam = gs_malloc((size_t)n * sizeof(double), "gram eigenvalues");
    if (e == NULL || lam == NULL) goto nomem;
    memcpy(e, g, (size_t)(n * n) * sizeof(double));
    info = LAPACKE_dsyevd_work(LAPACK_ROW_MAJOR, 'V', 'U', (lapack_int)n, e, (lapack_int)n, lam,
                               &wq, -1, &iwq, -1);
    if (info != 0) {
        st = gs__gram_lapack_fail("dsyevd (workspace query)", info);
        goto out;
    }
    work = gs_malloc((size_t)wq * sizeof(double), "gram dsyevd work");
    iwork = gs_malloc((size_t)iwq * sizeof(lapack_int), "gram dsyevd iwork");
    if (work == NULL || iwork == NULL) goto nomem;
    info = LAPACKE_dsyevd_work(LAPACK_ROW_MAJOR, 'V', 'U', (lapack_int)n, e, (lapack_int)n, lam,
                               work, (lapack_int)wq, iwork, iwq);
    if (info != 0) {
        st = gs__gram_lapack_fail("dsyevd", info);
        goto out;
    }
    const double lmax = lam[n - 1], lmin = lam[0];
    const double kappa = lmin > 0.0 ? sqrt(lmax / lmin) : INFINITY;
    hdr[GS_LA_H_KAPPA] = kappa;
    hdr[GS_LA_H_STEP] = 1.0;
    if (!isfinite(lmax)) {
        st = gs_error_set(GS_ERR_NUMERIC, "cpu linalg gstep: the Gram matrix is not finite "
                          "(NaN/Inf in the input)");
        goto out;
    }
    if (kappa <= GS_LA_GRAM_KAPPA_FAST) {
        /* S, Vt descending from the eigenpairs; T = V S^-1 (V = Vt^T) */
        for (int64_t i = 0; i < n; i++) {
            const int64_t j = n - 1 - i;
            s[i] = sqrt(lam[j]);
            for (int64_t c = 0; c < n; c++) vt[i * n + c] = e[c * n + j];
        }
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < n; c++) tm[r * n + c] = vt[c * n + r] / s[c];
        hdr[GS_LA_H_FAST] = 1.0;
        hdr[GS_LA_H_APPLY] = GS_LA_APPLY_NONE;
        hdr[GS_LA_H_SKIP] = 1.0;
        goto out;
    }
    /* shifted CholeskyQR: s = 11 (m n + n (n + 1)) u ||A||_2^2 (Fukaya et al. 2020) */
    const double shift = gs_la_gram_shift(k->m, n, lmax > 0.0 ? lmax : 0.0);
    memcpy(tm, g, (size_t)(n * n) * sizeof(double));
    for (int64_t i = 0; i < n; i++) tm[i * n + i] += shift;
    if (lmax <= 0.0) {   /* A == 0: any orthonormal Q; R = 0 */
        for (int64_t i = 0; i < n; i++) tm[i * n + i] = 1.0;
    }
    info = LAPACKE_dpotrf_work(LAPACK_ROW_MAJOR, 'U', (lapack_int)n, tm, (lapack_int)n);
    if (info != 0) {
        st = gs__gram_lapack_fail("dpotrf (step 1)", info);
        goto out;
    }
    gs__gram_triu(tm, n);
    memcpy(racc, tm, (size_t)(n * n) * sizeof(double));
    if (lmax <= 0.0) memset(racc, 0, (size_t)(n * n) * sizeof(double));
    hdr[GS_LA_H_SHIFT] = shift;
    hdr[GS_LA_H_APPLY] = GS_LA_APPLY_TRSM;
    goto out;
nomem:
    st = gs_error_set(GS_ERR_NO_MEMORY, "cpu linalg gstep: out of memory (n = %lld)", (long long)n);
out:
    gs_free(iwork);
    gs_free(work);
    gs_free(lam);
    gs_free(e);
    return st;
}

/* Step 3 of the slow path: SVD of Racc = U_r S V^T; T = R_3^-1 U_r. */
static gs_status_t gs__gram_final(int64_t n, double *st_out)
{
    double *tm = st_out + GS_LA_STATE_T(n), *s = st_out + GS_LA_STATE_S(n);
    double *vt = st_out + GS_LA_STATE_VT(n), *racc = st_out + GS_LA_STATE_RACC(n);
    double *x = NULL, *ur = NULL, *work = NULL, wq = 0.0;
    lapack_int *iwork = NULL, info;
    gs_status_t st = GS_OK;
    x = gs_malloc((size_t)(n * n) * sizeof(double), "gram svd copy");
    ur = gs_malloc((size_t)(n * n) * sizeof(double), "gram svd u");
    iwork = gs_malloc((size_t)(8 * n) * sizeof(lapack_int), "gram svd iwork");
    if (x == NULL || ur == NULL || iwork == NULL) goto nomem;
    memcpy(x, racc, (size_t)(n * n) * sizeof(double));
    info = LAPACKE_dgesdd_work(LAPACK_ROW_MAJOR, 'A', (lapack_int)n, (lapack_int)n, x,
                               (lapack_int)n, s, ur, (lapack_int)n, vt, (lapack_int)n, &wq, -1,
                               iwork);
    if (info != 0) {
        st = gs__gram_lapack_fail("dgesdd (workspace query)", info);
        goto out;
    }
    work = gs_malloc((size_t)wq * sizeof(double), "gram svd work");
    if (work == NULL) goto nomem;
    info = LAPACKE_dgesdd_work(LAPACK_ROW_MAJOR, 'A', (lapack_int)n, (lapack_int)n, x,
                               (lapack_int)n, s, ur, (lapack_int)n, vt, (lapack_int)n, work,
                               (lapack_int)wq, iwork);
    if (info != 0) {
        st = gs__gram_lapack_fail("dgesdd", info);
        goto out;
    }
    /* T currently holds R_3: T = R_3^-1 U_r (a solve; R_3 is well conditioned) */
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasUpper, CblasNoTrans, CblasNonUnit, (int)n, (int)n,
                1.0, tm, (int)n, ur, (int)n);
    memcpy(tm, ur, (size_t)(n * n) * sizeof(double));
    goto out;
nomem:
    st = gs_error_set(GS_ERR_NO_MEMORY, "cpu linalg gstep: out of memory (n = %lld)", (long long)n);
out:
    gs_free(work);
    gs_free(iwork);
    gs_free(ur);
    gs_free(x);
    return st;
}

/* One step on the Gram matrix @a g (dense n x n). */
static gs_status_t gs__gram_step_g(const gs_klinalg_t *k, const double *g)
{
    const int64_t n = k->n, len = GS_LA_STATE_LEN(n);
    const int step = (int)k->alpha;
    double *out = k->out, *hdr = out, *tm = out + GS_LA_STATE_T(n);
    double *racc = out + GS_LA_STATE_RACC(n);
    gs_status_t st;
    lapack_int info;
    if (step == 1) {
        memset(out, 0, (size_t)len * sizeof(double));
        return gs__gram_step1(k, g, out);
    }
    memcpy(out, k->b[0].data + k->b[0].off, (size_t)len * sizeof(double));
    if (gs__la_step_hdr(hdr, step)) return GS_OK;   /* the fast path passes through */
    if (step == 3) {
        double dev = 0.0;
        for (int64_t i = 0; i < n * n; i++)
            dev = fmax(dev, fabs(g[i] - (i / n == i % n ? 1.0 : 0.0)));
        if (!(dev <= GS_LA_GRAM_DEV_MAX)) return gs__gram_rank_fail(dev);
    }
    /* R_k = chol(G_k), or of G_k + shift I when G_k is numerically singular (a
     * rank-deficient input: step 3's check decides whether the result is still orthonormal);
     * Racc = R_k Racc */
    for (int shifted = 0;; shifted++) {
        memcpy(tm, g, (size_t)(n * n) * sizeof(double));
        if (shifted) {
            double tr = 0.0;
            for (int64_t i = 0; i < n; i++) tr += g[i * n + i];
            for (int64_t i = 0; i < n; i++) tm[i * n + i] += gs_la_gram_shift(k->m, n, tr);
        }
        info = LAPACKE_dpotrf_work(LAPACK_ROW_MAJOR, 'U', (lapack_int)n, tm, (lapack_int)n);
        if (info == 0) break;
        if (info < 0 || shifted)
            return gs__gram_lapack_fail(step == 2 ? "dpotrf (step 2)" : "dpotrf (step 3)", info);
    }
    gs__gram_triu(tm, n);
    cblas_dtrmm(CblasRowMajor, CblasLeft, CblasUpper, CblasNoTrans, CblasNonUnit, (int)n, (int)n,
                1.0, tm, (int)n, racc, (int)n);
    hdr[GS_LA_H_SKIP] = 0.0;
    if (step == 2) {
        hdr[GS_LA_H_APPLY] = GS_LA_APPLY_TRSM;
        return GS_OK;
    }
    if ((st = gs__gram_final(n, out)) != GS_OK) return st;
    hdr[GS_LA_H_APPLY] = GS_LA_APPLY_GEMM;
    hdr[GS_LA_H_SKIP] = 1.0;
    return GS_OK;
}

/* GSTEP: G is the sum of the partial Gram matrices a[0 .. nterms), added in order into a
 * temporary when there are several (not on the fast path's pass-through, which ignores G). */
static gs_status_t gs__gram_step(const gs_klinalg_t *k)
{
    const int64_t n = k->n, nn = n * n;
    gs_status_t st;
    double *g;
    for (int32_t t = 0; t < k->nterms; t++)
        if (k->a[t].ld != n)
            return gs_error_set(GS_ERR_INVALID_PARAM, "cpu linalg gstep: the Gram matrix view "
                                "a[%d] must be dense (ld %lld, n %lld)", (int)t,
                                (long long)k->a[t].ld, (long long)n);
    if (k->nterms == 1 || (k->alpha > 1.0 && k->b[0].data[k->b[0].off + GS_LA_H_FAST] == 1.0))
        return gs__gram_step_g(k, k->a[0].data + k->a[0].off);
    g = gs_malloc(gs_size_mul((size_t)nn, sizeof(double)), "gram step sum");
    if (g == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "cpu linalg gstep: out of memory (n = %lld)",
                            (long long)n);
    memcpy(g, k->a[0].data + k->a[0].off, (size_t)nn * sizeof(double));
    for (int32_t t = 1; t < k->nterms; t++) {
        const double *a = k->a[t].data + k->a[t].off;
        for (int64_t i = 0; i < nn; i++) g[i] += a[i];
    }
    st = gs__gram_step_g(k, g);
    gs_free(g);
    return st;
}

gs_status_t gs__cpu_linalg_gram(const gs_klinalg_t *k)
{
    if (!gs__gram_fits(k))
        return gs_error_set(GS_ERR_UNSUPPORTED, "cpu linalg: m %lld / n %lld exceed the 32-bit "
                            "dimensions of BLAS/LAPACK", (long long)k->m, (long long)k->n);
    switch (k->op) {
    case GS_LA_GRAM: return gs__gram_gram(k);
    case GS_LA_APPLY: return gs__gram_apply(k);
    default: return gs__gram_step(k);
    }
}
