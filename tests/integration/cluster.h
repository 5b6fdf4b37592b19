/* Test helpers: spawning gsched / gworker / gs-local-cluster as real processes on loopback with
 * free ports, and making sure none of them outlives the test.
 *
 * Every process started here is recorded; tp_kill_all() (registered with atexit by the first
 * spawn, and called from test teardowns) SIGKILLs and reaps them. Children also carry
 * PR_SET_PDEATHSIG(SIGKILL), so a test process that dies (timeout, crash) takes them along. */
#ifndef GS_TESTS_CLUSTER_H
#define GS_TESTS_CLUSTER_H

#include <gsched/gsched.h>

#include <stddef.h>
#include <sys/types.h>

#define TC_MAX_WORKERS 8

/** Full path of a gsched program ($GS_BIN_DIR/<name>, else <test dir>/../bin/<name>). */
const char *tp_bin(const char *name, char *buf, size_t len);

/** Start argv[0] with argv. When @a out_fd is not NULL, the child's stdout is a pipe whose read
 *  end is returned there; otherwise stdout goes to stderr. @a env_token: NULL or the value of
 *  GSCHED_TOKEN for the child (else GSCHED_TOKEN is removed). Returns the pid or -1. */
pid_t tp_spawn(const char *const argv[], int *out_fd, const char *env_token);
/** As tp_spawn, with the child's stderr going to the same pipe as its stdout. */
pid_t tp_spawn_capture(const char *const argv[], int *out_fd, const char *env_token);
/** Read everything from @a fd until EOF (or the timeout) into @a buf (NUL-terminated). */
size_t tp_read_all(int fd, char *buf, size_t len, double timeout_s);

/** Read lines from @a fd until one starts with @a prefix; copy the rest of that line into
 *  @a rest. Lines before it are appended to @a seen (if not NULL, NUL-terminated, @a seen_len
 *  bytes). Returns 1 on success, 0 on EOF or timeout. */
int tp_read_line(int fd, const char *prefix, char *rest, size_t rest_len, char *seen,
                 size_t seen_len, double timeout_s);

/** Wait up to @a timeout_s for @a pid to exit; returns 1 and *status_p (waitpid status) when it
 *  did, 0 otherwise. */
int tp_wait_exit(pid_t pid, int *status_p, double timeout_s);

/** 1 if process @a pid exists and is not a zombie. */
int tp_alive(pid_t pid);

/** Pids of the live (non-zombie) children of @a parent, from /proc. Returns the count. */
int tp_children(pid_t parent, pid_t *out, int max);

/** SIGKILL and reap every process started with tp_spawn that is still around. */
void tp_kill_all(void);

typedef struct tcluster {
    pid_t sched;
    int sched_out;
    pid_t workers[TC_MAX_WORKERS];
    int nworkers;
    char address[96];
    const char *token;
} tcluster_t;

/** Start gsched on 127.0.0.1 (free port) and @a nworkers CPU workers (1 thread each), and wait
 *  until they are registered. With $GS_TEST_TLS=1, gsched, these workers and tc_connect's
 *  clients use mutual TLS (certificates made once per test process by the openssl CLI). @a token may be NULL. @a sched_args: extra gsched arguments
 *  (NULL-terminated list, or NULL). Returns 1 on success. */
int tc_start(tcluster_t *c, int nworkers, const char *token, const char *const *sched_args);
/** Start one more worker named @a name. */
pid_t tc_add_worker(tcluster_t *c, const char *name);
/** Start one more worker named @a name with the extra gworker arguments @a extra
 *  (NULL-terminated, or NULL). */
pid_t tc_add_worker_args(tcluster_t *c, const char *name, const char *const *extra);
/** Connect a client (token of the cluster); NULL on failure (message in gs_last_error()). */
gs_client_h tc_connect(const tcluster_t *c, unsigned lower_flags);
/** (fixture.c, Criterion suites only.) The suites' usual fixture: alarm(@a alarm_s) so a hung test dies, a cluster of @a nworkers
 *  CPU workers without a token (tc_start) and a client with the default lowering; asserts that
 *  both started. The client is the caller's (tc_down). */
gs_client_h tc_up(tcluster_t *c, int nworkers, unsigned alarm_s);
/** Destroy *@a client_p (NULL afterwards; NULL is fine) and kill every process started. */
void tc_down(gs_client_h *client_p);
/** (Criterion suites only.) A suite file's fixture around one cluster: defines the file's
 *  static tcluster_t CL and gs_client_h C, the .init function @a up (C = tc_up(&CL,
 *  @a nworkers, @a alarm_s)) and the .fini function down (tc_down(&C)). Used at file scope,
 *  without a semicolon. */
#define TC_SUITE_CLUSTER(up, nworkers, alarm_s)                                               \
    static tcluster_t CL;                                                                     \
    static gs_client_h C;                                                                     \
    static void up(void)                                                                      \
    {                                                                                         \
        C = tc_up(&CL, (nworkers), (alarm_s));                                                \
    }                                                                                         \
    static void down(void)                                                                    \
    {                                                                                         \
        tc_down(&C);                                                                          \
    }

#endif
