/* gworker: a thin main over libgsched_worker (worker/worker.h). */
#include "common/log.h"
#include "worker/worker.h"

#include <gsched/config.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>

typedef struct gs__main {
    uv_signal_t sigint, sigterm;
    gs_status_t reason;
    int stopped;
} gs__main_t;

static void gs__main_stopped(gs_worker_h w, gs_status_t reason, void *arg)
{
    gs__main_t *m = arg;
    m->reason = reason;
    m->stopped = 1;
    uv_close((uv_handle_t *)&m->sigint, NULL);
    uv_close((uv_handle_t *)&m->sigterm, NULL);
}

static void gs__main_signal(uv_signal_t *h, int signum)
{
    gs_worker_h w = h->data;
    GS_LOG_INFO("received %s, stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
    gs_worker_stop(w, GS_OK);
}

int main(int argc, char **argv)
{
    gs_worker_cli_t cli;
    gs__main_t m;
    gs_worker_h w;
    uv_loop_t loop;
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

    memset(&m, 0, sizeof(m));
    cli.params.stop_cb = gs__main_stopped;
    cli.params.arg = &m;
    if ((rc = uv_loop_init(&loop)) != 0) {
        fprintf(stderr, "gworker: uv_loop_init: %s\n", uv_strerror(rc));
        return 1;
    }
    status = gs_worker_create(&cli.params, &loop, &w);
    if (status != GS_OK) {
        fprintf(stderr, "gworker: %s (%s)\n", gs_last_error(), gs_status_name(status));
        uv_loop_close(&loop);
        return status == GS_ERR_INVALID_PARAM ? 2 : 1;
    }
    uv_signal_init(&loop, &m.sigint);
    uv_signal_init(&loop, &m.sigterm);
    m.sigint.data = m.sigterm.data = w;
    uv_signal_start(&m.sigint, gs__main_signal, SIGINT);
    uv_signal_start(&m.sigterm, gs__main_signal, SIGTERM);
    uv_unref((uv_handle_t *)&m.sigint);
    uv_unref((uv_handle_t *)&m.sigterm);

    status = gs_worker_start(w);
    if (status != GS_OK) {
        fprintf(stderr, "gworker: %s\n", gs_last_error());
        gs_worker_stop(w, status);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    if (!m.stopped) {
        /* the loop ran dry without a stop (should not happen): stop now */
        gs_worker_stop(w, GS_ERR_INTERNAL);
        uv_run(&loop, UV_RUN_DEFAULT);
    }
    gs_worker_destroy(w);
    uv_run(&loop, UV_RUN_DEFAULT);       /* signal handles' close callbacks */
    if (uv_loop_close(&loop) != 0) GS_LOG_WARN("the loop still had handles at exit");
    return m.reason == GS_OK ? 0 : 1;
}
