/* worker/spill internals: the tiers' state (w->spill) shared by spill.c (policy, LRU,
 * directory) and disk.c (file operations on libuv's thread pool). */
#ifndef GS_WORKER_SPILL_INT_H
#define GS_WORKER_SPILL_INT_H

#include "worker/spill/spill.h"
#include "worker/worker_int.h"

#define GS_WSPILL_MAX_WRITES 8         /* writes in flight at once */

struct gs_wspill {
    int enabled;
    double target, threshold, pause;   /* fractions of the memory limit */
    char *dir;                         /* our subdirectory (gs_malloc'd), NULL when off */
    size_t dirlen;
    int lock_fd;                       /* the directory, flock()ed while we use it; -1: none */
    uint64_t disk_limit;               /* UINT64_MAX: the file system's room */
    uint64_t writing;                  /* bytes of writes in flight (still in memory) */
    uint64_t next_file;
    int nwrites;                       /* writes in flight */
    int nio;                           /* file operations in flight (any kind) */
    gs_wspill_chunk_t lru;             /* sentinel: least recently used first */
    int full;                          /* a write failed: no more writes until a file goes */
    uint64_t idle_stamp;               /* gs__wspill_maybe: state of its last fruitless scan */
    gs_status_t err_status;            /* of the last disk-tier failure */
    char err[GS_W_ERRLEN];             /* last disk-tier failure, "" after a success */
    /* host tier (streams mode; host.c): the lower tier is host memory, not the directory */
    int host_tier;
    uint64_t host_limit;               /* bytes of host copies */
    gs_chunkops_stream_h down, up;     /* tier moves device -> host, host -> device (one
                                          stream, i.e. one copy engine, per direction) */
    gs_chunkops_stream_h staged;       /* moves of pageable host copies (both directions) */
    struct gs_whpool *pool;            /* page-locked host copies (hpool.c), NULL when off */
    uint64_t pageable;                 /* bytes of host copies outside the pool (fallback) */
    uint64_t pageable_copies, pageable_bytes;   /* of those ever started (logged at exit) */
    int pool_warned;                   /* the pool's cap was logged */
    int pool_hinted;                   /* the pool was told the first chunks' size */
    /* disk below the host tier (cascade.c) */
    gs_wspill_chunk_t hlru;            /* sentinel: chunks with a host copy, least recent first */
    uint64_t hwriting;                 /* bytes of host copies being written to files */
    int nhwrites;                      /* those writes */
    int dfull;                         /* one failed: no more until a file goes */
    gs_status_t derr_status;           /* of the last host -> disk failure */
    char derr[GS_W_ERRLEN];            /* its message (kept while dfull) */
    uint64_t hidle_stamp;              /* gs__wspill_maybe: its last host-tier scan */
};

/* Host pool (hpool.c): page-locked memory for host copies, recycled. Slabs of the backend's
 * host_alloc (gs_malloc without one), made by threads of the pool's own so the loop never
 * waits for page-locking; each slab carved into pieces of one size class (n rounded up to
 * m * 2^k, 8 <= m <= 15, at least 256 bytes). @a limit caps the slabs' bytes; @a ahead is the
 * free bytes the threads keep per class in demand (of a class, at most 1024 pieces unless that
 * is under 1 MiB). create: GS_ERR_NO_MEMORY / GS_ERR_NO_RESOURCE (message set), or GS_OK and
 * *pool_p. destroy: joins the threads and frees every slab (no piece may be in use by a copy
 * in flight). take: a free piece of at least @a nbytes, or NULL at once (none free yet: the
 * threads make more, up to the limit); give it back with the same @a nbytes. hint: start
 * growing the class of @a nbytes before the first take. stats: slab bytes, free piece bytes,
 * seconds the threads spent allocating, whether an allocation failed (no more growth).
 * All on the loop thread. */
typedef struct gs_whpool gs_whpool_t;
gs_status_t gs__whpool_create(gs_worker_t *w, uint64_t limit, uint64_t ahead,
                              gs_whpool_t **pool_p);
void gs__whpool_destroy(gs_whpool_t *pool);
void *gs__whpool_take(gs_whpool_t *pool, uint64_t nbytes);
void gs__whpool_give(gs_whpool_t *pool, void *piece, uint64_t nbytes);
void gs__whpool_hint(gs_whpool_t *pool, uint64_t nbytes);
/* The loop holds @a outside bytes of host copies outside the pool: slabs grow only into
 * limit - outside (host copies never exceed the limit; free pieces made before a pageable copy
 * may come on top, at most the ahead part). */
void gs__whpool_set_pageable(gs_whpool_t *pool, uint64_t outside);
void gs__whpool_stats(gs_whpool_t *pool, uint64_t *total_p, uint64_t *free_p, uint64_t *grow_ns_p,
                      int *capped_p);
