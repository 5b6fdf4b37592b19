/*
 * Message decoder (see proto/msg.h), derived from the schema table (proto/msg_schema.h).
 *
 * Payload = one msgpack array [type, field...] with exactly the table's fields, in order, and
 * nothing after it. The count that sizes a table is sent explicitly and every table's length must
 * match it exactly. Decoding runs in three steps:
 *   1. parse: walk the payload with the bounds-checked cursor, check every type, field count and
 *      table length against the data actually present, and record where each table, string and
 *      array of strings/blobs lies in the payload (zero-copy, nothing allocated);
 *   2. own: compute the exact storage needed, make ONE allocation (bounded by a small constant
 *      times the payload length), copy every table 8-byte aligned and every string NUL-terminated.
 *      Tables start 8-byte aligned from the payload's start (their bin holds 0 to 7 zero bytes of
 *      padding first, protocol version 3; anything else is refused): gs_msg_decode_borrow() on a
 *      little-endian host leaves a table in the payload when the payload itself is 8-byte aligned
 *      (the frame reader places large payloads so), which spares copying a large graph;
 *   3. check: the semantic checks shared with the encoder (gs__msg_check). On failure the storage
 *      is freed and GS_ERR_PROTO returned.
 */
#include "proto/msg.h"

#include "common/alloc.h"
#include "common/error.h"
#include "common/heap.h"
#include "common/log.h"
#include "proto/mp.h"
#include "proto/msg_codec.h"

#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef enum gs__item_kind {
    GS__IT_TAB,    /* table of 4- or 8-byte entries -> pointer field */
    GS__IT_BIN,    /* byte string         -> gs_bytes_t field (8-byte aligned copy) */
    GS__IT_STR,    /* string              -> gs_str_t field (NUL-terminated copy) */
    GS__IT_BINS,   /* array of bin        -> gs_bytes_t * field */
    GS__IT_STRS,   /* array of str        -> gs_str_t * field */
    GS__IT_PEERS   /* array of peer infos -> gs_peer_info_t * field */
} gs__item_kind_t;

typedef struct gs__item {
    gs__item_kind_t kind;
    unsigned width;       /* tables: entry width */
    const uint8_t *raw;   /* first byte (tables, bin, str) or first element (arrays) in the payload */
    size_t len;           /* bytes, or number of elements for arrays */
    void *dst;            /* the field that will point at the owned copy */
} gs__item_t;

#define GS__MAX_ITEMS 24    /* table, string and bin fields of the largest message (WORKERS: 18) */

typedef struct gs__dec {
    gs_mp_reader_t r;
    gs__item_t items[GS__MAX_ITEMS];
    unsigned nitems;
    int borrow;           /* CHUNK bytes point into the payload instead of being copied */
} gs__dec_t;

static int gs__dec_fail(gs__dec_t *d, const char *fmt, ...) GS_PRINTF(2, 3);
static int gs__dec_fail(gs__dec_t *d, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    if (d->r.err != GS_OK) return 0;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return gs_mp_fail(&d->r, what);
}

static void gs__dec_add(gs__dec_t *d, gs__item_kind_t kind, unsigned width, const uint8_t *raw, size_t len,
                        void *dst)
{
    gs_assert_always(d->nitems < GS__MAX_ITEMS);
    d->items[d->nitems] = (gs__item_t){kind, width, raw, len, dst};
    d->nitems++;
}

/* A bin holding the zero padding that puts its entries at a multiple of 8 bytes from the payload's
 * start, then exactly @a count entries of @a width bytes (table entry width times per). Returns
 * the entries, NULL on error. */
static const uint8_t *gs__dec_table(gs__dec_t *d, const gs__field_t *f, uint64_t count, void *dst)
{
    unsigned width = f->size * f->per;
    const uint8_t *p;
    uint32_t len, pad;
    if (!gs_mp_read_bin(&d->r, &p, &len)) return NULL;
    pad = (0u - (uint32_t)(size_t)(p - d->r.start)) & 7u;
    if (len < pad || count > (len - pad) / width || (uint64_t)(len - pad) != count * width) {
        gs__dec_fail(d,
                     "%s has %u bytes, expected %u bytes of padding (to an 8-byte boundary of the payload) "
                     "and %llu entries of %u bytes",
                     f->name, len, pad, (unsigned long long)count, width);
        return NULL;
    }
    for (uint32_t k = 0; k < pad; k++) {
        if (p[k] != 0) {
            gs__dec_fail(d, "%s: byte %u of its %u bytes of alignment padding is not zero", f->name, k, pad);
            return NULL;
        }
    }
    p += pad;
    len -= pad;
    gs__dec_add(d, GS__IT_TAB, f->size, p, len, dst);
    return p;
}

