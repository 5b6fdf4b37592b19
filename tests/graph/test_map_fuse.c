/* Elementwise user kernels (GS_KERNEL_ELEMENTWISE) fused with their producers and consumers
 * under GS_LOWER_FUSE (graph/lower_fuse_user.c): exactly the unfused values under every set of
 * lowering flags, one task per chunk of the chain, kernels not declared elementwise left alone,
 * crashes failing only their task, typed inputs, slices and two kernels in one program, and
 * the fused layer's codec and instantiation refusing malformed tasks. */
#include "graph_test_util.h"
#include "graph_eval_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static gs_chunkops_ctx_h ctx;

/* Handles made inside expressions (tmp()), released at teardown. */
static gs_array_h tmps[32];
static int ntmps;

static gs_array_h tmp(gs_array_h h)
{
    cr_assert_lt(ntmps, 32);
    tmps[ntmps++] = h;
    return h;
}

static void setup(void)
{
    ctx = gx_ctx_create();
}

static void teardown(void)
{
    for (int i = 0; i < ntmps; i++) gs_array_release(tmps[i]);
    ntmps = 0;
    tx_free_all();
    gx_ctx_destroy(ctx);
}

TestSuite(graph_map_fuse, .init = setup, .fini = teardown, .timeout = 120);

static const gs_user_kernel_t ew = {GS_TEST_KERNELS, "gs_test_ew", NULL, 0, NULL,
                                    GS_KERNEL_ELEMENTWISE};
static const gs_user_kernel_t ew_plain = {GS_TEST_KERNELS, "gs_test_ew", NULL, 0, NULL, 0};

/* Lower @a h with @a flags (codec round trip included), evaluate into @a out; *ntasks_p the
 * graph's tasks (may be NULL). */
static gs_status_t run(gs_array_h h, unsigned flags, double *out, uint64_t *ntasks_p)
{
    gs_taskgraph_t *tg = gx_lower(h, flags);
    gs_status_t st = gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)gs_array_size(h));
    if (ntasks_p != NULL) *ntasks_p = tg->ntasks;
    gs_taskgraph_free(tg);
    return st;
}

/* @a h (@a n values) lowered with GS_LOWER_DEFAULT gives, into @a got, exactly what its
 * unfused lowering (flags 0) gives into @a ref; *ntasks_p (may be NULL): the tasks of the
 * GS_LOWER_DEFAULT graph. */
static void same_fused_and_not(gs_array_h h, double *ref, double *got, int n, uint64_t *ntasks_p)
{
    TX_OK(run(h, 0, ref, NULL));
    TX_OK(run(h, GS_LOWER_DEFAULT, got, ntasks_p));
    for (int i = 0; i < n; i++) cr_assert(got[i] == ref[i], "element %d", i);
}

/* Layers named @a name in the graph of @a h under @a flags. */
static int count_layers(gs_array_h h, unsigned flags, const char *name)
{
    gs_taskgraph_t *tg = gx_lower(h, flags);
    int n = 0;
    for (uint32_t i = 0; i < tg->nlayers; i++) n += strcmp(gs_layer_name(tg->layers[i]), name) == 0;
    gs_taskgraph_free(tg);
    return n;
}

static gs_array_h unary(gs_unop_t op, gs_array_h a)
{
    gs_array_h o;
    TX_OK(gs_array_unary(op, a, &o));
    return o;
}

static gs_array_h scal(gs_binop_t op, gs_array_h a, double s)
{
    gs_array_h o;
    TX_OK(gs_array_binary_scalar(op, a, s, &o));
    return o;
}

/* map_blocks of @a k over @a in, the output shaped and chunked as @a shape / @a chunks */
static gs_array_h mapb(const gs_user_kernel_t *k, int nin, gs_array_h *in, const int64_t *shape,
                       const int64_t *chunks)
{
    gs_array_h o;
    TX_OK(gs_array_map_blocks(k, nin, in, 2, shape, chunks, &o));
    return o;
}

