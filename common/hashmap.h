/* Open-addressing hash map from uint64_t keys to uint64_t values (linear probing, tombstones,
 * keys differing only in their 3 low bits homed in one group of 8 slots (hashmap.c),
 * power-of-two capacity, load factor <= 0.7). Key UINT64_MAX and UINT64_MAX - 1 are reserved.
 * No allocation per insert beyond occasional rehashing. Not thread-safe. */
#ifndef GS_COMMON_HASHMAP_H
#define GS_COMMON_HASHMAP_H

#include <gsched/status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct gs_u64map {
    uint64_t *keys;
    uint64_t *vals;
    size_t cap;   /* 0 or a power of two */
    size_t len;   /* live entries */
    size_t used;  /* live + tombstones */
} gs_u64map_t;

#define GS_U64MAP_EMPTY UINT64_MAX
#define GS_U64MAP_TOMB (UINT64_MAX - 1)

#ifdef __cplusplus
extern "C" {
#endif

/** Initialise an empty map (no allocation). */
void gs_u64map_init(gs_u64map_t *m);
/** Free the map's storage; the map is empty and reusable afterwards. */
void gs_u64map_cleanup(gs_u64map_t *m);
/** Insert or overwrite. GS_ERR_INVALID_PARAM for a reserved key, GS_ERR_NO_MEMORY on growth
 *  failure (the map is unchanged). */
gs_status_t gs_u64map_put(gs_u64map_t *m, uint64_t key, uint64_t val);
/** Insert or overwrite @a key in one probe sequence: when it was present, *found_p (may be NULL)
 *  gets 1 and *old_p (may be NULL) its previous value, else *found_p gets 0. Errors as
 *  gs_u64map_put (the map unchanged, nothing written). */
gs_status_t gs_u64map_swap(gs_u64map_t *m, uint64_t key, uint64_t val, int *found_p, uint64_t *old_p);
/** Remove @a key when its value is @a val, in one probe sequence; returns 1 when removed. */
int gs_u64map_del_if(gs_u64map_t *m, uint64_t key, uint64_t val);
/** Look up @a key; returns 1 and writes *val_p when present, else 0. */
int gs_u64map_get(const gs_u64map_t *m, uint64_t key, uint64_t *val_p);
/** Remove @a key; returns 1 when it was present. */
int gs_u64map_del(gs_u64map_t *m, uint64_t key);
/** Grow so that @a n entries fit without rehash. */
gs_status_t gs_u64map_reserve(gs_u64map_t *m, size_t n);

/** 64-bit mix (splitmix64 finaliser), used for hashing integer keys. */
static inline uint64_t gs_hash_u64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/** FNV-1a over bytes, for checksums and string keys. */
uint64_t gs_hash_bytes(const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