/* host.c: free @a c's host copy (a pool piece or a pageable copy). */
void gs__wspill_host_release(gs_worker_t *w, gs_wchunk_t *c);
/* host.c: the device tier is filling: let the pool start growing for chunks like @a c. */
void gs__wspill_host_hint(gs_worker_t *w, const gs_wchunk_t *c);

/* Bytes on the lower tier and its limit. */
static inline uint64_t gs__wspill_lower_used(const gs_worker_t *w)
{
    return w->spill->host_tier ? w->st.host_used : w->st.disk_used;
}
static inline uint64_t gs__wspill_lower_limit(const gs_worker_t *w)
{
    return w->spill->host_tier ? w->spill->host_limit : w->spill->disk_limit;
}
/* @a c has a valid copy on the lower tier (a file or a host copy). */
static inline int gs__wspill_has_copy(const gs_wchunk_t *c)
{
    return c->sp.file != 0 || c->sp.host != NULL;
}

/* "<dir>/<file>.chunk" into @a buf (at least dirlen + 32 bytes). */
void gs__wspill_path(const struct gs_wspill *sp, uint64_t file, char *buf);
/* disk.c: start writing @a c (in memory, unpinned) to a new file. GS_OK or an error (nothing
 * started, message set). */
gs_status_t gs__wspill_write(gs_worker_t *w, gs_wchunk_t *c);
/* disk.c: delete file @a file off the loop (synchronously once the worker is stopping). */
void gs__wspill_unlink(gs_worker_t *w, uint64_t file);
/* disk.c: read @a c's file into its memory (allocated, io READ); the file stays. */
gs_status_t gs__wspill_load_start(gs_worker_t *w, gs_wchunk_t *c);
/* host.c: the host tier of a streams-mode worker: set up (its stream), tear down; copy @a c
 * to a new host copy (as gs__wspill_write); copy its host copy back into its memory (as
 * gs__wspill_load_start); GS_OK or an error (nothing started, message set). */
gs_status_t gs__wspill_host_init(gs_worker_t *w, const struct gs_worker_params *p);
void gs__wspill_host_cleanup(gs_worker_t *w);
gs_status_t gs__wspill_host_write(gs_worker_t *w, gs_wchunk_t *c);
gs_status_t gs__wspill_host_load(gs_worker_t *w, gs_wchunk_t *c);
/* (exec.c's drain hands GS_WNOTE_TIER notes to gs__wspill_note, worker_int.h; peers and
 * gsched read host copies through gs__wspill_read, a memcpy on the thread pool: disk.c) */
/* host.c: a new host copy of @a nbytes (a pool piece, *pooled_p = 1, or pageable memory,
 * counted in sp->pageable), or NULL with the error set; free it with gs__wspill_host_free. */
void *gs__wspill_host_alloc(gs_worker_t *w, uint64_t nbytes, int *pooled_p);
void gs__wspill_host_free(gs_worker_t *w, void *host, int pooled, uint64_t nbytes);
/* cascade.c: @a c got a host copy (c->sp.host): it may go to disk, after older ones. */
void gs__wspill_hlru_add(gs_worker_t *w, gs_wchunk_t *c);
/* cascade.c: free @a c's host copy (not in use) and its share of host_used. */
void gs__wspill_host_drop(gs_worker_t *w, gs_wchunk_t *c);
/* cascade.c: move host copies to disk until @a need more bytes fit under @a cap on the host
 * tier (host copies, device -> host moves in flight, less host -> disk writes in flight).
 * GS_OK: they fit now; GS_INPROGRESS: writes in flight (a pump follows); otherwise an error
 * naming the worker, the disk tier, the sizes and the limit (message set). */
gs_status_t gs__wspill_cascade(gs_worker_t *w, uint64_t need, uint64_t cap);
/* disk.c: write @a c's host copy to a new file (hio set). GS_OK or an error (nothing started). */
gs_status_t gs__wspill_host_to_file(gs_worker_t *w, gs_wchunk_t *c);
/* cascade.c: that write finished. */
void gs__wspill_cascaded(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, uint64_t ns);
/* cascade.c: bring @a c (tier DISK, its device memory allocated, io READ) back through a new
 * host copy: read the file into it, then copy it to the device (gs__wspill_loaded follows). */
gs_status_t gs__wspill_disk_load(gs_worker_t *w, gs_wchunk_t *c);
/* disk.c: read @a c's file into its host copy (c->sp.host); gs__wspill_disk_loaded follows. */
gs_status_t gs__wspill_file_to_host(gs_worker_t *w, gs_wchunk_t *c);
void gs__wspill_disk_loaded(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, uint64_t ns);
/* spill.c: a load finished (status, message set on failure). */
void gs__wspill_loaded(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, uint64_t ns);
/* spill.c: a write finished (status, message set on failure). */
void gs__wspill_written(gs_worker_t *w, gs_wchunk_t *c, gs_status_t status, uint64_t ns);
/* spill.c: free @a c's memory (it has a valid file). */
void gs__wspill_evict(gs_worker_t *w, gs_wchunk_t *c);

#endif
