/* Layers: codec round trips, truncation and corruption (decode is total), semantic checks of
 * decoded layers, instantiation (addressing, argument checks). Decoded corrupt layers that are
 * accepted are instantiated and run on the CPU backend: they must never read out of bounds. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chunkops/chunkops.h"
#include "common/alloc.h"
#include "common/buf.h"
#include "graph/graph_internal.h"
#include "graph/taskgraph.h"

#define OK(call) do { gs_status_t st__ = (call); \
    cr_assert_eq(st__, GS_OK, "%s: %s: %s", #call, gs_status_name(st__), gs_last_error()); } while (0)

/* ---- sample layers ---- */

static gs_array_h normal(int nd, const int64_t *s, const int64_t *c)
{
    gs_array_h a;
    OK(gs_array_random_normal(3, 0.0, 1.0, nd, s, c, &a));
    return a;
}

/* A graph with every layer kind: literal, fused store with slices/transposes/broadcast,
 * fused reduce over an axis, combine levels. */
static gs_taskgraph_t *sample_graph(unsigned flags)
{
    int64_t s[2] = {12, 10}, c[2] = {5, 4}, s1[1] = {10}, c1[1] = {3};
    double d[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    gs_array_h x = normal(2, s, c), lit, t, y, z, r, u;
    gs_slice_t sl[2] = {{-2, 0, -3, GS_SLICE_HAS_START}, {1, 0, 2, GS_SLICE_HAS_START}};
    gs_reduce_params_t p = {GS_REDUCE_FIELD_AXIS | GS_REDUCE_FIELD_SPLIT_EVERY, 0, 2, 0};
    OK(gs_array_from_host(d, 1, s1, c1, &lit));
    OK(gs_array_binary(GS_BINARY_MUL, x, lit, &y));
    OK(gs_array_slice(y, 2, sl, &z));
    OK(gs_array_transpose(z, NULL, &t));
    OK(gs_array_reduce(GS_RED_VAR, t, &p, &r));
    OK(gs_array_scalar_binary(GS_BINARY_SUB, 1.0, r, &u));
    gs_taskgraph_t *tg;
    OK(gs_graph_lower(u, flags, &tg));
    gs_array_release(x);
    gs_array_release(lit);
    gs_array_release(y);
    gs_array_release(z);
    gs_array_release(t);
    gs_array_release(r);
    gs_array_release(u);
    return tg;
}

typedef struct enc {
    uint8_t *data;
    size_t len;
} enc_t;

static enc_t encode(const gs_layer_t *l)
{
    gs_buf_t b;
    enc_t e;
    gs_buf_init(&b);
    OK(gs_layer_encode(l, &b));
    e.data = gs_buf_detach(&b, &e.len);
    return e;
}

/* ---- running decoded layers ---- */

static gs_chunkops_ctx_h ctx;
static gs_chunkops_stream_h stream;

static void setup(void)
{
    gs_chunkops_params_t p;
    memset(&p, 0, sizeof(p));
    OK(gs_chunkops_cpu_ops.ctx_create(&p, &ctx));
    OK(gs_chunkops_cpu_ops.stream_create(ctx, &stream));
}

static void teardown(void)
{
    gs_chunkops_cpu_ops.stream_destroy(ctx, stream);
    gs_chunkops_cpu_ops.ctx_destroy(ctx);
}

TestSuite(graph_layer, .init = setup, .fini = teardown, .timeout = 120);

#define RUN_CAP 4096   /* elements: larger blocks of corrupt layers are not run */

/* Instantiate block @a b of a (possibly corrupt but accepted) layer with inputs of the sizes it
 * asks for, then run it: under ASan any out-of-bounds access fails the test. */
static void exercise_block(const gs_layer_t *l, uint64_t b)
{
    gs_chunk_ref_t in[GS_KERNEL_MAX_COMBINE];
    double *bufs[GS_KERNEL_MAX_COMBINE] = {0};
    int n = gs_layer_ninputs(l, b);
    uint64_t ob = gs_layer_out_nbytes(l, b);
    gs_ktask_t *kt;
    if (n < 0 || ob > RUN_CAP * sizeof(double)) return;
    cr_assert_leq(n, GS_KERNEL_MAX_COMBINE);
    if (l->kind == GS_LAYER_FUSED) {
        gs__fres_t r;
        if (gs__fused_resolve(l, b, &r) != GS_OK) return;
        for (int i = 0; i < n; i++) {
            if (r.in_len[i] > RUN_CAP) goto out;
            bufs[i] = calloc((size_t)r.in_len[i] + 1, sizeof(double));
            in[i].data = bufs[i];
            in[i].len = r.in_len[i];
        }
    } else if (l->kind == GS_LAYER_COMBINE) {
        int64_t len = (int64_t)(ob / sizeof(double)) *
                      (l->u.c.finalize ? gs_redop_width((gs_redop_t)l->u.c.redop) : 1);
        for (int i = 0; i < n; i++) {
            bufs[i] = calloc((size_t)len + 1, sizeof(double));
            in[i].data = bufs[i];
            in[i].len = len;
        }
    }
    double *out = malloc(ob + 8);
    kt = malloc(sizeof(*kt));
    if (gs_layer_instantiate(l, b, n, in, out, kt) == GS_OK) {
        switch (kt->kind) {
        case GS_KTASK_FUSED:
            if (gs_kfused_validate(&kt->u.fused) == GS_OK)
                OK(gs_chunkops_cpu_ops.fused(ctx, stream, &kt->u.fused));
            break;
        case GS_KTASK_COMBINE:
            if (gs_kcombine_validate(&kt->u.combine) == GS_OK)
                OK(gs_chunkops_cpu_ops.combine(ctx, stream, &kt->u.combine));
            break;
        case GS_KTASK_HOST_DATA:
            cr_assert_eq((uint64_t)kt->u.host.len * sizeof(double), ob);
            memcpy(kt->u.host.out, kt->u.host.data, ob);
            break;
        default:
            cr_assert_fail("unexpected task kind %d", kt->kind);
        }
    }
    free(kt);
    free(out);
out:
    for (int i = 0; i < n; i++) free(bufs[i]);
}

static void exercise(const gs_layer_t *l)
{
    uint64_t nb = gs_layer_nblocks(l);
    for (uint64_t b = 0; b < nb && b < 4; b++) exercise_block(l, b);
    if (nb > 4) exercise_block(l, nb - 1);
    exercise_block(l, nb);   /* out of range: rejected */
    (void)gs_layer_name(l);
}

/* ---- round trips ---- */

Test(graph_layer, round_trip_preserves_every_layer_kind)
{
    int seen[GS_LAYER_KIND_COUNT] = {0};
    for (unsigned flags = 0; flags <= GS_LOWER_DEFAULT; flags++) {
        gs_taskgraph_t *tg = sample_graph(flags);
        for (uint32_t i = 0; i < tg->nlayers; i++) {
            const gs_layer_t *l = tg->layers[i];
            enc_t e = encode(l), e2;
            gs_layer_t *d;
            OK(gs_layer_decode(e.data, e.len, &d));
            e2 = encode(d);
            cr_assert_eq(e.len, e2.len);
            cr_assert(memcmp(e.data, e2.data, e.len) == 0);
            cr_assert_eq(gs_layer_kind(d), gs_layer_kind(l));
            cr_assert_str_eq(gs_layer_name(d), gs_layer_name(l));
            cr_assert_eq(gs_layer_nblocks(d), gs_layer_nblocks(l));
            for (uint64_t b = 0; b < gs_layer_nblocks(l); b++) {
                cr_assert_eq(gs_layer_ninputs(d, b), gs_layer_ninputs(l, b));
                cr_assert_eq(gs_layer_out_nbytes(d, b), gs_layer_out_nbytes(l, b));
            }
            seen[gs_layer_kind(l)]++;
            exercise(d);
            gs_layer_free(d);
            gs_free(e.data);
            gs_free(e2.data);
        }
        gs_taskgraph_free(tg);
    }
    cr_assert_gt(seen[GS_LAYER_FUSED], 0);
    cr_assert_gt(seen[GS_LAYER_COMBINE], 0);
    cr_assert_gt(seen[GS_LAYER_LITERAL], 0);
}

Test(graph_layer, encode_appends_to_the_buffer)
{
    gs_taskgraph_t *tg = sample_graph(GS_LOWER_DEFAULT);
    gs_buf_t b;
    gs_buf_init(&b);
    OK(gs_buf_append(&b, "xy", 2));
    OK(gs_layer_encode(tg->layers[0], &b));
    gs_layer_t *d;
    OK(gs_layer_decode(b.data + 2, b.len - 2, &d));
    cr_assert_eq(memcmp(b.data, "xy", 2), 0);
    gs_layer_free(d);
    gs_buf_cleanup(&b);
    gs_taskgraph_free(tg);
}

/* ---- hostile bytes ---- */

Test(graph_layer, decode_rejects_every_truncation)
{
    gs_taskgraph_t *tg = sample_graph(GS_LOWER_CULL);
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        enc_t e = encode(tg->layers[i]);
        for (size_t n = 0; n < e.len; n++) {
            gs_layer_t *d = (gs_layer_t *)(uintptr_t)0x1;
            uint8_t *copy = malloc(n ? n : 1);   /* exact size: ASan sees over-reads */
            memcpy(copy, e.data, n);
            gs_status_t st = gs_layer_decode(copy, n, &d);
            cr_assert_eq(st, GS_ERR_PROTO, "layer %u truncated to %zu of %zu: %s", i, n, e.len,
                         gs_status_name(st));
            cr_assert_eq(d, (gs_layer_t *)(uintptr_t)0x1);
            free(copy);
        }
        gs_free(e.data);
    }
    gs_taskgraph_free(tg);
}

