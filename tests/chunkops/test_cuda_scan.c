/* The CUDA SCAN kernels (chunkops/cuda/scan.cu) against the CPU backend's (cpu/cpu_scan.c):
 * random shapes, axes, dtype pairs, both ops and modes, with and without a running total, on
 * lines along inner axes (one thread per line: the same steps in the same order as the CPU, so
 * bit for bit) and long last-axis rows (block-wide scans: integers and bool bit for bit, floats
 * within the rounding of a reordered sum or product). Skips without a device. */
#include "cuda_test_util.h"

#include <gsched/array.h>

TestSuite(chunkops_cuda_scan, .timeout = 300);

static const int dts[] = {GS_DTYPE_FLOAT64, GS_DTYPE_FLOAT32, GS_DTYPE_FLOAT16, GS_DTYPE_INT32,
                          GS_DTYPE_INT64,   GS_DTYPE_UINT8,   GS_DTYPE_BOOL};
enum { NDTS = sizeof(dts) / sizeof(dts[0]) };

static int is_float(int d)
{
    return d == GS_DTYPE_FLOAT64 || d == GS_DTYPE_FLOAT32 || d == GS_DTYPE_FLOAT16;
}

static double eps_of(int d)
{
    return d == GS_DTYPE_FLOAT32 ? 0x1p-23 : d == GS_DTYPE_FLOAT16 ? 0x1p-10 : 0x1p-52;
}

/* The largest finite value and the smallest subnormal of a float dtype. */
static double max_of(int d)
{
    return d == GS_DTYPE_FLOAT32 ? 0x1.fffffep127 : d == GS_DTYPE_FLOAT16 ? 65504.0 : 0x1.fffffffffffffp1023;
}

static double tiny_of(int d)
{
    return d == GS_DTYPE_FLOAT32 ? 0x1p-149 : d == GS_DTYPE_FLOAT16 ? 0x1p-24 : 0x1p-1074;
}

/* @a n elements of dtype @a d at @a h (host) as a host copy widened to doubles. */
static double at(int d, const void *h, int64_t i)
{
    return gs_dtype_to_double((gs_dtype_t)d, (const char *)h + (size_t)i * gs_dtype_size((gs_dtype_t)d));
}

/* Random elements of dtype @a d for op @a op (sums: [-2, 2]; products: near 1; NaN rarely). */
static void *fill(int d, int op, int64_t n, int nan)
{
    const size_t es = gs_dtype_size((gs_dtype_t)d);
    unsigned char *h = malloc((size_t)(n > 0 ? n : 1) * es);
    double *tmp = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    cr_assert(h != NULL && tmp != NULL);
    for (int64_t i = 0; i < n; i++) {
        double v = op == GS_SCAN_SUM ? rndu() * 4.0 - 2.0 : 0.75 + rndu() * 0.5;
        if (!is_float(d)) v = (double)rndr(-3, 3);
        if (d == GS_DTYPE_UINT8) v = (double)rndr(0, 255);
        if (d == GS_DTYPE_BOOL) v = (double)(rndr(0, 4) != 0);
        if (nan && is_float(d) && rndr(0, 200) == 0) v = NAN;
        tmp[i] = v;
    }
    for (int64_t i = 0; i < n; i++) {
        void *p = h + (size_t)i * es;
        switch (d) {
        case GS_DTYPE_FLOAT32: *(float *)p = (float)tmp[i]; break;
        case GS_DTYPE_FLOAT16: *(_Float16 *)p = (_Float16)tmp[i]; break;
        case GS_DTYPE_INT32: *(int32_t *)p = (int32_t)tmp[i]; break;
        case GS_DTYPE_INT64: *(int64_t *)p = (int64_t)tmp[i]; break;
        case GS_DTYPE_UINT8: case GS_DTYPE_BOOL: *(uint8_t *)p = (uint8_t)tmp[i]; break;
        default: *(double *)p = tmp[i]; break;
        }
    }
    free(tmp);
    return h;
}

static void *up(bk_t *b, const void *h, size_t nbytes)
{
    void *d;
    CHECK(GPU->mem_alloc(b->gpu, nbytes, &d));
    if (nbytes > 0) CHECK(GPU->copy_from_host(b->gpu, b->gs, d, h, nbytes));
    CHECK(GPU->sync(b->gpu, b->gs));
    return d;
}

