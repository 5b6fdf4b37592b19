/* The CUDA SCAN kernels (graph/kernel.h gs_kscan_t) and their entry point gs__cuda_scan
 * (cuda_internal.h). A block [outer][n][inner] around the axis is scanned one of two ways:
 *   lines  one thread per line (a position of the other axes), walking the axis; threads of a
 *          warp take adjacent positions of the contiguous index, so when the axis is not the
 *          last one (inner > 1) every step's loads and stores coalesce. Also short rows.
 *   rows   the axis is the last one (inner == 1), rows are long and the scan is not a float
 *          product (those stay left to right: see launch): one block per row, a
 *          block-wide inclusive scan (CUB's BlockScan) of tiles of BLOCK * ITEMS elements, the
 *          running total carried from tile to tile by the scan's prefix callback.
 * Values are the stack values of chunkops/elem_dtype.h, stepped by chunkops/scan_elem.h as on
 * the CPU; float64 -> float64 reads and adds doubles directly. Integer and bool results equal
 * the CPU backend's bit for bit; a row scan of floats adds in a tree inside each tile, so its
 * rounding may differ from the CPU's left-to-right order (NaN and inf propagate alike). */
#include "chunkops/cuda/cuda_internal.h"
#include "chunkops/scan_elem.h"
#include "common/error.h"

#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

namespace {

constexpr int BLOCK = GS__CUDA_BLOCK;
constexpr int ITEMS = 4;
constexpr int UNROLL = 8;     /* loads in flight per thread of the line kernel */
/* rows at least this long are scanned by a block each (shorter ones by a thread each) */
constexpr int64_t ROW_MIN = 2 * BLOCK;

struct scan_args {
    const void *in;
    const void *init;
    void *out;
    int64_t outer, n, inner;
    int op, in_dt, dt, total;
};

template <bool F64>
__device__ __forceinline__ double load(const scan_args &a, const void *base, int64_t i)
{
    if (F64) return __ldg((const double *)base + i);
    return gs_scan_load(a.in_dt, a.dt, base, i);
}

template <bool F64>
__device__ __forceinline__ double step(const scan_args &a, double acc, double x)
{
    if (F64) return a.op == GS_SCAN_PROD ? acc * x : acc + x;
    return gs_scan_step(a.op, a.dt, acc, x);
}

template <bool F64>
__device__ __forceinline__ void store(const scan_args &a, int64_t i, double v)
{
    if (F64) ((double *)a.out)[i] = v;
    else gs_store_elem(a.dt, a.out, i, v);
}

template <bool F64>
__device__ __forceinline__ double init_of(const scan_args &a, int64_t line)
{
    if (a.init == NULL) return gs_scan_identity(a.op, a.dt);
    return F64 ? ((const double *)a.init)[line] : gs_load_elem(a.dt, a.init, line);
}

template <bool F64>
__global__ void __launch_bounds__(BLOCK) k_scan_lines(const scan_args a)
{
    const int64_t nlines = a.outer * a.inner;
    for (int64_t t = (int64_t)blockIdx.x * BLOCK + threadIdx.x; t < nlines;
         t += (int64_t)gridDim.x * BLOCK) {
        const int64_t o = t / a.inner, j = t - o * a.inner, base = o * a.n * a.inner + j;
        double acc = init_of<F64>(a, t);
        int64_t i = 0;
        /* UNROLL independent loads in flight per thread before the dependent steps: one line
         * per thread leaves few threads when the lines are long, so latency must overlap */
        for (; i + UNROLL <= a.n; i += UNROLL) {
            double x[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) x[u] = load<F64>(a, a.in, base + (i + u) * a.inner);
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                acc = step<F64>(a, acc, x[u]);
                if (!a.total) store<F64>(a, base + (i + u) * a.inner, acc);
            }
        }
        for (; i < a.n; i++) {
            acc = step<F64>(a, acc, load<F64>(a, a.in, base + i * a.inner));
            if (!a.total) store<F64>(a, base + i * a.inner, acc);
        }
        if (a.total) store<F64>(a, t, acc);
    }
}

template <bool F64>
struct scan_op {
    const scan_args *a;
    __device__ __forceinline__ double operator()(double x, double y) const
    {
        return step<F64>(*a, x, y);
    }
};

