/* Users' CPU kernels (gsched/array.h gs_user_kernel_t), run in a forked child per call.
 *
 * The library is opened and the symbol resolved in the worker (RTLD_NOW, cached for the
 * process's life: a library is never unloaded while another task may call it), so the child
 * only calls a known function: it sees the inputs through copy-on-write memory, writes the
 * output into a shared anonymous mapping and _exits. A kernel that crashes kills only the
 * child; the task fails with GS_ERR_TASK_FAILED naming the kernel and the signal. The price is
 * one fork (page tables of the worker) and one copy of the output per call. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "chunkops/cpu/cpu.h"
#include "common/alloc.h"
#include "common/error.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define GS__USER_CACHE 64

static pthread_mutex_t gs__user_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *lib, *sym;
    gs_block_fn fn;
} gs__user_cache[GS__USER_CACHE];
static int gs__user_n;

static gs_status_t gs__user_resolve(const char *lib, const char *sym, gs_block_fn *fn_p)
{
    gs_status_t st = GS_OK;
    pthread_mutex_lock(&gs__user_mu);
    for (int i = 0; i < gs__user_n; i++)
        if (strcmp(gs__user_cache[i].lib, lib) == 0 && strcmp(gs__user_cache[i].sym, sym) == 0) {
            *fn_p = gs__user_cache[i].fn;
            goto unlock;
        }
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        st = gs_error_set(GS_ERR_NOT_FOUND, "user kernel library %s does not load: %s", lib,
                          dlerror());
        goto unlock;
    }
    void *f = dlsym(h, sym);
    if (f == NULL) {
        st = gs_error_set(GS_ERR_NOT_FOUND, "user kernel %s not found in %s", sym, lib);
        goto unlock;   /* the handle stays open: dlopen counts references, nothing leaks */
    }
    memcpy(fn_p, &f, sizeof(f));
    if (gs__user_n < GS__USER_CACHE) {
        char *l = gs_malloc(strlen(lib) + 1, "user kernel cache"), *s = gs_malloc(strlen(sym) + 1, "user kernel cache");
        if (l != NULL && s != NULL) {
            strcpy(l, lib);
            strcpy(s, sym);
            gs__user_cache[gs__user_n].lib = l;
            gs__user_cache[gs__user_n].sym = s;
            gs__user_cache[gs__user_n].fn = *fn_p;
            gs__user_n++;
        } else {
            gs_free(l);
            gs_free(s);
        }
    }
unlock:
    pthread_mutex_unlock(&gs__user_mu);
    return st;
}

gs_status_t gs__cpu_user_call(const char *lib, const char *sym, const gs_block_t *in, int nin,
                              gs_block_t *out, const void *arg)
{
    gs_block_fn fn = NULL;
    gs_status_t st;
    int64_t n = 1;
    size_t bytes, maplen;
    void *shm;
    pid_t pid;
    int status = 0;
    if ((st = gs__user_resolve(lib, sym, &fn)) != GS_OK) return st;
    if (gs_dtype_size((gs_dtype_t)out->dtype) == 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "user kernel %s: output dtype %d is unknown",
                            sym, (int)out->dtype);
    for (int32_t j = 0; j < out->ndim; j++) n *= out->shape[j];
    bytes = (size_t)n * gs_dtype_size((gs_dtype_t)out->dtype);
    maplen = bytes > 0 ? bytes : 1;
    shm = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shm == MAP_FAILED)
        return gs_error_set(GS_ERR_NO_MEMORY, "user kernel %s: no shared memory for %zu bytes: %s",
                            sym, bytes, strerror(errno));
    pid = fork();
    if (pid < 0) {
        st = gs_error_set(GS_ERR_NO_RESOURCE, "user kernel %s: fork failed: %s", sym,
                          strerror(errno));
        goto unmap;
    }
    if (pid == 0) {
        /* the worker's crash handlers (UCX's backtraces) are not the kernel's: die plainly */
        static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) signal(sigs[i], SIG_DFL);
        gs_block_t o = *out;
        o.data = shm;
        fn(in, nin, &o, arg);
        _exit(0);
    }
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            st = gs_error_set(GS_ERR_INTERNAL, "user kernel %s: waitpid failed: %s", sym,
                              strerror(errno));
            goto unmap;
        }
    }
    if (WIFSIGNALED(status)) {
        st = gs_error_set(GS_ERR_TASK_FAILED, "user kernel %s of %s crashed: signal %d (%s)", sym,
                          lib, WTERMSIG(status), strsignal(WTERMSIG(status)));
        goto unmap;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        st = gs_error_set(GS_ERR_TASK_FAILED, "user kernel %s of %s exited with status %d", sym,
                          lib, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        goto unmap;
    }
    if (bytes > 0) memcpy(out->data, shm, bytes);
    st = GS_OK;
unmap:
    munmap(shm, maplen);
    return st;
}
