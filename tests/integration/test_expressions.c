/* Expressions computed by real gsched + gworker processes on loopback, compared with whole-array
 * references computed in the test from the random definition (reference.h). */
#include "cluster.h"
#include "reference.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

TC_SUITE_CLUSTER(up2, 2, 120)

static void just_alarm(void)
{
    alarm(180);
}

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

static gs_array_h normal2(uint64_t seed, double mean, double std, int64_t r, int64_t c,
                          int64_t cr, int64_t cc)
{
    int64_t shape[2] = {r, c}, chunks[2] = {cr, cc};
    gs_array_h x;
    OK(gs_array_random_normal(seed, mean, std, 2, shape, chunks, &x));
    return x;
}

static gs_slice_t sl(int has_start, int64_t start, int has_stop, int64_t stop, int64_t step)
{
    gs_slice_t s;
    memset(&s, 0, sizeof(s));
    s.start = start;
    s.stop = stop;
    s.step = step;
    s.flags = (has_start ? GS_SLICE_HAS_START : 0u) | (has_stop ? GS_SLICE_HAS_STOP : 0u);
    return s;
}

/* Gather @a a and compare with @a want elementwise: |got - want| <= tol * max(1, |want|).
 * The references use gs_random_normal_v3() (the default definition, libm-free: the backends
 * match it bit for bit); the tolerance covers the expressions' own arithmetic. */
static void expect_array(gs_array_h a, const ref_t *want, double tol)
{
    int64_t shape[GS_MAX_NDIM];
    double *got;
    cr_assert_eq(gs_array_ndim(a), want->ndim);
    gs_array_shape(a, shape);
    for (int d = 0; d < want->ndim; d++)
        cr_assert_eq(shape[d], want->shape[d], "axis %d: %lld vs %lld", d, (long long)shape[d],
                     (long long)want->shape[d]);
    got = gs_malloc((size_t)want->size * sizeof(double) + 8, "got");
    OK(gs_client_compute(C, a, got, (size_t)want->size));
    {
        /* results come in their own dtype (argmax: int64; comparisons: bool) */
        const gs_dtype_t dt = (gs_dtype_t)gs_array_dtype(a);
        const size_t es = gs_dtype_size(dt);
        for (int64_t i = want->size - 1; i >= 0; i--)
            got[i] = gs_dtype_to_double(dt, (const char *)got + (size_t)i * es);
    }
    for (int64_t i = 0; i < want->size; i++)
        cr_assert(fabs(got[i] - want->v[i]) <= tol * fmax(1.0, fabs(want->v[i])),
                  "element %lld: %.17g vs %.17g",
                  (long long)i, got[i], want->v[i]);
    gs_free(got);
}

static double scalar(gs_array_h a)
{
    double v = NAN;
    OK(gs_client_compute_scalar(C, a, &v));
    return v;
}

/* (normal(10, 1, (n, n)) + 1)[::2, ::2].sum() through the cluster @a client. */
static double seed_sum(gs_client_h client, int64_t n, int64_t chunk)
{
    gs_array_h x = normal2(0, 10, 1, n, n, chunk, chunk), y, z, s;
    gs_slice_t sls[2] = {sl(0, 0, 0, 0, 2), sl(0, 0, 0, 0, 2)};
    double v = NAN;
    OK(gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &y));
    OK(gs_array_slice(y, 2, sls, &z));
    OK(gs_array_reduce(GS_RED_SUM, z, NULL, &s));
    cr_assert_eq(gs_client_compute_scalar(client, s, &v), GS_OK, "%s", gs_last_error());
    gs_array_release(s);
    gs_array_release(z);
    gs_array_release(y);
    gs_array_release(x);
    return v;
}

static double seed_reference(int64_t n, int64_t *count_p)
{
    long double s = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; i += 2)
        for (int64_t j = 0; j < n; j += 2) {
            s += gs_random_normal_v3(0, (uint64_t)(i * n + j), 10, 1) + 1.0;
            count++;
        }
    *count_p = count;
    return (double)s;
}

