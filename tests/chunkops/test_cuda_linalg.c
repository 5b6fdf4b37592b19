/* LINALG on the CUDA backend against the cpu backend on the same inputs (views in NaN-padded
 * chunks with ld > cols). Every test skips when there is no CUDA device.
 *
 * Agreement rules: GEMM per element |gpu - cpu| <= 1e-13 * sum_p |a_ip b_pj| (+ alpha);
 * QR: Q and R are unique once R's diagonal is >= 0 (full-rank inputs), so both are compared
 * element-wise with 1e-10 relative to the largest |R| (resp. 1e-10 for Q), besides the
 * residual checks; SVD: S within 1e-12 * S[0] of the cpu's, plus orthogonality and
 * reconstruction (singular vectors are unique only up to sign). */
#include "cuda_test_util.h"
#include "linalg_ref.inc"

static bk_t B; /* the backend pair every test opens (bk_open) and closes (bk_close) */

static void open_both(void)
{
    bk_open(&B, (size_t)8 << 30);
}

static void close_both(void)
{
    bk_close(&B);
}

/* The device twin of a host spec: every view's chunk uploaded, out allocated and poisoned. */
static void to_device(const gs_klinalg_t *h, gs_klinalg_t *d)
{
    *d = *h;
    int nb = h->op == GS_LA_GEMM ? 2 : 1;
    for (int32_t t = 0; t < h->nterms; t++)
        for (int w = 0; w < nb; w++) {
            const gs_kmat_t *hv = w ? &h->b[t] : &h->a[t];
            gs_kmat_t *dv = w ? &d->b[t] : &d->a[t];
            dv->data = dev_upload(&B, hv->data, hv->len);
        }
    int64_t len = gs_klinalg_out_len(h->op, h->m, h->n);
    double *poison = malloc(sizeof(double) * (size_t)(len > 0 ? len : 1));
    for (int64_t i = 0; i < len; i++) poison[i] = -12345.678;
    d->out = dev_upload(&B, poison, len > 0 ? len : 1);
    CHECK(GPU->sync(B.gpu, B.gs));
    free(poison);
}

static void free_device(gs_klinalg_t *d)
{
    int nb = d->op == GS_LA_GEMM ? 2 : 1;
    for (int32_t t = 0; t < d->nterms; t++) {
        GPU->mem_free(B.gpu, (void *)d->a[t].data);
        if (nb == 2) GPU->mem_free(B.gpu, (void *)d->b[t].data);
    }
    GPU->mem_free(B.gpu, d->out);
}

static void free_host(gs_klinalg_t *k)
{
    for (int32_t t = 0; t < GS_KERNEL_MAX_TERMS; t++) {
        free((void *)k->a[t].data);
        free((void *)k->b[t].data);
    }
}

/* Run @a h on the cpu (into a malloc'ed out) and its device twin on the gpu; return both. */
static void run_both(gs_klinalg_t *h, double **cpu_p, double **gpu_p, double *gpu_ms)
{
    int64_t len = gs_klinalg_out_len(h->op, h->m, h->n);
    gs_klinalg_t d;
    double *co = malloc(sizeof(double) * (size_t)(len + 1));
    double *go = malloc(sizeof(double) * (size_t)(len + 1));
    h->out = co;
    CHECK(CPU->linalg(B.cpu, B.cs, h));
    to_device(h, &d);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(GPU->linalg(B.gpu, B.gs, &d));
    CHECK(GPU->sync(B.gpu, B.gs));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (gpu_ms != NULL)
        *gpu_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    CHECK(GPU->copy_to_host(B.gpu, B.gs, go, d.out, (size_t)len * sizeof(double)));
    CHECK(GPU->sync(B.gpu, B.gs));
    for (int64_t i = 0; i < len; i++)
        cr_assert(go[i] != -12345.678 && !isnan(go[i]), "gpu out[%lld] = %g not written",
                  (long long)i, go[i]);
    free_device(&d);
    *cpu_p = co;
    *gpu_p = go;
}

