/*
 * Incremental frame reader and detached frame storage (see proto/msg.h): turns a byte stream into
 * the payloads of length-prefixed frames, reserving a large frame once at its announced size.
 */
#include "proto/msg.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/heap.h"
#include "common/log.h"
#include "proto/msg_codec.h"

#include <string.h>

#define GS__FRAME_READER_KEEP (4u << 20)  /* buffers above this are sized exactly and retained briefly */
#define GS__FRAME_READER_ALIGN_MIN (64u << 10)  /* frames above this get an 8-byte aligned payload */
#define GS__FRAME_READER_NONE SIZE_MAX     /* no frame handed out that could be detached */
#define GS__SPARE_MIN GS_FRAME_SPARE_MIN    /* smaller buffers come from the heap's arenas, cheaply */

/* Detached frame storage (gs_frame_reader_detach). */
struct gs_frame_storage {
    uint8_t *data;
    size_t cap;
};

/* A few spare large buffers per thread: detached storage given back with gs_frame_storage_free()
 * (a relayed frame, once written) is reused by the next large frame a reader on this thread
 * reserves, so its pages are not faulted in and zeroed by the kernel again. Several, because
 * many frames are in flight at once (a gather relays every chunk from several workers while the
 * client reads them); the spares are buffers that were in use a moment ago, so they never raise
 * the peak; they are bounded (GS__SPARES buffers, GS__SPARE_BYTES in all) and the connections
 * trim them after GS__CONN_TRIM_MS idle. */
#define GS__SPARES 16
#define GS__SPARE_BYTES ((size_t)1 << 30)  /* and at most this much in all */
static _Thread_local gs_frame_storage_t gs__spare[GS__SPARES];

static void gs__spare_keep(gs_frame_storage_t *fs);
static void gs__spare_put(uint8_t *data, size_t cap);

/* A drained reader's buffer: a large one becomes a spare of this thread (the next large frame
 * on this thread is received into memory already faulted in; idle connections trim the spares),
 * a small one is freed. */
static void gs__frame_reader_release(gs_frame_reader_t *r)
{
    if (r->buf.cap > GS__SPARE_MIN) {
        gs__spare_put(r->buf.data, r->buf.cap);
        gs_buf_init(&r->buf);
    } else {
        gs_buf_cleanup(&r->buf);
    }
}

/* The smallest spare of at least @a need bytes, else the largest; -1 when there is none. */
static int gs__spare_pick(size_t need)
{
    int best = -1, largest = -1;
    for (int i = 0; i < GS__SPARES; i++) {
        if (gs__spare[i].data == NULL) continue;
        if (gs__spare[i].cap >= need && (best < 0 || gs__spare[i].cap < gs__spare[best].cap)) best = i;
        if (largest < 0 || gs__spare[i].cap > gs__spare[largest].cap) largest = i;
    }
    return best >= 0 ? best : largest;
}

void gs_frame_reader_init(gs_frame_reader_t *r, uint32_t max_frame)
{
    gs_buf_init(&r->buf);
    r->pos = 0;
    r->max_frame = max_frame != 0 ? max_frame : GS_PROTO_DEFAULT_MAX_FRAME;
    r->keep = 0;
    r->last = GS__FRAME_READER_NONE;
}

void gs_frame_reader_cleanup(gs_frame_reader_t *r)
{
    gs_buf_cleanup(&r->buf);
    r->pos = 0;
    r->keep = 0;
    r->last = GS__FRAME_READER_NONE;
}

/* Make room for @a extra more bytes after buf.len: first move the unconsumed bytes to the front,
 * then grow -- by doubling up to GS__FRAME_READER_KEEP (many small frames), exactly beyond it (a
 * large frame is reserved once, at its announced size, and never copied by doubling). */
