/* Zarr stores through the whole pipeline in one process (lowered, layers round-tripped through
 * the codec, run by the CPU backend's evaluator). The v2 and v3 stores read here are written
 * byte by byte by this file following the specifications (zarr-specs: v2 "Storage" and v3
 * "core" + the bytes/transpose/zstd/blosc codecs), compressed with libzstd and libblosc
 * directly; tests/integration/test_files.c checks against the zarr library itself. */
#include "graph_test_util.h"
#include "graph_eval_util.h"
#include "graph_file_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"
#include "graph/graph_internal.h"

#include <blosc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

static gs_chunkops_ctx_h ctx;
static char dir[64];

static void setup(void)
{
    ctx = gx_ctx_create();
    gx_tmpdir_make(dir, sizeof(dir), "gs-test-zarr");
}

static void teardown(void)
{
    tx_free_all();
    gx_ctx_destroy(ctx);
    gx_tmpdir_remove(dir);
}

TestSuite(graph_zarr, .init = setup, .fini = teardown, .timeout = 120);

static const char *at(const char *rel)
{
    return gx_path(dir, rel);
}


enum { C_NONE, C_ZSTD, C_BLOSC };

/* Encode a chunk of n doubles with codec c into *out (malloc'd); returns its length. */
static size_t encode(int c, const double *v, size_t n, void **out)
{
    size_t raw = n * sizeof(double);
    if (c == C_NONE) {
        *out = malloc(raw);
        memcpy(*out, v, raw);
        return raw;
    }
    if (c == C_ZSTD) {
        size_t cap = ZSTD_compressBound(raw);
        *out = malloc(cap);
        size_t r = ZSTD_compress(*out, cap, v, raw, 1);
        cr_assert(!ZSTD_isError(r));
        return r;
    }
    *out = malloc(raw + BLOSC_MAX_OVERHEAD);
    int r = blosc_compress_ctx(5, BLOSC_SHUFFLE, 8, raw, v, *out, raw + BLOSC_MAX_OVERHEAD,
                               "lz4", 0, 1);
    cr_assert(r > 0);
    return (size_t)r;
}

static double *eval_st(gs_array_h h, unsigned flags, gs_status_t *st_p)
{
    gs_taskgraph_t *tg;
    int64_t size = gs_array_size(h);
    double *out = calloc((size_t)(size ? size : 1), sizeof(double));
    tg = gx_lower(h, flags);
    *st_p = gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)size);
    gs_taskgraph_free(tg);
    return out;
}

static double *eval(gs_array_h h, unsigned flags)
{
    gs_status_t st;
    double *out = eval_st(h, flags, &st);
    cr_assert_eq(st, GS_OK, "%s", gs_last_error());
    return out;
}

/* Lower @a h (GS_LOWER_DEFAULT) and evaluate it by @a ops into @a out (@a n doubles). */
static void eval_into(const gs_chunkops_ops_t *ops, gs_array_h h, double *out, size_t n)
{
    gs_taskgraph_t *tg;
    TX_OK(gs_graph_lower(h, GS_LOWER_DEFAULT, &tg));
    TX_OK(gs_chunkops_eval(ops, ctx, tg, out, n));
    gs_taskgraph_free(tg);
}

/* The 7 x 5 array v[i][j] = 10 i + j + 0.5 in chunks of 3 x 2 (edge chunks padded with -1),
 * chunk (1, 1) left out (it reads as fill_value). */
