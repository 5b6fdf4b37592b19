/* gworker command line and memory-size parsing. */
#include "worker/worker.h"

#include "common/error.h"
#include "common/log.h"
#include "common/token.h"
#include "chunkops/fileio.h"
#include "proto/conn.h"

#include <ctype.h>
#include <stdio.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

gs_status_t gs_worker_parse_size(const char *text, uint64_t *bytes_p)
{
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1.0}, {"b", 1.0},
        {"k", 1e3}, {"kb", 1e3}, {"m", 1e6}, {"mb", 1e6},
        {"g", 1e9}, {"gb", 1e9}, {"t", 1e12}, {"tb", 1e12},
        {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0},
        {"tib", 1099511627776.0},
    };
    const char *p = text, *num_end;
    char unit[8];
    size_t ul = 0;
    double v, mult = -1.0;
    char *end;

    if (text == NULL || bytes_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "no memory size given");
    while (isspace((unsigned char)*p)) p++;
    if (strcasecmp(p, "auto") == 0) {
        *bytes_p = 0;
        return GS_OK;
    }
    if (!isdigit((unsigned char)*p) && *p != '.')
        return gs_error_set(GS_ERR_INVALID_PARAM, "memory size '%s' does not start with a "
                            "non-negative number", text);
    for (num_end = p; isdigit((unsigned char)*num_end) || *num_end == '.'; num_end++) {}
    errno = 0;
    v = strtod(p, &end);
    if (end != num_end || errno == ERANGE || !isfinite(v) || v < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "memory size '%s' has a malformed number",
                            text);
    p = end;
    while (*p == ' ') p++;
    while (*p && !isspace((unsigned char)*p)) {
        if (ul + 1 >= sizeof(unit) || !isalpha((unsigned char)*p))
            return gs_error_set(GS_ERR_INVALID_PARAM, "memory size '%s' has an unknown unit",
                                text);
        unit[ul++] = (char)tolower((unsigned char)*p++);
    }
    unit[ul] = '\0';
    while (isspace((unsigned char)*p)) p++;
    if (*p != '\0')
        return gs_error_set(GS_ERR_INVALID_PARAM, "memory size '%s' has trailing characters",
                            text);
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (strcmp(unit, units[i].unit) == 0) mult = units[i].mult;
    if (mult < 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "memory size '%s' has an unknown unit '%s' "
                            "(use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", text, unit);
    v *= mult;
    if (v >= 18446744073709551616.0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "memory size '%s' is larger than 2^64 bytes",
                            text);
    *bytes_p = (uint64_t)v;
    return GS_OK;
}

