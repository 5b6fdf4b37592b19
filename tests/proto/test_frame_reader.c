#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "common/alloc.h"
#include "proto/msg.h"
#include "samples.h"

/* Every sample frame back to back, and the payload offsets/lengths to expect. */
typedef struct stream {
    gs_buf_t bytes;
    size_t off[GS_MSG_TYPE_MAX];
    size_t len[GS_MSG_TYPE_MAX];
    unsigned n;
} stream_t;

static void build_stream(stream_t *s)
{
    memset(s, 0, sizeof *s);
    gs_buf_init(&s->bytes);
    for (uint32_t t = GS_MSG_HELLO; t < GS_MSG_TYPE_MAX; t++) {
        size_t start = s->bytes.len;
        sample_frame(t, &s->bytes);
        s->off[s->n] = start + 4;
        s->len[s->n] = s->bytes.len - start - 4;
        s->n++;
    }
}

/* Take out every complete payload, checking it against the stream. */
static void drain(gs_frame_reader_t *r, const stream_t *s, unsigned *got)
{
    const uint8_t *p;
    size_t len;
    gs_status_t st;
    while ((st = gs_frame_reader_next(r, &p, &len)) == GS_OK) {
        cr_assert_lt(*got, s->n);
        cr_assert_eq(len, s->len[*got], "frame %u: %zu bytes, expected %zu", *got, len, s->len[*got]);
        cr_assert(memcmp(p, s->bytes.data + s->off[*got], len) == 0, "frame %u differs", *got);
        gs_msg_t m;
        cr_assert_eq(gs_msg_decode(p, len, &m), GS_OK);
        cr_assert_eq(m.type, GS_MSG_HELLO + *got);
        gs_msg_cleanup(&m);
        (*got)++;
    }
    cr_assert_eq(st, GS_INPROGRESS);
}

Test(proto_frame, reassembles_frames_fed_byte_by_byte)
{
    stream_t s;
    gs_frame_reader_t r;
    unsigned got = 0;
    build_stream(&s);
    gs_frame_reader_init(&r, 0);
    for (size_t i = 0; i < s.bytes.len; i++) {
        cr_assert_eq(gs_frame_reader_feed(&r, s.bytes.data + i, 1), GS_OK);
        drain(&r, &s, &got);
    }
    cr_assert_eq(got, s.n);
    gs_frame_reader_cleanup(&r);
    gs_buf_cleanup(&s.bytes);
    proto_check_no_leaks();
}

Test(proto_frame, reassembles_frames_under_random_splits)
{
    stream_t s;
    uint64_t seed = 77;
    build_stream(&s);
    for (int round = 0; round < 300; round++) {
        gs_frame_reader_t r;
        unsigned got = 0;
        size_t i = 0;
        gs_frame_reader_init(&r, 0);
        while (i < s.bytes.len) {
            uint64_t x = test_rand(&seed);
            size_t n = (size_t)(x % 4 == 0 ? x % 9000 : x % 40);
            if (n > s.bytes.len - i) n = s.bytes.len - i;
            cr_assert_eq(gs_frame_reader_feed(&r, s.bytes.data + i, n), GS_OK);
            i += n;
            drain(&r, &s, &got);
        }
        cr_assert_eq(got, s.n);
        gs_frame_reader_cleanup(&r);
    }
    /* all at once */
    gs_frame_reader_t r;
    unsigned got = 0;
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_feed(&r, s.bytes.data, s.bytes.len), GS_OK);
    drain(&r, &s, &got);
    cr_assert_eq(got, s.n);
    gs_frame_reader_cleanup(&r);
    gs_buf_cleanup(&s.bytes);
    proto_check_no_leaks();
}

