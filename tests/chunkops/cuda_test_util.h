/* Helpers shared by the CUDA-vs-CPU backend tests (test_cuda.c, test_cuda_ops.c): a
 * deterministic random source, bitwise comparison, and a CPU + GPU backend pair with device
 * upload/download; GPU_OR_SKIP and CHECK come from cuda_test_check.h. Test-only; every function
 * is static inline. */
#ifndef GS_TESTS_CHUNKOPS_CUDA_TEST_UTIL_H
#define GS_TESTS_CHUNKOPS_CUDA_TEST_UTIL_H

#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunkops/chunkops.h"
#include "chunkops/cuda/cuda_backend.h"
#include "chunkops/random.h"
#include "common/alloc.h"
#include "cuda_test_check.h"

/* ------------------------------------------------------------------ helpers ---- */

static uint64_t rng_state;

static inline uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline int64_t rndr(int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static inline double rndu(void)
{
    return (double)(rnd() >> 11) * 0x1.0p-53;
}

static inline int bits_equal(double a, double b)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return a == b;
}

static const gs_chunkops_ops_t *const CPU = &gs_chunkops_cpu_ops;
static const gs_chunkops_ops_t *const GPU = &gs_chunkops_cuda_ops;

typedef struct bk {
    gs_chunkops_ctx_h cpu, gpu;
    gs_chunkops_stream_h cs, gs;
} bk_t;

static inline void bk_open(bk_t *b, size_t gpu_limit)
{
    gs_chunkops_params_t pc = {0}, pg = {0};
    pc.memory_limit = (size_t)4 << 30;
    pg.device = 0;
    pg.memory_limit = gpu_limit;
    CHECK(CPU->ctx_create(&pc, &b->cpu));
    CHECK(CPU->stream_create(b->cpu, &b->cs));
    CHECK(GPU->ctx_create(&pg, &b->gpu));
    CHECK(GPU->stream_create(b->gpu, &b->gs));
}

static inline void bk_close(bk_t *b)
{
    size_t used;
    CHECK(GPU->sync(b->gpu, b->gs));
    GPU->mem_usage(b->gpu, &used, NULL);
    cr_assert_eq(used, 0, "device memory leaked by the test: %zu bytes", used);
    GPU->stream_destroy(b->gpu, b->gs);
    GPU->ctx_destroy(b->gpu);
    CPU->stream_destroy(b->cpu, b->cs);
    CPU->ctx_destroy(b->cpu);
}

static inline double *dev_upload(bk_t *b, const double *h, int64_t n)
{
    void *d;
    CHECK(GPU->mem_alloc(b->gpu, (size_t)n * sizeof(double), &d));
    CHECK(GPU->copy_from_host(b->gpu, b->gs, d, h, (size_t)n * sizeof(double)));
    CHECK(GPU->sync(b->gpu, b->gs));
    return d;
}

static inline double *dev_alloc_poisoned(bk_t *b, int64_t n)
{
    double *h = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) h[i] = -12345.678; /* poison: every element must be written */
    double *d = dev_upload(b, h, n);
    free(h);
    return d;
}

static inline void dev_download(bk_t *b, double *h, const double *d, int64_t n)
{
    CHECK(GPU->copy_to_host(b->gpu, b->gs, h, d, (size_t)n * sizeof(double)));
    CHECK(GPU->sync(b->gpu, b->gs));
}

#endif
