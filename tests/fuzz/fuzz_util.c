/* Helpers shared by the fuzz targets: see fuzz_util.h. */
#include "fuzz_util.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* nftw's FTW_DEPTH | FTW_PHYS */
#endif
#include "chunkops/chunkops.h"
#include "chunkops/cpu/cpu.h"
#include "chunkops/eval.h"
#include "common/alloc.h"
#include "common/log.h"
#include "graph/graph_internal.h"
#include "graph/copy_int.h"
#include "graph/file_int.h"
#include "graph/linalg_int.h"
#include "graph/scan_int.h"
#include "graph/stencil_int.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static gs_chunkops_ctx_h fz_ctx;
static gs_chunkops_stream_h fz_stream;
/* The CPU backend with a cuda_user op (fz_cuda_user): CUDA-source kernels take the paths a
 * CUDA worker's do (map_overlap's padded block, fused producers/consumers); and the same
 * without a user op: CPU kernels are staged as on a GPU worker (chunkops/stage.c). */
static gs_chunkops_ops_t fz_ops, fz_ops_staged;
static unsigned long fz_nruns;
/* Every file a FILE task touches lives here (fz_file_paths); emptied after each task. */
static char fz_dir[64];
static char fz_path_p[96], fz_path_t[96];
#define FZ_FILE_MAX ((int64_t)16 << 20)   /* bytes of the largest file a task may make */

/* ---- users' code: never run. The CPU backend's one way into a user's library is
 * gs__cpu_user_call (dlopen, fork); the fuzz targets link with --wrap=gs__cpu_user_call
 * (CMakeLists.txt), so every call lands here instead: the kernel's contract (tests/fuzz/
 * README.md) is checked, every input element read and every output element written, so that
 * a block view larger than its buffer is an AddressSanitizer report. */

static void fz_user_touch(const char *who, const char *sym, const gs_block_t *in, int nin,
                          const int64_t *in_len, gs_block_t *out)
{
    volatile double acc = 0;
    int64_t n;
    if (sym == NULL || sym[0] == '\0') FZ_BUG("%s: user kernel without a name", who);
    if (nin < 1 || nin > GS_KERNEL_MAX_USER_IN) FZ_BUG("%s: user kernel with %d inputs", who, nin);
    if (out == NULL || out->ndim < 0 || out->ndim > GS_MAX_NDIM)
        FZ_BUG("%s: user kernel output of bad ndim", who);
    for (int i = 0; i < nin; i++) {
        if (in[i].ndim != out->ndim)
            FZ_BUG("%s: user kernel input %d has ndim %d, output %d", who, i, (int)in[i].ndim,
                   (int)out->ndim);
        for (int32_t j = 0; j < in[i].ndim; j++)
            if (in[i].shape[j] < 0) FZ_BUG("%s: user kernel input %d of negative extent", who, i);
        n = gs_region_size(in[i].ndim, in[i].shape);
        if (in_len != NULL && in_len[i] != n)
            FZ_BUG("%s: user kernel input %d holds %lld elements for a block of %lld", who, i,
                   (long long)in_len[i], (long long)n);
        if (n > 0 && in[i].data == NULL) FZ_BUG("%s: user kernel input %d without data", who, i);
        for (int64_t e = 0; e < n; e++) acc += in[i].data[e];
    }
    for (int32_t j = 0; j < out->ndim; j++)
        if (out->shape[j] < 0) FZ_BUG("%s: user kernel output of negative extent", who);
    n = gs_region_size(out->ndim, out->shape);
    if (n > 0 && out->data == NULL) FZ_BUG("%s: user kernel output without data", who);
    for (int64_t e = 0; e < n; e++) out->data[e] = (double)e + (acc != acc ? 0.0 : 0.5);
}

gs_status_t __wrap_gs__cpu_user_call(const char *lib, const char *sym, const gs_block_t *in,
                                     int nin, gs_block_t *out, const void *arg);
gs_status_t __wrap_gs__cpu_user_call(const char *lib, const char *sym, const gs_block_t *in,
                                     int nin, gs_block_t *out, const void *arg)
{
    (void)arg;
    if (lib == NULL || lib[0] == '\0') FZ_BUG("cpu user kernel %s without a library", sym);
    fz_user_touch("cpu", sym, in, nin, NULL, out);
    return GS_OK;
}