Test(proto_frame, refuses_oversize_header_before_buffering_the_frame)
{
    gs_frame_reader_t r;
    const uint8_t *p;
    size_t len;
    uint8_t hdr[4] = {101, 0, 0, 0};
    gs_frame_reader_init(&r, 100);
    cr_assert_eq(gs_frame_reader_feed(&r, hdr, 3), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    cr_assert_eq(gs_frame_reader_feed(&r, hdr + 3, 1), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_ERR_MSG_TOO_LARGE);
    cr_assert(strstr(gs_last_error(), "101") != NULL, "%s", gs_last_error());
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_ERR_MSG_TOO_LARGE);  /* stays unusable */
    cr_assert_leq(r.buf.cap, 4096);
    gs_frame_reader_cleanup(&r);

    /* the default limit: a 4 GiB announcement */
    uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(r.max_frame, GS_PROTO_DEFAULT_MAX_FRAME);
    cr_assert_eq(gs_frame_reader_feed(&r, huge, 4), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_ERR_MSG_TOO_LARGE);
    gs_frame_reader_cleanup(&r);
    proto_check_no_leaks();
}

Test(proto_frame, accepts_frame_of_exactly_the_limit_and_empty_frames)
{
    gs_frame_reader_t r;
    const uint8_t *p;
    size_t len;
    uint8_t frame[4 + 100] = {100, 0, 0, 0};
    memset(frame + 4, 0x5a, 100);
    gs_frame_reader_init(&r, 100);
    cr_assert_eq(gs_frame_reader_feed(&r, frame, sizeof frame), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_OK);
    cr_assert_eq(len, 100);
    cr_assert_eq(p[99], 0x5a);
    cr_assert_eq(gs_frame_reader_feed(&r, "\0\0\0\0", 4), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_OK);
    cr_assert_eq(len, 0);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    gs_frame_reader_cleanup(&r);
    proto_check_no_leaks();
}

Test(proto_frame, feed_out_of_memory_leaves_reader_unchanged)
{
    stream_t s;
    gs_frame_reader_t r;
    unsigned got = 0;
    build_stream(&s);
    gs_frame_reader_init(&r, 0);
    /* half of the stream in, then a failed feed, then the rest */
    size_t half = s.bytes.len / 2;
    cr_assert_eq(gs_frame_reader_feed(&r, s.bytes.data, half), GS_OK);
    drain(&r, &s, &got);
    gs_alloc_fail_after(0);
    gs_status_t st = gs_frame_reader_feed(&r, s.bytes.data + half, s.bytes.len - half);
    gs_alloc_fail_after(-1);
    cr_assert_eq(st, GS_ERR_NO_MEMORY);
    drain(&r, &s, &got);
    cr_assert_eq(gs_frame_reader_feed(&r, s.bytes.data + half, s.bytes.len - half), GS_OK);
    drain(&r, &s, &got);
    cr_assert_eq(got, s.n);
    gs_frame_reader_cleanup(&r);
    gs_buf_cleanup(&s.bytes);
    proto_check_no_leaks();
}

Test(proto_frame, releases_a_large_buffer_once_drained)
{
    gs_frame_reader_t r;
    const uint8_t *p;
    size_t len;
    size_t big = 8u << 20;
    uint8_t *frame = gs_malloc(big + 4, "test frame");
    cr_assert_not_null(frame);
    memset(frame, 0, big + 4);
    frame[0] = (uint8_t)big;
    frame[1] = (uint8_t)(big >> 8);
    frame[2] = (uint8_t)(big >> 16);
    frame[3] = (uint8_t)(big >> 24);
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_feed(&r, frame, big + 4), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_OK);
    cr_assert_eq(len, big);
    cr_assert_geq(r.buf.cap, big);
    cr_assert_eq(gs_frame_reader_feed(&r, "\1\0\0\0", 4), GS_OK);
    cr_assert_lt(r.buf.cap, big);
    cr_assert_eq(gs_frame_storage_spare(), big + 4, "the large buffer became this thread's spare");
    gs_frame_storage_trim();
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    gs_frame_reader_cleanup(&r);
    gs_free(frame);
    proto_check_no_leaks();
}

/* ---- large frames: exact reservation, receiving in place, retention, detach ---- */

/* A frame of @a n payload bytes (pattern seeded by @a seed) into a fresh gs_malloc'ed block. */
static uint8_t *big_frame(size_t n, unsigned seed)
{
    uint8_t *f = gs_malloc(n + 4, "test frame");
    cr_assert_not_null(f);
    f[0] = (uint8_t)n;
    f[1] = (uint8_t)(n >> 8);
    f[2] = (uint8_t)(n >> 16);
    f[3] = (uint8_t)(n >> 24);
    for (size_t k = 0; k < n; k++) f[4 + k] = (uint8_t)(k * 31 + seed);
    return f;
}

