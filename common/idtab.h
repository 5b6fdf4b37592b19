/* Table from uint64_t ids to non-NULL pointers, built for ids that are mostly dense (the task
 * ids of one graph, 0..ntasks-1): pages of GS_IDTAB_PAGE slots indexed by the id, reached
 * through a directory, so a lookup or an insert is two array reads and no hashing or rehash.
 * Ids the pages should not cover go to a hash map (gs_u64map_t), so any id works and a sender
 * of far-apart ids cannot make the table allocate much: the directory covers at most
 * GS_IDTAB_DIR_BASE + (inserts so far) / 4 pages, and pages stay at most GS_IDTAB_PAGES_BASE +
 * len / 32 (a page is allocated for a first id in its range only within that bound, and is
 * freed when its last entry goes). Ids UINT64_MAX and UINT64_MAX - 1 are reserved (the map's).
 * Not thread-safe. */
#ifndef GS_COMMON_IDTAB_H
#define GS_COMMON_IDTAB_H

#include "common/hashmap.h"

#include <gsched/status.h>

#include <stddef.h>
#include <stdint.h>

#define GS_IDTAB_PAGE_BITS 9
#define GS_IDTAB_PAGE (1u << GS_IDTAB_PAGE_BITS)   /* slots per page (4 KiB of pointers) */
#define GS_IDTAB_DIR_BASE 1024                     /* pages the directory may always cover */
#define GS_IDTAB_PAGES_BASE 64                     /* pages that may always be allocated */

typedef struct gs_idtab_page {
    size_t n;                          /* non-NULL slots */
    void *slot[GS_IDTAB_PAGE];
} gs_idtab_page_t;

typedef struct gs_idtab {
    gs_idtab_page_t **dir;             /* [ndir]: page of ids [i * PAGE, (i + 1) * PAGE), or NULL */
    size_t ndir;
    size_t npages;                     /* pages in the directory */
    gs_idtab_page_t *spare;            /* one emptied page kept for reuse, or NULL */
    size_t len;                        /* entries, in pages and map */
    uint64_t ninserts;                 /* new entries ever (bounds the directory) */
    gs_u64map_t sparse;                /* the ids no page holds */
} gs_idtab_t;

/* Iteration cursor (gs_idtab_next); zero-initialise it (GS_IDTAB_ITER_INIT). */
typedef struct gs_idtab_iter {
    int in_map;
    size_t i;
} gs_idtab_iter_t;
#define GS_IDTAB_ITER_INIT {0, 0}

#ifdef __cplusplus
extern "C" {
#endif

/** Initialise an empty table (no allocation). */
void gs_idtab_init(gs_idtab_t *t);
/** Free the table's storage (not what the entries point to); empty and reusable afterwards. */
void gs_idtab_cleanup(gs_idtab_t *t);

/** The entry of @a id, or NULL. */
static inline void *gs_idtab_get(const gs_idtab_t *t, uint64_t id)
{
    uint64_t pi = id >> GS_IDTAB_PAGE_BITS;
    if (pi < t->ndir && t->dir[pi] != NULL) {
        void *p = t->dir[pi]->slot[id & (GS_IDTAB_PAGE - 1)];
        if (p != NULL) return p;
    }
    if (t->sparse.len != 0) {
        uint64_t v;
        if (gs_u64map_get(&t->sparse, id, &v)) return (void *)(uintptr_t)v;
    }
    return NULL;
}

/** Insert @a p (not NULL) as the entry of @a id, or replace the entry there; *old_p (may be
 *  NULL) gets the entry replaced, or NULL. GS_ERR_INVALID_PARAM for a reserved id or a NULL
 *  @a p, GS_ERR_NO_MEMORY when storage cannot grow (the table unchanged, nothing written). */
gs_status_t gs_idtab_swap(gs_idtab_t *t, uint64_t id, void *p, void **old_p);
/** Remove the entry of @a id; returns it, or NULL when there was none. Never allocates. */
void *gs_idtab_del(gs_idtab_t *t, uint64_t id);
/** Remove the entry of @a id when it is @a p; returns 1 when removed. Never allocates. */
int gs_idtab_del_if(gs_idtab_t *t, uint64_t id, void *p);
/** Next entry after @a it (ascending ids for the paged part, then the map's in no order): 1 and
 *  *id_p, *p_p (each may be NULL) set, or 0 at the end. Removing entries (any, the current one
 *  included) during an iteration is allowed; inserting is not. */
int gs_idtab_next(const gs_idtab_t *t, gs_idtab_iter_t *it, uint64_t *id_p, void **p_p);

#ifdef __cplusplus
}
#endif
#endif
