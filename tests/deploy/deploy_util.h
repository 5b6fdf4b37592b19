/* Shared by the tests that run gs-local-cluster as a real process tree (test_local_cluster.c,
 * test_restart.c): the test process as a child subreaper, the launcher's command line, and the
 * client parameters of the cluster it started. */
#ifndef GS_TESTS_DEPLOY_UTIL_H
#define GS_TESTS_DEPLOY_UTIL_H

#include <gsched/gsched.h>

#include <stddef.h>

/* A test's start: SIGALRM after @a alarm_s seconds (the test's deadline) and this process a
 * child subreaper, so that anything the launcher orphans shows up as its child. */
void dp_subreaper_start(unsigned alarm_s);
/* A test's end (a Criterion .fini): SIGKILL to every child and every process started through
 * tests/integration/cluster.h, then reap what has exited. */
void dp_children_kill(void);
/* argv for "gs-local-cluster --port 0 PRE... EXTRA..." (@a pre and @a extra NULL-terminated,
 * either NULL) into @a argv (@a max slots, NULL-terminated; the test fails when it does not
 * fit). @a bin (@a bin_len bytes) holds the launcher's path, which argv[0] borrows. */
void dp_launcher_argv(const char **argv, int max, char *bin, size_t bin_len,
                      const char *const *pre, const char *const *extra);
/* Client parameters for the cluster at @a address with the launcher's @a token (both borrowed
 * by *p). */
void dp_client_params(gs_client_params_t *p, const char *address, const char *token);

#endif
