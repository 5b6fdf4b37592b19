/* Lowering: task and layer counts under each optimisation switch, culling, slice pushdown,
 * persisted inputs (externals), kernel limits, instantiation of every task, failures. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "graph/taskgraph.h"

#define OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s: %s: %s", #call, gs_status_name(st__), gs_last_error()); } while (0)

#define UNFUSED (GS_LOWER_CULL | GS_LOWER_SLICE_PUSHDOWN)

static gs_array_h normal2(int64_t n0, int64_t n1, int64_t c0, int64_t c1)
{
    int64_t s[2] = {n0, n1}, c[2] = {c0, c1};
    gs_array_h a;
    OK(gs_array_random_normal(5, 10.0, 1.0, 2, s, c, &a));
    return a;
}

static gs_array_h normal1(int64_t n, int64_t c, uint64_t seed)
{
    gs_array_h a;
    OK(gs_array_random_normal(seed, 0.0, 1.0, 1, &n, &c, &a));
    return a;
}

/* Take ownership of @a a and return op(a). */
static gs_array_h add_s(gs_array_h a, double s)
{
    gs_array_h r;
    OK(gs_array_binary_scalar(GS_BINARY_ADD, a, s, &r));
    gs_array_release(a);
    return r;
}

static gs_array_h step2(gs_array_h a)
{
    gs_slice_t s[2] = {{0, 0, 2, 0}, {0, 0, 2, 0}};
    gs_array_h r;
    OK(gs_array_slice(a, 2, s, &r));
    gs_array_release(a);
    return r;
}

static gs_array_h head(gs_array_h a, int64_t n)
{
    gs_slice_t s = {0, n, 1, GS_SLICE_HAS_STOP};
    gs_array_h r;
    OK(gs_array_slice(a, 1, &s, &r));
    gs_array_release(a);
    return r;
}

static gs_array_h sum_all(gs_array_h a)
{
    gs_array_h r;
    OK(gs_array_reduce(GS_RED_SUM, a, NULL, &r));
    gs_array_release(a);
    return r;
}

/* Instantiate every task with correctly sized inputs: must succeed and respect the kernel
 * limits. Returns the largest leaf count seen. */
static int instantiate_all(const gs_taskgraph_t *tg)
{
    static double dummy[1 << 16];
    gs_chunk_ref_t in[GS_KERNEL_MAX_COMBINE];
    gs_ktask_t *kt = malloc(sizeof(*kt));
    int maxleaves = 0;
    cr_assert_not_null(kt);
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        const gs_layer_t *l = tg->layers[tg->task_layer[t]];
        int n = (int)(tg->dep_off[t + 1] - tg->dep_off[t]);
        cr_assert_leq(n, GS_KERNEL_MAX_COMBINE);
        for (int i = 0; i < n; i++) {
            uint64_t d = tg->deps[tg->dep_off[t] + (uint64_t)i];
            cr_assert_lt(d, tg->ntasks, "externals cannot be instantiated here");
            in[i].data = dummy;
            in[i].len = (int64_t)(tg->task_nbytes[d] / sizeof(double));
            cr_assert_leq(in[i].len, (int64_t)(sizeof(dummy) / sizeof(double)));
        }
        OK(gs_layer_instantiate(l, tg->task_block[t], n, in, dummy, kt));
        if (kt->kind == GS_KTASK_FUSED) {
            cr_assert_leq(kt->u.fused.nleaves, GS_KERNEL_MAX_LEAVES);
            cr_assert_leq(kt->u.fused.nprog, GS_KERNEL_MAX_PROG);
            if (kt->u.fused.nleaves > maxleaves) maxleaves = kt->u.fused.nleaves;
        }
    }
    free(kt);
    return maxleaves;
}

/* Lower @a a and check the graph; its result keeps the array's chunk grid under every flag. */
static gs_taskgraph_t *lower(gs_array_h a, unsigned flags)
{
    gs_taskgraph_t *tg;
    OK(gs_graph_lower(a, flags, &tg));
    OK(gs_taskgraph_validate(tg));
    cr_assert_eq(tg->out_grid.ndim, gs_array_ndim(a));
    for (int ax = 0; ax < tg->out_grid.ndim; ax++) {
        cr_assert_eq(tg->out_grid.nchunks[ax], gs_array_nchunks(a, ax), "flags 0x%x axis %d",
                     flags, ax);
        cr_assert(memcmp(tg->out_grid.bounds[ax], gs_array_chunk_bounds(a, ax),
                         (size_t)(tg->out_grid.nchunks[ax] + 1) * sizeof(int64_t)) == 0,
                  "flags 0x%x: chunk bounds of axis %d differ from the array's", flags, ax);
    }
    return tg;
}

/* Tasks of one layer: count, total and largest output bytes, dependencies. */
typedef struct lstat {
    uint64_t ntasks, bytes, maxbytes, mindeps, maxdeps;
} lstat_t;

