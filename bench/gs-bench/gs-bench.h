/* Shared parts of gs-bench: options every benchmark understands, cluster connection, timing
 * and JSON output. Each benchmark lives in its own file and is listed in main.c's table. */
#ifndef GS_BENCH_GS_BENCH_H
#define GS_BENCH_GS_BENCH_H

#include <gsched/gsched.h>

#include <stdint.h>
#include <stdio.h>

typedef struct gs__common {
    const char *scheduler;   /* NULL: start a local cluster */
    int workers;             /* 0: default */
    const char *backend;     /* NULL: default */
    const char *token;
    const char *tls_ca_file, *tls_cert, *tls_key;  /* --scheduler with TLS (any set: on) */
    const char *dashboard;   /* local cluster: gsched's --dashboard-address (NULL: its default) */
    int fuse, pushdown;
    int random_version;     /* --random N (--random-v2: 2): docs/random.md's normal definition */
    int no_gram;            /* --no-gram: the tall SVD by TSQR (GS_LOWER_GRAM_SVD off) */
    int repeat;
    uint64_t seed;
    uint64_t memory_limit;        /* local cluster: per worker, 0: automatic (spill.c sets it) */
    uint64_t device_memory_limit; /* local cluster: per GPU worker, 0: default */
    int gather_path;              /* --gather-path: GS_GATHER_* (default auto) */
} gs__common_t;

extern const char *g_prog;   /* "gs-bench" */
extern const char *g_sub;    /* the running benchmark's name */
extern const char *g_report; /* --report FILE: the last timed run's report (%d: each run's), or NULL */

/* With --report, save the performance report of @a f's graph to g_report (overwriting: the file
 * ends up holding the last run's; a name with %d gets the graph's number, counted from 0 over
 * the process, so each run keeps its own). 0 on success or without --report, 1 on failure
 * (printed). */
int gs__report_save(gs_client_h client, gs_future_h f);

/* Print "gs-bench <sub>: <message> (see --help)" to stderr; returns 2 (the bad-argument exit). */
int gs__bad(const char *fmt, ...);
/* Monotonic seconds. */
double gs__now(void);
/* Parse an integer option value in [lo, hi]; 0 on error (message printed). */
int gs__int_arg(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *v);
/* The defaults of the options every benchmark understands: fusion and slice pushdown on, one
 * timed run, the token from $GSCHED_TOKEN (the other fields zero). */
void gs__common_defaults(gs__common_t *c);
/* --n N or --chunk C at argv[*i] (1 .. 3037000499, into *n or *chunk): 1 when it was one of them
 * (its value consumed), 0 when not, -1 on a bad value (message printed). */
int gs__nchunk_arg(int argc, char **argv, int *i, int64_t *n, int64_t *chunk);
/* Options every benchmark understands. Returns 1 when argv[*i] was one (consuming its value),
 * 0 when it was not, -1 on a bad value (message printed). */
int gs__common_arg(int argc, char **argv, int *i, gs__common_t *c);
/* "cuda" when this build has CUDA and a GPU is visible, else "cpu". Static string. */
const char *gs__default_backend(void);
/* Connect (starting a local cluster unless --scheduler was given); fills c->workers and
 * c->backend defaults. 0 on success (*client_p owned by the caller), 1 on failure (printed). */
int gs__connect(gs__common_t *c, gs_client_h *client_p, double *connect_s_p);
/* Build x = normal(0, 1, shape) (2-D, seed c->seed) in @a chunks, connect (gs__connect) and
 * persist x, timing the persist. 0 on success (*client_p and *x_p owned by the caller, also on
 * failure when set), 1 on a run failure, 2 when x cannot be built (message printed). */
int gs__connect_persist_normal(gs__common_t *c, const int64_t *shape, const int64_t *chunks,
                               gs_client_h *client_p, gs_array_h *x_p, double *connect_s_p,
                               double *persist_s_p);
/* End a run's JSON line: tasks, submit_s, kernel_s, persist_s, connect_s, scheduler; flush. */
void gs__json_run_tail(const gs_compute_stats_t *st, double persist_s, double connect_s,
                       gs_client_h client);
