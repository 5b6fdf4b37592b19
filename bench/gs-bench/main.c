/* gs-bench: benchmarks through the public client API. One JSON line per measurement on stdout;
 * diagnostics on stderr. Bad arguments exit with status 2 and a message naming the problem;
 * failures of the run exit with status 1.
 *
 *   gs-bench seed --n N --chunk C [--workers W] [--backend cpu|cuda] [--no-fuse] [--no-pushdown]
 *                 [--dtype float64|float32]
 *                 [--scheduler tcp://host:port] [--repeat R] [--seed S] [--token T]
 *   gs-bench tasks --tasks N [--shape independent|tree] [--split-every K] [--elems E]
 *                 [--workers W] [--backend cpu|cuda] [--scheduler tcp://host:port] [--repeat R]
 *   gs-bench transpose-sum --n N --chunk C [common options]   (x persisted; times (x + x.T).sum())
 *   gs-bench slice3 --n N --chunk C [common options]          (x persisted; times x[::3] gathered)
 *   gs-bench transfer [--sizes 8,80,800] [--backend cpu|cuda] [--workers 2] [--repeat R]
 *   gs-bench dot --n N --chunk C [common options]             (x persisted; times x @ x persisted)
 *   gs-bench svd --rows R --cols C --chunk K [common options] (x persisted; times u of svd(x))
 *   gs-bench soak [--jobs 300] [--every 25] [--warmup 50] [--n 1024] [--rss-growth 10]
 *                 [--workers W] [--backend cpu|cuda]       (local cluster; RSS / fds of daemons)
 *   gs-bench spill --factor F [--limit-mb M] [--chunk C] [common options]
 *                 (x of F times the workers' memory persisted, spilling; then x.sum())
 *   gs-bench stencil --n N --chunk C [--boundary B] [common options]
 *                 (x persisted; times the 3x3 smoothing kept; a single-threaded C loop too)
 *   gs-bench io --format npy|raw|zarr [--codec none|zstd|blosc] --n N --chunk C [common options]
 *                 (x written to a file by the workers, read back, checked; beside dd)
 *   gs-bench mapblocks --n N --chunk C [--kernel c|cuda] [common options]
 *                 (an elementwise user kernel in a chain: fused, unfused, built-in square)
 *
 * Subcommands live in one table (gs__benches), one file each; each parses its own options with
 * the shared helpers of gs-bench.h and reports through gs__json_*. */
#include "gs-bench.h"

#include <gsched/config.h>

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */

typedef struct gs__bench {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} gs__bench_t;

static const gs__bench_t gs__benches[] = {
    {"seed", gs__bench_seed, "(normal(10,1,(n,n)) + 1)[::2, ::2].sum() on a cluster"},
    {"tasks", gs__bench_tasks, "N tiny tasks (independent or a fan-in tree): tasks/s end to end"},
    {"transpose-sum", gs__bench_transpose_sum, "(x + x.T).sum() on a persisted normal (n, n) x"},
    {"slice3", gs__bench_slice3, "x[::3] of a persisted normal (n, n) x gathered to the client"},
    {"transfer", gs__bench_transfer, "chunk bandwidth between two workers (replicate), 8..800 MB"},
    {"dot", gs__bench_dot, "x @ x of a persisted normal (n, n) x, kept on the workers"},
    {"svd", gs__bench_svd, "u of the TSQR svd of a persisted tall normal (rows, cols) x"},
    {"soak", gs__bench_soak, "300 mixed jobs (one failing) on one cluster: daemon RSS and fds flat?"},
    {"spill", gs__bench_spill, "persist F x the workers' memory limit (spilling), then sum: GB/s"},
    {"stencil", gs__bench_stencil, "x persisted; time the 3x3 smoothing stencil(x) kept: GB/s"},
    {"io", gs__bench_io, "write x to npy/raw/zarr from the workers, read it back: GB/s beside dd"},
    {"many", gs__bench_many, "3 results sharing exp(x): one compute_many vs 3 computes"},
    {"shape", gs__bench_shape, "reshape/ravel/tril/diag/eye of a persisted normal (n, n) x, summed"},
    {"mapblocks", gs__bench_mapblocks, "an elementwise user kernel in a chain: fused vs unfused"},
    {"nanred", gs__bench_nanred, "sum, prod, any, nansum, nanmean, nanmax... of a persisted x with NaN"},
    {"scan", gs__bench_scan, "x persisted; time cumsum(x, axis) (or cumprod) kept: GB/s"},
};

static void gs__usage(FILE *f)
{
    fprintf(f, "usage: gs-bench <benchmark> [options]   (gs-bench <benchmark> --help)\n"
               "       gs-bench --version\n"
               "benchmarks:\n");
    for (size_t i = 0; i < sizeof(gs__benches) / sizeof(gs__benches[0]); i++)
        fprintf(f, "  %-14s %s\n", gs__benches[i].name, gs__benches[i].what);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        gs__usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        gs__usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("gs-bench %s\n", GS_VERSION_DESCRIPTION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(gs__benches) / sizeof(gs__benches[0]); i++) {
        if (strcmp(argv[1], gs__benches[i].name) == 0) {
            g_sub = gs__benches[i].name;
            return gs__benches[i].run(argc - 2, argv + 2);
        }
    }
    fprintf(stderr, "gs-bench: unknown benchmark '%s'\n", argv[1]);
    gs__usage(stderr);
    return 2;
}
