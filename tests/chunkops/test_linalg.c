/* LINALG kernels of the cpu backend (GEMM, QR, SVD on chunk views) against naive references
 * and LAPACK, and gs_klinalg_validate(). Views sit in NaN-padded chunks with ld > cols, so a
 * kernel that reads outside a view produces NaN and fails the checks. */
#include <criterion/criterion.h>
#include <lapacke.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/alloc.h"

#include "linalg_ref.inc"

static const gs_chunkops_ops_t *const ops = &gs_chunkops_cpu_ops;

#define CHECK(call)                                                                          \
    do {                                                                                     \
        gs_status_t st_ = (call);                                                            \
        cr_assert_eq(st_, GS_OK, "%s: %s: %s", #call, gs_status_name(st_), gs_last_error()); \
    } while (0)

static gs_chunkops_ctx_h ctx;
static gs_chunkops_stream_h st;

static void setup(void)
{
    gs_chunkops_params_t p = {.nthreads = 2};
    CHECK(ops->ctx_create(&p, &ctx));
    CHECK(ops->stream_create(ctx, &st));
}

static void teardown(void)
{
    ops->stream_destroy(ctx, st);
    ops->ctx_destroy(ctx);
}

TestSuite(chunkops_linalg, .init = setup, .fini = teardown);

static void free_views(gs_klinalg_t *k)
{
    for (int32_t t = 0; t < GS_KERNEL_MAX_TERMS; t++) {
        free((void *)k->a[t].data);
        free((void *)k->b[t].data);
        k->a[t].data = k->b[t].data = NULL;
    }
}

/* term t of a GEMM: op(a) m x kk, op(b) kk x n, in padded chunks (ld = cols + pad) */
static void gemm_term(gs_klinalg_t *k, int32_t t, int64_t kk, int ta, int tb, int64_t pad)
{
    int64_t ar = ta ? kk : k->m, ac = ta ? k->m : kk;
    int64_t br = tb ? k->n : kk, bc = tb ? kk : k->n;
    double *a = la_rand_mat(ar, ac), *b = la_rand_mat(br, bc);
    k->a[t] = la_place(a, ar, ac, ac + pad, 3 + t, ta);
    k->b[t] = la_place(b, br, bc, bc + 2 * pad, 7, tb);
    free(a);
    free(b);
}

static void check_gemm(gs_klinalg_t *k)
{
    int64_t len = k->m * k->n;
    double *out = malloc(sizeof(double) * (size_t)(len + 1));
    double *ref = malloc(sizeof(double) * (size_t)(len + 1));
    for (int64_t i = 0; i <= len; i++) out[i] = NAN;
    out[len] = 777.0; /* guard */
    k->out = out;
    CHECK(ops->linalg(ctx, st, k));
    la_ref_gemm(k, ref);
    double scale = 0.0;
    for (int32_t t = 0; t < k->nterms; t++) scale += (double)(k->a[t].rows * k->a[t].cols + 1);
    for (int64_t i = 0; i < len; i++)
        cr_assert(fabs(out[i] - ref[i]) <= 1e-13 * scale * (fabs(k->alpha) + 1.0),
                  "out[%lld] = %.17g, reference %.17g", (long long)i, out[i], ref[i]);
    cr_assert_eq(out[len], 777.0, "wrote past the output");
    free(out);
    free(ref);
}

Test(chunkops_linalg, gemm_matches_naive_for_every_transpose_combination)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gs_klinalg_t k;
            memset(&k, 0, sizeof(k));
            k.op = GS_LA_GEMM;
            k.m = 7;
            k.n = 5;
            k.alpha = 1.5;
            k.nterms = 1;
            gemm_term(&k, 0, 9, ta, tb, 3);
            check_gemm(&k);
            free_views(&k);
        }
}

