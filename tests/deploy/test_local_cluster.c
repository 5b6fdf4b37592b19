/* gs-local-cluster as a real process tree: readiness, clean stop, no orphans (checked in /proc),
 * reaction to a dying gsched, argument errors, and the client's "local" address. This test
 * process is a child subreaper, so any daemon orphaned by the launcher would be re-parented to
 * it and show up as its child. */
#include "../integration/cluster.h"
#include "deploy_util.h"

#include "common/sysmem.h"
#include "common/time.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void setup(void)
{
    dp_subreaper_start(120);
}

typedef struct launched {
    pid_t pid;
    int out;
    char address[96];
    char token[80];             /* the token the launcher generated ("" if none printed) */
    /* the output before the ready line (tp_read_line keeps whole lines while they fit): with
     * --log-level info and stderr captured, the daemons' start-up lines filled 4 KiB before the
     * launcher's token line in some runs, the token was lost and the client refused ("wrong
     * cluster token"; seen twice in session 14 under parallel ctest) */
    char seen[1 << 16];
    pid_t tree[64];
    int ntree;
} launched_t;

/* Every descendant of @a root (breadth first, from /proc). */
static int descendants(pid_t root, pid_t *out, int max)
{
    int n = 0, head = 0;
    pid_t queue[128];
    int nq = 0;
    queue[nq++] = root;
    while (head < nq) {
        pid_t kids[64];
        int k = tp_children(queue[head++], kids, 64);
        for (int i = 0; i < k && n < max && nq < 128; i++) {
            out[n++] = kids[i];
            queue[nq++] = kids[i];
        }
    }
    return n;
}

/* Start the launcher (stderr too into l->out when @a capture) and wait for its ready line. */
static void launch_impl(launched_t *l, const char *const *extra, int capture)
{
    char bin[PATH_MAX];
    const char *argv[24];
    memset(l, 0, sizeof(*l));
    dp_launcher_argv(argv, 24, bin, sizeof(bin), NULL, extra);
    l->pid = capture ? tp_spawn_capture(argv, &l->out, NULL) : tp_spawn(argv, &l->out, NULL);
    cr_assert_gt(l->pid, 0);
    cr_assert(tp_read_line(l->out, "gs-local-cluster ready ", l->address, sizeof(l->address),
                           l->seen, sizeof(l->seen), 30.0),
              "no ready line; output so far:\n%s", l->seen);
    {
        const char *t = strstr(l->seen, "gs-local-cluster token ");
        if (t != NULL) sscanf(t, "gs-local-cluster token %79s", l->token);
        cr_assert(strlen(l->seen) + 512 < sizeof(l->seen),
                  "the launcher's output before its ready line nearly fills the buffer (%zu "
                  "bytes): lines may have been dropped", strlen(l->seen));
    }
    l->ntree = descendants(l->pid, l->tree, 64);
}

/* Whether /proc/PID/FILE (NUL-separated like cmdline and environ) holds @a needle. */
static int proc_file_has(pid_t pid, const char *file, const char *needle)
{
    static char buf[1 << 16];
    char path[64];
    size_t n;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    return memmem(buf, n, needle, strlen(needle)) != NULL;
}

/* No process of the cluster has the token (or any --token) on its command line. */
static void assert_no_token_on_command_lines(const launched_t *l, const char *token)
{
    for (int i = 0; i < l->ntree; i++) {
        cr_assert(!proc_file_has(l->tree[i], "cmdline", "--token"), "pid %d", (int)l->tree[i]);
        if (token != NULL && token[0] != '\0')
            cr_assert(!proc_file_has(l->tree[i], "cmdline", token), "pid %d", (int)l->tree[i]);
    }
}

/* Client params for the launched cluster (its generated token). */
static void client_params(gs_client_params_t *p, const launched_t *l)
{
    dp_client_params(p, l->address, l->token);
}

static void launch(launched_t *l, const char *const *extra)
{
    launch_impl(l, extra, 0);
}

static int count_lines(const char *s, const char *prefix)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, prefix)) != NULL; p++) n++;
    return n;
}

static void assert_tree_gone(const launched_t *l, double timeout_s)
{
    double deadline = gs_now_s() + timeout_s;
    for (int i = 0; i < l->ntree; i++) {
        while (tp_alive(l->tree[i]) && gs_now_s() < deadline) {
            while (waitpid(-1, NULL, WNOHANG) > 0) {   /* reap re-parented orphans */
            }
            usleep(2000);
        }
        cr_assert(!tp_alive(l->tree[i]), "process %d of the cluster is still running",
                  (int)l->tree[i]);
    }
    {
        pid_t kids[8];
        cr_assert_eq(tp_children(getpid(), kids, 8), 0, "an orphan was re-parented to the test");
    }
}