Test(integration_expressions, seed_reduction_matches_reference, .init = up2, .fini = down)
{
    int64_t count;
    double want = seed_reference(301, &count);
    double got = seed_sum(C, 301, 64);
    cr_assert_eq(count, 151 * 151);
    cr_assert(ref_rel(got, want) <= 1e-12, "%.17g vs %.17g", got, want);
    cr_assert(fabs(got / (double)count - 11.0) < 0.05, "mean %.6f", got / (double)count);
}

Test(integration_expressions, non_square_with_steps_of_3, .init = up2, .fini = down)
{
    /* y = (x * 2 - 1)[5:120:3, 1::3] on a 123 x 77 array in 25 x 20 chunks */
    gs_array_h x = normal2(7, 0, 1, 123, 77, 25, 20), x2, x3, y, s;
    gs_slice_t sls[2] = {sl(1, 5, 1, 120, 3), sl(1, 1, 0, 0, 3)};
    ref_t rx = ref_normal(7, 0, 1, 2, (int64_t[]){123, 77}), ry;
    int64_t rows[123], cols[77], nr, nc;
    OK(gs_array_binary_scalar(GS_BINARY_MUL, x, 2.0, &x2));
    OK(gs_array_binary_scalar(GS_BINARY_SUB, x2, 1.0, &x3));
    OK(gs_array_slice(x3, 2, sls, &y));
    for (int64_t i = 0; i < rx.size; i++) rx.v[i] = rx.v[i] * 2.0 - 1.0;
    nr = ref_slice_indices(123, 1, 5, 1, 120, 3, rows);
    nc = ref_slice_indices(77, 1, 1, 0, 0, 3, cols);
    cr_assert_eq(nr, 39);
    cr_assert_eq(nc, 26);
    ry = ref_take2(&rx, rows, nr, cols, nc);
    expect_array(y, &ry, 1e-13);
    OK(gs_array_reduce(GS_RED_SUM, y, NULL, &s));
    cr_assert(ref_rel(scalar(s), ref_sum(&ry)) <= 1e-12);
    ref_free(&ry);
    ref_free(&rx);
    gs_array_release(s);
    gs_array_release(y);
    gs_array_release(x3);
    gs_array_release(x2);
    gs_array_release(x);
}

Test(integration_expressions, negative_steps, .init = up2, .fini = down)
{
    gs_array_h x = normal2(11, 3, 2, 123, 91, 30, 17), y1, y2;
    gs_slice_t s1[2] = {sl(0, 0, 0, 0, -1), sl(0, 0, 0, 0, -3)};
    gs_slice_t s2[2] = {sl(1, 100, 1, 10, -7), sl(1, -5, 0, 0, -2)};
    ref_t rx = ref_normal(11, 3, 2, 2, (int64_t[]){123, 91}), r1, r2;
    int64_t rows[123], cols[91], nr, nc;

    OK(gs_array_slice(x, 2, s1, &y1));
    nr = ref_slice_indices(123, 0, 0, 0, 0, -1, rows);
    nc = ref_slice_indices(91, 0, 0, 0, 0, -3, cols);
    cr_assert_eq(rows[0], 122);
    cr_assert_eq(cols[1], 87);
    r1 = ref_take2(&rx, rows, nr, cols, nc);
    expect_array(y1, &r1, 1e-13);

    OK(gs_array_slice(x, 2, s2, &y2));
    nr = ref_slice_indices(123, 1, 100, 1, 10, -7, rows);
    nc = ref_slice_indices(91, 1, -5, 0, 0, -2, cols);
    cr_assert_eq(nr, 13);
    cr_assert_eq(cols[0], 86);
    r2 = ref_take2(&rx, rows, nr, cols, nc);
    expect_array(y2, &r2, 1e-13);

    ref_free(&r1);
    ref_free(&r2);
    ref_free(&rx);
    gs_array_release(y1);
    gs_array_release(y2);
    gs_array_release(x);
}

static gs_array_h reduce_axis(gs_redop_t op, gs_array_h a, int axis)
{
    gs_reduce_params_t p;
    gs_array_h r;
    memset(&p, 0, sizeof(p));
    p.field_mask = GS_REDUCE_FIELD_AXIS | GS_REDUCE_FIELD_SPLIT_EVERY;
    p.axis = axis;
    p.split_every = 3;   /* several tree levels */
    OK(gs_array_reduce(op, a, &p, &r));
    return r;
}