static lstat_t layer_stat(const gs_taskgraph_t *tg, uint32_t layer)
{
    lstat_t s = {0, 0, 0, UINT64_MAX, 0};
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        uint64_t nd = tg->dep_off[t + 1] - tg->dep_off[t];
        if (tg->task_layer[t] != layer) continue;
        s.ntasks++;
        s.bytes += tg->task_nbytes[t];
        if (tg->task_nbytes[t] > s.maxbytes) s.maxbytes = tg->task_nbytes[t];
        if (nd < s.mindeps) s.mindeps = nd;
        if (nd > s.maxdeps) s.maxdeps = nd;
    }
    return s;
}

/* Bytes written by generator tasks (fused tasks that read no chunk). */
static uint64_t generated_bytes(const gs_taskgraph_t *tg)
{
    uint64_t b = 0;
    for (uint64_t t = 0; t < tg->ntasks; t++)
        if (tg->dep_off[t + 1] == tg->dep_off[t] &&
            gs_layer_kind(tg->layers[tg->task_layer[t]]) == GS_LAYER_FUSED)
            b += tg->task_nbytes[t];
    return b;
}

static uint64_t generated(gs_array_h a, unsigned flags)
{
    gs_taskgraph_t *tg = lower(a, flags);
    uint64_t b = generated_bytes(tg);
    if (tg->nexternals == 0) instantiate_all(tg);
    gs_taskgraph_free(tg);
    return b;
}

static uint64_t ntasks(gs_array_h a, unsigned flags)
{
    gs_taskgraph_t *tg = lower(a, flags);
    uint64_t n = tg->ntasks;
    if (tg->nexternals == 0) instantiate_all(tg);
    gs_taskgraph_free(tg);
    return n;
}

static uint32_t nlayers(gs_array_h a, unsigned flags)
{
    gs_taskgraph_t *tg = lower(a, flags);
    uint32_t n = tg->nlayers;
    gs_taskgraph_free(tg);
    return n;
}

/* ---- the seed expression ---- */

Test(graph_lower, fused_seed_is_one_task_per_block_plus_combines)
{
    /* (normal(10,1,(100,100)) + 1)[::2,::2].sum(), chunks 10: 10x10 sliced blocks;
     * combine tree of fan-in 16: 100 -> 7 -> 1 */
    gs_array_h r = sum_all(step2(add_s(normal2(100, 100, 10, 10), 1.0)));
    gs_taskgraph_t *tg = lower(r, GS_LOWER_DEFAULT);
    cr_assert_eq(tg->ntasks, 100 + 7 + 1);
    cr_assert_eq(tg->nlayers, 3);
    cr_assert_str_eq(gs_layer_name(tg->layers[0]), "reduce-sum");
    cr_assert_str_eq(gs_layer_name(tg->layers[1]), "combine-sum");
    cr_assert_eq(gs_layer_kind(tg->layers[2]), GS_LAYER_COMBINE);
    cr_assert_eq(tg->noutputs, 1);
    cr_assert_eq(tg->outputs[0], tg->ntasks - 1);
    cr_assert_eq(tg->out_grid.ndim, 0);
    cr_assert_eq(tg->task_nbytes[tg->ntasks - 1], sizeof(double));
    cr_assert_eq(tg->dep_off[tg->ntasks] - tg->dep_off[tg->ntasks - 1], 7);
    instantiate_all(tg);
    gs_taskgraph_free(tg);
    gs_array_release(r);
}

Test(graph_lower, unfused_seed_has_a_layer_per_node)
{
    gs_array_h r = sum_all(step2(add_s(normal2(100, 100, 10, 10), 1.0)));
    /* without pushdown: generator, +1, slice, partial reduce: 100 tasks each; combines 7 + 1 */
    cr_assert_eq(ntasks(r, GS_LOWER_CULL), 4 * 100 + 8);
    /* with pushdown the slice moves below the +1 into the generator: sliced generator, +1,
     * partial reduce */
    cr_assert_eq(ntasks(r, UNFUSED), 3 * 100 + 8);
    cr_assert_eq(ntasks(r, GS_LOWER_SLICE_PUSHDOWN), 3 * 100 + 8);
    cr_assert_eq(ntasks(r, 0), 4 * 100 + 8);
    cr_assert_eq(nlayers(r, 0), 6);
    cr_assert_gt(ntasks(r, 0), ntasks(r, GS_LOWER_DEFAULT));
    gs_array_release(r);
}

Test(graph_lower, slice_pushdown_generates_only_kept_elements_when_unfused)
{
    gs_array_h r = sum_all(step2(normal2(100, 100, 10, 10)));
    cr_assert_eq(ntasks(r, GS_LOWER_CULL), 100 + 100 + 100 + 8);            /* gen, slice, partial */
    cr_assert_eq(ntasks(r, GS_LOWER_CULL | GS_LOWER_SLICE_PUSHDOWN), 100 + 100 + 8);
    cr_assert_eq(ntasks(r, GS_LOWER_DEFAULT), 100 + 8);
    gs_taskgraph_t *tg = lower(r, GS_LOWER_SLICE_PUSHDOWN);
    /* the slice layer reads no chunks: its generator is inlined */
    cr_assert_eq(tg->dep_off[100], 0);
    gs_taskgraph_free(tg);
    gs_array_release(r);
}

