/* gworker: a thin main over libgsched_worker (worker/worker.h). */
#include "common/log.h"
#include "worker/worker.h"

#include <gsched/config.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gs__main {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    uv_timer_t backoff;
    gs_worker_h w;                /* the current incarnation; NULL between two */
    gs_status_t reason;
    int stopped;
    int quit;                     /* SIGINT/SIGTERM: no further incarnation */
} gs__main_t;

#define GS__REJOIN_BACKOFF_MIN_MS 100
#define GS__REJOIN_BACKOFF_MAX_MS 1000

static void gs__main_stopped(gs_worker_h w, gs_status_t reason, void *arg)
{
    gs__main_t *m = arg;
    (void)w;
    m->reason = reason;
    m->stopped = 1;
}

static void gs__main_signal(uv_signal_t *h, int signum)
{
    gs__main_t *m = h->data;
    GS_LOG_INFO("received %s, stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
    m->quit = 1;
    if (m->w) gs_worker_stop(m->w, GS_OK);
    uv_timer_stop(&m->backoff);
}

/* Create, start and run one incarnation until it stopped; then free it. Returns the status
 * of creation (GS_OK when it ran); m->reason says why it stopped; *registered_p whether gsched
 * accepted its registration (a refused one gets WELCOME, then ERROR and a close). */
static gs_status_t gs__main_run_once(gs__main_t *m, gs_worker_cli_t *cli, int *registered_p)
{
    gs_worker_stats_t st;
    gs_status_t status;

    m->stopped = 0;
    m->reason = GS_OK;
    *registered_p = 0;
    status = gs_worker_create(&cli->params, &m->loop, &m->w);
    if (status != GS_OK) {
        m->w = NULL;
        return status;
    }
    status = gs_worker_start(m->w);
    if (status != GS_OK) {
        fprintf(stderr, "gworker: %s\n", gs_last_error());
        gs_worker_stop(m->w, status);
    }
    if (m->quit) gs_worker_stop(m->w, GS_OK);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    if (!m->stopped) {
        /* the loop ran dry without a stop (should not happen): stop now */
        gs_worker_stop(m->w, GS_ERR_INTERNAL);
        uv_run(&m->loop, UV_RUN_DEFAULT);
    }
    gs_worker_stats(m->w, &st);
    *registered_p = st.registered;
    /* every kernel has finished (the stop waits for them); now free chunks, tasks, graphs,
     * UCX endpoints and the backend context of this incarnation */
    gs_worker_destroy(m->w);
    m->w = NULL;
    return GS_OK;
}

static void gs__main_backoff_cb(uv_timer_t *h)
{
    (void)h;      /* a one-shot timer: uv_run returns once it fired */
}

/* Sleep @a ms on the loop (SIGINT/SIGTERM end it early). */
static void gs__main_backoff(gs__main_t *m, uint32_t ms)
{
    uv_timer_start(&m->backoff, gs__main_backoff_cb, ms, 0);
    uv_ref((uv_handle_t *)&m->backoff);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    uv_unref((uv_handle_t *)&m->backoff);
}

/* Run incarnations: a registered worker whose scheduler connection was lost without a
 * SHUTDOWN (gsched removed it, e.g. after a pause past the heartbeat timeout) starts afresh
 * and registers again, unless --no-rejoin. A fresh incarnation that gsched refuses (the old
 * registration of the same name may still be live) is retried with backoff until the connect
 * timeout; a refused connection past it (gsched gone) ends the process as before. */
static gs_status_t gs__main_run(gs__main_t *m, gs_worker_cli_t *cli)
{
    uint64_t deadline = 0;          /* 0: not rejoining */
    uint32_t backoff = GS__REJOIN_BACKOFF_MIN_MS;
    uint32_t timeout_ms = cli->params.connect_timeout_ms ? cli->params.connect_timeout_ms
                                                         : 10000;

    for (;;) {
        int registered;
        gs_status_t status = gs__main_run_once(m, cli, &registered);
        if (status != GS_OK) return status;
        /* a lost device (a CUDA sticky error) comes back only in a new process */
        if (m->quit || m->reason == GS_OK || m->reason == GS_ERR_DEVICE_LOST || cli->no_rejoin)
            return GS_OK;
        if (registered && m->reason == GS_ERR_SCHEDULER_LOST) {
            GS_LOG_WARN("removed by the scheduler (%s: the connection closed without a "
                        "SHUTDOWN): rejoining as a new incarnation", gs_status_string(m->reason));
            deadline = uv_hrtime() + (uint64_t)timeout_ms * 1000000ull;
            backoff = GS__REJOIN_BACKOFF_MIN_MS;
            continue;
        }
        /* a rejoin that did not get registered: retry refusals (not a refused connection,
         * which the incarnation already retried for the connect timeout) until the deadline */
        if (registered || deadline == 0 || m->reason == GS_ERR_CONN_REFUSED ||
            m->reason == GS_ERR_TIMED_OUT || uv_hrtime() >= deadline)
            return GS_OK;
        GS_LOG_DEBUG("rejoining gsched failed (%s); retrying in %u ms",
                     gs_status_string(m->reason), backoff);
        gs__main_backoff(m, backoff);
        if (m->quit) return GS_OK;
        backoff = backoff * 2 > GS__REJOIN_BACKOFF_MAX_MS ? GS__REJOIN_BACKOFF_MAX_MS : backoff * 2;
    }
}

int main(int argc, char **argv)
{
    gs_worker_cli_t cli;
    gs__main_t m;
    gs_status_t status;
    int rc;

    gs_log_set_component("gworker");
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("gworker %s\n", GS_VERSION_DESCRIPTION);
            return 0;
        }
    }
    if (gs_worker_cli_parse(argc, argv, &cli) != GS_OK) {
        fprintf(stderr, "gworker: %s\n(try gworker --help)\n", gs_last_error());
        return 2;
    }
    if (cli.help) {
        fputs(gs_worker_usage(), stdout);
        return 0;
    }
    if (cli.log_level >= 0) gs_log_set_level((gs_log_level_t)cli.log_level);
    signal(SIGPIPE, SIG_IGN);
    /* users' CUDA kernels compiled with NVRTC are cached on disk under the local directory
     * (chunkops/cuda/rtc.h), unless the environment names another place */
    if (cli.params.local_directory != NULL)
        (void)setenv("GS_CUDA_RTC_CACHE_DIR", cli.params.local_directory, 0);

    memset(&m, 0, sizeof(m));
    cli.params.stop_cb = gs__main_stopped;
    cli.params.arg = &m;
    if ((rc = uv_loop_init(&m.loop)) != 0) {
        fprintf(stderr, "gworker: uv_loop_init: %s\n", uv_strerror(rc));
        return 1;
    }
    uv_signal_init(&m.loop, &m.sigint);
    uv_signal_init(&m.loop, &m.sigterm);
    uv_timer_init(&m.loop, &m.backoff);
    m.sigint.data = m.sigterm.data = m.backoff.data = &m;
    uv_signal_start(&m.sigint, gs__main_signal, SIGINT);
    uv_signal_start(&m.sigterm, gs__main_signal, SIGTERM);
    uv_unref((uv_handle_t *)&m.sigint);
    uv_unref((uv_handle_t *)&m.sigterm);
    uv_unref((uv_handle_t *)&m.backoff);

    status = gs__main_run(&m, &cli);
    uv_close((uv_handle_t *)&m.sigint, NULL);
    uv_close((uv_handle_t *)&m.sigterm, NULL);
    uv_close((uv_handle_t *)&m.backoff, NULL);
    uv_run(&m.loop, UV_RUN_DEFAULT);       /* the handles' close callbacks */
    if (uv_loop_close(&m.loop) != 0) GS_LOG_WARN("the loop still had handles at exit");
    if (status != GS_OK) {
        fprintf(stderr, "gworker: %s (%s)\n", gs_last_error(), gs_status_name(status));
        return status == GS_ERR_INVALID_PARAM ? 2 : 1;
    }
    if (m.reason == GS_ERR_DEVICE_LOST) {
        fprintf(stderr, "gworker: the device is lost; exiting with status %d for a restart\n",
                GS_WORKER_EXIT_DEVICE_LOST);
        return GS_WORKER_EXIT_DEVICE_LOST;
    }
    return m.reason == GS_OK ? 0 : 1;
}