static void write_store(const char *name, int version, int codec, int forder, char sep)
{
    char rel[128], key[64], meta[1024];
    static const char *v2comp[3] = {
        "null", "{\"id\": \"zstd\", \"level\": 1}",
        "{\"id\": \"blosc\", \"cname\": \"lz4\", \"clevel\": 5, \"shuffle\": 1, \"blocksize\": 0}"};
    static const char *v3comp[3] = {
        "", ", {\"name\": \"zstd\", \"configuration\": {\"level\": 1, \"checksum\": false}}",
        ", {\"name\": \"blosc\", \"configuration\": {\"cname\": \"lz4\", \"clevel\": 5, "
        "\"shuffle\": \"shuffle\", \"typesize\": 8, \"blocksize\": 0}}"};
    if (version == 2) {
        snprintf(meta, sizeof(meta),
                 "{\"zarr_format\": 2, \"shape\": [7, 5], \"chunks\": [3, 2], \"dtype\": \"<f8\", "
                 "\"compressor\": %s, \"fill_value\": \"NaN\", \"order\": \"%s\", \"filters\": "
                 "null, \"dimension_separator\": \"%c\"}", v2comp[codec], forder ? "F" : "C", sep);
        snprintf(rel, sizeof(rel), "%s/.zarray", name);
    } else {
        snprintf(meta, sizeof(meta),
                 "{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [7, 5], "
                 "\"data_type\": \"float64\", \"chunk_grid\": {\"name\": \"regular\", "
                 "\"configuration\": {\"chunk_shape\": [3, 2]}}, \"chunk_key_encoding\": "
                 "{\"name\": \"default\", \"configuration\": {\"separator\": \"%c\"}}, "
                 "\"fill_value\": \"NaN\", \"codecs\": [%s{\"name\": \"bytes\", "
                 "\"configuration\": {\"endian\": \"little\"}}%s], \"attributes\": {}}",
                 sep, forder ? "{\"name\": \"transpose\", \"configuration\": {\"order\": [1, 0]}}, "
                             : "", v3comp[codec]);
        snprintf(rel, sizeof(rel), "%s/zarr.json", name);
    }
    gx_file_put_str(dir, rel, meta);
    for (int ci = 0; ci < 3; ci++)
        for (int cj = 0; cj < 3; cj++) {
            double c[6];
            void *enc;
            size_t n;
            if (ci == 1 && cj == 1) continue;
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 2; b++) {
                    int i = ci * 3 + a, j = cj * 2 + b;
                    double v = i < 7 && j < 5 ? 10.0 * i + j + 0.5 : -1.0;
                    c[forder ? b * 3 + a : a * 2 + b] = v;
                }
            n = encode(codec, c, 6, &enc);
            if (version == 2) snprintf(key, sizeof(key), "%d%c%d", ci, sep, cj);
            else snprintf(key, sizeof(key), "c%c%d%c%d", sep, ci, sep, cj);
            snprintf(rel, sizeof(rel), "%s/%s", name, key);
            gx_file_put(dir, rel, enc, n);
            free(enc);
        }
}

static double want_v(int i, int j)
{
    return i >= 3 && i < 6 && j >= 2 && j < 4 ? NAN : 10.0 * i + j + 0.5;
}

static void check_full(const char *store, const int64_t *chunks)
{
    gs_array_h a;
    TX_OK(gs_array_from_zarr(at(store), chunks, &a));
    cr_assert_eq(gs_array_ndim(a), 2);
    double *got = eval(a, GS_LOWER_DEFAULT);
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 5; j++) {
            double w = want_v(i, j), g = got[i * 5 + j];
            cr_assert(isnan(w) ? isnan(g) : g == w, "%s (%d, %d): %g vs %g", store, i, j, g, w);
        }
    free(got);
    gs_array_release(a);
}

Test(graph_zarr, v2_and_v3_stores_read_with_every_codec_order_and_separator)
{
    const int64_t own[2] = {4, 3};   /* compute chunks unlike the zarr chunks */
    char name[64];
    for (int version = 2; version <= 3; version++)
        for (int codec = 0; codec < 3; codec++)
            for (int forder = 0; forder < 2; forder++)
                for (int s = 0; s < 2; s++) {
                    char sep = s ? '/' : '.';
                    snprintf(name, sizeof(name), "v%d-c%d-f%d-s%d", version, codec, forder, s);
                    write_store(name, version, codec, forder, sep);
                    check_full(name, NULL);
                    check_full(name, own);
                }
}

Test(graph_zarr, slices_read_only_the_chunks_they_touch)
{
    gs_array_h a, s;
    write_store("sl", 3, C_ZSTD, 0, '/');
    /* remove a chunk the slice does not touch, corrupt another it does not touch */
    cr_assert_eq(unlink(at("sl/c/0/0")), 0);
    gx_file_put_str(dir, "sl/c/2/2", "garbage");
    TX_OK(gs_array_from_zarr(at("sl"), NULL, &a));
    gs_slice_t sl[2] = {SL_RANGE(3, 6, 1), SL_RANGE(0, 2, 1)};   /* inside chunk row 1, col 0 */
    TX_OK(gs_array_slice(a, 2, sl, &s));
    double *got = eval(s, GS_LOWER_DEFAULT);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) cr_assert_eq(got[i * 2 + j], want_v(3 + i, j));
    free(got);
    gs_array_release(s);
    gs_array_release(a);
}

