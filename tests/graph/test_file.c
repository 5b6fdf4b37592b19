/* Array files through the whole pipeline in one process: raw and .npy sources and the .npy
 * writer lowered, every layer round-tripped through the codec, run by the CPU backend's serial
 * evaluator (the same gs_chunkops_run_ktask a worker runs), compared with the bytes on disk.
 * Bad input: every failure names the file. */
#include "graph_test_util.h"
#include "graph_eval_util.h"
#include "graph_file_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/eval.h"
#include "common/buf.h"
#include "graph/graph_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static gs_chunkops_ctx_h ctx;
static char dir[64];

static void setup(void)
{
    ctx = gx_ctx_create();
    gx_tmpdir_make(dir, sizeof(dir), "gs-test-file");
}

static void teardown(void)
{
    tx_free_all();
    gx_ctx_destroy(ctx);
    gx_tmpdir_remove(dir);
}

TestSuite(graph_file, .init = setup, .fini = teardown, .timeout = 120);

static const char *path_of(const char *name)
{
    return gx_path(dir, name);
}

/* Evaluate @a h under @a flags into a new buffer; the status of the evaluation in *st_p. */
static double *eval_st(gs_array_h h, unsigned flags, gs_status_t *st_p, gs_taskgraph_t **tg_p)
{
    gs_taskgraph_t *tg;
    int64_t size = gs_array_size(h);
    double *out = calloc((size_t)(size ? size : 1), sizeof(double));
    tg = gx_lower(h, flags);
    *st_p = gs_chunkops_eval(&gs_chunkops_cpu_ops, ctx, tg, out, (size_t)size);
    if (tg_p) *tg_p = tg;
    else gs_taskgraph_free(tg);
    return out;
}

static double *eval(gs_array_h h, unsigned flags)
{
    gs_status_t st;
    double *out = eval_st(h, flags, &st, NULL);
    cr_assert_eq(st, GS_OK, "%s", gs_last_error());
    return out;
}

static const unsigned flag_sets[] = {GS_LOWER_DEFAULT, 0, GS_LOWER_CULL, GS_LOWER_SLICE_PUSHDOWN};

Test(graph_file, raw_c_and_f_order_read_back_exactly)
{
    const int64_t shape[3] = {7, 5, 6}, chunks[3] = {3, 2, 4};
    const int64_t n = 7 * 5 * 6;
    double *c = malloc(n * sizeof(double)), *f = malloc(n * sizeof(double));
    for (int64_t i = 0; i < 7; i++)
        for (int64_t j = 0; j < 5; j++)
            for (int64_t k = 0; k < 6; k++) {
                double v = i * 100 + j * 10 + k + 0.25;
                c[(i * 5 + j) * 6 + k] = v;
                f[(k * 5 + j) * 7 + i] = v;
            }
    /* 16 bytes of something before the data */
    uint8_t *buf = calloc(1, 16 + n * sizeof(double));
    memcpy(buf + 16, c, n * sizeof(double));
    gx_file_write(path_of("c.raw"), buf, 16 + n * sizeof(double));
    gx_file_write(path_of("f.raw"), f, n * sizeof(double));
    for (size_t fl = 0; fl < sizeof(flag_sets) / sizeof(flag_sets[0]); fl++) {
        gs_array_h a, b;
        TX_OK(gs_array_from_raw(path_of("c.raw"), GS_DTYPE_FLOAT64, 3, shape, GS_ORDER_C, 16,
                                chunks, &a));
        TX_OK(gs_array_from_raw(path_of("f.raw"), GS_DTYPE_FLOAT64, 3, shape, GS_ORDER_F, 0,
                                chunks, &b));
        double *ga = eval(a, flag_sets[fl]), *gb = eval(b, flag_sets[fl]);
        cr_assert(memcmp(ga, c, n * sizeof(double)) == 0, "C order differs (flags 0x%x)",
                  flag_sets[fl]);
        cr_assert(memcmp(gb, c, n * sizeof(double)) == 0, "F order differs (flags 0x%x)",
                  flag_sets[fl]);
        free(ga);
        free(gb);
        gs_array_release(a);
        gs_array_release(b);
    }
    free(buf);
    free(c);
    free(f);
}