Test(deploy_local_cluster, starts_n_cpu_workers_prints_ready_and_stops_cleanly, .init = setup,
     .fini = dp_children_kill)
{
    const char *extra[] = {"--nworkers", "3", "--backend", "cpu", NULL};
    launched_t l;
    gs_client_params_t p;
    gs_client_h c;
    int st;
    launch(&l, extra);
    cr_assert_eq(count_lines(l.seen, "gs-local-cluster worker "), 3, "%s", l.seen);
    cr_assert_eq(strncmp(l.address, "tcp://127.0.0.1:", 16), 0, "%s", l.address);
    cr_assert_eq(l.ntree, 4, "expected gsched + 3 workers under the launcher, found %d", l.ntree);
    client_params(&p, &l);
    cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_client_nworkers(c), 3);
    {   /* the automatic memory limit: the three workers divide what this host may use */
        gs_client_worker_info_t info[3];
        gs_sysmem_t mem;
        size_t n = 0;
        cr_assert_eq(gs_sysmem_query(NULL, &mem), GS_OK);
        cr_assert_eq(gs_client_workers(c, info, 3, &n), GS_OK, "%s", gs_last_error());
        cr_assert_eq(n, 3);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(info[i].memory_limit, gs_sysmem_share(&mem, 3),
                         "%s: %llu, expected a third of %llu (%s)", info[i].name,
                         (unsigned long long)info[i].memory_limit,
                         (unsigned long long)mem.total, mem.source);
    }
    gs_client_destroy(c);

    cr_assert_eq(kill(l.pid, SIGTERM), 0);
    cr_assert(tp_wait_exit(l.pid, &st, 15.0), "launcher did not exit after SIGTERM");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher status 0x%x", st);
    assert_tree_gone(&l, 5.0);
}

/* On @a c: full(0.5, (n, n)) in chunk x chunk blocks, summed; with @a plus_transpose,
 * (x + x.T).sum() (chunks then move between workers). */
static double sum_of_full(gs_client_h c, int64_t n, int64_t chunk, int plus_transpose)
{
    int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
    gs_array_h a, t, s;
    double v = 0;
    cr_assert_eq(gs_array_full(0.5, 2, shape, chunks, &a), GS_OK);
    if (plus_transpose) {
        cr_assert_eq(gs_array_transpose(a, NULL, &t), GS_OK);
        cr_assert_eq(gs_array_binary(GS_BINARY_ADD, a, t, &s), GS_OK);
        gs_array_release(t);
        gs_array_release(a);
        a = s;
    }
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, a, NULL, &s), GS_OK);
    cr_assert_eq(gs_client_compute_scalar(c, s, &v), GS_OK, "%s", gs_last_error());
    gs_array_release(s);
    gs_array_release(a);
    return v;
}

/* A log line at warn level or above ("[time] gworker[pid] warn  file:line ..."), or NULL. */
static const char *find_warning(const char *log)
{
    static const char *const levels[] = {"] warn ", "] error ", "] fatal "};
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        const char *w = strstr(log, levels[i]);
        if (w != NULL) return w;
    }
    return NULL;
}

Test(deploy_local_cluster, a_clean_run_and_shutdown_log_no_warning, .init = setup,
     .fini = dp_children_kill)
{
    const char *extra[] = {"--nworkers", "2", "--backend", "cpu", "--log-level", "info", NULL};
    static char log[1 << 16];
    gs_client_params_t p;
    gs_client_h c;
    launched_t l;
    const char *w;
    int st;
    launch_impl(&l, extra, 1);
    client_params(&p, &l);
    cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
    /* a job whose chunks move between the two workers */
    cr_assert_eq(sum_of_full(c, 400, 100, 1), 160000.0);
    gs_client_destroy(c);

    cr_assert_eq(kill(l.pid, SIGTERM), 0);
    tp_read_all(l.out, log, sizeof(log), 15.0);
    cr_assert(tp_wait_exit(l.pid, &st, 15.0), "launcher did not exit after SIGTERM");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher status 0x%x", st);
    assert_tree_gone(&l, 5.0);
    cr_assert_null(w = find_warning(l.seen), "warning while starting: %s", w);
    cr_assert_null(w = find_warning(log), "warning in a clean run: %s", w);
    cr_assert(strstr(log, "stopped (success)") != NULL, "no worker stop logged:\n%s", log);
}