static void expect_payload(gs_frame_reader_t *r, const uint8_t *frame, size_t n)
{
    const uint8_t *p;
    size_t len;
    cr_assert_eq(gs_frame_reader_next(r, &p, &len), GS_OK);
    cr_assert_eq(len, n);
    cr_assert(memcmp(p, frame + 4, n) == 0, "payload differs");
}

/* The next large frame @a f (payload @a n bytes), fed in two reads as large frames arrive, is
 * received into the spare at @a mem, which leaves the thread's spares. */
static void expect_spare_reused(gs_frame_reader_t *r, const uint8_t *f, size_t n, const uint8_t *mem)
{
    const uint8_t *p;
    size_t len;
    cr_assert_eq(gs_frame_reader_feed(r, f, 1000), GS_OK);
    cr_assert_eq(gs_frame_reader_next(r, &p, &len), GS_INPROGRESS);
    cr_assert_eq(r->buf.data, mem, "the spare was reused");
    cr_assert_eq(gs_frame_storage_spare(), 0);
    cr_assert_eq(gs_frame_reader_feed(r, f + 1000, n + 4 - 1000), GS_OK);
    expect_payload(r, f, n);
}

Test(proto_frame, reserves_a_large_frame_once_and_receives_it_in_place)
{
    gs_frame_reader_t r;
    const uint8_t *p;
    size_t len, n = (6u << 20) + 123, off = 65536;
    uint8_t *f = big_frame(n, 1), *space = NULL, *base;
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_space(&r, 65536, &space), 0, "nothing announced yet");
    cr_assert_eq(gs_frame_reader_feed(&r, f, off), GS_OK);
    cr_assert_eq(gs_frame_reader_space(&r, 65536, &space), 0, "not reserved before next() saw the header");
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    cr_assert_eq(r.buf.cap, n + 4 + 8, "reserved exactly the frame and 8 bytes to align it: %zu", r.buf.cap);
    base = r.buf.data;
    size_t pos0 = r.pos;   /* where the frame was aligned, once */
    /* the rest arrives in uneven pieces written straight into the reader */
    for (size_t piece = 1; off < n + 4; piece = piece * 3 + 7) {
        cr_assert_eq(r.pos, pos0, "the received bytes were moved again");
        size_t want = gs_frame_reader_space(&r, 65536, &space);
        cr_assert_eq(want, n + 4 - off);
        cr_assert_eq(space, r.buf.data + r.buf.len);
        size_t k = piece < want ? piece : want;
        memcpy(space, f + off, k);
        gs_frame_reader_commit(&r, k);
        off += k;
        if (off < n + 4) cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    }
    cr_assert_eq(gs_frame_reader_space(&r, 65536, &space), 0, "complete: no space handed out");
    expect_payload(&r, f, n);
    cr_assert_eq(r.buf.data, base, "never moved or grown after the reservation");
    cr_assert_eq(r.buf.cap, n + 4 + 8);
    cr_assert_eq((uintptr_t)(r.buf.data + r.pos - n) & 7u, 0, "the payload starts at an 8-byte boundary");
    gs_frame_reader_cleanup(&r);
    gs_free(f);
    proto_check_no_leaks();
}

