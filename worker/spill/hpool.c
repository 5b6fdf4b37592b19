/* worker/spill: the host tier's recycled pool of page-locked memory (spill_int.h, "Host
 * pool"). Slabs come from the backend's host_alloc (cudaHostAlloc for "cuda"; gs_malloc where
 * the backend has none, e.g. "cpu" in tests), each carved into equal pieces of one size class;
 * a piece holds one chunk's host copy and goes back to its class's free list when the copy is
 * freed. Slabs are returned only when the pool is destroyed.
 *
 * Page-locking is slow (cudaHostAlloc faults in and pins every page: a few GB/s) and would
 * stall the loop, so slabs are made by grower threads of the pool's own (4): the loop asks for
 * a class (take, hint) and the threads keep up to `ahead` bytes (at most 1024 pieces) of free
 * pieces of the classes asked for, the pool's total never above its limit. A take that finds
 * no free piece returns NULL at once (the caller falls back to a pageable copy) and wakes the
 * threads.
 *
 * $GSCHED_HOST_POOL picks how a slab is page-locked: "register" (default: anonymous memory
 * with transparent huge pages, faulted in by the grower, then the backend's host_register,
 * cudaHostRegister) or "alloc" (the backend's host_alloc, cudaHostAlloc). On one H100 host
 * (docs/PERFORMANCE.md, session 6) register page-locked 27.9 GB in 7.8 thread-s and the spill
 * benchmark ran at 24.8 GB/s; alloc took 26.5 thread-s for 28.6 GB and the benchmark 2.4 GB/s
 * (its threads fell behind and the spills went pageable). bench/gpu-session.sh spill runs both.
 *
 * Threads: create, destroy, take, give, hint and stats on the loop thread; the grower threads
 * touch only the fields under `lock`. */
#include "worker/spill/spill_int.h"

#include "common/time.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define GS_WHPOOL_SLAB ((uint64_t)128 << 20)   /* bytes of one slab, at most (one class) */
#define GS_WHPOOL_MIN_CLASS ((uint64_t)256)
#define GS_WHPOOL_MAX_CLASSES 256
#define GS_WHPOOL_AHEAD_PIECES 1024              /* per class at most, at least 1 MiB */
#define GS_WHPOOL_THREADS 4                    /* growers: page-locking runs in parallel */

typedef struct gs_whpool_piece {
    struct gs_whpool_piece *next;      /* in the free piece itself (host memory of ours) */
} gs_whpool_piece_t;

typedef struct gs_whpool_class {
    uint64_t size;                     /* bytes of each piece */
    gs_whpool_piece_t *free;
    uint64_t nfree;
    uint64_t growing;                  /* bytes of its slabs being made */
    int wanted;                        /* the loop asked for it: the growers keep it ahead */
} gs_whpool_class_t;

typedef struct gs_whpool_slab {
    void *ptr;
    uint64_t bytes;
} gs_whpool_slab_t;

struct gs_whpool {
    gs_worker_t *w;
    uint64_t limit;                    /* bytes of slabs, at most */
    uint64_t ahead;                    /* free bytes the grower keeps per wanted class */
    uv_mutex_t lock;
    uv_cond_t cond;
    uv_thread_t threads[GS_WHPOOL_THREADS];
    int nthreads;
    int quit;
    int capped;                        /* an allocation failed: no more slabs */
    uint64_t total;                    /* bytes of slabs (also those being made) */
    uint64_t outside;                  /* bytes the loop holds outside (pageable copies):
                                          the slabs grow only into limit - outside */
    uint64_t grow_ns;                  /* time spent making slabs, summed over the growers */
    uint64_t nslabs;
    int mapped;                        /* slabs are mmap'd + host_register'd (GSCHED_HOST_POOL=
                                          register), not host_alloc'd */
    gs_whpool_slab_t *slabs;           /* made so far (gs_malloc'd array, nslabs_cap) */
    uint64_t nslabs_cap;
    int nclasses;
    gs_whpool_class_t classes[GS_WHPOOL_MAX_CLASSES];
};

