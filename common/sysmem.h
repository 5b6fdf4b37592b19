/* The memory this process may use: physical memory, bounded by the cgroup (v1 or v2) it runs in.
 *
 * Used for automatic memory limits (gworker --memory-limit auto, gs-local-cluster dividing a
 * host among its workers) so that a worker inside a container, a Slurm job or a systemd unit
 * with MemoryMax= is never promised more than the kernel will let it have. */
#ifndef GS_COMMON_SYSMEM_H
#define GS_COMMON_SYSMEM_H

#include <gsched/status.h>
#include <stdint.h>

typedef struct gs_sysmem {
    uint64_t physical;     /* bytes of RAM (MemTotal of proc/meminfo, else sysconf) */
    uint64_t cgroup_limit; /* smallest limit on the path of this process's cgroup (v2 memory.max
                              and memory.high, v1 memory.limit_in_bytes); 0 = none found */
    uint64_t total;        /* min(physical, cgroup_limit where one is set): what may be used */
    char source[256];      /* where total came from: "physical memory" or the limit file's path */
} gs_sysmem_t;

/** Find the memory this process may use.
 *  @a root is the file-system root to read from ("/" or NULL for the real one; tests pass a
 *  directory holding proc/self/cgroup, proc/meminfo and sys/fs/cgroup/...). Missing or
 *  unreadable cgroup files are not errors (no limit from them); malformed lines are skipped.
 *  Returns GS_OK and fills *mem_p; GS_ERR_INVALID_PARAM when @a mem_p is NULL. Never fails
 *  otherwise: without any readable source physical memory falls back to 4 GiB. */
gs_status_t gs_sysmem_query(const char *root, gs_sysmem_t *mem_p);

/** One worker's share when @a nworkers workers divide @a mem->total (nworkers 0 counts as 1):
 *  total / nworkers, rounded down to a MiB. */
uint64_t gs_sysmem_share(const gs_sysmem_t *mem, unsigned nworkers);

#endif