Test(graph_layer, decode_survives_byte_flips)
{
    static const uint8_t masks[] = {0x01, 0x02, 0x08, 0x10, 0x40, 0x80, 0xff};
    int accepted = 0;
    for (unsigned flags = 0; flags <= GS_LOWER_DEFAULT; flags += GS_LOWER_FUSE) {
        gs_taskgraph_t *tg = sample_graph(flags);
        for (uint32_t i = 0; i < tg->nlayers; i++) {
            enc_t e = encode(tg->layers[i]);
            uint8_t *copy = malloc(e.len);
            for (size_t pos = 0; pos < e.len; pos++) {
                for (size_t m = 0; m < sizeof(masks); m++) {
                    gs_layer_t *d = NULL;
                    memcpy(copy, e.data, e.len);
                    copy[pos] ^= masks[m];
                    gs_status_t st = gs_layer_decode(copy, e.len, &d);
                    cr_assert(st == GS_OK || st == GS_ERR_PROTO, "flip at %zu: %s", pos,
                              gs_status_name(st));
                    if (st == GS_OK) {
                        accepted++;
                        exercise(d);
                        gs_layer_free(d);
                    }
                }
            }
            free(copy);
            gs_free(e.data);
        }
        gs_taskgraph_free(tg);
    }
    cr_assert_gt(accepted, 0);   /* flips in floats and seeds are legitimately accepted */
}

