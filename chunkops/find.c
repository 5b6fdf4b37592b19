/* Backend lookup by name and CUDA device count. */
#include "chunkops/chunkops.h"
#include "common/error.h"

#include <string.h>

#if GS_HAVE_CUDA
/* Provided by chunkops/cuda/ (target gsched_chunkops_cuda). */
extern const gs_chunkops_ops_t gs_chunkops_cuda_ops;
int gs__cuda_device_count(void);
#endif

gs_status_t gs_chunkops_find(const char *name, const gs_chunkops_ops_t **ops_p)
{
    if (name == NULL || ops_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "chunkops find: NULL name or output");
    if (strcmp(name, "cpu") == 0) {
        *ops_p = &gs_chunkops_cpu_ops;
        return GS_OK;
    }
    if (strcmp(name, "cuda") == 0) {
#if GS_HAVE_CUDA
        *ops_p = &gs_chunkops_cuda_ops;
        return GS_OK;
#else
        return gs_error_set(GS_ERR_UNSUPPORTED,
                            "chunkops backend \"cuda\" is not available: gsched was built without "
                            "CUDA");
#endif
    }
    return gs_error_set(GS_ERR_NOT_FOUND, "unknown chunkops backend \"%s\" (known: cpu, cuda)",
                        name);
}

int gs_chunkops_cuda_device_count(void)
{
#if GS_HAVE_CUDA
    return gs__cuda_device_count();
#else
    return 0;
#endif
}
