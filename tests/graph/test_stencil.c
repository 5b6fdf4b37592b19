/* gs_array_stencil end to end on the CPU backend: lowering (slab and stencil layers), the
 * codec, the serial evaluator, against the plain-C reference (tests/stencil_ref.h) for every
 * boundary mode on odd chunkings, chunks thinner than the halo, and the errors. */
#include "graph_test_util.h"
#include "graph_eval_util.h"
#include "../stencil_ref.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"

#include <stdio.h>
#include <stdlib.h>

static gs_chunkops_ctx_h ctx;

static void setup(void)
{
    ctx = gx_ctx_create();
}

static void teardown(void)
{
    tx_free_all();
    gx_ctx_destroy(ctx);
}

TestSuite(graph_stencil, .init = setup, .fini = teardown, .timeout = 120);

static const char *const bnames[] = {"none", "reflect", "periodic", "constant"};

/* Lower @a h with @a flags, round-trip every layer through the codec, evaluate. */
static double *eval_h(gs_array_h h, unsigned flags, gs_taskgraph_t **tg_keep)
{
    int64_t size = gs_array_size(h);
    double *out = malloc((size_t)(size ? size : 1) * sizeof(double));
    gs_taskgraph_t *tg = gx_lower(h, flags);
    cr_assert_not_null(out);
    TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)size));
    if (tg_keep) *tg_keep = tg;
    else gs_taskgraph_free(tg);
    return out;
}

/* Stencil of a uniform random array of @a shape / @a chunks, compared with the reference
 * under lowering flags 0 and the default. */
static void check_case(int nd, const int64_t *shape, const int64_t *chunks, const int *r,
                       int b, double cval)
{
    int64_t nw = 1;
    for (int j = 0; j < nd; j++) nw *= 2 * r[j] + 1;
    double *w = malloc((size_t)nw * sizeof(double));
    for (int64_t k = 0; k < nw; k++) w[k] = 0.25 + 0.125 * (double)(k % 7) - 0.03 * (double)k;
    tx_t *x = tx_uniform(17, -1.0, 2.0, nd, shape, chunks);
    gs_array_h s;
    TX_OK(gs_array_stencil(x->h, w, r, (gs_boundary_t)b, cval, &s));
    tx_t *ref = tx_new(s, nd, shape);
    ref_stencil(x->v, nd, shape, w, r, b, cval, ref->v);
    const unsigned flags[] = {0, GS_LOWER_DEFAULT};
    for (int f = 0; f < 2; f++) {
        double *got = eval_h(s, flags[f], NULL);
        for (int64_t i = 0; i < ref->size; i++)
            cr_assert(fabs(got[i] - ref->v[i]) <= 1e-12 * fmax(1.0, fabs(ref->v[i])),
                      "%s, flags 0x%x: element %lld is %.17g, reference %.17g", bnames[b],
                      flags[f], (long long)i, got[i], ref->v[i]);
        free(got);
    }
    free(w);
}

Test(graph_stencil, smoothing_3x3_every_boundary_odd_chunks)
{
    const int64_t shape[2] = {23, 17}, chunks[2] = {5, 4};
    const int r[2] = {1, 1};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) check_case(2, shape, chunks, r, b, 0.5);
}

Test(graph_stencil, unequal_radii_one_and_three_axes)
{
    const int64_t s1[1] = {31}, c1[1] = {7};
    const int r1[1] = {3};
    const int64_t s3[3] = {7, 9, 6}, c3[3] = {3, 4, 5};
    const int r3[3] = {1, 2, 0};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) {
        check_case(1, s1, c1, r1, b, -2.0);
        check_case(3, s3, c3, r3, b, 3.0);
    }
}

/* 3-D blocks taller than the row cache of the cpu backend holds twice over: the rows of one
 * output row must all stay cached while it is summed (the cuda test of the same shapes found
 * it: rows fetched early were evicted by later ones of the same output row). */
Test(graph_stencil, three_axes_blocks_taller_than_the_row_cache)
{
    const int64_t s3[3] = {17, 40, 70}, c3[3] = {6, 13, 33};
    const int r3[3] = {1, 2, 1};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) check_case(3, s3, c3, r3, b, 2.0);
}

