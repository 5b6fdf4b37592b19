#include "common/idtab.h"

#include "common/alloc.h"

#include <string.h>

#define GS_IDTAB_MASK ((uint64_t)GS_IDTAB_PAGE - 1)

void gs_idtab_init(gs_idtab_t *t)
{
    memset(t, 0, sizeof(*t));
    gs_u64map_init(&t->sparse);
}

void gs_idtab_cleanup(gs_idtab_t *t)
{
    for (size_t i = 0; i < t->ndir; i++) gs_free(t->dir[i]);
    gs_free(t->dir);
    gs_free(t->spare);
    gs_u64map_cleanup(&t->sparse);
    gs_idtab_init(t);
}

/* The page for page index @a pi, allocated (and the directory grown) when the bounds of
 * idtab.h allow it; NULL when the id belongs in the map, or on allocation failure (*nomem_p 1). */
static gs_idtab_page_t *gs__idtab_page(gs_idtab_t *t, uint64_t pi, int *nomem_p)
{
    gs_idtab_page_t *pg;

    *nomem_p = 0;
    if (pi < t->ndir && t->dir[pi] != NULL) return t->dir[pi];
    if (t->npages >= GS_IDTAB_PAGES_BASE + t->len / 32) return NULL;
    if (pi >= t->ndir) {
        uint64_t limit = GS_IDTAB_DIR_BASE + t->ninserts / 4, n;
        gs_idtab_page_t **dir;
        if (pi >= limit) return NULL;
        n = t->ndir ? (uint64_t)t->ndir * 2 : 64;
        if (n < pi + 1) n = pi + 1;
        if (n > limit) n = limit;
        dir = gs_realloc(t->dir, gs_size_mul((size_t)n, sizeof(*dir)), "idtab directory");
        if (dir == NULL) {
            *nomem_p = 1;
            return NULL;
        }
        memset(dir + t->ndir, 0, ((size_t)n - t->ndir) * sizeof(*dir));
        t->dir = dir;
        t->ndir = (size_t)n;
    }
    if (t->spare != NULL) {           /* emptied earlier: all slots NULL already */
        pg = t->spare;
        t->spare = NULL;
    } else {
        pg = gs_calloc(1, sizeof(*pg), "idtab page");
        if (pg == NULL) {
            *nomem_p = 1;
            return NULL;
        }
    }
    t->dir[pi] = pg;
    t->npages++;
    return pg;
}

gs_status_t gs_idtab_swap(gs_idtab_t *t, uint64_t id, void *p, void **old_p)
{
    gs_idtab_page_t *pg;
    void **s, *old;
    int nomem;

    if (p == NULL || id >= GS_U64MAP_TOMB) return GS_ERR_INVALID_PARAM;
    if (t->sparse.len != 0) {
        uint64_t v;
        if (gs_u64map_get(&t->sparse, id, &v)) {
            (void)gs_u64map_put(&t->sparse, id, (uint64_t)(uintptr_t)p);  /* overwrites */
            if (old_p != NULL) *old_p = (void *)(uintptr_t)v;
            return GS_OK;
        }
    }
    pg = gs__idtab_page(t, id >> GS_IDTAB_PAGE_BITS, &nomem);
    if (pg == NULL) {
        gs_status_t status;
        if (nomem) return GS_ERR_NO_MEMORY;
        status = gs_u64map_put(&t->sparse, id, (uint64_t)(uintptr_t)p);
        if (status != GS_OK) return status;
        t->len++;
        t->ninserts++;
        if (old_p != NULL) *old_p = NULL;
        return GS_OK;
    }
    s = &pg->slot[id & GS_IDTAB_MASK];
    old = *s;
    *s = p;
    if (old == NULL) {
        pg->n++;
        t->len++;
        t->ninserts++;
    }
    if (old_p != NULL) *old_p = old;
    return GS_OK;
}

/* Clear slot @a s of page index @a pi (holding an entry). */
static void gs__idtab_clear(gs_idtab_t *t, uint64_t pi, void **s)
{
    gs_idtab_page_t *pg = t->dir[pi];
    *s = NULL;
    t->len--;
    if (--pg->n != 0) return;
    t->dir[pi] = NULL;
    t->npages--;
    /* keep one empty page: ids inserted and removed one at a time across a page boundary
     * would otherwise allocate and free a page each time */
    if (t->spare == NULL) t->spare = pg;
    else gs_free(pg);
}

void *gs_idtab_del(gs_idtab_t *t, uint64_t id)
{
    uint64_t pi = id >> GS_IDTAB_PAGE_BITS, v;

    if (pi < t->ndir && t->dir[pi] != NULL) {
        void **s = &t->dir[pi]->slot[id & GS_IDTAB_MASK], *old = *s;
        if (old != NULL) {
            gs__idtab_clear(t, pi, s);
            return old;
        }
    }
    if (t->sparse.len != 0 && gs_u64map_get(&t->sparse, id, &v)) {
        (void)gs_u64map_del(&t->sparse, id);
        t->len--;
        return (void *)(uintptr_t)v;
    }
    return NULL;
}

int gs_idtab_del_if(gs_idtab_t *t, uint64_t id, void *p)
{
    uint64_t pi = id >> GS_IDTAB_PAGE_BITS;

    if (p == NULL) return 0;
    if (pi < t->ndir && t->dir[pi] != NULL) {
        void **s = &t->dir[pi]->slot[id & GS_IDTAB_MASK];
        if (*s == p) {
            gs__idtab_clear(t, pi, s);
            return 1;
        }
    }
    if (t->sparse.len != 0 && gs_u64map_del_if(&t->sparse, id, (uint64_t)(uintptr_t)p)) {
        t->len--;
        return 1;
    }
    return 0;
}

int gs_idtab_next(const gs_idtab_t *t, gs_idtab_iter_t *it, uint64_t *id_p, void **p_p)
{
    if (!it->in_map) {
        size_t i = it->i;
        while ((i >> GS_IDTAB_PAGE_BITS) < t->ndir) {
            const gs_idtab_page_t *pg = t->dir[i >> GS_IDTAB_PAGE_BITS];
            void *p;
            if (pg == NULL) {
                i = ((i >> GS_IDTAB_PAGE_BITS) + 1) << GS_IDTAB_PAGE_BITS;
                continue;
            }
            p = pg->slot[i & GS_IDTAB_MASK];
            i++;
            if (p != NULL) {
                it->i = i;
                if (id_p != NULL) *id_p = i - 1;
                if (p_p != NULL) *p_p = p;
                return 1;
            }
        }
        it->in_map = 1;
        it->i = 0;
    }
    while (it->i < t->sparse.cap) {
        size_t k = it->i++;
        if (t->sparse.keys[k] >= GS_U64MAP_TOMB) continue;
        if (id_p != NULL) *id_p = t->sparse.keys[k];
        if (p_p != NULL) *p_p = (void *)(uintptr_t)t->sparse.vals[k];
        return 1;
    }
    return 0;
}
