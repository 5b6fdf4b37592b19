/* gs-bench mapblocks: an elementwise user kernel inside a chain (issue 16), fused vs unfused.
 *
 *   x = normal(0, 1, (n, n)) in C x C chunks (a generator: nothing persisted, so both
 *   clients below can compute it); the chain
 *       sum(f(exp(x / 8) + 1) * 2),  f = the kernel (GS_KERNEL_ELEMENTWISE)
 *   is computed by a client lowering with GS_LOWER_FUSE (mode "fused": one task per chunk, the
 *   producers, the kernel and the consumer's partial sum in it) and by a second client on the
 *   same cluster lowering without it (mode "unfused": every step a task of its own, each
 *   chunk stored and read back), and, as the floor, the same chain with the built-in square
 *   in place of the kernel (mode "builtin", fused). f is the test kernel library's gs_test_ew
 *   (out = in^2 + first global row / 1000) on CPU workers, or the same kernel as CUDA C++
 *   source compiled by NVRTC on GPU workers (--kernel cuda; the default with --backend cuda).
 *   The fused and unfused sums must agree within 1e-12 (relative). */
#include "gs-bench.h"

#include "common/token.h"
#include "tests/kernels/test_kernels_cuda.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef GS_BENCH_TEST_KERNELS
#define GS_BENCH_TEST_KERNELS NULL
#endif

static const char gs__mb_cuda_src[] = GS_TEST_EW_CUDA_SRC;

typedef struct gs__mb_opts {
    gs__common_t c;
    int64_t n, chunk;
    const char *kernel;     /* "c" or "cuda" (NULL: by backend) */
    const char *lib, *sym;  /* the C kernel */
} gs__mb_opts_t;

static void gs__mb_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench mapblocks --n N --chunk C [options]\n"
            "sum(f(exp(x / 8) + 1) * 2) for x = normal(0, 1, (N, N)) in C x C chunks and f an\n"
            "elementwise user kernel: fused (one task per chunk), unfused (a second client\n"
            "without GS_LOWER_FUSE) and with the built-in square instead of f.\n"
            "  --n N, --chunk C      array and chunk side (>= 1)\n"
            "  --kernel c|cuda       the C kernel (dlopen) or the CUDA C++ one (NVRTC); default\n"
            "                        cuda with --backend cuda, else c\n"
            "  --kernel-lib PATH     the C kernel's library (default: the test kernel library\n"
            "                        of this build%s)\n"
            "  --kernel-sym NAME     its symbol (default gs_test_ew: out = in^2 + row0 / 1000)\n"
            "  --workers W, --backend cpu|cuda, --scheduler ADDR, --token T, --report FILE,\n"
            "  --repeat R, --seed S  as the other benchmarks\n"
            "Prints one JSON line per timed run: bench, mode (fused|unfused|builtin), n, chunk,\n"
            "workers, backend, kernel, run, seconds, value, tasks, kernel_s, ...\n",
            GS_BENCH_TEST_KERNELS != NULL ? "" : "; none in this build");
}

static int gs__mb_own_arg(int argc, char **argv, int *i, void *ctx)
{
    gs__mb_opts_t *o = ctx;
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(a, "--kernel") != 0 && strcmp(a, "--kernel-lib") != 0 &&
        strcmp(a, "--kernel-sym") != 0)
        return 0;
    if (v == NULL) return gs__bad("%s needs a value", a);
    if (strcmp(a, "--kernel") == 0) {
        if (strcmp(v, "c") != 0 && strcmp(v, "cuda") != 0) return gs__bad("--kernel takes c or cuda");
        o->kernel = v;
    } else if (strcmp(a, "--kernel-lib") == 0) {
        o->lib = v;
    } else {
        o->sym = v;
    }
    (*i)++;
    return 1;
}

static int gs__mb_args(int argc, char **argv, gs__mb_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    o->lib = GS_BENCH_TEST_KERNELS;
    o->sym = "gs_test_ew";
    return gs__nchunk_args(argc, argv, &o->c, &o->n, &o->chunk, gs__mb_usage, gs__mb_own_arg, o,
                           done);
}

/* sum(k(exp(x / 8) + 1) * 2), or with the built-in square when @a k is NULL. */
static gs_status_t gs__mb_chain(gs_array_h x, const gs_user_kernel_t *k, const int64_t *shape,
                                const int64_t *chunks, gs_array_h *out_p)
{
    gs_array_h d = NULL, e = NULL, a = NULL, m = NULL, c = NULL;
    gs_status_t st;
    if ((st = gs_array_binary_scalar(GS_BINARY_DIV, x, 8.0, &d)) != GS_OK ||
        (st = gs_array_unary(GS_UNARY_EXP, d, &e)) != GS_OK ||
        (st = gs_array_binary_scalar(GS_BINARY_ADD, e, 1.0, &a)) != GS_OK)
        goto done;
    st = k != NULL ? gs_array_map_blocks(k, 1, &a, 2, shape, chunks, &m)
                   : gs_array_unary(GS_UNARY_SQUARE, a, &m);
    if (st != GS_OK || (st = gs_array_binary_scalar(GS_BINARY_MUL, m, 2.0, &c)) != GS_OK) goto done;
    st = gs_array_reduce(GS_RED_SUM, c, NULL, out_p);
done:
    gs_array_release(d);
    gs_array_release(e);
    gs_array_release(a);
    gs_array_release(m);
    gs_array_release(c);
    return st;
}