Test(deploy_local_cluster, sigint_stops_everything_too, .init = setup, .fini = dp_children_kill)
{
    const char *extra[] = {"--nworkers", "1", "--backend", "cpu", NULL};
    launched_t l;
    int st;
    launch(&l, extra);
    cr_assert_eq(kill(l.pid, SIGINT), 0);
    cr_assert(tp_wait_exit(l.pid, &st, 15.0));
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher status 0x%x", st);
    assert_tree_gone(&l, 5.0);
}

Test(deploy_local_cluster, dying_gsched_stops_the_rest_with_an_error, .init = setup,
     .fini = dp_children_kill)
{
    const char *extra[] = {"--nworkers", "2", "--backend", "cpu", NULL};
    launched_t l;
    pid_t kids[8];
    int n, st;
    pid_t sched = 0;
    char comm[64];
    launch(&l, extra);
    n = tp_children(l.pid, kids, 8);
    for (int i = 0; i < n; i++) {
        char path[64];
        FILE *f;
        snprintf(path, sizeof(path), "/proc/%d/comm", (int)kids[i]);
        f = fopen(path, "r");
        if (f != NULL && fgets(comm, sizeof(comm), f) != NULL && strncmp(comm, "gsched", 6) == 0)
            sched = kids[i];
        if (f != NULL) fclose(f);
    }
    cr_assert_gt(sched, 0, "gsched not found among the launcher's children");
    cr_assert_eq(kill(sched, SIGKILL), 0);
    cr_assert(tp_wait_exit(l.pid, &st, 15.0), "launcher did not notice gsched dying");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "launcher status 0x%x", st);
    assert_tree_gone(&l, 5.0);
}

/* --restart-limit 0: the behaviour before restarts (tests/deploy/test_restart.c has those) */
Test(deploy_local_cluster, dying_worker_stops_the_rest_with_an_error, .init = setup,
     .fini = dp_children_kill)
{
    const char *extra[] = {"--nworkers", "2", "--backend", "cpu", "--restart-limit", "0", NULL};
    launched_t l;
    int st;
    pid_t victim = 0;
    launch(&l, extra);
    /* the worker lines carry the pids */
    {
        const char *p = strstr(l.seen, "gs-local-cluster worker ");
        cr_assert_not_null(p);
        cr_assert_eq(sscanf(p, "gs-local-cluster worker %*s pid %d", &victim), 1);
    }
    cr_assert_eq(kill(victim, SIGKILL), 0);
    cr_assert(tp_wait_exit(l.pid, &st, 15.0), "launcher did not notice the worker dying");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "launcher status 0x%x", st);
    assert_tree_gone(&l, 5.0);
}

Test(deploy_local_cluster, sigkill_of_the_launcher_leaves_no_orphans, .init = setup,
     .fini = dp_children_kill)
{
    const char *extra[] = {"--nworkers", "2", "--backend", "cpu", NULL};
    launched_t l;
    launch(&l, extra);
    cr_assert_eq(l.ntree, 3);
    cr_assert_eq(kill(l.pid, SIGKILL), 0);
    cr_assert(tp_wait_exit(l.pid, NULL, 5.0));
    assert_tree_gone(&l, 5.0);   /* PR_SET_PDEATHSIG */
}