/* A .npy header as numpy writes it (version 1.0, padded to 64 bytes). */
static size_t npy_header(uint8_t *h, const char *descr, int fortran, const char *shape)
{
    char dict[256];
    int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }",
                     descr, fortran ? "True" : "False", shape);
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    h[8] = (uint8_t)(total - 10);
    h[9] = (uint8_t)((total - 10) >> 8);
    memcpy(h + 10, dict, (size_t)n);
    memset(h + 10 + n, ' ', total - 10 - (size_t)n - 1);
    h[total - 1] = '\n';
    return total;
}

/* Each dtype is read as an array of that dtype (no conversion); its values, converted by
 * gs_array_astype afterwards, are the file's. */
Test(graph_file, npy_dtypes_read_as_their_own_dtype)
{
    uint8_t buf[1024];
    const int64_t chunks[2] = {2, 3};
    /* int32 little-endian, float32 big-endian, uint8 and bool, Fortran order float16 */
    struct { const char *name, *descr; int fortran; gs_dtype_t dt; } cases[] = {
        {"i4.npy", "<i4", 0, GS_DTYPE_INT32}, {"f4be.npy", ">f4", 0, GS_DTYPE_FLOAT32},
        {"u1.npy", "|u1", 0, GS_DTYPE_UINT8}, {"b1.npy", "|b1", 0, GS_DTYPE_BOOL},
        {"f2f.npy", "<f2", 1, GS_DTYPE_FLOAT16}, {"i8be.npy", ">i8", 0, GS_DTYPE_INT64},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t h = npy_header(buf, cases[c].descr, cases[c].fortran, "(3, 4)");
        uint8_t *d = buf + h;
        double want[12];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) {
                int e = cases[c].fortran ? j * 3 + i : i * 4 + j;   /* file position */
                int v = i * 4 + j;
                want[i * 4 + j] = v;
                if (!strcmp(cases[c].descr, "<i4")) {
                    int32_t x = v - 5;
                    want[i * 4 + j] = x;
                    memcpy(d + e * 4, &x, 4);
                } else if (!strcmp(cases[c].descr, ">f4")) {
                    float x = (float)v * 0.5f;
                    uint8_t b[4];
                    memcpy(b, &x, 4);
                    for (int k = 0; k < 4; k++) d[e * 4 + k] = b[3 - k];
                    want[i * 4 + j] = x;
                } else if (!strcmp(cases[c].descr, "|u1")) {
                    d[e] = (uint8_t)(200 + v);
                    want[i * 4 + j] = 200 + v;
                } else if (!strcmp(cases[c].descr, "|b1")) {
                    d[e] = (uint8_t)(v % 3 == 0);
                    want[i * 4 + j] = v % 3 == 0;
                } else if (!strcmp(cases[c].descr, "<f2")) {
                    /* v in 0..11 as half: exponent/mantissa by hand; 1.0 = 0x3c00 */
                    uint16_t x = v == 0 ? 0 : 0;
                    if (v > 0) {
                        int ex = 0;
                        while ((1 << (ex + 1)) <= v) ex++;
                        x = (uint16_t)(((ex + 15) << 10) | ((v - (1 << ex)) << (10 - ex)));
                    }
                    memcpy(d + e * 2, &x, 2);
                } else {
                    int64_t x = -((int64_t)v << 40);
                    uint8_t b[8];
                    memcpy(b, &x, 8);
                    for (int k = 0; k < 8; k++) d[e * 8 + k] = b[7 - k];
                    want[i * 4 + j] = (double)x;
                }
            }
        gx_file_write(path_of(cases[c].name), buf, h + 12 * gs_dtype_size(cases[c].dt));
        gs_array_h a, a64;
        TX_OK(gs_array_from_npy(path_of(cases[c].name), chunks, &a));
        cr_assert_eq(gs_array_dtype(a), (int)cases[c].dt, "%s read as %s", cases[c].descr,
                     gs_dtype_name((gs_dtype_t)gs_array_dtype(a)));
        TX_OK(gs_array_astype(a, GS_DTYPE_FLOAT64, &a64));
        double *got = eval(a64, GS_LOWER_DEFAULT);
        for (int i = 0; i < 12; i++)
            cr_assert_eq(got[i], want[i], "%s element %d: %g vs %g", cases[c].descr, i, got[i],
                         want[i]);
        free(got);
        gs_array_release(a64);
        gs_array_release(a);
    }
}