static gs_status_t gs__frame_reader_room(gs_frame_reader_t *r, size_t extra)
{
    size_t need, ncap;
    uint8_t *p;
    if (r->buf.cap - r->buf.len >= extra) return GS_OK;
    if (r->pos > 0) {
        memmove(r->buf.data, r->buf.data + r->pos, r->buf.len - r->pos);
        r->buf.len -= r->pos;
        r->pos = 0;
        r->last = GS__FRAME_READER_NONE;
        if (r->buf.cap - r->buf.len >= extra) return GS_OK;
    }
    if (extra > SIZE_MAX - r->buf.len) {
        return gs_error_set(GS_ERR_NO_MEMORY, "cannot buffer %zu more received bytes", extra);
    }
    need = r->buf.len + extra;
    if (need > GS__SPARE_MIN && gs__spare_pick(need) >= 0) {
        /* a large frame into a smaller buffer: take a spare (grown if need be), so its pages
         * were faulted in already; the buffer it replaces becomes a spare in turn */
        gs_frame_storage_t *sp = &gs__spare[gs__spare_pick(need)];
        p = sp->cap >= need ? sp->data : gs_realloc(sp->data, need, "frame reader");
        if (p != NULL) {
            if (sp->cap < need && need > GS__FRAME_READER_KEEP) (void)gs_heap_advise_huge(p, need);
            ncap = sp->cap >= need ? sp->cap : need;
            sp->data = NULL;
            sp->cap = 0;
            if (r->buf.len > 0) memcpy(p, r->buf.data, r->buf.len);
            gs__spare_put(r->buf.data, r->buf.cap);
            r->buf.data = p;
            r->buf.cap = ncap;
            return GS_OK;
        }
    }
    if (need > GS__FRAME_READER_KEEP) {
        ncap = need;
    } else {
        ncap = r->buf.cap > 256 ? r->buf.cap : 256;
        while (ncap < need) ncap *= 2;
        if (ncap > GS__FRAME_READER_KEEP) ncap = GS__FRAME_READER_KEEP;
    }
    p = gs_realloc(r->buf.data, ncap, "frame reader");
    if (p == NULL) {
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory buffering a frame (%zu bytes)", ncap);
    }
    if (ncap > GS__FRAME_READER_KEEP) (void)gs_heap_advise_huge(p, ncap);   /* a large frame */
    r->buf.data = p;
    r->buf.cap = ncap;
    return GS_OK;
}

/* Start over once everything is consumed; a large buffer survives only right after a large
 * frame (the next one is likely large too), and a small frame that follows releases it. */
static void gs__frame_reader_rewind(gs_frame_reader_t *r)
{
    if (r->pos != r->buf.len) return;
    r->buf.len = r->pos = 0;
    r->last = GS__FRAME_READER_NONE;
    if (r->buf.cap > GS__FRAME_READER_KEEP && !r->keep) gs__frame_reader_release(r);
}

gs_status_t gs_frame_reader_feed(gs_frame_reader_t *r, const void *data, size_t len)
{
    gs_status_t st;
    if (len == 0) return GS_OK;
    gs__frame_reader_rewind(r);
    if (r->buf.len == 0 && r->buf.cap > GS__FRAME_READER_KEEP && len >= GS_PROTO_FRAME_HEADER &&
        GS_PROTO_FRAME_HEADER + gs__ld_le(data, 4) <= GS__FRAME_READER_KEEP) {
        gs__frame_reader_release(r);  /* a small frame follows the large ones: release the large buffer */
    }
    if ((st = gs__frame_reader_room(r, len)) != GS_OK) return st;
    memcpy(r->buf.data + r->buf.len, data, len);
    r->buf.len += len;
    return GS_OK;
}

/* Move the unconsumed bytes (the start of a large frame) forward so the frame's payload begins at
 * an 8-byte boundary in memory: its tables are then decoded in place. The caller reserved 8 bytes
 * beyond the frame; nothing before pos is touched. */
static int gs__frame_reader_aligned(const gs_frame_reader_t *r)
{
    return r->buf.data != NULL && ((uintptr_t)(r->buf.data + r->pos + GS_PROTO_FRAME_HEADER) & 7u) == 0;
}

static void gs__frame_reader_align(gs_frame_reader_t *r)
{
    size_t mis = (size_t)((uintptr_t)(r->buf.data + r->pos + GS_PROTO_FRAME_HEADER) & 7u), shift;
    if (mis == 0) return;
    shift = 8 - mis;
    gs_assert_always(r->buf.cap - r->buf.len >= shift);
    memmove(r->buf.data + r->pos + shift, r->buf.data + r->pos, r->buf.len - r->pos);
    r->pos += shift;
    r->buf.len += shift;
}

