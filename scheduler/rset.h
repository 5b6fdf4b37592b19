/* The ready set of a graph: priorities 0 .. n-1 with O(log64 n) insert / delete / minimum.
 * A plain data structure (no scheduler state); header-only so that placement's inner loop
 * inlines it. Not installed. */
#ifndef GS_SCHEDULER_RSET_H
#define GS_SCHEDULER_RSET_H

#include "common/alloc.h"
#include "common/error.h"
#include "common/log.h"   /* gs_assert */

#include <stdint.h>
#include <string.h>

/* A set of priorities (0 .. n-1) with O(log64 n) insert / delete / minimum: a bitmap over the
 * keys plus summary levels (bit i of a level-k word says whether word i of level k-1 is
 * non-zero). At most 6 levels for 2^31 keys; about n/8 bytes. */
#define GS__RSET_MAX_LEVELS 8
typedef struct gs__rset {
    uint64_t *bits;                      /* every level, leaves first */
    uint32_t off[GS__RSET_MAX_LEVELS];   /* first word of each level */
    uint32_t nlevels;
    uint32_t n;                          /* members */
} gs__rset_t;

static inline gs_status_t gs__rset_init(gs__rset_t *r, uint32_t nkeys)
{
    uint32_t words = nkeys / 64 + 1, total = 0, l = 0;
    for (;;) {
        gs_assert(l < GS__RSET_MAX_LEVELS);
        r->off[l++] = total;
        total += words;
        if (words == 1) break;
        words = (words + 63) / 64;
    }
    r->nlevels = l;
    r->n = 0;
    r->bits = gs_calloc(total, sizeof(uint64_t), "graph ready set");
    return r->bits != NULL ? GS_OK : GS_ERR_NO_MEMORY;
}

static inline void gs__rset_clear(gs__rset_t *r)
{
    if (r->bits != NULL) memset(r->bits, 0, ((size_t)r->off[r->nlevels - 1] + 1) * sizeof(uint64_t));
    r->n = 0;
}

/* @a p must not be a member. */
static inline void gs__rset_add(gs__rset_t *r, uint32_t p)
{
    for (uint32_t l = 0; l < r->nlevels; l++) {
        uint64_t *w = &r->bits[r->off[l] + (p >> 6)];
        uint64_t was = *w;
        *w = was | (1ull << (p & 63));
        if (was != 0) break;
        p >>= 6;
    }
    r->n++;
}

/* Bulk filling (a graph's initially ready tasks): gs__rset_put sets @a p's leaf bit alone (@a p
 * must not be a member); gs__rset_seal then derives every summary level from the leaves in one
 * pass. Between the two the set is only written: no other call may see it. */
static inline void gs__rset_put(gs__rset_t *r, uint32_t p)
{
    r->bits[r->off[0] + (p >> 6)] |= 1ull << (p & 63);
    r->n++;
}

static inline void gs__rset_seal(gs__rset_t *r)
{
    for (uint32_t l = 1; l < r->nlevels; l++) {
        uint32_t nbelow = r->off[l] - r->off[l - 1];
        const uint64_t *below = &r->bits[r->off[l - 1]];
        uint64_t *up = &r->bits[r->off[l]];
        memset(up, 0, (((size_t)nbelow + 63) / 64) * sizeof(uint64_t));
        for (uint32_t i = 0; i < nbelow; i++)
            if (below[i] != 0) up[i >> 6] |= 1ull << (i & 63);
    }
}

/* @a p must be a member. */
static inline void gs__rset_del(gs__rset_t *r, uint32_t p)
{
    gs_assert(r->n > 0);
    for (uint32_t l = 0; l < r->nlevels; l++) {
        uint64_t *w = &r->bits[r->off[l] + (p >> 6)];
        *w &= ~(1ull << (p & 63));
        if (*w != 0) break;
        p >>= 6;
    }
    r->n--;
}

/* Smallest member; the set must not be empty. */
static inline uint32_t gs__rset_min(const gs__rset_t *r)
{
    uint32_t i = 0;
    gs_assert(r->n > 0);
    for (uint32_t l = r->nlevels; l-- > 0;) i = (i << 6) | (uint32_t)__builtin_ctzll(r->bits[r->off[l] + i]);
    return i;
}

/* Smallest member when none lies below @a hint (a key of the set's range, e.g. the last minimum
 * taken while members are only deleted): one word read when it is in @a hint's leaf word (a
 * placement pass taking ready tasks in order), else gs__rset_min. The set must not be empty. */
static inline uint32_t gs__rset_min_from(const gs__rset_t *r, uint32_t hint)
{
    uint64_t w = r->bits[r->off[0] + (hint >> 6)] & (~0ull << (hint & 63));
    if (w != 0) return (hint & ~63u) | (uint32_t)__builtin_ctzll(w);
    return gs__rset_min(r);
}

#endif
