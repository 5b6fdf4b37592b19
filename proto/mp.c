/* Bounds-checked zero-copy msgpack reader and a gs_buf_t-backed writer (see proto/mp.h). */
#include "proto/mp.h"

#include "common/error.h"
#include "common/log.h"

#include <msgpack.h>
#include <stddef.h>
#include <string.h>

#define GS_MP_MAX_DEPTH 32

_Static_assert(sizeof(msgpack_packer) <= sizeof(((gs_mp_writer_t *)0)->pk_storage),
               "pk_storage too small for msgpack_packer");
_Static_assert(offsetof(gs_mp_writer_t, pk_storage) % _Alignof(msgpack_packer) == 0,
               "pk_storage misaligned for msgpack_packer");

/* ---- reader ---- */

void gs_mp_reader_init(gs_mp_reader_t *r, const void *data, size_t len)
{
    r->start = data;
    r->p = data;
    r->end = data != NULL ? r->start + len : r->start;
    r->err = GS_OK;
}

static size_t gs__mp_off(const gs_mp_reader_t *r)
{
    return (size_t)(r->p - r->start);
}

static size_t gs__mp_left(const gs_mp_reader_t *r)
{
    return (size_t)(r->end - r->p);
}

int gs_mp_fail(gs_mp_reader_t *r, const char *what)
{
    if (r->err == GS_OK) {
        r->err = gs_error_set(GS_ERR_PROTO, "msgpack: %s at offset %zu", what, gs__mp_off(r));
    }
    return 0;
}

/* Header of an object: its type byte plus the big-endian argument that follows it. */
enum gs__mp_kind {
    GS__MP_UINT, GS__MP_INT, GS__MP_NIL, GS__MP_BOOL, GS__MP_F32, GS__MP_F64,
    GS__MP_STR, GS__MP_BIN, GS__MP_EXT, GS__MP_ARRAY, GS__MP_MAP
};

struct gs__mp_head {
    enum gs__mp_kind kind;
    uint64_t arg;      /* value (ints/bool/float bits) or length/count */
    size_t hlen;       /* header bytes (type byte + argument); ext: includes the type byte */
};
typedef struct gs__mp_head gs__mp_head_t;

static int gs__mp_peek(const gs_mp_reader_t *r, gs__mp_head_t *h);

static int gs__mp_bad_type(gs_mp_reader_t *r, const char *expected)
{
    gs__mp_head_t h;
    if (r->err != GS_OK) return 0;
    if (r->p >= r->end) {
        r->err = gs_error_set(GS_ERR_PROTO, "msgpack: expected %s at offset %zu, found end of data",
                              expected, gs__mp_off(r));
    } else if (*r->p == 0xc1) {
        r->err = gs_error_set(GS_ERR_PROTO, "msgpack: expected %s at offset %zu, found invalid type byte 0xc1",
                              expected, gs__mp_off(r));
    } else if (!gs__mp_peek(r, &h)) {
        r->err = gs_error_set(GS_ERR_PROTO, "msgpack: expected %s at offset %zu, found truncated header "
                              "(type byte 0x%02x, %zu bytes remain)", expected, gs__mp_off(r),
                              (unsigned)*r->p, gs__mp_left(r));
    } else {
        r->err = gs_error_set(GS_ERR_PROTO, "msgpack: expected %s at offset %zu, found type byte 0x%02x",
                              expected, gs__mp_off(r), (unsigned)*r->p);
    }
    return 0;
}

/* A declared length (@a unit "bytes") or count ("elements") larger than what remains. */
static int gs__mp_truncated(gs_mp_reader_t *r, const char *what, uint64_t declared, const char *unit)
{
    if (r->err != GS_OK) return 0;
    r->err = gs_error_set(GS_ERR_PROTO,
                          "msgpack: %s at offset %zu declares %llu %s but only %zu bytes remain", what,
                          gs__mp_off(r), (unsigned long long)declared, unit, gs__mp_left(r));
    return 0;
}

static uint64_t gs__mp_be(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}


/* Parse the header at r->p without consuming it. Checks that the header itself is present, not
 * that the body is. Returns 0 (without latching) when the header is truncated or invalid. */