Test(integration_expressions, axis_reductions, .init = up2, .fini = down)
{
    const int64_t R = 57, K = 91;
    gs_array_h x = normal2(5, 1, 4, R, K, 10, 20), s0, s1, m0, n1;
    ref_t rx = ref_normal(5, 1, 4, 2, (int64_t[]){R, K});
    ref_t rs0 = ref_alloc(1, (int64_t[]){K}), rs1 = ref_alloc(1, (int64_t[]){R});
    ref_t rm0 = ref_alloc(1, (int64_t[]){K}), rn1 = ref_alloc(1, (int64_t[]){R});

    for (int64_t j = 0; j < K; j++) {
        long double s = 0;
        double mx = -INFINITY;
        for (int64_t i = 0; i < R; i++) {
            s += rx.v[i * K + j];
            if (rx.v[i * K + j] > mx) mx = rx.v[i * K + j];
        }
        rs0.v[j] = (double)s;
        rm0.v[j] = mx;
    }
    for (int64_t i = 0; i < R; i++) {
        long double s = 0;
        double mn = INFINITY;
        for (int64_t j = 0; j < K; j++) {
            s += rx.v[i * K + j];
            if (rx.v[i * K + j] < mn) mn = rx.v[i * K + j];
        }
        rs1.v[i] = (double)s;
        rn1.v[i] = mn;
    }
    s0 = reduce_axis(GS_RED_SUM, x, 0);
    s1 = reduce_axis(GS_RED_SUM, x, -1);
    m0 = reduce_axis(GS_RED_MAX, x, 0);
    n1 = reduce_axis(GS_RED_MIN, x, 1);
    expect_array(s0, &rs0, 1e-12);
    expect_array(s1, &rs1, 1e-12);
    expect_array(m0, &rm0, 1e-13);
    expect_array(n1, &rn1, 1e-13);
    ref_free(&rx);
    ref_free(&rs0);
    ref_free(&rs1);
    ref_free(&rm0);
    ref_free(&rn1);
    gs_array_release(s0);
    gs_array_release(s1);
    gs_array_release(m0);
    gs_array_release(n1);
    gs_array_release(x);
}