/* ---- slice pushdown below elementwise nodes ---- */

static gs_array_h unary(gs_unop_t op, gs_array_h a)
{
    gs_array_h r;
    OK(gs_array_unary(op, a, &r));
    gs_array_release(a);
    return r;
}

static gs_array_h mul_s(gs_array_h a, double s)
{
    gs_array_h r;
    OK(gs_array_binary_scalar(GS_BINARY_MUL, a, s, &r));
    gs_array_release(a);
    return r;
}

/* Take both operands. */
static gs_array_h bin(gs_binop_t op, gs_array_h a, gs_array_h b)
{
    gs_array_h r;
    OK(gs_array_binary(op, a, b, &r));
    gs_array_release(a);
    gs_array_release(b);
    return r;
}

static gs_array_h slice(gs_array_h a, int n, const gs_slice_t *s)
{
    gs_array_h r;
    OK(gs_array_slice(a, n, s, &r));
    gs_array_release(a);
    return r;
}

static gs_array_h transpose(gs_array_h a, const int *perm)
{
    gs_array_h r;
    OK(gs_array_transpose(a, perm, &r));
    gs_array_release(a);
    return r;
}

#define S_STEP(k) {0, 0, (k), 0}
#define S_RANGE(a, b, k) {(a), (b), (k), GS_SLICE_HAS_START | GS_SLICE_HAS_STOP}
#define S_FROM(a, k) {(a), 0, (k), GS_SLICE_HAS_START}
#define S_IDX(i) {(i), 0, 1, GS_SLICE_INDEX}

Test(graph_lower, unfused_seed_generates_a_quarter_of_the_elements_with_pushdown)
{
    /* (normal(10,1,(100,100)) + 1)[::2,::2].sum(), chunks 10, not fused */
    gs_array_h r = sum_all(step2(add_s(normal2(100, 100, 10, 10), 1.0)));
    gs_taskgraph_t *before = lower(r, GS_LOWER_CULL), *after = lower(r, UNFUSED);
    /* without pushdown the generator layer writes 100 chunks of 10x10 */
    lstat_t g = layer_stat(before, 0);
    cr_assert_eq(g.ntasks, 100);
    cr_assert_eq(g.maxdeps, 0);
    cr_assert_eq(g.bytes, 100 * 100 * sizeof(double));
    cr_assert_eq(generated_bytes(before), 100 * 100 * sizeof(double));
    /* with it, the generator layer writes 100 chunks of 5x5: a quarter of the elements */
    g = layer_stat(after, 0);
    cr_assert_eq(g.ntasks, 100);
    cr_assert_eq(g.maxdeps, 0);
    for (uint64_t t = 0; t < after->ntasks; t++)
        if (after->task_layer[t] == 0)
            cr_assert_eq(after->task_nbytes[t], 5 * 5 * sizeof(double), "task %llu writes %llu bytes",
                         (unsigned long long)t, (unsigned long long)after->task_nbytes[t]);
    cr_assert_eq(generated_bytes(after), 50 * 50 * sizeof(double));
    /* the +1 runs on the 5x5 chunks, each reading one generated chunk */
    lstat_t a1 = layer_stat(after, 1);
    cr_assert_eq(a1.ntasks, 100);
    cr_assert_eq(a1.maxbytes, 5 * 5 * sizeof(double));
    cr_assert_eq(a1.mindeps, 1);
    cr_assert_eq(a1.maxdeps, 1);
    cr_assert_str_eq(gs_layer_name(after->layers[2]), "reduce-sum");
    cr_assert_leq(after->ntasks, before->ntasks);
    cr_assert_eq(after->ntasks, 3 * 100 + 8);
    instantiate_all(after);
    gs_taskgraph_free(before);
    gs_taskgraph_free(after);
    gs_array_release(r);
}