Test(graph_stencil, chunks_thinner_than_the_halo)
{
    /* radius 3 over chunks of 2 and radius 2 over chunks of 1: halos span several chunks */
    const int64_t shape[2] = {11, 6}, chunks[2] = {2, 1};
    const int r[2] = {3, 2};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) check_case(2, shape, chunks, r, b, 1.5);
}

Test(graph_stencil, radius_equal_to_the_axis)
{
    const int64_t shape[2] = {3, 4}, chunks[2] = {2, 3};
    const int r[2] = {3, 1};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) check_case(2, shape, chunks, r, b, 1.5);
}

Test(graph_stencil, single_chunk_and_radius_zero)
{
    const int64_t shape[2] = {9, 8}, one[2] = {9, 8}, chunks[2] = {4, 3};
    const int r[2] = {2, 1}, r0[2] = {0, 0};
    for (int b = 0; b < GS_BOUNDARY_COUNT; b++) {
        check_case(2, shape, one, r, b, 0.0);
        check_case(2, shape, chunks, r0, b, 0.0);
    }
}

Test(graph_stencil, neighbours_send_edge_slabs_not_chunks)
{
    const int64_t shape[2] = {40, 40}, chunks[2] = {10, 10};
    const int r[2] = {1, 1};
    const double w[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    tx_t *x = tx_uniform(3, 0.0, 1.0, 2, shape, chunks);
    gs_array_h s;
    gs_taskgraph_t *tg;
    TX_OK(gs_array_stencil(x->h, w, r, GS_BOUNDARY_PERIODIC, 0.0, &s));
    tx_new(s, 2, shape);
    TX_OK(gs_graph_lower(s, GS_LOWER_DEFAULT, &tg));
    int slab = -1, sten = -1;
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        if (gs_layer_kind(tg->layers[i]) == GS_LAYER_SLAB) slab = (int)i;
        if (gs_layer_kind(tg->layers[i]) == GS_LAYER_STENCIL) sten = (int)i;
    }
    cr_assert(slab >= 0 && sten >= 0, "no slab (%d) or stencil (%d) layer", slab, sten);
    /* periodic 3x3 on 4x4 chunks: every block takes 4 edge slabs of 10 and 4 corners of 1 */
    cr_assert_eq(gs_layer_nblocks(tg->layers[slab]), 16 * 8);
    for (uint64_t k = 0; k < gs_layer_nblocks(tg->layers[slab]); k++) {
        uint64_t nb = gs_layer_out_nbytes(tg->layers[slab], k);
        cr_assert(nb == 10 * sizeof(double) || nb == sizeof(double),
                  "slab %llu has %llu bytes", (unsigned long long)k, (unsigned long long)nb);
    }
    for (uint64_t k = 0; k < 16; k++)
        cr_assert_eq(gs_layer_ninputs(tg->layers[sten], k), 9);
    gs_taskgraph_free(tg);
}

Test(graph_stencil, composes_with_fused_producers_and_reductions)
{
    const int64_t shape[2] = {13, 10}, chunks[2] = {4, 3};
    const int r[2] = {1, 1};
    const double w[9] = {0, 0.25, 0, 0.25, -1, 0.25, 0, 0.25, 0};
    tx_t *x = tx_uniform(5, 0.0, 1.0, 2, shape, chunks);
    gs_array_h y, s, t, tot;
    TX_OK(gs_array_binary_array_scalar(GS_BINARY_MUL, x->h, 3.0, &y));
    TX_OK(gs_array_stencil(y, w, r, GS_BOUNDARY_REFLECT, 0.0, &s));
    TX_OK(gs_array_binary_array_scalar(GS_BINARY_ADD, s, 1.0, &t));
    TX_OK(gs_array_reduce(GS_RED_SUM, t, NULL, &tot));
    double *xv = malloc(130 * sizeof(double)), *sv = malloc(130 * sizeof(double));
    for (int i = 0; i < 130; i++) xv[i] = 3.0 * x->v[i];
    ref_stencil(xv, 2, shape, w, r, GS_BOUNDARY_REFLECT, 0.0, sv);
    double want = 0;
    for (int i = 0; i < 130; i++) want += sv[i] + 1.0;
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        double *got = eval_h(tot, f, NULL);
        cr_assert(fabs(got[0] - want) <= 1e-10 * fmax(1.0, fabs(want)), "flags 0x%x: %.17g vs %.17g",
                  f, got[0], want);
        free(got);
    }
    free(xv);
    free(sv);
    gs_array_release(y);
    gs_array_release(s);
    gs_array_release(t);
    gs_array_release(tot);
}

