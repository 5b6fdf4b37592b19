/* TLS on the control connections with real processes: certificates made at run time by the
 * openssl CLI in a temporary directory (two CAs), gsched requiring client certificates, two
 * workers and a client over TLS computing exact results; a client that lacks gsched's CA, a
 * worker with a certificate from another CA and a plain-TCP client are refused, each with a
 * clear log line, and gsched keeps serving. */
#include "cluster.h"
#include "reference.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OK(call) cr_assert_eq((call), GS_OK, "%s: %s", #call, gs_last_error())

static char dir[64];

static const char *path(const char *name, char *buf, size_t len)
{
    size_t d = strlen(dir), n = strlen(name);
    cr_assert_lt(d + n + 2, len);
    memcpy(buf, dir, d);
    buf[d] = '/';
    memcpy(buf + d + 1, name, n + 1);
    return buf;
}

/* ca.pem / ca2.pem: two CAs; server.pem (SAN IP 127.0.0.1, localhost), client.pem, signed by ca;
 * rogue.pem signed by ca2. EC P-256 keys (*.key). */
static void make_certs(void)
{
    static const char *script =
        "set -e; cd \"$1\"; exec 2>gen.log\n"
        "ca() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $1.key "
        "-out $1.pem -days 2 -subj /CN=$1-test-ca -addext basicConstraints=critical,CA:TRUE "
        "-addext keyUsage=critical,keyCertSign,cRLSign; }\n"
        "leaf() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $1.key "
        "-out $1.csr -subj /CN=$1; printf '%s\\n' \"$3\" > $1.ext; "
        "openssl x509 -req -in $1.csr -CA $2.pem -CAkey $2.key -CAcreateserial -days 2 "
        "-out $1.pem -extfile $1.ext; }\n"
        "ca ca; ca ca2\n"
        "leaf server ca 'subjectAltName=IP:127.0.0.1,DNS:localhost'\n"
        "leaf client ca 'extendedKeyUsage=clientAuth'\n"
        "leaf rogue ca2 'extendedKeyUsage=clientAuth'\n";
    char cmd[2 * PATH_MAX + 16], sp[PATH_MAX];
    FILE *f;
    snprintf(dir, sizeof(dir), "/tmp/gs-tls-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    f = fopen(path("gen.sh", sp, sizeof(sp)), "w");
    cr_assert_not_null(f);
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "sh %s %s", sp, dir);
    cr_assert_eq(system(cmd), 0, "openssl could not make the test certificates (see %s/gen.log)", dir);
}

static void setup(void)
{
    alarm(240);
    make_certs();
}

static void teardown(void)
{
    char cmd[128];
    tp_kill_all();
    if (dir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    }
}

/* Start gsched with TLS on 127.0.0.1 (free port); @a require: client certificates required.
 * Its stdout and stderr go to c->sched_out. */
static void start_sched(tcluster_t *c, int require)
{
    char bin[PATH_MAX], ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX], addr[96];
    const char *argv[16];
    int ac = 0;
    memset(c, 0, sizeof(*c));
    argv[ac++] = tp_bin("gsched", bin, sizeof(bin));
    argv[ac++] = "--host";
    argv[ac++] = "127.0.0.1";
    argv[ac++] = "--port";
    argv[ac++] = "0";
    argv[ac++] = "--dashboard-address";
    argv[ac++] = "none";
    argv[ac++] = "--tls-ca-file";
    argv[ac++] = path("ca.pem", ca, sizeof(ca));
    argv[ac++] = "--tls-cert";
    argv[ac++] = path("server.pem", cert, sizeof(cert));
    argv[ac++] = "--tls-key";
    argv[ac++] = path("server.key", key, sizeof(key));
    if (require) argv[ac++] = "--tls-require-client-cert";
    argv[ac] = NULL;
    c->sched = tp_spawn_capture(argv, &c->sched_out, NULL);
    cr_assert_gt(c->sched, 0);
    cr_assert(tp_read_line(c->sched_out, "gsched listening on ", addr, sizeof(addr), NULL, 0, 20.0),
              "gsched with TLS did not start");
    snprintf(c->address, sizeof(c->address), "%s", addr);
}

