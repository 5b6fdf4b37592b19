/* See deploy_util.h. */
#include "deploy_util.h"

#include "../integration/cluster.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

void dp_subreaper_start(unsigned alarm_s)
{
    alarm(alarm_s);
    cr_assert_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
}

void dp_children_kill(void)
{
    pid_t kids[64];
    int n = tp_children(getpid(), kids, 64);
    for (int i = 0; i < n; i++) kill(kids[i], SIGKILL);
    tp_kill_all();
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

void dp_launcher_argv(const char **argv, int max, char *bin, size_t bin_len,
                      const char *const *pre, const char *const *extra)
{
    int ac = 0;
    cr_assert_gt(max, 3);
    argv[ac++] = tp_bin("gs-local-cluster", bin, bin_len);
    argv[ac++] = "--port";
    argv[ac++] = "0";
    for (int i = 0; pre != NULL && pre[i] != NULL; i++) {
        cr_assert_lt(ac, max - 1, "too many launcher arguments");
        argv[ac++] = pre[i];
    }
    for (int i = 0; extra != NULL && extra[i] != NULL; i++) {
        cr_assert_lt(ac, max - 1, "too many launcher arguments");
        argv[ac++] = extra[i];
    }
    argv[ac] = NULL;
}

void dp_client_params(gs_client_params_t *p, const char *address, const char *token)
{
    memset(p, 0, sizeof(*p));
    p->address = address;
    p->field_mask = GS_CLIENT_FIELD_TOKEN;
    p->token = token;
}