Test(proto_frame, large_frame_in_one_piece_or_many_pieces_never_overallocates)
{
    size_t n = (5u << 20) + 1;
    uint8_t *f = big_frame(n, 2);
    uint64_t rng = 7;
    for (int mode = 0; mode < 3; mode++) {
        gs_frame_reader_t r;
        const uint8_t *p;
        size_t len, off = 0, pos_seen = SIZE_MAX;
        gs_frame_reader_init(&r, 0);
        while (off < n + 4) {
            size_t k = mode == 0 ? n + 4 : mode == 1 ? 1 + test_rand(&rng) % 70000 : 1 + test_rand(&rng) % 5;
            if (mode == 2 && off > 4096) k = n + 4 - off;  /* byte-wise header, then the rest */
            if (k > n + 4 - off) k = n + 4 - off;
            cr_assert_eq(gs_frame_reader_feed(&r, f + off, k), GS_OK);
            off += k;
            if (off < n + 4) cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
            if (off >= 4 && off < n + 4) {
                /* aligned when the header was seen, never moved again */
                if (pos_seen == SIZE_MAX) pos_seen = r.pos;
                cr_assert_eq(r.pos, pos_seen, "mode %d: received bytes moved again at %zu", mode, off);
                cr_assert_eq((uintptr_t)(r.buf.data + r.pos + 4) & 7u, 0, "mode %d: payload not aligned", mode);
            }
            cr_assert_leq(r.buf.cap, n + 4 + 8, "mode %d: buffer of %zu for a frame of %zu (and 8 to align it)", mode,
                          r.buf.cap, n + 4);
        }
        expect_payload(&r, f, n);
        cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
        gs_frame_reader_cleanup(&r);
    }
    gs_free(f);
    proto_check_no_leaks();
}

Test(proto_frame, keeps_a_drained_large_buffer_for_the_next_large_frame)
{
    gs_frame_reader_t r;
    size_t n = 6u << 20;
    uint8_t *f1 = big_frame(n, 3), *f2 = big_frame(n - 1000, 4);
    uint8_t *base;
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_feed(&r, f1, n + 4), GS_OK);
    expect_payload(&r, f1, n);
    base = r.buf.data;
    cr_assert_eq(gs_frame_reader_retained(&r), n + 4);
    size_t heap0 = live_heap_blocks();
    cr_assert_eq(gs_frame_reader_feed(&r, f2, 65536), GS_OK);
    const uint8_t *p;
    size_t len;
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    cr_assert_eq(r.buf.data, base, "the retained buffer is reused");
    cr_assert_eq(r.buf.cap, n + 4, "and not grown: it is larger than the new frame");
    cr_assert_eq(live_heap_blocks(), heap0, "no new allocation");
    cr_assert_eq(gs_frame_reader_retained(&r), 0, "in use, not retained");
    cr_assert_eq(gs_frame_reader_feed(&r, f2 + 65536, n - 1000 + 4 - 65536), GS_OK);
    expect_payload(&r, f2, n - 1000);
    /* idle: trim releases it to the thread's spares (which the connection's timer trims too) */
    gs_frame_reader_trim(&r);
    cr_assert_null(r.buf.data);
    cr_assert_eq(gs_frame_reader_retained(&r), 0);
    cr_assert_eq(gs_frame_storage_spare(), n + 4, "kept as a spare for the next large frame");
    gs_frame_storage_trim();
    gs_frame_reader_cleanup(&r);
    gs_free(f1);
    gs_free(f2);
    proto_check_no_leaks();
}

Test(proto_frame, small_frame_after_a_large_one_releases_the_buffer_even_when_split)
{
    gs_frame_reader_t r;
    const uint8_t *p;
    size_t len, n = 5u << 20;
    uint8_t *f = big_frame(n, 5), *small = big_frame(10, 6);
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_feed(&r, f, n + 4), GS_OK);
    expect_payload(&r, f, n);
    /* the small frame's header arrives one byte at a time: it lands in the large buffer ... */
    for (size_t k = 0; k < 14; k++) {
        cr_assert_eq(gs_frame_reader_feed(&r, small + k, 1), GS_OK);
        if (k < 13) cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    }
    expect_payload(&r, small, 10);
    cr_assert_eq(gs_frame_reader_retained(&r), n + 4, "held until the next bytes (or a trim)");
    /* ... and the next bytes start over in a small buffer */
    cr_assert_eq(gs_frame_reader_feed(&r, small, 14), GS_OK);
    cr_assert_leq(r.buf.cap, 4096u);
    expect_payload(&r, small, 10);
    /* trim leaves buffered bytes alone */
    cr_assert_eq(gs_frame_reader_feed(&r, f, 100), GS_OK);
    gs_frame_reader_trim(&r);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    cr_assert_eq(gs_frame_reader_feed(&r, f + 100, n + 4 - 100), GS_OK);
    expect_payload(&r, f, n);
    gs_frame_reader_cleanup(&r);
    gs_free(f);
    gs_free(small);
    proto_check_no_leaks();
}