static gs_array_h total(gs_array_h a)
{
    gs_array_h o;
    TX_OK(gs_array_reduce(GS_RED_SUM, a, NULL, &o));
    return o;
}

/* exp(x) + 1 -> kernel -> * 2 (and its sum): 37 x 23 in chunks of 8 x 7 = 5 x 4 blocks */
Test(graph_map_fuse, a_chain_equals_the_unfused_values_under_every_flag_set_in_one_task_per_chunk)
{
    const int64_t shape[2] = {37, 23}, chunks[2] = {8, 7}, nb = 20;
    tx_t *x = tx_uniform(7, -1.0, 1.0, 2, shape, chunks);
    gs_array_h a = scal(GS_BINARY_ADD, tmp(unary(GS_UNARY_EXP, x->h)), 1.0);
    gs_array_h in[1] = {a};
    gs_array_h m = mapb(&ew, 1, in, shape, chunks), c = scal(GS_BINARY_MUL, m, 2.0), s = total(c);
    double *ref = malloc(37 * 23 * sizeof(double)), *got = malloc(37 * 23 * sizeof(double));
    double sref = 0, sgot = 0;
    uint64_t nt_unfused, nt_fused, nt_sum;
    TX_OK(run(c, 0, ref, &nt_unfused));
    TX_OK(run(s, 0, &sref, NULL));
    /* the values by hand: ((e^x + 1)^2 + row0 / 1000) * 2 */
    for (int i = 0; i < 37 * 23; i++) {
        double v = exp(x->v[i]) + 1.0;
        cr_assert(ref[i] == (v * v + (double)((i / 23) / 8 * 8) / 1000.0) * 2.0, "element %d", i);
    }
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        if (f & ~GS_LOWER_DEFAULT) continue;
        double sv = 0;
        TX_OK(run(c, f, got, &nt_fused));
        for (int i = 0; i < 37 * 23; i++)
            cr_assert(got[i] == ref[i], "flags 0x%x element %d: %.17g vs %.17g", f, i, got[i], ref[i]);
        TX_OK(run(s, f, &sv, &nt_sum));
        /* the same partial sums in the same order: the same bits */
        if (f & GS_LOWER_FUSE) {
            cr_assert_eq(nt_fused, (uint64_t)nb, "flags 0x%x: %llu tasks", f,
                         (unsigned long long)nt_fused);
            cr_assert_eq(count_layers(c, f, "map_blocks-fused"), 1);
            sgot = sv;
        }
        cr_assert(fabs(sv - sref) <= 1e-12 * fabs(sref), "flags 0x%x: %.17g vs %.17g", f, sv, sref);
    }
    /* unfused: the generator, exp, + 1, the kernel and * 2 each a task per chunk */
    cr_assert_eq(nt_unfused, (uint64_t)(5 * nb), "%llu", (unsigned long long)nt_unfused);
    /* fused sum: one task per chunk (producers, kernel, * 2, partial sum) and the same
     * combine tree as the built-in chain square(exp(x) + 1) * 2 */
    TX_OK(run(s, GS_LOWER_DEFAULT, &sgot, &nt_sum));
    gs_array_h bsq = unary(GS_UNARY_SQUARE, a), bmul = scal(GS_BINARY_MUL, bsq, 2.0);
    gs_array_h bs = total(bmul);
    uint64_t nt_builtin;
    TX_OK(run(bs, GS_LOWER_DEFAULT, &sref, &nt_builtin));
    cr_assert_eq(nt_sum, nt_builtin, "%llu vs %llu", (unsigned long long)nt_sum,
                 (unsigned long long)nt_builtin);
    cr_assert_eq(count_layers(bs, GS_LOWER_DEFAULT, "reduce-sum"), 1);
    cr_assert_eq(count_layers(s, GS_LOWER_DEFAULT, "reduce-sum"), 0);   /* inside the fused layer */
    gs_array_release(bsq);
    gs_array_release(bmul);
    gs_array_release(bs);
    cr_assert_eq(count_layers(s, GS_LOWER_DEFAULT, "map_blocks-fused"), 1);
    {   /* the dashboard's name of the fused layer: producers, kernel, consumer */
        gs_taskgraph_t *tg = gx_lower(s, GS_LOWER_DEFAULT);
        char name[128];
        gs_layer_display_name(tg->layers[0], name, sizeof(name));
        cr_assert_str_eq(name, "uniform+exp+add+map_blocks+mul+sum");
        gs_taskgraph_free(tg);
    }
    gs_array_release(a);
    gs_array_release(m);
    gs_array_release(c);
    gs_array_release(s);
    free(ref);
    free(got);
}