static gs_status_t fz_cuda_user(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                const gs_kuser_t *k)
{
    gs_block_t out;
    (void)ctx;
    (void)stream;
    if (k == NULL || k->cuda_src == NULL || k->cuda_src[0] == '\0')
        FZ_BUG("cuda_user called without a CUDA source");
    if (k->arg_len < 0 || (k->arg_len > 0 && k->arg == NULL))
        FZ_BUG("cuda_user: arg of %lld bytes without data", (long long)k->arg_len);
    (void)strlen(k->cuda_src);   /* NUL-terminated */
    out = k->out;
    fz_user_touch("cuda", k->sym, k->in, k->nin, k->in_len, &out);
    return GS_OK;
}

/* ---- files: a FILE task's paths are replaced by two names in fz_dir (the worker's
 * --file-root does the same job for real workers: worker/launch.c), as the task's spec lays
 * them out; nothing outside fz_dir is created, read or removed. */

static int fz_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    if (ftw->level > 0) remove(path);
    return 0;
}

static void fz_dir_clear(void)
{
    if (fz_dir[0] != '\0') nftw(fz_dir, fz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void fz_dir_remove(void)
{
    fz_dir_clear();
    if (fz_dir[0] != '\0') rmdir(fz_dir);
}

static void fz_dir_make(void)
{
    static const char *const roots[] = {"/dev/shm", "/tmp"};
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        snprintf(fz_dir, sizeof fz_dir, "%s/gs-fuzz-XXXXXX", roots[i]);
        if (mkdtemp(fz_dir) != NULL) break;
        fz_dir[0] = '\0';
    }
    if (fz_dir[0] == '\0') FZ_BUG("cannot make a temporary directory for file tasks");
    snprintf(fz_path_p, sizeof fz_path_p, "%s/p", fz_dir);
    snprintf(fz_path_t, sizeof fz_path_t, "%s/t", fz_dir);
    atexit(fz_dir_remove);
}

/* Bytes of a file of @a k's spec: offset + elements; -1 when over FZ_FILE_MAX or overflowing. */
static int64_t fz_file_bytes(const gs_kfile_t *k)
{
    size_t isz = gs_dtype_size((gs_dtype_t)k->fdtype);
    if (k->offset < 0 || k->nelems < 0 || isz == 0 || k->offset > FZ_FILE_MAX ||
        k->nelems > FZ_FILE_MAX / (int64_t)isz || k->offset + k->nelems * (int64_t)isz > FZ_FILE_MAX)
        return -1;
    return k->offset + k->nelems * (int64_t)isz;
}

static void fz_file_fill(const char *path, int64_t n)
{
    uint8_t buf[4096];
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) FZ_BUG("cannot create %s", path);
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 37u + 11u);
    for (int64_t at = 0; at < n;) {
        size_t m = (size_t)(n - at) < sizeof buf ? (size_t)(n - at) : sizeof buf;
        if (write(fd, buf, m) != (ssize_t)m) FZ_BUG("cannot write %s", path);
        at += (int64_t)m;
    }
    close(fd);
}

/* mkdir -p of the directories above @a path (inside fz_dir). */
static void fz_mkdirs(char *path)
{
    for (char *p = path + strlen(fz_dir) + 1; *p != '\0'; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(path, 0700);
        *p = '/';
    }
}

/* A zarr read finds chunk files (pattern bytes of one uncompressed chunk: compressed stores
 * then meet corrupt chunks) for the chunks its region touches, at most 64 of them and each
 * of at most 1 MiB; the others are missing (the fill value). Keys as chunkops/zarr.c names
 * them: v2 "i.j" (or "i/j"), v3 "c/i/j" (or "c.i.j"). */