static void gemm_term(gs_klinalg_t *k, int32_t t, int64_t kk, int ta, int tb, int64_t pad)
{
    int64_t ar = ta ? kk : k->m, ac = ta ? k->m : kk;
    int64_t br = tb ? k->n : kk, bc = tb ? kk : k->n;
    double *a = la_rand_mat(ar, ac), *b = la_rand_mat(br, bc);
    k->a[t] = la_place(a, ar, ac, ac + pad, 1 + t, ta);
    k->b[t] = la_place(b, br, bc, bc + pad, 5, tb);
    free(a);
    free(b);
}

static void compare_gemm(gs_klinalg_t *k)
{
    double *co, *go;
    run_both(k, &co, &go, NULL);
    double kk = 0.0;
    for (int32_t t = 0; t < k->nterms; t++) kk += (double)(k->a[t].trans ? k->a[t].rows : k->a[t].cols);
    for (int64_t i = 0; i < k->m * k->n; i++)
        cr_assert(fabs(go[i] - co[i]) <= 1e-13 * (kk + 1.0) * (fabs(k->alpha) + 1.0),
                  "out[%lld]: gpu %.17g cpu %.17g", (long long)i, go[i], co[i]);
    free(co);
    free(go);
}

Test(chunkops_cuda_linalg, gemm_matches_cpu_for_transposes_terms_and_padding)
{
    GPU_OR_SKIP();
    open_both();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gs_klinalg_t k;
            memset(&k, 0, sizeof(k));
            k.op = GS_LA_GEMM;
            k.m = 37;
            k.n = 29;
            k.alpha = 1.25;
            k.nterms = 3;
            gemm_term(&k, 0, 41, ta, tb, 3);
            gemm_term(&k, 1, 0, tb, ta, 1);
            gemm_term(&k, 2, 7, tb, ta, 0);
            compare_gemm(&k);
            free_host(&k);
        }
    gs_klinalg_t z;
    memset(&z, 0, sizeof(z));
    z.op = GS_LA_GEMM;
    z.m = 5;
    z.n = 9;
    z.nterms = 0;
    compare_gemm(&z); /* zeros */
    close_both();
}

Test(chunkops_cuda_linalg, gemm_2000_cubed_matches_cpu)
{
    GPU_OR_SKIP();
    open_both();
    gs_klinalg_t k;
    memset(&k, 0, sizeof(k));
    k.op = GS_LA_GEMM;
    k.m = k.n = 2000;
    k.alpha = 1.0;
    k.nterms = 1;
    gemm_term(&k, 0, 2000, 0, 1, 8);
    compare_gemm(&k);
    free_host(&k);
    close_both();
}

static void stack_pieces(gs_klinalg_t *k, int op, const double *a, int64_t n, const int64_t *rows,
                         int32_t npieces)
{
    memset(k, 0, sizeof(*k));
    k->op = op;
    k->n = n;
    k->nterms = npieces;
    int64_t r0 = 0;
    for (int32_t t = 0; t < npieces; t++) {
        k->a[t] = la_place(a + r0 * n, rows[t], n, n + (t % 2) * 3, t, 0);
        r0 += rows[t];
    }
    k->m = r0;
}

/* C (rows x cols) = op(X) op(Y) on the cpu backend; X, Y dense row-major host matrices. */
static double *cpu_gemm(const double *x, int64_t xr, int64_t xc, int tx, const double *y,
                        int64_t yr, int64_t yc, int ty)
{
    gs_klinalg_t g;
    memset(&g, 0, sizeof(g));
    g.op = GS_LA_GEMM;
    g.nterms = 1;
    g.alpha = 1.0;
    g.a[0] = (gs_kmat_t){.data = x, .len = xr * xc, .rows = xr, .cols = xc, .ld = xc, .trans = tx};
    g.b[0] = (gs_kmat_t){.data = y, .len = yr * yc, .rows = yr, .cols = yc, .ld = yc, .trans = ty};
    g.m = tx ? xc : xr;
    g.n = ty ? yr : yc;
    double *c = malloc(sizeof(double) * (size_t)(g.m * g.n));
    g.out = c;
    CHECK(CPU->linalg(B.cpu, B.cs, &g));
    return c;
}