Test(graph_map_fuse, two_inputs_both_produced_in_the_task)
{
    const int64_t shape[2] = {19, 30}, chunks[2] = {5, 9};
    tx_t *x = tx_uniform(8, 0.0, 1.0, 2, shape, chunks), *y = tx_normal(9, 0.0, 1.0, 2, shape, chunks);
    gs_array_h in[2] = {unary(GS_UNARY_SQRT, x->h), scal(GS_BINARY_MUL, y->h, 3.0)};
    gs_array_h m = mapb(&ew, 2, in, shape, chunks), c = scal(GS_BINARY_SUB, m, 0.5);
    double *ref = malloc(19 * 30 * sizeof(double)), *got = malloc(19 * 30 * sizeof(double));
    uint64_t nt;
    same_fused_and_not(c, ref, got, 19 * 30, &nt);
    cr_assert_eq(nt, 4 * 4, "%llu", (unsigned long long)nt);
    gs_array_release(in[0]);
    gs_array_release(in[1]);
    gs_array_release(m);
    gs_array_release(c);
    free(ref);
    free(got);
}

Test(graph_map_fuse, a_kernel_not_declared_elementwise_is_not_fused)
{
    const int64_t shape[2] = {16, 16}, chunks[2] = {8, 8};
    tx_t *x = tx_uniform(10, -1.0, 1.0, 2, shape, chunks);
    gs_array_h a = scal(GS_BINARY_ADD, x->h, 1.0), in[1] = {a};
    gs_array_h m = mapb(&ew_plain, 1, in, shape, chunks), c = scal(GS_BINARY_MUL, m, 2.0);
    double ref[256], got[256];
    uint64_t nt;
    same_fused_and_not(c, ref, got, 256, &nt);
    cr_assert_eq(nt, 3 * 4, "%llu", (unsigned long long)nt);   /* as today */
    cr_assert_eq(count_layers(c, GS_LOWER_DEFAULT, "map_blocks"), 1);
    cr_assert_eq(count_layers(c, GS_LOWER_DEFAULT, "map_blocks-fused"), 0);
    gs_array_release(a);
    gs_array_release(m);
    gs_array_release(c);
}

Test(graph_map_fuse, elementwise_needs_the_outputs_grid)
{
    const int64_t shape[2] = {16, 16}, chunks[2] = {8, 8}, other[2] = {8, 9};
    tx_t *x = tx_uniform(10, -1.0, 1.0, 2, shape, chunks);
    gs_array_h in[1] = {x->h}, m = NULL;
    gs_user_kernel_t bad = ew;
    /* same number of chunks, other bounds: fine for a plain kernel, not an elementwise one */
    cr_assert_eq(gs_array_map_blocks(&ew, 1, in, 2, shape, other, &m), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "elementwise") != NULL, "%s", gs_last_error());
    TX_OK(gs_array_map_blocks(&ew_plain, 1, in, 2, shape, other, &m));
    gs_array_release(m);
    m = NULL;
    bad.flags = 0x80;
    cr_assert_eq(gs_array_map_blocks(&bad, 1, in, 2, shape, chunks, &m), GS_ERR_INVALID_PARAM);
    cr_assert_null(m);
}