/* Size class of @a n: rounded up to m * 2^k with 8 <= m <= 15 (at most 1/8 wasted), at least
 * GS_WHPOOL_MIN_CLASS. */
static uint64_t gs__whpool_class_size(uint64_t n)
{
    uint64_t step = 1;
    if (n <= GS_WHPOOL_MIN_CLASS) return GS_WHPOOL_MIN_CLASS;
    while ((n >> 3) >= step * 2) step *= 2;    /* step = 2^floor(log2(n)) / 8 */
    return (n + step - 1) / step * step;
}

/* The class of @a size (lock held); NULL when every slot is taken. */
static gs_whpool_class_t *gs__whpool_class(gs_whpool_t *pool, uint64_t size, int create)
{
    for (int i = 0; i < pool->nclasses; i++)
        if (pool->classes[i].size == size) return &pool->classes[i];
    if (!create || pool->nclasses == GS_WHPOOL_MAX_CLASSES) return NULL;
    gs_whpool_class_t *k = &pool->classes[pool->nclasses++];
    memset(k, 0, sizeof(*k));
    k->size = size;
    return k;
}

/* Free bytes kept ahead for class @a k: the pool's ahead, at most 1024 pieces (small chunks
 * do not pin the whole ahead in tiny pieces), at least 1 MiB. */
static uint64_t gs__whpool_ahead(const gs_whpool_t *pool, const gs_whpool_class_t *k)
{
    uint64_t a = k->size * GS_WHPOOL_AHEAD_PIECES;
    if (a < ((uint64_t)1 << 20)) a = (uint64_t)1 << 20;
    return a < pool->ahead ? a : pool->ahead;
}

/* A wanted class below its ahead mark, if the limit leaves room for a piece (lock held). */
static gs_whpool_class_t *gs__whpool_short(gs_whpool_t *pool)
{
    if (pool->capped) return NULL;
    for (int i = 0; i < pool->nclasses; i++) {
        gs_whpool_class_t *k = &pool->classes[i];
        if (k->wanted && k->nfree * k->size + k->growing < gs__whpool_ahead(pool, k) &&
            pool->total + pool->outside + k->size <= pool->limit)
            return k;
    }
    return NULL;
}

/* One slab of @a bytes (a grower, lock not held). host_alloc (cudaHostAlloc: the driver
 * faults in and pins 4 KiB pages), or with `mapped` anonymous memory asking for transparent
 * huge pages, faulted in by this thread (growers fault in parallel), then host_register'd
 * (pinning 2 MiB pages); gs_malloc for a backend with neither. */
static gs_status_t gs__whpool_slab_alloc(gs_whpool_t *pool, uint64_t bytes, void **slab_p)
{
    gs_worker_t *w = pool->w;
    if (pool->mapped) {
        void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED) return GS_ERR_NO_MEMORY;
#ifdef MADV_HUGEPAGE
        (void)madvise(p, (size_t)bytes, MADV_HUGEPAGE);
#endif
        for (uint64_t off = 0; off < bytes; off += 4096) ((volatile char *)p)[off] = 0;
        if (w->ops->host_register != NULL &&
            w->ops->host_register(w->ctx, p, (size_t)bytes) != GS_OK) {
            munmap(p, (size_t)bytes);
            return GS_ERR_NO_MEMORY;
        }
        *slab_p = p;
        return GS_OK;
    }
    if (w->ops->host_alloc != NULL) return w->ops->host_alloc(w->ctx, (size_t)bytes, slab_p);
    return (*slab_p = gs_malloc((size_t)bytes, "host pool slab")) != NULL ? GS_OK
                                                                        : GS_ERR_NO_MEMORY;
}

static void gs__whpool_slab_free(gs_whpool_t *pool, const gs_whpool_slab_t *s)
{
    gs_worker_t *w = pool->w;
    if (pool->mapped) {
        if (w->ops->host_unregister != NULL) w->ops->host_unregister(w->ctx, s->ptr);
        munmap(s->ptr, (size_t)s->bytes);
    } else if (w->ops->host_alloc != NULL) {
        w->ops->host_free(w->ctx, s->ptr);
    } else {
        gs_free(s->ptr);
    }
}

