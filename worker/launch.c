/* Running kernels: pool threads (pool mode), the launcher thread for tasks whose backend call
 * blocks the calling thread (streams mode: QR, SVD), and stream launches (streams mode), whose
 * completion arrives as a note (note.c). exec.c admits and dispatches; this file runs. */
#include "worker/worker_int.h"

#include "chunkops/eval.h"
#include "common/time.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- file tasks */

/* Whether @a path lies inside @a root (resolved): the deepest existing ancestor of @a path,
 * symbolic links resolved, must be @a root or below it, and the rest must hold no "..". */
static int gs__wfile_inside(const char *root, const char *path)
{
    char buf[4200], *r = NULL, *cut;
    size_t rl = strlen(root);
    int ok;
    if (path == NULL || path[0] != '/' || strlen(path) >= sizeof(buf)) return 0;
    snprintf(buf, sizeof(buf), "%s", path);
    for (;;) {
        if ((r = realpath(buf, NULL)) != NULL) break;
        cut = strrchr(buf, '/');
        if (cut == NULL || cut == buf) return 0;
        if (strcmp(cut, "/..") == 0) return 0;
        *cut = '\0';
    }
    if (strstr(path + strlen(buf), "/..") != NULL) {
        free(r);
        return 0;
    }
    ok = strncmp(r, root, rl) == 0 && (r[rl] == '\0' || r[rl] == '/' || rl == 1);
    free(r);
    return ok;
}

/* With --file-root, a file task's paths must lie inside it. GS_ERR_INVALID_PARAM otherwise. */
static gs_status_t gs__wfile_check(const gs_worker_t *w, const gs_ktask_t *kt)
{
    if (w->file_root == NULL || (kt->kind != GS_KTASK_FILE_READ &&
                                 kt->kind != GS_KTASK_FILE_WRITE &&
                                 kt->kind != GS_KTASK_FILE_COMMIT))
        return GS_OK;
    if (!gs__wfile_inside(w->file_root, kt->u.file.path) ||
        (kt->u.file.tmp != NULL && !gs__wfile_inside(w->file_root, kt->u.file.tmp)))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s is outside this worker's file root %s",
                            kt->u.file.path ? kt->u.file.path : "(no path)", w->file_root);
    return GS_OK;
}

/* ---------------------------------------------------------------- dispatch */

/* Hand finished tasks first .. last (linked by job_next) to the loop: one lock, one wake-up. */
static void gs__wpool_done(gs_worker_t *w, gs_wtask_t *first, gs_wtask_t *last)
{
    uv_mutex_lock(&w->done_lock);
    if (w->done_tail) w->done_tail->job_next = first;
    else w->done_head = first;
    w->done_tail = last;
    uv_mutex_unlock(&w->done_lock);
    uv_async_send(&w->async);
}

