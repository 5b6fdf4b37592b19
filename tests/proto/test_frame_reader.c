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
    cr_assert_eq(gs_frame_reader_next(&r, &p, &len), GS_INPROGRESS);
    gs_frame_reader_cleanup(&r);
    gs_free(frame);
    proto_check_no_leaks();
}