Test(chunkops_linalg, gemm_sums_terms_of_different_inner_sizes)
{
    gs_klinalg_t k;
    memset(&k, 0, sizeof(k));
    k.op = GS_LA_GEMM;
    k.m = 13;
    k.n = 11;
    k.alpha = -0.75;
    k.nterms = 5;
    gemm_term(&k, 0, 4, 0, 0, 1);
    gemm_term(&k, 1, 0, 1, 0, 2); /* empty product: adds nothing */
    gemm_term(&k, 2, 17, 1, 1, 0);
    gemm_term(&k, 3, 1, 0, 1, 5);
    gemm_term(&k, 4, 33, 1, 0, 2);
    check_gemm(&k);
    free_views(&k);
}

Test(chunkops_linalg, gemm_with_only_empty_products_writes_zeros)
{
    gs_klinalg_t k;
    memset(&k, 0, sizeof(k));
    k.op = GS_LA_GEMM;
    k.m = 4;
    k.n = 3;
    k.alpha = 2.0;
    k.nterms = 0;
    double out[12];
    for (int i = 0; i < 12; i++) out[i] = NAN;
    k.out = out;
    CHECK(ops->linalg(ctx, st, &k));
    for (int i = 0; i < 12; i++) cr_assert(out[i] == 0.0 && !signbit(out[i]), "out[%d] = %g", i, out[i]);
    /* one term with k = 0: zeros too */
    k.nterms = 1;
    gemm_term(&k, 0, 0, 0, 0, 1);
    for (int i = 0; i < 12; i++) out[i] = NAN;
    CHECK(ops->linalg(ctx, st, &k));
    for (int i = 0; i < 12; i++) cr_assert(out[i] == 0.0, "out[%d] = %g", i, out[i]);
    free_views(&k);
    /* empty output: nothing to write, out may be NULL */
    memset(&k, 0, sizeof(k));
    k.op = GS_LA_GEMM;
    k.m = 0;
    k.n = 3;
    k.nterms = 0;
    CHECK(ops->linalg(ctx, st, &k));
}

Test(chunkops_linalg, gemm_runs_through_run_ktask)
{
    gs_ktask_t t;
    memset(&t, 0, sizeof(t));
    t.kind = GS_KTASK_LINALG;
    gs_klinalg_t *k = &t.u.linalg;
    k->op = GS_LA_GEMM;
    k->m = 6;
    k->n = 6;
    k->alpha = 1.0;
    k->nterms = 2;
    gemm_term(k, 0, 6, 0, 1, 0);
    gemm_term(k, 1, 2, 1, 0, 4);
    double out[36], ref[36];
    k->out = out;
    CHECK(gs_chunkops_run_ktask(ops, ctx, st, &t));
    la_ref_gemm(k, ref);
    for (int i = 0; i < 36; i++) cr_assert(fabs(out[i] - ref[i]) < 1e-13, "out[%d]", i);
    free_views(k);
}

/* Stack a (m x n dense) as pieces of the given row counts, each in its own padded chunk. */
static void stack_pieces(gs_klinalg_t *k, int op, const double *a, int64_t n, const int64_t *rows,
                         int32_t npieces)
{
    memset(k, 0, sizeof(*k));
    k->op = op;
    k->n = n;
    k->nterms = npieces;
    int64_t r0 = 0;
    for (int32_t t = 0; t < npieces; t++) {
        k->a[t] = la_place(a + r0 * n, rows[t], n, n + (t % 3), t * 2, 0);
        r0 += rows[t];
    }
    k->m = r0;
}

static double *run_out(gs_klinalg_t *k)
{
    int64_t len = gs_klinalg_out_len(k->op, k->m, k->n);
    double *out = malloc(sizeof(double) * (size_t)(len + 1));
    for (int64_t i = 0; i < len; i++) out[i] = NAN;
    out[len] = 777.0;
    k->out = out;
    CHECK(ops->linalg(ctx, st, k));
    cr_assert_eq(out[len], 777.0, "wrote past the output");
    for (int64_t i = 0; i < len; i++) cr_assert(!isnan(out[i]), "out[%lld] not written", (long long)i);
    return out;
}

static void qr_case(const int64_t *rows, int32_t npieces, int64_t n)
{
    int64_t m = 0;
    for (int32_t t = 0; t < npieces; t++) m += rows[t];
    double *a = la_rand_mat(m, n);
    gs_klinalg_t k;
    stack_pieces(&k, GS_LA_QR, a, n, rows, npieces);
    double *out = run_out(&k);
    la_check_qr(out, a, m, n, 1e-13);
    free(out);
    free(a);
    free_views(&k);
}

