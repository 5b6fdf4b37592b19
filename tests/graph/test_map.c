/* gs_array_map_overlap on the CPU backend's serial evaluator: users' kernels from the test
 * kernel library (tests/kernels, GS_TEST_KERNELS) equal to the built-in stencil, block offsets,
 * a crashing kernel failing its task (and this process carrying on), missing symbols and
 * libraries reported at graph build time where the library is here. */
#include "graph_test_util.h"
#include "graph_eval_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"
#include "graph/graph_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

TestSuite(graph_map, .init = setup, .fini = teardown, .timeout = 120);

static gs_status_t eval(gs_array_h h, double *out)
{
    gs_taskgraph_t *tg;
    gs_status_t st;
    TX_OK(gs_graph_lower(h, GS_LOWER_DEFAULT, &tg));
    st = gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)gs_array_size(h));
    gs_taskgraph_free(tg);
    return st;
}

static const double mean9[9] = {1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9,
                                1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9};

Test(graph_map, overlap_smoothing_equals_the_builtin_stencil)
{
    const int64_t shape[2] = {29, 23}, chunks[2] = {6, 5};
    const int d[2] = {1, 1};
    tx_t *x = tx_uniform(3, -1.0, 1.0, 2, shape, chunks);
    double *a = malloc(29 * 23 * sizeof(double)), *b = malloc(29 * 23 * sizeof(double));
    for (int bnd = 0; bnd < GS_BOUNDARY_COUNT; bnd++) {
        gs_user_kernel_t k = {GS_TEST_KERNELS, "gs_test_smooth3x3", NULL, 0, NULL, 0};
        gs_array_h m, s;
        if (bnd == GS_BOUNDARY_NONE) {   /* the kernel keeps the edges itself */
            k.arg = shape;
            k.arg_len = sizeof(shape);
        }
        TX_OK(gs_array_map_overlap(&k, x->h, d, (gs_boundary_t)bnd, 0.75, &m));
        TX_OK(gs_array_stencil(x->h, mean9, d, (gs_boundary_t)bnd, 0.75, &s));
        TX_OK(eval(m, a));
        TX_OK(eval(s, b));
        for (int i = 0; i < 29 * 23; i++)
            cr_assert(a[i] == b[i], "boundary %d, element %d: kernel %.17g, stencil %.17g", bnd, i,
                      a[i], b[i]);
        gs_array_release(m);
        gs_array_release(s);
    }
    free(a);
    free(b);
}

Test(graph_map, kernels_see_global_offsets_and_the_padded_block)
{
    const int64_t shape[2] = {17, 13}, chunks[2] = {4, 6};
    const int32_t depth32[2] = {2, 1};
    const int d[2] = {2, 1};
    tx_t *x = tx_uniform(4, 0.0, 1.0, 2, shape, chunks);
    gs_user_kernel_t k = {GS_TEST_KERNELS, "gs_test_position", depth32, sizeof(depth32), NULL, 0};
    gs_array_h m;
    double *got = malloc(17 * 13 * sizeof(double));
    TX_OK(gs_array_map_overlap(&k, x->h, d, GS_BOUNDARY_PERIODIC, 0, &m));
    TX_OK(eval(m, got));
    for (int i = 0; i < 17; i++)
        for (int j = 0; j < 13; j++)
            cr_assert(got[i * 13 + j] == i * 1000.0 + j + 0.5 * x->v[i * 13 + j],
                      "(%d, %d): %.17g", i, j, got[i * 13 + j]);
    gs_array_release(m);
    free(got);
}

