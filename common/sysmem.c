/* The memory this process may use: physical memory bounded by its cgroup (see sysmem.h).
 *
 * Where the limit is: /proc/self/cgroup names the process's cgroup in each hierarchy ("0::/path"
 * for v2, "N:...memory...:/path" for v1's memory controller); /proc/self/mountinfo says where
 * each hierarchy is mounted and which part of it the mount shows (inside a container the mount
 * root is the container's own cgroup). Limits are hierarchical, so every directory from the
 * process's cgroup up to the mount point is read and the smallest limit wins. Without
 * mountinfo the usual mount points are tried (/sys/fs/cgroup for v2, /sys/fs/cgroup/memory for
 * v1). */
#include "common/sysmem.h"

#include "common/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GS__SYSMEM_PATH 1024

typedef struct gs__cgroup_mount {
    char point[GS__SYSMEM_PATH]; /* mount point, below root */
    char root[GS__SYSMEM_PATH];  /* the part of the hierarchy the mount shows */
    int found;
} gs__cgroup_mount_t;

/* Copies @a src into @a dst of @a len bytes, cut to fit. */
static void gs__sysmem_copy(char *dst, size_t len, const char *src)
{
    size_t n = strlen(src);
    if (n >= len) n = len - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* out = a b c (any may be ""); returns 0 (out empty) when it does not fit in @a len bytes. */
static int gs__sysmem_join(char *out, size_t len, const char *a, const char *b, const char *c)
{
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    if (la + lb + lc >= len) {
        out[0] = '\0';
        return 0;
    }
    memcpy(out, a, la);
    memcpy(out + la, b, lb);
    memcpy(out + la + lb, c, lc + 1);
    return 1;
}

static void gs__sysmem_path(char *out, const char *root, const char *rel)
{
    (void)gs__sysmem_join(out, GS__SYSMEM_PATH, root, rel, "");
}

/* Reads one limit file: a byte count, or "max" (no limit: returns 0). */
static uint64_t gs__sysmem_read_limit(const char *path)
{
    char line[64];
    uint64_t v = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL) return 0;
    if (fgets(line, sizeof(line), f) != NULL && strncmp(line, "max", 3) != 0) {
        char *end;
        unsigned long long x = strtoull(line, &end, 10);
        if (end != line && (*end == '\n' || *end == '\0')) v = (uint64_t)x;
    }
    fclose(f);
    return v;
}

static uint64_t gs__sysmem_physical(const char *root, int real_root)
{
    char path[GS__SYSMEM_PATH], line[256];
    unsigned long long kb = 0;
    gs__sysmem_path(path, root, "/proc/meminfo");
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        while (fgets(line, sizeof(line), f) != NULL)
            if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
        fclose(f);
    }
    if (kb > 0) return (uint64_t)kb * 1024u;
    if (real_root) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0) return (uint64_t)pages * (uint64_t)psz;
    }
    return (uint64_t)4 << 30;
}

/* Does the comma-separated list @a list hold @a word? */
static int gs__sysmem_has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && strncmp(p, word, n) == 0) return 1;
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

/* The process's cgroup path in v2 (v2_p) and in v1's memory hierarchy (v1_p); "" if absent. */
static void gs__sysmem_read_cgroup(const char *root, char *v2_p, char *v1_p)
{
    char path[GS__SYSMEM_PATH], line[GS__SYSMEM_PATH + 64];
    v2_p[0] = v1_p[0] = '\0';
    gs__sysmem_path(path, root, "/proc/self/cgroup");
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c2 == NULL || c2[1] != '/') continue;
        *c2 = '\0';
        if (strcmp(line, "0:") == 0 && c1 + 1 == c2)
            gs__sysmem_copy(v2_p, GS__SYSMEM_PATH, c2 + 1);
        else if (gs__sysmem_has_word(c1 + 1, "memory"))
            gs__sysmem_copy(v1_p, GS__SYSMEM_PATH, c2 + 1);
    }
    fclose(f);
}

