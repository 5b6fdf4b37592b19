/**
 * Users' CUDA C++ kernels compiled at run time with NVRTC (issue 16), as seen from outside
 * chunkops/cuda/: plain C, includes no CUDA header (rtc.c does).
 *
 * Compilation needs libnvrtc only, no GPU: source -> CUBIN for one real architecture
 * (-arch=sm_<arch>; the driver loads it without a JIT). Every image is cached on disk under
 * a cache directory, one file per key, the key being the source, the kernel name, the
 * prelude, the architecture, the fixed options and the NVRTC version. A file's name is a
 * 64-bit hash of the key; the file holds the whole key too, and a file whose key differs (a hash collision) or
 * that is truncated is a miss and is rewritten. Files are written to a temporary name and
 * renamed, so concurrent workers sharing a directory never read a partial image.
 *
 * The source sees the prelude below (it is compiled in front of the user's text, so a user's
 * line N is reported as line N of "<name>.cu"), and the kernel must have this signature:
 *
 *     extern "C" __global__ void NAME(gs_cuda_args_t a);
 *
 *     enum gs_dtype {                     // gsched/array.h's gs_dtype_t values
 *         GS_DTYPE_FLOAT64 = 0, GS_DTYPE_FLOAT32 = 1, GS_DTYPE_FLOAT16 = 2,
 *         GS_DTYPE_INT32 = 3, GS_DTYPE_INT64 = 4, GS_DTYPE_UINT8 = 5, GS_DTYPE_BOOL = 6,
 *     };
 *     typedef struct gs_block {           // one block, as gs_block_t of gsched/array.h
 *         union {                         // device memory, row-major, elements of dtype:
 *             double *data;               //   float64 (the name kernels used before dtypes)
 *             double *f64;                //   float64
 *             float *f32;                 //   float32
 *             unsigned short *f16;        //   float16 (IEEE binary16 bits)
 *             int *i32;                   //   int32
 *             long long *i64;             //   int64
 *             unsigned char *u8;          //   uint8
 *             bool *b;                    //   bool (one byte, 0 or 1)
 *         };
 *         int ndim;
 *         long long shape[8], start[8];   // shape; global index of element 0
 *         int dtype;                      // which member to use (enum gs_dtype)
 *     } gs_block_t;
 *     typedef struct gs_cuda_args {
 *         int nin;                        // 1..2 inputs
 *         gs_block_t in[2];               // read only; each of its input array's dtype
 *         gs_block_t out;                 // to be written whole; the caller's dtype
 *         const void *arg;                // the kernel's arg bytes (device memory), or NULL
 *         long long arg_len;
 *         long long n_out;                // elements of out
 *     } gs_cuda_args_t;
 *
 * It is launched on the worker's stream with blockDim.x = GS_CUDA_RTC_BLOCK (256) and
 * gridDim.x = ceil(n_out / 256) (at least 1): thread i usually computes out element i.
 *
 * The backend's cuda_user op (chunkops.h) compiles a gs_kuser_t's cuda_src on first use for
 * the device's architecture, with the disk cache of gs_cuda_rtc_cache_dir($GS_CUDA_RTC_CACHE_DIR)
 * (a worker sets that variable to its local directory; unset: $XDG_CACHE_HOME or $HOME), and
 * keeps the kernel loaded for the life of the process.
 */
#ifndef GS_CHUNKOPS_CUDA_RTC_H
#define GS_CHUNKOPS_CUDA_RTC_H

#include "chunkops/chunkops.h"

#include <gsched/array.h>
#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GS_CUDA_RTC_BLOCK 256

/** The prelude compiled in front of every user source (the text shown above). */
extern const char gs_cuda_rtc_prelude[];

/** The cache directory for @a local_dir (the worker's local directory; NULL or "": none):
 *  local_dir/nvrtc-cache, else $XDG_CACHE_HOME/gsched/nvrtc, else $HOME/.cache/gsched/nvrtc.
 *  Written NUL-terminated to @a buf (@a len bytes); the directory is not created.
 *  GS_ERR_INVALID_PARAM when @a buf is NULL or too short, GS_ERR_NOT_FOUND when none of the
 *  three is defined. */
gs_status_t gs_cuda_rtc_cache_dir(const char *local_dir, char *buf, size_t len);