Test(proto_frame, space_is_refused_for_small_oversize_or_complete_frames)
{
    gs_frame_reader_t r;
    const uint8_t *p;
    size_t len;
    uint8_t *space = NULL;
    uint8_t *small = big_frame(1000, 7), *big = big_frame(200000, 8);
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_feed(&r, small, 10), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    cr_assert_eq(gs_frame_reader_space(&r, 65536, &space), 0, "a small frame goes through feed");
    cr_assert_gt(gs_frame_reader_space(&r, 0, &space), 0, "unless the caller asks for any size");
    cr_assert_eq(gs_frame_reader_feed(&r, small + 10, 994), GS_OK);
    expect_payload(&r, small, 1000);
    gs_frame_reader_cleanup(&r);
    /* over the limit: no space, no reservation */
    space = NULL;
    gs_frame_reader_init(&r, 100000);
    cr_assert_eq(gs_frame_reader_feed(&r, big, 4), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_ERR_MSG_TOO_LARGE);
    cr_assert_eq(gs_frame_reader_space(&r, 0, &space), 0);
    cr_assert_lt(r.buf.cap, 200000u);
    cr_assert_null(space);
    gs_frame_reader_cleanup(&r);
    gs_free(small);
    gs_free(big);
    proto_check_no_leaks();
}

Test(proto_frame, reservation_out_of_memory_is_reported)
{
    gs_frame_reader_t r;
    const uint8_t *p;
    size_t len;
    uint8_t *f = big_frame(5u << 20, 9);
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_feed(&r, f, 100), GS_OK);
    gs_alloc_fail_after(0);
    gs_status_t st = gs_frame_reader_next(&r, &p, &len);
    gs_alloc_fail_after(-1);
    cr_assert_eq(st, GS_ERR_NO_MEMORY);
    /* nothing lost: it can still complete once memory is back */
    cr_assert_eq(gs_frame_reader_feed(&r, f + 100, (5u << 20) + 4 - 100), GS_OK);
    expect_payload(&r, f, 5u << 20);
    gs_frame_reader_cleanup(&r);
    gs_free(f);
    proto_check_no_leaks();
}

Test(proto_frame, detach_hands_over_the_payload_and_keeps_the_following_bytes)
{
    gs_frame_reader_t r;
    const uint8_t *p;
    size_t len, n = 5u << 20;
    gs_frame_storage_t *storage = NULL;
    uint8_t *f = big_frame(n, 10), *small = big_frame(20, 11);
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_detach(&r, &storage), GS_ERR_INVALID_PARAM, "nothing handed out yet");
    cr_assert_eq(gs_frame_reader_feed(&r, f, n + 4), GS_OK);
    cr_assert_eq(gs_frame_reader_feed(&r, small, 10), GS_OK);  /* the next frame's start */
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_OK);
    cr_assert_eq(len, n);
    /* out of memory (for the handle, then for the following bytes): nothing changes */
    for (long k = 0; k < 2; k++) {
        gs_alloc_fail_after(k);
        cr_assert_eq(gs_frame_reader_detach(&r, &storage), GS_ERR_NO_MEMORY);
        gs_alloc_fail_after(-1);
        cr_assert_null(storage);
    }
    cr_assert_eq(gs_frame_reader_detach(&r, &storage), GS_OK);
    cr_assert_not_null(storage);
    cr_assert_eq(gs_frame_reader_detach(&r, &storage), GS_ERR_INVALID_PARAM, "only once");
    cr_assert_eq(gs_frame_reader_retained(&r), 0);
    /* the reader goes on with the next frame; the payload lives in the detached storage */
    cr_assert_eq(gs_frame_reader_feed(&r, small + 10, 14), GS_OK);
    expect_payload(&r, small, 20);
    cr_assert(memcmp(p, f + 4, n) == 0, "detached payload intact");
    gs_frame_storage_free(storage);
    gs_frame_storage_trim();
    gs_frame_reader_cleanup(&r);
    gs_free(f);
    gs_free(small);
    proto_check_no_leaks();
}