gs_status_t gs_frame_reader_next(gs_frame_reader_t *r, const uint8_t **payload_p, size_t *len_p)
{
    size_t avail = r->buf.len - r->pos, frame;
    uint32_t flen;
    if (avail < GS_PROTO_FRAME_HEADER) return GS_INPROGRESS;
    flen = (uint32_t)gs__ld_le(r->buf.data + r->pos, 4);
    if (flen > r->max_frame) {
        return gs_error_set(GS_ERR_MSG_TOO_LARGE, "frame of %u bytes exceeds the limit of %u bytes", flen,
                            r->max_frame);
    }
    frame = GS_PROTO_FRAME_HEADER + (size_t)flen;
    if (avail < frame) {
        /* reserve the whole frame once, now that its size is known and accepted (a large one with
         * room to move its payload to an 8-byte boundary) */
        if (frame <= GS__FRAME_READER_ALIGN_MIN) {
            return gs__frame_reader_room(r, frame - avail) == GS_OK ? GS_INPROGRESS : GS_ERR_NO_MEMORY;
        }
        if (gs__frame_reader_room(r, frame - avail + (gs__frame_reader_aligned(r) ? 0 : 8)) != GS_OK) {
            return GS_ERR_NO_MEMORY;
        }
        gs__frame_reader_align(r);   /* once: the next calls find it aligned and reserved */
        return GS_INPROGRESS;
    }
    *payload_p = r->buf.data + r->pos + GS_PROTO_FRAME_HEADER;
    *len_p = flen;
    r->last = r->pos;
    r->keep = frame > GS__FRAME_READER_KEEP;
    r->pos += frame;
    return GS_OK;
}

size_t gs_frame_reader_space(gs_frame_reader_t *r, size_t min, uint8_t **space_p)
{
    size_t avail = r->buf.len - r->pos, frame, rest;
    uint32_t flen;
    if (avail < GS_PROTO_FRAME_HEADER) return 0;
    flen = (uint32_t)gs__ld_le(r->buf.data + r->pos, 4);
    if (flen > r->max_frame) return 0;
    frame = GS_PROTO_FRAME_HEADER + (size_t)flen;
    if (avail >= frame) return 0;
    rest = frame - avail;
    if (frame < min || r->buf.cap - r->buf.len < rest) return 0;  /* small, or not reserved yet */
    *space_p = r->buf.data + r->buf.len;
    return rest;
}

void gs_frame_reader_commit(gs_frame_reader_t *r, size_t n)
{
    gs_assert_always(n <= r->buf.cap - r->buf.len);
    r->buf.len += n;
}

gs_status_t gs_frame_reader_detach(gs_frame_reader_t *r, gs_frame_storage_t **storage_p)
{
    gs_frame_storage_t *fs;
    gs_buf_t rest;
    size_t nrest;
    if (storage_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_frame_reader_detach: NULL argument");
    if (r->last == GS__FRAME_READER_NONE) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_frame_reader_detach: no frame was just handed out");
    }
    fs = gs_malloc(sizeof *fs, "frame storage");
    if (fs == NULL) return gs_error_set(GS_ERR_NO_MEMORY, "out of memory detaching a frame");
    /* bytes received after the frame (the start of the next ones) move to a new buffer */
    nrest = r->buf.len - r->pos;
    gs_buf_init(&rest);
    if (nrest > 0 && gs_buf_append(&rest, r->buf.data + r->pos, nrest) != GS_OK) {
        gs_free(fs);
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory keeping %zu received bytes", nrest);
    }
    fs->data = r->buf.data;
    fs->cap = r->buf.cap;
    *storage_p = fs;
    r->buf = rest;
    r->pos = 0;
    r->keep = 0;
    r->last = GS__FRAME_READER_NONE;
    return GS_OK;
}

/* Keep the large buffer @a data of @a cap bytes as a spare of this thread (or free it). */
static void gs__spare_put(uint8_t *data, size_t cap)
{
    gs_frame_storage_t one = {data, cap};
    gs__spare_keep(&one);
}

void gs_frame_storage_free(gs_frame_storage_t *fs)
{
    if (fs == NULL) return;
    gs__spare_keep(fs);
    gs_free(fs);
}