static void fz_zarr_chunks(const gs_kfile_t *k)
{
    int64_t lo[GS_MAX_NDIM], hi[GS_MAX_NDIM], ci[GS_MAX_NDIM], zn = 1, count = 1;
    size_t isz = gs_dtype_size((gs_dtype_t)k->fdtype);
    if (isz == 0 || k->fndim < 0 || k->fndim > GS_MAX_NDIM || k->ndim < 0 ||
        k->ndim > GS_MAX_NDIM || gs_region_size(k->ndim, k->shape) <= 0)
        return;
    for (int32_t a = 0; a < k->fndim; a++) {
        int32_t j = k->fperm[a];
        __int128 c0 = k->fbase[a], c1 = k->fbase[a];
        if (j >= 0 && j < k->ndim) {
            __int128 e = (__int128)k->fbase[a] + (__int128)k->fstep[a] * (k->shape[j] - 1);
            if (e < c0) c0 = e;
            else c1 = e;
        }
        if (k->zchunk[a] < 1 || c0 < 0 || c1 >= k->fshape[a]) return;
        lo[a] = (int64_t)(c0 / k->zchunk[a]);
        hi[a] = (int64_t)(c1 / k->zchunk[a]);
        ci[a] = lo[a];
        zn *= k->zchunk[a];
        count *= hi[a] - lo[a] + 1;
        if (zn > ((int64_t)1 << 20) / (int64_t)isz || count > 64) return;
    }
    for (;;) {
        char path[4200];
        size_t n = (size_t)snprintf(path, sizeof path, "%s/%s", fz_path_p, k->zver == 3 ? "c" : "");
        if (k->fndim == 0 && k->zver == 2) snprintf(path + n, sizeof path - n, "0");
        for (int32_t a = 0; a < k->fndim && n < sizeof path; a++)
            n += (size_t)snprintf(path + n, sizeof path - n, "%s%lld",
                                  a == 0 && k->zver == 2 ? "" : (k->zsep == '/' ? "/" : "."),
                                  (long long)ci[a]);
        fz_mkdirs(path);
        fz_file_fill(path, zn * (int64_t)isz);
        int32_t a = k->fndim - 1;
        for (; a >= 0; a--) {
            if (++ci[a] <= hi[a]) break;
            ci[a] = lo[a];
        }
        if (a < 0) break;
    }
}

/* Point task @a t's paths into fz_dir and lay out what the operation finds there (a file of
 * the spec's size to read; a temporary file or directory to commit). 0: do not run (the file
 * would exceed FZ_FILE_MAX). */
static int fz_file_prepare(gs_kfile_t *k, int32_t kind, unsigned long salt)
{
    int64_t bytes = fz_file_bytes(k);
    const int zarr = k->fmt == GS_KFILE_ZARR;
    fz_dir_clear();
    switch (kind) {
    case GS_KTASK_FILE_READ:
        if (k->path == NULL) return 1;
        k->path = fz_path_p;
        k->tmp = NULL;
        if (zarr) {
            mkdir(fz_path_p, 0700);
            if (salt % 5 != 0) fz_zarr_chunks(k);   /* else no chunk files: the fill value */
        }
        else if (bytes < 0) return 0;
        else fz_file_fill(fz_path_p, bytes - (int64_t)(salt % 7 == 0)); /* sometimes truncated */
        return 1;
    case GS_KTASK_FILE_WRITE:
        if (!zarr && bytes < 0) return 0;
        if (k->path != NULL) k->path = fz_path_t;
        if (k->tmp != NULL) k->tmp = fz_path_t;
        return 1;
    default:
        if (!zarr && bytes < 0) return 0;
        if (k->path != NULL) k->path = fz_path_p;
        if (k->tmp != NULL) {
            k->tmp = fz_path_t;
            if (salt % 3 != 0) {
                if (zarr) mkdir(fz_path_t, 0700);
                else fz_file_fill(fz_path_t, 0);
            }
        }
        return 1;
    }
}

void fz_bug(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "\n==fuzz== contract broken at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n==fuzz== last gsched error: %s\n", gs_last_error());
    abort();
}