/* gworker arguments: trust @a ca, present @a leaf (NULL: no certificate). */
static pid_t add_worker(tcluster_t *c, const char *name, const char *ca, const char *leaf, int *out_fd)
{
    static char cap[PATH_MAX], cert[PATH_MAX], key[PATH_MAX], bin[PATH_MAX];
    char lc[64], lk[64];
    const char *argv[20];
    int ac = 0;
    pid_t pid;
    snprintf(lc, sizeof(lc), "%s.pem", leaf);
    snprintf(lk, sizeof(lk), "%s.key", leaf);
    argv[ac++] = tp_bin("gworker", bin, sizeof(bin));
    argv[ac++] = c->address;
    argv[ac++] = "--name";
    argv[ac++] = name;
    argv[ac++] = "--backend";
    argv[ac++] = "cpu";
    argv[ac++] = "--nthreads";
    argv[ac++] = "1";
    argv[ac++] = "--connect-timeout";
    argv[ac++] = "5000";
    argv[ac++] = "--tls-ca-file";
    argv[ac++] = path(ca, cap, sizeof(cap));
    argv[ac++] = "--tls-cert";
    argv[ac++] = path(lc, cert, sizeof(cert));
    argv[ac++] = "--tls-key";
    argv[ac++] = path(lk, key, sizeof(key));
    argv[ac] = NULL;
    pid = out_fd != NULL ? tp_spawn_capture(argv, out_fd, NULL) : tp_spawn(argv, NULL, NULL);
    cr_assert_gt(pid, 0);
    if (out_fd == NULL) c->workers[c->nworkers++] = pid;
    return pid;
}

/* Connect a TLS client trusting @a ca and presenting @a leaf (NULL: none); @a tls 0: plain TCP. */
static gs_status_t connect_client(const tcluster_t *c, int tls, const char *ca, const char *leaf,
                                  gs_client_h *client_p)
{
    char cap[PATH_MAX], cert[PATH_MAX], key[PATH_MAX], lc[64], lk[64];
    gs_client_params_t p;
    memset(&p, 0, sizeof(p));
    p.address = c->address;
    p.field_mask = GS_CLIENT_FIELD_TIMEOUT;
    p.timeout_s = 20.0;
    if (tls) {
        p.field_mask |= GS_CLIENT_FIELD_TLS;
        p.tls_ca_file = path(ca, cap, sizeof(cap));
        if (leaf != NULL) {
            snprintf(lc, sizeof(lc), "%s.pem", leaf);
            snprintf(lk, sizeof(lk), "%s.key", leaf);
            p.tls_cert = path(lc, cert, sizeof(cert));
            p.tls_key = path(lk, key, sizeof(key));
        }
    }
    return gs_client_connect(&p, client_p);
}

/* Run gs_client_connect with this process's stderr in a file; its text in @a log. */
static gs_status_t connect_logged(const tcluster_t *c, int tls, const char *ca, const char *leaf,
                                  char *log, size_t len)
{
    char lp[PATH_MAX];
    gs_client_h client = NULL;
    gs_status_t st;
    int fd, saved;
    ssize_t n;
    fd = open(path("client.log", lp, sizeof(lp)), O_RDWR | O_CREAT | O_TRUNC, 0600);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);
    st = connect_client(c, tls, ca, leaf, &client);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    if (client != NULL) gs_client_destroy(client);
    n = pread(fd, log, len - 1, 0);
    log[n > 0 ? n : 0] = '\0';
    close(fd);
    return st;
}

/* (x + 1) for x = normal(seed 0, mean 10, std 1) of shape (n, n). */
static gs_array_h shifted(int64_t n, int64_t chunk, gs_array_h *x_p)
{
    int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
    gs_array_h y;
    OK(gs_array_random_normal(0, 10, 1, 2, shape, chunks, x_p));
    OK(gs_array_binary_scalar(GS_BINARY_ADD, *x_p, 1.0, &y));
    return y;
}

TestSuite(integration_tls, .init = setup, .fini = teardown);  /* alarm() bounds each test */