Test(integration_expressions, mean_std_argmax, .init = up2, .fini = down)
{
    const int64_t R = 83, K = 64;
    gs_array_h x = normal2(21, -2, 3, R, K, 16, 13), ys, mean, stdv, var1, amax, amax1, amin0;
    gs_slice_t s[2] = {sl(0, 0, 0, 0, -2), sl(1, 3, 0, 0, 3)};
    ref_t rx = ref_normal(21, -2, 3, 2, (int64_t[]){R, K}), ry;
    int64_t rows[83], cols[64], nr, nc;
    gs_reduce_params_t p;
    long double sum = 0, m2 = 0;
    double m, want_std, want_var1;
    int64_t best = 0;

    OK(gs_array_slice(x, 2, s, &ys));
    nr = ref_slice_indices(R, 0, 0, 0, 0, -2, rows);
    nc = ref_slice_indices(K, 1, 3, 0, 0, 3, cols);
    ry = ref_take2(&rx, rows, nr, cols, nc);
    for (int64_t i = 0; i < ry.size; i++) sum += ry.v[i];
    m = (double)(sum / ry.size);
    for (int64_t i = 0; i < ry.size; i++) m2 += ((long double)ry.v[i] - m) * ((long double)ry.v[i] - m);
    want_std = sqrt((double)(m2 / ry.size));
    want_var1 = (double)(m2 / (ry.size - 1));
    for (int64_t i = 1; i < ry.size; i++)
        if (ry.v[i] > ry.v[best]) best = i;

    OK(gs_array_reduce(GS_RED_MEAN, ys, NULL, &mean));
    OK(gs_array_reduce(GS_RED_STD, ys, NULL, &stdv));
    memset(&p, 0, sizeof(p));
    p.field_mask = GS_REDUCE_FIELD_DDOF;
    p.ddof = 1;
    OK(gs_array_reduce(GS_RED_VAR, ys, &p, &var1));
    OK(gs_array_reduce(GS_RED_ARGMAX, ys, NULL, &amax));
    cr_assert(ref_rel(scalar(mean), m) <= 1e-12, "mean %.17g vs %.17g", scalar(mean), m);
    cr_assert(ref_rel(scalar(stdv), want_std) <= 1e-12, "std");
    cr_assert(ref_rel(scalar(var1), want_var1) <= 1e-12, "var ddof 1");
    cr_assert_eq(scalar(amax), (double)best, "argmax %g vs %lld", scalar(amax), (long long)best);

    /* argmax along axis 1 and argmin along axis 0 of the unsliced array */
    {
        ref_t ra = ref_alloc(1, (int64_t[]){R}), rb = ref_alloc(1, (int64_t[]){K});
        for (int64_t i = 0; i < R; i++) {
            int64_t b = 0;
            for (int64_t j = 1; j < K; j++)
                if (rx.v[i * K + j] > rx.v[i * K + b]) b = j;
            ra.v[i] = (double)b;
        }
        for (int64_t j = 0; j < K; j++) {
            int64_t b = 0;
            for (int64_t i = 1; i < R; i++)
                if (rx.v[i * K + j] < rx.v[b * K + j]) b = i;
            rb.v[j] = (double)b;
        }
        amax1 = reduce_axis(GS_RED_ARGMAX, x, 1);
        amin0 = reduce_axis(GS_RED_ARGMIN, x, 0);
        expect_array(amax1, &ra, 1e-13);
        expect_array(amin0, &rb, 1e-13);
        ref_free(&ra);
        ref_free(&rb);
    }
    ref_free(&ry);
    ref_free(&rx);
    gs_array_release(amin0);
    gs_array_release(amax1);
    gs_array_release(amax);
    gs_array_release(var1);
    gs_array_release(stdv);
    gs_array_release(mean);
    gs_array_release(ys);
    gs_array_release(x);
}

Test(integration_expressions, three_d_transpose_and_axis_sum, .init = up2, .fini = down)
{
    /* t = x.transpose(2, 0, 1)[::2, ::-1, 1:]; s = t.sum(axis=1) on x of shape (9, 10, 11) */
    const int64_t A = 9, B = 10, D = 11;
    int64_t shape[3] = {A, B, D}, chunks[3] = {4, 3, 5};
    int perm[3] = {2, 0, 1};
    gs_array_h x, t, ts, s;
    gs_slice_t sls[3] = {sl(0, 0, 0, 0, 2), sl(0, 0, 0, 0, -1), sl(1, 1, 0, 0, 1)};
    ref_t rx = ref_normal(99, 0, 1, 3, shape);
    int64_t i0[11], i1[9], i2[10], n0, n1, n2;
    ref_t rs;
    OK(gs_array_random_normal(99, 0, 1, 3, shape, chunks, &x));
    OK(gs_array_transpose(x, perm, &t));
    OK(gs_array_slice(t, 3, sls, &ts));
    s = reduce_axis(GS_RED_SUM, ts, 1);
    /* t[p, q, r] = x[q, r, p] */
    n0 = ref_slice_indices(D, 0, 0, 0, 0, 2, i0);
    n1 = ref_slice_indices(A, 0, 0, 0, 0, -1, i1);
    n2 = ref_slice_indices(B, 1, 1, 0, 0, 1, i2);
    rs = ref_alloc(2, (int64_t[]){n0, n2});
    for (int64_t p = 0; p < n0; p++)
        for (int64_t r = 0; r < n2; r++) {
            long double acc = 0;
            for (int64_t q = 0; q < n1; q++) acc += rx.v[(i1[q] * B + i2[r]) * D + i0[p]];
            rs.v[p * n2 + r] = (double)acc;
        }
    expect_array(s, &rs, 1e-12);
    ref_free(&rs);
    ref_free(&rx);
    gs_array_release(s);
    gs_array_release(ts);
    gs_array_release(t);
    gs_array_release(x);
}