const char *gs_worker_usage(void)
{
    return "usage: gworker tcp://HOST:PORT [options]\n"
           "\n"
           "Run one gsched worker: register with the scheduler at HOST:PORT, execute the tasks\n"
           "it assigns, keep their chunks and exchange chunks with other workers over UCX.\n"
           "\n"
           "options:\n"
           "  --nthreads N                 kernel threads (cpu backend; default: CPUs); cuda:\n"
           "                               threads reading and writing array files\n"
           "  --memory-limit SIZE|auto     host chunk memory, e.g. 4GB, 500MiB (default auto:\n"
           "                               physical memory or the cgroup limit, divided by\n"
           "                               --memory-share; a larger limit is lowered to that\n"
           "                               memory with a warning, as Dask does); cuda: the\n"
           "                               host tier that device memory spills to\n"
           "  --memory-share N             workers sharing this host's memory for the automatic\n"
           "                               limit (default 1; gs-local-cluster passes its count)\n"
           "  --local-directory DIR        spill chunks to a private subdirectory of DIR when\n"
           "                               memory fills (default $TMPDIR, else /tmp; removed on exit)\n"
           "  --file-root DIR              array files clients read and write (from_npy, to_zarr...)\n"
           "                               must lie inside DIR (default: any path this user may)\n"
           "  --disk-limit SIZE|auto       bytes of chunks on disk (default auto: the file system's room)\n"
           "  --spill-threshold F          start spilling above this fraction of the memory limit\n"
           "                               (default 0.7)\n"
           "  --spill-target F             spill down to this fraction (default 0.6)\n"
           "  --spill-pause F              admit generator tasks only below this fraction (default 0.75)\n"
           "  --no-spill                   never spill: tasks wait for memory, then fail\n"
           "  --device-memory-limit SIZE|auto  device arena (cuda; default: backend's); the\n"
           "                               spill fractions apply to it (spills to host memory)\n"
           "  --backend cpu|cuda           chunk backend (default cpu)\n"
           "  --device N                   CUDA device ordinal (default 0)\n"
           "  --nstreams N                 CUDA streams with tasks in flight (default 4)\n"
           "  --file-path auto|pinned|cufile  how array file reads reach the GPU (cuda): auto\n"
           "                               (default) reads with cuFile when GPUDirect Storage is\n"
           "                               available (nvidia-fs), else through pinned host buffers,\n"
           "                               double-buffered; pinned always stages; cufile uses cuFile\n"
           "                               even in its compatibility mode (no nvidia-fs). The log\n"
           "                               says which path runs (\"file reads: ...\"). Default from\n"
           "                               $GSCHED_FILE_PATH\n"
           "  --name NAME                  worker name (default HOSTNAME-PID)\n"
           "  --token-file PATH            read the cluster token from PATH (default: $GSCHED_TOKEN)\n"
           "  --token TOKEN                the token on the command line: visible to every user\n"
           "                               (ps); prefer $GSCHED_TOKEN or --token-file\n"
           "  --tls-ca-file PATH           TLS to gsched: CAs that sign its certificate (PEM)\n"
           "  --tls-cert PATH              this worker's certificate (PEM; when gsched requires one)\n"
           "  --tls-key PATH               its private key (PEM)\n"
           "  --connect-timeout MS         keep retrying the scheduler this long (default 10000)\n"
           "  --fetch-timeout MS           peer fetch timeout (default 30000)\n"
           "  --transfer-checksum          checksum chunks sent over UCX and check them on arrival\n"
           "                               (testing; every worker of the cluster must use it)\n"
           "  --payload-mac auto|on|off    MAC every chunk sent to a peer from host memory with the\n"
           "                               cluster's key and check it before use (GMAC; default\n"
           "                               auto: on when the cluster has a token; all workers agree;\n"
           "                               default from $GSCHED_PAYLOAD_MAC: auto, on, off, or\n"
           "                               device = on with --payload-mac-device)\n"
           "  --payload-mac-device         also MAC device chunks: stage them through host memory\n"
           "                               instead of UCX device-to-device (default: trusted fabric)\n"
           "  --interface IFACE            network interface for chunk transfers (UCX tcp listens\n"
           "                               there only; RDMA ports are kept). Default: the one that\n"
           "                               reaches the scheduler; $UCX_NET_DEVICES wins\n"
           "  --no-ipc                     never use CUDA IPC between CUDA workers of one host\n"
           "  --no-direct                  open no data port: clients gather through gsched only\n"
           "  --ucx-shm                    let UCX use shared memory (sysv/posix, cma) between\n"
           "                               workers of one host; dead peers are then noticed only\n"
           "                               by the scheduler and the fetch timeout (default: tcp,\n"
           "                               with UCX detecting dead peers)\n"
           "  --no-rejoin                  exit when the scheduler drops this worker (lost connection,\n"
           "                               heartbeat timeout) instead of rejoining it afresh\n"
           "  --log-level LEVEL            fatal|error|warn|info|debug|trace (default info)\n"
           "  -h, --help                   this text\n"
           "  --version                    print the version and whether the build has CUDA\n"
           "\n"
           "Exit status: 0 after SIGINT/SIGTERM or a SHUTDOWN from gsched, 1 when the scheduler\n"
           "connection is refused (or lost, with --no-rejoin), 2 for bad arguments. A registered\n"
           "worker whose connection gsched drops (e.g. after a pause past its heartbeat timeout)\n"
           "drops its chunks and tasks and registers again as a new incarnation. 75 when its\n"
           "device was lost (a CUDA sticky error such as a kernel's illegal address: the task\n"
           "that hit it fails, gsched is told, and only a new process gets the GPU back):\n"
           "gs-local-cluster, systemd and gs-slurm-cluster restart it.\n";
}

