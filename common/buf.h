/* A growable byte buffer (owning). Used for encoding frames and staging bytes. */
#ifndef GS_COMMON_BUF_H
#define GS_COMMON_BUF_H

#include <gsched/status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct gs_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} gs_buf_t;

#ifdef __cplusplus
extern "C" {
#endif

/** Empty buffer, no allocation. */
static inline void gs_buf_init(gs_buf_t *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}
/** Release storage; the buffer is empty and reusable. */
void gs_buf_cleanup(gs_buf_t *b);
/** Ensure capacity for @a extra more bytes. GS_ERR_NO_MEMORY leaves @a b unchanged. */
gs_status_t gs_buf_reserve(gs_buf_t *b, size_t extra);
/** Append @a len bytes. GS_ERR_NO_MEMORY leaves @a b unchanged. */
gs_status_t gs_buf_append(gs_buf_t *b, const void *data, size_t len);
/** Take ownership of the storage out of @a b (caller frees with gs_free); @a b becomes empty. */
uint8_t *gs_buf_detach(gs_buf_t *b, size_t *len_p);

#ifdef __cplusplus
}
#endif
#endif