static int gs__mp_peek(const gs_mp_reader_t *r, gs__mp_head_t *h)
{
    size_t left = gs__mp_left(r);
    uint8_t b;
    unsigned n = 0;
    if (left == 0) return 0;
    b = r->p[0];
    if (b <= 0x7f) { h->kind = GS__MP_UINT; h->arg = b; h->hlen = 1; return 1; }
    if (b >= 0xe0) { h->kind = GS__MP_INT; h->arg = (uint64_t)(int64_t)(int8_t)b; h->hlen = 1; return 1; }
    if (b <= 0x8f) { h->kind = GS__MP_MAP; h->arg = b & 0x0f; h->hlen = 1; return 1; }
    if (b <= 0x9f) { h->kind = GS__MP_ARRAY; h->arg = b & 0x0f; h->hlen = 1; return 1; }
    if (b <= 0xbf) { h->kind = GS__MP_STR; h->arg = b & 0x1f; h->hlen = 1; return 1; }
    switch (b) {
    case 0xc0: h->kind = GS__MP_NIL; h->arg = 0; h->hlen = 1; return 1;
    case 0xc2: h->kind = GS__MP_BOOL; h->arg = 0; h->hlen = 1; return 1;
    case 0xc3: h->kind = GS__MP_BOOL; h->arg = 1; h->hlen = 1; return 1;
    case 0xc4: h->kind = GS__MP_BIN; n = 1; break;
    case 0xc5: h->kind = GS__MP_BIN; n = 2; break;
    case 0xc6: h->kind = GS__MP_BIN; n = 4; break;
    case 0xc7: h->kind = GS__MP_EXT; n = 1; break;
    case 0xc8: h->kind = GS__MP_EXT; n = 2; break;
    case 0xc9: h->kind = GS__MP_EXT; n = 4; break;
    case 0xca: h->kind = GS__MP_F32; n = 4; break;
    case 0xcb: h->kind = GS__MP_F64; n = 8; break;
    case 0xcc: h->kind = GS__MP_UINT; n = 1; break;
    case 0xcd: h->kind = GS__MP_UINT; n = 2; break;
    case 0xce: h->kind = GS__MP_UINT; n = 4; break;
    case 0xcf: h->kind = GS__MP_UINT; n = 8; break;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        unsigned w = 1u << (b - 0xd0);
        uint64_t u;
        if (left < 1 + (size_t)w) return 0;
        u = gs__mp_be(r->p + 1, w);
        if (w < 8) {  /* sign-extend */
            uint64_t sign = (uint64_t)1 << (8 * w - 1);
            u = (u ^ sign) - sign;
        }
        h->kind = GS__MP_INT;
        h->arg = u;
        h->hlen = 1 + w;
        return 1;
    }
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        /* fixext: type byte + ext type + 1/2/4/8/16 data bytes; body length in arg */
        if (left < 2) return 0;
        h->kind = GS__MP_EXT;
        h->arg = (uint64_t)1 << (b - 0xd4);
        h->hlen = 2;
        return 1;
    case 0xd9: h->kind = GS__MP_STR; n = 1; break;
    case 0xda: h->kind = GS__MP_STR; n = 2; break;
    case 0xdb: h->kind = GS__MP_STR; n = 4; break;
    case 0xdc: h->kind = GS__MP_ARRAY; n = 2; break;
    case 0xdd: h->kind = GS__MP_ARRAY; n = 4; break;
    case 0xde: h->kind = GS__MP_MAP; n = 2; break;
    case 0xdf: h->kind = GS__MP_MAP; n = 4; break;
    default: return 0;  /* 0xc1: never used */
    }
    if (left < 1 + (size_t)n) return 0;
    h->arg = gs__mp_be(r->p + 1, n);
    h->hlen = 1 + n;
    if (h->kind == GS__MP_EXT) {  /* ext 8/16/32: the ext type byte follows the length */
        if (left < 2 + (size_t)n) return 0;
        h->hlen = 2 + n;
    }
    return 1;
}

/* Peek a header of @a kind (or fail naming @a expected). */
static int gs__mp_expect(gs_mp_reader_t *r, enum gs__mp_kind kind, const char *expected,
                         gs__mp_head_t *h)
{
    if (r->err != GS_OK) return 0;
    if (!gs__mp_peek(r, h) || h->kind != kind) return gs__mp_bad_type(r, expected);
    return 1;
}

/* Container of @a n entries, each made of @a per objects (1 for arrays, 2 for maps): every object
 * takes at least one byte, so a count above the remaining bytes cannot be honest. */
static int gs__mp_read_container(gs_mp_reader_t *r, enum gs__mp_kind kind, unsigned per,
                                 const char *what, uint32_t *n_p)
{
    gs__mp_head_t h;
    if (!gs__mp_expect(r, kind, what, &h)) return 0;
    if (h.arg * per > gs__mp_left(r) - h.hlen) return gs__mp_truncated(r, what, h.arg, per == 2 ? "entries" : "elements");
    r->p += h.hlen;
    *n_p = (uint32_t)h.arg;
    return 1;
}

