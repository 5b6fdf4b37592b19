/* Device-memory arena: a good-fit sub-allocator with coalescing over one device range.
 *
 * Blocks are runs of 256-byte units kept in address order (prev/next) so that a freed block
 * merges with free neighbours at once. Free blocks sit in segregated lists: sizes below 16
 * units have exact bins, larger sizes 4 bins per power of two (TLSF-style). An allocation
 * scans a few entries of its own bin (first fit), then takes the head of the next non-empty
 * larger bin, which always fits, found through a bitmap; only when that fails does it scan
 * its own bin to the end. All bookkeeping lives in host memory: nodes in one array indexed by
 * int32 (recycled through a free chain) and a hash map from block offset to node for free().
 */
#include "chunkops/cuda/cuda_internal.h"
#include "common/alloc.h"
#include "common/error.h"

#include <string.h>

#define GS__ARENA_SCAN 8 /* own-bin entries tried before moving to a larger bin */

static int gs__arena_bin(uint64_t units)
{
    if (units < 16) return (int)units;
    int fl = 63 - __builtin_clzll(units);
    int sl = (int)((units >> (fl - 2)) & 3);
    return 16 + (fl - 4) * 4 + sl;
}

static void gs__arena_bin_push(gs__cuda_arena_t *a, int32_t i)
{
    gs__arena_blk_t *b = &a->blk[i];
    int bin = gs__arena_bin(b->size);
    b->bin = bin;
    b->fprev = -1;
    b->fnext = a->heads[bin];
    if (b->fnext >= 0) a->blk[b->fnext].fprev = i;
    a->heads[bin] = i;
    a->bitmap[bin >> 6] |= (uint64_t)1 << (bin & 63);
}

static void gs__arena_bin_remove(gs__cuda_arena_t *a, int32_t i)
{
    gs__arena_blk_t *b = &a->blk[i];
    int bin = b->bin;
    if (b->fprev >= 0) a->blk[b->fprev].fnext = b->fnext;
    else a->heads[bin] = b->fnext;
    if (b->fnext >= 0) a->blk[b->fnext].fprev = b->fprev;
    if (a->heads[bin] < 0) a->bitmap[bin >> 6] &= ~((uint64_t)1 << (bin & 63));
    b->bin = -1;
    b->fprev = b->fnext = -1;
}

/* First non-empty bin >= @a from, or -1. */
static int gs__arena_find_bin(const gs__cuda_arena_t *a, int from)
{
    if (from >= GS__ARENA_NBINS) return -1;
    int w = from >> 6;
    uint64_t m = a->bitmap[w] & (~(uint64_t)0 << (from & 63));
    for (;;) {
        if (m != 0) return w * 64 + __builtin_ctzll(m);
        if (++w >= GS__ARENA_NBINS / 64) return -1;
        m = a->bitmap[w];
    }
}

/* Make sure one more node can be had without failing later. */
static gs_status_t gs__arena_reserve_node(gs__cuda_arena_t *a)
{
    if (a->recycled >= 0 || a->nblk < a->capblk) return GS_OK;
    int32_t ncap = a->capblk ? a->capblk * 2 : 64;
    if (a->capblk > INT32_MAX / 2) return GS_ERR_NO_MEMORY;
    gs__arena_blk_t *nb = gs_realloc(a->blk, gs_size_mul((size_t)ncap, sizeof(*nb)),
                                     "cuda arena nodes");
    if (nb == NULL) return GS_ERR_NO_MEMORY;
    a->blk = nb;
    a->capblk = ncap;
    return GS_OK;
}

static int32_t gs__arena_new_node(gs__cuda_arena_t *a)
{
    int32_t i;
    if (a->recycled >= 0) {
        i = a->recycled;
        a->recycled = a->blk[i].fnext;
    } else {
        i = a->nblk++;
    }
    memset(&a->blk[i], 0, sizeof(a->blk[i]));
    a->blk[i].prev = a->blk[i].next = a->blk[i].fprev = a->blk[i].fnext = -1;
    a->blk[i].bin = -1;
    return i;
}

