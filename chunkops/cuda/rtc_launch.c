/* Users' CUDA C++ kernels: loading CUBIN images and launching them on a chunkops stream
 * (rtc.h). The runtime's library API (cudaLibraryLoadData, cudaLibraryGetKernel) wraps the
 * driver's cuLibrary* calls, so the static runtime reaches the driver itself and no binary
 * links against libcuda. */
#include "chunkops/cuda/rtc.h"
#include "chunkops/cuda/cuda_internal.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/hashmap.h"

#include <cuda_runtime.h>

#include <pthread.h>
#include <stdlib.h>
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

/* ---- the cuda_user op: kernels loaded once per process and device ---- */

typedef struct gs__rtc_loaded {
    int device;
    uint64_t hash;              /* gs_hash_bytes over name NUL source */
    char *name, *source;        /* owned copies (the key compared in full) */
    gs_cuda_rtc_kernel_h kernel;
} gs__rtc_loaded_t;

static pthread_mutex_t gs__rtc_lock = PTHREAD_MUTEX_INITIALIZER;
static gs__rtc_loaded_t gs__rtc_loaded[GS__CUDA_RTC_MAX_LOADED];
static int gs__rtc_nloaded;

static uint64_t gs__rtc_src_hash(const char *name, const char *src)
{
    uint64_t h = gs_hash_bytes(name, strlen(name) + 1);
    return h ^ gs_hash_u64(gs_hash_bytes(src, strlen(src)));
}

/* The loaded kernel for (device, name, src), compiling (disk cache) and loading it on first
 * use. The lock is held across the compilation so one kernel is compiled once. */
static gs_status_t gs__rtc_get(int device, const char *name, const char *src,
                               gs_cuda_rtc_kernel_h *kernel_p)
{
    uint64_t h = gs__rtc_src_hash(name, src);
    char dir[4096];
    const char *cache = NULL;
    void *img = NULL;
    size_t len = 0;
    gs_cuda_rtc_kernel_h k = NULL;
    gs_status_t st = GS_OK;
    pthread_mutex_lock(&gs__rtc_lock);
    for (int i = 0; i < gs__rtc_nloaded; i++) {
        gs__rtc_loaded_t *e = &gs__rtc_loaded[i];
        if (e->device == device && e->hash == h && strcmp(e->name, name) == 0 &&
            strcmp(e->source, src) == 0) {
            *kernel_p = e->kernel;
            goto out_unlock;
        }
    }
    if (gs__rtc_nloaded == GS__CUDA_RTC_MAX_LOADED) {
        st = gs_error_set(GS_ERR_NO_RESOURCE, "cuda kernel %s: this worker has loaded %d user "
                          "kernels already (the limit)", name, GS__CUDA_RTC_MAX_LOADED);
        goto out_unlock;
    }
    int arch = gs_cuda_rtc_device_arch(device);
    if (arch == 0) {
        st = gs_error_set(GS_ERR_CUDA, "cuda kernel %s: device %d architecture unknown", name,
                          device);
        goto out_unlock;
    }
    if (gs_cuda_rtc_cache_dir(getenv("GS_CUDA_RTC_CACHE_DIR"), dir, sizeof(dir)) == GS_OK)
        cache = dir;
    if ((st = gs_cuda_rtc_compile(src, name, arch, cache, &img, &len, NULL)) != GS_OK)
        goto out_unlock;
    st = gs_cuda_rtc_load(device, img, len, name, &k);
    gs_free(img);
    if (st != GS_OK) goto out_unlock;
    gs__rtc_loaded_t *e = &gs__rtc_loaded[gs__rtc_nloaded];
    e->name = gs_strdup(name, "cuda kernel name");
    e->source = gs_strdup(src, "cuda kernel source");
    if (e->name == NULL || e->source == NULL) {
        gs_free(e->name);
        gs_free(e->source);
        e->name = e->source = NULL;
        gs_cuda_rtc_unload(k);
        st = gs_error_set(GS_ERR_NO_MEMORY, "cuda kernel %s: out of memory", name);
        goto out_unlock;
    }
    e->device = device;
    e->hash = h;
    e->kernel = k;
    gs__rtc_nloaded++;
    *kernel_p = k;
out_unlock:
    pthread_mutex_unlock(&gs__rtc_lock);
    return st;
}

gs_status_t gs__cuda_rtc_user(gs_chunkops_ctx_h ctx, gs_chunkops_stream_h stream,
                              const gs_kuser_t *k)
{
    gs_cuda_rtc_kernel_h kernel;
    int device;
    gs_status_t st;
    if (ctx == NULL || stream == NULL || k == NULL || k->cuda_src == NULL || k->sym == NULL ||
        k->nin < 1 || k->nin > GS_KERNEL_MAX_USER_IN || k->out.data == NULL ||
        k->arg_len < 0 || (k->arg_len > 0 && k->arg == NULL))
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda user kernel: malformed kernel spec");
    (void)gs__cuda_stream_raw(stream, &device);
    if ((st = gs__rtc_get(device, k->sym, k->cuda_src, &kernel)) != GS_OK) return st;
    return gs_cuda_rtc_launch(kernel, stream, k->in, k->nin, &k->out, k->arg,
                              (size_t)k->arg_len);
}
