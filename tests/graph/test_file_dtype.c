/* Typed array files through the whole pipeline in one process (CPU backend's serial evaluator,
 * every layer round-tripped through the codec): .npy, raw and zarr v2/v3 files of each dtype
 * gsched has are read as arrays of that dtype (no conversion), big-endian files byte-swapped,
 * and the writers write the array's own dtype with the right header or metadata. Values are
 * compared as bytes with what the test put in the file. Dtypes gsched lacks and files whose
 * size disagrees with their header are refused, naming the file. */
#include "graph_test_util.h"
#include "graph_eval_util.h"
#include "graph_file_util.h"

#include "chunkops/chunkops.h"
#include "chunkops/elem_dtype.h"
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
    gx_tmpdir_make(dir, sizeof(dir), "gs-test-fdt");
}

static void teardown(void)
{
    tx_free_all();
    gx_ctx_destroy(ctx);
    gx_tmpdir_remove(dir);
}

TestSuite(graph_file_dtype, .init = setup, .fini = teardown, .timeout = 120);

static const char *at(const char *rel)
{
    return gx_path(dir, rel);
}


static uint8_t *slurp(const char *rel, size_t *n_p)
{
    return gx_file_read(at(rel), n_p);
}

/* Evaluate @a h (elements of its dtype in the returned buffer) by @a ops under @a flags. */
static uint8_t *eval_ops(const gs_chunkops_ops_t *ops, gs_array_h h, unsigned flags,
                         gs_status_t *st_p)
{
    int64_t size = gs_array_size(h);
    double *out = calloc((size_t)(size ? size : 1), sizeof(double));
    gs_taskgraph_t *tg = gx_lower(h, flags);
    *st_p = gs_chunkops_eval(ops, ctx, tg, out, (size_t)size);
    gs_taskgraph_free(tg);
    return (uint8_t *)out;
}

static uint8_t *eval(gs_array_h h, unsigned flags)
{
    gs_status_t st;
    uint8_t *out = eval_ops(&gs_chunkops_cpu_ops, h, flags, &st);
    cr_assert_eq(st, GS_OK, "%s", gs_last_error());
    return out;
}

static const gs_dtype_t all_dt[] = {GS_DTYPE_FLOAT64, GS_DTYPE_FLOAT32, GS_DTYPE_FLOAT16,
                                    GS_DTYPE_INT32,   GS_DTYPE_INT64,   GS_DTYPE_UINT8,
                                    GS_DTYPE_BOOL};
#define NDT (sizeof(all_dt) / sizeof(all_dt[0]))

/* Element @a i of the test data of dtype @a dt, in host byte order, into @a out. */
static void elem(gs_dtype_t dt, int64_t i, uint8_t *out)
{
    switch (dt) {
    case GS_DTYPE_FLOAT64: { double v = (double)i * 0.25 - 3.0; memcpy(out, &v, 8); break; }
    case GS_DTYPE_FLOAT32: { float v = (float)i * 0.5f - 7.0f; memcpy(out, &v, 4); break; }
    case GS_DTYPE_FLOAT16: {
        uint16_t v = gs_f64_to_f16((double)(i - 20) * 0.375);
        memcpy(out, &v, 2);
        break;
    }
    case GS_DTYPE_INT32: { int32_t v = (int32_t)(i * 100003 - 5000000); memcpy(out, &v, 4); break; }
    case GS_DTYPE_INT64: { int64_t v = (i << 40) - 3; memcpy(out, &v, 8); break; }
    case GS_DTYPE_UINT8: out[0] = (uint8_t)(i * 7 + 3); break;
    default: out[0] = (uint8_t)(i % 3 == 0); break;
    }
}

static void swap_bytes(uint8_t *p, size_t isz)
{
    for (size_t k = 0; k < isz / 2; k++) {
        uint8_t t = p[k];
        p[k] = p[isz - 1 - k];
        p[isz - 1 - k] = t;
    }
}

static const char *descr(gs_dtype_t dt, int be)
{
    static char buf[8];
    static const char *code[] = {"f8", "f4", "f2", "i4", "i8", "u1", "b1"};
    snprintf(buf, sizeof(buf), "%c%s", gs_dtype_size(dt) == 1 ? '|' : be ? '>' : '<', code[dt]);
    return buf;
}

/* A .npy file as numpy writes it of @a rows x @a cols elements elem(dt, i) (i the C-order
 * index), in Fortran order when @a fortran, big-endian when @a be; also the expected C-order
 * host bytes into *want_p (malloc'd). */