/* Median of v[0..n) (sorts v). */
double gs__median(double *v, int n);
/* 1 when |v - expected| <= tol; otherwise prints "run R gave V, expected E" and returns 0. */
int gs__value_ok(int run, double v, double expected, double tol);
/* Print ,"gather_path":requested,"path_used":...,"chunks_shm":...: the path that carried the
 * chunks gathered between @a before and @a after (gs_client_gather_stats): "shm", "direct",
 * "relay" or "mixed". */
void gs__json_gather_paths(int requested, const gs_gather_stats_t *before, const gs_gather_stats_t *after);
/* Print ,"key":v (null when not finite). */
void gs__json_num(const char *key, double v);
/* Open a JSON line: {"bench":"<bench>", then ,"<key>":"<value>" when @a key is not NULL. */
void gs__json_open(const char *bench, const char *key, const char *value);
/* Print ,"key":"v" (@a v printed as it is: no escaping). */
void gs__json_str(const char *key, const char *v);
/* Print ,"key":true or ,"key":false. */
void gs__json_bool(const char *key, int v);
/* Print ,"n":N,"chunk":C,"workers":W,"backend":"B" (B "remote" when c->backend is NULL). */
void gs__json_size(int64_t n, int64_t chunk, const gs__common_t *c);
/* Print ,"seed":S,"run":R. */
void gs__json_seed_run(const gs__common_t *c, int run);
/* Print ,"checked":C,"mismatches":M. */
void gs__json_checked(int64_t checked, int64_t mismatches);

/* Print ,"seconds":S,"gb_per_s":(bytes / S / 1e9) (gs__json_num: null when not finite). */
void gs__json_rate(double seconds, double bytes);
/* End a JSON line that has no run tail: "}\n", then flush stdout. */
void gs__json_close(void);

/* Untimed checks. Compute a[sl] (@a nsl slices, gs_array_slice) as float64 (gs_array_astype)
 * into @a buf (@a n values). 0 on success, 1 on failure (printed as "gathering <what> <i>
 * failed"). */
int gs__gather_f64(gs_client_h client, gs_array_h a, int nsl, const gs_slice_t *sl, double *buf,
                   size_t n, const char *what, int64_t i);
/* Count one checked value (@a ok: it matched) in *checked_p and a mismatch in *bad_p. 1 when
 * this is the first mismatch (the caller prints it), else 0. */
int gs__tally(int ok, int64_t *checked_p, int64_t *bad_p);
/* Element @a i of the float64 normal(mean, std) array with @a seed under definition @a version
 * (GS_RANDOM_V1, V2, V3 or GS_RANDOM_DEFAULT, which is V3): the host reference of
 * gs_array_random_normal_version() (what gs__connect_persist_normal builds for --random). */
double gs__normal_at(int version, uint64_t seed, uint64_t i, double mean, double std);
/* @a n float64 normal(0, 1) values of the random definition @a version (as gs__normal_at) with
 * @a seed (elements 0..n-1 of a row-major array), in gs_malloc'd memory the caller frees with
 * gs_free; NULL when there is no memory (@a what names it in the message). */
double *gs__host_normal(int version, uint64_t seed, size_t n, const char *what);

/* Print "cannot build <what>: <last error>" (the program and benchmark first) to stderr;
 * returns 2 (the exit of a result that cannot be built). */
int gs__cannot_build(const char *what);
/* For gs__kept_runs: compare parts of the kept @a y with a reference into *checked_p and
 * *bad_p (0 on success, 1 on failure, printed); print the JSON line of run @a run from "{" to
 * its seconds and rates (@a seconds: the run's time). @a opts: the benchmark's options. */
typedef int (*gs__kept_check_fn)(gs_client_h client, gs_array_h y, const void *opts,
                                 int64_t *checked_p, int64_t *bad_p);
