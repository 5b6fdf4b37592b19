/* File reads of the CUDA backend (chunkops/cuda/cufile.c, chunkops/fileio.c): cuFile reads
 * (forced with GS_FILE_PATH_CUFILE: GPUDirect Storage where the host has it, its compatibility
 * mode otherwise) land the same bytes as the pinned staging path and as the file holds, for raw
 * files at odd offsets and .npy-like ones (128-byte header), several regions and dtypes; a
 * forced cuFile read where libcufile cannot be loaded falls back to staging; errors name the
 * file. Every test skips without a GPU; those that need cuFile itself skip without
 * GS_HAVE_CUFILE (no cufile.h at build time) or where libcufile cannot be loaded. */
#include <criterion/criterion.h>

#include "chunkops/chunkops.h"
#include "chunkops/cuda/cuda_backend.h"
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/fileio.h"
#include "common/error.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_test_check.h"

extern const gs_chunkops_ops_t gs_chunkops_cuda_ops;
static const gs_chunkops_ops_t *const CU = &gs_chunkops_cuda_ops;

typedef struct {
    gs_chunkops_ctx_h ctx;
    gs_chunkops_stream_h s;
} fctx_t;

static fctx_t fctx_make(int file_path)
{
    gs_chunkops_params_t p;
    fctx_t f;
    memset(&p, 0, sizeof(p));
    p.memory_limit = (size_t)64 << 20;
    p.file_path = file_path;
    CHECK(CU->ctx_create(&p, &f.ctx));
    CHECK(CU->stream_create(f.ctx, &f.s));
    return f;
}

static void fctx_free(fctx_t *f)
{
    CU->stream_destroy(f->ctx, f->s);
    CU->ctx_destroy(f->ctx);
}

/* A file of @a nbytes pseudo-random bytes (seeded) under $TMPDIR; the path is malloc'ed. */
static char *make_file(size_t nbytes, uint64_t seed, uint8_t **bytes_p)
{
    const char *dir = getenv("TMPDIR") != NULL && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    char *path = malloc(strlen(dir) + 40);
    uint8_t *b = malloc(nbytes);
    FILE *fp;
    cr_assert(path != NULL && b != NULL);
    sprintf(path, "%s/gs-test-cufile-XXXXXX", dir);
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    for (size_t i = 0; i < nbytes; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (uint8_t)(seed >> 56);
    }
    fp = fopen(path, "wb");
    cr_assert(fp != NULL && fwrite(b, 1, nbytes, fp) == nbytes && fclose(fp) == 0);
    *bytes_p = b;
    return path;
}

/* Read the region [lo, lo + shape) of a C-order file array of @a fshape (@a ndim axes, dtype
 * @a dt of @a isz bytes, data at byte @a off) through @a f; the bytes come back in @a host. */
static gs_status_t read_region(fctx_t *f, const char *path, int32_t dt, size_t isz, int64_t off,
                               int32_t ndim, const int64_t *fshape, const int64_t *lo,
                               const int64_t *shape, uint8_t *host)
{
    gs_kfile_t k;
    int64_t n = 1, st = 1, nelems = 1;
    void *dev = NULL;
    gs_status_t s;
    memset(&k, 0, sizeof(k));
    k.path = path;
    k.fdtype = dt;
    k.offset = off;
    k.fmt = GS_KFILE_RAW;
    k.ndim = ndim;
    for (int32_t j = 0; j < ndim; j++) nelems *= fshape[j];
    k.nelems = nelems;
    for (int32_t j = ndim - 1; j >= 0; j--) {
        k.shape[j] = shape[j];
        k.stride[j] = st;
        k.base += lo[j] * st;
        st *= fshape[j];
        n *= shape[j];
    }
    CHECK(CU->mem_alloc(f->ctx, (size_t)n * isz, &dev));
    k.out = dev;
    s = gs_chunkops_file_run(CU, f->ctx, f->s, GS_KTASK_FILE_READ, &k);
    if (s == GS_OK) {
        CHECK(CU->copy_to_host(f->ctx, f->s, host, dev, (size_t)n * isz));
        CHECK(CU->sync(f->ctx, f->s));
    }
    CU->mem_free(f->ctx, dev);
    return s;
}

/* The bytes the region must hold, from the file's bytes @a b. */
static void expect_region(const uint8_t *b, size_t isz, int64_t off, int32_t ndim,
                          const int64_t *fshape, const int64_t *lo, const int64_t *shape,
                          uint8_t *out)
{
    int64_t p[8] = {0}, n = 1;
    for (int32_t j = 0; j < ndim; j++) n *= shape[j];
    for (int64_t i = 0; i < n; i++) {
        int64_t e = 0;
        for (int32_t j = 0; j < ndim; j++) e = e * fshape[j] + lo[j] + p[j];
        memcpy(out + (size_t)i * isz, b + off + e * (int64_t)isz, isz);
        for (int32_t j = ndim - 1; j >= 0; j--) {
            if (++p[j] < shape[j]) break;
            p[j] = 0;
        }
    }
}