Test(graph_zarr, written_stores_read_back_exactly)
{
    const int64_t shape[3] = {9, 4, 7}, chunks[3] = {4, 4, 3};
    char name[64];
    gs_array_h x;
    TX_OK(gs_array_arange(0.25, 1.0, 3, shape, chunks, &x));
    for (int version = 2; version <= 3; version++)
        for (int codec = 0; codec < 3; codec++) {
            gs_array_h w, back;
            snprintf(name, sizeof(name), "out-v%d-c%d", version, codec);
            TX_OK(gs_array_to_zarr_expr(x, at(name), at("tmpdir"), version, codec, &w));
            double *n = eval(w, GS_LOWER_DEFAULT);
            cr_assert_eq(n[0], 3.0 * 1 * 3, "chunks written");
            free(n);
            cr_assert_eq(access(at("tmpdir"), F_OK), -1, "the temporary directory was renamed");
            cr_assert_eq(access(at(version == 2 ? "out-v2-c0/.zarray" : "out-v3-c0/zarr.json"),
                                F_OK), 0);
            TX_OK(gs_array_from_zarr(at(name), (int64_t[]){5, 3, 2}, &back));
            double *got = eval(back, GS_LOWER_DEFAULT);
            for (int i = 0; i < 9 * 4 * 7; i++) cr_assert_eq(got[i], 0.25 + i, "%s %d", name, i);
            free(got);
            gs_array_release(back);
            gs_array_release(w);
        }
    gs_array_release(x);
}

static void expect_fail(const char *store, gs_status_t want, const char *needle)
{
    gs_array_h a;
    gs_status_t st = gs_array_from_zarr(at(store), NULL, &a);
    if (st == GS_OK) {
        free(eval_st(a, GS_LOWER_DEFAULT, &st));
        gs_array_release(a);
    }
    cr_assert_eq(st, want, "%s: %s (%s)", store, gs_status_string(st), gs_last_error());
    cr_assert_not_null(strstr(gs_last_error(), needle), "'%s' not in '%s'", needle,
                       gs_last_error());
}

Test(graph_zarr, bad_stores_fail_naming_the_file)
{
    expect_fail("nothing", GS_ERR_IO, "nothing");
    /* corrupt zstd chunk */
    write_store("cz", 2, C_ZSTD, 0, '.');
    gx_file_put_str(dir, "cz/0.0", "not a zstd frame at all");
    expect_fail("cz", GS_ERR_IO, "cz/0.0");
    /* corrupt blosc chunk */
    write_store("cb", 3, C_BLOSC, 0, '/');
    gx_file_put_str(dir, "cb/c/0/1", "not blosc either, but long enough for a header");
    expect_fail("cb", GS_ERR_IO, "cb/c/0/1");
    /* metadata disagreeing with the chunk files: chunks [3, 2] claimed, files hold [2, 2] */
    write_store("dis", 2, C_NONE, 0, '.');
    {
        double c[4] = {0};
        gx_file_put(dir, "dis/2.1", c, sizeof(c));
    }
    expect_fail("dis", GS_ERR_IO, "dis/2.1");
    /* unsupported codec, dtype, malformed JSON */
    gx_file_put_str(dir, "gz/.zarray",
                    "{\"zarr_format\": 2, \"shape\": [2], \"chunks\": [2], \"dtype\": "
                    "\"<f8\", \"compressor\": {\"id\": \"gzip\"}, \"fill_value\": 0, "
                    "\"order\": \"C\", \"filters\": null}");
    expect_fail("gz", GS_ERR_UNSUPPORTED, "gzip");
    gx_file_put_str(dir, "c16/zarr.json",
                    "{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [2], "
                    "\"data_type\": \"complex128\", \"chunk_grid\": {\"name\": "
                    "\"regular\", \"configuration\": {\"chunk_shape\": [2]}}, "
                    "\"fill_value\": 0, \"codecs\": [{\"name\": \"bytes\"}]}");
    expect_fail("c16", GS_ERR_UNSUPPORTED, "complex128");
    gx_file_put_str(dir, "bad/.zarray", "{\"zarr_format\": 2, \"shape\": [2,");
    expect_fail("bad", GS_ERR_INVALID_PARAM, "bad/.zarray");
}

/* The device path for zarr (slabs ending at zarr chunk boundaries, two staging buffers) run on
 * host memory by the CPU backend under another name: 26 MB in one compute chunk, zarr chunks
 * of 700 x 500, whole and as a slice stepping backwards. */