Test(graph_lower, slices_move_below_elementwise_chains_and_compose)
{
    /* sqrt(abs(2 - 3x))[::2, ::-1][1::3, 5:] of a (60, 40) array */
    gs_array_h x = normal2(60, 40, 10, 10), x3 = mul_s(x, 3.0), y, z;
    OK(gs_array_scalar_binary(GS_BINARY_SUB, 2.0, x3, &y));
    gs_array_release(x3);
    y = unary(GS_UNARY_SQRT, unary(GS_UNARY_ABS, y));   /* the scalar_binary node went to y */
    gs_slice_t s1[2] = {S_STEP(2), S_STEP(-1)}, s2[2] = {S_FROM(1, 3), S_FROM(5, 1)};
    z = slice(slice(y, 2, s1), 2, s2);                   /* (10, 35) */
    int64_t nz = gs_array_size(z);
    cr_assert_eq(nz, 10 * 35);
    cr_assert_eq(generated(z, GS_LOWER_CULL), 60 * 40 * sizeof(double));
    cr_assert_eq(generated(z, UNFUSED), (uint64_t)nz * sizeof(double));
    cr_assert_eq(generated(z, GS_LOWER_SLICE_PUSHDOWN), (uint64_t)nz * sizeof(double));
    /* no slice layer is left: sliced generator, *3, 2-, abs, sqrt; each on z's chunks */
    gs_taskgraph_t *tg = lower(z, UNFUSED);
    uint64_t nb = (uint64_t)gs_array_nchunks(z, 0) * (uint64_t)gs_array_nchunks(z, 1);
    cr_assert_eq(tg->nlayers, 5);
    cr_assert_eq(tg->ntasks, 5 * nb);
    for (uint32_t l = 0; l < 5; l++) {
        lstat_t st = layer_stat(tg, l);
        cr_assert_eq(st.ntasks, nb);
        cr_assert_eq(st.bytes, (uint64_t)nz * sizeof(double));
        cr_assert_eq(st.maxdeps, l == 0 ? 0 : 1);
    }
    gs_taskgraph_free(tg);
    /* fused: still one task per output chunk */
    cr_assert_eq(ntasks(z, GS_LOWER_DEFAULT), nb);
    gs_array_release(z);
}

Test(graph_lower, slices_map_through_broadcasting_binaries)
{
    /* (a(40,1) + b(30,))[::4, 3:25:2]: a keeps its size-1 axis, b takes the column slice */
    int64_t sa[2] = {40, 1}, ca[2] = {10, 1};
    gs_array_h a, b = normal1(30, 7, 2);
    OK(gs_array_random_normal(1, 0.0, 1.0, 2, sa, ca, &a));
    gs_array_h c = bin(GS_BINARY_ADD, a, b);
    gs_slice_t s[2] = {S_STEP(4), S_RANGE(3, 25, 2)};
    gs_array_h z = slice(gs_array_retain(c), 2, s);     /* (10, 11) */
    cr_assert_eq(generated(z, UNFUSED), (10 + 11) * sizeof(double));
    cr_assert_eq(generated(z, GS_LOWER_DEFAULT), 10 * 11 * sizeof(double));   /* fused as before */
    cr_assert_gt(generated(z, GS_LOWER_CULL), (40 + 11) * sizeof(double));
    /* an index: a[5, 0] (0-d) and b[::-3] */
    gs_slice_t si[2] = {S_IDX(5), S_STEP(-3)};
    gs_array_h zi = slice(gs_array_retain(c), 2, si);   /* (10,) */
    cr_assert_eq(generated(zi, UNFUSED), (1 + 10) * sizeof(double));
    gs_array_release(zi);
    /* an index on b's axis: b[7] is 0-d, a's axis 1 is broadcast: a[::4, 0] */
    gs_slice_t sj[2] = {S_STEP(4), S_IDX(7)};
    gs_array_h zj = slice(gs_array_retain(c), 2, sj);   /* (10,) */
    cr_assert_eq(generated(zj, UNFUSED), (10 + 1) * sizeof(double));
    gs_array_release(zj);
    gs_array_release(z);
    gs_array_release(c);
}

Test(graph_lower, transposes_move_below_elementwise_nodes)
{
    /* exp(x * 0.5 + y).T[::2, 1::3] with x, y (30, 20) */
    gs_array_h x = normal2(30, 20, 7, 5), y = normal2(30, 20, 4, 6);
    gs_array_h e = unary(GS_UNARY_EXP, bin(GS_BINARY_ADD, mul_s(x, 0.5), y));
    gs_slice_t s[2] = {S_STEP(2), S_FROM(1, 3)};
    gs_array_h z = slice(transpose(e, NULL), 2, s);   /* (10, 10) */
    cr_assert_eq(generated(z, UNFUSED), 2 * 10 * 10 * sizeof(double));
    cr_assert_eq(generated(z, GS_LOWER_CULL), 2 * 30 * 20 * sizeof(double));
    /* a transpose alone moves down too: the generators write transposed chunks, and the
     * unfused graph has no separate transpose layer */
    gs_array_h x2 = normal2(30, 20, 7, 5);
    gs_array_h t = transpose(add_s(x2, 1.0), NULL);
    cr_assert_eq(nlayers(t, UNFUSED), 2);
    cr_assert_eq(nlayers(t, GS_LOWER_CULL), 3);
    gs_array_release(t);
    gs_array_release(z);
}

Test(graph_lower, view_stays_above_a_binary_whose_operand_lacks_a_permuted_axis)
{
    /* (a(12,10) + b(10,)).T[::2]: b would need shape (5, 1) */
    gs_array_h a = normal2(12, 10, 4, 5), b = normal1(10, 5, 9);
    gs_array_h c = bin(GS_BINARY_MUL, a, b);
    gs_slice_t s[1] = {S_STEP(2)};
    gs_array_h z = slice(transpose(c, NULL), 1, s);
    cr_assert_eq(generated(z, UNFUSED), (12 * 10 + 10) * sizeof(double));
    cr_assert_eq(ntasks(z, UNFUSED), ntasks(z, GS_LOWER_CULL));
    gs_array_release(z);
}

