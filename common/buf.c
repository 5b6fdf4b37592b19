#include "common/buf.h"

#include "common/alloc.h"

#include <string.h>

void gs_buf_cleanup(gs_buf_t *b)
{
    gs_free(b->data);
    gs_buf_init(b);
}

gs_status_t gs_buf_reserve(gs_buf_t *b, size_t extra)
{
    size_t need, ncap;
    uint8_t *p;
    if (extra > SIZE_MAX - b->len) return GS_ERR_NO_MEMORY;
    need = b->len + extra;
    if (need <= b->cap) return GS_OK;
    ncap = b->cap ? b->cap : 256;
    while (ncap < need) ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    p = gs_realloc(b->data, ncap, "buf");
    if (p == NULL) return GS_ERR_NO_MEMORY;
    b->data = p;
    b->cap = ncap;
    return GS_OK;
}

gs_status_t gs_buf_append(gs_buf_t *b, const void *data, size_t len)
{
    gs_status_t st = gs_buf_reserve(b, len);
    if (st != GS_OK) return st;
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    return GS_OK;
}

uint8_t *gs_buf_detach(gs_buf_t *b, size_t *len_p)
{
    uint8_t *p = b->data;
    if (len_p) *len_p = b->len;
    gs_buf_init(b);
    return p;
}
