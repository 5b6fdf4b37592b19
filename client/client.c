/* gs_client_connect and gs_client_destroy: checking the connect params, creating the client
 * (and, for the "local" address, its private cluster), waiting for the handshake, and the
 * teardown that both destroy and a failed connect use. */
#include "client/client_internal.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"
#include "common/token.h"
#include "common/time.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(gs_key_t) == 2 * sizeof(uint64_t), "gs_key_t must be two packed u64");

#define GS__CLIENT_FIELDS_KNOWN                                                                  \
    (GS_CLIENT_FIELD_TOKEN | GS_CLIENT_FIELD_TIMEOUT | GS_CLIENT_FIELD_LOCAL_NWORKERS |          \
     GS_CLIENT_FIELD_LOCAL_BACKEND | GS_CLIENT_FIELD_LOWER_FLAGS | GS_CLIENT_FIELD_PROGRESS |    \
     GS_CLIENT_FIELD_BIN_DIR | GS_CLIENT_FIELD_LOCAL_MEMORY | GS_CLIENT_FIELD_PROGRESS_BAR | \
     GS_CLIENT_FIELD_LOCAL_DASHBOARD | GS_CLIENT_FIELD_TLS | GS_CLIENT_FIELD_GATHER_PATH)

/* What gs_client_connect takes from its params once they are checked. */
typedef struct gs__connect_args {
    int is_local;
    char host[256];     /* remote address only; a local cluster's is known once it runs */
    int port;
    double timeout_s;
    const char *token;  /* NULL: none */
} gs__connect_args_t;

/* ------------------------------------------------------------------------------------------ */
/* params */

static gs_status_t gs__params_check(const gs_client_params_t *params, gs__connect_args_t *args)
{
    uint32_t unknown;

    if (params->address == NULL || params->address[0] == '\0')
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: address is missing "
                                                  "(\"tcp://host:port\" or \"local\")");
    if ((unknown = params->field_mask & ~(uint32_t)GS__CLIENT_FIELDS_KNOWN) != 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: unknown field_mask bits "
                                                  "0x%x", (unsigned)unknown);
    args->timeout_s = GS__DEFAULT_TIMEOUT_S;
    if (params->field_mask & GS_CLIENT_FIELD_TIMEOUT) {
        if (!(params->timeout_s > 0) || !isfinite(params->timeout_s))
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: timeout_s must be a "
                                                      "positive number of seconds");
        args->timeout_s = params->timeout_s;
    }
    if ((params->field_mask & GS_CLIENT_FIELD_LOWER_FLAGS) &&
        (params->lower_flags & ~(unsigned)GS_LOWER_DEFAULT))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: unknown lower flags 0x%x",
                            params->lower_flags);
    if ((params->field_mask & GS_CLIENT_FIELD_PROGRESS_BAR) &&
        (params->progress_bar < GS_PROGRESS_BAR_NEVER || params->progress_bar > GS_PROGRESS_BAR_ALWAYS))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: progress_bar %d is not "
                                                  "GS_PROGRESS_BAR_NEVER, _TTY or _ALWAYS", params->progress_bar);
    if ((params->field_mask & GS_CLIENT_FIELD_GATHER_PATH) &&
        (params->gather_path < GS_GATHER_AUTO || params->gather_path > GS_GATHER_SHM))
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: gather_path %d is not "
                                                  "GS_GATHER_AUTO, _DIRECT, _RELAY or _SHM", params->gather_path);
    if ((params->field_mask & GS_CLIENT_FIELD_PROGRESS) && params->progress_cb == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: progress field set but "
                                                  "progress_cb is NULL");
    args->is_local = strcmp(params->address, "local") == 0;
    args->host[0] = '\0';
    args->port = 0;
    if (args->is_local) {
        if ((params->field_mask & GS_CLIENT_FIELD_LOCAL_NWORKERS) &&
            (params->local_nworkers < 1 || params->local_nworkers > 4096))
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: local_nworkers must "
                                                      "be between 1 and 4096, not %d",
                                params->local_nworkers);
        if ((params->field_mask & GS_CLIENT_FIELD_LOCAL_BACKEND) &&
            (params->local_backend == NULL || (strcmp(params->local_backend, "cpu") != 0 &&
                                               strcmp(params->local_backend, "cuda") != 0)))
            return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: local_backend must be "
                                                      "\"cpu\" or \"cuda\", not \"%s\"",
                                params->local_backend ? params->local_backend : "(null)");
    } else {
        gs_status_t status = gs_addr_parse(params->address, args->host, sizeof(args->host),
                                           &args->port);
        if (status != GS_OK) return status;
    }
    if ((params->field_mask & GS_CLIENT_FIELD_TLS) && args->is_local)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: TLS is for remote addresses; a "
                                                  "\"local\" cluster is reached on loopback");
    if (params->field_mask & GS_CLIENT_FIELD_TOKEN)
        args->token = params->token;
    else
        args->token = getenv("GSCHED_TOKEN");
    return GS_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* create and destroy */

