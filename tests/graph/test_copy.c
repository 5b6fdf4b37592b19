/* Operations that move data between chunks: rechunk, concatenate, stack (COPY layers), and the
 * ones that read other chunks in place (x + x.T, strided slices). Every expression is lowered
 * under every combination of lowering flags, its layers round-trip through the codec, and the
 * task graph runs on the CPU backend (a small evaluator below handles persisted inputs); values
 * are compared with references computed directly by naive loops. */
#include "graph_test_util.h"
#include "graph_eval_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"
#include "graph/copy_int.h"

#include <stdio.h>
#include <stdlib.h>

#define LW_MAX_IN 256

static gs_chunkops_ctx_h ctx;
static gs_chunkops_stream_h stream;

static void setup(void)
{
    ctx = gx_ctx_create();
    TX_OK(gs_chunkops_cpu_ops.stream_create(ctx, &stream));
}

static void teardown(void)
{
    tx_free_all();
    gs_chunkops_cpu_ops.stream_destroy(ctx, stream);
    gx_ctx_destroy(ctx);
}

TestSuite(graph_copy, .init = setup, .fini = teardown, .timeout = 120);

/* ---- evaluation ---- */

/* Persisted chunks for the evaluator: keys (7, block) of one array, data per block. */
typedef struct ext_store {
    uint64_t nblocks;
    double **chunk;
    int64_t *len;
} ext_store_t;

static ext_store_t g_ext;

/* Persist @a t: its chunks (from the reference values) become externals (7, b). */
static void persist(tx_t *t)
{
    gs_grid_t g;
    memset(&g, 0, sizeof(g));
    g.ndim = t->ndim;
    for (int a = 0; a < t->ndim; a++) {
        g.shape[a] = t->shape[a];
        g.nchunks[a] = gs_array_nchunks(t->h, a);
        g.bounds[a] = (int64_t *)gs_array_chunk_bounds(t->h, a);
    }
    uint64_t nb = gs_grid_nblocks(&g);
    gs_key_t *keys = calloc(nb, sizeof(gs_key_t));
    g_ext.nblocks = nb;
    g_ext.chunk = calloc(nb, sizeof(double *));
    g_ext.len = calloc(nb, sizeof(int64_t));
    int64_t rs[GS_MAX_NDIM];
    tx_rowstrides(t, rs);
    for (uint64_t b = 0; b < nb; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], c[GS_MAX_NDIM];
        gs_grid_block_region(&g, b, start, shape);
        int64_t n = gs_region_size(t->ndim, shape);
        g_ext.len[b] = n;
        g_ext.chunk[b] = malloc((size_t)(n ? n : 1) * sizeof(double));
        for (int64_t i = 0; i < n; i++) {
            int64_t k = i, src = 0;
            for (int a = t->ndim - 1; a >= 0; a--) {
                c[a] = k % shape[a];
                k /= shape[a];
            }
            for (int a = 0; a < t->ndim; a++) src += (start[a] + c[a]) * rs[a];
            g_ext.chunk[b][i] = t->v[src];
        }
        keys[b].graph = 7;
        keys[b].task = b;
    }
    TX_OK(gs_array_set_persisted(t->h, nb, keys));
    free(keys);
}

static void unpersist(tx_t *t)
{
    gs_array_clear_persisted(t->h);
    for (uint64_t b = 0; b < g_ext.nblocks; b++) free(g_ext.chunk[b]);
    free(g_ext.chunk);
    free(g_ext.len);
    memset(&g_ext, 0, sizeof(g_ext));
}

/* Run @a tg task by task (externals from g_ext) and assemble the result row-major. */
static void run_with_externals(const gs_taskgraph_t *tg, double *out)
{
    double **res = calloc(tg->ntasks + 1, sizeof(double *));
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        const gs_layer_t *l = tg->layers[tg->task_layer[t]];
        int n = (int)(tg->dep_off[t + 1] - tg->dep_off[t]);
        gs_chunk_ref_t in[LW_MAX_IN];
        cr_assert_leq(n, LW_MAX_IN);
        for (int i = 0; i < n; i++) {
            uint64_t d = tg->deps[tg->dep_off[t] + i];
            if (d >= tg->ntasks) {
                gs_key_t k = tg->externals[d - tg->ntasks];
                cr_assert_eq(k.graph, 7);
                cr_assert_lt(k.task, g_ext.nblocks);
                in[i].data = g_ext.chunk[k.task];
                in[i].len = g_ext.len[k.task];
            } else {
                in[i].data = res[d];
                in[i].len = (int64_t)(tg->task_nbytes[d] / sizeof(double));
            }
        }
        uint64_t nbytes = tg->task_nbytes[t];
        res[t] = malloc(nbytes ? nbytes : 8);
        gs_ktask_t kt;
        TX_OK(gs_layer_instantiate(l, tg->task_block[t], n, in, res[t], &kt));
        TX_OK(gs_chunkops_run_ktask(&gs_chunkops_cpu_ops, ctx, stream, &kt));
        TX_OK(gs_chunkops_cpu_ops.sync(ctx, stream));
    }
    const gs_grid_t *g = &tg->out_grid;
    int64_t rs[GS_MAX_NDIM], s = 1;
    for (int a = g->ndim - 1; a >= 0; a--) {
        rs[a] = s;
        s *= g->shape[a];
    }
    for (uint64_t b = 0; b < tg->noutputs; b++) {
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], c[GS_MAX_NDIM];
        gs_grid_block_region(g, b, start, shape);
        int64_t n = gs_region_size(g->ndim, shape);
        const double *src = res[tg->outputs[b]];
        for (int64_t i = 0; i < n; i++) {
            int64_t k = i, dst = 0;
            for (int a = g->ndim - 1; a >= 0; a--) {
                c[a] = k % shape[a];
                k /= shape[a];
            }
            for (int a = 0; a < g->ndim; a++) dst += (start[a] + c[a]) * rs[a];
            out[dst] = src[i];
        }
    }
    for (uint64_t t = 0; t < tg->ntasks; t++) free(res[t]);
    free(res);
}