/* One peer: [id, name, host, ucx_address]. */
static int gs__dec_peer(gs_mp_reader_t *r, uint64_t *id_p, const char **name_p, uint32_t *name_len_p,
                        const char **host_p, uint32_t *host_len_p, const uint8_t **ucx_p, uint32_t *ucx_len_p)
{
    uint32_t k;
    if (!gs_mp_read_array(r, &k)) return 0;
    if (k != 4) return gs_mp_fail(r, "peer entry does not have 4 fields");
    return gs_mp_read_u64(r, id_p) && gs_mp_read_str(r, name_p, name_len_p) && gs_mp_read_str(r, host_p, host_len_p) &&
           gs_mp_read_bin(r, ucx_p, ucx_len_p);
}

/* One element of an array field (str, bin or peer); its parts are not kept. */
static int gs__dec_elem(gs_mp_reader_t *r, gs__fkind_t kind)
{
    const uint8_t *p;
    const char *s, *h;
    uint32_t len, hl, ul;
    uint64_t id;
    if (kind == GS__F_STRS) return gs_mp_read_str(r, &s, &len);
    if (kind == GS__F_BINS) return gs_mp_read_bin(r, &p, &len);
    return gs__dec_peer(r, &id, &s, &len, &h, &hl, &p, &ul);
}

/* An array of str, bin or peers; its count goes to the count field. */
static void gs__dec_array(gs__dec_t *d, void *body, const gs__field_t *f)
{
    static const gs__item_kind_t item[] = {[GS__F_STRS] = GS__IT_STRS, [GS__F_BINS] = GS__IT_BINS,
                                           [GS__F_PEERS] = GS__IT_PEERS};
    const uint8_t *first;
    uint32_t n;
    if (!gs_mp_read_array(&d->r, &n)) return;
    first = d->r.p;
    for (uint32_t i = 0; i < n; i++) {
        if (!gs__dec_elem(&d->r, f->kind)) return;
    }
    gs__dec_add(d, item[f->kind], 0, first, n, (uint8_t *)body + f->off);
    memcpy((uint8_t *)body + f->count_off, &n, sizeof n);
}

static void gs__dec_scalar(gs__dec_t *d, void *body, const gs__field_t *f)
{
    void *dst = (uint8_t *)body + f->off;
    uint32_t u32;
    uint64_t u64;
    int32_t i32;
    if (f->kind == GS__F_INT) {
        if (gs_mp_read_i32(&d->r, &i32)) memcpy(dst, &i32, sizeof i32);
    } else if (f->size == 4) {
        if (gs_mp_read_u32(&d->r, &u32)) memcpy(dst, &u32, sizeof u32);
    } else {
        if (gs_mp_read_u64(&d->r, &u64)) memcpy(dst, &u64, sizeof u64);
    }
}

static void gs__dec_blob(gs__dec_t *d, void *body, const gs__field_t *f)
{
    gs_bytes_t *dst = (gs_bytes_t *)(void *)((uint8_t *)body + f->off);
    const uint8_t *p;
    const char *s;
    uint32_t len;
    if (f->kind == GS__F_STR) {
        if (gs_mp_read_str(&d->r, &s, &len)) gs__dec_add(d, GS__IT_STR, 0, (const uint8_t *)s, len, dst);
    } else if (gs_mp_read_bin(&d->r, &p, &len)) {
        if (f->kind == GS__F_CHUNK && d->borrow) {
            dst->data = len > 0 ? p : NULL;
            dst->len = len;
        } else {
            gs__dec_add(d, GS__IT_BIN, 0, p, len, dst);
        }
    }
}

/* Every field of the table, in order (stops doing anything once the reader latched an error). */
static void gs__dec_body(gs__dec_t *d, gs_msg_t *m, const gs__msg_desc_t *desc)
{
    void *body = &m->u;
    uint64_t ndeps = 0, count;
    const uint8_t *raw;
    for (unsigned i = 0; i < desc->nfields && d->r.err == GS_OK; i++) {
        const gs__field_t *f = &desc->fields[i];
        void *dst = (uint8_t *)body + f->off;
        switch (f->kind) {
        case GS__F_UINT:
        case GS__F_INT: gs__dec_scalar(d, body, f); break;
        case GS__F_STR:
        case GS__F_BIN:
        case GS__F_CHUNK: gs__dec_blob(d, body, f); break;
        case GS__F_TAB: gs__dec_table(d, f, gs__field_count(body, f), dst); break;
        case GS__F_DTAB: gs__dec_table(d, f, ndeps, dst); break;
        case GS__F_CSR:
            count = gs__field_count(body, f);
            if (count >= UINT32_MAX) {
                gs__dec_fail(d, "%s %llu is too large", f->count_name, (unsigned long long)count);
                break;
            }
            raw = gs__dec_table(d, f, count + 1, dst);
            ndeps = raw != NULL ? gs__ld_le(raw + 8 * count, 8) : 0;
            break;
        case GS__F_STRS:
        case GS__F_BINS:
        case GS__F_PEERS: gs__dec_array(d, body, f); break;
        }
    }
}