Test(deploy_local_cluster, stdin_eof_stops_the_cluster_with_watch_stdin, .init = setup,
     .fini = dp_children_kill)
{
    /* the client's "local" mode relies on this: the launcher's stdin is a pipe from the client */
    char bin[PATH_MAX];
    int in[2], out[2], st;
    pid_t pid;
    launched_t l;
    memset(&l, 0, sizeof(l));
    cr_assert_eq(pipe(in), 0);
    cr_assert_eq(pipe(out), 0);
    tp_bin("gs-local-cluster", bin, sizeof(bin));
    pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        execl(bin, bin, "--port", "0", "--nworkers", "1", "--backend", "cpu", "--watch-stdin",
              (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    l.pid = pid;
    cr_assert(tp_read_line(out[0], "gs-local-cluster ready ", l.address, sizeof(l.address),
                           NULL, 0, 30.0));
    l.ntree = descendants(pid, l.tree, 64);
    cr_assert_eq(l.ntree, 2);
    close(in[1]);   /* EOF */
    cr_assert(tp_wait_exit(pid, &st, 15.0) || waitpid(pid, &st, 0) == pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher status 0x%x", st);
    assert_tree_gone(&l, 5.0);
    close(out[0]);
}

static void expect_usage_error(const char *const *args, const char *needle)
{
    char bin[PATH_MAX], buf[4096];
    const char *argv[16];
    int ac = 0, out, st;
    pid_t pid;
    argv[ac++] = tp_bin("gs-local-cluster", bin, sizeof(bin));
    for (int i = 0; args[i] != NULL; i++) argv[ac++] = args[i];
    argv[ac] = NULL;
    pid = tp_spawn_capture(argv, &out, NULL);
    tp_read_all(out, buf, sizeof(buf), 10.0);
    close(out);
    cr_assert(tp_wait_exit(pid, &st, 10.0));
    cr_assert(WIFEXITED(st), "killed by a signal: 0x%x", st);
    cr_assert_eq(WEXITSTATUS(st), 2, "exit status %d; output: %s", WEXITSTATUS(st), buf);
    cr_assert(strstr(buf, needle) != NULL, "output does not mention '%s': %s", needle, buf);
}

Test(deploy_local_cluster, bad_arguments_exit_2_with_a_message, .init = setup, .fini = dp_children_kill)
{
    expect_usage_error((const char *[]){"--nworkers", "0", NULL}, "--nworkers");
    expect_usage_error((const char *[]){"--nworkers", "two", NULL}, "--nworkers");
    expect_usage_error((const char *[]){"--backend", "tpu", NULL}, "tpu");
    expect_usage_error((const char *[]){"--port", "70000", NULL}, "--port");
    expect_usage_error((const char *[]){"--frobnicate", NULL}, "--frobnicate");
    expect_usage_error((const char *[]){"--port", NULL}, "--port");
    expect_usage_error((const char *[]){"--log-level", "loud", NULL}, "loud");
    expect_usage_error((const char *[]){"--restart-limit", "65", NULL}, "--restart-limit");
    expect_usage_error((const char *[]){"--restart-delay", "0", NULL}, "--restart-delay");
}

Test(deploy_local_cluster, client_local_address_starts_and_stops_a_private_cluster, .init = setup,
     .fini = dp_children_kill)
{
    gs_client_params_t p;
    gs_client_h c;
    pid_t kids[8];
    launched_t l;
    memset(&p, 0, sizeof(p));
    memset(&l, 0, sizeof(l));
    p.address = "local";
    p.field_mask = GS_CLIENT_FIELD_LOCAL_NWORKERS | GS_CLIENT_FIELD_LOCAL_BACKEND;
    p.local_nworkers = 2;
    p.local_backend = "cpu";
    cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_client_nworkers(c), 2);
    cr_assert_eq(tp_children(getpid(), kids, 8), 1, "one launcher expected");
    l.ntree = descendants(getpid(), l.tree, 64);
    cr_assert_eq(l.ntree, 4, "launcher + gsched + 2 workers, found %d", l.ntree);
    cr_assert_eq(sum_of_full(c, 100, 30, 0), 5000.0);
    assert_no_token_on_command_lines(&l, NULL);
    for (int i = 0; i < l.ntree; i++)   /* the client's own generated token, in the environment */
        cr_assert(proc_file_has(l.tree[i], "environ", "GSCHED_TOKEN="), "pid %d", (int)l.tree[i]);
    gs_client_destroy(c);
    assert_tree_gone(&l, 10.0);
}

Test(deploy_local_cluster, a_generated_token_travels_in_the_environment_and_locks_out_others,
     .init = setup, .fini = dp_children_kill)
{
    const char *extra[] = {"--nworkers", "2", "--backend", "cpu", NULL};
    char envvar[128];
    gs_client_params_t p;
    gs_client_h c;
    launched_t l;
    int st;
    launch(&l, extra);
    cr_assert_eq(strlen(l.token), 64, "no generated token printed: %s", l.seen);
    cr_assert_eq(strspn(l.token, "0123456789abcdef"), 64, "%s", l.token);
    cr_assert_eq(l.ntree, 3);
    assert_no_token_on_command_lines(&l, l.token);
    snprintf(envvar, sizeof(envvar), "GSCHED_TOKEN=%s", l.token);
    for (int i = 0; i < l.ntree; i++)
        cr_assert(proc_file_has(l.tree[i], "environ", envvar), "pid %d", (int)l.tree[i]);
    /* no token, a wrong token: refused; the generated one: served */
    client_params(&p, &l);
    p.token = "";
    cr_assert_eq(gs_client_connect(&p, &c), GS_ERR_AUTH, "%s", gs_last_error());
    p.token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    cr_assert_eq(gs_client_connect(&p, &c), GS_ERR_AUTH, "%s", gs_last_error());
    p.token = l.token;
    cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_client_nworkers(c), 2);
    gs_client_destroy(c);
    cr_assert_eq(kill(l.pid, SIGTERM), 0);
    cr_assert(tp_wait_exit(l.pid, &st, 15.0), "launcher did not exit after SIGTERM");
    assert_tree_gone(&l, 5.0);
}

/* SIGTERM the launcher: it exits 0 and leaves no process behind. */
static void stop_cleanly(const launched_t *l)
{
    int st;
    cr_assert_eq(kill(l->pid, SIGTERM), 0);
    cr_assert(tp_wait_exit(l->pid, &st, 15.0), "launcher did not exit after SIGTERM");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "launcher status 0x%x", st);
    assert_tree_gone(l, 5.0);
}