Test(graph_layer, decode_rejects_random_bytes)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    uint8_t buf[256];
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = (size_t)(iter % 256);
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = (uint8_t)(s >> 56);
        }
        if (n > 0) buf[0] = (uint8_t)(0x90 | (iter % 10));   /* plausible array header */
        if (n > 1) buf[1] = 0x01;                              /* version */
        if (n > 2) buf[2] = (uint8_t)(iter % 4);               /* kind */
        gs_layer_t *d = NULL;
        gs_status_t st = gs_layer_decode(buf, n, &d);
        cr_assert(st == GS_OK || st == GS_ERR_PROTO);
        if (st == GS_OK) {
            exercise(d);
            gs_layer_free(d);
        }
    }
}

/* ---- semantic checks on decode: hand-corrupted layers re-encoded ---- */

static gs_layer_t *first_layer_of_kind(gs_taskgraph_t *tg, int kind, int terminal)
{
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        gs_layer_t *l = tg->layers[i];
        if (l->kind != kind) continue;
        if (kind == GS_LAYER_FUSED && terminal >= 0 && l->u.f.terminal != terminal) continue;
        if (kind == GS_LAYER_FUSED && l->u.f.nleaves == 0) continue;
        return l;
    }
    cr_assert_fail("no layer of kind %d", kind);
    return NULL;
}

static void expect_decode_rejects(const gs_layer_t *l, const char *word)
{
    enc_t e = encode(l);
    gs_layer_t *d = NULL;
    gs_status_t st = gs_layer_decode(e.data, e.len, &d);
    cr_assert_eq(st, GS_ERR_PROTO, "decode returned %s", gs_status_name(st));
    cr_assert_null(d);
    cr_assert(strstr(gs_last_error(), word) != NULL, "message '%s' lacks '%s'", gs_last_error(), word);
    gs_free(e.data);
}

#define CORRUPT_FUSED(name, word, terminal, mutation)                                  \
    Test(graph_layer, name)                                                          \
    {                                                                                \
        gs_taskgraph_t *tg = sample_graph(GS_LOWER_CULL);                            \
        gs_layer_t *l = first_layer_of_kind(tg, GS_LAYER_FUSED, terminal);          \
        mutation;                                                                    \
        expect_decode_rejects(l, word);                                              \
        gs_taskgraph_free(tg);                                                       \
    }

CORRUPT_FUSED(rejects_program_stack_underflow, "underflow", -1, l->u.f.prog[0].op = GS_OP_ADD)
CORRUPT_FUSED(rejects_program_leaving_two_values, "one value", -1,
              { l->u.f.prog[l->u.f.nprog] = l->u.f.prog[0]; l->u.f.nprog++; })
CORRUPT_FUSED(rejects_program_reading_a_missing_leaf, "leaf", -1,
              { l->u.f.prog[0].op = GS_OP_LEAF; l->u.f.prog[0].arg = l->u.f.nleaves; })
CORRUPT_FUSED(rejects_unknown_opcode, "opcode", -1, l->u.f.prog[l->u.f.nprog - 1].op = GS_OP_COUNT)
CORRUPT_FUSED(rejects_empty_program, "program", -1, l->u.f.nprog = 0)
CORRUPT_FUSED(rejects_non_monotone_bounds, "monotone", -1,
              { l->grid.bounds[0][1] = l->grid.bounds[0][2] + 1; })
CORRUPT_FUSED(rejects_bounds_not_spanning_the_shape, "span", -1, l->grid.shape[0] += 1)
CORRUPT_FUSED(rejects_reduce_axis_out_of_range, "axis", GS_TERM_REDUCE, l->u.f.red_axis = l->grid.ndim)
CORRUPT_FUSED(rejects_unknown_terminal, "terminal", -1, l->u.f.terminal = 7)
CORRUPT_FUSED(rejects_unknown_leaf_kind, "leaf kind", -1, l->u.f.leaves[0].kind = GS_LEAF_KIND_COUNT)
CORRUPT_FUSED(rejects_leaf_map_axis_out_of_range, "axis", -1,
              l->u.f.leaves[0].map.perm[0] = l->grid.ndim)