Test(graph_stencil, rejects_bad_arguments)
{
    const int64_t shape[2] = {6, 5}, chunks[2] = {3, 3};
    const double w[343] = {0};
    tx_t *x = tx_uniform(5, 0.0, 1.0, 2, shape, chunks);
    gs_array_h s = NULL;
    const int ok[2] = {1, 1}, neg[2] = {-1, 1}, big[2] = {9, 9}, wide[2] = {7, 1};
    cr_assert_eq(gs_array_stencil(NULL, w, ok, GS_BOUNDARY_NONE, 0, &s), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_stencil(x->h, NULL, ok, GS_BOUNDARY_NONE, 0, &s), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_stencil(x->h, w, NULL, GS_BOUNDARY_NONE, 0, &s), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_stencil(x->h, w, ok, (gs_boundary_t)7, 0, &s), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_stencil(x->h, w, neg, GS_BOUNDARY_NONE, 0, &s), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_stencil(x->h, w, big, GS_BOUNDARY_NONE, 0, &s), GS_ERR_INVALID_PARAM);
    /* radius 7 > axis 0 (6) is fine for constant / none, not for reflect / periodic */
    cr_assert_eq(gs_array_stencil(x->h, w, wide, GS_BOUNDARY_REFLECT, 0, &s), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_stencil(x->h, w, wide, GS_BOUNDARY_PERIODIC, 0, &s), GS_ERR_INVALID_PARAM);
    cr_assert_null(s, "output written on failure");
    TX_OK(gs_array_stencil(x->h, w, wide, GS_BOUNDARY_CONSTANT, 2.0, &s));
    gs_array_release(s);
}

Test(graph_stencil, arrays_of_other_dtypes_are_refused_naming_the_dtype)
{
    const int64_t shape[2] = {6, 5}, chunks[2] = {3, 3};
    const double w[9] = {0};
    const int r[2] = {1, 1};
    gs_array_h f = NULL, s = NULL;
    TX_OK(gs_array_ones_dtype(GS_DTYPE_FLOAT32, 2, shape, chunks, &f));
    cr_assert_eq(gs_array_stencil(f, w, r, GS_BOUNDARY_NONE, 0, &s), GS_ERR_INVALID_PARAM);
    cr_assert_null(s, "output written on failure");
    cr_assert(strstr(gs_last_error(), "float32") != NULL, "message: %s", gs_last_error());
    gs_array_release(f);
}

Test(graph_stencil, wide_constant_halo_past_the_array)
{
    const int64_t shape[2] = {6, 5}, chunks[2] = {3, 3};
    const int r[2] = {7, 1};
    check_case(2, shape, chunks, r, GS_BOUNDARY_CONSTANT, 2.0);
    check_case(2, shape, chunks, r, GS_BOUNDARY_NONE, 0.0);
}

Test(graph_stencil, halo_over_too_many_chunks_is_a_clear_error)
{
    /* radius 4 on chunks of 1: 9 x 9 pieces per block, more than GS_KERNEL_MAX_PIECES */
    const int64_t shape[2] = {12, 12}, chunks[2] = {1, 1};
    const int r[2] = {4, 4};
    static double w[81];
    tx_t *x = tx_uniform(5, 0.0, 1.0, 2, shape, chunks);
    gs_array_h s;
    gs_taskgraph_t *tg = NULL;
    TX_OK(gs_array_stencil(x->h, w, r, GS_BOUNDARY_REFLECT, 0, &s));
    cr_assert_eq(gs_graph_lower(s, GS_LOWER_DEFAULT, &tg), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "rechunk") != NULL, "message: %s", gs_last_error());
    cr_assert_null(tg);
    gs_array_release(s);
}