Test(graph_lower, shared_nodes_are_not_pushed_into)
{
    /* y = x + 1 has two consumers: y[::2] * y[1::2] slices y, not x */
    gs_array_h x = normal1(100, 10, 3), y = add_s(x, 1.0);
    gs_slice_t e[1] = {S_STEP(2)}, o[1] = {S_FROM(1, 2)};
    gs_array_h z = bin(GS_BINARY_MUL, slice(gs_array_retain(y), 1, e),
                       slice(gs_array_retain(y), 1, o));
    gs_taskgraph_t *tg = lower(z, UNFUSED);
    cr_assert_eq(generated_bytes(tg), 100 * sizeof(double));
    lstat_t ly = layer_stat(tg, 1);                    /* y: full chunks */
    cr_assert_eq(ly.ntasks, 10);
    cr_assert_eq(ly.maxbytes, 10 * sizeof(double));
    gs_taskgraph_free(tg);
    cr_assert_eq(nlayers(z, GS_LOWER_DEFAULT), 2);     /* y, then one fused kernel */
    cr_assert_eq(ntasks(z, GS_LOWER_DEFAULT), 10 + 10);
    gs_array_release(z);
    /* the same slice of one shared operand on both sides: sliced once */
    gs_array_h w = slice(bin(GS_BINARY_ADD, gs_array_retain(y), gs_array_retain(y)), 1, e);
    cr_assert_eq(generated(w, UNFUSED), 100 * sizeof(double));
    cr_assert_eq(ntasks(w, UNFUSED), 10 + 10 + 10 + 10);   /* x, y, y[::2], + */
    cr_assert_eq(ntasks(w, GS_LOWER_CULL), 10 + 10 + 10 + 10);   /* x, y, +, slice */
    cr_assert_eq(nlayers(w, GS_LOWER_DEFAULT), 2);
    gs_array_release(w);
    gs_array_release(y);
}

Test(graph_lower, pushdown_stops_at_reductions_host_data_and_persisted_arrays)
{
    /* (x.sum(axis=0) + 1)[::2]: the reduction runs on whole chunks, the +1 on sliced ones */
    gs_array_h x = normal2(40, 30, 10, 10), r, z;
    gs_reduce_params_t p = {GS_REDUCE_FIELD_AXIS, 0, 0, 0};
    OK(gs_array_reduce(GS_RED_SUM, x, &p, &r));
    gs_array_release(x);
    gs_slice_t s[1] = {S_STEP(2)};
    z = slice(add_s(r, 1.0), 1, s);                    /* (15,) */
    cr_assert_eq(generated(z, UNFUSED), 40 * 30 * sizeof(double));
    gs_taskgraph_t *tg = lower(z, UNFUSED);
    lstat_t last = layer_stat(tg, tg->nlayers - 1);     /* the +1, over slices of the sums */
    cr_assert_eq(last.bytes, 15 * sizeof(double));
    for (uint64_t t = 0; t < tg->ntasks; t++) {
        if (tg->task_layer[t] != tg->nlayers - 1) continue;
        uint64_t d = tg->deps[tg->dep_off[t]];
        cr_assert_eq(tg->task_nbytes[d], tg->task_nbytes[t]);
    }
    gs_taskgraph_free(tg);
    gs_array_release(z);

    /* (lit * 2)[::3]: host data is sliced by a plain slice node, the *2 runs on the slices */
    double d[30];
    int64_t sh = 30, ch = 10;
    for (int i = 0; i < 30; i++) d[i] = i;
    gs_array_h lit;
    OK(gs_array_from_host(d, 1, &sh, &ch, &lit));
    gs_slice_t s3[1] = {S_STEP(3)};
    z = slice(mul_s(lit, 2.0), 1, s3);
    tg = lower(z, UNFUSED);
    cr_assert_eq(tg->nlayers, 3);
    cr_assert_str_eq(gs_layer_name(tg->layers[0]), "literal");
    cr_assert_eq(layer_stat(tg, 2).bytes, 10 * sizeof(double));
    gs_taskgraph_free(tg);
    gs_array_release(z);

    /* (p * 2)[::2] with p persisted: the slice reads the persisted chunks */
    gs_array_h q = add_s(normal1(20, 5, 8), 1.0);
    gs_key_t keys[4] = {{9, 100}, {9, 101}, {9, 102}, {9, 103}};
    OK(gs_array_set_persisted(q, 4, keys));
    z = slice(mul_s(gs_array_retain(q), 2.0), 1, s);
    tg = lower(z, UNFUSED);
    cr_assert_eq(tg->nexternals, 4);
    cr_assert_eq(tg->nlayers, 2);                       /* slice of q, *2 */
    cr_assert_eq(layer_stat(tg, 1).bytes, 10 * sizeof(double));
    cr_assert_eq(layer_stat(tg, 0).maxdeps, 1);
    cr_assert_geq(tg->deps[tg->dep_off[0]], tg->ntasks);
    gs_taskgraph_free(tg);
    gs_array_release(z);
    gs_array_release(q);
}

