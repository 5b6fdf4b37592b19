/* DATA without copying its bytes: encode_head (the header, the payload sent from the caller's
 * buffer) and decode_borrow (the payload left in the frame), against encode and decode. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "proto/mp.h"
#include "proto/msg.h"
#include "proto/msg_codec.h"
#include "samples.h"

Test(proto_msg, encode_head_plus_data_bytes_equals_encode_for_every_size)
{
    static const size_t sizes[] = {0, 1, 31, 255, 256, 65535, 65536, 70001, 3u << 20};
    uint8_t *bytes = gs_malloc(3u << 20, "test bytes");
    cr_assert_not_null(bytes);
    for (size_t k = 0; k < 3u << 20; k++) bytes[k] = (uint8_t)(k * 13 + 1);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        gs_msg_t m = {.type = GS_MSG_DATA};
        gs_buf_t full, head;
        size_t tail = 12345;
        m.u.data.req_id = 1u << 20;
        m.u.data.graph_id = 7;
        m.u.data.task_id = (uint64_t)1 << 40;
        m.u.data.status = i % 2 ? GS_OK : GS_ERR_NOT_FOUND;
        m.u.data.data = (gs_bytes_t){sizes[i] ? bytes : NULL, sizes[i]};
        gs_buf_init(&full);
        gs_buf_init(&head);
        cr_assert_eq(gs_msg_encode(&m, &full), GS_OK);
        cr_assert_eq(gs_msg_encode_head(&m, &head, &tail), GS_OK, "%s", gs_last_error());
        cr_assert_eq(tail, sizes[i]);
        cr_assert_eq(head.len + tail, full.len, "size %zu", sizes[i]);
        cr_assert(memcmp(head.data, full.data, head.len) == 0, "head differs at size %zu", sizes[i]);
        cr_assert(tail == 0 || memcmp(full.data + head.len, bytes, tail) == 0);
        cr_assert_lt(head.cap, 4096u, "the head does not reserve room for the bytes");
        gs_buf_cleanup(&full);
        gs_buf_cleanup(&head);
    }
    /* other types: the whole frame */
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_msg_t m;
        gs_buf_t full, head;
        size_t tail = 99;
        sample_msg(t, &m);
        gs_buf_init(&full);
        gs_buf_init(&head);
        cr_assert_eq(gs_msg_encode(&m, &full), GS_OK);
        cr_assert_eq(gs_msg_encode_head(&m, &head, &tail), GS_OK);
        if (t == GS_MSG_DATA) {
            cr_assert_eq(head.len + tail, full.len);
        } else {
            cr_assert_eq(tail, 0);
            cr_assert_eq(head.len, full.len);
            cr_assert(memcmp(head.data, full.data, full.len) == 0, "%s differs", gs_msg_type_name(t));
        }
        gs_buf_cleanup(&full);
        gs_buf_cleanup(&head);
    }
    gs_free(bytes);
    proto_check_no_leaks();
}

Test(proto_msg, encode_head_rejects_what_encode_rejects_and_leaves_output)
{
    gs_msg_t m = {.type = GS_MSG_DATA};
    gs_buf_t b;
    size_t tail = 5;
    gs_buf_init(&b);
    m.u.data.data = (gs_bytes_t){NULL, 10};  /* bytes announced, none given */
    cr_assert_eq(gs_msg_encode_head(&m, &b, &tail), GS_ERR_INVALID_PARAM);
    cr_assert_eq(b.len, 0);
    cr_assert_eq(tail, 5, "untouched on error");
    cr_assert_eq(gs_msg_encode_head(&m, &b, NULL), GS_ERR_INVALID_PARAM);
    m.type = 0;
    cr_assert_eq(gs_msg_encode_head(&m, &b, &tail), GS_ERR_INVALID_PARAM);
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_msg, decode_borrow_points_data_into_the_payload_and_owns_the_rest)
{
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_buf_t b;
        gs_msg_t a, m;
        gs_buf_init(&b);
        sample_frame(t, &b);
        cr_assert_eq(gs_msg_decode(b.data + 4, b.len - 4, &a), GS_OK);
        cr_assert_eq(gs_msg_decode_borrow(b.data + 4, b.len - 4, &m), GS_OK, "%s", gs_last_error());
        assert_msg_eq(&a, &m);
        if (t == GS_MSG_DATA && m.u.data.data.len > 0) {
            cr_assert_geq(m.u.data.data.data, b.data + 4);
            cr_assert_eq(m.u.data.data.data + m.u.data.data.len, b.data + b.len, "the bin ends the payload");
        }
        gs_msg_cleanup(&a);
        gs_msg_cleanup(&m);
        gs_buf_cleanup(&b);
    }
    /* a DATA message borrows everything: nothing is allocated */
    gs_buf_t b;
    gs_msg_t m;
    gs_buf_init(&b);
    sample_frame(GS_MSG_DATA, &b);
    gs_alloc_fail_after(0);
    gs_status_t st = gs_msg_decode_borrow(b.data + 4, b.len - 4, &m);
    gs_alloc_fail_after(-1);
    cr_assert_eq(st, GS_OK);
    cr_assert_null(m.owned);
    gs_msg_cleanup(&m);
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}

