/* Integer records (graph/kernel.h "Integer records"): the CPU backend's fused REDUCE and
 * COMBINE kernels over int64, int32 and uint8 values against a plain-C reference in unsigned
 * 64-bit arithmetic (NumPy's wrap modulo 2^64), with values near and beyond 2^53 and sums and
 * products that wrap past 2^63; every reduction mode (whole region, inner axis, outer axis),
 * many partial records merged through COMBINE, and the specs the validator refuses. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "intsum_spec.h"
#include "../intsum_ref.h"

#define OK(call)                                                                       \
    do {                                                                               \
        gs_status_t st_ = (call);                                                      \
        cr_assert_eq(st_, GS_OK, "%s: %s", #call, gs_last_error());                    \
    } while (0)

static uint64_t rng_state;
static gs_chunkops_ctx_h ctx;

static void setup(void)
{
    OK(gs_chunkops_cpu_ops.ctx_create(NULL, &ctx));
}

static void teardown(void)
{
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t bits(double d)
{
    int64_t i;
    memcpy(&i, &d, sizeof(i));
    return i;
}

static int64_t elem(gs_dtype_t dt, const void *data, int64_t i)
{
    switch (dt) {
    case GS_DTYPE_INT32: return ((const int32_t *)data)[i];
    case GS_DTYPE_UINT8: return ((const uint8_t *)data)[i];
    default: return ((const int64_t *)data)[i];
    }
}

static void check_modes(gs_dtype_t dt, const void *data, int64_t R, int64_t C)
{
    static const int ops[] = {GS_RED_SUM, GS_RED_PROD, GS_RED_MIN, GS_RED_MAX};
    double *out = malloc(sizeof(double) * (size_t)(R > C ? R : C));
    cr_assert_not_null(out);
    for (int o = 0; o < 4; o++) {
        const int op = ops[o];
        for (int axis = -1; axis < 2; axis++) {
            gs_kfused_t k;
            const int64_t nrec = axis < 0 ? 1 : axis == 0 ? C : R;
            is_reduce_spec(&k, dt, data, R, C, op, axis, out);
            OK(gs_chunkops_cpu_ops.fused(ctx, NULL, &k));
            for (int64_t r = 0; r < nrec; r++) {
                int64_t want = ref_int_empty(op);
                for (int64_t i = 0; i < R; i++)
                    for (int64_t j = 0; j < C; j++) {
                        if ((axis == 0 && j != r) || (axis == 1 && i != r)) continue;
                        want = ref_int_op(op, want, elem(dt, data, i * C + j));
                    }
                cr_assert_eq(bits(out[r]), want,
                             "dtype %d op %d axis %d record %lld: %lld, want %lld", (int)dt, op,
                             axis, (long long)r, (long long)bits(out[r]), (long long)want);
            }
        }
    }
    free(out);
}

Test(chunkops_intsum, int64_records_are_exact_and_wrap_in_every_mode, .init = setup,
     .fini = teardown)
{
    const int64_t R = 37, C = 300;
    int64_t *a = malloc(sizeof(int64_t) * (size_t)(R * C));
    cr_assert_not_null(a);
    rng_state = 20;
    for (int64_t i = 0; i < R * C; i++) a[i] = is_big_value(rnd);
    check_modes(GS_DTYPE_INT64, a, R, C);
    /* one long row: 11100 values per record along the inner axis, one per record outer */
    check_modes(GS_DTYPE_INT64, a, 1, R * C);
    free(a);
}

Test(chunkops_intsum, int32_and_uint8_values_widen_to_int64_records, .init = setup,
     .fini = teardown)
{
    const int64_t R = 64, C = 129;
    int32_t *a = malloc(sizeof(int32_t) * (size_t)(R * C));
    uint8_t *b = malloc((size_t)(R * C));
    cr_assert(a != NULL && b != NULL);
    rng_state = 21;
    for (int64_t i = 0; i < R * C; i++) {
        a[i] = (int32_t)(rnd() % 2 ? INT32_MAX - (int64_t)(rnd() % 5)
                                   : INT32_MIN + (int64_t)(rnd() % 5));
        b[i] = (uint8_t)(255 - rnd() % 3);
    }
    check_modes(GS_DTYPE_INT32, a, R, C);
    check_modes(GS_DTYPE_UINT8, b, R, C);
    free(a);
    free(b);
}

/* count_nonzero's program (the values cast to bool, then to int64): the SUM record counts the
 * nonzero values exactly, also past 2^53 and for INT64_MIN (nonzero though its low bits are 0);
 * MAX is 1 and MIN 0 when both kinds are present. The CUDA test compares the GPU's records with
 * these, bit for bit. */
