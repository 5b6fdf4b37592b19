/* Fixed-size object pool (free list over slabs, the UCX/nginx model): objects of one size for a
 * hot path that would otherwise call malloc/free once per object (per-task chunk headers and
 * tiny chunk outputs). Slabs are allocated through gs_malloc as the pool grows and returned only
 * by gs_mpool_cleanup: the pool keeps its peak (objects in use at once x object size); put()
 * and get() of a warm pool touch no allocator. Not thread-safe: callers that share a pool
 * between threads hold their own lock. */
#ifndef GS_COMMON_MPOOL_H
#define GS_COMMON_MPOOL_H

#include <gsched/status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct gs_mpool {
    void *free;          /* free objects, linked through their first word */
    void *slabs;         /* slabs, linked through their first word */
    size_t obj_size;     /* bytes per object (a multiple of align, at least a pointer) */
    size_t align;        /* each object's alignment (power of two) */
    size_t per_slab;     /* objects per slab */
    size_t nslabs;
    size_t nlive;        /* objects handed out and not yet put back */
    const char *what;    /* static name for allocation logs */
} gs_mpool_t;

#ifdef __cplusplus
extern "C" {
#endif

/** Initialise @a mp for objects of @a obj_size bytes aligned to @a align (a power of two, at
 *  most 4096; 0 means the alignment of a pointer), @a per_slab objects per slab (1 .. 1048576).
 *  Allocates nothing. @a what must be a static string. GS_ERR_INVALID_PARAM for a zero size, a
 *  bad alignment or slab count (the pool is then unusable). */
gs_status_t gs_mpool_init(gs_mpool_t *mp, size_t obj_size, size_t align, size_t per_slab,
                          const char *what);
/** Free every slab. Objects still handed out become invalid; the pool must be re-initialised
 *  before reuse. NULL is fine. */
void gs_mpool_cleanup(gs_mpool_t *mp);
/** An object of the pool's size (contents undefined), or NULL when a new slab cannot be
 *  allocated (the pool is unchanged). The caller returns it with gs_mpool_put. */
void *gs_mpool_get(gs_mpool_t *mp);
/** Return @a obj (from gs_mpool_get of this pool) for reuse. NULL is fine. */
void gs_mpool_put(gs_mpool_t *mp, void *obj);

#ifdef __cplusplus
}
#endif
#endif
