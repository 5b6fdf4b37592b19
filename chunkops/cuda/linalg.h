/**
 * LINALG on the CUDA backend (linalg.c, linalg_kernels.cu): GEMM through cuBLAS, QR and SVD
 * through cuSOLVER. Plain C, no CUDA header, so ctx.c can hook it in.
 *
 * Per stream, a gs__cuda_la holds one cuBLAS and one cuSOLVER handle bound to the stream's
 * CUDA stream, and a pool of pinned completion records; it is made on the stream's first
 * LINALG call (streams that never run one pay nothing) and destroyed with the stream.
 *
 * Scratch memory (the column-major copy of the stack, tau, LAPACK workspace, devInfo) is one
 * block from the context's arena, freed by a stream callback once the work has completed.
 * The devInfo words are copied into the pinned record; the callback checks them and, if one
 * is nonzero, stores the error in *late_err, which the stream's next notify()/sync() reports
 * (the callback also logs the details).
 */
#ifndef GS_CHUNKOPS_CUDA_LINALG_H
#define GS_CHUNKOPS_CUDA_LINALG_H

#include "chunkops/cuda/cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

struct gs__cuda_la;

/** Enqueue validated LINALG spec @a k on @a cuda_stream (a cudaStream_t) of device-current
 *  context. *la_p: the stream's state (created here when NULL; creation is serialised).
 *  @a late_err: an atomic_int of the stream (a C11 _Atomic int), written by the completion
 *  callback. Returns GS_ERR_CUDA / GS_ERR_NO_DEVICE_MEMORY / GS_ERR_NO_MEMORY /
 *  GS_ERR_UNSUPPORTED (a dimension beyond the 32-bit cuBLAS/cuSOLVER API) on enqueue failure. */
gs_status_t gs__cuda_linalg_run(struct gs__cuda_la **la_p, void *cuda_stream,
                                gs__cuda_arena_t *arena, void *late_err, const gs_klinalg_t *k);

/** Destroy a stream's state (NULL allowed). The stream's work must have completed. */
void gs__cuda_la_destroy(struct gs__cuda_la *la);

/** Error conversion at the cuBLAS / cuSOLVER boundary (linalg.c): @a s is a cublasStatus_t /
 *  cusolverStatus_t; ALLOC_FAILED gives GS_ERR_NO_DEVICE_MEMORY, anything else GS_ERR_CUDA,
 *  with @a call named in the message. */
gs_status_t gs__cuda_la_blas_error(int s, const char *call);
gs_status_t gs__cuda_la_solver_error(int s, const char *call);