Test(chunkops_linalg, qr_of_uneven_stacked_pieces_is_orthogonal_upper_and_reconstructs)
{
    const int64_t rows[] = {5, 1, 0, 17, 3};
    qr_case(rows, 5, 6);
}

Test(chunkops_linalg, qr_handles_square_single_column_and_blocked_sizes)
{
    const int64_t sq[] = {4, 4};
    qr_case(sq, 2, 8);
    const int64_t one[] = {1};
    qr_case(one, 1, 1);
    const int64_t col[] = {30, 9};
    qr_case(col, 2, 1);
    const int64_t big[] = {150, 100, 150}; /* n >= 128: LAPACK's blocked code */
    qr_case(big, 3, 150);
}

Test(chunkops_linalg, qr_diagonal_is_non_negative_for_negative_columns)
{
    /* columns of one sign each: Householder R has diagonal entries of both signs before the
     * fix-up; the fixed R must still reconstruct A */
    int64_t m = 9, n = 4;
    double *a = la_rand_mat(m, n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) a[i * n + j] = (j % 2 ? -1.0 : 1.0) * (fabs(a[i * n + j]) + 0.1);
    const int64_t rows[] = {9};
    gs_klinalg_t k;
    stack_pieces(&k, GS_LA_QR, a, n, rows, 1);
    double *out = run_out(&k);
    la_check_qr(out, a, m, n, 1e-13);
    free(out);
    free(a);
    free_views(&k);
}

static void svd_case(const double *a, const int64_t *rows, int32_t npieces, int64_t n)
{
    int64_t m = 0;
    for (int32_t t = 0; t < npieces; t++) m += rows[t];
    gs_klinalg_t k;
    stack_pieces(&k, GS_LA_SVD, a, n, rows, npieces);
    double *out = run_out(&k);
    la_check_svd(out, a, m, n, 1e-13);
    /* singular values against LAPACK's dgesvd on the dense matrix */
    double *cp = malloc(sizeof(double) * (size_t)(m * n)), *s = malloc(sizeof(double) * (size_t)n);
    double *superb = malloc(sizeof(double) * (size_t)(n + 1));
    memcpy(cp, a, sizeof(double) * (size_t)(m * n));
    cr_assert_eq(LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', (lapack_int)m, (lapack_int)n, cp,
                                (lapack_int)n, s, NULL, 1, NULL, 1, superb),
                 0);
    for (int64_t i = 0; i < n; i++)
        cr_assert(fabs(out[m * n + i] - s[i]) <= 1e-13 * s[0], "S[%lld] = %.17g, dgesvd %.17g",
                  (long long)i, out[m * n + i], s[i]);
    free(superb);
    free(s);
    free(cp);
    free(out);
    free_views(&k);
}

Test(chunkops_linalg, svd_matches_dgesvd_and_reconstructs)
{
    const int64_t rows[] = {10, 3, 27};
    double *a = la_rand_mat(40, 12);
    svd_case(a, rows, 3, 12);
    free(a);
    const int64_t sq[] = {30};
    a = la_rand_mat(30, 30);
    svd_case(a, sq, 1, 30);
    free(a);
    const int64_t one[] = {2, 5};
    a = la_rand_mat(7, 1);
    svd_case(a, one, 2, 1);
    free(a);
}

Test(chunkops_linalg, svd_of_rank_deficient_stack)
{
    int64_t m = 50, n = 8;
    double *a = la_rand_mat(m, n);
    for (int64_t i = 0; i < m; i++) {
        a[i * n + 5] = a[i * n + 1];              /* duplicate column */
        a[i * n + 7] = 2.0 * a[i * n + 0] - a[i * n + 3];
    }
    const int64_t rows[] = {20, 30};
    svd_case(a, rows, 2, n);
    free(a);
}

/* ---- validation ---- */

