/* gs-bench spill: arrays larger than the workers' memory. A local cluster whose workers have
 * --memory-limit (cpu) or --device-memory-limit (cuda) LIMIT persists x = normal(0, 1, (n, n)) of
 * about F * LIMIT * workers bytes (so it lives partly in the lower tiers), then sums it. Timed:
 * the persist and the sum. Reported: their seconds, the effective GB/s (bytes of x written by
 * the persist plus bytes of x read by the sum, over both times), the sum checked against x.sum()
 * of a fresh (unpersisted, fused) expression, and the workers' spill counters (bytes and seconds
 * written to and read back from disk, and for cuda workers copied to host memory and back, from
 * their heartbeats). */
#include "gs-bench.h"

#include "deploy/gpuinfo.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GS_SPILL_MAX_WORKERS 64

typedef struct gs__spill_opts {
    gs__common_t c;
    double factor;
    uint64_t limit;
    uint64_t host_limit;       /* cuda: the host tier's limit (--memory-limit); 0: auto */
    int64_t chunk;
} gs__spill_opts_t;

static void gs__spill_usage(FILE *f)
{
    fprintf(f,
            "usage: gs-bench spill --factor F [options]\n"
            "Start a local cluster whose workers hold LIMIT bytes of memory each, persist\n"
            "x = normal(0, 1, (n, n)) of F times their total memory (the rest goes to the lower\n"
            "tiers), then time x.sum(). Needs a local cluster (no --scheduler).\n"
            "  --factor F            array size over the workers' total memory (> 0, e.g. 1.5)\n"
            "  --limit-mb M          memory per worker in MB (1e6 bytes): --memory-limit for\n"
            "                        cpu workers, --device-memory-limit for cuda ones\n"
            "                        (default 256 cpu, 16000 cuda)\n"
            "  --host-limit-mb M     cuda: host tier per worker in MB (--memory-limit of the\n"
            "                        workers; beyond it host copies go on to disk)\n"
            "  --chunk C             chunk side (default 1024: 8 MiB chunks)\n"
            "  --workers W           workers (default 1 for cpu, one per GPU for cuda)\n"
            "  --backend cpu|cuda    (default cuda when a GPU is visible)\n"
            "  --repeat R            timed sums of the persisted x (default 1)\n"
            "  --seed S              random seed (default 0)\n"
            "Prints one JSON line per sum: bench, backend, workers, factor, limit, n, chunk,\n"
            "array_bytes, persist_s, sum_s, gb_per_s, value, expected, disk_used, spilled_bytes,\n"
            "spilled_s, unspilled_bytes, unspilled_s (disk tier), host_used, host_spilled_bytes,\n"
            "host_spilled_s, host_unspilled_bytes, host_unspilled_s (host tier of cuda workers).\n");
}

static int gs__spill_args(int argc, char **argv, gs__spill_opts_t *o, int *done)
{
    memset(o, 0, sizeof(*o));
    gs__common_defaults(&o->c);
    o->chunk = 1024;
    *done = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            gs__spill_usage(stdout);
            *done = 1;
            return 0;
        }
        if (strcmp(a, "--factor") == 0) {
            char *end;
            if (v == NULL) return gs__bad("option --factor needs a value");
            o->factor = strtod(v, &end);
            if (*end != '\0' || !(o->factor > 0 && o->factor <= 1000))
                return gs__bad("--factor expects a number in (0, 1000], not '%s'", v);
            i++;
            continue;
        }
        if (strcmp(a, "--limit-mb") == 0) {
            int64_t mb;
            if (!gs__int_arg(a, v, 1, INT64_C(100000000), &mb)) return 2;
            o->limit = (uint64_t)mb * 1000000u;
            i++;
            continue;
        }
        if (strcmp(a, "--host-limit-mb") == 0) {
            int64_t mb;
            if (!gs__int_arg(a, v, 1, INT64_C(100000000), &mb)) return 2;
            o->host_limit = (uint64_t)mb * 1000000u;
            i++;
            continue;
        }
        if (strcmp(a, "--chunk") == 0) {
            if (!gs__int_arg(a, v, 1, 1 << 20, &o->chunk)) return 2;
            i++;
            continue;
        }
        r = gs__common_arg(argc, argv, &i, &o->c);
        if (r < 0) return 2;
        if (r == 0) return gs__bad("unknown option '%s'", a);
    }
    if (o->factor == 0) return gs__bad("--factor is required");
    if (o->c.scheduler != NULL)
        return gs__bad("--scheduler is not supported: the benchmark sets the workers' limits");
    if (o->c.backend == NULL) o->c.backend = gs__default_backend();
    if (o->limit == 0) o->limit = strcmp(o->c.backend, "cuda") == 0 ? 16000000000ull : 256000000ull;
    if (o->host_limit != 0 && strcmp(o->c.backend, "cuda") != 0)
        return gs__bad("--host-limit-mb is for cuda workers (cpu ones: --limit-mb)");
    if (strcmp(o->c.backend, "cuda") == 0) {
        o->c.device_memory_limit = o->limit;
        o->c.memory_limit = o->host_limit;
    } else {
        o->c.memory_limit = o->limit;
    }
    if (o->c.workers == 0) {
        gs_gpu_t gpus[GS_GPU_MAX];
        o->c.workers = strcmp(o->c.backend, "cuda") == 0 ? gs_gpu_discover(gpus) : 1;
        if (o->c.workers < 1) o->c.workers = 1;
    }
    return 0;
}

