/* Growable arrays of plain values: GS_VEC(int64_t) v = {0}; GS_VEC_PUSH(&v, x, status);
 * Elements are stored contiguously in v.data[0..v.len). The vector owns its storage; release
 * it with GS_VEC_FREE. Growth doubles capacity; a failed growth leaves the vector unchanged. */
#ifndef GS_COMMON_VEC_H
#define GS_COMMON_VEC_H

#include "common/alloc.h"
#include "common/error.h"

#include <stddef.h>

#define GS_VEC(type)   \
    struct {           \
        type *data;    \
        size_t len;    \
        size_t cap;    \
    }

/** Make room for at least @a n elements of @a elem_size bytes. GS_ERR_NO_MEMORY on failure. */
static inline gs_status_t gs__vec_reserve(void **data, size_t *cap, size_t elem_size, size_t n)
{
    size_t ncap;
    void *p;
    if (n <= *cap) return GS_OK;
    ncap = *cap ? *cap : 8;
    while (ncap < n) {
        if (ncap > ((size_t)-1) / 2) return GS_ERR_NO_MEMORY;
        ncap *= 2;
    }
    p = gs_realloc(*data, gs_size_mul(ncap, elem_size), "vec");
    if (p == NULL) return GS_ERR_NO_MEMORY;
    *data = p;
    *cap = ncap;
    return GS_OK;
}

#define GS_VEC_RESERVE(v, n) \
    gs__vec_reserve((void **)&(v)->data, &(v)->cap, sizeof(*(v)->data), (n))

/* Evaluates to gs_status_t. */
#define GS_VEC_PUSH(v, x)                                                               \
    (((v)->len < (v)->cap || GS_VEC_RESERVE((v), (v)->len + 1) == GS_OK)                \
         ? ((v)->data[(v)->len++] = (x), GS_OK)                                         \
         : GS_ERR_NO_MEMORY)

#define GS_VEC_FREE(v)          \
    do {                        \
        gs_free((v)->data);     \
        (v)->data = NULL;       \
        (v)->len = (v)->cap = 0;\
    } while (0)

#endif