static void expect_invalid(const gs_klinalg_t *k, const char *needle)
{
    gs_status_t s = gs_klinalg_validate(k);
    cr_assert_eq(s, GS_ERR_INVALID_PARAM, "expected INVALID_PARAM for '%s', got %s", needle,
                 gs_status_name(s));
    cr_assert(strstr(gs_last_error(), needle) != NULL, "message '%s' lacks '%s'", gs_last_error(),
              needle);
    cr_assert_eq(ops->linalg(ctx, st, k), GS_ERR_INVALID_PARAM);
}

static double vbuf[4096], vout[4096];

static gs_kmat_t vview(int64_t off, int64_t rows, int64_t cols, int64_t ld)
{
    gs_kmat_t v = {.data = vbuf, .len = 4096, .off = off, .rows = rows, .cols = cols, .ld = ld};
    return v;
}

static gs_klinalg_t good_gemm(void)
{
    gs_klinalg_t k;
    memset(&k, 0, sizeof(k));
    k.op = GS_LA_GEMM;
    k.nterms = 2;
    k.m = 4;
    k.n = 5;
    k.alpha = 1.0;
    k.a[0] = vview(0, 4, 3, 3);
    k.b[0] = vview(100, 3, 5, 8);
    k.a[1] = vview(200, 6, 4, 4);
    k.a[1].trans = 1;
    k.b[1] = vview(300, 5, 6, 6);
    k.b[1].trans = 1;
    k.out = vout;
    return k;
}

static gs_klinalg_t good_qr(int op)
{
    gs_klinalg_t k;
    memset(&k, 0, sizeof(k));
    k.op = op;
    k.nterms = 2;
    k.m = 7;
    k.n = 3;
    k.a[0] = vview(0, 2, 3, 3);
    k.a[1] = vview(50, 5, 3, 10);
    k.out = vout;
    return k;
}

/* ---- the Gram-path kernels ---- */

/* The pipeline of GRAM / GSTEP / APPLY: the path step 1 takes, and a valid SVD either way. */
Test(chunkops_linalg, gram_svd_takes_one_pass_only_when_well_conditioned)
{
    const int64_t rows[] = {70, 3, 127}, m = 200, n = 12;
    const double expo[] = {0.5, 1.7, 2.0, 6.0, 10.0};
    const int fast[] = {1, 1, 0, 0, 0};
    for (int c = 0; c < 5; c++) {
        double *a = la_graded(m, n, expo[c]), *u, *state;
        CHECK(la_gram_svd(ops, ctx, st, a, m, n, rows, 3, &u, &state));
        cr_assert_eq(state[GS_LA_H_FAST], (double)fast[c], "1e%g: kappa %g, fast %g", expo[c],
                     state[GS_LA_H_KAPPA], state[GS_LA_H_FAST]);
        cr_assert_eq(state[GS_LA_H_FAST] == 1.0, state[GS_LA_H_KAPPA] <= GS_LA_GRAM_KAPPA_FAST);
        cr_assert_eq(state[GS_LA_H_STEP], 3.0);
        cr_assert_eq(state[GS_LA_H_SRC], (double)fast[c], "the last pass reads the input only "
                     "on the fast path");
        cr_assert(fast[c] ? state[GS_LA_H_SHIFT] == 0.0 : state[GS_LA_H_SHIFT] > 0.0);
        double *out = la_gram_out(u, state, m, n), *cp = malloc(sizeof(double) * (size_t)(m * n));
        double sv[12], sup[11];
        la_check_svd(out, a, m, n, 1e-12);
        memcpy(cp, a, sizeof(double) * (size_t)(m * n));
        cr_assert_eq(LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'N', 'N', (lapack_int)m, (lapack_int)n, cp,
                                    (lapack_int)n, sv, NULL, 1, NULL, 1, sup), 0);
        for (int64_t i = 0; i < n; i++)
            cr_assert(fabs(state[GS_LA_STATE_S(n) + i] - sv[i]) <= 1e-12 * sv[0],
                      "1e%g: S[%lld] %.17g, LAPACK %.17g", expo[c], (long long)i,
                      state[GS_LA_STATE_S(n) + i], sv[i]);
        free(a), free(u), free(state), free(out), free(cp);
    }
}