Test(graph_map_fuse, a_crash_inside_a_fused_task_fails_it_and_the_process_carries_on)
{
    const int64_t shape[2] = {12, 12}, chunks[2] = {6, 6};
    tx_t *x = tx_uniform(11, -1.0, 1.0, 2, shape, chunks);
    gs_user_kernel_t crash = {GS_TEST_KERNELS, "gs_test_crash", NULL, 0, NULL, GS_KERNEL_ELEMENTWISE};
    gs_array_h a = unary(GS_UNARY_EXP, x->h), in[1] = {a};
    gs_array_h m = mapb(&crash, 1, in, shape, chunks), s = total(tmp(scal(GS_BINARY_MUL, m, 2.0)));
    gs_array_h good = total(tmp(scal(GS_BINARY_MUL, tmp(mapb(&ew, 1, in, shape, chunks)), 2.0)));
    double v = 0;
    cr_assert_eq(count_layers(s, GS_LOWER_DEFAULT, "map_blocks-fused"), 1);
    cr_assert_eq(run(s, GS_LOWER_DEFAULT, &v, NULL), GS_ERR_TASK_FAILED);
    cr_assert(strstr(gs_last_error(), "gs_test_crash") != NULL, "%s", gs_last_error());
    cr_assert(strstr(gs_last_error(), "signal") != NULL, "%s", gs_last_error());
    TX_OK(run(good, GS_LOWER_DEFAULT, &v, NULL));
    cr_assert(isfinite(v) && v > 0);
    gs_array_release(a);
    gs_array_release(m);
    gs_array_release(s);
    gs_array_release(good);
}

/* (typed kernels: test_map_dtype.c) */
Test(graph_map_fuse, converted_chains_fuse)
{
    const int64_t shape[2] = {10, 14}, chunks[2] = {4, 5};
    gs_array_h ints, f, m = NULL, c, in[1];
    double ref[140], got[140];
    uint64_t nt;
    TX_OK(gs_array_random_integers(12, -5, 5, 2, shape, chunks, &ints));
    TX_OK(gs_array_astype(tmp(scal(GS_BINARY_MUL, ints, 3.0)), GS_DTYPE_FLOAT64, &f));
    in[0] = f;
    m = mapb(&ew, 1, in, shape, chunks);
    c = scal(GS_BINARY_ADD, m, 1.0);
    same_fused_and_not(c, ref, got, 140, &nt);
    cr_assert_eq(nt, 3 * 3, "%llu", (unsigned long long)nt);
    gs_array_release(ints);
    gs_array_release(f);
    gs_array_release(m);
    gs_array_release(c);
}

Test(graph_map_fuse, slices_and_a_second_kernel_materialise_the_kernel)
{
    const int64_t shape[2] = {20, 20}, chunks[2] = {5, 5};
    tx_t *x = tx_uniform(13, -1.0, 1.0, 2, shape, chunks);
    gs_array_h a = unary(GS_UNARY_SIN, x->h), b = unary(GS_UNARY_COS, x->h);
    gs_array_h ia[1] = {a}, ib[1] = {b};
    gs_array_h ma = mapb(&ew, 1, ia, shape, chunks), mb = mapb(&ew, 1, ib, shape, chunks), sum, sl;
    gs_slice_t s2[2] = {GS_SLICE_STEP(2), GS_SLICE_STEP(-1)};
    double ref[400], got[400];
    TX_OK(gs_array_binary(GS_BINARY_ADD, ma, mb, &sum));
    same_fused_and_not(sum, ref, got, 400, NULL);
    /* one kernel joins the add's program, the other is a task of its own */
    cr_assert_eq(count_layers(sum, GS_LOWER_DEFAULT, "map_blocks-fused"), 2);
    TX_OK(gs_array_slice(ma, 2, s2, &sl));
    same_fused_and_not(sl, ref, got, 200, NULL);
    /* the slice reads the kernel's stored output (its producer still fused into it) */
    cr_assert_eq(count_layers(sl, GS_LOWER_DEFAULT, "map_blocks-fused"), 1);
    cr_assert_eq(count_layers(sl, GS_LOWER_DEFAULT, "fused"), 1);
    gs_array_release(a);
    gs_array_release(b);
    gs_array_release(ma);
    gs_array_release(mb);
    gs_array_release(sum);
    gs_array_release(sl);
}