static size_t gs__place(size_t *off, size_t len, size_t align)
{
    size_t o = (*off + (align - 1)) & ~(align - 1);
    *off = o + len;
    return o;
}

#if GS__BIG_ENDIAN
static void gs__from_le(uint8_t *p, size_t len, unsigned width)
{
    for (size_t i = 0; i < len; i += width) {
        for (unsigned a = 0, b = width - 1; a < b; a++, b--) {
            uint8_t t = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = t;
        }
    }
}
#else
#define gs__from_le(p, len, width) ((void)0)
#endif

/* Copy a blob (bin: 8-byte aligned; str: NUL-terminated) into the storage. */
static void gs__own_blob(size_t *off, uint8_t *base, int is_str, const uint8_t *raw, size_t len, gs_bytes_t *dst)
{
    size_t o = is_str ? gs__place(off, len + 1, 1) : gs__place(off, len, 8);
    if (base == NULL) return;
    if (len > 0) memcpy(base + o, raw, len);
    if (is_str) base[o + len] = 0;
    dst->data = (is_str || len > 0) ? base + o : NULL;
    dst->len = len;
}

/* The elements of an array item (re-read: the parse step validated them, so this cannot fail). */
static void gs__own_array(const gs__dec_t *d, const gs__item_t *it, size_t *off, uint8_t *base)
{
    size_t esize = it->kind == GS__IT_PEERS ? sizeof(gs_peer_info_t) : sizeof(gs_bytes_t);
    size_t o = gs__place(off, it->len * esize, alignof(gs_peer_info_t));
    uint8_t *arr = base != NULL ? base + o : NULL;
    gs_mp_reader_t r;
    gs_mp_reader_init(&r, it->raw, (size_t)(d->r.end - it->raw));
    for (size_t k = 0; k < it->len; k++) {
        gs_peer_info_t tmp, *pi = arr != NULL ? (gs_peer_info_t *)(void *)(arr + k * esize) : &tmp;
        const uint8_t *p = NULL, *ucx = NULL;
        const char *s = NULL, *host = NULL;
        uint32_t len = 0, hl = 0, ul = 0;
        uint64_t id = 0;
        int ok;
        if (it->kind == GS__IT_PEERS) {
            ok = gs__dec_peer(&r, &id, &s, &len, &host, &hl, &ucx, &ul);
            pi->id = id;
            gs__own_blob(off, base, 1, (const uint8_t *)s, len, &pi->name);
            gs__own_blob(off, base, 1, (const uint8_t *)host, hl, &pi->host);
            gs__own_blob(off, base, 0, ucx, ul, &pi->ucx_address);
        } else {
            int is_str = it->kind == GS__IT_STRS;
            gs_bytes_t *b = arr != NULL ? (gs_bytes_t *)(void *)(arr + k * esize) : &tmp.name;
            ok = is_str ? gs_mp_read_str(&r, &s, &len) : gs_mp_read_bin(&r, &p, &len);
            gs__own_blob(off, base, is_str, is_str ? (const uint8_t *)s : p, len, b);
        }
        gs_assert(ok);
        (void)ok;
    }
    if (base != NULL) {
        void *first = it->len > 0 ? arr : NULL;
        memcpy(it->dst, &first, sizeof first);
    }
}

/* Whether table item @a it is read where it lies in the payload: borrowing, little-endian, and
 * 8-byte aligned in memory (the wire aligns it to the payload's start). */
static int gs__dec_in_place(const gs__dec_t *d, const gs__item_t *it)
{
    return d->borrow && !GS__BIG_ENDIAN && ((uintptr_t)it->raw & 7u) == 0;
}

/* Lay out (fill == 0: only size) or fill (fill != 0: copy into @a base, NULL when the size was 0)
 * every recorded item; returns the size. */
