/* worker/spill: configuration, the local directory, the LRU of stored chunks in memory and
 * the policy moving them to disk and back (spill.h states the rules). File I/O: disk.c. */
#include "worker/spill/spill_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GS_WSPILL_DEFAULT_TARGET 0.6
#define GS_WSPILL_DEFAULT_THRESHOLD 0.7
#define GS_WSPILL_DEFAULT_PAUSE 0.75
/* Device memory (streams mode): the backend's limit already leaves 15 % of the device free, and
 * a device chunk spilled early costs a DMA both ways, so device memory is not spilled ahead of
 * need: only a task that does not fit makes room (admission), and generators are admitted while
 * they fit. With the host-memory fractions above, one H100's tall SVD (4 M x 1000, 64 GB of
 * chunks under a 67 GB limit) spilled 100 GB to host memory and took 5.5-23 s instead of 0.29 s.
 * --spill-threshold/--spill-target/--spill-pause still set them. */
#define GS_WSPILL_DEVICE_TARGET 0.9
#define GS_WSPILL_DEVICE_THRESHOLD 1.0
#define GS_WSPILL_DEVICE_PAUSE 1.0

/* ---------------------------------------------------------------- LRU */

static void gs__wlru_del(gs_wspill_chunk_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = NULL;
    e->in_lru = 0;
}

static void gs__wlru_push(struct gs_wspill *sp, gs_wspill_chunk_t *e)
{
    e->prev = sp->lru.prev;
    e->next = &sp->lru;
    sp->lru.prev->next = e;
    sp->lru.prev = e;
    e->in_lru = 1;
}

#define GS_WSPILL_CHUNK(e) GS_WCONTAINER(e, gs_wchunk_t, sp)

void gs__wspill_track(gs_worker_t *w, gs_wchunk_t *c)
{
    struct gs_wspill *sp = w->spill;
    if (sp == NULL || !sp->enabled || !c->owned || !c->in_map || c->sp.tier != GS_WTIER_MEM)
        return;
    if (c->sp.in_lru) gs__wlru_del(&c->sp);
    gs__wlru_push(sp, &c->sp);
}

void gs__wspill_touch(gs_worker_t *w, gs_wchunk_t *c)
{
    if (c->sp.in_lru) {
        gs__wlru_del(&c->sp);
        gs__wlru_push(w->spill, &c->sp);
    }
}

void gs__wspill_forget(gs_worker_t *w, gs_wchunk_t *c, int freeing)
{
    if (c->sp.in_lru) gs__wlru_del(&c->sp);
    if (!freeing) return;
    if (c->sp.host != NULL) {
        gs_assert(c->sp.io == GS_WSPILL_IO_NONE);   /* copies hold a reference */
        gs__wspill_host_release(w, c);
        gs_assert(w->st.host_used >= c->nbytes);
        w->st.host_used -= c->nbytes;
        w->spill->full = 0;             /* room on the host tier again */
    }
    if (c->sp.file == 0) return;
    gs_assert(c->sp.io == GS_WSPILL_IO_NONE);   /* operations hold a reference */
    gs__wspill_unlink(w, c->sp.file);
    gs_assert(w->st.disk_used >= c->nbytes);
    w->st.disk_used -= c->nbytes;
    c->sp.file = 0;
    w->spill->full = 0;                 /* room on disk again: writes may be tried */
    w->spill->dfull = 0;
}

/* ---------------------------------------------------------------- moving chunks */

static int gs__wspill_movable(const gs_wchunk_t *c)
{
    return c->owned && c->in_map && c->state == GS_WCHUNK_READY &&
           c->sp.tier == GS_WTIER_MEM && c->sp.io == GS_WSPILL_IO_NONE && c->refs == 1 &&
           c->nbytes > 0;
}

void gs__wspill_evict(gs_worker_t *w, gs_wchunk_t *c)
{
    gs_assert(gs__wspill_has_copy(c) && c->sp.tier == GS_WTIER_MEM);
    if (c->sp.in_lru) gs__wlru_del(&c->sp);
    gs__wmem_free(w, c->ptr, c->nbytes);
    c->ptr = NULL;
    c->sp.tier = c->sp.host != NULL ? GS_WTIER_HOST : GS_WTIER_DISK;
}