Test(graph_map_fuse, the_fused_layer_refuses_truncations_and_malformed_tasks)
{
    const int64_t shape[2] = {9, 7}, chunks[2] = {4, 3};
    tx_t *x = tx_uniform(14, -1.0, 1.0, 2, shape, chunks);
    tx_t *y = tx_uniform(15, -1.0, 1.0, 2, shape, chunks);
    gs_array_h p, in[2], m, c;
    gs_taskgraph_t *tg;
    const gs_layer_t *ul = NULL;
    gs_buf_t b;
    gs_ktask_t kt;
    gs_chunk_ref_t ins[4];
    double buf[64], out[64];
    /* a literal read by the producer of input 0 and as input 1 itself */
    TX_OK(gs_array_from_host(x->v, 2, shape, chunks, &p));
    in[0] = scal(GS_BINARY_ADD, p, 1.0);
    in[1] = p;
    m = mapb(&ew, 2, in, shape, chunks);
    TX_OK(gs_array_binary(GS_BINARY_MUL, m, y->h, &c));
    tg = gx_lower(c, GS_LOWER_DEFAULT);
    for (uint32_t i = 0; i < tg->nlayers; i++)
        if (strcmp(gs_layer_name(tg->layers[i]), "map_blocks-fused") == 0) ul = tg->layers[i];
    cr_assert_not_null(ul);
    /* block 0 reads the literal twice (input 0's producer, input 1) */
    cr_assert_eq(gs_layer_ninputs(ul, 0), 2);
    gs_buf_init(&b);
    TX_OK(gs_layer_encode(ul, &b));
    for (size_t cut = 0; cut < b.len; cut++) {
        gs_layer_t *l = NULL;
        cr_assert_eq(gs_layer_decode(b.data, cut, &l), GS_ERR_PROTO, "cut at %zu", cut);
    }
    /* every byte changed a few ways: refused, or a layer whose encoding is stable (the fuzz
     * target's contract, tests/fuzz/fuzz_layer.c) */
    for (size_t at = 0; at < b.len; at++)
        for (int d = 0; d < 4; d++) {
            static const uint8_t delta[4] = {1, 0x7f, 0x80, 0xff};
            uint8_t *mut = malloc(b.len);
            gs_layer_t *l = NULL, *l2 = NULL;
            gs_status_t st;
            memcpy(mut, b.data, b.len);
            mut[at] = (uint8_t)(mut[at] + delta[d]);
            st = gs_layer_decode(mut, b.len, &l);
            cr_assert(st == GS_OK || st == GS_ERR_PROTO, "byte %zu: %d", at, (int)st);
            if (st == GS_OK) {
                gs_buf_t e1, e2;
                gs_buf_init(&e1);
                gs_buf_init(&e2);
                TX_OK(gs_layer_encode(l, &e1));
                TX_OK(gs_layer_decode(e1.data, e1.len, &l2));
                TX_OK(gs_layer_encode(l2, &e2));
                cr_assert(e1.len == e2.len && memcmp(e1.data, e2.data, e1.len) == 0, "byte %zu", at);
                gs_buf_cleanup(&e1);
                gs_buf_cleanup(&e2);
                gs_layer_free(l2);
                gs_layer_free(l);
            }
            free(mut);
        }
    gs_buf_cleanup(&b);
    for (int i = 0; i < 4; i++) {
        ins[i].data = buf;
        ins[i].len = 12;
        ins[i].nbytes = 12 * sizeof(double);
    }
    cr_assert_eq(gs_layer_instantiate(ul, 0, 1, ins, out, &kt), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "malformed fused user task") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_layer_instantiate(ul, 0, 3, ins, out, &kt), GS_ERR_INVALID_PARAM);
    ins[1].len = 11;
    cr_assert_eq(gs_layer_instantiate(ul, 0, 2, ins, out, &kt), GS_ERR_INVALID_PARAM);
    ins[1].len = 12;
    TX_OK(gs_layer_instantiate(ul, 0, 2, ins, out, &kt));
    cr_assert_eq(kt.kind, GS_KTASK_MAPFUSED);
    cr_assert(kt.u.mapfused.has_pre[0] && !kt.u.mapfused.has_pre[1] && kt.u.mapfused.has_post);
    cr_assert_neq(kt.u.mapfused.post_user_leaves, 0u);
    gs_taskgraph_free(tg);
    gs_array_release(p);
    gs_array_release(in[0]);
    gs_array_release(m);
    gs_array_release(c);
}