Test(proto_frame, freed_large_storage_is_reused_by_the_next_large_frame_then_trimmed)
{
    gs_frame_reader_t r;
    const uint8_t *p;
    size_t len, n = 6u << 20;
    gs_frame_storage_t *s1 = NULL, *s2 = NULL;
    uint8_t *f = big_frame(n, 12), *g = big_frame(n + 4096, 13), *small = big_frame(100, 14), *mem;
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_storage_spare(), 0);
    /* in two reads, as a large frame arrives: the whole frame and 8 bytes to align its payload
     * are reserved once (whether a buffer grows in place is the allocator's business: glibc's
     * mremap often does, ASan's never) */
    cr_assert_eq(gs_frame_reader_feed(&r, f, 1000), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    cr_assert_eq(gs_frame_reader_feed(&r, f + 1000, n + 4 - 1000), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_OK);
    mem = r.buf.data;
    cr_assert_eq(gs_frame_reader_detach(&r, &s1), GS_OK);
    gs_frame_storage_free(s1);
    cr_assert_eq(gs_frame_storage_spare(), n + 4 + 8, "kept as the spare");
    /* the next large frame lands in it */
    expect_spare_reused(&r, f, n, mem);
    cr_assert_eq(gs_frame_reader_detach(&r, &s1), GS_OK);
    gs_frame_storage_free(s1);
    /* a larger frame grows the spare */
    cr_assert_eq(gs_frame_reader_feed(&r, g, 1000), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    cr_assert_eq(r.buf.cap, n + 4096 + 4 + 8, "announced size and 8 bytes to align it");
    cr_assert_eq(gs_frame_storage_spare(), 0);
    cr_assert_eq(gs_frame_reader_feed(&r, g + 1000, n + 4096 + 4 - 1000), GS_OK);
    expect_payload(&r, g, n + 4096);
    cr_assert_eq(gs_frame_reader_detach(&r, &s1), GS_OK);
    /* small storage is freed at once */
    cr_assert_eq(gs_frame_reader_feed(&r, small, 104), GS_OK);
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_OK);
    cr_assert_eq(gs_frame_reader_detach(&r, &s2), GS_OK);
    gs_frame_storage_free(s2);
    cr_assert_eq(gs_frame_storage_spare(), 0);
    gs_frame_storage_free(s1);
    cr_assert_eq(gs_frame_storage_spare(), n + 4096 + 4 + 8);
    gs_frame_storage_trim();
    /* at most 16 spares: a smaller 17th is freed, a larger one replaces the smallest */
    {
        gs_frame_storage_t *held[18];
        size_t sz[18], sum = 0;
        for (int k = 0; k < 18; k++) {
            sz[k] = k == 16 ? (4u << 20) + 1 : (5u << 20) + (size_t)k * 1000;
            if (k == 17) sz[k] = 6u << 20;
            uint8_t *h = big_frame(sz[k], 20 + (unsigned)k);
            cr_assert_eq(gs_frame_reader_feed(&r, h, sz[k] + 4), GS_OK);
            cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_OK);
            cr_assert_eq(gs_frame_reader_detach(&r, &held[k]), GS_OK);
            gs_free(h);
            if (k < 16) sum += sz[k] + 4;
        }
        for (int k = 0; k < 16; k++) gs_frame_storage_free(held[k]);
        cr_assert_eq(gs_frame_storage_spare(), sum);
        gs_frame_storage_free(held[16]);
        cr_assert_eq(gs_frame_storage_spare(), sum, "smaller than every spare: freed");
        gs_frame_storage_free(held[17]);
        cr_assert_eq(gs_frame_storage_spare(), sum - (sz[0] + 4) + sz[17] + 4, "replaced the smallest");
        gs_frame_storage_trim();
    }
    gs_frame_storage_free(NULL);
    gs_frame_storage_trim();
    cr_assert_eq(gs_frame_storage_spare(), 0);
    gs_frame_reader_cleanup(&r);
    gs_free(f);
    gs_free(g);
    gs_free(small);
    proto_check_no_leaks();
}