/* x[1:7:2, ::-1, 3] and its transpose over a raw file read only the kept elements: the file
 * layer's grid is the slice's, and the values are right. */
Test(graph_file, slices_of_a_file_read_only_what_they_keep)
{
    const int64_t shape[3] = {8, 6, 5}, chunks[3] = {3, 4, 5};
    double d[240];
    for (int i = 0; i < 240; i++) d[i] = i;
    gx_file_write(path_of("s.raw"), d, sizeof(d));
    gs_array_h a, s, t;
    TX_OK(gs_array_from_raw(path_of("s.raw"), GS_DTYPE_FLOAT64, 3, shape, GS_ORDER_C, 0, chunks,
                            &a));
    gs_slice_t sl[3] = {SL_RANGE(1, 7, 2), SL_STEP(-1), SL_IDX(3)};
    TX_OK(gs_array_slice(a, 3, sl, &s));
    TX_OK(gs_array_transpose(s, (int[]){1, 0}, &t));
    for (size_t fl = 0; fl < sizeof(flag_sets) / sizeof(flag_sets[0]); fl++) {
        gs_taskgraph_t *tg;
        gs_status_t st;
        double *got = eval_st(t, flag_sets[fl], &st, &tg);
        cr_assert_eq(st, GS_OK, "%s", gs_last_error());
        for (int j = 0; j < 6; j++)
            for (int i = 0; i < 3; i++)
                cr_assert_eq(got[j * 3 + i], d[((1 + 2 * i) * 6 + (5 - j)) * 5 + 3],
                             "flags 0x%x (%d, %d)", flag_sets[fl], j, i);
        if (flag_sets[fl] & GS_LOWER_SLICE_PUSHDOWN) {
            int found = 0;
            for (uint32_t l = 0; l < tg->nlayers; l++) {
                if (gs_layer_kind(tg->layers[l]) != GS_LAYER_FILE) continue;
                found = 1;
                cr_assert_eq(gs_layer_out_nbytes(tg->layers[l], 0) / 8 <= 18, 1);
                cr_assert_eq(gs_layer_nblocks(tg->layers[l]), gs_array_nchunks(t, 0) *
                             gs_array_nchunks(t, 1), "the file layer reads the slice's grid");
            }
            cr_assert(found);
        }
        gs_taskgraph_free(tg);
        free(got);
    }
    gs_array_release(t);
    gs_array_release(s);
    gs_array_release(a);
}

