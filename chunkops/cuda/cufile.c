/* File reads straight into device memory with cuFile (GPUDirect Storage), the CUDA backend's
 * file_read (chunkops.h); chunkops/fileio.c stages through page-locked buffers wherever this
 * returns GS_ERR_UNSUPPORTED.
 *
 * The library. Only the header (cufile.h) is needed at build time (GS_HAVE_CUFILE, set by CMake
 * when it finds it): libcufile.so.0 is loaded at run time with dlopen + dlsym, as NVIDIA's
 * kvikio does, so binaries have no link dependency on it and run where it is missing (then
 * every read is staged). $GS_CUFILE_LIBRARY names another file to load (tests: a missing one).
 *
 * Detection, once per process on the first file read: load the library, cuFileDriverOpen,
 * cuFileDriverGetProperties. GPUDirect Storage is available when the nvidia-fs kernel module is
 * loaded (/sys/module/nvidia_fs and a driver version in the properties) or the NVMe P2PDMA
 * path is enabled, and cuFile is not forced into compatibility mode (cufile.json). Without it
 * cuFile still works in its compatibility mode (POSIX reads and copies inside libcufile, when
 * cufile.json allows it): no faster than our own staging, so the automatic choice stages.
 *
 * The choice (params.file_path): AUTO reads with cuFile only with GPUDirect Storage; PINNED
 * always stages; CUFILE reads with cuFile in either mode (the compatibility mode lets the cuFile
 * code run on hosts without nvidia-fs). The first read logs the choice once per process:
 * "file reads: cuFile (GPUDirect Storage ...)", "file reads: cuFile in compatibility mode
 * (...)" or "file reads: pinned staging (GDS unavailable: ...)".
 *
 * A read. The file is opened with O_DIRECT when every range's offset, length and device
 * address are multiples of 4096 (and the file system takes O_DIRECT), else plainly; the
 * descriptor is registered (cuFileHandleRegister), each range read with cuFileRead into the
 * device memory (buffers are not registered: cuFile bounces unaligned ends through its own
 * buffers) and the handle deregistered. A file cuFile refuses to register (file system or open
 * flags it does not support) is staged instead: GS_ERR_UNSUPPORTED, logged once. */
#include "chunkops/cuda/cuda_internal.h"
#include "common/error.h"
#include "common/log.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef GS_HAVE_CUFILE
#include <cufile.h>
#include <dlfcn.h>
#include <sys/stat.h>
#endif

#define GS__CUFILE_ALIGN 4096

enum { GS__CUFILE_NONE = 0, GS__CUFILE_COMPAT = 1, GS__CUFILE_GDS = 2 };

static pthread_once_t gs__cufile_once = PTHREAD_ONCE_INIT;
static int gs__cufile_state;            /* GS__CUFILE_*, set once */
static char gs__cufile_why[320];        /* why GDS is unavailable, or what it runs on */
static atomic_int gs__cufile_said;      /* the choice was logged */

#ifdef GS_HAVE_CUFILE
static atomic_int gs__cufile_said_reg;  /* a registration refusal was logged */
static struct {
    void *lib;
    CUfileError_t (*driver_open)(void);
    CUfileError_t (*get_props)(CUfileDrvProps_t *props);
    CUfileError_t (*handle_register)(CUfileHandle_t *fh, CUfileDescr_t *descr);
    void (*handle_deregister)(CUfileHandle_t fh);
    ssize_t (*read)(CUfileHandle_t fh, void *base, size_t size, off_t off, off_t buf_off);
    CUfileError_t (*get_bool)(CUFileBoolConfigParameter_t param, bool *value); /* optional */
} gs__cf;

/* cuFile's message for an error code (CUfileOpError), CUDA driver errors included. */
static const char *gs__cufile_msg(int err)
{
    return cufileop_status_error((CUfileOpError)(err < 0 ? -err : err));
}