typedef struct {
    int32_t dt;
    size_t isz;
    int64_t off;                /* 128: a .npy header's length; others: raw files */
    int32_t ndim;
    int64_t fshape[3], lo[3], shape[3];
} region_t;

static const region_t regions[] = {
    /* float64 at an odd raw offset: inner boxes (one span per row), whole rows (one span) */
    {GS_DTYPE_FLOAT64, 8, 37, 2, {300, 257}, {7, 3}, {93, 211}},
    {GS_DTYPE_FLOAT64, 8, 37, 2, {300, 257}, {120, 0}, {64, 257}},
    {GS_DTYPE_FLOAT64, 8, 37, 2, {300, 257}, {299, 256}, {1, 1}},
    /* a .npy file's data at 128 */
    {GS_DTYPE_FLOAT64, 8, 128, 2, {512, 512}, {0, 0}, {512, 512}},
    {GS_DTYPE_FLOAT64, 8, 128, 2, {512, 512}, {256, 128}, {256, 256}},
    /* page-aligned everything: the O_DIRECT path where the file system takes it */
    {GS_DTYPE_FLOAT64, 8, 4096, 2, {256, 512}, {64, 0}, {128, 512}},
    /* other dtypes, 3-d, odd offsets */
    {GS_DTYPE_FLOAT32, 4, 129, 3, {17, 33, 65}, {3, 5, 7}, {11, 21, 51}},
    {GS_DTYPE_UINT8, 1, 1, 2, {1000, 999}, {1, 2}, {997, 995}},
    {GS_DTYPE_INT64, 8, 24, 1, {100000, 1, 1}, {12345, 0, 0}, {54321, 1, 1}},
};

/* Every region through @a f; each must hold the file's bytes. Returns the bytes read. */
static uint64_t read_all(fctx_t *f, const char *path, const uint8_t *b)
{
    uint64_t total = 0;
    for (size_t r = 0; r < sizeof(regions) / sizeof(regions[0]); r++) {
        const region_t *g = &regions[r];
        int64_t n = 1;
        for (int32_t j = 0; j < g->ndim; j++) n *= g->shape[j];
        uint8_t *got = malloc((size_t)n * g->isz), *want = malloc((size_t)n * g->isz);
        cr_assert(got != NULL && want != NULL);
        memset(got, 0xa5, (size_t)n * g->isz);
        CHECK(read_region(f, path, g->dt, g->isz, g->off, g->ndim, g->fshape, g->lo, g->shape,
                          got));
        expect_region(b, g->isz, g->off, g->ndim, g->fshape, g->lo, g->shape, want);
        cr_assert(memcmp(got, want, (size_t)n * g->isz) == 0,
                  "region %zu read back differs from the file's bytes", r);
        total += (uint64_t)n * g->isz;
        free(got);
        free(want);
    }
    return total;
}

static size_t file_bytes_needed(void)
{
    size_t need = 0;
    for (size_t r = 0; r < sizeof(regions) / sizeof(regions[0]); r++) {
        const region_t *g = &regions[r];
        size_t n = (size_t)g->off;
        size_t e = 1;
        for (int32_t j = 0; j < g->ndim; j++) e *= (size_t)g->fshape[j];
        n += e * g->isz;
        if (n > need) need = n;
    }
    return need;
}

/* Every region (read_all) through a new context for @a file_path, from a new file of seed
 * @a seed; the process's read counters (gs_chunkops_file_read_stats) go into @a before and
 * @a after around the reads. Returns the bytes read. */
static uint64_t read_all_counted(int file_path, uint64_t seed, uint64_t *before, uint64_t *after)
{
    uint8_t *b;
    fctx_t f = fctx_make(file_path);
    char *path = make_file(file_bytes_needed(), seed, &b);
    gs_chunkops_file_read_stats(before);
    uint64_t n = read_all(&f, path, b);
    gs_chunkops_file_read_stats(after);
    unlink(path);
    free(path);
    free(b);
    fctx_free(&f);
    return n;
}

/* cuFile can run here: skip otherwise (no header at build time, no library on this host). */
static int cufile_or_skip(void)
{
#ifndef GS_HAVE_CUFILE
    cr_skip_test("built without cufile.h (GS_HAVE_CUFILE off)");
    return 0;
#else
    const char *why = NULL;
    int state = gs__cuda_cufile_state(&why);
    if (state == 0) cr_skip_test("cuFile cannot run on this host: %s", why);
    return state;
#endif
}