Test(graph_file, npy_written_by_the_workers_reads_back)
{
    const int64_t shape[2] = {9, 7}, chunks[2] = {4, 3};
    gs_array_h x, w, back;
    size_t n;
    TX_OK(gs_array_arange(0.5, 1.0, 2, shape, chunks, &x));
    TX_OK(gs_array_to_npy_expr(x, path_of("o.npy"), path_of("o.npy.tmp"), &w));
    double *size = eval(w, GS_LOWER_DEFAULT);
    uint8_t *bytes = gx_file_read(path_of("o.npy"), &n);
    cr_assert_eq((size_t)size[0], n);
    cr_assert_eq(access(path_of("o.npy.tmp"), F_OK), -1, "the temporary name is gone");
    cr_assert(memcmp(bytes, "\x93NUMPY\x01\x00", 8) == 0);
    cr_assert_eq((10 + bytes[8] + 256 * bytes[9]) % 64, 0);
    cr_assert_not_null(strstr((char *)bytes + 10, "'descr': '<f8', 'fortran_order': False, "
                                                  "'shape': (9,7), }"));
    size_t h = 10 + bytes[8] + 256 * bytes[9];
    cr_assert_eq(n, h + 63 * 8);
    for (int i = 0; i < 63; i++) {
        double v;
        memcpy(&v, bytes + h + i * 8, 8);
        cr_assert_eq(v, 0.5 + i);
    }
    TX_OK(gs_array_from_npy(path_of("o.npy"), (int64_t[]){5, 5}, &back));
    double *got = eval(back, GS_LOWER_DEFAULT);
    for (int i = 0; i < 63; i++) cr_assert_eq(got[i], 0.5 + i);
    free(got);
    free(size);
    free(bytes);
    gs_array_release(back);
    gs_array_release(w);
    gs_array_release(x);
}

static void expect_err(gs_status_t st, gs_status_t want, const char *needle)
{
    cr_assert_eq(st, want, "status %s, want %s (%s)", gs_status_string(st),
                 gs_status_string(want), gs_last_error());
    cr_assert_not_null(strstr(gs_last_error(), needle), "'%s' not in '%s'", needle,
                       gs_last_error());
}

Test(graph_file, bad_files_give_errors_naming_them)
{
    uint8_t buf[512];
    const int64_t chunks[2] = {2, 2}, shape[2] = {3, 4};
    gs_array_h a = NULL;
    size_t h;
    /* unreadable path */
    expect_err(gs_array_from_npy(path_of("missing.npy"), chunks, &a), GS_ERR_IO, "missing.npy");
    expect_err(gs_array_from_raw(path_of("missing.raw"), GS_DTYPE_FLOAT64, 2, shape, GS_ORDER_C,
                                 0, chunks, &a), GS_ERR_IO, "missing.raw");
    /* wrong magic */
    gx_file_write(path_of("magic.npy"), "NOTNUMPY and more bytes", 23);
    expect_err(gs_array_from_npy(path_of("magic.npy"), chunks, &a), GS_ERR_INVALID_PARAM,
               "magic.npy");
    /* unsupported dtype, named */
    h = npy_header(buf, "<c16", 0, "(3, 4)");
    gx_file_write(path_of("c16.npy"), buf, h + 12 * 16);
    expect_err(gs_array_from_npy(path_of("c16.npy"), chunks, &a), GS_ERR_UNSUPPORTED, "<c16");
    /* truncated: header says 12 elements, 11 present */
    h = npy_header(buf, "<f8", 0, "(3, 4)");
    memset(buf + h, 0, 11 * 8);
    gx_file_write(path_of("trunc.npy"), buf, h + 11 * 8);
    expect_err(gs_array_from_npy(path_of("trunc.npy"), chunks, &a), GS_ERR_IO, "trunc.npy is truncated");
    /* truncated header */
    gx_file_write(path_of("trunch.npy"), buf, 30);
    expect_err(gs_array_from_npy(path_of("trunch.npy"), chunks, &a), GS_ERR_IO, "trunch.npy");
    /* a file that shrinks after the array was made fails the reading task, naming it */
    memset(buf + h, 0, 12 * 8);
    gx_file_write(path_of("shrink.npy"), buf, h + 12 * 8);
    TX_OK(gs_array_from_npy(path_of("shrink.npy"), chunks, &a));
    cr_assert_eq(truncate(path_of("shrink.npy"), (off_t)h + 40), 0);
    gs_status_t st;
    free(eval_st(a, GS_LOWER_DEFAULT, &st, NULL));
    cr_assert_neq(st, GS_OK);
    cr_assert_not_null(strstr(gs_last_error(), "shrink.npy"), "%s", gs_last_error());
    cr_assert_not_null(strstr(gs_last_error(), "truncated"), "%s", gs_last_error());
    gs_array_release(a);
    /* bad arguments */
    expect_err(gs_array_from_raw(path_of("x"), GS_DTYPE_FLOAT64, 2, shape, GS_ORDER_C, -1,
                                 chunks, &a), GS_ERR_INVALID_PARAM, "offset");
}