/* Pool threads: take tasks, instantiate, run, hand back. */
void gs__wpool_main(void *arg)
{
    gs_worker_t *w = arg;
    gs_chunkops_stream_h stream;
    int idx;

    uv_mutex_lock(&w->job_lock);
    idx = w->nthreads_started++;
    uv_mutex_unlock(&w->job_lock);
    stream = w->thread_streams[idx];

    for (;;) {
        gs_wtask_t *mine[GS_W_THREAD_BATCH_MAX], *t, *first;
        int n = 1, cap = GS_W_THREAD_BATCH;
        uint64_t t0, t_report, njobs;

        /* Take the head job and, while they are small, up to GS_W_THREAD_BATCH jobs in all
         * (or this thread's share of a deeper queue, up to GS_W_THREAD_BATCH_MAX) under one
         * lock, reading only the ring (the small flag is in each entry); return them under one
         * lock with one wake-up of the loop, at least every GS_W_THREAD_REPORT_NS. Each task's
         * end time is the next one's start (one clock read per task). */
        uv_mutex_lock(&w->job_lock);
        while (w->job_rd == w->job_wr && !w->job_quit) uv_cond_wait(&w->job_cond, &w->job_lock);
        if (w->job_quit) {
            uv_mutex_unlock(&w->job_lock);
            return;
        }
        njobs = w->job_wr - w->job_rd;
        if (njobs / (uint64_t)w->nthreads > (uint64_t)cap)
            cap = njobs / (uint64_t)w->nthreads > GS_W_THREAD_BATCH_MAX
                      ? GS_W_THREAD_BATCH_MAX : (int)(njobs / (uint64_t)w->nthreads);
        {
            uintptr_t e = w->job_ring[w->job_rd & w->job_mask];
            mine[0] = (gs_wtask_t *)(e & ~GS_W_JOB_SMALL);
            if (e & GS_W_JOB_SMALL) {
                while ((uint64_t)n < njobs && n < cap) {
                    e = w->job_ring[(w->job_rd + (uint64_t)n) & w->job_mask];
                    if (!(e & GS_W_JOB_SMALL)) break;
                    mine[n++] = (gs_wtask_t *)(e & ~GS_W_JOB_SMALL);
                }
            }
        }
        w->job_rd += (uint64_t)n;
        uv_mutex_unlock(&w->job_lock);

        t0 = t_report = gs_now_ns();
        first = mine[0];
        for (int j = 0; j < n; j++) {
            gs_chunk_ref_t small[16];
            gs_chunk_ref_t *in = small;
            gs_ktask_t kt;
            gs_status_t status;
            uint64_t t1;

            t = mine[j];
            if (j + 1 < n) {           /* the next task's struct: a cache miss, taken meanwhile */
                __builtin_prefetch(mine[j + 1]);
                __builtin_prefetch((char *)mine[j + 1] + 64);
            }
            if (t->ndeps > 16) in = gs_malloc(sizeof(*in) * t->ndeps, "task inputs");
            if (in == NULL) {
                status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for %u input references",
                                      t->ndeps);
            } else {
                for (uint32_t i = 0; i < t->ndeps; i++) {
                    in[i].data = t->deps[i].chunk->ptr;
                    in[i].len = (int64_t)(t->deps[i].chunk->nbytes / sizeof(double));
                    in[i].nbytes = t->deps[i].chunk->nbytes;
                }
                status = gs_layer_instantiate(t->layer, t->block, (int)t->ndeps, in, t->out->ptr,
                                              &kt);
                if (status == GS_OK) status = gs__wfile_check(w, &kt);
                if (status == GS_OK) status = gs_chunkops_run_ktask(w->ops, w->ctx, stream, &kt);
                if (in != small) gs_free(in);
            }
            t1 = gs_now_ns();
            t->run_ns = t1 - t0;
            t->t_launch = t0;
            t->status = status;
            if (status != GS_OK) {
                const char *e = gs_last_error();
                t->err = gs_strdup(e[0] ? e : gs_status_string(status), "task error");
            }
            t0 = t1;
            t->job_next = j + 1 < n ? mine[j + 1] : NULL;
            if (j + 1 < n && t1 - t_report >= GS_W_THREAD_REPORT_NS) {
                t->job_next = NULL;    /* hand back first .. t now, go on with the rest */
                gs__wpool_done(w, first, t);
                first = mine[j + 1];
                t_report = t1;
            }
        }
        gs__wpool_done(w, first, mine[n - 1]);
    }
}

int gs__wexec_pick_stream(gs_worker_t *w)
{
    int best = 0;
    for (int s = 1; s < w->nstreams; s++)
        if (w->stream_inflight[s] < w->stream_inflight[best]) best = s;
    return best;
}

/* ---------------------------------------------------------------- launcher thread */

/* Streams mode: some backend calls block their caller for the whole computation (cuSOLVER's
 * geqrf/orgqr/gesvd(j) synchronise on the host: a 1000 x 1000 SVD holds the calling thread
 * ~90 ms on an H100, a 250000 x 1000 QR ~47 of its 96 ms). Made from the loop they would stop
 * fetches, serving, dispatch and heartbeats meanwhile, so QR and SVD tasks go to a launcher
 * thread instead. The loop instantiates the task (gs_ktask_t borrows only the task's input
 * and output chunk memory, held by the task's refs until its completion is drained, and its
 * layer, kept while the task is in its graph's task map) and queues a job; the thread runs the
 * kernel and asks for a notification on its own stream. That stream is used by no other
 * thread, so the per-stream cuBLAS/cuSOLVER handles of the backend are never shared; the
 * loop touches it only at stop, after joining the thread. The job's first member is the note
 * through which the completion (or the failure to enqueue, or the cancelation of a job that
 * never ran) comes back to the loop; the thread never touches the task itself. */

