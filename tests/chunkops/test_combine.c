/* CPU combine (merging partial records, finalize) and copy kernels. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void run_combine(const gs_kcombine_t *k)
{
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    gs_status_t st = gs_chunkops_cpu_ops.combine(ctx, NULL, k);
    cr_assert_eq(st, GS_OK, "combine: %s", gs_last_error());
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

static void run_copy(const gs_kcopy_t *k)
{
    gs_chunkops_ctx_h ctx;
    cr_assert_eq(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx), GS_OK);
    gs_status_t st = gs_chunkops_cpu_ops.copy(ctx, NULL, k);
    cr_assert_eq(st, GS_OK, "copy: %s", gs_last_error());
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

/* Naive partial record of values v[lo..hi) whose global indices are lo..hi-1. */
static void partial(int op, const double *v, int lo, int hi, double *rec)
{
    int n = hi - lo;
    double s = 0, mean = 0, m2 = 0;
    switch (op) {
    case GS_RED_SUM: for (int i = lo; i < hi; i++) s += v[i]; rec[0] = s; break;
    case GS_RED_PROD: /* of factors near 1 (0.94..1.007), so that no product overflows */
        rec[0] = 1.0;
        for (int i = lo; i < hi; i++) rec[0] *= v[i] >= 100.0 ? 1.0 + (v[i] - 100.0) / 4096.0
                                                            : 1.0 - v[i] / 64.0;
        break;
    case GS_RED_MEAN:
        for (int i = lo; i < hi; i++) s += v[i];
        rec[0] = s;
        rec[1] = n;
        break;
    case GS_RED_MIN:
        rec[0] = INFINITY;
        for (int i = lo; i < hi; i++) rec[0] = isnan(v[i]) || isnan(rec[0]) ? NAN : fmin(rec[0], v[i]);
        break;
    case GS_RED_MAX:
        rec[0] = -INFINITY;
        for (int i = lo; i < hi; i++) rec[0] = isnan(v[i]) || isnan(rec[0]) ? NAN : fmax(rec[0], v[i]);
        break;
    case GS_RED_VAR:
    case GS_RED_STD:
        for (int i = lo; i < hi; i++) s += v[i];
        mean = n ? s / n : 0;
        for (int i = lo; i < hi; i++) m2 += (v[i] - mean) * (v[i] - mean);
        rec[0] = n;
        rec[1] = n ? mean : 0;
        rec[2] = m2;
        break;
    default: {
        int best = -1;
        for (int i = lo; i < hi; i++) {
            if (best >= 0 && isnan(v[best])) break;
            if (best < 0 || isnan(v[i]) || (op == GS_RED_ARGMIN ? v[i] < v[best] : v[i] > v[best]))
                best = i;
        }
        rec[0] = best < 0 ? (op == GS_RED_ARGMIN ? INFINITY : -INFINITY) : v[best];
        rec[1] = best;
        break;
    }
    }
}

static int same(double a, double b, double tol)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (a == b) return 1;
    return fabs(a - b) <= tol;
}

/* Split three data sets into partials at random points (some empty), shuffle the partials'
 * order, combine, and compare with the whole-data record and its final value. */