Test(integration_tls, job_runs_with_exact_results_over_mutual_tls)
{
    tcluster_t c;
    gs_client_h client = NULL;
    gs_array_h x, y, r;
    const int64_t n = 600;
    double *got, sum, want = 0;
    start_sched(&c, 1);
    add_worker(&c, "tls-w0", "ca.pem", "client", NULL);
    add_worker(&c, "tls-w1", "ca.pem", "client", NULL);
    OK(connect_client(&c, 1, "ca.pem", "client", &client));
    OK(gs_client_wait_for_workers(client, 2, 30.0));
    y = shifted(n, 100, &x);
    OK(gs_array_reduce(GS_RED_SUM, y, NULL, &r));
    OK(gs_client_compute_scalar(client, r, &sum));
    /* the whole array comes back through TLS in frames far larger than one record */
    got = gs_malloc((size_t)(n * n) * sizeof(double), "test");
    cr_assert_not_null(got);
    OK(gs_client_compute(client, y, got, (size_t)(n * n)));
    for (int64_t i = 0; i < n * n; i++) {
        double v = gs_random_normal_v3(0, (uint64_t)i, 10, 1) + 1.0;
        /* the workers' generator may round the last bit differently (vectorised) */
        cr_assert(ref_rel(got[i], v) <= 1e-15, "element %lld: %.17g, want %.17g", (long long)i, got[i], v);
        want += v;
    }
    cr_assert(ref_rel(sum, want) <= 1e-12, "%.17g vs %.17g", sum, want);
    gs_free(got);
    gs_array_release(x);
    gs_array_release(y);
    gs_array_release(r);
    gs_client_destroy(client);
}

Test(integration_tls, client_without_the_ca_is_refused_with_a_clear_log_line)
{
    tcluster_t c;
    gs_client_h client = NULL;
    char log[8192];
    gs_status_t st;
    start_sched(&c, 0);
    /* trusts only ca2, which did not sign gsched's certificate */
    st = connect_logged(&c, 1, "ca2.pem", NULL, log, sizeof(log));
    cr_assert_neq(st, GS_OK);
    cr_assert(strstr(log, "tls handshake failed") != NULL && strstr(log, "certificate verify failed") != NULL,
              "client log: %s", log);
    /* gsched still serves a client that trusts its CA (no client certificate needed here) */
    OK(connect_client(&c, 1, "ca.pem", NULL, &client));
    gs_client_destroy(client);
    cr_assert(tp_alive(c.sched));
}

Test(integration_tls, worker_with_a_certificate_from_another_ca_is_refused)
{
    tcluster_t c;
    gs_client_h client = NULL;
    char out[16384], sched_log[16384];
    int fd, status;
    pid_t pid;
    start_sched(&c, 1);
    pid = add_worker(&c, "rogue", "ca.pem", "rogue", &fd);
    cr_assert(tp_wait_exit(pid, &status, 60.0), "the rogue worker did not give up");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0, "status %d", status);
    tp_read_all(fd, out, sizeof(out), 5.0);
    close(fd);
    cr_assert(strstr(out, "tls handshake failed") != NULL, "worker output: %s", out);
    cr_assert(tp_alive(c.sched));
    OK(connect_client(&c, 1, "ca.pem", "client", &client));
    cr_assert_eq(gs_client_nworkers(client), 0);
    gs_client_destroy(client);
    /* gsched said why, naming the certificate problem */
    kill(c.sched, SIGTERM);
    cr_assert(tp_wait_exit(c.sched, &status, 30.0));
    tp_read_all(c.sched_out, sched_log, sizeof(sched_log), 5.0);
    cr_assert(strstr(sched_log, "tls handshake failed") != NULL &&
              strstr(sched_log, "certificate verify failed") != NULL, "gsched log: %s", sched_log);
}

Test(integration_tls, plain_client_to_a_tls_scheduler_fails_cleanly)
{
    tcluster_t c;
    gs_client_h client = NULL;
    char log[8192];
    gs_status_t st;
    start_sched(&c, 0);
    char sched_log[16384];
    int status;
    st = connect_logged(&c, 0, NULL, NULL, log, sizeof(log));
    cr_assert_neq(st, GS_OK, "a plain client got through a TLS port");
    cr_assert(tp_alive(c.sched));
    OK(connect_client(&c, 1, "ca.pem", NULL, &client));
    cr_assert_eq(gs_client_nworkers(client), 0);
    gs_client_destroy(client);
    /* gsched said why: the plain client's first bytes are no TLS record */
    kill(c.sched, SIGTERM);
    cr_assert(tp_wait_exit(c.sched, &status, 30.0));
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "gsched status %d", status);
    tp_read_all(c.sched_out, sched_log, sizeof(sched_log), 5.0);
    cr_assert(strstr(sched_log, "tls handshake failed") != NULL, "gsched log: %s", sched_log);
}