void gs__wspill_written(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, uint64_t ns)
{
    struct gs_wspill *sp = w->spill;

    gs_assert(sp->writing >= c->nbytes && sp->nwrites > 0);
    sp->writing -= c->nbytes;
    sp->nwrites--;
    c->sp.io = GS_WSPILL_IO_NONE;
    if (status != GS_OK) {
        snprintf(sp->err, sizeof(sp->err), "%s", gs_last_error());
        sp->err_status = status;
        GS_LOG_WARN("%s; the chunk stays in memory", sp->err);
        if (!sp->host_tier) c->sp.file = 0;   /* the partial file was deleted */
        w->st.spill_failures++;
        sp->full = 1;                   /* retrying every chunk would fail the same way */
        gs__wmem_freed(w);              /* let a blocked admission see the failure */
        return;
    }
    sp->err[0] = '\0';
    if (!sp->host_tier) {               /* host.c counts the host tier's */
        w->st.disk_used += c->nbytes;
        w->st.spilled_bytes += c->nbytes;
        w->st.spilled_ns += ns;
        w->st.spills++;
    }
    /* the write's reference and the store's: nothing else uses it, free its memory; otherwise
     * it stays in memory with a valid file (evicting it later costs no I/O) */
    if (c->refs == 2 && c->owned && c->in_map) gs__wspill_evict(w, c);
}

void gs__wspill_loaded(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, uint64_t ns)
{
    c->sp.io = GS_WSPILL_IO_NONE;
    if (status != GS_OK) {
        char why[GS_W_ERRLEN];
        snprintf(why, sizeof(why), "%s", gs_last_error());
        GS_LOG_ERROR("%s", why);
        gs__wmem_free(w, c->ptr, c->nbytes);
        c->ptr = NULL;
        gs__wexec_input_failed(w, c, status, why, 0);
        return;
    }
    /* the file stays (clean copy): evicting the chunk again needs no write */
    if (c->sp.tier == GS_WTIER_DISK) {  /* host.c counts the host tier's */
        w->st.unspilled_bytes += c->nbytes;
        w->st.unspilled_ns += ns;
        w->st.unspills++;
    }
    c->sp.tier = GS_WTIER_MEM;
    gs__wspill_track(w, c);
    gs__wexec_input_ready(w, c);
}

gs_status_t gs__wspill_load(gs_worker_t *w, gs_wchunk_t *c)
{
    void *ptr = NULL;
    gs_status_t st;

    gs_assert(c->sp.tier != GS_WTIER_MEM && c->sp.io == GS_WSPILL_IO_NONE &&
              gs__wspill_has_copy(c));
    st = gs__wmem_alloc(w, c->nbytes, &ptr);
    if (st != GS_OK) return st;
    c->ptr = ptr;
    c->sp.io = GS_WSPILL_IO_READ;
    st = c->sp.tier == GS_WTIER_HOST ? gs__wspill_host_load(w, c)
         : w->spill->host_tier       ? gs__wspill_disk_load(w, c)   /* via a host copy */
                                     : gs__wspill_load_start(w, c);
    if (st != GS_OK) {
        c->sp.io = GS_WSPILL_IO_NONE;
        gs__wmem_free(w, ptr, c->nbytes);
        c->ptr = NULL;
    }
    return st;
}

const char *gs__wspill_upper_name(const gs_worker_t *w)
{
    return w->streams_mode ? "device" : "memory";
}

const char *gs__wspill_lower_name(const gs_worker_t *w)
{
    return w->spill != NULL && w->spill->host_tier ? "host" : "disk";
}

/* Start moving @a c to the lower tier (a file, or a host copy). */
static gs_status_t gs__wspill_move_down(gs_worker_t *w, gs_wchunk_t *c)
{
    return w->spill->host_tier ? gs__wspill_host_write(w, c) : gs__wspill_write(w, c);
}