/* Run @a k (host pointers in it) on both backends and compare. */
static void run_both(bk_t *b, gs_kscan_t k, const char *what)
{
    const size_t ies = gs_dtype_size((gs_dtype_t)k.in_dtype), oes = gs_dtype_size((gs_dtype_t)k.out_dtype);
    const int64_t nout = gs_kscan_out_len(&k);
    gs_kscan_t slab = k;
    slab.mode = GS_KSCAN_TOTAL;
    const int64_t nslab = gs_kscan_out_len(&slab);
    void *hc = calloc((size_t)(nout > 0 ? nout : 1), oes), *hg = calloc((size_t)(nout > 0 ? nout : 1), oes);
    cr_assert(hc != NULL && hg != NULL);
    gs_kscan_t kc = k, kg = k;
    kc.out = hc;
    CHECK(CPU->scan(b->cpu, b->cs, &kc));
    void *din = up(b, k.in, (size_t)k.in_len * ies);
    void *dinit = k.init != NULL ? up(b, k.init, (size_t)nslab * oes) : NULL;
    void *dout;
    CHECK(GPU->mem_alloc(b->gpu, (size_t)nout * oes, &dout));
    kg.in = din;
    kg.init = dinit;
    kg.out = dout;
    CHECK(GPU->scan(b->gpu, b->gs, &kg));
    CHECK(GPU->sync(b->gpu, b->gs));
    if (nout > 0) {
        CHECK(GPU->copy_to_host(b->gpu, b->gs, hg, dout, (size_t)nout * oes));
        CHECK(GPU->sync(b->gpu, b->gs));
    }
    /* bound of a reordered float scan: n eps times the scan of |x| (sums) or |result| */
    int64_t inner = 1;
    for (int32_t j = k.axis + 1; j < k.ndim; j++) inner *= k.shape[j];
    /* rows scanned by a block (reordered): long last-axis rows, except float products, which
     * stay left to right (chunkops/cuda/scan.cu) and so must equal the CPU's bits */
    const int rows = inner == 1 && k.shape[k.axis] >= 2 * 256 &&
                     !(k.op == GS_SCAN_PROD && is_float(k.out_dtype));
    double run = 0;   /* SCAN mode: the scan of |x| along the row so far */
    for (int64_t i = 0; i < nout; i++) {
        const double c = at(k.out_dtype, hc, i), g = at(k.out_dtype, hg, i);
        if (rows && k.mode != GS_KSCAN_TOTAL) {
            if (i % k.shape[k.axis] == 0) run = 0;
            run += fabs(at(k.in_dtype, k.in, i));
        }
        if (rows && is_float(k.out_dtype) && (isinf(c) || isinf(g))) {
            /* a reordered sum or product may overflow one element earlier or later */
            const double big = 0.5 * max_of(k.out_dtype);
            cr_assert((isinf(c) || fabs(c) >= big) && (isinf(g) || fabs(g) >= big) &&
                          signbit(c) == signbit(g),
                      "%s: element %lld: cpu %.17g, cuda %.17g", what, (long long)i, c, g);
        } else if (!rows || !is_float(k.out_dtype) || isnan(c) || isnan(g)) {
            cr_assert(bits_equal(c, g), "%s: element %lld: cpu %.17g, cuda %.17g", what,
                      (long long)i, c, g);
        } else {
            const double n = (double)k.shape[k.axis];
            double mag = 0;
            if (k.op == GS_SCAN_SUM) {
                const int64_t row = k.mode == GS_KSCAN_TOTAL ? i : i / k.shape[k.axis];
                if (k.mode == GS_KSCAN_TOTAL)
                    for (int64_t q = 0; q < k.shape[k.axis]; q++)
                        mag += fabs(at(k.in_dtype, k.in, row * k.shape[k.axis] + q));
                else
                    mag = run;
                if (k.init != NULL) mag += fabs(at(k.out_dtype, k.init, row));
            } else {
                mag = fmax(fabs(c), fabs(g));
            }
            /* products may also underflow to 0 or a subnormal in another order */
            cr_assert(fabs(c - g) <= 4.0 * n * eps_of(k.out_dtype) * mag + n * tiny_of(k.out_dtype),
                      "%s: element %lld: cpu %.17g, cuda %.17g", what, (long long)i, c, g);
        }
    }
    GPU->mem_free(b->gpu, din);
    if (dinit != NULL) GPU->mem_free(b->gpu, dinit);
    GPU->mem_free(b->gpu, dout);
    free(hc);
    free(hg);
}