static void write_npy(const char *rel, gs_dtype_t dt, int be, int fortran, int rows, int cols,
                      uint8_t **want_p)
{
    const size_t isz = gs_dtype_size(dt);
    char dict[256];
    uint8_t *buf, *want = malloc((size_t)rows * cols * isz);
    int n = snprintf(dict, sizeof(dict),
                     "{'descr': '%s', 'fortran_order': %s, 'shape': (%d, %d), }", descr(dt, be),
                     fortran ? "True" : "False", rows, cols);
    size_t h = (10 + (size_t)n + 1 + 63) / 64 * 64;
    buf = malloc(h + (size_t)rows * cols * isz);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)(h - 10);
    buf[9] = (uint8_t)((h - 10) >> 8);
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', h - 10 - (size_t)n - 1);
    buf[h - 1] = '\n';
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            int64_t c = (int64_t)i * cols + j, f = fortran ? (int64_t)j * rows + i : c;
            uint8_t *d = buf + h + (size_t)f * isz;
            elem(dt, c, want + (size_t)c * isz);
            memcpy(d, want + (size_t)c * isz, isz);
            if (be) swap_bytes(d, isz);
        }
    gx_file_put(dir, rel, buf, h + (size_t)rows * cols * isz);
    free(buf);
    *want_p = want;
}

/* Every dtype, both byte orders, C and Fortran order: read as that dtype, exactly; written
 * back by the workers as little-endian C order with numpy's descr; that file reads back. */
Test(graph_file_dtype, npy_round_trips_per_dtype_and_byte_order)
{
    gs_chunkops_ops_t staged = gs_chunkops_cpu_ops;
    staged.name = "cpu-staged";
    for (size_t d = 0; d < NDT; d++)
        for (int be = 0; be < 2; be++)
            for (int fo = 0; fo < 2; fo++) {
                const gs_dtype_t dt = all_dt[d];
                const size_t isz = gs_dtype_size(dt);
                char rel[64], out[96], tmp[96];
                uint8_t *want, *got, *file;
                gs_array_h a, w, back;
                size_t n;
                snprintf(rel, sizeof(rel), "%s-%d-%d.npy", gs_dtype_name(dt), be, fo);
                write_npy(rel, dt, be, fo, 11, 7, &want);
                TX_OK(gs_array_from_npy(at(rel), (int64_t[]){4, 3}, &a));
                cr_assert_eq(gs_array_dtype(a), (int)dt, "%s read as %s", rel,
                             gs_dtype_name((gs_dtype_t)gs_array_dtype(a)));
                got = eval(a, GS_LOWER_DEFAULT);
                cr_assert(memcmp(got, want, 77 * isz) == 0, "%s: values differ", rel);
                free(got);
                /* the writers write the array's own dtype */
                snprintf(out, sizeof(out), "out-%s", rel);
                snprintf(tmp, sizeof(tmp), "out-%s.tmp", rel);
                TX_OK(gs_array_to_npy_expr(a, at(out), at(tmp), &w));
                /* big-endian cases write through the device path's staging */
                gs_status_t wst;
                double *size = (double *)eval_ops(be ? &staged : &gs_chunkops_cpu_ops, w,
                                                  GS_LOWER_DEFAULT, &wst);
                cr_assert_eq(wst, GS_OK, "%s", gs_last_error());
                file = slurp(out, &n);
                size_t h = 10 + file[8] + 256u * file[9];
                cr_assert_eq((size_t)size[0], n);
                cr_assert_eq(n, h + 77 * isz, "%s: %zu bytes", out, n);
                char expect[96];
                snprintf(expect, sizeof(expect), "{'descr': '%s', 'fortran_order': False, "
                         "'shape': (11,7), }", descr(dt, 0));
                cr_assert_not_null(strstr((char *)file + 10, expect), "%s: %.*s", out, (int)h - 10,
                                   (char *)file + 10);
                cr_assert(memcmp(file + h, want, 77 * isz) == 0, "%s: data", out);
                TX_OK(gs_array_from_npy(at(out), (int64_t[]){5, 5}, &back));
                cr_assert_eq(gs_array_dtype(back), (int)dt);
                got = eval(back, GS_LOWER_DEFAULT);
                cr_assert(memcmp(got, want, 77 * isz) == 0, "%s: read back", out);
                free(got);
                free(size);
                free(file);
                free(want);
                gs_array_release(back);
                gs_array_release(w);
                gs_array_release(a);
            }
}

/* Raw files are the host's byte order: each dtype reads as itself, and a region of a larger
 * file (offset, trailing bytes) is fine for raw. */