static gs_status_t gs__parse_int(const char *opt, const char *val, long lo, long hi, long *v_p)
{
    char *end;
    long v;
    if (val == NULL || *val == '\0')
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s needs a value", opt);
    errno = 0;
    v = strtol(val, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: '%s' is not an integer", opt, val);
    if (v < lo || v > hi)
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: %ld is out of range %ld..%ld", opt, v,
                            lo, hi);
    *v_p = v;
    return GS_OK;
}

static gs_status_t gs__parse_fraction(const char *opt, const char *val, double *f_p)
{
    char *end;
    double v;
    errno = 0;
    v = strtod(val, &end);
    if (*val == '\0' || *end != '\0' || errno == ERANGE || !(v > 0 && v <= 1))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s: '%s' is not a fraction in (0, 1]", opt,
                            val);
    *f_p = v;
    return GS_OK;
}

gs_status_t gs_worker_cli_parse(int argc, char **argv, gs_worker_cli_t *cli_p)
{
    gs_worker_cli_t cli;
    gs_status_t status;
    const char *env;
    int i;

    if (cli_p == NULL || argc < 1 || argv == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "no arguments");
    memset(&cli, 0, sizeof(cli));
    cli.log_level = -1;
    cli.params.backend = "cpu";
    env = getenv("GSCHED_TOKEN");
    if (env) cli.params.token = env;
    /* tests only (worker.h test_lose_device_on): reaches workers a launcher starts */
    env = getenv("GS_WORKER_TEST_LOSE_DEVICE_ON");
    if (env != NULL && *env != '\0') cli.params.test_lose_device_on = env;
    /* the default of --payload-mac, for workers started by a launcher (gs-local-cluster, the
     * client's local mode) */
    env = getenv("GSCHED_PAYLOAD_MAC");
    if (env != NULL && *env != '\0') {
        if (strcmp(env, "on") == 0) cli.params.payload_mac = GS_WORKER_PAYLOAD_MAC_ON;
        else if (strcmp(env, "off") == 0) cli.params.payload_mac = GS_WORKER_PAYLOAD_MAC_OFF;
        else if (strcmp(env, "device") == 0) {   /* on, with --payload-mac-device */
            cli.params.payload_mac = GS_WORKER_PAYLOAD_MAC_ON;
            cli.params.payload_mac_device = 1;
        } else if (strcmp(env, "auto") != 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "$GSCHED_PAYLOAD_MAC: '%s' is not auto, on, off or device",
                                env);
    }

    /* the default of --file-path, for workers started by a launcher */
    env = getenv("GSCHED_FILE_PATH");
    if (env != NULL && *env != '\0' &&
        gs_file_path_parse(env, &cli.params.file_path) != GS_OK)
        return gs_error_set(GS_ERR_INVALID_PARAM, "$GSCHED_FILE_PATH: '%s' is not auto, pinned or "
                            "cufile", env);

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL, *eq;
        char opt[64];
        long v;

        if (arg[0] != '-' || arg[1] == '\0') {
            if (cli.params.scheduler != NULL)
                return gs_error_set(GS_ERR_INVALID_PARAM, "unexpected argument '%s' (the "
                                    "scheduler address is already '%s')", arg,
                                    cli.params.scheduler);
            cli.params.scheduler = arg;
            continue;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            cli.help = 1;
            continue;
        }
        if (strcmp(arg, "--transfer-checksum") == 0) {
            cli.params.transfer_checksum = 1;
            continue;
        }
        if (strcmp(arg, "--payload-mac-device") == 0) {
            cli.params.payload_mac_device = 1;
            continue;
        }
        if (strcmp(arg, "--no-ipc") == 0) {
            cli.params.no_ipc = 1;
            continue;
        }
        if (strcmp(arg, "--no-direct") == 0) {
            cli.params.no_direct = 1;
            continue;
        }
        if (strcmp(arg, "--no-rejoin") == 0) {
            cli.no_rejoin = 1;
            continue;
        }
        if (strcmp(arg, "--no-spill") == 0) {
            cli.params.no_spill = 1;
            continue;
        }
        if (strcmp(arg, "--ucx-shm") == 0) {
            cli.params.ucx_shm = 1;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "unknown option '%s'", arg);
        eq = strchr(arg, '=');
        if (eq) {
            size_t n = (size_t)(eq - arg);
            if (n >= sizeof(opt))
                return gs_error_set(GS_ERR_INVALID_PARAM, "unknown option '%s'", arg);
            memcpy(opt, arg, n);
            opt[n] = '\0';
            val = eq + 1;
        } else {
            if (strlen(arg) >= sizeof(opt))
                return gs_error_set(GS_ERR_INVALID_PARAM, "unknown option '%s'", arg);
            strcpy(opt, arg);
        }
#define GS__TAKE_VALUE()                                                                  \
    do {                                                                                  \
        if (val == NULL) {                                                                \
            if (i + 1 >= argc)                                                            \
                return gs_error_set(GS_ERR_INVALID_PARAM, "%s needs a value", opt);       \
            val = argv[++i];                                                              \
        }                                                                                 \
    } while (0)

        if (strcmp(opt, "--nthreads") == 0) {
            GS__TAKE_VALUE();
            if ((status = gs__parse_int(opt, val, 1, 4096, &v)) != GS_OK) return status;
            cli.params.nthreads = (int)v;
        } else if (strcmp(opt, "--nstreams") == 0) {
            GS__TAKE_VALUE();
            if ((status = gs__parse_int(opt, val, 1, 256, &v)) != GS_OK) return status;
            cli.params.nstreams = (int)v;
        } else if (strcmp(opt, "--device") == 0) {
            GS__TAKE_VALUE();
            if ((status = gs__parse_int(opt, val, 0, 1023, &v)) != GS_OK) return status;
            cli.params.device = (int)v;
        } else if (strcmp(opt, "--memory-share") == 0) {
            GS__TAKE_VALUE();
            if ((status = gs__parse_int(opt, val, 1, 65536, &v)) != GS_OK) return status;
            cli.params.memory_share = (uint32_t)v;
        } else if (strcmp(opt, "--connect-timeout") == 0) {
            GS__TAKE_VALUE();
            if ((status = gs__parse_int(opt, val, 1, 86400000, &v)) != GS_OK) return status;
            cli.params.connect_timeout_ms = (uint32_t)v;
        } else if (strcmp(opt, "--fetch-timeout") == 0) {
            GS__TAKE_VALUE();
            if ((status = gs__parse_int(opt, val, 1, 86400000, &v)) != GS_OK) return status;
            cli.params.fetch_timeout_ms = (uint32_t)v;
        } else if (strcmp(opt, "--spill-threshold") == 0 || strcmp(opt, "--spill-target") == 0 ||
                   strcmp(opt, "--spill-pause") == 0) {
            double f = 0;
            GS__TAKE_VALUE();
            if ((status = gs__parse_fraction(opt, val, &f)) != GS_OK) return status;
            if (opt[8] == 't' && opt[9] == 'h') cli.params.spill_threshold = f;
            else if (opt[8] == 't') cli.params.spill_target = f;
            else cli.params.spill_pause = f;
        } else if (strcmp(opt, "--payload-mac") == 0) {
            GS__TAKE_VALUE();
            if (strcmp(val, "auto") == 0) cli.params.payload_mac = GS_WORKER_PAYLOAD_MAC_AUTO;
            else if (strcmp(val, "on") == 0) cli.params.payload_mac = GS_WORKER_PAYLOAD_MAC_ON;
            else if (strcmp(val, "off") == 0) cli.params.payload_mac = GS_WORKER_PAYLOAD_MAC_OFF;
            else return gs_error_set(GS_ERR_INVALID_PARAM, "--payload-mac: '%s' is not auto, on or off", val);
        } else if (strcmp(opt, "--interface") == 0) {
            GS__TAKE_VALUE();
            if (*val == '\0') return gs_error_set(GS_ERR_INVALID_PARAM, "--interface is empty");
            cli.params.interface = val;
        } else if (strcmp(opt, "--file-path") == 0) {
            GS__TAKE_VALUE();
            if ((status = gs_file_path_parse(val, &cli.params.file_path)) != GS_OK)
                return gs_error_set(GS_ERR_INVALID_PARAM, "--file-path: '%s' is not auto, pinned "
                                    "or cufile", val);
        } else if (strcmp(opt, "--file-root") == 0) {
            GS__TAKE_VALUE();
            if (*val == '\0') return gs_error_set(GS_ERR_INVALID_PARAM, "--file-root is empty");
            cli.params.file_root = val;
        } else if (strcmp(opt, "--local-directory") == 0) {
            GS__TAKE_VALUE();
            if (*val == '\0')
                return gs_error_set(GS_ERR_INVALID_PARAM, "--local-directory is empty");
            cli.params.local_directory = val;
        } else if (strcmp(opt, "--memory-limit") == 0 || strcmp(opt, "--disk-limit") == 0 ||
                   strcmp(opt, "--device-memory-limit") == 0) {
            uint64_t bytes;
            GS__TAKE_VALUE();
            if (gs_worker_parse_size(val, &bytes) != GS_OK) {
                char why[256];
                snprintf(why, sizeof(why), "%s", gs_last_error());   /* not aliased */
                return gs_error_set(GS_ERR_INVALID_PARAM, "%s: %s", opt, why);
            }
            if (opt[2] == 'm') cli.params.memory_limit = bytes;
            else if (opt[3] == 'i') cli.params.disk_limit = bytes;
            else cli.params.device_memory_limit = bytes;
        } else if (strcmp(opt, "--backend") == 0) {
            GS__TAKE_VALUE();
            if (strcmp(val, "cpu") != 0 && strcmp(val, "cuda") != 0)
                return gs_error_set(GS_ERR_INVALID_PARAM, "--backend: '%s' is not cpu or cuda",
                                    val);
            cli.params.backend = val;
        } else if (strcmp(opt, "--name") == 0) {
            GS__TAKE_VALUE();
            if (*val == '\0') return gs_error_set(GS_ERR_INVALID_PARAM, "--name is empty");
            cli.params.name = val;
        } else if (strcmp(opt, "--token") == 0) {
            GS__TAKE_VALUE();
            GS_LOG_WARN("%s", GS_TOKEN_ARGV_WARNING);
            cli.params.token = val;
        } else if (strcmp(opt, "--tls-ca-file") == 0 || strcmp(opt, "--tls-cert") == 0 ||
                   strcmp(opt, "--tls-key") == 0) {
            GS__TAKE_VALUE();
            *(opt[6] == 'c' && opt[7] == 'a' ? &cli.params.tls_ca_file
              : opt[6] == 'c' ? &cli.params.tls_cert : &cli.params.tls_key) = val;
        } else if (strcmp(opt, "--token-file") == 0) {
            static char file_token[GS_TOKEN_BUF_LEN];   /* outlives the parse, like argv */
            GS__TAKE_VALUE();
            if ((status = gs_token_read_file(val, file_token, sizeof file_token)) != GS_OK) return status;
            cli.params.token = file_token;
        } else if (strcmp(opt, "--log-level") == 0) {
            gs_log_level_t lvl;
            GS__TAKE_VALUE();
            if (gs_log_level_parse(val, &lvl) != GS_OK)
                return gs_error_set(GS_ERR_INVALID_PARAM, "--log-level: '%s' is not one of "
                                    "fatal, error, warn, info, debug, trace", val);
            cli.log_level = (int)lvl;
        } else {
            return gs_error_set(GS_ERR_INVALID_PARAM, "unknown option '%s'", arg);
        }
#undef GS__TAKE_VALUE
    }
    if (!cli.help) {
        char host[256];
        int port;
        if (cli.params.scheduler == NULL)
            return gs_error_set(GS_ERR_INVALID_PARAM, "no scheduler address given (expected "
                                "tcp://HOST:PORT)");
        if (gs_addr_parse(cli.params.scheduler, host, sizeof(host), &port) != GS_OK) {
            char why[256];
            snprintf(why, sizeof(why), "%s", gs_last_error());
            return gs_error_set(GS_ERR_INVALID_PARAM, "scheduler address '%s': %s",
                                cli.params.scheduler, why);
        }
        if (port == 0)
            return gs_error_set(GS_ERR_INVALID_PARAM, "scheduler address '%s': port 0 is not "
                                "a port to connect to", cli.params.scheduler);
    }
    *cli_p = cli;
    return GS_OK;
}