static int ncopy_layers(const gs_taskgraph_t *tg)
{
    int n = 0;
    for (uint32_t i = 0; i < tg->nlayers; i++) n += gs_layer_kind(tg->layers[i]) == GS_LAYER_COPY;
    return n;
}

static double *eval_flags(gs_array_h h, unsigned flags)
{
    gs_taskgraph_t *tg;
    int64_t size = gs_array_size(h);
    double *out = malloc((size_t)(size ? size : 1) * sizeof(double));
    cr_assert_not_null(out);
    TX_OK(gs_graph_lower(h, flags, &tg));
    TX_OK(gs_taskgraph_validate(tg));
    cr_assert_eq(tg->out_grid.ndim, gs_array_ndim(h));
    for (int ax = 0; ax < tg->out_grid.ndim; ax++) {
        cr_assert_eq(tg->out_grid.nchunks[ax], gs_array_nchunks(h, ax));
        cr_assert(memcmp(tg->out_grid.bounds[ax], gs_array_chunk_bounds(h, ax),
                         (size_t)(tg->out_grid.nchunks[ax] + 1) * sizeof(int64_t)) == 0,
                  "flags 0x%x: chunk bounds of axis %d differ from the array's", flags, ax);
    }
    gx_roundtrip_layers(tg);
    TX_OK(gs_taskgraph_validate(tg));
    if (tg->nexternals > 0) run_with_externals(tg, out);
    else TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)size));
    gs_taskgraph_free(tg);
    return out;
}

static int close_to(double got, double want, double rtol)
{
    if (isnan(want)) return isnan(got);
    return fabs(got - want) <= rtol * fmax(1.0, fabs(want));
}

/* every combination of CULL, FUSE, SLICE_PUSHDOWN; rtol 0: exact (copies of host data and
 * arange values); random values agree within 1e-12 (the backend's generator and the reference's
 * may differ in the last bits) */
static void check_tol(tx_t *t, double rtol, const char *what)
{
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        double *out = eval_flags(t->h, f);
        for (int64_t i = 0; i < t->size; i++)
            cr_assert(rtol == 0 ? out[i] == t->v[i] : close_to(out[i], t->v[i], rtol),
                      "%s, flags 0x%x: element %lld is %.17g, reference %.17g", what, f,
                      (long long)i, out[i], t->v[i]);
        free(out);
    }
}

static void check(tx_t *t, const char *what)
{
    check_tol(t, 1e-12, what);
}

static void check_exact(tx_t *t, const char *what)
{
    check_tol(t, 0.0, what);
}

/* ---- reference builders ---- */

static tx_t *tx_rechunk(tx_t *a, const int64_t *chunks)
{
    gs_array_h h;
    TX_OK(gs_array_rechunk(a->h, chunks, &h));
    tx_t *t = tx_new(h, a->ndim, a->shape);
    memcpy(t->v, a->v, (size_t)a->size * sizeof(double));
    for (int ax = 0; ax < a->ndim; ax++) {
        int64_t c = chunks[ax], nc = gs_array_nchunks(h, ax);
        const int64_t *b = gs_array_chunk_bounds(h, ax);
        if (c == 0) {
            cr_assert_eq(nc, gs_array_nchunks(a->h, ax));
        } else if (c == -1 || c >= a->shape[ax]) {
            cr_assert_eq(nc, 1);
        } else {
            for (int64_t k = 0; k < nc; k++)
                cr_assert_eq(b[k + 1] - b[k], k + 1 < nc ? c : a->shape[ax] - k * c);
        }
    }
    return t;
}

static tx_t *tx_rechunk_bounds(tx_t *a, const int64_t *nchunks, const int64_t *const *bounds)
{
    gs_array_h h;
    TX_OK(gs_array_rechunk_bounds(a->h, nchunks, bounds, &h));
    tx_t *t = tx_new(h, a->ndim, a->shape);
    memcpy(t->v, a->v, (size_t)a->size * sizeof(double));
    return t;
}