static void one_case(bk_t *b, int nd, const int64_t *shape, int axis, int op, int mode, int in_dt,
                     int out_dt, int with_init)
{
    char what[200];
    gs_kscan_t k;
    memset(&k, 0, sizeof(k));
    k.op = op;
    k.mode = mode;
    k.ndim = nd;
    k.axis = axis;
    for (int j = 0; j < nd; j++) k.shape[j] = shape[j];
    k.in_len = gs_region_size(nd, shape);
    k.in_dtype = in_dt;
    k.out_dtype = out_dt;
    void *in = fill(in_dt, op, k.in_len, 1), *init = NULL;
    k.in = in;
    if (with_init) {
        gs_kscan_t slab = k;
        slab.mode = GS_KSCAN_TOTAL;
        init = fill(out_dt, op, gs_kscan_out_len(&slab), 0);
        k.init = init;
    }
    snprintf(what, sizeof(what), "%s %s %dd axis %d (%lld) %s -> %s%s",
             op == GS_SCAN_SUM ? "sum" : "prod", mode == GS_KSCAN_SCAN ? "scan" : "total", nd,
             axis, (long long)shape[axis], gs_dtype_name((gs_dtype_t)in_dt),
             gs_dtype_name((gs_dtype_t)out_dt), with_init ? " from a carry" : "");
    run_both(b, k, what);
    free(in);
    free(init);
}

Test(chunkops_cuda_scan, matches_the_cpu_kernel_on_random_cases)
{
    bk_t b;
    GPU_OR_SKIP();
    rng_state = 20261128;
    bk_open(&b, (size_t)1 << 30);
    for (int it = 0; it < 300; it++) {
        int64_t shape[3];
        const int nd = (int)rndr(1, 3);
        for (int j = 0; j < nd; j++) shape[j] = rndr(0, 9) == 0 ? 0 : rndr(1, 40);
        const int axis = (int)rndr(0, nd - 1);
        if (rndr(0, 3) == 0) shape[nd - 1] = rndr(512, 3000);   /* long rows: block scans */
        const int in_dt = dts[rndr(0, NDTS - 1)];
        const int out_dt = rndr(0, 1) ? dts[rndr(0, NDTS - 1)]
                           : (is_float(in_dt) ? in_dt : GS_DTYPE_INT64);
        one_case(&b, nd, shape, rndr(0, 1) ? axis : nd - 1, (int)rndr(0, 1), (int)rndr(0, 1), in_dt,
                 out_dt, (int)rndr(0, 1));
    }
    bk_close(&b);
}

Test(chunkops_cuda_scan, long_rows_of_exact_values_agree_bit_for_bit)
{
    bk_t b;
    GPU_OR_SKIP();
    bk_open(&b, (size_t)1 << 30);
    /* integers in float64 sum exactly in any order: the block scan must equal the CPU's */
    const int64_t shape[2] = {3, 100003};
    gs_kscan_t k;
    memset(&k, 0, sizeof(k));
    k.op = GS_SCAN_SUM;
    k.ndim = 2;
    k.axis = 1;
    k.shape[0] = shape[0];
    k.shape[1] = shape[1];
    k.in_len = shape[0] * shape[1];
    k.in_dtype = k.out_dtype = GS_DTYPE_FLOAT64;
    double *in = malloc(sizeof(double) * (size_t)k.in_len), init[3] = {5, -7, 1e6};
    for (int64_t i = 0; i < k.in_len; i++) in[i] = (double)((i * 13) % 17) - 8.0;
    k.in = in;
    for (int m = 0; m < GS_KSCAN_MODE_COUNT; m++)
        for (int wi = 0; wi < 2; wi++) {
            k.mode = m;
            k.init = wi ? init : NULL;
            run_both(&b, k, "exact long rows");
        }
    free(in);
    bk_close(&b);
}

Test(chunkops_cuda_scan, rejects_a_malformed_spec)
{
    bk_t b;
    GPU_OR_SKIP();
    bk_open(&b, (size_t)64 << 20);
    gs_kscan_t k;
    memset(&k, 0, sizeof(k));
    k.ndim = 2;
    k.axis = 2;
    k.shape[0] = k.shape[1] = 2;
    k.in_len = 4;
    cr_assert_eq(GPU->scan(b.gpu, b.gs, &k), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "axis 2") != NULL, "%s", gs_last_error());
    bk_close(&b);
}
