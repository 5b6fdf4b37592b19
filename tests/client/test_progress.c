/* The terminal progress bar (GS_CLIENT_FIELD_PROGRESS_BAR): its line, its validation, and the
 * bar drawn on stderr for a graph run against the scripted fake scheduler. */
#include "fake_sched.h"

#include "client/client_internal.h"

#include <gsched/gsched.h>

#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void arm_timeout(void)
{
    alarm(60);
}

Test(client_progress, formats_done_total_rate_and_elapsed, .init = arm_timeout)
{
    char line[160];
    gs__pbar_format(line, sizeof line, 450, 1000, 2.0);
    cr_assert_str_eq(line, "[##############................]  45% 450/1000 tasks | 225 tasks/s | 2.0 s");
    gs__pbar_format(line, sizeof line, 3000000, 3000000, 1.5);
    cr_assert_str_eq(line, "[##############################] 100% 3000000/3000000 tasks | 2.0 M tasks/s | 1.5 s");
    gs__pbar_format(line, sizeof line, 0, 0, 0.0);   /* an empty graph is complete */
    cr_assert_str_eq(line, "[##############################] 100% 0/0 tasks | 0 tasks/s | 0.0 s");
}

Test(client_progress, rejects_unknown_modes, .init = arm_timeout)
{
    gs_client_params_t p;
    gs_client_h c = NULL;
    memset(&p, 0, sizeof p);
    p.address = "tcp://127.0.0.1:1";
    p.field_mask = GS_CLIENT_FIELD_PROGRESS_BAR;
    p.progress_bar = 7;
    cr_assert_eq(gs_client_connect(&p, &c), GS_ERR_INVALID_PARAM);
    cr_assert_not_null(strstr(gs_last_error(), "progress_bar"));
    cr_assert_null(c);
}

static int h_finish(fake_t *f, const gs_msg_t *m)
{
    if (m->type == GS_MSG_GRAPH_SUBMIT) return fake_accept_and_finish(f, m);
    return 0;
}

Test(client_progress, draws_the_bar_on_stderr_and_ends_the_line, .init = arm_timeout)
{
    fake_t f;
    gs_client_params_t p;
    gs_client_h c;
    gs_future_h fut;
    gs_array_h a, s;
    int64_t shape[2] = {4, 6}, chunks[2] = {2, 3};
    char path[] = "/tmp/gs-pbar-XXXXXX", buf[4096], want[64];
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    ssize_t n;
    cr_assert(fd >= 0 && saved >= 0);
    memset(&f, 0, sizeof f);
    cr_assert_eq(fake_start(&f, h_finish, NULL), 0);
    memset(&p, 0, sizeof p);
    p.address = f.address;
    p.field_mask = GS_CLIENT_FIELD_PROGRESS_BAR;
    p.progress_bar = GS_PROGRESS_BAR_ALWAYS;
    cr_assert_eq(gs_client_connect(&p, &c), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_array_full(1.0, 2, shape, chunks, &a), GS_OK);
    cr_assert_eq(gs_array_reduce(GS_RED_SUM, a, NULL, &s), GS_OK);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    cr_assert_eq(gs_client_submit(c, s, 0, &fut), GS_OK, "%s", gs_last_error());
    cr_assert_eq(gs_future_wait(fut, 10.0), GS_OK, "%s", gs_last_error());
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    n = pread(fd, buf, sizeof buf - 1, 0);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    /* the fake reports half, then completion: the last line is the full bar, ended */
    snprintf(want, sizeof want, "100%% %llu/%llu tasks", (unsigned long long)f.sub_ntasks,
             (unsigned long long)f.sub_ntasks);
    cr_assert_not_null(strstr(buf, want), "stderr: '%s'", buf);
    cr_assert_eq(buf[0], '\r');
    cr_assert_eq(buf[n - 1], '\n');
    snprintf(want, sizeof want, "] %3.0f%% %llu/%llu tasks", 100.0 * (double)(f.sub_ntasks / 2) / (double)f.sub_ntasks,
             (unsigned long long)(f.sub_ntasks / 2), (unsigned long long)f.sub_ntasks);
    cr_assert_not_null(strstr(buf, want), "the fake's half-way report is drawn: '%s'", buf);
    gs_future_destroy(fut);
    gs_array_release(s);
    gs_array_release(a);
    gs_client_destroy(c);
    fake_stop(&f);
    close(fd);
    unlink(path);
}
