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

#endif