/* Residual checks through BLAS (big sizes): max |L^T L - I| and ||L diag(s) R - A|| / ||A||. */
static void big_checks(const double *l, const double *s, const double *r, const double *a,
                       int64_t m, int64_t n, double tol)
{
    double *g = cpu_gemm(l, m, n, 1, l, m, n, 0);
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double e = fabs(g[i * n + j] - (i == j ? 1.0 : 0.0));
            if (!(e <= worst)) worst = e;
        }
    free(g);
    cr_assert(worst < tol, "max |Q^T Q - I| = %g", worst);
    double *ls = malloc(sizeof(double) * (size_t)(m * n));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) ls[i * n + j] = l[i * n + j] * (s != NULL ? s[j] : 1.0);
    double *p = cpu_gemm(ls, m, n, 0, r, n, n, 0);
    for (int64_t i = 0; i < m * n; i++) p[i] -= a[i];
    double re = la_fro(p, m * n) / la_fro(a, m * n);
    free(p);
    free(ls);
    cr_assert(re < tol, "reconstruction error %g", re);
}

static void compare_qr(const double *a, const int64_t *rows, int32_t np, int64_t n, int big)
{
    gs_klinalg_t k;
    double *co, *go, ms = 0.0;
    stack_pieces(&k, GS_LA_QR, a, n, rows, np);
    const int64_t m = k.m;
    run_both(&k, &co, &go, &ms);
    if (big) {
        printf("cuda qr %lld x %lld: %.1f ms (enqueue to sync)\n", (long long)m, (long long)n, ms);
        big_checks(go, NULL, go + m * n, a, m, n, 1e-12);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < i; j++)
                cr_assert(go[m * n + i * n + j] == 0.0, "R below the diagonal");
    } else {
        la_check_qr(go, a, m, n, 1e-13);
    }
    double rmax = 0.0;
    for (int64_t i = 0; i < n * n; i++)
        if (fabs(co[m * n + i]) > rmax) rmax = fabs(co[m * n + i]);
    for (int64_t i = 0; i < n * n; i++)
        cr_assert(fabs(go[m * n + i] - co[m * n + i]) <= 1e-10 * rmax, "R[%lld]: gpu %.17g cpu %.17g",
                  (long long)i, go[m * n + i], co[m * n + i]);
    for (int64_t i = 0; i < m * n; i++)
        cr_assert(fabs(go[i] - co[i]) <= 1e-10, "Q[%lld]: gpu %.17g cpu %.17g", (long long)i, go[i],
                  co[i]);
    free(co);
    free(go);
    free_host(&k);
}

static void compare_svd(const double *a, const int64_t *rows, int32_t np, int64_t n, int big)
{
    gs_klinalg_t k;
    double *co, *go, ms = 0.0;
    stack_pieces(&k, GS_LA_SVD, a, n, rows, np);
    const int64_t m = k.m;
    run_both(&k, &co, &go, &ms);
    const double *s = go + m * n, *cs_ = co + m * n;
    if (big) {
        printf("cuda svd %lld x %lld: %.1f ms (enqueue to sync)\n", (long long)m, (long long)n, ms);
        for (int64_t i = 1; i < n; i++) cr_assert(s[i] <= s[i - 1], "S not descending at %lld", (long long)i);
        big_checks(go, s, s + n, a, m, n, 1e-12);
        /* V orthogonal: Vt Vt^T = I */
        double *vvt = cpu_gemm(s + n, n, n, 0, s + n, n, n, 1);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++)
                cr_assert(fabs(vvt[i * n + j] - (i == j)) < 1e-12, "Vt Vt^T [%lld][%lld]",
                          (long long)i, (long long)j);
        free(vvt);
    } else {
        la_check_svd(go, a, m, n, 1e-13);
    }
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(s[i] - cs_[i]) <= 1e-12 * cs_[0], "S[%lld]: gpu %.17g cpu %.17g",
                  (long long)i, s[i], cs_[i]);
    free(co);
    free(go);
    free_host(&k);
}