/* Consumers other than a store or a sum: a reduction along one axis, argmax (global indices
 * from the fused partial's own block start), a float32 cast: equal to the unfused graph. */
Test(graph_map_fuse, axis_reductions_argmax_and_casts_after_the_kernel)
{
    const int64_t shape[2] = {23, 31}, chunks[2] = {6, 8};
    tx_t *x = tx_uniform(16, -1.0, 1.0, 2, shape, chunks);
    gs_array_h a = unary(GS_UNARY_TANH, x->h), in[1] = {a};
    gs_array_h m = mapb(&ew, 1, in, shape, chunks), r[3];
    gs_reduce_params_t ax = {0};
    double ref[64], got[64];
    memset(ref, 0, sizeof(ref));
    memset(got, 0, sizeof(got));
    ax.field_mask = GS_REDUCE_FIELD_AXIS;
    ax.axis = 1;
    TX_OK(gs_array_reduce(GS_RED_MEAN, m, &ax, &r[0]));
    TX_OK(gs_array_reduce(GS_RED_ARGMAX, tmp(scal(GS_BINARY_MUL, m, -1.0)), NULL, &r[1]));
    TX_OK(gs_array_reduce(GS_RED_MAX, tmp(scal(GS_BINARY_ADD, m, 0.25)), &ax, &r[2]));
    for (int k = 0; k < 3; k++) {
        int64_t n = gs_array_size(r[k]);
        gs_taskgraph_t *tg;
        cr_assert_eq(count_layers(r[k], GS_LOWER_DEFAULT, "map_blocks-fused"), 1, "result %d", k);
        tg = gx_lower(r[k], 0);
        TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, ref, (size_t)n));
        gs_taskgraph_free(tg);
        tg = gx_lower(r[k], GS_LOWER_DEFAULT);
        TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, got, (size_t)n));
        /* argmax: an int64 index, compared as bytes; the others within rounding of the
         * partials' order (the same order: exact in practice) */
        if (gs_array_dtype(r[k]) == GS_DTYPE_INT64)
            cr_assert(memcmp(ref, got, sizeof(int64_t)) == 0, "argmax");
        else
            for (int64_t i = 0; i < n; i++)
                cr_assert(fabs(got[i] - ref[i]) <= 1e-15 * fabs(ref[i]), "result %d [%lld]", k,
                          (long long)i);
        gs_taskgraph_free(tg);
        gs_array_release(r[k]);
    }
    /* a float32 store of the kernel's output */
    gs_array_h f32;
    double fa[23 * 31], fb[23 * 31];
    gs_taskgraph_t *tg;
    TX_OK(gs_array_astype(m, GS_DTYPE_FLOAT32, &f32));
    cr_assert_eq(count_layers(f32, GS_LOWER_DEFAULT, "map_blocks-fused"), 1);
    tg = gx_lower(f32, 0);
    TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, fa, 23 * 31));
    gs_taskgraph_free(tg);
    tg = gx_lower(f32, GS_LOWER_DEFAULT);
    TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, fb, 23 * 31));
    gs_taskgraph_free(tg);
    cr_assert(memcmp(fa, fb, 23 * 31 * sizeof(float)) == 0);
    gs_array_release(f32);
    gs_array_release(a);
    gs_array_release(m);
}