Test(chunkops_combine, merging_partials_equals_reducing_everything)
{
    enum { N = 500, NREC = 3 };
    rng_state = 11;
    double *v[NREC];
    for (int r = 0; r < NREC; r++) {
        v[r] = malloc(N * sizeof(double));
        for (int i = 0; i < N; i++)
            v[r][i] = (rnd() % 4 == 0) ? (double)(int)(rnd() % 5) : 100.0 + (double)(rnd() % 1000) / 37.0;
    }
    v[2][123] = NAN;
    v[2][400] = NAN;
    for (int trial = 0; trial < 40; trial++) {
        for (int op = 0; op < GS_RED_COUNT; op++) {
            int w = gs_redop_width(op);
            int ninputs = 1 + (int)(rnd() % GS_KERNEL_MAX_COMBINE);
            int cuts[GS_KERNEL_MAX_COMBINE + 1];
            cuts[0] = 0;
            cuts[ninputs] = N;
            for (int i = 1; i < ninputs; i++) cuts[i] = (int)(rnd() % (N + 1));
            for (int i = 1; i < ninputs; i++) /* sort */
                for (int j = i; j > 1 && cuts[j - 1] > cuts[j]; j--) {
                    int t = cuts[j];
                    cuts[j] = cuts[j - 1];
                    cuts[j - 1] = t;
                }
            int order[GS_KERNEL_MAX_COMBINE];
            for (int i = 0; i < ninputs; i++) order[i] = i;
            for (int i = ninputs - 1; i > 0; i--) {
                int j = (int)(rnd() % (uint64_t)(i + 1)), t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
            double *parts = malloc((size_t)ninputs * NREC * 3 * sizeof(double));
            gs_kcombine_t k;
            memset(&k, 0, sizeof(k));
            k.redop = op;
            k.nrec = NREC;
            k.ninputs = ninputs;
            for (int i = 0; i < ninputs; i++) {
                double *p = parts + (size_t)i * NREC * 3;
                for (int r = 0; r < NREC; r++)
                    partial(op, v[r], cuts[order[i]], cuts[order[i] + 1], p + r * w);
                k.inputs[i] = p;
            }
            double merged[NREC * 3], fin[NREC];
            k.out = merged;
            run_combine(&k);
            k.finalize = 1;
            k.ddof = (double)(trial % 2);
            k.out = fin;
            run_combine(&k);
            for (int r = 0; r < NREC; r++) {
                double want[3];
                partial(op, v[r], 0, N, want);
                double scale = 0;
                for (int i = 0; i < N; i++) scale += isnan(v[r][i]) ? 0 : fabs(v[r][i]);
                switch (op) {
                case GS_RED_VAR:
                case GS_RED_STD: {
                    cr_assert_eq(merged[r * 3], want[0]);
                    cr_assert(same(merged[r * 3 + 1], want[1], 1e-12 * fabs(want[1])));
                    cr_assert(same(merged[r * 3 + 2], want[2], 1e-10 * fabs(want[2])),
                              "m2 %.17g vs %.17g", merged[r * 3 + 2], want[2]);
                    double var = want[2] / (N - k.ddof);
                    double f = op == GS_RED_STD ? sqrt(var) : var;
                    cr_assert(same(fin[r], f, 1e-10 * fabs(f)), "op %d final %.17g vs %.17g", op,
                              fin[r], f);
                    break;
                }
                case GS_RED_PROD: /* partial products merged in another order */
                    cr_assert(same(merged[r], want[0], 1e-12 * fabs(want[0])),
                              "product %.17g vs %.17g", merged[r], want[0]);
                    cr_assert(same(fin[r], want[0], 1e-12 * fabs(want[0])));
                    break;
                case GS_RED_SUM:
                case GS_RED_MEAN:
                    cr_assert(same(merged[r * w], want[0], 1e-14 * scale));
                    if (op == GS_RED_MEAN) cr_assert_eq(merged[r * 2 + 1], N);
                    cr_assert(same(fin[r], op == GS_RED_MEAN ? want[0] / N : want[0],
                                   1e-14 * scale));
                    break;
                default:
                    for (int c = 0; c < w; c++)
                        cr_assert(same(merged[r * w + c], want[c], 0),
                                  "op %d record %d field %d: %.17g vs %.17g", op, r, c,
                                  merged[r * w + c], want[c]);
                    cr_assert(same(fin[r], want[w - 1], 0), "op %d final %.17g vs %.17g", op,
                              fin[r], want[w - 1]);
                    break;
                }
            }
            free(parts);
        }
    }
    for (int r = 0; r < NREC; r++) free(v[r]);
}

Test(chunkops_combine, finalize_of_empty_partials)
{
    static const double empty[GS_RED_COUNT][3] = {
        [GS_RED_SUM] = {0}, [GS_RED_MIN] = {INFINITY}, [GS_RED_MAX] = {-INFINITY},
        [GS_RED_MEAN] = {0, 0}, [GS_RED_VAR] = {0, 0, 0}, [GS_RED_STD] = {0, 0, 0},
        [GS_RED_ARGMIN] = {INFINITY, -1}, [GS_RED_ARGMAX] = {-INFINITY, -1}, [GS_RED_PROD] = {1}};
    for (int op = 0; op < GS_RED_COUNT; op++) {
        double out[2] = {5, 5};
        gs_kcombine_t k;
        memset(&k, 0, sizeof(k));
        k.redop = op;
        k.nrec = 1;
        k.ninputs = 3;
        for (int i = 0; i < 3; i++) k.inputs[i] = empty[op];
        k.finalize = 1;
        k.out = out;
        run_combine(&k);
        switch (op) {
        case GS_RED_SUM: cr_assert_eq(out[0], 0.0); break;
        case GS_RED_PROD: cr_assert_eq(out[0], 1.0); break;
        case GS_RED_MIN: cr_assert_eq(out[0], INFINITY); break;
        case GS_RED_MAX: cr_assert_eq(out[0], -INFINITY); break;
        case GS_RED_ARGMIN:
        case GS_RED_ARGMAX: cr_assert_eq(out[0], -1.0); break;
        default: cr_assert(isnan(out[0]), "op %d of nothing gave %g", op, out[0]); break;
        }
        cr_assert_eq(out[1], 5, "wrote past nrec");
    }
}

Test(chunkops_combine, empty_partials_do_not_disturb_the_others)
{
    const double a_var[3] = {3, 2.0, 2.0}, e_var[3] = {0, 0, 0};       /* 1,2,3 */
    const double a_arg[2] = {INFINITY, 4}, e_arg[2] = {INFINITY, -1}; /* +inf at index 4 */
    double out[3];
    gs_kcombine_t k;
    memset(&k, 0, sizeof(k));
    k.redop = GS_RED_VAR;
    k.nrec = 1;
    k.ninputs = 3;
    k.inputs[0] = e_var;
    k.inputs[1] = a_var;
    k.inputs[2] = e_var;
    k.out = out;
    run_combine(&k);
    cr_assert(out[0] == 3 && out[1] == 2 && out[2] == 2);
    k.redop = GS_RED_ARGMIN;
    k.inputs[0] = e_arg;
    k.inputs[1] = a_arg;
    k.inputs[2] = e_arg;
    run_combine(&k);
    cr_assert(out[0] == INFINITY && out[1] == 4, "an all-+inf partial must win over empty ones");
}

Test(chunkops_combine, ddof_at_or_above_count_gives_nan)
{
    const double rec[3] = {2, 1.5, 0.5}; /* values 1, 2 */
    double out[1];
    gs_kcombine_t k;
    memset(&k, 0, sizeof(k));
    k.redop = GS_RED_VAR;
    k.nrec = 1;
    k.ninputs = 1;
    k.inputs[0] = rec;
    k.finalize = 1;
    k.out = out;
    k.ddof = 0;
    run_combine(&k);
    cr_assert_eq(out[0], 0.25);
    k.ddof = 1;
    run_combine(&k);
    cr_assert_eq(out[0], 0.5);
    k.ddof = 2;
    run_combine(&k);
    cr_assert(isnan(out[0]));
    k.ddof = 3;
    k.redop = GS_RED_STD;
    run_combine(&k);
    cr_assert(isnan(out[0]));
    k.ddof = 1.5;
    run_combine(&k);
    cr_assert_eq(out[0], 1.0);
}

Test(chunkops_combine, arg_merge_keeps_smallest_index_and_first_nan)
{
    const double a[2] = {1.0, 7}, b[2] = {1.0, 3}, c[2] = {NAN, 8}, d[2] = {NAN, 2};
    double out[2];
    gs_kcombine_t k;
    memset(&k, 0, sizeof(k));
    k.redop = GS_RED_ARGMIN;
    k.nrec = 1;
    k.ninputs = 2;
    k.inputs[0] = a;
    k.inputs[1] = b;
    k.out = out;
    run_combine(&k);
    cr_assert(out[0] == 1.0 && out[1] == 3);
    k.ninputs = 4;
    k.inputs[2] = c;
    k.inputs[3] = d;
    k.redop = GS_RED_ARGMAX;
    run_combine(&k);
    cr_assert(isnan(out[0]) && out[1] == 2);
    k.finalize = 1;
    run_combine(&k);
    cr_assert_eq(out[0], 2);
}

Test(chunkops_combine, min_max_propagate_nan)
{
    const double a[1] = {1.0}, b[1] = {NAN}, c[1] = {-5};
    double out[1];
    gs_kcombine_t k;
    memset(&k, 0, sizeof(k));
    k.redop = GS_RED_MIN;
    k.nrec = 1;
    k.ninputs = 3;
    k.inputs[0] = a;
    k.inputs[1] = b;
    k.inputs[2] = c;
    k.out = out;
    run_combine(&k);
    cr_assert(isnan(out[0]));
    k.redop = GS_RED_MAX;
    k.inputs[1] = c;
    run_combine(&k);
    cr_assert_eq(out[0], 1.0);
}

Test(chunkops_combine, output_may_alias_the_first_input)
{
    double a[6] = {4, 2, 1, 10, 0, 0}; /* three mean records: (4,2) (1,10) (0,0) */
    const double b[6] = {2, 2, 1, 0, 3, 1};
    gs_kcombine_t k;
    memset(&k, 0, sizeof(k));
    k.redop = GS_RED_MEAN;
    k.nrec = 3;
    k.ninputs = 2;
    k.inputs[0] = a;
    k.inputs[1] = b;
    k.finalize = 1;
    k.out = a;
    run_combine(&k);
    cr_assert(a[0] == 1.5 && a[1] == 0.2 && a[2] == 3.0);
}

/* ---- copy ---- */

/* A 7 x 9 array f(i, j) = 100 i + j stored as 2 x 2 chunks of rows {0..4, 4..7} and columns
 * {0..5, 5..9}; assemble the block rows 2..7, cols 1..8 (a rechunk) from four pieces. */
Test(chunkops_copy, rechunk_assembles_a_block_from_four_chunks)
{
    const int rb[3] = {0, 4, 7}, cb[3] = {0, 5, 9};
    double *chunks[4];
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int nr = rb[a + 1] - rb[a], nc = cb[b + 1] - cb[b];
            double *c = malloc((size_t)(nr * nc) * sizeof(double));
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < nc; j++) c[i * nc + j] = 100.0 * (rb[a] + i) + (cb[b] + j);
            chunks[a * 2 + b] = c;
        }
    const int r0 = 2, r1 = 7, c0 = 1, c1 = 8;
    gs_kcopy_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = r1 - r0;
    k.shape[1] = c1 - c0;
    double out[5 * 7 + 1];
    out[35] = -1;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            int lo_r = rb[a] > r0 ? rb[a] : r0, hi_r = rb[a + 1] < r1 ? rb[a + 1] : r1;
            int lo_c = cb[b] > c0 ? cb[b] : c0, hi_c = cb[b + 1] < c1 ? cb[b + 1] : c1;
            int nc = cb[b + 1] - cb[b];
            gs_kpiece_t *pc = &k.pieces[k.npieces++];
            pc->src = chunks[a * 2 + b];
            pc->src_len = (rb[a + 1] - rb[a]) * nc;
            pc->src_base = (lo_r - rb[a]) * nc + (lo_c - cb[b]);
            pc->src_stride[0] = nc;
            pc->src_stride[1] = 1;
            pc->dst_start[0] = lo_r - r0;
            pc->dst_start[1] = lo_c - c0;
            pc->size[0] = hi_r - lo_r;
            pc->size[1] = hi_c - lo_c;
        }
    k.out = out;
    run_copy(&k);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 7; j++)
            cr_assert_eq(out[i * 7 + j], 100.0 * (i + r0) + (j + c0), "(%d, %d)", i, j);
    cr_assert_eq(out[35], -1);
    for (int i = 0; i < 4; i++) free(chunks[i]);
}