Test(graph_map, a_crashing_kernel_fails_its_task_and_the_process_carries_on)
{
    const int64_t shape[2] = {8, 8}, chunks[2] = {4, 4};
    const int d[2] = {1, 1};
    tx_t *x = tx_uniform(4, 0.0, 1.0, 2, shape, chunks);
    gs_user_kernel_t bad = {GS_TEST_KERNELS, "gs_test_crash", NULL, 0, NULL, 0};
    gs_user_kernel_t good = {GS_TEST_KERNELS, "gs_test_smooth3x3", NULL, 0, NULL, 0};
    gs_array_h m, g;
    double out[64];
    TX_OK(gs_array_map_overlap(&bad, x->h, d, GS_BOUNDARY_REFLECT, 0, &m));
    cr_assert_eq(eval(m, out), GS_ERR_TASK_FAILED);
    cr_assert(strstr(gs_last_error(), "gs_test_crash") != NULL &&
                  strstr(gs_last_error(), "signal") != NULL,
              "message: %s", gs_last_error());
    TX_OK(gs_array_map_overlap(&good, x->h, d, GS_BOUNDARY_REFLECT, 0, &g));
    TX_OK(eval(g, out));
    gs_array_release(m);
    gs_array_release(g);
}

Test(graph_map, missing_symbols_and_libraries)
{
    const int64_t shape[2] = {8, 8}, chunks[2] = {4, 4};
    const int d[2] = {1, 1};
    tx_t *x = tx_uniform(4, 0.0, 1.0, 2, shape, chunks);
    gs_array_h m = NULL;
    double out[64];
    gs_user_kernel_t nosym = {GS_TEST_KERNELS, "gs_test_no_such_kernel", NULL, 0, NULL, 0};
    cr_assert_eq(gs_array_map_overlap(&nosym, x->h, d, GS_BOUNDARY_NONE, 0, &m), GS_ERR_NOT_FOUND);
    cr_assert(strstr(gs_last_error(), "gs_test_no_such_kernel") != NULL, "%s", gs_last_error());
    /* a file that is not a library */
    gs_user_kernel_t notlib = {"/etc/hostname", "f", NULL, 0, NULL, 0};
    if (access("/etc/hostname", R_OK) == 0)
        cr_assert_eq(gs_array_map_overlap(&notlib, x->h, d, GS_BOUNDARY_NONE, 0, &m),
                     GS_ERR_NOT_FOUND);
    gs_user_kernel_t empty = {"", "f", NULL, 0, NULL, 0};
    cr_assert_eq(gs_array_map_overlap(&empty, x->h, d, GS_BOUNDARY_NONE, 0, &m),
                 GS_ERR_INVALID_PARAM);
    gs_user_kernel_t huge = {GS_TEST_KERNELS, "gs_test_add", out, (size_t)1 << 20, NULL, 0};
    cr_assert_eq(gs_array_map_overlap(&huge, x->h, d, GS_BOUNDARY_NONE, 0, &m),
                 GS_ERR_INVALID_PARAM);
    cr_assert_null(m);
    /* absent here: accepted at build time, the evaluator (a worker) reports it */
    gs_user_kernel_t absent = {"/nonexistent/libnothing.so", "f", NULL, 0, NULL, 0};
    TX_OK(gs_array_map_overlap(&absent, x->h, d, GS_BOUNDARY_NONE, 0, &m));
    cr_assert_eq(eval(m, out), GS_ERR_NOT_FOUND);
    cr_assert(strstr(gs_last_error(), "libnothing") != NULL, "%s", gs_last_error());
    gs_array_release(m);
}

