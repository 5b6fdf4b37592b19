/* worker/spill: file operations of the disk tier, each on libuv's thread pool (uv_queue_work):
 * writing a chunk to its file, reading it back (into the chunk, or into a caller's buffer for a
 * peer or gsched), deleting a file. The work function touches only the operation's own fields;
 * the chunk is referenced by the operation until its completion runs on the loop. */
#include "worker/spill/spill_int.h"

#include "common/time.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef enum gs_wspill_op {
    GS_WSPILL_OP_WRITE = 0,
    GS_WSPILL_OP_LOAD = 1,     /* read into the chunk's memory (the file stays: chunks are
                                  immutable, so evicting it again costs no I/O) */
    GS_WSPILL_OP_COPY = 2,     /* read into a caller's buffer, keep the file */
    GS_WSPILL_OP_UNLINK = 3,
    GS_WSPILL_OP_HOSTCOPY = 4, /* copy a host-tier copy (src) into a caller's buffer */
    GS_WSPILL_OP_HOSTWRITE = 5,/* write a chunk's host copy to its file (cascade.c) */
    GS_WSPILL_OP_HOSTLOAD = 6  /* read a chunk's file into its host copy (cascade.c) */
} gs_wspill_op_t;

typedef struct gs_wspill_job {
    uv_work_t req;
    gs_worker_t *w;
    gs_wchunk_t *c;            /* referenced; NULL for unlink */
    int op;
    void *buf;
    const void *src;           /* HOSTCOPY: the chunk's host copy */
    size_t len;
    int err;                   /* errno of the failed call, 0 on success */
    const char *what;          /* the failed call */
    uint64_t ns;
    gs_wspill_read_cb cb;
    void *arg;
    char path[];               /* dirlen + 32 */
} gs_wspill_job_t;

void gs__wspill_path(const struct gs_wspill *sp, uint64_t file, char *buf)
{
    char digits[24];
    int n = 0;
    memcpy(buf, sp->dir, sp->dirlen);
    buf[sp->dirlen] = '/';
    do {
        digits[n++] = (char)('0' + file % 10);
        file /= 10;
    } while (file != 0);
    for (int i = 0; i < n; i++) buf[sp->dirlen + 1 + i] = digits[n - 1 - i];
    memcpy(buf + sp->dirlen + 1 + n, ".chunk", 7);
}

/* ---------------------------------------------------------------- thread pool side */

/* Write j->buf to j->path (@a write) or read j->path into it, whole; on failure j->err and
 * j->what say which call failed, and a partial file written is deleted. */
static void gs__wspill_job_rw(gs_wspill_job_t *j, int write)
{
    char *p = j->buf;
    size_t left = j->len;
    int fd = write ? open(j->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)
                   : open(j->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        j->err = errno;
        j->what = "open";
        return;
    }
    while (left > 0) {
        off_t off = (off_t)(j->len - left);
        ssize_t n = write ? pwrite(fd, p, left, off) : pread(fd, p, left, off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            j->err = n < 0 ? errno : EIO;
            j->what = write ? "write" : n < 0 ? "read" : "read (the file is shorter than the chunk)";
            break;
        }
        p += n;
        left -= (size_t)n;
    }
    if (close(fd) != 0 && j->err == 0 && write) {
        j->err = errno;
        j->what = "close";
    }
    if (write && j->err != 0) (void)unlink(j->path);    /* no partial files */
}

static void gs__wspill_work_cb(uv_work_t *req)
{
    gs_wspill_job_t *j = req->data;
    uint64_t t0 = gs_now_ns();
    switch (j->op) {
    case GS_WSPILL_OP_WRITE:
    case GS_WSPILL_OP_HOSTWRITE: gs__wspill_job_rw(j, 1); break;
    case GS_WSPILL_OP_LOAD:
    case GS_WSPILL_OP_HOSTLOAD:
    case GS_WSPILL_OP_COPY: gs__wspill_job_rw(j, 0); break;
    case GS_WSPILL_OP_HOSTCOPY: memcpy(j->buf, j->src, j->len); break;
    default:
        if (unlink(j->path) != 0 && errno != ENOENT) {
            j->err = errno;
            j->what = "unlink";
        }
        break;
    }
    j->ns = gs_now_ns() - t0;
}

/* ---------------------------------------------------------------- loop side */

static void gs__wspill_after_cb(uv_work_t *req, int rc)
{
    gs_wspill_job_t *j = req->data;
    gs_worker_t *w = j->w;
    gs_wchunk_t *c = j->c;
    gs_status_t status = GS_OK;

    if (rc != 0 || j->err != 0) {
        status = GS_ERR_IO;
        if (rc != 0)
            gs_error_set(status, "worker %s: disk tier: %s %s: %s", w->name,
                         j->op == GS_WSPILL_OP_WRITE || j->op == GS_WSPILL_OP_HOSTWRITE
                             ? "writing" : "reading", j->path,
                         uv_strerror(rc));
        else
            gs_error_set(j->err == ENOSPC || j->err == EDQUOT ? GS_ERR_NO_RESOURCE : GS_ERR_IO,
                         "worker %s: disk tier: %s of %zu bytes to %s failed: %s", w->name,
                         j->what, j->len, j->path, strerror(j->err));
        if (j->err == ENOSPC || j->err == EDQUOT) status = GS_ERR_NO_RESOURCE;
    }
    w->spill->nio--;
    switch (j->op) {
    case GS_WSPILL_OP_WRITE:
        gs__wspill_written(w, c, status, j->ns);
        break;
    case GS_WSPILL_OP_LOAD:
        gs__wspill_loaded(w, c, status, j->ns);
        break;
    case GS_WSPILL_OP_HOSTWRITE:
        gs__wspill_cascaded(w, c, status, j->ns);
        break;
    case GS_WSPILL_OP_HOSTLOAD:
        gs__wspill_disk_loaded(w, c, status, j->ns);
        break;
    case GS_WSPILL_OP_HOSTCOPY:
        if (status == GS_OK) {
            w->st.host_unspilled_bytes += j->len;
            w->st.host_unspilled_ns += j->ns;
        } else {
            GS_LOG_WARN("%s", gs_last_error());
        }
        j->cb(w, status, j->arg);
        break;
    case GS_WSPILL_OP_COPY:
        if (status == GS_OK) {
            w->st.unspilled_bytes += j->len;
            w->st.unspilled_ns += j->ns;
        } else {
            GS_LOG_WARN("%s", gs_last_error());
        }
        j->cb(w, status, j->arg);
        break;
    default:
        if (status != GS_OK) GS_LOG_WARN("%s", gs_last_error());
        break;
    }
    if (c != NULL) gs__wchunk_unref(w, c);
    gs_free(j);
    if (w->state == GS_WSTATE_RUNNING) gs__wexec_pump(w);
    gs__worker_unhold(w);      /* last: ending a stop may destroy the worker (stop_cb) */
}