int gs_mp_read_array(gs_mp_reader_t *r, uint32_t *n_p)
{
    return gs__mp_read_container(r, GS__MP_ARRAY, 1, "array", n_p);
}

int gs_mp_read_map(gs_mp_reader_t *r, uint32_t *n_p)
{
    return gs__mp_read_container(r, GS__MP_MAP, 2, "map", n_p);
}

int gs_mp_read_nil(gs_mp_reader_t *r)
{
    gs__mp_head_t h;
    if (!gs__mp_expect(r, GS__MP_NIL, "nil", &h)) return 0;
    r->p += h.hlen;
    return 1;
}

int gs_mp_read_bool(gs_mp_reader_t *r, int *v_p)
{
    gs__mp_head_t h;
    if (!gs__mp_expect(r, GS__MP_BOOL, "bool", &h)) return 0;
    r->p += h.hlen;
    *v_p = (int)h.arg;
    return 1;
}

/* Any integer: *neg_p says whether the value is negative (then v holds its two's complement). */
static int gs__mp_read_int(gs_mp_reader_t *r, const char *expected, uint64_t *v_p, int *neg_p)
{
    gs__mp_head_t h;
    if (r->err != GS_OK) return 0;
    /* Fast paths for the forms integer tables mostly take (a layer's chunk bounds are one
     * integer per chunk): positive fixint and uint 8/16/32. Same results as the general path. */
    if (r->p < r->end) {
        uint8_t b = r->p[0];
        size_t left = (size_t)(r->end - r->p);
        if (b <= 0x7f) {
            *v_p = b;
            *neg_p = 0;
            r->p += 1;
            return 1;
        }
        if (b >= 0xcc && b <= 0xce) {
            unsigned n = 1u << (b - 0xcc);   /* 1, 2, 4 */
            if (left > n) {
                *v_p = gs__mp_be(r->p + 1, n);
                *neg_p = 0;
                r->p += 1 + n;
                return 1;
            }
        }
    }
    if (!gs__mp_peek(r, &h) || (h.kind != GS__MP_UINT && h.kind != GS__MP_INT)) {
        return gs__mp_bad_type(r, expected);
    }
    *v_p = h.arg;
    *neg_p = h.kind == GS__MP_INT && (int64_t)h.arg < 0;
    r->p += h.hlen;
    return 1;
}

static int gs__mp_range(gs_mp_reader_t *r, const uint8_t *at, const char *what)
{
    r->p = at;  /* report the offset of the offending integer */
    return gs_mp_fail(r, what);
}

int gs_mp_read_u64(gs_mp_reader_t *r, uint64_t *v_p)
{
    const uint8_t *at = r->p;
    uint64_t v;
    int neg;
    if (!gs__mp_read_int(r, "unsigned integer", &v, &neg)) return 0;
    if (neg) return gs__mp_range(r, at, "negative integer where an unsigned one is expected");
    *v_p = v;
    return 1;
}

int gs_mp_read_i64(gs_mp_reader_t *r, int64_t *v_p)
{
    const uint8_t *at = r->p;
    uint64_t v;
    int neg;
    if (!gs__mp_read_int(r, "integer", &v, &neg)) return 0;
    if (!neg && v > (uint64_t)INT64_MAX) return gs__mp_range(r, at, "integer above INT64_MAX");
    *v_p = (int64_t)v;
    return 1;
}

int gs_mp_read_u32(gs_mp_reader_t *r, uint32_t *v_p)
{
    const uint8_t *at = r->p;
    uint64_t v;
    int neg;
    if (!gs__mp_read_int(r, "unsigned integer", &v, &neg)) return 0;
    if (neg) return gs__mp_range(r, at, "negative integer where an unsigned one is expected");
    if (v > UINT32_MAX) return gs__mp_range(r, at, "integer above UINT32_MAX");
    *v_p = (uint32_t)v;
    return 1;
}

int gs_mp_read_i32(gs_mp_reader_t *r, int32_t *v_p)
{
    const uint8_t *at = r->p;
    uint64_t v;
    int neg;
    if (!gs__mp_read_int(r, "integer", &v, &neg)) return 0;
    if (neg ? (int64_t)v < INT32_MIN : v > (uint64_t)INT32_MAX) {
        return gs__mp_range(r, at, "integer outside the int32 range");
    }
    *v_p = (int32_t)(int64_t)v;
    return 1;
}