typedef struct gs_wlaunch_job {
    gs_wnote_t note;               /* first: the drain frees the job through it */
    struct gs_wlaunch_job *next;   /* launcher queue (under its lock) */
    gs_wtask_t *task;              /* loop only */
    uint64_t t_start;              /* launcher: when the kernel was handed to the backend */
    char *err;                     /* launcher: failure message (gs_malloc'd) */
    gs_ktask_t kt;
} gs_wlaunch_job_t;

/* File tasks (read, write; not commit) go to a second launcher of several threads, the file
 * threads: on a device backend each one runs its task whole on its own stream, the file's
 * reading and decoding (pread, libzstd/libblosc, byte order, scatter) into page-locked staging
 * and the double-buffered copies to the device (chunkops/fileio.c), so several chunks are read
 * and decoded at once as the cpu backend's pool threads do, and the copies, asynchronous, are
 * what the device's copy engine serialises. They run as many as the worker's --nthreads (the
 * cpu backend's pool size; default the CPUs), at most w->slots (more could never all be busy). */
struct gs_wlauncher;
typedef struct gs_wlthread {
    struct gs_wlauncher *L;
    int idx;
} gs_wlthread_t;

struct gs_wlauncher {
    gs_worker_t *w;
    const char *what;              /* for logs: "launcher" or "file" */
    uv_mutex_t lock;
    uv_cond_t cond;
    gs_wlaunch_job_t *head, *tail; /* under lock */
    int quit;                      /* under lock */
    int nthr;                      /* threads started (loop only; 0: none running) */
    uv_thread_t *threads;          /* nthr */
    gs_wlthread_t *args;           /* nthr */
    gs_chunkops_stream_h *streams; /* one per thread, used by that thread alone */
    int nstreams;                  /* streams created */
};

static void gs__wlaunch_main(void *arg)
{
    gs_wlthread_t *me = arg;
    struct gs_wlauncher *L = me->L;
    gs_worker_t *w = L->w;
    gs_chunkops_stream_h stream = L->streams[me->idx];

    for (;;) {
        gs_wlaunch_job_t *j;
        gs_status_t status;

        uv_mutex_lock(&L->lock);
        while (L->head == NULL && !L->quit) uv_cond_wait(&L->cond, &L->lock);
        if (L->quit) {                 /* jobs still queued go back at stop */
            uv_mutex_unlock(&L->lock);
            return;
        }
        j = L->head;
        L->head = j->next;
        if (L->head == NULL) L->tail = NULL;
        uv_mutex_unlock(&L->lock);

        j->t_start = gs_now_ns();
        status = gs_chunkops_run_ktask(w->ops, w->ctx, stream, &j->kt);
        if (status == GS_OK) {
            gs__wnote_arm(w, stream, &j->note);
            continue;                          /* j belongs to the note now */
        } else {
            /* keep the message; then wait for whatever the failed call enqueued (it may still
             * write the output) and clear the stream's record of the failure, which would
             * otherwise fail the next task's notification */
            const char *e = gs_last_error();
            j->err = gs_strdup(e[0] ? e : gs_status_string(status), "task error");
            (void)w->ops->sync(w->ctx, stream);
        }
        if (status != GS_OK && j->err == NULL) {
            const char *e = gs_last_error();
            j->err = gs_strdup(e[0] ? e : gs_status_string(status), "task error");
        }
        j->note.status = status;
        j->note.t_done = gs_now_ns();
        gs__wnote_push(w, &j->note);
    }
}

/* Whether task kernel @a kt is a file task for the file threads (reads and writes of chunks;
 * a commit, one per array and cheap, stays on the launcher). */
static int gs__wlaunch_is_file(const gs_ktask_t *kt)
{
    return kt->kind == GS_KTASK_FILE_READ || kt->kind == GS_KTASK_FILE_WRITE;
}