Test(integration_expressions, one_vs_three_workers_and_chunkings_agree, .init = just_alarm,
     .fini = down)
{
    tcluster_t c1, c3;
    gs_client_h k1, k3;
    double a1, a3, b3, c3v, d3, want;
    int64_t count;
    cr_assert(tc_start(&c1, 1, NULL, NULL));
    cr_assert(tc_start(&c3, 3, NULL, NULL));
    k1 = tc_connect(&c1, GS_LOWER_DEFAULT);
    k3 = tc_connect(&c3, GS_LOWER_DEFAULT);
    cr_assert(k1 != NULL && k3 != NULL, "%s", gs_last_error());
    a1 = seed_sum(k1, 257, 40);
    a3 = seed_sum(k3, 257, 40);
    b3 = seed_sum(k3, 257, 64);
    c3v = seed_sum(k3, 257, 257);
    d3 = seed_sum(k3, 257, 33);
    want = seed_reference(257, &count);
    /* the same graph gives the same bits whichever workers run it */
    cr_assert_eq(a1, a3, "1 worker %.17g, 3 workers %.17g", a1, a3);
    /* other chunkings only change the summation order */
    cr_assert(ref_rel(b3, a3) <= 1e-12, "%.17g vs %.17g", b3, a3);
    cr_assert(ref_rel(c3v, a3) <= 1e-12, "%.17g vs %.17g", c3v, a3);
    cr_assert(ref_rel(d3, a3) <= 1e-12, "%.17g vs %.17g", d3, a3);
    cr_assert(ref_rel(a3, want) <= 1e-12, "%.17g vs reference %.17g", a3, want);
    gs_client_destroy(k1);
    gs_client_destroy(k3);
}

Test(integration_expressions, fusion_off_gives_the_same_values, .init = up2, .fini = down)
{
    gs_client_h plain = tc_connect(&CL, GS_LOWER_CULL);
    gs_client_h nothing = tc_connect(&CL, 0);
    double fused, unfused, none;
    cr_assert(plain != NULL && nothing != NULL, "%s", gs_last_error());
    fused = seed_sum(C, 200, 45);
    unfused = seed_sum(plain, 200, 45);
    none = seed_sum(nothing, 200, 45);
    cr_assert(ref_rel(unfused, fused) <= 1e-12, "%.17g vs %.17g", unfused, fused);
    cr_assert(ref_rel(none, fused) <= 1e-12, "%.17g vs %.17g", none, fused);
    gs_client_destroy(plain);
    gs_client_destroy(nothing);
}

Test(integration_expressions, persisted_array_is_reused, .init = up2, .fini = down)
{
    gs_array_h x = normal2(3, 0, 1, 150, 140, 40, 50), y, s, s2;
    ref_t rx = ref_normal(3, 0, 1, 2, (int64_t[]){150, 140});
    double want;
    OK(gs_array_binary_scalar(GS_BINARY_MUL, x, 3.0, &y));
    for (int64_t i = 0; i < rx.size; i++) rx.v[i] *= 3.0;
    want = ref_sum(&rx);
    OK(gs_client_persist(C, y));
    OK(gs_array_reduce(GS_RED_SUM, y, NULL, &s));
    OK(gs_array_reduce(GS_RED_MAX, y, NULL, &s2));
    cr_assert(ref_rel(scalar(s), want) <= 1e-12);
    cr_assert(ref_rel(scalar(s), want) <= 1e-12, "second use of the persisted chunks");
    expect_array(y, &rx, 1e-13);
    OK(gs_client_unpersist(C, y));
    cr_assert(ref_rel(scalar(s), want) <= 1e-12, "recomputed after unpersist");
    {
        double mx = -INFINITY;
        for (int64_t i = 0; i < rx.size; i++)
            if (rx.v[i] > mx) mx = rx.v[i];
        cr_assert_eq(scalar(s2), mx);
    }
    ref_free(&rx);
    gs_array_release(s2);
    gs_array_release(s);
    gs_array_release(y);
    gs_array_release(x);
}

/* Dtypes through real daemons: float32 and int32 chunks stored, transferred between the two
 * workers and gathered in their own dtype; a bool mask counted into int64; argmax as int64. */
