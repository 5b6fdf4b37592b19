#include "common/log.h"
#include "chunkops/chunkops.h"
#include "worker/worker.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t size_ok(const char *s)
{
    uint64_t v = 12345;
    cr_assert_eq(gs_worker_parse_size(s, &v), GS_OK, "'%s': %s", s, gs_last_error());
    return v;
}

static void size_bad(const char *s)
{
    uint64_t v = 777;
    cr_assert_eq(gs_worker_parse_size(s, &v), GS_ERR_INVALID_PARAM, "'%s' was accepted", s);
    cr_assert_eq(v, 777, "'%s': output written on error", s);
    cr_assert(strstr(gs_last_error(), "memory size") != NULL, "'%s': message '%s'", s,
              gs_last_error());
}

Test(worker_args, parses_sizes_with_units)
{
    cr_assert_eq(size_ok("1048576"), 1048576u);
    cr_assert_eq(size_ok("0"), 0u);
    cr_assert_eq(size_ok("4GB"), 4000000000ull);
    cr_assert_eq(size_ok("4gb"), 4000000000ull);
    cr_assert_eq(size_ok("500MiB"), 500ull << 20);
    cr_assert_eq(size_ok("1.5 GiB"), 3ull << 29);
    cr_assert_eq(size_ok("2k"), 2000u);
    cr_assert_eq(size_ok("3KiB"), 3072u);
    cr_assert_eq(size_ok("7B"), 7u);
    cr_assert_eq(size_ok("1TB"), 1000000000000ull);
    cr_assert_eq(size_ok("2TiB"), 2ull << 40);
    cr_assert_eq(size_ok("auto"), 0u);
    cr_assert_eq(size_ok("AUTO"), 0u);
}

Test(worker_args, rejects_malformed_sizes)
{
    size_bad("");
    size_bad("-1");
    size_bad("-4GB");
    size_bad("GB");
    size_bad("4XB");
    size_bad("4 G B");
    size_bad("1e3");
    size_bad("1.2.3MB");
    size_bad("4GBx");
    size_bad("99999999999TB");   /* > 2^64 */
    size_bad("auto2");
}

static char **argv_of(const char *first, ...)
{
    static char *v[32];
    va_list ap;
    int n = 0;
    v[n++] = (char *)"gworker";
    va_start(ap, first);
    for (const char *a = first; a != NULL; a = va_arg(ap, const char *)) v[n++] = (char *)a;
    va_end(ap);
    v[n] = NULL;
    return v;
}

static int argc_of(char **v)
{
    int n = 0;
    while (v[n]) n++;
    return n;
}

#define PARSE_OK(cli, ...)                                                                   \
    do {                                                                                     \
        char **v_ = argv_of(__VA_ARGS__, NULL);                                              \
        cr_assert_eq(gs_worker_cli_parse(argc_of(v_), v_, (cli)), GS_OK, "%s", gs_last_error()); \
    } while (0)