Test(graph_file, failed_write_leaves_no_file_claiming_completion)
{
    const int64_t shape[1] = {10}, chunks[1] = {4};
    gs_array_h x, w;
    gs_status_t st;
    char sub[200];
    TX_OK(gs_array_arange(0, 1, 1, shape, chunks, &x));
    /* the temporary file's directory does not exist: every write fails */
    snprintf(sub, sizeof(sub), "%s/nodir/o.npy.tmp", dir);
    TX_OK(gs_array_to_npy_expr(x, path_of("o.npy"), sub, &w));
    free(eval_st(w, GS_LOWER_DEFAULT, &st, NULL));
    expect_err(st, GS_ERR_IO, "nodir/o.npy.tmp");
    cr_assert_eq(access(path_of("o.npy"), F_OK), -1, "no final file after a failed write");
    gs_array_release(w);
    gs_array_release(x);
}

/* A hostile FILE layer (a region outside the file) is refused by the decoder. */
Test(graph_file, decoder_refuses_a_region_outside_the_file)
{
    const int64_t shape[1] = {10}, chunks[1] = {4};
    double d[10] = {0};
    gs_array_h a;
    gs_taskgraph_t *tg;
    gs_buf_t b;
    gs_layer_t *l;
    gx_file_write(path_of("r.raw"), d, sizeof(d));
    TX_OK(gs_array_from_raw(path_of("r.raw"), GS_DTYPE_FLOAT64, 1, shape, GS_ORDER_C, 0, chunks,
                            &a));
    TX_OK(gs_graph_lower(a, GS_LOWER_DEFAULT, &tg));
    gs_buf_init(&b);
    TX_OK(gs_layer_encode(tg->layers[0], &b));
    /* the encoded fshape [10] is the byte pair 0x91 0x0a right after fdtype/flags/offset: find
     * the first 0x91 0x0a after the path and change it to 5 */
    int changed = 0;
    for (size_t i = b.len - 1; i > 1 && !changed; i--) {
        if (b.data[i - 1] == 0x91 && b.data[i] == 0x0a) {
            b.data[i] = 0x05;
            changed = 1;
        }
    }
    cr_assert(changed);
    cr_assert_eq(gs_layer_decode(b.data, b.len, &l), GS_ERR_PROTO);
    /* every truncation fails cleanly */
    for (size_t cut = 0; cut < b.len; cut++) cr_assert_neq(gs_layer_decode(b.data, cut, &l), GS_OK);
    gs_buf_cleanup(&b);
    gs_taskgraph_free(tg);
    gs_array_release(a);
}

/* ---- maps and shapes a peer may send (fuzz_layer reproducers:
 * tests/fuzz/corpus/fuzz_layer/file-*) ---- */

/* The read layer of a raw float64 file of @a nd axes @a shape in one chunk (v[i] = i), after
 * @a edit changed its spec, encoded and decoded as a worker receives it: the decode's status
 * in *st_p, the layer (NULL on failure). */
static gs_layer_t *raw_read_layer(int nd, const int64_t *shape, void (*edit)(gs__fspec_t *),
                                  gs_status_t *st_p)
{
    double d[64];
    int64_t n = 1;
    gs_array_h a;
    gs_layer_t *l;
    for (int i = 0; i < 64; i++) d[i] = i;
    for (int i = 0; i < nd; i++) n *= shape[i];
    cr_assert(n <= 64);
    gx_file_write(path_of("m.raw"), d, (size_t)n * sizeof(double));
    TX_OK(gs_array_from_raw(path_of("m.raw"), GS_DTYPE_FLOAT64, nd, shape, GS_ORDER_C, 0,
                            (const int64_t[]){64, 64, 64}, &a));
    l = gx_file_layer_edited(a, edit, st_p);
    gs_array_release(a);
    return l;
}

