/* Users' CUDA C++ kernels: loading CUBIN images and launching them on a chunkops stream
 * (rtc.h). The runtime's library API (cudaLibraryLoadData, cudaLibraryGetKernel) wraps the
 * driver's cuLibrary* calls, so the static runtime reaches the driver itself and no binary
 * links against libcuda. */
#include "chunkops/cuda/rtc.h"
#include "chunkops/cuda/cuda_internal.h"
#include "common/alloc.h"
#include "common/error.h"

#include <cuda_runtime.h>

#include <string.h>

struct gs_cuda_rtc_kernel {
    cudaLibrary_t lib;
    cudaKernel_t fn;
    int device;
};

gs_status_t gs_cuda_rtc_load(int device, const void *image, size_t len, const char *name,
                             gs_cuda_rtc_kernel_h *kernel_p)
{
    struct gs_cuda_rtc_kernel *k;
    cudaError_t e;
    gs_status_t st;
    if (image == NULL || len < 4 || name == NULL || kernel_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda kernel load: NULL or empty argument");
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        (void)cudaGetLastError();
        return gs__cuda_error((int)e, "cudaSetDevice");
    }
    if ((k = gs_calloc(1, sizeof(*k), "cuda user kernel")) == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "cuda kernel %s: out of memory", name);
    k->device = device;
    if ((e = cudaLibraryLoadData(&k->lib, image, NULL, NULL, 0, NULL, NULL, 0)) != cudaSuccess) {
        (void)cudaGetLastError();
        st = gs__cuda_error((int)e, "cudaLibraryLoadData");
        goto err_free;
    }
    if ((e = cudaLibraryGetKernel(&k->fn, k->lib, name)) != cudaSuccess) {
        (void)cudaGetLastError();
        st = gs_error_set(GS_ERR_CUDA, "cuda kernel %s not found in its image (declare it "
                          "extern \"C\" __global__): %s", name, cudaGetErrorString(e));
        goto err_lib;
    }
    *kernel_p = k;
    return GS_OK;
err_lib:
    (void)cudaLibraryUnload(k->lib);
err_free:
    gs_free(k);
    return st;
}

int gs_cuda_rtc_device_arch(int device)
{
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major * 10 + minor;
}

void gs_cuda_rtc_unload(gs_cuda_rtc_kernel_h kernel)
{
    if (kernel == NULL) return;
    if (cudaSetDevice(kernel->device) != cudaSuccess || cudaLibraryUnload(kernel->lib) != cudaSuccess)
        (void)cudaGetLastError();
    gs_free(kernel);
}

gs_status_t gs_cuda_rtc_launch(gs_cuda_rtc_kernel_h kernel, gs_chunkops_stream_h stream,
                               const gs_block_t *in, int nin, const gs_block_t *out,
                               const void *arg, size_t arg_len)
{
    gs_cuda_rtc_args_t a;
    cudaStream_t s;
    cudaError_t e;
    void *darg = NULL, *params[1];
    int device;
    uint64_t nblk;
    dim3 grid = {1, 1, 1}, block = {GS_CUDA_RTC_BLOCK, 1, 1};
    if (kernel == NULL || stream == NULL || in == NULL || out == NULL || out->data == NULL ||
        nin < 1 || nin > 2 || (arg_len > 0 && arg == NULL) || out->ndim < 0 ||
        out->ndim > GS_MAX_NDIM)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda kernel launch: malformed arguments");
    s = (cudaStream_t)gs__cuda_stream_raw(stream, &device);
    if (device != kernel->device)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda kernel launch: kernel loaded on device "
                            "%d, stream on device %d", kernel->device, device);
    memset(&a, 0, sizeof(a));
    a.nin = nin;
    memcpy(a.in, in, (size_t)nin * sizeof(in[0]));
    a.out = *out;
    a.n_out = gs_region_size(out->ndim, out->shape);
    a.arg_len = (int64_t)arg_len;
    if ((e = cudaSetDevice(device)) != cudaSuccess) goto err_cuda;
    if (arg_len > 0) {
        if ((e = cudaMallocAsync(&darg, arg_len, s)) != cudaSuccess) goto err_cuda;
        /* pageable source: the bytes are taken before the call returns */
        if ((e = cudaMemcpyAsync(darg, arg, arg_len, cudaMemcpyHostToDevice, s)) != cudaSuccess)
            goto err_arg;
        a.arg = darg;
    }
    nblk = a.n_out > 0 ? ((uint64_t)a.n_out + GS_CUDA_RTC_BLOCK - 1) / GS_CUDA_RTC_BLOCK
                                : 1;
    if (nblk > 0x7fffffffu) {
        if (darg != NULL) (void)cudaFreeAsync(darg, s);
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda kernel launch: %lld output elements "
                            "need more blocks than one grid has", (long long)a.n_out);
    }
    params[0] = &a;
    grid.x = (unsigned)nblk;
    e = cudaLaunchKernel((const void *)kernel->fn, grid, block, params, 0, s);
    if (e != cudaSuccess) goto err_arg;
    if (darg != NULL && (e = cudaFreeAsync(darg, s)) != cudaSuccess) goto err_cuda;
    return GS_OK;
err_arg:
    if (darg != NULL) (void)cudaFreeAsync(darg, s);
err_cuda:
    (void)cudaGetLastError();
    return gs__cuda_error((int)e, "cuda user kernel launch");
}