gs_status_t gs__wspill_make_room(gs_worker_t *w, uint64_t need, uint64_t cap)
{
    struct gs_wspill *sp = w->spill;
    gs_wspill_chunk_t *e;
    uint64_t blocked_by_limit = 0, lower_limit, lower_used;
    const char *upper = gs__wspill_upper_name(w), *lower = gs__wspill_lower_name(w);
    int write_failed = 0, cascaded = 0;
    gs_status_t cst;

    if (sp == NULL || !sp->enabled)
        return gs_error_set(GS_ERR_UNSUPPORTED, "worker %s: spilling is off", w->name);
    if (need > cap)
        return gs_error_set(GS_ERR_NO_MEMORY, "worker %s: %s tier: %llu bytes are needed "
                            "at once but the tier holds at most %llu bytes", w->name, upper,
                            (unsigned long long)need, (unsigned long long)cap);
    lower_limit = gs__wspill_lower_limit(w);
again:
    for (e = sp->lru.next; e != &sp->lru;) {
        gs_wchunk_t *c = GS_WSPILL_CHUNK(e);
        gs_wspill_chunk_t *next = e->next;
        if (w->mem_used - sp->writing + need <= cap) break;
        lower_used = gs__wspill_lower_used(w);
        if (gs__wspill_movable(c)) {
            if (gs__wspill_has_copy(c)) {
                gs__wspill_evict(w, c);          /* clean: no I/O */
            } else if (sp->full) {
                write_failed = 1;                /* until a file / host copy goes */
            } else if (sp->nwrites >= GS_WSPILL_MAX_WRITES) {
                break;                           /* more once these finish */
            } else if (lower_used + sp->writing > lower_limit ||
                       c->nbytes > lower_limit - lower_used - sp->writing) {
                if (blocked_by_limit == 0 || c->nbytes < blocked_by_limit)
                    blocked_by_limit = c->nbytes;
            } else if (gs__wspill_move_down(w, c) != GS_OK) {
                snprintf(sp->err, sizeof(sp->err), "%s", gs_last_error());
                sp->err_status = sp->host_tier ? GS_ERR_NO_MEMORY : GS_ERR_IO;
                write_failed = 1;
                break;
            }
        }
        e = next;
    }
    if (w->mem_used + need <= cap) return GS_OK;
    if (blocked_by_limit && sp->host_tier && sp->dir != NULL) {
        /* the host tier is full: its copies cascade to disk (cascade.c) */
        uint64_t excess = w->mem_used - sp->writing + need > cap
                              ? w->mem_used - sp->writing + need - cap : 0;
        if (excess < blocked_by_limit) excess = blocked_by_limit;
        cst = gs__wspill_cascade(w, excess, sp->host_limit);
        if (cst == GS_OK && !cascaded) {         /* host copies freed at once: move more */
            cascaded = 1;
            blocked_by_limit = 0;
            goto again;
        }
        if (cst == GS_INPROGRESS) return GS_INPROGRESS;
        if (cst != GS_OK && sp->nwrites == 0) {
            char why[GS_W_ERRLEN];
            snprintf(why, sizeof(why), "%s", gs_last_error());
            return gs_error_set(cst, "%s (%s tier: %llu of %llu bytes in use, %llu more "
                                "needed)", why, upper, (unsigned long long)w->mem_used,
                                (unsigned long long)w->mem_limit, (unsigned long long)need);
        }
    }
    /* copies in flight: their completion frees memory and brings the caller back here */
    if (sp->nwrites > 0) return GS_INPROGRESS;
    if (write_failed)
        return gs_error_set(sp->err_status, "%s (%s tier: %llu of %llu bytes in use, "
                            "%llu more needed)", sp->err, upper, (unsigned long long)w->mem_used,
                            (unsigned long long)w->mem_limit, (unsigned long long)need);
    lower_used = gs__wspill_lower_used(w);
    if (blocked_by_limit)
        return gs_error_set(GS_ERR_NO_RESOURCE, "worker %s: the %s tier cannot hold %llu "
                            "more bytes: %llu bytes are on it%s%s and its limit is %llu "
                            "bytes (%s tier: %llu of %llu bytes in use, %llu more needed)",
                            w->name, lower, (unsigned long long)blocked_by_limit,
                            (unsigned long long)lower_used, sp->host_tier ? "" : " in ",
                            sp->host_tier ? "" : sp->dir, (unsigned long long)lower_limit,
                            upper, (unsigned long long)w->mem_used,
                            (unsigned long long)w->mem_limit, (unsigned long long)need);
    return gs_error_set(GS_ERR_NO_MEMORY, "worker %s: %s tier: %llu of %llu bytes are "
                        "held by chunks in use (inputs of queued or running tasks, transfers) "
                        "and none can move to the %s tier; %llu more bytes are needed", w->name,
                        upper, (unsigned long long)w->mem_used, (unsigned long long)w->mem_limit,
                        lower, (unsigned long long)need);
}