/* Lower @a h with GS_LOWER_DEFAULT and @a hints, evaluate into @a out (may be NULL: lower
 * only); *nt_p the tasks, *fused_p the fused user layers. */
static void run_hinted(gs_array_h h, const gs_lower_hints_t *hints, double *out, uint64_t *nt_p,
                       int *fused_p)
{
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower_hinted(h, GS_LOWER_DEFAULT, hints, &tg));
    *nt_p = tg->ntasks;
    *fused_p = 0;
    for (uint32_t i = 0; i < tg->nlayers; i++)
        *fused_p += strcmp(gs_layer_name(tg->layers[i]), "map_blocks-fused") == 0;
    if (out != NULL)
        TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)gs_array_size(h)));
    gs_taskgraph_free(tg);
}

/* gs_lower_hints_t.cpu_threads: a CPU kernel is fused only with at least
 * GS_LOWER_USER_FUSE_TASKS_PER_THREAD blocks per thread (20 blocks: fused for up to 5
 * threads, declined from 6, giving the plan of a kernel not declared elementwise); a CUDA
 * kernel is fused whatever the CPU pool; the values never change. */
Test(graph_map_fuse, cpu_kernels_fuse_only_with_enough_blocks_per_hinted_thread)
{
    const int64_t shape[2] = {37, 23}, chunks[2] = {8, 7}, nb = 20;
    tx_t *x = tx_uniform(7, -1.0, 1.0, 2, shape, chunks);
    gs_array_h a = scal(GS_BINARY_ADD, tmp(unary(GS_UNARY_EXP, x->h)), 1.0);
    gs_array_h in[1] = {a};
    gs_array_h c = tmp(scal(GS_BINARY_MUL, tmp(mapb(&ew, 1, in, shape, chunks)), 2.0));
    gs_array_h cp = tmp(scal(GS_BINARY_MUL, tmp(mapb(&ew_plain, 1, in, shape, chunks)), 2.0));
    const gs_user_kernel_t cu = {NULL, "ew", NULL, 0, "extern \"C\" __global__ void ew() {}",
                                 GS_KERNEL_ELEMENTWISE};
    gs_array_h cc = tmp(scal(GS_BINARY_MUL, tmp(mapb(&cu, 1, in, shape, chunks)), 2.0));
    double *ref = malloc(37 * 23 * sizeof(double)), *got = malloc(37 * 23 * sizeof(double));
    uint64_t nt, nt_plain;
    int fused;
    gs_lower_hints_t none = {0}, five = {5}, six = {6}, many = {1000};
    cr_assert_eq(GS_LOWER_USER_FUSE_TASKS_PER_THREAD * 5, nb);
    run_hinted(cp, NULL, ref, &nt_plain, &fused);
    cr_assert_eq(fused, 0);
    for (int v = 0; v < 4; v++) {
        const gs_lower_hints_t *h = v == 0 ? NULL : v == 1 ? &none : v == 2 ? &five : &six;
        run_hinted(c, h, got, &nt, &fused);
        for (int i = 0; i < 37 * 23; i++) cr_assert(got[i] == ref[i], "hint %d element %d", v, i);
        if (v < 3) {
            cr_assert_eq(fused, 1, "hint %d", v);
            cr_assert_eq(nt, (uint64_t)nb, "hint %d: %llu tasks", v, (unsigned long long)nt);
        } else {   /* declined: the not-elementwise plan, a task per step group and block */
            cr_assert_eq(fused, 0);
            cr_assert_eq(nt, nt_plain, "%llu vs %llu", (unsigned long long)nt,
                         (unsigned long long)nt_plain);
            cr_assert_gt(nt, (uint64_t)nb);
        }
    }
    run_hinted(cc, &many, NULL, &nt, &fused);
    cr_assert_eq(fused, 1, "a CUDA kernel fuses whatever the CPU pool");
    cr_assert_eq(nt, (uint64_t)nb);
    gs_array_release(a);
    free(ref);
    free(got);
}