Test(graph_lower, pushdown_through_a_long_chain)
{
    /* 5000 elementwise nodes under a slice: the rewrite must not recurse per node */
    gs_array_h x = normal1(8, 4, 1);
    for (int i = 0; i < 5000; i++) x = add_s(x, 1.0);
    gs_array_h z = head(x, 3);
    gs_taskgraph_t *tg = lower(z, UNFUSED);
    cr_assert_eq(tg->ntasks, 5001);                     /* sliced generator + 5000 ops */
    cr_assert_eq(generated_bytes(tg), 3 * sizeof(double));
    gs_taskgraph_free(tg);
    gs_array_release(z);
}

/* ---- culling ---- */

Test(graph_lower, cull_keeps_only_the_chunks_a_slice_needs)
{
    /* (x + 1)[:10] of a 100-chunk array */
    gs_array_h z = head(add_s(normal1(1000, 10, 3), 1.0), 10);
    cr_assert_eq(ntasks(z, GS_LOWER_DEFAULT), 1);
    cr_assert_eq(ntasks(z, GS_LOWER_FUSE), 1);
    cr_assert_eq(ntasks(z, GS_LOWER_CULL), 3);        /* generator, +1, slice: one chunk each */
    cr_assert_eq(ntasks(z, UNFUSED), 2);              /* sliced generator, +1 */
    cr_assert_eq(ntasks(z, 0), 100 + 100 + 1);        /* everything generated, mostly unused */
    gs_array_release(z);
}

Test(graph_lower, cull_with_a_slice_directly_over_a_generator)
{
    gs_array_h z = head(normal1(1000, 10, 3), 25);   /* 3 chunks needed */
    cr_assert_eq(ntasks(z, GS_LOWER_DEFAULT), 3);
    cr_assert_eq(ntasks(z, GS_LOWER_CULL), 3 + 3);
    cr_assert_eq(ntasks(z, 0), 100 + 3);
    cr_assert_eq(ntasks(z, GS_LOWER_SLICE_PUSHDOWN), 3);
    gs_array_release(z);
}

Test(graph_lower, materialised_intermediates_are_culled_too)
{
    gs_array_h x = normal1(1000, 10, 4), y, w;
    OK(gs_array_binary_scalar(GS_BINARY_MUL, x, 2.0, &y));
    OK(gs_array_binary(GS_BINARY_ADD, y, y, &w));     /* y has two uses: materialised */
    gs_array_h z = head(w, 10);
    cr_assert_eq(ntasks(z, GS_LOWER_DEFAULT), 2);
    cr_assert_eq(ntasks(z, GS_LOWER_FUSE), 101);
    cr_assert_eq(nlayers(z, GS_LOWER_DEFAULT), 2);
    gs_array_release(x);
    gs_array_release(y);
    gs_array_release(z);
}

Test(graph_lower, empty_slice_needs_no_input_chunks)
{
    gs_array_h x = add_s(normal1(100, 10, 4), 1.0);
    gs_array_h y;
    OK(gs_array_binary(GS_BINARY_ADD, x, x, &y));     /* x materialised */
    gs_array_h z = head(y, 0);
    gs_taskgraph_t *tg = lower(z, GS_LOWER_DEFAULT);
    cr_assert_eq(tg->ntasks, 1);
    cr_assert_eq(tg->nlayers, 1);                      /* the unused layer is dropped */
    cr_assert_eq(tg->dep_off[1], 0);
    cr_assert_eq(tg->task_nbytes[0], 0);
    gs_taskgraph_free(tg);
    gs_array_release(x);
    gs_array_release(z);   /* head() took y */
}

/* ---- structure ---- */

Test(graph_lower, generators_used_twice_are_inlined)
{
    gs_array_h x = normal2(30, 30, 7, 7), t, s;
    OK(gs_array_transpose(x, NULL, &t));
    OK(gs_array_binary(GS_BINARY_ADD, x, t, &s));
    gs_taskgraph_t *tg = lower(s, GS_LOWER_DEFAULT);
    cr_assert_eq(tg->nlayers, 1);
    cr_assert_eq(tg->ntasks, 25);
    cr_assert_eq(tg->dep_off[25], 0);
    gs_taskgraph_free(tg);
    cr_assert_eq(nlayers(s, GS_LOWER_CULL), 3);       /* generator, transpose, add */
    gs_array_release(x);
    gs_array_release(t);
    gs_array_release(s);
}