Test(graph_file_dtype, raw_files_read_in_their_dtype)
{
    for (size_t d = 0; d < NDT; d++) {
        const gs_dtype_t dt = all_dt[d];
        const size_t isz = gs_dtype_size(dt);
        uint8_t buf[16 + 60 * 8 + 5], *got;
        gs_array_h a;
        memset(buf, 0xee, sizeof(buf));
        for (int i = 0; i < 60; i++) elem(dt, i, buf + 16 + i * isz);
        gx_file_put(dir, "r.raw", buf, 16 + 60 * isz + 5);
        TX_OK(gs_array_from_raw(at("r.raw"), dt, 3, (int64_t[]){3, 4, 5}, GS_ORDER_C, 16,
                                (int64_t[]){2, 3, 2}, &a));
        cr_assert_eq(gs_array_dtype(a), (int)dt);
        got = eval(a, GS_LOWER_DEFAULT);
        cr_assert(memcmp(got, buf + 16, 60 * isz) == 0, "%s", gs_dtype_name(dt));
        free(got);
        gs_array_release(a);
    }
}

/* gs_array_from_raw_ex: big-endian raw files (NumPy's arr.astype('>i4').tofile()) of every
 * dtype, C and Fortran order, read as the values, exactly, under every set of lowering flags
 * and through a strided slice (which reads only the kept elements' bytes); LITTLE and NATIVE
 * read the host's order; a bad byte order is refused naming the file, nothing written. */
Test(graph_file_dtype, raw_files_in_either_byte_order)
{
    for (size_t d = 0; d < NDT; d++)
        for (int fo = 0; fo < 2; fo++) {
            const gs_dtype_t dt = all_dt[d];
            const size_t isz = gs_dtype_size(dt);
            const int R = 9, C = 7;
            uint8_t le[9 * 7 * 8], be[8 + 9 * 7 * 8], want[9 * 7 * 8], *got;
            gs_array_h a, l, n, sl;
            /* element (i, j) = elem(dt, i * C + j) at file position C- or F-order */
            for (int i = 0; i < R; i++)
                for (int j = 0; j < C; j++) {
                    const int c = i * C + j, f = fo ? j * R + i : c;
                    elem(dt, c, want + (size_t)c * isz);
                    memcpy(le + (size_t)f * isz, want + (size_t)c * isz, isz);
                    memcpy(be + 8 + (size_t)f * isz, want + (size_t)c * isz, isz);
                    swap_bytes(be + 8 + (size_t)f * isz, isz);
                }
            memset(be, 0xab, 8);   /* an 8-byte prefix: offset 8 */
            gx_file_put(dir, "be.raw", be, 8 + (size_t)R * C * isz);
            gx_file_put(dir, "le.raw", le, (size_t)R * C * isz);
            const gs_order_t ord = fo ? GS_ORDER_F : GS_ORDER_C;
            TX_OK(gs_array_from_raw_ex(at("be.raw"), dt, GS_BYTEORDER_BIG, 2, (int64_t[]){R, C},
                                       ord, 8, (int64_t[]){4, 3}, &a));
            TX_OK(gs_array_from_raw_ex(at("le.raw"), dt, GS_BYTEORDER_LITTLE, 2,
                                       (int64_t[]){R, C}, ord, 0, (int64_t[]){2, 5}, &l));
            TX_OK(gs_array_from_raw_ex(at("le.raw"), dt, GS_BYTEORDER_NATIVE, 2,
                                       (int64_t[]){R, C}, ord, 0, (int64_t[]){5, 2}, &n));
            cr_assert_eq(gs_array_dtype(a), (int)dt);
            for (unsigned flags = 0; flags <= GS_LOWER_DEFAULT; flags++) {
                got = eval(a, flags);
                cr_assert(memcmp(got, want, (size_t)R * C * isz) == 0,
                          "big-endian %s order %d flags 0x%x", gs_dtype_name(dt), fo, flags);
                free(got);
            }
            got = eval(l, GS_LOWER_DEFAULT);
            cr_assert(memcmp(got, want, (size_t)R * C * isz) == 0, "little %s", gs_dtype_name(dt));
            free(got);
            got = eval(n, GS_LOWER_DEFAULT);
            cr_assert(memcmp(got, want, (size_t)R * C * isz) == 0, "native %s", gs_dtype_name(dt));
            free(got);
            /* a[1::3, ::-2]: rows 1, 4, 7, columns 6, 4, 2, 0 */
            gs_slice_t sls[2] = {GS_SLICE_FROM(1, 3), GS_SLICE_STEP(-2)};
            TX_OK(gs_array_slice(a, 2, sls, &sl));
            got = eval(sl, GS_LOWER_DEFAULT);
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 4; j++) {
                    const int c = (1 + 3 * i) * C + (6 - 2 * j);
                    cr_assert(memcmp(got + (size_t)(i * 4 + j) * isz, want + (size_t)c * isz,
                                     isz) == 0,
                              "slice of big-endian %s order %d: element (%d, %d)",
                              gs_dtype_name(dt), fo, i, j);
                }
            free(got);
            gs_array_release(sl);
            gs_array_release(n);
            gs_array_release(l);
            gs_array_release(a);
        }
    gs_array_h a = (gs_array_h)(uintptr_t)0x1;
    cr_assert_eq(gs_array_from_raw_ex(at("le.raw"), GS_DTYPE_UINT8, (gs_byteorder_t)3, 1,
                                      (int64_t[]){4}, GS_ORDER_C, 0, (int64_t[]){2}, &a),
                 GS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(gs_last_error(), "le.raw"), "%s", gs_last_error());
    cr_assert_not_null(strstr(gs_last_error(), "byte order"), "%s", gs_last_error());
    cr_assert_eq(a, (gs_array_h)(uintptr_t)0x1, "out_p is not written on error");
    cr_assert_eq(gs_array_from_raw_ex(at("le.raw"), GS_DTYPE_UINT8, (gs_byteorder_t)-1, 1,
                                      (int64_t[]){4}, GS_ORDER_C, 0, (int64_t[]){2}, &a),
                 GS_ERR_INVALID_PARAM);
}

