/* Operations that move data between chunks, on real gsched + 2 CPU gworker processes on loopback
 * (workers fetch each other's chunks over UCX): (x + x.T).sum() on a persisted x, rechunk and
 * concatenation of persisted arrays, x[::3] gathered into a client buffer. References are
 * computed here from the random definition (reference.h). */
#include "cluster.h"
#include "reference.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <unistd.h>

TC_SUITE_CLUSTER(up2, 2, 120)

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

static gs_array_h normal2(uint64_t seed, int64_t r, int64_t c, int64_t cr, int64_t cc)
{
    int64_t shape[2] = {r, c}, chunks[2] = {cr, cc};
    gs_array_h x;
    OK(gs_array_random_normal(seed, 0, 1, 2, shape, chunks, &x));
    return x;
}

static double scalar(gs_array_h a)
{
    double v = NAN;
    OK(gs_client_compute_scalar(C, a, &v));
    return v;
}

static double sum_of(gs_array_h a)
{
    gs_array_h s;
    OK(gs_array_reduce(GS_RED_SUM, a, NULL, &s));
    double v = scalar(s);
    gs_array_release(s);
    return v;
}

/* Gather @a a into a client buffer and compare with @a want (within a few ulp: the CPU
 * backend's generator and the reference's libm differ in the last bits). */
static void expect_array(gs_array_h a, const ref_t *want)
{
    int64_t shape[GS_MAX_NDIM];
    cr_assert_eq(gs_array_ndim(a), want->ndim);
    gs_array_shape(a, shape);
    for (int d = 0; d < want->ndim; d++) cr_assert_eq(shape[d], want->shape[d]);
    double *got = gs_malloc((size_t)want->size * sizeof(double) + 8, "got");
    OK(gs_client_compute(C, a, got, (size_t)want->size));
    for (int64_t i = 0; i < want->size; i++)
        cr_assert(fabs(got[i] - want->v[i]) <= 1e-13 * fmax(1.0, fabs(want->v[i])),
                  "element %lld: %.17g vs %.17g", (long long)i, got[i], want->v[i]);
    gs_free(got);
}

Test(integration_copy, transpose_sum_of_a_persisted_array, .init = up2, .fini = down)
{
    const int64_t n = 150;
    gs_array_h x = normal2(21, n, n, 40, 55), xt, s;
    ref_t rx = ref_normal(21, 0, 1, 2, (int64_t[]){n, n});
    ref_t rs = ref_alloc(2, (int64_t[]){n, n});
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) rs.v[i * n + j] = rx.v[i * n + j] + rx.v[j * n + i];
    OK(gs_client_persist(C, x));
    OK(gs_array_transpose(x, NULL, &xt));
    OK(gs_array_binary(GS_BINARY_ADD, x, xt, &s));
    double want = ref_sum(&rs);
    cr_assert(ref_rel(sum_of(s), want) <= 1e-12, "(x + x.T).sum(): %.17g vs %.17g", sum_of(s),
              want);
    expect_array(s, &rs);
    ref_free(&rs);
    ref_free(&rx);
    gs_array_release(s);
    gs_array_release(xt);
    gs_array_release(x);
}

Test(integration_copy, rechunk_of_a_persisted_array_then_sum_and_gather, .init = up2, .fini = down)
{
    gs_array_h x = normal2(22, 130, 90, 40, 35), y, z;
    ref_t rx = ref_normal(22, 0, 1, 2, (int64_t[]){130, 90});
    OK(gs_client_persist(C, x));
    int64_t c1[2] = {25, -1}, c2[2] = {7, 6};
    OK(gs_array_rechunk(x, c1, &y));
    cr_assert_eq(gs_array_nchunks(y, 0), 6);
    cr_assert_eq(gs_array_nchunks(y, 1), 1);
    cr_assert(ref_rel(sum_of(y), ref_sum(&rx)) <= 1e-12);
    expect_array(y, &rx);
    /* finer and mixed, and an expression on top */
    OK(gs_array_rechunk(x, c2, &z));
    expect_array(z, &rx);
    gs_array_h w;
    OK(gs_array_binary(GS_BINARY_SUB, z, y, &w));   /* different grids: all zeros */
    cr_assert_eq(sum_of(w), 0.0);
    gs_array_release(w);
    gs_array_release(z);
    gs_array_release(y);
    /* concatenate / stack of persisted and computed arrays */
    gs_array_h x2, cat, st;
    OK(gs_array_binary_scalar(GS_BINARY_MUL, x, 2.0, &x2));
    gs_array_h ops[3] = {x, x2, x};
    OK(gs_array_concatenate(3, ops, 0, &cat));
    ref_t rc = ref_alloc(2, (int64_t[]){390, 90});
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < rx.size; i++) rc.v[k * rx.size + i] = rx.v[i] * (k == 1 ? 2.0 : 1.0);
    expect_array(cat, &rc);
    OK(gs_array_stack(3, ops, 1, &st));
    ref_t rt = ref_alloc(3, (int64_t[]){130, 3, 90});
    for (int64_t i = 0; i < 130; i++)
        for (int k = 0; k < 3; k++)
            for (int64_t j = 0; j < 90; j++)
                rt.v[(i * 3 + k) * 90 + j] = rx.v[i * 90 + j] * (k == 1 ? 2.0 : 1.0);
    expect_array(st, &rt);
    ref_free(&rt);
    ref_free(&rc);
    ref_free(&rx);
    gs_array_release(st);
    gs_array_release(cat);
    gs_array_release(x2);
    gs_array_release(x);
}

Test(integration_copy, strided_slices_gather_into_a_client_buffer, .init = up2, .fini = down)
{
    gs_array_h x = normal2(23, 100, 80, 30, 25), a, b;
    ref_t rx = ref_normal(23, 0, 1, 2, (int64_t[]){100, 80});
    int64_t rows[100], cols[80], nr, nc;
    OK(gs_client_persist(C, x));
    gs_slice_t s3[1] = {{0, 0, 3, 0}};
    OK(gs_array_slice(x, 1, s3, &a));
    nr = ref_slice_indices(100, 0, 0, 0, 0, 3, rows);
    for (int64_t j = 0; j < 80; j++) cols[j] = j;
    ref_t ra = ref_take2(&rx, rows, nr, cols, 80);
    expect_array(a, &ra);
    gs_slice_t s2[2] = {{0, 0, -2, 0}, {1, 0, 3, GS_SLICE_HAS_START}};
    OK(gs_array_slice(x, 2, s2, &b));
    nr = ref_slice_indices(100, 0, 0, 0, 0, -2, rows);
    nc = ref_slice_indices(80, 1, 1, 0, 0, 3, cols);
    ref_t rb = ref_take2(&rx, rows, nr, cols, nc);
    expect_array(b, &rb);
    ref_free(&rb);
    ref_free(&ra);
    ref_free(&rx);
    gs_array_release(b);
    gs_array_release(a);
    gs_array_release(x);
}
