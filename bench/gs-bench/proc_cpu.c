/* CPU time of gs-bench and its local cluster from /proc: see proc_cpu.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "proc_cpu.h"

#include "common/alloc.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct gs__pent {
    int pid, ppid;
    int kind;                 /* 0 other, 1 gsched, 2 gworker */
    int desc;                 /* descendant of this process */
    unsigned long long ut, st;
} gs__pent_t;

/* Read /proc/<pid>/stat: command, parent, user and system ticks. 0 on success. */
static int gs__read_stat(int pid, gs__pent_t *e)
{
    char path[64], buf[1024], comm[64];
    FILE *f;
    size_t n;
    char *open_p, *close_p;
    unsigned long long ut = 0, st = 0;
    int ppid = 0;

    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if ((f = fopen(path, "r")) == NULL) return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    open_p = strchr(buf, '(');
    close_p = strrchr(buf, ')');
    if (open_p == NULL || close_p == NULL || close_p < open_p) return -1;
    n = (size_t)(close_p - open_p - 1);
    if (n >= sizeof(comm)) n = sizeof(comm) - 1;
    memcpy(comm, open_p + 1, n);
    comm[n] = '\0';
    if (sscanf(close_p + 2, "%*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ppid, &ut,
               &st) != 3)
        return -1;
    e->pid = pid;
    e->ppid = ppid;
    e->ut = ut;
    e->st = st;
    e->kind = strcmp(comm, "gsched") == 0 ? 1 : strcmp(comm, "gworker") == 0 ? 2 : 0;
    e->desc = 0;
    return 0;
}

/* Context switches of every thread of @a pid (from /proc/<pid>/task/<tid>/status). */
static long long gs__ctxsw(int pid)
{
    char path[96], line[256];
    DIR *d;
    struct dirent *de;
    long long total = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", pid);
    if ((d = opendir(path)) == NULL) return 0;
    while ((de = readdir(d)) != NULL) {
        FILE *f;
        if (!isdigit((unsigned char)de->d_name[0])) continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%.20s/status", pid, de->d_name);
        if ((f = fopen(path, "r")) == NULL) continue;
        while (fgets(line, sizeof(line), f) != NULL) {
            long long v;
            if (sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1 ||
                sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1)
                total += v;
        }
        fclose(f);
    }
    closedir(d);
    return total;
}

/* Every process of /proc, with descendants of this one marked; *n_p entries (free with
 * gs_free). NULL when /proc cannot be read. */
static gs__pent_t *gs__proc_scan(size_t *n_p)
{
    DIR *d;
    struct dirent *de;
    gs__pent_t *ents = NULL;
    size_t n = 0, cap = 0;
    int me = (int)getpid(), changed;

    if ((d = opendir("/proc")) == NULL) return NULL;
    while ((de = readdir(d)) != NULL) {
        gs__pent_t e;
        if (!isdigit((unsigned char)de->d_name[0])) continue;
        if (gs__read_stat(atoi(de->d_name), &e) != 0) continue;   /* exited meanwhile */
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 256;
            gs__pent_t *ne = gs_realloc(ents, ncap * sizeof(*ents), "proc entries");
            if (ne == NULL) break;   /* partial figures rather than none */
            ents = ne;
            cap = ncap;
        }
        ents[n++] = e;
    }
    closedir(d);
    /* mark descendants: parents precede children in no particular order, so iterate */
    do {
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            if (ents[i].desc || ents[i].pid == me) continue;
            if (ents[i].ppid == me) {
                ents[i].desc = changed = 1;
                continue;
            }
            for (size_t j = 0; j < n; j++) {
                if (ents[j].pid == ents[i].ppid && ents[j].desc) {
                    ents[i].desc = changed = 1;
                    break;
                }
            }
        }
    } while (changed);
    *n_p = n;
    return ents != NULL ? ents : gs_malloc(sizeof(*ents), "proc entries");
}

int gs_bench_cpu_sample(gs_bench_cpu_t *cpu_p)
{
    gs__pent_t *ents, self;
    size_t n = 0;
    double tick = (double)sysconf(_SC_CLK_TCK);

    memset(cpu_p, 0, sizeof(*cpu_p));
    if (tick <= 0) tick = 100.0;
    if (gs__read_stat((int)getpid(), &self) != 0) return -1;
    if ((ents = gs__proc_scan(&n)) == NULL) return -1;
    cpu_p->self_user_s = (double)self.ut / tick;
    cpu_p->self_sys_s = (double)self.st / tick;
    for (size_t i = 0; i < n; i++) {
        const gs__pent_t *e = &ents[i];
        if (!e->desc) continue;
        if (e->kind == 1) {
            cpu_p->sched_user_s += (double)e->ut / tick;
            cpu_p->sched_sys_s += (double)e->st / tick;
            cpu_p->ctxsw_sched += gs__ctxsw(e->pid);
            cpu_p->nsched++;
        } else if (e->kind == 2) {
            cpu_p->work_user_s += (double)e->ut / tick;
            cpu_p->work_sys_s += (double)e->st / tick;
            cpu_p->ctxsw_work += gs__ctxsw(e->pid);
            cpu_p->nwork++;
        } else {
            cpu_p->other_user_s += (double)e->ut / tick;
            cpu_p->other_sys_s += (double)e->st / tick;
        }
    }
    gs_free(ents);
    return 0;
}

void gs_bench_cpu_diff(const gs_bench_cpu_t *a, const gs_bench_cpu_t *b, gs_bench_cpu_t *d_p)
{
    d_p->self_user_s = b->self_user_s - a->self_user_s;
    d_p->self_sys_s = b->self_sys_s - a->self_sys_s;
    d_p->sched_user_s = b->sched_user_s - a->sched_user_s;
    d_p->sched_sys_s = b->sched_sys_s - a->sched_sys_s;
    d_p->work_user_s = b->work_user_s - a->work_user_s;
    d_p->work_sys_s = b->work_sys_s - a->work_sys_s;
    d_p->other_user_s = b->other_user_s - a->other_user_s;
    d_p->other_sys_s = b->other_sys_s - a->other_sys_s;
    d_p->ctxsw_sched = b->ctxsw_sched - a->ctxsw_sched;
    d_p->ctxsw_work = b->ctxsw_work - a->ctxsw_work;
    d_p->nsched = b->nsched;
    d_p->nwork = b->nwork;
}

int gs_bench_proc_daemons(int *pids, int *kinds, int max)
{
    size_t n = 0;
    int k = 0;
    gs__pent_t *ents = gs__proc_scan(&n);
    if (ents == NULL) return 0;
    for (int kind = 1; kind <= 2; kind++) {
        for (size_t i = 0; i < n && k < max; i++) {
            if (!ents[i].desc || ents[i].kind != kind) continue;
            int j = k++;
            while (j > 0 && kinds[j - 1] == kind && pids[j - 1] > ents[i].pid) {   /* by pid */
                pids[j] = pids[j - 1];
                kinds[j] = kinds[j - 1];
                j--;
            }
            pids[j] = ents[i].pid;
            kinds[j] = kind;
        }
    }
    gs_free(ents);
    return k;
}

unsigned long long gs_bench_proc_rss(int pid)
{
    char path[64], line[256];
    unsigned long long kb = 0, v;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    if ((f = fopen(path, "r")) == NULL) return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %llu kB", &v) == 1) {
            kb = v;
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

int gs_bench_proc_fds(int pid)
{
    char path[64];
    struct dirent *e;
    int n = 0;
    DIR *d;
    snprintf(path, sizeof(path), "/proc/%d/fd", pid);
    if ((d = opendir(path)) == NULL) return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}