static void expect_refused(int nd, const int64_t *shape, void (*edit)(gs__fspec_t *),
                           const char *needle)
{
    gs_status_t st;
    gs_layer_t *l = raw_read_layer(nd, shape, edit, &st);
    cr_assert_eq(st, GS_ERR_PROTO, "%s: decoded", needle);
    cr_assert_null(l);
    cr_assert(strstr(gs_last_error(), needle) != NULL, "%s", gs_last_error());
}

/* Run block 0 of @a l (no inputs) on the CPU backend into @a out (@a n doubles). */
static void run_block0(gs_layer_t *l, double *out, size_t n)
{
    gs_ktask_t t;
    gs_chunkops_stream_h s;
    cr_assert_eq(gs_layer_out_nbytes(l, 0), n * sizeof(double));
    TX_OK(gs_layer_instantiate(l, 0, 0, NULL, out, &t));
    TX_OK(gs_chunkops_cpu_ops.stream_create(ctx, &s));
    TX_OK(gs_chunkops_run_ktask(&gs_chunkops_cpu_ops, ctx, s, &t));
    TX_OK(gs_chunkops_cpu_ops.sync(ctx, s));
    gs_chunkops_cpu_ops.stream_destroy(ctx, s);
}

/* the last address off + step * 39 of an axis of 40 overflowed int64 in the decoder's check
 * (undefined behaviour; UBSan aborted) */
static void edit_step_overflow(gs__fspec_t *f)
{
    f->fshape[0] = GS__MAX_ELEMENTS;
    f->map.step[0] = GS__MAX_ELEMENTS;
}

static void edit_step_overflow_negative(gs__fspec_t *f)
{
    f->fshape[0] = GS__MAX_ELEMENTS;
    f->map.step[0] = -GS__MAX_ELEMENTS;
    f->map.off[0] = GS__MAX_ELEMENTS - 1;
}

/* an empty file (one axis 0) passed the size check whatever its other axes: their strides
 * overflowed when a task was instantiated */
static void edit_empty_file_huge_axes(gs__fspec_t *f)
{
    f->fshape[1] = f->fshape[2] = GS__MAX_ELEMENTS;
}

/* zarr chunks of 2^30 x 2^30 x 2^30 elements: their volume overflowed in the check */
static void edit_zarr_chunk_volume(gs__fspec_t *f)
{
    f->fmt = GS_KFILE_ZARR;
    f->zver = 2;
    f->zsep = '.';
    f->zchunk[0] = f->zchunk[1] = f->zchunk[2] = (int64_t)1 << 30;
}

Test(graph_file, decoder_refuses_maps_and_shapes_whose_arithmetic_overflows)
{
    expect_refused(1, (int64_t[]){40}, edit_step_overflow, "outside the file");
    expect_refused(1, (int64_t[]){40}, edit_step_overflow_negative, "outside the file");
    expect_refused(3, (int64_t[]){0, 4, 4}, edit_empty_file_huge_axes, "file too large");
    expect_refused(3, (int64_t[]){0, 4, 4}, edit_zarr_chunk_volume, "zarr chunks of more than");
}

/* along an array axis of extent 1 any step in range was accepted (it moves nothing), but
 * the task's stride, 64 x step, overflowed; along an axis of extent 0 nothing is checked and
 * the task's base, stride x offset, overflowed */
static void edit_unit_axis_huge_step(gs__fspec_t *f)
{
    f->map.step[0] = GS__MAX_ELEMENTS;
}

static void edit_empty_axis_huge_offset(gs__fspec_t *f)
{
    f->map.off[0] = (int64_t)1 << 62;
    f->map.step[0] = INT64_MAX;
}