Test(graph_layer, rejects_chunk_leaf_with_a_bad_source)
{
    gs_taskgraph_t *tg = sample_graph(GS_LOWER_CULL);   /* unfused: chunk leaves */
    gs_layer_t *l = NULL;
    for (uint32_t i = 0; i < tg->nlayers && l == NULL; i++)
        if (tg->layers[i]->kind == GS_LAYER_FUSED && tg->layers[i]->u.f.nsrc > 0) l = tg->layers[i];
    cr_assert_not_null(l);
    int32_t k = 0;
    while (l->u.f.leaves[k].kind != GS_LEAF_CHUNK) k++;
    l->u.f.leaves[k].src = l->u.f.nsrc;
    expect_decode_rejects(l, "source");
    l->u.f.leaves[k].src = 0;
    l->u.f.srcs[0].ndim = l->u.f.leaves[k].map.ndim + 1;   /* ndim mismatch */
    l->u.f.srcs[0].nchunks[l->u.f.srcs[0].ndim - 1] = 1;
    l->u.f.srcs[0].bounds[l->u.f.srcs[0].ndim - 1] = gs_calloc(2, sizeof(int64_t), "t");
    expect_decode_rejects(l, "source");
    gs_taskgraph_free(tg);
}

Test(graph_layer, rejects_combine_fan_in_below_two)
{
    gs_taskgraph_t *tg = sample_graph(GS_LOWER_DEFAULT);
    gs_layer_t *l = first_layer_of_kind(tg, GS_LAYER_COMBINE, -1);
    l->u.c.split_every = 1;
    expect_decode_rejects(l, "fan-in");
    gs_taskgraph_free(tg);
}

Test(graph_layer, rejects_literal_size_mismatch)
{
    gs_taskgraph_t *tg = sample_graph(GS_LOWER_DEFAULT);
    gs_layer_t *l = first_layer_of_kind(tg, GS_LAYER_LITERAL, -1);
    l->grid.shape[0] -= 1;
    l->grid.bounds[0][l->grid.nchunks[0]] -= 1;
    expect_decode_rejects(l, "literal");
    gs_taskgraph_free(tg);
}

/* An empty array's literal has empty blocks (3 x 0 in chunks of 2 x 1: two); it decodes, but
 * a peer cannot make the decoder allocate an offsets table of millions of empty blocks. */
Test(graph_layer, empty_literals_decode_with_a_bounded_number_of_blocks)
{
    static const double none[1] = {0};
    const int64_t small[2] = {3, 0}, big[2] = {70000, 0}, ones[2] = {1, 1}, ch[2] = {2, 1};
    gs_array_h h;
    gs_taskgraph_t *tg;
    gs_layer_t *d = NULL;
    OK(gs_array_from_host(none, 2, small, ch, &h));
    OK(gs_graph_lower(h, GS_LOWER_DEFAULT, &tg));
    gs_array_release(h);
    {
        enc_t e = encode(first_layer_of_kind(tg, GS_LAYER_LITERAL, -1));
        OK(gs_layer_decode(e.data, e.len, &d));
        cr_assert_eq(gs_grid_nblocks(&d->grid), 2);
        gs_layer_free(d);
        gs_free(e.data);
    }
    gs_taskgraph_free(tg);
    OK(gs_array_from_host(none, 2, big, ones, &h));
    OK(gs_graph_lower(h, GS_LOWER_DEFAULT, &tg));
    gs_array_release(h);
    expect_decode_rejects(first_layer_of_kind(tg, GS_LAYER_LITERAL, -1), "more blocks");
    gs_taskgraph_free(tg);
}

static enc_t good_bytes(void)
{
    gs_taskgraph_t *tg = sample_graph(GS_LOWER_DEFAULT);
    enc_t e = encode(first_layer_of_kind(tg, GS_LAYER_COMBINE, -1));
    gs_taskgraph_free(tg);
    return e;
}

/* Written as version 2; version 1 (no compact grid axes) still decodes; 0 and 3 are refused by
 * their version, 3 as a peer of a newer build. */
Test(graph_layer, rejects_unsupported_version)
{
    enc_t e = good_bytes();
    gs_layer_t *d = NULL;
    cr_assert_eq(e.data[1], 0x02);
    e.data[1] = 0x03;
    cr_assert_eq(gs_layer_decode(e.data, e.len, &d), GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "version") != NULL);
    cr_assert(strstr(gs_last_error(), "newer") != NULL, "%s", gs_last_error());
    e.data[1] = 0x00;
    cr_assert_eq(gs_layer_decode(e.data, e.len, &d), GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "version") != NULL);
    gs_free(e.data);
}