/* Whether task kernel @a kt goes to the launcher or the file threads. */
static int gs__wlaunch_wants(const gs_worker_t *w, const gs_ktask_t *kt)
{
    if (w->launcher_off) return 0;
    if (kt->kind == GS_KTASK_FILE_READ || kt->kind == GS_KTASK_FILE_WRITE ||
        kt->kind == GS_KTASK_FILE_COMMIT)
        return 1;                           /* file I/O blocks its thread */
    /* users' CPU kernels on a backend without a user op are staged through host memory
     * (chunkops/stage.c): copies, a synchronised stream and a forked child block the thread;
     * users' CUDA kernels (cuda_src) compile with NVRTC at first use, which blocks too */
    if (w->ops->user == NULL &&
        (kt->kind == GS_KTASK_USER ||
         (kt->kind == GS_KTASK_STENCIL &&
          (kt->u.stencil.user_lib != NULL || kt->u.stencil.user_cuda_src != NULL))))
        return 1;
    /* a user kernel fused with its producers and consumers synchronises the stream before
     * freeing its temporary blocks (chunkops/ktask.c): on a GPU that blocks its thread */
    if (w->ops->user == NULL && kt->kind == GS_KTASK_MAPFUSED) return 1;
    if (kt->kind != GS_KTASK_LINALG) return 0;
    return kt->u.linalg.op != GS_LA_GEMM;   /* factorisations and the Gram path block */
}

/* Stop @a L's threads (after the jobs they are running, if any, have been handed to the
 * backend), return the jobs none started as canceled completions and wait for the threads'
 * streams, so that every job has come back as a note before this returns. */
static void gs__wlaunch_stop_one(gs_worker_t *w, struct gs_wlauncher *L)
{
    gs_wlaunch_job_t *j;

    if (L == NULL || L->nthr == 0) return;
    uv_mutex_lock(&L->lock);
    L->quit = 1;
    uv_cond_broadcast(&L->cond);
    uv_mutex_unlock(&L->lock);
    for (int i = 0; i < L->nthr; i++) uv_thread_join(&L->threads[i]);
    L->nthr = 0;
    j = L->head;
    L->head = L->tail = NULL;
    while (j) {
        gs_wlaunch_job_t *next = j->next;
        j->note.status = GS_ERR_CANCELED;
        j->note.t_done = gs_now_ns();
        gs__wnote_push(w, &j->note);
        j = next;
    }
    for (int i = 0; i < L->nstreams; i++)
        (void)w->ops->sync(w->ctx, L->streams[i]);   /* their notification callbacks have run */
}

static void gs__wlaunch_destroy_one(gs_worker_t *w, struct gs_wlauncher *L)
{
    if (L == NULL) return;
    gs__wlaunch_stop_one(w, L);
    gs_assert(L->head == NULL);
    for (int i = 0; i < L->nstreams; i++) w->ops->stream_destroy(w->ctx, L->streams[i]);
    uv_cond_destroy(&L->cond);
    uv_mutex_destroy(&L->lock);
    gs_free(L->streams);
    gs_free(L->threads);
    gs_free(L->args);
    gs_free(L);
}

/* Create a launcher of @a nthr threads, each with its own stream, into *L_p. With fewer
 * threads than asked (a thread or stream that cannot be made) it runs with those it has;
 * with none it fails. */
static gs_status_t gs__wlaunch_create(gs_worker_t *w, const char *what, int nthr,
                                      struct gs_wlauncher **L_p)
{
    struct gs_wlauncher *L;
    gs_status_t status = GS_OK;