/* Checked calls inside a function with `gs_status_t st` and a `fail:` label. */
#define GS__LA_BLAS(call)                                                   \
    do {                                                                    \
        cublasStatus_t gs__s = (call);                                      \
        if (gs__s != CUBLAS_STATUS_SUCCESS) {                               \
            st = gs__cuda_la_blas_error((int)gs__s, #call);                 \
            goto fail;                                                      \
        }                                                                   \
    } while (0)

#define GS__LA_SOLVER(call)                                                 \
    do {                                                                    \
        cusolverStatus_t gs__s = (call);                                    \
        if (gs__s != CUSOLVER_STATUS_SUCCESS) {                             \
            st = gs__cuda_la_solver_error((int)gs__s, #call);               \
            goto fail;                                                      \
        }                                                                   \
    } while (0)

#define GS__LA_TRY(expr)                                                    \
    do {                                                                    \
        if ((st = (expr)) != GS_OK) goto fail;                              \
    } while (0)

/** The Gram-path kernels (linalg_gram.c; graph/kernel.h GS_LA_GRAM / APPLY / GSTEP) on a
 *  validated spec, with the stream's cuBLAS (@a blas) and cuSOLVER (@a solver) handles. Each
 *  synchronises @a stream once or twice (to read the state's header, and GSTEP to check its
 *  factorisations): the worker runs them on its launcher thread. Scratch (GSTEP only) comes
 *  from @a arena and is freed before return. GS_ERR_NUMERIC when a factorisation fails. */
gs_status_t gs__cuda_la_gram(void *blas, void *solver, gs__cuda_arena_t *arena, void *stream,
                             const gs_klinalg_t *k);

/** Gram-path layout kernels (linalg_gram_kernels.cu), n x n, on @a stream. mirror: the lower
 *  triangle of column-major @a g from its upper one. tril0: zeros below the diagonal of the
 *  row-major @a r. add_diag: a[i][i] += v. fast_t: t[r][c] = vt[c][r] / s[c] (row-major).
 *  hdr: out[0..GS_LA_STATE_HDR) = h. */
gs_status_t gs__cuda_gram_mirror(void *stream, double *g, int64_t n);
gs_status_t gs__cuda_gram_tril0(void *stream, double *r, int64_t n);
gs_status_t gs__cuda_gram_add_diag(void *stream, double *a, int64_t n, double v);
gs_status_t gs__cuda_gram_fast_t(void *stream, const double *vt, const double *s, int64_t n,
                                 double *t);
gs_status_t gs__cuda_gram_hdr(void *stream, double *out, const double *h);
/** The batched Gram (linalg_gram.c, GS_CUDA_GRAM=batched): blocks of side @a b at column
 *  offsets min(i b, n - b), i < nb; upper pairs p = j (j + 1) / 2 + i (i <= j); slot s holds
 *  npair column-major b x b partial products. ptrs: the device pointer arrays pa/pb/pc of one
 *  cublasDgemmBatched call over @a nslots row slices of @a L rows from row @a row0 of the
 *  row-major @a x (ld), into slots slot0..; entry e = s npair + p. reduce: out (n x n) = the
 *  sum over the first @a nslots slots, both triangles from the upper blocks. */
gs_status_t gs__cuda_gram_ptrs(void *stream, const double *x, int64_t ld, int64_t row0, int64_t L,
                               int b, int nb, int64_t n, int nslots, int slot0, double *slots,
                               double **pa, double **pb, double **pc);
gs_status_t gs__cuda_gram_reduce(void *stream, const double *slots, int nslots, int b, int nb,
                                 int64_t n, double *out);

/** Layout kernels (linalg_kernels.cu). transpose: out[c * ldo + r] = in[r * ldi + c] *
 *  (scale ? scale[r] : 1), r < R, c < C. extract_r: row-major R (ld n, zeros below the
 *  diagonal) from the column-major geqrf result @a a (lda); with fix_signs, row i is negated
 *  where a[i + i * lda] < 0 and sgn[i] (may be NULL) receives -1 or 1. */
gs_status_t gs__cuda_la_transpose(void *stream, const double *in, int64_t ldi, double *out,
                                  int64_t ldo, int64_t R, int64_t C, const double *scale);
gs_status_t gs__cuda_la_extract_r(void *stream, const double *a, int64_t lda, int64_t n,
                                  int fix_signs, double *r_out, double *sgn);

/** CholeskyQR2 helpers (column-major n x n). triu: dst = upper triangle of src (ld lds), zeros
 *  below. gram_dev: out[0] = max over the upper triangle of |g - I| (+inf for NaN).
 *  eig_order: v = eigenvectors e in descending eigenvalue order, s = sqrt(eigenvalues)
 *  descending. scale_cols: w[:, k] /= s[k]; out_ratio[0] = (s[n-1] / s[0])^2. */
gs_status_t gs__cuda_la_triu(void *stream, const double *src, int64_t lds, int64_t n,
                             double *dst);
gs_status_t gs__cuda_la_eye(void *stream, double *a, int64_t n);   /* a = I, column-major */
gs_status_t gs__cuda_la_gram_dev(void *stream, const double *g, int64_t n, double *out);
gs_status_t gs__cuda_la_eig_order(void *stream, const double *e, const double *lam, int64_t n,
                                  double *v, double *s);
gs_status_t gs__cuda_la_scale_cols(void *stream, double *w, const double *s, int64_t n,
                                   double *out_ratio);

#ifdef __cplusplus
}
#endif
#endif