static void gs__whpool_main(void *arg)
{
    gs_whpool_t *pool = arg;

    uv_mutex_lock(&pool->lock);
    for (;;) {
        gs_whpool_class_t *k;
        while (!pool->quit && (k = gs__whpool_short(pool)) == NULL)
            uv_cond_wait(&pool->cond, &pool->lock);
        if (pool->quit) break;
        uint64_t size = k->size, bytes = GS_WHPOOL_SLAB;
        if (bytes > pool->limit - pool->total - pool->outside)
            bytes = pool->limit - pool->total - pool->outside;
        if (bytes > gs__whpool_ahead(pool, k)) bytes = gs__whpool_ahead(pool, k);
        bytes = bytes / size * size;
        if (bytes == 0) bytes = size;          /* a class above ahead: one piece */
        if (pool->nslabs == pool->nslabs_cap) {
            uint64_t cap = pool->nslabs_cap ? 2 * pool->nslabs_cap : 64;
            gs_whpool_slab_t *s = gs_realloc(pool->slabs, cap * sizeof(*s), "host pool slabs");
            if (s == NULL) {
                pool->capped = 1;
                break;
            }
            pool->slabs = s;
            pool->nslabs_cap = cap;
        }
        pool->total += bytes;
        k->growing += bytes;
        uv_mutex_unlock(&pool->lock);

        void *slab = NULL;
        uint64_t t0 = gs_now_ns();
        gs_status_t st = gs__whpool_slab_alloc(pool, bytes, &slab);
        uint64_t ns = gs_now_ns() - t0;

        uv_mutex_lock(&pool->lock);
        pool->grow_ns += ns;
        k->growing -= bytes;
        if (st != GS_OK) {
            pool->total -= bytes;
            pool->capped = 1;   /* the loop logs it (stats): no message from this thread */
            continue;
        }
        pool->slabs[pool->nslabs].ptr = slab;
        pool->slabs[pool->nslabs++].bytes = bytes;
        /* k stays valid: classes are only appended to the fixed array */
        for (uint64_t off = 0; off + size <= bytes; off += size) {
            gs_whpool_piece_t *p = (gs_whpool_piece_t *)((char *)slab + off);
            p->next = k->free;
            k->free = p;
            k->nfree++;
        }
    }
    uv_mutex_unlock(&pool->lock);
}

/* End the growers (they finish the slab they are making). */
static void gs__whpool_stop(gs_whpool_t *pool)
{
    uv_mutex_lock(&pool->lock);
    pool->quit = 1;
    uv_cond_broadcast(&pool->cond);
    uv_mutex_unlock(&pool->lock);
    for (int i = 0; i < pool->nthreads; i++) uv_thread_join(&pool->threads[i]);
    pool->nthreads = 0;
}

gs_status_t gs__whpool_create(gs_worker_t *w, uint64_t limit, uint64_t ahead,
                              gs_whpool_t **pool_p)
{
    gs_whpool_t *pool = gs_calloc(1, sizeof(*pool), "host pool");
    const char *env;
    gs_status_t st;

    if (pool == NULL)
        return gs_error_set(GS_ERR_NO_MEMORY, "worker %s: out of memory for the host pool",
                            w->name);
    pool->w = w;
    pool->limit = limit;
    env = getenv("GSCHED_HOST_POOL");
    pool->mapped = 1;
    if (env != NULL && strcmp(env, "alloc") == 0) {
        pool->mapped = 0;
    } else if (env != NULL && env[0] != '\0' && strcmp(env, "register") != 0) {
        st = gs_error_set(GS_ERR_INVALID_PARAM, "worker %s: $GSCHED_HOST_POOL is '%s': "
                          "expected alloc or register", w->name, env);
        goto err_free;
    }
    pool->ahead = ahead ? ahead : GS_WHPOOL_SLAB;
    if (uv_mutex_init(&pool->lock) != 0) {
        st = gs_error_set(GS_ERR_NO_RESOURCE, "worker %s: host pool: uv_mutex_init failed",
                          w->name);
        goto err_free;
    }
    if (uv_cond_init(&pool->cond) != 0) {
        st = gs_error_set(GS_ERR_NO_RESOURCE, "worker %s: host pool: uv_cond_init failed",
                          w->name);
        goto err_mutex;
    }
    for (; pool->nthreads < GS_WHPOOL_THREADS; pool->nthreads++) {
        if (uv_thread_create(&pool->threads[pool->nthreads], gs__whpool_main, pool) != 0) {
            st = gs_error_set(GS_ERR_NO_RESOURCE, "worker %s: host pool: cannot start its "
                              "threads", w->name);
            goto err_threads;
        }
    }
    *pool_p = pool;
    return GS_OK;

err_threads:
    gs__whpool_stop(pool);
    uv_cond_destroy(&pool->cond);
err_mutex:
    uv_mutex_destroy(&pool->lock);
err_free:
    gs_free(pool);
    return st;
}

