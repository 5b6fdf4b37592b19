#include "deploy/gpuinfo.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gs__cmp_str(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

static int gs__read_int_file(const char *path, int *v)
{
    FILE *f = fopen(path, "r");
    int ok;
    if (f == NULL) return 0;
    ok = fscanf(f, "%d", v) == 1;
    fclose(f);
    return ok;
}

static int gs__numa_of_bus(const char *bus)
{
    char path[160];
    int node = -1;
    if (bus[0] == '\0') return -1;
    const int n = snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
    if (n < 0 || (size_t)n >= sizeof(path)) return -1;
    if (!gs__read_int_file(path, &node)) return -1;
    return node;
}

/* Lower-case the bus id and shorten an 8-digit PCI domain ("00000000:18:00.0", as nvidia-smi
 * prints it) to the 4 digits sysfs uses. */
static void gs__norm_bus(const char *in, char *out, size_t out_len)
{
    const char *colon = strchr(in, ':');
    size_t i = 0;
    if (colon != NULL && colon - in == 8 && strncmp(in, "0000", 4) == 0) in += 4;
    for (; *in != '\0' && !isspace((unsigned char)*in) && i + 1 < out_len; in++)
        out[i++] = (char)tolower((unsigned char)*in);
    out[i] = '\0';
}

typedef struct gs__phys {
    char bus[32];
    char uuid[80];
} gs__phys_t;

/* Physical GPUs in PCI order. */
static int gs__physical(gs__phys_t *p)
{
    int n = 0;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL && n < GS_GPU_MAX) {
            if (e->d_name[0] == '.') continue;
            gs__norm_bus(e->d_name, p[n].bus, sizeof(p[n].bus));
            p[n].uuid[0] = '\0';
            n++;
        }
        closedir(d);
        qsort(p, (size_t)n, sizeof(*p), gs__cmp_str);
        if (n > 0) return n;
    }
    /* no procfs entries (e.g. a container): ask nvidia-smi */
    {
        FILE *f = popen("nvidia-smi --query-gpu=pci.bus_id,uuid --format=csv,noheader 2>/dev/null",
                        "r");
        char line[256];
        if (f == NULL) return 0;
        while (fgets(line, sizeof(line), f) != NULL && n < GS_GPU_MAX) {
            char *comma = strchr(line, ',');
            char *uuid;
            if (comma == NULL) continue;
            *comma = '\0';
            gs__norm_bus(line, p[n].bus, sizeof(p[n].bus));
            uuid = comma + 1;
            while (isspace((unsigned char)*uuid)) uuid++;
            gs__norm_bus(uuid, p[n].uuid, sizeof(p[n].uuid));
            n++;
        }
        pclose(f);
        qsort(p, (size_t)n, sizeof(*p), gs__cmp_str);
    }
    return n;
}

int gs_gpu_discover(gs_gpu_t *gpus)
{
    gs__phys_t phys[GS_GPU_MAX];
    int nphys = gs__physical(phys);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;

    if (cvd == NULL) {
        for (int i = 0; i < nphys; i++) {
            snprintf(gpus[i].id, sizeof(gpus[i].id), "%d", i);
            snprintf(gpus[i].bus_id, sizeof(gpus[i].bus_id), "%.31s", phys[i].bus);
            gpus[i].numa_node = gs__numa_of_bus(phys[i].bus);
        }
        return nphys;
    }
    /* CUDA_VISIBLE_DEVICES: comma-separated indices or UUIDs; CUDA stops at the first invalid
     * entry, and so do we when the physical list is known */
    {
        const char *p = cvd;
        while (*p != '\0' && n < GS_GPU_MAX) {
            char tok[96];
            size_t len = strcspn(p, ",");
            int phys_idx = -1;
            while (len > 0 && isspace((unsigned char)*p)) {
                p++;
                len--;
            }
            if (len == 0 || len >= sizeof(tok)) break;
            memcpy(tok, p, len);
            tok[len] = '\0';
            while (len > 0 && isspace((unsigned char)tok[len - 1])) tok[--len] = '\0';
            if (isdigit((unsigned char)tok[0]) || tok[0] == '-' || tok[0] == '+') {
                char *end;
                long v = strtol(tok, &end, 10);
                if (*end != '\0' || v < 0) break;
                if (nphys > 0 && v >= nphys) break;
                phys_idx = nphys > 0 ? (int)v : -1;
            } else if (nphys > 0) {
                char low[96];
                gs__norm_bus(tok, low, sizeof(low));
                for (int i = 0; i < nphys; i++)
                    if (phys[i].uuid[0] != '\0' && strncmp(phys[i].uuid, low, strlen(low)) == 0)
                        phys_idx = i;
            }
            snprintf(gpus[n].id, sizeof(gpus[n].id), "%.95s", tok);
            if (phys_idx >= 0) {
                snprintf(gpus[n].bus_id, sizeof(gpus[n].bus_id), "%.31s", phys[phys_idx].bus);
                gpus[n].numa_node = gs__numa_of_bus(phys[phys_idx].bus);
            } else {
                gpus[n].bus_id[0] = '\0';
                gpus[n].numa_node = -1;
            }
            n++;
            p += strcspn(p, ",");
            if (*p == ',') p++;
        }
    }
    return n;
}

int gs_numa_cpuset(int node, cpu_set_t *set)
{
    char path[96], buf[4096];
    FILE *f;
    char *p;
    int count = 0;
    if (node < 0) return 0;
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
    f = fopen(path, "r");
    if (f == NULL) return 0;
    if (fgets(buf, sizeof(buf), f) == NULL) {
        fclose(f);
        return 0;
    }
    fclose(f);
    CPU_ZERO(set);
    p = buf;
    while (*p != '\0' && *p != '\n') {
        char *end;
        long a = strtol(p, &end, 10), b;
        if (end == p || a < 0) return 0;
        b = a;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a) return 0;
            p = end;
        }
        for (long c = a; c <= b && c < CPU_SETSIZE; c++) {
            CPU_SET((int)c, set);
            count++;
        }
        if (*p == ',') p++;
    }
    return count;
}