/* np.concatenate / np.stack of xs[0..n) */
static tx_t *tx_join(int n, tx_t **xs, int axis, int stack)
{
    gs_array_h hs[16], h;
    int nd = xs[0]->ndim + stack;
    int64_t shape[GS_MAX_NDIM];
    if (axis < 0) axis += nd;
    for (int i = 0; i < n; i++) hs[i] = xs[i]->h;
    if (stack) TX_OK(gs_array_stack(n, hs, axis, &h));
    else TX_OK(gs_array_concatenate(n, hs, axis, &h));
    for (int j = 0, k = 0; j < nd; j++) {
        if (stack && j == axis) {
            shape[j] = n;
            continue;
        }
        shape[j] = xs[0]->shape[k];
        if (!stack && j == axis)
            for (int i = 1; i < n; i++) shape[j] += xs[i]->shape[k];
        k++;
    }
    tx_t *t = tx_new(h, nd, shape);
    int64_t c[GS_MAX_NDIM];
    for (int64_t i = 0; i < t->size; i++) {
        tx_coords(t, i, c);
        int which = 0;
        int64_t pos = c[axis];
        if (stack) {
            which = (int)pos;
        } else {
            while (pos >= xs[which]->shape[axis]) pos -= xs[which++]->shape[axis];
        }
        const tx_t *s = xs[which];
        int64_t rs[GS_MAX_NDIM], src = 0;
        tx_rowstrides(s, rs);
        for (int j = 0, k = 0; j < nd; j++) {
            if (stack && j == axis) continue;
            src += (j == axis ? pos : c[j]) * rs[k++];
        }
        t->v[i] = s->v[src];
    }
    return t;
}

/* ---- rechunk ---- */

Test(graph_copy, rechunk_1d_finer_coarser_and_mixed)
{
    int64_t shape[1] = {23}, ch[1] = {5};
    tx_t *x = tx_normal(11, 0, 1, 1, shape, ch);
    int64_t c3[1] = {3}, c7[1] = {7}, cw[1] = {-1}, c1[1] = {1}, cb[1] = {100};
    check(tx_rechunk(x, c3), "rechunk 5 -> 3");
    check(tx_rechunk(x, c7), "rechunk 5 -> 7");
    check(tx_rechunk(x, cw), "rechunk 5 -> whole");
    check(tx_rechunk(x, c1), "rechunk 5 -> 1");
    check(tx_rechunk(x, cb), "rechunk 5 -> 100");
    int64_t nc[1] = {4}, b0[5] = {0, 2, 11, 12, 23};
    const int64_t *bs[1] = {b0};
    tx_t *m = tx_rechunk_bounds(x, nc, bs);
    check(m, "rechunk 5 -> {2, 9, 1, 11}");
    check(tx_rechunk(m, c7), "rechunk {2, 9, 1, 11} -> 7");
}

Test(graph_copy, rechunk_to_the_same_chunks_returns_the_array)
{
    int64_t shape[2] = {6, 5}, ch[2] = {4, 2};
    tx_t *x = tx_arange(0, 1, 2, shape, ch);
    int64_t same[2] = {4, 2}, keep[2] = {0, 0};
    gs_array_h h;
    TX_OK(gs_array_rechunk(x->h, same, &h));
    cr_assert_eq(h, x->h);
    gs_array_release(h);
    TX_OK(gs_array_rechunk(x->h, keep, &h));
    cr_assert_eq(h, x->h);
    gs_array_release(h);
}

Test(graph_copy, rechunk_2d_uneven_finer_coarser_and_mixed)
{
    int64_t shape[2] = {13, 11}, ch[2] = {4, 3};
    tx_t *x = tx_normal(12, 1, 2, 2, shape, ch);
    int64_t a[2] = {3, 5}, b[2] = {5, 2}, c[2] = {-1, 1}, d[2] = {1, -1}, e[2] = {0, 4},
            f[2] = {6, 0};
    check(tx_rechunk(x, a), "rechunk (4,3) -> (3,5)");
    check(tx_rechunk(x, b), "rechunk (4,3) -> (5,2)");
    check(tx_rechunk(x, c), "rechunk (4,3) -> (13,1)");
    check(tx_rechunk(x, d), "rechunk (4,3) -> (1,11)");
    check(tx_rechunk(x, e), "rechunk (4,3) -> (4,4)");
    check(tx_rechunk(x, f), "rechunk (4,3) -> (6,3)");
    int64_t nc[2] = {3, 0}, b0[4] = {0, 1, 12, 13};
    const int64_t *bs[2] = {b0, NULL};
    check(tx_rechunk_bounds(x, nc, bs), "rechunk rows {1, 11, 1}");
}

Test(graph_copy, rechunk_3d_uneven)
{
    int64_t shape[3] = {7, 6, 9}, ch[3] = {3, 4, 2};
    tx_t *x = tx_uniform(13, -1, 1, 3, shape, ch);
    int64_t a[3] = {2, 5, 4}, b[3] = {-1, 1, 3}, c[3] = {5, 0, -1};
    check(tx_rechunk(x, a), "rechunk 3d a");
    check(tx_rechunk(x, b), "rechunk 3d b");
    check(tx_rechunk(x, c), "rechunk 3d c");
    int perm[3] = {2, 0, 1};
    tx_t *t = tx_transpose(tx_rechunk(x, a), perm);
    check(t, "transpose of a rechunk");
    check(tx_rechunk(t, b), "rechunk of a transposed rechunk");
}