Test(deploy_local_cluster, a_worker_taking_a_live_name_is_refused_and_the_cluster_keeps_working,
     .init = setup, .fini = dp_children_kill)
{
    const char *extra[] = {"--nworkers", "2", "--backend", "cpu", NULL};
    char bin[PATH_MAX], addr[96], msg[4096];
    const char *argv[8];
    gs_client_params_t p;
    gs_client_h c;
    launched_t l;
    int out, st;
    pid_t rogue;
    launch(&l, extra);
    snprintf(addr, sizeof(addr), "%s", l.address);
    argv[0] = tp_bin("gworker", bin, sizeof(bin));
    argv[1] = addr;
    argv[2] = "--backend";
    argv[3] = "cpu";
    argv[4] = "--name";
    argv[5] = "cpu-0";
    argv[6] = NULL;
    rogue = tp_spawn_capture(argv, &out, l.token);
    cr_assert_gt(rogue, 0);
    tp_read_all(out, msg, sizeof(msg), 15.0);
    close(out);
    cr_assert(tp_wait_exit(rogue, &st, 15.0), "the second cpu-0 did not exit");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status 0x%x; output: %s", st, msg);
    cr_assert(strstr(msg, "taken"), "%s", msg);
    /* the launcher and its workers are untouched and still compute */
    cr_assert_eq(kill(l.pid, 0), 0, "the launcher stopped");
    client_params(&p, &l);
    cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_client_nworkers(c), 2);
    cr_assert_eq(sum_of_full(c, 100, 30, 0), 5000.0);
    gs_client_destroy(c);
    stop_cleanly(&l);
}

/* The first gworker of the launched tree, from /proc/PID/comm. */
static pid_t a_worker_of(const launched_t *l)
{
    for (int i = 0; i < l->ntree; i++) {
        char path[64], comm[32] = "";
        FILE *f;
        snprintf(path, sizeof(path), "/proc/%d/comm", (int)l->tree[i]);
        if ((f = fopen(path, "r")) == NULL) continue;
        if (fgets(comm, sizeof(comm), f) == NULL) comm[0] = '\0';
        fclose(f);
        if (strncmp(comm, "gworker", 7) == 0) return l->tree[i];
    }
    return -1;
}

/* Ask gsched every 100 ms until it counts @a n workers; returns the last count. */
static int wait_workers(gs_client_h c, int n, double timeout_s)
{
    double deadline = gs_now_s() + timeout_s;
    int have;
    while ((have = gs_client_nworkers(c)) != n && gs_now_s() < deadline) usleep(100000);
    return have;
}

/* Issue 12: a worker paused (SIGSTOP) past gsched's heartbeat timeout (10 s by default) used to
 * exit when resumed, and the launcher then stopped the whole cluster. Now it rejoins. */
Test(deploy_local_cluster, a_worker_paused_past_the_heartbeat_timeout_rejoins_and_the_cluster_runs_on,
     .init = setup, .fini = dp_children_kill)
{
    const char *extra[] = {"--nworkers", "2", "--backend", "cpu", NULL};
    gs_client_params_t p;
    gs_client_h c;
    launched_t l;
    pid_t w;
    alarm(150);
    launch(&l, extra);
    w = a_worker_of(&l);
    cr_assert_gt(w, 0, "no gworker in the launched tree");
    client_params(&p, &l);
    cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
    cr_assert_eq(wait_workers(c, 2, 30.0), 2);

    cr_assert_eq(kill(w, SIGSTOP), 0);
    cr_assert_eq(wait_workers(c, 1, 60.0), 1, "gsched did not remove the paused worker");
    cr_assert_eq(kill(w, SIGCONT), 0);
    cr_assert_eq(wait_workers(c, 2, 60.0), 2, "the resumed worker did not rejoin");
    cr_assert(tp_alive(w), "the resumed worker exited instead of rejoining");
    cr_assert_eq(kill(l.pid, 0), 0, "the launcher stopped the cluster");
    cr_assert_eq(sum_of_full(c, 100, 30, 0), 5000.0);
    gs_client_destroy(c);
    stop_cleanly(&l);
}