Test(proto_frame, a_drained_mid_size_buffer_becomes_a_spare_the_next_frame_reuses)
{
    /* a budgeted connection shrinks its drained reader after every read: a buffer of a frame
     * between 64 KiB and 4 MiB (a batch of completions) goes to the thread's spares, and the
     * next such frame is received into it instead of fresh pages */
    gs_frame_reader_t r;
    size_t n = 200u << 10, cap;
    uint8_t *f = big_frame(n, 31), *mem;
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_feed(&r, f, n + 4), GS_OK);
    expect_payload(&r, f, n);
    mem = r.buf.data;
    cap = r.buf.cap;
    cr_assert_eq(gs_frame_reader_shrink(&r, 16u << 10), cap);
    cr_assert_eq(gs_frame_storage_spare(), cap, "kept as a spare");
    expect_spare_reused(&r, f, n, mem);
    /* a small buffer is not kept */
    gs_frame_reader_cleanup(&r);
    gs_frame_reader_init(&r, 0);
    cr_assert_eq(gs_frame_reader_feed(&r, f, 1000), GS_OK);
    cr_assert_eq(gs_frame_reader_shrink(&r, 16), 0, "not drained: kept");
    gs_frame_reader_cleanup(&r);
    gs_frame_storage_trim();
    gs_free(f);
    proto_check_no_leaks();
}

Test(proto_frame, take_and_give_move_buffers_in_and_out_of_the_spares)
{
    size_t cap = 0;
    uint8_t *a = gs_malloc(1u << 20, "test spare"), *small = gs_malloc(1000, "test small"), *got;
    cr_assert_not_null(a);
    cr_assert_not_null(small);
    cr_assert_null(gs_frame_storage_take(1u << 18, &cap), "no spare yet");
    gs_frame_storage_give(a, 1u << 20);
    gs_frame_storage_give(small, 1000);
    gs_frame_storage_give(NULL, 1u << 20);
    cr_assert_eq(gs_frame_storage_spare(), 1u << 20, "the small buffer was freed");
    cr_assert_null(gs_frame_storage_take(GS_FRAME_SPARE_MIN, &cap), "small requests take none");
    cr_assert_null(gs_frame_storage_take(2u << 20, &cap), "none large enough");
    cr_assert_null(gs_frame_storage_take(1u << 18, NULL));
    got = gs_frame_storage_take(1u << 18, &cap);
    cr_assert_eq(got, a);
    cr_assert_eq(cap, 1u << 20);
    cr_assert_eq(gs_frame_storage_spare(), 0);
    gs_free(got);
    proto_check_no_leaks();
}

Test(proto_frame, encode_spare_encodes_a_large_frame_into_a_spare)
{
    gs_msg_t m;
    gs_buf_t plain, b;
    size_t n = 300u << 10;
    uint8_t *chunk = gs_calloc(1, n, "test chunk"), *spare = gs_malloc(1u << 20, "test spare");
    cr_assert_not_null(chunk);
    cr_assert_not_null(spare);
    memset(&m, 0, sizeof m);
    m.type = GS_MSG_DATA;
    m.u.data.req_id = 7;
    m.u.data.data.data = chunk;
    m.u.data.data.len = n;
    gs_buf_init(&plain);
    cr_assert_eq(gs_msg_encode(&m, &plain), GS_OK);
    gs_frame_storage_give(spare, 1u << 20);
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode_spare(&m, &b), GS_OK);
    cr_assert_eq(b.data, spare, "encoded into the spare");
    cr_assert_eq(b.cap, 1u << 20);
    cr_assert_eq(b.len, plain.len);
    cr_assert(memcmp(b.data, plain.data, plain.len) == 0, "the same bytes as gs_msg_encode");
    cr_assert_eq(gs_msg_encode_spare(&m, &b), GS_ERR_INVALID_PARAM, "needs an empty buffer");
    gs_frame_storage_give(b.data, b.cap);
    /* a small frame takes no spare */
    m.u.data.data.len = 100;
    gs_buf_init(&b);
    cr_assert_eq(gs_msg_encode_spare(&m, &b), GS_OK);
    cr_assert_neq(b.data, spare);
    cr_assert_eq(gs_frame_storage_spare(), 1u << 20);
    gs_buf_cleanup(&b);
    gs_buf_cleanup(&plain);
    gs_frame_storage_trim();
    gs_free(chunk);
    proto_check_no_leaks();
}