void gs__wspill_maybe(gs_worker_t *w)
{
    struct gs_wspill *sp = w->spill;
    uint64_t stamp;
    if (sp == NULL || !sp->enabled) return;
    /* half way to the target: the host pool starts page-locking for the coming spills */
    if (sp->pool != NULL && !sp->pool_hinted && sp->lru.next != &sp->lru &&
        (double)w->mem_used > 0.5 * sp->target * (double)w->mem_limit) {
        sp->pool_hinted = 1;
        gs__wspill_host_hint(w, GS_WSPILL_CHUNK(sp->lru.next));
    }
    /* host tier above its threshold: host copies cascade to disk, down to its target */
    if (sp->host_tier && sp->dir != NULL &&
        (double)(w->st.host_used + sp->writing - sp->hwriting) >
            sp->threshold * (double)sp->host_limit) {
        stamp = w->admit_epoch + w->st.tasks_done + w->st.tasks_failed + w->st.served;
        if (stamp != sp->hidle_stamp || sp->nhwrites > 0) {
            (void)gs__wspill_cascade(w, 0, (uint64_t)(sp->target * (double)sp->host_limit));
            sp->hidle_stamp = stamp;
        }
    }
    if ((double)(w->mem_used - sp->writing) <= sp->threshold * (double)w->mem_limit) return;
    /* a scan that moved nothing is repeated only once something changed */
    stamp = w->admit_epoch + w->st.tasks_done + w->st.tasks_failed + w->st.served;
    if (stamp == sp->idle_stamp && sp->nwrites == 0) return;
    (void)gs__wspill_make_room(w, 0, (uint64_t)(sp->target * (double)w->mem_limit));
    sp->idle_stamp = stamp;
}

#define GS_WSPILL_PREFETCH_SCAN 64     /* queued tasks looked at per call */

void gs__wspill_prefetch(gs_worker_t *w)
{
    struct gs_wspill *sp = w->spill;
    uint64_t room;
    int n = 0;

    if (sp == NULL || !sp->enabled || (gs__wspill_lower_used(w) == 0 && w->st.disk_used == 0))
        return;
    room = (uint64_t)(sp->threshold * (double)w->mem_limit);
    for (gs_wlink_t *e = w->admit_q.next; e != &w->admit_q && n < GS_WSPILL_PREFETCH_SCAN;
         e = e->next, n++) {
        gs_wtask_t *t = GS_WCONTAINER(e, gs_wtask_t, link);
        for (uint32_t i = 0; i < t->ndeps; i++) {
            gs_wchunk_t *c = gs__wstore_find(w, t->deps[i].graph, t->deps[i].task);
            if (c == NULL || c->state != GS_WCHUNK_READY || c->sp.tier == GS_WTIER_MEM ||
                c->sp.io != GS_WSPILL_IO_NONE)
                continue;
            if (w->mem_used + c->nbytes > room) return;      /* bounded by the threshold */
            if (gs__wspill_load(w, c) != GS_OK) return;      /* admission will retry it */
            w->st.prefetches++;
        }
    }
}

uint64_t gs__wspill_pause_cap(const gs_worker_t *w)
{
    double pause = w->spill ? w->spill->pause : GS_WSPILL_DEFAULT_PAUSE;
    return (uint64_t)(pause * (double)w->mem_limit);
}

int gs__wspill_busy(const gs_worker_t *w)
{
    return w->spill != NULL && w->spill->nio > 0;
}

const char *gs__wspill_last_error(const gs_worker_t *w)
{
    return w->spill ? w->spill->err : "";
}

/* ---------------------------------------------------------------- directory, configuration */

static gs_status_t gs__wspill_fraction(const char *what, double v, double dflt, double *out_p)
{
    if (v == 0) v = dflt;
    if (!(v > 0 && v <= 1))
        return gs_error_set(GS_ERR_INVALID_PARAM, "%s %g is not a fraction in (0, 1]", what, v);
    *out_p = v;
    return GS_OK;
}