Test(chunkops_intsum, casts_to_bool_count_the_nonzero_values, .init = setup, .fini = teardown)
{
    const int64_t R = 9, C = 300;
    int64_t *a = malloc(sizeof(int64_t) * (size_t)(R * C));
    double out[1];
    gs_kfused_t k;
    cr_assert_not_null(a);
    rng_state = 23;
    int64_t want = 0;
    for (int64_t i = 0; i < R * C; i++) {
        a[i] = rnd() % 3 == 0 ? 0 : i % 7 == 0 ? INT64_MIN : is_big_value(rnd);
        want += a[i] != 0;
    }
    is_reduce_spec(&k, GS_DTYPE_INT64, a, R, C, GS_RED_SUM, -1, out);
    is_cast_to_bool(&k);
    OK(gs_chunkops_cpu_ops.fused(ctx, NULL, &k));
    cr_assert_eq(bits(out[0]), want, "count %lld, want %lld", (long long)bits(out[0]),
                 (long long)want);
    cr_assert(want > 0 && want < R * C);
    is_reduce_spec(&k, GS_DTYPE_INT64, a, R, C, GS_RED_MAX, -1, out);
    is_cast_to_bool(&k);
    OK(gs_chunkops_cpu_ops.fused(ctx, NULL, &k));
    cr_assert_eq(bits(out[0]), 1);
    is_reduce_spec(&k, GS_DTYPE_INT64, a, R, C, GS_RED_MIN, -1, out);
    is_cast_to_bool(&k);
    OK(gs_chunkops_cpu_ops.fused(ctx, NULL, &k));
    cr_assert_eq(bits(out[0]), 0);
    free(a);
}

Test(chunkops_intsum, known_wraps, .init = setup,
     .fini = teardown)
{
    int64_t v[4] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
    int64_t p[2] = {1ll << 32, 1ll << 32};
    int64_t t[41];
    double out[1];
    gs_kfused_t k;
    is_reduce_spec(&k, GS_DTYPE_INT64, v, 1, 4, GS_RED_SUM, -1, out);
    OK(gs_chunkops_cpu_ops.fused(ctx, NULL, &k));
    cr_assert_eq(bits(out[0]), -4, "4 * INT64_MAX wraps to -4");
    is_reduce_spec(&k, GS_DTYPE_INT64, p, 1, 2, GS_RED_PROD, -1, out);
    OK(gs_chunkops_cpu_ops.fused(ctx, NULL, &k));
    cr_assert_eq(bits(out[0]), 0, "2^32 * 2^32 wraps to 0");
    for (int i = 0; i < 41; i++) t[i] = 3;
    is_reduce_spec(&k, GS_DTYPE_INT64, t, 1, 41, GS_RED_PROD, -1, out);
    OK(gs_chunkops_cpu_ops.fused(ctx, NULL, &k));
    uint64_t want = 1;
    for (int i = 0; i < 41; i++) want *= 3u;
    cr_assert_eq(bits(out[0]), (int64_t)want, "3^41 modulo 2^64 (NumPy: %lld)", (long long)want);
    /* an empty region gives the empty record */
    is_reduce_spec(&k, GS_DTYPE_INT64, t, 0, 41, GS_RED_MAX, -1, out);
    OK(gs_chunkops_cpu_ops.fused(ctx, NULL, &k));
    cr_assert_eq(bits(out[0]), INT64_MIN);
}

/* 40 chunks of 1000 values, one record each, merged by COMBINE in groups of 16, then a final
 * COMBINE into the result dtype: the tree reduction of the lowering. */
