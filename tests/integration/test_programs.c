/* The shipped programs: gs-bench (its JSON, its value against the reference, its argument
 * errors) and the example program from docs/api.md. */
#include "cluster.h"
#include "reference.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void arm(void)
{
    alarm(180);
}

static void down(void)
{
    tp_kill_all();
}

/* gs-bench is not built with GS_BUILD_BENCH=OFF (tests/integration/CMakeLists.txt). */
#ifdef GS_TEST_NO_BENCH
#define NEED_BENCH() cr_skip_test("gs-bench is not built (GS_BUILD_BENCH=OFF)")
#else
#define NEED_BENCH() ((void)0)
#endif

/* Run a program to completion, capturing stdout+stderr. Returns the waitpid status. */
static int run(const char *const *argv, char *out, size_t out_len, double timeout_s)
{
    int fd, st = 0;
    pid_t pid = tp_spawn_capture(argv, &fd, NULL);
    cr_assert_gt(pid, 0);
    tp_read_all(fd, out, out_len, timeout_s);
    close(fd);
    cr_assert(tp_wait_exit(pid, &st, timeout_s), "%s did not finish", argv[0]);
    return st;
}

/* The number after "key": in a JSON line. */
static double json_num(const char *json, const char *key)
{
    char pat[64];
    const char *p;
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    p = strstr(json, pat);
    cr_assert_not_null(p, "no %s in %s", key, json);
    return strtod(p + strlen(pat), NULL);
}