Test(graph_lower, axis_reduction_builds_a_tree_per_output_block)
{
    gs_array_h x = normal2(40, 30, 10, 10), r;
    gs_reduce_params_t p = {GS_REDUCE_FIELD_AXIS | GS_REDUCE_FIELD_SPLIT_EVERY, 0, 2, 0};
    OK(gs_array_reduce(GS_RED_MEAN, x, &p, &r));
    gs_taskgraph_t *tg = lower(r, GS_LOWER_DEFAULT);
    /* 4x3 partials; level 1: 3 outputs x 2 groups of 2; level 2: 3 finals */
    cr_assert_eq(tg->ntasks, 12 + 6 + 3);
    cr_assert_eq(tg->noutputs, 3);
    for (uint64_t b = 0; b < 3; b++) {
        uint64_t t = tg->outputs[b];
        cr_assert_eq(tg->task_nbytes[t], 10 * sizeof(double));
        cr_assert_eq(tg->dep_off[t + 1] - tg->dep_off[t], 2);
    }
    /* level 1 combines read two partials of the same column */
    for (uint64_t t = 12; t < 18; t++) {
        uint64_t d0 = tg->deps[tg->dep_off[t]], d1 = tg->deps[tg->dep_off[t] + 1];
        cr_assert_eq(tg->task_block[d0] % 3, tg->task_block[d1] % 3);
        cr_assert_eq(tg->task_nbytes[d0], 10 * 2 * sizeof(double));   /* mean: [sum, count] */
    }
    instantiate_all(tg);
    gs_taskgraph_free(tg);
    /* culling one output column keeps only its partials */
    gs_slice_t s = {2, 0, 1, GS_SLICE_INDEX};
    gs_array_h c;
    OK(gs_array_slice(r, 1, &s, &c));
    cr_assert_eq(ntasks(c, GS_LOWER_DEFAULT), 4 + 2 + 1 + 1);
    gs_array_release(c);
    gs_array_release(r);
    gs_array_release(x);
}

Test(graph_lower, literal_is_a_host_data_layer)
{
    double d[12] = {0};
    int64_t sh = 12, ch = 5;
    gs_array_h x, y;
    OK(gs_array_from_host(d, 1, &sh, &ch, &x));
    gs_taskgraph_t *tg = lower(x, GS_LOWER_DEFAULT);
    cr_assert_eq(tg->ntasks, 3);
    cr_assert_str_eq(gs_layer_name(tg->layers[0]), "literal");
    cr_assert_eq(tg->task_nbytes[2], 2 * sizeof(double));
    gs_taskgraph_free(tg);
    y = add_s(gs_array_retain(x), 1.0);
    cr_assert_eq(ntasks(y, GS_LOWER_DEFAULT), 6);
    gs_array_release(y);
    gs_array_release(x);
}

/* ---- persisted arrays ---- */

Test(graph_lower, persisted_nodes_become_externals)
{
    gs_array_h x = add_s(normal1(20, 5, 8), 1.0);
    gs_key_t keys[4] = {{9, 100}, {9, 101}, {9, 102}, {9, 103}};
    OK(gs_array_set_persisted(x, 4, keys));
    gs_array_h y;
    OK(gs_array_binary_scalar(GS_BINARY_MUL, x, 2.0, &y));
    gs_taskgraph_t *tg = lower(y, GS_LOWER_CULL);      /* unfused: no layer for x's inputs */
    cr_assert_eq(tg->nlayers, 1);
    cr_assert_eq(tg->ntasks, 4);
    cr_assert_eq(tg->nexternals, 4);
    for (uint64_t t = 0; t < 4; t++) {
        cr_assert_eq(tg->dep_off[t + 1] - tg->dep_off[t], 1);
        uint64_t d = tg->deps[tg->dep_off[t]];
        cr_assert_geq(d, tg->ntasks);
        cr_assert_eq(tg->externals[d - tg->ntasks].task, 100 + tg->task_block[t]);
        cr_assert_eq(tg->externals[d - tg->ntasks].graph, 9);
    }
    gs_taskgraph_free(tg);
    /* culling touches only the external blocks that are needed */
    gs_array_h z = head(gs_array_retain(y), 3);
    tg = lower(z, GS_LOWER_DEFAULT);
    cr_assert_eq(tg->ntasks, 1);
    cr_assert_eq(tg->nexternals, 1);
    cr_assert_eq(tg->externals[0].task, 100);
    gs_taskgraph_free(tg);
    /* the persisted array itself: one identity task per block */
    tg = lower(x, GS_LOWER_DEFAULT);
    cr_assert_eq(tg->ntasks, 4);
    cr_assert_eq(tg->nexternals, 4);
    gs_taskgraph_free(tg);
    /* after clearing, it is recomputed */
    gs_array_clear_persisted(x);
    tg = lower(y, GS_LOWER_DEFAULT);
    cr_assert_eq(tg->nexternals, 0);
    cr_assert_eq(tg->ntasks, 4);
    cr_assert_eq(tg->dep_off[4], 0);
    gs_taskgraph_free(tg);
    gs_array_release(z);
    gs_array_release(y);
    gs_array_release(x);
}

/* ---- kernel limits ---- */