static void gs__spare_keep(gs_frame_storage_t *fs)
{
    int slot = -1;
    if (fs->data != NULL && fs->cap > GS__SPARE_MIN && fs->cap <= GS__SPARE_BYTES) {
        /* an empty slot, else the smallest spare if this one is larger */
        for (int i = 0; i < GS__SPARES; i++) {
            if (gs__spare[i].data == NULL) {
                slot = i;
                break;
            }
            if (gs__spare[i].cap < fs->cap && (slot < 0 || gs__spare[i].cap < gs__spare[slot].cap)) slot = i;
        }
    }
    if (slot >= 0 && gs_frame_storage_spare() - gs__spare[slot].cap + fs->cap > GS__SPARE_BYTES) {
        /* over the byte bound: drop the smallest spares until it fits, else give up */
        while (gs_frame_storage_spare() - gs__spare[slot].cap + fs->cap > GS__SPARE_BYTES) {
            int small = -1;
            for (int i = 0; i < GS__SPARES; i++) {
                if (i != slot && gs__spare[i].data != NULL && gs__spare[i].cap < fs->cap &&
                    (small < 0 || gs__spare[i].cap < gs__spare[small].cap)) {
                    small = i;
                }
            }
            if (small < 0) {
                slot = -1;
                break;
            }
            gs_free(gs__spare[small].data);
            gs__spare[small].data = NULL;
            gs__spare[small].cap = 0;
        }
    }
    if (slot >= 0) {
        gs_free(gs__spare[slot].data);
        gs__spare[slot] = *fs;
    } else {
        gs_free(fs->data);
    }
}

uint8_t *gs_frame_storage_take(size_t min, size_t *cap_p)
{
    int best = -1;
    uint8_t *p;
    if (cap_p == NULL || min <= GS__SPARE_MIN) return NULL;
    for (int i = 0; i < GS__SPARES; i++) {
        if (gs__spare[i].data != NULL && gs__spare[i].cap >= min &&
            (best < 0 || gs__spare[i].cap < gs__spare[best].cap)) {
            best = i;
        }
    }
    if (best < 0) return NULL;
    p = gs__spare[best].data;
    *cap_p = gs__spare[best].cap;
    gs__spare[best].data = NULL;
    gs__spare[best].cap = 0;
    return p;
}

void gs_frame_storage_give(uint8_t *data, size_t cap)
{
    if (data == NULL) return;
    gs__spare_put(data, cap);
}

size_t gs_frame_storage_spare(void)
{
    size_t total = 0;
    for (int i = 0; i < GS__SPARES; i++) total += gs__spare[i].cap;
    return total;
}

void gs_frame_storage_trim(void)
{
    for (int i = 0; i < GS__SPARES; i++) {
        gs_free(gs__spare[i].data);
        gs__spare[i].data = NULL;
        gs__spare[i].cap = 0;
    }
}

void gs_frame_reader_trim(gs_frame_reader_t *r)
{
    if (r->pos != r->buf.len || r->buf.cap <= GS__FRAME_READER_KEEP) return;
    r->keep = 0;
    gs__frame_reader_rewind(r);
}

size_t gs_frame_reader_retained(const gs_frame_reader_t *r)
{
    return r->pos == r->buf.len && r->buf.cap > GS__FRAME_READER_KEEP ? r->buf.cap : 0;
}

size_t gs_frame_reader_shrink(gs_frame_reader_t *r, size_t max_kept)
{
    size_t cap = r->buf.cap;
    if (r->pos != r->buf.len || cap <= max_kept) return 0;
    gs__frame_reader_release(r);
    r->pos = 0;
    r->keep = 0;
    r->last = GS__FRAME_READER_NONE;
    return cap;
}

/* Whether @a len bytes at @a data are one or more complete frames, back to back. */
int gs_frames_whole(const uint8_t *data, size_t len)
{
    size_t off = 0;
    while (off < len) {
        uint32_t flen;
        if (len - off < GS_PROTO_FRAME_HEADER) break;
        flen = (uint32_t)data[off] | (uint32_t)data[off + 1] << 8 | (uint32_t)data[off + 2] << 16 |
               (uint32_t)data[off + 3] << 24;
        if (len - off - GS_PROTO_FRAME_HEADER < flen) break;
        off += GS_PROTO_FRAME_HEADER + (size_t)flen;
    }
    return len > 0 && off == len;
}
