/* GPU discovery for the local cluster (deploy/gpuinfo.c) where it does not depend on the
 * machine: CUDA_VISIBLE_DEVICES handling and NUMA cpulists. */
#include "deploy/gpuinfo.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void arm(void)
{
    alarm(30);
}

static int machine_has_gpus(void)
{
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (d != NULL) {
        closedir(d);
        return 1;
    }
    return system("nvidia-smi -L >/dev/null 2>&1") == 0;
}

Test(deploy_gpuinfo, empty_cuda_visible_devices_hides_every_gpu, .init = arm)
{
    gs_gpu_t g[GS_GPU_MAX];
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    cr_assert_eq(gs_gpu_discover(g), 0);
}

Test(deploy_gpuinfo, visible_devices_are_taken_in_order_without_a_driver, .init = arm)
{
    gs_gpu_t g[GS_GPU_MAX];
    if (machine_has_gpus()) cr_skip_test("this machine has GPUs: the physical list applies");
    setenv("CUDA_VISIBLE_DEVICES", "3, 1,GPU-8e2f", 1);
    cr_assert_eq(gs_gpu_discover(g), 3);
    cr_assert_str_eq(g[0].id, "3");
    cr_assert_str_eq(g[1].id, "1");
    cr_assert_str_eq(g[2].id, "GPU-8e2f");
    cr_assert_eq(g[0].numa_node, -1);
    cr_assert_str_eq(g[0].bus_id, "");
}

Test(deploy_gpuinfo, invalid_visible_entry_ends_the_list, .init = arm)
{
    gs_gpu_t g[GS_GPU_MAX];
    if (machine_has_gpus()) cr_skip_test("this machine has GPUs: the physical list applies");
    setenv("CUDA_VISIBLE_DEVICES", "2,-1,0", 1);   /* CUDA ignores everything after -1 */
    cr_assert_eq(gs_gpu_discover(g), 1);
    cr_assert_str_eq(g[0].id, "2");
}

Test(deploy_gpuinfo, visible_indices_beyond_the_physical_gpus_end_the_list, .init = arm)
{
    gs_gpu_t g[GS_GPU_MAX];
    int n;
    if (!machine_has_gpus()) cr_skip_test("no GPU on this machine");
    unsetenv("CUDA_VISIBLE_DEVICES");
    n = gs_gpu_discover(g);
    cr_assert_gt(n, 0);
    setenv("CUDA_VISIBLE_DEVICES", n > 1 ? "1,0,99" : "0,99", 1);
    cr_assert_eq(gs_gpu_discover(g), n > 1 ? 2 : 1);
    cr_assert_str_eq(g[0].id, n > 1 ? "1" : "0");
}

Test(deploy_gpuinfo, numa_cpulist_is_parsed, .init = arm)
{
    cpu_set_t set;
    if (access("/sys/devices/system/node/node0/cpulist", R_OK) != 0)
        cr_skip_test("no NUMA information in sysfs");
    cr_assert_gt(gs_numa_cpuset(0, &set), 0);
    cr_assert_eq(gs_numa_cpuset(-1, &set), 0);
    cr_assert_eq(gs_numa_cpuset(100000, &set), 0);
}