Test(integration_programs, gs_bench_seed_prints_json_with_the_reference_value, .init = arm,
     .fini = down)
{
    NEED_BENCH();
    char bin[PATH_MAX], out[16384];
    const char *argv[] = {tp_bin("gs-bench", bin, sizeof(bin)), "seed", "--n", "301", "--chunk",
                          "70", "--workers", "2", "--backend", "cpu", "--repeat", "3", NULL};
    const char *line;
    long double want = 0;
    double value, count, mean;
    int st = run(argv, out, sizeof(out), 120.0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x: %s", st, out);
    line = strstr(out, "{\"bench\":\"seed\"");
    cr_assert_not_null(line, "no JSON line in: %s", out);
    for (int64_t i = 0; i < 301; i += 2)
        for (int64_t j = 0; j < 301; j += 2) want += gs_random_normal_v3(0, (uint64_t)(i * 301 + j), 10, 1) + 1.0;
    value = json_num(line, "value");
    count = json_num(line, "count");
    mean = json_num(line, "mean");
    cr_assert_eq(count, 151.0 * 151.0);
    cr_assert(ref_rel(value, (double)want) <= 1e-12, "value %.17g vs %.17g", value, (double)want);
    cr_assert(ref_rel(mean, value / count) <= 1e-15);
    cr_assert(fabs(mean - 11.0) < 0.05, "mean %g", mean);
    cr_assert_eq(json_num(line, "n"), 301);
    cr_assert_eq(json_num(line, "chunk"), 70);
    cr_assert_eq(json_num(line, "workers"), 2);
    cr_assert_gt(json_num(line, "tasks"), 0);
    cr_assert_gt(json_num(line, "seconds"), 0);
    cr_assert_gt(json_num(line, "cold_seconds"), 0);
    cr_assert_geq(json_num(line, "submit_s"), 0);
    (void)json_num(line, "runtime_s_per_task");
    cr_assert_not_null(strstr(line, "\"backend\":\"cpu\""));
    cr_assert_not_null(strstr(line, "\"fused\":true"));
}

/* gs-bench seed on a 2-worker CPU cluster with extra arguments @a extra (NULL-terminated):
 * its JSON line, copied into @a out. */
static const char *seed_line(const char *const *extra, char *out, size_t len)
{
    char bin[PATH_MAX];
    const char *argv[24] = {tp_bin("gs-bench", bin, sizeof(bin)), "seed", "--n", "301", "--chunk",
                            "70", "--workers", "2", "--backend", "cpu"};
    int ac = 10;
    for (int i = 0; extra[i] != NULL; i++) argv[ac++] = extra[i];
    argv[ac] = NULL;
    int st = run(argv, out, len, 120.0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x: %s", st, out);
    const char *line = strstr(out, "{\"bench\":\"seed\"");
    cr_assert_not_null(line, "no JSON line in: %s", out);
    return line;
}

/* With no --random the seed uses the dtype's default (float64 version 3, float32 version 4)
 * and says so; --random 1 gives version 1, the default before session 12. */
Test(integration_programs, gs_bench_seed_defaults_to_the_fast_versions, .init = arm, .fini = down)
{
    NEED_BENCH();
    char out[16384];
    long double w1 = 0, w4 = 0;
    for (int64_t i = 0; i < 301; i += 2)
        for (int64_t j = 0; j < 301; j += 2) {
            w1 += gs_random_normal(0, (uint64_t)(i * 301 + j), 10, 1) + 1.0;
            w4 += (double)(gs_random_normal_f32_v4(0, (uint64_t)(i * 301 + j), 10, 1) + 1.0f);
        }
    const char *line = seed_line((const char *[]){NULL}, out, sizeof(out));
    cr_assert_eq(json_num(line, "random"), 3, "%s", line);
    line = seed_line((const char *[]){"--random", "1", NULL}, out, sizeof(out));
    cr_assert_eq(json_num(line, "random"), 1, "%s", line);
    cr_assert(ref_rel(json_num(line, "value"), (double)w1) <= 1e-12, "%s: want %.17Lg", line, w1);
    line = seed_line((const char *[]){"--dtype", "float32", NULL}, out, sizeof(out));
    cr_assert_eq(json_num(line, "random"), 4, "%s", line);
    cr_assert_not_null(strstr(line, "\"dtype\":\"float32\""), "%s", line);
    /* a float32 sum accumulated in float64 and rounded once to float32 */
    cr_assert(ref_rel(json_num(line, "value"), (double)w4) <= 0x1p-23, "%s: want %.9Lg", line, w4);
    cr_assert(fabs(json_num(line, "mean") - 11.0) < 0.05, "%s", line);
}

static void expect_bad_args(const char *const *args, const char *needle)
{
    char bin[PATH_MAX], out[8192];
    const char *argv[24];
    int ac = 0, st;
    argv[ac++] = tp_bin("gs-bench", bin, sizeof(bin));
    for (int i = 0; args[i] != NULL; i++) argv[ac++] = args[i];
    argv[ac] = NULL;
    st = run(argv, out, sizeof(out), 30.0);
    cr_assert(WIFEXITED(st), "gs-bench was killed by signal %d", WTERMSIG(st));
    cr_assert_eq(WEXITSTATUS(st), 2, "exit status %d: %s", WEXITSTATUS(st), out);
    cr_assert(strstr(out, needle) != NULL, "message does not mention '%s': %s", needle, out);
}

Test(integration_programs, gs_bench_rejects_bad_arguments_without_a_signal, .init = arm,
     .fini = down)
{
    NEED_BENCH();
    expect_bad_args((const char *[]){"seed", "--n", "1000", "--chunk", "0", NULL}, "--chunk");
    expect_bad_args((const char *[]){"seed", "--n", "0", "--chunk", "10", NULL}, "--n");
    expect_bad_args((const char *[]){"seed", "--n", "-4", "--chunk", "10", NULL}, "--n");
    expect_bad_args((const char *[]){"seed", "--n", "10x", "--chunk", "10", NULL}, "--n");
    expect_bad_args((const char *[]){"seed", "--chunk", "10", NULL}, "--n");
    expect_bad_args((const char *[]){"seed", "--n", "10", NULL}, "--chunk");
    expect_bad_args((const char *[]){"seed", "--n", "10", "--chunk", "5", "--workers", "0", NULL},
                    "--workers");
    expect_bad_args((const char *[]){"seed", "--n", "10", "--chunk", "5", "--backend", "tpu", NULL},
                    "tpu");
    expect_bad_args((const char *[]){"seed", "--n", "10", "--chunk", "5", "--fast", NULL}, "--fast");
    expect_bad_args((const char *[]){"seed", "--n", NULL}, "--n");
    expect_bad_args((const char *[]){"frobnicate", NULL}, "frobnicate");
    expect_bad_args((const char *[]){"seed", "--n", "10", "--chunk", "5", "--random", "4", NULL},
                    "float32 only");
    expect_bad_args((const char *[]){"seed", "--n", "10", "--chunk", "5", "--scheduler", "x", NULL},
                    "--scheduler");
}

Test(integration_programs, gs_bench_uses_a_given_scheduler, .init = arm, .fini = down)
{
    NEED_BENCH();
    tcluster_t c;
    char bin[PATH_MAX], out[16384];
    const char *line;
    int st;
    cr_assert(tc_start(&c, 1, NULL, NULL));
    {
        const char *argv[] = {tp_bin("gs-bench", bin, sizeof(bin)), "seed", "--n", "100",
                              "--chunk", "30", "--scheduler", c.address, "--no-fuse", NULL};
        st = run(argv, out, sizeof(out), 60.0);
    }
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x: %s", st, out);
    line = strstr(out, "{\"bench\"");
    cr_assert_not_null(line, "%s", out);
    cr_assert_eq(json_num(line, "workers"), 1);
    cr_assert_not_null(strstr(line, "\"fused\":false"));
    cr_assert_not_null(strstr(line, c.address), "%s", line);
}

Test(integration_programs, example_program_runs_against_a_cluster, .init = arm, .fini = down)
{
    tcluster_t c;
    char bin[PATH_MAX], out[16384];
    int st;
    cr_assert(tc_start(&c, 2, NULL, NULL));
    {
        const char *argv[] = {tp_bin("gsched-example", bin, sizeof(bin)), c.address, NULL};
        st = run(argv, out, sizeof(out), 120.0);
    }
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x: %s", st, out);
    cr_assert_not_null(strstr(out, "connected to"), "%s", out);
    cr_assert_not_null(strstr(out, "mean of (2x + 1)[::3, ::-2] = "), "%s", out);
    cr_assert_not_null(strstr(out, "column maxima"), "%s", out);
    cr_assert_not_null(strstr(out, "sum of 2x + 1"), "%s", out);
    {
        double m = strtod(strstr(out, " = ") + 3, NULL);
        cr_assert(fabs(m - 1.0) < 0.05, "mean %g", m);
    }
}