static void gs__arena_drop_node(gs__cuda_arena_t *a, int32_t i)
{
    a->blk[i].size = 0;
    a->blk[i].bin = -1;
    a->blk[i].fnext = a->recycled;
    a->recycled = i;
}

gs_status_t gs__cuda_arena_init(gs__cuda_arena_t *a, uintptr_t base, size_t nbytes)
{
    memset(a, 0, sizeof(*a));
    if (base % GS__ARENA_UNIT != 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda arena: base %p is not %u-byte aligned",
                            (void *)base, GS__ARENA_UNIT);
    a->base = base;
    a->nunits = nbytes / GS__ARENA_UNIT;
    a->recycled = -1;
    for (int i = 0; i < GS__ARENA_NBINS; i++) a->heads[i] = -1;
    gs_u64map_init(&a->live);
    if (pthread_mutex_init(&a->lock, NULL) != 0)
        return gs_error_set(GS_ERR_NO_RESOURCE, "cuda arena: pthread_mutex_init failed");
    if (a->nunits > 0) {
        if (gs__arena_reserve_node(a) != GS_OK) {
            pthread_mutex_destroy(&a->lock);
            return gs_error_set(GS_ERR_NO_MEMORY, "cuda arena: out of host memory");
        }
        int32_t i = gs__arena_new_node(a);
        a->blk[i].off = 0;
        a->blk[i].size = a->nunits;
        gs__arena_bin_push(a, i);
    }
    return GS_OK;
}

void gs__cuda_arena_cleanup(gs__cuda_arena_t *a)
{
    gs_free(a->blk);
    a->blk = NULL;
    a->nblk = a->capblk = 0;
    gs_u64map_cleanup(&a->live);
    pthread_mutex_destroy(&a->lock);
}

static size_t gs__arena_largest_free_locked(const gs__cuda_arena_t *a)
{
    uint64_t best = 0;
    for (int w = GS__ARENA_NBINS / 64 - 1; w >= 0; w--) {
        if (a->bitmap[w] == 0) continue;
        int bin = w * 64 + 63 - __builtin_clzll(a->bitmap[w]);
        for (int32_t i = a->heads[bin]; i >= 0; i = a->blk[i].fnext)
            if (a->blk[i].size > best) best = a->blk[i].size;
        break;
    }
    return (size_t)(best * GS__ARENA_UNIT);
}

/* Find a free block of at least @a units; -1 if none. */
static int32_t gs__arena_fit_locked(const gs__cuda_arena_t *a, uint64_t units)
{
    int bin = gs__arena_bin(units);
    int n = 0;
    for (int32_t i = a->heads[bin]; i >= 0 && n < GS__ARENA_SCAN; i = a->blk[i].fnext, n++)
        if (a->blk[i].size >= units) return i;
    int big = gs__arena_find_bin(a, bin + 1);
    if (big >= 0) return a->heads[big];
    for (int32_t i = a->heads[bin]; i >= 0; i = a->blk[i].fnext)
        if (a->blk[i].size >= units) return i;
    return -1;
}