Test(graph_copy, rechunk_of_expressions_and_slices)
{
    int64_t shape[2] = {12, 10}, ch[2] = {5, 3};
    tx_t *x = tx_normal(14, 0, 1, 2, shape, ch);
    int64_t r[2] = {4, 4};
    tx_t *y = tx_scalar_r(GS_BINARY_ADD, x, 1.0);
    check(tx_rechunk(y, r), "rechunk of x + 1");
    check(tx_scalar_r(GS_BINARY_MUL, tx_rechunk(y, r), 3.0), "(rechunk of x + 1) * 3");
    tx_t *z = tx_rechunk(x, r);
    check(tx_binary(GS_BINARY_SUB, z, x), "rechunk(x) - x (different grids)");
    gs_slice_t s[2] = {SL_STEP(2), SL_RANGE(-1, 0, -3)};
    check(tx_slice(tx_rechunk(y, r), 2, s), "slice of a rechunk");
    check(tx_rechunk(tx_slice(y, 2, s), r), "rechunk of a slice");
    check(tx_reduce(GS_RED_SUM, tx_rechunk(y, r), -1, 0, 0), "sum of a rechunk");
    check_tol(tx_reduce(GS_RED_MEAN, tx_rechunk(x, r), 1, 0, 0), 1e-12, "mean of a rechunk");
    int64_t hs[2] = {6, 4}, hc[2] = {4, 3}, hr[2] = {1, -1};
    check_exact(tx_rechunk(tx_host(2, hs, hc), hr), "rechunk of host data");
}

Test(graph_copy, rechunk_of_a_persisted_input)
{
    int64_t shape[2] = {9, 8}, ch[2] = {4, 3};
    tx_t *x = tx_normal(15, 0, 1, 2, shape, ch);
    persist(x);
    int64_t r[2] = {-1, 5};
    tx_t *y = tx_rechunk(x, r);
    check(y, "rechunk of persisted x");
    check_tol(tx_reduce(GS_RED_SUM, y, -1, 0, 0), 1e-12, "sum of a rechunk of persisted x");
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(y->h, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(tg->nlayers, 1);
    cr_assert_eq(ncopy_layers(tg), 1);
    cr_assert_eq(tg->nexternals, 9);
    gs_taskgraph_free(tg);
    unpersist(x);
}

Test(graph_copy, rechunk_beyond_the_piece_limit_goes_through_intermediate_grids)
{
    int64_t shape[1] = {5000}, ch[1] = {1}, whole[1] = {-1};
    tx_t *x = tx_arange(3, 0.5, 1, shape, ch);
    tx_t *y = tx_rechunk(x, whole);
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(y->h, GS_LOWER_DEFAULT, &tg));
    cr_assert_geq(ncopy_layers(tg), 2, "5000 pieces cannot be one copy task");
    for (uint32_t i = 0; i < tg->nlayers; i++)
        for (uint64_t b = 0; b < gs_layer_nblocks(tg->layers[i]); b++)
            cr_assert_leq(gs_layer_ninputs(tg->layers[i], b), GS_KERNEL_MAX_PIECES);
    gs_taskgraph_free(tg);
    check_exact(y, "rechunk 1 -> 5000");

    int64_t s2[2] = {90, 70}, c2[2] = {1, 1}, big[2] = {-1, 64};
    tx_t *z = tx_normal(16, 0, 1, 2, s2, c2);
    check(tx_rechunk(z, big), "rechunk (1,1) -> (90,64)");
    int64_t s3[3] = {20, 20, 20}, c3[3] = {1, 1, 1}, b3[3] = {-1, 10, 20};
    check(tx_rechunk(tx_uniform(17, 0, 1, 3, s3, c3), b3), "rechunk (1,1,1) -> (20,10,20)");
    /* rows to columns: intermediate chunks stay small */
    int64_t rows[2] = {1, -1}, cols[2] = {-1, 1};
    check(tx_rechunk(tx_rechunk(z, rows), cols), "rechunk rows -> columns");
}

Test(graph_copy, rechunk_zero_size_arrays)
{
    int64_t shape[2] = {0, 5}, ch[2] = {3, 2}, r[2] = {2, 3};
    tx_t *x = tx_full(1.0, 2, shape, ch);
    check(tx_rechunk(x, r), "rechunk of an empty array");
}