/* Finds the cgroup2 mount and v1's memory mount in mountinfo. */
static void gs__sysmem_read_mounts(const char *root, gs__cgroup_mount_t *v2,
                                   gs__cgroup_mount_t *v1)
{
    char path[GS__SYSMEM_PATH], line[4096];
    memset(v2, 0, sizeof(*v2));
    memset(v1, 0, sizeof(*v1));
    gs__sysmem_path(path, root, "/proc/self/mountinfo");
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        while (fgets(line, sizeof(line), f) != NULL) {
            char mroot[GS__SYSMEM_PATH], point[GS__SYSMEM_PATH], fstype[64], super[1024];
            const char *dash = strstr(line, " - ");
            if (dash == NULL) continue;
            if (sscanf(line, "%*s %*s %*s %1023s %1023s", mroot, point) != 2) continue;
            if (sscanf(dash + 3, "%63s %*s %1023s", fstype, super) != 2) continue;
            gs__cgroup_mount_t *m = NULL;
            if (strcmp(fstype, "cgroup2") == 0) m = v2;
            else if (strcmp(fstype, "cgroup") == 0 && gs__sysmem_has_word(super, "memory")) m = v1;
            if (m == NULL || m->found) continue;
            gs__sysmem_copy(m->point, sizeof(m->point), point);
            gs__sysmem_copy(m->root, sizeof(m->root), mroot);
            m->found = 1;
        }
        fclose(f);
        return;
    }
    /* no mountinfo: the usual places */
    gs__sysmem_copy(v2->point, sizeof(v2->point), "/sys/fs/cgroup");
    gs__sysmem_copy(v2->root, sizeof(v2->root), "/");
    v2->found = 1;
    gs__sysmem_copy(v1->point, sizeof(v1->point), "/sys/fs/cgroup/memory");
    gs__sysmem_copy(v1->root, sizeof(v1->root), "/");
    v1->found = 1;
}

/* Smallest limit among @a files in every directory from the cgroup @a cg up to the mount point
 * of @a m; the file it came from goes to src (when a limit is found). */
static uint64_t gs__sysmem_walk(const char *root, const gs__cgroup_mount_t *m, const char *cg,
                                const char *const *files, char *src, size_t srclen)
{
    char rel[GS__SYSMEM_PATH], dir[GS__SYSMEM_PATH], file[GS__SYSMEM_PATH + 32];
    uint64_t best = 0;
    size_t rl = strlen(m->root);
    if (!m->found || cg[0] == '\0') return 0;
    /* the part of cg below the mount's root; a cgroup outside what the mount shows (a container
     * seeing the host's path) is read at the mount point itself */
    if (strcmp(m->root, "/") == 0) gs__sysmem_copy(rel, sizeof(rel), cg);
    else if (strncmp(cg, m->root, rl) == 0 && (cg[rl] == '/' || cg[rl] == '\0'))
        gs__sysmem_copy(rel, sizeof(rel), cg + rl);
    else rel[0] = '\0';
    for (;;) {
        size_t n = strlen(rel);
        while (n > 0 && rel[n - 1] == '/') rel[--n] = '\0';
        if (!gs__sysmem_join(dir, sizeof(dir), root, m->point, rel)) break;
        for (int i = 0; files[i] != NULL; i++) {
            if (!gs__sysmem_join(file, sizeof(file), dir, "/", files[i])) continue;
            uint64_t v = gs__sysmem_read_limit(file);
            if (v > 0 && (best == 0 || v < best)) {
                best = v;
                gs__sysmem_copy(src, srclen, file);
            }
        }
        if (n == 0) break;
        char *slash = strrchr(rel, '/');
        if (slash == NULL) break;
        *slash = '\0';
    }
    return best;
}

gs_status_t gs_sysmem_query(const char *root, gs_sysmem_t *mem_p)
{
    static const char *const v2_files[] = {"memory.max", "memory.high", NULL};
    static const char *const v1_files[] = {"memory.limit_in_bytes", NULL};
    char v2cg[GS__SYSMEM_PATH], v1cg[GS__SYSMEM_PATH], src1[sizeof(((gs_sysmem_t *)0)->source)];
    gs__cgroup_mount_t v2m, v1m;
    gs_sysmem_t m;
    int real_root;

    if (mem_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "sysmem query: mem_p is NULL");
    real_root = (root == NULL || root[0] == '\0' || strcmp(root, "/") == 0);
    if (real_root) root = "";
    memset(&m, 0, sizeof(m));
    m.physical = gs__sysmem_physical(root, real_root);
    gs__sysmem_read_cgroup(root, v2cg, v1cg);
    gs__sysmem_read_mounts(root, &v2m, &v1m);
    m.cgroup_limit = gs__sysmem_walk(root, &v2m, v2cg, v2_files, m.source, sizeof(m.source));
    uint64_t v1 = gs__sysmem_walk(root, &v1m, v1cg, v1_files, src1, sizeof(src1));
    if (v1 > 0 && (m.cgroup_limit == 0 || v1 < m.cgroup_limit)) {
        m.cgroup_limit = v1;
        gs__sysmem_copy(m.source, sizeof(m.source), src1);
    }
    if (m.cgroup_limit > 0 && m.cgroup_limit < m.physical) {
        m.total = m.cgroup_limit;
    } else {
        m.total = m.physical;
        gs__sysmem_copy(m.source, sizeof(m.source), "physical memory");
    }
    *mem_p = m;
    return GS_OK;
}

uint64_t gs_sysmem_share(const gs_sysmem_t *mem, unsigned nworkers)
{
    uint64_t share;
    if (mem == NULL) return 0;
    share = mem->total / (nworkers ? nworkers : 1);
    if (share >= ((uint64_t)1 << 20)) share &= ~(((uint64_t)1 << 20) - 1);
    return share;
}