static gs_status_t gs__wspill_submit(gs_worker_t *w, gs_wchunk_t *c, int op, uint64_t file,
                                     void *buf, gs_wspill_read_cb cb, void *arg)
{
    struct gs_wspill *sp = w->spill;
    gs_wspill_job_t *j = gs_calloc(1, sizeof(*j) + sp->dirlen + 32, "spill job");
    int rc;

    if (j == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "worker %s: out of memory for a disk-tier "
                            "operation", w->name);
    j->w = w;
    j->c = c;
    j->op = op;
    j->buf = buf;
    j->len = c ? (size_t)c->nbytes : 0;
    j->cb = cb;
    j->arg = arg;
    j->req.data = j;
    if (op == GS_WSPILL_OP_HOSTCOPY) j->src = c->sp.host;
    else gs__wspill_path(sp, file, j->path);
    rc = uv_queue_work(w->loop, &j->req, gs__wspill_work_cb, gs__wspill_after_cb);
    if (rc != 0) {
        gs_free(j);
        return gs_error_set(GS_ERR_IO, "worker %s: disk tier: cannot queue file work: %s",
                            w->name, uv_strerror(rc));
    }
    if (c != NULL) gs__wchunk_ref(c);
    sp->nio++;
    gs__worker_hold(w);
    return GS_OK;
}

gs_status_t gs__wspill_write(gs_worker_t *w, gs_wchunk_t *c)
{
    struct gs_wspill *sp = w->spill;
    uint64_t file = ++sp->next_file;
    gs_status_t st = gs__wspill_submit(w, c, GS_WSPILL_OP_WRITE, file, c->ptr, NULL, NULL);
    if (st != GS_OK) return st;
    c->sp.file = file;
    c->sp.io = GS_WSPILL_IO_WRITE;
    sp->writing += c->nbytes;
    sp->nwrites++;
    return GS_OK;
}

gs_status_t gs__wspill_host_to_file(gs_worker_t *w, gs_wchunk_t *c)
{
    struct gs_wspill *sp = w->spill;
    uint64_t file = ++sp->next_file;
    gs_status_t st = gs__wspill_submit(w, c, GS_WSPILL_OP_HOSTWRITE, file, c->sp.host, NULL,
                                       NULL);
    if (st != GS_OK) return st;
    c->sp.file = file;
    c->sp.hio = 1;
    sp->hwriting += c->nbytes;
    sp->nhwrites++;
    return GS_OK;
}

gs_status_t gs__wspill_file_to_host(gs_worker_t *w, gs_wchunk_t *c)
{
    return gs__wspill_submit(w, c, GS_WSPILL_OP_HOSTLOAD, c->sp.file, c->sp.host, NULL, NULL);
}

gs_status_t gs__wspill_load_start(gs_worker_t *w, gs_wchunk_t *c)
{
    return gs__wspill_submit(w, c, GS_WSPILL_OP_LOAD, c->sp.file, c->ptr, NULL, NULL);
}

gs_status_t gs__wspill_read(gs_worker_t *w, gs_wchunk_t *c, void *dst, gs_wspill_read_cb cb,
                            void *arg)
{
    if (c->sp.tier == GS_WTIER_HOST)
        return gs__wspill_submit(w, c, GS_WSPILL_OP_HOSTCOPY, 0, dst, cb, arg);
    if (c->sp.file == 0)
        return gs_error_set(GS_ERR_INTERNAL, "worker %s: chunk (%llu, %llu) has no file",
                            w->name, (unsigned long long)c->graph->id,
                            (unsigned long long)c->task);
    return gs__wspill_submit(w, c, GS_WSPILL_OP_COPY, c->sp.file, dst, cb, arg);
}

void gs__wspill_unlink(gs_worker_t *w, uint64_t file)
{
    struct gs_wspill *sp = w->spill;
    if (w->state == GS_WSTATE_RUNNING &&
        gs__wspill_submit(w, NULL, GS_WSPILL_OP_UNLINK, file, NULL, NULL, NULL) == GS_OK)
        return;
    {
        /* stopping (the loop may not run again) or the queue refused: delete it here */
        char path[PATH_MAX + 32];
        gs__wspill_path(sp, file, path);
        if (unlink(path) != 0 && errno != ENOENT)
            GS_LOG_WARN("worker %s: deleting %s: %s", w->name, path, strerror(errno));
    }
}