/* bool files hold 0 or 1 in NumPy; any other byte reads as true (1), never as a wider value. */
Test(graph_file_dtype, bool_bytes_other_than_0_and_1_read_as_true)
{
    const uint8_t bytes[6] = {0, 1, 2, 255, 0, 17}, want[6] = {0, 1, 1, 1, 0, 1};
    gs_array_h a, s;
    uint8_t *got;
    gx_file_put(dir, "b.raw", bytes, sizeof(bytes));
    TX_OK(gs_array_from_raw(at("b.raw"), GS_DTYPE_BOOL, 1, (int64_t[]){6}, GS_ORDER_C, 0,
                            (int64_t[]){4}, &a));
    got = eval(a, GS_LOWER_DEFAULT);
    cr_assert(memcmp(got, want, 6) == 0, "%d %d %d %d %d %d", got[0], got[1], got[2], got[3],
              got[4], got[5]);
    free(got);
    TX_OK(gs_array_reduce(GS_RED_SUM, a, NULL, &s));
    got = eval(s, GS_LOWER_DEFAULT);
    {
        int64_t n;
        cr_assert_eq(gs_array_dtype(s), GS_DTYPE_INT64);
        memcpy(&n, got, 8);
        cr_assert_eq(n, 4, "sum of the bools: %lld", (long long)n);
    }
    free(got);
    gs_array_release(s);
    gs_array_release(a);
}

/* Slices of typed files read only what they keep, at the dtype's element size: the FILE
 * layer's blocks are elements * itemsize bytes, and the values are the file's. Also through
 * the device path's staging (the CPU backend under another name). */