void fz_init(void)
{
    const gs_chunkops_ops_t *ops = &gs_chunkops_cpu_ops;
    gs_chunkops_params_t params = {0};
    if (fz_ctx != NULL) return;
    /* decoders log rejected peer input at warn: keep the fuzzer's output readable and fast */
    gs_log_set_level(GS_LOG_LEVEL_FATAL);
    params.memory_limit = (size_t)1 << 30;
    params.nthreads = 1;
    if (ops->ctx_create(&params, &fz_ctx) != GS_OK) FZ_BUG("cpu ctx_create failed");
    if (ops->stream_create(fz_ctx, &fz_stream) != GS_OK) FZ_BUG("cpu stream_create failed");
    fz_ops = *ops;
    fz_ops.cuda_user = fz_cuda_user;
    fz_ops_staged = fz_ops;
    fz_ops_staged.user = NULL;
    fz_ops_staged.name = "fuzz-device";   /* files: a device backend's staged paths */
    fz_dir_make();
}

void fz_rng_seed(fz_rng_t *r, const uint8_t *data, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ data[i]) * 0x100000001b3ull;
    r->s = h ? h : 0x9e3779b97f4a7c15ull;
}

uint64_t fz_rng_next(fz_rng_t *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 2685821657736338717ull;
}

static int64_t fz_region(const gs_grid_t *g, uint64_t block)
{
    int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
    gs_grid_block_region(g, block, start, shape);
    return gs_region_size(g->ndim, shape);
}

int fz_generator_only(const gs_layer_t *l)
{
    return gs_layer_kind(l) == GS_LAYER_FUSED && !gs__fused_reads_chunks(l);
}

/* Append the inputs of block @a block of FUSED layer @a p (exact bytes: each chunk leaf's dtype;
 * lens in doubles, as a worker hands them: bytes / 8), leaving out those of source @a skip_src
 * (-1: none). GS_OK or the resolution's error. */
static gs_status_t fz_fused_inputs(const gs_layer_t *p, uint64_t block, int32_t skip_src, int *n_p,
                                   int64_t *lens, uint64_t *nbytes)
{
    gs__fres_t r;
    gs_status_t st;
    if (!gs__fused_reads_chunks(p)) return GS_OK;
    if ((st = gs__fused_resolve(p, block, &r)) != GS_OK) return st;
    for (int32_t i = 0; i < r.ninputs; i++) {
        int32_t dt = GS_DTYPE_FLOAT64;
        if (r.in_src[i] == skip_src) continue;
        for (int32_t q = 0; q < p->u.f.nleaves; q++)
            if (r.leaf_slot[q] == i) dt = p->u.f.leaves[q].dtype;
        if (*n_p >= GS_KERNEL_MAX_COMBINE) FZ_BUG("more than %d inputs", GS_KERNEL_MAX_COMBINE);
        nbytes[*n_p] = (uint64_t)r.in_len[i] * gs_dtype_size((gs_dtype_t)dt);
        lens[*n_p] = dt == GS_DTYPE_FLOAT64 ? r.in_len[i] : (int64_t)(nbytes[*n_p] / sizeof(double));
        (*n_p)++;
    }
    return GS_OK;
}