Test(graph_map, map_blocks_equals_the_builtin_add_and_sees_offsets)
{
    const int64_t shape[2] = {17, 13}, chunks[2] = {4, 6};
    tx_t *x = tx_uniform(4, 0.0, 1.0, 2, shape, chunks);
    tx_t *y = tx_uniform(5, -1.0, 1.0, 2, shape, chunks);
    gs_user_kernel_t add = {GS_TEST_KERNELS, "gs_test_add", NULL, 0, NULL, 0};
    gs_user_kernel_t pos = {GS_TEST_KERNELS, "gs_test_position", NULL, 0, NULL, 0};
    gs_array_h in2[2] = {x->h, y->h}, m, b, p;
    double *a = malloc(17 * 13 * sizeof(double)), *c = malloc(17 * 13 * sizeof(double));
    TX_OK(gs_array_map_blocks(&add, 2, in2, 2, shape, chunks, &m));
    TX_OK(gs_array_binary(GS_BINARY_ADD, x->h, y->h, &b));
    TX_OK(eval(m, a));
    TX_OK(eval(b, c));
    for (int i = 0; i < 17 * 13; i++) cr_assert(a[i] == c[i], "element %d: %.17g vs %.17g", i, a[i], c[i]);
    TX_OK(gs_array_map_blocks(&pos, 1, in2, 2, shape, chunks, &p));
    TX_OK(eval(p, a));
    for (int i = 0; i < 17; i++)
        for (int j = 0; j < 13; j++)
            cr_assert(a[i * 13 + j] == i * 1000.0 + j + 0.5 * x->v[i * 13 + j], "(%d, %d): %.17g",
                      i, j, a[i * 13 + j]);
    /* composes: a user kernel's output feeds a fused reduction */
    gs_array_h tot;
    double s = 0, want = 0;
    TX_OK(gs_array_reduce(GS_RED_SUM, m, NULL, &tot));
    TX_OK(eval(tot, &s));
    for (int i = 0; i < 17 * 13; i++) want += c[i];
    cr_assert(fabs(s - want) <= 1e-12 * fmax(1.0, fabs(want)), "%.17g vs %.17g", s, want);
    gs_array_release(tot);
    gs_array_release(m);
    gs_array_release(b);
    gs_array_release(p);
    free(a);
    free(c);
}

Test(graph_map, map_blocks_errors_and_crashes)
{
    const int64_t shape[2] = {8, 8}, chunks[2] = {4, 4}, other[2] = {8, 4};
    tx_t *x = tx_uniform(4, 0.0, 1.0, 2, shape, chunks);
    gs_user_kernel_t add = {GS_TEST_KERNELS, "gs_test_add", NULL, 0, NULL, 0};
    gs_user_kernel_t crash = {GS_TEST_KERNELS, "gs_test_crash", NULL, 0, NULL, 0};
    gs_user_kernel_t nosym = {GS_TEST_KERNELS, "nope", NULL, 0, NULL, 0};
    gs_array_h in3[3] = {x->h, x->h, x->h}, m = NULL;
    double out[64];
    cr_assert_eq(gs_array_map_blocks(&add, 0, in3, 2, shape, chunks, &m), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_map_blocks(&add, 3, in3, 2, shape, chunks, &m), GS_ERR_INVALID_PARAM);
    /* x has 2 x 2 blocks, the output 1 x 2 */
    cr_assert_eq(gs_array_map_blocks(&add, 1, in3, 2, shape, other, &m), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_map_blocks(&nosym, 1, in3, 2, shape, chunks, &m), GS_ERR_NOT_FOUND);
    cr_assert_eq(gs_array_map_blocks(&add, 1, in3, 2, shape, NULL, &m), GS_ERR_INVALID_PARAM);
    cr_assert_null(m);
    TX_OK(gs_array_map_blocks(&crash, 1, in3, 2, shape, chunks, &m));
    cr_assert_eq(eval(m, out), GS_ERR_TASK_FAILED);
    cr_assert(strstr(gs_last_error(), "gs_test_crash") != NULL, "%s", gs_last_error());
    gs_array_release(m);
}

