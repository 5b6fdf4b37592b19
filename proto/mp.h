/**
 * Minimal msgpack reading and writing used by every codec in gsched (messages in proto/, layers
 * in graph/).
 *
 * Reading is a bounds-checked, zero-copy cursor: it never allocates, never reads past `end`, and
 * never trusts a declared length (unlike msgpack-c's object unpacker, which allocates storage for
 * declared array sizes before seeing the elements). On the first error the reader latches
 * `err = GS_ERR_PROTO` (message via gs_error_set naming what was expected at which offset) and
 * every later call fails, so decoders may check once at the end.
 *
 * Writing appends to a gs_buf_t through msgpack-c's packer (msgpack_packer with a gs_buf_t write
 * callback); the first allocation failure latches GS_ERR_NO_MEMORY in the writer.
 */
#ifndef GS_PROTO_MP_H
#define GS_PROTO_MP_H

#include "common/buf.h"

#include <gsched/status.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gs_mp_reader {
    const uint8_t *start;
    const uint8_t *p;
    const uint8_t *end;
    gs_status_t err;
} gs_mp_reader_t;

void gs_mp_reader_init(gs_mp_reader_t *r, const void *data, size_t len);
/* Each returns 1 on success, 0 on failure (then r->err != GS_OK and outputs are untouched). */
int gs_mp_read_array(gs_mp_reader_t *r, uint32_t *n_p);
int gs_mp_read_map(gs_mp_reader_t *r, uint32_t *n_p);
int gs_mp_read_nil(gs_mp_reader_t *r);
int gs_mp_read_bool(gs_mp_reader_t *r, int *v_p);
int gs_mp_read_u64(gs_mp_reader_t *r, uint64_t *v_p);     /* positive ints only */
int gs_mp_read_i64(gs_mp_reader_t *r, int64_t *v_p);      /* any int that fits */
int gs_mp_read_u32(gs_mp_reader_t *r, uint32_t *v_p);     /* range-checked */
int gs_mp_read_i32(gs_mp_reader_t *r, int32_t *v_p);      /* range-checked */
int gs_mp_read_f64(gs_mp_reader_t *r, double *v_p);       /* float32/float64 (and ints) */
int gs_mp_read_str(gs_mp_reader_t *r, const char **s_p, uint32_t *len_p);   /* not NUL-terminated */
int gs_mp_read_bin(gs_mp_reader_t *r, const uint8_t **p_p, uint32_t *len_p);
/** Skip one object of any type (nesting depth limited to 32). */
int gs_mp_skip(gs_mp_reader_t *r);
/** 1 when the cursor is exactly at the end. */
int gs_mp_at_end(const gs_mp_reader_t *r);
/** Latch a semantic error (e.g. a count that does not match) with a message; returns 0. */
int gs_mp_fail(gs_mp_reader_t *r, const char *what);

typedef struct gs_mp_writer {
    gs_buf_t *out;
    gs_status_t err;
    void *pk;             /* msgpack_packer, private */
    unsigned char pk_storage[64];
} gs_mp_writer_t;

void gs_mp_writer_init(gs_mp_writer_t *w, gs_buf_t *out);
void gs_mp_write_array(gs_mp_writer_t *w, uint32_t n);
void gs_mp_write_map(gs_mp_writer_t *w, uint32_t n);
void gs_mp_write_nil(gs_mp_writer_t *w);
void gs_mp_write_bool(gs_mp_writer_t *w, int v);
void gs_mp_write_u64(gs_mp_writer_t *w, uint64_t v);
void gs_mp_write_i64(gs_mp_writer_t *w, int64_t v);
/** The @a n values of @a v, each exactly as gs_mp_write_i64 writes it (no array header), in
 *  one reservation: for long integer lists (chunk bounds). @a v is only read. */
void gs_mp_write_i64s(gs_mp_writer_t *w, const int64_t *v, size_t n);
void gs_mp_write_f64(gs_mp_writer_t *w, double v);
void gs_mp_write_str(gs_mp_writer_t *w, const char *s, size_t len);
void gs_mp_write_bin(gs_mp_writer_t *w, const void *p, size_t len);
/** Only the header of a bin of @a len bytes; the caller supplies the bytes after it. */
void gs_mp_write_bin_head(gs_mp_writer_t *w, size_t len);
/** A bin of @a pad (0 .. 7) zero bytes followed by the @a len bytes at @a p (only read; may be
 *  NULL when @a len is 0), its header always in the 5-byte bin 32 form whatever the length, so
 *  the caller knows where the bytes land: 5 + @a pad bytes after the output's current end (the
 *  protocol's 8-byte aligned tables, proto/msg_encode.c). */
void gs_mp_write_bin32_padded(gs_mp_writer_t *w, unsigned pad, const void *p, size_t len);

#ifdef __cplusplus
}
#endif
#endif
