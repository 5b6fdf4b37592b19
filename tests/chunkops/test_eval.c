/* The serial task-graph evaluator (chunkops/eval.h): results, memory discipline (every
 * intermediate freed right after its last consumer, nothing left allocated, on success and
 * on every error), error propagation and refusals. Graphs come from the graph module's
 * lowering; a spy backend wraps the CPU backend to watch allocations and kernel inputs. */
#include <criterion/criterion.h>
#include <gsched/array.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "chunkops/random.h"
#include "common/alloc.h"
#include "graph/taskgraph.h"

#define OK(expr)                                                                              \
    do {                                                                                      \
        gs_status_t st_ = (expr);                                                             \
        cr_assert_eq(st_, GS_OK, "%s: %s: %s", #expr, gs_status_name(st_), gs_last_error()); \
    } while (0)

/* ---- spy backend: the CPU backend plus bookkeeping ---- */

#define SPY_MAX 4096
static struct {
    void *live[SPY_MAX];
    long last_use[SPY_MAX]; /* kernel number that last read the buffer, -1 never */
    int nlive;
    long kernels;           /* kernels launched so far */
    long allocs, frees;
    long late_frees;        /* buffers freed after another kernel ran past their last use */
    long dead_reads;        /* kernels reading a pointer that is not a live buffer */
} spy;

static int spy_find(const void *p)
{
    for (int i = 0; i < spy.nlive; i++)
        if (spy.live[i] == p) return i;
    return -1;
}

static gs_status_t spy_mem_alloc(gs_chunkops_ctx_h ctx, size_t n, void **p)
{
    gs_status_t st = gs_chunkops_cpu_ops.mem_alloc(ctx, n, p);
    if (st == GS_OK) {
        cr_assert_lt(spy.nlive, SPY_MAX);
        spy.live[spy.nlive] = *p;
        spy.last_use[spy.nlive] = -1;
        spy.nlive++;
        spy.allocs++;
    }
    return st;
}

static void spy_mem_free(gs_chunkops_ctx_h ctx, void *p)
{
    int i = spy_find(p);
    cr_assert_geq(i, 0, "freeing a pointer that was not allocated");
    /* an input must go before the next kernel after its last use */
    if (spy.last_use[i] >= 0 && spy.last_use[i] < spy.kernels) spy.late_frees++;
    spy.live[i] = spy.live[spy.nlive - 1];
    spy.last_use[i] = spy.last_use[spy.nlive - 1];
    spy.nlive--;
    spy.frees++;
    gs_chunkops_cpu_ops.mem_free(ctx, p);
}

static void spy_read(const void *p)
{
    int i = spy_find(p);
    if (i < 0) spy.dead_reads++;
    else spy.last_use[i] = spy.kernels;
}

static gs_status_t spy_fused(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h s, const gs_kfused_t *k)
{
    spy.kernels++;
    for (int i = 0; i < k->nleaves; i++)
        if (k->leaves[i].kind == GS_LEAF_CHUNK) spy_read(k->leaves[i].data);
    return gs_chunkops_cpu_ops.fused(ctx, s, k);
}

static gs_status_t spy_combine(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h s,
                               const gs_kcombine_t *k)
{
    spy.kernels++;
    for (int i = 0; i < k->ninputs; i++) spy_read(k->inputs[i]);
    return gs_chunkops_cpu_ops.combine(ctx, s, k);
}

static gs_status_t spy_copy(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h s, const gs_kcopy_t *k)
{
    spy.kernels++;
    for (int i = 0; i < k->npieces; i++) spy_read(k->pieces[i].src);
    return gs_chunkops_cpu_ops.copy(ctx, s, k);
}

static gs_status_t spy_copy_from_host(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h s, void *dst,
                                      const void *src, size_t n)
{
    spy.kernels++;
    return gs_chunkops_cpu_ops.copy_from_host(ctx, s, dst, src, n);
}

static gs_chunkops_ops_t spy_ops;

static void spy_init(void)
{
    memset(&spy, 0, sizeof(spy));
    spy_ops = gs_chunkops_cpu_ops;
    spy_ops.name = "spy";
    spy_ops.mem_alloc = spy_mem_alloc;
    spy_ops.mem_free = spy_mem_free;
    spy_ops.fused = spy_fused;
    spy_ops.combine = spy_combine;
    spy_ops.copy = spy_copy;
    spy_ops.copy_from_host = spy_copy_from_host;
}

static void spy_check_clean(gs_chunkops_ctx_h ctx)
{
    size_t used;
    gs_chunkops_cpu_ops.mem_usage(ctx, &used, NULL);
    cr_assert_eq(used, 0, "%zu bytes left allocated", used);
    cr_assert_eq(spy.nlive, 0);
    cr_assert_eq(spy.allocs, spy.frees);
    cr_assert_eq(spy.dead_reads, 0, "a kernel read freed memory");
}

/* ---- expressions ---- */

static gs_chunkops_ctx_h ctx_new(size_t limit)
{
    gs_chunkops_params_t p = {.memory_limit = limit};
    gs_chunkops_ctx_h ctx;
    OK(gs_chunkops_cpu_ops.ctx_create(&p, &ctx));
    return ctx;
}

/* (normal(42; 120 x 90 in 50 x 40 chunks) + 1)[::2, ::2] */
static gs_array_h seed_expr(void)
{
    int64_t shape[2] = {120, 90}, chunks[2] = {50, 40};
    gs_array_h x, y, z;
    gs_slice_t sl[2] = {{.step = 2}, {.step = 2}};
    OK(gs_array_random_normal(42, 0.0, 1.0, 2, shape, chunks, &x));
    OK(gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &y));
    OK(gs_array_slice(y, 2, sl, &z));
    gs_array_release(x);
    gs_array_release(y);
    return z;
}

