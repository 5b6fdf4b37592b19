/* gs-kbench: CUDA kernel micro-benchmarks of the chunkops "cuda" backend.
 *
 * Prints one JSON line per measurement:
 *   {"bench":"kbench","what":"...","ms":<median>,"min_ms":...,"gelem_per_s":...,...}
 * Times are GPU times between CUDA events around each repetition (after warm-up runs; the
 * device is kept busy so host launch gaps stay out), reported as the median over --reps.
 *
 * Measured:
 *   fused_seed_v1         one 10000^2 chunk of a normal array (version-1 normals) sliced
 *                         [::2, ::2] (25M elements generated), +1, summed: one fused kernel (the
 *                         seed workload as it was with random version 1; the default is now
 *                         version 3, fused_seed_v3, and version 4 in float32, fused_seed_f32_v4)
 *   fused_seed_rowsum / _colsum   the same with the sum over axis 1 / axis 0
 *   fused_seed_tiles, sum_1e8_tiles   fused_seed_v1 and sum_1e8 with the flat walk switched off
 *                         (gs_cuda_set_flat_walk): the tile kernels, for comparison
 *   unfused_generate, unfused_add, unfused_slice, unfused_reduce, unfused_total
 *                         the same computation as separate STORE kernels through memory
 *   philox_normal, philox_uniform   generation rate with no memory traffic (summed)
 *   philox_normal_store   generation of the full chunk stored (1e8 doubles)
 *   sum_1e8               sum of 1e8 float64 read from memory
 *   typed_cast_f64_to_f32, typed_sum_f32   dtypes: 1e8 float64 cast and stored as float32;
 *                         the float32 array summed (staged as float64, then the float64 sum)
 *   d2d_memcpy            cudaMemcpyAsync device to device (GB/s counts bytes read + written)
 *   copy_kernel           the COPY kernel on the same bytes
 *   stencil_3x3           STENCIL: a 3x3 smoothing of one interior n x n chunk (its halo in
 *                         8 pieces); GB/s counts the chunk read and written once
 *   dgemm_10000           LINALG GEMM 10000 x 10000 x 10000 (cuBLAS), TFLOP/s = 2 m n k / time
 *   qr_250000x1000        LINALG QR of a 250000 x 1000 stack (4 pieces): geqrf + orgqr + layout
 *                         kernels; TFLOP/s counts 4 m n^2 - 4/3 n^3
 *   gram_250000x1000      LINALG GRAM (the default: batched block GEMMs over row slices;
 *                         TFLOP/s counts m n^2) of the QR's block; _blocked_, _gemm_, _syrk_:
 *                         the same with GS_CUDA_GRAM=blocked (one GEMM per upper block, the
 *                         default before session 13) / gemm / syrk; _strided_: the batched
 *                         slots filled by strided-batched GEMMs; gram_b<B>_s<S>_...: batched
 *                         with GS_CUDA_GRAM_BLOCK=B, GS_CUDA_GRAM_SPLIT=S
 *   gstep1_1000           GSTEP step 1 on that Gram matrix (the fast path: eigen-decomposition)
 *   apply_trsm_250000x1000, apply_gemm_250000x1000   APPLY as X T^-1 (m n^2) and X T (2 m n^2)
 *   dot_task_10000x4      a gs-bench dot task: GEMM of 4 terms 10000^3 summed
 *   dgemm_10000x16        16 terms in one call: the sustained GEMM rate
 *   svd_1000x1000, svd_20000x1000, svd_2000x2000   LINALG SVD (QR, then the n x n SVD and a
 *                         GEMM); "svd_method" names the cuSOLVER routine (GS_CUDA_SVD)
 *   The LINALG lines are timed one run at a time (GPU events around each) and also give enqueue_ms (host time of the linalg() call: a blocking library
 *   call shows here) and wall_ms (enqueue to sync, one run). They run in a context of their
 *   own (about 7 GB of device memory); --no-linalg skips them, --linalg-only runs only them.
 *   fused_seed_v2, philox_normal_v2   fused_seed_v1 and philox_normal with version-2 normals
 *   fused_seed_v3, philox_normal_v3   the same with version-3 normals
 *   fused_seed_f32_v1, fused_seed_f32_v3, fused_seed_f32_v4   fused_seed_v1 in float32 (the typed
 *                         kernels): float32 normals of version 1 / version 3 (pairs at distance
 *                         2) / version 4 (a stride-2 row reads whole blocks), + 1 in float32,
 *                         cast to float64 and summed; a _check line with ok false if the sum is
 *                         not near the count
 *   transpose_sum, transpose_sum_flat   (x + x.T).sum() over one 10000^2 chunk pair (x.T read
 *                         transposed): the transposed-tile kernel, and with it switched off
 * Every line carries its hardware limit (issue 19): limit_ms = the largest of bytes moved at
 * 4.3 TB/s, flops at the FP64 peak of 67 TFLOP/s (H200 / H100 SXM) and normals generated at
 * cuRAND's Philox float64 rate of 173 G/s ("limit_by" names which), and limit_ratio = ms /
 * limit_ms (1.0 = at the limit). --limits BW_TB_S,FP64_TFLOP_S,NORMAL_G_S sets other peaks.
 * Without a CUDA build or device it prints one line {"bench":"kbench","what":"skipped",...}
 * and exits 0.
 *
 * Usage: gs-kbench [--reps N] [--warmup N] [--device D] [--size N] [--no-linalg | --linalg-only]
 *                  [--only NAME,NAME...] [--limits BW_TB_S,FP64_TFLOP_S,NORMAL_G_S]
 * --only times just the named kernels (the set-up of the others still runs). */
#include "chunkops/chunkops.h"
#include "common/error.h"

#include <gsched/config.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if GS_HAVE_CUDA
#include "chunkops/cuda/cuda_backend.h"
#endif

static void skipped(const char *reason)
{
    printf("{\"bench\":\"kbench\",\"what\":\"skipped\",\"reason\":\"%s\"}\n", reason);
}