typedef void (*gs__kept_head_fn)(const void *opts, int run, double seconds);
/* @a repeat timed runs of @a y computed and kept on the workers (gs__run_timed with
 * GS_SUBMIT_KEEP); after the last one, untimed, @a check; y is unpersisted after each run.
 * Each run prints one JSON line: @a head, then checked, mismatches and the run tail
 * (gs__json_run_tail with @a persist_s and @a connect_s). 0 on success, 1 on a failed run or
 * check or a mismatch (printed). */
int gs__kept_runs(gs_client_h client, gs_array_h y, int repeat, gs__kept_check_fn check,
                  gs__kept_head_fn head, const void *opts, double persist_s, double connect_s);

/* A benchmark's own option at argv[*i] (for gs__nchunk_args; @a ctx its options): 1 when it
 * was one (*i advanced past its value), 0 when not, any other value on a bad value (message
 * printed, e.g. gs__bad's 2). */
typedef int (*gs__own_arg_fn)(int argc, char **argv, int *i, void *ctx);
/* The argument loop of a benchmark taking --n N and --chunk C (both required): sets the
 * common defaults (gs__common_defaults) and *n = *chunk = -1, then reads --help/-h (@a usage
 * printed to stdout, *done set to 1), --n/--chunk, the benchmark's own options through @a own
 * (NULL: none; tried before the common ones) and the common options. 0 on success (also after
 * --help), 2 on a bad or unknown argument or a missing --n/--chunk (message printed). The
 * caller sets its own options' defaults first. */
int gs__nchunk_args(int argc, char **argv, gs__common_t *c, int64_t *n, int64_t *chunk,
                    void (*usage)(FILE *), gs__own_arg_fn own, void *ctx, int *done);
/* gs__connect_persist_normal for a square x: shape (n, n) in (chunk, chunk) chunks. */
int gs__connect_persist_square(gs__common_t *c, int64_t n, int64_t chunk, gs_client_h *client_p,
                               gs_array_h *x_p, double *connect_s_p, double *persist_s_p);
/* One timed run of @a a: gs_client_submit with @a flags, wait and, when @a out is not NULL,
 * gather @a out_len elements (in a's dtype, as gs_future_gather) into @a out. *seconds_p:
 * submit to the end of the wait or gather; *gather_s_p (may be NULL; set only when gathering):
 * the gather alone; *stats_p: the run's statistics (zeros when unavailable); with --report
 * the run's report is saved (gs__report_save). The future is destroyed before returning.
 * 0 on success, 1 on failure (printed). */
int gs__run_timed(gs_client_h client, gs_array_h a, unsigned flags, double *out, size_t out_len,
                  double *seconds_p, double *gather_s_p, gs_compute_stats_t *stats_p);
/* gs__run_timed of the 0-d @a a, gathered: its value as a double (any dtype) in *v_p. */
int gs__run_scalar(gs_client_h client, gs_array_h a, double *v_p, double *seconds_p,
                   gs_compute_stats_t *stats_p);

/* Benchmarks (one file each). Return 0 ok, 1 run failure, 2 bad arguments. */
int gs__bench_seed(int argc, char **argv);
int gs__bench_tasks(int argc, char **argv);
int gs__bench_transpose_sum(int argc, char **argv);   /* move.c */
int gs__bench_slice3(int argc, char **argv);          /* move.c */
int gs__bench_transfer(int argc, char **argv);        /* transfer.c */
int gs__bench_dot(int argc, char **argv);             /* linalg.c */
int gs__bench_svd(int argc, char **argv);             /* linalg.c */
int gs__bench_soak(int argc, char **argv);            /* soak.c */
int gs__bench_spill(int argc, char **argv);           /* spill.c */
int gs__bench_stencil(int argc, char **argv);         /* stencil.c */
int gs__bench_shape(int argc, char **argv);           /* shape.c */
int gs__bench_io(int argc, char **argv);              /* io.c */
int gs__bench_many(int argc, char **argv);            /* many.c */
int gs__bench_nanred(int argc, char **argv);          /* nanred.c */
int gs__bench_scan(int argc, char **argv);            /* scan.c */
int gs__bench_mapblocks(int argc, char **argv);       /* mapblocks.c */

#endif