gs_status_t fz_block_inputs(const gs_layer_t *l, uint64_t block, int *n_p, int64_t *lens,
                            uint64_t *nbytes)
{
    int n = 0;
    gs_status_t st;
    if (block >= gs_layer_nblocks(l))
        return gs_error_set(GS_ERR_INVALID_PARAM, "block out of range");
    switch (gs_layer_kind(l)) {
    case GS_LAYER_FUSED:
        if ((st = gs__fused_resolve(l, block, &(gs__fres_t){0})) != GS_OK) return st;
        if ((st = fz_fused_inputs(l, block, -1, &n, lens, nbytes)) != GS_OK) return st;
        *n_p = n;
        return GS_OK;
    case GS_LAYER_COMBINE: {
        int64_t nrec = fz_region(&l->grid, block / (uint64_t)l->u.c.ngroups);
        int64_t w = gs_redop_width((gs_redop_t)l->u.c.redop);
        n = gs_layer_ninputs(l, block);
        if (n < 0 || n > GS_KERNEL_MAX_COMBINE)
            FZ_BUG("combine block %llu expects %d inputs", (unsigned long long)block, n);
        for (int i = 0; i < n; i++) lens[i] = nrec * w;
        break;
    }
    case GS_LAYER_LITERAL:
        break;
    case GS_LAYER_COPY:
    case GS_LAYER_STENCIL: {   /* a stencil's inputs are a copy layer's (u.cp) */
        const int64_t *cl = gs__copy_in_lens(l, block);
        const size_t es = gs_dtype_size((gs_dtype_t)l->u.cp.dtype);
        n = gs__copy_ninputs(l, block);
        if (n < 0 || n > GS_KERNEL_MAX_PIECES)
            FZ_BUG("%s block %llu expects %d inputs", gs_layer_name(l), (unsigned long long)block, n);
        if (es == 0) FZ_BUG("%s layer of unknown dtype %d decoded", gs_layer_name(l), (int)l->u.cp.dtype);
        for (int i = 0; i < n; i++) {
            nbytes[i] = (uint64_t)cl[i] * es;
            lens[i] = es == sizeof(double) ? cl[i] : (int64_t)(nbytes[i] / sizeof(double));
        }
        *n_p = n;
        return GS_OK;
    }
    case GS_LAYER_LINALG: {
        const int64_t *ll = gs__la_in_lens(l, block);
        n = gs__la_ninputs(l, block);
        if (n < 0 || n > GS__LA_MAX_INPUTS)
            FZ_BUG("linalg block %llu expects %d inputs", (unsigned long long)block, n);
        for (int i = 0; i < n; i++) lens[i] = ll[i];
        break;
    }
    case GS_LAYER_SCAN: {
        /* in doubles, rounded up: a typed input whose bytes are not a multiple of 8 is then
         * refused by the instantiation (which checks the exact bytes) */
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM], slab = 1, size;
        n = gs__scan_ninputs(l, block);
        gs_grid_block_region(&l->u.sc.src, gs__scan_src_block(l, block), start, shape);
        size = gs_region_size(l->grid.ndim, shape);
        for (int32_t a = 0; a < l->grid.ndim; a++)
            if (a != l->u.sc.axis) slab *= shape[a];
        lens[0] = (size * (int64_t)gs_dtype_size((gs_dtype_t)l->u.sc.in_dtype) + 7) / 8;
        if (n == 2) lens[1] = (slab * (int64_t)gs_dtype_size((gs_dtype_t)l->u.sc.out_dtype) + 7) / 8;
        break;
    }
    case GS_LAYER_SLAB:   /* one input: the chunk the box is cut from */
        n = 1;
        lens[0] = l->u.sl.tab[(int64_t)block * GS__SLAB_W(l->u.sl.nd)];
        break;
    case GS_LAYER_FILE: {
        const gs__fspec_t *f = l->u.file.spec;
        n = gs__file_ninputs(l);
        if (f->op == GS__FILE_WRITE) {   /* the chunk, in the file's dtype */
            nbytes[0] = (uint64_t)fz_region(&l->grid, block) * gs_dtype_size((gs_dtype_t)f->fdtype);
            lens[0] = (int64_t)(nbytes[0] / sizeof(double));
            *n_p = n;
            return GS_OK;
        }
        if (n == 1) lens[0] = 1;         /* COMMIT: the total the writes made */
        break;
    }
    case GS_LAYER_USER: {
        /* the kernel's inputs in order, each a chunk (its ibox length) or, in a fused layer,
         * its producer's inputs; then a fused consumer's inputs but the kernel's output */
        const int32_t nd = l->grid.ndim;
        const gs__ufuse_t *f = l->u.ub.fuse;
        const int64_t k0 = l->u.ub.ioff[block], nk = l->u.ub.ioff[block + 1] - k0;
        for (int64_t k = 0; k < nk; k++) {
            if (f != NULL && f->pre[k] != NULL) {
                if ((st = fz_fused_inputs(f->pre[k], block, -1, &n, lens, nbytes)) != GS_OK)
                    return st;
                continue;
            }
            lens[n] = l->u.ub.ibox[(k0 + k) * (1 + 2 * (int64_t)nd)];
            nbytes[n] = (uint64_t)lens[n] * sizeof(double);
            n++;
        }
        if (f != NULL && f->post != NULL &&
            (st = fz_fused_inputs(f->post, block, f->usrc, &n, lens, nbytes)) != GS_OK)
            return st;
        *n_p = n;
        return GS_OK;
    }
    default:
        return gs_error_set(GS_ERR_UNSUPPORTED, "layer kind %d", (int)gs_layer_kind(l));
    }
    for (int i = 0; i < n; i++) nbytes[i] = (uint64_t)lens[i] * sizeof(double);
    *n_p = n;
    return GS_OK;
}

