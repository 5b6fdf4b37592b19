/* Internal declarations of the CPU chunkops backend (chunkops/cpu/). */
#ifndef GS_CHUNKOPS_CPU_H
#define GS_CHUNKOPS_CPU_H

#include "chunkops/chunkops.h"
#include "common/mpool.h"

#include <pthread.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct gs_chunkops_ctx {
    size_t limit;               /* bytes of chunk memory allowed */
    atomic_size_t used;         /* bytes currently allocated (requested sizes) */
    atomic_size_t nallocs;      /* live allocations */
    atomic_int nstreams;        /* live streams */
    int nthreads;
    /* chunks of at most GS__CPU_SMALL bytes (one per tiny task) come from a pool instead of
     * malloc: no allocator call per task, no glibc fastbins to consolidate at large frees */
    pthread_mutex_t small_lock;
    gs_mpool_t small;           /* under small_lock */
    /* params.test_lose_device_on (tests only): the emulated sticky device error */
    const char *lose_on;        /* NULL: off */
    atomic_int lost;            /* 0; 1 while lost_why is written; 2 once it is */
    char lost_why[512];
};

struct gs_chunkops_stream {
    gs_chunkops_ctx_h ctx;
};

/* GS_OK, or GS_ERR_DEVICE_LOST naming the cause when the context was lost (test_lose_device_on):
 * every op checks it first, as every call of a CUDA context fails after a sticky error. */
gs_status_t gs__cpu_lost(gs_chunkops_ctx_h ctx);

/* Kernels: the spec has been validated. GS_ERR_NO_MEMORY if scratch space cannot be had. */
gs_status_t gs__cpu_fused_run(const gs_kfused_t *k);
void gs__cpu_combine_run(const gs_kcombine_t *k);
void gs__cpu_copy_run(const gs_kcopy_t *k);
/* STENCIL (cpu_stencil.c); GS_ERR_NO_MEMORY without room for the padded block. */
gs_status_t gs__cpu_stencil_run(const gs_kstencil_t *k);
/* SCAN (cpu_scan.c) on a validated spec. */
void gs__cpu_scan_run(const gs_kscan_t *k);
/* A user kernel (cpu_user.c): resolve @a sym in @a lib (cached), call it in a forked child with
 * the output in shared memory, copy the output into out->data. GS_ERR_NOT_FOUND (library or
 * symbol), GS_ERR_TASK_FAILED (the kernel crashed or exited), GS_ERR_NO_MEMORY,
 * GS_ERR_NO_RESOURCE (fork). */
gs_status_t gs__cpu_user_call(const char *lib, const char *sym, const gs_block_t *in, int nin,
                              gs_block_t *out, const void *arg);
/* LINALG (cpu_linalg.c): the vtable entry (validates), and the BLAS thread count set at
 * context creation from params.nthreads. */
gs_status_t gs__cpu_linalg(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                           const gs_klinalg_t *k);
void gs__cpu_linalg_threads(int nthreads);
/* GRAM, APPLY and GSTEP (cpu_linalg_gram.c) on a validated spec. */
gs_status_t gs__cpu_linalg_gram(const gs_klinalg_t *k);

/* Batched random generation: out[i] = gs_random_normal(seed, idx[i], mean, std) (resp.
 * uniform), identical to the scalar definition in chunkops/random.h. */
void gs__cpu_random_normal(uint64_t seed, const uint64_t *idx, int n, double mean, double std,
                           double *out);
/* Version 2 normals (gs_random_normal_v2): out[i] for idx[i], bit-identical to the scalar
 * definition; adjacent pairs (2k, 2k + 1) in idx share one block and one transform. */
/* Version 3 normals (gs_random_normal_v3), as gs__cpu_random_normal_v2: elements i and i + 2 of
 * a group of four met one after the other (stride 2) or as a whole group (stride 1) share their
 * pair's block and transform. */
void gs__cpu_random_normal_v3(uint64_t seed, const uint64_t *idx, int n, double mean, double std,
                              double *out);
void gs__cpu_random_normal_v2(uint64_t seed, const uint64_t *idx, int n, double mean, double std,
                              double *out);
void gs__cpu_random_uniform(uint64_t seed, const uint64_t *idx, int n, double low, double high,
                            double *out);

#endif
