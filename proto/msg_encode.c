/*
 * Message encoder (see proto/msg.h), derived from the schema table (proto/msg_schema.h): the
 * payload is the msgpack array [type, field...] with one element per table entry, in order.
 * Integer tables are msgpack `bin` (always the 5-byte bin 32 header) holding 0 to 7 zero bytes of
 * padding and then the little-endian fixed-width values, which so start at a multiple of 8 bytes
 * from the payload's start (protocol version 3): a receiver whose payload is 8-byte aligned reads
 * them in place (gs_msg_decode_borrow). The semantic checks run first (GS_ERR_INVALID_PARAM), so
 * every message that encodes also decodes.
 */
#include "proto/msg.h"

#include "common/alloc.h"
#include "common/error.h"
#include "proto/mp.h"
#include "proto/msg_codec.h"

#include <string.h>

static void gs__st_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static void gs__w_str(gs_mp_writer_t *w, const gs_str_t *s)
{
    gs_mp_write_str(w, (const char *)s->data, s->len);
}

static void gs__w_bytes(gs_mp_writer_t *w, const gs_bytes_t *b)
{
    gs_mp_write_bin(w, b->data, b->len);
}

/* Padding that puts a table's first entry at a multiple of 8 bytes from the payload, which starts
 * at offset @a base of the output (after the 5-byte bin 32 header). */
static unsigned gs__w_pad(const gs_mp_writer_t *w, size_t base)
{
    return (unsigned)(0u - (unsigned)(w->out->len + 5 - base)) & 7u;
}

/* A table of @a n entries of @a width bytes (host order in memory, little-endian on the wire),
 * 8-byte aligned from the payload's start at offset @a base of the output. */
static void gs__w_table(gs_mp_writer_t *w, size_t base, const void *p, uint64_t n, unsigned width,
                        const char *what)
{
    if (w->err != GS_OK) return;
    if (n > UINT32_MAX / width) {
        w->err = gs_error_set(GS_ERR_MSG_TOO_LARGE, "%s: %llu entries of %u bytes exceed the 4 GiB bin limit",
                              what, (unsigned long long)n, width);
        return;
    }
#if GS__BIG_ENDIAN
    {
        size_t len = (size_t)n * width;
        uint8_t *tmp = gs_malloc(len, "le table");
        if (tmp == NULL) {
            w->err = gs_error_set(GS_ERR_NO_MEMORY, "%s: out of memory converting to little-endian", what);
            return;
        }
        for (size_t i = 0; i < len; i += width) {
            for (unsigned k = 0; k < width; k++) tmp[i + k] = ((const uint8_t *)p)[i + width - 1 - k];
        }
        gs_mp_write_bin32_padded(w, gs__w_pad(w, base), tmp, len);
        gs_free(tmp);
    }
#else
    gs_mp_write_bin32_padded(w, gs__w_pad(w, base), p, (size_t)n * width);
#endif
}

/* Entries of a table counted @a count times @a per (saturated: an oversized one reports the error). */
static uint64_t gs__entries(uint64_t count, unsigned per)
{
    if (per == 1) return count;
    return count > UINT32_MAX ? UINT64_MAX : per * count;
}

/* CSR offsets: count + 1 entries; NULL (no tasks) is sent as [0]. */
static void gs__w_csr(gs_mp_writer_t *w, size_t base, const uint64_t *dep_off, uint64_t ntasks, const char *what)
{
    static const uint64_t zero = 0;
    if (dep_off == NULL) {
        gs__w_table(w, base, &zero, 1, 8, what);
    } else if (ntasks >= UINT32_MAX) {
        gs__w_table(w, base, dep_off, UINT64_MAX, 8, what);  /* reports the size error */
    } else {
        gs__w_table(w, base, dep_off, ntasks + 1, 8, what);
    }
}

