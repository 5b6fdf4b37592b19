/* The Criterion suites' fixture around cluster.c (tc_up, tc_down: declared in cluster.h). Not
 * linked into the programs that use cluster.c without Criterion (sockfuzz). */
#include "cluster.h"

#include <criterion/criterion.h>
#include <unistd.h>

gs_client_h tc_up(tcluster_t *c, int nworkers, unsigned alarm_s)
{
    gs_client_h cl;
    alarm(alarm_s);
    cr_assert(tc_start(c, nworkers, NULL, NULL), "cluster did not start");
    cl = tc_connect(c, GS_LOWER_DEFAULT);
    cr_assert_not_null(cl, "%s", gs_last_error());
    return cl;
}

void tc_down(gs_client_h *client_p)
{
    gs_client_destroy(*client_p);
    *client_p = NULL;
    tp_kill_all();
}