/* A client in state CONNECTING with its configuration, maps, lock and condition; nothing
 * started yet. Freed with gs__client_free. */
static gs_status_t gs__client_new(const gs_client_params_t *params, const char *token,
                                  gs_client_h *client_p)
{
    gs_client_h c = gs_calloc(1, sizeof(*c), "client");
    if (c == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating a client");
    c->refs = 1;
    c->state = GS__CONNECTING;
    c->local.pid = 0;
    c->local.stdin_fd = -1;
    c->lower_flags = (params->field_mask & GS_CLIENT_FIELD_LOWER_FLAGS) ? params->lower_flags
                                                                        : GS_LOWER_DEFAULT;
    if (params->field_mask & GS_CLIENT_FIELD_PROGRESS) {
        c->progress_cb = params->progress_cb;
        c->progress_arg = params->progress_arg;
    }
    if (params->field_mask & GS_CLIENT_FIELD_PROGRESS_BAR) {
        c->pbar = params->progress_bar == GS_PROGRESS_BAR_ALWAYS ||
                  (params->progress_bar == GS_PROGRESS_BAR_TTY && isatty(STDERR_FILENO));
    }
    if (params->field_mask & GS_CLIENT_FIELD_GATHER_PATH) c->gather_path = params->gather_path;
    gs_u64map_init(&c->pending);
    gs_u64map_init(&c->graphs);
    gs_u64map_init(&c->gathers);
    if (token != NULL && (c->token = gs_strdup(token, "client token")) == NULL) {
        gs_free(c);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating a client");
    }
    if (uv_mutex_init(&c->mu) != 0) {
        gs_free(c->token);
        gs_free(c);
        return gs_error_set(GS_ERR_NO_RESOURCE, "cannot create a mutex");
    }
    if (uv_cond_init(&c->cond) != 0) {
        uv_mutex_destroy(&c->mu);
        gs_free(c->token);
        gs_free(c);
        return gs_error_set(GS_ERR_NO_RESOURCE, "cannot create a condition variable");
    }
    if (params->field_mask & GS_CLIENT_FIELD_TLS) {
        gs_tls_config_t tc = {params->tls_ca_file, params->tls_cert, params->tls_key, 0};
        gs_status_t st = gs_tls_ctx_create(&tc, 0, &c->tls);
        if (st != GS_OK) {
            gs__client_free(c);
            return st;
        }
    }
    *client_p = c;
    return GS_OK;
}

/* Stop what runs for the client: the I/O thread (when started) and the local cluster (when
 * started). Used by gs_client_destroy and by a connect that fails after starting either. */
static void gs__client_stop(gs_client_h c)
{
    gs__io_stop(c);
    if (c->local.pid > 0) gs__local_stop(&c->local);
}

/* Wait for WELCOME, a refusal or the timeout. Sets the error message when not READY. */
static gs_status_t gs__handshake_wait(gs_client_h c, double timeout_s)
{
    gs_status_t status;
    double deadline = gs_now_s() + timeout_s;
    uv_mutex_lock(&c->mu);
    while (c->state == GS__CONNECTING) {
        double left = deadline - gs_now_s();
        if (left <= 0) break;
        (void)uv_cond_timedwait(&c->cond, &c->mu, (uint64_t)(left * 1e9) + 1);
    }
    if (c->state == GS__READY) {
        uv_mutex_unlock(&c->mu);
        return GS_OK;
    }
    if (c->state == GS__CONNECTING) {
        c->state = GS__FAILED;
        c->fail_status = GS_ERR_TIMED_OUT;
        snprintf(c->fail_message, sizeof(c->fail_message), "no answer from the scheduler at %s "
                 "within %.1f s", c->address, timeout_s);
    }
    status = gs_error_set(c->fail_status, "%s", c->fail_message);
    uv_mutex_unlock(&c->mu);
    return status;
}

/* Closes without a stated reason tried again at most this often (a scheduler that speaks
 * TLS to a plain client, or something that is not gsched, also closes that way: the error must
 * not wait for the whole timeout). */
#define GS__HANDSHAKE_CLOSED_RETRIES 6

/* Connect and handshake within args->timeout_s. A gsched at its connection limit refuses a new
 * connection (ERROR GS_ERR_BUSY) or closes one that has not finished its handshake to make room
 * for another (sched.h, connection bounds): both are transient, so the attempt is repeated after
 * a growing, jittered pause (10 ms doubling up to 500 ms) while the timeout allows -- as Dask's
 * connect retries with backoff. A refusal that names its reason (token, version) is final. */
static gs_status_t gs__handshake_retrying(gs_client_h c, const gs__connect_args_t *args)
{
    double deadline = gs_now_s() + args->timeout_s, pause_s = 0.010;
    int closed_retries = 0;
    for (;;) {
        gs_status_t status;
        int retry;
        double left;
        if ((status = gs__io_start(c, args->host, args->port)) != GS_OK) return status;
        left = deadline - gs_now_s();
        if ((status = gs__handshake_wait(c, left > 0 ? left : 1e-3)) == GS_OK) return GS_OK;
        uv_mutex_lock(&c->mu);
        retry = c->hs_retry;
        uv_mutex_unlock(&c->mu);
        /* a BUSY refusal is tried until the timeout, a bare close a few times */
        if (retry && status != GS_ERR_BUSY && ++closed_retries > GS__HANDSHAKE_CLOSED_RETRIES) retry = 0;
        /* the jitter keeps many clients turned away together from coming back together */
        double wait_s = pause_s * (0.5 + (double)(gs_now_ns() % 1024u) / 2048.0);
        if (!retry || gs_now_s() + wait_s >= deadline) return status;
        GS_LOG_INFO("%s; trying again in %.0f ms", gs_last_error(), wait_s * 1e3);
        gs__io_stop(c);
        gs__io_reset(c);
        uv_sleep((unsigned)(wait_s * 1e3) + 1u);
        pause_s = pause_s * 2 < 0.5 ? pause_s * 2 : 0.5;
    }
}

gs_status_t gs_client_connect(const gs_client_params_t *params, gs_client_h *client_p)
{
    gs__connect_args_t args;
    gs_client_h c = NULL;
    gs_status_t status;
    char msg[GS__MSG_LEN];

    if (params == NULL || client_p == NULL)
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_client_connect: params and client_p must "
                                                  "not be NULL");
    if ((status = gs__params_check(params, &args)) != GS_OK) return status;
    if ((status = gs__client_new(params, args.token, &c)) != GS_OK) return status;
    if (args.is_local && (c->token == NULL || c->token[0] == '\0')) {
        /* a private cluster gets a private token (handed to it in the environment) */
        char fresh[GS_TOKEN_GENERATED_LEN];
        if ((status = gs_token_generate(fresh, sizeof(fresh))) != GS_OK) goto err_free;
        gs_free(c->token);
        c->token = gs_strdup(fresh, "client token");
        if (c->token == NULL) {
            status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory creating a client");
            goto err_free;
        }
    }
    if (args.is_local) {
        double lt = (params->field_mask & GS_CLIENT_FIELD_TIMEOUT) ? args.timeout_s
                                                                   : GS__LOCAL_TIMEOUT_S;
        status = gs__local_start((params->field_mask & GS_CLIENT_FIELD_BIN_DIR) ? params->bin_dir
                                                                                : NULL,
                                 (params->field_mask & GS_CLIENT_FIELD_LOCAL_NWORKERS)
                                     ? params->local_nworkers : 0,
                                 (params->field_mask & GS_CLIENT_FIELD_LOCAL_BACKEND)
                                     ? params->local_backend : NULL,
                                 (params->field_mask & GS_CLIENT_FIELD_LOCAL_MEMORY)
                                     ? params->local_memory_limit : 0,
                                 (params->field_mask & GS_CLIENT_FIELD_LOCAL_MEMORY)
                                     ? params->local_device_memory_limit : 0,
                                 (params->field_mask & GS_CLIENT_FIELD_LOCAL_DASHBOARD)
                                     ? params->local_dashboard_address : NULL,
                                 c->token, lt, &c->local);
        if (status != GS_OK) goto err_free;
        status = gs_addr_parse(c->local.address, args.host, sizeof(args.host), &args.port);
        if (status != GS_OK) goto err_stop;
    }
    snprintf(c->address, sizeof(c->address), "tcp://%s:%d", args.host, args.port);
    if ((status = gs__handshake_retrying(c, &args)) != GS_OK) goto err_stop;
    *client_p = c;
    return GS_OK;

err_stop:
    /* stopping may overwrite this thread's error message: keep the one that says why */
    snprintf(msg, sizeof(msg), "%s", gs_last_error());
    gs__client_stop(c);
    gs_error_set(status, "%s", msg);
err_free:
    gs__client_free(c);
    return status;
}

void gs_client_destroy(gs_client_h c)
{
    gs__persisted_t *p;
    int free_c;
    if (c == NULL) return;
    gs__client_stop(c);
    gs__gather_direct_close(c);
    /* persisted chunks die with the connection: arrays must not point at them any more */
    uv_mutex_lock(&c->mu);
    p = c->persisted;
    c->persisted = NULL;
    uv_mutex_unlock(&c->mu);
    gs__persisted_free_all(p);
    uv_mutex_lock(&c->mu);
    gs__client_unref_locked(c, &free_c);
    uv_mutex_unlock(&c->mu);
    if (free_c) gs__client_free(c);
}

const char *gs_client_address(gs_client_h c)
{
    if (c == NULL) return "";
    return c->address;
}