Test(graph_file_dtype, slices_of_typed_files_use_the_element_size)
{
    gs_chunkops_ops_t staged = gs_chunkops_cpu_ops;
    staged.name = "cpu-staged";
    for (size_t d = 0; d < NDT; d++) {
        const gs_dtype_t dt = all_dt[d];
        const size_t isz = gs_dtype_size(dt);
        uint8_t *want;
        gs_array_h a, s;
        char rel[64];
        snprintf(rel, sizeof(rel), "sl-%s.npy", gs_dtype_name(dt));
        write_npy(rel, dt, d % 2, (int)(d / 2) % 2, 23, 19, &want);
        TX_OK(gs_array_from_npy(at(rel), (int64_t[]){6, 5}, &a));
        gs_slice_t sl[2] = {SL_RANGE(2, 21, 3), SL(17, 0, -4, GS_SLICE_HAS_START)};
        TX_OK(gs_array_slice(a, 2, sl, &s));
        cr_assert_eq(gs_array_dtype(s), (int)dt);
        for (int path = 0; path < 3; path++) {
            unsigned flags = path == 1 ? 0 : GS_LOWER_DEFAULT | GS_LOWER_SLICE_PUSHDOWN;
            gs_status_t st;
            uint8_t *got = eval_ops(path == 2 ? &staged : &gs_chunkops_cpu_ops, s, flags, &st);
            cr_assert_eq(st, GS_OK, "%s", gs_last_error());
            for (int i = 0, k = 0; i < 7; i++)
                for (int j = 0; j < 5; j++, k++)
                    cr_assert(memcmp(got + k * isz, want + ((2 + 3 * i) * 19 + 17 - 4 * j) * isz,
                                     isz) == 0, "%s path %d (%d, %d)", rel, path, i, j);
            free(got);
        }
        {
            gs_taskgraph_t *tg;
            int found = 0;
            /* the slice itself (the result: a root view over the file) and its transpose */
            gs_array_h t;
            TX_OK(gs_array_transpose(s, (int[]){1, 0}, &t));
            TX_OK(gs_graph_lower(d % 2 ? t : s, GS_LOWER_DEFAULT, &tg));
            gs_array_release(t);
            for (uint32_t l = 0; l < tg->nlayers; l++) {
                int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
                const gs_layer_t *ly = tg->layers[l];
                if (gs_layer_kind(ly) != GS_LAYER_FILE) continue;
                found = 1;
                for (uint64_t b = 0; b < gs_layer_nblocks(ly); b++) {
                    gs_grid_block_region(&ly->grid, b, start, shape);
                    cr_assert_eq(gs_layer_out_nbytes(ly, b),
                                 (uint64_t)gs_region_size(2, shape) * isz);
                }
                cr_assert_eq(tg->nlayers, 1, "one FILE layer, nothing above it");
                cr_assert_eq(ly->grid.shape[0] * ly->grid.shape[1], 35,
                             "%s reads only the slice: %lld x %lld", rel,
                             (long long)ly->grid.shape[0], (long long)ly->grid.shape[1]);
            }
            cr_assert(found);
            gs_taskgraph_free(tg);
        }
        free(want);
        gs_array_release(s);
        gs_array_release(a);
    }
}

/* The writers' zarr metadata per dtype (v2 dtype strings, v3 data_type names, fill_value of
 * the dtype, bytes codec endian only for multi-byte types, blosc typesize), and stores read
 * back exactly with compute chunks unlike the zarr chunks (edge chunks odd). */
Test(graph_file_dtype, zarr_v2_and_v3_round_trips_per_dtype)
{
    static const char *v3names[] = {"float64", "float32", "float16", "int32", "int64", "uint8",
                                    "bool"};
    static const char *fills[] = {"0.0", "0.0", "0.0", "0", "0", "0", "false"};
    const int64_t shape[2] = {13, 10};
    gs_chunkops_ops_t staged = gs_chunkops_cpu_ops;
    staged.name = "cpu-staged";
    for (size_t d = 0; d < NDT; d++)
        for (int version = 2; version <= 3; version++)
            for (int codec = 0; codec < 3; codec++) {
                const gs_dtype_t dt = all_dt[d];
                const size_t isz = gs_dtype_size(dt);
                char name[64], meta[96], key[160];
                gs_array_h x, xt, w, back;
                uint8_t *want, *got, *m;
                size_t n;
                TX_OK(gs_array_arange(-40.5, 1.25, 2, shape, (int64_t[]){5, 4}, &x));
                TX_OK(gs_array_astype(x, dt, &xt));
                want = eval(xt, GS_LOWER_DEFAULT);
                snprintf(name, sizeof(name), "z-%s-v%d-c%d", gs_dtype_name(dt), version, codec);
                TX_OK(gs_array_to_zarr_expr(xt, at(name), at("ztmp"), version, codec, &w));
                {
                    gs_status_t wst;
                    free(eval_ops(codec == 1 ? &staged : &gs_chunkops_cpu_ops, w,
                                  GS_LOWER_DEFAULT, &wst));
                    cr_assert_eq(wst, GS_OK, "%s", gs_last_error());
                }
                snprintf(meta, sizeof(meta), "%s/%s", name, version == 2 ? ".zarray" : "zarr.json");
                m = slurp(meta, &n);
                if (version == 2) {
                    snprintf(key, sizeof(key), "\"dtype\": \"%s\"", descr(dt, 0));
                    cr_assert_not_null(strstr((char *)m, key), "%s: %s", meta, m);
                } else {
                    snprintf(key, sizeof(key), "\"data_type\": \"%s\"", v3names[d]);
                    cr_assert_not_null(strstr((char *)m, key), "%s: %s", meta, m);
                    cr_assert_eq(strstr((char *)m, "\"endian\"") != NULL, isz > 1, "%s: %s",
                                 meta, m);
                }
                snprintf(key, sizeof(key), "\"fill_value\": %s", fills[d]);
                cr_assert_not_null(strstr((char *)m, key), "%s: %s", meta, m);
                if (codec == 2 && version == 3) {
                    snprintf(key, sizeof(key), "\"typesize\": %zu", isz);
                    cr_assert_not_null(strstr((char *)m, key), "%s: %s", meta, m);
                }
                free(m);
                /* a chunk file holds zarr-chunk elements of the dtype (uncompressed codec) */
                if (codec == 0) {
                    snprintf(key, sizeof(key), "%s/%s", name, version == 2 ? "2.2" : "c/2/2");
                    free(slurp(key, &n));
                    cr_assert_eq(n, 5 * 4 * isz, "%s: %zu bytes", key, n);
                }
                TX_OK(gs_array_from_zarr(at(name), (int64_t[]){3, 7}, &back));
                cr_assert_eq(gs_array_dtype(back), (int)dt);
                got = eval(back, GS_LOWER_DEFAULT);
                cr_assert(memcmp(got, want, 130 * isz) == 0, "%s", name);
                free(got);
                free(want);
                gs_array_release(back);
                gs_array_release(w);
                gs_array_release(xt);
                gs_array_release(x);
            }
}

