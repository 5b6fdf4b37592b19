/* Discovering the GPUs a local cluster may use, without creating a CUDA context (that alone
 * costs hundreds of milliseconds per GPU). Used by gs-local-cluster and gs-bench. */
#ifndef GS_DEPLOY_GPUINFO_H
#define GS_DEPLOY_GPUINFO_H

#include <sched.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GS_GPU_MAX 64

/** One visible GPU, in the order CUDA numbers them with CUDA_DEVICE_ORDER=PCI_BUS_ID. */
typedef struct gs_gpu {
    char id[96];        /* what to put in CUDA_VISIBLE_DEVICES for it ("3", "GPU-<uuid>") */
    char bus_id[32];    /* PCI bus id for sysfs ("0000:18:00.0"), "" when unknown */
    int numa_node;      /* -1 when unknown */
} gs_gpu_t;

/** Fill @a gpus (up to GS_GPU_MAX) with the GPUs visible to this process: the physical GPUs
 *  from /proc/driver/nvidia/gpus (else `nvidia-smi --query-gpu`), restricted and reordered by
 *  $CUDA_VISIBLE_DEVICES when it is set (an empty value hides every GPU; when the physical list
 *  is unknown its entries are taken as they are). Returns the number of GPUs (0 when none). */
int gs_gpu_discover(gs_gpu_t *gpus);

/** CPUs of NUMA node @a node from /sys/devices/system/node/node<N>/cpulist into @a set.
 *  Returns the number of CPUs, 0 when unknown. */
int gs_numa_cpuset(int node, cpu_set_t *set);

#ifdef __cplusplus
}
#endif
#endif