Test(graph_lower, groups_beyond_kernel_limits_are_split)
{
    gs_array_h acc = normal1(50, 10, 1);
    for (uint64_t i = 2; i <= 20; i++) {
        gs_array_h n = normal1(50, 10, i), r;
        OK(gs_array_binary(GS_BINARY_ADD, acc, n, &r));
        gs_array_release(acc);
        gs_array_release(n);
        acc = r;
    }
    gs_taskgraph_t *tg = lower(acc, GS_LOWER_DEFAULT);
    cr_assert_gt(tg->nlayers, 1);
    cr_assert_leq(instantiate_all(tg), GS_KERNEL_MAX_LEAVES);
    gs_taskgraph_free(tg);
    for (int i = 0; i < 200; i++) acc = add_s(acc, 1.0);   /* program length */
    tg = lower(acc, GS_LOWER_DEFAULT);
    cr_assert_geq(tg->nlayers, 200 / GS_KERNEL_MAX_PROG);
    instantiate_all(tg);
    gs_taskgraph_free(tg);
    gs_array_release(acc);
}

Test(graph_lower, long_chains_lower_in_both_modes)
{
    gs_array_h x = normal1(8, 4, 1);
    for (int i = 0; i < 5000; i++) x = add_s(x, 1.0);
    gs_taskgraph_t *tg = lower(x, GS_LOWER_DEFAULT);
    cr_assert_leq(tg->nlayers, 5000 / (GS_KERNEL_MAX_PROG - 2) + 2);
    gs_taskgraph_free(tg);
    tg = lower(x, 0);
    cr_assert_eq(tg->nlayers, 5001);
    cr_assert_eq(tg->ntasks, 2 * 5001);
    gs_taskgraph_free(tg);
    gs_array_release(x);
}

/* ---- errors ---- */

Test(graph_lower, rejects_bad_arguments)
{
    gs_array_h x = normal1(8, 4, 1);
    gs_taskgraph_t *tg = (gs_taskgraph_t *)(uintptr_t)0x10;
    cr_assert_eq(gs_graph_lower(NULL, 0, &tg), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_graph_lower(x, 0, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_graph_lower(x, 0x80, &tg), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "flags") != NULL);
    cr_assert_eq(tg, (gs_taskgraph_t *)(uintptr_t)0x10);
    gs_taskgraph_free(NULL);
    gs_array_release(x);
}

Test(graph_lower, allocation_failures_unwind_cleanly)
{
    double d[30];
    int64_t sh = 30, ch = 7;
    for (int i = 0; i < 30; i++) d[i] = i;
    gs_array_h lit, x = normal1(30, 4, 2), y, m, z;
    OK(gs_array_from_host(d, 1, &sh, &ch, &lit));
    OK(gs_array_binary(GS_BINARY_MUL, x, lit, &y));
    OK(gs_array_reduce(GS_RED_MEAN, y, NULL, &m));
    OK(gs_array_binary(GS_BINARY_SUB, y, m, &z));
    for (unsigned flags = 0; flags <= GS_LOWER_DEFAULT; flags += GS_LOWER_FUSE) {
        int succeeded = 0;
        for (long k = 0; k < 5000 && !succeeded; k++) {
            gs_taskgraph_t *tg = NULL;
            gs_alloc_fail_after(k);
            gs_status_t st = gs_graph_lower(z, flags, &tg);
            gs_alloc_fail_after(-1);
            cr_assert(st == GS_OK || st == GS_ERR_NO_MEMORY, "k=%ld: %s", k, gs_status_name(st));
            if (st == GS_OK) {
                OK(gs_taskgraph_validate(tg));
                gs_taskgraph_free(tg);
                succeeded = 1;
            } else {
                cr_assert_null(tg);
            }
        }
        cr_assert(succeeded);
    }
    gs_array_release(z);
    gs_array_release(m);
    gs_array_release(y);
    gs_array_release(x);
    gs_array_release(lit);
}

Test(graph_lower, shared_nodes_reached_at_different_depths_come_first)
{
    /* x feeds both sum(x) and (sum(x) + x): x must be numbered before the sum */
    gs_array_h x = add_s(normal1(40, 7, 6), 2.0), s, b, c, d;
    OK(gs_array_reduce(GS_RED_SUM, x, NULL, &s));
    OK(gs_array_binary(GS_BINARY_ADD, s, x, &b));
    OK(gs_array_binary(GS_BINARY_MUL, x, b, &c));
    OK(gs_array_binary(GS_BINARY_MUL, b, x, &d));
    for (unsigned f = 0; f <= GS_LOWER_DEFAULT; f++) {
        gs_taskgraph_t *tg = lower(c, f);   /* validates: every dependency is an earlier task */
        instantiate_all(tg);
        gs_taskgraph_free(tg);
        tg = lower(d, f);
        instantiate_all(tg);
        gs_taskgraph_free(tg);
    }
    gs_array_release(d);
    gs_array_release(x);
    gs_array_release(s);
    gs_array_release(b);
    gs_array_release(c);
}
