/* Seed corpora for the fuzz targets, made with the real encoders:
 *
 *   fuzz_seeds OUTDIR
 *
 * writes OUTDIR/fuzz_msg/ (the payload of tests/proto's sample message of every type, each
 * sample also as a single frame, and one stream of all frames), OUTDIR/fuzz_layer/ (every layer
 * of a set of small lowered expressions covering every layer kind, leaf kind, reduction and
 * slicing pattern, fused and unfused) and OUTDIR/fuzz_graph_submit/ (those expressions as
 * GRAPH_SUBMIT payloads behind the mode byte 0, and a few builder-mode inputs). The directories
 * must not exist yet or may hold older seeds (files are overwritten). */
#include "graph/taskgraph.h"
#include "proto/msg.h"
#include "samples.h"

#include "common/alloc.h"
#include "common/buf.h"

#include <errno.h>
#include <gsched/array.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *outdir;

static void die(const char *what, gs_status_t st)
{
    fprintf(stderr, "fuzz_seeds: %s: %s: %s\n", what, gs_status_name(st), gs_last_error());
    exit(1);
}

#define OK(call) do { gs_status_t st__ = (call); if (st__ != GS_OK) die(#call, st__); } while (0)

static void mkdir_p(const char *path)
{
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
}

static void put(const char *target, const char *name, const void *p1, size_t n1, const void *p2, size_t n2)
{
    char path[4096];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s/%s", outdir, target, name);
    f = fopen(path, "wb");
    if (f == NULL || (n1 && fwrite(p1, 1, n1, f) != n1) || (n2 && fwrite(p2, 1, n2, f) != n2) ||
        fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* ---- messages ---- */

static void seed_messages(void)
{
    gs_buf_t stream;
    gs_buf_init(&stream);
    for (uint32_t type = GS_MSG_HELLO; type < GS_MSG_TYPE_MAX; type++) {
        gs_msg_t m;
        gs_buf_t f;
        char name[64];
        gs_buf_init(&f);
        sample_msg(type, &m);
        OK(gs_msg_encode(&m, &f));
        snprintf(name, sizeof name, "payload-%s", gs_msg_type_name(type));
        put("fuzz_msg", name, f.data + GS_PROTO_FRAME_HEADER, f.len - GS_PROTO_FRAME_HEADER, NULL, 0);
        snprintf(name, sizeof name, "frame-%s", gs_msg_type_name(type));
        put("fuzz_msg", name, f.data, f.len, NULL, 0);
        if (type != GS_MSG_DATA) OK(gs_buf_append(&stream, f.data, f.len));   /* DATA is 8 KB */
        gs_buf_cleanup(&f);
    }
    put("fuzz_msg", "stream-all", stream.data, stream.len, NULL, 0);
    gs_buf_cleanup(&stream);
}

/* ---- expressions ---- */

typedef struct expr {
    const char *name;
    gs_array_h a;
} expr_t;

#define NEXPR_MAX 64
static expr_t exprs[NEXPR_MAX];
static int nexpr;
static gs_array_h keep[256];
static int nkeep;

static gs_array_h K(gs_array_h a)
{
    if (nkeep == (int)(sizeof keep / sizeof keep[0])) die("too many arrays", GS_ERR_NO_RESOURCE);
    keep[nkeep++] = a;
    return a;
}

static void E(const char *name, gs_array_h a)
{
    if (nexpr == NEXPR_MAX) die("too many expressions", GS_ERR_NO_RESOURCE);
    exprs[nexpr].name = name;
    exprs[nexpr].a = a;
    nexpr++;
}

static gs_array_h normal(uint64_t seed, int nd, const int64_t *s, const int64_t *c)
{
    gs_array_h a;
    OK(gs_array_random_normal(seed, 0.0, 1.0, nd, s, c, &a));
    return K(a);
}

static gs_array_h unop(gs_unop_t op, gs_array_h x)
{
    gs_array_h a;
    OK(gs_array_unary(op, x, &a));
    return K(a);
}

static gs_array_h binop(gs_binop_t op, gs_array_h x, gs_array_h y)
{
    gs_array_h a;
    OK(gs_array_binary(op, x, y, &a));
    return K(a);
}

static gs_array_h binsc(gs_binop_t op, gs_array_h x, double s)
{
    gs_array_h a;
    OK(gs_array_binary_scalar(op, x, s, &a));
    return K(a);
}

static gs_array_h reduce(gs_redop_t op, gs_array_h x, int axis, int split_every, double ddof)
{
    gs_reduce_params_t p = {GS_REDUCE_FIELD_SPLIT_EVERY | GS_REDUCE_FIELD_DDOF, 0, split_every, ddof};
    gs_array_h a;
    if (axis != 99) {
        p.field_mask |= GS_REDUCE_FIELD_AXIS;
        p.axis = axis;
    }
    OK(gs_array_reduce(op, x, &p, &a));
    return K(a);
}

static void build_exprs(void)
{
    int64_t s2[2] = {10, 12}, c2[2] = {4, 5};
    int64_t s3[3] = {6, 7, 8}, c3[3] = {3, 4, 5};
    int64_t s1[1] = {20}, c1[1] = {6};
    int64_t sl[2] = {3, 4}, cl[2] = {2, 3};
    int64_t sb[1] = {12}, cb[1] = {5};
    double lit[12] = {1, -2, 3.5, 0, 7, 1e-3, -8, 9, 10, 11, -12, 0.25};
    gs_array_h x, y, u, ar, l, f, t, z;
    gs_slice_t s_neg[2] = {{-2, 0, -3, GS_SLICE_HAS_START}, {1, 0, 2, GS_SLICE_HAS_START}};
    gs_slice_t s_idx[2] = {{3, 0, 1, GS_SLICE_INDEX}, {2, 11, 3, GS_SLICE_HAS_START | GS_SLICE_HAS_STOP}};
    gs_slice_t s_1d[1] = {{3, 17, 2, GS_SLICE_HAS_START | GS_SLICE_HAS_STOP}};
    int perm3[3] = {2, 0, 1};

    x = normal(1, 2, s2, c2);
    E("sum-tree", reduce(GS_RED_SUM, binsc(GS_BINARY_ADD, binsc(GS_BINARY_MUL, x, 2.0), 1.0), 99, 2, 0));
    E("elementwise", unop(GS_UNARY_SQRT, unop(GS_UNARY_ABS, binop(GS_BINARY_SUB, x, unop(GS_UNARY_EXP, x)))));

    OK(gs_array_arange(0.5, 0.25, 1, s1, c1, &ar));
    K(ar);
    {
        gs_array_h sli;
        OK(gs_array_slice(ar, 1, s_1d, &sli));
        E("arange-slice", unop(GS_UNARY_LOG, binsc(GS_BINARY_ADD, K(sli), 3.0)));
    }

    OK(gs_array_from_host(lit, 2, sl, cl, &l));
    K(l);
    OK(gs_array_full(2.5, 2, sl, cl, &f));
    K(f);
    OK(gs_array_transpose(l, NULL, &t));
    K(t);
    E("literal-transpose", binop(GS_BINARY_POW, binop(GS_BINARY_MAXIMUM, t, unop(GS_UNARY_NEG, t)), binsc(GS_BINARY_DIV, t, 4.0)));
    E("literal-compare", binop(GS_BINARY_LE, l, f));

    OK(gs_array_random_uniform(7, -1.0, 3.0, 3, s3, c3, &u));
    K(u);
    E("var-axis1", reduce(GS_RED_VAR, u, 1, 2, 1.0));
    E("std-all", reduce(GS_RED_STD, u, 99, 3, 0.0));
    E("mean-axis-last", reduce(GS_RED_MEAN, u, -1, 4, 0.0));
    OK(gs_array_transpose(u, perm3, &z));
    E("transpose3-min", reduce(GS_RED_MIN, K(z), 0, 2, 0.0));

    y = normal(9, 2, s2, c2);
    E("argmax-axis0", reduce(GS_RED_ARGMAX, y, 0, 2, 0.0));
    E("argmin-all", reduce(GS_RED_ARGMIN, y, 99, 16, 0.0));
    E("max-axis1", reduce(GS_RED_MAX, y, 1, 2, 0.0));
    {
        gs_array_h a, b;
        OK(gs_array_slice(y, 2, s_neg, &a));
        E("slice-negative-step", binop(GS_BINARY_GT, K(a), binsc(GS_BINARY_MUL, a, 0.5)));
        OK(gs_array_slice(y, 2, s_idx, &b));
        E("slice-index", reduce(GS_RED_SUM, K(b), 0, 2, 0.0));
    }
    {
        /* different chunkings: the result is chunked at the union of the boundaries */
        gs_array_h p = normal(4, 1, sb, cb), q;
        int64_t cq[1] = {4};
        OK(gs_array_arange(0.0, 1.0, 1, sb, cq, &q));
        E("rechunk-union", binop(GS_BINARY_ADD, p, K(q)));
    }
    {
        /* broadcasting a row against a matrix */
        int64_t sr[2] = {1, 12}, cr[2] = {1, 5};
        gs_array_h row = normal(5, 2, sr, cr);
        E("broadcast", binop(GS_BINARY_MINIMUM, x, row));
    }
    {
        /* COPY layers: rechunk (one step and through intermediate grids), concatenate, stack */
        int64_t cs2[2] = {7, 6}, cc2[2] = {3, 4}, r2[2] = {5, -1}, cs1[1] = {200}, cc1[1] = {1};
        int64_t r1[1] = {-1};
        gs_array_h m = normal(6, 2, cs2, cc2), n1 = normal(7, 1, cs1, cc1), rc, rc1, cat, st;
        OK(gs_array_rechunk(m, r2, &rc));
        E("copy-rechunk", rc);
        OK(gs_array_rechunk(n1, r1, &rc1));
        E("copy-rechunk-steps", rc1);
        gs_array_h ops[3] = {m, K(binsc(GS_BINARY_ADD, m, 1.0)), m};
        OK(gs_array_concatenate(3, ops, 1, &cat));
        E("copy-concatenate", cat);
        OK(gs_array_stack(3, ops, 0, &st));
        E("copy-stack", st);
        K(m);
        K(n1);
    }
    {
        /* SCAN layers: totals, carries and scans; typed (int32 -> int64, float32) too */
        gs_array_h cs, cp, ci, c32, i32, f32;
        OK(gs_array_cumsum(x, 1, &cs));
        E("cumsum-axis1", cs);
        OK(gs_array_cumprod(u, 0, &cp));
        E("cumprod-axis0", cp);
        OK(gs_array_astype(x, GS_DTYPE_INT32, &i32));
        OK(gs_array_cumsum(K(i32), -2, &ci));
        E("cumsum-int32", ci);
        OK(gs_array_astype(x, GS_DTYPE_FLOAT32, &f32));
        OK(gs_array_cumulative(K(f32), GS_SCAN_SUM, 1, GS_DTYPE_FLOAT32, &c32));
        E("cumsum-float32", c32);
    }
    {
        /* SLAB and STENCIL layers: weights, and map_overlap with a CPU kernel and with CUDA
         * source; USER layers: map_blocks (1 and 2 inputs, CUDA source) and an elementwise
         * kernel fused with its producers and consumer. The library names a file that does
         * not exist: the fuzzers never load users' code (tests/fuzz/README.md). */
        static const char cu[] = "extern \"C\" __global__ void k(gs_cuda_args_t a) {}";
        static const double w3[9] = {0, 1, 0, 1, -4, 1, 0, 1, 0};
        static const uint8_t karg[4] = {1, 2, 3, 4};
        gs_user_kernel_t cpu = {"/nonexistent/libgsfuzz.so", "fuzz_kernel", karg, sizeof karg,
                                NULL, 0};
        gs_user_kernel_t cuda = {NULL, "k", NULL, 0, cu, 0};
        gs_user_kernel_t ew = {"/nonexistent/libgsfuzz.so", "fuzz_ew", NULL, 0, NULL,
                               GS_KERNEL_ELEMENTWISE};
        int r2[2] = {1, 1}, d2[2] = {2, 1};
        gs_array_h sten, ov, ovc, mb, mb2, mbc, fz, ins[2];
        OK(gs_array_stencil(x, w3, r2, GS_BOUNDARY_REFLECT, 0.0, &sten));
        E("stencil-reflect", sten);
        OK(gs_array_stencil(y, w3, r2, GS_BOUNDARY_CONSTANT, 2.5, &sten));
        E("stencil-constant", sten);
        OK(gs_array_map_overlap(&cpu, x, d2, GS_BOUNDARY_PERIODIC, 0.0, &ov));
        E("overlap-cpu", ov);
        OK(gs_array_map_overlap(&cuda, y, r2, GS_BOUNDARY_NONE, 0.0, &ovc));
        E("overlap-cuda", ovc);
        ins[0] = x;
        ins[1] = y;
        OK(gs_array_map_blocks(&cpu, 1, ins, 2, s2, c2, &mb));
        E("map-blocks", mb);
        OK(gs_array_map_blocks(&cpu, 2, ins, 2, s2, c2, &mb2));
        E("map-blocks-2", mb2);
        OK(gs_array_map_blocks(&cuda, 2, ins, 2, s2, c2, &mbc));
        E("map-blocks-cuda", mbc);
        ins[0] = binsc(GS_BINARY_MUL, x, 3.0);
        ins[1] = unop(GS_UNARY_ABS, y);
        OK(gs_array_map_blocks(&ew, 2, ins, 2, s2, c2, &fz));
        E("map-blocks-fused", reduce(GS_RED_SUM, binsc(GS_BINARY_ADD, K(fz), 1.0), 1, 2, 0.0));
    }
    {
        /* FILE layers: a raw file read (sliced: a mapped read), .npy and zarr writes */
        static const int64_t fs[2] = {9, 6}, fc[2] = {4, 4};
        static const gs_slice_t fsl[2] = {{7, 0, -2, GS_SLICE_HAS_START}, {1, 5, 1, GS_SLICE_HAS_START | GS_SLICE_HAS_STOP}};
        char path[4200];
        FILE *fp;
        gs_array_h rf, rs, wn, wz, wz3;
        snprintf(path, sizeof path, "%s/seed-array.raw", outdir);
        if ((fp = fopen(path, "wb")) == NULL) die("cannot write the raw seed file", GS_ERR_IO);
        for (int i = 0; i < 9 * 6 + 2; i++) fputc(i, fp);
        for (int i = 0; i < 9 * 6 * 4; i++) fputc(i * 7, fp);
        fclose(fp);
        OK(gs_array_from_raw(path, GS_DTYPE_FLOAT32, 2, fs, GS_ORDER_F, 2, fc, &rf));
        E("file-read-f32-forder", rf);
        OK(gs_array_slice(rf, 2, fsl, &rs));
        E("file-read-sliced", binsc(GS_BINARY_ADD, K(rs), 1.0));
        OK(gs_array_to_npy_expr(x, "/nonexistent/out.npy", "/nonexistent/out.npy.tmp", &wn));
        E("file-write-npy", wn);
        OK(gs_array_to_zarr_expr(x, "/nonexistent/out.zarr", "/nonexistent/out.zarr.tmp", 2,
                                 GS_ZARR_ZSTD, &wz));
        E("file-write-zarr2", wz);
        OK(gs_array_to_zarr_expr(u, "/nonexistent/out3.zarr", "/nonexistent/out3.zarr.tmp", 3,
                                 GS_ZARR_NONE, &wz3));
        E("file-write-zarr3", wz3);
        K(rf);
    }
}

static void seed_graphs(void)
{
    static const unsigned flag_sets[] = {GS_LOWER_DEFAULT, 0, GS_LOWER_CULL};
    static const char *const flag_names[] = {"fused", "plain", "cull"};
    for (int e = 0; e < nexpr; e++) {
        for (size_t fi = 0; fi < sizeof flag_sets / sizeof flag_sets[0]; fi++) {
            gs_taskgraph_t *tg;
            gs_buf_t lbuf, frame;
            gs_bytes_t *layers;
            size_t *off;
            gs_msg_t m;
            char name[128];
            static const uint8_t mode0 = 0;

            OK(gs_graph_lower(exprs[e].a, flag_sets[fi], &tg));
            gs_buf_init(&lbuf);
            gs_buf_init(&frame);
            layers = gs_calloc(tg->nlayers + 1, sizeof *layers, "seed layers");
            off = gs_calloc(tg->nlayers + 1, sizeof *off, "seed offsets");
            if (layers == NULL || off == NULL) die("out of memory", GS_ERR_NO_MEMORY);
            for (uint32_t i = 0; i < tg->nlayers; i++) {
                off[i] = lbuf.len;
                OK(gs_layer_encode(tg->layers[i], &lbuf));
                off[i + 1] = lbuf.len;
            }
            for (uint32_t i = 0; i < tg->nlayers; i++) {
                layers[i].data = lbuf.data + off[i];
                layers[i].len = off[i + 1] - off[i];
                snprintf(name, sizeof name, "%s-%s-layer%u", exprs[e].name, flag_names[fi], i);
                put("fuzz_layer", name, layers[i].data, layers[i].len, NULL, 0);
            }
            memset(&m, 0, sizeof m);
            m.type = GS_MSG_GRAPH_SUBMIT;
            m.u.graph_submit = (gs_msg_graph_submit_t){
                .client_ref = (uint64_t)e, .flags = 0, .nlayers = tg->nlayers, .layers = layers,
                .ntasks = tg->ntasks, .task_layer = tg->task_layer, .task_block = tg->task_block,
                .dep_off = tg->dep_off, .deps = tg->deps, .task_nbytes = tg->task_nbytes,
                .nexternals = tg->nexternals, .externals = (const uint64_t *)tg->externals,
                .noutputs = tg->noutputs, .outputs = tg->outputs};
            OK(gs_msg_encode(&m, &frame));
            snprintf(name, sizeof name, "%s-%s", exprs[e].name, flag_names[fi]);
            put("fuzz_graph_submit", name, &mode0, 1, frame.data + GS_PROTO_FRAME_HEADER,
                frame.len - GS_PROTO_FRAME_HEADER);
            if (fi == 0) {
                /* a graph submission is also a message */
                put("fuzz_msg", name, frame.data + GS_PROTO_FRAME_HEADER, frame.len - GS_PROTO_FRAME_HEADER,
                    NULL, 0);
            }
            gs_free(layers);
            gs_free(off);
            gs_buf_cleanup(&lbuf);
            gs_buf_cleanup(&frame);
            gs_taskgraph_free(tg);
        }
    }
}

/* Builder-mode inputs (fuzz_graph_submit.c fz_build): byte 0 odd, then flags, client_ref,
 * nlayers, ntasks (2 bytes), nexternals, noutputs, special, layer bytes, externals, tasks
 * (layer, block, nbytes/8, ndeps, deps...), outputs. */
static void seed_builder(void)
{
    static const uint8_t chain[] = {
        1, 0, 7, 1, 0, 4, 0, 1, 0x00, /* 1 layer, 4 tasks, 0 ext, 1 output, no defect */
        3, 0x93, 0x01, 0x02,           /* layer: 3 bytes */
        0, 0, 8, 0,                    /* task 0: no deps */
        0, 1, 8, 1, 1,                 /* task 1: dep task 0 */
        0, 2, 8, 2, 1, 3,              /* task 2: deps 0, 1 */
        0, 3, 8, 1, 5,                 /* task 3: dep 2 */
        3};                            /* output: task 3 */
    static const uint8_t ext[] = {
        1, 1, 9, 2, 0, 3, 2, 2, 0x00,  /* PERSIST, 2 layers, 3 tasks, 2 ext, 2 outputs */
        0, 2, 0x90, 0x90,              /* layers: empty, 2 bytes */
        5, 1, 5, 2,                    /* externals (5, 1), (5, 2) */
        0, 0, 1, 2, 0, 2,              /* task 0: deps ext 0, ext 1 */
        1, 0, 4, 1, 1,                 /* task 1: dep 0 */
        0, 1, 0xf9, 1, 0xf0,           /* task 2: huge size, self dependency */
        1, 2};
    static const uint8_t huge[] = {1, 0, 0, 1, 0, 2, 0, 0, 0xf8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    put("fuzz_graph_submit", "builder-chain", chain, sizeof chain, NULL, 0);
    put("fuzz_graph_submit", "builder-externals", ext, sizeof ext, NULL, 0);
    put("fuzz_graph_submit", "builder-huge-count", huge, sizeof huge, NULL, 0);
}

int main(int argc, char **argv)
{
    char path[4096];
    static const char *const targets[] = {"fuzz_msg", "fuzz_layer", "fuzz_graph_submit"};
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    outdir = argv[1];
    mkdir_p(outdir);
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", outdir, targets[i]);
        mkdir_p(path);
    }
    seed_messages();
    build_exprs();
    seed_graphs();
    seed_builder();
    for (int i = 0; i < nkeep; i++) gs_array_release(keep[i]);
    return 0;
}