Test(graph_map, user_layers_round_trip_and_refuse_truncations)
{
    const int64_t shape[2] = {9, 7}, chunks[2] = {4, 3};
    const int d[2] = {1, 1};
    const char arg[5] = "abcd";
    tx_t *x = tx_uniform(4, 0.0, 1.0, 2, shape, chunks);
    gs_user_kernel_t k = {GS_TEST_KERNELS, "gs_test_add", arg, sizeof(arg), NULL, 0};
    gs_array_h m, o, both;
    gs_taskgraph_t *tg;
    TX_OK(gs_array_map_blocks(&k, 1, &x->h, 2, shape, chunks, &m));
    TX_OK(gs_array_map_overlap(&k, x->h, d, GS_BOUNDARY_REFLECT, 0, &o));
    TX_OK(gs_array_binary(GS_BINARY_ADD, m, o, &both));
    TX_OK(gs_graph_lower(both, GS_LOWER_DEFAULT, &tg));
    int seen_user = 0, seen_overlap = 0;
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        const gs_layer_t *l = tg->layers[i];
        int kind = gs_layer_kind(l);
        if (kind != GS_LAYER_USER && kind != GS_LAYER_STENCIL) continue;
        seen_user += kind == GS_LAYER_USER;
        seen_overlap += kind == GS_LAYER_STENCIL && strcmp(gs_layer_name(l), "map_overlap") == 0;
        gs_buf_t b, b2;
        gs_layer_t *dl;
        gs_buf_init(&b);
        gs_buf_init(&b2);
        TX_OK(gs_layer_encode(l, &b));
        TX_OK(gs_layer_decode(b.data, b.len, &dl));
        TX_OK(gs_layer_encode(dl, &b2));
        cr_assert(b.len == b2.len && memcmp(b.data, b2.data, b.len) == 0);
        cr_assert_str_eq(gs_layer_name(dl), gs_layer_name(l));
        gs_layer_free(dl);
        for (size_t n = 0; n < b.len; n++) {
            gs_layer_t *t = NULL;
            cr_assert_neq(gs_layer_decode(b.data, n, &t), GS_OK, "prefix of %zu decoded", n);
        }
        for (size_t n = 0; n < b.len; n++) {
            gs_layer_t *t = NULL;
            unsigned char *p = (unsigned char *)b.data;
            p[n] ^= 0x21;
            if (gs_layer_decode(b.data, b.len, &t) == GS_OK) gs_layer_free(t);
            p[n] ^= 0x21;
        }
        gs_buf_cleanup(&b);
        gs_buf_cleanup(&b2);
    }
    cr_assert(seen_user == 1 && seen_overlap == 1, "user %d, map_overlap %d", seen_user,
              seen_overlap);
    gs_taskgraph_free(tg);
    gs_array_release(both);
    gs_array_release(o);
    gs_array_release(m);
}

/* A user layer's input box (2^30, 2^30, 0) holds 0 elements, but the check stopped
 * multiplying once the product passed the element limit, so a declared length of 2^60 (the
 * product so far) passed for it: the kernel's view and its buffer disagreed. A box whose
 * nonzero extents exceed the limit is refused now; a true empty box is accepted, a length
 * that is not the volume refused. */
Test(graph_map, user_layers_refuse_boxes_whose_length_is_not_their_volume)
{
    const int64_t shape[3] = {4, 4, 4}, chunks[3] = {4, 4, 4};
    tx_t *x = tx_uniform(4, 0.0, 1.0, 3, shape, chunks);
    gs_user_kernel_t k = {GS_TEST_KERNELS, "gs_test_add", NULL, 0, NULL, 0};
    gs_array_h m;
    gs_taskgraph_t *tg;
    TX_OK(gs_array_map_blocks(&k, 1, &x->h, 3, shape, chunks, &m));
    TX_OK(gs_graph_lower(m, GS_LOWER_DEFAULT, &tg));
    gs_layer_t *l = tg->layers[tg->nlayers - 1];
    cr_assert_eq(gs_layer_kind(l), GS_LAYER_USER);
    int64_t *box = l->u.ub.ibox;   /* input 0 of block 0: len, shape[3], start[3] */
    static const int64_t cases[3][4] = {
        {(int64_t)1 << 60, (int64_t)1 << 30, (int64_t)1 << 30, 0},   /* refused: too large */
        {(int64_t)1 << 57, (int64_t)1 << 29, (int64_t)1 << 28, 0},   /* refused: not its volume */
        {0, 4, 0, 4},                                                 /* an empty box: fine */
    };
    for (int c = 0; c < 3; c++) {
        gs_buf_t b;
        gs_layer_t *dl = NULL;
        memcpy(box, cases[c], sizeof(cases[c]));
        gs_buf_init(&b);
        TX_OK(gs_layer_encode(l, &b));
        gs_status_t st = gs_layer_decode(b.data, b.len, &dl);
        if (c < 2) {
            cr_assert_eq(st, GS_ERR_PROTO, "case %d decoded", c);
            cr_assert(strstr(gs_last_error(), c == 0 ? "too large" : "does not match its shape"),
                      "case %d: %s", c, gs_last_error());
        } else {
            cr_assert_eq(st, GS_OK, "%s", gs_last_error());
            gs_layer_free(dl);
        }
        gs_buf_cleanup(&b);
    }
    gs_taskgraph_free(tg);
    gs_array_release(m);
}

