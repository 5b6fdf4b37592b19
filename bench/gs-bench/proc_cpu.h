/* CPU time of this process and of its descendant gsched / gworker processes, from /proc
 * (Linux); their RSS and open descriptors. gs-bench samples it around timed runs on a local cluster to report where the CPU
 * time goes per task, a figure that holds up on a loaded machine where wall time does not. */
#ifndef GS_BENCH_PROC_CPU_H
#define GS_BENCH_PROC_CPU_H

typedef struct gs_bench_cpu {
    double self_user_s, self_sys_s;      /* this process, all threads */
    double sched_user_s, sched_sys_s;    /* descendants whose command is "gsched" */
    double work_user_s, work_sys_s;      /* descendants whose command is "gworker" */
    double other_user_s, other_sys_s;    /* any other descendant (the launcher) */
    int nsched, nwork;                   /* how many of each were found */
    long long ctxsw_sched, ctxsw_work;   /* context switches (voluntary + involuntary), all threads */
} gs_bench_cpu_t;

/** Fill *cpu_p from /proc. Returns 0, or -1 when /proc cannot be read (*cpu_p zeroed).
 *  Resolution: the kernel's clock tick (usually 10 ms). */
int gs_bench_cpu_sample(gs_bench_cpu_t *cpu_p);

/** *d_p = b - a, field by field (counts nsched / nwork are b's). */
void gs_bench_cpu_diff(const gs_bench_cpu_t *a, const gs_bench_cpu_t *b, gs_bench_cpu_t *d_p);

/* Daemons of a local cluster and what they hold (soak, tests/fuzz/sockfuzz). */

/** The live gsched (kind 1) and gworker (kind 2) processes descending from this process, at
 *  most @a max, gsched first, then workers by pid. Returns how many (0 when /proc is
 *  unreadable). */
int gs_bench_proc_daemons(int *pids, int *kinds, int max);
/** Resident set size of @a pid in bytes (VmRSS); 0 when unknown (e.g. it exited). */
unsigned long long gs_bench_proc_rss(int pid);
/** Open file descriptors of @a pid; -1 when unknown. */
int gs_bench_proc_fds(int pid);

#endif