#if GS_HAVE_CUDA

typedef struct kb {
    const gs_chunkops_ops_t *ops;
    gs_chunkops_ctx_h ctx;
    gs_chunkops_stream_h s;
    gs_cuda_timer_h timer;
    int reps, warmup;
    char device[128];
    int failures;
    double lim_normals;         /* normals the next printed line generates (reset after it) */
    double lim_flops;           /* flops of the next printed line (reset after it) */
    const char *only;           /* --only: comma-separated names to time, NULL = all */
} kb_t;

/* The peaks a line is set beside (--limits): bytes/s, FP64 flop/s, normals/s. */
static double kb_peak_bytes = 4.3e12, kb_peak_flops = 67e12, kb_peak_normals = 173e9;

typedef gs_status_t (*kb_fn)(kb_t *kb, const void *arg);

static gs_status_t kb_fused(kb_t *kb, const void *arg)
{
    return kb->ops->fused(kb->ctx, kb->s, arg);
}

static gs_status_t kb_copy(kb_t *kb, const void *arg)
{
    return kb->ops->copy(kb->ctx, kb->s, arg);
}

static gs_status_t kb_stencil(kb_t *kb, const void *arg)
{
    return kb->ops->stencil(kb->ctx, kb->s, arg);
}

typedef struct memcpy_arg {
    void *dst;
    const void *src;
    size_t nbytes;
} memcpy_arg_t;