/* Backends without a user op (the cuda one) stage users' kernels through host memory
 * (chunkops/stage.c, through the backend's copy_to_host / copy_from_host / sync). Here the cpu
 * backend with its user op taken away takes that path: map_overlap and map_blocks give what
 * the direct path gives, and a crashing kernel still fails only its task. */
Test(graph_map, kernels_staged_through_host_memory_equal_the_direct_path)
{
    gs_chunkops_ops_t staged = gs_chunkops_cpu_ops;
    const int64_t shape[2] = {17, 13}, chunks[2] = {4, 6};
    const int d[2] = {2, 1};
    const int32_t depth32[2] = {2, 1};
    tx_t *x = tx_uniform(4, 0.0, 1.0, 2, shape, chunks);
    tx_t *y = tx_uniform(5, -1.0, 1.0, 2, shape, chunks);
    gs_user_kernel_t pos = {GS_TEST_KERNELS, "gs_test_position", depth32, sizeof(depth32), NULL, 0};
    gs_user_kernel_t add = {GS_TEST_KERNELS, "gs_test_add", NULL, 0, NULL, 0};
    gs_user_kernel_t bad = {GS_TEST_KERNELS, "gs_test_crash", NULL, 0, NULL, 0};
    gs_array_h in2[2] = {x->h, y->h}, arr[3];
    gs_taskgraph_t *tg;
    double *a = malloc(17 * 13 * sizeof(double)), *b = malloc(17 * 13 * sizeof(double));
    staged.user = NULL;
    TX_OK(gs_array_map_overlap(&pos, x->h, d, GS_BOUNDARY_PERIODIC, 0, &arr[0]));
    TX_OK(gs_array_map_blocks(&add, 2, in2, 2, shape, chunks, &arr[1]));
    TX_OK(gs_array_map_overlap(&bad, x->h, d, GS_BOUNDARY_REFLECT, 0, &arr[2]));
    for (int k = 0; k < 2; k++) {
        TX_OK(gs_graph_lower(arr[k], GS_LOWER_DEFAULT, &tg));
        TX_OK(gs_chunkops_eval(&staged, ctx, tg, a, 17 * 13));
        TX_OK(gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, b, 17 * 13));
        gs_taskgraph_free(tg);
        for (int i = 0; i < 17 * 13; i++)
            cr_assert(a[i] == b[i], "kernel %d, element %d: staged %.17g, direct %.17g", k, i,
                      a[i], b[i]);
    }
    cr_assert(a[5 * 13 + 7] == x->v[5 * 13 + 7] + y->v[5 * 13 + 7], "map_blocks: %.17g",
              a[5 * 13 + 7]);
    TX_OK(gs_graph_lower(arr[2], GS_LOWER_DEFAULT, &tg));
    cr_assert_eq(gs_chunkops_eval(&staged, ctx, tg, a, 17 * 13), GS_ERR_TASK_FAILED);
    cr_assert(strstr(gs_last_error(), "gs_test_crash") != NULL, "message: %s", gs_last_error());
    gs_taskgraph_free(tg);
    for (int k = 0; k < 3; k++) gs_array_release(arr[k]);
    free(a);
    free(b);
}

/* CUDA C++ source kernels (issue 16): built and lowered anywhere, the source travels in the
 * USER layer (6-field body) or, for map_overlap, the STENCIL layer (9-field body), the CPU
 * evaluator refuses them with a clear error (GS_ERR_UNSUPPORTED). */
/* The layers of kind @a kind (named @a name unless NULL) of @a h's default graph, each
 * checked: the CUDA source "twice" is in its encoding, which decodes and re-encodes to the
 * same bytes, and no prefix of it decodes. Returns how many there were. */