    L = gs_calloc(1, sizeof(*L), "worker launcher");
    if (L == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the %s threads", what);
    L->w = w;
    L->what = what;
    L->streams = gs_calloc((size_t)nthr, sizeof(*L->streams), "launcher streams");
    L->threads = gs_calloc((size_t)nthr, sizeof(*L->threads), "launcher threads");
    L->args = gs_calloc((size_t)nthr, sizeof(*L->args), "launcher threads");
    if (L->streams == NULL || L->threads == NULL || L->args == NULL) {
        status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the %s threads", what);
        goto fail_mem;
    }
    if (uv_mutex_init(&L->lock) != 0) {
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot create the %s threads' mutex", what);
        goto fail_mem;
    }
    if (uv_cond_init(&L->cond) != 0) {
        uv_mutex_destroy(&L->lock);
        status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot create the %s threads' condition",
                              what);
        goto fail_mem;
    }
    for (int i = 0; i < nthr; i++) {
        int rc;
        status = w->ops->stream_create(w->ctx, &L->streams[i]);
        if (status != GS_OK) break;
        L->nstreams = i + 1;
        L->args[i].L = L;
        L->args[i].idx = i;
        rc = uv_thread_create(&L->threads[i], gs__wlaunch_main, &L->args[i]);
        if (rc != 0) {
            status = gs_error_set(GS_ERR_NO_RESOURCE, "cannot start %s thread %d: %s", what, i,
                                  uv_strerror(rc));
            break;
        }
        L->nthr = i + 1;
    }
    if (L->nthr == 0) {
        gs__wlaunch_destroy_one(w, L);
        return status;
    }
    if (L->nthr < nthr)
        GS_LOG_WARN("worker %s: %s; %d of the %d %s threads run", w->name, gs_last_error(),
                    L->nthr, nthr, what);
    *L_p = L;
    return GS_OK;

fail_mem:
    gs_free(L->streams);
    gs_free(L->threads);
    gs_free(L->args);
    gs_free(L);
    return status;
}

/* Start the launcher (@a file 0) or the file threads (@a file 1) on first use. On failure
 * the worker launches such tasks from the loop from then on (they still run, blocking the
 * loop meanwhile); file tasks without file threads go to the launcher. */
static struct gs_wlauncher *gs__wlaunch_get(gs_worker_t *w, int file)
{
    gs_status_t status;
    if (file) {
        int n = w->nthreads < w->slots ? w->nthreads : w->slots;
        if (w->freader != NULL || w->freader_off) return w->freader;
        if (n < 1) n = 1;
        status = gs__wlaunch_create(w, "file", n, &w->freader);
        if (status == GS_OK) {
            GS_LOG_INFO("worker %s: %d file threads read and write array files (%s backend)",
                        w->name, w->freader->nthr, w->ops->name);
            return w->freader;
        }
        w->freader_off = 1;
        GS_LOG_WARN("worker %s: %s; file tasks go to the launcher thread", w->name,
                    gs_last_error());
        return NULL;
    }
    if (w->launcher != NULL || w->launcher_off) return w->launcher;
    status = gs__wlaunch_create(w, "launcher", 1, &w->launcher);
    if (status == GS_OK) {
        GS_LOG_DEBUG("worker %s: launcher thread started (QR and SVD tasks)", w->name);
        return w->launcher;
    }
    GS_LOG_WARN("worker %s: %s; QR and SVD tasks are launched from the event loop, which they "
                "block while the backend computes", w->name, gs_last_error());
    w->launcher_off = 1;
    return NULL;
}

/* Hand @a t (RUNNING, kernel @a kt) to the launcher or the file threads. 0: none (launch
 * inline); 1: taken (its completion, successful or not, arrives as a GS_WNOTE_LAUNCH note or
 * already happened). */
static int gs__wlaunch_submit(gs_worker_t *w, gs_wtask_t *t, const gs_ktask_t *kt)
{
    struct gs_wlauncher *L = NULL;
    gs_wlaunch_job_t *j;
    int file = gs__wlaunch_is_file(kt);

    if (file) L = gs__wlaunch_get(w, 1);
    if (L == NULL) {
        file = 0;
        L = gs__wlaunch_get(w, 0);
    }
    if (L == NULL) return 0;
    t->stream = w->nstreams;
    w->stream_inflight[w->nstreams]++;
    t->t_launch = gs_now_ns();
    j = gs_malloc(sizeof(*j), "launcher job");
    if (j == NULL) {
        gs__wtask_complete(w, t, gs_error_set(GS_ERR_NO_MEMORY, "out of memory launching"),
                           gs_now_ns());
        return 1;
    }
    memset(&j->note, 0, sizeof(j->note));
    j->note.w = w;
    j->note.kind = GS_WNOTE_LAUNCH;
    j->note.obj = t;
    j->next = NULL;
    j->task = t;
    j->t_start = 0;
    j->err = NULL;
    j->kt = *kt;
    if (file) w->st.tasks_file_threads++;
    else w->st.tasks_launcher++;
    uv_mutex_lock(&L->lock);
    if (L->tail) L->tail->next = j;
    else L->head = j;
    L->tail = j;
    uv_cond_signal(&L->cond);
    uv_mutex_unlock(&L->lock);
    return 1;
}