void gs__whpool_destroy(gs_whpool_t *pool)
{
    gs_worker_t *w;
    if (pool == NULL) return;
    w = pool->w;
    gs__whpool_stop(pool);
    if (pool->nslabs > 0)
        GS_LOG_INFO("worker %s: host pool: %.3f GB %s in %.3f thread-s", w->name,
                    (double)pool->total / 1e9,
                    pool->mapped ? "mapped and registered" : "allocated",
                    (double)pool->grow_ns / 1e9);
    for (uint64_t i = 0; i < pool->nslabs; i++) gs__whpool_slab_free(pool, &pool->slabs[i]);
    gs_free(pool->slabs);
    uv_cond_destroy(&pool->cond);
    uv_mutex_destroy(&pool->lock);
    gs_free(pool);
}

void *gs__whpool_take(gs_whpool_t *pool, uint64_t nbytes)
{
    gs_whpool_piece_t *p = NULL;
    gs_whpool_class_t *k;
    uv_mutex_lock(&pool->lock);
    k = gs__whpool_class(pool, gs__whpool_class_size(nbytes), 1);
    if (k != NULL) {
        if ((p = k->free) != NULL) {
            k->free = p->next;
            k->nfree--;
        }
        k->wanted = 1;
        if (k->nfree * k->size < gs__whpool_ahead(pool, k) && !pool->capped)
            uv_cond_broadcast(&pool->cond);
    }
    uv_mutex_unlock(&pool->lock);
    return p;
}

void gs__whpool_give(gs_whpool_t *pool, void *piece, uint64_t nbytes)
{
    gs_whpool_piece_t *p = piece;
    gs_whpool_class_t *k;
    uv_mutex_lock(&pool->lock);
    k = gs__whpool_class(pool, gs__whpool_class_size(nbytes), 0);
    gs_assert_always(k != NULL);        /* a piece of ours has its class */
    p->next = k->free;
    k->free = p;
    k->nfree++;
    uv_mutex_unlock(&pool->lock);
}

void gs__whpool_set_pageable(gs_whpool_t *pool, uint64_t outside)
{
    uv_mutex_lock(&pool->lock);
    pool->outside = outside;
    uv_mutex_unlock(&pool->lock);
}

void gs__whpool_hint(gs_whpool_t *pool, uint64_t nbytes)
{
    gs_whpool_class_t *k;
    uv_mutex_lock(&pool->lock);
    k = gs__whpool_class(pool, gs__whpool_class_size(nbytes), 1);
    if (k != NULL && !k->wanted) {
        k->wanted = 1;
        uv_cond_broadcast(&pool->cond);
    }
    uv_mutex_unlock(&pool->lock);
}

void gs__whpool_stats(gs_whpool_t *pool, uint64_t *total_p, uint64_t *free_p, uint64_t *grow_ns_p,
                      int *capped_p)
{
    uint64_t nfree = 0;
    uv_mutex_lock(&pool->lock);
    for (int i = 0; i < pool->nclasses; i++)
        nfree += pool->classes[i].nfree * pool->classes[i].size;
    *total_p = pool->total;
    *free_p = nfree;
    *grow_ns_p = pool->grow_ns;
    *capped_p = pool->capped;
    uv_mutex_unlock(&pool->lock);
}