Test(chunkops_copy, strided_transposed_and_reversed_sources)
{
    /* src is 4 x 6 row-major s[i][j] = 10 i + j; out (6 x 4) = transpose, left half reversed */
    double s[24], out[24];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++) s[i * 6 + j] = 10 * i + j;
    gs_kcopy_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 6;
    k.shape[1] = 4;
    k.npieces = 2;
    /* out[q0][q1] for q1 in 0..2 = s[1 - q1][5 - q0] (reversed both ways) */
    k.pieces[0].src = s;
    k.pieces[0].src_len = 24;
    k.pieces[0].src_base = 1 * 6 + 5;
    k.pieces[0].src_stride[0] = -1;
    k.pieces[0].src_stride[1] = -6;
    k.pieces[0].size[0] = 6;
    k.pieces[0].size[1] = 2;
    /* out[q0][2 + q1] = s[2 + q1][q0] */
    k.pieces[1].src = s;
    k.pieces[1].src_len = 24;
    k.pieces[1].src_base = 12;
    k.pieces[1].src_stride[0] = 1;
    k.pieces[1].src_stride[1] = 6;
    k.pieces[1].dst_start[1] = 2;
    k.pieces[1].size[0] = 6;
    k.pieces[1].size[1] = 2;
    k.out = out;
    run_copy(&k);
    for (int q0 = 0; q0 < 6; q0++) {
        for (int q1 = 0; q1 < 2; q1++) cr_assert_eq(out[q0 * 4 + q1], s[(1 - q1) * 6 + 5 - q0]);
        for (int q1 = 0; q1 < 2; q1++) cr_assert_eq(out[q0 * 4 + 2 + q1], s[(2 + q1) * 6 + q0]);
    }
}