int gs_mp_read_f64(gs_mp_reader_t *r, double *v_p)
{
    gs__mp_head_t h;
    if (r->err != GS_OK) return 0;
    if (!gs__mp_peek(r, &h)) return gs__mp_bad_type(r, "number");
    switch (h.kind) {
    case GS__MP_F64: {
        double d;
        memcpy(&d, &h.arg, sizeof d);
        *v_p = d;
        break;
    }
    case GS__MP_F32: {
        uint32_t bits = (uint32_t)h.arg;
        float f;
        memcpy(&f, &bits, sizeof f);
        *v_p = (double)f;
        break;
    }
    case GS__MP_UINT: *v_p = (double)h.arg; break;
    case GS__MP_INT: *v_p = (double)(int64_t)h.arg; break;
    default: return gs__mp_bad_type(r, "number");
    }
    r->p += h.hlen;
    return 1;
}

static int gs__mp_read_blob(gs_mp_reader_t *r, enum gs__mp_kind kind, const char *what,
                            const uint8_t **p_p, uint32_t *len_p)
{
    gs__mp_head_t h;
    if (!gs__mp_expect(r, kind, what, &h)) return 0;
    if (h.arg > gs__mp_left(r) - h.hlen) return gs__mp_truncated(r, what, h.arg, "bytes");
    *p_p = r->p + h.hlen;
    *len_p = (uint32_t)h.arg;
    r->p += h.hlen + (size_t)h.arg;
    return 1;
}

int gs_mp_read_str(gs_mp_reader_t *r, const char **s_p, uint32_t *len_p)
{
    const uint8_t *p;
    uint32_t len;
    if (!gs__mp_read_blob(r, GS__MP_STR, "str", &p, &len)) return 0;
    *s_p = (const char *)p;
    *len_p = len;
    return 1;
}

int gs_mp_read_bin(gs_mp_reader_t *r, const uint8_t **p_p, uint32_t *len_p)
{
    return gs__mp_read_blob(r, GS__MP_BIN, "bin", p_p, len_p);
}

static int gs__mp_skip(gs_mp_reader_t *r, int depth)
{
    gs__mp_head_t h;
    uint64_t n, i;
    if (r->err != GS_OK) return 0;
    if (!gs__mp_peek(r, &h)) return gs__mp_bad_type(r, "msgpack object");
    switch (h.kind) {
    case GS__MP_STR:
    case GS__MP_BIN:
    case GS__MP_EXT:
        if (h.arg > gs__mp_left(r) - h.hlen) return gs__mp_truncated(r, "object", h.arg, "bytes");
        r->p += h.hlen + (size_t)h.arg;
        return 1;
    case GS__MP_ARRAY:
    case GS__MP_MAP:
        if (depth >= GS_MP_MAX_DEPTH) return gs_mp_fail(r, "nesting deeper than 32 levels");
        n = h.kind == GS__MP_MAP ? 2 * h.arg : h.arg;
        if (n > gs__mp_left(r) - h.hlen) return gs__mp_truncated(r, "container", h.arg, "elements");
        r->p += h.hlen;
        for (i = 0; i < n; i++) {
            if (!gs__mp_skip(r, depth + 1)) return 0;
        }
        return 1;
    default:
        r->p += h.hlen;
        return 1;
    }
}

int gs_mp_skip(gs_mp_reader_t *r)
{
    return gs__mp_skip(r, 0);
}

int gs_mp_at_end(const gs_mp_reader_t *r)
{
    return r->err == GS_OK && r->p == r->end;
}

/* ---- writer ---- */

static int gs__mp_write_cb(void *data, const char *buf, size_t len)
{
    gs_mp_writer_t *w = data;
    if (w->err != GS_OK) return -1;
    if (gs_buf_append(w->out, buf, len) != GS_OK) {
        w->err = gs_error_set(GS_ERR_NO_MEMORY, "msgpack: out of memory appending %zu bytes", len);
        return -1;
    }
    return 0;
}

/* The packer lives inside the writer and points back at it: a writer must not be copied or
 * moved after gs_mp_writer_init(). */
void gs_mp_writer_init(gs_mp_writer_t *w, gs_buf_t *out)
{
    w->out = out;
    w->err = GS_OK;
    w->pk = w->pk_storage;
    msgpack_packer_init((msgpack_packer *)w->pk, w, gs__mp_write_cb);
}

#define GS__MP_PK(w) ((msgpack_packer *)(w)->pk)

/* Lengths above 32 bits cannot be represented in msgpack. */
static int gs__mp_len_ok(gs_mp_writer_t *w, size_t len)
{
    if (w->err != GS_OK) return 0;
    if ((uint64_t)len > UINT32_MAX) {
        w->err = gs_error_set(GS_ERR_MSG_TOO_LARGE, "msgpack: %zu bytes exceed the 4 GiB str/bin limit",
                              len);
        return 0;
    }
    return 1;
}