Test(proto_msg, decode_borrow_rejects_every_truncation_and_flipped_byte)
{
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_buf_t b;
        gs_buf_init(&b);
        sample_frame(t, &b);
        size_t before = live_heap_blocks();
        for (size_t cut = 0; cut < b.len - 4; cut++) {
            gs_msg_t m;
            cr_assert_eq(gs_msg_decode_borrow(b.data + 4, cut, &m), GS_ERR_PROTO, "%s cut at %zu",
                         gs_msg_type_name(t), cut);
        }
        for (size_t i = 4; i < b.len; i++) {
            gs_msg_t m, n;
            b.data[i] ^= 0x5a;
            gs_status_t s1 = gs_msg_decode(b.data + 4, b.len - 4, &m);
            gs_status_t s2 = gs_msg_decode_borrow(b.data + 4, b.len - 4, &n);
            cr_assert_eq(s1, s2, "%s byte %zu: decode %s, borrow %s", gs_msg_type_name(t), i, gs_status_name(s1),
                         gs_status_name(s2));
            if (s1 == GS_OK) {
                assert_msg_eq(&m, &n);
                gs_msg_cleanup(&m);
                gs_msg_cleanup(&n);
            }
            b.data[i] ^= 0x5a;
        }
        cr_assert_eq(live_heap_blocks(), before);
        gs_buf_cleanup(&b);
    }
    proto_check_no_leaks();
}

/* Where decode_borrow leaves the integer tables of a message: in @a payload (an 8-byte aligned
 * payload on a little-endian host) or in the message's own storage. Returns the number of
 * non-empty tables; *in_payload_p counts those inside the payload. */
static unsigned tables_in(const gs_msg_t *m, const uint8_t *payload, size_t len, unsigned *in_payload_p)
{
    const gs__msg_desc_t *d = gs__msg_desc(m->type);
    unsigned n = 0, in = 0;
    for (unsigned i = 0; i < d->nfields; i++) {
        const gs__field_t *f = &d->fields[i];
        const uint8_t *p;
        if (f->kind != GS__F_TAB && f->kind != GS__F_CSR && f->kind != GS__F_DTAB) continue;
        p = gs__field_ptr(&m->u, f);
        if (p == NULL) continue;
        n++;
        cr_assert_eq((uintptr_t)p & 7u, 0, "%s.%s is not 8-byte aligned", gs_msg_type_name(m->type), f->name);
        if (p >= payload && p < payload + len) in++;
    }
    *in_payload_p = in;
    return n;
}