static gs_status_t kb_memcpy(kb_t *kb, const void *arg)
{
    const memcpy_arg_t *m = arg;
    return gs_cuda_memcpy_d2d(kb->ctx, kb->s, m->dst, m->src, m->nbytes);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void kb_fail(kb_t *kb, const char *what, gs_status_t st)
{
    printf("{\"bench\":\"kbench\",\"what\":\"%s\",\"error\":\"%s: %s\"}\n", what,
           gs_status_name(st), gs_last_error());
    kb->failures++;
}

/* Median and minimum GPU milliseconds of fn(arg). 0 on success. */
static int kb_time(kb_t *kb, const char *what, kb_fn fn, const void *arg, double *med_p,
                   double *min_p)
{
    gs_status_t st;
    double *ms = malloc(sizeof(double) * (size_t)kb->reps);
    for (int i = 0; i < kb->warmup; i++)
        if ((st = fn(kb, arg)) != GS_OK) goto fail;
    if ((st = kb->ops->sync(kb->ctx, kb->s)) != GS_OK) goto fail;
    /* one untimed run in front keeps the device busy while the timed ones are enqueued */
    if ((st = fn(kb, arg)) != GS_OK) goto fail;
    if ((st = gs_cuda_timer_mark(kb->timer, kb->s, 0)) != GS_OK) goto fail;
    for (int r = 0; r < kb->reps; r++) {
        if ((st = fn(kb, arg)) != GS_OK) goto fail;
        if ((st = gs_cuda_timer_mark(kb->timer, kb->s, r + 1)) != GS_OK) goto fail;
    }
    for (int r = 0; r < kb->reps; r++)
        if ((st = gs_cuda_timer_elapsed_ms(kb->timer, r, r + 1, &ms[r])) != GS_OK) goto fail;
    if ((st = kb->ops->sync(kb->ctx, kb->s)) != GS_OK) goto fail;
    qsort(ms, (size_t)kb->reps, sizeof(double), cmp_double);
    *med_p = kb->reps % 2 ? ms[kb->reps / 2] : 0.5 * (ms[kb->reps / 2 - 1] + ms[kb->reps / 2]);
    *min_p = ms[0];
    free(ms);
    return 0;
fail:
    kb_fail(kb, what, st);
    free(ms);
    return -1;
}

static void kb_print(kb_t *kb, const char *what, double med, double min, double elems,
                     double bytes, const char *extra)
{
    printf("{\"bench\":\"kbench\",\"what\":\"%s\",\"ms\":%.4f,\"min_ms\":%.4f", what, med, min);
    if (elems > 0) printf(",\"gelem_per_s\":%.2f", elems / (med * 1e-3) / 1e9);
    if (bytes > 0) printf(",\"gbytes_per_s\":%.1f", bytes / (med * 1e-3) / 1e9);
    /* the hardware limit: the slowest of moving the bytes, doing the flops, making the normals */
    double lb = bytes > 0 ? bytes / kb_peak_bytes : 0.0, lf = kb->lim_flops / kb_peak_flops,
           ln = kb->lim_normals / kb_peak_normals;
    double lim = lb;
    const char *by = "bytes";
    if (lf > lim) lim = lf, by = "flops";
    if (ln > lim) lim = ln, by = "normals";
    if (lim > 0)
        printf(",\"limit_ms\":%.4f,\"limit_by\":\"%s\",\"limit_ratio\":%.2f", lim * 1e3, by,
               med / (lim * 1e3));
    kb->lim_normals = kb->lim_flops = 0.0;
    printf(",\"reps\":%d,\"device\":\"%s\"%s}\n", kb->reps, kb->device, extra ? extra : "");
    fflush(stdout);
}

static double kb_measure(kb_t *kb, const char *what, kb_fn fn, const void *arg, double elems,
                         double bytes, const char *extra)
{
    double med, min;
    if (kb->only != NULL) { /* a name in the comma-separated list? */
        size_t n = strlen(what);
        const char *q = kb->only;
        while ((q = strstr(q, what)) != NULL && !((q == kb->only || q[-1] == ',') && (q[n] == ',' || q[n] == 0)))
            q += n;
        if (q == NULL) {
            kb->lim_normals = kb->lim_flops = 0;
            return NAN;
        }
    }
    if (kb_time(kb, what, fn, arg, &med, &min) != 0) return NAN;
    kb_print(kb, what, med, min, elems, bytes, extra);
    return med;
}

/* A fused spec over a 2-D region. */
static void spec2(gs_kfused_t *k, int64_t rows, int64_t cols, double *out)
{
    memset(k, 0, sizeof(*k));
    k->ndim = 2;
    k->shape[0] = rows;
    k->shape[1] = cols;
    k->nleaves = 1;
    k->nprog = 1;
    k->prog[0].op = GS_OP_LEAF;
    k->prog[0].arg = 0;
    k->terminal = GS_TERM_STORE;
    k->red_axis = -1;
    k->out = out;
}

static void leaf_random(gs_kleaf_t *lf, int kind, int64_t base, int64_t s0, int64_t s1)
{
    memset(lf, 0, sizeof(*lf));
    lf->kind = kind;
    lf->seed = 0x5eedull;
    lf->base = base;
    lf->stride[0] = s0;
    lf->stride[1] = s1;
    lf->p0 = kind == GS_LEAF_UNIFORM ? -1.0 : 0.0;
    lf->p1 = 1.0;
}

static void leaf_chunk(gs_kleaf_t *lf, const double *data, int64_t len, int64_t s0, int64_t s1)
{
    memset(lf, 0, sizeof(*lf));
    lf->kind = GS_LEAF_CHUNK;
    lf->data = data;
    lf->data_len = len;
    lf->stride[0] = s0;
    lf->stride[1] = s1;
}

static void add_imm(gs_kfused_t *k, double v)
{
    k->prog[k->nprog].op = GS_OP_ADD_IMM;
    k->prog[k->nprog].imm = v;
    k->nprog++;
}

static void reduce(gs_kfused_t *k, int redop, int axis)
{
    k->terminal = GS_TERM_REDUCE;
    k->redop = redop;
    k->red_axis = axis;
}

static int kb_read_scalar(kb_t *kb, const double *dev, double *v)
{
    gs_status_t st = kb->ops->copy_to_host(kb->ctx, kb->s, v, dev, sizeof(double));
    if (st == GS_OK) st = kb->ops->sync(kb->ctx, kb->s);
    if (st != GS_OK) {
        kb_fail(kb, "read_result", st);
        return -1;
    }
    return 0;
}

static gs_status_t kb_linalg(kb_t *kb, const void *arg)
{
    return kb->ops->linalg(kb->ctx, kb->s, arg);
}

static double kb_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* One LINALG measurement: GPU-timed repetitions, then the host enqueue time and the
 * enqueue-to-sync time of one more run. */
static void kb_linalg_one(kb_t *kb, const char *what, const gs_klinalg_t *k, double flops)
{
    gs_status_t st;
    double med, min;
    char extra[256];
    const char *method = getenv("GS_CUDA_SVD");
    if ((st = kb->ops->sync(kb->ctx, kb->s)) != GS_OK) {
        kb_fail(kb, what, st);
        return;
    }
    /* repetitions one at a time: each QR/SVD holds its scratch until it completes, so
     * back-to-back enqueues of the big cases would not fit the arena */
    double ms[16];
    int reps = kb->reps < 16 ? kb->reps : 16;
    for (int w = 0; w < kb->warmup; w++)
        if ((st = kb_linalg(kb, k)) != GS_OK || (st = kb->ops->sync(kb->ctx, kb->s)) != GS_OK) {
            kb_fail(kb, what, st);
            return;
        }
    for (int r = 0; r < reps; r++) {
        if ((st = gs_cuda_timer_mark(kb->timer, kb->s, 0)) != GS_OK ||
            (st = kb_linalg(kb, k)) != GS_OK ||
            (st = gs_cuda_timer_mark(kb->timer, kb->s, 1)) != GS_OK ||
            (st = gs_cuda_timer_elapsed_ms(kb->timer, 0, 1, &ms[r])) != GS_OK ||
            (st = kb->ops->sync(kb->ctx, kb->s)) != GS_OK) {
            kb_fail(kb, what, st);
            return;
        }
    }
    qsort(ms, (size_t)reps, sizeof(double), cmp_double);
    med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    min = ms[0];
    /* then one more run on the host clock: enqueue time (after warm-up and lazy loading) */
    double t0 = kb_now_ms();
    if ((st = kb_linalg(kb, k)) != GS_OK) {
        kb_fail(kb, what, st);
        return;
    }
    double t1 = kb_now_ms();
    if ((st = kb->ops->sync(kb->ctx, kb->s)) != GS_OK) {
        kb_fail(kb, what, st);
        return;
    }
    double t2 = kb_now_ms();
    int n = snprintf(extra, sizeof(extra), ",\"enqueue_ms\":%.3f,\"wall_ms\":%.3f", t1 - t0,
                     t2 - t0);
    if (flops > 0)
        n += snprintf(extra + n, sizeof(extra) - (size_t)n, ",\"tflop_per_s\":%.2f",
                      flops / (med * 1e-3) / 1e12);
    if (k->op == GS_LA_SVD)
        snprintf(extra + n, sizeof(extra) - (size_t)n, ",\"svd_method\":\"%s\"",
                 method != NULL && strcmp(method, "gesvd") == 0 ? "gesvd" : "gesvdj");
    kb->lim_flops = flops;
    kb_print(kb, what, med, min, 0, 0, extra);
}

/* Fill dev (rows x cols) with standard normals through a fused STORE kernel. */
static gs_status_t kb_fill_normal(kb_t *kb, double *dev, int64_t rows, int64_t cols, int64_t salt)
{
    gs_kfused_t k;
    spec2(&k, rows, cols, dev);
    leaf_random(&k.leaves[0], GS_LEAF_NORMAL, salt * rows * cols, cols, 1);
    return kb->ops->fused(kb->ctx, kb->s, &k);
}

static gs_kmat_t kb_view(const double *d, int64_t rows, int64_t cols, int64_t off, int trans)
{
    gs_kmat_t v = {.data = d, .len = off + rows * cols, .off = off, .rows = rows, .cols = cols,
                   .ld = cols, .trans = trans};
    return v;
}

/* The Gram-path kernels on one 250000 x 1000 block @a A (its Gram matrix, outputs into @a B):
 * GRAM (SYRK), GSTEP step 1 (eigen-decomposition: the fast path), APPLY as a GEMM and as a
 * triangular solve, and the same block copied (what a pass-through would cost). */
static gs_status_t kb_gram_all(kb_t *kb, double *A, double *B, int64_t m, int64_t n)
{
    const int64_t slen = GS_LA_STATE_LEN(n);
    double *S = NULL, *S2 = NULL, *hostT = NULL, hdr[GS_LA_STATE_HDR] = {0};
    gs_klinalg_t k;
    gs_status_t st;
    if ((st = kb->ops->mem_alloc(kb->ctx, (size_t)slen * sizeof(double), (void **)&S)) != GS_OK ||
        (st = kb->ops->mem_alloc(kb->ctx, (size_t)slen * sizeof(double), (void **)&S2)) != GS_OK ||
        (st = kb_fill_normal(kb, A, m, n, 3)) != GS_OK) {
        kb_fail(kb, "gram_setup", st);
        goto out;
    }
    memset(&k, 0, sizeof(k));
    k.op = GS_LA_GRAM;
    k.m = m;
    k.n = n;
    k.nterms = 1;
    k.a[0] = kb_view(A, m, n, 0, 0);
    k.out = B;
    kb_linalg_one(kb, "gram_250000x1000", &k, (double)m * (double)n * (double)n);
    setenv("GS_CUDA_GRAM", "blocked", 1);
    kb_linalg_one(kb, "gram_blocked_250000x1000", &k, (double)m * (double)n * (double)n);
    setenv("GS_CUDA_GRAM", "strided", 1);
    kb_linalg_one(kb, "gram_strided_250000x1000", &k, (double)m * (double)n * (double)n);
    unsetenv("GS_CUDA_GRAM");
    for (int bs = 128; bs <= 256; bs *= 2)
        for (int sp = 4; sp <= 64; sp *= 2) {
            char name[64], v[16];
            snprintf(name, sizeof(name), "gram_b%d_s%d_250000x1000", bs, sp);
            snprintf(v, sizeof(v), "%d", bs);
            setenv("GS_CUDA_GRAM_BLOCK", v, 1);
            snprintf(v, sizeof(v), "%d", sp);
            setenv("GS_CUDA_GRAM_SPLIT", v, 1);
            kb_linalg_one(kb, name, &k, (double)m * (double)n * (double)n);
        }
    unsetenv("GS_CUDA_GRAM_BLOCK");
    unsetenv("GS_CUDA_GRAM_SPLIT");
    setenv("GS_CUDA_GRAM", "gemm", 1);
    kb_linalg_one(kb, "gram_gemm_250000x1000", &k, (double)m * (double)n * (double)n);
    setenv("GS_CUDA_GRAM", "syrk", 1);
    kb_linalg_one(kb, "gram_syrk_250000x1000", &k, (double)m * (double)n * (double)n);
    unsetenv("GS_CUDA_GRAM");
    memset(&k, 0, sizeof(k));   /* B holds A^T A: step 1 takes the fast path (kappa ~ 1.07) */
    k.op = GS_LA_GSTEP;
    k.m = m;
    k.n = n;
    k.nterms = 1;
    k.alpha = 1.0;
    k.a[0] = kb_view(B, n, n, 0, 0);
    k.out = S;
    kb_linalg_one(kb, "gstep1_1000", &k, 0);
    /* a state with T upper triangular (I + 1e-3 above the diagonal), applied both ways */
    hostT = malloc((size_t)(n * n) * sizeof(double));
    if (hostT == NULL) {
        st = GS_ERR_NO_MEMORY;
        kb_fail(kb, "gram_setup", st);
        goto out;
    }
    for (int64_t i = 0; i < n * n; i++) hostT[i] = i / n == i % n ? 1.0 : i / n < i % n ? 1e-3 : 0.0;
    for (int how = GS_LA_APPLY_TRSM; how <= GS_LA_APPLY_GEMM; how++) {
        hdr[GS_LA_H_APPLY] = how;
        if ((st = kb->ops->copy_from_host(kb->ctx, kb->s, S2, hdr, sizeof(hdr))) != GS_OK ||
            (st = kb->ops->copy_from_host(kb->ctx, kb->s, S2 + GS_LA_STATE_T(n), hostT,
                                          (size_t)(n * n) * sizeof(double))) != GS_OK) {
            kb_fail(kb, "gram_setup", st);
            goto out;
        }
        memset(&k, 0, sizeof(k));
        k.op = GS_LA_APPLY;
        k.m = m;
        k.n = n;
        k.nterms = 1;
        k.a[0] = kb_view(A, m, n, 0, 0);
        k.b[0] = kb_view(S2, 1, slen, 0, 0);
        k.out = B;
        kb_linalg_one(kb, how == GS_LA_APPLY_TRSM ? "apply_trsm_250000x1000" : "apply_gemm_250000x1000",
                      &k, (how == GS_LA_APPLY_TRSM ? 1.0 : 2.0) * (double)m * (double)n * (double)n);
    }
    st = GS_OK;
out:
    free(hostT);
    kb->ops->mem_free(kb->ctx, S);
    kb->ops->mem_free(kb->ctx, S2);
    return st;
}

/* The LINALG benchmarks, in a context of their own. Returns the number of failures. */
static int kb_linalg_all(int device, int reps, int warmup)
{
    kb_t kb;
    gs_status_t st;
    memset(&kb, 0, sizeof(kb));
    kb.reps = reps < 5 ? reps : 5;
    kb.warmup = warmup < 1 ? warmup : 1;
    if (gs_chunkops_find("cuda", &kb.ops) != GS_OK) return 0;
    const int64_t G = 10000, QM = 250000, QN = 1000;
    const size_t gb = (size_t)(G * G) * sizeof(double);
    const size_t qa = (size_t)(QM * QN) * sizeof(double);
    const size_t qo = (size_t)gs_klinalg_out_len(GS_LA_SVD, QM, QN) * sizeof(double);
    gs_chunkops_params_t params = {0};
    params.device = device;
    params.memory_limit = qa + qo + qa + ((size_t)1 << 30); /* input, out, scratch */
    double *A = NULL, *B = NULL;
    if ((st = kb.ops->ctx_create(&params, &kb.ctx)) != GS_OK) {
        kb_fail(&kb, "linalg_ctx_create", st);
        return 1;
    }
    if ((st = kb.ops->stream_create(kb.ctx, &kb.s)) != GS_OK ||
        (st = gs_cuda_timer_create(kb.ctx, kb.reps + 1, &kb.timer)) != GS_OK ||
        (st = gs_cuda_device_describe(kb.ctx, kb.device, sizeof(kb.device), NULL)) != GS_OK ||
        (st = kb.ops->mem_alloc(kb.ctx, qa > gb ? qa : gb, (void **)&A)) != GS_OK ||
        (st = kb.ops->mem_alloc(kb.ctx, qo > gb ? qo : gb, (void **)&B)) != GS_OK) {
        kb_fail(&kb, "linalg_setup", st);
        goto done;
    }
    gs_klinalg_t k;

    /* GEMM 10000^3: A (row-major) times A^T into B, random normal A */
    if ((st = kb_fill_normal(&kb, A, G, G, 1)) != GS_OK) {
        kb_fail(&kb, "dgemm_10000", st);
        goto done;
    }
    memset(&k, 0, sizeof(k));
    k.op = GS_LA_GEMM;
    k.m = k.n = G;
    k.alpha = 1.0;
    k.nterms = 1;
    k.a[0] = kb_view(A, G, G, 0, 0);
    k.b[0] = kb_view(A, G, G, 0, 1);
    k.out = B;
    kb_linalg_one(&kb, "dgemm_10000", &k, 2.0 * (double)G * (double)G * (double)G);

    /* QR of a 250000 x 1000 stack of 4 pieces of one chunk */
    if ((st = kb_fill_normal(&kb, A, QM, QN, 2)) != GS_OK) {
        kb_fail(&kb, "qr_250000x1000", st);
        goto done;
    }
    memset(&k, 0, sizeof(k));
    k.op = GS_LA_QR;
    k.m = QM;
    k.n = QN;
    k.nterms = 4;
    for (int t = 0; t < 4; t++) {
        k.a[t] = kb_view(A, QM / 4, QN, (int64_t)t * (QM / 4) * QN, 0);
        k.a[t].len = QM * QN;
    }
    k.out = B;
    double fq = 4.0 * (double)QM * (double)QN * (double)QN - 4.0 / 3.0 * (double)QN * QN * QN;
    kb_linalg_one(&kb, "qr_250000x1000", &k, fq);

    if (kb_gram_all(&kb, A, B, QM, QN) != GS_OK) goto done;

    /* a dot task (4 GEMMs of 10000^3 summed) and 16 in one call (sustained rate) */
    for (int nt = 4; nt <= 16; nt *= 4) {
        memset(&k, 0, sizeof(k));
        k.op = GS_LA_GEMM;
        k.m = k.n = G;
        k.alpha = 1.0;
        k.nterms = nt;
        for (int t = 0; t < nt; t++) {
            k.a[t] = kb_view(A, G, G, 0, 0);
            k.b[t] = kb_view(A, G, G, G * G, 0);
        }
        kb_fill_normal(&kb, A, 2 * G, G, 5);
        k.out = B;
        kb_linalg_one(&kb, nt == 4 ? "dot_task_10000x4" : "dgemm_10000x16", &k,
                      2.0 * nt * (double)G * (double)G * (double)G);
    }

    /* SVDs */
    static const struct { const char *what; int64_t m, n; } svds[] = {
        {"svd_1000x1000", 1000, 1000}, {"svd_20000x1000", 20000, 1000},
        {"svd_2000x2000", 2000, 2000}};
    for (int i = 0; i < 3; i++) {
        memset(&k, 0, sizeof(k));
        k.op = GS_LA_SVD;
        k.m = svds[i].m;
        k.n = svds[i].n;
        k.nterms = 1;
        k.a[0] = kb_view(A, k.m, k.n, 0, 0);
        k.out = B;
        kb_linalg_one(&kb, svds[i].what, &k, 0);
    }

done:
    if (kb.s != NULL) (void)kb.ops->sync(kb.ctx, kb.s);
    kb.ops->mem_free(kb.ctx, A);
    kb.ops->mem_free(kb.ctx, B);
    gs_cuda_timer_destroy(kb.timer);
    if (kb.s != NULL) kb.ops->stream_destroy(kb.ctx, kb.s);
    kb.ops->ctx_destroy(kb.ctx);
    return kb.failures;
}

static int run(int argc, char **argv)
{
    kb_t kb;
    gs_status_t st;
    int device = 0, linalg = 1, linalg_only = 0;
    int64_t n = 10000; /* chunk side */
    memset(&kb, 0, sizeof(kb));
    kb.reps = 30;
    kb.warmup = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) kb.reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) kb.warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = atoi(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) n = atoll(argv[++i]);
        else if (strcmp(argv[i], "--no-linalg") == 0) linalg = 0;
        else if (strcmp(argv[i], "--linalg-only") == 0) linalg_only = 1;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) kb.only = argv[++i];
        else if (strcmp(argv[i], "--limits") == 0 && i + 1 < argc &&
                 sscanf(argv[i + 1], "%lf,%lf,%lf", &kb_peak_bytes, &kb_peak_flops,
                        &kb_peak_normals) == 3 && kb_peak_bytes > 0 && kb_peak_flops > 0 &&
                 kb_peak_normals > 0) {
            kb_peak_bytes *= 1e12;
            kb_peak_flops *= 1e12;
            kb_peak_normals *= 1e9;
            i++;
        }
        else {
            fprintf(stderr,
                    "usage: %s [--reps N] [--warmup N] [--device D] [--size N] "
                    "[--no-linalg | --linalg-only] [--only NAME,NAME...] "
                    "[--limits BW_TB_S,FP64_TFLOP_S,NORMAL_G_S] | "
                    "--version\n",
                    argv[0]);
            return 2;
        }
    }
    if (kb.reps < 1 || kb.warmup < 0 || n < 2 || n % 2 != 0) {
        fprintf(stderr, "gs-kbench: --reps >= 1, --warmup >= 0, --size even and >= 2\n");
        return 2;
    }
    if ((st = gs_chunkops_find("cuda", &kb.ops)) != GS_OK) {
        skipped("the cuda backend is not built");
        return 0;
    }
    if (gs_chunkops_cuda_device_count() <= device) {
        skipped("no CUDA device");
        return 0;
    }
    if (linalg_only) return kb_linalg_all(device, kb.reps, kb.warmup) ? 1 : 0;

    const int64_t N = n * n, h = n / 2, H = h * h;
    const size_t big = (size_t)N * sizeof(double), small = (size_t)H * sizeof(double);
    gs_chunkops_params_t params = {0};
    params.device = device;
    params.memory_limit = 2 * big + small + ((size_t)64 << 20);
    if ((st = kb.ops->ctx_create(&params, &kb.ctx)) != GS_OK) {
        kb_fail(&kb, "ctx_create", st);
        return 1;
    }
    double *A = NULL, *B = NULL, *C = NULL, *out = NULL;
    if ((st = kb.ops->stream_create(kb.ctx, &kb.s)) != GS_OK ||
        (st = gs_cuda_timer_create(kb.ctx, kb.reps + 1, &kb.timer)) != GS_OK ||
        (st = gs_cuda_device_describe(kb.ctx, kb.device, sizeof(kb.device), NULL)) != GS_OK ||
        (st = kb.ops->mem_alloc(kb.ctx, big, (void **)&A)) != GS_OK ||
        (st = kb.ops->mem_alloc(kb.ctx, big, (void **)&B)) != GS_OK ||
        (st = kb.ops->mem_alloc(kb.ctx, small, (void **)&C)) != GS_OK ||
        (st = kb.ops->mem_alloc(kb.ctx, ((size_t)64 << 20) - 4096, (void **)&out)) != GS_OK) {
        kb_fail(&kb, "setup", st);
        goto done;
    }

    /* the chunk: rows/cols [n, 2n) of a 50n-column global array (the 2 TB seed array is made
     * of such chunks); the slice [::2, ::2] of the chunk keeps every other row and column */
    const int64_t gcols = 50 * n, base = n * gcols + n;
    gs_kfused_t k;
    char extra[224];

    /* fused seed: normal -> [::2, ::2] -> +1 -> sum */
    spec2(&k, h, h, out);
    leaf_random(&k.leaves[0], GS_LEAF_NORMAL, base, 2 * gcols, 2);
    add_imm(&k, 1.0);
    reduce(&k, GS_RED_SUM, -1);
    kb.lim_normals = (double)H;
    double t_fused = kb_measure(&kb, "fused_seed_v1", kb_fused, &k, (double)H, 0, NULL);
    double fused_sum = NAN, tiles_sum = NAN;
    if (kb_read_scalar(&kb, out, &fused_sum) != 0) goto done;
    (void)gs_cuda_set_flat_walk(kb.ctx, 0);
    kb.lim_normals = (double)H;
    kb_measure(&kb, "fused_seed_tiles", kb_fused, &k, (double)H, 0, NULL);
    (void)gs_cuda_set_flat_walk(kb.ctx, 1);
    if (kb_read_scalar(&kb, out, &tiles_sum) != 0) goto done;
    reduce(&k, GS_RED_SUM, 1);
    kb.lim_normals = (double)H;
    kb_measure(&kb, "fused_seed_rowsum", kb_fused, &k, (double)H, 0, NULL);
    reduce(&k, GS_RED_SUM, 0);
    kb.lim_normals = (double)H;
    kb_measure(&kb, "fused_seed_colsum", kb_fused, &k, (double)H, 0, NULL);
    /* the same with version-2 normals */
    reduce(&k, GS_RED_SUM, -1);
    k.leaves[0].kind = GS_LEAF_NORMAL_V2;
    kb.lim_normals = (double)H;
    kb_measure(&kb, "fused_seed_v2", kb_fused, &k, (double)H, 0, NULL);
    /* and version 3 (x[::2] meets both halves of every pair: the pair kernels) */
    k.leaves[0].kind = GS_LEAF_NORMAL_V3;
    kb.lim_normals = (double)H;
    kb_measure(&kb, "fused_seed_v3", kb_fused, &k, (double)H, 0, NULL);
    /* the float32 seed (gs-bench seed --dtype float32): float32 normals + 1 in float32, cast to
     * float64 and summed (the typed chain kernels of fused_typed.cu), with the version-1 and
     * the version-3 and the version-4 float32 normals (docs/random.md sections 8, 11, 12) */
    for (int fv = 0; fv < 3; fv++) {
        static const int32_t fkind[3] = {GS_LEAF_NORMAL_F32, GS_LEAF_NORMAL_F32_V3,
                                         GS_LEAF_NORMAL_F32_V4};
        static const char *const fwhat[3] = {"fused_seed_f32_v1", "fused_seed_f32_v3",
                                             "fused_seed_f32_v4"};
        spec2(&k, h, h, out);
        leaf_random(&k.leaves[0], fkind[fv], base, 2 * gcols, 2);
        k.prog[0].dtype = GS_DTYPE_FLOAT32;
        add_imm(&k, 1.0);
        k.prog[1].dtype = GS_DTYPE_FLOAT32;
        k.prog[2].op = GS_OP_CAST;
        k.prog[2].dtype = GS_DTYPE_FLOAT32;
        k.prog[2].arg = GS_DTYPE_FLOAT64;
        k.nprog = 3;
        reduce(&k, GS_RED_SUM, -1);
        const char *what = fwhat[fv];
        kb.lim_normals = (double)H;
        const double f32_ms = kb_measure(&kb, what, kb_fused, &k, (double)H, 0, NULL);
        double f32_sum = NAN;
        if (kb_read_scalar(&kb, out, &f32_sum) != 0) goto done;
        if (!isnan(f32_ms) && !(fabs(f32_sum - (double)H) < 10.0 * sqrt((double)H))) {
            printf("{\"bench\":\"kbench\",\"what\":\"%s_check\",\"sum\":%.17g,"
                   "\"count\":%lld,\"ok\":false}\n", what, f32_sum, (long long)H);
            kb.failures++;
        }
    }

    /* unfused: generate the whole chunk, +1, slice, reduce, each through memory */
    double t_total = 0.0;
    spec2(&k, n, n, A);
    leaf_random(&k.leaves[0], GS_LEAF_NORMAL, base, gcols, 1);
    kb.lim_normals = (double)N;
    t_total += kb_measure(&kb, "unfused_generate", kb_fused, &k, (double)N, (double)big, NULL);
    spec2(&k, n, n, B);
    leaf_chunk(&k.leaves[0], A, N, n, 1);
    add_imm(&k, 1.0);
    t_total += kb_measure(&kb, "unfused_add", kb_fused, &k, (double)N, 2.0 * (double)big, NULL);
    spec2(&k, h, h, C);
    leaf_chunk(&k.leaves[0], B, N, 2 * n, 2);
    t_total += kb_measure(&kb, "unfused_slice", kb_fused, &k, (double)H, 2.0 * (double)small, NULL);
    spec2(&k, h, h, out);
    leaf_chunk(&k.leaves[0], C, H, h, 1);
    reduce(&k, GS_RED_SUM, -1);
    t_total += kb_measure(&kb, "unfused_reduce", kb_fused, &k, (double)H, (double)small, NULL);
    double unfused_sum = NAN;
    if (kb_read_scalar(&kb, out, &unfused_sum) != 0) goto done;
    if (!isnan(t_total) && !isnan(t_fused)) { /* (not when --only left one out) */
        double rel = fabs(fused_sum - unfused_sum) / fmax(fabs(unfused_sum), 1e-300);
        double rel_tiles = fabs(tiles_sum - unfused_sum) / fmax(fabs(unfused_sum), 1e-300);
        int ok = rel <= 1e-9 && rel_tiles <= 1e-9 && fabs(fused_sum - (double)H) < 10.0 * sqrt((double)H);
        snprintf(extra, sizeof(extra),
                 ",\"fused_sum\":%.17g,\"unfused_sum\":%.17g,\"rel_diff\":%.3g,"
                 "\"rel_diff_tiles\":%.3g,\"ok\":%s,\"fusion_speedup\":%.2f",
                 fused_sum, unfused_sum, rel, rel_tiles, ok ? "true" : "false", t_total / t_fused);
        kb_print(&kb, "unfused_total", t_total, t_total, (double)H, 0, extra);
        if (!ok) kb.failures++;
    }

    /* generation rates: the whole chunk summed (no stores), and stored */
    spec2(&k, n, n, out);
    leaf_random(&k.leaves[0], GS_LEAF_NORMAL, base, gcols, 1);
    reduce(&k, GS_RED_SUM, -1);
    kb.lim_normals = (double)N;
    kb_measure(&kb, "philox_normal", kb_fused, &k, (double)N, 0, NULL);
    leaf_random(&k.leaves[0], GS_LEAF_NORMAL_V2, base, gcols, 1);
    kb.lim_normals = (double)N;
    kb_measure(&kb, "philox_normal_v2", kb_fused, &k, (double)N, 0, NULL);
    leaf_random(&k.leaves[0], GS_LEAF_NORMAL_V3, base, gcols, 1);
    kb.lim_normals = (double)N;
    kb_measure(&kb, "philox_normal_v3", kb_fused, &k, (double)N, 0, NULL);
    leaf_random(&k.leaves[0], GS_LEAF_UNIFORM, base, gcols, 1);
    kb_measure(&kb, "philox_uniform", kb_fused, &k, (double)N, 0, NULL);
    spec2(&k, n, n, A);
    leaf_random(&k.leaves[0], GS_LEAF_NORMAL, base, gcols, 1);
    kb.lim_normals = (double)N;
    kb_measure(&kb, "philox_normal_store", kb_fused, &k, (double)N, (double)big, NULL);

    /* memory: a sum of 1e8 float64, device-to-device copies */
    spec2(&k, n, n, out);
    leaf_chunk(&k.leaves[0], A, N, n, 1);
    reduce(&k, GS_RED_SUM, -1);
    kb_measure(&kb, "sum_1e8", kb_fused, &k, (double)N, (double)big, NULL);
    (void)gs_cuda_set_flat_walk(kb.ctx, 0);
    kb_measure(&kb, "sum_1e8_tiles", kb_fused, &k, (double)N, (double)big, NULL);
    (void)gs_cuda_set_flat_walk(kb.ctx, 1);
    /* (x + x.T).sum() over one chunk pair: A's chunk and B's read transposed (every output
     * chunk of gs-bench transpose-sum is one such kernel) */
    spec2(&k, n, n, out);
    k.nleaves = 2;
    leaf_chunk(&k.leaves[0], A, N, n, 1);
    leaf_chunk(&k.leaves[1], B, N, 1, n);
    k.nprog = 3;
    k.prog[1].op = GS_OP_LEAF;
    k.prog[1].arg = 1;
    k.prog[2].op = GS_OP_ADD;
    reduce(&k, GS_RED_SUM, -1);
    const double ts_ms = kb_measure(&kb, "transpose_sum", kb_fused, &k, (double)N, 2.0 * (double)big, NULL);
    double ts_tiles = NAN, ts_flat = NAN;
    if (kb_read_scalar(&kb, out, &ts_tiles) != 0) goto done;
    (void)gs_cuda_set_transpose_tiles(kb.ctx, 0);
    const double tf_ms = kb_measure(&kb, "transpose_sum_flat", kb_fused, &k, (double)N, 2.0 * (double)big, NULL);
    (void)gs_cuda_set_transpose_tiles(kb.ctx, 1);
    if (kb_read_scalar(&kb, out, &ts_flat) != 0) goto done;
    if (!isnan(ts_ms) && !isnan(tf_ms) && !(fabs(ts_tiles - ts_flat) <= 1e-9 * fmax(1.0, fabs(ts_flat)) * sqrt((double)N))) {
        printf("{\"bench\":\"kbench\",\"what\":\"transpose_sum_check\",\"tiles\":%.17g,"
               "\"flat\":%.17g,\"ok\":false}\n", ts_tiles, ts_flat);
        kb.failures++;
    }
    /* dtypes (fused_typed.cu): 1e8 float64 cast to float32 and stored; the float32 array
     * summed (a typed reduction: staged as float64, then the float64 sum) */
    spec2(&k, n, n, out);
    leaf_chunk(&k.leaves[0], A, N, n, 1);
    k.prog[1].op = GS_OP_CAST;
    k.prog[1].arg = GS_DTYPE_FLOAT32;
    k.nprog = 2;
    k.out = B;
    k.out_dtype = GS_DTYPE_FLOAT32;
    kb_measure(&kb, "typed_cast_f64_to_f32", kb_fused, &k, (double)N, 1.5 * (double)big, NULL);
    spec2(&k, n, n, out);
    leaf_chunk(&k.leaves[0], B, N, n, 1);
    k.leaves[0].dtype = GS_DTYPE_FLOAT32;
    k.prog[0].dtype = GS_DTYPE_FLOAT32;
    k.prog[1].op = GS_OP_CAST;
    k.prog[1].dtype = GS_DTYPE_FLOAT32;
    k.prog[1].arg = GS_DTYPE_FLOAT64;
    k.nprog = 2;
    reduce(&k, GS_RED_SUM, -1);
    kb_measure(&kb, "typed_sum_f32", kb_fused, &k, (double)N, 0.5 * (double)big, NULL);
    memcpy_arg_t m = {B, A, big};
    kb_measure(&kb, "d2d_memcpy", kb_memcpy, &m, (double)N, 2.0 * (double)big, NULL);
    gs_kcopy_t *kc = calloc(1, sizeof(*kc));
    kc->ndim = 2;
    kc->shape[0] = kc->shape[1] = n;
    kc->npieces = 1;
    kc->pieces[0].src = A;
    kc->pieces[0].src_len = N;
    kc->pieces[0].src_stride[0] = n;
    kc->pieces[0].src_stride[1] = 1;
    kc->pieces[0].size[0] = kc->pieces[0].size[1] = n;
    kc->out = B;
    kb_measure(&kb, "copy_kernel", kb_copy, kc, (double)N, 2.0 * (double)big, NULL);
    kc->pieces[0].src_stride[0] = 1; /* a transposing copy */
    kc->pieces[0].src_stride[1] = n;
    kb_measure(&kb, "copy_kernel_transpose", kb_copy, kc, (double)N, 2.0 * (double)big, NULL);
    free(kc);
    /* STENCIL (issue 16): one interior n x n chunk of a 3x3 smoothing, its halo as 8 pieces
     * (edge slabs and corners, read from C); gbytes_per_s counts the chunk read + written */
    gs_kstencil_t *ks = calloc(1, sizeof(*ks));
    static const double w9[9] = {1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9,
                                 1.0 / 9, 1.0 / 9, 1.0 / 9, 1.0 / 9};
    ks->ndim = 2;
    ks->shape[0] = ks->shape[1] = n;
    ks->radius[0] = ks->radius[1] = 1;
    ks->nweights = 9;
    ks->weights = w9;
    ks->out = B;
    for (int pi = 0; pi < 9; pi++) {
        const int r = pi / 3, c = pi % 3;
        gs_kpiece_t *pc = &ks->pieces[ks->npieces++];
        pc->dst_start[0] = r == 0 ? 0 : r == 1 ? 1 : n + 1;
        pc->dst_start[1] = c == 0 ? 0 : c == 1 ? 1 : n + 1;
        pc->size[0] = r == 1 ? n : 1;
        pc->size[1] = c == 1 ? n : 1;
        if (r == 1 && c == 1) {
            pc->src = A;
            pc->src_len = N;
            pc->src_stride[0] = n;
            pc->src_stride[1] = 1;
        } else {
            pc->src = C;
            pc->src_len = (int64_t)(small / sizeof(double));
            pc->src_stride[0] = r == 1 ? 1 : 0;
            pc->src_stride[1] = c == 1 ? 1 : 0;
        }
    }
    kb_measure(&kb, "stencil_3x3", kb_stencil, ks, (double)N, 2.0 * (double)big, NULL);
    free(ks);

done:
    if (kb.ctx != NULL) {
        if (kb.s != NULL) (void)kb.ops->sync(kb.ctx, kb.s);
        kb.ops->mem_free(kb.ctx, A);
        kb.ops->mem_free(kb.ctx, B);
        kb.ops->mem_free(kb.ctx, C);
        kb.ops->mem_free(kb.ctx, out);
        gs_cuda_timer_destroy(kb.timer);
        if (kb.s != NULL) kb.ops->stream_destroy(kb.ctx, kb.s);
        kb.ops->ctx_destroy(kb.ctx);
    }
    if (linalg) kb.failures += kb_linalg_all(device, kb.reps, kb.warmup);
    return kb.failures ? 1 : 0;
}

#else /* !GS_HAVE_CUDA */

static int run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    skipped("gsched was built without CUDA");
    return 0;
}

#endif

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("gs-kbench %s\n", GS_VERSION_DESCRIPTION);
        return 0;
    }
    return run(argc, argv);
}