int fz_file_commit_expect(const gs_layer_t *l, double *expect_p)
{
    if (gs_layer_kind(l) != GS_LAYER_FILE || l->u.file.spec->op != GS__FILE_COMMIT) return 0;
    *expect_p = l->u.file.spec->expect;
    return 1;
}

int64_t fz_block_work(const gs_layer_t *l, uint64_t block)
{
    switch (gs_layer_kind(l)) {
    case GS_LAYER_COMBINE: {
        int n = gs_layer_ninputs(l, block);
        int64_t nrec = fz_region(&l->grid, block / (uint64_t)l->u.c.ngroups);
        return nrec * gs_redop_width((gs_redop_t)l->u.c.redop) * (n + 1);
    }
    case GS_LAYER_LINALG:
        return gs__la_block_work(l, block);
    case GS_LAYER_STENCIL: {   /* the padded block, times the weights */
        int64_t start[GS_MAX_NDIM], shape[GS_MAX_NDIM];
        __int128 w = 1;
        gs_grid_block_region(&l->grid, block, start, shape);
        for (int32_t j = 0; j < l->grid.ndim && w <= INT64_MAX; j++)
            w *= shape[j] + 2 * (int64_t)l->st->radius[j];
        if (w <= INT64_MAX) w *= l->st->nweights > 0 ? l->st->nweights : 1;
        return w > INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)w;
    }
    default:
        return fz_region(&l->grid, block);
    }
}

gs_status_t fz_run_block(const gs_layer_t *l, uint64_t block, int ninputs,
                         const gs_chunk_ref_t *inputs, fz_budget_t *budget, double **out_p)
{
    /* every other run takes the staged (device-like) paths */
    const gs_chunkops_ops_t *ops = (fz_nruns++ & 1) ? &fz_ops_staged : &fz_ops;
    uint64_t out_nbytes;
    int64_t work;
    double *out;
    gs_ktask_t t;
    gs_status_t st;

    *out_p = NULL;
    t.kind = -1;
    if (block >= gs_layer_nblocks(l)) return gs_error_set(GS_ERR_INVALID_PARAM, "block out of range");
    out_nbytes = gs_layer_out_nbytes(l, block);
    work = fz_block_work(l, block);
    if ((int64_t)(out_nbytes / sizeof(double)) > work) work = (int64_t)(out_nbytes / sizeof(double));
    if (work < 1) work = 1;
    if (work > budget->left) return GS_INPROGRESS;
    budget->left -= work;

    out = gs_malloc(out_nbytes > 0 ? (size_t)out_nbytes : 1, "fuzz output");
    if (out == NULL) FZ_BUG("harness out of memory for %llu bytes", (unsigned long long)out_nbytes);
    st = gs_layer_instantiate(l, block, ninputs, inputs, out, &t);
    if (st == GS_OK && (t.kind == GS_KTASK_FILE_READ || t.kind == GS_KTASK_FILE_WRITE ||
                        t.kind == GS_KTASK_FILE_COMMIT) &&
        !fz_file_prepare(&t.u.file, t.kind, fz_nruns))
        st = GS_INPROGRESS;   /* not run: the file would be too large */
    if (st == GS_OK) {
        st = gs_chunkops_run_ktask(ops, fz_ctx, fz_stream, &t);
        if (st == GS_OK) st = ops->sync(fz_ctx, fz_stream);
    }
    if (t.kind == GS_KTASK_FILE_READ || t.kind == GS_KTASK_FILE_WRITE ||
        t.kind == GS_KTASK_FILE_COMMIT)
        fz_dir_clear();
    if (getenv("GS_FUZZ_VERBOSE") != NULL)
        fprintf(stderr, "fuzz: %s block %llu (%s): %s%s%s\n", gs_layer_name(l),
                (unsigned long long)block, ops->name, gs_status_name(st),
                st == GS_OK ? "" : ": ", st == GS_OK ? "" : gs_last_error());
    if (st != GS_OK) {
        gs_free(out);
        return st;
    }
    *out_p = out;
    return GS_OK;
}