Test(chunkops_cuda_linalg, qr_matches_cpu_on_uneven_pieces)
{
    GPU_OR_SKIP();
    open_both();
    const int64_t rows[] = {5, 1, 0, 17, 3};
    double *a = la_rand_mat(26, 6);
    compare_qr(a, rows, 5, 6, 0);
    free(a);
    const int64_t one[] = {3, 4};
    a = la_rand_mat(7, 1);
    compare_qr(a, one, 2, 1, 0);
    free(a);
    const int64_t sq[] = {100, 57};
    a = la_rand_mat(157, 157);
    compare_qr(a, sq, 2, 157, 0);
    free(a);
    close_both();
}

Test(chunkops_cuda_linalg, svd_matches_cpu_on_uneven_pieces)
{
    GPU_OR_SKIP();
    open_both();
    const int64_t rows[] = {10, 3, 27};
    double *a = la_rand_mat(40, 12);
    compare_svd(a, rows, 3, 12, 0);
    free(a);
    const int64_t sq[] = {64, 1};
    a = la_rand_mat(65, 65);
    compare_svd(a, sq, 2, 65, 0);
    free(a);
    const int64_t one[] = {9};
    a = la_rand_mat(9, 1);
    compare_svd(a, one, 1, 1, 0);
    free(a);
    close_both();
}

Test(chunkops_cuda_linalg, qr_and_svd_of_20000_by_1000_match_cpu, .timeout = 300)
{
    GPU_OR_SKIP();
    open_both();
    const int64_t rows[] = {5000, 7000, 1, 7999};
    double *a = la_rand_mat(20000, 1000);
    compare_qr(a, rows, 4, 1000, 1);
    compare_svd(a, rows, 4, 1000, 1);
    free(a);
    close_both();
}

/* a (m x n, row-major) with column j scaled by 10^(-e * j / (n - 1)): condition ~10^e */
/* CholeskyQR2 cannot factor kappa ~ 1e12 (its Gram matrix is singular to rounding): the
 * Householder fallback must still give an accurate QR. */
Test(chunkops_cuda_linalg, ill_conditioned_tall_qr_falls_back_to_householder)
{
    GPU_OR_SKIP();
    open_both();
    const int64_t rows[] = {150, 250};
    double *a = la_graded(400, 20, 12.0), *co, *go, ms;
    gs_klinalg_t k;
    stack_pieces(&k, GS_LA_QR, a, 20, rows, 2);
    run_both(&k, &co, &go, &ms);
    la_check_qr(go, a, 400, 20, 1e-13);
    for (int64_t i = 0; i < 20; i++)
        cr_assert(go[400 * 20 + i * 20 + i] >= 0.0, "R diagonal %lld negative", (long long)i);
    free(co);
    free(go);
    free_host(&k);
    free(a);
    close_both();
}

/* Tall SVDs whose R is well conditioned (eigen path), moderately (Jacobi on R) and badly
 * (Householder fallback): singular values match LAPACK's (1e-10 relative each up to kappa
 * 1e3), and U S Vt reconstructs. */
Test(chunkops_cuda_linalg, tall_svd_matches_cpu_for_both_conditionings)
{
    GPU_OR_SKIP();
    open_both();
    const double expo[] = {1.0, 3.0, 9.0};
    for (int c = 0; c < 3; c++) {
        const int64_t rows[] = {300, 201};
        double *a = la_graded(501, 40, expo[c]), *co, *go, ms;
        gs_klinalg_t k;
        stack_pieces(&k, GS_LA_SVD, a, 40, rows, 2);
        run_both(&k, &co, &go, &ms);
        const double *s = go + 501 * 40, *cs_ = co + 501 * 40;
        for (int64_t i = 0; i < 40; i++)
            /* relative for moderate conditioning; beyond, both sides carry errors of
             * eps * S[0] (normwise backward stable), so compare at that scale */
            cr_assert(fabs(s[i] - cs_[i]) <= (expo[c] <= 3.0 ? 1e-10 * cs_[i] : 1e-12 * cs_[0]),
                      "kappa 1e%g: S[%lld] gpu %.17g cpu %.17g", expo[c], (long long)i, s[i],
                      cs_[i]);
        la_check_svd(go, a, 501, 40, 1e-12);
        free(co);
        free(go);
        free_host(&k);
        free(a);
    }
    close_both();
}