/* A version-1 layer (one written before the compact grid axis) is read as before. */
Test(graph_layer, reads_a_version_1_layer)
{
    enc_t e = good_bytes();
    gs_layer_t *d = NULL;
    e.data[1] = 0x01;
    cr_assert_eq(gs_layer_decode(e.data, e.len, &d), GS_OK, "%s", gs_last_error());
    cr_assert_eq(d->kind, GS_LAYER_COMBINE);
    gs_layer_free(d);
    gs_free(e.data);
}

Test(graph_layer, rejects_unknown_kinds_and_another_kind_s_body)
{
    enc_t e = good_bytes();
    gs_layer_t *d = NULL;
    e.data[2] = GS_LAYER_KIND_COUNT;
    cr_assert_eq(gs_layer_decode(e.data, e.len, &d), GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "kind") != NULL);
    /* COPY layers decode (tests/graph/test_copy.c), but not from another kind's body */
    e.data[2] = GS_LAYER_COPY;
    cr_assert_eq(gs_layer_decode(e.data, e.len, &d), GS_ERR_PROTO);
    gs_free(e.data);
}

Test(graph_layer, rejects_trailing_bytes)
{
    enc_t e = good_bytes();
    gs_layer_t *d = NULL;
    uint8_t *longer = malloc(e.len + 1);
    memcpy(longer, e.data, e.len);
    longer[e.len] = 0xc0;
    cr_assert_eq(gs_layer_decode(longer, e.len + 1, &d), GS_ERR_PROTO);
    cr_assert(strstr(gs_last_error(), "trailing") != NULL);
    free(longer);
    gs_free(e.data);
}