static void gs__w_array(gs_mp_writer_t *w, const void *body, const gs__field_t *f)
{
    const void *p = gs__field_ptr(body, f);
    uint32_t n = (uint32_t)gs__field_count(body, f);
    gs_mp_write_array(w, n);
    for (uint32_t i = 0; i < n; i++) {
        if (f->kind == GS__F_STRS) {
            gs__w_str(w, &((const gs_str_t *)p)[i]);
        } else if (f->kind == GS__F_BINS) {
            gs__w_bytes(w, &((const gs_bytes_t *)p)[i]);
        } else {
            const gs_peer_info_t *pi = &((const gs_peer_info_t *)p)[i];
            gs_mp_write_array(w, 4);
            gs_mp_write_u64(w, pi->id);
            gs__w_str(w, &pi->name);
            gs__w_str(w, &pi->host);
            gs__w_bytes(w, &pi->ucx_address);
        }
    }
}

/* Every field of the (checked) message, whose payload starts at offset @a base of the output; with
 * @a head_only, a CHUNK field gets only its bin header. */
static void gs__w_body(gs_mp_writer_t *w, size_t base, const gs_msg_t *m, const gs__msg_desc_t *d, int head_only)
{
    const void *body = &m->u;
    uint64_t ndeps = 0;
    for (unsigned i = 0; i < d->nfields; i++) {
        const gs__field_t *f = &d->fields[i];
        switch (f->kind) {
        case GS__F_UINT: gs_mp_write_u64(w, gs__uint_at(body, f->off, f->size)); break;
        case GS__F_INT: {
            int32_t v;
            memcpy(&v, gs__field_at(body, f), sizeof v);
            gs_mp_write_i64(w, v);
            break;
        }
        case GS__F_STR: gs__w_str(w, gs__field_at(body, f)); break;
        case GS__F_BIN: gs__w_bytes(w, gs__field_at(body, f)); break;
        case GS__F_CHUNK:
            if (head_only) {
                gs_mp_write_bin_head(w, ((const gs_bytes_t *)gs__field_at(body, f))->len);
            } else {
                gs__w_bytes(w, gs__field_at(body, f));
            }
            break;
        case GS__F_TAB:
            gs__w_table(w, base, gs__field_ptr(body, f), gs__entries(gs__field_count(body, f), f->per), f->size,
                        f->name);
            break;
        case GS__F_CSR:
            gs__w_csr(w, base, gs__field_ptr(body, f), gs__field_count(body, f), f->name);
            ndeps = gs__csr_ndeps(body, f);
            break;
        case GS__F_DTAB:
            gs__w_table(w, base, gs__field_ptr(body, f), gs__entries(ndeps, f->per), f->size, f->name);
            break;
        case GS__F_STRS:
        case GS__F_BINS:
        case GS__F_PEERS: gs__w_array(w, body, f); break;
        }
    }
}