static size_t gs__dec_layout(const gs__dec_t *d, uint8_t *base, int fill)
{
    size_t off = 0;
    for (unsigned i = 0; i < d->nitems; i++) {
        const gs__item_t *it = &d->items[i];
        switch (it->kind) {
        case GS__IT_TAB: {
            size_t o;
            void *p;
            if (gs__dec_in_place(d, it)) {
                p = it->len > 0 ? (void *)(uintptr_t)it->raw : NULL;
                if (fill) memcpy(it->dst, &p, sizeof p);
                break;
            }
            o = gs__place(&off, it->len, 8);
            if (base == NULL) break;
            p = it->len > 0 ? base + o : NULL;
            if (it->len > 0) {
                memcpy(p, it->raw, it->len);
                gs__from_le(p, it->len, it->width);
            }
            memcpy(it->dst, &p, sizeof p);
            break;
        }
        case GS__IT_BIN:
        case GS__IT_STR: gs__own_blob(&off, base, it->kind == GS__IT_STR, it->raw, it->len, it->dst); break;
        case GS__IT_BINS:
        case GS__IT_STRS:
        case GS__IT_PEERS: gs__own_array(d, it, &off, base); break;
        }
    }
    return off;
}

static gs_status_t gs__msg_decode(const void *payload, size_t len, int borrow, gs_msg_t *msg_p)
{
    const gs__msg_desc_t *desc = NULL;
    gs__dec_t d;
    gs_msg_t m;
    gs__why_t why;
    uint32_t nfields = 0, type = 0;
    uint8_t *base = NULL;
    size_t size;

    if (msg_p == NULL || (payload == NULL && len > 0)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_msg_decode: NULL argument");
    }
    if (len > UINT32_MAX) {
        return gs_error_set(GS_ERR_PROTO, "payload of %zu bytes exceeds the 4 GiB frame limit", len);
    }
    memset(&m, 0, sizeof m);
    d.nitems = 0;
    d.borrow = borrow;
    gs_mp_reader_init(&d.r, payload, len);
    if (gs_mp_read_array(&d.r, &nfields) && nfields == 0) gs__dec_fail(&d, "empty message array");
    if (gs_mp_read_u32(&d.r, &type)) {
        if ((desc = gs__msg_desc(type)) == NULL) {
            gs__dec_fail(&d, "unknown message type %u", type);
        } else if (desc->max_bytes != 0 && len > desc->max_bytes) {
            /* the schema's cap, before anything is parsed or allocated */
            return gs_error_set(GS_ERR_MSG_TOO_LARGE, "%s message of %zu bytes exceeds its cap of %u bytes",
                                desc->name, len, desc->max_bytes);
        } else if (nfields != desc->nfields + 1) {
            gs__dec_fail(&d, "%s message has %u fields, expected %u", desc->name, nfields, desc->nfields + 1);
        } else {
            m.type = type;
            gs__dec_body(&d, &m, desc);
        }
    }
    if (d.r.err == GS_OK && !gs_mp_at_end(&d.r)) {
        gs__dec_fail(&d, "%zu trailing bytes after the message", (size_t)(d.r.end - d.r.p));
    }
    if (d.r.err != GS_OK) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", gs_last_error());
        return gs_error_set(GS_ERR_PROTO, "malformed %s message: %s", gs_msg_type_name(type), detail);
    }

    size = gs__dec_layout(&d, NULL, 0);
    if (size > 0) {
        base = gs_malloc(size, "decoded message");
        if (base == NULL) {
            return gs_error_set(GS_ERR_NO_MEMORY, "out of memory decoding a %s message (%zu bytes)", desc->name,
                                size);
        }
        (void)gs_heap_advise_huge(base, size);   /* filled at once: few faults for a large graph */
    }
    gs__dec_layout(&d, base, 1);
    m.owned = base;
    if (!gs__msg_check(&m, &why)) {
        gs_free(base);
        return gs_error_set(GS_ERR_PROTO, "malformed %s message: %s", desc->name, why.text);
    }
    *msg_p = m;
    return GS_OK;
}

gs_status_t gs_msg_decode(const void *payload, size_t len, gs_msg_t *msg_p)
{
    return gs__msg_decode(payload, len, 0, msg_p);
}

gs_status_t gs_msg_decode_borrow(const void *payload, size_t len, gs_msg_t *msg_p)
{
    return gs__msg_decode(payload, len, 1, msg_p);
}

void gs_msg_cleanup(gs_msg_t *msg)
{
    if (msg == NULL) return;
    gs_free(msg->owned);
    msg->owned = NULL;
}