/* cuFile registers files in this test's directory: skip otherwise (libcufile 1.15 in
 * compatibility mode on the H100 host refuses its /tmp: CU_FILE_HANDLE_NOT_REGISTERED). */
static void cufile_registers_or_skip(fctx_t *cf)
{
    uint8_t *b;
    void *dev;
    int how = -1;
    char *path = make_file(4096, 3, &b);
    CHECK(CU->mem_alloc(cf->ctx, 4096, &dev));
    gs_chunkops_fspan_t sp = {.off = 0, .dst = dev, .nbytes = 4096};
    gs_status_t st = CU->file_read(cf->ctx, path, &sp, 1, &how);
    char why[512];
    snprintf(why, sizeof(why), "%s", st == GS_OK ? "" : gs_last_error());
    CU->mem_free(cf->ctx, dev);
    unlink(path);
    free(path);
    free(b);
    if (st == GS_ERR_UNSUPPORTED) cr_skip_test("cuFile refuses files here: %s", why);
    CHECK(st);
}

Test(chunkops_cuda_file, forced_cufile_reads_equal_pinned_reads_and_the_file)
{
    uint64_t before[GS_FREAD_NPATHS], mid[GS_FREAD_NPATHS], after[GS_FREAD_NPATHS];
    uint8_t *b;
    GPU_OR_SKIP();
    fctx_t cf = fctx_make(GS_FILE_PATH_CUFILE), pin = fctx_make(GS_FILE_PATH_PINNED);
    int state = cufile_or_skip();
    cufile_registers_or_skip(&cf);
    char *path = make_file(file_bytes_needed(), 42, &b);
    const int how = state == 2 ? GS_FREAD_CUFILE : GS_FREAD_CUFILE_COMPAT;

    gs_chunkops_file_read_stats(before);
    uint64_t n = read_all(&cf, path, b);
    gs_chunkops_file_read_stats(mid);
    cr_assert_eq(mid[how] - before[how], n, "cuFile (%s) read %llu of %llu bytes",
                 gs_fread_path_name(how), (unsigned long long)(mid[how] - before[how]),
                 (unsigned long long)n);
    cr_assert_eq(mid[GS_FREAD_PINNED], before[GS_FREAD_PINNED], "a forced cuFile read was staged");
    cr_assert_eq(read_all(&pin, path, b), n);
    gs_chunkops_file_read_stats(after);
    cr_assert_eq(after[GS_FREAD_PINNED] - mid[GS_FREAD_PINNED], n);
    cr_assert_eq(after[how], mid[how], "a forced pinned read went through cuFile");
    unlink(path);
    free(path);
    free(b);
    fctx_free(&cf);
    fctx_free(&pin);
}

/* Byte-swapped (big-endian) and bool files need their bytes changed: staged even when cuFile is
 * forced, and still right. */
Test(chunkops_cuda_file, forced_cufile_stages_reads_that_convert)
{
    uint64_t before[GS_FREAD_NPATHS], after[GS_FREAD_NPATHS];
    uint8_t *b, got[4096];
    gs_kfile_t k;
    void *dev;
    GPU_OR_SKIP();
    fctx_t cf = fctx_make(GS_FILE_PATH_CUFILE);
    char *path = make_file(8 * 512 + 16, 7, &b);
    memset(&k, 0, sizeof(k));
    k.path = path;
    k.fdtype = GS_DTYPE_FLOAT64;
    k.swap = 1;
    k.offset = 16;
    k.fmt = GS_KFILE_RAW;
    k.nelems = 512;
    k.ndim = 1;
    k.shape[0] = 512;
    k.stride[0] = 1;
    CHECK(CU->mem_alloc(cf.ctx, 4096, &dev));
    k.out = dev;
    gs_chunkops_file_read_stats(before);
    CHECK(gs_chunkops_file_run(CU, cf.ctx, cf.s, GS_KTASK_FILE_READ, &k));
    gs_chunkops_file_read_stats(after);
    CHECK(CU->copy_to_host(cf.ctx, cf.s, got, dev, 4096));
    CHECK(CU->sync(cf.ctx, cf.s));
    for (int i = 0; i < 512; i++)
        for (int j = 0; j < 8; j++)
            cr_assert_eq(got[8 * i + j], b[16 + 8 * i + 7 - j], "element %d byte %d", i, j);
    cr_assert_eq(after[GS_FREAD_PINNED] - before[GS_FREAD_PINNED], 4096u);
    CU->mem_free(cf.ctx, dev);
    unlink(path);
    free(path);
    free(b);
    fctx_free(&cf);
}