Test(graph_zarr, staged_reads_in_slabs_match)
{
    const int64_t shape[2] = {3000, 1100}, zc[2] = {700, 500}, one[2] = {3000, 1100};
    gs_chunkops_ops_t staged = gs_chunkops_cpu_ops;
    gs_array_h x, w, a, s;
    double n, *out = malloc(3000 * 1100 * sizeof(double));
    staged.name = "cpu-staged";
    TX_OK(gs_array_arange(0, 1, 2, shape, zc, &x));
    TX_OK(gs_array_to_zarr_expr(x, at("big"), at("big.tmp"), 3, 1 /* zstd */, &w));
    eval_into(&gs_chunkops_cpu_ops, w, &n, 1);
    TX_OK(gs_array_from_zarr(at("big"), one, &a));
    eval_into(&staged, a, out, 3000 * 1100);
    for (int64_t i = 0; i < 3000 * 1100; i++) cr_assert_eq(out[i], (double)i, "%lld", (long long)i);
    /* backwards over every row: 2999 rows of 1100, two slabs walking the zarr chunks down */
    gs_slice_t rev[2] = {SL(2999, 0, -1, GS_SLICE_HAS_START), SL_ALL};
    TX_OK(gs_array_slice(a, 2, rev, &s));
    eval_into(&staged, s, out, (size_t)gs_array_size(s));
    for (int64_t i = 0; i < 2999; i++)
        for (int64_t j = 0; j < 1100; j++)
            cr_assert_eq(out[i * 1100 + j], (double)((2999 - i) * 1100 + j), "rev (%lld, %lld)",
                         (long long)i, (long long)j);
    gs_array_release(s);
    gs_slice_t sl[2] = {SL(2990, 0, -3, GS_SLICE_HAS_START), SL_RANGE(5, 1100, 2)};
    TX_OK(gs_array_slice(a, 2, sl, &s));
    eval_into(&staged, s, out, (size_t)gs_array_size(s));
    for (int64_t i = 0, k = 0; i < 997; i++)
        for (int64_t j = 0; j < 548; j++, k++)
            cr_assert_eq(out[k], (double)((2990 - 3 * i) * 1100 + 5 + 2 * j), "(%lld, %lld)",
                         (long long)i, (long long)j);
    gs_array_release(s);
    gs_array_release(a);
    gs_array_release(w);
    gs_array_release(x);
    free(out);
}

/* The device path for a zarr region too big for one page-locked buffer (fileio.c
 * GS__FIO_ZPIN_MAX, 64 MiB): decoded into host memory, then staged out in 16 MiB pieces through
 * two buffers in turn. One 3000 x 3000 float64 zarr chunk (72 MB) per compute chunk, codec
 * zstd (that path) and none (its chunk file read as a raw file through the 16 MiB staging),
 * whole and as a backwards slice. */
Test(graph_zarr, staged_reads_of_regions_over_the_pinned_limit_match)
{
    const int64_t shape[2] = {3000, 3000};
    gs_chunkops_ops_t staged = gs_chunkops_cpu_ops;
    double n, *out = malloc(3000 * 3000 * sizeof(double));
    staged.name = "cpu-staged";
    for (int codec = 0; codec < 2; codec++) {
        gs_array_h x, w, a, s;
        const char *name = codec ? "huge-zstd" : "huge-none";
        char tmp[64];
        snprintf(tmp, sizeof(tmp), "%s.tmp", name);
        TX_OK(gs_array_arange(0, 1, 2, shape, shape, &x));
        TX_OK(gs_array_to_zarr_expr(x, at(name), at(tmp), 3, codec, &w));
        eval_into(&gs_chunkops_cpu_ops, w, &n, 1);
        TX_OK(gs_array_from_zarr(at(name), NULL, &a));
        eval_into(&staged, a, out, 3000 * 3000);
        for (int64_t i = 0; i < 3000 * 3000; i++)
            if (out[i] != (double)i)
                cr_assert_fail("%s: element %lld is %g", name, (long long)i, out[i]);
        gs_slice_t rev[2] = {SL(2999, 0, -2, GS_SLICE_HAS_START), SL_RANGE(1, 3000, 3)};
        TX_OK(gs_array_slice(a, 2, rev, &s));
        eval_into(&staged, s, out, (size_t)gs_array_size(s));
        for (int64_t i = 0, k = 0; i < 1500; i++)
            for (int64_t j = 0; j < 1000; j++, k++)
                if (out[k] != (double)((2999 - 2 * i) * 3000 + 1 + 3 * j))
                    cr_assert_fail("%s rev (%lld, %lld): %g", name, (long long)i, (long long)j,
                                   out[k]);
        gs_array_release(s);
        gs_array_release(a);
        gs_array_release(w);
        gs_array_release(x);
    }
    free(out);
}