static gs_array_h reduce(gs_redop_t op, gs_array_h a, int axis, int split_every)
{
    gs_reduce_params_t p = {.field_mask = GS_REDUCE_FIELD_SPLIT_EVERY, .split_every = split_every};
    if (axis != -99) {
        p.field_mask |= GS_REDUCE_FIELD_AXIS;
        p.axis = axis;
    }
    gs_array_h r;
    OK(gs_array_reduce(op, a, &p, &r));
    return r;
}

static const unsigned all_flags[] = {GS_LOWER_DEFAULT, 0, GS_LOWER_CULL,
                                     GS_LOWER_CULL | GS_LOWER_FUSE};

Test(chunkops_eval, seed_reduction_matches_the_definition_under_every_flag_set)
{
    gs_array_h z = seed_expr(), s = reduce(GS_RED_SUM, z, -99, 3);
    long double want = 0;
    for (int i = 0; i < 120; i += 2)
        for (int j = 0; j < 90; j += 2) want += gs_random_normal_v3(42, (uint64_t)(i * 90 + j), 0, 1) + 1.0;
    gs_chunkops_ctx_h ctx = ctx_new(0);
    for (size_t f = 0; f < sizeof(all_flags) / sizeof(all_flags[0]); f++) {
        gs_taskgraph_t *tg;
        double out = 0;
        OK(gs_graph_lower(s, all_flags[f], &tg));
        spy_init();
        OK(gs_chunkops_eval(&spy_ops, ctx, tg, &out, 1));
        cr_assert(fabs(out - (double)want) < 1e-10, "flags 0x%x: %.17g, expected %.17Lg",
                  all_flags[f], out, want);
        spy_check_clean(ctx);
        cr_assert_eq(spy.late_frees, 0, "flags 0x%x: an intermediate outlived its last consumer",
                     all_flags[f]);
        gs_taskgraph_free(tg);
    }
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    gs_array_release(z);
    gs_array_release(s);
}