Test(chunkops_linalg, gram_svd_of_nan_input_fails_numerically)
{
    const int64_t rows[] = {30, 30};
    double *a = la_rand_mat(60, 4), *u, *state;
    a[17] = NAN;
    gs_status_t s = la_gram_svd(ops, ctx, st, a, 60, 4, rows, 2, &u, &state);
    cr_assert_eq(s, GS_ERR_NUMERIC, "%s: %s", gs_status_name(s), gs_last_error());
    cr_assert(strstr(gs_last_error(), "NaN"), "%s", gs_last_error());
    cr_assert_null(u);
    free(a);
}

/* A state / Gram spec for the rejection tests (host buffers, never run). */
static gs_klinalg_t gram_spec(int32_t op, double *buf, int64_t len)
{
    gs_klinalg_t k;
    const int64_t n = 3, slen = GS_LA_STATE_LEN(3);
    memset(&k, 0, sizeof(k));
    k.op = op, k.n = n, k.out = buf;
    k.nterms = 1;
    k.m = op == GS_LA_GSTEP ? 10 : 5;
    k.alpha = op == GS_LA_GSTEP ? 2.0 : 0.0;
    k.a[0] = (gs_kmat_t){.data = buf, .len = len, .rows = op == GS_LA_GSTEP ? n : 5, .cols = n, .ld = n};
    k.b[0] = (gs_kmat_t){.data = buf, .len = len, .rows = 1, .cols = slen, .ld = slen};
    return k;
}

Test(chunkops_linalg, gram_kernels_reject_bad_states_steps_and_stacks)
{
    static double buf[256];
    gs_klinalg_t k;
    for (int32_t op = GS_LA_GRAM; op <= GS_LA_GSTEP; op++) {
        k = gram_spec(op, buf, 256);
        CHECK(gs_klinalg_validate(&k));
        k.b[0].cols = 7;   /* not a state */
        cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
        cr_assert(strstr(gs_last_error(), "not a state"), "%s", gs_last_error());
        k = gram_spec(op, buf, 256);
        k.b[0].len = 20;   /* the state view past its chunk */
        cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
        k = gram_spec(op, buf, 256);
        k.n = 0;
        cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
        k = gram_spec(op, buf, 256);
        k.a[0].cols = 2;
        cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    }
    k = gram_spec(GS_LA_APPLY, buf, 256);
    k.alpha = 1.0;   /* an alternative stack that is not there (b[1] empty) */
    cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    k.b[1] = k.a[0];
    CHECK(gs_klinalg_validate(&k));
    k.b[1].rows = 4;
    cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "alternative"), "%s", gs_last_error());
    k = gram_spec(GS_LA_APPLY, buf, 256);
    k.b[0].rows = 0;
    cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "missing"), "%s", gs_last_error());
    k = gram_spec(GS_LA_GRAM, buf, 256);
    k.m = 6;   /* the pieces have 5 rows */
    cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    k = gram_spec(GS_LA_GSTEP, buf, 256);
    k.alpha = 4.0;
    cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    k.alpha = 1.0;   /* step 1 takes no previous state */
    cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    k = gram_spec(GS_LA_GSTEP, buf, 256);
    k.b[0].rows = 0;   /* step 2 needs one */
    cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    k = gram_spec(GS_LA_GSTEP, buf, 256);
    k.m = 2;   /* m < n */
    cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    k = gram_spec(GS_LA_GSTEP, buf, 256);
    k.nterms = 2;
    cr_assert_eq(gs_klinalg_validate(&k), GS_ERR_INVALID_PARAM);
    /* a state whose apply word is not one of GS_LA_APPLY_*: refused when run */
    k = gram_spec(GS_LA_APPLY, buf, 256);
    for (int i = 0; i < 256; i++) buf[i] = 0.5;
    double out[64];
    k.out = out;
    cr_assert_eq(ops->linalg(ctx, st, &k), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "apply word"), "%s", gs_last_error());
}

