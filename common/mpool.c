/* Fixed-size object pool: see mpool.h. A slab is one gs_malloc block: a header word (the next
 * slab) padded to the alignment, then per_slab objects. */
#include "common/mpool.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"

#include <string.h>

/* Under AddressSanitizer a free object is poisoned (but its link word), so a use after
 * gs_mpool_put is reported as it would be after free(). */
#if defined(__SANITIZE_ADDRESS__)
#define GS__MPOOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS__MPOOL_ASAN 1
#endif
#endif
#ifdef GS__MPOOL_ASAN
#include <sanitizer/asan_interface.h>
#define GS__MPOOL_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define GS__MPOOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define GS__MPOOL_POISON(p, n) ((void)(p), (void)(n))
#define GS__MPOOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

gs_status_t gs_mpool_init(gs_mpool_t *mp, size_t obj_size, size_t align, size_t per_slab,
                          const char *what)
{
    if (mp == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "mpool init: pool is NULL");
    memset(mp, 0, sizeof(*mp));
    if (align == 0) align = sizeof(void *);
    if (obj_size == 0 || (align & (align - 1)) != 0 || align > 4096 || per_slab == 0 ||
        per_slab > (1u << 20))
        return gs_error_set(GS_ERR_INVALID_PARAM,
                            "mpool init (%s): bad object size %zu, alignment %zu or slab count %zu",
                            what ? what : "pool", obj_size, align, per_slab);
    if (align < sizeof(void *)) align = sizeof(void *);
    if (obj_size > SIZE_MAX / 2) return gs_error_set(GS_ERR_INVALID_PARAM, "mpool init: size too large");
    mp->obj_size = (obj_size + align - 1) & ~(align - 1);
    mp->align = align;
    mp->per_slab = per_slab;
    mp->what = what ? what : "pool";
    return GS_OK;
}

void gs_mpool_cleanup(gs_mpool_t *mp)
{
    if (mp == NULL) return;
    while (mp->slabs != NULL) {
        void *next;
        memcpy(&next, mp->slabs, sizeof(next));
        gs_free(mp->slabs);
        mp->slabs = next;
    }
    mp->free = NULL;
    mp->nslabs = 0;
    mp->nlive = 0;
}

static int gs__mpool_grow(gs_mpool_t *mp)
{
    size_t head = mp->align, total;
    char *slab, *base;
    if (mp->obj_size > (SIZE_MAX - 2 * head) / mp->per_slab) return -1;
    total = head * 2 + mp->obj_size * mp->per_slab;   /* header + slack to align the objects */
    slab = gs_malloc(total, mp->what);
    if (slab == NULL) return -1;
    memcpy(slab, &mp->slabs, sizeof(void *));
    mp->slabs = slab;
    mp->nslabs++;
    base = (char *)(((uintptr_t)slab + sizeof(void *) + head - 1) & ~(uintptr_t)(head - 1));
    /* thread the objects in address order, so a fresh slab is handed out sequentially */
    for (size_t i = mp->per_slab; i-- > 0;) {
        void *obj = base + i * mp->obj_size;
        memcpy(obj, &mp->free, sizeof(void *));
        mp->free = obj;
        GS__MPOOL_POISON((char *)obj + sizeof(void *), mp->obj_size - sizeof(void *));
    }
    return 0;
}

void *gs_mpool_get(gs_mpool_t *mp)
{
    void *obj;
    if (mp->free == NULL && gs__mpool_grow(mp) != 0) return NULL;
    obj = mp->free;
    memcpy(&mp->free, obj, sizeof(void *));
    GS__MPOOL_UNPOISON(obj, mp->obj_size);
    /* objects come back in whatever order their users freed them (a graph's chunks: hash
     * order), so the next one is likely cold: start loading it now, for the next get */
    if (mp->free != NULL) __builtin_prefetch(mp->free, 1);
    mp->nlive++;
    return obj;
}

void gs_mpool_put(gs_mpool_t *mp, void *obj)
{
    if (obj == NULL) return;
    gs_assert_always(mp->nlive > 0);
    memcpy(obj, &mp->free, sizeof(void *));
    GS__MPOOL_POISON((char *)obj + sizeof(void *), mp->obj_size - sizeof(void *));
    mp->free = obj;
    mp->nlive--;
}