Test(integration_expressions, dtypes_travel_through_the_cluster, .init = up2, .fini = down)
{
    const int64_t R = 61, K = 47;
    gs_array_h x = normal2(33, 0, 4, R, K, 16, 13), f, xi, i, t, m, cnt, am;
    ref_t rx = ref_normal(33, 0, 4, 2, (int64_t[]){R, K});
    float *gf = malloc(sizeof(float) * (size_t)(R * K));
    int32_t *gi = malloc(sizeof(int32_t) * (size_t)(R * K));
    int64_t *ga = malloc(sizeof(int64_t) * (size_t)R);
    gs_reduce_params_t p = {0};
    cr_assert(gf != NULL && gi != NULL && ga != NULL);
    OK(gs_array_astype(x, GS_DTYPE_FLOAT32, &f));
    OK(gs_array_binary_array_scalar(GS_BINARY_MUL, x, 100.0, &xi));
    OK(gs_array_astype(xi, GS_DTYPE_INT32, &i));
    /* i.T + i.T read across chunk boundaries: int32 chunks move between workers */
    OK(gs_array_transpose(i, NULL, &t));
    OK(gs_array_binary_array_scalar(GS_BINARY_GT, x, 1.0, &m));
    OK(gs_array_reduce(GS_RED_SUM, m, NULL, &cnt));
    p.field_mask = GS_REDUCE_FIELD_AXIS;
    p.axis = 1;
    OK(gs_array_reduce(GS_RED_ARGMAX, x, &p, &am));
    cr_assert_eq(gs_array_dtype(cnt), GS_DTYPE_INT64);
    cr_assert_eq(gs_array_dtype(am), GS_DTYPE_INT64);

    OK(gs_client_compute(C, f, (double *)gf, (size_t)(R * K)));
    OK(gs_client_compute(C, t, (double *)gi, (size_t)(R * K)));
    OK(gs_client_compute(C, am, (double *)ga, (size_t)R));
    int64_t want_cnt = 0;
    for (int64_t r = 0; r < R; r++) {
        int64_t best = 0;
        for (int64_t c = 0; c < K; c++) {
            double v = rx.v[r * K + c];
            /* the workers' generator is within a few ulp of the reference (docs/random.md) */
            cr_assert(fabsf(gf[r * K + c] - (float)v) <= 1e-6f * fmaxf(1.0f, fabsf((float)v)),
                      "float32 (%lld, %lld): %.9g vs %.9g", (long long)r, (long long)c,
                      (double)gf[r * K + c], v);
            cr_assert(llabs((long long)gi[c * R + r] - (long long)(int32_t)(v * 100.0)) <= 1,
                      "int32 transpose (%lld, %lld): %d vs %.17g", (long long)c, (long long)r,
                      gi[c * R + r], v * 100.0);
            want_cnt += v > 1.0;
            if (v > rx.v[r * K + best]) best = c;
        }
        cr_assert_eq(ga[r], best, "argmax row %lld: %lld vs %lld", (long long)r, (long long)ga[r],
                     (long long)best);
    }
    cr_assert_eq(scalar(cnt), (double)want_cnt, "count %g vs %lld", scalar(cnt),
                 (long long)want_cnt);
    /* float32 chunks reassembled by COPY tasks on the workers (rechunk) */
    {
        gs_array_h fr;
        float *gr = malloc(sizeof(float) * (size_t)(R * K));
        cr_assert_not_null(gr);
        OK(gs_array_rechunk(f, (int64_t[]){20, 20}, &fr));
        OK(gs_client_compute(C, fr, (double *)gr, (size_t)(R * K)));
        cr_assert(memcmp(gr, gf, sizeof(float) * (size_t)(R * K)) == 0,
                  "rechunked float32 differs from the gathered array");
        free(gr);
        gs_array_release(fr);
    }
    free(ga);
    free(gi);
    free(gf);
    ref_free(&rx);
    gs_array_release(am);
    gs_array_release(cnt);
    gs_array_release(m);
    gs_array_release(t);
    gs_array_release(i);
    gs_array_release(xi);
    gs_array_release(f);
    gs_array_release(x);
}