static void gs__cufile_load(void)
{
    const char *name = getenv("GS_CUFILE_LIBRARY");
    CUfileDrvProps_t props;
    CUfileError_t e;
    struct stat sb;
    bool compat_forced = false;
    int nvfs;

    if (name == NULL || name[0] == '\0') name = "libcufile.so.0";
    gs__cf.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (gs__cf.lib == NULL) {
        const char *d = dlerror();
        snprintf(gs__cufile_why, sizeof(gs__cufile_why), "cannot load %s: %s", name,
                 d != NULL ? d : "dlopen failed");
        return;
    }
    *(void **)&gs__cf.driver_open = dlsym(gs__cf.lib, "cuFileDriverOpen");
    *(void **)&gs__cf.get_props = dlsym(gs__cf.lib, "cuFileDriverGetProperties");
    *(void **)&gs__cf.handle_register = dlsym(gs__cf.lib, "cuFileHandleRegister");
    *(void **)&gs__cf.handle_deregister = dlsym(gs__cf.lib, "cuFileHandleDeregister");
    *(void **)&gs__cf.read = dlsym(gs__cf.lib, "cuFileRead");
    *(void **)&gs__cf.get_bool = dlsym(gs__cf.lib, "cuFileGetParameterBool");
    if (gs__cf.driver_open == NULL || gs__cf.get_props == NULL || gs__cf.handle_register == NULL ||
        gs__cf.handle_deregister == NULL || gs__cf.read == NULL) {
        snprintf(gs__cufile_why, sizeof(gs__cufile_why), "%s lacks the cuFile entry points",
                 name);
        goto err_close;
    }
    e = gs__cf.driver_open();
    if (e.err != CU_FILE_SUCCESS) {
        snprintf(gs__cufile_why, sizeof(gs__cufile_why), "cuFileDriverOpen: %s (cuFile error %d)",
                 gs__cufile_msg(e.err), (int)e.err);
        goto err_close;
    }
    memset(&props, 0, sizeof(props));
    e = gs__cf.get_props(&props);
    if (e.err != CU_FILE_SUCCESS) {
        snprintf(gs__cufile_why, sizeof(gs__cufile_why),
                 "cuFileDriverGetProperties: %s (cuFile error %d)", gs__cufile_msg(e.err),
                 (int)e.err);
        return;   /* no cuFile; the library stays loaded: its driver session is open */
    }
    if (gs__cf.get_bool != NULL)
        (void)gs__cf.get_bool(CUFILE_PARAM_FORCE_COMPAT_MODE, &compat_forced);
    nvfs = stat("/sys/module/nvidia_fs", &sb) == 0 && props.nvfs.major_version > 0;
    if (compat_forced) {
        gs__cufile_state = GS__CUFILE_COMPAT;
        snprintf(gs__cufile_why, sizeof(gs__cufile_why),
                 "cufile.json forces cuFile's compatibility mode");
    } else if (nvfs || (props.nvfs.dstatusflags & (1u << CU_FILE_NVME_P2P_SUPPORTED))) {
        gs__cufile_state = GS__CUFILE_GDS;
        snprintf(gs__cufile_why, sizeof(gs__cufile_why), "%s %u.%u",
                 nvfs ? "nvidia-fs" : "NVMe P2PDMA, nvidia-fs", props.nvfs.major_version,
                 props.nvfs.minor_version);
    } else {
        gs__cufile_state = GS__CUFILE_COMPAT;
        snprintf(gs__cufile_why, sizeof(gs__cufile_why),
                 "the nvidia-fs kernel module is not loaded");
    }
    return;
err_close:
    dlclose(gs__cf.lib);
    memset(&gs__cf, 0, sizeof(gs__cf));
}
#else
static void gs__cufile_load(void)
{
    snprintf(gs__cufile_why, sizeof(gs__cufile_why),
             "this build has no cuFile: cufile.h was not found at build time");
}
#endif

int gs__cuda_cufile_state(const char **why_p)
{
    (void)pthread_once(&gs__cufile_once, gs__cufile_load);
    if (why_p != NULL) *why_p = gs__cufile_why;
    return gs__cufile_state;
}

/* Decide, for a context that asked for @a want (gs_file_path_t), whether reads go through
 * cuFile: the gs_fread_path_t, or -1 to stage. Logs the choice once per process. */
static int gs__cufile_choose(int want)
{
    const char *why;
    int state = gs__cuda_cufile_state(&why);
    int how = -1;

    if (want == GS_FILE_PATH_CUFILE && state != GS__CUFILE_NONE)
        how = state == GS__CUFILE_GDS ? GS_FREAD_CUFILE : GS_FREAD_CUFILE_COMPAT;
    else if (want == GS_FILE_PATH_AUTO && state == GS__CUFILE_GDS)
        how = GS_FREAD_CUFILE;
    if (atomic_exchange(&gs__cufile_said, 1) != 0) return how;
    if (how == GS_FREAD_CUFILE)
        GS_LOG_INFO("file reads: cuFile (GPUDirect Storage: %s)", why);
    else if (how == GS_FREAD_CUFILE_COMPAT)
        GS_LOG_INFO("file reads: cuFile in compatibility mode (file path forced to cufile; GDS "
                    "unavailable: %s)", why);
    else if (want == GS_FILE_PATH_PINNED)
        GS_LOG_INFO("file reads: pinned staging (file path forced to pinned)");
    else if (want == GS_FILE_PATH_CUFILE)
        GS_LOG_WARN("file reads: pinned staging (file path forced to cufile, but cuFile is "
                    "unavailable: %s)", why);
    else
        GS_LOG_INFO("file reads: pinned staging (GDS unavailable: %s)", why);
    return how;
}

#ifdef GS_HAVE_CUFILE
/* Whether cuFileHandleRegister's error @a err means "this file cannot go through cuFile"
 * (stage it) rather than a failure of the read. */
static int gs__cufile_refusal(int err)
{
    switch (err) {
    case CU_FILE_IO_NOT_SUPPORTED: case CU_FILE_INVALID_FILE_OPEN_FLAG:
    case CU_FILE_INVALID_FILE_TYPE: case CU_FILE_IO_DISABLED: case CU_FILE_DIO_NOT_SET:
    case CU_FILE_PLATFORM_NOT_SUPPORTED: case CU_FILE_DEVICE_NOT_SUPPORTED:
    case CU_FILE_DRIVER_NOT_INITIALIZED:
    /* what libcufile 1.15 answers in compatibility mode (no nvidia-fs) on the H100 host for
     * files in its /tmp: the file cannot be registered; staging reads it */
    case CU_FILE_HANDLE_NOT_REGISTERED:
        return 1;
    default:
        return 0;
    }
}