/* Big-endian zarr stores (v2 '>' dtypes, v3 bytes endian "big"), compressed, with chunks left
 * out that read as fill_value: NaN, "Infinity", hex bits, negative int64 beyond 2^53, true. */
Test(graph_file_dtype, zarr_big_endian_stores_and_typed_fill_values)
{
    static const struct {
        gs_dtype_t dt;
        int version, codec;
        const char *fill;
    } cases[] = {
        {GS_DTYPE_FLOAT32, 2, 1, "\"NaN\""},
        {GS_DTYPE_FLOAT64, 3, 2, "\"-Infinity\""},
        {GS_DTYPE_FLOAT16, 3, 0, "\"0x3e00\""},           /* 1.5 */
        {GS_DTYPE_FLOAT32, 3, 1, "\"0x40490fdb\""},       /* pi as float32 */
        {GS_DTYPE_INT64, 2, 0, "-9007199254740993"},      /* -(2^53 + 1): exact */
        {GS_DTYPE_INT32, 3, 1, "-7"},
        {GS_DTYPE_BOOL, 3, 0, "true"},
        {GS_DTYPE_UINT8, 2, 2, "255"},
    };
    static const char *v3names[] = {"float64", "float32", "float16", "int32", "int64", "uint8",
                                    "bool"};
    /* 7 x 5 in zarr chunks of 3 x 2; chunk (1, 1) is missing */
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const gs_dtype_t dt = cases[c].dt;
        const size_t isz = gs_dtype_size(dt);
        char name[32], rel[96], metatext[1024];
        uint8_t want[35 * 8], fillb[8], *got;
        gs_array_h a;
        snprintf(name, sizeof(name), "be%zu", c);
        if (cases[c].version == 2) {
            static const char *comp[] = {"null", "{\"id\": \"zstd\", \"level\": 1}",
                                         "{\"id\": \"blosc\", \"cname\": \"lz4\", \"clevel\": 5, "
                                         "\"shuffle\": 1, \"blocksize\": 0}"};
            snprintf(metatext, sizeof(metatext),
                     "{\"zarr_format\": 2, \"shape\": [7, 5], \"chunks\": [3, 2], \"dtype\": "
                     "\"%s\", \"compressor\": %s, \"fill_value\": %s, \"order\": \"C\", "
                     "\"filters\": null}", descr(dt, 1), comp[cases[c].codec], cases[c].fill);
            snprintf(rel, sizeof(rel), "%s/.zarray", name);
        } else {
            static const char *codecs[] = {
                "", ", {\"name\": \"zstd\", \"configuration\": {\"level\": 1}}",
                ", {\"name\": \"blosc\", \"configuration\": {\"cname\": \"lz4\", \"clevel\": 5, "
                "\"shuffle\": \"shuffle\", \"typesize\": 4, \"blocksize\": 0}}"};
            snprintf(metatext, sizeof(metatext),
                     "{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [7, 5], "
                     "\"data_type\": \"%s\", \"chunk_grid\": {\"name\": \"regular\", "
                     "\"configuration\": {\"chunk_shape\": [3, 2]}}, \"chunk_key_encoding\": "
                     "{\"name\": \"default\"}, \"fill_value\": %s, \"codecs\": [{\"name\": "
                     "\"bytes\", \"configuration\": {\"endian\": \"big\"}}%s]}",
                     v3names[dt], cases[c].fill, codecs[cases[c].codec]);
            snprintf(rel, sizeof(rel), "%s/zarr.json", name);
        }
        gx_file_put_str(dir, rel, metatext);
        /* the expected fill bytes */
        memset(fillb, 0, sizeof(fillb));
        switch (c) {
        case 0: { float v = NAN; memcpy(fillb, &v, 4); break; }
        case 1: { double v = -INFINITY; memcpy(fillb, &v, 8); break; }
        case 2: { uint16_t v = 0x3e00; memcpy(fillb, &v, 2); break; }
        case 3: { uint32_t v = 0x40490fdb; memcpy(fillb, &v, 4); break; }
        case 4: { int64_t v = -9007199254740993LL; memcpy(fillb, &v, 8); break; }
        case 5: { int32_t v = -7; memcpy(fillb, &v, 4); break; }
        case 6: fillb[0] = 1; break;
        default: fillb[0] = 255; break;
        }
        for (int ci = 0; ci < 3; ci++)
            for (int cj = 0; cj < 3; cj++) {
                uint8_t chunk[6 * 8], enc[6 * 8 + 64];
                size_t len = 6 * isz;
                if (ci == 1 && cj == 1) {
                    for (int i = 0; i < 3; i++)
                        for (int j = 0; j < 2 && cj * 2 + j < 5; j++)
                            memcpy(want + ((ci * 3 + i) * 5 + cj * 2 + j) * isz, fillb, isz);
                    continue;
                }
                for (int i = 0; i < 3; i++)
                    for (int j = 0; j < 2; j++) {
                        int r = ci * 3 + i, q = cj * 2 + j;
                        uint8_t *e = chunk + (i * 2 + j) * isz;
                        elem(dt, r * 5 + q, e);
                        if (r < 7 && q < 5) memcpy(want + (r * 5 + q) * isz, e, isz);
                        swap_bytes(e, isz);
                    }
                if (cases[c].codec == 1) {
                    len = ZSTD_compress(enc, sizeof(enc), chunk, 6 * isz, 1);
                    cr_assert(!ZSTD_isError(len));
                } else if (cases[c].codec == 2) {
                    int r = blosc_compress_ctx(5, BLOSC_SHUFFLE, isz, 6 * isz, chunk, enc,
                                               sizeof(enc), "lz4", 0, 1);
                    cr_assert(r > 0);
                    len = (size_t)r;
                } else {
                    memcpy(enc, chunk, len);
                }
                if (cases[c].version == 2) snprintf(rel, sizeof(rel), "%s/%d.%d", name, ci, cj);
                else snprintf(rel, sizeof(rel), "%s/c/%d/%d", name, ci, cj);
                gx_file_put(dir, rel, enc, len);
            }
        TX_OK(gs_array_from_zarr(at(name), (int64_t[]){4, 4}, &a));
        cr_assert_eq(gs_array_dtype(a), (int)dt, "%s", metatext);
        got = eval(a, GS_LOWER_DEFAULT);
        for (int k = 0; k < 35; k++)
            cr_assert(memcmp(got + k * isz, want + k * isz, isz) == 0, "case %zu element %d", c,
                      k);
        free(got);
        gs_array_release(a);
    }
}