Test(chunkops_linalg, validate_accepts_well_formed_specs)
{
    gs_klinalg_t k = good_gemm();
    CHECK(gs_klinalg_validate(&k));
    k = good_qr(GS_LA_QR);
    CHECK(gs_klinalg_validate(&k));
    k = good_qr(GS_LA_SVD);
    CHECK(gs_klinalg_validate(&k));
    /* a view ending exactly at the end of its chunk */
    k = good_gemm();
    k.a[0] = vview(4096 - 3 * 3, 4, 3, 3);
    k.a[0].off = 4096 - (3 * 3 + 3);
    CHECK(gs_klinalg_validate(&k));
}

Test(chunkops_linalg, rejects_a_view_outside_its_chunk)
{
    gs_klinalg_t k = good_gemm();
    k.a[1].off = 4096 - 5 * 4; /* 6 rows of ld 4 need 24 */
    expect_invalid(&k, "a[1]");
    k = good_gemm();
    k.b[0].ld = (int64_t)1 << 61; /* overflowing extent */
    expect_invalid(&k, "b[0]");
    k = good_gemm();
    k.a[0].off = INT64_MAX - 2;
    expect_invalid(&k, "a[0]");
    k = good_gemm();
    k.a[0].off = -1;
    expect_invalid(&k, "a[0].off");
    k = good_qr(GS_LA_QR);
    k.a[1].len = 50 + 4 * 10 + 2;
    expect_invalid(&k, "a[1]");
    k = good_qr(GS_LA_QR);
    k.a[1].data = NULL;
    expect_invalid(&k, "a[1].data");
}

Test(chunkops_linalg, rejects_ld_below_cols_and_bad_trans)
{
    gs_klinalg_t k = good_gemm();
    k.b[1].ld = 5;
    expect_invalid(&k, "b[1].ld");
    k = good_gemm();
    k.a[0].trans = 2;
    expect_invalid(&k, "a[0].trans");
    k = good_qr(GS_LA_SVD);
    k.a[0].trans = 1;
    expect_invalid(&k, "a[0].trans");
}

Test(chunkops_linalg, rejects_mismatched_gemm_shapes)
{
    gs_klinalg_t k = good_gemm();
    k.b[0].rows = 2; /* inner 3 vs 2 */
    expect_invalid(&k, "inner dimensions");
    k = good_gemm();
    k.m = 5;
    expect_invalid(&k, "op(a[0]) has 4 rows");
    k = good_gemm();
    k.b[1].trans = 0; /* op(b[1]) becomes 5 x 6 */
    expect_invalid(&k, "op(b[1]) has 6 columns");
}

Test(chunkops_linalg, rejects_bad_stacks)
{
    gs_klinalg_t k = good_qr(GS_LA_QR);
    k.m = 2;
    k.n = 3;
    k.nterms = 1;
    expect_invalid(&k, "m 2 < n 3");
    k = good_qr(GS_LA_QR);
    k.m = 8;
    expect_invalid(&k, "7 rows in total");
    k = good_qr(GS_LA_SVD);
    k.a[1].cols = 2;
    expect_invalid(&k, "a[1] has 2 columns");
    k = good_qr(GS_LA_SVD);
    k.n = 0;
    k.m = 0;
    expect_invalid(&k, "n is 0");
}

Test(chunkops_linalg, rejects_unknown_op_bad_nterms_and_null_out)
{
    gs_klinalg_t k = good_gemm();
    k.op = GS_LA_OP_COUNT;
    expect_invalid(&k, "unknown op");
    k.op = -1;
    expect_invalid(&k, "unknown op");
    k = good_gemm();
    k.nterms = GS_KERNEL_MAX_TERMS + 1;
    expect_invalid(&k, "nterms 33");
    k.nterms = -1;
    expect_invalid(&k, "nterms -1");
    k = good_qr(GS_LA_QR);
    k.nterms = 0;
    expect_invalid(&k, "nterms 0");
    k = good_gemm();
    k.out = NULL;
    expect_invalid(&k, "out is NULL");
    k = good_gemm();
    k.m = -1;
    expect_invalid(&k, "negative shape");
    k = good_qr(GS_LA_QR);
    k.m = INT64_MAX;
    k.n = INT64_MAX / 2;
    expect_invalid(&k, "too large");
    cr_assert_eq(gs_klinalg_validate(NULL), GS_ERR_INVALID_PARAM);
}