/** Compile @a source (NUL-terminated CUDA C++) defining kernel @a name (a C identifier) for
 *  sm_<@a arch> (e.g. 90), or take the image from @a cache_dir (NULL: no disk cache; the
 *  directory and its parents are created when missing). On success *image_p is a new buffer
 *  of *len_p bytes (an ELF CUBIN; the caller frees it with gs_free) and *cached_p (may be
 *  NULL) says whether it came from the disk cache. A cache that cannot be written is logged
 *  and skipped (the image is still returned).
 *  Errors: GS_ERR_INVALID_PARAM (NULL arguments, a name that is no C identifier, arch out of
 *  10..999, a source without the kernel: NVRTC cannot find NAME), GS_ERR_TASK_FAILED when the
 *  source does not compile (gs_last_error() holds "cuda kernel NAME does not compile:" and the
 *  start of the NVRTC log, whose lines name "NAME.cu(LINE)"), GS_ERR_NO_MEMORY,
 *  GS_ERR_UNSUPPORTED when NVRTC itself fails (its message in gs_last_error()). Outputs are
 *  written only on success. Thread-safe. */
gs_status_t gs_cuda_rtc_compile(const char *source, const char *name, int arch,
                                const char *cache_dir, void **image_p, size_t *len_p,
                                int *cached_p);

/* ---- loading and launching (need a GPU; rtc_launch.c) ---- */

/** The launch arguments, laid out as gs_cuda_args_t of the prelude (host view). */
typedef struct gs_cuda_rtc_args {
    int32_t nin;
    gs_block_t in[2];
    gs_block_t out;
    const void *arg;        /* device memory (gs_cuda_rtc_launch copies the host bytes) */
    int64_t arg_len;
    int64_t n_out;
} gs_cuda_rtc_args_t;

/** A user kernel loaded into the current device's primary context (cudaLibraryLoadData, the
 *  runtime's face of cuLibraryLoadData: no link against libcuda is needed). */
typedef struct gs_cuda_rtc_kernel *gs_cuda_rtc_kernel_h;

/** Load CUBIN @a image (@a len bytes, as gs_cuda_rtc_compile returns; copied) and find
 *  kernel @a name in it, on device @a device (made current). GS_ERR_CUDA (the call and the
 *  CUDA message in gs_last_error(); an image for another architecture fails here, as does a
 *  missing kernel), GS_ERR_INVALID_PARAM, GS_ERR_NO_MEMORY. *kernel_p only on success;
 *  release it with gs_cuda_rtc_unload once no launch of it is in flight. */
gs_status_t gs_cuda_rtc_load(int device, const void *image, size_t len, const char *name,
                             gs_cuda_rtc_kernel_h *kernel_p);
/** The architecture of CUDA device @a device as gs_cuda_rtc_compile takes it (major * 10 +
 *  minor: 90 for an H100 or H200), or 0 when it cannot be queried (no device). */
int gs_cuda_rtc_device_arch(int device);

/** Unload @a kernel (NULL is fine). */
void gs_cuda_rtc_unload(gs_cuda_rtc_kernel_h kernel);

/** Enqueue @a kernel on @a stream (a chunkops stream of the "cuda" backend) over @a blocks
 *  (device memory; nin 1..2, out.data non-NULL): blockDim GS_CUDA_RTC_BLOCK, gridDim
 *  ceil(n_out / GS_CUDA_RTC_BLOCK) (at least 1; n_out is computed here from out.shape).
 *  @a arg (host, @a arg_len bytes, may be NULL when 0) is copied to stream-ordered device
 *  memory that is freed after the kernel; the caller may free @a arg on return. Launch
 *  errors: GS_ERR_CUDA; errors inside the kernel (an illegal address) surface at the
 *  stream's next notify()/sync() as GS_ERR_CUDA naming the CUDA error. */
gs_status_t gs_cuda_rtc_launch(gs_cuda_rtc_kernel_h kernel, gs_chunkops_stream_h stream,
                               const gs_block_t *in, int nin, const gs_block_t *out,
                               const void *arg, size_t arg_len);

/** The NVRTC log of the last failed compilation on this thread in full (NUL-terminated, owned
 *  by the thread, valid until its next gs_cuda_rtc_compile), or "" when there is none.
 *  gs_last_error() holds only its first few hundred bytes. */
const char *gs_cuda_rtc_last_log(void);

#ifdef __cplusplus
}
#endif
#endif