#define GS_WSPILL_PREFIX "gsched-worker-"
#define GS_WSPILL_STALE_S 10           /* younger directories may be a worker starting */

/* Delete the files of directory @a path (one level: the spill files) and the directory. */
static void gs__wspill_rmdir(const char *path, size_t len)
{
    char sub[PATH_MAX + 32];
    struct dirent *de;
    DIR *d = opendir(path);
    if (d != NULL) {
        memcpy(sub, path, len);
        sub[len] = '/';
        while ((de = readdir(d)) != NULL) {
            size_t n = strlen(de->d_name);
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
            if (len + 2 + n > sizeof(sub)) continue;
            memcpy(sub + len + 1, de->d_name, n + 1);
            if (unlink(sub) != 0) GS_LOG_WARN("deleting %s: %s", sub, strerror(errno));
        }
        closedir(d);
    }
    if (rmdir(path) != 0 && errno != ENOENT)
        GS_LOG_WARN("removing the local directory %s: %s", path, strerror(errno));
}

/* Remove the directories of workers that died without cleaning up (killed, crashed): those
 * whose lock nobody holds, older than GS_WSPILL_STALE_S (a worker takes its lock right after
 * creating its directory). Like Dask's WorkSpace purge. */
static void gs__wspill_purge_stale(const char *base, size_t blen)
{
    char path[PATH_MAX + 32];
    struct dirent *de;
    DIR *d = opendir(base);
    time_t now = time(NULL);
    if (d == NULL) return;
    memcpy(path, base, blen);
    path[blen] = '/';
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        struct stat stt;
        int fd;
        if (strncmp(de->d_name, GS_WSPILL_PREFIX, sizeof(GS_WSPILL_PREFIX) - 1) != 0) continue;
        if (blen + 2 + n > PATH_MAX) continue;
        memcpy(path + blen + 1, de->d_name, n + 1);
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) continue;
        if (fstat(fd, &stt) == 0 && stt.st_uid == geteuid() &&
            now - stt.st_mtime >= GS_WSPILL_STALE_S && flock(fd, LOCK_EX | LOCK_NB) == 0) {
            GS_LOG_INFO("removing the stale local directory %s (its worker is gone)", path);
            gs__wspill_rmdir(path, blen + 1 + n);
        }
        close(fd);
    }
    closedir(d);
}

static gs_status_t gs__wspill_mkdir(gs_worker_t *w, struct gs_wspill *sp, const char *base)
{
    static const char prefix[] = "/" GS_WSPILL_PREFIX;
    size_t blen = strlen(base), nlen = 0;
    char name[65];
    char *tmpl;

    /* the worker name, restricted to characters safe in a file name */
    for (const char *p = w->name; *p && nlen < sizeof(name) - 1; p++)
        name[nlen++] = (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
                               *p) != NULL) ? *p : '_';
    name[nlen] = '\0';
    while (blen > 1 && base[blen - 1] == '/') blen--;
    if (blen == 0 || blen + sizeof(prefix) + nlen + 8 >= PATH_MAX)
        return gs_error_set(GS_ERR_INVALID_PARAM, "local directory '%s' is empty or too long",
                            base);
    tmpl = gs_malloc(blen + sizeof(prefix) + nlen + 8, "spill directory");
    if (tmpl == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the local directory");
    memcpy(tmpl, base, blen);
    memcpy(tmpl + blen, prefix, sizeof(prefix) - 1);
    memcpy(tmpl + blen + sizeof(prefix) - 1, name, nlen);
    memcpy(tmpl + blen + sizeof(prefix) - 1 + nlen, "-XXXXXX", 8);
    if (mkdtemp(tmpl) == NULL) {
        int e = errno;
        gs_free(tmpl);
        return gs_error_set(GS_ERR_IO, "worker %s: cannot create a directory in the local "
                            "directory '%s' (--local-directory): %s", w->name, base, strerror(e));
    }
    sp->dir = tmpl;
    sp->dirlen = strlen(tmpl);
    sp->lock_fd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sp->lock_fd < 0 || flock(sp->lock_fd, LOCK_EX | LOCK_NB) != 0)
        GS_LOG_WARN("worker %s: cannot lock %s (%s): a later worker may take it for stale",
                    w->name, tmpl, strerror(errno));
    gs__wspill_purge_stale(base, blen);
    return GS_OK;
}