Test(graph_layer, decode_rejects_null_arguments)
{
    gs_layer_t *d;
    cr_assert_eq(gs_layer_decode(NULL, 4, &d), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_layer_decode("x", 1, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_layer_decode(NULL, 0, &d), GS_ERR_PROTO);
}

Test(graph_layer, decode_reports_allocation_failure)
{
    gs_taskgraph_t *tg = sample_graph(GS_LOWER_CULL);
    for (uint32_t i = 0; i < tg->nlayers; i++) {
        enc_t e = encode(tg->layers[i]);
        int done = 0;
        for (long k = 0; !done; k++) {
            gs_layer_t *d = NULL;
            gs_alloc_fail_after(k);
            gs_status_t st = gs_layer_decode(e.data, e.len, &d);
            gs_alloc_fail_after(-1);
            cr_assert(st == GS_OK || st == GS_ERR_NO_MEMORY, "k=%ld: %s", k, gs_status_name(st));
            if (st == GS_OK) {
                gs_layer_free(d);
                done = 1;
            }
        }
        gs_free(e.data);
    }
    gs_taskgraph_free(tg);
}

/* ---- instantiation ---- */

/* x = normal((10,10), chunks 5); y = x[::-1, 1::2] */
static gs_taskgraph_t *slice_graph(unsigned flags)
{
    int64_t s[2] = {10, 10}, c[2] = {5, 5};
    gs_array_h x = normal(2, s, c), y;
    gs_slice_t sl[2] = {{0, 0, -1, 0}, {1, 0, 2, GS_SLICE_HAS_START}};
    OK(gs_array_slice(x, 2, sl, &y));
    gs_taskgraph_t *tg;
    OK(gs_graph_lower(y, flags, &tg));
    gs_array_release(x);
    gs_array_release(y);
    return tg;
}

Test(graph_layer, instantiate_composes_slices_into_random_leaves)
{
    gs_taskgraph_t *tg = slice_graph(GS_LOWER_DEFAULT);
    gs_ktask_t kt;
    double out[16];
    cr_assert_eq(tg->nlayers, 1);
    /* block 0: rows 9..5, columns 1, 3 */
    OK(gs_layer_instantiate(tg->layers[0], 0, 0, NULL, out, &kt));
    cr_assert_eq(kt.kind, GS_KTASK_FUSED);
    cr_assert_eq(kt.u.fused.ndim, 2);
    cr_assert_eq(kt.u.fused.shape[0], 5);
    cr_assert_eq(kt.u.fused.shape[1], 2);
    cr_assert_eq(kt.u.fused.nleaves, 1);
    cr_assert_eq(kt.u.fused.leaves[0].kind, GS_LEAF_NORMAL_V3); /* the float64 default, version 3 */
    cr_assert_eq(kt.u.fused.leaves[0].base, 91);
    cr_assert_eq(kt.u.fused.leaves[0].stride[0], -10);
    cr_assert_eq(kt.u.fused.leaves[0].stride[1], 2);
    cr_assert_eq(kt.u.fused.leaves[0].seed, 3);
    cr_assert_eq(kt.u.fused.terminal, GS_TERM_STORE);
    cr_assert_eq(kt.u.fused.out, out);
    gs_taskgraph_free(tg);
}

Test(graph_layer, instantiate_addresses_the_input_chunk)
{
    gs_taskgraph_t *tg = slice_graph(GS_LOWER_CULL);   /* generator layer + slice layer */
    gs_ktask_t kt;
    double in[25], out[16];
    gs_chunk_ref_t ref = {in, 25, 200};
    uint64_t t = 4;   /* first slice task (after 4 generator tasks) */
    cr_assert_eq(tg->nlayers, 2);
    cr_assert_eq(tg->task_layer[t], 1);
    cr_assert_eq(tg->task_block[t], 0);
    cr_assert_eq(tg->dep_off[t + 1] - tg->dep_off[t], 1);
    cr_assert_eq(tg->task_block[tg->deps[tg->dep_off[t]]], 2);   /* chunk (1, 0) */
    OK(gs_layer_instantiate(tg->layers[1], 0, 1, &ref, out, &kt));
    cr_assert_eq(kt.u.fused.leaves[0].kind, GS_LEAF_CHUNK);
    cr_assert_eq(kt.u.fused.leaves[0].data, in);
    cr_assert_eq(kt.u.fused.leaves[0].data_len, 25);
    cr_assert_eq(kt.u.fused.leaves[0].base, 21);   /* local row 4, column 1 */
    cr_assert_eq(kt.u.fused.leaves[0].stride[0], -5);
    cr_assert_eq(kt.u.fused.leaves[0].stride[1], 2);
    gs_taskgraph_free(tg);
}

Test(graph_layer, instantiate_sets_argmax_index_mapping)
{
    int64_t s[2] = {10, 10}, c[2] = {5, 5};
    gs_array_h x = normal(2, s, c), r, q;
    gs_reduce_params_t p = {GS_REDUCE_FIELD_AXIS, 1, 0, 0};
    gs_taskgraph_t *tg;
    gs_ktask_t kt;
    double out[32];
    OK(gs_array_reduce(GS_RED_ARGMAX, x, NULL, &r));
    OK(gs_graph_lower(r, GS_LOWER_DEFAULT, &tg));
    OK(gs_layer_instantiate(tg->layers[0], 3, 0, NULL, out, &kt));
    cr_assert_eq(kt.u.fused.terminal, GS_TERM_REDUCE);
    cr_assert_eq(kt.u.fused.redop, GS_RED_ARGMAX);
    cr_assert_eq(kt.u.fused.red_axis, -1);
    cr_assert_eq(kt.u.fused.idx_base, 55);
    cr_assert_eq(kt.u.fused.idx_stride[0], 10);
    cr_assert_eq(kt.u.fused.idx_stride[1], 1);
    cr_assert_eq(gs_layer_out_nbytes(tg->layers[0], 3), 2 * sizeof(double));
    gs_taskgraph_free(tg);
    OK(gs_array_reduce(GS_RED_ARGMIN, x, &p, &q));
    OK(gs_graph_lower(q, GS_LOWER_DEFAULT, &tg));
    OK(gs_layer_instantiate(tg->layers[0], 3, 0, NULL, out, &kt));
    cr_assert_eq(kt.u.fused.red_axis, 1);
    cr_assert_eq(kt.u.fused.idx_base, 5);
    cr_assert_eq(gs_layer_out_nbytes(tg->layers[0], 3), 5 * 2 * sizeof(double));
    gs_taskgraph_free(tg);
    gs_array_release(q);
    gs_array_release(r);
    gs_array_release(x);
}

Test(graph_layer, instantiate_rejects_wrong_input_count)
{
    gs_taskgraph_t *tg = slice_graph(GS_LOWER_CULL);
    double in[25], out[16];
    gs_chunk_ref_t refs[2] = {{in, 25, 200}, {in, 25, 200}};
    gs_ktask_t kt;
    cr_assert_eq(gs_layer_instantiate(tg->layers[1], 0, 0, refs, out, &kt), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "expects 1 inputs") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_layer_instantiate(tg->layers[1], 0, 2, refs, out, &kt), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_layer_instantiate(tg->layers[0], 0, 1, refs, out, &kt), GS_ERR_INVALID_PARAM);
    gs_taskgraph_free(tg);
}

Test(graph_layer, instantiate_rejects_wrong_input_size)
{
    gs_taskgraph_t *tg = slice_graph(GS_LOWER_CULL);
    double in[25], out[16];
    gs_chunk_ref_t ref = {in, 24, 192};
    gs_ktask_t kt;
    cr_assert_eq(gs_layer_instantiate(tg->layers[1], 0, 1, &ref, out, &kt), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "24 elements, expected 25") != NULL, "%s", gs_last_error());
    ref.len = 25;
    ref.data = NULL;
    cr_assert_eq(gs_layer_instantiate(tg->layers[1], 0, 1, &ref, out, &kt), GS_ERR_INVALID_PARAM);
    gs_taskgraph_free(tg);
}