/* ---- maps a peer may send (fuzz_layer reproducers: tests/fuzz/corpus/fuzz_layer/file-zarr-*) */

/* The read layer of the 6 x 4 store "m" (v[i][j] = 4 i + j, zarr chunks 2 x 4), one task,
 * after @a edit changes its map; encoded and decoded again as a worker receives it. The
 * decode's status in *st_p; the decoded layer (NULL on failure). */
static gs_layer_t *zarr_read_layer(void (*edit)(gs__fspec_t *), gs_status_t *st_p)
{
    const int64_t shape[2] = {6, 4}, zc[2] = {2, 4};
    gs_array_h x, w, a;
    gs_layer_t *l;
    double n;
    if (access(at("m"), F_OK) != 0) {
        TX_OK(gs_array_arange(0, 1, 2, shape, zc, &x));
        TX_OK(gs_array_to_zarr_expr(x, at("m"), at("m.tmp"), 2, 0 /* none */, &w));
        eval_into(&gs_chunkops_cpu_ops, w, &n, 1);
        gs_array_release(w);
        gs_array_release(x);
    }
    TX_OK(gs_array_from_zarr(at("m"), shape, &a));
    l = gx_file_layer_edited(a, edit, st_p);
    gs_array_release(a);
    return l;
}

static void edit_row_step_zero(gs__fspec_t *f)
{
    f->map.step[0] = 0;   /* every row of the array reads file row 3 */
    f->map.off[0] = 3;
}

static void edit_two_file_axes_one_array_axis(gs__fspec_t *f)
{
    f->map.perm[1] = 0;   /* file axes 0 and 1 both follow array axis 0 (a diagonal) */
    f->map.off[1] = 0;
    f->map.step[1] = 0;
}

/* A step of 0 on the array's first axis divided by zero in the zarr reader (host path:
 * gs__zarr_prange; device path: the rows one zarr chunk spans), killing the worker with
 * SIGFPE. Now every row reads the one file row, on both paths. */
Test(graph_zarr, a_map_step_of_zero_reads_one_row_on_every_path)
{
    gs_chunkops_ops_t staged = gs_chunkops_cpu_ops;
    const gs_chunkops_ops_t *ops[2] = {&gs_chunkops_cpu_ops, &staged};
    gs_status_t st;
    gs_layer_t *l = zarr_read_layer(edit_row_step_zero, &st);
    staged.name = "cpu-staged";
    cr_assert_eq(st, GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_layer_nblocks(l), 1);
    cr_assert_eq(gs_layer_out_nbytes(l, 0), 24 * sizeof(double));
    for (int o = 0; o < 2; o++) {
        double out[24];
        gs_ktask_t t;
        gs_chunkops_stream_h s;
        memset(out, 0, sizeof(out));
        TX_OK(gs_layer_instantiate(l, 0, 0, NULL, out, &t));
        TX_OK(ops[o]->stream_create(ctx, &s));
        TX_OK(gs_chunkops_run_ktask(ops[o], ctx, s, &t));
        TX_OK(ops[o]->sync(ctx, s));
        ops[o]->stream_destroy(ctx, s);
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 4; j++)
                cr_assert_eq(out[i * 4 + j], 12.0 + j, "%s: (%d, %d) is %g", ops[o]->name, i, j,
                             out[i * 4 + j]);
    }
    gs_layer_free(l);
}

/* Two file axes following one array axis made the zarr reader walk a chunk's box along one
 * of them only: it read past the decoded chunk (heap overflow). Such a map is refused. */
Test(graph_zarr, a_map_reading_one_array_axis_twice_is_refused)
{
    gs_status_t st;
    gs_layer_t *l = zarr_read_layer(edit_two_file_axes_one_array_axis, &st);
    cr_assert_eq(st, GS_ERR_PROTO);
    cr_assert_null(l);
    cr_assert(strstr(gs_last_error(), "reads one array axis twice") != NULL, "%s",
              gs_last_error());
}