/* --local-directory, else $TMPDIR, else /tmp */
static const char *gs__wspill_base(const gs_worker_params_t *p)
{
    const char *base = p->local_directory;
    if (base == NULL || base[0] == '\0') base = getenv("TMPDIR");
    if (base == NULL || base[0] == '\0') base = "/tmp";
    return base;
}

gs_status_t gs__wspill_init(gs_worker_t *w, const gs_worker_params_t *p)
{
    struct gs_wspill *sp;
    gs_status_t st;

    sp = gs_calloc(1, sizeof(*sp), "spill state");
    if (sp == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory for the spill state");
    sp->lru.prev = sp->lru.next = &sp->lru;
    sp->hlru.hprev = sp->hlru.hnext = &sp->hlru;
    sp->lock_fd = -1;
    const int dev = w->streams_mode;
    if ((st = gs__wspill_fraction("spill_target", p->spill_target,
                                  dev ? GS_WSPILL_DEVICE_TARGET : GS_WSPILL_DEFAULT_TARGET,
                                  &sp->target)) != GS_OK ||
        (st = gs__wspill_fraction("spill_threshold", p->spill_threshold,
                                  dev ? GS_WSPILL_DEVICE_THRESHOLD : GS_WSPILL_DEFAULT_THRESHOLD,
                                  &sp->threshold)) != GS_OK ||
        (st = gs__wspill_fraction("spill_pause", p->spill_pause,
                                  dev ? GS_WSPILL_DEVICE_PAUSE : GS_WSPILL_DEFAULT_PAUSE,
                                  &sp->pause)) != GS_OK)
        goto err_free;
    if (sp->target > sp->threshold) {
        st = gs_error_set(GS_ERR_INVALID_PARAM, "spill_target %g is above spill_threshold %g",
                          sp->target, sp->threshold);
        goto err_free;
    }
    sp->disk_limit = p->disk_limit ? p->disk_limit : UINT64_MAX;
    sp->enabled = !p->no_spill && !w->streams_mode;
    w->spill = sp;
    if (w->streams_mode && !p->no_spill && w->ops->to_host != NULL && w->ops->to_device != NULL) {
        /* device memory spills to host memory (host.c) */
        if ((st = gs__wspill_host_init(w, p)) != GS_OK) goto err_free;
        /* and host memory to the local directory (cascade.c) */
        if ((st = gs__wspill_mkdir(w, sp, gs__wspill_base(p))) != GS_OK) {
            gs__wspill_host_cleanup(w);
            goto err_free;
        }
        sp->enabled = 1;
        GS_LOG_INFO("worker %s: spilling %s memory to host memory (at most %llu bytes) above "
                    "%.0f%% of its limit (down to %.0f%%), and host memory to %s above %.0f%% "
                    "of the host limit", w->name, w->ops->name,
                    (unsigned long long)sp->host_limit, sp->threshold * 100, sp->target * 100,
                    sp->dir, sp->threshold * 100);
    } else if (sp->enabled) {
        if ((st = gs__wspill_mkdir(w, sp, gs__wspill_base(p))) != GS_OK) goto err_free;
        GS_LOG_INFO("worker %s: spilling to %s above %.0f%% of the memory limit (down to "
                    "%.0f%%)", w->name, sp->dir, sp->threshold * 100, sp->target * 100);
    } else if (w->streams_mode && !p->no_spill) {
        GS_LOG_INFO("worker %s: device memory is not spilled (the %s backend cannot move "
                    "chunks to host memory)", w->name, w->ops->name);
    }
    w->st.disk_limit = sp->enabled && sp->dir != NULL ? sp->disk_limit : 0;
    return GS_OK;

err_free:
    w->spill = NULL;
    gs_free(sp);
    return st;
}

void gs__wspill_cleanup(gs_worker_t *w)
{
    struct gs_wspill *sp = w->spill;

    if (sp == NULL) return;
    gs_assert(sp->nio == 0);
    gs__wspill_host_cleanup(w);
    if (sp->dir != NULL) gs__wspill_rmdir(sp->dir, sp->dirlen);
    if (sp->lock_fd >= 0) close(sp->lock_fd);
    gs_free(sp->dir);
    gs_free(sp);
    w->spill = NULL;
}