/* GS_CUDA_QR=householder (read when a stream's state is made) keeps the geqrf/orgqr path. */
Test(chunkops_cuda_linalg, householder_mode_matches_cpu)
{
    GPU_OR_SKIP();
    setenv("GS_CUDA_QR", "householder", 1);
    open_both();
    const int64_t rows[] = {100, 77};
    double *a = la_rand_mat(177, 30);
    compare_qr(a, rows, 2, 30, 0);
    compare_svd(a, rows, 2, 30, 0);
    free(a);
    close_both();
    unsetenv("GS_CUDA_QR");
}

/* The Gram-path SVD (GRAM, GSTEP, APPLY x 3) on the gpu against the cpu: the same path
 * (one pass for kappa <= 64, shifted CholeskyQR3 above), U orthonormal and U S Vt = A to
 * 1e-12, S within 1e-12 S[0] of the cpu's. Also with GS_CUDA_GRAM=gemm, syrk, strided and
 * blocked. */
static void gram_both(int64_t m, int64_t n, double e, const int64_t *rows, int np)
{
    double *a = la_graded(m, n, e), *cu, *cst, *gu, *gst;
    CHECK(la_gram_svd(CPU, B.cpu, B.cs, a, m, n, rows, np, &cu, &cst));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(la_gram_svd(GPU, B.gpu, B.gs, a, m, n, rows, np, &gu, &gst));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert_eq(gst[GS_LA_H_FAST], cst[GS_LA_H_FAST], "1e%g: gpu and cpu took different paths",
                 e);
    const double *gsv = gst + GS_LA_STATE_S(n), *csv = cst + GS_LA_STATE_S(n);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(gsv[i] - csv[i]) <= 1e-12 * csv[0], "1e%g: S[%lld] gpu %.17g cpu %.17g", e,
                  (long long)i, gsv[i], csv[i]);
    double *out = la_gram_out(gu, gst, m, n);
    la_check_svd(out, a, m, n, 1e-12);
    printf("gram svd %lld x %lld (kappa ~1e%g, %s path): gpu %.1f ms, max |U^T U - I| %.2g\n",
           (long long)m, (long long)n, e, gst[GS_LA_H_FAST] == 1.0 ? "one-pass" : "cholqr3",
           (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6,
           la_orth_err(gu, m, n));
    free(out), free(a), free(cu), free(cst), free(gu), free(gst);
}

Test(chunkops_cuda_linalg, gram_svd_matches_cpu_for_every_conditioning, .timeout = 300)
{
    GPU_OR_SKIP();
    open_both();
    const int64_t rows[] = {300, 1, 199, 500};
    const double expo[] = {0.5, 1.5, 3.0, 6.0, 10.0, 13.0};
    for (int c = 0; c < 6; c++) gram_both(1000, 40, expo[c], rows, 4);
    setenv("GS_CUDA_GRAM", "gemm", 1);
    gram_both(1000, 40, 0.5, rows, 4);
    gram_both(1000, 40, 10.0, rows, 4);
    setenv("GS_CUDA_GRAM", "syrk", 1);
    gram_both(1000, 40, 0.5, rows, 4);
    gram_both(1000, 40, 10.0, rows, 4);
    setenv("GS_CUDA_GRAM", "strided", 1);
    gram_both(3000, 1100, 0.5, (const int64_t[]){1500, 1500}, 2);
    setenv("GS_CUDA_GRAM", "blocked", 1);
    gram_both(1000, 40, 0.5, rows, 4);
    gram_both(3000, 1100, 8.0, (const int64_t[]){1500, 1500}, 2);
    unsetenv("GS_CUDA_GRAM");
    gram_both(3000, 1100, 0.5, (const int64_t[]){1500, 1500}, 2);   /* 3 x 3 blocks */
    const int64_t big[] = {5000, 5000, 5000, 5000};
    gram_both(20000, 300, 0.5, big, 4);
    gram_both(20000, 300, 8.0, big, 4);
    close_both();
}