Test(chunkops_eval, multi_block_results_are_assembled_row_major)
{
    /* arange over 7 x 5 x 3 in uneven 3 x 2 x 2 chunks, then a transpose and a mean over
     * axis 1 (many output blocks, copies and combines) */
    int64_t shape[3] = {7, 5, 3}, chunks[3] = {3, 2, 2};
    gs_array_h a, t, m;
    OK(gs_array_arange(0.0, 1.0, 3, shape, chunks, &a));
    gs_chunkops_ctx_h ctx = ctx_new(0);
    for (size_t f = 0; f < sizeof(all_flags) / sizeof(all_flags[0]); f++) {
        gs_taskgraph_t *tg;
        double out[105];
        OK(gs_graph_lower(a, all_flags[f], &tg));
        spy_init();
        OK(gs_chunkops_eval(&spy_ops, ctx, tg, out, 105));
        for (int i = 0; i < 105; i++) cr_assert_eq(out[i], i);
        spy_check_clean(ctx);
        gs_taskgraph_free(tg);
    }
    int perm[3] = {2, 0, 1}; /* out[c][i][j] = a[i][j][c] */
    OK(gs_array_transpose(a, perm, &t));
    m = reduce(GS_RED_MEAN, t, 1, 2); /* shape 3 x 5: mean over i of a[i][j][c] */
    for (size_t f = 0; f < sizeof(all_flags) / sizeof(all_flags[0]); f++) {
        gs_taskgraph_t *tg;
        double out[15];
        OK(gs_graph_lower(m, all_flags[f], &tg));
        spy_init();
        OK(gs_chunkops_eval(&spy_ops, ctx, tg, out, 15));
        for (int c = 0; c < 3; c++)
            for (int j = 0; j < 5; j++) {
                double want = 0;
                for (int i = 0; i < 7; i++) want += i * 15 + j * 3 + c;
                want /= 7;
                cr_assert(fabs(out[c * 5 + j] - want) < 1e-12, "(%d, %d): %.17g vs %.17g", c, j,
                          out[c * 5 + j], want);
            }
        spy_check_clean(ctx);
        cr_assert_eq(spy.late_frees, 0);
        gs_taskgraph_free(tg);
    }
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    gs_array_release(a);
    gs_array_release(t);
    gs_array_release(m);
}

Test(chunkops_eval, host_data_travels_through_the_graph)
{
    double data[6 * 4];
    for (int i = 0; i < 24; i++) data[i] = i * 0.5 - 3;
    int64_t shape[2] = {6, 4}, chunks[2] = {4, 3};
    gs_array_h h, n;
    OK(gs_array_from_host(data, 2, shape, chunks, &h));
    OK(gs_array_unary(GS_UNARY_NEG, h, &n));
    gs_chunkops_ctx_h ctx = ctx_new(0);
    for (size_t f = 0; f < sizeof(all_flags) / sizeof(all_flags[0]); f++) {
        gs_taskgraph_t *tg;
        double out[24];
        OK(gs_graph_lower(n, all_flags[f], &tg));
        spy_init();
        OK(gs_chunkops_eval(&spy_ops, ctx, tg, out, 24));
        for (int i = 0; i < 24; i++) cr_assert_eq(out[i], -data[i]);
        spy_check_clean(ctx);
        gs_taskgraph_free(tg);
    }
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    gs_array_release(h);
    gs_array_release(n);
}

Test(chunkops_eval, a_failing_task_is_named_and_nothing_leaks)
{
    /* output chunks are at most 25 x 20 doubles (4000 bytes): none fits under 1000 bytes */
    gs_array_h z = seed_expr();
    gs_taskgraph_t *tg;
    double *out = malloc(60 * 45 * sizeof(double));
    OK(gs_graph_lower(z, GS_LOWER_DEFAULT, &tg));
    gs_chunkops_ctx_h ctx = ctx_new(1000);
    spy_init();
    gs_status_t st = gs_chunkops_eval(&spy_ops, ctx, tg, out, 60 * 45);
    cr_assert_eq(st, GS_ERR_NO_MEMORY, "%s", gs_status_name(st));
    cr_assert(strstr(gs_last_error(), "task ") != NULL && strstr(gs_last_error(), "do not fit"),
              "message: %s", gs_last_error());
    cr_assert_eq(spy.kernels, 0);
    spy_check_clean(ctx);
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    /* the 9 output blocks need 21600 bytes: 12000 fails part-way, after some tasks ran */
    ctx = ctx_new(12000);
    spy_init();
    st = gs_chunkops_eval(&spy_ops, ctx, tg, out, 60 * 45);
    cr_assert_eq(st, GS_ERR_NO_MEMORY);
    cr_assert_gt(spy.kernels, 0);
    spy_check_clean(ctx);
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    gs_taskgraph_free(tg);
    gs_array_release(z);
    free(out);
}