/* The running total of a row: the prefix of each tile, then advanced by its aggregate. */
template <bool F64>
struct running {
    const scan_args *a;
    double total;
    __device__ __forceinline__ double operator()(double aggregate)
    {
        const double prefix = total;
        total = step<F64>(*a, total, aggregate);
        return prefix;
    }
};

template <bool F64>
__global__ void __launch_bounds__(BLOCK) k_scan_rows(const scan_args a)
{
    using block_scan = cub::BlockScan<double, BLOCK>;
    __shared__ typename block_scan::TempStorage tmp;
    const double id = gs_scan_identity(a.op, a.dt);
    for (int64_t row = blockIdx.x; row < a.outer; row += gridDim.x) {
        const int64_t base = row * a.n;
        running<F64> run{&a, init_of<F64>(a, row)};
        for (int64_t t0 = 0; t0 < a.n; t0 += (int64_t)BLOCK * ITEMS) {
            double v[ITEMS];
            const int64_t p0 = t0 + (int64_t)threadIdx.x * ITEMS;
#pragma unroll
            for (int k = 0; k < ITEMS; k++)
                v[k] = p0 + k < a.n ? load<F64>(a, a.in, base + p0 + k) : id;
            block_scan(tmp).InclusiveScan(v, v, scan_op<F64>{&a}, run);
            __syncthreads();   /* tmp is reused by the next tile */
            if (!a.total) {
#pragma unroll
                for (int k = 0; k < ITEMS; k++)
                    if (p0 + k < a.n) store<F64>(a, base + p0 + k, v[k]);
            }
        }
        /* every lane of the first warp ran the callback alike: thread 0 holds the row total */
        if (a.total && threadIdx.x == 0) store<F64>(a, row, run.total);
    }
}

template <bool F64>
cudaError_t launch(const scan_args &a, cudaStream_t s)
{
    /* a float product is never reordered: in a tree, a later partial product may overflow to
     * inf and meet an earlier 0 (NaN) where NumPy's left-to-right product stays 0 */
    const bool rows = a.inner == 1 && a.n >= ROW_MIN && !(a.op == GS_SCAN_PROD && gs_dt_is_float(a.dt));
    const int64_t units = rows ? a.outer : (a.outer * a.inner + BLOCK - 1) / BLOCK;
    const unsigned grid = (unsigned)(units < 65535 * 16 ? units : 65535 * 16);
    if (units == 0) return cudaSuccess;
    if (rows) k_scan_rows<F64><<<grid, BLOCK, 0, s>>>(a);
    else k_scan_lines<F64><<<grid, BLOCK, 0, s>>>(a);
    return cudaGetLastError();
}

}  // namespace

extern "C" gs_status_t gs__cuda_scan(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                                     const gs_kscan_t *k)
{
    scan_args a;
    cudaStream_t s;
    cudaError_t err;
    int device, cur = -1;
    gs_status_t st;
    if (ctx == NULL || stream == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda scan: NULL context or stream");
    if ((st = gs_kscan_validate(k)) != GS_OK) return st;
    s = (cudaStream_t)gs__cuda_stream_raw(stream, &device);
    if (cudaGetDevice(&cur) != cudaSuccess || cur != device) {
        if ((err = cudaSetDevice(device)) != cudaSuccess)
            return gs__cuda_error((int)err, "cudaSetDevice(scan)");
    }
    a.in = k->in;
    a.init = k->init;
    a.out = k->out;
    a.outer = 1;
    a.inner = 1;
    for (int32_t j = 0; j < k->axis; j++) a.outer *= k->shape[j];
    for (int32_t j = k->axis + 1; j < k->ndim; j++) a.inner *= k->shape[j];
    a.n = k->shape[k->axis];
    a.op = k->op;
    a.in_dt = k->in_dtype;
    a.dt = k->out_dtype;
    a.total = k->mode == GS_KSCAN_TOTAL;
    if (!a.total && a.n == 0) return GS_OK;
    err = a.in_dt == GS_DTYPE_FLOAT64 && a.dt == GS_DTYPE_FLOAT64 ? launch<true>(a, s)
                                                                 : launch<false>(a, s);
    if (err != cudaSuccess) return gs__cuda_error((int)err, "cudaLaunchKernel(scan)");
    return GS_OK;
}