Test(graph_file, steps_and_offsets_that_move_nothing_are_not_applied)
{
    gs_status_t st;
    double out[64];
    gs_layer_t *l = raw_read_layer(2, (int64_t[]){1, 64}, edit_unit_axis_huge_step, &st);
    cr_assert_eq(st, GS_OK, "%s", gs_last_error());
    run_block0(l, out, 64);
    for (int j = 0; j < 64; j++) cr_assert_eq(out[j], (double)j, "element %d: %g", j, out[j]);
    gs_layer_free(l);
    l = raw_read_layer(3, (int64_t[]){0, 4, 4}, edit_empty_axis_huge_offset, &st);
    cr_assert_eq(st, GS_OK, "%s", gs_last_error());
    run_block0(l, out, 0);
    gs_layer_free(l);
}

/* The device path (slabs of rows through two staging buffers, copy_from_host, sync) run on
 * host memory: the CPU backend under another name takes it. 3000 x 1100 doubles are 26 MB:
 * two 16 MiB slabs, the second starting mid-array; C and Fortran order, and a slice. */
Test(graph_file, staged_reads_in_slabs_match_direct_reads)
{
    const int64_t shape[2] = {3000, 1100}, chunks[2] = {3000, 1100};
    const int64_t n = 3000 * 1100;
    gs_chunkops_ops_t staged = gs_chunkops_cpu_ops;
    double *c = malloc(n * sizeof(double)), *f = malloc(n * sizeof(double));
    staged.name = "cpu-staged";
    for (int64_t i = 0; i < 3000; i++)
        for (int64_t j = 0; j < 1100; j++) {
            c[i * 1100 + j] = (double)(i * 1100 + j);
            f[j * 3000 + i] = (double)(i * 1100 + j);
        }
    gx_file_write(path_of("big-c.raw"), c, n * sizeof(double));
    gx_file_write(path_of("big-f.raw"), f, n * sizeof(double));
    for (int order = 0; order < 2; order++) {
        gs_array_h a, s;
        gs_taskgraph_t *tg;
        double *out = malloc(n * sizeof(double));
        TX_OK(gs_array_from_raw(path_of(order ? "big-f.raw" : "big-c.raw"), GS_DTYPE_FLOAT64, 2,
                                shape, order ? GS_ORDER_F : GS_ORDER_C, 0, chunks, &a));
        TX_OK(gs_graph_lower(a, GS_LOWER_DEFAULT, &tg));
        TX_OK(gs_chunkops_eval(&staged, ctx, tg, out, (size_t)n));
        cr_assert(memcmp(out, c, n * sizeof(double)) == 0, "order %d differs", order);
        gs_taskgraph_free(tg);
        gs_slice_t sl[2] = {SL_RANGE(7, 2999, 2), SL_STEP(-3)};
        TX_OK(gs_array_slice(a, 2, sl, &s));
        TX_OK(gs_graph_lower(s, GS_LOWER_DEFAULT, &tg));
        TX_OK(gs_chunkops_eval(&staged, ctx, tg, out, (size_t)gs_array_size(s)));
        for (int64_t i = 0, k = 0; i < 1496; i++)
            for (int64_t j = 0; j < 367; j++, k++)
                cr_assert_eq(out[k], c[(7 + 2 * i) * 1100 + (1099 - 3 * j)], "order %d (%lld, %lld)",
                             order, (long long)i, (long long)j);
        gs_taskgraph_free(tg);
        gs_array_release(s);
        gs_array_release(a);
        free(out);
    }
    free(c);
    free(f);
}

/* A commit task run again after it succeeded (its worker was lost before reporting) leaves
 * the complete file alone and reports its size; with neither file it fails. */
