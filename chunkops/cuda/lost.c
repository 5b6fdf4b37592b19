/* Device loss in the "cuda" backend (chunkops.h GS_ERR_DEVICE_LOST): which cudaError_t values
 * are sticky (the process's context on the device is corrupt and every later call fails), the
 * first one recorded per device, and the conversion of runtime errors into gs_status_t. */
#include "chunkops/cuda/cuda_internal.h"
#include "common/error.h"
#include "common/log.h"

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdio.h>

/* Sticky errors: the process's context on that device is corrupt and every later call fails. */
int gs__cuda_sticky(int err)
{
    switch ((cudaError_t)err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
        return 1;
    default:
        return 0;
    }
}

#define GS__CUDA_MAX_LOST 64
static atomic_int gs__cuda_lost_state[GS__CUDA_MAX_LOST];   /* 0; 1 writing; 2 set */
static char gs__cuda_lost_why[GS__CUDA_MAX_LOST][320];

/* Record the first sticky error of @a device (the cause health() names from then on). */
void gs__cuda_note_lost(int device, int err, const char *where)
{
    int expected = 0;
    cudaError_t e = (cudaError_t)err;
    if (device < 0 || device >= GS__CUDA_MAX_LOST) device = 0;
    if (!atomic_compare_exchange_strong(&gs__cuda_lost_state[device], &expected, 1)) return;
    snprintf(gs__cuda_lost_why[device], sizeof(gs__cuda_lost_why[device]),
             "cuda device %d is lost: %s (%s), reported by %s", device, cudaGetErrorString(e),
             cudaGetErrorName(e), where);
    atomic_store_explicit(&gs__cuda_lost_state[device], 2, memory_order_release);
    GS_LOG_ERROR("%s", gs__cuda_lost_why[device]);
}

/* GS_OK, or GS_ERR_DEVICE_LOST naming the cause once @a device had a sticky error. */
gs_status_t gs__cuda_lost(int device)
{
    int st;
    if (device < 0 || device >= GS__CUDA_MAX_LOST) device = 0;
    st = atomic_load_explicit(&gs__cuda_lost_state[device], memory_order_acquire);
    if (st == 0) return GS_OK;
    return gs_error_set(GS_ERR_DEVICE_LOST, "%s", st == 2 ? gs__cuda_lost_why[device]
                                                          : "cuda device lost");
}

gs_status_t gs__cuda_error(int err, const char *call)
{
    cudaError_t e = (cudaError_t)err;
    if (gs__cuda_sticky(err)) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
        gs__cuda_note_lost(dev, err, call);
        return gs_error_set(GS_ERR_DEVICE_LOST, "cuda: %s failed: %s (%s); the device is lost "
                            "for this process", call, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return gs_error_set(GS_ERR_CUDA, "cuda: %s failed: %s (%s)", call, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}