Test(graph_stencil, truncated_or_corrupt_layers_are_refused)
{
    const int64_t shape[2] = {8, 7}, chunks[2] = {3, 4};
    const int r[2] = {1, 1};
    const double w[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    tx_t *x = tx_uniform(5, 0.0, 1.0, 2, shape, chunks);
    gs_array_h s;
    gs_taskgraph_t *tg;
    TX_OK(gs_array_stencil(x->h, w, r, GS_BOUNDARY_PERIODIC, 0, &s));
    tx_new(s, 2, shape);
    TX_OK(gs_graph_lower(s, GS_LOWER_DEFAULT, &tg));
    int seen = 0;
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        int k = gs_layer_kind(tg->layers[i]);
        if (k != GS_LAYER_SLAB && k != GS_LAYER_STENCIL) continue;
        seen++;
        gs_buf_t b;
        gs_buf_init(&b);
        TX_OK(gs_layer_encode(tg->layers[i], &b));
        for (size_t n = 0; n < b.len; n++) {
            gs_layer_t *l = NULL;
            cr_assert_neq(gs_layer_decode(b.data, n, &l), GS_OK, "prefix of %zu decoded", n);
            cr_assert_null(l);
        }
        /* flip each byte: decode fails or yields a layer that passes its checks */
        for (size_t n = 0; n < b.len; n++) {
            gs_layer_t *l = NULL;
            unsigned char *d = (unsigned char *)b.data;
            d[n] ^= 0x5a;
            if (gs_layer_decode(b.data, b.len, &l) == GS_OK) gs_layer_free(l);
            d[n] ^= 0x5a;
        }
        gs_buf_cleanup(&b);
    }
    cr_assert_eq(seen, 2);
    gs_taskgraph_free(tg);
}

Test(graph_stencil, kernel_spec_errors)
{
    double out[4], in[4] = {1, 2, 3, 4}, wt[3] = {1, 1, 1};
    gs_kstencil_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 1;
    k.shape[0] = 4;
    k.radius[0] = 1;
    k.nweights = 3;
    k.weights = wt;
    k.npieces = 1;
    k.pieces[0].src = in;
    k.pieces[0].src_len = 4;
    k.pieces[0].src_stride[0] = 1;
    k.pieces[0].dst_start[0] = 1;
    k.pieces[0].size[0] = 4;
    k.out = out;
    gs_chunkops_stream_h st;
    TX_OK(gs_chunkops_cpu_ops.stream_create(ctx, &st));
    TX_OK(gs_chunkops_cpu_ops.stencil(ctx, st, &k));
    cr_assert(out[0] == 3 && out[1] == 6 && out[2] == 9 && out[3] == 7, "%g %g %g %g", out[0],
              out[1], out[2], out[3]);
    k.nweights = 2;
    cr_assert_eq(gs_chunkops_cpu_ops.stencil(ctx, st, &k), GS_ERR_INVALID_PARAM);
    k.nweights = 3;
    k.pieces[0].dst_start[0] = 3;   /* past the padded block (6) */
    cr_assert_eq(gs_chunkops_cpu_ops.stencil(ctx, st, &k), GS_ERR_INVALID_PARAM);
    k.pieces[0].dst_start[0] = 1;
    k.pieces[0].src_base = 1;       /* reads past its input */
    cr_assert_eq(gs_chunkops_cpu_ops.stencil(ctx, st, &k), GS_ERR_INVALID_PARAM);
    k.pieces[0].src_base = 0;
    k.keep_lo[0] = 5;
    cr_assert_eq(gs_chunkops_cpu_ops.stencil(ctx, st, &k), GS_ERR_INVALID_PARAM);
    gs_chunkops_cpu_ops.stream_destroy(ctx, st);
}
