/* gs_sysmem_query against file trees laid out like /proc and /sys/fs/cgroup of real hosts and
 * containers (cgroup v2, v1, nested limits, container views, malformed files). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/sysmem.h"

#define GIB ((uint64_t)1 << 30)
#define MIB ((uint64_t)1 << 20)

static char g_root[256];

/* Writes root/rel (creating its directories) with @a text. */
static void put(const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", g_root, rel);
    for (char *p = path + strlen(g_root) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void setup(void)
{
    snprintf(g_root, sizeof(g_root), "/tmp/gs-sysmem-XXXXXX");
    cr_assert_not_null(mkdtemp(g_root));
    put("proc/meminfo", "MemTotal:        8388608 kB\nMemFree:         1000 kB\n");
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_root);
    cr_assert_eq(system(cmd), 0);
}

static gs_sysmem_t query(void)
{
    gs_sysmem_t m;
    cr_assert_eq(gs_sysmem_query(g_root, &m), GS_OK);
    return m;
}

#define V2_MOUNT "30 20 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"

TestSuite(common_sysmem, .init = setup, .fini = teardown);

Test(common_sysmem, physical_memory_without_cgroup)
{
    gs_sysmem_t m = query();
    cr_assert_eq(m.physical, 8 * GIB);
    cr_assert_eq(m.cgroup_limit, 0);
    cr_assert_eq(m.total, 8 * GIB);
    cr_assert_str_eq(m.source, "physical memory");
}

Test(common_sysmem, v2_container_view_limit)
{
    put("proc/self/cgroup", "0::/\n");
    put("proc/self/mountinfo", V2_MOUNT);
    put("sys/fs/cgroup/memory.max", "1073741824\n");
    gs_sysmem_t m = query();
    cr_assert_eq(m.total, 1 * GIB);
    cr_assert(strstr(m.source, "sys/fs/cgroup/memory.max") != NULL, "source %s", m.source);
}

Test(common_sysmem, v2_smallest_limit_on_the_path_wins)
{
    put("proc/self/cgroup", "0::/system.slice/gs.service\n");
    put("proc/self/mountinfo", V2_MOUNT);
    put("sys/fs/cgroup/system.slice/memory.max", "2147483648\n");
    put("sys/fs/cgroup/system.slice/gs.service/memory.max", "max\n");
    put("sys/fs/cgroup/system.slice/gs.service/memory.high", "3221225472\n");
    gs_sysmem_t m = query();
    cr_assert_eq(m.cgroup_limit, 2 * GIB);
    cr_assert_eq(m.total, 2 * GIB);
    cr_assert(strstr(m.source, "system.slice/memory.max") != NULL, "source %s", m.source);
}

Test(common_sysmem, v2_memory_high_counts)
{
    put("proc/self/cgroup", "0::/job\n");
    put("proc/self/mountinfo", V2_MOUNT);
    put("sys/fs/cgroup/job/memory.max", "max\n");
    put("sys/fs/cgroup/job/memory.high", "536870912\n");
    cr_assert_eq(query().total, 512 * MIB);
}

Test(common_sysmem, v1_container_sees_its_cgroup_at_the_mount_point)
{
    put("proc/self/cgroup", "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n");
    put("proc/self/mountinfo",
        "40 30 0:35 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"
        "41 30 0:36 /docker/abc /sys/fs/cgroup/cpu ro - cgroup cgroup rw,cpu,cpuacct\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n");
    put("sys/fs/cgroup/cpu/memory.limit_in_bytes", "1\n"); /* not the memory hierarchy */
    gs_sysmem_t m = query();
    cr_assert_eq(m.total, 512 * MIB);
    cr_assert(strstr(m.source, "memory/memory.limit_in_bytes") != NULL, "source %s", m.source);
}

Test(common_sysmem, v1_unlimited_means_physical)
{
    put("proc/self/cgroup", "4:memory:/user.slice\n");
    put("proc/self/mountinfo", "40 30 0:35 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
    put("sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes", "9223372036854771712\n");
    gs_sysmem_t m = query();
    cr_assert_eq(m.total, 8 * GIB);
    cr_assert_str_eq(m.source, "physical memory");
}

Test(common_sysmem, hybrid_takes_the_smaller_of_v1_and_v2)
{
    put("proc/self/cgroup", "4:memory:/a\n0::/a\n");
    put("proc/self/mountinfo",
        "40 30 0:35 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "41 30 0:36 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
    put("sys/fs/cgroup/memory/a/memory.limit_in_bytes", "3221225472\n");
    put("sys/fs/cgroup/unified/a/memory.max", "1073741824\n");
    cr_assert_eq(query().total, 1 * GIB);
}

Test(common_sysmem, without_mountinfo_the_usual_mount_points)
{
    put("proc/self/cgroup", "0::/w\n");
    put("sys/fs/cgroup/w/memory.max", "1073741824\n");
    cr_assert_eq(query().total, 1 * GIB);
}

Test(common_sysmem, malformed_files_are_ignored)
{
    put("proc/self/cgroup", "garbage\n::\n0::relative\n0::/x\n");
    put("proc/self/mountinfo", "nonsense line\n" V2_MOUNT);
    put("sys/fs/cgroup/x/memory.max", "12abc\n");
    put("sys/fs/cgroup/memory.high", "\n");
    gs_sysmem_t m = query();
    cr_assert_eq(m.cgroup_limit, 0);
    cr_assert_eq(m.total, 8 * GIB);
}

Test(common_sysmem, real_machine_is_bounded_by_physical)
{
    gs_sysmem_t m;
    cr_assert_eq(gs_sysmem_query(NULL, &m), GS_OK);
    cr_assert_gt(m.physical, 0);
    cr_assert_leq(m.total, m.physical);
    cr_assert_eq(gs_sysmem_query(NULL, NULL), GS_ERR_INVALID_PARAM);
}

Test(common_sysmem, share_divides_and_rounds_to_a_mib)
{
    gs_sysmem_t m = {.total = 10 * GIB + 12345};
    cr_assert_eq(gs_sysmem_share(&m, 0), 10 * GIB);
    cr_assert_eq(gs_sysmem_share(&m, 1), 10 * GIB);
    cr_assert_eq(gs_sysmem_share(&m, 3), (10 * GIB / 3) & ~(MIB - 1));
    cr_assert_eq(gs_sysmem_share(NULL, 2), 0);
}