Test(chunkops_eval, host_allocation_failures_leak_nothing)
{
    gs_array_h z = seed_expr(), s = reduce(GS_RED_VAR, z, 0, 2);
    gs_taskgraph_t *tg;
    double out[45], want[45];
    OK(gs_graph_lower(s, 0, &tg));
    gs_chunkops_ctx_h ctx = ctx_new(0);
    spy_init();
    OK(gs_chunkops_eval(&spy_ops, ctx, tg, want, 45));
    int n;
    for (n = 0; n < 10000; n++) {
        spy_init();
        gs_alloc_fail_after(n);
        gs_status_t st = gs_chunkops_eval(&spy_ops, ctx, tg, out, 45);
        gs_alloc_fail_after(-1);
        spy_check_clean(ctx);
        if (st == GS_OK) break;
        cr_assert_eq(st, GS_ERR_NO_MEMORY, "failure after %d allocations: %s: %s", n,
                     gs_status_name(st), gs_last_error());
    }
    cr_assert_lt(n, 10000);
    cr_assert_gt(n, 3, "injection never reached the evaluator");
    cr_assert(memcmp(out, want, sizeof(out)) == 0);
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    gs_taskgraph_free(tg);
    gs_array_release(z);
    gs_array_release(s);
}

Test(chunkops_eval, refuses_bad_arguments_externals_and_bad_task_tables)
{
    gs_array_h z = seed_expr();
    gs_taskgraph_t *tg;
    double *out = malloc(60 * 45 * sizeof(double));
    gs_chunkops_ctx_h ctx = ctx_new(0);
    OK(gs_graph_lower(z, GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(gs_chunkops_eval(NULL, ctx, tg, out, 2700), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_chunkops_eval(&gs_chunkops_cpu_ops, NULL, tg, out, 2700), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, NULL, out, 2700), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, NULL, 2700), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, 2699), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "2700") != NULL, "message: %s", gs_last_error());
    /* a task table whose sizes disagree with the layers */
    tg->task_nbytes[0] += 8;
    spy_init();
    cr_assert_eq(gs_chunkops_eval(&spy_ops, ctx, tg, out, 2700), GS_ERR_INVALID_PARAM);
    spy_check_clean(ctx);
    tg->task_nbytes[0] -= 8;
    gs_taskgraph_free(tg);

    /* graphs reading persisted chunks need a cluster */
    int64_t nb = gs_array_nchunks(z, 0) * gs_array_nchunks(z, 1);
    gs_key_t *keys = calloc((size_t)nb, sizeof(gs_key_t));
    for (int64_t b = 0; b < nb; b++) keys[b] = (gs_key_t){.graph = 1, .task = (uint64_t)b};
    OK(gs_array_set_persisted(z, (uint64_t)nb, keys));
    gs_array_h w;
    OK(gs_array_binary_scalar(GS_BINARY_MUL, z, 2.0, &w));
    OK(gs_graph_lower(w, GS_LOWER_DEFAULT, &tg));
    cr_assert_gt(tg->nexternals, 0);
    cr_assert_eq(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, 2700), GS_ERR_UNSUPPORTED);
    gs_taskgraph_free(tg);
    gs_array_release(w);
    free(keys);

    gs_chunkops_cpu_ops.ctx_destroy(ctx);
    gs_array_release(z);
    free(out);
}