void gs_mp_write_array(gs_mp_writer_t *w, uint32_t n)
{
    if (w->err == GS_OK) msgpack_pack_array(GS__MP_PK(w), n);
}

void gs_mp_write_map(gs_mp_writer_t *w, uint32_t n)
{
    if (w->err == GS_OK) msgpack_pack_map(GS__MP_PK(w), n);
}

void gs_mp_write_nil(gs_mp_writer_t *w)
{
    if (w->err == GS_OK) msgpack_pack_nil(GS__MP_PK(w));
}

void gs_mp_write_bool(gs_mp_writer_t *w, int v)
{
    if (w->err != GS_OK) return;
    if (v) {
        msgpack_pack_true(GS__MP_PK(w));
    } else {
        msgpack_pack_false(GS__MP_PK(w));
    }
}

void gs_mp_write_u64(gs_mp_writer_t *w, uint64_t v)
{
    if (w->err == GS_OK) msgpack_pack_uint64(GS__MP_PK(w), v);
}

void gs_mp_write_i64(gs_mp_writer_t *w, int64_t v)
{
    if (w->err == GS_OK) msgpack_pack_int64(GS__MP_PK(w), v);
}

/* A packer writing into space already reserved (gs_mp_write_i64s): no size check per call. */
static int gs__mp_reserved_cb(void *data, const char *buf, size_t len)
{
    uint8_t **p = data;
    memcpy(*p, buf, len);
    *p += len;
    return 0;
}

void gs_mp_write_i64s(gs_mp_writer_t *w, const int64_t *v, size_t n)
{
    uint8_t *p;
    msgpack_packer pk;
    if (w->err != GS_OK || n == 0) return;
    /* msgpack_pack_int64 writes at most 9 bytes: reserve them all once */
    if (n > SIZE_MAX / 9 || gs_buf_reserve(w->out, n * 9) != GS_OK) {
        w->err = gs_error_set(GS_ERR_NO_MEMORY, "msgpack: out of memory appending %zu integers", n);
        return;
    }
    p = w->out->data + w->out->len;
    msgpack_packer_init(&pk, &p, gs__mp_reserved_cb);
    for (size_t i = 0; i < n; i++) msgpack_pack_int64(&pk, v[i]);
    w->out->len = (size_t)(p - w->out->data);
}

void gs_mp_write_f64(gs_mp_writer_t *w, double v)
{
    if (w->err == GS_OK) msgpack_pack_double(GS__MP_PK(w), v);
}

void gs_mp_write_str(gs_mp_writer_t *w, const char *s, size_t len)
{
    if (!gs__mp_len_ok(w, len)) return;
    if (msgpack_pack_str(GS__MP_PK(w), len) == 0 && len > 0) {
        msgpack_pack_str_body(GS__MP_PK(w), s, len);
    }
}

void gs_mp_write_bin(gs_mp_writer_t *w, const void *p, size_t len)
{
    if (!gs__mp_len_ok(w, len)) return;
    if (msgpack_pack_bin(GS__MP_PK(w), len) == 0 && len > 0) {
        msgpack_pack_bin_body(GS__MP_PK(w), p, len);
    }
}

void gs_mp_write_bin_head(gs_mp_writer_t *w, size_t len)
{
    if (!gs__mp_len_ok(w, len)) return;
    msgpack_pack_bin(GS__MP_PK(w), len);
}

void gs_mp_write_bin32_padded(gs_mp_writer_t *w, unsigned pad, const void *p, size_t len)
{
    static const uint8_t zeros[8] = {0};
    uint8_t head[5];
    uint32_t n;
    gs_assert_always(pad < 8);
    if (!gs__mp_len_ok(w, len) || !gs__mp_len_ok(w, len + pad)) return;
    n = (uint32_t)(len + pad);
    head[0] = 0xc6;
    head[1] = (uint8_t)(n >> 24);
    head[2] = (uint8_t)(n >> 16);
    head[3] = (uint8_t)(n >> 8);
    head[4] = (uint8_t)n;
    if (gs_buf_append(w->out, head, sizeof head) != GS_OK || gs_buf_append(w->out, zeros, pad) != GS_OK ||
        (len > 0 && gs_buf_append(w->out, p, len) != GS_OK)) {
        w->err = gs_error_set(GS_ERR_NO_MEMORY, "msgpack: out of memory appending a bin of %zu bytes", len);
    }
}