Test(graph_layer, instantiate_rejects_bad_combine_and_literal_inputs)
{
    gs_taskgraph_t *tg = sample_graph(GS_LOWER_DEFAULT);
    gs_layer_t *c = first_layer_of_kind(tg, GS_LAYER_COMBINE, -1);
    gs_layer_t *lit = first_layer_of_kind(tg, GS_LAYER_LITERAL, -1);
    double buf[256], out[256];
    gs_chunk_ref_t refs[GS_KERNEL_MAX_COMBINE];
    gs_ktask_t kt;
    int n = gs_layer_ninputs(c, 0);
    int64_t len = (int64_t)(gs_layer_out_nbytes(c, 0) / sizeof(double)) * (c->u.c.finalize ? 3 : 1);
    for (int i = 0; i < n + 1; i++) {
        refs[i].data = buf;
        refs[i].len = len;
    }
    OK(gs_layer_instantiate(c, 0, n, refs, out, &kt));
    cr_assert_eq(kt.kind, GS_KTASK_COMBINE);
    cr_assert_eq(kt.u.combine.ninputs, n);
    cr_assert_eq(gs_layer_instantiate(c, 0, n + 1, refs, out, &kt), GS_ERR_INVALID_PARAM);
    refs[n - 1].len = len + 1;
    cr_assert_eq(gs_layer_instantiate(c, 0, n, refs, out, &kt), GS_ERR_INVALID_PARAM);
    OK(gs_layer_instantiate(lit, 1, 0, NULL, out, &kt));
    cr_assert_eq(kt.kind, GS_KTASK_HOST_DATA);
    cr_assert_eq(kt.u.host.len, 3);
    cr_assert_eq(kt.u.host.data[0], 4.0);   /* block 1 of 1..10 chunked by 3 */
    cr_assert_eq(kt.u.host.out, out);
    cr_assert_eq(gs_layer_instantiate(lit, 1, 1, refs, out, &kt), GS_ERR_INVALID_PARAM);
    gs_taskgraph_free(tg);
}

Test(graph_layer, instantiate_rejects_out_of_range_block_and_null_output)
{
    gs_taskgraph_t *tg = slice_graph(GS_LOWER_DEFAULT);
    double out[16];
    gs_ktask_t kt;
    uint64_t nb = gs_layer_nblocks(tg->layers[0]);
    cr_assert_eq(gs_layer_instantiate(tg->layers[0], nb, 0, NULL, out, &kt), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_layer_instantiate(tg->layers[0], 0, 0, NULL, NULL, &kt), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_layer_instantiate(tg->layers[0], 0, 0, NULL, out, NULL), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_layer_ninputs(tg->layers[0], nb), -1);
    cr_assert_eq(gs_layer_out_nbytes(tg->layers[0], nb), 0);
    gs_taskgraph_free(tg);
}

Test(graph_layer, instantiate_rejects_a_leaf_crossing_a_chunk_boundary)
{
    gs_taskgraph_t *tg = slice_graph(GS_LOWER_CULL);
    gs_layer_t *l = tg->layers[1];
    double in[25], out[16];
    gs_chunk_ref_t ref = {in, 25, 200};
    gs_ktask_t kt;
    l->u.f.leaves[0].map.step[0] = -2;   /* rows 9, 7, 5, 3, 1: two chunks */
    cr_assert_eq(gs_layer_instantiate(l, 0, 1, &ref, out, &kt), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "chunk boundary") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_layer_ninputs(l, 0), -1);
    /* the same layer arriving over the wire is accepted structurally but never runs */
    enc_t e = encode(l);
    gs_layer_t *d;
    OK(gs_layer_decode(e.data, e.len, &d));
    cr_assert_eq(gs_layer_instantiate(d, 0, 1, &ref, out, &kt), GS_ERR_INVALID_PARAM);
    gs_layer_free(d);
    gs_free(e.data);
    gs_taskgraph_free(tg);
}

Test(graph_layer, instantiate_rejects_a_leaf_reading_outside_its_array)
{
    gs_taskgraph_t *tg = slice_graph(GS_LOWER_DEFAULT);
    gs_layer_t *l = tg->layers[0];
    double out[16];
    gs_ktask_t kt;
    l->u.f.leaves[0].map.off[0] = 10;   /* row 10 of a 10-row array */
    cr_assert_eq(gs_layer_instantiate(l, 0, 0, NULL, out, &kt), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "outside") != NULL, "%s", gs_last_error());
    l->u.f.leaves[0].map.off[0] = INT64_MAX;   /* arithmetic overflow is caught */
    cr_assert_eq(gs_layer_instantiate(l, 1, 0, NULL, out, &kt), GS_ERR_INVALID_PARAM);
    gs_taskgraph_free(tg);
}

/* ---- grid codec: regular axes in the compact [chunk] form ---- */

#include "graph/scan_int.h"
#include "proto/mp.h"

static void grid_set(gs_grid_t *g, int nd, const int64_t *shape, const int64_t *nch,
                     const int64_t *const *bounds)
{
    memset(g, 0, sizeof *g);
    g->ndim = nd;
    for (int a = 0; a < nd; a++) {
        g->shape[a] = shape[a];
        g->nchunks[a] = nch[a];
        g->bounds[a] = gs_malloc((size_t)(nch[a] + 1) * sizeof(int64_t), "test bounds");
        cr_assert_not_null(g->bounds[a]);
        memcpy(g->bounds[a], bounds[a], (size_t)(nch[a] + 1) * sizeof(int64_t));
    }
}

