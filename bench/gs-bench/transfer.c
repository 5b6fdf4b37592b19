/* gs-bench transfer: point-to-point chunk bandwidth between two workers (see main.c).
 *
 * For each size S (MB, 10^6 bytes): one chunk of S MB (full(i, (S*125000,)) with one chunk) is
 * persisted -- it lands on one worker -- and then replicated with gs_client_replicate() to each
 * of the first two workers in gs_client_workers() order: the worker that holds it answers at
 * once, the other fetches it over the peer-transfer path (UCX between CPU workers, the GPU path
 * between CUDA workers). The longer of the two calls is the transfer (request to gsched, fetch,
 * adoption, answer: what a user of replicate waits for). Each repeat uses a new array; the
 * median of R repeats is printed as one JSON line per size: bytes, seconds, GB/s, the two
 * workers (from, to) and the backend. */
#include "gs-bench.h"

#include <gsched/gsched.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GS__TRANSFER_MAX_SIZES 16

static int gs__parse_sizes(const char *v, int64_t *mb, int *n_p)
{
    char buf[256], *save = NULL, *tok;
    int n = 0;
    if (v == NULL || strlen(v) >= sizeof(buf)) return gs__bad("--sizes needs a list like 8,80,800"), 0;
    snprintf(buf, sizeof(buf), "%s", v);
    for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (n == GS__TRANSFER_MAX_SIZES) return gs__bad("--sizes lists more than %d sizes", GS__TRANSFER_MAX_SIZES), 0;
        if (!gs__int_arg("--sizes", tok, 1, 64000, &mb[n])) return 0;
        n++;
    }
    if (n == 0) return gs__bad("--sizes needs at least one size"), 0;
    *n_p = n;
    return 1;
}

/* One transfer of @a mb MB: seconds of the real copy, index of its target in @a w. 0 ok. */
static int gs__transfer_once(gs_client_h client, const gs_client_worker_info_t *w, int64_t mb, int rep,
                             double *seconds_p, int *to_p)
{
    int64_t n = mb * 125000, shape[1] = {n}, chunks[1] = {n};
    gs_array_h a;
    gs_status_t st;
    double t[2];
    if ((st = gs_array_full((double)rep + 1.0, 1, shape, chunks, &a)) != GS_OK ||
        (st = gs_client_persist(client, a)) != GS_OK) {
        fprintf(stderr, "%s %s: persisting %lld MB: %s: %s\n", g_prog, g_sub, (long long)mb, gs_status_name(st),
                gs_last_error());
        if (st != GS_OK && a != NULL) gs_array_release(a);
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        double t0 = gs__now();
        st = gs_client_replicate(client, a, w[k].name, 600.0);
        t[k] = gs__now() - t0;
        if (st != GS_OK) {
            fprintf(stderr, "%s %s: replicating %lld MB to %s: %s: %s\n", g_prog, g_sub, (long long)mb, w[k].name,
                    gs_status_name(st), gs_last_error());
            gs_client_unpersist(client, a);
            gs_array_release(a);
            return 1;
        }
    }
    *to_p = t[1] > t[0] ? 1 : 0;
    *seconds_p = t[*to_p];
    gs_client_unpersist(client, a);
    gs_array_release(a);
    return 0;
}

int gs__bench_transfer(int argc, char **argv)
{
    gs__common_t c;
    gs_client_h client;
    gs_client_worker_info_t w[2];
    int64_t mb[GS__TRANSFER_MAX_SIZES] = {8, 80, 800};
    int nsizes = 3, rc = 0;
    size_t nw = 0;
    double connect_s;

    memset(&c, 0, sizeof(c));
    c.fuse = c.pushdown = 1;
    c.random_version = GS_RANDOM_DEFAULT;
    c.repeat = 3;
    c.workers = 2;
    for (int i = 0; i < argc; i++) {
        int r = gs__common_arg(argc, argv, &i, &c);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (strcmp(argv[i], "--sizes") == 0) {
            if (!gs__parse_sizes(i + 1 < argc ? argv[i + 1] : NULL, mb, &nsizes)) return 2;
            i++;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: %s transfer [--sizes 8,80,800] [--backend cpu|cuda] [--workers 2] [--repeat R]\n"
                   "       [--scheduler tcp://host:port] [--token T]\n"
                   "one chunk per size (MB) persisted on one worker and replicated to another; prints\n"
                   "bytes, seconds (median of R), GB/s and the two workers per size\n", g_prog);
            return 0;
        } else {
            return gs__bad("unknown option '%s'", argv[i]);
        }
    }
    if (c.workers < 2) return gs__bad("--workers must be at least 2 for a transfer");
    if (gs__connect(&c, &client, &connect_s) != 0) return 1;
    if (gs_client_wait_for_workers(client, 2, 60.0) != GS_OK ||
        gs_client_workers(client, w, 2, &nw) != GS_OK || nw < 2) {
        fprintf(stderr, "%s %s: need 2 workers: %s\n", g_prog, g_sub, gs_last_error());
        gs_client_destroy(client);
        return 1;
    }
    for (int s = 0; s < nsizes && rc == 0; s++) {
        double *sec = calloc((size_t)c.repeat, sizeof(double)), med;
        int to = 1;
        if (sec == NULL) {
            rc = 1;
            break;
        }
        for (int r = 0; r < c.repeat && rc == 0; r++) rc = gs__transfer_once(client, w, mb[s], r, &sec[r], &to);
        if (rc == 0) {
            double bytes = (double)mb[s] * 1e6;
            med = gs__median(sec, c.repeat);
            printf("{\"bench\":\"transfer\",\"bytes\":%.0f", bytes);
            gs__json_num("seconds", med);
            gs__json_num("gbps", bytes / med * 1e-9);
            printf(",\"from\":\"%s\",\"to\":\"%s\",\"backend\":\"%s\",\"repeat\":%d}\n", w[1 - to].name, w[to].name,
                   w[to].backend, c.repeat);
            fflush(stdout);
        }
        free(sec);
    }
    gs_client_destroy(client);
    return rc;
}