/* libcufile missing (here: a name that does not exist): cuFile forced, every read staged, right. */
Test(chunkops_cuda_file, forced_cufile_falls_back_to_pinned_without_libcufile)
{
    uint64_t before[GS_FREAD_NPATHS], after[GS_FREAD_NPATHS];
    const char *why = NULL;
    GPU_OR_SKIP();
    cr_assert_eq(setenv("GS_CUFILE_LIBRARY", "/nonexistent/libcufile-gs-test.so.0", 1), 0);
    uint64_t n = read_all_counted(GS_FILE_PATH_CUFILE, 3, before, after);
    cr_assert_eq(after[GS_FREAD_PINNED] - before[GS_FREAD_PINNED], n);
    cr_assert_eq(after[GS_FREAD_CUFILE] + after[GS_FREAD_CUFILE_COMPAT],
                 before[GS_FREAD_CUFILE] + before[GS_FREAD_CUFILE_COMPAT]);
    cr_assert_eq(gs__cuda_cufile_state(&why), 0);
#ifdef GS_HAVE_CUFILE
    cr_assert(strstr(why, "cannot load /nonexistent/libcufile-gs-test.so.0") != NULL, "%s", why);
#else
    cr_assert(strstr(why, "cufile.h") != NULL, "%s", why);
#endif
}

/* The automatic choice: cuFile only with GPUDirect Storage, staging otherwise. */
Test(chunkops_cuda_file, auto_reads_with_cufile_only_with_gds)
{
    uint64_t before[GS_FREAD_NPATHS], after[GS_FREAD_NPATHS];
    const char *why = NULL;
    GPU_OR_SKIP();
    uint64_t n = read_all_counted(GS_FILE_PATH_AUTO, 5, before, after);
    int gds = gs__cuda_cufile_state(&why) == 2;
    cr_assert_eq(after[gds ? GS_FREAD_CUFILE : GS_FREAD_PINNED] -
                     before[gds ? GS_FREAD_CUFILE : GS_FREAD_PINNED], n, "GDS %d (%s)", gds, why);
    cr_assert_eq(after[GS_FREAD_CUFILE_COMPAT], before[GS_FREAD_CUFILE_COMPAT]);
}

/* cuFile's errors name the file: a missing file, a range past its end. */
Test(chunkops_cuda_file, cufile_errors_name_the_file)
{
    uint8_t *b;
    void *dev;
    int how = -1;
    GPU_OR_SKIP();
    fctx_t cf = fctx_make(GS_FILE_PATH_CUFILE);
    cufile_or_skip();
    cufile_registers_or_skip(&cf);
    char *path = make_file(1000, 9, &b);
    CHECK(CU->mem_alloc(cf.ctx, 8192, &dev));
    gs_chunkops_fspan_t sp = {.off = 0, .dst = dev, .nbytes = 1000};
    CHECK(CU->file_read(cf.ctx, path, &sp, 1, &how));
    cr_assert(how == GS_FREAD_CUFILE || how == GS_FREAD_CUFILE_COMPAT);
    sp.off = 500;                                       /* 500 bytes past the end */
    cr_assert_eq(CU->file_read(cf.ctx, path, &sp, 1, &how), GS_ERR_IO);
    cr_assert(strstr(gs_last_error(), path) != NULL && strstr(gs_last_error(), "truncated"),
              "%s", gs_last_error());
    cr_assert_eq(CU->file_read(cf.ctx, "/nonexistent/gs-cufile-test", &sp, 1, &how), GS_ERR_IO);
    cr_assert(strstr(gs_last_error(), "/nonexistent/gs-cufile-test") != NULL, "%s",
              gs_last_error());
    CU->mem_free(cf.ctx, dev);
    unlink(path);
    free(path);
    free(b);
    fctx_free(&cf);
}

/* The vtable contract holds without a GPU too: bad arguments are refused. */
Test(chunkops_cuda_file, file_read_refuses_null_arguments)
{
    int how;
    gs_chunkops_fspan_t sp = {0};
    cr_assert_eq(CU->file_read(NULL, "x", &sp, 1, &how), GS_ERR_INVALID_PARAM);
    cr_assert_eq(gs_file_path_parse("gds", &how), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "auto, pinned or cufile") != NULL);
    cr_assert_eq(gs_file_path_parse("cufile", &how), GS_OK);
    cr_assert_eq(how, GS_FILE_PATH_CUFILE);
    cr_assert_str_eq(gs_fread_path_name(GS_FREAD_CUFILE_COMPAT), "cufile-compat");
}