#define PARSE_BAD(needle, ...)                                                               \
    do {                                                                                     \
        gs_worker_cli_t c_;                                                                  \
        char **v_ = argv_of(__VA_ARGS__, NULL);                                              \
        cr_assert_eq(gs_worker_cli_parse(argc_of(v_), v_, &c_), GS_ERR_INVALID_PARAM,        \
                     "accepted: %s", #__VA_ARGS__);                                          \
        cr_assert(strstr(gs_last_error(), (needle)) != NULL, "message '%s' lacks '%s'",      \
                  gs_last_error(), (needle));                                                \
    } while (0)

Test(worker_args, parses_a_full_command_line)
{
    gs_worker_cli_t cli;
    unsetenv("GSCHED_TOKEN");
    PARSE_OK(&cli, "tcp://10.0.0.1:8786", "--nthreads", "3", "--memory-limit=4GB",
             "--device-memory-limit", "500MiB", "--backend", "cuda", "--device", "2", "--name",
             "w7", "--token", "s3cret", "--log-level", "debug", "--nstreams=6",
             "--connect-timeout", "1500", "--fetch-timeout=2500");
    cr_assert_str_eq(cli.params.scheduler, "tcp://10.0.0.1:8786");
    cr_assert_eq(cli.params.nthreads, 3);
    cr_assert_eq(cli.params.memory_limit, 4000000000ull);
    cr_assert_eq(cli.params.device_memory_limit, 500ull << 20);
    cr_assert_str_eq(cli.params.backend, "cuda");
    cr_assert_eq(cli.params.device, 2);
    cr_assert_str_eq(cli.params.name, "w7");
    cr_assert_str_eq(cli.params.token, "s3cret");
    cr_assert_eq(cli.log_level, GS_LOG_LEVEL_DEBUG);
    cr_assert_eq(cli.params.nstreams, 6);
    cr_assert_eq(cli.params.connect_timeout_ms, 1500u);
    cr_assert_eq(cli.params.fetch_timeout_ms, 2500u);
    cr_assert_eq(cli.help, 0);
    PARSE_OK(&cli, "tcp://10.0.0.1:8786", "--memory-share", "4");
    cr_assert_eq(cli.params.memory_share, 4u);
    cr_assert_eq(cli.no_rejoin, 0);
    PARSE_OK(&cli, "tcp://10.0.0.1:8786", "--no-rejoin");
    cr_assert_eq(cli.no_rejoin, 1);
}

Test(worker_args, takes_the_token_from_the_environment)
{
    gs_worker_cli_t cli;
    setenv("GSCHED_TOKEN", "from-env", 1);
    PARSE_OK(&cli, "127.0.0.1:9000");
    cr_assert_str_eq(cli.params.token, "from-env");
    PARSE_OK(&cli, "127.0.0.1:9000", "--token", "explicit");
    cr_assert_str_eq(cli.params.token, "explicit");
    unsetenv("GSCHED_TOKEN");
}

Test(worker_args, reads_the_token_from_a_file)
{
    gs_worker_cli_t cli;
    char path[] = "/tmp/gs-test-wtoken-XXXXXX", empty[] = "/tmp/gs-test-wtoken-XXXXXX";
    int fd = mkstemp(path), efd = mkstemp(empty);
    cr_assert(fd >= 0 && efd >= 0);
    cr_assert_eq(write(fd, "from-file\n", 10), 10);
    close(fd);
    close(efd);
    setenv("GSCHED_TOKEN", "from-env", 1);
    PARSE_OK(&cli, "127.0.0.1:9000", "--token-file", path);
    cr_assert_str_eq(cli.params.token, "from-file");
    unsetenv("GSCHED_TOKEN");
    PARSE_BAD("is empty", "127.0.0.1:9000", "--token-file", empty);
    {
        char **v = argv_of("127.0.0.1:9000", "--token-file", "/nonexistent/token", NULL);
        cr_assert_eq(gs_worker_cli_parse(argc_of(v), v, &cli), GS_ERR_IO);
        cr_assert(strstr(gs_last_error(), "cannot open the token file"), "%s", gs_last_error());
    }
    unlink(path);
    unlink(empty);
}

Test(worker_args, defaults_and_help)
{
    gs_worker_cli_t cli;
    PARSE_OK(&cli, "tcp://localhost:8786");
    cr_assert_str_eq(cli.params.backend, "cpu");
    cr_assert_eq(cli.params.memory_limit, 0u);
    cr_assert_eq(cli.log_level, -1);
    PARSE_OK(&cli, "--help");
    cr_assert_eq(cli.help, 1);
    cr_assert(strstr(gs_worker_usage(), "--memory-limit") != NULL);
}

Test(worker_args, rejects_bad_arguments_with_a_message)
{
    PARSE_BAD("no scheduler address", "--nthreads", "2");
    PARSE_BAD("unknown option '--frobnicate'", "tcp://h:1", "--frobnicate");
    PARSE_BAD("unknown option '-x'", "tcp://h:1", "-x");
    PARSE_BAD("--nthreads: 'many' is not an integer", "tcp://h:1", "--nthreads", "many");
    PARSE_BAD("--nthreads: 0 is out of range", "tcp://h:1", "--nthreads", "0");
    PARSE_BAD("--nthreads needs a value", "tcp://h:1", "--nthreads");
    PARSE_BAD("--memory-limit: memory size '4XB'", "tcp://h:1", "--memory-limit", "4XB");
    PARSE_BAD("--device-memory-limit: memory size '-1'", "tcp://h:1",
              "--device-memory-limit=-1");
    PARSE_BAD("--backend: 'gpu' is not cpu or cuda", "tcp://h:1", "--backend", "gpu");
    PARSE_BAD("--device: -1 is out of range", "tcp://h:1", "--device", "-1");
    PARSE_BAD("--log-level: 'loud'", "tcp://h:1", "--log-level", "loud");
    PARSE_BAD("unexpected argument 'tcp://other:2'", "tcp://h:1", "tcp://other:2");
    PARSE_BAD("--name is empty", "tcp://h:1", "--name", "");
    PARSE_BAD("--memory-share: 0 is out of range", "tcp://h:1", "--memory-share", "0");
    PARSE_BAD("scheduler address 'udp://h:1'", "udp://h:1");
    PARSE_BAD("scheduler address 'h'", "h");
    PARSE_BAD("scheduler address 'tcp://h:0'", "tcp://h:0");
}

Test(worker_args, create_rejects_bad_params)
{
    gs_worker_params_t p;
    gs_worker_h w = (gs_worker_h)0x1;
    uv_loop_t loop;
    uv_loop_init(&loop);
    memset(&p, 0, sizeof(p));
    cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "scheduler") != NULL, "%s", gs_last_error());
    p.scheduler = "tcp://127.0.0.1:1";
    p.nthreads = -2;
    cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_ERR_INVALID_PARAM);
    cr_assert(strstr(gs_last_error(), "nthreads") != NULL, "%s", gs_last_error());
    p.nthreads = 1;
    p.backend = "tpu";
    cr_assert_eq(gs_worker_create(&p, &loop, &w), GS_ERR_NOT_FOUND, "%s", gs_last_error());
    cr_assert_eq(w, (gs_worker_h)0x1, "output written on error");
    cr_assert_eq(uv_loop_close(&loop), 0, "handles left on the loop");
}