static void expect_zarr_fail(const char *store, const char *meta, gs_status_t want,
                             const char *needle)
{
    char rel[96];
    gs_array_h a = NULL;
    gs_status_t st;
    snprintf(rel, sizeof(rel), "%s/%s", store, strstr(meta, "\"zarr_format\": 3") ? "zarr.json"
                                                                                : ".zarray");
    gx_file_put_str(dir, rel, meta);
    st = gs_array_from_zarr(at(store), NULL, &a);
    if (st == GS_OK) {
        free(eval_ops(&gs_chunkops_cpu_ops, a, GS_LOWER_DEFAULT, &st));
        gs_array_release(a);
    }
    cr_assert_eq(st, want, "%s: %s (%s)", store, gs_status_string(st), gs_last_error());
    cr_assert_not_null(strstr(gs_last_error(), store), "%s", gs_last_error());
    cr_assert_not_null(strstr(gs_last_error(), needle), "'%s' not in '%s'", needle,
                       gs_last_error());
}

#define V2(dtype, fill)                                                                          \
    "{\"zarr_format\": 2, \"shape\": [4], \"chunks\": [2], \"dtype\": " dtype                    \
    ", \"compressor\": null, \"fill_value\": " fill ", \"order\": \"C\", \"filters\": null}"
#define V3(dtype, fill, bytes)                                                                   \
    "{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [4], \"data_type\": " dtype       \
    ", \"chunk_grid\": {\"name\": \"regular\", \"configuration\": {\"chunk_shape\": [2]}}, "     \
    "\"fill_value\": " fill ", \"codecs\": [" bytes "]}"

/* Dtypes gsched lacks, fill values that do not fit the dtype, chunk files whose size does not
 * match the dtype, .npy files whose size disagrees with the header: clear errors, no misread. */
