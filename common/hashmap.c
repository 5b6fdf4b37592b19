#include "common/hashmap.h"

#include "common/alloc.h"

#include <string.h>

void gs_u64map_init(gs_u64map_t *m)
{
    memset(m, 0, sizeof(*m));
}

void gs_u64map_cleanup(gs_u64map_t *m)
{
    gs_free(m->keys);
    gs_free(m->vals);
    gs_u64map_init(m);
}

/* A key's first slot. Keys that differ only in their low 3 bits share a group of 8 slots (one
 * cache line of keys, one of values); groups are spread by the hash of the rest. Dense integer
 * ids (task ids, looked up and inserted in order) then cost a cache miss per 8 keys instead of
 * one per key; strided or random keys still spread (a group holds at most 8 distinct keys). */
static inline size_t gs__u64map_home(uint64_t key, size_t cap)
{
    return (size_t)((gs_hash_u64(key >> 3) << 3) | (key & 7u)) & (cap - 1);
}

static gs_status_t gs__u64map_rehash(gs_u64map_t *m, size_t ncap)
{
    uint64_t *keys = gs_malloc(gs_size_mul(ncap, sizeof(uint64_t)), "u64map keys");
    uint64_t *vals = gs_malloc(gs_size_mul(ncap, sizeof(uint64_t)), "u64map vals");
    if (keys == NULL || vals == NULL) {
        gs_free(keys);
        gs_free(vals);
        return GS_ERR_NO_MEMORY;
    }
    memset(keys, 0xff, ncap * sizeof(uint64_t));
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t k = m->keys[i];
        if (k == GS_U64MAP_EMPTY || k == GS_U64MAP_TOMB) continue;
        size_t j = gs__u64map_home(k, ncap);
        while (keys[j] != GS_U64MAP_EMPTY) j = (j + 1) & (ncap - 1);
        keys[j] = k;
        vals[j] = m->vals[i];
    }
    gs_free(m->keys);
    gs_free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = ncap;
    m->used = m->len;
    return GS_OK;
}

gs_status_t gs_u64map_reserve(gs_u64map_t *m, size_t n)
{
    size_t ncap = m->cap ? m->cap : 16;
    while (ncap * 7 / 10 < n) ncap *= 2;
    if (ncap == m->cap) return GS_OK;
    return gs__u64map_rehash(m, ncap);
}

gs_status_t gs_u64map_put(gs_u64map_t *m, uint64_t key, uint64_t val)
{
    return gs_u64map_swap(m, key, val, NULL, NULL);
}

gs_status_t gs_u64map_swap(gs_u64map_t *m, uint64_t key, uint64_t val, int *found_p, uint64_t *old_p)
{
    size_t j, tomb = SIZE_MAX;
    if (key == GS_U64MAP_EMPTY || key == GS_U64MAP_TOMB) return GS_ERR_INVALID_PARAM;
    if ((m->used + 1) * 10 > m->cap * 7) {
        size_t ncap = m->cap ? m->cap : 16;
        while ((m->len + 1) * 10 > ncap * 5) ncap *= 2;
        gs_status_t st = gs__u64map_rehash(m, ncap);
        if (st != GS_OK) return st;
    }
    j = gs__u64map_home(key, m->cap);
    for (;;) {
        uint64_t k = m->keys[j];
        if (k == key) {
            if (found_p != NULL) *found_p = 1;
            if (old_p != NULL) *old_p = m->vals[j];
            m->vals[j] = val;
            return GS_OK;
        }
        if (k == GS_U64MAP_TOMB && tomb == SIZE_MAX) tomb = j;
        if (k == GS_U64MAP_EMPTY) break;
        j = (j + 1) & (m->cap - 1);
    }
    if (tomb != SIZE_MAX) {
        j = tomb;
    } else {
        m->used++;
    }
    m->keys[j] = key;
    m->vals[j] = val;
    m->len++;
    if (found_p != NULL) *found_p = 0;
    return GS_OK;
}

static size_t gs__u64map_find(const gs_u64map_t *m, uint64_t key)
{
    size_t j;
    if (m->cap == 0 || key == GS_U64MAP_EMPTY || key == GS_U64MAP_TOMB) return SIZE_MAX;
    j = gs__u64map_home(key, m->cap);
    for (;;) {
        uint64_t k = m->keys[j];
        if (k == key) return j;
        if (k == GS_U64MAP_EMPTY) return SIZE_MAX;
        j = (j + 1) & (m->cap - 1);
    }
}

int gs_u64map_get(const gs_u64map_t *m, uint64_t key, uint64_t *val_p)
{
    size_t j = gs__u64map_find(m, key);
    if (j == SIZE_MAX) return 0;
    if (val_p) *val_p = m->vals[j];
    return 1;
}

int gs_u64map_del_if(gs_u64map_t *m, uint64_t key, uint64_t val)
{
    size_t j = gs__u64map_find(m, key);
    if (j == SIZE_MAX || m->vals[j] != val) return 0;
    m->keys[j] = GS_U64MAP_TOMB;
    m->len--;
    return 1;
}

int gs_u64map_del(gs_u64map_t *m, uint64_t key)
{
    size_t j = gs__u64map_find(m, key);
    if (j == SIZE_MAX) return 0;
    m->keys[j] = GS_U64MAP_TOMB;
    m->len--;
    return 1;
}

uint64_t gs_hash_bytes(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}
