/* CUDA C++ twins of test_kernels.c's kernels, as source for NVRTC (a gs_user_kernel_t's
 * cuda_source; chunkops/cuda/rtc.h), shared by the CUDA tests and gs-bench mapblocks. */
#ifndef GS_TESTS_KERNELS_TEST_KERNELS_CUDA_H
#define GS_TESTS_KERNELS_TEST_KERNELS_CUDA_H

/* gs_test_ew for one input (symbol "ew", elementwise): out = in^2 + the block's first global
 * row / 1000. */
#define GS_TEST_EW_CUDA_SRC                                                                   \
    "extern \"C\" __global__ void ew(gs_cuda_args_t a)\n"                                    \
    "{\n"                                                                                    \
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"                  \
    "    if (i >= a.n_out) return;\n"                                                        \
    "    double v = a.in[0].data[i];\n"                                                      \
    "    a.out.data[i] = v * v + (double)a.out.start[0] / 1000.0;\n"                         \
    "}\n"

/* gs_test_typed (symbol "typed", elementwise) for every dtype but float16: v = 2 in0 + in1
 * (when given) + the element's global row, stored in out's dtype as a C cast stores it
 * (integers through long long, so they wrap; bool: v != 0). Reads and writes through the
 * prelude's typed members (f64, f32, i32, i64, u8, b), chosen by each block's dtype. */
#define GS_TEST_TYPED_CUDA_SRC                                                                \
    "__device__ double ld(const gs_block_t &b, long long i)\n"                                \
    "{\n"                                                                                    \
    "    switch (b.dtype) {\n"                                                               \
    "    case GS_DTYPE_FLOAT32: return b.f32[i];\n"                                          \
    "    case GS_DTYPE_INT32: return b.i32[i];\n"                                            \
    "    case GS_DTYPE_INT64: return (double)b.i64[i];\n"                                    \
    "    case GS_DTYPE_UINT8: return b.u8[i];\n"                                             \
    "    case GS_DTYPE_BOOL: return b.b[i] ? 1.0 : 0.0;\n"                                   \
    "    default: return b.f64[i];\n"                                                        \
    "    }\n"                                                                                \
    "}\n"                                                                                    \
    "extern \"C\" __global__ void typed(gs_cuda_args_t a)\n"                                 \
    "{\n"                                                                                    \
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x, inner = 1;\n"        \
    "    if (i >= a.n_out) return;\n"                                                        \
    "    for (int j = 1; j < a.out.ndim; j++) inner *= a.out.shape[j];\n"                    \
    "    double row = a.out.ndim > 0 ? (double)(a.out.start[0] + i / inner) : 0.0;\n"        \
    "    double v = 2.0 * ld(a.in[0], i) + (a.nin > 1 ? ld(a.in[1], i) : 0.0) + row;\n"      \
    "    switch (a.out.dtype) {\n"                                                           \
    "    case GS_DTYPE_FLOAT32: a.out.f32[i] = (float)v; break;\n"                           \
    "    case GS_DTYPE_INT32: a.out.i32[i] = (int)(long long)v; break;\n"                    \
    "    case GS_DTYPE_INT64: a.out.i64[i] = (long long)v; break;\n"                         \
    "    case GS_DTYPE_UINT8: a.out.u8[i] = (unsigned char)(long long)v; break;\n"           \
    "    case GS_DTYPE_BOOL: a.out.b[i] = v != 0.0; break;\n"                                \
    "    default: a.out.f64[i] = v; break;\n"                                                \
    "    }\n"                                                                                \
    "}\n"

/* The seed's 3x3 smoothing as a CUDA C++ map_overlap kernel (symbol "smooth3x3"; twin of
 * test_kernels.c's gs_test_smooth3x3): in[0] the chunk padded by 1, out the chunk; products and
 * sums rounded apart (__dmul_rn, __dadd_rn) in row-major order, as the CPU loops and
 * gs_array_stencil sum them, so the results are equal bit for bit. With arg = the array's shape
 * (int64_t[2]) the array's edge elements keep their values (boundary none, as gs_array_stencil
 * keeps them); NULL: every element smoothed. A padded block of the wrong geometry (not the
 * chunk's, padded by 1) writes -1e300, so a test sees it. Shared by the CUDA tests
 * (test_cuda_stencil.c, integration test_stencil.c) and gs-bench stencil --kernel cuda. */
#define GS_TEST_SMOOTH3X3_CUDA_SRC \
    "extern \"C\" __global__ void smooth3x3(gs_cuda_args_t a)\n"                          \
    "{\n"                                                                                 \
    "    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"               \
    "    if (i >= a.n_out) return;\n"                                                     \
    "    const long long w = a.out.shape[1], pw = a.in[0].shape[1];\n"                    \
    "    const long long r = i / w, c = i - r * w;\n"                                     \
    "    const long long *shape = (const long long *)a.arg;\n"                            \
    "    const long long gr = a.out.start[0] + r, gc = a.out.start[1] + c;\n"             \
    "    const double *p = a.in[0].data + (r + 1) * pw + (c + 1);\n"                      \
    "    if (a.in[0].start[0] != a.out.start[0] - 1 || a.in[0].start[1] != a.out.start[1] - 1 ||\n"\
    "        a.in[0].shape[0] != a.out.shape[0] + 2 || a.nin != 1) {\n"                   \
    "        a.out.data[i] = -1e300;\n"                                                   \
    "        return;\n"                                                                   \
    "    }\n"                                                                             \
    "    if (shape != 0 && (gr == 0 || gc == 0 || gr == shape[0] - 1 || gc == shape[1] - 1)) {\n"\
    "        a.out.data[i] = *p;\n"                                                       \
    "        return;\n"                                                                   \
    "    }\n"                                                                             \
    "    double acc = 0.0;\n"                                                             \
    "    for (int di = -1; di <= 1; di++)\n"                                              \
    "        for (int dj = -1; dj <= 1; dj++)\n"                                          \
    "            acc = __dadd_rn(acc, __dmul_rn(1.0 / 9, p[di * pw + dj]));\n"            \
    "    a.out.data[i] = acc;\n"                                                          \
    "}\n"

#endif