/* Sum of every worker's tier counters, once a heartbeat has carried what the sum left. */
static void gs__spill_counters(gs_client_h client, gs_client_worker_info_t *tot)
{
    gs_client_worker_info_t wi[GS_SPILL_MAX_WORKERS];
    struct timespec ts = {1, 200 * 1000 * 1000};   /* a little more than one heartbeat */
    size_t n = 0;
    memset(tot, 0, sizeof(*tot));
    nanosleep(&ts, NULL);
    if (gs_client_workers(client, wi, GS_SPILL_MAX_WORKERS, &n) != GS_OK) return;
    for (size_t i = 0; i < n && i < GS_SPILL_MAX_WORKERS; i++) {
        tot->disk_used += wi[i].disk_used;
        tot->spilled_bytes += wi[i].spilled_bytes;
        tot->spilled_s += wi[i].spilled_s;
        tot->unspilled_bytes += wi[i].unspilled_bytes;
        tot->unspilled_s += wi[i].unspilled_s;
        tot->host_used += wi[i].host_used;
        tot->host_spilled_bytes += wi[i].host_spilled_bytes;
        tot->host_spilled_s += wi[i].host_spilled_s;
        tot->host_unspilled_bytes += wi[i].host_unspilled_bytes;
        tot->host_unspilled_s += wi[i].host_unspilled_s;
    }
}

static int gs__spill_sum(gs_client_h client, gs_array_h x, double *v_p, double *s_p)
{
    gs_array_h s = NULL;
    gs_status_t st;
    double t0 = gs__now();
    if (gs_array_reduce(GS_RED_SUM, x, NULL, &s) != GS_OK ||
        (st = gs_client_compute_scalar(client, s, v_p)) != GS_OK) {
        fprintf(stderr, "%s %s: the sum failed: %s\n", g_prog, g_sub, gs_last_error());
        gs_array_release(s);
        return 1;
    }
    *s_p = gs__now() - t0;
    gs_array_release(s);
    return 0;
}

int gs__bench_spill(int argc, char **argv)
{
    gs__spill_opts_t o;
    gs_client_h client = NULL;
    gs_array_h x = NULL, fresh = NULL;
    double connect_s = 0, persist_s = 0, expected = NAN, t;
    int64_t n, shape[2], chunks[2];
    uint64_t bytes;
    int rc, done;

    if ((rc = gs__spill_args(argc, argv, &o, &done)) != 0 || done) return rc;
    {
        int w = o.c.workers > 0 ? o.c.workers : 1;
        double want = o.factor * (double)o.limit * (double)w / 8.0;   /* elements */
        n = (int64_t)ceil(sqrt(want) / (double)o.chunk) * o.chunk;
        if (n < o.chunk) n = o.chunk;
    }
    shape[0] = shape[1] = n;
    chunks[0] = chunks[1] = o.chunk;
    bytes = (uint64_t)n * (uint64_t)n * 8u;
    rc = gs__connect_persist_normal(&o.c, shape, chunks, &client, &x, &connect_s, &persist_s);
    if (rc != 0) goto out;
    rc = 1;
    /* the check value, untimed: the same array generated again and summed in one fused pass */
    if (gs_array_random_normal(o.c.seed, 0.0, 1.0, 2, shape, chunks, &fresh) != GS_OK ||
        gs__spill_sum(client, fresh, &expected, &t) != 0)
        goto out;
    for (int r = 0; r < o.c.repeat; r++) {
        double v = NAN;
        gs_client_worker_info_t tot;
        if (gs__spill_sum(client, x, &v, &t) != 0) goto out;
        gs__spill_counters(client, &tot);
        printf("{\"bench\":\"spill\",\"backend\":\"%s\",\"workers\":%d,\"run\":%d",
               o.c.backend, o.c.workers, r);
        gs__json_num("factor", o.factor);
        printf(",\"limit\":%" PRIu64 ",\"n\":%" PRId64 ",\"chunk\":%" PRId64
               ",\"array_bytes\":%" PRIu64, o.limit, n, o.chunk, bytes);
        gs__json_num("persist_s", persist_s);
        gs__json_num("sum_s", t);
        gs__json_num("gb_per_s", 2.0 * (double)bytes / (persist_s + t) * 1e-9);
        gs__json_num("value", v);
        gs__json_num("expected", expected);
        printf(",\"disk_used\":%" PRIu64 ",\"spilled_bytes\":%" PRIu64, tot.disk_used,
               tot.spilled_bytes);
        gs__json_num("spilled_s", tot.spilled_s);
        printf(",\"unspilled_bytes\":%" PRIu64, tot.unspilled_bytes);
        gs__json_num("unspilled_s", tot.unspilled_s);
        printf(",\"host_used\":%" PRIu64 ",\"host_spilled_bytes\":%" PRIu64, tot.host_used,
               tot.host_spilled_bytes);
        gs__json_num("host_spilled_s", tot.host_spilled_s);
        printf(",\"host_unspilled_bytes\":%" PRIu64, tot.host_unspilled_bytes);
        gs__json_num("host_unspilled_s", tot.host_unspilled_s);
        printf(",\"host_limit\":%" PRIu64, o.host_limit);
        gs__json_num("connect_s", connect_s);
        printf("}\n");
        fflush(stdout);
        if (!gs__value_ok(r, v, expected, 1e-9 * fmax(1.0, (double)n))) goto out;
    }
    rc = 0;
out:
    gs_client_destroy(client);
    gs_array_release(fresh);
    gs_array_release(x);
    return rc;
}