Test(proto_msg, decode_borrow_reads_tables_in_an_aligned_payload_and_copies_otherwise)
{
    unsigned total_in_place = 0;
    for (uint32_t t = FIRST_TYPE; t <= LAST_TYPE; t++) {
        gs_buf_t b;
        gs_msg_t a, m;
        size_t len;
        uint8_t *mem;
        unsigned n, in;
        gs_buf_init(&b);
        sample_frame(t, &b);
        len = b.len - 4;
        mem = gs_malloc(len + 8, "test payload");   /* malloc: 16-byte aligned */
        cr_assert_not_null(mem);
        cr_assert_eq((uintptr_t)mem & 7u, 0);
        cr_assert_eq(gs_msg_decode(b.data + 4, len, &a), GS_OK);
        /* aligned: every table in place (little-endian hosts) */
        memcpy(mem, b.data + 4, len);
        cr_assert_eq(gs_msg_decode_borrow(mem, len, &m), GS_OK, "%s", gs_last_error());
        assert_msg_eq(&a, &m);
        n = tables_in(&m, mem, len, &in);
        cr_assert_eq(in, GS__BIG_ENDIAN ? 0 : n, "%s: %u of %u tables in place", gs_msg_type_name(t), in, n);
        total_in_place += in;
        gs_msg_cleanup(&m);
        /* not aligned in memory: copied (aligned), same message */
        memmove(mem + 3, mem, len);
        cr_assert_eq(gs_msg_decode_borrow(mem + 3, len, &m), GS_OK, "%s", gs_last_error());
        assert_msg_eq(&a, &m);
        (void)tables_in(&m, mem + 3, len, &in);
        cr_assert_eq(in, 0, "%s: a table left at a misaligned address", gs_msg_type_name(t));
        gs_msg_cleanup(&m);
        /* gs_msg_decode always copies */
        memmove(mem, mem + 3, len);
        (void)tables_in(&a, mem, len, &in);
        cr_assert_eq(in, 0);
        gs_msg_cleanup(&a);
        gs_free(mem);
        gs_buf_cleanup(&b);
    }
    if (!GS__BIG_ENDIAN) cr_assert_gt(total_in_place, 0, "the samples have tables");
    proto_check_no_leaks();
}

Test(proto_msg, refuses_tables_without_their_zero_padding)
{
    static uint8_t keys[256 * 16];
    gs_buf_t b;
    gs_mp_writer_t w;
    gs_msg_t m;
    size_t before;
    gs_buf_init(&b);
    /* [3, RELEASE, 256, keys]: the keys' bin starts 5 bytes in, so 6 bytes of padding follow its
     * bin 32 header (variant 2: a version 2 table, unpadded behind the minimal bin 16 header) */
    for (int variant = 0; variant < 4; variant++) {
        b.len = 0;
        gs_mp_writer_init(&w, &b);
        gs_mp_write_array(&w, 3);
        gs_mp_write_u64(&w, GS_MSG_RELEASE);
        if (variant == 2) {
            gs_buf_append(&b, "\xce\0\0\1\0", 5);   /* 256 as uint 32: the bin 16 data lands 10 bytes in */
        } else {
            gs_mp_write_u64(&w, 256);
        }
        if (variant == 0) gs_mp_write_bin32_padded(&w, 6, keys, sizeof keys);    /* well-formed */
        if (variant == 1) gs_mp_write_bin32_padded(&w, 5, keys, sizeof keys);    /* one byte short */
        if (variant == 2) gs_mp_write_bin(&w, keys, sizeof keys);                /* version 2: no padding */
        if (variant == 3) {
            gs_mp_write_bin32_padded(&w, 6, keys, sizeof keys);
            b.data[10] = 1;                                                      /* padding not zero */
        }
        cr_assert_eq(w.err, GS_OK);
        before = live_heap_blocks();
        gs_status_t st = gs_msg_decode_borrow(b.data, b.len, &m);
        if (variant == 0) {
            cr_assert_eq(st, GS_OK, "%s", gs_last_error());
            cr_assert_eq(m.u.release.n, 256);
            gs_msg_cleanup(&m);
            continue;
        }
        cr_assert_eq(st, GS_ERR_PROTO, "variant %d accepted", variant);
        cr_assert_eq(live_heap_blocks(), before);
        if (variant == 3) {
            cr_assert(strstr(gs_last_error(), "keys: byte 0 of its 6 bytes of alignment padding is not zero") != NULL,
                      "%s", gs_last_error());
        } else {
            cr_assert(strstr(gs_last_error(), "of padding (to an 8-byte boundary of the payload) and 256 entries of "
                                              "16 bytes") != NULL,
                      "%s", gs_last_error());
        }
        cr_assert_eq(gs_msg_decode(b.data, b.len, &m), GS_ERR_PROTO);
    }
    gs_buf_cleanup(&b);
    proto_check_no_leaks();
}