Test(graph_copy, rechunk_rejects_bad_arguments)
{
    int64_t shape[2] = {6, 5}, ch[2] = {4, 2};
    gs_array_h x, h = NULL;
    TX_OK(gs_array_arange(0, 1, 2, shape, ch, &x));
    int64_t bad[2] = {-2, 1};
    cr_assert_eq(gs_array_rechunk(x, bad, &h), GS_ERR_INVALID_PARAM);
    cr_assert_null(h);
    cr_assert_eq(gs_array_rechunk(x, NULL, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_rechunk(NULL, ch, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_rechunk(x, ch, NULL), GS_ERR_INVALID_PARAM);
    int64_t nc[2] = {2, 0}, b0[3] = {0, 3, 5}, b1[3] = {0, 4, 4}, b2[3] = {0, 7, 6};
    const int64_t *bs[2] = {b0, NULL};
    cr_assert_eq(gs_array_rechunk_bounds(x, nc, bs, &h), GS_ERR_INVALID_PARAM, "ends at 5, not 6");
    bs[0] = b1;
    cr_assert_eq(gs_array_rechunk_bounds(x, nc, bs, &h), GS_ERR_INVALID_PARAM, "not increasing");
    bs[0] = b2;
    cr_assert_eq(gs_array_rechunk_bounds(x, nc, bs, &h), GS_ERR_INVALID_PARAM, "not increasing");
    int64_t nc0[2] = {0, 0};
    bs[0] = b0;
    cr_assert_eq(gs_array_rechunk_bounds(x, nc0, bs, &h), GS_ERR_INVALID_PARAM, "zero chunks");
    cr_assert_null(h);
    gs_array_release(x);
}

/* ---- concatenate / stack ---- */

Test(graph_copy, concatenate_along_each_axis_with_different_chunkings)
{
    int64_t sa[2] = {5, 7}, ca[2] = {2, 3};
    int64_t sb[2] = {4, 7}, cb[2] = {3, 2};
    int64_t sc[2] = {1, 7}, cc[2] = {1, 7};
    tx_t *xs0[3] = {tx_normal(21, 0, 1, 2, sa, ca), tx_arange(0, 1, 2, sb, cb),
                    tx_host(2, sc, cc)};
    check(tx_join(3, xs0, 0, 0), "concatenate axis 0");
    check(tx_join(2, xs0, -2, 0), "concatenate axis -2");
    int64_t sd[2] = {5, 3}, cd[2] = {5, 2}, se[2] = {5, 4}, ce[2] = {3, 3};
    tx_t *xs1[3] = {xs0[0], tx_uniform(22, 0, 1, 2, sd, cd), tx_full(2.5, 2, se, ce)};
    check(tx_join(3, xs1, 1, 0), "concatenate axis 1");
    check(tx_join(3, xs1, -1, 0), "concatenate axis -1");
    int64_t s3a[3] = {2, 3, 4}, c3a[3] = {1, 2, 3}, s3b[3] = {2, 3, 5}, c3b[3] = {2, 1, 2};
    tx_t *xs2[2] = {tx_normal(23, 0, 1, 3, s3a, c3a), tx_normal(24, 0, 1, 3, s3b, c3b)};
    check(tx_join(2, xs2, 2, 0), "concatenate 3d axis 2");
    tx_t *xs3[4] = {xs0[0], xs0[0], xs0[1], xs0[0]};
    check(tx_join(4, xs3, 0, 0), "concatenate with repeated operands");
}

Test(graph_copy, stack_along_each_axis)
{
    int64_t s[2] = {5, 7}, c1[2] = {2, 3}, c2[2] = {3, 7}, c3[2] = {5, 1};
    tx_t *xs[3] = {tx_normal(31, 0, 1, 2, s, c1), tx_arange(0, 1, 2, s, c2),
                   tx_uniform(32, 0, 1, 2, s, c3)};
    for (int axis = -3; axis <= 2; axis++) {
        char what[64];
        snprintf(what, sizeof(what), "stack axis %d", axis);
        tx_t *t = tx_join(3, xs, axis, 1);
        int a = axis < 0 ? axis + 3 : axis;
        cr_assert_eq(gs_array_nchunks(t->h, a), 3);
        check(t, what);
    }
    check(tx_join(1, xs, 1, 1), "stack of one array");
    int64_t s1[1] = {6}, c4[1] = {4};
    tx_t *v[2] = {tx_arange(1, 1, 1, s1, c4), tx_arange(-1, -2, 1, s1, c4)};
    check(tx_join(2, v, 0, 1), "stack of vectors axis 0");
    check(tx_join(2, v, 1, 1), "stack of vectors axis 1");
}

Test(graph_copy, concatenation_chains_copy_each_element_once)
{
    int64_t s[1] = {10}, c[1] = {4};
    tx_t *xs[6];
    for (int i = 0; i < 6; i++) xs[i] = tx_arange(100 * i, 1, 1, s, c);
    tx_t *t = tx_join(6, xs, 0, 0);
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(t->h, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(ncopy_layers(tg), 1, "one copy layer for the whole chain, got %d",
                 ncopy_layers(tg));
    cr_assert_eq(gs_layer_nblocks(tg->layers[tg->nlayers - 1]), 18);
    gs_taskgraph_free(tg);
    check_exact(t, "concatenate 6");
    /* a concatenation used twice is materialised once and read by both */
    tx_t *ab[2] = {xs[0], xs[1]};
    tx_t *cat = tx_join(2, ab, 0, 0);
    tx_t *twice[2] = {cat, cat};
    tx_t *u = tx_join(2, twice, 0, 0);
    TX_OK(gs_graph_lower(u->h, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(ncopy_layers(tg), 2);
    gs_taskgraph_free(tg);
    check(u, "concatenate of a shared concatenation");
    /* a stack of concatenations, and concatenations along different axes */
    tx_t *st2[2] = {t, t};
    check(tx_join(2, st2, 0, 1), "stack of a concatenation");
    int64_t s2[2] = {3, 4}, c2[2] = {2, 3};
    tx_t *m[2] = {tx_normal(33, 0, 1, 2, s2, c2), tx_normal(34, 0, 1, 2, s2, c2)};
    tx_t *h = tx_join(2, m, 1, 0);
    tx_t *hv[2] = {h, h};
    check(tx_join(2, hv, 0, 0), "concatenate axis 0 of concatenate axis 1");
}

Test(graph_copy, concatenations_feed_elementwise_ops_slices_and_reductions)
{
    int64_t sa[2] = {6, 5}, ca[2] = {4, 2}, sb[2] = {3, 5}, cb[2] = {2, 5};
    tx_t *xs[2] = {tx_normal(41, 0, 1, 2, sa, ca), tx_normal(42, 0, 1, 2, sb, cb)};
    tx_t *t = tx_join(2, xs, 0, 0);
    check(tx_scalar_r(GS_BINARY_MUL, t, 2.0), "2 * concatenate");
    gs_slice_t s[2] = {SL_RANGE(7, 1, -2), SL_STEP(2)};
    check(tx_slice(t, 2, s), "slice of a concatenation");
    check_tol(tx_reduce(GS_RED_SUM, t, 0, 0, 0), 1e-12, "sum over the joined axis");
    check_tol(tx_reduce(GS_RED_MAX, t, -1, 0, 0), 0, "max of a concatenation");
    /* operands that are expressions */
    tx_t *e[2] = {tx_unary(GS_UNARY_ABS, xs[0]), tx_scalar_r(GS_BINARY_ADD, xs[1], 1.0)};
    check(tx_join(2, e, 0, 0), "concatenate of expressions");
}

Test(graph_copy, concatenate_with_empty_operands)
{
    int64_t sa[2] = {0, 4}, ca[2] = {2, 2}, sb[2] = {3, 4}, cb[2] = {2, 3};
    tx_t *xs[3] = {tx_full(1, 2, sa, ca), tx_arange(0, 1, 2, sb, cb), tx_full(1, 2, sa, ca)};
    check_exact(tx_join(3, xs, 0, 0), "concatenate with empty operands");
    tx_t *ys[2] = {xs[0], xs[0]};
    check(tx_join(2, ys, 0, 0), "concatenate of empties");
}

Test(graph_copy, concatenate_of_a_persisted_input)
{
    int64_t s[2] = {6, 5}, c[2] = {4, 2};
    tx_t *x = tx_normal(43, 0, 1, 2, s, c);
    persist(x);
    tx_t *y = tx_scalar_r(GS_BINARY_ADD, x, 1.0);
    tx_t *xs[3] = {x, y, x};
    check(tx_join(3, xs, 1, 0), "concatenate persisted x, x + 1, x");
    check(tx_join(3, xs, 0, 1), "stack persisted x, x + 1, x");
    unpersist(x);
}

Test(graph_copy, concatenate_and_stack_reject_bad_arguments)
{
    int64_t s1[2] = {3, 4}, s2[2] = {3, 5}, s3[3] = {3, 4, 1}, c[3] = {2, 2, 1};
    gs_array_h a, b, d, h = NULL;
    TX_OK(gs_array_arange(0, 1, 2, s1, c, &a));
    TX_OK(gs_array_arange(0, 1, 2, s2, c, &b));
    TX_OK(gs_array_arange(0, 1, 3, s3, c, &d));
    gs_array_h ab[2] = {a, b}, ad[2] = {a, d}, an[2] = {a, NULL};
    cr_assert_eq(gs_array_concatenate(0, ab, 0, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_stack(0, ab, 0, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_concatenate(2, NULL, 0, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_concatenate(2, an, 0, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_concatenate(2, ab, 0, &h), GS_ERR_INVALID_PARAM, "sizes differ on 1");
    cr_assert_eq(gs_array_concatenate(2, ad, 0, &h), GS_ERR_INVALID_PARAM, "ndim differs");
    cr_assert_eq(gs_array_concatenate(2, ab, 2, &h), GS_ERR_INVALID_PARAM, "axis 2 of ndim 2");
    cr_assert_eq(gs_array_concatenate(2, ab, -3, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_stack(2, ab, 0, &h), GS_ERR_INVALID_PARAM, "stack needs equal shapes");
    gs_array_h aa[2] = {a, a};
    cr_assert_eq(gs_array_stack(2, aa, 3, &h), GS_ERR_INVALID_PARAM, "axis 3 of ndim 3");
    cr_assert_eq(gs_array_stack(2, aa, -4, &h), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_concatenate(2, aa, 0, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_null(h);
    TX_OK(gs_array_concatenate(2, ab, 1, &h));
    cr_assert_eq(gs_array_nchunks(h, 1), 5);   /* {0,2,4} ++ {4,6,8,9} */
    gs_array_release(h);
    /* ndim limit */
    int64_t s8[GS_MAX_NDIM], c8[GS_MAX_NDIM];
    for (int i = 0; i < GS_MAX_NDIM; i++) s8[i] = c8[i] = 1;
    gs_array_h e;
    TX_OK(gs_array_full(0, GS_MAX_NDIM, s8, c8, &e));
    h = NULL;
    cr_assert_eq(gs_array_stack(1, &e, 0, &h), GS_ERR_INVALID_PARAM);
    cr_assert_null(h);
    gs_array_release(e);
    gs_array_release(a);
    gs_array_release(b);
    gs_array_release(d);
}

/* ---- reading other chunks in place: transposes and strided slices ---- */

Test(graph_copy, x_plus_x_transposed_with_uneven_non_square_chunks)
{
    int64_t shape[2] = {7, 7}, ch[2] = {3, 4};
    tx_t *x = tx_normal(51, 0, 1, 2, shape, ch);
    tx_t *s = tx_binary(GS_BINARY_ADD, x, tx_transpose(x, NULL));
    /* the grid is the union of (3,4) and (4,3): {0,3,4,6,7} on both axes */
    cr_assert_eq(gs_array_nchunks(s->h, 0), 4);
    check(s, "x + x.T");
    check_tol(tx_reduce(GS_RED_SUM, s, -1, 0, 0), 1e-12, "(x + x.T).sum()");
    check_tol(tx_reduce(GS_RED_SUM, s, 0, 0, 3), 1e-12, "(x + x.T).sum(axis 0)");
    /* symmetric: its sum is twice x's */
    tx_t *sx = tx_reduce(GS_RED_SUM, x, -1, 0, 0);
    tx_t *ss = tx_reduce(GS_RED_SUM, s, -1, 0, 0);
    cr_assert(close_to(ss->v[0], 2 * sx->v[0], 1e-12));
    /* fused: one kernel per output chunk reading (i, j) and (j, i), then the tree */
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(s->h, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(tg->nlayers, 1);
    cr_assert_eq(ncopy_layers(tg), 0);
    gs_taskgraph_free(tg);
    /* persisted x: the fused kernel reads the persisted chunks in place */
    persist(x);
    check(s, "x + x.T, x persisted");
    check_tol(tx_reduce(GS_RED_SUM, s, -1, 0, 0), 1e-12, "(x + x.T).sum(), x persisted");
    unpersist(x);
    int64_t s3[3] = {5, 6, 5}, c3[3] = {2, 4, 3};
    tx_t *y = tx_uniform(52, 0, 1, 3, s3, c3);
    int perm[3] = {2, 1, 0};
    check_tol(tx_reduce(GS_RED_SUM, tx_binary(GS_BINARY_SUB, y, tx_transpose(y, perm)), -1, 0, 0),
              1e-12, "(y - y.transpose(2,1,0)).sum()");
}

Test(graph_copy, strided_slices_gather_the_right_elements)
{
    int64_t s1[1] = {40}, c1[1] = {7};
    tx_t *v = tx_normal(61, 0, 1, 1, s1, c1);
    gs_slice_t k3[1] = {SL_STEP(3)};
    check(tx_slice(v, 1, k3), "v[::3]");
    int64_t shape[2] = {17, 19}, ch[2] = {5, 4};
    tx_t *x = tx_normal(62, 0, 1, 2, shape, ch);
    gs_slice_t a[1] = {SL_STEP(3)};
    check(tx_slice(x, 1, a), "x[::3]");
    gs_slice_t b[2] = {SL_STEP(-2), SL(1, 0, 3, GS_SLICE_HAS_START)};
    tx_t *xb = tx_slice(x, 2, b);
    cr_assert_eq(xb->shape[0], 9);
    cr_assert_eq(xb->shape[1], 6);
    check(xb, "x[::-2, 1::3]");
    check_tol(tx_reduce(GS_RED_SUM, xb, -1, 0, 0), 1e-12, "x[::-2, 1::3].sum()");
    persist(x);
    check(tx_slice(x, 1, a), "x[::3], x persisted");
    check(xb, "x[::-2, 1::3], x persisted");
    unpersist(x);
}

/* ---- the COPY layer and its codec ---- */

/* The COPY layer of rechunk(x, r), as built by the lowering (caller frees). */
static gs_layer_t *copy_layer(gs_taskgraph_t **tg_p)
{
    int64_t shape[2] = {7, 6}, ch[2] = {3, 4}, r[2] = {5, 2};
    tx_t *x = tx_normal(71, 0, 1, 2, shape, ch);
    tx_t *y = tx_rechunk(x, r);
    TX_OK(gs_graph_lower(y->h, GS_LOWER_DEFAULT, tg_p));
    gs_layer_t *l = (*tg_p)->layers[(*tg_p)->nlayers - 1];
    cr_assert_eq(gs_layer_kind(l), GS_LAYER_COPY);
    cr_assert_str_eq(gs_layer_name(l), "copy");
    return l;
}

static gs_status_t reencode_decode(const gs_layer_t *l)
{
    gs_buf_t b;
    gs_layer_t *l2 = NULL;
    gs_buf_init(&b);
    TX_OK(gs_layer_encode(l, &b));
    gs_status_t st = gs_layer_decode(b.data, b.len, &l2);
    gs_layer_free(l2);
    gs_buf_cleanup(&b);
    return st;
}

Test(graph_copy, layer_codec_round_trips_and_rejects_truncation_and_garbage)
{
    gs_taskgraph_t *tg;
    gs_layer_t *l = copy_layer(&tg);
    gs_buf_t b;
    gs_buf_init(&b);
    TX_OK(gs_layer_encode(l, &b));
    gs_layer_t *l2;
    TX_OK(gs_layer_decode(b.data, b.len, &l2));
    cr_assert_eq(gs_layer_nblocks(l2), gs_layer_nblocks(l));
    for (uint64_t k = 0; k < gs_layer_nblocks(l); k++) {
        cr_assert_eq(gs_layer_ninputs(l2, k), gs_layer_ninputs(l, k));
        cr_assert_eq(gs_layer_out_nbytes(l2, k), gs_layer_out_nbytes(l, k));
    }
    gs_layer_free(l2);
    for (size_t n = 0; n < b.len; n++) {
        gs_layer_t *lt = NULL;
        gs_status_t st = gs_layer_decode(b.data, n, &lt);
        cr_assert_eq(st, GS_ERR_PROTO, "truncated at %zu of %zu: %s", n, b.len, gs_status_name(st));
        cr_assert_null(lt);
    }
    /* flip every byte: decoding never crashes, and whatever it accepts is a valid layer */
    uint8_t *m = malloc(b.len);
    for (size_t i = 0; i < b.len; i++) {
        for (int v = 0; v < 4; v++) {
            static const uint8_t vals[4] = {0x00, 0xff, 0x7f, 0xc0};
            memcpy(m, b.data, b.len);
            m[i] = vals[v];
            gs_layer_t *lt = NULL;
            gs_status_t st = gs_layer_decode(m, b.len, &lt);
            cr_assert(st == GS_OK || st == GS_ERR_PROTO);
            if (st == GS_OK) {
                cr_assert_eq(gs_layer_kind(lt), GS_LAYER_COPY);
                gs_layer_free(lt);
            }
        }
    }
    free(m);
    /* random garbage after a copy header */
    srand(5);
    for (int i = 0; i < 2000; i++) {
        uint8_t g[64];
        size_t n = 3 + (size_t)(rand() % 61);
        g[0] = 0x94;
        g[1] = 0x01;
        g[2] = 0x03;
        for (size_t k = 3; k < n; k++) g[k] = (uint8_t)rand();
        gs_layer_t *lt = NULL;
        gs_status_t st = gs_layer_decode(g, n, &lt);
        cr_assert(st == GS_OK || st == GS_ERR_PROTO);
        gs_layer_free(lt);
    }
    gs_buf_cleanup(&b);
    gs_taskgraph_free(tg);
}

Test(graph_copy, layer_decode_rejects_pieces_that_do_not_tile_or_read_outside)
{
    gs_taskgraph_t *tg;
    gs_layer_t *l = copy_layer(&tg);
    TX_OK(reencode_decode(l));
    /* find a block with two pieces */
    uint64_t b = 0;
    while (l->u.cp.poff[b + 1] - l->u.cp.poff[b] < 2) b++;
    gs__cpiece_t *p = &l->u.cp.pieces[l->u.cp.poff[b]];
    gs__cpiece_t save = p[0];
    p[0].dst[0] = p[1].dst[0];
    p[0].dst[1] = p[1].dst[1];
    cr_assert_eq(reencode_decode(l), GS_ERR_PROTO, "overlapping pieces");
    p[0] = save;
    p[0].size[0]--;
    cr_assert_eq(reencode_decode(l), GS_ERR_PROTO, "a hole");
    p[0] = save;
    p[0].base = l->u.cp.in_len[l->u.cp.ioff[b] + p[0].slot];
    cr_assert_eq(reencode_decode(l), GS_ERR_PROTO, "reads past its input");
    p[0] = save;
    p[0].stride[0] = -p[0].stride[0];
    cr_assert_eq(reencode_decode(l), GS_ERR_PROTO, "reads before its input");
    p[0] = save;
    p[0].slot = 9;
    cr_assert_eq(reencode_decode(l), GS_ERR_PROTO, "bad slot");
    p[0] = save;
    p[0].size[1] += 100;
    cr_assert_eq(reencode_decode(l), GS_ERR_PROTO, "outside its block");
    p[0] = save;
    l->u.cp.in_len[l->u.cp.ioff[b]] = -1;
    cr_assert_eq(reencode_decode(l), GS_ERR_PROTO, "negative input length");
    gs_taskgraph_free(tg);
}

Test(graph_copy, instantiation_checks_inputs)
{
    gs_taskgraph_t *tg;
    gs_layer_t *l = copy_layer(&tg);
    uint64_t b = 0;
    int n = gs_layer_ninputs(l, b);
    cr_assert_gt(n, 0);
    const int64_t *lens = gs__copy_in_lens(l, b);
    gs_chunk_ref_t in[GS_KERNEL_MAX_PIECES];
    double *bufs[GS_KERNEL_MAX_PIECES];
    for (int i = 0; i < n; i++) {
        bufs[i] = calloc((size_t)lens[i] + 1, sizeof(double));
        for (int64_t k = 0; k < lens[i]; k++) bufs[i][k] = 1000 * i + (double)k;
        in[i].data = bufs[i];
        in[i].len = lens[i];
    }
    double *out = calloc(gs_layer_out_nbytes(l, b) / sizeof(double) + 1, sizeof(double));
    gs_ktask_t t;
    cr_assert_eq(gs_layer_instantiate(l, b, n - 1, in, out, &t), GS_ERR_INVALID_PARAM);
    in[0].len++;
    cr_assert_eq(gs_layer_instantiate(l, b, n, in, out, &t), GS_ERR_INVALID_PARAM);
    in[0].len--;
    cr_assert_eq(gs_layer_instantiate(l, gs_layer_nblocks(l), n, in, out, &t), GS_ERR_INVALID_PARAM);
    TX_OK(gs_layer_instantiate(l, b, n, in, out, &t));
    cr_assert_eq(t.kind, GS_KTASK_COPY);
    TX_OK(gs_kcopy_validate(&t.u.copy));
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(out);
    gs_taskgraph_free(tg);
}