Test(worker_args, payload_mac_from_the_flag_or_the_environment)
{
    gs_worker_cli_t cli;
    unsetenv("GSCHED_PAYLOAD_MAC");
    PARSE_OK(&cli, "127.0.0.1:9000");
    cr_assert_eq(cli.params.payload_mac, GS_WORKER_PAYLOAD_MAC_AUTO);
    cr_assert_eq(cli.params.payload_mac_device, 0);
    PARSE_OK(&cli, "127.0.0.1:9000", "--payload-mac", "off", "--payload-mac-device");
    cr_assert_eq(cli.params.payload_mac, GS_WORKER_PAYLOAD_MAC_OFF);
    cr_assert_eq(cli.params.payload_mac_device, 1);
    PARSE_OK(&cli, "127.0.0.1:9000", "--payload-mac=on");
    cr_assert_eq(cli.params.payload_mac, GS_WORKER_PAYLOAD_MAC_ON);
    PARSE_BAD("not auto, on or off", "127.0.0.1:9000", "--payload-mac", "maybe");
    setenv("GSCHED_PAYLOAD_MAC", "off", 1);
    PARSE_OK(&cli, "127.0.0.1:9000");
    cr_assert_eq(cli.params.payload_mac, GS_WORKER_PAYLOAD_MAC_OFF);
    PARSE_OK(&cli, "127.0.0.1:9000", "--payload-mac", "auto");
    cr_assert_eq(cli.params.payload_mac, GS_WORKER_PAYLOAD_MAC_AUTO, "the flag wins");
    setenv("GSCHED_PAYLOAD_MAC", "device", 1);
    PARSE_OK(&cli, "127.0.0.1:9000");
    cr_assert_eq(cli.params.payload_mac, GS_WORKER_PAYLOAD_MAC_ON);
    cr_assert_eq(cli.params.payload_mac_device, 1);
    setenv("GSCHED_PAYLOAD_MAC", "sometimes", 1);
    PARSE_BAD("$GSCHED_PAYLOAD_MAC", "127.0.0.1:9000");
    unsetenv("GSCHED_PAYLOAD_MAC");
}

Test(worker_args, file_path_from_the_flag_or_the_environment)
{
    gs_worker_cli_t cli;
    unsetenv("GSCHED_FILE_PATH");
    PARSE_OK(&cli, "127.0.0.1:9000");
    cr_assert_eq(cli.params.file_path, GS_FILE_PATH_AUTO);
    PARSE_OK(&cli, "127.0.0.1:9000", "--file-path", "cufile");
    cr_assert_eq(cli.params.file_path, GS_FILE_PATH_CUFILE);
    PARSE_OK(&cli, "127.0.0.1:9000", "--file-path=pinned");
    cr_assert_eq(cli.params.file_path, GS_FILE_PATH_PINNED);
    PARSE_BAD("--file-path: 'gds' is not auto, pinned or cufile", "127.0.0.1:9000",
              "--file-path", "gds");
    setenv("GSCHED_FILE_PATH", "pinned", 1);
    PARSE_OK(&cli, "127.0.0.1:9000");
    cr_assert_eq(cli.params.file_path, GS_FILE_PATH_PINNED);
    PARSE_OK(&cli, "127.0.0.1:9000", "--file-path", "auto");
    cr_assert_eq(cli.params.file_path, GS_FILE_PATH_AUTO, "the flag wins");
    setenv("GSCHED_FILE_PATH", "direct", 1);
    PARSE_BAD("$GSCHED_FILE_PATH: 'direct' is not auto, pinned or cufile", "127.0.0.1:9000");
    unsetenv("GSCHED_FILE_PATH");
}
