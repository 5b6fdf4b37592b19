/* Helpers shared by the libFuzzer targets in tests/fuzz (see README.md).
 *
 * The targets are white-box tests: they include graph/graph_internal.h to learn the exact input
 * sizes a layer block expects, so that blocks can be run against inputs of exactly the right
 * length in separately allocated buffers (any out-of-bounds read or write is then an
 * AddressSanitizer report, not silent slack inside a backend arena). */
#ifndef GS_TESTS_FUZZ_UTIL_H
#define GS_TESTS_FUZZ_UTIL_H

#include "graph/taskgraph.h"

#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>

/** Abort (a libFuzzer crash) with a message: a broken contract, not a rejected input. */
#define FZ_BUG(...) fz_bug(__FILE__, __LINE__, __VA_ARGS__)
void fz_bug(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));

/** Quiet logging, CPU backend context and stream (created once per process). */
void fz_init(void);

/** Deterministic PRNG seeded from the input (xorshift64*). */
typedef struct fz_rng {
    uint64_t s;
} fz_rng_t;
void fz_rng_seed(fz_rng_t *r, const uint8_t *data, size_t len);
uint64_t fz_rng_next(fz_rng_t *r);

/** Work budget, in elements touched, that one fuzz input may spend running kernels. */
typedef struct fz_budget {
    int64_t left;
} fz_budget_t;

/* 1 when @a l is a fused layer that reads no chunks (generators only): gs_layer_ninputs() gives
 * 0 for every block without resolving it (graph/layer.c: the per-task cost of tiny tasks), so a
 * block whose addressing is bad is refused when it is instantiated, not by gs_layer_ninputs(). */
int fz_generator_only(const gs_layer_t *l);
/** Expected inputs of block @a block of @a l, every layer kind: *n_p inputs (at most
 *  GS_KERNEL_MAX_COMBINE entries) of exactly nbytes[i] bytes each, lens[i] doubles as a worker
 *  counts them (nbytes / 8; for float64 inputs the element count). GS_OK, or an error when the
 *  layer cannot resolve the block. */
gs_status_t fz_block_inputs(const gs_layer_t *l, uint64_t block, int *n_p, int64_t *lens,
                            uint64_t *nbytes);

/** 1 when @a l is a FILE COMMIT layer, with the total its input must carry for the commit to
 *  go ahead (*expect_p); 0 otherwise. */
int fz_file_commit_expect(const gs_layer_t *l, double *expect_p);

/** Elements a block's kernel touches (its region, or inputs + output for COMBINE). */
int64_t fz_block_work(const gs_layer_t *l, uint64_t block);

/** Instantiate block @a block of @a l with @a inputs and an output buffer of exactly
 *  gs_layer_out_nbytes() bytes (*out_p, gs_malloc'ed, caller frees with gs_free; NULL when not
 *  run), then run it on the CPU backend (every other call through its staged, device-like
 *  paths: no user op, so users' CPU kernels are staged, and files go through staging buffers).
 *  Users' code never runs: the fuzz targets link with --wrap=gs__cpu_user_call and a CUDA
 *  source goes to the harness's cuda_user op; both check the kernel's view of its blocks and
 *  touch every element instead. FILE tasks run with their paths replaced by names in a private
 *  temporary directory (emptied after each task, removed at exit); one whose file would exceed
 *  16 MiB is not run. Returns the status of instantiate or of the kernel;
 *  GS_INPROGRESS (nothing run) when the work exceeds @a budget. Aborts if the kernel writes
 *  nothing sensible where the contract says it must succeed. */
gs_status_t fz_run_block(const gs_layer_t *l, uint64_t block, int ninputs,
                         const gs_chunk_ref_t *inputs, fz_budget_t *budget, double **out_p);

#endif
