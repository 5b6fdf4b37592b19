/* gs-netns-job: the client side of the network-namespace harness (tests/netns/hosts.sh).
 *
 *   gs-netns-job (--scheduler tcp://HOST:PORT --token-file PATH | --address-file PATH)
 *                --workers W --n N --chunk C [--seed S] [--notify-at FRAC] [--reference]
 *                [--timeout SECONDS]
 *
 * --address-file reads the scheduler's address and token from a launcher's address file
 * (gs_client_address_file_read(); gs-slurm-cluster writes one).
 * Connects to a running cluster, waits for W workers, computes the seed reduction
 * (normal(10, 1, (N, N)) + 1)[::2, ::2].sum() with C x C chunks and prints one JSON line:
 *   {"value":..., "seconds":..., "tasks":..., "workers":[{"name":..., "id":...}, ...]}
 * (workers as registered when the result arrived; value with 17 significant digits).
 * --notify-at FRAC: once FRAC of the graph's tasks are done, print "progress DONE TOTAL" on its
 * own line (flushed) so that the harness can act mid-job. --reference: also compute the exact
 * value from the random definition (chunkops/random.h) with plain loops and print it as "ref"
 * (no cluster involved in that number). Exit status: 0 ok, 1 failure of the run, 2 bad usage. */
#include "chunkops/random.h"
#include "common/time.h"
#include "common/token.h"

#include <gsched/gsched.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct job {
    double notify_at;        /* fraction; > 1: never */
    int notified;
} job_t;

/* Runs on the client's I/O thread: print once, never block beyond the stdout write. */
static void job_progress(gs_future_h f, uint64_t done, uint64_t total, void *arg)
{
    job_t *j = arg;
    (void)f;
    if (j->notified || total == 0 || (double)done < j->notify_at * (double)total) return;
    j->notified = 1;
    printf("progress %" PRIu64 " %" PRIu64 "\n", done, total);
    fflush(stdout);
}

/* The exact value: sum over the selected elements, in row order, with Neumaier compensation. */
static double job_reference(uint64_t seed, int64_t n)
{
    double s = 0.0, c = 0.0;
    for (int64_t r = 0; r < n; r += 2) {
        for (int64_t k = 0; k < n; k += 2) {
            double v = gs_random_normal_v3(seed, (uint64_t)(r * n + k), 10.0, 1.0) + 1.0, t = s + v;
            c += (s >= v || s <= -v) ? (s - t) + v : (v - t) + s;
            s = t;
        }
    }
    return s + c;
}

static int usage(const char *why)
{
    fprintf(stderr, "gs-netns-job: %s\nusage: gs-netns-job (--scheduler tcp://HOST:PORT "
            "--token-file PATH | --address-file PATH) --workers W --n N --chunk C [--seed S] "
            "[--notify-at FRAC] [--reference] [--timeout SECONDS]\n", why);
    return 2;
}

static int arg_i64(const char *opt, const char *val, int64_t lo, int64_t *v_p)
{
    char *end;
    long long v;
    if (val == NULL) return usage("an option needs a value") == 0;
    v = strtoll(val, &end, 10);
    if (*end != '\0' || v < lo) {
        fprintf(stderr, "gs-netns-job: %s '%s' is not an integer >= %" PRId64 "\n", opt, val, lo);
        return 0;
    }
    *v_p = v;
    return 1;
}