static uint64_t gs__sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t gs__sat_mul(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* Rough payload size of the bulky parts, so large frames are reserved once instead of grown by
 * doubling (a 600 MB chunk would otherwise leave a 1 GiB buffer behind). With @a head_only the
 * chunk is left out. */
static uint64_t gs__msg_size_hint(const gs_msg_t *m, const gs__msg_desc_t *d, int head_only)
{
    const void *body = &m->u;
    uint64_t s = 64, ndeps = 0;
    for (unsigned i = 0; i < d->nfields; i++) {
        const gs__field_t *f = &d->fields[i];
        switch (f->kind) {
        case GS__F_CHUNK:
            if (head_only) break;
            /* fall through */
        case GS__F_BIN: s = gs__sat_add(s, ((const gs_bytes_t *)gs__field_at(body, f))->len); break;
        case GS__F_TAB:
            s = gs__sat_add(s, 12 + gs__sat_mul(gs__field_count(body, f), (uint64_t)f->per * f->size));
            break;
        case GS__F_CSR:
            ndeps = gs__csr_ndeps(body, f);
            s = gs__sat_add(s, 20 + gs__sat_mul(gs__field_count(body, f), 8));
            break;
        case GS__F_DTAB: s = gs__sat_add(s, 12 + gs__sat_mul(ndeps, (uint64_t)f->per * f->size)); break;
        case GS__F_BINS: {
            const gs_bytes_t *b = gs__field_ptr(body, f);
            uint64_t n = gs__field_count(body, f);
            for (uint64_t k = 0; k < n; k++) s = gs__sat_add(s, b[k].len + 8);
            break;
        }
        default: break;
        }
    }
    return s;
}

static gs_status_t gs__msg_encode(const gs_msg_t *msg, gs_buf_t *out, int head_only, int spare,
                                  size_t *tail_len_p)
{
    static const uint8_t header[GS_PROTO_FRAME_HEADER] = {0};
    const gs__msg_desc_t *d;
    gs_mp_writer_t w;
    gs__why_t why;
    size_t start, payload, tail;
    uint64_t hint;

    if (msg == NULL || out == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_msg_encode: NULL argument");
    if ((d = gs__msg_desc(msg->type)) == NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "cannot encode unknown message type %u", msg->type);
    }
    if (!gs__msg_check(msg, &why)) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "cannot encode %s message: %s", d->name, why.text);
    }
    head_only = head_only && msg->type == GS_MSG_DATA;
    tail = head_only ? msg->u.data.data.len : 0;
    hint = gs__msg_size_hint(msg, d, head_only);
    if (spare && out->data == NULL && hint <= UINT32_MAX) {
        /* a large frame into a buffer an earlier one left, its pages already in */
        size_t cap = 0;
        uint8_t *p = gs_frame_storage_take(GS_PROTO_FRAME_HEADER + (size_t)hint, &cap);
        if (p != NULL) {
            out->data = p;
            out->len = 0;
            out->cap = cap;
        }
    }
    if (hint <= UINT32_MAX && gs_buf_reserve(out, GS_PROTO_FRAME_HEADER + (size_t)hint) != GS_OK) {
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory encoding a %s message of about %llu bytes", d->name,
                            (unsigned long long)hint);
    }
    start = out->len;
    if (gs_buf_append(out, header, sizeof header) != GS_OK) {
        return gs_error_set(GS_ERR_NO_MEMORY, "out of memory encoding a %s message", d->name);
    }
    gs_mp_writer_init(&w, out);
    gs_mp_write_array(&w, d->nfields + 1);
    gs_mp_write_u64(&w, msg->type);
    gs__w_body(&w, start + GS_PROTO_FRAME_HEADER, msg, d, head_only);
    if (w.err != GS_OK) {
        out->len = start;
        return w.err;  /* message set where it latched */
    }
    payload = out->len - start - GS_PROTO_FRAME_HEADER;
    if ((uint64_t)payload + (uint64_t)tail > UINT32_MAX) {
        out->len = start;
        return gs_error_set(GS_ERR_MSG_TOO_LARGE, "%s message of %zu bytes exceeds the 4 GiB frame limit", d->name,
                            payload + tail);
    }
    gs__st_le32(out->data + start, (uint32_t)(payload + tail));
    if (tail_len_p != NULL) *tail_len_p = tail;
    return GS_OK;
}

gs_status_t gs_msg_encode(const gs_msg_t *msg, gs_buf_t *out)
{
    return gs__msg_encode(msg, out, 0, 0, NULL);
}

gs_status_t gs_msg_encode_spare(const gs_msg_t *msg, gs_buf_t *out)
{
    if (out == NULL || out->data != NULL) {
        return gs_error_set(GS_ERR_INVALID_PARAM, "gs_msg_encode_spare: needs an empty buffer");
    }
    return gs__msg_encode(msg, out, 0, 1, NULL);
}

gs_status_t gs_msg_encode_head(const gs_msg_t *msg, gs_buf_t *out, size_t *tail_len_p)
{
    if (tail_len_p == NULL) return gs_error_set(GS_ERR_INVALID_PARAM, "gs_msg_encode_head: NULL argument");
    return gs__msg_encode(msg, out, 1, 0, tail_len_p);
}