Test(graph_file, a_repeated_commit_keeps_the_complete_file)
{
    const int64_t shape[1] = {50}, chunks[1] = {20};
    gs_array_h x, w;
    gs_taskgraph_t *tg;
    size_t n1, n2;
    TX_OK(gs_array_arange(1, 1, 1, shape, chunks, &x));
    TX_OK(gs_array_to_npy_expr(x, path_of("c.npy"), path_of("c.npy.tmp"), &w));
    double *size = eval(w, GS_LOWER_DEFAULT);
    uint8_t *before = gx_file_read(path_of("c.npy"), &n1);
    TX_OK(gs_graph_lower(w, GS_LOWER_DEFAULT, &tg));
    int found = 0;
    for (uint32_t l = 0; l < tg->nlayers; l++) {
        if (strcmp(gs_layer_name(tg->layers[l]), "file-commit") != 0) continue;
        double total = 50 * 8, out = 0;
        gs_chunk_ref_t in = {&total, 1, sizeof(double)};
        gs_ktask_t kt;
        TX_OK(gs_layer_instantiate(tg->layers[l], 0, 1, &in, &out, &kt));
        TX_OK(gs_chunkops_run_ktask(&gs_chunkops_cpu_ops, ctx, NULL, &kt));
        cr_assert_eq(out, size[0]);
        found = 1;
        /* neither the temporary nor the final file: an error naming the temporary name */
        cr_assert_eq(unlink(path_of("c.npy")), 0);
        cr_assert_neq(gs_chunkops_run_ktask(&gs_chunkops_cpu_ops, ctx, NULL, &kt), GS_OK);
        cr_assert_not_null(strstr(gs_last_error(), "c.npy.tmp"), "%s", gs_last_error());
        cr_assert_eq(access(path_of("c.npy"), F_OK), -1, "nothing renamed into place");
        gx_file_write(path_of("c.npy"), before, n1);
    }
    cr_assert(found);
    uint8_t *after = gx_file_read(path_of("c.npy"), &n2);
    cr_assert_eq(n1, n2);
    cr_assert(memcmp(before, after, n1) == 0);
    free(before);
    free(after);
    free(size);
    gs_taskgraph_free(tg);
    gs_array_release(w);
    gs_array_release(x);
}

/* Writes on the device path (chunk copied to the host first, results copied back): the CPU
 * backend under another name; .npy and zarr (v3, zstd) read back exactly. */
Test(graph_file, staged_writes_match)
{
    const int64_t shape[2] = {37, 23}, chunks[2] = {10, 8};
    gs_chunkops_ops_t staged = gs_chunkops_cpu_ops;
    gs_array_h x, w, back;
    gs_taskgraph_t *tg;
    double n, *got = malloc(37 * 23 * sizeof(double));
    staged.name = "cpu-staged";
    TX_OK(gs_array_arange(-3, 0.5, 2, shape, chunks, &x));
    for (int fmt = 0; fmt < 2; fmt++) {
        const char *p = path_of(fmt ? "sw.zarr" : "sw.npy");
        if (fmt) TX_OK(gs_array_to_zarr_expr(x, p, path_of("sw.tmp"), 3, GS_ZARR_ZSTD, &w));
        else TX_OK(gs_array_to_npy_expr(x, p, path_of("sw.tmp"), &w));
        TX_OK(gs_graph_lower(w, GS_LOWER_DEFAULT, &tg));
        TX_OK(gs_chunkops_eval(&staged, ctx, tg, &n, 1));
        gs_taskgraph_free(tg);
        cr_assert(fmt ? n == 12.0 : n > 37 * 23 * 8, "commit result %g", n);   /* 4 x 3 chunks */
        if (fmt) TX_OK(gs_array_from_zarr(p, chunks, &back));
        else TX_OK(gs_array_from_npy(p, chunks, &back));
        TX_OK(gs_graph_lower(back, GS_LOWER_DEFAULT, &tg));
        TX_OK(gs_chunkops_eval(&staged, ctx, tg, got, 37 * 23));
        gs_taskgraph_free(tg);
        for (int i = 0; i < 37 * 23; i++) cr_assert_eq(got[i], -3 + 0.5 * i, "fmt %d, %d", fmt, i);
        gs_array_release(back);
        gs_array_release(w);
    }
    gs_array_release(x);
    free(got);
}