Test(chunkops_copy, three_dimensional_concatenation_and_scalars)
{
    /* concatenate a (2 x 3 x 4) and b (2 x 1 x 4) along axis 1 */
    double a[24], b[8], out[32];
    for (int i = 0; i < 24; i++) a[i] = i;
    for (int i = 0; i < 8; i++) b[i] = 100 + i;
    gs_kcopy_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 3;
    k.shape[0] = 2;
    k.shape[1] = 4;
    k.shape[2] = 4;
    k.npieces = 2;
    k.pieces[0] = (gs_kpiece_t){.src = a, .src_len = 24, .src_stride = {12, 4, 1}, .size = {2, 3, 4}};
    k.pieces[1] = (gs_kpiece_t){.src = b, .src_len = 8, .src_stride = {4, 4, 1},
                                .dst_start = {0, 3, 0}, .size = {2, 1, 4}};
    k.out = out;
    run_copy(&k);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 4; l++)
                cr_assert_eq(out[i * 16 + j * 4 + l], j < 3 ? a[i * 12 + j * 4 + l] : b[i * 4 + l]);
    /* ndim 0: one element */
    double x = 3.5, y = 0;
    memset(&k, 0, sizeof(k));
    k.npieces = 1;
    k.pieces[0].src = &x;
    k.pieces[0].src_len = 1;
    k.out = &y;
    run_copy(&k);
    cr_assert_eq(y, 3.5);
    /* empty output, no pieces */
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.shape[0] = 0;
    k.shape[1] = 5;
    k.out = &y;
    run_copy(&k);
    cr_assert_eq(y, 3.5);
}
