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

#endif