/* One timed run of @a s on @a client: 0 ok (the line printed), 1 failure (printed). */
static int gs__mb_run(gs_client_h client, gs_array_h s, const gs__mb_opts_t *o, const char *mode,
                      const char *kernel, int run, double connect_s, double *value_p)
{
    gs_compute_result_t r;
    gs_compute_stats_t stats;
    gs_status_t st;
    double v = 0, t0 = gs__now(), t;
    memset(&r, 0, sizeof(r));
    r.array = s;
    r.mode = GS_RESULT_GATHER;
    r.out = &v;
    r.out_len = 1;
    if ((st = gs_client_compute_many(client, 1, &r, &stats)) != GS_OK) {
        fprintf(stderr, "%s %s: %s run failed: %s: %s\n", g_prog, g_sub, mode, gs_status_name(st),
                gs_last_error());
        return 1;
    }
    t = gs__now() - t0;
    gs__json_open("mapblocks", "mode", mode);
    gs__json_size(o->n, o->chunk, &o->c);
    gs__json_str("kernel", kernel);
    gs__json_seed_run(&o->c, run);
    gs__json_num("seconds", t);
    gs__json_num("value", v);
    gs__json_run_tail(&stats, 0.0, connect_s, client);
    *value_p = v;
    return 0;
}

int gs__bench_mapblocks(int argc, char **argv)
{
    gs__mb_opts_t o;
    gs_client_h fused = NULL, plain = NULL;
    gs_array_h x = NULL, s = NULL, b = NULL;
    gs_user_kernel_t k;
    gs_client_params_t p;
    double connect_s = 0;
    char token[GS_TOKEN_GENERATED_LEN];
    int rc, done;

    if ((rc = gs__mb_args(argc, argv, &o, &done)) != 0 || done) return rc;
    const int64_t shape[2] = {o.n, o.n}, chunks[2] = {o.chunk, o.chunk};
    o.c.fuse = 1;
    /* a local cluster's token must be known to the second client too: choose it here */
    if (o.c.scheduler == NULL && o.c.token == NULL) {
        if (gs_token_generate(token, sizeof(token)) != GS_OK) {
            fprintf(stderr, "%s %s: %s\n", g_prog, g_sub, gs_last_error());
            return 1;
        }
        o.c.token = token;
    }
    if ((rc = gs__connect(&o.c, &fused, &connect_s)) != 0) goto out;
    if (o.kernel == NULL) o.kernel = o.c.backend != NULL && strcmp(o.c.backend, "cuda") == 0 ? "cuda" : "c";
    memset(&k, 0, sizeof(k));
    k.flags = GS_KERNEL_ELEMENTWISE;
    if (strcmp(o.kernel, "cuda") == 0) {
        k.symbol = "ew";
        k.cuda_source = gs__mb_cuda_src;
    } else {
        if (o.lib == NULL) {
            rc = gs__bad("this build has no test kernel library: give --kernel-lib");
            goto out;
        }
        k.library = o.lib;
        k.symbol = o.sym;
    }
    /* the second client: the same cluster, lowering without fusion */
    memset(&p, 0, sizeof(p));
    p.field_mask = GS_CLIENT_FIELD_LOWER_FLAGS;
    p.address = gs_client_address(fused);
    p.lower_flags = GS_LOWER_DEFAULT & ~GS_LOWER_FUSE;
    if (o.c.token != NULL) {
        p.field_mask |= GS_CLIENT_FIELD_TOKEN;
        p.token = o.c.token;
    }
    if (gs_client_connect(&p, &plain) != GS_OK) {
        fprintf(stderr, "%s %s: the unfused client cannot connect: %s\n", g_prog, g_sub,
                gs_last_error());
        rc = 1;
        goto out;
    }
    rc = 2;
    if (gs_array_random_normal(o.c.seed, 0.0, 1.0, 2, shape, chunks, &x) != GS_OK ||
        gs__mb_chain(x, &k, shape, chunks, &s) != GS_OK ||
        gs__mb_chain(x, NULL, shape, chunks, &b) != GS_OK) {
        gs__cannot_build("the chain");
        goto out;
    }
    rc = 1;
    for (int r = 0; r < o.c.repeat; r++) {
        double vf, vu, vb;
        if (gs__mb_run(fused, s, &o, "fused", o.kernel, r, connect_s, &vf) != 0 ||
            gs__mb_run(plain, s, &o, "unfused", o.kernel, r, connect_s, &vu) != 0 ||
            gs__mb_run(fused, b, &o, "builtin", "square", r, connect_s, &vb) != 0)
            goto out;
        if (!gs__value_ok(r, vf, vu, 1e-12 * fabs(vu))) goto out;
    }
    rc = 0;
out:
    gs_client_destroy(plain);
    gs_client_destroy(fused);
    gs_array_release(b);
    gs_array_release(s);
    gs_array_release(x);
    return rc;
}