gs_status_t gs__cuda_arena_alloc(gs__cuda_arena_t *a, size_t nbytes, uintptr_t *addr_p)
{
    uint64_t units = nbytes == 0 ? 1 : (nbytes - 1) / GS__ARENA_UNIT + 1;
    gs_status_t st;

    pthread_mutex_lock(&a->lock);
    int32_t i = gs__arena_fit_locked(a, units);
    if (i < 0) {
        size_t used = (size_t)(a->used_units * GS__ARENA_UNIT);
        size_t largest = gs__arena_largest_free_locked(a);
        pthread_mutex_unlock(&a->lock);
        return gs_error_set(GS_ERR_NO_DEVICE_MEMORY,
                            "cuda mem_alloc: %zu bytes do not fit in the device arena (%zu of %zu "
                            "bytes in use, largest free block %zu bytes)",
                            nbytes, used, (size_t)(a->nunits * GS__ARENA_UNIT), largest);
    }
    /* everything that can fail happens before the free lists change */
    if ((st = gs__arena_reserve_node(a)) != GS_OK ||
        (st = gs_u64map_put(&a->live, a->blk[i].off, (uint64_t)i)) != GS_OK) {
        pthread_mutex_unlock(&a->lock);
        return gs_error_set(GS_ERR_NO_MEMORY, "cuda mem_alloc: out of host memory for bookkeeping");
    }
    gs__arena_bin_remove(a, i);
    if (a->blk[i].size > units) {
        int32_t r = gs__arena_new_node(a);
        gs__arena_blk_t *b = &a->blk[i];
        gs__arena_blk_t *rb = &a->blk[r];
        rb->off = b->off + units;
        rb->size = b->size - units;
        rb->prev = i;
        rb->next = b->next;
        if (b->next >= 0) a->blk[b->next].prev = r;
        b->next = r;
        b->size = units;
        gs__arena_bin_push(a, r);
    }
    a->used_units += units;
    a->nallocs++;
    *addr_p = a->base + (uintptr_t)(a->blk[i].off * GS__ARENA_UNIT);
    pthread_mutex_unlock(&a->lock);
    return GS_OK;
}

gs_status_t gs__cuda_arena_free(gs__cuda_arena_t *a, uintptr_t addr)
{
    uint64_t val;
    if (addr < a->base || (addr - a->base) % GS__ARENA_UNIT != 0)
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda mem_free: %p is not an arena address",
                            (void *)addr);
    uint64_t off = (uint64_t)(addr - a->base) / GS__ARENA_UNIT;

    pthread_mutex_lock(&a->lock);
    if (!gs_u64map_get(&a->live, off, &val)) {
        pthread_mutex_unlock(&a->lock);
        return gs_error_set(GS_ERR_INVALID_PARAM, "cuda mem_free: %p is not a live allocation",
                            (void *)addr);
    }
    gs_u64map_del(&a->live, off);
    int32_t i = (int32_t)val;
    a->used_units -= a->blk[i].size;
    a->nallocs--;

    int32_t n = a->blk[i].next;
    if (n >= 0 && a->blk[n].bin >= 0) { /* absorb the free successor */
        gs__arena_bin_remove(a, n);
        a->blk[i].size += a->blk[n].size;
        a->blk[i].next = a->blk[n].next;
        if (a->blk[i].next >= 0) a->blk[a->blk[i].next].prev = i;
        gs__arena_drop_node(a, n);
    }
    int32_t p = a->blk[i].prev;
    if (p >= 0 && a->blk[p].bin >= 0) { /* the free predecessor absorbs this block */
        gs__arena_bin_remove(a, p);
        a->blk[p].size += a->blk[i].size;
        a->blk[p].next = a->blk[i].next;
        if (a->blk[p].next >= 0) a->blk[a->blk[p].next].prev = p;
        gs__arena_drop_node(a, i);
        i = p;
    }
    gs__arena_bin_push(a, i);
    pthread_mutex_unlock(&a->lock);
    return GS_OK;
}

void gs__cuda_arena_stats(gs__cuda_arena_t *a, size_t *used_p, size_t *limit_p,
                          size_t *nallocs_p, size_t *largest_free_p)
{
    pthread_mutex_lock(&a->lock);
    if (used_p != NULL) *used_p = (size_t)(a->used_units * GS__ARENA_UNIT);
    if (limit_p != NULL) *limit_p = (size_t)(a->nunits * GS__ARENA_UNIT);
    if (nallocs_p != NULL) *nallocs_p = a->nallocs;
    if (largest_free_p != NULL) *largest_free_p = gs__arena_largest_free_locked(a);
    pthread_mutex_unlock(&a->lock);
}