Test(integration_tls, no_token_on_a_public_address_only_with_client_certificates)
{
    char bin[PATH_MAX], ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX], line[512], seen[4096];
    const char *argv[] = {tp_bin("gsched", bin, sizeof(bin)), "--host", "0.0.0.0", "--port", "0",
                          "--dashboard-address", "none", "--tls-ca-file", path("ca.pem", ca, sizeof(ca)),
                          "--tls-cert", path("server.pem", cert, sizeof(cert)), "--tls-key",
                          path("server.key", key, sizeof(key)), "--tls-require-client-cert", NULL};
    int fd, status;
    pid_t pid = tp_spawn_capture(argv, &fd, NULL);
    cr_assert(tp_read_line(fd, "gsched listening on ", line, sizeof(line), seen, sizeof(seen), 20.0),
              "gsched refused: %s", seen);
    kill(pid, SIGTERM);
    cr_assert(tp_wait_exit(pid, &status, 30.0));
    close(fd);
    argv[13] = NULL;  /* TLS without client certificates: the token rule applies */
    pid = tp_spawn_capture(argv, &fd, NULL);
    cr_assert(tp_wait_exit(pid, &status, 30.0));
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0);
    tp_read_all(fd, seen, sizeof(seen), 5.0);
    close(fd);
    cr_assert(strstr(seen, "without a cluster token") != NULL, "%s", seen);
}

Test(integration_tls, local_cluster_launcher_passes_tls_through)
{
    char bin[PATH_MAX], ca[PATH_MAX], cert[PATH_MAX], key[PATH_MAX], addr[96], seen[8192];
    const char *argv[] = {tp_bin("gs-local-cluster", bin, sizeof(bin)), "--port", "0", "--nworkers", "2",
                          "--backend", "cpu", "--nthreads", "1", "--dashboard-address", "none",
                          "--tls-ca-file", path("ca.pem", ca, sizeof(ca)), "--tls-cert",
                          path("server.pem", cert, sizeof(cert)), "--tls-key", path("server.key", key, sizeof(key)),
                          "--tls-require-client-cert", NULL};
    tcluster_t c;
    gs_client_h client = NULL;
    gs_array_h x, y, r;
    double sum, want = 0;
    int fd;
    /* gsched serves server.pem and the workers present it too (it has no extendedKeyUsage, so
     * it is valid for both ends) */
    cr_assert_gt(tp_spawn(argv, &fd, "tls-test-token"), 0);
    cr_assert(tp_read_line(fd, "gs-local-cluster ready ", addr, sizeof(addr), seen, sizeof(seen), 60.0),
              "gs-local-cluster with TLS did not become ready: %s", seen);
    memset(&c, 0, sizeof(c));
    snprintf(c.address, sizeof(c.address), "%s", addr);
    {
        char cap[PATH_MAX], lc[PATH_MAX], lk[PATH_MAX];
        gs_client_params_t p;
        memset(&p, 0, sizeof(p));
        p.address = c.address;
        p.field_mask = GS_CLIENT_FIELD_TIMEOUT | GS_CLIENT_FIELD_TLS | GS_CLIENT_FIELD_TOKEN;
        p.token = "tls-test-token";
        p.timeout_s = 20.0;
        p.tls_ca_file = path("ca.pem", cap, sizeof(cap));
        p.tls_cert = path("client.pem", lc, sizeof(lc));
        p.tls_key = path("client.key", lk, sizeof(lk));
        OK(gs_client_connect(&p, &client));
    }
    OK(gs_client_wait_for_workers(client, 2, 30.0));
    y = shifted(200, 50, &x);
    OK(gs_array_reduce(GS_RED_SUM, y, NULL, &r));
    OK(gs_client_compute_scalar(client, r, &sum));
    for (int64_t i = 0; i < 200 * 200; i++) want += gs_random_normal_v3(0, (uint64_t)i, 10, 1) + 1.0;
    cr_assert(ref_rel(sum, want) <= 1e-12, "%.17g vs %.17g", sum, want);
    gs_array_release(x);
    gs_array_release(y);
    gs_array_release(r);
    gs_client_destroy(client);
    close(fd);
}