int main(int argc, char **argv)
{
    const char *sched = NULL, *token_file = NULL, *addr_file = NULL;
    int64_t nworkers = -1, n = -1, chunk = -1, seed = 0;
    double timeout_s = 120.0, value = 0.0, t0, ref = 0.0;
    int reference = 0, rc = 1;
    static char token[GS_TOKEN_BUF_LEN];
    static gs_client_address_t addr;
    job_t job = {2.0, 0};
    gs_client_params_t p;
    gs_client_h client = NULL;
    gs_array_h x = NULL, y = NULL, z = NULL, s = NULL;
    gs_future_h f = NULL;
    gs_status_t st;
    gs_compute_stats_t stats;
    gs_client_worker_info_t info[64];
    size_t nw = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--reference") == 0) { reference = 1; continue; }
        if (v == NULL) return usage("an option is missing its value");
        i++;
        if (strcmp(a, "--scheduler") == 0) sched = v;
        else if (strcmp(a, "--token-file") == 0) token_file = v;
        else if (strcmp(a, "--address-file") == 0) addr_file = v;
        else if (strcmp(a, "--workers") == 0) { if (!arg_i64(a, v, 1, &nworkers)) return 2; }
        else if (strcmp(a, "--n") == 0) { if (!arg_i64(a, v, 1, &n)) return 2; }
        else if (strcmp(a, "--chunk") == 0) { if (!arg_i64(a, v, 1, &chunk)) return 2; }
        else if (strcmp(a, "--seed") == 0) { if (!arg_i64(a, v, 0, &seed)) return 2; }
        else if (strcmp(a, "--notify-at") == 0 || strcmp(a, "--timeout") == 0) {
            char *end;
            double d = strtod(v, &end);
            if (*end != '\0' || !(d > 0.0)) return usage("--notify-at / --timeout need a positive number");
            if (a[2] == 'n') job.notify_at = d;
            else timeout_s = d;
        } else {
            fprintf(stderr, "gs-netns-job: unknown option '%s'\n", a);
            return 2;
        }
    }
    if ((addr_file == NULL) == (sched == NULL || token_file == NULL) || nworkers < 0 || n < 0 || chunk < 0)
        return usage("--scheduler and --token-file, or --address-file, and --workers, --n and --chunk "
                     "are required");
    if (addr_file != NULL) {
        if (gs_client_address_file_read(addr_file, &addr) != GS_OK) {
            fprintf(stderr, "gs-netns-job: %s\n", gs_last_error());
            return 2;
        }
        sched = addr.address;
        memcpy(token, addr.token, sizeof(addr.token));
    } else if (gs_token_read_file(token_file, token, sizeof(token)) != GS_OK) {
        fprintf(stderr, "gs-netns-job: %s\n", gs_last_error());
        return 2;
    }

    memset(&p, 0, sizeof(p));
    p.field_mask = GS_CLIENT_FIELD_TOKEN | GS_CLIENT_FIELD_TIMEOUT | GS_CLIENT_FIELD_PROGRESS;
    p.address = sched;
    p.token = token;
    p.timeout_s = 30.0;
    p.progress_cb = job_progress;
    p.progress_arg = &job;
    {
        int64_t shape[2] = {n, n}, chunks[2] = {chunk, chunk};
        gs_slice_t sl[2];
        memset(sl, 0, sizeof(sl));
        sl[0].step = sl[1].step = 2;
        if (gs_array_random_normal((uint64_t)seed, 10.0, 1.0, 2, shape, chunks, &x) != GS_OK ||
            gs_array_binary_scalar(GS_BINARY_ADD, x, 1.0, &y) != GS_OK ||
            gs_array_slice(y, 2, sl, &z) != GS_OK ||
            gs_array_reduce(GS_RED_SUM, z, NULL, &s) != GS_OK) {
            fprintf(stderr, "gs-netns-job: cannot build the expression: %s\n", gs_last_error());
            rc = 2;
            goto out_arrays;
        }
    }
    if ((st = gs_client_connect(&p, &client)) != GS_OK) {
        fprintf(stderr, "gs-netns-job: connect %s: %s: %s\n", sched, gs_status_name(st),
                gs_last_error());
        goto out_arrays;
    }
    if ((st = gs_client_wait_for_workers(client, (int)nworkers, timeout_s)) != GS_OK) {
        fprintf(stderr, "gs-netns-job: %d workers did not register within %.0f s: %s\n",
                (int)nworkers, timeout_s, gs_status_name(st));
        goto out_client;
    }
    t0 = gs_now_s();
    if ((st = gs_client_submit(client, s, 0, &f)) != GS_OK) {
        fprintf(stderr, "gs-netns-job: submit: %s: %s\n", gs_status_name(st), gs_last_error());
        goto out_client;
    }
    if ((st = gs_future_wait(f, timeout_s)) != GS_OK ||
        (st = gs_future_gather(f, &value, 1)) != GS_OK) {
        fprintf(stderr, "gs-netns-job: run: %s: %s\n", gs_status_name(st), gs_last_error());
        goto out_future;
    }
    t0 = gs_now_s() - t0;
    if (gs_future_stats(f, &stats) != GS_OK) memset(&stats, 0, sizeof(stats));
    if (gs_client_workers(client, info, sizeof(info) / sizeof(info[0]), &nw) != GS_OK) nw = 0;
    if (nw > sizeof(info) / sizeof(info[0])) nw = sizeof(info) / sizeof(info[0]);
    if (reference) ref = job_reference((uint64_t)seed, n);
    printf("{\"value\":%.17g,\"seconds\":%.3f,\"tasks\":%" PRIu64, value, t0, stats.ntasks);
    if (reference) printf(",\"ref\":%.17g", ref);
    printf(",\"workers\":[");
    for (size_t i = 0; i < nw; i++)
        printf("%s{\"name\":\"%s\",\"id\":%" PRIu64 ",\"address\":\"%s\"}", i ? "," : "",
               info[i].name, info[i].id, info[i].address);
    printf("]}\n");
    fflush(stdout);
    rc = 0;
out_future:
    gs_future_destroy(f);
out_client:
    gs_client_destroy(client);
out_arrays:
    gs_array_release(s);
    gs_array_release(z);
    gs_array_release(y);
    gs_array_release(x);
    return rc;
}