Test(chunkops_intsum, many_chunks_merge_exactly_through_combine, .init = setup,
     .fini = teardown)
{
    enum { NCH = 40, N = 1000, SE = 16 };
    static const int ops[] = {GS_RED_SUM, GS_RED_PROD, GS_RED_MIN, GS_RED_MAX};
    int64_t *a = malloc(sizeof(int64_t) * NCH * N);
    cr_assert_not_null(a);
    rng_state = 22;
    for (int i = 0; i < NCH * N; i++) a[i] = is_big_value(rnd);
    for (int o = 0; o < 4; o++) {
        const int op = ops[o];
        double rec[NCH], lvl[3];
        int64_t want = ref_int_empty(op);
        for (int i = 0; i < NCH * N; i++) want = ref_int_op(op, want, a[i]);
        for (int c = 0; c < NCH; c++) {
            gs_kfused_t k;
            is_reduce_spec(&k, GS_DTYPE_INT64, a + c * N, 1, N, op, -1, rec + c);
            OK(gs_chunkops_cpu_ops.fused(ctx, NULL, &k));
        }
        for (int g = 0; g < 3; g++) {
            gs_kcombine_t kc;
            is_combine_spec(&kc, op, 1, g < 2 ? SE : NCH - 2 * SE, 0, GS_DTYPE_FLOAT64);
            for (int i = 0; i < kc.ninputs; i++) kc.inputs[i] = rec + g * SE + i;
            kc.out = lvl + g;
            OK(gs_chunkops_cpu_ops.combine(ctx, NULL, &kc));
        }
        gs_kcombine_t kf;
        int64_t res = 0;
        is_combine_spec(&kf, op, 1, 3, 1, GS_DTYPE_INT64);
        for (int i = 0; i < 3; i++) kf.inputs[i] = lvl + i;
        kf.out = (double *)&res;
        OK(gs_chunkops_cpu_ops.combine(ctx, NULL, &kf));
        cr_assert_eq(res, want, "op %d: %lld, want %lld", op, (long long)res, (long long)want);
    }
    free(a);
}

Test(chunkops_intsum, combine_finalizes_into_narrow_dtypes, .init = setup,
     .fini = teardown)
{
    double in[2];
    int32_t o32 = 0;
    uint8_t o8 = 0;
    int64_t x = -5, y = 2147483647;
    memcpy(&in[0], &x, 8);
    memcpy(&in[1], &y, 8);
    gs_kcombine_t kc;
    is_combine_spec(&kc, GS_RED_MAX, 1, 2, 1, GS_DTYPE_INT32);
    kc.inputs[0] = in;
    kc.inputs[1] = in + 1;
    kc.out = (double *)&o32;
    OK(gs_chunkops_cpu_ops.combine(ctx, NULL, &kc));
    cr_assert_eq(o32, INT32_MAX);
    kc.redop = GS_RED_MIN;
    kc.out_dtype = GS_DTYPE_UINT8;
    kc.out = (double *)&o8;
    OK(gs_chunkops_cpu_ops.combine(ctx, NULL, &kc));
    cr_assert_eq(o8, (uint8_t)-5, "int64 -5 as uint8 wraps (astype)");
}

Test(chunkops_intsum, validation_refuses_bad_integer_records, .init = setup,
     .fini = teardown)
{
    int64_t v[4] = {1, 2, 3, 4};
    double out[2];
    gs_kfused_t k;
    is_reduce_spec(&k, GS_DTYPE_INT64, v, 1, 4, GS_RED_MEAN, -1, out);
    cr_assert_eq(gs_kfused_validate(&k), GS_ERR_INVALID_PARAM, "mean has no integer records");
    is_reduce_spec(&k, GS_DTYPE_INT64, v, 1, 4, GS_RED_SUM, -1, out);
    k.out_dtype = GS_DTYPE_INT32;
    cr_assert_eq(gs_kfused_validate(&k), GS_ERR_INVALID_PARAM, "records are int64 or float64");
    is_reduce_spec(&k, GS_DTYPE_INT64, v, 1, 4, GS_RED_SUM, -1, out);
    k.prog[1].op = GS_OP_CAST;
    k.prog[1].dtype = GS_DTYPE_INT64;
    k.prog[1].arg = GS_DTYPE_FLOAT64;
    k.nprog = 2;
    cr_assert_eq(gs_kfused_validate(&k), GS_ERR_INVALID_PARAM,
                 "integer records need int64 values");
    cr_assert_eq(gs_chunkops_cpu_ops.fused(ctx, NULL, &k), GS_ERR_INVALID_PARAM);

    gs_kcombine_t kc;
    memset(&kc, 0, sizeof(kc));
    kc.redop = GS_RED_VAR;
    kc.nrec = 1;
    kc.ninputs = 1;
    kc.inputs[0] = out;
    kc.out = out + 1;
    kc.rec_dtype = GS_DTYPE_INT64;
    cr_assert_eq(gs_kcombine_validate(&kc), GS_ERR_INVALID_PARAM, "var has no integer records");
    kc.redop = GS_RED_SUM;
    kc.rec_dtype = GS_DTYPE_UINT8;
    cr_assert_eq(gs_kcombine_validate(&kc), GS_ERR_INVALID_PARAM);
    kc.rec_dtype = GS_DTYPE_INT64;
    cr_assert_eq(gs_kcombine_validate(&kc), GS_OK, "%s", gs_last_error());
}