Test(graph_file_dtype, bad_typed_files_give_errors_naming_them)
{
    const char *le = "{\"name\": \"bytes\", \"configuration\": {\"endian\": \"little\"}}";
    char meta[512];
    expect_zarr_fail("i2", V2("\"<i2\"", "0"), GS_ERR_UNSUPPORTED, "'<i2'");
    expect_zarr_fail("u4", V2("\">u4\"", "0"), GS_ERR_UNSUPPORTED, "uint8, bool");
    expect_zarr_fail("st", V2("[[\"a\", \"<f8\"]]", "null"), GS_ERR_UNSUPPORTED, "structured");
    expect_zarr_fail("uni", V2("\"<U4\"", "\"\""), GS_ERR_UNSUPPORTED, "<U4");
    expect_zarr_fail("bfill", V2("\"|b1\"", "2"), GS_ERR_INVALID_PARAM, "fill_value");
    expect_zarr_fail("u1fill", V2("\"|u1\"", "256"), GS_ERR_INVALID_PARAM, "range");
    expect_zarr_fail("i4fill", V2("\"<i4\"", "\"NaN\""), GS_ERR_INVALID_PARAM, "fill_value");
    snprintf(meta, sizeof(meta), V3("\"int16\"", "0", "%s"), le);
    expect_zarr_fail("v3i2", meta, GS_ERR_UNSUPPORTED, "'int16'");
    snprintf(meta, sizeof(meta), V3("\"complex64\"", "[0, 0]", "%s"), le);
    expect_zarr_fail("v3c8", meta, GS_ERR_UNSUPPORTED, "float64, float32");
    expect_zarr_fail("v3noend", V3("\"int32\"", "0", "{\"name\": \"bytes\"}"),
                     GS_ERR_INVALID_PARAM, "endian");
    snprintf(meta, sizeof(meta), V3("\"float32\"", "\"0x3ff0000000000000\"", "%s"), le);
    expect_zarr_fail("v3hex", meta, GS_ERR_INVALID_PARAM, "fill_value");
    /* metadata says int32 (2 x 4 bytes a chunk), the chunk file holds 2 float64 */
    {
        double two[2] = {1, 2};
        gx_file_put(dir, "lie/0", two, sizeof(two));
        expect_zarr_fail("lie", V2("\"<i4\"", "0"), GS_ERR_IO, "lie/0");
        cr_assert_not_null(strstr(gs_last_error(), "disagrees"), "%s", gs_last_error());
    }
    /* .npy: truncated typed data, a header whose dtype disagrees with the file's size */
    {
        uint8_t *want, *file;
        size_t n;
        gs_array_h a = NULL;
        write_npy("t.npy", GS_DTYPE_INT32, 1, 0, 5, 3, &want);
        file = slurp("t.npy", &n);
        gx_file_put(dir, "trunc.npy", file, n - 3);
        cr_assert_eq(gs_array_from_npy(at("trunc.npy"), (int64_t[]){2, 2}, &a), GS_ERR_IO);
        cr_assert_not_null(strstr(gs_last_error(), "trunc.npy is truncated"), "%s",
                           gs_last_error());
        cr_assert_null(a);
        memcpy(strstr((char *)file + 10, ">i4"), ">i8", 3);   /* claims twice the data */
        gx_file_put(dir, "i8lie.npy", file, n);
        cr_assert_eq(gs_array_from_npy(at("i8lie.npy"), (int64_t[]){2, 2}, &a), GS_ERR_IO);
        cr_assert_not_null(strstr(gs_last_error(), "i8lie.npy"), "%s", gs_last_error());
        memcpy(strstr((char *)file + 10, ">i8"), "|u1", 3);   /* claims a quarter */
        gx_file_put(dir, "u1lie.npy", file, n);
        cr_assert_eq(gs_array_from_npy(at("u1lie.npy"), (int64_t[]){2, 2}, &a),
                     GS_ERR_INVALID_PARAM);
        cr_assert_not_null(strstr(gs_last_error(), "disagrees"), "%s", gs_last_error());
        memcpy(strstr((char *)file + 10, "|u1"), "<i2", 3);
        gx_file_put(dir, "i2.npy", file, n);
        cr_assert_eq(gs_array_from_npy(at("i2.npy"), (int64_t[]){2, 2}, &a), GS_ERR_UNSUPPORTED);
        cr_assert_not_null(strstr(gs_last_error(), "'<i2' is not supported"), "%s",
                           gs_last_error());
        cr_assert_null(a);
        free(file);
        free(want);
    }
}