/* Loop: a launcher job came back. */
void gs__wlaunch_done(gs_worker_t *w, gs_wnote_t *n)
{
    gs_wlaunch_job_t *j = (gs_wlaunch_job_t *)n;   /* the note is its first member */
    gs_wtask_t *t = j->task;
    if (j->t_start) t->t_launch = j->t_start;
    gs_free(t->err);
    t->err = j->err;
    j->err = NULL;
    if (j->note.status != GS_OK && t->err == NULL) {
        char buf[GS_W_ERRLEN];
        snprintf(buf, sizeof(buf), "the backend reported %s on the launcher stream",
                 gs_status_string(j->note.status));
        t->err = gs_strdup(buf, "task error");
    }
    gs__wtask_complete(w, t, j->note.status, j->note.t_done);
    gs_free(j);
}

/* Stop the launcher thread and the file threads (after the jobs they are running, if any,
 * have been handed to the backend), return the jobs never started as canceled completions
 * and wait for their streams, so that every job has come back as a note before this returns. */
void gs__wlaunch_stop(gs_worker_t *w)
{
    gs__wlaunch_stop_one(w, w->launcher);
    gs__wlaunch_stop_one(w, w->freader);
}

void gs__wlaunch_destroy(gs_worker_t *w)
{
    gs__wlaunch_destroy_one(w, w->launcher);
    gs__wlaunch_destroy_one(w, w->freader);
    w->launcher = NULL;
    w->freader = NULL;
}

/* ---------------------------------------------------------------- streams mode launch */

/* Streams mode: enqueue one task (or hand it to the launcher); completion arrives as a note. */
void gs__wtask_launch_stream(gs_worker_t *w, gs_wtask_t *t)
{
    gs_chunk_ref_t small[16] = {{0}};   /* (GCC cannot see that only ndeps entries are read) */
    gs_chunk_ref_t *in = small;
    gs_ktask_t kt;
    gs_status_t status;
    gs_wnote_t *n;
    int s;

    if (t->ndeps > 16) in = gs_malloc(sizeof(*in) * t->ndeps, "task inputs");
    if (in == NULL) {
        status = gs_error_set(GS_ERR_NO_MEMORY, "out of memory launching");
    } else {
        for (uint32_t i = 0; i < t->ndeps; i++) {
            in[i].data = t->deps[i].chunk->ptr;
            in[i].len = (int64_t)(t->deps[i].chunk->nbytes / sizeof(double));
            in[i].nbytes = t->deps[i].chunk->nbytes;
        }
        status = gs_layer_instantiate(t->layer, t->block, (int)t->ndeps, in, t->out->ptr, &kt);
        if (status == GS_OK) status = gs__wfile_check(w, &kt);
        if (in != small) gs_free(in);
        if (status == GS_OK && gs__wlaunch_wants(w, &kt) && gs__wlaunch_submit(w, t, &kt))
            return;
    }
    s = gs__wexec_pick_stream(w);
    t->stream = s;
    w->stream_inflight[s]++;
    t->t_launch = gs_now_ns();
    if (status != GS_OK) {
        gs__wtask_complete(w, t, status, gs_now_ns());
        return;
    }
    n = gs_calloc(1, sizeof(*n), "task note");
    if (n == NULL) {
        gs__wtask_complete(w, t, gs_error_set(GS_ERR_NO_MEMORY, "out of memory launching"),
                           gs_now_ns());
        return;
    }
    status = gs_chunkops_run_ktask(w->ops, w->ctx, w->streams[s], &kt);
    if (status != GS_OK) {
        /* Part of the task may have been enqueued before the failure, and the backend keeps
         * the stream's error for its next notify: drain the stream (rare) so that neither
         * this task's output is freed under running work nor a later task inherits the
         * error. */
        (void)w->ops->sync(w->ctx, w->streams[s]);
        gs_free(n);
        gs__wtask_complete(w, t, status, gs_now_ns());
        return;
    }
    n->kind = GS_WNOTE_TASK;
    n->obj = t;
    gs__wnote_arm(w, w->streams[s], n);
}