static int cuda_layers_round_trip(gs_array_h h, gs_layer_kind_t kind, const char *name)
{
    gs_taskgraph_t *tg;
    int seen = 0;
    TX_OK(gs_graph_lower(h, GS_LOWER_DEFAULT, &tg));
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        const gs_layer_t *l = tg->layers[i];
        if (gs_layer_kind(l) != kind) continue;
        seen++;
        if (name != NULL) cr_assert_str_eq(gs_layer_name(l), name);
        gs_buf_t b, b2;
        gs_layer_t *dl;
        gs_buf_init(&b);
        gs_buf_init(&b2);
        TX_OK(gs_layer_encode(l, &b));
        cr_assert_not_null(memmem(b.data, b.len, "twice(gs_cuda_args_t a)", 23),
                           "the source is in the encoded layer");
        TX_OK(gs_layer_decode(b.data, b.len, &dl));
        TX_OK(gs_layer_encode(dl, &b2));
        cr_assert(b.len == b2.len && memcmp(b.data, b2.data, b.len) == 0);
        gs_layer_free(dl);
        for (size_t n = 0; n < b.len; n++) {
            gs_layer_t *t = NULL;
            cr_assert_neq(gs_layer_decode(b.data, n, &t), GS_OK, "prefix of %zu decoded", n);
        }
        gs_buf_cleanup(&b);
        gs_buf_cleanup(&b2);
    }
    gs_taskgraph_free(tg);
    return seen;
}

Test(graph_map, cuda_source_kernels_travel_in_the_layer_and_cpu_refuses_them)
{
    const int64_t shape[2] = {6, 5}, chunks[2] = {3, 5};
    const int d[2] = {1, 1};
    const char *src = "extern \"C\" __global__ void twice(gs_cuda_args_t a)\n"
                      "{ long long i = blockIdx.x * 256ll + threadIdx.x;\n"
                      "  if (i < a.n_out) a.out.data[i] = 2 * a.in[0].data[i]; }\n";
    tx_t *x = tx_uniform(5, 0.0, 1.0, 2, shape, chunks);
    gs_user_kernel_t k = {NULL, "twice", NULL, 0, src, 0};
    gs_user_kernel_t nosrc = {NULL, "twice", NULL, 0, "", 0};
    gs_user_kernel_t noname = {NULL, "", NULL, 0, src, 0};
    gs_array_h m, o = NULL;
    double out[30];
    cr_assert_eq(gs_array_map_blocks(&nosrc, 1, &x->h, 2, shape, chunks, &m), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_map_blocks(&noname, 1, &x->h, 2, shape, chunks, &m),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_map_overlap(&nosrc, x->h, d, GS_BOUNDARY_REFLECT, 0, &o),
                 GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_array_map_overlap(&noname, x->h, d, GS_BOUNDARY_REFLECT, 0, &o),
                 GS_ERR_INVALID_PARAM);
    cr_assert_null(o);
    TX_OK(gs_array_map_overlap(&k, x->h, d, GS_BOUNDARY_REFLECT, 0, &o));
    TX_OK(gs_array_map_blocks(&k, 1, &x->h, 2, shape, chunks, &m));
    cr_assert_eq(cuda_layers_round_trip(m, GS_LAYER_USER, NULL), 1);
    for (int i = 0; i < 30; i++) out[i] = -1;
    cr_assert_eq(eval(m, out), GS_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(gs_last_error(), "cuda kernel twice: backend cpu runs no CUDA"),
                       "%s", gs_last_error());
    gs_array_release(m);
    /* map_overlap: the source travels in the STENCIL layer (9-field body); CPU refuses it */
    cr_assert_eq(cuda_layers_round_trip(o, GS_LAYER_STENCIL, "map_overlap"), 1);
    for (int i = 0; i < 30; i++) out[i] = -1;
    cr_assert_eq(eval(o, out), GS_ERR_UNSUPPORTED);
    cr_assert_not_null(strstr(gs_last_error(), "cuda kernel twice: backend cpu runs no CUDA"),
                       "%s", gs_last_error());
    for (int i = 0; i < 30; i++) cr_assert(out[i] == -1, "a refused kernel wrote element %d", i);
    gs_array_release(o);
}