/* GRAM alone on the gpu against the cpu under GS_CUDA_GRAM=@a method (NULL: the default,
 * batched) with GS_CUDA_GRAM_BLOCK / GS_CUDA_GRAM_SPLIT = @a block / @a split (NULL: unset):
 * per element |gpu - cpu| <= 1e-13 (m + 1) (entries of a in [-1, 1)), and exactly symmetric
 * except for the full-GEMM method. */
static void gram_only(const char *method, const char *block, const char *split, int64_t n,
                      const int64_t *rows, int np)
{
    int64_t m = 0;
    for (int i = 0; i < np; i++) m += rows[i];
    double *a = la_rand_mat(m, n), *co, *go;
    gs_klinalg_t k;
    if (method != NULL) setenv("GS_CUDA_GRAM", method, 1);
    if (block != NULL) setenv("GS_CUDA_GRAM_BLOCK", block, 1);
    if (split != NULL) setenv("GS_CUDA_GRAM_SPLIT", split, 1);
    stack_pieces(&k, GS_LA_GRAM, a, n, rows, np);
    run_both(&k, &co, &go, NULL);
    unsetenv("GS_CUDA_GRAM");
    unsetenv("GS_CUDA_GRAM_BLOCK");
    unsetenv("GS_CUDA_GRAM_SPLIT");
    const int sym = method == NULL || strcmp(method, "gemm") != 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            cr_assert(fabs(go[i * n + j] - co[i * n + j]) <= 1e-13 * (double)(m + 1),
                      "%s block %s split %s, n %lld: G[%lld][%lld] gpu %.17g cpu %.17g",
                      method ? method : "default", block ? block : "-", split ? split : "-",
                      (long long)n, (long long)i, (long long)j, go[i * n + j], co[i * n + j]);
            if (sym)
                cr_assert(go[i * n + j] == go[j * n + i],
                          "%s, n %lld: G[%lld][%lld] != G[%lld][%lld]",
                          method ? method : "default", (long long)n, (long long)i, (long long)j,
                          (long long)j, (long long)i);
        }
    free(a), free(co), free(go);
    free_host(&k);
}

/* Every GS_CUDA_GRAM method on pieces of uneven rows (1 row first, then pieces cut into 2 and 4
 * row slices with tails of 1 and 3 rows, ld n + 3 on odd pieces): n below the block side, a
 * last block that overlaps its neighbour (n 300 / block 256, n 600 / 128), blocks that tile n
 * exactly (300 / 100), slices forced to 1 and 3. */
Test(chunkops_cuda_linalg, gram_methods_match_cpu, .timeout = 300)
{
    GPU_OR_SKIP();
    open_both();
    const int64_t rows[] = {1, 9001, 4099, 300, 20003};
    gram_only(NULL, NULL, NULL, 40, rows, 5);
    gram_only(NULL, NULL, NULL, 300, rows, 5);
    gram_only("batched", "128", "3", 600, rows, 5);
    gram_only("batched", "100", "1", 300, rows, 5);
    gram_only("batched", "64", "64", 300, (const int64_t[]){300000}, 1);
    gram_only("strided", NULL, NULL, 300, rows, 5);
    gram_only("strided", "128", "3", 600, rows, 5);
    gram_only("blocked", NULL, NULL, 300, rows, 5);
    gram_only("blocked", "128", NULL, 600, rows, 5);
    gram_only("syrk", NULL, NULL, 300, rows, 5);
    gram_only("gemm", NULL, NULL, 300, rows, 5);
    close_both();
}

Test(chunkops_cuda_linalg, rejects_invalid_specs_before_any_work)
{
    GPU_OR_SKIP();
    open_both();
    static double buf[64];
    gs_klinalg_t k;
    memset(&k, 0, sizeof(k));
    k.op = GS_LA_QR;
    k.nterms = 1;
    k.m = 2;
    k.n = 3;
    k.a[0] = (gs_kmat_t){.data = buf, .len = 64, .rows = 2, .cols = 3, .ld = 3};
    k.out = buf;
    cr_assert_eq(GPU->linalg(B.gpu, B.gs, &k), GS_ERR_INVALID_PARAM);
    CHECK(GPU->sync(B.gpu, B.gs)); /* a refused spec is not a stream failure */
    close_both();
}