static gs_status_t gs__cufile_read_spans(const char *path, const gs_chunkops_fspan_t *spans,
                                         size_t n)
{
    CUfileDescr_t descr;
    CUfileHandle_t fh = NULL;
    CUfileError_t e;
    gs_status_t st = GS_OK;
    int direct = 1, fd = -1;

    for (size_t i = 0; i < n && direct; i++)
        direct = spans[i].off % GS__CUFILE_ALIGN == 0 && spans[i].nbytes % GS__CUFILE_ALIGN == 0 &&
                 (uintptr_t)spans[i].dst % GS__CUFILE_ALIGN == 0;
    if (direct) fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC);   /* no O_DIRECT here, or not aligned */
    if (fd < 0) return gs_error_set(GS_ERR_IO, "%s: %s", path, strerror(errno));
    memset(&descr, 0, sizeof(descr));
    descr.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    descr.handle.fd = fd;
    e = gs__cf.handle_register(&fh, &descr);
    if (e.err != CU_FILE_SUCCESS) {
        if (gs__cufile_refusal((int)e.err)) {
            if (atomic_exchange(&gs__cufile_said_reg, 1) == 0)
                GS_LOG_WARN("file reads: cuFile cannot register %s (%s); such files are staged "
                            "through pinned buffers", path, gs__cufile_msg(e.err));
            st = gs_error_set(GS_ERR_UNSUPPORTED, "%s: cuFileHandleRegister: %s", path,
                              gs__cufile_msg(e.err));
        } else if (e.err == CU_FILE_CUDA_DRIVER_ERROR) {
            st = gs_error_set(GS_ERR_CUDA, "%s: cuFileHandleRegister: CUDA driver error %d", path,
                              (int)e.cu_err);
        } else {
            st = gs_error_set(GS_ERR_IO, "%s: cuFileHandleRegister: %s (cuFile error %d)", path,
                              gs__cufile_msg(e.err), (int)e.err);
        }
        goto out_close;
    }
    for (size_t i = 0; i < n && st == GS_OK; i++) {
        size_t done = 0;
        while (done < spans[i].nbytes) {
            ssize_t got = gs__cf.read(fh, spans[i].dst, spans[i].nbytes - done,
                                      (off_t)(spans[i].off + (int64_t)done), (off_t)done);
            if (got > 0) {
                done += (size_t)got;
                continue;
            }
            if (got == 0)
                st = gs_error_set(GS_ERR_IO, "%s is truncated: no bytes at offset %lld", path,
                                  (long long)(spans[i].off + (int64_t)done));
            else if (got == -1)
                st = gs_error_set(GS_ERR_IO, "%s: cuFileRead of %zu bytes at %lld: %s", path,
                                  spans[i].nbytes - done, (long long)(spans[i].off + (int64_t)done),
                                  strerror(errno));
            else
                st = gs_error_set(-got == CU_FILE_CUDA_DRIVER_ERROR ? GS_ERR_CUDA : GS_ERR_IO,
                                  "%s: cuFileRead of %zu bytes at %lld: %s (cuFile error %d)",
                                  path, spans[i].nbytes - done,
                                  (long long)(spans[i].off + (int64_t)done),
                                  gs__cufile_msg((int)got), (int)-got);
            break;
        }
    }
    gs__cf.handle_deregister(fh);
out_close:
    close(fd);
    return st;
}
#endif

gs_status_t gs__cuda_file_read(gs_chunkops_ctx_h ctx, const char *path,
                               const gs_chunkops_fspan_t *spans, size_t n, int *how_p)
{
    int how, device, want;

    if (ctx == NULL || path == NULL || (spans == NULL && n > 0) || how_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda file_read: NULL argument");
    device = gs__cuda_ctx_dev(ctx)->device;
    want = gs__cuda_ctx_dev(ctx)->file_path;
    if (want < GS_FILE_PATH_AUTO || want > GS_FILE_PATH_CUFILE)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda file_read: file path %d is unknown", want);
    if ((cudaGetDevice(&how) != cudaSuccess || how != device) &&
        cudaSetDevice(device) != cudaSuccess) {   /* cuFile works in the current context */
        (void)cudaGetLastError();
        return gs_error_set(GS_ERR_CUDA, "cuda file_read: cudaSetDevice(%d) failed", device);
    }
    how = gs__cufile_choose(want);
    if (how < 0) return gs_error_set(GS_ERR_UNSUPPORTED, "%s: file reads are staged", path);
#ifdef GS_HAVE_CUFILE
    {
        gs_status_t st = gs__cufile_read_spans(path, spans, n);
        if (st == GS_OK) *how_p = how;
        return st;
    }
#else
    return gs_error_set(GS_ERR_UNSUPPORTED, "%s: file reads are staged", path);
#endif
}