/* Encode @a g, decode it back, compare; returns the encoded size. */
static size_t grid_round_trip(const gs_grid_t *g)
{
    gs_buf_t b;
    gs_mp_writer_t w;
    gs_mp_reader_t r;
    gs_grid_t back;
    size_t len;
    gs_buf_init(&b);
    gs_mp_writer_init(&w, &b);
    gs__enc_grid(&w, g);
    cr_assert_eq(w.err, GS_OK);
    memset(&back, 0, sizeof back);
    gs_mp_reader_init(&r, b.data, b.len);
    cr_assert(gs__dec_grid(&r, &back), "decode: %s", gs_last_error());
    cr_assert(gs_mp_at_end(&r));
    cr_assert(gs__grid_equal(g, &back), "the decoded grid differs");
    gs_grid_cleanup(&back);
    len = b.len;
    gs_buf_cleanup(&b);
    return len;
}

Test(graph_layer, regular_axes_are_encoded_as_one_chunk_width)
{
    enum { N = 1000000 };
    gs_grid_t g;
    int64_t *big = gs_malloc((N + 1) * sizeof(int64_t), "test bounds");
    const int64_t irr[] = {0, 2, 5, 6}, last_small[] = {0, 4, 8, 10}, one[] = {0, 7}, zero[] = {0, 0};
    cr_assert_not_null(big);
    for (int64_t k = 0; k <= N; k++) big[k] = k;
    {
        const int64_t shape[] = {N, 10, 6}, nch[] = {N, 3, 3};
        const int64_t *const bounds[] = {big, last_small, irr};
        grid_set(&g, 3, shape, nch, bounds);
        cr_assert_lt(grid_round_trip(&g), 64, "a million regular chunks in a few bytes");
        gs_grid_cleanup(&g);
    }
    {
        const int64_t shape[] = {7, 0}, nch[] = {1, 1};
        const int64_t *const bounds[] = {one, zero};
        grid_set(&g, 2, shape, nch, bounds);
        (void)grid_round_trip(&g);   /* a zero-length axis keeps its explicit bounds */
        gs_grid_cleanup(&g);
    }
    {
        /* past the compact budget: explicit bounds, still the same grid */
        int64_t n = ((int64_t)1 << 24) + 1;
        int64_t *huge = gs_malloc((size_t)(n + 1) * sizeof(int64_t), "test bounds");
        cr_assert_not_null(huge);
        for (int64_t k = 0; k <= n; k++) huge[k] = k;
        const int64_t shape[] = {n}, nch[] = {n};
        const int64_t *const bounds[] = {huge};
        grid_set(&g, 1, shape, nch, bounds);
        cr_assert_gt(grid_round_trip(&g), (size_t)n);
        gs_grid_cleanup(&g);
        gs_free(huge);
    }
    gs_free(big);
}

/* [[shape...], [[chunk]...]] with the given values: decoding must fail with @a word. */
static void expect_compact_rejected(int nd, const int64_t *shape, const int64_t *chunk, const char *word)
{
    gs_buf_t b;
    gs_mp_writer_t w;
    gs_mp_reader_t r;
    gs_grid_t g;
    gs_buf_init(&b);
    gs_mp_writer_init(&w, &b);
    gs_mp_write_array(&w, 2);
    gs_mp_write_array(&w, (uint32_t)nd);
    for (int a = 0; a < nd; a++) gs_mp_write_i64(&w, shape[a]);
    gs_mp_write_array(&w, (uint32_t)nd);
    for (int a = 0; a < nd; a++) {
        gs_mp_write_array(&w, 1);
        gs_mp_write_i64(&w, chunk[a]);
    }
    memset(&g, 0, sizeof g);
    gs_mp_reader_init(&r, b.data, b.len);
    cr_assert_not(gs__dec_grid(&r, &g), "accepted a bad regular axis");
    cr_assert_neq(r.err, GS_OK);
    cr_assert_not_null(strstr(gs_last_error(), word), "error '%s' lacks '%s'", gs_last_error(), word);
    gs_grid_cleanup(&g);
    gs_buf_cleanup(&b);
}

Test(graph_layer, decode_rejects_bad_regular_axes_without_allocating_for_them)
{
    const int64_t s1[] = {10}, c0[] = {0}, cneg[] = {-3}, s0[] = {0}, c1[] = {1};
    const int64_t sbig[] = {(int64_t)1 << 40}, c11[] = {1, 1};
    const int64_t s2[] = {(int64_t)1 << 23, ((int64_t)1 << 23) + 1};
    expect_compact_rejected(1, s1, c0, "positive chunk");
    expect_compact_rejected(1, s1, cneg, "positive chunk");
    expect_compact_rejected(1, s0, c1, "positive chunk");
    expect_compact_rejected(1, sbig, c1, "too many chunks");
    expect_compact_rejected(2, s2, c11, "too many chunks");   /* the budget is per grid */
}
